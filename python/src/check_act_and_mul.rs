//! Gated activations, `act(gate) * up` (`oracle::act_and_mul`): the
//! oracle's intervals for any input, and `check_act_and_mul`, which runs
//! any Python SwiGLU or GeGLU (vLLM's `silu_and_mul`, `mul_and_silu`,
//! `gelu_and_mul`, `gelu_tanh_and_mul`, FlashInfer's and SGLang's, Liger's
//! Triton kernels, torch's `F.silu(a) * b`) through the case library's
//! cases (`kernel_oracle::act_and_mul`): every output within the interval
//! a sound enclosure of the activation leaves, bit for bit where that
//! interval is one value, naming every known activation, arithmetic and
//! layout the output matches.

use crate::arrays::{array, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, failure_tail, names_or, value,
    Admitted, CheckReport, Held, Out, OutKind, Seeds,
};
use crate::check_rms_norm::{as_called, shown};
use crate::check_rope::{read_values, to_array};
use kernel_oracle::act_and_mul::{
    identify, label, parse_activation, parse_arithmetic, reference, within_caps, Arm, Case, Dims,
    Reference, Spec, Verdict,
};
use oracle::act_and_mul::{Declared, Layout, DEFAULT_ACT_ULPS};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(tokens, d)` a check runs by default: widths that are not
/// multiples of 8 first (a vectorised kernel's tail: 7 has no whole vector
/// of 8 at all, 129 one element past the last, 1003 three, 1 a row of
/// one), then widths models run (1408: DeepSeek-V2-Lite's and Qwen-MoE's
/// expert, 2048: DeepSeek-V3's expert, 5504: Llama 2 7B's 11008 over two
/// GPUs, 896: 7168 over eight, 768: Qwen3-30B-A3B's expert, 5632:
/// Qwen1.5-MoE's shared expert); tokens from 1 to 33 (decode and small
/// prefill). Widths whose eighth is not a power of two (1408, 768, 5632,
/// 896) are where a kernel that sizes its grid or vectors by a power of
/// two leaves channels unwritten (vllm-xpu-kernels issue 454: channels
/// past 256 at 768).
pub const ACT_AND_MUL_SHAPES: [Dims; 10] = [
    (9, 7),
    (5, 129),
    (3, 1003),
    (6, 1),
    (33, 1408),
    (4, 2048),
    (2, 5504),
    (16, 896),
    (3, 768),
    (2, 5632),
];

/// The declaration from the keyword arguments.
fn declared(
    activation: &str,
    arithmetic: &str,
    gate_first: bool,
    dtype: &str,
    act_ulps: u32,
) -> PyResult<Declared> {
    let act = parse_activation(activation).map_err(PyValueError::new_err)?;
    let a = parse_arithmetic(arithmetic).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let layout = if gate_first {
        Layout::GateFirst
    } else {
        Layout::UpFirst
    };
    Declared::new(act, a, layout, d, act_ulps).map_err(value_error)
}

/// act_and_mul(x, activation="silu", arithmetic="round_then_mul", gate_first=True, dtype="bfloat16", act_ulps=2) -> (out_lo, out_hi)
///
/// `act(gate) * up` (`oracle::act_and_mul`) as the interval of outputs
/// any admissible kernel gives. `x` `[tokens, 2 d]`: uint16 bit patterns
/// of `dtype` (`"bfloat16"`, `"float16"`) or float32 for `"float32"`; the
/// gate is `x[:, :d]` and the up projection `x[:, d:]` (`gate_first`), or
/// the reverse (vLLM's `mul_and_silu`).
///
/// Per element: the float32 values `[a_lo, a_hi]` any float32 evaluation
/// of the activation gives in the field's forms (`activation`: `"silu"`,
/// `"gelu"` (erf), `"gelu_tanh"`, `"gelu_quick"`; `exp`, `erf`, `tanh`
/// within `act_ulps` ulps, `exp` plus CUDA's `__expf` term `1.25 |s|`;
/// divisions within 2 ulps, every other operation rounded once; flush to
/// zero or not), then under `arithmetic`:
/// - `"round_then_mul"`: `R(R(a) * up)` (vLLM's CUDA ops, torch eager,
///   Liger's GeGLU);
/// - `"f32"`: `R(a * up)` in float32 (FlashInfer, SGLang, Liger's SwiGLU).
///
/// Returns new arrays `[tokens, d]` in the input's representation:
/// `out_lo`, `out_hi` (equal bits: the output is decided).
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown activation, arithmetic or dtype, a shape that is not `[tokens,
/// 2 d]`, `act_ulps` outside 1..65536, an input that is not finite or is
/// 2^127 or more in magnitude, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (x, activation = "silu", arithmetic = "round_then_mul", gate_first = true, dtype = "bfloat16", act_ulps = DEFAULT_ACT_ULPS))]
fn act_and_mul<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    activation: &str,
    arithmetic: &str,
    gate_first: bool,
    dtype: &str,
    act_ulps: u32,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let decl = declared(activation, arithmetic, gate_first, dtype, act_ulps)?;
    let d = decl.dtype();
    let (xs, xv, _) = read_values("x", &x, d, false)?;
    if xs.len() != 2 || xs[1] % 2 != 0 {
        return Err(PyValueError::new_err(format!(
            "x {xs:?}: expected [tokens, 2 d]"
        )));
    }
    let shape = within_caps((xs[0], xs[1] / 2)).map_err(PyValueError::new_err)?;
    let case = Case { x: xv };
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let os = [xs[0], xs[1] / 2];
    Ok((
        to_array(py, d, &os, &want.lo)?,
        to_array(py, d, &os, &want.hi)?,
    ))
}

