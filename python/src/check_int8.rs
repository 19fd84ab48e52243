//! INT8 activation quantization for W8A8 int8 (`oracle::int8_quant`):
//! `quantize_int8`, the quantizer itself under a declared rule (vLLM's
//! `scaled_int8_quant`: static or dynamic per token, symmetric or with a
//! zero point); `int8_quant_case`, one case's arrays; and
//! `check_int8_quant`, which runs any Python quantizer through the case
//! library's cases (`kernel_oracle::int8_quant`) and judges its codes,
//! scales and zero points bit for bit, naming every known rule its
//! output matches.

use crate::arrays::{array, to_vec};
use crate::check::{
    arms_or_all, call_args, callable_name, failure_head, names_or, rerun_tail, value, CheckReport,
    Fill, Got, Held, Out, OutKind, Seeds,
};
use kernel_oracle::int8_quant::{
    int8_identify, int8_known, int8_reference, vllm_rule, Int8Arm, Int8Out, Int8Spec, Int8Verdict,
    INT8_SHAPES,
};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use oracle::dtype::Dtype;
use oracle::int8_quant::{quantize_int8 as quantize, Codes, Int8Rule, Int8Scale};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// What a check or quantizer was asked for: the source of its scale, its
/// rule and its input dtype, from the Python arguments.
#[derive(Clone, Copy, Debug)]
struct Declared {
    source: Int8Scale,
    rule: Int8Rule,
    dtype: Dtype,
}

impl Declared {
    /// `mode` (`"static"`, `"dynamic"`), `symmetric`, `scale`, `azp`,
    /// `rule` (`None`: vLLM's for the mode) and `dtype`, checked.
    fn new(
        mode: &str,
        symmetric: bool,
        scale: Option<f32>,
        azp: Option<i64>,
        rule: Option<&str>,
        dtype: &str,
    ) -> PyResult<Declared> {
        let bad = |m: String| Err(PyValueError::new_err(m));
        let dtype = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
        let source = match mode.to_ascii_lowercase().as_str() {
            "dynamic" => {
                if scale.is_some() || azp.is_some() {
                    return bad("mode \"dynamic\" takes no scale or azp (each row's come from the row); pass mode=\"static\" for a given scale".into());
                }
                Int8Scale::Dynamic { symmetric }
            }
            "static" => {
                let Some(s) = scale else {
                    return bad("mode \"static\" needs scale (a finite, positive float)".into());
                };
                if !(s.is_finite() && s > 0.0) {
                    return bad(format!("scale = {s}: it must be finite and positive"));
                }
                let azp =
                    match (symmetric, azp) {
                        (true, None) => None,
                        (true, Some(_)) => return bad(
                            "azp: a symmetric quantizer has no zero point; pass symmetric=False"
                                .into(),
                        ),
                        (false, None) => {
                            return bad("an asymmetric static quantizer needs azp (an int32)".into())
                        }
                        (false, Some(z)) => Some(i32::try_from(z).map_err(|_| {
                            PyValueError::new_err(format!("azp = {z}: it must fit an int32"))
                        })?),
                    };
                Int8Scale::Static { scale: s, azp }
            }
            _ => return bad(format!("mode {mode:?}: expected \"dynamic\" or \"static\"")),
        };
        let rule = match rule.map(str::to_ascii_lowercase).as_deref() {
            None => vllm_rule(source),
            Some("reciprocal") => Int8Rule::new(Codes::Reciprocal),
            Some("divide") => Int8Rule::new(Codes::Divide),
            Some("torch_divide") => Int8Rule::new(Codes::TorchDivide),
            Some(_) => {
                return bad(format!(
                    "rule {:?}: expected \"reciprocal\", \"divide\" or \"torch_divide\" (None: vLLM's for the mode)",
                    rule.unwrap_or_default()
                ))
            }
        };
        Ok(Declared {
            source,
            rule,
            dtype,
        })
    }

