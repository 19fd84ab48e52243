//! Correctly rounded binary32 square root, in integer arithmetic.
//!
//! `core` has no `f32::sqrt` on stable Rust without `std`, and the rule is
//! worth writing down anyway: IEEE 754-2019 clause 5.4.1 requires
//! `squareRoot` to be correctly rounded, so every conforming implementation
//! (x86 `sqrtss`, CUDA `__fsqrt_rn`, PTX `sqrt.rn.f32`, Rust's
//! `f32::sqrt`) returns these bits. `core/tests/gdn_transcendental.rs`
//! checks all 2^32 inputs against `std`'s `f32::sqrt`, bit for bit (NaN
//! results: any NaN).
//!
//! Note for kernels: CUDA's `sqrtf` is `sqrt.rn` only without
//! `-use_fast_math` (`-prec-sqrt=true`, NVRTC's default); with fast math it
//! becomes the approximate `sqrt.approx`. Use `__fsqrt_rn` to be explicit.

use crate::round::{unpack_f32, F32Class};

/// The canonical quiet NaN this module returns for a negative operand.
const DEFAULT_NAN: f32 = f32::from_bits(0x7FC0_0000);

/// `sqrt(x)`, correctly rounded (round to nearest, ties to even: ties cannot
/// occur, see step 4).
///
/// Special cases first (rule `SQRT-SPECIAL`, IEEE 754-2019 clause 9.2.1 /
/// 5.4.1):
/// - `+0.0` gives `+0.0`, `-0.0` gives `-0.0`, `+inf` gives `+inf`;
/// - a NaN gives a quiet NaN (the operand with its quiet bit `0x0040_0000`
///   set); a negative non-zero operand, `-inf` included, gives the quiet NaN
///   `0x7FC0_0000`. NaN bits are not part of any contract in this module.
///
/// A positive finite `x` (normal or subnormal), in exact integer steps:
/// 1. Unpack: `x = sig * 2^e` with `sig` an integer in `[2^23, 2^24)` (the
///    24-bit significand, subnormals normalized by [`unpack_f32`]).
/// 2. Pick `k` in `{25, 26}` so that `e - k` is even, and let
///    `M = sig * 2^k` (a `u64` in `[2^48, 2^50)`). Then
///    `sqrt(x) = sqrt(M) * 2^((e - k) / 2)`.
/// 3. `root = floor(sqrt(M))` by the digit-by-digit (restoring, base 4)
///    method over the 25 base-4 digits of `M`, with `rem = M - root^2`.
///    `root` is in `[2^24, 2^25)`: 24 result bits and one guard bit.
/// 4. Round: the result significand is `(root >> 1) + (root & 1)`. This is
///    round-to-nearest because the discarded part is the guard bit plus the
///    sticky information `rem != 0`; it is never an exact tie: a tie would
///    need `rem == 0` with `root` odd, i.e. `M = root^2` with `root` an odd
///    25-bit integer, and then `x`'s significand would have at least 48
///    significant bits, not 24.
/// 5. Pack: the significand (in `[2^23, 2^24]`, where `2^24` is the carry of
///    step 4) times `2^(1 + (e - k) / 2)`; the biased exponent field is
///    `127 + 23 + 1 + (e - k) / 2` and the carry, added into the packed
///    word, bumps it by one. The result is always normal (`sqrt` of the
///    smallest subnormal is `2^-74.5`) and never overflows.
pub fn sqrt(x: f32) -> f32 {
    let (negative, class) = unpack_f32(x);
    let v = match class {
        F32Class::Nan { .. } => return f32::from_bits(x.to_bits() | 0x0040_0000),
        F32Class::Zero => return x,
        F32Class::Infinite if !negative => return x,
        F32Class::Infinite => return DEFAULT_NAN,
        F32Class::Finite(_) if negative => return DEFAULT_NAN,
        F32Class::Finite(v) => v,
    };
    // Step 1: unpack_f32 gives 1.f * 2^exp with the leading one at bit 31
    // and bits 7..0 zero, so sig = v.sig >> 8 and e = v.exp - 23.
    let sig = (v.sig >> 8) as u64;
    let e = v.exp - 23;
    // Step 2.
    let k = if (e - 25) % 2 == 0 { 25 } else { 26 };
    let m = sig << k;
    let half_exp = (e - k) / 2; // exact: e - k is even

    // Step 3: 25 base-4 digits, most significant first.
    let mut rem = 0u64;
    let mut root = 0u64;
    let mut i = 25;
    while i > 0 {
        i -= 1;
        rem = (rem << 2) | ((m >> (2 * i)) & 3);
        let trial = (root << 2) | 1;
        root <<= 1;
        if rem >= trial {
            rem -= trial;
            root |= 1;
        }
    }
    debug_assert!((1 << 24..1 << 25).contains(&root));
    // Step 4.
    let rounded = (root >> 1) + (root & 1);
    // Step 5: field = 127 + 24 + half_exp; (field - 1) << 23 plus the
    // significand with its hidden bit at bit 23 adds the one back.
    let field = 127 + 24 + half_exp;
    f32::from_bits((((field - 1) as u64) << 23) as u32 + rounded as u32)
}
