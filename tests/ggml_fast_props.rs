//! The fast ggml `mul_mat` against the spec in core, output for output
//! (bits equal, or both NaN), on every SIMD target. The same property runs
//! without bound as the `mul_mat_fast` fuzz target.

use kernel_oracle::ggml_fast::{fast_matches_spec, mul_mat_fast, FastCase};
use oracle::ggml::{mul_mat::mul_mat, Dtype, GgmlError};
use std::sync::Mutex;

/// Generated cases, counted: every one must reach the property, and the
/// draws must cover every format, a K = 0 row, non-finite scales and the
/// register tiles' edges (M and N not multiples of any tile).
#[test]
fn fast_mul_mat_matches_spec_on_generated_cases() {
    let seen = Mutex::new(Vec::new());
    bolero::check!()
        .with_arbitrary::<FastCase>()
        .with_iterations(400)
        .for_each(|case| {
            fast_matches_spec(case);
            seen.lock().unwrap().push(*case);
        });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 400, "cases that reached the property");
    for d in Dtype::ALL {
        assert!(seen.iter().any(|c| c.dtype == d), "{d:?} never drawn");
    }
    assert!(seen.iter().any(|c| c.kblocks == 0), "no K = 0 drawn");
    assert!(seen.iter().any(|c| !c.finite_scales), "no raw scales drawn");
    assert!(
        seen.iter().any(|c| c.m % 32 != 0 && c.m > 32),
        "no ragged M"
    );
    assert!(seen.iter().any(|c| c.n % 8 != 0 && c.n > 8), "no ragged N");
}

/// Shapes large enough for the parallel paths: many rows of dst (split by
/// rows) and few (split by panels), every format.
#[test]
fn fast_mul_mat_matches_spec_on_parallel_shapes() {
    for dtype in Dtype::ALL {
        for (m, n, kblocks) in [(130, 200, 4), (300, 3, 8)] {
            let kblocks = if dtype == Dtype::F32 {
                kblocks * 64
            } else {
                kblocks
            };
            fast_matches_spec(&FastCase {
                dtype,
                m,
                n,
                kblocks,
                finite_scales: true,
                seed: 0xFA57 ^ m as u64,
            });
        }
    }
}

/// Bad arguments give the spec's own errors, and nothing is written.
#[test]
fn fast_mul_mat_errors_are_the_specs() {
    let cases: [(Dtype, usize, usize, usize, usize, usize, usize); 4] = [
        (Dtype::Q4_0, 2, 2, 33, 36, 66, 4), // K not whole blocks
        (Dtype::Q4_0, 2, 2, 32, 35, 64, 4), // src0 short
        (Dtype::Q8_0, 2, 2, 32, 68, 63, 4), // src1 short
        (Dtype::F32, 2, 3, 4, 32, 12, 5),   // dst short
    ];
    for (dtype, m, n, k, l0, l1, ld) in cases {
        let (src0, src1) = (vec![0u8; l0], vec![0f32; l1]);
        let mut want = vec![7f32; ld];
        let mut got = vec![7f32; ld];
        let spec = mul_mat(dtype, m, n, k, &src0, &src1, &mut want, &mut vec![0f32; k]);
        let fast = mul_mat_fast(dtype, m, n, k, &src0, &src1, &mut got);
        assert!(spec.is_err(), "{dtype:?} {m} {n} {k}: the spec accepts it");
        assert_eq!(fast, spec, "{dtype:?} {m} {n} {k}");
        assert!(got.iter().all(|&v| v == 7.0), "fast wrote on error");
    }
    let huge = mul_mat_fast(Dtype::F32, usize::MAX, 2, 4, &[], &[], &mut []);
    assert_eq!(huge, Err(GgmlError::Overflow));
}

/// The path selectors of `FastCase` come from its first two bytes: over
/// all 2^16 values of bytes 0 and 1, every dtype is drawn at 1/5 (52 or
/// 51 of 256 values of byte 0) and raw (possibly non-finite) f16 scales at
/// exactly 1/4.
#[test]
fn every_dtype_and_scale_class_is_reached_from_two_bytes() {
    use arbitrary::{Arbitrary, Unstructured};
    let (mut dtype, mut raw) = ([0u32; 5], 0u32);
    for x in 0..=u16::MAX {
        let c = FastCase::arbitrary(&mut Unstructured::new(&[x as u8, (x >> 8) as u8])).unwrap();
        dtype[Dtype::ALL.iter().position(|&d| d == c.dtype).unwrap()] += 1;
        raw += u32::from(!c.finite_scales);
    }
    assert_eq!(dtype, [52 * 256, 51 * 256, 51 * 256, 51 * 256, 51 * 256]);
    assert_eq!(raw, 16384);
}