    /// The shape of the scales (and zero points): `[1]` static, `[m, 1]`
    /// dynamic (vLLM's).
    fn scale_shape(&self, m: usize) -> Vec<usize> {
        match self.source {
            Int8Scale::Static { .. } => vec![1],
            Int8Scale::Dynamic { .. } => vec![m, 1],
        }
    }

    /// The keyword arguments that name this declaration in a rerun line.
    fn keywords(&self) -> String {
        let (mode, extra) = match self.source {
            Int8Scale::Static { scale, azp } => (
                "static",
                format!(
                    ", scale={scale:e}{}",
                    azp.map(|z| format!(", azp={z}")).unwrap_or_default()
                ),
            ),
            Int8Scale::Dynamic { .. } => ("dynamic", String::new()),
        };
        let sym = if self.source.symmetric() {
            "True"
        } else {
            "False"
        };
        format!(
            "mode=\"{mode}\", symmetric={sym}{extra}, rule=\"{}\", dtype=\"{}\"",
            self.rule.label(),
            self.dtype.name()
        )
    }
}

/// `x` as f32 values: a float32 array for `dtype` float32, else uint16
/// bit patterns of bfloat16 or float16 (numpy has no bfloat16), with its
/// shape.
///
/// # Errors
/// `TypeError` for another array type, `ValueError` for an `x` that is
/// not 2-D.
pub(crate) fn read_x(x: &Bound<'_, PyAny>, d: Dtype) -> PyResult<(Vec<f32>, usize, usize)> {
    let (v, shape): (Vec<f32>, Vec<usize>) = match d {
        Dtype::F32 => {
            let a: PyReadonlyArrayDyn<'_, f32> = x.extract().map_err(|_| {
                PyTypeError::new_err("x: expected a float32 array (dtype=\"float32\")")
            })?;
            (to_vec(&a), a.shape().to_vec())
        }
        _ => {
            let a: PyReadonlyArrayDyn<'_, u16> = x.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "x: expected a uint16 array of {} bit patterns (numpy has no bfloat16)",
                    d.name()
                ))
            })?;
            let v = to_vec(&a)
                .into_iter()
                .map(|b| d.decode(u32::from(b)))
                .collect();
            (v, a.shape().to_vec())
        }
    };
    if shape.len() != 2 {
        return Err(PyValueError::new_err(format!(
            "x: {} dimensions (shape {shape:?}), expected 2",
            shape.len()
        )));
    }
    Ok((v, shape[0], shape[1]))
}

/// A quantizer's three outputs as Python values: `q` int8 `[m, k]`, `s`
/// float32, `azp` int32 (or None, symmetric).
type Triple<'py> = (
    Bound<'py, numpy::PyArrayDyn<i8>>,
    Bound<'py, numpy::PyArrayDyn<f32>>,
    Option<Bound<'py, numpy::PyArrayDyn<i32>>>,
);

/// The arrays of `out` for `decl`'s shapes.
fn triple<'py>(
    py: Python<'py>,
    decl: &Declared,
    m: usize,
    k: usize,
    out: Int8Out,
) -> PyResult<Triple<'py>> {
    let shape = decl.scale_shape(m);
    let azp = if decl.source.symmetric() {
        None
    } else {
        Some(array(py, &shape, out.azp)?)
    };
    Ok((array(py, &[m, k], out.q)?, array(py, &shape, out.s)?, azp))
}

