//! Reports: the gate's table, mismatch lines with coordinates, and on
//! divergence a reproduction (a command and a `#[test]` body to paste).

use super::generate::CaseSpec;
use super::judge::{Bits, Diff};
use oracle::gdn::{GdnShape, D_STATE};
use std::fmt::Write;

/// One row of a table: one comparison (all its outputs) of one case.
#[derive(Clone, Debug)]
pub struct Row {
    /// 1: packed against chained launches (the seed's check); 2: kernels
    /// against the core oracle.
    pub gate: u8,
    /// What is compared with what (`"packed == chained"`).
    pub label: &'static str,
    /// The case.
    pub spec: CaseSpec,
    /// The comparison rule.
    pub rule: Bits,
    /// One entry per compared output.
    pub diffs: Vec<Diff>,
    /// A device error instead of outputs.
    pub error: Option<String>,
}

impl Row {
    /// Whether the row passes: no error and nothing differs.
    pub fn pass(&self) -> bool {
        self.error.is_none() && !self.diffs.is_empty() && self.diffs.iter().all(Diff::pass)
    }
}

/// The gate's table header.
pub fn table_header() -> String {
    format!(
        "{:<4} {:<52} {:>5} {:>5} {:>2} {:>3} {:>7} {:>11} {:>9}  {}",
        "gate", "comparison", "num_k", "num_v", "dc", "t", "outputs", "words", "differ", "result"
    )
}

/// One table row (and, on failure, its mismatch lines).
pub fn table_row(row: &Row) -> String {
    let words: usize = row.diffs.iter().map(|d| d.len).sum();
    let differ: usize = row.diffs.iter().map(|d| d.diffs).sum();
    let s = &row.spec;
    let mut out = format!(
        "{:<4} {:<52} {:>5} {:>5} {:>2} {:>3} {:>7} {:>11} {:>9}  {}",
        row.gate,
        row.label,
        s.num_k,
        s.num_v,
        s.d_conv,
        s.t,
        row.diffs.len(),
        words,
        differ,
        if row.pass() { "PASS" } else { "FAIL" }
    );
    if let Some(e) = &row.error {
        let _ = write!(out, "\n    device error: {e}");
    }
    if !row.pass() {
        if let Ok(shape) = s.shape() {
            out.push_str(&mismatch_lines(row, &shape));
        }
    }
    out
}

/// Where flat index `i` of the output `what` lies, in the output's own
/// coordinates (row, head, element; `C`, `V`, `P`, `N` as in
/// `oracle::gdn::rows`).
pub fn coordinates(what: &str, i: usize, shape: &GdnShape) -> String {
    let (c, v, p, n) = (
        shape.conv_dim(),
        shape.value_dim(),
        shape.d_conv() - 1,
        shape.state_len(),
    );
    let state = |k: usize| {
        format!(
            "head {}, S[{}][{}]",
            k / (D_STATE * D_STATE),
            k / D_STATE % D_STATE,
            k % D_STATE
        )
    };
    let head = |k: usize| format!("head {}, element {}", k / D_STATE, k % D_STATE);
    let last = what.rsplit(' ').next().unwrap_or("");
    if what.ends_with("conv outputs") || what.ends_with("conv out") {
        format!("row {}, channel {}", i / c, i % c)
    } else if what.ends_with("scan outputs") || what.ends_with("scan o") {
        format!("row {}, {}", i / v, head(i % v))
    } else if what.ends_with("final state") || what.ends_with("scan state") {
        state(i)
    } else if what.ends_with("ring") {
        format!("channel {}, tap {}", i / p, i % p)
    } else if what.ends_with("conv snapshots") {
        format!(
            "after row {}, channel {}, tap {}",
            i / (c * p),
            i % (c * p) / p,
            i % p
        )
    } else if what.ends_with("state snapshots") {
        format!("after row {}, {}", i / n, state(i % n))
    } else if matches!(last, "q" | "k" | "v") {
        head(i)
    } else {
        format!("head {i}")
    }
}

