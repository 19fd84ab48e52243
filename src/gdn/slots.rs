//! Continuous batching: a decode batch's states in a pool of slots.
//!
//! The field's decode kernels do not take one state per sequence of the
//! batch: they take the whole state pool, `[N][num_v][128][128]` (a cache
//! of `N` slots, more than the batch), and `ssm_state_indices`, the slot of
//! each sequence, and update the pool in place (vLLM's
//! `fused_recurrent_gated_delta_rule` with `inplace_final_state=True`,
//! FlashInfer's `gated_delta_rule_mtp` with `ssm_state_indices`). Two
//! modes ([`PoolMode`]):
//! - **decode**: `ssm_state_indices` `[B]` int32. Sequence `b` reads its
//!   state from slot `idx[b]` and writes the state after its last row back
//!   to the same slot.
//! - **spec** (speculative decoding): `ssm_state_indices` `[B][t]` int32
//!   and `num_accepted_tokens` `[B]` int32, each in `1..=t`. Sequence `b`
//!   reads slot `idx[b][num_accepted[b] - 1]` (the state of the last
//!   draft token the previous step accepted) and writes the state after
//!   row `r` to slot `idx[b][r]` for every `r` whose index is not
//!   [`PAD_SLOT_ID`] (a row with no slot is computed, not stored).
//!
//! In both modes a sequence whose read index is [`PAD_SLOT_ID`] is padding
//! (a CUDA-graph batch filled up to its captured size): nothing of it is
//! read or written and its `o` rows are not judged. Every slot no
//! sequence writes keeps its bits. The indices a case draws never repeat
//! (two sequences never share a slot), so every order of the writes is
//! the same pool; `num_accepted_tokens = 0` is outside the contract and
//! never drawn.
//!
//! The rule of each sequence is [`super::rule`]'s (or the conv's,
//! [`super::conv_update`], in decode: vLLM's `causal_conv1d_update` with
//! `conv_state_indices`), unchanged: the pool is layout only. The public reports this layout is for: vLLM PRs 48475
//! and 50021 (the read index of a spec-decode row out of its row's
//! bounds), sgl-kernel-npu issue 640 (a pool read and written transposed).

use crate::rng::Rng;

/// The index of no slot: a padded sequence, or a spec-decode row whose
/// state is not stored (vLLM's `PAD_SLOT_ID`).
pub const PAD_SLOT_ID: i32 = -1;

/// How the sequences of a batch address the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// One slot per sequence, read and written: `ssm_state_indices` `[B]`.
    Decode,
    /// One slot per row, the read slot chosen by `num_accepted_tokens`:
    /// `ssm_state_indices` `[B][t]`.
    Spec,
}

impl PoolMode {
    /// Both modes.
    pub const ALL: [PoolMode; 2] = [PoolMode::Decode, PoolMode::Spec];

    /// The mode's name in arguments and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            PoolMode::Decode => "decode",
            PoolMode::Spec => "spec",
        }
    }

    /// The mode named `s`.
    ///
    /// # Errors
    /// A sentence naming both modes.
    pub fn parse(s: &str) -> Result<PoolMode, String> {
        PoolMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("pool {s:?}: expected \"decode\" or \"spec\""))
    }

    /// Columns of `ssm_state_indices` per sequence: 1, or `t`.
    pub fn columns(self, t: usize) -> usize {
        match self {
            PoolMode::Decode => 1,
            PoolMode::Spec => t,
        }
    }
}

/// A case's pool and its addressing.
#[derive(Clone, Debug, PartialEq)]
pub struct StatePool {
    /// The addressing.
    pub mode: PoolMode,
    /// Slots, `N`.
    pub slots: usize,
    /// `ssm_state_indices`: `[B]` (decode) or `[B][t]` (spec), each a slot
    /// or [`PAD_SLOT_ID`].
    pub indices: Vec<i32>,
    /// `num_accepted_tokens`, `[B]`, each in `1..=t` (spec; all 1 in
    /// decode, where no kernel reads it).
    pub accepted: Vec<i32>,
    /// The pool before the call, `[N][num_v][128][128]`.
    pub pool: Vec<f32>,
}

/// Salt of the pool's own stream: the rule's data for a seed is the same
/// with or without a pool.
const SALT: u64 = 0x5107_0F5E_9A7E_1D0C;

