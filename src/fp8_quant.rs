//! Cases for judging a per-token-group e4m3 activation quantizer (vLLM's
//! and SGLang's `per_token_group_quant_fp8`, DeepGEMM's
//! `per_token_cast_to_fp8`, seed 000's v2 quantizer) bit for bit under the
//! rule it declares ([`oracle::fp8_quant::GroupScale`]), and for naming
//! the known rules its output matches.
//!
//! A case: `x` `[m][k]` f32 (elements), groups of `group` columns; the
//! outputs `q` `[m][k]` e4m3 codes and `s` `[m][ceil(k / group)]` f32.
//!
//! Its second half does the same for the per-tensor and per-token
//! quantizers (vLLM's `static_scaled_fp8_quant`, `dynamic_scaled_fp8_quant`,
//! `dynamic_per_token_scaled_fp8_quant`, the pure-torch forms, PyTorch's
//! `to_float8` recipe, torchao's float8 recipe), under a declared
//! [`ScaledRule`]: [`ScaledSpec`], [`ScaledArm`], [`scaled_reference`],
//! [`scaled_identify`].

use crate::elementwise::Part;
use crate::rng::Rng;
use oracle::conventions::Overflow;
use oracle::e4m3::encode_e4m3;
use oracle::fp8_mmq::E4M3_MAX;
use oracle::fp8_quant::{
    ceil_log2, ceil_log2f, quantize_groups, quantize_scaled, Granularity, GroupScale, ScaleSource,
    ScaledRule, Ue8m0Ceil, MIN_SCALING_FACTOR,
};

/// The data a case draws, each arm aimed at one choice that separates the
/// rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal elements, each group at its own magnitude (10^-3 to 10^3);
    /// in each row's last group (a partial group's tail) and every other
    /// group, the amax is the last element, twice every other magnitude,
    /// so an amax loop that drops its remainder finds a smaller one; and
    /// in each group of 4 or more, elements 1 and 2 are `-2^-24` and
    /// `+2^-24` times its magnitude, coding `-0` (0x80) and `+0` (0x00).
    Rand,
    /// The amax floor: one group in four all zero, one tiny (amax near
    /// 1e-12, under a 1e-10 floor), one with a single non-zero element,
    /// one normal.
    Zero,
    /// Rounding ties: in half the groups, elements within one f32 ulp of
    /// a midpoint between two e4m3 values after scaling by an inexact
    /// `amax / 448` (a multiply by the reciprocal and a division round
    /// some of them apart); in the other half, elements exactly at
    /// midpoints times the power of two a UE8M0 scale takes (round half
    /// to even against half away from zero).
    Ties,
    /// UE8M0's ceiling ([`oracle::fp8_quant::Ue8m0Ceil`]): each group's
    /// `amax / 448` (the scale the UE8M0 rules round up) is set bit for
    /// bit ([`pow2_amax`]; and torch's `amax * fl(1/448)` too, for every
    /// scale at or above a power of two and two thirds of those below
    /// one, where both ceilings agree anyway: a torch form's scalar
    /// division changes nothing the arm aims at) at a
    /// [`Pow2Kind`] by the group's index `t` in
    /// row-major order ([`Pow2Kind::of_group`]): half the groups (`t % 4`
    /// of 0 or 2) 1 to 3 ulps above a power of two `2^e` where a binary32
    /// `log2` rounds back to `e` (`|e|` from 4, 8, 16 up at 1, 2, 3 ulps,
    /// but `e` = -4, -8, -16; `log2f` keeps
    /// `2^e`, the exact ceiling takes `2^(e+1)`), one in eight exactly a
    /// power, one in eight 1 to 3 ulps above one where both ceilings take
    /// `2^(e+1)`, and a quarter 1 to 3 ulps below one (both keep `2^e`);
    /// `e` from -20 to 20 ([`POW2_EXP`]: above DeepGEMM's `eps = 1e-4`
    /// floor, so the scale is the amax's).
    Pow2,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 4] = [Arm::Rand, Arm::Zero, Arm::Ties, Arm::Pow2];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Zero => "ZERO",
            Arm::Ties => "TIES",
            Arm::Pow2 => "POW2",
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

/// The rules a check names when an output matches them: v2, the
/// division and UE8M0 rules (each UE8M0 ceiling) at the floors the field
/// passes (vLLM and SGLang `1e-10`, DeepGEMM `1e-4`), and the pure-torch
/// form's reciprocal scale at `1e-10`.
pub const KNOWN: [GroupScale; 8] = [
    GroupScale::V2,
    GroupScale::Divide { eps: 1e-10 },
    GroupScale::Divide { eps: 1e-4 },
    GroupScale::Reciprocal { eps: 1e-10 },
    GroupScale::Ue8m0 {
        eps: 1e-10,
        ceil: Ue8m0Ceil::Log2f,
    },
    GroupScale::Ue8m0 {
        eps: 1e-4,
        ceil: Ue8m0Ceil::Log2f,
    },
    GroupScale::Ue8m0 {
        eps: 1e-10,
        ceil: Ue8m0Ceil::Exact,
    },
    GroupScale::Ue8m0 {
        eps: 1e-4,
        ceil: Ue8m0Ceil::Exact,
    },
];

/// A rule's name as a check's `rule` argument takes it: `v2`, `divide`,
/// `reciprocal`, `ue8m0` (the `log2f` ceiling) or `ue8m0_exact`.
pub fn rule_name(rule: &GroupScale) -> &'static str {
    match rule {
        GroupScale::V2 => "v2",
        GroupScale::Divide { .. } => "divide",
        GroupScale::Reciprocal { .. } => "reciprocal",
        GroupScale::Ue8m0 {
            ceil: Ue8m0Ceil::Log2f,
            ..
        } => "ue8m0",
        GroupScale::Ue8m0 {
            ceil: Ue8m0Ceil::Exact,
            ..
        } => "ue8m0_exact",
    }
}

/// A rule in one line: its name ([`rule_name`]) and floor.
pub fn rule_label(rule: &GroupScale) -> String {
    match rule {
        GroupScale::V2 => "v2".into(),
        GroupScale::Divide { eps }
        | GroupScale::Reciprocal { eps }
        | GroupScale::Ue8m0 { eps, .. } => format!("{}(eps={eps:e})", rule_name(rule)),
    }
}

/// POW2's exponents: a power of two `2^e` with `e` in this range
/// (inclusive). Its top keeps every amax far inside f32 and the e4m3 and
/// int8 codes' range; its bottom keeps `127 * 2^e` and `448 * 2^e` above
/// DeepGEMM's `eps = 1e-4`, so the amax, not the floor, decides the
/// scale.
pub const POW2_EXP: (i32, i32) = (-20, 20);

/// Where a POW2 group's scale lies relative to a power of two `2^e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pow2Kind {
    /// 1 to 3 ulps above `2^e` where `ceil(log2f)` is `e` and the exact
    /// ceiling `e + 1` (rule `UE8M0-LOG2F`): the two UE8M0 ceilings part.
    Parting,
    /// Exactly `2^e`: both ceilings keep it.
    Power,
    /// 1 to 3 ulps above `2^e` where both ceilings are `e + 1` (small
    /// `|e|`, and `e = -4`, `-8`, `-16`).
    Above,
    /// 1 to 3 ulps below `2^e`: both ceilings are `e`.
    Below,
}

impl Pow2Kind {
    /// The kind of group `t` (row-major index): `t % 4` of 0 or 2
    /// [`Pow2Kind::Parting`], 3 [`Pow2Kind::Below`], 1 alternating
    /// [`Pow2Kind::Power`] (`t % 8 == 1`) and [`Pow2Kind::Above`]
    /// (`t % 8 == 5`). Rates: 1/2, 1/4, 1/8, 1/8; a case of one group is
    /// all parting.
    pub fn of_group(t: usize) -> Pow2Kind {
        match (t % 4, t % 8) {
            (0 | 2, _) => Pow2Kind::Parting,
            (3, _) => Pow2Kind::Below,
            (_, 1) => Pow2Kind::Power,
            _ => Pow2Kind::Above,
        }
    }

