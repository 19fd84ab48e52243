//! Cases for judging a speculative-decoding rejection sampler (vLLM v1's
//! `rejection_sample`, FlashInfer's `chain_speculative_sampling`, a torch
//! or Triton kernel) bit for bit against [`oracle::rejection_sample`]
//! under the acceptance test and race form it declares, and for naming
//! every known declaration its output matches.
//!
//! A case (elements, row-major; see [`oracle::rejection_sample`]):
//! `draft_token_ids [B][k]`, `draft_probs [B][k][V]` (none in NGRAM),
//! `target_probs [B][k + 1][V]`, `bonus_token_ids [B]`, `uniform [B][k]`,
//! `noise [B][V]`, `is_greedy [B]`. Probabilities are softmaxes of normal
//! logits (the draft's a perturbation of the target's, so that most draft
//! tokens are accepted), draft tokens drawn from the draft's
//! distribution, uniforms with 24 random bits, noise `-ln(1 - U)`.
//!
//! The arms, each aimed at a class of bugs:
//! - RAND: as above: acceptance read at the wrong token or position, the
//!   recovered token drawn from `p` instead of the residual, a rejection
//!   that does not stop;
//! - TIES: every request has, for `k >= 2`, an exact acceptance tie
//!   `p = u q` (`q` a power of two, so `p / q = u` and `u q = p` in every
//!   division and product of the field: `>=` and `<` part) and right
//!   after it a forced rejection whose race ties two tokens `a < b`
//!   exactly (`r / e` equal, with equal or with doubled `r` and `e`: the
//!   lowest index wins), or, one request in three, parts the race forms
//!   (`e = 3`, `RN(r * RN(1/3)) > RN(r / 3)`, the other token scoring
//!   `RN(r / 3)` exactly, without the acceptance tie before it, so that
//!   both acceptance tests reach it: a division that is not correctly
//!   rounded, as Triton's `div.full.f32`, may match neither); for `k =
//!   1`, the acceptance tie or the race by row;
//! - ZERO_Q: every request's draft token has draft probability 0 at one
//!   position (the earlier positions accepted): with `p > 0` there (half
//!   the rows) vLLM rejects and FlashInfer accepts; with `p = 0` and `p <
//!   q` at every other token (the other half) both reject and every
//!   residual is `<= 0`, so the clamped race gives token 0 and an
//!   unclamped one the draft token;
//! - EARLY: every request rejects at position 0: every later position
//!   `-1`, no bonus;
//! - ALL: every draft token has `p >= q`, so every request accepts all
//!   `k` and emits its bonus token;
//! - NGRAM: no draft probabilities (`draft_probs` is None); each request
//!   has a position with `u = p` exactly (earlier positions accepted);
//! - GREEDY: three requests in four greedy, their draft tokens the
//!   target's argmax but at one position in two requests, half the rows'
//!   maxima tied between two tokens (the lowest index wins).
//!
//! Judging is exact: every output element equals the oracle's ([`judge`]).

use crate::rng::Rng;
use oracle::rejection_sample::{
    rejection_sample, validate, Accept, Declared, Inputs, Race, PLACEHOLDER,
};

/// The data a case draws (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Realistic draws.
    Rand,
    /// Exact acceptance and race ties.
    Ties,
    /// Draft probability 0 at the draft token.
    ZeroQ,
    /// Rejection at position 0.
    Early,
    /// Every draft token accepted.
    All,
    /// No draft probabilities.
    Ngram,
    /// Greedy requests.
    Greedy,
}

impl Arm {
    /// Every arm, in the order a check runs them and a fuzz input's first
    /// byte selects them ([`Spec::from_bytes`]).
    pub const ALL: [Arm; 7] = [
        Arm::Rand,
        Arm::Ties,
        Arm::ZeroQ,
        Arm::Early,
        Arm::All,
        Arm::Ngram,
        Arm::Greedy,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Ties => "TIES",
            Arm::ZeroQ => "ZERO_Q",
            Arm::Early => "EARLY",
            Arm::All => "ALL",
            Arm::Ngram => "NGRAM",
            Arm::Greedy => "GREEDY",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }
}

