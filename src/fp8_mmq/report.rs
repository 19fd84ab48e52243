//! Reports: the gate's table row and, on divergence, a reproduction a kernel
//! engineer can run and paste (cranelift-fuzzgen style).

use super::generate::{Arm, CaseSpec, Knobs};
use super::judge::{schedule_list, Verdict, RANDOM_RMS_REL_BOUND, RANDOM_RMS_REL_MIN_OUTPUTS};
use oracle::compare::Mismatch;
use std::fmt::Write;

/// The gate's table header (seed 000's columns, then where the time went:
/// the oracle's answer, and the device side from first upload to last
/// download, in milliseconds). `codes` counts the e4m3 weight codes the
/// kernel's output decoded bit-exactly in the row ([`Verdict::codes`];
/// shown for the CODES arm, `-` for the others); then the verdict and the
/// schedule ([`schedule_line`]).
pub fn table_header() -> String {
    format!(
        "{:<22} {:>6} {:>12} {:>12} {:>15} {:>5} {:>6} {:>9} {:>9}  verdict  schedule",
        "shape(in,out,m)",
        "arm",
        "max_abs",
        "rms_rel",
        "bit_mismatch",
        "nan",
        "codes",
        "oracle_ms",
        "device_ms"
    )
}

/// One table row; `oracle_time` is the time the oracle's answer took.
/// After the verdict, the schedule the kernel declared (which the row was
/// judged under) and, where computed ([`Verdict::identified`]), the known
/// schedules the output matches bit for bit.
pub fn table_row(spec: &CaseSpec, v: &Verdict, oracle_time: std::time::Duration) -> String {
    let codes = (spec.arm == Arm::Codes).then(|| v.codes.count());
    format!(
        "{:<22} {:>6} {:>12.3e} {:>12.3e} {:>9}/{:<5} {:>5} {:>6} {:>9.2} {:>9.2}  {}  {}",
        format!("{},{},{}", spec.in_f, spec.out_f, spec.m),
        spec.arm.name(),
        v.y.max_abs,
        v.y.rms_rel,
        v.y.bit_mismatches,
        v.y.n,
        v.nan.0,
        codes.map_or("-".to_string(), |n| n.to_string()),
        oracle_time.as_secs_f64() * 1e3,
        v.device_time.as_secs_f64() * 1e3,
        if v.pass() { "PASS" } else { "FAIL" },
        schedule_line(v)
    )
}

/// `declared: <schedule>; bit-identical under: <known schedules | none>`
/// (the second part only where [`Verdict::identified`] was computed).
pub fn schedule_line(v: &Verdict) -> String {
    match &v.identified {
        Some(ids) => format!(
            "declared: {}; bit-identical under: {}",
            v.schedule,
            schedule_list(ids)
        ),
        None => format!("declared: {}", v.schedule),
    }
}

fn value(x: f32) -> String {
    format!("{x:e} (0x{:08X})", x.to_bits())
}

fn mismatch(label: &str, m: &Mismatch, row: &str, col: &str) -> String {
    format!(
        "  {label}: first at ({row}={}, {col}={}): got {}, want {}\n",
        m.row,
        m.col,
        value(m.got),
        value(m.want)
    )
}

/// The non-default knobs as command-line flags.
pub fn knob_flags(k: &Knobs) -> String {
    let mut s = String::new();
    if k.every_code {
        s.push_str(" --every-code");
    }
    if k.zero_blocks != 0 {
        let _ = write!(s, " --zero-blocks {}", k.zero_blocks);
    }
    if k.act_exp != 0 {
        let _ = write!(s, " --act-exp {}", k.act_exp);
    }
    if k.nan_codes != 0 {
        let _ = write!(s, " --nan-codes {}", k.nan_codes);
    }
    if let Some(v) = k.variant {
        let _ = write!(s, " --variant {v}");
    }
    s
}

/// The environment a rerun needs to run the same kernels: the candidate
/// source (`KERNEL_ORACLE_FP8_MMQ_CU=...`), the GEMM
/// (`KERNEL_ORACLE_FP8_MMQ=cublaslt`), the forced MMQ variant
/// (`KERNEL_ORACLE_FP8_MMQ_VARIANT=...`) and the requested schedule
/// (`KERNEL_ORACLE_FP8_MMQ_SCHEDULE=...`), each when set.
pub fn repro_env() -> String {
    format!(
        "{}{}{}{}",
        crate::candidate_env(device::cuda::ENV_FP8_MMQ_CU),
        crate::candidate_env(device::cuda::ENV_FP8_MMQ),
        crate::candidate_env(super::run::ENV_FP8_MMQ_VARIANT),
        crate::candidate_env(super::run::ENV_FP8_MMQ_SCHEDULE)
    )
}

/// A failure no verdict covers ([`super::Outcome::Failed`]: a device
/// error, a launch past the deadline, a refusal count other than the
/// oracle's): the case, the message, and the line that reruns it.
pub fn failure(spec: &CaseSpec, message: &str) -> String {
    format!(
        "fp8_mmq FAILURE: in_f={} out_f={} m={} arm={} seed=0x{:016x}{}\n  {message}\nrerun: {}\n",
        spec.in_f,
        spec.out_f,
        spec.m,
        spec.arm.name(),
        spec.seed,
        knob_flags(&spec.knobs),
        repro_command(spec)
    )
}

