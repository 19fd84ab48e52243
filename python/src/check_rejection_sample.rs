//! Speculative decoding's rejection sampler (`oracle::rejection_sample`):
//! `check_rejection_sample`, which runs any Python rejection sampler
//! (vLLM v1's `rejection_sample` and its Triton kernels, a form of
//! FlashInfer's `chain_speculative_sampling`, a torch loop) through the
//! case library's cases (`kernel_oracle::rejection_sample`) and judges
//! every emitted token bit for bit under the declared acceptance test
//! and race form, naming every known declaration the output matches.

use crate::arrays::array;
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, shapes_or, CheckReport, Every, Input,
    Out, OutKind, Seeds,
};
use kernel_oracle::rejection_sample::{
    describe, identify, judge, label, list, parse_accept, parse_race, reference, within_caps, Arm,
    Case, Dims, Spec,
};
use oracle::rejection_sample::Declared;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(batch, k, vocab)` a check runs by default: a vocabulary
/// of 7 with one draft token (below a vector), 129 (one past a power of
/// two) with 3, 1000 with 4 over 8 requests, Llama-2's 32000 with 5, and
/// Qwen2's 151936 with 7 over 2 requests (past vLLM's 8192-token blocks
/// of the race: a kernel that keeps the first block's maximum on a tie
/// across blocks, or replaces it, shows there), and 1280 with 9 over 32
/// requests (a vocabulary one partial block of 256 past 1024, and draft
/// positions past 8: a kernel that loops over whole blocks only, or caps
/// the positions, fails).
pub const REJECTION_SAMPLE_SHAPES: [Dims; 6] = [
    (4, 1, 7),
    (5, 3, 129),
    (8, 4, 1000),
    (3, 5, 32000),
    (2, 7, 151936),
    (32, 9, 1280),
];

fn declared_of(accept: &str, race: &str) -> PyResult<Declared> {
    Ok(Declared {
        accept: parse_accept(accept).map_err(PyValueError::new_err)?,
        race: parse_race(race).map_err(PyValueError::new_err)?,
    })
}

fn spec(dims: Dims, arm: Arm, seed: Option<u64>) -> Spec {
    Spec {
        dims,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, arm)),
    }
}

/// rejection_sample_case(batch, k, vocab, arm, seed=None, accept="divide_ge", race="reciprocal") -> dict
///
/// One case of `check_rejection_sample` as new arrays: `draft_token_ids`
/// (int32 `[B, k]`), `draft_probs` (float32 `[B, k, V]`, None in
/// `NGRAM`), `target_probs` (float32 `[B, k + 1, V]`), `bonus_token_ids`
/// (int32 `[B]`), `uniform` (float32 `[B, k]`), `noise` (float32 `[B,
/// V]`), `is_greedy` (uint8 `[B]`), and `out`, the oracle's emitted
/// tokens (int32 `[B, k + 1]`, `-1` after the first rejection) under the
/// declaration named. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm or form, or a shape the check
/// refuses.
#[pyfunction]
#[pyo3(signature = (batch, k, vocab, arm, seed = None, accept = "divide_ge", race = "reciprocal"))]
#[allow(clippy::too_many_arguments)]
fn rejection_sample_case<'py>(
    py: Python<'py>,
    batch: usize,
    k: usize,
    vocab: usize,
    arm: &str,
    seed: Option<u64>,
    accept: &str,
    race: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = declared_of(accept, race)?;
    let dims = (batch, k, vocab);
    within_caps(dims).map_err(PyValueError::new_err)?;
    let case = spec(dims, arm, seed)
        .generate()
        .map_err(PyValueError::new_err)?;
    let out = py.detach(|| reference(&case, &decl));
    let dict = PyDict::new(py);
    dict.set_item(
        "draft_token_ids",
        array(py, &[batch, k], case.draft_token_ids.clone())?,
    )?;
    match &case.draft_probs {
        Some(q) => dict.set_item("draft_probs", array(py, &[batch, k, vocab], q.clone())?)?,
        None => dict.set_item("draft_probs", py.None())?,
    }
    dict.set_item(
        "target_probs",
        array(py, &[batch, k + 1, vocab], case.target_probs.clone())?,
    )?;
    dict.set_item(
        "bonus_token_ids",
        array(py, &[batch], case.bonus_token_ids.clone())?,
    )?;
    dict.set_item("uniform", array(py, &[batch, k], case.uniform.clone())?)?;
    dict.set_item("noise", array(py, &[batch, vocab], case.noise.clone())?)?;
    dict.set_item("is_greedy", array(py, &[batch], case.is_greedy.clone())?)?;
    dict.set_item("out", array(py, &[batch, k + 1], out)?)?;
    Ok(dict)
}

