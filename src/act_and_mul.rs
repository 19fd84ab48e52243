//! Cases for judging a gated activation kernel, `act(gate) * up` (vLLM's
//! `silu_and_mul`, `mul_and_silu`, `gelu_and_mul`, `gelu_tanh_and_mul`,
//! FlashInfer's and SGLang's, Liger's Triton SwiGLU and GeGLU, torch's
//! `F.silu(a) * b`) under the activation, arithmetic and layout it
//! declares ([`oracle::act_and_mul::Declared`]): every output element
//! within the interval core's sound enclosure of the activation leaves,
//! bit for bit where that interval is one value; and for naming the
//! activations, arithmetics and layouts an output matches.
//!
//! A case (elements, row-major): `x [tokens][2 d]`, values of the model's
//! dtype, the gate half where the declared [`Layout`] puts it (the data
//! are drawn as (gate, up) pairs, then placed), so a kernel that reads
//! the other half as the gate meets data that were not drawn for it.

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::act_and_mul::{
    admits, ActAndMulError, ActRange, Activation, Arithmetic, Declared, Dtype, Layout, Shape,
};
use rayon::prelude::*;
use std::collections::HashMap;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal gates and up values, each half with its own scale per row
    /// (`2^-3` to `2^3`), one gate in 64 exactly zero: the activation (SiLU
    /// against the GELUs, erf against tanh), the arithmetic (rounding the
    /// activation before the product or not), the layout, a row's up
    /// values taken from another token, truncation for rounding.
    Rand,
    /// Gates of magnitude 20 to 100, either sign, up values normal but one
    /// in eight of magnitude `2^9` to `2^15`: where `silu(g)` is `g` or
    /// about `g e^g`, and `e^g` overflows (past 88.7, for `gelu_quick`
    /// past 52.1): a kernel computing `e^g / (1 + e^g)` gets `inf / inf`,
    /// one that flushes the negative tail wrongly shows; in f16 the large
    /// products pass 65504 and are decided infinities, so a conversion
    /// that saturates shows.
    Tails,
    /// Gates at and near zero: `±0`, the dtype's subnormals, its smallest
    /// normals, small powers of two; up values normal with one in eight
    /// `±0` and one in sixteen subnormal: the signs of zero products,
    /// flush to zero (admitted either way), `act(g) = g/2` near 0.
    Zero,
    /// The halves apart in magnitude, by row: gates about `2^-8` with up
    /// values about `2^6`, or gates about `2^4` with up values about
    /// `2^-6`, so a kernel that swaps the halves fails at nearly every
    /// element.
    Split,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 4] = [Arm::Rand, Arm::Tails, Arm::Zero, Arm::Split];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Tails => "TAILS",
            Arm::Zero => "ZERO",
            Arm::Split => "SPLIT",
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

/// The activation named `s` ([`Activation::name`]).
///
/// # Errors
/// A sentence naming the activations.
pub fn parse_activation(s: &str) -> Result<Activation, String> {
    crate::names::parse_named("activation", s, &Activation::ALL, Activation::name, false)
}

/// The arithmetic named `s` ([`Arithmetic::name`]).
///
/// # Errors
/// A sentence naming the arithmetics.
pub fn parse_arithmetic(s: &str) -> Result<Arithmetic, String> {
    crate::names::parse_named("arithmetic", s, &Arithmetic::ALL, Arithmetic::name, false)
}

/// The most output elements a case has (`tokens * d`; `x` twice that,
/// 32 MiB of f32): a check keeps a few arrays of that size.
pub const MAX_ELEMS: usize = 1 << 22;

/// The widest `d` a check runs (`2^17`; core's limit is
/// [`oracle::act_and_mul::MAX_D`]).
pub const MAX_D: usize = 1 << 17;

/// `(tokens, d)`: `x` is `[tokens, 2 d]`, the output `[tokens, d]`.
pub type Dims = (usize, usize);

/// The oracle's shape of `d`, refused past the caps.
///
/// # Errors
/// A shape error ([`ActAndMulError`]) or a case over [`MAX_ELEMS`] or
/// [`MAX_D`], as a sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    let shape = Shape::new(d.0, d.1).map_err(|e| e.to_string())?;
    if d.1 > MAX_D {
        return Err(format!("{d:?}: d {} over the check's {MAX_D}", d.1));
    }
    if shape.len() > MAX_ELEMS {
        return Err(format!(
            "{d:?}: {} output elements (tokens*d), over the check's {MAX_ELEMS}",
            shape.len()
        ));
    }
    Ok(shape)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `(tokens, d)`.
    pub dims: Dims,
    /// The model's dtype.
    pub dtype: Dtype,
    /// Where the gates are placed (the declared layout).
    pub layout: Layout,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's input: `x [tokens][2 d]` as values.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[tokens][2 d]`.
    pub x: Vec<f32>,
}

