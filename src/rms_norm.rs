//! Cases for judging an RMSNorm kernel, or a fused add + RMSNorm (vLLM's
//! `rms_norm` and `fused_add_rms_norm`, FlashInfer's `rmsnorm` and
//! `fused_add_rmsnorm`, Hugging Face's torch forms, Liger's Triton
//! kernel, `torch.nn.functional.rms_norm`) under the arithmetic it
//! declares ([`oracle::rms_norm::Arithmetic`]): every output element
//! within the interval core's sound bound on the inverse RMS leaves, bit
//! for bit where that interval is one value, the fused add's residual
//! output bit for bit; and for naming the arithmetics an output matches.
//!
//! A case (elements, row-major): `x [rows][hidden]`, with the fused add
//! `residual [rows][hidden]`, and `weight [hidden]`, all values of the
//! model's dtype. Every non-zero value drawn has magnitude at least
//! `2^-60`, so no binary32 sum or product of the data is subnormal and
//! flush to zero changes nothing (rule `RMS-FTZ` holds either way).
//! Weights: mostly of magnitude 0.25 to 1.75, one in eight negative, one
//! in 32 a zero of either sign (the output's zero takes the product's
//! sign); in f16's LARGE and SPIKE one in eight (and SPIKE's last column,
//! where every row has a spike) from `2^12` to 65504, so that some
//! outputs overflow f16 (decided infinities: a kernel that saturates at
//! 65504 fails).

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::rms_norm::{
    admits, residual_out, Arithmetic, Declared, Dtype, InvRms, RmsNormError, Shape, SumRounding,
};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal values with a scale per row from `2^-3` to `2^3` (so `r`
    /// differs from row to row and `mean(x^2) + eps` is not 1), one element
    /// in 64 exactly zero, of either sign (`-0 r w` keeps its sign, so a
    /// kernel that writes a zero input as `+0 w` fails), weights of either
    /// sign away from 1: the
    /// arithmetic (rounding before or after the weight, Gemma's `1 + w`),
    /// a mean over a padded row, weights dropped past the last whole
    /// vector, one row's `r` used for another, `1 / v` for `1 / sqrt(v)`,
    /// and the fused add's residual output and variance.
    Rand,
    /// One to three huge elements per row, one of them the row's last
    /// element (in the tail past the last whole vector of 2, 4 or 8), one
    /// the first: the sum of squares is dominated by them, so a kernel that
    /// drops tail elements from the sum, or accumulates in bf16 or f16 (an
    /// f16 square of the spike overflows), fails.
    Spike,
    /// Large magnitudes: f16 values from 256 to 65504, whose squares
    /// overflow f16 but not f32 (a kernel that squares in f16 fails); bf16
    /// and f32 values up to `2^((124 - ceil(log2 hidden)) / 2)`, so the
    /// sum of squares nears `2^124` (a kernel whose sum overflows, or that
    /// scales badly, fails). Halved with the fused add so the sum stays
    /// finite.
    Large,
    /// Rows by kind, the kind from the row's index and the seed: all zero
    /// (x and residual), values near `sqrt(eps)` (`mean(x^2)` about
    /// `eps`), values `2^-6 sqrt(eps)` (eps dominates) and one non-zero
    /// element: where eps sits shows (outside the square root, added to
    /// the sum instead of the mean, missing: `0 * inf` is NaN).
    Small,
    /// Small integers times a power of two: per row `y = m 2^k`, `k` from
    /// -6 to 3, `|m|` from `ceil(M / 2)` to `M` (one element in 64 zero)
    /// with `M` the largest whose `hidden M^2` is below `2^24`
    /// ([`exact_max`]: 45 at hidden 8192, 15 at 65536), so every order of
    /// the sum of squares is exact (core's rule `RMS-EXACT`) and the
    /// interval of `r` is a few binary32 ulps wide at any hidden size,
    /// where the other arms' spans about `(hidden / 2) 2^-24`: a mean over
    /// `n - 1`, or one element lost from the sum, fails on the long rows.
    /// With the fused add, `x = (m - b) 2^k` and `residual = b 2^k`, `|b| <=
    /// M`, and `M` is halved again where `2 M` would not be exact in the
    /// dtype.
    Exact,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 5] = [Arm::Rand, Arm::Spike, Arm::Large, Arm::Small, Arm::Exact];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Spike => "SPIKE",
            Arm::Large => "LARGE",
            Arm::Small => "SMALL",
            Arm::Exact => "EXACT",
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

/// The arithmetic named `s` ([`Arithmetic::name`]).
///
/// # Errors
/// A sentence naming the arithmetics.
pub fn parse_arithmetic(s: &str) -> Result<Arithmetic, String> {
    crate::names::parse_named("arithmetic", s, &Arithmetic::ALL, Arithmetic::name, false)
}