/// The acceptance test named `s` (`"divide_ge"`, `"multiply_lt"`).
///
/// # Errors
/// A sentence naming the choices.
pub fn parse_accept(s: &str) -> Result<Accept, String> {
    crate::names::parse_named("accept", s, &Accept::ALL, Accept::name, false)
}

/// The race form named `s` (`"reciprocal"`, `"divide"`).
///
/// # Errors
/// A sentence naming the choices.
pub fn parse_race(s: &str) -> Result<Race, String> {
    crate::names::parse_named("race", s, &Race::ALL, Race::name, false)
}

/// `(batch, k, vocab)`: requests, draft tokens per request, tokens.
pub type Dims = (usize, usize, usize);

/// The most probabilities (`B (k + 1) V`) a case holds.
pub const MAX_PROBS: usize = 1 << 24;

/// The most draft tokens per request.
pub const MAX_K: usize = 64;

/// `d` checked against the caps.
///
/// # Errors
/// An empty shape, `k` over [`MAX_K`], or over [`MAX_PROBS`]
/// probabilities, as a sentence.
pub fn within_caps(d: Dims) -> Result<(), String> {
    let (b, k, v) = d;
    if b == 0 || k == 0 || v == 0 {
        return Err(format!(
            "{d:?}: an empty batch, no draft token or an empty vocabulary"
        ));
    }
    if k > MAX_K {
        return Err(format!("{d:?}: k = {k}, over the check's {MAX_K}"));
    }
    let n = b.saturating_mul(k + 1).saturating_mul(v);
    if n > MAX_PROBS {
        return Err(format!(
            "{d:?}: {n} target probabilities, over the check's {MAX_PROBS}"
        ));
    }
    Ok(())
}

/// The shapes [`Spec::from_bytes`] draws from: one token of one draft,
/// then ragged few, then real vocabularies.
pub const FUZZ_DIMS: [Dims; 8] = [
    (1, 1, 2),
    (2, 2, 3),
    (4, 1, 7),
    (3, 3, 33),
    (5, 3, 129),
    (8, 4, 1000),
    (2, 5, 4096),
    (3, 2, 32000),
];

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `(batch, k, vocab)`.
    pub dims: Dims,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `(batch, k, vocab)`.
    pub dims: Dims,
    /// `[B][k]`.
    pub draft_token_ids: Vec<i32>,
    /// `[B][k][V]`; None in NGRAM.
    pub draft_probs: Option<Vec<f32>>,
    /// `[B][k + 1][V]`.
    pub target_probs: Vec<f32>,
    /// `[B]`.
    pub bonus_token_ids: Vec<i32>,
    /// `[B][k]`.
    pub uniform: Vec<f32>,
    /// `[B][V]`.
    pub noise: Vec<f32>,
    /// `[B]`, 0 or 1.
    pub is_greedy: Vec<u8>,
}

impl Case {
    /// The inputs as the oracle takes them.
    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            draft_token_ids: &self.draft_token_ids,
            draft_probs: self.draft_probs.as_deref(),
            target_probs: &self.target_probs,
            bonus_token_ids: &self.bonus_token_ids,
            uniform: &self.uniform,
            noise: &self.noise,
            is_greedy: &self.is_greedy,
        }
    }
}

/// The smallest probability a draw keeps (below it, `2^-100`): no
/// probability of a draw is 0 unless an arm sets it.
const FLOOR: f32 = 7.888_609e-31;

