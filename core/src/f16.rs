//! IEEE 754 binary16 ("half", `__half` in CUDA, `f16` in ggml): the codec.
//!
//! Bits `s eeeee mmmmmmmmmm`, bias 15, max finite `0x7BFF` = 65504.0,
//! smallest subnormal `0x0001` = `2^-24`, infinities `0x7C00`/`0xFC00`,
//! NaNs exponent `0x1F` with a non-zero mantissa. Codes are plain `u16`
//! bit patterns (ggml stores its scales as `u16`).
//!
//! Source: IEEE 754-2019 clauses 3.4 (encoding), 4.3.1 (roundTiesToEven),
//! 5.4.2 (formatOf conversions), 6.2.3 (NaN propagation), 7.4 (overflow).
//! Checked bit for bit against the `half` crate over all 2^32 `f32` inputs
//! and all 2^16 codes (`core/tests/codecs_exhaustive.rs`).

use crate::fp8::pow2;
use crate::round::{round_pack, unpack_f32, F32Class, Rounded, Target};

/// Largest finite magnitude: `0x7BFF` = 65504.0.
pub const MAX_FINITE: u16 = 0x7BFF;
/// `+inf`.
pub const INFINITY: u16 = 0x7C00;
/// `-inf`.
pub const NEG_INFINITY: u16 = 0xFC00;
/// The default quiet NaN (the result of encoding `f32::NAN`).
pub const NAN: u16 = 0x7E00;
/// `-0.0`.
pub const NEG_ZERO: u16 = 0x8000;
/// Smallest positive subnormal: `0x0001` = `2^-24`.
pub const MIN_SUBNORMAL: u16 = 0x0001;
/// Smallest positive normal: `0x0400` = `2^-14`.
pub const MIN_NORMAL: u16 = 0x0400;

/// The rounding target of binary16: 10 mantissa bits, bias 15.
const TARGET: Target = Target {
    mantissa_bits: 10,
    bias: 15,
    max_finite: MAX_FINITE as u32,
};

/// Encodes `x` to binary16, round to nearest even (IEEE 754-2019
/// `convertFormat` under roundTiesToEven; what `__float2half_rn` and x86
/// `vcvtps2ph` with imm 0 compute for non-NaN inputs).
///
/// Steps:
/// 1. [`unpack_f32`]: sign and class.
/// 2. NaN: F16-NAN. Infinity: `±inf`. Zero: `±0` (sign kept).
/// 3. Finite non-zero: [`round_pack`] to 10 mantissa bits, bias 15;
///    subnormal results rounded once at their own precision.
/// 4. Overflow after rounding (`|x| >= 65520.0`, the midpoint of 65504 and
///    the would-be 65536, ties up because `0x7BFF` is odd): `±inf`.
///
/// Rules:
/// - F16-NAN: a NaN gives a quiet NaN with the input's sign and the top 10
///   bits of its payload, quiet bit forced: `sign | 0x7C00 | 0x0200 |
///   (payload >> 13)`. So `f32::NAN` (`0x7FC0_0000`) gives `0x7E00`, and a
///   signaling NaN is quieted (IEEE 754-2019 clause 6.2.3; x86 F16C and the
///   `half` crate do the same). PTX `cvt.rn.f16.f32` instead gives the
///   canonical NaN `0x7FFF`: compare NaNs by class, not bits, against a
///   CUDA kernel.
/// - F16-UNDER: `|x| <= 2^-25` (half the smallest subnormal; the tie goes
///   to even, zero) gives `±0` with the input's sign.
#[inline]
pub fn encode_f16(x: f32) -> u16 {
    // Step 1.
    let (negative, class) = unpack_f32(x);
    let sign = (negative as u16) << 15;
    // Steps 2 and 3.
    let finite = match class {
        F32Class::Nan { payload } => return sign | INFINITY | 0x0200 | (payload >> 13) as u16,
        F32Class::Infinite => return sign | INFINITY,
        F32Class::Zero => return sign,
        F32Class::Finite(v) => v,
    };
    match round_pack(finite, &TARGET) {
        Rounded::Finite(magnitude) => sign | magnitude as u16,
        // Step 4.
        Rounded::Overflow => sign | INFINITY,
    }
}

/// Decodes binary16 `bits` to the `f32` of the same value; exact (every
/// binary16 value is an `f32`).
///
/// Steps:
/// 1. Sign = bit 15, exponent field `e` = bits 14..10, mantissa `m` =
///    bits 9..0.
/// 2. `e == 0x1F`: `m == 0` is `±inf`; otherwise F16-DEC-NAN.
/// 3. `e == 0`: `m * 2^-24` (zero and subnormals); otherwise
///    `(1024 + m) * 2^(e - 25)`. One exact `f32` multiplication.
/// 4. The sign is applied last (`0x8000` gives `-0.0`).
///
/// Rules:
/// - F16-DEC-NAN: a NaN gives the `f32` quiet NaN with the same sign and
///   payload, quiet bit forced: `sign << 16 | 0x7FC0_0000 | m << 13`
///   (IEEE 754-2019 clause 6.2.3; x86 F16C and the `half` crate do the
///   same).
#[inline]
pub fn decode_f16(bits: u16) -> f32 {
    // Step 1.
    let negative = bits & 0x8000 != 0;
    let e = ((bits >> 10) & 0x1F) as i32;
    let m = (bits & 0x03FF) as u32;
    // Step 2.
    if e == 0x1F && m != 0 {
        return f32::from_bits(((bits as u32 & 0x8000) << 16) | 0x7FC0_0000 | (m << 13));
    }
    // Step 3.
    let magnitude = if e == 0x1F {
        f32::INFINITY
    } else if e == 0 {
        m as f32 * pow2(-24)
    } else {
        (1024 + m) as f32 * pow2(e - 25)
    };
    // Step 4.
    if negative {
        -magnitude
    } else {
        magnitude
    }
}
