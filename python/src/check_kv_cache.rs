//! Writing a step's keys and values into a paged KV cache
//! (`oracle::kv_cache`): the write itself under a declared layout, cache
//! dtype and FP8 arithmetic, and `check_reshape_and_cache`, which runs
//! any Python KV-cache write (vLLM's `reshape_and_cache_flash` and
//! `reshape_and_cache`, a Triton kernel of vLLM's
//! `triton_reshape_and_cache_flash` form, SGLang's `set_kv_buffer`, torch
//! `index_copy_`) through the case library's cases
//! (`kernel_oracle::kv_cache`) on poisoned caches and judges every
//! element bit for bit: the written ones against the oracle, the others
//! against their poison, naming every known FP8 arithmetic the written
//! elements match.

use crate::arrays::{array, to_vec, value_error};
use crate::check::{
    arms_or_all, call_args, callable_name, failure_head, names_or, value, CheckReport, Got, Held,
    Input, Out, OutKind, Seeds,
};
use crate::conventions::Overflow;
use kernel_oracle::kv_cache::{
    identify, mla_dims, mla_within_caps, parse_kv_cache_dtype, parse_layout, parse_scale_rule,
    reference, split_mla, within_caps, Arm, CacheVerdict, Case, Dims, Known, Spec,
};
use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
use oracle::dtype::Dtype;
use oracle::kv_cache::{Conversion, Coord, KvCacheDtype, Layout, MlaInputs, Shape};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// The shapes `(tokens, num_kv_heads, head_size, block_size, num_blocks)`
/// a check runs by default: Llama's GQA decode (8 key heads of 128, 16
/// slots a block), 300 tokens (PREFILL's run crosses 18 or more block
/// boundaries there), head sizes 64 (32 slots a
/// block), 80 (48: not a power of two, as vLLM's hybrid models size
/// their attention blocks to match a state page, so a slot split by shift
/// and mask fails), 96 (block size 1), 256 with one key head (MQA), then
/// head sizes past a vector's reach: 72 and 40 (a multiple of 8 but not
/// of 16: a kernel moving 16 elements at a time without a tail loop
/// drops 8) and 36 with one head (not a multiple of 8: a row of 36
/// elements has a tail past every vector of 8 or 16), and last a cache of
/// 67,200 slots (4200 blocks of 16: past 2^15 and 2^16, so a slot kept in
/// 16 bits fails). The paged layout
/// runs the shapes whose head size is a multiple of its `x` (16 for FP8
/// codes, 8 for bf16 and f16, 4 for f32); the other shapes are skipped
/// there, each with a row saying so. Token counts are small: the arithmetic
/// is per element.
pub const KV_CACHE_SHAPES: [Dims; 10] = [
    (8, 8, 128, 16, 64),
    (300, 8, 128, 16, 32),
    (17, 4, 64, 32, 8),
    (9, 2, 80, 48, 4),
    (11, 4, 96, 1, 40),
    (5, 1, 256, 16, 6),
    (7, 2, 72, 16, 4),
    (6, 3, 40, 32, 2),
    (5, 1, 36, 16, 3),
    (16, 1, 64, 16, 4200),
];

/// The declared layout, cache dtype, model dtype and conversion.
fn parse_all(
    layout: &str,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
) -> PyResult<(Layout, KvCacheDtype, Dtype, Conversion)> {
    let l = parse_layout(layout).map_err(PyValueError::new_err)?;
    let kv = parse_kv_cache_dtype(kv_cache_dtype).map_err(PyValueError::new_err)?;
    let d = kernel_oracle::dtype::parse_dtype(dtype).map_err(PyValueError::new_err)?;
    let rule = parse_scale_rule(scale_rule).map_err(PyValueError::new_err)?;
    Ok((
        l,
        kv,
        d,
        Conversion {
            rule,
            overflow: overflow.into(),
        },
    ))
}

/// The Python spelling of an overflow policy in rerun lines.
fn overflow_py(o: Overflow) -> &'static str {
    match o {
        Overflow::SatFinite => "kernel_oracle.Overflow.SAT_FINITE",
        Overflow::NonSaturating => "kernel_oracle.Overflow.NON_SATURATING",
    }
}

/// The element kind of the model's arrays (`key`, `value`) and of the
/// caches: float32 for F32, uint16 bit patterns for bf16 and f16, uint8
/// codes for an FP8 cache.
fn cache_kind(kv: KvCacheDtype, d: Dtype) -> OutKind {
    match kv {
        KvCacheDtype::Auto => OutKind::of(d),
        _ => OutKind::U8,
    }
}

/// Bits (widened to 32) as a new array of `kind`.
fn to_array<'py>(
    py: Python<'py>,
    kind: OutKind,
    shape: &[usize],
    bits: &[u32],
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match kind {
        OutKind::F32 => {
            array(py, shape, bits.iter().map(|&b| f32::from_bits(b)).collect())?.into_any()
        }
        OutKind::U8 => array(py, shape, bits.iter().map(|&b| b as u8).collect())?.into_any(),
        OutKind::U16(_) => array(py, shape, bits.iter().map(|&b| b as u16).collect())?.into_any(),
        OutKind::I32 => array(py, shape, bits.iter().map(|&b| b as i32).collect())?.into_any(),
    })
}

/// A returned or written array's elements as bits widened to 32.
fn got_bits(g: &Got) -> Vec<u32> {
    match g {
        Got::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        Got::U8(v) => v.iter().map(|&b| u32::from(b)).collect(),
        Got::U16(v) => v.iter().map(|&b| u32::from(b)).collect(),
        Got::I32(v) => v.iter().map(|&b| b as u32).collect(),
    }
}

/// An array's elements as bits, its kind checked against `kind`; its
/// shape.
fn read_bits(arg: &str, a: &Bound<'_, PyAny>, kind: OutKind) -> PyResult<(Vec<usize>, Vec<u32>)> {
    let got = match kind {
        OutKind::F32 => a.extract::<PyReadonlyArrayDyn<'_, f32>>().ok().map(|x| {
            (
                x.shape().to_vec(),
                to_vec(&x).iter().map(|v| v.to_bits()).collect(),
            )
        }),
        OutKind::U8 => a.extract::<PyReadonlyArrayDyn<'_, u8>>().ok().map(|x| {
            (
                x.shape().to_vec(),
                to_vec(&x).iter().map(|&v| u32::from(v)).collect(),
            )
        }),
        OutKind::U16(_) => a.extract::<PyReadonlyArrayDyn<'_, u16>>().ok().map(|x| {
            (
                x.shape().to_vec(),
                to_vec(&x).iter().map(|&v| u32::from(v)).collect(),
            )
        }),
        OutKind::I32 => None,
    };
    got.ok_or_else(|| {
        let want = match kind {
            OutKind::F32 => "a float32 array",
            OutKind::U8 => "a uint8 array of FP8 codes",
            _ => "a uint16 array of bfloat16 or float16 bit patterns",
        };
        PyTypeError::new_err(format!("{arg}: expected {want}"))
    })
}

