//! The gated delta-rule scan of one decode row on the `[num_v][128][128]`
//! f32 state (seed 003: `gdn_scan_s128_batched`, `gdn_scan_s128_tsnap`).
//!
//! Shapes (elements, f32, row-major):
//! - the state `S`: `[num_v][128][128]`; `S[h][i][j]` at
//!   `h * 16384 + i * 128 + j`, `i` the key index (row), `j` the value index
//!   (column), as `transformers`' `last_recurrent_state [B, H, K, V]`;
//! - the operands ([`Heads`]): `q`, `k`, `v` `[num_v][128]`, `beta`, `g`
//!   `[num_v]` per row, as [`super::prep`] writes them;
//! - `o`: `[num_v][128]` per row.
//!
//! Buffers ([`StateIo`]): a row reads the state from one buffer and writes
//! the updated state to another (the seed's per-row launches alternate
//! between two, lines 89-100), or updates one buffer in place. Both give
//! the same bits: each column `(h, j)` of the state is read entirely before
//! it is written and no other column reads it.

use super::prep::Heads;
use super::transcendental::exp;
use super::{check_len, GdnError, GdnShape, D_STATE};

/// Where one row reads and writes the state.
#[derive(Debug)]
pub enum StateIo<'a> {
    /// Read and write the same buffer.
    InPlace(&'a mut [f32]),
    /// Read `src`, write `dst` (`src` is not modified).
    Alternate {
        /// The state before the row.
        src: &'a [f32],
        /// The state after the row.
        dst: &'a mut [f32],
    },
}

/// Which of the two buffers of a packed call ([`StatePair`]) holds a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateSlot {
    /// The buffer that holds the state before the call.
    Canonical,
    /// The other buffer.
    Alt,
}

/// The state buffers of a packed call: the state before row 0 is in
/// `canonical`.
#[derive(Debug)]
pub struct StatePair<'a> {
    /// Holds the state before the call; the final state when `t` is even.
    pub canonical: &'a mut [f32],
    /// The alternate buffer; holds the final state when `t` is odd.
    pub alt: &'a mut [f32],
}

/// Where the state after row `r` (0-based) stands when rows alternate
/// buffers starting from [`StateSlot::Canonical`]: row `r` reads
/// `Canonical` and writes `Alt` when `r` is even, and the reverse when `r`
/// is odd, so the state after row `r` is in `Alt` for even `r` and in
/// `Canonical` for odd `r`. The final state of `t` rows is
/// `state_after_row(t - 1)`: `Alt` for odd `t`, `Canonical` for even `t`
/// (rule `PARITY`, seed 003 lines 97, 144, 149 and 252-253: "odd t landed
/// in the alt buffer, even t ran in place").
pub const fn state_after_row(r: usize) -> StateSlot {
    if r.is_multiple_of(2) {
        StateSlot::Alt
    } else {
        StateSlot::Canonical
    }
}

/// One column `(h, j)` of one row: the whole delta rule for value index `j`
/// of head `h`, on a copy `col[i] = S[h][i][j]`, `i = 0..127`.
///
/// 1. Decay: `col[i] = col[i] * d` for every `i`, `d = exp(g[h])`.
/// 2. `kv = +0.0`; for `i = 0..127` increasing: `kv = kv + col[i] * k[i]`.
/// 3. `delta = (v[j] - kv) * beta[h]`.
/// 4. Update: `col[i] = col[i] + k[i] * delta` for every `i`.
/// 5. `acc = +0.0`; for `i = 0..127` increasing: `acc = acc + col[i] *
///    q[i]`; returns `acc * scale`.
fn column(
    col: &mut [f32; D_STATE],
    q: &[f32],
    k: &[f32],
    v_j: f32,
    beta: f32,
    d: f32,
    scale: f32,
) -> f32 {
    // Step 1.
    for c in col.iter_mut() {
        *c *= d;
    }
    // Step 2.
    let mut kv = 0.0f32;
    for i in 0..D_STATE {
        kv += col[i] * k[i];
    }
    // Step 3.
    let delta = (v_j - kv) * beta;
    // Step 4.
    for i in 0..D_STATE {
        col[i] += k[i] * delta;
    }
    // Step 5.
    let mut acc = 0.0f32;
    for i in 0..D_STATE {
        acc += col[i] * q[i];
    }
    acc * scale
}

