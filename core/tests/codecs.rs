//! The float codecs, code by code and rule by rule (fast; always run).
//!
//! Every FP8 code is decoded and checked against a small formula written
//! here; each named rule of `oracle::fp8` (SAT-1, NONSAT-1, ENC-NAN, ...)
//! has a test named for it; rounding tests show the input in binary with
//! the tie position marked. The exhaustive encode checks over all 2^32
//! `f32` patterns are in `codecs_exhaustive.rs`.

use oracle::bf16::{self, decode_bf16, encode_bf16};
use oracle::conventions::{NanMagnitude, Overflow};
use oracle::e4m3::{self, decode_e4m3, encode_e4m3, E4m3};
use oracle::e5m2::{self, decode_e5m2, encode_e5m2, E5m2};
use oracle::f16::{self, decode_f16, encode_f16};
use oracle::fp8::{self, Fp8Format, E4M3FN, E5M2};

const BOTH: [Overflow; 2] = [Overflow::SatFinite, Overflow::NonSaturating];
const SAT: Overflow = Overflow::SatFinite;
const NONSAT: Overflow = Overflow::NonSaturating;

/// `2^k` in `f64`, by repeated doubling or halving (independent of any
/// bit construction in the code under test).
fn pow2(k: i32) -> f64 {
    let mut v = 1.0f64;
    for _ in 0..k.unsigned_abs() {
        v = if k > 0 { v * 2.0 } else { v / 2.0 };
    }
    v
}

/// The textbook value of a finite FP8 code, in `f64`:
/// `(-1)^s * 0.m * 2^(1 - bias)` for exponent field 0, else
/// `(-1)^s * 1.m * 2^(e - bias)`.
fn formula(ebits: u32, mbits: u32, bias: i32, code: u8) -> f64 {
    let s = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = ((code & 0x7F) >> mbits) as i32;
    let m = (code as u32 & ((1 << mbits) - 1)) as f64 / (1u32 << mbits) as f64;
    assert!(e < (1 << ebits));
    if e == 0 {
        s * m * pow2(1 - bias)
    } else {
        s * (1.0 + m) * pow2(e - bias)
    }
}

fn bits(x: f32) -> u32 {
    x.to_bits()
}

// ---------------------------------------------------------------------------
// Formats.

/// The format parameters are self-consistent: 1 + e + m = 8 bits;
/// `max_finite` is the largest magnitude that is neither NaN nor infinity;
/// `nan` is a NaN; the infinity code (E5M2) is an infinity.
#[test]
fn format_parameters_are_consistent() {
    for f in [&E4M3FN, &E5M2] {
        assert_eq!(1 + f.exponent_bits + f.mantissa_bits, 8, "{}", f.name);
        let largest = (0u8..=0x7F)
            .filter(|&c| !f.is_nan(c) && !f.is_infinite(c))
            .max()
            .unwrap();
        assert_eq!(largest, f.max_finite, "{}", f.name);
        assert!(f.is_nan(f.nan) && f.is_nan(f.nan | 0x80), "{}", f.name);
        if let Some(inf) = f.infinity() {
            assert!(f.is_infinite(inf) && f.is_infinite(inf | 0x80));
        }
    }
    assert_eq!(e4m3::MAX_FINITE, E4M3FN.max_finite);
    assert_eq!(e4m3::NAN, E4M3FN.nan);
    assert_eq!(e5m2::MAX_FINITE, E5M2.max_finite);
    assert_eq!(e5m2::NAN, E5M2.nan);
    assert_eq!(E5M2.infinity(), Some(e5m2::INFINITY));
    assert_eq!(E4M3FN.infinity(), None);
    assert_eq!(
        decode_e4m3(e4m3::MAX_FINITE, NanMagnitude::Ieee),
        e4m3::MAX_FINITE_VALUE
    );
    assert_eq!(
        decode_e5m2(e5m2::MAX_FINITE, NanMagnitude::Ieee),
        e5m2::MAX_FINITE_VALUE
    );
}

