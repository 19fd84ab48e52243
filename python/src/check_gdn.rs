//! The GDN decode step's two halves as the field's kernels compute them,
//! each with the drivers' common steps (`check`: NaN-filled outputs,
//! inputs compared after the call, a row per case, a rerun line per
//! failure):
//! - `check_causal_conv1d_update`: the conv (causal-conv1d's
//!   `causal_conv1d_update`, vLLM's Triton port) through
//!   `gdn::conv_update`'s cases, oracle (core's conv) and verdict (the
//!   state bit for bit, the output by a written bound);
//! - `check_gated_delta_rule`: the rest from the conv output on (fla's
//!   `fused_recurrent_gated_delta_rule` with its gates and L2 norm in the
//!   kernel) through `gdn::rule`'s cases, oracle (core's prep and scan)
//!   and verdict (a written error bound, or bit for bit when declared).

use crate::arrays::array;
use crate::check::{
    arms_or_all, call, callable_name, failure_head, value, CheckReport, Input, Out, Seeds,
};
use kernel_oracle::elementwise::Part;
use kernel_oracle::gdn::conv_update;
use kernel_oracle::gdn::rule::{
    self, o_index, pool_index, reference, state_index, Arm, Spec, Verdict,
};
use kernel_oracle::gdn::slots::PoolMode;
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

fn spec(
    shape: (usize, usize, usize, usize),
    arm: Arm,
    seed: Option<u64>,
    per_row: bool,
    pool: Option<PoolMode>,
) -> PyResult<Spec> {
    let (num_k, num_v, t, batch) = shape;
    let s = Spec {
        num_k,
        num_v,
        t,
        batch,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(num_k, num_v, t, batch, arm)),
        per_row,
        pool,
    };
    s.shape().map_err(PyValueError::new_err)?;
    Ok(s)
}

/// The `pool` argument: `None`, `"decode"` or `"spec"`.
fn pool_mode(pool: Option<&str>) -> PyResult<Option<PoolMode>> {
    pool.map(PoolMode::parse)
        .transpose()
        .map_err(PyValueError::new_err)
}

/// The array shapes of a case, in the callable's argument order: `q`,
/// `k`, `v`, `alpha`, `beta_raw`, `a_log`, `dt_bias`, `state`, then the
/// outputs `o` and `final_state` (`states`, a row more, with
/// `Spec::per_row`). With a pool, `state` and the state output are the
/// pool, `[N, num_v, 128, 128]` (see [`pool_inputs`] for its indices).
fn shapes(s: &Spec, d: &rule::Data) -> [Vec<usize>; 10] {
    let (nk, nv, t, b, d_) = (s.num_k, s.num_v, s.t, s.batch, D_STATE);
    [
        vec![b, t, nk, d_],
        vec![b, t, nk, d_],
        vec![b, t, nv, d_],
        vec![b, t, nv],
        vec![b, t, nv],
        vec![nv],
        vec![nv],
        state_dims(d, vec![b, nv, d_, d_]),
        vec![b, t, nv, d_],
        if s.per_row {
            vec![b, t, nv, d_, d_]
        } else {
            state_dims(d, vec![b, nv, d_, d_])
        },
    ]
}

/// A state input's or output's shape: the pool's when the case has one.
fn state_dims(d: &rule::Data, per_sequence: Vec<usize>) -> Vec<usize> {
    match &d.pool {
        Some(p) => [vec![p.slots], per_sequence[1..].to_vec()].concat(),
        None => per_sequence,
    }
}

/// The inputs of a case, in the callable's argument order: the rule's
/// seven, then the state or the pool, and with a pool its
/// `ssm_state_indices` (`[B]` int32 in decode, `[B, t]` in spec) and, in
/// spec, `num_accepted_tokens` (`[B]` int32).
fn case_inputs<'a, 'py>(
    py: Python<'py>,
    s: &Spec,
    d: &'a rule::Data,
    dims: &[Vec<usize>; 10],
) -> PyResult<Vec<(&'static str, Input<'a, 'py>)>> {
    let mut inputs = Vec::new();
    for ((n, x), shape) in input_names(s).iter().zip(data_slices(d)).zip(dims) {
        inputs.push((*n, Input::F32(array(py, shape, x.to_vec())?, x)));
    }
    if let Some(p) = &d.pool {
        inputs.push(("ssm_state_indices", {
            let shape = match p.mode {
                PoolMode::Decode => vec![s.batch],
                PoolMode::Spec => vec![s.batch, s.t],
            };
            Input::I32(array(py, &shape, p.indices.clone())?, &p.indices)
        }));
        if p.mode == PoolMode::Spec {
            inputs.push((
                "num_accepted_tokens",
                Input::I32(array(py, &[s.batch], p.accepted.clone())?, &p.accepted),
            ));
        }
    }
    Ok(inputs)
}

