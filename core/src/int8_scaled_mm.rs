//! The INT8 GEMM with one scale per activation row and one per weight row
//! (W8A8 int8, "scaled mm"; a per-tensor scale is one scale for every
//! row): vLLM's `cutlass_scaled_mm` and `cutlass_scaled_mm_azp` on int8
//! operands, vLLM's `triton_scaled_mm` on int8, and `torch._int_mm` followed
//! by a scaling epilogue.
//!
//! Unlike the FP8 scaled GEMM ([`crate::fp8_scaled_mm`]), the products are
//! summed exactly: an int8 tensor-core MMA (`mma.sync ... s32.s8.s8.s32`,
//! IMMA) adds integers into a 32-bit integer accumulator, so every order
//! of the sum gives the same bits and the question moves to the epilogue:
//! the conversion of the 32-bit sum to binary32, the association of the two
//! scales, and how a bias is added.
//!
//! Shapes (elements, row-major, k fastest), with the names of
//! [`crate::fp8_scaled_mm`]: activations `q [m][in_f]` and weights
//! `w [out_f][in_f]` (the `nn.Linear` layout; vLLM's `b [in_f][out_f]`
//! column-major is the same memory), int8 codes; scales `d [m]` and
//! `s [out_f]` (binary32; a slice of one element is one scale for every
//! row, a per-tensor scale); an optional `bias [out_f]` (values of the
//! output dtype, held as binary32, exact); zero points for asymmetric
//! activations ([`Azp`]); output `y [m][out_f]`, values of the output
//! dtype ([`Dtype`]) held as binary32.
//!
//! The rules, for one output `(j, i)`:
//!
//! 1. `I8MM-ACC`: `acc = sum_k q[j][k] * w[i][k]` over `k = 0 .. in_f - 1`,
//!    exactly, as a 32-bit two's-complement integer. With `in_f <=`
//!    [`MAX_IN_F`] every partial sum of any order lies in
//!    `[-128 * 128 * in_f, 128 * 128 * in_f]`, inside int32, so the order
//!    cannot matter; a longer k is refused ([`Int8MmError::InF`]). Past
//!    `in_f` nothing counts (a kernel's zero-filled k tail adds zeros).
//! 2. `I8MM-AZP`: with asymmetric activations, `acc' = acc - azp[j] *
//!    azp_adj[i]` (per token) or `acc' = acc - azp_adj[i]` (per tensor,
//!    the zero point already folded into `azp_adj`), as vLLM's
//!    `ScaledEpilogueBiasAzpToken` and `ScaledEpilogueBiasAzp` compute it
//!    in int32 (wrapping). The contract is the exact value; an exact value
//!    outside int32, where a kernel's wrapped result is not the dot
//!    product of the dequantized operands, is refused
//!    ([`Int8MmError::AzpRange`]). Symmetric activations: `acc' = acc`.
//! 3. `I8MM-CVT`: `f = (float) acc'`, rounded to nearest even
//!    (`cvt.rn.f32.s32`; CUTLASS's `NumericConverter<float, int32_t>`,
//!    Triton's `acc.to(tl.float32)`, torch's `.float()`): exact only for
//!    `|acc'| <= 2^24`; above, the conversion rounds.
//! 4. `I8MM-EPILOGUE`: the scales by the schedule's
//!    [`Epilogue`] (each multiply rounded to nearest even), then the bias by
//!    its [`Bias`], then one rounding to the output dtype (nearest even,
//!    overflow to infinity).
//!
//! Who computes what (see [`Bias`] for the bias forms):
//! - vLLM `cutlass_scaled_mm` (c2x on sm_80/sm_89, c3x on sm_90;
//!   `csrc/quantization/cutlass_w8a8`, `ScaledEpilogue`): `ScaleA *
//!   (ScaleB * Accum)`, [`Epilogue::WeightFirst`]; with a bias
//!   (`ScaledEpilogueBias`, and the azp epilogues) `multiply_add(ScaleA,
//!   ScaleB * Accum, Bias)`, one FMA: [`Bias::Fused`]. bfloat16 and float16
//!   outputs only.
//! - vLLM `triton_scaled_mm` (`compressed_tensors/triton_scaled_mm.py`):
//!   `tl.dot(..., out_dtype=int32)`, then `scale_a * acc.to(float32)`, then
//!   `scale_b.T * ...`: [`Epilogue::ActivationFirst`]; the product converted
//!   to the output dtype, then `c += bias` in the output dtype:
//!   [`Bias::AddOut`].
//! - `torch._int_mm(a, b)` (int32 out) then an epilogue in torch: each
//!   torch operation is its own kernel, so `(y.float() * d) * s` is
//!   [`Epilogue::ActivationFirst`] and a `+ bias` before the cast
//!   [`Bias::Add`] (after it, [`Bias::AddOut`]).
//!
//! Source: PTX ISA, `mma` with `.s8` operands and `.s32` accumulator, and
//! `cvt.rn.f32.s32`; vLLM `csrc/cutlass_extensions/epilogue/
//! scaled_mm_epilogues_c3x.hpp` and `..._c2x.hpp` (`ScaledEpilogue`,
//! `ScaledEpilogueBias`, `ScaledEpilogueBiasAzp`,
//! `ScaledEpilogueBiasAzpToken`) and `_custom_ops.py`
//! (`cutlass_scaled_mm_azp`: "azp_adj: In the per-tensor case, this should
//! include the azp"); vLLM's `triton_scaled_mm`; torch `_int_mm`
//! (`aten/src/ATen/native/cuda/Blas.cpp`, cuBLASLt with `CUBLAS_COMPUTE_32I`).

