//! The gated delta rule as the field's kernels compute it: GDN decode
//! (seed 003) from the conv output on, for judging another implementation
//! of it (fla's `fused_recurrent_gated_delta_rule` with its gates and L2
//! norm in the kernel, the decode kernels of vLLM and FlashInfer), which
//! does not run core's sequence of operations and so is judged by a
//! written error bound unless it claims core's bits.
//!
//! What a case holds, per sequence `b` of a batch of `B` (shapes in f32
//! elements, row-major, fla's layouts):
//! - `q`, `k`: `[B][t][num_k][128]`, the conv output's query and key heads
//!   before their L2 norm;
//! - `v`: `[B][t][num_v][128]`;
//! - `alpha`, `beta_raw`: `[B][t][num_v]`, the gates' raw inputs;
//! - `a_log`, `dt_bias`: `[num_v]`, the layer's (one layer for the batch);
//! - `state`: `[B][num_v][128][128]`, `S[h][key i][value j]`, each
//!   sequence's own.
//!
//! The contract (core's [`prep_rows`] then the scan, `oracle::gdn::scan`):
//! for each row, each v head `h` with q/k head `h / (num_v / num_k)`:
//! `q = x / sqrt(sum x^2 + 1e-6)` (the same for `k`), `beta =
//! sigmoid(beta_raw)`, `g = -exp(a_log) * softplus(alpha + dt_bias)`
//! (softplus linear above 20), `S = exp(g) S`, `S = S + k (beta (v - k.S))`,
//! `o = scale (q.S)` with `scale = 1 / sqrt(128)`. Outputs: `o`
//! `[B][t][num_v][128]` and the state after the last row, `[B][num_v][128][128]`,
//! or, with [`Spec::per_row`], the state after every row, `[B][t][num_v][128][128]`
//! (the snapshots speculative verification rolls back to; the last is the
//! final state).
//!
//! With [`Spec::pool`] the states live in a pool of slots addressed by
//! `ssm_state_indices` and the state output is the pool after the call
//! ([`super::slots`]).
//!
//! The judge ([`Verdict`]): bit for bit when the implementation declares
//! core's arithmetic; otherwise every element within `2 B + 2^-100` of
//! the oracle's, where `B` ([`bound`]) is a first-order forward-error bound
//! of one f32 evaluation of the formula under a stated model (any order
//! of its sums, with or without FMA, each `exp`, `log`, square root and
//! division within 8 ulps): each evaluation that keeps to the model lies
//! within `B` of the exact value, so two lie within `2 B`
//! of each other (Higham, *Accuracy and Stability of Numerical
//! Algorithms*, 2nd ed., section 3.1 for `gamma_n`). The `2^-100` covers
//! results flushed to zero (FTZ) below `2^-126`.

use super::slots::{unjudged_padding, PoolMode, StatePool};
use crate::elementwise::Part;
use crate::gdn_fast::scan_rows_fast;
use crate::rng::Rng;
use oracle::gdn::prep::{prep_rows, HeadsMut};
use oracle::gdn::scan::{StatePair, StateSlot};
use oracle::gdn::{default_scale, GdnParams, GdnShape, D_STATE};

/// The L2-norm epsilon of the contract (seed 003 line 56).
pub const EPS: f32 = 1e-6;

/// The unit roundoff of f32, `2^-24`.
pub const U: f64 = 1.0 / (1u64 << 24) as f64;

/// The error the bound allows a transcendental, a square root or a
/// division (a kernel's approximate `exp`, `rsqrt`, `__fdividef`): `8 u`
/// relative, plus the propagated error of its argument.
pub const TRANSCENDENTAL: f64 = 8.0 * U;

/// The absolute slack added to every limit: results flushed to zero below
/// `2^-126` (FTZ), summed over a row of 128 terms, stay far below it.
pub const FLOOR: f64 = 7.888_609_052_210_118e-31; // 2^-100

/// The dot products' length in the bound: 128 terms plus two roundings
/// (a scale or a normalization folded into an operand).
const DOT_TERMS: f64 = 130.0;

/// `gamma_n = n u / (1 - n u)` (Higham section 3.1): the relative bound of
/// a sum of `n` products in any order, with or without FMA.
pub fn gamma(n: f64) -> f64 {
    n * U / (1.0 - n * U)
}

/// The data the case draws, each arm aimed at one part of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal q, k, v, gates and state (the example's distributions).
    Rand,
    /// The gates at their edges, one regime in four for each (row, head):
    /// `alpha + dt_bias` normal, past `exp`'s f32 overflow (89 to 200:
    /// softplus must be linear there, not `log1p(exp(x))` = inf), from 5
    /// to 25 across the threshold 20 (above about 14.6 softplus rounds to
    /// x in f32, so every threshold there agrees; below it a threshold
    /// that returns x too early is off by `log1p(exp(-x))`, which fails
    /// the bound from a threshold of about 8 down), or far
    /// below zero (-120 to -20: softplus is
    /// `exp(x)`, subnormal in f32); `beta_raw` normal in half the (row,
    /// head) pairs, else saturating (10 to 40, either sign); `a_log` in
    /// -6 to 0 so that decays stay visible.
    Gates,
    /// The L2 norm at its edges, one regime in four for each (row, q/k
    /// head), q and k drawn apart: normal, all zero (`0 / sqrt(eps)` is
    /// 0; without eps it is NaN), or scaled by `1e-3` or `1e-4` (sums of
    /// the head's 128 squares about 128 and 1.3 times eps, where `sqrt(ss
    /// + eps)` and `sqrt(ss) + eps` differ by far more than rounding).
    Norm,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 3] = [Arm::Rand, Arm::Gates, Arm::Norm];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Gates => "GATES",
            Arm::Norm => "NORM",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the three arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        Arm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("arm {s:?}: expected \"RAND\", \"GATES\" or \"NORM\""))
    }

    fn index(self) -> u64 {
        match self {
            Arm::Rand => 0,
            Arm::Gates => 1,
            Arm::Norm => 2,
        }
    }
}