/// The inputs in the callable's order.
fn inputs<'a, 'py>(py: Python<'py>, c: &'a Case) -> PyResult<Vec<(&'static str, Input<'a, 'py>)>> {
    let (b, k, v) = c.dims;
    let mut ins = vec![(
        "draft_token_ids",
        Input::I32(
            array(py, &[b, k], c.draft_token_ids.clone())?,
            &c.draft_token_ids,
        ),
    )];
    ins.push((
        "draft_probs",
        match &c.draft_probs {
            Some(q) => Input::F32(array(py, &[b, k, v], q.clone())?, q),
            None => Input::Scalar(py.None().into_bound(py)),
        },
    ));
    ins.push((
        "target_probs",
        Input::F32(
            array(py, &[b, k + 1, v], c.target_probs.clone())?,
            &c.target_probs,
        ),
    ));
    ins.push((
        "bonus_token_ids",
        Input::I32(
            array(py, &[b], c.bonus_token_ids.clone())?,
            &c.bonus_token_ids,
        ),
    ));
    ins.push((
        "uniform",
        Input::F32(array(py, &[b, k], c.uniform.clone())?, &c.uniform),
    ));
    ins.push((
        "noise",
        Input::F32(array(py, &[b, v], c.noise.clone())?, &c.noise),
    ));
    ins.push((
        "is_greedy",
        Input::U8(array(py, &[b], c.is_greedy.clone())?, &c.is_greedy),
    ));
    Ok(ins)
}

