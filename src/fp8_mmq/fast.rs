//! The fast paths of [`oracle::fp8_mmq::quantize_activations`] and
//! [`oracle::fp8_mmq::mmq`] under every [`Schedule`]: the same bits, for
//! the gates and fuzzers at real shapes (DESIGN.md, principle 4).
//!
//! Only the spec in `core` is normative. These paths keep the spec's
//! per-element order exactly and gain their speed only *across* elements:
//! the quantizer vectorizes within a 128-value block (its maximum is
//! order-free, its encode elementwise) and splits rows over threads; the
//! GEMM keeps each output's chain (blocks in increasing order, one chained
//! accumulator per block in increasing k, the fold `sum + (s * d) * c`,
//! each operation rounded on its own: Rust never contracts `a * b + c` into
//! a fused multiply-add) and runs register tiles of outputs side by side in
//! SIMD lanes and panels of outputs on all cores (module `gemm`). E4M3 codes are
//! decoded and encoded by branch-free integer/float code (module `codec`) proven
//! equal to core's codec for every code and every `f32`.
//!
//! Under [`Accumulation::TensorCore`] the GEMM is core's own `mma_k32` per
//! output, in the spec's order, outputs split over all cores (module
//! `mma`); SIMD targets do not apply there.
//!
//! SIMD comes through runtime CPU-feature dispatch (`multiversion`): one
//! binary runs on any x86-64 host and uses AVX-512 or AVX2 where the CPU
//! has them ([`Simd::detected`]); [`mmq_v2_fast_with`] and
//! [`quantize_activations_fast_with`] pick a target by hand, so the tests
//! prove every target the host can run, not only the one it prefers.
//!
//! Proof: [`SpecRun::diff`] compares a fast target with the spec, bit for
//! bit (codes, scales and outputs); `fast_matches_spec` runs it on every
//! target the CPU has, from the `fp8_mmq_fast` fuzz target and the bolero
//! properties in `tests/fp8_mmq_props.rs`, which also force each target on
//! raw operands (every code, NaN and infinite scales).

mod codec;
mod gemm;
mod mma;
mod quantize;
mod raw;

pub use raw::{bounds as raw_bounds, check_raw, RawCase, RawData};

use super::generate::CaseData;
use oracle::fp8_mmq::{Accumulation, Fold, Schedule, Shape, ShapeError};

/// A SIMD target of the fast paths. Each has its own register tile and is
/// compiled with its target features; a target the CPU lacks runs the same
/// tile compiled for the baseline (still bit-identical, only slower).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Simd {
    /// Baseline x86-64 (SSE2), or any other architecture: `4 x 8` tile.
    Generic,
    /// x86-64 with AVX2: `6 x 16` tile in ymm registers.
    Avx2,
    /// x86-64 with AVX-512F and AVX-512BW: `8 x 32` tile in zmm registers.
    Avx512,
}

impl Simd {
    /// Every target, baseline first.
    pub const ALL: [Simd; 3] = [Simd::Generic, Simd::Avx2, Simd::Avx512];

