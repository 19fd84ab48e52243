//! Cases for judging a logits-penalties kernel (vLLM's `apply_penalties`
//! and its GPU worker's `_penalties_kernel`, Hugging Face's
//! `RepetitionPenaltyLogitsProcessor`, SGLang's penalizers, a torch or
//! Triton kernel) bit for bit against [`oracle::penalties`] under the
//! forms it declares, and for naming every known declaration its output
//! matches.
//!
//! A case (elements, row-major): `logits [B][V]` (f32; `-inf` for a
//! masked token, NaN and `+inf` in MASKED), per row [`Penalties`], and the
//! tokens each row has seen, as ids padded with `V` (vLLM's padding:
//! `prompt [B][P]`, `output [B][O]`, int64; [`id_lengths`] gives `P` and
//! `O`) and as the counts they make (`[B][V]` each, rule `PEN-ID`): a
//! kernel takes whichever form it declares ([`Inputs`]).
//!
//! The arms, each aimed at a class of bugs, each row with its own
//! penalties (vLLM passes them per request: a kernel that reads row 0's
//! for every row fails):
//! - RAND: normal logits, penalties of both signs, tokens in the prompt,
//!   the output or both: the order, the forms, the scope;
//! - NEG: nine logits in ten negative: dividing a negative logit
//!   (transformers issue 2302) or multiplying every sign by `1/p`;
//! - ZERO: two thirds of the logits `+0` or `-0`, negative frequency and
//!   presence penalties on some rows (rule `PEN-ZERO-SIGN`: what parts the
//!   sparse forms, which never write a token not generated, from the
//!   others);
//! - TIES: seen logits drawn where [`Repetition::Divide`] and
//!   [`Repetition::Reciprocal`] part (positive logits), or where
//!   [`Frequency::Separate`] and [`Frequency::Fma`] part (the logit
//!   cancels most of `f c`); the positive ones also part the multipliers
//!   of rule `PEN-RECIP-ULPS` (`RN(1/p)` against its neighbours), so
//!   that a kernel whose multiplier changes between the tokens of a row,
//!   or lies outside the declared ulps, reproduces no member;
//! - MASKED: half the seen tokens `-inf`, a NaN on a third of the rows, a
//!   `+inf` on a quarter;
//! - PAD: every row padded (some wholly), tokens 0 and `V - 1` never
//!   seen and every row's penalties active, so an id `V` wrapped onto 0 or
//!   clamped onto `V - 1` changes their logits;
//! - IDENTITY: three rows in four with the neutral penalties `1.0, 0.0,
//!   0.0` (rule `PEN-NEUTRAL`), the fourth with one penalty active;
//!   logits include `±0` and `±inf`;
//! - COUNTS: 1024 output ids per row (2053 at a model's vocabulary), two
//!   tokens taking 60% of them
//!   (counts past 255), frequency penalties whose products with the counts
//!   are exact (0.5, 0.25, ...) and others that are not;
//! - PROMPT_ONLY: prompt and output tokens disjoint, most seen tokens in
//!   the prompt only: repetition yes, frequency and presence no.
//!
//! Judging is bit for bit, row by row: under a declaration whose
//! multiplier may be approximate (rule `PEN-RECIP-ULPS`, `recip_ulps >
//! 0`), a row passes when one member of its candidate multipliers
//! reproduces every element of it ([`judge`]); [`identify`] names the
//! approximate forms too (`reciprocal(2 ulps)`: [`KNOWN_RECIP_ULPS`]).

use crate::rng::Rng;
use oracle::penalties::{
    bin_counts, penalize, penalize_with_reciprocal, validate, Declared, Frequency, Order,
    Penalties, Repetition, Scope,
};
use rayon::prelude::*;

/// The data a case draws (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal logits and penalties.
    Rand,
    /// Mostly negative logits.
    Neg,
    /// `±0` logits, negative subtracted penalties.
    Zero,
    /// Where the declarable forms part.
    Ties,
    /// `-inf` (and NaN, `+inf`) logits among the seen tokens.
    Masked,
    /// Padding ids.
    Pad,
    /// Neutral penalties.
    Identity,
    /// Large output counts.
    Counts,
    /// Tokens seen only in the prompt.
    PromptOnly,
}

impl Arm {
    /// Every arm, in the order a check runs them and a fuzz input's first
    /// byte selects them ([`Spec::from_bytes`]).
    pub const ALL: [Arm; 9] = [
        Arm::Rand,
        Arm::Neg,
        Arm::Zero,
        Arm::Ties,
        Arm::Masked,
        Arm::Pad,
        Arm::Identity,
        Arm::Counts,
        Arm::PromptOnly,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Neg => "NEG",
            Arm::Zero => "ZERO",
            Arm::Ties => "TIES",
            Arm::Masked => "MASKED",
            Arm::Pad => "PAD",
            Arm::Identity => "IDENTITY",
            Arm::Counts => "COUNTS",
            Arm::PromptOnly => "PROMPT_ONLY",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }
}

/// Which form of the seen tokens a kernel takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inputs {
    /// Token ids, `[B][P]` and `[B][O]` int64 padded with `V` (vLLM v0's
    /// `prompt_tokens_tensor`, `output_tokens_tensor`; Hugging Face's
    /// `input_ids` once the padding is dropped).
    Ids,
    /// Counts, `[B][V]` int32 each (vLLM v1's `prompt_bin_counts` or mask
    /// and `output_bin_counts`).
    Counts,
}

impl Inputs {
    /// Both forms.
    pub const ALL: [Inputs; 2] = [Inputs::Ids, Inputs::Counts];

    /// `"ids"` or `"counts"`.
    pub fn name(self) -> &'static str {
        match self {
            Inputs::Ids => "ids",
            Inputs::Counts => "counts",
        }
    }

    /// The form named `s`.
    ///
    /// # Errors
    /// The names.
    pub fn parse(s: &str) -> Result<Inputs, String> {
        crate::names::parse_named("inputs", s, &Inputs::ALL, Inputs::name, false)
    }
}

/// The order named `s` ([`Order::name`]).
///
/// # Errors
/// The names.
pub fn parse_order(s: &str) -> Result<Order, String> {
    crate::names::parse_named("order", s, &Order::ALL, Order::name, false)
}

/// The repetition scope named `s` ([`Scope::name`]).
///
/// # Errors
/// The names.
pub fn parse_scope(s: &str) -> Result<Scope, String> {
    crate::names::parse_named("repetition_scope", s, &Scope::ALL, Scope::name, false)
}

/// The repetition form named `s` ([`Repetition::name`]), the known-bug
/// forms included.
///
/// # Errors
/// The names.
pub fn parse_repetition(s: &str) -> Result<Repetition, String> {
    crate::names::parse_named("repetition", s, &Repetition::ALL, Repetition::name, false)
}

/// The frequency form named `s` ([`Frequency::name`]).
///
/// # Errors
/// The names.
pub fn parse_frequency(s: &str) -> Result<Frequency, String> {
    crate::names::parse_named("frequency", s, &Frequency::ALL, Frequency::name, false)
}

/// The most logits a case has (`B V`; 16 MiB of f32).
pub const MAX_LOGITS: usize = 1 << 22;

/// The most ids a case has (`B (P + O)`; 128 MiB of int64).
pub const MAX_IDS: usize = 1 << 24;

/// `(batch, vocab)`.
pub type Dims = (usize, usize);

