//! Cases for judging an INT8 activation quantizer (vLLM's
//! `scaled_int8_quant`: static or dynamic per token, symmetric or with a
//! zero point; the torch forms of the same arithmetic) bit for bit under
//! the rule it declares ([`oracle::int8_quant::Int8Rule`]), and for naming
//! the known rules its output matches.
//!
//! A case: `x` `[m][k]` values of its dtype (float32, bfloat16 or float16,
//! held as f32: the kernel's conversion to f32 is exact); the outputs `q`
//! `[m][k]` int8 codes, `s` (1 f32 static, `m` dynamic) and, asymmetric,
//! `azp` (int32, as `s`). Rows whose maximum equals their minimum are
//! outside the asymmetric contract (`I8Q-FLAT`): no arm draws one.

use crate::elementwise::Part;
use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::int8_quant::{
    cvt_rni_sat_s32, quantize_int8, Codes, Int8Rule, Int8Scale, Range, Rounding,
};

/// The largest case a check draws, in elements (the FP8 quantizers' cap).
pub use crate::fp8_quant::MAX_ELEMS;

/// The data an int8 case draws, each arm aimed at a choice that separates
/// rules, or at one classic bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Arm {
    /// Normal elements, each row at its own magnitude (10^-3 to 10^3;
    /// under a static scale, `x / scale` with a deviation of 13 to 126 about
    /// `-azp`), asymmetric rows about a random offset, each straddling
    /// zero (ZERO's tiny rows and TAIL's rows are drawn from these).
    Rand,
    /// Rounding ties. Dynamic: rows alternate between an exact kind, with
    /// amax `127 * 2^e` (asymmetric: `max - min = 255 * 2^e`, `min =
    /// -(128 + j + 1/2) 2^e`, so the zero point's argument is the tie `j +
    /// 1/2`) and elements `(k + 1/2) 2^e`, every one a tie under both
    /// rules (`roundf` takes each away from zero); and a parting kind,
    /// with an inexact scale (of 8 drawn, the one with the most parting
    /// points) and half the elements where `x / s` and `x * fl(1/s)` (or
    /// `fl(127/amax)`) code apart, a quarter exactly midpoints under both
    /// (where the dtype has any), the rest within 3 steps of the dtype of
    /// a midpoint. Even rows are exact, odd rows parting (so a one-row case
    /// is exact); every exact row holds a tie that `roundf` rounds apart
    /// (and, asymmetric, its zero point's argument is one). Static: a third of the elements where `x / scale` is
    /// exactly a midpoint (and in every row one that `roundf` rounds
    /// apart), a third where the rules part (where the scale has any: a
    /// power of two has none), the rest near midpoints.
    Ties,
    /// Dynamic: rows cycling through all zero (asymmetric: one positive
    /// element, the rest zero), tiny (amax `2^-129` to `2^-122`, under
    /// `127 / FLT_MAX`, where `127 / amax` is infinite: `I8Q-TINY`; in
    /// float16 its subnormals), one non-zero element, normal.
    Zero,
    /// Static: `x / scale + azp` spread over `[-250, 250]` with the points
    /// `±127.5`, `-128.5`, `128.5` themselves, so codes saturate at -128
    /// and 127 (a clamp to `[-127, 127]`, or a zero point added with an
    /// int8 wrap instead of saturation, fails).
    Sat,
    /// Dynamic: one-signed rows, even rows all negative, odd rows all
    /// positive (`|x|` from 5% to 100% of the row's bound). A maximum
    /// started at `FLT_MIN` (vLLM's `dynamic_scaled_int8_azp_quant_kernel`
    /// before PR #19233) or a signed max for the amax fails on the negative
    /// rows; a minimum started at 0 on the positive ones.
    Sign,
    /// Dynamic: the row's extreme at its very last element (symmetric:
    /// twice the rest's amax; asymmetric: even rows a new maximum, odd rows
    /// a new minimum, beyond the rest by its range), so a reduction that
    /// drops its remainder (vLLM vectorizes by 16) or its last element
    /// finds another scale.
    Tail,
    /// RAND's rows with NaN elements (`I8Q-NAN`): at column 1 and the
    /// last, and one more within when `k >= 8` (rows of fewer than 4
    /// elements keep theirs, so an asymmetric row keeps two finite ones).
    /// vLLM's reductions (`fmaxf`, `fminf`) skip a NaN and its code is
    /// `cvt(NaN) = 0` (plus the zero point); a torch `amax` or `max`
    /// propagates it into the scale. Only when named: the field's
    /// quantizers differ here and no rule of the contract's is at stake
    /// but this one.
    Nan,
}

impl Int8Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Int8Arm; 7] = [
        Int8Arm::Rand,
        Int8Arm::Ties,
        Int8Arm::Zero,
        Int8Arm::Sat,
        Int8Arm::Sign,
        Int8Arm::Tail,
        Int8Arm::Nan,
    ];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Int8Arm::Rand => "RAND",
            Int8Arm::Ties => "TIES",
            Int8Arm::Zero => "ZERO",
            Int8Arm::Sat => "SAT",
            Int8Arm::Sign => "SIGN",
            Int8Arm::Tail => "TAIL",
            Int8Arm::Nan => "NAN",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Int8Arm, String> {
        crate::names::parse_named("arm", s, &Int8Arm::ALL, Int8Arm::name, true)
    }

    /// Whether the arm applies to `source`: SAT static only; ZERO, SIGN
    /// and TAIL dynamic only; RAND, TIES and NAN both.
    pub fn applies(self, source: Int8Scale) -> bool {
        let dynamic = matches!(source, Int8Scale::Dynamic { .. });
        match self {
            Int8Arm::Rand | Int8Arm::Ties | Int8Arm::Nan => true,
            Int8Arm::Sat => !dynamic,
            Int8Arm::Zero | Int8Arm::Sign | Int8Arm::Tail => dynamic,
        }
    }
}

