//! `check_gated_delta_rule`: any Python callable computing the gated
//! delta rule from the conv output on (GDN decode, seed 003; fla's
//! `fused_recurrent_gated_delta_rule` with its gates and L2 norm in the
//! kernel) run through the case library's cases (`gdn::rule::Spec`),
//! oracle (`gdn::rule::reference`: core's prep and scan) and verdict
//! (`gdn::rule::Verdict`: the written error bound, or bit for bit when
//! declared), with the drivers' common steps (`check`): NaN-filled
//! outputs, inputs compared after the call, a row per case, a rerun line
//! per failure.

use crate::arrays::array;
use crate::check::{call, callable_name, failure_head, seeds_for, value, CheckReport, Input, Out};
use kernel_oracle::gdn::rule::{self, o_index, reference, state_index, Arm, Part, Spec, Verdict};
use oracle::gdn::D_STATE;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(num_k, num_v, t, B)` a check runs by default, smallest
/// first: one head, a GQA ratio of 2 with two rows, a ratio of 4 with
/// three rows and two sequences, five rows of three sequences, then
/// Qwen3-Next's 16 q/k and 32 v heads for one decode step and for eight
/// speculative verification rows.
pub const GDN_SHAPES: [(usize, usize, usize, usize); 6] = [
    (1, 1, 1, 1),
    (1, 2, 2, 1),
    (2, 8, 3, 2),
    (4, 8, 5, 3),
    (16, 32, 1, 1),
    (16, 32, 8, 1),
];

fn spec(shape: (usize, usize, usize, usize), arm: Arm, seed: Option<u64>) -> PyResult<Spec> {
    let (num_k, num_v, t, batch) = shape;
    let s = Spec {
        num_k,
        num_v,
        t,
        batch,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(num_k, num_v, t, batch, arm)),
    };
    s.shape().map_err(PyValueError::new_err)?;
    Ok(s)
}

fn arms(arms: Option<Vec<String>>) -> PyResult<Vec<Arm>> {
    match arms {
        Some(a) => a
            .iter()
            .map(|s| Arm::parse(s).map_err(PyValueError::new_err))
            .collect(),
        None => Ok(Arm::ALL.to_vec()),
    }
}

/// The array shapes of a case, in the callable's argument order: `q`,
/// `k`, `v`, `alpha`, `beta_raw`, `a_log`, `dt_bias`, `state`, then the
/// outputs `o` and `final_state`.
fn shapes(s: &Spec) -> [Vec<usize>; 10] {
    let (nk, nv, t, b, d) = (s.num_k, s.num_v, s.t, s.batch, D_STATE);
    [
        vec![b, t, nk, d],
        vec![b, t, nk, d],
        vec![b, t, nv, d],
        vec![b, t, nv],
        vec![b, t, nv],
        vec![nv],
        vec![nv],
        vec![b, nv, d, d],
        vec![b, t, nv, d],
        vec![b, nv, d, d],
    ]
}

/// The input names, in the callable's argument order.
const INPUTS: [&str; 8] = [
    "q", "k", "v", "alpha", "beta_raw", "a_log", "dt_bias", "state",
];

fn data_slices(d: &rule::Data) -> [&[f32]; 8] {
    [
        &d.q,
        &d.k,
        &d.v,
        &d.alpha,
        &d.beta_raw,
        &d.a_log,
        &d.dt_bias,
        &d.state,
    ]
}

/// gated_delta_rule_case(num_k, num_v, t, batch, arm, seed=None) -> dict
///
/// One case of `check_gated_delta_rule` as new arrays: the inputs `q`,
/// `k`, `v`, `alpha`, `beta_raw`, `a_log`, `dt_bias`, `state` (float32,
/// the shapes of `check_gated_delta_rule`'s docstring), the oracle's
/// outputs `o` and `final_state` (float32, core's bits) and the limits
/// each output element is judged by, `o_limit` and `state_limit`
/// (float64, `2 B + 2^-100`). `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm or a shape the contract
/// refuses (`num_v % num_k != 0`, a zero dimension) or that is too large
/// (`B t num_v 128^2` over 2^26).
#[pyfunction]
#[pyo3(signature = (num_k, num_v, t, batch, arm, seed = None))]
fn gated_delta_rule_case<'py>(
    py: Python<'py>,
    num_k: usize,
    num_v: usize,
    t: usize,
    batch: usize,
    arm: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let s = spec((num_k, num_v, t, batch), arm, seed)?;
    let d = s.generate().map_err(PyValueError::new_err)?;
    let w = reference(&s, &d).map_err(PyValueError::new_err)?;
    let sh = shapes(&s);
    let dict = PyDict::new(py);
    for ((name, x), shape) in INPUTS.iter().zip(data_slices(&d)).zip(&sh) {
        dict.set_item(name, array(py, shape, x.to_vec())?)?;
    }
    dict.set_item("o", array(py, &sh[8], w.o)?)?;
    dict.set_item("final_state", array(py, &sh[9], w.state)?)?;
    dict.set_item("o_limit", array(py, &sh[8], w.o_limit)?)?;
    dict.set_item("state_limit", array(py, &sh[9], w.state_limit)?)?;
    Ok(dict)
}

