//! Cases for judging an MoE token alignment (vLLM's
//! `moe_align_block_size`, Triton and pure-torch forms) against
//! [`oracle::moe_align`]: the routing table a fused-MoE GEMM walks.
//!
//! A case: `ids` `[tokens][topk]` expert ids (i32), `num_experts`,
//! `block_size`, and under expert parallelism an `expert_map`
//! (`num_experts` i32); the outputs `sorted` (capacity i32), `expert_ids`
//! (max_blocks i32) and `total` (one i32), judged by
//! [`oracle::moe_align::Align::judge`].

use crate::rng::Rng;
use oracle::moe_align::{Align, MapMode, Order, Tail, Violation};

/// The routing a case draws, each arm aimed at a class of mistakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Each token's `topk` distinct experts, uniform.
    Rand,
    /// Hot experts: four draws in five from a hot set of `topk` to
    /// `topk + 3` experts, the rest from a quarter of the experts
    /// (segments many blocks long, three quarters of the experts empty: a
    /// count kept per thread, a block loop that stops at one, an empty
    /// segment given a block).
    Skew,
    /// Counts at the block edges: each used expert gets 1, `block_size -
    /// 1`, `block_size`, `block_size + 1` or `2 block_size` pairs, and on
    /// later rounds a count one below, at or one above a multiple of
    /// `block_size` (a ceiling taken as a floor, a pad added to a full
    /// block); the first and last expert always used; pairs shuffled.
    Edge,
    /// Ids outside `0 .. num_experts`: `ceil(numel / 8)` pairs, at random
    /// places, are -1, -2, `num_experts`, `num_experts + 1` and `i32::MAX`
    /// in turn (routed nowhere: rule `ROUTE`), the rest as `RAND`.
    Invalid,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 4] = [Arm::Rand, Arm::Skew, Arm::Edge, Arm::Invalid];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Skew => "SKEW",
            Arm::Edge => "EDGE",
            Arm::Invalid => "INVALID",
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

/// The most pairs (`tokens topk`) a case takes.
pub const MAX_PAIRS: usize = 1 << 20;

/// The most experts a case takes.
pub const MAX_EXPERTS: usize = 1 << 12;

/// The most `numel num_experts` a case takes: the contract's functions
/// count each expert's pairs by a pass over the ids (so a case costs a few
/// passes of `numel num_experts` steps, under a second at this cap).
pub const MAX_WORK: usize = 1 << 26;

/// The longest `sorted` a case takes (256 MiB of int32).
pub const MAX_CAPACITY: usize = 1 << 26;

/// Whether `numel` pairs over `num_experts` experts, `capacity` long, are
/// within the check's caps ([`MAX_PAIRS`], [`MAX_EXPERTS`], [`MAX_WORK`],
/// [`MAX_CAPACITY`]).
///
/// # Errors
/// A sentence naming the cap passed.
pub fn within_caps(numel: usize, num_experts: usize, capacity: usize) -> Result<(), String> {
    if numel > MAX_PAIRS || num_experts > MAX_EXPERTS {
        return Err(format!(
            "{numel} pairs over {num_experts} experts: over the check's {MAX_PAIRS} pairs or {MAX_EXPERTS} experts"
        ));
    }
    if numel * num_experts > MAX_WORK {
        return Err(format!(
            "{numel} pairs times {num_experts} experts: over the check's {MAX_WORK} (the oracle counts each expert's pairs in a pass)"
        ));
    }
    if capacity > MAX_CAPACITY {
        return Err(format!(
            "sorted would hold {capacity} entries: over the check's {MAX_CAPACITY}"
        ));
    }
    Ok(())
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Tokens.
    pub tokens: usize,
    /// Experts a token picks.
    pub topk: usize,
    /// Experts in the model.
    pub num_experts: usize,
    /// Rows of a GEMM block.
    pub block_size: usize,
    /// The expert-parallel map's mode; `None`: no map.
    pub map: Option<MapMode>,
    /// `sorted` padded to a multiple of `block_size` (vLLM's
    /// `pad_sorted_ids`).
    pub pad_sorted_ids: bool,
    /// The routing.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// `[tokens][topk]` expert ids.
    pub ids: Vec<i32>,
    /// The map (`num_experts` entries), when the spec has a mode.
    pub expert_map: Option<Vec<i32>>,
}

