//! The logits penalties a server applies before sampling: the repetition
//! penalty (Keskar et al., "CTRL: A Conditional Transformer Language
//! Model for Controllable Generation", arXiv:1909.05858, sec. 4.1), and
//! the frequency and presence penalties of the OpenAI API, as vLLM,
//! Hugging Face transformers, SGLang and LightLLM compute them. Every
//! operation is one IEEE binary32 rounding (or one fused multiply-add
//! where a [`Frequency`] names it), so the contract is exact: a kernel
//! that declares its [`Declared`] forms is held to them bit for bit.
//!
//! Shapes (elements, row-major): `logits [B][V]` (f32; `-inf` marks a
//! masked token), per row [`Penalties`] `[B]`, and which tokens each row
//! has seen, either as token ids (`prompt [B][P]` and `output [B][O]`,
//! int64, padded with `V`: [`bin_counts`] turns them into counts) or as
//! counts (`prompt_counts [B][V]`, `output_counts [B][V]`, u32: how many
//! times token `i` occurs in the row's prompt and in its generated
//! output). The output is `out [B][V]`, the penalised logits.
//!
//! # The rules, for row `r` and token `i`
//!
//! With `l` the logit, `pc = prompt_counts[r][i]`, `oc =
//! output_counts[r][i]`, `(p, f, q)` the row's repetition, frequency and
//! presence penalties, `RN` rounding to nearest even in binary32:
//!
//! 1. `PEN-ID`: an id in `0..V` counts once per occurrence; the id `V`
//!    is padding and is ignored (vLLM pads every row's prompt and output
//!    tokens to the batch's longest with `vocab_size`, "because it does
//!    not correspond to any valid token ID"); any other id is an error.
//! 2. `PEN-REP` (repetition): applied iff the token is seen under the
//!    [`Scope`] (`pc > 0 || oc > 0`, or `oc > 0`), once however often it
//!    occurs, as the [`Repetition`] form says: [`Repetition::Divide`],
//!    `l > 0 ? RN(l / p) : RN(l * p)`; [`Repetition::Reciprocal`], `l >
//!    0 ? RN(l * r) : RN(l * p)`, `r` the row's multiplier, `RN(1 / p)`
//!    unless the kernel declares an approximate one (rule
//!    `PEN-RECIP-ULPS`). Rule `PEN-REP-ZERO`: the
//!    comparison's direction at zero changes no bit, because for a finite
//!    `p > 0` the values `±0 * p`, `±0 / p` and `±0 * RN(1/p)` are all the
//!    zero of the logit's own sign: vLLM's `where(logits > 0, logits / p,
//!    logits * p)`, Hugging Face's `where(score < 0, score * p, score /
//!    p)` and a `>= 0` test compute the same bits, on NaN (NaN either
//!    way) and on infinities (`inf / p = inf`, `-inf * p = -inf`) too.
//! 3. `PEN-FREQ` (frequency): with `c = RN(oc)` (exact below 2^24), as
//!    the [`Frequency`] form says: [`Frequency::Separate`], `RN(l -
//!    RN(f * c))`; [`Frequency::Fma`], `fma(-f, c, l)`, one rounding;
//!    [`Frequency::FmaScaled`], rule `PEN-FMA-SCALED`;
//!    [`Frequency::Accumulate`], `RN(l - s)` with `s` the `oc`-fold sum
//!    `RN(RN(+0 + f) + f) ...`; [`Frequency::Sparse`] and
//!    [`Frequency::FmaSparse`], [`Frequency::Separate`]'s and
//!    [`Frequency::Fma`]'s value for a generated token (`oc > 0`) and `l`
//!    itself for any other (its logit is never written). The others are
//!    applied to every token: `oc = 0` gives `RN(f * 0)`, a zero signed as
//!    `f`.
//! 4. `PEN-PRES` (presence): [`Frequency::Separate`], [`Frequency::Fma`]
//!    and [`Frequency::FmaScaled`], `RN(l - RN(q * m))` with `m = 1` if
//!    `oc > 0` else `0` (fused or not alike: `q * m` is exact);
//!    [`Frequency::Accumulate`], `RN(l - (oc > 0 ? q : +0))`;
//!    [`Frequency::Sparse`] and [`Frequency::FmaSparse`], `oc > 0 ? RN(l -
//!    q) : l`.
//! 5. `PEN-FMA-SCALED`: a kernel that writes the repetition step as a
//!    product by a per-token multiplier (vLLM v1's `logits *= scale`,
//!    `scale` being `1` for an unseen token, the row's multiplier `r`
//!    (`RN(1/p)`, or rule `PEN-RECIP-ULPS`) for a positive logit and `p`
//!    otherwise) and the frequency step right after it,
//!    contracted: `fma(l, scale, -RN(f * c))`, the repetition's product
//!    unrounded (LLVM's `visitFSUBForFMACombine` folds `fsub(fmul(a, b),
//!    fmul(c, d))` into `fma(a, b, fneg(fmul(c, d)))` when both products
//!    have one use). An unseen token's `fma(l, 1, -RN(f * c))` is
//!    [`Frequency::Separate`]'s value. Only [`Repetition::Reciprocal`] and
//!    [`Repetition::ReciprocalAll`] are products; with a division, or when
//!    the order does not put frequency right after repetition, it is
//!    [`Frequency::Fma`].
//! 6. `PEN-ORDER`: the three steps in the [`Order`] declared (vLLM:
//!    repetition, then frequency, then presence).
//! 7. `PEN-ZERO-SIGN`: rules 3 and 4 are IEEE's on signed zeros: `x - (+0)
//!    = x` for every `x`, `-0` included, but `-0 - (-0) = +0`. So under
//!    [`Frequency::Separate`], [`Frequency::Fma`] and
//!    [`Frequency::FmaScaled`] an unseen token's `-0` logit becomes `+0`
//!    when `f` or `q` is negative (or `-0`), where
//!    [`Frequency::Accumulate`] (a `+0` accumulator) and the sparse forms
//!    ([`Frequency::Sparse`], [`Frequency::FmaSparse`], which leave a token
//!    not generated alone) keep it `-0`: the one place those and
//!    [`Frequency::Separate`] and [`Frequency::Fma`] part.
//! 8. `PEN-NEUTRAL`: `p = 1`, `f = +0`, `q = +0` give the logit bit for
//!    bit under every declaration (`l / 1 = l * 1 = l`, `RN(1/1) = 1`,
//!    `l - (+0) = l`, `fma(-0, c, l) = l`), NaN as NaN; under
//!    `recip_ulps > 0`, for the member `r = RN(1/1) = 1` (rule
//!    `PEN-RECIP-ULPS` also admits `1 - 2^-24`, `1 + 2^-23` and so on,
//!    which scale a positive seen logit).
//! 9. `PEN-RECIP-ULPS` (an approximate reciprocal): under
//!    [`Repetition::Reciprocal`] and [`Repetition::ReciprocalAll`] the
//!    kernel computes ONE multiplier `r` per row and uses that same `r`
//!    for every token of the row, in `RN(l * r)` and in rule
//!    `PEN-FMA-SCALED`'s `fma(l, r, -RN(f * c))`. With
//!    [`Declared::recip_ulps`] `= 0` (the default), `r = RN(1/p)`; with
//!    `recip_ulps = n` in `1..=`[`MAX_RECIP_ULPS`], `r` is any member of
//!    [`reciprocals`]`(p, n)`: `RN(1/p)` and every binary32 `r` with
//!    `|r - 1/p| <= n ulp(1/p)`, the distance taken exactly, where
//!    `ulp(x) = 2^(max(e, -126) - 23)` for `2^e <= x < 2^(e+1)` (the
//!    spacing of binary32 in `x`'s binade). For `n >= 1` the set holds
//!    both binary32 neighbours of `1/p` (faithful rounding); it has at
//!    most `3 n + 1` members (`2 n` of them below `1/p` only where the
//!    binade below, at half the spacing, is within reach: `1/p` a power
//!    of two or just above one). Why: Triton's float32 `/` lowers to PTX
//!    `div.full.f32`, which "implements a relatively fast, full-range
//!    approximation that scales operands to achieve better accuracy"
//!    with "maximum ulp error 2 across the full range" (PTX ISA, `div`;
//!    triton issue 10661), so vLLM v1's `scale = 1.0 / rep` is not
//!    `RN(1/p)`: on an H100 (run 80) a Triton kernel in vLLM v1's form
//!    failed `reciprocal` on 13 of 45 cases, every differing element 1
//!    or 2 ulps off (repetition 1.6953679, logit 5.654926, `0x40B4F527`:
//!    `0x40557916` where `RN(1/p)` gives `0x40557915`); declared
//!    `recip_ulps = 2`, it is judged by this rule. A kernel whose `r`
//!    differs between tokens of a row (a true division for some of
//!    them), or is further than `n` ulps off, reproduces no member on a
//!    row where the members part, and fails. [`penalize`] computes the
//!    member `RN(1/p)`; [`penalize_with_reciprocal`] any member.
//!
//! # Refused penalties
//!
//! [`validate`]: the repetition penalty must be finite and positive
//! (vLLM's `SamplingParams` refuses `repetition_penalty <= 0`; Hugging
//! Face's processor wants "a strictly positive float"; `p = 0` would turn
//! a zero logit into `0 / 0 = NaN`); the frequency and presence penalties
//! must be finite, of either sign (vLLM and the OpenAI API take `-2` to
//! `2`: a policy, not arithmetic, so not refused here).
//!
//! # Who computes which form
//!
//! - vLLM v0, `vllm/model_executor/layers/utils.py` (`apply_penalties`,
//!   `get_token_bin_counts_and_mask`): counts by `scatter_add_` into
//!   `vocab_size + 1` bins, the last (padding) dropped; repetition over
//!   `prompt_mask | output_mask`, `torch.where(logits > 0, logits / rep,
//!   logits * rep)` with `rep = 1` for unseen tokens; then `logits -=
//!   frequency * output_bin_counts`, then `logits -= presence *
//!   output_mask`: [`Declared::VLLM`]. Newer versions apply the
//!   repetition step with `vllm._custom_ops.apply_repetition_penalties`:
//!   on a contiguous CUDA tensor the kernel `apply_repetition_penalties_kernel`
//!   (`csrc/sampler.cu`: `logit > 0 ? logit / penalty : logit * penalty`
//!   in place on the seen tokens, nvcc's IEEE division:
//!   [`Repetition::Divide`]), otherwise `apply_repetition_penalties_torch`
//!   (`scaling = where(logits > 0, 1.0 / penalties, penalties); logits *=
//!   scaling`: [`Repetition::Reciprocal`], `RN(1/p)`).
//! - vLLM v1's GPU worker, `vllm/v1/worker/gpu/sample/penalties.py`
//!   (`_penalties_kernel`, Triton): the same order and scope from
//!   `prompt_bin_counts` (or a prompt bin mask) and `output_bin_counts`,
//!   but `scale = where(logits > 0, 1.0 / scale, scale); logits *= scale`:
//!   [`Repetition::Reciprocal`] with `recip_ulps = 2` (Triton's `/` on
//!   f32 is PTX `div.full.f32`, within 2 ulps: rule `PEN-RECIP-ULPS`;
//!   with `tl.math.div_rn(1.0, scale)`, `recip_ulps = 0`); `logits -=
//!   freq * counts` follows `logits *= scale`,
//!   which Triton's `enable_fp_fusion` may contract with it
//!   ([`Frequency::FmaScaled`]; a kernel whose repetition step is a
//!   select of a division, [`Frequency::Fma`]; vLLM's own computes the
//!   product under `if use_rep_penalty:`, a block of its own, which a
//!   contraction within one block does not reach: [`Frequency::Fma`]).
//! - Hugging Face transformers, `generation/logits_process.py`
//!   (`RepetitionPenaltyLogitsProcessor`): `score = gather(scores, 1,
//!   input_ids)`, `where(score < 0, score * penalty, score / penalty)`,
//!   scattered back: each id in `input_ids` (prompt and generated) once,
//!   however often it occurs ([`Repetition::Divide`],
//!   [`Scope::PromptAndOutput`], rule `PEN-REP-ZERO`). No frequency or
//!   presence penalty.
//! - SGLang, `python/sglang/srt/sampling/penaltylib/`
//!   (`BatchedFrequencyPenalizer`, `BatchedPresencePenalizer`,
//!   `BatchedRepetitionPenalizer`): per-token tensors initialised to zero
//!   (one for repetition), the frequency penalty added once per generated
//!   token (`scatter_add_`), the presence penalty set (`scatter_`), then
//!   `logits.sub_(...)` ([`Frequency::Accumulate`]); repetition over the
//!   generated tokens in current versions ([`Scope::OutputOnly`]; older
//!   ones also cumulated the prompt), `where(logits < 0, logits * p,
//!   logits / p)`. The penalizers run in the iteration order of a Python
//!   set of classes (`orchestrator.py`, `BatchedPenalizerOrchestrator`),
//!   which the source does not fix (class hashes are addresses): any
//!   [`Order`] may be SGLang's in a given process.
//! - LightLLM (`apply_penalty.py`, `_fwd_kernel_apply_penalty`, Triton):
//!   only the generated tokens' logits are loaded and stored (the others
//!   are never written), `where(l > 0, l / rep, l * rep)`, `- count *
//!   freq`, `- presence`: vLLM's order, [`Scope::OutputOnly`],
//!   [`Frequency::Sparse`] ([`Frequency::FmaSparse`] under Triton's
//!   default FP fusion). Its `l / rep` is Triton's f32 `/`, PTX
//!   `div.full.f32`, not always `RN(l / p)`: if that is one approximate
//!   reciprocal of `p` times `l` (as the reciprocal forms model vLLM v1's
//!   `1.0 / rep`), it is [`Repetition::Reciprocal`] under `recip_ulps =
//!   2`; no run here has settled it.
//!
//! Known wrong forms, named so that an identification can say which bug a
//! kernel has ([`Repetition::DivideAll`], [`Repetition::ReciprocalAll`]):
//! dividing every logit by the penalty, the CTRL paper's `x / (T I(i ∈
//! g))` read literally, which raises a negative logit (transformers issue
//! 2302), and multiplying every logit by `1 / p` (NeMo issue 8194; a
//! review of panbanda/higgs pull request 32).