/// The shapes `(m, k)` a check runs by default: ragged hidden sizes
/// first (7 < 16: all remainder; 129 = 8 * 16 + 1; 1003; 2049 > 1024, a
/// block of 1024 threads striding twice), one row and 33, then the model
/// widths 4096 (Llama-3 8B) and 5120 (Llama-2 13B, Qwen2.5 14B).
pub const INT8_SHAPES: [(usize, usize); 8] = [
    (1, 7),
    (33, 7),
    (3, 129),
    (17, 1003),
    (4, 2049),
    (1, 4096),
    (8, 4096),
    (16, 5120),
];

/// vLLM's rule for a source, as its kernels are since PR #19233 (June
/// 2025, "Vectorize static / dynamic INT8 quant kernels"): `divide` for
/// symmetric static (`static_scaled_int8_quant_kernel`'s `x / scale`),
/// `reciprocal` for every other kernel (symmetric dynamic `x * (127.0f /
/// absmax)`; the zero-point kernels `x * inv_s`, `inv_s = 1.0f / scale`).
/// Before that PR the zero-point kernels divided: declare `divide` for
/// them.
pub fn vllm_rule(source: Int8Scale) -> Int8Rule {
    match source {
        Int8Scale::Static {
            scale: _,
            azp: None,
        } => Int8Rule::new(Codes::Divide),
        _ => Int8Rule::new(Codes::Reciprocal),
    }
}

/// One int8 case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Int8Spec {
    /// Rows (tokens).
    pub m: usize,
    /// Columns (hidden size).
    pub k: usize,
    /// The input's element type.
    pub dtype: Dtype,
    /// Static or dynamic, symmetric or asymmetric.
    pub source: Int8Scale,
    /// The data.
    pub arm: Int8Arm,
    /// The data seed.
    pub seed: u64,
}

/// A quantizer's outputs (or the oracle's): codes `[m][k]`, scales and
/// zero points (empty when symmetric).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Int8Out {
    /// The codes.
    pub q: Vec<i8>,
    /// The scales.
    pub s: Vec<f32>,
    /// The zero points.
    pub azp: Vec<i32>,
}

/// `v` rounded to `d`, an overflow kept at the dtype's largest finite
/// value of its sign.
pub(crate) fn fin(d: Dtype, v: f32) -> f32 {
    let r = d.round(v);
    if r.is_finite() {
        r
    } else if r.is_nan() {
        0.0
    } else {
        let max = match d {
            Dtype::F32 => f32::MAX,
            Dtype::Bf16 => d.decode(0x7F7F),
            Dtype::F16 => d.decode(0x7BFF),
        };
        if r > 0.0 {
            max
        } else {
            -max
        }
    }
}

/// `2^e` as f32 (`-149 <= e <= 127`; through f64, where `2^-e` does not
/// overflow, as f32's `powi` does for `e < -127`).
pub(crate) fn pow2(e: i32) -> f32 {
    2f64.powi(e) as f32
}

/// The integer codes `x / s` and `x * r` give, before any zero point.
fn parts(v: f32, s: f32, r: f32) -> bool {
    cvt_rni_sat_s32(v / s) != cvt_rni_sat_s32(v * r)
}

/// Whether `y` is exactly an integer plus one half.
fn is_tie(y: f32) -> bool {
    y.is_finite() && y - y.floor() == 0.5
}

/// Whether `y` is a tie that ties to even and `roundf` round apart: `n +
/// 1/2` with `|n|`'s integer part even (`2.5`: 2 against 3; `1.5` gives 2
/// either way).
fn splits_roundf(y: f32) -> bool {
    is_tie(y) && (y.abs().floor() as i64) % 2 == 0
}

/// Points of `d` near the midpoints `(k + 1/2) s` for `k` in `ks` (each
/// rounded to `d`, then nudged up to `n` steps of `d`) within `[lo, hi]`:
/// the parting ones (`x / s` and `x * r` code apart), the ties of both
/// (`x / s` and `x * r` each exactly a midpoint) and all of them.
fn near_midpoints(
    d: Dtype,
    s: f32,
    r: f32,
    ks: std::ops::RangeInclusive<i32>,
    n: i32,
    lo: f32,
    hi: f32,
) -> Midpoints {
    let mut p = Midpoints::default();
    for k in ks {
        let t = fin(d, (k as f32 + 0.5) * s);
        for step in -n..=n {
            let v = fin(d, d.steps(t, step));
            if v >= lo && v <= hi {
                p.all.push(v);
                if parts(v, s, r) {
                    p.parting.push(v);
                }
                if is_tie(v / s) && is_tie(v * r) {
                    p.ties.push(v);
                }
            }
        }
    }
    p
}

/// The points [`near_midpoints`] finds.
#[derive(Clone, Debug, Default)]
struct Midpoints {
    parting: Vec<f32>,
    ties: Vec<f32>,
    all: Vec<f32>,
}

