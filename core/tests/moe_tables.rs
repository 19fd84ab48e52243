//! The MoE verify-rows tables contract, rule by rule.

use oracle::moe_tables::{
    down_scale, slab_pointer, vrows_tables, Bank, Plane, Slab, TablesError, CANONICAL_NAN, PLANES,
};

const BASES: [u64; 3] = [
    0x0000_7f00_0000_0000,
    0x0000_7f40_0000_0000,
    0x0000_7f80_0000_0000,
];

fn slabs(strides: [u64; 3]) -> [Slab; PLANES] {
    [0, 1, 2].map(|i| Slab {
        base: BASES[i],
        stride: strides[i],
    })
}

/// Runs the contract into fresh outputs.
fn tables(bank: &Bank<'_>, e: &[i32], w: &[f32]) -> Result<(Vec<u64>, Vec<f32>), TablesError> {
    let mut p = vec![0u64; 3 * e.len()];
    let mut s = vec![0f32; 3 * e.len()];
    vrows_tables(bank, e, w, &mut p, &mut s)?;
    Ok((p, s))
}

fn planes(n: usize) -> [Vec<f32>; 3] {
    [1.0f32, 2.0, 3.0].map(|o| (0..n).map(|i| o + i as f32 * 1e-3).collect())
}

#[test]
fn ptr_64_serving_strides_reach_past_4_gib() {
    // The seed's serving case: 24/24/48 MiB per expert, 256 experts; the
    // last expert sits 6 GiB into the gate slab and 12 GiB into the down slab.
    let bank = Bank {
        n_expert: 256,
        slabs: slabs([24 << 20, 24 << 20, 48 << 20]),
        macros: None,
    };
    let (p, _) = tables(&bank, &[255, 0], &[1.0, 1.0]).unwrap();
    assert_eq!(p[0], BASES[0] + 255 * (24 << 20));
    assert_eq!(p[0] - BASES[0], 0x1_7E80_0000); // 5.98 GiB: past 2^32
    assert_eq!(p[2], BASES[1] + 255 * (24 << 20));
    assert_eq!(p[4] - BASES[2], 255 * (48u64 << 20)); // 11.95 GiB
    assert_eq!(p[1], BASES[0]);
    // A 32-bit product would have wrapped: 255 * 24 MiB mod 2^32.
    assert_ne!(p[0] - BASES[0], u64::from(255u32.wrapping_mul(24 << 20)));
}

#[test]
fn ptr_64_past_2_pow_40() {
    let stride = (5u64 << 30) + 4096 + 3; // odd: no power-of-two shortcut
    let bank = Bank {
        n_expert: 1024,
        slabs: [Slab { base: 0, stride }; 3],
        macros: None,
    };
    let (p, _) = tables(&bank, &[1023], &[0.5]).unwrap();
    assert_eq!(p[0], 1023 * stride);
    assert!(p[0] > 1 << 40);
}

#[test]
fn ptr_64_the_last_byte_of_the_address_space_is_reachable_one_more_is_an_error() {
    let slab = Slab {
        base: u64::MAX - 10,
        stride: 5,
    };
    assert_eq!(slab_pointer(slab, 2), Some(u64::MAX));
    assert_eq!(slab_pointer(slab, 3), None);
    // A product that alone exceeds 64 bits.
    assert_eq!(
        slab_pointer(
            Slab {
                base: 0,
                stride: 1 << 40
            },
            1 << 30
        ),
        None
    );
    let bank = Bank {
        n_expert: 8,
        slabs: [
            Slab { base: 0, stride: 1 },
            Slab { base: 0, stride: 1 },
            slab,
        ],
        macros: None,
    };
    assert!(tables(&bank, &[2], &[1.0]).is_ok());
    assert_eq!(
        tables(&bank, &[1, 3], &[1.0, 1.0]),
        Err(TablesError::AddressOverflow {
            plane: Plane::Down,
            pair: 1,
            expert: 3,
            base: u64::MAX - 10,
            stride: 5
        })
    );
}

#[test]
fn range_negative_and_too_large_ids_are_errors_naming_the_first_pair() {
    let bank = Bank {
        n_expert: 4,
        slabs: slabs([16; 3]),
        macros: None,
    };
    for bad in [-1, 4, i32::MIN, i32::MAX] {
        assert_eq!(
            tables(&bank, &[0, 3, bad, -7], &[1.0; 4]),
            Err(TablesError::ExpertRange {
                pair: 2,
                expert: bad,
                n_expert: 4
            })
        );
    }
    let msg = tables(&bank, &[4], &[1.0]).unwrap_err().to_string();
    assert_eq!(
        msg,
        "pair 0 selects expert 4, outside the bank's experts 0..4"
    );
}

