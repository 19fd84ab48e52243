//! Scaled dot-product attention, `softmax(scale q k^T + mask) v`, as the
//! field's kernels compute it: FlashAttention 2 and 3 (`flash_attn_func`),
//! torch's `scaled_dot_product_attention` (its flash, memory-efficient,
//! cuDNN and math backends), FlexAttention, Triton's tutorial kernel,
//! Flash-Decoding (split-KV), and Hugging Face's `eager_attention_forward`.
//!
//! Shapes (elements, row-major, torch SDPA's layout): `q [B][Hq][Sq][D]`,
//! `k [B][Hkv][Sk][D]`, `v [B][Hkv][Sk][Dv]`, the output `[B][Hq][Sq][Dv]`;
//! values of the model's [`Dtype`] (held as the `f32` of their value), the
//! output of the same dtype (held here as an interval of dtype values per
//! element).
//!
//! # The rules, for batch `b`, query head `h`, query `i`
//!
//! 1. `ATTN-GQA`: `Hq = g Hkv`; query head `h` reads kv head `h / g`
//!    (integer division: torch's `enable_gqa`, which repeats each kv head
//!    `g` times with `repeat_interleave`; flash-attn's MQA/GQA rule).
//! 2. `ATTN-MASK` ([`Mask`]): key `j` is visible to query `i` by the
//!    causal alignment and the window. With `i' = i` ([`Causal::TopLeft`],
//!    torch's `is_causal`, which builds `tril(ones(Sq, Sk))`) or `i' = i +
//!    Sk - Sq` ([`Causal::BottomRight`], flash-attn 2.1 and later, and the
//!    alignment a window takes without `causal`): causal keeps `j <= i'`;
//!    a [`Window`] `(left, right)` keeps `i' - left <= j <= i' + right`
//!    (flash-attn's `window_size=(left, right)`, `-1` there being "no
//!    limit", `None` here; Mistral's sliding window `W` is `left = W - 1`
//!    with causal). A query with no visible key is refused
//!    ([`AttentionError::EmptyRow`]): torch gives NaN, flash-attn 0, and the
//!    contract does not choose.
//! 3. `ATTN-SCORE`: `s_j = scale (q_i . k_j)` (default `scale =
//!    1/sqrt(D)` rounded to binary32, [`default_scale`]), then with a
//!    softcap `c_j = cap tanh(s_j / cap)` (Gemma 2), else `c_j = s_j`.
//! 4. `ATTN-SOFTMAX`: `o = sum_j p_j v_j / sum_j p_j` over the visible
//!    `j`, `p_j = exp(c_j - m)`, `m = max_j c_j`. The real-number value:
//!    [`Arithmetic`] says which binary32 evaluations of it are admitted.
//! 5. `ATTN-DECIDED`: each output element's admissible values form an
//!    interval of dtype values ([`row_enclosure`], [`attention`]): where it
//!    is one value the kernel's output must be that value bit for bit,
//!    elsewhere within the interval ([`admits`]).
//! 6. `ATTN-RANGE`: inputs must be finite and below `2^32` in magnitude
//!    (so no binary32 product or score overflows); under
//!    [`Arithmetic::Eager`] in f16 the scores, and `q` and `k` pre-scaled
//!    by `sqrt(scale)` (`q` also by `scale log2(e)`: `PRESCALE` below),
//!    must stay below f16's 65504 (beyond, the rounded value is infinite).
//!
//! # The bound
//!
//! Written per stage, `u = 2^-24`, `u2 = 2u` (a binary32 operation within
//! `u2` of its exact result: round to nearest, or the truncation of a
//! tensor core's internal alignment), `K` = [`EXP_ULPS`], `T` =
//! [`TANH_ULPS`], `n` the visible keys, `M = max_j max(|s_j|, |c_j|)`.
//! Every kernel weight is `p^_j = C w_j e^(theta_j)` with `C` common to the
//! row (it cancels in rule 4's ratio: the kernel's maximum, any common
//! rescale) and `|theta_j| <= delta_j`, the sum of:
//!
//! - `DOT`: `q . k_j` in binary32 in any order or blocking (products of
//!   f16 and bf16 values are exact in binary32; q and k pre-scaled by
//!   `sqrt(scale)` as torch's math backend does, FMA or not): within
//!   `gamma(D + 4) sum_t |q_t k_jt|` (Higham, *Accuracy and Stability of
//!   Numerical Algorithms*, 2nd ed., Lemma 3.1 and §3.1, with `u2`), times
//!   `scale`; a softcap passes it on with a factor at most 1 (`|d/ds cap
//!   tanh(s/cap)| <= 1`).
//! - `ARG`: the score's product with the scale (`u2 |s_j|`), then the
//!   argument of `exp` or `exp2`: `log2(e)` folded into the scale (a
//!   constant rounded once: `u2 |s_j - m|`), the products `s log2(e)` and
//!   `m log2(e)` (or one of them inside an FMA: `u2 (|s_j| + M)` in natural
//!   log units, the `log2(e)` cancelling), the subtraction (`u2 |s_j -
//!   m|`): within `4 u2 (|s_j| + M)`.
//! - `CAP`: with a softcap, `s / cap` (within 2 `u2`, a division),
//!   `tanh` within `T` ulps (PTX `tanh.approx.f32`, FlashAttention's
//!   `fast_tanh`, is about 94), the product: `2 u2 |s_j| + (T + 2) u2 |c_j|`.
//! - `EXP`: `exp` or `exp2` within `K` ulps: `(K + 1) u2`.
//! - `RESCALE`: an online softmax multiplies the accumulator and the row
//!   sum by the same rounded `alpha = exp(m_old - m_new)` at each new
//!   maximum; keys seen before it carry its error, later keys do not. At
//!   most `n` rescales (block size 1), each within `(K + 1) u2`, and their
//!   arguments' roundings (`u2` of `|m_old - m_new|` twice) telescope to
//!   `2 u2 (2 M)`: `n (K + 1) u2 + 4 u2 M`.
//! - `MERGE`: a split-KV merge (Flash-Decoding) weights each split by
//!   `exp(lse_s - lse_max)`, `lse_s = m_s + log(l_s)`: a `log` and an `exp`
//!   within `K` ulps and four roundings of magnitude `M + ln n + 1`:
//!   `(2 K + 6) u2 + 4 u2 (M + ln n + 1)`.
//! - `MERGE-NORM`: FlashAttention's combine (`combine_attn_seqk_parallel`)
//!   does not divide by the merged weights' sum: it writes `o = sum_s
//!   exp(lse_s - lse_logsum) o_s`, each split's `o_s` already normalised,
//!   `lse_logsum = log(sum_s exp(lse_s - lse_max)) + lse_max`. With the
//!   rounded `lse_s`, `o = e^(-eps) sum_s (e^(lse_s) / sum_t e^(lse_t))
//!   (1 + kappa_s) o_s`: the ratio is MERGE's weighted mean, but the
//!   common `eps` (the `log` within `K` ulps of a value below `ln n + 1`,
//!   the sum of the exps within `gamma(n)` and `K` ulps, the add of
//!   `lse_max`, of magnitude `M + ln n + 1`) and each split's `kappa_s`
//!   (its `exp` and its argument's rounding, of magnitude up to `2 M + ln
//!   n + 1`) do not cancel. `x = log(sum_s e^(lse_s - lse_max))` is at
//!   most `x_up = sum_(j != top) w_j e^(delta_j) / (w_top e^(-delta_top))`
//!   (`top` the key of largest weight, `ln y <= y - 1`), so the add of
//!   `lse_max` is off by at most `min(u2 (M + ln n + 1), x_up)`, and the
//!   splits but the largest weigh at most `min(1, x_up)` of the row: `o`
//!   moves by a relative `(2 K + 6) u2 + gamma(n) + (K + 4) u2 (ln n + 1) +
//!   min(u2 (M + ln n + 1), x_up) + a`, taken into the sums' part below
//!   (relative to `sum w+_j |v_j| / W'`, at least `|o|`), plus `a max|v|`,
//!   `a = u2 (2 M + ln n + 2) min(1, x_up)` (the arguments' roundings).
//!   Where one split dominates (`u2 (2 M + ln n + 2) < 0.1`), the largest
//!   split's term of `lse_sum` is `exp(0)` within `K` ulps and the others
//!   sum to at most `2 x_up` (each within a factor 2), each addition off
//!   by at most its addend: `x` computed is within `(K + 1) u2 + 3 x_up`
//!   of the true one, and the add of `lse_max` off by at most `|x|`: the
//!   `gamma(n) + (K + 4) u2 (ln n + 1) + min(...)` part is then at most
//!   `2 (K + 1) u2 + 7 x_up`, the smaller taken.
//!   Without it a correct combine with scores near 1000 in f32 fell
//!   outside; with one dominant key (PEAK) it costs nothing.
//! - `EAGER` ([`Arithmetic::Eager`] only): the score rounded to the dtype
//!   after the matmul and again after the scale (Hugging Face's `matmul(q,
//!   k^T) * scaling`), and with a softcap three more times (`/ cap`,
//!   `tanh`, `* cap`, each an operator on a dtype tensor): `u_d (2 |s_j| +
//!   |s_j| + 2 |c_j|)` with `u_d` the dtype's unit roundoff (bf16 `2^-8`,
//!   f16 `2^-11`: 8 and 11 significant bits), plus half the dtype's least subnormal per rounding.
//!   `PRESCALE` (eager only): torch's math backend without the float
//!   upcast (torch before 2.5, or `allow_fp16_bf16_reduction_math_sdp(True)`:
//!   `_scaled_dot_product_attention_math` in `attention.cpp` multiplies
//!   `q` and `k` each by `sqrt(scale)` in the input dtype before the
//!   matmul) and Triton 2.1's tutorial (`q = (q * qk_scale).to(float16)`)
//!   round each product term's factors to the dtype: `q_t k_t scale (1 +
//!   e)(1 + e')`, `|e|, |e'| <= u_d`, so the score moves by `(2 u_d +
//!   u_d^2) scale sum_t |q_t k_t|` (the unscaled magnitudes, not `|s_j|`:
//!   a cancelling dot product is hit hardest), plus, where a factor
//!   rounds to a subnormal (absolute error at most `sub_d / 2`), `sub_d /
//!   2 * sqrt(scale') (sum_t |q_t| + sum_t |k_t|) + D (sub_d / 2)^2` with
//!   `scale' = max(scale, (scale log2 e)^2)` (the larger pre-scale of `q`).
//! - `REF`: this module's own enclosure of `exp(c_j - m)` (from core's
//!   binary32 `exp`, [`crate::moe_routing`]'s rule) and of `tanh`, as a
//!   log half-width.
//!
//! The weights' part. With `o_c = sum w_j v_j / sum w_j` computed in
//! binary64 from the reference weights, any weights `w_j e^(theta_j)` give
//! `o' - o_c = sum w_j (e^(theta_j) - 1)(v_j - o_c) / sum w_j e^(theta_j)`,
//! so `|o' - o_c| <= sum w_j (e^(delta_j) - 1) |v_j - o_c| / W'` (`W' =
//! sum w_j e^(-delta_j)`; `e^d - 1 <= d / (1 - d)` below 1/2, else from
//! core's `exp`). A key that dominates (PEAK: `v_j = o`)
//! adds nothing, so there the bound is tight whatever the rescales.
//!
//! The sums' part. The kernel's numerator `sum p^_j (1 + pi_j) v_j` and
//! denominator `sum p^_j (1 + pi'_j)` are each accumulated in binary32
//! (`gamma(3n + 8)`: `n` terms, the rescales' products, a merge), with
//! `|pi_j| <= u_Pj`, the rounding of `P` to the dtype before the `PV`
//! product ([`Arithmetic::Flash`], [`Arithmetic::Eager`]: `u_Pj = u_d`;
//! [`Arithmetic::F32`]: 0; `pi'` is `pi` or 0: a row sum of the rounded or
//! the unrounded `P`), then one division, or a reciprocal and a product
//! (within `4 u2`). `P-ONE`: a key with `eta_j` below `u_d / 2` has its
//! `P` within `eta_j` of 1, which the dtype rounds to exactly 1. Its
//! running maximum lies between its own score and the row's, so `eta_j =
//! max(0, max_(k != j) (c_k + e_k) - c_j + e_j)` (`e` a score's error:
//! DOT, CAP, EAGER) plus the argument's roundings (`3 u2 (|s_j| + M)`:
//! ARG less the score's product, which `e` holds) and the `exp` (the
//! dominant key's own dot error cancels: it is its own maximum; eager's normalised `P` uses
//! `eta_j = (W / w_j - 1) e^(2 delta_max) + 4 u2`, the others' share),
//! which the dtype rounds to exactly 1: `u_Pj = 1.01 eta_j`
//! (PEAK's dominant key, UNIFORM's equal scores). So, with `w+_j = w_j
//! e^(delta_j)`, `|o^ - o'| <= 1.01 ((2 gamma + ubar_P + 4 u2) sum w+_j
//! |v_j| + sum w+_j u_Pj |v_j|) / W'`, `ubar_P = sum w+_j u_Pj / W'`; an eager softmax that
//! normalises `P` before rounding it and sums `P v` without a division is
//! inside the same bound. `TOP`: each ratio `sum p^_j y_j / sum p^_j`
//! above (`y >= 0`: `|v_j|`, `u_Pj`, `u_Pj |v_j|`) is also at most `sum_j
//! r_j y_j`, `r_j = (w_j / w_top) e^(delta_j + delta_top)` (`top` the key
//! of largest weight, `r_top = 1`: the denominator is at least `p^_top`);
//! the smaller bound is taken (no `e^(2 delta_top)` where one key
//! dominates). Exponentials that underflow or are flushed to
//! zero, and `P` rounded to a dtype subnormal or zero, move each key's
//! weight by at most `min(p_j, 2^-126 + sub_d / 2)` (later rescales only
//! shrink it; none where `p_j`, at least about `w_j`, is normal): `sum_j that (|v_j| + max|v|) / W` (f16's `P` below `2^-14`
//! is subnormal: this term is what f16 costs on long rows), over `W' (1 -
//! gamma)`; eager's normalised `P` that may be subnormal, up to `(2^-126
//! + sub_d / 2) W e^(2 delta_max)` in weight units, or its own size
//! `w_j e^(delta_j + 3 delta_max)` (rounded to 0), the smaller.
//!
//! Every first-order term above is taken at twice the `u` of one rounding
//! (`u2`), which covers the second-order terms. The output is then also
//! within `[min v - e, max v + e]` (`e` the sums' part: a convex
//! combination of the visible `v`), and the interval is the intersection,
//! rounded outward to binary32 and then to the dtype (to nearest, a
//! monotone map): [`row_enclosure`].
//!
//! Sources: Dao, *FlashAttention-2* (2023), §3.1 and Algorithm 1 (online
//! softmax: a running maximum, the accumulator and the row sum rescaled by
//! `exp(m_old - m_new)`, `P` cast to the input dtype before the `PV` MMA,
//! the row sum in float, one final division); Dao, Haziza, Massa,
//! Sizov, *Flash-Decoding for long-context inference* (2023: split-KV,
//! merged by the log-sum-exp); torch `scaled_dot_product_attention` docs
//! (`is_causal`: `tril`, top-left; `scale` default `1/sqrt(E)`;
//! `enable_gqa`); flash-attn README, "Changes in v2.1" (causal aligned to
//! the bottom-right corner) and `window_size`; Gemma 2 (logit softcap
//! `cap tanh(s / cap)`); Mistral 7B (sliding window attention); Hugging
//! Face transformers `eager_attention_forward` (`softmax(..., dtype=
//! torch.float32).to(query.dtype)`); Higham, *Accuracy and Stability of
//! Numerical Algorithms* (2nd ed.), §2.2, §3.1, Lemma 3.1.