/// The largest case a check draws: the state elements the oracle walks,
/// `B t num_v 128^2`, at most this (the bound's f64 pass costs about 20
/// operations each; a snapshot of the state is kept per row).
pub const MAX_ELEMS: usize = 1 << 26;

/// One case: the shape, the arm and the data seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// q/k heads.
    pub num_k: usize,
    /// v heads, a multiple of `num_k`.
    pub num_v: usize,
    /// Rows per sequence (1: one decode step; more: speculative
    /// verification rows).
    pub t: usize,
    /// Sequences.
    pub batch: usize,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
    /// The state is asked for after every row, not only after the last.
    pub per_row: bool,
    /// The states live in a pool of slots addressed by
    /// `ssm_state_indices` ([`super::slots`]), updated in place; `None`:
    /// one state per sequence, in and out.
    pub pool: Option<PoolMode>,
}

impl Spec {
    /// Rows whose state is an output: `t` with [`Spec::per_row`], else 1.
    pub fn state_rows(&self) -> usize {
        if self.per_row {
            self.t
        } else {
            1
        }
    }

    /// The default seed of a shape and arm (a check's first trial).
    pub fn base_seed(num_k: usize, num_v: usize, t: usize, batch: usize, arm: Arm) -> u64 {
        0x6A7E_D0E1_7A00_0000
            ^ ((num_k as u64) << 40)
            ^ ((num_v as u64) << 28)
            ^ ((t as u64) << 16)
            ^ ((batch as u64) << 4)
            ^ arm.index()
    }

    /// The shape as core checks it (`d_conv` 4, unused here).
    ///
    /// # Errors
    /// Core's sentence for a zero dimension or `num_v % num_k != 0`; a
    /// zero batch; [`Spec::per_row`] with a pool (the pool holds the
    /// states it asks for); a case over [`MAX_ELEMS`] (a pool counts
    /// twice: its slots are at most twice the states the batch names, plus
    /// one).
    pub fn shape(&self) -> Result<GdnShape, String> {
        let s =
            GdnShape::new(self.num_k, self.num_v, D_STATE, 4, self.t).map_err(|e| e.to_string())?;
        if self.batch == 0 {
            return Err("batch: 0 sequences, expected at least 1".into());
        }
        if self.per_row && self.pool.is_some() {
            return Err(
                "states=True with a pool: the pool's slots hold the states (spec mode stores the state after every row)"
                    .into(),
            );
        }
        let big = self
            .batch
            .saturating_mul(self.t)
            .saturating_mul(self.num_v)
            .saturating_mul(D_STATE * D_STATE)
            .saturating_mul(if self.pool.is_some() { 2 } else { 1 });
        if big > MAX_ELEMS {
            return Err(format!(
                "num_k={} num_v={} t={} batch={}: B t num_v 128^2 = {big} state elements to walk, over the check's {MAX_ELEMS}",
                self.num_k, self.num_v, self.t, self.batch
            ));
        }
        Ok(s)
    }

    /// The case's inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`].
    pub fn generate(&self) -> Result<Data, String> {
        let s = self.shape()?;
        let (nk, nv, t, b) = (self.num_k, self.num_v, self.t, self.batch);
        let mut rng = Rng(self.seed);
        let uniform = |rng: &mut Rng, lo: f32, hi: f32| lo + (hi - lo) * rng.f01();
        let (a_lo, a_hi) = match self.arm {
            Arm::Gates => (-6.0, 0.0),
            _ => (-2.0, 1.0),
        };
        let a_log: Vec<f32> = (0..nv).map(|_| uniform(&mut rng, a_lo, a_hi)).collect();
        let dt_bias: Vec<f32> = (0..nv).map(|_| uniform(&mut rng, -1.0, 1.0)).collect();
        let heads = |rng: &mut Rng, n: usize| -> Vec<f32> {
            let mut x = vec![0f32; n * D_STATE];
            for head in x.chunks_mut(D_STATE) {
                let scale = match self.arm {
                    Arm::Norm => [1.0, 0.0, 1e-3, 1e-4][rng.below(4)],
                    _ => 1.0,
                };
                for e in head.iter_mut() {
                    *e = rng.normal() * scale;
                }
            }
            x
        };
        let q = heads(&mut rng, b * t * nk);
        let k = heads(&mut rng, b * t * nk);
        let v: Vec<f32> = (0..b * t * nv * D_STATE).map(|_| rng.normal()).collect();
        let mut alpha = vec![0f32; b * t * nv];
        let mut beta_raw = vec![0f32; b * t * nv];
        for i in 0..b * t * nv {
            let h = i % nv;
            alpha[i] = match self.arm {
                Arm::Gates => {
                    let x = match rng.below(4) {
                        0 => rng.normal(),
                        1 => uniform(&mut rng, 89.0, 200.0),
                        2 => uniform(&mut rng, 5.0, 25.0),
                        _ => uniform(&mut rng, -120.0, -20.0),
                    };
                    x - dt_bias[h]
                }
                _ => rng.normal(),
            };
            beta_raw[i] = match (self.arm, rng.below(4)) {
                (Arm::Gates, 2) => uniform(&mut rng, 10.0, 40.0),
                (Arm::Gates, 3) => -uniform(&mut rng, 10.0, 40.0),
                _ => rng.normal(),
            };
        }
        let state: Vec<f32> = (0..b * s.state_len()).map(|_| 0.1 * rng.normal()).collect();
        let pool = self
            .pool
            .map(|mode| StatePool::draw(mode, self.seed, b, t, &state));
        Ok(Data {
            q,
            k,
            v,
            alpha,
            beta_raw,
            a_log,
            dt_bias,
            state,
            pool,
        })
    }
}

