//! Prep of one decode row: split the conv output into q, k, v, L2-normalize
//! q and k per head, repeat them onto the v heads, and compute the gates
//! beta and g (seed 003: `gdn_prep_decode_b`).
//!
//! Shapes (elements, f32; `K = key_dim = 128 num_k`, `V = value_dim =
//! 128 num_v`, `C = 2K + V`), per row:
//! - in: `conv_out [C]` = `q [num_k][128] | k [num_k][128] | v [num_v][128]`
//!   (the order of `torch.split(mixed_qkv, [key_dim, key_dim, value_dim])`);
//!   `beta_raw [num_v]`, `alpha [num_v]` (per row); from [`GdnParams`]:
//!   `dt_bias [num_v]`, `a_log [num_v]` and `eps` (the same for every row);
//! - out ([`HeadsMut`]): `q [num_v][128]`, `k [num_v][128]` (normalized and
//!   repeated), `v [num_v][128]`, `beta [num_v]`, `g [num_v]`.
//!
//! `t` rows: every array is `t` rows of the above, row-major, except
//! `dt_bias` and `a_log`.

use super::sqrt::sqrt;
use super::transcendental::{exp, sigmoid, softplus};
use super::{check_len, GdnError, GdnParams, GdnShape, D_STATE};

/// The per-head operands of a scan row, read-only: `q`, `k`, `v`
/// (`[num_v][128]` each), `beta`, `g` (`[num_v]` each); or `t` rows of
/// them, row-major.
#[derive(Clone, Copy, Debug)]
pub struct Heads<'a> {
    /// L2-normalized, repeated queries.
    pub q: &'a [f32],
    /// L2-normalized, repeated keys.
    pub k: &'a [f32],
    /// Values.
    pub v: &'a [f32],
    /// `beta = sigmoid(beta_raw)`, the delta-rule step size.
    pub beta: &'a [f32],
    /// `g`, the log of the decay (`<= 0` for finite inputs).
    pub g: &'a [f32],
}

/// The outputs of [`prep_row`] and [`prep_rows`], laid out as [`Heads`].
#[derive(Debug)]
pub struct HeadsMut<'a> {
    /// L2-normalized, repeated queries.
    pub q: &'a mut [f32],
    /// L2-normalized, repeated keys.
    pub k: &'a mut [f32],
    /// Values.
    pub v: &'a mut [f32],
    /// `beta = sigmoid(beta_raw)`.
    pub beta: &'a mut [f32],
    /// `g = -exp(a_log) * softplus(alpha + dt_bias)`.
    pub g: &'a mut [f32],
}

impl HeadsMut<'_> {
    /// The same buffers, read-only.
    pub fn as_heads(&self) -> Heads<'_> {
        Heads {
            q: self.q,
            k: self.k,
            v: self.v,
            beta: self.beta,
            g: self.g,
        }
    }
}

/// `y = x * (1 / sqrt(sum x^2 + eps))` for one head of 128 elements.
///
/// 1. `ss = +0.0`; for `j = 0..127` in increasing order: `ss = ss + x[j] *
///    x[j]` (a multiply, then an add).
/// 2. `d = ss + eps`; `s = sqrt(d)` ([`sqrt`], correctly rounded);
///    `inv = 1 / s`.
/// 3. `y[j] = x[j] * inv` for every `j`.
///
/// eps is *inside* the square root (rule `L2-EPS`), as in the FLA `l2norm`
/// used by Qwen3-Next (`x * rsqrt(sum(x^2) + eps)`), with the reciprocal
/// square root spelled as a correctly rounded `sqrt` then a division.
pub fn l2_normalize(x: &[f32; D_STATE], eps: f32, y: &mut [f32; D_STATE]) {
    // Step 1.
    let mut ss = 0.0f32;
    for &xj in x {
        ss += xj * xj; // j = 0, 1, ..., 127
    }
    // Step 2.
    let d = ss + eps;
    let s = sqrt(d);
    let inv = 1.0 / s;
    // Step 3.
    for j in 0..D_STATE {
        y[j] = x[j] * inv;
    }
}

