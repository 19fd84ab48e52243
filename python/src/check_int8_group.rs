//! Per-token-group INT8 activation quantization
//! (`oracle::int8_group_quant`): `quantize_int8_group`, the quantizer
//! under a declared rule (vLLM's and SGLang's
//! `per_token_group_quant_int8`: DeepSeek-style W8A8 int8 block
//! quantization); `int8_group_quant_case`, one case's arrays; and
//! `check_int8_group_quant`, which runs any Python quantizer through the
//! case library's cases (`kernel_oracle::int8_group_quant`) and judges its
//! codes and scales bit for bit, naming every known rule its output
//! matches.

use crate::arrays::array;
use crate::check::{
    arms_or_all, call_args, callable_name, count, failure_head, rerun_tail, CheckReport, Fill,
    Held, Out, OutKind, Seeds,
};
use crate::check_int8::{adapt, failure_lines, read_out, read_x, verdict_row, x_array};
use kernel_oracle::int8_group_quant::{
    int8_group_identify, int8_group_known, int8_group_reference, Int8GroupArm, Int8GroupSpec,
    INT8_GROUP_SHAPES,
};
use kernel_oracle::int8_quant::Int8Verdict;
use kernel_oracle::names::parse_named;
use oracle::dtype::Dtype;
use oracle::fp8_quant::Ue8m0Ceil;
use oracle::int8_group_quant::{quantize_int8_groups, Int8GroupRule};
use oracle::int8_quant::{Codes, Rounding};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a check or quantizer was asked for: its rule and its input
/// dtype, from the Python arguments.
#[derive(Clone, Copy, Debug)]
struct Declared {
    rule: Int8GroupRule,
    dtype: Dtype,
}

/// The `ue8m0` argument: `False` (or None, the default: no UE8M0),
/// `True` or `"log2f"` (the ceiling of a correctly rounded `log2f`,
/// vLLM's `scale_ue8m0`), `"exact"` (the exact ceiling, the bit forms).
///
/// # Errors
/// `ValueError` for anything else.
fn parse_ue8m0(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Ue8m0Ceil>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.then_some(Ue8m0Ceil::Log2f));
    }
    let s = v.extract::<String>().ok();
    match s.as_deref().map(str::to_ascii_lowercase).as_deref() {
        Some("log2f") => Ok(Some(Ue8m0Ceil::Log2f)),
        Some("exact") => Ok(Some(Ue8m0Ceil::Exact)),
        _ => Err(PyValueError::new_err(format!(
            "ue8m0 {}: expected False, True, \"log2f\" (the same as True) or \"exact\"",
            v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))),
    }
}

/// The `ue8m0` argument as a rerun line repeats it.
fn ue8m0_py(u: Option<Ue8m0Ceil>) -> &'static str {
    match u {
        None => "False",
        Some(Ue8m0Ceil::Log2f) => "True",
        Some(Ue8m0Ceil::Exact) => "\"exact\"",
    }
}

impl Declared {
    /// `rounding` (`"trunc"`, `"nearest_even"`, `"nearest_away"`),
    /// `codes` (`"divide"`, `"reciprocal"`, `"torch_divide"`), `ue8m0`
    /// ([`parse_ue8m0`]), `eps` and `dtype`, checked (`eps` as Python
    /// gives it: one that float32 cannot hold, a non-zero one rounding to
    /// 0 or one past its range, is refused).
    fn new(
        rounding: &str,
        codes: &str,
        ue8m0: Option<&Bound<'_, PyAny>>,
        eps: f64,
        dtype: &str,
    ) -> PyResult<Declared> {
        let bad = |m: String| PyValueError::new_err(m);
        let rounding =
            parse_named("rounding", rounding, &Rounding::ALL, Rounding::name, true).map_err(bad)?;
        let codes = parse_named("codes", codes, &Codes::ALL, Codes::name, true).map_err(bad)?;
        let ue8m0 = parse_ue8m0(ue8m0)?;
        if ue8m0.is_some() && codes == Codes::Reciprocal {
            return Err(bad(format!(
                "codes=\"reciprocal\" with ue8m0={}: a UE8M0 scale is a power of two, so x * (1/s) is x / s bit for bit; declare codes=\"divide\"",
                ue8m0_py(ue8m0)
            )));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(bad(format!(
                "eps = {eps}: it must be finite and at least 0"
            )));
        }
        let eps32 = eps as f32;
        if !eps32.is_finite() || (eps > 0.0 && eps32 == 0.0) {
            return Err(bad(format!(
                "eps = {eps:e}: the quantizers hold it in float32, where it is {eps32:e}; declare an eps float32 holds"
            )));
        }
        let eps = eps32;
        let dtype = kernel_oracle::dtype::parse_dtype(dtype).map_err(bad)?;
        Ok(Declared {
            rule: Int8GroupRule {
                rounding,
                codes,
                ue8m0,
                eps,
            },
            dtype,
        })
    }