impl Midpoints {
    /// A parting point with probability 1/2, a tie of both rules with
    /// 1/4 (where there are any), else any point.
    fn draw(&self, rng: &mut Rng) -> f32 {
        let u = rng.f01();
        let pick = |v: &Vec<f32>, rng: &mut Rng| v[rng.below(v.len())];
        if u < 0.5 && !self.parting.is_empty() {
            pick(&self.parting, rng)
        } else if u < 0.75 && !self.ties.is_empty() {
            pick(&self.ties, rng)
        } else {
            pick(&self.all, rng)
        }
    }
}

impl Int8Spec {
    /// The default seed of a shape, dtype, source kind and arm.
    pub fn base_seed(m: usize, k: usize, dtype: Dtype, source: Int8Scale, arm: Int8Arm) -> u64 {
        let h = crate::rng::shape_hash(0x18A0_0000_0000_0000u64, &[m, k]);
        let di = Dtype::ALL.iter().position(|&x| x == dtype).unwrap_or(0) as u64;
        let st = u64::from(matches!(source, Int8Scale::Static { .. }));
        h ^ (di << 10)
            ^ (st << 9)
            ^ (u64::from(source.symmetric()) << 8)
            ^ Int8Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// Scales (and, asymmetric, zero points) written: 1 static, `m`
    /// dynamic.
    pub fn scales(&self) -> usize {
        self.source.scales(self.m)
    }

    /// Zero points written: as [`Int8Spec::scales`], none symmetric.
    pub fn azps(&self) -> usize {
        if self.source.symmetric() {
            0
        } else {
            self.scales()
        }
    }

    /// The arms a check runs by default: every arm that applies to the
    /// source but NAN, which runs only when named (static: RAND, TIES,
    /// SAT; dynamic: RAND, TIES, ZERO, SIGN, TAIL).
    pub fn default_arms(&self) -> Vec<Int8Arm> {
        Int8Arm::ALL
            .into_iter()
            .filter(|&a| a != Int8Arm::Nan && a.applies(self.source))
            .collect()
    }

    /// # Errors
    /// A zero dimension; a case over [`MAX_ELEMS`]; an arm that does not
    /// apply to the source; an asymmetric dynamic case with `k < 2`
    /// (every row flat: `I8Q-FLAT`); a static scale that is not finite
    /// and positive.
    pub fn valid(&self) -> Result<(), String> {
        crate::fp8_quant::within_elems(self.m, self.k)?;
        if !self.arm.applies(self.source) {
            return Err(format!(
                "arm {} applies to {} quantizers only",
                self.arm.name(),
                if self.arm == Int8Arm::Sat {
                    "static"
                } else {
                    "dynamic"
                }
            ));
        }
        match self.source {
            Int8Scale::Dynamic { symmetric: false } if self.k < 2 => Err(format!(
                "k={}: an asymmetric dynamic row needs at least 2 elements (a row with max == min is outside the contract)",
                self.k
            )),
            Int8Scale::Static { scale, .. } if !(scale.is_finite() && scale > 0.0) => {
                Err(format!("scale = {scale}: it must be finite and positive"))
            }
            _ => Ok(()),
        }
    }

    /// `x`, drawn from `seed`, the dtype and the source alone: every value
    /// one of the dtype's (finite).
    ///
    /// # Errors
    /// As [`Int8Spec::valid`].
    pub fn generate(&self) -> Result<Vec<f32>, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let (m, k, d) = (self.m, self.k, self.dtype);
        let symmetric = self.source.symmetric();
        let (static_s, z) = match self.source {
            Int8Scale::Static { scale, azp } => (Some(scale), azp.unwrap_or(0)),
            Int8Scale::Dynamic { .. } => (None, 0),
        };
        let mut x = vec![0f32; m * k];
        // RAND's rows: every arm starts from them.
        for row in x.chunks_mut(k) {
            if let Some(s) = static_s {
                let spread = 40.0 * 10f32.powf(rng.f01() - 0.5);
                for v in row.iter_mut() {
                    *v = (rng.normal() * spread - z as f32) * s;
                }
            } else {
                let mag = 10f32.powf(6.0 * rng.f01() - 3.0);
                let off = if symmetric {
                    0.0
                } else {
                    mag * (rng.f01() - 0.5)
                };
                for v in row.iter_mut() {
                    *v = rng.normal() * mag + off;
                }
                // An asymmetric row straddles zero (one-signed rows are
                // SIGN's), its elements but the last too (TAIL replaces
                // the last): else its first element changes sign.
                let head = &row[..if k >= 3 { k - 1 } else { k }];
                if !symmetric && (head.iter().all(|&v| v > 0.0) || head.iter().all(|&v| v < 0.0)) {
                    row[0] = -row[0];
                }
            }
        }
        let amax_of = |xs: &[f32]| xs.iter().fold(0f32, |a, v| a.max(v.abs()));
        // The exponent of an exact TIES row: 127 * 2^8 and 168.5 * 2^8 fit
        // float16.
        let exp = |rng: &mut Rng| rng.below(19) as i32 - 10;
        match self.arm {
            Int8Arm::Rand | Int8Arm::Nan => {}
            Int8Arm::Ties => {
                if let Some(s) = static_s {
                    self.ties_static(&mut rng, &mut x, s, z);
                } else {
                    for (j, row) in x.chunks_mut(k).enumerate() {
                        let exact = j % 2 == 0;
                        let e = exp(&mut rng);
                        if symmetric {
                            self.ties_symmetric(&mut rng, row, exact, e);
                        } else {
                            self.ties_asymmetric(&mut rng, row, exact, e);
                        }
                    }
                }
            }
            Int8Arm::Zero => {
                for (j, row) in x.chunks_mut(k).enumerate() {
                    match j % 4 {
                        0 => {
                            if symmetric {
                                for (i, v) in row.iter_mut().enumerate() {
                                    *v = if i % 3 == 1 { -0.0 } else { 0.0 };
                                }
                            } else {
                                let a = row[0].abs().max(1e-3);
                                row.fill(0.0);
                                row[rng.below(k)] = a;
                            }
                        }
                        1 => {
                            let target = match d {
                                Dtype::F16 => pow2(-20),
                                _ => pow2(-122 - rng.below(8) as i32),
                            };
                            let a = amax_of(row).max(f32::MIN_POSITIVE);
                            // Scale in f64: the quotient is far below f32's
                            // normals.
                            for v in row.iter_mut() {
                                *v = (f64::from(*v) / f64::from(a) * f64::from(target)) as f32;
                            }
                        }
                        2 => {
                            let one = row[0].abs().max(1e-3);
                            row.fill(0.0);
                            row[rng.below(k)] = if symmetric { one } else { -one };
                        }
                        _ => {}
                    }
                }
            }
            Int8Arm::Sat => {
                let s = static_s.unwrap_or(1.0);
                const EDGES: [f32; 6] = [127.5, -128.5, 128.5, -127.5, 126.5, -129.5];
                for row in x.chunks_mut(k) {
                    for v in row.iter_mut() {
                        let t = 500.0 * rng.f01() - 250.0;
                        *v = (t - z as f32) * s;
                    }
                    for e in EDGES {
                        row[rng.below(k)] = (e - z as f32) * s;
                    }
                }
            }
            Int8Arm::Sign => {
                for (j, row) in x.chunks_mut(k).enumerate() {
                    let b = 10f32.powf(6.0 * rng.f01() - 3.0);
                    let sign = if j % 2 == 0 { -1.0 } else { 1.0 };
                    for v in row.iter_mut() {
                        *v = sign * b * (0.05 + 0.95 * rng.f01());
                    }
                }
            }
            Int8Arm::Tail => {
                for (j, row) in x.chunks_mut(k).enumerate() {
                    let n = row.len();
                    if n == 1 {
                        continue;
                    }
                    let rest = &row[..n - 1];
                    if symmetric {
                        let a = amax_of(rest).max(1e-3);
                        row[n - 1] = if rng.f01() < 0.5 { -2.0 } else { 2.0 } * a;
                    } else {
                        let max = rest.iter().fold(f32::MIN, |a, &v| a.max(v));
                        let min = rest.iter().fold(f32::MAX, |a, &v| a.min(v));
                        let span = (max - min).max(1e-3);
                        row[n - 1] = if j % 2 == 0 { max + span } else { min - span };
                    }
                }
            }
        }
        for v in x.iter_mut() {
            *v = fin(d, *v);
        }
        if self.arm == Int8Arm::Nan && k >= 4 {
            for row in x.chunks_mut(k) {
                row[1] = f32::NAN;
                row[k - 1] = f32::NAN;
                if k >= 8 {
                    row[2 + rng.below(k - 3)] = f32::NAN;
                }
            }
        }
        if let Int8Scale::Dynamic { symmetric: false } = self.source {
            // I8Q-FLAT: a row rounding to one value is moved a step.
            for row in x.chunks_mut(k) {
                let max = row.iter().fold(f32::MIN, |a, &v| a.max(v));
                let min = row.iter().fold(f32::MAX, |a, &v| a.min(v));
                if max == min {
                    row[0] = fin(d, d.steps(row[0], -1));
                }
            }
        }
        Ok(x)
    }