    /// The name printed in reports and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Generic => "generic",
            Simd::Avx2 => "avx2",
            Simd::Avx512 => "avx512",
        }
    }

    /// Whether this CPU runs the target's own code (the same features
    /// `multiversion` detects before it picks that clone).
    pub fn is_available(self) -> bool {
        match self {
            Simd::Generic => true,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best target this CPU runs.
    pub fn detected() -> Simd {
        [Simd::Avx512, Simd::Avx2]
            .into_iter()
            .find(|s| s.is_available())
            .unwrap_or(Simd::Generic)
    }
}

/// Same contract, shapes and errors as [`oracle::fp8_mmq::mmq_v2`], and the
/// same output bits, on the best target of this CPU.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
pub fn mmq_v2_fast(
    shape: &Shape,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    mmq_fast_with(Simd::detected(), shape, &Schedule::V2, w, scales, q, d, y)
}

/// [`mmq_v2_fast`] on the target `simd` (see [`Simd`]: one the CPU lacks
/// runs its tile compiled for the baseline).
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
pub fn mmq_v2_fast_with(
    simd: Simd,
    shape: &Shape,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    mmq_fast_with(simd, shape, &Schedule::V2, w, scales, q, d, y)
}

/// Same contract, shapes and errors as [`oracle::fp8_mmq::mmq`] under
/// `schedule`, and the same output bits, on the best target of this CPU.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
pub fn mmq_fast(
    shape: &Shape,
    schedule: &Schedule,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    mmq_fast_with(Simd::detected(), shape, schedule, w, scales, q, d, y)
}

/// [`mmq_fast`] on the target `simd` (see [`Simd`]; the target matters only
/// under [`Accumulation::F32`]).
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
#[allow(clippy::too_many_arguments)]
pub fn mmq_fast_with(
    simd: Simd,
    shape: &Shape,
    schedule: &Schedule,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    oracle::fp8_mmq::check_gemm_operands(shape, w, scales, q, d, y)?;
    let ops = gemm::Operands {
        shape,
        w,
        scales,
        q,
        d,
        fold: schedule.fold,
    };
    match schedule.accumulation {
        Accumulation::F32 => gemm::gemm(simd, &ops, y),
        Accumulation::TensorCore(model) => {
            let f = Fold::ALL
                .iter()
                .position(|&x| x == schedule.fold)
                .expect("every fold is in Fold::ALL");
            let mut ys: [&mut [f32]; 4] = [&mut [], &mut [], &mut [], &mut []];
            ys[f] = y;
            mma::gemm(&model, &ops, ys);
        }
    }
    Ok(())
}

/// The GEMM under every fold of one accumulation: element `f` of the
/// result is [`oracle::fp8_mmq::mmq`] under `Schedule { fold:
/// Fold::ALL[f], accumulation }`, bit for bit, on the target `simd`.
/// Under [`Accumulation::TensorCore`] one pass computes the four (the
/// MMAs are shared), so this costs what one fold costs; under
/// [`Accumulation::F32`], four passes of the SIMD GEMM.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`.
#[allow(clippy::too_many_arguments)]
pub fn mmq_fast_all_folds(
    simd: Simd,
    shape: &Shape,
    accumulation: &Accumulation,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
) -> Result<[Vec<f32>; 4], ShapeError> {
    let mut ys: [Vec<f32>; 4] = std::array::from_fn(|_| vec![0f32; shape.out_len()]);
    oracle::fp8_mmq::check_gemm_operands(shape, w, scales, q, d, &ys[0])?;
    let mut ops = gemm::Operands {
        shape,
        w,
        scales,
        q,
        d,
        fold: Fold::Separate,
    };
    match accumulation {
        Accumulation::F32 => {
            for (y, fold) in ys.iter_mut().zip(Fold::ALL) {
                ops.fold = fold;
                gemm::gemm(simd, &ops, y);
            }
        }
        Accumulation::TensorCore(model) => {
            let [a, b, c, e] = &mut ys;
            mma::gemm(model, &ops, [a, b, c, e]);
        }
    }
    Ok(ys)
}

/// The SIMD targets whose code differs under `schedule`: every target
/// under [`Accumulation::F32`], only [`Simd::Generic`] under
/// [`Accumulation::TensorCore`] (whose fast path has no SIMD tile), so
/// proofs run each distinct code path once.
pub fn targets_for(schedule: &Schedule) -> &'static [Simd] {
    match schedule.accumulation {
        Accumulation::F32 => &Simd::ALL,
        Accumulation::TensorCore(_) => &[Simd::Generic],
    }
}

/// Same contract, shapes and errors as
/// [`oracle::fp8_mmq::quantize_activations`], and the same codes and
/// scales, on the best target of this CPU.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
pub fn quantize_activations_fast(
    shape: &Shape,
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
) -> Result<(), ShapeError> {
    quantize_activations_fast_with(Simd::detected(), shape, x, q, d)
}

/// [`quantize_activations_fast`] on the target `simd`.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing
/// is written then.
pub fn quantize_activations_fast_with(
    simd: Simd,
    shape: &Shape,
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
) -> Result<(), ShapeError> {
    oracle::fp8_mmq::check_quantize_operands(shape, x, q, d)?;
    quantize::quantize(simd, shape, x, q, d);
    Ok(())
}

/// The spec's answers for one set of operands, to compare fast targets
/// with: the quantizer's `q` and `d` for `x`, and the GEMM's `y` under one
/// [`Schedule`] for the GEMM operand (the given `(q, d)` when there is
/// one, as in the FOLD arm and in [`super::reference`], else the
/// quantizer's).
#[derive(Clone, Debug)]
pub struct SpecRun<'a> {
    shape: Shape,
    schedule: Schedule,
    w: &'a [u8],
    scales: &'a [f32],
    x: &'a [f32],
    operand: Option<(&'a [u8], &'a [f32])>,
    q: Vec<u8>,
    d: Vec<f32>,
    y: Vec<f32>,
}

