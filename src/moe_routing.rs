//! Cases for judging an MoE router's top-k kernel (vLLM's `topk_softmax`
//! and `grouped_topk`, SGLang's `biased_grouped_topk`, a torch or Triton
//! router) against [`oracle::moe_routing`]: the chosen experts exact
//! wherever the scores' enclosures separate, the weights within theirs,
//! and the known routings its output is consistent with named.
//!
//! A case (elements, row-major): `logits [T][E]` in the gating output's
//! dtype (held as the `f32` of each value) and, when the routing has one,
//! `bias [E]` (binary32). The kernel returns `ids [T][k]` and `weights
//! [T][k]`.

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::moe_routing::{
    admits, judge_selection, score_enclosures, validate, weight_enclosure, Enclosure, GroupScore,
    Grouping, Routing, Scoring, SelectionFault,
};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal logits (standard deviation 2; one token in four 0.1, where
    /// the experts' probabilities lie within a few percent of each other,
    /// so a kernel that ranks them rounded to bfloat16 merges and
    /// misorders them) and, with a bias, a bias of magnitude up to 0.05:
    /// the scoring, the top-k, the weights' renormalisation and factor.
    Rand,
    /// Logits (and biases) from three values only, so most tokens have
    /// exact ties at the k-th place: a kernel that picks one expert twice,
    /// leaves a slot unwritten or splits tied weights unevenly fails;
    /// which of the tied it picks is free.
    Ties,
    /// Softmax: every logit of a token shifted by the same 81 to 95 (the
    /// softmax is unchanged), one expert at the shift plus 8 and the rest
    /// below the shift plus 7.5, so a kernel that exponentiates without
    /// subtracting the maximum overflows on every token (`exp(89) = inf`).
    /// Sigmoid: logits over `[-30, 30]`, most far negative, where scores
    /// are tiny and renormalised weights large, and one expert in eight
    /// at 89 to 100, where `e^l / (1 + e^l)` overflows (its score is 1:
    /// ties among them are free).
    Skew,
    /// Run with a bias only: the bias pushes the experts of largest score
    /// below others (by more than their gaps), so a kernel that chooses by
    /// the unbiased score, or weights by the biased one, fails; and every
    /// bias is shifted by -2, or on one seed in two by -12 (a uniform
    /// shift changes no choice), so every selection score is negative and
    /// a kernel that masks the groups not kept with 0 instead of `-inf`
    /// (Hugging Face's DeepSeek-V3 `MoEGate` writes `masked_fill(...,
    /// 0.0)`) chooses from them; under sigmoid one token in four has
    /// logits of -16 to -20, scores far under a bias's ulp at 12, so a
    /// kernel that recovers the score as `(s + b) - b` (FlashInfer PR
    /// 3875) weights them 0 (or NaN, renormalized).
    Bias,
    /// Run with groups only: half the groups hold one high expert, half two
    /// slightly lower ones (logits 3 and 1.5 for sigmoid scores, 3 and
    /// 2.625 for softmax's `e^l`), so a maximum and a top-2 sum keep
    /// different groups, and the overall top k spans more groups than are
    /// kept.
    Groups,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 5] = [Arm::Rand, Arm::Ties, Arm::Skew, Arm::Bias, Arm::Groups];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Ties => "TIES",
            Arm::Skew => "SKEW",
            Arm::Bias => "BIAS",
            Arm::Groups => "GROUPS",
        }
    }

    /// The arm named `s` (case-insensitive).
    ///
    /// # Errors
    /// The names, when `s` is none of them.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// Whether the arm applies to a routing (BIAS needs a bias, GROUPS
    /// groups).
    pub fn runs_on(self, routing: &Routing, bias: bool) -> bool {
        match self {
            Arm::Bias => bias,
            Arm::Groups => routing.grouping.is_some(),
            _ => true,
        }
    }
}

/// The most logits a case has (`T E`; 16 MiB of f32).
pub const MAX_LOGITS: usize = 1 << 22;

/// `(tokens, num_experts)`.
pub type Dims = (usize, usize);

