//! The fast path of [`oracle::gdn::scan::scan_rows`], the gated delta-rule
//! scan over T packed rows with state snapshots, and of
//! [`oracle::gdn::rows::decode_rows`] built on it (conv and prep are the
//! spec's own functions; the scan dominates): the same bits, for the GDN
//! gate and fuzzer (issue 6).
//!
//! Only the spec in `core` is normative. The spec walks one column `(h, j)`
//! of the state at a time (a strided gather of `S[h][i][j]` over `i`); the
//! columns are independent, and this path runs all 128 columns of a head
//! side by side instead, one SIMD lane per column, keeping every column's
//! operations and their order exactly (two passes over the head's state
//! rows `i = 0, 1, ..., 127` in increasing order):
//!
//! 1. pass one, for each `i`: `S'[i][j] = S[i][j] * d` (rule `DECAY-FIRST`,
//!    `d = exp(g[h])` by core's own [`exp`]), then
//!    `kv[j] = kv[j] + S'[i][j] * k[i]` from `kv = +0.0`;
//! 2. `delta[j] = (v[j] - kv[j]) * beta[h]`;
//! 3. pass two, for each `i`: `S''[i][j] = S'[i][j] + k[i] * delta[j]`, then
//!    `acc[j] = acc[j] + S''[i][j] * q[i]` from `acc = +0.0` (rule
//!    `READ-AFTER`); `o[h][j] = acc[j] * scale`.
//!
//! Each product and sum is rounded on its own (Rust never contracts
//! `a * b + c`). Heads run in parallel (rayon). The row order, the buffer
//! parity (rule `PARITY`: even rows read `canonical` and write `alt`, odd
//! rows the reverse) and the snapshots are the spec's.
//!
//! NaN: which NaN an output carries may differ from the spec's (the
//! compiler may commute a multiply or an add); the proofs compare with
//! [`crate::ggml_fast::same_bits`] (bits equal, or both NaN).

use multiversion::multiversion;
use oracle::gdn::conv::conv1d_row;
use oracle::gdn::prep::{prep_row, Heads, HeadsMut};
use oracle::gdn::rows::{check_packed, PackedOutputs, RowInputs};
use oracle::gdn::scan::{check_scan_rows, state_after_row, StatePair, StateSlot};
use oracle::gdn::transcendental::exp;
use oracle::gdn::{GdnError, GdnParams, GdnShape, D_STATE};
use rayon::prelude::*;

/// One head's state, `[128][128]` row-major (`S[i][j]` at `i * 128 + j`).
const HEAD: usize = D_STATE * D_STATE;

