//! MoE token alignment: the routing table a fused-MoE GEMM walks
//! (vLLM's `moe_align_block_size`, its Triton fast paths and the pure-torch
//! forms beside them; SGLang's shifts ids by one, another contract).
//!
//! A router picks `topk` experts for each of `tokens` tokens. The flat list
//! of its picks, `ids` (`numel = tokens * topk` pairs; pair `i` is token
//! `i / topk`'s pick number `i % topk`), is grouped by expert, and each
//! expert's group is padded to a multiple of `block_size`, so that each block
//! of `block_size` rows of the grouped GEMM belongs to one expert. The GEMM
//! reads `expert_ids[b]` for block `b`'s weights and `sorted[p]` for the pair
//! whose activation row (`sorted[p] / topk`) and output slot (`sorted[p]`)
//! row `p` is; a pad (`numel`) row is skipped.
//!
//! # Shapes
//!
//! - `ids`: `numel` expert ids (i32 or i64 on the device; i64 here).
//! - `expert_map` (optional): `num_experts` i32, expert parallelism's map from
//!   a global expert id to its id on this rank, `-1` where the expert lives
//!   on another rank.
//! - Outputs: `sorted`, [`Align::capacity`] i32; `expert_ids`,
//!   [`Align::max_blocks`] i32; `total` (vLLM's `num_tokens_post_pad`), one
//!   i32.
//!
//! # Definition
//!
//! 1. Each pair has a *key*, the segment it goes to, or none (rule `ROUTE`):
//!    an id outside `0 .. num_experts`, negative included, has none. With no
//!    map, or a map under [`MapMode::Mark`], the key is the id. Under
//!    [`MapMode::Ignore`] it is `expert_map[id]`, and none where that is `-1`.
//! 2. `count[k]` is the number of pairs with key `k`, `padded[k] =
//!    ceil(count[k] / block_size) * block_size`, `start[k]` the sum of
//!    `padded` over the keys before `k`, and `total` the sum over all
//!    `num_experts` keys (rule `COUNT`).
//! 3. Positions `start[k] .. start[k] + padded[k]` of `sorted` (segment `k`)
//!    hold the flat index `i` of every pair with key `k`, once each, and
//!    `padded[k] - count[k]` pads, each the value `numel` (rules `SEGMENT`,
//!    `PAD`). Under [`Order::Any`] the segment's order is not part of the
//!    contract (vLLM's CUDA kernel places pairs by `atomicAdd`); under
//!    [`Order::Stable`] the pairs come first, in increasing `i`, then the pads
//!    (the order [`Align::align`] writes).
//! 4. For each block `b < total / block_size`, `expert_ids[b]` is the key of
//!    the segment holding position `b * block_size`, except under
//!    [`MapMode::Mark`], where it is `expert_map[key]`: `-1` for a block of an
//!    expert on another rank, which the GEMM skips (rule `BLOCK`).
//! 5. Past the used part (`sorted[total ..]`, `expert_ids[total /
//!    block_size ..]`) nothing is required unless a [`Tail`] is declared:
//!    pads in `sorted`, a declared value in `expert_ids` (rule `TAIL`; the
//!    GEMM stops at `total`, and kernels differ: vLLM's fills `sorted` with
//!    pads and, by version, `expert_ids` with 0 or -1, which its wrapper
//!    then maps through `expert_map` under [`MapMode::Mark`]: `map[0]`, or
//!    `map[-1]`, torch's last entry).
//!
//! # Rules
//!
//! - `CAPACITY`: `capacity = numel + num_experts * (block_size - 1)`, rounded
//!   up to a multiple of `block_size` when `pad_sorted_ids`, and no more than
//!   `numel * block_size` when `numel < num_experts`; `max_blocks =
//!   ceil(capacity / block_size)`. These are vLLM's allocations; `total`
//!   never exceeds `capacity`: a key with pairs adds fewer than `block_size`
//!   pads, and at most `min(numel, num_experts)` keys have pairs.
//! - `ROUTE`: ids outside `0 .. num_experts` are nobody's pairs (vLLM's
//!   Triton fast paths: "out-of-range IDs are ignored"). vLLM's CUDA kernel
//!   skips ids `>= num_experts` on its large path only (its small-batch path,
//!   under 1024 pairs and at most 64 experts, indexes its shared counts with
//!   them), and neither path tests for a negative id; a pure-torch form
//!   indexing with `-1` wraps to the last expert. All of these fail here; a
//!   caller whose ids are always in range leaves the INVALID arm out.
//! - `PAD`: the pad is `numel`, one past the last pair, as every field
//!   kernel writes it; a GEMM tests `sorted[p] < numel`.
//! - `MAP`: a map value must be `-1` or a local id in `0 .. num_experts`;
//!   anything else is an error ([`AlignError::MapValue`]).
//!
//! Source: vLLM `vllm/model_executor/layers/fused_moe/moe_align_block_size.py`
//! (the docstring's example, the allocations, `expert_map` and
//! `ignore_invalid_experts`) and `csrc/moe/moe_align_sum_kernels.cu`
//! (`moe_align_block_size_kernel`, `count_and_sort_expert_tokens_kernel`,
//! `moe_align_block_size_small_batch_expert_kernel`). SGLang's `sgl-kernel`
//! form differs: it shifts every id by one so that `-1` forms a leading
//! segment of its own, counted in `total`, with its own capacity.