impl Case {
    /// The ids as the contract takes them.
    pub fn ids64(&self) -> Vec<i64> {
        self.ids.iter().map(|&i| i64::from(i)).collect()
    }
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(
        tokens: usize,
        topk: usize,
        num_experts: usize,
        block_size: usize,
        arm: Arm,
    ) -> u64 {
        0x3AE0_0000_0000_0000
            ^ ((tokens as u64) << 32)
            ^ ((topk as u64) << 26)
            ^ ((num_experts as u64) << 8)
            ^ ((block_size as u64) << 2)
            ^ Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// The contract's parameters, with `map` the case's map.
    pub fn align<'a>(&self, map: Option<&'a [i32]>) -> Align<'a> {
        Align {
            num_experts: self.num_experts,
            block_size: self.block_size,
            expert_map: map.zip(self.map),
            pad_sorted_ids: self.pad_sorted_ids,
        }
    }

    /// Pairs: `tokens topk`.
    pub fn numel(&self) -> usize {
        self.tokens * self.topk
    }

    /// `(capacity, max_blocks)`: the outputs' lengths.
    ///
    /// # Errors
    /// As [`Spec::valid`].
    pub fn lengths(&self) -> Result<(usize, usize), String> {
        self.valid()?;
        let a = self.align(None);
        let e = |e: oracle::moe_align::AlignError| e.to_string();
        Ok((
            a.capacity(self.numel()).map_err(e)?,
            a.max_blocks(self.numel()).map_err(e)?,
        ))
    }

    /// # Errors
    /// A zero `topk`, `num_experts` or `block_size` (`tokens` may be 0:
    /// an empty batch); a case past the caps ([`within_caps`]).
    pub fn valid(&self) -> Result<(), String> {
        if self.topk == 0 || self.num_experts == 0 || self.block_size == 0 {
            return Err(format!(
                "topk={} num_experts={} block_size={}: each must be at least 1",
                self.topk, self.num_experts, self.block_size
            ));
        }
        let numel = self.tokens.saturating_mul(self.topk);
        within_caps(numel, self.num_experts, 0)?;
        let cap = self
            .align(None)
            .capacity(numel)
            .map_err(|e| e.to_string())?;
        within_caps(numel, self.num_experts, cap)
    }

    /// The case's ids and map, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::valid`].
    pub fn generate(&self) -> Result<Case, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let (e, k, bs) = (self.num_experts, self.topk, self.block_size);
        let n = self.numel();
        let mut ids = Vec::with_capacity(n);
        // A token's distinct picks (with repeats once topk > num_experts).
        let picks = |rng: &mut Rng, ids: &mut Vec<i32>, draw: &dyn Fn(&mut Rng) -> usize| {
            for _ in 0..self.tokens {
                let start = ids.len();
                for _ in 0..k {
                    let mut x = draw(rng);
                    for _ in 0..8 {
                        if !ids[start..].contains(&(x as i32)) {
                            break;
                        }
                        x = draw(rng);
                    }
                    ids.push(x as i32);
                }
            }
        };
        match self.arm {
            Arm::Rand | Arm::Invalid => picks(&mut rng, &mut ids, &|r| r.below(e)),
            Arm::Skew => {
                let mut all: Vec<usize> = (0..e).collect();
                shuffle(&mut rng, &mut all);
                let h = (k + rng.below(4)).min(e);
                let (hot, warm) = (&all[..h], &all[..(e / 4).max(h)]);
                picks(&mut rng, &mut ids, &|r| {
                    if r.below(5) < 4 {
                        hot[r.below(hot.len())]
                    } else {
                        warm[r.below(warm.len())]
                    }
                })
            }
            Arm::Edge => {
                let sizes = [1, bs.saturating_sub(1).max(1), bs, bs + 1, 2 * bs];
                let mut order: Vec<usize> = (0..e).collect();
                shuffle(&mut rng, &mut order);
                // The last expert first, the first second: both edges used.
                if let Some(p) = order.iter().position(|&x| x == e - 1) {
                    order.swap(0, p);
                }
                if let Some(p) = order.iter().position(|&x| x == 0) {
                    order.swap(1.min(e - 1), p);
                }
                // Experts in that order, round after round, each time taken
                // to a count next to a multiple of block_size (one pair kept
                // back for the second expert).
                let mut count = vec![0usize; e];
                let mut turn = 0;
                while ids.len() < n {
                    let x = order[turn % e];
                    turn += 1;
                    let left = n - ids.len();
                    let room = left - usize::from(turn == 1 && e > 1 && left > 1);
                    let cur = count[x];
                    let m = (cur / bs + 1) * bs;
                    let targets = if cur == 0 {
                        sizes
                    } else {
                        [m - 1, m, m + 1, m + bs, m + bs + 1]
                    };
                    let fit: Vec<usize> = targets
                        .iter()
                        .filter(|&&t| t > cur && t - cur <= room)
                        .map(|&t| t - cur)
                        .collect();
                    let c = if fit.is_empty() {
                        room.max(1)
                    } else {
                        fit[rng.below(fit.len())]
                    };
                    count[x] += c;
                    ids.extend(std::iter::repeat_n(x as i32, c));
                }
                shuffle(&mut rng, &mut ids);
            }
        }
        if self.arm == Arm::Invalid {
            // Exactly ceil(numel / 8) of them, at shuffled places, the
            // five values in turn from a random one.
            let bad = [-1, -2, e as i32, e as i32 + 1, i32::MAX];
            let mut at: Vec<usize> = (0..n).collect();
            shuffle(&mut rng, &mut at);
            let first = rng.below(bad.len());
            for (j, &i) in at[..n.div_ceil(8)].iter().enumerate() {
                ids[i] = bad[(first + j) % bad.len()];
            }
        }
        let expert_map = self.map.map(|_| {
            // A rank's share of the experts: one contiguous range of
            // `num_experts / ranks` (ranks 2, 4 or 8), or, one map in four,
            // the same number scattered (a rebalanced placement); local ids
            // in placement order.
            let ranks = [2, 4, 8][rng.below(3)];
            let local = (e / ranks).max(1);
            let mut globals: Vec<usize> = if rng.below(4) == 0 {
                let mut all: Vec<usize> = (0..e).collect();
                shuffle(&mut rng, &mut all);
                all.truncate(local);
                all
            } else {
                let first = rng.below(ranks).min((e - local) / local.max(1)) * local;
                (first..first + local).collect()
            };
            if rng.below(2) == 0 {
                globals.sort_unstable();
            }
            let mut map = vec![-1i32; e];
            for (l, &g) in globals.iter().enumerate() {
                map[g] = l as i32;
            }
            map
        });
        Ok(Case { ids, expert_map })
    }
}

