//! MoE token alignment (`oracle::moe_align`): the table itself, and
//! `check_moe_align_block_size`, which runs any Python alignment (vLLM's
//! `moe_align_block_size`, a Triton or pure-torch form)
//! through the case library's cases (`kernel_oracle::moe_align`) and
//! judges the table it writes.

use crate::arrays::{array, to_vec, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, CheckReport, Input, Out, OutKind, Seeds,
};
use kernel_oracle::moe_align::{reference, within_caps, Arm, Case, Spec, Verdict};
use numpy::PyReadonlyArrayDyn;
use oracle::moe_align::{Align, MapMode, Order, Tail};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The map mode named `s` (`"mark"` or `"ignore"`, any case).
fn parse_map(s: &str) -> PyResult<MapMode> {
    match s.to_ascii_lowercase().as_str() {
        "mark" => Ok(MapMode::Mark),
        "ignore" => Ok(MapMode::Ignore),
        _ => Err(PyValueError::new_err(format!(
            "map {s:?}: expected \"mark\" (vLLM's default: non-local blocks get expert id -1) or \"ignore\" (ignore_invalid_experts=True)"
        ))),
    }
}

/// The order named `s` (`"any"` or `"stable"`, any case).
fn parse_order(s: &str) -> PyResult<Order> {
    match s.to_ascii_lowercase().as_str() {
        "any" => Ok(Order::Any),
        "stable" => Ok(Order::Stable),
        _ => Err(PyValueError::new_err(format!(
            "order {s:?}: expected \"any\" or \"stable\""
        ))),
    }
}

/// An int32 or int64 array's elements as i64 (`what` names it in the
/// error).
fn ids_of(what: &str, a: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if let Ok(a) = a.extract::<PyReadonlyArrayDyn<'_, i32>>() {
        Ok(to_vec(&a).into_iter().map(i64::from).collect())
    } else if let Ok(a) = a.extract::<PyReadonlyArrayDyn<'_, i64>>() {
        Ok(to_vec(&a))
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{what}: expected an int32 or int64 numpy array"
        )))
    }
}

/// The table of [`Align::align`] as three new arrays.
type Table<'py> = (
    Bound<'py, numpy::PyArrayDyn<i32>>,
    Bound<'py, numpy::PyArrayDyn<i32>>,
    Bound<'py, numpy::PyArrayDyn<i32>>,
);

/// moe_align_block_size(topk_ids, num_experts, block_size, expert_map=None, map="mark", pad_sorted_ids=False) -> (sorted_ids: int32[capacity], expert_ids: int32[max_blocks], num_tokens_post_pad: int32[1])
///
/// The MoE token alignment of `oracle::moe_align` for `topk_ids` (int32
/// or int64, any shape, read flat in C order: `numel` pairs): each
/// expert's pairs (flat indices) in increasing order, padded with `numel`
/// to a multiple of `block_size`, experts in increasing id; `expert_ids`
/// gives each block's expert; ids outside `0 .. num_experts` (negative
/// included) go nowhere. Past the used part: pads, and expert id -1.
///
/// `capacity = numel + num_experts (block_size - 1)` (rounded up to a
/// multiple of `block_size` with `pad_sorted_ids`; at most `numel
/// block_size` when `numel < num_experts`), `max_blocks = ceil(capacity /
/// block_size)`: vLLM's allocations.
///
/// `expert_map` (int32 `[num_experts]`, -1 for experts on other ranks):
/// under `map="mark"` every expert is counted and non-local blocks get -1
/// (vLLM's default); under `"ignore"` non-local pairs go nowhere and ids
/// are local (`ignore_invalid_experts=True`).
///
/// Errors: `ValueError` for a zero `block_size`, a map of the wrong length
/// or with a value that is neither -1 nor below `num_experts`, an unknown
/// map mode, a capacity past int32, or a table past the check's caps
/// (2^20 pairs, 4096 experts, 2^26 pairs times experts, 2^26 entries of
/// `sorted_ids`); `TypeError` for ids or a map that are not int32 or int64.
#[pyfunction]
#[pyo3(signature = (topk_ids, num_experts, block_size, expert_map = None, map = "mark", pad_sorted_ids = false))]
fn moe_align_block_size<'py>(
    py: Python<'py>,
    topk_ids: Bound<'py, PyAny>,
    num_experts: usize,
    block_size: usize,
    expert_map: Option<Bound<'py, PyAny>>,
    map: &str,
    pad_sorted_ids: bool,
) -> PyResult<Table<'py>> {
    let ids = ids_of("topk_ids", &topk_ids)?;
    let mode = parse_map(map)?;
    let m: Option<Vec<i32>> = match &expert_map {
        Some(a) => Some(
            ids_of("expert_map", a)?
                .into_iter()
                .map(|v| i32::try_from(v).unwrap_or(i32::MIN))
                .collect(),
        ),
        None => None,
    };
    within_caps(ids.len(), num_experts, 0).map_err(PyValueError::new_err)?;
    let a = Align {
        num_experts,
        block_size,
        expert_map: m.as_deref().map(|m| (m, mode)),
        pad_sorted_ids,
    };
    let cap = a.capacity(ids.len()).map_err(value_error)?;
    within_caps(ids.len(), num_experts, cap).map_err(PyValueError::new_err)?;
    let blocks = a.max_blocks(ids.len()).map_err(value_error)?;
    let mut sorted = vec![0i32; cap];
    let mut experts = vec![0i32; blocks];
    let total = a
        .align(&ids, &mut sorted, &mut experts)
        .map_err(value_error)?;
    Ok((
        array(py, &[cap], sorted)?,
        array(py, &[blocks], experts)?,
        array(py, &[1], vec![total as i32])?,
    ))
}