/// Which codes are special, by count: E4M3FN has 2 NaN codes and no
/// infinity; E5M2 has 6 NaN codes and 2 infinities.
#[test]
fn special_code_counts() {
    let count = |f: &Fp8Format, p: &dyn Fn(&Fp8Format, u8) -> bool| {
        (0u8..=0xFF).filter(|&c| p(f, c)).count()
    };
    assert_eq!(count(&E4M3FN, &|f, c| f.is_nan(c)), 2);
    assert_eq!(count(&E4M3FN, &|f, c| f.is_infinite(c)), 0);
    assert_eq!(count(&E5M2, &|f, c| f.is_nan(c)), 6);
    assert_eq!(count(&E5M2, &|f, c| f.is_infinite(c)), 2);
    for c in 0u8..=0xFF {
        assert_eq!(E4m3::from_bits(c).is_nan(), E4M3FN.is_nan(c));
        assert_eq!(E5m2::from_bits(c).is_nan(), E5M2.is_nan(c));
        assert_eq!(E5m2::from_bits(c).is_infinite(), E5M2.is_infinite(c));
    }
}

// ---------------------------------------------------------------------------
// Decode: all 256 codes of each format.

/// E4M3FN: all 256 codes against the formula; `0x7F`/`0xFF` are NaN with
/// the code's sign under Ieee (DEC-NAN-IEEE) and `+0.0` under ReadAsZero
/// (DEC-NAN-ZERO).
#[test]
fn e4m3_decodes_all_256_codes() {
    for code in 0u8..=0xFF {
        let ieee = decode_e4m3(code, NanMagnitude::Ieee);
        let zero = decode_e4m3(code, NanMagnitude::ReadAsZero);
        if code & 0x7F == 0x7F {
            assert_eq!(
                bits(ieee),
                0x7FC0_0000 | (code as u32 & 0x80) << 24,
                "{code:#04x}"
            );
            assert_eq!(bits(zero), 0x0000_0000, "{code:#04x} must read as +0.0");
        } else {
            let want = formula(4, 3, 7, code);
            assert_eq!(ieee as f64, want, "{code:#04x}");
            assert_eq!(bits(ieee), bits(want as f32), "{code:#04x} (sign of zero)");
            assert_eq!(bits(zero), bits(ieee), "{code:#04x}");
        }
    }
}

/// E4M3FN under ReadAsZero equals seed 000's `e4m3_to_f32` (the modelopt
/// host convention), restated here, for all 256 codes.
#[test]
fn e4m3_read_as_zero_matches_seed_000() {
    fn seed_e4m3_to_f32(x: u8) -> f32 {
        let mag = (x & 0x7F) as u32;
        if mag == 0x7F {
            return 0.0;
        }
        let exp = ((mag >> 3) & 0xF) as i32;
        let man = (mag & 0x7) as f32;
        let raw = if exp == 0 {
            (man * 0.125) * 0.015625
        } else {
            (1.0 + man * 0.125) * 2f32.powi(exp - 7)
        };
        if x & 0x80 != 0 {
            -raw
        } else {
            raw
        }
    }
    for code in 0u8..=0xFF {
        assert_eq!(
            bits(decode_e4m3(code, NanMagnitude::ReadAsZero)),
            bits(seed_e4m3_to_f32(code)),
            "{code:#04x}"
        );
    }
}