/// A scale: a Python float, a numpy scalar or a one-element float32
/// array.
fn read_scale(arg: &str, a: &Bound<'_, PyAny>) -> PyResult<f32> {
    if let Ok(v) = a.extract::<f32>() {
        return Ok(v);
    }
    match a.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        Ok(x) if x.len() == 1 => Ok(to_vec(&x)[0]),
        _ => Err(PyTypeError::new_err(format!(
            "{arg}: expected a float or a one-element float32 array"
        ))),
    }
}

/// A slot mapping (int64, or int32 widened) and its shape.
fn read_slots(a: &Bound<'_, PyAny>) -> PyResult<(Vec<usize>, Vec<i64>)> {
    if let Ok(x) = a.extract::<PyReadonlyArrayDyn<'_, i64>>() {
        return Ok((x.shape().to_vec(), to_vec(&x)));
    }
    match a.extract::<PyReadonlyArrayDyn<'_, i32>>() {
        Ok(x) => Ok((
            x.shape().to_vec(),
            to_vec(&x).into_iter().map(i64::from).collect(),
        )),
        Err(_) => Err(PyTypeError::new_err(
            "slot_mapping: expected an int64 (or int32) array",
        )),
    }
}

/// The shapes of `key` (and `value`), the key cache and the value cache.
fn shapes_of(s: &Shape) -> ([usize; 3], Vec<usize>, Vec<usize>) {
    (
        [s.tokens(), s.num_kv_heads(), s.head_size()],
        s.key_cache_dims().as_slice().to_vec(),
        s.value_cache_dims().as_slice().to_vec(),
    )
}

/// reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, layout="nhd", kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE) -> (key_cache, value_cache)
///
/// The KV-cache write of `oracle::kv_cache`, out of place: new caches,
/// `key_cache` and `value_cache` as given with every token's key and value
/// written. `key`, `value` `[T', num_kv_heads, head_size]` (uint16 bit
/// patterns of `dtype`, `"bfloat16"` or `"float16"`, or float32 for
/// `"float32"`; rows past `T` are CUDA-graph padding, never read);
/// `slot_mapping` int64 or int32 `[T]`, `T <= T'` (slot `s` is offset `s %
/// block_size` of block `s // block_size`; negative: padding, nothing
/// written); `k_scale`, `v_scale` floats (or one-element float32 arrays);
/// the caches in `layout`:
/// - `"nhd"`: both `[num_blocks, block_size, num_kv_heads, head_size]`
///   (vLLM's `reshape_and_cache_flash`, FlashInfer's `"NHD"`);
/// - `"hnd"`: both `[num_blocks, num_kv_heads, block_size, head_size]`
///   (FlashInfer's `"HND"`, vLLM's `kv_cache_layout="HND"`);
/// - `"paged"`: the key cache `[num_blocks, num_kv_heads, head_size // x,
///   block_size, x]`, `x = 16 // element bytes` (8 for bf16, 4 for f32, 16
///   for FP8 codes), the value cache `[num_blocks, num_kv_heads,
///   head_size, block_size]` (vLLM's `reshape_and_cache`, read by its
///   paged attention);
///
/// of `key`'s kind under `kv_cache_dtype="auto"` (each element's bits
/// copied), uint8 codes under `"fp8"` / `"fp8_e4m3"` (E4M3FN) and
/// `"fp8_e5m2"`: the code of the scaled input under `scale_rule`
/// (`"divide"`: `x / s`, one binary32 division, vLLM's CUDA kernels;
/// `"reciprocal"`: `x * fl(1/s)`, torch on CUDA dividing a float32 tensor
/// by a Python float; `"multiply"`: `x * s`, the scale handed inverted;
/// each with `"_in_dtype"`: the scaled value rounded to `dtype` first,
/// torch eager on bf16 and f16 tensors (`"divide_in_dtype"` on the CPU,
/// `"reciprocal_in_dtype"` on CUDA by a Python float);
/// `"divide_scale_in_dtype"`: the scale rounded to `dtype` too, torch on
/// CUDA dividing by a 0-dim float32 tensor), rounded to nearest even with `overflow`
/// (`Overflow.SAT_FINITE`: CUDA's `__NV_SATFINITE`, ±max finite;
/// `Overflow.NON_SATURATING`: torch's `.to(torch.float8_e4m3fn)`, NaN
/// in E4M3 and ±inf in E5M2).
///
/// Errors: `TypeError` for an array of another kind; `ValueError` for an
/// unknown layout, cache dtype, dtype or rule, shapes that disagree, a
/// head size the paged layout cannot pack, a slot past the cache or two
/// tokens with one slot, an FP8 scale that is not positive and finite,
/// or a case past the check's caps.
#[pyfunction]
#[pyo3(signature = (key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, layout = "nhd", kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite))]
#[allow(clippy::too_many_arguments)]
fn reshape_and_cache<'py>(
    py: Python<'py>,
    key: Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
    key_cache: Bound<'py, PyAny>,
    value_cache: Bound<'py, PyAny>,
    slot_mapping: Bound<'py, PyAny>,
    k_scale: Bound<'py, PyAny>,
    v_scale: Bound<'py, PyAny>,
    layout: &str,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let (l, kv, d, conv) = parse_all(layout, kv_cache_dtype, dtype, scale_rule, overflow)?;
    let (ks, kb) = read_bits("key", &key, OutKind::of(d))?;
    let (vs, vb) = read_bits("value", &value, OutKind::of(d))?;
    let ckind = cache_kind(kv, d);
    let (kcs, kcb) = read_bits("key_cache", &key_cache, ckind)?;
    let (vcs, vcb) = read_bits("value_cache", &value_cache, ckind)?;
    let (ss, slots) = read_slots(&slot_mapping)?;
    if ks.len() != 3 || vs != ks || ss.len() != 1 || ks[0] < ss[0] || kcs.len() < 2 {
        return Err(PyValueError::new_err(format!(
            "key {ks:?}, value {vs:?}, slot_mapping {ss:?}: expected [T', num_kv_heads, head_size] twice and [T], T' >= T (rows past T are CUDA-graph padding, not read)"
        )));
    }
    // Rows past slot_mapping's tokens are padding: never read.
    let ks = [ss[0], ks[1], ks[2]];
    let (kb, vb) = (
        kb[..ks.iter().product::<usize>()].to_vec(),
        vb[..ks.iter().product::<usize>()].to_vec(),
    );
    let bs = match l {
        Layout::Nhd => kcs[1],
        Layout::Hnd => kcs.get(2).copied().unwrap_or(0),
        Layout::Paged => kcs.get(3).copied().unwrap_or(0),
    };
    let shape =
        within_caps(l, kv, d, (ks[0], ks[1], ks[2], bs, kcs[0])).map_err(PyValueError::new_err)?;
    let (_, kd, vd) = shapes_of(&shape);
    if kcs != kd || vcs != vd {
        return Err(PyValueError::new_err(format!(
            "key_cache {kcs:?}, value_cache {vcs:?}: layout {:?} with these keys needs {kd:?} and {vd:?}",
            l.name()
        )));
    }
    let case = Case {
        key: kb,
        value: vb,
        slot_mapping: slots,
        k_scale: read_scale("k_scale", &k_scale)?,
        v_scale: read_scale("v_scale", &v_scale)?,
        key_cache: kcb,
        value_cache: vcb,
    };
    let w = py
        .detach(|| reference(&shape, &case, kv, d, conv))
        .map_err(value_error)?;
    Ok((
        to_array(py, ckind, &kd, &w.key_cache)?,
        to_array(py, ckind, &vd, &w.value_cache)?,
    ))
}

