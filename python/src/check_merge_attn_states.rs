//! Merging two partial attention states (`oracle::merge_attn_states`):
//! the oracle's intervals for any input, and `check_merge_attn_states`,
//! which runs any Python merge (vLLM's `merge_attn_states`, CUDA and
//! Triton; SGLang's `merge_state_v2`; FlashInfer's `merge_state`; torch
//! forms) through the case library's cases
//! (`kernel_oracle::merge_attn_states`): every output element and every
//! output LSE within the interval core's enclosure leaves, bit for bit
//! where that interval is one value, naming every base, both-empty policy
//! and LSE layout the outputs match.

use crate::arrays::{array, value_error};
use crate::check::{
    arms_or_all, call_args, call_typed, callable_name, failure_head, failure_tail, names_or,
    Admitted, CheckReport, Fill, Held, Input, Out, OutKind, Seeds,
};
use crate::check_rms_norm::{as_called, shown};
use crate::check_rope::{read_values, to_array};
use kernel_oracle::merge_attn_states::{
    identify, label, parse_base, parse_empty, parse_layout, parse_scales, reference, within_caps,
    Answer, Arm, Case, Dims, Spec, Verdicts,
};
use oracle::merge_attn_states::{Declared, Dtype, Layout, Shape};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(num_tokens, num_heads, head_size)` a check runs by
/// default: a ragged head size (80) over 7 tokens and 3 heads; decode (1
/// token, 32 heads: the two LSE layouts coincide there); a chunked
/// prefill of 130 tokens; head sizes 256 and 512 (MLA's latent, where one
/// head's threads span more than one CUDA block in vLLM's kernel: the
/// in-place LSE race of PR 40924); 257 tokens of 2 heads, head size 96;
/// one head (19 tokens); a head size of 33, no multiple of 8 (a kernel of
/// 8-element packs that leaves the tail unwritten; vLLM's CUDA kernel
/// refuses it); 520 tokens of 40 heads (past 512 tokens and 32 heads, so
/// a grid that stops at either fails).
pub const MERGE_ATTN_STATES_SHAPES: [Dims; 9] = [
    [7, 3, 80],
    [1, 32, 128],
    [130, 8, 64],
    [33, 4, 256],
    [5, 16, 512],
    [257, 2, 96],
    [19, 1, 64],
    [3, 5, 33],
    [520, 40, 64],
];

/// Where the callable's output LSE goes (`output_lse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LseOut {
    /// Not asked for (`False`): the callable gets no output LSE.
    Off,
    /// A new float32 array filled with NaN (`True`).
    New,
    /// `prefix_lse` itself (`"in_place"`): the merge writes the output LSE
    /// over the prefix's, as vLLM's callers that alias them do.
    InPlace,
}

impl LseOut {
    fn parse(x: &Bound<'_, PyAny>) -> PyResult<LseOut> {
        if let Ok(b) = x.extract::<bool>() {
            return Ok(if b { LseOut::New } else { LseOut::Off });
        }
        match x.extract::<String>().as_deref() {
            Ok("in_place") => Ok(LseOut::InPlace),
            _ => Err(PyValueError::new_err(format!(
                "output_lse {}: expected True, False or \"in_place\"",
                x.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ))),
        }
    }

    fn py(self) -> &'static str {
        match self {
            LseOut::Off => "False",
            LseOut::New => "True",
            LseOut::InPlace => "\"in_place\"",
        }
    }
}

/// The declaration from the keyword arguments.
fn declared(
    dtype: &str,
    base: &str,
    lse_layout: &str,
    empty: &str,
    inf_is_empty: bool,
    scales: &str,
) -> PyResult<Declared> {
    Ok(Declared {
        dtype: kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?,
        base: parse_base(base).map_err(PyValueError::new_err)?,
        empty: parse_empty(empty).map_err(PyValueError::new_err)?,
        inf_is_empty,
        layout: parse_layout(lse_layout).map_err(PyValueError::new_err)?,
        scales: parse_scales(scales).map_err(PyValueError::new_err)?,
    })
}

/// The declaration's keyword arguments as a call writes them.
fn kwargs(d: &Declared) -> String {
    format!(
        "dtype=\"{}\", base=\"{}\", lse_layout=\"{}\", empty=\"{}\", inf_is_empty={}, scales=\"{}\"",
        d.dtype.name(),
        d.base.name(),
        d.layout.name(),
        d.empty.name(),
        if d.inf_is_empty { "True" } else { "False" },
        d.scales.name()
    )
}