/// For each failing output of `row`: how many differ, and the first with
/// its coordinates, both values as decimals and bits.
pub fn mismatch_lines(row: &Row, shape: &GdnShape) -> String {
    let mut s = String::new();
    for d in row.diffs.iter().filter(|d| !d.pass()) {
        if let Some(got) = d.got_len {
            let _ = write!(
                s,
                "\n    [{}] {}: {} elements, expected {}",
                row.label, d.what, got, d.len
            );
            continue;
        }
        let _ = write!(
            s,
            "\n    [{}] {}: {} of {} differ ({})",
            row.label,
            d.what,
            d.diffs,
            d.len,
            row.rule.describe()
        );
        if let Some((i, g, w)) = d.first {
            let _ = write!(
                s,
                "; first at {i} ({}): got {g:e} (0x{:08X}), want {w:e} (0x{:08X})",
                coordinates(&d.what, i, shape),
                g.to_bits(),
                w.to_bits()
            );
        }
    }
    s
}

/// The command that reruns one case: `kernel-oracle case gdn ...` with
/// the candidate's variable, the program as
/// [`crate::paths::rerun_prefix`] prints it.
pub fn repro_command(spec: &CaseSpec) -> String {
    let mut s = format!(
        "{}{} case gdn --num-k {} --num-v {} --d-conv {} --t {} --seed 0x{:016x}",
        crate::candidate_env(device::cuda::ENV_GDN_CU),
        crate::paths::rerun_prefix(),
        spec.num_k,
        spec.num_v,
        spec.d_conv,
        spec.t,
        spec.seed
    );
    let def = CaseSpec::seed_like(1, 1, 4, 1, 0);
    if spec.eps.to_bits() != def.eps.to_bits() {
        let _ = write!(s, " --eps {:e}", spec.eps);
    }
    if spec.alpha_spread != def.alpha_spread {
        let _ = write!(s, " --alpha-spread {:e}", spec.alpha_spread);
    }
    if spec.state_spread != def.state_spread {
        let _ = write!(s, " --state-spread {:e}", spec.state_spread);
    }
    if spec.negative_state {
        s.push_str(" --negative-state");
    }
    if spec.zero_qk != 0 {
        let _ = write!(s, " --zero-qk {}", spec.zero_qk);
    }
    if !spec.specials {
        s.push_str(" --no-specials");
    }
    if spec.graph {
        s.push_str(" --graph");
    }
    if spec.batch != 1 {
        let _ = write!(s, " --batch {}", spec.batch);
    }
    s
}

/// The `CaseSpec` as a Rust literal, for a regression test.
pub fn spec_literal(spec: &CaseSpec) -> String {
    format!(
        "CaseSpec {{ num_k: {}, num_v: {}, d_conv: {}, t: {}, eps: f32::from_bits(0x{:08X}), alpha_spread: {:?}, state_spread: {:?}, negative_state: {}, zero_qk: {}, specials: {}, graph: {}, seed: 0x{:016x}, batch: {} }}",
        spec.num_k,
        spec.num_v,
        spec.d_conv,
        spec.t,
        spec.eps.to_bits(),
        spec.alpha_spread,
        spec.state_spread,
        spec.negative_state,
        spec.zero_qk,
        spec.specials,
        spec.graph,
        spec.seed,
        spec.batch
    )
}

/// The full divergence report: every failing row, then how to reproduce.
pub fn divergence(spec: &CaseSpec, rows: &[Row], source: &str, artifact: Option<&str>) -> String {
    let mut r = String::new();
    let _ = writeln!(r, "gdn DIVERGENCE, kernel source: {source}");
    let _ = writeln!(r, "  case: {}", spec_literal(spec));
    let _ = writeln!(r, "{}", table_header());
    for row in rows.iter().filter(|row| !row.pass()) {
        let _ = writeln!(r, "{}", table_row(row));
    }
    let _ = writeln!(r, "rerun: {}", repro_command(spec));
    if let Some(a) = artifact {
        r += &crate::fuzz_rerun_lines(
            "",
            &crate::candidate_env(device::cuda::ENV_GDN_CU),
            "gdn_packed",
            a,
        );
    }
    let _ = writeln!(
        r,
        "regression test (paste into tests/gdn_regressions.rs, with\n\
         `use kernel_oracle::gdn::CaseSpec;`):\n\
         #[test]\n#[ignore = \"needs a CUDA device\"]\n\
         fn gdn_seed_{:016x}() {{\n    kernel_oracle::gdn::check(&{});\n}}",
        spec.seed,
        spec_literal(spec)
    );
    r
}