/// The sum rounding named `s` ([`SumRounding::name`]).
///
/// # Errors
/// A sentence naming the two.
pub fn parse_sum(s: &str) -> Result<SumRounding, String> {
    crate::names::parse_named(
        "sum_rounding",
        s,
        &SumRounding::ALL,
        SumRounding::name,
        false,
    )
}

/// The most elements a case has (`rows * hidden`, 16 MiB of f32): a
/// check keeps about ten arrays of that many and identification computes
/// the case six times.
pub const MAX_ELEMS: usize = 1 << 22;

/// The longest row a check runs (`2^17`; core's limit is
/// [`oracle::rms_norm::MAX_HIDDEN`]).
pub const MAX_HIDDEN: usize = 1 << 17;

/// `(rows, hidden)`.
pub type Dims = (usize, usize);

/// The oracle's shape of `d`, refused past the caps.
///
/// # Errors
/// A shape error ([`RmsNormError`]) or a case over [`MAX_ELEMS`] or
/// [`MAX_HIDDEN`], as a sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    let shape = Shape::new(d.0, d.1).map_err(|e| e.to_string())?;
    if d.1 > MAX_HIDDEN {
        return Err(format!(
            "{d:?}: hidden {} over the check's {MAX_HIDDEN}",
            d.1
        ));
    }
    if shape.len() > MAX_ELEMS {
        return Err(format!(
            "{d:?}: {} elements (rows*hidden), over the check's {MAX_ELEMS}",
            shape.len()
        ));
    }
    Ok(shape)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// `(rows, hidden)`.
    pub dims: Dims,
    /// The model's dtype.
    pub dtype: Dtype,
    /// The declared eps (SMALL's magnitudes follow it).
    pub eps: f32,
    /// With the fused add (a residual is drawn).
    pub fused: bool,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs, as values (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[rows][hidden]`.
    pub x: Vec<f32>,
    /// `[rows][hidden]` with the fused add, empty without.
    pub residual: Vec<f32>,
    /// `[hidden]`.
    pub weight: Vec<f32>,
}

/// The smallest non-zero magnitude drawn: `2^-60`.
const TINY: f32 = 1.0 / 1_152_921_504_606_846_976.0;

/// `v` rounded to `dtype`, a magnitude under [`TINY`] made 0.
fn val(dtype: Dtype, v: f64) -> f32 {
    let r = dtype.round(v as f32);
    if r.abs() < TINY {
        0.0
    } else {
        r
    }
}

/// `2^e`, `e` a real exponent.
fn pow2(e: f64) -> f64 {
    e.exp2()
}

/// EXACT's largest `|m|` for rows of `hidden`: the greatest `M` with
/// `hidden M^2 < 2^24`, at most `2^p` for a dtype of `p` significant bits
/// (every integer up to it is a dtype value), at most `2^(p - 1)` with the
/// fused add (whose parts reach `2 M`).
pub fn exact_max(hidden: usize, dtype: Dtype, fused: bool) -> u64 {
    let limit = (1u64 << 24) - 1;
    let h = hidden.max(1) as u64;
    let mut m = ((limit / h) as f64).sqrt() as u64;
    while (m + 1) * (m + 1) * h <= limit {
        m += 1;
    }
    while m * m * h > limit {
        m -= 1;
    }
    let bits = match dtype {
        Dtype::F32 => 24,
        Dtype::Bf16 => 8,
        Dtype::F16 => 11,
    };
    m.min(1 << (bits - u32::from(fused)))
}

impl Spec {
    /// The default seed of a shape, dtype, fused add and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, fused: bool, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x0A5E_2B0D_0000_0000u64, &[d.0, d.1]);
        let idx = Dtype::ALL.iter().position(|&y| y == dtype).unwrap_or(0) as u64;
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ (idx << 8) ^ (u64::from(fused) << 4) ^ arm
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.dims)
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`]; an eps that is not a positive normal f32.
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        if !(self.eps.is_finite() && self.eps >= f32::MIN_POSITIVE) {
            return Err(format!("eps {:e}: a positive normal float32", self.eps));
        }
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.dtype;
        let mut rng = Rng(self.seed);
        // f16's LARGE and SPIKE: one weight in eight from 2^12 to 65504, and
        // SPIKE's last column (every row's spike is there) always.
        let big_weights = dt == Dtype::F16 && matches!(self.arm, Arm::Large | Arm::Spike);
        let weight: Vec<f32> = (0..h)
            .map(|j| {
                let sign = if rng.below(8) == 0 { -1.0 } else { 1.0 };
                let kind = rng.below(32);
                let spike = self.arm == Arm::Spike && j == h - 1;
                if kind == 0 && !(big_weights && spike) {
                    if rng.below(2) == 0 {
                        0.0
                    } else {
                        -0.0
                    }
                } else if big_weights && (kind <= 4 || spike) {
                    let mag = pow2(12.0 + 4.0 * f64::from(rng.f01())).min(65504.0);
                    val(dt, sign * mag)
                } else {
                    val(dt, sign * (0.25 + 1.5 * f64::from(rng.f01())))
                }
            })
            .collect();
        // SMALL's kinds start at a seed-drawn offset.
        let kind0 = rng.below(4);
        let sq = f64::from(self.eps).sqrt();
        let log2h = (h as f64).log2().ceil();
        let (large_lo, large_hi) = match dt {
            Dtype::F16 => (8.0, 65504f64.log2()),
            _ => {
                let hi = ((124.0 - log2h) / 2.0).floor();
                (hi - 8.0, hi)
            }
        };
        let halve = if self.fused { 0.5 } else { 1.0 };
        let draw_row = |row: usize, rng: &mut Rng| -> Vec<f32> {
            let scale = pow2(6.0 * f64::from(rng.f01()) - 3.0);
            let normal = |rng: &mut Rng, s: f64| val(dt, f64::from(rng.normal()) * s);
            match self.arm {
                Arm::Rand | Arm::Spike => {
                    let mut v: Vec<f32> = (0..h)
                        .map(|_| match rng.below(128) {
                            0 => 0.0,
                            1 => -0.0,
                            _ => normal(rng, scale),
                        })
                        .collect();
                    if self.arm == Arm::Spike {
                        let k = 1 + rng.below(3);
                        for s in 0..k {
                            let at = match s {
                                0 => h - 1,
                                1 => 0,
                                _ => rng.below(h),
                            };
                            let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                            // At least 256: an f16 square of it overflows.
                            let mag = (scale
                                * (h as f64).sqrt()
                                * pow2(4.0 + 2.0 * f64::from(rng.f01())))
                            .max(pow2(8.0 + f64::from(rng.f01())));
                            let cap = if dt == Dtype::F16 {
                                60000.0 * halve
                            } else {
                                1e30
                            };
                            v[at] = val(dt, sign * mag.min(cap));
                        }
                    }
                    v
                }
                Arm::Large => (0..h)
                    .map(|_| {
                        let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                        let e = large_lo + (large_hi - large_lo) * f64::from(rng.f01());
                        val(dt, sign * pow2(e) * halve)
                    })
                    .collect(),
                Arm::Exact => unreachable!("EXACT draws x and residual together"),
                Arm::Small => match (row + kind0) % 4 {
                    0 => vec![0.0; h],
                    1 => {
                        let s = sq * pow2(2.0 * f64::from(rng.f01()) - 1.0);
                        (0..h).map(|_| normal(rng, s)).collect()
                    }
                    2 => (0..h).map(|_| normal(rng, sq * pow2(-6.0))).collect(),
                    _ => {
                        let mut v = vec![0.0; h];
                        let at = rng.below(h);
                        let s = sq * (h as f64).sqrt() * pow2(2.0 * f64::from(rng.f01()) - 1.0);
                        let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                        v[at] = val(dt, sign * s);
                        v
                    }
                },
            }
        };
        let mut x = Vec::with_capacity(shape.len());
        let mut residual = Vec::new();
        let big = exact_max(h, dt, self.fused) as usize;
        for row in 0..rows {
            if self.arm == Arm::Exact {
                let scale = pow2(rng.below(10) as f64 - 6.0);
                for _ in 0..h {
                    let m = if rng.below(64) == 0 {
                        0
                    } else {
                        let half = big.div_ceil(2);
                        let mag = half + rng.below(big - half + 1);
                        if rng.below(2) == 0 {
                            -(mag as i64)
                        } else {
                            mag as i64
                        }
                    };
                    if self.fused {
                        let b = rng.below(2 * big + 1) as i64 - big as i64;
                        x.push(val(dt, (m - b) as f64 * scale));
                        residual.push(val(dt, b as f64 * scale));
                    } else {
                        x.push(val(dt, m as f64 * scale));
                    }
                }
                continue;
            }
            x.extend(draw_row(row, &mut rng));
            if self.fused {
                // SPIKE's spikes are in x; the residual is RAND-like there.
                let r = if self.arm == Arm::Spike {
                    let scale = pow2(6.0 * f64::from(rng.f01()) - 3.0);
                    (0..h)
                        .map(|_| val(dt, f64::from(rng.normal()) * scale))
                        .collect()
                } else {
                    draw_row(row, &mut rng)
                };
                residual.extend(r);
            }
        }
        Ok(Case {
            x,
            residual,
            weight,
        })
    }
}

