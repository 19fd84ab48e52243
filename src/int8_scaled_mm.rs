//! Cases for judging an INT8 GEMM with row or tensor scales (W8A8 int8:
//! vLLM's `cutlass_scaled_mm` and `cutlass_scaled_mm_azp`, its
//! `triton_scaled_mm`, `torch._int_mm` plus an epilogue) bit for bit under
//! the epilogue it declares ([`oracle::int8_scaled_mm::Schedule`]), and for
//! naming the known epilogues (scale association, bias form) its output
//! matches.
//!
//! A case (elements, row-major, k fastest): activations `q [m][in_f]` and
//! weights `w [out_f][in_f]`, int8 codes; scales `d [m]` and `s [out_f]`
//! (`[1]` for a side with a per-tensor scale, [`Scales`]), f32; optionally `bias [out_f]`
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
    /// Every association's rounding and the conversions' rounding modes,
    /// aimed at bugs no other arm separates in a bfloat16 or float16
    /// output. Every activation row has the same codes ([`ROUND_CODE`]
    /// over the first `in_f - 2` k, 1 over the last two; zero point
    /// added), so each output's `acc'` is set by its weight row alone and
    /// any integer up to `120 * 127 * (in_f - 2)` can be hit exactly. Even
    /// activation rows have a power-of-two scale `d`, odd rows one shared
    /// random `d` (with one activation scale, a power of two). The weight
    /// row (output column) `i` aims by `i % 4` at:
    /// - 0, ties: `s` a power of two and `acc'` an odd number of one more
    ///   significant bit than the output dtype keeps (9 for bfloat16, 12
    ///   for float16, times a power of two), whose lower neighbour is
    ///   even: the even rows' exact outputs are ties that round down to
    ///   even, so a conversion to the output with ties away from zero
    ///   (`(bits + 0x8000) >> 16`) differs in every even row. For a
    ///   float32 output, `acc' = 2^24 + 4c + 1`, a tie of the int32 to
    ///   float32 conversion (rounding down to even).
    /// - 1, the conversion (rule `I8MM-CVT`): `s` a power of two and `acc'
    ///   = t - 1` over `2^24`, with `t` a tie of the output dtype whose
    ///   lower neighbour is odd: to nearest even `acc'` converts to `t`,
    ///   which rounds up; toward zero (`cvt.rz`) to `t - ulp`, which rounds
    ///   down, so a truncating conversion differs in every even row. For
    ///   float32, `acc' = 2^24 + 4c + 3` (nearest: `+4c + 4`, toward zero:
    ///   `+4c + 2`). Needs `acc' > 2^24`, `in_f` of about 1100 or more;
    ///   shorter, the column is an association column.
    /// - 2 and 3, the associations (rule `I8MM-EPILOGUE`): `s` random and
    ///   `acc'` (exact in binary32, under `2^24`) searched next to ties of
    ///   the output dtype until, in the odd rows, one pair of
    ///   `(acc*d)*s`, `(acc*s)*d`, `acc*(d*s)` and the product in binary64
    ///   rounded once to the output (an epilogue in float64) give other
    ///   outputs. The pair rotates over the association columns through
    ///   all six (three with a per-tensor scale on either side, where the
    ///   binary32 associations agree: binary64 against the binary32 one),
    ///   so every association, and the binary64 epilogue, differs from
    ///   the declared one in some column. With both scales per tensor
    ///   (both powers of two) nothing splits and `acc'` is random.
    ///
    /// Ties and conversion columns show in even rows, associations in odd
    /// ones: a one-token case (`m = 1`) tests the roundings, not the
    /// associations. With a bias declared, the bias is `+0` (the three
    /// forms then agree; [`Arm::Bias`] tells them apart).
    Round,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 6] = [
        Arm::Rand,
        Arm::Big,
        Arm::Edge,
        Arm::Azp,
        Arm::Bias,
        Arm::Round,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Big => "BIG",
            Arm::Edge => "EDGE",
            Arm::Azp => "AZP",
            Arm::Bias => "BIAS",
            Arm::Round => "ROUND",
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
    /// then AZP when zero points are declared and BIAS when a bias is,
    /// then ROUND.
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

/// How the scales are given: each side's scale per row or one per tensor
/// (vLLM's `cutlass_scaled_mm` takes either for each side independently;
/// its static W8A8 schemes pass one activation scale with per-channel
/// weight scales).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scales {
    /// One per activation row (`d [m]`) and one per weight row (`s
    /// [out_f]`).
    Row,
    /// One per tensor (`d [1]`, `s [1]`).
    Tensor,
    /// One activation scale (`d [1]`), one per weight row (`s [out_f]`):
    /// static per-tensor activations with per-channel weights.
    TensorAct,
    /// One per activation row (`d [m]`), one weight scale (`s [1]`).
    TensorWeight,
}

