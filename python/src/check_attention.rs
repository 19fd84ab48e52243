//! Scaled dot-product attention (`oracle::attention`): the oracle's
//! intervals for any input, and `check_attention`, which runs any Python
//! attention (torch's `scaled_dot_product_attention` and its backends,
//! flash-attn, FlexAttention, Triton kernels, Hugging Face's eager form)
//! through the case library's cases (`kernel_oracle::attention`): every
//! output within the interval core's sound enclosure leaves, bit for bit
//! where that interval is one value, naming every arithmetic (`flash`,
//! `f32`, `eager`) the output matches.

use crate::arrays::value_error;
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, failure_tail, names_or, Admitted,
    CheckReport, Held, Out, OutKind, Seeds,
};
use crate::check_rms_norm::{as_called, shown};
use crate::check_rope::{read_values, to_array};
use kernel_oracle::attention::{
    identify, parse_arithmetic, reference, within_caps, Arm, Case, Dims, Reference, Spec, Verdict,
};
use oracle::attention::{default_scale, Causal, Declared, Mask, Window};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// A shape as Python gives it: `(B, Hq, Hkv, Sq, Sk, D, Dv)`.
type PyDims = (usize, usize, usize, usize, usize, usize, usize);

/// The shapes `(B, Hq, Hkv, Sq, Sk, D, Dv)` a check runs by default:
/// decode (`Sq = 1`) over 1, 17, 1000 (MQA) and 4097 keys (17 of them in a
/// batch of 3: with more than one key, every sequence's queries, keys and
/// values reach its output, so a batch stride taken as 0 shows), a ragged
/// prefill (`Sq = Sk = 130`, head dim 80), a chunked prefill (`Sq = 37 <
/// Sk = 160`, head dim 96: top-left and bottom-right part there), and an
/// MLA-like `D = 192`, `Dv = 128`; GQA 8/2 and 4/2 among them.
pub const ATTENTION_SHAPES: [PyDims; 7] = [
    (2, 8, 2, 1, 1, 64, 64),
    (3, 8, 2, 1, 17, 128, 128),
    (1, 8, 1, 1, 1000, 128, 128),
    (1, 4, 4, 1, 4097, 64, 64),
    (1, 4, 2, 130, 130, 80, 80),
    (1, 4, 2, 37, 160, 96, 96),
    (1, 4, 1, 16, 48, 192, 128),
];

fn dims(d: PyDims) -> Dims {
    [d.0, d.1, d.2, d.3, d.4, d.5, d.6]
}

/// The mask from the keyword arguments: `causal` None, `"top_left"` or
/// `"bottom_right"`; `window` None, an int (`left`) or `(left, right)`,
/// each None or negative for no limit.
fn mask_of(causal: Option<&str>, window: Option<&Bound<'_, PyAny>>) -> PyResult<Mask> {
    let causal = match causal {
        None => None,
        Some("top_left") => Some(Causal::TopLeft),
        Some("bottom_right") => Some(Causal::BottomRight),
        Some(s) => {
            return Err(PyValueError::new_err(format!(
                "causal {s:?}: expected None, \"top_left\" or \"bottom_right\""
            )))
        }
    };
    let side = |x: Option<i64>| x.filter(|&v| v >= 0).map(|v| v as usize);
    let window = match window {
        None => None,
        Some(w) if w.is_none() => None,
        Some(w) => {
            if let Ok(left) = w.extract::<i64>() {
                Some(Window {
                    left: side(Some(left)),
                    right: None,
                })
            } else if let Ok((l, r)) = w.extract::<(Option<i64>, Option<i64>)>() {
                Some(Window {
                    left: side(l),
                    right: side(r),
                })
            } else {
                return Err(PyValueError::new_err(
                    "window: expected None, an int (left) or a (left, right) pair",
                ));
            }
        }
    };
    Ok(Mask { causal, window })
}