/// The oracle's answer for a case under one declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// `[rows][hidden]`: each output's least admissible value.
    pub lo: Vec<f32>,
    /// `[rows][hidden]`: each output's greatest admissible value.
    pub hi: Vec<f32>,
    /// `[rows][hidden]` with the fused add (rule `RMS-ADD`), else empty.
    pub residual: Vec<f32>,
    /// `[rows]`: each row's admissible inverse RMS.
    pub inv_rms: Vec<InvRms>,
}

impl Reference {
    /// Whether output `i` is decided (its interval one value).
    pub fn decided(&self, i: usize) -> bool {
        self.lo[i].to_bits() == self.hi[i].to_bits()
    }
}

/// The case under `d`, rows in parallel (each as core's
/// [`oracle::rms_norm::rms_norm`]: the residual output, the normalized
/// row, [`Declared::inv_rms`], [`Arithmetic::interval`]; the tests prove
/// the two bit-identical).
///
/// # Errors
/// As [`oracle::rms_norm::check_inputs`], then
/// [`RmsNormError::AddOverflow`] for a row whose fused add overflows as
/// normalized, or [`RmsNormError::Range`] for a row whose sum of squares
/// could overflow (the first such row).
pub fn reference(shape: &Shape, case: &Case, d: &Declared) -> Result<Reference, RmsNormError> {
    let fused = !case.residual.is_empty();
    let inputs = oracle::rms_norm::Inputs {
        x: &case.x,
        residual: fused.then_some(&case.residual[..]),
        weight: &case.weight,
    };
    let n = shape.len();
    oracle::rms_norm::check_inputs(shape, &inputs, [n, n, if fused { n } else { 0 }])?;
    let h = shape.hidden();
    let (dt, a) = (d.dtype(), d.arithmetic());
    // Per row: lo, hi, the residual output, the inverse RMS.
    type Row = (Vec<f32>, Vec<f32>, Vec<f32>, InvRms);
    let rows: Vec<Result<Row, RmsNormError>> = (0..shape.rows())
        .into_par_iter()
        .map(|row| {
            let xs = &case.x[row * h..(row + 1) * h];
            let (y, res) = if fused {
                let rs = &case.residual[row * h..(row + 1) * h];
                let y = (0..h).map(|j| d.sum().normed(dt, xs[j], rs[j])).collect();
                let res = (0..h).map(|j| residual_out(dt, xs[j], rs[j])).collect();
                (y, res)
            } else {
                (xs.to_vec(), Vec::new())
            };
            if let Some(col) = y.iter().position(|v: &f32| !v.is_finite()) {
                return Err(RmsNormError::AddOverflow { row, col });
            }
            let r = d.inv_rms(&y).ok_or(RmsNormError::Range { row })?;
            let (lo, hi) = (0..h)
                .map(|j| a.interval(dt, y[j], r, case.weight[j]))
                .unzip();
            Ok((lo, hi, res, r))
        })
        .collect();
    let mut out = Reference {
        lo: Vec::with_capacity(n),
        hi: Vec::with_capacity(n),
        residual: Vec::with_capacity(if fused { n } else { 0 }),
        inv_rms: Vec::with_capacity(shape.rows()),
    };
    for row in rows {
        let (lo, hi, res, r) = row?;
        out.lo.extend(lo);
        out.hi.extend(hi);
        out.residual.extend(res);
        out.inv_rms.push(r);
    }
    Ok(out)
}