/// The ids per row `(P, O)` of a case: `P = clamp(V, 8, 256)` prompt
/// ids; `O = clamp(V / 2, 8, 128)` output ids, 1024 in COUNTS. In RAND
/// and COUNTS at a model's vocabulary ([`LONG_VOCAB`] or more) both are
/// longer, past blocks of 256 to 2048 ids (a kernel that reads one block
/// of ids, or sizes its loop by a constant, fails there): `P` 2053, `O`
/// 1029, 2053 in COUNTS. Rows use fewer and pad the rest with `V`.
pub fn id_lengths(arm: Arm, vocab: usize) -> (usize, usize) {
    let long = vocab >= LONG_VOCAB && matches!(arm, Arm::Rand | Arm::Counts);
    let p = if long { 2053 } else { vocab.clamp(8, 256) };
    let o = match (arm == Arm::Counts, long) {
        (true, true) => 2053,
        (true, false) => 1024,
        (false, true) => 1029,
        (false, false) => (vocab / 2).clamp(8, 128),
    };
    (p, o)
}

/// The vocabulary from which [`id_lengths`] draws a serving-length prompt
/// and output (Llama-2's 32000 is the smallest model vocabulary of the
/// default shapes).
pub const LONG_VOCAB: usize = 32_000;

/// `d` checked against the caps (every arm's ids included).
///
/// # Errors
/// An empty shape, or one over [`MAX_LOGITS`] or [`MAX_IDS`], as a
/// sentence.
pub fn within_caps(d: Dims) -> Result<(), String> {
    if d.0 == 0 || d.1 == 0 {
        return Err(format!("{d:?}: an empty batch or vocabulary"));
    }
    let logits = d.0.saturating_mul(d.1);
    if logits > MAX_LOGITS {
        return Err(format!(
            "{d:?}: {logits} logits, over the check's {MAX_LOGITS}"
        ));
    }
    let (p, o) = id_lengths(Arm::Counts, d.1);
    let ids = d.0.saturating_mul(p + o);
    if ids > MAX_IDS {
        return Err(format!(
            "{d:?}: {ids} token ids, over the check's {MAX_IDS}"
        ));
    }
    Ok(())
}

/// The shapes [`Spec::from_bytes`] draws from: one token, two, a ragged
/// few, then the check's vocabularies.
pub const FUZZ_DIMS: [Dims; 8] = [
    (1, 1),
    (2, 2),
    (4, 7),
    (3, 33),
    (9, 129),
    (16, 1000),
    (2, 4096),
    (3, 32000),
];

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `(batch, vocab)`.
    pub dims: Dims,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs, in both forms.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `(batch, vocab)`.
    pub dims: Dims,
    /// `[B][V]`.
    pub logits: Vec<f32>,
    /// `[B]`.
    pub penalties: Vec<Penalties>,
    /// `[B][P]` prompt ids, padded with `V`.
    pub prompt: Vec<i64>,
    /// `[B][O]` output ids, padded with `V`.
    pub output: Vec<i64>,
    /// `P`.
    pub prompt_len: usize,
    /// `O`.
    pub output_len: usize,
    /// `[B][V]`, rule `PEN-ID` of `prompt`.
    pub prompt_counts: Vec<u32>,
    /// `[B][V]`, rule `PEN-ID` of `output`.
    pub output_counts: Vec<u32>,
}

impl Case {
    /// The per-row penalties as the callable gets them, in vLLM's
    /// `apply_penalties` argument order: `(presence, frequency,
    /// repetition)`.
    pub fn columns(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        (
            self.penalties.iter().map(|p| p.presence).collect(),
            self.penalties.iter().map(|p| p.frequency).collect(),
            self.penalties.iter().map(|p| p.repetition).collect(),
        )
    }
}

/// A random value in `[lo, hi)` with 24 random bits.
fn uniform(rng: &mut Rng, lo: f32, hi: f32) -> f32 {
    lo + (hi - lo) * rng.f01()
}

/// `n` ids drawn from `pool` (with repeats); none from an empty pool.
fn draw(rng: &mut Rng, pool: &[usize], n: usize) -> Vec<i64> {
    if pool.is_empty() {
        return Vec::new();
    }
    (0..n).map(|_| pool[rng.below(pool.len())] as i64).collect()
}

/// One row as the generator draws it.
struct Row {
    logits: Vec<f32>,
    penalties: Penalties,
    prompt: Vec<i64>,
    output: Vec<i64>,
}

