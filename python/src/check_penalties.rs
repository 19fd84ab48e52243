//! The logits penalties (`oracle::penalties`): `check_penalties`, which
//! runs any Python penaliser (vLLM's `apply_penalties`, a torch form of
//! Hugging Face's `RepetitionPenaltyLogitsProcessor` with OpenAI-style
//! frequency and presence penalties, a Triton kernel in vLLM v1's form)
//! through the case library's cases (`kernel_oracle::penalties`) and
//! judges every output element bit for bit under the declared order,
//! scope and forms, naming every known declaration the output matches.

use crate::arrays::array;
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, shapes_or, CheckReport, Input,
    Out, OutKind, Seeds,
};
use kernel_oracle::penalties::{
    describe, describe_miss, identify, judge, label, list, parse_frequency, parse_order,
    parse_repetition, parse_scope, reference, within_caps, Arm, Case, Dims, Inputs, Spec,
};
use oracle::penalties::{Declared, MAX_RECIPROCALS, MAX_RECIP_ULPS};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(batch, vocab)` a check runs by default: vocabularies of 7
/// (below a vector), 129 (one past a power of two), 1000, Llama-2's
/// 32000, Qwen2's 151936 and Llama-3's 128256, with batches of 2 to 16
/// rows (each row its own penalties) and one of a single row (a kernel
/// that squeezes the batch dimension away fails there). The two largest
/// vocabularies, multiples of 32, hold two rows each: a per-row bitset of
/// 32-bit words that lets token `V` (the padding id) set the next row's
/// token 0 fails there (vLLM PR #49081).
pub const PENALTIES_SHAPES: [Dims; 6] = [
    (4, 7),
    (9, 129),
    (16, 1000),
    (1, 32000),
    (2, 151936),
    (2, 128256),
];

/// The declaration named by the check's arguments.
///
/// # Errors
/// `ValueError` for an unknown name, for a repetition form that is a
/// known bug (`"divide_all"`, `"reciprocal_all"`) unless `planted_ok`,
/// and for `recip_ulps` over `MAX_RECIP_ULPS` or above 0 with a division
/// form (which has no multiplier).
fn declared_of(
    order: &str,
    repetition_scope: &str,
    repetition: &str,
    frequency: &str,
    recip_ulps: u32,
    planted_ok: bool,
) -> PyResult<Declared> {
    let rep = parse_repetition(repetition).map_err(PyValueError::new_err)?;
    if !planted_ok && !rep.declarable() {
        return Err(PyValueError::new_err(format!(
            "repetition {repetition:?} is a known bug (transformers issue 2302, NeMo issue 8194), named only so that a check can identify it: declare \"divide\" or \"reciprocal\""
        )));
    }
    if recip_ulps > MAX_RECIP_ULPS {
        return Err(PyValueError::new_err(format!(
            "recip_ulps {recip_ulps}: it must be from 0 to {MAX_RECIP_ULPS}"
        )));
    }
    if recip_ulps > 0 && !rep.has_reciprocal() {
        return Err(PyValueError::new_err(format!(
            "recip_ulps {recip_ulps} with repetition {repetition:?}: only a reciprocal form multiplies by 1/p; declare recip_ulps=0 or repetition=\"reciprocal\""
        )));
    }
    Ok(Declared {
        order: parse_order(order).map_err(PyValueError::new_err)?,
        scope: parse_scope(repetition_scope).map_err(PyValueError::new_err)?,
        repetition: rep,
        frequency: parse_frequency(frequency).map_err(PyValueError::new_err)?,
        recip_ulps,
    })
}

fn spec(dims: Dims, arm: Arm, seed: Option<u64>) -> Spec {
    Spec {
        dims,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, arm)),
    }
}

/// The counts as int32 (a case's counts are at most its ids per row).
fn i32s(v: &[u32]) -> Vec<i32> {
    v.iter().map(|&c| c as i32).collect()
}

/// penalties_case(batch, vocab, arm, seed=None, order="repetition_frequency_presence", repetition_scope="prompt_and_output", repetition="divide", frequency="separate", recip_ulps=0) -> dict
///
/// One case of `check_penalties` as new arrays: `logits` (float32 `[B,
/// V]`), `prompt_ids` (int64 `[B, P]`) and `output_ids` (int64 `[B, O]`),
/// both padded with `V`, the counts they make, `prompt_counts` and
/// `output_counts` (int32 `[B, V]`), `presence_penalties`,
/// `frequency_penalties` and `repetition_penalties` (float32 `[B]`),
/// `out`, the oracle's penalised logits (float32 `[B, V]`) under the
/// declaration named (the known-bug forms `"divide_all"` and
/// `"reciprocal_all"` allowed here) with each row's multiplier `RN(1/p)`,
/// and `reciprocals` (float32 `[B, M]`), each row's candidate multipliers
/// under `recip_ulps` (rule `PEN-RECIP-ULPS`: `RN(1/p)` first, then by
/// distance from `1/p`; NaN past a row's last; `M` the most a row has): a
/// kernel passes a row when one of them reproduces it. `seed` None: the
/// check's first seed.
///
/// Errors: `ValueError` for an unknown arm, order, scope or form, a bad
/// `recip_ulps` (as `check_penalties`), or a shape the check refuses.
#[pyfunction]
#[pyo3(signature = (batch, vocab, arm, seed = None, order = "repetition_frequency_presence", repetition_scope = "prompt_and_output", repetition = "divide", frequency = "separate", recip_ulps = 0))]
#[allow(clippy::too_many_arguments)]
fn penalties_case<'py>(
    py: Python<'py>,
    batch: usize,
    vocab: usize,
    arm: &str,
    seed: Option<u64>,
    order: &str,
    repetition_scope: &str,
    repetition: &str,
    frequency: &str,
    recip_ulps: i64,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let recip_ulps: u32 = count("recip_ulps", recip_ulps, 0)?;
    let decl = declared_of(
        order,
        repetition_scope,
        repetition,
        frequency,
        recip_ulps,
        true,
    )?;
    let dims = (batch, vocab);
    within_caps(dims).map_err(PyValueError::new_err)?;
    let case = spec(dims, arm, seed)
        .generate()
        .map_err(PyValueError::new_err)?;
    let out = py.detach(|| reference(&case, &decl));
    let dict = PyDict::new(py);
    let shape = [batch, vocab];
    dict.set_item("logits", array(py, &shape, case.logits.clone())?)?;
    dict.set_item(
        "prompt_ids",
        array(py, &[batch, case.prompt_len], case.prompt.clone())?,
    )?;
    dict.set_item(
        "output_ids",
        array(py, &[batch, case.output_len], case.output.clone())?,
    )?;
    dict.set_item(
        "prompt_counts",
        array(py, &shape, i32s(&case.prompt_counts))?,
    )?;
    dict.set_item(
        "output_counts",
        array(py, &shape, i32s(&case.output_counts))?,
    )?;
    let (q, f, p) = case.columns();
    dict.set_item("presence_penalties", array(py, &[batch], q)?)?;
    dict.set_item("frequency_penalties", array(py, &[batch], f)?)?;
    dict.set_item("repetition_penalties", array(py, &[batch], p)?)?;
    dict.set_item("out", array(py, &shape, out)?)?;
    let members: Vec<_> = case
        .penalties
        .iter()
        .map(|p| decl.reciprocals(p.repetition))
        .collect();
    let m = members
        .iter()
        .map(|r| r.as_slice().len())
        .max()
        .unwrap_or(1);
    debug_assert!(m <= MAX_RECIPROCALS);
    let mut table = vec![f32::NAN; batch * m];
    for (row, r) in members.iter().enumerate() {
        table[row * m..row * m + r.as_slice().len()].copy_from_slice(r.as_slice());
    }
    dict.set_item("reciprocals", array(py, &[batch, m], table)?)?;
    Ok(dict)
}

