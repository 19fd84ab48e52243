//! The per-block FP8 GEMM contract (seed 000's v2 and core's schedules) on
//! numpy arrays: the activation quantizer, the GEMM under a schedule (the
//! case library's fast paths, bit-identical to `oracle::fp8_mmq`), which
//! known schedules an output matches, a check case's data, and one FP8
//! tensor-core MMA (`oracle::tensor_core::mma_k32`).
//!
//! Shapes, for `m` activation rows, `in_f` input features (k) and `out_f`
//! output features (n), all in elements:
//! - `w`: uint8 `[out_f, in_f]`, e4m3 codes;
//! - `scales`: float32 `[ceil(out_f/128), ceil(in_f/128)]`, one per
//!   128x128 weight block;
//! - `x`: float32 `[m, in_f]`;
//! - `q`: uint8 `[m, in_f_pad]`, e4m3 codes, `in_f_pad = in_f` rounded up
//!   to a multiple of 512 (`fp8_in_f_pad`);
//! - `d`: float32 `[m, in_f_pad/128]`, one per 128 activation values;
//! - `y`: float32 `[m, out_f]`.

use crate::arrays::{array, dims, read, to_vec, value_error};
use crate::conventions::{Fp8Format, Instruction, Schedule};
use kernel_oracle::fp8_mmq::fast::{mmq_fast, quantize_activations_fast};
use kernel_oracle::fp8_mmq::generate::Arm;
use kernel_oracle::fp8_mmq::judge::{identify, Identify, Reference};
use kernel_oracle::fp8_mmq::{CaseData, CaseSpec, Knobs};
use numpy::{PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use oracle::fp8_mmq::{count_nan_magnitude, Shape};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The validated shape, or a `ValueError` with core's sentence.
pub fn shape(m: usize, in_f: usize, out_f: usize) -> PyResult<Shape> {
    Shape::new(m, in_f, out_f).map_err(value_error)
}

/// fp8_in_f_pad(in_f: int) -> int
///
/// The activation operand's row length: `in_f` rounded up to a multiple
/// of 512 elements (`Shape::in_f_pad`; v2 pads rows with zero codes).
#[pyfunction]
fn fp8_in_f_pad(in_f: usize) -> PyResult<usize> {
    Ok(shape(1, in_f, 1)?.in_f_pad())
}

/// The quantizer's result: the codes `q` and the scales `d`.
pub type Quantized<'py> = (Bound<'py, PyArrayDyn<u8>>, Bound<'py, PyArrayDyn<f32>>);

/// quantize_activations(x: float32[m, in_f]) -> (q: uint8[m, in_f_pad], d: float32[m, in_f_pad/128])
///
/// v2's per-128 activation quantizer (`oracle::fp8_mmq::quantize_activations`,
/// through its fast path): per block `d = amax / 448`, `q = e4m3(x * (448 /
/// amax))` with PTX `satfinite` rounding, an all-zero block (and the
/// padding beyond in_f) gives `d = 0` and zero codes (rule QUANT-ZERO).
///
/// Errors: `ValueError` when `x` is not 2-D or has a zero dimension.
#[pyfunction]
fn quantize_activations<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Quantized<'py>> {
    let xs = dims("x", &x, 2)?;
    let s = shape(xs[0], xs[1], 1)?;
    let xv = to_vec(&x);
    let (q, d) = py
        .detach(|| {
            let mut q = vec![0u8; s.q_len()];
            let mut d = vec![0f32; s.d_len()];
            quantize_activations_fast(&s, &xv, &mut q, &mut d).map(|()| (q, d))
        })
        .map_err(value_error)?;
    Ok((
        array(py, &[s.m(), s.in_f_pad()], q)?,
        array(py, &[s.m(), s.act_blocks()], d)?,
    ))
}

/// The GEMM operands read and checked against the shape `w` and `q` give.
pub struct Operands {
    /// The shape.
    pub shape: Shape,
    /// `w`, C order.
    pub w: Vec<u8>,
    /// `scales`, C order.
    pub scales: Vec<f32>,
    /// `q`, C order.
    pub q: Vec<u8>,
    /// `d`, C order.
    pub d: Vec<f32>,
}