/// quantize_int8(x, scale=None, azp=None, symmetric=True, rule=None, dtype="float32") -> (q: int8[m, k], s: float32[1] or [m, 1], azp: int32[1] or [m, 1] or None)
///
/// The int8 quantizer of `oracle::int8_quant` on `x` (`[m, k]`: float32,
/// or uint16 bit patterns of `dtype` bfloat16 or float16, converted to
/// float32 exactly), as vLLM's `scaled_int8_quant(x, scale, azp,
/// symmetric)` returns it: static when `scale` is given (the scale and
/// `azp` written back as given), else dynamic per row. Symmetric dynamic:
/// `s = amax / 127`; asymmetric dynamic: `s = (max - min) / 255`, `azp =
/// nearbyint(-128 - min / s)`. Codes under `rule`: `"reciprocal"` (`x *
/// fl(127 / amax)`, or `x * fl(1 / s)`), `"divide"` (`x / s`) or
/// `"torch_divide"` (a dynamic scale as torch forms `amax / 127.0` on
/// CUDA, a Python-scalar divisor: `amax * fl(1 / 127)`, or `(max - min) *
/// fl(1 / 255)`; then `x / s`); None is
/// vLLM's (divide for symmetric static, reciprocal otherwise: its kernels
/// since PR #19233, June 2025; its zero-point kernels divided before). Every
/// float-to-integer step is PTX `cvt.rni.sat` (ties to even, saturating,
/// NaN to 0); with a zero point, `sat8(cvt32(x / s) + azp)`, the sum
/// exact. Source: vLLM `csrc/quantization/compressed_tensors/
/// int8_quant_kernels.cu`.
///
/// Errors: `TypeError` for an `x` of another dtype; `ValueError` for an
/// unknown rule or dtype, a scale that is not finite and positive, an
/// `azp` without a scale, with `symmetric=True`, or missing from an
/// asymmetric static quantizer, an `x` that is not 2-D, or an asymmetric
/// dynamic row whose max equals its min (outside the contract).
#[pyfunction]
#[pyo3(signature = (x, scale = None, azp = None, symmetric = true, rule = None, dtype = "float32"))]
fn quantize_int8<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    scale: Option<f32>,
    azp: Option<i64>,
    symmetric: bool,
    rule: Option<&str>,
    dtype: &str,
) -> PyResult<Triple<'py>> {
    if scale.is_none() && azp.is_some() {
        return Err(PyValueError::new_err(
            "azp without scale: a dynamic quantizer computes its own zero points",
        ));
    }
    let mode = if scale.is_some() { "static" } else { "dynamic" };
    let decl = Declared::new(mode, symmetric, scale, azp, rule, dtype)?;
    let (xv, m, k) = read_x(&x, decl.dtype)?;
    let n = decl.source.scales(m);
    let mut out = Int8Out {
        q: vec![0; m * k],
        s: vec![0.0; n],
        azp: vec![0; if symmetric { 0 } else { n }],
    };
    quantize(
        &xv,
        k,
        decl.source,
        decl.rule,
        &mut out.q,
        &mut out.s,
        &mut out.azp,
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    triple(py, &decl, m, k, out)
}

/// The input array of a case: float32 values, or uint16 bit patterns.
pub(crate) fn x_array<'py>(
    py: Python<'py>,
    d: Dtype,
    x: &[f32],
    m: usize,
    k: usize,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match d {
        Dtype::F32 => array(py, &[m, k], x.to_vec())?.into_any(),
        _ => array(py, &[m, k], x.iter().map(|&v| d.encode(v) as u16).collect())?.into_any(),
    })
}

/// int8_quant_case(m, k, arm, mode="dynamic", symmetric=True, scale=None, azp=None, rule=None, dtype="float32", seed=None) -> dict
///
/// One case of `check_int8_quant` as new arrays: `x` (`[m, k]`, float32
/// or uint16 bit patterns of `dtype`), and the oracle's `q` (int8), `s`
/// (float32) and, asymmetric, `azp` (int32) under `rule`. `seed` None:
/// the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, mode, rule or dtype, the
/// arguments `check_int8_quant` refuses, a zero dimension or an arm that
/// does not apply to the mode.
#[pyfunction]
#[pyo3(signature = (m, k, arm, mode = "dynamic", symmetric = true, scale = None, azp = None, rule = None, dtype = "float32", seed = None))]
#[allow(clippy::too_many_arguments)]
fn int8_quant_case<'py>(
    py: Python<'py>,
    m: usize,
    k: usize,
    arm: &str,
    mode: &str,
    symmetric: bool,
    scale: Option<f32>,
    azp: Option<i64>,
    rule: Option<&str>,
    dtype: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Int8Arm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = Declared::new(mode, symmetric, scale, azp, rule, dtype)?;
    let sp = Int8Spec {
        m,
        k,
        dtype: decl.dtype,
        source: decl.source,
        arm,
        seed: seed.unwrap_or_else(|| Int8Spec::base_seed(m, k, decl.dtype, decl.source, arm)),
    };
    let x = sp.generate().map_err(PyValueError::new_err)?;
    let want = int8_reference(&sp, &x, decl.rule).map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("x", x_array(py, decl.dtype, &x, m, k)?)?;
    let (q, s, z) = triple(py, &decl, m, k, want)?;
    dict.set_item("q", q)?;
    dict.set_item("s", s)?;
    if let Some(z) = z {
        dict.set_item("azp", z)?;
    }
    Ok(dict)
}