    /// The keyword arguments that name this declaration in a rerun line.
    fn keywords(&self, group_size: usize) -> String {
        let r = self.rule;
        format!(
            "group_size={group_size}, rounding=\"{}\", codes=\"{}\", ue8m0={}, eps={:e}, dtype=\"{}\"",
            r.rounding.name(),
            r.codes.name(),
            ue8m0_py(r.ue8m0),
            r.eps,
            self.dtype.name()
        )
    }
}

/// A quantizer's outputs as Python values: `q` int8 `[m, k]`, `s` float32
/// `[m, groups]`.
type Pair<'py> = (
    Bound<'py, numpy::PyArrayDyn<i8>>,
    Bound<'py, numpy::PyArrayDyn<f32>>,
);

/// quantize_int8_group(x, group_size=128, rounding="trunc", codes="divide", ue8m0=False, eps=1e-10, dtype="float32") -> (q: int8[m, k], s: float32[m, ceil(k/group_size)])
///
/// The per-token-group int8 quantizer of `oracle::int8_group_quant` on
/// `x` (`[m, k]`: float32, or uint16 bit patterns of `dtype` bfloat16 or
/// float16, converted to float32 exactly), as vLLM's and SGLang's
/// `per_token_group_quant_int8` computes it: per group of `group_size`
/// consecutive columns of a row (a short last group when it does not
/// divide `k`), `absmax = max(eps, max |x|)` (`fmaxf` from `eps`: NaN
/// skipped), `s = absmax / 127` (with `ue8m0=True` or `"log2f"`,
/// `2^ceil(log2f(max(s, 1e-10)))`, `log2f` correctly rounded: vLLM's
/// `scale_ue8m0`; with `ue8m0="exact"`, `2^ceil(log2(max(s, 1e-10)))`
/// exactly: the bit forms; they part only 1 to 3 ulps above a power of
/// two), codes `int8(clamp(x / s, -128, 127))` (`codes="reciprocal"`:
/// `x * fl(127 / absmax)`; `codes="torch_divide"`: `s = absmax * fl(1 /
/// 127)`, torch's `absmax / 127.0` on CUDA), the conversion by `rounding`: `"trunc"` (toward
/// zero: the C++ cast of vLLM's CUDA kernel, Triton's `.to(tl.int8)`,
/// torch's `.to(torch.int8)`), `"nearest_even"` (`cvt.rni`) or
/// `"nearest_away"` (`libdevice.round`, `roundf`). A NaN element codes
/// -128 (`fmaxf(NaN, -128)`). Source: vLLM `csrc/quantization/fp8/
/// per_token_group_quant.cu` (`per_token_group_quant_8bit_kernel`, int8),
/// `vllm/model_executor/layers/quantization/utils/int8_utils.py`
/// (`_per_token_group_quant_int8`).
///
/// Errors: `TypeError` for an `x` of another dtype; `ValueError` for an
/// unknown rounding, codes or dtype, a `ue8m0` other than False, True,
/// `"log2f"` or `"exact"`, `codes="reciprocal"` with UE8M0, an `eps` that
/// is NaN, infinite or negative (or that
/// float32 cannot hold: a non-zero one rounding to 0, one past its range),
/// a `group_size` below 1 or an `x` that is not 2-D.
#[pyfunction]
#[pyo3(
    signature = (x, group_size = 128, rounding = "trunc", codes = "divide", ue8m0 = None, eps = 1e-10, dtype = "float32"),
    text_signature = "(x, group_size=128, rounding=\"trunc\", codes=\"divide\", ue8m0=False, eps=1e-10, dtype=\"float32\")"
)]
#[allow(clippy::too_many_arguments)]
fn quantize_int8_group<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    group_size: i64,
    rounding: &str,
    codes: &str,
    ue8m0: Option<Bound<'py, PyAny>>,
    eps: f64,
    dtype: &str,
) -> PyResult<Pair<'py>> {
    let group_size: usize = count("group_size", group_size, 1)?;
    let decl = Declared::new(rounding, codes, ue8m0.as_ref(), eps, dtype)?;
    let (xv, m, k) = read_x(&x, decl.dtype)?;
    let groups = k.div_ceil(group_size);
    let (mut q, mut s) = (vec![0i8; m * k], vec![0f32; m * groups]);
    quantize_int8_groups(&xv, k, group_size, decl.rule, &mut q, &mut s)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((array(py, &[m, k], q)?, array(py, &[m, groups], s)?))
}