/// reshape_and_cache_case(tokens, num_kv_heads, head_size, block_size, num_blocks, arm, seed=None, layout="nhd", kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE, graph_padding=True) -> dict
///
/// One case of `check_reshape_and_cache` as new arrays, as the callable
/// gets them: `key`, `value` (with the check's padding rows past
/// `slot_mapping`'s tokens on RAND under `graph_padding`), `key_cache`, `value_cache` (the poison),
/// `slot_mapping`, `k_scale`, `v_scale` (one-element float32 arrays), and
/// the oracle's caches after the call, `out_key_cache` and
/// `out_value_cache`, under the declared arithmetic. `seed` None: the
/// check's first seed.
///
/// Errors: `ValueError` for an unknown arm, layout, cache dtype, dtype or
/// rule, a bad shape, TIES on an `"auto"` cache, or a case over the caps.
#[pyfunction]
#[pyo3(signature = (tokens, num_kv_heads, head_size, block_size, num_blocks, arm, seed = None, layout = "nhd", kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite, graph_padding = true))]
#[allow(clippy::too_many_arguments)]
fn reshape_and_cache_case<'py>(
    py: Python<'py>,
    tokens: usize,
    num_kv_heads: usize,
    head_size: usize,
    block_size: usize,
    num_blocks: usize,
    arm: &str,
    seed: Option<u64>,
    layout: &str,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
    graph_padding: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let (l, kv, d, conv) = parse_all(layout, kv_cache_dtype, dtype, scale_rule, overflow)?;
    let decl = Declared {
        write: Target::Kv(l),
        kv,
        d,
        conv,
        overflow,
        graph_padding,
    };
    let dims = (tokens, num_kv_heads, head_size, block_size, num_blocks);
    let shape = decl.shape(dims).map_err(PyValueError::new_err)?;
    let sp = decl.spec(dims, arm, seed);
    let pad = pad_rows(graph_padding, arm, sp.seed);
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let w = py
        .detach(|| reference(&shape, &case, kv, d, conv))
        .map_err(value_error)?;
    let (ks, kd, vd) = shapes_of(&shape);
    let (mk, ck) = (OutKind::of(d), cache_kind(kv, d));
    let (row, kp) = (ks[1] * ks[2], [ks[0] + pad, ks[1], ks[2]]);
    let dict = PyDict::new(py);
    dict.set_item(
        "key",
        to_array(py, mk, &kp, &padded(&case.key, row, pad, d))?,
    )?;
    dict.set_item(
        "value",
        to_array(py, mk, &kp, &padded(&case.value, row, pad, d))?,
    )?;
    dict.set_item("key_cache", to_array(py, ck, &kd, &case.key_cache)?)?;
    dict.set_item("value_cache", to_array(py, ck, &vd, &case.value_cache)?)?;
    dict.set_item("slot_mapping", array(py, &[tokens], case.slot_mapping)?)?;
    dict.set_item("k_scale", array(py, &[1], vec![case.k_scale])?)?;
    dict.set_item("v_scale", array(py, &[1], vec![case.v_scale])?)?;
    dict.set_item("out_key_cache", to_array(py, ck, &kd, &w.key_cache)?)?;
    dict.set_item("out_value_cache", to_array(py, ck, &vd, &w.value_cache)?)?;
    Ok(dict)
}

/// Which write a check drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Keys and values into two caches of a layout (`reshape_and_cache`).
    Kv(Layout),
    /// MLA's latent cache (`concat_and_cache_mla`, rule `KV-MLA`).
    Mla,
}

/// What a check declares, and how its cases and reports are named.
#[derive(Clone, Copy, Debug)]
struct Declared {
    write: Target,
    kv: KvCacheDtype,
    d: Dtype,
    conv: Conversion,
    overflow: Overflow,
    /// RAND hands the inputs rows past `slot_mapping`'s tokens.
    graph_padding: bool,
}

/// The rows the inputs hold past `slot_mapping`'s tokens in a case of
/// `arm` drawn from `seed`: one to seven on RAND when `graph_padding`
/// is declared (vLLM V1 under CUDA graphs pads the batch's inputs and not
/// its slot map, so a write is sized by `slot_mapping`, vLLM PR 13922),
/// else none. RAND leaves the cache's last slot free and takes slot 0
/// rarely, so a padding row written where a slot map read past its end
/// lands (0, or -1 as a Python index) changes the poison, whatever order
/// the writes run in.
fn pad_rows(graph_padding: bool, arm: Arm, seed: u64) -> usize {
    if graph_padding && matches!(arm, Arm::Rand) {
        1 + (seed % 7) as usize
    } else {
        0
    }
}

/// `bits` (`tokens` rows of `row` elements of dtype `d`) followed by
/// `pad` rows more: the case's first elements again with their sign
/// flipped (finite values a kernel would store somewhere visible).
fn padded(bits: &[u32], row: usize, pad: usize, d: Dtype) -> Vec<u32> {
    let sign = if d == Dtype::F32 { 0x8000_0000 } else { 0x8000 };
    let mut v = bits.to_vec();
    if !bits.is_empty() {
        v.extend((0..pad * row).map(|i| bits[i % bits.len()] ^ sign));
    }
    v
}

/// What an MLA case's seed is mixed with, so that an MLA case and a key
/// and value case of the same numbers draw other data.
const MLA_SEED: u64 = 0x004D_4C41_0000_0000;