/// The float32 input names, in the callable's argument order (the last
/// is `state_pool` with a pool).
fn input_names(s: &Spec) -> [&'static str; 8] {
    let state = if s.pool.is_some() {
        "state_pool"
    } else {
        "state"
    };
    [
        "q", "k", "v", "alpha", "beta_raw", "a_log", "dt_bias", state,
    ]
}

fn data_slices(d: &rule::Data) -> [&[f32]; 8] {
    [
        &d.q,
        &d.k,
        &d.v,
        &d.alpha,
        &d.beta_raw,
        &d.a_log,
        &d.dt_bias,
        d.pool.as_ref().map_or(&d.state, |p| &p.pool),
    ]
}

/// gated_delta_rule_case(num_k, num_v, t, batch, arm, seed=None, states=False, pool=None) -> dict
///
/// One case of `check_gated_delta_rule` as new arrays: the inputs `q`,
/// `k`, `v`, `alpha`, `beta_raw`, `a_log`, `dt_bias`, `state` (float32,
/// the shapes of `check_gated_delta_rule`'s docstring), the oracle's
/// outputs `o` and `final_state` (with `states=True`, `states`, the state
/// after every row) (float32, core's bits) and the limits each output
/// element is judged by, `o_limit` and `state_limit` (float64, `2 B +
/// 2^-100`). With `pool`, the state input is `state_pool` with
/// `ssm_state_indices` (and in spec `num_accepted_tokens`, int32), the
/// state output `final_pool` with its limit `pool_limit` (0 on every slot
/// no sequence writes), and `padded` lists the padded sequences (their
/// `o` rows are not judged). `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm or pool mode, `states=True`
/// with a pool, or a shape the contract refuses (`num_v % num_k != 0`, a
/// zero dimension) or that is too large (`B t num_v 128^2` over 2^26, a
/// pool counting twice).
#[pyfunction]
#[pyo3(signature = (num_k, num_v, t, batch, arm, seed = None, states = false, pool = None))]
#[allow(clippy::too_many_arguments)]
fn gated_delta_rule_case<'py>(
    py: Python<'py>,
    num_k: usize,
    num_v: usize,
    t: usize,
    batch: usize,
    arm: &str,
    seed: Option<u64>,
    states: bool,
    pool: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let s = spec(
        (num_k, num_v, t, batch),
        arm,
        seed,
        states,
        pool_mode(pool)?,
    )?;
    let d = s.generate().map_err(PyValueError::new_err)?;
    let w = reference(&s, &d).map_err(PyValueError::new_err)?;
    let sh = shapes(&s, &d);
    let dict = PyDict::new(py);
    for (name, x) in case_inputs(py, &s, &d, &sh)? {
        dict.set_item(name, x.array())?;
    }
    let (state_out, state_limit) = state_out_names(&s);
    dict.set_item("o", array(py, &sh[8], w.o)?)?;
    dict.set_item(state_out, array(py, &sh[9], w.state)?)?;
    dict.set_item("o_limit", array(py, &sh[8], w.o_limit)?)?;
    dict.set_item(state_limit, array(py, &sh[9], w.state_limit)?)?;
    if s.pool.is_some() {
        let padded: Vec<usize> = (0..batch).filter(|&b| w.padded[b]).collect();
        dict.set_item("padded", padded)?;
    }
    Ok(dict)
}

/// The state output's name and its limit's: `final_pool` and
/// `pool_limit` with a pool, else `states` (after every row) or
/// `final_state`, and `state_limit`.
fn state_out_names(s: &Spec) -> (&'static str, &'static str) {
    if s.pool.is_some() {
        ("final_pool", "pool_limit")
    } else {
        (state_name(s.per_row), "state_limit")
    }
}

/// The extra keyword arguments a case's rerun lines repeat: `states=True`
/// or `pool="..."`, when given.
fn extra_kws(per_row: bool, pool: Option<PoolMode>) -> String {
    match pool {
        Some(m) => format!(", pool=\"{}\"", m.name()),
        None => states_kw(per_row).to_string(),
    }
}

/// Where a flat index of a state pool (`slot_len` elements a slot) lies:
/// its slot and offset, and whose state the call leaves there.
fn pool_place(
    writers: &[Option<(usize, usize)>],
    slot_len: usize,
    i: usize,
) -> (usize, usize, String) {
    let slot = i / slot_len;
    let whose = match writers[slot] {
        Some((b, r)) => format!("the state of sequence {b} after row {r}"),
        None => "a slot no sequence writes: its bits before the call".into(),
    };
    (slot, i % slot_len, whose)
}