/// check_rejection_sample(sample, shapes=None, arms=None, seeds=None, trials=1, accept="divide_ge", race="reciprocal", verbose=True, name=None) -> CheckReport
///
/// Runs `sample`, speculative decoding's rejection sampler, through the
/// arms `RAND`, `TIES` (an exact `p / q = u` acceptance tie, and a race
/// whose two best scores are equal), `ZERO_Q` (draft probability 0 at
/// the draft token; half the rows with no positive residual), `EARLY`
/// (every request rejected at position 0), `ALL` (every draft accepted:
/// the bonus token), `NGRAM` (`draft_probs` None, a `u = p` tie per
/// request) and `GREEDY` (three requests in four greedy, tied maxima),
/// and judges every emitted token bit for bit against
/// `oracle::rejection_sample` (the random numbers are inputs, so the
/// sampler is deterministic):
/// - `RS-GREEDY`: a greedy request emits the target's argmax at each
///   position and stops after the first that differs from the draft
///   token (vLLM's `rejection_greedy_sample_kernel`);
/// - `RS-ACCEPT`: a random request accepts draft token `x` at position
///   `i` iff `q > 0 and p / q >= u` (`accept="divide_ge"`: vLLM's
///   `rejection_random_sample_kernel`, which rejects a draft probability
///   of 0) or `u * q < p` (`"multiply_lt"`: FlashInfer's
///   `chain_speculative_sampling`), `p = target_probs[b, i, x]`, `q =
///   draft_probs[b, i, x]` (1 when `draft_probs` is None: vLLM's n-gram
///   path), `u = uniform[b, i]`, each operation one float32 rounding;
/// - `RS-STOP`, `RS-BONUS`: the first rejected position emits the
///   recovered token and every later position is `-1`; when all `k` are
///   accepted, position `k` is `bonus_token_ids[b]`;
/// - `RS-RECOVER`: the recovered token is the argmax over `v` of `r(v) /
///   e(v)` (`race="divide"`) or `r(v) * (1 / e(v))` (`"reciprocal"`:
///   vLLM's `inv_q`), `r(v) = max(p(v) - q(v), 0)` (without draft
///   probabilities `p(v)`, and 0 at the draft token), `e = noise[b]`, one
///   exponential row per request shared by its positions (vLLM's `q`);
/// - `RS-TIE`: every argmax is the lowest index of the maximum
///   (`torch.argmax`, Triton's `tl.max(..., return_indices=True)`).
///
/// The callable: `sample(draft_token_ids, draft_probs, target_probs,
/// bonus_token_ids, uniform, noise, is_greedy, out)`: `draft_token_ids`
/// int32 `[B, k]`; `draft_probs` float32 `[B, k, V]` or None (`NGRAM`: a
/// kernel without an n-gram path raises `kernel_oracle.Refused`);
/// `target_probs` float32 `[B, k + 1, V]` (FlashInfer's shape; row `k`,
/// the bonus position's distribution, is not read: vLLM takes rows `0..k`
/// flattened to `[B * k, V]`); `bonus_token_ids` int32 `[B]`; `uniform`
/// float32 `[B, k]` (vLLM draws float64: these values as float64 compare
/// the same); `noise` float32 `[B, V]`, positive; `is_greedy` uint8 `[B]`
/// (0 or 1); `out` int32 `[B, k + 1]` filled with `-2^31`: write it and
/// return None, or return the array. The inputs must be left as given.
/// `shapes` (`[(batch, k, vocab)]`, default `REJECTION_SAMPLE_SHAPES`),
/// `arms`, `seeds`, `trials`, `verbose` and `name` as in
/// `check_fp8_block_gemm`.
///
/// Each row names the known declarations (both acceptance tests times
/// both race forms, `accept/race`) the output matches; the summary names
/// those every compared case matched. A failure names each failing
/// request's first differing position, both tokens, and the draft
/// token's `p`, `q` and `u` there.
///
/// Errors: `ValueError` for an unknown form or arm, or a shape the check
/// refuses (empty, `k` over 64, over 2^24 target probabilities), before
/// any call. Every check also raises `ValueError`, before any call, for
/// `trials` below 1 or an empty `seeds` list (see
/// `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (sample, shapes = None, arms = None, seeds = None, trials = 1, accept = "divide_ge", race = "reciprocal", verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_rejection_sample<'py>(
    py: Python<'py>,
    sample: Bound<'py, PyAny>,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    accept: &str,
    race: &str,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&sample, "sample")?;
    let seeds = Seeds::new(seeds, trials)?;
    let decl = declared_of(accept, race)?;
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let shapes = shapes_or(shapes, &REJECTION_SAMPLE_SHAPES, within_caps)?;
    let fname = callable_name(&sample, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "rejection_sample".into(),
        ..CheckReport::default()
    };
    let declared = label(&decl);
    let kw = format!(
        "accept=\"{}\", race=\"{}\"",
        decl.accept.name(),
        decl.race.name()
    );
    o.row(&format!(
        "check_rejection_sample({fname}), declared: {declared}"
    ))?;
    o.row(&format!(
        "{:<16} {:>7} {:>18} {:>15} {:>9}  verdict  matches",
        "B,k,V", "arm", "seed", "tokens differ", "call_ms"
    ))?;
    let mut all = Every::<Declared>::default();
    for &dims in &shapes {
        let (b, k, v) = dims;
        for &arm in &arms {
            for seed in seeds.for_case(Spec::base_seed(dims, arm)) {
                let case = spec(dims, arm, Some(seed))
                    .generate()
                    .map_err(PyValueError::new_err)?;
                let ins = inputs(py, &case)?;
                let out_shape = [b, k + 1];
                let outs: [(&[usize], OutKind); 1] = [(&out_shape, OutKind::I32)];
                let (called, ms) = call_typed(py, &sample, Vec::new(), &ins, &outs)?;
                let a = arm.name();
                let row = format!("{:<16} {a:>7} 0x{seed:016x}", format!("{b},{k},{v}"));
                let repro = format!(
                    "kernel_oracle.check_rejection_sample({fname}, shapes=[({b}, {k}, {v})], arms=[\"{a}\"], seeds=[0x{seed:016x}], {kw})"
                );
                let head = format!(
                    "FAIL rejection_sample: (batch, k, vocab) = ({b}, {k}, {v}) arm={a} seed=0x{seed:016x}, declared: {declared}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = got[0].i32();
                let verdict = py
                    .detach(|| judge(&case, &decl, got))
                    .map_err(PyValueError::new_err)?;
                let found = py
                    .detach(|| identify(&case, got))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                let pass = verdict.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {ms:>9.2}  {}  {}",
                    verdict.differ,
                    verdict.elements,
                    if pass { "PASS" } else { "FAIL" },
                    list(&found, 4)
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut rr = failure_head(&head, &written);
                if !verdict.pass() {
                    let _ = writeln!(
                        rr,
                        "  {} of {} tokens differ, in {} of {b} requests; the first of each:",
                        verdict.differ, verdict.elements, verdict.rows_differ
                    );
                    for f in &verdict.faults {
                        let _ = writeln!(rr, "    {}", describe(f, &case, &decl));
                    }
                }
                let _ = writeln!(rr, "  the output matches: {}", list(&found, 4));
                let _ = write!(
                    rr,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's output:\n  kernel_oracle.rejection_sample_case({b}, {k}, {v}, \"{a}\", seed=0x{seed:016x}, {kw})"
                );
                rep.fail(&mut o, rr, repro)?;
            }
        }
    }
    let every = all.phrase(label);
    rep.finish(
        o,
        &format!("bit-identical on every compared case under: {every}; "),
    )
}

/// Adds the rejection-sampler check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("REJECTION_SAMPLE_SHAPES", REJECTION_SAMPLE_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_rejection_sample, m)?)?;
    m.add_function(wrap_pyfunction!(rejection_sample_case, m)?)?;
    Ok(())
}
