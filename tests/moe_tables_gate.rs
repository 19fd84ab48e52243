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
    ] {
        assert!(
            kernel_oracle::moe_tables::reference(&by(label).data).is_err(),
            "{label} is not refused by the oracle"
        );
    }
    for c in cases.iter().filter(|c| !c.label.starts_with("refuse")) {
        assert!(
            kernel_oracle::moe_tables::reference(&c.data).is_ok(),
            "{}",
            c.label
        );
    }
}