impl Declared {
    /// The oracle's shape of `dims` (for MLA `(tokens, kv_lora_rank,
    /// pe_dim, block_size, num_blocks)`).
    fn shape(&self, dims: Dims) -> Result<Shape, String> {
        match self.write {
            Target::Kv(l) => within_caps(l, self.kv, self.d, dims),
            Target::Mla => mla_within_caps(self.kv, self.d, dims),
        }
    }

    /// The case library's spec of a case of `dims`.
    fn spec(&self, dims: Dims, arm: Arm, seed: Option<u64>) -> Spec {
        let (layout, cdims, salt) = match self.write {
            Target::Kv(l) => (l, dims, 0),
            Target::Mla => (Layout::Nhd, mla_dims(dims), MLA_SEED),
        };
        Spec {
            dims: cdims,
            layout,
            kv: self.kv,
            dtype: self.d,
            rule: self.conv.rule,
            arm,
            seed: seed
                .unwrap_or_else(|| Spec::base_seed(cdims, layout, self.kv, self.d, arm) ^ salt),
        }
    }

    /// The contract's name: `"reshape_and_cache"` or
    /// `"concat_and_cache_mla"`.
    fn contract(&self) -> &'static str {
        match self.write {
            Target::Kv(_) => "reshape_and_cache",
            Target::Mla => "concat_and_cache_mla",
        }
    }

    /// The dimensions' names in reports.
    fn dims_names(&self) -> &'static str {
        match self.write {
            Target::Kv(_) => "(T, num_kv_heads, head_size, block_size, num_blocks)",
            Target::Mla => "(T, kv_lora_rank, pe_dim, block_size, num_blocks)",
        }
    }

    /// The keyword arguments of a rerun line.
    fn kw(&self) -> String {
        let layout = match self.write {
            Target::Kv(l) => format!("layout=\"{}\", ", l.name()),
            Target::Mla => String::new(),
        };
        format!(
            "{layout}kv_cache_dtype=\"{}\", dtype=\"{}\", scale_rule=\"{}\", overflow={}",
            self.kv.name(),
            self.d.name(),
            self.conv.rule.name(),
            overflow_py(self.overflow)
        )
    }

    /// What a check declares, in one line.
    fn what(&self) -> String {
        let declared = if self.kv == KvCacheDtype::Auto {
            Known::Copy
        } else {
            Known::Fp8(self.conv)
        };
        let layout = match self.write {
            Target::Kv(l) => format!("{} layout, ", l.name()),
            Target::Mla => "MLA latent cache, ".into(),
        };
        format!(
            "{layout}{} inputs, kv_cache_dtype {}, declared: {}",
            self.d.name(),
            self.kv.name(),
            declared.label()
        )
    }

    /// The cache's array shape under MLA, `[num_blocks, block_size,
    /// kv_lora_rank + pe_dim]` (vLLM's); the layout's otherwise.
    fn cache_dims(&self, shape: &Shape) -> (Vec<usize>, Vec<usize>) {
        match self.write {
            Target::Kv(_) => {
                let (_, kd, vd) = shapes_of(shape);
                (kd, vd)
            }
            Target::Mla => (
                vec![shape.num_blocks(), shape.block_size(), shape.head_size()],
                Vec::new(),
            ),
        }
    }
}

/// A cache element's bits for a report: an FP8 code or a 16-bit pattern
/// in hex with its value, an f32 as `value`.
fn shown(kv: KvCacheDtype, d: Dtype, bits: u32) -> String {
    match (kv.format(), d) {
        (Some(f), _) => format!(
            "0x{bits:02X} ({})",
            oracle::fp8::decode(f, bits as u8, oracle::conventions::NanMagnitude::Ieee)
        ),
        (None, Dtype::F32) => value(f32::from_bits(bits)),
        (None, _) => format!("0x{bits:04X} ({:e})", d.decode(bits)),
    }
}

/// An input element for a report.
fn shown_input(d: Dtype, bits: u32) -> String {
    match d {
        Dtype::F32 => value(f32::from_bits(bits)),
        _ => format!("0x{bits:04X} ({:e})", d.decode(bits)),
    }
}

/// `[block b, offset o, head h, dim d]` (MLA: no head).
fn at(c: Coord, write: Target) -> String {
    match write {
        Target::Kv(_) => format!(
            "[block {}, offset {}, head {}, dim {}]",
            c.block, c.offset, c.head, c.dim
        ),
        Target::Mla => format!("[block {}, offset {}, dim {}]", c.block, c.offset, c.dim),
    }
}

/// One cache's side of a case: its name, verdict, bits after the call,
/// the oracle's, where each element comes from, the inputs and scale.
struct Side<'a> {
    what: &'static str,
    v: CacheVerdict,
    got: &'a [u32],
    want: &'a [u32],
    src: &'a [u32],
    input: &'a [u32],
    scale: (&'static str, f32),
    coord: fn(&Shape, usize) -> Coord,
}

/// The failure lines of one cache.
fn cache_lines(r: &mut String, s: &Side<'_>, decl: &Declared, shape: &Shape, case: &Case) {
    let (kv, d) = (decl.kv, decl.d);
    if let Some(i) = s.v.first_wrong {
        let c = (s.coord)(shape, i);
        let e = s.src[i] as usize;
        let t = e / (shape.num_kv_heads() * shape.head_size());
        let _ = writeln!(
            r,
            "  {}: {} of {} written elements differ; first at {} (token {t}, slot {}): got {}, want {}; input {}{}",
            s.what,
            s.v.wrong,
            s.v.written,
            at(c, decl.write),
            case.slot_mapping[t],
            shown(kv, d, s.got[i]),
            shown(kv, d, s.want[i]),
            shown_input(d, s.input[e]),
            if kv == KvCacheDtype::Auto {
                String::new()
            } else {
                format!(", {} {}", s.scale.0, value(s.scale.1))
            }
        );
    }
    if let Some(i) = s.v.first_clobbered {
        let c = (s.coord)(shape, i);
        let slot = c.block * shape.block_size() + c.offset;
        let note = if slot + 1 == shape.num_slots() {
            "the cache's last slot, where slot -1 lands as a Python or torch index; no token's"
        } else {
            "no token's"
        };
        let _ = writeln!(
            r,
            "  {}: {} of {} elements no token writes changed; first at {} (slot {slot}: {note}): got {}, was {} (the poison it must keep)",
            s.what,
            s.v.clobbered,
            s.v.unwritten,
            at(c, decl.write),
            shown(kv, d, s.got[i]),
            shown(kv, d, s.want[i]),
        );
    }
}

/// `"divide/sat_finite; reciprocal/sat_finite"`, or `none`.
fn list(v: &[Known], none: &str) -> String {
    let names: Vec<String> = v.iter().map(Known::label).collect();
    names_or(&names, "; ", none)
}

/// The shapes a check runs, and the default shapes it skips with why.
type Shapes = (Vec<Dims>, Vec<(Dims, String)>);