/// The command that reruns one case: `kernel-oracle case fp8-mmq ...`
/// with its environment ([`repro_env`]) and the program as
/// [`crate::paths::rerun_prefix`] prints it.
pub fn repro_command(spec: &CaseSpec) -> String {
    format!(
        "{}{} case fp8-mmq --in-f {} --out-f {} --m {} --arm {} --seed 0x{:016x}{}",
        repro_env(),
        crate::paths::rerun_prefix(),
        spec.in_f,
        spec.out_f,
        spec.m,
        spec.arm.name().to_lowercase(),
        spec.seed,
        knob_flags(&spec.knobs)
    )
}

/// The `CaseSpec` as a Rust literal, for a regression test.
pub fn spec_literal(spec: &CaseSpec) -> String {
    let mut knobs = String::new();
    let k = &spec.knobs;
    if k.every_code {
        knobs.push_str("every_code: true, ");
    }
    if k.zero_blocks != 0 {
        let _ = write!(knobs, "zero_blocks: {}, ", k.zero_blocks);
    }
    if k.act_exp != 0 {
        let _ = write!(knobs, "act_exp: {}, ", k.act_exp);
    }
    if k.nan_codes != 0 {
        let _ = write!(knobs, "nan_codes: {}, ", k.nan_codes);
    }
    if let Some(v) = k.variant {
        let _ = write!(knobs, "variant: Some({v}), ");
    }
    format!(
        "kernel_oracle::fp8_mmq::CaseSpec {{ in_f: {}, out_f: {}, m: {}, arm: kernel_oracle::fp8_mmq::Arm::{:?}, seed: 0x{:016x}, knobs: kernel_oracle::fp8_mmq::Knobs {{ {knobs}..Default::default() }} }}",
        spec.in_f, spec.out_f, spec.m, spec.arm, spec.seed
    )
}

/// The full divergence report: what differs, where, both values as bits
/// and decimals, and how to reproduce it.
pub fn divergence(spec: &CaseSpec, v: &Verdict, source: &str, artifact: Option<&str>) -> String {
    let mut r = String::new();
    let bound = match spec.arm {
        _ if v.y_bit_exact() => "bit-identical (0 differing bits)".to_string(),
        Arm::Exact | Arm::Fold | Arm::Codes => unreachable!("bit-exact arms"),
        Arm::Random => format!(
            "every |got - want| <= 3 gamma_(130+nblk) sum|terms|, and rms_rel < {RANDOM_RMS_REL_BOUND:e} from {RANDOM_RMS_REL_MIN_OUTPUTS} outputs on"
        ),
    };
    let _ = writeln!(r, "fp8_mmq DIVERGENCE, kernel source: {source}");
    let _ = writeln!(
        r,
        "  case: in_f={} out_f={} m={} arm={} (bound: {bound}) seed=0x{:016x}{}",
        spec.in_f,
        spec.out_f,
        spec.m,
        spec.arm.name(),
        spec.seed,
        knob_flags(&spec.knobs)
    );
    let _ = writeln!(r, "  schedule: {}", schedule_line(v));
    if v.nan.0 != v.nan.1 as u64 {
        let _ = writeln!(r, "  nan count: kernel {} oracle {}", v.nan.0, v.nan.1);
    }
    if let (n, Some((j, i, err, allowed))) = v.over_bound {
        let _ = writeln!(
            r,
            "  y: {n} outputs over the per-output bound; first at (row j={j}, col i={i}): |got - want| = {err:e}, allowed {allowed:e}"
        );
    }
    if let (n, Some((j, k, g, w))) = v.q_mismatches {
        let _ = writeln!(
            r,
            "  quantized activations: {n} codes differ; first at (row j={j}, k={k}): got 0x{g:02X}, want 0x{w:02X}"
        );
    }
    if !v.d.bit_identical() {
        let _ = write!(r, "  activation scales d: {} differ", v.d.bit_mismatches);
        r.push('\n');
        if let Some(m) = v.d.first_mismatch {
            r.push_str(&mismatch("d", &m, "row j", "block"));
        }
    }
    let y = &v.y;
    let _ = writeln!(
        r,
        "  y: max_abs {:e}, rms_rel {:e}, nmse {:e}, {}/{} bit patterns differ, {} non-finite",
        y.max_abs, y.rms_rel, y.nmse, y.bit_mismatches, y.n, y.non_finite
    );
    if let Some(m) = y.first_non_finite {
        r.push_str(&mismatch("non-finite y", &m, "row j", "col i"));
    }
    if let Some(m) = y.first_mismatch {
        r.push_str(&mismatch("y", &m, "row j", "col i"));
    }
    let _ = writeln!(r, "rerun: {}", repro_command(spec));
    if let Some(a) = artifact {
        r += &crate::fuzz_rerun_lines("", &repro_env(), "fp8_mmq", a);
    }
    let _ = writeln!(
        r,
        "regression test (paste into tests/fp8_mmq_regressions.rs, creating it if needed):\n\
         #[test]\n#[ignore = \"needs a CUDA device\"]\n\
         fn fp8_mmq_seed_{:016x}() {{\n    kernel_oracle::fp8_mmq::check(&{});\n}}",
        spec.seed,
        spec_literal(spec)
    );
    r
}
