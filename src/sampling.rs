//! Cases for judging a sampling kernel's filters (vLLM's
//! `apply_top_k_top_p` and min-p, FlashInfer's `top_k_renorm_probs`,
//! `top_p_renorm_probs`, `top_k_top_p_sampling_from_probs`, Hugging
//! Face's warpers, a torch or Triton sampler) against
//! [`oracle::sampling`]: every token's membership judged exactly wherever
//! the enclosures decide it, the renormalised probabilities within
//! theirs, sampled ids inside the possibly-kept set, and the known
//! declarations its output is consistent with named.
//!
//! A case (elements, row-major): `logits [B][V]` in the logits' dtype
//! (held as the `f32` of each value, `-inf` for a masked token) and per
//! row `temperature [B]` (f32, 1 = none), `top_k [B]` (0 = off), `top_p
//! [B]` (1 = off) and `min_p [B]` (0 = off). The kernel returns, by
//! [`Form`], the masked logits `[B][V]`, the renormalised probabilities
//! `[B][V]`, or sampled ids `[B][n]`.

use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::sampling::{
    admits_renorm, classify, judge_kept, kept_sums, Declared, Filters, KeptFault, Order, Row, Rule,
    Status, Token, TopKTies, TopPTies, U,
};
use rayon::prelude::*;

/// What the kernel outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The logits with removed tokens `-inf` and kept ones the input
    /// logit bit for bit (declared `scaled`: `l / T` in binary32, by a
    /// division or a product with `1 / T`).
    Mask,
    /// Probabilities: removed exactly 0, kept `p_i / sum over the kept`
    /// within its enclosure, rounded to the output dtype.
    Renorm,
    /// Sampled token ids `[B][n]`, each in the possibly-kept set.
    Sample,
}

impl Form {
    /// Every form.
    pub const ALL: [Form; 3] = [Form::Mask, Form::Renorm, Form::Sample];

    /// The form's name.
    pub fn name(self) -> &'static str {
        match self {
            Form::Mask => "mask",
            Form::Renorm => "renorm",
            Form::Sample => "sample",
        }
    }

    /// The form named `s`.
    ///
    /// # Errors
    /// The names, when `s` is none of them.
    pub fn parse(s: &str) -> Result<Form, String> {
        crate::names::parse_named("form", s, &Form::ALL, Form::name, false)
    }
}

/// The data a case draws, each arm aimed at a class of bugs. Every arm
/// varies the filters from row to row (vLLM passes them per request: a
/// kernel that reads row 0's for every row fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal logits (standard deviation 1.5 to 5 per row), temperatures
    /// 0.5 to 1.3, top-k off, 1, 5 or 50, top-p 1 to 0.1, min-p 0 to 0.1:
    /// the filters, their order and the nucleus boundary.
    Rand,
    /// Logits from five values only, so the `k`-th value and the nucleus
    /// boundary fall in groups of equal logits; some rows `min_p = 1`, so
    /// the tokens tied at the maximum are all kept (`p >= p_max`, not `>`).
    Ties,
    /// One token holding all but about `e^-8` of the mass: top-p keeps it
    /// alone, and a sampler must draw it every time.
    Peak,
    /// A power of two of equal logits (the rest `-inf`) and `top_p = j/n`:
    /// every kernel's cumulative sums are exact, so the comparison's
    /// direction (`<=` against `<`) and the boundary token are judged;
    /// one row in four uses the whole vocabulary.
    Flat,
    /// Per row one edge: `k = 1`, `k = V`, `top_p = 1`, `top_p = 1e-6`,
    /// `min_p = 1`, min-p on, and a third of the vocabulary masked `-inf`
    /// with a flat nucleus (`T = 3`, `top_p = 0.9`, top-k off).
    Edge,
    /// Distinct logits a few steps of the dtype apart at the `k`-th value
    /// (`k` 1, 2, 5, 20 or 50): the `(k + 1)`-th largest 1 to 3 steps below
    /// it and the `(k - 1)`-th 1 to 3 above; in binary32 with `T != 1`, 8 to
    /// 12 steps, so that `l / T` keeps them apart (within `4u` the top-k
    /// rule leaves them undecided); and never so close that their binary32
    /// probabilities' enclosures meet (`near_apart`), so that a kernel
    /// ranking probabilities (FlashInfer's `top_k_renorm_probs` after a
    /// softmax) ranks them as the logits. Top-p mostly off, min-p off. One
    /// row in four is shifted so that the `k`-th value is 0, where the
    /// dtype's steps are finest; one in four holds a far-low token (the
    /// dtype's lowest finite value, as a mask written `finfo.min`; a
    /// quarter of it where `T != 1`, so that `l / T` stays finite). A
    /// kernel that approximates the `k`-th value more coarsely than that (a
    /// threshold bisection over the row's range stopped after a fixed
    /// number of steps, a comparison in a narrower type) keeps or drops a
    /// neighbour; the arms above put only equal values, or values far
    /// apart, at the boundary.
    Near,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 6] = [
        Arm::Rand,
        Arm::Ties,
        Arm::Peak,
        Arm::Flat,
        Arm::Edge,
        Arm::Near,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Ties => "TIES",
            Arm::Peak => "PEAK",
            Arm::Flat => "FLAT",
            Arm::Edge => "EDGE",
            Arm::Near => "NEAR",
        }
    }

    /// The arm named `s` (case-insensitive).
    ///
    /// # Errors
    /// The names, when `s` is none of them.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }
}

/// The declaration's name parts: `order`, `topk_ties`, `topp_ties`.
pub fn order_name(o: Order) -> &'static str {
    match o {
        Order::MinPFirst => "min_p_first",
        Order::MinPLast => "min_p_last",
        Order::Joint => "joint",
    }
}

/// The order named `s`.
///
/// # Errors
/// The names.
pub fn parse_order(s: &str) -> Result<Order, String> {
    crate::names::parse_named(
        "order",
        s,
        &[Order::MinPFirst, Order::MinPLast, Order::Joint],
        order_name,
        false,
    )
}

/// `"keep_all"` or `"exact"`.
pub fn topk_ties_name(t: TopKTies) -> &'static str {
    match t {
        TopKTies::KeepAll => "keep_all",
        TopKTies::Exact => "exact",
    }
}

