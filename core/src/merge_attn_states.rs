//! Merging two partial attention states by their log-sum-exps: the step
//! that combines a split-KV (Flash-Decoding) pass, a cascade's shared
//! prefix with its suffix, or a chunked prefill's context chunk with the
//! new tokens. vLLM's `merge_attn_states` (the CUDA kernel
//! `csrc/attention/merge_attn_states.cu` and the Triton kernel
//! `vllm/attention/ops/triton_merge_attn_states.py`), SGLang's
//! `merge_state_v2`, FlashInfer's `merge_state` (`cascade.cuh`).
//!
//! Shapes (elements, row-major): `prefix_output`, `suffix_output` and the
//! output `[T][H][D]` (tokens, heads, head size), values of the model's
//! [`Dtype`] (held as the `f32` of their value; the output here an
//! interval of dtype values per element); `prefix_lse`, `suffix_lse` and
//! the output LSE binary32, `[H][T]` ([`Layout::HeadMajor`], vLLM's) or
//! `[T][H]` ([`Layout::TokenMajor`], SGLang's and FlashInfer's). Each side's
//! output is already normalised (a softmax-weighted mean of its keys'
//! values), and its LSE is `log_b` of its softmax denominator (with the
//! maximum score added back), in the declared [`Base`] `b`: `e` (vLLM,
//! SGLang's `merge_state_v2`, FlashAttention) or 2 (FlashInfer, whose
//! `merge_state` uses `exp2` and `log2`).
//!
//! # The rules, for token `t` and head `h`, `p` and `s` the two LSEs
//!
//! 1. `MERGE-EMPTY`: a side whose LSE is `-inf` has no keys (FlashAttention
//!    3's LSE of an empty row); so does one whose LSE is `+inf` when the
//!    kernel declares `inf_is_empty` (FlashAttention 2 returns `+inf` for a
//!    row with no keys; vLLM's CUDA and Triton kernels read any infinity as
//!    `-inf`). An empty side's output values are arbitrary finite numbers
//!    and weigh nothing. A NaN LSE, or `+inf` without `inf_is_empty`, is
//!    refused ([`MergeError::Lse`]). The caller's side of the contract
//!    (vLLM PR 49294): an empty context chunk must carry `-inf`; a finite
//!    LSE with a garbage output corrupts the merge, and no kernel can tell.
//! 2. `MERGE-BOTH`: both sides empty: the output is the prefix output
//!    copied bit for bit ([`Empty::Prefix`]: vLLM's CUDA kernel since PR
//!    28181, which before it computed `-inf - -inf` and wrote NaN) or
//!    zero ([`Empty::Zero`]: vLLM's Triton kernel since PR 39148, which
//!    clamps the maximum to a finite `-1e30` and adds `1e-10` to the
//!    scales' denominator); the output LSE is `-inf` under both.
//! 3. `MERGE-ONE`: exactly one side empty: the output is the other side's
//!    output bit for bit, the output LSE the other side's LSE bit for bit
//!    (the rules of `MERGE-EXACT` below make every admitted evaluation
//!    exact here: a weight `exp(-inf) = 0`, the other `exp(0) = 1`, their
//!    sum 1, `log(1) = 0`, `m + 0 = m`).
//! 4. `MERGE-WEIGHTS`: otherwise, with `m = max(p, s)`, `w_p = b^(p - m)`,
//!    `w_s = b^(s - m)`: `out = (w_p p_out + w_s s_out) / (w_p + w_s)` and
//!    `out_lse = m + log_b(w_p + w_s)`. The larger side's weight is exactly
//!    1 (its argument `p - m` is exactly 0); equal LSEs give both weights 1
//!    and both scales exactly `1/2`, so the output is `R(fl(p_out / 2 +
//!    s_out / 2))`, decided.
//! 5. `MERGE-EVAL`: the binary32 evaluations admitted. The argument `d =
//!    fl(min(p, s) - m)`, and the smaller weight `w = exp(d)` (vLLM's CUDA
//!    `expf`) or, base e, `exp2(fl(d log2(e)))` with `log2(e)` rounded to
//!    binary32 (Triton's `tl.exp`, which is `ex2.approx` of the scaled
//!    argument; CUDA's `__expf`); base 2, `exp2(d)` (FlashInfer's
//!    `ptx_exp2`). `exp` and `exp2` within [`EXP_ULPS`] ulps. The sum
//!    `se = fl(1 + w)`; then the output as
//!    - the scales `a = 1 / se` and `w / se` of the larger and the
//!      smaller side (two divisions: vLLM's CUDA and Triton kernels,
//!      SGLang's), or `r = 1 / se` and `w r` (a reciprocal and a
//!      product), then `fl(fl(p_out a_p) + fl(s_out a_s))` with either
//!      product fused into the add (FMA) or neither;
//!    - or the unnormalised sum, the larger side's output plus `w` times
//!      the smaller's (`fl(o_big + fl(w o_small))`, or fused), divided by
//!      `se` (FlashInfer's `state_t::merge`, then `normalize`);
//!
//!    each division within [`DIV_ULPS`] ulps (PTX `div.full.f32`, Triton's
//!    `/`; `div.approx.f32` and `__fdividef` under `--use_fast_math`), with
//!    or without flush to zero (`MERGE-FTZ`), then rounded once to the
//!    dtype. The output LSE is `fl(m + L)`, `L` the kernel's `log_b(se)`,
//!    or its `log1p_b(w)` (which is `w log_b(e)`, not 0, where `w` is too
//!    small to move `se` off 1: that moves an LSE near 0), within
//!    [`LOG_ULPS`] ulps plus [`LOG_ABS`] (CUDA's `logf`, `log2f`: 1 ulp;
//!    `__logf`: `2^-21.41` absolute on `[0.5, 2]`, where `se` lies; PTX
//!    `lg2.approx.f32`: `2^-22.6` absolute; Triton's `tl.log`,
//!    `lg2.approx` times `ln 2` rounded).
//! 6. `MERGE-EXACT`: the kernel's `exp(0)` and `exp2(0)` are 1, `exp(-inf)`
//!    is 0, `log(1)` is 0, `0 / y` is 0, and a division by a power of two
//!    is exact (a correctly rounded division trivially; PTX `div.full.f32`
//!    and `__fdividef` multiply by an approximate reciprocal, which is
//!    exact at a power of two). These make `MERGE-ONE` and the equal-LSE
//!    case of `MERGE-WEIGHTS` exact. A kernel that subtracts pre-scaled
//!    maxima (FlashAttention 2's `exp2f(fma(s, log2e, -m log2e))` inside
//!    its softmax) has a larger weight that is not exactly 1 and is outside
//!    this contract.
//! 7. `MERGE-FTZ`: a kernel compiled with flush to zero turns every
//!    subnormal binary32 input and result into a zero: admitted, as is an
//!    `exp` or `exp2` that flushes its own subnormal results (PTX
//!    `ex2.approx.ftz.f32`) in an otherwise IEEE kernel. The interval is the
//!    hull of the unflushed and the flushed evaluations.
//! 8. `MERGE-ZERO`: the sign of a zero output (or output LSE) is not
//!    judged: `x_p * 0 + (-0)` is `+0` where the copied side holds `-0`.
//! 9. `MERGE-RANGE`: output values must be finite and below `2^64` in
//!    magnitude (so no binary32 product or sum of the merge overflows);
//!    LSEs any binary32 but NaN, `+inf` only with `inf_is_empty`
//!    ([`MergeError`]).
//! 10. `MERGE-DECIDED`: where an element's interval is one value the
//!     kernel's output must be that value bit for bit (a NaN never), else
//!     within the interval ([`crate::rms_norm::admits`]); the same for the
//!     output LSE (binary32).
//! 11. `MERGE-LSE-OUT`: declared [`Scales::LseOut`] (FlashAttention's own
//!     split-KV combine), the output's scales come from the kernel's
//!     rounded output LSE instead of the weights: `out_lse` as in
//!     `MERGE-EVAL`, then each side's scale `exp(fl(lse - out_lse))` (base
//!     e: FlashAttention 2's `expf`; or `exp2` of that difference times
//!     `log2(e)`, or of the pre-scaled `fl(fl(lse log2(e)) - fl(out_lse
//!     log2(e)))`, FlashAttention 3) or `exp2(fl(lse - out_lse))` (base 2),
//!     within [`EXP_ULPS`], and `out` the sum of the two products in
//!     either order, either fused (FlashAttention's `out += scale *
//!     o_split` from 0, then one rounding to the dtype). Rules 1-3 hold as
//!     they are (an empty side's scale is `exp(-inf) = 0`, the other's
//!     `exp(0) = 1`: `MERGE-ONE` stays exact); equal LSEs give scales of
//!     about, not exactly, `1/2`, so the EQUAL case is bounded, not
//!     decided. The enclosure under this declaration is built from this
//!     form alone, and under [`Scales::Weights`] from the weights' forms
//!     alone (a kernel of one form may still fall inside the other's
//!     where the two agree to within their ulps).
//!
//! # The enclosure
//!
//! Every step above but `exp`, `exp2` and `log` is one IEEE binary32
//! operation (round to nearest even) on operands that the kernel holds in
//! binary32, and every one is monotone in each operand over the values it
//! sees (the divisors lie in `[1, 2]`); rounding to nearest is monotone.
//! So for operands known to lie in intervals of binary32 values, the
//! kernel's result lies between the binary32 results at the intervals'
//! corners (a product or an FMA takes the least and the greatest of its
//! corners, an FMA's exact `a b + c` rounded once by
//! [`crate::fma::fma_f32`]). The weight's interval is the binary32 values
//! within `EXP_ULPS` + 1 ulps of an enclosure of the real `exp` of the
//! kernel's rounded argument ([`crate::moe_routing`]'s, from this crate's
//! binary32 `exp`), a division's the correctly rounded corners stepped
//! `DIV_ULPS` + 1 binary32 values outward (none under `MERGE-EXACT`), the
//! log's a binary64 enclosure of `ln` on `[1, 2]` (the series `2
//! atanh((x - 1) / (x + 1))`, its tail bounded) widened by the log's
//! error. The output's interval is the hull of every form of
//! `MERGE-EVAL` under both flush modes, rounded to the dtype
//! ([`crate::attention::to_dtype`]): tight (a few binary32 ulps of each
//! side's term: the divisions' `DIV_ULPS` dominate), and a single value
//! wherever the rules make every form exact (rules 2, 3 and equal LSEs)
//! or the smaller side's term is below half an ulp of the output (FAR's
//! gaps); in bf16 nearly every element is decided, in binary32 most are
//! bounded, and the output LSE is bounded but for rules 2 and 3.
//!
//! Outside the contract (each a planted bug in the checks' tests): the
//! products `p_out a_p` rounded to the dtype before their sum (no kernel of
//! the field does it; a torch form that multiplies a bf16 tensor by
//! float32 scales is promoted to float32, as the CUDA kernel computes); the
//! maximum not subtracted (`exp(1e4)` overflows); the logistic form `1 /
//! (1 + exp(s - p))` without the maximum (NaN once `s - p` passes 88.7).
//! FlashAttention's own split-KV combine (`combine_attn_seqk_parallel`,
//! FA3's `flash_fwd_combine_kernel.h`), whose scales are `exp(lse -
//! lse_out)` of the rounded output LSE, is not exactly `1/2` at equal
//! LSEs and carries `lse_out`'s rounding (`2^-10` relative near `|lse| =
//! 1e4`), so EQUAL and LARGE reject it under [`Scales::Weights`]; it is
//! declared [`Scales::LseOut`] (rule 11). Outside every declaration: `s_scale = 1 - p_scale`,
//! whose absolute error is large relative to a small scale.
//!
//! Sources: vLLM `csrc/attention/merge_attn_states.cu` (`p_lse`, `s_lse`
//! read; `std::isinf` turns either infinity into `-inf`; `max_lse =
//! fmaxf`; both empty: the prefix output copied and `max_lse` stored as
//! the output LSE, PR 28181; `p_se = expf(p_lse - max_lse)`, `out_se =
//! p_se + s_se`, `p_scale = p_se / out_se`, `out = p_out * p_scale +
//! s_out * s_scale` in float then cast, `output_lse = logf(out_se) +
//! max_lse`),
//! its Triton `merge_attn_states_kernel` (`tl.exp`, `tl.log`; PR 39148:
//! the maximum clamped to `-1e30`, `1e-10` in the scales' denominator)
//! and the in-place race of an output LSE that aliases `prefix_lse` when
//! one head's threads span two blocks (PR 40924); SGLang
//! `sgl-kernel` `merge_state_v2` (LSEs `[T][H]`, natural log; issue 40903:
//! base-2 LSEs of FlashInfer and TRT-LLM fed to it); FlashInfer
//! `include/flashinfer/attention/cascade.cuh` (`state_t::merge`,
//! `ptx_exp2`, `ptx_log2`); Ye et al., *FlashInfer: Efficient and
//! Customizable Attention Engine for LLM Inference Serving* (2025,
//! arXiv 2501.01005), §2.2 (attention states and their merge, which
//! vLLM's Triton kernel cites); Dao et al., *Flash-Decoding* (2023); the
//! CUDA C Programming Guide, Mathematical Functions (`expf` 2 ulps,
//! `logf` 1, `__logf`); the PTX ISA (`ex2.approx.f32`, `lg2.approx.f32`,
//! `div.full.f32`).