fn row_counts(ids: &[i64], v: usize) -> Vec<u32> {
    let mut c = vec![0u32; v];
    for &i in ids {
        c[i as usize] += 1;
    }
    c
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(d: Dims, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x9E7A_1715_0000_0000u64, &[d.0, d.1]);
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ arm
    }

    /// A case from fuzz bytes. The leading bytes choose every path: byte
    /// 0 the arm (`% 9`, so each arm 28 or 29 values in 256), byte 1 the
    /// shape (`% 8` of [`FUZZ_DIMS`]), then up to 8 bytes of seed (missing
    /// bytes read 0).
    pub fn from_bytes(data: &[u8]) -> Spec {
        let byte = |i: usize| data.get(i).copied().unwrap_or(0);
        let mut seed = [0u8; 8];
        for (k, s) in seed.iter_mut().enumerate() {
            *s = byte(2 + k);
        }
        Spec {
            dims: FUZZ_DIMS[usize::from(byte(1) % 8)],
            arm: Arm::ALL[usize::from(byte(0) % 9)],
            seed: u64::from_le_bytes(seed),
        }
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn generate(&self) -> Result<Case, String> {
        within_caps(self.dims)?;
        let (b, v) = self.dims;
        let (pl, ol) = id_lengths(self.arm, v);
        let mut rng = Rng(self.seed);
        let mut case = Case {
            dims: self.dims,
            logits: Vec::with_capacity(b * v),
            penalties: Vec::with_capacity(b),
            prompt: vec![v as i64; b * pl],
            output: vec![v as i64; b * ol],
            prompt_len: pl,
            output_len: ol,
            prompt_counts: vec![0; b * v],
            output_counts: vec![0; b * v],
        };
        for r in 0..b {
            // Cycling choices by row (offset by the seed) so neighbouring
            // rows differ.
            let c = r + rng.below(7);
            let row = self.row(&mut rng, c, pl, ol);
            debug_assert!(row.prompt.len() <= pl && row.output.len() <= ol);
            validate(r, &row.penalties).map_err(|e| e.to_string())?;
            case.logits.extend_from_slice(&row.logits);
            case.penalties.push(row.penalties);
            case.prompt[r * pl..r * pl + row.prompt.len()].copy_from_slice(&row.prompt);
            case.output[r * ol..r * ol + row.output.len()].copy_from_slice(&row.output);
        }
        bin_counts("prompt", &case.prompt, b, v, &mut case.prompt_counts)
            .map_err(|e| e.to_string())?;
        bin_counts("output", &case.output, b, v, &mut case.output_counts)
            .map_err(|e| e.to_string())?;
        Ok(case)
    }

    /// Row `c` (the row's cycle position) of this arm.
    fn row(&self, rng: &mut Rng, c: usize, pl: usize, ol: usize) -> Row {
        let v = self.dims.1;
        let normal = |rng: &mut Rng, sd: f32| sd * rng.normal();
        // Penalties of both signs, each neutral on some rows, the random
        // ones with 24-bit significands.
        let mut penalties = Penalties {
            repetition: match c % 6 {
                0 => 1.0,
                1 => 1.2,
                2 => 0.8,
                3 => 1.5,
                4 => 2.0,
                _ => uniform(rng, 0.5, 2.5),
            },
            frequency: match c % 5 {
                0 => 0.0,
                1 => 0.5,
                2 => -0.3,
                3 => uniform(rng, -2.0, 2.0),
                _ => 1.7,
            },
            presence: match (c / 2) % 6 {
                0 | 5 => 0.0,
                1 => 0.4,
                2 => -0.6,
                3 => uniform(rng, -2.0, 2.0),
                _ => 1.1,
            },
        };
        // The usual ids: a hot set of tokens, the prompt drawing from its
        // first two thirds and the output from its last two thirds (so
        // some tokens are in the prompt only, some in both, some in the
        // output only), row lengths from empty to full.
        let hot_n = v.min((pl + ol) / 2).max(1);
        let hot: Vec<usize> = (0..hot_n).map(|_| rng.below(v)).collect();
        let (a, z) = ((2 * hot_n).div_ceil(3), hot_n / 3);
        let lp = [pl, pl / 2, 0, rng.below(pl + 1)][c % 4];
        let lo = [ol, rng.below(ol + 1), ol / 3, 0, ol][c % 5];
        let mut prompt = draw(rng, &hot[..a], lp);
        let mut output = draw(rng, &hot[z..], lo);
        let mut logits: Vec<f32> = match self.arm {
            Arm::Rand | Arm::Masked | Arm::Pad | Arm::PromptOnly | Arm::Counts => {
                let sd = [1.0f32, 3.0, 8.0][c % 3];
                (0..v).map(|_| normal(rng, sd)).collect()
            }
            Arm::Neg => {
                let sd = [1.0f32, 3.0, 8.0][c % 3];
                (0..v)
                    .map(|_| {
                        let x = normal(rng, sd).abs();
                        if rng.below(10) == 0 {
                            x
                        } else {
                            -x
                        }
                    })
                    .collect()
            }
            Arm::Zero => (0..v)
                .map(|_| match rng.below(3) {
                    0 => 0.0,
                    1 => -0.0,
                    _ => normal(rng, 2.0),
                })
                .collect(),
            Arm::Identity => (0..v)
                .map(|_| match rng.below(16) {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f32::NEG_INFINITY,
                    3 => f32::INFINITY,
                    _ => normal(rng, 3.0),
                })
                .collect(),
            // Drawn below, once the counts are known.
            Arm::Ties => Vec::new(),
        };
        match self.arm {
            Arm::Rand | Arm::Masked => {}
            Arm::Neg => {
                penalties.repetition = [1.3, 1.7, 0.7, uniform(rng, 1.05, 2.0)][c % 4];
            }
            Arm::Zero => {
                penalties = [
                    Penalties {
                        repetition: 1.3,
                        frequency: -0.5,
                        presence: -0.25,
                    },
                    Penalties {
                        repetition: 0.8,
                        frequency: 0.6,
                        presence: 0.3,
                    },
                    Penalties {
                        repetition: 1.0,
                        frequency: -0.7,
                        presence: 0.0,
                    },
                    Penalties {
                        repetition: 1.7,
                        frequency: 0.0,
                        presence: -1.2,
                    },
                ][c % 4];
            }
            Arm::Identity => {
                penalties = Penalties::NONE;
                if c % 4 == 3 {
                    match (c / 4) % 3 {
                        0 => penalties.repetition = 1.4,
                        1 => penalties.frequency = 0.3,
                        _ => penalties.presence = -0.8,
                    }
                }
            }
            Arm::Pad => {
                // Real ids avoid 0 and V - 1; every row keeps some padding
                // in both arrays; every penalty active.
                let inner: Vec<usize> = if v >= 3 {
                    (1..v - 1).collect()
                } else {
                    Vec::new()
                };
                let lp = [0, pl / 4, pl / 2, rng.below(pl)][c % 4];
                let lo = [ol / 2, 0, ol / 4, rng.below(ol)][c % 4];
                prompt = draw(rng, &inner, lp);
                output = draw(rng, &inner, lo);
                penalties = Penalties {
                    repetition: [1.5, 0.7, 1.25, 2.0][c % 4],
                    frequency: [0.4, -0.9, 1.1, 0.3][c % 4],
                    presence: [0.5, 0.8, -0.3, 1.0][c % 4],
                };
            }
            Arm::Counts => {
                // Two tokens take 40% and 20% of up to 2053 output ids.
                let lo = [ol, ol, 3 * ol / 4, ol / 2][c % 4];
                let (t0, t1) = (rng.below(v), rng.below(v));
                output = (0..lo)
                    .map(|_| match rng.below(10) {
                        0..=3 => t0,
                        4 | 5 => t1,
                        _ => rng.below(v),
                    } as i64)
                    .collect();
                penalties.frequency = [0.5, 0.25, 1.5, 0.125, uniform(rng, -2.0, 2.0)][c % 5];
                penalties.presence = uniform(rng, -1.0, 1.0);
                penalties.repetition = uniform(rng, 0.5, 2.0);
            }
            Arm::PromptOnly => {
                // The prompt from one set of tokens, the output from
                // tokens outside it.
                let mut in_prompt = vec![false; v];
                let sp: Vec<usize> = (0..v.min(pl)).map(|_| rng.below(v)).collect();
                sp.iter().for_each(|&t| in_prompt[t] = true);
                let so: Vec<usize> = (0..(ol / 4).max(1))
                    .map(|_| rng.below(v))
                    .filter(|&t| !in_prompt[t])
                    .collect();
                prompt = draw(rng, &sp, pl);
                output = draw(rng, &so, ol / 4);
                let sign = |rng: &mut Rng| if rng.below(2) == 0 { 1.0f32 } else { -1.0 };
                penalties = Penalties {
                    repetition: if c.is_multiple_of(2) {
                        uniform(rng, 1.1, 2.0)
                    } else {
                        uniform(rng, 0.5, 0.9)
                    },
                    frequency: sign(rng) * uniform(rng, 0.2, 1.5),
                    presence: sign(rng) * uniform(rng, 0.2, 1.5),
                };
            }
            Arm::Ties => {
                penalties = Penalties {
                    repetition: uniform(rng, 1.05, 1.95),
                    frequency: if rng.below(2) == 0 { 1.0 } else { -1.0 } * uniform(rng, 0.1, 2.0),
                    presence: uniform(rng, -1.0, 1.0),
                };
                // A small output pool, so counts of 1 to about 16.
                let pool: Vec<usize> = (0..(ol / 8).max(1)).map(|_| rng.below(v)).collect();
                prompt = draw(rng, &hot[..a], pl / 2);
                output = draw(rng, &pool, ol);
                let (pc, oc) = (row_counts(&prompt, v), row_counts(&output, v));
                logits = (0..v)
                    .map(|i| ties_logit(rng, i, &penalties, pc[i], oc[i]))
                    .collect();
            }
        }
        if self.arm == Arm::Masked {
            let (pc, oc) = (row_counts(&prompt, v), row_counts(&output, v));
            for (i, l) in logits.iter_mut().enumerate() {
                let seen = pc[i] > 0 || oc[i] > 0;
                if (seen && rng.below(2) == 0) || rng.below(8) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
            if c.is_multiple_of(3) {
                // A NaN on a seen token where there is one.
                let seen: Vec<usize> = (0..v).filter(|&i| pc[i] > 0 || oc[i] > 0).collect();
                let i = if seen.is_empty() {
                    rng.below(v)
                } else {
                    seen[rng.below(seen.len())]
                };
                logits[i] = f32::NAN;
            }
            if c % 4 == 1 {
                logits[rng.below(v)] = f32::INFINITY;
            }
        }
        Row {
            logits,
            penalties,
            prompt,
            output,
        }
    }
}

/// TIES's logit for token `i` with its counts: a seen token gets one where
/// two declarable forms part under vLLM's order and scope (even tokens and
/// tokens in the prompt only: divide against reciprocal, on a positive
/// logit, where the multipliers `RN(1/p)` and its two neighbours also
/// give three values, rule `PEN-RECIP-ULPS`; odd generated tokens:
/// separate against fma, a logit whose penalised value cancels most of
/// `f c`), the best of 64 tries; an unseen token a normal value.
fn ties_logit(rng: &mut Rng, i: usize, p: &Penalties, pc: u32, oc: u32) -> f32 {
    if pc == 0 && oc == 0 {
        return 3.0 * rng.normal();
    }
    let vllm = Declared::VLLM;
    let other = if i % 2 == 1 && oc > 0 {
        Declared {
            frequency: Frequency::Fma,
            ..vllm
        }
    } else {
        Declared {
            repetition: Repetition::Reciprocal,
            ..vllm
        }
    };
    // The first try that parts the forms, kept should none also part the
    // neighbours.
    let mut parted = None;
    let mut l = 0.0;
    for _ in 0..64 {
        l = if other.frequency == Frequency::Fma {
            // The value after the repetition penalty near f c + q, so
            // that subtracting f c leaves about q and subtracting q (exact
            // by Sterbenz's lemma when within a factor 2) leaves a value
            // whose last bits show f c's rounding.
            let fc = p.frequency * oc as f32;
            let t =
                fc + p.presence + 0.05 * (2.0 * rng.f01() - 1.0) * fc.abs().max(p.presence.abs());
            if t > 0.0 {
                t * p.repetition
            } else {
                t / p.repetition
            }
        } else {
            4.0 * rng.normal().abs() + 0.01
        };
        if penalize(&vllm, l, p, pc, oc) != penalize(&other, l, p, pc, oc) {
            if other.frequency == Frequency::Fma || parts_neighbours(&other, l, p, pc, oc) {
                return l;
            }
            parted.get_or_insert(l);
        }
    }
    parted.unwrap_or(l)
}

/// Whether `l` penalised under `d` gives three values with the
/// multipliers `RN(1/p)` and its two neighbours (rule `PEN-RECIP-ULPS`).
fn parts_neighbours(d: &Declared, l: f32, p: &Penalties, pc: u32, oc: u32) -> bool {
    let rn = 1.0 / p.repetition;
    let at = |k: i32| {
        let r = f32::from_bits(rn.to_bits().wrapping_add_signed(k));
        penalize_with_reciprocal(d, l, p, r, pc, oc).to_bits()
    };
    let (lo, mid, hi) = (at(-1), at(0), at(1));
    lo != mid && mid != hi && lo != hi
}

/// `got` (bits) is `want`'s value: the same bits, or both NaN (which NaN
/// a kernel writes is not specified: IEEE 754 section 6.2.3).
pub fn same(got: u32, want: f32) -> bool {
    got == want.to_bits() || (f32::from_bits(got).is_nan() && want.is_nan())
}

/// The oracle's output of `case` under `d`, rows in parallel (each token
/// by core's [`oracle::penalties::penalize`], as
/// [`oracle::penalties::apply_penalties`]): under `recip_ulps > 0`, the
/// member of rule `PEN-RECIP-ULPS` whose multiplier is `RN(1/p)`.
pub fn reference(case: &Case, d: &Declared) -> Vec<f32> {
    let v = case.dims.1;
    let mut out = vec![0f32; case.logits.len()];
    out.par_chunks_mut(v).enumerate().for_each(|(r, o)| {
        let p = &case.penalties[r];
        for (j, y) in o.iter_mut().enumerate() {
            let i = r * v + j;
            *y = penalize(
                d,
                case.logits[i],
                p,
                case.prompt_counts[i],
                case.output_counts[i],
            );
        }
    });
    out
}

/// Row `row`'s outputs under `d` with the row's multiplier `r` (rule
/// `PEN-RECIP-ULPS`) into `out` (`V` elements).
fn row_with(case: &Case, d: &Declared, row: usize, r: f32, out: &mut [f32]) {
    let v = case.dims.1;
    let p = &case.penalties[row];
    for (j, y) in out.iter_mut().enumerate() {
        let i = row * v + j;
        *y = penalize_with_reciprocal(
            d,
            case.logits[i],
            p,
            r,
            case.prompt_counts[i],
            case.output_counts[i],
        );
    }
}

/// Whether row `row` of `got` (`[B][V]` bits) is `d`'s output with the
/// multiplier `r`, element by element, stopping at the first difference.
fn row_matches(case: &Case, d: &Declared, row: usize, r: f32, got: &[u32]) -> bool {
    let v = case.dims.1;
    let p = &case.penalties[row];
    (row * v..(row + 1) * v).all(|i| {
        let w = penalize_with_reciprocal(
            d,
            case.logits[i],
            p,
            r,
            case.prompt_counts[i],
            case.output_counts[i],
        );
        same(got[i], w)
    })
}

/// One element that differs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// The row.
    pub row: usize,
    /// The token.
    pub token: usize,
    /// The kernel's bits.
    pub got: u32,
    /// The oracle's value, with the row's closest member `reciprocal`.
    pub want: f32,
    /// The row's multiplier `want` was computed with (rule
    /// `PEN-RECIP-ULPS`: `RN(1/p)`, or under `recip_ulps > 0` the member
    /// leaving the fewest elements of the row differing); the division
    /// forms use none.
    pub reciprocal: f32,
}

