//! The sampling filters of LLM decoding: temperature, top-k, top-p
//! (nucleus) and min-p, applied to one row of logits, and what a kernel
//! may output for them (the masked logits, the renormalised
//! probabilities, or sampled token ids). vLLM's `apply_top_k_top_p`
//! (`vllm/v1/sample/ops/topk_topp_sampler.py`) and its min-p processor,
//! FlashInfer's `top_k_renorm_probs`, `top_p_renorm_probs`,
//! `top_k_mask_logits` and `top_k_top_p_sampling_from_probs`
//! (`flashinfer/sampling.py`), Hugging Face's `TopKLogitsWarper`,
//! `TopPLogitsWarper` and `MinPLogitsWarper`.
//!
//! Shapes (elements): one row `logits [V]` (any float dtype's values as
//! `f32`; `-inf` marks a token already masked), its [`Filters`], and the
//! scratch a judgement works in, [`Token`]`[V]`.
//!
//! # The rules, for one row
//!
//! 1. `SAMPLE-PROB`: `p_i = exp(s_i - m) / sum_j exp(s_j - m)`, `s_i =
//!    l_i / T`, `m = max_j s_j`, on real numbers; `-inf` logits have `p =
//!    0` and are never kept.
//! 2. `SAMPLE-MINP`: keep `i` iff `p_i >= min_p * max_j p_j` (vLLM's
//!    `MinPLogitsProcessor`, Hugging Face's `MinPLogitsWarper`: removed
//!    iff `probs < min_p * max`). It does not depend on the normaliser:
//!    `p_i / max p = exp(s_i - m)`.
//! 3. `SAMPLE-TOPK`: keep the `k` largest logits (`k = 0` or `k >= V`:
//!    off). [`TopKTies::KeepAll`]: every token equal to the `k`-th
//!    largest is kept (vLLM and Hugging Face mask `logits < kth_value`);
//!    [`TopKTies::Exact`]: exactly `k`, any of the tied (`torch.topk`).
//! 4. `SAMPLE-TOPP`: over a candidate set `C` (see [`Order`]) with `p`
//!    renormalised over `C`, token `i` is kept iff the mass of the
//!    candidates before it in descending order is below `top_p`: `G_i /
//!    Z < top_p`. This is vLLM's and Hugging Face's `probs_sum <= 1 -
//!    top_p` masking over the ascending sort (`G_i / Z = 1 - probs_sum`),
//!    and FlashInfer's smallest prefix whose sum reaches `top_p`; the
//!    largest is always kept (`G = 0`); `top_p = 1` keeps every token of
//!    positive probability. Ties: [`TopPTies::Order`], the tied are put
//!    in some order (a sort's), so a tie group at the boundary keeps a
//!    count of them, any of them; [`TopPTies::KeepAll`], a token tied
//!    with a kept one is kept (a threshold on the value, FlashInfer's
//!    pivot).
//! 5. The order ([`Order`]): min-p and top-k commute (both keep a prefix
//!    of the logits by value, and the maximum survives both), so the
//!    order only chooses top-p's candidates `C`: vLLM v1 applies min-p
//!    (an argmax-invariant logits processor), then top-k, then top-p over
//!    the survivors' renormalised probabilities ([`Order::MinPFirst`]);
//!    Hugging Face's warpers run top-k, top-p, then min-p
//!    ([`Order::MinPLast`]: `C` the top-k survivors); FlashInfer's
//!    `joint` filter applies each to the unfiltered distribution
//!    ([`Order::Joint`]: `C` every finite token). FlashInfer's
//!    `top_k_first` is [`Order::MinPLast`] without min-p.
//!
//! A token is kept iff it survives all three filters.
//!
//! # Why enclosures, and where the bound comes from
//!
//! As in [`crate::moe_routing`]: `exp` and the sums are evaluated in
//! binary32 in whatever order a kernel takes, so every quantity a filter
//! compares is held to a sound enclosure of any binary32 evaluation, and
//! a token's membership is decided (judged exactly) wherever the
//! enclosure lies on one side of the threshold, undecided (either way
//! admitted) where it straddles it. The bound is `crate::moe_routing`'s
//! derivation (Higham, *Accuracy and Stability of Numerical Algorithms*,
//! 2nd ed., §4.2 for the sums): each term `e_i = exp(s_i - m)` is within
//! relative `k_i = (2 |t_i| + 2 K + 1) u` (`u = 2^-24`, `K` the kernel's
//! `exp` ulps, `t_i = s_i - m`), plus `2 (|s_i| + |m|) u` for the
//! temperature's division or reciprocal product when `T != 1`; a sum of
//! `n` non-negative terms in any order within `(n - 1) u`, a division or
//! product `u`; every first-order bound doubled. Per rule:
//! - min-p compares `p_i` with `min_p * p_max`: the normaliser cancels,
//!   three roundings remain (`e_i`'s error, then `6u`); a kernel may
//!   compare in logit space instead (`s_i < m + log(min_p)`, vLLM's GPU
//!   worker), whose threshold's roundings grow with `|m|`: the slack of
//!   `min_p_slack` covers both;
//! - top-p compares `G / Z` (descending cumsum, FlashInfer's form) or
//!   `L / Z = 1 - G / Z` (vLLM's ascending cumsum against the binary32
//!   `1 - top_p`): a token is decided only where both forms decide it
//!   alike, each within its own sum's bound (`n_G` or `n_L` terms, and
//!   `Z`'s `n` terms);
//! - top-k compares logits (exact), except that with `T != 1` two logits
//!   within `4u` of each other may round to one `l / T`: those next to the
//!   `k`-th value are undecided.
//!
//! One case is exact, so the comparison's direction (`<` or `<=`) is
//! judged: when every candidate's logit is the maximum (`e = exp(0) = 1`
//! in every `exp` of the field), their count `n` a power of two and `1 -
//! top_p` a binary32 value, every kernel computes `p = 1/n` and each
//! cumulative sum `r / n` exactly.
//!
//! The enclosure of the exact `exp` comes from this crate's binary32
//! [`crate::gdn::transcendental::exp`] (within 1.03 ulp on all 2^32
//! inputs) and binary64 arithmetic ([`crate::moe_routing`]).
//!
//! Source: vLLM `vllm/v1/sample/ops/topk_topp_sampler.py`
//! (`apply_top_k_top_p`: sort ascending, `logits_sort <
//! logits_sort.gather(V - k)` masked, softmax, `cumsum <= 1 - p` masked,
//! the last kept), `vllm/v1/sample/logits_processor` (`MinPLogitsProcessor`:
//! `probs < min_p * amax(probs)` masked) and `vllm/v1/sample/sampler.py`
//! (temperature, then min-p, then top-k and top-p); FlashInfer
//! `flashinfer/sampling.py` (`top_k_top_p_sampling_from_probs`,
//! `filter_apply_order` `"top_k_first"` or `"joint"`); Hugging Face
//! `transformers/generation/logits_process.py` (`TopKLogitsWarper`:
//! `scores < topk[..., -1]`; `TopPLogitsWarper`: `cumulative_probs <= 1 -
//! top_p` over the ascending sort, `min_tokens_to_keep`;
//! `MinPLogitsWarper`).

