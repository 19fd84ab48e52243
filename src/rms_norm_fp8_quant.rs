//! Cases for judging a fused RMSNorm + e4m3 quantization kernel (vLLM's
//! `rms_norm_static_fp8_quant`, `fused_add_rms_norm_static_fp8_quant`,
//! `rms_norm_dynamic_per_token_quant`; the unfused `rms_norm` then
//! quantizer pair; a Triton kernel) under the declaration it makes
//! ([`oracle::rms_norm_fp8_quant::Declared`]: the norm's arithmetic, what
//! the quantizer reads, the scale rule): every code within its set, bit
//! for bit where the set is one code, every scale within its interval,
//! the fused add's residual output bit for bit; and for naming the
//! declarations (what is quantized x the scale rule) an output matches.
//!
//! A case (elements, row-major): `x [rows][hidden]`, with the fused add
//! `residual [rows][hidden]`, `weight [hidden]` (values of the model's
//! dtype) and, under a static scale, the scale the case draws. Every
//! non-zero value drawn has magnitude at least `2^-60`, as in
//! [`crate::rms_norm`].
//!
//! How much each arm decides, over the check's default shapes in bf16
//! (the tests hold the rates): codes whose set is one code, 99.3% or more
//! on every arm, under every arithmetic, read rounded or in float32,
//! static or dynamic (EXACT and TIES about 100%, RAND and AMAX 99.6%:
//! what is left is values within a few binary32 ulps of an e4m3
//! midpoint). Dynamic scales read rounded: every row's under
//! `round_then_weight` and `f32` (UB's under Gemma 83 of 86); read in
//! float32 under `round_then_weight` (whose float32 value is the exact
//! product `R(y r) w`) every row's too, under `f32` and `gemma` from none
//! (EXACT, `f32`) to 95% (ZERO): UB's bound rows and ZERO's floor rows
//! always. TIES parts the rounded reading from the float32 one on 15 to
//! 24% of its codes, the division from the reciprocal on 3 to 13% read
//! rounded; read in float32, only where that value is exact (under
//! `round_then_weight`, the columns weighing a power of two: 4% with a
//! static scale, 0.1% with a dynamic one), never under `f32` and `gemma`,
//! whose float32 value is a few ulps wide: there the two rules cannot be
//! told apart, and a kernel that multiplies where it declares a division
//! passes.

use crate::rms_norm::{exact_max, Dims};
use crate::rng::Rng;
use oracle::fp8_mmq::E4M3_MAX;
use oracle::fp8_quant::{Granularity, ScaleSource, ScaledRule};
use oracle::rms_norm::{Arithmetic, Dtype, Inputs, InvRms, Shape};
use oracle::rms_norm_fp8_quant::{
    admits_code, admits_scale, codes, values, Declared, QuantizeInput, RmsNormQuantError,
};

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// [`crate::rms_norm::Arm::Rand`]'s rows: a scale per row, weights of
    /// either sign, zeros; under a static scale, one from 0.7 to 1.4 times
    /// the tensor's amax over 448 (its largest elements saturate). The
    /// weight skipped, eps misplaced, a wrong `r`, the amax over the
    /// unnormalized input or over rounded values where float32 ones are
    /// declared.
    Rand,
    /// [`crate::rms_norm::Arm::Exact`]'s rows: small integers times a
    /// power of two, whose sum of squares is exact in every order, so the
    /// inverse RMS is a few binary32 ulps wide and nearly every value and
    /// code is decided.
    Exact,
    /// Values on e4m3 rounding midpoints: per row, an exact sum of squares
    /// fixed first (so `r` is known), then elements searched so that the
    /// rounded value is decided and exactly `mid * s` for an e4m3
    /// midpoint `mid` (a tie of the conversion: round half to even), its
    /// float32 value strictly to one side (the `f32` reading rounds to
    /// the nearest code, half the time the other one) but in the columns
    /// weighing 1 or 2 (one in four; the fillers are redrawn, up to 8
    /// times, until they can land), where under `round_then_weight` the
    /// float32 value is the tie itself; the last columns balance the sum
    /// of squares back. The scale is `7 2^k`
    /// (static), or (dynamic) one element's rounded value is `448 * 7 2^k`
    /// (or `448` times `2^k`, `3 2^k`, `5 2^k`), the row's amax, so that
    /// `mid * s` is a dtype value; `fl(1/7)` is `0.75 2^-24` over `1/7`,
    /// so a multiply by the reciprocal rounds the ties at 1.5625 and
    /// 1.8125 (times a power of two) up where the division rounds them to
    /// even, down. Needs a 16-bit dtype and 4 columns or more.
    Ties,
    /// The amax element: per row one element six to twelve times the next
    /// largest after weighting, at the last column (a reduction that drops
    /// its tail), at the first alone (one that drops its head), at a
    /// random one, only negative (a signed max), or at both signs (the
    /// first and the last column, weights of one magnitude); it codes
    /// exactly ±448 and decides a dynamic scale. Per tensor with a dynamic
    /// scale, one element is the tensor's amax, every other row's
    /// largest normalized magnitude halved under 3/4 of it: the first
    /// element, the last, or one inside (a third of the cases each).
    /// Under a static scale, one from 2 to 4 times the mean magnitude over
    /// 448: every spike and a few percent of the other elements beyond
    /// `464 s`, which a conversion without the clamp makes NaN.
    Amax,
    /// The bound (per token, with `scale_ub`): weights of 0.3 to 0.9 times
    /// `scale_ub`, the last column's 0.85 to 0.9; even rows put a spike
    /// there (its value from about 1.5 times the bound at 3 columns to 7
    /// at 8192: `fminf(amax, scale_ub)` decides the scale, the spike
    /// saturates), odd rows have elements of one magnitude (every value
    /// under the bound). Rows of 1 cannot bind (the value is the weight).
    /// Under Gemma the weights are set so that `1 + w` is those
    /// multiples.
    Ub,
    /// The floor: rows (per tensor, the whole tensor, by the seed) all
    /// zero (codes `0x00` or `0x80` by the sign of `y w`), tiny (`x` near
    /// `2^-13 sqrt(eps)`, so values quantized near `2^-13`, whose amax
    /// over 448 is under vLLM's floor `1/(448*512)`), one tiny non-zero
    /// element, and (per token) normal; with the fused add, the row split
    /// into `x` and a zero residual or the reverse.
    Zero,
    /// The fused add's sum (with the residual only): per element, `x =
    /// -residual` (a zero sum), `x` half or three halves of an ulp of
    /// `residual` (a tie of `R(x + residual)`: to even), independent
    /// values (inexact sums), and `x` far below `residual`.
    Residual,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 7] = [
        Arm::Rand,
        Arm::Exact,
        Arm::Ties,
        Arm::Amax,
        Arm::Ub,
        Arm::Zero,
        Arm::Residual,
    ];

    /// The arm's share of the 256 values of a seed's leading byte
    /// ([`Arm::from_seed`]), in [`Arm::ALL`]'s order.
    pub const ODDS: [u32; 7] = [64, 40, 48, 32, 24, 24, 24];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Exact => "EXACT",
            Arm::Ties => "TIES",
            Arm::Amax => "AMAX",
            Arm::Ub => "UB",
            Arm::Zero => "ZERO",
            Arm::Residual => "RESIDUAL",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// The arm a seed draws when none is named (a fuzzer's case): its
    /// leading byte, by [`Arm::ODDS`] (RAND 64 of 256, EXACT 40, TIES 48,
    /// AMAX 32, UB, ZERO and RESIDUAL 24 each). A check's default seeds
    /// ([`Spec::base_seed`]) lead with a byte of their arm.
    pub fn from_seed(seed: u64) -> Arm {
        let b = (seed >> 56) as u32;
        let mut acc = 0;
        for (arm, odds) in Arm::ALL.into_iter().zip(Arm::ODDS) {
            acc += odds;
            if b < acc {
                return arm;
            }
        }
        Arm::Residual
    }
}

/// How the scale is had: given (static, per tensor: the case draws it) or
/// from the amax (dynamic), with a floor and an optional bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scaling {
    /// A static scale, drawn by the case (vLLM's
    /// `rms_norm_static_fp8_quant`).
    Static,
    /// A dynamic scale.
    Dynamic {
        /// The floor under the scale (vLLM's `min_scaling_factor`).
        min_scale: f32,
        /// The bound on the amax (vLLM's `scale_ub`).
        scale_ub: Option<f32>,
    },
}

