//! MoE top-k routing (`oracle::moe_routing`): `check_moe_routing`, which
//! runs any Python router (vLLM's `topk_softmax` / `fused_topk` and
//! `grouped_topk`, SGLang's `biased_grouped_topk`, Hugging Face's
//! routers, a Triton kernel) through the case library's cases
//! (`kernel_oracle::moe_routing`) and judges the chosen experts exactly
//! wherever the scores' enclosures decide them and the weights within
//! their enclosures, naming the known routings the output is consistent
//! with.

use crate::arrays::array;
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, names_or, parse_out_dtype,
    CheckReport, Held, Input, Out, OutKind, Seeds,
};
use kernel_oracle::moe_routing::{
    describe, identify, judge, label, reference, within_caps, Arm, Dims, Spec,
};
use oracle::dtype::Dtype;
use oracle::moe_routing::{GroupScore, Grouping, Routing, Scoring};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(tokens, num_experts)` a check runs by default, each where
/// the declared routing allows it (its groups divide the experts, `k`
/// fits): Mixtral's 8 experts at one token and at 130 (vLLM's
/// `topk_softmax` packs several small rows to a warp: a row that reads
/// its neighbour's logits fails there), Qwen1.5-MoE's 60 (not a power
/// of two: vLLM's `topk_softmax` leaves its specialised paths), 64
/// (OLMoE, DeepSeek-V2-Lite) at 64 and 1100 tokens (past a kernel's
/// 1024-token grid), Qwen3's 128, DeepSeek-V2's 160, DeepSeek-V3's 256 at
/// one token (decode), 3 and 257, Kimi K2's 384.
pub const MOE_ROUTING_SHAPES: [Dims; 11] = [
    (1, 8),
    (130, 8),
    (7, 60),
    (64, 64),
    (1100, 64),
    (5, 128),
    (33, 160),
    (1, 256),
    (3, 256),
    (257, 256),
    (2, 384),
];

/// The declared routing from the check's keyword arguments.
#[allow(clippy::too_many_arguments)]
fn routing_of(
    top_k: usize,
    scoring: &str,
    renormalize: bool,
    n_group: Option<usize>,
    topk_group: Option<usize>,
    group_score: Option<&str>,
    bias: bool,
    routed_scaling_factor: f32,
    exp_ulps: u32,
) -> PyResult<Routing> {
    let scoring = match scoring {
        "softmax" => Scoring::Softmax,
        "sigmoid" => Scoring::Sigmoid,
        s => {
            return Err(PyValueError::new_err(format!(
                "scoring {s:?}: \"softmax\" or \"sigmoid\""
            )))
        }
    };
    let grouping = match (n_group, topk_group) {
        (None, None) if group_score.is_some() => {
            return Err(PyValueError::new_err(
                "group_score without n_group and topk_group: there are no groups",
            ))
        }
        (None, None) => None,
        (Some(n_group), Some(topk_group)) => {
            let score = match group_score.unwrap_or(if bias { "top2_sum" } else { "max" }) {
                "max" => GroupScore::Max,
                "top2_sum" => GroupScore::Top2Sum,
                s => {
                    return Err(PyValueError::new_err(format!(
                        "group_score {s:?}: \"max\" or \"top2_sum\""
                    )))
                }
            };
            Some(Grouping {
                n_group,
                topk_group,
                score,
            })
        }
        _ => {
            return Err(PyValueError::new_err(
                "n_group and topk_group: both or neither",
            ))
        }
    };
    Ok(Routing {
        scoring,
        top_k,
        grouping,
        renormalize,
        routed_scaling_factor,
        exp_ulps,
    })
}

fn spec(dims: Dims, routing: Routing, bias: bool, d: Dtype, arm: Arm, seed: Option<u64>) -> Spec {
    Spec {
        dims,
        routing,
        bias,
        dtype: d,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, d, arm)),
    }
}

/// moe_routing_case(tokens, num_experts, arm, top_k, seed=None, scoring="softmax", renormalize=True, n_group=None, topk_group=None, group_score=None, bias=False, routed_scaling_factor=1.0, dtype="bfloat16") -> dict
///
/// One case of `check_moe_routing` as new arrays, as the callable gets
/// them: `logits` (`[T, E]`, uint16 bit patterns of `dtype`, or float32),
/// `bias` (float32 `[E]`, or None), and a binary32 reference router's
/// `ids` (int32 `[T, k]`, descending score, ties to the lower index) and
/// `weights` (float32 `[T, k]`): one output the check accepts, not the
/// only one. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, scoring or dtype, a routing
/// the shape cannot take, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (tokens, num_experts, arm, top_k, seed = None, scoring = "softmax", renormalize = true, n_group = None, topk_group = None, group_score = None, bias = false, routed_scaling_factor = 1.0, dtype = "bfloat16"))]
#[allow(clippy::too_many_arguments)]
fn moe_routing_case<'py>(
    py: Python<'py>,
    tokens: usize,
    num_experts: usize,
    arm: &str,
    top_k: usize,
    seed: Option<u64>,
    scoring: &str,
    renormalize: bool,
    n_group: Option<usize>,
    topk_group: Option<usize>,
    group_score: Option<&str>,
    bias: bool,
    routed_scaling_factor: f32,
    dtype: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let r = routing_of(
        top_k,
        scoring,
        renormalize,
        n_group,
        topk_group,
        group_score,
        bias,
        routed_scaling_factor,
        2,
    )?;
    let dims = (tokens, num_experts);
    let sp = spec(dims, r, bias, d, arm, seed);
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let (ids, w) = py.detach(|| reference(&sp, &case));
    let dict = PyDict::new(py);
    let shape = [tokens, num_experts];
    match Held::new(d, &case.logits) {
        Held::F32(v) => dict.set_item("logits", array(py, &shape, v)?)?,
        Held::U16(v) => dict.set_item("logits", array(py, &shape, v)?)?,
    }
    match &case.bias {
        Some(b) => dict.set_item("bias", array(py, &[num_experts], b.clone())?)?,
        None => dict.set_item("bias", py.None())?,
    }
    let ids: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
    dict.set_item("ids", array(py, &[tokens, top_k], ids)?)?;
    dict.set_item("weights", array(py, &[tokens, top_k], w)?)?;
    Ok(dict)
}

/// check_moe_routing(fn, top_k, scoring="softmax", renormalize=True, n_group=None, topk_group=None, group_score=None, bias=False, routed_scaling_factor=1.0, exp_ulps=2, sorted=False, dtype="bfloat16", out_dtype="float32", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, an MoE router's top-k (logits to chosen experts and their
/// weights), through the arms `RAND`, `TIES` (three logit values: exact
/// ties), `SKEW` (softmax: logits shifted by 60 to 90, so `exp` without
/// the maximum subtracted overflows; sigmoid: far-negative logits),
/// `BIAS` (with `bias=True` only: a bias that reorders the leaders, every
/// biased score negative, so masking the groups not kept with 0 fails) and
/// `GROUPS` (with groups only: a maximum and a top-2 sum keep different
/// groups), and judges it against `oracle::moe_routing`:
/// - rule `ROUTE-PROB`: `p = softmax(logits)` or `sigmoid(logits)`;
/// - `ROUTE-SCORE`: `s = p + bias` chooses, `p` weighs;
/// - `ROUTE-GROUP` (`n_group`, `topk_group`; `group_score` `"max"`, or
///   `"top2_sum"`, the default with a bias): groups first;
/// - `ROUTE-TOPK`: the `top_k` largest `s`, distinct ids, ties in any order
///   (descending `s` when `sorted`: the biased score, not the weight);
/// - `ROUTE-WEIGHT`: `p`, renormalised over the chosen when `renormalize`,
///   times `routed_scaling_factor`.
/// The scores are held to a sound enclosure of any binary32 evaluation in
/// the field's form (a two-pass softmax with the maximum subtracted, or
/// `1 / (1 + exp(-l))`) with an `exp` within `exp_ulps` ulps and any
/// summation order, so the
/// ids are judged exactly wherever the enclosures separate (the rows count
/// these decided tokens) and may differ only between experts whose scores
/// lie within the bound of each other; each weight must lie in its
/// enclosure, rounded to `out_dtype`.
///
/// The callable: `fn(logits, bias, weights, ids)` with a bias, else
/// `fn(logits, weights, ids)`; `logits` `[T, E]` (uint16 bit patterns of
/// `dtype`, numpy having no bfloat16, or float32), `bias` float32 `[E]`,
/// `weights` `[T, top_k]` in `out_dtype` (float32, or uint16 bit
/// patterns) filled with NaN and `ids` int32 `[T, top_k]` filled with
/// `INT32_MIN`: write both and return None, or return `(weights, ids)`
/// (int32: `.to(torch.int32)` first). The inputs must be left as given.
/// A kernel that refuses a shape raises `kernel_oracle.Refused`.
/// `shapes` (`[(tokens, num_experts)]`, default `MOE_ROUTING_SHAPES`
/// where the routing fits), `arms`, `seeds`, `trials`, `verbose` and
/// `name` as in `check_fp8_block_gemm`.
///
/// Each row names the known routings (scoring, group score,
/// renormalisation, with the declared `top_k`, groups and factor) the
/// output is consistent with.
///
/// Errors: `ValueError` for an unknown scoring, group score, dtype or arm,
/// `top_k`, `n_group` or `topk_group` below 1, a routing no shape takes
/// (`n_group` not dividing the experts, `top_k` past the candidates,
/// `exp_ulps` outside 2 to 64, a factor not finite and positive), a given
/// shape the routing cannot take, or one over the caps (2^22 logits),
/// before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, top_k, scoring = "softmax", renormalize = true, n_group = None, topk_group = None, group_score = None, bias = false, routed_scaling_factor = 1.0, exp_ulps = 2, sorted = false, dtype = "bfloat16", out_dtype = "float32", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_moe_routing<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    top_k: i64,
    scoring: &str,
    renormalize: bool,
    n_group: Option<i64>,
    topk_group: Option<i64>,
    group_score: Option<&str>,
    bias: bool,
    routed_scaling_factor: f32,
    exp_ulps: i64,
    sorted: bool,
    dtype: &str,
    out_dtype: &str,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let top_k: usize = count("top_k", top_k, 1)?;
    let n_group: Option<usize> = n_group.map(|g| count("n_group", g, 1)).transpose()?;
    let topk_group: Option<usize> = topk_group.map(|g| count("topk_group", g, 1)).transpose()?;
    let exp_ulps: u32 = count("exp_ulps", exp_ulps, 0)?;
    let r = routing_of(
        top_k,
        scoring,
        renormalize,
        n_group,
        topk_group,
        group_score,
        bias,
        routed_scaling_factor,
        exp_ulps,
    )?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let wd = parse_out_dtype(out_dtype)?;
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let shapes = match shapes {
        Some(s) => {
            for &dims in &s {
                within_caps(dims, &r).map_err(PyValueError::new_err)?;
            }
            s
        }
        None => {
            let s: Vec<Dims> = MOE_ROUTING_SHAPES
                .into_iter()
                .filter(|&dims| within_caps(dims, &r).is_ok())
                .collect();
            if s.is_empty() {
                let why = within_caps(MOE_ROUTING_SHAPES[9], &r).unwrap_err();
                return Err(PyValueError::new_err(format!(
                    "no default shape takes the routing: {why}"
                )));
            }
            s
        }
    };
    let fname = callable_name(&r#fn, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "moe_routing".into(),
        ..CheckReport::default()
    };
    let declared = label(&r);
    let py_bool = |b: bool| if b { "True" } else { "False" };
    let groups_kw = match r.grouping {
        None => String::new(),
        Some(g) => format!(
            ", n_group={}, topk_group={}, group_score=\"{}\"",
            g.n_group,
            g.topk_group,
            match g.score {
                GroupScore::Max => "max",
                GroupScore::Top2Sum => "top2_sum",
            }
        ),
    };
    let kw = format!(
        "top_k={top_k}, scoring=\"{scoring}\", renormalize={}{groups_kw}, bias={}, routed_scaling_factor={routed_scaling_factor:?}, exp_ulps={exp_ulps}, sorted={}, dtype=\"{}\", out_dtype=\"{}\"",
        py_bool(renormalize),
        py_bool(bias),
        py_bool(sorted),
        d.name(),
        wd.name()
    );
    o.row(&format!(
        "check_moe_routing({fname}), {} logits, {} weights, top {top_k}, declared: {declared}{}",
        d.name(),
        wd.name(),
        if bias { ", biased choice" } else { "" }
    ))?;
    o.row(&format!(
        "{:<12} {:>7} {:>18} {:>13} {:>9} {:>9}  verdict  consistent with",
        "T,E", "arm", "seed", "tokens failed", "decided", "call_ms"
    ))?;
    let mut all = crate::check::Every::<Routing>::default();
    for &dims in &shapes {
        let (t_n, e) = dims;
        for &arm in &arms {
            if !arm.runs_on(&r, bias) {
                continue;
            }
            for seed in seeds.for_case(Spec::base_seed(dims, d, arm)) {
                let sp = spec(dims, r, bias, d, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let logits = Held::new(d, &case.logits);
                let bias_held = case.bias.clone().unwrap_or_default();
                let mut inputs = vec![("logits", logits.input(py, &[t_n, e])?)];
                if bias {
                    inputs.push((
                        "bias",
                        Input::F32(array(py, &[e], bias_held.clone())?, &bias_held),
                    ));
                }
                let outs: [(&[usize], OutKind); 2] = [
                    (&[t_n, top_k], OutKind::of(wd)),
                    (&[t_n, top_k], OutKind::I32),
                ];
                let (called, ms) = call_typed(py, &r#fn, Vec::new(), &inputs, &outs)?;
                let a = arm.name();
                let row = format!("{:<12} {a:>7} 0x{seed:016x}", format!("{t_n},{e}"));
                let repro = format!(
                    "kernel_oracle.check_moe_routing({fname}, {kw}, shapes=[({t_n}, {e})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL moe_routing: (tokens, num_experts) = ({t_n}, {e}) arm={a} seed=0x{seed:016x}, declared: {declared}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let wbits = got[0].bits(wd);
                let ids: Vec<i64> = got[1].i32().iter().map(|&x| i64::from(x)).collect();
                let v = py
                    .detach(|| judge(&sp, &case, sorted, &ids, &wbits, wd))
                    .map_err(PyValueError::new_err)?;
                let found = py
                    .detach(|| identify(&sp, &case, &ids, &wbits, wd))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                let matches = list(&found);
                let pass = v.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>6}/{:<6} {:>9} {ms:>9.2}  {}  {matches}",
                    v.failed,
                    v.tokens,
                    v.decided,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut rr = failure_head(&head, &written);
                let _ = writeln!(
                    rr,
                    "  {} of {} tokens fail ({} decided by the enclosures); the first:",
                    v.failed, v.tokens, v.decided
                );
                for (t, f) in &v.faults {
                    let k = top_k;
                    let _ = writeln!(
                        rr,
                        "    {}; ids {:?}",
                        describe(*t, f, wd),
                        &ids[t * k..(t + 1) * k]
                    );
                }
                let _ = writeln!(rr, "  the output is consistent with: {matches}");
                let _ = write!(
                    rr,
                    "reproduce:\n  {repro}\nthe case's arrays and a reference's outputs:\n  kernel_oracle.moe_routing_case({t_n}, {e}, \"{a}\", {top_k}, seed=0x{seed:016x}, scoring=\"{scoring}\", renormalize={}{groups_kw}, bias={}, routed_scaling_factor={routed_scaling_factor:?}, dtype=\"{}\")",
                    py_bool(renormalize),
                    py_bool(bias),
                    d.name()
                );
                rep.fail(&mut o, rr, repro)?;
            }
        }
    }
    let sum = all.phrase(label);
    rep.finish(
        o,
        &format!("consistent on every compared case with: {sum}; "),
    )
}

/// `"softmax, renormalized; sigmoid, renormalized"`, or `none known`.
fn list(v: &[Routing]) -> String {
    let names: Vec<String> = v.iter().map(label).collect();
    names_or(&names, "; ", "none known")
}

/// Adds the routing check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MOE_ROUTING_SHAPES", MOE_ROUTING_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_moe_routing, m)?)?;
    m.add_function(wrap_pyfunction!(moe_routing_case, m)?)?;
    Ok(())
}
