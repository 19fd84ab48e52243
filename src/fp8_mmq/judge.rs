//! The judge: the oracle's answer for a case under the schedule the kernel
//! declares, the verdict on the kernel's answer, and which known schedules
//! the kernel's output matches bit for bit.
//!
//! A kernel is judged under its declared [`Schedule`] (an input: the
//! `plan[15]` code of a `.cu` candidate, or whatever a peer engine says it
//! computes). Under [`Accumulation::F32`] the EXACT, FOLD and CODES arms
//! compare bit for bit with the declared fold and the RANDOM arm by the
//! summation bound; under [`Accumulation::TensorCore`] every arm, RANDOM
//! included, compares bit for bit.

use super::fast::{mmq_fast, mmq_fast_all_folds, mmq_v2_fast, quantize_activations_fast, Simd};
use super::generate::{Arm, CaseData};
use crate::use_spec_oracle;
use oracle::compare::{compare_f32, Comparison};
use oracle::conventions::NanMagnitude::{Ieee, ReadAsZero};
use oracle::e4m3::decode_e4m3;
use oracle::fp8_mmq::{count_nan_magnitude, Accumulation, Schedule, BLOCK_K};

/// RANDOM-arm bound on `rms_rel` (seed 000): about two orders above the
/// observed reordering noise of the hardware-internal MMA summation, and
/// about five below an indexing bug (a wrong scale block, k offset or row
/// lands at O(1) on this measure).
pub const RANDOM_RMS_REL_BOUND: f64 = 1e-5;

/// Outputs from which the RANDOM arm also gates seed 000's statistic
/// `rms_rel < 1e-5`. `rms(want)` stands for the size of the outputs only
/// when there are many of them: on a handful of outputs one sum that
/// cancels to near zero makes `rms_rel` large with no error in the kernel
/// (seen on the H200: in_f = 429, out_f = 1, m = 1, one output 3.27 off by
/// 4.6e-5, rms_rel 1.4e-5). Every seed battery shape has at least 910.
pub const RANDOM_RMS_REL_MIN_OUTPUTS: usize = 512;

/// The RANDOM arm's per-output bound, as a multiple of `A`, the same sum
/// over absolute values, `A = sum_b |s_b * d_b| * sum_k |w_k * a_k|`:
/// `|got - want| <= 3 * gamma_n / (1 - gamma_n) * A`, `n = 130 + nblk`,
/// `gamma_n = n u / (1 - n u)`, `u = 2^-24`. Source: the classical bound for
/// recursive summation (Higham, *Accuracy and Stability of Numerical
/// Algorithms*, 2nd ed., eq. 4.4: `|error| <= gamma_n * sum |terms|`), with
/// `n` counting the roundings on one output's path: 128 additions inside a
/// block's chain (the order the MMA hides), the two products `s * d` and
/// `(s * d) * c`, and `nblk` additions in the fold. Both sides carry error
/// against the exact value: the oracle at most `gamma_n A`, the kernel at
/// most `2 gamma_n A` even with accumulators that truncate instead of
/// rounding, hence 3; `A` itself is computed in binary32 from non-negative
/// terms, so it may be low by a factor `1 - gamma_n`, hence the division.
/// An indexing bug (a wrong block, k offset, row or scale) errs by a
/// sizeable part of `A` and fails it. Not a check on rare codes: a
/// candidate that decodes a few subnormal weight codes wrongly can stay
/// within it; the CODES arm ([`Arm::Codes`]) checks every code's decode
/// bit for bit.
pub fn random_bound_factor(nblk: usize) -> f64 {
    let nu = (130 + nblk) as f64 * f64::powi(2.0, -24);
    let gamma = nu / (1.0 - nu);
    3.0 * gamma / (1.0 - gamma)
}

/// The first output over the RANDOM arm's per-output bound: `(row j,
/// column i, |got - want|, allowed)`.
pub type BoundExcess = (usize, usize, f64, f64);

/// When the judge computes which known schedules a kernel's output matches
/// ([`identify`]): every known schedule's GEMM, so only where it is worth it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Identify {
    /// Only when the case fails (the fuzzer: the cost is paid on a
    /// divergence, never on the millions of passing cases).
    #[default]
    OnFailure,
    /// On every case (the gate and `kernel-oracle case`).
    Always,
}

