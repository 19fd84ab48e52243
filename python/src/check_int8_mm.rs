//! The INT8 GEMM with row or tensor scales (`oracle::int8_scaled_mm`, W8A8
//! int8): the GEMM itself under a declared epilogue (`int8_scaled_mm`),
//! one case's arrays (`int8_scaled_mm_case`), and `check_int8_scaled_mm`,
//! which runs any Python int8 scaled mm (vLLM's `cutlass_scaled_mm` and
//! `cutlass_scaled_mm_azp`, `triton_scaled_mm`, `torch._int_mm` plus an
//! epilogue) through the case library's cases
//! (`kernel_oracle::int8_scaled_mm`) and judges its output bit for bit,
//! naming every known epilogue (scale association, bias form) it matches.

use crate::arrays::{array, dims, to_vec, value_error};
use crate::check::{
    call_args, callable_name, first_output_line, gemm_bits_row, names_or, value, CheckReport, Fill,
    Input, Out, OutKind, Seeds,
};
use kernel_oracle::int8_scaled_mm::{
    accs, identify, known_schedules, reference, schedule_label, within_caps, Arm, AzpKind, Case,
    Inputs, Scales, Spec,
};
use numpy::PyReadonlyArrayDyn;
use oracle::dtype::Dtype;
use oracle::fp8_scaled_mm::Epilogue;
use oracle::int8_scaled_mm::{Bias, Schedule};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The epilogue named `"activation_first"`, `"weight_first"` or
/// `"scales_first"`.
fn parse_epilogue(epilogue: &str) -> PyResult<Epilogue> {
    match epilogue {
        "activation_first" => Ok(Epilogue::ActivationFirst),
        "weight_first" => Ok(Epilogue::WeightFirst),
        "scales_first" => Ok(Epilogue::ScalesFirst),
        _ => Err(PyValueError::new_err(format!(
            "epilogue {epilogue:?}: expected \"activation_first\" ((acc*d)*s), \"weight_first\" ((acc*s)*d) or \"scales_first\" (acc*(d*s))"
        ))),
    }
}

/// The bias form named `None` (no bias), `"add"`, `"fused"` or
/// `"add_out"`.
fn parse_bias(bias: Option<&str>) -> PyResult<Bias> {
    match bias {
        None => Ok(Bias::Absent),
        Some("add") => Ok(Bias::Add),
        Some("fused") => Ok(Bias::Fused),
        Some("add_out") => Ok(Bias::AddOut),
        Some(b) => Err(PyValueError::new_err(format!(
            "bias {b:?}: expected None (no bias), \"add\" (product rounded, then + bias), \"fused\" (one FMA) or \"add_out\" (product rounded to the out dtype, then + bias)"
        ))),
    }
}

