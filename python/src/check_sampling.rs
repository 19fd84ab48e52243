//! The sampling filters (`oracle::sampling`): `check_sampling`, which
//! runs any Python sampler (vLLM's `apply_top_k_top_p` and min-p,
//! FlashInfer's `top_k_renorm_probs`, `top_p_renorm_probs`,
//! `top_k_top_p_sampling_from_probs`, Hugging Face's warpers, a torch or
//! Triton kernel) through the case library's cases
//! (`kernel_oracle::sampling`) and judges each token's membership exactly
//! wherever the enclosures decide it, the renormalised probabilities
//! within theirs and sampled ids inside the possibly-kept set, naming the
//! known declarations the output is consistent with.

use crate::arrays::array;
use crate::check::{
    arms_or_all, call_typed, callable_name, count, failure_head, names_or, parse_out_dtype,
    shapes_or, CheckReport, Held, Input, Out, OutKind, Seeds,
};
use kernel_oracle::sampling::{
    describe, identify, judge, label, order_name, parse_order, parse_topk_ties, parse_topp_ties,
    reference, topk_ties_name, topp_ties_name, within_caps, Arm, Dims, Form, Output, Spec,
};
use oracle::dtype::Dtype;
use oracle::sampling::Declared;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(batch, vocab)` a check runs by default: vocabularies of 7
/// (below a vector), 129 (one past a power of two), 1000, Llama-2's 32000
/// and Qwen2's 151936, with batches of 2 to 16 rows (each row its own
/// filters).
pub const SAMPLING_SHAPES: [Dims; 5] = [(4, 7), (9, 129), (16, 1000), (3, 32000), (2, 151936)];

fn declared_of(order: &str, topk_ties: &str, topp_ties: &str, exp_ulps: u32) -> PyResult<Declared> {
    if !(2..=64).contains(&exp_ulps) {
        return Err(PyValueError::new_err(format!(
            "exp_ulps {exp_ulps}: 2 to 64"
        )));
    }
    Ok(Declared {
        order: parse_order(order).map_err(PyValueError::new_err)?,
        topk_ties: parse_topk_ties(topk_ties).map_err(PyValueError::new_err)?,
        topp_ties: parse_topp_ties(topp_ties).map_err(PyValueError::new_err)?,
        exp_ulps,
    })
}

fn spec(dims: Dims, declared: Declared, d: Dtype, arm: Arm, seed: Option<u64>) -> Spec {
    Spec {
        dims,
        declared,
        dtype: d,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, d, arm)),
    }
}

fn columns<'py, 'a>(
    py: Python<'py>,
    b: usize,
    cols: &'a (Vec<f32>, Vec<i32>, Vec<f32>, Vec<f32>),
) -> PyResult<Vec<(&'static str, Input<'a, 'py>)>> {
    Ok(vec![
        (
            "temperature",
            Input::F32(array(py, &[b], cols.0.clone())?, &cols.0),
        ),
        (
            "top_k",
            Input::I32(array(py, &[b], cols.1.clone())?, &cols.1),
        ),
        (
            "top_p",
            Input::F32(array(py, &[b], cols.2.clone())?, &cols.2),
        ),
        (
            "min_p",
            Input::F32(array(py, &[b], cols.3.clone())?, &cols.3),
        ),
    ])
}

/// sampling_case(batch, vocab, arm, seed=None, order="min_p_first", topk_ties="keep_all", topp_ties="order", dtype="float32", samples=16, exp_ulps=2) -> dict
///
/// One case of `check_sampling` as new arrays, as the callable gets them:
/// `logits` (`[B, V]`, float32, or uint16 bit patterns of `dtype`; `-inf`
/// for a masked token), `temperature`, `top_p`, `min_p` (float32 `[B]`)
/// and `top_k` (int32 `[B]`), and a binary32 sort-based reference's
/// outputs under the declaration: `mask` (float32 `[B, V]`), `renorm`
/// (float32 `[B, V]`) and `sample` (int32 `[B, samples]`): outputs the
/// check accepts, not the only ones. `seed` None: the check's first seed.
/// `exp_ulps` as the check's (`NEAR` keeps its neighbours apart by the
/// declared `exp`'s bound, so its arrays depend on it).
///
/// Errors: `ValueError` for an unknown arm, order, tie policy or dtype,
/// `exp_ulps` outside 2 to 64, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (batch, vocab, arm, seed = None, order = "min_p_first", topk_ties = "keep_all", topp_ties = "order", dtype = "float32", samples = 16, exp_ulps = 2))]
#[allow(clippy::too_many_arguments)]
fn sampling_case<'py>(
    py: Python<'py>,
    batch: usize,
    vocab: usize,
    arm: &str,
    seed: Option<u64>,
    order: &str,
    topk_ties: &str,
    topp_ties: &str,
    dtype: &str,
    samples: usize,
    exp_ulps: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let decl = declared_of(order, topk_ties, topp_ties, exp_ulps)?;
    let dims = (batch, vocab);
    let sp = spec(dims, decl, d, arm, seed);
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    let shape = [batch, vocab];
    match Held::new(d, &case.logits) {
        Held::F32(v) => dict.set_item("logits", array(py, &shape, v)?)?,
        Held::U16(v) => dict.set_item("logits", array(py, &shape, v)?)?,
    }
    let (t, k, p, m) = case.columns();
    dict.set_item("temperature", array(py, &[batch], t)?)?;
    dict.set_item("top_k", array(py, &[batch], k)?)?;
    dict.set_item("top_p", array(py, &[batch], p)?)?;
    dict.set_item("min_p", array(py, &[batch], m)?)?;
    for form in Form::ALL {
        match py.detach(|| reference(&sp, &case, form, samples, Dtype::F32)) {
            Output::Values(v) => {
                let f: Vec<f32> = v.iter().map(|&b| f32::from_bits(b)).collect();
                dict.set_item(form.name(), array(py, &shape, f)?)?;
            }
            Output::Ids(ids) => {
                let ids: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
                dict.set_item(form.name(), array(py, &[batch, samples], ids)?)?;
            }
        }
    }
    Ok(dict)
}

/// check_sampling(fn, form="mask", order="min_p_first", topk_ties="keep_all", topp_ties="order", exp_ulps=2, scaled=False, samples=16, dtype="float32", out_dtype="float32", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, a sampling filter or sampler, through the arms `RAND`,
/// `TIES` (five logit values: ties at the `k`-th value and the nucleus
/// boundary), `PEAK` (one token with all but `e^-8` of the mass), `FLAT`
/// (a power of two of equal logits, `top_p = j/n`: exact cumulative sums,
/// so `<=` against `<` is judged), `EDGE` (`k = 1`, `k = V`, `top_p =
/// 1`, `top_p = 1e-6`, `min_p = 1`, masked vocabulary) and `NEAR` (distinct
/// logits a few steps of the dtype apart on either side of the `k`-th
/// value, never so close that their binary32 probabilities could meet;
/// some rows with the `k`-th value at 0, some with a far-low token, the
/// dtype's lowest finite value: an approximate `k`-th value, a fixed-step
/// bisection of the row's range, keeps or drops one), every row with its own
/// filters, and judges it against `oracle::sampling`:
/// - `SAMPLE-PROB`: `p = softmax(logits / T)`;
/// - `SAMPLE-MINP`: keep `p_i >= min_p * max p`;
/// - `SAMPLE-TOPK`: keep the `k` largest logits (`k = 0` off); ties at the
///   `k`-th value all kept (`topk_ties="keep_all"`: vLLM, Hugging Face) or
///   exactly `k` (`"exact"`: `torch.topk`);
/// - `SAMPLE-TOPP`: keep a token iff the candidates' mass before it in
///   descending order is below `top_p` (vLLM's and Hugging Face's
///   `cumsum <= 1 - top_p` masking over the ascending sort; the largest
///   always kept); ties at the boundary ordered (`topp_ties="order"`: a
///   count of them kept) or all kept alike (`"keep_all"`: a threshold);
/// - the order: `"min_p_first"` (vLLM v1: min-p, top-k, then top-p over
///   the survivors), `"min_p_last"` (Hugging Face's warpers, FlashInfer's
///   `top_k_first`) or `"joint"` (FlashInfer: each filter on the
///   unfiltered distribution).
/// Every compared quantity is held to a sound enclosure of any binary32
/// evaluation (an `exp` within `exp_ulps` ulps, any summation order), so
/// each token's membership is judged exactly wherever the enclosures
/// decide it (the rows count the decided rows).
///
/// `form`: `"mask"`, `fn` writes the logits with removed tokens `-inf`
/// and kept ones the input logit bit for bit (`scaled=True`: `l / T`);
/// `"renorm"`, the probabilities, removed exactly 0, kept within the
/// enclosure of `p_i / sum over the kept` rounded to `out_dtype`;
/// `"sample"`, `samples` token ids per row, each a token some kernel within
/// the declaration keeps, a row's draws not all one token where a sampler
/// of the filters does that with probability at most `2^-40`, and the
/// case's draws (its rows whose kept set is decided token by token) not
/// likelier under an alternative (every kept token equally likely; the
/// draw without the temperature) than under the filters by more than a
/// sampler of the filters reaches with probability `2^-40` (Markov's
/// bound on the likelihood ratio; more `samples`, more power).
///
/// The callable: `fn(logits, temperature, top_k, top_p, min_p, out)`;
/// `logits` `[B, V]` float32 (or uint16 bit patterns of `dtype`),
/// `temperature`, `top_p`, `min_p` float32 `[B]`, `top_k` int32 `[B]`
/// (0: off), `out` `[B, V]` float32 (`renorm`: `out_dtype`, uint16 for
/// 16-bit types) filled with NaN, or int32 `[B, samples]` filled with
/// `INT32_MIN`: write it and return None, or return the array. The inputs
/// must be left as given. A kernel that refuses a shape raises
/// `kernel_oracle.Refused`. `shapes` (`[(batch, vocab)]`, default
/// `SAMPLING_SHAPES`), `arms`, `seeds`, `trials`, `verbose` and `name` as
/// in `check_fp8_block_gemm`.
///
/// Each row names the known declarations (order and tie policies) the
/// output is consistent with.
///
/// Errors: `ValueError` for an unknown form, order, tie policy, dtype or
/// arm, `exp_ulps` outside 2 to 64, `samples` below 1, or a shape over
/// the caps (2^22 logits), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, form = "mask", order = "min_p_first", topk_ties = "keep_all", topp_ties = "order", exp_ulps = 2, scaled = false, samples = 16, dtype = "float32", out_dtype = "float32", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_sampling<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    form: &str,
    order: &str,
    topk_ties: &str,
    topp_ties: &str,
    exp_ulps: i64,
    scaled: bool,
    samples: i64,
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
    let exp_ulps: u32 = count("exp_ulps", exp_ulps, 0)?;
    let samples: usize = count("samples", samples, 1)?;
    let fm = Form::parse(form).map_err(PyValueError::new_err)?;
    let decl = declared_of(order, topk_ties, topp_ties, exp_ulps)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let od = parse_out_dtype(out_dtype)?;
    let od = if fm == Form::Renorm { od } else { Dtype::F32 };
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let shapes = shapes_or(shapes, &SAMPLING_SHAPES, within_caps)?;
    let fname = callable_name(&r#fn, name);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "sampling".into(),
        ..CheckReport::default()
    };
    let declared = label(&decl);
    let py_bool = |b: bool| if b { "True" } else { "False" };
    let kw = format!(
        "form=\"{}\", order=\"{}\", topk_ties=\"{}\", topp_ties=\"{}\", exp_ulps={exp_ulps}, scaled={}, samples={samples}, dtype=\"{}\", out_dtype=\"{}\"",
        fm.name(),
        order_name(decl.order),
        topk_ties_name(decl.topk_ties),
        topp_ties_name(decl.topp_ties),
        py_bool(scaled),
        d.name(),
        od.name()
    );
    o.row(&format!(
        "check_sampling({fname}), form {}, {} logits, declared: {declared}",
        fm.name(),
        d.name()
    ))?;
    o.row(&format!(
        "{:<12} {:>5} {:>18} {:>11} {:>9} {:>9}  verdict  consistent with",
        "B,V", "arm", "seed", "rows failed", "decided", "call_ms"
    ))?;
    let mut all = crate::check::Every::<Declared>::default();
    for &dims in &shapes {
        let (b, v) = dims;
        for &arm in &arms {
            for seed in seeds.for_case(Spec::base_seed(dims, d, arm)) {
                let sp = spec(dims, decl, d, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let logits = Held::new(d, &case.logits);
                let cols = case.columns();
                let mut inputs = vec![("logits", logits.input(py, &[b, v])?)];
                inputs.extend(columns(py, b, &cols)?);
                let out_shape = [b, if fm == Form::Sample { samples } else { v }];
                let kind = match fm {
                    Form::Sample => OutKind::I32,
                    _ => OutKind::of(od),
                };
                let outs: [(&[usize], OutKind); 1] = [(&out_shape, kind)];
                let (called, ms) = call_typed(py, &r#fn, Vec::new(), &inputs, &outs)?;
                let a = arm.name();
                let row = format!("{:<12} {a:>5} 0x{seed:016x}", format!("{b},{v}"));
                let repro = format!(
                    "kernel_oracle.check_sampling({fname}, {kw}, shapes=[({b}, {v})], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL sampling: (batch, vocab) = ({b}, {v}) arm={a} seed=0x{seed:016x}, form {}, declared: {declared}",
                    fm.name()
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let output = match fm {
                    Form::Sample => {
                        Output::Ids(got[0].i32().iter().map(|&x| i64::from(x)).collect())
                    }
                    _ => Output::Values(got[0].bits(od)),
                };
                let verdict = py
                    .detach(|| judge(&sp, &case, fm, scaled, samples, &output, od))
                    .map_err(PyValueError::new_err)?;
                let found = py
                    .detach(|| identify(&sp, &case, fm, scaled, samples, &output, od))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                let matches = list(&found);
                let pass = verdict.pass() && written.is_empty();
                o.row(&format!(
                    "{row} {:>5}/{:<5} {:>9} {ms:>9.2}  {}  {matches}",
                    verdict.failed,
                    verdict.rows,
                    verdict.decided,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut rr = failure_head(&head, &written);
                let _ = writeln!(
                    rr,
                    "  {} of {} rows fail ({} decided by the enclosures); the first:",
                    verdict.failed, verdict.rows, verdict.decided
                );
                for (r, f) in &verdict.faults {
                    let _ = writeln!(rr, "    {}", describe(*r, f, &case, od));
                }
                let _ = writeln!(rr, "  the output is consistent with: {matches}");
                let _ = write!(
                    rr,
                    "reproduce:\n  {repro}\nthe case's arrays and a reference's outputs:\n  kernel_oracle.sampling_case({b}, {v}, \"{a}\", seed=0x{seed:016x}, order=\"{}\", topk_ties=\"{}\", topp_ties=\"{}\", dtype=\"{}\", samples={samples}, exp_ulps={exp_ulps})",
                    order_name(decl.order),
                    topk_ties_name(decl.topk_ties),
                    topp_ties_name(decl.topp_ties),
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

/// `"min_p_first, topk_ties keep_all, topp_ties order; ..."`, or `none known`.
fn list(v: &[Declared]) -> String {
    let names: Vec<String> = v.iter().map(label).collect();
    names_or(&names, "; ", "none known")
}

/// Adds the sampling check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SAMPLING_SHAPES", SAMPLING_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_sampling, m)?)?;
    m.add_function(wrap_pyfunction!(sampling_case, m)?)?;
    Ok(())
}