    /// TIES under a static scale `s` and zero point `z`: the same points
    /// for every row (module docs of [`Int8Arm::Ties`]).
    fn ties_static(&self, rng: &mut Rng, x: &mut [f32], s: f32, z: i32) {
        let d = self.dtype;
        let r = 1.0 / s;
        let p = near_midpoints(d, s, r, -129 - z..=128 - z, 3, f32::MIN, f32::MAX);
        // x / s exactly a midpoint: a tie of the divide rule.
        let exact: Vec<f32> = p.all.iter().copied().filter(|&v| is_tie(v / s)).collect();
        for v in x.iter_mut() {
            let u = rng.f01();
            *v = if u < 1.0 / 3.0 && !exact.is_empty() {
                exact[rng.below(exact.len())]
            } else if u < 2.0 / 3.0 && !p.parting.is_empty() {
                p.parting[rng.below(p.parting.len())]
            } else {
                let kk = rng.below(258) as i32 - 129 - z;
                let t = fin(d, (kk as f32 + 0.5) * s);
                fin(d, d.steps(t, rng.below(3) as i32 - 1))
            };
        }
        // Every row holds a tie of the divide rule that roundf rounds
        // apart, however short.
        let split: Vec<f32> = exact
            .into_iter()
            .filter(|&v| splits_roundf(v / s))
            .collect();
        if !split.is_empty() {
            for row in x.chunks_mut(self.k) {
                row[rng.below(self.k)] = split[rng.below(split.len())];
            }
        }
    }

