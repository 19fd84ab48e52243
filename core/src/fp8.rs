//! FP8 formats as parameters, and the one generic FP8 decoder and encoder.
//!
//! An FP8 code is one byte: `s eeee mmm` (E4M3FN) or `s eeeee mm` (E5M2),
//! sign bit 7, then the exponent field, then the mantissa field. The formats
//! differ only in the fields of [`Fp8Format`]; [`E4M3FN`] and [`E5M2`] are
//! the two instances, and [`crate::e4m3`] and [`crate::e5m2`] are thin
//! wrappers that fix the format. The departures of the two formats from
//! IEEE 754 read as a short list:
//!
//! | field             | [`E4M3FN`]                  | [`E5M2`]                        |
//! |-------------------|-----------------------------|---------------------------------|
//! | exponent, mantissa| 4, 3 bits                   | 5, 2 bits                       |
//! | bias              | 7                           | 15                              |
//! | infinity          | none                        | `0x7C`, `0xFC`                  |
//! | NaN codes         | `0x7F`, `0xFF` only         | `0x7D..=0x7F`, `0xFD..=0xFF`    |
//! | max finite        | `0x7E` = 448.0              | `0x7B` = 57344.0                |
//! | min subnormal     | `0x01` = 2^-9               | `0x01` = 2^-16                  |
//! | NaN emitted       | `0x7F`                      | `0x7F`                          |
//!
//! Sources: OCP 8-bit Floating Point Specification (OFP8) revision 1.0,
//! section 5 (the E4M3 and E5M2 encodings, table 1 and 2; "FN": finite, with
//! NaN only at magnitude all ones); PTX ISA, section "Data Movement and
//! Conversion Instructions: cvt" (`.e4m3x2`, `.e5m2x2`, `.satfinite`);
//! IEEE 754-2019 clauses 3.4 (binary interchange encoding), 4.3.1
//! (roundTiesToEven), 6.2 (NaN), 7.4 (overflow).

use crate::conventions::{NanMagnitude, Overflow};
use crate::round::{round_pack, unpack_f32, F32Class, Rounded, Target};

/// Which magnitudes of an FP8 format are NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8NanEncoding {
    /// IEEE 754 style: exponent field all ones and mantissa field non-zero
    /// (exponent all ones with mantissa zero is infinity). E5M2.
    Ieee,
    /// Only the all-ones magnitude (`0x7F`; codes `0x7F` and `0xFF`) is NaN;
    /// the rest of the top binade is finite and there is no infinity.
    /// E4M3FN ("FN": finite, NaN).
    AllOnesMagnitude,
}

/// The parameters of an FP8 format. Two formats that differ only here are
/// decoded and encoded by the same code ([`decode`], [`encode`]).
///
/// Invariants (checked by the tests for [`E4M3FN`] and [`E5M2`]):
/// `1 + exponent_bits + mantissa_bits == 8`; `max_finite` is the largest
/// magnitude that is neither NaN nor infinity; `nan` is a NaN magnitude.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8Format {
    /// Short name used in messages, e.g. `"e4m3fn"`.
    pub name: &'static str,
    /// Width of the exponent field (bits 6 down), in bits.
    pub exponent_bits: u32,
    /// Width of the mantissa field (the low bits), in bits.
    pub mantissa_bits: u32,
    /// Exponent bias: exponent field `e > 0` means `1.m * 2^(e - bias)`,
    /// `e == 0` means `0.m * 2^(1 - bias)`.
    pub bias: i32,
    /// Whether exponent all ones with mantissa zero is infinity.
    pub has_infinity: bool,
    /// Which magnitudes are NaN.
    pub nan_encoding: Fp8NanEncoding,
    /// The largest finite magnitude code.
    pub max_finite: u8,
    /// The NaN magnitude code that [`encode`] emits.
    pub nan: u8,
}