use crate::compare::sqrt_f64;
use crate::moe_routing::{abs_f64, exp_enclosure, pow2, U};

/// A closed interval of reals: [`crate::moe_routing::Enclosure`].
pub use crate::moe_routing::Enclosure;

/// The model's element type: [`crate::dtype::Dtype`].
pub use crate::dtype::Dtype;
/// Whether a kernel's output bits are admitted by an interval (rule
/// `ATTN-DECIDED`): [`crate::rms_norm::admits`], the same rule.
pub use crate::rms_norm::admits;

/// The accuracy of the kernel's `exp` and `exp2`, in ulps: CUDA's `expf`
/// (2), `exp2f` and PTX `ex2.approx.f32` (FlashAttention's `exp2f` under
/// `--use_fast_math`, Triton's `tl.exp2`/`tl.exp`: about 2), with room.
pub const EXP_ULPS: u32 = 4;

/// The accuracy of the kernel's `tanh` (softcap), in ulps: PTX
/// `tanh.approx.f32` (FlashAttention's `cutlass::fast_tanh`), whose
/// measured relative error `1.113e-5` is 94 ulps in this measure
/// ([`crate::act_and_mul::DEFAULT_ACT_ULPS`]'s note), with room.
pub const TANH_ULPS: u32 = 128;

/// The widest head dimension (`D`, `Dv`) the contract takes.
pub const MAX_HEAD_DIM: usize = 1024;

/// The most keys a row may have (`Sk`): the bound's `gamma(3n + 8)`
/// needs `n u2` well below 1.
pub const MAX_KEYS: usize = 1 << 20;