    /// One symmetric dynamic TIES row: exact (amax `127 * 2^e`) or
    /// parting (module docs of [`Int8Arm::Ties`]).
    fn ties_symmetric(&self, rng: &mut Rng, row: &mut [f32], exact: bool, e: i32) {
        let d = self.dtype;
        let k = row.len();
        let p = pow2(e);
        if exact {
            let amax = 127.0 * p;
            for v in row.iter_mut() {
                *v = (rng.below(254) as f32 - 127.0 + 0.5) * p;
            }
            // One tie roundf rounds apart (2i + 1/2), then the amax.
            let at = rng.below(k);
            let sign = if rng.f01() < 0.5 { -1.0 } else { 1.0 };
            row[(at + 1) % k] = sign * (2.0 * rng.below(64) as f32 + 0.5) * p;
            row[at] = if rng.f01() < 0.5 { -amax } else { amax };
            return;
        }
        let mut best = (0.0, Midpoints::default());
        for i in 0..8 {
            let a = fin(d, 127.0 * p * (1.0 + rng.f01()));
            let (s, r) = (a / 127.0, 127.0 / a);
            let m = near_midpoints(d, s, r, -127..=126, 3, -a, a);
            if i == 0 || m.parting.len() > best.1.parting.len() {
                best = (a, m);
            }
        }
        let (amax, points) = best;
        for v in row.iter_mut() {
            *v = points.draw(rng);
            if rng.f01() < 0.5 {
                *v = -*v;
            }
        }
        row[rng.below(k)] = if rng.f01() < 0.5 { -amax } else { amax };
    }

    /// One asymmetric dynamic TIES row: exact (`max - min = 255 * 2^e`,
    /// `min = -(128 + j + 1/2) 2^e`) or parting, with the row's minimum and
    /// maximum at two distinct places.
    fn ties_asymmetric(&self, rng: &mut Rng, row: &mut [f32], exact: bool, e: i32) {
        let d = self.dtype;
        let k = row.len();
        let p = pow2(e);
        let (min, max, points) = if exact {
            // j + 1/2 the zero point's tie; float32 and float16 hold any j
            // here, bfloat16's 8 bits only j = -1 (min -127.5, max 127.5).
            let mut j = -1i32;
            for _ in 0..8 {
                let c = rng.below(81) as i32 - 40;
                let (lo, hi) = (-(128.0 + c as f32 + 0.5) * p, (127.0 - c as f32 - 0.5) * p);
                let fits = d.round(lo) == lo && d.round(hi) == hi;
                if fits && splits_roundf(c as f32 + 0.5) {
                    j = c;
                    break;
                }
            }
            let lo = -(128.0 + j as f32 + 0.5) * p;
            let hi = lo + 255.0 * p;
            let mut all = Vec::new();
            for kk in -(129 + j)..=(126 - j) {
                let v = (kk as f32 + 0.5) * p;
                if d.round(v) == v {
                    all.push(v);
                }
            }
            let points = Midpoints {
                all,
                ..Midpoints::default()
            };
            (lo, hi, points)
        } else {
            let mut best = (0.0, 0.0, Midpoints::default());
            for i in 0..8 {
                let lo = fin(d, -100.0 * p * (0.2 + rng.f01()));
                let hi = fin(d, 100.0 * p * (0.2 + rng.f01()));
                let s = (hi - lo) / 255.0;
                let m = near_midpoints(d, s, 1.0 / s, -256..=256, 3, lo, hi);
                if i == 0 || m.parting.len() > best.2.parting.len() {
                    best = (lo, hi, m);
                }
            }
            best
        };
        for v in row.iter_mut() {
            *v = points.draw(rng);
        }
        let i = rng.below(k);
        if exact {
            // A code tie roundf rounds apart, where the row has room.
            let split: Vec<f32> = points
                .all
                .iter()
                .copied()
                .filter(|&v| splits_roundf(v / p))
                .collect();
            row[(i + 2) % k] = split[rng.below(split.len())];
        }
        let j = (i + 1) % k;
        row[i] = min;
        row[j] = max;
    }
}

/// The oracle's codes, scales and zero points for `x` under `rule` and
/// the spec's source.
///
/// # Errors
/// As [`Int8Spec::valid`], and the oracle's errors (`I8Q-FLAT`).
pub fn int8_reference(spec: &Int8Spec, x: &[f32], rule: Int8Rule) -> Result<Int8Out, String> {
    spec.valid()?;
    let mut out = Int8Out {
        q: vec![0; x.len()],
        s: vec![0.0; spec.scales()],
        azp: vec![0; spec.azps()],
    };
    quantize_int8(
        x,
        spec.k,
        spec.source,
        rule,
        &mut out.q,
        &mut out.s,
        &mut out.azp,
    )
    .map_err(|e| e.to_string())?;
    Ok(out)
}

/// How a quantizer's output compares with the oracle's under one rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Int8Verdict {
    /// Codes compared, and those that differ.
    pub codes: (usize, usize),
    /// The first differing code: `(row, column, got, want)`.
    pub first_code: Option<(usize, usize, i8, i8)>,
    /// The largest `|got - want|` of a code.
    pub max_code_steps: u32,
    /// The scales, bit for bit (`first_diff`'s index is the row; every
    /// limit 0).
    pub scales: Part,
    /// Zero points compared, and those that differ.
    pub azps: (usize, usize),
    /// The first differing zero point: `(row, got, want)`.
    pub first_azp: Option<(usize, i32, i32)>,
}