/// What the oracle says a case computes under one schedule.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The schedule the answer was computed under: the one the kernel
    /// declares.
    pub schedule: Schedule,
    /// When the verdict identifies the kernel's schedule ([`identify`]);
    /// [`Identify::OnFailure`] from [`reference()`].
    pub identify: Identify,
    /// NaN-magnitude weight codes (the dispatch precondition; 0 to compute).
    pub nan: usize,
    /// The quantizer's codes for `x`, `[m x in_f_pad]`.
    pub q: Vec<u8>,
    /// The quantizer's scales for `x`, `[m x in_f_pad/128]`.
    pub d: Vec<f32>,
    /// GEMM output `[m x out_f]` (from the direct operand when the case
    /// has one, else from `q` and `d`).
    pub y: Vec<f32>,
}

/// What the kernel produced for a case (downloaded).
#[derive(Clone, Debug)]
pub struct KernelOut {
    /// The NaN-count kernel's answer.
    pub nan: u64,
    /// The quantize kernel's codes.
    pub q: Vec<u8>,
    /// The quantize kernel's scales.
    pub d: Vec<f32>,
    /// The MMQ kernel's output.
    pub y: Vec<f32>,
}

/// The oracle's answer under `schedule` (the one the kernel declares),
/// through the fast paths of the spec's quantizer and GEMM (bit-identical
/// to `oracle::fp8_mmq`, see [`super::fast`]), or through the spec
/// functions when [`crate::ENV_ORACLE`] is `spec`. Identification is
/// [`Identify::OnFailure`]; set [`Reference::identify`] to change it.
pub fn reference(data: &CaseData, schedule: Schedule) -> Reference {
    let s = &data.shape;
    let spec = use_spec_oracle();
    let mut q = vec![0u8; s.q_len()];
    let mut d = vec![0f32; s.d_len()];
    if spec {
        oracle::fp8_mmq::quantize_activations(s, &data.x, &mut q, &mut d)
    } else {
        quantize_activations_fast(s, &data.x, &mut q, &mut d)
    }
    .expect("lengths come from the shape");
    let (gq, gd) = match &data.qd {
        Some((q, d)) => (q, d),
        None => (&q, &d),
    };
    let mut y = vec![0f32; s.out_len()];
    if spec {
        oracle::fp8_mmq::mmq(s, &schedule, &data.w, &data.scales, gq, gd, &mut y)
    } else {
        mmq_fast(s, &schedule, &data.w, &data.scales, gq, gd, &mut y)
    }
    .expect("lengths come from the shape");
    Reference {
        schedule,
        identify: Identify::OnFailure,
        nan: count_nan_magnitude(&data.w),
        q,
        d,
        y,
    }
}

/// The first differing quantized code: (row j, column k, kernel, oracle).
pub type CodeMismatch = (usize, usize, u8, u8);

/// The verdict on one case.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The arm judged.
    pub arm: Arm,
    /// The schedule the kernel declared, which it was judged under.
    pub schedule: Schedule,
    /// The known schedules ([`Schedule::KNOWN`]) under which the kernel's
    /// output is bit-identical to the oracle's ([`identify`]), in that
    /// order; `None` where not computed (see [`Identify`]).
    pub identified: Option<Vec<Schedule>>,
    /// NaN count agreement: (kernel, oracle).
    pub nan: (u64, usize),
    /// Quantized codes that differ, and the first.
    pub q_mismatches: (usize, Option<CodeMismatch>),
    /// Activation scales, compared bit for bit (columns: blocks per row).
    pub d: Comparison,
    /// GEMM output (columns: out_f).
    pub y: Comparison,
    /// RANDOM arm: outputs over [`random_bound_factor`]` * A`, and the first
    /// (0 and `None` in the other arms).
    pub over_bound: (usize, Option<BoundExcess>),
    /// The e4m3 weight codes the kernel's output decoded bit-exactly
    /// ([`codes_decoded_exactly`] on `got.y`): those of the outputs whose
    /// kernel bits equal the oracle's exact product, whether or not the
    /// case passes (empty in the RANDOM arm and on rows with many terms).
    pub codes: CodeSet,
    /// Wall time of the device side: uploads, the NaN count, quantize and
    /// MMQ launches, downloads (set by the runner; zero until then).
    pub device_time: std::time::Duration,
}