/// check_gated_delta_rule(rule, shapes=None, arms=None, seeds=None, trials=1, bit_exact=False, states=False, verbose=True, name=None, pool=None) -> CheckReport
///
/// Runs `rule`, an implementation of the gated delta rule with its L2
/// norm and gates inside (GDN decode from the conv output on: fla's
/// `fused_recurrent_gated_delta_rule(..., use_qk_l2norm_in_kernel=True,
/// use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)`), through
/// the arms `RAND` (normal data), `GATES` (softplus past f32 `exp`'s
/// overflow, from 5 to 25 across its threshold 20, so a threshold of 8
/// or less fails, and deep below zero; saturating
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
/// // num_k)`: `q = q / sqrt(sum q^2 + 1e-6)` (the sum over the head's
/// 128 elements; and `k`), `beta =
/// sigmoid(beta_raw)`, `g = -exp(a_log) * softplus(alpha + dt_bias)`
/// (softplus(x) = x above 20), `S = exp(g) S`, `S += k (beta (v - k S))`,
/// `o = (q S) / sqrt(128)`; writing `o` and `final_state` (the state after
/// the last row) and returning None, or returning both as a tuple. It
/// must not write its inputs (an in-place kernel works on a copy). With
/// `states=True` the last output is `states`: `[B, t, num_v, 128, 128]`,
/// the state after every row (the snapshots speculative verification
/// rolls back to, as vLLM's spec-decode path keeps one per draft token;
/// the last is the final state).
///
/// With `pool` (continuous batching: vLLM's
/// `fused_recurrent_gated_delta_rule` with `ssm_state_indices` and
/// `inplace_final_state=True`; `kernel_oracle` docs of `gdn::slots`) the
/// states live in a pool of `N` slots and the callable is `rule(q, k, v,
/// alpha, beta_raw, a_log, dt_bias, state_pool, ssm_state_indices, o,
/// final_pool)`, with `num_accepted_tokens` after `ssm_state_indices` in
/// spec:
/// - `state_pool`: `[N, num_v, 128, 128]`, more slots than the batch
///   names;
/// - `"decode"`: `ssm_state_indices` `[B]` int32; sequence `b` reads slot
///   `idx[b]` and writes its final state there;
/// - `"spec"`: `ssm_state_indices` `[B, t]` int32 and
///   `num_accepted_tokens` `[B]` int32 in `1..=t`; sequence `b` reads slot
///   `idx[b, num_accepted[b] - 1]` and writes the state after row `r` to
///   slot `idx[b, r]` unless that index is -1;
/// - a sequence whose read index is -1 (`PAD_SLOT_ID`) is padding: nothing
///   of it read or written, its `o` rows not judged;
/// - `final_pool`: `[N, num_v, 128, 128]`, filled with NaN: the whole pool
///   after the call, every slot no sequence writes with its bits unchanged
///   (an in-place kernel: `final_pool[...] = state_pool`, then the kernel
///   on `final_pool`).
///
/// Verdict per case: with `bit_exact=False`, every element of both
/// outputs within `2 B + 2^-100` of the oracle's, `B` a first-order
/// forward-error bound of an f32 evaluation under a stated model (any
/// summation order, with or without FMA, each `exp`, `log`, square root
/// and division within 8 ulps; `kernel_oracle` docs of
/// `gdn::rule::bound`), and no NaN or infinity; with `bit_exact=True`,
/// core's bits everywhere. Each row reports, for `o` and the final state,
/// the largest distance in ulps, the share of bit-identical elements and
/// the worst ratio of an error to its limit (above 1 fails).
///
/// Arguments: `shapes` `(num_k, num_v, t, B)` tuples (default
/// `GDN_SHAPES`), `arms` (`"RAND"`, `"GATES"`, `"NORM"`; default all),
/// `states`, `pool` (`None`, `"decode"`, `"spec"`; above), `seeds` /
/// `trials` / `verbose` / `name` as `check_fp8_block_gemm`.
///
/// Errors: `ValueError` on an unknown arm or pool mode, `states=True` with
/// a pool, a shape the contract refuses or one too large (`B t num_v
/// 128^2` over 2^26, a pool counting twice), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (rule, shapes = None, arms = None, seeds = None, trials = 1, bit_exact = false, states = false, verbose = true, name = None, pool = None))]
#[allow(clippy::too_many_arguments)]
fn check_gated_delta_rule<'py>(
    py: Python<'py>,
    rule: Bound<'py, PyAny>,
    shapes: Option<Vec<(usize, usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    bit_exact: bool,
    states: bool,
    verbose: bool,
    name: Option<String>,
    pool: Option<&str>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&rule, "rule")?;
    let seeds = Seeds::new(seeds, trials)?;
    let shape_list = shapes.unwrap_or_else(|| GDN_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let pool = pool_mode(pool)?;
    for &sh in &shape_list {
        spec(sh, Arm::Rand, None, states, pool)?;
    }
    let fname = callable_name(&rule, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "gated_delta_rule".into(),
        ..CheckReport::default()
    };
    let declared = declared(bit_exact);
    let pool_note = pool.map_or(String::new(), |m| {
        format!(", states in a pool of slots ({})", m.name())
    });
    out.row(&format!(
        "check_gated_delta_rule({fname}), declared: {declared}{pool_note}"
    ))?;
    out.row(&header("nk,nv,t,B", ["o", "S"]))?;
    for &sh in &shape_list {
        let (nk, nv, t, b) = sh;
        for &arm in &arms {
            let base = Spec::base_seed(nk, nv, t, b, arm);
            for seed in seeds.for_case(base) {
                let s = spec(sh, arm, Some(seed), states, pool)?;
                let d = s.generate().map_err(PyValueError::new_err)?;
                let want = reference(&s, &d).map_err(PyValueError::new_err)?;
                let dims = self::shapes(&s, &d);
                let inputs = case_inputs(py, &s, &d, &dims)?;
                let case = Case::new(
                    "gated_delta_rule",
                    &fname,
                    [("num_k", nk), ("num_v", nv), ("t", t), ("B", b)],
                    (arm.name(), seed),
                    declared,
                    (bit_exact, &extra_kws(s.per_row, s.pool)),
                );
                let o_place = |i: usize| {
                    let (b, r, h, j) = o_index(&s, i);
                    format!("[{b}, {r}, {h}, {j}] (sequence, row, v head, value)")
                };
                let writers = d.pool.as_ref().map(|p| slot_writers(p, t));
                let s_place = |i: usize| {
                    let (b, r, h, k, j) = state_index(&s, i);
                    if let Some(w) = &writers {
                        let (_, _, whose) = pool_place(w, nv * D_STATE * D_STATE, i);
                        let (slot, h, k, j) = pool_index(&s, i);
                        format!("[{slot}, {h}, {k}, {j}] (slot, v head, key, value), {whose}")
                    } else if states {
                        format!("[{b}, {r}, {h}, {k}, {j}] (sequence, row, v head, key, value)")
                    } else {
                        format!("[{b}, {h}, {k}, {j}] (sequence, v head, key, value)")
                    }
                };
                case.run(
                    py,
                    &mut rep,
                    &mut out,
                    &rule,
                    &inputs,
                    [&dims[8], &dims[9]],
                    &want.padded,
                    |o, st| {
                        let v = Verdict::judge(o, st, &want, bit_exact);
                        [
                            Judged {
                                what: "o",
                                part: v.o,
                                exact: bit_exact,
                                place: &o_place,
                            },
                            Judged {
                                what: state_out_names(&s).0,
                                part: v.state,
                                exact: bit_exact,
                                place: &s_place,
                            },
                        ]
                    },
                )?;
            }
        }
    }
    rep.finish(out, "")
}