/// The spec of a case under `decl` (`seed` None: the check's first).
fn spec(dims: Dims, decl: &Declared, arm: Arm, seed: Option<u64>) -> Spec {
    let dtype = decl.dtype();
    Spec {
        dims,
        dtype,
        layout: decl.layout(),
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, dtype, arm)),
    }
}

/// act_and_mul_case(tokens, d, arm, seed=None, dtype="bfloat16", activation="silu", arithmetic="round_then_mul", gate_first=True, act_ulps=2) -> dict
///
/// One case of `check_act_and_mul` as new arrays, as the callable gets
/// them: `x` `[tokens, 2 d]` (uint16 bit patterns of `dtype`, or float32;
/// the gates in the half `gate_first` says); and the oracle's answer under
/// the declaration: `out_lo`, `out_hi` `[tokens, d]` (each output's
/// interval) and float32 `act_lo`, `act_hi` `[tokens, d]` (each gate's
/// admissible float32 activations). `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, activation, arithmetic or
/// dtype, a bad `act_ulps`, a bad shape or one over the caps.
#[pyfunction]
#[pyo3(signature = (tokens, d, arm, seed = None, dtype = "bfloat16", activation = "silu", arithmetic = "round_then_mul", gate_first = true, act_ulps = DEFAULT_ACT_ULPS))]
#[allow(clippy::too_many_arguments)]
fn act_and_mul_case<'py>(
    py: Python<'py>,
    tokens: usize,
    d: usize,
    arm: &str,
    seed: Option<u64>,
    dtype: &str,
    activation: &str,
    arithmetic: &str,
    gate_first: bool,
    act_ulps: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = declared(activation, arithmetic, gate_first, dtype, act_ulps)?;
    let dt = decl.dtype();
    let sp = spec((tokens, d), &decl, arm, seed);
    let shape = sp.shape().map_err(PyValueError::new_err)?;
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let os = [tokens, d];
    let dict = PyDict::new(py);
    dict.set_item("x", to_array(py, dt, &[tokens, 2 * d], &case.x)?)?;
    dict.set_item("out_lo", to_array(py, dt, &os, &want.lo)?)?;
    dict.set_item("out_hi", to_array(py, dt, &os, &want.hi)?)?;
    let act = |f: fn(&oracle::act_and_mul::ActRange) -> f32| want.act.iter().map(f).collect();
    dict.set_item("act_lo", array(py, &os, act(|r| r.lo))?)?;
    dict.set_item("act_hi", array(py, &os, act(|r| r.hi))?)?;
    Ok(dict)
}

