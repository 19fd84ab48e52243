//! RMSNorm (or fused add + RMSNorm) then e4m3 quantization, fused
//! (`oracle::rms_norm_fp8_quant`): the oracle's code sets and scale
//! intervals for any input, and `check_rms_norm_fp8_quant`, which runs
//! any Python callable (vLLM's `rms_norm_static_fp8_quant`,
//! `fused_add_rms_norm_static_fp8_quant` and
//! `rms_norm_dynamic_per_token_quant`, the unfused `rms_norm` then
//! quantizer, a Triton kernel) through the case library's cases
//! (`kernel_oracle::rms_norm_fp8_quant`): every code within its set, bit
//! for bit where the set is one code, every scale within its interval,
//! the residual written back bit for bit, naming every declaration (what
//! is quantized x the scale rule) the output matches.

use crate::arrays::{array, value_error};
use crate::check::{
    arms_or_all, call_args, callable_name, count, failure_head, failure_tail, names_or, value,
    Admitted, CheckReport, Fill, Held, Input, Out, OutKind, Seeds,
};
use crate::check_rms_norm::{as_called, shown};
use crate::check_rope::{read_values, to_array};
use kernel_oracle::rms_norm::{parse_arithmetic, parse_sum, Dims};
use kernel_oracle::rms_norm_fp8_quant::{
    declared, identify, inv_rms_rows, known_rules, label, parse_input, parse_rule, reference,
    within_caps, Arm, Case, Reference, Scaling, Spec, Verdict,
};
use numpy::PyReadonlyArrayDyn;
use oracle::fp8_quant::{Granularity, ScaleSource, ScaledRule, MIN_SCALING_FACTOR};
use oracle::rms_norm::Dtype;
use oracle::rms_norm_fp8_quant::{Declared, QuantizeInput};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat};
use std::fmt::Write;

/// The shapes `(rows, hidden)` a check runs by default: hidden sizes that
/// are not multiples of 8 first (7, 129, 4097: a vectorised kernel's
/// tail; 1 and 3: rows shorter than a vector, TIES has nothing to tie
/// there), then the models' (2048: Llama 3.2 1B, 4096: Llama 3 8B, 7168:
/// DeepSeek-V3, 8192: Llama 3 70B), rows from 1 to 33.
pub const RMS_NORM_FP8_QUANT_SHAPES: [Dims; 9] = [
    (9, 7),
    (5, 129),
    (3, 4097),
    (6, 1),
    (7, 3),
    (33, 2048),
    (4, 4096),
    (3, 7168),
    (16, 8192),
];

/// A check's declaration, parsed: the norm, what is quantized, the rule,
/// the granularity, the scaling, the fused add.
#[derive(Clone, Copy, Debug)]
struct Setup {
    norm: oracle::rms_norm::Declared,
    input: QuantizeInput,
    rule: ScaledRule,
    granularity: Granularity,
    scaling: Scaling,
    fused: bool,
}

impl Setup {
    /// The keyword arguments, checked.
    #[allow(clippy::too_many_arguments)]
    fn new(
        arithmetic: &str,
        quantize_input: &str,
        rule: &str,
        granularity: &str,
        is_static: bool,
        residual: bool,
        scale_ub: Option<f32>,
        dtype: &str,
        eps: f64,
        sum_rounding: &str,
        rsqrt_ulps: u32,
        min_scale: f32,
    ) -> PyResult<Setup> {
        let bad = |m: String| Err(PyValueError::new_err(m));
        let a = parse_arithmetic(arithmetic).map_err(PyValueError::new_err)?;
        let sum = parse_sum(sum_rounding).map_err(PyValueError::new_err)?;
        let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
        let norm = oracle::rms_norm::Declared::new(a, sum, d, eps as f32, rsqrt_ulps)
            .map_err(|e| crate::arrays::eps_error(eps, e))?;
        let input = parse_input(quantize_input).map_err(PyValueError::new_err)?;
        let rule = parse_rule(rule).map_err(PyValueError::new_err)?;
        let g = match granularity.to_ascii_lowercase().as_str() {
            "tensor" => Granularity::Tensor,
            "token" => Granularity::Token,
            _ => {
                return bad(format!(
                    "granularity {granularity:?}: expected \"tensor\" or \"token\""
                ))
            }
        };
        let positive = |v: f32| v.is_finite() && v > 0.0;
        let scaling = if is_static {
            if g == Granularity::Token {
                return bad("static=True: a static scale is per tensor (vLLM's rms_norm_static_fp8_quant); granularity must be \"tensor\"".into());
            }
            if !matches!(rule, ScaledRule::Divide | ScaledRule::Reciprocal) {
                return bad(format!(
                    "rule {:?} derives its own scale: a static scale takes \"divide\" or \"reciprocal\"",
                    rule.label()
                ));
            }
            if scale_ub.is_some() {
                return bad("scale_ub bounds a dynamic amax; static=True takes none".into());
            }
            Scaling::Static
        } else {
            if let Some(ub) = scale_ub {
                if g == Granularity::Tensor {
                    return bad(
                        "scale_ub: vLLM's bound is per token; granularity must be \"token\"".into(),
                    );
                }
                if !positive(ub) {
                    return bad(format!("scale_ub = {ub}: it must be finite and positive"));
                }
            }
            if !(min_scale.is_finite() && min_scale >= 0.0) {
                return bad(format!(
                    "min_scale = {min_scale}: it must be finite and at least 0"
                ));
            }
            Scaling::Dynamic {
                min_scale,
                scale_ub,
            }
        };
        Ok(Setup {
            norm,
            input,
            rule,
            granularity: g,
            scaling,
            fused: residual,
        })
    }