use crate::dtype::Dtype;
use crate::fma::fma_f32;
use crate::fp8_mmq::ShapeError;
use crate::fp8_scaled_mm::{Epilogue, Shape};

/// The longest reduction the contract takes (elements): with `in_f` at
/// most this, `128 * 128 * in_f < 2^31`, so no partial sum of any order
/// leaves int32 (rule `I8MM-ACC`).
pub const MAX_IN_F: usize = 131_071;

/// How a bias enters the output (rule `I8MM-EPILOGUE`), with `x * t` the
/// epilogue's last multiply (`(acc * d) * s`: `x = acc * d`, `t = s`;
/// `(acc * s) * d`: `x = acc * s`, `t = d`; `acc * (d * s)`: `x = acc`,
/// `t = d * s`) and `b` the bias, a value of the output dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bias {
    /// No bias: `round_out(x * t)`.
    Absent,
    /// `round_out((x * t) + b)`: the product rounded to binary32, then the
    /// sum rounded to binary32 (torch `(y.float() * d * s + bias)`, each
    /// operation its own kernel).
    Add,
    /// `round_out(fma(x, t, b))`: the last multiply and the bias add as one
    /// fused multiply-add (vLLM's CUTLASS `multiply_add(ScaleA, ScaleB *
    /// Accum, Bias)`; a Triton `x * t + b`, which Triton contracts to an
    /// FMA by default).
    Fused,
    /// `round_out(round_out(x * t) + b)`: the product rounded to the output
    /// dtype first, then the bias added and the sum rounded again (vLLM's
    /// `triton_scaled_mm`: `c = acc.to(out); c += bias`). For a binary32
    /// output it is [`Bias::Add`].
    AddOut,
}

impl Bias {
    /// Every form with a bias ([`Bias::Absent`] left out).
    pub const WITH_BIAS: [Bias; 3] = [Bias::Add, Bias::Fused, Bias::AddOut];

    /// The form's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Bias::Absent => "no bias",
            Bias::Add => "+ bias",
            Bias::Fused => "fma bias",
            Bias::AddOut => "+ bias in out dtype",
        }
    }
}

/// A declared epilogue of the INT8 scaled GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// How the scales enter.
    pub epilogue: Epilogue,
    /// How the bias enters.
    pub bias: Bias,
}

