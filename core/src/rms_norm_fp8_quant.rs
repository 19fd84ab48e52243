//! RMSNorm (or fused add + RMSNorm) then e4m3 quantization, fused: vLLM's
//! `rms_norm_static_fp8_quant`, `fused_add_rms_norm_static_fp8_quant`
//! (`csrc/layernorm_quant_kernels.cu`) and
//! `rms_norm_dynamic_per_token_quant` with its optional residual and
//! `scale_ub` (`csrc/quantization/fused_kernels/`), the ops vLLM's
//! torch.compile fusion passes put where a graph has `rms_norm` then
//! `static_scaled_fp8_quant` or `dynamic_per_token_scaled_fp8_quant`; and
//! the unfused pair itself. The composition of two contracts:
//! [`crate::rms_norm`] (each normalized element as an interval, from a sound
//! bound on the inverse RMS) and [`crate::fp8_quant`]'s scaled quantizer
//! ([`ScaledRule`], [`Granularity`], [`ScaleSource`]: the code of each
//! element from its value and its span's scale, bit for bit).
//!
//! Shapes (elements, row-major): `x [rows][hidden]`, with the fused add
//! `residual [rows][hidden]`, `weight [hidden]`, values of the model's
//! [`Dtype`] (as [`crate::rms_norm`]). Outputs: `q [rows][hidden]` e4m3
//! codes, each as a set of codes ([`code_set`]); the scales, 1 per tensor
//! or `rows` per token, each as an interval; and with the fused add
//! `residual_out [rows][hidden]` = `R(x + residual)`, bit for bit.
//!
//! The rules, for row `i`, element `j`, with [`Declared`] naming every
//! choice:
//!
//! 1. `RNQ-NORM`: the row normalized as [`crate::rms_norm`] defines it
//!    under the declared [`Arithmetic`], eps, reciprocal square root
//!    accuracy and, with the fused add, [`SumRounding`]; the residual
//!    output is rule `RMS-ADD`'s `R(x + residual)`, checked bit for bit.
//! 2. `RNQ-INPUT`: the value quantized, `v`, is ([`QuantizeInput`]) the
//!    normalized element rounded to the dtype ([`QuantizeInput::Rounded`]:
//!    [`Arithmetic::output`], the element an unfused `rms_norm` writes) or
//!    the binary32 value before that rounding ([`QuantizeInput::F32`]:
//!    [`Arithmetic::unrounded`]). Its enclosure `[v_lo, v_hi]` is the hull
//!    of both at the row's `r_lo` and `r_hi`, with and without flush to
//!    zero ([`Arithmetic::interval`], [`Arithmetic::unrounded_interval`]):
//!    each is monotone in `r` (rule `RMS-OUT`). Both ends carry the sign
//!    of `y w` (of `y (1 + w)` under Gemma), which no `r` changes; an
//!    enclosure that is not finite (an f16 output past 65504) is refused
//!    ([`RmsNormQuantError::NotFinite`]).
//! 3. `RNQ-AMAX` (dynamic): a span (the tensor, or one row) has the amax
//!    `max_j |v_j|` of the values it quantizes, so the kernel's amax lies
//!    in `[a_lo, a_hi]`, `a_lo = max_j min(|v_lo|, |v_hi|)`, `a_hi = max_j
//!    max(|v_lo|, |v_hi|)` (each `|v_j|` is in its enclosure's magnitudes;
//!    the maximum is monotone in each).
//! 4. `RNQ-SCALE`: the span's [`SpanScale`] is the rule's at the amax; its
//!    scale is non-decreasing in the amax, so the scale written lies in
//!    `[scale(a_lo), scale(a_hi)]` (`scale_ub` and the floor included); a
//!    static scale is the one given. Decided where the two ends have the
//!    same bits: a static scale; a floor that binds over the whole range
//!    (an all-zero row); a `scale_ub` under `a_lo`; a rounded `v` whose
//!    amax element is decided.
//! 5. `RNQ-CODE`: each code's magnitude is non-decreasing in `|v|` and
//!    non-increasing in the amax ([`SpanScale`]'s monotony), with the sign
//!    of `v` (the clamp and the conversion are odd functions). So the
//!    codes element `j` can take lie between `code(v_small)` at `a_hi`
//!    and `code(v_big)` at `a_lo` in magnitude, `v_small` and `v_big` the
//!    ends of `[v_lo, v_hi]` of least and greatest magnitude
//!    ([`code_set`]). A span whose scale's enclosure holds 0 and a
//!    positive value (a `min_scale` of 0 under an amax enclosure from 0)
//!    leaves its codes unconstrained: `x / 0` and `x * inf` are not
//!    monotone; every code but NaN's is admitted there.
//! 6. `RNQ-DECIDED`: where the set is one code, the kernel's code must be
//!    it, bit for bit; elsewhere within the set ([`admits_code`]). The
//!    scale likewise ([`admits_scale`]). This needs no decided scale: a
//!    value far from a rounding midpoint is one code over a narrow scale
//!    interval. How much is decided: with a 16-bit dtype and `Rounded`,
//!    most values are decided (rule `RMS-DECIDED`), static scales always,
//!    dynamic scales wherever the amax element is, so most codes; with
//!    `F32`, values are never one binary32 value under `f32` and `gemma`
//!    (the product of a few-ulps `r`) and dynamic scales seldom, but codes
//!    are decided wherever `v / s` is further than a few binary32 ulps from
//!    an e4m3 midpoint, so most codes too; what is left bounded is the
//!    elements near a midpoint (the case library's TIES arm puts many
//!    there, and decides them). The case library's documentation gives
//!    the fractions per arm.
//!
//! The declarations kernels make (each read from the source):
//!
//! - vLLM's `rms_norm_static_fp8_quant_kernel`: `float const out_norm =
//!   ((scalar_t)(x * s_variance)) * weight[idx]`, a c10 `BFloat16`/`Half`
//!   product, which rounds to `scalar_t` (`operator*` returns the 16-bit
//!   type): `Rounded` and [`Arithmetic::RoundThenWeight`]; then
//!   `scaled_fp8_conversion<true>(out_norm, 1.0f / *scale)`: static
//!   [`ScaledRule::Reciprocal`], per tensor.
//! - vLLM's `fused_add_rms_norm_static_fp8_quant_kernel`: `z += residual`
//!   in `scalar_t` (the residual written back is `z`,
//!   [`SumRounding::Dtype`]), the same `out_norm` (its width-8 `_f16Vec`
//!   path, `temp *= s_variance; temp *= weight_v` then `float(temp.data[i])`,
//!   the same bits): `Rounded`, `Reciprocal`.
//! - vLLM's `rms_norm_dynamic_per_token_quant_kernel` (`layernorm_utils.cuh`,
//!   scalar and `vectorized::` paths alike): `x = float(input) +
//!   float(residual)` normalized unrounded ([`SumRounding::F32`]), the
//!   residual written `(scalar_t)x`; `x = static_cast<float>(
//!   static_cast<scalar_t>(x * rms) * weight[i])` both for the amax
//!   (`fmaxf(block_absmax, fabsf(x))`, a `cub` block max) and for the
//!   codes: `Rounded`, `RoundThenWeight`; `scale = max(min(amax,
//!   *scale_ub) / qmax, min_scaling_factor)`, and FP8 codes of `x /
//!   scale` (`is_scale_inverted` false, "for exact match with FBGemm"),
//!   clamped `fmax(-448, fmin(x, 448))`: [`ScaledRule::Divide`] per token,
//!   `min_scale` [`crate::fp8_quant::MIN_SCALING_FACTOR`].
//! - The unfused path (`rms_norm` writing the dtype, then
//!   `static_scaled_fp8_quant` or a per-token quantizer reading it): the
//!   same `Rounded` values; which is why vLLM's fusion is bit-exact.
//! - `F32`: a fused kernel that keeps the float32 product, as
//!   FlashInfer's `RMSNormQuantKernel` (`flashinfer/norm/kernels/
//!   rmsnorm.py`: `y = x * rstd * (w + weight_bias) * inv_scale`, the
//!   clamp, the conversion: [`Arithmetic::F32`] then a multiply) or a
//!   Triton kernel that quantizes `x * rstd * w` without its `.to(dtype)`.
//!   FlashInfer's `inv_scale` is `rcp.approx.ftz.f32` of the scale, not
//!   the correctly rounded `1 / s` of [`ScaledRule::Reciprocal`]: an ulp
//!   off for some scales, outside every rule here.
//!
//! Sources: vLLM `csrc/layernorm_quant_kernels.cu`,
//! `csrc/quantization/fused_kernels/layernorm_utils.cuh`,
//! `fused_layernorm_dynamic_per_token_quant.cu`, `quant_conversions.cuh`
//! (`float_to_fp8`); c10 `BFloat16-inl.h` and `Half-inl.h` (`operator*` of
//! two 16-bit values); FlashInfer `flashinfer/norm/kernels/rmsnorm.py`;
//! the PTX ISA (`rcp.approx.f32`); [`crate::rms_norm`] and
//! [`crate::fp8_quant`] for the two halves.

