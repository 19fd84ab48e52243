//! Cases for judging an INT8 GEMM with row or tensor scales (W8A8 int8:
//! vLLM's `cutlass_scaled_mm` and `cutlass_scaled_mm_azp`, its
//! `triton_scaled_mm`, `torch._int_mm` plus an epilogue) bit for bit under
//! the epilogue it declares ([`oracle::int8_scaled_mm::Schedule`]), and for
//! naming the known epilogues (scale association, bias form) its output
//! matches.
//!
//! A case (elements, row-major, k fastest): activations `q [m][in_f]` and
//! weights `w [out_f][in_f]`, int8 codes; scales `d [m]` and `s [out_f]`
//! (`[1]` each with per-tensor scales), f32; optionally `bias [out_f]`
//! (values of the output dtype), and zero points as vLLM's
//! `cutlass_scaled_mm_azp` takes them (`azp_adj [out_f]`, and `azp [m]`
//! per token); the output `y [m][out_f]`, values of the output dtype.

use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::fp8_scaled_mm::{Epilogue, Shape};
use oracle::int8_scaled_mm::{
    adjusted, azp_adj, check_operands, dot, epilogue, to_f32, Azp, Bias, Operands, Schedule,
};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at one question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Uniform codes over all 256 values (-128 included), random f32
    /// scales and bias (of the outputs' order, within ±2^15): in a
    /// binary32 output the scale associations and
    /// the bias forms give other bits in most outputs.
    Rand,
    /// Rows of one sign and large magnitude: activations 112..=127 (or
    /// -113..=-128) in the first half of k and the tail, the second half
    /// the first again with one code in four moved by ±1; three weight rows in four
    /// likewise one-signed (112..=127 or -113..=-128), so that `|acc| >=
    /// 12432 in_f`, over `2^24` for `in_f >= 1350`: the conversion rounds
    /// (rule `I8MM-CVT`) and a kernel that sums the products in binary32
    /// rounds its partial sums and differs. Every fourth weight row
    /// (`i % 4 == 3`) changes sign at `in_f / 2` (its second half the
    /// first negated): the partial sums pass `2^24` and come back to a
    /// small `acc`, so a binary32 sum's rounding errors show even in a
    /// bfloat16 output.
    Big,
    /// Half the codes -128, the rest uniform in -127..=127: a kernel that
    /// reads the codes as unsigned, or takes -128 for +128 (a negation or
    /// an absolute value that overflows), differs wherever -128 meets
    /// another code. The k tail, one token and an odd `out_f` come from the
    /// check's shapes.
    Edge,
    /// Only with zero points declared: activations at their zero point
    /// (96..=125 in magnitude) except one code per row off by ±1 or ±2,
    /// weights as in [`Arm::Big`]: `acc` and `azp * azp_adj` both lie over
    /// `2^24` (for `in_f >= 1500`) and their difference under 256, so a
    /// kernel that ignores `azp_adj`, or converts both to binary32 before
    /// subtracting, differs.
    Azp,
    /// Only with a bias declared: every activation row the same, small
    /// codes adjusted so that each `acc' = 15 u` (`u` of at most 8
    /// significant bits), `d = (1/3)_f32 2^a` and `s = (1/5)_f32 2^b`,
    /// bias `-u 2^(a + b)`: the rounded product is `u 2^(a+b)` exactly
    /// while the exact one is not, so [`Bias::Add`] gives `+0` and
    /// [`Bias::Fused`] the product's rounding error, which also differs
    /// between the scale associations (`2^-26` relative where the weight
    /// scale multiplies last, `(acc*d)*s`; `2^-25` where the activation
    /// scale does, `(acc*s)*d`).
    Bias,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 5] = [Arm::Rand, Arm::Big, Arm::Edge, Arm::Azp, Arm::Bias];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Big => "BIG",
            Arm::Edge => "EDGE",
            Arm::Azp => "AZP",
            Arm::Bias => "BIAS",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// The arms a check runs by default for `inputs`: RAND, BIG, EDGE,
    /// then AZP when zero points are declared and BIAS when a bias is.
    pub fn defaults(inputs: &Inputs) -> Vec<Arm> {
        Arm::ALL
            .into_iter()
            .filter(|&a| a.applies(inputs))
            .collect()
    }

    /// Whether the arm can run under `inputs` (AZP needs zero points,
    /// BIAS a bias).
    pub fn applies(self, inputs: &Inputs) -> bool {
        match self {
            Arm::Azp => inputs.azp.is_some(),
            Arm::Bias => inputs.bias,
            _ => true,
        }
    }
}

/// How the scales are given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// One per activation row (`d [m]`) and one per weight row (`s
    /// [out_f]`).
    Row,
    /// One per tensor (`d [1]`, `s [1]`).
    Tensor,
}

