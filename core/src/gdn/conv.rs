//! The causal depthwise conv1d of one decode row, with SiLU, over a ring of
//! previous inputs (seed 003: `ssm_conv1d_fused_decode`, `_tloop`).
//!
//! Shapes (elements, f32, row-major; `C = conv_dim = 2 key_dim + value_dim`,
//! `P = d_conv - 1`):
//! - `x`: one row `[C]` of the fused q|k|v projection (or `t` rows,
//!   `[t][C]`);
//! - `w`: the depthwise weights `[C][d_conv]`: `w[c * d_conv + i]` is tap `i`
//!   of channel `c`, tap `d_conv - 1` applying to the newest input (the
//!   layout of a `Conv1d(C, C, d_conv, groups=C)` weight `[C, 1, d_conv]`,
//!   which is a cross-correlation);
//! - `ring`: `[C][P]`, channel-major: `ring[c * P + i]` is the input of `P - i`
//!   rows ago (index 0 the oldest, `P - 1` the newest);
//! - `out`: `[C]` (or `[t][C]`); `snap`: `[t - 1][C][P]`.
//!
//! There is no bias (Qwen3-Next's conv1d has `bias=False`).

use super::transcendental::silu;
use super::{check_len, GdnError, GdnShape};

/// One decode row of the conv: `out = SiLU(conv(ring ++ x))`, then the ring
/// shifts in `x`.
///
/// For each channel `c` (channels are independent; any order or parallel),
/// with `P = d_conv - 1` and the window `win[i] = ring[c * P + i]` for
/// `i < P`, `win[P] = x[c]`:
/// 1. `acc = +0.0`; for `i = 0, 1, ..., d_conv - 1` in increasing order:
///    `acc = acc + w[c * d_conv + i] * win[i]` (a multiply, then an add,
///    each rounded; no fused multiply-add). Starting from `+0.0` is the
///    bias-free `out_val = bias (0)` of causal-conv1d's update kernel; it
///    matters only for the sign of a zero (`+0.0 + -0.0 = +0.0`).
/// 2. `out[c] = silu(acc)` ([`silu`]).
/// 3. The ring shifts (exact data moves): `ring[c * P + i] =
///    ring[c * P + i + 1]` for `i = 0..P-1`, then `ring[c * P + P - 1] = x[c]`.
///
/// Rule `CONV-NONFINITE`: nothing is clamped; an infinite or NaN input or
/// weight propagates through `acc` by IEEE rules into `out` and, through the
/// ring, into the next `P` rows.
///
/// Source: seed 003 lines 101-110 (`ssm_conv1d_fused_decode_b_view`, one row
/// per launch, conv ring updated in place); Dao-AILab causal-conv1d
/// `causal_conv1d_update` and `transformers`' `torch_causal_conv1d_update`
/// (window = state then new input, cross-correlation, SiLU, state shifted).
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (one row);
/// nothing is written then.
pub fn conv1d_row(
    shape: &GdnShape,
    x: &[f32],
    w: &[f32],
    ring: &mut [f32],
    out: &mut [f32],
) -> Result<(), GdnError> {
    check_len("x", shape.conv_dim(), x.len())?;
    check_len("w", shape.conv_w_len(), w.len())?;
    check_len("ring", shape.ring_len(), ring.len())?;
    check_len("out", shape.conv_dim(), out.len())?;
    conv1d_row_unchecked(shape, x, w, ring, out);
    Ok(())
}

/// [`conv1d_row`] after its length checks.
pub(crate) fn conv1d_row_unchecked(
    shape: &GdnShape,
    x: &[f32],
    w: &[f32],
    ring: &mut [f32],
    out: &mut [f32],
) {
    let d_conv = shape.d_conv();
    let p = d_conv - 1;
    for c in 0..shape.conv_dim() {
        let hist = &mut ring[c * p..(c + 1) * p];
        let taps = &w[c * d_conv..(c + 1) * d_conv];
        // Step 1.
        let mut acc = 0.0f32;
        for i in 0..d_conv {
            let win = if i < p { hist[i] } else { x[c] };
            acc += taps[i] * win;
        }
        // Step 2.
        out[c] = silu(acc);
        // Step 3.
        for i in 0..p - 1 {
            hist[i] = hist[i + 1];
        }
        hist[p - 1] = x[c];
    }
}

/// `t = shape.t()` rows packed: [`conv1d_row`] on rows `r = 0, 1, ..., t - 1`
/// in order, `x[r * C..]` to `out[r * C..]`, carrying the ring, and after
/// every row but the last (`r + 1 < t`) a copy of the whole ring into
/// `snap[r * C * P..(r + 1) * C * P]`: the ring as it stands after row `r`,
/// which is where speculative verification resumes if row `r + 1` is
/// rejected. After the call `ring` holds the state after row `t - 1`.
///
/// Bit-identical, by definition, to `t` chained [`conv1d_row`] calls with a
/// copy of the ring taken between them (seed 003 lines 140-143 and 170-180;
/// the seed's gate asserts it of the kernels, and
/// `core/tests/gdn.rs::packed_rows_equal_chained_rows` of this oracle).
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (`x` and
/// `out`: `t * C`; `snap`: `(t - 1) * C * P`, empty when `t = 1`); nothing
/// is written then.
pub fn conv1d_rows(
    shape: &GdnShape,
    x: &[f32],
    w: &[f32],
    ring: &mut [f32],
    out: &mut [f32],
    snap: &mut [f32],
) -> Result<(), GdnError> {
    let (c, t, rl) = (shape.conv_dim(), shape.t(), shape.ring_len());
    check_len("x", t * c, x.len())?;
    check_len("w", shape.conv_w_len(), w.len())?;
    check_len("ring", rl, ring.len())?;
    check_len("out", t * c, out.len())?;
    check_len("snap", shape.snapshots() * rl, snap.len())?;
    for r in 0..t {
        conv1d_row_unchecked(
            shape,
            &x[r * c..(r + 1) * c],
            w,
            ring,
            &mut out[r * c..(r + 1) * c],
        );
        if r + 1 < t {
            snap[r * rl..(r + 1) * rl].copy_from_slice(ring);
        }
    }
    Ok(())
}