/// A case's inputs (layouts in the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    /// `[B][t][num_k][128]`.
    pub q: Vec<f32>,
    /// `[B][t][num_k][128]`.
    pub k: Vec<f32>,
    /// `[B][t][num_v][128]`.
    pub v: Vec<f32>,
    /// `[B][t][num_v]`.
    pub alpha: Vec<f32>,
    /// `[B][t][num_v]`.
    pub beta_raw: Vec<f32>,
    /// `[num_v]`.
    pub a_log: Vec<f32>,
    /// `[num_v]`.
    pub dt_bias: Vec<f32>,
    /// `[B][num_v][128][128]`: each sequence's initial state (with a
    /// pool, the contents of its read slot; a padded sequence's is used by
    /// no one).
    pub state: Vec<f32>,
    /// The pool and its indices, with [`Spec::pool`].
    pub pool: Option<StatePool>,
}

/// The oracle's outputs and the limits they are judged by.
#[derive(Clone, Debug)]
pub struct Want {
    /// `[B][t][num_v][128]`: core's bits.
    pub o: Vec<f32>,
    /// `[B][num_v][128][128]`: the state after the last row, core's bits;
    /// with [`Spec::per_row`], `[B][t][num_v][128][128]`, after each row.
    pub state: Vec<f32>,
    /// Per element of `o`: `2 B + FLOOR`.
    pub o_limit: Vec<f64>,
    /// Per element of `state`: `2 B + FLOOR`.
    pub state_limit: Vec<f64>,
    /// Per sequence, with a pool: padding, its `o` not judged (empty
    /// without a pool).
    pub padded: Vec<bool>,
}

/// One sequence's slices of a case: `(q, k, v, alpha, beta_raw, state)`.
fn sequence<'d>(spec: &Spec, d: &'d Data, b: usize) -> [&'d [f32]; 6] {
    let (nk, nv, t) = (spec.num_k, spec.num_v, spec.t);
    let (kq, kv, g, n) = (
        t * nk * D_STATE,
        t * nv * D_STATE,
        t * nv,
        nv * D_STATE * D_STATE,
    );
    [
        &d.q[b * kq..(b + 1) * kq],
        &d.k[b * kq..(b + 1) * kq],
        &d.v[b * kv..(b + 1) * kv],
        &d.alpha[b * g..(b + 1) * g],
        &d.beta_raw[b * g..(b + 1) * g],
        &d.state[b * n..(b + 1) * n],
    ]
}

