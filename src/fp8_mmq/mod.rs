//! The FP8 per-block MMQ (seed 000): cases, the device runner, the judge,
//! the report and the gate.
//!
//! - [`generate`]: [`CaseSpec`] (seeded battery entries and `Arbitrary`
//!   cases biased to the ragged edges) and its data;
//! - [`run`]: the CUDA kernels through `device::cuda`;
//! - [`judge`]: the oracle's answer and the verdict;
//! - [`fast`]: the bit-identical fast path of the spec GEMM;
//! - [`report`]: table rows and reproductions;
//! - [`gate`]: the seed's battery (`kernel-oracle check fp8-mmq`);
//! - [`mutants`]: planted bugs in `cu/fp8_mmq.cu`;
//! - [`cli`]: the kind's registry entry (`kernel_oracle::kind`).

pub mod cli;
pub mod fast;
pub mod gate;
pub mod generate;
pub mod judge;
pub mod mutants;
pub mod report;
pub mod run;

pub use generate::{resolve_variant, Arm, CaseData, CaseSpec, Knobs};
pub use judge::{reference, KernelOut, Reference, Verdict};
pub use run::{engine, Outcome};

use crate::stats::{count, pct};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one process's checks (printed by the fuzzer every
/// [`STATS_EVERY`] cases, so time lost to refused cases shows, and so
/// does a starved knob: what the generator drew, each with its share).
#[derive(Debug)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases drawn per arm, in [`Arm::ALL`] order (designed: 1/4 each).
    pub arm: [AtomicU64; 4],
    /// Cases drawn with [`Knobs::every_code`] (designed: 1/4).
    pub every_code: AtomicU64,
    /// ... with [`Knobs::zero_blocks`] on (designed: 1/4).
    pub zero_blocks: AtomicU64,
    /// ... with [`Knobs::act_exp`] on (designed: 1/4, less the cases whose
    /// drawn exponent is 0).
    pub act_exp: AtomicU64,
    /// ... with [`Knobs::nan_codes`] on (designed: 1/16).
    pub nan_codes: AtomicU64,
    /// ... with m = 1 (designed: at least 1/4).
    pub m1: AtomicU64,
    /// ... with an MMQ variant forced ([`Knobs::variant`]; designed: 1/2;
    /// not forced when the GEMM is a peer).
    pub forced_variant: AtomicU64,
    /// ... with a k tail, `in_f % 128 != 0`.
    pub k_tail: AtomicU64,
    /// ... with m past a 192-token tile (designed: 1/16 less the wide
    /// class's draws of 192 or less; an exhausted input gives
    /// `MAX_M_WIDE`).
    pub m_second_tile: AtomicU64,
    /// Cases refused by the dispatch precondition (never compared).
    pub refused_nan_weights: AtomicU64,
    /// Cases run on the kernel and compared.
    pub compared: AtomicU64,
    /// Cases the GEMM peer (`KERNEL_ORACLE_FP8_MMQ=cublaslt`) refused
    /// (never compared, not failures).
    pub refused_by_peer: AtomicU64,
    /// Compared cases per forced variant (`fp8_mmq_v2_k<i>`, after
    /// [`generate::resolve_variant`]): a variant the fuzzer never reaches
    /// shows by its absence from the stats line.
    pub compared_by_variant: [AtomicU64; 128],
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    arm: [const { AtomicU64::new(0) }; 4],
    every_code: AtomicU64::new(0),
    zero_blocks: AtomicU64::new(0),
    act_exp: AtomicU64::new(0),
    nan_codes: AtomicU64::new(0),
    m1: AtomicU64::new(0),
    forced_variant: AtomicU64::new(0),
    k_tail: AtomicU64::new(0),
    m_second_tile: AtomicU64::new(0),
    refused_nan_weights: AtomicU64::new(0),
    compared: AtomicU64::new(0),
    refused_by_peer: AtomicU64::new(0),
    compared_by_variant: [const { AtomicU64::new(0) }; 128],
};

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 10_000;

/// Counts what the generator drew for `spec` in [`STATS`].
pub fn count_drawn(spec: &CaseSpec) {
    let arm = Arm::ALL.iter().position(|&a| a == spec.arm);
    count(&STATS.arm[arm.expect("every arm is listed")]);
    let k = &spec.knobs;
    for (on, c) in [
        (k.every_code, &STATS.every_code),
        (k.zero_blocks > 0, &STATS.zero_blocks),
        (k.act_exp != 0, &STATS.act_exp),
        (k.nan_codes > 0, &STATS.nan_codes),
        (k.variant.is_some(), &STATS.forced_variant),
        (spec.m == 1, &STATS.m1),
        (
            !spec.in_f.is_multiple_of(oracle::fp8_mmq::BLOCK_K),
            &STATS.k_tail,
        ),
        (spec.m > 192, &STATS.m_second_tile),
    ] {
        if on {
            count(c);
        }
    }
}