/// The shapes a check runs: `given`, each within the caps, else the
/// `defaults` the declared write can run (the paged layout packs only
/// head sizes that are multiples of its `x`); with the defaults it
/// cannot, and why.
fn shapes_or(decl: &Declared, given: Option<Vec<Dims>>, defaults: &[Dims]) -> PyResult<Shapes> {
    match given {
        Some(s) => {
            for &dims in &s {
                decl.shape(dims).map_err(PyValueError::new_err)?;
            }
            Ok((s, Vec::new()))
        }
        None => {
            let (mut run, mut skipped) = (Vec::new(), Vec::new());
            for &dims in defaults {
                match decl.shape(dims) {
                    Ok(_) => run.push(dims),
                    Err(e) => skipped.push((dims, e)),
                }
            }
            Ok((run, skipped))
        }
    }
}

/// Runs `kernel` through every shape, arm and seed of a declared write
/// and judges every cache element (the two checks' one driver).
#[allow(clippy::too_many_arguments)]
fn drive<'py>(
    py: Python<'py>,
    kernel: &Bound<'py, PyAny>,
    decl: Declared,
    (shapes, skipped): Shapes,
    arms: Vec<Arm>,
    seeds: Seeds,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    let (kv, d, conv) = (decl.kv, decl.d, decl.conv);
    let mla = decl.write == Target::Mla;
    let fname = callable_name(kernel, name);
    let ck = cache_kind(kv, d);
    let contract = decl.contract();
    let mut o = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: contract.into(),
        ..CheckReport::default()
    };
    let (kw, what) = (decl.kw(), decl.what());
    o.row(&format!("check_{contract}({fname}), {what}"))?;
    o.row(&format!(
        "{:<20} {:>7} {:>18} {:>15} {:>17} {:>9}  verdict  matches",
        if mla {
            "T,rank,pe,bs,blocks"
        } else {
            "T,KVH,hs,bs,blocks"
        },
        "arm",
        "seed",
        "written differ",
        "unwritten changed",
        "call_ms"
    ))?;
    for (d, why) in &skipped {
        let dims_s = format!("{},{},{},{},{}", d.0, d.1, d.2, d.3, d.4);
        o.row(&format!(
            "{dims_s:<20} skipped, a default shape {contract} cannot run here: {why}"
        ))?;
    }
    // The known arithmetics every compared case matched, and every SAT
    // and TIES case.
    let mut all = crate::check::Every::<Known>::default();
    let mut edges = crate::check::Every::<Known>::default();
    for &dims in &shapes {
        let shape = decl.shape(dims).map_err(PyValueError::new_err)?;
        let (ks, _, _) = shapes_of(&shape);
        let (kd, vd) = decl.cache_dims(&shape);
        for &arm in &arms {
            if !arm.runs_on(kv) {
                continue;
            }
            let first = decl.spec(dims, arm, None).seed;
            for seed in seeds.for_case(first) {
                let sp = decl.spec(dims, arm, Some(seed));
                let case = sp.generate().map_err(PyValueError::new_err)?;
                let want = py
                    .detach(|| reference(&shape, &case, kv, d, conv))
                    .map_err(PyValueError::new_err)?;
                let (kscale, vscale) = (vec![case.k_scale], vec![case.v_scale]);
                let slot_arr = array(py, &[dims.0], case.slot_mapping.clone())?;
                let pad = pad_rows(decl.graph_padding, arm, seed);
                let (r1, r2) = if mla {
                    (dims.1, dims.2)
                } else {
                    (ks[1] * ks[2], ks[1] * ks[2])
                };
                let (first_in, second_in) = if mla {
                    let (kv_c, k_pe) = split_mla(&case, dims.1, shape.head_size());
                    (
                        Held::from_bits(d, &padded(&kv_c, r1, pad, d)),
                        Held::from_bits(d, &padded(&k_pe, r2, pad, d)),
                    )
                } else {
                    (
                        Held::from_bits(d, &padded(&case.key, r1, pad, d)),
                        Held::from_bits(d, &padded(&case.value, r2, pad, d)),
                    )
                };
                let (s1, s2): (Vec<usize>, Vec<usize>) = if mla {
                    (vec![dims.0 + pad, dims.1], vec![dims.0 + pad, dims.2])
                } else {
                    let s = vec![dims.0 + pad, ks[1], ks[2]];
                    (s.clone(), s)
                };
                let mut inputs = vec![
                    (if mla { "kv_c" } else { "key" }, first_in.input(py, &s1)?),
                    (
                        if mla { "k_pe" } else { "value" },
                        second_in.input(py, &s2)?,
                    ),
                    ("slot_mapping", Input::I64(slot_arr, &case.slot_mapping)),
                    (
                        if mla { "scale" } else { "k_scale" },
                        Input::F32(array(py, &[1], kscale.clone())?, &kscale),
                    ),
                ];
                if !mla {
                    inputs.push((
                        "v_scale",
                        Input::F32(array(py, &[1], vscale.clone())?, &vscale),
                    ));
                }
                let mut caches = vec![to_array(py, ck, &kd, &case.key_cache)?];
                if !mla {
                    caches.push(to_array(py, ck, &vd, &case.value_cache)?);
                }
                // vLLM's order: the inputs, the caches, the slots, the scales.
                let mut args = vec![inputs[0].1.array(), inputs[1].1.array()];
                args.extend(caches.iter().cloned());
                args.extend(inputs[2..].iter().map(|(_, i)| i.array()));
                let outs: Vec<(&[usize], OutKind)> = if mla {
                    vec![(&kd, ck)]
                } else {
                    vec![(&kd, ck), (&vd, ck)]
                };
                let (called, ms) = call_args(py, kernel, args, &inputs, &outs, caches)?;
                let a = arm.name();
                let dims_s = format!("{},{},{},{},{}", dims.0, dims.1, dims.2, dims.3, dims.4);
                let row = format!("{dims_s:<20} {a:>7} 0x{seed:016x}");
                let dims_py = format!("({dims_s})").replace(',', ", ");
                let gp = if decl.graph_padding {
                    ""
                } else {
                    ", graph_padding=False"
                };
                let repro = format!(
                    "kernel_oracle.check_{contract}({fname}, {kw}{gp}, shapes=[{dims_py}], arms=[\"{a}\"], seeds=[0x{seed:016x}])"
                );
                let padding = if pad > 0 {
                    format!(
                        "; the inputs hold {pad} row(s) past slot_mapping's {} tokens (CUDA-graph padding: the write is sized by slot_mapping; graph_padding=False hands exactly as many)",
                        dims.0
                    )
                } else {
                    String::new()
                };
                let head = format!(
                    "FAIL {contract}: {} = {dims_py} arm={a} seed=0x{seed:016x}, {what}{padding}",
                    decl.dims_names()
                );
                let Some((got, written)) = rep.take(&mut o, called, &row, &head, &repro)? else {
                    continue;
                };
                let gk = got_bits(&got[0]);
                let gv = if mla { None } else { Some(got_bits(&got[1])) };
                let mut sides = vec![Side {
                    what: if mla { "kv_cache" } else { "key_cache" },
                    v: CacheVerdict::judge(kv, &gk, &want.key_cache, &want.key_src),
                    got: &gk,
                    want: &want.key_cache,
                    src: &want.key_src,
                    input: &case.key,
                    scale: (if mla { "scale" } else { "k_scale" }, case.k_scale),
                    coord: Shape::key_coord,
                }];
                if let Some(gv) = &gv {
                    sides.push(Side {
                        what: "value_cache",
                        v: CacheVerdict::judge(kv, gv, &want.value_cache, &want.value_src),
                        got: gv,
                        want: &want.value_cache,
                        src: &want.value_src,
                        input: &case.value,
                        scale: ("v_scale", case.v_scale),
                        coord: Shape::value_coord,
                    });
                }
                let found = py
                    .detach(|| identify(&case, kv, d, &want, &gk, gv.as_deref()))
                    .map_err(PyValueError::new_err)?;
                all.meet(&found);
                if matches!(arm, Arm::Sat | Arm::Ties) {
                    edges.meet(&found);
                }
                let matches = list(&found, "none known");
                let sum =
                    |f: fn(&CacheVerdict) -> usize| sides.iter().map(|s| f(&s.v)).sum::<usize>();
                let pass = sides.iter().all(|s| s.v.pass()) && written.is_empty();
                o.row(&format!(
                    "{row} {:>7}/{:<7} {:>8}/{:<8} {ms:>9.2}  {}  {matches}",
                    sum(|v| v.wrong),
                    sum(|v| v.written),
                    sum(|v| v.clobbered),
                    sum(|v| v.unwritten),
                    if pass { "PASS" } else { "FAIL" },
                ))?;
                if pass {
                    rep.passed += 1;
                    continue;
                }
                let mut r = failure_head(&head, &written);
                for side in &sides {
                    cache_lines(&mut r, side, &decl, &shape, &case);
                }
                let _ = writeln!(r, "  the written elements match: {matches}");
                let _ = write!(
                    r,
                    "reproduce:\n  {repro}\nthe case's arrays and the oracle's caches:\n  kernel_oracle.{contract}_case({}, \"{a}\", seed=0x{seed:016x}, {kw}{gp})",
                    dims_py.trim_start_matches('(').trim_end_matches(')')
                );
                rep.fail(&mut o, r, repro)?;
            }
        }
    }
    let sum = |v: &crate::check::Every<Known>| v.phrase(Known::label);
    let skipped = match skipped.len() {
        0 => String::new(),
        n => format!("{n} default shape(s) skipped (the layout cannot pack their head size); "),
    };
    rep.finish(
        o,
        &format!(
            "{skipped}written elements bit-identical on every compared case under: {}; on every SAT and TIES case under: {}; ",
            sum(&all),
            sum(&edges)
        ),
    )
}

