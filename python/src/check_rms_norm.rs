//! RMSNorm and fused add + RMSNorm (`oracle::rms_norm`): the oracle's
//! intervals for any input, and `check_rms_norm`, which runs any Python
//! RMSNorm (vLLM's `rms_norm` and `fused_add_rms_norm` ops, FlashInfer's
//! kernels, Hugging Face's torch forms, Liger's Triton kernel,
//! `torch.nn.functional.rms_norm`) through the case library's cases
//! (`kernel_oracle::rms_norm`): every output within the interval a sound
//! bound on the inverse RMS leaves, bit for bit where that interval is
//! one value, the fused add's residual output bit for bit, naming every
//! known arithmetic the output matches.

use crate::arrays::{array, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, failure_tail, names_or, value,
    Admitted, CheckReport, Held, Input, Out, OutKind, Seeds,
};
use crate::check_rope::{read_values, to_array};
use kernel_oracle::rms_norm::{
    identify, label, parse_arithmetic, parse_sum, reference, within_caps, Arm, Case, Dims,
    Reference, Spec, Verdict,
};
use oracle::rms_norm::{Declared, Dtype};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat};
use std::fmt::Write;

/// The shapes `(rows, hidden)` a check runs by default: hidden sizes that
/// are not multiples of 8 first (a vectorised kernel's tail: 7 has no
/// whole vector at all, 129 and 4097 one element past the last, 5123
/// three, 1 a row of one, where `y r` is about `sign(y)` whatever the sum,
/// 3 a row shorter than a vector of 4 whose `r` still depends on every
/// element), then the models' hidden sizes (2048: Llama 3.2 1B, 4096:
/// Llama 3 8B, 5120: Qwen2.5 14B and Llama 4, 7168: DeepSeek-V3, 8192:
/// Llama 3 70B); rows from 1 to 33 (decode and small prefill), 16 at
/// 8192: on EXACT a bf16 `round_then_weight` row shows a mean over `n -
/// 1` or a dropped element with odds of about one in four (its `R(y r)`
/// takes a few dozen values), so the long rows are many.
pub const RMS_NORM_SHAPES: [Dims; 11] = [
    (9, 7),
    (5, 129),
    (3, 4097),
    (2, 5123),
    (6, 1),
    (7, 3),
    (33, 2048),
    (4, 4096),
    (2, 5120),
    (3, 7168),
    (16, 8192),
];

/// The declaration from the keyword arguments: `eps` rounded to the
/// nearest binary32 (rule `RMS-EPS`).
fn declared(
    arithmetic: &str,
    sum_rounding: &str,
    dtype: &str,
    eps: f64,
    rsqrt_ulps: u32,
) -> PyResult<Declared> {
    let a = parse_arithmetic(arithmetic).map_err(PyValueError::new_err)?;
    let s = parse_sum(sum_rounding).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    Declared::new(a, s, d, eps as f32, rsqrt_ulps).map_err(|e| crate::arrays::eps_error(eps, e))
}