/// The failure line of a judged case: which outputs were not admitted and
/// where the first one is, with its gate, up value and admissible
/// activations.
fn failure_line(
    r: &mut String,
    decl: &Declared,
    v: &Verdict,
    want: &Reference,
    c: &Case,
    got: &[u32],
    w: usize,
) {
    let Some(at) = v.first else {
        return;
    };
    let d = decl.dtype();
    let (t, j) = (at / w, at % w);
    let (g, y) = decl.layout().split(&c.x[t * 2 * w..(t + 1) * 2 * w], w, j);
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
    let a = want.act[at];
    let _ = writeln!(
        r,
        "  out: {} of {} elements not admitted ({} of {} decided ones differ, {} of {} bounded ones outside); first at [token {t}, j {j}]{}: got {}, {wanted}; gate {}, up {}; its {} in [{}, {}]",
        v.decided_wrong + v.bounded_outside,
        v.n,
        v.decided_wrong,
        v.decided,
        v.bounded_outside,
        v.bounded,
        if j >= w / 8 * 8 {
            " (past the last whole vector of 8)"
        } else {
            ""
        },
        got.get(at).map_or_else(|| "nothing".into(), |&b| shown(d, b)),
        value(g),
        value(y),
        decl.activation().name(),
        value(a.lo),
        value(a.hi),
    );
}