/// A shape as Python gives it, each dimension at least 1, within the
/// caps.
fn checked(d: (i64, i64, i64)) -> PyResult<(Dims, Shape)> {
    let bad = || {
        PyValueError::new_err(format!(
            "shape {d:?}: expected (num_tokens, num_heads, head_size), each at least 1"
        ))
    };
    let c = |x: i64| usize::try_from(x).map_err(|_| bad());
    let dims = [c(d.0)?, c(d.1)?, c(d.2)?];
    let shape = within_caps(dims).map_err(PyValueError::new_err)?;
    Ok((dims, shape))
}

/// merge_attn_states(prefix_output, prefix_lse, suffix_output, suffix_lse, dtype="bfloat16", base="e", lse_layout="head_major", empty="prefix", inf_is_empty=True, scales="weights") -> (out_lo, out_hi, lse_lo, lse_hi)
///
/// The merge of two partial attention states (`oracle::merge_attn_states`)
/// as the intervals any admissible kernel's output and output LSE lie in.
/// `prefix_output`, `suffix_output` `[T, H, D]`: uint16 bit patterns of
/// `dtype` (`"bfloat16"`, `"float16"`) or float32 for `"float32"`;
/// `prefix_lse`, `suffix_lse` float32, `[H, T]` (`lse_layout="head_major"`,
/// vLLM's) or `[T, H]` (`"token_major"`, SGLang's and FlashInfer's), in
/// natural log (`base="e"`) or base 2 (`"2"`, FlashInfer's).
///
/// An LSE of `-inf` (and `+inf` when `inf_is_empty`: FlashAttention 2's)
/// marks a side with no keys: one empty side gives the other side's output
/// and LSE bit for bit; both empty give the prefix output copied
/// (`empty="prefix"`: vLLM's CUDA kernel) or zero (`"zero"`: vLLM's
/// Triton kernel after its NaN fix) and an LSE of `-inf`. Otherwise the
/// output is `(w_p p + w_s s) / (w_p + w_s)`, `w = b^(lse - max)`, and
/// the LSE `max + log_b(w_p + w_s)`, enclosed for every binary32
/// evaluation in the field's forms (module docs of core): the scales from
/// the weights (`scales="weights"`: vLLM, SGLang, FlashInfer), or from the
/// rounded output LSE, `b^(lse - out_lse)` per side (`"lse_out"`:
/// FlashAttention's own split-KV combine, rule `MERGE-LSE-OUT`; its scales
/// are not exactly 1/2 at equal LSEs).
///
/// Returns new arrays in the inputs' representations: `out_lo`, `out_hi`
/// `[T, H, D]` and float32 `lse_lo`, `lse_hi` in the declared layout
/// (equal bits: decided; a zero end admits either zero).
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown dtype, base, layout or policy, shapes that do not agree, an
/// output value not finite or of `2^64` or more, an LSE that is NaN (or
/// `+inf` without `inf_is_empty`), or a case over the caps.
#[pyfunction]
#[pyo3(signature = (prefix_output, prefix_lse, suffix_output, suffix_lse, dtype = "bfloat16", base = "e", lse_layout = "head_major", empty = "prefix", inf_is_empty = true, scales = "weights"))]
#[allow(clippy::too_many_arguments)]
#[allow(clippy::type_complexity)]
fn merge_attn_states<'py>(
    py: Python<'py>,
    prefix_output: Bound<'py, PyAny>,
    prefix_lse: Bound<'py, PyAny>,
    suffix_output: Bound<'py, PyAny>,
    suffix_lse: Bound<'py, PyAny>,
    dtype: &str,
    base: &str,
    lse_layout: &str,
    empty: &str,
    inf_is_empty: bool,
    scales: &str,
) -> PyResult<(
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
)> {
    let decl = declared(dtype, base, lse_layout, empty, inf_is_empty, scales)?;
    let dt = decl.dtype;
    let (ps, pv, _) = read_values("prefix_output", &prefix_output, dt, false)?;
    let (ss, sv, _) = read_values("suffix_output", &suffix_output, dt, false)?;
    let (pls, plv, _) = read_values("prefix_lse", &prefix_lse, Dtype::F32, false)?;
    let (sls, slv, _) = read_values("suffix_lse", &suffix_lse, Dtype::F32, false)?;
    if ps.len() != 3 || ps != ss {
        return Err(PyValueError::new_err(format!(
            "prefix_output {ps:?}, suffix_output {ss:?}: expected two [T, H, D] arrays"
        )));
    }
    let (dims, shape) = checked((ps[0] as i64, ps[1] as i64, ps[2] as i64))?;
    let ld = decl.layout.dims(&shape).to_vec();
    if pls != ld || sls != ld {
        return Err(PyValueError::new_err(format!(
            "prefix_lse {pls:?}, suffix_lse {sls:?}: expected {ld:?} ({} of [T, H, D] = {dims:?})",
            decl.layout.name()
        )));
    }
    let case = Case {
        p_out: pv,
        p_lse: plv,
        s_out: sv,
        s_lse: slv,
    };
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    Ok((
        to_array(py, dt, &ps, &want.out.lo)?,
        to_array(py, dt, &ps, &want.out.hi)?,
        array(py, &ld, want.lse.lo)?.into_any(),
        array(py, &ld, want.lse.hi)?.into_any(),
    ))
}

