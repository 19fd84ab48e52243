//! E4M3FN: the FP8 format of the weights and activations of seed 000.
//!
//! One byte `s eeee mmm`, bias 7, no infinity, NaN only at `0x7F` and
//! `0xFF`, max finite `0x7E` = `1.110b * 2^8` = 448.0, smallest subnormal
//! `0x01` = `2^-9`. The arithmetic is the generic [`crate::fp8`] codec with
//! [`E4M3FN`]; this module fixes the format and names the codes.
//!
//! | code          | value                               |
//! |---------------|-------------------------------------|
//! | `0x00`/`0x80` | `+0.0` / `-0.0`                     |
//! | `0x01..=0x07` | subnormals `m * 2^-9`               |
//! | `0x08..=0x7E` | normals `1.mmm * 2^(e - 7)`, to 448 |
//! | `0x7F`/`0xFF` | NaN (or `+0.0` under ReadAsZero)    |
//!
//! Source: OCP OFP8 1.0 section 5 (E4M3); PTX ISA `cvt` (`.e4m3x2`).

use crate::conventions::{NanMagnitude, Overflow};
use crate::fp8::{self, E4M3FN};

/// Largest finite magnitude code: `0x7E` = 448.0.
pub const MAX_FINITE: u8 = 0x7E;
/// The value of [`MAX_FINITE`].
pub const MAX_FINITE_VALUE: f32 = 448.0;
/// The NaN code with the sign clear, and the one the encoder emits under
/// [`Overflow::SatFinite`] for any NaN.
pub const NAN: u8 = 0x7F;
/// The NaN code with the sign set (emitted by [`Overflow::NonSaturating`]
/// for negative NaNs, negative infinity and negative overflow).
pub const NEG_NAN: u8 = 0xFF;
/// `-0.0`.
pub const NEG_ZERO: u8 = 0x80;
/// Smallest positive subnormal: `0x01` = `2^-9` = 0.001953125.
pub const MIN_SUBNORMAL: u8 = 0x01;
/// Smallest positive normal: `0x08` = `2^-6` = 0.015625.
pub const MIN_NORMAL: u8 = 0x08;

/// An E4M3FN code. The bits are the truth: equality and hashing are on the
/// bits (so `0x00 != 0x80` although `+0.0 == -0.0`, and `NAN == NAN`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct E4m3(u8);

impl E4m3 {
    /// The code with bits `bits`. Every byte is a valid code.
    #[inline]
    pub const fn from_bits(bits: u8) -> Self {
        Self(bits)
    }

    /// The code's bits.
    #[inline]
    pub const fn to_bits(self) -> u8 {
        self.0
    }

    /// Whether the code is `0x7F` or `0xFF`.
    #[inline]
    pub const fn is_nan(self) -> bool {
        self.0 & 0x7F == NAN
    }

    /// [`decode_e4m3`] of the code.
    #[inline]
    pub fn to_f32(self, nan: NanMagnitude) -> f32 {
        decode_e4m3(self.0, nan)
    }

    /// [`encode_e4m3`] of `x`.
    #[inline]
    pub fn from_f32(x: f32, overflow: Overflow) -> Self {
        Self(encode_e4m3(x, overflow))
    }
}

/// Decodes an E4M3FN code; exact. [`fp8::decode`] with [`E4M3FN`]: see its
/// rules DEC-NAN-IEEE (`0x7F`/`0xFF` give NaN with the code's sign),
/// DEC-NAN-ZERO (under [`NanMagnitude::ReadAsZero`] both give `+0.0`, as
/// seed 000's `e4m3_to_f32`), DEC-ZERO, DEC-SUB.
#[inline]
pub fn decode_e4m3(code: u8, nan: NanMagnitude) -> f32 {
    fp8::decode(&E4M3FN, code, nan)
}

/// Encodes `x` to E4M3FN, round to nearest even. [`fp8::encode`] with
/// [`E4M3FN`]: see its rules. In short:
///
/// - SAT-1/SAT-2 ([`Overflow::SatFinite`], PTX `cvt.rn.satfinite.e4m3x2`):
///   anything whose rounded magnitude is beyond 448, `±inf` included,
///   gives `0x7E`/`0xFE`; NaN gives `0x7F`.
/// - NONSAT-1/NONSAT-2 ([`Overflow::NonSaturating`], OCP / ml_dtypes /
///   torch): `464.0` gives `0x7E` (tie to even), `465.0` and `+inf` give
///   `0x7F` (NaN), negatives `0xFF`; NaN gives `sign | 0x7F`.
/// - ENC-ZERO/ENC-UNDERFLOW: the sign of zero is kept; `|x| <= 2^-10`
///   gives `±0`.
#[inline]
pub fn encode_e4m3(x: f32, overflow: Overflow) -> u8 {
    fp8::encode(&E4M3FN, x, overflow)
}