/// Reads `w`, `scales`, `q`, `d` (module doc shapes; `m` from `q`, `in_f`
/// and `out_f` from `w`).
///
/// # Errors
/// `ValueError` naming the first argument whose shape disagrees.
pub fn operands(
    w: &PyReadonlyArrayDyn<'_, u8>,
    scales: &PyReadonlyArrayDyn<'_, f32>,
    q: &PyReadonlyArrayDyn<'_, u8>,
    d: &PyReadonlyArrayDyn<'_, f32>,
) -> PyResult<Operands> {
    let ws = dims("w", w, 2)?;
    let qs = dims("q", q, 2)?;
    let s = shape(qs[0], ws[1], ws[0])?;
    Ok(Operands {
        w: read("w", w, &[s.out_f(), s.in_f()])?,
        scales: read("scales", scales, &[s.scale_rows(), s.scale_cols()])?,
        q: read("q", q, &[s.m(), s.in_f_pad()])?,
        d: read("d", d, &[s.m(), s.act_blocks()])?,
        shape: s,
    })
}

/// fp8_block_gemm(w, scales, q, d, schedule=Schedule.V2) -> float32[m, out_f]
///
/// `y[j, i] = sum over 128-k blocks b < ceil(in_f/128), in increasing b, of
/// (scales[i/128, b] * d[j, b]) * c[j, i, b]`, with `c` the block's
/// accumulation of `decode(w[i, k]) * decode(q[j, k])` and the fold as
/// `schedule` says (`oracle::fp8_mmq::mmq`; the fast path, bit-identical).
/// The weights' k tail beyond in_f reads as zero whatever `q` holds there.
/// Shapes: module doc (`m` from `q`, `in_f`, `out_f` from `w`).
///
/// Errors: `ValueError` on any shape disagreement. Weight codes with the
/// NaN magnitude (0x7F/0xFF) are computed as core does (they read as
/// zero); a dispatch refuses them (`fp8_count_nan_magnitude`).
#[pyfunction]
#[pyo3(signature = (w, scales, q, d, schedule = Schedule::V2))]
fn fp8_block_gemm<'py>(
    py: Python<'py>,
    w: PyReadonlyArrayDyn<'py, u8>,
    scales: PyReadonlyArrayDyn<'py, f32>,
    q: PyReadonlyArrayDyn<'py, u8>,
    d: PyReadonlyArrayDyn<'py, f32>,
    schedule: Schedule,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let o = operands(&w, &scales, &q, &d)?;
    let s = o.shape;
    let y = py
        .detach(|| {
            let mut y = vec![0f32; s.out_len()];
            mmq_fast(&s, &schedule.core(), &o.w, &o.scales, &o.q, &o.d, &mut y).map(|()| y)
        })
        .map_err(value_error)?;
    array(py, &[s.m(), s.out_f()], y)
}

/// fp8_count_nan_magnitude(w: uint8[...]) -> int
///
/// Weight codes whose magnitude is the e4m3 NaN one (0x7F, 0xFF): the
/// dispatch precondition (rule NAN-W) refuses weights with any.
#[pyfunction]
fn fp8_count_nan_magnitude(w: PyReadonlyArrayDyn<'_, u8>) -> usize {
    count_nan_magnitude(&to_vec(&w))
}