impl StatePool {
    /// Draws the pool of a batch of `batch` sequences of `t` rows whose
    /// initial states are `states` (`[B][n]`, `n` a state's elements),
    /// from `seed` alone:
    /// - `N = B c + 1 + (0..=B c)` slots, `c` the columns per sequence (so
    ///   at least one slot no sequence names), every slot drawn `0.1 *
    ///   normal` and each live sequence's read slot holding its state;
    /// - the indices a random injection into the slots;
    /// - each sequence padding with odds 1 in 4 (every index
    ///   [`PAD_SLOT_ID`]), but never every sequence of a case (a case of
    ///   padding alone would judge nothing but the pool), so a batch of one
    ///   is never padding;
    /// - in spec, `num_accepted_tokens` uniform in `1..=t`, and each other
    ///   row's index [`PAD_SLOT_ID`] with odds 1 in 8.
    pub fn draw(mode: PoolMode, seed: u64, batch: usize, t: usize, states: &[f32]) -> StatePool {
        let n = states.len() / batch;
        let mut rng = Rng(seed ^ SALT);
        let c = mode.columns(t);
        let named = batch * c;
        let slots = named + 1 + rng.below(named + 1);
        let mut perm: Vec<usize> = (0..slots).collect();
        for i in 0..named {
            let j = i + rng.below(slots - i);
            perm.swap(i, j);
        }
        let mut indices: Vec<i32> = perm[..named].iter().map(|&s| s as i32).collect();
        let mut accepted = vec![1i32; batch];
        let mut pool: Vec<f32> = (0..slots * n).map(|_| 0.1 * rng.normal()).collect();
        let mut pad: Vec<bool> = (0..batch).map(|_| rng.below(4) == 0).collect();
        if pad.iter().all(|&p| p) {
            pad[0] = false;
        }
        for b in 0..batch {
            let row = &mut indices[b * c..(b + 1) * c];
            if mode == PoolMode::Spec {
                accepted[b] = 1 + rng.below(t) as i32;
            }
            let read = accepted[b] as usize - 1;
            if pad[b] {
                row.fill(PAD_SLOT_ID);
                continue;
            }
            for (r, idx) in row.iter_mut().enumerate() {
                if r != read && rng.below(8) == 0 {
                    *idx = PAD_SLOT_ID;
                }
            }
            let s = row[read] as usize;
            pool[s * n..(s + 1) * n].copy_from_slice(&states[b * n..(b + 1) * n]);
        }
        StatePool {
            mode,
            slots,
            indices,
            accepted,
            pool,
        }
    }

    /// `pool` when it is one of `mode` for `batch` sequences (a case's
    /// data checked against its spec).
    ///
    /// # Errors
    /// A sentence when `pool` is missing or of another mode or batch.
    pub fn of(
        pool: Option<&StatePool>,
        mode: PoolMode,
        batch: usize,
    ) -> Result<&StatePool, String> {
        pool.filter(|p| p.mode == mode && p.batch() == batch)
            .ok_or_else(|| "the case's data hold no pool of the spec's mode and batch".into())
    }

    /// Sequences per case.
    pub fn batch(&self) -> usize {
        self.accepted.len()
    }

    /// `ssm_state_indices`' columns per sequence.
    fn columns(&self) -> usize {
        self.indices.len() / self.batch()
    }

    /// The slot sequence `b` reads, `None` for padding.
    pub fn read_slot(&self, b: usize) -> Option<usize> {
        let c = self.columns();
        let col = match self.mode {
            PoolMode::Decode => 0,
            PoolMode::Spec => self.accepted[b] as usize - 1,
        };
        usize::try_from(self.indices[b * c + col]).ok()
    }

    /// Whether sequence `b` is padding (its `o` is not judged).
    pub fn padded(&self, b: usize) -> bool {
        self.read_slot(b).is_none()
    }

    /// [`StatePool::padded`] for every sequence, `[B]`.
    pub fn padding(&self) -> Vec<bool> {
        (0..self.batch()).map(|b| self.padded(b)).collect()
    }

    /// Every store the call makes: `(b, column, slot)` for each live
    /// sequence `b` and each column of its `ssm_state_indices` row that
    /// names a slot (in spec the column is the row whose state is stored;
    /// in decode the one column stores the final state).
    pub fn writes(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let c = self.columns();
        (0..self.batch())
            .filter(|&b| !self.padded(b))
            .flat_map(move |b| {
                self.indices[b * c..(b + 1) * c]
                    .iter()
                    .enumerate()
                    .filter_map(move |(r, &i)| usize::try_from(i).ok().map(|s| (b, r, s)))
            })
    }