    /// The spec of a case (`seed` None: the check's first).
    fn spec(&self, dims: Dims, arm: Arm, seed: Option<u64>) -> Spec {
        Spec {
            dims,
            norm: self.norm,
            fused: self.fused,
            granularity: self.granularity,
            scaling: self.scaling,
            arm,
            seed: seed.unwrap_or_else(|| Spec::base_seed(dims, self.fused, self.granularity, arm)),
        }
    }

    /// The arms a check runs by default: RAND, EXACT, TIES, AMAX, ZERO;
    /// UB with a `scale_ub`; RESIDUAL with the residual.
    fn default_arms(&self) -> Vec<Arm> {
        Arm::ALL
            .into_iter()
            .filter(|a| match a {
                Arm::Ub => matches!(
                    self.scaling,
                    Scaling::Dynamic {
                        scale_ub: Some(_),
                        ..
                    }
                ),
                Arm::Residual => self.fused,
                _ => true,
            })
            .collect()
    }

    /// The scales' shape: `[1]` per tensor, `[rows, 1]` per token.
    fn scale_shape(&self, rows: usize) -> Vec<usize> {
        match self.granularity {
            Granularity::Tensor => vec![1],
            Granularity::Token => vec![rows, 1],
        }
    }

    /// The reproduction's keyword arguments (the non-default ones but the
    /// declaration's three, always given).
    fn kw(&self, arithmetic: &str) -> String {
        let d = self.norm.dtype();
        let mut kw = format!(
            "arithmetic=\"{arithmetic}\", quantize_input=\"{}\", rule=\"{}\", granularity=\"{}\"",
            self.input.name(),
            self.rule.label(),
            match self.granularity {
                Granularity::Tensor => "tensor",
                Granularity::Token => "token",
            }
        );
        match self.scaling {
            Scaling::Static => {}
            Scaling::Dynamic {
                min_scale,
                scale_ub,
            } => {
                kw.push_str(", static=False");
                if let Some(ub) = scale_ub {
                    let _ = write!(kw, ", scale_ub={ub:e}");
                }
                if min_scale != MIN_SCALING_FACTOR {
                    let _ = write!(kw, ", min_scale={min_scale:e}");
                }
            }
        }
        if self.fused {
            let _ = write!(
                kw,
                ", residual=True, sum_rounding=\"{}\"",
                self.norm.sum().name()
            );
        }
        if d != Dtype::Bf16 {
            let _ = write!(kw, ", dtype=\"{}\"", d.name());
        }
        if self.norm.eps() != 1e-6f32 {
            let _ = write!(kw, ", eps={:?}", f64::from(self.norm.eps()));
        }
        if self.norm.rsqrt_ulps() != oracle::rms_norm::DEFAULT_RSQRT_ULPS {
            let _ = write!(kw, ", rsqrt_ulps={}", self.norm.rsqrt_ulps());
        }
        kw
    }
}

