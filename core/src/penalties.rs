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
//!    0 ? RN(l * RN(1 / p)) : RN(l * p)`. Rule `PEN-REP-ZERO`: the
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
//!    `RN(RN(+0 + f) + f) ...`. Applied to every token: `oc = 0` gives
//!    `RN(f * 0)`, a zero signed as `f`.
//! 4. `PEN-PRES` (presence): [`Frequency::Separate`], [`Frequency::Fma`]
//!    and [`Frequency::FmaScaled`], `RN(l - RN(q * m))` with `m = 1` if
//!    `oc > 0` else `0` (fused or not alike: `q * m` is exact);
//!    [`Frequency::Accumulate`], `RN(l - (oc > 0 ? q : +0))`.
//! 5. `PEN-FMA-SCALED`: a kernel that writes the repetition step as a
//!    product by a per-token multiplier (vLLM v1's `logits *= scale`,
//!    `scale` being `1` for an unseen token, `RN(1/p)` for a positive
//!    logit and `p` otherwise) and the frequency step right after it,
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
//!    [`Frequency::Accumulate`] (a `+0` accumulator) keeps it `-0`.
//! 8. `PEN-NEUTRAL`: `p = 1`, `f = +0`, `q = +0` give the logit bit for
//!    bit under every declaration (`l / 1 = l * 1 = l`, `RN(1/1) = 1`,
//!    `l - (+0) = l`, `fma(-0, c, l) = l`), NaN as NaN.
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
//!   output_mask`: [`Declared::VLLM`].
//! - vLLM v1's GPU worker, `vllm/v1/worker/gpu/sample/penalties.py`
//!   (`_penalties_kernel`, Triton): the same order and scope from
//!   `prompt_bin_counts` (or a prompt bin mask) and `output_bin_counts`,
//!   but `scale = where(logits > 0, 1.0 / scale, scale); logits *= scale`:
//!   [`Repetition::Reciprocal`] when `1.0 / scale` is correctly rounded
//!   (Triton's `/` on f32 is PTX `div.full.f32`, within 2 ulps: triton
//!   issue 10661); `logits -= freq * counts` follows `logits *= scale`,
//!   which Triton's `enable_fp_fusion` may contract with it
//!   ([`Frequency::FmaScaled`]; a kernel whose repetition step is a
//!   select of a division, [`Frequency::Fma`]).
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
//!   only the generated tokens' logits are loaded, then `where(l > 0, l /
//!   rep, l * rep)`, `- count * freq`, `- presence`: vLLM's order,
//!   [`Scope::OutputOnly`].
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
    /// `l > 0 ? RN(l / p) : RN(l * p)`: vLLM v0, Hugging Face, SGLang,
    /// LightLLM.
    Divide,
    /// `l > 0 ? RN(l * RN(1 / p)) : RN(l * p)`: vLLM v1's GPU worker
    /// (`scale = 1.0 / scale; logits *= scale`) with a correctly rounded
    /// reciprocal.
    Reciprocal,
    /// A known bug: `RN(l / p)` for every sign, which raises a negative
    /// logit when `p > 1` (transformers issue 2302).
    DivideAll,
    /// A known bug: `RN(l * RN(1 / p))` for every sign (NeMo issue 8194;
    /// panbanda/higgs pull request 32's review).
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

    /// A seen token's logit `l` penalised by `p`.
    pub fn apply(self, l: f32, p: f32) -> f32 {
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
                    l * (1.0 / p)
                } else {
                    l * p
                }
            }
            Repetition::DivideAll => l / p,
            Repetition::ReciprocalAll => l * (1.0 / p),
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
}

impl Frequency {
    /// Every form.
    pub const ALL: [Frequency; 4] = [
        Frequency::Separate,
        Frequency::Fma,
        Frequency::FmaScaled,
        Frequency::Accumulate,
    ];

    /// `"separate"`, `"fma"`, `"fma_scaled"` or `"accumulate"`.
    pub const fn name(self) -> &'static str {
        match self {
            Frequency::Separate => "separate",
            Frequency::Fma => "fma",
            Frequency::FmaScaled => "fma_scaled",
            Frequency::Accumulate => "accumulate",
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
}

impl Declared {
    /// vLLM v0's `apply_penalties`.
    pub const VLLM: Declared = Declared {
        order: Order::RepetitionFrequencyPresence,
        scope: Scope::PromptAndOutput,
        repetition: Repetition::Divide,
        frequency: Frequency::Separate,
    };
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
/// with the frequency step after it): `l` the logit, `p` its row's penalties (not
/// checked: see [`validate`]), `prompt_count` and `output_count` its
/// counts.
pub fn penalize(d: &Declared, l: f32, p: &Penalties, prompt_count: u32, output_count: u32) -> f32 {
    let steps = d.order.steps();
    let seen = d.scope.seen(prompt_count, output_count);
    let mut x = l;
    let mut k = 0;
    while k < steps.len() {
        x = match steps[k] {
            Step::Repetition => match scale(d, x, p.repetition, seen) {
                // Rule PEN-FMA-SCALED: this step and the next, fused.
                Some(s) if steps.get(k + 1) == Some(&Step::Frequency) => {
                    k += 1;
                    fma_f32(x, s, -(p.frequency * output_count as f32))
                }
                _ if seen => d.repetition.apply(x, p.repetition),
                _ => x,
            },
            Step::Frequency => d.frequency.frequency(x, p.frequency, output_count),
            Step::Presence => d.frequency.presence(x, p.presence, output_count),
        };
        k += 1;
    }
    x
}

/// Rule `PEN-FMA-SCALED`'s multiplier of logit `l` under `d`, or None
/// when `d` does not fuse the repetition step (not
/// [`Frequency::FmaScaled`], or a division).
fn scale(d: &Declared, l: f32, p: f32, seen: bool) -> Option<f32> {
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
        1.0 / p
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
/// by token ([`penalize`]).
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
