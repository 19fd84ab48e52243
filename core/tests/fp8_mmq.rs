//! The v2 per-block FP8 GEMM contract, rule by rule.

use oracle::fp8_mmq::{count_nan_magnitude, mmq_v2, quantize_activations, Shape, ShapeError};

/// Quantizes and multiplies, returning (q, d, y).
fn run(shape: &Shape, w: &[u8], scales: &[f32], x: &[f32]) -> (Vec<u8>, Vec<f32>, Vec<f32>) {
    let mut q = vec![0u8; shape.q_len()];
    let mut d = vec![0f32; shape.d_len()];
    quantize_activations(shape, x, &mut q, &mut d).unwrap();
    let mut y = vec![0f32; shape.out_len()];
    mmq_v2(shape, w, scales, &q, &d, &mut y).unwrap();
    (q, d, y)
}

#[test]
fn shape_pads_rows_to_512_and_sizes_the_scale_grid() {
    let s = Shape::new(3, 144, 200).unwrap();
    assert_eq!(s.in_f_pad(), 512);
    assert_eq!((s.scale_rows(), s.scale_cols()), (2, 2));
    assert_eq!((s.act_blocks(), s.q_len(), s.d_len()), (4, 3 * 512, 3 * 4));
    assert_eq!(Shape::new(1, 512, 1).unwrap().in_f_pad(), 512);
    assert_eq!(Shape::new(1, 513, 1).unwrap().in_f_pad(), 1024);
}

#[test]
fn zero_and_overflowing_shapes_are_errors() {
    assert_eq!(Shape::new(0, 128, 128), Err(ShapeError::Zero { dim: "m" }));
    assert_eq!(Shape::new(1, 0, 128), Err(ShapeError::Zero { dim: "in_f" }));
    assert_eq!(
        Shape::new(1, 128, 0),
        Err(ShapeError::Zero { dim: "out_f" })
    );
    assert!(matches!(
        Shape::new(1, usize::MAX, 1),
        Err(ShapeError::Overflow { .. })
    ));
    assert!(matches!(
        Shape::new(1 << 40, 1 << 30, 1),
        Err(ShapeError::Overflow { .. })
    ));
    assert!(matches!(
        Shape::new(1, 1 << 31, 1 << 31),
        Err(ShapeError::Overflow { .. })
    ));
}

#[test]
fn wrong_lengths_are_errors_and_write_nothing() {
    let s = Shape::new(1, 128, 128).unwrap();
    let mut q = vec![0xAAu8; s.q_len()];
    let mut d = vec![7.0f32; s.d_len()];
    let err = quantize_activations(&s, &[1.0; 127], &mut q, &mut d).unwrap_err();
    assert_eq!(
        err,
        ShapeError::Len {
            arg: "x",
            want: 128,
            got: 127
        }
    );
    assert!(q.iter().all(|&b| b == 0xAA) && d.iter().all(|&v| v == 7.0));
    let mut y = vec![0f32; 128];
    let err = mmq_v2(&s, &[0; 128 * 128], &[1.0; 2], &q, &d, &mut y).unwrap_err();
    assert_eq!(
        err,
        ShapeError::Len {
            arg: "scales",
            want: 1,
            got: 2
        }
    );
    assert_eq!(format!("{err}"), "scales has 2 elements, the shape needs 1");
}

#[test]
fn nan_w_counts_both_nan_magnitudes() {
    assert_eq!(
        count_nan_magnitude(&[0x7F, 0xFF, 0x7E, 0xFE, 0x00, 0x80, 0x7F]),
        3
    );
    assert_eq!(count_nan_magnitude(&[]), 0);
}

