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
//!   format of DeepGEMM and of MXFP8), and how its exponent is rounded up
//!   ([`Ue8m0Ceil`]): through a binary32 `log2` (vLLM's CUDA kernel,
//!   torch, Triton), which rounds `log2` of a scale just above a power of
//!   two down to the power itself, or exactly (the bit forms that raise
//!   the exponent of any scale with a non-zero fraction).
//!
//! Each choice changes bits a GEMM then consumes, so a quantizer is judged
//! bit for bit under the rule it declares.
//!
//! Shapes: `x` is `[rows][cols]` f32 (elements, row-major); `q` is
//! `[rows][cols]` e4m3 codes; `s` is `[rows][ceil(cols / group)]` f32, row
//! `j`'s group `g` covering columns `g * group .. min((g + 1) * group,
//! cols)` (a short last group when `group` does not divide `cols`).
//!
//! The module's second half ([`quantize_scaled`]) is the per-tensor and
//! per-token quantizers the field runs before a per-tensor or rowwise FP8
//! GEMM: one scale for the whole tensor (static, given; or dynamic, from
//! the tensor's amax) or one per row (dynamic), named by a [`ScaledRule`].

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
    /// amax / 448` and `q = e4m3(fminf(fmaxf(x / s, -448), 448))`, each
    /// division one IEEE binary32 division ([`clamp_fminmax`]: a NaN
    /// quotient becomes -448, code `0xFE`); on every other quotient the
    /// clamp then the conversion equal `SatFinite`.
    Divide {
        /// The amax floor (vLLM and SGLang pass `1e-10`).
        eps: f32,
    },
    /// `Divide` with the scale formed as torch forms `amax / 448.0` on a
    /// CUDA tensor: `s = amax * r`, `r` the binary32 reciprocal of 448
    /// rounded once (PyTorch's `div_true_kernel_cuda` multiplies by the
    /// reciprocal of a CPU-scalar divisor, "may lose one bit of precision
    /// compared to computing the division"); `amax` and `q` as in `Divide`
    /// (`x / s` divides by a tensor: an IEEE division). The pure-torch
    /// quantizers' rule: half of random groups' scales sit one ulp from
    /// `Divide`'s.
    Reciprocal {
        /// The amax floor.
        eps: f32,
    },
    /// UE8M0 scales (vLLM's and SGLang's `scale_ue8m0`, DeepGEMM's
    /// `per_token_cast_to_fp8(..., use_ue8m0=True)`): `amax` from `eps` as
    /// in `Divide`, `s0 = amax / 448`, `s1 = fmaxf(s0, 1e-10)` (vLLM's
    /// floor; it never binds from `eps >= 4.5e-8`), `s = 2^ceil(log2(s1))`
    /// with the ceiling `ceil` ([`Ue8m0Ceil::Log2f`]: of `log2f`
    /// correctly rounded to binary32, [`ceil_log2f`], the field's CUDA,
    /// torch and Triton forms; [`Ue8m0Ceil::Exact`]: exact,
    /// [`ceil_log2`], the bit forms), and `q` as in `Divide` (a division
    /// by a power of two, exact unless the quotient is subnormal).
    Ue8m0 {
        /// The amax floor (DeepGEMM clamps at `1e-4`, vLLM at `1e-10`).
        eps: f32,
        /// How the exponent is rounded up.
        ceil: Ue8m0Ceil,
    },
}

impl GroupScale {
    /// The rule's formula in reports (its `eps` aside).
    pub fn name(&self) -> &'static str {
        match self {
            GroupScale::V2 => "v2 (x * (448/amax); zero group: scale 0)",
            GroupScale::Divide { .. } => "divide (x / (max(amax, eps)/448))",
            GroupScale::Reciprocal { .. } => "reciprocal (x / (max(amax, eps) * fl(1/448)))",
            GroupScale::Ue8m0 {
                ceil: Ue8m0Ceil::Log2f,
                ..
            } => "ue8m0 (x / 2^ceil(log2f(max(amax, eps)/448)))",
            GroupScale::Ue8m0 {
                ceil: Ue8m0Ceil::Exact,
                ..
            } => "ue8m0_exact (x / 2^ceil(log2(max(amax, eps)/448)), the exact ceiling)",
        }
    }
}

/// How a UE8M0 scale's exponent is rounded up: the two forms the field
/// ships, which part exactly where a scale `s = 2^e m` (`1 < m < 2`) lies
/// so close above `2^e` that a binary32 `log2(s)` rounds to the integer
/// `e` (rule `UE8M0-LOG2F`, [`ceil_log2f`]): at 1 to 3 binary32 ulps above
/// `2^e`, for `|e| >= 4`, `>= 8`, `>= 16` respectively (but `e = -4`,
/// `-8`, `-16`). Everywhere else (every scale at or below a power of two,
/// or farther above one) they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ue8m0Ceil {
    /// `exp2f(ceilf(log2f(s)))`, `log2f` correctly rounded to binary32
    /// ([`ceil_log2f`], [`ue8m0_scale_log2f`]): vLLM's and SGLang's CUDA
    /// `per_token_group_quant_8bit` (`scale_ue8m0`), DeepGEMM's torch
    /// form `torch.pow(2, torch.ceil(torch.log2(s)))`, Triton's
    /// `tl.log2`. The default.
    Log2f,
    /// `2^ceil(log2(s))` exactly ([`ceil_log2`], [`ue8m0_scale_exact`]):
    /// the bit forms that add one to the exponent of any scale with a
    /// non-zero fraction (DeepEP's `fast_log2_ceil` in
    /// `csrc/kernels/utils.cuh`, DeepSeek's reference `kernel.py`
    /// `fast_round_scale`, vLLM's register-resident 16-bit variant of
    /// `per_token_group_quant_8bit`).
    Exact,
}

impl Ue8m0Ceil {
    /// Both, the default first.
    pub const ALL: [Ue8m0Ceil; 2] = [Ue8m0Ceil::Log2f, Ue8m0Ceil::Exact];

    /// The ceiling's name in declarations: `log2f` or `exact`.
    pub fn name(self) -> &'static str {
        match self {
            Ue8m0Ceil::Log2f => "log2f",
            Ue8m0Ceil::Exact => "exact",
        }
    }

    /// `s0 >= 0` rounded up to a UE8M0 power of two under this ceiling
    /// ([`ue8m0_scale_log2f`] or [`ue8m0_scale_exact`]).
    pub fn scale(self, s0: f32) -> f32 {
        match self {
            Ue8m0Ceil::Log2f => ue8m0_scale_log2f(s0),
            Ue8m0Ceil::Exact => ue8m0_scale_exact(s0),
        }
    }
}

/// `|x|` by clearing the sign bit.
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7FFF_FFFF)
}

/// The vLLM floor under a UE8M0 scale before its `log2`.
pub const UE8M0_FLOOR: f32 = 1e-10;

/// CUDA's `fminf(fmaxf(v, -448), 448)`: `fmaxf` returns its non-NaN
/// operand, so a NaN `v` becomes -448 (CUDA Math API, `fmaxf`/`fminf`).
pub fn clamp_fminmax(v: f32) -> f32 {
    let lo = if v.is_nan() || v < -E4M3_MAX {
        -E4M3_MAX
    } else {
        v
    };
    if lo > E4M3_MAX {
        E4M3_MAX
    } else {
        lo
    }
}