/// A softmax of `logits` in f64, rounded to f32, floored at [`FLOOR`].
fn softmax(logits: &[f64]) -> Vec<f32> {
    let m = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = logits.iter().map(|&l| (l - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|&x| ((x / s) as f32).max(FLOOR)).collect()
}

/// A token drawn from `p` by inverse CDF (the last on rounding).
fn draw(rng: &mut Rng, p: &[f32]) -> usize {
    let s: f64 = p.iter().map(|&x| f64::from(x)).sum();
    let mut t = f64::from(rng.f01()) * s;
    for (i, &x) in p.iter().enumerate() {
        t -= f64::from(x);
        if t < 0.0 {
            return i;
        }
    }
    p.len() - 1
}

/// One request's inputs, before they are laid into the batch.
struct Req {
    p: Vec<Vec<f32>>,
    q: Vec<Vec<f32>>,
    x: Vec<usize>,
    u: Vec<f32>,
    e: Vec<f32>,
    bonus: usize,
    greedy: bool,
}

impl Req {
    /// Position `i` accepted under both acceptance forms (`u = 0`, `p, q
    /// > 0`).
    fn accept(&mut self, i: usize) {
        let x = self.x[i];
        if let Some(q) = self.q.get_mut(i) {
            q[x] = q[x].max(FLOOR);
        }
        self.p[i][x] = self.p[i][x].max(FLOOR);
        self.u[i] = 0.0;
    }

    /// Position `i` rejected under both forms (`p / q = 2^-2`, `u` near 1).
    fn reject(&mut self, rng: &mut Rng, i: usize) {
        let x = self.x[i];
        let q = match self.q.get_mut(i) {
            Some(q) => {
                q[x] = q[x].max(2e-3);
                q[x]
            }
            None => 1.0,
        };
        self.p[i][x] = q * 0.25;
        self.u[i] = 0.5 + 0.5 * rng.f01().max(0.5);
    }
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(d: Dims, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x5EC0_DE5A_3F1E_0000u64, &[d.0, d.1, d.2]);
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ arm
    }

    /// A case from fuzz bytes. The leading bytes choose every path: byte
    /// 0 the arm (`% 7`, so each arm 36 or 37 values in 256), byte 1 the
    /// shape (`% 8` of [`FUZZ_DIMS`]), then up to 8 bytes of seed
    /// (missing bytes read 0).
    pub fn from_bytes(data: &[u8]) -> Spec {
        let byte = |i: usize| data.get(i).copied().unwrap_or(0);
        let mut seed = [0u8; 8];
        for (k, s) in seed.iter_mut().enumerate() {
            *s = byte(2 + k);
        }
        Spec {
            dims: FUZZ_DIMS[usize::from(byte(1) % 8)],
            arm: Arm::ALL[usize::from(byte(0) % 7)],
            seed: u64::from_le_bytes(seed),
        }
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn generate(&self) -> Result<Case, String> {
        within_caps(self.dims)?;
        let (b, k, v) = self.dims;
        let mut rng = Rng(self.seed);
        let ngram = self.arm == Arm::Ngram;
        let mut case = Case {
            dims: self.dims,
            draft_token_ids: Vec::with_capacity(b * k),
            draft_probs: (!ngram).then(|| Vec::with_capacity(b * k * v)),
            target_probs: Vec::with_capacity(b * (k + 1) * v),
            bonus_token_ids: Vec::with_capacity(b),
            uniform: Vec::with_capacity(b * k),
            noise: Vec::with_capacity(b * v),
            is_greedy: Vec::with_capacity(b),
        };
        for r in 0..b {
            // Cycling choices by row (offset by the seed) so neighbouring
            // rows differ.
            let c = r + rng.below(4);
            let req = self.request(&mut rng, c);
            for i in 0..=k {
                case.target_probs.extend_from_slice(&req.p[i]);
            }
            if let Some(dq) = case.draft_probs.as_mut() {
                for q in &req.q {
                    dq.extend_from_slice(q);
                }
            }
            case.draft_token_ids.extend(req.x.iter().map(|&t| t as i32));
            case.uniform.extend_from_slice(&req.u);
            case.noise.extend_from_slice(&req.e);
            case.bonus_token_ids.push(req.bonus as i32);
            case.is_greedy.push(u8::from(req.greedy));
        }
        let out_len = b * (k + 1);
        validate(b, k, v, &case.inputs(), out_len).map_err(|e| e.to_string())?;
        Ok(case)
    }

    /// Request `c` (its cycle position) of this arm.
    fn request(&self, rng: &mut Rng, c: usize) -> Req {
        let (_, k, v) = self.dims;
        let ngram = self.arm == Arm::Ngram;
        let mut p = Vec::with_capacity(k + 1);
        let mut q = Vec::with_capacity(k);
        let mut x = Vec::with_capacity(k);
        for i in 0..=k {
            let z: Vec<f64> = (0..v).map(|_| 3.0 * f64::from(rng.normal())).collect();
            let pz: Vec<f64> = z
                .iter()
                .map(|&l| l + 0.7 * f64::from(rng.normal()))
                .collect();
            p.push(softmax(&pz));
            if i < k {
                let qi = softmax(&z);
                x.push(if ngram && rng.below(2) == 0 {
                    rng.below(v)
                } else if ngram {
                    draw(rng, &p[i])
                } else {
                    draw(rng, &qi)
                });
                if !ngram {
                    q.push(qi);
                }
            }
        }
        let u = (0..k).map(|_| rng.f01()).collect();
        let e = (0..v)
            .map(|_| {
                let y = -(1.0 - f64::from(rng.f01())).ln();
                (y as f32).max(1.0 / 16_777_216.0)
            })
            .collect();
        let bonus = rng.below(v);
        let mut req = Req {
            p,
            q,
            x,
            u,
            e,
            bonus,
            greedy: false,
        };
        match self.arm {
            Arm::Rand => {}
            Arm::Ties => self.ties(rng, c, &mut req),
            Arm::ZeroQ => self.zero_q(rng, c, &mut req),
            Arm::Early => req.reject(rng, 0),
            Arm::All => {
                for i in 0..k {
                    let xi = req.x[i];
                    req.p[i][xi] = req.p[i][xi].max(req.q[i][xi]);
                }
            }
            Arm::Ngram => {
                let j = rng.below(k);
                for i in 0..j {
                    req.accept(i);
                }
                let xj = req.x[j];
                if req.p[j][xj] >= 1.0 {
                    req.p[j][xj] = 0.5;
                }
                req.u[j] = req.p[j][xj];
            }
            Arm::Greedy => self.greedy(rng, c, &mut req),
        }
        req
    }

    /// TIES (see the module docs).
    fn ties(&self, rng: &mut Rng, c: usize, req: &mut Req) {
        let (_, k, v) = self.dims;
        let (accept_tie, race_tie) = if k >= 2 && c % 3 == 2 {
            // The race that parts the race forms, reached under both
            // acceptance tests.
            (None, Some(rng.below(k)))
        } else if k >= 2 {
            let j = rng.below(k - 1);
            (Some(j), Some(j + 1))
        } else if c.is_multiple_of(2) {
            (Some(0), None)
        } else {
            (None, Some(0))
        };
        let before = accept_tie.or(race_tie).unwrap_or(0);
        for i in 0..before {
            req.accept(i);
        }
        if let Some(j) = accept_tie {
            // p = u q exactly: q = 2^-s, u = m / 256.
            let x = req.x[j];
            let q = 1.0 / (1u32 << (1 + rng.below(6))) as f32;
            let u = (1 + rng.below(255)) as f32 / 256.0;
            req.q[j][x] = q;
            req.p[j][x] = u * q;
            req.u[j] = u;
        }
        if let Some(j) = race_tie {
            req.reject(rng, j);
            if v < 3 {
                return;
            }
            let x = req.x[j];
            // Two tokens a < b other than x; every other residual zero.
            let mut others: Vec<usize> = (0..v).filter(|&t| t != x).collect();
            let a = others.swap_remove(rng.below(others.len()));
            let b = others[rng.below(others.len())];
            let (a, b) = (a.min(b), a.max(b));
            for t in 0..v {
                if t != x {
                    req.p[j][t] = req.q[j][t];
                }
            }
            let tiny = 1.0 / 1024.0;
            match c % 3 {
                // r(a) = r(b) = 0.25, e(a) = e(b) = 2^-3; or b's doubled.
                0 | 1 => {
                    let (rb, eb) = if c % 3 == 1 {
                        (0.5, 0.25)
                    } else {
                        (0.25, 0.125)
                    };
                    req.q[j][a] = tiny;
                    req.p[j][a] = 0.25 + tiny;
                    req.e[a] = 0.125;
                    req.q[j][b] = tiny;
                    req.p[j][b] = rb + tiny;
                    req.e[b] = eb;
                }
                // The race forms part: e(b) = 3 and r(b) such that
                // RN(r * RN(1/3)) > RN(r / 3); a (the lower index) scores
                // RN(r / 3) exactly (e(a) = 1): a tie under Race::Divide
                // (a wins), b above under Race::Reciprocal.
                _ => {
                    let third = 1.0f32 / 3.0;
                    let mut r = f32::from_bits(0.25f32.to_bits() + rng.below(4096) as u32);
                    while r * third <= r / 3.0 {
                        r = f32::from_bits(r.to_bits() + 1);
                    }
                    req.q[j][b] = tiny;
                    req.p[j][b] = r + tiny;
                    req.e[b] = 3.0;
                    req.q[j][a] = tiny;
                    req.p[j][a] = r / 3.0 + tiny;
                    req.e[a] = 1.0;
                }
            }
        }
    }

    /// ZERO_Q (see the module docs).
    fn zero_q(&self, rng: &mut Rng, c: usize, req: &mut Req) {
        let (_, k, v) = self.dims;
        let j = rng.below(k);
        for i in 0..j {
            req.accept(i);
        }
        if v >= 2 && req.x[j] == 0 {
            req.x[j] = 1;
        }
        let x = req.x[j];
        req.q[j][x] = 0.0;
        if c.is_multiple_of(2) {
            req.p[j][x] = req.p[j][x].max(1.0 / 64.0);
        } else {
            for t in 0..v {
                req.p[j][t] = if t == x { 0.0 } else { req.q[j][t] * 0.5 };
            }
        }
    }

    /// GREEDY (see the module docs).
    fn greedy(&self, rng: &mut Rng, c: usize, req: &mut Req) {
        let (_, k, v) = self.dims;
        req.greedy = c % 4 != 3;
        let miss = (c.is_multiple_of(2)).then(|| rng.below(k));
        for i in 0..k {
            if c % 4 < 2 && v >= 2 {
                // Tie the maximum with another token.
                let t = oracle::rejection_sample::argmax_lowest(&req.p[i]);
                let o = (t + 1 + rng.below(v - 1)) % v;
                req.p[i][o] = req.p[i][t];
            }
            let t = oracle::rejection_sample::argmax_lowest(&req.p[i]);
            req.x[i] = if miss == Some(i) && v >= 2 {
                (t + 1 + rng.below(v - 1)) % v
            } else {
                t
            };
        }
    }
}

/// The oracle's output for `case` under `d` (`[B][k + 1]`).
///
/// # Panics
/// On a case [`Spec::generate`] did not make (its inputs are validated).
pub fn reference(case: &Case, d: &Declared) -> Vec<i32> {
    let (b, k, v) = case.dims;
    let mut out = vec![0; b * (k + 1)];
    rejection_sample(b, k, v, d, &case.inputs(), &mut out).expect("a generated case is valid");
    out
}

/// One differing output element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The request.
    pub row: usize,
    /// The position, `0..=k`.
    pub pos: usize,
    /// The kernel's token.
    pub got: i32,
    /// The oracle's.
    pub want: i32,
}

