//! Cases for judging an FP8 GEMM with row or tensor scales (torch
//! `_scaled_mm`, CUTLASS and Triton scaled mm) bit for bit under the
//! schedule it declares ([`oracle::fp8_scaled_mm::Schedule`]), and for
//! naming the known schedules its output matches: which accumulation
//! (a tensor-core chain over all of k, or promoted to f32 every so many
//! k) and which epilogue association.
//!
//! A case (elements, row-major, k fastest): activations `q [m][in_f]` and
//! weights `w [out_f][in_f]`, e4m3 codes; scales `d [m]` and `s [out_f]`,
//! f32; the output `y [m][out_f]`, f32, or rounded once to bf16 or f16.

use crate::rng::Rng;
use oracle::dtype::Dtype;
use oracle::fp8_mmq::ShapeError;
use oracle::fp8_scaled_mm::{
    dot, Accumulation, Epilogue, Operands, Schedule, Shape, PROMOTE_CANDIDATES,
};
use oracle::tensor_core::{Fp8Kind, SM90_WGMMA};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at one question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Every product 0 or ±1, non-zero only in the first 8192 k: every
    /// partial sum is an integer of at most 14 bits, so every accumulation
    /// gives the same exact dot product and the output shows the epilogue,
    /// the scales' indexing and the operands' layout alone. Two codes are
    /// NaN (rule `SMM-OPERANDS`): `w[out_f / 2][0] = 0x7F`, so output
    /// column `out_f / 2` is NaN, and with `m >= 2` `q[m / 2][0] = 0xFF`,
    /// so output row `m / 2` is NaN, under every schedule: a kernel that
    /// reads a NaN code as a number (zero, or 448 as a saturating decode
    /// would) fails there.
    Exact,
    /// Random finite codes over e4m3's whole range, random scales: the
    /// tensor core's 14-bit truncation shows in most outputs, so the
    /// accumulation (fast, or the promotion interval) shows too.
    Rand,
    /// One large activation (2^4 to 2^8) at the start of every 32 k, the
    /// rest small (2^-6 to 2^-1), weights ±1 or ±2: what a chain carries
    /// across a promotion boundary truncates the small products by the
    /// large one before it, so each promotion interval gives other bits.
    Spike,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 3] = [Arm::Exact, Arm::Rand, Arm::Spike];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Exact => "EXACT",
            Arm::Rand => "RAND",
            Arm::Spike => "SPIKE",
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

/// The largest case: `m in_f + out_f in_f` codes at most this.
pub const MAX_CODES: usize = 1 << 26;

/// The most outputs a case has (`m out_f`, 16 MiB of f32): a check keeps
/// about six arrays of that many elements (the callable's output, the
/// oracle's, both as bits, the differing indices), and identification's
/// cost per output does not shrink with k.
pub const MAX_OUT: usize = 1 << 22;

/// The most multiply-adds a case takes (`m out_f in_f`): identification
/// computes a case under every known accumulation (about 11) in the MMA
/// model.
pub const MAX_WORK: usize = 1 << 28;

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
}

/// A case's operands (see the module documentation for the layouts).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[m][in_f]` e4m3 codes.
    pub q: Vec<u8>,
    /// `[m]`.
    pub d: Vec<f32>,
    /// `[out_f][in_f]` e4m3 codes.
    pub w: Vec<u8>,
    /// `[out_f]`.
    pub s: Vec<f32>,
}

impl Case {
    /// The operands as the oracle takes them (both e4m3).
    pub fn operands(&self) -> Operands<'_> {
        Operands {
            q_kind: Fp8Kind::E4m3,
            q: &self.q,
            d: &self.d,
            w_kind: Fp8Kind::E4m3,
            w: &self.w,
            s: &self.s,
        }
    }
}

