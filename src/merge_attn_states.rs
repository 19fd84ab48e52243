//! Cases for judging a kernel that merges two partial attention states by
//! their log-sum-exps (vLLM's `merge_attn_states`, CUDA and Triton;
//! SGLang's `merge_state_v2`; FlashInfer's `merge_state`) under the base,
//! both-empty policy, `+inf` rule and LSE layout it declares
//! ([`oracle::merge_attn_states::Declared`]): every output element, and
//! every output LSE, within the interval core's enclosure leaves, bit for
//! bit where that interval is one value; and for naming the declarations
//! an output matches.
//!
//! A case (elements, row-major): `prefix_output`, `suffix_output` `[T][H][D]`
//! of the model's dtype, `prefix_lse`, `suffix_lse` binary32 `[H][T]` or
//! `[T][H]` (the declared layout). Each arm draws the LSEs of every
//! (token, head) pair; the outputs are standard normal values rounded to
//! the dtype (an empty side's too: a kernel that gives them weight fails).

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::merge_attn_states::{
    check_inputs, pair_terms, Base, Declared, Dtype, Empty, Layout, MergeError, Scales, Shape,
};
use rayon::prelude::*;

/// Re-exported: the interval per element and how a kernel's bits compare
/// with it, as `check_attention` judges (rule `MERGE-DECIDED` is
/// `ATTN-DECIDED`).
pub use crate::attention::{Reference, Verdict};

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// LSEs within 3 of a centre in `[-8, 8]` per pair: the base (`exp`
    /// for `exp2`), the layout, swapped weights, scales not normalised,
    /// products rounded to the dtype before their sum, an output LSE
    /// without its log or its maximum.
    Rand,
    /// LSEs 80 to 120 apart (natural-log units; 115 to 173 in base 2),
    /// either side larger: the smaller weight normal, subnormal or zero.
    /// The logistic form `e^(s-p) / (1 + e^(s-p))` without the maximum
    /// gives `inf / inf`. One pair in two only 3 to 20 apart, where the
    /// smaller weight (`e^-20` to `e^-3`) still moves the output LSE by
    /// binary32 ulps: a kernel that drops the smaller side past a gap
    /// threshold ("negligible") fails there.
    Far,
    /// Equal finite LSEs: both scales exactly `1/2`, the output decided
    /// (`R(p_out / 2 + s_out / 2)`), the output LSE `m + log_b 2`.
    Equal,
    /// One side `-inf` per pair (either): the output the other side's
    /// values bit for bit, the output LSE the other LSE.
    EmptyOne,
    /// Half the pairs (and the first) both `-inf`, the rest as RAND: the
    /// both-empty policy (NaN from `-inf - -inf` before vLLM PR 28181 and
    /// PR 39148).
    EmptyBoth,
    /// FlashAttention 2's `+inf` for an empty side, declared
    /// `inf_is_empty` only: one side, the other or both `+inf`, or `+inf`
    /// with `-inf`; a quarter of the pairs as RAND.
    PosInf,
    /// LSEs of magnitude 5000 to 20000, within 3 of each other: `exp`
    /// without the maximum subtracted overflows (or underflows to `0 /
    /// 0`).
    Large,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 7] = [
        Arm::Rand,
        Arm::Far,
        Arm::Equal,
        Arm::EmptyOne,
        Arm::EmptyBoth,
        Arm::PosInf,
        Arm::Large,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Far => "FAR",
            Arm::Equal => "EQUAL",
            Arm::EmptyOne => "EMPTY_ONE",
            Arm::EmptyBoth => "EMPTY_BOTH",
            Arm::PosInf => "POS_INF",
            Arm::Large => "LARGE",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// The arms a declaration runs by default: all but POS_INF unless
    /// `+inf` is declared empty.
    pub fn defaults(inf_is_empty: bool) -> Vec<Arm> {
        Arm::ALL
            .into_iter()
            .filter(|&a| inf_is_empty || a != Arm::PosInf)
            .collect()
    }
}

/// The base named `s` (`"e"` or `"2"`).
///
/// # Errors
/// A sentence naming the bases.
pub fn parse_base(s: &str) -> Result<Base, String> {
    crate::names::parse_named("base", s, &Base::ALL, Base::name, false)
}

/// The both-empty policy named `s` (`"prefix"` or `"zero"`).
///
/// # Errors
/// A sentence naming the policies.
pub fn parse_empty(s: &str) -> Result<Empty, String> {
    crate::names::parse_named("empty", s, &Empty::ALL, Empty::name, false)
}