/// merge_attn_states_case(shape, arm, seed=None, dtype="bfloat16", base="e", lse_layout="head_major", empty="prefix", inf_is_empty=True, scales="weights") -> dict
///
/// One case of `check_merge_attn_states` as new arrays, as the callable
/// gets them: `prefix_output`, `suffix_output` (uint16 bit patterns of
/// `dtype`, or float32) `[T, H, D]`, `prefix_lse`, `suffix_lse` (float32,
/// the declared layout); and the oracle's answer under the declaration:
/// `out_lo`, `out_hi`, `lse_lo`, `lse_hi`. `shape` is `(num_tokens,
/// num_heads, head_size)`; `seed` None: the check's first seed.
///
/// Errors: `ValueError` as `merge_attn_states`, an unknown arm, or
/// `"POS_INF"` without `inf_is_empty`.
#[pyfunction]
#[pyo3(signature = (shape, arm, seed = None, dtype = "bfloat16", base = "e", lse_layout = "head_major", empty = "prefix", inf_is_empty = true, scales = "weights"))]
#[allow(clippy::too_many_arguments)]
fn merge_attn_states_case<'py>(
    py: Python<'py>,
    shape: (i64, i64, i64),
    arm: &str,
    seed: Option<u64>,
    dtype: &str,
    base: &str,
    lse_layout: &str,
    empty: &str,
    inf_is_empty: bool,
    scales: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let decl = declared(dtype, base, lse_layout, empty, inf_is_empty, scales)?;
    let (dims, sh) = checked(shape)?;
    let sp = Spec {
        dims,
        decl,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, decl.dtype, arm)),
    };
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let want = py
        .detach(|| reference(&sh, &case, &decl))
        .map_err(value_error)?;
    let dt = decl.dtype;
    let ld = decl.layout.dims(&sh);
    let dict = PyDict::new(py);
    dict.set_item("prefix_output", to_array(py, dt, &dims, &case.p_out)?)?;
    dict.set_item("prefix_lse", array(py, &ld, case.p_lse)?)?;
    dict.set_item("suffix_output", to_array(py, dt, &dims, &case.s_out)?)?;
    dict.set_item("suffix_lse", array(py, &ld, case.s_lse)?)?;
    dict.set_item("out_lo", to_array(py, dt, &dims, &want.out.lo)?)?;
    dict.set_item("out_hi", to_array(py, dt, &dims, &want.out.hi)?)?;
    dict.set_item("lse_lo", array(py, &ld, want.lse.lo)?)?;
    dict.set_item("lse_hi", array(py, &ld, want.lse.hi)?)?;
    Ok(dict)
}

/// (token, head) of LSE index `i` under `layout`.
fn pair_of(layout: Layout, shape: &Shape, i: usize) -> (usize, usize) {
    match layout {
        Layout::HeadMajor => (i % shape.tokens(), i / shape.tokens()),
        Layout::TokenMajor => (i / shape.heads(), i % shape.heads()),
    }
}

/// `want`'s interval at `i` as a failure shows it, in `dt`.
fn wanted(dt: Dtype, r: &kernel_oracle::merge_attn_states::Reference, i: usize) -> String {
    let (lo, hi) = (r.lo[i], r.hi[i]);
    if r.decided(i) {
        format!("want {} (decided)", shown(dt, dt.encode(lo)))
    } else {
        format!(
            "want within [{}, {}] (bounded)",
            shown(dt, dt.encode(lo)),
            shown(dt, dt.encode(hi))
        )
    }
}