/// The oracle: core's [`prep_rows`] on the conv output `q | k | v` of each
/// row, then the scan (`crate::gdn_fast::scan_rows_fast`, bit-identical to
/// `oracle::gdn::scan::scan_rows`), sequence by sequence; and each
/// element's limit from [`bound`]. With a pool, `state` is the pool after
/// the call ([`StatePool::scatter`]: the slots written hold their states,
/// every other slot its bits, limit 0).
///
/// # Errors
/// As [`Spec::shape`]; a slice of `d` whose length disagrees with `spec`;
/// a pool missing from `d` when `spec` asks for one.
pub fn reference(spec: &Spec, d: &Data) -> Result<Want, String> {
    if let Some(mode) = spec.pool {
        let p = StatePool::of(d.pool.as_ref(), mode, spec.batch)?;
        let per_sequence = Spec {
            per_row: mode == PoolMode::Spec,
            pool: None,
            ..*spec
        };
        let mut w = reference(&per_sequence, d)?;
        (w.state, w.state_limit) = p.scatter(&w.state, &w.state_limit);
        w.padded = p.padding();
        return Ok(w);
    }
    let s = spec.shape()?;
    let (nk, nv, t) = (spec.num_k, spec.num_v, spec.t);
    let (kd, vd, cd, n) = (s.key_dim(), s.value_dim(), s.conv_dim(), s.state_len());
    let want_len = |what: &str, got: usize, want: usize| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: {got} elements, expected {want}"))
        }
    };
    let b = spec.batch;
    want_len("q", d.q.len(), b * t * kd)?;
    want_len("k", d.k.len(), b * t * kd)?;
    want_len("v", d.v.len(), b * t * vd)?;
    want_len("alpha", d.alpha.len(), b * t * nv)?;
    want_len("beta_raw", d.beta_raw.len(), b * t * nv)?;
    want_len("a_log", d.a_log.len(), nv)?;
    want_len("dt_bias", d.dt_bias.len(), nv)?;
    want_len("state", d.state.len(), b * n)?;
    let params = GdnParams {
        conv_w: &[],
        dt_bias: &d.dt_bias,
        a_log: &d.a_log,
        eps: EPS,
        scale: default_scale(),
    };
    let sn = spec.state_rows() * n;
    let mut w = Want {
        o: vec![0.0; b * t * vd],
        state: vec![0.0; b * sn],
        o_limit: vec![0.0; b * t * vd],
        state_limit: vec![0.0; b * sn],
        padded: Vec::new(),
    };
    let mut conv = vec![0f32; t * cd];
    let (mut hq, mut hk, mut hv) = (vec![0f32; t * vd], vec![0f32; t * vd], vec![0f32; t * vd]);
    let (mut beta, mut g) = (vec![0f32; t * nv], vec![0f32; t * nv]);
    let mut alt = vec![0f32; n];
    let mut snap = vec![0f32; (t - 1) * n];
    for seq in 0..b {
        let [q, k, v, alpha, beta_raw, state0] = sequence(spec, d, seq);
        for r in 0..t {
            let row = &mut conv[r * cd..(r + 1) * cd];
            row[..kd].copy_from_slice(&q[r * kd..(r + 1) * kd]);
            row[kd..2 * kd].copy_from_slice(&k[r * kd..(r + 1) * kd]);
            row[2 * kd..].copy_from_slice(&v[r * vd..(r + 1) * vd]);
        }
        let mut heads = HeadsMut {
            q: &mut hq,
            k: &mut hk,
            v: &mut hv,
            beta: &mut beta,
            g: &mut g,
        };
        prep_rows(&s, &params, &conv, beta_raw, alpha, &mut heads).map_err(|e| e.to_string())?;
        let mut canonical = state0.to_vec();
        let o = &mut w.o[seq * t * vd..(seq + 1) * t * vd];
        let slot = scan_rows_fast(
            &s,
            &heads.as_heads(),
            params.scale,
            StatePair {
                canonical: &mut canonical,
                alt: &mut alt,
            },
            o,
            &mut snap,
        )
        .map_err(|e| e.to_string())?;
        let last = match slot {
            StateSlot::Canonical => &canonical,
            StateSlot::Alt => &alt,
        };
        let states = &mut w.state[seq * sn..(seq + 1) * sn];
        if spec.per_row {
            states[..(t - 1) * n].copy_from_slice(&snap);
        }
        states[sn - n..].copy_from_slice(last);
        let bnd = bound(
            nk,
            nv,
            t,
            Layer {
                a_log: &d.a_log,
                dt_bias: &d.dt_bias,
            },
            [q, k, v, alpha, beta_raw],
            state0,
            spec.per_row,
        );
        for (l, e) in w.o_limit[seq * t * vd..].iter_mut().zip(&bnd.o_err) {
            *l = 2.0 * e + FLOOR;
        }
        for (l, e) in w.state_limit[seq * sn..].iter_mut().zip(&bnd.state_err) {
            *l = 2.0 * e + FLOOR;
        }
    }
    Ok(w)
}

/// The layer's gate parameters, `[num_v]` each.
#[derive(Clone, Copy, Debug)]
pub struct Layer<'a> {
    /// `A_log`.
    pub a_log: &'a [f32],
    /// `dt_bias`.
    pub dt_bias: &'a [f32],
}

/// The formula evaluated in f64 and its bound `B`, for one sequence.
#[derive(Clone, Debug)]
pub struct Bound {
    /// `o` `[t][num_v][128]`, the formula in f64 (its own rounding,
    /// about `2^-29` of `B`'s unit, is left out).
    pub o: Vec<f64>,
    /// The final state `[num_v][128][128]` in f64; with `per_row`, the
    /// state after every row, `[t][num_v][128][128]`.
    pub state: Vec<f64>,
    /// `B` for each element of `o`.
    pub o_err: Vec<f64>,
    /// `B` for each element of `state`.
    pub state_err: Vec<f64>,
}