/// The top-k tie policy named `s`.
///
/// # Errors
/// The names.
pub fn parse_topk_ties(s: &str) -> Result<TopKTies, String> {
    crate::names::parse_named(
        "topk_ties",
        s,
        &[TopKTies::KeepAll, TopKTies::Exact],
        topk_ties_name,
        false,
    )
}

/// `"order"` or `"keep_all"`.
pub fn topp_ties_name(t: TopPTies) -> &'static str {
    match t {
        TopPTies::Order => "order",
        TopPTies::KeepAll => "keep_all",
    }
}

/// The top-p tie policy named `s`.
///
/// # Errors
/// The names.
pub fn parse_topp_ties(s: &str) -> Result<TopPTies, String> {
    crate::names::parse_named(
        "topp_ties",
        s,
        &[TopPTies::Order, TopPTies::KeepAll],
        topp_ties_name,
        false,
    )
}

/// The most logits a case has (`B V`; 16 MiB of f32).
pub const MAX_LOGITS: usize = 1 << 22;

/// `(batch, vocab)`.
pub type Dims = (usize, usize);

/// `d` checked against the caps.
///
/// # Errors
/// An empty shape or one over [`MAX_LOGITS`], as a sentence.
pub fn within_caps(d: Dims) -> Result<(), String> {
    if d.0 == 0 || d.1 == 0 {
        return Err(format!("{d:?}: an empty batch or vocabulary"));
    }
    if d.0.saturating_mul(d.1) > MAX_LOGITS {
        return Err(format!(
            "{d:?}: {} logits, over the check's {MAX_LOGITS}",
            d.0.saturating_mul(d.1)
        ));
    }
    Ok(())
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// `(batch, vocab)`.
    pub dims: Dims,
    /// The declared semantics.
    pub declared: Declared,
    /// The logits' dtype.
    pub dtype: Dtype,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[B][V]`, the dtype's values, `-inf` for masked tokens.
    pub logits: Vec<f32>,
    /// `[B]`, one per row.
    pub filters: Vec<Filters>,
}

impl Case {
    /// The per-row parameters as the callable gets them:
    /// `(temperature, top_k, top_p, min_p)`.
    pub fn columns(&self) -> (Vec<f32>, Vec<i32>, Vec<f32>, Vec<f32>) {
        (
            self.filters.iter().map(|f| f.temperature).collect(),
            self.filters.iter().map(|f| f.top_k as i32).collect(),
            self.filters.iter().map(|f| f.top_p).collect(),
            self.filters.iter().map(|f| f.min_p).collect(),
        )
    }
}

impl Spec {
    /// The default seed of a shape, dtype and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x5A3B_1E70_0000_0000u64, &[d.0, d.1]);
        let idx = Dtype::ALL.iter().position(|&y| y == dtype).unwrap_or(0) as u64;
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ (idx << 8) ^ arm
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn generate(&self) -> Result<Case, String> {
        within_caps(self.dims)?;
        let (b, v) = self.dims;
        let mut rng = Rng(self.seed);
        let round = |x: f32| self.dtype.round(x);
        let mut logits = vec![0f32; b * v];
        let mut filters = vec![Filters::OFF; b];
        let vk = v as u32;
        for (r, (row, f)) in logits.chunks_mut(v).zip(filters.iter_mut()).enumerate() {
            // Cycling choices by row (offset by the seed) so neighbouring
            // rows differ.
            let c = r + rng.below(7);
            match self.arm {
                Arm::Rand => {
                    let sd = [1.5f32, 3.0, 5.0][c % 3];
                    row.iter_mut().for_each(|x| *x = round(sd * rng.normal()));
                    *f = Filters {
                        temperature: [1.0, 0.7, 1.3, 0.5][c % 4],
                        top_k: [0, 1, 5, 50, vk][c % 5].min(vk),
                        top_p: [0.9, 1.0, 0.5, 0.95, 0.1, 0.75][c % 6],
                        min_p: [0.0, 0.05, 0.0, 0.1][(c / 2) % 4],
                    };
                }
                Arm::Ties => {
                    let values = [0.0f32, 0.5, 1.0, 1.5, 2.0];
                    row.iter_mut().for_each(|x| *x = values[rng.below(5)]);
                    *f = Filters {
                        temperature: [1.0, 0.8][c % 2],
                        top_k: [3, 1, 0, 10, 40][c % 5].min(vk),
                        top_p: [1.0, 0.6, 0.9, 0.3][c % 4],
                        // min_p 1 with ties at the maximum: `p >= p_max`
                        // keeps them all, `>` only the protected argmax.
                        min_p: [0.0, 0.0, 0.3, 1.0][(c / 3) % 4],
                    };
                }
                Arm::Peak => {
                    let top = rng.below(v);
                    let gap = (v as f32).ln() + 8.0;
                    row.iter_mut()
                        .for_each(|x| *x = round(rng.normal().min(3.0)));
                    row[top] = round(3.0 + gap);
                    *f = Filters {
                        temperature: 1.0,
                        top_k: [0, 5, 1, 0][c % 4].min(vk),
                        top_p: [0.9, 0.5, 0.99, 0.7][c % 4],
                        min_p: [0.0, 0.01][c % 2],
                    };
                }
                Arm::Flat => {
                    let whole = c % 4 == 3;
                    let n = if whole {
                        v
                    } else {
                        1usize << (usize::BITS - 1 - v.leading_zeros())
                    };
                    let value = round(rng.normal());
                    row.iter_mut().for_each(|x| *x = f32::NEG_INFINITY);
                    // n of the V positions, spread by a random start and stride 1.
                    let start = rng.below(v - n + 1);
                    row[start..start + n].iter_mut().for_each(|x| *x = value);
                    let j = 1 + rng.below(n.max(2) - 1);
                    *f = Filters {
                        temperature: [1.0, 0.8][c % 2],
                        top_k: [0, vk, 0][c % 3],
                        top_p: (j as f64 / n as f64) as f32,
                        min_p: [0.0, 0.5][c % 2],
                    };
                }
                Arm::Edge => {
                    row.iter_mut().for_each(|x| *x = round(3.0 * rng.normal()));
                    let edge = c % 7;
                    if edge == 6 || c.is_multiple_of(3) {
                        // A third masked, never all.
                        let keep = rng.below(v);
                        for (j, x) in row.iter_mut().enumerate() {
                            if j != keep && rng.below(3) == 0 {
                                *x = f32::NEG_INFINITY;
                            }
                        }
                    }
                    *f = match edge {
                        0 => Filters {
                            top_k: 1,
                            top_p: 0.9,
                            ..Filters::OFF
                        },
                        1 => Filters {
                            top_k: vk,
                            top_p: 0.8,
                            ..Filters::OFF
                        },
                        2 => Filters {
                            top_k: 5.min(vk),
                            ..Filters::OFF
                        },
                        3 => Filters {
                            top_p: 1e-6,
                            temperature: 0.9,
                            ..Filters::OFF
                        },
                        4 => Filters {
                            min_p: 1.0,
                            ..Filters::OFF
                        },
                        5 => Filters {
                            min_p: 0.2,
                            top_p: 0.95,
                            top_k: 20.min(vk),
                            ..Filters::OFF
                        },
                        // Top-k off and a flat nucleus of many tokens:
                        // a sampler that reads k = 0 as k = 1 draws one
                        // token every time (`Fault::Collapsed`).
                        _ => Filters {
                            top_p: 0.9,
                            temperature: 3.0,
                            ..Filters::OFF
                        },
                    };
                }
                Arm::Near => {
                    let sd = [2.0f32, 4.0][c % 2];
                    row.iter_mut().for_each(|x| *x = round(sd * rng.normal()));
                    let temperature = [1.0f32, 1.0, 0.7][c % 3];
                    let k = [2usize, 5, 20, 50, 1][c % 5].min(v - 1);
                    *f = Filters {
                        temperature,
                        top_k: k as u32,
                        top_p: [1.0, 1.0, 0.95][(c / 3) % 3],
                        min_p: 0.0,
                    };
                    if k == 0 {
                        continue; // one token: no boundary
                    }
                    // Where the boundary sits in the row's range: one row in
                    // four moves it to 0 (the dtype's steps are finest there,
                    // so a fixed-step bisection over the range brackets it
                    // too coarsely in bfloat16 and float16 as well), one in
                    // four puts a far-low token at the bottom (the dtype's
                    // lowest finite value, a mask written as `finfo.min`,
                    // where `l / T` stays finite; a quarter of it otherwise),
                    // so a bisection over `[min, max]` starts from a range of
                    // `~2^128`.
                    let place = c % 4;
                    if place == 1 {
                        let mut sorted = row.to_vec();
                        sorted.sort_by(|a, b| b.total_cmp(a));
                        let kth = sorted[k - 1];
                        row.iter_mut().for_each(|x| *x = round(*x - kth));
                    }
                    // Binary32 steps are below l / T's rounding unless 8 or
                    // more; a step of a 16-bit dtype is far above it.
                    let near = self.dtype == Dtype::F32 && temperature != 1.0;
                    let mut gap =
                        || (if near { 8 } else { 1 }) + rng.below(if near { 5 } else { 3 }) as i32;
                    let mut desc: Vec<usize> = (0..v).collect();
                    desc.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                    let kth = row[desc[k - 1]];
                    // Also apart in binary32 probabilities (`near_apart`).
                    let apart = near_apart(kth, row[desc[0]], temperature, self.declared.exp_ulps);
                    row[desc[k]] = beyond(self.dtype, kth, -gap(), apart);
                    if k >= 2 {
                        row[desc[k - 2]] = beyond(self.dtype, kth, gap(), apart);
                    }
                    if place == 3 && v - 1 > k {
                        let lowest = self.dtype.steps(f32::NEG_INFINITY, 1);
                        row[desc[v - 1]] = if temperature == 1.0 {
                            lowest
                        } else {
                            lowest / 4.0
                        };
                    }
                }
            }
        }
        Ok(Case { logits, filters })
    }
}

/// [`Arm::Near`]'s least distance (logit units) of a neighbour from the
/// `k`-th value `kth` of a row whose largest logit is `max`: a kernel may
/// rank binary32 probabilities instead of logits (FlashInfer's
/// `top_k_renorm_probs` after a softmax), where `fl(s - m)` and `exp` can
/// merge or swap logits a step apart. Beyond this distance the two terms'
/// enclosures are disjoint with `8u` to spare, so every evaluation within
/// them ranks the probabilities as the logits: each is
/// [`oracle::sampling::classify`]'s relative bound, `2 ((2 |t| + 2 K +
/// 1) u + 2 (|s| + |m|) u)` (the last part where `T != 1`; `K` the
/// declared `exp_ulps`), at `|t|`, `|s|`, `|m|` no smaller than the row's.
fn near_apart(kth: f32, max: f32, temperature: f32, exp_ulps: u32) -> f64 {
    let t = f64::from(temperature);
    let (s, m) = (f64::from(kth) / t, f64::from(max) / t);
    let mut kappa = (2.0 * (m - s) + 2.0 * f64::from(exp_ulps) + 1.0) * U;
    if temperature != 1.0 {
        kappa += 2.0 * (s.abs() + m.abs().max(s.abs())) * U;
    }
    t * (4.0 * kappa + 8.0 * U) * (1.0 + 1.0 / 1024.0)
}

/// The value `n` steps of `dtype` from `x` (`n != 0`), or, where that is
/// nearer `x` than `apart`, the first value of `dtype` at least `apart`
/// from it on the same side.
fn beyond(dtype: Dtype, x: f32, n: i32, apart: f64) -> f32 {
    let y = dtype.steps(x, n);
    let sign = f64::from(n.signum());
    let target = f64::from(x) + sign * apart;
    if (f64::from(y) - f64::from(x)) * sign >= apart {
        return y;
    }
    let mut y = dtype.round(target as f32);
    while (f64::from(y) - target) * sign < 0.0 {
        y = dtype.steps(y, n.signum());
    }
    y
}

/// A kernel's output of one case.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// [`Form::Mask`] or [`Form::Renorm`]: `[B][V]` bits of the output
    /// dtype, widened to 32.
    Values(Vec<u32>),
    /// [`Form::Sample`]: `[B][n]` ids.
    Ids(Vec<i64>),
}

/// What one row's judgement found.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The kept set breaks a rule.
    Kept(KeptFault),
    /// [`Form::Mask`]: a value neither `-inf` nor the kept logit (its bits).
    Masked {
        /// The token.
        token: usize,
        /// The output's bits.
        got: u32,
    },
    /// [`Form::Renorm`]: a kept probability outside its enclosure, or a
    /// value that is neither 0 nor a probability.
    Prob {
        /// The token.
        token: usize,
        /// The output's bits.
        got: u32,
        /// Its enclosure (0 to 0 for a value that is not a probability).
        lo: f64,
        /// Its enclosure's upper end.
        hi: f64,
    },
    /// [`Form::Sample`]: an id outside the vocabulary, or a token no
    /// kernel within the declaration keeps (`rule` removes it).
    Sampled {
        /// The sample's slot.
        slot: usize,
        /// The id.
        id: i64,
        /// Why not: `None` outside the vocabulary.
        rule: Option<Rule>,
    },
    /// [`Form::Sample`]: every draw of the row is token `id`, though any
    /// sampler within the declaration draws one token `n` times with
    /// probability at most `bound` (see [`COLLAPSE_BOUND`]).
    Collapsed {
        /// The token drawn every time.
        id: i64,
        /// Draws.
        n: usize,
        /// The most probability of `n` equal draws.
        bound: f64,
    },
    /// [`Form::Sample`], the case's draws pooled: they are likelier under
    /// an alternative distribution than under the filters' by more than
    /// [`FREQUENCY_BOUND`] allows (see [`Alternative`]). Reported at the
    /// row whose draws weigh most for the alternative.
    Frequencies {
        /// The alternative.
        alternative: Alternative,
        /// `ln` of the likelihood ratio, alternative over filters, of the
        /// judged rows' draws.
        llr: f64,
        /// The threshold it passed.
        threshold: f64,
        /// Rows whose draws were judged.
        rows: usize,
        /// Their draws.
        draws: usize,
    },
}

/// A distribution a faulty sampler draws from instead of the filters'
/// renormalised probabilities, over the same kept set (a draw outside it
/// fails alone, [`Fault::Sampled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alternative {
    /// Every kept token equally likely: a sampler that ignores the
    /// probabilities (picks among the survivors, or cycles through them).
    Uniform,
    /// `softmax(l)` over the kept set: the filters apply the temperature,
    /// the draw does not.
    Untempered,
}