impl Int8Verdict {
    /// Compares `got` (rows of `k` codes) with the oracle's `want`.
    pub fn judge(k: usize, got: &Int8Out, want: &Int8Out) -> Int8Verdict {
        let mut v = Int8Verdict {
            codes: (want.q.len(), 0),
            scales: Part::judge(&got.s, &want.s, &vec![0.0; want.s.len()]),
            azps: (want.azp.len(), 0),
            ..Int8Verdict::default()
        };
        for (i, (&g, &w)) in got.q.iter().zip(&want.q).enumerate() {
            if g != w {
                v.codes.1 += 1;
                v.first_code.get_or_insert((i / k, i % k, g, w));
                v.max_code_steps = v.max_code_steps.max(i32::from(g).abs_diff(i32::from(w)));
            }
        }
        for (j, (&g, &w)) in got.azp.iter().zip(&want.azp).enumerate() {
            if g != w {
                v.azps.1 += 1;
                v.first_azp.get_or_insert((j, g, w));
            }
        }
        if got.q.len() != want.q.len() || got.azp.len() != want.azp.len() {
            v.codes.1 = v.codes.1.max(1);
        }
        v
    }

    /// Every code, scale and zero point bit for bit.
    pub fn pass(&self) -> bool {
        self.codes.1 == 0 && self.scales.bit_exact() && self.azps.1 == 0
    }
}

/// The rules a check names when an output matches them: symmetric,
/// `reciprocal`, `divide` and (dynamic) `torch_divide`, each with ties to
/// even or away (`roundf`) and the full or the narrow range; asymmetric,
/// the same with the full range only.
pub fn int8_known(source: Int8Scale) -> Vec<Int8Rule> {
    let ranges: &[Range] = if source.symmetric() {
        &[Range::Full, Range::Narrow]
    } else {
        &[Range::Full]
    };
    // A static scale is the same under torch_divide as under divide.
    let codes: &[Codes] = match source {
        Int8Scale::Static { .. } => &[Codes::Reciprocal, Codes::Divide],
        Int8Scale::Dynamic { .. } => &[Codes::Reciprocal, Codes::Divide, Codes::TorchDivide],
    };
    let mut v = Vec::new();
    for &range in ranges {
        for rounding in [Rounding::NearestEven, Rounding::NearestAway] {
            for &codes in codes {
                v.push(Int8Rule {
                    codes,
                    rounding,
                    range,
                });
            }
        }
    }
    v
}

