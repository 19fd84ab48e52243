//! Cases for judging a scaled dot-product attention kernel (FlashAttention
//! 2 and 3, torch SDPA's backends, FlexAttention, Flash-Decoding, Hugging
//! Face's eager form) under the arithmetic, mask, softcap and scale it
//! declares ([`oracle::attention::Declared`]): every output element within
//! the interval core's sound enclosure leaves, bit for bit where that
//! interval is one value; and for naming the arithmetics an output
//! matches.
//!
//! A case (elements, row-major, torch SDPA's layout): `q [B][Hq][Sq][D]`,
//! `k [B][Hkv][Sk][D]`, `v [B][Hkv][Sk][Dv]`, values of the model's dtype;
//! the output `[B][Hq][Sq][Dv]`.

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::attention::{
    admits, row_enclosure, to_dtype, Arithmetic, AttentionError, Declared, Dtype, Enclosure,
    KeyTerm, Mask, Shape,
};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal q, k, v; per (batch, query head) a score scale from 0.5 to 4
    /// standard deviations: the scale (`1/D` for `1/sqrt(D)`), the
    /// arithmetic (`P` rounded to the dtype or not, scores rounded to the
    /// dtype), the softcap, the GQA head mapping, mask bugs on short rows.
    Rand,
    /// Keys of `±1` entries; each query is a multiple of one visible
    /// key's, chosen at the mask's boundaries (the aligned diagonal, the
    /// first and the last visible key, the last key of `Sk`), scaled so
    /// that key's score exceeds every other visible key's by at least 30
    /// (others weigh below `e^-30`): the output is that key's `v` row,
    /// decided. Catches the causal alignment, off-by-one masks and windows,
    /// the GQA head mapping (of k and of v) and a dropped key tail.
    Peak,
    /// Scores of magnitude 100 and more (a constant channel: `q[0] k[0]`
    /// scaled to about `±120`), spread by a normal part: `exp` without the
    /// maximum subtracted overflows (or underflows to `0 / 0`); a softcap
    /// saturates.
    Spike,
    /// `q = 0`: every score exactly 0 in any arithmetic, the output the
    /// mean of the visible `v`: wrong counts and denominators, masks that
    /// keep one key too many or too few.
    Uniform,
    /// The output's sensitivity to the softmax scale: every query of a kv
    /// head is `c e_0` (one non-zero channel, so each score `c k[j][0]` is
    /// one exact product), the scaled scores `x_j` of standard deviation
    /// 1.5 to 3, and `v[j][0] = x_j - m`, `m` the softmax mean of `x` over
    /// all keys. Output channel 0 is then about 0 (fine steps of the
    /// dtype) and moves by `eps Var_p(x)` under a scale off by a factor
    /// `1 + eps`: a scale rounded to a narrower type or computed from
    /// the wrong head dimension, which RAND's outputs of magnitude 1 hide
    /// under the dtype's rounding.
    Scale,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 5] = [Arm::Rand, Arm::Peak, Arm::Spike, Arm::Uniform, Arm::Scale];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Peak => "PEAK",
            Arm::Spike => "SPIKE",
            Arm::Uniform => "UNIFORM",
            Arm::Scale => "SCALE",
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
            .ok_or_else(|| {
                format!(
                    "arm {s:?}: expected \"RAND\", \"PEAK\", \"SPIKE\", \"UNIFORM\" or \"SCALE\""
                )
            })
    }
}

/// The arithmetic named `s` ([`Arithmetic::name`]).
///
/// # Errors
/// A sentence naming the arithmetics.
pub fn parse_arithmetic(s: &str) -> Result<Arithmetic, String> {
    Arithmetic::ALL
        .into_iter()
        .find(|a| a.name() == s)
        .ok_or_else(|| format!("arithmetic {s:?}: expected \"flash\", \"f32\" or \"eager\""))
}