use crate::dtype::Dtype;
use crate::moe_routing::{abs_f64, exp_enclosure, Enclosure};

pub use crate::moe_routing::admits;

/// Binary32's unit roundoff, `2^-24`.
pub const U: f64 = 1.0 / 16_777_216.0;

/// Relative slack for this module's own binary64 roundings.
const F64_SLACK: f64 = 1.0 / 1_099_511_627_776.0; // 2^-40

/// Absolute slack per term for probabilities that underflow or are
/// flushed to zero (`2^-100` of the maximum's term).
const TINY: f64 = 7.888_609_052_210_118e-31; // 2^-100

/// When top-p's candidate set `C` is formed (rule 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// min-p, top-k, then top-p over their survivors (vLLM v1).
    MinPFirst,
    /// top-k, top-p over its survivors, then min-p (Hugging Face's
    /// warpers; FlashInfer's `top_k_first`).
    MinPLast,
    /// Each filter on the unfiltered distribution, the kept set their
    /// intersection (FlashInfer's `joint`).
    Joint,
}

/// Ties at the `k`-th largest logit (rule `SAMPLE-TOPK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopKTies {
    /// Every token equal to the `k`-th value is kept (vLLM, Hugging Face).
    KeepAll,
    /// Exactly `k` tokens, any of the tied (`torch.topk`).
    Exact,
}

/// Ties at the nucleus boundary (rule `SAMPLE-TOPP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TopPTies {
    /// The tied are ordered (a sort's order): a count of them is kept
    /// (vLLM, Hugging Face).
    Order,
    /// A token tied with a kept one is kept (a threshold on the value).
    KeepAll,
}

/// A declared filter semantics and the accuracy of the kernel's `exp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Declared {
    /// Rule 5.
    pub order: Order,
    /// Rule `SAMPLE-TOPK`'s ties.
    pub topk_ties: TopKTies,
    /// Rule `SAMPLE-TOPP`'s ties.
    pub topp_ties: TopPTies,
    /// The kernel's `exp` is within this many ulps, 2 to 64.
    pub exp_ulps: u32,
}

/// One row's filter parameters (vLLM passes them per request).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Filters {
    /// Temperature, finite and positive; `1.0` for none.
    pub temperature: f32,
    /// Top-k; `0` or at least the finite tokens: off.
    pub top_k: u32,
    /// Top-p in `(0, 1]`; `1.0` keeps every token of positive probability.
    pub top_p: f32,
    /// Min-p in `[0, 1]`; `0.0`: off.
    pub min_p: f32,
}

impl Filters {
    /// No filter at all.
    pub const OFF: Filters = Filters {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    };
}

/// Why a row cannot be judged (nothing usable is written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplingError {
    /// Every logit is `-inf` (or the row is empty).
    Empty,
    /// A logit is NaN or `+inf` (token index).
    NotFinite {
        /// The token.
        token: usize,
    },
    /// A parameter outside its range (`"temperature"`, `"top_p"`,
    /// `"min_p"`, `"exp_ulps"`).
    Parameter {
        /// Which.
        what: &'static str,
    },
    /// The scratch's length is not the row's.
    Length {
        /// Its length.
        got: usize,
        /// The row's.
        want: usize,
    },
}

/// A three-valued membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Status {
    /// Surely kept (in the set).
    In,
    /// Surely removed.
    #[default]
    Out,
    /// Within the bound of the threshold: either is admitted.
    Undecided,
}

impl Status {
    fn and(self, o: Status) -> Status {
        match (self, o) {
            (Status::Out, _) | (_, Status::Out) => Status::Out,
            (Status::In, Status::In) => Status::In,
            _ => Status::Undecided,
        }
    }
}

/// One token of a row as a judgement sees it; a row's scratch holds them
/// sorted by logit, descending (ties by index), `-inf` last.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Token {
    /// Its index in the row.
    pub index: usize,
    /// Its logit.
    pub logit: f32,
    /// Encloses both `exp(s_i - m)` (real) and any binary32 kernel's value
    /// of it (rule `SAMPLE-PROB`, relative to the maximum's term).
    pub e: Enclosure,
    /// Rule `SAMPLE-MINP`.
    pub min_p: Status,
    /// Rule `SAMPLE-TOPK`.
    pub top_k: Status,
    /// In top-p's candidate set (rule 5).
    pub cand: Status,
    /// Rule `SAMPLE-TOPP`.
    pub top_p: Status,
    /// Kept: all three.
    pub kept: Status,
    /// The sorted position of its top-p cluster's first member (tokens
    /// whose enclosures overlap, so a kernel may order them either way).
    pub cluster: usize,
    /// Top-p keeps between these many of its cluster (when `counted`).
    pub count_lo: usize,
    /// The most top-p keeps of its cluster.
    pub count_hi: usize,
    /// Whether the cluster's count is judged (every member surely a
    /// candidate and surely kept by min-p and top-k).
    pub counted: bool,
}