impl Alternative {
    /// Every alternative the judgement weighs.
    pub const ALL: [Alternative; 2] = [Alternative::Uniform, Alternative::Untempered];

    /// The alternative in reports.
    pub fn describe(self) -> &'static str {
        match self {
            Alternative::Uniform => "every kept token equally likely",
            Alternative::Untempered => "softmax(l) without the temperature",
        }
    }
}

/// [`Form::Sample`]'s second statistical judgement, over a case's draws
/// pooled: for each [`Alternative`] `q`, `llr = sum over draws ln(q(id) /
/// p(id))`, with `p` the filters' probability renormalised over the kept
/// set, over every row whose kept set is decided token by token. For
/// i.i.d. draws from `p`, `E[exp(llr)] = 1`, so `P(llr >= t) <= e^-t`
/// (Markov's inequality; the likelihood-ratio test of Wald's sequential
/// analysis uses the same bound); a case fails when some alternative's
/// `llr` reaches `ln(ALL.len()) + 40 ln 2 + N 2^-9` for `N` draws: at most
/// `2^-40` for a sampler of the filters, whose probabilities may stray
/// from the enclosures' midpoints used for `p` by `2^-9` each (a binary32
/// kernel's by about `2^-20`).
pub const FREQUENCY_BOUND: f64 = COLLAPSE_BOUND;

