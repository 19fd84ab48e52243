//! Per-token-group INT8 activation quantization (DeepSeek-style W8A8
//! int8 block quantization): one f32 scale per group of `group_size`
//! consecutive elements of a row and one int8 code per element, as vLLM's
//! and SGLang's `per_token_group_quant_int8` compute it.
//!
//! Shapes: `x` is `[rows][cols]` f32 (elements, row-major; a bfloat16 or
//! float16 input is converted to f32 first, exactly); `q` is
//! `[rows][cols]` int8 codes; `s` is `[rows][ceil(cols / group_size)]`
//! f32 (row-major: vLLM's `[m, groups]`; its column-major scale layout
//! holds the same values transposed), row `j`'s group `g` covering
//! columns `g * group_size .. min((g + 1) * group_size, cols)`.
//!
//! Operation order, per group (every f32 operation IEEE binary32, round to
//! nearest even, each rounding on its own):
//!
//! 1. `absmax` starts at `eps` and takes `fmaxf(absmax, fabsf(x))` over
//!    the group's elements in any order (a maximum is exact): `absmax =
//!    max(eps, max |x|)`, a NaN element never becoming it.
//! 2. `s = absmax / 127.0f` (one division); under [`Codes::TorchDivide`]
//!    `s = absmax * fl(1 / 127)`, as torch computes `absmax / 127.0` on
//!    CUDA (a Python-scalar divisor: its reciprocal multiplied).
//! 3. With UE8M0 scales: `s = exp2f(ceilf(log2f(fmaxf(fabsf(s), 1e-10f))))`
//!    ([`Ue8m0Ceil::Log2f`], [`crate::fp8_quant::ue8m0_scale_log2f`]:
//!    `log2f` correctly rounded), or `2^ceil(log2(max(s, 1e-10)))` with
//!    the exact ceiling ([`Ue8m0Ceil::Exact`],
//!    [`crate::fp8_quant::ue8m0_scale_exact`]), as the rule declares.
//! 4. Per element, `y = x / s` ([`Codes::Divide`], the field's) or `y = x
//!    * r` ([`Codes::Reciprocal`]: `r = fl(127.0f / absmax)`; with UE8M0
//!    `r = fl(1 / s)`, exact, so that `x * r` is `x / s`).
//! 5. `c = fminf(fmaxf(y, -128.0f), 127.0f)`, then `q = int8_t(c)`: the
//!    conversion by the declared [`Rounding`] (the field's kernels:
//!    [`Rounding::TowardZero`]).
//!
//! Named rules:
//! - `I8G-ABSMAX`: the running maximum starts at `eps` (vLLM and SGLang
//!   pass `1e-10`): an all-zero group, or one whose `max |x|` is under
//!   `eps`, has `absmax = eps`, scale `eps / 127` (`7.874e-13` at
//!   `1e-10`), and its codes are its elements over that scale. `eps = 0`
//!   is allowed: an all-zero group then has scale 0 and every code -128
//!   (`0 / 0` is NaN: `I8G-NAN`).
//! - `I8G-SCALE`: the scale is the one division `absmax / 127.0f`, written
//!   as it is. It is rounded, so `fl(absmax / s)` is `127` within an ulp
//!   and under [`Rounding::TowardZero`] the group's amax element itself
//!   codes 126, not 127, wherever the rounded scale lies above
//!   `absmax / 127` far enough (about one group in eight of random
//!   magnitudes; each of its signs alike).
//! - `I8G-UE8M0`: step 3, vLLM's `scale_ue8m0` (fp8 and int8 alike): the
//!   scale is a power of two at least `absmax / 127` but, under
//!   [`Ue8m0Ceil::Log2f`], where `log2f` rounds down onto a power (rule
//!   `UE8M0-LOG2F` of [`crate::fp8_quant::ceil_log2f`]: a scale 1 to 3
//!   ulps above `2^e` for `|e|` from 4, 8, 16 up, but `e` = -4, -8,
//!   -16); under
//!   [`Ue8m0Ceil::Exact`] always at least `absmax / 127`; codes divide by
//!   it exactly (but subnormal quotients).
//! - `I8G-CVT`: the conversion of step 5. vLLM's CUDA kernel converts with
//!   a C++ cast (`int8_t(q)`: PTX `cvt.rzi`, toward zero), its Triton
//!   kernel and SGLang's with `.to(tl.int8)` (`fptosi`, toward zero), the
//!   torch form with `.to(torch.int8)` (toward zero): 2.9 codes 2 and
//!   -2.9 codes -2. Patched forms round to nearest first
//!   (`libdevice.round`: [`Rounding::NearestAway`]) or to nearest even
//!   (`cvt.rni`, as vLLM's per-token [`crate::int8_quant`]): each a
//!   declared [`Rounding`]. For finite `x` and `eps > 0`, `|fl(x / s)|` is
//!   at most `fl(absmax / s) < 128`, so no code is -128 and the clamp
//!   changes no code: -128 comes from a NaN quotient only.
//! - `I8G-NAN`: a NaN element is skipped by the maximum (`fmaxf` returns
//!   its other operand) and codes -128: `fmaxf(NaN, -128.0f) = -128`
//!   (CUDA Math API, `fmaxf`); a conversion of NaN without the clamp
//!   (`cvt.rzi.sat` gives 0) differs.
//! - `I8G-TAIL`: when `group_size` does not divide `cols`, the last group
//!   of each row is short (`cols % group_size` elements) and has its own
//!   scale, as [`crate::fp8_quant::quantize_groups`] has it (vLLM and
//!   SGLang assert divisibility: a kernel refuses such a shape).
//!
//! Sources: vLLM `csrc/quantization/fp8/per_token_group_quant.cu` (since
//! moved to `csrc/quantization/w8a8/fp8/`),
//! `per_token_group_quant_8bit_kernel` (the int8 instance, `DST_DTYPE =
//! int8_t`, `max_8bit = 127`, `min_8bit = -128`, `scale_ue8m0`; its op
//! `per_token_group_quant_int8` asserts `k % group_size == 0`, and its
//! register-resident variant for 16-bit input at group 128 divides too,
//! multiplying by `1 / s` only under UE8M0, where that is exact; that
//! variant forms a UE8M0 scale by raising the exponent of any scale with a
//! non-zero fraction, the true ceiling, which parts from `log2f`'s at a
//! scale one ulp above a power of two: [`Ue8m0Ceil::Exact`]); vLLM's
//! and SGLang's Triton `_per_token_group_quant_int8`
//! (`vllm/model_executor/layers/quantization/utils/int8_utils.py`:
//! `_absmax = tl.maximum(tl.max(tl.abs(y)), eps)`, `y_s = _absmax /
//! int8_max`, `tl.clamp(y / y_s, int8_min, int8_max).to(tl.int8)`; its
//! `/` is PTX's approximate `div.full.f32` unless compiled otherwise, so a
//! Triton form matches this contract only with `tl.div_rn`); PTX ISA,
//! `cvt` (`.rzi`, `.rni`).