/// What [`classify`] found about a row.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct Row {
    /// Tokens with a finite logit.
    pub finite: usize,
    /// [`TopKTies::Exact`] with a tie at the `k`-th value: the sorted
    /// range `(start, len)` of the tied and how many of them top-k keeps.
    pub tie: Option<(usize, usize, usize)>,
    /// The top-p comparison is exact (see the module docs).
    pub exact: bool,
    /// Every token's membership is decided, or (tied at the nucleus
    /// boundary) the count its tie group keeps.
    pub decided: bool,
}

/// Which rule removes a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Its logit was `-inf`.
    Masked,
    /// `SAMPLE-MINP`.
    MinP,
    /// `SAMPLE-TOPK`.
    TopK,
    /// `SAMPLE-TOPP`.
    TopP,
}

/// Why a kernel's kept set breaks the rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeptFault {
    /// Token `token` was kept; `rule` surely removes it.
    Kept {
        /// The token.
        token: usize,
        /// The rule.
        rule: Rule,
    },
    /// Token `token` was removed; every rule surely keeps it.
    Removed {
        /// The token.
        token: usize,
    },
    /// [`TopKTies::Exact`]: `kept` of the tokens tied at the `k`-th
    /// value were kept, more than the `allowed`.
    TopKCount {
        /// Kept of the tied.
        kept: usize,
        /// The most top-k keeps.
        allowed: usize,
    },
    /// A top-p cluster (its first member `token`) kept `kept` tokens,
    /// outside `lo..=hi`.
    NucleusCount {
        /// The cluster's first token (index in the row).
        token: usize,
        /// Kept.
        kept: usize,
        /// The least admitted.
        lo: usize,
        /// The most admitted.
        hi: usize,
    },
    /// [`TopPTies::KeepAll`]: equal logits `token` and `other`, one kept,
    /// one removed.
    SplitTie {
        /// Kept.
        token: usize,
        /// Removed.
        other: usize,
    },
}

/// Checks one row's parameters.
///
/// # Errors
/// [`SamplingError::Parameter`].
pub fn validate(f: &Filters, d: &Declared) -> Result<(), SamplingError> {
    let t = f.temperature;
    if !(t.is_finite() && t > 0.0) {
        return Err(SamplingError::Parameter {
            what: "temperature",
        });
    }
    if !(f.top_p > 0.0 && f.top_p <= 1.0) {
        return Err(SamplingError::Parameter { what: "top_p" });
    }
    if !(0.0..=1.0).contains(&f.min_p) {
        return Err(SamplingError::Parameter { what: "min_p" });
    }
    if !(2..=64).contains(&d.exp_ulps) {
        return Err(SamplingError::Parameter { what: "exp_ulps" });
    }
    Ok(())
}