/// The routing's parameters checked against `d` and the caps.
///
/// # Errors
/// [`oracle::moe_routing::validate`]'s error, or a case over
/// [`MAX_LOGITS`], as a sentence.
pub fn within_caps(d: Dims, routing: &Routing) -> Result<(), String> {
    validate(routing, d.1).map_err(|e| format!("{d:?}: {e:?}"))?;
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
    /// `(tokens, num_experts)`.
    pub dims: Dims,
    /// The declared routing.
    pub routing: Routing,
    /// Whether the routing adds a bias.
    pub bias: bool,
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
    /// `[T][E]`, the dtype's values.
    pub logits: Vec<f32>,
    /// `[E]` or none.
    pub bias: Option<Vec<f32>>,
}

impl Spec {
    /// The default seed of a shape, dtype and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x0707_0E5C_0000_0000u64, &[d.0, d.1]);
        let idx = Dtype::ALL.iter().position(|&y| y == dtype).unwrap_or(0) as u64;
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ (idx << 8) ^ arm
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`within_caps`]; an arm that does not apply to the routing.
    pub fn generate(&self) -> Result<Case, String> {
        within_caps(self.dims, &self.routing)?;
        if !self.arm.runs_on(&self.routing, self.bias) {
            return Err(format!(
                "arm {} needs {}",
                self.arm.name(),
                if self.arm == Arm::Bias {
                    "a bias"
                } else {
                    "groups"
                }
            ));
        }
        let (t_n, e) = self.dims;
        let mut rng = Rng(self.seed);
        let r = &self.routing;
        let round = |x: f32| self.dtype.round(x);
        let mut logits = vec![0f32; t_n * e];
        let mut bias = self.bias.then(|| vec![0f32; e]);
        match self.arm {
            Arm::Rand => {
                for (t, row) in logits.chunks_mut(e).enumerate() {
                    let sd = if t % 4 == 3 { 0.1 } else { 2.0 };
                    row.iter_mut().for_each(|x| *x = round(sd * rng.normal()));
                }
                if let Some(b) = bias.as_mut() {
                    b.iter_mut().for_each(|x| *x = 0.1 * rng.f01() - 0.05);
                }
            }
            Arm::Ties => {
                let values = [0.5f32, 1.0, 1.5];
                logits.iter_mut().for_each(|x| *x = values[rng.below(3)]);
                if let Some(b) = bias.as_mut() {
                    b.iter_mut().for_each(|x| *x = [0.0, 0.125][rng.below(2)]);
                }
            }
            Arm::Skew => {
                for row in logits.chunks_mut(e) {
                    match r.scoring {
                        Scoring::Softmax => {
                            let shift = 81.0 + 14.0 * rng.f01();
                            let top = rng.below(e);
                            for (j, x) in row.iter_mut().enumerate() {
                                let v = if j == top { 8.0 } else { 2.0 * rng.normal() };
                                *x = round(shift + v.min(7.5));
                            }
                            row[top] = round(shift + 8.0);
                        }
                        Scoring::Sigmoid => {
                            for x in row.iter_mut() {
                                let v = match rng.below(8) {
                                    0 => 89.0 + 11.0 * rng.f01(),
                                    1 | 2 => 60.0 * rng.f01() - 30.0,
                                    _ => -20.0 - 10.0 * rng.f01(),
                                };
                                *x = round(v);
                            }
                        }
                    }
                }
                if let Some(b) = bias.as_mut() {
                    b.iter_mut().for_each(|x| *x = 0.1 * rng.f01() - 0.05);
                }
            }
            Arm::Bias => {
                // One token in four (sigmoid): logits of -16 to -20, scores
                // of 1e-7 to 2e-9, far under the bias's ulp.
                for (t, row) in logits.chunks_mut(e).enumerate() {
                    let low = t % 4 == 1 && r.scoring == Scoring::Sigmoid;
                    for x in row.iter_mut() {
                        *x = round(if low {
                            -18.0 + 2.0 * rng.f01() * if rng.below(2) == 0 { 1.0 } else { -1.0 }
                        } else {
                            2.0 * rng.normal()
                        });
                    }
                }
                // Every bias shifted by -2, or (one seed in two) by -12,
                // where a bias's ulp is 2^-20: a kernel that recovers the
                // score as `(s + b) - b` loses its low bits there.
                let shift = if rng.below(2) == 0 { -2.0 } else { -12.0 };
                // One bias for all tokens: the experts whose scores lead most
                // often (their mean logit) pushed down, the trailing ones up,
                // by more than a score's range.
                let mut mean = vec![0f64; e];
                for row in logits.chunks(e) {
                    for (m, &x) in mean.iter_mut().zip(row) {
                        *m += f64::from(x);
                    }
                }
                let mut order: Vec<usize> = (0..e).collect();
                order.sort_by(|&a, &b| mean[b].total_cmp(&mean[a]));
                let b = bias.as_mut().expect("runs_on: a bias");
                let k = r.top_k.min(e / 2).max(1);
                for (rank, &j) in order.iter().enumerate() {
                    b[j] = if rank < k {
                        -0.5 - 0.25 * rng.f01()
                    } else if rank >= e - k {
                        0.5 + 0.25 * rng.f01()
                    } else {
                        0.1 * rng.f01() - 0.05
                    } + shift;
                }
            }
            Arm::Groups => {
                let g = r.grouping.expect("runs_on: groups");
                let size = e / g.n_group;
                // Spike 3 against a pair: sigmoid(3) > sigmoid(1.5) but
                // 2 sigmoid(1.5) > sigmoid(3) + sigmoid(-3); e^3 > e^2.625
                // but 2 e^2.625 > e^3 (with the jitter of 0.1 too).
                let pair = match r.scoring {
                    Scoring::Sigmoid => 1.5,
                    Scoring::Softmax => 2.625,
                };
                for row in logits.chunks_mut(e) {
                    let mut kinds: Vec<bool> = (0..g.n_group).map(|i| i % 2 == 0).collect();
                    for i in (1..kinds.len()).rev() {
                        kinds.swap(i, rng.below(i + 1));
                    }
                    for (grp, spike) in row.chunks_mut(size).zip(kinds) {
                        let a = rng.below(size);
                        let b = if size > 1 {
                            (a + 1 + rng.below(size - 1)) % size
                        } else {
                            a
                        };
                        for (j, x) in grp.iter_mut().enumerate() {
                            let high = if spike {
                                (j == a).then_some(3.0)
                            } else {
                                (j == a || j == b).then_some(pair)
                            };
                            *x = round(high.unwrap_or(-3.0) + 0.2 * rng.f01() - 0.1);
                        }
                    }
                }
                if let Some(b) = bias.as_mut() {
                    b.iter_mut().for_each(|x| *x = 0.02 * rng.f01() - 0.01);
                }
            }
        }
        Ok(Case { logits, bias })
    }
}