/// E5M2: all 256 codes against the formula; `0x7C`/`0xFC` are `±inf` under
/// both conventions (DEC-INF); the six NaN codes are NaN with the code's
/// sign under Ieee and `+0.0` under ReadAsZero.
#[test]
fn e5m2_decodes_all_256_codes() {
    for code in 0u8..=0xFF {
        let ieee = decode_e5m2(code, NanMagnitude::Ieee);
        let zero = decode_e5m2(code, NanMagnitude::ReadAsZero);
        let mag = code & 0x7F;
        if mag == 0x7C {
            let inf = if code & 0x80 != 0 {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
            assert_eq!(ieee, inf, "{code:#04x}");
            assert_eq!(zero, inf, "{code:#04x}: ReadAsZero keeps infinities");
        } else if mag > 0x7C {
            assert_eq!(
                bits(ieee),
                0x7FC0_0000 | (code as u32 & 0x80) << 24,
                "{code:#04x}"
            );
            assert_eq!(bits(zero), 0x0000_0000, "{code:#04x} must read as +0.0");
        } else {
            let want = formula(5, 2, 15, code);
            assert_eq!(ieee as f64, want, "{code:#04x}");
            assert_eq!(bits(ieee), bits(want as f32), "{code:#04x} (sign of zero)");
            assert_eq!(bits(zero), bits(ieee), "{code:#04x}");
        }
    }
}

/// E5M2 is binary16 with the low 8 bits cut off: every E5M2 code decodes
/// to the value of the binary16 code `code << 8` (NaNs aside).
#[test]
fn e5m2_is_truncated_binary16() {
    for code in 0u8..=0xFF {
        if E5m2::from_bits(code).is_nan() {
            assert!(decode_f16((code as u16) << 8).is_nan());
            continue;
        }
        assert_eq!(
            bits(decode_e5m2(code, NanMagnitude::Ieee)),
            bits(decode_f16((code as u16) << 8)),
            "{code:#04x}"
        );
    }
}

/// The generic decoder and the per-format wrappers agree on every code.
#[test]
fn wrappers_equal_generic_codec() {
    for code in 0u8..=0xFF {
        for nan in [NanMagnitude::Ieee, NanMagnitude::ReadAsZero] {
            assert_eq!(
                bits(decode_e4m3(code, nan)),
                bits(fp8::decode(&E4M3FN, code, nan))
            );
            assert_eq!(
                bits(decode_e5m2(code, nan)),
                bits(fp8::decode(&E5M2, code, nan))
            );
            assert_eq!(
                bits(E4m3::from_bits(code).to_f32(nan)),
                bits(decode_e4m3(code, nan))
            );
            assert_eq!(
                bits(E5m2::from_bits(code).to_f32(nan)),
                bits(decode_e5m2(code, nan))
            );
        }
    }
    for x in [0.3f32, -465.0, 1e9, f32::NAN] {
        for o in BOTH {
            assert_eq!(E4m3::from_f32(x, o).to_bits(), encode_e4m3(x, o));
            assert_eq!(E5m2::from_f32(x, o).to_bits(), encode_e5m2(x, o));
        }
    }
}

/// `from_bits` and `to_bits` are `const` and lossless.
#[test]
fn newtypes_are_the_bits() {
    const C: E4m3 = E4m3::from_bits(0x7E);
    const D: u8 = C.to_bits();
    assert_eq!(D, 0x7E);
    const F: E5m2 = E5m2::from_bits(0x7C);
    assert_eq!(F.to_bits(), 0x7C);
    assert_eq!(core::mem::size_of::<E4m3>(), 1);
    assert_eq!(core::mem::size_of::<E5m2>(), 1);
    for c in 0u8..=0xFF {
        assert_eq!(E4m3::from_bits(c).to_bits(), c);
        assert_eq!(E5m2::from_bits(c).to_bits(), c);
    }
}

// ---------------------------------------------------------------------------
// Round trips.

/// Every non-NaN E4M3FN code encodes back to itself under both policies;
/// NaN codes decode to NaN and encode to `0x7F` (SatFinite) or `sign |
/// 0x7F` (NonSaturating).
#[test]
fn e4m3_round_trips_every_code() {
    for code in 0u8..=0xFF {
        let x = decode_e4m3(code, NanMagnitude::Ieee);
        if code & 0x7F == 0x7F {
            assert_eq!(encode_e4m3(x, SAT), 0x7F);
            assert_eq!(encode_e4m3(x, NONSAT), code);
        } else {
            for o in BOTH {
                assert_eq!(encode_e4m3(x, o), code, "{code:#04x} {o:?}");
            }
        }
    }
}

/// Every finite E5M2 code encodes back to itself under both policies;
/// `±inf` round-trips under NonSaturating and saturates to `0x7B`/`0xFB`
/// under SatFinite (SAT-2); NaNs give `0x7F` or `sign | 0x7F`.
#[test]
fn e5m2_round_trips_every_code() {
    for code in 0u8..=0xFF {
        let x = decode_e5m2(code, NanMagnitude::Ieee);
        let sign = code & 0x80;
        match code & 0x7F {
            0x7C => {
                assert_eq!(encode_e5m2(x, SAT), sign | 0x7B);
                assert_eq!(encode_e5m2(x, NONSAT), code);
            }
            0x7D..=0x7F => {
                assert_eq!(encode_e5m2(x, SAT), 0x7F);
                assert_eq!(encode_e5m2(x, NONSAT), sign | 0x7F);
            }
            _ => {
                for o in BOTH {
                    assert_eq!(encode_e5m2(x, o), code, "{code:#04x} {o:?}");
                }
            }
        }
    }
}

/// All 2^16 binary16 and bfloat16 codes round-trip through `f32` (NaNs:
/// to a quiet NaN with the same sign and payload, quiet bit forced).
#[test]
fn f16_and_bf16_round_trip_every_code() {
    for b in 0..=u16::MAX {
        let h = encode_f16(decode_f16(b));
        let g = encode_bf16(decode_bf16(b));
        if (b & 0x7FFF) > 0x7C00 {
            assert_eq!(h, b | 0x0200, "f16 {b:#06x}");
        } else {
            assert_eq!(h, b, "f16 {b:#06x}");
        }
        if (b & 0x7FFF) > 0x7F80 {
            assert_eq!(g, b | 0x0040, "bf16 {b:#06x}");
        } else {
            assert_eq!(g, b, "bf16 {b:#06x}");
        }
    }
}

// ---------------------------------------------------------------------------
// Overflow: SAT-1, SAT-2, NONSAT-1, NONSAT-2.

/// SAT-1, SAT-2: under SatFinite, anything whose rounded magnitude is beyond
/// 448, and `±inf`, gives `±448` (`0x7E`/`0xFE`).
#[test]
fn sat_finite_clamps_above_448() {
    for x in [
        448.0f32,
        449.0,
        464.0,
        464.00003,
        465.0,
        480.0,
        1e9,
        f32::MAX,
        f32::INFINITY,
    ] {
        assert_eq!(encode_e4m3(x, SAT), 0x7E, "{x}");
        assert_eq!(encode_e4m3(-x, SAT), 0xFE, "{}", -x);
    }
}

/// SAT-1, SAT-2 for E5M2: from the midpoint `61440.0` (ties up: `0x7B` is
/// odd), and `±inf`, gives `±57344` (`0x7B`/`0xFB`); just below the
/// midpoint is the plain rounding to `0x7B` too.
#[test]
fn sat_finite_clamps_above_57344_in_e5m2() {
    for x in [
        57344.0f32,
        61439.996,
        61440.0,
        65536.0,
        1e9,
        f32::MAX,
        f32::INFINITY,
    ] {
        assert_eq!(encode_e5m2(x, SAT), 0x7B, "{x}");
        assert_eq!(encode_e5m2(-x, SAT), 0xFB, "{}", -x);
    }
}

/// NONSAT-1: `465.0` rounds beyond 448 (to the would-be 480, code `0x7F`)
/// and gives NaN: `0x7F`, or `0xFF` for `-465.0`.
///
/// ```text
/// 465 = 1.1101_0001b * 2^8;  kept 1.110 | guard 1, sticky 0001 != 0: above the midpoint, round up
///                                  ^^^^ 1.111b * 2^8 = 480: beyond 448
/// ```
#[test]
fn non_saturating_465_is_nan() {
    assert_eq!(encode_e4m3(465.0, NONSAT), 0x7F);
    assert_eq!(encode_e4m3(-465.0, NONSAT), 0xFF);
    assert!(decode_e4m3(encode_e4m3(465.0, NONSAT), NanMagnitude::Ieee).is_nan());
    // The first f32 above the midpoint 464 already overflows.
    assert_eq!(encode_e4m3(f32::from_bits(bits(464.0) + 1), NONSAT), 0x7F);
}

/// NONSAT-1, tie case: `464.0` is exactly the midpoint of 448 (`0x7E`,
/// mantissa `110`, even) and the would-be 480 (`0x7F`, odd): it ties to
/// even, 448, under both policies.
///
/// ```text
/// 464 = 1.110|1b * 2^8
///            ^ tie: guard 1, sticky 0; kept 1.110 is even, stays
/// ```
#[test]
fn non_saturating_464_is_448() {
    assert_eq!(encode_e4m3(464.0, NONSAT), 0x7E);
    assert_eq!(encode_e4m3(-464.0, NONSAT), 0xFE);
    assert_eq!(encode_e4m3(464.0, SAT), 0x7E);
    assert_eq!(encode_e4m3(f32::from_bits(bits(464.0) - 1), NONSAT), 0x7E);
}

/// NONSAT-2: `±inf` gives NaN in E4M3FN (`0x7F`/`0xFF`: no infinity) and
/// `±inf` in E5M2 (`0x7C`/`0xFC`).
#[test]
fn non_saturating_infinity() {
    assert_eq!(encode_e4m3(f32::INFINITY, NONSAT), 0x7F);
    assert_eq!(encode_e4m3(f32::NEG_INFINITY, NONSAT), 0xFF);
    assert_eq!(encode_e5m2(f32::INFINITY, NONSAT), 0x7C);
    assert_eq!(encode_e5m2(f32::NEG_INFINITY, NONSAT), 0xFC);
}

/// NONSAT-1 for E5M2: the midpoint `61440.0` of 57344 (`0x7B`, mantissa
/// `11`, odd) and the would-be 65536 ties to even, which is up: `+inf`.
///
/// ```text
/// 61440 = 1.11|1b * 2^15
///             ^ tie: guard 1, sticky 0; kept 1.11 is odd, round up to 10.00b * 2^15 = 2^16
/// ```
#[test]
fn e5m2_non_saturating_overflow_is_inf() {
    assert_eq!(encode_e5m2(61440.0, NONSAT), 0x7C);
    assert_eq!(encode_e5m2(-61440.0, NONSAT), 0xFC);
    assert_eq!(encode_e5m2(61439.996, NONSAT), 0x7B);
    assert_eq!(encode_e5m2(f32::MAX, NONSAT), 0x7C);
}

// ---------------------------------------------------------------------------
// NaN: ENC-NAN.

/// ENC-NAN: under SatFinite any NaN, either sign, any payload, gives
/// `0x7F`; under NonSaturating it gives `sign | 0x7F`.
#[test]
fn nan_encodes_to_0x7f() {
    let nans = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7F80_0001), // signaling, smallest payload
        f32::from_bits(0xFFFF_FFFF),
        f32::from_bits(0x7FBF_FFFF), // signaling, largest payload
    ];
    for x in nans {
        let sign = ((bits(x) >> 24) & 0x80) as u8;
        assert_eq!(encode_e4m3(x, SAT), 0x7F, "{:#010x}", bits(x));
        assert_eq!(encode_e5m2(x, SAT), 0x7F, "{:#010x}", bits(x));
        assert_eq!(encode_e4m3(x, NONSAT), sign | 0x7F, "{:#010x}", bits(x));
        assert_eq!(encode_e5m2(x, NONSAT), sign | 0x7F, "{:#010x}", bits(x));
    }
}

