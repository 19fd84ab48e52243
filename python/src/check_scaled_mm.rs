//! The FP8 GEMM with row or tensor scales (`oracle::fp8_scaled_mm`): the
//! GEMM itself under a declared schedule, and `check_fp8_scaled_mm`, which
//! runs any Python scaled mm (torch `_scaled_mm`, a Triton or CUTLASS
//! kernel) through the case library's cases (`kernel_oracle::fp8_scaled_mm`)
//! and judges its output bit for bit, naming every known schedule (the
//! accumulation over k and the epilogue's association) it matches.

use crate::arrays::{array, dims, to_vec, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, first_output_line, gemm_bits_row,
    names_or, value, CheckReport, Input, Out, OutKind, Seeds,
};
use kernel_oracle::fp8_scaled_mm::{
    identify, known_accumulations, reference, schedule_label, within_caps, Arm, Case, Spec,
};
use numpy::PyReadonlyArrayDyn;
use oracle::fp8_scaled_mm::{Accumulation, Epilogue, Schedule};
use oracle::tensor_core::{SM90_MMA_SYNC, SM90_WGMMA};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The schedule named by `accumulation` (`"wgmma"`, `"mma_sync"`,
/// `"f32"`), `promote` (k per promotion, a positive multiple of 32, or
/// None: one chain) and `epilogue` (`"activation_first"`,
/// `"weight_first"`, `"scales_first"`).
fn parse_schedule(
    accumulation: &str,
    promote: Option<usize>,
    epilogue: &str,
) -> PyResult<Schedule> {
    let model = match accumulation {
        "wgmma" => Some(SM90_WGMMA),
        "mma_sync" => Some(SM90_MMA_SYNC),
        "f32" => None,
        _ => {
            return Err(PyValueError::new_err(format!(
                "accumulation {accumulation:?}: expected \"wgmma\", \"mma_sync\" or \"f32\""
            )))
        }
    };
    let accumulation = match (model, promote) {
        (Some(model), promote) => Accumulation::TensorCore { model, promote },
        (None, None) => Accumulation::F32,
        (None, Some(p)) => {
            return Err(PyValueError::new_err(format!(
                "promote={p} with accumulation \"f32\": promotion is a tensor-core accumulation's"
            )))
        }
    };
    let epilogue = match epilogue {
        "activation_first" => Epilogue::ActivationFirst,
        "weight_first" => Epilogue::WeightFirst,
        "scales_first" => Epilogue::ScalesFirst,
        _ => {
            return Err(PyValueError::new_err(format!(
                "epilogue {epilogue:?}: expected \"activation_first\" ((acc*d)*s), \"weight_first\" ((acc*s)*d) or \"scales_first\" (acc*(d*s))"
            )))
        }
    };
    let s = Schedule {
        accumulation,
        epilogue,
    };
    if !s.is_valid() {
        return Err(PyValueError::new_err(format!(
            "promote={promote:?}: it must be a positive multiple of 32 (the MMA's k)"
        )));
    }
    Ok(s)
}

/// fp8_scaled_mm(q, d, w, s, accumulation="wgmma", promote=None, epilogue="activation_first") -> float32[m, out_f]
///
/// The FP8 GEMM with one scale per activation row and one per weight row
/// (`oracle::fp8_scaled_mm::scaled_mm`): `y[j, i] = epilogue(acc, d[j],
/// s[i])`, `acc` the dot product of `q[j]` and `w[i]` over all `in_f`.
/// `q` uint8 `[m, in_f]` and `w` uint8 `[out_f, in_f]` are e4m3 codes (`w`
/// in `nn.Linear`'s layout: torch's `_scaled_mm(a, b)` takes `b = w.t()`),
/// `d` float32 `[m]`, `s` float32 `[out_f]` (a per-tensor scale repeated).
///
/// - `accumulation`: `"wgmma"` (the sm_90 FP8 tensor-core MMA, bit for
///   bit: `oracle::tensor_core`), `"mma_sync"` (ptxas's lowering of the
///   FP8 `mma.sync` on sm_90) or `"f32"` (binary32 in k order);
/// - `promote`: with a tensor-core accumulation, the k accumulated in the
///   MMA's chain before it is added into an f32 sum (a multiple of 32,
///   chunks counted from k = 0: DeepSeek-V3's and CUTLASS's default 128;
///   Triton's `max_num_imprecise_acc = p` with `p` dividing `BLOCK_K`, and
///   `p <= 32`, 0 included, is `promote=32`); None: one chain over all of
///   k (fast accumulation: Triton's sm_90 default, `2**30`);
/// - `epilogue`: `"activation_first"` `(acc * d) * s` (Triton's
///   `acc * scale_a * scale_b`), `"weight_first"` `(acc * s) * d`
///   (CUTLASS's `ScaleA * (ScaleB * Accum)`), `"scales_first"`
///   `acc * (d * s)`.
///
/// Returns the f32 output; a bf16 or f16 kernel's output is it rounded
/// once to nearest even (overflow to infinity). A NaN code in `q[j]` or
/// `w[i]` makes `y[j, i]` NaN under every schedule (rule
/// `SMM-OPERANDS`).
///
/// Errors: `ValueError` for an unknown accumulation or epilogue, a
/// `promote` that is not a positive multiple of 32 (or given with
/// `"f32"`), arrays that are not 2-D and 1-D as above or whose lengths
/// disagree, a zero dimension, or a GEMM past the check's caps (2^26
/// codes, 2^22 outputs, 2^28 multiply-adds), before any arithmetic.
///
/// Source: core's `oracle::fp8_scaled_mm` (rules `SMM-*`); the arithmetic
/// runs on all cores with the GIL released (the case library's
/// `reference`, the same dot products as core's `scaled_mm`).
#[pyfunction]
#[pyo3(signature = (q, d, w, s, accumulation = "wgmma", promote = None, epilogue = "activation_first"))]
#[allow(clippy::too_many_arguments)]
fn fp8_scaled_mm<'py>(
    py: Python<'py>,
    q: PyReadonlyArrayDyn<'py, u8>,
    d: PyReadonlyArrayDyn<'py, f32>,
    w: PyReadonlyArrayDyn<'py, u8>,
    s: PyReadonlyArrayDyn<'py, f32>,
    accumulation: &str,
    promote: Option<usize>,
    epilogue: &str,
) -> PyResult<Bound<'py, numpy::PyArrayDyn<f32>>> {
    let schedule = parse_schedule(accumulation, promote, epilogue)?;
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
    let case = Case {
        q: to_vec(&q),
        d: to_vec(&d),
        w: to_vec(&w),
        s: to_vec(&s),
    };
    let y = py
        .detach(|| reference(&shape, &case, &schedule))
        .map_err(value_error)?;
    array(py, &[m, out_f], y)
}