/// Fisher-Yates from `rng`.
fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
}

/// The oracle's table in the stable order: `(sorted, expert_ids, total)`.
///
/// # Errors
/// As [`Spec::valid`].
pub fn reference(spec: &Spec, case: &Case) -> Result<(Vec<i32>, Vec<i32>, usize), String> {
    let (cap, blocks) = spec.lengths()?;
    let mut sorted = vec![0; cap];
    let mut experts = vec![0; blocks];
    let total = spec
        .align(case.expert_map.as_deref())
        .align(&case.ids64(), &mut sorted, &mut experts)
        .map_err(|e| e.to_string())?;
    Ok((sorted, experts, total))
}

/// How a kernel's table compares with the contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The first departure (`None`: the table is the contract's).
    pub first: Option<Violation>,
    /// The kernel's `total` and the contract's.
    pub total: (i32, usize),
    /// Used blocks, and those whose `expert_ids` differ.
    pub blocks: (usize, usize),
    /// Segments with pairs or pads, and those whose contents (as a
    /// multiset) differ from the contract's.
    pub segments: (usize, usize),
}

impl Verdict {
    /// Judges `sorted`, `expert_ids` and `total` for `case` under `order`
    /// and `tail`.
    ///
    /// # Errors
    /// As [`Spec::valid`], and outputs of the wrong lengths.
    pub fn judge(
        spec: &Spec,
        case: &Case,
        order: Order,
        tail: Tail,
        sorted: &[i32],
        expert_ids: &[i32],
        total: i32,
    ) -> Result<Verdict, String> {
        let (want_sorted, want_experts, want_total) = reference(spec, case)?;
        let ids = case.ids64();
        let mut seen = vec![false; ids.len()];
        let first = spec
            .align(case.expert_map.as_deref())
            .judge(&ids, order, tail, sorted, expert_ids, total, &mut seen)
            .map_err(|e| e.to_string())?
            .err();
        let used = want_total / spec.block_size;
        let wrong_blocks = (0..used)
            .filter(|&b| expert_ids[b] != want_experts[b])
            .count();
        // Segments as block runs of one expert in the contract's layout.
        let (mut segs, mut wrong) = (0, 0);
        let mut b = 0;
        while b < used {
            let mut end = b + 1;
            while end < used && want_experts[end] == want_experts[b] {
                end += 1;
            }
            let range = b * spec.block_size..end * spec.block_size;
            let mut g = sorted[range.clone()].to_vec();
            let mut w = want_sorted[range].to_vec();
            g.sort_unstable();
            w.sort_unstable();
            segs += 1;
            wrong += usize::from(g != w);
            b = end;
        }
        Ok(Verdict {
            first,
            total: (total, want_total),
            blocks: (used, wrong_blocks),
            segments: (segs, wrong),
        })
    }