/// Python: the callable as `call_args` calls it. `q` arrives as the
/// uint8 array the check reads; the callable gets its int8 view (the same
/// memory), and the other arguments as given (`x, q, s, azp` here, `x, q,
/// s` for `check_int8_group_quant`). A returned int8 `q` is read through
/// its uint8 view, and a symmetric quantizer's returned `(q, s, None)`
/// (vLLM's `scaled_int8_quant` returns azp None) as `(q, s)`. A returned
/// `q` array of any other dtype (uint8 among them, whose codes -128 ..
/// -1 a consumer reads as 128 .. 255) raises a `TypeError` naming it: the
/// case fails.
const ADAPT: &std::ffi::CStr = c"
import numpy as np


def adapt(f, symmetric):
    def call(x, q, s, *azp):
        r = f(x, q.view(np.int8), s, *azp)
        if not isinstance(r, (tuple, list)):
            return r
        r = list(r)
        if symmetric and len(r) == 3 and r[2] is None:
            r = r[:2]
        if r and isinstance(r[0], np.ndarray):
            if r[0].dtype != np.int8:
                raise TypeError(
                    f'q: returned an array of dtype {r[0].dtype}, expected int8 {list(q.shape)} '
                    '(the codes as signed bytes: a uint8 q reads codes -128 .. -1 as 128 .. 255)')
            r[0] = r[0].view(np.uint8)
        return tuple(r)

    call.__name__ = getattr(f, '__name__', 'fn')
    return call
";

/// `quant` wrapped by [`ADAPT`]: handed `q` as uint8, it gets the int8
/// view; `symmetric` reads a returned `(q, s, None)` as `(q, s)`.
pub(crate) fn adapt<'py>(
    py: Python<'py>,
    quant: &Bound<'py, PyAny>,
    symmetric: bool,
) -> PyResult<Bound<'py, PyAny>> {
    PyModule::from_code(
        py,
        ADAPT,
        c"kernel_oracle_int8_adapt.py",
        c"kernel_oracle_int8_adapt",
    )?
    .getattr("adapt")?
    .call1((quant, symmetric))
}