/// The shapes `(m, in_f, out_f)` a check runs by default: one token over
/// DeepSeek-V3's hidden size, a ragged shape (in_f 1040: a half MMA of k
/// tail; out_f 120: torch's `_scaled_mm` refuses dimensions that are not
/// multiples of 16), a small batch, a longer k (4 promotions of 1024), and
/// a grid of several tiles each way (m 145 and out_f 288: past 128-row and
/// 256-column tiles, so a scale read without its tile's offset shows; 145
/// is one past a multiple of 16, 32, 64 and 128, so a kernel whose partial
/// last row tile is mishandled shows too).
pub const SCALED_MM_SHAPES: [(usize, usize, usize); 5] = [
    (1, 7168, 256),
    (7, 1040, 120),
    (16, 4096, 256),
    (64, 4096, 128),
    (145, 512, 288),
];

/// fp8_scaled_mm_case(m, in_f, out_f, arm, seed=None, accumulation="wgmma", promote=None, epilogue="activation_first") -> dict
///
/// One case of `check_fp8_scaled_mm` as new arrays: `q` (uint8 `[m,
/// in_f]`), `d` (float32 `[m]`), `w` (uint8 `[out_f, in_f]`), `s`
/// (float32 `[out_f]`), and the oracle's `y` (float32 `[m, out_f]`) under
/// the schedule named. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm or schedule, a zero dimension,
/// or a case over the check's caps.
#[pyfunction]
#[pyo3(signature = (m, in_f, out_f, arm, seed = None, accumulation = "wgmma", promote = None, epilogue = "activation_first"))]
#[allow(clippy::too_many_arguments)]
fn fp8_scaled_mm_case<'py>(
    py: Python<'py>,
    m: usize,
    in_f: usize,
    out_f: usize,
    arm: &str,
    seed: Option<u64>,
    accumulation: &str,
    promote: Option<usize>,
    epilogue: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let schedule = parse_schedule(accumulation, promote, epilogue)?;
    let sp = Spec {
        m,
        in_f,
        out_f,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(m, in_f, out_f, arm)),
    };
    let shape = sp.shape().map_err(PyValueError::new_err)?;
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let y = py
        .detach(|| reference(&shape, &case, &schedule))
        .map_err(value_error)?;
    let Case { q, d, w, s } = case;
    let dict = PyDict::new(py);
    dict.set_item("q", array(py, &[m, in_f], q)?)?;
    dict.set_item("d", array(py, &[m], d)?)?;
    dict.set_item("w", array(py, &[out_f, in_f], w)?)?;
    dict.set_item("s", array(py, &[out_f], s)?)?;
    dict.set_item("y", array(py, &[m, out_f], y)?)?;
    Ok(dict)
}