/// One row of the gated delta rule, every v head.
///
/// For each head `h` (heads are independent), `d = exp(g[h])` once
/// ([`exp`]), and then for each value index `j` (columns are independent;
/// any order or in parallel), with `q`, `k` the head's 128-element slices:
/// 1. `DECAY-FIRST`: the decayed state, `S'[i][j] = S[h][i][j] * d` for
///    every `i`.
/// 2. `kv[j] = sum over i of S'[i][j] * k[i]` (that is `S'^T k`), summed
///    from `+0.0` over `i = 0, 1, ..., 127` in increasing order, each
///    product and each addition rounded on its own: *against the decayed
///    state*.
/// 3. `delta[j] = (v[h][j] - kv[j]) * beta[h]` (a subtraction, then a
///    multiply).
/// 4. The rank-1 update, `S''[i][j] = S'[i][j] + k[i] * delta[j]` for every
///    `i` (a multiply, then an add).
/// 5. `READ-AFTER`: `o[h][j] = (sum over i of S''[i][j] * q[i]) * scale`,
///    the same summation order as step 2, against the *updated* state, then
///    one multiply by `scale`.
/// 6. `S''` is the state after the row.
///
/// `scale` is applied to the sum, not to q first: `transformers`'
/// `torch_recurrent_gated_delta_rule` multiplies q by the scale before the
/// scan, which rounds differently. This contract follows the issue's
/// statement `o = (S^T q) * scale`; the seed passes `scale` to the scan
/// kernel, not to prep (line 136), which is consistent with either.
///
/// Edge rules, which follow from the steps:
/// - `DECAY-RANGE`: for finite prep outputs `g <= 0`, so `0 <= d <= 1`:
///   the decay never grows the state; `g = -0.0` (rule `G-ZERO`) gives
///   `d = 1` exactly and `S' = S` bit for bit.
/// - `STATE-OVERFLOW`: nothing is clamped. Near `f32::MAX` the sums of steps
///   2 and 5 can overflow to `±inf`; then `delta` is infinite, the update
///   writes `±inf` (or NaN where an infinite `k[i] * delta` meets an
///   opposite infinity, or `k[i] = 0`: `0 * inf = NaN`) into the column, and
///   `o` is infinite or NaN. The column stays non-finite in every later row;
///   the seed's gate treats a non-finite output as a failure (line 266).
///
/// Source: seed 003 lines 134-138 (`gdn_scan_s128_batched_view(q, k, v, g,
/// beta, in, out, o, num_v, 1, scale)`); Yang et al., Gated Delta Networks
/// (ICLR 2025), eq. for `S_t`; `transformers`
/// `torch_recurrent_gated_delta_rule` (decay by `g.exp()`, `kv_mem` against
/// the decayed state, `delta = (v - kv_mem) * beta`, update, then read).
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (one row;
/// each state buffer `num_v * 128 * 128`); nothing is written then.
pub fn scan_row(
    shape: &GdnShape,
    x: &Heads<'_>,
    scale: f32,
    state: StateIo<'_>,
    o: &mut [f32],
) -> Result<(), GdnError> {
    check_heads(shape, x, 1)?;
    match &state {
        StateIo::InPlace(s) => check_len("state", shape.state_len(), s.len())?,
        StateIo::Alternate { src, dst } => {
            check_len("src", shape.state_len(), src.len())?;
            check_len("dst", shape.state_len(), dst.len())?;
        }
    }
    check_len("o", shape.value_dim(), o.len())?;
    scan_row_unchecked(shape, x, 0, scale, state, o);
    Ok(())
}

/// The argument checks of [`scan_rows`], in its order, on `t` rows of
/// operands, both state buffers and the lengths of `o` and `snap`. Shared
/// with the fast path outside core, so that it refuses exactly what the
/// spec refuses.
///
/// # Errors
/// [`GdnError::Len`] naming the first slice whose length is wrong.
pub fn check_scan_rows(
    shape: &GdnShape,
    x: &Heads<'_>,
    states: &StatePair<'_>,
    o_len: usize,
    snap_len: usize,
) -> Result<(), GdnError> {
    let (t, n) = (shape.t(), shape.state_len());
    check_heads(shape, x, t)?;
    check_len("canonical", n, states.canonical.len())?;
    check_len("alt", n, states.alt.len())?;
    check_len("o", t * shape.value_dim(), o_len)?;
    check_len("snap", shape.snapshots() * n, snap_len)
}

/// Checks the operand lengths of `rows` rows.
fn check_heads(shape: &GdnShape, x: &Heads<'_>, rows: usize) -> Result<(), GdnError> {
    let (vd, nv) = (rows * shape.value_dim(), rows * shape.num_v());
    check_len("q", vd, x.q.len())?;
    check_len("k", vd, x.k.len())?;
    check_len("v", vd, x.v.len())?;
    check_len("beta", nv, x.beta.len())?;
    check_len("g", nv, x.g.len())
}

/// Row `r` of a packed call on the buffer pair: row `xr` of `x` into `o`
/// (one row), reading and writing the slots [`state_after_row`] gives;
/// returns the buffer that now holds the state after row `r`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn step_pair<'s>(
    shape: &GdnShape,
    x: &Heads<'_>,
    xr: usize,
    scale: f32,
    canonical: &'s mut [f32],
    alt: &'s mut [f32],
    r: usize,
    o: &mut [f32],
) -> &'s [f32] {
    match state_after_row(r) {
        StateSlot::Alt => {
            let io = StateIo::Alternate {
                src: &*canonical,
                dst: &mut *alt,
            };
            scan_row_unchecked(shape, x, xr, scale, io, o);
            alt
        }
        StateSlot::Canonical => {
            let io = StateIo::Alternate {
                src: &*alt,
                dst: &mut *canonical,
            };
            scan_row_unchecked(shape, x, xr, scale, io, o);
            canonical
        }
    }
}