/// The failure lines of a judged case: how many outputs and output LSEs
/// were not admitted, the worst excess in ulps, the first one's place,
/// its pair's LSEs and its inputs.
fn failure_lines(
    r: &mut String,
    decl: &Declared,
    shape: &Shape,
    v: &Verdicts,
    want: &Answer,
    c: &Case,
    got: (&[u32], Option<&[u32]>),
) {
    let dt = decl.dtype;
    let [_, hn, dn] = shape.dims();
    let f = |x: f32| shown(Dtype::F32, x.to_bits());
    if let Some(at) = v.out.first {
        let (t, h, e) = (at / (hn * dn), at / dn % hn, at % dn);
        let i = decl.layout.index(shape, t, h);
        let _ = writeln!(
            r,
            "  out: {} of {} elements not admitted ({} of {} decided ones differ, {} of {} bounded ones outside), worst {} ulps outside; first at [t {t}, h {h}, e {e}]: got {}, {}; prefix_lse {}, suffix_lse {}, prefix_output {}, suffix_output {}",
            v.out.decided_wrong + v.out.bounded_outside,
            v.out.n,
            v.out.decided_wrong,
            v.out.decided,
            v.out.bounded_outside,
            v.out.bounded,
            v.out.worst_ulps,
            got.0.get(at).map_or_else(|| "nothing".into(), |&x| shown(dt, x)),
            wanted(dt, &want.out, at),
            f(c.p_lse[i]),
            f(c.s_lse[i]),
            shown(dt, dt.encode(c.p_out[at])),
            shown(dt, dt.encode(c.s_out[at])),
        );
    }
    if let (Some(lv), Some(g)) = (&v.lse, got.1) {
        if let Some(i) = lv.first {
            let (t, h) = pair_of(decl.layout, shape, i);
            let _ = writeln!(
                r,
                "  output_lse: {} of {} not admitted ({} decided ones differ, {} bounded ones outside), worst {} ulps outside; first at [t {t}, h {h}] (index {i}, {}): got {}, {}; prefix_lse {}, suffix_lse {}",
                lv.decided_wrong + lv.bounded_outside,
                lv.n,
                lv.decided_wrong,
                lv.bounded_outside,
                lv.worst_ulps,
                decl.layout.name(),
                g.get(i).map_or_else(|| "nothing".into(), |&x| shown(Dtype::F32, x)),
                wanted(Dtype::F32, &want.lse, i),
                f(c.p_lse[i]),
                f(c.s_lse[i]),
            );
        }
    }
}