/// What an expert-parallel map does to a non-local expert's pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapMode {
    /// Every in-range id is counted under its global id; the blocks of
    /// experts on other ranks get `expert_ids` `-1` (vLLM's default:
    /// `ignore_invalid_experts=False`, the map applied to `expert_ids`
    /// after the kernel).
    Mark,
    /// Pairs of experts on other ranks are nobody's pairs; keys and
    /// `expert_ids` are local ids (vLLM's `ignore_invalid_experts=True`: the
    /// map applied inside the kernel).
    Ignore,
}

impl MapMode {
    /// `"mark"` or `"ignore"`.
    pub const fn name(self) -> &'static str {
        match self {
            MapMode::Mark => "mark",
            MapMode::Ignore => "ignore",
        }
    }
}

/// How much of a segment's order the contract fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// A segment holds its pairs and pads in any order.
    Any,
    /// The pairs in increasing flat index, then the pads.
    Stable,
}

impl Order {
    /// `"any"` or `"stable"`.
    pub const fn name(self) -> &'static str {
        match self {
            Order::Any => "any",
            Order::Stable => "stable",
        }
    }
}

/// What the outputs hold past the used part (rule `TAIL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tail {
    /// `sorted[total ..]` are all pads (`numel`).
    pub sorted: bool,
    /// `expert_ids[total / block_size ..]` all hold this value.
    pub expert: Option<i32>,
}

/// One alignment problem's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Align<'a> {
    /// Experts in the model (global ids `0 .. num_experts`).
    pub num_experts: usize,
    /// Rows of a GEMM block; each segment is a multiple of it. At least 1.
    pub block_size: usize,
    /// The expert-parallel map and what it does, if any.
    pub expert_map: Option<(&'a [i32], MapMode)>,
    /// `capacity` rounded up to a multiple of `block_size` (vLLM's
    /// `pad_sorted_ids`).
    pub pad_sorted_ids: bool,
}

/// Why an alignment cannot be computed or judged. Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlignError {
    /// `block_size` is 0.
    BlockSize,
    /// `numel` does not fit the i32 pad value, or the capacity overflows.
    TooLarge {
        /// The number of pairs.
        numel: usize,
    },
    /// The map is not `num_experts` long.
    MapLen {
        /// Its length.
        got: usize,
        /// `num_experts`.
        want: usize,
    },
    /// A map value is neither -1 nor a local id below `num_experts`.
    MapValue {
        /// The global expert whose entry it is.
        expert: usize,
        /// The value.
        value: i32,
    },
    /// An output has the wrong length.
    Len {
        /// `"sorted"`, `"expert_ids"` or `"seen"`.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the contract gives it.
        want: usize,
    },
}

impl core::fmt::Display for AlignError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            AlignError::BlockSize => write!(f, "block_size is 0: it must be at least 1"),
            AlignError::TooLarge { numel } => write!(
                f,
                "{numel} pairs: the pad value numel and the capacity must fit in i32"
            ),
            AlignError::MapLen { got, want } => write!(
                f,
                "expert_map has {got} entries, expected num_experts = {want}"
            ),
            AlignError::MapValue { expert, value } => write!(
                f,
                "expert_map[{expert}] = {value}: a map value is -1 or a local id below num_experts"
            ),
            AlignError::Len { what, got, want } => {
                write!(f, "{what} has {got} elements, expected {want}")
            }
        }
    }
}