/// A row no member of its candidate multipliers reproduces (rule
/// `PEN-RECIP-ULPS`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Miss {
    /// The row.
    pub row: usize,
    /// The members tried ([`Declared::reciprocals`]; 1 under
    /// `recip_ulps = 0` or a division form).
    pub members: usize,
    /// The member leaving the fewest elements differing (the first of
    /// those, `RN(1/p)` first, then by distance from `1/p`).
    pub reciprocal: f32,
    /// Its distance from `RN(1/p)` in binary32 steps (its bits less
    /// `RN(1/p)`'s).
    pub steps: i64,
    /// The elements of the row it leaves differing.
    pub differ: usize,
}

/// A case's judgement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Elements compared.
    pub elements: usize,
    /// Elements that differ (in each failing row, those its closest
    /// member leaves).
    pub differ: usize,
    /// The first faults in row-major order, at most eight.
    pub faults: Vec<Fault>,
    /// Rows that differ (no member reproduces them).
    pub rows_differ: usize,
    /// The first of those, at most eight.
    pub misses: Vec<Miss>,
}

impl Verdict {
    /// Every element equal.
    pub fn pass(&self) -> bool {
        self.differ == 0
    }
}

/// Judges a kernel's output `got` (`[B][V]` bits) against `case` under
/// `d`, bit for bit (any NaN equal to any NaN), row by row: a row passes
/// when one member `r` of [`Declared::reciprocals`] (its penalty)
/// reproduces every element of it with [`penalize_with_reciprocal`] (rule
/// `PEN-RECIP-ULPS`: one multiplier per row; `RN(1/p)` alone under
/// `recip_ulps = 0`); a failing row's faults are those of its closest
/// member (fewest differing elements).
///
/// # Errors
/// An output of the wrong length.
///
/// # Panics
/// `d.recip_ulps` over `MAX_RECIP_ULPS` under a reciprocal form.
pub fn judge(case: &Case, d: &Declared, got: &[u32]) -> Result<Verdict, String> {
    if got.len() != case.logits.len() {
        return Err(format!(
            "the output holds {} elements, the case needs {}",
            got.len(),
            case.logits.len()
        ));
    }
    let (b, v) = case.dims;
    // Each row: (its closest member, its differences with it).
    let rows: Vec<(Miss, Vec<Fault>)> = (0..b)
        .into_par_iter()
        .map(|row| {
            let p = case.penalties[row].repetition;
            let members = d.reciprocals(p);
            let members = members.as_slice();
            let mut out = vec![0f32; v];
            let g = &got[row * v..(row + 1) * v];
            let mut best: Option<(usize, f32)> = None;
            for &r in members {
                row_with(case, d, row, r, &mut out);
                let n = g.iter().zip(&out).filter(|(&g, &w)| !same(g, w)).count();
                if best.is_none_or(|(m, _)| n < m) {
                    best = Some((n, r));
                }
                if n == 0 {
                    break;
                }
            }
            let (n, r) = best.unwrap_or((0, members[0]));
            let mut faults = Vec::new();
            if n > 0 {
                row_with(case, d, row, r, &mut out);
                for (j, (&g, &w)) in g.iter().zip(&out).enumerate() {
                    if !same(g, w) && faults.len() < 8 {
                        faults.push(Fault {
                            row,
                            token: j,
                            got: g,
                            want: w,
                            reciprocal: r,
                        });
                    }
                }
            }
            let miss = Miss {
                row,
                members: members.len(),
                reciprocal: r,
                steps: i64::from(r.to_bits()) - i64::from(members[0].to_bits()),
                differ: n,
            };
            (miss, faults)
        })
        .collect();
    let mut verdict = Verdict {
        elements: got.len(),
        ..Verdict::default()
    };
    for (miss, faults) in rows {
        if miss.differ == 0 {
            continue;
        }
        verdict.differ += miss.differ;
        verdict.rows_differ += 1;
        let room = 8 - verdict.faults.len();
        verdict.faults.extend(faults.into_iter().take(room));
        if verdict.misses.len() < 8 {
            verdict.misses.push(miss);
        }
    }
    Ok(verdict)
}