/// check_reshape_and_cache(kernel, layout="nhd", kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE, graph_padding=True, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `kernel`, a KV-cache write, through the arms `RAND` (random
/// values, scales and distinct slots, some padding; the last token
/// padding on half the seeds; under `graph_padding` the inputs hold one
/// to seven rows past `slot_mapping`'s tokens), `SLOTS` (every third
/// token padding but the last, `-2` among them; the cache's last slot,
/// the last block, first and last offsets of blocks, consecutive slots of
/// one block, in shuffled order), `PREFILL` (a prefill's slot map: token `t` at slot
/// `start + t` from the middle of a block, across as many block
/// boundaries as the tokens allow, on half the seeds one to three
/// padding tokens at the tail), `SAT` (power-of-two scales; scaled values
/// at and around the FP8 max finite and the midpoint past it, `±inf`,
/// NaN, `±0`, the FP8 subnormals; under `"auto"` the dtype's special bit
/// patterns) and `TIES` (FP8 only: of keys and values, one EXACT, every
/// scaled element exactly at a midpoint between codes on a scale `k 2^e`
/// whose binary32 reciprocal is inexact (handed inverted to the
/// multiplying rules), the other NEAR, within the dtype's half ulp of
/// midpoints on a random binary32 scale; which is which drawn from the
/// seed, keys EXACT on about half the seeds and values on the rest), and
/// judges both caches element by element: every
/// element the contract writes bit for bit against `reshape_and_cache`
/// under the declared `layout`, `kv_cache_dtype`, `dtype`, `scale_rule`
/// and `overflow` (an FP8 NaN code equal to any NaN code: a GPU's
/// arithmetic drops a NaN's sign), every other element against the
/// poison the cache held before the call.
///
/// The callable: `kernel(key, value, key_cache, value_cache,
/// slot_mapping, k_scale, v_scale)` (vLLM's `reshape_and_cache_flash`
/// order without `kv_cache_dtype`), with `key`, `value` `[T,
/// num_kv_heads, head_size]` (uint16 bit patterns of bf16 or f16, numpy
/// having no bfloat16, or float32), `slot_mapping` int64 `[T]` (on RAND
/// cases `key` and `value` have `T + 1` to `T + 7` rows: vLLM V1 pads a
/// CUDA-graph batch's inputs and not its slot map, so the write is sized
/// by `slot_mapping` and rows past it are never read; vLLM PR 13922 fixed
/// a grid sized by `key`), `k_scale`
/// and `v_scale` one-element float32 arrays (vLLM passes tensors; the
/// scale the kernel is handed: under `"multiply"` the inverted one), and
/// the caches in the layout's shape (see `reshape_and_cache`; uint8 codes
/// for FP8) filled with random bits. It writes the caches in place and
/// returns None, or returns new `(key_cache, value_cache)`; the inputs
/// must be left as given. torch users: `kc =
/// torch.from_numpy(key_cache).cuda()` (`.view(torch.float8_e4m3fn)` or
/// `.view(torch.bfloat16)` as the kernel wants), run the op, then
/// `key_cache[...] = kc.view(torch.uint8).cpu().numpy()`. A kernel that
/// refuses a shape raises `kernel_oracle.Refused`.
///
/// Each row counts the written elements that differ and the unwritten
/// ones that changed, and names every known arithmetic the written
/// elements match (`"copy"` under `"auto"`; under FP8 each of the seven
/// rules with `sat_finite` or `non_saturating`). SAT separates the
/// overflow policies; each TIES case separates the rules (EXACT the
/// division from the multiply by the reciprocal and the rounding, NEAR
/// the rounding to the model's dtype and of the scale), on keys in some
/// cases and on values in others, so what matches on every SAT and TIES
/// case is how the kernel converts, keys and values alike, once both
/// sides have been EXACT (`divide_in_dtype` and `reciprocal_in_dtype`
/// part rarely: both tie the same midpoints). Under `"paged"` a default
/// shape the layout cannot pack gets a row saying it was skipped.
///
/// Arguments: `shapes` `(tokens, num_kv_heads, head_size, block_size,
/// num_blocks)` tuples (default `KV_CACHE_SHAPES`; under `"paged"` the
/// defaults whose head size is not a multiple of `x` are skipped with a
/// row saying so, a given one is an error); `arms` (default all; TIES
/// runs on FP8 caches only);
/// `graph_padding` (default True: the RAND rows past `slot_mapping`
/// above; False: the inputs have exactly `T` rows, for a kernel whose
/// contract says so); `seeds` / `trials` / `verbose` / `name` as
/// `check_rotary_embedding`.
///
/// Errors: `ValueError` for an unknown layout, cache dtype, dtype, rule
/// or arm, a bad shape or one over the caps (2^22 key elements, 2^24
/// elements a cache, 2^14 tokens), before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
///
/// Out of reach: the caps keep every index below 2^31, so a kernel's
/// 32-bit index overflow never shows; and a write outside the two caches handed (a slot of `-2` read as an
/// unsigned index) changes no element the check can see.
#[pyfunction]
#[pyo3(signature = (kernel, layout = "nhd", kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite, graph_padding = true, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_reshape_and_cache<'py>(
    py: Python<'py>,
    kernel: Bound<'py, PyAny>,
    layout: &str,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
    graph_padding: bool,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&kernel, "kernel")?;
    let seeds = Seeds::new(seeds, trials)?;
    let (l, kv, d, conv) = parse_all(layout, kv_cache_dtype, dtype, scale_rule, overflow)?;
    let decl = Declared {
        write: Target::Kv(l),
        kv,
        d,
        conv,
        overflow,
        graph_padding,
    };
    let shapes = shapes_or(&decl, shapes, &KV_CACHE_SHAPES)?;
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    drive(py, &kernel, decl, shapes, arms, seeds, verbose, name)
}