/// The declaration for a head dim `d` (`scale` None: `1/sqrt(d)`).
fn declared(
    arithmetic: &str,
    dtype: &str,
    mask: Mask,
    softcap: Option<f32>,
    scale: Option<f32>,
    d: usize,
) -> PyResult<Declared> {
    let a = parse_arithmetic(arithmetic).map_err(PyValueError::new_err)?;
    let dt = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    Declared::new(
        a,
        dt,
        scale.unwrap_or_else(|| default_scale(d)),
        softcap,
        mask,
    )
    .map_err(value_error)
}

/// `dims` within the caps and every query seeing a key under `mask`.
fn checked(d: Dims, mask: &Mask) -> PyResult<oracle::attention::Shape> {
    let shape = within_caps(d).map_err(PyValueError::new_err)?;
    for i in 0..d[3] {
        if mask.range(i, d[3], d[4]).1 == 0 {
            return Err(PyValueError::new_err(format!(
                "{d:?}: query {i} sees no key under the mask (rows without keys are refused)"
            )));
        }
    }
    Ok(shape)
}

/// attention(q, k, v, dtype="bfloat16", causal=None, window=None, softcap=None, scale=None, arithmetic="flash") -> (out_lo, out_hi)
///
/// Scaled dot-product attention (`oracle::attention`) as the interval of
/// outputs any admissible kernel gives. `q` `[B, Hq, Sq, D]`, `k` `[B, Hkv,
/// Sk, D]`, `v` `[B, Hkv, Sk, Dv]` (torch SDPA's layout; GQA: query head
/// `h` reads kv head `h // (Hq // Hkv)`), uint16 bit patterns of `dtype`
/// (`"bfloat16"`, `"float16"`) or float32 for `"float32"`.
///
/// `causal`: None, `"top_left"` (torch's `is_causal`: query `i` sees keys
/// `j <= i`) or `"bottom_right"` (flash-attn: `j <= i + Sk - Sq`).
/// `window`: None, an int `left`, or `(left, right)` as flash-attn's
/// `window_size` (None or -1: no limit), around the aligned diagonal.
/// `softcap`: `cap tanh(s / cap)` on the scaled scores (Gemma 2). `scale`:
/// default `1/sqrt(D)`. `arithmetic`: `"flash"` (P rounded to the dtype
/// before the PV product: FlashAttention, torch's flash, efficient and
/// cuDNN backends, FlexAttention), `"f32"` (P in float32: torch's math
/// backend, which upcasts bf16/f16 since 2.5), `"eager"` (scores and P
/// rounded to the dtype: Hugging Face's eager form; torch's math backend
/// without its upcast, q and k scaled by `sqrt(scale)` in the dtype).
///
/// Returns new arrays `[B, Hq, Sq, Dv]` in the input's representation:
/// `out_lo`, `out_hi` (equal bits: the output is decided).
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown arithmetic, dtype or causal, a bad window, scale or softcap,
/// shapes that do not agree, an input not finite or of `2^32` or more, a
/// query that sees no key, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (q, k, v, dtype = "bfloat16", causal = None, window = None, softcap = None, scale = None, arithmetic = "flash"))]
#[allow(clippy::too_many_arguments)]
fn attention<'py>(
    py: Python<'py>,
    q: Bound<'py, PyAny>,
    k: Bound<'py, PyAny>,
    v: Bound<'py, PyAny>,
    dtype: &str,
    causal: Option<&str>,
    window: Option<Bound<'py, PyAny>>,
    softcap: Option<f32>,
    scale: Option<f32>,
    arithmetic: &str,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let mask = mask_of(causal, window.as_ref())?;
    let dt = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let (qs, qv, _) = read_values("q", &q, dt, false)?;
    let (ks, kv, _) = read_values("k", &k, dt, false)?;
    let (vs, vv, _) = read_values("v", &v, dt, false)?;
    let agree = qs.len() == 4
        && ks.len() == 4
        && vs.len() == 4
        && qs[0] == ks[0]
        && ks[0] == vs[0]
        && qs[3] == ks[3]
        && ks[1] == vs[1]
        && ks[2] == vs[2];
    if !agree {
        return Err(PyValueError::new_err(format!(
            "q {qs:?}, k {ks:?}, v {vs:?}: expected [B, Hq, Sq, D], [B, Hkv, Sk, D], [B, Hkv, Sk, Dv]"
        )));
    }
    let d = [qs[0], qs[1], ks[1], qs[2], ks[2], qs[3], vs[3]];
    let shape = checked(d, &mask)?;
    let decl = declared(arithmetic, dtype, mask, softcap, scale, d[5])?;
    let case = Case {
        q: qv,
        k: kv,
        v: vv,
        peak: Vec::new(),
    };
    let want = py
        .detach(|| reference(&shape, &case, &decl))
        .map_err(value_error)?;
    let os = [d[0], d[1], d[3], d[6]];
    Ok((
        to_array(py, dt, &os, &want.lo)?,
        to_array(py, dt, &os, &want.hi)?,
    ))
}

