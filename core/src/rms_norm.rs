//! RMSNorm and fused add + RMSNorm, as the field's kernels compute them:
//! vLLM's `rms_norm` and `fused_add_rms_norm` ops
//! (`csrc/layernorm_kernels.cu`), Hugging Face's `LlamaRMSNorm` and
//! `GemmaRMSNorm`, FlashInfer's `rmsnorm`, `fused_add_rmsnorm` and
//! `gemma_rmsnorm` (`include/flashinfer/norm.cuh`), Liger's Triton
//! `LigerRMSNorm` (`src/liger_kernel/ops/rms_norm.py`, casting modes
//! "llama" and "gemma") and `torch.nn.functional.rms_norm`.
//!
//! Shapes (elements, row-major): `x [rows][hidden]` and, for the fused
//! add, `residual [rows][hidden]`, values of the model's [`Dtype`];
//! `weight [hidden]` values of the same dtype. Outputs: the normalized
//! `[rows][hidden]` (as an interval of dtype values per element, below)
//! and, for the fused add, `residual_out [rows][hidden]` = the sum.
//!
//! The sum of squares cannot be bit-determined: every kernel reduces in
//! its own tree (threads, warps, a block reduce), and `rsqrtf` is within 2
//! ulps, not correctly rounded. So the contract is an interval with a
//! decided-bits rule. For row `i`, with `y` the row being normalized:
//!
//! 1. `RMS-ADD` (fused add only): `residual_out = R(x + residual)`, the
//!    binary32 sum rounded to the dtype (the sum of two dtype values in
//!    binary32, then one rounding: c10's `BFloat16`/`Half` `operator+=`,
//!    `__hadd2`, a binary32 add and a cast: all the same bits; the
//!    double rounding is innocuous since 24 >= 2 * 11 + 2). Decided bit for
//!    bit everywhere. `y` is that rounded sum ([`SumRounding::Dtype`]: vLLM's
//!    CUDA op, Hugging Face's `residual + hidden_states` in the model
//!    dtype) or the binary32 sum itself ([`SumRounding::F32`]: FlashInfer's
//!    `FusedAddRMSNormKernel` keeps `x` in f32 shared memory, vLLM's torch
//!    `RMSNorm.forward_static` adds in f32 and normalizes that). Without the
//!    fused add, `y = x`.
//! 2. `RMS-EPS`: `eps` is a positive normal binary32 (the caller's number
//!    rounded to nearest: vLLM's `const float epsilon`, torch 2.11's
//!    scalar in float opmath), added to the mean, inside the square root.
//! 3. `RMS-INV`: the exact inverse RMS `r* = 1 / sqrt(sum(y^2) / n + eps)`
//!    (`n = hidden`), and the binary32 values `[r_lo, r_hi]` that any
//!    binary32 evaluation of it can give under the model stated at
//!    [`Declared::inv_rms`] (any summation order, squares rounded or fused,
//!    the mean within [`MEAN_ULPS`], the eps add rounded, the reciprocal
//!    square root within `rsqrt_ulps`, with or without flush to zero).
//!    `RMS-EXACT`: where every square is a whole multiple of `2^e` and
//!    their sum is below `2^(24 + e)`, every summation order is exact and
//!    only the mean, the eps add and the reciprocal square root widen the
//!    interval (derived at [`Declared::inv_rms`]).
//! 4. `RMS-OUT`: the output element is a composition of roundings of `y *
//!    r` and the weight, named by the [`Arithmetic`] the kernel declares.
//!    Each is monotone in `r` (non-decreasing or non-increasing with the
//!    signs of `y` and `w`), so the outputs any admissible `r` gives lie
//!    between the outputs at `r_lo` and at `r_hi`.
//! 5. `RMS-FTZ`: a kernel compiled with flush to zero (nvcc
//!    `--use_fast_math`) turns each subnormal binary32 operand or result
//!    into a zero of its sign; every flush moves a value towards zero and
//!    every later step maps values towards zero to values towards zero, so
//!    the outputs of any flush pattern lie between the all-flushed and the
//!    unflushed output. The interval is the hull of both at both ends
//!    ([`Arithmetic::interval`]).
//! 6. `RMS-DECIDED`: where the interval is one value (its two ends have
//!    the same bits), the kernel's output must be that value bit for bit;
//!    elsewhere it must lie in the interval ([`admits`]). With a 16-bit
//!    dtype most elements are decided; with f32 output most are only
//!    bounded (the interval spans the f32 values of `y * r` for every
//!    admissible `r`). What this cannot decide: a conversion that rounds
//!    half away from zero (`(bits + 0x8000) >> 16`) instead of to nearest
//!    even differs from it only at a tie, and where the tied value is a
//!    rounding of `y r` (`R(y r)` of [`Arithmetic::RoundThenWeight`]; the
//!    final conversion of [`Arithmetic::F32`] and [`Arithmetic::Gemma`]),
//!    the admissible `r` next to the one that ties round to the two sides
//!    of it, so the element is bounded (or, at an end of the interval, the
//!    two roundings agree) and either rounding passes; so on the EXACT arm
//!    too, whose interval of `r` still spans a few binary32 values. Only
//!    ties of an exact product of decided values are decided (the final
//!    `R(R(y r) w)`, whose product of two 16-bit values is exact).
//! 7. `RMS-RANGE`: a row whose binary32 sum of squares could overflow is
//!    refused (the kernel's result is not defined), as is an input that is
//!    not finite, and a fused add whose normalized sum overflows (`R(x +
//!    residual)` infinite: [`RmsNormError::AddOverflow`]).
//!
//! Sources (the arithmetic each [`Arithmetic`] names is cited there): vLLM
//! `rms_norm_kernel` (`variance += x * x`, a `cub::BlockReduce` sum,
//! `rsqrtf(variance / hidden_size + epsilon)`, `((scalar_t)(x *
//! s_variance)) * weight[idx]`) and `fused_add_rms_norm_kernel` (`z +=
//! residual`, the residual written back as `z`, the variance of `(float)z`;
//! its width-8 `_f16Vec` path the same values: `temp *= s_variance`
//! converts each element to float, multiplies, converts back, then `temp
//! *= weight_v` multiplies in the dtype); Higham, *Accuracy and Stability
//! of Numerical Algorithms* (2nd ed.), §2.2 (the standard model), Lemma 3.1
//! (`gamma_k`), §4.2 (summation in any order); the CUDA C Programming
//! Guide, Mathematical Functions appendix (`rsqrtf`: 2 ulps maximum
//! error); the PTX ISA (`div.full.f32`, `div.approx.f32`: 2 ulps;
//! `rsqrt.approx.f32`: maximum relative error 2^-22.9).

use crate::compare::sqrt_f64;
/// The model's element type: [`crate::dtype::Dtype`].
pub use crate::dtype::Dtype;

/// The unit roundoff of binary32, `u = 2^-24`.
const U: f64 = 1.0 / 16_777_216.0;

/// The absolute error a binary32 operation can add by underflow: `2^-126`,
/// the smallest normal (a flush to zero loses less than it; gradual
/// underflow at most half the subnormal spacing, `2^-150`).
const ETA: f64 = f32::MIN_POSITIVE as f64;

/// The mean `sum / n` is within this many ulps (as a relative error,
/// `rho_2`, about `2^-22`): a correctly rounded division (half an ulp);
/// torch's `mean` (`mean_kernel_impl`: a float `factor =
/// float(num_outputs) / numel`, then `MeanOps` multiplies the sum by it:
/// three roundings at most, a relative error under `3 u`); PTX
/// `div.full.f32` (Triton's `/`) and `div.approx.f32` (`--use_fast_math`),
/// each within 2 ulps (PTX ISA, `div`).
pub const MEAN_ULPS: u32 = 2;

/// The default accuracy of the reciprocal square root, in ulps: CUDA's
/// `rsqrtf` (2 ulps, CUDA C Programming Guide), which `torch.rsqrt`,
/// vLLM's kernels and Triton's `tl.math.rsqrt` (libdevice `__nv_rsqrtf`)
/// call; PTX `rsqrt.approx.f32` (FlashInfer's `math::rsqrt`, relative
/// error at most 2^-22.9) and `1.0f / sqrtf(v)` (two correctly rounded
/// operations) are inside it.
pub const DEFAULT_RSQRT_ULPS: u32 = 2;