/// check_gated_delta_rule(rule, shapes=None, arms=None, seeds=None, trials=1, bit_exact=False, verbose=True, name=None) -> CheckReport
///
/// Runs `rule`, an implementation of the gated delta rule with its L2
/// norm and gates inside (GDN decode from the conv output on: fla's
/// `fused_recurrent_gated_delta_rule(..., use_qk_l2norm_in_kernel=True,
/// use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)`), through
/// the arms `RAND` (normal data), `GATES` (softplus past f32 `exp`'s
/// overflow, at its threshold 20 and deep below zero; saturating
/// sigmoids) and `NORM` (all-zero heads and sums of squares near eps), and
/// judges it against core's oracle.
///
/// The callable: `rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state,
/// o, final_state)`, float32 arrays (elements, fla's layouts):
/// - `q`, `k`: `[B, t, num_k, 128]`, before the L2 norm; `v`: `[B, t,
///   num_v, 128]`;
/// - `alpha`, `beta_raw`: `[B, t, num_v]`; `a_log`, `dt_bias`: `[num_v]`
///   (one layer);
/// - `state`: `[B, num_v, 128, 128]`, `S[h][key][value]`, each sequence's
///   initial state (fla's `initial_state`);
/// - `o`: `[B, t, num_v, 128]` and `final_state`: `[B, num_v, 128, 128]`,
///   filled with NaN;
///
/// computing, row by row, for each v head `h` with q/k head `h // (num_v
/// // num_k)`: `q = q / sqrt(sum q^2 + 1e-6)` (and `k`), `beta =
/// sigmoid(beta_raw)`, `g = -exp(a_log) * softplus(alpha + dt_bias)`
/// (softplus(x) = x above 20), `S = exp(g) S`, `S += k (beta (v - k S))`,
/// `o = (q S) / sqrt(128)`; writing `o` and `final_state` (the state after
/// the last row) and returning None, or returning both as a tuple. It
/// must not write its inputs (an in-place kernel works on a copy).
///
/// Verdict per case: with `bit_exact=False`, every element of both
/// outputs within `2 B + 2^-100` of the oracle's, `B` a first-order
/// forward-error bound of any f32 evaluation (any summation order, FMA,
/// transcendentals within 8 ulps; `kernel_oracle` docs of
/// `gdn::rule::bound`), and no NaN or infinity; with `bit_exact=True`,
/// core's bits everywhere. Each row reports, for `o` and the final state,
/// the largest distance in ulps, the share of bit-identical elements and
/// the worst ratio of an error to its limit (above 1 fails).
///
/// Arguments: `shapes` `(num_k, num_v, t, B)` tuples (default
/// `GDN_SHAPES`), `arms` (`"RAND"`, `"GATES"`, `"NORM"`; default all),
/// `seeds` / `trials` / `verbose` / `name` as `check_fp8_block_gemm`.
///
/// Errors: `ValueError` on an unknown arm, a shape the contract refuses
/// or one too large (`B t num_v 128^2` over 2^26), before any call.
#[pyfunction]
#[pyo3(signature = (rule, shapes = None, arms = None, seeds = None, trials = 1, bit_exact = false, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_gated_delta_rule<'py>(
    py: Python<'py>,
    rule: Bound<'py, PyAny>,
    shapes: Option<Vec<(usize, usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: usize,
    bit_exact: bool,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    let shape_list = shapes.unwrap_or_else(|| GDN_SHAPES.to_vec());
    let arms = self::arms(arms)?;
    for &sh in &shape_list {
        spec(sh, Arm::Rand, None)?;
    }
    let fname = callable_name(&rule, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "gated_delta_rule".into(),
        ..CheckReport::default()
    };
    let declared = if bit_exact {
        "core's arithmetic (bit for bit)"
    } else {
        "within 2B of the oracle (B: first-order bound of any f32 evaluation)"
    };
    out.row(&format!(
        "check_gated_delta_rule({fname}), declared: {declared}"
    ))?;
    out.row(&format!(
        "{:<14} {:>5} {:>18} | {:>10} {:>9} {:>8} | {:>10} {:>9} {:>8} | {:>9}  verdict",
        "nk,nv,t,B",
        "arm",
        "seed",
        "o max ulp",
        "identical",
        "err/lim",
        "S max ulp",
        "identical",
        "err/lim",
        "call_ms"
    ))?;
    for &sh in &shape_list {
        let (nk, nv, t, b) = sh;
        for &arm in &arms {
            let base = Spec::base_seed(nk, nv, t, b, arm);
            for seed in seeds_for(base, &seeds, trials) {
                let s = spec(sh, arm, Some(seed))?;
                let d = s.generate().map_err(PyValueError::new_err)?;
                let want = reference(&s, &d).map_err(PyValueError::new_err)?;
                let dims = self::shapes(&s);
                let mut inputs = Vec::new();
                for ((n, x), shape) in INPUTS.iter().zip(data_slices(&d)).zip(&dims) {
                    inputs.push((*n, Input::F32(array(py, shape, x.to_vec())?, x)));
                }
                let (called, ms) = call(py, &rule, Vec::new(), &inputs, &[&dims[8], &dims[9]])?;
                let shape_s = format!("{nk},{nv},{t},{b}");
                let repro = format!(
                    "kernel_oracle.check_gated_delta_rule({fname}, shapes=[({nk}, {nv}, {t}, {b})], arms=[\"{}\"], seeds=[0x{seed:016x}]{})",
                    arm.name(),
                    if bit_exact { ", bit_exact=True" } else { "" }
                );
                let head = format!(
                    "FAIL gated_delta_rule: num_k={nk} num_v={nv} t={t} B={b} arm={} seed=0x{seed:016x}, declared: {declared}",
                    arm.name()
                );
                let Some((got, written)) = rep.take(
                    &mut out,
                    called,
                    &format!("{shape_s:<14} {:>5} 0x{seed:016x}", arm.name()),
                    &head,
                    &repro,
                )?
                else {
                    continue;
                };
                let v = Verdict::judge(&got[0], &got[1], &want, bit_exact);
                let pass = v.pass() && written.is_empty();
                let cols = |p: &Part| {
                    format!(
                        "{:>10} {:>8.1}% {:>8.3}",
                        p.max_ulp,
                        100.0 * p.identical as f64 / p.n.max(1) as f64,
                        p.worst
                    )
                };
                out.row(&format!(
                    "{shape_s:<14} {:>5} 0x{seed:016x} | {} | {} | {ms:>9.2}  {}",
                    arm.name(),
                    cols(&v.o),
                    cols(&v.state),
                    if pass { "PASS" } else { "FAIL" }
                ))?;
                if pass {
                    rep.passed += 1;
                } else {
                    let mut r = failure_head(&head, &written);
                    if !v.pass() {
                        part_lines(&mut r, &s, &v, true);
                        part_lines(&mut r, &s, &v, false);
                    }
                    let _ = write!(
                        r,
                        "reproduce:\n  {repro}\nthe case's arrays, the oracle's outputs and their limits:\n  kernel_oracle.gated_delta_rule_case({nk}, {nv}, {t}, {b}, \"{}\", seed=0x{seed:016x})",
                        arm.name()
                    );
                    rep.fail(&mut out, r, repro)?;
                }
            }
        }
    }
    rep.finish(out, "")
}