// ---------------------------------------------------------------------------
// Ties: round to nearest, ties to even.

/// A tie between two normals goes to the even mantissa, down or up.
///
/// ```text
/// 1.0625 = 1.000|1b   tie; kept 1.000 even: stays, 1.0   (0x38)
///                ^
/// 1.1875 = 1.001|1b   tie; kept 1.001 odd: up, 1.010b = 1.25 (0x3A)
///                ^
/// 1.0625 + 2^-20      guard 1, sticky != 0: above, up to 1.125 (0x39)
/// 1.0625 - 2^-20      guard 0: below, down to 1.0 (0x38)
/// ```
#[test]
fn e4m3_ties_go_to_even() {
    for o in BOTH {
        assert_eq!(encode_e4m3(1.0625, o), 0x38);
        assert_eq!(encode_e4m3(1.1875, o), 0x3A);
        assert_eq!(encode_e4m3(1.0625 + 1.0 / 1048576.0, o), 0x39);
        assert_eq!(encode_e4m3(1.0625 - 1.0 / 1048576.0, o), 0x38);
        assert_eq!(encode_e4m3(-1.1875, o), 0xBA);
    }
}

/// A tie at the top of a binade carries into the exponent.
///
/// ```text
/// 1.9375 = 1.111|1b * 2^0   tie; kept 1.111 odd: up, 10.000b = 2.0 (0x40)
///                ^
/// ```
#[test]
fn e4m3_tie_carries_into_exponent() {
    assert_eq!(encode_e4m3(1.9375, SAT), 0x40);
    assert_eq!(decode_e4m3(0x40, NanMagnitude::Ieee), 2.0);
}

