//! Round to nearest, ties to even, and pack: the one rounding routine.
//!
//! Every encoder in this crate ([`crate::fp8::encode`] and through it
//! [`crate::e4m3`] and [`crate::e5m2`], [`crate::f16`], [`crate::bf16`])
//! narrows an `f32` the same way, as Berkeley SoftFloat 3 does
//! (`softfloat_roundPackToF32` in `s_roundPackToF32.c`):
//!
//! 1. [`unpack_f32`] splits the input into sign and class. NaN, infinity and
//!    zero leave here and each codec handles them by its own named rules; a
//!    finite non-zero value (normal or subnormal) becomes an exact
//!    [`Unpacked`] magnitude `sig * 2^(exp - 31)` with bit 31 of `sig` set.
//! 2. [`round_pack`] rounds that magnitude to the target format
//!    ([`Target`]) with round-to-nearest, ties-to-even, using guard and
//!    sticky bits, and packs exponent and mantissa fields into a magnitude
//!    code. It reports [`Rounded::Overflow`] when the rounded magnitude is
//!    beyond the target's largest finite code; what overflow produces
//!    (infinity, NaN or the largest finite value) is the caller's policy.
//!
//! The sign never enters the rounding: round-to-nearest-even is symmetric,
//! so the caller puts the sign bit back on the code.
//!
//! Source: IEEE 754-2019 clause 4.3.1 (roundTiesToEven), clause 7.4
//! (overflow is judged *after* rounding, "as if the exponent range were
//! unbounded"), clause 7.5 (underflow: subnormal results are rounded once,
//! at their own precision, not first to a normal precision).

/// The class of an `f32` and, for a finite non-zero value, its exact
/// magnitude. Produced by [`unpack_f32`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F32Class {
    /// Any NaN (exponent field `0xFF`, mantissa field non-zero).
    /// `payload` is the 23-bit mantissa field, quiet bit (bit 22) included.
    Nan {
        /// The 23-bit mantissa field of the NaN.
        payload: u32,
    },
    /// `+inf` or `-inf` (the sign is returned beside the class).
    Infinite,
    /// `+0.0` or `-0.0` (the sign is returned beside the class).
    Zero,
    /// A finite non-zero value, normal or subnormal, as an exact magnitude.
    Finite(Unpacked),
}

/// An exact positive magnitude `sig * 2^(exp - 31)`, that is `1.f * 2^exp`
/// with the leading one at bit 31 of `sig`.
///
/// `exp` is the unbiased binary exponent of the leading one: `1.0` is
/// `{ exp: 0, sig: 0x8000_0000 }`, the smallest `f32` subnormal `2^-149` is
/// `{ exp: -149, sig: 0x8000_0000 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unpacked {
    /// Unbiased exponent of the leading one bit.
    pub exp: i32,
    /// Significand with its leading one at bit 31. Bits below the
    /// represented value's last place are zero (an `f32` has 24 significant
    /// bits, so bits 7..0 are always zero here).
    pub sig: u32,
}

/// Splits `x` into its sign (`true` for negative, including `-0.0` and NaNs
/// with the sign bit set) and its [`F32Class`].
///
/// Steps:
/// 1. Fields: sign = bit 31, biased exponent = bits 30..23, mantissa =
///    bits 22..0.
/// 2. Exponent `0xFF`: mantissa zero is infinity, otherwise NaN.
/// 3. Exponent `0x00`: mantissa zero is zero; otherwise a subnormal
///    `0.f * 2^-126`, normalized by shifting its leading one up to bit 31
///    (`exp = -126 - (leading zeros of the 23-bit field counted from bit 22)
///    - 1`).
/// 4. Otherwise a normal `1.f * 2^(e - 127)`: the hidden one is set at
///    bit 31 above the 23 mantissa bits (bits 30..8).
#[inline]
pub fn unpack_f32(x: f32) -> (bool, F32Class) {
    let bits = x.to_bits();
    let sign = bits >> 31 != 0;
    let biased = ((bits >> 23) & 0xFF) as i32;
    let man = bits & 0x007F_FFFF;
    let class = match biased {
        0xFF if man == 0 => F32Class::Infinite,
        0xFF => F32Class::Nan { payload: man },
        0 if man == 0 => F32Class::Zero,
        0 => {
            // Subnormal: value = man * 2^-149. Put its leading one at bit 31.
            let lz = man.leading_zeros(); // 9..=31
            F32Class::Finite(Unpacked {
                exp: -149 + (31 - lz as i32),
                sig: man << lz,
            })
        }
        _ => F32Class::Finite(Unpacked {
            exp: biased - 127,
            sig: 0x8000_0000 | (man << 8),
        }),
    };
    (sign, class)
}