/// `v` rounded to `dtype`.
fn val(dtype: Dtype, v: f64) -> f32 {
    dtype.round(v as f32)
}

/// `2^e`, `e` a real exponent.
fn pow2(e: f64) -> f64 {
    e.exp2()
}

/// The smallest positive subnormal and normal of `dtype`.
fn tiny(dtype: Dtype) -> (f64, f64) {
    match dtype {
        Dtype::F32 => (pow2(-149.0), pow2(-126.0)),
        Dtype::Bf16 => (pow2(-133.0), pow2(-126.0)),
        Dtype::F16 => (pow2(-24.0), pow2(-14.0)),
    }
}

impl Spec {
    /// The default seed of a shape, dtype and arm (the layout only places
    /// the data).
    pub fn base_seed(d: Dims, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0xAC7A_0D0A_0000_0000u64, &[d.0, d.1]);
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

    /// The input, drawn from `seed` alone: per token, the row's choices
    /// (scales, which half is large), then each (gate, up) pair, placed by
    /// the layout.
    ///
    /// # Errors
    /// As [`Spec::shape`].
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        let (tokens, d) = (shape.tokens(), shape.d());
        let dt = self.dtype;
        let mut rng = Rng(self.seed);
        let (sub, normal) = tiny(dt);
        let sign = |rng: &mut Rng| if rng.below(2) == 0 { -1.0 } else { 1.0 };
        let mut x = vec![0f32; shape.input_len()];
        for t in 0..tokens {
            let (gs, us) = (
                pow2(6.0 * f64::from(rng.f01()) - 3.0),
                pow2(6.0 * f64::from(rng.f01()) - 3.0),
            );
            let big_up = rng.below(2) == 0;
            let row = &mut x[t * 2 * d..(t + 1) * 2 * d];
            for j in 0..d {
                let n = |rng: &mut Rng, s: f64| val(dt, f64::from(rng.normal()) * s);
                let (g, u) = match self.arm {
                    Arm::Rand => {
                        let g = if rng.below(64) == 0 {
                            0.0
                        } else {
                            n(&mut rng, gs)
                        };
                        (g, n(&mut rng, us))
                    }
                    Arm::Tails => {
                        let m = 20.0 + 80.0 * f64::from(rng.f01());
                        let s = sign(&mut rng);
                        let u = if rng.below(8) == 0 {
                            let e = 9.0 + 6.0 * f64::from(rng.f01());
                            val(dt, sign(&mut rng) * pow2(e))
                        } else {
                            n(&mut rng, 1.0)
                        };
                        (val(dt, s * m), u)
                    }
                    Arm::Zero => {
                        let g = match rng.below(8) {
                            0 => 0.0,
                            1 => -0.0,
                            2 => val(dt, sign(&mut rng) * sub * (1 + rng.below(8)) as f64),
                            3 => val(dt, sign(&mut rng) * normal * (1 + rng.below(4)) as f64),
                            _ => {
                                let e = 1.0 + 29.0 * f64::from(rng.f01());
                                val(dt, sign(&mut rng) * pow2(-e))
                            }
                        };
                        let u = match rng.below(16) {
                            0 | 1 => {
                                if rng.below(2) == 0 {
                                    0.0
                                } else {
                                    -0.0
                                }
                            }
                            2 => val(dt, sign(&mut rng) * sub * (1 + rng.below(4)) as f64),
                            _ => n(&mut rng, 1.0),
                        };
                        (g, u)
                    }
                    Arm::Split => {
                        if big_up {
                            (n(&mut rng, pow2(-8.0)), n(&mut rng, pow2(6.0)))
                        } else {
                            (n(&mut rng, pow2(4.0)), n(&mut rng, pow2(-6.0)))
                        }
                    }
                };
                let (a, b) = match self.layout {
                    Layout::GateFirst => (g, u),
                    Layout::UpFirst => (u, g),
                };
                row[j] = a;
                row[d + j] = b;
            }
        }
        Ok(Case { x })
    }
}