/// The threshold of [`Fault::Frequencies`] for `draws` draws.
fn frequency_threshold(draws: usize) -> f64 {
    (Alternative::ALL.len() as f64).ln() - FREQUENCY_BOUND.ln() + draws as f64 / 512.0
}

/// One row's `ln(q / p)` summed over its draws, per [`Alternative`], and
/// whether the row counts: its every finite token surely kept or surely
/// removed, two or more kept (one kept token is drawn by every sampler).
fn draw_llr(s: &[Token], logits: &[f32], temperature: f32, draws: &[i64]) -> Option<[f64; 2]> {
    let kept: Vec<&Token> = s
        .iter()
        .filter(|t| t.logit.is_finite() && t.kept == Status::In)
        .collect();
    let decided = s
        .iter()
        .all(|t| !t.logit.is_finite() || t.kept != Status::Undecided);
    if !decided || kept.len() < 2 {
        return None;
    }
    let v = logits.len();
    let (mut p, mut q1) = (vec![0f64; v], vec![0f64; v]);
    let lmax = kept
        .iter()
        .map(|t| f64::from(logits[t.index]))
        .fold(f64::NEG_INFINITY, f64::max);
    let (mut z, mut z1) = (0.0, 0.0);
    for t in &kept {
        p[t.index] = (t.e.lo + t.e.hi) / 2.0;
        q1[t.index] = (f64::from(logits[t.index]) - lmax).exp();
        z += p[t.index];
        z1 += q1[t.index];
    }
    let uniform = 1.0 / kept.len() as f64;
    let untempered = temperature != 1.0;
    let mut llr = [0.0; 2];
    for &id in draws {
        // Every draw is a kept token here (else `Fault::Sampled`).
        let i = id as usize;
        let pi = (p[i] / z).max(f64::MIN_POSITIVE);
        llr[0] += (uniform / pi).ln();
        if untempered {
            llr[1] += (q1[i] / z1 / pi).ln();
        }
    }
    Some(llr)
}

/// [`Form::Sample`]'s one statistical judgement: a row whose draws are
/// all one token fails when an i.i.d. sampler of the declared filters
/// does that with probability at most this (`2^-40`), so a greedy sampler
/// (an argmax, `top_k = 0` read as `k = 1`) cannot pass for one that
/// samples. The bound: with `q` the renormalised probabilities over the
/// kernel's kept set, `P(n equal draws) = sum_t q_t^n <= (max_t q_t)^(n -
/// 1)`, and `q_t <= e_t.hi / (e_t.hi + sum of the other surely kept
/// e.lo)` (the kept set holds every surely kept token), raised by `2^-10`
/// for the sampler's own roundings.
pub const COLLAPSE_BOUND: f64 = 9.094_947_017_729_282e-13; // 2^-40