/// The state output's name: `states` (after every row) or `final_state`.
fn state_name(per_row: bool) -> &'static str {
    if per_row {
        "states"
    } else {
        "final_state"
    }
}

/// For each slot of a pool, the sequence and row whose state the call
/// leaves there, `None` where no sequence writes.
fn slot_writers(p: &kernel_oracle::gdn::slots::StatePool, t: usize) -> Vec<Option<(usize, usize)>> {
    let mut w = vec![None; p.slots];
    for (b, col, slot) in p.writes() {
        let row = if p.mode == PoolMode::Spec { col } else { t - 1 };
        w[slot] = Some((b, row));
    }
    w
}

/// The `states=True` argument of a rerun line, when it was given.
fn states_kw(per_row: bool) -> &'static str {
    if per_row {
        ", states=True"
    } else {
        ""
    }
}

/// "what the callable declared", for the first line and failure heads.
fn declared(bit_exact: bool) -> &'static str {
    if bit_exact {
        "core's arithmetic (bit for bit)"
    } else {
        "within 2B of the oracle (B: first-order bound of an f32 evaluation)"
    }
}

/// The column header of a two-output check: the shape, the arm and seed,
/// then for each output its largest ulp distance, its share of
/// bit-identical elements and its worst error-to-limit ratio.
fn header(shape: &str, outs: [&str; 2]) -> String {
    format!(
        "{shape:<14} {:>5} {:>18} | {:>10} {:>9} {:>8} | {:>10} {:>9} {:>8} | {:>9}  verdict",
        "arm",
        "seed",
        format!("{} max ulp", outs[0]),
        "identical",
        "err/lim",
        format!("{} max ulp", outs[1]),
        "identical",
        "err/lim",
        "call_ms"
    )
}