/// identify_fp8_block_gemm(w, scales, q, d, y) -> list[Schedule]
///
/// The known schedules under which `y` (float32 `[m, out_f]`) is
/// bit-identical to the GEMM of these operands, in `Schedule`'s order
/// (`kernel_oracle::fp8_mmq::judge::identify`; NaN equals NaN whatever the
/// payload, `-0.0` differs from `+0.0`). Empty when none matches.
#[pyfunction]
fn identify_fp8_block_gemm<'py>(
    py: Python<'py>,
    w: PyReadonlyArrayDyn<'py, u8>,
    scales: PyReadonlyArrayDyn<'py, f32>,
    q: PyReadonlyArrayDyn<'py, u8>,
    d: PyReadonlyArrayDyn<'py, f32>,
    y: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Vec<Schedule>> {
    let o = operands(&w, &scales, &q, &d)?;
    let s = o.shape;
    let got = read("y", &y, &[s.m(), s.out_f()])?;
    let data = CaseData {
        shape: s,
        w: o.w,
        scales: o.scales,
        x: vec![0.0; s.act_len()],
        qd: Some((o.q, o.d)),
    };
    let want = Reference {
        schedule: oracle::fp8_mmq::Schedule::V2,
        identify: Identify::Always,
        nan: 0,
        q: Vec::new(),
        d: Vec::new(),
        y: Vec::new(),
    };
    let ids = py.detach(|| identify(&data, &want, &got));
    Ok(ids.into_iter().filter_map(Schedule::from_core).collect())
}

/// The arm named `name` (`"EXACT"`, `"FOLD"`, `"CODES"`, `"RAND"`; case
/// insensitive, `"RANDOM"` too).
///
/// # Errors
/// `ValueError` listing the names.
pub fn arm(name: &str) -> PyResult<Arm> {
    match name.to_ascii_uppercase().as_str() {
        "EXACT" => Ok(Arm::Exact),
        "FOLD" => Ok(Arm::Fold),
        "CODES" => Ok(Arm::Codes),
        "RAND" | "RANDOM" => Ok(Arm::Random),
        _ => Err(PyValueError::new_err(format!(
            "arm {name:?}: expected one of \"EXACT\", \"FOLD\", \"CODES\", \"RAND\""
        ))),
    }
}

/// fp8_block_gemm_case(in_f, out_f, m, arm, seed=None) -> dict
///
/// The data `check_fp8_block_gemm` gives a callable for one case, drawn by
/// the case library's generator (`kernel_oracle::fp8_mmq::CaseSpec`, no
/// knobs; `seed=None` is the gate's battery seed for the shape and arm):
/// keys `w`, `scales`, `q`, `d` (the GEMM's operands, module doc shapes:
/// the FOLD arm gives `q`, `d` directly, other arms the quantizer's output
/// of `x`), `x` (float32 `[m, in_f]`), `seed` (int), `arm` (str).
///
/// Errors: `ValueError` on a zero dimension or an unknown arm.
#[pyfunction]
#[pyo3(signature = (in_f, out_f, m, arm, seed = None))]
fn fp8_block_gemm_case<'py>(
    py: Python<'py>,
    in_f: usize,
    out_f: usize,
    m: usize,
    arm: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let a = self::arm(arm)?;
    let spec = case_spec(in_f, out_f, m, a, seed);
    let c = case_arrays(py, &spec)?;
    let dict = PyDict::new(py);
    dict.set_item("w", c.w)?;
    dict.set_item("scales", c.scales)?;
    dict.set_item("q", c.q)?;
    dict.set_item("d", c.d)?;
    dict.set_item("x", array(py, &[m, in_f], c.data.x)?)?;
    dict.set_item("seed", spec.seed)?;
    dict.set_item("arm", a.name())?;
    Ok(dict)
}

/// The case spec of a check row: the battery's seed when `seed` is `None`.
pub fn case_spec(in_f: usize, out_f: usize, m: usize, arm: Arm, seed: Option<u64>) -> CaseSpec {
    let mut spec = CaseSpec::battery(in_f, out_f, m, arm);
    if let Some(s) = seed {
        spec.seed = s;
    }
    spec.knobs = Knobs::default();
    spec
}

/// A case's data and its GEMM operands as fresh numpy arrays.
pub struct CaseArrays<'py> {
    /// The generated data.
    pub data: CaseData,
    /// The GEMM's activation codes (`data.qd`, else the quantizer's).
    pub gq: Vec<u8>,
    /// The GEMM's activation scales.
    pub gd: Vec<f32>,
    /// `w` as an array.
    pub w: Bound<'py, PyArrayDyn<u8>>,
    /// `scales` as an array.
    pub scales: Bound<'py, PyArrayDyn<f32>>,
    /// `q` as an array.
    pub q: Bound<'py, PyArrayDyn<u8>>,
    /// `d` as an array.
    pub d: Bound<'py, PyArrayDyn<f32>>,
}

