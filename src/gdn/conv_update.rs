//! The causal conv1d update as the field's kernels compute it: GDN
//! decode's conv (seed 003; core's [`conv1d_rows`]) in the layouts of
//! Dao-AILab causal-conv1d's `causal_conv1d_update(x, conv_state, weight,
//! bias=None, activation="silu")` and vLLM's Triton port, for judging
//! them. Any channel count is allowed (channels are independent, so the
//! oracle runs core's conv on the channels padded to a GDN shape and
//! keeps the first `dim`).
//!
//! A case, per sequence `b` of `B` (f32 elements, row-major):
//! - `x`: `[B][dim][t]`, `t` new inputs per channel, oldest first;
//! - `conv_state`: `[B][dim][L]`, the previous `L` inputs, oldest first,
//!   `L = P = d_conv - 1` except on the `LONG` arm, where `L` is `P + 1` to
//!   `P + 3` (causal-conv1d's and vLLM's `state_len >= width - 1`: the
//!   window reads the state's trailing `P` entries);
//! - `weight`: `[dim][d_conv]`, tap `d_conv - 1` on the newest input (a
//!   cross-correlation, `Conv1d`'s weight without its middle axis).
//!
//! Outputs: `out [B][dim][t]`, `SiLU(sum_i weight[c][i] win[i])` over the
//! window of the `d_conv` inputs ending at each new one, and the final
//! state `[B][dim][L]`, the last `L` inputs (state then `x`); or, with
//! [`Spec::per_row`], the state after every new input, `[B][t][dim][L]`
//! (what speculative verification rolls back to; the last is the final
//! state).
//!
//! With [`Spec::pool`] (decode only) the states live in a pool of slots
//! addressed by `conv_state_indices` (vLLM's `causal_conv1d_update`),
//! updated in place, and the state output is the pool after the call
//! ([`super::slots`]).
//!
//! The judge: the state bit for bit always (it is data moved, never
//! computed); `out` bit for bit when the implementation declares core's
//! arithmetic, else within `2 B + 2^-100` of the oracle's ([`bound`]).

use super::rule::{gamma, FLOOR, TRANSCENDENTAL, U};
use super::slots::{unjudged_padding, PoolMode, StatePool};
use crate::elementwise::Part;
use crate::rng::Rng;
use oracle::gdn::conv::conv1d_rows;
use oracle::gdn::{GdnShape, D_STATE};

/// The data a case draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal inputs and state, weights `0.5 N(0, 1)`.
    Rand,
    /// Inputs and state `60 N(0, 1)`: pre-activations past +-88 in about
    /// one output in seven, where SiLU's `exp` overflows or underflows in f32 and a
    /// naive `x / (1 + exp(-x))` must still give `x` or a signed zero.
    Wide,
    /// RAND's data with a state longer than the window needs, `L = P + 1`
    /// to `P + 3` (a third each): a kernel must read the state's trailing
    /// `P` entries and shift all `L` (SGLang issue 38622: a Triton port
    /// that read the first `P`).
    Long,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 3] = [Arm::Rand, Arm::Wide, Arm::Long];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Wide => "WIDE",
            Arm::Long => "LONG",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        Arm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("arm {s:?}: expected \"RAND\", \"WIDE\" or \"LONG\""))
    }
}

/// The largest case: `B dim max(t, d_conv)` at most this.
pub const MAX_ELEMS: usize = 1 << 26;

/// One case: the shape, the arm and the data seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Channels (any count from 1).
    pub dim: usize,
    /// Taps, 2 to 4 (core's range; causal-conv1d's kernels take 2 to 4).
    pub d_conv: usize,
    /// New inputs per channel (1: one decode step).
    pub t: usize,
    /// Sequences.
    pub batch: usize,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
    /// The state is asked for after every new input, not only the last.
    pub per_row: bool,
    /// The states live in a pool of slots addressed by
    /// `conv_state_indices` ([`super::slots`]; decode only), updated in
    /// place; `None`: one state per sequence, in and out.
    pub pool: Option<PoolMode>,
}