/// One output of a case as judged: its name, its comparison, whether its
/// bits are required, and how a flat index reads.
struct Judged<'a> {
    what: &'static str,
    part: Part,
    exact: bool,
    place: &'a dyn Fn(usize) -> String,
}

impl Judged<'_> {
    fn pass(&self) -> bool {
        if self.exact {
            self.part.bit_exact()
        } else {
            self.part.within()
        }
    }

    /// The row's columns: largest ulp distance, share bit-identical, worst
    /// error-to-limit ratio.
    fn cols(&self) -> String {
        let p = &self.part;
        format!(
            "{:>10} {:>8.1}% {:>8.3}",
            p.max_ulp,
            100.0 * p.identical as f64 / p.n.max(1) as f64,
            p.worst
        )
    }

    /// The failure lines: how many elements fail, the first and the worst
    /// with their place, both values and the limit.
    fn lines(&self, r: &mut String) {
        let p = &self.part;
        let failing = if self.exact {
            p.n - p.identical
        } else {
            p.over
        };
        if failing == 0 {
            return;
        }
        let _ = writeln!(
            r,
            "  {}: {failing} of {} elements {} ({} NaN or infinite); largest distance {} ulps",
            self.what,
            p.n,
            if self.exact {
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
                    (self.place)(i),
                    value(g),
                    value(w),
                    (f64::from(g) - f64::from(w)).abs()
                );
            }
        };
        if self.exact {
            at("first differing", p.first_diff, r);
        } else {
            at("first over", p.first_over, r);
        }
        at("worst", p.worst_at, r);
    }
}

/// A case's lines: its row's lead, its failure head, its rerun line and
/// the Python line that gives its arrays.
struct Case {
    row: String,
    head: String,
    repro: String,
    arrays: String,
}

impl Case {
    /// The lines of one case of `check_<contract>` (shape `dims`, named as
    /// the failure head names them), its arm and seed, what the callable
    /// declared, the `bit_exact` argument and the other keyword arguments
    /// (`kws`, each with its leading comma) the rerun lines repeat.
    fn new(
        contract: &str,
        fname: &str,
        dims: [(&str, usize); 4],
        (arm, seed): (&str, u64),
        declared: &str,
        (bit_exact, kws): (bool, &str),
    ) -> Case {
        let values = dims.map(|(_, v)| v.to_string());
        let named: Vec<String> = dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        let (shape, tuple) = (values.join(","), values.join(", "));
        let exact_kw = if bit_exact { ", bit_exact=True" } else { "" };
        let states_kw = kws;
        Case {
            row: format!("{shape:<14} {arm:>5} 0x{seed:016x}"),
            head: format!(
                "FAIL {contract}: {} arm={arm} seed=0x{seed:016x}, declared: {declared}",
                named.join(" ")
            ),
            repro: format!(
                "kernel_oracle.check_{contract}({fname}, shapes=[({tuple})], arms=[\"{arm}\"], seeds=[0x{seed:016x}]{exact_kw}{states_kw})"
            ),
            arrays: format!(
                "kernel_oracle.{contract}_case({tuple}, \"{arm}\", seed=0x{seed:016x}{states_kw})"
            ),
        }
    }