/// int8_scaled_mm(q, d, w, s, bias=None, azp=None, azp_adj=None, epilogue="weight_first", bias_form="fused", out_dtype="float32") -> float32[m, out_f]
///
/// The INT8 GEMM with one scale per activation row and one per weight row
/// (`oracle::int8_scaled_mm::int8_scaled_mm`), rounded once to
/// `out_dtype` and returned as float32 (the values of `out_dtype`, exact:
/// `encode_bf16` or `encode_f16` gives their bits). `q` int8 `[m, in_f]`,
/// `w` int8 `[out_f, in_f]` (`nn.Linear`'s layout; vLLM's `b` is `w.t()`),
/// `d` float32 `[m]` or `[1]`, `s` float32 `[out_f]` or `[1]` (a one-element
/// scale is per tensor), `bias` float32 `[out_f]` (values of `out_dtype`)
/// or None, and zero points as vLLM's `cutlass_scaled_mm_azp` takes them:
/// `azp_adj` int32 `[out_f]` with `azp` None is per tensor (`azp_adj[i] =
/// azp * sum_k w[i][k]`, the zero point folded in); with `azp` int32 `[m]`
/// it is per token (`azp_adj[i] = sum_k w[i][k]`).
///
/// The rules (`I8MM-*`): `acc = sum_k q[j,k] w[i,k]` exactly in int32;
/// `acc' = acc - azp[j] azp_adj[i]` (or `- azp_adj[i]`), exactly; `f =
/// float(acc')` rounded to nearest even; the scales by `epilogue`
/// (`"activation_first"` `(f*d)*s`, Triton's `acc * scale_a * scale_b`;
/// `"weight_first"` `(f*s)*d`, CUTLASS's `ScaleA * (ScaleB * Accum)`;
/// `"scales_first"` `f*(d*s)`); the bias by `bias_form` (`"add"`: the
/// product rounded, then `+ bias`; `"fused"`: the last multiply and the
/// add as one FMA, vLLM's CUTLASS `multiply_add`; `"add_out"`: the product
/// rounded to `out_dtype`, then `+ bias` rounded again, vLLM's
/// `triton_scaled_mm`; `bias_form` is read only with a `bias`); one
/// rounding to `out_dtype`.
///
/// Errors: `ValueError` for an unknown epilogue, bias form or dtype,
/// arrays of the wrong rank or lengths, `azp` without `azp_adj`, `in_f`
/// over 131071 (an int32 accumulator could overflow), an exact `acc'`
/// outside int32, a zero dimension, or a GEMM past the check's caps (2^26
/// codes, 2^22 outputs, 2^30 multiply-adds), before any arithmetic (the
/// `acc'` range during it).
///
/// Source: core's `oracle::int8_scaled_mm`; the arithmetic runs on all
/// cores with the GIL released.
#[pyfunction]
#[pyo3(signature = (q, d, w, s, bias = None, azp = None, azp_adj = None, epilogue = "weight_first", bias_form = "fused", out_dtype = "float32"))]
#[allow(clippy::too_many_arguments)]
fn int8_scaled_mm<'py>(
    py: Python<'py>,
    q: PyReadonlyArrayDyn<'py, i8>,
    d: PyReadonlyArrayDyn<'py, f32>,
    w: PyReadonlyArrayDyn<'py, i8>,
    s: PyReadonlyArrayDyn<'py, f32>,
    bias: Option<PyReadonlyArrayDyn<'py, f32>>,
    azp: Option<PyReadonlyArrayDyn<'py, i32>>,
    azp_adj: Option<PyReadonlyArrayDyn<'py, i32>>,
    epilogue: &str,
    bias_form: &str,
    out_dtype: &str,
) -> PyResult<Bound<'py, numpy::PyArrayDyn<f32>>> {
    let epilogue = parse_epilogue(epilogue)?;
    let form = parse_bias(Some(bias_form))?;
    let out = crate::check::parse_out_dtype(out_dtype)?;
    let qd = dims("q", &q, 2)?;
    let wd = dims("w", &w, 2)?;
    dims("d", &d, 1)?;
    dims("s", &s, 1)?;
    let (m, in_f, out_f) = (qd[0], qd[1], wd[0]);
    if wd[1] != in_f {
        return Err(PyValueError::new_err(format!(
            "w is [{}, {}] and q [{m}, {in_f}]: w must be [out_f, in_f] (k fastest in both)",
            wd[0], wd[1]
        )));
    }
    let shape = within_caps(m, in_f, out_f).map_err(PyValueError::new_err)?;
    let azp_kind = match (&azp, &azp_adj) {
        (None, None) => None,
        (None, Some(_)) => Some(AzpKind::Tensor),
        (Some(_), Some(_)) => Some(AzpKind::Token),
        (Some(_), None) => {
            return Err(PyValueError::new_err(
                "azp without azp_adj: per-token zero points need azp_adj[i] = sum_k w[i][k] (vLLM's cutlass_scaled_mm_azp)",
            ))
        }
    };
    for (name, a) in [("bias", &bias)] {
        if let Some(a) = a {
            dims(name, a, 1)?;
        }
    }
    if let Some(a) = &azp {
        dims("azp", a, 1)?;
    }
    if let Some(a) = &azp_adj {
        dims("azp_adj", a, 1)?;
    }
    let case = Case {
        q: to_vec(&q),
        d: to_vec(&d),
        w: to_vec(&w),
        s: to_vec(&s),
        bias: bias.as_ref().map(to_vec),
        azp: azp.as_ref().map(to_vec),
        azp_adj: azp_adj.as_ref().map(to_vec),
        azp_kind,
    };
    let schedule = Schedule {
        epilogue,
        bias: if case.bias.is_some() {
            form
        } else {
            Bias::Absent
        },
    };
    let y = py
        .detach(|| reference(&shape, &case, &schedule, out))
        .map_err(value_error)?;
    array(py, &[m, out_f], y)
}