use crate::fp8_quant::{for_each_group, QuantError, Ue8m0Ceil};
use crate::int8_quant::{round_integral, Codes, Rounding};

/// The field's amax floor (vLLM and SGLang `eps=1e-10`).
pub const EPS: f32 = 1e-10;

/// A declared per-token-group int8 rule (module docs' steps 1 to 5).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Int8GroupRule {
    /// The conversion of step 5.
    pub rounding: Rounding,
    /// Divide (the field's) or multiply by `fl(127 / absmax)`.
    pub codes: Codes,
    /// Whether the scale is rounded up to a power of two (step 3), and
    /// under which ceiling: `None`, no UE8M0.
    pub ue8m0: Option<Ue8m0Ceil>,
    /// The amax floor (finite, at least 0).
    pub eps: f32,
}

impl Int8GroupRule {
    /// vLLM's and SGLang's rule at floor `eps`: toward zero, divide, no
    /// UE8M0.
    pub const fn vllm(eps: f32) -> Int8GroupRule {
        Int8GroupRule {
            rounding: Rounding::TowardZero,
            codes: Codes::Divide,
            ue8m0: None,
            eps,
        }
    }

    /// The rule's name in reports: the rounding's name ([`Rounding::name`]:
    /// `trunc`, `nearest_even`, `nearest_away`), then `/reciprocal` for
    /// [`Codes::Reciprocal`], `/torch_divide` for [`Codes::TorchDivide`],
    /// and `/ue8m0` for UE8M0 scales under [`Ue8m0Ceil::Log2f`] or
    /// `/ue8m0_exact` under [`Ue8m0Ceil::Exact`] (its `eps` aside).
    pub fn label(&self) -> &'static str {
        // [rounding][codes][no UE8M0, log2f, exact]
        const LABELS: [[[&str; 3]; 3]; 3] = [
            [
                ["trunc", "trunc/ue8m0", "trunc/ue8m0_exact"],
                [
                    "trunc/reciprocal",
                    "trunc/reciprocal/ue8m0",
                    "trunc/reciprocal/ue8m0_exact",
                ],
                [
                    "trunc/torch_divide",
                    "trunc/torch_divide/ue8m0",
                    "trunc/torch_divide/ue8m0_exact",
                ],
            ],
            [
                [
                    "nearest_even",
                    "nearest_even/ue8m0",
                    "nearest_even/ue8m0_exact",
                ],
                [
                    "nearest_even/reciprocal",
                    "nearest_even/reciprocal/ue8m0",
                    "nearest_even/reciprocal/ue8m0_exact",
                ],
                [
                    "nearest_even/torch_divide",
                    "nearest_even/torch_divide/ue8m0",
                    "nearest_even/torch_divide/ue8m0_exact",
                ],
            ],
            [
                [
                    "nearest_away",
                    "nearest_away/ue8m0",
                    "nearest_away/ue8m0_exact",
                ],
                [
                    "nearest_away/reciprocal",
                    "nearest_away/reciprocal/ue8m0",
                    "nearest_away/reciprocal/ue8m0_exact",
                ],
                [
                    "nearest_away/torch_divide",
                    "nearest_away/torch_divide/ue8m0",
                    "nearest_away/torch_divide/ue8m0_exact",
                ],
            ],
        ];
        let r = match self.rounding {
            Rounding::TowardZero => 0,
            Rounding::NearestEven => 1,
            Rounding::NearestAway => 2,
        };
        let c = match self.codes {
            Codes::Divide => 0,
            Codes::Reciprocal => 1,
            Codes::TorchDivide => 2,
        };
        let u = match self.ue8m0 {
            None => 0,
            Some(Ue8m0Ceil::Log2f) => 1,
            Some(Ue8m0Ceil::Exact) => 2,
        };
        LABELS[r][c][u]
    }
}