/// Ties among subnormals (E4M3FN quantum `2^-9`), including the carry from
/// the largest subnormal into the smallest normal.
///
/// ```text
/// 1.5 * 2^-9 = 0.000|1|1b * 2^-6 ... in quanta: 1.1b: tie; kept 1 odd: up, 2 (0x02)
///                                                  ^
/// 2.5 * 2^-9: 10.1b quanta: tie; kept 10b even: stays, 2 (0x02)
///                ^
/// 7.5 * 2^-9: 111.1b quanta: tie; kept 111b odd: up, 1000b = 2^-6 (0x08, min normal)
///                 ^
/// ```
#[test]
fn e4m3_subnormal_ties_go_to_even() {
    let q = pow2(-9) as f32;
    for o in BOTH {
        assert_eq!(encode_e4m3(1.5 * q, o), 0x02);
        assert_eq!(encode_e4m3(2.5 * q, o), 0x02);
        assert_eq!(encode_e4m3(7.5 * q, o), 0x08);
        assert_eq!(encode_e4m3(-7.5 * q, o), 0x88);
    }
}

/// E5M2 ties (2 mantissa bits).
///
/// ```text
/// 1.125 = 1.00|1b   tie; kept 1.00 even: stays, 1.0 (0x3C)
///              ^
/// 1.375 = 1.01|1b   tie; kept 1.01 odd: up, 1.10b = 1.5 (0x3E)
///              ^
/// ```
#[test]
fn e5m2_ties_go_to_even() {
    for o in BOTH {
        assert_eq!(encode_e5m2(1.125, o), 0x3C);
        assert_eq!(encode_e5m2(1.375, o), 0x3E);
        assert_eq!(encode_e5m2(-1.375, o), 0xBE);
    }
}