use crate::fma::fma_f32;

/// The three steps (rule `PEN-ORDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Rule `PEN-REP`.
    Repetition,
    /// Rule `PEN-FREQ`.
    Frequency,
    /// Rule `PEN-PRES`.
    Presence,
}

/// The order of the three steps (rule `PEN-ORDER`). Multiplication and
/// subtraction do not commute, and two subtractions round differently in
/// either order, so each of the six is its own arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Repetition, frequency, presence: vLLM (v0 and v1), LightLLM.
    RepetitionFrequencyPresence,
    /// Repetition, presence, frequency.
    RepetitionPresenceFrequency,
    /// Frequency, presence, repetition.
    FrequencyPresenceRepetition,
    /// Frequency, repetition, presence.
    FrequencyRepetitionPresence,
    /// Presence, frequency, repetition.
    PresenceFrequencyRepetition,
    /// Presence, repetition, frequency.
    PresenceRepetitionFrequency,
}

impl Order {
    /// Every order, vLLM's first.
    pub const ALL: [Order; 6] = [
        Order::RepetitionFrequencyPresence,
        Order::RepetitionPresenceFrequency,
        Order::FrequencyPresenceRepetition,
        Order::FrequencyRepetitionPresence,
        Order::PresenceFrequencyRepetition,
        Order::PresenceRepetitionFrequency,
    ];

    /// The steps, first to last.
    pub const fn steps(self) -> [Step; 3] {
        use Step::{Frequency as F, Presence as P, Repetition as R};
        match self {
            Order::RepetitionFrequencyPresence => [R, F, P],
            Order::RepetitionPresenceFrequency => [R, P, F],
            Order::FrequencyPresenceRepetition => [F, P, R],
            Order::FrequencyRepetitionPresence => [F, R, P],
            Order::PresenceFrequencyRepetition => [P, F, R],
            Order::PresenceRepetitionFrequency => [P, R, F],
        }
    }

    /// `"repetition_frequency_presence"` and so on: the steps in order.
    pub const fn name(self) -> &'static str {
        match self {
            Order::RepetitionFrequencyPresence => "repetition_frequency_presence",
            Order::RepetitionPresenceFrequency => "repetition_presence_frequency",
            Order::FrequencyPresenceRepetition => "frequency_presence_repetition",
            Order::FrequencyRepetitionPresence => "frequency_repetition_presence",
            Order::PresenceFrequencyRepetition => "presence_frequency_repetition",
            Order::PresenceRepetitionFrequency => "presence_repetition_frequency",
        }
    }
}

/// Which tokens the repetition penalty applies to (rule `PEN-REP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Tokens in the prompt or the output (vLLM's `prompt_mask |
    /// output_mask`, Hugging Face's `input_ids`).
    PromptAndOutput,
    /// Tokens in the output only (current SGLang, LightLLM).
    OutputOnly,
}

impl Scope {
    /// Both scopes.
    pub const ALL: [Scope; 2] = [Scope::PromptAndOutput, Scope::OutputOnly];

    /// `"prompt_and_output"` or `"output_only"`.
    pub const fn name(self) -> &'static str {
        match self {
            Scope::PromptAndOutput => "prompt_and_output",
            Scope::OutputOnly => "output_only",
        }
    }

    /// Whether a token with these counts is penalised.
    pub const fn seen(self, prompt_count: u32, output_count: u32) -> bool {
        match self {
            Scope::PromptAndOutput => prompt_count > 0 || output_count > 0,
            Scope::OutputOnly => output_count > 0,
        }
    }
}