/// The shapes `(tokens, kv_lora_rank, pe_dim, block_size, num_blocks)`
/// an MLA check runs by default: DeepSeek-V2/V3's latent (512 + 64) in
/// decode (64 slots a block, FlashMLA's), over 200 tokens (PREFILL's run
/// crossing 12 block boundaries or more) and with block size 1,
/// MiniCPM3's (256 + 32, 48 slots a block: not a power of two), then a
/// latent of 36 and a rotary part of 12
/// (the rotary part starts past no vector boundary of 8 or 16), and a
/// cache of 67,200 slots (past 2^16: a slot kept in 16 bits fails).
pub const MLA_SHAPES: [Dims; 6] = [
    (8, 512, 64, 64, 4),
    (200, 512, 64, 16, 16),
    (9, 512, 64, 1, 24),
    (7, 256, 32, 48, 2),
    (5, 36, 12, 16, 3),
    (16, 64, 16, 16, 4200),
];

/// concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, scale, kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE) -> kv_cache
///
/// MLA's latent-cache write (`oracle::kv_cache::concat_and_cache_mla`,
/// vLLM's `concat_and_cache_mla`), out of place: a new `kv_cache`
/// `[num_blocks, block_size, kv_lora_rank + pe_dim]` with each token's
/// `kv_c[t]` (`[T, kv_lora_rank]`) then `k_pe[t]` (`[T, pe_dim]`) written
/// at its slot (negative: padding; rows of `kv_c` and `k_pe` past
/// `slot_mapping`'s `T` are CUDA-graph padding, never read), under one `scale`, each element
/// converted as `reshape_and_cache` converts (its `kv_cache_dtype`,
/// `dtype`, `scale_rule` and `overflow`).
///
/// Errors: as `reshape_and_cache`'s.
#[pyfunction]
#[pyo3(signature = (kv_c, k_pe, kv_cache, slot_mapping, scale, kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite))]
#[allow(clippy::too_many_arguments)]
fn concat_and_cache_mla<'py>(
    py: Python<'py>,
    kv_c: Bound<'py, PyAny>,
    k_pe: Bound<'py, PyAny>,
    kv_cache: Bound<'py, PyAny>,
    slot_mapping: Bound<'py, PyAny>,
    scale: Bound<'py, PyAny>,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
) -> PyResult<Bound<'py, PyAny>> {
    let (_, kv, d, conv) = parse_all("nhd", kv_cache_dtype, dtype, scale_rule, overflow)?;
    let (cs, cb) = read_bits("kv_c", &kv_c, OutKind::of(d))?;
    let (ps, pb) = read_bits("k_pe", &k_pe, OutKind::of(d))?;
    let ck = cache_kind(kv, d);
    let (kcs, kcb) = read_bits("kv_cache", &kv_cache, ck)?;
    let (ss, slots) = read_slots(&slot_mapping)?;
    if cs.len() != 2
        || ps.len() != 2
        || ps[0] != cs[0]
        || ss.len() != 1
        || cs[0] < ss[0]
        || kcs.len() != 3
    {
        return Err(PyValueError::new_err(format!(
            "kv_c {cs:?}, k_pe {ps:?}, slot_mapping {ss:?}, kv_cache {kcs:?}: expected [T', kv_lora_rank], [T', pe_dim], [T], [num_blocks, block_size, kv_lora_rank + pe_dim], T' >= T (rows past T are CUDA-graph padding, not read)"
        )));
    }
    // Rows past slot_mapping's tokens are padding: never read.
    let (cs, ps) = ([ss[0], cs[1]], [ss[0], ps[1]]);
    let (cb, pb) = (cb[..cs[0] * cs[1]].to_vec(), pb[..ps[0] * ps[1]].to_vec());
    let shape = mla_within_caps(kv, d, (cs[0], cs[1], ps[1], kcs[1], kcs[0]))
        .map_err(PyValueError::new_err)?;
    if kcs[2] != shape.head_size() {
        return Err(PyValueError::new_err(format!(
            "kv_cache {kcs:?}: its rows hold kv_lora_rank + pe_dim = {} elements",
            shape.head_size()
        )));
    }
    let scale = read_scale("scale", &scale)?;
    let mut out = kcb;
    py.detach(|| {
        let x = MlaInputs {
            kv_c: &cb,
            k_pe: &pb,
            slot_mapping: &slots,
            scale,
        };
        oracle::kv_cache::concat_and_cache_mla(&shape, cs[1], kv, d, conv, &x, &mut out)
    })
    .map_err(value_error)?;
    to_array(py, ck, &kcs, &out)
}