/// check_int8_quant(quant, mode="dynamic", symmetric=True, scale=None, azp=None, rule=None, dtype="float32", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `quant`, an INT8 activation quantizer (vLLM's `scaled_int8_quant`
/// and its torch forms: `mode="static"` with a given `scale` (and, with
/// `symmetric=False`, `azp`), or `"dynamic"`, per row), through the arms
/// `RAND` (rows at magnitudes 1e-3 to 1e3), `TIES` (elements at exact
/// `k + 0.5` after scaling, where `roundf` parts from ties-to-even, and
/// within an ulp of midpoints under an inexact `127 / amax`, where
/// reciprocal and divide part), `ZERO` (all-zero and tiny rows: `127 /
/// amax` infinite), `SAT` (static: `x / scale` past -128.5 and 127.5),
/// `SIGN` (dynamic: rows all negative, all positive: a max started at
/// `FLT_MIN`, as vLLM's `dynamic_scaled_int8_azp_quant_kernel` did before
/// PR #19233, fails)
/// and `TAIL` (dynamic: the row's extreme at its last element: a dropped
/// remainder of a by-16 vectorized loop) and, only when named, `NAN`
/// (NaN elements: skipped by vLLM's reductions, coded 0 plus the zero
/// point; rule `I8Q-NAN`), by default every arm that applies to the mode
/// but `NAN`, and judges its codes, scales and zero points bit
/// for bit against `quantize_int8(x, scale, azp, symmetric, rule, dtype)`.
///
/// The callable: `quant(x, q, s, azp)`, with `x` `[m, k]` (float32, or
/// uint16 bit patterns of `dtype` bfloat16 or float16: torch users
/// `torch.from_numpy(x).view(torch.bfloat16)`), `q` int8 `[m, k]` (handed
/// filled with the bitwise complement of the oracle's codes, so every
/// element left unwritten differs), `s` float32 `[m, 1]` dynamic or `[1]`
/// static (filled with NaN; a static quantizer writes the scale it was
/// given) and `azp` int32 of `s`'s shape (asymmetric; filled with
/// -2^31; static writes the given azp) or None (symmetric); writing them
/// and returning None, or returning `(q, s)` or `(q, s, azp)` (a
/// symmetric `(q, s, None)` too, as vLLM returns; a returned `q` must be
/// int8: uint8, the same bits, fails the case).
///
/// Each row names the known rules the output matches bit for bit
/// (`reciprocal`, `divide`, dynamic `torch_divide`, each with `/roundf`
/// (ties away from zero) and, symmetric, `/clamp127` (a range of [-127,
/// 127])) and, where it differs from the declared rule, how far: codes in
/// integer steps, scales in f32 ulps, zero points by count. `rule` is
/// `"reciprocal"`, `"divide"` or `"torch_divide"` (the torch form that
/// divides by a Python scalar, `amax / 127.0`: on CUDA `amax * fl(1 /
/// 127)`, an ulp from the division on some rows). `rule` None declares vLLM's for the
/// mode: `divide` for symmetric static, `reciprocal` otherwise (vLLM's
/// kernels since PR #19233, June 2025; declare `divide` for its earlier
/// zero-point kernels).
///
/// Errors: `ValueError`, before any call, for an unknown mode, rule, dtype
/// or arm, a `scale` with mode dynamic or missing from mode static (or
/// not finite and positive), an `azp` with `symmetric=True` or missing
/// from an asymmetric static quantizer, an arm that does not apply to the
/// mode, an asymmetric dynamic shape with `k < 2`, a zero dimension or a
/// case over 2^26 elements. Every check also raises `ValueError`, before
/// any call, for `trials` below 1 or an empty `seeds` list.
#[pyfunction]
#[pyo3(signature = (quant, mode = "dynamic", symmetric = true, scale = None, azp = None, rule = None, dtype = "float32", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_int8_quant<'py>(
    py: Python<'py>,
    quant: Bound<'py, PyAny>,
    mode: &str,
    symmetric: bool,
    scale: Option<f32>,
    azp: Option<i64>,
    rule: Option<&str>,
    dtype: &str,
    shapes: Option<Vec<(usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&quant, "quant")?;
    let seeds = Seeds::new(seeds, trials)?;
    let decl = Declared::new(mode, symmetric, scale, azp, rule, dtype)?;
    let shapes = shapes.unwrap_or_else(|| INT8_SHAPES.to_vec());
    let probe = |m, k, arm| Int8Spec {
        m,
        k,
        dtype: decl.dtype,
        source: decl.source,
        arm,
        seed: 0,
    };
    let arms = match arms {
        Some(_) => arms_or_all(arms, &Int8Arm::ALL, Int8Arm::parse)?,
        None => probe(1, 1, Int8Arm::Rand).default_arms(),
    };
    for &(m, k) in &shapes {
        for &arm in &arms {
            probe(m, k, arm).valid().map_err(PyValueError::new_err)?;
        }
    }
    let fname = callable_name(&quant, name);
    let adapted = adapt(py, &quant, decl.source.symmetric())?;
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "int8_quant".into(),
        ..CheckReport::default()
    };
    let declared = decl.rule.label();
    let kind = match decl.source {
        Int8Scale::Static { scale, azp } => format!(
            "static scale {}{}",
            value(scale),
            azp.map(|z| format!(", azp {z}")).unwrap_or_default()
        ),
        Int8Scale::Dynamic { .. } => "dynamic per token".into(),
    };
    let sym = if decl.source.symmetric() {
        "symmetric"
    } else {
        "asymmetric"
    };
    out.row(&format!(
        "check_int8_quant({fname}), {kind}, {sym}, input {}, declared: {declared}",
        decl.dtype.name()
    ))?;
    out.row(&format!(
        "{:<12} {:>5} {:>18} {:>17} {:>13} {:>11} {:>5} {:>6} {:>9}  verdict  matches",
        "m,k",
        "arm",
        "seed",
        "codes differ",
        "scales differ",
        "azp differ",
        "steps",
        "ulps",
        "call_ms"
    ))?;
    let kw = decl.keywords();
    for &(m, k) in &shapes {
        for &arm in &arms {
            let base = Int8Spec::base_seed(m, k, decl.dtype, decl.source, arm);
            for seed in seeds.for_case(base) {
                let sp = Int8Spec {
                    seed,
                    ..probe(m, k, arm)
                };
                let x = sp.generate().map_err(PyValueError::new_err)?;
                let want = int8_reference(&sp, &x, decl.rule).map_err(PyValueError::new_err)?;
                let held = Held::new(decl.dtype, &x);
                let inputs = [("x", held.input(py, &[m, k])?)];
                let s_shape = decl.scale_shape(m);
                let q0: Vec<u8> = want.q.iter().map(|&c| !(c as u8)).collect();
                let q_arr = array(py, &[m, k], q0)?.into_any();
                let n_s: usize = s_shape.iter().product();
                let s_arr = OutKind::F32.array(py, &s_shape, &Fill::new(&inputs))?;
                let mut arrays = vec![q_arr, s_arr];
                let q_shape = [m, k];
                let mut outs: Vec<(&[usize], OutKind)> =
                    vec![(&q_shape, OutKind::U8), (&s_shape, OutKind::F32)];
                let azp_arg = if decl.source.symmetric() {
                    py.None().into_bound(py)
                } else {
                    let a = array(py, &s_shape, vec![i32::MIN; n_s])?.into_any();
                    arrays.push(a.clone());
                    outs.push((&s_shape, OutKind::I32));
                    a
                };
                let args = vec![
                    inputs[0].1.array(),
                    arrays[0].clone(),
                    arrays[1].clone(),
                    azp_arg,
                ];
                let (called, ms) = call_args(py, &adapted, args, &inputs, &outs, arrays)?;
                let a = arm.name();
                let row = format!("{:<12} {a:>5} 0x{seed:016x}", format!("{m},{k}"));
                let repro = format!(
                    "kernel_oracle.check_int8_quant({fname}, {kw}, shapes=[({m}, {k})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL int8_quant: m={m} k={k} arm={a} seed=0x{seed:016x}, {kind}, {sym}, input {}, declared: {declared}",
                    decl.dtype.name()
                );
                let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = read_out(&got);
                let v = Int8Verdict::judge(k, &got, &want);
                let matches: Vec<String> = int8_identify(&sp, &x, &got)
                    .into_iter()
                    .map(|r| r.label().to_string())
                    .collect();
                let (line, pass) = verdict_row(&row, &v, true, ms, &written, &matches);
                out.row(&line)?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if !v.pass() {
                    let at = |i: usize| match decl.source {
                        Int8Scale::Static { .. } => "the tensor's".to_string(),
                        Int8Scale::Dynamic { .. } => format!("row {i}"),
                    };
                    failure_lines(&mut r, &v, &x, k, &at, &matches);
                }
                let case = format!(
                    "kernel_oracle.int8_quant_case({m}, {k}, \"{a}\", {kw}, seed=0x{seed:016x})"
                );
                rerun_tail(&mut r, &repro, "codes, scales and zero points", &case);
                rep.fail(&mut out, r, repro)?;
            }
        }
    }
    let known: Vec<&str> = int8_known(decl.source)
        .into_iter()
        .map(|r| r.label())
        .collect();
    rep.finish(out, &format!("known rules: {}; ", known.join(", ")))
}