use crate::attention::{to_dtype, EXP_ULPS};
use crate::fma::fma_f32;
use crate::moe_routing::{exp_enclosure, Enclosure};

/// The model's element type: [`crate::dtype::Dtype`].
pub use crate::dtype::Dtype;

/// A division's accuracy, in ulps: PTX `div.full.f32` (Triton's `/` on
/// float32) and `div.approx.f32` (`__fdividef`, `--use_fast_math`), each
/// within 2 (PTX ISA, `div`); a correctly rounded division within half.
pub const DIV_ULPS: u32 = 2;

/// The relative part of the log's accuracy, in ulps: CUDA's `logf` and
/// `log2f` (1 ulp), numpy's float32 `log` (under 4), with room.
pub const LOG_ULPS: u32 = 4;

/// The absolute part of the log's accuracy on `[1, 2]` (where the merged
/// weights' sum lies): `2^-21`, covering CUDA's `__logf` (`2^-21.41` on
/// `[0.5, 2]`, CUDA C Programming Guide, Intrinsic Functions) and PTX
/// `lg2.approx.f32` (`2^-22.6`), which are absolute there, not relative.
pub const LOG_ABS: f64 = 1.0 / 2_097_152.0;

/// Output values must be below this in magnitude (rule `MERGE-RANGE`):
/// `2^64`.
pub const MAX_OUTPUT: f32 = 18_446_744_073_709_551_616.0;

