//! The FP8 GEMM with one scale per activation row and one per weight row
//! ("scaled mm"; a per-tensor scale is the same scale on every row):
//! torch's `_scaled_mm` (rowwise or tensorwise), vLLM's `cutlass_scaled_mm`
//! and `triton_scaled_mm`, and any Triton kernel that takes an FP8
//! `tl.dot` over the whole of k and scales in its epilogue.
//!
//! `y[j, i] = epilogue(acc[j, i], d[j], s[i])` (rule `SMM-EPILOGUE`), where
//! `acc[j, i]` is the dot product of activation row `j` and weight row `i`
//! over all `in_f` (rule `SMM-ACC`). Unlike the block-scaled GEMM
//! ([`crate::fp8_mmq`]), no scale enters before the end, so how the
//! products are accumulated over the whole of k is the question: a tensor
//! core's FP8 accumulator keeps about 14 bits ([`crate::tensor_core`],
//! rule `TC-NORM`), and kernels differ in whether and how often they move
//! it into an f32 sum ("promotion": DeepSeek-V3 technical report, section
//! 3.3.2; Triton's `max_num_imprecise_acc`; torch `_scaled_mm`'s
//! `use_fast_accum`, which selects cuBLASLt's `CUBLASLT_MATMUL_DESC_FAST_ACCUM`).
//! A [`Schedule`] names that choice and the epilogue's association; every
//! schedule is computed bit for bit by [`scaled_mm`].
//!
//! Shapes (elements, row-major, k fastest), with the names of
//! [`crate::fp8_mmq`]: activations `q [m][in_f]`, weights `w
//! [out_f][in_f]` (torch's `b.t()`, the `nn.Linear` layout), scales `d [m]`
//! and `s [out_f]` (f32), output `y [m][out_f]` (f32; a kernel's bf16 or
//! f16 output is this value rounded once, to nearest even:
//! [`crate::bf16::encode_bf16`], [`crate::f16::encode_f16`]).
//!
//! The rules, for one output `(j, i)`:
//!
//! 1. `SMM-OPERANDS`: every code is read as the tensor cores read it (NaN
//!    codes are NaN: [`crate::conventions::NanMagnitude::Ieee`]). Past
//!    `in_f` the operands are zero codes (the k tail: a kernel pads its
//!    last k tile with zeros, which no rule below lets count).
//! 2. `SMM-ACC`: by the schedule's [`Accumulation`]:
//!    - [`Accumulation::F32`]: `acc = +0.0`, then `acc = acc + q[j][k] *
//!      w[i][k]` for `k = 0, 1, ..., in_f - 1`, each product exact (two
//!      FP8 significands of at most 4 bits) and each addition rounded to
//!      nearest even;
//!    - [`Accumulation::TensorCore`]: the k axis is cut into chunks of
//!      `promote` elements (the last one shorter; one chunk of all of
//!      `in_f` when `promote` is `None`); in each chunk, in increasing k,
//!      the model's k = 32 MMAs ([`crate::tensor_core::mma_k32`]) are
//!      chained through the MMA's accumulator from `+0.0`, and the chunk's
//!      result `c` is added into `acc` (`acc = acc + c`, one binary32
//!      addition rounded to nearest even, `acc` starting at `+0.0`).
//! 3. `SMM-EPILOGUE`: by the schedule's [`Epilogue`], each multiply rounded
//!    to nearest even.
//!
//! Who promotes how (the chunks of `SMM-ACC` start at k = 0 and at every
//! multiple of `promote`):
//! - Triton's sm_90 lowering of an FP8 `tl.dot` (`WGMMA.cpp`, `convertDot`,
//!   and `WarpGroupDotOp::needsPartialAccumulator`): with
//!   `max_num_imprecise_acc = p <= BLOCK_K` (`tl.dot` refuses `p >
//!   BLOCK_K`), each `tl.dot` chains its k = 32 `wgmma`s from zero into a
//!   partial accumulator and adds it to the loop's accumulator (`fadd`)
//!   after every `p` k and after its last `wgmma`; so `p` dividing
//!   `BLOCK_K` is `promote = p`, and `p <= 32` (0 included) is `promote =
//!   32`. A `p` that does not divide `BLOCK_K` restarts its count at every
//!   tile: not this contract. Unset, `p` is the backend's default, `2**30`
//!   on sm_90: no partial accumulator, the loop's accumulator is the
//!   `wgmma` chain's over all of k (`promote = None`).
//! - CUTLASS's sm_90 FP8 mainloop without `FP8FastAccum`
//!   (`GmmaFP8Accumulation`): the MMAs of `mma_promotion_interval` (default
//!   4) k = 32 steps chained from zero, then added in f32: `promote = 128`.
//!   With `FP8FastAccum`, one chain (`promote = None`).
//! - DeepSeek-V3 (technical report, section 3.3.2): an interval of 128
//!   elements (4 WGMMAs), `promote = 128`.
//!
//! The k tail: a kernel that zero-fills its last k tile (Triton's masked
//! `tl.load(..., other=0)`, CUTLASS's TMA) runs whole MMAs of zero codes
//! past `in_f`; under the model such an MMA returns its accumulator
//! unchanged (it already has at most 14 significant bits, `TC-NORM`; a
//! chunk of zeros gives +0.0, and `acc + 0.0 = acc` for `acc != -0.0`,
//! which `acc` never is), so the extra MMAs and chunks change no bit.
//!
//! Source: torch `_scaled_mm` (`aten/src/ATen/native/cuda/Blas.cpp`:
//! rowwise scales go to cuBLASLt with CUDA 12.9 or later on sm_90, else to
//! the CUTLASS kernel `f8f8bf16_rowwise` in `RowwiseScaledMM.cu`, whose
//! epilogue is `w_scale * (x_scale * acc)`, `(acc*d)*s`, and which writes
//! bfloat16 only) and cuBLASLt's `CUBLASLT_MATMUL_DESC_FAST_ACCUM` (cuBLAS
//! documentation, "cublasLtMatmulDescAttributes_t"); Triton's `tl.dot` on
//! FP8 operands and its `max_num_imprecise_acc` (above); CUTLASS
//! `include/cutlass/gemm/collective/fp8_accumulation.hpp`; vLLM's
//! `csrc/quantization/cutlass_w8a8` epilogue `ScaleA * (ScaleB * Accum)`
//! and `triton_scaled_mm`'s `accumulator * scale_a * scale_b`; the sm_90
//! MMA model of [`crate::tensor_core`].