/// How a kernel's outputs compare with a [`Reference`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Output elements.
    pub n: usize,
    /// Decided elements (one admissible value), checked bit for bit.
    pub decided: usize,
    /// Decided elements whose bits differ.
    pub decided_wrong: usize,
    /// Bounded elements (an interval of several values).
    pub bounded: usize,
    /// Bounded elements outside their interval.
    pub bounded_outside: usize,
    /// The first element not admitted.
    pub first: Option<usize>,
    /// Residual output elements whose bits differ (fused add).
    pub residual_differ: usize,
    /// The first of them.
    pub first_residual: Option<usize>,
}

impl Verdict {
    /// Judges `got` (bits of `dtype`, widened to 32) and, with the fused
    /// add, `got_residual`, against `want` (rule `RMS-DECIDED`, and
    /// `RMS-ADD` bit for bit).
    pub fn judge(dtype: Dtype, want: &Reference, got: &[u32], got_residual: &[u32]) -> Verdict {
        let mut v = Verdict {
            n: want.lo.len(),
            ..Verdict::default()
        };
        for i in 0..v.n {
            let ok = got
                .get(i)
                .is_some_and(|&g| admits(dtype, want.lo[i], want.hi[i], g));
            if want.decided(i) {
                v.decided += 1;
                v.decided_wrong += usize::from(!ok);
            } else {
                v.bounded += 1;
                v.bounded_outside += usize::from(!ok);
            }
            if !ok && v.first.is_none() {
                v.first = Some(i);
            }
        }
        for (i, &w) in want.residual.iter().enumerate() {
            let ok = got_residual.get(i) == Some(&dtype.encode(w));
            if !ok {
                v.residual_differ += 1;
                v.first_residual.get_or_insert(i);
            }
        }
        v
    }