/// How a seen token's logit is penalised (rule `PEN-REP`), `p` the
/// repetition penalty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Repetition {
    /// `l > 0 ? RN(l / p) : RN(l * p)`: vLLM v0 (and its CUDA
    /// `apply_repetition_penalties_kernel`), Hugging Face, SGLang. Not
    /// Triton's f32 `/` (PTX `div.full.f32`, LightLLM's): see the module
    /// docs.
    Divide,
    /// `l > 0 ? RN(l * r) : RN(l * p)`, `r` the row's multiplier
    /// (`RN(1 / p)`, or rule `PEN-RECIP-ULPS`): vLLM v1's GPU worker
    /// (`scale = 1.0 / scale; logits *= scale`).
    Reciprocal,
    /// A known bug: `RN(l / p)` for every sign, which raises a negative
    /// logit when `p > 1` (transformers issue 2302).
    DivideAll,
    /// A known bug: `RN(l * r)` for every sign, `r` as in
    /// [`Repetition::Reciprocal`] (NeMo issue 8194; panbanda/higgs pull
    /// request 32's review).
    ReciprocalAll,
}

impl Repetition {
    /// Every form, the declarable ones first.
    pub const ALL: [Repetition; 4] = [
        Repetition::Divide,
        Repetition::Reciprocal,
        Repetition::DivideAll,
        Repetition::ReciprocalAll,
    ];

    /// `"divide"`, `"reciprocal"`, `"divide_all"`, `"reciprocal_all"`.
    pub const fn name(self) -> &'static str {
        match self {
            Repetition::Divide => "divide",
            Repetition::Reciprocal => "reciprocal",
            Repetition::DivideAll => "divide_all",
            Repetition::ReciprocalAll => "reciprocal_all",
        }
    }

    /// Whether a kernel may declare it: the two `*All` forms are known
    /// bugs, named only so that identification can report them.
    pub const fn declarable(self) -> bool {
        matches!(self, Repetition::Divide | Repetition::Reciprocal)
    }

    /// Whether the form multiplies by a reciprocal `r` of `p` (rule
    /// `PEN-RECIP-ULPS` applies): [`Repetition::Reciprocal`] and
    /// [`Repetition::ReciprocalAll`].
    pub const fn has_reciprocal(self) -> bool {
        matches!(self, Repetition::Reciprocal | Repetition::ReciprocalAll)
    }

    /// A seen token's logit `l` penalised by `p`, the reciprocal forms
    /// with `r = RN(1 / p)` ([`Repetition::apply_with_reciprocal`]).
    pub fn apply(self, l: f32, p: f32) -> f32 {
        self.apply_with_reciprocal(l, p, 1.0 / p)
    }

    /// A seen token's logit `l` penalised by `p`, the reciprocal forms
    /// multiplying by the row's `r` (rule `PEN-RECIP-ULPS`: a member of
    /// [`reciprocals`], not checked here); the division forms ignore `r`.
    pub fn apply_with_reciprocal(self, l: f32, p: f32, r: f32) -> f32 {
        match self {
            Repetition::Divide => {
                if l > 0.0 {
                    l / p
                } else {
                    l * p
                }
            }
            Repetition::Reciprocal => {
                if l > 0.0 {
                    l * r
                } else {
                    l * p
                }
            }
            Repetition::DivideAll => l / p,
            Repetition::ReciprocalAll => l * r,
        }
    }
}

/// How the frequency and presence penalties are subtracted (rules
/// `PEN-FREQ`, `PEN-PRES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frequency {
    /// `RN(l - RN(f * c))`, then `RN(l - RN(q * m))`: vLLM v0 (torch, one
    /// kernel per operation), a Triton kernel built without FP fusion.
    Separate,
    /// `fma(-f, c, l)`, then `RN(l - RN(q * m))`: the subtraction of a
    /// product contracted into one FMA (Triton's default
    /// `enable_fp_fusion`, LLVM's `fsub(l, fmul(f, c))` to `fma(-f, c,
    /// l)`).
    Fma,
    /// Rule `PEN-FMA-SCALED`: `fma(l, scale, -RN(f * c))` after a
    /// repetition step written as a product by a multiplier (vLLM v1's
    /// Triton kernel under `enable_fp_fusion`); otherwise [`Frequency::Fma`].
    FmaScaled,
    /// SGLang's penalizers: zero-initialised per-token accumulators, `f`
    /// added once per generated token and `q` set for a generated token,
    /// each subtracted: `RN(l - s)`, `s` the `oc`-fold sum of `f` from
    /// `+0`; `RN(l - (oc > 0 ? q : +0))`.
    Accumulate,
    /// A sparse update: only the generated tokens' logits (`oc > 0`) are
    /// written, `RN(l - RN(f * c))` then `RN(l - q)`; every other logit
    /// is left as it is, so a `-0` keeps its sign (rule
    /// `PEN-ZERO-SIGN`): LightLLM's `_fwd_kernel_apply_penalty` built
    /// without FP fusion (it loads and stores the generated tokens'
    /// logits only).
    Sparse,
    /// [`Frequency::Sparse`] with the frequency step contracted,
    /// `fma(-f, c, l)`: LightLLM's kernel under Triton's default
    /// `enable_fp_fusion`.
    FmaSparse,
}

impl Frequency {
    /// Every form.
    pub const ALL: [Frequency; 6] = [
        Frequency::Separate,
        Frequency::Fma,
        Frequency::FmaScaled,
        Frequency::Accumulate,
        Frequency::Sparse,
        Frequency::FmaSparse,
    ];

    /// `"separate"`, `"fma"`, `"fma_scaled"`, `"accumulate"`, `"sparse"`
    /// or `"fma_sparse"`.
    pub const fn name(self) -> &'static str {
        match self {
            Frequency::Separate => "separate",
            Frequency::Fma => "fma",
            Frequency::FmaScaled => "fma_scaled",
            Frequency::Accumulate => "accumulate",
            Frequency::Sparse => "sparse",
            Frequency::FmaSparse => "fma_sparse",
        }
    }

    /// Rule `PEN-FREQ`: `l` less the frequency penalty `f` of a token
    /// generated `count` times, on its own ([`Frequency::FmaScaled`] as
    /// [`Frequency::Fma`]: [`penalize`] applies rule `PEN-FMA-SCALED`).
    pub fn frequency(self, l: f32, f: f32, count: u32) -> f32 {
        // Round to nearest even, exact below 2^24 (Rust's `as`, torch's
        // int-to-float promotion, PTX `cvt.rn.f32.s32`).
        let c = count as f32;
        match self {
            Frequency::Separate => l - f * c,
            Frequency::Fma | Frequency::FmaScaled => fma_f32(-f, c, l),
            Frequency::Accumulate => {
                let mut s = 0.0f32;
                for _ in 0..count {
                    s += f;
                }
                l - s
            }
            // A token not generated is not written.
            Frequency::Sparse | Frequency::FmaSparse if count == 0 => l,
            Frequency::Sparse => l - f * c,
            Frequency::FmaSparse => fma_f32(-f, c, l),
        }
    }

    /// Rule `PEN-PRES`: `l` less the presence penalty `q` of a token
    /// generated `count` times.
    pub fn presence(self, l: f32, q: f32, count: u32) -> f32 {
        match self {
            Frequency::Separate | Frequency::Fma | Frequency::FmaScaled => {
                let m = if count > 0 { 1.0f32 } else { 0.0 };
                l - q * m
            }
            Frequency::Accumulate => l - if count > 0 { q } else { 0.0 },
            Frequency::Sparse | Frequency::FmaSparse => {
                if count > 0 {
                    l - q
                } else {
                    l
                }
            }
        }
    }
}

/// What a kernel declares it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Declared {
    /// Rule `PEN-ORDER`.
    pub order: Order,
    /// Rule `PEN-REP`'s scope.
    pub scope: Scope,
    /// Rule `PEN-REP`'s form.
    pub repetition: Repetition,
    /// Rules `PEN-FREQ` and `PEN-PRES`.
    pub frequency: Frequency,
    /// Rule `PEN-RECIP-ULPS`: how many ulps of `1/p` the row's multiplier
    /// may be off, `0` (correctly rounded, `RN(1/p)`) to
    /// [`MAX_RECIP_ULPS`]; `2` for Triton's f32 `/` (PTX
    /// `div.full.f32`). Only the reciprocal forms
    /// ([`Repetition::has_reciprocal`]) have a multiplier: the division
    /// forms ignore it.
    pub recip_ulps: u32,
}

impl Declared {
    /// vLLM v0's `apply_penalties`.
    pub const VLLM: Declared = Declared {
        order: Order::RepetitionFrequencyPresence,
        scope: Scope::PromptAndOutput,
        repetition: Repetition::Divide,
        frequency: Frequency::Separate,
        recip_ulps: 0,
    };

    /// The multipliers a kernel under `self` may use for a row whose
    /// repetition penalty is `p` (rule `PEN-RECIP-ULPS`):
    /// [`reciprocals`]`(p, self.recip_ulps)` for the reciprocal forms,
    /// `RN(1/p)` alone for the division forms (which use none).
    ///
    /// # Panics
    /// As [`reciprocals`]: `recip_ulps` over [`MAX_RECIP_ULPS`] under a
    /// reciprocal form.
    pub fn reciprocals(&self, p: f32) -> Reciprocals {
        if self.repetition.has_reciprocal() {
            reciprocals(p, self.recip_ulps)
        } else {
            reciprocals(p, 0)
        }
    }
}