/// How causal masking aligns the query rows with the key columns when
/// `Sq != Sk` (rule `ATTN-MASK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Causal {
    /// Query `i` sees keys `j <= i`: torch's `is_causal=True`
    /// (`torch.ones(L, S).tril(diagonal=0)`), Hugging Face's masks when
    /// the cache is empty.
    TopLeft,
    /// Query `i` sees keys `j <= i + Sk - Sq`: flash-attn 2.1 and later
    /// (`causal=True`), FlashInfer, vLLM's prefill with a cache, torch's
    /// `causal_lower_right`.
    BottomRight,
}

impl Causal {
    /// The name a check takes: `"top_left"` or `"bottom_right"`.
    pub const fn name(self) -> &'static str {
        match self {
            Causal::TopLeft => "top_left",
            Causal::BottomRight => "bottom_right",
        }
    }
}

/// A local window around the aligned diagonal, flash-attn's
/// `window_size=(left, right)`: key `j` visible to query `i` iff `i' -
/// left <= j <= i' + right` (`None`: no limit on that side, flash-attn's
/// `-1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// Keys before the aligned diagonal a query sees.
    pub left: Option<usize>,
    /// Keys after it.
    pub right: Option<usize>,
}

/// The mask (rule `ATTN-MASK`): optional causal alignment, optional
/// window. Without causal the window aligns bottom-right (flash-attn).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Mask {
    /// Causal masking and its alignment, or none.
    pub causal: Option<Causal>,
    /// A local window, or none.
    pub window: Option<Window>,
}

impl Mask {
    /// Query `i`'s aligned position `i'` (`i`, or `i + Sk - Sq`).
    pub fn aligned(&self, i: usize, sq: usize, sk: usize) -> i64 {
        match self.causal {
            Some(Causal::TopLeft) => i as i64,
            _ => i as i64 + sk as i64 - sq as i64,
        }
    }

    /// Whether key `j` is visible to query `i` (rule `ATTN-MASK`).
    pub fn visible(&self, i: usize, j: usize, sq: usize, sk: usize) -> bool {
        let a = self.aligned(i, sq, sk);
        let j = j as i64;
        if self.causal.is_some() && j > a {
            return false;
        }
        if let Some(w) = self.window {
            if w.left.is_some_and(|l| j < a - l as i64) {
                return false;
            }
            if w.right.is_some_and(|r| j > a + r as i64) {
                return false;
            }
        }
        true
    }

    /// The visible keys of query `i`, as the half-open range `[first,
    /// end)` (the mask keeps a contiguous run), empty as `(0, 0)`.
    pub fn range(&self, i: usize, sq: usize, sk: usize) -> (usize, usize) {
        let a = self.aligned(i, sq, sk);
        let mut lo = 0i64;
        let mut hi = sk as i64; // exclusive
        if self.causal.is_some() {
            hi = hi.min(a + 1);
        }
        if let Some(w) = self.window {
            if let Some(l) = w.left {
                lo = lo.max(a - l as i64);
            }
            if let Some(r) = w.right {
                hi = hi.min(a + r as i64 + 1);
            }
        }
        if lo >= hi {
            (0, 0)
        } else {
            (lo as usize, hi as usize)
        }
    }
}

/// Which binary32 evaluations of rule `ATTN-SOFTMAX` a kernel declares
/// (the bound's terms, module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    /// Scores in binary32 (any order or blocking), scaled in binary32
    /// (possibly with `log2(e)` folded in for `exp2`), an online softmax
    /// over blocks of any size or a split-KV merge, `P` rounded to the
    /// input dtype before the `PV` product, `PV` accumulated in binary32,
    /// one final division: FlashAttention 2 and 3, torch's flash,
    /// memory-efficient and cuDNN backends, FlexAttention, Triton's
    /// tutorial (`p.to(tl.float16)` before `tl.dot(p, v)`).
    Flash,
    /// As [`Arithmetic::Flash`] with `P` kept in binary32: torch's math
    /// backend on f16/bf16 (upcast to float since torch 2.5), an f32
    /// reference.
    F32,
    /// The eager form: scores rounded to the input dtype (a bf16 matmul's
    /// output, then the scale, and a softcap's three operators; or `q`
    /// and `k` pre-scaled by `sqrt(scale)` and rounded to the dtype before
    /// the matmul: the module docs' `PRESCALE`), softmax in binary32 then
    /// rounded to the input dtype, `PV` accumulated in binary32 and
    /// rounded: Hugging Face's `eager_attention_forward`; torch's math
    /// backend on f16/bf16 before torch 2.5 or with
    /// `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`;
    /// Triton 2.1's tutorial kernel (`q` pre-scaled in f16, `P` rounded
    /// before `PV`, an online softmax: inside this bound too).
    Eager,
}

impl Arithmetic {
    /// Every arithmetic, in the order identification reports them.
    pub const ALL: [Arithmetic; 3] = [Arithmetic::Flash, Arithmetic::F32, Arithmetic::Eager];

    /// The name a check takes: `"flash"`, `"f32"`, `"eager"`.
    pub const fn name(self) -> &'static str {
        match self {
            Arithmetic::Flash => "flash",
            Arithmetic::F32 => "f32",
            Arithmetic::Eager => "eager",
        }
    }
}

/// A shape, a declaration or an input that cannot be computed. Displays
/// as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttentionError {
    /// A dimension is 0.
    Zero {
        /// `"batch"`, `"q_heads"`, `"kv_heads"`, `"q_len"`, `"k_len"`,
        /// `"head_dim"`, `"v_head_dim"`.
        dim: &'static str,
    },
    /// `Hq` is not a multiple of `Hkv`.
    Heads {
        /// Query heads.
        hq: usize,
        /// Key/value heads.
        hkv: usize,
    },
    /// `D` or `Dv` over [`MAX_HEAD_DIM`], or `Sk` over [`MAX_KEYS`].
    TooLarge {
        /// The dimension's name.
        dim: &'static str,
        /// Its value.
        value: usize,
    },
    /// A buffer length overflows `usize`.
    Overflow,
    /// The scale is not finite and positive.
    Scale,
    /// The softcap is not finite and positive.
    Softcap,
    /// A buffer has the wrong number of elements.
    Len {
        /// `"q"`, `"k"`, `"v"`, `"out_lo"`, `"out_hi"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// An input element is NaN, infinite or `2^32` or more in magnitude
    /// (rule `ATTN-RANGE`).
    OutOfRange {
        /// `"q"`, `"k"` or `"v"`.
        arg: &'static str,
        /// Its index, row-major.
        index: usize,
    },
    /// A query sees no key under the mask (rule `ATTN-MASK`).
    EmptyRow {
        /// The query position.
        query: usize,
    },
    /// An eager f16 score, or a `q` or `k` element pre-scaled by
    /// `sqrt(scale)` (or `q` by `scale log2(e)`), reaches 65504 (rule
    /// `ATTN-RANGE`).
    ScoreRange {
        /// The query position.
        query: usize,
    },
}

impl core::fmt::Display for AttentionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            AttentionError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            AttentionError::Heads { hq, hkv } => write!(
                f,
                "q_heads {hq} is not a multiple of kv_heads {hkv} (GQA needs Hq = g Hkv)"
            ),
            AttentionError::TooLarge { dim, value } => {
                write!(f, "{dim} {value} is over the contract's limit")
            }
            AttentionError::Overflow => write!(f, "a buffer length overflows usize"),
            AttentionError::Scale => write!(f, "scale must be finite and positive"),
            AttentionError::Softcap => write!(f, "softcap must be finite and positive"),
            AttentionError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            AttentionError::OutOfRange { arg, index } => write!(
                f,
                "{arg}[{index}] is not finite or is 2^32 or more in magnitude"
            ),
            AttentionError::EmptyRow { query } => write!(
                f,
                "query {query} sees no key under the mask (torch gives NaN, flash-attn 0: refused)"
            ),
            AttentionError::ScoreRange { query } => write!(
                f,
                "query {query}: a score or a pre-scaled q or k reaches f16's 65504 under the eager arithmetic"
            ),
        }
    }
}

/// The dimensions of one call (rule `ATTN-GQA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
}

impl Shape {
    /// `[b, hq, hkv, sq, sk, d, dv]`, each at least 1, `hq` a multiple of
    /// `hkv`, `d`, `dv` at most [`MAX_HEAD_DIM`], `sk` at most
    /// [`MAX_KEYS`], every buffer's bytes within `usize`.
    ///
    /// # Errors
    /// [`AttentionError::Zero`], [`AttentionError::Heads`],
    /// [`AttentionError::TooLarge`], [`AttentionError::Overflow`].
    pub fn new(dims: [usize; 7]) -> Result<Shape, AttentionError> {
        let names = [
            "batch",
            "q_heads",
            "kv_heads",
            "q_len",
            "k_len",
            "head_dim",
            "v_head_dim",
        ];
        for (k, &v) in dims.iter().enumerate() {
            if v == 0 {
                return Err(AttentionError::Zero { dim: names[k] });
            }
        }
        let [b, hq, hkv, sq, sk, d, dv] = dims;
        if !hq.is_multiple_of(hkv) {
            return Err(AttentionError::Heads { hq, hkv });
        }
        for (dim, value, max) in [
            ("head_dim", d, MAX_HEAD_DIM),
            ("v_head_dim", dv, MAX_HEAD_DIM),
            ("k_len", sk, MAX_KEYS),
        ] {
            if value > max {
                return Err(AttentionError::TooLarge { dim, value });
            }
        }
        let prod = |v: &[usize]| {
            v.iter()
                .try_fold(8usize, |a, &x| a.checked_mul(x))
                .is_some()
        };
        if !(prod(&[b, hq, sq, d]) && prod(&[b, hkv, sk, d.max(dv)]) && prod(&[b, hq, sq, dv])) {
            return Err(AttentionError::Overflow);
        }
        Ok(Shape {
            b,
            hq,
            hkv,
            sq,
            sk,
            d,
            dv,
        })
    }