impl Scales {
    /// Both, [`Scales::Row`] first.
    pub const ALL: [Scales; 2] = [Scales::Row, Scales::Tensor];

    /// `"row"` or `"tensor"`.
    pub fn name(self) -> &'static str {
        match self {
            Scales::Row => "row",
            Scales::Tensor => "tensor",
        }
    }

    /// The granularity named `s`.
    ///
    /// # Errors
    /// A sentence naming the choices.
    pub fn parse(s: &str) -> Result<Scales, String> {
        crate::names::parse_named("scales", s, &Scales::ALL, Scales::name, false)
    }
}

/// The zero points' granularity (rule `I8MM-AZP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AzpKind {
    /// One zero point, folded into `azp_adj` (vLLM's per-tensor form).
    Tensor,
    /// One zero point per token (`azp [m]`).
    Token,
}

impl AzpKind {
    /// Both, [`AzpKind::Tensor`] first.
    pub const ALL: [AzpKind; 2] = [AzpKind::Tensor, AzpKind::Token];

    /// `"tensor"` or `"token"`.
    pub fn name(self) -> &'static str {
        match self {
            AzpKind::Tensor => "tensor",
            AzpKind::Token => "token",
        }
    }

    /// The granularity named `s`.
    ///
    /// # Errors
    /// A sentence naming the choices.
    pub fn parse(s: &str) -> Result<AzpKind, String> {
        crate::names::parse_named("azp", s, &AzpKind::ALL, AzpKind::name, false)
    }
}

/// What a kernel takes besides the codes: the scales' granularity,
/// whether it adds a bias, its zero points, and its output dtype (a bias
/// holds values of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// Row or tensor scales.
    pub scales: Scales,
    /// A bias `[out_f]`.
    pub bias: bool,
    /// Zero points, or `None` for symmetric activations.
    pub azp: Option<AzpKind>,
    /// The output dtype.
    pub out: Dtype,
}

/// The largest case: `m in_f + out_f in_f` codes at most this.
pub const MAX_CODES: usize = 1 << 26;

/// The most outputs a case has (`m out_f`).
pub const MAX_OUT: usize = 1 << 22;

/// The most multiply-adds a case takes (`m out_f in_f`).
pub const MAX_WORK: usize = 1 << 30;

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Activation rows.
    pub m: usize,
    /// The reduction length k.
    pub in_f: usize,
    /// Weight rows.
    pub out_f: usize,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
    /// What the kernel takes.
    pub inputs: Inputs,
}

/// A case's operands (layouts in the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[m][in_f]` int8 codes.
    pub q: Vec<i8>,
    /// `[m]`, or `[1]` per tensor.
    pub d: Vec<f32>,
    /// `[out_f][in_f]` int8 codes.
    pub w: Vec<i8>,
    /// `[out_f]`, or `[1]` per tensor.
    pub s: Vec<f32>,
    /// `[out_f]`, values of the output dtype.
    pub bias: Option<Vec<f32>>,
    /// The zero points: `[m]` per token, `[1]` per tensor (the value folded
    /// into `azp_adj`, kept for reports; the kernel is not handed it).
    pub azp: Option<Vec<i32>>,
    /// `[out_f]`: `azp * sum_k w[i][k]` per tensor, `sum_k w[i][k]` per
    /// token.
    pub azp_adj: Option<Vec<i32>>,
    /// The zero points' granularity.
    pub azp_kind: Option<AzpKind>,
}

impl Case {
    /// The operands as the oracle takes them.
    pub fn operands(&self) -> Operands<'_> {
        let azp = match (self.azp_kind, &self.azp, &self.azp_adj) {
            (Some(AzpKind::Tensor), _, Some(adj)) => Azp::Tensor { azp_adj: adj },
            (Some(AzpKind::Token), Some(azp), Some(adj)) => Azp::Token { azp, azp_adj: adj },
            _ => Azp::Symmetric,
        };
        Operands {
            q: &self.q,
            d: &self.d,
            w: &self.w,
            s: &self.s,
            bias: self.bias.as_deref(),
            azp,
        }
    }
}

/// The oracle's shape of an `m x in_f` by `out_f x in_f` GEMM, refused
/// past the contract's `in_f` ([`oracle::int8_scaled_mm::MAX_IN_F`]) and
/// the check's caps.
///
/// # Errors
/// A zero or overflowing dimension, `in_f` over the contract's cap, or
/// `m in_f + out_f in_f` over [`MAX_CODES`], `m out_f` over [`MAX_OUT`]
/// or `m out_f in_f` over [`MAX_WORK`], as a sentence.
pub fn within_caps(m: usize, in_f: usize, out_f: usize) -> Result<Shape, String> {
    let shape = oracle::int8_scaled_mm::shape(m, in_f, out_f).map_err(|e| e.to_string())?;
    let codes = (m.saturating_add(out_f)).saturating_mul(in_f);
    let outs = m.saturating_mul(out_f);
    let work = outs.saturating_mul(in_f);
    for (what, v, cap) in [
        ("codes (m*in_f + out_f*in_f)", codes, MAX_CODES),
        ("outputs (m*out_f)", outs, MAX_OUT),
        ("multiply-adds (m*out_f*in_f)", work, MAX_WORK),
    ] {
        if v > cap {
            return Err(format!(
                "m={m} in_f={in_f} out_f={out_f}: {v} {what}, over the check's {cap}"
            ));
        }
    }
    Ok(shape)
}