/// attention_case(shape, arm, seed=None, dtype="bfloat16", causal=None, window=None, softcap=None, scale=None, arithmetic="flash") -> dict
///
/// One case of `check_attention` as new arrays, as the callable gets them:
/// `q`, `k`, `v` (uint16 bit patterns of `dtype`, or float32), and the
/// oracle's answer under the declaration: `out_lo`, `out_hi` `[B, Hq, Sq,
/// Dv]`; for PEAK also `peak` (int64 `[B, Hq, Sq]`, the key each query
/// row was built to pick). `shape` is `(B, Hq, Hkv, Sq, Sk, D, Dv)`;
/// `seed` None: the check's first seed.
///
/// Errors: `ValueError` as `attention`, or an unknown arm.
#[pyfunction]
#[pyo3(signature = (shape, arm, seed = None, dtype = "bfloat16", causal = None, window = None, softcap = None, scale = None, arithmetic = "flash"))]
#[allow(clippy::too_many_arguments)]
fn attention_case<'py>(
    py: Python<'py>,
    shape: PyDims,
    arm: &str,
    seed: Option<u64>,
    dtype: &str,
    causal: Option<&str>,
    window: Option<Bound<'py, PyAny>>,
    softcap: Option<f32>,
    scale: Option<f32>,
    arithmetic: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let mask = mask_of(causal, window.as_ref())?;
    let d = dims(shape);
    let sh = checked(d, &mask)?;
    let decl = declared(arithmetic, dtype, mask, softcap, scale, d[5])?;
    let sp = spec(d, &decl, arm, seed);
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let want = py
        .detach(|| reference(&sh, &case, &decl))
        .map_err(value_error)?;
    let dt = decl.dtype();
    let dict = PyDict::new(py);
    dict.set_item("q", to_array(py, dt, &[d[0], d[1], d[3], d[5]], &case.q)?)?;
    dict.set_item("k", to_array(py, dt, &[d[0], d[2], d[4], d[5]], &case.k)?)?;
    dict.set_item("v", to_array(py, dt, &[d[0], d[2], d[4], d[6]], &case.v)?)?;
    let os = [d[0], d[1], d[3], d[6]];
    dict.set_item("out_lo", to_array(py, dt, &os, &want.lo)?)?;
    dict.set_item("out_hi", to_array(py, dt, &os, &want.hi)?)?;
    if !case.peak.is_empty() {
        let p: Vec<i64> = case.peak.iter().map(|&j| j as i64).collect();
        dict.set_item("peak", crate::arrays::array(py, &[d[0], d[1], d[3]], p)?)?;
    }
    Ok(dict)
}

/// The spec of a case under `decl` (`seed` None: the check's first).
fn spec(d: Dims, decl: &Declared, arm: Arm, seed: Option<u64>) -> Spec {
    let dtype = decl.dtype();
    Spec {
        dims: d,
        dtype,
        mask: decl.mask(),
        scale: decl.scale(),
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(d, dtype, arm)),
    }
}