/// Where a kernel's table first departs from the contract, in the order
/// [`Align::judge`] looks: `total`, the blocks, the segments, the pairs,
/// the tails. Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// `total` is wrong (rule `COUNT`).
    Total {
        /// The kernel's.
        got: i32,
        /// The contract's.
        want: usize,
    },
    /// `expert_ids[block]` is wrong (rule `BLOCK`).
    Block {
        /// The block.
        block: usize,
        /// The kernel's value.
        got: i32,
        /// The contract's.
        want: i32,
    },
    /// `sorted[pos]`, in segment `key`, is neither a pair of that key nor a
    /// pad, or repeats a pair (rules `SEGMENT`, `PAD`).
    Slot {
        /// The position.
        pos: usize,
        /// The segment's key.
        key: usize,
        /// The value there.
        got: i32,
        /// Whether the value is a pair of this key seen before.
        repeat: bool,
    },
    /// Under [`Order::Stable`], `sorted[pos]` breaks the order (a pair
    /// after a pad, or below the pair before it).
    Order {
        /// The position.
        pos: usize,
        /// The segment's key.
        key: usize,
        /// The value there.
        got: i32,
        /// The value before it.
        before: i32,
    },
    /// Pair `pair`, key `key`, is nowhere in its segment.
    Missing {
        /// The flat index.
        pair: usize,
        /// Its key.
        key: usize,
    },
    /// `sorted[pos]` past `total` is not a pad, a [`Tail`] declared.
    TailSorted {
        /// The position.
        pos: usize,
        /// The value there.
        got: i32,
    },
    /// `expert_ids[block]` past the used blocks is not the declared value.
    TailBlock {
        /// The block.
        block: usize,
        /// The value there.
        got: i32,
        /// The declared value.
        want: i32,
    },
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Violation::Total { got, want } => {
                write!(f, "total (num_tokens_post_pad) is {got}, want {want}")
            }
            Violation::Block { block, got, want } => {
                write!(f, "expert_ids[{block}] is {got}, want {want}")
            }
            Violation::Slot {
                pos,
                key,
                got,
                repeat,
            } => {
                if repeat {
                    write!(f, "sorted[{pos}] repeats pair {got} in expert {key}'s segment")
                } else {
                    write!(
                        f,
                        "sorted[{pos}] is {got}: neither a pair of expert {key} (its segment) nor the pad"
                    )
                }
            }
            Violation::Order {
                pos,
                key,
                got,
                before,
            } => write!(
                f,
                "sorted[{pos}] is {got} after {before} in expert {key}'s segment: not the stable order (pairs increasing, then pads)"
            ),
            Violation::Missing { pair, key } => {
                write!(f, "pair {pair} (expert {key}) is missing from its segment")
            }
            Violation::TailSorted { pos, got } => {
                write!(f, "sorted[{pos}] past total is {got}, want the pad")
            }
            Violation::TailBlock { block, got, want } => write!(
                f,
                "expert_ids[{block}] past the used blocks is {got}, want the declared {want}"
            ),
        }
    }
}