/// Same contract, shapes, errors, returned slot and output bits (NaN
/// payloads aside) as [`oracle::gdn::scan::scan_rows`]: `t = shape.t()`
/// rows of `x` (`q`, `k`, `v` `[t][num_v][128]`, `beta`, `g` `[t][num_v]`)
/// on the `[num_v][128][128]` f32 state in `states`, outputs `o`
/// `[t][num_v][128]`, and a snapshot of the state after every row but the
/// last in `snap` (`(t - 1) * num_v * 16384` elements).
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape`, with the
/// spec's argument names; nothing is written then.
pub fn scan_rows_fast(
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

/// Row `r` of the buffer pair, with the operands of row `xr` of `x`: reads
/// the slot that holds the state after row `r - 1` and writes the slot
/// [`state_after_row`]`(r)` (rule `PARITY`), heads in parallel; returns the
/// buffer now holding the state after row `r`.
#[allow(clippy::too_many_arguments)]
fn step_pair<'s>(
    shape: &GdnShape,
    x: &Heads<'_>,
    xr: usize,
    scale: f32,
    canonical: &'s mut [f32],
    alt: &'s mut [f32],
    r: usize,
    o_r: &mut [f32],
) -> &'s [f32] {
    let nv = shape.num_v();
    let (src, dst): (&[f32], &mut [f32]) = match state_after_row(r) {
        StateSlot::Alt => (&*canonical, &mut *alt),
        StateSlot::Canonical => (&*alt, &mut *canonical),
    };
    dst.par_chunks_mut(HEAD)
        .zip(src.par_chunks(HEAD))
        .zip(o_r.par_chunks_mut(D_STATE))
        .enumerate()
        .for_each(|(h, ((dst, src), o))| {
            let hv = (xr * nv + h) * D_STATE;
            let op = HeadOperands {
                q: &x.q[hv..hv + D_STATE],
                k: &x.k[hv..hv + D_STATE],
                v: &x.v[hv..hv + D_STATE],
                beta: x.beta[xr * nv + h],
                d: exp(x.g[xr * nv + h]),
                scale,
            };
            head(&op, src, dst, o);
        });
    match state_after_row(r) {
        StateSlot::Alt => alt,
        StateSlot::Canonical => canonical,
    }
}

/// Same contract, shapes, errors, returned slot and output bits (NaN
/// payloads aside) as [`oracle::gdn::rows::decode_rows`]: `t` decode rows
/// packed, each the spec's own [`conv1d_row`] and [`prep_row`] followed by
/// this module's scan, with the conv ring and the state snapshotted after
/// every row but the last.
///
/// # Errors
/// [`GdnError::Len`] if a slice's length disagrees with `shape`, with the
/// spec's argument names; nothing is written then.
pub fn decode_rows_fast(
    shape: &GdnShape,
    params: &GdnParams<'_>,
    input: &RowInputs<'_>,
    ring: &mut [f32],
    states: StatePair<'_>,
    out: PackedOutputs<'_>,
) -> Result<StateSlot, GdnError> {
    let (t, cd, vd, nv) = (
        shape.t(),
        shape.conv_dim(),
        shape.value_dim(),
        shape.num_v(),
    );
    let (n, rl) = (shape.state_len(), shape.ring_len());
    check_packed(shape, params, input, ring, &states, &out)?;
    let mut scratch = vec![0f32; shape.scratch_len()];
    let StatePair { canonical, alt } = states;
    for r in 0..t {
        let conv_r = &mut out.conv_out[r * cd..(r + 1) * cd];
        conv1d_row(
            shape,
            &input.qkv[r * cd..(r + 1) * cd],
            params.conv_w,
            ring,
            conv_r,
        )?;
        if r + 1 < t {
            out.snap_conv[r * rl..(r + 1) * rl].copy_from_slice(ring);
        }
        let (q, rest) = scratch.split_at_mut(vd);
        let (k, rest) = rest.split_at_mut(vd);
        let (v, rest) = rest.split_at_mut(vd);
        let (beta, g) = rest.split_at_mut(nv);
        let mut heads = HeadsMut { q, k, v, beta, g };
        let (b, a) = (
            &input.beta_raw[r * nv..(r + 1) * nv],
            &input.alpha[r * nv..(r + 1) * nv],
        );
        prep_row(shape, params, conv_r, b, a, &mut heads)?;
        let o_r = &mut out.o[r * vd..(r + 1) * vd];
        let after = step_pair(
            shape,
            &heads.as_heads(),
            0,
            params.scale,
            canonical,
            alt,
            r,
            o_r,
        );
        if r + 1 < t {
            out.snap_state[r * n..(r + 1) * n].copy_from_slice(after);
        }
    }
    Ok(state_after_row(t - 1))
}

/// One head's operands for one row.
struct HeadOperands<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    beta: f32,
    /// `exp(g)`.
    d: f32,
    scale: f32,
}

/// One head, one row: `src` (`[128][128]`) to `dst`, `o` (128 values); the
/// steps of the module docs, every column in its own lane.
#[multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
fn head<'a>(op: &HeadOperands<'a>, src: &[f32], dst: &mut [f32], o: &mut [f32]) {
    let (q, k, v) = (&op.q[..D_STATE], &op.k[..D_STATE], &op.v[..D_STATE]);
    let (src, dst, o) = (&src[..HEAD], &mut dst[..HEAD], &mut o[..D_STATE]);
    // Pass one: decay, and kv against the decayed state.
    let mut kv = [0f32; D_STATE];
    for i in 0..D_STATE {
        let (s, t) = (
            &src[i * D_STATE..][..D_STATE],
            &mut dst[i * D_STATE..][..D_STATE],
        );
        let ki = k[i];
        for j in 0..D_STATE {
            let decayed = s[j] * op.d;
            t[j] = decayed;
            kv[j] += decayed * ki;
        }
    }
    let mut delta = [0f32; D_STATE];
    for j in 0..D_STATE {
        delta[j] = (v[j] - kv[j]) * op.beta;
    }
    // Pass two: the rank-1 update, and the read after it.
    let mut acc = [0f32; D_STATE];
    for i in 0..D_STATE {
        let t = &mut dst[i * D_STATE..][..D_STATE];
        let (ki, qi) = (k[i], q[i]);
        for j in 0..D_STATE {
            let updated = t[j] + ki * delta[j];
            t[j] = updated;
            acc[j] += updated * qi;
        }
    }
    for j in 0..D_STATE {
        o[j] = acc[j] * op.scale;
    }
}

/// A generated fast-against-spec scan case (the `gdn_scan_fast` fuzz target
/// and `tests/gdn_fast_props.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub struct ScanCase {
    /// The data's spread, drawn first (a short input reaches each).
    pub spread: Spread,
    /// v heads, 1 ..= 8 (taken modulo 8, plus one).
    pub num_v: u8,
    /// Rows, 1 ..= 6 (modulo 6, plus one).
    pub t: u8,
    /// Seed of the values.
    pub seed: u64,
}

