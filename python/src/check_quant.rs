//! Per-token-group e4m3 activation quantizers (`oracle::fp8_quant`): the
//! quantizer itself under a declared scale rule, and
//! `check_fp8_group_quant`, which runs any Python quantizer through the
//! case library's cases (`kernel_oracle::fp8_quant`) and judges its codes
//! and scales bit for bit, naming every known rule its output matches.
//! Likewise for the per-tensor and per-token quantizers that run before a
//! per-tensor or rowwise FP8 GEMM: `quantize_fp8_scaled`,
//! `fp8_scaled_quant_case` and `check_fp8_scaled_quant`.

use crate::arrays::{array, dims, to_vec, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, names_or, value, CheckReport,
    Input, Out, OutKind, Seeds,
};
use kernel_oracle::fp8_quant::{
    identify, nan_rule, reference, rule_label, rule_name, scaled_identify, scaled_known,
    scaled_label, scaled_reference, Arm, ScaledArm, ScaledSpec, Spec, Verdict, KNOWN,
    SCALED_SHAPES,
};
use numpy::PyReadonlyArrayDyn;
use oracle::fp8_quant::{
    quantize_groups, quantize_scaled, Granularity, GroupScale, ScaleSource, ScaledRule, Ue8m0Ceil,
    MIN_SCALING_FACTOR,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The rule named `rule` (`"v2"`, `"divide"`, `"reciprocal"`, `"ue8m0"`,
/// `"ue8m0_exact"`, any case; [`rule_name`]) at floor `eps` (unused by
/// v2).
fn parse_rule(rule: &str, eps: f32) -> PyResult<GroupScale> {
    let lower = rule.to_ascii_lowercase();
    if lower != "v2" && !(eps.is_finite() && eps >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "eps = {eps}: it must be finite and at least 0"
        )));
    }
    match lower.as_str() {
        "v2" => Ok(GroupScale::V2),
        "divide" => Ok(GroupScale::Divide { eps }),
        "reciprocal" => Ok(GroupScale::Reciprocal { eps }),
        "ue8m0" => Ok(GroupScale::Ue8m0 {
            eps,
            ceil: Ue8m0Ceil::Log2f,
        }),
        "ue8m0_exact" => Ok(GroupScale::Ue8m0 {
            eps,
            ceil: Ue8m0Ceil::Exact,
        }),
        _ => Err(PyValueError::new_err(format!(
            "rule {rule:?}: expected \"v2\", \"divide\", \"reciprocal\", \"ue8m0\" or \"ue8m0_exact\""
        ))),
    }
}

/// A verdict's cells in a row: codes differing of all (each count `w`
/// wide), scales differing of all, the most e4m3 steps and scale ulps.
fn verdict_cells(v: &Verdict, w: usize) -> String {
    format!(
        "{:>w$}/{:<w$} {:>5}/{:<7} {:>6} {:>6}",
        v.codes.1,
        v.codes.0,
        v.scales.n - v.scales.identical,
        v.scales.n,
        v.max_code_steps,
        v.scales.max_ulp
    )
}

/// A failing verdict's counts and its first differing code, with its
/// element of `x` (`[m, k]`).
fn code_lines(r: &mut String, v: &Verdict, x: &[f32], k: usize) {
    let _ = writeln!(
        r,
        "  codes: {} of {} differ (at most {} e4m3 steps); scales: {} of {} differ (at most {} ulps)",
        v.codes.1,
        v.codes.0,
        v.max_code_steps,
        v.scales.n - v.scales.identical,
        v.scales.n,
        v.scales.max_ulp
    );
    if let Some((j, c, g, w)) = v.first_code {
        let _ = writeln!(
            r,
            "  first code at (row {j}, column {c}): got 0x{g:02X}, want 0x{w:02X}; x = {}",
            value(x[j * k + c])
        );
    }
}