    /// Calls `f` on `inputs` with two NaN-filled outputs of `outs`' shapes,
    /// records a refusal or an error, else judges both outputs with
    /// `judge`, prints the row and, on a failure, the report. `padded`
    /// (empty without a pool): the sequences whose rows of the first
    /// output are not judged, and so may be left unwritten.
    #[allow(clippy::too_many_arguments)]
    fn run<'py, 'j>(
        self,
        py: Python<'py>,
        rep: &mut CheckReport,
        out: &mut Out<'py>,
        f: &Bound<'py, PyAny>,
        inputs: &[(&str, Input<'_, 'py>)],
        outs: [&[usize]; 2],
        padded: &[bool],
        judge: impl FnOnce(&[f32], &[f32]) -> [Judged<'j>; 2],
    ) -> PyResult<()> {
        let (called, ms) = call(py, f, Vec::new(), inputs, &outs)?;
        let Some((got, mut written)) = rep.take(out, called, &self.row, &self.head, &self.repro)?
        else {
            return Ok(());
        };
        if let Some(per) = outs[0].iter().product::<usize>().checked_div(padded.len()) {
            written.forgive(0, |i| padded.get(i / per).copied().unwrap_or(false));
        }
        let parts = judge(got[0].f32(), got[1].f32());
        let judged = parts.iter().all(Judged::pass);
        let pass = judged && written.is_empty();
        out.row(&format!(
            "{} | {} | {} | {ms:>9.2}  {}",
            self.row,
            parts[0].cols(),
            parts[1].cols(),
            if pass { "PASS" } else { "FAIL" }
        ))?;
        if pass {
            rep.passed += 1;
            return Ok(());
        }
        let mut r = failure_head(&self.head, &written);
        for p in &parts {
            p.lines(&mut r);
        }
        let _ = write!(
            r,
            "reproduce:\n  {}\nthe case's arrays, the oracle's outputs and their limits:\n  {}",
            self.repro, self.arrays
        );
        rep.fail(out, r, self.repro)
    }
}

/// The shapes `(dim, d_conv, t, B)` `check_causal_conv1d_update` runs by
/// default, ragged first: one channel, a 128-channel tile plus two, 1000
/// channels with three taps and two new inputs, five new inputs past a
/// two-tap state (`t > P`), then Qwen3-Next's 8192 conv channels for one
/// decode step of four sequences and for eight verification rows.
pub const CONV_SHAPES: [(usize, usize, usize, usize); 6] = [
    (1, 4, 1, 1),
    (130, 4, 1, 3),
    (1000, 3, 2, 2),
    (700, 2, 5, 1),
    (8192, 4, 1, 4),
    (8192, 4, 8, 1),
];

fn conv_spec(
    shape: (usize, usize, usize, usize),
    arm: conv_update::Arm,
    seed: Option<u64>,
    per_row: bool,
    pool: Option<PoolMode>,
) -> PyResult<conv_update::Spec> {
    let (dim, d_conv, t, batch) = shape;
    let s = conv_update::Spec {
        dim,
        d_conv,
        t,
        batch,
        arm,
        seed: seed.unwrap_or_else(|| conv_update::Spec::base_seed(dim, d_conv, t, batch, arm)),
        per_row,
        pool,
    };
    s.shape().map_err(PyValueError::new_err)?;
    Ok(s)
}

/// The array shapes of a conv case: `x`, `conv_state`, `weight`, `out`,
/// `final_state` (`states`, a row more, with `Spec::per_row`; with a
/// pool, the state input and output are `[N, dim, L]`).
fn conv_shapes(s: &conv_update::Spec, d: &conv_update::Data) -> [Vec<usize>; 5] {
    let (c, k, t, b, l) = (s.dim, s.d_conv, s.t, s.batch, d.state_len);
    let n = d.pool.as_ref().map_or(b, |p| p.slots);
    [
        vec![b, c, t],
        vec![n, c, l],
        vec![c, k],
        vec![b, c, t],
        if s.per_row {
            vec![b, t, c, l]
        } else {
            vec![n, c, l]
        },
    ]
}

/// The inputs of a conv case in the callable's order: `x`, the state (or
/// the pool, `conv_state`), `weight`, and with a pool
/// `conv_state_indices` (`[B]` int32).
fn conv_inputs<'a, 'py>(
    py: Python<'py>,
    d: &'a conv_update::Data,
    dims: &[Vec<usize>; 5],
) -> PyResult<Vec<(&'static str, Input<'a, 'py>)>> {
    let state = d.pool.as_ref().map_or(&d.state, |p| &p.pool);
    let mut inputs = vec![
        ("x", Input::F32(array(py, &dims[0], d.x.clone())?, &d.x)),
        (
            "conv_state",
            Input::F32(array(py, &dims[1], state.clone())?, state),
        ),
        (
            "weight",
            Input::F32(array(py, &dims[2], d.weight.clone())?, &d.weight),
        ),
    ];
    if let Some(p) = &d.pool {
        inputs.push((
            "conv_state_indices",
            Input::I32(array(py, &[p.batch()], p.indices.clone())?, &p.indices),
        ));
    }
    Ok(inputs)
}

/// causal_conv1d_update_case(dim, d_conv, t, batch, arm, seed=None, states=False, pool=None) -> dict
///
/// One case of `check_causal_conv1d_update` as new arrays: the inputs
/// `x`, `conv_state`, `weight` (float32, the shapes of that check's
/// docstring), the oracle's `out` and `final_state` (with `states=True`,
/// `states`, the state after every new input) (float32, core's bits)
/// and `out_limit` (float64, `2 B + 2^-100` per element). With
/// `pool="decode"`, `conv_state` is the pool, `conv_state_indices` (int32)
/// is added, the state output is `final_pool` and `padded` lists the
/// padded sequences. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm or pool mode, `pool="spec"`,
/// `states=True` with a pool, a zero dimension, `d_conv` outside 2..=4 or
/// a case over 2^26 elements.
#[pyfunction]
#[pyo3(signature = (dim, d_conv, t, batch, arm, seed = None, states = false, pool = None))]
#[allow(clippy::too_many_arguments)]
fn causal_conv1d_update_case<'py>(
    py: Python<'py>,
    dim: usize,
    d_conv: usize,
    t: usize,
    batch: usize,
    arm: &str,
    seed: Option<u64>,
    states: bool,
    pool: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = conv_update::Arm::parse(arm).map_err(PyValueError::new_err)?;
    let s = conv_spec((dim, d_conv, t, batch), arm, seed, states, pool_mode(pool)?)?;
    let d = s.generate().map_err(PyValueError::new_err)?;
    let w = conv_update::reference(&s, &d).map_err(PyValueError::new_err)?;
    let sh = conv_shapes(&s, &d);
    let dict = PyDict::new(py);
    for (name, x) in conv_inputs(py, &d, &sh)? {
        dict.set_item(name, x.array())?;
    }
    dict.set_item("out", array(py, &sh[3], w.out)?)?;
    let state_out = if s.pool.is_some() {
        "final_pool"
    } else {
        state_name(states)
    };
    dict.set_item(state_out, array(py, &sh[4], w.state)?)?;
    dict.set_item("out_limit", array(py, &sh[3], w.out_limit)?)?;
    if s.pool.is_some() {
        let padded: Vec<usize> = (0..batch).filter(|&b| w.padded[b]).collect();
        dict.set_item("padded", padded)?;
    }
    Ok(dict)
}

