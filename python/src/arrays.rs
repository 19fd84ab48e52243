//! numpy array helpers: read any layout in C order, check shapes with
//! messages that name the argument, build C-contiguous results.

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{Element, IntoPyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The elements of `a` in C (row-major) order, whatever its strides.
pub fn to_vec<T: Element + Copy>(a: &PyReadonlyArrayDyn<'_, T>) -> Vec<T> {
    a.as_array().iter().copied().collect()
}

/// `a`'s elements in C order, after checking that its shape is `want`.
///
/// # Errors
/// `ValueError` naming `arg`, the shape expected and the shape given.
pub fn read<T: Element + Copy>(
    arg: &str,
    a: &PyReadonlyArrayDyn<'_, T>,
    want: &[usize],
) -> PyResult<Vec<T>> {
    if a.shape() != want {
        return Err(PyValueError::new_err(format!(
            "{arg}: shape {:?}, expected {want:?}",
            a.shape()
        )));
    }
    Ok(to_vec(a))
}

/// `a`'s shape after checking its number of dimensions.
///
/// # Errors
/// `ValueError` naming `arg` when `a` does not have `ndim` dimensions.
pub fn dims<T: Element>(
    arg: &str,
    a: &PyReadonlyArrayDyn<'_, T>,
    ndim: usize,
) -> PyResult<Vec<usize>> {
    if a.ndim() != ndim {
        return Err(PyValueError::new_err(format!(
            "{arg}: {} dimensions (shape {:?}), expected {ndim}",
            a.ndim(),
            a.shape()
        )));
    }
    Ok(a.shape().to_vec())
}

/// A new C-contiguous array of `shape` holding `v` (C order).
///
/// # Errors
/// `ValueError` if `v.len()` is not the product of `shape` (a bug here).
pub fn array<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
    v: Vec<T>,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| PyValueError::new_err(format!("result shape {shape:?}: {e}")))?;
    Ok(a.into_pyarray(py))
}

/// `Err(ValueError(message))` from anything that displays.
pub fn value_error<E: std::fmt::Display>(e: E) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The ValueError of RMSNorm's declaration `e`, made from an `eps` the
/// check rounded to float32 first: where `e` is about eps
/// ([`oracle::rms_norm::RmsNormError::Eps`]) and the rounding changed it
/// (1e-50 becomes 0, 1e300 inf), the message names the value the caller
/// gave too, not only the float32 it became; any other error is left as
/// it is.
pub fn eps_error(eps: f64, e: oracle::rms_norm::RmsNormError) -> PyErr {
    let eps32 = eps as f32;
    let about_eps = matches!(e, oracle::rms_norm::RmsNormError::Eps { .. });
    if !about_eps || f64::from(eps32) == eps || eps.is_nan() {
        value_error(e)
    } else {
        PyValueError::new_err(format!(
            "{e}; the declared eps {eps:e} rounds to {eps32:e} in float32"
        ))
    }
}