/// What one token's judgement found.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The ids break rule `ROUTE-TOPK` or `ROUTE-GROUP`.
    Selection(SelectionFault),
    /// A weight outside its enclosure (rule `ROUTE-WEIGHT`).
    Weight {
        /// The slot.
        slot: usize,
        /// The weight's bits (its dtype's, widened to 32).
        got: u32,
        /// Its enclosure.
        want: Enclosure,
    },
}

/// A case's judgement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Tokens judged.
    pub tokens: usize,
    /// Tokens whose choice the enclosures decide (one set of experts
    /// only): their ids were compared exactly, as a set.
    pub decided: usize,
    /// Tokens that failed.
    pub failed: usize,
    /// The first faults, `(token, fault)`, at most eight.
    pub faults: Vec<(usize, Fault)>,
}

impl Verdict {
    /// No token failed.
    pub fn pass(&self) -> bool {
        self.failed == 0
    }
}

/// Whether the choice of `k` experts is decided by the enclosures: the
/// candidates (after a decided group choice) that surely rank in the top
/// `k` are exactly `k`.
fn decided(select: &[Enclosure], routing: &Routing) -> bool {
    let surely_top = |encs: &[Enclosure], idx: &[usize], k: usize| -> Option<Vec<usize>> {
        let sure: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&a| {
                idx.iter()
                    .filter(|&&b| b != a && encs[b].hi >= encs[a].lo)
                    .count()
                    < k
            })
            .collect();
        (sure.len() == k).then_some(sure)
    };
    let e = select.len();
    let candidates: Vec<usize> = match routing.grouping {
        None => (0..e).collect(),
        Some(g) => {
            let groups: Vec<Enclosure> = (0..g.n_group)
                .map(|i| oracle::moe_routing::group_enclosure(select, &g, i))
                .collect();
            let all: Vec<usize> = (0..g.n_group).collect();
            let Some(kept) = surely_top(&groups, &all, g.topk_group) else {
                return false;
            };
            let size = e / g.n_group;
            kept.iter()
                .flat_map(|&i| i * size..(i + 1) * size)
                .collect()
        }
    };
    surely_top(select, &candidates, routing.top_k).is_some()
}