/// A quantizer's outputs as the check read them (`call_args`' order):
/// `q` (uint8, read as int8), `s` and, where there is a third, `azp`.
pub(crate) fn read_out(got: &[Got]) -> Int8Out {
    Int8Out {
        q: got[0].u8().iter().map(|&b| b as i8).collect(),
        s: got[1].f32().to_vec(),
        azp: got.get(2).map(|g| g.i32().to_vec()).unwrap_or_default(),
    }
}

/// A case's row after `row` (its shape, arm and seed cells): the
/// verdict's cells (with `azp`, the zero points'), the call's `ms`, PASS
/// or FAIL (a pass needs the verdict and no input `written`) and the
/// known rules the output `matches`; and whether it passed.
pub(crate) fn verdict_row(
    row: &str,
    v: &Int8Verdict,
    azp: bool,
    ms: f64,
    written: &crate::check::Breach,
    matches: &[String],
) -> (String, bool) {
    let pass = v.pass() && written.is_empty();
    let line = format!(
        "{row} {} {ms:>9.2}  {}  {}",
        verdict_cells(v, azp),
        if pass { "PASS" } else { "FAIL" },
        names_or(matches, ", ", "none known")
    );
    (line, pass)
}

/// A verdict's cells in a row: codes differing of all, scales differing
/// of all, with `azp` zero points differing of all, then the most code
/// steps and scale ulps.
fn verdict_cells(v: &Int8Verdict, azp: bool) -> String {
    let azps = if azp {
        format!(" {:>5}/{:<5}", v.azps.1, v.azps.0)
    } else {
        String::new()
    };
    format!(
        "{:>8}/{:<8} {:>5}/{:<7}{azps} {:>5} {:>6}",
        v.codes.1,
        v.codes.0,
        v.scales.n - v.scales.identical,
        v.scales.n,
        v.max_code_steps,
        v.scales.max_ulp,
    )
}