/// The base of the LSEs (rule `MERGE-WEIGHTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Base {
    /// Natural log: vLLM, SGLang's `merge_state_v2`, FlashAttention.
    E,
    /// Base 2: FlashInfer's `merge_state` (`exp2`, `log2`).
    Two,
}

impl Base {
    /// Both bases, in the order identification reports them.
    pub const ALL: [Base; 2] = [Base::E, Base::Two];

    /// The name a check takes: `"e"` or `"2"`.
    pub const fn name(self) -> &'static str {
        match self {
            Base::E => "e",
            Base::Two => "2",
        }
    }
}

/// What the output of a pair whose two sides are both empty is (rule
/// `MERGE-BOTH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Empty {
    /// The prefix output, copied bit for bit: vLLM's CUDA kernel (PR
    /// 28181).
    Prefix,
    /// Zero (either sign): vLLM's Triton kernel after PR 39148.
    Zero,
}

impl Empty {
    /// Both policies, in the order identification reports them.
    pub const ALL: [Empty; 2] = [Empty::Prefix, Empty::Zero];

    /// The name a check takes: `"prefix"` or `"zero"`.
    pub const fn name(self) -> &'static str {
        match self {
            Empty::Prefix => "prefix",
            Empty::Zero => "zero",
        }
    }
}

/// How the output's scales are formed (rules `MERGE-EVAL` and
/// `MERGE-LSE-OUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scales {
    /// From the weights: `w_big = 1`, `w_small = b^(small - m)`, their sum
    /// `se`, then the scales `w / se` (or the unnormalised sum divided by
    /// `se`): vLLM's CUDA and Triton kernels, SGLang's `merge_state_v2`,
    /// FlashInfer's `merge_state` (rule `MERGE-EVAL`).
    Weights,
    /// From the output LSE: `out_lse` first (as rule `MERGE-EVAL` forms
    /// it), then each side's scale `b^(lse - out_lse)` of the rounded
    /// `out_lse`, and `out` the sum of the two products (rule
    /// `MERGE-LSE-OUT`): FlashAttention 2's `combine_attn_seqk_parallel`
    /// (`expf(lse - lse_logsum)`) and FlashAttention 3's combine kernel.
    LseOut,
}

impl Scales {
    /// Both forms.
    pub const ALL: [Scales; 2] = [Scales::Weights, Scales::LseOut];

    /// The name a check takes: `"weights"` or `"lse_out"`.
    pub const fn name(self) -> &'static str {
        match self {
            Scales::Weights => "weights",
            Scales::LseOut => "lse_out",
        }
    }
}

/// How the LSE arrays are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `[H][T]`: vLLM's `merge_attn_states` (`prefix_lse[head *
    /// num_tokens + token]`).
    HeadMajor,
    /// `[T][H]`: SGLang's `merge_state_v2`, FlashInfer's `merge_state`.
    TokenMajor,
}

impl Layout {
    /// Both layouts, in the order identification reports them.
    pub const ALL: [Layout; 2] = [Layout::HeadMajor, Layout::TokenMajor];

    /// The name a check takes: `"head_major"` or `"token_major"`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::HeadMajor => "head_major",
            Layout::TokenMajor => "token_major",
        }
    }

    /// The index of (token `t`, head `h`) in an LSE array of `shape`.
    pub fn index(self, shape: &Shape, t: usize, h: usize) -> usize {
        match self {
            Layout::HeadMajor => h * shape.tokens + t,
            Layout::TokenMajor => t * shape.heads + h,
        }
    }

    /// The LSE array's shape `[rows, cols]` in elements: `[H, T]` or `[T,
    /// H]`.
    pub fn dims(self, shape: &Shape) -> [usize; 2] {
        match self {
            Layout::HeadMajor => [shape.heads, shape.tokens],
            Layout::TokenMajor => [shape.tokens, shape.heads],
        }
    }
}

/// A shape, a length or an input that cannot be merged. Displays as a
/// sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MergeError {
    /// A dimension is 0.
    Zero {
        /// `"num_tokens"`, `"num_heads"` or `"head_size"`.
        dim: &'static str,
    },
    /// A buffer's length overflows `usize`.
    Overflow,
    /// A buffer has the wrong number of elements.
    Len {
        /// The buffer's name.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// An output value is NaN, infinite or `2^64` or more in magnitude
    /// (rule `MERGE-RANGE`).
    Output {
        /// `"prefix_output"` or `"suffix_output"`.
        arg: &'static str,
        /// Its index, row-major.
        index: usize,
    },
    /// An LSE is NaN, or `+inf` without `inf_is_empty` (rule
    /// `MERGE-EMPTY`).
    Lse {
        /// `"prefix_lse"` or `"suffix_lse"`.
        arg: &'static str,
        /// Its index in the declared layout.
        index: usize,
    },
}

impl core::fmt::Display for MergeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            MergeError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            MergeError::Overflow => write!(f, "a buffer length overflows usize"),
            MergeError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            MergeError::Output { arg, index } => write!(
                f,
                "{arg}[{index}] is not finite or is 2^64 or more in magnitude"
            ),
            MergeError::Lse { arg, index } => write!(
                f,
                "{arg}[{index}] is NaN, or +inf where inf_is_empty is false (refused)"
            ),
        }
    }
}

/// The dimensions of one merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    tokens: usize,
    heads: usize,
    head_size: usize,
}

impl Shape {
    /// `num_tokens`, `num_heads`, `head_size`, each at least 1, every
    /// buffer's bytes within `usize`.
    ///
    /// # Errors
    /// [`MergeError::Zero`], [`MergeError::Overflow`].
    pub fn new(tokens: usize, heads: usize, head_size: usize) -> Result<Shape, MergeError> {
        for (dim, v) in [
            ("num_tokens", tokens),
            ("num_heads", heads),
            ("head_size", head_size),
        ] {
            if v == 0 {
                return Err(MergeError::Zero { dim });
            }
        }
        [tokens, heads, head_size, 8]
            .iter()
            .try_fold(1usize, |a, &x| a.checked_mul(x))
            .ok_or(MergeError::Overflow)?;
        Ok(Shape {
            tokens,
            heads,
            head_size,
        })
    }

    /// `[T, H, D]`.
    pub fn dims(&self) -> [usize; 3] {
        [self.tokens, self.heads, self.head_size]
    }
    /// Tokens `T`.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Heads `H`.
    pub fn heads(&self) -> usize {
        self.heads
    }
    /// Head size `D`.
    pub fn head_size(&self) -> usize {
        self.head_size
    }
    /// Elements of each output array, `T H D`.
    pub fn out_elems(&self) -> usize {
        self.tokens * self.heads * self.head_size
    }
    /// Elements of each LSE array, `T H`.
    pub fn lse_elems(&self) -> usize {
        self.tokens * self.heads
    }
}

/// What a kernel declares: its output dtype, LSE base, both-empty policy,
/// whether `+inf` marks an empty side, and its LSE layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Declared {
    /// The outputs' dtype.
    pub dtype: Dtype,
    /// The LSEs' base.
    pub base: Base,
    /// The both-empty policy (rule `MERGE-BOTH`).
    pub empty: Empty,
    /// Whether `+inf` marks an empty side (rule `MERGE-EMPTY`).
    pub inf_is_empty: bool,
    /// The LSEs' layout.
    pub layout: Layout,
    /// How the scales are formed.
    pub scales: Scales,
}