/// check_act_and_mul(fn, activation="silu", arithmetic="round_then_mul", gate_first=True, dtype="bfloat16", act_ulps=2, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, a gated activation `act(gate) * up`, through the arms `RAND`
/// (normal gates and up values, a scale per row for each half), `TAILS`
/// (gates of magnitude 20 to 100, where `e^g` overflows: `e^g / (1 + e^g)`
/// is `inf / inf`), `ZERO` (gates at and near zero: `±0`, subnormals,
/// the smallest normals; up values with zeros of either sign and
/// subnormals) and `SPLIT` (the halves apart in magnitude, by row, so
/// swapped halves fail everywhere), and judges every output against
/// `act_and_mul`'s interval under the declaration: bit for bit where the
/// interval is one value (decided: most elements in bf16 and f16), within
/// it elsewhere (bounded: most elements in float32, and `gelu`,
/// `gelu_tanh` of gates below about -4, where `1 + erf` cancels).
///
/// The callable: `fn(x, out)` with `x` `[tokens, 2 d]` and `out` `[tokens,
/// d]`, uint16 bit patterns of `dtype` (numpy has no bfloat16) or float32
/// for `"float32"`; `out` comes filled with NaN: the callable writes it
/// and returns None, or returns a new array (a callable that takes `x`
/// alone returns it). The input must be left as given. A kernel that
/// refuses a shape raises `kernel_oracle.Refused`.
///
/// `activation`: `"silu"`, `"gelu"` (the erf form), `"gelu_tanh"`,
/// `"gelu_quick"`. `arithmetic`: `"round_then_mul"` (the activation
/// rounded to the dtype, then the product: vLLM's ops, torch eager) or
/// `"f32"` (one rounding: FlashInfer, Liger's SwiGLU). `gate_first`: the
/// gate is `x[:, :d]` (False: `x[:, d:]`, vLLM's `mul_and_silu`).
/// `act_ulps`: the accuracy of the kernel's `exp`, `erf` and `tanh` (CUDA's
/// `expf`, `erff`, `tanhf`: 2; PTX `tanh.approx.f32`, FlashInfer's
/// `gelu_tanh`: 94 at the least, its measured relative error 1.113e-5;
/// the example declares 128). Each row names
/// every known activation, arithmetic and layout whose intervals admit
/// the output.
///
/// Errors: `ValueError` for an unknown activation, arithmetic, dtype or
/// arm, a bad `act_ulps`, a bad shape or one over the caps (2^22 output
/// elements, d 2^17), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, activation = "silu", arithmetic = "round_then_mul", gate_first = true, dtype = "bfloat16", act_ulps = i64::from(DEFAULT_ACT_ULPS), shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_act_and_mul<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    activation: &str,
    arithmetic: &str,
    gate_first: bool,
    dtype: &str,
    act_ulps: i64,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let act_ulps: u32 = count("act_ulps", act_ulps, 0)?;
    let decl = declared(activation, arithmetic, gate_first, dtype, act_ulps)?;
    let d = decl.dtype();
    let shapes = shapes.unwrap_or_else(|| ACT_AND_MUL_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &dims in &shapes {
        within_caps(dims).map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&r#fn, name);
    let kernel = as_called(py, &r#fn, 1)?;
    let kind = OutKind::of(d);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "act_and_mul".into(),
        ..CheckReport::default()
    };
    let declared_label = label(decl.activation(), decl.arithmetic(), decl.layout());
    let mut kw = format!(
        "activation=\"{activation}\", arithmetic=\"{arithmetic}\", dtype=\"{}\"",
        d.name()
    );
    if !gate_first {
        kw.push_str(", gate_first=False");
    }
    if act_ulps != DEFAULT_ACT_ULPS {
        let _ = write!(kw, ", act_ulps={act_ulps}");
    }
    let about = format!(
        "{}, exp/erf/tanh within {act_ulps} ulps, declared: {declared_label}",
        d.name()
    );
    o.row(&format!("check_act_and_mul({fname}), {about}"))?;
    o.row(&format!(
        "{:<12} {:>5} {:>18} {:>15} {:>8} {:>8} {:>9}  verdict  matches",
        "tokens,d", "arm", "seed", "decided", "bounded", "outside", "call_ms"
    ))?;
    let mut admitted = Admitted::default();
    for &dims in &shapes {
        let shape = within_caps(dims).map_err(PyValueError::new_err)?;
        let xs = [dims.0, 2 * dims.1];
        let os = [dims.0, dims.1];
        for &arm in &arms {
            let base = Spec::base_seed(dims, d, arm);
            for seed in seeds.for_case(base) {
                let sp = spec(dims, &decl, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, &decl))
                    .map_err(value_error)?;
                let hx = Held::new(d, &case.x);
                let inputs = vec![("x", hx.input(py, &xs)?)];
                let (called, ms) = call_typed(py, &kernel, Vec::new(), &inputs, &[(&os, kind)])?;
                let a = arm.name();
                let dims_s = format!("{},{}", dims.0, dims.1);
                let row = format!("{dims_s:<12} {a:>5} 0x{seed:016x}");
                let dims_py = format!("({}, {})", dims.0, dims.1);
                let repro = format!(
                    "kernel_oracle.check_act_and_mul({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL act_and_mul: (tokens, d) = {dims_py} arm={a} seed=0x{seed:016x}, {about}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = got[0].bits(d);
                let v = Verdict::judge(d, &want, &got);
                let found = py
                    .detach(|| identify(&shape, &case, d, act_ulps, &got))
                    .map_err(PyValueError::new_err)?;
                admitted.add(&found, v.decided, v.n);
                let matches = names_or(&found, "; ", "none known");
                let pass = v.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>8} {:>8} {ms:>9.2}  {}  {matches}",
                    v.decided,
                    v.n,
                    v.bounded,
                    v.decided_wrong + v.bounded_outside,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                failure_line(&mut r, &decl, &v, &want, &case, &got, dims.1);
                let case_call = format!(
                    "kernel_oracle.act_and_mul_case({}, {}, \"{a}\", seed=0x{seed:016x}, {kw})",
                    dims.0, dims.1
                );
                failure_tail(&mut r, &matches, &repro, &case_call);
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    rep.finish(o, &admitted.summary())
}

/// Adds the gated activation, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ACT_AND_MUL_SHAPES", ACT_AND_MUL_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(act_and_mul, m)?)?;
    m.add_function(wrap_pyfunction!(check_act_and_mul, m)?)?;
    m.add_function(wrap_pyfunction!(act_and_mul_case, m)?)?;
    Ok(())
}