/// The stats line [`check`] prints every [`STATS_EVERY`] cases: what was
/// compared and refused, then what the generator drew, each with its
/// share of the cases.
pub fn stats_line() -> String {
    let n = STATS.cases.load(Ordering::Relaxed);
    let arms: Vec<String> = Arm::ALL
        .iter()
        .zip(&STATS.arm)
        .map(|(a, c)| format!("{} {}", a.name(), pct(c, n)))
        .collect();
    let by_variant: Vec<String> = STATS
        .compared_by_variant
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let c = c.load(Ordering::Relaxed);
            (c > 0).then(|| format!("k{i} {c}"))
        })
        .collect();
    format!(
        "fp8_mmq stats: {n} cases, {} compared, {} refused (NaN weight codes), {} refused by the peer; arms: {}; knobs: every_code {}, zero_blocks {}, act_exp {}, nan_codes {}, variant forced {}; m = 1 {}, k tail {}, m past a 192-token tile {}; compared with a variant forced: {}",
        pct(&STATS.compared, n),
        pct(&STATS.refused_nan_weights, n),
        pct(&STATS.refused_by_peer, n),
        arms.join(", "),
        pct(&STATS.every_code, n),
        pct(&STATS.zero_blocks, n),
        pct(&STATS.act_exp, n),
        pct(&STATS.nan_codes, n),
        pct(&STATS.forced_variant, n),
        pct(&STATS.m1, n),
        pct(&STATS.k_tail, n),
        pct(&STATS.m_second_tile, n),
        if by_variant.is_empty() {
            "none".to_string()
        } else {
            by_variant.join(", ")
        }
    )
}

/// Runs one case on the CUDA kernels and judges it against the oracle.
///
/// # Panics
/// This is an oracle: a bug is a panic. It panics with a reproduction (see
/// [`report::divergence`]) when the kernel and the oracle disagree, when the
/// driver fails, or when there is no CUDA device (a fuzzer without a device
/// has nothing to fuzz). A case whose shape is invalid is not generated.
pub fn check(spec: &CaseSpec) {
    check_with_artifact(spec, None)
}

/// [`check`], with a line that reruns the fuzz input `artifact` (its path,
/// or [`crate::libfuzzer_crash_artifact`] from a fuzz target) in the
/// reproduction ([`crate::fuzz_rerun_lines`]).
pub fn check_with_artifact(spec: &CaseSpec, artifact: Option<&str>) {
    let n = count(&STATS.cases);
    count_drawn(spec);
    if n.is_multiple_of(STATS_EVERY) {
        eprintln!("{}", stats_line());
    }
    let engine = match engine() {
        Ok(e) => e,
        Err(msg) => panic!("fp8_mmq: no CUDA device to check against: {msg}"),
    };
    let peer = match run::peer() {
        Ok(p) => p,
        Err(msg) => panic!("fp8_mmq: the GEMM KERNEL_ORACLE_FP8_MMQ names cannot run: {msg}"),
    };
    // A peer with alignment rules gets the nearest shape it takes (still
    // ragged against the scale blocks), so its cases are compared, not
    // counted refused; the reproduction names the shape actually run. A
    // forced variant is taken modulo the variants the source exports (the
    // peer has none to force), and the reproduction names the one run.
    let mut run_spec = *spec;
    if peer.is_some() {
        let (in_f, out_f) = device::cuda::peer_aligned(spec.in_f, spec.out_f);
        run_spec.in_f = in_f;
        run_spec.out_f = out_f;
        run_spec.knobs.variant = None;
    }
    let variant = generate::resolve_variant(run_spec.knobs.variant, engine.mmq_variants());
    run_spec.knobs.variant = variant.map(|v| v as u8);
    let spec = &run_spec;
    let data = spec.generate().expect("generators produce valid shapes");
    let outcome = run::with_variant(engine, variant, || run::run_case(engine, &data, spec.arm))
        .unwrap_or_else(|message| Outcome::Failed { message });
    match outcome {
        Outcome::Refused { .. } => {
            count(&STATS.refused_nan_weights);
        }
        Outcome::PeerRefused { .. } => {
            count(&STATS.refused_by_peer);
        }
        Outcome::Judged(v) => {
            count(&STATS.compared);
            if let Some(c) = variant.and_then(|i| STATS.compared_by_variant.get(i as usize)) {
                count(c);
            }
            if !v.pass() {
                panic!(
                    "{}",
                    report::divergence(spec, &v, &run::kernel_description(engine), artifact)
                );
            }
        }
        Outcome::Failed { message } => {
            let mut r = report::failure(spec, &message);
            if let Some(a) = artifact {
                r += &crate::fuzz_rerun_lines("", &report::repro_env(), "fp8_mmq", a);
            }
            panic!("{r}");
        }
    }
}

/// Checks the fast paths against the spec in `core` on one case, bit for
/// bit (CPU only): the quantizer's codes and scales, and the GEMM's outputs
/// on the oracle's GEMM operand (see [`fast::SpecRun`]) under every known
/// schedule ([`oracle::fp8_mmq::Schedule::KNOWN`]), on every SIMD target
/// this CPU runs ([`fast::Simd::is_available`]; one target where the
/// schedule's fast path has no SIMD tile, [`fast::targets_for`]).
///
/// # Panics
/// On any differing bit pattern, with the target, the schedule and the
/// case's reproduction.
pub fn fast_matches_spec(spec: &CaseSpec) {
    let data = spec.generate().expect("generators produce valid shapes");
    for schedule in oracle::fp8_mmq::Schedule::KNOWN {
        let want = fast::SpecRun::from_case(&data, schedule);
        for &simd in fast::targets_for(&schedule)
            .iter()
            .filter(|s| s.is_available())
        {
            if let Some(diff) = want.diff(simd) {
                panic!(
                    "fast path ({}) differs from the spec: {diff}\n  case: {}",
                    simd.name(),
                    report::spec_literal(spec)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stats line names each forced variant with its compared cases,
    /// and only those compared at least once.
    #[test]
    fn stats_line_counts_compared_cases_per_forced_variant() {
        count(&STATS.compared_by_variant[25]);
        count(&STATS.compared_by_variant[25]);
        let line = stats_line();
        let tail = line
            .split("compared with a variant forced: ")
            .nth(1)
            .expect("the per-variant part");
        assert!(tail.split(", ").any(|p| p == "k25 2"), "{line}");
        assert!(!tail.split(", ").any(|p| p.starts_with("k127 ")), "{line}");
    }
}
