//! Gated DeltaNet decode rows (seed 003) on numpy arrays, as core defines
//! them (`oracle::gdn::rows::decode_rows`, through the case library's fast
//! path `kernel_oracle::gdn_fast::decode_rows_fast`, bit-identical): conv1d
//! with SiLU over a ring of previous inputs, q/k L2 normalization, beta =
//! sigmoid, g = -exp(A_log) * softplus(alpha + dt_bias), the delta-rule
//! scan on a `[num_v, 128, 128]` state (decay first, then the delta, then
//! the read `o = q . S`), each row in turn, with the ring and the state
//! snapshotted after every row but the last. `t = 1` is one decode step.
//! Every transcendental is core's sequence of basic operations.

use crate::arrays::{array, dims, read, value_error};
use kernel_oracle::gdn_fast::decode_rows_fast;
use numpy::PyReadonlyArrayDyn;
use oracle::gdn::rows::{PackedOutputs, RowInputs};
use oracle::gdn::scan::{StatePair, StateSlot};
use oracle::gdn::{default_scale, GdnParams, GdnShape, D_STATE};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// gdn_decode_rows(qkv, beta_raw, alpha, conv_w, dt_bias, a_log, ring, state, num_k, eps=1e-6, scale=None) -> dict
///
/// Shapes (float32, elements), with `K = 128 num_k`, `V = 128 num_v`,
/// `C = 2K + V` channels, `P = d_conv - 1`:
/// - `qkv [t, C]` (the fused projection, q|k|v), `beta_raw [t, num_v]`,
///   `alpha [t, num_v]`: the rows; `t` rows from `qkv`;
/// - `conv_w [C, d_conv]` (d_conv in 2..=4), `dt_bias [num_v]`,
///   `a_log [num_v]`: the layer (`num_v` from `dt_bias`);
/// - `ring [C, P]`: the conv inputs before row 0; `state [num_v, 128,
///   128]`: the recurrent state before row 0;
/// - `eps`: the L2-norm epsilon inside the square root (seed: 1e-6);
///   `scale`: the output scale (None: `1 / sqrt(128)` as the seed
///   computes it, `0x3DB504F3`).
///
/// Returns a dict of new arrays: `conv_out [t, C]`, `o [t, V]`, `ring
/// [C, P]` and `state [num_v, 128, 128]` after the last row, `snap_conv
/// [t-1, C, P]` and `snap_state [t-1, num_v, 128, 128]` after each row
/// but the last (speculative verification rolls back to them).
///
/// Errors: `ValueError` with core's sentence (num_v not a multiple of
/// num_k, d_conv outside 2..=4, a length that disagrees).
#[pyfunction]
#[pyo3(signature = (qkv, beta_raw, alpha, conv_w, dt_bias, a_log, ring, state, num_k, eps = 1e-6, scale = None))]
#[allow(clippy::too_many_arguments)]
fn gdn_decode_rows<'py>(
    py: Python<'py>,
    qkv: PyReadonlyArrayDyn<'py, f32>,
    beta_raw: PyReadonlyArrayDyn<'py, f32>,
    alpha: PyReadonlyArrayDyn<'py, f32>,
    conv_w: PyReadonlyArrayDyn<'py, f32>,
    dt_bias: PyReadonlyArrayDyn<'py, f32>,
    a_log: PyReadonlyArrayDyn<'py, f32>,
    ring: PyReadonlyArrayDyn<'py, f32>,
    state: PyReadonlyArrayDyn<'py, f32>,
    num_k: usize,
    eps: f32,
    scale: Option<f32>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = dims("qkv", &qkv, 2)?[0];
    let num_v = dims("dt_bias", &dt_bias, 1)?[0];
    let d_conv = dims("conv_w", &conv_w, 2)?[1];
    let s = GdnShape::new(num_k, num_v, D_STATE, d_conv, t).map_err(value_error)?;
    let (cd, vd, p) = (s.conv_dim(), s.value_dim(), d_conv - 1);
    let qkv = read("qkv", &qkv, &[t, cd])?;
    let beta_raw = read("beta_raw", &beta_raw, &[t, num_v])?;
    let alpha = read("alpha", &alpha, &[t, num_v])?;
    let conv_w = read("conv_w", &conv_w, &[cd, d_conv])?;
    let dt_bias = read("dt_bias", &dt_bias, &[num_v])?;
    let a_log = read("a_log", &a_log, &[num_v])?;
    let mut ring = read("ring", &ring, &[cd, p])?;
    let mut canonical = read("state", &state, &[num_v, D_STATE, D_STATE])?;
    let mut alt = vec![0f32; s.state_len()];
    let mut conv_out = vec![0f32; t * cd];
    let mut o = vec![0f32; t * vd];
    let mut snap_conv = vec![0f32; s.snapshots() * s.ring_len()];
    let mut snap_state = vec![0f32; s.snapshots() * s.state_len()];
    let params = GdnParams {
        conv_w: &conv_w,
        dt_bias: &dt_bias,
        a_log: &a_log,
        eps,
        scale: scale.unwrap_or_else(default_scale),
    };
    let input = RowInputs {
        qkv: &qkv,
        beta_raw: &beta_raw,
        alpha: &alpha,
    };
    let slot = decode_rows_fast(
        &s,
        &params,
        &input,
        &mut ring,
        StatePair {
            canonical: &mut canonical,
            alt: &mut alt,
        },
        PackedOutputs {
            conv_out: &mut conv_out,
            o: &mut o,
            snap_conv: &mut snap_conv,
            snap_state: &mut snap_state,
        },
    )
    .map_err(value_error)?;
    let final_state = match slot {
        StateSlot::Canonical => canonical,
        StateSlot::Alt => alt,
    };
    let dict = PyDict::new(py);
    dict.set_item("conv_out", array(py, &[t, cd], conv_out)?)?;
    dict.set_item("o", array(py, &[t, vd], o)?)?;
    dict.set_item("ring", array(py, &[cd, p], ring)?)?;
    dict.set_item("state", array(py, &[num_v, D_STATE, D_STATE], final_state)?)?;
    dict.set_item("snap_conv", array(py, &[t - 1, cd, p], snap_conv)?)?;
    dict.set_item(
        "snap_state",
        array(py, &[t - 1, num_v, D_STATE, D_STATE], snap_state)?,
    )?;
    Ok(dict)
}

/// Adds the GDN functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gdn_decode_rows, m)?)?;
    Ok(())
}