/// quantize_fp8_groups(x, group=128, rule="divide", eps=1e-10) -> (q: uint8[m, k], s: float32[m, ceil(k/group)])
///
/// The per-token-group e4m3 quantizer of `oracle::fp8_quant` on `x`
/// (float32 `[m, k]`): one scale per `group` consecutive columns of a row
/// (a short last group when `group` does not divide `k`), under `rule`:
/// - `"v2"`: seed 000's (`s = amax / 448`, codes of `x * (448 / amax)`, an
///   all-zero group `s = 0` with zero codes);
/// - `"divide"`: vLLM's and SGLang's `per_token_group_quant_8bit` (`amax`
///   from `eps`, `s = amax / 448`, codes of `clamp(x / s, -448, 448)`);
/// - `"reciprocal"`: `"divide"` with `s = amax * fl(1/448)`, as torch
///   computes `amax / 448.0` on a CUDA tensor (a multiply by the divisor's
///   binary32 reciprocal): the pure-torch quantizers;
/// - `"ue8m0"`: `s` floored at 1e-10 and rounded up to a power of two
///   through a correctly rounded binary32 `log2`, `2^ceil(log2f(s))`
///   (vLLM's CUDA `scale_ue8m0`, DeepGEMM's torch `use_ue8m0`, Triton's
///   `tl.log2`: a scale 1, 2 or 3 ulps above `2^e` keeps `2^e` for `|e|`
///   from 4, 8 or 16 up, but `e` = -4, -8, -16), codes as `"divide"`;
/// - `"ue8m0_exact"`: the same with the exact ceiling `2^ceil(log2(s))`
///   (the bit forms that raise the exponent of any scale with a non-zero
///   fraction: DeepEP's `fast_log2_ceil`, DeepSeek's reference
///   `fast_round_scale`).
///
/// Codes are e4m3 (OCP OFP8), round to nearest even, saturating.
///
/// Errors: `ValueError` for an unknown rule, an `eps` that is NaN,
/// infinite or negative, a zero group or an `x` that is not 2-D.
#[pyfunction]
#[pyo3(signature = (x, group = 128, rule = "divide", eps = 1e-10))]
fn quantize_fp8_groups<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    group: usize,
    rule: &str,
    eps: f32,
) -> PyResult<crate::fp8::Quantized<'py>> {
    let rule = parse_rule(rule, eps)?;
    let d = dims("x", &x, 2)?;
    let (m, k) = (d[0], d[1]);
    let xv = to_vec(&x);
    let groups = if group == 0 { 0 } else { k.div_ceil(group) };
    let mut q = vec![0u8; m * k];
    let mut s = vec![0f32; m * groups];
    quantize_groups(&xv, k, group, rule, &mut q, &mut s).map_err(value_error)?;
    Ok((array(py, &[m, k], q)?, array(py, &[m, groups], s)?))
}

/// The shapes `(m, k)` a check runs by default: one group, a ragged `k`
/// (a short last group of 75: most field quantizers refuse it; not a
/// multiple of 4, 8 or 16, so a vectorized loop without its tail loop
/// shows), DeepSeek-V3's hidden size 7168 for one token and for 16, and
/// a 64 x 4096 batch.
pub const QUANT_SHAPES: [(usize, usize); 5] =
    [(1, 128), (5, 203), (1, 7168), (16, 7168), (64, 4096)];

/// fp8_group_quant_case(m, k, arm, group=128, seed=None, rule="divide", eps=1e-10) -> dict
///
/// One case of `check_fp8_group_quant` as new arrays: `x` (float32 `[m,
/// k]`), and the oracle's `q` and `s` under `rule`. `seed` None: the
/// check's first seed.
///
/// Errors: `ValueError` for an unknown arm or rule, or a zero dimension.
#[pyfunction]
#[pyo3(signature = (m, k, arm, group = 128, seed = None, rule = "divide", eps = 1e-10))]
#[allow(clippy::too_many_arguments)]
fn fp8_group_quant_case<'py>(
    py: Python<'py>,
    m: usize,
    k: usize,
    arm: &str,
    group: usize,
    seed: Option<u64>,
    rule: &str,
    eps: f32,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let rule = parse_rule(rule, eps)?;
    let s = Spec {
        m,
        k,
        group,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(m, k, group, arm)),
    };
    let x = s.generate().map_err(PyValueError::new_err)?;
    let (q, sc) = reference(&s, &x, rule).map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("x", array(py, &[m, k], x)?)?;
    dict.set_item("q", array(py, &[m, k], q)?)?;
    dict.set_item("s", array(py, &[m, s.groups()], sc)?)?;
    Ok(dict)
}