/// A reference's code sets, scales and values as new arrays in `dict`.
fn put_reference<'py>(
    py: Python<'py>,
    dict: &Bound<'py, PyDict>,
    d: Dtype,
    xs: &[usize],
    scale_shape: &[usize],
    want: &Reference,
) -> PyResult<()> {
    dict.set_item("v_lo", array(py, xs, want.v_lo.clone())?)?;
    dict.set_item("v_hi", array(py, xs, want.v_hi.clone())?)?;
    dict.set_item("code_lo", array(py, xs, want.code_lo.clone())?)?;
    dict.set_item("code_hi", array(py, xs, want.code_hi.clone())?)?;
    dict.set_item("scale_lo", array(py, scale_shape, want.scale_lo.clone())?)?;
    dict.set_item("scale_hi", array(py, scale_shape, want.scale_hi.clone())?)?;
    dict.set_item(
        "residual_out",
        if want.residual.is_empty() {
            None
        } else {
            Some(to_array(py, d, xs, &want.residual)?)
        },
    )?;
    Ok(())
}

/// rms_norm_fp8_quant(x, weight, eps, scale=None, residual=None, arithmetic="round_then_weight", quantize_input="rounded", rule="divide", granularity="tensor", scale_ub=None, min_scale=MIN_SCALING_FACTOR, dtype="bfloat16", sum_rounding="dtype", rsqrt_ulps=2) -> dict
///
/// RMSNorm (`rms_norm`'s intervals), or with `residual` the fused add
/// first, then e4m3 quantization (`oracle::rms_norm_fp8_quant`), as the
/// sets of codes and scales any admissible kernel gives. `x` `[rows,
/// hidden]`, `weight` `[hidden]`, `residual` `[rows, hidden]` or None:
/// uint16 bit patterns of `dtype`, or float32 for `"float32"`; `eps` a
/// float rounded to float32. `scale` (a float) makes the scale static,
/// per tensor (`rule` `"divide"` or `"reciprocal"`); else it is dynamic,
/// per `granularity` (`"tensor"` or `"token"`), from the amax of the
/// values quantized, bounded by `scale_ub`, floored at `min_scale`.
///
/// What is quantized (`quantize_input`): `"rounded"`, the normalized
/// element rounded to `dtype` (what an unfused `rms_norm` writes; vLLM's
/// fused kernels round it too), or `"f32"`, the float32 value before that
/// rounding. Each value's enclosure runs over every admissible inverse RMS
/// (`rms_norm`'s bound); the amax's over the span's enclosures; each
/// code's set over both (a code's magnitude grows with the value and
/// shrinks with the amax).
///
/// Returns a dict of new arrays: `v_lo`, `v_hi` (float32 `[rows,
/// hidden]`: each value quantized), `code_lo`, `code_hi` (uint8 `[rows,
/// hidden]`: each code's set, every code of their sign between them in
/// magnitude; equal: the code is decided; of opposite signs: any code but
/// NaN's), `scale_lo`, `scale_hi` (float32 `[1]` or `[rows, 1]`) and
/// `residual_out` (None without `residual`).
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown name, shapes that disagree, a bad eps, `rsqrt_ulps`, scale,
/// `scale_ub` or `min_scale`, a static scale under a rule that derives
/// its own, an input that is not finite, a value to quantize that
/// overflows the dtype, a row whose sum of squares could overflow.
#[pyfunction]
#[pyo3(signature = (x, weight, eps, scale = None, residual = None, arithmetic = "round_then_weight", quantize_input = "rounded", rule = "divide", granularity = "tensor", scale_ub = None, min_scale = MIN_SCALING_FACTOR, dtype = "bfloat16", sum_rounding = "dtype", rsqrt_ulps = 2))]
#[allow(clippy::too_many_arguments)]
fn rms_norm_fp8_quant<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    weight: Bound<'py, PyAny>,
    eps: f64,
    scale: Option<f32>,
    residual: Option<Bound<'py, PyAny>>,
    arithmetic: &str,
    quantize_input: &str,
    rule: &str,
    granularity: &str,
    scale_ub: Option<f32>,
    min_scale: f32,
    dtype: &str,
    sum_rounding: &str,
    rsqrt_ulps: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let granularity = if scale.is_some() {
        "tensor"
    } else {
        granularity
    };
    let setup = Setup::new(
        arithmetic,
        quantize_input,
        rule,
        granularity,
        scale.is_some(),
        residual.is_some(),
        scale_ub,
        dtype,
        eps,
        sum_rounding,
        rsqrt_ulps,
        min_scale,
    )?;
    let d = setup.norm.dtype();
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
    let source = match scale {
        Some(s) => ScaleSource::Static(s),
        None => match setup.scaling {
            Scaling::Dynamic {
                min_scale,
                scale_ub,
            } => ScaleSource::Dynamic {
                min_scale,
                scale_ub,
            },
            Scaling::Static => unreachable!("a static setup has a scale"),
        },
    };
    let decl = Declared::new(
        setup.norm,
        setup.input,
        setup.rule,
        setup.granularity,
        source,
    )
    .map_err(value_error)?;
    let case = Case {
        x: xv,
        residual: res.map(|r| r.1).unwrap_or_default(),
        weight: wv,
        scale,
    };
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let dict = PyDict::new(py);
    put_reference(py, &dict, d, &xs, &setup.scale_shape(xs[0]), &want)?;
    Ok(dict)
}