/// binary16 and bfloat16 ties, and their overflow thresholds.
///
/// ```text
/// f16:  1 + 2^-11 = 1.0000000000|1b   tie; kept even: stays 1.0 (0x3C00)
///                               ^
///       1 + 3*2^-11 = 1.0000000001|1b tie; kept odd: up (0x3C02)
///                                 ^
/// bf16: 1 + 2^-8 = 1.0000000|1b       tie; kept even: stays 1.0 (0x3F80)
///                           ^
/// ```
#[test]
fn f16_and_bf16_ties_go_to_even() {
    assert_eq!(encode_f16(1.0 + pow2(-11) as f32), 0x3C00);
    assert_eq!(encode_f16(1.0 + 3.0 * pow2(-11) as f32), 0x3C02);
    assert_eq!(encode_bf16(1.0 + pow2(-8) as f32), 0x3F80);
    assert_eq!(encode_bf16(1.0 + 3.0 * pow2(-8) as f32), 0x3F82);
    // Overflow after rounding: 65520 is the midpoint of 65504 (0x7BFF, odd)
    // and the would-be 65536: ties up, to infinity.
    assert_eq!(encode_f16(65504.0), f16::MAX_FINITE);
    assert_eq!(encode_f16(65519.996), f16::MAX_FINITE);
    assert_eq!(encode_f16(65520.0), f16::INFINITY);
    assert_eq!(encode_f16(-65520.0), f16::NEG_INFINITY);
    assert_eq!(encode_bf16(f32::from_bits(0x7F7F_7FFF)), bf16::MAX_FINITE);
    assert_eq!(encode_bf16(f32::from_bits(0x7F7F_8000)), bf16::INFINITY);
    assert_eq!(encode_bf16(f32::MAX), bf16::INFINITY);
}