/// The shapes `(tokens, topk, num_experts, block_size)` a check runs by
/// default: one DeepSeek-V3 decode token (256 experts, 8 picks); three
/// tokens (fewer pairs than experts: the capacity shrinks); an empty batch
/// (a data-parallel rank with no tokens); Mixtral (8 experts, 2 picks), in
/// decode and in prefill (vLLM's small-batch path under 1024 pairs and 64
/// experts, its large path past them); Qwen2-MoE's 60 experts (not a
/// multiple of 32); Qwen3-MoE's 128 experts at 2400 pairs; 32,800 pairs
/// over 256 experts in blocks of 64 (many sorting blocks; past 32,767, so a
/// pair index kept in 16 bits shows); 512 experts in blocks of 128.
pub const MOE_ALIGN_SHAPES: [(usize, usize, usize, usize); 9] = [
    (1, 8, 256, 16),
    (3, 8, 256, 64),
    (0, 8, 256, 16),
    (100, 2, 8, 16),
    (2048, 2, 8, 64),
    (200, 4, 60, 16),
    (300, 8, 128, 32),
    (4100, 8, 256, 64),
    (1024, 8, 512, 128),
];

/// A spec from the Python arguments.
fn spec(
    shape: (usize, usize, usize, usize),
    map: Option<MapMode>,
    pad_sorted_ids: bool,
    arm: Arm,
    seed: Option<u64>,
) -> Spec {
    let (tokens, topk, num_experts, block_size) = shape;
    Spec {
        tokens,
        topk,
        num_experts,
        block_size,
        map,
        pad_sorted_ids,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(tokens, topk, num_experts, block_size, arm)),
    }
}

/// moe_align_case(tokens, topk, num_experts, block_size, arm, seed=None, map=None, pad_sorted_ids=False) -> dict
///
/// One case of `check_moe_align_block_size` as new arrays: `topk_ids`
/// (int32 `[tokens, topk]`), `expert_map` (int32 `[num_experts]`, or None
/// without a map mode), and the oracle's `sorted_ids`, `expert_ids` and
/// `num_tokens_post_pad` (stable order). `seed` None: the check's first
/// seed.
///
/// Errors: `ValueError` for an unknown arm or map mode, or a zero
/// dimension.
#[pyfunction]
#[pyo3(signature = (tokens, topk, num_experts, block_size, arm, seed = None, map = None, pad_sorted_ids = false))]
#[allow(clippy::too_many_arguments)]
fn moe_align_case<'py>(
    py: Python<'py>,
    tokens: usize,
    topk: usize,
    num_experts: usize,
    block_size: usize,
    arm: &str,
    seed: Option<u64>,
    map: Option<&str>,
    pad_sorted_ids: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let map = map.map(parse_map).transpose()?;
    let s = spec(
        (tokens, topk, num_experts, block_size),
        map,
        pad_sorted_ids,
        arm,
        seed,
    );
    let c = s.generate().map_err(PyValueError::new_err)?;
    let (sorted, experts, total) = reference(&s, &c).map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("topk_ids", array(py, &[tokens, topk], c.ids)?)?;
    match c.expert_map {
        Some(m) => dict.set_item("expert_map", array(py, &[num_experts], m)?)?,
        None => dict.set_item("expert_map", py.None())?,
    }
    dict.set_item("sorted_ids", array(py, &[sorted.len()], sorted)?)?;
    dict.set_item("expert_ids", array(py, &[experts.len()], experts)?)?;
    dict.set_item("num_tokens_post_pad", array(py, &[1], vec![total as i32])?)?;
    Ok(dict)
}