impl Spec {
    /// Inputs whose state is an output: `t` with [`Spec::per_row`], else 1.
    pub fn state_rows(&self) -> usize {
        if self.per_row {
            self.t
        } else {
            1
        }
    }

    /// The default seed of a shape and arm.
    pub fn base_seed(dim: usize, d_conv: usize, t: usize, batch: usize, arm: Arm) -> u64 {
        0xC0A7_1D00_0000_0000
            ^ ((dim as u64) << 24)
            ^ ((d_conv as u64) << 20)
            ^ ((t as u64) << 8)
            ^ ((batch as u64) << 1)
            ^ match arm {
                Arm::Rand => 0,
                Arm::Wide => 1,
                Arm::Long => 2 << 60,
            }
    }

    /// The GDN shape whose channels cover `dim` (`num_k` 1, `num_v` the
    /// fewest that reach it), as core checks it.
    ///
    /// # Errors
    /// A zero dimension, `d_conv` outside 2..=4 (core's sentence), a case
    /// over [`MAX_ELEMS`]; a pool in spec mode (the conv's speculative
    /// window is not modelled) or with [`Spec::per_row`].
    pub fn shape(&self) -> Result<GdnShape, String> {
        if self.dim == 0 || self.batch == 0 {
            return Err(format!(
                "dim={} batch={}: both must be at least 1",
                self.dim, self.batch
            ));
        }
        match self.pool {
            Some(PoolMode::Spec) => {
                return Err("pool=\"spec\": the conv's speculative window (num_accepted_tokens) is not modelled; the conv takes pool=\"decode\"".into())
            }
            Some(PoolMode::Decode) if self.per_row => {
                return Err("states=True with a pool: the pool's slots hold the states".into())
            }
            _ => {}
        }
        let big = self
            .batch
            .saturating_mul(self.dim)
            .saturating_mul(self.t.max(self.d_conv));
        if big > MAX_ELEMS {
            return Err(format!(
                "dim={} d_conv={} t={} batch={}: {big} elements, over the check's {MAX_ELEMS}",
                self.dim, self.d_conv, self.t, self.batch
            ));
        }
        let num_v = self
            .dim
            .saturating_sub(2 * D_STATE)
            .div_ceil(D_STATE)
            .max(1);
        GdnShape::new(1, num_v, D_STATE, self.d_conv, self.t).map_err(|e| e.to_string())
    }

    /// The case's inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`].
    pub fn generate(&self) -> Result<Data, String> {
        self.shape()?;
        let (c, t, b) = (self.dim, self.t, self.batch);
        let mut rng = Rng(self.seed);
        let wide = if self.arm == Arm::Wide { 60.0 } else { 1.0 };
        let weight = (0..c * self.d_conv).map(|_| 0.5 * rng.normal()).collect();
        let x = (0..b * c * t).map(|_| wide * rng.normal()).collect();
        let state_len = self.d_conv - 1
            + if self.arm == Arm::Long {
                1 + Rng(self.seed ^ 0x10A6).below(3)
            } else {
                0
            };
        let state: Vec<f32> = (0..b * c * state_len)
            .map(|_| wide * rng.normal())
            .collect();
        let pool = self
            .pool
            .map(|mode| StatePool::draw(mode, self.seed, b, t, &state));
        Ok(Data {
            x,
            state,
            state_len,
            weight,
            pool,
        })
    }
}

/// A case's inputs (layouts in the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    /// `[B][dim][t]`.
    pub x: Vec<f32>,
    /// `[B][dim][L]`.
    pub state: Vec<f32>,
    /// `L`, the state's inputs per channel: `d_conv - 1`, more on `LONG`.
    pub state_len: usize,
    /// `[dim][d_conv]`.
    pub weight: Vec<f32>,
    /// The pool and its indices, with [`Spec::pool`] (the pool's slots
    /// `[N][dim][L]`; `state` holds each sequence's read slot).
    pub pool: Option<StatePool>,
}