/// `y = 2^e m` with `1 <= m < 2`, for `y > 0` finite: `(e, m - 1)`,
/// `m - 1` exact in f64 (a binary32 has at most 24 significant bits).
fn split_pow2(y: f32) -> (i32, f64) {
    let bits = y.to_bits();
    let (exp, man) = ((bits >> 23) & 0xFF, bits & 0x7F_FFFF);
    if exp == 0 {
        // Subnormal: the leading one of the mantissa is the power.
        let top = 31 - man.leading_zeros() as i32;
        let rest = man - (1 << top);
        (top - 149, f64::from(rest) / f64::from(1u32 << top))
    } else {
        (exp as i32 - 127, f64::from(man) / f64::from(1u32 << 23))
    }
}

/// `ceil(RN(log2(y)))` for `y > 0` finite, `RN` rounding the exact
/// `log2(y)` to binary32 (a correctly rounded `log2f`), computed exactly
/// (rule `UE8M0-LOG2F`).
///
/// The rule: with `y = 2^e m`, `1 <= m < 2`, the result is `e` when `m ==
/// 1` or when `RN(e + log2(m)) == e`, else `e + 1`. `RN(e + L) == e`
/// (`L = log2(m)`, `0 < L < 1`) holds iff `L < h`, `h` half the binary32
/// spacing next to `e` in the direction of `e + L`: for `e >= 1` the
/// spacing above `e` (`ulp(e)`, of the binade holding `e`); for `e <= -1`
/// the value `e + L` has magnitude `|e| - L`, so the spacing below `|e|`
/// (half `ulp(|e|)` when `|e|` is a power of two); for `e = 0`, `RN(L)`
/// is never 0 (`L` is at least `2^-24`, far above the least subnormal),
/// so the result is 1. Since `|e| <= 149`, `h <= 2^-17`.
///
/// The decision, exact: `L < h` iff `m - 1 < 2^h - 1 = expm1(h ln 2)`,
/// evaluated in f64 as `t + t^2 / 2`, `t = h ln 2` (the series' next term
/// is `t^3 / 6 < 2.5e-17`, so the threshold is within a relative `1e-11`
/// of `2^h - 1`, counting the roundings of `ln 2`, of `t` and of the
/// sum). A non-zero `m - 1` is a positive multiple of `2^-23` (of `2^-p`,
/// `p < 23`, for a subnormal `y`), and `2^h - 1` in units of that grid
/// is `2^j ln 2 (1 + O(2^-17))` for an integer `j <= 6` (`h` is a power
/// of two from `2^-25` to `2^-17`): 44.36, 22.18, 11.09, 5.55, 2.77, 1.39,
/// 0.69 or less, at least 0.09 from every positive integer (a unit test
/// checks every `e` and grid): the comparison is decided far outside its
/// error. A tie `L == h` cannot occur (`log2` of
/// a rational `m` other than a power of two is irrational, `h` is
/// dyadic); were one to, `m - 1 < threshold` would be false and the
/// result `e + 1`.
///
/// Source: vLLM's `per_token_group_quant_8bit` CUDA kernel
/// (`csrc/quantization/w8a8/fp8/per_token_group_quant.cu`, `scale_ue8m0`:
/// `exp2f(ceilf(log2f(fmaxf(fabsf(y_s), 1e-10f))))`). The CUDA Math API
/// bounds `log2f`'s error by 1 ulp, not 0, so a correctly rounded
/// `log2f` is a model, not the documented contract; on an H100 (CUDA 13,
/// libdevice `__nv_log2f` through Triton, `tl.log2`, `torch.log2` all
/// agreeing), `ceil(log2f(s))` for `s = 2^e (1 + u 2^-23)`, `e` in `-40
/// ..= 19`, `u` in `{1, 2, 3}`, is `e` in exactly the 124 of the 180
/// pairs this rule names (`u = 1` for `|e| >= 4`, `u = 2` for `|e| >= 8`,
/// `u = 3` for `|e| >= 16`, each but `e = -4`, `-8`, `-16`), and `e`
/// for every `s` one ulp below `2^e` (`u = -1`): the model matches the
/// hardware there.
///
/// # Panics
/// If `y` is not positive and finite.
pub fn ceil_log2f(y: f32) -> i32 {
    assert!(
        y > 0.0 && y.is_finite(),
        "ceil_log2f: {y} is not positive and finite"
    );
    let (e, delta) = split_pow2(y);
    if delta == 0.0 {
        return e;
    }
    if delta >= log2f_keeps_threshold(e) {
        e + 1
    } else {
        e
    }
}

/// `2^h - 1` for the half-spacing `h` of [`ceil_log2f`] next to `e`
/// (`m - 1` below it: `RN(e + log2(m)) == e`); for `e = 0`, 0.
fn log2f_keeps_threshold(e: i32) -> f64 {
    if e == 0 {
        return 0.0;
    }
    // The binary32 neighbour of e toward e + log2(m): up for e > 0, toward
    // zero for e < 0 (bit patterns step by one in magnitude).
    let ef = e as f32;
    let next = f32::from_bits(ef.to_bits() - u32::from(e < 0) + u32::from(e > 0));
    let h = (f64::from(next) - f64::from(ef)).abs() / 2.0;
    let t = h * core::f64::consts::LN_2;
    t + t * t / 2.0
}

/// `ceil(log2(y))` exactly for `y > 0` finite: with `y = 2^e m`, `1 <= m
/// < 2`, `e` when `m == 1`, else `e + 1`. For a normal `y` this is the
/// bit form `((bits >> 23) & 0xFF) - 127 + (mantissa != 0)` (DeepEP's
/// `fast_log2_ceil`, `csrc/kernels/utils.cuh`; DeepSeek's reference
/// `kernel.py`); for a subnormal `y` the bit form gives `-126` or `-127`
/// where this gives the true ceiling (no UE8M0 scale reaches it: the
/// scales are floored at [`UE8M0_FLOOR`]).
///
/// # Panics
/// If `y` is not positive and finite.
pub fn ceil_log2(y: f32) -> i32 {
    assert!(
        y > 0.0 && y.is_finite(),
        "ceil_log2: {y} is not positive and finite"
    );
    let (e, delta) = split_pow2(y);
    e + i32::from(delta != 0.0)
}