/// The data of a [`ScanCase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub enum Spread {
    /// State, q, k, v in about +-1, g in [-4, 0], beta in [0, 1].
    Unit,
    /// The state near `f32::MAX` (rule `STATE-OVERFLOW`): sums overflow to
    /// infinities and NaN.
    NearOverflow,
    /// Zero k vectors in some heads, g = 0 (`d = 1`) and g = -inf (`d = 0`)
    /// in others, now and then a NaN or an infinity anywhere.
    Edges,
}

impl ScanCase {
    /// The shape: `num_k = 1`, d_conv = 4 (the scan does not read it).
    pub fn shape(&self) -> GdnShape {
        GdnShape::new(
            1,
            usize::from(self.num_v % 8) + 1,
            D_STATE,
            4,
            usize::from(self.t % 6) + 1,
        )
        .expect("a valid shape")
    }

    /// `(state, [q, k, v, beta, g])`: the initial state and the `t` rows of
    /// operands.
    pub fn operands(&self) -> (Vec<f32>, [Vec<f32>; 5]) {
        let s = self.shape();
        let mut rng = crate::rng::Rng(self.seed);
        let unit = |rng: &mut crate::rng::Rng| 2.0 * rng.f01() - 1.0;
        let edge = |rng: &mut crate::rng::Rng, x: f32| match rng.below(200) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -0.0,
            _ => x,
        };
        let state: Vec<f32> = (0..s.state_len())
            .map(|_| match self.spread {
                Spread::NearOverflow => unit(&mut rng) * 3.0e38,
                Spread::Edges => {
                    let x = unit(&mut rng);
                    edge(&mut rng, x)
                }
                Spread::Unit => unit(&mut rng),
            })
            .collect();
        let (vd, nv) = (s.t() * s.value_dim(), s.t() * s.num_v());
        let mut vec = |n: usize, f: &mut dyn FnMut(&mut crate::rng::Rng, usize) -> f32| {
            (0..n).map(|i| f(&mut rng, i)).collect::<Vec<f32>>()
        };
        let spread = self.spread;
        let zero_k_head = |i: usize| spread == Spread::Edges && (i / D_STATE) % 3 == 1;
        let q = vec(vd, &mut |r, _| 2.0 * r.f01() - 1.0);
        let k = vec(vd, &mut |r, i| {
            if zero_k_head(i) {
                0.0
            } else {
                2.0 * r.f01() - 1.0
            }
        });
        let v = vec(vd, &mut |r, _| 2.0 * r.f01() - 1.0);
        let beta = vec(nv, &mut |r, _| r.f01());
        let g = vec(nv, &mut |r, i| match (spread, i % 4) {
            (Spread::Edges, 0) => 0.0,
            (Spread::Edges, 1) => f32::NEG_INFINITY,
            _ => -4.0 * r.f01(),
        });
        (state, [q, k, v, beta, g])
    }
}

/// The fast scan against the spec on `case`, every output: `o`, both state
/// buffers, the snapshots and the returned slot. An oracle: a difference
/// is a panic naming the case and the first differing element.
pub fn scan_fast_matches_spec(case: &ScanCase) {
    use crate::ggml_fast::same_bits;
    let s = case.shape();
    let (state, [q, k, v, beta, g]) = case.operands();
    let x = Heads {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
    };
    let (n, ov) = (s.state_len(), s.t() * s.value_dim());
    let run = |fast: bool| {
        let (mut canonical, mut alt) = (state.clone(), vec![0f32; n]);
        let (mut o, mut snap) = (vec![0f32; ov], vec![0f32; s.snapshots() * n]);
        let states = StatePair {
            canonical: &mut canonical,
            alt: &mut alt,
        };
        let slot = if fast {
            scan_rows_fast(&s, &x, 0.088388346, states, &mut o, &mut snap)
        } else {
            oracle::gdn::scan::scan_rows(&s, &x, 0.088388346, states, &mut o, &mut snap)
        }
        .expect("the case is well formed");
        (slot, [o, canonical, alt, snap])
    };
    let (want_slot, want) = run(false);
    let (got_slot, got) = run(true);
    assert_eq!(
        got_slot, want_slot,
        "final-state slot differs\n  case: {case:?}"
    );
    for (name, (g, w)) in ["o", "canonical", "alt", "snap"]
        .iter()
        .zip(got.iter().zip(&want))
    {
        if let Some(i) = (0..w.len()).find(|&i| !same_bits(g[i], w[i])) {
            panic!(
                "GDN scan fast differs from the spec in {name}[{i}]: got {:e} (0x{:08X}), want {:e} (0x{:08X})\n  case: {case:?}",
                g[i], g[i].to_bits(), w[i], w[i].to_bits()
            );
        }
    }
}