/// The oracle's shape of an `m x in_f` by `out_f x in_f` GEMM, refused
/// past the check's caps (which bound a case's memory and
/// identification's time: about 13 s at [`MAX_WORK`] on two cores).
///
/// # Errors
/// A zero or overflowing dimension; `m in_f + out_f in_f` over
/// [`MAX_CODES`], `m out_f` over [`MAX_OUT`] or `m out_f in_f` over
/// [`MAX_WORK`], as a sentence naming the shape and the cap.
pub fn within_caps(m: usize, in_f: usize, out_f: usize) -> Result<Shape, String> {
    let shape = Shape::new(m, in_f, out_f).map_err(|e| e.to_string())?;
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

/// An e4m3 code of `±2^e` (e in -6..=8).
fn pow2_code(e: i32, neg: bool) -> u8 {
    (((e + 7) as u8) << 3) | if neg { 0x80 } else { 0 }
}

/// A random finite e4m3 code (not a NaN).
fn finite_code(rng: &mut Rng) -> u8 {
    loop {
        let c = rng.u8();
        if c & 0x7F != 0x7F {
            return c;
        }
    }
}

/// A random scale: `(1 + f) 2^e`, `f` in `[0, 1)` with 24 bits, `e` in
/// -10..=2.
fn scale(rng: &mut Rng) -> f32 {
    (1.0 + rng.f01()) * 2f32.powi(rng.below(13) as i32 - 10)
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(m: usize, in_f: usize, out_f: usize, arm: Arm) -> u64 {
        0x5CA1_ED00_0000_0000
            ^ ((m as u64) << 40)
            ^ ((in_f as u64) << 16)
            ^ ((out_f as u64) << 2)
            ^ Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// A zero or overflowing dimension; a case over [`MAX_CODES`],
    /// [`MAX_OUT`] or [`MAX_WORK`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.m, self.in_f, self.out_f)
    }

    /// The operands, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`].
    pub fn generate(&self) -> Result<Case, String> {
        self.shape()?;
        let mut rng = Rng(self.seed);
        let (m, k, n) = (self.m, self.in_f, self.out_f);
        let mut q = vec![0u8; m * k];
        let mut w = vec![0u8; n * k];
        match self.arm {
            Arm::Exact => {
                let one = |rng: &mut Rng| match rng.below(3) {
                    0 => 0,
                    1 => pow2_code(0, false),
                    _ => pow2_code(0, true),
                };
                for rows in [&mut q, &mut w] {
                    for row in rows.chunks_mut(k) {
                        for c in row.iter_mut().take(8192) {
                            *c = one(&mut rng);
                        }
                    }
                }
                // SMM-OPERANDS: one NaN weight row and, past one token, one
                // NaN activation row (both NaN encodings).
                w[(n / 2) * k] = 0x7F;
                if m >= 2 {
                    q[(m / 2) * k] = 0xFF;
                }
            }
            Arm::Rand => {
                for c in q.iter_mut().chain(w.iter_mut()) {
                    *c = finite_code(&mut rng);
                }
            }
            Arm::Spike => {
                for row in q.chunks_mut(k) {
                    for (i, c) in row.iter_mut().enumerate() {
                        let neg = rng.below(2) == 1;
                        *c = if i % 32 == 0 {
                            pow2_code(4 + rng.below(5) as i32, neg)
                        } else {
                            pow2_code(-6 + rng.below(6) as i32, neg)
                        };
                    }
                }
                for c in w.iter_mut() {
                    *c = pow2_code(rng.below(2) as i32, rng.below(2) == 1);
                }
            }
        }
        let d = (0..m).map(|_| scale(&mut rng)).collect();
        let s = (0..n).map(|_| scale(&mut rng)).collect();
        Ok(Case { q, d, w, s })
    }
}

/// The f32 outputs of `case` under `schedule`, rows in parallel.
///
/// # Errors
/// A shape error (see [`oracle::fp8_scaled_mm::check_operands`]).
///
/// # Panics
/// If `schedule` is not valid ([`Schedule::is_valid`]).
pub fn reference(shape: &Shape, case: &Case, schedule: &Schedule) -> Result<Vec<f32>, ShapeError> {
    let x = case.operands();
    let (in_f, out_f) = (shape.in_f(), shape.out_f());
    let mut y = vec![0f32; shape.m() * out_f];
    oracle::fp8_scaled_mm::check_operands(shape, &x, y.len())?;
    assert!(schedule.is_valid(), "promote is a multiple of 32");
    y.par_chunks_mut(out_f).enumerate().for_each(|(j, row)| {
        let qrow = &x.q[j * in_f..(j + 1) * in_f];
        for (i, out) in row.iter_mut().enumerate() {
            let wrow = &x.w[i * in_f..(i + 1) * in_f];
            let acc = dot(schedule.accumulation, x.q_kind, qrow, x.w_kind, wrow);
            *out = schedule.epilogue.apply(acc, x.d[j], x.s[i]);
        }
    });
    Ok(y)
}

/// The accumulations identification tries for reduction length `in_f`:
/// binary32 in k order, the sm_90 `wgmma` chain over all of k, and the
/// chain promoted every `p` k for each [`PROMOTE_CANDIDATES`] `p` below
/// `in_f` (at or above it, promotion is the one chain).
pub fn known_accumulations(in_f: usize) -> Vec<Accumulation> {
    let mut v = vec![
        Accumulation::F32,
        Accumulation::TensorCore {
            model: SM90_WGMMA,
            promote: None,
        },
    ];
    v.extend(
        PROMOTE_CANDIDATES
            .iter()
            .filter(|&&p| p < in_f)
            .map(|&p| Accumulation::TensorCore {
                model: SM90_WGMMA,
                promote: Some(p),
            }),
    );
    v
}

/// A schedule in one line: `wgmma, promote every 128 k, (acc*d)*s`.
pub fn schedule_label(s: &Schedule) -> String {
    let acc = match s.accumulation {
        Accumulation::F32 => "f32 in k order".to_string(),
        Accumulation::TensorCore { model, promote } => {
            let name = match model.instruction {
                oracle::tensor_core::Instruction::Wgmma => "wgmma",
                oracle::tensor_core::Instruction::MmaSync => "mma.sync",
            };
            match promote {
                None => format!("{name}, one chain"),
                Some(p) => format!("{name}, promote every {p} k"),
            }
        }
    };
    format!("{acc}, {}", s.epilogue.name())
}

/// The known schedules (every known accumulation for `shape.in_f()` with
/// every epilogue) whose outputs, in `out`, equal `got` bit for bit
/// everywhere (`got` holds `out`'s bits widened to 32, as
/// [`Dtype::encode`] gives them). Each accumulation's dot products are
/// computed once for the three epilogues.
///
/// # Errors
/// A shape error, or `got` of the wrong length.
pub fn identify(
    shape: &Shape,
    case: &Case,
    out: Dtype,
    got: &[u32],
) -> Result<Vec<Schedule>, String> {
    let (m, in_f, out_f) = (shape.m(), shape.in_f(), shape.out_f());
    if got.len() != m * out_f {
        return Err(format!(
            "got has {} elements, the shape needs {}",
            got.len(),
            m * out_f
        ));
    }
    let x = case.operands();
    oracle::fp8_scaled_mm::check_operands(shape, &x, got.len()).map_err(|e| e.to_string())?;
    let mut found = Vec::new();
    for accumulation in known_accumulations(in_f) {
        // Per epilogue, whether every output matches.
        let matches = (0..m)
            .into_par_iter()
            .map(|j| {
                let qrow = &x.q[j * in_f..(j + 1) * in_f];
                let mut ok = [true; 3];
                for i in 0..out_f {
                    let wrow = &x.w[i * in_f..(i + 1) * in_f];
                    let acc = dot(accumulation, x.q_kind, qrow, x.w_kind, wrow);
                    for (e, ep) in Epilogue::ALL.iter().enumerate() {
                        let want = out.encode(ep.apply(acc, x.d[j], x.s[i]));
                        ok[e] &= out.same(want, got[j * out_f + i]);
                    }
                }
                ok
            })
            .reduce(|| [true; 3], |a, b| [a[0] & b[0], a[1] & b[1], a[2] & b[2]]);
        for (e, ep) in Epilogue::ALL.iter().enumerate() {
            if matches[e] {
                found.push(Schedule {
                    accumulation,
                    epilogue: *ep,
                });
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(arm: Arm, in_f: usize) -> Spec {
        Spec {
            m: 4,
            in_f,
            out_f: 24,
            arm,
            seed: Spec::base_seed(4, in_f, 24, arm),
        }
    }

    fn all(in_f: usize) -> Vec<Schedule> {
        known_accumulations(in_f)
            .into_iter()
            .flat_map(|a| {
                Epilogue::ALL.map(|e| Schedule {
                    accumulation: a,
                    epilogue: e,
                })
            })
            .collect()
    }

    #[test]
    fn each_schedule_identifies_itself() {
        for arm in Arm::ALL {
            let sp = spec(arm, 300);
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            for sch in all(300) {
                let y = reference(&shape, &case, &sch).unwrap();
                let got: Vec<u32> = y.iter().map(|&v| Dtype::F32.encode(v)).collect();
                let found = identify(&shape, &case, Dtype::F32, &got).unwrap();
                assert!(found.contains(&sch), "{arm:?}: {sch:?} not found");
            }
        }
    }

    #[test]
    fn exact_agrees_across_accumulations_and_rand_and_spike_do_not() {
        let sp = spec(Arm::Exact, 9000);
        let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
        let ys: Vec<Vec<f32>> = known_accumulations(9000)
            .into_iter()
            .map(|a| {
                let sch = Schedule {
                    accumulation: a,
                    epilogue: Epilogue::WeightFirst,
                };
                reference(&shape, &case, &sch).unwrap()
            })
            .collect();
        // Bit for bit, any NaN equal to any NaN (the MMA model's NaN is
        // 0x7FFF_FFFF, binary32 arithmetic's the operand's).
        let same = |a: &Vec<f32>, b: &Vec<f32>| {
            a.iter()
                .zip(b)
                .all(|(x, y)| Dtype::F32.same(x.to_bits(), y.to_bits()))
        };
        assert!(ys.iter().all(|y| same(y, &ys[0])), "EXACT is order-free");
        // SMM-OPERANDS: the NaN weight row's column and the NaN activation
        // row's outputs are NaN, every other output finite.
        let (m, n) = (shape.m(), shape.out_f());
        for (at, v) in ys[0].iter().enumerate() {
            let (j, i) = (at / n, at % n);
            assert_eq!(
                v.is_nan(),
                i == n / 2 || (m >= 2 && j == m / 2),
                "({j}, {i})"
            );
        }
        for arm in [Arm::Rand, Arm::Spike] {
            let sp = spec(arm, 1024);
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            let accs = known_accumulations(1024);
            let ys: Vec<Vec<f32>> = accs
                .iter()
                .map(|&a| {
                    let sch = Schedule {
                        accumulation: a,
                        epilogue: Epilogue::WeightFirst,
                    };
                    reference(&shape, &case, &sch).unwrap()
                })
                .collect();
            for a in 0..ys.len() {
                for b in a + 1..ys.len() {
                    assert_ne!(
                        ys[a], ys[b],
                        "{arm:?} parts {:?} and {:?}",
                        accs[a], accs[b]
                    );
                }
            }
        }
    }

    #[test]
    fn reference_is_cores_scaled_mm() {
        for arm in Arm::ALL {
            let sp = spec(arm, 300);
            let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
            for sch in all(300) {
                let mut y = vec![0f32; shape.m() * shape.out_f()];
                oracle::fp8_scaled_mm::scaled_mm(&shape, &sch, &case.operands(), &mut y).unwrap();
                let r = reference(&shape, &case, &sch).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&r), bits(&y), "{arm:?} {sch:?}");
            }
        }
    }

    #[test]
    fn rounding_to_bf16_keeps_what_it_can_tell_apart() {
        let sp = spec(Arm::Rand, 512);
        let (shape, case) = (sp.shape().unwrap(), sp.generate().unwrap());
        let sch = Schedule {
            accumulation: Accumulation::TensorCore {
                model: SM90_WGMMA,
                promote: Some(128),
            },
            epilogue: Epilogue::ActivationFirst,
        };
        let y = reference(&shape, &case, &sch).unwrap();
        let got: Vec<u32> = y.iter().map(|&v| Dtype::Bf16.encode(v)).collect();
        let found = identify(&shape, &case, Dtype::Bf16, &got).unwrap();
        assert!(found.contains(&sch));
        assert!(!found.iter().any(|f| f.accumulation == Accumulation::F32));
    }

    #[test]
    fn caps_and_names() {
        let mut sp = spec(Arm::Rand, 64);
        sp.m = 1 << 20;
        sp.out_f = 1 << 10;
        assert!(sp.shape().is_err());
        // Outputs are capped on their own: a k of 1 keeps the work small.
        let e = within_caps(1 << 12, 1, 1 << 11).unwrap_err();
        assert!(e.contains("outputs"), "{e}");
        assert!(within_caps(1 << 11, 1, 1 << 11).is_ok());
        assert_eq!(Arm::parse("spike"), Ok(Arm::Spike));
        assert!(Arm::parse("x").is_err());
        assert_eq!(crate::dtype::parse_dtype("bfloat16"), Ok(Dtype::Bf16));
    }
}