    /// The pool after the call and each element's limit: every slot a
    /// live sequence writes holds its state (`states` `[B][rows][n]`,
    /// `rows` = `t` in spec, the state after every row; 1 in decode, the
    /// final state) with that state's limit from `limits` (the same
    /// layout), and every other slot its bits before the call with limit
    /// 0 (its value exactly).
    pub fn scatter(&self, states: &[f32], limits: &[f64]) -> (Vec<f32>, Vec<f64>) {
        let (n, c) = (self.pool.len() / self.slots, self.columns());
        let mut pool = self.pool.clone();
        let mut limit = vec![0.0; pool.len()];
        for (b, r, s) in self.writes() {
            let from = (b * c + r) * n;
            pool[s * n..(s + 1) * n].copy_from_slice(&states[from..from + n]);
            limit[s * n..(s + 1) * n].copy_from_slice(&limits[from..from + n]);
        }
        (pool, limit)
    }
}

/// `got` with each padded sequence's elements replaced by `want`'s (the
/// rows a padded sequence would have written are not judged): both
/// `[B][per sequence]`, `padded` `[B]` (empty: no pool, `got` as it is).
pub fn unjudged_padding(got: &[f32], want: &[f32], padded: &[bool]) -> Vec<f32> {
    let mut g = got.to_vec();
    if let Some(per) = want.len().checked_div(padded.len()) {
        for (b, _) in padded.iter().enumerate().filter(|(_, &p)| p) {
            let r = b * per..(b + 1) * per;
            if r.end <= g.len() {
                g[r.clone()].copy_from_slice(&want[r]);
            }
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The draw keeps its contract on many seeds: indices distinct, a
    /// spare slot, live read slots holding the sequence's state, and the
    /// odds of padding and of unstored rows near their design.
    #[test]
    fn draws_keep_the_contract_at_their_rates() {
        let (batch, t, n) = (3, 4, 5);
        let states: Vec<f32> = (0..batch * n).map(|i| 1000.0 + i as f32).collect();
        let (mut seqs, mut padded, mut rows, mut unstored) = (0, 0, 0, 0);
        let mut accepted = [0usize; 4];
        for seed in 0..400u64 {
            for mode in PoolMode::ALL {
                let p = StatePool::draw(mode, seed, batch, t, &states);
                let live: Vec<i32> = p.indices.iter().copied().filter(|&i| i >= 0).collect();
                let mut sorted = live.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), live.len(), "an index repeats");
                assert!(live.len() < p.slots, "no spare slot");
                assert!(live.iter().all(|&i| (i as usize) < p.slots));
                for b in 0..batch {
                    seqs += 1;
                    let Some(s) = p.read_slot(b) else {
                        padded += 1;
                        assert!(p.indices[b * mode.columns(t)..][..mode.columns(t)]
                            .iter()
                            .all(|&i| i == PAD_SLOT_ID));
                        continue;
                    };
                    assert_eq!(&p.pool[s * n..(s + 1) * n], &states[b * n..(b + 1) * n]);
                    if mode == PoolMode::Spec {
                        accepted[p.accepted[b] as usize - 1] += 1;
                        rows += t - 1;
                        unstored += p.indices[b * t..(b + 1) * t]
                            .iter()
                            .filter(|&&i| i == PAD_SLOT_ID)
                            .count();
                    }
                }
            }
        }
        let share = |a: usize, b: usize| a as f64 / b as f64;
        // 1 in 4, less the cases where all three would be padding (1/64).
        let want = 0.25 - 1.0 / 64.0;
        assert!((share(padded, seqs) - want).abs() < 0.03, "{padded}/{seqs}");
        for seed in 0..64u64 {
            let one = StatePool::draw(PoolMode::Decode, seed, 1, 1, &states[..n]);
            assert!(!one.padded(0), "a batch of one padded");
        }
        assert!(
            (share(unstored, rows) - 0.125).abs() < 0.03,
            "{unstored}/{rows}"
        );
        let live_spec: usize = accepted.iter().sum();
        for a in accepted {
            assert!((share(a, live_spec) - 0.25).abs() < 0.05, "{accepted:?}");
        }
    }

    /// The scatter writes each stored row's state to its slot with its
    /// limit and keeps every other slot with limit 0.
    #[test]
    fn scatter_writes_stored_rows_and_keeps_the_rest() {
        let p = StatePool {
            mode: PoolMode::Spec,
            slots: 5,
            indices: vec![3, PAD_SLOT_ID, 0, PAD_SLOT_ID, PAD_SLOT_ID, PAD_SLOT_ID],
            accepted: vec![1, 2],
            pool: vec![0.5, 1.5, 2.5, 3.5, 4.5],
        };
        let states = [10.0, 11.0, 12.0, 20.0, 21.0, 22.0];
        let limits = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6];
        assert_eq!(p.read_slot(0), Some(3));
        assert!(p.padded(1));
        let (pool, limit) = p.scatter(&states, &limits);
        assert_eq!(pool, [12.0, 1.5, 2.5, 10.0, 4.5]);
        assert_eq!(limit, [0.3, 0.0, 0.0, 0.1, 0.0]);
    }
}
