//! bfloat16 (`__nv_bfloat16` in CUDA): the codec.
//!
//! Bits `s eeeeeeee mmmmmmm`: the top 16 bits of an `f32` (bias 127, same
//! exponent range, 7 mantissa bits). Max finite `0x7F7F` =
//! `1.1111111b * 2^127` ~ 3.3895e38, smallest subnormal `0x0001` =
//! `2^-133`, infinities `0x7F80`/`0xFF80`, NaNs exponent `0xFF` with a
//! non-zero mantissa. Codes are plain `u16` bit patterns.
//!
//! Source: IEEE 754-2019 clauses 3.4 (the encoding pattern bfloat16
//! follows), 4.3.1 (roundTiesToEven), 6.2.3 (NaN propagation), 7.4
//! (overflow); PTX ISA `cvt.rn.bf16.f32`. Checked bit for bit against the
//! `half` crate over all 2^32 `f32` inputs and all 2^16 codes
//! (`core/tests/codecs_exhaustive.rs`).

use crate::round::{round_pack, unpack_f32, F32Class, Rounded, Target};

/// Largest finite magnitude: `0x7F7F` ~ 3.3895314e38.
pub const MAX_FINITE: u16 = 0x7F7F;
/// `+inf`.
pub const INFINITY: u16 = 0x7F80;
/// `-inf`.
pub const NEG_INFINITY: u16 = 0xFF80;
/// The default quiet NaN (the result of encoding `f32::NAN`).
pub const NAN: u16 = 0x7FC0;
/// `-0.0`.
pub const NEG_ZERO: u16 = 0x8000;
/// Smallest positive subnormal: `0x0001` = `2^-133`.
pub const MIN_SUBNORMAL: u16 = 0x0001;
/// Smallest positive normal: `0x0080` = `2^-126`.
pub const MIN_NORMAL: u16 = 0x0080;

/// The rounding target of bfloat16: 7 mantissa bits, bias 127.
const TARGET: Target = Target {
    mantissa_bits: 7,
    bias: 127,
    max_finite: MAX_FINITE as u32,
};

/// Encodes `x` to bfloat16, round to nearest even (what PTX
/// `cvt.rn.bf16.f32`, `__float2bfloat16_rn` and torch compute for non-NaN
/// inputs). Subnormal inputs are kept (no flush to zero).
///
/// Steps:
/// 1. [`unpack_f32`]: sign and class.
/// 2. NaN: BF16-NAN. Infinity: `±inf`. Zero: `±0` (sign kept).
/// 3. Finite non-zero: [`round_pack`] to 7 mantissa bits, bias 127. For a
///    normal or subnormal `f32` alike this drops the low 16 bits of the
///    `f32` pattern, ties to even.
/// 4. Overflow after rounding (`|x| >= 0x7F7F_8000` as `f32` bits, the
///    midpoint of max finite and the would-be `2^128`, ties up because
///    `0x7F7F` is odd): `±inf`.
///
/// Rules:
/// - BF16-NAN: a NaN gives a quiet NaN with the input's sign and the top 7
///   bits of its payload, quiet bit forced: `(bits >> 16) | 0x0040`. So
///   `f32::NAN` gives `0x7FC0` (IEEE 754-2019 clause 6.2.3; the `half` crate
///   does the same). PTX `cvt.rn.bf16.f32` gives the canonical NaN `0x7FFF`
///   instead: compare NaNs by class against a CUDA kernel.
#[inline]
pub fn encode_bf16(x: f32) -> u16 {
    // Step 1.
    let (negative, class) = unpack_f32(x);
    let sign = (negative as u16) << 15;
    // Steps 2 and 3.
    let finite = match class {
        F32Class::Nan { payload } => return sign | INFINITY | 0x0040 | (payload >> 16) as u16,
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

/// Decodes bfloat16 `bits` to the `f32` of the same value; exact.
///
/// Steps:
/// 1. A non-NaN code is the top half of its `f32`: the result has bits
///    `bits << 16` (zeros, subnormals, normals and infinities alike).
/// 2. BF16-DEC-NAN: a NaN (`bits & 0x7FFF > 0x7F80`) gives the same
///    pattern with the quiet bit forced, `(bits | 0x0040) << 16`, so a
///    signaling NaN is quieted (IEEE 754-2019 clause 6.2.3; the `half`
///    crate does the same).
#[inline]
pub fn decode_bf16(bits: u16) -> f32 {
    if bits & 0x7FFF > INFINITY {
        // Step 2.
        f32::from_bits(((bits | 0x0040) as u32) << 16)
    } else {
        // Step 1.
        f32::from_bits((bits as u32) << 16)
    }
}
