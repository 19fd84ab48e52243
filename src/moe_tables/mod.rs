//! The MoE verify-rows pointer/scale tables (seed 002): cases, the device
//! runner, the judge, the report, the gate and planted bugs.
//!
//! - [`generate`]: [`CaseSpec`] (`Arbitrary`, biased to the edges) and its
//!   data;
//! - [`run`]: `moe_vrows_tables_from_sel` through `device::cuda::MoeEngine`;
//! - [`judge`]: the oracle's tables or refusal, and the verdict;
//! - [`report`]: table rows, the seed's mismatch lines, reproductions;
//! - [`gate`]: `kernel-oracle check moe-tables`;
//! - [`mutants`]: planted bugs in `cu/moe_tables.cu`;
//! - [`cli`]: the kind's registry entry (`kernel_oracle::kind`).
//!
//! A case the oracle refuses (an expert id out of range, a pointer past
//! 64 bits) is still run: the device must refuse it with the same error.
//! Such cases are counted apart, so time spent on refusals shows.

pub mod cli;
pub mod gate;
pub mod generate;
pub mod judge;
pub mod mutants;
pub mod report;
pub mod run;

pub use generate::{CaseData, CaseSpec, WeightMix};
pub use judge::{reference, Tables, Verdict};
pub use run::{device_tables, engine};

use crate::stats::{count, pct};
use oracle::moe_tables::{Plane, TablesError, CANONICAL_NAN, PLANES};
use std::sync::atomic::AtomicU64;

/// Counters of one process's checks: outcomes, and what the generator
/// drew (each printed with its share, so a starved path shows).
#[derive(Debug, Default)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases both sides built tables for, compared entry by entry.
    pub compared: AtomicU64,
    /// Cases both refused with the same error: an out-of-range id.
    pub refused_range: AtomicU64,
    /// ... a pointer past 64 bits.
    pub refused_overflow: AtomicU64,
    /// Cases drawn with bad ids (designed: 1/4).
    pub bad_ids: AtomicU64,
    /// ... with macro planes (designed: 1/2).
    pub macros: AtomicU64,
    /// ... with special weights (designed: 1/2).
    pub special: AtomicU64,
    /// ... on one CTA (designed: 1/2).
    pub one_cta: AtomicU64,
    /// ... with no pairs (designed: at least 1/8).
    pub no_pairs: AtomicU64,
    /// ... with one expert (designed: at least 1/4).
    pub one_expert: AtomicU64,
    /// ... with a zero stride in some slab (designed: at least 1/4 per
    /// slab).
    pub zero_stride: AtomicU64,
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    compared: AtomicU64::new(0),
    refused_range: AtomicU64::new(0),
    refused_overflow: AtomicU64::new(0),
    bad_ids: AtomicU64::new(0),
    macros: AtomicU64::new(0),
    special: AtomicU64::new(0),
    one_cta: AtomicU64::new(0),
    no_pairs: AtomicU64::new(0),
    one_expert: AtomicU64::new(0),
    zero_stride: AtomicU64::new(0),
};

/// The stats line [`check`] prints every [`STATS_EVERY`] cases: outcomes,
/// then what the generator drew, each with its share of the cases.
pub fn stats_line() -> String {
    let n = STATS.cases.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "moe_tables stats: {n} cases, {} compared, refused alike: {} id out of range, {} pointer past 64 bits; drawn: bad ids {}, macro planes {}, special weights {}, one CTA {}, no pairs {}, one expert {}, a zero stride {}",
        pct(&STATS.compared, n),
        pct(&STATS.refused_range, n),
        pct(&STATS.refused_overflow, n),
        pct(&STATS.bad_ids, n),
        pct(&STATS.macros, n),
        pct(&STATS.special, n),
        pct(&STATS.one_cta, n),
        pct(&STATS.no_pairs, n),
        pct(&STATS.one_expert, n),
        pct(&STATS.zero_stride, n)
    )
}

/// Counts what the generator drew for `spec` in [`STATS`].
pub fn count_drawn(spec: &CaseSpec) {
    for (on, c) in [
        (spec.bad_ids > 0, &STATS.bad_ids),
        (spec.macros, &STATS.macros),
        (spec.weights == WeightMix::Special, &STATS.special),
        (spec.one_cta, &STATS.one_cta),
        (spec.n_pairs == 0, &STATS.no_pairs),
        (spec.n_expert == 1, &STATS.one_expert),
        (spec.slabs.iter().any(|s| s.stride == 0), &STATS.zero_stride),
    ] {
        if on {
            count(c);
        }
    }
}

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 10_000;