impl Declared {
    /// vLLM's declaration for `dtype`: base e, the prefix copied, `+inf`
    /// empty, head-major LSEs, scales from the weights.
    pub fn vllm(dtype: Dtype) -> Declared {
        Declared {
            dtype,
            base: Base::E,
            empty: Empty::Prefix,
            inf_is_empty: true,
            layout: Layout::HeadMajor,
            scales: Scales::Weights,
        }
    }

    /// Whether `x` is an LSE the declaration takes (rule `MERGE-EMPTY`):
    /// not NaN, and `+inf` only with `inf_is_empty`.
    pub fn lse_ok(&self, x: f32) -> bool {
        !(x.is_nan() || x == f32::INFINITY && !self.inf_is_empty)
    }

    /// Whether `x` (an admitted LSE) marks an empty side.
    pub fn is_empty(&self, x: f32) -> bool {
        x == f32::NEG_INFINITY || x == f32::INFINITY && self.inf_is_empty
    }
}

/// A closed interval of binary32 values (private: the enclosure's
/// arithmetic, module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Iv {
    lo: f32,
    hi: f32,
}

impl Iv {
    const fn point(x: f32) -> Iv {
        Iv { lo: x, hi: x }
    }
    const ZERO: Iv = Iv::point(0.0);
    const ONE: Iv = Iv::point(1.0);
    fn hull(self, o: Iv) -> Iv {
        Iv {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
        }
    }
    fn is_point(self) -> bool {
        self.lo == self.hi
    }
}

/// `x` stepped `n` binary32 values towards `-inf`.
fn down(mut x: f32, n: u32) -> f32 {
    for _ in 0..n {
        x = x.next_down();
    }
    x
}

/// `x` stepped `n` binary32 values towards `+inf`.
fn up(mut x: f32, n: u32) -> f32 {
    for _ in 0..n {
        x = x.next_up();
    }
    x
}

/// Whether `x` is a power of two (a positive normal binary32 with a zero
/// fraction).
fn pow2(x: f32) -> bool {
    x >= f32::MIN_POSITIVE && x.is_finite() && x.to_bits() & 0x007F_FFFF == 0
}

/// One flush mode of rule `MERGE-FTZ`: `ftz` flushes every subnormal
/// operand and result to zero. Each method is one binary32 operation of
/// the kernel on operands in the given intervals (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mode {
    ftz: bool,
}

impl Mode {
    const BOTH: [Mode; 2] = [Mode { ftz: false }, Mode { ftz: true }];

    fn flush(self, x: f32) -> f32 {
        if self.ftz && x != 0.0 && x.abs() < f32::MIN_POSITIVE {
            0.0
        } else {
            x
        }
    }

    /// Flushing is monotone: an interval's flushed ends bound its flushed
    /// values.
    fn fix(self, i: Iv) -> Iv {
        Iv {
            lo: self.flush(i.lo),
            hi: self.flush(i.hi),
        }
    }

    fn input(self, x: f32) -> Iv {
        self.fix(Iv::point(x))
    }

    fn add(self, a: Iv, b: Iv) -> Iv {
        self.fix(Iv {
            lo: a.lo + b.lo,
            hi: a.hi + b.hi,
        })
    }

    fn mul(self, a: Iv, b: Iv) -> Iv {
        let c = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi];
        self.fix(Iv {
            lo: c[0].min(c[1]).min(c[2]).min(c[3]),
            hi: c[0].max(c[1]).max(c[2]).max(c[3]),
        })
    }

    /// `fl(a b + c)`, one rounding.
    fn fma(self, a: Iv, b: Iv, c: Iv) -> Iv {
        let lo = [
            fma_f32(a.lo, b.lo, c.lo),
            fma_f32(a.lo, b.hi, c.lo),
            fma_f32(a.hi, b.lo, c.lo),
            fma_f32(a.hi, b.hi, c.lo),
        ];
        let hi = [
            fma_f32(a.lo, b.lo, c.hi),
            fma_f32(a.lo, b.hi, c.hi),
            fma_f32(a.hi, b.lo, c.hi),
            fma_f32(a.hi, b.hi, c.hi),
        ];
        self.fix(Iv {
            lo: lo[0].min(lo[1]).min(lo[2]).min(lo[3]),
            hi: hi[0].max(hi[1]).max(hi[2]).max(hi[3]),
        })
    }

    /// `a / b` for `b` positive, within [`DIV_ULPS`] (exact under
    /// `MERGE-EXACT`: `a` zero, or `b` one power of two).
    fn div(self, a: Iv, b: Iv) -> Iv {
        if a == Iv::ZERO {
            return Iv::ZERO;
        }
        let c = [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi];
        let mut r = Iv {
            lo: c[0].min(c[1]).min(c[2]).min(c[3]),
            hi: c[0].max(c[1]).max(c[2]).max(c[3]),
        };
        if !(b.is_point() && pow2(b.lo)) {
            r = Iv {
                lo: down(r.lo, DIV_ULPS + 1),
                hi: up(r.hi, DIV_ULPS + 1),
            };
        }
        self.fix(r)
    }

    /// `exp(x)` or `exp2(x)` within [`EXP_ULPS`] (exact at 0 and `-inf`),
    /// for `x <= 0`. Its own subnormal results may be flushed in either
    /// mode (`ex2.approx.ftz.f32`).
    fn exp(self, base: Base, x: f32) -> Iv {
        if x == 0.0 {
            return Iv::ONE;
        }
        if x == f32::NEG_INFINITY {
            return Iv::ZERO;
        }
        let t = match base {
            Base::E => f64::from(x),
            Base::Two => f64::from(x) * core::f64::consts::LN_2,
        };
        let (lo, hi) = to_dtype(Dtype::F32, exp_enclosure(t));
        let r = Iv {
            lo: Mode { ftz: true }.flush(down(lo, EXP_ULPS + 1).max(0.0)),
            hi: up(hi, EXP_ULPS + 1),
        };
        self.fix(r)
    }
}

impl Mode {
    /// `b^(x - l)` for the output LSE `l` in `lse` (rule `MERGE-LSE-OUT`):
    /// the argument `fl(x - l)`, then `exp` (FlashAttention 2's `expf`);
    /// base e also `exp2` of `fl(fl(x - l) log2(e))` or of the pre-scaled
    /// `fl(fl(x log2(e)) - fl(l log2(e)))` (FlashAttention 3); base 2
    /// `exp2(fl(x - l))`. Each argument falls as `l` rises, so the ends of
    /// `lse` bound it; each within [`EXP_ULPS`], exact where the argument
    /// is 0 (`x` is `l`: `MERGE-EXACT`).
    fn exp_from(self, base: Base, x: f32, lse: Iv) -> Iv {
        let mut r: Option<Iv> = None;
        for l in [lse.lo, lse.hi] {
            let d = self.flush(x - l);
            let mut take = |b: Base, a: f32| {
                let e = self.exp(b, a);
                r = Some(r.map_or(e, |o| o.hull(e)));
            };
            match base {
                Base::E => {
                    take(Base::E, d);
                    take(Base::Two, self.flush(d * LOG2_E_F32));
                    let pre = self.flush(self.flush(x * LOG2_E_F32) - self.flush(l * LOG2_E_F32));
                    take(Base::Two, pre);
                }
                Base::Two => take(Base::Two, d),
            }
        }
        r.unwrap_or(Iv::ONE)
    }
}

/// `log2(e)` rounded to binary32 (Triton's `1.4426950408889634` constant
/// as a float32 operand).
const LOG2_E_F32: f32 = core::f32::consts::LOG2_E;