/// Zero points of asymmetric activations (rule `I8MM-AZP`), as vLLM's
/// `cutlass_scaled_mm_azp` takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Azp<'a> {
    /// Symmetric activations: no zero point.
    Symmetric,
    /// One zero point for the tensor, folded in: `azp_adj [out_f]`,
    /// `azp_adj[i] = azp * sum_k w[i][k]` (vLLM's `ScaledEpilogueBiasAzp`).
    Tensor {
        /// `[out_f]`, int32.
        azp_adj: &'a [i32],
    },
    /// One zero point per token: `azp [m]` and `azp_adj [out_f]`,
    /// `azp_adj[i] = sum_k w[i][k]` (vLLM's `ScaledEpilogueBiasAzpToken`).
    Token {
        /// `[m]`, int32.
        azp: &'a [i32],
        /// `[out_f]`, int32.
        azp_adj: &'a [i32],
    },
}

/// Why the contract refuses a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8MmError {
    /// A zero or overflowing dimension, or a buffer of the wrong length.
    Shape(ShapeError),
    /// `in_f` over [`MAX_IN_F`]: an order of the sum could leave int32
    /// (rule `I8MM-ACC`).
    InF {
        /// The reduction length given (elements).
        in_f: usize,
    },
    /// The declared bias form and the bias given disagree: a bias without
    /// a form, or a form without a bias.
    Bias {
        /// The declared form.
        declared: Bias,
    },
    /// Rule `I8MM-AZP`: the exact `acc - azp * azp_adj` of an output lies
    /// outside int32.
    AzpRange {
        /// The activation row.
        row: usize,
        /// The weight row (output column).
        col: usize,
        /// The exact value.
        exact: i64,
    },
}

impl From<ShapeError> for Int8MmError {
    fn from(e: ShapeError) -> Self {
        Int8MmError::Shape(e)
    }
}

impl core::fmt::Display for Int8MmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Int8MmError::Shape(e) => e.fmt(f),
            Int8MmError::InF { in_f } => write!(
                f,
                "in_f={in_f} is over {MAX_IN_F}: an int32 accumulator could overflow (128*128*in_f >= 2^31), rule I8MM-ACC"
            ),
            Int8MmError::Bias { declared } => match declared {
                Bias::Absent => write!(f, "a bias is given but no bias form is declared"),
                _ => write!(f, "the bias form {:?} is declared but no bias is given", declared.name()),
            },
            Int8MmError::AzpRange { row, col, exact } => write!(
                f,
                "output (row {row}, column {col}): acc - azp*azp_adj is {exact}, outside int32 (rule I8MM-AZP)"
            ),
        }
    }
}

/// The shape of an `m x in_f` by `out_f x in_f` INT8 GEMM.
///
/// # Errors
/// [`Int8MmError::Shape`] for a zero or overflowing dimension
/// ([`Shape::new`]), [`Int8MmError::InF`] for `in_f` over [`MAX_IN_F`].
pub fn shape(m: usize, in_f: usize, out_f: usize) -> Result<Shape, Int8MmError> {
    let sh = Shape::new(m, in_f, out_f)?;
    if in_f > MAX_IN_F {
        return Err(Int8MmError::InF { in_f });
    }
    Ok(sh)
}

/// The operands of [`int8_scaled_mm`] (layouts in the module
/// documentation).
#[derive(Clone, Copy, Debug)]
pub struct Operands<'a> {
    /// Activation codes `[m][in_f]`.
    pub q: &'a [i8],
    /// Activation row scales `[m]`, or `[1]` per tensor.
    pub d: &'a [f32],
    /// Weight codes `[out_f][in_f]`.
    pub w: &'a [i8],
    /// Weight row scales `[out_f]`, or `[1]` per tensor.
    pub s: &'a [f32],
    /// `[out_f]`, values of the output dtype; `None`: no bias.
    pub bias: Option<&'a [f32]>,
    /// The activations' zero points.
    pub azp: Azp<'a>,
}

