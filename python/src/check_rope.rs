//! Rotary position embedding (`oracle::rope`): the rotation itself under
//! a declared arithmetic and layout, and `check_rotary_embedding`, which
//! runs any Python RoPE (vLLM's `rotary_embedding` op, FlashInfer's or
//! SGLang's `apply_rope_with_cos_sin_cache`, torch eager, a Triton
//! kernel) through the case library's cases (`kernel_oracle::rope`) and
//! judges its output bit for bit, naming every known arithmetic and
//! layout it matches.

use crate::arrays::{array, to_vec, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, value, CheckReport, Held, Input, Out,
    OutKind, Seeds,
};
use kernel_oracle::rope::{
    bits, identify, label, parse_arithmetic, reference, within_caps, Arm, Case, Dims, Spec,
};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use oracle::rope::{Arithmetic, Dtype, Layout, Shape};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(tokens, num_heads, num_kv_heads, head_size, rotary_dim,
/// max_position)` a check runs by default: Llama's heads with GQA (4
/// query heads to 2 key heads), then partial rotation as models run it
/// (head_size 80 with rotary_dim 64, 128 with 64 as GLM's half rotation,
/// 256 with 64 as a quarter), then one key head (MQA) over a 32768-row
/// cache, then pair counts that are not multiples of a vector width:
/// GPT-NeoX/Pythia's `rotary_pct = 0.25` (head_size 80, rotary_dim 20: 10
/// pairs) and 3 pairs (a kernel that drops the pairs past its last whole
/// vector of 2, 4 or 8 fails there). Token counts are odd and small: the
/// arithmetic is per element.
pub const ROPE_SHAPES: [Dims; 7] = [
    (7, 4, 2, 128, 128, 4096),
    (5, 3, 1, 80, 64, 2048),
    (4, 2, 2, 128, 64, 1024),
    (3, 2, 1, 256, 64, 8192),
    (2, 8, 1, 64, 64, 32768),
    (3, 2, 1, 80, 20, 2048),
    (2, 2, 2, 32, 6, 64),
];

fn layout_of(is_neox: bool) -> Layout {
    if is_neox {
        Layout::Neox
    } else {
        Layout::Gptj
    }
}

/// The model dtype, its arithmetic and the cache's dtype (None: the
/// model's).
fn parse_all(
    arithmetic: &str,
    dtype: &str,
    cache_dtype: Option<&str>,
) -> PyResult<(Arithmetic, Dtype, Dtype)> {
    let a = parse_arithmetic(arithmetic).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let c = match cache_dtype {
        None => d,
        Some(s) => kernel_oracle::dtype::parse_dtype(s).map_err(PyValueError::new_err)?,
    };
    if c != Dtype::F32 && c != d {
        return Err(PyValueError::new_err(format!(
            "cache_dtype {:?}: the cache is float32 or the model's dtype {:?}",
            c.name(),
            d.name()
        )));
    }
    Ok((a, d, c))
}

/// An array's values: a float32 array (allowed when `dtype` is F32 or
/// `f32_ok`) or uint16 bit patterns of `dtype`; its shape; whether it was
/// float32.
pub(crate) fn read_values(
    arg: &str,
    a: &Bound<'_, PyAny>,
    dtype: Dtype,
    f32_ok: bool,
) -> PyResult<(Vec<usize>, Vec<f32>, bool)> {
    if let Ok(x) = a.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        if dtype == Dtype::F32 || f32_ok {
            return Ok((x.shape().to_vec(), to_vec(&x), true));
        }
    } else if let Ok(x) = a.extract::<PyReadonlyArrayDyn<'_, u16>>() {
        if dtype != Dtype::F32 {
            let v = to_vec(&x)
                .iter()
                .map(|&b| dtype.decode(u32::from(b)))
                .collect();
            return Ok((x.shape().to_vec(), v, false));
        }
    }
    let want = if dtype == Dtype::F32 {
        "a float32 array".to_string()
    } else {
        format!(
            "a uint16 array of {} bit patterns{}",
            dtype.name(),
            if f32_ok { " or a float32 array" } else { "" }
        )
    };
    Err(PyTypeError::new_err(format!(
        "{arg}: expected {want} (dtype={:?})",
        dtype.name()
    )))
}

/// Values of `dtype` as a new array: uint16 bit patterns for bf16 and
/// f16, float32 for F32.
pub(crate) fn to_array<'py>(
    py: Python<'py>,
    dtype: Dtype,
    shape: &[usize],
    v: &[f32],
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match dtype {
        Dtype::F32 => array(py, shape, v.to_vec())?.into_any(),
        _ => array(
            py,
            shape,
            bits(dtype, v).iter().map(|&b| b as u16).collect(),
        )?
        .into_any(),
    })
}