/// rms_norm(x, weight, eps, residual=None, arithmetic="round_then_weight", dtype="bfloat16", sum_rounding="dtype", rsqrt_ulps=2) -> (out_lo, out_hi) or (out_lo, out_hi, residual_out)
///
/// RMSNorm (`oracle::rms_norm`) as the interval of outputs any admissible
/// kernel gives. `x` `[rows, hidden]`, `weight` `[hidden]`, `residual`
/// (the fused add) `[rows, hidden]` or None: uint16 bit patterns of
/// `dtype` (`"bfloat16"`, `"float16"`) or float32 for `"float32"`; `eps`
/// a float, rounded to the nearest float32 (a positive normal one).
///
/// Per row: with `residual`, `residual_out = R(x + residual)` (the
/// float32 sum rounded to `dtype`) and the row normalized is that
/// (`sum_rounding="dtype"`: vLLM's op, Hugging Face) or the float32 sum
/// (`"f32"`: FlashInfer, vLLM's torch path); the exact inverse RMS `r* =
/// 1/sqrt(mean(y^2) + eps)` and the float32 values `[r_lo, r_hi]` any
/// float32 evaluation gives (any summation order, the mean within 2 ulps,
/// the eps add rounded, the reciprocal square root within `rsqrt_ulps`,
/// flush to zero or not); each output between the outputs at `r_lo` and
/// `r_hi` under `arithmetic`:
/// - `"round_then_weight"`: `R(R(y*r) * w)` (vLLM's CUDA ops, Hugging
///   Face's `LlamaRMSNorm`, Liger "llama");
/// - `"f32"`: `R((y*r) * w)` in float32 (FlashInfer's `rmsnorm`, torch
///   2.11's `rms_norm`);
/// - `"gemma"`: `R((y*r) * (1 + w))` in float32 (Gemma's RMSNorm).
///
/// Returns new arrays in the inputs' representation: `out_lo`, `out_hi`
/// (equal bits: the output is decided) and, with `residual`,
/// `residual_out`.
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown arithmetic, sum rounding or dtype, shapes that disagree, an eps
/// that is not a positive normal float32, `rsqrt_ulps` outside 1..1024, an
/// input that is not finite, a fused add whose normalized sum `x +
/// residual` overflows to infinity (named by row and column), a row whose
/// float32 sum of squares could overflow, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (x, weight, eps, residual = None, arithmetic = "round_then_weight", dtype = "bfloat16", sum_rounding = "dtype", rsqrt_ulps = 2))]
#[allow(clippy::too_many_arguments)]
fn rms_norm<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    weight: Bound<'py, PyAny>,
    eps: f64,
    residual: Option<Bound<'py, PyAny>>,
    arithmetic: &str,
    dtype: &str,
    sum_rounding: &str,
    rsqrt_ulps: u32,
) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
    let decl = declared(arithmetic, sum_rounding, dtype, eps, rsqrt_ulps)?;
    let d = decl.dtype();
    let (xs, xv, _) = read_values("x", &x, d, false)?;
    let (ws, wv, _) = read_values("weight", &weight, d, false)?;
    let res = match &residual {
        Some(r) => Some(read_values("residual", r, d, false)?),
        None => None,
    };
    if xs.len() != 2 || ws != [xs[1]] || res.as_ref().is_some_and(|r| r.0 != xs) {
        return Err(PyValueError::new_err(format!(
            "x {xs:?}, weight {ws:?}, residual {:?}: expected [rows, hidden], [hidden], [rows, hidden]",
            res.as_ref().map(|r| r.0.clone())
        )));
    }
    let shape = within_caps((xs[0], xs[1])).map_err(PyValueError::new_err)?;
    let case = Case {
        x: xv,
        residual: res.map(|r| r.1).unwrap_or_default(),
        weight: wv,
    };
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let mut items = vec![
        to_array(py, d, &xs, &want.lo)?,
        to_array(py, d, &xs, &want.hi)?,
    ];
    if residual.is_some() {
        items.push(to_array(py, d, &xs, &want.residual)?);
    }
    pyo3::types::PyTuple::new(py, items)
}

/// The spec of a case under `decl` (`seed` None: the check's first).
fn spec(dims: Dims, decl: &Declared, fused: bool, arm: Arm, seed: Option<u64>) -> Spec {
    let dtype = decl.dtype();
    Spec {
        dims,
        dtype,
        eps: decl.eps(),
        fused,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, dtype, fused, arm)),
    }
}