impl Operands<'_> {
    /// The activation scale of row `j` (the one scale per tensor when `d`
    /// has one element).
    pub fn d_at(&self, j: usize) -> f32 {
        self.d[if self.d.len() == 1 { 0 } else { j }]
    }

    /// The weight scale of row `i` (the one scale when `s` has one
    /// element).
    pub fn s_at(&self, i: usize) -> f32 {
        self.s[if self.s.len() == 1 { 0 } else { i }]
    }
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), ShapeError> {
    if want == got {
        Ok(())
    } else {
        Err(ShapeError::Len { arg, want, got })
    }
}

fn len_or_one(arg: &'static str, want: usize, got: usize) -> Result<(), ShapeError> {
    if got == 1 {
        Ok(())
    } else {
        len(arg, want, got)
    }
}

/// Checks `x` against `shape` and `schedule`: lengths in the order `q`,
/// `d` (`m` or 1), `w`, `s` (`out_f` or 1), `bias`, `azp`, `azp_adj`,
/// `y`; `in_f` within [`MAX_IN_F`]; a bias exactly when the schedule's
/// form has one.
///
/// # Errors
/// [`Int8MmError::InF`], [`Int8MmError::Shape`] (`ShapeError::Len`
/// naming the first wrong length), [`Int8MmError::Bias`].
pub fn check_operands(
    shape: &Shape,
    schedule: &Schedule,
    x: &Operands<'_>,
    y_len: usize,
) -> Result<(), Int8MmError> {
    let (m, in_f, out_f) = (shape.m(), shape.in_f(), shape.out_f());
    if in_f > MAX_IN_F {
        return Err(Int8MmError::InF { in_f });
    }
    len("q", m * in_f, x.q.len())?;
    len_or_one("d", m, x.d.len())?;
    len("w", out_f * in_f, x.w.len())?;
    len_or_one("s", out_f, x.s.len())?;
    if let Some(b) = x.bias {
        len("bias", out_f, b.len())?;
    }
    match x.azp {
        Azp::Symmetric => {}
        Azp::Tensor { azp_adj } => len("azp_adj", out_f, azp_adj.len())?,
        Azp::Token { azp, azp_adj } => {
            len("azp", m, azp.len())?;
            len("azp_adj", out_f, azp_adj.len())?;
        }
    }
    len("y", m * out_f, y_len)?;
    if (schedule.bias == Bias::Absent) != x.bias.is_none() {
        return Err(Int8MmError::Bias {
            declared: schedule.bias,
        });
    }
    Ok(())
}

/// The dot product of one activation row and one weight row (rule
/// `I8MM-ACC`): `sum_k q[k] * w[k]` in increasing k, each product exact
/// (at most `2^14`) and each addition in 32-bit two's-complement
/// arithmetic, which with at most [`MAX_IN_F`] terms never wraps, so it
/// is the exact sum, and any other order gives the same bits.
///
/// # Panics
/// If the rows' lengths differ or exceed [`MAX_IN_F`].
pub fn dot(q: &[i8], w: &[i8]) -> i32 {
    assert_eq!(q.len(), w.len(), "rows of one length");
    assert!(q.len() <= MAX_IN_F, "in_f at most MAX_IN_F");
    let mut acc: i32 = 0;
    for (&a, &b) in q.iter().zip(w) {
        acc = acc.wrapping_add(i32::from(a) * i32::from(b));
    }
    acc
}

/// `azp * sum_k w[k]` over one weight row, exactly: vLLM's per-tensor
/// `azp_adj[i]` (with `azp = 1`, the per-token one); `None` when it lies
/// outside int32 (never for `azp = 1` and a row of at most [`MAX_IN_F`]
/// codes, nor for `|azp| <= 128`).
pub fn azp_adj(w_row: &[i8], azp: i32) -> Option<i32> {
    let sum: i64 = w_row.iter().map(|&c| i64::from(c)).sum();
    i32::try_from(sum * i64::from(azp)).ok()
}