use crate::fp8_mmq::ShapeError;
use crate::tensor_core::{mma_k32, Fp8Kind, Model, MMA_K};

/// How the k products of one output are summed (rule `SMM-ACC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accumulation {
    /// One binary32 accumulator over every product in increasing k, each
    /// addition rounded to nearest even: what a CUDA-core kernel in k
    /// order computes. A tensor-core kernel's order differs, so a kernel
    /// declaring it is held to it bit for bit only where every order gives
    /// the same bits.
    F32,
    /// The FP8 MMA `model`, chained over chunks of `promote` k (a multiple
    /// of 32; `None`: one chunk over all of k), each chunk's result added
    /// into an f32 sum (which kernel does which: the module
    /// documentation).
    TensorCore {
        /// The MMA instruction's arithmetic.
        model: Model,
        /// Elements of k accumulated in the MMA before each promotion to the
        /// f32 sum; `None` never promotes (one chain over all of k).
        promote: Option<usize>,
    },
}

/// How the scales enter the output (rule `SMM-EPILOGUE`), with `acc` the
/// dot product, `d` the activation row's scale and `s` the weight row's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `(acc * d) * s`: Triton's `accumulator * scale_a * scale_b`
    /// (left to right; vLLM's `triton_scaled_mm`).
    ActivationFirst,
    /// `(acc * s) * d`: CUTLASS's `ScaleA * (ScaleB * Accum)` (vLLM's
    /// `cutlass_scaled_mm` epilogue on sm_90).
    WeightFirst,
    /// `acc * (d * s)`: the two scales multiplied first (one scale per
    /// output, as a per-tensor kernel that folds `scale_a * scale_b` does).
    ScalesFirst,
}

