//! The moe-tables gate as a test (seed 002's four cases and ours).

use kernel_oracle::moe_tables::{engine, gate};

#[test]
#[ignore = "needs a CUDA device"]
fn moe_tables_gate_is_all_green() {
    let engine = engine().unwrap_or_else(|e| panic!("no CUDA device: {e}"));
    let cases = gate::cases();
    let result = gate::run(engine, &cases);
    assert_eq!(result.rows, cases.len());
    assert_eq!(
        result.failures, 0,
        "see the table above: {:?}",
        result.failed
    );
}

/// The stale-cache case really reuses a layer id with other planes, and
/// the past-2^40 case really goes past 2^40 bytes (CPU: the cases
/// themselves, not the device).
#[test]
fn gate_cases_reach_what_their_labels_claim() {
    let cases = gate::cases();
    let by = |l: &str| cases.iter().find(|c| c.label == l).unwrap();
    let stale = by("stale-cache-same-layer");
    let prime = stale.prime.as_ref().unwrap();
    assert_eq!(prime.layer, stale.data.layer);
    assert_ne!(prime.macros, stale.data.macros);
    assert!(
        kernel_oracle::moe_tables::report::max_offset_gib(&by("past-2^40-bytes").data) > 1024.0
    );
    let serving =
        kernel_oracle::moe_tables::report::max_offset_gib(&by("serving-strides-past-4GiB").data);
    assert!(serving > 4.0 && serving < 13.0, "{serving}");
    assert!(kernel_oracle::moe_tables::report::max_offset_gib(&by("small-strides").data) < 4.0);
    for label in [
        "refuse-expert-range",
        "refuse-64-bit-overflow",
        "refuse-lengths",
        "refuse-past-first-pass-3-ctas",
    ] {
        assert!(
            kernel_oracle::moe_tables::reference(&by(label).data).is_err(),
            "{label} is not refused by the oracle"
        );
    }
    // The grid-stride rows: a grid of fewer threads than pairs (the loop
    // runs past its first pass), and the refused one's bad pairs past the
    // first pass, the lowest one the error names.
    let threads = |c: &gate::GateCase| {
        u64::from(c.max_ctas.expect("a capped grid")) * u64::from(device::cuda::MOE_THREADS)
    };
    for label in [
        "65536-pairs-grid-stride-3-ctas",
        "refuse-past-first-pass-3-ctas",
    ] {
        let c = by(label);
        assert!(threads(c) * 80 < c.data.experts.len() as u64, "{label}");
    }
    let refused = by("refuse-past-first-pass-3-ctas");
    let err = kernel_oracle::moe_tables::reference(&refused.data).unwrap_err();
    let [lo, hi] = gate::REFUSED_PAIRS;
    assert!(format!("{err:?}").contains(&lo.to_string()), "{err:?}");
    // Both past the first pass; the higher pair in a later pass, a lower
    // thread and a lower CTA than the lower pair.
    let t = threads(refused) as usize;
    let cta = |p: usize| (p % t) / device::cuda::MOE_THREADS as usize;
    assert!(lo > t && hi / t > lo / t && hi % t < lo % t && cta(hi) < cta(lo));
    assert!(cases.iter().filter(|c| c.max_ctas.is_some()).count() == 2);
    for c in cases.iter().filter(|c| !c.label.starts_with("refuse")) {
        assert!(
            kernel_oracle::moe_tables::reference(&c.data).is_ok(),
            "{}",
            c.label
        );
    }
}