/// The oracle's outputs and `out`'s limits.
#[derive(Clone, Debug)]
pub struct Want {
    /// `[B][dim][t]`: core's bits.
    pub out: Vec<f32>,
    /// `[B][dim][L]`: the state after the last input; with
    /// [`Spec::per_row`], `[B][t][dim][L]`, after each.
    pub state: Vec<f32>,
    /// Per element of `out`: `2 B + FLOOR`.
    pub out_limit: Vec<f64>,
    /// Per sequence, with a pool: padding, its `out` not judged (empty
    /// without a pool).
    pub padded: Vec<bool>,
}

/// The oracle: core's [`conv1d_rows`] on each sequence, its channels
/// padded with zeros to [`Spec::shape`]'s; and `out`'s limits from
/// [`bound`].
///
/// With a pool, `state` is the pool after the call
/// ([`StatePool::scatter`]).
///
/// # Errors
/// As [`Spec::shape`]; a slice of `d` whose length disagrees with `spec`;
/// a pool missing from `d` when `spec` asks for one.
pub fn reference(spec: &Spec, d: &Data) -> Result<Want, String> {
    if let Some(mode) = spec.pool {
        spec.shape()?;
        let p = StatePool::of(d.pool.as_ref(), mode, spec.batch)?;
        let mut w = reference(
            &Spec {
                pool: None,
                ..*spec
            },
            d,
        )?;
        (w.state, _) = p.scatter(&w.state, &vec![0.0; w.state.len()]);
        w.padded = p.padding();
        return Ok(w);
    }
    let s = spec.shape()?;
    let (c, k, t, b) = (spec.dim, spec.d_conv, spec.t, spec.batch);
    let (p, cp, l) = (k - 1, s.conv_dim(), d.state_len);
    if l < p {
        return Err(format!("state_len {l}: below d_conv - 1 = {p}"));
    }
    for (what, got, want) in [
        ("x", d.x.len(), b * c * t),
        ("state", d.state.len(), b * c * l),
        ("weight", d.weight.len(), c * k),
    ] {
        if got != want {
            return Err(format!("{what}: {got} elements, expected {want}"));
        }
    }
    let mut w = vec![0f32; cp * k];
    w[..c * k].copy_from_slice(&d.weight);
    let sn = spec.state_rows() * c * l;
    let mut want = Want {
        out: vec![0.0; b * c * t],
        state: vec![0.0; b * sn],
        out_limit: vec![0.0; b * c * t],
        padded: Vec::new(),
    };
    let (mut xs, mut ring, mut out) = (vec![0f32; t * cp], vec![0f32; cp * p], vec![0f32; t * cp]);
    let mut snap = vec![0f32; (t - 1) * cp * p];
    for seq in 0..b {
        let x = &d.x[seq * c * t..(seq + 1) * c * t];
        let full = &d.state[seq * c * l..(seq + 1) * c * l];
        // The window's state: each channel's trailing P inputs.
        let st: Vec<f32> = full.chunks(l).flat_map(|ch| ch[l - p..].to_vec()).collect();
        let st = &st[..];
        xs.fill(0.0);
        ring.fill(0.0);
        for ch in 0..c {
            for r in 0..t {
                xs[r * cp + ch] = x[ch * t + r];
            }
        }
        ring[..c * p].copy_from_slice(st);
        conv1d_rows(&s, &xs, &w, &mut ring, &mut out, &mut snap).map_err(|e| e.to_string())?;
        let lim = bound(k, t, &d.weight, x, st);
        for ch in 0..c {
            for r in 0..t {
                let i = seq * c * t + ch * t + r;
                want.out[i] = out[r * cp + ch];
                want.out_limit[i] = 2.0 * lim[ch * t + r] + FLOOR;
            }
        }
        let states = &mut want.state[seq * sn..(seq + 1) * sn];
        if l == p {
            if spec.per_row {
                for (r, row) in snap.chunks(cp * p).enumerate() {
                    states[r * c * p..(r + 1) * c * p].copy_from_slice(&row[..c * p]);
                }
            }
            states[sn - c * p..].copy_from_slice(&ring[..c * p]);
        } else {
            // A longer state moves as a whole: after input r it is the last
            // L of the channel's state then x[..=r] (data moved, no
            // arithmetic).
            let rows = spec.state_rows();
            for (i, r) in (t - rows..t).enumerate() {
                for ch in 0..c {
                    let hist: Vec<f32> = full[ch * l..(ch + 1) * l]
                        .iter()
                        .chain(&x[ch * t..ch * t + r + 1])
                        .copied()
                        .collect();
                    let at = (i * c + ch) * l;
                    states[at..at + l].copy_from_slice(&hist[r + 1..r + 1 + l]);
                }
            }
        }
    }
    Ok(want)
}