/// check_fp8_group_quant(quant, rule="divide", eps=1e-10, group=128, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `quant`, a per-token-group e4m3 activation quantizer, through the
/// arms `RAND` (groups at magnitudes 1e-3 to 1e3), `ZERO` (all-zero,
/// tiny, one-hot groups: the amax floor), `TIES` (scaled elements within
/// an ulp of e4m3 rounding midpoints: a multiply by the reciprocal and a
/// division part there) and `POW2` (`amax / 448` bit for bit at a power
/// of two, 1 to 3 ulps below one, or 1 to 3 ulps above one, half the
/// groups where `log2f` rounds back to the power: `"ue8m0"` and
/// `"ue8m0_exact"` part there and nowhere else), and judges its codes and
/// scales bit for bit against `quantize_fp8_groups(x, group, rule, eps)`.
///
/// The callable: `quant(x, q, s)`, with `x` float32 `[m, k]`, `q` uint8
/// `[m, k]` (e4m3 codes; handed filled with 0x7F, the NaN code, which no
/// case produces) and `s` float32 `[m, ceil(k / group)]` (filled with
/// NaN); writing both and returning None, or returning `(q, s)`. torch
/// users: `q[...] = y.view(torch.uint8).cpu().numpy()`. A quantizer that
/// needs `k % group == 0` raises `kernel_oracle.Refused` on the ragged
/// shape.
///
/// Each row names the known rules (`v2`, `divide`, `ue8m0` and
/// `ue8m0_exact` at floors 1e-10 and 1e-4, `reciprocal` at 1e-10) the
/// output matches bit for bit,
/// and, where it differs from the declared one, how far: codes in e4m3
/// steps, scales in f32 ulps (a division compiled with `--use_fast_math`,
/// or Triton's `/`, which is PTX's approximate `div.full.f32`, shows as
/// scales one ulp off and codes one step off at rounding ties).
///
/// Errors: `ValueError` for an unknown rule or arm, an `eps` that is NaN,
/// infinite or negative, a `group` below 1, a zero dimension or a case
/// over 2^26 elements, before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (quant, rule = "divide", eps = 1e-10, group = 128, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fp8_group_quant<'py>(
    py: Python<'py>,
    quant: Bound<'py, PyAny>,
    rule: &str,
    eps: f32,
    group: i64,
    shapes: Option<Vec<(usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&quant, "quant")?;
    let seeds = Seeds::new(seeds, trials)?;
    let group: usize = count("group", group, 1)?;
    let rule = parse_rule(rule, eps)?;
    let rule_name = rule_name(&rule);
    let shapes = shapes.unwrap_or_else(|| QUANT_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &(m, k) in &shapes {
        Spec {
            m,
            k,
            group,
            arm: Arm::Rand,
            seed: 0,
        }
        .valid()
        .map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&quant, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "fp8_group_quant".into(),
        ..CheckReport::default()
    };
    let declared = rule_label(&rule);
    out.row(&format!(
        "check_fp8_group_quant({fname}), group {group}, declared: {declared}, {}",
        rule.name()
    ))?;
    out.row(&format!(
        "{:<12} {:>5} {:>18} {:>15} {:>13} {:>6} {:>6} {:>9}  verdict  matches",
        "m,k", "arm", "seed", "codes differ", "scales differ", "steps", "ulps", "call_ms"
    ))?;
    for &(m, k) in &shapes {
        for &arm in &arms {
            let base = Spec::base_seed(m, k, group, arm);
            for seed in seeds.for_case(base) {
                let sp = Spec {
                    m,
                    k,
                    group,
                    arm,
                    seed,
                };
                let x = sp.generate().map_err(PyValueError::new_err)?;
                let want = reference(&sp, &x, rule).map_err(PyValueError::new_err)?;
                let inputs = [("x", Input::F32(array(py, &[m, k], x.clone())?, &x))];
                let (called, ms) = call_typed(
                    py,
                    &quant,
                    Vec::new(),
                    &inputs,
                    &[(&[m, k], OutKind::U8), (&[m, sp.groups()], OutKind::F32)],
                )?;
                let a = arm.name();
                let row = format!("{:<12} {a:>5} 0x{seed:016x}", format!("{m},{k}"));
                let eps_kw = match rule {
                    GroupScale::V2 => String::new(),
                    _ => format!(", eps={eps:e}"),
                };
                let repro = format!(
                    "kernel_oracle.check_fp8_group_quant({fname}, rule=\"{rule_name}\"{eps_kw}, group={group}, shapes=[({m}, {k})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL fp8_group_quant: m={m} k={k} group={group} arm={a} seed=0x{seed:016x}, declared: {declared}"
                );
                let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)? else {
                    continue;
                };
                let (q, s) = (got[0].u8(), got[1].f32());
                let v = Verdict::judge(&sp, q, s, &want);
                let matches: Vec<String> = identify(&sp, &x, q, s).iter().map(rule_label).collect();
                let pass = v.pass() && written.is_empty();
                out.row(&format!(
                    "{row} {} {ms:>9.2}  {}  {}",
                    verdict_cells(&v, 7),
                    if pass { "PASS" } else { "FAIL" },
                    names_or(&matches, ", ", "none known")
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if !v.pass() {
                    code_lines(&mut r, &v, &x, k);
                    if let Some((i, got_s, want_s, _)) = v.scales.first_diff {
                        let (j, g) = (i / sp.groups(), i % sp.groups());
                        let _ = writeln!(
                            r,
                            "  first scale at (row {j}, group {g}): got {}, want {}",
                            value(got_s),
                            value(want_s)
                        );
                    }
                    let _ = writeln!(
                        r,
                        "  the output matches: {}",
                        names_or(&matches, ", ", "no known rule")
                    );
                }
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's codes and scales:\n  kernel_oracle.fp8_group_quant_case({m}, {k}, \"{a}\", group={group}, seed=0x{seed:016x}, rule=\"{rule_name}\"{eps_kw})"
                );
                rep.fail(&mut out, r, repro)?;
            }
        }
    }
    let known: Vec<String> = KNOWN.iter().map(rule_label).collect();
    rep.finish(out, &format!("known rules: {}; ", known.join(", ")))
}

