//! ggml's quantized blocks and `mul_mat` (seed 004) on numpy arrays, as
//! core defines them (`oracle::ggml`; ggml-quants.c's
//! `dequantize_row_*`), `mul_mat` through the case library's fast path
//! (`kernel_oracle::ggml_fast::mul_mat_fast`, bit-identical to
//! `oracle::ggml::mul_mat::mul_mat`).
//!
//! A row of K elements in a format is `row_bytes(dtype, K)` bytes of whole
//! blocks (K a multiple of the block's elements); f32 rows are K
//! little-endian binary32 values.

use crate::arrays::{array, dims, read, to_vec, value_error};
use crate::conventions::GgmlType;
use numpy::{PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// ggml_row_bytes(dtype: GgmlType, k: int) -> int
///
/// Bytes of one row of `k` elements (`Dtype::row_bytes`).
///
/// Errors: `ValueError` if `k` is not a multiple of the block's elements
/// or the size overflows.
#[pyfunction]
fn ggml_row_bytes(dtype: GgmlType, k: usize) -> PyResult<usize> {
    dtype.core().row_bytes(k).map_err(value_error)
}

/// The row length K (elements) of rows of `bytes` bytes.
///
/// # Errors
/// `ValueError` if `bytes` is not a whole number of blocks.
pub fn k_of(dtype: GgmlType, bytes: usize) -> PyResult<usize> {
    let d = dtype.core();
    if !bytes.is_multiple_of(d.block_bytes()) {
        return Err(PyValueError::new_err(format!(
            "{bytes} bytes per row is not a whole number of {} blocks ({} bytes each)",
            d.name(),
            d.block_bytes()
        )));
    }
    Ok(bytes / d.block_bytes() * d.block_elems())
}

/// ggml_dequantize(dtype: GgmlType, blocks: uint8[rows, row_bytes]) -> float32[rows, k]
///
/// Each row's blocks dequantized exactly as ggml defines them
/// (`oracle::ggml::dequantize`; f16 scales, which may be negative, are
/// kept with their sign). A 1-D `blocks` gives a 1-D result.
///
/// Errors: `ValueError` if a row is not a whole number of blocks.
#[pyfunction]
fn ggml_dequantize<'py>(
    py: Python<'py>,
    dtype: GgmlType,
    blocks: PyReadonlyArrayDyn<'py, u8>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let shape = blocks.shape().to_vec();
    if shape.is_empty() || shape.len() > 2 {
        return Err(PyValueError::new_err(format!(
            "blocks: shape {shape:?}, expected [row_bytes] or [rows, row_bytes]"
        )));
    }
    let bytes = *shape.last().expect("not empty");
    let k = k_of(dtype, bytes)?;
    let src = to_vec(&blocks);
    let mut out = vec![0f32; src.len() / bytes.max(1) * k];
    for (row, o) in src
        .chunks_exact(bytes.max(1))
        .zip(out.chunks_exact_mut(k.max(1)))
    {
        oracle::ggml::dequantize(dtype.core(), row, o).map_err(value_error)?;
    }
    let mut out_shape = shape;
    *out_shape.last_mut().expect("not empty") = k;
    array(py, &out_shape, out)
}

/// ggml_mul_mat(dtype: GgmlType, src0: uint8[m, row_bytes], src1: float32[n, k]) -> float32[n, m]
///
/// `dst[n, m] = sum over k of w[m, k] * src1[n, k]`, `w` the dequantized
/// `src0` (ggml's `mul_mat` layout: src0's rows are the output's columns),
/// each sum one binary32 accumulator from `+0.0` in increasing k, each
/// product and addition rounded (`oracle::ggml::mul_mat::mul_mat`, rules
/// MM-*).
///
/// Errors: `ValueError` on a row that is not whole blocks or a k that
/// disagrees between `src0` and `src1`.
#[pyfunction]
fn ggml_mul_mat<'py>(
    py: Python<'py>,
    dtype: GgmlType,
    src0: PyReadonlyArrayDyn<'py, u8>,
    src1: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let s0 = dims("src0", &src0, 2)?;
    let s1 = dims("src1", &src1, 2)?;
    let (m, k, n) = (s0[0], k_of(dtype, s0[1])?, s1[0]);
    let a = to_vec(&src0);
    let b = read("src1", &src1, &[n, k])?;
    let dst = py
        .detach(|| {
            let mut dst = vec![0f32; n * m];
            kernel_oracle::ggml_fast::mul_mat_fast(dtype.core(), m, n, k, &a, &b, &mut dst)
                .map(|()| dst)
        })
        .map_err(value_error)?;
    array(py, &[n, m], dst)
}

/// Adds the ggml functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ggml_row_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(ggml_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(ggml_mul_mat, m)?)?;
    Ok(())
}