/// The oracle's answer for a case under one declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// `[tokens][d]`: each output's least admissible value.
    pub lo: Vec<f32>,
    /// `[tokens][d]`: each output's greatest admissible value.
    pub hi: Vec<f32>,
    /// `[tokens][d]`: each gate's admissible binary32 activations.
    pub act: Vec<ActRange>,
}

impl Reference {
    /// Whether output `i` is decided (its interval one value).
    pub fn decided(&self, i: usize) -> bool {
        self.lo[i].to_bits() == self.hi[i].to_bits()
    }
}

/// The activation ranges of every distinct value in `values` (by bits),
/// in parallel: the values of a 16-bit dtype repeat, and identification
/// reads each value under both layouts.
fn ranges(act: Activation, ulps: u32, values: &[f32]) -> HashMap<u32, ActRange> {
    let mut distinct: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    distinct
        .into_par_iter()
        .map(|b| (b, act.range(f32::from_bits(b), ulps)))
        .collect()
}

/// The reference from ranges already computed (`ranges` holds every
/// gate's).
fn reference_from(
    shape: &Shape,
    case: &Case,
    d: &Declared,
    ranges: &HashMap<u32, ActRange>,
) -> Reference {
    let w = shape.d();
    let per: Vec<(f32, f32, ActRange)> = (0..shape.len())
        .into_par_iter()
        .map(|i| {
            let (t, j) = (i / w, i % w);
            let row = &case.x[t * 2 * w..(t + 1) * 2 * w];
            let (g, y) = d.layout().split(row, w, j);
            let a = ranges[&g.to_bits()];
            let (lo, hi) = d.arithmetic().interval(d.dtype(), a, y);
            (lo, hi, a)
        })
        .collect();
    let mut out = Reference {
        lo: Vec::with_capacity(per.len()),
        hi: Vec::with_capacity(per.len()),
        act: Vec::with_capacity(per.len()),
    };
    for (lo, hi, a) in per {
        out.lo.push(lo);
        out.hi.push(hi);
        out.act.push(a);
    }
    out
}

/// The case under `d`, elements in parallel (each as core's
/// [`oracle::act_and_mul::act_and_mul`]: the split by layout,
/// [`Activation::range`], [`Arithmetic::interval`]; the tests prove the
/// two bit-identical).
///
/// # Errors
/// As [`oracle::act_and_mul::check_inputs`].
pub fn reference(shape: &Shape, case: &Case, d: &Declared) -> Result<Reference, ActAndMulError> {
    let n = shape.len();
    oracle::act_and_mul::check_inputs(shape, &case.x, [n, n])?;
    let w = shape.d();
    let gates: Vec<f32> = (0..n)
        .map(|i| {
            let row = &case.x[i / w * 2 * w..(i / w + 1) * 2 * w];
            d.layout().split(row, w, i % w).0
        })
        .collect();
    let r = ranges(d.activation(), d.act_ulps(), &gates);
    Ok(reference_from(shape, case, d, &r))
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
}

impl Verdict {
    /// Judges `got` (bits of `dtype`, widened to 32) against `want` (rule
    /// `ACT-DECIDED`); a missing element is not admitted.
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
            if !ok && v.first.is_none() {
                v.first = Some(i);
            }
        }
        v
    }

    /// Every output admitted.
    pub fn pass(&self) -> bool {
        self.decided_wrong == 0 && self.bounded_outside == 0
    }
}

/// `"silu/round_then_mul/gate_first"`.
pub fn label(act: Activation, a: Arithmetic, l: Layout) -> String {
    format!("{}/{}/{}", act.name(), a.name(), l.name())
}

