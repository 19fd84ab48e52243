//! Per-token-group e4m3 activation quantizers (`oracle::fp8_quant`): the
//! quantizer itself under a declared scale rule, and
//! `check_fp8_group_quant`, which runs any Python quantizer through the
//! case library's cases (`kernel_oracle::fp8_quant`) and judges its codes
//! and scales bit for bit, naming every known rule its output matches.

use crate::arrays::{array, dims, to_vec, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, names_or, seeds_for, value, CheckReport,
    Input, Out, OutKind,
};
use kernel_oracle::fp8_quant::{identify, reference, rule_label, Arm, Spec, Verdict, KNOWN};
use numpy::PyReadonlyArrayDyn;
use oracle::fp8_quant::{quantize_groups, GroupScale};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The rule named `rule` (`"v2"`, `"divide"`, `"reciprocal"`, `"ue8m0"`,
/// any case) at
/// floor `eps` (unused by v2).
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
        "ue8m0" => Ok(GroupScale::Ue8m0 { eps }),
        _ => Err(PyValueError::new_err(format!(
            "rule {rule:?}: expected \"v2\", \"divide\", \"reciprocal\" or \"ue8m0\""
        ))),
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
///   through a correctly rounded binary32 `log2` (vLLM's and DeepGEMM's
///   `use_ue8m0`), codes as `"divide"`.
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
/// (a short last group: most field quantizers refuse it), DeepSeek-V3's
/// hidden size 7168 for one token and for 16, and a 64 x 4096 batch.
pub const QUANT_SHAPES: [(usize, usize); 5] =
    [(1, 128), (5, 200), (1, 7168), (16, 7168), (64, 4096)];

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
/// division part there) and `POW2` (`amax / 448` at and just past a power
/// of two: UE8M0's ceiling), and judges its codes and scales bit for bit
/// against `quantize_fp8_groups(x, group, rule, eps)`.
///
/// The callable: `quant(x, q, s)`, with `x` float32 `[m, k]`, `q` uint8
/// `[m, k]` (e4m3 codes; handed filled with 0x7F, the NaN code, which no
/// case produces) and `s` float32 `[m, ceil(k / group)]` (filled with
/// NaN); writing both and returning None, or returning `(q, s)`. torch
/// users: `q[...] = y.view(torch.uint8).cpu().numpy()`. A quantizer that
/// needs `k % group == 0` raises `kernel_oracle.Refused` on the ragged
/// shape.
///
/// Each row names the known rules (`v2`, `divide` and `ue8m0` at floors
/// 1e-10 and 1e-4, `reciprocal` at 1e-10) the output matches bit for bit,
/// and, where it differs from the declared one, how far: codes in e4m3
/// steps, scales in f32 ulps (a division compiled with `--use_fast_math`,
/// or Triton's `/`, which is PTX's approximate `div.full.f32`, shows as
/// scales one ulp off and codes one step off at rounding ties).
///
/// Errors: `ValueError` for an unknown rule or arm, an `eps` that is NaN,
/// infinite or negative, a zero dimension or a case over 2^26 elements,
/// before any call.
#[pyfunction]
#[pyo3(signature = (quant, rule = "divide", eps = 1e-10, group = 128, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fp8_group_quant<'py>(
    py: Python<'py>,
    quant: Bound<'py, PyAny>,
    rule: &str,
    eps: f32,
    group: usize,
    shapes: Option<Vec<(usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: usize,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    let rule_name = rule.to_ascii_lowercase();
    let rule = parse_rule(rule, eps)?;
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
            for seed in seeds_for(base, &seeds, trials) {
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
                    "{row} {:>7}/{:<7} {:>5}/{:<7} {:>6} {:>6} {ms:>9.2}  {}  {}",
                    v.codes.1,
                    v.codes.0,
                    v.scales.n - v.scales.identical,
                    v.scales.n,
                    v.max_code_steps,
                    v.scales.max_ulp,
                    if pass { "PASS" } else { "FAIL" },
                    names_or(&matches, ", ", "none known")
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if !v.pass() {
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

/// Adds the group quantizer, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("QUANT_SHAPES", QUANT_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(quantize_fp8_groups, m)?)?;
    m.add_function(wrap_pyfunction!(check_fp8_group_quant, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_group_quant_case, m)?)?;
    Ok(())
}