    /// A scale of this kind, from `rng`: `(e, u)` with the scale the
    /// binary32 `u` ulps from `2^e` (`u` from -3 to 3; 0 for
    /// [`Pow2Kind::Power`]), `e` in [`POW2_EXP`]. Parting and above
    /// scales draw `u` in 1..=3 first, then `e` among those of its kind
    /// (so `u = 3`, parting only from `|e| >= 16`, is a third of them).
    pub fn draw(self, rng: &mut Rng) -> (i32, i32) {
        let (lo, hi) = POW2_EXP;
        let any_e = |rng: &mut Rng| lo + rng.below((hi - lo + 1) as usize) as i32;
        let u = 1 + rng.below(3) as i32;
        match self {
            Pow2Kind::Power => (any_e(rng), 0),
            Pow2Kind::Below => (any_e(rng), -u),
            Pow2Kind::Parting | Pow2Kind::Above => {
                let want = self == Pow2Kind::Parting;
                let es: Vec<i32> = (lo..=hi)
                    .filter(|&e| {
                        let s = ulps_from_pow2(e, u);
                        (ceil_log2f(s) != ceil_log2(s)) == want
                    })
                    .collect();
                (es[rng.below(es.len())], u)
            }
        }
    }
}

/// The binary32 `u` ulps from `2^e` (below it for a negative `u`; `e` in
/// the normal range).
pub fn ulps_from_pow2(e: i32, u: i32) -> f32 {
    let p = 2f64.powi(e) as f32;
    f32::from_bits((i64::from(p.to_bits()) + i64::from(u)) as u32)
}

/// An f32 amax whose scale is `target` bit for bit under a check's own
/// formula: `amax / max` (one IEEE binary32 division; `max` 448 for
/// e4m3, 127 for int8), and, where some candidate allows, `amax *
/// also` too (`also` the binary32 reciprocal torch multiplies by, such as
/// `fl(1 / 127)`: one amax then serves both declarations). Candidates:
/// `fl(max * target)` and its neighbours up to 3 ulps either side (the
/// division maps them monotonically, at most 2 per scale); `None` if no
/// candidate divides to `target` (not for normal targets far from f32's
/// ends).
pub fn pow2_amax(target: f32, max: f32, also: Option<f32>) -> Option<f32> {
    let c = (max * target).to_bits();
    let mut first = None;
    for d in [0i64, 1, -1, 2, -2, 3, -3] {
        let a = f32::from_bits((i64::from(c) + d) as u32);
        if !a.is_finite() || a / max != target {
            continue;
        }
        first.get_or_insert(a);
        if also.is_none_or(|r| a * r == target) {
            return Some(a);
        }
    }
    first
}

/// The largest case: `m k` at most this.
pub const MAX_ELEMS: usize = 1 << 26;

/// An activation quantizer's case `x [m][k]` within the caps.
///
/// # Errors
/// A zero dimension, or more than [`MAX_ELEMS`] elements, as a sentence.
pub fn within_elems(m: usize, k: usize) -> Result<(), String> {
    if m == 0 || k == 0 {
        return Err(format!("m={m} k={k}: each must be at least 1"));
    }
    if m.saturating_mul(k) > MAX_ELEMS {
        return Err(format!(
            "m={m} k={k}: over the check's {MAX_ELEMS} elements"
        ));
    }
    Ok(())
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Rows (tokens).
    pub m: usize,
    /// Columns (features).
    pub k: usize,
    /// Columns per group.
    pub group: usize,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(m: usize, k: usize, group: usize, arm: Arm) -> u64 {
        0xF8A0_0000_0000_0000
            ^ ((m as u64) << 36)
            ^ ((k as u64) << 12)
            ^ ((group as u64) << 2)
            ^ Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// Groups per row.
    pub fn groups(&self) -> usize {
        self.k.div_ceil(self.group.max(1))
    }

    /// # Errors
    /// A zero dimension or group; a case over [`MAX_ELEMS`].
    pub fn valid(&self) -> Result<(), String> {
        if self.group == 0 {
            return Err(format!("group={}: it must be at least 1", self.group));
        }
        within_elems(self.m, self.k)
    }

    /// `x`, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::valid`].
    pub fn generate(&self) -> Result<Vec<f32>, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let mut x = vec![0f32; self.m * self.k];
        let g = self.group;
        let mut t = 0usize;
        let groups = self.groups();
        for row in x.chunks_mut(self.k) {
            for (gi, grp) in row.chunks_mut(g).enumerate() {
                t += 1;
                let mag = 10f32.powf(6.0 * (rng.normal().abs() % 1.0) - 3.0);
                let regime = (rng.normal().to_bits() >> 7) % 4;
                for v in grp.iter_mut() {
                    *v = rng.normal() * mag;
                }
                match self.arm {
                    Arm::Rand => {
                        // Elements 1 and 2 of a group of 4 or more, -tiny
                        // and +tiny: codes -0 (0x80) and +0 (0x00).
                        let n = grp.len();
                        if n > 3 {
                            grp[1] = -mag * 2f32.powi(-24);
                            grp[2] = mag * 2f32.powi(-24);
                        }
                        // The amax at the group's last element, twice
                        // every other magnitude, in each row's last group
                        // (a partial group's tail) and every other group.
                        if n > 1 && (gi + 1 == groups || t.is_multiple_of(2)) {
                            let top = grp[..n - 1].iter().fold(0f32, |a, v| a.max(v.abs()));
                            grp[n - 1] = if rng.f01() < 0.5 { -2.0 } else { 2.0 } * top;
                        }
                    }
                    Arm::Zero => match regime {
                        0 => grp.fill(0.0),
                        1 => grp.iter_mut().for_each(|v| *v *= 1e-12 / mag),
                        2 => {
                            let one = grp[0];
                            grp.fill(0.0);
                            let at = (one.to_bits() as usize >> 3) % grp.len();
                            grp[at] = one;
                        }
                        _ => {}
                    },
                    Arm::Ties => {
                        // Regimes 0 and 1: amax 3 times a power of two times
                        // (1 + odd / 2^20), so amax / 448 is inexact, and
                        // elements nudged around midpoints times it.
                        // Regimes 2 and 3: amax 384 times a power of two p
                        // (amax / 448 in (p / 2, p], so a UE8M0 scale is
                        // p) and elements exactly midpoints times p.
                        let p = 2f32.powi((mag.log2().round() as i32).clamp(-20, 20));
                        let exact = regime >= 2;
                        let (amax, s) = if exact {
                            (384.0 * p, p)
                        } else {
                            let a = 3.0 * mag * (1.0 + ((regime as f32) * 2.0 + 1.0) / 1048576.0);
                            (a, a / 448.0)
                        };
                        for (i, v) in grp.iter_mut().enumerate() {
                            if i == 0 {
                                *v = amax;
                                continue;
                            }
                            // A midpoint between adjacent e4m3 magnitudes
                            // (normal range, 3 mantissa bits: odd / 16 at
                            // binade e), signed, then scaled and nudged by
                            // up to one ulp.
                            let e = (rng.normal().to_bits() % 13) as i32 - 5;
                            let odd = (2 * (rng.normal().to_bits() % 8) + 17) as f32;
                            let mid = odd / 16.0 * 2f32.powi(e);
                            let nudge = if exact {
                                0
                            } else {
                                (rng.normal().to_bits() % 3) as i32 - 1
                            };
                            let t = f32::from_bits((mid * s).to_bits().wrapping_add(nudge as u32));
                            *v = if rng.normal() < 0.0 { -t } else { t };
                        }
                    }
                    Arm::Pow2 => {
                        let (e, u) = Pow2Kind::of_group(t - 1).draw(&mut rng);
                        let target = ulps_from_pow2(e, u);
                        let amax = pow2_amax(target, E4M3_MAX, Some(1.0 / E4M3_MAX))
                            .expect("a normal scale has an amax");
                        let big = grp
                            .iter()
                            .fold(0f32, |a, v| a.max(v.abs()))
                            .max(f32::MIN_POSITIVE);
                        for v in grp.iter_mut() {
                            *v = *v / big * amax * 0.999;
                        }
                        grp[0] = amax;
                    }
                }
            }
        }
        Ok(x)
    }
}