/// Generates `spec`'s data and its operands as arrays.
///
/// # Errors
/// `ValueError` on a zero or overflowing shape.
pub fn case_arrays<'py>(py: Python<'py>, spec: &CaseSpec) -> PyResult<CaseArrays<'py>> {
    let data = spec.generate().map_err(value_error)?;
    let s = data.shape;
    let (gq, gd) = match &data.qd {
        Some((q, d)) => (q.clone(), d.clone()),
        None => {
            let mut q = vec![0u8; s.q_len()];
            let mut d = vec![0f32; s.d_len()];
            quantize_activations_fast(&s, &data.x, &mut q, &mut d).map_err(value_error)?;
            (q, d)
        }
    };
    Ok(CaseArrays {
        w: array(py, &[s.out_f(), s.in_f()], data.w.clone())?,
        scales: array(py, &[s.scale_rows(), s.scale_cols()], data.scales.clone())?,
        q: array(py, &[s.m(), s.in_f_pad()], gq.clone())?,
        d: array(py, &[s.m(), s.act_blocks()], gd.clone())?,
        data,
        gq,
        gd,
    })
}

/// mma_k32(a: uint8[..., 32], b: uint8[..., 32], c: float32[...], a_format=Fp8Format.E4M3, b_format=Fp8Format.E4M3, instruction=Instruction.WGMMA) -> float32[...]
///
/// One output element of a k = 32 FP8 tensor-core MMA per leading index:
/// `d = c + sum_k a[..., k] * b[..., k]` as the H200 computes it
/// (`oracle::tensor_core::mma_k32`, rules TC-* for `WGMMA`, MMA-* for
/// `MMA_SYNC`; derived from H200 test vectors). `a` and `b` hold FP8 codes
/// in their formats; `c`'s shape is `a`'s without the last axis. A NaN
/// result is `0x7FFFFFFF`.
///
/// Errors: `ValueError` when the last axis is not 32 or the shapes differ.
#[pyfunction]
#[pyo3(signature = (a, b, c, a_format = Fp8Format::E4m3, b_format = Fp8Format::E4m3, instruction = Instruction::Wgmma))]
fn mma_k32<'py>(
    py: Python<'py>,
    a: PyReadonlyArrayDyn<'py, u8>,
    b: PyReadonlyArrayDyn<'py, u8>,
    c: PyReadonlyArrayDyn<'py, f32>,
    a_format: Fp8Format,
    b_format: Fp8Format,
    instruction: Instruction,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    use oracle::tensor_core::MMA_K;
    let ash = a.shape().to_vec();
    if ash.last() != Some(&MMA_K) {
        return Err(PyValueError::new_err(format!(
            "a: shape {ash:?}, expected a last axis of {MMA_K}"
        )));
    }
    let av = read("b", &b, &ash).map(|bv| (to_vec(&a), bv))?;
    let lead = &ash[..ash.len() - 1];
    let cv = read("c", &c, lead)?;
    let (fa, fb, model) = (a_format.into(), b_format.into(), instruction.model());
    let (av, bv) = av;
    let out: Vec<f32> = cv
        .iter()
        .enumerate()
        .map(|(i, &ci)| {
            let ai: &[u8; MMA_K] = av[i * MMA_K..][..MMA_K].try_into().expect("32 codes");
            let bi: &[u8; MMA_K] = bv[i * MMA_K..][..MMA_K].try_into().expect("32 codes");
            oracle::tensor_core::mma_k32(&model, fa, ai, fb, bi, ci)
        })
        .collect();
    array(py, lead, out)
}

/// Adds the FP8 GEMM functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fp8_in_f_pad, m)?)?;
    m.add_function(wrap_pyfunction!(quantize_activations, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_block_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_count_nan_magnitude, m)?)?;
    m.add_function(wrap_pyfunction!(identify_fp8_block_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_block_gemm_case, m)?)?;
    m.add_function(wrap_pyfunction!(mma_k32, m)?)?;
    Ok(())
}