/// Classifies every token of a row under rules 1 to 5: writes `scratch`
/// (`V` long) sorted by logit descending with each token's enclosure and
/// statuses, and returns the row's summary.
///
/// # Errors
/// [`SamplingError::Length`], [`SamplingError::NotFinite`] (NaN or
/// `+inf`), [`SamplingError::Empty`] (no finite logit), and
/// [`validate`]'s.
pub fn classify(
    logits: &[f32],
    f: &Filters,
    d: &Declared,
    scratch: &mut [Token],
) -> Result<Row, SamplingError> {
    validate(f, d)?;
    let v = logits.len();
    if scratch.len() != v {
        return Err(SamplingError::Length {
            got: scratch.len(),
            want: v,
        });
    }
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::INFINITY {
            return Err(SamplingError::NotFinite { token: i });
        }
        scratch[i] = Token {
            index: i,
            logit: l,
            ..Token::default()
        };
    }
    scratch.sort_unstable_by(|a, b| b.logit.total_cmp(&a.logit).then(a.index.cmp(&b.index)));
    let finite = scratch.iter().take_while(|t| t.logit.is_finite()).count();
    if finite == 0 {
        return Err(SamplingError::Empty);
    }
    let mut row = Row {
        finite,
        ..Row::default()
    };
    let temp = f64::from(f.temperature);
    let scaled = f.temperature != 1.0;
    let m = f64::from(scratch[0].logit) / temp;
    let k_ulps = f64::from(d.exp_ulps);
    let max_logit = scratch[0].logit;
    // Rule 1: the terms; rule 2: min-p.
    let min_p = f64::from(f.min_p);
    let r = min_p_slack(m, f.min_p, k_ulps);
    for t in scratch[..finite].iter_mut() {
        if t.logit == max_logit {
            // exp(0) = 1 in every exp of the field, and equal logits give
            // equal l / T.
            t.e = Enclosure { lo: 1.0, hi: 1.0 };
        } else {
            let s = f64::from(t.logit) / temp;
            let arg = s - m;
            let x = exp_enclosure(arg);
            let mut kappa = (2.0 * abs_f64(arg) + 2.0 * k_ulps + 1.0) * U;
            if scaled {
                kappa += 2.0 * (abs_f64(s) + abs_f64(m)) * U;
            }
            let kappa = 2.0 * kappa + F64_SLACK;
            t.e = Enclosure {
                lo: (x.lo * (1.0 - kappa)).max(0.0),
                hi: x.hi * (1.0 + kappa) + TINY,
            };
        }
        // The maximum's own probability is the maximum, bit for bit.
        t.min_p = if t.logit == max_logit || t.e.lo * (1.0 - r) - TINY >= min_p {
            Status::In
        } else if t.e.hi * (1.0 + r) + TINY < min_p {
            Status::Out
        } else {
            Status::Undecided
        };
    }
    // Rule 3: top-k.
    let k = f.top_k as usize;
    if k == 0 || k >= finite {
        scratch[..finite]
            .iter_mut()
            .for_each(|t| t.top_k = Status::In);
    } else {
        let kth = scratch[k - 1].logit;
        let margin = |l: f32| {
            if scaled {
                4.0 * U * abs_f64(f64::from(l)).max(abs_f64(f64::from(kth)))
            } else {
                0.0
            }
        };
        let kth64 = f64::from(kth);
        let mut sure_above = 0;
        let mut tie_start = None;
        let mut tie_len = 0;
        for (pos, t) in scratch[..finite].iter_mut().enumerate() {
            let l = f64::from(t.logit);
            let mg = margin(t.logit);
            t.top_k = match d.topk_ties {
                TopKTies::KeepAll => {
                    if l >= kth64 {
                        Status::In
                    } else if l < kth64 - mg {
                        Status::Out
                    } else {
                        Status::Undecided
                    }
                }
                TopKTies::Exact => {
                    if l > kth64 + mg {
                        sure_above += 1;
                        Status::In
                    } else if l < kth64 - mg {
                        Status::Out
                    } else {
                        tie_start.get_or_insert(pos);
                        tie_len += 1;
                        Status::Undecided
                    }
                }
            };
        }
        if let Some(start) = tie_start {
            let r = k - sure_above;
            if r == tie_len {
                scratch[start..start + tie_len]
                    .iter_mut()
                    .for_each(|t| t.top_k = Status::In);
            } else {
                row.tie = Some((start, tie_len, r));
            }
        }
    }
    // Rule 5: top-p's candidates.
    for t in scratch[..finite].iter_mut() {
        t.cand = match d.order {
            Order::MinPFirst => t.top_k.and(t.min_p),
            Order::MinPLast => t.top_k,
            Order::Joint => Status::In,
        };
    }
    top_p(scratch, finite, f, d, &mut row);
    let mut decided = row.tie.is_none();
    for t in scratch[..finite].iter_mut() {
        t.kept = t.min_p.and(t.top_k).and(t.top_p);
        // Tied tokens whose count is decided count as decided.
        let counted = t.counted && t.count_lo == t.count_hi;
        decided &= t.kept != Status::Undecided || counted;
    }
    row.decided = decided;
    Ok(row)
}

/// The relative slack of rule `SAMPLE-MINP`'s comparison beyond the
/// term's own enclosure, for a row whose largest scaled logit is `m`.
///
/// In probability space (vLLM's `MinPLogitsProcessor`, Hugging Face's
/// `MinPLogitsWarper`: `p_i < min_p * max p`) the normaliser cancels and
/// three roundings remain (`e_i / Z`, `1 / Z`, the product with `min_p`):
/// `3u`. In logit space (vLLM's GPU worker `_min_p_torch` and
/// `_min_p_kernel`, `vllm/v1/worker/gpu/sample/min_p.py`: `s_i < max +
/// log(min_p)`, removed) the threshold `fl(m + fl(ln min_p))` is off
/// `m + ln min_p` by at most `2 K u |ln min_p|` (a `log` within `K`
/// ulps) plus `u (|m| + |ln min_p|)` (the sum's rounding), a shift `δ` of
/// the exponent that moves the compared ratio by the factor `e^δ`, within
/// `|δ| (1 + |δ|)` relative. Every bound doubled, as in the module docs;
/// `|ln min_p| <= |E| ln 2` for `min_p` in `[2^E, 1)` and `0` at `1`.
fn min_p_slack(m: f64, min_p: f32, k_ulps: f64) -> f64 {
    let mut r = 2.0 * 3.0 * U + F64_SLACK;
    if min_p > 0.0 && min_p < 1.0 {
        // The binary exponent E of min_p (min_p < 1, so E <= -1); a
        // subnormal's is at most -126.
        let bits = min_p.to_bits();
        let biased = ((bits >> 23) & 0xFF) as i32;
        let e = if biased == 0 { -149 } else { biased - 127 };
        let ln_bound = f64::from(-e) * core::f64::consts::LN_2 * (1.0 + F64_SLACK);
        let delta = (2.0 * k_ulps * ln_bound + abs_f64(m) + ln_bound) * U;
        r += 2.0 * delta * (1.0 + delta);
    }
    r
}