/// The failure line of a judged case: how many outputs were not admitted,
/// the worst excess in ulps, the first one's place and inputs.
fn failure_line(
    r: &mut String,
    decl: &Declared,
    v: &Verdict,
    want: &Reference,
    c: &Case,
    got: &[u32],
    d: Dims,
) {
    let Some(at) = v.first else {
        return;
    };
    let dt = decl.dtype();
    let [_, hq, hkv, sq, sk, _, dv] = d;
    let row = at / dv;
    let (e, i, h, b) = (at % dv, row % sq, row / sq % hq, row / sq / hq);
    let kvh = h / (hq / hkv);
    let (first, end) = decl.mask().range(i, sq, sk);
    let (lo, hi) = (want.lo[at], want.hi[at]);
    let wanted = if want.decided(at) {
        format!("want {} (decided)", shown(dt, dt.encode(lo)))
    } else {
        format!(
            "want within [{}, {}] (bounded)",
            shown(dt, dt.encode(lo)),
            shown(dt, dt.encode(hi))
        )
    };
    let peak = c.peak.get(row).map_or_else(String::new, |j| {
        format!(
            "; PEAK's key {j}, whose v is {}",
            shown(dt, dt.encode(c.v[((b * hkv + kvh) * sk + j) * dv + e]))
        )
    });
    let _ = writeln!(
        r,
        "  out: {} of {} elements not admitted ({} of {} decided ones differ, {} of {} bounded ones outside), worst {} ulps outside; first at [b {b}, h {h}, i {i}, e {e}]: got {}, {wanted}; kv head {kvh}, visible keys {first}..{}{peak}",
        v.decided_wrong + v.bounded_outside,
        v.n,
        v.decided_wrong,
        v.decided,
        v.bounded_outside,
        v.bounded,
        v.worst_ulps,
        got.get(at).map_or_else(|| "nothing".into(), |&x| shown(dt, x)),
        end - 1,
    );
}

