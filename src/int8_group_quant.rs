//! Cases for judging a per-token-group INT8 activation quantizer (vLLM's
//! and SGLang's `per_token_group_quant_int8`, CUDA and Triton; the torch
//! form `(x / (absmax / 127)).to(torch.int8)`; DeepSeek-style W8A8 int8
//! block quantization) bit for bit under the rule it declares
//! ([`oracle::int8_group_quant::Int8GroupRule`]: rounding, codes, UE8M0,
//! eps), and for naming the known rules its output matches.
//!
//! A case: `x` `[m][k]` values of its dtype (float32, bfloat16 or float16,
//! held as f32: the kernel's conversion to f32 is exact), groups of
//! `group_size` columns (a short last group when `group_size` does not
//! divide `k`: `I8G-TAIL`); the outputs `q` `[m][k]` int8 codes and `s`
//! `[m][ceil(k / group_size)]` f32 ([`Int8Out`] with no zero points).
//! Group `t` of a case is the `t`-th in row-major order (row `j`'s group
//! `g` is `t = j * groups + g`); the arms' kinds of group cycle with `t`.

use crate::fp8_quant::{pow2_amax, ulps_from_pow2, Pow2Kind};
use crate::int8_quant::{fin, pow2, Int8Out, Int8Verdict};
use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::fp8_quant::Ue8m0Ceil;
use oracle::int8_group_quant::{cvt_clamped_s8, quantize_int8_groups, Int8GroupRule};
use oracle::int8_quant::{Codes, Rounding};

/// The largest case a check draws, in elements (the FP8 quantizers' cap).
pub use crate::fp8_quant::MAX_ELEMS;

/// The data a case draws, each arm aimed at a choice that separates
/// rules, or at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8GroupArm {
    /// Normal elements, each group at its own magnitude (10^-3 to 10^3).
    /// UE8M0 ignored, a scale from another group.
    Rand,
    /// Quotients at and beside integers and half-integers. Even groups
    /// (`t`) are exact: amax `127 * 2^e` (`s = 2^e`, and `127 / amax =
    /// 2^-e`: divide and reciprocal agree), elements `±(n + f) 2^e` with
    /// `f` one of 1/2, 1/4, 3/4, 1/8, 7/8 (where the dtype holds them):
    /// toward zero, to nearest even and to nearest away all part
    /// (`2.5`: 2, 2, 3; `2.75`: 2, 3, 3; `-2.75`: -2, -3, -3), and each
    /// such group holds a tie `2i + 1/2` (even against away) and a
    /// negative `-(n + 3/4)` (toward zero against to nearest). Odd groups
    /// part divide from reciprocal: an inexact scale (of 4 drawn, the one
    /// with the most parting points) and half the elements where `x / s`
    /// and `x * fl(127 / absmax)` code apart under some rounding (within
    /// 2 dtype steps of `n s` or `(n + 1/2) s`), the rest near those
    /// points; scaled by a power of two per group (exact).
    Ties,
    /// Groups cycling (`t % 4`) through all zero (`+0` and `-0`), tiny
    /// (amax `2^-43` to `2^-37`, under vLLM's `eps = 1e-10`, so the floor
    /// decides the scale; float16 holds nothing under `1e-10` but 0: its
    /// tiny groups are its subnormals, over `eps`), one non-zero element,
    /// normal (`I8G-ABSMAX`).
    Zero,
    /// The amax at a group's edge: adjacent groups' magnitudes `2^8` to
    /// `2^14` apart (float16: to `2^10`; even `g` at the row's magnitude,
    /// odd `g` above it), each group's amax
    /// (twice the rest's) at its first element or its last (alternating
    /// with `g / 2 + j`), and every third group (`(g + j) % 3 == 0`) all
    /// negative. A group boundary off by one, a scale read from the
    /// neighbouring group or a signed maximum changes scales.
    Amax,
    /// The top of the range: each group holds `+absmax` and `-absmax`,
    /// up to four elements 1 to 4 dtype steps inside them, the rest
    /// uniform in between; groups cycle (`t % 4`) through an amax whose
    /// quotient `fl(absmax / s)` is under 127 (toward zero it codes 126:
    /// `I8G-SCALE`), one where divide and reciprocal code the amax apart
    /// toward zero, one whose quotient is over 127 (the clamp), and an
    /// exact `127 * 2^e` (codes ±127). A scale of `absmax / 128` codes
    /// `-absmax` as -128.
    Sat,
    /// UE8M0's ceiling ([`Ue8m0Ceil`]): in float32, each group's `absmax /
    /// 127` is set bit for bit (and `absmax * fl(1 / 127)`, torch's
    /// scale under `codes="torch_divide"`, too: one amax serves both;
    /// [`crate::fp8_quant::pow2_amax`]) at a
    /// [`crate::fp8_quant::Pow2Kind`] by the group's index `t`: half the
    /// groups 1 to 3 ulps above a power of two `2^e` where a binary32
    /// `log2` rounds back to `e` (`|e|` from 4, 8, 16 up at 1, 2, 3 ulps,
    /// but `e` = -4, -8, -16: `log2f` keeps
    /// the scale `2^e`, the exact ceiling takes `2^(e+1)`), one in eight
    /// exactly a power, one in eight 1 to 3 ulps above one where both
    /// take `2^(e+1)`, a quarter 1 to 3 ulps below one (both keep `2^e`),
    /// `e` from -20 to 20; the other elements uniform within the amax.
    /// bfloat16 and float16 cannot hold such an amax: a 16-bit amax has
    /// at most 11 significant bits and 127 is odd, so `absmax / 127` is
    /// either exactly `2^e` (`absmax = 127 * 2^e`) or at least 1/2032
    /// (float16; bfloat16: 1/254) of `2^e` away from every power of two,
    /// thousands of ulps, where both ceilings agree; there the arm draws
    /// `absmax` one dtype step above `127 * 2^e` (for the parting and
    /// above kinds: both ceilings take `2^(e+1)`), exactly `127 * 2^e`
    /// (both keep `2^e`) and one step below (both keep `2^e`): a ceiling
    /// that rounds an exact power up, or one that misses the step up,
    /// fails there, but not the choice between the two ceilings.
    Pow2,
    /// RAND's groups with NaN elements (`I8G-NAN`): at each group's first
    /// and last element (groups of 2 or more), and one more within when
    /// it has 8 or more. vLLM's `fmaxf` skips a NaN and its clamp codes it
    /// -128; a torch `amax` propagates it into the scale. Only when named.
    Nan,
}