impl Align<'_> {
    /// `sorted`'s length for `numel` pairs (rule `CAPACITY`).
    ///
    /// # Errors
    /// [`AlignError::BlockSize`]; [`AlignError::TooLarge`] when the
    /// capacity or `numel` does not fit in i32.
    pub fn capacity(&self, numel: usize) -> Result<usize, AlignError> {
        let bs = self.block_size;
        if bs == 0 {
            return Err(AlignError::BlockSize);
        }
        let big = AlignError::TooLarge { numel };
        let mut cap = self
            .num_experts
            .checked_mul(bs - 1)
            .and_then(|x| x.checked_add(numel))
            .ok_or(big)?;
        if self.pad_sorted_ids {
            cap = cap.div_ceil(bs).checked_mul(bs).ok_or(big)?;
        }
        if numel < self.num_experts {
            cap = cap.min(numel.checked_mul(bs).ok_or(big)?);
        }
        if cap > i32::MAX as usize || numel > i32::MAX as usize {
            return Err(big);
        }
        Ok(cap)
    }

    /// `expert_ids`' length for `numel` pairs: `ceil(capacity / block_size)`.
    ///
    /// # Errors
    /// As [`Align::capacity`].
    pub fn max_blocks(&self, numel: usize) -> Result<usize, AlignError> {
        Ok(self.capacity(numel)?.div_ceil(self.block_size))
    }

    /// The map checked (rule `MAP`).
    fn check_map(&self) -> Result<(), AlignError> {
        if let Some((map, _)) = self.expert_map {
            if map.len() != self.num_experts {
                return Err(AlignError::MapLen {
                    got: map.len(),
                    want: self.num_experts,
                });
            }
            for (expert, &value) in map.iter().enumerate() {
                if value < -1 || value >= 0 && value as usize >= self.num_experts {
                    return Err(AlignError::MapValue { expert, value });
                }
            }
        }
        Ok(())
    }

    /// Pair id `id`'s key, or `None` (rule `ROUTE`).
    pub fn key(&self, id: i64) -> Option<usize> {
        let e = usize::try_from(id).ok().filter(|&e| e < self.num_experts)?;
        match self.expert_map {
            Some((map, MapMode::Ignore)) => usize::try_from(map[e]).ok(),
            _ => Some(e),
        }
    }

    /// The `expert_ids` value of key `key`'s blocks (rule `BLOCK`).
    pub fn block_value(&self, key: usize) -> i32 {
        match self.expert_map {
            Some((map, MapMode::Mark)) => map[key],
            _ => key as i32,
        }
    }

    /// `count[key]`: the pairs with key `key`.
    fn count(&self, ids: &[i64], key: usize) -> usize {
        ids.iter().filter(|&&id| self.key(id) == Some(key)).count()
    }

    /// `padded[key]` (rule `COUNT`).
    fn padded(&self, ids: &[i64], key: usize) -> usize {
        self.count(ids, key).div_ceil(self.block_size) * self.block_size
    }

    /// `total`: the used part of `sorted` (rule `COUNT`).
    ///
    /// # Errors
    /// As [`Align::capacity`], and a bad map.
    pub fn total(&self, ids: &[i64]) -> Result<usize, AlignError> {
        self.capacity(ids.len())?;
        self.check_map()?;
        Ok((0..self.num_experts).map(|k| self.padded(ids, k)).sum())
    }

    /// The table in the stable order, `Tail { sorted: true, expert: Some(-1)
    /// }`: writes `sorted` and `expert_ids` and returns `total`.
    ///
    /// # Errors
    /// As [`Align::total`], and [`AlignError::Len`] for an output whose
    /// length is not [`Align::capacity`] or [`Align::max_blocks`]; nothing
    /// is written then.
    pub fn align(
        &self,
        ids: &[i64],
        sorted: &mut [i32],
        expert_ids: &mut [i32],
    ) -> Result<usize, AlignError> {
        let numel = ids.len();
        let total = self.total(ids)?;
        let (cap, blocks) = (self.capacity(numel)?, self.max_blocks(numel)?);
        len("sorted", sorted.len(), cap)?;
        len("expert_ids", expert_ids.len(), blocks)?;
        sorted.fill(numel as i32);
        expert_ids.fill(-1);
        let mut start = 0;
        for k in 0..self.num_experts {
            let mut p = start;
            for (i, &id) in ids.iter().enumerate() {
                if self.key(id) == Some(k) {
                    sorted[p] = i as i32;
                    p += 1;
                }
            }
            let padded = self.padded(ids, k);
            let blocks = start / self.block_size..(start + padded) / self.block_size;
            expert_ids[blocks].fill(self.block_value(k));
            start += padded;
        }
        Ok(total)
    }

    /// Whether a kernel's table (`sorted`, `expert_ids`, `total`) is the
    /// contract's for `ids` under `order` and `tail`. `seen` is scratch,
    /// `numel` long (whatever it holds).
    ///
    /// # Errors
    /// `Ok(Err(v))` with the first [`Violation`]; `Err` as [`Align::align`]
    /// (the outputs' lengths, `seen`'s too) when there is no contract to
    /// judge by.
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        &self,
        ids: &[i64],
        order: Order,
        tail: Tail,
        sorted: &[i32],
        expert_ids: &[i32],
        total: i32,
        seen: &mut [bool],
    ) -> Result<Result<(), Violation>, AlignError> {
        let numel = ids.len();
        let want_total = self.total(ids)?;
        len("sorted", sorted.len(), self.capacity(numel)?)?;
        len("expert_ids", expert_ids.len(), self.max_blocks(numel)?)?;
        len("seen", seen.len(), numel)?;
        Ok(self.violation(
            ids, order, tail, sorted, expert_ids, total, want_total, seen,
        ))
    }

    /// [`Align::judge`] once the lengths hold.
    #[allow(clippy::too_many_arguments)]
    fn violation(
        &self,
        ids: &[i64],
        order: Order,
        tail: Tail,
        sorted: &[i32],
        expert_ids: &[i32],
        total: i32,
        want_total: usize,
        seen: &mut [bool],
    ) -> Result<(), Violation> {
        let (numel, bs) = (ids.len(), self.block_size);
        if usize::try_from(total).ok() != Some(want_total) {
            return Err(Violation::Total {
                got: total,
                want: want_total,
            });
        }
        let mut start = 0;
        for k in 0..self.num_experts {
            let padded = self.padded(ids, k);
            let want = self.block_value(k);
            let first = start / bs;
            let run = &expert_ids[first..(start + padded) / bs];
            if let Some(at) = run.iter().position(|&got| got != want) {
                return Err(Violation::Block {
                    block: first + at,
                    got: run[at],
                    want,
                });
            }
            start += padded;
        }
        seen.fill(false);
        let mut start = 0;
        for key in 0..self.num_experts {
            let padded = self.padded(ids, key);
            let mut before: Option<i32> = None;
            for (pos, &got) in sorted.iter().enumerate().skip(start).take(padded) {
                let pair = usize::try_from(got).ok().filter(|&i| i < numel);
                if let Some(i) = pair {
                    if self.key(ids[i]) != Some(key) || seen[i] {
                        return Err(Violation::Slot {
                            pos,
                            key,
                            got,
                            repeat: seen[i],
                        });
                    }
                    seen[i] = true;
                } else if got != numel as i32 {
                    return Err(Violation::Slot {
                        pos,
                        key,
                        got,
                        repeat: false,
                    });
                }
                if order == Order::Stable {
                    if let Some(b) = before {
                        // Pairs increase; a pad is followed by pads only.
                        if b == numel as i32 && got != b || pair.is_some() && got <= b {
                            return Err(Violation::Order {
                                pos,
                                key,
                                got,
                                before: b,
                            });
                        }
                    }
                    before = Some(got);
                }
            }
            start += padded;
        }
        for (pair, &id) in ids.iter().enumerate() {
            if let Some(key) = self.key(id) {
                if !seen[pair] {
                    return Err(Violation::Missing { pair, key });
                }
            }
        }
        if tail.sorted {
            if let Some(pos) = (want_total..sorted.len()).find(|&p| sorted[p] != numel as i32) {
                return Err(Violation::TailSorted {
                    pos,
                    got: sorted[pos],
                });
            }
        }
        if let Some(want) = tail.expert {
            if let Some(block) =
                (want_total / bs..expert_ids.len()).find(|&b| expert_ids[b] != want)
            {
                return Err(Violation::TailBlock {
                    block,
                    got: expert_ids[block],
                    want,
                });
            }
        }
        Ok(())
    }
}