/// Rule `SAMPLE-TOPP` over the candidates among `scratch[..finite]`.
fn top_p(scratch: &mut [Token], finite: usize, f: &Filters, d: &Declared, row: &mut Row) {
    let p = f64::from(f.top_p);
    let theta32 = 1.0f32 - f.top_p;
    let theta = f64::from(theta32);
    let theta_exact = theta == 1.0 - p;
    // Totals over the candidates: sure lower ends, possible upper ends.
    let (mut sure_lo, mut poss_hi, mut n_poss, mut n_sure) = (0.0f64, 0.0f64, 0usize, 0usize);
    let mut all_exact = true;
    for t in &scratch[..finite] {
        match t.cand {
            Status::In => {
                sure_lo += t.e.lo;
                poss_hi += t.e.hi;
                n_poss += 1;
                n_sure += 1;
                all_exact &= t.e.lo == 1.0 && t.e.hi == 1.0;
            }
            Status::Undecided => {
                poss_hi += t.e.hi;
                n_poss += 1;
                all_exact = false;
            }
            Status::Out => {}
        }
    }
    let exact = all_exact && n_sure == n_poss && n_poss.is_power_of_two() && theta_exact;
    row.exact = exact;
    let n_z = n_poss as f64;
    // The status of the candidate at position r of a cluster, given the
    // bounds on the mass before it (g) and at or after it (l) and their
    // term counts.
    let status = |g: Enclosure, l: Enclosure, n_g: f64, n_l: f64| -> Status {
        let g_lo = g.lo.max(0.0);
        let l_lo = l.lo.max(0.0);
        let x = Enclosure {
            lo: if g_lo + l.hi > 0.0 {
                g_lo / (g_lo + l.hi)
            } else {
                0.0
            },
            hi: if g.hi + l_lo > 0.0 {
                g.hi / (g.hi + l_lo)
            } else {
                1.0
            },
        };
        let y = Enclosure {
            lo: if l_lo + g.hi > 0.0 {
                l_lo / (l_lo + g.hi)
            } else {
                0.0
            },
            hi: if l.hi + g_lo > 0.0 {
                l.hi / (l.hi + g_lo)
            } else {
                1.0
            },
        };
        let dz = 2.0 * (n_z - 1.0).max(0.0) * U;
        let abs = TINY * (n_z + 1.0);
        let xw = x.widen(dz + 2.0 * (n_g + 2.0) * U + F64_SLACK, abs);
        let yw = y.widen(dz + 2.0 * (n_l + 2.0) * U + F64_SLACK, abs);
        if xw.hi < p && yw.lo > theta {
            Status::In
        } else if xw.lo >= p && yw.hi <= theta {
            Status::Out
        } else {
            Status::Undecided
        }
    };
    let mut above_lo = 0.0f64;
    let mut above_hi = 0.0f64;
    let mut n_above = 0usize;
    let mut pos = 0;
    while pos < finite {
        if scratch[pos].cand == Status::Out {
            scratch[pos].top_p = Status::Out;
            pos += 1;
            continue;
        }
        // The cluster: the following possible candidates whose enclosures
        // overlap the previous one's (non-candidates skipped).
        let start = pos;
        let mut end = pos + 1;
        let mut last = pos;
        while end < finite {
            if scratch[end].cand == Status::Out {
                end += 1;
                continue;
            }
            if scratch[end].e.hi >= scratch[last].e.lo {
                last = end;
                end += 1;
            } else {
                break;
            }
        }
        let end = last + 1;
        let members = || scratch[start..end].iter().filter(|t| t.cand != Status::Out);
        let m = members().count();
        let sure_m = members().filter(|t| t.cand == Status::In).count();
        let min_lo = members().map(|t| t.e.lo).fold(f64::INFINITY, f64::min);
        let max_hi = members().map(|t| t.e.hi).fold(0.0, f64::max);
        let sure_max_hi = members()
            .filter(|t| t.cand == Status::In)
            .map(|t| t.e.hi)
            .fold(0.0, f64::max);
        let c_sure_lo: f64 = members()
            .filter(|t| t.cand == Status::In)
            .map(|t| t.e.lo)
            .sum();
        let c_poss_hi: f64 = members().map(|t| t.e.hi).sum();
        let from_lo = sure_lo - above_lo;
        let from_hi = poss_hi - above_hi;
        let at = |r: usize| -> Status {
            // The largest candidate is always kept (vLLM's `top_p_mask[:,
            // -1] = False`, Hugging Face's `min_tokens_to_keep`).
            if r == 0 && n_above == 0 {
                return Status::In;
            }
            if exact {
                let x = r as f64 / n_z;
                return if x < p { Status::In } else { Status::Out };
            }
            let rf = r as f64;
            let g = Enclosure {
                lo: above_lo + rf * min_lo,
                hi: above_hi + rf * max_hi,
            };
            let l = Enclosure {
                lo: (from_lo - (r.min(sure_m) as f64) * sure_max_hi).max(min_lo),
                hi: from_hi - rf * min_lo,
            };
            status(g, l, (n_above + r) as f64, (n_poss - n_above - r) as f64)
        };
        let counted =
            sure_m == m && members().all(|t| t.min_p == Status::In && t.top_k == Status::In);
        let mut n_in = 0;
        let mut n_possible = 0;
        for r in 0..m {
            match at(r) {
                Status::In => n_in += 1,
                Status::Undecided => n_possible += 1,
                Status::Out => {}
            }
        }
        n_possible += n_in;
        let first = at(0);
        // Equal logits are adjacent: the run of the current token and its
        // candidates.
        let (mut run_end, mut same) = (start, 0usize);
        for i in start..end {
            let (cand, logit) = (scratch[i].cand, scratch[i].logit);
            if i >= run_end {
                run_end = i;
                same = 0;
                while run_end < end && scratch[run_end].logit == logit {
                    same += usize::from(scratch[run_end].cand != Status::Out);
                    run_end += 1;
                }
            }
            if cand == Status::Out {
                continue;
            }
            // The most positions before this token within the cluster.
            let worst = match d.topp_ties {
                TopPTies::Order => m - 1,
                TopPTies::KeepAll => m - same,
            };
            let st = if first == Status::Out {
                Status::Out
            } else if at(worst) == Status::In {
                Status::In
            } else {
                Status::Undecided
            };
            let (lo, hi) = match d.topp_ties {
                TopPTies::Order => (n_in, n_possible),
                TopPTies::KeepAll => (n_in, if first == Status::Out { 0 } else { m }),
            };
            let t = &mut scratch[i];
            t.top_p = st;
            t.cluster = start;
            t.count_lo = lo;
            t.count_hi = hi;
            t.counted = counted;
        }
        above_lo += c_sure_lo;
        above_hi += c_poss_hi;
        n_above += m;
        pos = end;
    }
}