/// The bound of [`Fault::Collapsed`] for `n` draws of one row.
fn collapse_bound(s: &[Token], n: usize) -> f64 {
    let sure: f64 = s
        .iter()
        .filter(|t| t.logit.is_finite() && t.kept == Status::In)
        .map(|t| t.e.lo)
        .sum();
    let q_max = s
        .iter()
        .filter(|t| t.logit.is_finite() && t.kept != Status::Out)
        .map(|t| {
            let rest = if t.kept == Status::In {
                sure - t.e.lo
            } else {
                sure
            };
            let d = t.e.hi + rest.max(0.0);
            if d > 0.0 {
                (t.e.hi / d).min(1.0)
            } else {
                1.0
            }
        })
        .fold(0.0f64, f64::max);
    let q = (q_max + 1.0 / 1024.0).min(1.0);
    let mut p = 1.0f64;
    for _ in 1..n {
        p *= q;
    }
    p
}

/// A case's judgement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Rows judged.
    pub rows: usize,
    /// Rows whose kept set the enclosures decide (every token).
    pub decided: usize,
    /// Rows that failed.
    pub failed: usize,
    /// The first faults, `(row, fault)`, at most eight.
    pub faults: Vec<(usize, Fault)>,
}

impl Verdict {
    /// No row failed.
    pub fn pass(&self) -> bool {
        self.failed == 0
    }
}

fn removal_rule(t: &Token) -> Rule {
    if !t.logit.is_finite() {
        Rule::Masked
    } else if t.min_p == Status::Out {
        Rule::MinP
    } else if t.top_k == Status::Out {
        Rule::TopK
    } else {
        Rule::TopP
    }
}

/// Judges one row's output.
#[allow(clippy::too_many_arguments)]
fn judge_row(
    logits: &[f32],
    f: &Filters,
    d: &Declared,
    form: Form,
    scaled: bool,
    out: &Output,
    r: usize,
    n: usize,
    odtype: Dtype,
) -> Result<RowJudgement, String> {
    let v = logits.len();
    let mut s = vec![Token::default(); v];
    let row: Row = classify(logits, f, d, &mut s).map_err(|e| format!("row {r}: {e:?}"))?;
    let fault = match (form, out) {
        (Form::Sample, Output::Ids(ids)) => {
            let mut by_index = vec![0usize; v];
            for (pos, t) in s.iter().enumerate() {
                by_index[t.index] = pos;
            }
            ids[r * n..(r + 1) * n]
                .iter()
                .enumerate()
                .find_map(|(slot, &id)| {
                    if id < 0 || id as u64 >= v as u64 {
                        return Some(Fault::Sampled {
                            slot,
                            id,
                            rule: None,
                        });
                    }
                    let t = &s[by_index[id as usize]];
                    (!t.logit.is_finite() || t.kept == Status::Out).then(|| Fault::Sampled {
                        slot,
                        id,
                        rule: Some(removal_rule(t)),
                    })
                })
                .or_else(|| {
                    let draws = &ids[r * n..(r + 1) * n];
                    let first = *draws.first()?;
                    if n < 2 || draws.iter().any(|&x| x != first) {
                        return None;
                    }
                    let bound = collapse_bound(&s, n);
                    (bound <= COLLAPSE_BOUND).then_some(Fault::Collapsed {
                        id: first,
                        n,
                        bound,
                    })
                })
        }
        (Form::Mask | Form::Renorm, Output::Values(bits)) => {
            let bits = &bits[r * v..(r + 1) * v];
            let mut kept = vec![false; v];
            let mut bad = None;
            for (i, &b) in bits.iter().enumerate() {
                let x = odtype.decode(b);
                match form {
                    Form::Mask => {
                        if x == f32::NEG_INFINITY {
                            continue;
                        }
                        let l = logits[i];
                        let t = f.temperature;
                        let ok = b == l.to_bits()
                            || (scaled
                                && (b == (l / t).to_bits() || b == (l * (1.0 / t)).to_bits()));
                        if ok {
                            kept[i] = true;
                        } else if bad.is_none() {
                            bad = Some(Fault::Masked { token: i, got: b });
                        }
                    }
                    _ => {
                        if x == 0.0 {
                            continue;
                        }
                        kept[i] = true;
                        if !(x > 0.0 && x <= 1.0) && bad.is_none() {
                            bad = Some(Fault::Prob {
                                token: i,
                                got: b,
                                lo: 0.0,
                                hi: 0.0,
                            });
                        }
                    }
                }
            }
            match bad {
                Some(f) => Some(f),
                None => match judge_kept(&s, &row, d, &kept) {
                    Err(k) => Some(Fault::Kept(k)),
                    Ok(()) if form == Form::Renorm => {
                        let sums = kept_sums(&s, &kept);
                        s.iter().find_map(|t| {
                            let b = bits[t.index];
                            (kept[t.index] && !admits_renorm(t, &sums, odtype, b)).then(|| {
                                let e = oracle::sampling::renorm_enclosure(t, &sums);
                                Fault::Prob {
                                    token: t.index,
                                    got: b,
                                    lo: e.lo,
                                    hi: e.hi,
                                }
                            })
                        })
                    }
                    Ok(()) => None,
                },
            }
        }
        _ => return Err(format!("the {} form needs its own output", form.name())),
    };
    let llr = match (form, out, &fault) {
        (Form::Sample, Output::Ids(ids), None) => {
            draw_llr(&s, logits, f.temperature, &ids[r * n..(r + 1) * n])
        }
        _ => None,
    };
    Ok(RowJudgement {
        decided: row.decided,
        fault,
        llr,
    })
}

/// One row's judgement: whether the enclosures decide it, its fault, and
/// its draws' `ln(q / p)` per [`Alternative`] where they are judged.
struct RowJudgement {
    decided: bool,
    fault: Option<Fault>,
    llr: Option<[f64; 2]>,
}

