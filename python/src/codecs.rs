//! The float codecs of core, elementwise on numpy arrays of any shape: the
//! result has the input's shape. Definitions, rounding and edge rules are
//! core's (`oracle::e4m3`, `oracle::e5m2`, `oracle::f16`, `oracle::bf16`;
//! OCP OFP8 1.0, IEEE 754 binary16, bfloat16), bit for bit.

use crate::arrays::{array, to_vec};
use crate::conventions::{NanMagnitude, Overflow};
use numpy::{PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

fn map<'py, A, B>(
    py: Python<'py>,
    x: &PyReadonlyArrayDyn<'py, A>,
    f: impl Fn(A) -> B,
) -> PyResult<Bound<'py, PyArrayDyn<B>>>
where
    A: numpy::Element + Copy,
    B: numpy::Element,
{
    let shape = x.shape().to_vec();
    array(py, &shape, to_vec(x).into_iter().map(f).collect())
}

/// decode_e4m3(codes: uint8[...], nan=NanMagnitude.IEEE) -> float32[...]
///
/// The value of each E4M3FN code (`oracle::e4m3::decode_e4m3`): exact;
/// 0x7F/0xFF are NaN (`IEEE`, the f32 quiet NaN with the code's sign) or
/// `+0.0` (`READ_AS_ZERO`).
#[pyfunction]
#[pyo3(signature = (codes, nan = NanMagnitude::Ieee))]
fn decode_e4m3<'py>(
    py: Python<'py>,
    codes: PyReadonlyArrayDyn<'py, u8>,
    nan: NanMagnitude,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let nan = nan.into();
    map(py, &codes, |c| oracle::e4m3::decode_e4m3(c, nan))
}

/// encode_e4m3(x: float32[...], overflow=Overflow.SAT_FINITE) -> uint8[...]
///
/// Each f32 rounded to nearest even E4M3FN (`oracle::e4m3::encode_e4m3`);
/// beyond ±448 as `overflow` says (`SAT_FINITE`: ±448 and NaN gives 0x7F;
/// `NON_SATURATING`: NaN, 0x7F or 0xFF with the sign).
#[pyfunction]
#[pyo3(signature = (x, overflow = Overflow::SatFinite))]
fn encode_e4m3<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    overflow: Overflow,
) -> PyResult<Bound<'py, PyArrayDyn<u8>>> {
    let o = overflow.into();
    map(py, &x, |v| oracle::e4m3::encode_e4m3(v, o))
}

/// decode_e5m2(codes: uint8[...], nan=NanMagnitude.IEEE) -> float32[...]
///
/// The value of each E5M2 code (`oracle::e5m2::decode_e5m2`): exact;
/// 0x7C/0xFC are ±inf; the six NaN codes follow `nan`.
#[pyfunction]
#[pyo3(signature = (codes, nan = NanMagnitude::Ieee))]
fn decode_e5m2<'py>(
    py: Python<'py>,
    codes: PyReadonlyArrayDyn<'py, u8>,
    nan: NanMagnitude,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let nan = nan.into();
    map(py, &codes, |c| oracle::e5m2::decode_e5m2(c, nan))
}

/// encode_e5m2(x: float32[...], overflow=Overflow.SAT_FINITE) -> uint8[...]
///
/// Each f32 rounded to nearest even E5M2 (`oracle::e5m2::encode_e5m2`);
/// beyond ±57344 as `overflow` says (`SAT_FINITE`: ±57344, `±inf` too;
/// `NON_SATURATING`: ±inf).
#[pyfunction]
#[pyo3(signature = (x, overflow = Overflow::SatFinite))]
fn encode_e5m2<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    overflow: Overflow,
) -> PyResult<Bound<'py, PyArrayDyn<u8>>> {
    let o = overflow.into();
    map(py, &x, |v| oracle::e5m2::encode_e5m2(v, o))
}

/// decode_f16(bits: uint16[...]) -> float32[...]
///
/// The value of each IEEE binary16 bit pattern (`oracle::f16::decode_f16`),
/// exact; NaN payloads kept in the top bits.
#[pyfunction]
fn decode_f16<'py>(
    py: Python<'py>,
    bits: PyReadonlyArrayDyn<'py, u16>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    map(py, &bits, oracle::f16::decode_f16)
}

/// encode_f16(x: float32[...]) -> uint16[...]
///
/// Each f32 rounded to nearest even binary16 (`oracle::f16::encode_f16`):
/// overflow gives ±inf, NaN stays NaN with its sign and top payload bits.
#[pyfunction]
fn encode_f16<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<u16>>> {
    map(py, &x, oracle::f16::encode_f16)
}

/// decode_bf16(bits: uint16[...]) -> float32[...]
///
/// The value of each bfloat16 bit pattern (`oracle::bf16::decode_bf16`):
/// the f32 with those 16 bits on top, exact.
#[pyfunction]
fn decode_bf16<'py>(
    py: Python<'py>,
    bits: PyReadonlyArrayDyn<'py, u16>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    map(py, &bits, oracle::bf16::decode_bf16)
}

/// encode_bf16(x: float32[...]) -> uint16[...]
///
/// Each f32 rounded to nearest even bfloat16 (`oracle::bf16::encode_bf16`);
/// NaN stays NaN with its sign and top payload bits, quiet bit set.
#[pyfunction]
fn encode_bf16<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
) -> PyResult<Bound<'py, PyArrayDyn<u16>>> {
    map(py, &x, oracle::bf16::encode_bf16)
}

/// Adds the codecs to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_e4m3, m)?)?;
    m.add_function(wrap_pyfunction!(encode_e4m3, m)?)?;
    m.add_function(wrap_pyfunction!(decode_e5m2, m)?)?;
    m.add_function(wrap_pyfunction!(encode_e5m2, m)?)?;
    m.add_function(wrap_pyfunction!(decode_f16, m)?)?;
    m.add_function(wrap_pyfunction!(encode_f16, m)?)?;
    m.add_function(wrap_pyfunction!(decode_bf16, m)?)?;
    m.add_function(wrap_pyfunction!(encode_bf16, m)?)?;
    Ok(())
}