/// `2^n` as binary32 (`n` from -149 to 127).
fn pow2(n: i32) -> f32 {
    if n >= -126 {
        f32::from_bits(((n + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (n + 149))
    }
}

/// `2^ceil(y)` for a scale `s0 >= 0` under the ceiling `ceil_of`: `s1 =
/// max(s0, UE8M0_FLOOR)`, the exponent capped at 127; an infinite `s1`
/// is kept.
fn ue8m0_with(s0: f32, ceil_of: fn(f32) -> i32) -> f32 {
    let s1 = if s0 > UE8M0_FLOOR { s0 } else { UE8M0_FLOOR };
    if s1.is_finite() {
        pow2(ceil_of(s1).min(127))
    } else {
        s1
    }
}

/// A scale `s0 >= 0` rounded up to a power of two as vLLM's and SGLang's
/// `per_token_group_quant_8bit` do under `scale_ue8m0` (fp8 and int8
/// alike): `exp2f(ceilf(log2f(fmaxf(fabsf(s0), 1e-10f))))`, that is
/// `2^ceil_log2f(max(s0, UE8M0_FLOOR))` ([`ceil_log2f`], a correctly
/// rounded `log2f`; rule `UE8M0-LOG2F`; [`Ue8m0Ceil::Log2f`]), the
/// exponent capped at 127; an infinite `s0` is kept. Units: `s0` and the
/// result are scales (values per code step), binary32.
pub fn ue8m0_scale_log2f(s0: f32) -> f32 {
    ue8m0_with(s0, ceil_log2f)
}

/// A scale `s0 >= 0` rounded up to a power of two exactly:
/// `2^ceil_log2(max(s0, UE8M0_FLOOR))` ([`ceil_log2`];
/// [`Ue8m0Ceil::Exact`]), the exponent capped at 127; an infinite `s0`
/// is kept. It parts from [`ue8m0_scale_log2f`] only where `log2f` rounds
/// down onto an integer (module docs of [`Ue8m0Ceil`]): there it is
/// twice that.
pub fn ue8m0_scale_exact(s0: f32) -> f32 {
    ue8m0_with(s0, ceil_log2)
}

/// One group: its codes into `q` (`q.len() == x.len()`), its scale
/// returned, by `rule` (see [`GroupScale`]'s variants for every step).
/// `eps` is finite and at least 0 ([`quantize_groups`] checks it).
///
/// # Panics
/// If `q.len() != x.len()` (callers check lengths first).
pub fn quantize_group(x: &[f32], rule: GroupScale, q: &mut [u8]) -> f32 {
    assert_eq!(q.len(), x.len(), "quantize_group: q and x lengths differ");
    let floor = match rule {
        GroupScale::V2 => 0.0,
        GroupScale::Divide { eps }
        | GroupScale::Reciprocal { eps }
        | GroupScale::Ue8m0 { eps, .. } => eps,
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
        GroupScale::Divide { .. } | GroupScale::Reciprocal { .. } | GroupScale::Ue8m0 { .. } => {
            let s0 = match rule {
                GroupScale::Reciprocal { .. } => amax * (1.0 / E4M3_MAX),
                _ => amax / E4M3_MAX,
            };
            let s = match rule {
                GroupScale::Ue8m0 { ceil, .. } => ceil.scale(s0),
                _ => s0,
            };
            for (c, &v) in q.iter_mut().zip(x) {
                *c = encode_e4m3(clamp_fminmax(v / s), Overflow::SatFinite);
            }
            s
        }
    }
}

/// Why [`quantize_groups`] (or [`crate::int8_group_quant::quantize_int8_groups`])
/// refused its arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantError {
    /// A zero `group`.
    ZeroGroup,
    /// An `eps` that is NaN, infinite or negative.
    Eps(f32),
    /// A slice whose length disagrees with the shape: its name, the
    /// length expected and the length given.
    Len(&'static str, usize, usize),
    /// A static scale, `scale_ub` or `min_scale` out of its range: the
    /// argument's name and value (a static scale and `scale_ub` must be
    /// finite and positive, `min_scale` finite and at least 0).
    Arg(&'static str, f32),
    /// A [`ScaledRule`] that derives its own scale (`torch_divide`,
    /// `torch_reciprocal`, `to_float8`, `torchao`) given a static one.
    StaticRule(ScaledRule),
}

impl core::fmt::Display for QuantError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QuantError::ZeroGroup => write!(f, "group is 0; it must be at least 1"),
            QuantError::Eps(e) => write!(f, "eps = {e}: it must be finite and at least 0"),
            QuantError::Len(arg, want, got) => {
                write!(f, "{arg}: {got} elements, expected {want}")
            }
            QuantError::Arg(arg, v) => write!(f, "{arg} = {v}: out of its range"),
            QuantError::StaticRule(r) => write!(
                f,
                "rule {}: it derives its own scale; a static scale takes divide or reciprocal",
                r.label()
            ),
        }
    }
}

/// Every group of every row (module docs' shapes), by `rule`; groups are
/// independent, so their order is immaterial.
///
/// # Errors
/// [`QuantError`] for a zero group, an `eps` that is NaN, infinite or
/// negative, or a slice of the wrong length; nothing is written then.
pub fn quantize_groups(
    x: &[f32],
    cols: usize,
    group: usize,
    rule: GroupScale,
    q: &mut [u8],
    s: &mut [f32],
) -> Result<(), QuantError> {
    let eps = match rule {
        GroupScale::V2 => None,
        GroupScale::Divide { eps }
        | GroupScale::Reciprocal { eps }
        | GroupScale::Ue8m0 { eps, .. } => Some(eps),
    };
    for_each_group(x, cols, group, eps, q, s, |xg, qg| {
        quantize_group(xg, rule, qg)
    })
}