#[test]
fn quant_zero_block_gives_zero_scale_and_zero_codes() {
    let s = Shape::new(1, 256, 1).unwrap();
    let mut x = vec![0f32; 256];
    x[200] = -3.0; // block 1 non-zero, block 0 all zero
    let (q, d, _) = run(&s, &[0x38; 256], &[1.0; 2], &x);
    assert_eq!(&d, &[0.0, 3.0 / 448.0, 0.0, 0.0]);
    assert!(q[..128].iter().all(|&c| c == 0x00));
    assert_eq!(q[200], 0xFE, "amax maps to -448");
    assert!(
        q[256..].iter().all(|&c| c == 0x00),
        "padding blocks are zero"
    );
}

#[test]
fn quant_scale_is_amax_over_448_and_codes_round_to_nearest_even() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![0f32; 128];
    x[0] = 448.0; // d = 1, dinv = 1: q = e4m3(x) exactly
                  // In [16, 32) codes are 0x58 + n for 16 + 2n (exponent field 1011).
    x[1] = 17.0; // 1.0001 x 2^4: tie between 16 (0x58, mantissa 000) and 18 (0x59); even gives 0x58
    x[2] = 19.0; // 1.0011 x 2^4: tie between 18 (0x59) and 20 (0x5A, mantissa 010); even gives 0x5A
    x[3] = 0.5; // exact code 0x30
    let (q, d, _) = run(&s, &[0; 128], &[1.0], &x);
    assert_eq!(d[0], 1.0);
    assert_eq!(&q[..4], &[0x7E, 0x58, 0x5A, 0x30]);
}

#[test]
fn quant_tiny_amax_makes_zeros_nan() {
    // amax below 448 / f32::MAX: dinv overflows to +inf, 0 * inf = NaN (QUANT-TINY).
    let s = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![0f32; 128];
    x[5] = f32::from_bits(1); // smallest subnormal
    let (q, d, y) = run(&s, &[0x38; 128], &[1.0], &x);
    assert_eq!(d[0].to_bits(), (f32::from_bits(1) / 448.0).to_bits());
    assert_eq!(q[5], 0x7E);
    assert_eq!(q[0], 0x7F);
    assert!(y[0].is_nan(), "the GEMM reads activation code 0x7F as NaN");
}

#[test]
fn quant_nan_element_never_becomes_amax() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![1.0f32; 128];
    x[0] = f32::NAN;
    x[1] = 2.0;
    let (q, d, _) = run(&s, &[0; 128], &[1.0], &x);
    assert_eq!(d[0], 2.0 / 448.0);
    assert_eq!(q[0], 0x7F);
    assert_eq!(q[1], 0x7E);
}

#[test]
fn k_tail_is_zero_filled_and_uses_the_last_scale_column() {
    // in_f = 144: block 1 holds k = 128..143 and nothing else. The
    // activation operand is given directly, with non-zero codes past in_f,
    // so reading anything but +0.0 for w(i, k >= 144) (for example the next
    // row's weights) changes the answer.
    let s = Shape::new(1, 144, 2).unwrap();
    let mut w = vec![0x38u8; 2 * 144]; // row 0: all 1.0
    w[144..].fill(0x40); // row 1: all 2.0
    let mut q = vec![0x38u8; s.q_len()]; // every activation code 1.0, padding too
    q[0] = 0x30; // 0.5 at k = 0
    let d = [1.0f32, 1.0, 1.0, 1.0];
    let scales = [0.5f32, 4.0];
    let mut y = vec![0f32; 2];
    mmq_v2(&s, &w, &scales, &q, &d, &mut y).unwrap();
    // row 0: (0.5 * 1) * (0.5 + 127) + (4 * 1) * 16
    assert_eq!(y[0], 0.5 * 127.5 + 4.0 * 16.0);
    // row 1: (0.5 * 1) * (2 * 127.5) + (4 * 1) * (2 * 16)
    assert_eq!(y[1], 0.5 * 255.0 + 4.0 * 32.0);
}

#[test]
fn nan_w_codes_read_as_zero_in_the_spec() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut w = vec![0x38u8; 128];
    w[3] = 0x7F;
    w[4] = 0xFF;
    let q = vec![0x38u8; s.q_len()];
    let mut y = [0f32];
    mmq_v2(&s, &w, &[1.0], &q, &[1.0; 4], &mut y).unwrap();
    assert_eq!(y[0], 126.0);
    assert_eq!(count_nan_magnitude(&w), 2);
}