pub use crate::dtype::Dtype;
use crate::fp8_quant::{Granularity, QuantError, ScaleSource, ScaledRule, SpanScale};
pub use crate::rms_norm::{Arithmetic, Inputs, InvRms, RmsNormError, Shape, SumRounding};

/// What the quantizer reads (rule `RNQ-INPUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantizeInput {
    /// The normalized element rounded to the dtype, as an unfused
    /// `rms_norm` writes it: vLLM's fused kernels (each rounds `out_norm`
    /// to `scalar_t` before it quantizes; module documentation) and the
    /// unfused pair.
    Rounded,
    /// The binary32 value before that rounding: a fused kernel that keeps
    /// the float32 product (FlashInfer's `rmsnorm_quant` form).
    F32,
}

impl QuantizeInput {
    /// Both, in the order identification reports them.
    pub const ALL: [QuantizeInput; 2] = [QuantizeInput::Rounded, QuantizeInput::F32];

    /// `"rounded"` or `"f32"`.
    pub const fn name(self) -> &'static str {
        match self {
            QuantizeInput::Rounded => "rounded",
            QuantizeInput::F32 => "f32",
        }
    }

    /// The enclosure of `v` for normalized element `y`, weight `w`, under
    /// `a` and the row's `r` (rule `RNQ-INPUT`).
    pub fn enclosure(self, a: Arithmetic, dtype: Dtype, y: f32, r: InvRms, w: f32) -> (f32, f32) {
        match self {
            QuantizeInput::Rounded => a.interval(dtype, y, r, w),
            QuantizeInput::F32 => a.unrounded_interval(dtype, y, r, w),
        }
    }
}

