//! Per-token-group e4m3 activation quantizers: one scale per group of
//! consecutive elements of a row, and one e4m3 code per element. The
//! field's quantizers agree on the shape of the computation (an amax, a
//! scale from it, codes from the element and the scale) and differ in
//! three choices, which [`GroupScale`] names:
//!
//! - how the codes are formed: a multiply by the reciprocal `448 / amax`
//!   (seed 000's v2) or a division by the scale;
//! - what an all-zero group gets: scale `+0` and zero codes (v2), or a
//!   floor `eps` under the amax, so the scale is `eps / 448`;
//! - whether the scale is rounded up to a power of two (UE8M0, the scale
//!   format of DeepGEMM and of MXFP8).
//!
//! Each choice changes bits a GEMM then consumes, so a quantizer is judged
//! bit for bit under the rule it declares.
//!
//! Shapes: `x` is `[rows][cols]` f32 (elements, row-major); `q` is
//! `[rows][cols]` e4m3 codes; `s` is `[rows][ceil(cols / group)]` f32, row
//! `j`'s group `g` covering columns `g * group .. min((g + 1) * group,
//! cols)` (a short last group when `group` does not divide `cols`).

use crate::conventions::Overflow;
use crate::e4m3::encode_e4m3;
use crate::fp8_mmq::E4M3_MAX;

/// How a group's scale and codes are formed (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GroupScale {
    /// Seed 000's v2 quantizer (`quantize_mmq_e4m3_d128_kernel`, the
    /// rules of [`crate::fp8_mmq::quantize_activations`]): `amax` the
    /// running maximum of `|x|` from `+0` (a NaN never becomes it); if
    /// `amax == 0` the scale is `+0` and every code `0x00`; else `s = amax
    /// / 448`, `r = 448 / amax` and `q = e4m3(x * r)` (`SatFinite`).
    V2,
    /// vLLM's and SGLang's `per_token_group_quant_8bit` (CUDA): `amax` the
    /// running `fmaxf` of `|x|` from `eps` (a NaN never becomes it), `s =
    /// amax / 448` and `q = e4m3(min(max(x / s, -448), 448))`, each
    /// division one IEEE binary32 division; the clamp then the conversion
    /// equal `SatFinite` on every non-NaN quotient.
    Divide {
        /// The amax floor (vLLM and SGLang pass `1e-10`).
        eps: f32,
    },
    /// UE8M0 scales (DeepGEMM's `per_token_cast_to_fp8(..., use_ue8m0)`,
    /// vLLM's `use_ue8m0`): `amax` from `eps` as in `Divide`, `s0 = amax /
    /// 448` rounded to f32, `s = 2^ceil(log2(s0))` exactly (the smallest
    /// power of two at least `s0`), and `q = e4m3(x / s)` (`SatFinite`),
    /// which divides by a power of two, exactly unless the quotient is
    /// subnormal.
    Ue8m0 {
        /// The amax floor (DeepGEMM clamps at `1e-4`, vLLM at `1e-10`).
        eps: f32,
    },
}

impl GroupScale {
    /// The rule's formula in reports (its `eps` aside).
    pub fn name(&self) -> &'static str {
        match self {
            GroupScale::V2 => "v2 (x * (448/amax); zero group: scale 0)",
            GroupScale::Divide { .. } => "divide (x / (max(amax, eps)/448))",
            GroupScale::Ue8m0 { .. } => "ue8m0 (x / 2^ceil(log2(max(amax, eps)/448)))",
        }
    }
}

/// `|x|` by clearing the sign bit.
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7FFF_FFFF)
}

/// The smallest power of two at least `y` (`y > 0`, finite), exactly:
/// `y` itself when it is one, else the next one up (`+inf` past the
/// largest). Rule `UE8M0-CEIL`.
pub fn pow2_ceil(y: f32) -> f32 {
    let bits = y.to_bits();
    let exp = (bits >> 23) & 0xFF;
    let man = bits & 0x7F_FFFF;
    if exp == 0 {
        // Subnormal: the next power of two at or above its top bit.
        let top = 31 - man.leading_zeros();
        let p = 1u32 << top;
        let p = if man == p { p } else { p << 1 };
        // `p` is at most 2^23, the smallest normal's bit pattern.
        return f32::from_bits(p);
    }
    if man == 0 {
        return y;
    }
    if exp >= 254 {
        return f32::INFINITY;
    }
    f32::from_bits((exp + 1) << 23)
}

/// One group: its codes into `q` (`q.len() == x.len()`), its scale
/// returned, by `rule` (see [`GroupScale`]'s variants for every step).
///
/// # Panics
/// If `q.len() != x.len()` (callers check lengths first).
pub fn quantize_group(x: &[f32], rule: GroupScale, q: &mut [u8]) -> f32 {
    assert_eq!(q.len(), x.len(), "quantize_group: q and x lengths differ");
    let floor = match rule {
        GroupScale::V2 => 0.0,
        GroupScale::Divide { eps } | GroupScale::Ue8m0 { eps } => eps,
    };
    let mut amax = floor;
    for &v in x {
        let a = abs(v);
        if a > amax {
            amax = a;
        }
    }
    match rule {
        GroupScale::V2 => {
            if amax == 0.0 {
                q.fill(0x00);
                return 0.0;
            }
            let (s, r) = (amax / E4M3_MAX, E4M3_MAX / amax);
            for (c, &v) in q.iter_mut().zip(x) {
                *c = encode_e4m3(v * r, Overflow::SatFinite);
            }
            s
        }
        GroupScale::Divide { .. } | GroupScale::Ue8m0 { .. } => {
            let s0 = amax / E4M3_MAX;
            let s = match rule {
                GroupScale::Ue8m0 { .. } => pow2_ceil(s0),
                _ => s0,
            };
            for (c, &v) in q.iter_mut().zip(x) {
                *c = encode_e4m3(v / s, Overflow::SatFinite);
            }
            s
        }
    }
}