impl Int8GroupArm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Int8GroupArm; 7] = [
        Int8GroupArm::Rand,
        Int8GroupArm::Ties,
        Int8GroupArm::Zero,
        Int8GroupArm::Amax,
        Int8GroupArm::Sat,
        Int8GroupArm::Pow2,
        Int8GroupArm::Nan,
    ];

    /// The arm's share of the 256 values of a seed's leading byte
    /// ([`Int8GroupArm::from_seed`]), in [`Int8GroupArm::ALL`]'s order:
    /// NAN, only when named, has none. (POW2's 16 came out of SAT's 40,
    /// the last share, so the other arms' default seeds did not move.)
    pub const ODDS: [u32; 7] = [64, 64, 40, 48, 24, 16, 0];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Int8GroupArm::Rand => "RAND",
            Int8GroupArm::Ties => "TIES",
            Int8GroupArm::Zero => "ZERO",
            Int8GroupArm::Amax => "AMAX",
            Int8GroupArm::Sat => "SAT",
            Int8GroupArm::Pow2 => "POW2",
            Int8GroupArm::Nan => "NAN",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Int8GroupArm, String> {
        crate::names::parse_named("arm", s, &Int8GroupArm::ALL, Int8GroupArm::name, true)
    }

    /// The arm a seed draws when none is named (a fuzzer's case): its
    /// leading byte, by [`Int8GroupArm::ODDS`] (RAND and TIES 64 of 256
    /// each, ZERO 40, AMAX 48, SAT 24, POW2 16; never NAN). A check's default seeds
    /// ([`Int8GroupSpec::base_seed`]) lead with a byte of their arm.
    pub fn from_seed(seed: u64) -> Int8GroupArm {
        Int8GroupArm::ALL[crate::rng::index_from_seed(seed, &Int8GroupArm::ODDS)]
    }
}

/// The shapes `(m, k)` a check runs by default (at `group_size` 128: one
/// group; a ragged `k`, whose short last group of 75 is not a multiple of
/// 4, 8 or 16, so a vectorized loop without its tail fails; two groups;
/// DeepSeek-V3's hidden size 7168 for one token and for 16; a 64 x 4096
/// batch; 65 rows of 16384, past 64 rows and 128 groups a row, so a grid
/// that stops at either fails).
pub const INT8_GROUP_SHAPES: [(usize, usize); 7] = [
    (1, 128),
    (5, 203),
    (3, 256),
    (1, 7168),
    (16, 7168),
    (64, 4096),
    (65, 16384),
];

/// One per-token-group int8 case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Int8GroupSpec {
    /// Rows (tokens).
    pub m: usize,
    /// Columns (hidden size).
    pub k: usize,
    /// Columns per group.
    pub group_size: usize,
    /// The input's element type.
    pub dtype: Dtype,
    /// The data.
    pub arm: Int8GroupArm,
    /// The data seed.
    pub seed: u64,
}

/// The known rules a check names when an output matches them, at floor
/// `eps`: each [`Rounding`] with codes that divide, multiply by `fl(127
/// / absmax)` or divide by torch's scale (`absmax * fl(1 / 127)`), and
/// each with UE8M0 scales under each ceiling ([`Ue8m0Ceil`]: `/ue8m0`,
/// `/ue8m0_exact`) dividing (there the reciprocal's codes are the
/// division's, and torch's scale rounds up to the division's power of two
/// but where an ulp straddles one).
pub fn int8_group_known(eps: f32) -> Vec<Int8GroupRule> {
    let mut v = Vec::new();
    for ue8m0 in [None, Some(Ue8m0Ceil::Log2f), Some(Ue8m0Ceil::Exact)] {
        for rounding in Rounding::ALL {
            let codes: &[Codes] = if ue8m0.is_some() {
                &[Codes::Divide]
            } else {
                &[Codes::Divide, Codes::Reciprocal, Codes::TorchDivide]
            };
            for &codes in codes {
                v.push(Int8GroupRule {
                    rounding,
                    codes,
                    ue8m0,
                    eps,
                });
            }
        }
    }
    v
}