/// Judges a kernel's kept set (`kept[i]` for token `i` of the row)
/// against a row [`classify`] wrote: no surely removed token kept, no
/// surely kept one removed, the tied at the `k`-th value within top-k's
/// count ([`TopKTies::Exact`]), each top-p cluster's kept count within
/// its bounds, and under [`TopPTies::KeepAll`] equal logits kept alike.
///
/// Shapes: `scratch` and `kept` `V` long.
///
/// # Errors
/// The first [`KeptFault`] (by sorted position).
pub fn judge_kept(
    scratch: &[Token],
    row: &Row,
    d: &Declared,
    kept: &[bool],
) -> Result<(), KeptFault> {
    for t in scratch {
        let k = kept[t.index];
        if !t.logit.is_finite() {
            if k {
                return Err(KeptFault::Kept {
                    token: t.index,
                    rule: Rule::Masked,
                });
            }
            continue;
        }
        if k && t.kept == Status::Out {
            let rule = if t.min_p == Status::Out {
                Rule::MinP
            } else if t.top_k == Status::Out {
                Rule::TopK
            } else {
                Rule::TopP
            };
            return Err(KeptFault::Kept {
                token: t.index,
                rule,
            });
        }
        if !k && t.kept == Status::In {
            return Err(KeptFault::Removed { token: t.index });
        }
    }
    if let Some((start, len, r)) = row.tie {
        let n = scratch[start..start + len]
            .iter()
            .filter(|t| kept[t.index])
            .count();
        if n > r {
            return Err(KeptFault::TopKCount {
                kept: n,
                allowed: r,
            });
        }
    }
    let mut pos = 0;
    while pos < row.finite {
        let t = &scratch[pos];
        if t.cand == Status::Out || t.cluster != pos {
            pos += 1;
            continue;
        }
        let mut n = 0;
        let mut end = pos;
        while end < row.finite && (scratch[end].cand == Status::Out || scratch[end].cluster == pos)
        {
            if scratch[end].cand != Status::Out && kept[scratch[end].index] {
                n += 1;
            }
            end += 1;
        }
        if t.counted && (n < t.count_lo || n > t.count_hi) {
            return Err(KeptFault::NucleusCount {
                token: t.index,
                kept: n,
                lo: t.count_lo,
                hi: t.count_hi,
            });
        }
        if d.topp_ties == TopPTies::KeepAll && t.counted {
            // Equal logits are adjacent: one kept and one removed in a run.
            let (mut k_tok, mut r_tok) = (None, None);
            for (j, a) in scratch[pos..end].iter().enumerate() {
                if j > 0 && a.logit != scratch[pos + j - 1].logit {
                    (k_tok, r_tok) = (None, None);
                }
                if a.cand == Status::Out {
                    continue;
                }
                if kept[a.index] {
                    k_tok = Some(a.index);
                } else {
                    r_tok = Some(a.index);
                }
                if let (Some(token), Some(other)) = (k_tok, r_tok) {
                    return Err(KeptFault::SplitTie { token, other });
                }
            }
        }
        pos = end;
    }
    Ok(())
}

/// The sums over a kept set a renormalised output needs: the kept terms'
/// lower and upper ends and their count.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct KeptSums {
    /// Sum of the kept `e.lo`.
    pub lo: f64,
    /// Sum of the kept `e.hi`.
    pub hi: f64,
    /// Kept tokens.
    pub n: usize,
}

/// [`KeptSums`] of `kept` over a classified row.
pub fn kept_sums(scratch: &[Token], kept: &[bool]) -> KeptSums {
    let mut s = KeptSums::default();
    for t in scratch {
        if kept[t.index] && t.logit.is_finite() {
            s.lo += t.e.lo;
            s.hi += t.e.hi;
            s.n += 1;
        }
    }
    s
}

/// The enclosure of a kept token's renormalised probability `e_i / sum
/// over the kept of e_j` (the kernel's own kept set): increasing in
/// `e_i`, decreasing in the others, so its ends pair `e_i`'s ends with
/// the others' opposite ends; widened by the kept sum's `n - 1`
/// roundings, one division, and one more rounding for a kernel that
/// renormalises probabilities (FlashInfer's `*_renorm_probs`), doubled.
pub fn renorm_enclosure(t: &Token, sums: &KeptSums) -> Enclosure {
    let rest_lo = (sums.lo - t.e.lo).max(0.0);
    let rest_hi = (sums.hi - t.e.hi).max(0.0);
    let lo = t.e.lo / (t.e.lo + rest_hi);
    let hi = if t.e.hi + rest_lo > 0.0 {
        t.e.hi / (t.e.hi + rest_lo)
    } else {
        1.0
    };
    let lo = if lo.is_nan() { 0.0 } else { lo };
    let n = sums.n as f64;
    Enclosure { lo, hi }.widen(2.0 * ((n - 1.0).max(0.0) * U + 3.0 * U) + F64_SLACK, TINY)
}