/// A first-order forward-error bound `B` of one f32 evaluation of `out`
/// for one sequence (`x` `[dim][t]`, `state` `[dim][P]`, `weight`
/// `[dim][d_conv]`), returned `[dim][t]`: with `a = sum_i w_i win_i` (in
/// any order, with or without FMA, from a zero or no bias) and `S =
/// sum_i |w_i win_i|`, `B = T |silu(a)| + 1.1 gamma(d_conv + 1) S`, where
/// `T` = [`TRANSCENDENTAL`] covers SiLU's own evaluation and `1.1` bounds
/// `|silu'|` (Higham, *Accuracy and Stability of Numerical Algorithms*,
/// 2nd ed., section 3.1).
pub fn bound(d_conv: usize, t: usize, weight: &[f32], x: &[f32], state: &[f32]) -> Vec<f64> {
    let p = d_conv - 1;
    let dim = weight.len() / d_conv;
    let g = gamma(d_conv as f64 + 1.0);
    let mut b = vec![0f64; dim * t];
    for c in 0..dim {
        // The channel's inputs, oldest first: the state, then x.
        let hist: Vec<f64> = state[c * p..(c + 1) * p]
            .iter()
            .chain(&x[c * t..(c + 1) * t])
            .map(|&v| f64::from(v))
            .collect();
        for r in 0..t {
            let (mut a, mut s) = (0f64, 0f64);
            for i in 0..d_conv {
                let term = f64::from(weight[c * d_conv + i]) * hist[r + i];
                a += term;
                s += term.abs();
            }
            let silu = a / (1.0 + (-a).exp());
            b[c * t + r] = TRANSCENDENTAL * silu.abs() + 1.1 * g * s + U * silu.abs();
        }
    }
    b
}

/// A case's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// `out`, by the bound or bit for bit.
    pub out: Part,
    /// The final state, bit for bit.
    pub state: Part,
    /// The implementation declared core's arithmetic.
    pub bit_exact: bool,
}

impl Verdict {
    /// Judges the callable's `out` and final `state` (with a pool, the
    /// pool after the call) against `want`; a padded sequence's `out` is
    /// not judged.
    pub fn judge(out: &[f32], state: &[f32], want: &Want, bit_exact: bool) -> Verdict {
        let out = unjudged_padding(out, &want.out, &want.padded);
        Verdict {
            out: Part::judge(&out, &want.out, &want.out_limit),
            state: Part::judge(state, &want.state, &vec![0.0; want.state.len()]),
            bit_exact,
        }
    }