#[test]
fn act_nan_codes_read_as_nan() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut q = vec![0x00u8; s.q_len()];
    q[9] = 0xFF;
    let mut y = [0f32];
    mmq_v2(&s, &[0x38; 128], &[1.0], &q, &[1.0; 4], &mut y).unwrap();
    assert!(y[0].is_nan());
}

#[test]
fn quant_zero_block_writes_0x00_for_negative_zero_and_nan() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![-0.0f32; 128];
    x[1] = f32::NAN;
    let (q, d, _) = run(&s, &[0; 128], &[1.0], &x);
    assert_eq!(d[0].to_bits(), 0);
    assert!(q.iter().all(|&c| c == 0x00), "{:02X?}", &q[..4]);
}

#[test]
fn quant_inf_element_gives_inf_scale_and_nan_code() {
    let s = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![3.0f32; 128];
    x[2] = f32::NEG_INFINITY;
    x[3] = -5.0;
    let (q, d, y) = run(&s, &[0x38; 128], &[1.0], &x);
    assert_eq!(d[0], f32::INFINITY);
    assert_eq!(q[2], 0x7F, "-inf * 0 = NaN, satfinite gives 0x7F");
    assert_eq!(q[0], 0x00);
    assert_eq!(q[3], 0x80, "-5 * 0 = -0.0");
    assert!(y[0].is_nan());
}

#[test]
fn partial_grid_rows_use_the_last_scale_row() {
    // out_f = 200: rows 128..199 use scale row 1.
    let s = Shape::new(1, 128, 200).unwrap();
    let w = vec![0x38u8; 200 * 128];
    let mut x = vec![0f32; 128];
    x[7] = 448.0;
    let (_, _, y) = run(&s, &w, &[2.0, 8.0], &x);
    assert!(y[..128].iter().all(|&v| v == 896.0));
    assert!(y[128..].iter().all(|&v| v == 3584.0));
}

#[test]
fn fold_multiplies_scales_first_and_rounds_each_operation() {
    // sum = (s * d) * c, s * d rounded first. Find a scale for which the
    // other association, s * (d * c), gives other bits, so this test can
    // tell the two apart, then require the contract's bits.
    let shape = Shape::new(1, 128, 1).unwrap();
    let mut x = vec![0f32; 128];
    x[0] = 448.0 * 1.1; // d = 1.1 (rounded), codes exact multiples
    x[1] = 3.0 * 1.1;
    let mut w = vec![0u8; 128];
    w[0] = 0x38; // 1.0
    w[1] = 0x44; // 3.0
    let mut discriminating = 0;
    for bits in 0x3F80_0001u32..0x3F80_0400 {
        let s_blk = f32::from_bits(bits);
        let (q, d, y) = run(&shape, &w, &[s_blk], &x);
        let decode = |c| oracle::e4m3::decode_e4m3(c, oracle::conventions::NanMagnitude::Ieee);
        let c = 1.0 * decode(q[0]) + 3.0 * decode(q[1]);
        assert_eq!(y[0].to_bits(), (0.0 + (s_blk * d[0]) * c).to_bits());
        if (s_blk * d[0]) * c != s_blk * (d[0] * c) {
            discriminating += 1;
        }
    }
    assert!(
        discriminating > 100,
        "only {discriminating} scales tell the associations apart"
    );
}

#[test]
fn blocks_fold_in_increasing_order() {
    // Three blocks whose folds only cancel exactly in order:
    // 2^24 + 1 - 2^24 = 0 in f32 left to right, 1 right to left.
    let shape = Shape::new(1, 384, 1).unwrap();
    let w = vec![0x38u8; 384];
    let mut x = vec![0f32; 384];
    x[0] = 448.0;
    x[128] = 448.0;
    x[256] = 448.0;
    let scales = [2f32.powi(24) / 448.0, 1.0 / 448.0, -(2f32.powi(24)) / 448.0];
    let (_, _, y) = run(&shape, &w, &scales, &x);
    assert_eq!(
        y[0], 0.0,
        "(2^24 + 1) rounds to 2^24 before the third block subtracts it"
    );
}