    /// `[B, Hq, Hkv, Sq, Sk, D, Dv]`.
    pub fn dims(&self) -> [usize; 7] {
        [self.b, self.hq, self.hkv, self.sq, self.sk, self.d, self.dv]
    }
    /// Batch `B`.
    pub fn batch(&self) -> usize {
        self.b
    }
    /// Query heads `Hq`.
    pub fn q_heads(&self) -> usize {
        self.hq
    }
    /// Key/value heads `Hkv`.
    pub fn kv_heads(&self) -> usize {
        self.hkv
    }
    /// Queries `Sq`.
    pub fn q_len(&self) -> usize {
        self.sq
    }
    /// Keys `Sk`.
    pub fn k_len(&self) -> usize {
        self.sk
    }
    /// The q/k head dimension `D`.
    pub fn head_dim(&self) -> usize {
        self.d
    }
    /// The v head dimension `Dv`.
    pub fn v_head_dim(&self) -> usize {
        self.dv
    }
    /// The kv head query head `h` reads (rule `ATTN-GQA`): `h / (Hq /
    /// Hkv)`.
    pub fn kv_head(&self, h: usize) -> usize {
        h / (self.hq / self.hkv)
    }
    /// Elements of `q`.
    pub fn q_elems(&self) -> usize {
        self.b * self.hq * self.sq * self.d
    }
    /// Elements of `k`.
    pub fn k_elems(&self) -> usize {
        self.b * self.hkv * self.sk * self.d
    }
    /// Elements of `v`.
    pub fn v_elems(&self) -> usize {
        self.b * self.hkv * self.sk * self.dv
    }
    /// Elements of the output.
    pub fn out_elems(&self) -> usize {
        self.b * self.hq * self.sq * self.dv
    }
    /// Output rows `B Hq Sq` (one per (batch, query head, query)).
    pub fn rows(&self) -> usize {
        self.b * self.hq * self.sq
    }
}

/// `1/sqrt(d)` rounded to binary32: torch's default `scale`
/// (`sdp::calculate_scale`, a double then a float kernel argument) and
/// flash-attn's `softmax_scale` default (`q.shape[-1] ** (-0.5)`).
pub fn default_scale(d: usize) -> f32 {
    (1.0 / sqrt_f64(d as f64)) as f32
}

/// What a kernel declares: its arithmetic, dtype, scale, softcap and mask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Declared {
    arithmetic: Arithmetic,
    dtype: Dtype,
    scale: f32,
    softcap: Option<f32>,
    mask: Mask,
}

impl Declared {
    /// A declaration.
    ///
    /// # Errors
    /// [`AttentionError::Scale`], [`AttentionError::Softcap`].
    pub fn new(
        arithmetic: Arithmetic,
        dtype: Dtype,
        scale: f32,
        softcap: Option<f32>,
        mask: Mask,
    ) -> Result<Declared, AttentionError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(AttentionError::Scale);
        }
        if softcap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
            return Err(AttentionError::Softcap);
        }
        Ok(Declared {
            arithmetic,
            dtype,
            scale,
            softcap,
            mask,
        })
    }
    /// The arithmetic.
    pub fn arithmetic(&self) -> Arithmetic {
        self.arithmetic
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// The scale.
    pub fn scale(&self) -> f32 {
        self.scale
    }
    /// The softcap.
    pub fn softcap(&self) -> Option<f32> {
        self.softcap
    }
    /// The mask.
    pub fn mask(&self) -> Mask {
        self.mask
    }
    /// The same declaration under another arithmetic.
    pub fn with_arithmetic(&self, arithmetic: Arithmetic) -> Declared {
        Declared {
            arithmetic,
            ..*self
        }
    }
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), AttentionError> {
    if want == got {
        Ok(())
    } else {
        Err(AttentionError::Len { arg, want, got })
    }
}

/// Rule `ATTN-RANGE`'s element test: finite and below `2^32`.
pub fn in_range(x: f32) -> bool {
    x.abs() < 4_294_967_296.0
}

/// Checks the lengths (`q`, `k`, `v`, then the outputs of the given
/// lengths), that every input element is in range ([`in_range`]) and that
/// every query sees a key.
///
/// # Errors
/// [`AttentionError::Len`], [`AttentionError::OutOfRange`],
/// [`AttentionError::EmptyRow`], in that order.
pub fn check_inputs(
    shape: &Shape,
    decl: &Declared,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: [usize; 2],
) -> Result<(), AttentionError> {
    len("q", shape.q_elems(), q.len())?;
    len("k", shape.k_elems(), k.len())?;
    len("v", shape.v_elems(), v.len())?;
    len("out_lo", shape.out_elems(), out[0])?;
    len("out_hi", shape.out_elems(), out[1])?;
    for (arg, x) in [("q", q), ("k", k), ("v", v)] {
        if let Some(index) = x.iter().position(|&e| !in_range(e)) {
            return Err(AttentionError::OutOfRange { arg, index });
        }
    }
    for i in 0..shape.sq {
        if decl.mask.range(i, shape.sq, shape.sk).1 == 0 {
            return Err(AttentionError::EmptyRow { query: i });
        }
    }
    Ok(())
}

/// Relative slack for this module's binary64 roundings.
const F64_SLACK: f64 = pow2(-40);

/// `gamma(n) = n u2 / (1 - n u2)` (Higham Lemma 3.1 with `u2`).
fn gamma2(n: f64) -> f64 {
    let t = n * 2.0 * U;
    t / (1.0 - t)
}

/// The dtype's unit roundoff `u_d` and half its least subnormal.
fn dtype_unit(d: Dtype) -> (f64, f64) {
    match d {
        Dtype::F32 => (U, pow2(-150)),
        Dtype::Bf16 => (pow2(-8), pow2(-134)),
        Dtype::F16 => (pow2(-11), pow2(-25)),
    }
}

/// Natural log's crude upper bound for `x >= 1` (binary64): the exponent
/// times `ln 2` plus one (no_std has no `ln`).
fn ln_upper(x: f64) -> f64 {
    let e = ((x.to_bits() >> 52) & 0x7FF) as i64 - 1023;
    (e as f64 + 1.0) * core::f64::consts::LN_2 + 1.0
}

/// An enclosure of `tanh(z)` (odd): for `|z| <= 1/16` its series, `z -
/// z^3/3 <= tanh z <= z - z^3/3 + 2 z^5/15` (for `z > 0`); above, `(1 - q)
/// / (1 + q)` with `q = e^(-2z)` from [`exp_enclosure`].
fn tanh_enclosure(z: f64) -> Enclosure {
    if z < 0.0 {
        let t = tanh_enclosure(-z);
        return Enclosure {
            lo: -t.hi,
            hi: -t.lo,
        };
    }
    if z == 0.0 {
        return Enclosure { lo: 0.0, hi: 0.0 };
    }
    if z <= 0.0625 {
        let z3 = z * z * z;
        let lo = (z - z3 / 3.0) * (1.0 - F64_SLACK);
        let hi = (z - z3 / 3.0 + 2.0 * z3 * z * z / 15.0) * (1.0 + F64_SLACK);
        return Enclosure { lo, hi };
    }
    let q = exp_enclosure(-2.0 * z);
    Enclosure {
        lo: ((1.0 - q.hi) / (1.0 + q.hi) * (1.0 - F64_SLACK)).max(0.0),
        hi: ((1.0 - q.lo) / (1.0 + q.lo) * (1.0 + F64_SLACK)).min(1.0),
    }
}

/// The binary32 value at or below `x`.
fn f32_down(x: f64) -> f32 {
    let r = x as f32;
    if f64::from(r) <= x || r.is_nan() {
        r
    } else {
        r.next_down()
    }
}

/// The binary32 value at or above `x`.
fn f32_up(x: f64) -> f32 {
    let r = x as f32;
    if f64::from(r) >= x || r.is_nan() {
        r
    } else {
        r.next_up()
    }
}

