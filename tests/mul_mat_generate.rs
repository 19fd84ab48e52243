//! The `mul_mat` fuzz generator spends short inputs (what libFuzzer tries
//! first) on every arm and every dtype.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::mul_mat::{Arm, CaseSpec};
use kernel_oracle::rng::Rng;
use oracle::ggml::Dtype;

#[test]
fn short_inputs_draw_every_arm_and_dtype() {
    let mut rng = Rng(0x3A3A);
    let (mut n, mut arms) = (0usize, [0usize; 3]);
    let mut dtypes = [0usize; 5];
    for len in 1..=8 {
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            let spec = CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
            n += 1;
            arms[Arm::ALL.iter().position(|&a| a == spec.arm).unwrap()] += 1;
            dtypes[Dtype::ALL.iter().position(|&d| d == spec.dtype).unwrap()] += 1;
        }
    }
    for (arm, &c) in Arm::ALL.iter().zip(&arms) {
        let share = c as f64 / n as f64;
        assert!(
            (share - 1.0 / 3.0).abs() < 0.06,
            "{} share {share:.3}",
            arm.name()
        );
    }
    for (d, &c) in Dtype::ALL.iter().zip(&dtypes) {
        let share = c as f64 / n as f64;
        assert!(share > 0.12, "{d:?} share {share:.3}");
    }
}

/// Every path selector comes from the first four bytes (see `CaseSpec`'s
/// `Arbitrary`): over all 2^16 values of bytes 0 and 1 (bytes 2 and 3
/// zero) every arm is drawn at 1/3 and every dtype at 1/5 (to within the
/// `% 3` and `% 5` of a byte: 86 or 85 of 256, 52 or 51 of 256); over all
/// 2^16 values of bytes 2 and 3 (bytes 0 and 1 zero) m = 1 and n = 1 at
/// 1/4 or more, k of one block at 1/4 or more, k = K_MAX at 1/4 and every
/// geometry at 1/8 (byte 3's bits 0-2: the odd geometries, TILE_K 6 among
/// them, as often as the others). Nothing after byte 3 is needed.
#[test]
fn every_knob_is_reached_at_its_designed_rate_from_four_bytes() {
    use device::wgpu::QuantPath;
    use kernel_oracle::mul_mat::generate::config::K_MAX;
    use kernel_oracle::mul_mat::{asks_subgroup_form, geometry_index, path_for, FUZZ_GEOMETRIES};
    let draw = |b: [u8; 4]| CaseSpec::arbitrary(&mut Unstructured::new(&b)).unwrap();
    let (mut arm, mut dtype) = ([0u32; 3], [0u32; 5]);
    for x in 0..=u16::MAX {
        let s = draw([x as u8, (x >> 8) as u8, 0, 0]);
        arm[Arm::ALL.iter().position(|&a| a == s.arm).unwrap()] += 1;
        dtype[Dtype::ALL.iter().position(|&d| d == s.dtype).unwrap()] += 1;
    }
    assert_eq!(arm, [86 * 256, 85 * 256, 85 * 256]);
    assert_eq!(dtype, [52 * 256, 51 * 256, 51 * 256, 51 * 256, 51 * 256]);
    let (mut m1, mut n1, mut k1, mut kmax, mut geom) = (0u32, 0u32, 0u32, 0u32, [0u32; 8]);
    for x in 0..=u16::MAX {
        let s = draw([0, 0, x as u8, (x >> 8) as u8]);
        m1 += u32::from(s.m == 1);
        n1 += u32::from(s.n == 1);
        k1 += u32::from(s.k == s.dtype.block_elems());
        kmax += u32::from(s.k == K_MAX);
        geom[geometry_index(&s)] += 1;
    }
    // The "any" classes read exhausted bytes too, and so give 1 as well.
    assert!(m1 >= 16384 && n1 >= 16384 && k1 >= 16384, "{m1} {n1} {k1}");
    assert_eq!(kmax, 16384);
    assert_eq!(geom, [32 * 256; 8]);
    assert_eq!(FUZZ_GEOMETRIES.len(), 8);
    // The geometry whose TILE_K is not a multiple of 4 (the one-element
    // loaders) is among them.
    assert!(FUZZ_GEOMETRIES.iter().any(|g| g.tile_k % 4 != 0));
    // An empty input is a valid case too.
    let s = draw([0; 4]);
    assert_eq!((s.arm, s.dtype, s.m, s.n), (Arm::Exact, Dtype::F32, 1, 1));
    // Byte 3's bit 7: a quantized case's path, dequantize-then-GEMM at
    // 1/2, and bit 6 the subgroup form asked for at 1/2: each geometry on
    // each path in each form at 1/32; an f32 case is always fused.
    let mut by = [[[0u32; 8]; 2]; 2];
    for b3 in 0..=u8::MAX {
        let s = draw([0, 1, 0, b3]);
        assert_eq!(s.dtype, Dtype::Q4_0);
        by[usize::from(asks_subgroup_form(&s))][usize::from(path_for(&s) == QuantPath::Dequant)]
            [geometry_index(&s)] += 1;
        let f = draw([0, 0, 0, b3]);
        assert_eq!(path_for(&f), QuantPath::Fused);
        assert_eq!(geometry_index(&f), geometry_index(&s));
        assert_eq!(asks_subgroup_form(&f), asks_subgroup_form(&s));
    }
    assert_eq!(by, [[[8; 8]; 2]; 2]);
}