/// The shape checks and the loop of a per-token-group quantizer (module
/// docs' shapes; [`quantize_groups`], and
/// [`crate::int8_group_quant::quantize_int8_groups`] with codes of type
/// `T`): checks `group >= 1`, then `eps` (where the rule has one: finite,
/// at least 0), then the lengths of `x`, `q` and `s`, and writes each
/// group's codes and scale by `f(group's x, group's q)`, row by row.
///
/// # Errors
/// [`QuantError::ZeroGroup`], [`QuantError::Eps`] or [`QuantError::Len`],
/// in that order; nothing is written then.
pub(crate) fn for_each_group<T>(
    x: &[f32],
    cols: usize,
    group: usize,
    eps: Option<f32>,
    q: &mut [T],
    s: &mut [f32],
    mut f: impl FnMut(&[f32], &mut [T]) -> f32,
) -> Result<(), QuantError> {
    if group == 0 {
        return Err(QuantError::ZeroGroup);
    }
    if let Some(eps) = eps {
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(QuantError::Eps(eps));
        }
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
            // A short last group ends at the row's end.
            let lo = j * cols + g * group;
            let hi = j * cols + cols.min((g + 1) * group);
            s[j * per_row + g] = f(&x[lo..hi], &mut q[lo..hi]);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Per-tensor and per-token scaled quantizers.
// ---------------------------------------------------------------------------

/// vLLM's floor under a dynamic FP8 scale, `min_scaling_factor<
/// c10::Float8_e4m3fn>::val()` (`csrc/quantization/utils.cuh`): `1.0f /
/// (448 * 512.0f)`, the binary32 reciprocal of 229376 rounded once
/// (`0x36924925`). vLLM's `dynamic_per_token_scaled_fp8_quant_kernel`
/// floors each token's scale at it; its per-tensor CUDA kernel
/// (`segmented_max_reduction`) has no floor (`min_scale = 0`), and its
/// torch-native `QuantFP8.forward_native` floors both at it.
pub const MIN_SCALING_FACTOR: f32 = 1.0 / (E4M3_MAX * 512.0);

/// The amax floor of PyTorch's `to_float8` recipe (`amax.clamp(min=1e-12)`
/// on a float32 amax, the FP8 `_scaled_mm` tests and tutorials): the
/// binary32 nearest 1e-12. torchao's `amax_to_scale` clamps a float64
/// amax at the float64 `EPS = 1e-12` instead ([`ScaledRule::Torchao`]).
pub const TO_FLOAT8_EPS: f32 = 1e-12;

/// How a per-tensor or per-token quantizer forms its scale `s` and its
/// codes. `amax` is the running maximum of `|x|` from `+0` over the span
/// (the whole tensor, or one row), then `fminf(amax, scale_ub)` where an
/// upper bound is given; every code is `e4m3(clamp(v))` with `v` the
/// scaled element, `clamp(v) = fmaxf(-448, fminf(v, 448))` (vLLM's
/// `scaled_fp8_conversion`, [`clamp_fmin_fmax`]: a NaN `v` becomes +448)
/// and the conversion round-to-nearest-even (`SatFinite`, which the clamp
/// makes immaterial). `min_scale` is the floor of [`ScaleSource::Dynamic`].
///
/// NaN and infinite elements follow vLLM's CUDA kernels (`fmaxf` skips a
/// NaN in the amax; the clamp codes a NaN `v` as +448): the torch forms
/// (`TorchDivide`, `TorchReciprocal`, `ToFloat8`, `Torchao`) differ there
/// (`Tensor.max` and `Tensor.clamp` propagate NaN, so a NaN element makes
/// every code of its span NaN); the case library draws NaN only in its
/// NAN arm, under `Divide` and `Reciprocal`.
///
/// Static scales (vLLM `static_scaled_fp8_quant`) take `Divide` or
/// `Reciprocal` only; the scale written is the one given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaledRule {
    /// `s = fmaxf(amax / 448, min_scale)`, `v = x / s` (IEEE binary32
    /// divisions). vLLM's `dynamic_per_token_scaled_fp8_quant_kernel`
    /// (`csrc/quantization/w8a8/fp8/common.cu`: `scaled_fp8_conversion<
    /// false>`, "we don't use inverted scales so we can match FBGemm").
    Divide,
    /// `s = fmaxf(amax / 448, min_scale)`, `v = x * fl(1 / s)`: vLLM's
    /// `scaled_fp8_quant_kernel` (`inverted_scale = 1.0f / (*scale)`,
    /// `scaled_fp8_conversion<true>`; `scaled_fp8_quant_kernel_strided`
    /// and `..._strided_dynamic` in current vLLM, the same steps), which
    /// `static_scaled_fp8_quant` (with a `[1]` scale; its per-channel `[d]`
    /// scale is not modelled) and `dynamic_scaled_fp8_quant` (after
    /// `segmented_max_reduction`'s `atomicMaxFloat(scale, amax / 448)`
    /// over rows from a zeroed scale, no floor) both run.
    Reciprocal,
    /// `s = fmaxf(amax * fl(1/448), min_scale)` (torch's `amax / 448.0` on
    /// a CUDA tensor: a multiply by the binary32 reciprocal of the Python
    /// scalar, `div_true_kernel_cuda`), `v = x / s` (a tensor division,
    /// IEEE): the pure-torch form `x / scale`.
    TorchDivide,
    /// `s = fmaxf(amax * fl(1/448), min_scale)`, `v = x * fl(1 / s)`:
    /// vLLM's torch-native `QuantFP8.forward_native`
    /// (`vllm/model_executor/layers/quantization/input_quant_fp8.py`:
    /// `(x_max / _FP8_MAX).clamp(min=_FP8_MIN_SCALING_FACTOR)`, then `x *
    /// scale.reciprocal()`).
    TorchReciprocal,
    /// PyTorch's `to_float8` recipe (the `_scaled_mm` tests and tutorials,
    /// on a float32 amax): `a = max(amax, 1e-12)` ([`TO_FLOAT8_EPS`];
    /// `min_scale` unused), `r = fl(fl(1 / a) * 448)` (torch's `448 /
    /// amax` for a Python scalar over a tensor is `amax.reciprocal() *
    /// 448`, `Tensor.__rdiv__` in `torch/_tensor.py`), `v = x * r`, and the
    /// scale written is its inverse `s = fl(1 / r)`
    /// (`scale.float().reciprocal()`, what `torch._scaled_mm` takes).
    ToFloat8,
    /// torchao's float8 training recipe (`torchao/float8/float8_utils.py`:
    /// `amax_to_scale` upcasts the amax to float64 "to ensure same numeric
    /// between compile and eager"; `to_fp8_saturated` clamps, then casts):
    /// `a = max(f64(amax), 1e-12)` in binary64 (`min_scale` unused), `r =
    /// f32(fl64(fl64(1 / a) * 448))` (`448 / a` through
    /// `Tensor.__rdiv__`, then `.to(torch.float32)`), `v = x * r`
    /// (`float8_training_tensor.py`, `_ToFloat8ConstrFunc.forward`:
    /// `tensor.to(torch.float32) * scale`), and the scale written its
    /// inverse `s = fl(1 / r)` (`_scale` is the multiplier; what
    /// `torch._scaled_mm` takes is `_scale.reciprocal()`). The one rule
    /// with binary64 steps, as torchao has them. For an amax of at least
    /// 1e-12, `r` is the binary32 quotient `448 / amax` correctly rounded
    /// (the float64 steps err by under 2^-51 relative, and no quotient of
    /// 448 by a binary32 lies within 2^-49 of a binary32 midpoint), which
    /// `ToFloat8`'s `fl(fl(1 / a) * 448)` misses by an ulp for about a
    /// fifth of amaxes. For an amax under 1e-12, `a` is the float64 1e-12.
    Torchao,
}

impl ScaledRule {
    /// Every rule, in the order reports list them.
    pub const ALL: [ScaledRule; 6] = [
        ScaledRule::Divide,
        ScaledRule::Reciprocal,
        ScaledRule::TorchDivide,
        ScaledRule::TorchReciprocal,
        ScaledRule::ToFloat8,
        ScaledRule::Torchao,
    ];

    /// The rule's name in reports and in Python (`"divide"`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            ScaledRule::Divide => "divide",
            ScaledRule::Reciprocal => "reciprocal",
            ScaledRule::TorchDivide => "torch_divide",
            ScaledRule::TorchReciprocal => "torch_reciprocal",
            ScaledRule::ToFloat8 => "to_float8",
            ScaledRule::Torchao => "torchao",
        }
    }

    /// Whether the rule floors its scale at `min_scale`: all but
    /// `ToFloat8` and `Torchao`, which floor the amax at 1e-12 instead.
    pub fn uses_min_scale(&self) -> bool {
        !matches!(self, ScaledRule::ToFloat8 | ScaledRule::Torchao)
    }

    /// The rule's formula in reports.
    pub fn formula(&self) -> &'static str {
        match self {
            ScaledRule::Divide => "s = max(amax/448, min_scale), x / s",
            ScaledRule::Reciprocal => "s = max(amax/448, min_scale), x * fl(1/s)",
            ScaledRule::TorchDivide => "s = max(amax*fl(1/448), min_scale), x / s",
            ScaledRule::TorchReciprocal => "s = max(amax*fl(1/448), min_scale), x * fl(1/s)",
            ScaledRule::ToFloat8 => {
                "r = fl(1/max(amax,1e-12))*448, x * r, s = fl(1/r) (written inverted)"
            }
            ScaledRule::Torchao => {
                "r = f32(448/max(f64(amax),1e-12)), x * r, s = fl(1/r) (written inverted)"
            }
        }
    }
}