/// A random scale: `(1 + f) 2^e`, `f` in `[0, 1)` with 24 bits, `e` in
/// -10..=2.
fn scale(rng: &mut Rng) -> f32 {
    (1.0 + rng.f01()) * 2f32.powi(rng.below(13) as i32 - 10)
}

/// A uniform code over all 256 values.
fn code(rng: &mut Rng) -> i8 {
    rng.u8() as i8
}

/// A code of one sign and large magnitude: 112..=127, or -113..=-128.
fn big_code(rng: &mut Rng, neg: bool) -> i8 {
    let mag = 112 + rng.below(16) as i32;
    (if neg { -mag - 1 } else { mag }) as i8
}

/// `x` rounded to the nearest integer of at most 8 significant bits,
/// never 0.
fn short8(x: f64) -> i64 {
    let r = x.round() as i64;
    let bits = 64 - r.unsigned_abs().leading_zeros();
    let v = if bits <= 8 {
        r
    } else {
        let sh = bits - 8;
        ((r as f64 / f64::from(1u32 << sh)).round() as i64) << sh
    };
    if v == 0 {
        1
    } else {
        v
    }
}

/// The significant bits of `u` (its bit length), at least 1.
fn bit_len(u: i64) -> i32 {
    (64 - u.unsigned_abs().leading_zeros()).max(1) as i32
}