/// The ulps of rule `PEN-RECIP-ULPS` that [`known`] names for the
/// reciprocal forms: 0 (correctly rounded), 1 (faithful) and 2 (PTX's
/// `div.full.f32`, Triton's f32 `/`).
pub const KNOWN_RECIP_ULPS: [u32; 3] = [0, 1, 2];

/// Every known declaration (every order, scope, repetition form, the
/// known-bug forms included, and frequency form; the reciprocal forms
/// under each of [`KNOWN_RECIP_ULPS`]), vLLM's first: 576.
pub fn known() -> Vec<Declared> {
    let mut out = Vec::with_capacity(576);
    for order in Order::ALL {
        for scope in Scope::ALL {
            for repetition in Repetition::ALL {
                let ulps: &[u32] = if repetition.has_reciprocal() {
                    &KNOWN_RECIP_ULPS
                } else {
                    &[0]
                };
                for &recip_ulps in ulps {
                    for frequency in Frequency::ALL {
                        out.push(Declared {
                            order,
                            scope,
                            repetition,
                            frequency,
                            recip_ulps,
                        });
                    }
                }
            }
        }
    }
    out
}

/// `"repetition_frequency_presence/prompt_and_output/divide/separate"`:
/// the order, the scope, the repetition form and the frequency form, by
/// the names the check takes; a reciprocal form under `recip_ulps = n >
/// 0` (rule `PEN-RECIP-ULPS`, the check's `recip_ulps=n`) reads
/// `reciprocal(n ulps)` (`reciprocal(1 ulp)`).
pub fn label(d: &Declared) -> String {
    let rep = if d.recip_ulps == 0 || !d.repetition.has_reciprocal() {
        d.repetition.name().to_string()
    } else {
        format!("{}({})", d.repetition.name(), ulps(d.recip_ulps))
    };
    format!(
        "{}/{}/{rep}/{}",
        d.order.name(),
        d.scope.name(),
        d.frequency.name()
    )
}

/// `"1 ulp"`, `"2 ulps"`.
fn ulps(n: u32) -> String {
    if n == 1 {
        "1 ulp".into()
    } else {
        format!("{n} ulps")
    }
}

/// `v` without the declarations a tighter one in `v` implies: a reciprocal
/// form under `recip_ulps = n` is left out when the same declaration
/// under fewer ulps is in `v` (its members are a superset, so it matches
/// wherever the tighter one does).
pub fn tightest(v: &[Declared]) -> Vec<Declared> {
    v.iter()
        .filter(|d| {
            !v.iter().any(|t| {
                t.recip_ulps < d.recip_ulps
                    && Declared {
                        recip_ulps: d.recip_ulps,
                        ..*t
                    } == **d
            })
        })
        .copied()
        .collect()
}

/// Up to `max` labels of [`tightest`]`(v)` joined by `"; "`, then `"(and
/// N more)"`; `"none known"` for none.
pub fn list(v: &[Declared], max: usize) -> String {
    let v = tightest(v);
    if v.is_empty() {
        return "none known".into();
    }
    let names: Vec<String> = v.iter().take(max).map(label).collect();
    let mut s = names.join("; ");
    if v.len() > max {
        s.push_str(&format!(" (and {} more)", v.len() - max));
    }
    s
}

/// Every known declaration ([`known`]) whose output equals `got` (`[B][V]`
/// bits) everywhere: in every row, with one member of the row's candidate
/// multipliers (rule `PEN-RECIP-ULPS`), as [`judge`] passes it.
///
/// # Errors
/// An output of the wrong length.
pub fn identify(case: &Case, got: &[u32]) -> Result<Vec<Declared>, String> {
    if got.len() != case.logits.len() {
        return Err("an output of the wrong length".into());
    }
    let b = case.dims.0;
    Ok(known()
        .into_iter()
        .filter(|d| {
            (0..b).into_par_iter().all(|row| {
                let members = d.reciprocals(case.penalties[row].repetition);
                members
                    .as_slice()
                    .iter()
                    .any(|&r| row_matches(case, d, row, r, got))
            })
        })
        .collect())
}

fn value(x: f32) -> String {
    format!("{x:e} (0x{:08X})", x.to_bits())
}

/// One fault as a sentence: the row's penalties, the token's logit and
/// counts, both values as bits (and the multiplier the oracle's value was
/// computed with, when it is not `RN(1/p)`), and the known declarations
/// whose value the kernel's is at that element (with some member of the
/// row's multipliers).
pub fn describe(f: &Fault, case: &Case) -> String {
    let v = case.dims.1;
    let i = f.row * v + f.token;
    let p = &case.penalties[f.row];
    let (pc, oc) = (case.prompt_counts[i], case.output_counts[i]);
    let l = case.logits[i];
    let at: Vec<Declared> = known()
        .into_iter()
        .filter(|d| {
            d.reciprocals(p.repetition)
                .as_slice()
                .iter()
                .any(|&r| same(f.got, penalize_with_reciprocal(d, l, p, r, pc, oc)))
        })
        .collect();
    let rn = 1.0 / p.repetition;
    let with = if f.reciprocal.to_bits() == rn.to_bits() {
        String::new()
    } else {
        format!(
            " (with the row's closest multiplier {}, {})",
            value(f.reciprocal),
            steps_from_rn(i64::from(f.reciprocal.to_bits()) - i64::from(rn.to_bits()))
        )
    };
    format!(
        "row {} (repetition {:?}, frequency {:?}, presence {:?}), token {}: logit {}, prompt count {pc}, output count {oc}: got {}, want {}{with}; the value of: {}",
        f.row,
        p.repetition,
        p.frequency,
        p.presence,
        f.token,
        value(l),
        value(f32::from_bits(f.got)),
        value(f.want),
        list(&at, 3)
    )
}