/// rms_norm_fp8_quant_case(rows, hidden, arm, seed=None, arithmetic="round_then_weight", quantize_input="rounded", rule="divide", granularity="tensor", static=True, residual=False, scale_ub=None, dtype="bfloat16", eps=1e-6, sum_rounding="dtype", rsqrt_ulps=2, min_scale=MIN_SCALING_FACTOR) -> dict
///
/// One case of `check_rms_norm_fp8_quant` as new arrays, as the callable
/// gets them: `x` `[rows, hidden]`, `residual` (`[rows, hidden]`, None
/// without it), `weight` `[hidden]` (uint16 bit patterns of `dtype`, or
/// float32), `scale` (float32 `[1]`, the static scale the case drew; None
/// for a dynamic one), `eps` (the float32 value, as a float); and the
/// oracle's answer under the declaration: `v_lo`, `v_hi`, `code_lo`,
/// `code_hi`, `scale_lo`, `scale_hi`, `residual_out` (as
/// `rms_norm_fp8_quant` returns them). `seed` None: the check's first.
///
/// Errors: `ValueError` for the arguments `check_rms_norm_fp8_quant`
/// refuses, an arm the declaration cannot run (UB without `scale_ub`,
/// RESIDUAL without the residual), a bad shape or one over the caps.
#[pyfunction]
#[pyo3(signature = (rows, hidden, arm, seed = None, arithmetic = "round_then_weight", quantize_input = "rounded", rule = "divide", granularity = "tensor", r#static = true, residual = false, scale_ub = None, dtype = "bfloat16", eps = 1e-6, sum_rounding = "dtype", rsqrt_ulps = 2, min_scale = MIN_SCALING_FACTOR))]
#[allow(clippy::too_many_arguments)]
fn rms_norm_fp8_quant_case<'py>(
    py: Python<'py>,
    rows: usize,
    hidden: usize,
    arm: &str,
    seed: Option<u64>,
    arithmetic: &str,
    quantize_input: &str,
    rule: &str,
    granularity: &str,
    r#static: bool,
    residual: bool,
    scale_ub: Option<f32>,
    dtype: &str,
    eps: f64,
    sum_rounding: &str,
    rsqrt_ulps: u32,
    min_scale: f32,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let setup = Setup::new(
        arithmetic,
        quantize_input,
        rule,
        granularity,
        r#static,
        residual,
        scale_ub,
        dtype,
        eps,
        sum_rounding,
        rsqrt_ulps,
        min_scale,
    )?;
    let d = setup.norm.dtype();
    let sp = setup.spec((rows, hidden), arm, seed);
    let shape = sp.valid().map_err(PyValueError::new_err)?;
    let case = py.detach(|| sp.generate()).map_err(PyValueError::new_err)?;
    let decl = declared(&sp, &case, setup.input, setup.rule).map_err(PyValueError::new_err)?;
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let xs = [rows, hidden];
    let dict = PyDict::new(py);
    dict.set_item("x", to_array(py, d, &xs, &case.x)?)?;
    dict.set_item(
        "residual",
        if residual {
            Some(to_array(py, d, &xs, &case.residual)?)
        } else {
            None
        },
    )?;
    dict.set_item("weight", to_array(py, d, &[hidden], &case.weight)?)?;
    dict.set_item(
        "scale",
        match case.scale {
            Some(s) => Some(array(py, &[1], vec![s])?),
            None => None,
        },
    )?;
    dict.set_item("eps", f64::from(setup.norm.eps()))?;
    put_reference(py, &dict, d, &xs, &setup.scale_shape(rows), &want)?;
    Ok(dict)
}

