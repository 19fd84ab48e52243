//! Case generation for the Gated DeltaNet decode step: an `Arbitrary`
//! [`CaseSpec`] biased to the edges (t = 1 and 16, every d_conv, eps = 0
//! and subnormal, |alpha| up to 10^4 so softplus takes its linear branch
//! and the decay underflows, zero q or k heads, states near the top of f32,
//! all-negative states, transcendental specials in the inputs) and the
//! [`CaseData`] it expands to.
//!
//! Every field of a [`CaseSpec`] is printed in a reproduction; the data
//! are drawn from `seed` with splitmix64, so the same spec regenerates the
//! same bytes on any host.

use crate::rng::Rng;
use arbitrary::{Arbitrary, Unstructured};
use oracle::gdn::{default_scale, GdnParams, GdnShape, D_STATE};

/// The generator's bounds, one place (cranelift-fuzzgen's `Config`). Small,
/// for a high exec rate: a state is `num_v * 64 KiB`.
pub mod config {
    /// q/k heads: 1 ..= this.
    pub const MAX_NUM_K: usize = 4;
    /// v heads per q/k head: 1 ..= this.
    pub const MAX_RATIO: usize = 4;
    /// v heads: at most this (the product above is capped).
    pub const MAX_NUM_V: usize = 8;
    /// Rows per packed call: 1 ..= this.
    pub const MAX_T: usize = 16;
    /// Sequences of a batched call: 1 ..= this.
    pub const MAX_BATCH: usize = 3;
}

/// Inputs that reach every branch of the transcendentals
/// (`oracle::gdn::transcendental::BRANCH_INPUTS`).
pub const SPECIALS: [f32; 18] = oracle::gdn::transcendental::BRANCH_INPUTS;

/// One Gated DeltaNet case: a shape, the layer's knobs and a data seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CaseSpec {
    /// q/k heads.
    pub num_k: usize,
    /// v heads (a multiple of `num_k`).
    pub num_v: usize,
    /// Conv taps, 2..=4.
    pub d_conv: usize,
    /// Rows per packed call.
    pub t: usize,
    /// The L2-norm epsilon (inside the square root).
    pub eps: f32,
    /// `alpha` is uniform in `[-alpha_spread, alpha_spread)` (2 in the
    /// seed; up to 1e4 here).
    pub alpha_spread: f32,
    /// The initial state is uniform in `[-state_spread, state_spread)` (0.3
    /// in the seed; up to 3e38 here, near f32's overflow).
    pub state_spread: f32,
    /// The initial state is drawn as `-|x|` instead (every element
    /// negative, the same spread; 1/4 of the fuzzer's cases, off in the
    /// seed). With a zero q head whose state column stays negative (the k
    /// head zero too, so the update adds `+0`), every term `c''_i q_i` of
    /// that head's o sum is `-0`: the contract's sum from `+0`
    /// (`READ-AFTER`, `oracle::gdn::scan`) gives `+0`, a sum seeded with
    /// its first term gives `-0`. A uniform state has such a column with
    /// odds 2^-128; the fuzzer's one-row split-entry case of it (num_k 1,
    /// ratio 2, t = 1, `zero_qk` 3, this, eps > 0) comes once in about
    /// 1036 cases (1/4 * 1/4 * 9/32 * 1/4 * 1/4 * 225/256, the
    /// selector bytes being independent).
    pub negative_state: bool,
    /// Bit 0: q head `num_k - 1` is all zeros after the conv (its conv
    /// weights are zero, so every tap is `0 * finite`); bit 1: the same
    /// for k head 0.
    pub zero_qk: u8,
    /// One input in 13 (qkv, ring, beta_raw, alpha) is a [`SPECIALS`]
    /// value.
    pub specials: bool,
    /// Also capture the packed step in a CUDA graph and replay it twice on
    /// rebound buffers (the second with canonical and alt swapped).
    pub graph: bool,
    /// splitmix64 seed of the data.
    pub seed: u64,
    /// Independent sequences of one batched call (1: no batched run).
    /// Sequence 0's data are [`CaseSpec::generate`]'s; sequence `b` draws
    /// its ring, state and inputs from the seed mixed with `b`, and shares
    /// sequence 0's weights ([`CaseSpec::generate_batch`]).
    pub batch: usize,
}

impl CaseSpec {
    /// The seed's data (weights 0.5, state 0.3, inputs 1.0, beta/alpha
    /// 2.0, eps 1e-6), with specials, at the given shape.
    pub fn seed_like(num_k: usize, num_v: usize, d_conv: usize, t: usize, seed: u64) -> CaseSpec {
        CaseSpec {
            num_k,
            num_v,
            d_conv,
            t,
            eps: 1e-6,
            alpha_spread: 2.0,
            state_spread: 0.3,
            negative_state: false,
            zero_qk: 0,
            specials: true,
            graph: false,
            seed,
            batch: 1,
        }
    }