/// `"RN(1/p)"`, `"RN(1/p) + 1 step"`, `"RN(1/p) - 2 steps"`.
fn steps_from_rn(k: i64) -> String {
    match k {
        0 => "RN(1/p)".into(),
        1 | -1 => format!("RN(1/p) {} 1 step", if k > 0 { '+' } else { '-' }),
        _ => format!(
            "RN(1/p) {} {} steps",
            if k > 0 { '+' } else { '-' },
            k.unsigned_abs()
        ),
    }
}

/// A failing row's closest member as a sentence (rule `PEN-RECIP-ULPS`):
/// `"row 3 (repetition 1.3): no multiplier within 2 ulps of 1/p (4
/// members) reproduces the row; the closest, 7.6923e-1 (0x3F44EC4F),
/// RN(1/p) + 1 step, leaves 5 of 1000 elements differing"`.
pub fn describe_miss(m: &Miss, case: &Case, d: &Declared) -> String {
    format!(
        "row {} (repetition {:?}): no multiplier within {} of 1/p ({} members) reproduces the row; the closest, {}, {}, leaves {} of {} elements differing",
        m.row,
        case.penalties[m.row].repetition,
        ulps(d.recip_ulps),
        m.members,
        value(m.reciprocal),
        steps_from_rn(m.steps),
        m.differ,
        case.dims.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: [Dims; 4] = [(4, 7), (9, 129), (16, 1000), (3, 32000)];

    fn case(dims: Dims, arm: Arm) -> Case {
        Spec {
            dims,
            arm,
            seed: Spec::base_seed(dims, arm),
        }
        .generate()
        .unwrap()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn reference_is_cores_apply_penalties() {
        for arm in Arm::ALL {
            for dims in DIMS {
                let c = case(dims, arm);
                for d in known().into_iter().step_by(7) {
                    let mut out = vec![0f32; c.logits.len()];
                    oracle::penalties::apply_penalties(
                        dims.0,
                        dims.1,
                        &d,
                        &oracle::penalties::Inputs {
                            logits: &c.logits,
                            penalties: &c.penalties,
                            prompt_counts: &c.prompt_counts,
                            output_counts: &c.output_counts,
                        },
                        &mut out,
                    )
                    .unwrap();
                    assert_eq!(bits(&out), bits(&reference(&c, &d)), "{arm:?} {dims:?}");
                }
            }
        }
    }

    /// Each arm's first byte: 256 values over 9 arms, 28 or 29 each.
    #[test]
    fn from_bytes_reaches_every_arm_at_its_rate() {
        let mut n = [0usize; 9];
        for b0 in 0..=255u8 {
            let sp = Spec::from_bytes(&[b0, b0.wrapping_mul(7), 1, 2]);
            n[Arm::ALL.iter().position(|&a| a == sp.arm).unwrap()] += 1;
            assert!(sp.generate().is_ok());
        }
        assert!(n.iter().all(|&k| k == 28 || k == 29), "{n:?}");
        assert_eq!(n.iter().sum::<usize>(), 256);
        // Every shape too, and missing bytes read 0.
        let dims: Vec<Dims> = (0..8u8).map(|b1| Spec::from_bytes(&[0, b1]).dims).collect();
        assert_eq!(dims, FUZZ_DIMS);
        assert_eq!(Spec::from_bytes(&[]).seed, 0);
    }

    /// Each arm draws what it is for, at its designed rate, over the
    /// test shapes.
    #[test]
    fn each_arm_draws_its_regime_at_its_rate() {
        let vllm = Declared::VLLM;
        let recip = Declared {
            repetition: Repetition::Reciprocal,
            ..vllm
        };
        let fma = Declared {
            frequency: Frequency::Fma,
            ..vllm
        };
        let rate = |arm: Arm, f: &dyn Fn(&Case, usize) -> Option<bool>| {
            let (mut hit, mut all) = (0usize, 0usize);
            for dims in DIMS {
                let c = case(dims, arm);
                for i in 0..c.logits.len() {
                    if let Some(h) = f(&c, i) {
                        all += 1;
                        hit += usize::from(h);
                    }
                }
            }
            hit as f64 / all.max(1) as f64
        };
        let seen = |c: &Case, i: usize| c.prompt_counts[i] > 0 || c.output_counts[i] > 0;
        // NEG: nine logits in ten negative.
        let r = rate(Arm::Neg, &|c, i| Some(c.logits[i] < 0.0));
        assert!((0.85..0.95).contains(&r), "NEG {r}");
        // ZERO: two thirds zeros, both signs.
        let r = rate(Arm::Zero, &|c, i| Some(c.logits[i] == 0.0));
        assert!((0.6..0.73).contains(&r), "ZERO {r}");
        let r = rate(Arm::Zero, &|c, i| {
            (c.logits[i] == 0.0).then(|| c.logits[i].is_sign_negative())
        });
        assert!((0.4..0.6).contains(&r), "ZERO signs {r}");
        // TIES: most seen tokens part the two pairs of forms.
        let tie = |c: &Case, i: usize, d: &Declared| {
            let p = &c.penalties[i / c.dims.1];
            let (pc, oc) = (c.prompt_counts[i], c.output_counts[i]);
            penalize(&vllm, c.logits[i], p, pc, oc) != penalize(d, c.logits[i], p, pc, oc)
        };
        // Divide against reciprocal on the even seen tokens and those in
        // the prompt only; separate against fma on the odd generated
        // ones whose `f c` is inexact in binary32 (nothing can part the
        // others).
        let fma_target = |c: &Case, i: usize| {
            let oc = c.output_counts[i];
            i % c.dims.1 % 2 == 1 && oc > 0
        };
        let inexact = |c: &Case, i: usize| {
            let (f, oc) = (c.penalties[i / c.dims.1].frequency, c.output_counts[i]);
            f64::from(f) * f64::from(oc) != f64::from(f * oc as f32)
        };
        let r = rate(Arm::Ties, &|c, i| {
            (seen(c, i) && !fma_target(c, i)).then(|| tie(c, i, &recip))
        });
        assert!(r > 0.9, "TIES divide/reciprocal {r}");
        let r = rate(Arm::Ties, &|c, i| {
            (fma_target(c, i) && inexact(c, i)).then(|| tie(c, i, &fma))
        });
        assert!(r > 0.9, "TIES separate/fma {r}");
        let r = rate(Arm::Ties, &|c, i| fma_target(c, i).then(|| inexact(c, i)));
        assert!(r > 0.4, "TIES inexact products {r}");
        // TIES: the positive seen logits part RN(1/p) from both its
        // neighbours (rule PEN-RECIP-ULPS), so that one multiplier per
        // row is pinned down and a changing one fails.
        let neighbours = |c: &Case, i: usize| {
            let p = &c.penalties[i / c.dims.1];
            let (pc, oc) = (c.prompt_counts[i], c.output_counts[i]);
            parts_neighbours(&recip, c.logits[i], p, pc, oc)
        };
        let r = rate(Arm::Ties, &|c, i| {
            (seen(c, i) && !fma_target(c, i)).then(|| neighbours(c, i))
        });
        assert!(r > 0.9, "TIES reciprocal neighbours {r}");
        // MASKED: half the seen tokens -inf.
        let r = rate(Arm::Masked, &|c, i| {
            seen(c, i).then(|| c.logits[i] == f32::NEG_INFINITY)
        });
        assert!((0.4..0.65).contains(&r), "MASKED {r}");
        // The row-level designs: the fraction of the test shapes' rows
        // with `f`.
        let rows = |arm: Arm, f: &dyn Fn(&Case, usize) -> bool| {
            let (mut hit, mut all) = (0usize, 0usize);
            for dims in DIMS {
                let c = case(dims, arm);
                for r in 0..dims.0 {
                    all += 1;
                    hit += usize::from(f(&c, r));
                }
            }
            hit as f64 / all as f64
        };
        let row = |c: &Case, r: usize| c.logits[r * c.dims.1..(r + 1) * c.dims.1].to_vec();
        // MASKED: a NaN on a third of the rows, a +inf on a quarter.
        let r = rows(Arm::Masked, &|c, k| row(c, k).iter().any(|x| x.is_nan()));
        assert!((0.2..0.5).contains(&r), "MASKED NaN rows {r}");
        let r = rows(Arm::Masked, &|c, k| row(c, k).contains(&f32::INFINITY));
        assert!((0.1..0.4).contains(&r), "MASKED +inf rows {r}");
        // IDENTITY: three rows in four neutral; one logit in eight a zero
        // and one an infinity.
        let r = rows(Arm::Identity, &|c, k| c.penalties[k] == Penalties::NONE);
        assert!((0.6..0.9).contains(&r), "IDENTITY neutral rows {r}");
        let r = rate(Arm::Identity, &|c, i| Some(c.logits[i] == 0.0));
        assert!((0.1..0.15).contains(&r), "IDENTITY zeros {r}");
        let r = rate(Arm::Identity, &|c, i| Some(c.logits[i].is_infinite()));
        assert!((0.1..0.15).contains(&r), "IDENTITY infinities {r}");
        // ZERO: three rows in four with a negative frequency or presence
        // penalty (rule PEN-ZERO-SIGN).
        let r = rows(Arm::Zero, &|c, k| {
            c.penalties[k].frequency < 0.0 || c.penalties[k].presence < 0.0
        });
        assert!((0.6..0.95).contains(&r), "ZERO negative penalties {r}");
        // COUNTS: four rows in five with a frequency penalty whose
        // products with the counts are exact.
        let exact = |f: f32| [0.5, 0.25, 1.5, 0.125].contains(&f);
        let r = rows(Arm::Counts, &|c, k| exact(c.penalties[k].frequency));
        assert!((0.6..0.95).contains(&r), "COUNTS exact products {r}");
        // RAND: seen tokens in the prompt only, the output only and both;
        // penalties of both signs, repetition below 1 too.
        let kind = |c: &Case, i: usize| (c.prompt_counts[i] > 0, c.output_counts[i] > 0);
        for (want, lo) in [
            ((true, false), 0.3),
            ((false, true), 0.2),
            ((true, true), 0.08),
        ] {
            let r = rate(Arm::Rand, &|c, i| seen(c, i).then(|| kind(c, i) == want));
            assert!(r > lo, "RAND {want:?} {r}");
        }
        let r = rows(Arm::Rand, &|c, k| c.penalties[k].frequency < 0.0);
        assert!((0.1..0.5).contains(&r), "RAND negative frequency {r}");
        let r = rows(Arm::Rand, &|c, k| c.penalties[k].presence < 0.0);
        assert!((0.1..0.5).contains(&r), "RAND negative presence {r}");
        let r = rows(Arm::Rand, &|c, k| c.penalties[k].repetition < 1.0);
        assert!((0.1..0.5).contains(&r), "RAND repetition below 1 {r}");
        // PROMPT_ONLY: most seen tokens in the prompt only.
        let r = rate(Arm::PromptOnly, &|c, i| {
            seen(c, i).then(|| c.output_counts[i] == 0)
        });
        assert!(r > 0.6, "PROMPT_ONLY {r}");
        for dims in DIMS {
            let (b, v) = dims;
            // PAD: every row padded in both arrays, 0 and V - 1 unseen,
            // every penalty active.
            let c = case(dims, Arm::Pad);
            for r in 0..b {
                assert!(c.prompt[r * c.prompt_len..(r + 1) * c.prompt_len].contains(&(v as i64)));
                assert!(c.output[r * c.output_len..(r + 1) * c.output_len].contains(&(v as i64)));
                for t in [0, v - 1] {
                    assert_eq!(c.prompt_counts[r * v + t] + c.output_counts[r * v + t], 0);
                }
                let p = c.penalties[r];
                assert!(p.repetition != 1.0 && p.frequency != 0.0 && p.presence != 0.0);
            }
            // IDENTITY: neutral rows are the identity; at least one.
            let c = case(dims, Arm::Identity);
            let out = reference(&c, &vllm);
            let neutral: Vec<usize> = (0..b)
                .filter(|&r| c.penalties[r] == Penalties::NONE)
                .collect();
            assert!(!neutral.is_empty(), "{dims:?}");
            for r in neutral {
                assert_eq!(
                    bits(&out[r * v..(r + 1) * v]),
                    bits(&c.logits[r * v..(r + 1) * v])
                );
            }
            // MASKED: a NaN on some row.
            assert!(case(dims, Arm::Masked).logits.iter().any(|x| x.is_nan()));
        }
        // COUNTS: most rows have a count past 255, at 16 rows of 1000.
        let c = case((16, 1000), Arm::Counts);
        let big = (0..16)
            .filter(|&r| {
                c.output_counts[r * 1000..(r + 1) * 1000]
                    .iter()
                    .any(|&k| k > 255)
            })
            .count();
        assert!(big >= 10, "COUNTS {big}");
    }

    #[test]
    fn every_declaration_identifies_itself_over_the_arms() {
        let scaled = Declared {
            repetition: Repetition::Reciprocal,
            frequency: Frequency::FmaScaled,
            ..Declared::VLLM
        };
        // (declared, the multiplier's steps from RN(1/p) in every row)
        let picks = [
            (Declared::VLLM, 0),
            (
                Declared {
                    repetition: Repetition::Reciprocal,
                    frequency: Frequency::Fma,
                    ..Declared::VLLM
                },
                0,
            ),
            (
                Declared {
                    order: Order::PresenceFrequencyRepetition,
                    scope: Scope::OutputOnly,
                    repetition: Repetition::Divide,
                    frequency: Frequency::Accumulate,
                    recip_ulps: 0,
                },
                0,
            ),
            (
                Declared {
                    repetition: Repetition::DivideAll,
                    ..Declared::VLLM
                },
                0,
            ),
            (
                Declared {
                    order: Order::RepetitionPresenceFrequency,
                    ..Declared::VLLM
                },
                0,
            ),
            (scaled, 0),
            // LightLLM's sparse update, and in its Triton form (`l / rep`
            // through `div.full.f32`, fused).
            (
                Declared {
                    frequency: Frequency::Sparse,
                    ..Declared::VLLM
                },
                0,
            ),
            (
                Declared {
                    scope: Scope::OutputOnly,
                    repetition: Repetition::Reciprocal,
                    frequency: Frequency::FmaSparse,
                    recip_ulps: 2,
                    ..Declared::VLLM
                },
                1,
            ),
            // Run 80's Triton kernel: 1.0 / rep 1 or 2 ulps off (here RN
            // + 1 step: 2 ulps where RN(1/p) is above 1/p).
            (
                Declared {
                    recip_ulps: 2,
                    ..scaled
                },
                1,
            ),
            (
                Declared {
                    repetition: Repetition::ReciprocalAll,
                    recip_ulps: 2,
                    ..Declared::VLLM
                },
                -1,
            ),
        ];
        for (d, k) in picks {
            let mut left = known();
            for arm in Arm::ALL {
                for dims in [(4, 7), (9, 129), (16, 1000)] {
                    let c = case(dims, arm);
                    let got = stepped(&c, &d, |_, _| k);
                    let found = identify(&c, &got).unwrap();
                    assert!(found.contains(&d), "{} {arm:?}", label(&d));
                    left.retain(|x| found.contains(x));
                }
            }
            assert_eq!(tightest(&left), vec![d], "{}", label(&d));
        }
        assert_eq!(
            label(&Declared {
                recip_ulps: 2,
                ..scaled
            }),
            "repetition_frequency_presence/prompt_and_output/reciprocal(2 ulps)/fma_scaled"
        );
    }

    /// `d`'s output (bits) with each row's multiplier `RN(1/p)` moved by
    /// `k(row, token)` binary32 steps: one multiplier per row when `k`
    /// ignores the token.
    fn stepped(c: &Case, d: &Declared, k: impl Fn(usize, usize) -> i32) -> Vec<u32> {
        let v = c.dims.1;
        (0..c.logits.len())
            .map(|i| {
                let p = &c.penalties[i / v];
                let rn = 1.0 / p.repetition;
                let r = f32::from_bits(rn.to_bits().wrapping_add_signed(k(i / v, i % v)));
                penalize_with_reciprocal(
                    d,
                    c.logits[i],
                    p,
                    r,
                    c.prompt_counts[i],
                    c.output_counts[i],
                )
                .to_bits()
            })
            .collect()
    }

    #[test]
    fn pen_recip_ulps_passes_one_multiplier_per_row_within_the_ulps() {
        let exact = Declared {
            repetition: Repetition::Reciprocal,
            frequency: Frequency::FmaScaled,
            ..Declared::VLLM
        };
        let approx = Declared {
            recip_ulps: 2,
            ..exact
        };
        let (mut failed_exact, mut cases) = (0, 0);
        for arm in Arm::ALL {
            for dims in DIMS {
                let c = case(dims, arm);
                for k in [-1, 1] {
                    let got = stepped(&c, &approx, |_, _| k);
                    assert!(
                        judge(&c, &approx, &got).unwrap().pass(),
                        "{arm:?} {dims:?} {k}"
                    );
                    failed_exact += usize::from(!judge(&c, &exact, &got).unwrap().pass());
                    cases += 1;
                }
                // RN(1/p) is a member.
                let rn = bits(&reference(&c, &exact));
                assert!(judge(&c, &approx, &rn).unwrap().pass());
            }
            // TIES fails the correctly rounded declaration everywhere.
            for dims in DIMS {
                let c = case(dims, Arm::Ties);
                let got = stepped(&c, &approx, |_, _| 1);
                let v = judge(&c, &exact, &got).unwrap();
                assert!(!v.pass() && v.misses.iter().all(|m| m.members == 1));
            }
        }
        assert!(failed_exact * 2 > cases, "{failed_exact} of {cases}");
    }

    #[test]
    fn pen_recip_ulps_fails_a_multiplier_past_the_ulps_or_changing_within_a_row() {
        let approx = Declared {
            repetition: Repetition::Reciprocal,
            recip_ulps: 2,
            ..Declared::VLLM
        };
        let divide = Declared {
            repetition: Repetition::Divide,
            ..approx
        };
        for dims in DIMS {
            let c = case(dims, Arm::Ties);
            let v = dims.1;
            // 3 steps up: 1/p in [0.51, 0.96) in TIES, one binade, so at
            // least 2.5 ulps off.
            let three = stepped(&c, &approx, |_, _| 3);
            // One step up on even tokens and down on odd ones.
            let mixed = stepped(&c, &approx, |_, t| if t % 2 == 0 { 1 } else { -1 });
            // A true division on even tokens, 1/p one step up on the rest.
            let up = stepped(&c, &approx, |_, _| 1);
            let division = bits(&reference(&c, &divide));
            let part: Vec<u32> = (0..c.logits.len())
                .map(|i| if i % v % 2 == 0 { division[i] } else { up[i] })
                .collect();
            for (what, got) in [("3 ulps", &three), ("mixed", &mixed), ("division", &part)] {
                if v < 100 && what != "3 ulps" {
                    // 7 tokens: too few to part every member.
                    continue;
                }
                let verdict = judge(&c, &approx, got).unwrap();
                assert!(!verdict.pass(), "{what} {dims:?}");
                let m = verdict.misses[0];
                assert!(m.members >= 4 && m.differ > 0, "{m:?}");
                let s = describe_miss(&m, &c, &approx);
                assert!(s.contains("within 2 ulps of 1/p"), "{s}");
                let f = describe(&verdict.faults[0], &c);
                assert!(f.contains("got"), "{f}");
            }
            // Every row of the 3-step kernel fails (one step of r moves
            // most positive seen logits' products by an ulp: each member
            // leaves about as many differing).
            let verdict = judge(&c, &approx, &three).unwrap();
            let failing = verdict.misses.len();
            assert!(failing == dims.0.min(8), "{:?}", verdict.misses);
        }
    }

    #[test]
    fn judge_finds_and_describes_the_first_difference() {
        let c = case((9, 129), Arm::Neg);
        let bug = Declared {
            repetition: Repetition::DivideAll,
            ..Declared::VLLM
        };
        let got = bits(&reference(&c, &bug));
        let v = judge(&c, &Declared::VLLM, &got).unwrap();
        assert!(!v.pass() && !v.faults.is_empty());
        let s = describe(&v.faults[0], &c);
        assert!(s.contains("divide_all"), "{s}");
        assert!(judge(&c, &Declared::VLLM, &got[1..]).is_err());
        let ok = judge(&c, &Declared::VLLM, &bits(&reference(&c, &Declared::VLLM))).unwrap();
        assert!(ok.pass() && ok.elements == 9 * 129);
    }

    #[test]
    fn caps_and_names() {
        assert!(within_caps((0, 5)).is_err());
        assert!(within_caps((1 << 12, 1 << 11)).is_err());
        assert!(within_caps((1 << 14, 4)).is_err());
        assert!(within_caps((2, 151_936)).is_ok());
        for arm in Arm::ALL {
            assert_eq!(Arm::parse(&arm.name().to_lowercase()), Ok(arm));
        }
        assert_eq!(Inputs::parse("counts"), Ok(Inputs::Counts));
        assert!(parse_order("rep_freq_pres")
            .unwrap_err()
            .contains("repetition_frequency_presence"));
        assert_eq!(parse_scope("output_only"), Ok(Scope::OutputOnly));
        assert_eq!(parse_repetition("divide_all"), Ok(Repetition::DivideAll));
        assert_eq!(parse_frequency("fma"), Ok(Frequency::Fma));
        assert_eq!(known().len(), 576);
        // Labels and the tightest of a list (rule PEN-RECIP-ULPS).
        let exact = Declared {
            repetition: Repetition::Reciprocal,
            ..Declared::VLLM
        };
        let one = Declared {
            recip_ulps: 1,
            ..exact
        };
        let two = Declared {
            recip_ulps: 2,
            ..exact
        };
        assert!(label(&one).ends_with("/reciprocal(1 ulp)/separate"));
        assert!(label(&two).ends_with("/reciprocal(2 ulps)/separate"));
        // A division form has no multiplier: its ulps are not shown.
        let div = Declared {
            recip_ulps: 2,
            ..Declared::VLLM
        };
        assert_eq!(label(&div), label(&Declared::VLLM));
        assert_eq!(
            tightest(&[two, exact, one, Declared::VLLM]),
            [exact, Declared::VLLM]
        );
        assert_eq!(list(&[two, one], 8), label(&one));
        assert_eq!(steps_from_rn(0), "RN(1/p)");
        assert_eq!(steps_from_rn(-1), "RN(1/p) - 1 step");
        assert_eq!(steps_from_rn(3), "RN(1/p) + 3 steps");
        assert_eq!(known()[0], Declared::VLLM);
    }
}
