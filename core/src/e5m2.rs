//! E5M2: the FP8 format with IEEE-style infinities and NaNs.
//!
//! One byte `s eeeee mm`, bias 15: binary16 with its low 8 bits cut off.
//! Max finite `0x7B` = `1.11b * 2^15` = 57344.0, smallest subnormal `0x01`
//! = `2^-16`. The arithmetic is the generic [`crate::fp8`] codec with
//! [`E5M2`]; this module fixes the format and names the codes.
//!
//! | code                       | value                                |
//! |----------------------------|--------------------------------------|
//! | `0x00`/`0x80`              | `+0.0` / `-0.0`                      |
//! | `0x01..=0x03`              | subnormals `m * 2^-16`               |
//! | `0x04..=0x7B`              | normals `1.mm * 2^(e - 15)`, to 57344 |
//! | `0x7C`/`0xFC`              | `+inf` / `-inf`                      |
//! | `0x7D..=0x7F`/`0xFD..=0xFF`| NaN (or `+0.0` under ReadAsZero)     |
//!
//! Source: OCP OFP8 1.0 section 5 (E5M2); PTX ISA `cvt` (`.e5m2x2`).

use crate::conventions::{NanMagnitude, Overflow};
use crate::fp8::{self, E5M2};

/// Largest finite magnitude code: `0x7B` = 57344.0.
pub const MAX_FINITE: u8 = 0x7B;
/// The value of [`MAX_FINITE`].
pub const MAX_FINITE_VALUE: f32 = 57344.0;
/// `+inf`.
pub const INFINITY: u8 = 0x7C;
/// `-inf`.
pub const NEG_INFINITY: u8 = 0xFC;
/// The NaN code the encoder emits (sign clear): `0x7F`, all magnitude bits
/// set, as PTX and torch emit. Under [`Overflow::NonSaturating`] a negative
/// NaN gives [`NEG_NAN`].
pub const NAN: u8 = 0x7F;
/// The NaN code with the sign set.
pub const NEG_NAN: u8 = 0xFF;
/// `-0.0`.
pub const NEG_ZERO: u8 = 0x80;
/// Smallest positive subnormal: `0x01` = `2^-16`.
pub const MIN_SUBNORMAL: u8 = 0x01;
/// Smallest positive normal: `0x04` = `2^-14`.
pub const MIN_NORMAL: u8 = 0x04;

/// An E5M2 code. The bits are the truth: equality and hashing are on the
/// bits (so `0x00 != 0x80`, and the three NaN magnitudes are distinct).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct E5m2(u8);

impl E5m2 {
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

    /// Whether the code is a NaN (`0x7D..=0x7F` or `0xFD..=0xFF`).
    #[inline]
    pub const fn is_nan(self) -> bool {
        self.0 & 0x7F > INFINITY
    }

    /// Whether the code is `0x7C` or `0xFC`.
    #[inline]
    pub const fn is_infinite(self) -> bool {
        self.0 & 0x7F == INFINITY
    }

    /// [`decode_e5m2`] of the code.
    #[inline]
    pub fn to_f32(self, nan: NanMagnitude) -> f32 {
        decode_e5m2(self.0, nan)
    }

    /// [`encode_e5m2`] of `x`.
    #[inline]
    pub fn from_f32(x: f32, overflow: Overflow) -> Self {
        Self(encode_e5m2(x, overflow))
    }
}

/// Decodes an E5M2 code; exact. [`fp8::decode`] with [`E5M2`]: see its
/// rules DEC-NAN-IEEE (the six NaN codes give NaN with the code's sign),
/// DEC-NAN-ZERO (under [`NanMagnitude::ReadAsZero`] the six NaN codes give
/// `+0.0`), DEC-INF (`0x7C`/`0xFC` give `±inf` under both conventions),
/// DEC-ZERO, DEC-SUB.
#[inline]
pub fn decode_e5m2(code: u8, nan: NanMagnitude) -> f32 {
    fp8::decode(&E5M2, code, nan)
}

/// Encodes `x` to E5M2, round to nearest even. [`fp8::encode`] with
/// [`E5M2`]: see its rules. In short:
///
/// - SAT-1/SAT-2 ([`Overflow::SatFinite`], PTX `cvt.rn.satfinite.e5m2x2`):
///   anything whose rounded magnitude is beyond 57344 (from `61440.0`,
///   the midpoint to the would-be `65536.0`, which ties up because `0x7B`
///   is odd), `±inf` included, gives `0x7B`/`0xFB`; NaN gives `0x7F`.
/// - NONSAT-1/NONSAT-2 ([`Overflow::NonSaturating`], OCP / ml_dtypes /
///   torch, IEEE 754): overflow and `±inf` give `0x7C`/`0xFC`; NaN gives
///   `sign | 0x7F`.
/// - ENC-ZERO/ENC-UNDERFLOW: the sign of zero is kept; `|x| <= 2^-17`
///   gives `±0`.
#[inline]
pub fn encode_e5m2(x: f32, overflow: Overflow) -> u8 {
    fp8::encode(&E5M2, x, overflow)
}