/// Runs one case on the device and judges it against the oracle.
///
/// # Panics
/// A bug is a panic: when the device's tables differ from the oracle's in
/// any pointer or any scale bit, when one side refuses and the other does
/// not or they refuse differently, on any other device error (driver,
/// clobbered guard band), and when there is no CUDA device. The message is
/// a reproduction ([`report::divergence`]).
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
        Err(msg) => panic!("moe_tables: no CUDA device to check against: {msg}"),
    };
    let data = spec.generate();
    let want = reference(&data);
    let got = device_tables(engine, &data, spec.one_cta.then_some(1));
    let v = Verdict::judge(&data, &got, &want);
    if !v.pass() {
        panic!(
            "{}",
            report::divergence(spec, &v, &engine.kernel_source(), artifact)
        );
    }
    match v.want_err {
        None => count(&STATS.compared),
        Some(TablesError::ExpertRange { .. }) => count(&STATS.refused_range),
        Some(_) => count(&STATS.refused_overflow),
    };
}

/// The oracle against an independent definition, on one case (CPU only):
/// u128 pointer arithmetic, the first bad pair found by a plain scan, the
/// scales by the rules spelled out again, and `ALL-OR-NOTHING`.
///
/// # Panics
/// On any disagreement, with the case's literal.
pub fn oracle_matches_definition(spec: &CaseSpec) {
    let data = spec.generate();
    let n = data.experts.len();
    let got = reference(&data);
    let lit = report::spec_literal(spec);
    // The first bad pair, independently.
    let mut want_err = None;
    'pairs: for (p, &e) in data.experts.iter().enumerate() {
        if e < 0 || e as i64 >= data.n_expert as i64 {
            want_err = Some(TablesError::ExpertRange {
                pair: p,
                expert: e,
                n_expert: data.n_expert,
            });
            break;
        }
        for plane in Plane::ALL {
            let s = data.slabs[plane.index()];
            if u128::from(s.base) + e as u128 * u128::from(s.stride) > u128::from(u64::MAX) {
                want_err = Some(TablesError::AddressOverflow {
                    plane,
                    pair: p,
                    expert: e,
                    base: s.base,
                    stride: s.stride,
                });
                break 'pairs;
            }
        }
    }
    match (&got, want_err) {
        (Err(g), Some(w)) => assert_eq!(*g, w, "{lit}"),
        (Ok(t), None) => {
            for p in 0..n {
                let e = data.experts[p] as usize;
                let w = data.weights[p];
                for k in 0..PLANES {
                    let s = data.slabs[k];
                    let want = u128::from(s.base) + e as u128 * u128::from(s.stride);
                    assert_eq!(u128::from(t.ptrs[k * n + p]), want, "{lit}");
                }
                let (g, u, d) = match &data.macros {
                    Some(m) => (m[0][e].to_bits(), m[1][e].to_bits(), m[2][e]),
                    None => (1f32.to_bits(), 1f32.to_bits(), 1.0),
                };
                assert_eq!(t.scales[p].to_bits(), g, "gate scale, pair {p}: {lit}");
                assert_eq!(t.scales[n + p].to_bits(), u, "up scale, pair {p}: {lit}");
                let prod = w * d;
                let down = t.scales[2 * n + p].to_bits();
                if prod.is_nan() {
                    assert_eq!(down, CANONICAL_NAN, "NaN down scale, pair {p}: {lit}");
                } else {
                    assert_eq!(down, prod.to_bits(), "down scale, pair {p}: {lit}");
                }
                if w.is_nan() {
                    assert_eq!(down, CANONICAL_NAN, "a NaN weight propagates: {lit}");
                }
            }
        }
        (g, w) => panic!("oracle {g:?}, definition {w:?}: {lit}"),
    }
    // ALL-OR-NOTHING: a refused call leaves its outputs as they were.
    if got.is_err() {
        let mut p = vec![0x5A5A_u64; PLANES * n];
        let mut s = vec![f32::from_bits(0x1234_5678); PLANES * n];
        let _ = oracle::moe_tables::vrows_tables(
            &data.bank(),
            &data.experts,
            &data.weights,
            &mut p,
            &mut s,
        );
        assert!(p.iter().all(|&v| v == 0x5A5A), "{lit}");
        assert!(s.iter().all(|v| v.to_bits() == 0x1234_5678), "{lit}");
    }
}