/// A judgement of one output.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Output elements, `B (k + 1)`.
    pub elements: usize,
    /// Of them differing.
    pub differ: usize,
    /// Requests with a differing element.
    pub rows_differ: usize,
    /// The first differing element of each of the first 8 such requests.
    pub faults: Vec<Fault>,
}

impl Verdict {
    /// Every element equal.
    pub fn pass(&self) -> bool {
        self.differ == 0
    }
}

/// Judges `got` (`[B][k + 1]`) against the oracle under `d`, element by
/// element.
///
/// # Errors
/// A sentence when `got` has the wrong length.
pub fn judge(case: &Case, d: &Declared, got: &[i32]) -> Result<Verdict, String> {
    let (b, k, _) = case.dims;
    if got.len() != b * (k + 1) {
        return Err(format!(
            "output has {} elements, want {}",
            got.len(),
            b * (k + 1)
        ));
    }
    let want = reference(case, d);
    let mut vd = Verdict {
        elements: got.len(),
        ..Verdict::default()
    };
    for r in 0..b {
        let row = r * (k + 1)..(r + 1) * (k + 1);
        let mut first = None;
        for (pos, (&g, &w)) in got[row.clone()].iter().zip(&want[row]).enumerate() {
            if g != w {
                vd.differ += 1;
                first.get_or_insert(Fault {
                    row: r,
                    pos,
                    got: g,
                    want: w,
                });
            }
        }
        if let Some(f) = first {
            vd.rows_differ += 1;
            if vd.faults.len() < 8 {
                vd.faults.push(f);
            }
        }
    }
    Ok(vd)
}