// ---------------------------------------------------------------------------
// Per-tensor and per-token scaled quantizers.
// ---------------------------------------------------------------------------

/// The arguments of a scaled quantizer, checked: `granularity`
/// (`"tensor"`, `"token"`), `rule` (a [`ScaledRule`] label), a static
/// `scale` (per tensor, `divide` or `reciprocal`), `scale_ub` (dynamic,
/// per token) and `min_scale`.
fn scaled_setup(
    granularity: &str,
    scale: Option<f32>,
    rule: &str,
    scale_ub: Option<f32>,
    min_scale: f32,
) -> PyResult<(Granularity, ScaledRule, ScaleSource)> {
    let bad = |m: String| Err(PyValueError::new_err(m));
    let g = match granularity.to_ascii_lowercase().as_str() {
        "tensor" => Granularity::Tensor,
        "token" => Granularity::Token,
        _ => {
            return bad(format!(
                "granularity {granularity:?}: expected \"tensor\" or \"token\""
            ))
        }
    };
    let Some(r) = ScaledRule::ALL
        .into_iter()
        .find(|r| r.label().eq_ignore_ascii_case(rule))
    else {
        return bad(format!(
            "rule {rule:?}: expected \"divide\", \"reciprocal\", \"torch_divide\", \"torch_reciprocal\", \"to_float8\" or \"torchao\""
        ));
    };
    let positive = |v: f32| v.is_finite() && v > 0.0;
    let source = match scale {
        Some(s) => {
            if g == Granularity::Token {
                return bad("scale: a static scale is per tensor (vLLM's static_scaled_fp8_quant); granularity must be \"tensor\"".into());
            }
            if !positive(s) {
                return bad(format!("scale = {s}: it must be finite and positive"));
            }
            if !matches!(r, ScaledRule::Divide | ScaledRule::Reciprocal) {
                return bad(format!(
                    "rule {:?} derives its own scale: a static scale takes \"divide\" or \"reciprocal\"",
                    r.label()
                ));
            }
            if scale_ub.is_some() {
                return bad("scale_ub bounds a dynamic amax; a static scale takes none".into());
            }
            ScaleSource::Static(s)
        }
        None => {
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
            ScaleSource::Dynamic {
                min_scale,
                scale_ub,
            }
        }
    };
    Ok((g, r, source))
}