// ---------------------------------------------------------------------------
// Zeros and subnormals: ENC-ZERO, ENC-UNDERFLOW, DEC-ZERO, DEC-SUB.

/// ENC-ZERO, DEC-ZERO: the sign of zero survives encode and decode in every
/// codec.
#[test]
fn signed_zero_keeps_its_sign() {
    for o in BOTH {
        assert_eq!(encode_e4m3(0.0, o), 0x00);
        assert_eq!(encode_e4m3(-0.0, o), 0x80);
        assert_eq!(encode_e5m2(0.0, o), 0x00);
        assert_eq!(encode_e5m2(-0.0, o), 0x80);
    }
    for nan in [NanMagnitude::Ieee, NanMagnitude::ReadAsZero] {
        assert_eq!(bits(decode_e4m3(0x80, nan)), 0x8000_0000);
        assert_eq!(bits(decode_e5m2(0x80, nan)), 0x8000_0000);
        assert_eq!(bits(decode_e4m3(0x00, nan)), 0x0000_0000);
    }
    assert_eq!(encode_f16(-0.0), f16::NEG_ZERO);
    assert_eq!(encode_bf16(-0.0), bf16::NEG_ZERO);
    assert_eq!(bits(decode_f16(0x8000)), 0x8000_0000);
    assert_eq!(bits(decode_bf16(0x8000)), 0x8000_0000);
}

/// ENC-UNDERFLOW: a tiny value rounds to zero and keeps its sign; exactly
/// half the smallest subnormal ties to even, zero; anything above it gives
/// the smallest subnormal.
///
/// ```text
/// E4M3FN smallest subnormal 2^-9; half of it 2^-10 = 0.|1b quanta: tie, kept 0 even: 0
///                                                      ^
/// ```
#[test]
fn tiny_values_round_to_signed_zero() {
    for o in BOTH {
        let half = pow2(-10) as f32;
        assert_eq!(encode_e4m3(half, o), 0x00);
        assert_eq!(encode_e4m3(-half, o), 0x80);
        assert_eq!(encode_e4m3(f32::from_bits(bits(half) + 1), o), 0x01);
        assert_eq!(encode_e4m3(-f32::from_bits(bits(half) + 1), o), 0x81);
        assert_eq!(encode_e4m3(1e-30, o), 0x00);
        assert_eq!(encode_e4m3(-1e-30, o), 0x80);
        assert_eq!(encode_e4m3(-f32::from_bits(1), o), 0x80); // smallest f32 subnormal
        let half5 = pow2(-17) as f32;
        assert_eq!(encode_e5m2(half5, o), 0x00);
        assert_eq!(encode_e5m2(-half5, o), 0x80);
        assert_eq!(encode_e5m2(f32::from_bits(bits(half5) + 1), o), 0x01);
    }
    assert_eq!(encode_f16(pow2(-25) as f32), 0x0000);
    assert_eq!(encode_f16(-(pow2(-25) as f32)), 0x8000);
    assert_eq!(
        encode_f16(f32::from_bits(bits(pow2(-25) as f32) + 1)),
        0x0001
    );
    assert_eq!(encode_bf16(-f32::from_bits(1)), 0x8000);
}

