//! CPU only: every encoder against a definition that shares nothing with
//! core's rounding routine. FP8: the nearest finite code by an f64 search
//! over all codes, ties to the even code, then the overflow policy; f16 and
//! bf16: the `half` crate. A divergence panics with the input's bits.
#![no_main]
use arbitrary::Arbitrary;
use oracle::conventions::{NanMagnitude, Overflow};
use oracle::fp8::{decode, encode, Fp8Format, E4M3FN, E5M2};

kernel_oracle_fuzz::asan_options!();

#[derive(Arbitrary, Debug)]
enum Codec {
    E4m3(bool),
    E5m2(bool),
    F16,
    Bf16,
}

/// The FP8 code an encoder must give for `x` under `overflow`, by search.
fn expected(format: &Fp8Format, max_code: u8, x: f32, overflow: Overflow) -> Option<u8> {
    if x.is_nan() {
        return None; // any NaN code; checked separately
    }
    let max = decode(format, max_code, NanMagnitude::Ieee) as f64;
    let neg = x.is_sign_negative();
    let a = (x as f64).abs();
    let sign = if neg { 0x80 } else { 0x00 };
    // Beyond max finite: where would an unbounded-exponent format round?
    // The next value above max is max + ulp(max); halfway is max + ulp/2.
    let ulp = max - decode(format, max_code - 1, NanMagnitude::Ieee) as f64;
    if a > max {
        let rounds_up = a > max + ulp / 2.0 || (a == max + ulp / 2.0 && max_code & 1 == 1);
        return Some(match (overflow, rounds_up || a.is_infinite()) {
            (Overflow::SatFinite, _) | (Overflow::NonSaturating, false) => sign | max_code,
            (Overflow::NonSaturating, true) => sign | (max_code + 1), // inf (E5M2) or NaN (E4M3FN)
        });
    }
    let mut best = 0u8;
    let mut best_err = f64::INFINITY;
    for code in 0..=max_code {
        let err = (decode(format, code, NanMagnitude::Ieee) as f64 - a).abs();
        if err < best_err || (err == best_err && code & 1 == 0) {
            best = code;
            best_err = err;
        }
    }
    Some(sign | best)
}

libfuzzer_sys::fuzz_target!(|input: (u32, Codec)| {
    let (bits, codec) = input;
    let x = f32::from_bits(bits);
    match codec {
        Codec::E4m3(sat) | Codec::E5m2(sat) => {
            let (format, max_code) = match codec {
                Codec::E4m3(_) => (&E4M3FN, 0x7E),
                _ => (&E5M2, 0x7B),
            };
            let overflow = if sat {
                Overflow::SatFinite
            } else {
                Overflow::NonSaturating
            };
            let got = encode(format, x, overflow);
            match expected(format, max_code, x, overflow) {
                None => assert!(
                    decode(format, got, NanMagnitude::Ieee).is_nan(),
                    "{format:?} {overflow:?}: NaN input 0x{bits:08X} gave non-NaN code 0x{got:02X}"
                ),
                Some(want) => assert_eq!(
                    got, want,
                    "{format:?} {overflow:?}: encode(0x{bits:08X} = {x:e}) gave 0x{got:02X}, want 0x{want:02X}"
                ),
            }
        }
        Codec::F16 => {
            let (got, want) = (oracle::f16::encode_f16(x), half::f16::from_f32(x).to_bits());
            if x.is_nan() {
                assert!(
                    oracle::f16::decode_f16(got).is_nan(),
                    "f16: NaN 0x{bits:08X} gave 0x{got:04X}"
                );
            } else {
                assert_eq!(got, want, "f16: encode(0x{bits:08X} = {x:e})");
            }
        }
        Codec::Bf16 => {
            let (got, want) = (
                oracle::bf16::encode_bf16(x),
                half::bf16::from_f32(x).to_bits(),
            );
            if x.is_nan() {
                assert!(
                    oracle::bf16::decode_bf16(got).is_nan(),
                    "bf16: NaN 0x{bits:08X} gave 0x{got:04X}"
                );
            } else {
                assert_eq!(got, want, "bf16: encode(0x{bits:08X} = {x:e})");
            }
        }
    }
});