/// Whether `x / s` and `x * r` give another code under some rounding.
fn parts(v: f32, s: f32, r: f32) -> bool {
    Rounding::ALL
        .into_iter()
        .any(|rd| cvt_clamped_s8(v / s, rd) != cvt_clamped_s8(v * r, rd))
}

/// A parting TIES group's amax and its points (at the exponent of `127`):
/// those where the two codes part, and all.
#[derive(Clone, Debug)]
struct Parting {
    amax: f32,
    parting: Vec<f32>,
    all: Vec<f32>,
}

impl Parting {
    /// The best of 4 amaxes in `[127, 254)` of `d`: the one with the most
    /// points within 2 steps of `d` of `n s` (`n != 0`) or `(n + 1/2) s`
    /// where the two codes part.
    fn draw(d: Dtype, rng: &mut Rng) -> Parting {
        let mut best: Option<Parting> = None;
        for _ in 0..4 {
            let a = fin(d, 127.0 * (1.0 + rng.f01()));
            let (s, r) = (a / 127.0, 127.0 / a);
            let mut p = Parting {
                amax: a,
                parting: Vec::new(),
                all: Vec::new(),
            };
            for n in -127i32..=127 {
                for half in [0.0f32, 0.5] {
                    if (n == 0 && half == 0.0) || (n == 127 && half == 0.5) {
                        continue;
                    }
                    let t = fin(d, (n as f32 + half) * s);
                    for step in -2..=2 {
                        let v = fin(d, d.steps(t, step));
                        if v.abs() <= a {
                            p.all.push(v);
                            if parts(v, s, r) {
                                p.parting.push(v);
                            }
                        }
                    }
                }
            }
            if best
                .as_ref()
                .is_none_or(|b| p.parting.len() > b.parting.len())
            {
                best = Some(p);
            }
        }
        best.expect("four draws")
    }

    /// A parting point with probability 1/2 (where there are any), else
    /// any point.
    fn point(&self, rng: &mut Rng) -> f32 {
        if rng.f01() < 0.5 && !self.parting.is_empty() {
            self.parting[rng.below(self.parting.len())]
        } else {
            self.all[rng.below(self.all.len())]
        }
    }
}

/// A random sign.
fn sign(rng: &mut Rng) -> f32 {
    if rng.f01() < 0.5 {
        -1.0
    } else {
        1.0
    }
}

/// The largest magnitude of `xs` (0 for none).
fn amax_of(xs: &[f32]) -> f32 {
    xs.iter().fold(0f32, |a, v| a.max(v.abs()))
}

/// `v` scaled by `f` in f64 then rounded to `d` (a quotient far below
/// f32's normals stays exact until the rounding).
fn rescale(d: Dtype, v: f32, f: f64) -> f32 {
    fin(d, (f64::from(v) * f) as f32)
}

/// The exponent range `2^e` of TIES's and SAT's amax `127 * 2^e` that
/// `d` holds with room for its elements.
fn exp_range(d: Dtype) -> (i32, i32) {
    match d {
        Dtype::F16 => (-6, 6),
        _ => (-10, 8),
    }
}

impl Int8GroupSpec {
    /// The default seed of a shape, group size, dtype and arm; its leading
    /// byte draws the arm ([`Int8GroupArm::from_seed`]; NAN's is the
    /// shape's hash as it is).
    pub fn base_seed(
        m: usize,
        k: usize,
        group_size: usize,
        dtype: Dtype,
        arm: Int8GroupArm,
    ) -> u64 {
        let di = Dtype::ALL.iter().position(|&x| x == dtype).unwrap_or(0);
        let h = crate::rng::shape_hash(0x18B0_0000_0000_0000u64, &[m, k, group_size, di]);
        let i = Int8GroupArm::ALL
            .iter()
            .position(|&a| a == arm)
            .unwrap_or(0);
        crate::rng::lead_with(h, i, &Int8GroupArm::ODDS)
    }

    /// Groups per row.
    pub fn groups(&self) -> usize {
        self.k.div_ceil(self.group_size.max(1))
    }

    /// The arms a check runs by default: every arm but NAN.
    pub fn default_arms() -> Vec<Int8GroupArm> {
        Int8GroupArm::ALL
            .into_iter()
            .filter(|&a| a != Int8GroupArm::Nan)
            .collect()
    }

    /// # Errors
    /// A zero `group_size`; a zero dimension; a case over [`MAX_ELEMS`].
    pub fn valid(&self) -> Result<(), String> {
        if self.group_size == 0 {
            return Err(format!(
                "group_size={}: it must be at least 1",
                self.group_size
            ));
        }
        crate::fp8_quant::within_elems(self.m, self.k)
    }