impl Epilogue {
    /// Every epilogue, [`Epilogue::ActivationFirst`] first.
    pub const ALL: [Epilogue; 3] = [
        Epilogue::ActivationFirst,
        Epilogue::WeightFirst,
        Epilogue::ScalesFirst,
    ];

    /// The output of `acc` under this epilogue.
    pub fn apply(self, acc: f32, d: f32, s: f32) -> f32 {
        match self {
            Epilogue::ActivationFirst => (acc * d) * s,
            Epilogue::WeightFirst => (acc * s) * d,
            Epilogue::ScalesFirst => acc * (d * s),
        }
    }

    /// The epilogue's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Epilogue::ActivationFirst => "(acc*d)*s",
            Epilogue::WeightFirst => "(acc*s)*d",
            Epilogue::ScalesFirst => "acc*(d*s)",
        }
    }
}

/// A declared arithmetic of the scaled FP8 GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// How the products are summed.
    pub accumulation: Accumulation,
    /// How the scales enter.
    pub epilogue: Epilogue,
}

impl Schedule {
    /// Whether `promote` (when a tensor-core accumulation gives one) is a
    /// positive multiple of the MMA's k (32).
    pub fn is_valid(&self) -> bool {
        match self.accumulation {
            Accumulation::TensorCore {
                promote: Some(p), ..
            } => p > 0 && p % MMA_K == 0,
            _ => true,
        }
    }
}

/// The promotion intervals identification tries ([`Accumulation`]'s
/// `promote`), besides `None`: every power of two from the MMA's k to 8192
/// elements.
pub const PROMOTE_CANDIDATES: [usize; 9] = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192];

/// `m`, `in_f`, `out_f` of one GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    m: usize,
    in_f: usize,
    out_f: usize,
}

impl Shape {
    /// A shape, each dimension at least 1, every buffer's length (and byte
    /// size) within `usize`.
    ///
    /// # Errors
    /// [`ShapeError::Zero`], [`ShapeError::Overflow`].
    pub fn new(m: usize, in_f: usize, out_f: usize) -> Result<Shape, ShapeError> {
        for (dim, v) in [("m", m), ("in_f", in_f), ("out_f", out_f)] {
            if v == 0 {
                return Err(ShapeError::Zero { dim });
            }
        }
        let fits = |a: usize, b: usize| a.checked_mul(b).and_then(|n| n.checked_mul(4));
        if fits(m, in_f).is_none() || fits(out_f, in_f).is_none() || fits(m, out_f).is_none() {
            return Err(ShapeError::Overflow { m, in_f, out_f });
        }
        Ok(Shape { m, in_f, out_f })
    }

    /// Activation rows.
    pub fn m(&self) -> usize {
        self.m
    }

    /// The reduction length k.
    pub fn in_f(&self) -> usize {
        self.in_f
    }

    /// Weight rows (outputs per activation row).
    pub fn out_f(&self) -> usize {
        self.out_f
    }
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), ShapeError> {
    if want == got {
        Ok(())
    } else {
        Err(ShapeError::Len { arg, want, got })
    }
}

/// The operands of [`scaled_mm`]: FP8 codes and their formats, and the
/// scales.
#[derive(Clone, Copy, Debug)]
pub struct Operands<'a> {
    /// The activations' format.
    pub q_kind: Fp8Kind,
    /// Activation codes `[m][in_f]`.
    pub q: &'a [u8],
    /// Activation row scales `[m]`.
    pub d: &'a [f32],
    /// The weights' format.
    pub w_kind: Fp8Kind,
    /// Weight codes `[out_f][in_f]`.
    pub w: &'a [u8],
    /// Weight row scales `[out_f]`.
    pub s: &'a [f32],
}