impl Verdict {
    /// Judges `got` against `want`, under `want.schedule` (the kernel's
    /// declared schedule). The quantizer has no hidden order, so q and d
    /// must match bit for bit in every arm; y must be bit-identical in the
    /// EXACT, FOLD and CODES arms ([`Arm::bit_exact`]), and in the RANDOM
    /// arm too when the schedule is bit-exact ([`Schedule::bit_exact`]:
    /// a tensor-core model); otherwise, in the RANDOM arm every output must
    /// be finite and within [`random_bound_factor`] of its sum of absolute
    /// terms, and, from [`RANDOM_RMS_REL_MIN_OUTPUTS`] outputs on,
    /// `rms_rel` below [`RANDOM_RMS_REL_BOUND`] (seed 000); the NaN counts
    /// must agree. [`Verdict::identified`] is computed as `want.identify`
    /// says.
    pub fn judge(data: &CaseData, arm: Arm, got: &KernelOut, want: &Reference) -> Verdict {
        let s = &data.shape;
        let mut q_mismatches = (0, None);
        for (idx, (&g, &w)) in got.q.iter().zip(&want.q).enumerate() {
            if g != w {
                q_mismatches.0 += 1;
                q_mismatches
                    .1
                    .get_or_insert((idx / s.in_f_pad(), idx % s.in_f_pad(), g, w));
            }
        }
        if got.q.len() != want.q.len() {
            q_mismatches.0 += got.q.len().abs_diff(want.q.len());
        }
        let d =
            compare_f32(&got.d, &want.d, s.act_blocks()).expect("d lengths come from the shape");
        let y = compare_f32(&got.y, &want.y, s.out_f()).expect("y lengths come from the shape");
        let over_bound = if arm == Arm::Random && !want.schedule.bit_exact() {
            per_output_bound(data, want, &got.y)
        } else {
            (0, None)
        };
        let mut v = Verdict {
            schedule: want.schedule,
            identified: None,
            over_bound,
            codes: codes_decoded_exactly(arm, data, want, &got.y),
            arm,
            nan: (got.nan, want.nan),
            q_mismatches,
            d,
            y,
            device_time: std::time::Duration::ZERO,
        };
        if want.identify == Identify::Always || !v.pass() {
            v.identified = Some(identify(data, want, &got.y));
        }
        v
    }

    /// Whether the GEMM output is compared bit for bit: in the EXACT, FOLD
    /// and CODES arms, and in every arm under a bit-exact schedule.
    pub fn y_bit_exact(&self) -> bool {
        self.arm.bit_exact() || self.schedule.bit_exact()
    }

    /// Whether the GEMM output passes its arm's test under the declared
    /// schedule.
    pub fn y_ok(&self) -> bool {
        match self.arm {
            _ if self.y_bit_exact() => self.y.bit_identical(),
            Arm::Exact | Arm::Fold | Arm::Codes => unreachable!("bit-exact arms"),
            Arm::Random => {
                self.y.non_finite == 0
                    && self.over_bound.0 == 0
                    && (self.y.n < RANDOM_RMS_REL_MIN_OUTPUTS
                        || self.y.within_rms_rel(RANDOM_RMS_REL_BOUND))
            }
        }
    }

    /// Whether the whole case passes.
    pub fn pass(&self) -> bool {
        self.nan.0 == self.nan.1 as u64
            && self.q_mismatches.0 == 0
            && self.d.bit_identical()
            && self.y_ok()
    }
}

