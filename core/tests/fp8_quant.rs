//! `ceil_log2f`, UE8M0's exponent, against another road to the same
//! definition on every positive finite binary32 (a strided subset in a
//! debug build): the f64 `log2`, rounded to binary32, then `ceil`; and
//! `ceil_log2`, the exact ceiling, against the bit form of the field's
//! `fast_log2_ceil` (normal inputs) and the f64 `log2`'s ceiling. The f64
//! `log2` is within an ulp of f64, and no binary32 input has its `log2`
//! that close to a binary32 rounding boundary next to an integer (the
//! nearest is about `2^-27` away), so the two roads agree exactly.

use oracle::fp8_quant::{ceil_log2, ceil_log2f};

#[test]
fn ceil_log2f_is_the_ceiling_of_a_rounded_log2_on_every_positive_f32() {
    let stride = if cfg!(debug_assertions) { 4099 } else { 1 };
    let (mut n, mut last) = (0u64, 0u32);
    for bits in (1u32..0x7F80_0000).step_by(stride) {
        let y = f32::from_bits(bits);
        let want = (f64::from(y).log2() as f32).ceil() as i32;
        assert_eq!(ceil_log2f(y), want, "y = {y:e} (0x{bits:08X})");
        let exact = ceil_log2(y);
        if bits >= 0x0080_0000 {
            let bit_form = ((bits >> 23) & 0xFF) as i32 - 127 + i32::from(bits & 0x7F_FFFF != 0);
            assert_eq!(exact, bit_form, "y = {y:e} (0x{bits:08X})");
        }
        // f64 holds log2 of a binary32 far from an integer unless exact.
        assert_eq!(exact, f64::from(y).log2().ceil() as i32, "y = {y:e}");
        n += 1;
        last = bits;
    }
    assert!(
        n > 500_000 && last >= 0x7F7F_0000,
        "{n} inputs, last 0x{last:08X}"
    );
}