/// Checks `x`'s lengths against `shape`, in the order `q`, `d`, `w`, `s`,
/// `y`.
///
/// # Errors
/// [`ShapeError::Len`] naming the first wrong one.
pub fn check_operands(shape: &Shape, x: &Operands<'_>, y_len: usize) -> Result<(), ShapeError> {
    let (m, in_f, out_f) = (shape.m, shape.in_f, shape.out_f);
    len("q", m * in_f, x.q.len())?;
    len("d", m, x.d.len())?;
    len("w", out_f * in_f, x.w.len())?;
    len("s", out_f, x.s.len())?;
    len("y", m * out_f, y_len)
}

/// The dot product of `q` and `w` (one activation row, one weight row,
/// `in_f` codes each) under `accumulation` (rule `SMM-ACC`).
///
/// # Panics
/// If the rows' lengths differ, or `accumulation` is not valid
/// ([`Schedule::is_valid`]).
pub fn dot(accumulation: Accumulation, qk: Fp8Kind, q: &[u8], wk: Fp8Kind, w: &[u8]) -> f32 {
    assert_eq!(q.len(), w.len(), "rows of one length");
    let in_f = q.len();
    match accumulation {
        Accumulation::F32 => {
            let mut acc = 0.0f32;
            for (&a, &b) in q.iter().zip(w) {
                acc += qk.decode(a) * wk.decode(b);
            }
            acc
        }
        Accumulation::TensorCore { model, promote } => {
            let chunk = promote.unwrap_or(in_f.next_multiple_of(MMA_K));
            assert!(
                chunk > 0 && chunk % MMA_K == 0,
                "promote is a multiple of 32"
            );
            let mut acc = 0.0f32;
            let mut k0 = 0;
            while k0 < in_f {
                let end = (k0 + chunk).min(in_f);
                let mut c = 0.0f32;
                let mut k = k0;
                while k < end {
                    let (mut a32, mut b32) = ([0u8; MMA_K], [0u8; MMA_K]);
                    let n = (end - k).min(MMA_K);
                    a32[..n].copy_from_slice(&q[k..k + n]);
                    b32[..n].copy_from_slice(&w[k..k + n]);
                    c = mma_k32(&model, qk, &a32, wk, &b32, c);
                    k += MMA_K;
                }
                acc += c;
                k0 = end;
            }
            acc
        }
    }
}