/// The known schedules ([`Schedule::KNOWN`]) under which the kernel's
/// output `got` (`[m x out_f]`) is bit-identical to the oracle's answer on
/// the case's GEMM operand (`data.qd`, else the quantizer's `want.q`,
/// `want.d`), in [`Schedule::KNOWN`]'s order. Outputs that are NaN on both
/// sides count as equal whatever their payload; every other bit pattern,
/// `-0.0` included, must match. Empty when none matches.
///
/// Cost: each known accumulation's GEMM once, its four folds from it
/// ([`mmq_fast_all_folds`]; the spec's [`oracle::fp8_mmq::mmq`] once per
/// known schedule when [`crate::ENV_ORACLE`] is `spec`).
pub fn identify(data: &CaseData, want: &Reference, got: &[f32]) -> Vec<Schedule> {
    let s = &data.shape;
    let (q, d) = match &data.qd {
        Some((q, d)) => (q.as_slice(), d.as_slice()),
        None => (want.q.as_slice(), want.d.as_slice()),
    };
    let same = |a: &[f32], b: &[f32]| {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    };
    let mut matched = Vec::new();
    let mut accumulations: Vec<Accumulation> = Vec::new();
    for k in Schedule::KNOWN {
        if !accumulations.contains(&k.accumulation) {
            accumulations.push(k.accumulation);
        }
    }
    use oracle::fp8_mmq::Fold;
    let mut answers: Vec<(Schedule, Vec<f32>)> = Vec::new();
    for acc in accumulations {
        let ys: [Vec<f32>; 4] = if use_spec_oracle() {
            Fold::ALL.map(|fold| {
                let schedule = Schedule {
                    fold,
                    accumulation: acc,
                };
                let mut y = vec![0f32; s.out_len()];
                if Schedule::KNOWN.contains(&schedule) {
                    oracle::fp8_mmq::mmq(s, &schedule, &data.w, &data.scales, q, d, &mut y)
                        .expect("lengths come from the shape");
                }
                y
            })
        } else {
            mmq_fast_all_folds(Simd::detected(), s, &acc, &data.w, &data.scales, q, d)
                .expect("lengths come from the shape")
        };
        for (fold, y) in Fold::ALL.into_iter().zip(ys) {
            answers.push((
                Schedule {
                    fold,
                    accumulation: acc,
                },
                y,
            ));
        }
    }
    for k in Schedule::KNOWN {
        if let Some((_, y)) = answers.iter().find(|(s, _)| *s == k) {
            if same(got, y) {
                matched.push(k);
            }
        }
    }
    matched
}