/// The bits of the residual array the callable updated in place (uint16
/// patterns, or float32 bits), or a sentence saying what it holds instead.
fn read_residual(d: Dtype, a: &Bound<'_, PyAny>) -> Result<Vec<u32>, String> {
    match d {
        Dtype::F32 => a
            .extract::<PyReadonlyArrayDyn<'_, f32>>()
            .map(|r| {
                crate::arrays::to_vec(&r)
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            })
            .map_err(|e| e.to_string()),
        _ => a
            .extract::<PyReadonlyArrayDyn<'_, u16>>()
            .map(|r| {
                crate::arrays::to_vec(&r)
                    .iter()
                    .map(|&v| u32::from(v))
                    .collect()
            })
            .map_err(|e| e.to_string()),
    }
}

/// A code set as a failure shows it.
fn code_set(lo: u8, hi: u8) -> String {
    if lo == hi {
        format!("0x{lo:02X} (decided)")
    } else if (lo ^ hi) & 0x80 != 0 {
        "any code but NaN's (the scale's interval holds 0)".into()
    } else {
        format!("within 0x{lo:02X}..0x{hi:02X} in magnitude")
    }
}

/// The failure lines of a judged case.
#[allow(clippy::too_many_arguments)]
fn failure_lines(
    r: &mut String,
    d: Dtype,
    v: &Verdict,
    want: &Reference,
    c: &Case,
    got: (&[u8], Option<&[f32]>, &[u32]),
    hidden: usize,
    setup: &Setup,
    inv: &[Option<oracle::rms_norm::InvRms>],
) {
    let span = |row: usize| match setup.granularity {
        Granularity::Tensor => 0,
        Granularity::Token => row,
    };
    if let Some(at) = v.first {
        let (row, col) = (at / hidden, at % hidden);
        let k = span(row);
        let res = if c.residual.is_empty() {
            String::new()
        } else {
            format!(", residual {}", value(c.residual[at]))
        };
        let ir = inv[row]
            .map(|i| format!("[{}, {}]", value(i.lo), value(i.hi)))
            .unwrap_or_else(|| "(none)".into());
        let _ = writeln!(
            r,
            "  q: {} of {} codes not admitted ({} of {} decided ones differ, {} of {} bounded ones outside); first at [row {row}, col {col}]{}: got 0x{:02X}, want {}; the value quantized ({}) in [{}, {}], the scale in [{}, {}]; input x {}{res}, weight {}; the row's inverse RMS in {ir}",
            v.decided_wrong + v.bounded_outside,
            v.n,
            v.decided_wrong,
            v.decided,
            v.bounded_outside,
            v.bounded,
            if col >= hidden / 4 * 4 { " (past the last whole vector of 4)" } else { "" },
            got.0.get(at).copied().unwrap_or(0),
            code_set(want.code_lo[at], want.code_hi[at]),
            setup.input.name(),
            value(want.v_lo[at]),
            value(want.v_hi[at]),
            value(want.scale_lo[k]),
            value(want.scale_hi[k]),
            value(c.x[at]),
            value(c.weight[col]),
        );
    }
    if let (Some(k), Some(s)) = (v.first_scale, got.1) {
        let _ = writeln!(
            r,
            "  s: {} of {} scales not admitted ({} decided); first at {}: got {}, want {}",
            v.scales_wrong,
            v.scales,
            v.scales_decided,
            match setup.granularity {
                Granularity::Tensor => "the tensor's".to_string(),
                Granularity::Token => format!("row {k}"),
            },
            s.get(k).map_or_else(|| "nothing".into(), |&g| value(g)),
            if want.scale_decided(k) {
                format!("{} (decided)", value(want.scale_lo[k]))
            } else {
                format!(
                    "within [{}, {}]",
                    value(want.scale_lo[k]),
                    value(want.scale_hi[k])
                )
            },
        );
    }
    if let Some(at) = v.first_residual {
        let _ = writeln!(
            r,
            "  residual (written back in place): {} of {} elements differ; first at [row {}, col {}]: got {}, want {} = R(x + residual), x {}, residual {}",
            v.residual_differ,
            want.residual.len(),
            at / hidden,
            at % hidden,
            got.2
                .get(at)
                .map_or_else(|| "nothing".into(), |&b| shown(d, b)),
            shown(d, d.encode(want.residual[at])),
            value(c.x[at]),
            value(c.residual[at]),
        );
    }
}