impl Scales {
    /// Every granularity, [`Scales::Row`] first.
    pub const ALL: [Scales; 4] = [
        Scales::Row,
        Scales::Tensor,
        Scales::TensorAct,
        Scales::TensorWeight,
    ];

    /// `"row"`, `"tensor"`, `"tensor_act"` or `"tensor_weight"`.
    pub fn name(self) -> &'static str {
        match self {
            Scales::Row => "row",
            Scales::Tensor => "tensor",
            Scales::TensorAct => "tensor_act",
            Scales::TensorWeight => "tensor_weight",
        }
    }

    /// The granularity named `s`.
    ///
    /// # Errors
    /// A sentence naming the choices.
    pub fn parse(s: &str) -> Result<Scales, String> {
        crate::names::parse_named("scales", s, &Scales::ALL, Scales::name, false)
    }

    /// Whether the activation scales are one per row (`d [m]`).
    pub fn d_per_row(self) -> bool {
        matches!(self, Scales::Row | Scales::TensorWeight)
    }

    /// Whether the weight scales are one per row (`s [out_f]`).
    pub fn s_per_row(self) -> bool {
        matches!(self, Scales::Row | Scales::TensorAct)
    }

    /// The lengths of `d` and `s` for `m` activation rows and `out_f`
    /// weight rows (1 for a per-tensor side).
    pub fn lens(self, m: usize, out_f: usize) -> (usize, usize) {
        (
            if self.d_per_row() { m } else { 1 },
            if self.s_per_row() { out_f } else { 1 },
        )
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

/// [`Arm::Round`]'s activation code over all but the last two k (the
/// zero point added: at most 7 in magnitude, so the code stays int8).
pub const ROUND_CODE: i32 = 120;

/// One way of computing the epilogue that [`Arm::Round`] splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundForm {
    /// A binary32 association (rule `I8MM-EPILOGUE`), rounded to the
    /// output.
    Assoc(Epilogue),
    /// `((double) acc * d) * s` in binary64, rounded once to the output
    /// ([`round_f64`]): an epilogue computed in float64.
    F64,
}

/// The pairs [`Arm::Round`]'s association columns split, in rotation
/// (the last three alone where one side's scale is per tensor).
pub const ROUND_SPLITS: [(RoundForm, RoundForm); 6] = [
    (
        RoundForm::Assoc(Epilogue::ActivationFirst),
        RoundForm::Assoc(Epilogue::WeightFirst),
    ),
    (
        RoundForm::Assoc(Epilogue::WeightFirst),
        RoundForm::Assoc(Epilogue::ScalesFirst),
    ),
    (
        RoundForm::Assoc(Epilogue::ActivationFirst),
        RoundForm::Assoc(Epilogue::ScalesFirst),
    ),
    (RoundForm::F64, RoundForm::Assoc(Epilogue::ActivationFirst)),
    (RoundForm::F64, RoundForm::Assoc(Epilogue::WeightFirst)),
    (RoundForm::F64, RoundForm::Assoc(Epilogue::ScalesFirst)),
];

/// `x` rounded once to `out`, as a binary32 holding the value: float32
/// by Rust's `as` (nearest even); bfloat16 and float16 through binary32
/// rounded to odd (toward zero, the last bit set when inexact), which
/// then rounds to nearest even as `x` itself would (binary32 keeps more
/// than two bits past either; Boldo and Melquiond, "Emulation of FMA and
/// correctly-rounded sums", 2008).
pub fn round_f64(out: Dtype, x: f64) -> f32 {
    let r = x as f32;
    if out == Dtype::F32 || f64::from(r) == x || x.is_nan() {
        return out.round(r);
    }
    let t = if f64::from(r).abs() > x.abs() {
        f32::from_bits(r.to_bits() - 1)
    } else {
        r
    };
    out.round(f32::from_bits(t.to_bits() | 1))
}

