//! Whole decode rows: conv, prep and scan chained, one row at a time or `t`
//! rows packed with snapshots (seed 003, the gate
//! `gpu_gdn_packed_matches_per_row_bitwise`).
//!
//! Shapes (elements, f32; `C = conv_dim`, `V = value_dim`, `P = d_conv - 1`,
//! `N = num_v * 128 * 128`), per row:
//! - in ([`RowInputs`]): `qkv [C]`, `beta_raw [num_v]`, `alpha [num_v]`;
//! - weights: [`GdnParams`];
//! - state: the conv ring `[C][P]` and the recurrent state `[N]`;
//! - out: `conv_out [C]`, `o [V]`; packed also `snap_conv [t-1][C][P]` and
//!   `snap_state [t-1][N]`;
//! - `scratch`: [`GdnShape::scratch_len`] elements, overwritten (it holds
//!   prep's q, k, v, beta, g of the current row; its contents afterwards are
//!   not part of the contract).
//!
//! The six outputs of a packed call that the seed's gate compares bit for
//! bit with `t` chained single-row calls (lines 257-264) are: the conv
//! outputs, the scan outputs, the final state, the final conv ring, the conv
//! snapshots and the state snapshots.

use super::conv::conv1d_row_unchecked;
use super::prep::{prep_row_unchecked, Heads, HeadsMut};
use super::scan::{scan_row_unchecked, state_after_row, step_pair, StateIo, StatePair, StateSlot};
use super::{check_len, GdnError, GdnParams, GdnShape};

/// The per-row inputs: `qkv [C]`, `beta_raw [num_v]`, `alpha [num_v]`; or
/// `t` rows of each, row-major.
#[derive(Clone, Copy, Debug)]
pub struct RowInputs<'a> {
    /// The fused q|k|v projection, the conv input.
    pub qkv: &'a [f32],
    /// The pre-sigmoid beta.
    pub beta_raw: &'a [f32],
    /// The pre-softplus decay input (`a` of `in_proj_ba` in Qwen3-Next).
    pub alpha: &'a [f32],
}

/// The outputs of one row: `conv_out [C]` and `o [V]`.
#[derive(Debug)]
pub struct RowOutputs<'a> {
    /// The conv output (after SiLU): q|k|v before normalization.
    pub conv_out: &'a mut [f32],
    /// The scan output.
    pub o: &'a mut [f32],
}

/// The outputs of a packed call of `t` rows.
#[derive(Debug)]
pub struct PackedOutputs<'a> {
    /// `[t][C]` conv outputs.
    pub conv_out: &'a mut [f32],
    /// `[t][V]` scan outputs.
    pub o: &'a mut [f32],
    /// `[t - 1][C][P]`: the conv ring after rows `0..t-1`.
    pub snap_conv: &'a mut [f32],
    /// `[t - 1][N]`: the state after rows `0..t-1`.
    pub snap_state: &'a mut [f32],
}

/// The argument checks of [`decode_rows`] but the scratch, in its order:
/// the parameters, `t` rows of inputs, the ring, both state buffers and
/// every output. Shared with the fast path outside core, so that it
/// refuses exactly what the spec refuses.
///
/// # Errors
/// [`GdnError::Len`] naming the first slice whose length is wrong.
pub fn check_packed(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    input: &RowInputs<'_>,
    ring: &[f32],
    states: &StatePair<'_>,
    out: &PackedOutputs<'_>,
) -> Result<(), GdnError> {
    let (t, cd, vd, n, rl) = (
        shape.t(),
        shape.conv_dim(),
        shape.value_dim(),
        shape.state_len(),
        shape.ring_len(),
    );
    params.check(shape)?;
    check_inputs(shape, input, t)?;
    check_len("ring", rl, ring.len())?;
    check_len("canonical", n, states.canonical.len())?;
    check_len("alt", n, states.alt.len())?;
    check_len("conv_out", t * cd, out.conv_out.len())?;
    check_len("o", t * vd, out.o.len())?;
    check_len("snap_conv", shape.snapshots() * rl, out.snap_conv.len())?;
    check_len("snap_state", shape.snapshots() * n, out.snap_state.len())
}

/// Checks `input` against `rows` rows of `shape`.
fn check_inputs(shape: &GdnShape, input: &RowInputs<'_>, rows: usize) -> Result<(), GdnError> {
    check_len("qkv", rows * shape.conv_dim(), input.qkv.len())?;
    check_len("beta_raw", rows * shape.num_v(), input.beta_raw.len())?;
    check_len("alpha", rows * shape.num_v(), input.alpha.len())
}

/// Splits `scratch` into one row of prep outputs.
fn split_scratch<'s>(shape: &GdnShape, scratch: &'s mut [f32]) -> HeadsMut<'s> {
    let (vd, nv) = (shape.value_dim(), shape.num_v());
    let (q, rest) = scratch.split_at_mut(vd);
    let (k, rest) = rest.split_at_mut(vd);
    let (v, rest) = rest.split_at_mut(vd);
    let (beta, g) = rest.split_at_mut(nv);
    HeadsMut { q, k, v, beta, g }
}