/// Refuses the NAN arm under a rule whose NaN semantics the oracle does
/// not model (the torch forms: [`nan_rule`]).
fn nan_arm_rule(arms: &[ScaledArm], rule: ScaledRule) -> PyResult<()> {
    if arms.contains(&ScaledArm::Nan) && !nan_rule(rule) {
        return Err(PyValueError::new_err(format!(
            "arm NAN takes rule \"divide\" or \"reciprocal\" (vLLM's CUDA kernels: the amax skips NaN, the clamp codes it +448); rule {:?} is a torch form, whose max and clamp propagate NaN",
            rule.label()
        )));
    }
    Ok(())
}

/// The shape of a scaled quantizer's scales: `[1]` per tensor, `[m, 1]`
/// per token (vLLM's).
fn scale_shape(g: Granularity, m: usize) -> Vec<usize> {
    match g {
        Granularity::Tensor => vec![1],
        Granularity::Token => vec![m, 1],
    }
}

/// quantize_fp8_scaled(x, granularity="tensor", scale=None, rule="divide", scale_ub=None, min_scale=MIN_SCALING_FACTOR) -> (q: uint8[m, k], s: float32[1] or [m, 1])
///
/// The per-tensor or per-token e4m3 quantizer of `oracle::fp8_quant::
/// quantize_scaled` on `x` (float32 `[m, k]`): one scale for the tensor
/// (`granularity="tensor"`; the static `scale` when given, else from the
/// amax of every element) or one per row (`"token"`, dynamic), under
/// `rule`:
/// - `"divide"`: `s = max(amax / 448, min_scale)`, codes of `x / s`
///   (vLLM's `dynamic_per_token_scaled_fp8_quant_kernel`,
///   `csrc/quantization/w8a8/fp8/common.cu`);
/// - `"reciprocal"`: the same `s`, codes of `x * fl(1/s)` (vLLM's
///   `scaled_fp8_quant_kernel`, run by `static_scaled_fp8_quant` and, after
///   `segmented_max_reduction`, `dynamic_scaled_fp8_quant`, with no floor:
///   `min_scale=0`);
/// - `"torch_divide"`: `s = max(amax * fl(1/448), min_scale)` (torch's
///   `amax / 448.0` on a CUDA tensor), codes of `x / s`;
/// - `"torch_reciprocal"`: that `s`, codes of `x * fl(1/s)` (vLLM's
///   `QuantFP8.forward_native`);
/// - `"to_float8"`: PyTorch's `to_float8` recipe: `r = fl(1 / max(amax,
///   1e-12)) * 448`, codes of `x * r`, scale written `fl(1 / r)`;
/// - `"torchao"`: torchao's float8 recipe (`amax_to_scale` in float64):
///   `r = f32(448 / max(f64(amax), 1e-12))`, codes of `x * r`, scale
///   written `fl(1 / r)`.
///
/// The amax is bounded by `scale_ub` first (per token, dynamic: vLLM's
/// `fminf(amax, *scale_ub)`); `min_scale` defaults to vLLM's
/// `min_scaling_factor`, `1 / (448 * 512)` (`to_float8` and `torchao`
/// ignore it). Every code is `fmaxf(-448, fminf(v, 448))` converted to
/// nearest even e4m3 (a NaN codes +448, as vLLM's CUDA kernels; torch's
/// `clamp` and `max` propagate NaN instead, which no case draws).
///
/// Errors: `ValueError` for an unknown granularity or rule, a static scale
/// per token or under a rule that derives its own, a scale or `scale_ub`
/// not finite and positive, `scale_ub` per tensor or with a static scale,
/// a `min_scale` NaN, infinite or negative, or an `x` that is not 2-D.
#[pyfunction]
#[pyo3(signature = (x, granularity = "tensor", scale = None, rule = "divide", scale_ub = None, min_scale = MIN_SCALING_FACTOR))]
fn quantize_fp8_scaled<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f32>,
    granularity: &str,
    scale: Option<f32>,
    rule: &str,
    scale_ub: Option<f32>,
    min_scale: f32,
) -> PyResult<crate::fp8::Quantized<'py>> {
    let (g, rule, source) = scaled_setup(granularity, scale, rule, scale_ub, min_scale)?;
    let d = dims("x", &x, 2)?;
    let (m, k) = (d[0], d[1]);
    let xv = to_vec(&x);
    let shape = scale_shape(g, m);
    let mut q = vec![0u8; m * k];
    let mut s = vec![0f32; shape.iter().product()];
    quantize_scaled(&xv, k, g, rule, source, &mut q, &mut s).map_err(value_error)?;
    Ok((array(py, &[m, k], q)?, array(py, &shape, s)?))
}