/// The oracle's codes and scales for `x` under `rule`.
///
/// # Errors
/// As [`Spec::valid`].
pub fn reference(spec: &Spec, x: &[f32], rule: GroupScale) -> Result<(Vec<u8>, Vec<f32>), String> {
    spec.valid()?;
    let mut q = vec![0u8; x.len()];
    let mut s = vec![0f32; spec.m * spec.groups()];
    quantize_groups(x, spec.k, spec.group, rule, &mut q, &mut s).map_err(|e| e.to_string())?;
    Ok((q, s))
}

/// How a quantizer's output compares with the oracle's under one rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Codes compared, and those that differ.
    pub codes: (usize, usize),
    /// The scales, bit for bit (every limit 0; `first_diff`'s index is
    /// `row * groups + group`, `max_ulp` the largest distance in f32 ulps).
    pub scales: Part,
    /// The first differing code: `(row, column, got, want)`.
    pub first_code: Option<(usize, usize, u8, u8)>,
    /// The largest distance between a code and the oracle's, in e4m3
    /// steps (the ordered code scale: 1 is one rounding apart).
    pub max_code_steps: u32,
}

/// An e4m3 code on an ordered integer scale (sign-magnitude to two's
/// complement), so adjacent values are one apart.
fn ordered(c: u8) -> i32 {
    let mag = i32::from(c & 0x7F);
    if c & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

impl Verdict {
    /// Compares `q` and `s` with the oracle's `want` (`spec`'s shapes).
    pub fn judge(spec: &Spec, q: &[u8], s: &[f32], want: &(Vec<u8>, Vec<f32>)) -> Verdict {
        Verdict::judge_codes(spec.k, q, s, want)
    }

    /// Compares `q` (rows of `k` codes) and `s` with the oracle's `want`.
    pub fn judge_codes(k: usize, q: &[u8], s: &[f32], want: &(Vec<u8>, Vec<f32>)) -> Verdict {
        let mut v = Verdict {
            codes: (want.0.len(), 0),
            scales: Part::judge(s, &want.1, &vec![0.0; want.1.len()]),
            ..Verdict::default()
        };
        for (i, (&g, &w)) in q.iter().zip(&want.0).enumerate() {
            if g != w {
                v.codes.1 += 1;
                v.first_code.get_or_insert((i / k, i % k, g, w));
                v.max_code_steps = v.max_code_steps.max(ordered(g).abs_diff(ordered(w)));
            }
        }
        v
    }

    /// Every code and every scale bit for bit.
    pub fn pass(&self) -> bool {
        self.codes.1 == 0 && self.scales.bit_exact()
    }
}

/// The rules of [`KNOWN`] whose output equals `q` and `s` bit for bit.
pub fn identify(spec: &Spec, x: &[f32], q: &[u8], s: &[f32]) -> Vec<GroupScale> {
    KNOWN
        .into_iter()
        .filter(|rule| {
            reference(spec, x, *rule)
                .map(|want| Verdict::judge(spec, q, s, &want).pass())
                .unwrap_or(false)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Per-tensor and per-token scaled quantizers (`oracle::fp8_quant::
// quantize_scaled`): vLLM's `static_scaled_fp8_quant`,
// `dynamic_scaled_fp8_quant` and `dynamic_per_token_scaled_fp8_quant`,
// the pure-torch forms, PyTorch's `to_float8` recipe and torchao's.
//
// A case: `x` `[m][k]` f32; the outputs `q` `[m][k]` e4m3 codes and `s`,
// 1 f32 per tensor or `m` per token.
// ---------------------------------------------------------------------------

/// The data a scaled-quantizer case draws, each arm aimed at one classic
/// bug of these kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaledArm {
    /// Normal elements, each row at its own magnitude (10^-3 to 10^3).
    Rand,
    /// The floor: per token, rows cycling through all zero, amax near
    /// 1e-13 (under every floor), amax near 1e-4 (under vLLM's
    /// `min_scaling_factor * 448` only), one non-zero element, normal;
    /// per tensor, the whole tensor all zero, near 1e-13 or near 1e-4 (by
    /// `seed % 3`). A kernel without the floor divides by zero there.
    Zero,
    /// Rounding ties: elements within an f32 ulp of a midpoint between
    /// two e4m3 values ([`TIE_MIDS`], normal and subnormal) times the
    /// scale `s` (dynamic: `amax / 448` with an inexact amax
    /// `3 * 2^e * (1 + odd / 2^20)`; static: the given scale), where a
    /// division and a multiply by the reciprocal round some of them
    /// apart; half the elements are drawn from every point (within 8 ulps
    /// of a midpoint) where `x / s` and `x * fl(1/s)` code differently,
    /// where the scale has one (a static scale whose reciprocal is nearly
    /// exact, such as 0.0173 or a power of two, has none: the two rules
    /// are then one function on every normal input).
    Ties,
    /// The amax element: in every span (the tensor, or each row) the amax
    /// sits at both signs, and in half the spans only at the negative
    /// sign (the largest positive element is smaller: a signed max loses
    /// it); it must code to exactly ±448 (`0x7E`/`0xFE`). Under a static
    /// scale, the elements are drawn from `0.25` to `4` times `448 * s`
    /// (four in five beyond the saturation bound), with `±448 * s` itself:
    /// without the clamp, torch's non-saturating cast makes those past
    /// `464 * s` NaN.
    Amax,
    /// The amax at an end: the span's last element (the tensor's very
    /// last where `m` is odd, or each even row's) is twice every other
    /// magnitude, so a reduction that drops its tail (a vectorized loop
    /// without its remainder, a grid-stride bound off by one, a partial
    /// last tile of rows) finds a smaller amax; or its first element (odd
    /// rows; per tensor, where `m` is even), so one that starts at element
    /// 1 (or drops its first lane) does.
    Tail,
    /// The bound (per token, with `scale_ub`): even rows with amax 1.5 to
    /// 8 times `scale_ub`, odd rows below it; `fminf(amax, scale_ub)`
    /// decides the even rows' scales, and their elements beyond the bound
    /// saturate at ±448.
    Ub,
    /// NaN elements (opt-in; `divide` and `reciprocal` only, whose NaN
    /// semantics are vLLM's CUDA kernels': `fmaxf` skips a NaN in the
    /// amax, and the clamp codes it +448): RAND's data with a NaN of
    /// random sign at the first and the last element of each span and at
    /// one more (per token, even rows only). A reduction that lets a NaN
    /// through (`max`, or a compare in the wrong order) or a clamp that
    /// keeps it (torch's `clamp`) or sends it to -448 (`fminf` and
    /// `fmaxf` swapped) fails here.
    Nan,
}

impl ScaledArm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [ScaledArm; 7] = [
        ScaledArm::Rand,
        ScaledArm::Zero,
        ScaledArm::Ties,
        ScaledArm::Amax,
        ScaledArm::Tail,
        ScaledArm::Ub,
        ScaledArm::Nan,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            ScaledArm::Rand => "RAND",
            ScaledArm::Zero => "ZERO",
            ScaledArm::Ties => "TIES",
            ScaledArm::Amax => "AMAX",
            ScaledArm::Tail => "TAIL",
            ScaledArm::Ub => "UB",
            ScaledArm::Nan => "NAN",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<ScaledArm, String> {
        crate::names::parse_named("arm", s, &ScaledArm::ALL, ScaledArm::name, true)
    }
}

/// A dynamic rule and its floor, as a check names it: the rule's label,
/// with `(min_scale=...)` where the floor is not vLLM's
/// `min_scaling_factor` (`to_float8` and `torchao` have their own, and a
/// static scale none).
pub fn scaled_label(rule: ScaledRule, source: ScaleSource) -> String {
    match source {
        ScaleSource::Dynamic { min_scale, .. }
            if rule.uses_min_scale() && min_scale != MIN_SCALING_FACTOR =>
        {
            format!("{}(min_scale={min_scale:e})", rule.label())
        }
        _ => rule.label().into(),
    }
}

/// The kinds of midpoint between adjacent e4m3 magnitudes, where a
/// division and a multiply by the reciprocal can round apart: the eight
/// of the normal binades (`odd / 16`, 1.0625 to 1.9375, at binade 0; a
/// power of two moves them to any other) and the eight of the subnormal
/// range (`(j + 1/2) * 2^-9`, from `2^-10`, between 0 and the least
/// subnormal, to `7.5 * 2^-9`, below the least normal), whose mantissas
/// differ.
pub const TIE_MIDS: [f32; 16] = [
    1.0625,
    1.1875,
    1.3125,
    1.4375,
    1.5625,
    1.6875,
    1.8125,
    1.9375,
    0.5 / 512.0,
    1.5 / 512.0,
    2.5 / 512.0,
    3.5 / 512.0,
    4.5 / 512.0,
    5.5 / 512.0,
    6.5 / 512.0,
    7.5 / 512.0,
];

/// The shapes `(m, k)` a scaled check runs by default: ragged hidden sizes
/// first (7, 129, 1003; rows 1 to 33: a vectorized-by-4 loop needs its
/// remainder there), then the model widths 4096 (Llama-3 8B), 7168
/// (DeepSeek-V3) and 5120 (Qwen3 32B).
pub const SCALED_SHAPES: [(usize, usize); 8] = [
    (1, 7),
    (33, 7),
    (3, 129),
    (17, 1003),
    (1, 4096),
    (8, 4096),
    (16, 7168),
    (33, 5120),
];

/// One scaled-quantizer case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaledSpec {
    /// Rows (tokens).
    pub m: usize,
    /// Columns (hidden size).
    pub k: usize,
    /// One scale, or one per row.
    pub granularity: Granularity,
    /// The scale's source (a static scale shapes TIES and AMAX; a
    /// `scale_ub` shapes UB).
    pub source: ScaleSource,
    /// The data.
    pub arm: ScaledArm,
    /// The data seed.
    pub seed: u64,
}

impl ScaledSpec {
    /// The default seed of a shape, granularity and arm.
    pub fn base_seed(m: usize, k: usize, granularity: Granularity, arm: ScaledArm) -> u64 {
        0xF8A1_0000_0000_0000
            ^ ((m as u64) << 36)
            ^ ((k as u64) << 12)
            ^ (u64::from(granularity == Granularity::Token) << 8)
            ^ ScaledArm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// Scales written: 1 per tensor, `m` per token.
    pub fn scales(&self) -> usize {
        match self.granularity {
            Granularity::Tensor => 1,
            Granularity::Token => self.m,
        }
    }

    /// The arms a check runs by default: RAND, TIES and AMAX under a
    /// static scale; ZERO and TAIL too for a dynamic one; UB too with a
    /// `scale_ub`. NAN only when named.
    pub fn default_arms(&self) -> Vec<ScaledArm> {
        ScaledArm::ALL
            .into_iter()
            .filter(|a| match (a, self.source) {
                (ScaledArm::Nan, _) => false,
                (ScaledArm::Zero | ScaledArm::Tail | ScaledArm::Ub, ScaleSource::Static(_)) => {
                    false
                }
                (ScaledArm::Ub, ScaleSource::Dynamic { scale_ub, .. }) => scale_ub.is_some(),
                _ => true,
            })
            .collect()
    }

    /// # Errors
    /// A zero dimension; a case over [`MAX_ELEMS`]; UB without a
    /// `scale_ub`.
    pub fn valid(&self) -> Result<(), String> {
        within_elems(self.m, self.k)?;
        if self.arm == ScaledArm::Ub
            && !matches!(
                self.source,
                ScaleSource::Dynamic {
                    scale_ub: Some(_),
                    ..
                }
            )
        {
            return Err("arm UB needs a dynamic scale with a scale_ub".into());
        }
        Ok(())
    }

    /// `x`, drawn from `seed` and the spec's source alone.
    ///
    /// # Errors
    /// As [`ScaledSpec::valid`].
    pub fn generate(&self) -> Result<Vec<f32>, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let (m, k) = (self.m, self.k);
        let mut x = vec![0f32; m * k];
        let static_s = match self.source {
            ScaleSource::Static(s) => Some(s),
            ScaleSource::Dynamic { .. } => None,
        };
        for row in x.chunks_mut(k) {
            let mag = 10f32.powf(6.0 * rng.f01() - 3.0);
            for v in row.iter_mut() {
                *v = rng.normal() * mag;
            }
        }
        let amax_of = |xs: &[f32]| xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        // A span is the tensor (per tensor) or a row (per token).
        let span = match self.granularity {
            Granularity::Tensor => m * k,
            Granularity::Token => k,
        };
        match self.arm {
            ScaledArm::Rand => {}
            ScaledArm::Zero => {
                let tensor_regime = (self.seed % 3) as usize;
                for (j, row) in x.chunks_mut(k).enumerate() {
                    let regime = match self.granularity {
                        Granularity::Tensor => tensor_regime,
                        Granularity::Token => j % 5,
                    };
                    let a = amax_of(row).max(f32::MIN_POSITIVE);
                    match regime {
                        0 => row.fill(0.0),
                        1 => row.iter_mut().for_each(|v| *v = *v / a * 1e-13),
                        2 => row.iter_mut().for_each(|v| *v = *v / a * 1e-4),
                        3 => {
                            let one = row[0];
                            row.fill(0.0);
                            row[rng.below(k)] = one;
                        }
                        _ => {}
                    }
                }
            }
            ScaledArm::Ties => {
                for sp in x.chunks_mut(span) {
                    // Of 16 inexact amaxes, the one whose scale's
                    // reciprocal is least exact (the two rules part most
                    // often there).
                    let e = rng.below(21) as i32 - 10;
                    let inexact = |a: f32| {
                        let s = a / E4M3_MAX;
                        (f64::from(1.0 / s) * f64::from(s) - 1.0).abs()
                    };
                    let mut amax = 0f32;
                    for i in 0..16 {
                        let odd = (2 * rng.below(1 << 10) + 1) as f32;
                        let a = 3.0 * 2f32.powi(e) * (1.0 + odd / 1_048_576.0);
                        if i == 0 || inexact(a) > inexact(amax) {
                            amax = a;
                        }
                    }
                    let s = static_s.unwrap_or(amax / E4M3_MAX);
                    let r = 1.0 / s;
                    // A point nudged d ulps from mid * s (kept finite and
                    // non-negative where an extreme static scale takes
                    // mid * s to 0 or infinity).
                    let at = |mid: f32, d: i32| {
                        let b = (mid * s).to_bits() as i32 + d;
                        f32::from_bits(b.clamp(0, 0x7F7F_FFFF) as u32)
                    };
                    let code = |v: f32| encode_e4m3(v, Overflow::SatFinite);
                    // Every place two rules can part: each of the 16 kinds
                    // of e4m3 midpoint (TIE_MIDS), nudged by up to 8 ulps.
                    // A power of two scales a normal-range point exactly,
                    // so these are all there are for this scale.
                    let parting: Vec<(usize, i32)> = (0..TIE_MIDS.len())
                        .flat_map(|i| (-8..=8).map(move |d| (i, d)))
                        .filter(|&(i, d)| {
                            let t = at(TIE_MIDS[i], d);
                            code(t / s) != code(t * r)
                        })
                        .collect();
                    for v in sp.iter_mut() {
                        // Half the elements (where the scale has any): a
                        // parting point, at a random binade where its
                        // midpoint is a normal one. The rest: a random
                        // midpoint nudged by up to one ulp.
                        let (i, d) = if !parting.is_empty() && rng.f01() < 0.5 {
                            parting[rng.below(parting.len())]
                        } else {
                            (rng.below(TIE_MIDS.len()), rng.below(3) as i32 - 1)
                        };
                        let binade = if i < 8 { rng.below(13) as i32 - 5 } else { 0 };
                        let t = at(TIE_MIDS[i] * 2f32.powi(binade), d);
                        *v = if rng.f01() < 0.5 { -t } else { t };
                    }
                    if static_s.is_none() {
                        sp[rng.below(sp.len())] = amax;
                    }
                }
            }
            ScaledArm::Amax => {
                for sp in x.chunks_mut(span) {
                    if let Some(s) = static_s {
                        // Half the elements beyond the saturation bound,
                        // and ±448 s itself.
                        for v in sp.iter_mut() {
                            let t = E4M3_MAX * s * (0.25 + 3.75 * rng.f01());
                            *v = if rng.f01() < 0.5 { -t } else { t };
                        }
                        let b = E4M3_MAX * s;
                        sp[rng.below(sp.len())] = b;
                        sp[rng.below(sp.len())] = -b;
                        continue;
                    }
                    let odd = (2 * rng.below(1 << 10) + 1) as f32;
                    let amax = amax_of(sp).max(1e-30) * 1.25 * (1.0 + odd / 1_048_576.0);
                    let negative_only = rng.f01() < 0.5;
                    if negative_only {
                        for v in sp.iter_mut() {
                            *v = v.abs().min(amax * 0.75);
                        }
                    }
                    sp[rng.below(sp.len())] = -amax;
                    if !negative_only && sp.len() > 1 {
                        // Another position than the negative one where it
                        // can be found.
                        let i = rng.below(sp.len());
                        if sp[i] != -amax {
                            sp[i] = amax;
                        }
                    }
                }
            }
            ScaledArm::Tail => {
                for (j, sp) in x.chunks_mut(span).enumerate() {
                    let n = sp.len();
                    // Per tensor (one span) the head where m is even: the
                    // tail where m is odd, the rows a tiled reduction leaves
                    // over (m = 17, 33: one past a tile of 16 or 32).
                    let at = if (j + usize::from(span == m * k && m % 2 == 0)) % 2 == 1 {
                        0
                    } else {
                        n - 1
                    };
                    let rest = sp
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != at)
                        .fold(0f32, |a, (_, v)| a.max(v.abs()))
                        .max(1e-3);
                    sp[at] = if rng.f01() < 0.5 { -2.0 } else { 2.0 } * rest;
                }
            }
            ScaledArm::Ub => {
                let ub = match self.source {
                    ScaleSource::Dynamic {
                        scale_ub: Some(ub), ..
                    } => ub,
                    _ => unreachable!("valid() requires a scale_ub"),
                };
                for (j, row) in x.chunks_mut(k).enumerate() {
                    let a = amax_of(row).max(f32::MIN_POSITIVE);
                    let target = if j % 2 == 0 {
                        ub * (1.5 + 6.5 * rng.f01())
                    } else {
                        ub * (0.1 + 0.8 * rng.f01())
                    };
                    row.iter_mut().for_each(|v| *v = *v / a * target);
                }
            }
            ScaledArm::Nan => {
                for (j, sp) in x.chunks_mut(span).enumerate() {
                    if self.granularity == Granularity::Token && j % 2 == 1 {
                        continue;
                    }
                    let n = sp.len();
                    for i in [0, n - 1, rng.below(n)] {
                        sp[i] = if rng.f01() < 0.5 { -f32::NAN } else { f32::NAN };
                    }
                }
            }
        }
        Ok(x)
    }
}

/// The oracle's codes and scales for `x` under `rule` and the spec's
/// source, with the floor `min_scale` replaced by `min_scale` where given
/// (identification tries other floors on the same case).
///
/// # Errors
/// As [`ScaledSpec::valid`], and the oracle's argument errors.
pub fn scaled_reference(
    spec: &ScaledSpec,
    x: &[f32],
    rule: ScaledRule,
    source: ScaleSource,
) -> Result<(Vec<u8>, Vec<f32>), String> {
    spec.valid()?;
    let mut q = vec![0u8; x.len()];
    let mut s = vec![0f32; spec.scales()];
    quantize_scaled(x, spec.k, spec.granularity, rule, source, &mut q, &mut s)
        .map_err(|e| e.to_string())?;
    Ok((q, s))
}

/// The (rule, source) pairs a check names when an output matches them:
/// under a static scale, `divide` and `reciprocal`; under a dynamic one
/// (the spec's `scale_ub`), every [`ScaledRule`] at vLLM's
/// `min_scaling_factor`, and `divide` and `reciprocal` with no floor
/// (vLLM's per-tensor CUDA kernel).
pub fn scaled_known(source: ScaleSource) -> Vec<(ScaledRule, ScaleSource)> {
    match source {
        ScaleSource::Static(_) => vec![
            (ScaledRule::Divide, source),
            (ScaledRule::Reciprocal, source),
        ],
        ScaleSource::Dynamic { scale_ub, .. } => {
            let at = |min_scale| ScaleSource::Dynamic {
                min_scale,
                scale_ub,
            };
            let mut v: Vec<_> = ScaledRule::ALL
                .into_iter()
                .map(|r| (r, at(MIN_SCALING_FACTOR)))
                .collect();
            v.push((ScaledRule::Divide, at(0.0)));
            v.push((ScaledRule::Reciprocal, at(0.0)));
            v
        }
    }
}

/// Whether the oracle's NaN semantics (vLLM's CUDA kernels') are the
/// rule's: `divide` and `reciprocal`. The torch forms propagate NaN
/// (`Tensor.max`, `Tensor.clamp`), which the oracle does not model, so
/// the NAN arm takes these two alone.
pub fn nan_rule(rule: ScaledRule) -> bool {
    matches!(rule, ScaledRule::Divide | ScaledRule::Reciprocal)
}

/// The known (rule, source) pairs ([`scaled_known`]) whose output equals
/// `q` and `s` bit for bit (on the NAN arm, of [`nan_rule`]s only).
pub fn scaled_identify(
    spec: &ScaledSpec,
    x: &[f32],
    q: &[u8],
    s: &[f32],
) -> Vec<(ScaledRule, ScaleSource)> {
    scaled_known(spec.source)
        .into_iter()
        .filter(|&(rule, _)| spec.arm != ScaledArm::Nan || nan_rule(rule))
        .filter(|&(rule, source)| {
            scaled_reference(spec, x, rule, source)
                .map(|want| Verdict::judge_codes(spec.k, q, s, &want).pass())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(m: usize, k: usize, arm: Arm) -> Spec {
        Spec {
            m,
            k,
            group: 128,
            arm,
            seed: Spec::base_seed(m, k, 128, arm),
        }
    }

    /// RAND puts each row's last group's amax (a partial group's tail
    /// included) at its last element alone, and half the other groups'
    /// too: a scale from an amax loop without its remainder is smaller.
    #[test]
    fn rand_puts_the_last_groups_amax_at_its_last_element() {
        let (mut tails, mut groups) = (0, 0);
        for (m, k) in [(5, 203), (1, 7168), (3, 130), (2, 128)] {
            let sp = spec(m, k, Arm::Rand);
            let x = sp.generate().unwrap();
            for row in x.chunks(k) {
                let n = row.chunks(128).count();
                for (gi, grp) in row.chunks(128).enumerate() {
                    groups += 1;
                    let last = grp[grp.len() - 1].abs();
                    let rest = grp[..grp.len() - 1]
                        .iter()
                        .fold(0f32, |a, v| a.max(v.abs()));
                    if grp.len() > 1 && last > rest {
                        tails += 1;
                    } else {
                        assert!(gi + 1 < n || grp.len() == 1, "({m}, {k}): row's last group");
                    }
                }
            }
        }
        assert!(tails * 2 >= groups, "{tails} of {groups}");
    }

    /// Each arm separates the rules it is aimed at: ZERO tells v2 from a
    /// floor and one floor from another, TIES a multiply from a division,
    /// POW2 UE8M0 from the plain division.
    #[test]
    fn each_arm_separates_the_rules_it_aims_at() {
        let differ = |arm: Arm, a: GroupScale, b: GroupScale| {
            let sp = spec(16, 1024, arm);
            let x = sp.generate().unwrap();
            let wa = reference(&sp, &x, a).unwrap();
            let wb = reference(&sp, &x, b).unwrap();
            !Verdict::judge(&sp, &wa.0, &wa.1, &wb).pass()
        };
        let v2 = GroupScale::V2;
        let (d10, d4) = (
            GroupScale::Divide { eps: 1e-10 },
            GroupScale::Divide { eps: 1e-4 },
        );
        let u10 = GroupScale::Ue8m0 {
            eps: 1e-10,
            ceil: Ue8m0Ceil::Log2f,
        };
        assert!(differ(Arm::Zero, v2, d10));
        assert!(differ(Arm::Zero, d10, d4));
        assert!(differ(Arm::Ties, v2, d10));
        assert!(differ(Arm::Pow2, d10, u10));
        assert!(differ(Arm::Rand, d10, u10));
        // torch's scalar division (a multiply by fl(1/448)) parts from
        // the IEEE division on RAND's scales already.
        assert!(differ(
            Arm::Rand,
            d10,
            GroupScale::Reciprocal { eps: 1e-10 }
        ));
        // And RAND alone cannot tell a multiply from a division: the
        // arms above are needed.
        let sp = spec(16, 1024, Arm::Ties);
        let x = sp.generate().unwrap();
        let w = reference(&sp, &x, v2).unwrap();
        let mut ids = identify(&sp, &x, &w.0, &w.1);
        assert_eq!(ids, vec![v2]);
        let w = reference(&sp, &x, d10).unwrap();
        ids = identify(&sp, &x, &w.0, &w.1);
        assert!(ids.contains(&d10) && !ids.contains(&v2), "{ids:?}");
    }

    /// POW2 reaches its kinds at their designed rates: every group's
    /// `amax / 448` is bit for bit the scale its kind draws (1 to 3 ulps
    /// from `2^e`, `e` in [`POW2_EXP`]); the `log2f` and exact ceilings
    /// part on exactly the parting half of the groups (`t % 4` of 0 or
    /// 2), with `u = 1`, 2 and 3 each among them, and agree on the rest.
    #[test]
    fn the_pow2_arm_parts_the_ceilings_at_its_designed_rate() {
        let sp = spec(64, 4096, Arm::Pow2);
        let x = sp.generate().unwrap();
        let mut count = [0usize; 4];
        let mut us = [0usize; 4];
        for (t, grp) in x.chunks(128).enumerate() {
            let amax = grp.iter().fold(0f32, |a, v| a.max(v.abs()));
            let s = amax / E4M3_MAX;
            let kind = Pow2Kind::of_group(t);
            // The nearest power of two and the ulps from it.
            let e = (f64::from(s).log2().round()) as i32;
            let p = 2f32.powi(e);
            let u = s.to_bits() as i64 - p.to_bits() as i64;
            assert!((POW2_EXP.0..=POW2_EXP.1).contains(&e), "{t}: {s:e}");
            let parts = ceil_log2f(s) != ceil_log2(s);
            assert_eq!(parts, kind == Pow2Kind::Parting, "{t}: {s:e}");
            match kind {
                Pow2Kind::Power => assert_eq!(u, 0),
                Pow2Kind::Below => assert!((-3..=-1).contains(&u), "{t}: {u}"),
                _ => assert!((1..=3).contains(&u), "{t}: {u}"),
            }
            if parts {
                us[u as usize] += 1;
            }
            count[kind as usize] += 1;
        }
        assert_eq!(count, [1024, 256, 256, 512]);
        assert!(us[1..].iter().all(|&n| n > 250), "{us:?}");
        assert_eq!(Pow2Kind::of_group(0), Pow2Kind::Parting);
    }

    /// The two UE8M0 ceilings part on POW2 at every shape (a single group
    /// included) and at both field floors, and on no other arm.
    #[test]
    fn only_pow2_tells_the_ue8m0_ceilings_apart() {
        for eps in [1e-10, 1e-4] {
            let [log2f, exact] = Ue8m0Ceil::ALL.map(|ceil| GroupScale::Ue8m0 { eps, ceil });
            for (m, k) in [(1, 128), (5, 203), (1, 7168), (16, 7168), (64, 4096)] {
                for arm in Arm::ALL {
                    let sp = spec(m, k, arm);
                    let x = sp.generate().unwrap();
                    let wl = reference(&sp, &x, log2f).unwrap();
                    let wx = reference(&sp, &x, exact).unwrap();
                    let parts = !Verdict::judge(&sp, &wl.0, &wl.1, &wx).pass();
                    assert_eq!(parts, arm == Arm::Pow2, "{eps} {m},{k} {arm:?}");
                    if arm == Arm::Pow2 {
                        // POW2's amaxes are far above both floors: each
                        // ceiling is named at both, the other at neither.
                        for (w, rule) in [(&wl, log2f), (&wx, exact)] {
                            let GroupScale::Ue8m0 { ceil, .. } = rule else {
                                unreachable!()
                            };
                            let ids = identify(&sp, &x, &w.0, &w.1);
                            let want: Vec<GroupScale> = [1e-10, 1e-4]
                                .map(|eps| GroupScale::Ue8m0 { eps, ceil })
                                .to_vec();
                            assert_eq!(ids, want, "{m},{k}");
                        }
                    }
                }
            }
        }
        assert_eq!(rule_label(&KNOWN[7]), "ue8m0_exact(eps=1e-4)");
        assert_eq!(rule_label(&KNOWN[4]), "ue8m0(eps=1e-10)");
    }

    /// `pow2_amax` finds, for every scale 3 ulps around every power of two
    /// in range, an amax dividing to it under both maxima, and one that
    /// multiplies to it by torch's reciprocal too for every scale at or
    /// above a power of two (`fl(1/448)` is `(1/448)(1 + 0.75 2^-24)`, so
    /// below a power, where ulps are half as wide, not always).
    #[test]
    fn pow2_amax_hits_every_target() {
        let mut both = [[0usize; 2]; 2];
        for e in POW2_EXP.0..=POW2_EXP.1 {
            for u in -3..=3 {
                let target = ulps_from_pow2(e, u);
                assert_eq!(
                    target.to_bits() as i64 - 2f32.powi(e).to_bits() as i64,
                    i64::from(u)
                );
                for (i, max) in [E4M3_MAX, 127.0].into_iter().enumerate() {
                    let a = pow2_amax(target, max, Some(1.0 / max)).unwrap();
                    assert_eq!(a / max, target);
                    let hit = a * (1.0 / max) == target;
                    assert!(hit || u < 0, "{max} 2^{e} {u}");
                    both[i][usize::from(u < 0)] += usize::from(hit);
                }
            }
        }
        // 41 exponents, 4 offsets at or above and 3 below each.
        assert_eq!((both[0][0], both[1][0]), (164, 164));
        // Below: two thirds under fl(1/448) (82 of 123), every one under
        // fl(1/127) (`(1/127)(1 - 2^-28)`).
        assert_eq!((both[0][1], both[1][1]), (82, 123));
        assert_eq!(pow2_amax(f32::MAX, 448.0, None), None);
    }

    /// ZERO's four regimes at one group in four each.
    #[test]
    fn the_zero_arm_draws_its_regimes_at_their_rates() {
        let sp = spec(64, 2048, Arm::Zero);
        let x = sp.generate().unwrap();
        let groups: Vec<&[f32]> = x.chunks(128).collect();
        let n = groups.len() as f64;
        let share = |f: &dyn Fn(&[f32]) -> bool| groups.iter().filter(|g| f(g)).count() as f64 / n;
        let amax = |g: &[f32]| g.iter().fold(0f32, |a, v| a.max(v.abs()));
        let near = |got: f64| (got - 0.25).abs() < 0.06;
        assert!(near(share(&|g| amax(g) == 0.0)));
        assert!(near(share(&|g| amax(g) > 0.0 && amax(g) < 1e-10)));
        assert!(near(share(
            &|g| g.iter().filter(|v| **v != 0.0).count() == 1
        )));
    }

    #[test]
    fn the_judge_counts_and_places_differences() {
        let sp = spec(3, 300, Arm::Rand);
        let x = sp.generate().unwrap();
        let want = reference(&sp, &x, GroupScale::V2).unwrap();
        let (mut q, mut s) = want.clone();
        assert!(Verdict::judge(&sp, &q, &s, &want).pass());
        q[301] ^= 1;
        s[4] = f32::from_bits(s[4].to_bits() + 2);
        let v = Verdict::judge(&sp, &q, &s, &want);
        assert_eq!((v.codes.1, v.scales.n - v.scales.identical), (1, 1));
        assert_eq!(v.first_code.unwrap().0, 1);
        assert_eq!(v.first_code.unwrap().1, 1);
        assert_eq!(v.scales.first_diff.unwrap().0, 4);
        assert_eq!((v.max_code_steps, v.scales.max_ulp), (1, 2));
        assert!(spec(0, 1, Arm::Rand).generate().is_err());
        assert!(Spec { group: 0, ..sp }.generate().is_err());
        assert_eq!(Arm::parse("ties"), Ok(Arm::Ties));
    }

    fn scaled(
        m: usize,
        k: usize,
        g: Granularity,
        source: ScaleSource,
        arm: ScaledArm,
    ) -> ScaledSpec {
        ScaledSpec {
            m,
            k,
            granularity: g,
            source,
            arm,
            seed: ScaledSpec::base_seed(m, k, g, arm),
        }
    }

    fn dynamic(min_scale: f32, scale_ub: Option<f32>) -> ScaleSource {
        ScaleSource::Dynamic {
            min_scale,
            scale_ub,
        }
    }

    /// Whether two (rule, source) pairs give different bits on a case.
    fn parts(sp: &ScaledSpec, a: (ScaledRule, ScaleSource), b: (ScaledRule, ScaleSource)) -> bool {
        let x = sp.generate().unwrap();
        let wa = scaled_reference(sp, &x, a.0, a.1).unwrap();
        let wb = scaled_reference(sp, &x, b.0, b.1).unwrap();
        !Verdict::judge_codes(sp.k, &wa.0, &wa.1, &wb).pass()
    }

    /// TIES parts a division from a multiply by the reciprocal, static and
    /// dynamic, per tensor and per token, at every default shape.
    #[test]
    fn the_ties_arm_parts_divide_from_reciprocal() {
        let (d, r) = (ScaledRule::Divide, ScaledRule::Reciprocal);
        for &(m, k) in &SCALED_SHAPES {
            for (g, src) in [
                (Granularity::Tensor, ScaleSource::Static(0.3)),
                (Granularity::Tensor, dynamic(MIN_SCALING_FACTOR, None)),
                (Granularity::Token, dynamic(MIN_SCALING_FACTOR, None)),
            ] {
                let sp = scaled(m, k, g, src, ScaledArm::Ties);
                // One element has too few ties to part them reliably.
                if m * k >= 100 {
                    assert!(parts(&sp, (d, src), (r, src)), "{sp:?}");
                }
            }
        }
        // Per tensor, the scale is one f32: torch's fl(1/448) multiply
        // parts from the division on TIES's inexact amax.
        let src = dynamic(MIN_SCALING_FACTOR, None);
        let sp = scaled(8, 4096, Granularity::Tensor, src, ScaledArm::Ties);
        assert!(parts(&sp, (d, src), (ScaledRule::TorchDivide, src)));
    }

    /// ZERO parts a floor from none at every shape (per token: row 0 is
    /// all zero) and, per tensor, draws each of its three regimes over
    /// the default shapes.
    #[test]
    fn the_zero_arm_needs_the_floor_and_draws_its_regimes() {
        let r = ScaledRule::Reciprocal;
        let mut regimes = [false; 3];
        for &(m, k) in &SCALED_SHAPES {
            for g in [Granularity::Tensor, Granularity::Token] {
                let sp = scaled(m, k, g, dynamic(MIN_SCALING_FACTOR, None), ScaledArm::Zero);
                let x = sp.generate().unwrap();
                let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
                if g == Granularity::Tensor {
                    regimes[(sp.seed % 3) as usize] = true;
                    assert!(amax < 2e-3, "{sp:?}: amax {amax}");
                } else {
                    assert!(x[..k].iter().all(|&v| v == 0.0));
                }
                assert!(
                    parts(&sp, (r, sp.source), (r, dynamic(0.0, None))),
                    "{sp:?}"
                );
            }
        }
        assert_eq!(regimes, [true; 3]);
    }

    /// TAIL: the amax is an end element alone (the last, or the first of
    /// odd rows and of a tensor of even `m`), so dropping it changes the
    /// scale (per tensor: of the whole tensor; per token: of every row).
    #[test]
    fn the_tail_arm_puts_the_amax_at_an_end() {
        let d = ScaledRule::Divide;
        let (mut heads, mut tails) = (0, 0);
        for &(m, k) in &SCALED_SHAPES {
            for g in [Granularity::Tensor, Granularity::Token] {
                let sp = scaled(m, k, g, dynamic(MIN_SCALING_FACTOR, None), ScaledArm::Tail);
                let mut x = sp.generate().unwrap();
                let want = scaled_reference(&sp, &x, d, sp.source).unwrap();
                let end = |j: usize, span: usize, head: bool| {
                    if head {
                        j * span
                    } else {
                        (j + 1) * span - 1
                    }
                };
                let last: Vec<usize> = match g {
                    Granularity::Tensor => vec![end(0, m * k, m % 2 == 0)],
                    Granularity::Token => (0..m).map(|j| end(j, k, j % 2 == 1)).collect(),
                };
                for &i in &last {
                    if i % k == 0 && k > 1 {
                        heads += 1;
                    } else {
                        tails += 1;
                    }
                }
                for i in last {
                    x[i] = 0.0;
                }
                let short = scaled_reference(&sp, &x, d, sp.source).unwrap();
                assert!(want.1.iter().zip(&short.1).all(|(a, b)| a > b), "{sp:?}");
            }
        }
        assert!(
            heads * 4 >= tails && tails * 4 >= heads,
            "{heads} heads, {tails} tails"
        );
    }

    /// AMAX: each span's amax codes to ±448 (and, in half the spans, only
    /// the negative one is there); under a static scale, elements beyond
    /// the saturation bound.
    #[test]
    fn the_amax_arm_codes_448_and_saturates_static_scales() {
        let mut negative_only = 0;
        for &(m, k) in &SCALED_SHAPES {
            let sp = scaled(
                m,
                k,
                Granularity::Token,
                dynamic(MIN_SCALING_FACTOR, None),
                ScaledArm::Amax,
            );
            let x = sp.generate().unwrap();
            for rule in ScaledRule::ALL {
                let (q, _) = scaled_reference(&sp, &x, rule, sp.source).unwrap();
                for j in 0..m {
                    let row = &x[j * k..(j + 1) * k];
                    let a = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                    for (c, &v) in q[j * k..(j + 1) * k].iter().zip(row) {
                        if v.abs() == a {
                            assert_eq!(*c, if v < 0.0 { 0xFE } else { 0x7E }, "{rule:?}");
                        }
                    }
                    if rule == ScaledRule::Divide && row.iter().fold(f32::MIN, |a, &v| a.max(v)) < a
                    {
                        negative_only += 1;
                    }
                }
            }
            let s = 0.0173f32;
            let sp = scaled(
                m,
                k,
                Granularity::Tensor,
                ScaleSource::Static(s),
                ScaledArm::Amax,
            );
            let x = sp.generate().unwrap();
            let beyond = x.iter().filter(|v| (*v / s).abs() >= 465.0).count();
            assert!(beyond * 3 >= x.len() / 2 || x.len() < 8, "{sp:?}: {beyond}");
        }
        assert!(negative_only >= 10, "{negative_only}");
    }

    /// UB: the bound decides the even rows' scales; without a bound the
    /// arm is refused.
    #[test]
    fn the_ub_arm_needs_and_exercises_the_bound() {
        let with = dynamic(MIN_SCALING_FACTOR, Some(2.5));
        let d = ScaledRule::Divide;
        for &(m, k) in &SCALED_SHAPES {
            let sp = scaled(m, k, Granularity::Token, with, ScaledArm::Ub);
            assert!(parts(
                &sp,
                (d, with),
                (d, dynamic(MIN_SCALING_FACTOR, None))
            ));
            let x = sp.generate().unwrap();
            let (_, s) = scaled_reference(&sp, &x, d, with).unwrap();
            assert_eq!(s[0], 2.5 / 448.0);
        }
        let sp = scaled(2, 7, Granularity::Token, dynamic(0.0, None), ScaledArm::Ub);
        assert!(sp.generate().is_err());
        assert_eq!(
            sp.default_arms().len(),
            5,
            "no UB by default without a bound"
        );
        assert_eq!(
            scaled(2, 7, Granularity::Token, with, ScaledArm::Ub)
                .default_arms()
                .len(),
            6
        );
        assert_eq!(
            scaled(
                2,
                7,
                Granularity::Tensor,
                ScaleSource::Static(1.0),
                ScaledArm::Rand
            )
            .default_arms(),
            vec![ScaledArm::Rand, ScaledArm::Ties, ScaledArm::Amax]
        );
    }

    /// Each arm reaches its designed cases at its designed rate over the
    /// default shapes: TIES parts about half the elements (dynamic scales,
    /// and a static scale with parting points; none for one without),
    /// AMAX's amax is negative-only in about half the spans and, under a
    /// static scale, about 79% of elements lie beyond `464 s`; ZERO cycles
    /// its five row regimes; UB puts every even row above the bound and
    /// every odd one below.
    #[test]
    fn the_arms_reach_their_designed_rates() {
        let dyn_src = dynamic(MIN_SCALING_FACTOR, None);
        let (d, r) = (ScaledRule::Divide, ScaledRule::Reciprocal);
        let mut rows = [0usize; 4];
        for &(m, k) in &SCALED_SHAPES {
            let big = m * k >= 100;
            for (g, src, lo, hi) in [
                (Granularity::Tensor, dyn_src, 0.45, 0.7),
                (Granularity::Token, dyn_src, 0.45, 0.7),
                (Granularity::Tensor, ScaleSource::Static(0.3), 0.45, 0.7),
                (Granularity::Tensor, ScaleSource::Static(0.0173), 0.0, 0.0),
                (Granularity::Tensor, ScaleSource::Static(0.5), 0.0, 0.0),
            ] {
                let sp = scaled(m, k, g, src, ScaledArm::Ties);
                let x = sp.generate().unwrap();
                let a = scaled_reference(&sp, &x, d, src).unwrap().0;
                let b = scaled_reference(&sp, &x, r, src).unwrap().0;
                let parted = a.iter().zip(&b).filter(|(p, q)| p != q).count();
                let rate = parted as f64 / (m * k) as f64;
                if big || hi == 0.0 {
                    assert!((lo..=hi).contains(&rate), "{sp:?}: TIES parts {rate}");
                }
            }
            // AMAX per token: negative-only rows; static: beyond 464 s.
            let sp = scaled(m, k, Granularity::Token, dyn_src, ScaledArm::Amax);
            let x = sp.generate().unwrap();
            for row in x.chunks(k) {
                let a = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                rows[0] += 1;
                rows[1] += usize::from(row.iter().all(|&v| v < a));
            }
            let s = 0.3f32;
            let sp = scaled(
                m,
                k,
                Granularity::Tensor,
                ScaleSource::Static(s),
                ScaledArm::Amax,
            );
            let x = sp.generate().unwrap();
            rows[2] += x.len();
            rows[3] += x.iter().filter(|v| (*v / s).abs() > 464.0).count();
            // ZERO per token: row j in regime j % 5.
            let sp = scaled(m, k, Granularity::Token, dyn_src, ScaledArm::Zero);
            let x = sp.generate().unwrap();
            for (j, row) in x.chunks(k).enumerate() {
                let a = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                let nonzero = row.iter().filter(|&&v| v != 0.0).count();
                match j % 5 {
                    0 => assert_eq!(a, 0.0),
                    1 => assert!(a > 0.0 && a < 1e-12, "{sp:?} row {j}: {a}"),
                    2 => assert!(a > 0.5e-4 && a < MIN_SCALING_FACTOR * 448.0 / 4.0),
                    3 => assert!(nonzero <= 1),
                    _ => assert!(a > 1e-4 && nonzero == k),
                }
            }
            // UB: even rows above the bound, odd rows below.
            let ub = 2.5f32;
            let sp = scaled(
                m,
                k,
                Granularity::Token,
                dynamic(MIN_SCALING_FACTOR, Some(ub)),
                ScaledArm::Ub,
            );
            let x = sp.generate().unwrap();
            for (j, row) in x.chunks(k).enumerate() {
                let a = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                if j % 2 == 0 {
                    assert!(a >= 1.49 * ub && a <= 8.01 * ub, "{sp:?} row {j}: {a}");
                } else {
                    assert!(a <= 0.91 * ub, "{sp:?} row {j}: {a}");
                }
            }
        }
        let negative_only = rows[1] as f64 / rows[0] as f64;
        assert!(
            (0.35..=0.65).contains(&negative_only),
            "AMAX negative-only rows: {negative_only}"
        );
        let beyond = rows[3] as f64 / rows[2] as f64;
        assert!(
            (0.74..=0.84).contains(&beyond),
            "static AMAX beyond 464 s: {beyond}"
        );
    }

    /// NAN: NaN at each span's first and last element (per token, even
    /// rows only), skipped by the amax and coded +448 under `divide` and
    /// `reciprocal`; not a default arm.
    #[test]
    fn the_nan_arm_places_nans_the_amax_skips() {
        let src = dynamic(MIN_SCALING_FACTOR, None);
        for &(m, k) in &SCALED_SHAPES {
            for g in [Granularity::Tensor, Granularity::Token] {
                let sp = scaled(m, k, g, src, ScaledArm::Nan);
                let x = sp.generate().unwrap();
                let span = if g == Granularity::Tensor { m * k } else { k };
                for (j, xs) in x.chunks(span).enumerate() {
                    let nan = g == Granularity::Tensor || j % 2 == 0;
                    assert_eq!(xs[0].is_nan() && xs[span - 1].is_nan(), nan, "{sp:?}");
                    assert!(nan || xs.iter().all(|v| v.is_finite()));
                }
                let finite: Vec<f32> = x
                    .iter()
                    .map(|&v| if v.is_nan() { 0.0 } else { v })
                    .collect();
                for rule in [ScaledRule::Divide, ScaledRule::Reciprocal] {
                    let (q, s) = scaled_reference(&sp, &x, rule, src).unwrap();
                    let (_, s_finite) = scaled_reference(&sp, &finite, rule, src).unwrap();
                    assert_eq!(s, s_finite, "{sp:?}: the amax skips NaN");
                    for (c, v) in q.iter().zip(&x) {
                        assert!(!v.is_nan() || *c == 0x7E);
                    }
                }
                assert!(!sp.default_arms().contains(&ScaledArm::Nan));
            }
        }
    }

    /// Every arm draws finite elements, even under extreme static scales
    /// (TIES nudges `mid * s` by ulps: at 0 or infinity that would wrap to
    /// NaN).
    #[test]
    fn extreme_static_scales_draw_finite_elements() {
        // (AMAX draws up to 4 * 448 s, past f32's range beyond 3e38.)
        for s in [1e-44f32, 1e-30, 1e30, 3e38] {
            for arm in [ScaledArm::Rand, ScaledArm::Ties, ScaledArm::Amax] {
                if arm == ScaledArm::Amax && s > 1e35 {
                    continue;
                }
                let sp = scaled(3, 129, Granularity::Tensor, ScaleSource::Static(s), arm);
                let x = sp.generate().unwrap();
                assert!(x.iter().all(|v| v.is_finite()), "{sp:?}");
            }
        }
    }

    /// Identification names each rule's own output, and the labels show a
    /// floor only where it is not vLLM's.
    #[test]
    fn scaled_identify_names_each_rule() {
        let src = dynamic(MIN_SCALING_FACTOR, None);
        let sp = scaled(8, 4096, Granularity::Token, src, ScaledArm::Ties);
        let x = sp.generate().unwrap();
        for rule in ScaledRule::ALL {
            let (q, s) = scaled_reference(&sp, &x, rule, src).unwrap();
            let ids = scaled_identify(&sp, &x, &q, &s);
            assert!(ids.contains(&(rule, src)), "{rule:?}: {ids:?}");
        }
        assert_eq!(
            scaled_label(ScaledRule::Reciprocal, dynamic(0.0, None)),
            "reciprocal(min_scale=0e0)"
        );
        assert_eq!(scaled_label(ScaledRule::Divide, src), "divide");
        assert_eq!(ScaledArm::parse("tail"), Ok(ScaledArm::Tail));
    }
}