/// Every known activation, arithmetic and layout whose intervals admit
/// `got` everywhere (bit for bit on the decided elements), each as
/// [`label`] gives it, activations first, then layouts, then arithmetics.
///
/// # Errors
/// A sentence: an `act_ulps` core refuses, or a reference error.
pub fn identify(
    shape: &Shape,
    case: &Case,
    dtype: Dtype,
    act_ulps: u32,
    got: &[u32],
) -> Result<Vec<String>, String> {
    let n = shape.len();
    oracle::act_and_mul::check_inputs(shape, &case.x, [n, n]).map_err(|e| e.to_string())?;
    let mut found = Vec::new();
    for act in Activation::ALL {
        // Both halves: each is the gate under one layout.
        let r = ranges(act, act_ulps, &case.x);
        for layout in Layout::ALL {
            for a in Arithmetic::ALL {
                let d =
                    Declared::new(act, a, layout, dtype, act_ulps).map_err(|e| e.to_string())?;
                let want = reference_from(shape, case, &d, &r);
                if Verdict::judge(dtype, &want, got).pass() {
                    found.push(label(act, a, layout));
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dims: Dims, dtype: Dtype, layout: Layout, arm: Arm) -> Spec {
        Spec {
            dims,
            dtype,
            layout,
            arm,
            seed: Spec::base_seed(dims, dtype, arm),
        }
    }

    fn declared(act: Activation, a: Arithmetic, l: Layout, dtype: Dtype) -> Declared {
        Declared::new(act, a, l, dtype, 2).unwrap()
    }

    #[test]
    fn reference_is_cores_spec_bit_for_bit() {
        for arm in Arm::ALL {
            for dtype in Dtype::ALL {
                for layout in Layout::ALL {
                    let sp = spec((3, 67), dtype, layout, arm);
                    let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                    for act in Activation::ALL {
                        for a in Arithmetic::ALL {
                            let d = declared(act, a, layout, dtype);
                            let want = reference(&shape, &c, &d).unwrap();
                            let n = shape.len();
                            let (mut lo, mut hi) = (vec![0f32; n], vec![0f32; n]);
                            oracle::act_and_mul::act_and_mul(&shape, &d, &c.x, &mut lo, &mut hi)
                                .unwrap();
                            assert_eq!(bits(Dtype::F32, &lo), bits(Dtype::F32, &want.lo));
                            assert_eq!(bits(Dtype::F32, &hi), bits(Dtype::F32, &want.hi));
                        }
                    }
                }
            }
        }
    }

    /// The (gate, up) pairs of a case under its layout.
    fn pairs(c: &Case, dims: Dims, layout: Layout) -> Vec<(f32, f32)> {
        let (t, d) = dims;
        (0..t * d)
            .map(|i| layout.split(&c.x[i / d * 2 * d..(i / d + 1) * 2 * d], d, i % d))
            .collect()
    }

    #[test]
    fn every_arm_reaches_its_data() {
        let dims = (16, 131);
        for dtype in Dtype::ALL {
            // RAND: zeros, per-row scales of both halves.
            let c = spec(dims, dtype, Layout::GateFirst, Arm::Rand)
                .generate()
                .unwrap();
            let p = pairs(&c, dims, Layout::GateFirst);
            assert!(p.iter().any(|&(g, _)| g == 0.0));
            let rms = |v: &[f32]| (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>()).sqrt();
            let scales: Vec<f64> = c.x.chunks(2 * dims.1).map(|r| rms(&r[..dims.1])).collect();
            let (mn, mx) = scales
                .iter()
                .fold((f64::MAX, 0f64), |(a, b), &s| (a.min(s), b.max(s)));
            assert!(mx / mn > 4.0, "{scales:?}");
            // TAILS: 20 to 100, both signs, past exp's overflow.
            let c = spec(dims, dtype, Layout::GateFirst, Arm::Tails)
                .generate()
                .unwrap();
            let p = pairs(&c, dims, Layout::GateFirst);
            assert!(p.iter().all(|&(g, _)| (19.9..=100.1).contains(&g.abs())));
            assert!(p.iter().any(|&(g, _)| g > 88.8) && p.iter().any(|&(g, _)| g < -88.8));
            assert!(p.iter().any(|&(g, _)| (52.1..88.7).contains(&g)));
            // Products past f16's 65504.
            assert!(p.iter().any(|&(g, u)| g > 20.0 && u.abs() * g > 65520.0));
            // ZERO: both zeros, the dtype's subnormals, zero up values.
            let c = spec(dims, dtype, Layout::GateFirst, Arm::Zero)
                .generate()
                .unwrap();
            let p = pairs(&c, dims, Layout::GateFirst);
            let (sub, normal) = tiny(dtype);
            assert!(p.iter().any(|&(g, _)| g.to_bits() == 0));
            assert!(p.iter().any(|&(g, _)| g.to_bits() == 0x8000_0000));
            assert!(p.iter().any(|&(g, _)| g != 0.0
                && f64::from(g.abs()) < normal
                && f64::from(g.abs()) >= sub));
            assert!(p.iter().any(|&(_, u)| u.to_bits() == 0x8000_0000));
            assert!(p
                .iter()
                .any(|&(_, u)| u != 0.0 && f64::from(u.abs()) < normal));
            // SPLIT: every row's halves apart, both ways among rows.
            let c = spec(dims, dtype, Layout::GateFirst, Arm::Split)
                .generate()
                .unwrap();
            let mut ways = [false; 2];
            for r in c.x.chunks(2 * dims.1) {
                let (g, u) = (rms(&r[..dims.1]), rms(&r[dims.1..]));
                assert!(g > 64.0 * u || u > 64.0 * g, "{g} {u}");
                ways[usize::from(u > g)] = true;
            }
            assert_eq!(ways, [true, true]);
            // The layout places the same pairs.
            for arm in Arm::ALL {
                let a = spec(dims, dtype, Layout::GateFirst, arm)
                    .generate()
                    .unwrap();
                let b = spec(dims, dtype, Layout::UpFirst, arm).generate().unwrap();
                assert_eq!(
                    pairs(&a, dims, Layout::GateFirst),
                    pairs(&b, dims, Layout::UpFirst)
                );
                assert!(a.x.iter().all(|v| v.is_finite() && dtype.round(*v) == *v));
            }
        }
    }

    #[test]
    fn each_declaration_identifies_itself() {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for layout in Layout::ALL {
                let sp = spec((6, 257), dtype, layout, Arm::Rand);
                let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                for act in Activation::ALL {
                    for a in Arithmetic::ALL {
                        let want = reference(&shape, &c, &declared(act, a, layout, dtype)).unwrap();
                        let got = bits(dtype, &want.lo);
                        let v = Verdict::judge(dtype, &want, &got);
                        // gelu and gelu_tanh of gates below about -4 are
                        // bounded (rule ACT-DECIDED).
                        assert!(v.pass() && v.decided > v.n * 85 / 100, "{v:?}");
                        let found = identify(&shape, &c, dtype, 2, &got).unwrap();
                        assert_eq!(found, vec![label(act, a, layout)], "{dtype:?}");
                    }
                }
            }
        }
        // In f32 the two arithmetics are one, and most outputs bounded.
        let sp = spec((4, 129), Dtype::F32, Layout::GateFirst, Arm::Rand);
        let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
        let d = declared(
            Activation::Silu,
            Arithmetic::F32,
            Layout::GateFirst,
            Dtype::F32,
        );
        let want = reference(&shape, &c, &d).unwrap();
        let got = bits(Dtype::F32, &want.hi);
        let v = Verdict::judge(Dtype::F32, &want, &got);
        assert!(v.pass() && v.bounded > v.n / 2, "{v:?}");
        let found = identify(&shape, &c, Dtype::F32, 2, &got).unwrap();
        assert_eq!(
            found,
            vec![
                "silu/round_then_mul/gate_first".to_string(),
                "silu/f32/gate_first".to_string()
            ]
        );
    }

    #[test]
    fn a_wrong_output_fails_with_its_place_and_caps_hold() {
        let sp = spec((3, 64), Dtype::Bf16, Layout::GateFirst, Arm::Rand);
        let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
        let d = declared(
            Activation::Silu,
            Arithmetic::RoundThenMul,
            Layout::GateFirst,
            Dtype::Bf16,
        );
        let want = reference(&shape, &c, &d).unwrap();
        let mut got = bits(Dtype::Bf16, &want.lo);
        let i = (0..want.lo.len()).find(|&i| want.decided(i)).unwrap();
        got[i] ^= 1;
        let v = Verdict::judge(Dtype::Bf16, &want, &got);
        assert_eq!((v.first, v.decided_wrong), (Some(i), 1));
        assert!(!Verdict::judge(Dtype::Bf16, &want, &got[..10]).pass());
        assert!(within_caps((1 << 12, 1 << 11)).is_err());
        assert!(within_caps((1, MAX_D + 1)).is_err());
        assert!(within_caps((0, 8)).is_err());
        assert_eq!(Arm::parse("tails"), Ok(Arm::Tails));
        assert!(Arm::parse("tail").is_err());
        assert_eq!(parse_activation("gelu_tanh"), Ok(Activation::GeluTanh));
        assert!(parse_activation("swiglu").is_err());
        assert_eq!(parse_arithmetic("f32"), Ok(Arithmetic::F32));
    }
}