/// A failing verdict's counts and its first differing code (with its
/// element of `x`, rows of `k`), scale (where `at` names the scale's
/// index) and zero point (where there are any), then the known rules the
/// output `matches`.
pub(crate) fn failure_lines(
    r: &mut String,
    v: &Int8Verdict,
    x: &[f32],
    k: usize,
    at: &dyn Fn(usize) -> String,
    matches: &[String],
) {
    let zero_points = if v.azps.0 > 0 {
        format!("; zero points: {} of {} differ", v.azps.1, v.azps.0)
    } else {
        String::new()
    };
    let _ = writeln!(
        r,
        "  codes: {} of {} differ (at most {} steps); scales: {} of {} differ (at most {} ulps){zero_points}",
        v.codes.1,
        v.codes.0,
        v.max_code_steps,
        v.scales.n - v.scales.identical,
        v.scales.n,
        v.scales.max_ulp,
    );
    if let Some((j, c, g, w)) = v.first_code {
        let _ = writeln!(
            r,
            "  first code at (row {j}, column {c}): got {g}, want {w}; x = {}",
            value(x[j * k + c])
        );
    }
    if let Some((i, got_s, want_s, _)) = v.scales.first_diff {
        let _ = writeln!(
            r,
            "  first scale at {}: got {}, want {}",
            at(i),
            value(got_s),
            value(want_s)
        );
    }
    if let Some((i, g, w)) = v.first_azp {
        let _ = writeln!(r, "  first zero point at {}: got {g}, want {w}", at(i));
    }
    let _ = writeln!(
        r,
        "  the output matches: {}",
        names_or(matches, ", ", "no known rule")
    );
}

/// Adds the int8 quantizer, its case, its check and the default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("INT8_QUANT_SHAPES", INT8_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(quantize_int8, m)?)?;
    m.add_function(wrap_pyfunction!(int8_quant_case, m)?)?;
    m.add_function(wrap_pyfunction!(check_int8_quant, m)?)?;
    Ok(())
}