/// A declaration, an argument or an input that cannot be computed.
/// Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RmsNormQuantError {
    /// The norm's: a shape, eps, `rsqrt_ulps`, an input that is not
    /// finite, a row whose sum of squares could overflow, a fused add that
    /// overflows.
    Norm(RmsNormError),
    /// The quantizer's: a static scale per token or under a rule that
    /// derives its own, a scale, `scale_ub` or `min_scale` out of range.
    Quant(QuantError),
    /// An output buffer of the wrong length.
    Len {
        /// `"v_lo"`, `"v_hi"`, `"code_lo"`, `"code_hi"`, `"scale_lo"`,
        /// `"scale_hi"` or `"residual_out"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// A value to quantize whose enclosure is not finite (rule
    /// `RNQ-INPUT`: an f16 output past 65504).
    NotFinite {
        /// The row.
        row: usize,
        /// The column.
        col: usize,
    },
}

impl core::fmt::Display for RmsNormQuantError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RmsNormQuantError::Norm(e) => write!(f, "{e}"),
            RmsNormQuantError::Quant(e) => write!(f, "{e}"),
            RmsNormQuantError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            RmsNormQuantError::NotFinite { row, col } => write!(
                f,
                "row {row}, col {col}: the value to quantize overflows the dtype (the kernel's code is not defined)"
            ),
        }
    }
}

impl From<RmsNormError> for RmsNormQuantError {
    fn from(e: RmsNormError) -> Self {
        RmsNormQuantError::Norm(e)
    }
}

impl From<QuantError> for RmsNormQuantError {
    fn from(e: QuantError) -> Self {
        RmsNormQuantError::Quant(e)
    }
}

/// What a kernel declares: the norm ([`crate::rms_norm::Declared`]), what
/// it quantizes ([`QuantizeInput`]), the scale rule, the granularity and
/// the scale's source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Declared {
    norm: crate::rms_norm::Declared,
    input: QuantizeInput,
    rule: ScaledRule,
    granularity: Granularity,
    source: ScaleSource,
}

impl Declared {
    /// A declaration. A static scale is finite and positive, per tensor,
    /// under [`ScaledRule::Divide`] or [`ScaledRule::Reciprocal`]; a
    /// dynamic source's `min_scale` is finite and at least 0, its
    /// `scale_ub` finite and positive (as [`crate::fp8_quant::quantize_scaled`]
    /// takes them).
    ///
    /// # Errors
    /// [`RmsNormQuantError::Quant`] with [`QuantError::Arg`] (`"scale"`,
    /// also for a static scale per token; `"min_scale"`; `"scale_ub"`) or
    /// [`QuantError::StaticRule`].
    pub fn new(
        norm: crate::rms_norm::Declared,
        input: QuantizeInput,
        rule: ScaledRule,
        granularity: Granularity,
        source: ScaleSource,
    ) -> Result<Declared, RmsNormQuantError> {
        let positive = |v: f32| v.is_finite() && v > 0.0;
        match source {
            ScaleSource::Static(s) => {
                if !positive(s) || granularity == Granularity::Token {
                    return Err(QuantError::Arg("scale", s).into());
                }
                if !matches!(rule, ScaledRule::Divide | ScaledRule::Reciprocal) {
                    return Err(QuantError::StaticRule(rule).into());
                }
            }
            ScaleSource::Dynamic {
                min_scale,
                scale_ub,
            } => {
                if !(min_scale.is_finite() && min_scale >= 0.0) {
                    return Err(QuantError::Arg("min_scale", min_scale).into());
                }
                if let Some(ub) = scale_ub {
                    if !positive(ub) {
                        return Err(QuantError::Arg("scale_ub", ub).into());
                    }
                }
            }
        }
        Ok(Declared {
            norm,
            input,
            rule,
            granularity,
            source,
        })
    }

    /// The same declaration quantizing `input` under `rule` (what
    /// identification tries).
    ///
    /// # Errors
    /// As [`Declared::new`]: a static scale under a rule that derives its
    /// own.
    pub fn with(
        &self,
        input: QuantizeInput,
        rule: ScaledRule,
    ) -> Result<Declared, RmsNormQuantError> {
        Declared::new(self.norm, input, rule, self.granularity, self.source)
    }

    /// The norm's declaration.
    pub fn norm(&self) -> &crate::rms_norm::Declared {
        &self.norm
    }
    /// What the quantizer reads.
    pub fn input(&self) -> QuantizeInput {
        self.input
    }
    /// The scale rule.
    pub fn rule(&self) -> ScaledRule {
        self.rule
    }
    /// One scale per tensor or per row.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }
    /// Static or dynamic.
    pub fn source(&self) -> ScaleSource {
        self.source
    }
    /// Scales written: 1 per tensor, `rows` per token.
    pub fn scales(&self, shape: &Shape) -> usize {
        match self.granularity {
            Granularity::Tensor => 1,
            Granularity::Token => shape.rows(),
        }
    }
}

/// `|v|` by clearing the sign bit.
fn abs(v: f32) -> f32 {
    f32::from_bits(v.to_bits() & 0x7FFF_FFFF)
}