/// A fault in words: the request, the position, both tokens, and what the
/// oracle read there (the draft token, its `p`, `q`, `u`, and whether
/// the request is greedy).
pub fn describe(f: &Fault, case: &Case, d: &Declared) -> String {
    let (_, k, v) = case.dims;
    let want = reference(case, d);
    let row = |o: &[i32]| {
        let r: Vec<String> = o[f.row * (k + 1)..(f.row + 1) * (k + 1)]
            .iter()
            .map(i32::to_string)
            .collect();
        r.join(", ")
    };
    let mut s = format!(
        "request {} position {}: got {}, want {} (the oracle's row [{}])",
        f.row,
        f.pos,
        f.got,
        f.want,
        row(&want)
    );
    if f.pos < k {
        let x = case.draft_token_ids[f.row * k + f.pos] as usize;
        let p = case.target_probs[(f.row * (k + 1) + f.pos) * v + x];
        let u = case.uniform[f.row * k + f.pos];
        let q = case
            .draft_probs
            .as_ref()
            .map(|q| q[(f.row * k + f.pos) * v + x]);
        s += &format!(
            "; draft token {x}, p = {p:e} (0x{:08X}), u = {u:e}",
            p.to_bits()
        );
        match q {
            Some(q) => s += &format!(", q = {q:e} (0x{:08X}), p / q = {:e}", q.to_bits(), p / q),
            None => s += ", no draft probabilities (q read as 1)",
        }
    }
    if case.is_greedy[f.row] == 1 {
        s += "; a greedy request";
    }
    if f.want == PLACEHOLDER {
        s += "; want -1: after the first rejection";
    }
    s
}