/// Why [`quantize_groups`] refused its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantError {
    /// A zero `group`.
    ZeroGroup,
    /// A slice whose length disagrees with the shape: its name, the
    /// length expected and the length given.
    Len(&'static str, usize, usize),
}

impl core::fmt::Display for QuantError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QuantError::ZeroGroup => write!(f, "group is 0; it must be at least 1"),
            QuantError::Len(arg, want, got) => {
                write!(f, "{arg}: {got} elements, expected {want}")
            }
        }
    }
}

/// Every group of every row (module docs' shapes), by `rule`; groups are
/// independent, so their order is immaterial.
///
/// # Errors
/// [`QuantError`] for a zero group or a slice of the wrong length;
/// nothing is written then.
pub fn quantize_groups(
    x: &[f32],
    cols: usize,
    group: usize,
    rule: GroupScale,
    q: &mut [u8],
    s: &mut [f32],
) -> Result<(), QuantError> {
    if group == 0 {
        return Err(QuantError::ZeroGroup);
    }
    let rows = x.len().checked_div(cols).unwrap_or(0);
    let per_row = cols.div_ceil(group);
    if rows * cols != x.len() {
        return Err(QuantError::Len("x", rows * cols, x.len()));
    }
    if q.len() != x.len() {
        return Err(QuantError::Len("q", x.len(), q.len()));
    }
    if s.len() != rows * per_row {
        return Err(QuantError::Len("s", rows * per_row, s.len()));
    }
    for j in 0..rows {
        for g in 0..per_row {
            let lo = j * cols + g * group;
            let hi = j * cols + cols.min((g + 1) * group);
            s[j * per_row + g] = quantize_group(&x[lo..hi], rule, &mut q[lo..hi]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_ceil_is_the_next_power_of_two() {
        assert_eq!(pow2_ceil(1.0), 1.0);
        assert_eq!(pow2_ceil(1.0000001), 2.0);
        assert_eq!(pow2_ceil(0.75), 1.0);
        assert_eq!(pow2_ceil(3.0e-39), f32::from_bits(0x0040_0000));
        assert_eq!(pow2_ceil(f32::from_bits(1)), f32::from_bits(1));
        assert_eq!(pow2_ceil(f32::from_bits(3)), f32::from_bits(4));
        assert_eq!(pow2_ceil(f32::from_bits(0x007F_FFFF)), f32::MIN_POSITIVE);
        assert_eq!(pow2_ceil(f32::MAX), f32::INFINITY);
        assert_eq!(pow2_ceil(2.0f32.powi(127)), 2.0f32.powi(127));
    }

    #[test]
    fn a_zero_group_is_the_rules_difference() {
        let x = [0.0f32; 4];
        let mut q = [0xAAu8; 4];
        assert_eq!(quantize_group(&x, GroupScale::V2, &mut q), 0.0);
        assert_eq!(q, [0; 4]);
        let s = quantize_group(&x, GroupScale::Divide { eps: 1e-10 }, &mut q);
        assert_eq!(s, 1e-10 / 448.0);
        assert_eq!(q, [0; 4]);
        let s = quantize_group(&x, GroupScale::Ue8m0 { eps: 1e-4 }, &mut q);
        assert_eq!(s, pow2_ceil(1e-4 / 448.0));
        assert_eq!(s.to_bits() & 0x7F_FFFF, 0);
    }

    #[test]
    fn the_amax_element_codes_448_under_every_rule() {
        let x = [0.5f32, -3.0, 1.25, 2.0];
        for rule in [
            GroupScale::V2,
            GroupScale::Divide { eps: 1e-10 },
            GroupScale::Ue8m0 { eps: 1e-10 },
        ] {
            let mut q = [0u8; 4];
            let s = quantize_group(&x, rule, &mut q);
            let back = crate::e4m3::decode_e4m3(q[1], crate::conventions::NanMagnitude::Ieee);
            if rule == (GroupScale::Ue8m0 { eps: 1e-10 }) {
                // 3 / 448 rounds up to 2^-7: -3 / 2^-7 = -384.
                assert_eq!((s, back), (1.0 / 128.0, -384.0));
            } else {
                assert_eq!((s, back), (3.0 / 448.0, -448.0), "{rule:?}");
            }
        }
    }

    #[test]
    fn groups_cover_a_short_last_group_and_refuse_bad_lengths() {
        let x: [f32; 10] = core::array::from_fn(|i| i as f32 - 4.5);
        let (mut q, mut s) = ([0u8; 10], [0f32; 4]);
        quantize_groups(&x, 5, 3, GroupScale::V2, &mut q, &mut s).unwrap();
        // Row 0: groups [0..3], [3..5]; row 1: [5..8], [8..10].
        assert_eq!(s, [4.5 / 448.0, 1.5 / 448.0, 2.5 / 448.0, 4.5 / 448.0]);
        let mut s3 = [0f32; 3];
        assert_eq!(
            quantize_groups(&x, 5, 3, GroupScale::V2, &mut q, &mut s3),
            Err(QuantError::Len("s", 4, 3))
        );
        assert_eq!(
            quantize_groups(&x, 5, 0, GroupScale::V2, &mut q, &mut s),
            Err(QuantError::ZeroGroup)
        );
        assert_eq!(
            quantize_groups(&x, 4, 2, GroupScale::V2, &mut q, &mut s),
            Err(QuantError::Len("x", 8, 10))
        );
    }
}