/// The most ulps a declared reciprocal square root may take.
pub const MAX_RSQRT_ULPS: u32 = 1024;

/// The longest row: `n u` must stay far below 1 for `gamma_(n-1)`.
pub const MAX_HIDDEN: usize = 1 << 20;

/// How the normalized value `y * r`, the weight `w` and the roundings make
/// an output element (rule `RMS-OUT`), with `fl` a binary32 operation
/// rounded to nearest even and `R` the rounding to the model's dtype
/// ([`Dtype::round`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    /// `R(fl(R(fl(y r)) * w))`: the normalized value rounded to the dtype,
    /// then multiplied by the weight and rounded again. vLLM's
    /// `rms_norm_kernel` and `fused_add_rms_norm_kernel`
    /// (`((scalar_t)(x * s_variance)) * weight[idx]`, a c10 operator:
    /// float product, one conversion; the `_f16Vec` path's `temp *=
    /// s_variance; temp *= weight_v` gives the same bits), vLLM's torch
    /// `RMSNorm.forward_static` (`x.to(orig_dtype)` then `x * weight`),
    /// Hugging Face's `LlamaRMSNorm` (`self.weight *
    /// hidden_states.to(input_dtype)`), Liger's casting mode "llama"
    /// (`X_row.to(X_row_dtype)` then `* (offset + W_row)` with `offset =
    /// 0`). Products of two bf16 or two f16 values are exact in binary32,
    /// so the second `fl` is exact there. In F32 this is
    /// [`Arithmetic::F32`].
    RoundThenWeight,
    /// `R(fl(fl(y r) * w))`: one rounding to the dtype at the end.
    /// FlashInfer's `RMSNormKernel` (`float(input_vec[j]) * rms_rcp *
    /// (weight_bias + float(weight_vec[j]))`, `weight_bias = 0`), torch
    /// 2.11's CUDA `_fused_rms_norm` (`gamma * (rstd_val * x)` in float,
    /// cast once; its composite `rms_norm_composite` the same,
    /// `.mul(weight)` in opmath then `type_as(input)`), and
    /// `(x * rsqrt(..) * weight).to(dtype)` written in torch. Earlier torch
    /// differs: torch 2.4's `rms_norm` composite did
    /// `upcasted_input.mul(rqrst_input).type_as(input)`, then the weight in
    /// the input dtype ([`Arithmetic::RoundThenWeight`]).
    F32,
    /// `R(fl(fl(y r) * fl(1 + w)))`: Gemma's weight, stored as an offset
    /// from 1, in binary32, one rounding at the end. Hugging Face's
    /// `GemmaRMSNorm` (`output * (1.0 + self.weight.float())`, then
    /// `type_as(x)`), FlashInfer's `gemma_rmsnorm` (the same kernel with
    /// `weight_bias = 1`), Liger's casting mode "gemma" with `offset = 1`
    /// (`X_row * rstd * (offset + W_row)` in float32).
    Gemma,
}

impl Arithmetic {
    /// Every arithmetic, in the order identification reports them. No
    /// source multiplies `r` and `w` first (FlashInfer, Liger, torch and
    /// vLLM all multiply `y r` first), so `y (r w)` is not among them; nor
    /// is Liger's casting mode "none", which squares and sums in the model
    /// dtype (outside rule `RMS-INV`'s binary32 model: it fails as a sum
    /// of squares in bf16 or f16 does).
    pub const ALL: [Arithmetic; 3] = [
        Arithmetic::RoundThenWeight,
        Arithmetic::F32,
        Arithmetic::Gemma,
    ];

    /// The name a check takes: `"round_then_weight"`, `"f32"`, `"gemma"`.
    pub const fn name(self) -> &'static str {
        match self {
            Arithmetic::RoundThenWeight => "round_then_weight",
            Arithmetic::F32 => "f32",
            Arithmetic::Gemma => "gemma",
        }
    }

    /// One output element at one binary32 `r` (rule `RMS-OUT`): `y` the
    /// normalized row's element (a dtype value, or a binary32 sum under
    /// [`SumRounding::F32`]), `w` the weight (a dtype value); with `flush`,
    /// every binary32 operand and result below `2^-126` in magnitude
    /// becomes a zero of its sign first (rule `RMS-FTZ`).
    pub fn output(self, dtype: Dtype, y: f32, r: f32, w: f32, flush: bool) -> f32 {
        dtype.round(self.unrounded(dtype, y, r, w, flush))
    }

    /// [`Arithmetic::output`] before its final rounding to the dtype: the
    /// binary32 value `fl(R(fl(y r)) * w)`, `fl(fl(y r) * w)` or `fl(fl(y
    /// r) * fl(1 + w))` (flushed as `output` flushes it). What a fused
    /// kernel hands its next step when it keeps the float32 product (an
    /// FP8 quantizer: `oracle::rms_norm_fp8_quant`). Monotone in `r` as
    /// `output` is (rule `RMS-OUT`); in F32 the two are one.
    pub fn unrounded(self, dtype: Dtype, y: f32, r: f32, w: f32, flush: bool) -> f32 {
        let f = |v: f32| if flush { flush_subnormal(v) } else { v };
        let (y, w) = (f(y), f(w));
        let a = f(y * r);
        match self {
            Arithmetic::RoundThenWeight => f(dtype.round(a) * w),
            Arithmetic::F32 => f(a * w),
            Arithmetic::Gemma => f(a * f(1.0 + w)),
        }
    }

    /// The interval `(lo, hi)` of outputs an admissible `r` gives (rules
    /// `RMS-OUT`, `RMS-FTZ`): the least and the greatest of
    /// [`Arithmetic::output`] at `r.lo` and `r.hi`, each with and without
    /// flush to zero. Both ends are dtype values; when their bits are the
    /// same, the element is decided.
    pub fn interval(self, dtype: Dtype, y: f32, r: InvRms, w: f32) -> (f32, f32) {
        hull(|r, flush| self.output(dtype, y, r, w, flush), r)
    }

    /// The interval of [`Arithmetic::unrounded`] values an admissible `r`
    /// gives, as [`Arithmetic::interval`] takes it (binary32 values: under
    /// `F32` and `Gemma` a few binary32 ulps apart, one value only where
    /// `y` or `w` is zero; under `RoundThenWeight` with a 16-bit dtype one
    /// value wherever `R(y r)` is decided, the product of two 16-bit
    /// values being exact).
    pub fn unrounded_interval(self, dtype: Dtype, y: f32, r: InvRms, w: f32) -> (f32, f32) {
        hull(|r, flush| self.unrounded(dtype, y, r, w, flush), r)
    }
}

/// The least and the greatest of `at(r, flush)` at both ends of `r`,
/// with and without flush to zero.
fn hull(at: impl Fn(f32, bool) -> f32, r: InvRms) -> (f32, f32) {
    let v = [
        at(r.lo, false),
        at(r.hi, false),
        at(r.lo, true),
        at(r.hi, true),
    ];
    let (mut lo, mut hi) = (v[0], v[0]);
    for &o in &v[1..] {
        if o < lo {
            lo = o;
        }
        if o > hi {
            hi = o;
        }
    }
    (lo, hi)
}

/// `v`, or a zero with `v`'s sign when `v` is a binary32 subnormal (what
/// an FTZ operation reads or writes: PTX `.ftz`).
pub fn flush_subnormal(v: f32) -> f32 {
    if v.abs() < f32::MIN_POSITIVE {
        f32::from_bits(v.to_bits() & 0x8000_0000)
    } else {
        v
    }
}

/// What the fused add normalizes (rule `RMS-ADD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SumRounding {
    /// The sum rounded to the dtype, the residual output itself: vLLM's
    /// `fused_add_rms_norm` (`z += residual[...]`, `variance += x * x`
    /// with `x = (float)z`, then `(float)residual[...]` normalized), Hugging
    /// Face's decoder layers (`hidden_states = residual + hidden_states` in
    /// the model dtype, then the norm), Liger's `LigerFusedAddRMSNorm`
    /// (`S_row = X_row + R_row` in the dtype).
    Dtype,
    /// The binary32 sum, unrounded: FlashInfer's `FusedAddRMSNormKernel`
    /// (`x = float(input) + float(residual)`, `residual = (T)x`, `x` kept
    /// in shared memory for the variance and the output), vLLM's torch
    /// `RMSNorm.forward_static` (`x = x.to(float32) + residual`, `residual
    /// = x.to(orig_dtype)`, the variance of `x`). In F32 both are one.
    F32,
}