/// OCP OFP8 E4M3 ("E4M3FN" in ml_dtypes and torch, `__nv_fp8_e4m3` in
/// CUDA): 4 exponent bits, 3 mantissa bits, bias 7, no infinity, NaN only at
/// magnitude `0x7F`, max finite `0x7E` = `1.110b * 2^8` = 448.0.
pub const E4M3FN: Fp8Format = Fp8Format {
    name: "e4m3fn",
    exponent_bits: 4,
    mantissa_bits: 3,
    bias: 7,
    has_infinity: false,
    nan_encoding: Fp8NanEncoding::AllOnesMagnitude,
    max_finite: 0x7E,
    nan: 0x7F,
};

/// OCP OFP8 E5M2 (`__nv_fp8_e5m2` in CUDA): 5 exponent bits, 2 mantissa
/// bits, bias 15, IEEE-style infinity (`0x7C`) and NaNs (`0x7D..=0x7F`),
/// max finite `0x7B` = `1.11b * 2^15` = 57344.0. It is binary16 with the low
/// 8 bits cut off.
pub const E5M2: Fp8Format = Fp8Format {
    name: "e5m2",
    exponent_bits: 5,
    mantissa_bits: 2,
    bias: 15,
    has_infinity: true,
    nan_encoding: Fp8NanEncoding::Ieee,
    max_finite: 0x7B,
    nan: 0x7F,
};

/// The f32 bit pattern [`decode`] returns for a NaN code under
/// [`NanMagnitude::Ieee`], before the sign: the default quiet NaN.
pub const DECODED_NAN_BITS: u32 = 0x7FC0_0000;

impl Fp8Format {
    /// The exponent field of `code` (sign ignored).
    #[inline]
    pub const fn exponent_field(&self, code: u8) -> u32 {
        ((code & 0x7F) as u32) >> self.mantissa_bits
    }

    /// The mantissa field of `code`.
    #[inline]
    pub const fn mantissa_field(&self, code: u8) -> u32 {
        (code as u32) & ((1 << self.mantissa_bits) - 1)
    }

    /// The all-ones exponent field value (`0xF` in E4M3FN, `0x1F` in E5M2).
    #[inline]
    pub const fn max_exponent_field(&self) -> u32 {
        (1 << self.exponent_bits) - 1
    }

    /// Whether `code` (either sign) is a NaN of this format.
    #[inline]
    pub const fn is_nan(&self, code: u8) -> bool {
        match self.nan_encoding {
            Fp8NanEncoding::AllOnesMagnitude => code & 0x7F == 0x7F,
            Fp8NanEncoding::Ieee => {
                self.exponent_field(code) == self.max_exponent_field()
                    && self.mantissa_field(code) != 0
            }
        }
    }

    /// Whether `code` (either sign) is an infinity of this format (never,
    /// for a format without infinity).
    #[inline]
    pub const fn is_infinite(&self, code: u8) -> bool {
        self.has_infinity
            && self.exponent_field(code) == self.max_exponent_field()
            && self.mantissa_field(code) == 0
    }

    /// The positive infinity code, if the format has one (`0x7C` in E5M2).
    #[inline]
    pub const fn infinity(&self) -> Option<u8> {
        if self.has_infinity {
            Some((self.max_exponent_field() << self.mantissa_bits) as u8)
        } else {
            None
        }
    }

    /// The rounding target of this format for [`round_pack`].
    #[inline]
    pub const fn target(&self) -> Target {
        Target {
            mantissa_bits: self.mantissa_bits,
            bias: self.bias,
            max_finite: self.max_finite as u32,
        }
    }
}

/// `2^k` as an `f32`, exact, for `-126 <= k <= 127` (built from its bits).
#[inline]
pub(crate) fn pow2(k: i32) -> f32 {
    debug_assert!((-126..=127).contains(&k));
    f32::from_bits(((k + 127) as u32) << 23)
}