/// The codes a value in `[v_lo, v_hi]` can take under a span scale between
/// `least` (at the amax enclosure's lower end) and `most` (at its upper
/// end), rule `RNQ-CODE`: `(lo, hi)`, two codes of the value's sign with
/// `|lo| <= |hi|`, every code of that sign between them in magnitude
/// admitted; `lo == hi` is a decided code. Where the two ends of the
/// value differ in sign (no declared arithmetic gives that), or the scale
/// runs from 0 to a positive value (rule `RNQ-CODE`'s exception), the set
/// is `(0x00, 0xFE)`, codes of both signs: every code but NaN's.
pub fn code_set(least: &SpanScale, most: &SpanScale, v_lo: f32, v_hi: f32) -> (u8, u8) {
    const ANY: (u8, u8) = (0x00, 0xFE);
    if (v_lo.to_bits() ^ v_hi.to_bits()) & 0x8000_0000 != 0 {
        return ANY;
    }
    if least.scale == 0.0 && most.scale != 0.0 {
        return ANY;
    }
    let (small, big) = if abs(v_lo) <= abs(v_hi) {
        (v_lo, v_hi)
    } else {
        (v_hi, v_lo)
    };
    (most.code(small), least.code(big))
}

/// Whether code `got` is in the set `(lo, hi)` of [`code_set`] (rule
/// `RNQ-DECIDED`): `got == lo` where `lo == hi`; where `lo` and `hi` differ
/// in sign, any code but NaN's (`0x7F`, `0xFF`); else a code of their sign
/// whose magnitude lies between theirs.
pub fn admits_code(lo: u8, hi: u8, got: u8) -> bool {
    if lo == hi {
        return got == lo;
    }
    if (lo ^ hi) & 0x80 != 0 {
        return got & 0x7F != 0x7F;
    }
    let m = got & 0x7F;
    got & 0x80 == lo & 0x80 && lo & 0x7F <= m && m <= hi & 0x7F
}

/// Whether scale `got` is in `[lo, hi]` (rule `RNQ-SCALE`): its bits where
/// `lo` and `hi` have the same bits, else `lo <= got <= hi` (a NaN never).
pub fn admits_scale(lo: f32, hi: f32, got: f32) -> bool {
    if lo.to_bits() == hi.to_bits() {
        got.to_bits() == lo.to_bits()
    } else {
        lo <= got && got <= hi
    }
}

/// The outputs of [`rms_norm_fp8_quant`], each as its enclosure: caller
/// buffers, lengths in elements.
#[derive(Debug)]
pub struct Outputs<'a> {
    /// `[rows][hidden]`: each value to quantize's lower end (rule
    /// `RNQ-INPUT`).
    pub v_lo: &'a mut [f32],
    /// `[rows][hidden]`: its upper end.
    pub v_hi: &'a mut [f32],
    /// `[rows][hidden]`: each code set's lower end ([`code_set`]).
    pub code_lo: &'a mut [u8],
    /// `[rows][hidden]`: its upper end.
    pub code_hi: &'a mut [u8],
    /// `[1]` per tensor, `[rows]` per token: each scale's least value.
    pub scale_lo: &'a mut [f32],
    /// The same: its greatest value.
    pub scale_hi: &'a mut [f32],
    /// `[rows][hidden]` with the fused add (rule `RMS-ADD`), empty without.
    pub residual: &'a mut [f32],
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), RmsNormQuantError> {
    if want == got {
        Ok(())
    } else {
        Err(RmsNormQuantError::Len { arg, want, got })
    }
}

/// The values to quantize (rules `RNQ-NORM`, `RNQ-INPUT`): for each row,
/// the residual output with the fused add, the row's [`InvRms`] and each
/// element's enclosure under `input`, into `v_lo`, `v_hi` and `residual`
/// (`[rows][hidden]` each, `residual` empty without the fused add).
///
/// # Errors
/// [`RmsNormQuantError::Len`] for an output of the wrong length; the
/// norm's errors as [`crate::rms_norm::rms_norm`] gives them;
/// [`RmsNormQuantError::NotFinite`] for an enclosure that is not finite.
pub fn values(
    shape: &Shape,
    norm: &crate::rms_norm::Declared,
    input: QuantizeInput,
    x: &Inputs<'_>,
    v_lo: &mut [f32],
    v_hi: &mut [f32],
    residual: &mut [f32],
) -> Result<(), RmsNormQuantError> {
    let n = shape.len();
    let fused = x.residual.is_some();
    len("v_lo", n, v_lo.len())?;
    len("v_hi", n, v_hi.len())?;
    len("residual_out", if fused { n } else { 0 }, residual.len())?;
    crate::rms_norm::check_inputs(shape, x, [n, n, residual.len()])?;
    let (h, dtype, a) = (shape.hidden(), norm.dtype(), norm.arithmetic());
    for row in 0..shape.rows() {
        let at = row * h;
        let xs = &x.x[at..at + h];
        let y = |j: usize| match x.residual {
            None => xs[j],
            Some(res) => norm.sum().normed(dtype, xs[j], res[at + j]),
        };
        if let Some(res) = x.residual {
            for j in 0..h {
                residual[at + j] = crate::rms_norm::residual_out(dtype, xs[j], res[at + j]);
            }
            if let Some(col) = (0..h).find(|&j| !y(j).is_finite()) {
                return Err(RmsNormError::AddOverflow { row, col }.into());
            }
        }
        let r = norm
            .inv_rms_of(h, (0..h).map(y))
            .ok_or(RmsNormError::Range { row })?;
        for j in 0..h {
            let (lo, hi) = input.enclosure(a, dtype, y(j), r, x.weight[j]);
            if !(lo.is_finite() && hi.is_finite()) {
                return Err(RmsNormQuantError::NotFinite { row, col: j });
            }
            v_lo[at + j] = lo;
            v_hi[at + j] = hi;
        }
    }
    Ok(())
}

