//! The MoE verify-rows tables (seed 002) on numpy arrays, as core defines
//! them (`oracle::moe_tables::vrows_tables`): per (row, expert) pair the
//! gate, up and down weight pointers `base + e * stride` in 64-bit
//! arithmetic (rule PTR-64) and scales (gate `macro_g[e]`, up
//! `macro_u[e]`, down `w * macro_d[e]`, one rounded multiply with a NaN
//! result canonical `0x7FFFFFFF`; 1.0 when the bank has no macros).

use crate::arrays::{array, dims, read, to_vec, value_error};
use numpy::{PyArrayDyn, PyReadonlyArrayDyn};
use oracle::moe_tables::{vrows_tables, Bank, Slab, PLANES};
use pyo3::prelude::*;

/// moe_vrows_tables(experts: int32[n], weights: float32[n], n_expert: int, bases: (int, int, int), strides: (int, int, int), macros: float32[3, n_expert] | None = None) -> (ptrs: uint64[3, n], scales: float32[3, n])
///
/// The tables in plane order gate, up, down: row `plane` of `ptrs` and
/// `scales` holds that plane's entry for every pair. `bases` and
/// `strides` are bytes; `macros` rows are the gate, up and down macro
/// scales of each expert.
///
/// Errors: `ValueError` with core's sentence for an expert id outside
/// `0 .. n_expert` (rule RANGE), a pointer beyond 2^64 (PTR-64) or a
/// length mismatch; nothing is returned then (ALL-OR-NOTHING).
#[pyfunction]
#[pyo3(signature = (experts, weights, n_expert, bases, strides, macros = None))]
#[allow(clippy::type_complexity)]
fn moe_vrows_tables<'py>(
    py: Python<'py>,
    experts: PyReadonlyArrayDyn<'py, i32>,
    weights: PyReadonlyArrayDyn<'py, f32>,
    n_expert: usize,
    bases: (u64, u64, u64),
    strides: (u64, u64, u64),
    macros: Option<PyReadonlyArrayDyn<'py, f32>>,
) -> PyResult<(Bound<'py, PyArrayDyn<u64>>, Bound<'py, PyArrayDyn<f32>>)> {
    let n = dims("experts", &experts, 1)?[0];
    let e = to_vec(&experts);
    let w = read("weights", &weights, &[n])?;
    let m = match &macros {
        Some(a) => Some(read("macros", a, &[PLANES, n_expert])?),
        None => None,
    };
    let slab = |b, s| Slab { base: b, stride: s };
    let bank = Bank {
        n_expert,
        slabs: [
            slab(bases.0, strides.0),
            slab(bases.1, strides.1),
            slab(bases.2, strides.2),
        ],
        macros: m.as_ref().map(|m| {
            [
                &m[..n_expert],
                &m[n_expert..2 * n_expert],
                &m[2 * n_expert..],
            ]
        }),
    };
    let mut ptrs = vec![0u64; PLANES * n];
    let mut scales = vec![0f32; PLANES * n];
    vrows_tables(&bank, &e, &w, &mut ptrs, &mut scales).map_err(value_error)?;
    Ok((
        array(py, &[PLANES, n], ptrs)?,
        array(py, &[PLANES, n], scales)?,
    ))
}

/// Adds the MoE functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(moe_vrows_tables, m)?)?;
    Ok(())
}