impl<'a> SpecRun<'a> {
    /// Runs the spec on a case's data under `schedule`.
    pub fn from_case(data: &'a CaseData, schedule: Schedule) -> SpecRun<'a> {
        let operand = data.qd.as_ref().map(|(q, d)| (q.as_slice(), d.as_slice()));
        SpecRun::new(
            data.shape,
            schedule,
            &data.w,
            &data.scales,
            &data.x,
            operand,
        )
        .expect("case data lengths come from the shape")
    }

    /// Runs the spec quantizer on `x` and the spec GEMM under `schedule`
    /// on `operand`, or on the quantizer's output when `operand` is `None`.
    ///
    /// # Errors
    /// A length that disagrees with `shape`.
    pub fn new(
        shape: Shape,
        schedule: Schedule,
        w: &'a [u8],
        scales: &'a [f32],
        x: &'a [f32],
        operand: Option<(&'a [u8], &'a [f32])>,
    ) -> Result<SpecRun<'a>, ShapeError> {
        let mut q = vec![0u8; shape.q_len()];
        let mut d = vec![0f32; shape.d_len()];
        oracle::fp8_mmq::quantize_activations(&shape, x, &mut q, &mut d)?;
        let mut y = vec![0f32; shape.out_len()];
        let (gq, gd) = operand.unwrap_or((&q, &d));
        oracle::fp8_mmq::mmq(&shape, &schedule, w, scales, gq, gd, &mut y)?;
        Ok(SpecRun {
            shape,
            schedule,
            w,
            scales,
            x,
            operand,
            q,
            d,
            y,
        })
    }

    /// The schedule the GEMM ran under.
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    /// Runs target `simd`'s quantizer and GEMM (under the same schedule) on
    /// the same operands and returns the first difference from the spec,
    /// described, or `None`
    /// when every code, every scale and every output has the spec's bits.
    ///
    /// Outputs that are NaN on both sides count as equal whatever their
    /// bits: which NaN an operation on two NaNs returns is not something
    /// Rust (or IEEE 754) fixes, and the spec is compiled for the baseline
    /// target, the fast path for others. Every other bit pattern, `-0.0`
    /// and infinities included, must match exactly.
    pub fn diff(&self, simd: Simd) -> Option<String> {
        let s = &self.shape;
        let mut q = vec![0u8; s.q_len()];
        let mut d = vec![0f32; s.d_len()];
        quantize_activations_fast_with(simd, s, self.x, &mut q, &mut d)
            .expect("lengths come from the shape");
        if let Some(idx) = (0..q.len()).find(|&k| q[k] != self.q[k]) {
            let (j, k) = (idx / s.in_f_pad(), idx % s.in_f_pad());
            return Some(format!(
                "quantizer code at (row j={j}, k={k}) (x = {}): fast 0x{:02X}, spec 0x{:02X}",
                self.x_at(j, k),
                q[idx],
                self.q[idx]
            ));
        }
        if let Some(idx) = (0..d.len()).find(|&b| d[b].to_bits() != self.d[b].to_bits()) {
            let blocks = s.act_blocks();
            return Some(format!(
                "quantizer scale at (row j={}, block {}): fast {:e} (0x{:08X}), spec {:e} (0x{:08X})",
                idx / blocks,
                idx % blocks,
                d[idx],
                d[idx].to_bits(),
                self.d[idx],
                self.d[idx].to_bits()
            ));
        }
        let (gq, gd) = self.operand.unwrap_or((&self.q, &self.d));
        let mut y = vec![0f32; s.out_len()];
        mmq_fast_with(simd, s, &self.schedule, self.w, self.scales, gq, gd, &mut y)
            .expect("lengths come from the shape");
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let bad: Vec<usize> = (0..y.len()).filter(|&k| !same(y[k], self.y[k])).collect();
        let &first = bad.first()?;
        Some(format!(
            "GEMM output under {}: {} of {} differ; first at (row j={}, col i={}): fast {:e} (0x{:08X}), spec {:e} (0x{:08X})",
            self.schedule,
            bad.len(),
            y.len(),
            first / s.out_f(),
            first % s.out_f(),
            y[first],
            y[first].to_bits(),
            self.y[first],
            self.y[first].to_bits()
        ))
    }

    fn x_at(&self, j: usize, k: usize) -> String {
        if k < self.shape.in_f() {
            let v = self.x[j * self.shape.in_f() + k];
            format!("{v:e} (0x{:08X})", v.to_bits())
        } else {
            "padding +0.0".into()
        }
    }
}