/// check_merge_attn_states(merge, shapes=None, arms=None, seeds=None, trials=1, dtype="bfloat16", base="e", lse_layout="head_major", empty="prefix", inf_is_empty=True, scales="weights", output_lse=True, verbose=True, name=None) -> CheckReport
///
/// Runs `merge`, a merge of two partial attention states by their
/// log-sum-exps, through the arms `RAND` (LSEs within 3 of each other),
/// `FAR` (80 to 120 natural-log units apart: the smaller weight normal,
/// subnormal or zero), `EQUAL` (equal LSEs: the output decided),
/// `EMPTY_ONE` (one side `-inf`: the other side bit for bit),
/// `EMPTY_BOTH` (half the pairs both `-inf`: the declared policy),
/// `POS_INF` (FlashAttention 2's `+inf` for an empty side; only with
/// `inf_is_empty`) and `LARGE` (LSEs of magnitude 5000 to 20000: `exp`
/// without the maximum overflows), and judges every output element and
/// output LSE against `merge_attn_states`'s intervals under the
/// declaration: bit for bit where the interval is one value (decided),
/// within it elsewhere (bounded).
///
/// The callable: `merge(prefix_output, prefix_lse, suffix_output,
/// suffix_lse, output, output_lse)` with the outputs `[T, H, D]` (uint16
/// bit patterns of `dtype`, numpy has no bfloat16, or float32) and the
/// LSEs float32 `[H, T]` (`lse_layout="head_major"`, vLLM's) or `[T, H]`
/// (`"token_major"`); `output` comes filled with NaN, as does
/// `output_lse` (float32, the same layout) with `output_lse=True`; with
/// `output_lse=False` the callable gets no `output_lse` and it is not
/// judged; with `output_lse="in_place"` the callable's `output_lse` is
/// `prefix_lse` itself (the same array: the merge overwrites the prefix's
/// LSEs with the merged ones, as vLLM's callers that alias them do; a
/// kernel that reads a prefix LSE after another thread wrote it fails).
/// The callable writes the outputs and returns None, or returns new
/// arrays (a tuple `(output, output_lse)`, or `output` alone without the
/// LSE; a callable that takes the four inputs alone returns them). The
/// inputs must be left as given (`prefix_lse` excepted under
/// `"in_place"`). A kernel that refuses a shape raises
/// `kernel_oracle.Refused`.
///
/// `dtype`, `base`, `lse_layout`, `empty`, `inf_is_empty`, `scales`: as
/// `merge_attn_states`; `output_lse` True (the default; None is the
/// same), False or `"in_place"`. `shapes`: `(num_tokens, num_heads, head_size)`
/// tuples. Each row names every base, both-empty policy and layout
/// (`"e/prefix/head_major"`) whose intervals admit the outputs.
///
/// Errors: `ValueError` for an unknown dtype, base, layout, policy or arm,
/// `"POS_INF"` without `inf_is_empty`, a bad `output_lse`, `trials` or
/// `seeds`, or a shape that is bad or over the caps, before any call.
#[pyfunction]
#[pyo3(
    signature = (merge, shapes = None, arms = None, seeds = None, trials = 1, dtype = "bfloat16", base = "e", lse_layout = "head_major", empty = "prefix", inf_is_empty = true, scales = "weights", output_lse = None, verbose = true, name = None),
    text_signature = "(merge, shapes=None, arms=None, seeds=None, trials=1, dtype=\"bfloat16\", base=\"e\", lse_layout=\"head_major\", empty=\"prefix\", inf_is_empty=True, scales=\"weights\", output_lse=True, verbose=True, name=None)"
)]
#[allow(clippy::too_many_arguments)]
fn check_merge_attn_states<'py>(
    py: Python<'py>,
    merge: Bound<'py, PyAny>,
    shapes: Option<Vec<(i64, i64, i64)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    dtype: &str,
    base: &str,
    lse_layout: &str,
    empty: &str,
    inf_is_empty: bool,
    scales: &str,
    output_lse: Option<Bound<'py, PyAny>>,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&merge, "merge")?;
    let seeds = Seeds::new(seeds, trials)?;
    let decl = declared(dtype, base, lse_layout, empty, inf_is_empty, scales)?;
    let lse_out = match &output_lse {
        None => LseOut::New,
        Some(x) => LseOut::parse(x)?,
    };
    let arms = match arms {
        None => Arm::defaults(inf_is_empty),
        Some(a) => arms_or_all(Some(a), &Arm::ALL, Arm::parse)?,
    };
    if !inf_is_empty && arms.contains(&Arm::PosInf) {
        return Err(PyValueError::new_err(
            "arm POS_INF needs inf_is_empty=True (+inf is refused otherwise)",
        ));
    }
    let mut checked_shapes = Vec::new();
    for d in shapes.unwrap_or_else(|| {
        MERGE_ATTN_STATES_SHAPES
            .iter()
            .map(|d| (d[0] as i64, d[1] as i64, d[2] as i64))
            .collect()
    }) {
        checked_shapes.push(checked(d)?);
    }
    let dt = decl.dtype;
    let fname = callable_name(&merge, name);
    let kernel = as_called(py, &merge, 4)?;
    let kind = OutKind::of(dt);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "merge_attn_states".into(),
        ..CheckReport::default()
    };
    let kw_case = kwargs(&decl);
    let kw = if lse_out == LseOut::New {
        kw_case.clone()
    } else {
        format!("{kw_case}, output_lse={}", lse_out.py())
    };
    let about = format!("declared: {kw}");
    o.row(&format!("check_merge_attn_states({fname}), {about}"))?;
    o.row(&format!(
        "{:<14} {:>10} {:>18} {:>15} {:>7} {:>7} {:>7} {:>6} {:>9}  verdict  matches",
        "T,H,D", "arm", "seed", "decided", "bounded", "outside", "lse_out", "ulps", "call_ms"
    ))?;
    let mut admitted = Admitted::default();
    for &(d, shape) in &checked_shapes {
        let ld = decl.layout.dims(&shape);
        for &arm in &arms {
            let base = Spec::base_seed(d, dt, arm);
            for seed in seeds.for_case(base) {
                let sp = Spec {
                    dims: d,
                    decl,
                    arm,
                    seed,
                };
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, &decl))
                    .map_err(value_error)?;
                let (hp, hs) = (Held::new(dt, &case.p_out), Held::new(dt, &case.s_out));
                let p_lse = array(py, &ld, case.p_lse.clone())?;
                let (called, ms) = match lse_out {
                    LseOut::Off | LseOut::New => {
                        let inputs = vec![
                            ("prefix_output", hp.input(py, &d)?),
                            ("prefix_lse", Input::F32(p_lse, &case.p_lse)),
                            ("suffix_output", hs.input(py, &d)?),
                            (
                                "suffix_lse",
                                Input::F32(array(py, &ld, case.s_lse.clone())?, &case.s_lse),
                            ),
                        ];
                        let mut outs: Vec<(&[usize], OutKind)> = vec![(&d, kind)];
                        if lse_out == LseOut::New {
                            outs.push((&ld, OutKind::F32));
                        }
                        call_typed(py, &kernel, Vec::new(), &inputs, &outs)?
                    }
                    LseOut::InPlace => {
                        // prefix_lse is also the output LSE: not compared as
                        // an input.
                        let inputs = vec![
                            ("prefix_output", hp.input(py, &d)?),
                            ("suffix_output", hs.input(py, &d)?),
                            (
                                "suffix_lse",
                                Input::F32(array(py, &ld, case.s_lse.clone())?, &case.s_lse),
                            ),
                        ];
                        let out = kind.array(py, &d, &Fill::new(&inputs))?;
                        let lse_arr = p_lse.into_any();
                        let args = vec![
                            inputs[0].1.array(),
                            lse_arr.clone(),
                            inputs[1].1.array(),
                            inputs[2].1.array(),
                            out.clone(),
                            lse_arr.clone(),
                        ];
                        let outs: Vec<(&[usize], OutKind)> = vec![(&d, kind), (&ld, OutKind::F32)];
                        call_args(py, &kernel, args, &inputs, &outs, vec![out, lse_arr])?
                    }
                };
                let a = arm.name();
                let dims_s = d.map(|x| x.to_string()).join(",");
                let row = format!("{dims_s:<14} {a:>10} 0x{seed:016x}");
                let dims_py = format!("({})", d.map(|x| x.to_string()).join(", "));
                let repro = format!(
                    "kernel_oracle.check_merge_attn_states({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL merge_attn_states: (num_tokens, num_heads, head_size) = {dims_py} arm={a} seed=0x{seed:016x}, {about}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let gout = got[0].bits(dt);
                let glse = got.get(1).map(|g| g.bits(Dtype::F32));
                let v = Verdicts::judge(dt, &want, &gout, glse.as_deref());
                let found = py
                    .detach(|| identify(&shape, &case, &decl, &gout, glse.as_deref()))
                    .map_err(PyValueError::new_err)?;
                let lv = v.lse.as_ref();
                admitted.add(
                    &found,
                    v.out.decided + lv.map_or(0, |l| l.decided),
                    v.out.n + lv.map_or(0, |l| l.n),
                );
                let matches = names_or(&found, "; ", "none known");
                let pass = v.pass() && written.is_empty();
                let ulps = if v.pass() {
                    "-".to_string()
                } else {
                    format!("{}", v.out.worst_ulps.max(lv.map_or(0.0, |l| l.worst_ulps)))
                };
                let lse_bad = lv.map_or("-".to_string(), |l| {
                    (l.decided_wrong + l.bounded_outside).to_string()
                });
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>7} {:>7} {lse_bad:>7} {ulps:>6} {ms:>9.2}  {}  {matches}",
                    v.out.decided,
                    v.out.n,
                    v.out.bounded,
                    v.out.decided_wrong + v.out.bounded_outside,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                failure_lines(
                    &mut r,
                    &decl,
                    &shape,
                    &v,
                    &want,
                    &case,
                    (&gout, glse.as_deref()),
                );
                let case_call = format!(
                    "kernel_oracle.merge_attn_states_case({dims_py}, \"{a}\", seed=0x{seed:016x}, {kw_case})"
                );
                failure_tail(&mut r, &matches, &repro, &case_call);
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let extra = format!("declared {}; {}", label(&decl), admitted.summary());
    rep.finish(o, &extra)
}

/// Adds the merge oracle, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add(
        "MERGE_ATTN_STATES_SHAPES",
        MERGE_ATTN_STATES_SHAPES
            .iter()
            .map(|d| (d[0], d[1], d[2]))
            .collect::<Vec<_>>(),
    )?;
    m.add_function(wrap_pyfunction!(merge_attn_states, m)?)?;
    m.add_function(wrap_pyfunction!(check_merge_attn_states, m)?)?;
    m.add_function(wrap_pyfunction!(merge_attn_states_case, m)?)?;
    Ok(())
}