/// Judges a kernel's `ids [T][k]` and `weights [T][k]` (bits of
/// `wdtype`, widened to 32) against the routing, tokens in parallel.
///
/// # Errors
/// Outputs of the wrong length; the case's data refused by core.
pub fn judge(
    spec: &Spec,
    case: &Case,
    sorted: bool,
    ids: &[i64],
    weights: &[u32],
    wdtype: Dtype,
) -> Result<Verdict, String> {
    let (t_n, e) = spec.dims;
    let k = spec.routing.top_k;
    if ids.len() != t_n * k || weights.len() != t_n * k {
        return Err(format!(
            "ids and weights hold {} and {} elements, the shape [{t_n}][{k}] needs {}",
            ids.len(),
            weights.len(),
            t_n * k
        ));
    }
    let r = &spec.routing;
    let per_token: Vec<Result<(bool, Option<Fault>), String>> = (0..t_n)
        .into_par_iter()
        .map(|t| {
            let mut p = vec![Enclosure::default(); e];
            let mut s = p.clone();
            let row = &case.logits[t * e..(t + 1) * e];
            score_enclosures(row, case.bias.as_deref(), r, &mut p, &mut s)
                .map_err(|err| format!("token {t}: {err:?}"))?;
            let dec = decided(&s, r);
            let tid = &ids[t * k..(t + 1) * k];
            if let Err(f) = judge_selection(tid, &s, r, sorted) {
                return Ok((dec, Some(Fault::Selection(f))));
            }
            for slot in 0..k {
                let want = weight_enclosure(tid, slot, &p, r);
                let got = weights[t * k + slot];
                if !admits(want, wdtype, got) {
                    return Ok((dec, Some(Fault::Weight { slot, got, want })));
                }
            }
            Ok((dec, None))
        })
        .collect();
    let mut v = Verdict {
        tokens: t_n,
        ..Verdict::default()
    };
    for (t, res) in per_token.into_iter().enumerate() {
        let (dec, fault) = res?;
        v.decided += usize::from(dec);
        if let Some(f) = fault {
            v.failed += 1;
            if v.faults.len() < 8 {
                v.faults.push((t, f));
            }
        }
    }
    Ok(v)
}

/// One fault as a sentence: which token, which rule, the witness.
pub fn describe(t: usize, f: &Fault, wdtype: Dtype) -> String {
    match f {
        Fault::Selection(SelectionFault::OutOfRange { slot, id }) => {
            format!("token {t} slot {slot}: id {id} is not an expert (ROUTE-TOPK)")
        }
        Fault::Selection(SelectionFault::Duplicate { slot, id }) => {
            format!("token {t} slot {slot}: expert {id} chosen twice (ROUTE-TOPK)")
        }
        Fault::Selection(SelectionFault::TooManyGroups { touched }) => {
            format!("token {t}: experts of groups {touched:#b} chosen, more than topk_group (ROUTE-GROUP)")
        }
        Fault::Selection(SelectionFault::Groups { touched }) => format!(
            "token {t}: the groups {touched:#b} of the chosen experts are not among the top groups (ROUTE-GROUP)"
        ),
        Fault::Selection(SelectionFault::Outranked {
            slot,
            chosen,
            missed,
        }) => format!(
            "token {t} slot {slot}: expert {chosen} chosen while expert {missed}, whose score surely exceeds it, was not (ROUTE-TOPK)"
        ),
        Fault::Selection(SelectionFault::Order { slot }) => format!(
            "token {t} slot {slot}: declared sorted, but its score surely exceeds an earlier slot's (ROUTE-TOPK)"
        ),
        Fault::Weight { slot, got, want } => format!(
            "token {t} slot {slot}: weight {:e} ({got:#x}) outside [{:e}, {:e}] (ROUTE-WEIGHT)",
            wdtype.decode(*got),
            want.lo,
            want.hi
        ),
    }
}