impl Spec {
    /// The default seed of a shape, arm and inputs.
    pub fn base_seed(m: usize, in_f: usize, out_f: usize, arm: Arm, inputs: &Inputs) -> u64 {
        let mix = [
            Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0),
            inputs.scales as usize,
            usize::from(inputs.bias),
            inputs.azp.map_or(0, |a| a as usize + 1),
            Dtype::ALL
                .iter()
                .position(|&d| d == inputs.out)
                .unwrap_or(0),
        ];
        let h = crate::rng::shape_hash(0x1A78_5CA1_ED00_0000, &[m, in_f, out_f]);
        crate::rng::shape_hash(h, &mix)
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.m, self.in_f, self.out_f)
    }

    /// The operands, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`]; an arm that does not apply to the inputs
    /// ([`Arm::applies`]).
    pub fn generate(&self) -> Result<Case, String> {
        self.shape()?;
        if !self.arm.applies(&self.inputs) {
            return Err(format!(
                "arm {} needs {} declared",
                self.arm.name(),
                if self.arm == Arm::Azp {
                    "zero points (azp)"
                } else {
                    "a bias"
                }
            ));
        }
        let mut rng = Rng(self.seed);
        let (m, k, n) = (self.m, self.in_f, self.out_f);
        let inp = self.inputs;
        let (dn, sn) = match inp.scales {
            Scales::Row => (m, n),
            Scales::Tensor => (1, 1),
        };
        let azp_n = match inp.azp {
            Some(AzpKind::Token) => m,
            _ => 1,
        };
        let mut q = vec![0i8; m * k];
        let mut w = vec![0i8; n * k];
        let d: Vec<f32>;
        let s: Vec<f32>;
        let mut azp: Vec<i32>;
        let mut bias: Option<Vec<f32>> = None;
        match self.arm {
            Arm::Rand | Arm::Edge => {
                for c in q.iter_mut().chain(w.iter_mut()) {
                    *c = match self.arm {
                        Arm::Rand => code(&mut rng),
                        // Half -128, the other half uniform over the rest.
                        _ if rng.below(2) == 0 => -128,
                        _ => (rng.below(255) as i32 - 127) as i8,
                    };
                }
                d = (0..dn).map(|_| scale(&mut rng)).collect();
                s = (0..sn).map(|_| scale(&mut rng)).collect();
                azp = (0..azp_n).map(|_| rng.below(256) as i32 - 128).collect();
            }
            Arm::Big => {
                let h = k / 2;
                for row in q.chunks_mut(k) {
                    let neg = rng.below(2) == 1;
                    for kk in 0..k {
                        row[kk] = if (h..2 * h).contains(&kk) {
                            // The first half again, one code in four
                            // moved by one (zero mean, clamped to int8).
                            let e = [0, 0, 0, 0, 0, 0, 1, -1][rng.below(8)];
                            (i32::from(row[kk - h]) + e).clamp(-128, 127) as i8
                        } else {
                            big_code(&mut rng, neg)
                        };
                    }
                }
                for (i, row) in w.chunks_mut(k).enumerate() {
                    let neg = rng.below(2) == 1;
                    let mirrored = i % 4 == 3;
                    for kk in 0..k {
                        row[kk] = if mirrored && kk < h {
                            let mag = 112 + rng.below(16) as i8;
                            if neg {
                                -mag
                            } else {
                                mag
                            }
                        } else if mirrored && kk < 2 * h {
                            -row[kk - h]
                        } else {
                            big_code(&mut rng, neg)
                        };
                    }
                }
                d = (0..dn).map(|_| scale(&mut rng)).collect();
                s = (0..sn).map(|_| scale(&mut rng)).collect();
                // Small zero points keep q - azp one-signed and large.
                azp = (0..azp_n).map(|_| rng.below(17) as i32 - 8).collect();
            }
            Arm::Azp => {
                let one = |rng: &mut Rng| {
                    let mag = 96 + rng.below(30) as i32;
                    if rng.below(2) == 1 {
                        -mag
                    } else {
                        mag
                    }
                };
                azp = (0..azp_n).map(|_| one(&mut rng)).collect();
                for (j, row) in q.chunks_mut(k).enumerate() {
                    let z = azp[if azp_n == 1 { 0 } else { j }];
                    row.fill(z as i8);
                    let at = rng.below(k);
                    let delta = [1, -1, 2, -2][rng.below(4)];
                    row[at] = (z + delta) as i8;
                }
                for row in w.chunks_mut(k) {
                    let neg = rng.below(2) == 1;
                    for c in row.iter_mut() {
                        *c = big_code(&mut rng, neg);
                    }
                }
                d = (0..dn).map(|_| scale(&mut rng)).collect();
                s = (0..sn).map(|_| scale(&mut rng)).collect();
            }
            Arm::Bias => {
                // One zero point for every row (per token: repeated), so
                // that every row's acc' is the same.
                let z = if inp.azp.is_some() {
                    rng.below(201) as i32 - 100
                } else {
                    0
                };
                azp = vec![z; azp_n];
                // The shared activation row: z + c, c small; c = 1 at the
                // first (up to) three k, which adjust each weight row.
                let adj_n = k.min(3);
                let c: Vec<i32> = (0..k)
                    .map(|kk| {
                        if kk < adj_n {
                            1
                        } else {
                            rng.below(17) as i32 - 8
                        }
                    })
                    .collect();
                for row in q.chunks_mut(k) {
                    for (x, &ck) in row.iter_mut().zip(&c) {
                        *x = (z + ck) as i8;
                    }
                }
                let a = rng.below(3) as i32;
                let third = (1.0f32 / 3.0) * 2f32.powi(a);
                let tensor_b = 6 - a;
                let mut ss = Vec::with_capacity(n);
                let mut bb = Vec::with_capacity(n);
                for row in w.chunks_mut(k) {
                    for x in row.iter_mut().skip(adj_n) {
                        *x = (rng.below(17) as i32 - 8) as i8;
                    }
                    let part: i64 = row
                        .iter()
                        .zip(&c)
                        .skip(adj_n)
                        .map(|(&x, &ck)| i64::from(x) * i64::from(ck))
                        .sum();
                    // The adjustment codes' reach: 127 each.
                    let reach = 127 * adj_n as i64;
                    let mut u = short8(part as f64 / 15.0);
                    if (15 * u - part).abs() > reach {
                        // Out of the adjustment's reach (not met at the
                        // check's shapes): the multiple of 15 next to part,
                        // u then of more than 8 bits.
                        u = part / 15;
                        if u == 0 {
                            u = 1;
                        }
                    }
                    let mut rest = 15 * u - part;
                    for x in row.iter_mut().take(adj_n) {
                        let t = rest.clamp(-127, 127);
                        *x = t as i8;
                        rest -= t;
                    }
                    let b = match inp.scales {
                        Scales::Row => 12 - bit_len(u) - a,
                        Scales::Tensor => tensor_b,
                    };
                    ss.push((1.0f32 / 5.0) * 2f32.powi(b));
                    bb.push(inp.out.round(-(u as f32) * 2f32.powi(a + b)));
                }
                d = vec![third; dn];
                s = match inp.scales {
                    Scales::Row => ss,
                    Scales::Tensor => vec![(1.0f32 / 5.0) * 2f32.powi(tensor_b)],
                };
                bias = Some(bb);
            }
        }
        if inp.bias && bias.is_none() {
            // Of the order of the outputs: |acc| ~ 5461 sqrt(in_f) for
            // uniform codes, times the scales.
            let mag = 5461.0 * (k as f32).sqrt() * d[0];
            bias = Some(
                (0..n)
                    .map(|i| {
                        let si = s[if sn == 1 { 0 } else { i }];
                        // Within float16's range: a finite bias in every
                        // dtype (an output may still overflow float16).
                        inp.out
                            .round((rng.normal() * mag * si).clamp(-32768.0, 32768.0))
                    })
                    .collect(),
            );
        }
        if !inp.bias {
            bias = None;
        }
        let mut case = Case {
            q,
            d,
            w,
            s,
            bias,
            azp: None,
            azp_adj: None,
            azp_kind: inp.azp,
        };
        if let Some(kind) = inp.azp {
            // Zero points whose exact acc' leaves int32 (a long k with large
            // codes) are halved until every output fits.
            loop {
                case.azp = Some(azp.clone());
                case.azp_adj = Some(
                    case.w
                        .chunks(k)
                        .map(|row| {
                            let z = if kind == AzpKind::Tensor { azp[0] } else { 1 };
                            azp_adj(row, z).expect("|azp| <= 128 fits")
                        })
                        .collect(),
                );
                if exact_accs(&case, m, k, n).is_ok() || azp.iter().all(|&z| z == 0) {
                    break;
                }
                azp.iter_mut().for_each(|z| *z /= 2);
            }
        }
        Ok(case)
    }
}