/// The failure lines of one output (`o` when `is_o`, else the final
/// state): how many elements fail, the first and the worst with their
/// place, both values and the limit.
fn part_lines(r: &mut String, s: &Spec, v: &Verdict, is_o: bool) {
    let (p, what) = if is_o {
        (&v.o, "o")
    } else {
        (&v.state, "final_state")
    };
    let failing = if v.bit_exact {
        p.n - p.identical
    } else {
        p.over
    };
    if failing == 0 {
        return;
    }
    let place = |i: usize| {
        if is_o {
            let (b, r, h, j) = o_index(s, i);
            format!("[{b}, {r}, {h}, {j}] (sequence, row, v head, value)")
        } else {
            let (b, h, k, j) = state_index(s, i);
            format!("[{b}, {h}, {k}, {j}] (sequence, v head, key, value)")
        }
    };
    let _ = writeln!(
        r,
        "  {what}: {failing} of {} elements {} ({} NaN or infinite); largest distance {} ulps",
        p.n,
        if v.bit_exact {
            "differ from core's bits"
        } else {
            "over their limit 2B + 2^-100"
        },
        p.non_finite,
        p.max_ulp
    );
    let at = |label: &str, e: Option<(usize, f32, f32, f64)>, r: &mut String| {
        if let Some((i, g, w, l)) = e {
            let _ = writeln!(
                r,
                "    {label} at {}: got {}, want {}, |got - want| {:e}, limit {l:e}",
                place(i),
                value(g),
                value(w),
                (f64::from(g) - f64::from(w)).abs()
            );
        }
    };
    if v.bit_exact {
        at("first differing", p.first_diff, r);
    } else {
        at("first over", p.first_over, r);
    }
    at("worst", p.worst_at, r);
}

/// Adds the gated delta rule's check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GDN_SHAPES", GDN_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_gated_delta_rule, m)?)?;
    m.add_function(wrap_pyfunction!(gated_delta_rule_case, m)?)?;
    Ok(())
}