    /// `x`, drawn from `seed`, the shape, the group size and the dtype
    /// alone: every value one of the dtype's (finite, but NAN's NaNs).
    ///
    /// # Errors
    /// As [`Int8GroupSpec::valid`].
    pub fn generate(&self) -> Result<Vec<f32>, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let (k, gs, d) = (self.k, self.group_size, self.dtype);
        let per_row = self.groups();
        let (e_lo, e_hi) = exp_range(d);
        let exp = |rng: &mut Rng| e_lo + rng.below((e_hi - e_lo + 1) as usize) as i32;
        // AMAX's magnitudes: a row's small groups at its own, its large
        // ones 2^8 to 2^14 above (float16: 2^10, within its range).
        let (amax_mags, amax_steps) = match d {
            Dtype::F16 => (2.0, 3),
            _ => (4.0, 7),
        };
        // TIES's parting groups draw from a pool of four, each group
        // scaled by its own power of two.
        let pool: Vec<Parting> = if self.arm == Int8GroupArm::Ties {
            (0..4).map(|_| Parting::draw(d, &mut rng)).collect()
        } else {
            Vec::new()
        };
        let mut x = vec![0f32; self.m * k];
        for (j, row) in x.chunks_mut(k).enumerate() {
            let row_mag = 10f32.powf(amax_mags * rng.f01() - 2.0);
            for (g, grp) in row.chunks_mut(gs).enumerate() {
                let t = j * per_row + g;
                let n = grp.len();
                let mag = 10f32.powf(6.0 * rng.f01() - 3.0);
                for v in grp.iter_mut() {
                    *v = fin(d, rng.normal() * mag);
                }
                match self.arm {
                    Int8GroupArm::Rand => {}
                    Int8GroupArm::Nan => {
                        if n >= 2 {
                            grp[0] = f32::NAN;
                            grp[n - 1] = f32::NAN;
                        }
                        if n >= 8 {
                            grp[1 + rng.below(n - 2)] = f32::NAN;
                        }
                    }
                    Int8GroupArm::Ties => {
                        if t.is_multiple_of(2) {
                            let p = pow2(exp(&mut rng));
                            ties_exact(d, &mut rng, grp, p);
                        } else {
                            let p = &pool[rng.below(pool.len())];
                            let f = f64::from(pow2(exp(&mut rng) - 1));
                            for v in grp.iter_mut() {
                                *v = rescale(d, p.point(&mut rng) * sign(&mut rng), f);
                            }
                            grp[rng.below(n)] = rescale(d, p.amax * sign(&mut rng), f);
                        }
                    }
                    Int8GroupArm::Zero => match t % 4 {
                        0 => {
                            for (i, v) in grp.iter_mut().enumerate() {
                                *v = if i % 3 == 1 { -0.0 } else { 0.0 };
                            }
                        }
                        1 => {
                            let target = match d {
                                Dtype::F16 => f64::from(pow2(-20)),
                                _ => f64::from(pow2(-43 + rng.below(7) as i32)),
                            };
                            let a = f64::from(amax_of(grp).max(f32::MIN_POSITIVE));
                            for v in grp.iter_mut() {
                                *v = rescale(d, *v, target / a);
                            }
                        }
                        2 => {
                            let one = fin(d, mag * sign(&mut rng));
                            grp.fill(0.0);
                            grp[rng.below(n)] = one;
                        }
                        _ => {}
                    },
                    Int8GroupArm::Amax => {
                        let f = if g % 2 == 1 {
                            pow2(8 + rng.below(amax_steps) as i32)
                        } else {
                            1.0
                        };
                        let neg = (g + j) % 3 == 0;
                        for v in grp.iter_mut() {
                            let u = fin(d, rng.normal() * row_mag * f);
                            *v = if neg { -u.abs() } else { u };
                        }
                        if n >= 2 {
                            let at = if (g / 2 + j) % 2 == 0 { 0 } else { n - 1 };
                            let rest = amax_of(grp).max(f32::MIN_POSITIVE);
                            let s = if neg { -1.0 } else { sign(&mut rng) };
                            grp[at] = fin(d, 2.0 * rest * s);
                        }
                    }
                    Int8GroupArm::Sat => {
                        let e = exp(&mut rng);
                        sat_group(d, &mut rng, grp, t % 4, e);
                    }
                    Int8GroupArm::Pow2 => pow2_group(d, &mut rng, grp, t),
                }
            }
        }
        Ok(x)
    }
}

/// One exact TIES group (amax `127 p`, `p` a power of two; module docs
/// of [`Int8GroupArm::Ties`]).
fn ties_exact(d: Dtype, rng: &mut Rng, grp: &mut [f32], p: f32) {
    const FRACS: [f32; 5] = [0.5, 0.25, 0.75, 0.125, 0.875];
    let n = grp.len();
    for v in grp.iter_mut() {
        let f = FRACS[rng.below(FRACS.len())];
        let mut i = rng.below(127) as f32;
        // bfloat16's 8 bits hold n + 1/8 only below 16.
        if d.round((i + f) * p) != (i + f) * p {
            i = (i as usize % 16) as f32;
        }
        *v = (i + f) * p * sign(rng);
    }
    let at = rng.below(n);
    if n >= 2 {
        // 2i + 1/2: to nearest even 2i, away 2i + 1, toward zero 2i.
        grp[(at + 1) % n] = (2.0 * rng.below(63) as f32 + 0.5) * p * sign(rng);
    }
    if n >= 3 {
        // -(i + 3/4): toward zero -i, to nearest -(i + 1).
        grp[(at + 2) % n] = -(rng.below(16) as f32 + 0.75) * p;
    }
    grp[at] = 127.0 * p * sign(rng);
}