/// `schedules` as the reports print them: `v2, v2 + fused fold`, or
/// `none`.
pub fn schedule_list(schedules: &[Schedule]) -> String {
    if schedules.is_empty() {
        return "none".to_string();
    }
    schedules
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The RANDOM arm's per-output check: `A` is the oracle's GEMM on the
/// absolute values of every operand (sign bits of the e4m3 codes cleared,
/// `|s|`, `|d|`), each output compared with
/// [`random_bound_factor`]` * A` in f64.
fn per_output_bound(
    data: &CaseData,
    want: &Reference,
    got: &[f32],
) -> (usize, Option<BoundExcess>) {
    let s = &data.shape;
    let (q, d) = match &data.qd {
        Some((q, d)) => (q, d),
        None => (&want.q, &want.d),
    };
    let abs_codes = |c: &[u8]| c.iter().map(|&b| b & 0x7F).collect::<Vec<u8>>();
    let abs_f = |x: &[f32]| x.iter().map(|v| v.abs()).collect::<Vec<f32>>();
    let mut a = vec![0f32; s.out_len()];
    let (wa, sa, qa, da) = (
        abs_codes(&data.w),
        abs_f(&data.scales),
        abs_codes(q),
        abs_f(d),
    );
    if use_spec_oracle() {
        oracle::fp8_mmq::mmq_v2(s, &wa, &sa, &qa, &da, &mut a)
    } else {
        mmq_v2_fast(s, &wa, &sa, &qa, &da, &mut a)
    }
    .expect("lengths come from the shape");
    let factor = random_bound_factor(s.in_f().div_ceil(128));
    let mut over = (0, None);
    for (idx, ((&g, &w), &a)) in got.iter().zip(&want.y).zip(&a).enumerate() {
        let (err, allowed) = ((f64::from(g) - f64::from(w)).abs(), factor * f64::from(a));
        if err.is_nan() || err > allowed {
            over.0 += 1;
            over.1
                .get_or_insert((idx / s.out_f(), idx % s.out_f(), err, allowed));
        }
    }
    over
}

/// A set of e4m3 codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeSet([bool; 256]);

impl Default for CodeSet {
    fn default() -> CodeSet {
        CodeSet([false; 256])
    }
}

impl CodeSet {
    /// Adds `code`.
    pub fn insert(&mut self, code: u8) {
        self.0[usize::from(code)] = true;
    }
    /// Whether `code` is in the set.
    pub fn contains(&self, code: u8) -> bool {
        self.0[usize::from(code)]
    }
    /// Adds every code of `other`.
    pub fn union(&mut self, other: &CodeSet) {
        for (a, &b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
    /// How many codes the set holds.
    pub fn count(&self) -> usize {
        self.0.iter().filter(|&&s| s).count()
    }
}

/// The e4m3 weight codes that the kernel's output `got` (`[m x out_f]`)
/// decoded bit-exactly in a case `data` that `arm` compares bit for bit,
/// output by output: computed from the case's data, the oracle's answer
/// `want` and the kernel's bits, not assumed from the arm or the verdict.
///
/// A code `w[o, k]` counts when `arm` is bit-exact ([`Arm::bit_exact`]),
/// row j of the GEMM operand (`data.qd`, else the quantizer's `want.q`,
/// `want.d`) has exactly one nonzero term (one `k < in_f` with a nonzero
/// activation code in a block with `d != 0`, every other product being a
/// zero), `|s[o/128, k/128] * d[j, k/128]|` is a power of two, the exact
/// output `+0 + (s * d) * (w * a)` (the sum starts at +0) is a binary32,
/// and both the oracle's `want.y[j, o]` and the KERNEL's `got[j, o]` have
/// its bits. Such an output is one product with no rounding, so its bits
/// determine the decoded weight: a kernel that matches it bit for bit
/// decoded that code as the oracle does. A kernel that gets an output
/// wrong loses that output's code there (a failing row contributes only
/// its matching outputs). The CODES arm is built to meet this on every
/// output ([`Arm::Codes`]); the other arms' rows hold many terms and
/// contribute nothing. Never counted: the NaN magnitudes 0x7F/0xFF
/// (refused, rule NAN-W), and 0x80 (-0), whose output is +0 as 0x00's is
/// (see [`OBSERVABLE_CODES`](super::gate::OBSERVABLE_CODES)); at most [`OBSERVABLE_CODES`](super::gate::OBSERVABLE_CODES) codes.
pub fn codes_decoded_exactly(arm: Arm, data: &CaseData, want: &Reference, got: &[f32]) -> CodeSet {
    let mut set = CodeSet::default();
    if !arm.bit_exact() {
        return set;
    }
    let s = &data.shape;
    let (q, d) = match &data.qd {
        Some((q, d)) => (q.as_slice(), d.as_slice()),
        None => (want.q.as_slice(), want.d.as_slice()),
    };
    let (in_f, pad, blocks) = (s.in_f(), s.in_f_pad(), s.act_blocks());
    let (out_f, scols) = (s.out_f(), s.scale_cols());
    for j in 0..s.m() {
        let mut terms = (0..in_f).filter(|&k| {
            decode_e4m3(q[j * pad + k], Ieee) != 0.0 && d[j * blocks + k / BLOCK_K] != 0.0
        });
        let (Some(k), None) = (terms.next(), terms.next()) else {
            continue;
        };
        let a = f64::from(decode_e4m3(q[j * pad + k], Ieee));
        let dj = f64::from(d[j * blocks + k / BLOCK_K]);
        for o in 0..out_f {
            let code = data.w[o * in_f + k];
            if code & 0x7F == 0x7F || code == 0x80 {
                continue;
            }
            let sd = f64::from(data.scales[(o / 128) * scols + k / BLOCK_K]) * dj;
            // s * d is exact in f64 (24 + 24 bits); a power of two keeps
            // the product (s * d) * (w * a) exact and one-to-one in w
            // (but for ±0, both +0 after the sum's starting +0).
            let pow2 = sd != 0.0 && sd.is_finite() && sd.abs().to_bits() & ((1 << 52) - 1) == 0;
            let exact = 0.0 + sd * (f64::from(decode_e4m3(code, ReadAsZero)) * a);
            let bits = (exact as f32).to_bits();
            let idx = j * out_f + o;
            if pow2
                && f64::from(exact as f32) == exact
                && want.y.get(idx).map(|y| y.to_bits()) == Some(bits)
                && got.get(idx).map(|y| y.to_bits()) == Some(bits)
            {
                set.insert(code);
            }
        }
    }
    set
}
