//! bolero properties over the FP8 MMQ case generator: the fast oracle
//! against the spec (CPU, always), and the kernel against the oracle (GPU).
//! The same properties run without bound as the `fp8_mmq_fast` and
//! `fp8_mmq` fuzz targets.

use kernel_oracle::fp8_mmq::fast::{check_raw, targets_for, RawCase, Simd, SpecRun};
use kernel_oracle::fp8_mmq::{check, fast_matches_spec, CaseSpec};
use oracle::fp8_mmq::Schedule;
use std::sync::Mutex;

/// Runs `property` on `iterations` generated cases and fails unless every
/// one reached it and the shapes covered the edges (a k tail, m = 1, a
/// partial scale row): a property that never ran proves nothing.
fn run_counted(iterations: usize, property: fn(&CaseSpec)) {
    let seen = Mutex::new(Vec::new());
    bolero::check!()
        .with_arbitrary::<CaseSpec>()
        .with_iterations(iterations)
        .for_each(|spec| {
            property(spec);
            seen.lock().unwrap().push(*spec);
        });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), iterations, "cases that reached the property");
    assert!(seen.iter().any(|s| s.in_f % 128 != 0), "no k tail drawn");
    assert!(
        seen.iter().any(|s| s.out_f % 128 != 0),
        "no partial scale row drawn"
    );
    assert!(seen.iter().any(|s| s.m == 1), "no m = 1 drawn");
}

/// The fast quantizer and GEMM against the spec on generated cases, under
/// every known schedule, on every SIMD target this CPU has
/// (`fast_matches_spec`).
#[test]
fn fast_gemm_matches_spec_bit_for_bit() {
    run_counted(64, fast_matches_spec);
}

/// Each SIMD target forced, on generated cases, under every known
/// schedule: the targets this CPU has run natively, the others run their
/// own register tile (its shape, its packing, its edges) built for the
/// baseline, so every tile's indexing is proven here even where its
/// instructions cannot run (the tensor-core accumulation has no tile: one
/// target, `targets_for`).
#[test]
fn every_simd_target_matches_spec_on_cases() {
    run_counted(48, |spec| {
        let data = spec.generate().expect("generators produce valid shapes");
        for schedule in Schedule::KNOWN {
            let want = SpecRun::from_case(&data, schedule);
            for &simd in targets_for(&schedule) {
                if let Some(diff) = want.diff(simd) {
                    panic!("target {} differs: {diff}\n  case: {spec:?}", simd.name());
                }
            }
        }
    });
    let native: Vec<&str> = Simd::ALL
        .into_iter()
        .filter(|s| s.is_available())
        .map(Simd::name)
        .collect();
    eprintln!("SIMD targets run natively on this CPU: {native:?}");
}

/// Raw operands (every e4m3 code, NaN and infinite scales, activations at
/// any exponent: see `RawCase`) on each SIMD target, forced, under every
/// known schedule.
#[test]
fn every_simd_target_matches_spec_on_raw_operands() {
    let seen = Mutex::new(Vec::new());
    let iterations = 200;
    bolero::check!()
        .with_arbitrary::<RawCase>()
        .with_iterations(iterations)
        .for_each(|case| {
            check_raw(case);
            seen.lock().unwrap().push(*case);
        });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), iterations, "cases that reached the property");
    for (what, hit) in [
        ("a k tail", seen.iter().any(|c| c.in_f % 128 != 0)),
        (
            "a partial scale row",
            seen.iter().any(|c| c.out_f % 128 != 0),
        ),
        ("m = 1", seen.iter().any(|c| c.m == 1)),
        ("NaN activation codes", seen.iter().any(|c| c.nan_codes)),
        ("wild scales", seen.iter().any(|c| c.wild_scales)),
        ("wild activations", seen.iter().any(|c| c.wild_x)),
    ] {
        assert!(hit, "no case with {what} drawn");
    }
}

#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn kernel_matches_oracle() {
    run_counted(1_000, check);
}