/// The routings identification tries: the declared one's `top_k`,
/// groups (each group score) and factor, under each scoring, with and
/// without renormalisation.
pub fn known(declared: &Routing) -> Vec<Routing> {
    let mut out = Vec::new();
    for scoring in [Scoring::Softmax, Scoring::Sigmoid] {
        for renormalize in [true, false] {
            let scores: Vec<Option<Grouping>> = match declared.grouping {
                None => vec![None],
                Some(g) => [GroupScore::Max, GroupScore::Top2Sum]
                    .into_iter()
                    .map(|score| Some(Grouping { score, ..g }))
                    .collect(),
            };
            for grouping in scores {
                out.push(Routing {
                    scoring,
                    renormalize,
                    grouping,
                    ..*declared
                });
            }
        }
    }
    out
}

/// `"sigmoid, top2-sum groups 8/4, renormalized"`.
pub fn label(r: &Routing) -> String {
    let scoring = match r.scoring {
        Scoring::Softmax => "softmax",
        Scoring::Sigmoid => "sigmoid",
    };
    let groups = match r.grouping {
        None => String::new(),
        Some(g) => format!(
            ", {} groups {}/{}",
            match g.score {
                GroupScore::Max => "max",
                GroupScore::Top2Sum => "top2-sum",
            },
            g.n_group,
            g.topk_group
        ),
    };
    let renorm = if r.renormalize {
        "renormalized"
    } else {
        "not renormalized"
    };
    format!("{scoring}{groups}, {renorm}")
}

/// Every known routing (see [`known`]) the kernel's output is consistent
/// with, unsorted.
///
/// # Errors
/// As [`judge`].
pub fn identify(
    spec: &Spec,
    case: &Case,
    ids: &[i64],
    weights: &[u32],
    wdtype: Dtype,
) -> Result<Vec<Routing>, String> {
    let mut found = Vec::new();
    for r in known(&spec.routing) {
        let sp = Spec {
            routing: r,
            ..*spec
        };
        if judge(&sp, case, false, ids, weights, wdtype)?.pass() {
            found.push(r);
        }
    }
    Ok(found)
}