/// A first-order forward-error bound `B` of one f32 evaluation of the
/// contract, in any order of its sums, with or without fused
/// multiply-adds and with approximate transcendentals, for one sequence
/// (`rows` = `[q, k, v, alpha, beta_raw]` in the layouts of the module
/// docs, `state0` `[num_v][128][128]`). Per row and v head, with `u =
/// 2^-24`, `T =` [`TRANSCENDENTAL`], `G = gamma(130)` and `d` the bound of
/// each intermediate (`|x|` elementwise):
///
/// - `q = x / sqrt(x.x + eps)`: `dq = (G + 3 T) |q|` (the sum of squares,
///   the square root, the division); `k` the same;
/// - `beta = sigmoid(beta_raw)`: `C = 2 T + u` relative (a composite:
///   `exp`, then a division), carried in `delta`'s;
/// - `g = -exp(a_log) softplus(a)`, `a = alpha + dt_bias` rounded: `g`'s
///   relative bound `T + C + (kappa + 1) u` (`exp`, softplus composed of
///   `exp` and `log`, the product), `kappa = max(1, |a| sigmoid(a) /
///   softplus(a))` (softplus's condition number; 1 on its linear side
///   above 20);
/// - `e = exp(g)`: `de = e (T + |g| dg_rel)`;
/// - `S1 = e S`: `dS1 = e dS + de |S| + u |S1|`;
/// - `kv = k.S1` (over the key index): `dkv = G |k|.|S1| + dk.|S1| +
///   |k|.dS1`;
/// - `delta = beta (v - kv)`: `ddelta = beta (dkv + 2 u (|v| + |kv|)) + C
///   |delta|`;
/// - `S2 = S1 + k delta^T`: `dS2 = dS1 + dk |delta|^T + |k| ddelta^T + 2 u
///   (|S1| + |k delta^T|)`;
/// - `o = scale (q.S2)`: `do = scale (G |q|.|S2| + dq.|S2| + |q|.dS2) + 2 u
///   |o|`.
///
/// The state's bound is carried from row to row; `per_row` keeps the state
/// and its bound after every row, else after the last. Second-order terms
/// (products of two `u`-sized relative errors, `u^2 = 2^-48`) are left
/// out.
pub fn bound(
    num_k: usize,
    num_v: usize,
    t: usize,
    layer: Layer<'_>,
    rows: [&[f32]; 5],
    state0: &[f32],
    per_row: bool,
) -> Bound {
    let [q, k, v, alpha, beta_raw] = rows;
    let (ratio, kd, vd, hs) = (
        num_v / num_k,
        num_k * D_STATE,
        num_v * D_STATE,
        D_STATE * D_STATE,
    );
    let (g_dot, tr) = (gamma(DOT_TERMS), TRANSCENDENTAL);
    // Sigmoid and softplus as kernels build them: two approximate
    // operations and a rounding.
    let composite = 2.0 * tr + U;
    let scale = f64::from(default_scale());
    let mut s: Vec<f64> = state0.iter().map(|&x| f64::from(x)).collect();
    let mut ds = vec![0f64; s.len()];
    let mut out = Bound {
        o: vec![0.0; t * vd],
        state: Vec::new(),
        o_err: vec![0.0; t * vd],
        state_err: Vec::new(),
    };
    let norm = |x: &[f32]| -> ([f64; D_STATE], [f64; D_STATE]) {
        let ss: f64 = x.iter().map(|&e| f64::from(e) * f64::from(e)).sum();
        let inv = 1.0 / (ss + f64::from(EPS)).sqrt();
        let (mut y, mut dy) = ([0f64; D_STATE], [0f64; D_STATE]);
        for i in 0..D_STATE {
            y[i] = f64::from(x[i]) * inv;
            dy[i] = (g_dot + 3.0 * tr) * y[i].abs();
        }
        (y, dy)
    };
    let (mut s1, mut ds1) = (vec![0f64; hs], vec![0f64; hs]);
    for r in 0..t {
        for h in 0..num_v {
            let hk = h / ratio;
            let (qh, dqh) = norm(&q[r * kd + hk * D_STATE..][..D_STATE]);
            let (kh, dkh) = norm(&k[r * kd + hk * D_STATE..][..D_STATE]);
            let vh = &v[r * vd + h * D_STATE..][..D_STATE];
            let gi = r * num_v + h;
            let beta = 1.0 / (1.0 + (-f64::from(beta_raw[gi])).exp());
            let a = f64::from(alpha[gi]) + f64::from(layer.dt_bias[h]);
            let sp = if a > 20.0 { a } else { a.exp().ln_1p() };
            let g = -f64::from(layer.a_log[h]).exp() * sp;
            let kappa = if a > 20.0 || sp <= 0.0 {
                1.0
            } else {
                (a.abs() / (1.0 + (-a).exp()) / sp).max(1.0)
            };
            let g_rel = tr + composite + (kappa + 1.0) * U;
            let e = g.exp();
            let de = e * (tr + g.abs() * g_rel);
            let sh = &mut s[h * hs..(h + 1) * hs];
            let dsh = &mut ds[h * hs..(h + 1) * hs];
            let (mut kv, mut dkv) = ([0f64; D_STATE], [0f64; D_STATE]);
            for i in 0..D_STATE {
                for j in 0..D_STATE {
                    let x = i * D_STATE + j;
                    s1[x] = e * sh[x];
                    ds1[x] = e * dsh[x] + de * sh[x].abs() + U * s1[x].abs();
                    kv[j] += kh[i] * s1[x];
                    dkv[j] +=
                        g_dot * (kh[i] * s1[x]).abs() + dkh[i] * s1[x].abs() + kh[i].abs() * ds1[x];
                }
            }
            let (mut delta, mut ddelta) = ([0f64; D_STATE], [0f64; D_STATE]);
            for j in 0..D_STATE {
                let vj = f64::from(vh[j]);
                delta[j] = beta * (vj - kv[j]);
                ddelta[j] = beta * (dkv[j] + 2.0 * U * (vj.abs() + kv[j].abs()))
                    + composite * delta[j].abs();
            }
            let (mut o, mut dot) = ([0f64; D_STATE], [0f64; D_STATE]);
            for i in 0..D_STATE {
                for j in 0..D_STATE {
                    let x = i * D_STATE + j;
                    let kd_ = kh[i] * delta[j];
                    sh[x] = s1[x] + kd_;
                    dsh[x] = ds1[x]
                        + dkh[i] * delta[j].abs()
                        + kh[i].abs() * ddelta[j]
                        + 2.0 * U * (s1[x].abs() + kd_.abs());
                    o[j] += qh[i] * sh[x];
                    dot[j] +=
                        g_dot * (qh[i] * sh[x]).abs() + dqh[i] * sh[x].abs() + qh[i].abs() * dsh[x];
                }
            }
            let base = r * vd + h * D_STATE;
            for j in 0..D_STATE {
                let oj = scale * o[j];
                out.o[base + j] = oj;
                out.o_err[base + j] = scale * dot[j] + 2.0 * U * oj.abs();
            }
        }
        if per_row || r + 1 == t {
            out.state.extend_from_slice(&s);
            out.state_err.extend_from_slice(&ds);
        }
    }
    out
}