/// The arrays a case hands the callable (before `out`).
struct Handed {
    logits: Vec<f32>,
    prompt_ids: Vec<i64>,
    output_ids: Vec<i64>,
    prompt_counts: Vec<i32>,
    output_counts: Vec<i32>,
    presence: Vec<f32>,
    frequency: Vec<f32>,
    repetition: Vec<f32>,
}

impl Handed {
    fn new(case: &Case) -> Handed {
        let (presence, frequency, repetition) = case.columns();
        Handed {
            logits: case.logits.clone(),
            prompt_ids: case.prompt.clone(),
            output_ids: case.output.clone(),
            prompt_counts: i32s(&case.prompt_counts),
            output_counts: i32s(&case.output_counts),
            presence,
            frequency,
            repetition,
        }
    }

    /// The inputs in the callable's order, `prompt` and `output` in the
    /// declared form.
    fn inputs<'a, 'py>(
        &'a self,
        py: Python<'py>,
        case: &Case,
        form: Inputs,
    ) -> PyResult<Vec<(&'static str, Input<'a, 'py>)>> {
        let (b, v) = case.dims;
        let f32s =
            |name, x: &'a Vec<f32>, shape: &[usize]| -> PyResult<(&'static str, Input<'a, 'py>)> {
                Ok((name, Input::F32(array(py, shape, x.clone())?, x)))
            };
        let mut inputs = vec![f32s("logits", &self.logits, &[b, v])?];
        match form {
            Inputs::Ids => {
                inputs.push((
                    "prompt",
                    Input::I64(
                        array(py, &[b, case.prompt_len], self.prompt_ids.clone())?,
                        &self.prompt_ids,
                    ),
                ));
                inputs.push((
                    "output",
                    Input::I64(
                        array(py, &[b, case.output_len], self.output_ids.clone())?,
                        &self.output_ids,
                    ),
                ));
            }
            Inputs::Counts => {
                inputs.push((
                    "prompt",
                    Input::I32(
                        array(py, &[b, v], self.prompt_counts.clone())?,
                        &self.prompt_counts,
                    ),
                ));
                inputs.push((
                    "output",
                    Input::I32(
                        array(py, &[b, v], self.output_counts.clone())?,
                        &self.output_counts,
                    ),
                ));
            }
        }
        inputs.push(f32s("presence_penalties", &self.presence, &[b])?);
        inputs.push(f32s("frequency_penalties", &self.frequency, &[b])?);
        inputs.push(f32s("repetition_penalties", &self.repetition, &[b])?);
        Ok(inputs)
    }
}