impl SumRounding {
    /// Both, in the order identification reports them.
    pub const ALL: [SumRounding; 2] = [SumRounding::Dtype, SumRounding::F32];

    /// `"dtype"` or `"f32"`.
    pub const fn name(self) -> &'static str {
        match self {
            SumRounding::Dtype => "dtype",
            SumRounding::F32 => "f32",
        }
    }

    /// The value normalized for input `x` and residual `res` (dtype
    /// values): `R(fl(x + res))` or `fl(x + res)`.
    pub fn normed(self, dtype: Dtype, x: f32, res: f32) -> f32 {
        let s = x + res;
        match self {
            SumRounding::Dtype => dtype.round(s),
            SumRounding::F32 => s,
        }
    }
}

/// The residual output of the fused add (rule `RMS-ADD`): `R(fl(x +
/// res))`. Decided bit for bit; the check's data never make the binary32
/// sum subnormal (which an FTZ kernel would flush).
pub fn residual_out(dtype: Dtype, x: f32, res: f32) -> f32 {
    dtype.round(x + res)
}

/// Whether a kernel's output bits `got` (of `dtype`, widened to 32) are
/// admitted by the interval `(lo, hi)` (rule `RMS-DECIDED`): the bits of
/// `lo` when `lo` and `hi` have the same bits (a NaN is never admitted),
/// else a value with `lo <= got <= hi`.
pub fn admits(dtype: Dtype, lo: f32, hi: f32, got: u32) -> bool {
    if lo.to_bits() == hi.to_bits() {
        !lo.is_nan() && dtype.encode(lo) == got
    } else {
        let g = dtype.decode(got);
        lo <= g && g <= hi
    }
}

/// The binary32 inverse RMS values `[lo, hi]` a kernel may hold for a row
/// (rule `RMS-INV`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InvRms {
    /// The least admissible binary32 `r`.
    pub lo: f32,
    /// The greatest admissible binary32 `r`.
    pub hi: f32,
}

/// A shape, a declaration or an input that cannot be computed. Displays
/// as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RmsNormError {
    /// `rows` or `hidden` is 0.
    Zero {
        /// `"rows"` or `"hidden"`.
        dim: &'static str,
    },
    /// `hidden` is over [`MAX_HIDDEN`].
    Hidden {
        /// The row length.
        hidden: usize,
    },
    /// A buffer length overflows `usize`.
    Overflow,
    /// `eps` is not a positive normal binary32 (rule `RMS-EPS`).
    Eps {
        /// The value given.
        eps: f32,
    },
    /// `rsqrt_ulps` is 0 or over [`MAX_RSQRT_ULPS`].
    RsqrtUlps {
        /// The value given.
        ulps: u32,
    },
    /// A buffer has the wrong number of elements.
    Len {
        /// `"x"`, `"residual"`, `"weight"`, `"out_lo"`, `"out_hi"` or
        /// `"residual_out"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// An input element is NaN or infinite (rule `RMS-RANGE`).
    NonFinite {
        /// `"x"`, `"residual"` or `"weight"`.
        arg: &'static str,
        /// Its index, row-major.
        index: usize,
    },
    /// A row's binary32 sum of squares (or its mean plus eps) could
    /// overflow (rule `RMS-RANGE`).
    Range {
        /// The row.
        row: usize,
    },
    /// The fused add's sum, as normalized ([`SumRounding::normed`]: `R(x +
    /// residual)`, or the binary32 sum), overflows to infinity for finite
    /// inputs (rule `RMS-RANGE`): the row normalized is not finite.
    AddOverflow {
        /// The row.
        row: usize,
        /// The first column whose sum overflows.
        col: usize,
    },
}

impl core::fmt::Display for RmsNormError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RmsNormError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            RmsNormError::Hidden { hidden } => {
                write!(f, "hidden {hidden} is over the contract's {MAX_HIDDEN}")
            }
            RmsNormError::Overflow => write!(f, "a buffer length overflows usize"),
            RmsNormError::Eps { eps } => write!(
                f,
                "eps {eps:e}: it must be a positive normal float32 (at least 2^-126, finite)"
            ),
            RmsNormError::RsqrtUlps { ulps } => write!(
                f,
                "rsqrt_ulps {ulps}: it must be from 1 to {MAX_RSQRT_ULPS}"
            ),
            RmsNormError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            RmsNormError::NonFinite { arg, index } => {
                write!(f, "{arg}[{index}] is not finite")
            }
            RmsNormError::Range { row } => write!(
                f,
                "row {row}: its float32 sum of squares could overflow (the kernel's result is not defined)"
            ),
            RmsNormError::AddOverflow { row, col } => write!(
                f,
                "row {row}, col {col}: the fused add's x + residual overflows to infinity as normalized (the kernel's result is not defined)"
            ),
        }
    }
}

/// The dimensions of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    rows: usize,
    hidden: usize,
}

impl Shape {
    /// `rows` and `hidden` at least 1, `hidden` at most [`MAX_HIDDEN`],
    /// `rows * hidden * 4` within `usize`.
    ///
    /// # Errors
    /// [`RmsNormError::Zero`], [`RmsNormError::Hidden`],
    /// [`RmsNormError::Overflow`].
    pub fn new(rows: usize, hidden: usize) -> Result<Shape, RmsNormError> {
        if rows == 0 {
            return Err(RmsNormError::Zero { dim: "rows" });
        }
        if hidden == 0 {
            return Err(RmsNormError::Zero { dim: "hidden" });
        }
        if hidden > MAX_HIDDEN {
            return Err(RmsNormError::Hidden { hidden });
        }
        if rows
            .checked_mul(hidden)
            .and_then(|n| n.checked_mul(4))
            .is_none()
        {
            return Err(RmsNormError::Overflow);
        }
        Ok(Shape { rows, hidden })
    }

    /// Rows (tokens).
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Elements per row (`n`).
    pub fn hidden(&self) -> usize {
        self.hidden
    }
    /// `rows * hidden`.
    pub fn len(&self) -> usize {
        self.rows * self.hidden
    }
    /// Never: a shape has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What a kernel declares: its [`Arithmetic`], what its fused add
/// normalizes ([`SumRounding`], unused without the fused add), the dtype,
/// `eps` and the accuracy of its reciprocal square root.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Declared {
    arithmetic: Arithmetic,
    sum: SumRounding,
    dtype: Dtype,
    eps: f32,
    rsqrt_ulps: u32,
}

impl Declared {
    /// A declaration; `eps` a positive normal binary32, `rsqrt_ulps` from
    /// 1 to [`MAX_RSQRT_ULPS`].
    ///
    /// # Errors
    /// [`RmsNormError::Eps`], [`RmsNormError::RsqrtUlps`].
    pub fn new(
        arithmetic: Arithmetic,
        sum: SumRounding,
        dtype: Dtype,
        eps: f32,
        rsqrt_ulps: u32,
    ) -> Result<Declared, RmsNormError> {
        if !(eps.is_finite() && eps >= f32::MIN_POSITIVE) {
            return Err(RmsNormError::Eps { eps });
        }
        if rsqrt_ulps == 0 || rsqrt_ulps > MAX_RSQRT_ULPS {
            return Err(RmsNormError::RsqrtUlps { ulps: rsqrt_ulps });
        }
        Ok(Declared {
            arithmetic,
            sum,
            dtype,
            eps,
            rsqrt_ulps,
        })
    }