/// Rule `I8MM-AZP` for output `(j, i)`: `acc - azp[j] * azp_adj[i]`
/// (per token), `acc - azp_adj[i]` (per tensor) or `acc` (symmetric),
/// exactly.
///
/// # Errors
/// [`Int8MmError::AzpRange`] when the exact value lies outside int32.
///
/// # Panics
/// If `j` or `i` is out of the zero points' range.
pub fn adjusted(acc: i32, azp: &Azp<'_>, j: usize, i: usize) -> Result<i32, Int8MmError> {
    let exact = match *azp {
        Azp::Symmetric => return Ok(acc),
        Azp::Tensor { azp_adj } => i64::from(acc) - i64::from(azp_adj[i]),
        Azp::Token { azp, azp_adj } => i64::from(acc) - i64::from(azp[j]) * i64::from(azp_adj[i]),
    };
    i32::try_from(exact).map_err(|_| Int8MmError::AzpRange {
        row: j,
        col: i,
        exact,
    })
}

/// Rule `I8MM-CVT`: `acc` as binary32, rounded to nearest even
/// (`cvt.rn.f32.s32`; Rust's `as` rounds so). Exact for `|acc| <= 2^24`.
pub fn to_f32(acc: i32) -> f32 {
    acc as f32
}

/// Rule `I8MM-EPILOGUE`: the output of the converted sum `f` with scales
/// `d` (activation row) and `s` (weight row) and bias `b` (ignored for
/// [`Bias::Absent`]), rounded to `out`, as a binary32 holding the
/// output dtype's value.
pub fn epilogue(schedule: &Schedule, out: Dtype, f: f32, d: f32, s: f32, b: f32) -> f32 {
    // The last multiply x * t of each association.
    let (x, t) = match schedule.epilogue {
        Epilogue::ActivationFirst => (f * d, s),
        Epilogue::WeightFirst => (f * s, d),
        Epilogue::ScalesFirst => (f, d * s),
    };
    let v = match schedule.bias {
        Bias::Absent => x * t,
        Bias::Add => x * t + b,
        Bias::Fused => fma_f32(x, t, b),
        Bias::AddOut => out.round(x * t) + b,
    };
    out.round(v)
}