/// The scaled FP8 GEMM under `schedule`: `y[j][i] = epilogue(dot(q[j],
/// w[i]), d[j], s[i])` for every activation row `j` and weight row `i`
/// (rules `SMM-*` in the module documentation).
///
/// # Errors
/// [`ShapeError::Len`] (see [`check_operands`]); nothing is written then.
///
/// # Panics
/// If `schedule` is not valid ([`Schedule::is_valid`]).
pub fn scaled_mm(
    shape: &Shape,
    schedule: &Schedule,
    x: &Operands<'_>,
    y: &mut [f32],
) -> Result<(), ShapeError> {
    check_operands(shape, x, y.len())?;
    assert!(schedule.is_valid(), "promote is a multiple of 32");
    let in_f = shape.in_f;
    for (j, yrow) in y.chunks_exact_mut(shape.out_f).enumerate() {
        let qrow = &x.q[j * in_f..(j + 1) * in_f];
        for (i, out) in yrow.iter_mut().enumerate() {
            let wrow = &x.w[i * in_f..(i + 1) * in_f];
            let acc = dot(schedule.accumulation, x.q_kind, qrow, x.w_kind, wrow);
            *out = schedule.epilogue.apply(acc, x.d[j], x.s[i]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_core::SM90_WGMMA;
    use Fp8Kind::E4m3;

    fn tc(promote: Option<usize>) -> Accumulation {
        Accumulation::TensorCore {
            model: SM90_WGMMA,
            promote,
        }
    }

    /// e4m3 code of a small power of two `2^e`, e in -6..=8.
    fn pow2(e: i32) -> u8 {
        ((e + 7) as u8) << 3
    }

    #[test]
    fn exact_sums_agree_under_every_accumulation() {
        // Powers of two whose sum is exact in 14 bits and in f32.
        let q: [u8; 70] = core::array::from_fn(|k| pow2((k % 5) as i32 - 2));
        let w = [pow2(0); 70];
        let want = dot(Accumulation::F32, E4m3, &q, E4m3, &w);
        for p in [None, Some(32), Some(64), Some(96)] {
            assert_eq!(dot(tc(p), E4m3, &q, E4m3, &w), want, "promote {p:?}");
        }
    }

    #[test]
    fn fast_accumulation_loses_what_promotion_keeps() {
        // One large product then 64 tiny ones: the tensor core's 14 bits
        // truncate the tiny ones away in a chain with the large one; a
        // chunk of tiny ones alone keeps them.
        let mut q = [pow2(-6); 96];
        q[0] = pow2(8);
        let w = [pow2(0); 96];
        let fast = dot(tc(None), E4m3, &q, E4m3, &w);
        let promoted = dot(tc(Some(32)), E4m3, &q, E4m3, &w);
        assert_eq!(fast, 256.0);
        assert_eq!(promoted, 257.0);
        assert!(promoted > fast);
    }

    #[test]
    fn k_tail_is_zero_filled() {
        let q = [pow2(1); 33];
        let w = [pow2(1); 33];
        assert_eq!(dot(tc(None), E4m3, &q, E4m3, &w), 132.0);
        assert_eq!(dot(tc(Some(32)), E4m3, &q, E4m3, &w), 132.0);
    }

    #[test]
    fn epilogues_differ_in_rounding_only() {
        let (d, s) = (3.0f32, 1.0f32 / 3.0);
        let mut shown = false;
        for n in 1..64 {
            let acc = 1.0 + n as f32 * f32::EPSILON;
            let e: [f32; 3] = Epilogue::ALL.map(|ep| ep.apply(acc, d, s));
            assert!(e.iter().all(|v| (v - acc).abs() <= 4.0 * f32::EPSILON));
            shown |= e[0] != e[1] || e[1] != e[2];
        }
        assert!(shown, "the association shows");
    }

    #[test]
    fn scaled_mm_checks_lengths_and_writes_each_output() {
        let shape = Shape::new(2, 40, 3).unwrap();
        let q = [pow2(0); 80];
        let w = [pow2(1); 120];
        let (d, s) = ([1.0, 2.0], [1.0, 0.5, 0.25]);
        let x = Operands {
            q_kind: E4m3,
            q: &q,
            d: &d,
            w_kind: E4m3,
            w: &w,
            s: &s,
        };
        let sch = Schedule {
            accumulation: tc(Some(32)),
            epilogue: Epilogue::WeightFirst,
        };
        let mut y = [f32::NAN; 6];
        scaled_mm(&shape, &sch, &x, &mut y).unwrap();
        assert_eq!(y, [80.0, 40.0, 20.0, 160.0, 80.0, 40.0]);
        let mut short = [0.0; 5];
        assert_eq!(
            scaled_mm(&shape, &sch, &x, &mut short),
            Err(ShapeError::Len {
                arg: "y",
                want: 6,
                got: 5
            })
        );
        assert_eq!(Shape::new(0, 1, 1), Err(ShapeError::Zero { dim: "m" }));
        assert!(!Schedule {
            accumulation: tc(Some(48)),
            epilogue: Epilogue::ScalesFirst
        }
        .is_valid());
    }
}