/// rms_norm_case(rows, hidden, arm, seed=None, dtype="bfloat16", eps=1e-6, fused_add=False, arithmetic="round_then_weight", sum_rounding="dtype", rsqrt_ulps=2) -> dict
///
/// One case of `check_rms_norm` as new arrays, as the callable gets them:
/// `x` `[rows, hidden]`, `residual` (`[rows, hidden]`, None without the
/// fused add), `weight` `[hidden]` (uint16 bit patterns of `dtype`, or
/// float32), `eps` (the float32 value the callable gets, as a float); and
/// the oracle's answer under the arithmetic named: `out_lo`, `out_hi`
/// (each output's interval), `residual_out` (None without the fused add)
/// and float32 `inv_rms_lo`, `inv_rms_hi` `[rows]` (each row's admissible
/// inverse RMS). `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, arithmetic, sum rounding or
/// dtype, a bad eps or `rsqrt_ulps`, a bad shape or one over the caps.
#[pyfunction]
#[pyo3(signature = (rows, hidden, arm, seed = None, dtype = "bfloat16", eps = 1e-6, fused_add = false, arithmetic = "round_then_weight", sum_rounding = "dtype", rsqrt_ulps = 2))]
#[allow(clippy::too_many_arguments)]
fn rms_norm_case<'py>(
    py: Python<'py>,
    rows: usize,
    hidden: usize,
    arm: &str,
    seed: Option<u64>,
    dtype: &str,
    eps: f64,
    fused_add: bool,
    arithmetic: &str,
    sum_rounding: &str,
    rsqrt_ulps: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = declared(arithmetic, sum_rounding, dtype, eps, rsqrt_ulps)?;
    let d = decl.dtype();
    let sp = spec((rows, hidden), &decl, fused_add, arm, seed);
    let shape = sp.shape().map_err(PyValueError::new_err)?;
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let xs = [rows, hidden];
    let dict = PyDict::new(py);
    dict.set_item("x", to_array(py, d, &xs, &case.x)?)?;
    let or_none = |v: &[f32]| -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(if fused_add {
            Some(to_array(py, d, &xs, v)?)
        } else {
            None
        })
    };
    dict.set_item("residual", or_none(&case.residual)?)?;
    dict.set_item("weight", to_array(py, d, &[hidden], &case.weight)?)?;
    dict.set_item("eps", f64::from(decl.eps()))?;
    dict.set_item("out_lo", to_array(py, d, &xs, &want.lo)?)?;
    dict.set_item("out_hi", to_array(py, d, &xs, &want.hi)?)?;
    dict.set_item("residual_out", or_none(&want.residual)?)?;
    let r = |f: fn(&oracle::rms_norm::InvRms) -> f32| want.inv_rms.iter().map(f).collect();
    dict.set_item("inv_rms_lo", array(py, &[rows], r(|r| r.lo))?)?;
    dict.set_item("inv_rms_hi", array(py, &[rows], r(|r| r.hi))?)?;
    Ok(dict)
}

/// Python: whether a callable takes the output arrays after its `n_in`
/// inputs (by its signature; `*args`, or no signature, counts as yes), and
/// an adapter that calls it with the inputs alone, returning what it
/// returns.
const ADAPT: &std::ffi::CStr = c"
import inspect


def takes_outputs(fn, n_in):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return len([p for p in params if p.kind in kinds]) > n_in


def inputs_only(fn, n_in):
    def call(*args):
        return fn(*args[:n_in])

    return call
";

/// `f` as `call_typed` calls it (inputs, then the outputs): `f` itself
/// when it takes the outputs, else an adapter that drops them.
pub(crate) fn as_called<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    n_in: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let m = PyModule::from_code(
        py,
        ADAPT,
        c"kernel_oracle_rms_norm_adapt.py",
        c"kernel_oracle_rms_norm_adapt",
    )?;
    if m.getattr("takes_outputs")?
        .call1((f, n_in))?
        .extract::<bool>()?
    {
        Ok(f.clone())
    } else {
        m.getattr("inputs_only")?.call1((f, n_in))
    }
}

/// A value of `d` by its bits, as a failure shows it.
pub(crate) fn shown(d: Dtype, b: u32) -> String {
    match d {
        Dtype::F32 => value(f32::from_bits(b)),
        _ => format!("0x{b:04X} ({})", value(d.decode(b))),
    }
}