/// The INT8 scaled GEMM under `schedule`, rounded to `out`: for every
/// activation row `j` and weight row `i`, `y[j][i] = epilogue(to_f32(
/// adjusted(dot(q[j], w[i]))), d[j], s[i], bias[i])` (rules `I8MM-*`).
///
/// # Errors
/// Those of [`check_operands`] (nothing written then), and
/// [`Int8MmError::AzpRange`] for the first output, in row-major order,
/// whose zero-point adjustment leaves int32 (the outputs before it are
/// written then).
pub fn int8_scaled_mm(
    shape: &Shape,
    schedule: &Schedule,
    out: Dtype,
    x: &Operands<'_>,
    y: &mut [f32],
) -> Result<(), Int8MmError> {
    check_operands(shape, schedule, x, y.len())?;
    let in_f = shape.in_f();
    for (j, yrow) in y.chunks_exact_mut(shape.out_f()).enumerate() {
        let qrow = &x.q[j * in_f..(j + 1) * in_f];
        for (i, o) in yrow.iter_mut().enumerate() {
            let wrow = &x.w[i * in_f..(i + 1) * in_f];
            let acc = adjusted(dot(qrow, wrow), &x.azp, j, i)?;
            let b = x.bias.map_or(0.0, |b| b[i]);
            *o = epilogue(schedule, out, to_f32(acc), x.d_at(j), x.s_at(i), b);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::{vec, vec::Vec};

    /// A splitmix64 stream of int8 codes.
    fn codes(seed: u64, n: usize) -> impl Iterator<Item = i8> {
        let mut z = seed;
        (0..n).map(move |_| {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut v = z;
            v = (v ^ (v >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            v = (v ^ (v >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (v >> 56) as u8 as i8
        })
    }

    #[test]
    fn accumulation_is_exact_against_i64() {
        for (seed, n) in [(1u64, 1usize), (2, 37), (3, 4096), (4, 70_001)] {
            let a: Vec<i8> = codes(seed, n).collect();
            let b: Vec<i8> = codes(seed ^ 0xFF, n).collect();
            let want: i64 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| i64::from(x) * i64::from(y))
                .sum();
            assert_eq!(i64::from(dot(&a, &b)), want, "n {n}");
        }
        // The extremes: every product (-128)(-128) = 2^14 at the longest k,
        // and -128 * 127.
        let big = vec![-128i8; MAX_IN_F];
        assert_eq!(i64::from(dot(&big, &big)), 16_384 * MAX_IN_F as i64);
        let pos = vec![127i8; MAX_IN_F];
        assert_eq!(i64::from(dot(&big, &pos)), -16_256 * MAX_IN_F as i64);
        assert!(16_384 * (MAX_IN_F as i64 + 1) > i64::from(i32::MAX));
    }

    #[test]
    fn conversion_rounds_to_nearest_even_above_2_pow_24() {
        let t = 1i32 << 24;
        assert_eq!(to_f32(t - 1), 16_777_215.0);
        // 2^24 + 1 is a tie between 2^24 and 2^24 + 2: the even one.
        assert_eq!(to_f32(t + 1), 16_777_216.0);
        assert_eq!(to_f32(t + 3), 16_777_220.0);
        assert_eq!(to_f32(-(t + 1)), -16_777_216.0);
        // 2^25 + 2 is a tie between 2^25 and 2^25 + 4.
        assert_eq!(to_f32((1 << 25) + 2), 33_554_432.0);
        assert_eq!(to_f32((1 << 25) + 6), 33_554_440.0);
        assert_eq!(to_f32(i32::MIN), -2_147_483_648.0);
    }

    #[test]
    fn fused_bias_keeps_what_separate_rounding_loses() {
        // (1/3)_f32 = (1 + 2^-25) / 3 and (1/5)_f32 = (1 + 2^-26) / 5: the
        // product of 15 u with both is u (1 + 2^-25 + ...), which rounds
        // to u; the FMA with bias -u keeps the error.
        let (third, fifth) = (1.0f32 / 3.0, 1.0f32 / 5.0);
        assert_eq!(third.to_bits(), 0x3EAA_AAAB);
        assert_eq!(fifth.to_bits(), 0x3E4C_CCCD);
        let f = to_f32(15 * 100);
        for (ep, err) in [
            (Epilogue::ActivationFirst, 100.0 * 2f32.powi(-26)),
            (Epilogue::WeightFirst, 100.0 * 2f32.powi(-25)),
        ] {
            let sch = |bias| Schedule { epilogue: ep, bias };
            let add = epilogue(&sch(Bias::Add), Dtype::F32, f, third, fifth, -100.0);
            let fused = epilogue(&sch(Bias::Fused), Dtype::F32, f, third, fifth, -100.0);
            let add_out = epilogue(&sch(Bias::AddOut), Dtype::Bf16, f, third, fifth, -100.0);
            assert_eq!(add.to_bits(), 0, "{ep:?}: +0");
            assert_eq!(add_out.to_bits(), 0, "{ep:?}");
            assert_eq!(fused, err, "{ep:?}");
            // The error is exact in bfloat16 too.
            let bf = epilogue(&sch(Bias::Fused), Dtype::Bf16, f, third, fifth, -100.0);
            assert_eq!(bf, err);
        }
        // Without a bias, the three forms round the same product.
        let none = Schedule {
            epilogue: Epilogue::WeightFirst,
            bias: Bias::Absent,
        };
        assert_eq!(epilogue(&none, Dtype::F32, f, third, fifth, 7.0), 100.0);
    }

    #[test]
    fn add_out_rounds_twice() {
        // 1 + 2^-9 rounds to 1 in bfloat16 (8 significant bits); + 2^-8
        // then gives the tie 1 + 2^-8, which rounds to the even 1. One
        // rounding of 1 + 3 * 2^-9 (above the tie) gives 1 + 2^-7.
        let sch = |bias| Schedule {
            epilogue: Epilogue::ActivationFirst,
            bias,
        };
        let f = 1.0 + 2f32.powi(-9);
        let b = 2f32.powi(-8);
        assert_eq!(
            epilogue(&sch(Bias::AddOut), Dtype::Bf16, f, 1.0, 1.0, b),
            1.0
        );
        assert_eq!(
            epilogue(&sch(Bias::Add), Dtype::Bf16, f, 1.0, 1.0, b),
            1.0 + 2f32.powi(-7)
        );
        assert_eq!(
            epilogue(&sch(Bias::AddOut), Dtype::F32, f, 1.0, 1.0, b),
            epilogue(&sch(Bias::Add), Dtype::F32, f, 1.0, 1.0, b)
        );
    }

    #[test]
    fn zero_points_and_errors() {
        let w: [i8; 4] = [-128, 127, 5, -4];
        assert_eq!(azp_adj(&w, 1), Some(0));
        assert_eq!(azp_adj(&[127; 4], -3), Some(-1524));
        assert_eq!(azp_adj(&[127; 4], i32::MAX), None);
        let adj = [10];
        let tok = Azp::Token {
            azp: &[3, -2],
            azp_adj: &adj,
        };
        assert_eq!(adjusted(100, &tok, 0, 0), Ok(70));
        assert_eq!(adjusted(100, &tok, 1, 0), Ok(120));
        assert_eq!(
            adjusted(i32::MAX, &tok, 1, 0),
            Err(Int8MmError::AzpRange {
                row: 1,
                col: 0,
                exact: i64::from(i32::MAX) + 20
            })
        );
        let ten = Azp::Tensor { azp_adj: &adj };
        assert_eq!(adjusted(100, &ten, 5, 0), Ok(90));
        assert_eq!(adjusted(-7, &Azp::Symmetric, 0, 0), Ok(-7));
        assert_eq!(
            shape(1, MAX_IN_F + 1, 1),
            Err(Int8MmError::InF { in_f: MAX_IN_F + 1 })
        );
        assert!(shape(1, MAX_IN_F, 1).is_ok());
    }

    #[test]
    fn int8_scaled_mm_checks_lengths_and_writes_each_output() {
        let sh = shape(2, 3, 2).unwrap();
        let q: [i8; 6] = [1, 2, 3, -128, 0, 1];
        let w: [i8; 6] = [1, 1, 1, 2, 0, -1];
        let adj = [azp_adj(&w[..3], 1).unwrap(), azp_adj(&w[3..], 1).unwrap()];
        let x = Operands {
            q: &q,
            d: &[0.5],
            w: &w,
            s: &[1.0, 2.0],
            bias: Some(&[1.0, -1.0]),
            azp: Azp::Token {
                azp: &[1, 0],
                azp_adj: &adj,
            },
        };
        let sch = Schedule {
            epilogue: Epilogue::WeightFirst,
            bias: Bias::Fused,
        };
        let mut y = [f32::NAN; 4];
        int8_scaled_mm(&sh, &sch, Dtype::F32, &x, &mut y).unwrap();
        // acc: [6, -1; -127, -257]; minus azp * adj: [6 - 3, -1 - 1; ...].
        assert_eq!(
            y,
            [
                0.5 * 3.0 + 1.0,
                0.5 * -2.0 * 2.0 - 1.0,
                0.5 * -127.0 + 1.0,
                0.5 * -257.0 * 2.0 - 1.0
            ]
        );
        let no_bias = Schedule {
            bias: Bias::Absent,
            ..sch
        };
        assert_eq!(
            int8_scaled_mm(&sh, &no_bias, Dtype::F32, &x, &mut y),
            Err(Int8MmError::Bias {
                declared: Bias::Absent
            })
        );
        let short = Operands {
            s: &[1.0, 2.0, 3.0],
            ..x
        };
        assert_eq!(
            int8_scaled_mm(&sh, &sch, Dtype::F32, &short, &mut y),
            Err(Int8MmError::Shape(ShapeError::Len {
                arg: "s",
                want: 2,
                got: 3
            }))
        );
    }
}