/// `g = -(exp(a_log) * softplus(alpha + dt_bias))` for one head:
/// `e = exp(a_log)`, `a = alpha + dt_bias`, `sp = softplus(a)`, `p = e * sp`,
/// `g = -p` (exact; equal to `(-e) * sp` bit for bit).
pub fn gate_g(alpha: f32, dt_bias: f32, a_log: f32) -> f32 {
    let e = exp(a_log);
    let a = alpha + dt_bias;
    let sp = softplus(a);
    let p = e * sp;
    -p
}

/// One row of prep.
///
/// 1. For each v head `h = 0..num_v-1`, with its q/k head `hk = h / (num_v
///    / num_k)` (`repeat_interleave`: v heads `hk * ratio ..= hk * ratio +
///    ratio - 1` share q/k head `hk`):
///    - `q[h*128 + j]`: [`l2_normalize`] of `conv_out[hk*128 ..][..128]`;
///    - `k[h*128 + j]`: [`l2_normalize`] of `conv_out[K + hk*128 ..][..128]`;
///    - `v[h*128 + j] = conv_out[2K + h*128 + j]` (a copy).
///
///    The normalization of head `hk` is the same sequence of operations for
///    each of its `ratio` copies, so normalizing once and copying gives the
///    same bits.
/// 2. `beta[h] = sigmoid(beta_raw[h])` ([`sigmoid`]).
/// 3. `g[h] = gate_g(alpha[h], dt_bias[h], a_log[h])` ([`gate_g`]).
///
/// (`conv_w` and `scale` of `params` are not used here and not checked.)
///
/// Edge rules, which follow from the steps:
/// - `L2-ZERO`: an all-zero head (and any head with `sum x^2` negligible
///   against eps) normalizes to `x * (1 / sqrt(eps))`: zeros stay zeros
///   (their signs kept), finite for any `eps > 0`. With `eps = 0` a zero
///   head gives `0 * inf = NaN`.
/// - `L2-OVERFLOW`: `sum x^2` overflows to `+inf` for `|x|` around `1.8e19`
///   and beyond; then `inv = 0` and the head becomes zeros (an infinite
///   element: NaN).
/// - `G-LINEAR`: `alpha + dt_bias > 20` takes softplus's linear branch
///   (`SP-LINEAR`): `g = -(exp(a_log) * (alpha + dt_bias))`.
/// - `G-ZERO`: `alpha + dt_bias < -103.3` or so: softplus is `+0.0` and
///   `g = -0.0`, so the decay `exp(g)` is exactly 1.
/// - `G-NAN`: `a_log > 89` makes `exp(a_log) = +inf`; with `G-ZERO` that is
///   `inf * 0 = NaN`. Real checkpoints have `|a_log|` of a few units.
///
/// Source: seed 003 lines 111-130 (argument order `conv_out, beta_raw,
/// alpha, dt_bias, a, q, k, v, beta, g, d_state, num_v, num_k, key_dim, eps,
/// conv_dim`), `transformers` `Qwen3NextGatedDeltaNet.forward` (split,
/// `repeat_interleave`, `beta = b.sigmoid()`, `g = -self.A_log.float().exp()
/// * F.softplus(a.float() + self.dt_bias)`, `use_qk_l2norm_in_kernel=True`).
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (one row);
/// nothing is written then.
pub fn prep_row(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    conv_out: &[f32],
    beta_raw: &[f32],
    alpha: &[f32],
    out: &mut HeadsMut<'_>,
) -> Result<(), GdnError> {
    let (nv, vd) = (shape.num_v(), shape.value_dim());
    check_len("conv_out", shape.conv_dim(), conv_out.len())?;
    check_len("beta_raw", nv, beta_raw.len())?;
    check_len("alpha", nv, alpha.len())?;
    check_len("dt_bias", nv, params.dt_bias.len())?;
    check_len("a_log", nv, params.a_log.len())?;
    check_out(out, vd, nv)?;
    prep_row_unchecked(shape, params, conv_out, beta_raw, alpha, out);
    Ok(())
}