/// check_moe_align_block_size(align, shapes=None, map=None, order="any", pad_sorted_ids=False, tail_sorted=False, tail_expert=None, ids_dtype="int32", arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `align`, an MoE token alignment, through the arms `RAND` (each
/// token's `topk` distinct experts), `SKEW` (hot experts: long segments,
/// most experts empty), `EDGE` (counts of 1, `block_size - 1`,
/// `block_size`, `block_size + 1`, `2 block_size`; the first and last
/// expert used) and `INVALID` (one id in eight outside `0 ..
/// num_experts`: -1, -2, `num_experts`, `num_experts + 1`, `2^31 - 1`,
/// which go nowhere), and judges its table against
/// `moe_align_block_size(...)`: `num_tokens_post_pad` exactly; every used
/// block's expert id; each expert's segment holding its pairs once each
/// and the pad `numel` for the rest, in any order (`order="any"`, as
/// vLLM's `atomicAdd` places them) or pairs increasing then pads
/// (`"stable"`).
///
/// The callable: `align(topk_ids, sorted_ids, expert_ids,
/// num_tokens_post_pad)`, or with a map `align(topk_ids, expert_map,
/// sorted_ids, expert_ids, num_tokens_post_pad)`: `topk_ids` int32
/// `[tokens, topk]`, `expert_map` int32 `[num_experts]`, the outputs int32
/// `[capacity]`, `[max_blocks]` and `[1]` (vLLM's allocations; see
/// `moe_align_block_size`), handed filled with `-2^31`; writing them and
/// returning None, or returning the three arrays as a tuple. vLLM:
/// `lambda t, s, e, n: ops.moe_align_block_size(torch.from_numpy(t).cuda(),
/// E, bs, ...)` then copying back (see `python/examples`).
///
/// `map`: None (no map), `"mark"` or `"ignore"` (a map drawn per case: a
/// rank's contiguous share of 2, 4 or 8 ranks, or one in four scattered).
/// `tail_sorted` / `tail_expert`: declare what the outputs hold past the
/// used part (pads; the given expert id), which is otherwise not judged
/// (under `"mark"` vLLM's wrapper maps its tail fill through the map: do
/// not declare -1 there). `ids_dtype`: `topk_ids` as `"int32"` or
/// `"int64"` (what `torch.topk` returns).
///
/// Errors: `ValueError` for an unknown arm, map mode, order or ids dtype,
/// a zero `topk`, `num_experts` or `block_size` (`tokens` 0 is an empty
/// batch), or a case past the caps (2^20 pairs, 4096 experts, 2^26 pairs
/// times experts, 2^26 entries of `sorted_ids`), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (align, shapes = None, map = None, order = "any", pad_sorted_ids = false, tail_sorted = false, tail_expert = None, ids_dtype = "int32", arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_moe_align_block_size<'py>(
    py: Python<'py>,
    align: Bound<'py, PyAny>,
    shapes: Option<Vec<(usize, usize, usize, usize)>>,
    map: Option<&str>,
    order: &str,
    pad_sorted_ids: bool,
    tail_sorted: bool,
    tail_expert: Option<i32>,
    ids_dtype: &str,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&align, "align")?;
    let seeds = Seeds::new(seeds, trials)?;
    let map_name = map.map(str::to_ascii_lowercase);
    let map = map.map(parse_map).transpose()?;
    let order_name = order.to_ascii_lowercase();
    let wide = match ids_dtype {
        "int32" => false,
        "int64" => true,
        _ => {
            return Err(PyValueError::new_err(format!(
                "ids_dtype {ids_dtype:?}: expected \"int32\" or \"int64\" (torch.topk's)"
            )))
        }
    };
    let order = parse_order(order)?;
    let tail = Tail {
        sorted: tail_sorted,
        expert: tail_expert,
    };
    let shapes = shapes.unwrap_or_else(|| MOE_ALIGN_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &shape in &shapes {
        spec(shape, map, pad_sorted_ids, Arm::Rand, Some(0))
            .valid()
            .map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&align, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "moe_align_block_size".into(),
        ..CheckReport::default()
    };
    let map_kw = map_name
        .as_ref()
        .map(|m| format!(", map=\"{m}\""))
        .unwrap_or_default();
    let mut kw = format!("{map_kw}, order=\"{order_name}\"");
    if pad_sorted_ids {
        kw.push_str(", pad_sorted_ids=True");
    }
    if tail_sorted {
        kw.push_str(", tail_sorted=True");
    }
    if let Some(e) = tail_expert {
        let _ = write!(kw, ", tail_expert={e}");
    }
    if wide {
        kw.push_str(", ids_dtype=\"int64\"");
    }
    out.row(&format!("check_moe_align_block_size({fname}{kw})"))?;
    out.row(&format!(
        "{:<18} {:>7} {:>18} {:>13} {:>11} {:>11} {:>9}  verdict",
        "tokens,topk,E,bs", "arm", "seed", "total", "blocks", "segments", "call_ms"
    ))?;
    for &shape in &shapes {
        let (tokens, topk, ne, bs) = shape;
        for &arm in &arms {
            let base = spec(shape, map, pad_sorted_ids, arm, None).seed;
            for seed in seeds.for_case(base) {
                let sp = spec(shape, map, pad_sorted_ids, arm, Some(seed));
                let Case { ids, expert_map } = sp.generate().map_err(PyValueError::new_err)?;
                let (cap, blocks) = sp.lengths().map_err(PyValueError::new_err)?;
                let ids64: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
                let mut inputs = vec![(
                    "topk_ids",
                    if wide {
                        Input::I64(array(py, &[tokens, topk], ids64.clone())?, &ids64)
                    } else {
                        Input::I32(array(py, &[tokens, topk], ids.clone())?, &ids)
                    },
                )];
                if let Some(m) = &expert_map {
                    inputs.push(("expert_map", Input::I32(array(py, &[ne], m.clone())?, m)));
                }
                let (called, ms) = call_typed(
                    py,
                    &align,
                    Vec::new(),
                    &inputs,
                    &[
                        (&[cap], OutKind::I32),
                        (&[blocks], OutKind::I32),
                        (&[1], OutKind::I32),
                    ],
                )?;
                let a = arm.name();
                let row = format!(
                    "{:<18} {a:>7} 0x{seed:016x}",
                    format!("{tokens},{topk},{ne},{bs}")
                );
                let repro = format!(
                    "kernel_oracle.check_moe_align_block_size({fname}, shapes=[({tokens}, {topk}, {ne}, {bs})]{kw}, arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL moe_align_block_size: tokens={tokens} topk={topk} num_experts={ne} block_size={bs} arm={a} seed=0x{seed:016x}"
                );
                let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)? else {
                    continue;
                };
                let case = Case { ids, expert_map };
                let v = Verdict::judge(
                    &sp,
                    &case,
                    order,
                    tail,
                    got[0].i32(),
                    got[1].i32(),
                    got[2].i32()[0],
                )
                .map_err(PyValueError::new_err)?;
                let pass = v.pass() && written.is_empty();
                out.row(&format!(
                    "{row} {:>6}/{:<6} {:>5}/{:<5} {:>5}/{:<5} {ms:>9.2}  {}",
                    v.total.0,
                    v.total.1,
                    v.blocks.1,
                    v.blocks.0,
                    v.segments.1,
                    v.segments.0,
                    if pass { "PASS" } else { "FAIL" }
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                if let Some(f) = v.first {
                    let _ = writeln!(
                        r,
                        "  first: {f}\n  total {} (want {}); expert ids of {} of {} used blocks differ; {} of {} segments hold other pairs",
                        v.total.0, v.total.1, v.blocks.1, v.blocks.0, v.segments.1, v.segments.0
                    );
                }
                let map_arg = map_name
                    .as_ref()
                    .map(|m| format!(", map=\"{m}\""))
                    .unwrap_or_default();
                let pad_arg = if pad_sorted_ids {
                    ", pad_sorted_ids=True"
                } else {
                    ""
                };
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's table:\n  kernel_oracle.moe_align_case({tokens}, {topk}, {ne}, {bs}, \"{a}\", seed=0x{seed:016x}{map_arg}{pad_arg})"
                );
                rep.fail(&mut out, r, repro)?;
            }
        }
    }
    rep.finish(out, "")
}

/// Adds the MoE alignment, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MOE_ALIGN_SHAPES", MOE_ALIGN_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(moe_align_block_size, m)?)?;
    m.add_function(wrap_pyfunction!(check_moe_align_block_size, m)?)?;
    m.add_function(wrap_pyfunction!(moe_align_case, m)?)?;
    Ok(())
}