/// check_fp8_scaled_mm(gemm, accumulation="wgmma", promote=None, epilogue="activation_first", out_dtype="float32", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `gemm`, an FP8 GEMM with row (or tensor) scales, through the arms
/// `EXACT` (products 0 or ±1: every accumulation gives the same exact dot
/// product, so the row shows the epilogue, the scales' indexing and the
/// layouts alone; a NaN code in weight row `out_f // 2` and, for `m >= 2`,
/// in activation row `m // 2` makes that column and row NaN), `RAND` (random finite e4m3 codes over the whole range:
/// the tensor core's 14-bit truncation shows in most outputs) and `SPIKE`
/// (a large activation at the start of every 32 k, small ones after it:
/// each promotion interval gives other bits), and judges its output bit
/// for bit (any NaN equal to any NaN) against `fp8_scaled_mm` under the
/// declared schedule, rounded once to `out_dtype`.
///
/// The callable: `gemm(q, d, w, s, out)`, with `q` uint8 `[m, in_f]`, `d`
/// float32 `[m]`, `w` uint8 `[out_f, in_f]`, `s` float32 `[out_f]` (see
/// `fp8_scaled_mm`) and `out` `[m, out_f]`: float32 for `"float32"`
/// (filled with NaN), else uint16 bit patterns of the bfloat16 or float16
/// output (numpy has no bfloat16; filled with the format's quiet NaN);
/// writing `out` and returning None, or returning a new array. torch
/// users: `torch._scaled_mm(qt, wt.t(), scale_a=dt[:, None], scale_b=st[None, :], out_dtype=torch.bfloat16)`,
/// then `out[...] = y.view(torch.uint16).cpu().numpy()`. A kernel that
/// refuses a shape (torch's `_scaled_mm` wants in_f and out_f multiples of
/// 16; its CUTLASS rowwise path, `f8f8bf16_rowwise`, bfloat16 out only)
/// raises `kernel_oracle.Refused`. A `float16` output overflows to
/// infinity past 65504, as the kernels' casts do: a few in a hundred RAND
/// outputs do, and tell nothing about the accumulation.
///
/// Each row names the known schedules the output matches bit for bit: the
/// sm_90 `wgmma` chain over all of k, promoted every 32, 64, ..., 8192 k
/// (those below in_f), binary32 in k order, each with the three
/// epilogues. What matches on every RAND and SPIKE case is how the kernel
/// accumulates.
///
/// Errors: `ValueError` for an unknown accumulation, epilogue, dtype or
/// arm, a bad `promote`, a zero dimension or a case over the caps (2^26
/// codes, 2^22 outputs, 2^28 multiply-adds: a case at the last takes
/// about 13 s to judge and identify on two cores), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (gemm, accumulation = "wgmma", promote = None, epilogue = "activation_first", out_dtype = "float32", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fp8_scaled_mm<'py>(
    py: Python<'py>,
    gemm: Bound<'py, PyAny>,
    accumulation: &str,
    promote: Option<i64>,
    epilogue: &str,
    out_dtype: &str,
    shapes: Option<Vec<(usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&gemm, "gemm")?;
    let seeds = Seeds::new(seeds, trials)?;
    let promote: Option<usize> = promote.map(|p| count("promote", p, 1)).transpose()?;
    let schedule = parse_schedule(accumulation, promote, epilogue)?;
    let out = crate::check::parse_out_dtype(out_dtype)?;
    let kind = OutKind::of(out);
    let shapes = shapes.unwrap_or_else(|| SCALED_MM_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &(m, in_f, out_f) in &shapes {
        within_caps(m, in_f, out_f).map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&gemm, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "fp8_scaled_mm".into(),
        ..CheckReport::default()
    };
    let declared = schedule_label(&schedule);
    let promote_kw = promote.map_or(String::new(), |p| format!(", promote={p}"));
    let sched_kw = format!("accumulation=\"{accumulation}\"{promote_kw}, epilogue=\"{epilogue}\"");
    o.row(&format!(
        "check_fp8_scaled_mm({fname}), out {}, declared: {declared}",
        out.name()
    ))?;
    o.row(&format!(
        "{:<16} {:>5} {:>18} {:>15} {:>9}  verdict  matches",
        "m,in_f,out_f", "arm", "seed", "outputs differ", "call_ms"
    ))?;
    for &(m, in_f, out_f) in &shapes {
        for &arm in &arms {
            let base = Spec::base_seed(m, in_f, out_f, arm);
            for seed in seeds.for_case(base) {
                let sp = Spec {
                    m,
                    in_f,
                    out_f,
                    arm,
                    seed,
                };
                let shape = sp.shape().map_err(PyValueError::new_err)?;
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, &schedule))
                    .map_err(value_error)?;
                let inputs = [
                    (
                        "q",
                        Input::U8(array(py, &[m, in_f], case.q.clone())?, &case.q),
                    ),
                    ("d", Input::F32(array(py, &[m], case.d.clone())?, &case.d)),
                    (
                        "w",
                        Input::U8(array(py, &[out_f, in_f], case.w.clone())?, &case.w),
                    ),
                    (
                        "s",
                        Input::F32(array(py, &[out_f], case.s.clone())?, &case.s),
                    ),
                ];
                let (called, ms) =
                    call_typed(py, &gemm, Vec::new(), &inputs, &[(&[m, out_f], kind)])?;
                let a = arm.name();
                let row = format!("{:<16} {a:>5} 0x{seed:016x}", format!("{m},{in_f},{out_f}"));
                let repro = format!(
                    "kernel_oracle.check_fp8_scaled_mm({fname}, {sched_kw}, out_dtype=\"{}\", shapes=[({m}, {in_f}, {out_f})], arms=[\"{a}\"], seeds=[0x{seed:016x}])",
                    out.name()
                );
                let head = format!(
                    "FAIL fp8_scaled_mm: m={m} in_f={in_f} out_f={out_f} arm={a} seed=0x{seed:016x}, out {}, declared: {declared}",
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
                let mut r = failure_head(&head, &written);
                first_output_line(&mut r, out, &differ, &got, &wantb, out_f, |j, i| {
                    format!("d = {}, s = {}", value(case.d[j]), value(case.s[i]))
                });
                let _ = writeln!(
                    r,
                    "  the output matches: {}",
                    names_or(&matches, "; ", "no known schedule")
                );
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's output:\n  kernel_oracle.fp8_scaled_mm_case({m}, {in_f}, {out_f}, \"{a}\", seed=0x{seed:016x}, {sched_kw})"
                );
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let known = known_accumulations(8192 + 1).len() * Epilogue::ALL.len();
    rep.finish(
        o,
        &format!("known schedules: {known} (wgmma one chain or promoted every 32..8192 k, f32 in k order; three epilogues); "),
    )
}

/// Adds the scaled FP8 GEMM, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SCALED_MM_SHAPES", SCALED_MM_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(fp8_scaled_mm, m)?)?;
    m.add_function(wrap_pyfunction!(check_fp8_scaled_mm, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_scaled_mm_case, m)?)?;
    Ok(())
}
