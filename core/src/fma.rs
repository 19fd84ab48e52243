//! The binary32 fused multiply-add, `fma(a, b, c) = RN(a * b + c)` with
//! one rounding, written with basic binary64 operations (`no_std` has no
//! `f32::mul_add`).
//!
//! Source: IEEE 754-2019 section 5.4.1 (`fusedMultiplyAdd`: "computes
//! `(x * y) + z` as if with unbounded range and precision, rounding only
//! once"); the method is Boldo and Melquiond, "Emulation of FMA and
//! correctly-rounded sums: proved algorithms using rounding to odd" (IEEE
//! Transactions on Computers 57(4), 2008), Theorem 1 (a value rounded to
//! odd at `p + k` bits, `k >= 2`, then rounded to nearest at `p` bits, is
//! the value rounded to nearest at `p` bits) and its round-to-odd addition
//! from an error-free transformation (their Algorithm 5, with Knuth's
//! TwoSum, *The Art of Computer Programming* vol. 2, 4.2.2, Theorem B).

/// `a * b + c` rounded once to the nearest binary32, ties to even: PTX
/// `fma.rn.f32`, CUDA `__fmaf_rn`, Rust's `f32::mul_add`.
///
/// Shapes: three binary32 scalars in, one out.
///
/// In this order:
/// 1. `p = a * b` in binary64: exact, since two 24-bit significands give at
///    most 48 bits and binary32 exponents (subnormals included, down to
///    `2^-149 * 2^-149 = 2^-298`) stay inside binary64's normal range
///    (rule `FMA-EXACT-PRODUCT`).
/// 2. `s = p + c` in binary64, round to nearest, and its exact error
///    `e = (p + c) - s` by TwoSum (six additions; exact, binary64 cannot
///    overflow here: `|p| <= 2^256`).
/// 3. Round to odd (rule `FMA-ODD`): if `e != 0` and the last significand
///    bit of `s` is 0, `s` moves one binary64 ulp towards `e`. The exact sum
///    lies strictly between the two neighbours `s` and `s` moved, so the
///    result is the odd one of the two: `p + c` rounded to odd at 53 bits.
/// 4. `s` rounded once to binary32, round to nearest even (`as f32`).
///    53 >= 24 + 2, so by Boldo and Melquiond's Theorem 1 this is `p + c`
///    rounded to nearest even at 24 bits, also where the result is a
///    binary32 subnormal (the exact sum is a multiple of `2^-298`, so it is
///    never a binary64 subnormal) or overflows to infinity.
///
/// Special operands (rule `FMA-SPECIAL`): when `a`, `b` or `c` is infinite
/// or NaN, the result is `(a * b + c)` in binary64 rounded to binary32,
/// which is IEEE's: NaN for `inf * 0` or `inf - inf`, otherwise the
/// infinity or NaN that propagates. Signed zeros (rule `FMA-ZERO`): an
/// exactly zero `p + c` is `+0`, except `-0` when `p` and `c` are both
/// `-0` (IEEE 754 section 6.3), which binary64 addition already gives.
/// Which NaN payload comes out is not specified (IEEE 754 section 6.2.3).
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    // Step 1.
    let p = f64::from(a) * f64::from(b);
    let cd = f64::from(c);
    if !(a.is_finite() && b.is_finite() && c.is_finite()) {
        // FMA-SPECIAL.
        return (p + cd) as f32;
    }
    // Step 2: TwoSum.
    let s = p + cd;
    let pv = s - cd;
    let cv = s - pv;
    let e = (p - pv) + (cd - cv);
    // Step 3: round to odd.
    let s = if e != 0.0 && s.to_bits() & 1 == 0 {
        // s != 0 here (a zero sum is exact). Towards e: up in magnitude
        // when e has s's sign, else down.
        let bits = s.to_bits();
        f64::from_bits(if (e > 0.0) == (s > 0.0) {
            bits + 1
        } else {
            bits - 1
        })
    } else {
        s
    };
    // Step 4.
    s as f32
}