/// One POW2 group `t` (module docs of [`Int8GroupArm::Pow2`]): its amax
/// from its [`Pow2Kind`], at a random element and sign; the other
/// elements (drawn already) scaled into `(-0.999, 0.999)` times it.
fn pow2_group(d: Dtype, rng: &mut Rng, grp: &mut [f32], t: usize) {
    let kind = Pow2Kind::of_group(t);
    let a = if d == Dtype::F32 {
        let (e, u) = kind.draw(rng);
        pow2_amax(ulps_from_pow2(e, u), 127.0, Some(1.0 / 127.0))
            .expect("a normal scale has an amax")
    } else {
        let (lo, hi) = exp_range(d);
        let p = 127.0 * pow2(lo + rng.below((hi - lo + 1) as usize) as i32);
        match kind {
            Pow2Kind::Power => p,
            Pow2Kind::Below => d.steps(p, -1),
            Pow2Kind::Parting | Pow2Kind::Above => d.steps(p, 1),
        }
    };
    let big = amax_of(grp).max(f32::MIN_POSITIVE);
    for v in grp.iter_mut() {
        *v = fin(d, *v / big * a * 0.999);
    }
    grp[rng.below(grp.len())] = a * sign(rng);
}

/// Whether `a`'s quotient under `kind` is what SAT's kind of group wants:
/// 0, `fl(a / s) < 127`; 1, divide and reciprocal code `a` apart toward
/// zero; 2, `fl(a / s) > 127`.
fn sat_kind(a: f32, kind: usize) -> bool {
    let s = a / 127.0;
    let tz = Rounding::TowardZero;
    match kind {
        0 => a / s < 127.0,
        1 => cvt_clamped_s8(a / s, tz) != cvt_clamped_s8(a * (127.0 / a), tz),
        _ => a / s > 127.0,
    }
}

/// One SAT group of kind `kind` (module docs of [`Int8GroupArm::Sat`]),
/// its amax near `127 * 2^e`.
fn sat_group(d: Dtype, rng: &mut Rng, grp: &mut [f32], kind: usize, e: i32) {
    let p = pow2(e);
    let mut a = 127.0 * p;
    if kind < 3 {
        for _ in 0..64 {
            a = fin(d, 127.0 * p * (1.0 + rng.f01()));
            if sat_kind(a, kind) {
                break;
            }
        }
    }
    let n = grp.len();
    for v in grp.iter_mut() {
        *v = fin(d, a * (2.0 * rng.f01() - 1.0));
    }
    for _ in 0..n.min(4) {
        grp[rng.below(n)] = fin(d, d.steps(a, -(1 + rng.below(4) as i32))) * sign(rng);
    }
    let at = rng.below(n);
    grp[at] = a;
    if n >= 2 {
        grp[(at + 1 + rng.below(n - 1)) % n] = -a;
    }
}