    /// The table is the contract's.
    pub fn pass(&self) -> bool {
        self.first.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tokens: usize, topk: usize, e: usize, bs: usize, arm: Arm) -> Spec {
        Spec {
            tokens,
            topk,
            num_experts: e,
            block_size: bs,
            map: None,
            pad_sorted_ids: false,
            arm,
            seed: Spec::base_seed(tokens, topk, e, bs, arm),
        }
    }

    /// Each arm draws what it is for, at its designed rate.
    #[test]
    fn each_arm_draws_its_regime_at_its_rate() {
        let counts = |s: &Spec, ids: &[i32]| {
            let mut c = vec![0usize; s.num_experts];
            for &i in ids {
                if let Ok(i) = usize::try_from(i) {
                    if i < s.num_experts {
                        c[i] += 1;
                    }
                }
            }
            c
        };
        // RAND: distinct picks per token, every id in range.
        let s = spec(500, 8, 64, 16, Arm::Rand);
        let c = s.generate().unwrap();
        assert!(c
            .ids
            .chunks(8)
            .all(|t| (1..8).all(|i| !t[..i].contains(&t[i]))));
        assert_eq!(counts(&s, &c.ids).iter().sum::<usize>(), 4000);
        // SKEW: about 4 pairs in 5 on topk + 3 experts or fewer, three
        // quarters of the experts empty, at topk 2 and 8.
        for (tokens, topk, e) in [(500, 2, 64), (300, 8, 256), (2048, 8, 256)] {
            let s = spec(tokens, topk, e, 16, Arm::Skew);
            let c = counts(&s, &s.generate().unwrap().ids);
            let mut top = c.clone();
            top.sort_unstable_by(|a, b| b.cmp(a));
            let hot = top[..topk + 3].iter().sum::<usize>() as f64;
            assert!(hot >= 0.7 * (tokens * topk) as f64, "{top:?}");
            assert!(
                c.iter().filter(|&&x| x == 0).count() * 4 >= e * 3 - 4 * (topk + 3),
                "{c:?}"
            );
        }
        // EDGE: every used expert's count is next to a multiple of
        // block_size (the last one drawn may be cut), the first and last
        // experts used; with more pairs than experts, rounds after the
        // first; with fewer, spread.
        for (tokens, topk, e) in [(100, 4, 64), (100, 2, 8), (3, 8, 256)] {
            let s = spec(tokens, topk, e, 16, Arm::Edge);
            let c = counts(&s, &s.generate().unwrap().ids);
            assert!(c[0] > 0 && c[e - 1] > 0, "{c:?}");
            let used = c.iter().filter(|&&x| x > 0).count();
            let edge = c
                .iter()
                .filter(|&&x| x > 0 && [0, 1, 15].contains(&(x % 16)))
                .count();
            assert!(edge + 1 >= used, "{c:?}");
            assert!(used >= e.min(tokens * topk) / 4, "{c:?}");
        }
        // INVALID: ceil(numel / 8) pairs out of range, one at least in a
        // single decode token, every bad value in a batch.
        for (tokens, n_bad) in [(1000, 1000), (1, 1), (3, 3)] {
            let s = spec(tokens, 8, 64, 16, Arm::Invalid);
            let c = s.generate().unwrap();
            let bad = c.ids.iter().filter(|&&i| !(0..64).contains(&i)).count();
            assert_eq!(bad, n_bad);
        }
        let c = spec(1000, 8, 64, 16, Arm::Invalid).generate().unwrap();
        for v in [-1, -2, 64, 65, i32::MAX] {
            assert!(c.ids.contains(&v), "{v}");
        }
        // An empty batch is a case: no pairs, nothing used.
        let s = spec(0, 8, 256, 16, Arm::Edge);
        let c = s.generate().unwrap();
        assert!(c.ids.is_empty());
        assert_eq!(reference(&s, &c).unwrap(), (vec![], vec![], 0));
    }