/// check_rms_norm_fp8_quant(fn, arithmetic="round_then_weight", quantize_input="rounded", rule="divide", granularity="tensor", static=True, residual=False, scale_ub=None, dtype="bfloat16", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None, eps=1e-6, sum_rounding="dtype", rsqrt_ulps=2, min_scale=MIN_SCALING_FACTOR) -> CheckReport
///
/// Runs `fn`, an RMSNorm (with `residual`, a fused add + RMSNorm)
/// followed by e4m3 quantization, through the arms `RAND` (normal rows,
/// weights of either sign), `EXACT` (small integers times a power of two:
/// the sum of squares exact in every order, so nearly every code is
/// decided), `TIES` (values whose rounded reading sits exactly on an e4m3
/// rounding midpoint times the scale, their float32 reading to one side:
/// `"rounded"` and `"f32"` part there, and the division and the
/// reciprocal of a scale of 7 times a power of two), `AMAX` (one element
/// per row six to twelve times the rest, at the tail, negative only or at
/// both signs: it codes ±448 and decides a dynamic scale; a static scale
/// it saturates), `UB` (rows over and under `scale_ub`), `ZERO` (zero and
/// tiny rows: the floor) and `RESIDUAL` (with the residual: sums that
/// cancel, tie in the dtype, or round), and judges it against
/// `rms_norm_fp8_quant`: every code within its set, bit for bit where the
/// set is one code; every scale (dynamic) within its interval, bit for bit
/// where it is one value; with `residual`, the residual written back bit
/// for bit. By default every arm the declaration can run (UB with a
/// `scale_ub`, RESIDUAL with the residual).
///
/// The declaration: the norm as `check_rms_norm` takes it (`arithmetic`,
/// `eps`, `rsqrt_ulps`, `sum_rounding`, `dtype`); `quantize_input`,
/// `"rounded"` (the normalized element rounded to `dtype`, then
/// quantized: the unfused `rms_norm` then quantizer, and vLLM's fused
/// kernels, which round `out_norm` to the model dtype) or `"f32"` (the
/// float32 product quantized: a fused kernel that keeps it, as
/// FlashInfer's `rmsnorm_quant` form); `rule` (`check_fp8_scaled_quant`'s
/// rules: `"divide"`, `"reciprocal"`, `"torch_divide"`, ...); `static`
/// (a per-tensor scale the case draws and hands over) or dynamic (one
/// scale per `granularity` from the amax of the values quantized, bounded
/// by `scale_ub`, floored at `min_scale`, vLLM's `1/(448*512)`). vLLM's
/// `rms_norm_static_fp8_quant` and `fused_add_rms_norm_static_fp8_quant`:
/// `round_then_weight`, `"rounded"`, `"reciprocal"`, static, the fused
/// add's `sum_rounding="dtype"`; `rms_norm_dynamic_per_token_quant`:
/// `round_then_weight`, `"rounded"`, `"divide"`, `granularity="token"`,
/// `static=False`, the residual's `sum_rounding="f32"`.
///
/// The callable takes its inputs, then its outputs: `fn(x, weight, scale,
/// eps, q)` (static), `fn(x, weight, eps, q, s)` (dynamic), with the
/// residual second, `fn(x, residual, weight, ...)`. `x`, `residual`
/// `[rows, hidden]` and `weight` `[hidden]` are uint16 bit patterns of
/// `dtype` (numpy has no bfloat16), or float32; `scale` float32 `[1]`;
/// `eps` a float (the declared eps rounded to float32); `q` uint8 `[rows,
/// hidden]` (e4m3 codes, handed filled with 0x7F, the NaN code) and `s`
/// float32 `[1]` or `[rows, 1]` (filled with NaN). It writes them and
/// returns None, or returns them (`q`, or `(q, s)`); a callable that
/// takes the inputs alone returns them. The residual is updated in place
/// (vLLM's ops: `residual <- x + residual` rounded to the dtype) and read
/// back from the array handed; every other input must be left as given.
/// A kernel that refuses a shape raises `kernel_oracle.Refused`.
///
/// Each row names every known declaration (what is quantized x the rule:
/// static, divide and reciprocal; dynamic, each rule at the declared floor)
/// whose sets admit the output; the summary, those every compared case
/// admitted. Not decidable: read in float32 under `"f32"` and `"gemma"`,
/// a value is a few binary32 ulps wide, so a division and a multiply by
/// the reciprocal (an ulp apart) cannot be told apart; the scale itself is
/// not (rounded and dynamic, most scales are decided).
///
/// Errors: `ValueError`, before any call, for an unknown arithmetic,
/// quantize_input, rule, granularity, sum rounding, dtype or arm, a bad
/// eps or `rsqrt_ulps`, `static=True` per token or under a rule that
/// derives its own scale or with `scale_ub`, `scale_ub` per tensor or not
/// finite and positive, a bad `min_scale`, an arm the declaration cannot
/// run (UB without `scale_ub`, RESIDUAL without the residual), a bad shape
/// or one over the caps (2^22 elements, hidden 2^17).
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, arithmetic = "round_then_weight", quantize_input = "rounded", rule = "divide", granularity = "tensor", r#static = true, residual = false, scale_ub = None, dtype = "bfloat16", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None, eps = 1e-6, sum_rounding = "dtype", rsqrt_ulps = 2, min_scale = MIN_SCALING_FACTOR))]
#[allow(clippy::too_many_arguments)]
fn check_rms_norm_fp8_quant<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    arithmetic: &str,
    quantize_input: &str,
    rule: &str,
    granularity: &str,
    r#static: bool,
    residual: bool,
    scale_ub: Option<f32>,
    dtype: &str,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
    eps: f64,
    sum_rounding: &str,
    rsqrt_ulps: i64,
    min_scale: f32,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let rsqrt_ulps: u32 = count("rsqrt_ulps", rsqrt_ulps, 0)?;
    let setup = Setup::new(
        arithmetic,
        quantize_input,
        rule,
        granularity,
        r#static,
        residual,
        scale_ub,
        dtype,
        eps,
        sum_rounding,
        rsqrt_ulps,
        min_scale,
    )?;
    let d = setup.norm.dtype();
    let shapes = shapes.unwrap_or_else(|| RMS_NORM_FP8_QUANT_SHAPES.to_vec());
    let arms = match arms {
        Some(_) => arms_or_all(arms, &Arm::ALL, Arm::parse)?,
        None => setup.default_arms(),
    };
    for &dims in &shapes {
        for &arm in &arms {
            setup
                .spec(dims, arm, Some(0))
                .valid()
                .map_err(PyValueError::new_err)?;
        }
    }
    let fname = callable_name(&r#fn, name);
    let is_static = setup.scaling == Scaling::Static;
    // Inputs: x, [residual], weight, [scale], eps.
    let n_in = 3 + usize::from(residual) + usize::from(is_static);
    let kernel = as_called(py, &r#fn, n_in)?;
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "rms_norm_fp8_quant".into(),
        ..CheckReport::default()
    };
    let kw = setup.kw(arithmetic);
    let declared_label = label(setup.input, setup.rule);
    let scaling_about = match setup.scaling {
        Scaling::Static => "static per-tensor scale".to_string(),
        Scaling::Dynamic {
            min_scale,
            scale_ub,
        } => format!(
            "dynamic per {}, min_scale {min_scale:e}{}",
            if setup.granularity == Granularity::Token {
                "token"
            } else {
                "tensor"
            },
            scale_ub
                .map(|u| format!(", scale_ub {u:e}"))
                .unwrap_or_default()
        ),
    };
    let about = format!(
        "{}, {}{}, eps {:e} (float32), {scaling_about}, declared: {declared_label} ({})",
        d.name(),
        setup.norm.arithmetic().name(),
        if residual {
            format!(", fused add, {}_sum", setup.norm.sum().name())
        } else {
            String::new()
        },
        setup.norm.eps(),
        setup.rule.formula()
    );
    o.row(&format!("check_rms_norm_fp8_quant({fname}), {about}"))?;
    o.row(&format!(
        "{:<12} {:>8} {:>18} {:>15} {:>8} {:>8} {:>10} {:>10} {:>9}  verdict  matches",
        "rows,hidden",
        "arm",
        "seed",
        "decided",
        "bounded",
        "outside",
        "scales",
        "res_differ",
        "call_ms"
    ))?;
    let mut admitted = Admitted::default();
    let eps_arg = PyFloat::new(py, f64::from(setup.norm.eps())).into_any();
    for &dims in &shapes {
        let xs = [dims.0, dims.1];
        let s_shape = setup.scale_shape(dims.0);
        for &arm in &arms {
            let base = Spec::base_seed(dims, residual, setup.granularity, arm);
            for seed in seeds.for_case(base) {
                let sp = setup.spec(dims, arm, Some(seed));
                let shape = sp.valid().map_err(PyValueError::new_err)?;
                let case = py.detach(|| sp.generate()).map_err(PyValueError::new_err)?;
                let decl =
                    declared(&sp, &case, setup.input, setup.rule).map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, &decl))
                    .map_err(value_error)?;
                let (hx, hr, hw) = (
                    Held::new(d, &case.x),
                    Held::new(d, &case.residual),
                    Held::new(d, &case.weight),
                );
                let scale_v: Vec<f32> = case.scale.into_iter().collect();
                let x_in = hx.input(py, &xs)?;
                let w_in = hw.input(py, &[dims.1])?;
                // The residual is updated in place: handed, not compared.
                let res_arr = if residual {
                    Some(hr.input(py, &xs)?.array())
                } else {
                    None
                };
                let mut args = vec![x_in.array()];
                args.extend(res_arr.iter().cloned());
                args.push(w_in.array());
                let mut inputs = vec![("x", x_in), ("weight", w_in)];
                if is_static {
                    let sa = array(py, &[1], scale_v.clone())?;
                    args.push(sa.clone().into_any());
                    inputs.push(("scale", Input::F32(sa, &scale_v)));
                }
                args.push(eps_arg.clone());
                let n = dims.0 * dims.1;
                let mut outs: Vec<(&[usize], OutKind)> = vec![(&xs, OutKind::U8)];
                let mut arrays = vec![array(py, &xs, vec![0x7Fu8; n])?.into_any()];
                if !is_static {
                    outs.push((&s_shape, OutKind::F32));
                    arrays.push(OutKind::F32.array(py, &s_shape, &Fill::new(&inputs))?);
                }
                args.extend(arrays.iter().cloned());
                let (called, ms) = call_args(py, &kernel, args, &inputs, &outs, arrays)?;
                let a = arm.name();
                let dims_s = format!("{},{}", dims.0, dims.1);
                let row = format!("{dims_s:<12} {a:>8} 0x{seed:016x}");
                let dims_py = format!("({}, {})", dims.0, dims.1);
                let repro = format!(
                    "kernel_oracle.check_rms_norm_fp8_quant({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL rms_norm_fp8_quant: (rows, hidden) = {dims_py} arm={a} seed=0x{seed:016x}, {about}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let q = got[0].u8();
                let s = (!is_static).then(|| got[1].f32());
                let (got_res, res_note) = match &res_arr {
                    Some(arr) => match read_residual(d, arr) {
                        Ok(b) => (b, None),
                        Err(e) => (Vec::new(), Some(e)),
                    },
                    None => (Vec::new(), None),
                };
                let v = Verdict::judge(d, &want, q, s, &got_res);
                let found = py
                    .detach(|| identify(&shape, &sp, &case, q, s, &got_res))
                    .map_err(PyValueError::new_err)?;
                admitted.add(&found, v.decided, v.n);
                let matches = names_or(&found, "; ", "none known");
                let pass = v.pass() && written.is_empty() && res_note.is_none();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>8} {:>8} {:>10} {:>10} {ms:>9.2}  {}  {matches}",
                    v.decided,
                    v.n,
                    v.bounded,
                    v.decided_wrong + v.bounded_outside,
                    if is_static {
                        "-".to_string()
                    } else {
                        format!("{}/{}", v.scales - v.scales_wrong, v.scales)
                    },
                    if residual {
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
                if let Some(e) = &res_note {
                    let _ = writeln!(r, "  the residual array could not be read back: {e}");
                }
                let inv = inv_rms_rows(&shape, &sp, &case);
                failure_lines(
                    &mut r,
                    d,
                    &v,
                    &want,
                    &case,
                    (q, s, &got_res),
                    dims.1,
                    &setup,
                    &inv,
                );
                let case_call = format!(
                    "kernel_oracle.rms_norm_fp8_quant_case({}, {}, \"{a}\", seed=0x{seed:016x}, {kw})",
                    dims.0, dims.1
                );
                failure_tail(&mut r, &matches, &repro, &case_call);
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let known: Vec<String> = QuantizeInput::ALL
        .into_iter()
        .flat_map(|i| {
            known_rules(setup.scaling)
                .into_iter()
                .map(move |r| label(i, r))
        })
        .collect();
    rep.finish(
        o,
        &format!("known: {}; {}", known.join(", "), admitted.summary()),
    )
}

/// Adds the fused RMSNorm + FP8 quantization oracle, its check, its case
/// and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add(
        "RMS_NORM_FP8_QUANT_SHAPES",
        RMS_NORM_FP8_QUANT_SHAPES.to_vec(),
    )?;
    m.add_function(wrap_pyfunction!(rms_norm_fp8_quant, m)?)?;
    m.add_function(wrap_pyfunction!(check_rms_norm_fp8_quant, m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm_fp8_quant_case, m)?)?;
    Ok(())
}