/// Judges a kernel's output of `form` (`samples` ids per row for
/// [`Form::Sample`]; values in `odtype` otherwise), rows in parallel.
///
/// # Errors
/// An output of the wrong length or kind; a row core refuses.
#[allow(clippy::too_many_arguments)]
pub fn judge(
    spec: &Spec,
    case: &Case,
    form: Form,
    scaled: bool,
    samples: usize,
    out: &Output,
    odtype: Dtype,
) -> Result<Verdict, String> {
    let (b, v) = spec.dims;
    let want = match form {
        Form::Sample => b * samples,
        _ => b * v,
    };
    let got = match out {
        Output::Values(x) => x.len(),
        Output::Ids(x) => x.len(),
    };
    if got != want {
        return Err(format!(
            "the output holds {got} elements, the case needs {want}"
        ));
    }
    let rows: Vec<Result<RowJudgement, String>> = (0..b)
        .into_par_iter()
        .map(|r| {
            judge_row(
                &case.logits[r * v..(r + 1) * v],
                &case.filters[r],
                &spec.declared,
                form,
                scaled,
                out,
                r,
                samples,
                odtype,
            )
        })
        .collect();
    let mut verdict = Verdict {
        rows: b,
        ..Verdict::default()
    };
    // The pooled draws: per alternative the sum, and the row that weighs
    // most for it.
    let (mut llr, mut judged) = ([0.0f64; 2], 0usize);
    let mut heaviest = [(f64::NEG_INFINITY, 0usize); 2];
    for (r, res) in rows.into_iter().enumerate() {
        let RowJudgement {
            decided: dec,
            fault,
            llr: row_llr,
        } = res?;
        if let Some(x) = row_llr {
            judged += 1;
            for a in 0..2 {
                llr[a] += x[a];
                if x[a] > heaviest[a].0 {
                    heaviest[a] = (x[a], r);
                }
            }
        }
        verdict.decided += usize::from(dec);
        if let Some(f) = fault {
            verdict.failed += 1;
            if verdict.faults.len() < 8 {
                verdict.faults.push((r, f));
            }
        }
    }
    let threshold = frequency_threshold(judged * samples);
    if form == Form::Sample && verdict.failed == 0 {
        if let Some(a) = (0..2).find(|&a| llr[a] >= threshold) {
            verdict.failed += 1;
            verdict.faults.push((
                heaviest[a].1,
                Fault::Frequencies {
                    alternative: Alternative::ALL[a],
                    llr: llr[a],
                    threshold,
                    rows: judged,
                    draws: judged * samples,
                },
            ));
        }
    }
    Ok(verdict)
}

fn rule_name(r: Rule) -> &'static str {
    match r {
        Rule::Masked => "its logit is -inf",
        Rule::MinP => "SAMPLE-MINP removes it",
        Rule::TopK => "SAMPLE-TOPK removes it",
        Rule::TopP => "SAMPLE-TOPP removes it",
    }
}

/// One fault as a sentence: which row, which rule, the witness.
pub fn describe(r: usize, f: &Fault, case: &Case, odtype: Dtype) -> String {
    let p = &case.filters[r];
    let params = format!(
        "(T={}, top_k={}, top_p={}, min_p={})",
        p.temperature, p.top_k, p.top_p, p.min_p
    );
    match f {
        Fault::Kept(KeptFault::Kept { token, rule }) => {
            format!("row {r} {params}: token {token} kept, but {}", rule_name(*rule))
        }
        Fault::Kept(KeptFault::Removed { token }) => format!(
            "row {r} {params}: token {token} removed, but every rule surely keeps it"
        ),
        Fault::Kept(KeptFault::TopKCount { kept, allowed }) => format!(
            "row {r} {params}: {kept} tokens tied at the k-th value kept, top-k keeps {allowed} of them (SAMPLE-TOPK, exact ties)"
        ),
        Fault::Kept(KeptFault::NucleusCount { token, kept, lo, hi }) => format!(
            "row {r} {params}: the nucleus boundary's tie group of token {token} keeps {kept}, the rule keeps {lo} to {hi} (SAMPLE-TOPP)"
        ),
        Fault::Kept(KeptFault::SplitTie { token, other }) => format!(
            "row {r} {params}: equal logits {token} kept and {other} removed, declared topp_ties keep_all (SAMPLE-TOPP)"
        ),
        Fault::Masked { token, got } => format!(
            "row {r} {params}: token {token} holds {:e} ({got:#x}), neither -inf nor its logit {:e}",
            f32::from_bits(*got),
            case.logits[r * case.logits.len() / case.filters.len() + token]
        ),
        Fault::Prob { token, got, lo, hi } => {
            if lo == hi {
                format!(
                    "row {r} {params}: token {token} holds {:e} ({got:#x}), not a probability",
                    odtype.decode(*got)
                )
            } else {
                format!(
                    "row {r} {params}: token {token} holds {:e} ({got:#x}), outside [{lo:e}, {hi:e}] (the kept set's renormalisation)",
                    odtype.decode(*got)
                )
            }
        }
        Fault::Collapsed { id, n, bound } => format!(
            "row {r} {params}: all {n} draws are token {id}, which a sampler of these filters does with probability at most {bound:e} (a greedy sampler?)"
        ),
        Fault::Frequencies {
            alternative,
            llr,
            threshold,
            rows,
            draws,
        } => format!(
            "row {r} {params} and the case's other decided rows ({rows} rows, {draws} draws): the draws are e^{llr:.1} times likelier under {} than under the filters' probabilities (a sampler of the filters reaches e^{threshold:.1} with probability at most 2^-40)",
            alternative.describe()
        ),
        Fault::Sampled { slot, id, rule } => match rule {
            None => format!("row {r} {params}: sample {slot} is {id}, not a token"),
            Some(rule) => format!(
                "row {r} {params}: sample {slot} drew token {id}, but {}",
                rule_name(*rule)
            ),
        },
    }
}

/// The declarations identification tries: every order and tie policy
/// with the declared `exp_ulps`.
pub fn known(declared: &Declared) -> Vec<Declared> {
    let mut out = Vec::new();
    for order in [Order::MinPFirst, Order::MinPLast, Order::Joint] {
        for topk_ties in [TopKTies::KeepAll, TopKTies::Exact] {
            for topp_ties in [TopPTies::Order, TopPTies::KeepAll] {
                out.push(Declared {
                    order,
                    topk_ties,
                    topp_ties,
                    ..*declared
                });
            }
        }
    }
    out
}

/// `"min_p_first, topk_ties keep_all, topp_ties order"`.
pub fn label(d: &Declared) -> String {
    format!(
        "{}, topk_ties {}, topp_ties {}",
        order_name(d.order),
        topk_ties_name(d.topk_ties),
        topp_ties_name(d.topp_ties)
    )
}