    /// A map's local experts are `num_experts / ranks` of them, with local
    /// ids `0 ..` that many; mark and ignore differ on the same case.
    #[test]
    fn maps_and_their_modes() {
        let mut scattered = 0;
        for seed in 0..64u64 {
            let s = Spec {
                map: Some(MapMode::Mark),
                seed,
                ..spec(40, 8, 64, 16, Arm::Rand)
            };
            let c = s.generate().unwrap();
            let m = c.expert_map.clone().unwrap();
            let local: Vec<usize> = (0..64).filter(|&g| m[g] >= 0).collect();
            assert!([8, 16, 32].contains(&local.len()), "{m:?}");
            let mut l: Vec<i32> = local.iter().map(|&g| m[g]).collect();
            l.sort_unstable();
            assert_eq!(l, (0..local.len() as i32).collect::<Vec<_>>());
            scattered += usize::from(local.windows(2).any(|w| w[1] != w[0] + 1));
            let (_, ex, total) = reference(&s, &c).unwrap();
            let i = Spec {
                map: Some(MapMode::Ignore),
                ..s
            };
            let (_, _, total_i) = reference(&i, &c).unwrap();
            assert!(total_i < total);
            assert!(ex[..total / 16].contains(&-1));
        }
        assert!((8..=28).contains(&scattered), "{scattered}");
    }

    /// The judge passes the oracle's table under any order once shuffled
    /// within segments, and counts a moved pair and a wrong block.
    #[test]
    fn the_judge_counts_and_places_differences() {
        let s = spec(37, 4, 16, 8, Arm::Rand);
        let c = s.generate().unwrap();
        let (mut sorted, mut ex, total) = reference(&s, &c).unwrap();
        let judge = |o, sorted: &[i32], ex: &[i32]| {
            Verdict::judge(&s, &c, o, Tail::default(), sorted, ex, total as i32).unwrap()
        };
        assert!(judge(Order::Stable, &sorted, &ex).pass());
        sorted[..8].reverse();
        assert!(judge(Order::Any, &sorted, &ex).pass());
        assert!(!judge(Order::Stable, &sorted, &ex).pass());
        let end = total - 1;
        sorted.swap(0, end);
        ex[1] += 1;
        let v = judge(Order::Any, &sorted, &ex);
        assert_eq!(v.blocks.1, 1);
        assert!(v.segments.1 >= 1 && v.segments.0 > 2, "{v:?}");
        assert!(spec(1, 0, 1, 1, Arm::Rand).generate().is_err());
        assert!(spec(1 << 16, 8, 256, 16, Arm::Rand).valid().is_err());
        assert!(spec(1 << 20, 1, 4096, 1, Arm::Rand).valid().is_err());
        assert!(spec(1 << 14, 1, 4096, 16385, Arm::Rand).valid().is_err());
        assert!(spec(1 << 14, 1, 4096, 16381, Arm::Rand).valid().is_ok());
        assert_eq!(Arm::parse("edge"), Ok(Arm::Edge));
    }
}