/// Row `r` of `input`: conv (advancing `ring`) into `conv_out` (one row),
/// prep into `scratch`; returns the scan operands.
fn conv_and_prep<'s>(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    input: &RowInputs<'_>,
    r: usize,
    ring: &mut [f32],
    conv_out: &mut [f32],
    scratch: &'s mut [f32],
) -> HeadsMut<'s> {
    let (cd, nv) = (shape.conv_dim(), shape.num_v());
    conv1d_row_unchecked(
        shape,
        &input.qkv[r * cd..(r + 1) * cd],
        params.conv_w,
        ring,
        conv_out,
    );
    let mut heads = split_scratch(shape, scratch);
    prep_row_unchecked(
        shape,
        params,
        conv_out,
        &input.beta_raw[r * nv..(r + 1) * nv],
        &input.alpha[r * nv..(r + 1) * nv],
        &mut heads,
    );
    heads
}

/// One decode row: [`super::conv::conv1d_row`] (the ring advances),
/// [`super::prep::prep_row`] on its output with `params` (into `scratch`),
/// then [`super::scan::scan_row`] with `params.scale` on `state`.
///
/// The seed's per-row program (lines 96-147) is this, with
/// [`StateIo::Alternate`] from the slot [`state_after_row`]`(r - 1)` to
/// `state_after_row(r)` for row `r`.
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (one row);
/// nothing is written then.
pub fn decode_row(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    input: &RowInputs<'_>,
    ring: &mut [f32],
    state: StateIo<'_>,
    out: RowOutputs<'_>,
    scratch: &mut [f32],
) -> Result<(), GdnError> {
    params.check(shape)?;
    check_inputs(shape, input, 1)?;
    check_len("ring", shape.ring_len(), ring.len())?;
    match &state {
        StateIo::InPlace(s) => check_len("state", shape.state_len(), s.len())?,
        StateIo::Alternate { src, dst } => {
            check_len("src", shape.state_len(), src.len())?;
            check_len("dst", shape.state_len(), dst.len())?;
        }
    }
    check_len("conv_out", shape.conv_dim(), out.conv_out.len())?;
    check_len("o", shape.value_dim(), out.o.len())?;
    check_len("scratch", shape.scratch_len(), scratch.len())?;
    let heads = conv_and_prep(shape, params, input, 0, ring, out.conv_out, scratch);
    scan_row_unchecked(shape, &heads.as_heads(), 0, params.scale, state, out.o);
    Ok(())
}

/// `t = shape.t()` decode rows packed. Returns the slot that holds the final
/// state (rule `PARITY`: [`StateSlot::Alt`] for odd `t`,
/// [`StateSlot::Canonical`] for even `t`).
///
/// For `r = 0, 1, ..., t - 1` in order:
/// 1. [`super::conv::conv1d_row`] on `qkv[r * C..]` into
///    `conv_out[r * C..]`, advancing `ring`; if `r + 1 < t`, the ring is
///    copied into `snap_conv[r * C * P..]`.
/// 2. [`super::prep::prep_row`] on that conv output and row `r` of
///    `beta_raw` and `alpha`.
/// 3. [`super::scan::scan_row`] from the state after row `r - 1` (in
///    `canonical` for `r = 0`) into the slot [`state_after_row`]`(r)`, `o`
///    into `o[r * V..]`; if `r + 1 < t`, the state after row `r` is copied
///    into `snap_state[r * N..]`.
///
/// The seed's packed program runs each stage over all `t` rows before the
/// next (lines 170-213). That order gives the same bits: conv row `r`
/// depends only on the ring after row `r - 1`, prep row `r` only on conv
/// row `r`, scan row `r` only on prep row `r` and the state after row
/// `r - 1`. So a packed call is, output for output, `t` chained
/// [`decode_row`] calls alternating the state buffers, with the ring and the
/// state copied between them (rule `PACKED-EQ-CHAINED`). Only the final
/// state's slot is part of the contract; see [`super::scan::scan_rows`] for
/// the other buffer.
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (`t` rows);
/// nothing is written then.
pub fn decode_rows(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    input: &RowInputs<'_>,
    ring: &mut [f32],
    states: StatePair<'_>,
    out: PackedOutputs<'_>,
    scratch: &mut [f32],
) -> Result<StateSlot, GdnError> {
    let (t, cd, vd, n, rl) = (
        shape.t(),
        shape.conv_dim(),
        shape.value_dim(),
        shape.state_len(),
        shape.ring_len(),
    );
    check_packed(shape, params, input, ring, &states, &out)?;
    check_len("scratch", shape.scratch_len(), scratch.len())?;
    let StatePair { canonical, alt } = states;
    for r in 0..t {
        // Steps 1 and 2.
        let conv_r = &mut out.conv_out[r * cd..(r + 1) * cd];
        let heads = conv_and_prep(shape, params, input, r, ring, conv_r, scratch);
        if r + 1 < t {
            out.snap_conv[r * rl..(r + 1) * rl].copy_from_slice(ring);
        }
        // Step 3.
        let x: Heads<'_> = heads.as_heads();
        let o_r = &mut out.o[r * vd..(r + 1) * vd];
        let after = step_pair(shape, &x, 0, params.scale, canonical, alt, r, o_r);
        if r + 1 < t {
            out.snap_state[r * n..(r + 1) * n].copy_from_slice(after);
        }
    }
    Ok(state_after_row(t - 1))
}