#[test]
fn range_is_checked_before_overflow_within_a_pair_and_pairs_in_order() {
    let bank = Bank {
        n_expert: 4,
        slabs: [Slab {
            base: u64::MAX,
            stride: 1,
        }; 3],
        macros: None,
    };
    // Pair 0 overflows (gate first), pair 1 is out of range: pair 0 wins.
    assert!(matches!(
        tables(&bank, &[1, 9], &[1.0; 2]),
        Err(TablesError::AddressOverflow {
            plane: Plane::Gate,
            pair: 0,
            ..
        })
    ));
    // Pair 0 is out of range and would overflow too: range wins.
    assert!(matches!(
        tables(&bank, &[9, 1], &[1.0; 2]),
        Err(TablesError::ExpertRange { pair: 0, .. })
    ));
    // Expert 0 never overflows (base + 0).
    assert!(tables(&bank, &[0], &[1.0]).is_ok());
}

#[test]
fn all_or_nothing_errors_write_nothing() {
    let bank = Bank {
        n_expert: 4,
        slabs: slabs([16; 3]),
        macros: None,
    };
    let mut p = vec![0xAAAA_u64; 9];
    let mut s = vec![7.0f32; 9];
    let err = vrows_tables(&bank, &[0, 1, 5], &[1.0; 3], &mut p, &mut s);
    assert!(err.is_err());
    assert!(p.iter().all(|&v| v == 0xAAAA) && s.iter().all(|&v| v == 7.0));
}

#[test]
fn lengths_are_checked_in_signature_order() {
    let m = planes(4);
    let short = vec![1.0f32; 3];
    let bank = Bank {
        n_expert: 4,
        slabs: slabs([16; 3]),
        macros: Some([&m[0], &short, &m[2]]),
    };
    let mut p = vec![0u64; 6];
    let mut s = vec![0f32; 5];
    assert_eq!(
        vrows_tables(&bank, &[0, 1], &[1.0], &mut p, &mut s),
        Err(TablesError::Len {
            arg: "weights",
            want: 2,
            got: 1
        })
    );
    let err = vrows_tables(&bank, &[0, 1], &[1.0; 2], &mut p, &mut s).unwrap_err();
    assert_eq!(
        err,
        TablesError::Len {
            arg: "macro_u",
            want: 4,
            got: 3
        }
    );
    assert_eq!(err.to_string(), "macro_u has 3 elements, the tables need 4");
    let bank = Bank {
        macros: Some([&m[0], &m[1], &m[2]]),
        ..bank
    };
    assert_eq!(
        vrows_tables(&bank, &[0, 1], &[1.0; 2], &mut p, &mut s),
        Err(TablesError::Len {
            arg: "scales",
            want: 6,
            got: 5
        })
    );
    assert_eq!(
        vrows_tables(&bank, &[0, 1], &[1.0; 2], &mut p[..5], &mut [0.0; 6]),
        Err(TablesError::Len {
            arg: "ptrs",
            want: 6,
            got: 5
        })
    );
}

#[test]
fn zero_pairs_is_empty_tables() {
    let bank = Bank {
        n_expert: 1,
        slabs: slabs([1; 3]),
        macros: None,
    };
    assert_eq!(tables(&bank, &[], &[]), Ok((vec![], vec![])));
}

#[test]
fn scale_copy_gate_and_up_are_the_macro_bits_down_is_w_times_macro_d() {
    let m = planes(256);
    let bank = Bank {
        n_expert: 256,
        slabs: slabs([860_160, 860_160, 1_114_112]),
        macros: Some([&m[0], &m[1], &m[2]]),
    };
    let sel = [0, 1, 17, 63, 128, 200, 254, 255];
    let w = [0.5, 0.25, 0.125, 1.0, 0.0625, 0.75, 0.375, 0.875];
    let (p, s) = tables(&bank, &sel, &w).unwrap();
    for (i, (&e, &wi)) in sel.iter().zip(&w).enumerate() {
        let e = e as usize;
        assert_eq!(s[i].to_bits(), m[0][e].to_bits());
        assert_eq!(s[8 + i].to_bits(), m[1][e].to_bits());
        assert_eq!(s[16 + i].to_bits(), (wi * m[2][e]).to_bits());
        assert_eq!(p[16 + i], BASES[2] + e as u64 * 1_114_112);
    }
}