/// Every known declaration: both acceptance tests times both race forms.
pub fn known() -> Vec<Declared> {
    let mut v = Vec::new();
    for accept in Accept::ALL {
        for race in Race::ALL {
            v.push(Declared { accept, race });
        }
    }
    v
}

/// `accept/race`, as rows print it.
pub fn label(d: &Declared) -> String {
    format!("{}/{}", d.accept.name(), d.race.name())
}

/// The labels of `v`, at most `max` then a count, or `none known`.
pub fn list(v: &[Declared], max: usize) -> String {
    if v.is_empty() {
        return "none known".into();
    }
    let mut names: Vec<String> = v.iter().take(max).map(label).collect();
    if v.len() > max {
        names.push(format!("and {} more", v.len() - max));
    }
    names.join(", ")
}

/// The known declarations whose output equals `got`.
///
/// # Errors
/// As [`judge`].
pub fn identify(case: &Case, got: &[i32]) -> Result<Vec<Declared>, String> {
    let mut v = Vec::new();
    for d in known() {
        if judge(case, &d, got)?.pass() {
            v.push(d);
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: [Dims; 5] = [
        (4, 1, 7),
        (5, 3, 129),
        (8, 4, 1000),
        (6, 2, 2),
        (3, 5, 4096),
    ];

    fn cases(arm: Arm) -> Vec<Case> {
        let mut v = Vec::new();
        for dims in DIMS {
            for t in 0..8u64 {
                let sp = Spec {
                    dims,
                    arm,
                    seed: Spec::base_seed(dims, arm) ^ (t << 20),
                };
                v.push(sp.generate().unwrap());
            }
        }
        v
    }

    /// The share of requests of `arm`'s cases where `f` holds.
    fn rate(arm: Arm, f: &dyn Fn(&Case, usize) -> bool) -> f64 {
        let (mut hit, mut all) = (0usize, 0usize);
        for c in cases(arm) {
            for r in 0..c.dims.0 {
                all += 1;
                hit += usize::from(f(&c, r));
            }
        }
        hit as f64 / all as f64
    }

    fn row(c: &Case, d: &Declared, r: usize) -> Vec<i32> {
        let k = c.dims.1;
        reference(c, d)[r * (k + 1)..(r + 1) * (k + 1)].to_vec()
    }

    const FI: Declared = Declared {
        accept: Accept::MultiplyLt,
        race: Race::Reciprocal,
    };

    /// Each arm's first byte: 256 values over 7 arms, 36 or 37 each.
    #[test]
    fn from_bytes_reaches_every_arm_at_its_rate() {
        let mut n = [0usize; 7];
        for b0 in 0..=255u8 {
            let sp = Spec::from_bytes(&[b0, b0.wrapping_mul(7), 1, 2]);
            n[Arm::ALL.iter().position(|&a| a == sp.arm).unwrap()] += 1;
            assert!(sp.generate().is_ok());
        }
        assert!(n.iter().all(|&k| k == 36 || k == 37), "{n:?}");
        let dims: Vec<Dims> = (0..8u8).map(|b1| Spec::from_bytes(&[0, b1]).dims).collect();
        assert_eq!(dims, FUZZ_DIMS);
        assert_eq!(Spec::from_bytes(&[]).seed, 0);
    }

    /// RAND: rejections and full acceptances both common, and the
    /// residual's race differs from a race over `p` on most rejections.
    #[test]
    fn rand_rejects_and_accepts_at_its_rate() {
        let d = Declared::VLLM;
        let rejected = rate(Arm::Rand, &|c, r| row(c, &d, r).contains(&PLACEHOLDER));
        assert!((0.3..0.95).contains(&rejected), "{rejected}");
        let rejected_k1 = rate(Arm::Rand, &|c, r| {
            let k = c.dims.1;
            let o = row(c, &d, r);
            o[k] == PLACEHOLDER && (0..k).any(|i| o[i] != c.draft_token_ids[r * k + i])
        });
        assert!(rejected_k1 > 0.3, "{rejected_k1}");
    }

    /// TIES: every request carries an acceptance tie `p / q = u` exactly
    /// or a race tie, and `>=` and `<` part on it.
    #[test]
    fn ties_part_the_acceptance_forms_and_tie_the_race() {
        let exact = rate(Arm::Ties, &|c, r| {
            let (_, k, v) = c.dims;
            let q = c.draft_probs.as_ref().unwrap();
            (0..k).any(|i| {
                let x = c.draft_token_ids[r * k + i] as usize;
                let (p, qq) = (
                    c.target_probs[(r * (k + 1) + i) * v + x],
                    q[(r * k + i) * v + x],
                );
                qq > 0.0 && p / qq == c.uniform[r * k + i] && c.uniform[r * k + i] * qq == p
            })
        });
        assert!(exact >= 0.45, "{exact}");
        let parted = rate(Arm::Ties, &|c, r| {
            row(c, &Declared::VLLM, r) != row(c, &FI, r)
        });
        assert!(parted >= 0.4, "{parted}");
        // A race tie decides a recovered token: the lowest of the tied.
        let raced = rate(Arm::Ties, &|c, r| {
            let (_, k, v) = c.dims;
            let o = row(c, &Declared::VLLM, r);
            (0..k).any(|i| {
                o[i] >= 0 && o[i] as usize != c.draft_token_ids[r * k + i] as usize && {
                    let t = o[i] as usize;
                    let e = &c.noise[r * v..(r + 1) * v];
                    let q = c.draft_probs.as_ref().unwrap();
                    let p0 = (r * (k + 1) + i) * v;
                    let q0 = (r * k + i) * v;
                    let s = |u: usize| (c.target_probs[p0 + u] - q[q0 + u]).max(0.0) / e[u];
                    (t + 1..v).any(|u| s(u) == s(t))
                }
            })
        });
        assert!(raced >= 0.3, "{raced}");
        // The race forms part on some requests.
        let div = Declared {
            race: Race::Divide,
            ..Declared::VLLM
        };
        let race_parted = rate(Arm::Ties, &|c, r| {
            row(c, &Declared::VLLM, r) != row(c, &div, r)
        });
        assert!(race_parted >= 0.15, "{race_parted}");
    }

    /// ZERO_Q: a zero draft probability reached on every request; vLLM and
    /// FlashInfer part on half, and half have no positive residual.
    #[test]
    fn zero_q_reaches_a_zero_draft_prob_on_every_request() {
        let zero = rate(Arm::ZeroQ, &|c, r| {
            let (_, k, v) = c.dims;
            let q = c.draft_probs.as_ref().unwrap();
            let o = row(c, &Declared::VLLM, r);
            (0..k).any(|i| {
                let x = c.draft_token_ids[r * k + i] as usize;
                q[(r * k + i) * v + x] == 0.0 && o[i] != PLACEHOLDER
            })
        });
        assert_eq!(zero, 1.0);
        let parted = rate(Arm::ZeroQ, &|c, r| {
            row(c, &Declared::VLLM, r) != row(c, &FI, r)
        });
        assert!((0.3..=0.7).contains(&parted), "{parted}");
        let nonpositive = rate(Arm::ZeroQ, &|c, r| {
            let (_, k, v) = c.dims;
            let q = c.draft_probs.as_ref().unwrap();
            (0..k).any(|i| {
                (0..v).all(|t| c.target_probs[(r * (k + 1) + i) * v + t] <= q[(r * k + i) * v + t])
            })
        });
        assert!((0.3..=0.7).contains(&nonpositive), "{nonpositive}");
    }

    /// EARLY rejects every request at position 0; ALL accepts all and
    /// emits the bonus, under both acceptance forms.
    #[test]
    fn early_rejects_at_zero_and_all_emits_the_bonus() {
        for d in known() {
            let early = rate(Arm::Early, &|c, r| {
                let o = row(c, &d, r);
                o[1..].iter().all(|&t| t == PLACEHOLDER)
            });
            assert_eq!(early, 1.0);
            let all = rate(Arm::All, &|c, r| {
                let k = c.dims.1;
                let o = row(c, &d, r);
                o[k] == c.bonus_token_ids[r] && o[..k] == c.draft_token_ids[r * k..(r + 1) * k]
            });
            assert_eq!(all, 1.0);
        }
    }

    /// NGRAM: no draft probabilities, and a `u = p` tie reached on every
    /// request.
    #[test]
    fn ngram_has_no_draft_probs_and_a_tie_per_request() {
        let tie = rate(Arm::Ngram, &|c, r| {
            let (_, k, v) = c.dims;
            assert!(c.draft_probs.is_none());
            let o = row(c, &Declared::VLLM, r);
            (0..k).any(|i| {
                let x = c.draft_token_ids[r * k + i] as usize;
                o[i] != PLACEHOLDER
                    && c.target_probs[(r * (k + 1) + i) * v + x] == c.uniform[r * k + i]
            })
        });
        assert_eq!(tie, 1.0);
    }

    /// GREEDY: three requests in four greedy; half the rows' maxima tied.
    #[test]
    fn greedy_rows_at_their_rate() {
        let greedy = rate(Arm::Greedy, &|c, r| c.is_greedy[r] == 1);
        assert!((0.6..=0.9).contains(&greedy), "{greedy}");
        let tied = rate(Arm::Greedy, &|c, r| {
            let (_, k, v) = c.dims;
            let p = &c.target_probs[r * (k + 1) * v..(r * (k + 1) + 1) * v];
            let m = oracle::rejection_sample::argmax_lowest(p);
            (m + 1..v).any(|t| p[t] == p[m])
        });
        assert!((0.3..=0.7).contains(&tied), "{tied}");
    }

    /// Every case validates, and the forms are named exactly once.
    #[test]
    fn identify_names_the_declaration_it_was_made_with() {
        for arm in Arm::ALL {
            for c in cases(arm).into_iter().take(5) {
                for d in known() {
                    assert!(identify(&c, &reference(&c, &d)).unwrap().contains(&d));
                }
            }
        }
    }
}