/// The most score products a case has (`B Hq Sq Sk (D + Dv)`): a check
/// computes the reference for each arithmetic.
pub const MAX_WORK: usize = 1 << 28;

/// The most elements of any one array of a case.
pub const MAX_ELEMS: usize = 1 << 22;

/// `[B, Hq, Hkv, Sq, Sk, D, Dv]`.
pub type Dims = [usize; 7];

/// The oracle's shape of `d`, refused past the caps.
///
/// # Errors
/// A shape error ([`AttentionError`]) or a case over [`MAX_ELEMS`] or
/// [`MAX_WORK`], as a sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    let shape = Shape::new(d).map_err(|e| e.to_string())?;
    let big = [
        shape.q_elems(),
        shape.k_elems(),
        shape.v_elems(),
        shape.out_elems(),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if big > MAX_ELEMS {
        return Err(format!(
            "{d:?}: an array of {big} elements, over the check's {MAX_ELEMS}"
        ));
    }
    let work = shape
        .rows()
        .checked_mul(d[4])
        .and_then(|x| x.checked_mul(d[5] + d[6]));
    if work.is_none_or(|w| w > MAX_WORK) {
        return Err(format!(
            "{d:?}: B Hq Sq Sk (D + Dv) over the check's {MAX_WORK}"
        ));
    }
    Ok(shape)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// `[B, Hq, Hkv, Sq, Sk, D, Dv]`.
    pub dims: Dims,
    /// The model's dtype.
    pub dtype: Dtype,
    /// The declared mask (PEAK places its keys at its boundaries).
    pub mask: Mask,
    /// The declared scale (PEAK and SPIKE size their scores by it).
    pub scale: f32,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs as values.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[B][Hq][Sq][D]`.
    pub q: Vec<f32>,
    /// `[B][Hkv][Sk][D]`.
    pub k: Vec<f32>,
    /// `[B][Hkv][Sk][Dv]`.
    pub v: Vec<f32>,
    /// PEAK: per output row the key chosen to dominate (else empty).
    pub peak: Vec<usize>,
}

impl Spec {
    /// The default seed of a shape, dtype and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0xA77E_0000_0000_0000u64, &d);
        let idx = Dtype::ALL.iter().position(|&y| y == dtype).unwrap_or(0) as u64;
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ (idx << 8) ^ arm
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.dims)
    }

    /// The inputs, drawn from `seed` alone: `k` and `v` per kv head, then
    /// `q` per (batch, query head), by the arm.
    ///
    /// # Errors
    /// As [`Spec::shape`], or a mask that leaves a query without keys.
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        let [b, hq, hkv, sq, sk, d, _] = shape.dims();
        let dt = self.dtype;
        let val = |x: f64| dt.round(x as f32);
        let mut rng = Rng(self.seed);
        let mut k = vec![0f32; shape.k_elems()];
        let mut v = vec![0f32; shape.v_elems()];
        let mut q = vec![0f32; shape.q_elems()];
        let mut peak = Vec::new();
        for x in v.iter_mut() {
            *x = val(f64::from(rng.normal()));
        }
        let scale = f64::from(self.scale);
        match self.arm {
            Arm::Rand | Arm::Uniform => {
                for x in k.iter_mut() {
                    *x = val(f64::from(rng.normal()));
                }
                if self.arm == Arm::Rand {
                    for row in q.chunks_mut(sq * d) {
                        // Score standard deviation sigma: q of sd sigma / (scale sqrt D).
                        let sigma = (3.0 * f64::from(rng.f01()) - 1.0).exp2();
                        let sd = sigma / (scale * (d as f64).sqrt());
                        for x in row.iter_mut() {
                            *x = val(f64::from(rng.normal()) * sd);
                        }
                    }
                }
            }
            Arm::Spike => {
                for (r, x) in k.iter_mut().enumerate() {
                    *x = if r % d == 0 {
                        val(32.0)
                    } else {
                        val(f64::from(rng.normal()))
                    };
                }
                for row in q.chunks_mut(d) {
                    let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                    let target = 100.0 + 60.0 * f64::from(rng.f01());
                    row[0] = val(sign * target / (32.0 * scale));
                    let sd = 2.0 / (scale * ((d.max(2) - 1) as f64).sqrt());
                    for x in row[1..].iter_mut() {
                        *x = val(f64::from(rng.normal()) * sd);
                    }
                }
            }
            Arm::Scale => {
                let dv = shape.dims()[6];
                for x in k.iter_mut() {
                    *x = val(f64::from(rng.normal()));
                }
                for bi in 0..b {
                    for g in 0..hkv {
                        let kh = bi * hkv + g;
                        let sigma = 1.5 + 1.5 * f64::from(rng.f01());
                        let c = dt.round((sigma / scale) as f32);
                        let x: Vec<f64> = (0..sk)
                            .map(|j| scale * f64::from(c) * f64::from(k[(kh * sk + j) * d]))
                            .collect();
                        let top = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        let w: Vec<f64> = x.iter().map(|xj| (xj - top).exp()).collect();
                        let m = w.iter().zip(&x).map(|(wj, xj)| wj * xj).sum::<f64>()
                            / w.iter().sum::<f64>();
                        for (j, xj) in x.iter().enumerate() {
                            v[(kh * sk + j) * dv] = val(xj - m);
                        }
                        for h in (0..hq).filter(|&h| shape.kv_head(h) == g) {
                            for i in 0..sq {
                                let r = (bi * hq + h) * sq + i;
                                q[r * d] = c;
                            }
                        }
                    }
                }
            }
            Arm::Peak => {
                for x in k.iter_mut() {
                    *x = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                }
                for bi in 0..b {
                    for h in 0..hq {
                        let kh = bi * hkv + shape.kv_head(h);
                        let kb = &k[kh * sk * d..(kh + 1) * sk * d];
                        for i in 0..sq {
                            let (first, end) = self.mask.range(i, sq, sk);
                            if end == 0 {
                                return Err(AttentionError::EmptyRow { query: i }.to_string());
                            }
                            let diag = self
                                .mask
                                .aligned(i, sq, sk)
                                .clamp(first as i64, end as i64 - 1)
                                as usize;
                            let j = match rng.below(5) {
                                0 => diag,
                                1 => first,
                                2 => end - 1,
                                3 => {
                                    if end == sk {
                                        sk - 1
                                    } else {
                                        end - 1
                                    }
                                }
                                _ => first + rng.below(end - first),
                            };
                            // The largest other visible overlap.
                            let kj = &kb[j * d..(j + 1) * d];
                            let mut over = 0.0f64;
                            for jj in first..end {
                                if jj != j {
                                    let dot: f64 = kj
                                        .iter()
                                        .zip(&kb[jj * d..(jj + 1) * d])
                                        .map(|(a, c)| f64::from(a * c))
                                        .sum();
                                    over = over.max(dot);
                                }
                            }
                            let gap = (d as f64 - over).max(1.0);
                            // alpha scale (D - over) >= 40, alpha a dtype value.
                            let alpha = (40.0 / (scale * gap)).max(1e-30);
                            let alpha = dt.round((alpha * (1.0 + 1.0 / 64.0)) as f32);
                            let r = (bi * hq + h) * sq + i;
                            for (t, x) in q[r * d..(r + 1) * d].iter_mut().enumerate() {
                                *x = alpha * kj[t];
                            }
                            peak.push(j);
                        }
                    }
                }
            }
        }
        Ok(Case { q, k, v, peak })
    }
}

/// The oracle's answer for a case under one declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// `[B][Hq][Sq][Dv]`: each output's least admissible value.
    pub lo: Vec<f32>,
    /// `[B][Hq][Sq][Dv]`: each output's greatest admissible value.
    pub hi: Vec<f32>,
}

impl Reference {
    /// Whether output `i` is decided (its interval one value).
    pub fn decided(&self, i: usize) -> bool {
        self.lo[i].to_bits() == self.hi[i].to_bits()
    }
}

/// The case under `d`, rows in parallel (each as core's
/// [`oracle::attention::attention`]: [`row_enclosure`], then
/// [`to_dtype`]; the tests prove the two bit-identical).
///
/// # Errors
/// As [`oracle::attention::check_inputs`], then
/// [`AttentionError::ScoreRange`].
pub fn reference(shape: &Shape, case: &Case, d: &Declared) -> Result<Reference, AttentionError> {
    let n = shape.out_elems();
    oracle::attention::check_inputs(shape, d, &case.q, &case.k, &case.v, [n, n])?;
    let [_, hq, hkv, sq, sk, dd, dv] = shape.dims();
    let rows: Vec<Result<Vec<(f32, f32)>, AttentionError>> = (0..shape.rows())
        .into_par_iter()
        .map_init(
            || (vec![KeyTerm::default(); sk], vec![Enclosure::default(); dv]),
            |(terms, row), r| {
                let i = r % sq;
                let h = r / sq % hq;
                let bi = r / sq / hq;
                let kh = bi * hkv + shape.kv_head(h);
                row_enclosure(
                    shape,
                    d,
                    i,
                    &case.q[r * dd..(r + 1) * dd],
                    &case.k[kh * sk * dd..(kh + 1) * sk * dd],
                    &case.v[kh * sk * dv..(kh + 1) * sk * dv],
                    terms,
                    row,
                )?;
                Ok(row.iter().map(|&e| to_dtype(d.dtype(), e)).collect())
            },
        )
        .collect();
    let mut out = Reference {
        lo: Vec::with_capacity(n),
        hi: Vec::with_capacity(n),
    };
    for r in rows {
        for (l, h) in r? {
            out.lo.push(l);
            out.hi.push(h);
        }
    }
    Ok(out)
}

/// A dtype's bits as a monotone integer (`-0` and `+0` one apart).
fn key(dtype: Dtype, b: u32) -> i64 {
    let (sign, mag) = match dtype {
        Dtype::F32 => (b >> 31 != 0, i64::from(b & 0x7FFF_FFFF)),
        _ => (b & 0x8000 != 0, i64::from(b & 0x7FFF)),
    };
    if sign {
        -mag - 1
    } else {
        mag
    }
}

/// How a kernel's outputs compare with a [`Reference`].
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// The largest distance, in dtype ulps (adjacent values), of an element
    /// not admitted from its interval (infinite for a NaN or a missing one).
    pub worst_ulps: f64,
}

impl Verdict {
    /// Judges `got` (bits of `dtype`, widened to 32) against `want` (rule
    /// `ATTN-DECIDED`); a missing element is not admitted.
    pub fn judge(dtype: Dtype, want: &Reference, got: &[u32]) -> Verdict {
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
            if !ok {
                if v.first.is_none() {
                    v.first = Some(i);
                }
                let ex = match got.get(i) {
                    Some(&g) if !dtype.is_nan(g) => {
                        let kg = key(dtype, g);
                        let kl = key(dtype, dtype.encode(want.lo[i]));
                        let kh = key(dtype, dtype.encode(want.hi[i]));
                        ((kl - kg).max(kg - kh).max(1)) as f64
                    }
                    _ => f64::INFINITY,
                };
                v.worst_ulps = v.worst_ulps.max(ex);
            }
        }
        v
    }

    /// Every output admitted.
    pub fn pass(&self) -> bool {
        self.decided_wrong == 0 && self.bounded_outside == 0
    }
}

/// Every arithmetic whose intervals admit `got` everywhere (bit for bit
/// on the decided elements), by name, under `d`'s mask, scale and
/// softcap.
///
/// # Errors
/// A reference error, as a sentence.
pub fn identify(
    shape: &Shape,
    case: &Case,
    d: &Declared,
    got: &[u32],
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for a in Arithmetic::ALL {
        let want = reference(shape, case, &d.with_arithmetic(a)).map_err(|e| e.to_string())?;
        if Verdict::judge(d.dtype(), &want, got).pass() {
            found.push(a.name().to_string());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle::attention::{default_scale, Causal, Window};

    fn spec(dims: Dims, dtype: Dtype, mask: Mask, arm: Arm) -> Spec {
        Spec {
            dims,
            dtype,
            mask,
            scale: default_scale(dims[5]),
            arm,
            seed: Spec::base_seed(dims, dtype, arm),
        }
    }

    fn decl(a: Arithmetic, dtype: Dtype, d: usize, mask: Mask) -> Declared {
        Declared::new(a, dtype, default_scale(d), None, mask).unwrap()
    }

    const BR: Mask = Mask {
        causal: Some(Causal::BottomRight),
        window: None,
    };

    #[test]
    fn reference_is_cores_spec_bit_for_bit() {
        let dims = [2, 4, 2, 5, 9, 16, 8];
        let shape = Shape::new(dims).unwrap();
        for arm in Arm::ALL {
            let sp = spec(dims, Dtype::Bf16, BR, arm);
            let c = sp.generate().unwrap();
            for a in Arithmetic::ALL {
                let d = decl(a, Dtype::Bf16, 16, BR);
                let want = reference(&shape, &c, &d).unwrap();
                let n = shape.out_elems();
                let (mut lo, mut hi) = (vec![0f32; n], vec![0f32; n]);
                let mut terms = vec![KeyTerm::default(); 9];
                let mut row = vec![Enclosure::default(); 8];
                oracle::attention::attention(
                    &shape, &d, &c.q, &c.k, &c.v, &mut terms, &mut row, &mut lo, &mut hi,
                )
                .unwrap();
                assert_eq!(bits(Dtype::F32, &lo), bits(Dtype::F32, &want.lo));
                assert_eq!(bits(Dtype::F32, &hi), bits(Dtype::F32, &want.hi));
            }
        }
    }

    /// The exact score of row `r` and key `j`.
    fn score(c: &Case, shape: &Shape, r: usize, j: usize, scale: f32) -> f64 {
        let [_, hq, hkv, sq, sk, d, _] = shape.dims();
        let (h, bi) = (r / sq % hq, r / sq / hq);
        let kh = bi * hkv + shape.kv_head(h);
        let dot: f64 = (0..d)
            .map(|t| f64::from(c.q[r * d + t]) * f64::from(c.k[(kh * sk + j) * d + t]))
            .sum();
        f64::from(scale) * dot
    }

    #[test]
    fn every_arm_reaches_its_data() {
        let masks = [
            Mask::default(),
            BR,
            Mask {
                causal: Some(Causal::TopLeft),
                window: Some(Window {
                    left: Some(7),
                    right: None,
                }),
            },
        ];
        for dims in [[1, 4, 2, 9, 40, 64, 64], [1, 2, 1, 1, 300, 128, 128]] {
            let shape = Shape::new(dims).unwrap();
            let [_, _, _, sq, sk, _, _] = dims;
            for mask in masks {
                for dt in [Dtype::Bf16, Dtype::F16] {
                    // PEAK: the chosen key beats every other visible one by 30,
                    // at the boundaries, the decided output its v row.
                    let sp = spec(dims, dt, mask, Arm::Peak);
                    let c = sp.generate().unwrap();
                    let mut at = [false; 3];
                    for (r, &j) in c.peak.iter().enumerate() {
                        let i = r % sq;
                        let (first, end) = mask.range(i, sq, sk);
                        let s = score(&c, &shape, r, j, sp.scale);
                        for jj in first..end {
                            if jj != j {
                                assert!(s - score(&c, &shape, r, jj, sp.scale) >= 30.0);
                            }
                        }
                        at[0] |= j == first && first > 0;
                        at[1] |= j == end - 1 && end < sk;
                        at[2] |= j == sk - 1;
                    }
                    if mask != Mask::default() && sq > 1 {
                        assert!(at[1], "{mask:?}");
                    }
                    if shape.rows() >= 8 && mask == Mask::default() {
                        assert!(at[2], "{mask:?}");
                    }
                    for a in Arithmetic::ALL {
                        let want = reference(&shape, &c, &decl(a, dt, dims[5], mask)).unwrap();
                        let v = Verdict::judge(dt, &want, &bits(dt, &want.lo));
                        // bf16: every output decided; f16's finer ulps leave
                        // long rows' sums bounded (gamma(3n + 8)).
                        let need = if dt == Dtype::Bf16 { v.n } else { v.n / 2 };
                        assert!(v.pass() && v.decided >= need, "{a:?} {mask:?} {v:?}");
                    }
                    // SPIKE: every score of magnitude 100 or more.
                    let sp = spec(dims, dt, mask, Arm::Spike);
                    let c = sp.generate().unwrap();
                    let (mut pos, mut neg) = (false, false);
                    for r in 0..shape.rows() {
                        for j in 0..sk {
                            let s = score(&c, &shape, r, j, sp.scale);
                            assert!(s.abs() >= 80.0, "{s}");
                            pos |= s > 100.0;
                            neg |= s < -100.0;
                        }
                    }
                    assert!(shape.rows() < 8 || pos && neg);
                    // UNIFORM: every score exactly 0.
                    let c = spec(dims, dt, mask, Arm::Uniform).generate().unwrap();
                    assert!(c.q.iter().all(|&x| x == 0.0));
                    // RAND: score scales differ by head.
                    let sp = spec(dims, dt, mask, Arm::Rand);
                    let c = sp.generate().unwrap();
                    let sd: Vec<f64> = (0..shape.rows())
                        .step_by(sq)
                        .map(|r| score(&c, &shape, r, 0, sp.scale).abs())
                        .collect();
                    assert!(sd.iter().all(|s| s.is_finite()));
                    assert!(c.q.iter().chain(&c.k).all(|x| dt.round(*x) == *x));
                }
            }
        }
    }

    #[test]
    fn arithmetics_identify_and_a_wrong_output_fails_with_its_place() {
        let dims = [1, 2, 1, 8, 24, 64, 32];
        let shape = Shape::new(dims).unwrap();
        let c = spec(dims, Dtype::Bf16, Mask::default(), Arm::Peak)
            .generate()
            .unwrap();
        let d = decl(Arithmetic::Flash, Dtype::Bf16, 64, Mask::default());
        let want = reference(&shape, &c, &d).unwrap();
        let mut got = bits(Dtype::Bf16, &want.lo);
        // PEAK is decided under every arithmetic.
        let found = identify(&shape, &c, &d, &got).unwrap();
        assert_eq!(found, vec!["flash", "f32", "eager"]);
        got[5] ^= 3;
        let v = Verdict::judge(Dtype::Bf16, &want, &got);
        assert_eq!((v.first, v.decided_wrong), (Some(5), 1));
        assert!(v.worst_ulps >= 1.0);
        assert!(!Verdict::judge(Dtype::Bf16, &want, &got[..10]).pass());
        assert!(within_caps([1, 1, 1, 1, 1 << 23, 8, 8]).is_err());
        assert!(within_caps([1, 3, 2, 1, 8, 8, 8]).is_err());
        assert_eq!(Arm::parse("peak"), Ok(Arm::Peak));
        assert!(Arm::parse("peaks").is_err());
        assert_eq!(parse_arithmetic("eager"), Ok(Arithmetic::Eager));
        assert!(parse_arithmetic("math").is_err());
    }
}
