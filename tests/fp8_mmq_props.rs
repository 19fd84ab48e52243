//! bolero properties over the FP8 MMQ case generator: the fast oracle
//! against the spec (CPU, always), and the kernel against the oracle (GPU).
//! The same properties run without bound as the `fp8_mmq_fast` and
//! `fp8_mmq` fuzz targets.

use kernel_oracle::fp8_mmq::{check, fast_matches_spec, CaseSpec};
use std::sync::Mutex;

/// Runs `property` on `iterations` generated cases and fails unless every
/// one reached it and the shapes covered the edges (a k tail, m = 1, a
/// partial scale row): a property that never ran proves nothing.
fn run_counted(iterations: usize, property: fn(&CaseSpec)) {
    static SEEN: Mutex<Vec<CaseSpec>> = Mutex::new(Vec::new());
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<CaseSpec>()
        .with_iterations(iterations)
        .for_each(|spec| {
            property(spec);
            SEEN.lock().unwrap().push(*spec);
        });
    let seen = SEEN.lock().unwrap();
    assert_eq!(seen.len(), iterations, "cases that reached the property");
    assert!(seen.iter().any(|s| s.in_f % 128 != 0), "no k tail drawn");
    assert!(
        seen.iter().any(|s| s.out_f % 128 != 0),
        "no partial scale row drawn"
    );
    assert!(seen.iter().any(|s| s.m == 1), "no m = 1 drawn");
}

#[test]
fn fast_gemm_matches_spec_bit_for_bit() {
    run_counted(64, fast_matches_spec);
}

#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn kernel_matches_oracle() {
    run_counted(1_000, check);
}