/// DEC-SUB and their encoding: every subnormal code is `m * quantum`
/// exactly, and encodes back; f32 subnormal inputs reach bfloat16
/// subnormals without flushing.
#[test]
fn subnormals_are_exact() {
    for m in 1u8..8 {
        let x = decode_e4m3(m, NanMagnitude::Ieee);
        assert_eq!(x as f64, m as f64 * pow2(-9), "e4m3 {m:#04x}");
        assert_eq!(encode_e4m3(x, SAT), m);
        assert_eq!(encode_e4m3(-x, NONSAT), 0x80 | m);
    }
    for m in 1u8..4 {
        let x = decode_e5m2(m, NanMagnitude::Ieee);
        assert_eq!(x as f64, m as f64 * pow2(-16), "e5m2 {m:#04x}");
        assert_eq!(encode_e5m2(x, SAT), m);
    }
    assert_eq!(
        decode_e4m3(e4m3::MIN_SUBNORMAL, NanMagnitude::Ieee) as f64,
        pow2(-9)
    );
    assert_eq!(
        decode_e4m3(e4m3::MIN_NORMAL, NanMagnitude::Ieee) as f64,
        pow2(-6)
    );
    assert_eq!(
        decode_e5m2(e5m2::MIN_SUBNORMAL, NanMagnitude::Ieee) as f64,
        pow2(-16)
    );
    assert_eq!(
        decode_e5m2(e5m2::MIN_NORMAL, NanMagnitude::Ieee) as f64,
        pow2(-14)
    );
    assert_eq!(decode_f16(f16::MIN_SUBNORMAL) as f64, pow2(-24));
    assert_eq!(decode_f16(f16::MIN_NORMAL) as f64, pow2(-14));
    assert_eq!(decode_bf16(bf16::MIN_SUBNORMAL) as f64, pow2(-133));
    assert_eq!(decode_bf16(bf16::MIN_NORMAL) as f64, pow2(-126));
    // An f32 subnormal with bits below bf16's precision: 0x0001_8000 is a
    // tie (1.1b units of 2^-133), kept 1 odd: up to 0x0002.
    assert_eq!(encode_bf16(f32::from_bits(0x0001_8000)), 0x0002);
    assert_eq!(encode_bf16(f32::from_bits(0x0002_8000)), 0x0002);
}

// ---------------------------------------------------------------------------
// binary16 / bfloat16 NaNs: F16-NAN, BF16-NAN.

/// F16-NAN, BF16-NAN: a NaN keeps its sign and top payload bits and is
/// quieted; `f32::NAN` gives the default quiet NaN.
#[test]
fn f16_and_bf16_nan_payloads() {
    assert_eq!(encode_f16(f32::NAN), f16::NAN);
    assert_eq!(encode_bf16(f32::NAN), bf16::NAN);
    assert_eq!(encode_f16(-f32::NAN), 0xFE00);
    // Signaling NaN with payload 0x1 << 13 | 1: quieted, top 10 bits kept.
    assert_eq!(encode_f16(f32::from_bits(0x7F80_2001)), 0x7E01);
    assert_eq!(encode_bf16(f32::from_bits(0x7F81_0001)), 0x7FC1);
    // Signaling NaN whose payload lies entirely below the kept bits: still
    // a NaN after quieting, never an infinity.
    assert_eq!(encode_f16(f32::from_bits(0x7F80_0001)), 0x7E00);
    assert_eq!(encode_bf16(f32::from_bits(0x7F80_0001)), 0x7FC0);
    assert_eq!(bits(decode_f16(0x7C01)), 0x7FC0_2000);
    assert_eq!(bits(decode_bf16(0xFF81)), 0xFFC1_0000);
    assert_eq!(decode_f16(f16::INFINITY), f32::INFINITY);
    assert_eq!(decode_bf16(bf16::NEG_INFINITY), f32::NEG_INFINITY);
    assert_eq!(decode_f16(f16::MAX_FINITE), 65504.0);
}