/// One scale for the whole tensor, or one per row (token).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// One scale; `s` has 1 element.
    Tensor,
    /// One scale per row; `s` has `rows` elements (vLLM writes `[rows, 1]`).
    Token,
}

/// Where a scale comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScaleSource {
    /// A given scale (finite, positive), per tensor: vLLM's
    /// `static_scaled_fp8_quant`.
    Static(f32),
    /// From the span's amax, floored at `min_scale` (finite, at least 0;
    /// [`MIN_SCALING_FACTOR`] is vLLM's), the amax first bounded by
    /// `scale_ub` where given (finite, positive; vLLM's per-token
    /// `scale_ub`, an amax bound despite its name: `fminf(amax,
    /// *scale_ub) / 448`).
    Dynamic {
        /// The floor under the scale.
        min_scale: f32,
        /// The upper bound on the amax.
        scale_ub: Option<f32>,
    },
}

/// CUDA's `fmaxf(-448, fminf(v, 448))` (vLLM's `scaled_fp8_conversion`):
/// `fminf` returns its non-NaN operand, so a NaN `v` becomes +448 (code
/// `0x7E`), whatever its sign. The opposite order ([`clamp_fminmax`])
/// sends it to -448.
pub fn clamp_fmin_fmax(v: f32) -> f32 {
    let hi = if v.is_nan() || v > E4M3_MAX {
        E4M3_MAX
    } else {
        v
    };
    if hi < -E4M3_MAX {
        -E4M3_MAX
    } else {
        hi
    }
}

/// How one span's codes are formed, once its amax is known: the scale it
/// writes and the factor its codes divide by or multiply by (see
/// [`ScaledRule`]'s variants for every step).
///
/// Monotone (the property `oracle::rms_norm_fp8_quant` encloses codes
/// by): for a fixed span scale, [`SpanScale::code`] is non-decreasing in
/// the element (a division or a multiply by a positive factor, the clamp
/// and the round-to-nearest-even conversion each are); and for every rule
/// and source, as the amax grows the scale written does not decrease and
/// the magnitude of every code does not increase (the scale is a
/// non-decreasing function of the amax, the factor of a division grows
/// with it and that of a multiply shrinks), but for a scale of 0 (a
/// `min_scale` of 0 and an amax of 0), whose codes are `x / 0` or `x *
/// inf`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpanScale {
    /// The scale written.
    pub scale: f32,
    /// What the codes divide by ([`SpanScale::divide`]) or multiply by.
    pub factor: f32,
    /// Whether the codes divide by `factor` (else they multiply by it).
    pub divide: bool,
}

impl SpanScale {
    /// The span scale of `rule` from `source`; `amax` is the span's
    /// running maximum of `|x|` from `+0` (unused by a static scale), which
    /// a dynamic source first bounds by its `scale_ub`. Arguments are
    /// checked by [`quantize_scaled`].
    pub fn new(rule: ScaledRule, source: ScaleSource, amax: f32) -> SpanScale {
        let (scale, factor, divide) = match source {
            ScaleSource::Static(s) => match rule {
                ScaledRule::Reciprocal => (s, 1.0 / s, false),
                _ => (s, s, true),
            },
            ScaleSource::Dynamic {
                min_scale,
                scale_ub,
            } => {
                let mut amax = amax;
                if let Some(ub) = scale_ub {
                    if ub < amax {
                        amax = ub;
                    }
                }
                if rule == ScaledRule::ToFloat8 {
                    let a = if amax > TO_FLOAT8_EPS {
                        amax
                    } else {
                        TO_FLOAT8_EPS
                    };
                    let r = (1.0 / a) * E4M3_MAX;
                    (1.0 / r, r, false)
                } else if rule == ScaledRule::Torchao {
                    // torchao's float64 steps, then one rounding to binary32.
                    let a64 = f64::from(amax);
                    let a = if a64 > 1e-12 { a64 } else { 1e-12 };
                    let r = ((1.0 / a) * f64::from(E4M3_MAX)) as f32;
                    (1.0 / r, r, false)
                } else {
                    let s0 = match rule {
                        ScaledRule::TorchDivide | ScaledRule::TorchReciprocal => {
                            amax * (1.0 / E4M3_MAX)
                        }
                        _ => amax / E4M3_MAX,
                    };
                    let s = if s0 > min_scale { s0 } else { min_scale };
                    match rule {
                        ScaledRule::Divide | ScaledRule::TorchDivide => (s, s, true),
                        _ => (s, 1.0 / s, false),
                    }
                }
            }
        };
        SpanScale {
            scale,
            factor,
            divide,
        }
    }

    /// The code of element `v`: `e4m3(clamp(v / factor))` or
    /// `e4m3(clamp(v * factor))`, the clamp [`clamp_fmin_fmax`], the
    /// conversion round-to-nearest-even (`SatFinite`).
    pub fn code(&self, v: f32) -> u8 {
        let y = if self.divide {
            v / self.factor
        } else {
            v * self.factor
        };
        encode_e4m3(clamp_fmin_fmax(y), Overflow::SatFinite)
    }
}

/// One span (the tensor, or one row): its codes into `q` (`q.len() ==
/// x.len()`), its scale returned, by `rule` from `source` ([`SpanScale`]
/// of the span's amax). Arguments are checked by [`quantize_scaled`].
///
/// # Panics
/// If `q.len() != x.len()`.
pub fn quantize_span(x: &[f32], rule: ScaledRule, source: ScaleSource, q: &mut [u8]) -> f32 {
    assert_eq!(q.len(), x.len(), "quantize_span: q and x lengths differ");
    let mut amax = 0.0f32;
    if let ScaleSource::Dynamic { .. } = source {
        for &v in x {
            let a = abs(v);
            if a > amax {
                amax = a;
            }
        }
    }
    let span = SpanScale::new(rule, source, amax);
    for (c, &v) in q.iter_mut().zip(x) {
        *c = span.code(v);
    }
    span.scale
}