/// Relative slack for this module's binary64 roundings.
const F64_SLACK: f64 = 1.0 / 1_099_511_627_776.0;

/// An enclosure of `ln(x)` for `x` in `[1, 2.5]` (binary64): `2
/// atanh(z)`, `z = (x - 1) / (x + 1)` at most `3/7`, summed to 40 terms; the
/// tail is below `z^81 / 81 / (1 - z^2)`, under `2^-98`.
fn ln_enclosure(x: f64) -> Enclosure {
    if x == 1.0 {
        return Enclosure { lo: 0.0, hi: 0.0 };
    }
    let z = (x - 1.0) / (x + 1.0);
    let z2 = z * z;
    let (mut term, mut sum) = (z, 0.0f64);
    for k in 0..40 {
        sum += term / f64::from(2 * k + 1);
        term *= z2;
    }
    let tail = term / 81.0 / (1.0 - z2);
    let v = 2.0 * sum;
    Enclosure {
        lo: v * (1.0 - F64_SLACK),
        hi: (v + 2.0 * tail) * (1.0 + F64_SLACK),
    }
}

/// The quantities of one (token, head) pair that every element of its
/// head shares: which side is larger and, per flush mode, the smaller
/// weight `w`, the sum `se`, the scales, and the output LSE.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairTerms {
    /// Both sides empty (rule `MERGE-BOTH`).
    both_empty: bool,
    /// The prefix is the side of weight 1 (the larger LSE; the non-empty
    /// side; either at equal LSEs).
    prefix_big: bool,
    /// Per flush mode: `[w, se, 1 / se, w / se, w (1 / se)]`.
    modes: [[Iv; 5]; 2],
    /// Per flush mode, rule `MERGE-LSE-OUT`'s scales of the larger and the
    /// smaller side (zeros unless the declaration is [`Scales::LseOut`]).
    lse_scales: [[Iv; 2]; 2],
    /// The output LSE's binary32 interval.
    lse: Iv,
}

/// The pair's terms (rules `MERGE-EMPTY` to `MERGE-FTZ`), or `None` for an
/// LSE the declaration refuses ([`Declared::lse_ok`]; [`check_inputs`]
/// names which).
pub fn pair_terms(decl: &Declared, p_lse: f32, s_lse: f32) -> Option<PairTerms> {
    if !(decl.lse_ok(p_lse) && decl.lse_ok(s_lse)) {
        return None;
    }
    let (pe, se_) = (decl.is_empty(p_lse), decl.is_empty(s_lse));
    if pe && se_ {
        return Some(PairTerms {
            both_empty: true,
            prefix_big: true,
            modes: [[Iv::ZERO; 5]; 2],
            lse_scales: [[Iv::ZERO; 2]; 2],
            lse: Iv::point(f32::NEG_INFINITY),
        });
    }
    let prefix_big = se_ || !pe && p_lse >= s_lse;
    let mut modes = [[Iv::ZERO; 5]; 2];
    let mut lse_scales = [[Iv::ZERO; 2]; 2];
    let mut lse: Option<Iv> = None;
    for (k, mode) in Mode::BOTH.into_iter().enumerate() {
        let (big, small) = if prefix_big {
            (p_lse, s_lse)
        } else {
            (s_lse, p_lse)
        };
        let m = mode.flush(big);
        let w = if pe || se_ {
            Iv::ZERO
        } else {
            let d = mode.flush(mode.flush(small) - m);
            match decl.base {
                Base::E => mode
                    .exp(Base::E, d)
                    .hull(mode.exp(Base::Two, mode.flush(d * LOG2_E_F32))),
                Base::Two => mode.exp(Base::Two, d),
            }
        };
        let se = mode.add(Iv::ONE, w);
        let r = mode.div(Iv::ONE, se);
        modes[k] = [w, se, r, mode.div(w, se), mode.mul(w, r)];
        // The log of se, or log1p of w: ln over [min, max] of both.
        let x_lo = f64::from(se.lo).min(1.0 + f64::from(w.lo));
        let x_hi = f64::from(se.hi).max(1.0 + f64::from(w.hi));
        // log2 = ln log2(e): the constant and the product each within
        // 2^-53 relative.
        let (c_lo, c_hi) = match decl.base {
            Base::E => (1.0, 1.0),
            Base::Two => (
                core::f64::consts::LOG2_E * (1.0 - F64_SLACK),
                core::f64::consts::LOG2_E * (1.0 + F64_SLACK),
            ),
        };
        let rel = f64::from(LOG_ULPS) * 2.0 / 16_777_216.0;
        let l = if x_lo == 1.0 && x_hi == 1.0 {
            if w.hi == 0.0 {
                Iv::ZERO
            } else {
                // se is 1 (log(1) = 0, MERGE-EXACT) but log1p(w) of a w
                // below 2^-53 is not 0: it lies in [0, w log_b(e)], within
                // the log's ulps (subnormal ones too). It moves only an
                // output LSE whose maximum is near 0.
                let hi = to_dtype(
                    Dtype::F32,
                    Enclosure {
                        lo: 0.0,
                        hi: f64::from(w.hi) * c_hi * (1.0 + rel),
                    },
                )
                .1;
                mode.fix(Iv {
                    lo: 0.0,
                    hi: up(hi, LOG_ULPS),
                })
            }
        } else {
            let (a, b) = (ln_enclosure(x_lo), ln_enclosure(x_hi));
            let lo = a.lo * c_lo;
            let hi = b.hi * c_hi;
            let (lo, hi) = to_dtype(
                Dtype::F32,
                Enclosure {
                    lo: lo - lo * rel - LOG_ABS,
                    hi: hi + hi * rel + LOG_ABS,
                },
            );
            mode.fix(Iv { lo, hi })
        };
        let v = mode.add(Iv::point(m), l);
        lse = Some(lse.map_or(v, |x| x.hull(v)));
        // MERGE-LSE-OUT (declared only): each side's scale from this mode's
        // output LSE; an empty side's is 0 (MERGE-EXACT: exp(-inf)).
        if decl.scales == Scales::LseOut {
            let small_scale = if pe || se_ {
                Iv::ZERO
            } else {
                mode.exp_from(decl.base, mode.flush(small), v)
            };
            lse_scales[k] = [mode.exp_from(decl.base, m, v), small_scale];
        }
    }
    Some(PairTerms {
        both_empty: false,
        prefix_big,
        modes,
        lse_scales,
        lse: lse.unwrap_or(Iv::ZERO),
    })
}

/// A zero end admits both zeros (rule `MERGE-ZERO`): `-0` below, `+0`
/// above.
fn signless(lo: f32, hi: f32) -> (f32, f32) {
    (
        if lo == 0.0 { -0.0 } else { lo },
        if hi == 0.0 { 0.0 } else { hi },
    )
}

impl PairTerms {
    /// Whether both sides are empty.
    pub fn both_empty(&self) -> bool {
        self.both_empty
    }