/// The BALANCED arm sees one dropped product: on the gate's one-output
/// rows (m = n = 1, K = 256) of every dtype, a kernel that computes the
/// exact sum of all products but one (rounded once to f32) fails the
/// verdict, for every one of the 256 products; the correct sum passes.
/// (The RANDOM arm's q4_0 row lets a dropped k tail through: the test
/// below on lavapipe, `drop_k_tail_is_caught_by_the_one_output_row`.)
#[test]
fn balanced_one_output_rows_fail_when_any_product_is_dropped() {
    use kernel_oracle::mul_mat::gate::{spec, CI_SHAPES};
    use kernel_oracle::mul_mat::{reference, Verdict};
    let shape = CI_SHAPES.iter().find(|s| s.label == "m1n1").unwrap();
    for dtype in Dtype::ALL {
        let data = spec(shape, dtype, Arm::Balanced).generate();
        let want = reference(&data);
        let mut w = vec![0f32; 256];
        oracle::ggml::dequantize(dtype, &data.src0, &mut w).unwrap();
        let p: Vec<f64> = w
            .iter()
            .zip(&data.src1)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .collect();
        let (lo, hi) = p.iter().fold((f64::MAX, 0f64), |(lo, hi), x| {
            (lo.min(x.abs()), hi.max(x.abs()))
        });
        assert!(
            hi / lo <= 38.0,
            "{}: products span {}",
            dtype.name(),
            hi / lo
        );
        let exact: f64 = p.iter().sum();
        assert!(Verdict::judge(&data, &[exact as f32], &want).pass());
        for (j, pj) in p.iter().enumerate() {
            let got = [(exact - pj) as f32];
            let v = Verdict::judge(&data, &got, &want);
            assert!(!v.pass(), "{}: dropping product {j} passes", dtype.name());
        }
    }
}

/// The fuzzer's stats line prints what the generator drew, each with its
/// share: over all 2^16 values of bytes 0 and 3 (what `check` counts for
/// each case), every arm near 1/3 and every geometry at 1/8.
#[test]
fn the_stats_line_prints_each_arm_and_geometry_share() {
    use kernel_oracle::mul_mat::{count_drawn, stats_line, STATS};
    for x in 0..=u16::MAX {
        kernel_oracle::stats::count(&STATS.cases);
        count_drawn(
            &CaseSpec::arbitrary(&mut Unstructured::new(&[x as u8, 0, 0, (x >> 8) as u8])).unwrap(),
        );
    }
    let line = stats_line();
    for want in [
        "65536 cases",
        "EXACT 22016 (33.6%)",
        "RANDOM 21760 (33.2%)",
        "BAL 21760 (33.2%)",
        "16x16/16 8192 (12.5%)",
        "8x4/40 8192 (12.5%)",
        "4x8/8 8192 (12.5%)",
        "8x8/32 8192 (12.5%)",
        "4x4/6 8192 (12.5%)",
        "3x4/48 8192 (12.5%)",
        "4x4/64 8192 (12.5%)",
        "4x4/72 8192 (12.5%)",
        "f32 65536 (100.0%)",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
}

#[test]
fn bounded_arms_refuse_a_k_where_gamma_k_is_undefined() {
    use kernel_oracle::mul_mat::generate::MAX_BOUNDED_K;
    use kernel_oracle::mul_mat::judge::gamma;
    // The longest whole-block K below 2^24 is judged with a finite,
    // positive gamma; 2^24 and past it (gamma infinite, then negative: a
    // correct kernel failed RANDOM at K = 2^24 + 256) are refused.
    let longest = MAX_BOUNDED_K / 256 * 256;
    assert!(gamma(longest).is_finite() && gamma(longest) > 0.0);
    for (k, ok) in [(longest, true), (1 << 24, false), ((1 << 24) + 256, false)] {
        for arm in [Arm::Random, Arm::Balanced] {
            let spec = CaseSpec {
                dtype: Dtype::Q8_0,
                m: 1,
                n: 1,
                k,
                arm,
                seed: 1,
            };
            let v = spec.valid();
            assert_eq!(v.is_ok(), ok, "k = {k}, {arm:?}: {v:?}");
            if let Err(e) = v {
                assert!(e.contains("K u < 1"), "{e}");
            }
        }
    }
}