/// The scales' form named `s` (`"weights"` or `"lse_out"`).
///
/// # Errors
/// A sentence naming the forms.
pub fn parse_scales(s: &str) -> Result<Scales, String> {
    crate::names::parse_named("scales", s, &Scales::ALL, Scales::name, false)
}

/// The LSE layout named `s` (`"head_major"` or `"token_major"`).
///
/// # Errors
/// A sentence naming the layouts.
pub fn parse_layout(s: &str) -> Result<Layout, String> {
    crate::names::parse_named("lse_layout", s, &Layout::ALL, Layout::name, false)
}

/// The most elements of an output array of a case (`T H D`): a check
/// computes the reference for every known declaration.
pub const MAX_ELEMS: usize = 1 << 22;

/// `[T, H, D]`.
pub type Dims = [usize; 3];

/// The oracle's shape of `d`, refused past [`MAX_ELEMS`].
///
/// # Errors
/// A shape error ([`MergeError`]) or a case over the cap, as a sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    let shape = Shape::new(d[0], d[1], d[2]).map_err(|e| e.to_string())?;
    if shape.out_elems() > MAX_ELEMS {
        return Err(format!(
            "{d:?}: {} output elements, over the check's {MAX_ELEMS}",
            shape.out_elems()
        ));
    }
    Ok(shape)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// `[T, H, D]`.
    pub dims: Dims,
    /// The declaration (its dtype rounds the outputs, its layout places
    /// the LSEs, its base scales FAR's gaps, its `inf_is_empty` allows
    /// POS_INF).
    pub decl: Declared,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs as values.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[T][H][D]`.
    pub p_out: Vec<f32>,
    /// In the declared layout.
    pub p_lse: Vec<f32>,
    /// `[T][H][D]`.
    pub s_out: Vec<f32>,
    /// In the declared layout.
    pub s_lse: Vec<f32>,
}

impl Spec {
    /// The default seed of a shape, dtype and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x3E26_0000_0000_0000u64, &d);
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

    /// The inputs, drawn from `seed` alone: per (token, head) pair in
    /// token-major order its two LSEs by the arm (placed in the declared
    /// layout), then the outputs.
    ///
    /// # Errors
    /// As [`Spec::shape`], or POS_INF without `inf_is_empty`.
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        if self.arm == Arm::PosInf && !self.decl.inf_is_empty {
            return Err(
                "arm POS_INF needs inf_is_empty=True (+inf is refused otherwise)".to_string(),
            );
        }
        let [t_n, h_n, _] = self.dims;
        let mut rng = Rng(self.seed);
        let mut p_lse = vec![0f32; shape.lse_elems()];
        let mut s_lse = vec![0f32; shape.lse_elems()];
        // Natural-log units per LSE unit: FAR's gaps in weight terms.
        let per = match self.decl.base {
            Base::E => 1.0,
            Base::Two => std::f64::consts::LOG2_E,
        };
        let ninf = f32::NEG_INFINITY;
        let u = |rng: &mut Rng, a: f64, b: f64| a + (b - a) * f64::from(rng.f01());
        let rand = |rng: &mut Rng| {
            let c = u(rng, -8.0, 8.0);
            (
                (c + u(rng, -3.0, 3.0)) as f32,
                (c + u(rng, -3.0, 3.0)) as f32,
            )
        };
        for t in 0..t_n {
            for h in 0..h_n {
                let first = t == 0 && h == 0;
                let (p, s) = match self.arm {
                    Arm::Rand => rand(&mut rng),
                    Arm::Far => {
                        let c = u(&mut rng, -20.0, 20.0);
                        let gap = if rng.below(2) == 0 {
                            u(&mut rng, 80.0, 120.0)
                        } else {
                            u(&mut rng, 3.0, 20.0)
                        } * per;
                        let (big, small) = (c as f32, (c - gap) as f32);
                        if rng.below(2) == 0 {
                            (big, small)
                        } else {
                            (small, big)
                        }
                    }
                    Arm::Equal => {
                        let c = u(&mut rng, -8.0, 8.0) as f32;
                        (c, c)
                    }
                    Arm::EmptyOne => {
                        let c = u(&mut rng, -8.0, 8.0) as f32;
                        if rng.below(2) == 0 {
                            (ninf, c)
                        } else {
                            (c, ninf)
                        }
                    }
                    Arm::EmptyBoth => {
                        if first || rng.below(2) == 0 {
                            (ninf, ninf)
                        } else {
                            rand(&mut rng)
                        }
                    }
                    Arm::PosInf => {
                        let inf = f32::INFINITY;
                        let c = u(&mut rng, -8.0, 8.0) as f32;
                        match if first { 0 } else { rng.below(8) } {
                            0 | 1 => (inf, c),
                            2 | 3 => (c, inf),
                            4 => (inf, inf),
                            5 => (inf, ninf),
                            6 => (ninf, inf),
                            _ => rand(&mut rng),
                        }
                    }
                    Arm::Large => {
                        let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                        let c = sign * u(&mut rng, 5000.0, 20000.0);
                        (
                            (c + u(&mut rng, -3.0, 3.0)) as f32,
                            (c + u(&mut rng, -3.0, 3.0)) as f32,
                        )
                    }
                };
                let i = self.decl.layout.index(&shape, t, h);
                p_lse[i] = p;
                s_lse[i] = s;
            }
        }
        let dt = self.decl.dtype;
        let mut draw = |n: usize| -> Vec<f32> { (0..n).map(|_| dt.round(rng.normal())).collect() };
        let p_out = draw(shape.out_elems());
        let s_out = draw(shape.out_elems());
        Ok(Case {
            p_out,
            p_lse,
            s_out,
            s_lse,
        })
    }
}

/// The oracle's answer for a case under one declaration: the outputs'
/// intervals `[T][H][D]` (dtype values) and the output LSEs' (binary32,
/// the declared layout).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The output.
    pub out: Reference,
    /// The output LSE.
    pub lse: Reference,
}

/// One pair's answer: its outputs' intervals, then its output LSE's.
type PairAnswer = (Vec<(f32, f32)>, (f32, f32));

/// The case under `d`, pairs in parallel (each as core's
/// [`oracle::merge_attn_states::merge_attn_states`]: [`pair_terms`], then
/// its output and output LSE; the tests prove the two bit-identical).
///
/// # Errors
/// As [`check_inputs`].
pub fn reference(shape: &Shape, case: &Case, d: &Declared) -> Result<Answer, MergeError> {
    let (n, l) = (shape.out_elems(), shape.lse_elems());
    check_inputs(
        shape,
        d,
        &case.p_out,
        &case.p_lse,
        &case.s_out,
        &case.s_lse,
        [n, n, l, l],
    )?;
    let [_, h_n, dd] = shape.dims();
    let rows: Vec<PairAnswer> = (0..l)
        .into_par_iter()
        .map(|r| {
            let (t, h) = (r / h_n, r % h_n);
            let i = d.layout.index(shape, t, h);
            // check_inputs admitted every LSE.
            let terms = pair_terms(d, case.p_lse[i], case.s_lse[i]).expect("LSEs checked");
            let outs = (r * dd..(r + 1) * dd)
                .map(|e| terms.output(d, case.p_out[e], case.s_out[e]))
                .collect();
            (outs, terms.output_lse())
        })
        .collect();
    let mut ans = Answer {
        out: Reference {
            lo: Vec::with_capacity(n),
            hi: Vec::with_capacity(n),
        },
        lse: Reference {
            lo: vec![0.0; l],
            hi: vec![0.0; l],
        },
    };
    for (r, (outs, (lo, hi))) in rows.into_iter().enumerate() {
        for (a, b) in outs {
            ans.out.lo.push(a);
            ans.out.hi.push(b);
        }
        let i = d.layout.index(shape, r / h_n, r % h_n);
        ans.lse.lo[i] = lo;
        ans.lse.hi[i] = hi;
    }
    Ok(ans)
}

/// How a kernel's output and output LSE compare with an [`Answer`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verdicts {
    /// The output, judged in the dtype.
    pub out: Verdict,
    /// The output LSE, judged in binary32 (None when not judged).
    pub lse: Option<Verdict>,
}

impl Verdicts {
    /// Judges `out` (bits of `dtype`) and, when given, `lse` (binary32
    /// bits).
    pub fn judge(dtype: Dtype, want: &Answer, out: &[u32], lse: Option<&[u32]>) -> Verdicts {
        Verdicts {
            out: Verdict::judge(dtype, &want.out, out),
            lse: lse.map(|g| Verdict::judge(Dtype::F32, &want.lse, g)),
        }
    }

    /// Every judged element admitted.
    pub fn pass(&self) -> bool {
        self.out.pass() && self.lse.as_ref().is_none_or(Verdict::pass)
    }
}

/// A declaration's label in identification: `"{base}/{empty}/{layout}"`,
/// e.g. `"e/prefix/head_major"`, then `"/lse_out"` for scales from the
/// output LSE.
pub fn label(d: &Declared) -> String {
    let scales = match d.scales {
        Scales::Weights => "",
        Scales::LseOut => "/lse_out",
    };
    format!(
        "{}/{}/{}{scales}",
        d.base.name(),
        d.empty.name(),
        d.layout.name()
    )
}

/// Every known base, both-empty policy and LSE layout whose intervals
/// admit `out` (and `lse`, when given) everywhere, bit for bit on the
/// decided elements, each as [`label`] gives it; the other layout reads
/// the same LSE buffers with the other index (a kernel that reads `[H][T]`
/// as `[T][H]`). `d`'s dtype and `inf_is_empty` are kept.
///
/// # Errors
/// A reference error, as a sentence.
pub fn identify(
    shape: &Shape,
    case: &Case,
    d: &Declared,
    out: &[u32],
    lse: Option<&[u32]>,
) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for base in Base::ALL {
        for empty in Empty::ALL {
            for layout in Layout::ALL {
                let k = Declared {
                    base,
                    empty,
                    layout,
                    ..*d
                };
                // A kernel of the other layout writes its output LSE in that
                // layout too, where `reference` places it.
                let want = reference(shape, case, &k).map_err(|e| e.to_string())?;
                if Verdicts::judge(d.dtype, &want, out, lse).pass() {
                    found.push(label(&k));
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dims: Dims, decl: Declared, arm: Arm) -> Spec {
        Spec {
            dims,
            decl,
            arm,
            seed: Spec::base_seed(dims, decl.dtype, arm),
        }
    }

    #[test]
    fn reference_is_cores_spec_bit_for_bit() {
        let dims = [7, 3, 16];
        let shape = within_caps(dims).unwrap();
        for layout in Layout::ALL {
            for arm in Arm::ALL {
                let d = Declared {
                    layout,
                    ..Declared::vllm(Dtype::Bf16)
                };
                let c = spec(dims, d, arm).generate().unwrap();
                let want = reference(&shape, &c, &d).unwrap();
                let (n, l) = (shape.out_elems(), shape.lse_elems());
                let (mut ol, mut oh, mut ll, mut lh) =
                    (vec![0f32; n], vec![0f32; n], vec![0f32; l], vec![0f32; l]);
                oracle::merge_attn_states::merge_attn_states(
                    &shape, &d, &c.p_out, &c.p_lse, &c.s_out, &c.s_lse, &mut ol, &mut oh, &mut ll,
                    &mut lh,
                )
                .unwrap();
                for (x, y) in [
                    (&ol, &want.out.lo),
                    (&oh, &want.out.hi),
                    (&ll, &want.lse.lo),
                    (&lh, &want.lse.hi),
                ] {
                    assert_eq!(bits(Dtype::F32, x), bits(Dtype::F32, y));
                }
            }
        }
    }

    /// Every arm reaches the data it is meant for.
    #[test]
    fn every_arm_reaches_its_data() {
        let dims = [33, 4, 8];
        let shape = within_caps(dims).unwrap();
        for base in Base::ALL {
            let d = Declared {
                base,
                ..Declared::vllm(Dtype::Bf16)
            };
            let per = if base == Base::E {
                1.0
            } else {
                std::f32::consts::LOG2_E
            };
            let gen = |arm| spec(dims, d, arm).generate().unwrap();
            let pairs = |c: &Case| -> Vec<(f32, f32)> {
                c.p_lse
                    .iter()
                    .copied()
                    .zip(c.s_lse.iter().copied())
                    .collect()
            };
            let c = gen(Arm::Rand);
            assert!(pairs(&c)
                .iter()
                .all(|&(p, s)| p.is_finite() && s.is_finite() && (p - s).abs() <= 6.0));
            assert!(pairs(&c).iter().any(|&(p, s)| p != s));
            // FAR: gaps 80 to 120 natural-log units, either side larger,
            // weights normal (below 87.3), subnormal and zero (past 103.3);
            // and gaps of 3 to 20, about one pair in two.
            let c = gen(Arm::Far);
            let g: Vec<f32> = pairs(&c).iter().map(|&(p, s)| (p - s) / per).collect();
            let far: Vec<f32> = g.iter().copied().filter(|x| x.abs() > 50.0).collect();
            assert!(far.iter().all(|x| (79.9..=120.1).contains(&x.abs())));
            assert!(g
                .iter()
                .all(|x| x.abs() > 50.0 || (2.9..=20.1).contains(&x.abs())));
            let near = g.len() - far.len();
            assert!(
                near * 3 >= g.len() && near * 3 <= 2 * g.len(),
                "{near} of {}",
                g.len()
            );
            assert!(g.iter().any(|&x| x > 0.0) && g.iter().any(|&x| x < 0.0));
            assert!(far.iter().any(|x| x.abs() < 87.0) && far.iter().any(|x| x.abs() > 104.0));
            assert!(far.iter().any(|x| (88.0..103.0).contains(&x.abs())));
            assert!(pairs(&gen(Arm::Equal))
                .iter()
                .all(|&(p, s)| p == s && p.is_finite()));
            let c = gen(Arm::EmptyOne);
            assert!(pairs(&c)
                .iter()
                .all(|&(p, s)| (p == f32::NEG_INFINITY) != (s == f32::NEG_INFINITY)));
            let c = gen(Arm::EmptyBoth);
            let both = |p: f32, s: f32| p == f32::NEG_INFINITY && s == f32::NEG_INFINITY;
            assert!(both(c.p_lse[0], c.s_lse[0]));
            let nb = pairs(&c).iter().filter(|&&(p, s)| both(p, s)).count();
            assert!(nb > 33 && nb < 99, "{nb}");
            let c = gen(Arm::PosInf);
            let inf = f32::INFINITY;
            for want in [(true, false), (false, true), (true, true)] {
                assert!(pairs(&c)
                    .iter()
                    .any(|&(p, s)| ((p == inf), (s == inf)) == want));
            }
            assert!(c.p_lse[0] == inf);
            let c = gen(Arm::Large);
            assert!(pairs(&c)
                .iter()
                .all(|&(p, s)| p.abs() >= 4990.0 && (p - s).abs() <= 6.0));
            assert!(
                pairs(&c).iter().any(|&(p, _)| p > 0.0) && pairs(&c).iter().any(|&(p, _)| p < 0.0)
            );
            // Outputs: dtype values, none empty of weight.
            assert!(c
                .p_out
                .iter()
                .chain(&c.s_out)
                .all(|&x| Dtype::Bf16.round(x) == x));
        }
        // POS_INF refused where +inf is not empty.
        let d = Declared {
            inf_is_empty: false,
            ..Declared::vllm(Dtype::Bf16)
        };
        assert!(spec(dims, d, Arm::PosInf).generate().is_err());
        assert_eq!(Arm::defaults(false).len(), 6);
        let _ = shape;
    }

    #[test]
    fn declarations_identify_and_a_wrong_output_fails_with_its_place() {
        let dims = [5, 3, 8];
        let shape = within_caps(dims).unwrap();
        let d = Declared::vllm(Dtype::Bf16);
        // EMPTY_BOTH's oracle output under "prefix": only the prefix policy
        // admits it; the layouts differ (T != H).
        let c = spec(dims, d, Arm::EmptyBoth).generate().unwrap();
        let want = reference(&shape, &c, &d).unwrap();
        let out = bits(Dtype::Bf16, &want.out.lo);
        let lse = bits(Dtype::F32, &want.lse.lo);
        let found = identify(&shape, &c, &d, &out, Some(&lse)).unwrap();
        assert_eq!(found, vec!["e/prefix/head_major"]);
        let mut bad = out.clone();
        bad[9] ^= 1;
        let v = Verdicts::judge(Dtype::Bf16, &want, &bad, Some(&lse));
        assert!(!v.pass() && v.out.first == Some(9));
        assert!(!Verdicts::judge(Dtype::Bf16, &want, &out[..5], None).pass());
        assert!(within_caps([1 << 12, 32, 128]).is_err());
        assert_eq!(Arm::parse("empty_one"), Ok(Arm::EmptyOne));
        assert!(Arm::parse("EMPTY").is_err());
        assert_eq!(parse_base("2"), Ok(Base::Two));
        assert!(parse_base("10").is_err());
        assert_eq!(parse_layout("token_major"), Ok(Layout::TokenMajor));
        assert_eq!(parse_empty("zero"), Ok(Empty::Zero));
    }
}