/// [`AlignError::Len`] unless `got == want`.
fn len(what: &'static str, got: usize, want: usize) -> Result<(), AlignError> {
    if got == want {
        Ok(())
    } else {
        Err(AlignError::Len { what, got, want })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(num_experts: usize, block_size: usize) -> Align<'static> {
        Align {
            num_experts,
            block_size,
            expert_map: None,
            pad_sorted_ids: false,
        }
    }

    /// vLLM's docstring example, with its ids taken as 0-based over five
    /// experts (its text says four, and writes ids 1 to 4).
    #[test]
    fn the_docstring_example() {
        let ids = [2i64, 3, 4, 1, 2, 4, 1, 3, 4, 1, 2, 3];
        let a = plain(5, 4);
        let cap = a.capacity(ids.len()).unwrap();
        assert_eq!(cap, 12 + 5 * 3);
        let mut s = [0i32; 27];
        let mut e = [0i32; 7];
        assert_eq!(a.align(&ids, &mut s, &mut e), Ok(16));
        assert_eq!(
            s[..16],
            [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
        );
        assert!(s[16..].iter().all(|&x| x == 12));
        assert_eq!(e, [1, 2, 3, 4, -1, -1, -1]);
        let mut seen = [false; 12];
        let j = |s: &[i32], e: &[i32], t: i32, seen: &mut [bool]| {
            a.judge(&ids, Order::Stable, Tail::default(), s, e, t, seen)
                .unwrap()
        };
        assert_eq!(j(&s, &e, 16, &mut seen), Ok(()));
        // Any order within a segment passes under Any, not under Stable.
        let mut t = s;
        t.swap(0, 3);
        assert_eq!(
            a.judge(&ids, Order::Any, Tail::default(), &t, &e, 16, &mut seen)
                .unwrap(),
            Ok(())
        );
        assert!(matches!(
            j(&t, &e, 16, &mut seen),
            Err(Violation::Order { pos: 1, .. })
        ));
        let mut t = s;
        t[1] = 3;
        assert_eq!(
            j(&t, &e, 16, &mut seen),
            Err(Violation::Slot {
                pos: 1,
                key: 1,
                got: 3,
                repeat: true
            })
        );
        let mut t = s;
        t[1] = 12;
        assert!(matches!(
            j(&t, &e, 16, &mut seen),
            Err(Violation::Order { .. })
        ));
        assert_eq!(
            a.judge(&ids, Order::Any, Tail::default(), &t, &e, 16, &mut seen)
                .unwrap(),
            Err(Violation::Missing { pair: 6, key: 1 })
        );
        assert_eq!(
            j(&s, &e, 15, &mut seen),
            Err(Violation::Total { got: 15, want: 16 })
        );
        let mut f = e;
        f[2] = 2;
        assert_eq!(
            j(&s, &f, 16, &mut seen),
            Err(Violation::Block {
                block: 2,
                got: 2,
                want: 3
            })
        );
        // The tails are judged only when declared.
        let mut t = s;
        t[20] = 0;
        let mut f = e;
        f[6] = 0;
        assert_eq!(j(&t, &f, 16, &mut seen), Ok(()));
        let tail = Tail {
            sorted: true,
            expert: Some(-1),
        };
        assert_eq!(
            a.judge(&ids, Order::Stable, tail, &t, &e, 16, &mut seen)
                .unwrap(),
            Err(Violation::TailSorted { pos: 20, got: 0 })
        );
        assert_eq!(
            a.judge(&ids, Order::Stable, tail, &s, &f, 16, &mut seen)
                .unwrap(),
            Err(Violation::TailBlock {
                block: 6,
                got: 0,
                want: -1
            })
        );
    }

    #[test]
    fn out_of_range_ids_route_nowhere_and_the_capacity_shrinks() {
        // Two pairs under 8 experts: capacity min(2 * 4, 2 + 8 * 3) = 8.
        let a = plain(8, 4);
        let ids = [-1i64, 8];
        assert_eq!(a.capacity(2), Ok(8));
        assert_eq!(a.total(&ids), Ok(0));
        let mut s = [0i32; 8];
        let mut e = [0i32; 2];
        assert_eq!(a.align(&ids, &mut s, &mut e), Ok(0));
        assert_eq!(s, [2; 8]);
        let ids = [7i64, 7];
        assert_eq!(a.align(&ids, &mut s, &mut e), Ok(4));
        assert_eq!(s[..4], [0, 1, 2, 2]);
        assert_eq!(e, [7, -1]);
        // pad_sorted_ids rounds the capacity up.
        let p = Align {
            pad_sorted_ids: true,
            ..plain(3, 4)
        };
        assert_eq!(p.capacity(10), Ok(20));
        assert_eq!(plain(3, 4).capacity(10), Ok(19));
        assert_eq!(plain(3, 4).max_blocks(10), Ok(5));
        assert_eq!(plain(3, 0).capacity(10), Err(AlignError::BlockSize));
    }

    #[test]
    fn the_two_map_modes() {
        // Experts 0 and 2 live here as local 1 and 0.
        let map = [1, -1, 0, -1];
        let ids = [0i64, 1, 2, 2, 3, 0];
        let mark = Align {
            expert_map: Some((&map, MapMode::Mark)),
            ..plain(4, 2)
        };
        let mut s = [0i32; 10];
        let mut e = [0i32; 5];
        assert_eq!(mark.align(&ids, &mut s, &mut e), Ok(8));
        assert_eq!(s[..8], [0, 5, 1, 6, 2, 3, 4, 6]);
        assert_eq!(e, [1, -1, 0, -1, -1]);
        let ignore = Align {
            expert_map: Some((&map, MapMode::Ignore)),
            ..mark
        };
        assert_eq!(ignore.align(&ids, &mut s, &mut e), Ok(4));
        assert_eq!(s[..4], [2, 3, 0, 5]);
        assert_eq!(e[..2], [0, 1]);
        let bad = [1, -2, 0, 4];
        let b = Align {
            expert_map: Some((&bad, MapMode::Ignore)),
            ..mark
        };
        assert_eq!(
            b.total(&ids),
            Err(AlignError::MapValue {
                expert: 1,
                value: -2
            })
        );
        let short = [0];
        let b = Align {
            expert_map: Some((&short, MapMode::Mark)),
            ..mark
        };
        assert_eq!(b.total(&ids), Err(AlignError::MapLen { got: 1, want: 4 }));
    }
}