/// The known rules ([`int8_known`]) whose output equals `got` bit for bit.
pub fn int8_identify(spec: &Int8Spec, x: &[f32], got: &Int8Out) -> Vec<Int8Rule> {
    int8_known(spec.source)
        .into_iter()
        .filter(|&rule| {
            int8_reference(spec, x, rule)
                .map(|want| Int8Verdict::judge(spec.k, got, &want).pass())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DYN: Int8Scale = Int8Scale::Dynamic { symmetric: true };
    const ASYM: Int8Scale = Int8Scale::Dynamic { symmetric: false };
    const REC: Int8Rule = Int8Rule::new(Codes::Reciprocal);
    const DIV: Int8Rule = Int8Rule::new(Codes::Divide);

    fn spec(m: usize, k: usize, dtype: Dtype, source: Int8Scale, arm: Int8Arm) -> Int8Spec {
        Int8Spec {
            m,
            k,
            dtype,
            source,
            arm,
            seed: Int8Spec::base_seed(m, k, dtype, source, arm),
        }
    }

    fn stat(scale: f32, azp: Option<i32>) -> Int8Scale {
        Int8Scale::Static { scale, azp }
    }

    /// Whether two rules give different bits on a case.
    fn differ(sp: &Int8Spec, a: Int8Rule, b: Int8Rule) -> bool {
        let x = sp.generate().unwrap();
        let wa = int8_reference(sp, &x, a).unwrap();
        let wb = int8_reference(sp, &x, b).unwrap();
        !Int8Verdict::judge(sp.k, &wa, &wb).pass()
    }

    fn away(r: Int8Rule) -> Int8Rule {
        Int8Rule {
            rounding: Rounding::NearestAway,
            ..r
        }
    }

    fn narrow(r: Int8Rule) -> Int8Rule {
        Int8Rule {
            range: Range::Narrow,
            ..r
        }
    }

    /// Every arm draws values of its dtype, finite, and the oracle
    /// accepts every case (no flat asymmetric row), at every default
    /// shape, dtype and source.
    #[test]
    fn every_case_is_of_its_dtype_and_inside_the_contract() {
        for &(m, k) in &INT8_SHAPES {
            for d in Dtype::ALL {
                for src in [DYN, ASYM, stat(0.3, None), stat(0.05, Some(-17))] {
                    for arm in spec(m, k, d, src, Int8Arm::Rand).default_arms() {
                        let sp = spec(m, k, d, src, arm);
                        let x = sp.generate().unwrap();
                        assert!(
                            x.iter().all(|&v| v.is_finite() && d.round(v) == v),
                            "{sp:?}"
                        );
                        for rule in int8_known(src) {
                            int8_reference(&sp, &x, rule).unwrap();
                        }
                        // The reference is its own identification.
                        let w = int8_reference(&sp, &x, vllm_rule(src)).unwrap();
                        assert!(int8_identify(&sp, &x, &w).contains(&vllm_rule(src)));
                    }
                }
            }
        }
    }

    /// NAN (named only): every row of 4 or more elements holds NaN at
    /// column 1 and the last; the reference skips them in the reductions
    /// (the scale is the finite elements' own) and codes them 0 (plus the
    /// zero point); a scale computed over NaN would be NaN.
    #[test]
    fn the_nan_arm_plants_nans_that_the_reductions_skip() {
        for &(m, k) in &INT8_SHAPES {
            for d in Dtype::ALL {
                for src in [DYN, ASYM, stat(0.3, None), stat(0.05, Some(-17))] {
                    let sp = spec(m, k, d, src, Int8Arm::Nan);
                    assert!(!sp.default_arms().contains(&Int8Arm::Nan));
                    let x = sp.generate().unwrap();
                    for (j, row) in x.chunks(k).enumerate() {
                        let nans: Vec<usize> = (0..k).filter(|&i| row[i].is_nan()).collect();
                        if k < 4 {
                            assert!(nans.is_empty());
                            continue;
                        }
                        assert!(nans.contains(&1) && nans.contains(&(k - 1)), "{sp:?}");
                        assert_eq!(nans.len(), if k >= 8 { 3 } else { 2 }, "{sp:?}");
                        let w = int8_reference(&sp, &x, vllm_rule(src)).unwrap();
                        let z = if src.symmetric() {
                            0
                        } else {
                            w.azp[j.min(w.azp.len() - 1)]
                        };
                        for &i in &nans {
                            assert_eq!(i32::from(w.q[j * k + i]), z.clamp(-128, 127), "{sp:?}");
                        }
                        assert!(w.s.iter().all(|s| s.is_finite()), "{sp:?}");
                    }
                }
            }
        }
    }

    /// TIES: roundf parts from ties-to-even under every source and dtype
    /// (static: with a power-of-two scale and with 0.3), and divide from
    /// reciprocal on multi-row dynamic shapes and, in float32, under the
    /// static scale 0.3.
    #[test]
    fn the_ties_arm_parts_roundf_and_the_two_rules() {
        for &(m, k) in &INT8_SHAPES {
            for d in Dtype::ALL {
                for (src, rule) in [
                    (DYN, REC),
                    (DYN, DIV),
                    (ASYM, DIV),
                    (stat(0.25, None), DIV),
                    (stat(0.3, None), DIV),
                    (stat(0.125, Some(3)), DIV),
                ] {
                    let sp = spec(m, k, d, src, Int8Arm::Ties);
                    assert!(differ(&sp, rule, away(rule)), "{sp:?} {rule:?}");
                }
                // A one-row case is of the exact kind, where the two agree.
                if m >= 2 {
                    for src in [DYN, ASYM] {
                        let sp = spec(m, k, d, src, Int8Arm::Ties);
                        assert!(differ(&sp, REC, DIV), "{sp:?}");
                    }
                }
            }
            let sp = spec(m, k, Dtype::F32, stat(0.3, None), Int8Arm::Ties);
            assert!(differ(&sp, DIV, away(DIV)), "{sp:?}");
            if m * k >= 100 {
                assert!(differ(&sp, DIV, REC), "{sp:?}");
            }
        }
    }

    /// TIES at its designed rates: in float32 parting rows, at least a
    /// third of the elements part divide from reciprocal; in exact rows
    /// every element but the amax is a tie.
    #[test]
    fn the_ties_arm_reaches_its_designed_rates() {
        let sp = spec(16, 1024, Dtype::F32, DYN, Int8Arm::Ties);
        let x = sp.generate().unwrap();
        let (mut exact_rows, mut parting_rows) = (0, 0);
        for row in x.chunks(1024) {
            let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
            let (s, r) = (amax / 127.0, 127.0 / amax);
            let ties = row
                .iter()
                .filter(|&&v| (v / s).fract().abs() == 0.5)
                .count();
            let parted = row.iter().filter(|&&v| parts(v, s, r)).count();
            if ties >= 1020 {
                exact_rows += 1;
            } else {
                assert!(parted >= 1024 / 3, "{parted}");
                parting_rows += 1;
            }
        }
        assert_eq!((exact_rows, parting_rows), (8, 8));
        // bfloat16 parting rows still part somewhere in a 4096 row.
        let sp = spec(2, 4096, Dtype::Bf16, DYN, Int8Arm::Ties);
        assert!(differ(&sp, REC, DIV));
    }

    /// ZERO: all-zero rows (symmetric) code 0 under both rules, tiny rows
    /// have 127/amax infinite in float32 and bfloat16, and the reciprocal
    /// rule saturates them.
    #[test]
    fn the_zero_arm_reaches_zero_and_tiny_rows() {
        for d in [Dtype::F32, Dtype::Bf16] {
            let sp = spec(8, 129, d, DYN, Int8Arm::Zero);
            let x = sp.generate().unwrap();
            let w = int8_reference(&sp, &x, REC).unwrap();
            for (j, row) in x.chunks(129).enumerate() {
                let amax = row.iter().fold(0f32, |a, v| a.max(v.abs()));
                match j % 4 {
                    0 => assert!(amax == 0.0 && w.s[j] == 0.0),
                    1 => {
                        assert!(amax > 0.0 && (127.0 / amax).is_infinite(), "{d:?} {amax:e}");
                        assert!(w.q[j * 129..(j + 1) * 129]
                            .iter()
                            .zip(row)
                            .all(|(&c, &v)| v == 0.0 || c == 127 || c == -128));
                    }
                    2 => assert_eq!(row.iter().filter(|&&v| v != 0.0).count(), 1),
                    _ => {}
                }
            }
            assert!(w.q[..129].iter().all(|&c| c == 0));
            // Tiny rows part a reciprocal from a divide kernel.
            assert!(differ(&sp, REC, DIV));
        }
    }

    /// SAT: codes -128 and 127 in every row, so a narrow clamp parts;
    /// asymmetric, sums beyond int8 (a wrap would differ).
    #[test]
    fn the_sat_arm_saturates_both_ends() {
        for src in [stat(0.3, None), stat(0.02, Some(40))] {
            for d in Dtype::ALL {
                let sp = spec(4, 129, d, src, Int8Arm::Sat);
                let x = sp.generate().unwrap();
                let w = int8_reference(&sp, &x, DIV).unwrap();
                for row in w.q.chunks(129) {
                    assert!(row.contains(&-128) && row.contains(&127), "{sp:?}");
                    let lows = row.iter().filter(|&&c| c == -128).count();
                    assert!(lows > 129 / 8, "{sp:?}: {lows}");
                }
                assert!(differ(&sp, DIV, narrow(DIV)));
            }
        }
    }

    /// SIGN: even rows all negative, odd rows all positive; the azp
    /// kernel's FLT_MIN start for the maximum changes every negative row.
    #[test]
    fn the_sign_arm_draws_one_signed_rows() {
        for &(m, k) in &INT8_SHAPES {
            let sp = spec(m, k, Dtype::Bf16, ASYM, Int8Arm::Sign);
            let x = sp.generate().unwrap();
            let w = int8_reference(&sp, &x, DIV).unwrap();
            for (j, row) in x.chunks(k).enumerate() {
                if j % 2 == 0 {
                    assert!(row.iter().all(|&v| v < 0.0));
                    // vLLM's max_val = FLT_MIN: another scale.
                    let min = row.iter().fold(f32::MAX, |a, &v| a.min(v));
                    let bad = (f32::MIN_POSITIVE - min) / 255.0;
                    assert_ne!(bad.to_bits(), w.s[j].to_bits(), "{sp:?} row {j}");
                } else {
                    assert!(row.iter().all(|&v| v > 0.0));
                }
            }
        }
    }

    /// RAND's, TIES's and TAIL's asymmetric rows straddle zero, so a
    /// maximum started at FLT_MIN shows on SIGN (and ZERO's tiny rows),
    /// not there.
    #[test]
    fn asymmetric_rows_straddle_zero_but_on_sign() {
        for &(m, k) in &INT8_SHAPES {
            for d in Dtype::ALL {
                for arm in [Int8Arm::Rand, Int8Arm::Ties, Int8Arm::Tail] {
                    let sp = spec(m, k, d, ASYM, arm);
                    let x = sp.generate().unwrap();
                    for row in x.chunks(k) {
                        let max = row.iter().fold(f32::MIN, |a, &v| a.max(v));
                        let min = row.iter().fold(f32::MAX, |a, &v| a.min(v));
                        assert!(max > f32::MIN_POSITIVE && min < 0.0, "{sp:?}");
                    }
                }
            }
        }
    }

    /// TAIL: the row's extreme is the last element alone, so dropping it
    /// (or a remainder past the last multiple of 16) changes every
    /// row's scale.
    #[test]
    fn the_tail_arm_puts_the_extreme_last() {
        for &(m, k) in &INT8_SHAPES {
            for src in [DYN, ASYM] {
                let sp = spec(m, k, Dtype::F32, src, Int8Arm::Tail);
                let mut x = sp.generate().unwrap();
                let want = int8_reference(&sp, &x, DIV).unwrap();
                for j in 0..m {
                    x[j * k + k - 1] = x[j * k];
                }
                let short = int8_reference(&sp, &x, DIV).unwrap();
                assert!(want.s.iter().zip(&short.s).all(|(a, b)| a > b), "{sp:?}");
            }
        }
    }

    /// Identification names each known rule's own output, and the arms
    /// the check runs tell all of them apart on a multi-row case.
    #[test]
    fn identify_names_each_rule_and_tells_them_apart() {
        for src in [DYN, ASYM, stat(0.3, None)] {
            let mut seen = Vec::new();
            for arm in spec(8, 1003, Dtype::F32, src, Int8Arm::Rand).default_arms() {
                let sp = spec(8, 1003, Dtype::F32, src, arm);
                let x = sp.generate().unwrap();
                for rule in int8_known(src) {
                    let w = int8_reference(&sp, &x, rule).unwrap();
                    let ids = int8_identify(&sp, &x, &w);
                    assert!(ids.contains(&rule), "{rule:?}: {ids:?}");
                    seen.push((rule, ids));
                }
            }
            // Over the arms, each rule's output matches itself alone, but
            // a narrow range under a dynamic symmetric divide (its codes
            // reach -128 only by chance, in tiny rows).
            for rule in int8_known(src) {
                let mut every = int8_known(src);
                for (r, ids) in &seen {
                    if *r == rule {
                        every.retain(|x| ids.contains(x));
                    }
                }
                let hidden = src == DYN && rule.codes != Codes::Reciprocal;
                assert!(
                    every == vec![rule] || hidden && every.contains(&rule) && every.len() <= 2,
                    "{src:?} {rule:?}: {every:?}"
                );
            }
        }
        assert_eq!(Int8Arm::parse("sign"), Ok(Int8Arm::Sign));
        assert!(spec(2, 7, Dtype::F32, DYN, Int8Arm::Sat)
            .generate()
            .is_err());
        assert!(spec(2, 1, Dtype::F32, ASYM, Int8Arm::Rand)
            .generate()
            .is_err());
        assert!(spec(2, 7, Dtype::F32, stat(0.3, None), Int8Arm::Tail)
            .generate()
            .is_err());
    }
}