    /// The arithmetic.
    pub fn arithmetic(&self) -> Arithmetic {
        self.arithmetic
    }
    /// What the fused add normalizes.
    pub fn sum(&self) -> SumRounding {
        self.sum
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// `eps`.
    pub fn eps(&self) -> f32 {
        self.eps
    }
    /// The reciprocal square root's accuracy in ulps.
    pub fn rsqrt_ulps(&self) -> u32 {
        self.rsqrt_ulps
    }

    /// The binary32 values `r` any admissible evaluation of the row's
    /// inverse RMS gives (rule `RMS-INV`); `None` when the row holds a
    /// value that is not finite or its sum of squares could overflow
    /// binary32 (rule `RMS-RANGE`).
    ///
    /// The model. Let `u = 2^-24`, `eta = 2^-126`, `y_1 .. y_n` the row
    /// (binary32 values), `S = sum y_i^2` exactly. A kernel, in binary32,
    /// each operation rounded to nearest (or flushed to a zero when its
    /// operand or result is subnormal), in any order:
    ///
    /// 1. squares: `t_i` is `fl(y_i * y_i)`, or `y_i * y_i` unrounded as the
    ///    addend of an FMA: `t_i` in `[y_i^2 (1 - u) - eta, y_i^2 (1 + u) +
    ///    eta]` (the standard model, Higham §2.2; `eta` bounds an underflow:
    ///    gradual underflow errs by at most `2^-150`, a flush by less than
    ///    `2^-126`). bf16 and f16 squares are exact but for underflow.
    /// 2. the sum of the `n` non-negative `t_i` over any binary tree
    ///    (sequential, pairwise, per thread then warp shuffles then a block
    ///    reduce; adding a zero lane is exact): each addition gives `(a +
    ///    b)(1 + d)`, `|d| <= u`, or a flushed zero below `2^-126`. By
    ///    induction over the tree (Higham §4.2 with non-negative terms),
    ///    `T (1 - u)^(n-1) - (n - 1) eta <= S^ <= T (1 + u)^(n-1)`, `T =
    ///    sum t_i`, with `(1 + u)^(n-1) <= 1 + gamma_(n-1)`, `gamma_k = k u
    ///    / (1 - k u)` (Higham Lemma 3.1) and `(1 - u)^(n-1) >= 1 - (n - 1)
    ///    u`.
    /// 3. the mean `S^ / n` within [`MEAN_ULPS`] ulps; `k` ulps is a
    ///    relative error of at most `rho_k = k 2^-23 + k^2 2^-45` (`ulp(z)
    ///    <= 2^-23 |z|` for a normal `z`, so `|c - e| <= k ulp(c)` gives
    ///    `|c - e| <= x / (1 - x) |e|` with `x = k 2^-23`, and `x / (1 - x)
    ///    <= x + 2 x^2`), plus `eta` for a subnormal or flushed mean.
    /// 4. `fl(mean + eps)`: relative error `u`; never subnormal (`eps >=
    ///    2^-126`).
    /// 5. the reciprocal square root of that within `rsqrt_ulps`: relative
    ///    error `rho_(rsqrt_ulps)` (the result is normal).
    ///
    /// So `r^` lies in `[(1 - rho) / sqrt(v_hi), (1 + rho) / sqrt(v_lo)]`
    /// with `[v_lo, v_hi]` the range steps 1 to 4 leave. The bounds are
    /// computed soundly: `S` in binary64 with every addition's result moved
    /// one binary64 ulp outward (`next_up` for the upper sum, `next_down`
    /// for the lower; each `y_i^2` is exact in binary64: a 48-bit product,
    /// exponents from `-298` to `256`), each later step likewise; then
    /// `lo` is the least binary32 `r` with `r^2 v_hi >= (1 - rho)^2` and
    /// `hi` the greatest with `r^2 v_lo <= (1 + rho)^2`, both decided by
    /// exact integer comparison. The binary64 slack widens the interval by
    /// a relative `2^-40` or so, far below a binary32 ulp.
    ///
    /// Rule `RMS-EXACT`: where the row's squares make every sum exact,
    /// steps 1 and 2 add no error and the kernel's sum is `S` itself.
    /// Let every non-zero `y_i^2` be at least `2^-126`, `e` the least
    /// exponent of the last set bit of a non-zero `y_i^2` (so every `y_i^2`
    /// is a whole multiple of `2^e`), and `S < 2^(24 + e)`. Then every value
    /// a kernel's sum can hold, in any order, is exact:
    ///
    /// - a square `y_i^2`, a partial sum of any subset of the squares (any
    ///   tree), or an FMA's `y_i * y_i + acc` with `acc` such a partial sum,
    ///   is a whole multiple of `2^e` (a sum of multiples of `2^e`), not
    ///   negative, and at most `S` (the terms are not negative);
    /// - so it is `k 2^e` with `0 <= k < 2^24`: its set bits lie between
    ///   `2^e` and `2^(23 + e)`, at most 24 significant bits;
    /// - it is 0 or at least `2^-126` (it holds a non-zero square), so
    ///   normal: with 24 significant bits it is a binary32 value (below
    ///   `2^128`: a row whose `S` reaches `f32::MAX` is refused), no
    ///   rounding changes it and no flush to zero applies (nor to `y_i`:
    ///   `|y_i| >= 2^-63`).
    ///
    /// So `S^ = S` for every summation order, with or without FMA, and
    /// `[v_lo, v_hi]` comes from steps 3 to 5 alone: the mean within
    /// [`MEAN_ULPS`], the eps add, the reciprocal square root. `S` is then
    /// computed exactly (each binary64 partial sum is such a value too); the
    /// condition is tested on the outward-rounded upper sum (`S <= s_hi <
    /// 2^(24 + e)`), by exact integer comparison. A row that misses it (a
    /// square below `2^-126`, which a flush would lose; `S >= 2^(24 + e)`,
    /// where some order rounds) takes the general bound. Rows of small
    /// integers times a power of two (`|m| <= floor(sqrt((2^24 - 1) /
    /// n))`) meet it: the case library's EXACT arm; there the interval is
    /// a few binary32 ulps of `r` wide at any `n`, where the general bound
    /// spans about `(n/2) 2^-24` relative (a mean over `n - 1`, or one
    /// element left out of the sum, falls inside that at `n >= 4096`).
    ///
    /// Outside the model: torch's CUDA `_fused_rms_norm` (torch 2.11) on
    /// its non-vectorized path (`hidden` not a multiple of 4, or unaligned
    /// tensors) takes `m2 + m1 * m1` from Welford's update
    /// (`RowwiseMomentsCUDAKernel`), not a sum of squares; its error is of
    /// the same order as a sum's but not derived here, and where
    /// `RMS-EXACT` holds it may fall outside the interval.
    pub fn inv_rms(&self, y: &[f32]) -> Option<InvRms> {
        self.inv_rms_of(y.len(), y.iter().copied())
    }

    /// [`Declared::inv_rms`] of the `n` values `y` yields (a row computed
    /// on the fly, as the fused add's normalized sum: no buffer needed).
    pub fn inv_rms_of(&self, n: usize, y: impl Iterator<Item = f32>) -> Option<InvRms> {
        // The exact sum of squares, bounded in binary64 (`s_lo`, `s_hi`),
        // and as summed (`s`, exact under `RMS-EXACT`); the least exponent
        // of a square's last set bit, and whether every square is normal.
        let (mut s_lo, mut s_hi, mut s) = (0f64, 0f64, 0f64);
        let (mut e, mut normal) = (i32::MAX, true);
        for v in y {
            if !v.is_finite() {
                return None;
            }
            let t = f64::from(v) * f64::from(v);
            if t != 0.0 {
                s_lo = (s_lo + t).next_down();
                s_hi = (s_hi + t).next_up();
                s += t;
                normal &= t >= ETA;
                e = e.min(dyadic(t).1);
            }
        }
        // Rule `RMS-EXACT`: S <= s_hi < 2^(24 + e).
        let exact = normal
            && (s_hi == 0.0 || {
                let (m, es) = dyadic(s_hi);
                cmp_dyadic(m, es, 1, 24 + e) == core::cmp::Ordering::Less
            });
        let nf = n as f64;
        let (b_lo, b_hi) = if exact {
            (s, s)
        } else {
            let k = nf - 1.0;
            // Step 1: the squares.
            let a_lo = ((s_lo * (1.0 - U)).next_down() - nf * ETA).next_down();
            let a_hi = ((s_hi * (1.0 + U)).next_up() + nf * ETA).next_up();
            // Step 2: the sum (k u and 1 - k u are exact: n < 2^24).
            let gamma = ((k * U) / (1.0 - k * U)).next_up();
            let b_lo = (((a_lo * (1.0 - k * U)).next_down() - k * ETA).next_down()).max(0.0);
            (b_lo, (a_hi * (1.0 + gamma).next_up()).next_up())
        };
        if b_hi >= f64::from(f32::MAX) {
            return None;
        }
        // Step 3: the mean.
        let rho_m = ulps_rel(MEAN_ULPS);
        let m_lo = (((b_lo / nf).next_down() * (1.0 - rho_m)).next_down() - ETA)
            .next_down()
            .max(0.0);
        let m_hi = (((b_hi / nf).next_up() * (1.0 + rho_m)).next_up() + ETA).next_up();
        // Step 4: the eps add.
        let eps = f64::from(self.eps);
        let v_lo = ((m_lo + eps).next_down() * (1.0 - U)).next_down();
        let v_hi = ((m_hi + eps).next_up() * (1.0 + U)).next_up();
        if v_hi >= f64::from(f32::MAX) {
            return None;
        }
        // Step 5: the reciprocal square root.
        let rho = ulps_rel(self.rsqrt_ulps);
        Some(InvRms {
            lo: extreme_r(v_hi, 1.0 - rho, true),
            hi: extreme_r(v_lo, 1.0 + rho, false),
        })
    }

    /// One row normalized (rules `RMS-INV`, `RMS-OUT`): `lo[j]`, `hi[j]`
    /// the interval of output `j` for `y` (the normalized row) and
    /// `weight`; returns the row's [`InvRms`], `None` as
    /// [`Declared::inv_rms`] (nothing written then).
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn norm_row(
        &self,
        y: &[f32],
        weight: &[f32],
        lo: &mut [f32],
        hi: &mut [f32],
    ) -> Option<InvRms> {
        assert!(
            y.len() == weight.len() && y.len() == lo.len() && y.len() == hi.len(),
            "one length"
        );
        let r = self.inv_rms(y)?;
        for j in 0..y.len() {
            let (l, h) = self.arithmetic.interval(self.dtype, y[j], r, weight[j]);
            lo[j] = l;
            hi[j] = h;
        }
        Some(r)
    }
}

/// `rho_k = k 2^-23 + k^2 2^-45`, exact in binary64 for `k <= 2^10` (33
/// significant bits at most).
fn ulps_rel(k: u32) -> f64 {
    let k = f64::from(k);
    k / 8_388_608.0 + k * k / 35_184_372_088_832.0
}

/// A positive finite binary64 `v` as `m * 2^e` with `m` odd (or 0).
fn dyadic(v: f64) -> (u128, i32) {
    let bits = v.to_bits();
    let field = ((bits >> 52) & 0x7FF) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    let (m, e) = if field == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), field - 1075)
    };
    if m == 0 {
        return (0, 0);
    }
    let tz = m.trailing_zeros();
    (u128::from(m >> tz), e + tz as i32)
}