/// Every output's `acc'` (rules `I8MM-ACC`, `I8MM-AZP`), rows in
/// parallel.
fn exact_accs(case: &Case, m: usize, in_f: usize, out_f: usize) -> Result<Vec<i32>, String> {
    let x = case.operands();
    let rows: Result<Vec<Vec<i32>>, String> = (0..m)
        .into_par_iter()
        .map(|j| {
            let qrow = &x.q[j * in_f..(j + 1) * in_f];
            (0..out_f)
                .map(|i| {
                    let wrow = &x.w[i * in_f..(i + 1) * in_f];
                    adjusted(dot(qrow, wrow), &x.azp, j, i).map_err(|e| e.to_string())
                })
                .collect()
        })
        .collect();
    Ok(rows?.concat())
}

/// Every output's `acc'` (the exact, zero-point adjusted dot product as
/// int32), row-major.
///
/// # Errors
/// A length that does not fit `shape`, or rule `I8MM-AZP`'s refusal, as a
/// sentence.
pub fn accs(shape: &Shape, case: &Case) -> Result<Vec<i32>, String> {
    let x = case.operands();
    let sch = Schedule {
        epilogue: Epilogue::WeightFirst,
        bias: if x.bias.is_some() {
            Bias::Add
        } else {
            Bias::Absent
        },
    };
    check_operands(shape, &sch, &x, shape.m() * shape.out_f()).map_err(|e| e.to_string())?;
    exact_accs(case, shape.m(), shape.in_f(), shape.out_f())
}

/// The outputs of `case` under `schedule`, rounded to `out` (values of
/// `out` as f32), from its `acc'` ([`accs`]).
///
/// # Errors
/// As [`accs`]; a bias form that disagrees with the case's bias.
pub fn reference(
    shape: &Shape,
    case: &Case,
    schedule: &Schedule,
    out: Dtype,
) -> Result<Vec<f32>, String> {
    let x = case.operands();
    check_operands(shape, schedule, &x, shape.m() * shape.out_f()).map_err(|e| e.to_string())?;
    let acc = accs(shape, case)?;
    Ok(apply(shape, &x, &acc, schedule, out))
}

fn apply(
    shape: &Shape,
    x: &Operands<'_>,
    acc: &[i32],
    schedule: &Schedule,
    out: Dtype,
) -> Vec<f32> {
    let n = shape.out_f();
    acc.iter()
        .enumerate()
        .map(|(at, &a)| {
            let (j, i) = (at / n, at % n);
            let b = x.bias.map_or(0.0, |b| b[i]);
            epilogue(schedule, out, to_f32(a), x.d_at(j), x.s_at(i), b)
        })
        .collect()
}

/// The known schedules for a case with (`bias`) or without a bias: the
/// three scale associations, each with no bias, or with each bias form.
pub fn known_schedules(bias: bool) -> Vec<Schedule> {
    let forms: &[Bias] = if bias {
        &Bias::WITH_BIAS
    } else {
        &[Bias::Absent]
    };
    Epilogue::ALL
        .iter()
        .flat_map(|&e| {
            forms.iter().map(move |&b| Schedule {
                epilogue: e,
                bias: b,
            })
        })
        .collect()
}

/// A schedule in one line: `(acc*s)*d, fma bias`.
pub fn schedule_label(s: &Schedule) -> String {
    format!("{}, {}", s.epilogue.name(), s.bias.name())
}

