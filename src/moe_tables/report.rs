//! Reports: the gate's table, the seed's mismatch lines, and on divergence a
//! reproduction (a command and a `#[test]` body to paste).

use super::generate::{CaseData, CaseSpec, WeightMix};
use super::judge::{Entry, Verdict};
use std::fmt::Write;

/// The gate's table header.
pub fn table_header() -> String {
    format!(
        "{:<28} {:>7} {:>6} {:>12} {:>6} {:>13} {:>13}  {}",
        "case", "experts", "pairs", "max offset", "macros", "ptrs equal", "scales equal", "result"
    )
}

/// The largest `e * stride` of an in-range pair, in GiB (what the case
/// puts past 4 GiB, or not).
pub fn max_offset_gib(data: &CaseData) -> f64 {
    let mut max = 0u128;
    for &e in &data.experts {
        if e >= 0 && (e as usize) < data.n_expert {
            for s in data.slabs {
                max = max.max(e as u128 * u128::from(s.stride));
            }
        }
    }
    max as f64 / (1u64 << 30) as f64
}

/// One table row.
pub fn table_row(label: &str, data: &CaseData, v: &Verdict) -> String {
    let (ptrs, scales) = match (&v.want_err, &v.got_err) {
        (None, None) => (
            format!("{}/{}", v.compared - v.ptr_mismatches, v.compared),
            format!("{}/{}", v.compared - v.scale_mismatches, v.compared),
        ),
        _ => ("refused".into(), "refused".into()),
    };
    let mut row = format!(
        "{:<28} {:>7} {:>6} {:>8.2} GiB {:>6} {:>13} {:>13}  {}",
        label,
        data.n_expert,
        data.experts.len(),
        max_offset_gib(data),
        if data.macros.is_some() { "yes" } else { "no" },
        ptrs,
        scales,
        if v.pass() { "PASS" } else { "FAIL" }
    );
    if let Some(e) = &v.want_err {
        let _ = write!(row, "\n    oracle: {e}");
    }
    if let Some(e) = &v.got_err {
        let _ = write!(row, "\n    device: {e}");
    }
    row
}

/// The seed's mismatch lines: plane, pair, expert, host, device, delta.
pub fn mismatch_lines(label: &str, v: &Verdict) -> String {
    let mut s = String::new();
    for m in &v.first {
        let (plane, pair, expert) = (m.plane.name(), m.pair, m.expert);
        match m.entry {
            Entry::Ptr { host, dev } => {
                let _ = writeln!(
                    s,
                    "  [{label}] PTR MISMATCH plane={plane} pair={pair} expert={expert} host=0x{host:x} dev=0x{dev:x} (delta={})",
                    dev.wrapping_sub(host) as i64
                );
            }
            Entry::Scale { host, dev } => {
                let _ = writeln!(
                    s,
                    "  [{label}] SCL MISMATCH plane={plane} pair={pair} expert={expert} host={host:e} (0x{:08X}) dev={dev:e} (0x{:08X}) (delta={} in bits)",
                    host.to_bits(),
                    dev.to_bits(),
                    i64::from(dev.to_bits()) - i64::from(host.to_bits())
                );
            }
        }
    }
    let shown = v.first.len();
    let total = v.ptr_mismatches + v.scale_mismatches;
    if total > shown {
        let _ = writeln!(s, "  [{label}] ... {} more", total - shown);
    }
    s
}

fn slab_list(spec: &CaseSpec, f: impl Fn(&oracle::moe_tables::Slab) -> u64) -> String {
    spec.slabs
        .iter()
        .map(|s| format!("0x{:x}", f(s)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The command that reruns one case: `kernel-oracle case moe-tables ...`
/// with the candidate's variable, the program as
/// [`crate::paths::rerun_prefix`] prints it.
pub fn repro_command(spec: &CaseSpec) -> String {
    let mut s = format!(
        "{}{} case moe-tables --n-expert {} --n-pairs {} --bases {} --strides {} --layer {} --seed 0x{:016x}",
        crate::candidate_env(device::cuda::ENV_MOE_TABLES_CU),
        crate::paths::rerun_prefix(),
        spec.n_expert,
        spec.n_pairs,
        slab_list(spec, |s| s.base),
        slab_list(spec, |s| s.stride),
        spec.layer,
        spec.seed
    );
    if spec.macros {
        s.push_str(" --macros");
    }
    if spec.bad_ids != 0 {
        let _ = write!(s, " --bad-ids {}", spec.bad_ids);
    }
    if spec.weights == WeightMix::Special {
        s.push_str(" --special-weights");
    }
    if spec.one_cta {
        s.push_str(" --one-cta");
    }
    s
}

/// The `CaseSpec` as a Rust literal, for a regression test.
pub fn spec_literal(spec: &CaseSpec) -> String {
    let slabs = spec
        .slabs
        .iter()
        .map(|s| format!("Slab {{ base: 0x{:x}, stride: 0x{:x} }}", s.base, s.stride))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "CaseSpec {{ n_expert: {}, n_pairs: {}, slabs: [{slabs}], macros: {}, layer: {}, bad_ids: {}, weights: WeightMix::{:?}, one_cta: {}, seed: 0x{:016x} }}",
        spec.n_expert, spec.n_pairs, spec.macros, spec.layer, spec.bad_ids, spec.weights, spec.one_cta, spec.seed
    )
}

/// The full divergence report: what differs, where, both values, and how
/// to reproduce it.
pub fn divergence(spec: &CaseSpec, v: &Verdict, source: &str, artifact: Option<&str>) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "moe_tables DIVERGENCE, kernel source: {source}");
    let _ = writeln!(
        r,
        "  case: {} (bound: pointers equal, scales bit-identical, refusals identical)",
        spec_literal(spec)
    );
    let _ = writeln!(
        r,
        "  oracle: {}",
        v.want_err
            .map_or("tables".to_string(), |e| format!("refused: {e}"))
    );
    let _ = writeln!(
        r,
        "  device: {}",
        v.got_err
            .clone()
            .map_or("tables".to_string(), |e| format!("error: {e}"))
    );
    if v.want_err.is_none() && v.got_err.is_none() {
        let _ = writeln!(
            r,
            "  {} of {} pointers and {} of {} scales differ",
            v.ptr_mismatches, v.compared, v.scale_mismatches, v.compared
        );
        r.push_str(&mismatch_lines("fuzz", v));
    }
    let _ = writeln!(r, "rerun: {}", repro_command(spec));
    if let Some(a) = artifact {
        r += &crate::fuzz_rerun_lines(
            "",
            &crate::candidate_env(device::cuda::ENV_MOE_TABLES_CU),
            "moe_tables",
            a,
        );
    }
    let _ = writeln!(
        r,
        "regression test (paste into tests/moe_tables_regressions.rs, with\n\
         `use kernel_oracle::moe_tables::{{CaseSpec, WeightMix}}; use oracle::moe_tables::Slab;`):\n\
         #[test]\n#[ignore = \"needs a CUDA device\"]\n\
         fn moe_tables_seed_{:016x}() {{\n    kernel_oracle::moe_tables::check(&{});\n}}",
        spec.seed,
        spec_literal(spec)
    );
    r
}