    /// The validated shape.
    ///
    /// # Errors
    /// The contract's refusal, as text.
    ///
    /// A case whose state snapshots would pass 2^31 f32 elements (8 GiB) is
    /// refused here too, before anything is allocated.
    pub fn shape(&self) -> Result<GdnShape, String> {
        let shape = GdnShape::new(self.num_k, self.num_v, D_STATE, self.d_conv, self.t)
            .map_err(|e| e.to_string())?;
        match shape.state_len().checked_mul(shape.t() + 1) {
            Some(n) if n <= 1 << 31 => Ok(shape),
            _ => Err(format!(
                "num_v = {}, t = {}: the states and snapshots would pass 2^31 elements (8 GiB)",
                self.num_v, self.t
            )),
        }
    }
}

/// The number of leading bytes [`CaseSpec`]'s `Arbitrary` reads as path
/// selectors (see there).
pub const SELECTOR_BYTES: usize = 5;

impl<'a> Arbitrary<'a> for CaseSpec {
    /// Every choice that selects a path comes from the first
    /// [`SELECTOR_BYTES`] bytes, the seed from the rest: libFuzzer's
    /// inputs start at a few bytes (its `lim` grows slowly) and a field
    /// drawn from an exhausted input takes its low end. (Drawn after the
    /// shape, the knobs were off in every one of the first 1000 cases on
    /// the H200: no graph replay, no non-finite output.) The layout:
    ///
    /// - byte 0: bits 0-1 all set: `graph` (1/4); bits 2-3: `zero_qk`
    ///   (non-zero 3/4); bit 4: `specials` (1/2); bits 5-7: `alpha_spread`
    ///   (2: 1/2, 100: 1/4, 1e4: 1/4);
    /// - byte 1: `b % 5` the state spread (0.3: 3/5, 1e30: 1/5, 3e38:
    ///   1/5), `(b / 5) % 8` eps (1e-6: 3/8; 0, the smallest subnormal,
    ///   1e-5, 1e-12, 1: 1/8 each);
    /// - byte 2: bits 0-1 `num_k - 1` (1/4 each); bits 2-3 the ratio
    ///   `num_v / num_k - 1` (1/4 each before the cap `num_v <= 8`); bits
    ///   4-7, `% 3`, `4 - d_conv` (4: 6/16, 3 and 2: 5/16 each);
    /// - byte 3: `b % 32` the rows t: 0-7 give 1 (with the one below:
    ///   9/32), 8-11 give 2 (5/32), 12-15 give [`config::MAX_T`] (5/32),
    ///   16-31 give `b - 15`, every t from 1 to 16 (1/32 each); bits 5-7
    ///   the batch: 0-5 give 1 (3/4), 6 gives 2, 7 gives
    ///   [`config::MAX_BATCH`] (1/8 each; the gate runs larger batches);
    /// - byte 4: bits 0-1 all set: `negative_state` (1/4); bits 2-7 spare
    ///   (an input of 4 bytes or fewer draws it off);
    /// - then the seed.
    ///
    /// (The shape and t used to come from the bytes after the knobs, as
    /// ranges, and the seed used to start at byte 4; inputs of an older
    /// fuzz corpus decode to other shapes and seeds. A printed reproduction
    /// names its case and is unaffected.)
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<CaseSpec> {
        use config::{MAX_BATCH, MAX_NUM_K, MAX_NUM_V, MAX_RATIO, MAX_T};
        let [k0, k1, k2, k3, k4]: [u8; SELECTOR_BYTES] = u.arbitrary()?;
        let graph = k0 & 3 == 3;
        let zero_qk = (k0 >> 2) & 3;
        let specials = (k0 >> 4) & 1 == 1;
        let alpha_spread = match k0 >> 5 {
            0..=3 => 2.0,
            4..=5 => 100.0,
            _ => 1e4,
        };
        let state_spread = match k1 % 5 {
            0..=2 => 0.3,
            3 => 1e30,
            _ => 3e38,
        };
        let eps = match (k1 / 5) % 8 {
            0..=2 => 1e-6,
            3 => 0.0,
            4 => f32::from_bits(1), // the smallest subnormal
            5 => 1e-5,
            6 => 1e-12,
            _ => 1.0,
        };
        let num_k = 1 + usize::from(k2 & 3) % MAX_NUM_K;
        let ratio = (1 + usize::from((k2 >> 2) & 3) % MAX_RATIO)
            .min(MAX_NUM_V / num_k)
            .max(1);
        let d_conv = 4 - usize::from(k2 >> 4) % 3;
        let t = match k3 % 32 {
            0..=7 => 1,
            8..=11 => 2,
            12..=15 => MAX_T,
            v => usize::from(v - 15),
        };
        let batch = match k3 >> 5 {
            0..=5 => 1,
            6 => 2,
            _ => MAX_BATCH,
        };
        let negative_state = k4 & 3 == 3;
        Ok(CaseSpec {
            num_k,
            num_v: num_k * ratio,
            d_conv,
            t,
            eps,
            alpha_spread,
            state_spread,
            negative_state,
            zero_qk,
            specials,
            graph,
            seed: u.arbitrary()?,
            batch,
        })
    }

    /// 5 selector bytes and 8 of seed; bounded, so bolero's driver hands
    /// over enough.
    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (SELECTOR_BYTES, Some(SELECTOR_BYTES + 8))
    }
}