/// Whether an output probability (bits of `dtype`, widened to 32) is a
/// value a kernel within the bound may write for a kept token:
/// [`admits`] of [`renorm_enclosure`], and not zero (zero is removal).
pub fn admits_renorm(t: &Token, sums: &KeptSums, dtype: Dtype, bits: u32) -> bool {
    dtype.decode(bits) != 0.0 && admits(renorm_enclosure(t, sums), dtype, bits)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const VLLM: Declared = Declared {
        order: Order::MinPFirst,
        topk_ties: TopKTies::KeepAll,
        topp_ties: TopPTies::Order,
        exp_ulps: 2,
    };

    fn filters(top_k: u32, top_p: f32, min_p: f32) -> Filters {
        Filters {
            temperature: 1.0,
            top_k,
            top_p,
            min_p,
        }
    }

    fn run(logits: &[f32], f: &Filters, d: &Declared) -> (Vec<Token>, Row) {
        let mut s = vec![Token::default(); logits.len()];
        let row = classify(logits, f, d, &mut s).unwrap();
        (s, row)
    }

    fn kept_set(s: &[Token], v: usize) -> Vec<bool> {
        let mut k = vec![false; v];
        for t in s {
            k[t.index] = t.kept == Status::In;
        }
        k
    }

    /// vLLM's `apply_top_k_top_p` and min-p in binary32: the mask.
    fn vllm(logits: &[f32], f: &Filters, lt: bool, no_shift: bool) -> Vec<bool> {
        let v = logits.len();
        let x: Vec<f32> = logits.iter().map(|&l| l / f.temperature).collect();
        let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let ex: Vec<f32> = x.iter().map(|&l| (l - m).exp()).collect();
        let z: f32 = ex.iter().sum();
        let p: Vec<f32> = ex.iter().map(|&e| e / z).collect();
        let pmax = p.iter().fold(0.0f32, |a, &b| a.max(b));
        let mut keep: Vec<bool> = (0..v)
            .map(|i| x[i].is_finite() && p[i] >= f.min_p * pmax)
            .collect();
        let mut order: Vec<usize> = (0..v).collect();
        order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
        let k = f.top_k as usize;
        if k > 0 && k < v {
            let kth = x[order[v - k]];
            for i in 0..v {
                keep[i] &= x[i] >= kth;
            }
        }
        let live: Vec<usize> = order.iter().copied().filter(|&i| keep[i]).collect();
        let ex2: Vec<f32> = live.iter().map(|&i| (x[i] - m).exp()).collect();
        let z2: f32 = ex2.iter().sum();
        let mut cum = 0.0f32;
        let thr = 1.0 - f.top_p;
        let n = live.len();
        for (j, &i) in live.iter().enumerate() {
            let before = cum;
            cum += ex2[j] / z2;
            let c = if no_shift { before } else { cum };
            let masked = if lt { c < thr } else { c <= thr };
            if masked && j + 1 < n {
                keep[i] = false;
            }
        }
        keep
    }

    use crate::test_gen::Gen;

    #[test]
    fn binary32_vllm_passes_and_is_mostly_decided() {
        let mut g = Gen(5);
        let mut decided = 0;
        for case in 0..300 {
            let v = [7usize, 64, 129, 1000][case % 4];
            let logits: Vec<f32> = (0..v).map(|_| g.f(6.0)).collect();
            let f = Filters {
                temperature: [1.0, 0.7, 1.3][case % 3],
                top_k: [0u32, 1, 5, 50][case / 4 % 4],
                top_p: [1.0f32, 0.9, 0.5, 0.05][case / 16 % 4],
                min_p: [0.0f32, 0.05][case / 64 % 2],
            };
            let (s, row) = run(&logits, &f, &VLLM);
            let k = vllm(&logits, &f, false, false);
            assert_eq!(judge_kept(&s, &row, &VLLM, &k), Ok(()), "case {case}");
            decided += usize::from(row.decided);
        }
        assert!(decided > 250, "{decided}");
    }

    #[test]
    fn flat_rows_are_exact_and_judge_the_comparison() {
        // 8 equal logits and one masked: p = 1/8 exactly; top_p = 0.5 keeps 4.
        let mut logits = vec![0.25f32; 9];
        logits[3] = f32::NEG_INFINITY;
        let f = filters(0, 0.5, 0.0);
        let (s, row) = run(&logits, &f, &VLLM);
        assert!(row.exact);
        assert_eq!(s[0].count_lo, 4);
        assert_eq!(s[0].count_hi, 4);
        assert_eq!(
            judge_kept(&s, &row, &VLLM, &vllm(&logits, &f, false, false)),
            Ok(())
        );
        let lt = vllm(&logits, &f, true, false);
        assert_eq!(lt.iter().filter(|&&b| b).count(), 5);
        assert!(matches!(
            judge_kept(&s, &row, &VLLM, &lt),
            Err(KeptFault::NucleusCount { kept: 5, .. })
        ));
        assert!(judge_kept(&s, &row, &VLLM, &vllm(&logits, &f, false, true)).is_err());
        // Keep-all ties (a threshold) keeps all 8.
        let th = Declared {
            topp_ties: TopPTies::KeepAll,
            ..VLLM
        };
        let (s2, row2) = run(&logits, &f, &th);
        let all: Vec<bool> = logits.iter().map(|l| l.is_finite()).collect();
        assert_eq!(judge_kept(&s2, &row2, &th, &all), Ok(()));
        assert!(judge_kept(&s, &row, &VLLM, &all).is_err());
    }

    #[test]
    fn top_k_ties_follow_the_declaration() {
        let logits = [3.0f32, 2.0, 2.0, 2.0, 1.0, 0.0];
        let f = filters(2, 1.0, 0.0);
        let (s, row) = run(&logits, &f, &VLLM);
        let keep_all = [true, true, true, true, false, false];
        let exact = [true, true, false, false, false, false];
        assert_eq!(judge_kept(&s, &row, &VLLM, &keep_all), Ok(()));
        assert!(matches!(
            judge_kept(&s, &row, &VLLM, &exact),
            Err(KeptFault::Removed { token: 2 })
        ));
        let ex = Declared {
            topk_ties: TopKTies::Exact,
            ..VLLM
        };
        let (s, row) = run(&logits, &f, &ex);
        assert_eq!(judge_kept(&s, &row, &ex, &exact), Ok(()));
        assert_eq!(
            judge_kept(&s, &row, &ex, &[true, false, false, true, false, false]),
            Ok(())
        );
        assert!(matches!(
            judge_kept(&s, &row, &ex, &keep_all),
            Err(KeptFault::TopKCount {
                kept: 3,
                allowed: 1
            })
        ));
    }

    #[test]
    fn min_p_is_relative_to_the_maximum() {
        // p ratios 1, e^-1 = 0.37, e^-3 = 0.05.
        let logits = [0.0f32, -1.0, -3.0];
        let f = filters(0, 1.0, 0.2);
        let (s, row) = run(&logits, &f, &VLLM);
        assert_eq!(kept_set(&s, 3), [true, true, false]);
        assert!(row.decided);
        assert!(matches!(
            judge_kept(&s, &row, &VLLM, &[true, true, true]),
            Err(KeptFault::Kept {
                token: 2,
                rule: Rule::MinP
            })
        ));
    }

    /// vLLM's GPU worker's min-p in logit space (`_min_p_torch`,
    /// `vllm/v1/worker/gpu/sample/min_p.py`): removed iff `s_i < max +
    /// log(min_p)`, in binary32.
    fn min_p_logit_space(logits: &[f32], min_p: f32) -> Vec<bool> {
        let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let thr = m + min_p.ln();
        logits.iter().map(|&l| l.is_finite() && l >= thr).collect()
    }

    #[test]
    fn min_p_in_logit_space_passes() {
        // A large maximum: the threshold m + ln(0.2) rounds up by about
        // 33u relative (in ulps of 35.7), more than the probability
        // form's three roundings; the token at the threshold is kept.
        let (m, s) = (35.740_43f32, 34.130_99f32);
        let f = filters(0, 1.0, 0.2);
        let logits = [m, s, 0.0];
        assert_eq!(min_p_logit_space(&logits, 0.2), [true, true, false]);
        let (sc, row) = run(&logits, &f, &VLLM);
        assert_eq!(
            judge_kept(&sc, &row, &VLLM, &min_p_logit_space(&logits, 0.2)),
            Ok(())
        );
        // Tokens one ulp either side of the threshold, many maxima.
        let mut g = Gen(11);
        for case in 0..4000 {
            let m = g.f(60.0);
            let min_p = [0.05f32, 0.1, 0.2, 0.01, 0.3, 1e-4][case % 6];
            let thr = m + min_p.ln();
            let below = f32::from_bits(thr.to_bits() - 1);
            let above = f32::from_bits(thr.to_bits() + 1);
            let logits = [m, thr, below, above, m - 40.0];
            let keep = min_p_logit_space(&logits, min_p);
            let f = filters(0, 1.0, min_p);
            let (sc, row) = run(&logits, &f, &VLLM);
            assert_eq!(judge_kept(&sc, &row, &VLLM, &keep), Ok(()), "case {case}");
            // Still decided a little away from the threshold.
            let far = [
                m,
                thr + 1e-3 * thr.abs().max(1.0),
                thr - 1e-3 * thr.abs().max(1.0),
            ];
            let (sc, _) = run(&far, &f, &VLLM);
            assert_eq!(kept_set(&sc, 3), [true, true, false], "case {case}");
        }
    }

    #[test]
    fn the_order_chooses_top_ps_candidates() {
        // Probabilities about 0.47, 0.17, 0.17, 0.17, 0.02 (logits 2, 1, 1, 1, -1).
        let logits = [2.0f32, 1.0, 1.0, 1.0, -1.0];
        // Top-k 1 then top-p: only token 0. Joint: top-p of the full row
        // keeps more, but top-k intersects to token 0 too.
        let f = filters(2, 0.6, 0.0);
        for order in [Order::MinPFirst, Order::MinPLast, Order::Joint] {
            let d = Declared { order, ..VLLM };
            let (s, row) = run(&logits, &f, &d);
            let k = kept_set(&s, 5);
            assert!(k[0] && !k[4], "{order:?}");
            let _ = row;
        }
        // min-p before top-p shrinks the nucleus's normaliser: min_p 0.3
        // removes token 4; with top_p 0.98 the candidates {0..3} keep all 4
        // either way, but token 4 is removed by min-p in every order.
        let f = filters(0, 0.98, 0.3);
        for order in [Order::MinPFirst, Order::MinPLast, Order::Joint] {
            let d = Declared { order, ..VLLM };
            let (s, _) = run(&logits, &f, &d);
            assert_eq!(kept_set(&s, 5), [true, true, true, true, false]);
        }
    }

    #[test]
    fn renormalised_values_are_enclosed() {
        let logits = [1.0f32, 0.5, -2.0, 0.0];
        let f = filters(3, 1.0, 0.0);
        let (s, _) = run(&logits, &f, &VLLM);
        let kept = kept_set(&s, 4);
        assert_eq!(kept, [true, true, false, true]);
        let sums = kept_sums(&s, &kept);
        let e: Vec<f32> = [1.0f32, 0.5, 0.0]
            .iter()
            .map(|&l| (l - 1.0).exp())
            .collect();
        let z: f32 = e.iter().sum();
        for t in &s {
            if kept[t.index] {
                let j = [0usize, 1, 9, 2][t.index];
                let q = e[j] / z;
                assert!(admits_renorm(t, &sums, Dtype::F32, q.to_bits()));
                assert!(!admits_renorm(t, &sums, Dtype::F32, (q * 1.001).to_bits()));
            }
        }
    }

    #[test]
    fn validation() {
        let mut s = vec![Token::default(); 2];
        assert_eq!(
            classify(&[f32::NEG_INFINITY; 2], &Filters::OFF, &VLLM, &mut s),
            Err(SamplingError::Empty)
        );
        assert_eq!(
            classify(&[0.0, f32::NAN], &Filters::OFF, &VLLM, &mut s),
            Err(SamplingError::NotFinite { token: 1 })
        );
        let bad = Filters {
            temperature: 0.0,
            ..Filters::OFF
        };
        assert!(matches!(
            classify(&[0.0, 1.0], &bad, &VLLM, &mut s),
            Err(SamplingError::Parameter { .. })
        ));
        assert!(matches!(
            classify(&[0.0], &Filters::OFF, &VLLM, &mut s),
            Err(SamplingError::Length { .. })
        ));
    }
}