/// The sign of `a 2^ea - b 2^eb` for positive `a`, `b`, exactly.
fn cmp_dyadic(a: u128, ea: i32, b: u128, eb: i32) -> core::cmp::Ordering {
    let la = 128 - a.leading_zeros() as i32 + ea;
    let lb = 128 - b.leading_zeros() as i32 + eb;
    if la != lb {
        return la.cmp(&lb);
    }
    // Same leading position: shifting the one with the larger exponent
    // left by the difference gives it the other's bit length (<= 128).
    if ea >= eb {
        (a << (ea - eb)).cmp(&b)
    } else {
        a.cmp(&(b << (eb - ea)))
    }
}

/// The sign of `r^2 v - t^2`, exactly (`r`, `v`, `t` positive finite; `r`
/// a binary32 value, so `r^2 v` has at most 24 * 2 + 53 bits).
fn cmp_r2v(r: f32, v: f64, t: f64) -> core::cmp::Ordering {
    let (mr, er) = dyadic(f64::from(r));
    let (mv, ev) = dyadic(v);
    let (mt, et) = dyadic(t);
    cmp_dyadic(mr * mr * mv, 2 * er + ev, mt * mt, 2 * et)
}

/// The extreme binary32 `r > 0` on the admissible side of `r^2 v = t^2`:
/// with `least`, the least `r` with `r^2 v >= t^2`; else the greatest
/// with `r^2 v <= t^2`. The binary64 guess is within an ulp or two; the
/// exact comparison moves it to the boundary.
fn extreme_r(v: f64, t: f64, least: bool) -> f32 {
    // The side that fails, the step outward, the step back.
    type Step = fn(f32) -> f32;
    let (bad, out, back): (_, Step, Step) = if least {
        (core::cmp::Ordering::Less, f32::next_down, f32::next_up)
    } else {
        (core::cmp::Ordering::Greater, f32::next_up, f32::next_down)
    };
    let ok = |r: f32| cmp_r2v(r, v, t) != bad;
    let mut r = (t / sqrt_f64(v)) as f32;
    while ok(out(r)) {
        r = out(r);
    }
    while !ok(r) {
        r = back(r);
    }
    r
}

/// The inputs of [`rms_norm`] (layouts in the module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `[rows][hidden]` dtype values.
    pub x: &'a [f32],
    /// `[rows][hidden]` dtype values: the fused add's residual; `None`
    /// without the fused add.
    pub residual: Option<&'a [f32]>,
    /// `[hidden]` dtype values.
    pub weight: &'a [f32],
}

/// The outputs of [`rms_norm`]: each element's interval and the fused
/// add's residual output.
#[derive(Debug)]
pub struct Outputs<'a> {
    /// `[rows][hidden]`: the least admissible output.
    pub lo: &'a mut [f32],
    /// `[rows][hidden]`: the greatest admissible output.
    pub hi: &'a mut [f32],
    /// `[rows][hidden]` with the fused add (rule `RMS-ADD`), empty
    /// without.
    pub residual: &'a mut [f32],
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), RmsNormError> {
    if want == got {
        Ok(())
    } else {
        Err(RmsNormError::Len { arg, want, got })
    }
}

/// Checks the lengths (`x`, `residual`, `weight`, then the outputs
/// `out_lo`, `out_hi`, `residual_out` of the given lengths) and that every
/// input element is finite.
///
/// # Errors
/// [`RmsNormError::Len`] naming the first wrong buffer, then
/// [`RmsNormError::NonFinite`] naming the first bad element.
pub fn check_inputs(shape: &Shape, x: &Inputs<'_>, out: [usize; 3]) -> Result<(), RmsNormError> {
    let n = shape.len();
    len("x", n, x.x.len())?;
    if let Some(res) = x.residual {
        len("residual", n, res.len())?;
    }
    len("weight", shape.hidden, x.weight.len())?;
    len("out_lo", n, out[0])?;
    len("out_hi", n, out[1])?;
    len(
        "residual_out",
        if x.residual.is_some() { n } else { 0 },
        out[2],
    )?;
    for (arg, v) in [
        ("x", x.x),
        ("residual", x.residual.unwrap_or(&[])),
        ("weight", x.weight),
    ] {
        if let Some(index) = v.iter().position(|e| !e.is_finite()) {
            return Err(RmsNormError::NonFinite { arg, index });
        }
    }
    Ok(())
}