/// One case: the shape, the norm as declared (its arithmetic, dtype, eps
/// and rsqrt accuracy shape the TIES arm's search), the fused add, the
/// granularity and scaling, the arm and the seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// `(rows, hidden)`.
    pub dims: Dims,
    /// The norm.
    pub norm: oracle::rms_norm::Declared,
    /// With the fused add (a residual is drawn).
    pub fused: bool,
    /// One scale, or one per row.
    pub granularity: Granularity,
    /// Static or dynamic.
    pub scaling: Scaling,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs, as values.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[rows][hidden]`.
    pub x: Vec<f32>,
    /// `[rows][hidden]` with the fused add, empty without.
    pub residual: Vec<f32>,
    /// `[hidden]`.
    pub weight: Vec<f32>,
    /// The static scale, `None` for a dynamic one.
    pub scale: Option<f32>,
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

/// `2^e`.
fn pow2(e: i32) -> f64 {
    f64::from(e).exp2()
}

/// `floor(sqrt(t))`, exactly.
fn isqrt(t: u64) -> u64 {
    let mut a = (t as f64).sqrt() as u64;
    while a * a > t {
        a -= 1;
    }
    while (a + 1) * (a + 1) <= t {
        a += 1;
    }
    a
}

/// `slots` integers from 0 to `cap` whose squares sum to `t` (TIES's
/// balance): the first ones near an even share, the last three by
/// exhaustive search (trying two shares at the level above them);
/// `None` where none is found. At most `O(cap^2)` work per level.
fn fill_squares(t: u64, slots: usize, cap: u64) -> Option<Vec<u64>> {
    if slots == 0 {
        return (t == 0).then(Vec::new);
    }
    if t > slots as u64 * cap * cap {
        return None;
    }
    if slots == 1 {
        let a = isqrt(t);
        return (a * a == t && a <= cap).then(|| vec![a]);
    }
    if slots <= 3 {
        for a in (0..=cap.min(isqrt(t))).rev() {
            if let Some(mut rest) = fill_squares(t - a * a, slots - 1, cap) {
                rest.insert(0, a);
                return Some(rest);
            }
        }
        return None;
    }
    let share = cap.min(isqrt(t / slots as u64));
    let tries: &[u64] = if slots == 4 { &[0, 1, 2, 3] } else { &[0] };
    for &d in tries {
        let Some(a) = share.checked_sub(d) else {
            continue;
        };
        if let Some(mut rest) = fill_squares(t - a * a, slots - 1, cap) {
            rest.insert(0, a);
            return Some(rest);
        }
    }
    None
}

/// A weight vector: mostly of magnitude 0.25 to 1.75, one in eight
/// negative, one in 32 a zero of either sign (as [`crate::rms_norm`]).
fn weights(dt: Dtype, h: usize, rng: &mut Rng) -> Vec<f32> {
    (0..h)
        .map(|_| {
            let sign = if rng.below(8) == 0 { -1.0 } else { 1.0 };
            if rng.below(32) == 0 {
                if rng.below(2) == 0 {
                    0.0
                } else {
                    -0.0
                }
            } else {
                val(dt, sign * (0.25 + 1.5 * f64::from(rng.f01())))
            }
        })
        .collect()
}

/// What is quantized, named `s` ([`QuantizeInput::name`]).
///
/// # Errors
/// A sentence naming the two.
pub fn parse_input(s: &str) -> Result<QuantizeInput, String> {
    crate::names::parse_named(
        "quantize_input",
        s,
        &QuantizeInput::ALL,
        QuantizeInput::name,
        false,
    )
}

/// The scale rule named `s` ([`ScaledRule::label`], any case).
///
/// # Errors
/// A sentence naming the rules.
pub fn parse_rule(s: &str) -> Result<ScaledRule, String> {
    crate::names::parse_named("rule", s, &ScaledRule::ALL, |r| r.label(), true)
}

/// The check's caps: as [`crate::rms_norm::within_caps`].
///
/// # Errors
/// A sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    crate::rms_norm::within_caps(d)
}

/// Whether `v` (positive) is `mid * s` for an e4m3 rounding midpoint
/// `mid` (exactly, in binary64: `mid` has 5 significant bits, `s` 24).
fn is_midpoint(v: f32, s: f32) -> bool {
    let q = f64::from(v) / f64::from(s);
    if !(q > 0.0 && q < f64::from(E4M3_MAX)) {
        return false;
    }
    // The e4m3 spacing at q: 2^(e - 3) in the normal range, 2^-9 below.
    let e = q.log2().floor() as i32;
    let step = pow2(e.max(-6) - 3);
    let mid = ((q / step - 0.5).round() + 0.5) * step;
    mid * f64::from(s) == f64::from(v)
}

/// AMAX's kinds of row: the spike at the last column (0), there and only
/// negative (1), at both signs (2), at the first column alone (3), at a
/// random column (4).
const AMAX_KINDS: usize = 5;

/// Row `y`'s normalized magnitudes `|y_j w_j| / rms(y)` (binary64; `w`
/// the effective weights).
fn normalized(y: &[f32], w: &[f64]) -> Vec<f64> {
    let ms = y.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / y.len() as f64;
    let r = if ms > 0.0 { ms.sqrt() } else { 1.0 };
    y.iter()
        .zip(w)
        .map(|(&v, &wj)| (f64::from(v) * wj).abs() / r)
        .collect()
}

/// Per tensor, the holder `(row, col)` made the tensor's amax by a margin:
/// each other row's largest normalized magnitude halved at its place
/// until under 3/4 of the holder's (halving a row's largest element
/// lowers its normalized magnitude while any other element is non-zero),
/// at most 60 times a row; a row left over it (a lone non-zero element)
/// is left as drawn.
fn tame_rows(dt: Dtype, ys: &mut [Vec<f32>], w: &[f64], (hr, hc): (usize, usize)) {
    let bar = 0.75 * normalized(&ys[hr], w)[hc];
    for (r, y) in ys.iter_mut().enumerate() {
        if r == hr {
            continue;
        }
        for _ in 0..60 {
            let n = normalized(y, w);
            let (j, &m) = n
                .iter()
                .enumerate()
                .fold((0, &0.0), |a, b| if b.1 > a.1 { b } else { a });
            if m < bar {
                break;
            }
            y[j] = val(dt, f64::from(y[j]) * 0.5);
        }
    }
}

impl Spec {
    /// The default seed of a shape, fused add, scaling and arm; its
    /// leading byte draws the arm ([`Arm::from_seed`]).
    pub fn base_seed(d: Dims, fused: bool, granularity: Granularity, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(
            0x5F8A_0000_0000_0000u64 ^ (u64::from(fused) << 4),
            &[d.0, d.1, usize::from(granularity == Granularity::Token)],
        );
        let i = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0);
        let start: u32 = Arm::ODDS[..i].iter().sum();
        let lead = u64::from(start) + (h >> 56) % u64::from(Arm::ODDS[i]);
        (lead << 56) | (h & 0x00FF_FFFF_FFFF_FFFF)
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.dims)
    }

    /// # Errors
    /// A shape over the caps; UB without a dynamic scale with a
    /// `scale_ub`, or with weights near it that the dtype cannot hold;
    /// RESIDUAL without the fused add; a static scale per token.
    pub fn valid(&self) -> Result<Shape, String> {
        let shape = self.shape()?;
        if self.scaling == Scaling::Static && self.granularity == Granularity::Token {
            return Err("a static scale is per tensor".into());
        }
        if self.arm == Arm::Residual && !self.fused {
            return Err("arm RESIDUAL draws the fused add's sums: it needs residual=True".into());
        }
        if self.arm == Arm::Ub {
            let Scaling::Dynamic {
                scale_ub: Some(ub), ..
            } = self.scaling
            else {
                return Err("arm UB needs a dynamic scale with a scale_ub".into());
            };
            let dt = self.norm.dtype();
            let (lo, hi) = (dt.round(ub * 0.3), dt.round(ub * 6.0));
            if !(hi.is_finite() && lo >= 1e-30) {
                return Err(format!(
                    "arm UB: scale_ub {ub:e} puts its weights and values out of {}'s range",
                    dt.name()
                ));
            }
        }
        Ok(shape)
    }

    /// The inputs, drawn from `seed` alone (and the spec's declared norm,
    /// which TIES searches with).
    ///
    /// # Errors
    /// As [`Spec::valid`].
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.valid()?;
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.norm.dtype();
        let mut rng = Rng(self.seed);
        let mut case = match self.arm {
            Arm::Rand | Arm::Exact => {
                let sp = crate::rms_norm::Spec {
                    dims: self.dims,
                    dtype: dt,
                    eps: self.norm.eps(),
                    fused: self.fused,
                    arm: if self.arm == Arm::Rand {
                        crate::rms_norm::Arm::Rand
                    } else {
                        crate::rms_norm::Arm::Exact
                    },
                    seed: self.seed,
                };
                let c = sp.generate()?;
                Case {
                    x: c.x,
                    residual: c.residual,
                    weight: c.weight,
                    scale: None,
                }
            }
            Arm::Ties => self.ties(&shape, &mut rng),
            Arm::Amax => self.amax(&shape, &mut rng),
            Arm::Ub => self.ub(&shape, &mut rng),
            Arm::Zero => self.zero(&shape, &mut rng),
            Arm::Residual => self.residual_arm(&shape, &mut rng),
        };
        if self.scaling == Scaling::Static && case.scale.is_none() {
            // From the tensor's rounded values: RAND, EXACT, ZERO and
            // RESIDUAL 0.7 to 1.4 times their amax over 448; AMAX 2 to 4
            // times their mean magnitude over 448.
            let (amax, mean) = self.magnitudes(&shape, &case);
            let s = if self.arm == Arm::Amax {
                mean * (2.0 + 2.0 * rng.f01())
            } else {
                amax * (0.7 + 0.7 * rng.f01())
            };
            case.scale = Some(s.max(1e-6) / E4M3_MAX);
        }
        debug_assert!(case.x.len() == rows * h);
        Ok(case)
    }

    /// The largest magnitude of the rounded values and their mean
    /// magnitude (0 where the norm refuses the case).
    fn magnitudes(&self, shape: &Shape, case: &Case) -> (f32, f32) {
        let n = shape.len();
        let (mut lo, mut hi) = (vec![0f32; n], vec![0f32; n]);
        let mut res = vec![0f32; case.residual.len()];
        let inputs = case_inputs(case);
        if values(
            shape,
            &self.norm,
            QuantizeInput::Rounded,
            &inputs,
            &mut lo,
            &mut hi,
            &mut res,
        )
        .is_err()
        {
            return (0.0, 0.0);
        }
        let amax = hi.iter().fold(0f32, |a, v| a.max(v.abs()));
        let mean = hi.iter().map(|v| f64::from(v.abs())).sum::<f64>() / n as f64;
        (amax, mean as f32)
    }

    /// `x` and, with the fused add, `residual` for the normalized row `y`:
    /// `x = y` alone; or a residual of about a tenth of `y` (drawn) and
    /// `x = R(y - residual)`.
    fn split(&self, y: &[f32], rng: &mut Rng, x: &mut Vec<f32>, res: &mut Vec<f32>) {
        let dt = self.norm.dtype();
        if !self.fused {
            x.extend_from_slice(y);
            return;
        }
        for &v in y {
            let r = val(dt, f64::from(v) * 0.1 * f64::from(rng.normal()));
            res.push(r);
            x.push(val(dt, f64::from(v) - f64::from(r)));
        }
    }

    /// TIES (see [`Arm::Ties`]).
    fn ties(&self, shape: &Shape, rng: &mut Rng) -> Case {
        let (rows, h) = (shape.rows(), shape.hidden());
        let norm = self.norm;
        let (dt, a) = (norm.dtype(), norm.arithmetic());
        let mut weight = weights(dt, h, rng);
        // One column in four weighs 1 or 2 (under Gemma, 1 + w does):
        // there the float32 value of round_then_weight is the rounded
        // value itself, a tie in both readings, where the division and the
        // reciprocal part; a dynamic row's amax element is one of them.
        let pow2_col: Vec<bool> = (0..h).map(|_| rng.below(4) == 0).collect();
        for j in 0..h {
            if pow2_col[j] {
                let p = (1 + rng.below(2)) as f32;
                weight[j] = match a {
                    Arithmetic::Gemma => p - 1.0,
                    _ if rng.below(8) == 0 => -p,
                    _ => p,
                };
            }
        }
        // Every element but a dynamic row's amax at most 0.38 of the
        // largest multiple: the amax's candidates (up to the largest, a
        // factor of 2.1 over the rest) then span a binade, so one of them
        // can be 448 * 7 2^k.
        let big = exact_max(h, dt, self.fused);
        let cap = (big * 38).div_ceil(100).max(1);
        let slack = if h >= 4 { (h / 2).min(16) } else { 0 };
        let targetable = h - slack;
        let dynamic = matches!(self.scaling, Scaling::Dynamic { .. });
        // A static scale of 7 2^k: 448 s is 3.06 or 6.125, over what
        // elements of at most cap take (about 2).
        let static_s = (!dynamic).then(|| (7.0 * pow2(-10 + rng.below(2) as i32)) as f32);
        // Per tensor, the scale of row 0's amax element holds for every row.
        let mut s = static_s;
        let (mut x, mut residual) = (Vec::with_capacity(rows * h), Vec::new());
        for row in 0..rows {
            let unit = pow2(rng.below(10) as i32 - 6);
            let ys =
                |k: &[i64]| -> Vec<f32> { k.iter().map(|&m| (m as f64 * unit) as f32).collect() };
            let enclose = |m: i64, j: usize, input: QuantizeInput, r: InvRms| {
                input.enclosure(a, dt, (m as f64 * unit) as f32, r, weight[j])
            };
            // Whether element j with multiple m is decided, on a tie of s
            // in the rounded reading and, but in a power-of-two column,
            // strictly off it in the f32 reading.
            let lands = |m: i64, j: usize, s: f32, r: InvRms| {
                let (lo, hi) = enclose(m, j, QuantizeInput::Rounded, r);
                if lo != hi || lo == 0.0 || !is_midpoint(lo.abs(), s) {
                    return false;
                }
                let (flo, fhi) = enclose(m, j, QuantizeInput::F32, r);
                pow2_col[j]
                    || !(flo.abs().min(fhi.abs()) <= lo.abs()
                        && lo.abs() <= flo.abs().max(fhi.abs()))
            };
            // Whether a landed element sits on a midpoint whose tie the
            // reciprocal of a seven rounds the other way (1.5625 or 1.8125
            // times a power of two, in e4m3's normal range).
            let parts = |m: i64, j: usize, s: f32, r: InvRms| {
                let v = enclose(m, j, QuantizeInput::Rounded, r).0.abs();
                let q = f64::from(v) / f64::from(s);
                q >= pow2(-6) && [1.5625, 1.8125].contains(&(q / pow2(q.log2().floor() as i32)))
            };
            let place_amax = dynamic && (self.granularity == Granularity::Token || row == 0);
            // Up to 8 draws of the fillers (each a new sum of squares, so a
            // new r), the best kept: a dynamic row's amax element found, a
            // seven among its scales, in a power-of-two column, and a
            // power-of-two column that can land.
            type Draw = (Vec<i64>, Option<InvRms>, Option<(usize, i64)>, Option<f32>);
            let mut best: Option<(u32, Draw)> = None;
            let full = if place_amax { 6 } else { 2 };
            for _ in 0..8 {
                let k: Vec<i64> = (0..h)
                    .map(|_| {
                        if rng.below(64) == 0 {
                            return 0;
                        }
                        let lo = (big / 4).clamp(1, cap);
                        let m = (lo + rng.below((cap - lo + 1) as usize) as u64) as i64;
                        if rng.below(2) == 0 {
                            -m
                        } else {
                            m
                        }
                    })
                    .collect();
                let r = norm.inv_rms(&ys(&k));
                let Some(rr) = r.filter(|_| slack > 0) else {
                    best = Some((0, (k, r, None, s)));
                    break;
                };
                let (mut score, mut amax_at, mut s_try) = (0, None, s);
                if place_amax {
                    // One element's rounded value 448 times 7 2^k (or 2^k,
                    // 3 2^k, 5 2^k), decided, over every other's by 1.25.
                    let other = (0..h)
                        .map(|j| {
                            let (lo, hi) = enclose(cap as i64, j, QuantizeInput::Rounded, rr);
                            lo.abs().max(hi.abs())
                        })
                        .fold(0f32, f32::max);
                    // (column, multiple, scale, rank: seven 2, power-of-two
                    // column 1)
                    let mut found: Vec<(usize, i64, f32, u32)> = Vec::new();
                    for (j, &p2) in pow2_col.iter().enumerate().take(targetable) {
                        for m in cap + 1..=big {
                            let (lo, hi) = enclose(m as i64, j, QuantizeInput::Rounded, rr);
                            if lo != hi || lo.abs() < other * 1.25 {
                                continue;
                            }
                            let t = f64::from(lo.abs()) / 448.0;
                            let odd = t / pow2(t.log2().floor() as i32);
                            if [1.0, 1.5, 1.25, 1.75].contains(&odd) {
                                let rank = 2 * u32::from(odd == 1.75) + u32::from(p2);
                                found.push((j, m as i64, lo.abs() / E4M3_MAX, rank));
                            }
                        }
                    }
                    if let Some(top) = found.iter().map(|f| f.3).max() {
                        let pool: Vec<_> = found.into_iter().filter(|f| f.3 == top).collect();
                        let (j, m, scale, rank) = pool[rng.below(pool.len())];
                        amax_at = Some((j, m));
                        s_try = Some(scale);
                        score += 1 + rank;
                    } else {
                        s_try = None;
                    }
                }
                // Landing in a power-of-two column, and on a parting tie.
                for need_part in [false, true] {
                    let found = s_try.is_some_and(|st| {
                        (0..targetable).filter(|&j| pow2_col[j]).take(4).any(|j| {
                            (1..=cap as i64)
                                .any(|m| lands(m, j, st, rr) && (!need_part || parts(m, j, st, rr)))
                        })
                    });
                    score += u32::from(found);
                }
                if best.as_ref().is_none_or(|b| score > b.0) {
                    best = Some((score, (k, r, amax_at, s_try)));
                }
                if score == full {
                    break;
                }
            }
            let (k0, r, amax_at, s_row) = best.map(|b| b.1).unwrap_or_default();
            let mut k = k0;
            s = s_row;
            if let (Some(rr), true) = (r, slack > 0) {
                let mut delta: i64 = 0;
                let mut skip = usize::MAX;
                if let Some((j, m)) = amax_at {
                    let m = if rng.below(2) == 0 { -m } else { m };
                    delta += m * m - k[j] * k[j];
                    k[j] = m;
                    skip = j;
                }
                // The balance's room: the last columns' squares, now and at
                // most, with a margin of one full square either way.
                let old: i64 = k[targetable..].iter().map(|m| m * m).sum();
                let room = (slack as i64) * (cap * cap) as i64;
                let (d_lo, d_hi) = (old - room + (cap * cap) as i64, old - (cap * cap) as i64);
                let d_mid = (d_lo + d_hi) / 2;
                if let Some(s) = s.filter(|_| d_lo <= d_hi) {
                    for j in (0..targetable).filter(|&j| j != skip) {
                        // (multiple, new delta, parts): in a power-of-two
                        // column a parting tie first, then the delta
                        // nearest the window's middle.
                        let mut best: Option<(i64, i64, bool)> = None;
                        for m in 1..=cap as i64 {
                            let d = delta + m * m - k[j] * k[j];
                            if !(d_lo..=d_hi).contains(&d) || !lands(m, j, s, rr) {
                                continue;
                            }
                            let p = pow2_col[j] && parts(m, j, s, rr);
                            let better = best.is_none_or(|(_, bd, bp)| {
                                (p, -(d - d_mid).abs()) > (bp, -(bd - d_mid).abs())
                            });
                            if better {
                                best = Some((m, d, p));
                            }
                        }
                        if let Some((m, d, _)) = best {
                            k[j] = if rng.below(2) == 0 { -m } else { m };
                            delta = d;
                        }
                    }
                }
                // The last columns take the sum of squares back.
                let want = old - delta;
                if want >= 0 {
                    if let Some(fill) = fill_squares(want as u64, slack, cap) {
                        for (i, m) in fill.into_iter().enumerate() {
                            let m = m as i64;
                            k[targetable + i] = if rng.below(2) == 0 { -m } else { m };
                        }
                    }
                }
            }
            if self.fused {
                // Exact parts: x = (m - b) unit, residual = b unit.
                for &m in &k {
                    let b = rng.below(2 * big as usize + 1) as i64 - big as i64;
                    x.push(((m - b) as f64 * unit) as f32);
                    residual.push((b as f64 * unit) as f32);
                }
            } else {
                x.extend(ys(&k));
            }
        }
        Case {
            x,
            residual,
            weight,
            scale: static_s,
        }
    }

    /// AMAX (see [`Arm::Amax`]).
    fn amax(&self, shape: &Shape, rng: &mut Rng) -> Case {
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.norm.dtype();
        let mut weight = weights(dt, h, rng);
        // The last column's weight 1 to 1.75 in magnitude; the first's of
        // the same magnitude (the both-signs rows).
        let wl = val(
            dt,
            (1.0 + 0.75 * f64::from(rng.f01())) * if rng.below(4) == 0 { -1.0 } else { 1.0 },
        );
        weight[h - 1] = wl;
        if h > 1 {
            weight[0] = if rng.below(2) == 0 { wl } else { -wl };
        }
        let eff = |w: f32| match self.norm.arithmetic() {
            Arithmetic::Gemma => 1.0 + w,
            _ => w,
        };
        let kind0 = rng.below(AMAX_KINDS);
        // A dynamic scale per tensor: the tensor's amax one element, so
        // that a reduction that drops its tail, its head or a block of rows
        // fails: the last (kind 0 in the last row) where the rows are odd
        // (one past a tile of rows: 9, 33), else the first (kind 3 in row
        // 0) or a random one (kind 4 in a random row), half the cases each.
        let holder = (self.granularity == Granularity::Tensor
            && matches!(self.scaling, Scaling::Dynamic { .. }))
        .then(|| {
            if rows % 2 == 1 {
                (rows - 1, 0)
            } else if rng.below(2) == 0 {
                (0, 3)
            } else {
                (rng.below(rows), 4)
            }
        });
        let wmax = weight.iter().fold(0f32, |m, &w| m.max(eff(w).abs()));
        let mut ys = Vec::with_capacity(rows);
        let mut spike_col = 0;
        for row in 0..rows {
            let scale = pow2(rng.below(7) as i32 - 3);
            let mut y: Vec<f32> = (0..h)
                .map(|_| val(dt, f64::from(rng.normal()) * scale))
                .collect();
            let top = (0..h).fold(0f64, |m, j| m.max(f64::from(y[j] * eff(weight[j])).abs()));
            let kind = match holder {
                Some((r, k)) if r == row => k,
                _ => (row + kind0) % AMAX_KINDS,
            };
            // The spike's column: the last (kinds 0, 1, 2), the first
            // (kind 3), or a random one whose weight is at least half the
            // largest (kind 4).
            let col = match kind {
                3 => 0,
                4 => {
                    let ok: Vec<usize> = (0..h)
                        .filter(|&j| eff(weight[j]).abs() >= 0.5 * wmax)
                        .collect();
                    ok[rng.below(ok.len())]
                }
                _ => h - 1,
            };
            let we = f64::from(eff(weight[col]));
            if we != 0.0 {
                let target = top.max(1e-30) * (6.0 + 6.0 * f64::from(rng.f01()));
                // Kind 1: the amax only negative, the rest under 3/4 of it.
                let sign = if kind == 1 || rng.below(2) == 0 {
                    -1.0
                } else {
                    1.0
                };
                y[col] = val(dt, sign * target / we.abs() * we.signum());
                if kind == 2 && h > 1 {
                    // Both signs: the first column the negation of the last.
                    let w0 = f64::from(eff(weight[0]));
                    if w0 != 0.0 {
                        y[0] = val(dt, -f64::from(y[col]) * we / w0);
                    }
                }
            }
            if holder.is_some_and(|(r, _)| r == row) {
                spike_col = col;
            }
            ys.push(y);
        }
        if let Some((hr, _)) = holder {
            let effw: Vec<f64> = weight.iter().map(|&w| f64::from(eff(w))).collect();
            tame_rows(dt, &mut ys, &effw, (hr, spike_col));
        }
        let (mut x, mut residual) = (Vec::with_capacity(rows * h), Vec::new());
        for y in &ys {
            self.split(y, rng, &mut x, &mut residual);
        }
        Case {
            x,
            residual,
            weight,
            scale: None,
        }
    }

    /// UB (see [`Arm::Ub`]).
    fn ub(&self, shape: &Shape, rng: &mut Rng) -> Case {
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.norm.dtype();
        let ub = match self.scaling {
            Scaling::Dynamic {
                scale_ub: Some(ub), ..
            } => f64::from(ub),
            _ => unreachable!("valid() requires a scale_ub"),
        };
        let gemma = self.norm.arithmetic() == Arithmetic::Gemma;
        // Weights as multiples of the bound (under Gemma, 1 + w is).
        let w_of = |m: f64| val(dt, if gemma { m * ub - 1.0 } else { m * ub });
        let mut weight: Vec<f32> = (0..h)
            .map(|_| {
                let m = 0.3 + 0.6 * f64::from(rng.f01());
                w_of(if !gemma && rng.below(8) == 0 { -m } else { m })
            })
            .collect();
        weight[h - 1] = w_of(0.85 + 0.05 * f64::from(rng.f01()));
        let (mut x, mut residual) = (Vec::with_capacity(rows * h), Vec::new());
        for row in 0..rows {
            let unit = pow2(rng.below(9) as i32 - 4);
            let mut y: Vec<f32> = (0..h)
                .map(|_| (if rng.below(2) == 0 { -unit } else { unit }) as f32)
                .collect();
            if row % 2 == 0 {
                y[h - 1] = (8.0 * unit * if rng.below(2) == 0 { -1.0 } else { 1.0 }) as f32;
            }
            self.split(&y, rng, &mut x, &mut residual);
        }
        Case {
            x,
            residual,
            weight,
            scale: None,
        }
    }

    /// ZERO (see [`Arm::Zero`]).
    fn zero(&self, shape: &Shape, rng: &mut Rng) -> Case {
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.norm.dtype();
        let weight = weights(dt, h, rng);
        let tiny = f64::from(self.norm.eps()).sqrt() * pow2(-13);
        let kind0 = rng.below(4);
        let (mut x, mut residual) = (Vec::with_capacity(rows * h), Vec::new());
        for row in 0..rows {
            let kind = match self.granularity {
                Granularity::Tensor => (self.seed % 3) as usize,
                Granularity::Token => (row + kind0) % 4,
            };
            let normal = |rng: &mut Rng, s: f64| val(dt, f64::from(rng.normal()) * s);
            let y: Vec<f32> = match kind {
                0 => vec![0.0; h],
                1 => (0..h).map(|_| normal(rng, tiny)).collect(),
                2 => {
                    let mut v = vec![0.0; h];
                    let at = rng.below(h);
                    v[at] = val(dt, tiny * if rng.below(2) == 0 { -2.0 } else { 2.0 });
                    v
                }
                _ => (0..h).map(|_| normal(rng, 1.0)).collect(),
            };
            if self.fused {
                // The sum is the row: a zero row's parts are zeros, the
                // rest split exactly (x = y, residual = 0, or the reverse).
                let to_x = rng.below(2) == 0;
                for &v in &y {
                    x.push(if to_x { v } else { 0.0 });
                    residual.push(if to_x { 0.0 } else { v });
                }
            } else {
                x.extend(y);
            }
        }
        Case {
            x,
            residual,
            weight,
            scale: None,
        }
    }

    /// RESIDUAL (see [`Arm::Residual`]).
    fn residual_arm(&self, shape: &Shape, rng: &mut Rng) -> Case {
        let (rows, h) = (shape.rows(), shape.hidden());
        let dt = self.norm.dtype();
        let weight = weights(dt, h, rng);
        let bits = match dt {
            Dtype::Bf16 => 8,
            Dtype::F16 => 11,
            Dtype::F32 => 24,
        };
        let (mut x, mut residual) = (Vec::with_capacity(rows * h), Vec::with_capacity(rows * h));
        for _ in 0..rows {
            let scale = pow2(rng.below(7) as i32 - 3);
            for _ in 0..h {
                let res = val(dt, f64::from(rng.normal()) * scale);
                let sign = if rng.below(2) == 0 { -1.0 } else { 1.0 };
                let half_ulp = if res == 0.0 {
                    0.0
                } else {
                    pow2(f64::from(res.abs()).log2().floor() as i32 - bits)
                };
                let xv = match rng.below(4) {
                    0 => -res,
                    1 => val(
                        dt,
                        sign * half_ulp * if rng.below(2) == 0 { 1.0 } else { 3.0 },
                    ),
                    2 => val(
                        dt,
                        f64::from(rng.normal()) * scale * pow2(rng.below(9) as i32 - 4),
                    ),
                    _ => val(dt, f64::from(rng.normal()) * scale * pow2(-12)),
                };
                x.push(xv);
                residual.push(res);
            }
        }
        Case {
            x,
            residual,
            weight,
            scale: None,
        }
    }
}

/// The case's inputs as core takes them.
pub fn case_inputs(case: &Case) -> Inputs<'_> {
    Inputs {
        x: &case.x,
        residual: (!case.residual.is_empty()).then_some(&case.residual[..]),
        weight: &case.weight,
    }
}

/// The core declaration of a spec and case for `input` and `rule`: the
/// case's static scale, or the spec's dynamic source.
///
/// # Errors
/// A sentence: a static rule other than divide or reciprocal, a bad
/// `min_scale` or `scale_ub`.
pub fn declared(
    spec: &Spec,
    case: &Case,
    input: QuantizeInput,
    rule: ScaledRule,
) -> Result<Declared, String> {
    let source = match spec.scaling {
        Scaling::Static => ScaleSource::Static(case.scale.ok_or("a static case draws its scale")?),
        Scaling::Dynamic {
            min_scale,
            scale_ub,
        } => ScaleSource::Dynamic {
            min_scale,
            scale_ub,
        },
    };
    Declared::new(spec.norm, input, rule, spec.granularity, source).map_err(|e| e.to_string())
}

/// The oracle's answer for a case under one declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// `[rows][hidden]`: each value to quantize's enclosure, lower end.
    pub v_lo: Vec<f32>,
    /// Its upper end.
    pub v_hi: Vec<f32>,
    /// `[rows][hidden]`: each code set's lower end (`code_set`).
    pub code_lo: Vec<u8>,
    /// Its upper end.
    pub code_hi: Vec<u8>,
    /// `[1]` or `[rows]`: each scale's least value.
    pub scale_lo: Vec<f32>,
    /// Its greatest.
    pub scale_hi: Vec<f32>,
    /// `[rows][hidden]` with the fused add, else empty.
    pub residual: Vec<f32>,
}

impl Reference {
    /// Whether code `i` is decided.
    pub fn decided(&self, i: usize) -> bool {
        self.code_lo[i] == self.code_hi[i]
    }
    /// Whether scale `k` is decided.
    pub fn scale_decided(&self, k: usize) -> bool {
        self.scale_lo[k].to_bits() == self.scale_hi[k].to_bits()
    }
}

/// The values to quantize of a case under `d` ([`values`]).
fn enclosed(shape: &Shape, case: &Case, d: &Declared) -> Result<Reference, RmsNormQuantError> {
    let n = shape.len();
    let mut r = Reference {
        v_lo: vec![0f32; n],
        v_hi: vec![0f32; n],
        code_lo: vec![0u8; n],
        code_hi: vec![0u8; n],
        scale_lo: vec![0f32; d.scales(shape)],
        scale_hi: vec![0f32; d.scales(shape)],
        residual: vec![0f32; case.residual.len()],
    };
    values(
        shape,
        d.norm(),
        d.input(),
        &case_inputs(case),
        &mut r.v_lo,
        &mut r.v_hi,
        &mut r.residual,
    )?;
    Ok(r)
}

/// The codes and scales of `r`'s values under `d`'s rule ([`codes`]).
fn coded(shape: &Shape, r: &mut Reference, d: &Declared) -> Result<(), RmsNormQuantError> {
    codes(
        shape.hidden(),
        d.granularity(),
        d.rule(),
        d.source(),
        &r.v_lo,
        &r.v_hi,
        &mut r.code_lo,
        &mut r.code_hi,
        &mut r.scale_lo,
        &mut r.scale_hi,
    )
}

/// The case under `d` (core's
/// [`oracle::rms_norm_fp8_quant::rms_norm_fp8_quant`], as its two steps).
///
/// # Errors
/// Core's error for a case it refuses.
pub fn reference(shape: &Shape, case: &Case, d: &Declared) -> Result<Reference, RmsNormQuantError> {
    let mut r = enclosed(shape, case, d)?;
    coded(shape, &mut r, d)?;
    Ok(r)
}

/// How a kernel's outputs compare with a [`Reference`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Codes.
    pub n: usize,
    /// Decided codes (a set of one), checked bit for bit.
    pub decided: usize,
    /// Decided codes that differ.
    pub decided_wrong: usize,
    /// Codes with a set of several.
    pub bounded: usize,
    /// Of those, codes outside their set.
    pub bounded_outside: usize,
    /// The first code not admitted.
    pub first: Option<usize>,
    /// Scales compared (0 under a static scale, which is not an output).
    pub scales: usize,
    /// Decided scales.
    pub scales_decided: usize,
    /// Scales not admitted.
    pub scales_wrong: usize,
    /// The first of them.
    pub first_scale: Option<usize>,
    /// Residual output elements whose bits differ.
    pub residual_differ: usize,
    /// The first of them.
    pub first_residual: Option<usize>,
}

impl Verdict {
    /// Judges codes `q`, scales `s` (`None` under a static scale, which
    /// the kernel does not write) and the residual output's bits
    /// `residual` (of `dtype`) against `want`.
    pub fn judge(
        dtype: Dtype,
        want: &Reference,
        q: &[u8],
        s: Option<&[f32]>,
        residual: &[u32],
    ) -> Verdict {
        let mut v = Verdict {
            n: want.code_lo.len(),
            ..Verdict::default()
        };
        for i in 0..v.n {
            let ok = q
                .get(i)
                .is_some_and(|&g| admits_code(want.code_lo[i], want.code_hi[i], g));
            if want.decided(i) {
                v.decided += 1;
                v.decided_wrong += usize::from(!ok);
            } else {
                v.bounded += 1;
                v.bounded_outside += usize::from(!ok);
            }
            if !ok {
                v.first.get_or_insert(i);
            }
        }
        if let Some(s) = s {
            v.scales = want.scale_lo.len();
            for k in 0..v.scales {
                v.scales_decided += usize::from(want.scale_decided(k));
                let ok = s
                    .get(k)
                    .is_some_and(|&g| admits_scale(want.scale_lo[k], want.scale_hi[k], g));
                if !ok {
                    v.scales_wrong += 1;
                    v.first_scale.get_or_insert(k);
                }
            }
        }
        for (i, &w) in want.residual.iter().enumerate() {
            if residual.get(i) != Some(&dtype.encode(w)) {
                v.residual_differ += 1;
                v.first_residual.get_or_insert(i);
            }
        }
        v
    }

    /// Every code and scale admitted, the residual output bit for bit.
    pub fn pass(&self) -> bool {
        self.decided_wrong == 0
            && self.bounded_outside == 0
            && self.scales_wrong == 0
            && self.residual_differ == 0
    }
}

/// `"rounded/divide"`: what is quantized and the rule.
pub fn label(input: QuantizeInput, rule: ScaledRule) -> String {
    format!("{}/{}", input.name(), rule.label())
}

/// The rules identification tries: `divide` and `reciprocal` under a
/// static scale, every [`ScaledRule`] under a dynamic one.
pub fn known_rules(scaling: Scaling) -> Vec<ScaledRule> {
    match scaling {
        Scaling::Static => vec![ScaledRule::Divide, ScaledRule::Reciprocal],
        Scaling::Dynamic { .. } => ScaledRule::ALL.to_vec(),
    }
}

/// Every known declaration (what is quantized x [`known_rules`], the norm
/// and scaling as declared) whose sets admit `q` and `s` and whose
/// residual output is `residual`, each as [`label`] gives it.
///
/// # Errors
/// A sentence, where the oracle refuses the case.
pub fn identify(
    shape: &Shape,
    spec: &Spec,
    case: &Case,
    q: &[u8],
    s: Option<&[f32]>,
    residual: &[u32],
) -> Result<Vec<String>, String> {
    let dt = spec.norm.dtype();
    let mut found = Vec::new();
    for input in QuantizeInput::ALL {
        let rules = known_rules(spec.scaling);
        let d0 = declared(spec, case, input, rules[0])?;
        let mut r = enclosed(shape, case, &d0).map_err(|e| e.to_string())?;
        for rule in rules {
            let d = declared(spec, case, input, rule)?;
            coded(shape, &mut r, &d).map_err(|e| e.to_string())?;
            if Verdict::judge(dt, &r, q, s, residual).pass() {
                found.push(label(input, rule));
            }
        }
    }
    Ok(found)
}

/// The rows' inverse RMS under the spec's norm (for reports).
pub fn inv_rms_rows(shape: &Shape, spec: &Spec, case: &Case) -> Vec<Option<InvRms>> {
    let h = shape.hidden();
    let (dt, sum) = (spec.norm.dtype(), spec.norm.sum());
    (0..shape.rows())
        .map(|row| {
            let xs = &case.x[row * h..(row + 1) * h];
            let y = (0..h).map(|j| {
                if case.residual.is_empty() {
                    xs[j]
                } else {
                    sum.normed(dt, xs[j], case.residual[row * h + j])
                }
            });
            spec.norm.inv_rms_of(h, y)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle::fp8_quant::{SpanScale, MIN_SCALING_FACTOR};
    use oracle::rms_norm::SumRounding;

    fn norm(a: Arithmetic, dt: Dtype, sum: SumRounding) -> oracle::rms_norm::Declared {
        oracle::rms_norm::Declared::new(a, sum, dt, 1e-6, 2).unwrap()
    }

    const DYN: Scaling = Scaling::Dynamic {
        min_scale: MIN_SCALING_FACTOR,
        scale_ub: None,
    };

    fn spec(
        dims: Dims,
        a: Arithmetic,
        fused: bool,
        g: Granularity,
        scaling: Scaling,
        arm: Arm,
    ) -> Spec {
        Spec {
            dims,
            norm: norm(a, Dtype::Bf16, SumRounding::Dtype),
            fused,
            granularity: g,
            scaling,
            arm,
            seed: Spec::base_seed(dims, fused, g, arm),
        }
    }

    /// `sp`'s shape, case and the oracle's answer under (`input`, `rule`).
    fn answer(sp: &Spec, input: QuantizeInput, rule: ScaledRule) -> (Shape, Case, Reference) {
        let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
        let want = reference(&shape, &c, &declared(sp, &c, input, rule).unwrap()).unwrap();
        (shape, c, want)
    }

    /// The check's default shapes (as the Python module's).
    const SHAPES: [Dims; 9] = [
        (9, 7),
        (5, 129),
        (3, 4097),
        (6, 1),
        (7, 3),
        (33, 2048),
        (4, 4096),
        (3, 7168),
        (16, 8192),
    ];

    /// The oracle's codes and scales as a kernel would write them: each
    /// set's lower end (admitted), each scale's least value.
    fn own(want: &Reference) -> (Vec<u8>, Vec<f32>, Vec<u32>) {
        (
            want.code_lo.clone(),
            want.scale_lo.clone(),
            crate::dtype::bits(Dtype::Bf16, &want.residual),
        )
    }

    #[test]
    fn arms_from_seed_reach_their_odds_and_base_seeds_lead_with_their_arm() {
        let mut rng = Rng(17);
        let n = 1 << 14;
        let mut count = [0usize; 7];
        for _ in 0..n {
            let a = Arm::from_seed(rng.next_u64());
            count[Arm::ALL.iter().position(|&b| b == a).unwrap()] += 1;
        }
        for (i, &c) in count.iter().enumerate() {
            let want = n as f64 * f64::from(Arm::ODDS[i]) / 256.0;
            assert!(
                (c as f64 - want).abs() < want * 0.15,
                "{:?}: {c} of {n}",
                Arm::ALL[i]
            );
        }
        assert_eq!(Arm::ODDS.iter().sum::<u32>(), 256);
        for &d in &SHAPES {
            for arm in Arm::ALL {
                for g in [Granularity::Tensor, Granularity::Token] {
                    assert_eq!(Arm::from_seed(Spec::base_seed(d, true, g, arm)), arm);
                }
            }
        }
    }

    #[test]
    fn fill_squares_balances_sums() {
        for (t, slots, cap) in [
            (0u64, 3usize, 10u64),
            (7, 3, 10),
            (1000, 16, 22),
            (4 * 484 - 1, 4, 22),
            (300, 2, 15),
        ] {
            if let Some(v) = fill_squares(t, slots, cap) {
                assert_eq!(v.len(), slots);
                assert_eq!(v.iter().map(|a| a * a).sum::<u64>(), t);
                assert!(v.iter().all(|&a| a <= cap));
            } else {
                // 7 = 4 + 1 + 1 + 1 needs four squares.
                assert!(t == 7 || t == 4 * 484 - 1 || t == 300, "{t} {slots}");
            }
        }
        assert!(fill_squares(7, 4, 10).is_some());
    }

    #[test]
    fn is_midpoint_finds_e4m3_midpoints_times_a_scale() {
        let s = 7.0f32 / 1024.0;
        assert!(is_midpoint(1.4375 * s, s));
        assert!(is_midpoint(1.5625 * 8.0 * s, s));
        assert!(is_midpoint(0.5 / 512.0 * s, s));
        assert!(!is_midpoint(1.5 * s, s));
        assert!(!is_midpoint(1.4375 * s * (1.0 + 1e-6), s));
        assert!(!is_midpoint(500.0 * s, s));
    }

    /// Codes that part two declarations on a case: decided under both,
    /// different.
    fn parted(
        shape: &Shape,
        sp: &Spec,
        c: &Case,
        a: (QuantizeInput, ScaledRule),
        b: (QuantizeInput, ScaledRule),
    ) -> (usize, usize) {
        let wa = reference(shape, c, &declared(sp, c, a.0, a.1).unwrap()).unwrap();
        let wb = reference(shape, c, &declared(sp, c, b.0, b.1).unwrap()).unwrap();
        let n = (0..shape.len())
            .filter(|&i| wa.decided(i) && wb.decided(i) && wa.code_lo[i] != wb.code_lo[i])
            .count();
        (n, shape.len())
    }

    /// TIES parts the rounded reading from the f32 one, and the division
    /// from the multiply by the reciprocal, at its designed rates (static
    /// and dynamic, per token and per tensor); each declaration's own
    /// output is named by it and not by the other reading.
    #[test]
    fn ties_part_the_readings_and_the_rules_at_their_rates() {
        use QuantizeInput::{Rounded, F32};
        let (d, r) = (ScaledRule::Divide, ScaledRule::Reciprocal);
        for (g, scaling) in [
            (Granularity::Tensor, Scaling::Static),
            (Granularity::Token, DYN),
            (Granularity::Tensor, DYN),
        ] {
            for a in [Arithmetic::RoundThenWeight, Arithmetic::F32] {
                let (mut inputs, mut rules, mut rules_f32, mut total) = (0, 0, 0, 0);
                for &dims in &SHAPES {
                    if dims.1 < 129 {
                        continue;
                    }
                    let sp = spec(dims, a, false, g, scaling, Arm::Ties);
                    let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
                    let (p, n) = parted(&shape, &sp, &c, (Rounded, d), (F32, d));
                    inputs += p;
                    total += n;
                    rules += parted(&shape, &sp, &c, (Rounded, d), (Rounded, r)).0;
                    rules_f32 += parted(&shape, &sp, &c, (F32, d), (F32, r)).0;
                    // Each reading names itself, not the other.
                    for input in QuantizeInput::ALL {
                        let rule = if scaling == Scaling::Static { r } else { d };
                        let want = reference(&shape, &c, &declared(&sp, &c, input, rule).unwrap())
                            .unwrap();
                        let (q, s, res) = own(&want);
                        let s = (scaling != Scaling::Static).then_some(&s[..]);
                        let found = identify(&shape, &sp, &c, &q, s, &res).unwrap();
                        assert!(
                            found.contains(&label(input, rule)),
                            "{dims:?} {a:?} {g:?}: {found:?}"
                        );
                        let other = if input == Rounded { F32 } else { Rounded };
                        assert!(
                            !found.contains(&label(other, rule)),
                            "{dims:?} {a:?} {g:?} {input:?}: {found:?}"
                        );
                    }
                }
                let fi = inputs as f64 / total as f64;
                let fr = rules as f64 / total as f64;
                let ff = rules_f32 as f64 / total as f64;
                assert!(fi > 0.12, "{g:?} {scaling:?} {a:?}: rounded/f32 part {fi}");
                assert!(
                    fr > 0.02,
                    "{g:?} {scaling:?} {a:?}: divide/reciprocal part {fr}"
                );
                // Read in float32, ties are decided only where that value
                // is exact: round_then_weight's power-of-two columns.
                if a == Arithmetic::RoundThenWeight && scaling == Scaling::Static {
                    assert!(ff > 0.02, "{a:?}: divide/reciprocal part {ff} in f32");
                } else if a == Arithmetic::F32 {
                    assert_eq!(rules_f32, 0);
                }
            }
        }
    }

    /// The fraction of codes decided per arm (the module documentation's
    /// figures), rounded and f32, static and dynamic.
    #[test]
    fn every_arm_decides_most_codes() {
        for (g, scaling) in [
            (Granularity::Tensor, Scaling::Static),
            (Granularity::Token, DYN),
        ] {
            for arm in [
                Arm::Rand,
                Arm::Exact,
                Arm::Ties,
                Arm::Amax,
                Arm::Zero,
                Arm::Residual,
            ] {
                for input in QuantizeInput::ALL {
                    let (mut dec, mut n) = (0, 0);
                    for &dims in &SHAPES {
                        let sp = spec(
                            dims,
                            Arithmetic::RoundThenWeight,
                            arm == Arm::Residual,
                            g,
                            scaling,
                            arm,
                        );
                        let (shape, _, want) = answer(&sp, input, ScaledRule::Divide);
                        dec += (0..shape.len()).filter(|&i| want.decided(i)).count();
                        n += shape.len();
                    }
                    let f = dec as f64 / n as f64;
                    assert!(f > 0.9, "{arm:?} {input:?} {scaling:?}: {f}");
                }
            }
        }
    }

    #[test]
    fn amax_codes_448_decides_the_scale_and_saturates_static_scales() {
        let (mut rows, mut decided, mut negative_only) = (0, 0, 0);
        let (mut elems, mut beyond, mut static_rows, mut spikes_beyond) = (0, 0, 0, 0);
        for &dims in &SHAPES {
            let sp = spec(
                dims,
                Arithmetic::RoundThenWeight,
                false,
                Granularity::Token,
                DYN,
                Arm::Amax,
            );
            let (_, _, want) = answer(&sp, QuantizeInput::Rounded, ScaledRule::Divide);
            let h = dims.1;
            for row in 0..dims.0 {
                rows += 1;
                decided += usize::from(want.scale_decided(row));
                let vs = &want.v_hi[row * h..(row + 1) * h];
                let a = vs.iter().fold(0f32, |m, v| m.max(v.abs()));
                if h > 1 && vs.iter().all(|&v| v < a) {
                    negative_only += 1;
                }
                for (j, v) in vs.iter().enumerate() {
                    if v.abs() == a && want.decided(row * h + j) {
                        assert_eq!(want.code_lo[row * h + j] & 0x7F, 0x7E, "{dims:?} row {row}");
                    }
                }
            }
            let sp = spec(
                dims,
                Arithmetic::RoundThenWeight,
                false,
                Granularity::Tensor,
                Scaling::Static,
                Arm::Amax,
            );
            let (shape, c, want) = answer(&sp, QuantizeInput::Rounded, ScaledRule::Reciprocal);
            let s = c.scale.unwrap();
            elems += shape.len();
            beyond += want.v_lo.iter().filter(|v| (**v / s).abs() > 464.0).count();
            // (Rows of 1 and 3: the mean magnitude is near the amax.)
            for row in want.v_lo.chunks(dims.1).filter(|_| dims.1 >= 7) {
                static_rows += 1;
                spikes_beyond += usize::from(row.iter().any(|v| (v / s).abs() > 464.0));
            }
        }
        assert!(decided * 10 >= rows * 9, "{decided} of {rows}");
        let f = negative_only as f64 / rows as f64;
        assert!((0.3..0.75).contains(&f), "negative-only rows {f}");
        assert!(beyond * 50 > elems, "{beyond} of {elems} beyond 464 s");
        assert!(
            spikes_beyond * 10 >= static_rows * 9,
            "{spikes_beyond} of {static_rows}"
        );
    }

    /// Per tensor with a dynamic scale, AMAX's tensor amax is one element
    /// (the only code of magnitude 448, so any other element's amax gives
    /// another scale): the last where the rows are odd, else the first or
    /// another, at least a quarter of those cases each.
    #[test]
    fn amax_per_tensor_has_one_amax_element_at_the_head_tail_or_inside() {
        let (mut cases, mut unique, mut at) = (0, 0, [0usize; 3]);
        for &dims in &SHAPES {
            for i in 0..12u64 {
                for a in [Arithmetic::RoundThenWeight, Arithmetic::Gemma] {
                    let mut sp = spec(dims, a, i % 2 == 1, Granularity::Tensor, DYN, Arm::Amax);
                    sp.seed ^= i << 8;
                    let (shape, _, want) = answer(&sp, QuantizeInput::Rounded, ScaledRule::Divide);
                    cases += 1;
                    let top: Vec<usize> = (0..shape.len())
                        .filter(|&j| {
                            want.code_lo[j] & 0x7F == 0x7E || want.code_hi[j] & 0x7F == 0x7E
                        })
                        .collect();
                    if let [j] = top[..] {
                        unique += 1;
                        let place = if j + 1 == shape.len() {
                            1
                        } else if j == 0 {
                            0
                        } else {
                            2
                        };
                        if dims.0 % 2 == 1 {
                            assert_eq!(place, 1, "{dims:?}: the amax is not the last element");
                        } else {
                            at[place] += 1;
                        }
                    }
                }
            }
        }
        assert!(
            unique * 100 >= cases * 95,
            "{unique} of {cases} with one amax element"
        );
        let even: usize = at.iter().sum();
        assert!(
            at[0] * 4 >= even && at[2] * 4 >= even,
            "{at:?}: first, last, inside over even rows"
        );
    }

    #[test]
    fn ub_binds_on_even_rows_and_zero_takes_the_floor() {
        let ub = 2.5f32;
        let with = Scaling::Dynamic {
            min_scale: MIN_SCALING_FACTOR,
            scale_ub: Some(ub),
        };
        for &dims in &SHAPES {
            for input in QuantizeInput::ALL {
                let sp = spec(
                    dims,
                    Arithmetic::RoundThenWeight,
                    false,
                    Granularity::Token,
                    with,
                    Arm::Ub,
                );
                let (shape, c, want) = answer(&sp, input, ScaledRule::Divide);
                for row in 0..dims.0 {
                    let bound = want.scale_lo[row] == ub / E4M3_MAX && want.scale_decided(row);
                    if dims.1 >= 3 {
                        assert_eq!(bound, row % 2 == 0, "{dims:?} {input:?} row {row}");
                    }
                }
                // The bound decides the scale; unbounded, a wrong bound.
                let none = Spec { scaling: DYN, ..sp };
                if dims.1 >= 3 {
                    let (n, _) = {
                        let wn = reference(
                            &shape,
                            &c,
                            &declared(&none, &c, input, ScaledRule::Divide).unwrap(),
                        )
                        .unwrap();
                        let v = Verdict::judge(
                            Dtype::Bf16,
                            &want,
                            &wn.code_lo,
                            Some(&wn.scale_lo),
                            &[],
                        );
                        (v.scales_wrong, v.n)
                    };
                    assert!(n >= dims.0 / 2, "{dims:?}");
                }
            }
            // ZERO per token: the floor binds on the zero and tiny rows.
            let sp = spec(
                dims,
                Arithmetic::RoundThenWeight,
                false,
                Granularity::Token,
                DYN,
                Arm::Zero,
            );
            let (shape, c, want) = answer(&sp, QuantizeInput::F32, ScaledRule::Divide);
            let floored = (0..dims.0)
                .filter(|&k| want.scale_decided(k) && want.scale_lo[k] == MIN_SCALING_FACTOR)
                .count();
            assert!(
                floored * 4 >= dims.0 * 2 || dims.0 < 4,
                "{dims:?}: {floored}"
            );
            // A missing floor: a zero scale on the zero rows.
            let nofloor = Spec {
                scaling: Scaling::Dynamic {
                    min_scale: 0.0,
                    scale_ub: None,
                },
                ..sp
            };
            let wn = reference(
                &shape,
                &c,
                &declared(&nofloor, &c, QuantizeInput::F32, ScaledRule::Divide).unwrap(),
            )
            .unwrap();
            let v = Verdict::judge(Dtype::Bf16, &want, &wn.code_lo, Some(&wn.scale_lo), &[]);
            assert!(!v.pass(), "{dims:?}");
        }
    }

    #[test]
    fn residual_arm_draws_ties_cancellations_and_inexact_sums() {
        for sum in SumRounding::ALL {
            let mut sp = spec(
                (5, 129),
                Arithmetic::RoundThenWeight,
                true,
                Granularity::Token,
                DYN,
                Arm::Residual,
            );
            sp.norm = norm(Arithmetic::RoundThenWeight, Dtype::Bf16, sum);
            let c = sp.generate().unwrap();
            let (mut ties, mut zeros, mut inexact) = (0, 0, 0);
            for (&x, &r) in c.x.iter().zip(&c.residual) {
                let s = x + r;
                let rounded = Dtype::Bf16.round(s);
                zeros += usize::from(s == 0.0 && x != 0.0);
                inexact += usize::from(rounded != s);
                // A tie: truncation and rounding to even differ.
                let trunc = f32::from_bits(s.to_bits() & 0xFFFF_0000);
                let half = f32::from_bits((s.to_bits() & 0xFFFF_0000) | 0x8000);
                ties += usize::from(s == half && rounded != trunc);
            }
            let n = c.x.len();
            assert!(
                zeros * 6 > n && ties * 20 > n && inexact * 3 > n,
                "{zeros} {ties} {inexact} of {n}"
            );
            // Each sum rounding identifies itself; the residual output is
            // judged bit for bit.
            let shape = sp.shape().unwrap();
            let d = declared(&sp, &c, QuantizeInput::Rounded, ScaledRule::Divide).unwrap();
            let want = reference(&shape, &c, &d).unwrap();
            let (q, s, res) = own(&want);
            assert!(Verdict::judge(Dtype::Bf16, &want, &q, Some(&s), &res).pass());
            let stale = crate::dtype::bits(Dtype::Bf16, &c.residual);
            let v = Verdict::judge(Dtype::Bf16, &want, &q, Some(&s), &stale);
            assert!(v.residual_differ > n / 2, "{v:?}");
            let other = SumRounding::ALL.into_iter().find(|&o| o != sum).unwrap();
            let mut sp2 = sp;
            sp2.norm = norm(Arithmetic::RoundThenWeight, Dtype::Bf16, other);
            let w2 = reference(
                &shape,
                &c,
                &declared(&sp2, &c, QuantizeInput::Rounded, ScaledRule::Divide).unwrap(),
            )
            .unwrap();
            assert!(!Verdict::judge(Dtype::Bf16, &w2, &q, Some(&s), &res).pass());
        }
    }

    #[test]
    fn arms_are_refused_where_they_cannot_run() {
        let sp = spec(
            (2, 8),
            Arithmetic::F32,
            false,
            Granularity::Token,
            DYN,
            Arm::Ub,
        );
        assert!(sp.generate().unwrap_err().contains("scale_ub"));
        let sp = spec(
            (2, 8),
            Arithmetic::F32,
            false,
            Granularity::Token,
            DYN,
            Arm::Residual,
        );
        assert!(sp.generate().unwrap_err().contains("residual=True"));
        let sp = spec(
            (2, 8),
            Arithmetic::F32,
            false,
            Granularity::Token,
            Scaling::Static,
            Arm::Rand,
        );
        assert!(sp.generate().is_err());
        assert_eq!(Arm::parse("ties"), Ok(Arm::Ties));
        // A static scale's span has one scale; SpanScale's code is the
        // reference's decided code.
        let sp = spec(
            (3, 129),
            Arithmetic::F32,
            false,
            Granularity::Tensor,
            Scaling::Static,
            Arm::Rand,
        );
        let (shape, c, want) = answer(&sp, QuantizeInput::Rounded, ScaledRule::Reciprocal);
        let span = SpanScale::new(
            ScaledRule::Reciprocal,
            ScaleSource::Static(c.scale.unwrap()),
            0.0,
        );
        for i in 0..shape.len() {
            if want.v_lo[i] == want.v_hi[i] {
                assert_eq!(want.code_lo[i], span.code(want.v_lo[i]));
            }
        }
    }
}