/// Every known declaration (see [`known`]) the output is consistent with.
///
/// # Errors
/// As [`judge`].
pub fn identify(
    spec: &Spec,
    case: &Case,
    form: Form,
    scaled: bool,
    samples: usize,
    out: &Output,
    odtype: Dtype,
) -> Result<Vec<Declared>, String> {
    let mut found = Vec::new();
    for d in known(&spec.declared) {
        let sp = Spec {
            declared: d,
            ..*spec
        };
        if judge(&sp, case, form, scaled, samples, out, odtype)?.pass() {
            found.push(d);
        }
    }
    Ok(found)
}

/// One row's kept set in binary32 as the sort-based kernels compute it
/// (vLLM's `apply_top_k_top_p`, Hugging Face's warpers), under the
/// declaration: `x = l / T`, a softmax with this crate's binary32
/// `exp`, min-p against the maximum, top-k against the `k`-th largest
/// (keeping ties, or the first `k` by a stable sort), top-p by the
/// ascending cumulative sum `<= 1 - top_p` over the candidates (the last
/// always kept; declared `topp_ties` keep_all, the kept extended to
/// their equal logits). Also returns `x` and the terms `exp(x - m)`.
pub fn kept_row(logits: &[f32], f: &Filters, d: &Declared) -> (Vec<bool>, Vec<f32>, Vec<f32>) {
    let exp = oracle::gdn::transcendental::exp;
    let v = logits.len();
    let x: Vec<f32> = logits.iter().map(|&l| l / f.temperature).collect();
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let ex: Vec<f32> = x.iter().map(|&l| exp(l - m)).collect();
    let z: f32 = ex.iter().sum();
    let p: Vec<f32> = ex.iter().map(|&e| e / z).collect();
    let pmax = p.iter().fold(0.0f32, |a, &b| a.max(b));
    let minp: Vec<bool> = (0..v)
        .map(|i| x[i].is_finite() && p[i] >= f.min_p * pmax)
        .collect();
    // Descending by x, ties by index.
    let mut desc: Vec<usize> = (0..v).collect();
    desc.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
    let finite = desc.iter().filter(|&&i| x[i].is_finite()).count();
    let k = f.top_k as usize;
    let mut topk = vec![false; v];
    for (pos, &i) in desc.iter().enumerate() {
        topk[i] = x[i].is_finite()
            && (k == 0
                || k >= finite
                || match d.topk_ties {
                    TopKTies::KeepAll => x[i] >= x[desc[k - 1]],
                    TopKTies::Exact => pos < k,
                });
    }
    let cand: Vec<bool> = (0..v)
        .map(|i| match d.order {
            Order::MinPFirst => topk[i] && minp[i],
            Order::MinPLast => topk[i],
            Order::Joint => x[i].is_finite(),
        })
        .collect();
    let live: Vec<usize> = desc.iter().rev().copied().filter(|&i| cand[i]).collect();
    let z2: f32 = live.iter().map(|&i| ex[i]).sum();
    let thr = 1.0 - f.top_p;
    let mut topp = vec![false; v];
    let mut cum = 0.0f32;
    for (j, &i) in live.iter().enumerate() {
        cum += ex[i] / z2;
        topp[i] = cum > thr || cum.is_nan() || j + 1 == live.len();
    }
    if d.topp_ties == TopPTies::KeepAll {
        let kept_x: Vec<f32> = live.iter().filter(|&&i| topp[i]).map(|&i| x[i]).collect();
        if let Some(&least) = kept_x.iter().min_by(|a, b| a.total_cmp(b)) {
            for &i in &live {
                topp[i] |= x[i] == least;
            }
        }
    }
    let kept = (0..v).map(|i| minp[i] && topk[i] && topp[i]).collect();
    (kept, x, ex)
}