/// concat_and_cache_mla_case(tokens, kv_lora_rank, pe_dim, block_size, num_blocks, arm, seed=None, kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE, graph_padding=True) -> dict
///
/// One case of `check_concat_and_cache_mla` as new arrays, as the
/// callable gets them: `kv_c`, `k_pe` (padded as `reshape_and_cache_case`'s
/// keys), `kv_cache` (the poison),
/// `slot_mapping`, `scale` (a one-element float32 array), and the
/// oracle's `out_kv_cache`. `seed` None: the check's first seed.
///
/// Errors: as `reshape_and_cache_case`'s.
#[pyfunction]
#[pyo3(signature = (tokens, kv_lora_rank, pe_dim, block_size, num_blocks, arm, seed = None, kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite, graph_padding = true))]
#[allow(clippy::too_many_arguments)]
fn concat_and_cache_mla_case<'py>(
    py: Python<'py>,
    tokens: usize,
    kv_lora_rank: usize,
    pe_dim: usize,
    block_size: usize,
    num_blocks: usize,
    arm: &str,
    seed: Option<u64>,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
    graph_padding: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let arm = Arm::parse(arm).map_err(PyValueError::new_err)?;
    let (_, kv, d, conv) = parse_all("nhd", kv_cache_dtype, dtype, scale_rule, overflow)?;
    let decl = Declared {
        write: Target::Mla,
        kv,
        d,
        conv,
        overflow,
        graph_padding,
    };
    let dims = (tokens, kv_lora_rank, pe_dim, block_size, num_blocks);
    let shape = decl.shape(dims).map_err(PyValueError::new_err)?;
    let sp = decl.spec(dims, arm, seed);
    let pad = pad_rows(graph_padding, arm, sp.seed);
    let case = sp.generate().map_err(PyValueError::new_err)?;
    let w = py
        .detach(|| reference(&shape, &case, kv, d, conv))
        .map_err(value_error)?;
    let (kd, _) = decl.cache_dims(&shape);
    let (kv_c, k_pe) = split_mla(&case, kv_lora_rank, shape.head_size());
    let (mk, ck) = (OutKind::of(d), cache_kind(kv, d));
    let dict = PyDict::new(py);
    let (ct, pt) = (
        padded(&kv_c, kv_lora_rank, pad, d),
        padded(&k_pe, pe_dim, pad, d),
    );
    dict.set_item(
        "kv_c",
        to_array(py, mk, &[tokens + pad, kv_lora_rank], &ct)?,
    )?;
    dict.set_item("k_pe", to_array(py, mk, &[tokens + pad, pe_dim], &pt)?)?;
    dict.set_item("kv_cache", to_array(py, ck, &kd, &case.key_cache)?)?;
    dict.set_item("slot_mapping", array(py, &[tokens], case.slot_mapping)?)?;
    dict.set_item("scale", array(py, &[1], vec![case.k_scale])?)?;
    dict.set_item("out_kv_cache", to_array(py, ck, &kd, &w.key_cache)?)?;
    Ok(dict)
}

/// check_concat_and_cache_mla(kernel, kv_cache_dtype="auto", dtype="bfloat16", scale_rule="divide", overflow=Overflow.SAT_FINITE, graph_padding=True, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `kernel`, MLA's latent-cache write (vLLM's `concat_and_cache_mla`,
/// rule `KV-MLA`: `reshape_and_cache`'s write of one NHD head whose row is
/// `kv_c[t] ++ k_pe[t]`, one scale, no value cache), through the arms of
/// `check_reshape_and_cache` and judges every element of the cache the
/// same way: the written ones bit for bit against `concat_and_cache_mla`,
/// the others against their poison. TIES has keys only here (one scale):
/// EXACT on some cases (the rounding, the division against the multiply
/// by the reciprocal), NEAR on the others (the rounding to the model's
/// dtype and of the scale).
///
/// The callable: `kernel(kv_c, k_pe, kv_cache, slot_mapping, scale)`
/// (vLLM's order without `kv_cache_dtype`), `kv_c` `[T, kv_lora_rank]`,
/// `k_pe` `[T, pe_dim]` (uint16 bit patterns of bf16 or f16, or float32),
/// `kv_cache` `[num_blocks, block_size, kv_lora_rank + pe_dim]` (uint8
/// codes for FP8) full of random bits, `slot_mapping` int64 `[T]`, `scale`
/// a one-element float32 array; it writes `kv_cache` in place and returns
/// None, or returns a new one. On RAND cases `kv_c` and `k_pe` have one
/// to seven rows past `slot_mapping`'s tokens, as `check_reshape_and_cache`'s
/// inputs (`graph_padding`).
///
/// Arguments: `shapes` `(tokens, kv_lora_rank, pe_dim, block_size,
/// num_blocks)` tuples (default `MLA_SHAPES`); the others as
/// `check_reshape_and_cache`'s.
///
/// Errors: `ValueError` as `check_reshape_and_cache`'s, before any call.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (kernel, kv_cache_dtype = "auto", dtype = "bfloat16", scale_rule = "divide", overflow = Overflow::SatFinite, graph_padding = true, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_concat_and_cache_mla<'py>(
    py: Python<'py>,
    kernel: Bound<'py, PyAny>,
    kv_cache_dtype: &str,
    dtype: &str,
    scale_rule: &str,
    overflow: Overflow,
    graph_padding: bool,
    shapes: Option<Vec<Dims>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&kernel, "kernel")?;
    let seeds = Seeds::new(seeds, trials)?;
    let (_, kv, d, conv) = parse_all("nhd", kv_cache_dtype, dtype, scale_rule, overflow)?;
    let decl = Declared {
        write: Target::Mla,
        kv,
        d,
        conv,
        overflow,
        graph_padding,
    };
    let shapes = shapes_or(&decl, shapes, &MLA_SHAPES)?;
    let arms = arms_or_all(arms, &Arm::ALL, Arm::parse)?;
    drive(py, &kernel, decl, shapes, arms, seeds, verbose, name)
}

/// Adds the KV-cache writes, their checks, their cases and default
/// shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KV_CACHE_SHAPES", KV_CACHE_SHAPES.to_vec())?;
    m.add("MLA_SHAPES", MLA_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(reshape_and_cache, m)?)?;
    m.add_function(wrap_pyfunction!(check_reshape_and_cache, m)?)?;
    m.add_function(wrap_pyfunction!(reshape_and_cache_case, m)?)?;
    m.add_function(wrap_pyfunction!(concat_and_cache_mla, m)?)?;
    m.add_function(wrap_pyfunction!(check_concat_and_cache_mla, m)?)?;
    m.add_function(wrap_pyfunction!(concat_and_cache_mla_case, m)?)?;
    Ok(())
}