/// CUDA's `fminf(fmaxf(v, -128.0f), 127.0f)`: `fmaxf` returns its non-NaN
/// operand, so a NaN `v` becomes -128 (`I8G-NAN`).
pub fn clamp_int8(v: f32) -> f32 {
    let lo = if v.is_nan() || v < -128.0 { -128.0 } else { v };
    if lo > 127.0 {
        127.0
    } else {
        lo
    }
}

/// The code of a quotient `y` (step 5): [`clamp_int8`], then the
/// conversion under `rounding` (`I8G-CVT`; the clamped value lies in
/// `[-128, 127]`, and so does its rounding).
pub fn cvt_clamped_s8(y: f32, rounding: Rounding) -> i8 {
    round_integral(clamp_int8(y), rounding) as i8
}

/// One group: its codes into `q` (`q.len() == x.len()`), its scale
/// returned, by `rule` (module docs' steps). `rule.eps` is finite and at
/// least 0 ([`quantize_int8_groups`] checks it).
///
/// # Panics
/// If `q.len() != x.len()` (callers check lengths first).
pub fn quantize_int8_group(x: &[f32], rule: Int8GroupRule, q: &mut [i8]) -> f32 {
    assert_eq!(
        q.len(),
        x.len(),
        "quantize_int8_group: q and x lengths differ"
    );
    // I8G-ABSMAX: fmaxf from eps; `a > absmax` is false for a NaN.
    let mut absmax = rule.eps;
    for &v in x {
        let a = f32::from_bits(v.to_bits() & 0x7FFF_FFFF);
        if a > absmax {
            absmax = a;
        }
    }
    let s0 = if rule.codes == Codes::TorchDivide {
        absmax * (1.0 / 127.0)
    } else {
        absmax / 127.0
    };
    let s = match rule.ue8m0 {
        Some(ceil) => ceil.scale(s0),
        None => s0,
    };
    let r = match (rule.codes, rule.ue8m0) {
        (Codes::Divide | Codes::TorchDivide, _) => 0.0,
        (Codes::Reciprocal, None) => 127.0 / absmax,
        (Codes::Reciprocal, Some(_)) => 1.0 / s,
    };
    for (c, &v) in q.iter_mut().zip(x) {
        let y = match rule.codes {
            Codes::Divide | Codes::TorchDivide => v / s,
            Codes::Reciprocal => v * r,
        };
        *c = cvt_clamped_s8(y, rule.rounding);
    }
    s
}