mod schedules {
    use oracle::e4m3::decode_e4m3;
    use oracle::fma::fma_f32;
    use oracle::fp8_mmq::{mma_weight_code, mmq, mmq_v2, Accumulation, Fold, Schedule, Shape};
    use oracle::tensor_core::{mma_k32, Fp8Kind, SM90_WGMMA};

    /// Deterministic operands: every weight code but the NaN magnitudes
    /// (and a few of those, which every schedule reads as 0.0), activation
    /// codes, scales with full significands.
    fn operands(shape: &Shape, nan_w: bool) -> (Vec<u8>, Vec<f32>, Vec<u8>, Vec<f32>) {
        let mut x = 0x9E37_79B9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let w: Vec<u8> = (0..shape.weight_len())
            .map(|_| {
                let c = next() as u8;
                if c & 0x7F == 0x7F && !nan_w {
                    0x11
                } else {
                    c
                }
            })
            .collect();
        let frac = |v: u32| 1.0 + (v >> 9) as f32 / (1u32 << 23) as f32;
        let scales: Vec<f32> = (0..shape.scale_len())
            .map(|_| frac(next()) / 64.0)
            .collect();
        let q: Vec<u8> = (0..shape.q_len())
            .map(|_| {
                let c = next() as u8;
                if c & 0x7F == 0x7F {
                    0x22
                } else {
                    c
                }
            })
            .collect();
        let d: Vec<f32> = (0..shape.d_len()).map(|_| frac(next()) / 300.0).collect();
        (w, scales, q, d)
    }