#[test]
fn scale_copy_keeps_nan_payloads_and_subnormals_of_gate_and_up() {
    let g = [f32::from_bits(0x7F80_0001), f32::from_bits(0x0000_0001)]; // sNaN, min subnormal
    let u = [f32::from_bits(0xFFC1_2345), -0.0];
    let d = [1.0, 1.0];
    let bank = Bank {
        n_expert: 2,
        slabs: slabs([1; 3]),
        macros: Some([&g, &u, &d]),
    };
    let (_, s) = tables(&bank, &[0, 1], &[1.0, 1.0]).unwrap();
    let bits: Vec<u32> = s.iter().map(|v| v.to_bits()).collect();
    assert_eq!(
        bits,
        [
            0x7F80_0001,
            0x0000_0001,
            0xFFC1_2345,
            0x8000_0000,
            0x3F80_0000,
            0x3F80_0000
        ]
    );
}

#[test]
fn no_macro_gate_and_up_are_one_down_is_the_weight() {
    let bank = Bank {
        n_expert: 4,
        slabs: slabs([16; 3]),
        macros: None,
    };
    let (_, s) = tables(&bank, &[3, 0], &[0.3, -2.5]).unwrap();
    assert_eq!(s, [1.0, 1.0, 1.0, 1.0, 0.3, -2.5]);
}

#[test]
fn nan_1_nan_propagates_as_the_canonical_nan() {
    // Any NaN weight, whatever its sign and payload, and a NaN macro_d, and
    // 0 * inf, all give 0x7FFFFFFF.
    for w in [
        0x7FC0_0000u32,
        0xFFC0_0000,
        0x7F80_0001,
        0xFFBF_FFFF,
        0x7FFF_FFFF,
    ] {
        let s = down_scale(f32::from_bits(w), 1.0);
        assert_eq!(s.to_bits(), CANONICAL_NAN, "w = 0x{w:08X}");
        let s = down_scale(f32::from_bits(w), 0.0);
        assert_eq!(s.to_bits(), CANONICAL_NAN, "w = 0x{w:08X} times 0");
    }
    assert_eq!(down_scale(0.5, f32::NAN).to_bits(), CANONICAL_NAN);
    assert_eq!(down_scale(0.0, f32::INFINITY).to_bits(), CANONICAL_NAN);
    // Through the tables, with and without macro planes.
    let bank = Bank {
        n_expert: 1,
        slabs: slabs([1; 3]),
        macros: None,
    };
    let (_, s) = tables(&bank, &[0], &[f32::from_bits(0xFFC0_1234)]).unwrap();
    assert_eq!(s[2].to_bits(), CANONICAL_NAN);
}

#[test]
fn down_1_negative_zero_subnormal_and_overflow_follow_ieee_multiplication() {
    assert_eq!(down_scale(-0.0, 1.0).to_bits(), 0x8000_0000); // -0 * 1 = -0
    assert_eq!(down_scale(-0.0, -3.0).to_bits(), 0x0000_0000); // -0 * -3 = +0
    assert_eq!(down_scale(-0.75, 2.0), -1.5);
    // Subnormal weight times 0.5: 0x00000003 * 0.5 = 1.5 ulp -> ties to even 2.
    //   0x00000003 = 0b11 x 2^-149; times 2^-1 = 0b1.1 x 2^-149: round to 0b10.
    assert_eq!(down_scale(f32::from_bits(3), 0.5).to_bits(), 2);
    // Normal times normal into the subnormal range, kept (no flush to zero).
    assert_eq!(down_scale(f32::MIN_POSITIVE, 0.25).to_bits(), 0x0020_0000);
    // Overflow to infinity.
    assert_eq!(down_scale(f32::MAX, 2.0), f32::INFINITY);
    assert_eq!(down_scale(f32::MAX, -2.0), f32::NEG_INFINITY);
}

#[test]
fn errors_display_as_sentences() {
    let e = TablesError::AddressOverflow {
        plane: Plane::Up,
        pair: 3,
        expert: 7,
        base: 0xffff_ffff_ffff_0000,
        stride: 1 << 20,
    };
    assert_eq!(
        e.to_string(),
        "pair 3 (expert 7): the up pointer 0xffffffffffff0000 + 7 * 1048576 bytes does not fit in 64 bits"
    );
    assert_eq!(
        TablesError::TooManyPairs {
            n_pairs: usize::MAX
        }
        .to_string(),
        format!(
            "{} pairs are too many: 3 * n_pairs table entries do not fit in usize",
            usize::MAX
        )
    );
}