/// RMSNorm, or fused add + RMSNorm when `x.residual` is given, row by row
/// (rules `RMS-*` in the module documentation): per row, the residual
/// output (`RMS-ADD`), the normalized row `y` ([`SumRounding::normed`]),
/// its [`InvRms`] ([`Declared::inv_rms`]) and each element's interval
/// ([`Arithmetic::interval`]).
///
/// # Errors
/// As [`check_inputs`], then, for the first row that has one,
/// [`RmsNormError::AddOverflow`] for a fused add whose normalized sum is
/// infinite, or [`RmsNormError::Range`] for a sum of squares that could
/// overflow; the rows before it are written.
pub fn rms_norm(
    shape: &Shape,
    d: &Declared,
    x: &Inputs<'_>,
    out: &mut Outputs<'_>,
) -> Result<(), RmsNormError> {
    check_inputs(shape, x, [out.lo.len(), out.hi.len(), out.residual.len()])?;
    let h = shape.hidden;
    for row in 0..shape.rows {
        let at = row * h;
        let xs = &x.x[at..at + h];
        let r = match x.residual {
            None => d.inv_rms(xs),
            Some(res) => {
                let rs = &res[at..at + h];
                for j in 0..h {
                    out.residual[at + j] = residual_out(d.dtype, xs[j], rs[j]);
                }
                if let Some(col) =
                    (0..h).find(|&j| !d.sum.normed(d.dtype, xs[j], rs[j]).is_finite())
                {
                    return Err(RmsNormError::AddOverflow { row, col });
                }
                let y = (0..h).map(|j| d.sum.normed(d.dtype, xs[j], rs[j]));
                d.inv_rms_of(h, y)
            }
        }
        .ok_or(RmsNormError::Range { row })?;
        for j in 0..h {
            let y = match x.residual {
                None => xs[j],
                Some(res) => d.sum.normed(d.dtype, xs[j], res[at + j]),
            };
            let (l, hi) = d.arithmetic.interval(d.dtype, y, r, x.weight[j]);
            out.lo[at + j] = l;
            out.hi[at + j] = hi;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
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

    fn declared(dtype: Dtype, eps: f32) -> Declared {
        Declared::new(
            Arithmetic::RoundThenWeight,
            SumRounding::Dtype,
            dtype,
            eps,
            2,
        )
        .unwrap()
    }

    /// The binary32 `r` a kernel computes from its sum `s`: a correctly
    /// rounded division by `n` (or a multiplication by `fl(1/n)`), the eps
    /// add, then `1 / sqrt` correctly rounded, moved `nudge` ulps.
    fn kernel_r(s: f32, n: usize, eps: f32, reciprocal: bool, nudge: i32) -> f32 {
        let m = if reciprocal {
            s * (1.0 / n as f32)
        } else {
            s / n as f32
        };
        let mut r = 1.0 / crate::gdn::sqrt::sqrt(m + eps);
        for _ in 0..nudge.unsigned_abs() {
            r = if nudge > 0 {
                r.next_up()
            } else {
                r.next_down()
            };
        }
        r
    }

    /// The pairwise sum: halves, recursively.
    fn tree(v: &[f32]) -> f32 {
        if v.len() == 1 {
            return v[0];
        }
        let h = v.len() / 2;
        tree(&v[..h]) + tree(&v[h..])
    }

    /// A sum over a binary tree split at random points.
    fn random_tree(v: &[f32], next: &mut impl FnMut() -> f32) -> f32 {
        if v.len() == 1 {
            return v[0];
        }
        let h = 1 + ((next() * (v.len() - 1) as f32) as usize).min(v.len() - 2);
        random_tree(&v[..h], next) + random_tree(&v[h..], next)
    }

    fn inside(b: InvRms, r: f32) -> bool {
        b.lo <= r && r <= b.hi
    }

    #[test]
    fn rms_inv_holds_every_summation_order() {
        let mut next = lcg(7);
        let eps = 1e-6f32;
        let d = declared(Dtype::F32, eps);
        for &n in &[1usize, 2, 7, 129, 1000, 4097] {
            let y: Vec<f32> = (0..n).map(|_| (next() - 0.5) * 4.0).collect();
            let b = d.inv_rms(&y).unwrap();
            let sq: Vec<f32> = y.iter().map(|v| v * v).collect();
            let mut orders: Vec<Vec<f32>> = vec![sq.clone()];
            let mut rev = sq.clone();
            rev.reverse();
            orders.push(rev);
            let mut asc = sq.clone();
            asc.sort_by(|a, b| a.partial_cmp(b).unwrap());
            orders.push(asc.clone());
            asc.reverse();
            orders.push(asc);
            for o in &orders {
                // Sequential.
                let s = o.iter().fold(0f32, |a, &t| a + t);
                // FMA-fused squares, sequential.
                let f = y.iter().fold(0f32, |a, &v| crate::fma::fma_f32(v, v, a));
                // A tree split at random points.
                let rt = random_tree(o, &mut next);
                for sum in [s, tree(o), f, rt] {
                    for rec in [false, true] {
                        for nudge in -1..=1 {
                            let r = kernel_r(sum, n, eps, rec, nudge);
                            assert!(inside(b, r), "n {n}: {r} outside {b:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn rms_inv_holds_the_adversarial_order_and_is_nearly_tight() {
        // 1.0 first, then terms just over half an ulp of the running sum:
        // every addition rounds up, the sequential sum's error is about
        // (n - 1) u, near gamma_(n-1) (Higham §4.2's worst case).
        let t = 2f32.powi(-12) * (1.0 + 2f32.powi(-11));
        for &n in &[2usize, 129, 4097, 65537] {
            let mut y = vec![t; n];
            y[0] = 1.0;
            let d = declared(Dtype::F32, 1e-6);
            let b = d.inv_rms(&y).unwrap();
            let s = y.iter().fold(0f32, |a, &v| a + v * v);
            let exact: f64 = y.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            let err = (f64::from(s) - exact) / exact;
            assert!(
                err > 0.9 * (n - 1) as f64 * U / (1.0 + (n - 1) as f64 * U),
                "{err}"
            );
            for nudge in -2..=2 {
                let r = kernel_r(s, n, 1e-6, false, nudge);
                assert!(inside(b, r), "n {n} nudge {nudge}: {r} outside {b:?}");
            }
            // Not vacuous: the interval is within a few times the
            // adversarial error.
            let width = f64::from(b.hi) / f64::from(b.lo) - 1.0;
            let want = (n - 1) as f64 * U + 8.0 * U;
            assert!(width < 2.5 * want, "n {n}: width {width:e}, {want:e}");
        }
    }

    #[test]
    fn rms_inv_holds_under_flush_to_zero_and_underflow() {
        // Squares below 2^-126 (subnormal, or flushed), a mean that
        // underflows: eps dominates, r stays admissible either way.
        let eps = f32::MIN_POSITIVE * 4.0;
        let d = declared(Dtype::F32, eps);
        for scale in [1e-20f32, 1e-19, 3e-19, 1e-18, 1e-30, 1e-40] {
            let y: Vec<f32> = (0..100).map(|i| scale * (1.0 + i as f32 / 7.0)).collect();
            let b = d.inv_rms(&y).unwrap();
            for flush in [false, true] {
                let f = |v: f32| if flush { flush_subnormal(v) } else { v };
                let s = y.iter().fold(0f32, |a, &v| f(a + f(f(v) * f(v))));
                let m = f(s / 100.0);
                let r = 1.0 / crate::gdn::sqrt::sqrt(m + eps);
                assert!(inside(b, r), "{scale:e} {flush}: {r} outside {b:?}");
            }
        }
    }

    /// The four binary32 values within 2 ulps of `1 / sqrt(v)` at the
    /// extremes: one below its lower binary32 neighbour, the neighbours,
    /// one above the upper (decided exactly: `r^2 v` against 1).
    fn rsqrt_within_2_ulps(v: f32) -> [f32; 4] {
        let below = extreme_r(f64::from(v), 1.0, false);
        let above = extreme_r(f64::from(v), 1.0, true);
        [below.next_down(), below, above, above.next_up()]
    }

    /// Every binary32 sum of the squares of `y` in the orders a kernel may
    /// take: sequential, reversed, ascending, descending, pairwise, three
    /// random trees, and sequential with each square fused into the add.
    fn sums_in_every_order(y: &[f32], next: &mut impl FnMut() -> f32) -> Vec<f32> {
        let sq: Vec<f32> = y.iter().map(|v| v * v).collect();
        let seq = |v: &[f32]| v.iter().fold(0f32, |a, &t| a + t);
        let mut rev = sq.clone();
        rev.reverse();
        let mut asc = sq.clone();
        asc.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut desc = asc.clone();
        desc.reverse();
        let mut out = vec![seq(&sq), seq(&rev), seq(&asc), seq(&desc), tree(&sq)];
        for _ in 0..3 {
            out.push(random_tree(&sq, next));
        }
        out.push(y.iter().fold(0f32, |a, &v| crate::fma::fma_f32(v, v, a)));
        out
    }

    /// The `r` of every admissible kernel form from the sum `s`: the mean
    /// as `s / n` or `s * fl(1 / n)`, the eps add, and each of
    /// [`rsqrt_within_2_ulps`].
    fn kernel_rs(s: f32, n: usize, eps: f32) -> Vec<f32> {
        let mut out = Vec::new();
        for m in [s / n as f32, s * (1.0 / n as f32)] {
            out.extend(rsqrt_within_2_ulps(m + eps));
        }
        out
    }

    #[test]
    fn rms_exact_sum_is_exact_in_every_order_and_tight() {
        // Rule RMS-EXACT on the rows it is meant for, pushed to its edge:
        // |m| = M everywhere (S = n M^2, the largest under 2^(24 + e)),
        // random |m| up to M, and S = 2^24 - 1 exactly; scales from 2^-60
        // (squares near 2^-126) to 2^50.
        let mut next = lcg(23);
        let eps = 1e-6f32;
        let d = declared(Dtype::F32, eps);
        for &n in &[1usize, 3, 4, 4096, 7168, 8192, 65536] {
            let big = ((((1u64 << 24) - 1) / n as u64) as f64).sqrt() as i32;
            assert!(n as u64 * (big as u64).pow(2) < 1 << 24);
            for k in [-60i32, -6, 0, 3, 50] {
                let scale = 2f32.powi(k);
                let mut rows: Vec<Vec<f32>> = Vec::new();
                rows.push(
                    (0..n)
                        .map(|_| if next() < 0.5 { -big } else { big } as f32 * scale)
                        .collect(),
                );
                rows.push(
                    (0..n)
                        .map(|_| ((next() * (2 * big + 1) as f32) as i32 - big) as f32 * scale)
                        .collect(),
                );
                if n == 4 {
                    // 4095^2 + 90^2 + 9^2 + 3^2 = 2^24 - 1.
                    rows.push([4095f32, -90.0, 9.0, 3.0].map(|v| v * scale).to_vec());
                }
                for y in &rows {
                    let exact: f64 = y.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                    let b = d.inv_rms(y).unwrap();
                    // A few binary32 ulps of r wide, whatever n.
                    let width = f64::from(b.hi) / f64::from(b.lo) - 1.0;
                    assert!(width < 20.0 * U, "n {n} k {k}: width {width:e}");
                    for s in sums_in_every_order(y, &mut next) {
                        // The derivation's claim: no order rounds.
                        assert_eq!(f64::from(s), exact, "n {n} k {k}");
                        for r in kernel_rs(s, n, eps) {
                            assert!(inside(b, r), "n {n} k {k}: {r} outside {b:?}");
                        }
                    }
                    if n < 3 || exact / (n as f64) < 1e3 * f64::from(eps) {
                        // No n - 1 to take, or eps dominates the mean.
                        continue;
                    }
                    // Not vacuous: a mean over n - 1, and the sum without
                    // its largest square, are outside.
                    let s = exact as f32;
                    assert!(!inside(b, kernel_r(s, n - 1, eps, false, 0)), "n {n} k {k}");
                    let top = y.iter().fold(0f32, |a, &v| a.max(v * v));
                    assert!(
                        !inside(b, kernel_r(s - top, n, eps, false, 0)),
                        "n {n} k {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn rms_exact_sum_is_what_catches_long_row_sum_bugs() {
        // At n = 8192 the general bound admits a mean over n - 1 and a
        // dropped element; the same row with one zero made 2^-40 (a square
        // of 2^-80: S no longer below 2^(24 + e)) takes the general bound
        // and admits both, which is the slip-through RMS-EXACT closes.
        let mut next = lcg(31);
        let (n, eps) = (8192usize, 1e-6f32);
        let d = declared(Dtype::Bf16, eps);
        let mut y: Vec<f32> = (0..n)
            .map(|_| ((next() * 91.0) as i32 - 45) as f32 * 0.25)
            .collect();
        y[n - 1] = 0.0;
        let s: f32 = y.iter().fold(0f32, |a, &v| a + v * v);
        let drop_one = s - y[n / 2] * y[n / 2];
        assert!(y[n / 2] != 0.0);
        let tight = d.inv_rms(&y).unwrap();
        let mut loose_row = y.clone();
        loose_row[n - 1] = 2f32.powi(-40);
        let loose = d.inv_rms(&loose_row).unwrap();
        assert!(loose.lo < tight.lo && tight.hi < loose.hi);
        for bug in [
            kernel_r(s, n - 1, eps, false, 0),
            kernel_r(drop_one, n, eps, false, 0),
        ] {
            assert!(!inside(tight, bug), "{bug} inside {tight:?}");
            assert!(inside(loose, bug), "{bug} outside {loose:?}");
        }
    }

    #[test]
    fn rms_exact_sum_outside_its_conditions_takes_the_general_bound() {
        // S one past 2^(24 + e): 4096^2 then 1000 ones. Left to right every
        // 2^24 + 1 ties to 2^24, 1000 units lost (Higham's worst case);
        // the general bound holds it (a bound taken as exact here would
        // not: the test fails with 25 for 24 in the condition).
        let eps = 1e-6f32;
        let d = declared(Dtype::F32, eps);
        let mut y = vec![1f32; 1001];
        y[0] = 4096.0;
        let exact = (1u64 << 24) as f32 + 1000.0;
        let s = y.iter().fold(0f32, |a, &v| a + v * v);
        assert_eq!(s, (1u64 << 24) as f32);
        let b = d.inv_rms(&y).unwrap();
        for sum in [s, exact] {
            for r in kernel_rs(sum, 1001, eps) {
                assert!(inside(b, r), "{r} outside {b:?}");
            }
        }
        // Squares below 2^-126: 2^-116 and 1000 of 2^-128, all multiples
        // of 2^-128, S = 5096 2^-128 < 2^(24 - 128); but a flush to zero
        // loses the 1000 (a fifth of the mean, which stays normal). Held
        // either way.
        let eps = f32::MIN_POSITIVE;
        let d = declared(Dtype::F32, eps);
        let mut y = vec![2f32.powi(-64); 1001];
        y[0] = 2f32.powi(-58);
        let b = d.inv_rms(&y).unwrap();
        let kept = y.iter().fold(0f32, |a, &v| a + v * v);
        let flushed = y
            .iter()
            .fold(0f32, |a, &v| flush_subnormal(a + flush_subnormal(v * v)));
        assert_eq!(kept, 5096.0 * 2f32.powi(-128));
        assert_eq!(flushed, 2f32.powi(-116));
        for sum in [kept, flushed] {
            for r in kernel_rs(sum, 1001, eps) {
                assert!(inside(b, r), "{r} outside {b:?}");
            }
        }
    }

    #[test]
    fn rms_inv_refuses_overflow_and_catches_a_padded_mean() {
        let d = declared(Dtype::F32, 1e-5);
        assert_eq!(d.inv_rms(&[3e19, 3e19]), None);
        assert_eq!(d.inv_rms(&[f32::NAN]), None);
        assert!(d.inv_rms(&[1e19, 1e19]).is_some());
        // A mean over 8 instead of 7: r off by sqrt(8/7), far outside.
        let y = [0.5f32, -1.25, 2.0, 0.75, -0.5, 1.5, 3.0];
        let b = d.inv_rms(&y).unwrap();
        let s = y.iter().fold(0f32, |a, &v| a + v * v);
        assert!(inside(b, kernel_r(s, 7, 1e-5, false, 0)));
        assert!(!inside(b, kernel_r(s, 8, 1e-5, false, 0)));
        assert!(!inside(b, kernel_r(s + 1e-5, 7, 0.0, false, 0)));
    }

    #[test]
    fn eps_and_ulps_are_declared_rules() {
        let new =
            |eps, ulps| Declared::new(Arithmetic::F32, SumRounding::Dtype, Dtype::Bf16, eps, ulps);
        assert_eq!(new(0.0, 2), Err(RmsNormError::Eps { eps: 0.0 }));
        assert!(new(f32::MIN_POSITIVE / 2.0, 2).is_err());
        assert!(new(f32::INFINITY, 2).is_err());
        assert_eq!(new(1e-6, 0), Err(RmsNormError::RsqrtUlps { ulps: 0 }));
        assert!(new(1e-6, MAX_RSQRT_ULPS + 1).is_err());
        assert!(new(1e-6, 2).is_ok());
        // More ulps, a wider interval.
        let y = [1.0f32, 2.0, 3.0];
        let a = new(1e-6, 2).unwrap().inv_rms(&y).unwrap();
        let b = new(1e-6, 16).unwrap().inv_rms(&y).unwrap();
        assert!(b.lo < a.lo && a.hi < b.hi);
    }

    #[test]
    fn an_all_zero_row_normalizes_to_signed_zeros() {
        let d = declared(Dtype::Bf16, 1e-6);
        let b = d.inv_rms(&[0.0; 5]).unwrap();
        let r = 1.0 / crate::gdn::sqrt::sqrt(1e-6);
        assert!(inside(b, r));
        for a in Arithmetic::ALL {
            let (lo, hi) = a.interval(Dtype::Bf16, 0.0, b, -2.0);
            assert_eq!((lo.to_bits(), hi.to_bits()), (0x8000_0000, 0x8000_0000));
            let (lo, hi) = a.interval(Dtype::Bf16, 0.0, b, 3.0);
            assert_eq!((lo.to_bits(), hi.to_bits()), (0, 0));
        }
    }

    #[test]
    fn arithmetics_differ_and_most_bf16_outputs_are_decided() {
        let mut next = lcg(11);
        let n = 1024;
        let d = declared(Dtype::Bf16, 1e-6);
        let y: Vec<f32> = (0..n)
            .map(|_| Dtype::Bf16.round((next() - 0.5) * 6.0))
            .collect();
        let w: Vec<f32> = (0..n)
            .map(|_| Dtype::Bf16.round(0.25 + next() * 1.5))
            .collect();
        let b = d.inv_rms(&y).unwrap();
        let (mut decided, mut differ) = (0, 0);
        for j in 0..n {
            let (l1, h1) = Arithmetic::RoundThenWeight.interval(Dtype::Bf16, y[j], b, w[j]);
            let (l2, h2) = Arithmetic::F32.interval(Dtype::Bf16, y[j], b, w[j]);
            if l1 == h1 && l2 == h2 {
                decided += 1;
                differ += usize::from(l1 != l2);
            }
            // Rounding first or once: within one output ulp.
            assert!((l1 - l2).abs() <= 2.0 * (l1.abs() + h2.abs()) * 2f32.powi(-8));
        }
        assert!(decided > n * 85 / 100, "{decided}");
        assert!(differ > n / 20, "{differ}");
        // In F32 the first two are one.
        let y32 = [0.3f32, -1.7, 2.9];
        let b = declared(Dtype::F32, 1e-6).inv_rms(&y32).unwrap();
        for &v in &y32 {
            assert_eq!(
                Arithmetic::RoundThenWeight.interval(Dtype::F32, v, b, 1.3),
                Arithmetic::F32.interval(Dtype::F32, v, b, 1.3)
            );
        }
    }

    #[test]
    fn rms_ftz_widens_a_subnormal_output_to_zero() {
        // y r w below 2^-126: the unflushed bf16 value and +0 both admitted.
        let r = InvRms { lo: 1.0, hi: 1.0 };
        let (lo, hi) = Arithmetic::F32.interval(Dtype::Bf16, 2f32.powi(-127), r, 0.75);
        assert_eq!(lo, 0.0);
        assert!(hi > 0.0 && hi < f32::MIN_POSITIVE);
        assert!(admits(Dtype::Bf16, lo, hi, 0));
        assert!(admits(Dtype::Bf16, lo, hi, Dtype::Bf16.encode(hi)));
        assert!(!admits(
            Dtype::Bf16,
            lo,
            hi,
            0x8000 | Dtype::Bf16.encode(hi)
        ));
        // Decided: bits only.
        assert!(admits(Dtype::Bf16, 1.5, 1.5, 0x3FC0));
        assert!(!admits(Dtype::Bf16, 0.0, 0.0, 0x8000));
        assert!(!admits(Dtype::Bf16, f32::NAN, f32::NAN, 0x7FC0));
    }

    /// Two rows of 3, each `[f32; 6]`: `(lo, hi, residual_out)`.
    type Rows2x3 = ([f32; 6], [f32; 6], [f32; 6]);

    /// [`rms_norm`] with the fused add on two rows of 3 under
    /// [`Arithmetic::F32`].
    fn fused_2x3(
        dtype: Dtype,
        sum: SumRounding,
        x: &[f32; 6],
        res: &[f32; 6],
        w: &[f32; 3],
    ) -> Result<Rows2x3, RmsNormError> {
        let d = Declared::new(Arithmetic::F32, sum, dtype, 1e-6, 2).unwrap();
        let (mut lo, mut hi, mut ro) = ([0f32; 6], [0f32; 6], [0f32; 6]);
        let inputs = Inputs {
            x,
            residual: Some(res),
            weight: w,
        };
        let mut out = Outputs {
            lo: &mut lo,
            hi: &mut hi,
            residual: &mut ro,
        };
        rms_norm(&Shape::new(2, 3).unwrap(), &d, &inputs, &mut out)?;
        Ok((lo, hi, ro))
    }

    #[test]
    fn fused_add_writes_the_rounded_sum_and_normalizes_per_sum_rounding() {
        let shape = Shape::new(2, 3).unwrap();
        let x = [1.0f32, 2.0, 3.0, 256.0, -1.0, 0.5];
        let res = [0.00390625f32, -2.0, 1.0, 1.0, 1.0, 0.25];
        let w = [1.0f32, 2.0, 0.5];
        let run = |sum| fused_2x3(Dtype::Bf16, sum, &x, &res, &w).unwrap();
        let (lo_d, _, ro) = run(SumRounding::Dtype);
        let (lo_f, _, ro_f) = run(SumRounding::F32);
        // 1 + 2^-8 and 256 + 1 are not bf16 values: rounded to 1 and 256.
        assert_eq!(ro, [1.0, 0.0, 4.0, 256.0, 0.0, 0.75]);
        assert_eq!(ro, ro_f);
        assert_ne!(lo_d, lo_f);
        // Row 0 of the dtype sum normalizes [1, 0, 4].
        let b = declared(Dtype::Bf16, 1e-6)
            .inv_rms(&[1.0, 0.0, 4.0])
            .unwrap();
        assert_eq!(
            lo_d[0],
            Arithmetic::F32.interval(Dtype::Bf16, 1.0, b, 1.0).0
        );
        // Lengths and finiteness are checked first.
        let d = declared(Dtype::Bf16, 1e-6);
        let bad = Inputs {
            x: &x,
            residual: None,
            weight: &[1.0, f32::NAN, 1.0],
        };
        let (mut a, mut b2) = ([0f32; 6], [0f32; 6]);
        let mut out = Outputs {
            lo: &mut a,
            hi: &mut b2,
            residual: &mut [],
        };
        assert_eq!(
            rms_norm(&shape, &d, &bad, &mut out),
            Err(RmsNormError::NonFinite {
                arg: "weight",
                index: 1
            })
        );
        assert_eq!(Shape::new(0, 4), Err(RmsNormError::Zero { dim: "rows" }));
        assert!(Shape::new(1, MAX_HIDDEN + 1).is_err());
    }

    #[test]
    fn rms_range_names_a_fused_add_that_overflows() {
        // f16: 40000 + 30000 rounds to infinity; its float32 sum is finite.
        let x = [1.0f32, 2.0, 3.0, 1.0, 40000.0, 1.0];
        let res = [1.0f32, 1.0, 1.0, 1.0, 30000.0, 1.0];
        let run = |sum| fused_2x3(Dtype::F16, sum, &x, &res, &[1.0; 3]).map(|r| r.2);
        let e = run(SumRounding::Dtype).unwrap_err();
        assert_eq!(e, RmsNormError::AddOverflow { row: 1, col: 1 });
        assert!(
            std::format!("{e}").contains("x + residual overflows"),
            "{e}"
        );
        let ro = run(SumRounding::F32).unwrap();
        assert_eq!(ro[4], f32::INFINITY);
    }

    #[test]
    fn exact_comparison_decides_the_bounds() {
        // r^2 v = t^2 exactly: 0.5^2 * 4 = 1.
        assert_eq!(cmp_r2v(0.5, 4.0, 1.0), core::cmp::Ordering::Equal);
        assert_eq!(extreme_r(4.0, 1.0, true), 0.5);
        assert_eq!(extreme_r(4.0, 1.0, false), 0.5);
        assert_eq!(extreme_r(4.0, 1.0 + 1e-12, true), 0.5f32.next_up());
        assert_eq!(extreme_r(4.0, 1.0 - 1e-12, false), 0.5f32.next_down());
        assert_eq!(dyadic(0.75), (3, -2));
        assert_eq!(ulps_rel(2), 2.0 / 8_388_608.0 + 4.0 / 35_184_372_088_832.0);
    }
}
