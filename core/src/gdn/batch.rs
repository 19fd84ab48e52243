//! `B` independent sequences in one call: the batch layout of the decode
//! step. Each sequence has its own conv ring, state buffers, inputs and
//! outputs, and [`super::rows::decode_rows`] applies to each on its own;
//! the layer's weights and constants ([`GdnParams`]) are shared. No new
//! arithmetic: only where sequence `b`'s data lie.
//!
//! Layout (elements, f32): every per-sequence buffer of
//! [`super::rows::decode_rows`] becomes `B` equal blocks, sequence `b`
//! the `b`-th (`C = conv_dim`, `P = d_conv - 1`, `V = value_dim`,
//! `N = num_v * 128 * 128`):
//! - inputs: `qkv [B][t][C]`, `beta_raw [B][t][num_v]`, `alpha
//!   [B][t][num_v]`;
//! - the ring pool `[B][C][P]`, the canonical and alternate state pools
//!   `[B][N]`;
//! - outputs: `conv_out [B][t][C]`, `o [B][t][V]`, `snap_conv
//!   [B][t-1][C][P]`, `snap_state [B][t-1][N]`.
//!
//! Every sequence's final state lands in the same slot (rule `PARITY` of
//! [`super::scan::state_after_row`]: `t` is common to the batch).
//!
//! Source: the batch dimension of `transformers`' recurrent state
//! `last_recurrent_state [B, H, K, V]` and of the conv state `[B, C,
//! d_conv]` in `Qwen3NextGatedDeltaNet`; serving engines keep one such
//! block per sequence in a pool.

use super::rows::{decode_rows, PackedOutputs, RowInputs};
use super::scan::{StatePair, StateSlot};
use super::{GdnError, GdnParams, GdnShape};

/// A validated batch: `batch` sequences of one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchLayout {
    shape: GdnShape,
    batch: usize,
}

/// The per-sequence element counts of one call, in the order of
/// [`BatchLayout::lens`].
const NAMES: [&str; 9] = [
    "qkv",
    "beta_raw",
    "alpha",
    "ring",
    "state",
    "conv_out",
    "o",
    "snap_conv",
    "snap_state",
];

impl BatchLayout {
    /// Validates `batch` sequences of `shape`.
    ///
    /// # Errors
    /// [`GdnError::Zero`] (`"batch"`) if `batch` is 0;
    /// [`GdnError::Overflow`] if `batch` times a per-sequence buffer, or
    /// its size in bytes as f32, overflows `usize`.
    pub const fn new(shape: GdnShape, batch: usize) -> Result<BatchLayout, GdnError> {
        if batch == 0 {
            return Err(GdnError::Zero { dim: "batch" });
        }
        let per = BatchLayout { shape, batch: 1 }.lens();
        let mut i = 0;
        while i < per.len() {
            match per[i].checked_mul(batch) {
                Some(v) if v.checked_mul(4).is_some() => {}
                _ => {
                    return Err(GdnError::Overflow {
                        num_k: shape.num_k(),
                        num_v: shape.num_v(),
                        t: shape.t(),
                    })
                }
            }
            i += 1;
        }
        Ok(BatchLayout { shape, batch })
    }

    /// The shape of every sequence.
    pub const fn shape(&self) -> &GdnShape {
        &self.shape
    }

    /// The sequences.
    pub const fn batch(&self) -> usize {
        self.batch
    }

    /// One sequence's element counts: `[qkv, beta_raw, alpha, ring, state,
    /// conv_out, o, snap_conv, snap_state]` (`state` for each of the two
    /// pools).
    pub const fn lens(&self) -> [usize; 9] {
        let s = &self.shape;
        let (t, nv) = (s.t(), s.num_v());
        [
            t * s.conv_dim(),
            t * nv,
            t * nv,
            s.ring_len(),
            s.state_len(),
            t * s.conv_dim(),
            t * s.value_dim(),
            s.snapshots() * s.ring_len(),
            s.snapshots() * s.state_len(),
        ]
    }

    /// The element range of sequence `b` in a pool whose per-sequence
    /// length is `per`: `b * per .. (b + 1) * per`.
    pub const fn range(&self, b: usize, per: usize) -> core::ops::Range<usize> {
        b * per..(b + 1) * per
    }
}

/// The batched inputs, `[B][t][..]` each (see the module doc).
pub type BatchInputs<'a> = RowInputs<'a>;

/// The batched outputs, `[B][..]` each (see the module doc).
pub type BatchOutputs<'a> = PackedOutputs<'a>;

/// [`decode_rows`] on each sequence `b = 0, 1, ..., batch - 1` of the
/// pools, with the shared `params`: sequence `b` reads and writes only its
/// own blocks. Returns the slot of every sequence's final state (rule
/// `PARITY`).
///
/// # Errors
/// [`GdnError::Len`] naming the first pool whose length is not `batch`
/// times the per-sequence length (or the scratch, one sequence's
/// [`GdnShape::scratch_len`]); the parameters' errors. Nothing is written
/// then.
pub fn decode_batch(
    layout: &BatchLayout,
    params: &GdnParams<'_>,
    input: &BatchInputs<'_>,
    ring: &mut [f32],
    states: StatePair<'_>,
    out: BatchOutputs<'_>,
    scratch: &mut [f32],
) -> Result<StateSlot, GdnError> {
    let shape = layout.shape;
    params.check(&shape)?;
    let per = layout.lens();
    let got = [
        input.qkv.len(),
        input.beta_raw.len(),
        input.alpha.len(),
        ring.len(),
        states.canonical.len(),
        out.conv_out.len(),
        out.o.len(),
        out.snap_conv.len(),
        out.snap_state.len(),
    ];
    for i in 0..per.len() {
        super::check_len(NAMES[i], per[i] * layout.batch, got[i])?;
    }
    super::check_len("alt", per[4] * layout.batch, states.alt.len())?;
    super::check_len("scratch", shape.scratch_len(), scratch.len())?;
    let mut slot = StateSlot::Canonical;
    for b in 0..layout.batch {
        let r = |i: usize| layout.range(b, per[i]);
        let inp = RowInputs {
            qkv: &input.qkv[r(0)],
            beta_raw: &input.beta_raw[r(1)],
            alpha: &input.alpha[r(2)],
        };
        let pair = StatePair {
            canonical: &mut states.canonical[r(4)],
            alt: &mut states.alt[r(4)],
        };
        let o = PackedOutputs {
            conv_out: &mut out.conv_out[r(5)],
            o: &mut out.o[r(6)],
            snap_conv: &mut out.snap_conv[r(7)],
            snap_state: &mut out.snap_state[r(8)],
        };
        slot = decode_rows(&shape, params, &inp, &mut ring[r(3)], pair, o, scratch)?;
    }
    Ok(slot)
}