/// fp8_scaled_quant_case(m, k, arm, granularity="tensor", scale=None, rule="divide", scale_ub=None, min_scale=MIN_SCALING_FACTOR, seed=None) -> dict
///
/// One case of `check_fp8_scaled_quant` as new arrays: `x` (float32 `[m,
/// k]`), and the oracle's `q` and `s` under `rule`. `seed` None: the
/// check's first seed.
///
/// Errors: `ValueError` for an unknown arm, the arguments
/// `quantize_fp8_scaled` refuses, a zero dimension, `UB` without a
/// `scale_ub`, or `NAN` under a torch rule.
#[pyfunction]
#[pyo3(signature = (m, k, arm, granularity = "tensor", scale = None, rule = "divide", scale_ub = None, min_scale = MIN_SCALING_FACTOR, seed = None))]
#[allow(clippy::too_many_arguments)]
fn fp8_scaled_quant_case<'py>(
    py: Python<'py>,
    m: usize,
    k: usize,
    arm: &str,
    granularity: &str,
    scale: Option<f32>,
    rule: &str,
    scale_ub: Option<f32>,
    min_scale: f32,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = ScaledArm::parse(arm).map_err(PyValueError::new_err)?;
    let (g, rule, source) = scaled_setup(granularity, scale, rule, scale_ub, min_scale)?;
    nan_arm_rule(&[arm], rule)?;
    let sp = ScaledSpec {
        m,
        k,
        granularity: g,
        source,
        arm,
        seed: seed.unwrap_or_else(|| ScaledSpec::base_seed(m, k, g, arm)),
    };
    let x = sp.generate().map_err(PyValueError::new_err)?;
    let (q, sc) = scaled_reference(&sp, &x, rule, source).map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("x", array(py, &[m, k], x)?)?;
    dict.set_item("q", array(py, &[m, k], q)?)?;
    dict.set_item("s", array(py, &scale_shape(g, m), sc)?)?;
    Ok(dict)
}