/// One token's choice and weights in binary32 from its scores `p` (rules
/// `ROUTE-SCORE` to `ROUTE-WEIGHT` as a kernel writes them): `s = p + b`,
/// groups by their maximum or top-2 sum, the top `k` by `s` in descending
/// order (ties to the lower index), the weights `p` summed in slot order,
/// divided and scaled. Writes `ids` and `weights` (`k` long each).
pub fn choose(r: &Routing, p: &[f32], bias: Option<&[f32]>, ids: &mut [i64], weights: &mut [f32]) {
    let e = p.len();
    let s: Vec<f32> = match bias {
        None => p.to_vec(),
        Some(b) => p.iter().zip(b).map(|(&x, &y)| x + y).collect(),
    };
    let mut cand: Vec<usize> = (0..e).collect();
    if let Some(g) = r.grouping {
        let size = e / g.n_group;
        let gs: Vec<f32> = (0..g.n_group)
            .map(|i| {
                let mut v: Vec<f32> = s[i * size..(i + 1) * size].to_vec();
                v.sort_by(|a, b| b.total_cmp(a));
                match g.score {
                    GroupScore::Max => v[0],
                    GroupScore::Top2Sum => v[0] + v[1],
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..g.n_group).collect();
        order.sort_by(|a, b| gs[*b].total_cmp(&gs[*a]).then(a.cmp(b)));
        cand = order[..g.topk_group]
            .iter()
            .flat_map(|&i| i * size..(i + 1) * size)
            .collect();
    }
    cand.sort_by(|a, b| s[*b].total_cmp(&s[*a]).then(a.cmp(b)));
    let chosen = &cand[..r.top_k];
    let sum: f32 = chosen.iter().map(|&j| p[j]).sum();
    for (slot, &j) in chosen.iter().enumerate() {
        ids[slot] = j as i64;
        let w = if r.renormalize { p[j] / sum } else { p[j] };
        weights[slot] = w * r.routed_scaling_factor;
    }
}

/// A reference kernel in binary32 (the tests' and the fuzzers' correct
/// form): scores by this crate's `exp` (a two-pass softmax summed in
/// order, or `1 / (1 + exp(-l))`), then [`choose`].
pub fn reference(spec: &Spec, case: &Case) -> (Vec<i64>, Vec<f32>) {
    let (t_n, e) = spec.dims;
    let r = &spec.routing;
    let k = r.top_k;
    let exp = oracle::gdn::transcendental::exp;
    let mut ids = vec![0i64; t_n * k];
    let mut weights = vec![0f32; t_n * k];
    for t in 0..t_n {
        let row = &case.logits[t * e..(t + 1) * e];
        let p: Vec<f32> = match r.scoring {
            Scoring::Softmax => {
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                let ex: Vec<f32> = row.iter().map(|&l| exp(l - m)).collect();
                let s: f32 = ex.iter().sum();
                ex.iter().map(|&x| x / s).collect()
            }
            Scoring::Sigmoid => row.iter().map(|&l| 1.0 / (1.0 + exp(-l))).collect(),
        };
        let (i, w) = (
            &mut ids[t * k..(t + 1) * k],
            &mut weights[t * k..(t + 1) * k],
        );
        choose(r, &p, case.bias.as_deref(), i, w);
    }
    (ids, weights)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routing(scoring: Scoring, top_k: usize, grouping: Option<Grouping>) -> Routing {
        Routing {
            scoring,
            top_k,
            grouping,
            renormalize: true,
            routed_scaling_factor: 1.0,
            exp_ulps: 2,
        }
    }

    fn deepseek_v3() -> Routing {
        Routing {
            routed_scaling_factor: 2.5,
            ..routing(
                Scoring::Sigmoid,
                8,
                Some(Grouping {
                    n_group: 8,
                    topk_group: 4,
                    score: GroupScore::Top2Sum,
                }),
            )
        }
    }

    fn spec(routing: Routing, bias: bool, arm: Arm, dims: Dims) -> Spec {
        Spec {
            dims,
            routing,
            bias,
            dtype: Dtype::Bf16,
            arm,
            seed: Spec::base_seed(dims, Dtype::Bf16, arm),
        }
    }

    fn f32_bits(w: &[f32]) -> Vec<u32> {
        w.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn the_reference_passes_every_arm_and_most_tokens_are_decided() {
        let mixtral = routing(Scoring::Softmax, 2, None);
        for (r, bias, dims) in [
            (mixtral, false, (64, 8)),
            (routing(Scoring::Softmax, 8, None), false, (33, 128)),
            (deepseek_v3(), true, (33, 256)),
        ] {
            for arm in Arm::ALL.into_iter().filter(|a| a.runs_on(&r, bias)) {
                let sp = spec(r, bias, arm, dims);
                let case = sp.generate().unwrap();
                let (ids, w) = reference(&sp, &case);
                let v = judge(&sp, &case, true, &ids, &f32_bits(&w), Dtype::F32).unwrap();
                assert!(v.pass(), "{arm:?} {dims:?}: {:?}", v.faults);
                // SKEW's bf16 logits near 64-90 are 0.5 apart: ties; it
                // is there for the overflow.
                if arm == Arm::Skew {
                    assert!(v.decided > 0);
                } else if arm != Arm::Ties {
                    assert!(
                        v.decided * 10 >= v.tokens * 9,
                        "{arm:?} {dims:?}: {} of {}",
                        v.decided,
                        v.tokens
                    );
                } else {
                    assert!(v.decided < v.tokens, "TIES leaves choices open");
                }
            }
        }
    }

    /// A planted bug: edits a correct router's ids and weights.
    type Bug<'a> = &'a dyn Fn(&Spec, &Case, &mut Vec<i64>, &mut Vec<f32>);

    #[test]
    fn planted_bugs_fail() {
        let r = deepseek_v3();
        let dims = (33, 256);
        let run = |arm: Arm, bug: Bug| {
            let sp = spec(r, true, arm, dims);
            let case = sp.generate().unwrap();
            let (mut ids, mut w) = reference(&sp, &case);
            bug(&sp, &case, &mut ids, &mut w);
            judge(&sp, &case, false, &ids, &f32_bits(&w), Dtype::F32)
                .unwrap()
                .pass()
        };
        // The bias ignored in the choice.
        assert!(!run(Arm::Bias, &|sp, case, ids, w| {
            let unbiased = Case {
                bias: Some(vec![0.0; 256]),
                ..case.clone()
            };
            (*ids, *w) = reference(sp, &unbiased);
        }));
        // Weights from the biased scores.
        assert!(!run(Arm::Rand, &|sp, case, _ids, w| {
            let mut sp2 = *sp;
            sp2.routing.renormalize = false;
            let (i2, w2) = reference(&sp2, case);
            let b = case.bias.as_ref().unwrap();
            let biased: Vec<f32> = w2
                .iter()
                .zip(&i2)
                .map(|(x, &j)| x / 2.5 + b[j as usize])
                .collect();
            for t in 0..sp.dims.0 {
                let row = &biased[t * 8..t * 8 + 8];
                let s: f32 = row.iter().sum();
                for j in 0..8 {
                    w[t * 8 + j] = row[j] / s * 2.5;
                }
            }
        }));
        // Max instead of the top-2 sum.
        assert!(!run(Arm::Groups, &|sp, case, ids, w| {
            let mut sp2 = *sp;
            sp2.routing.grouping = Some(Grouping {
                score: GroupScore::Max,
                ..sp.routing.grouping.unwrap()
            });
            (*ids, *w) = reference(&sp2, case);
        }));
        // No group limit.
        assert!(!run(Arm::Groups, &|sp, case, ids, w| {
            let mut sp2 = *sp;
            sp2.routing.grouping = None;
            (*ids, *w) = reference(&sp2, case);
        }));
        // Not renormalised, the factor twice, a duplicate id.
        assert!(!run(Arm::Rand, &|_, _, _, w| w
            .iter_mut()
            .for_each(|x| *x /= 2.5)));
        assert!(!run(Arm::Rand, &|_, _, _, w| w
            .iter_mut()
            .for_each(|x| *x *= 2.5)));
        assert!(!run(Arm::Ties, &|_, _, ids, _| ids[1] = ids[0]));
    }

    #[test]
    fn identify_names_the_renormalisation_and_scoring() {
        let r = routing(Scoring::Softmax, 2, None);
        let sp = spec(r, false, Arm::Rand, (64, 8));
        let case = sp.generate().unwrap();
        let (ids, w) = reference(&sp, &case);
        let found = identify(&sp, &case, &ids, &f32_bits(&w), Dtype::F32).unwrap();
        let names: Vec<String> = found.iter().map(label).collect();
        assert_eq!(names, ["softmax, renormalized"]);
    }

    #[test]
    fn skew_overflows_a_softmax_without_the_maximum() {
        let r = routing(Scoring::Softmax, 2, None);
        let sp = spec(r, false, Arm::Skew, (64, 8));
        let case = sp.generate().unwrap();
        let (ids, _) = reference(&sp, &case);
        let naive: Vec<f32> = (0..64)
            .flat_map(|t| {
                let row = &case.logits[t * 8..t * 8 + 8];
                let ex: Vec<f32> = row.iter().map(|l| l.exp()).collect();
                let a = ex[ids[t * 2] as usize];
                let b = ex[ids[t * 2 + 1] as usize];
                [a / (a + b), b / (a + b)]
            })
            .collect();
        let v = judge(&sp, &case, false, &ids, &f32_bits(&naive), Dtype::F32).unwrap();
        assert!(!v.pass());
    }

    #[test]
    fn every_arm_draws_what_it_names() {
        for arm in Arm::ALL {
            assert_eq!(Arm::parse(arm.name()), Ok(arm));
        }
        let r = routing(Scoring::Softmax, 2, None);
        assert!(spec(r, false, Arm::Bias, (4, 8)).generate().is_err());
        assert!(spec(r, false, Arm::Groups, (4, 8)).generate().is_err());
        let t = spec(r, false, Arm::Ties, (64, 8)).generate().unwrap();
        assert!(t.logits.iter().all(|&x| [0.5, 1.0, 1.5].contains(&x)));
    }
}