/// The most ulps rule `PEN-RECIP-ULPS` takes (PTX's `div.full.f32` needs
/// 2).
pub const MAX_RECIP_ULPS: u32 = 8;

/// The most members [`reciprocals`] gives: `3 n + 1` for `n =`
/// [`MAX_RECIP_ULPS`].
pub const MAX_RECIPROCALS: usize = 3 * MAX_RECIP_ULPS as usize + 1;

/// A row's candidate multipliers (rule `PEN-RECIP-ULPS`), `RN(1/p)` first,
/// then the others by increasing distance from `1/p`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reciprocals {
    values: [f32; MAX_RECIPROCALS],
    len: usize,
}

impl Reciprocals {
    /// The members, `RN(1/p)` first (at least one).
    pub fn as_slice(&self) -> &[f32] {
        &self.values[..self.len]
    }
}

/// The binary32 multipliers within `recip_ulps` ulps of `1/p` (rule
/// `PEN-RECIP-ULPS`): `RN(1/p)` alone for `recip_ulps = 0`; otherwise
/// `RN(1/p)` and every binary32 `r` with `|r - 1/p| <= recip_ulps *
/// ulp(1/p)`, exactly, `ulp(x) = 2^(max(e, -126) - 23)` for `2^e <= x <
/// 2^(e+1)`. `p` is a row's repetition penalty, finite and positive (see
/// [`validate`]; not checked: another `p` gives `RN(1/p)` and whatever
/// passes the test). Order: `RN(1/p)` first (it may be `+inf`, for `p`
/// below about `2^-128`), then the rest by increasing `|r - 1/p|`, the
/// lower first on a tie. At most `3 recip_ulps + 1` members.
///
/// Method: step from `RN(1/p)` one binary32 at a time, down then up,
/// keeping each `r` that passes the test, until one fails (the distance
/// grows with every step once past `1/p`, and both neighbours of `1/p`
/// pass for `recip_ulps >= 1`: the first step may cross `1/p`). The test
/// `|r p - 1| <= n ulp(1/p) p` is `|r - 1/p| <= n ulp(1/p)` multiplied
/// by `p > 0`, computed in binary64 without a rounding error: `r p` is
/// exact (24 by 24 bits, exponents within binary64's range), `ulp(1/p)
/// p` is `p` scaled by a power of two and `n ulp(1/p) p` at most 28
/// bits; `ulp(1/p) p <= 2^-21`, so a passing `r p` lies in `[1/2, 2]`
/// where `r p - 1` is exact (Sterbenz's lemma), and a failing one
/// outside it gives `|r p - 1| >= 1/2`, still failing once rounded.
///
/// Source: PTX ISA, `div` (`div.full.f32`: "maximum ulp error 2 across
/// the full range"), the `ulp` of Goldberg, "What every computer
/// scientist should know about floating-point arithmetic" (1991), sec.
/// 1.2 (the spacing of the binade of the exact value).
///
/// # Panics
/// If `recip_ulps` is over [`MAX_RECIP_ULPS`].
pub fn reciprocals(p: f32, recip_ulps: u32) -> Reciprocals {
    assert!(
        recip_ulps <= MAX_RECIP_ULPS,
        "recip_ulps {recip_ulps} over {MAX_RECIP_ULPS}"
    );
    let rn = 1.0 / p;
    let mut out = Reciprocals {
        values: [rn; MAX_RECIPROCALS],
        len: 1,
    };
    if recip_ulps == 0 {
        return out;
    }
    let pw = f64::from(p);
    let bound = f64::from(recip_ulps) * ulp_of_reciprocal(p) * pw;
    // |r p - 1|, exact where it passes (see above); +inf for r = +inf,
    // which `within` refuses first.
    let distance = |r: f32| {
        let d = f64::from(r) * pw - 1.0;
        if d < 0.0 {
            -d
        } else {
            d
        }
    };
    let within = |r: f32| r.is_finite() && distance(r) <= bound;
    let start = rn.to_bits();
    // Down: positive values, to +0 at most (0x0000_0000 never passes).
    let mut b = start;
    while b > 0 {
        b -= 1;
        let r = f32::from_bits(b);
        if !within(r) {
            break;
        }
        push(&mut out, r);
    }
    // Up: to the largest finite value at most.
    let mut b = start;
    while b < 0x7F7F_FFFF {
        b += 1;
        let r = f32::from_bits(b);
        if !within(r) {
            break;
        }
        push(&mut out, r);
    }
    // Insertion sort of the members after RN(1/p) by distance, the lower
    // first on a tie (the down steps were pushed first, and the sort is
    // stable).
    let mut i = 2;
    while i < out.len {
        let mut j = i;
        while j > 1 && distance(out.values[j]) < distance(out.values[j - 1]) {
            out.values.swap(j, j - 1);
            j -= 1;
        }
        i += 1;
    }
    out
}

fn push(out: &mut Reciprocals, r: f32) {
    // At most 3 n + 1 members pass (rule PEN-RECIP-ULPS), so this never
    // overflows; a bug here panics rather than drops a member.
    out.values[out.len] = r;
    out.len += 1;
}

/// `ulp(1/p) = 2^(max(e, -126) - 23)` for `2^e <= 1/p < 2^(e+1)`, from
/// `p`'s exponent and significand alone (exact): `p = m 2^E`, `m` in
/// `[1, 2)`, gives `e = -E` when `m = 1` and `-E - 1` otherwise.
fn ulp_of_reciprocal(p: f32) -> f64 {
    // Every positive binary32, subnormals included, is a normal binary64.
    let bits = f64::from(p).to_bits();
    let big_e = ((bits >> 52) & 0x7FF) as i32 - 1023;
    let power_of_two = bits & 0x000F_FFFF_FFFF_FFFF == 0;
    let e = if power_of_two { -big_e } else { -big_e - 1 };
    // e - 23 is in -149..=126: a normal binary64 power of two.
    f64::from_bits(((e.max(-126) - 23 + 1023) as u64) << 52)
}

/// One row's penalties (vLLM passes them per request).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    /// Repetition, finite and positive; `1.0` for none.
    pub repetition: f32,
    /// Frequency, finite; `0.0` for none.
    pub frequency: f32,
    /// Presence, finite; `0.0` for none.
    pub presence: f32,
}

impl Penalties {
    /// No penalty (rule `PEN-NEUTRAL`).
    pub const NONE: Penalties = Penalties {
        repetition: 1.0,
        frequency: 0.0,
        presence: 0.0,
    };
}

/// Why penalties cannot be applied (nothing usable is written). Displays
/// as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PenaltyError {
    /// `rows` or `vocab` is 0.
    Zero {
        /// `"rows"` or `"vocab"`.
        dim: &'static str,
    },
    /// A buffer length overflows `usize`.
    Overflow,
    /// A buffer has the wrong number of elements.
    Len {
        /// `"logits"`, `"penalties"`, `"prompt_counts"`, `"output_counts"`,
        /// `"out"`, or the ids' and counts' arguments of [`bin_counts`].
        arg: &'static str,
        /// Elements the shape needs (for ids: a multiple of the rows).
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// A repetition penalty that is not finite and positive.
    Repetition {
        /// The row.
        row: usize,
        /// The penalty.
        value: f32,
    },
    /// A frequency penalty that is not finite.
    Frequency {
        /// The row.
        row: usize,
        /// The penalty.
        value: f32,
    },
    /// A presence penalty that is not finite.
    Presence {
        /// The row.
        row: usize,
        /// The penalty.
        value: f32,
    },
    /// A token id outside `0..=vocab` (`vocab` is padding: rule `PEN-ID`).
    Id {
        /// `"prompt"` or `"output"`.
        arg: &'static str,
        /// The row.
        row: usize,
        /// Its position in the row.
        pos: usize,
        /// The id.
        id: i64,
        /// The vocabulary.
        vocab: usize,
    },
    /// A token occurs more than `u32::MAX` times in one row.
    Count {
        /// `"prompt"` or `"output"`.
        arg: &'static str,
        /// The row.
        row: usize,
    },
}

impl core::fmt::Display for PenaltyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            PenaltyError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            PenaltyError::Overflow => write!(f, "a buffer length overflows usize"),
            PenaltyError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            PenaltyError::Repetition { row, value } => write!(
                f,
                "row {row}: repetition penalty {value:?}; it must be finite and positive"
            ),
            PenaltyError::Frequency { row, value } => write!(
                f,
                "row {row}: frequency penalty {value:?}; it must be finite"
            ),
            PenaltyError::Presence { row, value } => {
                write!(
                    f,
                    "row {row}: presence penalty {value:?}; it must be finite"
                )
            }
            PenaltyError::Id {
                arg,
                row,
                pos,
                id,
                vocab,
            } => write!(
                f,
                "{arg}[{row}][{pos}] = {id}: a token id is in 0..{vocab}, or {vocab} for padding"
            ),
            PenaltyError::Count { arg, row } => write!(
                f,
                "{arg} row {row}: a token occurs more than 2^32 - 1 times"
            ),
        }
    }
}