/// A reference kernel in binary32 ([`kept_row`] per row) writing `form`:
/// the masked logits, `e_i / sum over the kept` in `odtype`, or `samples`
/// draws per row by inverse CDF from `seed`.
pub fn reference(spec: &Spec, case: &Case, form: Form, samples: usize, odtype: Dtype) -> Output {
    let (b, v) = spec.dims;
    let mut vals = Vec::with_capacity(b * v);
    let mut ids = Vec::with_capacity(b * samples);
    let mut rng = Rng(spec.seed ^ 0x5A11);
    for r in 0..b {
        let row = &case.logits[r * v..(r + 1) * v];
        let (kept, _, ex) = kept_row(row, &case.filters[r], &spec.declared);
        let z: f32 = (0..v).filter(|&i| kept[i]).map(|i| ex[i]).sum();
        match form {
            Form::Mask => vals.extend((0..v).map(|i| {
                if kept[i] {
                    row[i].to_bits()
                } else {
                    f32::NEG_INFINITY.to_bits()
                }
            })),
            Form::Renorm => vals.extend((0..v).map(|i| {
                let q = if kept[i] { ex[i] / z } else { 0.0 };
                odtype.encode(q)
            })),
            Form::Sample => {
                for _ in 0..samples {
                    let u = rng.f01() * z;
                    let mut acc = 0.0f32;
                    let mut last = 0;
                    let mut pick = None;
                    for i in 0..v {
                        if kept[i] {
                            last = i;
                            acc += ex[i];
                            if acc > u {
                                pick = Some(i);
                                break;
                            }
                        }
                    }
                    ids.push(pick.unwrap_or(last) as i64);
                }
            }
        }
    }
    match form {
        Form::Sample => Output::Ids(ids),
        _ => Output::Values(vals),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: Declared = Declared {
        order: Order::MinPFirst,
        topk_ties: TopKTies::KeepAll,
        topp_ties: TopPTies::Order,
        exp_ulps: 2,
    };

    fn spec(arm: Arm, dims: Dims, declared: Declared) -> Spec {
        Spec {
            dims,
            declared,
            dtype: Dtype::F32,
            arm,
            seed: Spec::base_seed(dims, Dtype::F32, arm),
        }
    }

    #[test]
    fn the_reference_passes_every_arm_form_and_declaration() {
        for d in known(&VLLM) {
            for dims in [(4, 7), (9, 129), (16, 1000), (2, 32000)] {
                for arm in Arm::ALL {
                    let sp = spec(arm, dims, d);
                    let case = sp.generate().unwrap();
                    for form in Form::ALL {
                        let out = reference(&sp, &case, form, 16, Dtype::F32);
                        let v = judge(&sp, &case, form, false, 16, &out, Dtype::F32).unwrap();
                        assert!(
                            v.pass(),
                            "{} {arm:?} {dims:?} {form:?}: {:?}",
                            label(&d),
                            v.faults
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn most_rows_are_decided_outside_ties() {
        for arm in [Arm::Rand, Arm::Peak, Arm::Flat, Arm::Edge, Arm::Near] {
            let sp = spec(arm, (16, 1000), VLLM);
            let case = sp.generate().unwrap();
            let out = reference(&sp, &case, Form::Mask, 1, Dtype::F32);
            let v = judge(&sp, &case, Form::Mask, false, 1, &out, Dtype::F32).unwrap();
            assert!(
                v.decided * 4 >= v.rows * 3,
                "{arm:?}: {} of {}",
                v.decided,
                v.rows
            );
        }
    }

    #[test]
    fn near_rows_put_distinct_neighbours_at_the_kth_value() {
        for dtype in [Dtype::F32, Dtype::Bf16, Dtype::F16] {
            let (mut rows, mut distinct, mut scaled, mut within) = (0, 0, 0, 0);
            let (mut zeroed, mut low, mut within24) = (0, 0, 0);
            let lowest = dtype.steps(f32::NEG_INFINITY, 1);
            for dims in [(16, 1000), (9, 129), (64, 512), (4, 7)] {
                let sp = Spec {
                    dtype,
                    ..spec(Arm::Near, dims, VLLM)
                };
                let case = sp.generate().unwrap();
                for (row, f) in case.logits.chunks(dims.1).zip(&case.filters) {
                    let k = f.top_k as usize;
                    assert!(k >= 1 && k < dims.1, "{dims:?}: k {k}");
                    let mut d = row.to_vec();
                    d.sort_by(|a, b| b.total_cmp(a));
                    let steps = if dtype == Dtype::F32 && f.temperature != 1.0 {
                        12
                    } else {
                        3
                    };
                    // The (k + 1)-th below the k-th and the (k - 1)-th above
                    // it: tied, or apart in binary32 probabilities too (a
                    // kernel that ranks them passes), the gap a few steps
                    // of the dtype where that is apart enough.
                    let apart = near_apart(d[k - 1], d[0], f.temperature, VLLM.exp_ulps);
                    let gap = |a: f32, b: f32| f64::from(a) - f64::from(b);
                    assert!(d[k] == d[k - 1] || gap(d[k - 1], d[k]) >= apart, "{dims:?}");
                    // Not much further, unless the maximum is the (k - 1)-th
                    // itself (k = 2), so that `apart` was drawn from the
                    // row's earlier maximum.
                    let far = if k == 2 { f64::INFINITY } else { 2.0 * apart };
                    assert!(d[k] >= beyond(dtype, d[k - 1], -steps, far), "{dims:?}");
                    if k >= 2 {
                        assert!(d[k - 2] == d[k - 1] || gap(d[k - 2], d[k - 1]) >= apart);
                        assert!(d[k - 2] <= beyond(dtype, d[k - 1], steps, far));
                    }
                    rows += 1;
                    distinct += usize::from(d[k] < d[k - 1]);
                    scaled += usize::from(f.temperature != 1.0);
                    // Closer than a 20- (24-) step bisection's last bracket.
                    let bracket = gap(d[0], d[dims.1 - 1]) / f64::from(1u32 << 20);
                    within += usize::from(d[k] < d[k - 1] && gap(d[k - 1], d[k]) < bracket);
                    within24 +=
                        usize::from(d[k] < d[k - 1] && gap(d[k - 1], d[k]) < bracket / 16.0);
                    zeroed += usize::from(d[k - 1] == 0.0);
                    low += usize::from(d[dims.1 - 1] <= lowest / 4.0);
                }
            }
            // A quarter of the rows each: the k-th value at 0, a far-low
            // token; in every dtype a fixed 20-step bisection (24 in
            // binary32) misplaces the boundary of the rows that have them.
            let rate = |n: usize| n as f64 / rows as f64;
            assert!(
                (0.15..0.35).contains(&rate(zeroed)),
                "{dtype:?}: {zeroed} of {rows} at 0"
            );
            assert!(
                (0.12..0.35).contains(&rate(low)),
                "{dtype:?}: {low} of {rows} far-low"
            );
            assert!(
                rate(within) >= 0.4,
                "{dtype:?}: {within} of {rows} within 20 steps"
            );
            assert!(
                dtype != Dtype::F32 || rate(within24) >= 0.2,
                "{within24} of {rows}"
            );
            // Ties of the 16-bit dtype's coarse values aside, the
            // neighbours are distinct; a third of the rows scale by T.
            assert!(distinct * 10 >= rows * 9, "{dtype:?}: {distinct} of {rows}");
            let third = scaled as f64 / rows as f64;
            assert!((0.2..0.47).contains(&third), "{dtype:?}: T != 1 in {third}");
            if dtype == Dtype::F32 {
                assert!(
                    within * 10 >= rows * 9,
                    "{within} of {rows} within a bracket"
                );
            }
        }
    }

    #[test]
    fn planted_row_zero_parameters_fail() {
        let sp = spec(Arm::Rand, (16, 1000), VLLM);
        let mut case = sp.generate().unwrap();
        let honest = case.clone();
        let f0 = case.filters[0];
        case.filters.iter_mut().for_each(|f| *f = f0);
        let out = reference(&sp, &case, Form::Mask, 1, Dtype::F32);
        let v = judge(&sp, &honest, Form::Mask, false, 1, &out, Dtype::F32).unwrap();
        assert!(!v.pass());
    }

    #[test]
    fn names_parse() {
        for arm in Arm::ALL {
            assert_eq!(Arm::parse(arm.name()), Ok(arm));
        }
        for f in Form::ALL {
            assert_eq!(Form::parse(f.name()), Ok(f));
        }
        assert!(parse_order("nope").unwrap_err().contains("\"joint\""));
        assert_eq!(parse_topk_ties("exact"), Ok(TopKTies::Exact));
        assert_eq!(parse_topp_ties("keep_all"), Ok(TopPTies::KeepAll));
    }
}