/// check_attention(fn, dtype="bfloat16", causal=None, window=None, softcap=None, scale=None, arithmetic="flash", shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, scaled dot-product attention, through the arms `RAND`
/// (normal q, k, v; a score scale of 0.5 to 4 per head), `PEAK` (one
/// visible key per query beats the rest by 30 or more, placed at the
/// mask's boundaries: the output is that key's v row), `SPIKE` (scores of
/// magnitude 100 and more: `exp` without the maximum overflows),
/// `UNIFORM` (`q = 0`: the output is the mean of the visible v) and
/// `SCALE` (one score channel, `v[j][0]` the scaled score less its
/// softmax mean: an output near 0 that a scale off by `1 + eps` moves by
/// `eps Var_p(x)`), and
/// judges every output against `attention`'s interval under the
/// declaration: bit for bit where the interval is one value (decided),
/// within it elsewhere (bounded).
///
/// The callable: `fn(q, k, v, out)` with `q` `[B, Hq, Sq, D]`, `k` `[B,
/// Hkv, Sk, D]`, `v` `[B, Hkv, Sk, Dv]` and `out` `[B, Hq, Sq, Dv]`, uint16
/// bit patterns of `dtype` (numpy has no bfloat16) or float32 for
/// `"float32"`; `out` comes filled with NaN: the callable writes it and
/// returns None, or returns a new array (a callable that takes `q, k, v`
/// alone returns it). The inputs must be left as given. A kernel that
/// refuses a shape raises `kernel_oracle.Refused`.
///
/// `causal`, `window`, `softcap`, `scale`, `arithmetic`: as `attention`
/// (`scale` None: `1/sqrt(D)` of each shape). `shapes`: `(B, Hq, Hkv, Sq,
/// Sk, D, Dv)` tuples. Each row names every arithmetic whose intervals
/// admit the output.
///
/// Errors: `ValueError` for an unknown arithmetic, dtype, causal or arm,
/// a bad window, scale or softcap, a shape that is bad, over the caps, or
/// leaves a query without keys under the mask, before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, dtype = "bfloat16", causal = None, window = None, softcap = None, scale = None, arithmetic = "flash", shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_attention<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    dtype: &str,
    causal: Option<&str>,
    window: Option<Bound<'py, PyAny>>,
    softcap: Option<f32>,
    scale: Option<f32>,
    arithmetic: &str,
    shapes: Option<Vec<PyDims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let mask = mask_of(causal, window.as_ref())?;
    let shapes: Vec<Dims> = shapes
        .unwrap_or_else(|| ATTENTION_SHAPES.to_vec())
        .into_iter()
        .map(dims)
        .collect();
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    let mut decls = Vec::new();
    for &d in &shapes {
        checked(d, &mask)?;
        decls.push(declared(arithmetic, dtype, mask, softcap, scale, d[5])?);
    }
    let dt = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let fname = callable_name(&r#fn, name);
    let kernel = as_called(py, &r#fn, 3)?;
    let kind = OutKind::of(dt);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "attention".into(),
        ..CheckReport::default()
    };
    let mut kw = format!("arithmetic=\"{arithmetic}\", dtype=\"{}\"", dt.name());
    if let Some(c) = mask.causal {
        let _ = write!(kw, ", causal=\"{}\"", c.name());
    }
    if let Some(w) = mask.window {
        let side = |x: Option<usize>| x.map_or("None".to_string(), |v| v.to_string());
        let _ = write!(kw, ", window=({}, {})", side(w.left), side(w.right));
    }
    if let Some(c) = softcap {
        let _ = write!(kw, ", softcap={c:?}");
    }
    if let Some(s) = scale {
        let _ = write!(kw, ", scale={s:?}");
    }
    let about = format!("{}, declared: {kw}", dt.name());
    o.row(&format!("check_attention({fname}), {about}"))?;
    o.row(&format!(
        "{:<28} {:>7} {:>18} {:>15} {:>7} {:>7} {:>6} {:>9}  verdict  matches",
        "B,Hq,Hkv,Sq,Sk,D,Dv", "arm", "seed", "decided", "bounded", "outside", "ulps", "call_ms"
    ))?;
    let mut admitted = Admitted::default();
    for (&d, decl) in shapes.iter().zip(&decls) {
        let shape = checked(d, &mask)?;
        let qs = [d[0], d[1], d[3], d[5]];
        let ks = [d[0], d[2], d[4], d[5]];
        let vs = [d[0], d[2], d[4], d[6]];
        let os = [d[0], d[1], d[3], d[6]];
        for &arm in &arms {
            let base = Spec::base_seed(d, dt, arm);
            for seed in seeds.for_case(base) {
                let sp = spec(d, decl, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, decl))
                    .map_err(value_error)?;
                let (hq, hk, hv) = (
                    Held::new(dt, &case.q),
                    Held::new(dt, &case.k),
                    Held::new(dt, &case.v),
                );
                let inputs = vec![
                    ("q", hq.input(py, &qs)?),
                    ("k", hk.input(py, &ks)?),
                    ("v", hv.input(py, &vs)?),
                ];
                let (called, ms) = call_typed(py, &kernel, Vec::new(), &inputs, &[(&os, kind)])?;
                let a = arm.name();
                let dims_s = d.map(|x| x.to_string()).join(",");
                let row = format!("{dims_s:<28} {a:>7} 0x{seed:016x}");
                let dims_py = format!("({})", d.map(|x| x.to_string()).join(", "));
                let repro = format!(
                    "kernel_oracle.check_attention({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL attention: (B, Hq, Hkv, Sq, Sk, D, Dv) = {dims_py} arm={a} seed=0x{seed:016x}, {about}"
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got = got[0].bits(dt);
                let v = Verdict::judge(dt, &want, &got);
                let found = py
                    .detach(|| identify(&shape, &case, decl, &got))
                    .map_err(PyValueError::new_err)?;
                admitted.add(&found, v.decided, v.n);
                let matches = names_or(&found, "; ", "none known");
                let pass = v.pass() && written.is_empty();
                let ulps = if v.pass() {
                    "-".to_string()
                } else {
                    format!("{}", v.worst_ulps)
                };
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>7} {:>7} {ulps:>6} {ms:>9.2}  {}  {matches}",
                    v.decided,
                    v.n,
                    v.bounded,
                    v.decided_wrong + v.bounded_outside,
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                failure_line(&mut r, decl, &v, &want, &case, &got, d);
                let case_call = format!(
                    "kernel_oracle.attention_case({dims_py}, \"{a}\", seed=0x{seed:016x}, {kw})"
                );
                failure_tail(&mut r, &matches, &repro, &case_call);
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    rep.finish(o, &admitted.summary())
}

/// Adds attention, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ATTENTION_SHAPES", ATTENTION_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(check_attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention_case, m)?)?;
    Ok(())
}