/// A case's data, host side: the layer, the sequence's initial state and
/// `t` rows of inputs (elements, row-major as in `oracle::gdn`).
#[derive(Clone, Debug, PartialEq)]
pub struct CaseData {
    /// The shape.
    pub shape: GdnShape,
    /// `[C][d_conv]`.
    pub conv_w: Vec<f32>,
    /// `[num_v]`.
    pub dt_bias: Vec<f32>,
    /// `[num_v]`.
    pub a_log: Vec<f32>,
    /// The initial conv ring `[C][d_conv - 1]`.
    pub ring0: Vec<f32>,
    /// The initial state `[num_v][128][128]` (in the canonical buffer).
    pub state0: Vec<f32>,
    /// `[t][C]`.
    pub qkv: Vec<f32>,
    /// `[t][num_v]`.
    pub beta_raw: Vec<f32>,
    /// `[t][num_v]`.
    pub alpha: Vec<f32>,
    /// The L2-norm epsilon.
    pub eps: f32,
    /// The scan's output scale ([`default_scale`]).
    pub scale: f32,
}

impl CaseData {
    /// The oracle's view of the layer.
    pub fn params(&self) -> GdnParams<'_> {
        GdnParams {
            conv_w: &self.conv_w,
            dt_bias: &self.dt_bias,
            a_log: &self.a_log,
            eps: self.eps,
            scale: self.scale,
        }
    }
}

/// `len` values uniform in `[-spread, spread)`, in a vector of the host
/// pool (a state is up to 512 KiB).
fn uniform(r: &mut Rng, len: usize, spread: f32) -> Vec<f32> {
    let mut v = super::pool::POOL.take(len);
    for x in &mut v {
        *x = (r.f01() * 2.0 - 1.0) * spread;
    }
    v
}

fn sprinkle(r: &mut Rng, v: &mut [f32], on: bool) {
    if on {
        for i in (r.below(13)..v.len()).step_by(13) {
            v[i] = SPECIALS[r.below(SPECIALS.len())];
        }
    }
}

impl CaseSpec {
    /// The data of the `batch` sequences: sequence 0 is
    /// [`CaseSpec::generate`]'s; sequence `b > 0` is generated from the
    /// seed plus `b` times the golden-ratio constant, with sequence 0's
    /// weights (the layer is shared).
    ///
    /// # Errors
    /// As [`CaseSpec::generate`]; a batch of 0.
    pub fn generate_batch(&self) -> Result<Vec<CaseData>, String> {
        if self.batch == 0 {
            return Err("batch = 0; it must be at least 1".into());
        }
        let first = self.generate()?;
        let mut all = Vec::with_capacity(self.batch);
        for b in 1..self.batch {
            let spec = CaseSpec {
                seed: self
                    .seed
                    .wrapping_add((b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                ..*self
            };
            let mut d = spec.generate()?;
            d.conv_w.clone_from(&first.conv_w);
            d.dt_bias.clone_from(&first.dt_bias);
            d.a_log.clone_from(&first.a_log);
            all.push(d);
        }
        all.insert(0, first);
        Ok(all)
    }

    /// Draws the case's data from `seed`.
    ///
    /// # Errors
    /// The contract's refusal of the shape, as text (a spec from the
    /// command line; [`Arbitrary`] only makes valid shapes).
    pub fn generate(&self) -> Result<CaseData, String> {
        let shape = self.shape()?;
        let mut r = Rng(self.seed);
        let (c, nv, kd, dc) = (
            shape.conv_dim(),
            shape.num_v(),
            shape.key_dim(),
            shape.d_conv(),
        );
        let mut conv_w = uniform(&mut r, shape.conv_w_len(), 0.5);
        let zero_head = |w: &mut [f32], first_channel: usize| {
            w[first_channel * dc..(first_channel + D_STATE) * dc].fill(0.0);
        };
        if self.zero_qk & 1 != 0 {
            zero_head(&mut conv_w, (self.num_k - 1) * D_STATE);
        }
        if self.zero_qk & 2 != 0 {
            zero_head(&mut conv_w, kd);
        }
        let dt_bias = uniform(&mut r, nv, 0.5);
        let a_log = uniform(&mut r, nv, 1.0);
        let mut ring0 = uniform(&mut r, shape.ring_len(), 1.0);
        let mut state0 = uniform(&mut r, shape.state_len(), self.state_spread);
        if self.negative_state {
            // The same draws, so the spec's other data are unchanged.
            for x in &mut state0 {
                *x = -x.abs();
            }
        }
        let mut qkv = uniform(&mut r, self.t * c, 1.0);
        let mut beta_raw = uniform(&mut r, self.t * nv, 2.0);
        let mut alpha = uniform(&mut r, self.t * nv, self.alpha_spread);
        for v in [&mut ring0, &mut qkv, &mut beta_raw, &mut alpha] {
            sprinkle(&mut r, v, self.specials);
        }
        Ok(CaseData {
            shape,
            conv_w,
            dt_bias,
            a_log,
            ring0,
            state0,
            qkv,
            beta_raw,
            alpha,
            eps: self.eps,
            scale: default_scale(),
        })
    }
}