/// The known schedules ([`known_schedules`]) whose outputs, in `out`,
/// equal `got` bit for bit everywhere (`got` holds `out`'s bits widened to
/// 32, as [`Dtype::encode`] gives them; any NaN equal to any NaN).
///
/// # Errors
/// As [`accs`], or `got` of the wrong length.
pub fn identify(
    shape: &Shape,
    case: &Case,
    out: Dtype,
    got: &[u32],
) -> Result<Vec<Schedule>, String> {
    let n = shape.m() * shape.out_f();
    if got.len() != n {
        return Err(format!(
            "got has {} elements, the shape needs {n}",
            got.len()
        ));
    }
    let acc = accs(shape, case)?;
    let x = case.operands();
    Ok(known_schedules(x.bias.is_some())
        .into_iter()
        .filter(|sch| {
            apply(shape, &x, &acc, sch, out)
                .iter()
                .zip(got)
                .all(|(&v, &g)| out.same(out.encode(v), g))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(bias: bool, azp: Option<AzpKind>, out: Dtype) -> Inputs {
        Inputs {
            scales: Scales::Row,
            bias,
            azp,
            out,
        }
    }

    fn spec(arm: Arm, m: usize, in_f: usize, out_f: usize, inp: Inputs) -> Spec {
        Spec {
            m,
            in_f,
            out_f,
            arm,
            seed: Spec::base_seed(m, in_f, out_f, arm, &inp),
            inputs: inp,
        }
    }

    fn exact_i64(case: &Case, sp: &Spec) -> Vec<i64> {
        let (m, k, n) = (sp.m, sp.in_f, sp.out_f);
        let mut v = Vec::new();
        for j in 0..m {
            for i in 0..n {
                let mut a: i64 = (0..k)
                    .map(|kk| i64::from(case.q[j * k + kk]) * i64::from(case.w[i * k + kk]))
                    .sum();
                if let (Some(azp), Some(adj)) = (&case.azp, &case.azp_adj) {
                    a -= match case.azp_kind {
                        Some(AzpKind::Token) => i64::from(azp[j]) * i64::from(adj[i]),
                        _ => i64::from(adj[i]),
                    };
                }
                v.push(a);
            }
        }
        v
    }

    /// The outputs with the products summed in binary32 in k order (the
    /// bug BIG is aimed at), then the epilogue.
    fn f32_accumulated(case: &Case, sp: &Spec, sch: &Schedule) -> Vec<u32> {
        let (m, k, n) = (sp.m, sp.in_f, sp.out_f);
        let x = case.operands();
        let mut v = Vec::new();
        for j in 0..m {
            for i in 0..n {
                let mut a = 0f32;
                for kk in 0..k {
                    a += f32::from(case.q[j * k + kk]) * f32::from(case.w[i * k + kk]);
                }
                let b = x.bias.map_or(0.0, |b| b[i]);
                let y = epilogue(sch, sp.inputs.out, a, x.d_at(j), x.s_at(i), b);
                v.push(sp.inputs.out.encode(y));
            }
        }
        v
    }

    fn bits(out: Dtype, y: &[f32]) -> Vec<u32> {
        y.iter().map(|&v| out.encode(v)).collect()
    }

    fn frac(a: &[u32], b: &[u32]) -> f64 {
        a.iter().zip(b).filter(|(x, y)| x != y).count() as f64 / a.len() as f64
    }

    const WF: Schedule = Schedule {
        epilogue: Epilogue::WeightFirst,
        bias: Bias::Absent,
    };

    #[test]
    fn accs_are_the_exact_dot_products_and_fit_int32() {
        for azp in [None, Some(AzpKind::Tensor), Some(AzpKind::Token)] {
            for arm in Arm::ALL {
                let inp = inputs(true, azp, Dtype::Bf16);
                if !arm.applies(&inp) {
                    assert!(spec(arm, 3, 300, 8, inp).generate().is_err());
                    continue;
                }
                let sp = spec(arm, 3, 2085, 9, inp);
                let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
                let got: Vec<i64> = accs(&shape, &case)
                    .unwrap()
                    .into_iter()
                    .map(i64::from)
                    .collect();
                assert_eq!(got, exact_i64(&case, &sp), "{arm:?} {azp:?}");
            }
        }
        // Zero points halved until the longest k fits.
        let sp = spec(
            Arm::Big,
            1,
            131_071,
            2,
            inputs(false, Some(AzpKind::Token), Dtype::F32),
        );
        let case = sp.generate().unwrap();
        assert!(accs(&sp.shape().unwrap(), &case).is_ok());
    }

    #[test]
    fn big_reaches_past_2_pow_24_and_f32_accumulation_differs() {
        for (m, in_f, out_f) in [(1, 4096, 256), (5, 3077, 129)] {
            let sp = spec(Arm::Big, m, in_f, out_f, inputs(false, None, Dtype::F32));
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            let acc = accs(&shape, &case).unwrap();
            let over = acc.iter().filter(|a| a.unsigned_abs() > 1 << 24).count();
            let one_signed = m * (0..out_f).filter(|i| i % 4 != 3).count();
            assert_eq!(over, one_signed, "every one-signed |acc| > 2^24");
            // The conversion rounds in most of them.
            let inexact = acc
                .iter()
                .filter(|&&a| to_f32(a) as i64 != i64::from(a))
                .count();
            assert!(inexact * 2 > one_signed, "{inexact}");
            let want = bits(
                Dtype::F32,
                &reference(&shape, &case, &WF, Dtype::F32).unwrap(),
            );
            let f32_sum = f32_accumulated(&case, &sp, &WF);
            assert!(frac(&want, &f32_sum) > 0.6, "{}", frac(&want, &f32_sum));
            // In bfloat16, in some of the mirrored columns (a few per cent
            // of the outputs at in_f 3077, a fifth at 4096).
            let spb = Spec {
                inputs: inputs(false, None, Dtype::Bf16),
                ..sp
            };
            let wb = bits(
                Dtype::Bf16,
                &reference(&shape, &case, &WF, Dtype::Bf16).unwrap(),
            );
            let fb = f32_accumulated(&case, &spb, &WF);
            assert!(frac(&wb, &fb) > 0.02, "{}", frac(&wb, &fb));
        }
    }

    #[test]
    fn rand_tells_the_associations_apart_in_f32() {
        let sp = spec(Arm::Rand, 4, 1000, 64, inputs(true, None, Dtype::F32));
        let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
        let ys: Vec<Vec<u32>> = known_schedules(true)
            .iter()
            .map(|s| {
                bits(
                    Dtype::F32,
                    &reference(&shape, &case, s, Dtype::F32).unwrap(),
                )
            })
            .collect();
        let sch = known_schedules(true);
        for a in 0..ys.len() {
            for b in a + 1..ys.len() {
                // Add and AddOut are one form in f32.
                let same_form = sch[a].epilogue == sch[b].epilogue
                    && [sch[a].bias, sch[b].bias].contains(&Bias::Add)
                    && [sch[a].bias, sch[b].bias].contains(&Bias::AddOut);
                if same_form {
                    assert_eq!(ys[a], ys[b]);
                } else {
                    assert!(frac(&ys[a], &ys[b]) > 0.1, "{:?} {:?}", sch[a], sch[b]);
                }
            }
        }
        // -128 is drawn.
        assert!(case.q.contains(&-128) && case.w.contains(&-128));
    }

    #[test]
    fn edge_is_half_minus_128_and_catches_its_misreadings() {
        let sp = spec(Arm::Edge, 5, 2085, 129, inputs(false, None, Dtype::Bf16));
        let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
        let share = case.q.iter().filter(|&&c| c == -128).count() as f64 / case.q.len() as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
        let want = accs(&shape, &case).unwrap();
        for (bug, read) in [
            (
                "-128 as +128",
                (|c: i8| if c == -128 { 128 } else { i32::from(c) }) as fn(i8) -> i32,
            ),
            ("unsigned", |c: i8| i32::from(c as u8)),
        ] {
            let (k, n) = (sp.in_f, sp.out_f);
            let mut differ = 0;
            for j in 0..sp.m {
                for i in 0..n {
                    let a: i64 = (0..k)
                        .map(|kk| i64::from(read(case.q[j * k + kk]) * read(case.w[i * k + kk])))
                        .sum();
                    differ += usize::from(a != i64::from(want[j * n + i]));
                }
            }
            assert_eq!(differ, want.len(), "{bug}");
        }
    }

    #[test]
    fn azp_arm_cancels_two_large_terms() {
        for kind in AzpKind::ALL {
            let sp = spec(
                Arm::Azp,
                5,
                2085,
                129,
                inputs(false, Some(kind), Dtype::Bf16),
            );
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            let acc = accs(&shape, &case).unwrap();
            assert!(acc.iter().all(|a| a.unsigned_abs() <= 256 && *a != 0));
            // Converting acc and azp * azp_adj to binary32 before the
            // subtraction differs in many bfloat16 outputs.
            let (k, n) = (sp.in_f, sp.out_f);
            let x = case.operands();
            let (adj, azp) = (case.azp_adj.clone().unwrap(), case.azp.clone().unwrap());
            let corr_at = |j: usize, i: usize| match kind {
                AzpKind::Tensor => adj[i],
                AzpKind::Token => azp[j] * adj[i],
            };
            let want = bits(
                Dtype::Bf16,
                &reference(&shape, &case, &WF, Dtype::Bf16).unwrap(),
            );
            let mut got = Vec::new();
            for j in 0..sp.m {
                for i in 0..n {
                    let raw = dot(&case.q[j * k..(j + 1) * k], &case.w[i * k..(i + 1) * k]);
                    let corr = corr_at(j, i);
                    assert!(raw.unsigned_abs() > 1 << 24 && corr.unsigned_abs() > 1 << 24);
                    let f = to_f32(raw) - to_f32(corr);
                    got.push(Dtype::Bf16.encode(epilogue(
                        &WF,
                        Dtype::Bf16,
                        f,
                        x.d_at(j),
                        x.s_at(i),
                        0.0,
                    )));
                }
            }
            assert!(frac(&want, &got) > 0.3, "{kind:?}: {}", frac(&want, &got));
        }
    }

    #[test]
    fn bias_arm_separates_add_from_fused_and_the_associations() {
        for out in Dtype::ALL {
            for scales in Scales::ALL {
                for azp in [None, Some(AzpKind::Token)] {
                    let inp = Inputs {
                        scales,
                        bias: true,
                        azp,
                        out,
                    };
                    let sp = spec(Arm::Bias, 4, 2085, 64, inp);
                    let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
                    let y = |e, b| {
                        let s = Schedule {
                            epilogue: e,
                            bias: b,
                        };
                        bits(out, &reference(&shape, &case, &s, out).unwrap())
                    };
                    let ctx = format!("{out:?} {scales:?} {azp:?}");
                    for e in [Epilogue::ActivationFirst, Epilogue::WeightFirst] {
                        let (add, fused) = (y(e, Bias::Add), y(e, Bias::Fused));
                        assert!(add.iter().all(|&b| b == 0), "{ctx} {e:?}: add gives +0");
                        assert!(
                            frac(&add, &fused) > 0.9,
                            "{ctx} {e:?}: {}",
                            frac(&add, &fused)
                        );
                        assert_eq!(add, y(e, Bias::AddOut), "{ctx}");
                    }
                    let fa = y(Epilogue::ActivationFirst, Bias::Fused);
                    let fw = y(Epilogue::WeightFirst, Bias::Fused);
                    assert!(frac(&fa, &fw) > 0.9, "{ctx}: {}", frac(&fa, &fw));
                }
            }
        }
    }

    #[test]
    fn each_schedule_identifies_itself() {
        for bias in [false, true] {
            for out in Dtype::ALL {
                for arm in Arm::ALL {
                    let inp = inputs(bias, Some(AzpKind::Token), out);
                    if !arm.applies(&inp) {
                        continue;
                    }
                    let sp = spec(arm, 3, 700, 24, inp);
                    let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
                    for sch in known_schedules(bias) {
                        let got = bits(out, &reference(&shape, &case, &sch, out).unwrap());
                        let found = identify(&shape, &case, out, &got).unwrap();
                        assert!(found.contains(&sch), "{arm:?} {out:?}: {sch:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn reference_is_cores_int8_scaled_mm() {
        for arm in Arm::ALL {
            let inp = Inputs {
                scales: Scales::Tensor,
                bias: true,
                azp: Some(AzpKind::Tensor),
                out: Dtype::F16,
            };
            let sp = spec(arm, 3, 300, 10, inp);
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            for sch in known_schedules(true) {
                let mut y = vec![0f32; 30];
                oracle::int8_scaled_mm::int8_scaled_mm(
                    &shape,
                    &sch,
                    Dtype::F16,
                    &case.operands(),
                    &mut y,
                )
                .unwrap();
                let r = reference(&shape, &case, &sch, Dtype::F16).unwrap();
                assert_eq!(
                    bits(Dtype::F16, &r),
                    bits(Dtype::F16, &y),
                    "{arm:?} {sch:?}"
                );
            }
        }
    }

    #[test]
    fn caps_and_names() {
        assert!(within_caps(1, 131_072, 1).unwrap_err().contains("I8MM-ACC"));
        assert!(within_caps(1 << 12, 1, 1 << 11)
            .unwrap_err()
            .contains("outputs"));
        assert_eq!(Arm::parse("bias"), Ok(Arm::Bias));
        assert!(Arm::parse("x").is_err());
        assert_eq!(Scales::parse("tensor"), Ok(Scales::Tensor));
        assert_eq!(AzpKind::parse("token"), Ok(AzpKind::Token));
        assert_eq!(
            Arm::defaults(&inputs(false, None, Dtype::Bf16)),
            vec![Arm::Rand, Arm::Big, Arm::Edge]
        );
        assert_eq!(
            Arm::defaults(&inputs(true, Some(AzpKind::Tensor), Dtype::Bf16)).len(),
            5
        );
        assert_eq!(short8(300.4), 300);
        assert_eq!(short8(301.0), 302);
        assert_eq!(short8(0.2), 1);
    }
}