/// The shapes `(m, in_f, out_f)` a check runs by default: one token over
/// 4096; a ragged shape (in_f 3077 = 48 * 64 + 5: a k tail past every
/// power-of-two tile; out_f 129, odd); a batch of 32 (torch's `_int_mm`
/// wants m > 16 and k, n multiples of 8); and a long k (8192) of 64
/// tokens; and a grid of several tiles each way (m 145, out_f 288: past
/// 128-row and 256-column tiles, so a scale read without its tile's offset
/// shows; 145 is one past a multiple of 16, 32, 64 and 128, so a kernel
/// whose partial last row tile is mishandled shows too). Every in_f is long enough for the BIG arm's `|acc| > 2^24`.
pub const INT8_SCALED_MM_SHAPES: [(usize, usize, usize); 5] = [
    (1, 4096, 256),
    (5, 3077, 129),
    (32, 4096, 256),
    (64, 8192, 128),
    (145, 1536, 288),
];

/// The declared inputs of a check or case, validated.
struct Declared {
    schedule: Schedule,
    inputs: Inputs,
}

fn declared(
    epilogue: &str,
    bias: Option<&str>,
    azp: Option<&str>,
    scales: &str,
    out_dtype: &str,
) -> PyResult<Declared> {
    let epilogue = parse_epilogue(epilogue)?;
    let bias = parse_bias(bias)?;
    let azp = azp
        .map(AzpKind::parse)
        .transpose()
        .map_err(PyValueError::new_err)?;
    let scales = Scales::parse(scales).map_err(PyValueError::new_err)?;
    let out = crate::check::parse_out_dtype(out_dtype)?;
    Ok(Declared {
        schedule: Schedule { epilogue, bias },
        inputs: Inputs {
            scales,
            bias: bias != Bias::Absent,
            azp,
            out,
        },
    })
}

/// The declaration as keyword arguments, for reproductions.
fn declared_kw(
    epilogue: &str,
    bias: Option<&str>,
    azp: Option<&str>,
    scales: &str,
    out: Dtype,
) -> String {
    let q = |v: Option<&str>| v.map_or("None".to_string(), |v| format!("\"{v}\""));
    format!(
        "epilogue=\"{epilogue}\", bias={}, azp={}, scales=\"{scales}\", out_dtype=\"{}\"",
        q(bias),
        q(azp),
        out.name()
    )
}