/// The failure lines of a judged case: which outputs were not admitted
/// and where the first one is, and the residual output's.
fn failure_lines(
    r: &mut String,
    d: Dtype,
    v: &Verdict,
    want: &Reference,
    c: &Case,
    got: [&[u32]; 2],
    hidden: usize,
) {
    if let Some(at) = v.first {
        let (row, col) = (at / hidden, at % hidden);
        let (lo, hi) = (want.lo[at], want.hi[at]);
        let wanted = if want.decided(at) {
            format!("want {} (decided)", shown(d, d.encode(lo)))
        } else {
            format!(
                "want within [{}, {}] (bounded)",
                shown(d, d.encode(lo)),
                shown(d, d.encode(hi))
            )
        };
        let res = if c.residual.is_empty() {
            String::new()
        } else {
            format!(", residual {}", value(c.residual[at]))
        };
        let ir = want.inv_rms[row];
        let _ = writeln!(
            r,
            "  out: {} of {} elements not admitted ({} of {} decided ones differ, {} of {} bounded ones outside); first at [row {row}, col {col}]{}: got {}, {wanted}; input x {}{res}, weight {}; the row's inverse RMS in [{}, {}]",
            v.decided_wrong + v.bounded_outside,
            v.n,
            v.decided_wrong,
            v.decided,
            v.bounded_outside,
            v.bounded,
            if col >= hidden / 8 * 8 { " (past the last whole vector of 8)" } else { "" },
            shown(d, got[0][at]),
            value(c.x[at]),
            value(c.weight[col]),
            value(ir.lo),
            value(ir.hi),
        );
    }
    if let Some(at) = v.first_residual {
        let _ = writeln!(
            r,
            "  residual_out: {} of {} elements differ; first at [row {}, col {}]: got {}, want {} = R(x + residual), x {}, residual {}",
            v.residual_differ,
            want.residual.len(),
            at / hidden,
            at % hidden,
            got[1].get(at).map_or_else(|| "nothing".into(), |&b| shown(d, b)),
            shown(d, d.encode(want.residual[at])),
            value(c.x[at]),
            value(c.residual[at]),
        );
    }
}