/// A case's verdict: both outputs, judged bit for bit or by the bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `o`.
    pub o: Part,
    /// The final state.
    pub state: Part,
    /// The implementation declared core's arithmetic: bit for bit.
    pub bit_exact: bool,
}

impl Verdict {
    /// Judges `o` and `state` (the callable's, in the module docs'
    /// layouts; with a pool, `state` is the pool after the call) against
    /// `want`. A padded sequence's `o` rows are not judged: they count as
    /// identical, whatever they hold.
    pub fn judge(o: &[f32], state: &[f32], want: &Want, bit_exact: bool) -> Verdict {
        let o = unjudged_padding(o, &want.o, &want.padded);
        Verdict {
            o: Part::judge(&o, &want.o, &want.o_limit),
            state: Part::judge(state, &want.state, &want.state_limit),
            bit_exact,
        }
    }

    /// Passed: bit for bit when declared, else within the bound.
    pub fn pass(&self) -> bool {
        if self.bit_exact {
            self.o.bit_exact() && self.state.bit_exact()
        } else {
            self.o.within() && self.state.within()
        }
    }
}

/// A pool's flat index as `(slot, v head, key i, value j)`.
pub fn pool_index(spec: &Spec, i: usize) -> (usize, usize, usize, usize) {
    let j = i % D_STATE;
    let k = (i / D_STATE) % D_STATE;
    let h = (i / (D_STATE * D_STATE)) % spec.num_v;
    (i / (D_STATE * D_STATE * spec.num_v), h, k, j)
}

/// `o`'s flat index as `(sequence, row, v head, value j)`.
pub fn o_index(spec: &Spec, i: usize) -> (usize, usize, usize, usize) {
    let j = i % D_STATE;
    let h = (i / D_STATE) % spec.num_v;
    let r = (i / (D_STATE * spec.num_v)) % spec.t;
    (i / (D_STATE * spec.num_v * spec.t), r, h, j)
}