/// The codes and scales of values given as enclosures (rules `RNQ-AMAX`,
/// `RNQ-SCALE`, `RNQ-CODE`): `v_lo`, `v_hi` `[rows][cols]` (each pair of
/// one sign, finite), per span (the tensor, or each row) the amax
/// enclosure, the [`SpanScale`] at each end, the scale's enclosure into
/// `scale_lo`, `scale_hi` (1 or `rows` elements as `granularity` says) and
/// each element's [`code_set`] into `code_lo`, `code_hi`. The arguments
/// are checked by [`Declared::new`].
///
/// # Errors
/// [`RmsNormQuantError::Len`] for a buffer of the wrong length (`v_lo`
/// and `v_hi` must hold whole rows of `cols`).
#[allow(clippy::too_many_arguments)]
pub fn codes(
    cols: usize,
    granularity: Granularity,
    rule: ScaledRule,
    source: ScaleSource,
    v_lo: &[f32],
    v_hi: &[f32],
    code_lo: &mut [u8],
    code_hi: &mut [u8],
    scale_lo: &mut [f32],
    scale_hi: &mut [f32],
) -> Result<(), RmsNormQuantError> {
    let rows = v_lo.len().checked_div(cols).unwrap_or(0);
    len("v_lo", rows * cols, v_lo.len())?;
    len("v_hi", v_lo.len(), v_hi.len())?;
    len("code_lo", v_lo.len(), code_lo.len())?;
    len("code_hi", v_lo.len(), code_hi.len())?;
    let (span, spans) = match granularity {
        Granularity::Tensor => (rows * cols, 1),
        Granularity::Token => (cols, rows),
    };
    len("scale_lo", spans, scale_lo.len())?;
    len("scale_hi", spans, scale_hi.len())?;
    for k in 0..spans {
        let at = k * span;
        let (lo, hi) = (&v_lo[at..at + span], &v_hi[at..at + span]);
        let (least, most) = match source {
            ScaleSource::Static(_) => {
                let s = SpanScale::new(rule, source, 0.0);
                (s, s)
            }
            ScaleSource::Dynamic { .. } => {
                let (mut a_lo, mut a_hi) = (0.0f32, 0.0f32);
                for j in 0..span {
                    let (m1, m2) = (abs(lo[j]), abs(hi[j]));
                    let (small, big) = if m1 <= m2 { (m1, m2) } else { (m2, m1) };
                    if small > a_lo {
                        a_lo = small;
                    }
                    if big > a_hi {
                        a_hi = big;
                    }
                }
                (
                    SpanScale::new(rule, source, a_lo),
                    SpanScale::new(rule, source, a_hi),
                )
            }
        };
        scale_lo[k] = least.scale;
        scale_hi[k] = most.scale;
        for j in 0..span {
            let (c1, c2) = code_set(&least, &most, lo[j], hi[j]);
            code_lo[at + j] = c1;
            code_hi[at + j] = c2;
        }
    }
    Ok(())
}