/// Checks one row's penalties (see the module docs, "Refused penalties").
///
/// # Errors
/// [`PenaltyError::Repetition`], [`PenaltyError::Frequency`],
/// [`PenaltyError::Presence`], naming `row`.
pub fn validate(row: usize, p: &Penalties) -> Result<(), PenaltyError> {
    if !(p.repetition.is_finite() && p.repetition > 0.0) {
        return Err(PenaltyError::Repetition {
            row,
            value: p.repetition,
        });
    }
    if !p.frequency.is_finite() {
        return Err(PenaltyError::Frequency {
            row,
            value: p.frequency,
        });
    }
    if !p.presence.is_finite() {
        return Err(PenaltyError::Presence {
            row,
            value: p.presence,
        });
    }
    Ok(())
}

/// `rows * vocab`, or [`PenaltyError::Zero`] / [`PenaltyError::Overflow`].
fn elements(rows: usize, vocab: usize) -> Result<usize, PenaltyError> {
    if rows == 0 {
        return Err(PenaltyError::Zero { dim: "rows" });
    }
    if vocab == 0 {
        return Err(PenaltyError::Zero { dim: "vocab" });
    }
    rows.checked_mul(vocab).ok_or(PenaltyError::Overflow)
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), PenaltyError> {
    if want == got {
        Ok(())
    } else {
        Err(PenaltyError::Len { arg, want, got })
    }
}

/// Rule `PEN-ID`: the counts `[rows][vocab]` of the token ids `ids
/// [rows][n]` (`n = ids.len() / rows`, any `n >= 0`), the id `vocab`
/// ignored as padding. `arg` (`"prompt"` or `"output"`) names the ids in
/// errors. vLLM's `get_token_bin_counts_and_mask` (`scatter_add_` into
/// `vocab + 1` bins, the last dropped).
///
/// # Errors
/// [`PenaltyError::Zero`] and [`PenaltyError::Overflow`] for the shape,
/// [`PenaltyError::Len`] when `ids` is not `rows` rows or `counts` is not
/// `rows * vocab`, [`PenaltyError::Id`] for the first id outside
/// `0..=vocab`, [`PenaltyError::Count`]; `counts` holds nothing usable
/// then.
pub fn bin_counts(
    arg: &'static str,
    ids: &[i64],
    rows: usize,
    vocab: usize,
    counts: &mut [u32],
) -> Result<(), PenaltyError> {
    let n = elements(rows, vocab)?;
    len(arg, n, counts.len()).map_err(|e| match e {
        PenaltyError::Len { want, got, .. } => PenaltyError::Len {
            arg: "counts",
            want,
            got,
        },
        other => other,
    })?;
    if !ids.len().is_multiple_of(rows) {
        return Err(PenaltyError::Len {
            arg,
            want: (ids.len() / rows + 1) * rows,
            got: ids.len(),
        });
    }
    let per_row = ids.len() / rows;
    for c in counts.iter_mut() {
        *c = 0;
    }
    for r in 0..rows {
        for (pos, &id) in ids[r * per_row..(r + 1) * per_row].iter().enumerate() {
            if id == vocab as i64 {
                continue;
            }
            if id < 0 || id > vocab as i64 {
                return Err(PenaltyError::Id {
                    arg,
                    row: r,
                    pos,
                    id,
                    vocab,
                });
            }
            let c = &mut counts[r * vocab + id as usize];
            *c = c
                .checked_add(1)
                .ok_or(PenaltyError::Count { arg, row: r })?;
        }
    }
    Ok(())
}

/// One token's penalised logit under `d` (rules `PEN-REP`, `PEN-FREQ`,
/// `PEN-PRES` in `d.order`, `PEN-FMA-SCALED` fusing a repetition step
/// with the frequency step after it), the reciprocal forms with the
/// correctly rounded multiplier `RN(1/p)` whatever `d.recip_ulps` says
/// (rule `PEN-RECIP-ULPS`'s first member: [`penalize_with_reciprocal`]
/// takes any): `l` the logit, `p` its row's penalties (not checked: see
/// [`validate`]), `prompt_count` and `output_count` its counts.
pub fn penalize(d: &Declared, l: f32, p: &Penalties, prompt_count: u32, output_count: u32) -> f32 {
    penalize_with_reciprocal(d, l, p, 1.0 / p.repetition, prompt_count, output_count)
}

/// [`penalize`] with the row's multiplier `r` (rule `PEN-RECIP-ULPS`):
/// the reciprocal forms compute `RN(l * r)`, and rule `PEN-FMA-SCALED`
/// `fma(l, r, -RN(f * c))`, for a positive seen logit (every seen logit
/// under [`Repetition::ReciprocalAll`]); the division forms ignore `r`.
/// `r` is one member of [`Declared::reciprocals`]`(p.repetition)`, the
/// same for every token of the row (not checked: any `r` is computed
/// with).
pub fn penalize_with_reciprocal(
    d: &Declared,
    l: f32,
    p: &Penalties,
    r: f32,
    prompt_count: u32,
    output_count: u32,
) -> f32 {
    let steps = d.order.steps();
    let seen = d.scope.seen(prompt_count, output_count);
    let mut x = l;
    let mut k = 0;
    while k < steps.len() {
        x = match steps[k] {
            Step::Repetition => match scale(d, x, p.repetition, r, seen) {
                // Rule PEN-FMA-SCALED: this step and the next, fused.
                Some(s) if steps.get(k + 1) == Some(&Step::Frequency) => {
                    k += 1;
                    fma_f32(x, s, -(p.frequency * output_count as f32))
                }
                _ if seen => d.repetition.apply_with_reciprocal(x, p.repetition, r),
                _ => x,
            },
            Step::Frequency => d.frequency.frequency(x, p.frequency, output_count),
            Step::Presence => d.frequency.presence(x, p.presence, output_count),
        };
        k += 1;
    }
    x
}

/// Rule `PEN-FMA-SCALED`'s multiplier of logit `l` under `d` (`r` the
/// row's reciprocal of `p`), or None when `d` does not fuse the
/// repetition step (not [`Frequency::FmaScaled`], or a division).
fn scale(d: &Declared, l: f32, p: f32, r: f32, seen: bool) -> Option<f32> {
    if d.frequency != Frequency::FmaScaled {
        return None;
    }
    let recip = match d.repetition {
        Repetition::Reciprocal => l > 0.0,
        Repetition::ReciprocalAll => true,
        Repetition::Divide | Repetition::DivideAll => return None,
    };
    Some(if !seen {
        1.0
    } else if recip {
        r
    } else {
        p
    })
}

/// The inputs of [`apply_penalties`] (layouts in the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `[rows][vocab]` logits.
    pub logits: &'a [f32],
    /// `[rows]` penalties.
    pub penalties: &'a [Penalties],
    /// `[rows][vocab]` prompt counts.
    pub prompt_counts: &'a [u32],
    /// `[rows][vocab]` output counts.
    pub output_counts: &'a [u32],
}

/// Checks the lengths (`logits`, `penalties`, `prompt_counts`,
/// `output_counts`, then `out` of `out_len`) and every row's penalties.
///
/// # Errors
/// [`PenaltyError::Zero`], [`PenaltyError::Overflow`], then
/// [`PenaltyError::Len`] naming the first wrong buffer, then
/// [`validate`]'s for the first bad row.
pub fn check_inputs(
    rows: usize,
    vocab: usize,
    x: &Inputs<'_>,
    out_len: usize,
) -> Result<(), PenaltyError> {
    let n = elements(rows, vocab)?;
    len("logits", n, x.logits.len())?;
    len("penalties", rows, x.penalties.len())?;
    len("prompt_counts", n, x.prompt_counts.len())?;
    len("output_counts", n, x.output_counts.len())?;
    len("out", n, out_len)?;
    for (r, p) in x.penalties.iter().enumerate() {
        validate(r, p)?;
    }
    Ok(())
}