/// int8_scaled_mm_case(m, in_f, out_f, arm, seed=None, epilogue="weight_first", bias=None, azp=None, scales="row", out_dtype="bfloat16") -> dict
///
/// One case of `check_int8_scaled_mm` as new arrays, with the same
/// declaration arguments: `q` (int8 `[m, in_f]`), `d` (float32 `[m]`, or
/// `[1]` with `scales="tensor"` or `"tensor_act"`), `w` (int8 `[out_f,
/// in_f]`), `s` (float32 `[out_f]`, or `[1]` with `scales="tensor"` or
/// `"tensor_weight"`), `bias` (float32 `[out_f]`, values of `out_dtype`,
/// or None), `azp` (int32 `[m]` per token, else None), `azp_adj` (int32
/// `[out_f]`, or None), `azp_value` (the per-tensor zero point folded into
/// `azp_adj`, else None), `acc` (int32 `[m, out_f]`: the exact, adjusted
/// dot products) and the oracle's `y` (float32 `[m, out_f]`, values of
/// `out_dtype`) under the declared epilogue. `seed` None: the check's
/// first seed.
///
/// Errors: `ValueError` as `check_int8_scaled_mm`'s, and for an arm that
/// does not apply (AZP without `azp`, BIAS without `bias`).
#[pyfunction]
#[pyo3(signature = (m, in_f, out_f, arm, seed = None, epilogue = "weight_first", bias = None, azp = None, scales = "row", out_dtype = "bfloat16"))]
#[allow(clippy::too_many_arguments)]
fn int8_scaled_mm_case<'py>(
    py: Python<'py>,
    m: usize,
    in_f: usize,
    out_f: usize,
    arm: &str,
    seed: Option<u64>,
    epilogue: &str,
    bias: Option<&str>,
    azp: Option<&str>,
    scales: &str,
    out_dtype: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let dec = declared(epilogue, bias, azp, scales, out_dtype)?;
    let sp = Spec {
        m,
        in_f,
        out_f,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(m, in_f, out_f, arm, &dec.inputs)),
        inputs: dec.inputs,
    };
    let shape = sp.shape().map_err(PyValueError::new_err)?;
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let out = dec.inputs.out;
    let (y, acc) = py
        .detach(|| {
            Ok::<_, String>((
                reference(&shape, &case, &dec.schedule, out)?,
                accs(&shape, &case)?,
            ))
        })
        .map_err(value_error)?;
    let dict = PyDict::new(py);
    dict.set_item("q", array(py, &[m, in_f], case.q.clone())?)?;
    dict.set_item("d", array(py, &[case.d.len()], case.d.clone())?)?;
    dict.set_item("w", array(py, &[out_f, in_f], case.w.clone())?)?;
    dict.set_item("s", array(py, &[case.s.len()], case.s.clone())?)?;
    match &case.bias {
        Some(b) => dict.set_item("bias", array(py, &[out_f], b.clone())?)?,
        None => dict.set_item("bias", py.None())?,
    }
    let token = case.azp_kind == Some(AzpKind::Token);
    match (&case.azp, token) {
        (Some(a), true) => dict.set_item("azp", array(py, &[m], a.clone())?)?,
        _ => dict.set_item("azp", py.None())?,
    }
    match (&case.azp, case.azp_kind) {
        (Some(a), Some(AzpKind::Tensor)) => dict.set_item("azp_value", a[0])?,
        _ => dict.set_item("azp_value", py.None())?,
    }
    match &case.azp_adj {
        Some(a) => dict.set_item("azp_adj", array(py, &[out_f], a.clone())?)?,
        None => dict.set_item("azp_adj", py.None())?,
    }
    dict.set_item("acc", array(py, &[m, out_f], acc)?)?;
    dict.set_item("y", array(py, &[m, out_f], y)?)?;
    Ok(dict)
}