/// rotary_embedding(positions, query, key, cos_sin_cache, is_neox=True, arithmetic="f32", dtype="bfloat16") -> (out_query, out_key)
///
/// Rotary position embedding with a cos/sin cache (`oracle::rope`), out of
/// place. `positions` int64 `[T]`; `query` `[T, num_heads, head_size]`,
/// `key` `[T, num_kv_heads, head_size]` or None, both uint16 bit patterns
/// of `dtype` (`"bfloat16"`, `"float16"`) or float32 for `"float32"`;
/// `cos_sin_cache` `[max_position, rotary_dim]`, float32 or uint16 bit
/// patterns of `dtype`, cosines in the first half of each row and sines
/// in the second (vLLM's and FlashInfer's layout).
///
/// Per token `t` and head, with `pos = positions[t]` and `p < rotary_dim /
/// 2`: the pair `(i1, i2)` is `(p, p + rotary_dim/2)` when `is_neox`
/// (GPT-NeoX, Llama) else `(2p, 2p+1)` (GPT-J, interleaved); `c =
/// cache[pos, p]`, `s = cache[pos, rotary_dim/2 + p]`; `out[i1] = x c - y
/// s`, `out[i2] = y c + x s` with `x = v[i1]`, `y = v[i2]`; dimensions
/// from `rotary_dim` to `head_size` are copied unchanged. `arithmetic`:
/// - `"per_op"`: each product and sum rounded to `dtype` (the cache
///   rounded to `dtype` first): torch eager on bf16/f16 tensors (vLLM's
///   `forward_native`), older vLLM's CUDA op (c10 `BFloat16`/`Half`
///   operators; current vLLM computes in float32);
/// - `"f32"`: binary32, unfused, one rounding to `dtype`;
/// - `"f32_fma"`: binary32 with the first product of each expression fused,
///   `fma(x, c, -(y*s))` and `fma(y, c, x*s)`;
/// - `"f32_fma_second"`: the second fused, `fma(-y, s, x*c)`, `fma(x, s, y*c)`;
/// - `"f32_fma_x"`, `"f32_fma_y"`: one of each, the products with `x`
///   fused (`fma(x, c, -(y*s))`, `fma(x, s, y*c)`) or those with `y`
///   (`fma(-y, s, x*c)`, `fma(y, c, x*s)`): a compiler contracts each
///   expression on its own (Triton's default build is `"f32_fma_x"`).
///
/// Returns `(out_query, out_key)` in the inputs' representation (`out_key`
/// None when `key` is None).
///
/// Errors: `TypeError` for an array of another dtype; `ValueError` for an
/// unknown arithmetic or dtype, shapes that disagree, an odd `rotary_dim`
/// or one past `head_size`, a position outside `0..max_position` (rule
/// `ROPE-POS`), or a case past the check's caps.
#[pyfunction]
#[pyo3(signature = (positions, query, key, cos_sin_cache, is_neox = true, arithmetic = "f32", dtype = "bfloat16"))]
#[allow(clippy::too_many_arguments)]
fn rotary_embedding<'py>(
    py: Python<'py>,
    positions: PyReadonlyArrayDyn<'py, i64>,
    query: Bound<'py, PyAny>,
    key: Option<Bound<'py, PyAny>>,
    cos_sin_cache: Bound<'py, PyAny>,
    is_neox: bool,
    arithmetic: &str,
    dtype: &str,
) -> PyResult<(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>)> {
    let (a, d, _) = parse_all(arithmetic, dtype, None)?;
    let (qs, q, _) = read_values("query", &query, d, false)?;
    let (ks, k) = match &key {
        Some(key) => {
            let (ks, k, _) = read_values("key", key, d, false)?;
            (ks, k)
        }
        None => (
            vec![
                qs.first().copied().unwrap_or(0),
                0,
                qs.get(2).copied().unwrap_or(0),
            ],
            Vec::new(),
        ),
    };
    let (cs, cache, _) = read_values("cos_sin_cache", &cos_sin_cache, d, true)?;
    if qs.len() != 3 || ks.len() != 3 || cs.len() != 2 || positions.ndim() != 1 {
        return Err(PyValueError::new_err(format!(
            "positions {:?}, query {qs:?}, key {ks:?}, cos_sin_cache {cs:?}: expected [T], [T, num_heads, head_size], [T, num_kv_heads, head_size], [max_position, rotary_dim]",
            positions.shape()
        )));
    }
    if ks[0] != qs[0] || ks[2] != qs[2] || positions.shape()[0] != qs[0] {
        return Err(PyValueError::new_err(format!(
            "positions {:?}, query {qs:?}, key {ks:?}: one T and one head_size",
            positions.shape()
        )));
    }
    let shape =
        within_caps((qs[0], qs[1], ks[1], qs[2], cs[1], cs[0])).map_err(PyValueError::new_err)?;
    let case = Case {
        positions: to_vec(&positions),
        query: q,
        key: k,
        cache,
    };
    let (oq, ok) = py
        .detach(|| reference(&shape, &case, layout_of(is_neox), a, d))
        .map_err(value_error)?;
    let oq = to_array(py, d, &qs, &oq)?;
    let ok = match key {
        Some(_) => Some(to_array(py, d, &ks, &ok)?),
        None => None,
    };
    Ok((oq, ok))
}