    fn run(shape: &Shape, s: &Schedule, w: &[u8], sc: &[f32], q: &[u8], d: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; shape.out_len()];
        mmq(shape, s, w, sc, q, d, &mut y).unwrap();
        y
    }

    #[test]
    fn v2_is_the_default_schedule_and_mmq_v2_computes_it() {
        assert_eq!(Schedule::default(), Schedule::V2);
        let shape = Shape::new(3, 300, 130).unwrap();
        let (w, sc, q, d) = operands(&shape, true);
        let mut y = vec![0f32; shape.out_len()];
        mmq_v2(&shape, &w, &sc, &q, &d, &mut y).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(&run(&shape, &Schedule::V2, &w, &sc, &q, &d)));
    }

    /// The fold of each schedule, restated outside the spec: per block the
    /// f32 chain in increasing k, then `sum + (s d) c`, `fma(s d, c, sum)`,
    /// `sum + (c d) s` or `fma(c d, s, sum)`.
    #[test]
    fn fold_separate_rounds_three_times_and_fused_once() {
        let shape = Shape::new(2, 300, 3).unwrap();
        let (w, sc, q, d) = operands(&shape, false);
        for fold in Fold::ALL {
            let y = run(
                &shape,
                &Schedule {
                    fold,
                    accumulation: Accumulation::F32,
                },
                &w,
                &sc,
                &q,
                &d,
            );
            for j in 0..2 {
                for i in 0..3 {
                    let mut sum = 0f32;
                    for b in 0..3 {
                        let mut c = 0f32;
                        for k in b * 128..b * 128 + 128 {
                            let wv = if k < 300 {
                                decode_e4m3(
                                    w[i * 300 + k],
                                    oracle::conventions::NanMagnitude::ReadAsZero,
                                )
                            } else {
                                0.0
                            };
                            c += wv
                                * decode_e4m3(
                                    q[j * 512 + k],
                                    oracle::conventions::NanMagnitude::Ieee,
                                );
                        }
                        let (s, dv) = (sc[b], d[j * 4 + b]);
                        sum = match fold {
                            Fold::Separate => sum + (s * dv) * c,
                            Fold::Fused => fma_f32(s * dv, c, sum),
                            Fold::PartialFirst => sum + (c * dv) * s,
                            Fold::PartialFirstFused => fma_f32(c * dv, s, sum),
                        };
                    }
                    assert_eq!(
                        y[j * 3 + i].to_bits(),
                        sum.to_bits(),
                        "{fold:?} y[{j}, {i}]"
                    );
                }
            }
        }
        // Every two folds differ somewhere on real scales.
        let ys: Vec<Vec<f32>> = Fold::ALL
            .iter()
            .map(|&fold| {
                let s = Schedule {
                    fold,
                    accumulation: Accumulation::F32,
                };
                run(&shape, &s, &w, &sc, &q, &d)
            })
            .collect();
        for (x, a) in ys.iter().enumerate() {
            for b in &ys[x + 1..] {
                assert!(a.iter().zip(b).any(|(p, q)| p.to_bits() != q.to_bits()));
            }
        }
    }

    /// TensorCore accumulation: four chained `mma_k32` per block in
    /// increasing k, weights as the A operand, the k tail and NaN-magnitude
    /// weight codes read as 0x00, activation codes as stored.
    #[test]
    fn tensor_core_accumulation_chains_four_k32_mmas_per_block() {
        let shape = Shape::new(2, 200, 5).unwrap(); // k tail: 200 % 128 = 72
        let (w, sc, q, d) = operands(&shape, true);
        assert!(w.iter().any(|&c| c & 0x7F == 0x7F));
        for fold in Fold::ALL {
            let schedule = Schedule {
                fold,
                accumulation: Accumulation::TensorCore(SM90_WGMMA),
            };
            let y = run(&shape, &schedule, &w, &sc, &q, &d);
            for j in 0..2 {
                for i in 0..5 {
                    let mut sum = 0f32;
                    for b in 0..2 {
                        let mut c = 0f32;
                        for t in 0..4 {
                            let mut w32 = [0u8; 32];
                            let mut a32 = [0u8; 32];
                            for kk in 0..32 {
                                let k = b * 128 + t * 32 + kk;
                                let code = if k < 200 { w[i * 200 + k] } else { 0 };
                                w32[kk] = if code & 0x7F == 0x7F { 0 } else { code };
                                a32[kk] = q[j * 512 + k];
                            }
                            c = mma_k32(&SM90_WGMMA, Fp8Kind::E4m3, &w32, Fp8Kind::E4m3, &a32, c);
                        }
                        let (s, dv) = (sc[b], d[j * 4 + b]);
                        sum = match fold {
                            Fold::Separate => sum + (s * dv) * c,
                            Fold::Fused => fma_f32(s * dv, c, sum),
                            Fold::PartialFirst => sum + (c * dv) * s,
                            Fold::PartialFirstFused => fma_f32(c * dv, s, sum),
                        };
                    }
                    assert_eq!(
                        y[j * 5 + i].to_bits(),
                        sum.to_bits(),
                        "{fold:?} y[{j}, {i}]"
                    );
                }
            }
        }
    }

    #[test]
    fn nan_magnitude_weight_codes_reach_the_mma_as_zero() {
        assert_eq!(mma_weight_code(0x7F), 0x00);
        assert_eq!(mma_weight_code(0xFF), 0x00);
        for c in (0..=255u8).filter(|c| c & 0x7F != 0x7F) {
            assert_eq!(mma_weight_code(c), c);
        }
    }

    #[test]
    fn known_schedules_have_distinct_names() {
        let names: Vec<String> = Schedule::KNOWN.iter().map(|s| s.to_string()).collect();
        assert_eq!(names[0], "v2");
        assert_eq!(names[1], "v2 + fused fold");
        assert_eq!(names[2], "sm90 FP8 wgmma + fused fold");
        assert_eq!(names[3], "sm90 FP8 wgmma + separate fold");
        assert!(!Schedule::V2.bit_exact() && Schedule::SM90_WGMMA_FUSED.bit_exact());
    }
}