    /// The output element's interval of dtype values `(lo, hi)` for the
    /// prefix's and the suffix's values `p_out`, `s_out` (rules
    /// `MERGE-BOTH` to `MERGE-ZERO`); a zero end is `-0` below and `+0`
    /// above.
    pub fn output(&self, decl: &Declared, p_out: f32, s_out: f32) -> (f32, f32) {
        if self.both_empty {
            let v = match decl.empty {
                Empty::Prefix => decl.dtype.round(p_out),
                Empty::Zero => 0.0,
            };
            return signless(v, v);
        }
        let (b, c) = if self.prefix_big {
            (p_out, s_out)
        } else {
            (s_out, p_out)
        };
        let mut out: Option<Iv> = None;
        for ((mode, t), [ab, ac]) in Mode::BOTH.into_iter().zip(&self.modes).zip(self.lse_scales) {
            let [w, se, r, ss, ssr] = *t;
            let (bi, ci) = (mode.input(b), mode.input(c));
            if decl.scales == Scales::LseOut {
                // The two products summed in either order, either fused.
                let (pb, pc) = (mode.mul(bi, ab), mode.mul(ci, ac));
                let v = mode
                    .add(pb, pc)
                    .hull(mode.fma(ci, ac, pb))
                    .hull(mode.fma(bi, ab, pc));
                out = Some(out.map_or(v, |x| x.hull(v)));
                continue;
            }
            let mut v = Iv::point(f32::NAN);
            let mut first = true;
            let mut take = |x: Iv| {
                v = if first { x } else { v.hull(x) };
                first = false;
            };
            // Scales by two divisions, or a reciprocal and a product; the
            // sum of products, or either fused.
            for s in [ss, ssr] {
                let pb = mode.mul(bi, r);
                let pc = mode.mul(ci, s);
                take(mode.add(pb, pc));
                take(mode.fma(ci, s, pb));
                take(mode.fma(bi, r, pc));
            }
            // The unnormalised sum, then one division.
            take(mode.div(mode.add(bi, mode.mul(ci, w)), se));
            take(mode.div(mode.fma(ci, w, bi), se));
            out = Some(out.map_or(v, |x| x.hull(v)));
        }
        let o = out.unwrap_or(Iv::ZERO);
        let (lo, hi) = to_dtype(
            decl.dtype,
            Enclosure {
                lo: f64::from(o.lo),
                hi: f64::from(o.hi),
            },
        );
        signless(lo, hi)
    }

    /// The output LSE's interval of binary32 values `(lo, hi)` (rules
    /// `MERGE-BOTH`, `MERGE-ONE`, `MERGE-EVAL`): `-inf` for both empty, the
    /// other LSE exactly for one.
    pub fn output_lse(&self) -> (f32, f32) {
        signless(self.lse.lo, self.lse.hi)
    }
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), MergeError> {
    if want == got {
        Ok(())
    } else {
        Err(MergeError::Len { arg, want, got })
    }
}

/// Checks the lengths (`prefix_output`, `prefix_lse`, `suffix_output`,
/// `suffix_lse`, then the outputs of the given lengths: `out_lo`,
/// `out_hi`, `lse_lo`, `lse_hi`), every output value's range and every
/// LSE (rule `MERGE-RANGE`).
///
/// # Errors
/// [`MergeError::Len`], [`MergeError::Output`], [`MergeError::Lse`], in
/// that order.
pub fn check_inputs(
    shape: &Shape,
    decl: &Declared,
    p_out: &[f32],
    p_lse: &[f32],
    s_out: &[f32],
    s_lse: &[f32],
    out: [usize; 4],
) -> Result<(), MergeError> {
    let (n, l) = (shape.out_elems(), shape.lse_elems());
    len("prefix_output", n, p_out.len())?;
    len("prefix_lse", l, p_lse.len())?;
    len("suffix_output", n, s_out.len())?;
    len("suffix_lse", l, s_lse.len())?;
    len("out_lo", n, out[0])?;
    len("out_hi", n, out[1])?;
    len("lse_lo", l, out[2])?;
    len("lse_hi", l, out[3])?;
    for (arg, x) in [("prefix_output", p_out), ("suffix_output", s_out)] {
        if let Some(index) = x.iter().position(|&v| v.is_nan() || v.abs() >= MAX_OUTPUT) {
            return Err(MergeError::Output { arg, index });
        }
    }
    for (arg, x) in [("prefix_lse", p_lse), ("suffix_lse", s_lse)] {
        if let Some(index) = x.iter().position(|&v| !decl.lse_ok(v)) {
            return Err(MergeError::Lse { arg, index });
        }
    }
    Ok(())
}