    /// Every output admitted and the residual output bit for bit.
    pub fn pass(&self) -> bool {
        self.decided_wrong == 0 && self.bounded_outside == 0 && self.residual_differ == 0
    }
}

/// `"round_then_weight"`, or with the fused add `"f32/f32_sum"`.
pub fn label(a: Arithmetic, sum: Option<SumRounding>) -> String {
    match sum {
        None => a.name().to_string(),
        Some(s) => format!("{}/{}_sum", a.name(), s.name()),
    }
}

/// Every known arithmetic (and, with the fused add, sum rounding) whose
/// intervals admit `got` everywhere (bit for bit on the decided elements)
/// and whose residual output is `got_residual`, each as [`label`] gives
/// it.
///
/// # Errors
/// A sentence: an eps or `rsqrt_ulps` core refuses, or a reference error.
pub fn identify(
    shape: &Shape,
    case: &Case,
    dtype: Dtype,
    eps: f32,
    rsqrt_ulps: u32,
    got: &[u32],
    got_residual: &[u32],
) -> Result<Vec<String>, String> {
    let fused = !case.residual.is_empty();
    let sums: Vec<Option<SumRounding>> = if fused {
        SumRounding::ALL.into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let mut found = Vec::new();
    for a in Arithmetic::ALL {
        for &s in &sums {
            let d = Declared::new(a, s.unwrap_or(SumRounding::Dtype), dtype, eps, rsqrt_ulps)
                .map_err(|e| e.to_string())?;
            let want = reference(shape, case, &d).map_err(|e| e.to_string())?;
            if Verdict::judge(dtype, &want, got, got_residual).pass() {
                found.push(label(a, s));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dims: Dims, dtype: Dtype, fused: bool, arm: Arm) -> Spec {
        Spec {
            dims,
            dtype,
            eps: 1e-6,
            fused,
            arm,
            seed: Spec::base_seed(dims, dtype, fused, arm),
        }
    }

    fn declared(a: Arithmetic, s: SumRounding, dtype: Dtype) -> Declared {
        Declared::new(a, s, dtype, 1e-6, 2).unwrap()
    }

    #[test]
    fn reference_is_cores_spec_bit_for_bit() {
        for fused in [false, true] {
            for arm in Arm::ALL {
                for dtype in Dtype::ALL {
                    let sp = spec((5, 129), dtype, fused, arm);
                    let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                    for a in Arithmetic::ALL {
                        for s in SumRounding::ALL {
                            let d = declared(a, s, dtype);
                            let want = reference(&shape, &c, &d).unwrap();
                            let n = shape.len();
                            let (mut lo, mut hi) = (vec![0f32; n], vec![0f32; n]);
                            let mut res = vec![0f32; if fused { n } else { 0 }];
                            let inputs = oracle::rms_norm::Inputs {
                                x: &c.x,
                                residual: fused.then_some(&c.residual[..]),
                                weight: &c.weight,
                            };
                            let mut out = oracle::rms_norm::Outputs {
                                lo: &mut lo,
                                hi: &mut hi,
                                residual: &mut res,
                            };
                            oracle::rms_norm::rms_norm(&shape, &d, &inputs, &mut out).unwrap();
                            assert_eq!(bits(Dtype::F32, &lo), bits(Dtype::F32, &want.lo));
                            assert_eq!(bits(Dtype::F32, &hi), bits(Dtype::F32, &want.hi));
                            assert_eq!(bits(Dtype::F32, &res), bits(Dtype::F32, &want.residual));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_arm_reaches_its_data() {
        let h = 131;
        // RAND: zeros and per-row scales.
        let c = spec((8, h), Dtype::Bf16, false, Arm::Rand)
            .generate()
            .unwrap();
        assert!(c.x.contains(&0.0));
        assert!(c.weight.iter().any(|&w| w < 0.0));
        // Zero weights of both signs, the rest from 0.25 to 1.75.
        let c = spec((8, 1024), Dtype::Bf16, false, Arm::Rand)
            .generate()
            .unwrap();
        let zeros: Vec<u32> = c
            .weight
            .iter()
            .filter(|w| **w == 0.0)
            .map(|w| w.to_bits())
            .collect();
        assert!(
            zeros.contains(&0) && zeros.contains(&0x8000_0000),
            "{zeros:?}"
        );
        assert!(c
            .weight
            .iter()
            .all(|&w| w == 0.0 || (0.25..=1.75).contains(&w.abs())));
        let c = spec((8, h), Dtype::Bf16, false, Arm::Rand)
            .generate()
            .unwrap();
        let rms =
            |r: &[f32]| (r.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / h as f64).sqrt();
        let scales: Vec<f64> = c.x.chunks(h).map(rms).collect();
        let (mn, mx) = scales
            .iter()
            .fold((f64::MAX, 0f64), |(a, b), &s| (a.min(s), b.max(s)));
        assert!(mx / mn > 4.0, "{scales:?}");
        // SPIKE: the last element of every row dominates or shares it.
        let c = spec((8, h), Dtype::F16, false, Arm::Spike)
            .generate()
            .unwrap();
        for row in c.x.chunks(h) {
            let last = f64::from(row[h - 1]).abs();
            let mut mags: Vec<f64> = row.iter().map(|v| f64::from(*v).abs()).collect();
            mags.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert!(last > 64.0 * mags[h / 2], "{last}");
            // Its f16 square overflows f16.
            assert!(last * last > 65504.0);
        }
        // LARGE: f16 squares overflow f16; bf16 sums near 2^124.
        let c = spec((4, h), Dtype::F16, false, Arm::Large)
            .generate()
            .unwrap();
        assert!(c.x.iter().all(|v| v.abs() >= 256.0 && v.is_finite()));
        let c = spec((4, h), Dtype::Bf16, false, Arm::Large)
            .generate()
            .unwrap();
        let s: f64 = c.x.iter().take(h).map(|v| f64::from(*v).powi(2)).sum();
        assert!(s > 2f64.powi(110) && s < 2f64.powi(125), "{s:e}");
        let c = spec((4, h), Dtype::F16, true, Arm::Large)
            .generate()
            .unwrap();
        assert!(c
            .x
            .iter()
            .zip(&c.residual)
            .all(|(a, b)| (a + b).abs() <= 65504.0));
        // SMALL: all four kinds over four rows.
        let sp = spec((4, h), Dtype::Bf16, true, Arm::Small);
        let c = sp.generate().unwrap();
        let sq = 1e-3f64;
        let mut kinds = [false; 4];
        for (row, res) in c.x.chunks(h).zip(c.residual.chunks(h)) {
            let nz = row.iter().filter(|&&v| v != 0.0).count();
            let r = rms(row);
            let k = if nz == 0 {
                assert!(res.iter().all(|&v| v == 0.0));
                0
            } else if nz == 1 {
                3
            } else if r > sq / 8.0 {
                1
            } else {
                2
            };
            kinds[k] = true;
        }
        assert_eq!(kinds, [true; 4]);
        // f16 LARGE and SPIKE: weights from 2^12 to 65504 (and only there).
        for (arm, big) in [(Arm::Large, true), (Arm::Spike, true), (Arm::Rand, false)] {
            let c = spec((2, 1024), Dtype::F16, false, arm).generate().unwrap();
            let n = c.weight.iter().filter(|w| w.abs() >= 4096.0).count();
            assert_eq!(n > 64, big, "{arm:?}: {n}");
            assert!(c.weight.iter().all(|w| w.abs() <= 65504.0));
        }
        // EXACT: m 2^k, |m| from ceil(M / 2) to M or 0, one k per row.
        for (dtype, fused, h) in [
            (Dtype::Bf16, false, 8192),
            (Dtype::Bf16, true, 129),
            (Dtype::F16, true, 4097),
            (Dtype::F32, false, 3),
        ] {
            let c = spec((4, h), dtype, fused, Arm::Exact).generate().unwrap();
            let big = exact_max(h, dtype, fused) as f64;
            for (i, row) in c.x.chunks(h).enumerate() {
                let y: Vec<f64> = if fused {
                    let res = &c.residual[i * h..(i + 1) * h];
                    row.iter()
                        .zip(res)
                        .map(|(a, b)| f64::from(*a) + f64::from(*b))
                        .collect()
                } else {
                    row.iter().map(|v| f64::from(*v)).collect()
                };
                let unit = y.iter().fold(0f64, |a, v| a.max(v.abs())) / big;
                // The largest |m| is over M / 2: its unit is 2^ceil(log2).
                let unit = 2f64.powi(unit.log2().ceil() as i32);
                for v in &y {
                    let m = v.abs() / unit;
                    assert!(m == m.trunc() && (m == 0.0 || m >= (big / 2.0).ceil() && m <= big));
                }
            }
        }
        assert_eq!(exact_max(8192, Dtype::Bf16, false), 45);
        assert_eq!(exact_max(65536, Dtype::F16, false), 15);
        assert_eq!(exact_max(1, Dtype::Bf16, false), 256);
        assert_eq!(exact_max(1, Dtype::Bf16, true), 128);
        assert_eq!(exact_max(3, Dtype::F32, false), 2364);
        // Every non-zero value at least 2^-60.
        for arm in Arm::ALL {
            let c = spec((4, h), Dtype::Bf16, true, arm).generate().unwrap();
            assert!(c
                .x
                .iter()
                .chain(&c.residual)
                .all(|v| *v == 0.0 || v.abs() >= TINY));
        }
    }

    #[test]
    fn each_arithmetic_identifies_itself_and_the_sum_rounding_shows() {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for fused in [false, true] {
                let sp = spec((6, 257), dtype, fused, Arm::Rand);
                let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                let sums: &[SumRounding] = if fused {
                    &SumRounding::ALL
                } else {
                    &[SumRounding::Dtype]
                };
                for a in Arithmetic::ALL {
                    for &s in sums {
                        let want = reference(&shape, &c, &declared(a, s, dtype)).unwrap();
                        // A kernel at the rounded exact r: inside its own
                        // intervals.
                        let got = bits(dtype, &want.lo);
                        let res = bits(dtype, &want.residual);
                        let v = Verdict::judge(dtype, &want, &got, &res);
                        assert!(v.pass() && v.decided > v.n * 3 / 4, "{v:?}");
                        let found = identify(&shape, &c, dtype, 1e-6, 2, &got, &res).unwrap();
                        let me = label(a, fused.then_some(s));
                        assert_eq!(found, vec![me], "{dtype:?} {fused}");
                    }
                }
            }
        }
    }

    /// A kernel's output bits: the sum of squares in the order `sum`
    /// gives, divided by `div`, eps added, `1 / sqrt` (binary32), then
    /// the declared arithmetic at that `r`.
    fn kernel(
        shape: &Shape,
        c: &Case,
        d: &Declared,
        sum: impl Fn(&[f32]) -> f32,
        div: usize,
    ) -> Vec<u32> {
        let h = shape.hidden();
        let mut out = Vec::with_capacity(shape.len());
        for (i, row) in c.x.chunks(h).enumerate() {
            let y: Vec<f32> = if c.residual.is_empty() {
                row.to_vec()
            } else {
                let res = &c.residual[i * h..(i + 1) * h];
                (0..h)
                    .map(|j| d.sum().normed(d.dtype(), row[j], res[j]))
                    .collect()
            };
            let sq: Vec<f32> = y.iter().map(|v| v * v).collect();
            let r = 1.0 / (sum(&sq) / div as f32 + d.eps()).sqrt();
            for (&v, &w) in y.iter().zip(&c.weight) {
                let o = d.arithmetic().output(d.dtype(), v, r, w, false);
                out.push(d.dtype().encode(o));
            }
        }
        out
    }

    #[test]
    fn exact_arm_catches_long_row_sum_bugs_the_others_admit() {
        // On long rows a mean over n - 1 passes RAND (the general bound
        // spans it) and, like one element left out of the sum, fails
        // EXACT, where every order's sum is exact; a correct kernel passes
        // both in any order.
        let seq = |v: &[f32]| v.iter().fold(0f32, |a, &t| a + t);
        let rev = |v: &[f32]| v.iter().rev().fold(0f32, |a, &t| a + t);
        let drop_mid = |v: &[f32]| seq(v) - v[v.len() / 2];
        // (A bf16 round_then_weight row shows them with odds of about one in
        // four: its R(y r) takes a few dozen values; 16 rows, as the
        // check's default shape.)
        for (dims, dtype, fused, a) in [
            ((4, 4096), Dtype::Bf16, false, Arithmetic::F32),
            ((16, 8192), Dtype::Bf16, true, Arithmetic::RoundThenWeight),
            ((3, 7168), Dtype::F16, false, Arithmetic::RoundThenWeight),
        ] {
            let d = declared(a, SumRounding::Dtype, dtype);
            let judge = |arm, sum: &dyn Fn(&[f32]) -> f32, div| {
                let sp = spec(dims, dtype, fused, arm);
                let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                let want = reference(&shape, &c, &d).unwrap();
                let got = kernel(&shape, &c, &d, sum, div);
                let res = bits(dtype, &want.residual);
                Verdict::judge(dtype, &want, &got, &res)
            };
            let n = dims.1;
            for arm in [Arm::Rand, Arm::Exact] {
                assert!(judge(arm, &seq, n).pass(), "{dims:?} {arm:?}");
                assert!(judge(arm, &rev, n).pass(), "{dims:?} {arm:?}");
            }
            let v = judge(Arm::Exact, &seq, n);
            assert!(v.decided > v.n * 9 / 10, "{v:?}");
            for (sum, div) in [(&seq as &dyn Fn(&[f32]) -> f32, n - 1), (&drop_mid, n)] {
                // RAND's rows span a mean over n - 1 past 4096 (at 4096 it
                // is at the general bound's edge; a dropped element of
                // three sigma may show).
                if n > 4096 && div == n - 1 {
                    assert!(
                        judge(Arm::Rand, sum, div).pass(),
                        "{dims:?}: RAND admits it"
                    );
                }
                let v = judge(Arm::Exact, sum, div);
                assert!(!v.pass() && v.decided_wrong > 0, "{dims:?}: {v:?}");
            }
        }
        // The interval of r: a few binary32 ulps on EXACT, far wider on
        // RAND.
        let d = declared(Arithmetic::F32, SumRounding::Dtype, Dtype::Bf16);
        for (arm, wide) in [(Arm::Exact, false), (Arm::Rand, true)] {
            let sp = spec((2, 8192), Dtype::Bf16, false, arm);
            let want = reference(&sp.shape().unwrap(), &sp.generate().unwrap(), &d).unwrap();
            for r in &want.inv_rms {
                let width = f64::from(r.hi) / f64::from(r.lo) - 1.0;
                assert_eq!(width > 1e-4, wide, "{arm:?}: {width:e}");
            }
        }
    }

    #[test]
    fn f16_overflow_is_decided_and_a_saturating_kernel_fails() {
        // f16 LARGE and SPIKE: some outputs are decided infinities; a
        // kernel that clamps them to 65504 fails there.
        for arm in [Arm::Large, Arm::Spike] {
            for (dims, fused) in [((4, 2048), false), ((3, 4097), true)] {
                let sp = spec(dims, Dtype::F16, fused, arm);
                let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                let d = declared(Arithmetic::F32, SumRounding::Dtype, Dtype::F16);
                let want = reference(&shape, &c, &d).unwrap();
                let infs = (0..want.lo.len())
                    .filter(|&i| want.decided(i) && want.lo[i].is_infinite())
                    .count();
                assert!(infs > 0, "{arm:?} {dims:?}");
                let res = bits(Dtype::F16, &want.residual);
                let got = bits(Dtype::F16, &want.lo);
                assert!(Verdict::judge(Dtype::F16, &want, &got, &res).pass());
                let clamped: Vec<f32> =
                    want.lo.iter().map(|v| v.clamp(-65504.0, 65504.0)).collect();
                let v = Verdict::judge(Dtype::F16, &want, &bits(Dtype::F16, &clamped), &res);
                assert_eq!(v.decided_wrong, infs, "{arm:?} {dims:?}");
            }
        }
    }

    #[test]
    fn a_fused_add_that_overflows_is_named() {
        let shape = Shape::new(1, 2).unwrap();
        let c = Case {
            x: vec![1.0, 40000.0],
            residual: vec![1.0, 30000.0],
            weight: vec![1.0, 1.0],
        };
        let d = declared(Arithmetic::F32, SumRounding::Dtype, Dtype::F16);
        assert_eq!(
            reference(&shape, &c, &d),
            Err(RmsNormError::AddOverflow { row: 0, col: 1 })
        );
    }

    #[test]
    fn a_wrong_residual_or_output_fails_with_its_place() {
        let sp = spec((3, 64), Dtype::Bf16, true, Arm::Rand);
        let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
        let d = declared(Arithmetic::RoundThenWeight, SumRounding::Dtype, Dtype::Bf16);
        let want = reference(&shape, &c, &d).unwrap();
        let mut got = bits(Dtype::Bf16, &want.hi);
        let res = bits(Dtype::Bf16, &c.residual);
        let v = Verdict::judge(Dtype::Bf16, &want, &got, &res);
        assert!(!v.pass() && v.residual_differ > 0 && v.first.is_none());
        let i = (0..want.lo.len()).find(|&i| want.decided(i)).unwrap();
        got[i] ^= 1;
        let v = Verdict::judge(Dtype::Bf16, &want, &got, &bits(Dtype::Bf16, &want.residual));
        assert_eq!(
            (v.first, v.decided_wrong, v.residual_differ),
            (Some(i), 1, 0)
        );
        assert!(within_caps((1 << 12, 1 << 11)).is_err());
        assert!(within_caps((1, MAX_HIDDEN + 1)).is_err());
        assert_eq!(Arm::parse("spike"), Ok(Arm::Spike));
        assert_eq!(parse_arithmetic("gemma"), Ok(Arithmetic::Gemma));
        assert_eq!(parse_sum("f32"), Ok(SumRounding::F32));
        assert!(parse_sum("bf16").is_err());
    }
}