/// Checks the five output lengths: `q`, `k`, `v` of `vd`, `beta`, `g` of `nv`.
fn check_out(out: &HeadsMut<'_>, vd: usize, nv: usize) -> Result<(), GdnError> {
    check_len("q", vd, out.q.len())?;
    check_len("k", vd, out.k.len())?;
    check_len("v", vd, out.v.len())?;
    check_len("beta", nv, out.beta.len())?;
    check_len("g", nv, out.g.len())
}

/// [`prep_row`] on one row (every slice one row long), after the checks.
pub(crate) fn prep_row_unchecked(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    conv_out: &[f32],
    beta_raw: &[f32],
    alpha: &[f32],
    out: &mut HeadsMut<'_>,
) {
    let (dt_bias, a_log, eps) = (params.dt_bias, params.a_log, params.eps);
    let (nv, kd, ratio) = (shape.num_v(), shape.key_dim(), shape.ratio());
    let mut x = [0f32; D_STATE];
    let mut y = [0f32; D_STATE];
    // Step 1.
    for h in 0..nv {
        let hk = h / ratio;
        let o = h * D_STATE;
        x.copy_from_slice(&conv_out[hk * D_STATE..(hk + 1) * D_STATE]);
        l2_normalize(&x, eps, &mut y);
        out.q[o..o + D_STATE].copy_from_slice(&y);
        x.copy_from_slice(&conv_out[kd + hk * D_STATE..kd + (hk + 1) * D_STATE]);
        l2_normalize(&x, eps, &mut y);
        out.k[o..o + D_STATE].copy_from_slice(&y);
        out.v[o..o + D_STATE].copy_from_slice(&conv_out[2 * kd + o..2 * kd + o + D_STATE]);
    }
    // Steps 2 and 3.
    for h in 0..nv {
        out.beta[h] = sigmoid(beta_raw[h]);
        out.g[h] = gate_g(alpha[h], dt_bias[h], a_log[h]);
    }
}

/// `t = shape.t()` rows: [`prep_row`] on each row `r` (`conv_out[r * C..]`,
/// `beta_raw[r * num_v..]`, `alpha[r * num_v..]` to the outputs' row `r`);
/// rows are independent, so their order is immaterial.
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape` (`t` rows);
/// nothing is written then.
pub fn prep_rows(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    conv_out: &[f32],
    beta_raw: &[f32],
    alpha: &[f32],
    out: &mut HeadsMut<'_>,
) -> Result<(), GdnError> {
    let (t, nv, vd) = (shape.t(), shape.num_v(), shape.value_dim());
    check_len("conv_out", t * shape.conv_dim(), conv_out.len())?;
    check_len("beta_raw", t * nv, beta_raw.len())?;
    check_len("alpha", t * nv, alpha.len())?;
    check_len("dt_bias", nv, params.dt_bias.len())?;
    check_len("a_log", nv, params.a_log.len())?;
    check_out(out, t * vd, t * nv)?;
    let cd = shape.conv_dim();
    for r in 0..t {
        let mut row = HeadsMut {
            q: &mut out.q[r * vd..(r + 1) * vd],
            k: &mut out.k[r * vd..(r + 1) * vd],
            v: &mut out.v[r * vd..(r + 1) * vd],
            beta: &mut out.beta[r * nv..(r + 1) * nv],
            g: &mut out.g[r * nv..(r + 1) * nv],
        };
        prep_row_unchecked(
            shape,
            params,
            &conv_out[r * cd..(r + 1) * cd],
            &beta_raw[r * nv..(r + 1) * nv],
            &alpha[r * nv..(r + 1) * nv],
            &mut row,
        );
    }
    Ok(())
}