/// A binary floating-point target format for [`round_pack`], described by
/// the fields that rounding needs.
///
/// Magnitude codes are `exponent field << mantissa_bits | mantissa field`;
/// exponent field 0 holds the subnormals (and zero) with the same scale as
/// exponent field 1, as in IEEE 754-2019 clause 3.4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Width of the mantissa (trailing significand) field, in bits (0..=23).
    pub mantissa_bits: u32,
    /// Exponent bias: a normal code with exponent field `e` has value
    /// `1.f * 2^(e - bias)`; a subnormal has value `0.f * 2^(1 - bias)`.
    pub bias: i32,
    /// The largest finite magnitude code (for example `0x7E` in E4M3FN,
    /// `0x7B` in E5M2, `0x7BFF` in binary16). A rounded magnitude above it
    /// is [`Rounded::Overflow`].
    pub max_finite: u32,
}

/// The outcome of [`round_pack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounded {
    /// The rounded magnitude code, at most [`Target::max_finite`]. Zero when
    /// the value rounded down to zero (underflow to zero).
    Finite(u32),
    /// The value, rounded with an unbounded exponent range, is larger than
    /// the largest finite value (IEEE 754-2019 clause 7.4).
    Overflow,
}

/// Rounds the exact magnitude `v` to `target` with round-to-nearest,
/// ties-to-even, and packs it into a magnitude code.
///
/// Precondition: `v.sig` has bit 31 set (as [`unpack_f32`] produces). The
/// result is exact for any `v.exp`; values far below the smallest
/// subnormal round to code 0, values far above overflow.
///
/// Steps:
/// 1. Biased exponent of the result if it is normal: `be = v.exp + bias`.
/// 2. Bits to drop from `sig` (the "round bits"). A normal result keeps
///    `1 + mantissa_bits` bits (hidden one and mantissa), so it drops
///    `31 - mantissa_bits`. A subnormal result (`be < 1`) has its last place
///    fixed at `2^(1 - bias - mantissa_bits)`, so it drops `1 - be` more.
///    Dropping more than 33 bits gives the same result as dropping 33 (the
///    value is below a quarter of the smallest subnormal and rounds to 0),
///    so the count is capped there to keep the shifts in range.
/// 3. Round, as SoftFloat's `softfloat_roundPackToF32` does. Let `half` be
///    the weight of the highest dropped bit (the guard bit) alone, and
///    `rest` the dropped bits:
///
///    ```text
///    sig = | kept ............ | g | s s s ... s |
///                                ^ guard   ^ sticky (any bit set)
///    rest = g s s s ... s      half = 1 0 0 0 ... 0
///    ```
///
///    - 3a. `kept = (sig + half) >> drop` rounds half up. Above the
///      midpoint (`rest > half`) this is the rounded-up value, below it
///      (`rest < half`) the truncated one, `truncated = sig >> drop`;
///      both are the nearest.
///    - 3b. The even-rounding condition, derived once: the only case where
///      3a is not round-to-nearest-even is the exact midpoint, `rest ==
///      half` (guard set, sticky clear). There 3a gave `truncated + 1`; the
///      two candidates are `truncated` and `truncated + 1`, which differ in
///      the last bit, so the even one is `truncated + 1` with its last bit
///      cleared. Hence: on a tie, clear bit 0 of `kept`.
///
///    Rounding up may carry out of the mantissa (all ones + 1); the packing
///    below turns that carry into the next exponent, which is the correct
///    result (`1.11..1 * 2^e` rounds to `1.0 * 2^(e+1)`; the largest
///    subnormal rounds to the smallest normal).
/// 4. Pack: a normal `kept` still holds the hidden one at bit
///    `mantissa_bits`, which adds one to the exponent field; so the code is
///    `((be - 1) << mantissa_bits) + kept`. A subnormal packs as
///    `(0 << mantissa_bits) + kept`.
/// 5. Overflow after rounding: a code above `target.max_finite` is
///    [`Rounded::Overflow`]. This is the "unbounded exponent" rule: E4M3FN's
///    `464.0` ties down to `448.0` (code `0x7E`) and is finite, `465.0`
///    rounds to the would-be code `0x7F` and overflows.
#[inline]
pub fn round_pack(v: Unpacked, target: &Target) -> Rounded {
    debug_assert!(v.sig & 0x8000_0000 != 0, "round_pack: sig not normalized");
    let m = target.mantissa_bits;
    let sig = v.sig as u64;

    // Step 1.
    let be = v.exp as i64 + target.bias as i64;

    // Steps 2 and 4 (the exponent field is decided with the drop count).
    let (exp_field, drop) = if be >= 1 {
        ((be - 1) as u64, 31 - m)
    } else {
        (0, (31 - m as i64 + (1 - be)).min(33) as u32)
    };

    // Step 3.
    let half = 1u64 << (drop - 1);
    let rest = sig & ((half << 1) - 1);
    let mut kept = (sig + half) >> drop; // 3a
    if rest == half {
        kept &= !1; // 3b: a tie goes to even
    }

    // Step 4.
    let code = (exp_field << m) + kept;

    // Step 5.
    if code > target.max_finite as u64 {
        Rounded::Overflow
    } else {
        Rounded::Finite(code as u32)
    }
}