/// The spec of a case.
fn spec(dims: Dims, d: Dtype, c: Dtype, layout: Layout, arm: Arm, seed: Option<u64>) -> Spec {
    Spec {
        dims,
        dtype: d,
        cache_dtype: c,
        layout,
        arm,
        seed: seed.unwrap_or_else(|| Spec::base_seed(dims, d, c, arm)),
    }
}

/// rotary_embedding_case(tokens, num_heads, num_kv_heads, head_size, rotary_dim, max_position, arm, seed=None, is_neox=True, arithmetic="f32", dtype="bfloat16", cache_dtype=None) -> dict
///
/// One case of `check_rotary_embedding` as new arrays, as the callable gets
/// them: `positions` (int64 `[T]`), `query`, `key` (`[T, heads,
/// head_size]`, uint16 bit patterns of `dtype`, or float32), `cos_sin_cache`
/// (`[max_position, rotary_dim]` in `cache_dtype`, None: `dtype`), and the
/// oracle's `out_query` and `out_key` under the arithmetic and layout
/// named. `seed` None: the check's first seed.
///
/// Errors: `ValueError` for an unknown arm, arithmetic or dtype, a cache
/// dtype other than float32 or `dtype`, a bad shape, PARTIAL on a shape
/// with `rotary_dim == head_size`, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (tokens, num_heads, num_kv_heads, head_size, rotary_dim, max_position, arm, seed = None, is_neox = true, arithmetic = "f32", dtype = "bfloat16", cache_dtype = None))]
#[allow(clippy::too_many_arguments)]
fn rotary_embedding_case<'py>(
    py: Python<'py>,
    tokens: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_size: usize,
    rotary_dim: usize,
    max_position: usize,
    arm: &str,
    seed: Option<u64>,
    is_neox: bool,
    arithmetic: &str,
    dtype: &str,
    cache_dtype: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let (a, d, c) = parse_all(arithmetic, dtype, cache_dtype)?;
    let dims = (
        tokens,
        num_heads,
        num_kv_heads,
        head_size,
        rotary_dim,
        max_position,
    );
    let layout = layout_of(is_neox);
    let sp = spec(dims, d, c, layout, arm, seed);
    let shape = sp.shape().map_err(PyValueError::new_err)?;
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let (oq, ok) = py
        .detach(|| reference(&shape, &case, layout, a, d))
        .map_err(value_error)?;
    let (qs, ks) = shapes_of(&shape);
    let dict = PyDict::new(py);
    dict.set_item("positions", array(py, &[tokens], case.positions)?)?;
    dict.set_item("query", to_array(py, d, &qs, &case.query)?)?;
    dict.set_item("key", to_array(py, d, &ks, &case.key)?)?;
    dict.set_item(
        "cos_sin_cache",
        to_array(py, c, &[max_position, rotary_dim], &case.cache)?,
    )?;
    dict.set_item("out_query", to_array(py, d, &qs, &oq)?)?;
    dict.set_item("out_key", to_array(py, d, &ks, &ok)?)?;
    Ok(dict)
}

/// The query's and key's array shapes.
fn shapes_of(s: &Shape) -> ([usize; 3], [usize; 3]) {
    (
        [s.tokens(), s.num_heads(), s.head_size()],
        [s.tokens(), s.num_kv_heads(), s.head_size()],
    )
}