/// Scratch a row needs per visible key: the reference weight `w_j` and its
/// bound `delta_j`. Callers give `n` of each ([`Mask::range`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KeyTerm {
    /// The reference weight `exp(c_j - m)` (binary64, the enclosure's
    /// middle; 0 for a key more than 80 below the maximum).
    pub w: f64,
    /// `delta_j`, the bound on the log of the kernel's weight error.
    pub delta: f64,
    /// `m - c_j`, the key's distance below the row's maximum score.
    pub gap: f64,
    /// `u_Pj`, the bound on the relative rounding of the key's `P` to the
    /// dtype (module docs, the sums' part).
    pub up: f64,
    /// The key's absolute underflow error: 0 where `w_j (1 - 2 delta_j)` is
    /// a normal of the dtype (and of binary32), else `min(w_j
    /// e^(delta_j), 2^-126 + sub_d / 2)` (`2^-113` for a key more than 80
    /// below).
    pub tiny: f64,
}

/// The enclosure of one output row (rules `ATTN-SCORE`, `ATTN-SOFTMAX`,
/// the bound in the module docs): query `i` of a row whose query vector is
/// `q_row` (`D` long), its kv head's keys `k_head [Sk][D]` and values
/// `v_head [Sk][Dv]`; `terms` scratch of at least the visible keys' count,
/// `out` `Dv` long gets the real-number enclosure of each element (binary64;
/// round with [`to_dtype`]).
///
/// # Errors
/// [`AttentionError::EmptyRow`], [`AttentionError::ScoreRange`].
///
/// # Panics
/// If a slice is shorter than the shape says.
#[allow(clippy::too_many_arguments)]
pub fn row_enclosure(
    shape: &Shape,
    decl: &Declared,
    i: usize,
    q_row: &[f32],
    k_head: &[f32],
    v_head: &[f32],
    terms: &mut [KeyTerm],
    out: &mut [Enclosure],
) -> Result<(), AttentionError> {
    let (d, dv) = (shape.d, shape.dv);
    let (first, end) = decl.mask.range(i, shape.sq, shape.sk);
    if end == 0 {
        return Err(AttentionError::EmptyRow { query: i });
    }
    let n = end - first;
    let terms = &mut terms[..n];
    let scale = f64::from(decl.scale);
    let (u_d, sub_d) = dtype_unit(decl.dtype);
    let u2 = 2.0 * U;
    let kx = f64::from(EXP_ULPS);
    let kt = f64::from(TANH_ULPS);
    // Pass 1: scores (binary64), their enclosure half-widths, the per-key
    // error terms that do not depend on M; kept in terms as (c, delta).
    let mut m = f64::NEG_INFINITY;
    let mut big_m = 0.0f64;
    for (t, j) in terms.iter_mut().zip(first..end) {
        let kr = &k_head[j * d..(j + 1) * d];
        let (mut dot, mut abs, mut l1, mut amax) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for (&a, &b) in q_row.iter().zip(kr) {
            let p = f64::from(a) * f64::from(b); // exact: 24 + 24 bits
            dot += p;
            abs += abs_f64(p);
            l1 += abs_f64(f64::from(a)) + abs_f64(f64::from(b));
            amax = amax.max(abs_f64(f64::from(a))).max(abs_f64(f64::from(b)));
        }
        let s = scale * dot;
        let s_abs = abs_f64(s);
        // The binary64 sum's own error, and the kernel's DOT term.
        let mut delta = scale * abs * (gamma2(d as f64 + 4.0) + 2.0 * F64_SLACK);
        let c = match decl.softcap {
            None => s,
            Some(cap) => {
                let cap = f64::from(cap);
                let th = tanh_enclosure(s / cap);
                let (lo, hi) = (cap * th.lo, cap * th.hi);
                let c = 0.5 * (lo + hi);
                let ca = abs_f64(c);
                delta += 0.5 * (hi - lo) + ca * 4.0 * F64_SLACK + abs_f64(s) * F64_SLACK;
                delta += 2.0 * u2 * s_abs + (kt + 2.0) * u2 * ca;
                c
            }
        };
        let ca = abs_f64(c);
        if decl.arithmetic == Arithmetic::Eager {
            let rounds = if decl.softcap.is_some() { 5.0 } else { 2.0 };
            let u_d1 = u_d * (1.0 + pow2(-6));
            delta += u_d1
                * (2.0 * s_abs
                    + if decl.softcap.is_some() {
                        s_abs + 2.0 * ca
                    } else {
                        0.0
                    })
                + rounds * sub_d;
            // PRESCALE: q and k each rounded after a pre-scale (module docs).
            let pre =
                scale.max(scale * scale * core::f64::consts::LOG2_E * core::f64::consts::LOG2_E);
            delta += u_d1 * (2.0 + u_d) * scale * abs
                + sub_d * sqrt_f64(pre) * l1 * (1.0 + F64_SLACK)
                + d as f64 * sub_d * sub_d;
            if decl.dtype == Dtype::F16
                && (s_abs.max(ca) * (1.0 + 4.0 * u_d) + 1.0 >= 65504.0
                    || amax * sqrt_f64(pre) * (1.0 + 4.0 * u_d) >= 65504.0)
            {
                return Err(AttentionError::ScoreRange { query: i });
            }
        }
        // delta so far is the score's error (DOT, CAP, EAGER, REF's
        // tanh); ARG's own part follows.
        let ds = delta;
        delta += 4.0 * u2 * s_abs;
        m = m.max(c);
        big_m = big_m.max(s_abs).max(ca);
        *t = KeyTerm {
            w: c,
            delta,
            gap: ds,
            up: 3.0 * u2 * s_abs,
            tiny: 0.0,
        };
    }
    // The two largest c_j + ds_j: the kernel's maximum score is at most
    // the largest over the other keys, or the key's own.
    let (mut best1, mut best1_at, mut best2) = (f64::NEG_INFINITY, usize::MAX, f64::NEG_INFINITY);
    for (x, t) in terms.iter().enumerate() {
        let top = t.w + t.gap;
        if top > best1 {
            best2 = best1;
            best1 = top;
            best1_at = x;
        } else if top > best2 {
            best2 = top;
        }
    }
    let nf = n as f64;
    let common = 4.0 * u2 * big_m // ARG's M
        + (kx + 1.0) * u2 // EXP
        + nf * (kx + 1.0) * u2 + 4.0 * u2 * big_m // RESCALE
        + (2.0 * kx + 6.0) * u2 + 4.0 * u2 * (big_m + ln_upper(nf) + 1.0) // MERGE
        + F64_SLACK * (big_m + 1.0);
    // Pass 2: reference weights (REF) and delta_j.
    let mut delta_max = 0.0f64;
    for (x, t) in terms.iter_mut().enumerate() {
        let (c, ds) = (t.w, t.gap);
        let other = if x == best1_at { best2 } else { best1 };
        // P-ONE's eta for the flash form: the kernel's running maximum
        // exceeds its own score by at most this, plus the argument's
        // roundings and the exp.
        let eta = (other - c + ds).max(0.0)
            + t.up
            + 3.0 * u2 * big_m
            + (kx + 1.0) * u2
            + F64_SLACK * (big_m + 1.0);
        let arg = c - m;
        let mut delta = t.delta + common;
        let w = if arg < -80.0 {
            0.0
        } else {
            let e = exp_enclosure(arg);
            let mid = 0.5 * (e.lo + e.hi);
            delta += (e.hi - e.lo) / (2.0 * e.lo) + F64_SLACK;
            delta_max = delta_max.max(delta);
            mid
        };
        let under = pow2(-126) + sub_d;
        // P at its rounding is at least about w_j (its running maximum is
        // at most the row's): normal there, no underflow error.
        let normal = if decl.dtype == Dtype::F16 {
            pow2(-14)
        } else {
            pow2(-126)
        };
        let tiny = if w * (1.0 - 2.0 * delta) >= normal {
            0.0
        } else if w > 0.0 {
            (w * up_exp(delta)).min(under)
        } else {
            pow2(-113)
        };
        *t = KeyTerm {
            w,
            delta,
            gap: m - c,
            up: eta,
            tiny,
        };
    }
    let big_w: f64 = terms.iter().map(|t| t.w).sum::<f64>() * (1.0 - F64_SLACK);
    // W' = sum w_j e^(-delta_j), the least the kernel's weights can sum to.
    let big_w_dn: f64 =
        terms.iter().map(|t| t.w * dn_exp(t.delta)).sum::<f64>() * (1.0 - F64_SLACK);
    // P's rounding (P-ONE): a key within u_d / 2 of the row's maximum (its
    // gap, twice its error, and under eager the normalisation by the sum)
    // has P within that of 1, which the dtype rounds to 1 exactly: its
    // rounding error is its distance from 1, not u_d.
    let mut up_bar = 0.0f64;
    let normal = if decl.dtype == Dtype::F16 {
        pow2(-14)
    } else {
        pow2(-126)
    };
    let spread = up_exp(2.0 * delta_max);
    for t in terms.iter_mut() {
        if decl.arithmetic == Arithmetic::Eager && t.w > 0.0 {
            // Eager rounds the normalised P_j = p_j / sum p, at least
            // w_j e^(-2 delta_max) / W: where that may be subnormal, its
            // rounding's absolute error is up to sub_d / 2 of the sum,
            // `W e^(2 delta_max)` in weight units.
            // Its rounding moves it by at most itself (to 0) or half a
            // subnormal spacing: P_j <= w_j e^(delta_j) / W', in weight
            // units (times W e^(2 delta_max), W / W' <= e^(delta_max)) at
            // most w_j e^(delta_j + 3 delta_max), or the spacing's bound.
            let p_lo = t.w * dn_exp(2.0 * t.delta) / (big_w * spread);
            if p_lo < normal {
                let own = t.w * up_exp(t.delta + 3.0 * delta_max);
                t.tiny = t.tiny.max(own.min((pow2(-126) + sub_d) * big_w * spread));
            }
        }
        t.up = match decl.arithmetic {
            Arithmetic::F32 => 0.0,
            a => {
                let eta = if a == Arithmetic::Flash {
                    t.up
                } else if t.w > 0.0 {
                    // Eager's P is normalised: 1 - p_j is the others' share,
                    // each key's error relative to j's (e^(2 delta)).
                    let rest = (big_w * (1.0 + 2.0 * F64_SLACK) / t.w - 1.0).max(0.0);
                    rest * spread + 4.0 * u2
                } else {
                    1.0
                };
                if eta < 0.49 * u_d {
                    1.01 * eta
                } else {
                    u_d * (1.0 + pow2(-6))
                }
            }
        };
        up_bar += t.w * up_exp(t.delta) * t.up;
    }
    let up_bar = up_bar / big_w_dn;
    // MERGE-NORM: a combine that does not divide by its weights' sum
    // (module docs). x_up bounds log(lse_sum) by the others' share of the
    // key of largest weight (ln y <= y - 1); the add of lse_max is off by
    // at most that or its rounding; the splits other than the largest
    // weigh at most min(1, x_up) of the row and carry their exp
    // arguments' roundings (magnitude up to 2 M + ln n + 1).
    let top = terms
        .iter()
        .enumerate()
        .fold(0, |b, (x, t)| if t.w > terms[b].w { x } else { b });
    let rest: f64 = terms
        .iter()
        .enumerate()
        .filter(|&(x, _)| x != top)
        .map(|(_, t)| t.w * up_exp(t.delta) + t.tiny)
        .sum();
    let x_up = rest / (terms[top].w * dn_exp(terms[top].delta)) * (1.0 + F64_SLACK);
    let lnn = ln_upper(nf);
    let share = x_up.min(1.0);
    let merge_args = u2 * (2.0 * big_m + lnn + 2.0) * share;
    // One split dominating: x, its errors and the add all within a few x_up.
    let dominated = if u2 * (2.0 * big_m + lnn + 2.0) < 0.1 {
        2.0 * (kx + 1.0) * u2 + 7.0 * x_up
    } else {
        f64::INFINITY
    };
    let merge_norm = (2.0 * kx + 6.0) * u2
        + (gamma2(nf)
            + (kx + 4.0) * u2 * (lnn + 1.0)
            + (u2 * (big_m + lnn + 1.0)).min(1.01 * x_up))
        .min(dominated)
        + merge_args;
    // TOP: the kernel's weights relative to the key of largest weight,
    // p^_j / p^_top <= r_j = (w_j / w_top) e^(delta_j + delta_top), bound
    // any ratio sum p^_j y_j / sum p^_j (y >= 0) by sum r_j y_j (the
    // denominator is at least p^_top): no e^(2 delta_top) where one key
    // dominates (PEAK under eager, whose dominant score error is large).
    let (w_top, d_top) = (terms[top].w, terms[top].delta);
    let r = |x: usize, t: &KeyTerm| {
        if x == top {
            1.0
        } else {
            t.w / w_top * up_exp(t.delta + d_top) * (1.0 + F64_SLACK)
        }
    };
    let up_top: f64 = terms.iter().enumerate().map(|(x, t)| r(x, t) * t.up).sum();
    let up_bar = up_bar.min(up_top);
    let sums = 1.01 * (2.0 * gamma2(3.0 * nf + 8.0) + up_bar + 4.0 * u2 + merge_norm);
    let vmax_row = |e: usize| {
        let mut a = 0.0f64;
        for j in first..end {
            a = a.max(abs_f64(f64::from(v_head[j * dv + e])));
        }
        a
    };
    for (e, slot) in out.iter_mut().enumerate().take(dv) {
        let (mut a, mut b, mut p1, mut tn, mut td) = (0.0f64, 0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let (mut bt, mut p1t) = (0.0f64, 0.0f64);
        let (mut vmin, mut vmax) = (f64::INFINITY, f64::NEG_INFINITY);
        for (xi, (t, j)) in terms.iter().zip(first..end).enumerate() {
            let x = f64::from(v_head[j * dv + e]);
            let wu = t.w * up_exp(t.delta);
            let rj = r(xi, t);
            a += t.w * x;
            b += wu * abs_f64(x);
            p1 += wu * t.up * abs_f64(x);
            bt += rj * abs_f64(x);
            p1t += rj * t.up * abs_f64(x);
            tn += t.tiny * abs_f64(x);
            td += t.tiny;
            vmin = vmin.min(x);
            vmax = vmax.max(x);
        }
        let o = a / big_w;
        let mut dev1 = 0.0f64;
        for (t, j) in terms.iter().zip(first..end) {
            if t.w > 0.0 {
                let x = f64::from(v_head[j * dv + e]);
                dev1 += t.w * up_expm1(t.delta) * abs_f64(x - o);
            }
        }
        let vabs = vmax_row(e);
        let dev1 = dev1 / big_w_dn * (1.0 + F64_SLACK);
        let bw = (b / big_w_dn).min(bt);
        let p1w = (p1 / big_w_dn).min(p1t);
        let dev2 = sums * bw + 1.01 * p1w + 1.01 * merge_args * vabs;
        let tiny = 1.01 * (tn + td * vabs) / (big_w_dn * (1.0 - gamma2(3.0 * nf + 8.0)));
        let slack = F64_SLACK * (b / big_w + abs_f64(o)) * 4.0;
        let e_sums = dev2 + tiny + slack;
        *slot = Enclosure {
            lo: (o - dev1 - e_sums).max(vmin - e_sums),
            hi: (o + dev1 + e_sums).min(vmax + e_sums),
        };
    }
    Ok(())
}

/// An upper bound on `e^d - 1` for `d >= 0`: `d / (1 - d)` below 1/2,
/// else from [`exp_enclosure`] (`inf` past 88).
fn up_expm1(d: f64) -> f64 {
    if d < 0.5 {
        d / (1.0 - d) * (1.0 + F64_SLACK)
    } else if d > 88.0 {
        f64::INFINITY
    } else {
        exp_enclosure(d).hi - 1.0
    }
}

/// An upper bound on `e^d` for `d >= 0`.
fn up_exp(d: f64) -> f64 {
    1.0 + up_expm1(d)
}

/// A lower bound on `e^-d` for `d >= 0`: `1 - d` below 1/2, else from
/// [`exp_enclosure`].
fn dn_exp(d: f64) -> f64 {
    if d < 0.5 {
        (1.0 - d) * (1.0 - F64_SLACK)
    } else {
        exp_enclosure(-d).lo
    }
}

/// The interval of dtype values `(lo, hi)` a binary32 result in `e`
/// rounds to (the ends rounded outward to binary32, then to the dtype to
/// nearest even: monotone).
pub fn to_dtype(dtype: Dtype, e: Enclosure) -> (f32, f32) {
    (dtype.round(f32_down(e.lo)), dtype.round(f32_up(e.hi)))
}

/// The whole call (rules `ATTN-*`): per output row its enclosure
/// ([`row_enclosure`]) rounded to the dtype ([`to_dtype`]) into `lo`,
/// `hi` `[B][Hq][Sq][Dv]`. `terms` scratch at least `Sk` long, `row` at
/// least `Dv`.
///
/// # Errors
/// As [`check_inputs`], then [`AttentionError::ScoreRange`] (the outputs
/// then hold partial results).
#[allow(clippy::too_many_arguments)]
pub fn attention(
    shape: &Shape,
    decl: &Declared,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    terms: &mut [KeyTerm],
    row: &mut [Enclosure],
    lo: &mut [f32],
    hi: &mut [f32],
) -> Result<(), AttentionError> {
    check_inputs(shape, decl, q, k, v, [lo.len(), hi.len()])?;
    let [b, hq, _, sq, sk, d, dv] = shape.dims();
    let hkv = shape.hkv;
    for bi in 0..b {
        for h in 0..hq {
            let kh = bi * hkv + shape.kv_head(h);
            let k_head = &k[kh * sk * d..(kh + 1) * sk * d];
            let v_head = &v[kh * sk * dv..(kh + 1) * sk * dv];
            for i in 0..sq {
                let r = (bi * hq + h) * sq + i;
                let q_row = &q[r * d..(r + 1) * d];
                row_enclosure(shape, decl, i, q_row, k_head, v_head, terms, &mut row[..dv])?;
                for e in 0..dv {
                    let (l, u) = to_dtype(decl.dtype, row[e]);
                    lo[r * dv + e] = l;
                    hi[r * dv + e] = u;
                }
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

    fn data(g: &mut Gen, n: usize, s: f32, dt: Dtype) -> Vec<f32> {
        (0..n).map(|_| dt.round(g.f(s))).collect()
    }

    /// The exact binary64 reference (std's exp and tanh).
    fn exact(shape: &Shape, decl: &Declared, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
        let [b, hq, hkv, sq, sk, d, dv] = shape.dims();
        let mut out = vec![0.0; shape.out_elems()];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + shape.kv_head(h);
                for i in 0..sq {
                    let r = (bi * hq + h) * sq + i;
                    let mut c = vec![f64::NEG_INFINITY; sk];
                    for (j, cj) in c.iter_mut().enumerate() {
                        if decl.mask.visible(i, j, sq, sk) {
                            let mut dot = 0.0;
                            for t in 0..d {
                                dot +=
                                    f64::from(q[r * d + t]) * f64::from(k[(kh * sk + j) * d + t]);
                            }
                            let s = f64::from(decl.scale) * dot;
                            *cj = match decl.softcap {
                                None => s,
                                Some(cap) => f64::from(cap) * (s / f64::from(cap)).tanh(),
                            };
                        }
                    }
                    let m = c.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = c.iter().map(|&x| (x - m).exp()).collect();
                    let sw: f64 = w.iter().sum();
                    for e in 0..dv {
                        let a: f64 = (0..sk)
                            .map(|j| w[j] * f64::from(v[(kh * sk + j) * dv + e]))
                            .sum();
                        out[r * dv + e] = a / sw;
                    }
                }
            }
        }
        out
    }

    fn run(shape: &Shape, decl: &Declared, q: &[f32], k: &[f32], v: &[f32]) -> Vec<Enclosure> {
        let [b, hq, hkv, sq, sk, d, dv] = shape.dims();
        let mut terms = vec![KeyTerm::default(); sk];
        let mut out = vec![Enclosure::default(); shape.out_elems()];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + shape.kv_head(h);
                for i in 0..sq {
                    let r = (bi * hq + h) * sq + i;
                    row_enclosure(
                        shape,
                        decl,
                        i,
                        &q[r * d..(r + 1) * d],
                        &k[kh * sk * d..(kh + 1) * sk * d],
                        &v[kh * sk * dv..(kh + 1) * sk * dv],
                        &mut terms,
                        &mut out[r * dv..(r + 1) * dv],
                    )
                    .unwrap();
                }
            }
        }
        out
    }

    #[test]
    fn attn_softmax_enclosure_holds_the_binary64_reference() {
        let masks = [
            Mask::default(),
            Mask {
                causal: Some(Causal::TopLeft),
                window: None,
            },
            Mask {
                causal: Some(Causal::BottomRight),
                window: Some(Window {
                    left: Some(3),
                    right: None,
                }),
            },
        ];
        let mut g = Gen(7);
        for (case, &(sq, sk, d, dv)) in [(1, 17, 64, 64), (5, 9, 80, 48), (7, 33, 16, 8)]
            .iter()
            .enumerate()
        {
            let shape = Shape::new([2, 4, 2, sq, sk, d, dv]).unwrap();
            for dt in Dtype::ALL {
                let s = [0.3f32, 1.0, 3.0][case];
                let q = data(&mut g, shape.q_elems(), s * 4.0, dt);
                let k = data(&mut g, shape.k_elems(), s, dt);
                let v = data(&mut g, shape.v_elems(), 2.0, dt);
                for mask in masks {
                    for softcap in [None, Some(5.0f32)] {
                        for a in Arithmetic::ALL {
                            let decl =
                                Declared::new(a, dt, default_scale(d), softcap, mask).unwrap();
                            let want = exact(&shape, &decl, &q, &k, &v);
                            let got = run(&shape, &decl, &q, &k, &v);
                            for (x, e) in want.iter().zip(&got) {
                                assert!(e.contains(*x), "{a:?} {dt:?} {mask:?}: {x} {e:?}");
                                // Tight under F32: a small multiple of u of the v scale.
                                if a == Arithmetic::F32 {
                                    assert!(e.hi - e.lo < 4e-3, "{e:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn attn_mask_alignments_and_windows() {
        let tl = Mask {
            causal: Some(Causal::TopLeft),
            window: None,
        };
        let br = Mask {
            causal: Some(Causal::BottomRight),
            window: None,
        };
        // Sq 2, Sk 5: top-left row 0 sees key 0 only; bottom-right sees 0..=3.
        assert_eq!(tl.range(0, 2, 5), (0, 1));
        assert_eq!(br.range(0, 2, 5), (0, 4));
        assert_eq!(br.range(1, 2, 5), (0, 5));
        let w = Mask {
            causal: Some(Causal::BottomRight),
            window: Some(Window {
                left: Some(2),
                right: None,
            }),
        };
        assert_eq!(w.range(1, 2, 5), (2, 5));
        for i in 0..2 {
            for j in 0..5 {
                let (a, b) = w.range(i, 2, 5);
                assert_eq!(w.visible(i, j, 2, 5), (a..b).contains(&j));
            }
        }
        // Bottom-right with Sq > Sk leaves the first queries empty: refused.
        let shape = Shape::new([1, 1, 1, 4, 2, 4, 4]).unwrap();
        let decl = Declared::new(Arithmetic::Flash, Dtype::Bf16, 0.5, None, br).unwrap();
        let z = vec![0f32; 8];
        assert_eq!(
            check_inputs(&shape, &decl, &[0f32; 16], &z, &z, [16, 16]),
            Err(AttentionError::EmptyRow { query: 0 })
        );
    }

    #[test]
    fn a_dominant_key_and_equal_scores_are_nearly_decided() {
        // One key 40 above the rest: the output is its v row.
        let shape = Shape::new([1, 1, 1, 1, 64, 4, 4]).unwrap();
        let mut k = vec![0f32; 64 * 4];
        k[17 * 4] = 10.0;
        let q = vec![8.0f32, 0.0, 0.0, 0.0];
        let v: Vec<f32> = (0..256).map(|x| (x % 7) as f32 - 3.0 + 0.125).collect();
        for a in Arithmetic::ALL {
            let decl = Declared::new(a, Dtype::Bf16, 0.5, None, Mask::default()).unwrap();
            let (mut lo, mut hi) = (vec![0f32; 4], vec![0f32; 4]);
            let mut terms = vec![KeyTerm::default(); 64];
            let mut row = vec![Enclosure::default(); 4];
            attention(
                &shape, &decl, &q, &k, &v, &mut terms, &mut row, &mut lo, &mut hi,
            )
            .unwrap();
            for e in 0..4 {
                assert_eq!((lo[e], hi[e]), (v[68 + e], v[68 + e]), "{a:?}");
            }
        }
        // q = 0: every score 0, the output the mean of v, decided in f32
        // arithmetic on a short row.
        let shape = Shape::new([1, 1, 1, 1, 5, 4, 1]).unwrap();
        let v = [1.0f32, 2.0, 3.0, 4.0, 6.0];
        let decl = Declared::new(Arithmetic::F32, Dtype::Bf16, 0.5, None, Mask::default()).unwrap();
        let (mut lo, mut hi) = ([0f32; 1], [0f32; 1]);
        let mut terms = vec![KeyTerm::default(); 5];
        let mut row = vec![Enclosure::default(); 1];
        attention(
            &shape, &decl, &[0.0; 4], &[1.0; 20], &v, &mut terms, &mut row, &mut lo, &mut hi,
        )
        .unwrap();
        let mean = Dtype::Bf16.round(3.2);
        assert_eq!((lo[0], hi[0]), (mean, mean));
    }

    #[test]
    fn attn_edge_rows_one_key_ties_and_extremes() {
        // One visible key (a window of 0 on the bottom-right diagonal):
        // the output is that key's v, decided in every arithmetic in bf16
        // and f16.
        let mut g = Gen(11);
        for dt in Dtype::ALL {
            let shape = Shape::new([1, 2, 1, 3, 6, 8, 4]).unwrap();
            let q = data(&mut g, shape.q_elems(), 3.0, dt);
            let k = data(&mut g, shape.k_elems(), 3.0, dt);
            let v = data(&mut g, shape.v_elems(), 5.0, dt);
            let mask = Mask {
                causal: Some(Causal::BottomRight),
                window: Some(Window {
                    left: Some(0),
                    right: None,
                }),
            };
            for a in Arithmetic::ALL {
                for softcap in [None, Some(2.0f32)] {
                    let decl = Declared::new(a, dt, 0.35, softcap, mask).unwrap();
                    let got = run(&shape, &decl, &q, &k, &v);
                    for (x, e) in got.iter().enumerate() {
                        let (r, c) = (x / 4, x % 4);
                        let j = r % 3 + 3; // i' = i + 3
                        let want = v[j * 4 + c];
                        let (lo, hi) = to_dtype(dt, *e);
                        if dt == Dtype::F32 {
                            // f32's ulps are finer than the division's error
                            // and a split-KV combine's (MERGE-NORM).
                            assert!(lo <= want && want <= hi && hi - lo < 2e-5 * want.abs());
                        } else {
                            assert_eq!((lo, hi), (want, want), "{a:?} {dt:?} {softcap:?}");
                        }
                    }
                }
            }
        }
        // Exact ties (identical keys): the mean of their v, contained.
        let shape = Shape::new([1, 1, 1, 1, 3, 2, 1]).unwrap();
        let decl =
            Declared::new(Arithmetic::Flash, Dtype::F32, 1.0, None, Mask::default()).unwrap();
        let e = run(
            &shape,
            &decl,
            &[1.0, 2.0],
            &[1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
            &[1.0, 2.0, 7.0],
        );
        let w = 1.0 / (2.0 + (-3.0f64).exp());
        assert!(e[0].contains(w * 3.0 + (1.0 - 2.0 * w) * 7.0), "{e:?}");
        // Scores near +-2^31 (inputs near 2^32 refused, below accepted):
        // the max subtraction keeps everything finite.
        assert!(!in_range(4_294_967_296.0) && in_range(4_294_967_040.0));
        let decl = Declared::new(Arithmetic::F32, Dtype::Bf16, 1.0, None, Mask::default()).unwrap();
        let e = run(
            &shape,
            &decl,
            &[65536.0, 0.0],
            &[1.0, 0.0, -1.0, 0.0, 0.5, 0.0],
            &[1.0, 2.0, 7.0],
        );
        assert_eq!(to_dtype(Dtype::Bf16, e[0]), (1.0, 1.0));
        // Eager f16 scores past 65504 are refused.
        let decl =
            Declared::new(Arithmetic::Eager, Dtype::F16, 1.0, None, Mask::default()).unwrap();
        let mut terms = vec![KeyTerm::default(); 3];
        let mut row = [Enclosure::default(); 1];
        let r = row_enclosure(
            &shape,
            &decl,
            0,
            &[300.0, 0.0],
            &[300.0, 0.0, 1.0, 0.0, 0.0, 0.0],
            &[1.0, 2.0, 3.0],
            &mut terms,
            &mut row,
        );
        assert_eq!(r, Err(AttentionError::ScoreRange { query: 0 }));
    }

    /// FlashAttention's split-KV combine (`combine_attn_seqk_parallel`):
    /// each split's `o_s` normalised, `o = sum exp(lse_s - lse_logsum)
    /// o_s`, no division by the weights' sum (`MERGE-NORM`): with scores
    /// near 1000 in f32 the common rounding of `lse_logsum` moved `o` by
    /// about `1e-5` relative, outside the enclosure before that term.
    #[test]
    fn a_combine_without_a_division_is_inside() {
        let mut g = Gen(5);
        for big in [1000.0f32, 100_000.0] {
            for _ in 0..200 {
                let shape = Shape::new([1, 1, 1, 1, 4, 1, 1]).unwrap();
                let k: Vec<f32> = (0..4).map(|_| big + g.f(2.0)).collect();
                let v = vec![1.0 + g.f(0.5); 4];
                let decl = Declared::new(Arithmetic::Flash, Dtype::F32, 1.0, None, Mask::default())
                    .unwrap();
                // One key per split: m_s = k_j, l_s = 1, o_s = v_j.
                let lse: Vec<f32> = k.iter().map(|&m| m + 1f32.ln()).collect();
                let lm = lse.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                let ls: f32 = lse.iter().map(|&x| (x - lm).exp()).sum();
                let logsum = ls.ln() + lm;
                let o: f32 = lse
                    .iter()
                    .zip(&v)
                    .map(|(&x, &vj)| (x - logsum).exp() * vj)
                    .sum();
                let e = run(&shape, &decl, &[1.0], &k, &v);
                let (lo, hi) = to_dtype(Dtype::F32, e[0]);
                assert!(lo <= o && o <= hi, "{big}: {o} outside [{lo}, {hi}]");
            }
        }
    }

    /// torch's math backend without the float upcast
    /// (`_scaled_dot_product_attention_math`: `q` and `k` times
    /// `sqrt(scale)` in bf16, the matmul rounded to bf16, softmax in f32
    /// rounded to bf16, `PV` rounded): a dot product that cancels, each
    /// factor rounded the other way on the `+` and `-` terms, moves the
    /// score by about `2 u_d scale sum |q k|` (`PRESCALE`), far beyond `2
    /// u_d |s|`. Inside eager's enclosure; outside before that term.
    #[test]
    fn torch_math_without_the_upcast_is_inside_eager() {
        let dt = Dtype::Bf16;
        let d = 64;
        let scale = default_scale(d);
        let c = (f64::from(scale)).sqrt() as f32;
        // a: q c rounds up the most in [1, 2), b: down the most.
        let rel = |x: f32| (f64::from(dt.round(x * c)) - f64::from(x * c)) / f64::from(x * c);
        let cands: Vec<f32> = (0..128).map(|t| 1.0 + t as f32 / 128.0).collect();
        let a = cands
            .iter()
            .cloned()
            .fold(1.0f32, |x, y| if rel(y) > rel(x) { y } else { x });
        let b = cands
            .iter()
            .cloned()
            .fold(1.0f32, |x, y| if rel(y) < rel(x) { y } else { x });
        let q: Vec<f32> = (0..d).map(|t| if t < 32 { a } else { b }).collect();
        let mut k = vec![0f32; 2 * d];
        for (t, x) in k[..d].iter_mut().enumerate() {
            *x = if t < 32 { a } else { -b };
        }
        let v = [1.0f32, -1.0];
        let shape = Shape::new([1, 1, 1, 1, 2, d, 1]).unwrap();
        let decl = Declared::new(Arithmetic::Eager, dt, scale, None, Mask::default()).unwrap();
        let s: Vec<f32> = (0..2)
            .map(|j| {
                let dot: f32 = (0..d)
                    .map(|t| dt.round(q[t] * c) * dt.round(k[j * d + t] * c))
                    .sum();
                dt.round(dot)
            })
            .collect();
        let m = s[0].max(s[1]);
        let p: Vec<f32> = s.iter().map(|&x| (x - m).exp()).collect();
        let l = p[0] + p[1];
        let o = dt.round(dt.round(p[0] / l) * v[0] + dt.round(p[1] / l) * v[1]);
        let e = run(&shape, &decl, &q, &k, &v);
        let (lo, hi) = to_dtype(dt, e[0]);
        assert!(lo <= o && o <= hi, "{o} outside [{lo}, {hi}]");
        // The case is adversarial: the pre-scaled score is off by far more
        // than eager's 2 u_d |s| (the dot product nearly cancels).
        let exact = f64::from(scale)
            * (0..d)
                .map(|t| f64::from(q[t]) * f64::from(k[t]))
                .sum::<f64>();
        assert!((f64::from(s[0]) - exact).abs() > 8.0 * pow2(-8) * exact.abs());
    }

    #[test]
    fn declarations_and_shapes_are_checked() {
        assert_eq!(
            Shape::new([1, 3, 2, 1, 1, 8, 8]),
            Err(AttentionError::Heads { hq: 3, hkv: 2 })
        );
        assert_eq!(
            Shape::new([1, 1, 1, 0, 1, 8, 8]),
            Err(AttentionError::Zero { dim: "q_len" })
        );
        assert!(Shape::new([1, 1, 1, 1, 1, MAX_HEAD_DIM + 1, 8]).is_err());
        let s = Shape::new([1, 8, 2, 1, 1, 8, 8]).unwrap();
        assert_eq!((s.kv_head(3), s.kv_head(4), s.kv_head(7)), (0, 1, 1));
        assert_eq!(
            Declared::new(Arithmetic::Flash, Dtype::F16, 0.0, None, Mask::default()),
            Err(AttentionError::Scale)
        );
        assert_eq!(
            Declared::new(
                Arithmetic::Flash,
                Dtype::F16,
                1.0,
                Some(-1.0),
                Mask::default()
            ),
            Err(AttentionError::Softcap)
        );
        assert_eq!(default_scale(64), 0.125);
        assert_eq!(default_scale(128), (1.0 / 128f64.sqrt()) as f32);
    }
}