/// [`scan_row`] on row `r` of `x`, writing `o` (one row), after the checks.
pub(crate) fn scan_row_unchecked(
    shape: &GdnShape,
    x: &Heads<'_>,
    r: usize,
    scale: f32,
    mut state: StateIo<'_>,
    o: &mut [f32],
) {
    let nv = shape.num_v();
    let mut col = [0f32; D_STATE];
    for h in 0..nv {
        let hv = (r * nv + h) * D_STATE; // this head's q, k, v
        let q = &x.q[hv..hv + D_STATE];
        let k = &x.k[hv..hv + D_STATE];
        let d = exp(x.g[r * nv + h]);
        let beta = x.beta[r * nv + h];
        let base = h * D_STATE * D_STATE;
        for j in 0..D_STATE {
            let src: &[f32] = match &state {
                StateIo::InPlace(s) => s,
                StateIo::Alternate { src, .. } => src,
            };
            for i in 0..D_STATE {
                col[i] = src[base + i * D_STATE + j];
            }
            o[h * D_STATE + j] = column(&mut col, q, k, x.v[hv + j], beta, d, scale);
            let dst: &mut [f32] = match &mut state {
                StateIo::InPlace(s) => s,
                StateIo::Alternate { dst, .. } => dst,
            };
            for i in 0..D_STATE {
                dst[base + i * D_STATE + j] = col[i];
            }
        }
    }
}

/// `t = shape.t()` rows packed, with a state snapshot after every row but
/// the last. Returns the slot that holds the final state.
///
/// Row `r = 0, 1, ..., t - 1` in order is [`scan_row`] on row `r` of `x`
/// (`q[r * V..]`, `beta[r * num_v..]`, ...) into `o[r * V..(r + 1) * V]`,
/// reading the state after row `r - 1` (the state in `canonical` for
/// `r = 0`) and writing the state after row `r` into the slot
/// [`state_after_row`]`(r)`: even rows read `canonical` and write `alt`,
/// odd rows the reverse. After every row but the last (`r + 1 < t`) the
/// state after row `r` is copied into `snap[r * N..(r + 1) * N]`,
/// `N = num_v * 128 * 128`.
///
/// The final state is in [`state_after_row`]`(t - 1)` (rule `PARITY`): the
/// packed call leaves it where `t` chained single-row launches alternating
/// the two buffers would (seed 003 lines 149 and 253). What the *other*
/// buffer holds afterwards is not part of the contract (the seed never reads
/// it; a kernel that keeps the state in registers across rows leaves it
/// untouched). This oracle alternates like the chained launches, so there it
/// holds the state after row `t - 2` (the initial state, untouched, when
/// `t = 1`).
///
/// Bit-identical by definition to `t` chained [`scan_row`] calls with
/// [`StateIo::Alternate`] and copies between them, and also to chained
/// [`StateIo::InPlace`] calls (see the module doc).
///
/// Source: seed 003 lines 201-214 (`gdn_scan_s128_tsnap(q, k, v, g, beta,
/// [conv, canonical, alt], o, num_v, t, scale, snap)`) and the gate's
/// comparison of "scan o", "final ssm state" and "ssm snapshots".
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (`t` rows;
/// `snap`: `(t - 1) * N`, empty when `t = 1`); nothing is written then.
pub fn scan_rows(
    shape: &GdnShape,
    x: &Heads<'_>,
    scale: f32,
    states: StatePair<'_>,
    o: &mut [f32],
    snap: &mut [f32],
) -> Result<StateSlot, GdnError> {
    let (t, n, vd) = (shape.t(), shape.state_len(), shape.value_dim());
    check_scan_rows(shape, x, &states, o.len(), snap.len())?;
    let StatePair { canonical, alt } = states;
    for r in 0..t {
        let o_r = &mut o[r * vd..(r + 1) * vd];
        let after = step_pair(shape, x, r, scale, canonical, alt, r, o_r);
        if r + 1 < t {
            snap[r * n..(r + 1) * n].copy_from_slice(after);
        }
    }
    Ok(state_after_row(t - 1))
}