/// The per-tensor or per-token quantizer: `x` `[rows][cols]` f32, codes
/// `q` `[rows][cols]`, scales `s` (1 element for [`Granularity::Tensor`],
/// `rows` for [`Granularity::Token`]), by `rule` from `source`. Per
/// tensor, the amax runs over every element of every row.
///
/// # Errors
/// [`QuantError`] for a slice of the wrong length, a static scale or
/// `scale_ub` that is not finite and positive, a `min_scale` that is NaN,
/// infinite or negative, a static scale per token (`Arg("scale", s)`: no
/// field kernel has one) or under a rule that derives its own scale;
/// nothing is written then.
pub fn quantize_scaled(
    x: &[f32],
    cols: usize,
    granularity: Granularity,
    rule: ScaledRule,
    source: ScaleSource,
    q: &mut [u8],
    s: &mut [f32],
) -> Result<(), QuantError> {
    let positive = |v: f32| v.is_finite() && v > 0.0;
    match source {
        ScaleSource::Static(sc) => {
            if !positive(sc) || granularity == Granularity::Token {
                return Err(QuantError::Arg("scale", sc));
            }
            if !matches!(rule, ScaledRule::Divide | ScaledRule::Reciprocal) {
                return Err(QuantError::StaticRule(rule));
            }
        }
        ScaleSource::Dynamic {
            min_scale,
            scale_ub,
        } => {
            if !(min_scale.is_finite() && min_scale >= 0.0) {
                return Err(QuantError::Arg("min_scale", min_scale));
            }
            if let Some(ub) = scale_ub {
                if !positive(ub) {
                    return Err(QuantError::Arg("scale_ub", ub));
                }
            }
        }
    }
    let rows = x.len().checked_div(cols).unwrap_or(0);
    if rows * cols != x.len() {
        return Err(QuantError::Len("x", rows * cols, x.len()));
    }
    if q.len() != x.len() {
        return Err(QuantError::Len("q", x.len(), q.len()));
    }
    let scales = match granularity {
        Granularity::Tensor => 1,
        Granularity::Token => rows,
    };
    if s.len() != scales {
        return Err(QuantError::Len("s", scales, s.len()));
    }
    match granularity {
        Granularity::Tensor => s[0] = quantize_span(x, rule, source, q),
        Granularity::Token => {
            // Rows in order, each its own span.
            let rows_q = q.chunks_mut(cols.max(1));
            for ((sj, xj), qj) in s.iter_mut().zip(x.chunks(cols.max(1))).zip(rows_q) {
                *sj = quantize_span(xj, rule, source, qj);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ceil_log2f` against `ceil` of the f64 `log2` rounded to binary32
    /// (the same definition by another road; f64 `log2` is within an ulp
    /// of f64, far inside binary32's rounding, on these inputs).
    #[test]
    fn ceil_log2f_is_the_ceiling_of_a_rounded_log2() {
        extern crate std;
        let check = |y: f32| {
            let want = (f64::from(y).log2() as f32).ceil() as i32;
            assert_eq!(ceil_log2f(y), want, "y = {y:e} (0x{:08X})", y.to_bits());
        };
        for e in -149..128 {
            let p = pow2(e);
            for d in [0u32, 1, 2, 3, 5, 100, 0x40_0000] {
                let y = f32::from_bits(p.to_bits() + d);
                if y.is_finite() {
                    check(y);
                }
            }
            if e > -149 {
                check(f32::from_bits(p.to_bits() - 1));
            }
        }
        // Just above 2^9 the rounded log2 is 9, above 2^2 it is past 2.
        assert_eq!(ceil_log2f(f32::from_bits(512f32.to_bits() + 1)), 9);
        assert_eq!(ceil_log2f(f32::from_bits(4f32.to_bits() + 1)), 3);
        assert_eq!(ceil_log2f(f32::from_bits(2f32.powi(-5).to_bits() + 1)), -5);
    }

    /// The binary32 `2^e (1 + u 2^-23)` (`u` ulps from `2^e`, below it for
    /// a negative `u`).
    fn ulps_from_pow2(e: i32, u: i32) -> f32 {
        f32::from_bits((pow2(e).to_bits() as i32 + u) as u32)
    }

    /// The H100 table (`ceil_log2f`'s docs): for `e` in -40..=19 and `u`
    /// in 1..=3, `log2f` keeps the ceiling at `e` in exactly 124 of the
    /// 180 pairs, `u = 1` from `|e| >= 4`, `u = 2` from `|e| >= 8`, `u = 3`
    /// from `|e| >= 16`, each but at `e = -4`, `-8`, `-16`; the exact
    /// ceiling is `e + 1` at every one; 1 to 3 ulps below `2^e` both are
    /// `e`.
    #[test]
    fn log2f_keeps_the_power_at_the_h100_tables_124_pairs() {
        let mut kept = 0;
        for e in -40..=19 {
            for u in 1..=3 {
                let y = ulps_from_pow2(e, u);
                let from = [4, 8, 16][u as usize - 1];
                let want_kept = e.abs() >= from && e != -from;
                let got = ceil_log2f(y);
                assert_eq!(got == e, want_kept, "e = {e}, u = {u}");
                assert!(got == e || got == e + 1);
                assert_eq!(ceil_log2(y), e + 1, "e = {e}, u = {u}");
                kept += usize::from(got == e);
                let below = ulps_from_pow2(e, -u);
                assert_eq!((ceil_log2f(below), ceil_log2(below)), (e, e));
                let (sl, sx) = (ue8m0_scale_log2f(y), ue8m0_scale_exact(y));
                if e >= -33 {
                    // Above vLLM's floor, the scales are the ceilings.
                    assert_eq!((sl, sx), (pow2(got), pow2(e + 1)), "e = {e}, u = {u}");
                }
            }
        }
        assert_eq!(kept, 124);
        // The exceptions: just below a power of two, |e| - L rounds to |e|
        // on a grid half as fine.
        assert_eq!(ceil_log2f(ulps_from_pow2(-4, 1)), -3);
        assert_eq!(ceil_log2f(ulps_from_pow2(-5, 1)), -5);
        assert_eq!(ceil_log2f(ulps_from_pow2(4, 1)), 4);
        assert_eq!(ceil_log2f(ulps_from_pow2(3, 1)), 4);
        assert_eq!(ceil_log2f(ulps_from_pow2(-16, 3)), -15);
        assert_eq!(ceil_log2f(ulps_from_pow2(-17, 3)), -17);
    }

    /// Far from a power of two (100 ulps and more above one) the two
    /// ceilings, and the two UE8M0 scales, agree, over every binade.
    #[test]
    fn the_ceilings_agree_far_from_powers_of_two() {
        for e in -149..128 {
            for d in [100u32, 0x1000, 0x40_0000, 0x7F_FFFF] {
                let y = f32::from_bits(pow2(e).to_bits() + d);
                if !y.is_finite() || (e < -126 && d >= 1 << (e + 149)) {
                    continue;
                }
                assert_eq!(ceil_log2f(y), ceil_log2(y), "y = {y:e}");
                assert_eq!(ue8m0_scale_log2f(y), ue8m0_scale_exact(y), "y = {y:e}");
            }
        }
    }

    /// A power of two is its own ceiling under both rules, and its own
    /// UE8M0 scale above the floor; every non-power above it is two times.
    #[test]
    fn powers_of_two_are_their_own_ceiling() {
        for e in -149..128 {
            let p = pow2(e);
            assert_eq!((ceil_log2f(p), ceil_log2(p)), (e, e), "2^{e}");
            for ceil in Ue8m0Ceil::ALL {
                let s = ceil.scale(p);
                if e >= -33 {
                    assert_eq!(s, p, "2^{e} {ceil:?}");
                } else {
                    // vLLM's floor: 1e-10 rounds up to 2^-33.
                    assert_eq!(s, pow2(-33), "2^{e} {ceil:?}");
                }
            }
        }
        assert_eq!(Ue8m0Ceil::Log2f.name(), "log2f");
        assert_eq!(Ue8m0Ceil::Exact.name(), "exact");
    }

    /// Subnormal inputs: the ceilings of the true value (the bit form's
    /// `-126 + (mantissa != 0)` would be wrong there, but the floor keeps
    /// every UE8M0 scale far above); huge ones: `f32::MAX`'s `log2`
    /// rounds to 128, the scale caps at `2^127`, infinity is kept.
    #[test]
    fn subnormal_and_huge_inputs() {
        let least = f32::from_bits(1);
        assert_eq!((ceil_log2f(least), ceil_log2(least)), (-149, -149));
        // 3 * 2^-149: log2 = -149 + 1.585.
        let three = f32::from_bits(3);
        assert_eq!((ceil_log2f(three), ceil_log2(three)), (-147, -147));
        // 2^-127 (1 + 2^-22): the spacing below 127 is 2^-17, so log2f
        // rounds -127 + 3.4e-7 back to -127.
        let sub = f32::from_bits(0x0040_0001);
        assert_eq!((ceil_log2f(sub), ceil_log2(sub)), (-127, -126));
        for ceil in Ue8m0Ceil::ALL {
            assert_eq!(ceil.scale(sub), pow2(-33));
            assert_eq!(ceil.scale(0.0), pow2(-33));
            assert_eq!(ceil.scale(f32::MAX), pow2(127));
            assert_eq!(ceil.scale(f32::INFINITY), f32::INFINITY);
        }
        assert_eq!((ceil_log2f(f32::MAX), ceil_log2(f32::MAX)), (128, 128));
        let big = ulps_from_pow2(100, 1);
        assert_eq!((ceil_log2f(big), ceil_log2(big)), (100, 101));
        assert_eq!(ue8m0_scale_log2f(big), pow2(100));
        assert_eq!(ue8m0_scale_exact(big), pow2(101));
    }

    /// `ceil_log2f`'s error argument: for every exponent and every grid a
    /// non-zero `m - 1` lies on (`2^-p`, `p` from 1 to 23), the threshold
    /// `2^h - 1` in grid units is at least 0.05 from every positive
    /// integer, so an error of `1e-11` relative cannot move a decision.
    #[test]
    fn the_log2f_threshold_stays_off_the_grid() {
        for e in -149..128 {
            if e == 0 {
                assert_eq!(log2f_keeps_threshold(e), 0.0);
                continue;
            }
            let t = log2f_keeps_threshold(e);
            assert!(t > 0.0 && t < 6e-6, "e = {e}: {t}");
            for p in 1..=23 {
                let x = t * f64::from(1u32 << p);
                let off = if x < 1.0 {
                    1.0 - x
                } else {
                    (x - libm_round(x)).abs()
                };
                assert!(off >= 0.05, "e = {e}, grid 2^-{p}: {x}");
            }
        }
    }

    /// Round half away for a positive finite f64 (no_std has no
    /// `f64::round`).
    fn libm_round(x: f64) -> f64 {
        let i = x as u64 as f64;
        if x - i >= 0.5 {
            i + 1.0
        } else {
            i
        }
    }

    #[test]
    fn the_clamp_sends_nan_to_the_bottom() {
        assert_eq!(clamp_fminmax(f32::NAN), -448.0);
        assert_eq!(clamp_fminmax(1e9), 448.0);
        assert_eq!(clamp_fminmax(f32::NEG_INFINITY), -448.0);
        assert_eq!(clamp_fminmax(-0.0).to_bits(), (-0.0f32).to_bits());
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
        let s = quantize_group(
            &x,
            GroupScale::Ue8m0 {
                eps: 1e-4,
                ceil: Ue8m0Ceil::Log2f,
            },
            &mut q,
        );
        assert_eq!(s, pow2(-22));
        // vLLM's floor: a zero group's scale is 2^ceil(log2f(1e-10)).
        let s = quantize_group(
            &x,
            GroupScale::Ue8m0 {
                eps: 1e-10,
                ceil: Ue8m0Ceil::Log2f,
            },
            &mut q,
        );
        assert_eq!(s, pow2(-33));
        assert_eq!(q, [0; 4]);
    }

    #[test]
    fn the_amax_element_codes_448_under_every_rule() {
        let x = [0.5f32, -3.0, 1.25, 2.0];
        for rule in [
            GroupScale::V2,
            GroupScale::Divide { eps: 1e-10 },
            GroupScale::Ue8m0 {
                eps: 1e-10,
                ceil: Ue8m0Ceil::Log2f,
            },
        ] {
            let mut q = [0u8; 4];
            let s = quantize_group(&x, rule, &mut q);
            let back = crate::e4m3::decode_e4m3(q[1], crate::conventions::NanMagnitude::Ieee);
            if rule
                == (GroupScale::Ue8m0 {
                    eps: 1e-10,
                    ceil: Ue8m0Ceil::Log2f,
                })
            {
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
        for eps in [f32::NAN, f32::INFINITY, -1.0] {
            assert!(matches!(
                quantize_groups(&x, 5, 3, GroupScale::Divide { eps }, &mut q, &mut s),
                Err(QuantError::Eps(_))
            ));
        }
        assert_eq!(
            quantize_groups(&x, 4, 2, GroupScale::V2, &mut q, &mut s),
            Err(QuantError::Len("x", 8, 10))
        );
    }

    #[test]
    fn min_scaling_factor_is_the_rounded_reciprocal_of_229376() {
        assert_eq!(MIN_SCALING_FACTOR.to_bits(), 0x3692_4925);
        assert_eq!(MIN_SCALING_FACTOR, 1.0 / 229_376.0);
    }

    #[test]
    fn the_vllm_clamp_sends_nan_to_the_top() {
        assert_eq!(clamp_fmin_fmax(f32::NAN), 448.0);
        assert_eq!(clamp_fmin_fmax(-f32::NAN), 448.0);
        assert_eq!(clamp_fmin_fmax(-1e9), -448.0);
        assert_eq!(clamp_fmin_fmax(f32::INFINITY), 448.0);
        assert_eq!(clamp_fmin_fmax(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    const DYN: ScaleSource = ScaleSource::Dynamic {
        min_scale: MIN_SCALING_FACTOR,
        scale_ub: None,
    };

    /// At an e4m3 rounding tie the two static rules part: `x / s` and `x *
    /// fl(1/s)` differ by an f32 ulp, and where one is exactly the
    /// midpoint 2.375 = 0b10.011 (between 2.25 = 0b10.010, odd last bit,
    /// and 2.5, even: the tie rounds up) and the other one ulp below it,
    /// their codes are a step apart.
    #[test]
    fn divide_and_reciprocal_part_at_a_tie() {
        let mut parted = 0;
        for s in [0.3f32, 0.1, 3.0 / 448.0, 1.0 / 3.0, 0.0173] {
            let r = 1.0 / s;
            for mid in [2.125f32, 2.375, 2.625, 2.875] {
                for d in -8i32..=8 {
                    let x = f32::from_bits(((mid * s).to_bits() as i32 + d) as u32);
                    let (mut qd, mut qr) = ([0u8], [0u8]);
                    quantize_span(&[x], ScaledRule::Divide, ScaleSource::Static(s), &mut qd);
                    quantize_span(
                        &[x],
                        ScaledRule::Reciprocal,
                        ScaleSource::Static(s),
                        &mut qr,
                    );
                    assert_eq!(qd[0], encode_e4m3(x / s, Overflow::SatFinite));
                    assert_eq!(qr[0], encode_e4m3(x * r, Overflow::SatFinite));
                    parted += usize::from(qd != qr);
                }
            }
        }
        assert!(parted > 0, "no element near a tie parts the rules");
    }

    #[test]
    fn each_dynamic_rule_forms_its_scale_and_codes_448_at_the_amax() {
        let x = [0.5f32, -3.0, 1.25, 2.0];
        let mut q = [0u8; 4];
        let want = [
            (ScaledRule::Divide, 3.0f32 / 448.0),
            (ScaledRule::Reciprocal, 3.0 / 448.0),
            (ScaledRule::TorchDivide, 3.0 * (1.0 / 448.0)),
            (ScaledRule::TorchReciprocal, 3.0 * (1.0 / 448.0)),
            (ScaledRule::ToFloat8, 1.0 / ((1.0 / 3.0) * 448.0)),
            (ScaledRule::Torchao, 1.0 / (448.0f64 / 3.0) as f32),
        ];
        for (rule, s_want) in want {
            let s = quantize_span(&x, rule, DYN, &mut q);
            assert_eq!(s.to_bits(), s_want.to_bits(), "{rule:?}");
            assert_eq!(q[1], 0xFE, "{rule:?}: -amax codes -448");
        }
        // 3 / 448 and 3 * fl(1/448) are one ulp apart.
        assert_ne!(
            (3.0f32 / 448.0).to_bits(),
            (3.0f32 * (1.0 / 448.0)).to_bits()
        );
    }

    #[test]
    fn the_floor_the_bound_and_a_missing_floor() {
        let zero = [0.0f32; 3];
        let mut q = [0xAAu8; 3];
        for rule in ScaledRule::ALL {
            let s = quantize_span(&zero, rule, DYN, &mut q);
            assert_eq!(q, [0; 3], "{rule:?}");
            if rule == ScaledRule::ToFloat8 {
                assert_eq!(s, 1.0 / ((1.0 / TO_FLOAT8_EPS) * 448.0));
            } else if rule == ScaledRule::Torchao {
                // The float64 1e-12.
                assert_eq!(s, 1.0 / ((1.0 / 1e-12f64) * 448.0) as f32);
            } else {
                assert_eq!(s, MIN_SCALING_FACTOR, "{rule:?}");
            }
        }
        // vLLM's per-tensor CUDA kernel: no floor, so a zero tensor's
        // scale is 0, 1/0 = inf, 0 * inf = NaN, and the clamp makes +448.
        let no_floor = ScaleSource::Dynamic {
            min_scale: 0.0,
            scale_ub: None,
        };
        let s = quantize_span(&zero, ScaledRule::Reciprocal, no_floor, &mut q);
        assert_eq!((s, q), (0.0, [0x7E; 3]));
        // scale_ub bounds the amax: 8 over a bound of 2 codes 448.
        let ub = ScaleSource::Dynamic {
            min_scale: MIN_SCALING_FACTOR,
            scale_ub: Some(2.0),
        };
        let s = quantize_span(&[8.0, 1.0, -2.0], ScaledRule::Divide, ub, &mut q);
        assert_eq!((s, q), (2.0 / 448.0, [0x7E, 0x76, 0xFE]));
    }

    /// torchao's float64 scale is the correctly rounded binary32 `448 /
    /// amax` (checked against a float64 division, and against the
    /// binary32 neighbours by exact integer arithmetic on a sample), and
    /// parts from `to_float8`'s `fl(fl(1/a) * 448)` on about a fifth of
    /// amaxes.
    #[test]
    fn torchao_rounds_448_over_amax_once_and_parts_from_to_float8() {
        let (mut parted, n) = (0usize, 4096u32);
        let mut q = [0u8; 1];
        for i in 0..n {
            // Amaxes spread over [2^-20, 2^20), mantissas from a
            // multiplicative walk.
            let bits = 0x3580_0000u32 + i.wrapping_mul(0x0009_E377) % 0x1400_0000;
            let a = f32::from_bits(bits);
            let s = quantize_span(&[a], ScaledRule::Torchao, DYN, &mut q);
            let r = (448.0f64 / f64::from(a)) as f32;
            assert_eq!(s.to_bits(), (1.0 / r).to_bits(), "amax {a:e}");
            // r is nearest: |448 - a r| is at most the gap to either
            // neighbour (a, r and 448 exact in f64 products of 24-bit
            // mantissas, so these comparisons are exact).
            let err = |v: f32| (448.0 - f64::from(a) * f64::from(v)).abs();
            let up = f32::from_bits(r.to_bits() + 1);
            let down = f32::from_bits(r.to_bits() - 1);
            assert!(err(r) <= err(up) && err(r) <= err(down), "amax {a:e}");
            assert_eq!(q[0], 0x7E);
            let t = quantize_span(&[a], ScaledRule::ToFloat8, DYN, &mut q);
            parted += usize::from(s != t);
        }
        let frac = parted as f64 / f64::from(n);
        assert!(
            (0.1..0.4).contains(&frac),
            "torchao parts from to_float8 on {frac}"
        );
    }

    #[test]
    fn tensor_amax_covers_every_row_and_bad_arguments_are_refused() {
        let x = [1.0f32, 2.0, 3.0, 0.5, 0.25, 7.0];
        let (mut q, mut s) = ([0u8; 6], [0f32; 1]);
        let r = ScaledRule::Divide;
        quantize_scaled(&x, 3, Granularity::Tensor, r, DYN, &mut q, &mut s).unwrap();
        assert_eq!(s[0], 7.0 / 448.0);
        assert_eq!(q[5], 0x7E);
        let mut s2 = [0f32; 2];
        quantize_scaled(&x, 3, Granularity::Token, r, DYN, &mut q, &mut s2).unwrap();
        assert_eq!(s2, [3.0 / 448.0, 7.0 / 448.0]);
        assert_eq!(
            quantize_scaled(&x, 3, Granularity::Token, r, DYN, &mut q, &mut s),
            Err(QuantError::Len("s", 2, 1))
        );
        let st = ScaleSource::Static(0.5);
        assert_eq!(
            quantize_scaled(
                &x,
                3,
                Granularity::Tensor,
                ScaledRule::ToFloat8,
                st,
                &mut q,
                &mut s
            ),
            Err(QuantError::StaticRule(ScaledRule::ToFloat8))
        );
        assert!(quantize_scaled(&x, 3, Granularity::Token, r, st, &mut q, &mut s2).is_err());
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let st = ScaleSource::Static(bad);
            assert!(quantize_scaled(&x, 3, Granularity::Tensor, r, st, &mut q, &mut s).is_err());
            let ub = ScaleSource::Dynamic {
                min_scale: 0.0,
                scale_ub: Some(bad),
            };
            assert!(quantize_scaled(&x, 3, Granularity::Tensor, r, ub, &mut q, &mut s).is_err());
        }
        let nf = ScaleSource::Dynamic {
            min_scale: f32::NAN,
            scale_ub: None,
        };
        assert!(quantize_scaled(&x, 3, Granularity::Tensor, r, nf, &mut q, &mut s).is_err());
        // A static scale writes itself; 7 / 0.5 = 14 codes 14.
        let st = ScaleSource::Static(0.5);
        quantize_scaled(&x, 3, Granularity::Tensor, r, st, &mut q, &mut s).unwrap();
        assert_eq!((s[0], q[5]), (0.5, encode_e4m3(14.0, Overflow::SatFinite)));
    }
}