    /// Passed: the state bit for bit, and `out` bit for bit when declared
    /// or within the bound.
    pub fn pass(&self) -> bool {
        self.state.bit_exact()
            && if self.bit_exact {
                self.out.bit_exact()
            } else {
                self.out.within()
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dim: usize, d_conv: usize, t: usize, batch: usize, arm: Arm) -> Spec {
        Spec {
            dim,
            d_conv,
            t,
            batch,
            arm,
            seed: Spec::base_seed(dim, d_conv, t, batch, arm),
            per_row: false,
            pool: None,
        }
    }

    /// LONG: the output is RAND's conv over the state's trailing `P`
    /// inputs, and the state moves whole; `L` takes each of `P + 1..=P + 3`
    /// in about a third of the seeds.
    #[test]
    fn a_long_state_keeps_its_length_and_the_window_its_tail() {
        let (c, k, t, b) = (3, 3, 2, 2);
        let p = k - 1;
        let mut seen = [0usize; 3];
        for seed in 0..300u64 {
            let sp = Spec {
                seed,
                per_row: seed % 2 == 0,
                ..spec(c, k, t, b, Arm::Long)
            };
            let d = sp.generate().unwrap();
            let l = d.state_len;
            seen[l - p - 1] += 1;
            let w = reference(&sp, &d).unwrap();
            // The same case cut to its trailing P: the outputs agree.
            let cut = Data {
                state: d
                    .state
                    .chunks(l)
                    .flat_map(|ch| ch[l - p..].to_vec())
                    .collect(),
                state_len: p,
                ..d.clone()
            };
            let short = reference(&sp, &cut).unwrap();
            assert_eq!(w.out, short.out);
            let rows = sp.state_rows();
            assert_eq!(w.state.len(), b * rows * c * l);
            // Every state's last P inputs are the short case's state.
            for (long, short) in w.state.chunks(l).zip(short.state.chunks(p)) {
                assert_eq!(&long[l - p..], short);
            }
            // The final state's first inputs: the initial state's inputs
            // t places later (t < L here when L >= t + 1).
            if l > t {
                let at = (b - 1) * rows * c * l + (rows - 1) * c * l;
                assert_eq!(w.state[at], d.state[(b - 1) * c * l + t]);
            }
        }
        assert!(seen.iter().all(|&n| (70..130).contains(&n)), "{seen:?}");
    }

    /// With a pool: each live sequence's final state in its slot, every
    /// other slot as it was, padding's `out` not judged; spec refused.
    #[test]
    fn a_pool_holds_each_final_state_in_its_slot() {
        let (c, k, t, b) = (5, 4, 2, 4);
        let n = c * (k - 1);
        for seed in 0..8u64 {
            let plain = Spec {
                seed,
                ..spec(c, k, t, b, Arm::Rand)
            };
            let sp = Spec {
                pool: Some(PoolMode::Decode),
                ..plain
            };
            let d = sp.generate().unwrap();
            let p = d.pool.clone().unwrap();
            let own = reference(&plain, &d).unwrap();
            let w = reference(&sp, &d).unwrap();
            for seq in 0..b {
                match p.read_slot(seq) {
                    Some(s) => assert_eq!(
                        &w.state[s * n..(s + 1) * n],
                        &own.state[seq * n..(seq + 1) * n]
                    ),
                    None => assert!(w.padded[seq]),
                }
            }
            let live: Vec<usize> = (0..b).filter_map(|s| p.read_slot(s)).collect();
            for s in (0..p.slots).filter(|s| !live.contains(s)) {
                assert_eq!(&w.state[s * n..(s + 1) * n], &p.pool[s * n..(s + 1) * n]);
            }
            let mut out = w.out.clone();
            for seq in (0..b).filter(|&s| w.padded[s]) {
                out[seq * c * t..(seq + 1) * c * t].fill(f32::NAN);
            }
            assert!(Verdict::judge(&out, &w.state, &w, true).pass());
        }
        let spec_mode = Spec {
            pool: Some(PoolMode::Spec),
            ..spec(c, k, t, b, Arm::Rand)
        };
        assert!(spec_mode.generate().is_err());
    }

    /// The oracle against the direct definition in f64: within `B`.
    #[test]
    fn the_oracle_lies_within_the_bound_and_moves_the_state_exactly() {
        for arm in Arm::ALL {
            for (dim, k, t, b) in [(1, 4, 1, 1), (130, 3, 5, 2), (700, 2, 2, 3), (260, 4, 3, 1)] {
                let sp = spec(dim, k, t, b, arm);
                let d = sp.generate().unwrap();
                let w = reference(&sp, &d).unwrap();
                let (p, l) = (k - 1, d.state_len);
                for seq in 0..b {
                    let x = &d.x[seq * dim * t..(seq + 1) * dim * t];
                    let full = &d.state[seq * dim * l..(seq + 1) * dim * l];
                    let st: Vec<f32> = full.chunks(l).flat_map(|ch| ch[l - p..].to_vec()).collect();
                    let lim = bound(k, t, &d.weight, x, &st);
                    for c in 0..dim {
                        let hist: Vec<f32> = full[c * l..(c + 1) * l]
                            .iter()
                            .chain(&x[c * t..(c + 1) * t])
                            .copied()
                            .collect();
                        for r in 0..t {
                            let a: f64 = (0..k)
                                .map(|i| {
                                    f64::from(d.weight[c * k + i]) * f64::from(hist[l - p + r + i])
                                })
                                .sum();
                            let exact = a / (1.0 + (-a).exp());
                            let got = f64::from(w.out[seq * dim * t + c * t + r]);
                            assert!(
                                (got - exact).abs() <= lim[c * t + r] + FLOOR,
                                "{arm:?} {dim},{k},{t},{b} c={c} r={r}: {got:e} vs {exact:e}"
                            );
                        }
                        let last = &hist[hist.len() - l..];
                        assert_eq!(&w.state[(seq * dim + c) * l..(seq * dim + c + 1) * l], last);
                    }
                }
            }
        }
    }

    /// The state after every input: input r's is the window's last `P`
    /// inputs there, the last one the final state.
    #[test]
    fn per_row_states_are_the_windows_after_each_input() {
        let sp = Spec {
            per_row: true,
            ..spec(130, 4, 5, 2, Arm::Rand)
        };
        let d = sp.generate().unwrap();
        let w = reference(&sp, &d).unwrap();
        let final_only = reference(
            &Spec {
                per_row: false,
                ..sp
            },
            &d,
        )
        .unwrap();
        let (c, t, p) = (130, 5, 3);
        for seq in 0..2 {
            for r in 0..t {
                for ch in 0..c {
                    let hist: Vec<f32> = d.state[(seq * c + ch) * p..][..p]
                        .iter()
                        .chain(&d.x[(seq * c + ch) * t..][..t])
                        .copied()
                        .collect();
                    let got = &w.state[((seq * t + r) * c + ch) * p..][..p];
                    assert_eq!(
                        got,
                        &hist[r + 1..r + 1 + p],
                        "seq {seq} input {r} channel {ch}"
                    );
                }
            }
            let last = &w.state[((seq * t + t - 1) * c) * p..][..c * p];
            assert_eq!(last, &final_only.state[seq * c * p..][..c * p]);
        }
    }

    #[test]
    fn the_judge_passes_the_oracle_and_fails_changes() {
        let sp = spec(130, 4, 3, 2, Arm::Rand);
        let d = sp.generate().unwrap();
        let w = reference(&sp, &d).unwrap();
        assert!(Verdict::judge(&w.out, &w.state, &w, true).pass());
        let bumped: Vec<f32> = w.out.iter().map(|e| e * 1.0001).collect();
        assert!(!Verdict::judge(&bumped, &w.state, &w, false).pass());
        let mut st = w.state.clone();
        st[5] = f32::from_bits(st[5].to_bits() ^ 1);
        let v = Verdict::judge(&w.out, &st, &w, false);
        assert!(!v.pass() && v.out.within() && v.state.first_diff.unwrap().0 == 5);
        let mut o = w.out.clone();
        o[2] = f32::from_bits(o[2].to_bits() ^ 1);
        assert!(Verdict::judge(&o, &w.state, &w, false).pass());
        assert!(!Verdict::judge(&o, &w.state, &w, true).pass());
    }

    #[test]
    fn the_wide_arm_reaches_silu_tails_and_bad_shapes_are_errors() {
        let sp = spec(512, 4, 2, 2, Arm::Wide);
        let d = sp.generate().unwrap();
        let w = reference(&sp, &d).unwrap();
        // Pre-activations past +-88 (f32 exp's overflow): SiLU near 0 on
        // the left, the identity on the right.
        let tails = w.out.iter().filter(|o| o.abs() < 1e-30).count();
        assert!(tails > 0, "no left tail reached");
        assert!(w.out.iter().any(|&o| o > 88.0), "no right tail reached");
        assert!(spec(0, 4, 1, 1, Arm::Rand).generate().is_err());
        assert!(spec(8, 5, 1, 1, Arm::Rand).generate().is_err());
        assert!(spec(8, 1, 1, 1, Arm::Rand).generate().is_err());
        assert!(spec(8, 4, 0, 1, Arm::Rand).generate().is_err());
        assert!(spec(1 << 20, 4, 65, 1, Arm::Rand).generate().is_err());
        assert_eq!(Arm::parse("wide"), Ok(Arm::Wide));
    }
}