/// The output bits of `form` for `acc'`, scales `d`, `s`, no bias.
pub fn round_form(form: RoundForm, out: Dtype, acc: i32, d: f32, s: f32) -> u32 {
    match form {
        RoundForm::Assoc(e) => {
            let sch = Schedule {
                epilogue: e,
                bias: Bias::Absent,
            };
            out.encode(epilogue(&sch, out, to_f32(acc), d, s, 0.0))
        }
        RoundForm::F64 => out.encode(round_f64(out, f64::from(acc) * f64::from(d) * f64::from(s))),
    }
}

/// The significant bits `out` keeps (8, 11 or 24).
fn precision(out: Dtype) -> u32 {
    match out {
        Dtype::F32 => 24,
        Dtype::Bf16 => 8,
        Dtype::F16 => 11,
    }
}

/// A ties column's `acc'` ([`Arm::Round`]), positive, or `None` past
/// `reach`.
fn round_tie_acc(out: Dtype, reach: i64, rng: &mut Rng) -> Option<i64> {
    let acc = match out {
        Dtype::F32 => (1i64 << 24) + 4 * rng.below(1 << 20) as i64 + 1,
        _ => {
            let p = precision(out);
            // 2^p + 2c + 1, c even: the lower neighbour 2^p + 2c has an
            // even significand.
            let odd = (1i64 << p) + 4 * rng.below(1 << (p - 2)) as i64 + 1;
            odd << rng.below(7)
        }
    };
    let acc = if acc > reach && out != Dtype::F32 {
        acc >> acc.trailing_zeros()
    } else {
        acc
    };
    (acc <= reach).then_some(acc)
}

/// A conversion column's `acc'` ([`Arm::Round`]), positive, or `None`
/// past `reach`.
fn round_cvt_acc(out: Dtype, reach: i64, rng: &mut Rng) -> Option<i64> {
    for _ in 0..64 {
        let acc = match out {
            Dtype::F32 => (1i64 << 24) + 4 * rng.below(1 << 21) as i64 + 3,
            _ => {
                let p = precision(out);
                let e = 24 + rng.below(2) as u32;
                // The tie t = 2^e + (2c + 1) 2^(e - p), c odd (its lower
                // neighbour odd), under 1.9 2^e (float16's range).
                let c = 2 * rng.below(1 << (p - 2)) as i64 + 1;
                let t = (1i64 << e) + (2 * c + 1) * (1i64 << (e - p));
                if 10 * t > 19 * (1i64 << e) {
                    continue;
                }
                t - 1
            }
        };
        if acc <= reach {
            return Some(acc);
        }
    }
    None
}

/// An association column's `acc'` ([`Arm::Round`]): positive, under
/// `2^24` and `reach`, found next to the ties of `out` so that the forms
/// of `split` differ for scales `(d, s)`; each try of at most 2000
/// spends one of `budget`.
///
/// # Errors
/// The last candidate, when the tries find none.
fn round_split_acc(
    out: Dtype,
    split: (RoundForm, RoundForm),
    (d, s): (f32, f32),
    reach: i64,
    budget: &mut usize,
    rng: &mut Rng,
) -> Result<i64, i64> {
    let top = reach.clamp(2, 1 << 23);
    let ds = f64::from(d) * f64::from(s);
    let p = precision(out);
    let mut last = 1;
    for _ in 0..2000 {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let a0 = top / 2 + rng.below((top / 2) as usize + 1) as i64;
        let base = if out == Dtype::F32 {
            a0
        } else {
            // The tie of `out` next to a0 d s, back in acc units.
            let v = a0 as f64 * ds;
            let ulp = 2f64.powi(v.log2().floor() as i32 - (p as i32 - 1));
            let t = ((v / ulp).floor() + 0.5) * ulp;
            (t / ds).round() as i64
        };
        for acc in [base, base - 1, base + 1] {
            if acc < 1 || acc > top {
                continue;
            }
            last = acc;
            let a = acc as i32;
            if round_form(split.0, out, a, d, s) != round_form(split.1, out, a, d, s) {
                return Ok(acc);
            }
        }
    }
    Err(last)
}

/// A ROUND weight row: codes over the first `n1` k summing to `A`, over
/// the rest to `B`, with `ROUND_CODE * A + B = acc` (`|B| <= 60`).
fn round_fill(row: &mut [i8], acc: i64, n1: usize, rng: &mut Rng) {
    let c = i64::from(ROUND_CODE);
    let n2 = (row.len() - n1) as i64;
    let mut a = (acc as f64 / c as f64).round() as i64;
    if n2 == 0 {
        a = acc / c;
    }
    a = a.clamp(-127 * n1 as i64, 127 * n1 as i64);
    let b = (acc - c * a).clamp(-127 * n2, 127 * n2);
    let (head, tail) = row.split_at_mut(n1);
    fill_sum(head, a, rng);
    fill_sum(tail, b, rng);
}