/// int8_group_quant_case(m, k, arm, group_size=128, rounding="trunc", codes="divide", ue8m0=False, eps=1e-10, dtype="bfloat16", seed=None) -> dict
///
/// One case of `check_int8_group_quant` as new arrays: `x` (`[m, k]`,
/// float32 or uint16 bit patterns of `dtype`), and the oracle's `q` (int8
/// `[m, k]`) and `s` (float32 `[m, ceil(k / group_size)]`) under the
/// declared rule. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, rounding, codes or dtype, the
/// arguments `check_int8_group_quant` refuses, or a zero dimension.
#[pyfunction]
#[pyo3(
    signature = (m, k, arm, group_size = 128, rounding = "trunc", codes = "divide", ue8m0 = None, eps = 1e-10, dtype = "bfloat16", seed = None),
    text_signature = "(m, k, arm, group_size=128, rounding=\"trunc\", codes=\"divide\", ue8m0=False, eps=1e-10, dtype=\"bfloat16\", seed=None)"
)]
#[allow(clippy::too_many_arguments)]
fn int8_group_quant_case<'py>(
    py: Python<'py>,
    m: usize,
    k: usize,
    arm: &str,
    group_size: i64,
    rounding: &str,
    codes: &str,
    ue8m0: Option<Bound<'py, PyAny>>,
    eps: f64,
    dtype: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let group_size: usize = count("group_size", group_size, 1)?;
    let arm = Int8GroupArm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = Declared::new(rounding, codes, ue8m0.as_ref(), eps, dtype)?;
    let sp = Int8GroupSpec {
        m,
        k,
        group_size,
        dtype: decl.dtype,
        arm,
        seed: seed.unwrap_or_else(|| Int8GroupSpec::base_seed(m, k, group_size, decl.dtype, arm)),
    };
    let x = sp.generate().map_err(PyValueError::new_err)?;
    let want = int8_group_reference(&sp, &x, decl.rule).map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("x", x_array(py, decl.dtype, &x, m, k)?)?;
    dict.set_item("q", array(py, &[m, k], want.q)?)?;
    dict.set_item("s", array(py, &[m, sp.groups()], want.s)?)?;
    Ok(dict)
}