/// check_rotary_embedding(fn, is_neox=True, arithmetic="f32", dtype="bfloat16", cache_dtype=None, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, a rotary position embedding with a cos/sin cache, through
/// the arms `RAND` (normal values, random positions), `POS` (positions 0,
/// `max_position - 1`, repeated, counting down; never the token's index
/// past token 1), `PARTIAL` (on shapes with `rotary_dim < head_size`
/// only: large values in the dimensions that must pass through) and
/// `TIES` (pairs that nearly cancel in `x c - y s` or `y c + x s`, where
/// every arithmetic gives other bits), and judges both outputs bit for
/// bit (any NaN equal to any NaN) against `rotary_embedding` under the
/// declared `arithmetic` and layout (`is_neox`), in `dtype`.
///
/// The callable: `fn(positions, query, key, cos_sin_cache, out_query,
/// out_key)`, with `positions` int64 `[T]`, `query` `[T, num_heads,
/// head_size]`, `key` `[T, num_kv_heads, head_size]`, `cos_sin_cache`
/// `[max_position, rotary_dim]` (cosines then sines; `cache_dtype`, None:
/// `dtype`) and `out_query`, `out_key` shaped as `query`, `key`; bf16 and
/// f16 arrays are uint16 bit patterns (numpy has no bfloat16), float32
/// arrays float32. The outputs arrive filled with NaN: write them (every
/// element, the dimensions past `rotary_dim` copied from the input) and
/// return None, or return a tuple `(out_query, out_key)`; the inputs must
/// be left as given. An in-place kernel (vLLM's op, FlashInfer's
/// `_inplace`) rotates copies: torch users `q =
/// torch.from_numpy(query).cuda().view(torch.bfloat16)`, run the op on
/// `q.view(T, -1)`, then `out_query[...] = q.view(torch.uint16).cpu().numpy()`.
/// A kernel that refuses a shape (FlashInfer: a float32 cache only)
/// raises `kernel_oracle.Refused`.
///
/// Each row names the known arithmetics and layouts the output matches
/// bit for bit (`"per_op"`, `"f32"`, `"f32_fma"`, `"f32_fma_second"`,
/// `"f32_fma_x"`, `"f32_fma_y"`, each NeoX or GPT-J); with a 16-bit cache
/// the five f32 forms agree (every
/// product of two 16-bit values is exact in f32), so only a float32 cache
/// tells the contractions apart. What matches on every TIES case is how
/// the kernel computes.
///
/// Errors: `ValueError` for an unknown arithmetic, dtype or arm, a cache
/// dtype other than float32 or `dtype`, a bad shape or one over the caps
/// (2^24 query and key elements, 2^24 cache elements), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, is_neox = true, arithmetic = "f32", dtype = "bfloat16", cache_dtype = None, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_rotary_embedding<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    is_neox: bool,
    arithmetic: &str,
    dtype: &str,
    cache_dtype: Option<&str>,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let (arith, d, c) = parse_all(arithmetic, dtype, cache_dtype)?;
    let layout = layout_of(is_neox);
    let shapes = shapes.unwrap_or_else(|| ROPE_SHAPES.to_vec());
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    for &dims in &shapes {
        within_caps(dims).map_err(PyValueError::new_err)?;
    }
    let fname = callable_name(&r#fn, name);
    let kind = OutKind::of(d);
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "rotary_embedding".into(),
        ..CheckReport::default()
    };
    let declared = label(arith, layout);
    let py_bool = if is_neox { "True" } else { "False" };
    let kw = format!(
        "is_neox={py_bool}, arithmetic=\"{arithmetic}\", dtype=\"{}\", cache_dtype=\"{}\"",
        d.name(),
        c.name()
    );
    o.row(&format!(
        "check_rotary_embedding({fname}), {} with a {} cache, declared: {declared}",
        d.name(),
        c.name()
    ))?;
    o.row(&format!(
        "{:<26} {:>7} {:>18} {:>15} {:>9}  verdict  matches",
        "T,H,KVH,hs,rot,maxpos", "arm", "seed", "outputs differ", "call_ms"
    ))?;
    // The (arithmetic, layout) pairs every compared case matched, and
    // every compared TIES case.
    let mut all = crate::check::Every::<(Arithmetic, Layout)>::default();
    let mut ties = crate::check::Every::<(Arithmetic, Layout)>::default();
    for &dims in &shapes {
        let shape = within_caps(dims).map_err(PyValueError::new_err)?;
        let (qs, ks) = shapes_of(&shape);
        for &arm in &arms {
            if !arm.runs_on(&shape) {
                continue;
            }
            let base = Spec::base_seed(dims, d, c, arm);
            for seed in seeds.for_case(base) {
                let sp = spec(dims, d, c, layout, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let (wq, wk) = py
                    .detach(|| reference(&shape, &case, layout, arith, d))
                    .map_err(value_error)?;
                let (hq, hk, hc) = (
                    Held::new(d, &case.query),
                    Held::new(d, &case.key),
                    Held::new(c, &case.cache),
                );
                let inputs = [
                    (
                        "positions",
                        Input::I64(
                            array(py, &[dims.0], case.positions.clone())?,
                            &case.positions,
                        ),
                    ),
                    ("query", hq.input(py, &qs)?),
                    ("key", hk.input(py, &ks)?),
                    ("cos_sin_cache", hc.input(py, &[dims.5, dims.4])?),
                ];
                let (called, ms) =
                    call_typed(py, &r#fn, Vec::new(), &inputs, &[(&qs, kind), (&ks, kind)])?;
                let a = arm.name();
                let dims_s = format!(
                    "{},{},{},{},{},{}",
                    dims.0, dims.1, dims.2, dims.3, dims.4, dims.5
                );
                let row = format!("{dims_s:<26} {a:>7} 0x{seed:016x}");
                let dims_py = format!("({dims_s})").replace(',', ", ");
                let repro = format!(
                    "kernel_oracle.check_rotary_embedding({fname}, {kw}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let head = format!(
                    "FAIL rotary_embedding: (T, num_heads, num_kv_heads, head_size, rotary_dim, max_position) = {dims_py} arm={a} seed=0x{seed:016x}, {} with a {} cache, declared: {declared}",
                    d.name(),
                    c.name()
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let got_bits = |g: &crate::check::Got| g.bits(d);
                let (gq, gk) = (got_bits(&got[0]), got_bits(&got[1]));
                let (bq, bk) = (bits(d, &wq), bits(d, &wk));
                let differ = |g: &[u32], w: &[u32]| -> Vec<usize> {
                    (0..w.len()).filter(|&i| !d.same(g[i], w[i])).collect()
                };
                let (dq, dk) = (differ(&gq, &bq), differ(&gk, &bk));
                let found = py
                    .detach(|| identify(&shape, &case, d, &gq, &gk))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                if arm == Arm::Ties {
                    ties.meet(&found);
                }
                let matches = list(&found, "none known");
                let pass = dq.is_empty() && dk.is_empty() && written.is_empty();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {ms:>9.2}  {}  {matches}",
                    dq.len() + dk.len(),
                    bq.len() + bk.len(),
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                for (what, diffs, g, w, src, heads) in [
                    ("out_query", &dq, &gq, &bq, &case.query, dims.1),
                    ("out_key", &dk, &gk, &bk, &case.key, dims.2),
                ] {
                    let Some(&at) = diffs.first() else { continue };
                    let hs = dims.3;
                    let (t, h, j) = (at / (heads * hs), at / hs % heads, at % hs);
                    let shown = |b: u32| match d {
                        Dtype::F32 => value(f32::from_bits(b)),
                        _ => format!("0x{b:04X} ({})", value(d.decode(b))),
                    };
                    let _ = writeln!(
                        r,
                        "  {what}: {} of {} elements differ; first at [token {t}, head {h}, dim {j}]{}: got {}, want {} (input {}, position {})",
                        diffs.len(),
                        w.len(),
                        if j >= dims.4 { " (past rotary_dim: passed through)" } else { "" },
                        shown(g[at]),
                        shown(w[at]),
                        value(src[at]),
                        case.positions[t]
                    );
                }
                let _ = writeln!(r, "  the output matches: {matches}");
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's outputs:\n  kernel_oracle.rotary_embedding_case({}, \"{a}\", seed=0x{seed:016x}, {kw})",
                    dims_py.trim_start_matches('(').trim_end_matches(')')
                );
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let sum = |v: &crate::check::Every<(Arithmetic, Layout)>| v.phrase(|&(a, l)| label(a, l));
    rep.finish(
        o,
        &format!(
            "bit-identical on every compared case under: {}; on every TIES case under: {}; ",
            sum(&all),
            sum(&ties)
        ),
    )
}

/// `"per_op/neox; f32/neox"`, or `none` for an empty list.
fn list(v: &[(Arithmetic, Layout)], none: &str) -> String {
    let names: Vec<String> = v.iter().map(|&(a, l)| label(a, l)).collect();
    crate::check::names_or(&names, "; ", none)
}

/// Adds rotary embedding, its check, its case and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ROPE_SHAPES", ROPE_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(rotary_embedding, m)?)?;
    m.add_function(wrap_pyfunction!(check_rotary_embedding, m)?)?;
    m.add_function(wrap_pyfunction!(rotary_embedding_case, m)?)?;
    Ok(())
}