/// The penalised logits of every row into `out` (`[rows][vocab]`), token
/// by token ([`penalize`]: under `d.recip_ulps > 0`, the member of rule
/// `PEN-RECIP-ULPS` whose multiplier is `RN(1/p)`).
///
/// # Errors
/// As [`check_inputs`]; nothing is written then.
pub fn apply_penalties(
    rows: usize,
    vocab: usize,
    d: &Declared,
    x: &Inputs<'_>,
    out: &mut [f32],
) -> Result<(), PenaltyError> {
    check_inputs(rows, vocab, x, out.len())?;
    for (i, y) in out.iter_mut().enumerate() {
        // Row i / vocab, token i % vocab.
        let p = &x.penalties[i / vocab];
        *y = penalize(d, x.logits[i], p, x.prompt_counts[i], x.output_counts[i]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Penalties = Penalties {
        repetition: 1.3,
        frequency: 0.7,
        presence: 0.45,
    };

    fn with(d: Declared, f: impl FnOnce(&mut Declared)) -> Declared {
        let mut d = d;
        f(&mut d);
        d
    }

    /// Every known declaration.
    fn all() -> impl Iterator<Item = Declared> {
        Order::ALL.into_iter().flat_map(|order| {
            Scope::ALL.into_iter().flat_map(move |scope| {
                Repetition::ALL.into_iter().flat_map(move |repetition| {
                    Frequency::ALL.into_iter().map(move |frequency| Declared {
                        order,
                        scope,
                        repetition,
                        frequency,
                        recip_ulps: 0,
                    })
                })
            })
        })
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits() {
        let d = Declared::VLLM;
        assert_eq!(penalize(&d, 2.6, &P, 1, 0), 2.6 / 1.3);
        assert_eq!(penalize(&d, -2.6, &P, 1, 0), -2.6 * 1.3);
        // A negative logit divided is raised: transformers issue 2302.
        let bug = with(d, |d| d.repetition = Repetition::DivideAll);
        assert!(penalize(&bug, -2.6, &P, 1, 0) > -2.6);
        // Unseen: untouched (no output count: frequency and presence
        // subtract zeros).
        assert_eq!(penalize(&d, -2.6, &P, 0, 0), -2.6);
    }

    #[test]
    fn rep_zero_the_comparison_direction_changes_no_bit() {
        // vLLM's `l > 0` against Hugging Face's `l < 0` with the branches
        // swapped, and `l >= 0`, on zeros, NaN and infinities.
        for l in [0.0f32, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for p in [1.3f32, 0.7, 3.0, 1e-30, 1e30] {
                let gt = if l > 0.0 { l / p } else { l * p };
                let hf = if l < 0.0 { l * p } else { l / p };
                let ge = if l >= 0.0 { l / p } else { l * p };
                let rec = if l >= 0.0 { l * (1.0 / p) } else { l * p };
                for v in [hf, ge] {
                    assert!(
                        v.to_bits() == gt.to_bits() || (v.is_nan() && gt.is_nan()),
                        "{l:?} {p}"
                    );
                }
                let r = Repetition::Reciprocal.apply(l, p);
                assert!(r.to_bits() == rec.to_bits() || (r.is_nan() && rec.is_nan()));
            }
        }
    }

    #[test]
    fn divide_and_reciprocal_part_where_one_over_p_rounds() {
        // 1/1.1 is not a binary32 value: l / p and l * RN(1/p) differ for
        // some l, never when p is a power of two.
        let parted = (1..2000)
            .map(|k| 1.0 + k as f32 / 997.0)
            .filter(|&l| Repetition::Divide.apply(l, 1.1) != Repetition::Reciprocal.apply(l, 1.1))
            .count();
        assert!(parted > 200, "{parted}");
        for k in 1..2000 {
            let l = 1.0 + k as f32 / 997.0;
            assert_eq!(
                Repetition::Divide.apply(l, 2.0),
                Repetition::Reciprocal.apply(l, 2.0)
            );
            // Negative logits are multiplied in both forms.
            assert_eq!(
                Repetition::Divide.apply(-l, 1.1),
                Repetition::Reciprocal.apply(-l, 1.1)
            );
        }
    }

    #[test]
    fn frequency_forms_part_on_an_inexact_product_and_agree_on_an_exact_one() {
        // f * c needs more than 24 bits, and l cancels most of it: the
        // product's rounding shows in the result.
        let f = 0.700_000_05f32;
        let c = 37u32;
        let l = f * 37.0 * 1.000_001;
        let sep = Frequency::Separate.frequency(l, f, c);
        let fma = Frequency::Fma.frequency(l, f, c);
        assert_ne!(sep, fma);
        // The fused value is the exact l - f c rounded once.
        let exact = f64::from(l) - f64::from(f) * 37.0;
        assert_eq!(fma, exact as f32);
        // f = 0.5: every product exact, the forms agree.
        for c in 0..1000u32 {
            let l = 3.7f32;
            let a = Frequency::Separate.frequency(l, 0.5, c);
            assert_eq!(a, Frequency::Fma.frequency(l, 0.5, c));
            assert_eq!(a, Frequency::Accumulate.frequency(l, 0.5, c));
        }
        // An accumulated sum rounds at every addition.
        let acc = Frequency::Accumulate.frequency(0.0, 0.1, 1000);
        assert_ne!(acc, Frequency::Separate.frequency(0.0, 0.1, 1000));
    }

    #[test]
    fn pen_fma_scaled_fuses_the_repetition_product_into_the_frequency_step() {
        let recip = with(Declared::VLLM, |d| d.repetition = Repetition::Reciprocal);
        let fused = with(recip, |d| d.frequency = Frequency::FmaScaled);
        let fma = with(recip, |d| d.frequency = Frequency::Fma);
        let p = Penalties {
            repetition: 1.1,
            frequency: 0.7,
            presence: 0.0,
        };
        // A seen positive logit: fma(l, RN(1/p), -RN(f c)).
        let (mut parted, mut n) = (0, 0);
        for k in 0..500 {
            let l = 7.0 + k as f32 / 61.0;
            let want = fma_f32(l, 1.0 / 1.1, -(0.7f32 * 9.0));
            assert_eq!(penalize(&fused, l, &p, 0, 9), want);
            // A negative one: fma(l, p, -RN(f c)).
            assert_eq!(
                penalize(&fused, -l, &p, 0, 9),
                fma_f32(-l, 1.1, -(0.7f32 * 9.0))
            );
            parted += usize::from(penalize(&fma, l, &p, 0, 9) != want);
            n += 1;
        }
        assert!(parted * 4 > n, "{parted} of {n}");
        for l in [3.7f32, -3.7, 0.0, -0.0] {
            // Unseen: the separate value.
            let sep = with(recip, |d| d.frequency = Frequency::Separate);
            assert_eq!(
                penalize(&fused, l, &p, 0, 0).to_bits(),
                penalize(&sep, l, &p, 0, 0).to_bits()
            );
            // A division or another order: fma.
            for d in [
                with(fused, |d| d.repetition = Repetition::Divide),
                with(fused, |d| d.order = Order::RepetitionPresenceFrequency),
            ] {
                let plain = with(d, |d| d.frequency = Frequency::Fma);
                assert_eq!(
                    penalize(&d, l, &p, 2, 9).to_bits(),
                    penalize(&plain, l, &p, 2, 9).to_bits()
                );
            }
        }
    }

    /// `e` with `2^e <= 1/p < 2^(e+1)`, by scanning powers of two (`2^e p
    /// <= 1 < 2^(e+1) p`, exact products in binary64).
    fn binade_of_reciprocal(p: f32) -> i32 {
        let pow2 = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
        (-160..160)
            .find(|&e| pow2(e) * f64::from(p) <= 1.0 && pow2(e + 1) * f64::from(p) > 1.0)
            .unwrap()
    }

    /// `|r - 1/p| <= n ulp(1/p)` decided in integers, independently of
    /// [`reciprocals`]: `r` and `p` as integer significands and
    /// exponents, and the inequality multiplied by `p 2^sh` to clear
    /// every power of two.
    fn within_exact(r: f32, p: f32, n: u32) -> bool {
        let parts = |x: f32| {
            let b = x.to_bits();
            let (field, frac) = ((b >> 23) as i32, i128::from(b & 0x7F_FFFF));
            if field == 0 {
                (frac, -149)
            } else {
                (frac | 1 << 23, field - 150)
            }
        };
        let eu = binade_of_reciprocal(p).max(-126) - 23;
        let ((mr, er), (mp, ep)) = (parts(r), parts(p));
        // |mr mp 2^(er+ep) - 1| <= n mp 2^(eu+ep), times 2^sh.
        let sh = -(er + ep).min(eu + ep).min(0);
        assert!((0..100).contains(&sh) && (er + ep + sh) < 60 && (eu + ep + sh) < 60);
        let lhs = (mr * mp * (1i128 << (er + ep + sh)) - (1i128 << sh)).abs();
        lhs <= i128::from(n) * mp * (1i128 << (eu + ep + sh))
    }

    /// Calls `f` on the penalties the candidate sets are tested on: the
    /// check's usual ones, run 80's, powers of two, values just below and
    /// above them, the extremes of binary32 (1/p subnormal, or past the
    /// largest finite value), then 300 pseudo-random ones over every
    /// normal binade.
    fn each_test_penalty(mut f: impl FnMut(f32)) {
        let fixed = [
            1.6953679f32,
            1.1,
            1.3,
            0.7,
            1.0,
            2.0,
            0.5,
            4.0,
            f32::from_bits(0x3F7F_FFFF), // 1 - 2^-24: 1/p just above 1
            f32::from_bits(0x3F80_0001), // 1 + 2^-23: 1/p just below 1
            f32::from_bits(0x3FFF_FFFF),
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::from_bits(1),           // 2^-149: 1/p = 2^149
            f32::from_bits(0x0020_0000), // 2^-128: 1/p = 2^128, RN = inf
            f32::from_bits(0x0020_0001),
            f32::from_bits(0x001F_FFFF),
            f32::from_bits(0x7F00_0000), // 2^127: 1/p = 2^-127, subnormal
            f32::from_bits(0x7E80_0000), // 2^126: 1/p = 2^-126, least normal
            f32::from_bits(0x7E80_0001),
            f32::from_bits(0x7E7F_FFFF),
        ];
        fixed.into_iter().for_each(&mut f);
        let mut x = 0x9E37_79B9u32;
        for _ in 0..300 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f(f32::from_bits(0x0080_0000 + x % 0x7E80_0000));
        }
    }

    #[test]
    fn pen_recip_ulps_zero_is_the_correctly_rounded_reciprocal() {
        each_test_penalty(|p| {
            let got = reciprocals(p, 0);
            assert_eq!(got.as_slice().len(), 1);
            assert_eq!(got.as_slice()[0].to_bits(), (1.0 / p).to_bits());
        });
    }

    #[test]
    fn pen_recip_ulps_is_exactly_the_binary32_values_within_the_bound() {
        each_test_penalty(|p| {
            let rn = 1.0 / p;
            let x = 1.0 / f64::from(p);
            let ulp =
                f64::from_bits(((binade_of_reciprocal(p).max(-126) - 23 + 1023) as u64) << 52);
            for n in [1, 2, 3, MAX_RECIP_ULPS] {
                let got = reciprocals(p, n);
                let got = got.as_slice();
                // RN(1/p) first; at most 3 n + 1 members, no repeats.
                assert_eq!(got[0].to_bits(), rn.to_bits(), "{p:e} {n}");
                assert!(got.len() <= 3 * n as usize + 1, "{p:e} {n} {got:?}");
                for (i, r) in got.iter().enumerate() {
                    assert!(!got[..i].contains(r), "{p:e} {n} {got:?}");
                }
                // Every member but an overflowed RN(1/p) within the
                // bound, in integers and in binary64 (1/p rounded to 53
                // bits: a relative slack of 1e-15).
                for &r in &got[usize::from(rn.is_infinite())..] {
                    assert!(within_exact(r, p, n), "{p:e} {n} {r:e}");
                    let d = (f64::from(r) - x).abs();
                    assert!(d <= f64::from(n) * ulp * (1.0 + 1e-15), "{p:e} {n} {r:e}");
                }
                // Every binary32 within the bound is a member: a scan of
                // 3 n + 4 steps either side of RN(1/p) (further ones are
                // further than n ulps).
                let c = i64::from(rn.to_bits());
                let reach = 3 * i64::from(n) + 4;
                for b in (c - reach).max(0)..=(c + reach).min(0x7F7F_FFFF) {
                    let r = f32::from_bits(b as u32);
                    let want = r == rn || within_exact(r, p, n);
                    assert_eq!(got.contains(&r), want, "{p:e} {n} {r:e}");
                }
                // Faithful: both neighbours of 1/p, when 1/p is inside
                // the finite range and not a binary32.
                if x < f64::from(f32::MAX) && f64::from(rn) != x {
                    let (lo, hi) = if f64::from(rn) < x {
                        (rn, f32::from_bits(rn.to_bits() + 1))
                    } else {
                        (f32::from_bits(rn.to_bits() - 1), rn)
                    };
                    assert!(got.contains(&lo) && got.contains(&hi), "{p:e} {n}");
                }
                // Increasing distance after RN(1/p).
                let dist = |r: f32| (f64::from(r) * f64::from(p) - 1.0).abs();
                for w in got[1..].windows(2) {
                    assert!(dist(w[0]) <= dist(w[1]), "{p:e} {n} {got:?}");
                }
                // Monotone in n.
                let tighter = reciprocals(p, n - 1);
                assert!(
                    tighter.as_slice().iter().all(|r| got.contains(r)),
                    "{p:e} {n}"
                );
            }
        });
    }

    #[test]
    fn pen_recip_ulps_at_powers_of_two_reaches_into_the_denser_binade_below() {
        // p = 2: 1/p = 0.5 exact, ulp(0.5) = 2^-24; below 0.5 the spacing
        // is 2^-25, so one ulp reaches two values down and one up.
        let bits = |p: f32, n: u32, want: &[u32]| {
            let got = reciprocals(p, n);
            assert_eq!(got.as_slice().len(), want.len(), "{got:?}");
            for (r, &w) in got.as_slice().iter().zip(want) {
                assert_eq!(r.to_bits(), w, "{got:?}");
            }
        };
        bits(
            2.0,
            1,
            &[0x3F00_0000, 0x3EFF_FFFF, 0x3EFF_FFFE, 0x3F00_0001],
        );
        assert_eq!(reciprocals(2.0, 2).as_slice().len(), 7);
        assert_eq!(
            reciprocals(1.0, 1).as_slice()[..2],
            [1.0, 1.0 - f32::EPSILON / 2.0]
        );
        // p = 2^-128: 1/p = 2^128 overflows (RN = +inf), but the largest
        // finite value is half an ulp of 2^128 away and the next one ulp.
        bits(
            f32::from_bits(0x0020_0000),
            1,
            &[0x7F80_0000, 0x7F7F_FFFF, 0x7F7F_FFFE],
        );
        // p = 2^-149: 1/p = 2^149, nothing finite near it.
        assert_eq!(
            reciprocals(f32::from_bits(1), 8).as_slice(),
            [f32::INFINITY]
        );
        // p = f32::MAX: 1/p subnormal, the spacing 2^-149 on both sides.
        assert_eq!(reciprocals(f32::MAX, 2).as_slice().len(), 4);
    }

    #[test]
    fn pen_recip_ulps_admits_run_80s_element() {
        // Run 80 (H100, Triton `1.0 / rep` in vLLM v1's form): repetition
        // 1.6953679, logit 5.654926, got 0x40557916 where RN(1/p) gives
        // 0x40557915.
        let (p, l) = (1.6953679f32, f32::from_bits(0x40B4_F527));
        let rn = Repetition::Reciprocal.apply(l, p);
        assert_eq!(rn.to_bits(), 0x4055_7915);
        let hit = |n: u32| {
            reciprocals(p, n).as_slice().iter().any(|&r| {
                Repetition::Reciprocal
                    .apply_with_reciprocal(l, p, r)
                    .to_bits()
                    == 0x4055_7916
            })
        };
        assert!(!hit(0) && hit(2));
    }

    #[test]
    fn penalize_with_reciprocal_uses_the_rows_multiplier_everywhere() {
        let p = Penalties {
            repetition: 1.1,
            frequency: 0.7,
            presence: 0.3,
        };
        let rn = 1.0f32 / 1.1;
        let up = f32::from_bits(rn.to_bits() + 1);
        for rep in Repetition::ALL {
            for frequency in Frequency::ALL {
                let d = Declared {
                    repetition: rep,
                    frequency,
                    recip_ulps: 2,
                    ..Declared::VLLM
                };
                for k in 0..200 {
                    let l = 0.5 + k as f32 / 37.0;
                    for (l, pc, oc) in [(l, 1, 0), (l, 0, 3), (-l, 2, 1), (l, 0, 0)] {
                        // RN(1/p): penalize.
                        assert_eq!(
                            penalize_with_reciprocal(&d, l, &p, rn, pc, oc).to_bits(),
                            penalize(&d, l, &p, pc, oc).to_bits()
                        );
                        // Another r: the division forms ignore it, the
                        // reciprocal forms multiply by it.
                        let got = penalize_with_reciprocal(&d, l, &p, up, pc, oc);
                        let seen = pc > 0 || oc > 0;
                        let uses = rep.has_reciprocal()
                            && seen
                            && (l > 0.0 || rep == Repetition::ReciprocalAll);
                        if !uses {
                            assert_eq!(got.to_bits(), penalize(&d, l, &p, pc, oc).to_bits());
                        }
                    }
                }
                // PEN-FMA-SCALED takes r in its fma.
                if rep == Repetition::Reciprocal && frequency == Frequency::FmaScaled {
                    assert_eq!(
                        penalize_with_reciprocal(&d, 7.25, &p, up, 0, 9),
                        fma_f32(7.25, up, -(0.7f32 * 9.0)) - 0.3
                    );
                }
                if rep == Repetition::Reciprocal && frequency == Frequency::Separate {
                    assert_eq!(penalize_with_reciprocal(&d, 7.25, &p, up, 1, 0), 7.25 * up);
                }
            }
        }
        // Declared::reciprocals: the division forms have one, RN(1/p).
        assert_eq!(Declared::VLLM.reciprocals(1.1).as_slice(), [rn]);
        let d = Declared {
            recip_ulps: 2,
            ..Declared::VLLM
        };
        assert_eq!(d.reciprocals(1.1).as_slice(), [rn]);
        let d = Declared {
            repetition: Repetition::Reciprocal,
            ..d
        };
        assert!(d.reciprocals(1.1).as_slice().contains(&up));
    }

    #[test]
    fn counts_past_two_to_the_24_round_to_nearest_even() {
        let c = (1u32 << 24) + 1;
        assert_eq!(Frequency::Separate.frequency(0.0, 1.0, c), -16_777_216.0);
    }

    #[test]
    fn pen_zero_sign_for_unseen_tokens() {
        let neg = Penalties {
            repetition: 1.3,
            frequency: -0.5,
            presence: 0.0,
        };
        let pos = Penalties {
            frequency: 0.5,
            ..neg
        };
        let sep = Declared::VLLM;
        let acc = with(sep, |d| d.frequency = Frequency::Accumulate);
        let fma = with(sep, |d| d.frequency = Frequency::Fma);
        // -0 - RN(-0.5 * 0) = -0 - (-0) = +0.
        assert_eq!(penalize(&sep, -0.0, &neg, 0, 0).to_bits(), 0);
        assert_eq!(penalize(&fma, -0.0, &neg, 0, 0).to_bits(), 0);
        assert_eq!(penalize(&acc, -0.0, &neg, 0, 0).to_bits(), 0x8000_0000);
        for d in [sep, fma, acc] {
            assert_eq!(penalize(&d, -0.0, &pos, 0, 0).to_bits(), 0x8000_0000);
            // A seen zero keeps its sign through the repetition penalty.
            assert_eq!(
                penalize(&d, -0.0, &Penalties::NONE, 3, 0).to_bits(),
                0x8000_0000
            );
        }
        // The presence penalty likewise.
        let q = Penalties {
            frequency: 0.0,
            presence: -1.0,
            ..neg
        };
        assert_eq!(penalize(&sep, -0.0, &q, 0, 0).to_bits(), 0);
        assert_eq!(penalize(&acc, -0.0, &q, 0, 0).to_bits(), 0x8000_0000);
        // The sparse forms never write a token not generated: -0 stays.
        for f in [Frequency::Sparse, Frequency::FmaSparse] {
            let d = with(sep, |d| d.frequency = f);
            for p in [neg, q] {
                assert_eq!(penalize(&d, -0.0, &p, 0, 0).to_bits(), 0x8000_0000);
                assert_eq!(penalize(&d, -0.0, &p, 4, 0).to_bits(), 0x8000_0000);
            }
        }
    }

    #[test]
    fn sparse_forms_are_separate_and_fma_on_generated_tokens_and_leave_the_rest() {
        let (sparse, fma_sparse) = (
            with(Declared::VLLM, |d| d.frequency = Frequency::Sparse),
            with(Declared::VLLM, |d| d.frequency = Frequency::FmaSparse),
        );
        let fma = with(Declared::VLLM, |d| d.frequency = Frequency::Fma);
        let mut parted = false;
        for k in 0..400 {
            let l = (k as f32 - 200.0) / 7.0;
            for oc in [1, 2, 3, 17, 300] {
                for pc in [0, 2] {
                    let a = penalize(&sparse, l, &P, pc, oc);
                    let b = penalize(&fma_sparse, l, &P, pc, oc);
                    assert_eq!(
                        a.to_bits(),
                        penalize(&Declared::VLLM, l, &P, pc, oc).to_bits()
                    );
                    assert_eq!(b.to_bits(), penalize(&fma, l, &P, pc, oc).to_bits());
                    parted |= a != b;
                }
            }
            // Not generated: the repetition step alone.
            for pc in [0, 3] {
                let want = if pc > 0 {
                    Repetition::Divide.apply(l, 1.3)
                } else {
                    l
                };
                assert_eq!(penalize(&sparse, l, &P, pc, 0).to_bits(), want.to_bits());
                assert_eq!(
                    penalize(&fma_sparse, l, &P, pc, 0).to_bits(),
                    want.to_bits()
                );
            }
        }
        assert!(parted);
        assert_eq!(Frequency::Sparse.name(), "sparse");
        assert_eq!(Frequency::FmaSparse.name(), "fma_sparse");
    }

    #[test]
    fn pen_neutral_is_the_identity_under_every_declaration() {
        let specials = [
            0.0f32,
            -0.0,
            1.5,
            -1.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            -f32::from_bits(1),
            f32::MAX,
        ];
        for d in all() {
            for &l in &specials {
                for (pc, oc) in [(0, 0), (1, 0), (0, 1), (5, 300)] {
                    assert_eq!(
                        penalize(&d, l, &Penalties::NONE, pc, oc).to_bits(),
                        l.to_bits(),
                        "{d:?} {l:?} {pc} {oc}"
                    );
                }
            }
            assert!(penalize(&d, f32::NAN, &Penalties::NONE, 1, 1).is_nan());
        }
    }

    #[test]
    fn masked_tokens_stay_masked() {
        for d in all() {
            for (pc, oc) in [(0, 0), (2, 0), (0, 7)] {
                let y = penalize(&d, f32::NEG_INFINITY, &P, pc, oc);
                assert_eq!(y, f32::NEG_INFINITY, "{d:?}");
            }
        }
    }

    #[test]
    fn the_order_is_a_permutation_and_matters() {
        for o in Order::ALL {
            let s = o.steps();
            assert!(s.contains(&Step::Repetition) && s.contains(&Step::Frequency));
            assert!(s.contains(&Step::Presence));
        }
        let l = 3.1f32;
        let mut seen = [0u32; 6];
        for (k, o) in Order::ALL.into_iter().enumerate() {
            let d = with(Declared::VLLM, |d| d.order = o);
            seen[k] = penalize(&d, l, &P, 0, 3).to_bits();
        }
        // Repetition first or last separates most; the subtractions'
        // order shows in the last bits.
        let distinct = (0..6).filter(|&i| !seen[..i].contains(&seen[i])).count();
        assert!(distinct >= 3, "{seen:x?}");
    }

    #[test]
    fn scope_output_only_leaves_prompt_only_tokens() {
        let d = with(Declared::VLLM, |d| d.scope = Scope::OutputOnly);
        assert_eq!(penalize(&d, 2.6, &P, 4, 0), 2.6);
        assert_eq!(penalize(&Declared::VLLM, 2.6, &P, 4, 0), 2.6 / 1.3);
    }

    #[test]
    fn bin_counts_ignore_padding_and_refuse_other_ids() {
        let mut c = [0u32; 8];
        // Two rows of 3 ids over a vocabulary of 4; 4 is padding.
        bin_counts("prompt", &[1, 1, 4, 3, 4, 0], 2, 4, &mut c).unwrap();
        assert_eq!(c, [0, 2, 0, 0, 1, 0, 0, 1]);
        assert_eq!(
            bin_counts("output", &[1, 5, 4, 3, 4, 0], 2, 4, &mut c),
            Err(PenaltyError::Id {
                arg: "output",
                row: 0,
                pos: 1,
                id: 5,
                vocab: 4
            })
        );
        assert!(matches!(
            bin_counts("prompt", &[-1], 1, 4, &mut c[..4]),
            Err(PenaltyError::Id { id: -1, .. })
        ));
        assert!(matches!(
            bin_counts("prompt", &[0, 1, 2], 2, 4, &mut c),
            Err(PenaltyError::Len { arg: "prompt", .. })
        ));
        // No ids at all: zero counts.
        bin_counts("prompt", &[], 2, 4, &mut c).unwrap();
        assert_eq!(c, [0; 8]);
    }

    #[test]
    fn validation_refuses_nonpositive_repetition_and_nonfinite_penalties() {
        let ok = |p: Penalties| validate(3, &p);
        assert_eq!(ok(P), Ok(()));
        assert_eq!(
            ok(Penalties {
                frequency: -2.0,
                presence: -2.0,
                ..P
            }),
            Ok(())
        );
        for r in [0.0f32, -0.0, -1.0, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                ok(Penalties { repetition: r, ..P }),
                Err(PenaltyError::Repetition { row: 3, .. })
            ));
        }
        assert!(matches!(
            ok(Penalties {
                frequency: f32::NAN,
                ..P
            }),
            Err(PenaltyError::Frequency { .. })
        ));
        assert!(matches!(
            ok(Penalties {
                presence: f32::NEG_INFINITY,
                ..P
            }),
            Err(PenaltyError::Presence { .. })
        ));
        let x = Inputs {
            logits: &[0.0; 6],
            penalties: &[P, P],
            prompt_counts: &[0; 6],
            output_counts: &[0; 5],
        };
        let mut out = [0f32; 6];
        assert_eq!(
            apply_penalties(2, 3, &Declared::VLLM, &x, &mut out),
            Err(PenaltyError::Len {
                arg: "output_counts",
                want: 6,
                got: 5
            })
        );
        assert_eq!(
            apply_penalties(0, 3, &Declared::VLLM, &x, &mut out),
            Err(PenaltyError::Zero { dim: "rows" })
        );
    }

    #[test]
    fn apply_penalties_is_penalize_per_token_with_each_rows_own_penalties() {
        let logits = [1.0f32, -1.0, 2.0, 0.5, -0.5, 3.0];
        let q = Penalties {
            repetition: 2.0,
            frequency: 0.25,
            presence: 1.0,
        };
        let x = Inputs {
            logits: &logits,
            penalties: &[P, q],
            prompt_counts: &[1, 0, 0, 0, 1, 0],
            output_counts: &[0, 2, 0, 1, 0, 0],
        };
        let mut out = [0f32; 6];
        apply_penalties(2, 3, &Declared::VLLM, &x, &mut out).unwrap();
        assert_eq!(out[0], 1.0 / 1.3);
        assert_eq!(out[1], -1.3 - 0.7 * 2.0 - 0.45);
        assert_eq!(out[2], 2.0);
        assert_eq!(out[3], 0.5 / 2.0 - 0.25 - 1.0);
        assert_eq!(out[4], -0.5 * 2.0);
        assert_eq!(out[5], 3.0);
    }
}
