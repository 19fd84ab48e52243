//! The FP8 per-block MMQ (seed 000): cases, the device runner, the judge,
//! the report and the gate.
//!
//! - [`generate`]: [`CaseSpec`] (seeded battery entries and `Arbitrary`
//!   cases biased to the ragged edges) and its data;
//! - [`run`]: the CUDA kernels through `device::cuda`;
//! - [`judge`]: the oracle's answer and the verdict;
//! - [`fast`]: the bit-identical fast path of the spec GEMM;
//! - [`report`]: table rows and reproductions;
//! - [`gate`]: the seed's battery (`kernel-oracle check fp8-mmq`).

pub mod fast;
pub mod gate;
pub mod generate;
pub mod judge;
pub mod mutants;
pub mod report;
pub mod run;

pub use generate::{Arm, CaseData, CaseSpec, Knobs};
pub use judge::{reference, KernelOut, Reference, Verdict};
pub use run::{engine, Outcome};

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one process's checks (printed by the fuzzer every
/// [`STATS_EVERY`] cases, so time lost to refused cases shows).
#[derive(Debug, Default)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases refused by the dispatch precondition (never compared).
    pub refused_nan_weights: AtomicU64,
    /// Cases run on the kernel and compared.
    pub compared: AtomicU64,
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    refused_nan_weights: AtomicU64::new(0),
    compared: AtomicU64::new(0),
};

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 10_000;

fn count(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
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

/// [`check`], naming the fuzz artifact in the reproduction.
pub fn check_with_artifact(spec: &CaseSpec, artifact: Option<&str>) {
    let n = count(&STATS.cases);
    if n.is_multiple_of(STATS_EVERY) {
        eprintln!(
            "fp8_mmq stats: {n} cases, {} compared ({:.1}%), {} refused (NaN weight codes)",
            STATS.compared.load(Ordering::Relaxed),
            100.0 * STATS.compared.load(Ordering::Relaxed) as f64 / n as f64,
            STATS.refused_nan_weights.load(Ordering::Relaxed)
        );
    }
    let engine = match engine() {
        Ok(e) => e,
        Err(msg) => panic!("fp8_mmq: no CUDA device to check against: {msg}"),
    };
    let data = spec.generate().expect("generators produce valid shapes");
    match run::run_case(engine, &data, spec.arm) {
        Outcome::Refused { .. } => {
            count(&STATS.refused_nan_weights);
        }
        Outcome::Judged(v) => {
            count(&STATS.compared);
            if !v.pass() {
                panic!(
                    "{}",
                    report::divergence(spec, &v, &engine.kernel_source().to_string(), artifact)
                );
            }
        }
    }
}

/// Checks the fast GEMM path against the spec in `core` on one case, bit
/// for bit (CPU only).
///
/// # Panics
/// On any differing bit pattern, with the case's reproduction.
pub fn fast_matches_spec(spec: &CaseSpec) {
    let data = spec.generate().expect("generators produce valid shapes");
    let s = &data.shape;
    let mut q = vec![0u8; s.q_len()];
    let mut d = vec![0f32; s.d_len()];
    oracle::fp8_mmq::quantize_activations(s, &data.x, &mut q, &mut d)
        .expect("lengths come from the shape");
    let mut want = vec![0f32; s.out_len()];
    oracle::fp8_mmq::mmq_v2(s, &data.w, &data.scales, &q, &d, &mut want)
        .expect("lengths come from the shape");
    let mut got = vec![0f32; s.out_len()];
    fast::mmq_v2_fast(s, &data.w, &data.scales, &q, &d, &mut got)
        .expect("lengths come from the shape");
    let c = oracle::compare::compare_f32(&got, &want, s.out_f()).expect("same lengths");
    if let Some(m) = c.first_mismatch {
        panic!(
            "fast path differs from the spec: {} of {} outputs; first at (row j={}, col i={}): fast {:e} (0x{:08X}), spec {:e} (0x{:08X})\n  case: {}",
            c.bit_mismatches,
            c.n,
            m.row,
            m.col,
            m.got,
            m.got.to_bits(),
            m.want,
            m.want.to_bits(),
            report::spec_literal(spec)
        );
    }
}