/// check_int8_scaled_mm(mm, epilogue="weight_first", bias=None, azp=None, scales="row", out_dtype="bfloat16", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `mm`, an INT8 GEMM with row or tensor scales, through the arms
/// `RAND` (uniform codes, -128 included, random scales and bias: the
/// scale associations and bias forms differ in most float32 outputs),
/// `BIG` (one-signed rows of large codes: `|acc| > 2^24`, so the
/// conversion to float rounds, and a kernel that sums the products in
/// float32 differs; every fourth weight row changes sign halfway so that
/// such a sum's errors show in a bfloat16 output too), `EDGE` (half the
/// codes -128: a kernel that reads codes unsigned or -128 as +128
/// differs), and, when declared, `AZP` (activations at their zero point
/// but one code a row: `acc` and `azp * azp_adj` over `2^24`, their
/// difference small) and `BIAS` (a bias that cancels the rounded product:
/// `"add"` gives +0 where `"fused"` keeps the product's rounding error,
/// which also tells the scale associations apart), then `ROUND` (every
/// activation row the same codes, so each column's `acc'` is chosen:
/// with power-of-two scales in even rows, ties of the output dtype and
/// `acc' > 2^24` where the int32-to-float conversion toward zero lands on
/// a tie the nearest one passes, so ties away from zero in the output and
/// a `cvt.rz` conversion differ; with random scales in odd rows, `acc'`
/// searched so that the three associations and an epilogue in float64
/// rounded once differ pairwise, in every output dtype; a one-token shape
/// tests only the former), and judges its output bit for bit (any NaN
/// equal to any NaN) against `int8_scaled_mm` under the declared
/// epilogue, rounded once to `out_dtype`.
///
/// The declaration: `epilogue` (`"activation_first"` `(f*d)*s`: Triton,
/// vLLM's `triton_scaled_mm`, torch; `"weight_first"` `(f*s)*d`: vLLM's
/// CUTLASS; `"scales_first"` `f*(d*s)`), `bias` (None; `"add"`;
/// `"fused"`: vLLM's CUTLASS, a Triton `x * y + b`; `"add_out"`: vLLM's
/// `triton_scaled_mm`), `azp` (None; `"tensor"`; `"token"`) and `scales`
/// (`"row"`: `d [m]`, `s [out_f]`; `"tensor"`: `d [1]`, `s [1]`;
/// `"tensor_act"`: `d [1]`, `s [out_f]`, vLLM's static per-tensor
/// activations with per-channel weights; `"tensor_weight"`: `d [m]`, `s
/// [1]`).
///
/// The callable: `mm(q, d, w, s, bias, azp, azp_adj, out)`, with `q` int8
/// `[m, in_f]`, `d` float32 `[m]` (`[1]` with `scales="tensor"` or
/// `"tensor_act"`), `w` int8 `[out_f, in_f]`, `s` float32 `[out_f]` (`[1]`
/// with `"tensor"` or `"tensor_weight"`), `bias` float32
/// `[out_f]` holding values of `out_dtype` (None without a bias), `azp`
/// and `azp_adj` as vLLM's `cutlass_scaled_mm_azp(a, b, scale_a, scale_b,
/// out_dtype, azp_adj, azp, bias)` takes them (both None for symmetric
/// activations; `azp` None and `azp_adj[i] = azp * sum_k w[i][k]` per
/// tensor; `azp` int32 `[m]` and `azp_adj[i] = sum_k w[i][k]` per token),
/// and `out` `[m, out_f]`: float32 for `"float32"` (filled with NaN),
/// else uint16 bit patterns of the bfloat16 or float16 output (filled
/// with the format's quiet NaN); writing `out` and returning None, or
/// returning a new array. torch users: `qt = torch.from_numpy(q).cuda()`,
/// `y = torch._int_mm(qt, wt.t())`, then the epilogue, then `out[...] =
/// y.view(torch.uint16).cpu().numpy()`. A kernel that refuses a shape
/// raises `kernel_oracle.Refused`.
///
/// Each row names the known epilogues (three associations, each with the
/// declared bias's three forms, or without a bias) the output matches bit
/// for bit. In a bfloat16 or float16 output the associations show only
/// where a rounding falls near a tie: a float32 output, ROUND (with `m >=
/// 2` and row scales on both sides), or a fused bias's BIAS arm, tells
/// them apart.
///
/// Errors: `ValueError` for an unknown epilogue, bias form, azp kind,
/// scales, dtype or arm, an empty `arms` list, an arm that does not apply (`AZP` without `azp`,
/// `BIAS` without `bias`), a zero dimension, `in_f` over 131071, or a
/// case over the caps (2^26 codes, 2^22 outputs, 2^30 multiply-adds),
/// before any call. Every check also raises `ValueError`, before any call,
/// for `trials` below 1 or an empty `seeds` list.
#[pyfunction]
#[pyo3(signature = (mm, epilogue = "weight_first", bias = None, azp = None, scales = "row", out_dtype = "bfloat16", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_int8_scaled_mm<'py>(
    py: Python<'py>,
    mm: Bound<'py, PyAny>,
    epilogue: &str,
    bias: Option<&str>,
    azp: Option<&str>,
    scales: &str,
    out_dtype: &str,
    shapes: Option<Vec<(usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&mm, "mm")?;
    let seeds = Seeds::new(seeds, trials)?;
    let dec = declared(epilogue, bias, azp, scales, out_dtype)?;
    let (schedule, inputs) = (dec.schedule, dec.inputs);
    let out = inputs.out;
    let shapes = shapes.unwrap_or_else(|| INT8_SCALED_MM_SHAPES.to_vec());
    let arms = crate::check::arms_or_all(arms, &Arm::defaults(&inputs), Arm::parse)?;
    for &a in &arms {
        if !a.applies(&inputs) {
            return Err(PyValueError::new_err(format!(
                "arm {} needs {} declared",
                a.name(),
                if a == Arm::Azp {
                    "azp=\"tensor\" or \"token\""
                } else {
                    "a bias (bias=\"add\", \"fused\" or \"add_out\")"
                }
            )));
        }
    }
    for &(m, in_f, out_f) in &shapes {
        within_caps(m, in_f, out_f).map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&mm, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "int8_scaled_mm".into(),
        ..CheckReport::default()
    };
    let label = schedule_label(&schedule);
    let kw = declared_kw(epilogue, bias, azp, scales, out);
    let azp_label = azp.map_or("symmetric".to_string(), |a| format!("azp per {a}"));
    o.row(&format!(
        "check_int8_scaled_mm({fname}), out {}, {scales} scales, {azp_label}, declared: {label}",
        out.name()
    ))?;
    o.row(&format!(
        "{:<16} {:>5} {:>18} {:>15} {:>9}  verdict  matches",
        "m,in_f,out_f", "arm", "seed", "outputs differ", "call_ms"
    ))?;
    let kind = OutKind::of(out);
    for &(m, in_f, out_f) in &shapes {
        for &arm in &arms {
            let base = Spec::base_seed(m, in_f, out_f, arm, &inputs);
            for seed in seeds.for_case(base) {
                let sp = Spec {
                    m,
                    in_f,
                    out_f,
                    arm,
                    seed,
                    inputs,
                };
                let shape = sp.shape().map_err(PyValueError::new_err)?;
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let (want, acc) = py
                    .detach(|| {
                        Ok::<_, String>((
                            reference(&shape, &case, &schedule, out)?,
                            accs(&shape, &case)?,
                        ))
                    })
                    .map_err(value_error)?;
                // The codes as bytes (compared after the call), handed as
                // int8 views of the same memory.
                let qb: Vec<u8> = case.q.iter().map(|&c| c as u8).collect();
                let wb: Vec<u8> = case.w.iter().map(|&c| c as u8).collect();
                let empty_i32: Vec<i32> = Vec::new();
                let empty_f32: Vec<f32> = Vec::new();
                let bias_v = case.bias.as_ref().unwrap_or(&empty_f32);
                let adj_v = case.azp_adj.as_ref().unwrap_or(&empty_i32);
                let azp_v = case.azp.as_ref().unwrap_or(&empty_i32);
                let token = case.azp_kind == Some(AzpKind::Token);
                let mut inputs_cmp = vec![
                    ("q", Input::U8(array(py, &[m, in_f], qb.clone())?, &qb)),
                    (
                        "d",
                        Input::F32(array(py, &[case.d.len()], case.d.clone())?, &case.d),
                    ),
                    ("w", Input::U8(array(py, &[out_f, in_f], wb.clone())?, &wb)),
                    (
                        "s",
                        Input::F32(array(py, &[case.s.len()], case.s.clone())?, &case.s),
                    ),
                ];
                let as_i8 = |a: &Bound<'py, PyAny>| a.call_method1("view", ("int8",));
                let mut args = vec![
                    as_i8(&inputs_cmp[0].1.array())?,
                    inputs_cmp[1].1.array(),
                    as_i8(&inputs_cmp[2].1.array())?,
                    inputs_cmp[3].1.array(),
                ];
                if case.bias.is_some() {
                    let a = Input::F32(array(py, &[out_f], bias_v.clone())?, bias_v);
                    args.push(a.array());
                    inputs_cmp.push(("bias", a));
                } else {
                    args.push(py.None().into_bound(py));
                }
                if token {
                    let a = Input::I32(array(py, &[m], azp_v.clone())?, azp_v);
                    args.push(a.array());
                    inputs_cmp.push(("azp", a));
                } else {
                    args.push(py.None().into_bound(py));
                }
                if case.azp_adj.is_some() {
                    let a = Input::I32(array(py, &[out_f], adj_v.clone())?, adj_v);
                    args.push(a.array());
                    inputs_cmp.push(("azp_adj", a));
                } else {
                    args.push(py.None().into_bound(py));
                }
                let out_arr = kind.array(py, &[m, out_f], &Fill::new(&inputs_cmp))?;
                args.push(out_arr.clone());
                let (called, ms) = call_args(
                    py,
                    &mm,
                    args,
                    &inputs_cmp,
                    &[(&[m, out_f], kind)],
                    vec![out_arr],
                )?;
                let a = arm.name();
                let row = format!("{:<16} {a:>5} 0x{seed:016x}", format!("{m},{in_f},{out_f}"));
                let repro = format!(
                    "kernel_oracle.check_int8_scaled_mm({fname}, {kw}, shapes=[({m}, {in_f}, {out_f})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL int8_scaled_mm: m={m} in_f={in_f} out_f={out_f} arm={a} seed=0x{seed:016x}, out {}, declared: {label}",
                    out.name()
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = got[0].bits(out);
                let wantb = kernel_oracle::dtype::bits(out, &want);
                let matches: Vec<String> = py
                    .detach(|| identify(&shape, &case, out, &got))
                    .map_err(PyValueError::new_err)?
                    .iter()
                    .map(schedule_label)
                    .collect();
                let (differ, pass) =
                    gemm_bits_row(&mut o, &row, ms, out, &got, &wantb, &written, &matches)?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = crate::check::failure_head(&head, &written);
                let x = case.operands();
                first_output_line(&mut r, out, &differ, &got, &wantb, out_f, |j, i| {
                    let bias = case
                        .bias
                        .as_ref()
                        .map_or(String::new(), |b| format!(", bias = {}", value(b[i])));
                    format!(
                        "acc' = {}, d = {}, s = {}{bias}",
                        acc[j * out_f + i],
                        value(x.d_at(j)),
                        value(x.s_at(i))
                    )
                });
                let _ = writeln!(
                    r,
                    "  the output matches: {}",
                    names_or(&matches, "; ", "no known epilogue")
                );
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's output:\n  kernel_oracle.int8_scaled_mm_case({m}, {in_f}, {out_f}, \"{a}\", seed=0x{seed:016x}, {kw})"
                );
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let known = known_schedules(inputs.bias).len();
    rep.finish(
        o,
        &format!(
            "known epilogues: {known} (three scale associations{}); ",
            if inputs.bias {
                ", each with + bias, fma bias, + bias in out dtype"
            } else {
                ""
            }
        ),
    )
}

/// Adds the INT8 scaled GEMM, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("INT8_SCALED_MM_SHAPES", INT8_SCALED_MM_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(int8_scaled_mm, m)?)?;
    m.add_function(wrap_pyfunction!(check_int8_scaled_mm, m)?)?;
    m.add_function(wrap_pyfunction!(int8_scaled_mm_case, m)?)?;
    Ok(())
}