/// check_rms_norm(fn, dtype="bfloat16", arithmetic="round_then_weight", eps=1e-6, fused_add=False, rsqrt_ulps=2, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None, sum_rounding="dtype") -> CheckReport
///
/// Runs `fn`, an RMSNorm (with `fused_add`, a fused add + RMSNorm),
/// through the arms `RAND` (normal rows, a scale per row, weights of
/// either sign, some of them zeros of either sign), `SPIKE` (one to three
/// huge elements per row, the last element among them), `LARGE` (f16
/// values from 256 to 65504, whose squares overflow f16, halved with the
/// fused add so that their sum stays finite; bf16 and f32 rows whose sum
/// of squares nears 2^124; in f16, as in SPIKE, some weights up to
/// 65504, so that some outputs are decided infinities), `SMALL` (all-zero
/// rows, rows near `sqrt(eps)`, rows where eps dominates, one non-zero
/// element) and
/// `EXACT` (small integers times a power of two, whose sum of squares is
/// exact in every order: the inverse RMS is bounded within a few float32
/// ulps at any hidden size, so a mean over `n - 1` or an element lost from
/// the sum fails on long rows too), and judges every output against
/// `rms_norm`'s interval under the declared `arithmetic`: bit for bit
/// where the interval is one value (decided: most elements in bf16 and
/// f16), within it elsewhere (bounded: most elements in float32); the
/// fused add's residual output bit for bit. Not decidable: a conversion
/// that rounds half away from zero instead of to nearest even, where the
/// tie is a rounding of `y*r` (the inner rounding of
/// `"round_then_weight"`, the final one of `"f32"` and `"gemma"`): the
/// admissible `r` on either side of the tie round both ways.
///
/// The callable: `fn(x, weight, eps)` returning `out`, or with
/// `fused_add` `fn(x, residual, weight, eps)` returning `(out,
/// residual_out)`, with `x`, `residual`, `out`, `residual_out` `[rows,
/// hidden]` and `weight` `[hidden]`: uint16 bit patterns of `dtype`
/// (numpy has no bfloat16), or float32 for `"float32"`; `eps` a float (the
/// declared eps rounded to float32). A callable that takes one more
/// positional argument per output (`fn(x, weight, eps, out)`,
/// `fn(x, residual, weight, eps, out, residual_out)`, or `*args`) gets
/// the outputs filled with NaN, as every check hands them: it writes them
/// and returns None, or returns them. The inputs must be left as given.
/// vLLM's in-place `fused_add_rms_norm` runs on copies: `out` gets the
/// normalized input, `residual_out` the updated residual. A kernel that
/// refuses a shape raises `kernel_oracle.Refused`. (The oracle
/// `rms_norm(x, weight, eps, residual=None)` takes the residual last, as a
/// keyword; the callable takes it second.)
///
/// `arithmetic`: `"round_then_weight"` (the normalized value rounded to
/// the dtype, then the weight: vLLM, Hugging Face's Llama), `"f32"` (one
/// rounding: FlashInfer, torch 2.11's `rms_norm`; torch 2.4's rounded
/// before the weight) or `"gemma"` (`(1 + w)` in
/// float32, one rounding). `sum_rounding` (fused add): `"dtype"` (the
/// rounded sum is normalized: vLLM's op) or `"f32"` (the float32 sum:
/// FlashInfer). `rsqrt_ulps`: the reciprocal square root's accuracy
/// (CUDA's `rsqrtf`: 2). Each row names every known arithmetic (with the
/// fused add, and sum rounding) whose intervals admit the output.
///
/// Errors: `ValueError` for an unknown arithmetic, sum rounding, dtype or
/// arm, a sum rounding other than `"dtype"` without `fused_add`, a bad
/// eps or `rsqrt_ulps`, a bad shape or one over the caps (2^22 elements,
/// hidden 2^17), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, dtype = "bfloat16", arithmetic = "round_then_weight", eps = 1e-6, fused_add = false, rsqrt_ulps = 2, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None, sum_rounding = "dtype"))]
#[allow(clippy::too_many_arguments)]
fn check_rms_norm<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    dtype: &str,
    arithmetic: &str,
    eps: f64,
    fused_add: bool,
    rsqrt_ulps: i64,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
    sum_rounding: &str,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let rsqrt_ulps: u32 = count("rsqrt_ulps", rsqrt_ulps, 0)?;
    let decl = declared(arithmetic, sum_rounding, dtype, eps, rsqrt_ulps)?;
    if !fused_add && sum_rounding != "dtype" {
        return Err(PyValueError::new_err(format!(
            "sum_rounding={sum_rounding:?} without fused_add=True: there is no sum to round"
        )));
    }
    let d = decl.dtype();
    let shapes = shapes.unwrap_or_else(|| RMS_NORM_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &dims in &shapes {
        within_caps(dims).map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&r#fn, name);
    let kernel = as_called(py, &r#fn, if fused_add { 4 } else { 3 })?;
    let kind = OutKind::of(d);
    let contract = if fused_add {
        "fused_add_rms_norm"
    } else {
        "rms_norm"
    };
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: contract.into(),
        ..CheckReport::default()
    };
    let declared_label = label(decl.arithmetic(), fused_add.then_some(decl.sum()));
    let mut kw = format!(
        "dtype=\"{}\", arithmetic=\"{arithmetic}\", eps={eps:?}",
        d.name()
    );
    if fused_add {
        let _ = write!(kw, ", fused_add=True, sum_rounding=\"{sum_rounding}\"");
    }
    if rsqrt_ulps != oracle::rms_norm::DEFAULT_RSQRT_ULPS {
        let _ = write!(kw, ", rsqrt_ulps={rsqrt_ulps}");
    }
    let about = format!(
        "{}, eps {:e} (float32), rsqrt within {rsqrt_ulps} ulps, declared: {declared_label}",
        d.name(),
        decl.eps()
    );
    o.row(&format!("check_rms_norm({fname}), {contract}, {about}"))?;
    o.row(&format!(
        "{:<12} {:>5} {:>18} {:>15} {:>8} {:>8} {:>10} {:>9}  verdict  matches",
        "rows,hidden", "arm", "seed", "decided", "bounded", "outside", "res_differ", "call_ms"
    ))?;
    let mut admitted = Admitted::default();
    let eps_arg = PyFloat::new(py, f64::from(decl.eps())).into_any();
    for &dims in &shapes {
        let shape = within_caps(dims).map_err(PyValueError::new_err)?;
        let xs = [dims.0, dims.1];
        for &arm in &arms {
            let base = Spec::base_seed(dims, d, fused_add, arm);
            for seed in seeds.for_case(base) {
                let sp = spec(dims, &decl, fused_add, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, &decl))
                    .map_err(value_error)?;
                let (hx, hr, hw) = (
                    Held::new(d, &case.x),
                    Held::new(d, &case.residual),
                    Held::new(d, &case.weight),
                );
                let mut inputs = vec![("x", hx.input(py, &xs)?)];
                if fused_add {
                    inputs.push(("residual", hr.input(py, &xs)?));
                }
                inputs.push(("weight", hw.input(py, &[dims.1])?));
                inputs.push(("eps", Input::Scalar(eps_arg.clone())));
                let outs: Vec<(&[usize], OutKind)> = if fused_add {
                    vec![(&xs, kind), (&xs, kind)]
                } else {
                    vec![(&xs, kind)]
                };
                let (called, ms) = call_typed(py, &kernel, Vec::new(), &inputs, &outs)?;
                let a = arm.name();
                let dims_s = format!("{},{}", dims.0, dims.1);
                let row = format!("{dims_s:<12} {a:>5} 0x{seed:016x}");
                let dims_py = format!("({}, {})", dims.0, dims.1);
                let repro = format!(
                    "kernel_oracle.check_rms_norm({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL {contract}: (rows, hidden) = {dims_py} arm={a} seed=0x{seed:016x}, {about}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got_out = got[0].bits(d);
                let got_res = if fused_add {
                    got[1].bits(d)
                } else {
                    Vec::new()
                };
                let v = Verdict::judge(d, &want, &got_out, &got_res);
                let found = py
                    .detach(|| {
                        identify(&shape, &case, d, decl.eps(), rsqrt_ulps, &got_out, &got_res)
                    })
                    .map_err(PyValueError::new_err)?;
                admitted.add(&found, v.decided, v.n);
                let matches = names_or(&found, "; ", "none known");
                let pass = v.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>8} {:>8} {:>10} {ms:>9.2}  {}  {matches}",
                    v.decided,
                    v.n,
                    v.bounded,
                    v.decided_wrong + v.bounded_outside,
                    if fused_add {
                        v.residual_differ.to_string()
                    } else {
                        "-".into()
                    },
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                failure_lines(&mut r, d, &v, &want, &case, [&got_out, &got_res], dims.1);
                let case_call = format!(
                    "kernel_oracle.rms_norm_case({}, {}, \"{a}\", seed=0x{seed:016x}, {kw})",
                    dims.0, dims.1
                );
                failure_tail(&mut r, &matches, &repro, &case_call);
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    rep.finish(o, &admitted.summary())
}

/// Adds RMSNorm, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RMS_NORM_SHAPES", RMS_NORM_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(check_rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_case, m)?)?;
    Ok(())
}