/// Every group of every row (module docs' shapes), by `rule`; groups are
/// independent, so their order is immaterial.
///
/// # Errors
/// [`QuantError::ZeroGroup`] for a zero `group_size`,
/// [`QuantError::Eps`] for an `eps` that is NaN, infinite or negative,
/// [`QuantError::Len`] for a slice of the wrong length; nothing is
/// written then.
pub fn quantize_int8_groups(
    x: &[f32],
    cols: usize,
    group_size: usize,
    rule: Int8GroupRule,
    q: &mut [i8],
    s: &mut [f32],
) -> Result<(), QuantError> {
    // I8G-TAIL: the last group ends at the row's end.
    for_each_group(x, cols, group_size, Some(rule.eps), q, s, |xg, qg| {
        quantize_int8_group(xg, rule, qg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::{vec, vec::Vec};

    const VLLM: Int8GroupRule = Int8GroupRule::vllm(EPS);

    fn with(rounding: Rounding) -> Int8GroupRule {
        Int8GroupRule { rounding, ..VLLM }
    }

    fn quant(x: &[f32], rule: Int8GroupRule) -> (Vec<i8>, f32) {
        let mut q = vec![0i8; x.len()];
        let s = quantize_int8_group(x, rule, &mut q);
        (q, s)
    }

    /// amax 127 * 2^-2: s = 0.25 exactly; 2.9 * 0.25 codes 2 toward zero
    /// and 3 to nearest; the ties (k + 1/2) * 0.25 go to k, to even, away.
    #[test]
    fn cvt_truncates_toward_zero_and_nearest_rules_round() {
        let x = [31.75f32, 0.725, -0.725, 0.625, -0.625, 0.375, -0.375];
        let (q, s) = quant(&x, VLLM);
        assert_eq!(s, 0.25);
        assert_eq!(q, [127, 2, -2, 2, -2, 1, -1]);
        let (q, _) = quant(&x, with(Rounding::NearestEven));
        assert_eq!(q, [127, 3, -3, 2, -2, 2, -2]);
        let (q, _) = quant(&x, with(Rounding::NearestAway));
        assert_eq!(q, [127, 3, -3, 3, -3, 2, -2]);
    }

    /// I8G-ABSMAX: a zero group's scale is eps / 127 and its codes 0; a
    /// group under eps codes against that scale; eps = 0 gives scale 0
    /// and codes -128 (0 / 0 is NaN, I8G-NAN).
    #[test]
    fn the_amax_starts_at_eps() {
        let (q, s) = quant(&[0.0, -0.0, 0.0], VLLM);
        assert_eq!((q, s), (vec![0, 0, 0], EPS / 127.0));
        let tiny = [5e-11f32, -2e-11, 1e-12];
        let (q, s) = quant(&tiny, VLLM);
        assert_eq!(s, EPS / 127.0);
        let want: Vec<i8> = tiny.iter().map(|&v| (v / s) as i8).collect();
        assert_eq!(q, want);
        assert_eq!(q[0], 63);
        let zero_eps = Int8GroupRule { eps: 0.0, ..VLLM };
        assert_eq!(quant(&[0.0, 0.0], zero_eps), (vec![-128, -128], 0.0));
        let rec = Int8GroupRule {
            codes: Codes::Reciprocal,
            ..zero_eps
        };
        assert_eq!(quant(&[0.0, -0.0], rec), (vec![-128, -128], 0.0));
    }

    /// I8G-NAN: skipped by the maximum, coded -128.
    #[test]
    fn nan_is_skipped_and_codes_minus_128() {
        let (q, s) = quant(&[f32::NAN, 2.54, -1.27, f32::NAN], VLLM);
        assert_eq!(s, 2.54f32 / 127.0);
        assert_eq!((q[0], q[3]), (-128, -128));
        assert_eq!(cvt_clamped_s8(f32::NAN, Rounding::NearestEven), -128);
        assert_eq!(cvt_clamped_s8(f32::INFINITY, Rounding::TowardZero), 127);
        assert_eq!(cvt_clamped_s8(-1e30, Rounding::TowardZero), -128);
    }

    /// I8G-SCALE and I8G-CVT: the amax element codes 126 toward zero where
    /// fl(absmax / s) < 127 (one group in about eight), 127 to nearest;
    /// no finite element codes -128; divide and reciprocal part there.
    #[test]
    fn the_amax_element_codes_126_toward_zero_for_some_scales() {
        let (mut below, mut parted, mut n) = (0u32, 0usize, 0u32);
        let mut a = 1.0f32;
        while a < 2.0 {
            n += 1;
            for rounding in Rounding::ALL {
                for codes in [Codes::Divide, Codes::Reciprocal] {
                    let rule = Int8GroupRule {
                        rounding,
                        codes,
                        ..VLLM
                    };
                    let (q, _) = quant(&[a, -a, 0.5 * a], rule);
                    assert!(q.iter().all(|&c| c > -128), "{a} {rule:?}");
                    if rounding != Rounding::TowardZero {
                        assert_eq!((q[0], q[1]), (127, -127));
                    }
                }
            }
            let (q, _) = quant(&[a, -a], VLLM);
            if q[0] == 126 {
                below += 1;
                assert_eq!(q[1], -126);
                assert!(a / (a / 127.0) < 127.0);
            }
            let rec = Int8GroupRule {
                codes: Codes::Reciprocal,
                ..VLLM
            };
            parted += usize::from(quant(&[a], rec).0 != quant(&[a], VLLM).0);
            a = f32::from_bits(a.to_bits() + 997);
        }
        let share = f64::from(below) / f64::from(n);
        assert!(share > 0.08 && share < 0.17, "{share}");
        assert!(parted * 6 > n as usize, "{parted} of {n}");
    }

    /// I8G-UE8M0: the scale is the power of two the fp8 rule takes, codes
    /// divide by it; reciprocal codes are the same bits.
    #[test]
    fn ue8m0_scales_are_powers_of_two() {
        let rule = Int8GroupRule {
            ue8m0: Some(Ue8m0Ceil::Log2f),
            ..VLLM
        };
        let x = [3.0f32, -1.7, 0.01];
        let (q, s) = quant(&x, rule);
        assert_eq!(s, 1.0 / 32.0);
        assert_eq!(q, [96, -54, 0]);
        let rec = Int8GroupRule {
            codes: Codes::Reciprocal,
            ..rule
        };
        assert_eq!(quant(&x, rec), (q, s));
        // A zero group: eps / 127 under 1e-10 is floored to 1e-10 first.
        assert_eq!(quant(&[0.0], rule).1, Ue8m0Ceil::Log2f.scale(1e-10));
    }

    /// I8G-UE8M0's two ceilings: an absmax whose `absmax / 127` is one ulp
    /// above `2^-10` keeps the scale `2^-10` under `log2f` (its amax
    /// element then codes 127, clamped from 127.00002) and doubles it
    /// under the exact ceiling (the amax codes 63 toward zero); at
    /// `2^-2` (`|e| < 4`) both double it.
    #[test]
    fn the_two_ceilings_part_one_ulp_above_a_power_of_two() {
        let exact = Int8GroupRule {
            ue8m0: Some(Ue8m0Ceil::Exact),
            ..VLLM
        };
        let log2f = Int8GroupRule {
            ue8m0: Some(Ue8m0Ceil::Log2f),
            ..VLLM
        };
        for (e, parts) in [(-10, true), (-2, false), (12, true)] {
            let target = f32::from_bits((2f32.powi(e)).to_bits() + 1);
            // The absmax whose division by 127 gives the target.
            let a = (0..4)
                .map(|d| f32::from_bits((127.0 * target).to_bits() + d - 1))
                .find(|&a| a / 127.0 == target)
                .expect("an absmax");
            let (ql, sl) = quant(&[a, -0.5 * a], log2f);
            let (qx, sx) = quant(&[a, -0.5 * a], exact);
            assert_eq!(sx, 2f32.powi(e + 1));
            assert_eq!(sl == sx, !parts, "e = {e}");
            if parts {
                assert_eq!((sl, ql[0], qx[0]), (2f32.powi(e), 127, 63));
            }
        }
        assert_eq!(exact.label(), "trunc/ue8m0_exact");
        assert_eq!(log2f.label(), "trunc/ue8m0");
    }

    /// I8G-TAIL: a short last group has its own scale; bad arguments are
    /// refused and nothing is written.
    #[test]
    fn a_short_last_group_has_its_own_scale_and_bad_arguments_are_refused() {
        let x = [1.0f32, 2.0, 3.0, 100.0, -50.0, 0.0, 0.0, 0.0, 7.0, 8.0];
        let (mut q, mut s) = ([0i8; 10], [0f32; 6]);
        quantize_int8_groups(&x, 5, 2, VLLM, &mut q, &mut s).unwrap();
        assert_eq!(s[2], 50.0 / 127.0);
        assert_eq!(s[5], 8.0 / 127.0);
        let c = cvt_clamped_s8(-50.0 / (50.0f32 / 127.0), Rounding::TowardZero);
        assert!(q[4] == c && (c == -127 || c == -126));
        assert_eq!(
            q[9],
            cvt_clamped_s8(8.0 / (8.0f32 / 127.0), Rounding::TowardZero)
        );
        let mut s0 = [9f32; 6];
        assert_eq!(
            quantize_int8_groups(&x, 5, 0, VLLM, &mut q, &mut s0),
            Err(QuantError::ZeroGroup)
        );
        let bad = Int8GroupRule {
            eps: f32::NAN,
            ..VLLM
        };
        assert!(matches!(
            quantize_int8_groups(&x, 5, 2, bad, &mut q, &mut s0),
            Err(QuantError::Eps(_))
        ));
        assert_eq!(
            quantize_int8_groups(&x, 5, 4, VLLM, &mut q, &mut s0),
            Err(QuantError::Len("s", 4, 6))
        );
        assert_eq!(
            quantize_int8_groups(&x, 3, 2, VLLM, &mut q, &mut s0),
            Err(QuantError::Len("x", 9, 10))
        );
        assert_eq!(s0, [9.0; 6]);
    }

    #[test]
    fn labels_name_rounding_codes_and_ue8m0() {
        assert_eq!(VLLM.label(), "trunc");
        let r = Int8GroupRule {
            rounding: Rounding::NearestAway,
            codes: Codes::Reciprocal,
            ue8m0: Some(Ue8m0Ceil::Log2f),
            eps: 0.0,
        };
        assert_eq!(r.label(), "nearest_away/reciprocal/ue8m0");
        let t = Int8GroupRule {
            rounding: Rounding::NearestEven,
            codes: Codes::TorchDivide,
            ue8m0: Some(Ue8m0Ceil::Exact),
            eps: 0.0,
        };
        assert_eq!(t.label(), "nearest_even/torch_divide/ue8m0_exact");
    }
}