/// check_int8_group_quant(quant, group_size=128, rounding="trunc", codes="divide", ue8m0=False, eps=1e-10, dtype="bfloat16", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `quant`, a per-token-group INT8 activation quantizer (vLLM's and
/// SGLang's `per_token_group_quant_int8`, CUDA or Triton; the torch form
/// `(x / (absmax / 127)).to(torch.int8)`), through the arms `RAND` (groups
/// at magnitudes 1e-3 to 1e3), `TIES` (quotients `x / s` at exact `n +
/// 1/2`, `n + 1/4`, `n + 3/4`, ... of either sign, where toward zero, to
/// nearest even and to nearest away part; and within dtype steps of
/// integers and half-integers under an inexact scale, where divide and
/// reciprocal part), `ZERO` (all-zero groups and groups under `eps`: the
/// floor decides the scale), `AMAX` (the amax at a group's first or last
/// element, adjacent groups 2^8 and more apart, groups all negative: a
/// boundary off by one, a neighbour's scale, a signed max), `SAT`
/// (`±absmax` and elements just inside: toward zero, the amax codes 126
/// where `fl(absmax / s) < 127`; `absmax / 128` codes -128) and `POW2`
/// (in float32, `absmax / 127` bit for bit at a power of two, 1 to 3 ulps
/// below one, or 1 to 3 ulps above one, half the groups where `log2f`
/// rounds back to the power: the UE8M0 ceilings `ue8m0=True` and
/// `ue8m0="exact"` part there and nowhere else; a 16-bit input cannot
/// hold such an amax, so there POW2 draws `127 * 2^e` and a dtype step
/// either side) and, only when
/// named, `NAN` (NaN elements, skipped by `fmaxf` and coded -128 by the
/// clamp: rule `I8G-NAN`), and judges its codes and scales bit for bit
/// against `quantize_int8_group(x, group_size, rounding, codes, ue8m0,
/// eps, dtype)`.
///
/// The callable: `quant(x, q, s)`, with `x` `[m, k]` (float32, or uint16
/// bit patterns of `dtype` bfloat16 or float16: torch users
/// `torch.from_numpy(x).view(torch.bfloat16)`), `q` int8 `[m, k]` (handed
/// filled with the bitwise complement of the oracle's codes, so every
/// element left unwritten differs) and `s` float32 `[m, ceil(k /
/// group_size)]` (row-major; filled with NaN); writing both and returning
/// None, or returning `(q, s)` (`q` int8: uint8 fails the case). The
/// ragged default shape has a short last group (`k % group_size`
/// columns, with its own scale); a quantizer that
/// needs `k % group_size == 0` (vLLM's and SGLang's assert it) raises
/// `kernel_oracle.Refused` there.
///
/// Each row names the known rules the output matches bit for bit (`trunc`,
/// `nearest_even`, `nearest_away`, each with `/reciprocal` or
/// `/torch_divide`, and each dividing with `/ue8m0` (the `log2f`
/// ceiling) or `/ue8m0_exact`, at the declared `eps`) and,
/// where it differs from the
/// declared rule, how far: codes in integer steps, scales in f32 ulps.
/// `rounding="trunc"`, `codes="divide"` is vLLM's and SGLang's (a Triton
/// form matches it with `tl.div_rn`; its `/` is the approximate
/// `div.full.f32`). `codes="torch_divide"` declares the torch form that
/// divides by a Python scalar, `absmax / 127.0`: on CUDA torch multiplies
/// by `fl(1 / 127)`, so the scale is `absmax * fl(1 / 127)`, then `x / s`.
///
/// Errors: `ValueError`, before any call, for an unknown rounding, codes,
/// dtype or arm, a `ue8m0` other than False, True, `"log2f"` or
/// `"exact"`, `codes="reciprocal"` with UE8M0 (the same bits as divide),
/// an `eps` that is NaN, infinite or negative (or that float32
/// cannot hold), a `group_size` below 1, a zero dimension or a case over 2^26 elements. Every check
/// also raises `ValueError`, before any call, for `trials` below 1 or an
/// empty `seeds` list.
#[pyfunction]
#[pyo3(
    signature = (quant, group_size = 128, rounding = "trunc", codes = "divide", ue8m0 = None, eps = 1e-10, dtype = "bfloat16", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None),
    text_signature = "(quant, group_size=128, rounding=\"trunc\", codes=\"divide\", ue8m0=False, eps=1e-10, dtype=\"bfloat16\", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None)"
)]
#[allow(clippy::too_many_arguments)]
fn check_int8_group_quant<'py>(
    py: Python<'py>,
    quant: Bound<'py, PyAny>,
    group_size: i64,
    rounding: &str,
    codes: &str,
    ue8m0: Option<Bound<'py, PyAny>>,
    eps: f64,
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
    let gs: usize = count("group_size", group_size, 1)?;
    let decl = Declared::new(rounding, codes, ue8m0.as_ref(), eps, dtype)?;
    let shapes = shapes.unwrap_or_else(|| INT8_GROUP_SHAPES.to_vec());
    let arms = match arms {
        Some(_) => arms_or_all(arms, &Int8GroupArm::ALL, Int8GroupArm::parse)?,
        None => Int8GroupSpec::default_arms(),
    };
    let probe = |m, k, arm| Int8GroupSpec {
        m,
        k,
        group_size: gs,
        dtype: decl.dtype,
        arm,
        seed: 0,
    };
    for &(m, k) in &shapes {
        probe(m, k, Int8GroupArm::Rand)
            .valid()
            .map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&quant, name);
    let adapted = adapt(py, &quant, true)?;
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "int8_group_quant".into(),
        ..CheckReport::default()
    };
    let declared = decl.rule.label();
    let what = format!(
        "group {gs}, eps {:e}, input {}, declared: {declared}",
        decl.rule.eps,
        decl.dtype.name()
    );
    out.row(&format!("check_int8_group_quant({fname}), {what}"))?;
    out.row(&format!(
        "{:<12} {:>5} {:>18} {:>17} {:>13} {:>5} {:>6} {:>9}  verdict  matches",
        "m,k", "arm", "seed", "codes differ", "scales differ", "steps", "ulps", "call_ms"
    ))?;
    let kw = decl.keywords(gs);
    for &(m, k) in &shapes {
        for &arm in &arms {
            let base = Int8GroupSpec::base_seed(m, k, gs, decl.dtype, arm);
            for seed in seeds.for_case(base) {
                let sp = Int8GroupSpec {
                    seed,
                    ..probe(m, k, arm)
                };
                let x = sp.generate().map_err(PyValueError::new_err)?;
                let want =
                    int8_group_reference(&sp, &x, decl.rule).map_err(PyValueError::new_err)?;
                let held = Held::new(decl.dtype, &x);
                let inputs = [("x", held.input(py, &[m, k])?)];
                let (q_shape, s_shape) = ([m, k], [m, sp.groups()]);
                let q0: Vec<u8> = want.q.iter().map(|&c| !(c as u8)).collect();
                let arrays = vec![
                    array(py, &q_shape, q0)?.into_any(),
                    OutKind::F32.array(py, &s_shape, &Fill::new(&inputs))?,
                ];
                let outs: [(&[usize], OutKind); 2] =
                    [(&q_shape, OutKind::U8), (&s_shape, OutKind::F32)];
                let args = vec![inputs[0].1.array(), arrays[0].clone(), arrays[1].clone()];
                let (called, ms) = call_args(py, &adapted, args, &inputs, &outs, arrays)?;
                let a = arm.name();
                let row = format!("{:<12} {a:>5} 0x{seed:016x}", format!("{m},{k}"));
                let repro = format!(
                    "kernel_oracle.check_int8_group_quant({fname}, {kw}, shapes=[({m}, {k})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL int8_group_quant: m={m} k={k} arm={a} seed=0x{seed:016x}, {what}"
                );
                let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = read_out(&got);
                let v = Int8Verdict::judge(k, &got, &want);
                let matches: Vec<String> = int8_group_identify(&sp, &x, &got, decl.rule.eps)
                    .into_iter()
                    .map(|r| r.label().to_string())
                    .collect();
                let (line, pass) = verdict_row(&row, &v, false, ms, &written, &matches);
                out.row(&line)?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if !v.pass() {
                    let groups = sp.groups();
                    let at = |i: usize| format!("(row {}, group {})", i / groups, i % groups);
                    failure_lines(&mut r, &v, &x, k, &at, &matches);
                }
                let case = format!(
                    "kernel_oracle.int8_group_quant_case({m}, {k}, \"{a}\", {kw}, seed=0x{seed:016x})"
                );
                rerun_tail(&mut r, &repro, "codes and scales", &case);
                rep.fail(&mut out, r, repro)?;
            }
        }
    }
    let known: Vec<&str> = int8_group_known(decl.rule.eps)
        .into_iter()
        .map(|r| r.label())
        .collect();
    rep.finish(out, &format!("known rules: {}; ", known.join(", ")))
}

/// Adds the per-token-group int8 quantizer, its case, its check and the
/// default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("INT8_GROUP_QUANT_SHAPES", INT8_GROUP_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(quantize_int8_group, m)?)?;
    m.add_function(wrap_pyfunction!(int8_group_quant_case, m)?)?;
    m.add_function(wrap_pyfunction!(check_int8_group_quant, m)?)?;
    Ok(())
}