/// Decodes the FP8 `code` of `format` to the `f32` with the same value.
///
/// Every finite FP8 value is exactly representable in `f32` (at most 4
/// significant bits, exponents from -16 to 15), so decoding never rounds.
///
/// Steps:
/// 1. Sign = bit 7; magnitude = bits 6..0.
/// 2. NaN codes (per [`Fp8Format::nan_encoding`]) follow `nan` (rules
///    DEC-NAN-IEEE, DEC-NAN-ZERO).
/// 3. Infinity codes (E5M2 only) give `±inf` under either convention
///    (DEC-INF).
/// 4. Exponent field `e == 0`: subnormal or zero,
///    `m * 2^(1 - bias - mantissa_bits)` (DEC-SUB); otherwise normal,
///    `(2^mantissa_bits + m) * 2^(e - bias - mantissa_bits)`. Both are one
///    exact `f32` multiplication of a small integer by a power of two.
/// 5. The sign is applied last, so code `0x80` gives `-0.0` (DEC-ZERO).
///
/// Rules:
/// - DEC-NAN-IEEE: under [`NanMagnitude::Ieee`] a NaN code gives the quiet
///   NaN [`DECODED_NAN_BITS`] with the code's sign (`0x7F` gives
///   `0x7FC0_0000`, `0xFF` gives `0xFFC0_0000`); the FP8 payload is not
///   carried (OCP OFP8 1.0 defines no FP8 NaN payloads).
/// - DEC-NAN-ZERO: under [`NanMagnitude::ReadAsZero`] every NaN code of
///   either sign gives `+0.0` (the modelopt convention of seed 000's
///   `e4m3_to_f32`, where the magnitude test comes before the sign). For
///   E5M2 this applies to all six NaN codes `0x7D..=0x7F`, `0xFD..=0xFF`.
/// - DEC-INF: E5M2 `0x7C` gives `+inf` and `0xFC` gives `-inf`, under
///   either convention: ReadAsZero touches NaN codes only.
/// - DEC-ZERO: `0x00` gives `+0.0`, `0x80` gives `-0.0`.
/// - DEC-SUB: subnormals are exact: E4M3FN `0x01` is `2^-9`, E5M2 `0x01`
///   is `2^-16`.
#[inline]
pub fn decode(format: &Fp8Format, code: u8, nan: NanMagnitude) -> f32 {
    // Step 1.
    let negative = code & 0x80 != 0;

    // Step 2.
    if format.is_nan(code) {
        return match nan {
            NanMagnitude::Ieee => f32::from_bits(DECODED_NAN_BITS | ((negative as u32) << 31)),
            NanMagnitude::ReadAsZero => 0.0,
        };
    }

    // Step 3.
    let magnitude = if format.is_infinite(code) {
        f32::INFINITY
    } else {
        // Step 4.
        let m = format.mantissa_bits as i32;
        let e = format.exponent_field(code) as i32;
        let man = format.mantissa_field(code);
        if e == 0 {
            man as f32 * pow2(1 - format.bias - m)
        } else {
            ((1u32 << m) + man) as f32 * pow2(e - format.bias - m)
        }
    };

    // Step 5.
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// Encodes `x` to the nearest FP8 code of `format`, ties to even, with the
/// overflow policy `overflow`.
///
/// Steps:
/// 1. [`unpack_f32`]: sign and class of `x`.
/// 2. NaN: ENC-NAN. Infinity: ENC-INF. Zero: ENC-ZERO.
/// 3. Finite non-zero: [`round_pack`] to the format's [`Fp8Format::target`]
///    (round to nearest, ties to even, subnormals rounded at their own
///    precision, overflow judged after rounding), then the sign bit is put
///    back on the magnitude code (ENC-UNDERFLOW).
/// 4. Overflow from step 3: SAT-1 or NONSAT-1.
///
/// Rules (the first two columns decide; the examples are E4M3FN unless
/// marked):
/// - SAT-1: [`Overflow::SatFinite`], a value whose rounded magnitude is
///   beyond max finite gives `±max finite` (`465.0` and `1e9` give `0x7E` =
///   448; `-465.0` gives `0xFE`; E5M2 `61440.0` gives `0x7B` = 57344).
/// - SAT-2: [`Overflow::SatFinite`], `±inf` gives `±max finite` (E4M3FN
///   `0x7E`/`0xFE`, E5M2 `0x7B`/`0xFB`).
/// - NONSAT-1: [`Overflow::NonSaturating`], overflow gives `±inf` where the
///   format has infinity (E5M2 `0x7C`/`0xFC`) and `sign | nan` where it has
///   none (E4M3FN: `465.0` gives `0x7F`, `-465.0` gives `0xFF`; `464.0`,
///   the midpoint of 448 and the would-be 480, ties to even and gives
///   `0x7E` = 448).
/// - NONSAT-2: [`Overflow::NonSaturating`], `±inf` gives `±inf` (E5M2) or
///   `sign | nan` (E4M3FN: `0x7F`/`0xFF`).
/// - ENC-NAN: a NaN gives [`Fp8Format::nan`] (`0x7F` in both formats).
///   Under [`Overflow::SatFinite`] the sign of the NaN is dropped (always
///   `0x7F`): PTX `cvt.rn.satfinite` produces the canonical NaN, and
///   CUDA's host emulation (`__nv_cvt_float_to_fp8` in `cuda_fp8.hpp`)
///   replaces any NaN input by `0x7FFF_FFFF` first. Under
///   [`Overflow::NonSaturating`] the sign is kept (`sign | 0x7F`), as
///   torch's `fp8e4m3fn_from_fp32_value` / `fp8e5m2_from_fp32_value` do.
///   (ml_dtypes also keeps the sign but emits `0x7E` for E5M2 NaN; compare
///   NaN codes with [`Fp8Format::is_nan`], not bit for bit, when checking
///   against it.)
/// - ENC-ZERO: `±0.0` gives `0x00`/`0x80`: the sign of zero is kept.
/// - ENC-UNDERFLOW: a non-zero value that rounds to magnitude zero keeps its
///   sign (`-2^-11` gives `0x80` in E4M3FN); exactly half the smallest
///   subnormal (`2^-10` in E4M3FN) ties to even, which is zero.
///
/// Sources: PTX ISA `cvt` (`.rn`: round to nearest even; `.satfinite`:
/// "clamped to MAX_NORM" after rounding, NaN gives canonical NaN); OCP OFP8
/// 1.0 section 5 (conversion: round to nearest even, saturating and
/// non-saturating modes, the latter giving NaN in E4M3 and infinity in
/// E5M2); IEEE 754-2019 clauses 4.3.1 and 7.4.
#[inline]
pub fn encode(format: &Fp8Format, x: f32, overflow: Overflow) -> u8 {
    // Step 1.
    let (negative, class) = unpack_f32(x);
    let sign = (negative as u8) << 7;

    // Steps 2 and 3. The labels at the bottom (SoftFloat style) are the
    // NaN and overflow exits.
    let finite = match class {
        F32Class::Nan { .. } => return encode_nan(format, sign, overflow),
        F32Class::Infinite => return encode_overflow(format, sign, overflow),
        F32Class::Zero => return sign,
        F32Class::Finite(v) => v,
    };
    match round_pack(finite, &format.target()) {
        Rounded::Finite(magnitude) => sign | magnitude as u8,
        // Step 4.
        Rounded::Overflow => encode_overflow(format, sign, overflow),
    }
}

/// ENC-NAN.
#[inline]
fn encode_nan(format: &Fp8Format, sign: u8, overflow: Overflow) -> u8 {
    match overflow {
        Overflow::SatFinite => format.nan,
        Overflow::NonSaturating => sign | format.nan,
    }
}

/// SAT-1, SAT-2, NONSAT-1, NONSAT-2: infinity, or a finite value whose
/// rounded magnitude is beyond max finite.
#[inline]
fn encode_overflow(format: &Fp8Format, sign: u8, overflow: Overflow) -> u8 {
    match (overflow, format.infinity()) {
        (Overflow::SatFinite, _) => sign | format.max_finite,
        (Overflow::NonSaturating, Some(inf)) => sign | inf,
        (Overflow::NonSaturating, None) => sign | format.nan,
    }
}