/// The whole merge (rules `MERGE-*`): per output element its interval of
/// dtype values into `out_lo`, `out_hi` `[T][H][D]`, per pair the output
/// LSE's into `lse_lo`, `lse_hi` (in the declared layout). Where `lo` and
/// `hi` have the same bits the element is decided.
///
/// # Errors
/// As [`check_inputs`] (nothing written then).
#[allow(clippy::too_many_arguments)]
pub fn merge_attn_states(
    shape: &Shape,
    decl: &Declared,
    p_out: &[f32],
    p_lse: &[f32],
    s_out: &[f32],
    s_lse: &[f32],
    out_lo: &mut [f32],
    out_hi: &mut [f32],
    lse_lo: &mut [f32],
    lse_hi: &mut [f32],
) -> Result<(), MergeError> {
    check_inputs(
        shape,
        decl,
        p_out,
        p_lse,
        s_out,
        s_lse,
        [out_lo.len(), out_hi.len(), lse_lo.len(), lse_hi.len()],
    )?;
    let d = shape.head_size;
    for t in 0..shape.tokens {
        for h in 0..shape.heads {
            let i = decl.layout.index(shape, t, h);
            let Some(terms) = pair_terms(decl, p_lse[i], s_lse[i]) else {
                continue; // refused by check_inputs
            };
            (lse_lo[i], lse_hi[i]) = terms.output_lse();
            let row = (t * shape.heads + h) * d;
            for e in row..row + d {
                (out_lo[e], out_hi[e]) = terms.output(decl, p_out[e], s_out[e]);
            }
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

    use crate::test_gen::Gen;

    fn decl(dtype: Dtype, base: Base) -> Declared {
        Declared {
            base,
            ..Declared::vllm(dtype)
        }
    }

    /// vLLM's CUDA kernel, in binary32 with std's `expf`/`logf` (or
    /// `exp2f`/`log2f` in base 2); `fused`: the weighted sum as one FMA;
    /// `recip`: a reciprocal and products for the scales.
    fn vllm(d: &Declared, p: f32, s: f32, a: f32, c: f32, fused: bool, recip: bool) -> (f32, f32) {
        let e = |x: f32| -> f32 {
            if x == f32::INFINITY {
                f32::NEG_INFINITY
            } else {
                x
            }
        };
        let (p, s) = (e(p), e(s));
        let m = p.max(s);
        if m == f32::NEG_INFINITY {
            return (
                match d.empty {
                    Empty::Prefix => a,
                    Empty::Zero => 0.0,
                },
                m,
            );
        }
        let ex = |x: f32| match d.base {
            Base::E => x.exp(),
            Base::Two => x.exp2(),
        };
        let (ps, ss) = (ex(p - m), ex(s - m));
        let se = ps + ss;
        let (pa, sa) = if recip {
            let r = 1.0 / se;
            (ps * r, ss * r)
        } else {
            (ps / se, ss / se)
        };
        let o = if fused {
            a.mul_add(pa, c * sa)
        } else {
            a * pa + c * sa
        };
        let l = match d.base {
            Base::E => se.ln(),
            Base::Two => se.log2(),
        };
        (d.dtype.round(o), l + m)
    }

    fn inside((lo, hi): (f32, f32), x: f32) -> bool {
        lo <= x && x <= hi
    }

    #[test]
    fn ln_enclosure_holds_std_ln() {
        let mut g = Gen(1);
        for _ in 0..10_000 {
            let x = 1.0 + 0.5 * (f64::from(g.f(1.0)) + 1.0) * 1.25;
            let e = ln_enclosure(x);
            assert!(
                e.contains(x.ln()) && e.hi - e.lo < 1e-11 * x.ln().max(1e-9),
                "{x}"
            );
        }
        assert_eq!(ln_enclosure(1.0), Enclosure { lo: 0.0, hi: 0.0 });
    }

    #[test]
    fn merge_one_side_empty_is_the_other_side_bit_for_bit() {
        let mut g = Gen(2);
        for dt in Dtype::ALL {
            for base in Base::ALL {
                let d = decl(dt, base);
                for _ in 0..2000 {
                    let l = g.f(40.0);
                    let (a, c) = (dt.round(g.f(8.0)), dt.round(g.f(8.0)));
                    for empty in [f32::NEG_INFINITY, f32::INFINITY] {
                        let t = pair_terms(&d, empty, l).unwrap();
                        assert_eq!(t.output(&d, a, c), (c, c));
                        assert_eq!(t.output_lse(), (l, l));
                        let t = pair_terms(&d, l, empty).unwrap();
                        assert_eq!(t.output(&d, a, c), (a, a));
                        assert_eq!(t.output_lse(), (l, l));
                    }
                }
            }
        }
    }

    #[test]
    fn merge_both_empty_follows_the_policy_with_lse_minus_inf() {
        for dt in Dtype::ALL {
            for (p, s) in [
                (f32::NEG_INFINITY, f32::NEG_INFINITY),
                (f32::INFINITY, f32::NEG_INFINITY),
                (f32::INFINITY, f32::INFINITY),
            ] {
                let mut d = Declared::vllm(dt);
                let t = pair_terms(&d, p, s).unwrap();
                assert!(t.both_empty());
                assert_eq!(t.output(&d, 1.5, 3.0), (1.5, 1.5));
                assert_eq!(t.output_lse(), (f32::NEG_INFINITY, f32::NEG_INFINITY));
                d.empty = Empty::Zero;
                let (lo, hi) = t.output(&d, 1.5, 3.0);
                assert_eq!((lo.to_bits(), hi.to_bits()), (0x8000_0000, 0));
            }
        }
        // +inf without inf_is_empty is refused, NaN always.
        let d = Declared {
            inf_is_empty: false,
            ..Declared::vllm(Dtype::Bf16)
        };
        assert!(pair_terms(&d, f32::INFINITY, 0.0).is_none());
        assert!(pair_terms(&Declared::vllm(Dtype::Bf16), f32::NAN, 0.0).is_none());
    }

    #[test]
    fn merge_equal_lses_halve_exactly() {
        let mut g = Gen(3);
        for dt in Dtype::ALL {
            for base in Base::ALL {
                let d = decl(dt, base);
                for _ in 0..2000 {
                    let l = g.f(1e4);
                    let (a, c) = (dt.round(g.f(8.0)), dt.round(g.f(8.0)));
                    let t = pair_terms(&d, l, l).unwrap();
                    let want = dt.round(0.5 * a + 0.5 * c);
                    assert_eq!(signless(want, want), t.output(&d, a, c));
                    // The LSE: l + log_b 2, bounded.
                    let lb = match base {
                        Base::E => core::f32::consts::LN_2,
                        Base::Two => 1.0,
                    };
                    assert!(inside(t.output_lse(), l + lb));
                }
            }
        }
    }

    #[test]
    fn binary32_evaluations_are_inside_and_bf16_mostly_decided() {
        let mut g = Gen(4);
        for dt in Dtype::ALL {
            for base in Base::ALL {
                let d = decl(dt, base);
                let (mut decided, mut n) = (0, 0);
                for k in 0..4000 {
                    let spread = [3.0, 30.0, 120.0, 1.0][k % 4];
                    let centre = if k % 8 == 7 { 1e4 } else { 8.0 };
                    let p = g.f(centre);
                    let s = p + g.f(spread);
                    let (a, c) = (dt.round(g.f(4.0)), dt.round(g.f(4.0)));
                    let t = pair_terms(&d, p, s).unwrap();
                    let want = t.output(&d, a, c);
                    for fused in [false, true] {
                        for recip in [false, true] {
                            let (o, l) = vllm(&d, p, s, a, c, fused, recip);
                            assert!(
                                inside(want, o),
                                "{dt:?} {base:?} {p} {s} {a} {c}: {o} {want:?}"
                            );
                            assert!(
                                inside(t.output_lse(), l),
                                "{p} {s}: {l} {:?}",
                                t.output_lse()
                            );
                        }
                    }
                    decided += usize::from(want.0 == want.1);
                    n += 1;
                    // Tight in binary32: a few ulps of the larger value.
                    if dt == Dtype::F32 {
                        let ulp = a.abs().max(c.abs()) * f32::EPSILON;
                        assert!(want.1 - want.0 <= 16.0 * ulp, "{want:?}");
                    }
                }
                if dt == Dtype::Bf16 {
                    assert!(decided * 10 >= n * 9, "{decided} of {n}");
                }
            }
        }
    }

    /// FlashAttention's split-KV combine of two splits in binary32: the
    /// output LSE `logf(expf(p - m) + expf(s - m)) + m`, then each scale
    /// `expf(lse - out_lse)` (`pre`: FlashAttention 3's `exp2f` of
    /// pre-scaled arguments), `out = 0 + a p_scale` then `+ c s_scale`
    /// (`fused`: an FMA).
    fn flash_combine(
        d: &Declared,
        p: f32,
        s: f32,
        a: f32,
        c: f32,
        fused: bool,
        pre: bool,
    ) -> (f32, f32) {
        let m = p.max(s);
        let se = (p - m).exp() + (s - m).exp();
        let l = se.ln() + m;
        let scale = |x: f32| {
            if pre {
                let k = core::f32::consts::LOG2_E;
                (x * k - l * k).exp2()
            } else {
                (x - l).exp()
            }
        };
        let acc = a * scale(p);
        let o = if fused {
            c.mul_add(scale(s), acc)
        } else {
            acc + c * scale(s)
        };
        (d.dtype.round(o), l)
    }

    #[test]
    fn flash_attention_combine_is_inside_lse_out_only() {
        let mut g = Gen(9);
        for dt in Dtype::ALL {
            let w = decl(dt, Base::E);
            let f = Declared {
                scales: Scales::LseOut,
                ..w
            };
            let mut weights_reject = 0;
            for k in 0..4000 {
                let p = g.f(if k % 8 == 7 { 1e4 } else { 8.0 });
                // Equal LSEs every fourth pair.
                let s = if k % 4 == 0 { p } else { p + g.f(3.0) };
                let (a, c) = (dt.round(g.f(4.0)), dt.round(g.f(4.0)));
                let tf = pair_terms(&f, p, s).unwrap();
                let tw = pair_terms(&w, p, s).unwrap();
                for fused in [false, true] {
                    for pre in [false, true] {
                        let (o, l) = flash_combine(&f, p, s, a, c, fused, pre);
                        assert!(
                            inside(tf.output(&f, a, c), o),
                            "{dt:?} {p} {s} {a} {c}: {o}"
                        );
                        assert!(inside(tf.output_lse(), l));
                        weights_reject += usize::from(!inside(tw.output(&w, a, c), o));
                    }
                }
            }
            // The weights' declaration rejects it somewhere (equal LSEs,
            // large ones), which is why it is declared apart.
            assert!(weights_reject > 0, "{dt:?}");
        }
        // One side empty: the other side's output, exactly, in both forms.
        let f = Declared {
            scales: Scales::LseOut,
            ..decl(Dtype::F32, Base::E)
        };
        let t = pair_terms(&f, 2.5, f32::NEG_INFINITY).unwrap();
        assert_eq!(t.output(&f, 1.25, 7.0), (1.25, 1.25));
        let t = pair_terms(&f, f32::INFINITY, -3.0).unwrap();
        assert_eq!(t.output(&f, 1.25, 7.0), (7.0, 7.0));
    }

    #[test]
    fn a_far_smaller_side_leaves_the_larger_decided() {
        // LSEs 104 apart in base e (150 in base 2): the smaller weight is at
        // most a few subnormals, the output the larger side's value even in
        // binary32.
        for (base, gap) in [(Base::E, 104.0f32), (Base::Two, 150.0)] {
            let d = decl(Dtype::F32, base);
            let t = pair_terms(&d, 3.0, 3.0 - gap).unwrap();
            assert_eq!(t.output(&d, 1.25, -7.0), (1.25, 1.25));
            assert_eq!(t.output_lse(), (3.0, 3.0));
            let t = pair_terms(&d, 3.0 - gap - 10.0, 3.0).unwrap();
            assert_eq!(t.output(&d, 1.25, -7.0), (-7.0, -7.0));
        }
        // 90 apart: a subnormal weight, the output still the larger side's.
        let d = decl(Dtype::Bf16, Base::E);
        let t = pair_terms(&d, 0.0, -90.0).unwrap();
        assert_eq!(t.output(&d, 0.5, 3.0), (0.5, 0.5));
    }

    #[test]
    fn large_lses_stay_finite() {
        let d = decl(Dtype::Bf16, Base::E);
        let t = pair_terms(&d, 2.0e4, 2.0e4 - 1.0).unwrap();
        let w = (-1.0f64).exp();
        let want = (1.0 + w * 3.0) / (1.0 + w);
        let (lo, hi) = t.output(&d, 1.0, 3.0);
        assert!(f64::from(lo) <= want + 0.01 && want - 0.01 <= f64::from(hi));
        // 2e4 + ln(1 + e^-1) = 20000.31326, binary32's spacing there 2^-9.
        let (lo, hi) = t.output_lse();
        assert!(lo.is_finite() && lo <= hi && hi - lo <= 2.0 / 512.0);
        assert!((f64::from(lo) - (2.0e4 + (1.0 + w).ln())).abs() <= 1.0 / 512.0);
    }

    #[test]
    fn check_inputs_and_the_whole_merge() {
        let shape = Shape::new(3, 2, 4).unwrap();
        assert_eq!(
            Shape::new(0, 2, 4),
            Err(MergeError::Zero { dim: "num_tokens" })
        );
        let d = Declared::vllm(Dtype::Bf16);
        let po: Vec<f32> = (0..24).map(|x| x as f32 * 0.25).collect();
        let so: Vec<f32> = (0..24).map(|x| 1.0 - x as f32 * 0.125).collect();
        // [H][T]: head 0 tokens 0..3, then head 1.
        let pl = [0.0, f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY, 2.0, 5.0];
        let sl = [0.0, 4.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 2.0, -1.0];
        let (mut ol, mut oh) = (vec![0f32; 24], vec![0f32; 24]);
        let (mut ll, mut lh) = (vec![0f32; 6], vec![0f32; 6]);
        merge_attn_states(
            &shape, &d, &po, &pl, &so, &sl, &mut ol, &mut oh, &mut ll, &mut lh,
        )
        .unwrap();
        // Token 1, head 0 (LSE index 1): prefix empty, the suffix's values.
        for e in 0..4 {
            let i = 2 * 4 + e; // row (t 1 * H 2 + h 0), D 4
            assert_eq!((ol[i], oh[i]), (so[i], so[i]));
        }
        assert_eq!((ll[1], lh[1]), (4.0, 4.0));
        // Token 0, head 1 (index 3): both empty, the prefix copied.
        for e in 0..4 {
            let i = 4 + e;
            assert_eq!((ol[i], oh[i]), (po[i], po[i]));
        }
        assert_eq!(ll[3], f32::NEG_INFINITY);
        let mut bad = so.clone();
        bad[5] = f32::INFINITY;
        assert_eq!(
            check_inputs(&shape, &d, &po, &pl, &bad, &sl, [24, 24, 6, 6]),
            Err(MergeError::Output {
                arg: "suffix_output",
                index: 5
            })
        );
        let mut badl = pl;
        badl[2] = f32::NAN;
        assert_eq!(
            check_inputs(&shape, &d, &po, &badl, &so, &sl, [24, 24, 6, 6]),
            Err(MergeError::Lse {
                arg: "prefix_lse",
                index: 2
            })
        );
        assert_eq!(
            check_inputs(&shape, &d, &po, &pl, &so, &sl, [24, 24, 6, 5]),
            Err(MergeError::Len {
                arg: "lse_hi",
                want: 6,
                got: 5
            })
        );
        assert_eq!(Layout::TokenMajor.index(&shape, 2, 1), 5);
        assert_eq!(Layout::HeadMajor.index(&shape, 2, 1), 5);
        assert_eq!(Layout::HeadMajor.index(&shape, 1, 0), 1);
        assert_eq!(Layout::TokenMajor.index(&shape, 1, 0), 2);
    }

    #[test]
    fn log1p_of_a_weight_below_2_pow_53_moves_an_lse_near_zero() {
        // se rounds to 1 (log(se) = 0) but log1p(w) = w: with the maximum
        // at 0 (or subnormal) the output LSE is w itself, not 0.
        for (base, p, s) in [
            (Base::E, 0.0f32, -100.0f32),
            (Base::E, 1e-40, -60.0),
            (Base::E, 9.094_947e-13, -40.0),
            (Base::Two, 0.0, -140.0),
        ] {
            let d = decl(Dtype::F32, base);
            let (w, l) = match base {
                Base::E => {
                    let w = (s - p).exp();
                    (w, w.ln_1p())
                }
                Base::Two => {
                    let w = (s - p).exp2();
                    (w, w.ln_1p() * core::f32::consts::LOG2_E)
                }
            };
            assert!(w > 0.0 && 1.0 + w == 1.0);
            let t = pair_terms(&d, p, s).unwrap();
            assert!(
                inside(t.output_lse(), l + p),
                "{p} {s}: {:?}",
                t.output_lse()
            );
            // The usual form, log(se) = 0, is inside too.
            assert!(inside(t.output_lse(), p));
        }
        // A maximum of ordinary size stays decided.
        let t = pair_terms(&decl(Dtype::F32, Base::E), 3.0, -100.0).unwrap();
        assert_eq!(t.output_lse(), (3.0, 3.0));
    }

    #[test]
    fn flushed_kernels_are_inside() {
        // FTZ: a subnormal weight flushed gives the larger side exactly; an
        // IEEE kernel the same value rounded: both inside.
        let d = decl(Dtype::F32, Base::E);
        let t = pair_terms(&d, 0.0, -95.0).unwrap();
        let (lo, hi) = t.output(&d, 1e-30, 2.0);
        assert!(lo <= 1e-30 && 1e-30 <= hi);
        let w = (-95.0f32).exp();
        let o = 1e-30 / (1.0 + w) + 2.0 * (w / (1.0 + w));
        assert!(lo <= o && o <= hi, "{o} [{lo}, {hi}]");
    }
}