/// RMSNorm (or fused add + RMSNorm when `x.residual` is given) then e4m3
/// quantization under `d` (every rule `RNQ-*` of the module
/// documentation): [`values`], then [`codes`].
///
/// # Errors
/// As [`values`] and [`codes`]: a wrong length, an input the norm refuses,
/// a value to quantize that is not finite.
pub fn rms_norm_fp8_quant(
    shape: &Shape,
    d: &Declared,
    x: &Inputs<'_>,
    out: &mut Outputs<'_>,
) -> Result<(), RmsNormQuantError> {
    values(shape, &d.norm, d.input, x, out.v_lo, out.v_hi, out.residual)?;
    codes(
        shape.hidden(),
        d.granularity,
        d.rule,
        d.source,
        out.v_lo,
        out.v_hi,
        out.code_lo,
        out.code_hi,
        out.scale_lo,
        out.scale_hi,
    )
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::conventions::Overflow;
    use crate::e4m3::encode_e4m3;
    use crate::fp8_quant::{quantize_span, MIN_SCALING_FACTOR};
    use std::vec;
    use std::vec::Vec;

    /// A fixed LCG's values in `[0, 1)`.
    fn lcg(seed: u64) -> impl FnMut() -> f32 {
        let mut z = seed;
        move || {
            z = z
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((z >> 40) as f32) / (1u32 << 24) as f32
        }
    }

    fn norm(a: Arithmetic, dtype: Dtype) -> crate::rms_norm::Declared {
        crate::rms_norm::Declared::new(a, SumRounding::Dtype, dtype, 1e-6, 2).unwrap()
    }

    const DYN: ScaleSource = ScaleSource::Dynamic {
        min_scale: MIN_SCALING_FACTOR,
        scale_ub: None,
    };

    /// The oracle's enclosures for rows `x` (no fused add).
    struct Want {
        v: (Vec<f32>, Vec<f32>),
        code: (Vec<u8>, Vec<u8>),
        scale: (Vec<f32>, Vec<f32>),
    }

    fn want(shape: &Shape, d: &Declared, x: &[f32], w: &[f32]) -> Want {
        let n = shape.len();
        let s = d.scales(shape);
        let (mut v_lo, mut v_hi) = (vec![0f32; n], vec![0f32; n]);
        let (mut code_lo, mut code_hi) = (vec![0u8; n], vec![0u8; n]);
        let (mut scale_lo, mut scale_hi) = (vec![0f32; s], vec![0f32; s]);
        let inputs = Inputs {
            x,
            residual: None,
            weight: w,
        };
        let mut out = Outputs {
            v_lo: &mut v_lo,
            v_hi: &mut v_hi,
            code_lo: &mut code_lo,
            code_hi: &mut code_hi,
            scale_lo: &mut scale_lo,
            scale_hi: &mut scale_hi,
            residual: &mut [],
        };
        rms_norm_fp8_quant(shape, d, &inputs, &mut out).unwrap();
        Want {
            v: (v_lo, v_hi),
            code: (code_lo, code_hi),
            scale: (scale_lo, scale_hi),
        }
    }

    /// A kernel at one binary32 `r` per row (flushing or not): the values
    /// as declared, then `quantize_span` over each span.
    fn kernel(
        shape: &Shape,
        d: &Declared,
        x: &[f32],
        w: &[f32],
        rs: &[f32],
        flush: bool,
    ) -> (Vec<u8>, Vec<f32>) {
        let h = shape.hidden();
        let nd = d.norm();
        let v: Vec<f32> = (0..shape.len())
            .map(|i| {
                let (y, r, wj) = (x[i], rs[i / h], w[i % h]);
                let a = nd.arithmetic();
                match d.input() {
                    QuantizeInput::Rounded => a.output(nd.dtype(), y, r, wj, flush),
                    QuantizeInput::F32 => a.unrounded(nd.dtype(), y, r, wj, flush),
                }
            })
            .collect();
        let mut q = vec![0u8; v.len()];
        let s = match d.granularity() {
            Granularity::Tensor => vec![quantize_span(&v, d.rule(), d.source(), &mut q)],
            Granularity::Token => v
                .chunks(h)
                .zip(q.chunks_mut(h))
                .map(|(vr, qr)| quantize_span(vr, d.rule(), d.source(), qr))
                .collect(),
        };
        (q, s)
    }

    /// Every binary32 `r` between a row's ends (at most 64, spread).
    fn rs_between(r: InvRms) -> Vec<f32> {
        let (lo, hi) = (r.lo.to_bits(), r.hi.to_bits());
        let step = ((hi - lo) / 16).max(1);
        let mut v: Vec<f32> = (lo..=hi)
            .step_by(step as usize)
            .map(f32::from_bits)
            .collect();
        v.push(r.hi);
        v
    }

    #[test]
    fn rnq_code_sets_hold_every_admissible_r() {
        // Rows of random bf16 and f16 values; every declaration; kernels at
        // r values from r_lo to r_hi (one r per row, mixed between rows),
        // with and without flush: every code and scale admitted.
        let mut next = lcg(5);
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for a in Arithmetic::ALL {
                let (rows, h) = (4usize, 67usize);
                let shape = Shape::new(rows, h).unwrap();
                let x: Vec<f32> = (0..rows * h)
                    .map(|i| dtype.round((next() - 0.5) * 8.0 * (1 + i / h) as f32))
                    .collect();
                let w: Vec<f32> = (0..h).map(|_| dtype.round(0.25 + next() * 1.5)).collect();
                let nd = norm(a, dtype);
                let r: Vec<InvRms> = x.chunks(h).map(|row| nd.inv_rms(row).unwrap()).collect();
                for input in QuantizeInput::ALL {
                    for (rule, g, src) in [
                        (
                            ScaledRule::Reciprocal,
                            Granularity::Tensor,
                            ScaleSource::Static(0.013),
                        ),
                        (
                            ScaledRule::Divide,
                            Granularity::Tensor,
                            ScaleSource::Static(0.0071),
                        ),
                        (ScaledRule::Divide, Granularity::Token, DYN),
                        (ScaledRule::Reciprocal, Granularity::Tensor, DYN),
                        (ScaledRule::TorchDivide, Granularity::Token, DYN),
                        (ScaledRule::ToFloat8, Granularity::Token, DYN),
                        (ScaledRule::Torchao, Granularity::Tensor, DYN),
                    ] {
                        let d = Declared::new(nd, input, rule, g, src).unwrap();
                        let wt = want(&shape, &d, &x, &w);
                        let per_row: Vec<Vec<f32>> = r.iter().map(|&ri| rs_between(ri)).collect();
                        for k in 0..per_row[0].len().min(per_row[3].len()) {
                            for flush in [false, true] {
                                let rs: Vec<f32> = (0..rows)
                                    .map(|i| per_row[i][(k + i * 3) % per_row[i].len()])
                                    .collect();
                                let (q, s) = kernel(&shape, &d, &x, &w, &rs, flush);
                                for (i, &c) in q.iter().enumerate() {
                                    assert!(
                                        admits_code(wt.code.0[i], wt.code.1[i], c),
                                        "{a:?} {input:?} {rule:?} {g:?}: code {i} 0x{c:02X} outside (0x{:02X}, 0x{:02X})",
                                        wt.code.0[i],
                                        wt.code.1[i]
                                    );
                                }
                                for (j, &sj) in s.iter().enumerate() {
                                    assert!(admits_scale(wt.scale.0[j], wt.scale.1[j], sj));
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rnq_most_codes_are_decided_rounded_and_f32() {
        // bf16 rows: under round_then_weight and rounded values, a dynamic
        // per-token scale is decided wherever the amax element is, and most
        // codes are; under f32 values the scale is an interval, the codes
        // still mostly decided.
        let mut next = lcg(9);
        let (rows, h) = (8usize, 1024usize);
        let shape = Shape::new(rows, h).unwrap();
        let dt = Dtype::Bf16;
        let x: Vec<f32> = (0..rows * h)
            .map(|_| dt.round((next() - 0.5) * 6.0))
            .collect();
        let w: Vec<f32> = (0..h).map(|_| dt.round(0.25 + next() * 1.5)).collect();
        let nd = norm(Arithmetic::RoundThenWeight, dt);
        for (input, scales_decided) in [(QuantizeInput::Rounded, true), (QuantizeInput::F32, false)]
        {
            let d = Declared::new(nd, input, ScaledRule::Divide, Granularity::Token, DYN).unwrap();
            let wt = want(&shape, &d, &x, &w);
            let decided = (0..shape.len())
                .filter(|&i| wt.code.0[i] == wt.code.1[i])
                .count();
            assert!(decided > shape.len() * 9 / 10, "{input:?}: {decided}");
            let s_decided = (0..rows)
                .filter(|&i| wt.scale.0[i].to_bits() == wt.scale.1[i].to_bits())
                .count();
            if scales_decided {
                assert!(s_decided >= rows * 3 / 4, "{s_decided}");
            }
            // The values' enclosures: round_then_weight's f32 value is the
            // exact product R(y r) w, decided where R(y r) is.
            let v_decided = (0..shape.len()).filter(|&i| wt.v.0[i] == wt.v.1[i]).count();
            assert!(v_decided > shape.len() * 8 / 10, "{v_decided}");
        }
        // Under f32 arithmetic, the f32 values are never one value.
        let nd = norm(Arithmetic::F32, dt);
        let d = Declared::new(
            nd,
            QuantizeInput::F32,
            ScaledRule::Divide,
            Granularity::Token,
            DYN,
        )
        .unwrap();
        let wt = want(&shape, &d, &x, &w);
        let v_decided = (0..shape.len())
            .filter(|&i| wt.v.0[i] == wt.v.1[i] && wt.v.0[i] != 0.0)
            .count();
        assert_eq!(v_decided, 0);
        let decided = (0..shape.len())
            .filter(|&i| wt.code.0[i] == wt.code.1[i])
            .count();
        assert!(decided > shape.len() * 9 / 10, "{decided}");
    }

    #[test]
    fn rnq_input_parts_at_an_e4m3_midpoint() {
        // v = 161 2^-14 = 23/16 * 7 2^-10 (a bf16 value) over the static
        // scale s = 7 2^-10: v / s = 23/16 exactly, the midpoint of 1.375
        // (0b011, odd) and 1.5 (even): to even, up (0x3C). The f32 value
        // R(y r) w just below it codes 1.375 (0x3B).
        let s = 7.0 / 1024.0;
        let v = 161.0 / 16384.0;
        let span = SpanScale::new(ScaledRule::Divide, ScaleSource::Static(s), 0.0);
        assert_eq!(v / s, 1.4375);
        assert_eq!(span.code(v), 0x3C);
        assert_eq!(span.code(v - 2e-5), 0x3B);
        // Reciprocal: fl(1/7) is above 1/7 by 0.75 2^-24 relative, so v
        // times it rounds past the midpoint: up, the same code here; at
        // 1.5625 (0b100 below, even) the rules part.
        let rc = SpanScale::new(ScaledRule::Reciprocal, ScaleSource::Static(s), 0.0);
        let v2 = 1.5625 * s;
        assert_eq!(span.code(v2), 0x3C);
        assert_eq!(rc.code(v2), 0x3D);
        assert_eq!(encode_e4m3(1.5625, Overflow::SatFinite), 0x3C);
    }

    #[test]
    fn rnq_zero_rows_take_the_floor_and_signed_zero_codes() {
        let dt = Dtype::Bf16;
        let shape = Shape::new(2, 4).unwrap();
        let x = [0.0, -0.0, 0.0, 0.0, 1.0, -2.0, 0.5, 3.0];
        let w = [1.0, 1.0, -1.0, 0.5];
        let nd = norm(Arithmetic::RoundThenWeight, dt);
        let d = Declared::new(
            nd,
            QuantizeInput::Rounded,
            ScaledRule::Divide,
            Granularity::Token,
            DYN,
        )
        .unwrap();
        let wt = want(&shape, &d, &x, &w);
        assert_eq!(
            (wt.scale.0[0], wt.scale.1[0]),
            (MIN_SCALING_FACTOR, MIN_SCALING_FACTOR)
        );
        assert_eq!(&wt.code.0[..4], &[0x00, 0x80, 0x80, 0x00]);
        assert_eq!(wt.code.0[..4], wt.code.1[..4]);
        // Row 1's amax element (-2 w = -2 times r) codes -448.
        assert_eq!((wt.code.0[5], wt.code.1[5]), (0xFE, 0xFE));
        // No floor: a zero row's scale is 0 and its codes NaN's clamp, +448.
        let none = ScaleSource::Dynamic {
            min_scale: 0.0,
            scale_ub: None,
        };
        let d = Declared::new(
            nd,
            QuantizeInput::Rounded,
            ScaledRule::Divide,
            Granularity::Token,
            none,
        )
        .unwrap();
        let wt = want(&shape, &d, &x, &w);
        assert_eq!(wt.scale.0[0], 0.0);
        assert_eq!(&wt.code.0[..4], &[0x7E; 4]);
        // An amax enclosure from 0 (a value that may flush) under no floor
        // leaves the span's codes unconstrained.
        let least = SpanScale::new(ScaledRule::Divide, none, 0.0);
        let most = SpanScale::new(ScaledRule::Divide, none, 1e-3);
        assert_eq!(code_set(&least, &most, 0.0, 1e-3), (0x00, 0xFE));
        assert!(admits_code(0x00, 0xFE, 0xC5) && !admits_code(0x00, 0xFE, 0x7F));
    }

    #[test]
    fn rnq_the_bound_decides_the_scale_and_saturates() {
        // scale_ub under the amax's whole enclosure: the scale is ub / 448
        // exactly, even for f32 values; elements past the bound code 448.
        let dt = Dtype::Bf16;
        let shape = Shape::new(1, 4).unwrap();
        let (x, w) = ([4.0f32, 1.0, -0.5, 0.25], [1.0f32, 1.0, 1.0, 1.0]);
        let ub = ScaleSource::Dynamic {
            min_scale: MIN_SCALING_FACTOR,
            scale_ub: Some(0.5),
        };
        for a in Arithmetic::ALL {
            let d = Declared::new(
                norm(a, dt),
                QuantizeInput::F32,
                ScaledRule::Divide,
                Granularity::Token,
                ub,
            )
            .unwrap();
            let wt = want(&shape, &d, &x, &w);
            assert_eq!((wt.scale.0[0], wt.scale.1[0]), (0.5 / 448.0, 0.5 / 448.0));
            assert_eq!((wt.code.0[0], wt.code.1[0]), (0x7E, 0x7E), "{a:?}");
        }
    }

    #[test]
    fn rnq_declarations_and_lengths_are_checked() {
        let nd = norm(Arithmetic::F32, Dtype::Bf16);
        let new = |rule, g, src| Declared::new(nd, QuantizeInput::F32, rule, g, src);
        assert_eq!(
            new(
                ScaledRule::Divide,
                Granularity::Token,
                ScaleSource::Static(1.0)
            ),
            Err(RmsNormQuantError::Quant(QuantError::Arg("scale", 1.0)))
        );
        assert_eq!(
            new(
                ScaledRule::TorchDivide,
                Granularity::Tensor,
                ScaleSource::Static(1.0)
            ),
            Err(RmsNormQuantError::Quant(QuantError::StaticRule(
                ScaledRule::TorchDivide
            )))
        );
        let bad_ub = ScaleSource::Dynamic {
            min_scale: 0.0,
            scale_ub: Some(-1.0),
        };
        assert!(new(ScaledRule::Divide, Granularity::Token, bad_ub).is_err());
        let d = new(ScaledRule::Divide, Granularity::Token, DYN).unwrap();
        assert!(d.with(QuantizeInput::Rounded, ScaledRule::Torchao).is_ok());
        let shape = Shape::new(2, 3).unwrap();
        let x = [1.0f32; 6];
        let w = [1.0f32; 3];
        let (mut a, mut b, mut c, mut e) = ([0f32; 6], [0f32; 6], [0u8; 6], [0u8; 6]);
        let (mut s1, mut s2) = ([0f32; 1], [0f32; 1]);
        let mut out = Outputs {
            v_lo: &mut a,
            v_hi: &mut b,
            code_lo: &mut c,
            code_hi: &mut e,
            scale_lo: &mut s1,
            scale_hi: &mut s2,
            residual: &mut [],
        };
        let inputs = Inputs {
            x: &x,
            residual: None,
            weight: &w,
        };
        let err = rms_norm_fp8_quant(&shape, &d, &inputs, &mut out).unwrap_err();
        assert_eq!(
            err,
            RmsNormQuantError::Len {
                arg: "scale_lo",
                want: 2,
                got: 1
            }
        );
        assert!(std::format!("{err}").contains("scale_lo has 1 elements"));
        // f16 outputs past 65504: refused by name.
        let nd16 = norm(Arithmetic::F32, Dtype::F16);
        let d16 = Declared::new(
            nd16,
            QuantizeInput::Rounded,
            ScaledRule::Divide,
            Granularity::Tensor,
            DYN,
        )
        .unwrap();
        let (mut s1, mut s2) = ([0f32; 1], [0f32; 1]);
        let mut out = Outputs {
            v_lo: &mut a,
            v_hi: &mut b,
            code_lo: &mut c,
            code_hi: &mut e,
            scale_lo: &mut s1,
            scale_hi: &mut s2,
            residual: &mut [],
        };
        let big = [60000.0f32; 3];
        let inputs = Inputs {
            x: &x,
            residual: None,
            weight: &big,
        };
        assert_eq!(rms_norm_fp8_quant(&shape, &d16, &inputs, &mut out), Ok(()));
        let bigger = [65504.0f32, 1.0, 1.0];
        let x2 = [2.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let inputs = Inputs {
            x: &x2,
            residual: None,
            weight: &bigger,
        };
        assert_eq!(
            rms_norm_fp8_quant(&shape, &d16, &inputs, &mut out),
            Err(RmsNormQuantError::NotFinite { row: 0, col: 0 })
        );
    }
}