/// The state's flat index as `(sequence, row, v head, key i, value j)`
/// (row `t - 1` when only the final state is an output).
pub fn state_index(spec: &Spec, i: usize) -> (usize, usize, usize, usize, usize) {
    let j = i % D_STATE;
    let k = (i / D_STATE) % D_STATE;
    let h = (i / (D_STATE * D_STATE)) % spec.num_v;
    let row = i / (D_STATE * D_STATE * spec.num_v);
    let (rows, last) = (spec.state_rows(), spec.t - spec.state_rows());
    (row / rows, last + row % rows, h, k, j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(num_k: usize, num_v: usize, t: usize, batch: usize, arm: Arm) -> Spec {
        Spec {
            num_k,
            num_v,
            t,
            batch,
            arm,
            seed: Spec::base_seed(num_k, num_v, t, batch, arm),
            per_row: false,
            pool: None,
        }
    }

    /// With a pool the rule's data are those of the same seed without
    /// one, each live sequence's stored rows land in their slots, every
    /// other slot keeps its bits (any change fails, bit-exact or not), and
    /// a padded sequence's `o` is not judged.
    #[test]
    fn a_pool_scatters_the_rule_and_keeps_the_rest() {
        let (nk, nv, t, b) = (1, 2, 3, 4);
        let n = nv * D_STATE * D_STATE;
        for mode in PoolMode::ALL {
            for seed in 0..6u64 {
                let plain = Spec {
                    seed,
                    ..spec(nk, nv, t, b, Arm::Rand)
                };
                let sp = Spec {
                    pool: Some(mode),
                    ..plain
                };
                let d = sp.generate().unwrap();
                let p = d.pool.clone().unwrap();
                assert_eq!(d.q, plain.generate().unwrap().q);
                let rows = Spec {
                    per_row: true,
                    ..plain
                };
                let per_row = reference(&rows, &d).unwrap();
                let w = reference(&sp, &d).unwrap();
                assert_eq!(w.state.len(), p.slots * n);
                let mut written = vec![false; p.slots];
                for seq in (0..b).filter(|&s| !p.padded(s)) {
                    let c = mode.columns(t);
                    for (r, &i) in p.indices[seq * c..(seq + 1) * c].iter().enumerate() {
                        let Ok(slot) = usize::try_from(i) else {
                            continue;
                        };
                        let row = if mode == PoolMode::Spec { r } else { t - 1 };
                        let from = (seq * t + row) * n;
                        assert_eq!(
                            &w.state[slot * n..(slot + 1) * n],
                            &per_row.state[from..from + n]
                        );
                        written[slot] = true;
                    }
                }
                for s in (0..p.slots).filter(|&s| !written[s]) {
                    assert_eq!(&w.state[s * n..(s + 1) * n], &p.pool[s * n..(s + 1) * n]);
                    assert!(w.state_limit[s * n..(s + 1) * n].iter().all(|&l| l == 0.0));
                }
                assert!(Verdict::judge(&w.o, &w.state, &w, true).pass());
                let spare = (0..p.slots).find(|&s| !written[s]).unwrap();
                let mut pool = w.state.clone();
                pool[spare * n + 5] *= 1.0 + 1e-6;
                assert!(!Verdict::judge(&w.o, &pool, &w, false).pass());
                let mut o = w.o.clone();
                let per_seq = t * nv * D_STATE;
                for seq in 0..b {
                    if p.padded(seq) {
                        o[seq * per_seq..(seq + 1) * per_seq].fill(f32::NAN);
                    }
                }
                assert!(Verdict::judge(&o, &w.state, &w, true).pass());
                if let Some(live) = (0..b).find(|&s| !p.padded(s)) {
                    o[live * per_seq] = f32::NAN;
                    assert!(!Verdict::judge(&o, &w.state, &w, false).pass());
                }
            }
        }
        let both = Spec {
            per_row: true,
            pool: Some(PoolMode::Spec),
            ..spec(1, 1, 2, 1, Arm::Rand)
        };
        assert!(both.shape().is_err());
    }

    /// The oracle is one f32 evaluation of the formula, so it must lie
    /// within `B` of the f64 evaluation on every arm: the bound's own
    /// check. It must also not be vacuous: the worst element uses a
    /// visible share of it. With the state after every row too.
    #[test]
    fn the_oracle_lies_within_the_bound_of_the_formula() {
        for arm in Arm::ALL {
            for (nk, nv, t, b, per_row) in
                [(1, 2, 3, 2, false), (2, 4, 2, 1, false), (1, 2, 3, 2, true)]
            {
                let sp = Spec {
                    per_row,
                    ..spec(nk, nv, t, b, arm)
                };
                let d = sp.generate().unwrap();
                let w = reference(&sp, &d).unwrap();
                let (mut worst, mut n) = (0f64, 0usize);
                for seq in 0..b {
                    let [q, k, v, alpha, beta_raw, s0] = sequence(&sp, &d, seq);
                    let bd = bound(
                        nk,
                        nv,
                        t,
                        Layer {
                            a_log: &d.a_log,
                            dt_bias: &d.dt_bias,
                        },
                        [q, k, v, alpha, beta_raw],
                        s0,
                        per_row,
                    );
                    let vd = nv * D_STATE;
                    let ns = sp.state_rows() * nv * D_STATE * D_STATE;
                    assert_eq!(bd.state.len(), ns);
                    let o = &w.o[seq * t * vd..(seq + 1) * t * vd];
                    let s = &w.state[seq * ns..(seq + 1) * ns];
                    for (got, (x, e)) in o
                        .iter()
                        .zip(bd.o.iter().zip(&bd.o_err))
                        .chain(s.iter().zip(bd.state.iter().zip(&bd.state_err)))
                    {
                        let err = (f64::from(*got) - x).abs();
                        assert!(
                            err <= e + FLOOR,
                            "{arm:?} {nk},{nv},{t},{b}: oracle {got:e}, formula {x:e}, B {e:e}"
                        );
                        if *e > 0.0 {
                            worst = worst.max(err / e);
                        }
                        n += 1;
                    }
                }
                assert!(n > 0);
                assert!(
                    worst > 1e-3,
                    "{arm:?}: the bound is vacuous (worst {worst:e})"
                );
            }
        }
    }

    #[test]
    fn the_oracle_passes_itself_and_a_small_change_fails() {
        for arm in Arm::ALL {
            let sp = spec(2, 4, 3, 2, arm);
            let d = sp.generate().unwrap();
            let w = reference(&sp, &d).unwrap();
            for exact in [false, true] {
                let v = Verdict::judge(&w.o, &w.state, &w, exact);
                assert!(v.pass(), "{arm:?}");
                assert_eq!(v.o.identical, v.o.n);
            }
            // One part in 10^3 on every o, one in 10^4 on every state
            // element: far above rounding, so the bound must see both (o
            // is a cancelling sum of 128 terms, so its bound is wider
            // relative to it than the state's).
            let bump = |x: &[f32], by: f32| -> Vec<f32> { x.iter().map(|e| e * by).collect() };
            let v = Verdict::judge(&bump(&w.o, 1.001), &w.state, &w, false);
            assert!(!v.pass() && v.o.over > 0 && v.state.within(), "{arm:?} o");
            let v = Verdict::judge(&w.o, &bump(&w.state, 1.0001), &w, false);
            assert!(!v.pass() && v.state.over > 0, "{arm:?} state");
            let mut o = w.o.clone();
            o[7] = f32::NAN;
            let v = Verdict::judge(&o, &w.state, &w, false);
            assert!(!v.pass() && v.o.non_finite == 1 && v.o.first_over.unwrap().0 == 7);
            // One ulp somewhere fails a bit-exact declaration only.
            let mut o = w.o.clone();
            o[3] = f32::from_bits(o[3].to_bits() + 1);
            assert!(Verdict::judge(&o, &w.state, &w, false).pass());
            let v = Verdict::judge(&o, &w.state, &w, true);
            assert!(!v.pass() && v.o.max_ulp == 1);
        }
    }

    /// Each arm's regimes are drawn at their designed rates (one in four
    /// for each gate and norm regime, one in two for a saturating beta).
    #[test]
    fn arms_reach_their_regimes_at_the_designed_rates() {
        let sp = spec(4, 16, 8, 4, Arm::Gates);
        let d = sp.generate().unwrap();
        let x: Vec<f32> = (0..d.alpha.len())
            .map(|i| d.alpha[i] + d.dt_bias[i % sp.num_v])
            .collect();
        let share = |f: &dyn Fn(f32) -> bool, v: &[f32]| {
            v.iter().filter(|&&e| f(e)).count() as f64 / v.len() as f64
        };
        let near = |got: f64, want: f64| (got - want).abs() < 0.06;
        assert!(near(share(&|e| e > 88.9, &x), 0.25));
        assert!(near(share(&|e| (4.9..25.1).contains(&e), &x), 0.25));
        assert!(near(share(&|e| e < -19.9, &x), 0.25));
        assert!(near(share(&|e| e.abs() >= 10.0, &d.beta_raw), 0.5));
        let sp = spec(4, 4, 8, 4, Arm::Norm);
        let d = sp.generate().unwrap();
        let norms: Vec<f32> =
            d.q.chunks(D_STATE)
                .chain(d.k.chunks(D_STATE))
                .map(|h| h.iter().map(|e| e * e).sum::<f32>().sqrt())
                .collect();
        assert!(near(share(&|e| e == 0.0, &norms), 0.25));
        assert!(near(share(&|e| e > 0.0 && e < 0.05, &norms), 0.5));
        let sp = spec(4, 4, 8, 4, Arm::Rand);
        let d = sp.generate().unwrap();
        let norms: Vec<f32> =
            d.q.chunks(D_STATE)
                .map(|h| h.iter().map(|e| e * e).sum::<f32>().sqrt())
                .collect();
        assert!(norms.iter().all(|&e| e > 5.0));
    }

    #[test]
    fn a_shape_the_contract_refuses_is_an_error() {
        assert!(spec(3, 4, 1, 1, Arm::Rand).generate().is_err());
        assert!(spec(1, 1, 1, 0, Arm::Rand).generate().is_err());
        assert!(spec(1, 1, 0, 1, Arm::Rand).generate().is_err());
        assert!(spec(64, 4096, 1, 64, Arm::Rand).generate().is_err());
        assert!(spec(1, 128, 4096, 1, Arm::Rand).generate().is_err());
        assert!(spec(1, 1 << 40, 1 << 40, 1 << 40, Arm::Rand)
            .generate()
            .is_err());
        assert_eq!(Arm::parse("gates"), Ok(Arm::Gates));
        assert!(Arm::parse("EXACT").is_err());
    }

    #[test]
    fn indices_name_their_element() {
        let sp = spec(1, 2, 3, 2, Arm::Rand);
        let (b, r, h, j, k) = (1, 2, 1, 5, 7);
        assert_eq!(o_index(&sp, ((b * 3 + r) * 2 + h) * 128 + j), (b, r, h, j));
        assert_eq!(
            state_index(&sp, ((b * 2 + h) * 128 + k) * 128 + j),
            (b, 2, h, k, j)
        );
        let sp = Spec {
            per_row: true,
            ..sp
        };
        assert_eq!(
            state_index(&sp, (((b * 3 + r - 1) * 2 + h) * 128 + k) * 128 + j),
            (b, r - 1, h, k, j)
        );
    }

    /// The state after every row: the last row's is the final state, and
    /// each earlier one is what a call of only the rows up to it leaves.
    #[test]
    fn per_row_states_are_the_states_of_shorter_calls() {
        let sp = spec(2, 4, 3, 2, Arm::Rand);
        let d = sp.generate().unwrap();
        let all = reference(
            &Spec {
                per_row: true,
                ..sp
            },
            &d,
        )
        .unwrap();
        let n = 4 * D_STATE * D_STATE;
        for rows in 1..=3 {
            // The first `rows` rows of every sequence.
            let cut = |x: &[f32], per: usize| -> Vec<f32> {
                x.chunks(3 * per)
                    .flat_map(|c| c[..rows * per].to_vec())
                    .collect()
            };
            let short = Data {
                q: cut(&d.q, 2 * D_STATE),
                k: cut(&d.k, 2 * D_STATE),
                v: cut(&d.v, 4 * D_STATE),
                alpha: cut(&d.alpha, 4),
                beta_raw: cut(&d.beta_raw, 4),
                ..d.clone()
            };
            let w = reference(&Spec { t: rows, ..sp }, &short).unwrap();
            for seq in 0..2 {
                let row = &all.state[(seq * 3 + rows - 1) * n..][..n];
                assert_eq!(
                    row,
                    &w.state[seq * n..(seq + 1) * n],
                    "rows {rows} seq {seq}"
                );
            }
        }
    }
}