/// The oracle's codes and scales for `x` under `rule`.
///
/// # Errors
/// As [`Int8GroupSpec::valid`], and the oracle's (an `eps` that is NaN,
/// infinite or negative).
pub fn int8_group_reference(
    spec: &Int8GroupSpec,
    x: &[f32],
    rule: Int8GroupRule,
) -> Result<Int8Out, String> {
    spec.valid()?;
    let mut out = Int8Out {
        q: vec![0; x.len()],
        s: vec![0.0; spec.m * spec.groups()],
        azp: Vec::new(),
    };
    quantize_int8_groups(x, spec.k, spec.group_size, rule, &mut out.q, &mut out.s)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The known rules ([`int8_group_known`] at `eps`) whose output equals
/// `got` bit for bit.
pub fn int8_group_identify(
    spec: &Int8GroupSpec,
    x: &[f32],
    got: &Int8Out,
    eps: f32,
) -> Vec<Int8GroupRule> {
    int8_group_known(eps)
        .into_iter()
        .filter(|&rule| {
            int8_group_reference(spec, x, rule)
                .map(|want| Int8Verdict::judge(spec.k, got, &want).pass())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle::int8_group_quant::EPS;

    const VLLM: Int8GroupRule = Int8GroupRule::vllm(EPS);

    fn spec(m: usize, k: usize, d: Dtype, arm: Int8GroupArm) -> Int8GroupSpec {
        Int8GroupSpec {
            m,
            k,
            group_size: 128,
            dtype: d,
            arm,
            seed: Int8GroupSpec::base_seed(m, k, 128, d, arm),
        }
    }

    fn rule(rounding: Rounding, codes: Codes, ue8m0: Option<Ue8m0Ceil>) -> Int8GroupRule {
        Int8GroupRule {
            rounding,
            codes,
            ue8m0,
            eps: EPS,
        }
    }

    /// Whether two rules give different bits on a case.
    fn differ(sp: &Int8GroupSpec, a: Int8GroupRule, b: Int8GroupRule) -> bool {
        let x = sp.generate().unwrap();
        let wa = int8_group_reference(sp, &x, a).unwrap();
        let wb = int8_group_reference(sp, &x, b).unwrap();
        !Int8Verdict::judge(sp.k, &wa, &wb).pass()
    }

    const TZ: Rounding = Rounding::TowardZero;
    const NE: Rounding = Rounding::NearestEven;
    const NA: Rounding = Rounding::NearestAway;
    const DIV: Codes = Codes::Divide;
    const LOG2F: Option<Ue8m0Ceil> = Some(Ue8m0Ceil::Log2f);
    const EXACT: Option<Ue8m0Ceil> = Some(Ue8m0Ceil::Exact);
    const REC: Codes = Codes::Reciprocal;

    #[test]
    fn arms_from_seed_reach_their_odds_and_base_seeds_lead_with_their_arm() {
        let mut rng = Rng(23);
        let n = 1 << 14;
        let mut count = [0usize; 7];
        for _ in 0..n {
            let a = Int8GroupArm::from_seed(rng.next_u64());
            count[Int8GroupArm::ALL.iter().position(|&b| b == a).unwrap()] += 1;
        }
        for (i, &c) in count.iter().enumerate() {
            let want = n as f64 * f64::from(Int8GroupArm::ODDS[i]) / 256.0;
            assert!(
                (c as f64 - want).abs() <= want * 0.15,
                "{:?}: {c} of {n}",
                Int8GroupArm::ALL[i]
            );
        }
        assert_eq!(count[6], 0);
        assert_eq!(Int8GroupArm::ODDS.iter().sum::<u32>(), 256);
        for &(m, k) in &INT8_GROUP_SHAPES {
            for d in Dtype::ALL {
                for arm in Int8GroupSpec::default_arms() {
                    let seed = Int8GroupSpec::base_seed(m, k, 128, d, arm);
                    assert_eq!(Int8GroupArm::from_seed(seed), arm);
                }
            }
        }
        assert_eq!(Int8GroupArm::parse("sat"), Ok(Int8GroupArm::Sat));
        assert!(Int8GroupArm::parse("tail").is_err());
    }

    /// Every default arm draws finite values of its dtype at every default
    /// shape (and a group of 64 and one of 7), and the reference is its
    /// own identification.
    #[test]
    fn every_case_is_of_its_dtype_and_names_its_rule() {
        for &(m, k) in &INT8_GROUP_SHAPES[..4] {
            for d in Dtype::ALL {
                for arm in Int8GroupSpec::default_arms() {
                    for gs in [128, 64, 7] {
                        let sp = Int8GroupSpec {
                            group_size: gs,
                            seed: Int8GroupSpec::base_seed(m, k, gs, d, arm),
                            ..spec(m, k, d, arm)
                        };
                        let x = sp.generate().unwrap();
                        assert!(
                            x.iter().all(|&v| v.is_finite() && d.round(v) == v),
                            "{sp:?}"
                        );
                        let w = int8_group_reference(&sp, &x, VLLM).unwrap();
                        assert!(int8_group_identify(&sp, &x, &w, EPS).contains(&VLLM));
                        assert!(w.q.iter().all(|&c| c > -128), "{sp:?}");
                    }
                }
            }
        }
        let bad = Int8GroupSpec {
            group_size: 0,
            ..spec(1, 8, Dtype::F32, Int8GroupArm::Rand)
        };
        assert!(bad.generate().is_err());
        assert!(spec(0, 8, Dtype::F32, Int8GroupArm::Rand)
            .generate()
            .is_err());
    }

    /// TIES parts the three roundings at every default shape and dtype,
    /// and divide from reciprocal in float32 wherever a case has a parting
    /// group (two groups or more).
    #[test]
    fn the_ties_arm_parts_the_roundings_and_the_codes() {
        for &(m, k) in &INT8_GROUP_SHAPES {
            for d in Dtype::ALL {
                let sp = spec(m, k, d, Int8GroupArm::Ties);
                for (a, b) in [(TZ, NE), (TZ, NA), (NE, NA)] {
                    assert!(
                        differ(&sp, rule(a, DIV, None), rule(b, DIV, None)),
                        "{sp:?} {a:?} {b:?}"
                    );
                    assert!(
                        differ(&sp, rule(a, DIV, LOG2F), rule(b, DIV, LOG2F)),
                        "{sp:?} {a:?} {b:?}"
                    );
                }
                if m * sp.groups() >= 2 && d == Dtype::F32 {
                    for r in Rounding::ALL {
                        assert!(
                            differ(&sp, rule(r, DIV, None), rule(r, REC, None)),
                            "{sp:?} {r:?}"
                        );
                    }
                }
            }
        }
    }

    /// TIES's exact groups: every element a tie or a fraction of
    /// `2^e`, amax `127 * 2^e`; its parting groups in float32 part divide
    /// from reciprocal on a quarter of their elements or more.
    #[test]
    fn the_ties_arm_reaches_its_designed_rates() {
        let sp = spec(16, 4096, Dtype::F32, Int8GroupArm::Ties);
        let x = sp.generate().unwrap();
        let (mut exact, mut parting) = (0, 0);
        for (t, grp) in x.chunks(128).enumerate() {
            let a = amax_of(grp);
            let (s, r) = (a / 127.0, 127.0 / a);
            if t % 2 == 0 {
                assert_eq!(s.to_bits() & 0x007F_FFFF, 0, "{a}");
                assert!(grp.iter().all(|&v| (v / s).fract() != 0.0 || v.abs() == a));
                exact += 1;
            } else {
                let n = grp.iter().filter(|&&v| parts(v, s, r)).count();
                assert!(n >= 128 / 4, "{n}");
                parting += 1;
            }
        }
        assert_eq!((exact, parting), (256, 256));
    }

    /// ZERO's four kinds at a quarter of the groups each; the floor
    /// decides the zero and tiny groups' scales (eps 0 and 1e-4 differ
    /// from 1e-10).
    #[test]
    fn the_zero_arm_draws_its_kinds_and_needs_the_floor() {
        for d in Dtype::ALL {
            let sp = spec(8, 1024, d, Int8GroupArm::Zero);
            let x = sp.generate().unwrap();
            let w = int8_group_reference(&sp, &x, VLLM).unwrap();
            for (t, grp) in x.chunks(128).enumerate() {
                let a = amax_of(grp);
                match t % 4 {
                    0 => assert!(a == 0.0 && w.s[t] == EPS / 127.0),
                    1 if d != Dtype::F16 => assert!(a > 0.0 && a < EPS && w.s[t] == EPS / 127.0),
                    1 => assert!(a > 0.0 && a < 1e-5),
                    2 => assert_eq!(grp.iter().filter(|&&v| v != 0.0).count(), 1),
                    _ => assert!(a > 1e-4),
                }
            }
            for eps in [0.0, 1e-4] {
                assert!(
                    differ(&sp, VLLM, Int8GroupRule { eps, ..VLLM }),
                    "{d:?} {eps}"
                );
            }
        }
    }

    /// AMAX: adjacent groups far apart, each group's amax at an edge,
    /// every third group all negative.
    #[test]
    fn the_amax_arm_puts_the_amax_at_a_group_edge() {
        for d in Dtype::ALL {
            let sp = spec(4, 1000, d, Int8GroupArm::Amax);
            let x = sp.generate().unwrap();
            let mut negative = 0;
            for (j, row) in x.chunks(1000).enumerate() {
                let groups: Vec<&[f32]> = row.chunks(128).collect();
                for (g, grp) in groups.iter().enumerate() {
                    let a = amax_of(grp);
                    let at = grp.iter().position(|v| v.abs() == a).unwrap();
                    assert!(at == 0 || at == grp.len() - 1, "{d:?} {j} {g}");
                    if (g + j) % 3 == 0 {
                        assert!(grp.iter().all(|&v| v <= 0.0));
                        negative += 1;
                    }
                    if g + 1 < groups.len() {
                        let ratio = amax_of(groups[g + 1]) / a;
                        let ratio = if g % 2 == 0 { ratio } else { 1.0 / ratio };
                        assert!(ratio > 60.0, "{d:?} {ratio}");
                    }
                }
            }
            assert!(negative >= 10);
        }
    }

    /// SAT: every group codes ±127 or ±126 at its amax, never -128; in
    /// float32 and bfloat16 a quarter of the groups code their amax 126
    /// toward zero, and the arm parts toward zero from to nearest and
    /// divide from reciprocal; a scale of absmax / 128 codes -128.
    #[test]
    fn the_sat_arm_codes_the_top_of_the_range() {
        for d in Dtype::ALL {
            let sp = spec(8, 1024, d, Int8GroupArm::Sat);
            let x = sp.generate().unwrap();
            let w = int8_group_reference(&sp, &x, VLLM).unwrap();
            let mut at_126 = 0;
            for (t, (grp, q)) in x.chunks(128).zip(w.q.chunks(128)).enumerate() {
                let a = amax_of(grp);
                let top = q[grp.iter().position(|&v| v == a).unwrap()];
                let bottom = q[grp.iter().position(|&v| v == -a).unwrap()];
                assert_eq!(top, -bottom);
                assert!(top == 127 || top == 126);
                at_126 += usize::from(top == 126);
                if t % 4 == 3 {
                    assert_eq!(top, 127);
                }
            }
            if d != Dtype::F16 {
                assert!(at_126 >= 64 / 4, "{d:?} {at_126}");
            }
            assert!(differ(&sp, VLLM, rule(NE, DIV, None)));
            assert!(differ(&sp, VLLM, rule(TZ, REC, None)), "{d:?}");
        }
    }

    /// POW2 in float32: every group's `absmax / 127` is 1 to 3 ulps from
    /// (or at) a power of two by its kind, torch's `absmax * fl(1/127)`
    /// the same scale in every group; the two ceilings
    /// part on exactly the parting half (`t % 4` of 0 or 2). In bfloat16
    /// and float16, no group parts them: the amax is `127 * 2^e` or a
    /// dtype step from it, and a ceiling that rounds a power up fails.
    #[test]
    fn the_pow2_arm_parts_the_ceilings_at_its_designed_rate() {
        let sp = spec(64, 4096, Dtype::F32, Int8GroupArm::Pow2);
        let x = sp.generate().unwrap();
        let (mut parting, mut torch_same, mut n) = (0usize, 0usize, 0usize);
        for (t, grp) in x.chunks(128).enumerate() {
            let a = amax_of(grp);
            let s = a / 127.0;
            let e = f64::from(s).log2().round() as i32;
            let u = s.to_bits() as i64 - pow2(e).to_bits() as i64;
            assert!(
                (-20..=20).contains(&e) && (-3..=3).contains(&u),
                "{t}: {s:e}"
            );
            let kind = Pow2Kind::of_group(t);
            let parts = Ue8m0Ceil::Log2f.scale(s) != Ue8m0Ceil::Exact.scale(s);
            assert_eq!(parts, kind == Pow2Kind::Parting, "{t}: {s:e}");
            assert_eq!(u == 0, kind == Pow2Kind::Power, "{t}: {u}");
            assert_eq!(u < 0, kind == Pow2Kind::Below, "{t}: {u}");
            parting += usize::from(parts);
            torch_same += usize::from(a * (1.0 / 127.0) == s);
            n += 1;
        }
        assert_eq!((parting, n), (1024, 2048));
        assert_eq!(torch_same, n);
        for d in [Dtype::Bf16, Dtype::F16] {
            let sp = spec(8, 1024, d, Int8GroupArm::Pow2);
            let x = sp.generate().unwrap();
            for (t, grp) in x.chunks(128).enumerate() {
                let s = amax_of(grp) / 127.0;
                let (l, e) = (Ue8m0Ceil::Log2f.scale(s), Ue8m0Ceil::Exact.scale(s));
                assert_eq!(l, e, "{d:?} {t}");
                assert_eq!(
                    s == l,
                    Pow2Kind::of_group(t) == Pow2Kind::Power,
                    "{d:?} {t}: {s:e}"
                );
            }
        }
    }

    /// The two UE8M0 ceilings part on POW2 in float32 at every default
    /// shape (one group included), under divide and torch_divide codes,
    /// and nowhere else: on no other arm, in no 16-bit dtype.
    #[test]
    fn only_pow2_in_float32_tells_the_ue8m0_ceilings_apart() {
        for &(m, k) in &INT8_GROUP_SHAPES {
            for d in Dtype::ALL {
                for arm in Int8GroupSpec::default_arms() {
                    let sp = spec(m, k, d, arm);
                    for codes in [DIV, Codes::TorchDivide] {
                        let parts = differ(&sp, rule(TZ, codes, LOG2F), rule(TZ, codes, EXACT));
                        let want = arm == Int8GroupArm::Pow2 && d == Dtype::F32;
                        assert_eq!(parts, want, "{m},{k} {d:?} {arm:?} {codes:?}");
                    }
                }
            }
        }
        assert!(Int8GroupSpec::default_arms().contains(&Int8GroupArm::Pow2));
        assert_eq!(Int8GroupArm::parse("pow2"), Ok(Int8GroupArm::Pow2));
    }

    /// NAN: NaN at each group's ends, skipped by the maximum, coded -128.
    #[test]
    fn the_nan_arm_plants_nans_that_the_maximum_skips() {
        let sp = spec(3, 203, Dtype::Bf16, Int8GroupArm::Nan);
        assert!(!Int8GroupSpec::default_arms().contains(&Int8GroupArm::Nan));
        let x = sp.generate().unwrap();
        let w = int8_group_reference(&sp, &x, VLLM).unwrap();
        for row in 0..3 {
            for (lo, hi) in [(0, 128), (128, 203)] {
                let grp = &x[row * 203 + lo..row * 203 + hi];
                assert!(grp[0].is_nan() && grp[hi - lo - 1].is_nan());
                assert_eq!(grp.iter().filter(|v| v.is_nan()).count(), 3);
                for (i, v) in grp.iter().enumerate() {
                    if v.is_nan() {
                        assert_eq!(w.q[row * 203 + lo + i], -128);
                    }
                }
            }
        }
        assert!(w.s.iter().all(|s| s.is_finite() && *s > 0.0));
    }

    /// Over the default arms, each known rule's output matches itself
    /// alone (UE8M0's three, and the rest) on a float32 case of several
    /// groups a row.
    #[test]
    fn identify_tells_every_known_rule_apart() {
        let known = int8_group_known(EPS);
        assert_eq!(known.len(), 15);
        let mut every: Vec<Vec<Int8GroupRule>> = known.iter().map(|_| known.clone()).collect();
        for arm in Int8GroupSpec::default_arms() {
            let sp = spec(8, 1003, Dtype::F32, arm);
            let x = sp.generate().unwrap();
            for (i, &r) in known.iter().enumerate() {
                let w = int8_group_reference(&sp, &x, r).unwrap();
                let ids = int8_group_identify(&sp, &x, &w, EPS);
                assert!(ids.contains(&r));
                every[i].retain(|x| ids.contains(x));
            }
        }
        for (i, &r) in known.iter().enumerate() {
            assert_eq!(every[i], vec![r], "{}", r.label());
        }
    }
}