/// check_fp8_scaled_quant(quant, granularity="tensor", scale=None, rule="divide", scale_ub=None, min_scale=MIN_SCALING_FACTOR, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `quant`, a per-tensor (`granularity="tensor"`; static when `scale`
/// is given) or per-token (`"token"`) e4m3 quantizer, through the arms
/// `RAND` (rows at magnitudes 1e-3 to 1e3), `ZERO` (all-zero and tiny
/// rows or tensors: the floor), `TIES` (scaled elements at e4m3 rounding
/// midpoints: a division and a multiply by the reciprocal part there),
/// `AMAX` (the amax at both signs, or only negative: codes exactly ±448;
/// under a static scale, elements beyond `448 * scale`: a missing clamp
/// gives NaN through torch's non-saturating cast), `TAIL` (the amax at the
/// very last element: a reduction that drops its tail; or at the first, in
/// odd rows and a tensor of odd `m`: one started at element 1), `UB` (rows
/// above `scale_ub`) and `NAN` (NaN at each span's first and last
/// element: vLLM's CUDA kernels skip it in the amax and code it +448;
/// only when named, under `divide` or `reciprocal`), and judges its codes
/// and scales bit for bit against `quantize_fp8_scaled(x, granularity,
/// scale, rule, scale_ub, min_scale)`. By default: RAND, TIES, AMAX for a
/// static scale; ZERO and TAIL too for a dynamic one; UB too with a
/// `scale_ub`.
///
/// The callable: `quant(x, q, s)`, with `x` float32 `[m, k]`, `q` uint8
/// `[m, k]` (e4m3 codes; handed filled with 0x7F, the NaN code, which the
/// oracle never writes) and `s` float32 `[1]` per tensor, `[m, 1]` per
/// token (filled with NaN; a static quantizer writes the scale it was
/// given); writing both and returning None, or returning `(q, s)`.
///
/// Each row names the known rules the output matches bit for bit (static:
/// `divide`, `reciprocal`; dynamic: each rule at vLLM's floor, and
/// `divide`, `reciprocal` with none) and, where it differs from the
/// declared one, how far: codes in e4m3 steps, scales in f32 ulps.
///
/// Errors: `ValueError`, before any call, for the arguments
/// `quantize_fp8_scaled` refuses, an unknown arm, `UB` without a
/// `scale_ub`, `NAN` under a torch rule, a zero dimension or a case over
/// 2^26 elements.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (quant, granularity = "tensor", scale = None, rule = "divide", scale_ub = None, min_scale = MIN_SCALING_FACTOR, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fp8_scaled_quant<'py>(
    py: Python<'py>,
    quant: Bound<'py, PyAny>,
    granularity: &str,
    scale: Option<f32>,
    rule: &str,
    scale_ub: Option<f32>,
    min_scale: f32,
    shapes: Option<Vec<(usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&quant, "quant")?;
    let seeds = Seeds::new(seeds, trials)?;
    let (g, rule, source) = scaled_setup(granularity, scale, rule, scale_ub, min_scale)?;
    let shapes = shapes.unwrap_or_else(|| SCALED_SHAPES.to_vec());
    let probe = |m, k, arm| ScaledSpec {
        m,
        k,
        granularity: g,
        source,
        arm,
        seed: 0,
    };
    let arms = match arms {
        Some(_) => arms_or_all(arms, &ScaledArm::ALL, ScaledArm::parse)?,
        None => probe(1, 1, ScaledArm::Rand).default_arms(),
    };
    nan_arm_rule(&arms, rule)?;
    for &(m, k) in &shapes {
        for &arm in &arms {
            probe(m, k, arm).valid().map_err(PyValueError::new_err)?;
        }
    }
    let fname = callable_name(&quant, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "fp8_scaled_quant".into(),
        ..CheckReport::default()
    };
    let declared = scaled_label(rule, source);
    let gname = match g {
        Granularity::Tensor => "tensor",
        Granularity::Token => "token",
    };
    let (kind, src_kw) = match source {
        ScaleSource::Static(s) => (
            format!("static scale {}", value(s)),
            format!(", scale={s:e}"),
        ),
        ScaleSource::Dynamic {
            min_scale,
            scale_ub,
        } => {
            let ub = scale_ub
                .map(|u| format!(", scale_ub={u:e}"))
                .unwrap_or_default();
            let ms = if min_scale == MIN_SCALING_FACTOR {
                String::new()
            } else {
                format!(", min_scale={min_scale:e}")
            };
            (
                format!(
                    "dynamic, min_scale {min_scale:e}{}",
                    ub.replace(", scale_ub=", ", scale_ub ")
                ),
                format!("{ub}{ms}"),
            )
        }
    };
    out.row(&format!(
        "check_fp8_scaled_quant({fname}), per {gname}, {kind}, declared: {declared} ({})",
        rule.formula()
    ))?;
    out.row(&format!(
        "{:<12} {:>5} {:>18} {:>17} {:>13} {:>6} {:>6} {:>9}  verdict  matches",
        "m,k", "arm", "seed", "codes differ", "scales differ", "steps", "ulps", "call_ms"
    ))?;
    let rule_kw = rule.label();
    for &(m, k) in &shapes {
        for &arm in &arms {
            let base = ScaledSpec::base_seed(m, k, g, arm);
            for seed in seeds.for_case(base) {
                let sp = ScaledSpec {
                    seed,
                    ..probe(m, k, arm)
                };
                let x = sp.generate().map_err(PyValueError::new_err)?;
                let want =
                    scaled_reference(&sp, &x, rule, source).map_err(PyValueError::new_err)?;
                let inputs = [("x", Input::F32(array(py, &[m, k], x.clone())?, &x))];
                let s_shape = scale_shape(g, m);
                let (called, ms) = call_typed(
                    py,
                    &quant,
                    Vec::new(),
                    &inputs,
                    &[(&[m, k], OutKind::U8), (&s_shape, OutKind::F32)],
                )?;
                let a = arm.name();
                let row = format!("{:<12} {a:>5} 0x{seed:016x}", format!("{m},{k}"));
                let repro = format!(
                    "kernel_oracle.check_fp8_scaled_quant({fname}, granularity=\"{gname}\", rule=\"{rule_kw}\"{src_kw}, shapes=[({m}, {k})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL fp8_scaled_quant: m={m} k={k} per {gname} arm={a} seed=0x{seed:016x}, declared: {declared}"
                );
                let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)? else {
                    continue;
                };
                let (q, s) = (got[0].u8(), got[1].f32());
                let v = Verdict::judge_codes(k, q, s, &want);
                let matches: Vec<String> = scaled_identify(&sp, &x, q, s)
                    .into_iter()
                    .map(|(r, src)| scaled_label(r, src))
                    .collect();
                let pass = v.pass() && written.is_empty();
                out.row(&format!(
                    "{row} {} {ms:>9.2}  {}  {}",
                    verdict_cells(&v, 8),
                    if pass { "PASS" } else { "FAIL" },
                    names_or(&matches, ", ", "none known")
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if !v.pass() {
                    code_lines(&mut r, &v, &x, k);
                    if let Some((i, got_s, want_s, _)) = v.scales.first_diff {
                        let _ = writeln!(
                            r,
                            "  first scale at {}: got {}, want {}",
                            match g {
                                Granularity::Tensor => "the tensor's".to_string(),
                                Granularity::Token => format!("row {i}"),
                            },
                            value(got_s),
                            value(want_s)
                        );
                    }
                    let _ = writeln!(
                        r,
                        "  the output matches: {}",
                        names_or(&matches, ", ", "no known rule")
                    );
                }
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's codes and scales:\n  kernel_oracle.fp8_scaled_quant_case({m}, {k}, \"{a}\", granularity=\"{gname}\", rule=\"{rule_kw}\"{src_kw}, seed=0x{seed:016x})"
                );
                rep.fail(&mut out, r, repro)?;
            }
        }
    }
    let known: Vec<String> = scaled_known(source)
        .into_iter()
        .map(|(r, src)| scaled_label(r, src))
        .collect();
    rep.finish(out, &format!("known rules: {}; ", known.join(", ")))
}

/// Adds the group quantizer, its check, its case and default shapes, and
/// the same for the per-tensor and per-token quantizers.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("QUANT_SHAPES", QUANT_SHAPES.to_vec())?;
    m.add("SCALED_QUANT_SHAPES", SCALED_SHAPES.to_vec())?;
    m.add("MIN_SCALING_FACTOR", MIN_SCALING_FACTOR)?;
    m.add_function(wrap_pyfunction!(quantize_fp8_scaled, m)?)?;
    m.add_function(wrap_pyfunction!(check_fp8_scaled_quant, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_scaled_quant_case, m)?)?;
    m.add_function(wrap_pyfunction!(quantize_fp8_groups, m)?)?;
    m.add_function(wrap_pyfunction!(check_fp8_group_quant, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_group_quant_case, m)?)?;
    Ok(())
}