/// check_penalties(penalize, shapes=None, arms=None, seeds=None, trials=1, order="repetition_frequency_presence", repetition_scope="prompt_and_output", repetition="divide", frequency="separate", recip_ulps=0, inputs="ids", verbose=True, name=None) -> CheckReport
///
/// Runs `penalize`, the logits penalties a server applies before sampling,
/// through the arms `RAND`, `NEG` (nine logits in ten negative), `ZERO`
/// (`±0` logits, negative frequency and presence penalties), `TIES`
/// (seen logits where `"divide"` and `"reciprocal"`, or `"separate"` and
/// `"fma"`, give other bits, and where `1/p` and its neighbours as the
/// multiplier give three), `MASKED` (`-inf` among the seen tokens, NaN
/// and `+inf`), `PAD` (ids padded with `V`, tokens 0 and `V - 1` unseen),
/// `IDENTITY` (penalties `1.0, 0.0, 0.0` on most rows), `COUNTS` (counts
/// past 255, exact and inexact `f * count`) and `PROMPT_ONLY` (tokens seen
/// in the prompt only), every row with its own penalties, and judges every
/// output element bit for bit (any NaN equal to any NaN) against
/// `oracle::penalties` under the declaration:
/// - `PEN-REP`: a token seen (`repetition_scope="prompt_and_output"`: in
///   the prompt or the output, vLLM and Hugging Face; `"output_only"`:
///   in the output, SGLang and LightLLM), once however often, becomes
///   `l / p` if `l > 0` else `l * p` (`repetition="divide"`: vLLM v0,
///   Hugging Face's `where(score < 0, score * p, score / p)`, the same
///   bits at ±0) or `l * r` if `l > 0` (`"reciprocal"`: vLLM v1's GPU
///   worker), `r` the row's multiplier;
/// - `PEN-RECIP-ULPS` (`recip_ulps`, with `"reciprocal"` only): `0`, `r =
///   RN(1/p)`, correctly rounded (`tl.math.div_rn(1.0, p)`, torch's
///   `1 / p`); `n` from 1 to 8, any float32 `r` within `n` ulps of the
///   exact `1/p` (`|r - 1/p| <= n ulp(1/p)`, `RN(1/p)` included), ONE per
///   row, used for every token of the row and in `"fma_scaled"`'s
///   `fma(l, r, ...)`: `recip_ulps=2` for Triton's float32 `1.0 / p`,
///   PTX `div.full.f32` (maximum error 2 ulps; triton issue 10661). A
///   row passes when some such `r` reproduces every element of it; a
///   kernel whose `r` changes between the row's tokens, or lies further
///   off, fails (TIES);
/// - `PEN-FREQ`: `l - f * count` over the output's counts only, rounded
///   twice (`frequency="separate"`: torch), once (`"fma"`: a contracted
///   Triton kernel), fused with a repetition step written as a product by
///   a multiplier (`"fma_scaled"`: `fma(l, scale, -(f * count))`, vLLM
///   v1's `logits *= scale` then `logits -= f * counts` under Triton's FP
///   fusion; `"fma"` with a division), or the count-fold sum of `f`
///   subtracted (`"accumulate"`: SGLang's penalizers), or as `"separate"`
///   and `"fma"` on the generated tokens only, every other logit left as
///   it is (`"sparse"` and `"fma_sparse"`: LightLLM's kernel, which loads
///   and stores the generated tokens' logits only);
/// - `PEN-PRES`: `l - q * (count > 0)` (`"accumulate"`: `l - q` or `l -
///   (+0)`; `"sparse"`, `"fma_sparse"`: `l - q` or `l` untouched; so a
///   `-0` logit of an unseen token keeps its sign where the product's
///   `q * 0 = -0` for a negative `q` makes it `+0`);
/// - `order`: the three steps' order, `"repetition_frequency_presence"`
///   (vLLM) or any other permutation of the three names (SGLang applies
///   its penalizers in a Python set's iteration order).
///
/// The callable: `penalize(logits, prompt, output, presence_penalties,
/// frequency_penalties, repetition_penalties, out)`, vLLM's
/// `apply_penalties` argument order: `logits` float32 `[B, V]`; with
/// `inputs="ids"`, `prompt` int64 `[B, P]` and `output` int64 `[B, O]`
/// token ids padded with `V` (vLLM's padding: to be ignored), with
/// `inputs="counts"` int32 `[B, V]` counts of each token in the prompt
/// and in the output; the penalties float32 `[B]`; `out` float32 `[B, V]`
/// filled with NaN: write it and return None, or return the array (an
/// element whose logit is NaN must be a NaN, any NaN; one left unwritten
/// still holds the check's signaling NaN and fails). The inputs must be left as given. A kernel that refuses a shape raises
/// `kernel_oracle.Refused`. `shapes` (`[(batch, vocab)]`, default
/// `PENALTIES_SHAPES`), `arms`, `seeds`, `trials`, `verbose` and `name`
/// as in `check_fp8_block_gemm`.
///
/// Each row names the known declarations (every order, scope, form,
/// the known-bug repetition forms `"divide_all"`, transformers issue
/// 2302, and `"reciprocal_all"`, NeMo issue 8194, and the reciprocal
/// forms under 0, 1 and 2 ulps) the output matches bit for bit, as
/// `order/scope/repetition/frequency`, `reciprocal(2 ulps)` for
/// `recip_ulps=2` (a looser form is left out where a tighter one
/// matches); the summary names those every compared case and every TIES
/// case matched: how the kernel computes. A failure under `recip_ulps >
/// 0` names, for each failing row, the member `r` that leaves the fewest
/// elements differing, and describes those elements.
///
/// Errors: `ValueError` for an unknown order, scope, form, inputs or arm,
/// a known-bug repetition form declared, `recip_ulps` negative, over 8 or
/// above 0 with `"divide"`, or a shape the check refuses (empty, over
/// 2^22 logits or 2^24 ids), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (penalize, shapes = None, arms = None, seeds = None, trials = 1, order = "repetition_frequency_presence", repetition_scope = "prompt_and_output", repetition = "divide", frequency = "separate", recip_ulps = 0, inputs = "ids", verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_penalties<'py>(
    py: Python<'py>,
    penalize: Bound<'py, PyAny>,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    order: &str,
    repetition_scope: &str,
    repetition: &str,
    frequency: &str,
    recip_ulps: i64,
    inputs: &str,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&penalize, "penalize")?;
    let seeds = Seeds::new(seeds, trials)?;
    let recip_ulps: u32 = count("recip_ulps", recip_ulps, 0)?;
    let decl = declared_of(
        order,
        repetition_scope,
        repetition,
        frequency,
        recip_ulps,
        false,
    )?;
    let form = Inputs::parse(inputs).map_err(PyValueError::new_err)?;
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let shapes = shapes_or(shapes, &PENALTIES_SHAPES, within_caps)?;
    let fname = callable_name(&penalize, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "penalties".into(),
        ..CheckReport::default()
    };
    let declared = label(&decl);
    let kw = format!(
        "order=\"{}\", repetition_scope=\"{}\", repetition=\"{}\", frequency=\"{}\", recip_ulps={}, inputs=\"{}\"",
        decl.order.name(),
        decl.scope.name(),
        decl.repetition.name(),
        decl.frequency.name(),
        decl.recip_ulps,
        form.name()
    );
    o.row(&format!(
        "check_penalties({fname}), {} inputs, declared: {declared}",
        form.name()
    ))?;
    o.row(&format!(
        "{:<12} {:>11} {:>18} {:>17} {:>9}  verdict  matches",
        "B,V", "arm", "seed", "elements differ", "call_ms"
    ))?;
    let mut all = crate::check::Every::<Declared>::default();
    let mut ties = crate::check::Every::<Declared>::default();
    for &dims in &shapes {
        let (b, v) = dims;
        for &arm in &arms {
            for seed in seeds.for_case(Spec::base_seed(dims, arm)) {
                let case = spec(dims, arm, Some(seed))
                    .generate()
                    .map_err(PyValueError::new_err)?;
                let handed = Handed::new(&case);
                let ins = handed.inputs(py, &case, form)?;
                let out_shape = [b, v];
                let outs: [(&[usize], OutKind); 1] = [(&out_shape, OutKind::F32)];
                let (called, ms) = call_typed(py, &penalize, Vec::new(), &ins, &outs)?;
                let a = arm.name();
                let row = format!("{:<12} {a:>11} 0x{seed:016x}", format!("{b},{v}"));
                let repro = format!(
                    "kernel_oracle.check_penalties({fname}, shapes=[({b}, {v})], arms=[\"{a}\"], seeds=[0x{seed:016x}], {kw})"
                );
                let head = format!(
                    "FAIL penalties: (batch, vocab) = ({b}, {v}) arm={a} seed=0x{seed:016x}, {} inputs, declared: {declared}",
                    form.name()
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let bits = got[0].bits(oracle::dtype::Dtype::F32);
                let verdict = py
                    .detach(|| judge(&case, &decl, &bits))
                    .map_err(PyValueError::new_err)?;
                let found = py
                    .detach(|| identify(&case, &bits))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                if arm == Arm::Ties {
                    ties.meet(&found);
                }
                let matches = list(&found, 3);
                let pass = verdict.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>8}/{:<8} {ms:>9.2}  {}  {matches}",
                    verdict.differ,
                    verdict.elements,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut rr = failure_head(&head, &written);
                if !verdict.pass() {
                    if decl.recip_ulps > 0 {
                        let _ = writeln!(
                            rr,
                            "  {} of {b} rows reproduced by no multiplier; the first:",
                            verdict.rows_differ
                        );
                        for m in &verdict.misses {
                            let _ = writeln!(rr, "    {}", describe_miss(m, &case, &decl));
                        }
                    }
                    let _ = writeln!(
                        rr,
                        "  {} of {} elements differ{}; the first:",
                        verdict.differ,
                        verdict.elements,
                        if decl.recip_ulps > 0 {
                            " (each row with its closest multiplier)"
                        } else {
                            ""
                        }
                    );
                    for f in &verdict.faults {
                        let _ = writeln!(rr, "    {}", describe(f, &case));
                    }
                }
                let _ = writeln!(rr, "  the output matches: {}", list(&found, 8));
                let _ = write!(
                    rr,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's output:\n  kernel_oracle.penalties_case({b}, {v}, \"{a}\", seed=0x{seed:016x}, order=\"{}\", repetition_scope=\"{}\", repetition=\"{}\", frequency=\"{}\", recip_ulps={})",
                    decl.order.name(),
                    decl.scope.name(),
                    decl.repetition.name(),
                    decl.frequency.name(),
                    decl.recip_ulps
                );
                rep.fail(&mut o, rr, repro)?;
            }
        }
    }
    let sum = |e: &crate::check::Every<Declared>| match e.get() {
        Some(v) => list(v, 8),
        None => "(no case compared)".into(),
    };
    rep.finish(
        o,
        &format!(
            "bit-identical on every compared case under: {}; on every TIES case under: {}; ",
            sum(&all),
            sum(&ties)
        ),
    )
}

/// Adds the penalties check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PENALTIES_SHAPES", PENALTIES_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_penalties, m)?)?;
    m.add_function(wrap_pyfunction!(penalties_case, m)?)?;
    Ok(())
}