/// Codes in -127..=127 summing to `target` (`|target| <= 127 len`),
/// spread: the even share, then random moves that keep the sum.
fn fill_sum(codes: &mut [i8], target: i64, rng: &mut Rng) {
    let len = codes.len();
    if len == 0 {
        return;
    }
    let base = target.div_euclid(len as i64);
    let rem = target.rem_euclid(len as i64) as usize;
    let mut v: Vec<i32> = (0..len)
        .map(|x| (base + i64::from(x < rem)) as i32)
        .collect();
    for _ in 0..len {
        let (a, b) = (rng.below(len), rng.below(len));
        let delta = rng.below(16) as i32;
        if a != b && v[a] + delta <= 127 && v[b] - delta >= -127 {
            v[a] += delta;
            v[b] -= delta;
        }
    }
    for (x, y) in codes.iter_mut().zip(v) {
        *x = y as i8;
    }
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
        let (dn, sn) = inp.scales.lens(m, n);
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
                    let b = if inp.scales.s_per_row() {
                        12 - bit_len(u) - a
                    } else {
                        tensor_b
                    };
                    ss.push((1.0f32 / 5.0) * 2f32.powi(b));
                    bb.push(inp.out.round(-(u as f32) * 2f32.powi(a + b)));
                }
                d = vec![third; dn];
                s = if inp.scales.s_per_row() {
                    ss
                } else {
                    vec![(1.0f32 / 5.0) * 2f32.powi(tensor_b)]
                };
                bias = Some(bb);
            }
            Arm::Round => {
                let z = if inp.azp.is_some() {
                    rng.below(15) as i32 - 7
                } else {
                    0
                };
                azp = vec![z; azp_n];
                let n2 = k.saturating_sub(1).min(2);
                let n1 = k - n2;
                for row in q.chunks_mut(k) {
                    for (kk, x) in row.iter_mut().enumerate() {
                        let c = if kk < n1 { ROUND_CODE } else { 1 };
                        *x = (z + c) as i8;
                    }
                }
                let reach = i64::from(ROUND_CODE) * 127 * n1 as i64;
                let pow2 = |rng: &mut Rng| 2f32.powi(-5 - rng.below(4) as i32);
                let random =
                    |rng: &mut Rng| (1.0 + rng.f01()) * 2f32.powi(-6 - rng.below(2) as i32);
                let d_even = pow2(&mut rng);
                let d_odd = if inp.scales.d_per_row() {
                    random(&mut rng)
                } else {
                    d_even
                };
                d = (0..dn)
                    .map(|j| if j % 2 == 0 { d_even } else { d_odd })
                    .collect();
                let s_tensor = pow2(&mut rng);
                // Both scales powers of two: nothing to split.
                let splits: &[(RoundForm, RoundForm)] = match inp.scales {
                    Scales::Row => &ROUND_SPLITS,
                    Scales::Tensor => &[],
                    _ => &ROUND_SPLITS[3..],
                };
                let mut ss = Vec::with_capacity(n);
                let mut assoc = 0usize;
                // The searches' tries over the whole case (a few per
                // column where a split exists).
                let mut budget = 1usize << 21;
                for (i, row) in w.chunks_mut(k).enumerate() {
                    let target = match i % 4 {
                        0 => round_tie_acc(inp.out, reach, &mut rng),
                        1 => round_cvt_acc(inp.out, reach, &mut rng),
                        _ => None,
                    };
                    let (acc, si) = match target {
                        Some(a) => (a, if sn == 1 { s_tensor } else { pow2(&mut rng) }),
                        None => {
                            let split = splits.get(assoc % splits.len().max(1)).copied();
                            assoc += 1;
                            // A weight scale whose split the search cannot
                            // find (a d s product nearly exact) is drawn
                            // again.
                            let mut found = None;
                            for _ in 0..8 {
                                let si = if sn == 1 { s_tensor } else { random(&mut rng) };
                                let a = match split {
                                    Some(sp) => round_split_acc(
                                        inp.out,
                                        sp,
                                        (d_odd, si),
                                        reach,
                                        &mut budget,
                                        &mut rng,
                                    ),
                                    None => {
                                        Ok(1 + rng.below(reach.clamp(1, 1 << 23) as usize) as i64)
                                    }
                                };
                                let done = a.is_ok() || sn == 1;
                                found = Some((a.unwrap_or_else(|last| last), si));
                                if done {
                                    break;
                                }
                            }
                            found.expect("at least one try")
                        }
                    };
                    let acc = if rng.below(2) == 1 { -acc } else { acc };
                    round_fill(row, acc, n1, &mut rng);
                    ss.push(si);
                }
                s = if sn == 1 { vec![s_tensor] } else { ss };
                if inp.bias {
                    bias = Some(vec![0.0; n]);
                }
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

    /// `acc` converted to binary32 toward zero (`cvt.rz.f32.s32`).
    fn cvt_rz(acc: i32) -> f32 {
        let r = acc as f32;
        if (r as i64).abs() > i64::from(acc).abs() {
            f32::from_bits(r.to_bits() - 1)
        } else {
            r
        }
    }

    /// `x` to bfloat16 with ties away from zero (`(bits + 0x8000) >> 16`)
    /// or to float16 likewise; float32 as is.
    fn ties_away(out: Dtype, x: f32) -> u32 {
        match out {
            Dtype::Bf16 => (x.to_bits() + 0x8000) >> 16,
            Dtype::F16 => {
                let (lo, hi) = (out.round(x), out.steps(out.round(x), 1));
                let (lo, hi) = if lo <= x {
                    (lo, hi)
                } else {
                    (out.steps(lo, -1), lo)
                };
                let pick = if x - lo == hi - x {
                    if x > 0.0 {
                        hi
                    } else {
                        lo
                    }
                } else {
                    out.round(x)
                };
                out.encode(pick)
            }
            Dtype::F32 => x.to_bits(),
        }
    }

    #[test]
    fn round_catches_each_rounding_bug_in_every_out_dtype() {
        use RoundForm::{Assoc, F64};
        let shapes = [
            (1, 4096, 256),
            (5, 3077, 129),
            (32, 4096, 256),
            (64, 8192, 128),
        ];
        let seeds: u64 = std::env::var("ROUND_SEEDS").map_or(3, |v| v.parse().unwrap());
        for (out, (m, in_f, out_f), t) in Dtype::ALL
            .into_iter()
            .flat_map(|o| shapes.into_iter().map(move |sh| (o, sh)))
            .flat_map(|(o, sh)| (0..seeds).map(move |t| (o, sh, t)))
        {
            {
                let mut sp = spec(Arm::Round, m, in_f, out_f, inputs(false, None, out));
                sp.seed = sp.seed.wrapping_add(t);
                let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
                let acc = accs(&shape, &case).unwrap();
                let x = case.operands();
                let ctx = format!("{out:?} {m},{in_f},{out_f}");
                let at = |j: usize, i: usize| acc[j * out_f + i];
                let even: Vec<usize> = (0..m).step_by(2).collect();
                let odd: Vec<usize> = (1..m).step_by(2).collect();
                for e in Epilogue::ALL {
                    let sch = Schedule {
                        epilogue: e,
                        bias: Bias::Absent,
                    };
                    let want = bits(out, &reference(&shape, &case, &sch, out).unwrap());
                    // The reference is the contract's form.
                    for (v, (j, i)) in want
                        .iter()
                        .zip((0..m).flat_map(|j| (0..out_f).map(move |i| (j, i))))
                    {
                        assert_eq!(
                            *v,
                            round_form(Assoc(e), out, at(j, i), x.d_at(j), x.s_at(i))
                        );
                    }
                    let y = |j: usize, i: usize, f: f32| {
                        epilogue(&sch, out, f, x.d_at(j), x.s_at(i), 0.0)
                    };
                    // Conversion toward zero: every even row of every
                    // conversion column.
                    for i in (1..out_f).step_by(4) {
                        for &j in &even {
                            let rz = out.encode(y(j, i, cvt_rz(at(j, i))));
                            assert_ne!(rz, want[j * out_f + i], "{ctx} {e:?} rz ({j}, {i})");
                        }
                    }
                    // Ties away from zero (bfloat16 and float16 output;
                    // float32: the conversion) in every even row of every
                    // ties column.
                    for i in (0..out_f).step_by(4) {
                        for &j in &even {
                            let got = match out {
                                Dtype::F32 => {
                                    let a = at(j, i);
                                    let away = to_f32(a + a.signum());
                                    out.encode(y(j, i, away))
                                }
                                _ => {
                                    let v = epilogue(
                                        &sch,
                                        Dtype::F32,
                                        to_f32(at(j, i)),
                                        x.d_at(j),
                                        x.s_at(i),
                                        0.0,
                                    );
                                    ties_away(out, v)
                                }
                            };
                            assert_ne!(got, want[j * out_f + i], "{ctx} {e:?} ties ({j}, {i})");
                        }
                    }
                    if odd.is_empty() {
                        continue;
                    }
                    // Every other association and the binary64 epilogue
                    // differ somewhere.
                    for bug in [
                        Assoc(Epilogue::ActivationFirst),
                        Assoc(Epilogue::WeightFirst),
                        Assoc(Epilogue::ScalesFirst),
                        F64,
                    ] {
                        if bug == Assoc(e) {
                            continue;
                        }
                        let differ = (0..out_f)
                            .filter(|&i| {
                                round_form(bug, out, at(1, i), x.d_at(1), x.s_at(i))
                                    != want[out_f + i]
                            })
                            .count();
                        assert!(differ >= 1, "{ctx} declared {e:?}, bug {bug:?}");
                    }
                }
                // Every association column splits its pair, in every odd
                // row.
                for (n, i) in (0..out_f).filter(|i| i % 4 >= 2).enumerate() {
                    let (a, b) = ROUND_SPLITS[n % 6];
                    for &j in &odd {
                        let (d, s) = (x.d_at(j), x.s_at(i));
                        assert_ne!(
                            round_form(a, out, at(j, i), d, s),
                            round_form(b, out, at(j, i), d, s),
                            "{ctx} split {a:?} {b:?} column {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn round_names_the_association_in_every_dtype() {
        for out in Dtype::ALL {
            let sp = spec(Arm::Round, 3, 3077, 24, inputs(false, None, out));
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            for sch in known_schedules(false) {
                let got = bits(out, &reference(&shape, &case, &sch, out).unwrap());
                assert_eq!(
                    identify(&shape, &case, out, &got).unwrap(),
                    vec![sch],
                    "{out:?}"
                );
            }
        }
    }

    #[test]
    fn round_keeps_its_designs_under_other_declarations() {
        // Zero points, a bias, and mixed scales: the ties and conversion
        // columns keep their acc' and power-of-two scales.
        for scales in Scales::ALL {
            for azp in [None, Some(AzpKind::Token), Some(AzpKind::Tensor)] {
                let inp = Inputs {
                    scales,
                    bias: azp.is_some(),
                    azp,
                    out: Dtype::Bf16,
                };
                let sp = spec(Arm::Round, 4, 3077, 32, inp);
                let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
                let (dn, sn) = scales.lens(4, 32);
                assert_eq!((case.d.len(), case.s.len()), (dn, sn));
                let acc = accs(&shape, &case).unwrap();
                let x = case.operands();
                let sch = Schedule {
                    epilogue: Epilogue::WeightFirst,
                    bias: if inp.bias { Bias::Fused } else { Bias::Absent },
                };
                let want = bits(
                    Dtype::Bf16,
                    &reference(&shape, &case, &sch, Dtype::Bf16).unwrap(),
                );
                for i in (1..32).step_by(4) {
                    let f = cvt_rz(acc[i]);
                    let y = epilogue(&sch, Dtype::Bf16, f, x.d_at(0), x.s_at(i), 0.0);
                    assert_ne!(Dtype::Bf16.encode(y), want[i], "{scales:?} {azp:?} {i}");
                }
                // Every row has the same acc'.
                assert_eq!(acc[..32], acc[96..]);
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
            vec![Arm::Rand, Arm::Big, Arm::Edge, Arm::Round]
        );
        assert_eq!(
            Arm::defaults(&inputs(true, Some(AzpKind::Tensor), Dtype::Bf16)).len(),
            6
        );
        assert_eq!(Arm::parse("round"), Ok(Arm::Round));
        assert_eq!(Scales::parse("tensor_act"), Ok(Scales::TensorAct));
        assert_eq!(Scales::TensorAct.lens(3, 5), (1, 5));
        assert_eq!(Scales::TensorWeight.lens(3, 5), (3, 1));
        assert_eq!(short8(300.4), 300);
        assert_eq!(short8(301.0), 302);
        assert_eq!(short8(0.2), 1);
    }
}