/// check_causal_conv1d_update(conv, shapes=None, arms=None, seeds=None, trials=1, bit_exact=False, states=False, verbose=True, name=None, pool=None) -> CheckReport
///
/// Runs `conv`, a causal depthwise conv1d update with SiLU and no bias
/// (GDN decode's conv, seed 003; causal-conv1d's
/// `causal_conv1d_update(x, conv_state, weight, None, "silu")`, vLLM's
/// Triton port), through the arms `RAND` (normal data), `WIDE` (inputs
/// 60x wider: pre-activations past SiLU's f32 `exp` overflow) and `LONG`
/// (a state of `L = d_conv` to `d_conv + 2` inputs, longer than the
/// window needs, as causal-conv1d's `state_len >= width - 1` allows: the
/// window reads its trailing `d_conv - 1`, the whole state shifts) and
/// judges it against core's conv.
///
/// The callable: `conv(x, conv_state, weight, out, final_state)`, float32
/// arrays (elements, causal-conv1d's layouts):
/// - `x`: `[B, dim, t]`, `t` new inputs per channel, oldest first;
/// - `conv_state`: `[B, dim, L]`, the previous `L` inputs, oldest first
///   (`L = d_conv - 1` except on `LONG`);
/// - `weight`: `[dim, d_conv]`, tap `d_conv - 1` on the newest input
///   (cross-correlation);
/// - `out`: `[B, dim, t]` and `final_state`: `[B, dim, L]`, filled with
///   NaN;
///
/// computing `out[b, c, r] = silu(sum_i weight[c, i] * win[i])` over the
/// window of the `d_conv` inputs ending at `x[b, c, r]` (state then `x`),
/// and `final_state`, the last `L` inputs; writing both and
/// returning None, or returning both as a tuple. It must not write its
/// inputs (an in-place kernel updates a copy: `final_state[...] =
/// conv_state`, then the kernel on `final_state`). With `states=True` the
/// last output is `states`: `[B, t, dim, L]`, the state after
/// every new input (what speculative verification rolls back to; the
/// last is the final state).
///
/// With `pool="decode"` (vLLM's `causal_conv1d_update` with
/// `conv_state_indices`; `kernel_oracle` docs of `gdn::slots`) the
/// callable is `conv(x, conv_state, weight, conv_state_indices, out,
/// final_pool)`: `conv_state` is a pool `[N, dim, L]` of more
/// slots than sequences, `conv_state_indices` `[B]` int32 each sequence's
/// slot (-1: padding, nothing read or written, its `out` not judged), and
/// `final_pool` (NaN-filled, `[N, dim, L]`) the whole pool after
/// the call: each live sequence's final state in its slot, every other
/// slot its bits.
///
/// Verdict per case: `final_state` bit for bit (data moved, never
/// computed); `out` within `2 B + 2^-100` of the oracle's per element
/// (`B = 8u |silu(a)| + 1.1 gamma_(d_conv+1) sum |w win|`, any order, FMA,
/// SiLU within 8 ulps; `kernel_oracle` docs of `gdn::conv_update::bound`)
/// or, with `bit_exact=True`, core's bits. Rows report ulps, the share of
/// bit-identical elements and the worst error-to-limit ratio.
///
/// Arguments: `shapes` `(dim, d_conv, t, B)` tuples (default
/// `CONV_SHAPES`), `arms` (`"RAND"`, `"WIDE"`, `"LONG"`; default all), `states`,
/// `pool` (`None` or `"decode"`; above), `seeds` / `trials` / `verbose` /
/// `name` as `check_fp8_block_gemm`.
///
/// Errors: `ValueError` on an unknown arm or pool mode, `pool="spec"` (the
/// conv's speculative window is not modelled), `states=True` with a pool,
/// a zero dimension, `d_conv` outside 2..=4 or a case over 2^26 elements,
/// before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (conv, shapes = None, arms = None, seeds = None, trials = 1, bit_exact = false, states = false, verbose = true, name = None, pool = None))]
#[allow(clippy::too_many_arguments)]
fn check_causal_conv1d_update<'py>(
    py: Python<'py>,
    conv: Bound<'py, PyAny>,
    shapes: Option<Vec<(usize, usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    bit_exact: bool,
    states: bool,
    verbose: bool,
    name: Option<String>,
    pool: Option<&str>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&conv, "conv")?;
    let seeds = Seeds::new(seeds, trials)?;
    let shape_list = shapes.unwrap_or_else(|| CONV_SHAPES.to_vec());
    let arms = arms_or_all(arms, &conv_update::Arm::ALL, conv_update::Arm::parse)?;
    let pool = pool_mode(pool)?;
    for &sh in &shape_list {
        conv_spec(sh, conv_update::Arm::Rand, None, states, pool)?;
    }
    let fname = callable_name(&conv, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "causal_conv1d_update".into(),
        ..CheckReport::default()
    };
    let declared = format!("{}; the state bit for bit", self::declared(bit_exact));
    let declared = declared.as_str();
    out.row(&format!(
        "check_causal_conv1d_update({fname}), declared: {declared}{}",
        if pool.is_some() {
            ", states in a pool of slots (decode)"
        } else {
            ""
        }
    ))?;
    out.row(&header("dim,d_conv,t,B", ["out", "state"]))?;
    for &sh in &shape_list {
        let (c, k, t, b) = sh;
        for &arm in &arms {
            let base = conv_update::Spec::base_seed(c, k, t, b, arm);
            for seed in seeds.for_case(base) {
                let s = conv_spec(sh, arm, Some(seed), states, pool)?;
                let d = s.generate().map_err(PyValueError::new_err)?;
                let want = conv_update::reference(&s, &d).map_err(PyValueError::new_err)?;
                let dims = conv_shapes(&s, &d);
                let inputs = conv_inputs(py, &d, &dims)?;
                let case = Case::new(
                    "causal_conv1d_update",
                    &fname,
                    [("dim", c), ("d_conv", k), ("t", t), ("B", b)],
                    (arm.name(), seed),
                    declared,
                    (bit_exact, &extra_kws(states, pool)),
                );
                let writers = d.pool.as_ref().map(|p| slot_writers(p, t));
                let o_place = |i: usize| {
                    format!(
                        "[{}, {}, {}] (sequence, channel, input)",
                        i / (c * t),
                        (i / t) % c,
                        i % t
                    )
                };
                let s_place = |i: usize| {
                    let (p, rows) = (d.state_len, s.state_rows());
                    let row = i / (c * p);
                    let (seq, r) = (row / rows, t - rows + row % rows);
                    let (ch, tap) = ((i / p) % c, i % p);
                    if let Some(w) = &writers {
                        let (slot, _, whose) = pool_place(w, c * p, i);
                        format!("[{slot}, {ch}, {tap}] (slot, channel, tap), {whose}")
                    } else if states {
                        format!("[{seq}, {r}, {ch}, {tap}] (sequence, input, channel, tap)")
                    } else {
                        format!("[{seq}, {ch}, {tap}] (sequence, channel, tap)")
                    }
                };
                case.run(
                    py,
                    &mut rep,
                    &mut out,
                    &conv,
                    &inputs,
                    [&dims[3], &dims[4]],
                    &want.padded,
                    |o, st| {
                        let v = conv_update::Verdict::judge(o, st, &want, bit_exact);
                        [
                            Judged {
                                what: "out",
                                part: v.out,
                                exact: bit_exact,
                                place: &o_place,
                            },
                            Judged {
                                what: if pool.is_some() {
                                    "final_pool"
                                } else {
                                    state_name(states)
                                },
                                part: v.state,
                                exact: true,
                                place: &s_place,
                            },
                        ]
                    },
                )?;
            }
        }
    }
    rep.finish(out, "")
}

/// Adds the two GDN checks, their cases and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("GDN_SHAPES", GDN_SHAPES.to_vec())?;
    m.add("CONV_SHAPES", CONV_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_causal_conv1d_update, m)?)?;
    m.add_function(wrap_pyfunction!(causal_conv1d_update_case, m)?)?;
    m.add_function(wrap_pyfunction!(check_gated_delta_rule, m)?)?;
    m.add_function(wrap_pyfunction!(gated_delta_rule_case, m)?)?;
    Ok(())
}
