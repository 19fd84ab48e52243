//! Writing a step's keys and values into a paged KV cache ("reshape and
//! cache"): vLLM's `reshape_and_cache_flash` (the FlashAttention and
//! FlashInfer layouts, NHD and HND) and `reshape_and_cache` (the
//! paged-attention layout, keys packed by `x`), FlashInfer's
//! `append_paged_kv_cache` and SGLang's `set_kv_buffer` in the same
//! layouts, each storing the cache as the model's dtype (`"auto"`) or as
//! FP8 codes under a per-tensor scale. The index maps are one per layout;
//! the FP8 conversion is a declared [`ScaleRule`] and [`Overflow`] policy,
//! so a kernel is held to it bit for bit.
//!
//! Shapes (elements, row-major): `key`, `value` `[T][num_kv_heads]
//! [head_size]` in the model's [`Dtype`] (held here as their bits, widened
//! to 32); `slot_mapping [T]` (int64; SGLang's `loc`, `out_cache_loc`:
//! one slot a token); one scale for the keys (`k_scale`)
//! and one for the values (`v_scale`), f32. The caches hold `num_blocks`
//! blocks of `block_size` slots, slot `s` being offset `s % block_size` of
//! block `s / block_size`, laid out by the [`Layout`] (rule `KV-INDEX`).
//! A cache element is the model dtype's bits (`"auto"`) or an FP8 code
//! ([`KvCacheDtype`]), held widened to 32 bits.
//!
//! The rules, for token `t`, head `h < num_kv_heads`, `d < head_size`:
//!
//! 1. `KV-PAD`: a negative `slot = slot_mapping[t]` (`-1`: a padding
//!    token) writes nothing.
//! 2. `KV-SLOT`: otherwise `0 <= slot < num_blocks block_size` (a kernel
//!    writes there unchecked; a slot outside is an error here, nothing
//!    written), and no two tokens share a slot (their writes would race;
//!    an error here); `block = slot / block_size`, `offset = slot %
//!    block_size`.
//! 3. `KV-INDEX`: `key[t][h][d]` goes to the key cache's element
//!    [`Shape::key_index`]`(block, offset, h, d)` and `value[t][h][d]` to
//!    the value cache's [`Shape::value_index`]`(block, offset, h, d)`.
//! 4. `KV-CONVERT`: the element written is [`convert`] of the input with
//!    `k_scale` for keys and `v_scale` for values: under `"auto"` the
//!    input's bits, copied (NaN payloads and signaling NaNs included);
//!    under FP8 the code of the [`ScaleRule`]'s scaled value, rounded to
//!    nearest even with the declared [`Overflow`] policy.
//! 5. `KV-KEEP`: every element of either cache that rule 3 does not name
//!    keeps its bits (a write to a padding token's "slot", to a wrong
//!    block or offset, past `head_size` or into a neighbouring head
//!    changes one).
//! 6. `KV-NAN`: a NaN input under FP8 gives a NaN code; which one is not
//!    part of the contract ([`same_element`]): a GPU's binary32 division
//!    and multiplication return the canonical NaN `0x7FFF_FFFF` whatever
//!    the operand's sign, while a CPU keeps the sign, so `0x7F` and `0xFF`
//!    (and E5M2's six NaN codes) are one result. Infinities keep their
//!    sign: `±inf` gives `±max finite` under [`Overflow::SatFinite`]
//!    (`0x7E`/`0xFE` E4M3, `0x7B`/`0xFB` E5M2), and NaN (E4M3) or `±inf`
//!    (E5M2, `0x7C`/`0xFC`) under [`Overflow::NonSaturating`].
//! 7. `KV-MLA`: MLA's latent cache ([`concat_and_cache_mla`], vLLM's
//!    `concat_and_cache_mla`) is this write in [`Layout::Nhd`] with one
//!    head of `kv_lora_rank + pe_dim` elements, the key row being
//!    `kv_c[t]` followed by `k_pe[t]`, one scale, and no value cache.
//!
//! Source: vLLM `csrc/cache_kernels.cu` (`reshape_and_cache_flash_kernel`:
//! `if (slot_idx < 0) return;`, `block_idx = slot_idx / block_size`,
//! `block_offset = slot_idx % block_size`, the destination `key_cache +
//! block_idx * block_stride + block_offset * page_stride + head *
//! head_stride`, NHD when `head_stride == head_size`;
//! `reshape_and_cache_kernel`: the key at `block_idx * num_heads *
//! (head_size / x) * block_size * x + head_idx * (head_size / x) *
//! block_size * x + (d / x) * block_size * x + block_offset * x + d % x`,
//! the value at `block_idx * num_heads * head_size * block_size +
//! head_idx * head_size * block_size + d * block_size + block_offset`;
//! `CopyWithScaleOp`: `static_cast` under `kAuto`, else
//! `fp8::scaled_convert`); vLLM
//! `csrc/quantization/fp8/nvidia/quant_utils.cuh`
//! (`scaled_vec_conversion<uint8_t, __nv_bfloat16>`:
//! `__nv_cvt_float_to_fp8(__bfloat162float(a) / scale, __NV_SATFINITE,
//! fp8_type)`); vLLM's Python `x = 16 // element_size` for the paged key
//! cache; FlashInfer's `kv_layout` names `"NHD"` and `"HND"`.

use crate::conventions::Overflow;
use crate::dtype::Dtype;
use crate::fp8::{self, Fp8Format, E4M3FN, E5M2};

/// What the cache stores (vLLM's `kv_cache_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvCacheDtype {
    /// `"auto"`: the model's dtype, each element's bits copied.
    Auto,
    /// `"fp8"` or `"fp8_e4m3"`: E4M3FN codes ([`crate::e4m3`]).
    Fp8E4m3,
    /// `"fp8_e5m2"`: E5M2 codes ([`crate::e5m2`]).
    Fp8E5m2,
}

impl KvCacheDtype {
    /// Every cache dtype, `"auto"` first.
    pub const ALL: [KvCacheDtype; 3] = [
        KvCacheDtype::Auto,
        KvCacheDtype::Fp8E4m3,
        KvCacheDtype::Fp8E5m2,
    ];

    /// `"auto"`, `"fp8_e4m3"` or `"fp8_e5m2"`.
    pub const fn name(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8E4m3 => "fp8_e4m3",
            KvCacheDtype::Fp8E5m2 => "fp8_e5m2",
        }
    }

    /// The cache dtype vLLM names `s`: `"auto"`, `"fp8"` (E4M3),
    /// `"fp8_e4m3"`, `"fp8_e5m2"` (any case).
    pub fn from_name(s: &str) -> Option<KvCacheDtype> {
        let is = |n: &str| n.eq_ignore_ascii_case(s);
        if is("auto") {
            Some(KvCacheDtype::Auto)
        } else if is("fp8") || is("fp8_e4m3") {
            Some(KvCacheDtype::Fp8E4m3)
        } else if is("fp8_e5m2") {
            Some(KvCacheDtype::Fp8E5m2)
        } else {
            None
        }
    }

    /// The FP8 format, or `None` for `"auto"`.
    pub const fn format(self) -> Option<&'static Fp8Format> {
        match self {
            KvCacheDtype::Auto => None,
            KvCacheDtype::Fp8E4m3 => Some(&E4M3FN),
            KvCacheDtype::Fp8E5m2 => Some(&E5M2),
        }
    }

    /// Bytes of one cache element when the model's dtype is `dtype`: 1
    /// for FP8, the dtype's (4 or 2) for `"auto"`.
    pub const fn element_bytes(self, dtype: Dtype) -> usize {
        match (self, dtype) {
            (KvCacheDtype::Auto, Dtype::F32) => 4,
            (KvCacheDtype::Auto, _) => 2,
            _ => 1,
        }
    }
}

/// How a cache lays out its blocks (rule `KV-INDEX`), with block `b`,
/// offset `o`, head `h`, dimension `d`, `H = num_kv_heads`, `hs =
/// head_size`, `bs = block_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// FlashAttention's and FlashInfer's `"NHD"` (vLLM's default for
    /// `reshape_and_cache_flash`): both caches `[num_blocks][bs][H][hs]`,
    /// element `((b bs + o) H + h) hs + d`.
    Nhd,
    /// FlashInfer's `"HND"` (vLLM's `kv_cache_layout="HND"`, handed to
    /// `reshape_and_cache_flash` as a stride permutation): both caches
    /// `[num_blocks][H][bs][hs]`, element `((b H + h) bs + o) hs + d`.
    Hnd,
    /// vLLM's paged-attention layout (`reshape_and_cache`, read by
    /// `paged_attention_v1`/`v2`): the key cache `[num_blocks][H][hs /
    /// x][bs][x]`, element `(((b H + h) (hs / x) + d / x) bs + o) x + d %
    /// x`, with `x = 16 / element bytes` (8 for bf16 and f16, 4 for f32, 16
    /// for FP8 codes: 16 bytes a vector); the value cache
    /// `[num_blocks][H][hs][bs]`, element `((b H + h) hs + d) bs + o`.
    Paged,
}

impl Layout {
    /// Every layout.
    pub const ALL: [Layout; 3] = [Layout::Nhd, Layout::Hnd, Layout::Paged];

    /// `"nhd"`, `"hnd"` or `"paged"`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Nhd => "nhd",
            Layout::Hnd => "hnd",
            Layout::Paged => "paged",
        }
    }

    /// The layout named `s` (any case).
    pub fn from_name(s: &str) -> Option<Layout> {
        Layout::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s))
    }
}

/// How an FP8 cache forms the value it rounds to a code from an input
/// `x` (a value of the model's dtype, exact in binary32) and the scale
/// `s` handed to the kernel, with `RN` rounding to nearest even to
/// binary32 and `R` to the model's dtype ([`Dtype::round`]). The
/// `*InDtype` rules round the scaled value to the model's dtype first, as
/// torch eager computes on bf16 and f16 tensors, one operator at a time,
/// so the code is rounded twice (in F32 they are the rules without it).
/// Which rule a torch expression computes depends on the device and on
/// the scale's kind (a Python float, a 0-dim tensor, a one-element
/// tensor): each rule names the ones it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleRule {
    /// `RN(x / s)`, one IEEE binary32 division: vLLM's CUDA kernels
    /// (`scaled_vec_conversion`: `__bfloat162float(a) / scale`, nvcc's
    /// `/` being `div.rn.f32`); torch on CUDA dividing by a float32 tensor
    /// of one or more dimensions (a `[1]`-shaped scale: a bf16 or f16
    /// `key` is promoted to float32 first); Triton's `tl.div_rn`.
    /// (Triton's plain `/` on float32 is PTX's approximate `div.full.f32`:
    /// none of these.)
    Divide,
    /// `RN(x * RN(1 / s))`: a multiply by the scale's binary32 reciprocal,
    /// as torch on CUDA divides a float32 tensor by a Python scalar
    /// (`div_true_kernel_cuda`, aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu:
    /// for a CPU scalar it computes "a * reciprocal(b)") and as kernels
    /// that take the reciprocal once per launch compute. (On the CPU torch
    /// divides: [`ScaleRule::Divide`], or [`ScaleRule::DivideInDtype`] on
    /// bf16 and f16.)
    Reciprocal,
    /// `RN(x * s)`: the kernel multiplies, the caller handing it the
    /// inverted scale (TensorRT-LLM's `kvScaleOrigQuant`, "multiplied by
    /// this original-domain to FP8 scale before storing").
    Multiply,
    /// `R(RN(x / s))`: [`ScaleRule::Divide`] in the model's dtype: torch
    /// on the CPU dividing a bf16 or f16 `key` by a Python float or a 0-dim
    /// float32 tensor, then `.to(torch.float8_e4m3fn)` (`div_true_kernel`'s
    /// reduced-float branch, aten/src/ATen/native/cpu/BinaryOpsKernel.cpp:
    /// `static_cast<opmath_t>(a) / b` with the scale read as float32, the
    /// quotient stored back in the tensor's dtype); a kernel that stores the
    /// quotient in the model's dtype before converting it. (On CUDA a 0-dim
    /// scale is [`ScaleRule::DivideScaleInDtype`], a Python float
    /// [`ScaleRule::ReciprocalInDtype`], a `[1]`-shaped float32 tensor
    /// [`ScaleRule::Divide`].)
    DivideInDtype,
    /// `R(RN(x * RN(1 / s)))`: [`ScaleRule::Reciprocal`] in the model's
    /// dtype (SGLang's `set_kv_buffer`: `cache_k.div_(k_scale)` with a
    /// float `k_scale` on the bf16 `cache_k` on CUDA, then
    /// `.to(self.dtype)`).
    ReciprocalInDtype,
    /// `R(RN(x * s))`: [`ScaleRule::Multiply`] in the model's dtype.
    MultiplyInDtype,
    /// `R(RN(x / R(s)))`: the scale rounded to the model's dtype, then
    /// [`ScaleRule::DivideInDtype`]: torch on CUDA dividing a bf16 or f16
    /// `key` by a 0-dim float32 CUDA tensor (as vLLM's attention layers hold
    /// `_k_scale`), then `.to(torch.float8_e4m3fn)`. A 0-dim tensor takes no
    /// part in type promotion, so the common dtype is the key's, and
    /// `div_true_kernel_cuda`'s tensor branch
    /// (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu: `DivFunctor<scalar_t>`
    /// through `gpu_kernel_with_scalars`) reads the scale cast to that
    /// dtype; c10's `BFloat16` and `Half` `operator/` divide in float32 and
    /// round back. In F32 it is [`ScaleRule::Divide`]; under f16 a scale
    /// past its range rounds to infinity or zero, and the quotient follows.
    DivideScaleInDtype,
}

impl ScaleRule {
    /// Every rule, in the order identification reports them.
    pub const ALL: [ScaleRule; 7] = [
        ScaleRule::Divide,
        ScaleRule::Reciprocal,
        ScaleRule::Multiply,
        ScaleRule::DivideInDtype,
        ScaleRule::ReciprocalInDtype,
        ScaleRule::MultiplyInDtype,
        ScaleRule::DivideScaleInDtype,
    ];

    /// `"divide"`, `"reciprocal"`, `"multiply"`, each with `"_in_dtype"`,
    /// and `"divide_scale_in_dtype"`.
    pub const fn name(self) -> &'static str {
        match self {
            ScaleRule::Divide => "divide",
            ScaleRule::Reciprocal => "reciprocal",
            ScaleRule::Multiply => "multiply",
            ScaleRule::DivideInDtype => "divide_in_dtype",
            ScaleRule::ReciprocalInDtype => "reciprocal_in_dtype",
            ScaleRule::MultiplyInDtype => "multiply_in_dtype",
            ScaleRule::DivideScaleInDtype => "divide_scale_in_dtype",
        }
    }

    /// The rule named `s` ([`ScaleRule::name`]).
    pub fn from_name(s: &str) -> Option<ScaleRule> {
        ScaleRule::ALL.into_iter().find(|r| r.name() == s)
    }

    /// Whether the kernel multiplies by the scale it is handed
    /// ([`ScaleRule::Multiply`], [`ScaleRule::MultiplyInDtype`]) rather
    /// than dividing by it.
    pub const fn multiplies(self) -> bool {
        matches!(self, ScaleRule::Multiply | ScaleRule::MultiplyInDtype)
    }

    /// The value the FP8 code is rounded from: `x` (a `dtype` value)
    /// scaled by `s` under this rule.
    pub fn scaled(self, dtype: Dtype, x: f32, s: f32) -> f32 {
        match self {
            ScaleRule::Divide => x / s,
            ScaleRule::Reciprocal => x * (1.0 / s),
            ScaleRule::Multiply => x * s,
            ScaleRule::DivideInDtype => dtype.round(x / s),
            ScaleRule::ReciprocalInDtype => dtype.round(x * (1.0 / s)),
            ScaleRule::MultiplyInDtype => dtype.round(x * s),
            ScaleRule::DivideScaleInDtype => dtype.round(x / dtype.round(s)),
        }
    }
}

/// The arithmetic of an FP8 cache: the scale rule and the overflow policy
/// of the rounding to the code ([`crate::fp8::encode`]: nearest even;
/// [`Overflow::SatFinite`] is CUDA's `__NV_SATFINITE` and PTX
/// `cvt.rn.satfinite`, vLLM's CUDA kernels and Triton's `.to(tl.float8e4nv)`
/// on sm_90; [`Overflow::NonSaturating`] is torch's
/// `.to(torch.float8_e4m3fn)`). Unused under `"auto"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conversion {
    /// How the scaled value is formed.
    pub rule: ScaleRule,
    /// What a value past the format's max finite (and an infinity) gives.
    pub overflow: Overflow,
}

impl Conversion {
    /// vLLM's CUDA kernels: [`ScaleRule::Divide`] with
    /// [`Overflow::SatFinite`].
    pub const VLLM: Conversion = Conversion {
        rule: ScaleRule::Divide,
        overflow: Overflow::SatFinite,
    };
}

/// The cache element (rule `KV-CONVERT`) of one input element: `bits`
/// (the model dtype's bits, widened to 32) copied under `"auto"`, else the
/// FP8 code of `conv.rule.scaled(dtype, x, scale)` with `x` the value of
/// `bits`, encoded with `conv.overflow` (a code, widened to 32).
pub fn convert(kv: KvCacheDtype, dtype: Dtype, conv: Conversion, bits: u32, scale: f32) -> u32 {
    match kv.format() {
        None => bits,
        Some(format) => {
            let v = conv.rule.scaled(dtype, dtype.decode(bits), scale);
            u32::from(fp8::encode(format, v, conv.overflow))
        }
    }
}

/// Whether two cache elements are the same result: bit for bit under
/// `"auto"` (a copy keeps every bit), and under FP8 bit for bit or both
/// NaN codes of the format (rule `KV-NAN`). Poisoned (unwritten) elements
/// are compared bit for bit, not by this.
pub fn same_element(kv: KvCacheDtype, a: u32, b: u32) -> bool {
    a == b
        || match kv.format() {
            None => false,
            Some(f) => a <= 0xFF && b <= 0xFF && f.is_nan(a as u8) && f.is_nan(b as u8),
        }
}

/// A shape or input that cannot be computed. Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvCacheError {
    /// A dimension that must be at least 1 is 0.
    Zero {
        /// `"tokens"`, `"num_kv_heads"`, `"head_size"`, `"block_size"` or
        /// `"num_blocks"`.
        dim: &'static str,
    },
    /// The paged layout with a `head_size` that is not a multiple of `x`.
    PagedX {
        /// The head size.
        head_size: usize,
        /// The key cache's packing.
        x: usize,
    },
    /// A buffer length or a slot number overflows.
    Overflow,
    /// A buffer has the wrong number of elements.
    Len {
        /// `"key"`, `"value"`, `"slot_mapping"`, `"key_cache"` or
        /// `"value_cache"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// A slot past the cache (rule `KV-SLOT`).
    Slot {
        /// The token.
        token: usize,
        /// Its slot.
        slot: i64,
        /// The cache's slots, `num_blocks block_size`.
        num_slots: usize,
    },
    /// Two tokens with one slot (rule `KV-SLOT`).
    Duplicate {
        /// The earlier token.
        first: usize,
        /// The later token.
        second: usize,
        /// Their slot.
        slot: i64,
    },
    /// An MLA write on a shape that is not one head of `kv_lora_rank +
    /// pe_dim` elements in the NHD layout ([`mla_shape`]).
    Mla {
        /// The latent's elements.
        kv_lora_rank: usize,
        /// The shape's head size (`kv_lora_rank + pe_dim`).
        head_size: usize,
    },
    /// An FP8 cache's scale that is not positive and finite.
    Scale {
        /// `"k_scale"`, `"v_scale"` or (MLA) `"scale"`.
        which: &'static str,
        /// Its value.
        value: f32,
    },
}

impl core::fmt::Display for KvCacheError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            KvCacheError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            KvCacheError::PagedX { head_size, x } => write!(
                f,
                "the paged layout packs the key cache by x = {x}: head_size {head_size} must be a multiple of it"
            ),
            KvCacheError::Overflow => write!(f, "a buffer length or slot number overflows"),
            KvCacheError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            KvCacheError::Slot { token, slot, num_slots } => write!(
                f,
                "slot_mapping[{token}] = {slot}, past the cache's {num_slots} slots (0..{num_slots}, or negative for padding)"
            ),
            KvCacheError::Duplicate { first, second, slot } => write!(
                f,
                "slot_mapping[{first}] and slot_mapping[{second}] are both {slot}: two tokens cannot share a slot"
            ),
            KvCacheError::Mla { kv_lora_rank, head_size } => write!(
                f,
                "an MLA cache is one NHD head of kv_lora_rank + pe_dim elements: kv_lora_rank {kv_lora_rank} with a row of {head_size}"
            ),
            KvCacheError::Scale { which, value } => write!(
                f,
                "{which} = {value:e}: an FP8 cache's scale must be positive and finite"
            ),
        }
    }
}

/// The dimensions of one call, with the layout and the paged layout's
/// packing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    layout: Layout,
    tokens: usize,
    num_kv_heads: usize,
    head_size: usize,
    block_size: usize,
    num_blocks: usize,
    x: usize,
}

/// An array shape of up to five dimensions (elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    dims: [usize; 5],
    ndim: usize,
}

impl Dims {
    /// The dimensions, outermost first.
    pub fn as_slice(&self) -> &[usize] {
        &self.dims[..self.ndim]
    }
}

/// A cache element's coordinates: block, offset in the block, head,
/// dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coord {
    /// The block (`slot / block_size`).
    pub block: usize,
    /// The offset in the block (`slot % block_size`).
    pub offset: usize,
    /// The head.
    pub head: usize,
    /// The dimension within the head.
    pub dim: usize,
}

impl Shape {
    /// A shape: every dimension at least 1; under [`Layout::Paged`],
    /// `head_size` a multiple of `x = 16 / element_bytes` (the cache
    /// element's bytes: [`KvCacheDtype::element_bytes`]); every buffer
    /// length (in 4-byte words) and slot number within `usize` and `i64`.
    ///
    /// # Errors
    /// [`KvCacheError::Zero`], [`KvCacheError::PagedX`],
    /// [`KvCacheError::Overflow`].
    pub fn new(
        layout: Layout,
        tokens: usize,
        num_kv_heads: usize,
        head_size: usize,
        block_size: usize,
        num_blocks: usize,
        element_bytes: usize,
    ) -> Result<Shape, KvCacheError> {
        for (dim, v) in [
            ("tokens", tokens),
            ("num_kv_heads", num_kv_heads),
            ("head_size", head_size),
            ("block_size", block_size),
            ("num_blocks", num_blocks),
        ] {
            if v == 0 {
                return Err(KvCacheError::Zero { dim });
            }
        }
        let x = match layout {
            Layout::Paged => (16 / element_bytes.clamp(1, 16)).max(1),
            _ => 1,
        };
        if !head_size.is_multiple_of(x) {
            return Err(KvCacheError::PagedX { head_size, x });
        }
        let words = |a: usize, b: usize| {
            a.checked_mul(b)
                .and_then(|n| n.checked_mul(head_size))
                .and_then(|n| n.checked_mul(num_kv_heads))
                .and_then(|n| n.checked_mul(4))
        };
        let slots_fit = num_blocks
            .checked_mul(block_size)
            .is_some_and(|n| i64::try_from(n).is_ok());
        if words(tokens, 1).is_none() || words(num_blocks, block_size).is_none() || !slots_fit {
            return Err(KvCacheError::Overflow);
        }
        Ok(Shape {
            layout,
            tokens,
            num_kv_heads,
            head_size,
            block_size,
            num_blocks,
            x,
        })
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// Tokens (`T`).
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Key (and value) heads per token.
    pub fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }
    /// Elements per head.
    pub fn head_size(&self) -> usize {
        self.head_size
    }
    /// Slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }
    /// Blocks per cache.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    /// The paged key cache's packing `x` (1 in the other layouts).
    pub fn x(&self) -> usize {
        self.x
    }
    /// Slots per cache, `num_blocks block_size`.
    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }
    /// Key (and value) elements, `T num_kv_heads head_size`.
    pub fn key_len(&self) -> usize {
        self.tokens * self.num_kv_heads * self.head_size
    }
    /// Elements of each cache, `num_blocks block_size num_kv_heads
    /// head_size`.
    pub fn cache_len(&self) -> usize {
        self.num_slots() * self.num_kv_heads * self.head_size
    }

    /// The key cache's array shape (rule `KV-INDEX`).
    pub fn key_cache_dims(&self) -> Dims {
        let (nb, bs, h, hs, x) = (
            self.num_blocks,
            self.block_size,
            self.num_kv_heads,
            self.head_size,
            self.x,
        );
        match self.layout {
            Layout::Nhd => Dims {
                dims: [nb, bs, h, hs, 0],
                ndim: 4,
            },
            Layout::Hnd => Dims {
                dims: [nb, h, bs, hs, 0],
                ndim: 4,
            },
            Layout::Paged => Dims {
                dims: [nb, h, hs / x, bs, x],
                ndim: 5,
            },
        }
    }

    /// The value cache's array shape (rule `KV-INDEX`).
    pub fn value_cache_dims(&self) -> Dims {
        match self.layout {
            Layout::Paged => Dims {
                dims: [
                    self.num_blocks,
                    self.num_kv_heads,
                    self.head_size,
                    self.block_size,
                    0,
                ],
                ndim: 4,
            },
            _ => self.key_cache_dims(),
        }
    }

    /// The key cache's element of block `b`, offset `o`, head `h`,
    /// dimension `d` (rule `KV-INDEX`; each argument below its dimension).
    pub fn key_index(&self, b: usize, o: usize, h: usize, d: usize) -> usize {
        let (bs, nh, hs, x) = (self.block_size, self.num_kv_heads, self.head_size, self.x);
        match self.layout {
            Layout::Nhd => ((b * bs + o) * nh + h) * hs + d,
            Layout::Hnd => ((b * nh + h) * bs + o) * hs + d,
            Layout::Paged => (((b * nh + h) * (hs / x) + d / x) * bs + o) * x + d % x,
        }
    }

    /// The value cache's element of block `b`, offset `o`, head `h`,
    /// dimension `d` (rule `KV-INDEX`).
    pub fn value_index(&self, b: usize, o: usize, h: usize, d: usize) -> usize {
        match self.layout {
            Layout::Paged => {
                ((b * self.num_kv_heads + h) * self.head_size + d) * self.block_size + o
            }
            _ => self.key_index(b, o, h, d),
        }
    }

    /// The coordinates of the key cache's element `i` (`i <
    /// cache_len()`): the inverse of [`Shape::key_index`].
    pub fn key_coord(&self, i: usize) -> Coord {
        let (bs, nh, hs, x) = (self.block_size, self.num_kv_heads, self.head_size, self.x);
        match self.layout {
            Layout::Nhd => Coord {
                block: i / (bs * nh * hs),
                offset: i / (nh * hs) % bs,
                head: i / hs % nh,
                dim: i % hs,
            },
            Layout::Hnd => Coord {
                block: i / (nh * bs * hs),
                head: i / (bs * hs) % nh,
                offset: i / hs % bs,
                dim: i % hs,
            },
            Layout::Paged => Coord {
                block: i / (nh * hs * bs),
                head: i / (hs * bs) % nh,
                dim: i / (bs * x) % (hs / x) * x + i % x,
                offset: i / x % bs,
            },
        }
    }

    /// The coordinates of the value cache's element `i`: the inverse of
    /// [`Shape::value_index`].
    pub fn value_coord(&self, i: usize) -> Coord {
        let (bs, nh, hs) = (self.block_size, self.num_kv_heads, self.head_size);
        match self.layout {
            Layout::Paged => Coord {
                block: i / (nh * hs * bs),
                head: i / (hs * bs) % nh,
                dim: i / bs % hs,
                offset: i % bs,
            },
            _ => self.key_coord(i),
        }
    }
}

/// The inputs of [`reshape_and_cache`] (shapes in the module
/// documentation).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `[T][num_kv_heads][head_size]` the model dtype's bits.
    pub key: &'a [u32],
    /// `[T][num_kv_heads][head_size]` the model dtype's bits.
    pub value: &'a [u32],
    /// `[T]` slots (negative: padding).
    pub slot_mapping: &'a [i64],
    /// The keys' scale (FP8 only).
    pub k_scale: f32,
    /// The values' scale (FP8 only).
    pub v_scale: f32,
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), KvCacheError> {
    if want == got {
        Ok(())
    } else {
        Err(KvCacheError::Len { arg, want, got })
    }
}

/// Checks the lengths (`key`, `value`, `slot_mapping`, then the caches'
/// `key_cache`, `value_cache`), every slot (rule `KV-SLOT`: below
/// `num_slots`, and no two tokens sharing one: a plain quadratic scan)
/// and, under FP8, the scales.
///
/// # Errors
/// [`KvCacheError::Len`] naming the first wrong buffer, then
/// [`KvCacheError::Slot`], [`KvCacheError::Duplicate`] naming the first
/// bad token, then [`KvCacheError::Scale`].
pub fn check_inputs(
    shape: &Shape,
    kv: KvCacheDtype,
    x: &Inputs<'_>,
    key_cache: usize,
    value_cache: usize,
) -> Result<(), KvCacheError> {
    len("key", shape.key_len(), x.key.len())?;
    len("value", shape.key_len(), x.value.len())?;
    len("slot_mapping", shape.tokens, x.slot_mapping.len())?;
    len("key_cache", shape.cache_len(), key_cache)?;
    len("value_cache", shape.cache_len(), value_cache)?;
    check_slots(shape, x.slot_mapping)?;
    check_scales(kv, &[("k_scale", x.k_scale), ("v_scale", x.v_scale)])
}

/// Rule `KV-SLOT` for every token: a slot below `num_slots` (or
/// negative), and no two tokens sharing one (a plain quadratic scan).
fn check_slots(shape: &Shape, slot_mapping: &[i64]) -> Result<(), KvCacheError> {
    for (token, &slot) in slot_mapping.iter().enumerate() {
        if slot >= 0 && slot as u64 >= shape.num_slots() as u64 {
            return Err(KvCacheError::Slot {
                token,
                slot,
                num_slots: shape.num_slots(),
            });
        }
        if slot >= 0 {
            if let Some(first) = slot_mapping[..token].iter().position(|&s| s == slot) {
                return Err(KvCacheError::Duplicate {
                    first,
                    second: token,
                    slot,
                });
            }
        }
    }
    Ok(())
}

/// An FP8 cache's scales are positive and finite (unused under
/// `"auto"`).
fn check_scales(kv: KvCacheDtype, scales: &[(&'static str, f32)]) -> Result<(), KvCacheError> {
    if kv != KvCacheDtype::Auto {
        for &(which, value) in scales {
            if !(value.is_finite() && value > 0.0) {
                return Err(KvCacheError::Scale { which, value });
            }
        }
    }
    Ok(())
}

/// Writes every token's key and value into `key_cache` and
/// `value_cache` (the caches' bits before the call, each element widened
/// to 32: what rule `KV-KEEP` keeps), tokens in order, then heads, then
/// dimensions (rules `KV-*` in the module documentation): nothing for a
/// negative slot, else every head and dimension of the token's key and
/// value.
///
/// # Errors
/// As [`check_inputs`]; nothing is written then.
pub fn reshape_and_cache(
    shape: &Shape,
    kv: KvCacheDtype,
    dtype: Dtype,
    conv: Conversion,
    x: &Inputs<'_>,
    key_cache: &mut [u32],
    value_cache: &mut [u32],
) -> Result<(), KvCacheError> {
    check_inputs(shape, kv, x, key_cache.len(), value_cache.len())?;
    let (nh, hs) = (shape.num_kv_heads, shape.head_size);
    for (t, &slot) in x.slot_mapping.iter().enumerate() {
        // KV-PAD.
        if slot < 0 {
            continue;
        }
        let (b, o) = (
            slot as usize / shape.block_size,
            slot as usize % shape.block_size,
        );
        for h in 0..nh {
            for d in 0..hs {
                // KV-INDEX, KV-CONVERT.
                let src = (t * nh + h) * hs + d;
                key_cache[shape.key_index(b, o, h, d)] =
                    convert(kv, dtype, conv, x.key[src], x.k_scale);
                value_cache[shape.value_index(b, o, h, d)] =
                    convert(kv, dtype, conv, x.value[src], x.v_scale);
            }
        }
    }
    Ok(())
}

/// The inputs of [`concat_and_cache_mla`]: MLA's compressed latent and
/// its rotary part, one row a token.
#[derive(Clone, Copy, Debug)]
pub struct MlaInputs<'a> {
    /// `[T][kv_lora_rank]` the model dtype's bits (vLLM's `kv_c`).
    pub kv_c: &'a [u32],
    /// `[T][pe_dim]` the model dtype's bits (vLLM's `k_pe`).
    pub k_pe: &'a [u32],
    /// `[T]` slots (negative: padding).
    pub slot_mapping: &'a [i64],
    /// The one scale (FP8 only).
    pub scale: f32,
}

/// The shape of an MLA latent cache: [`Layout::Nhd`] with one head of
/// `kv_lora_rank + pe_dim` elements (rule `KV-MLA`), the cache
/// `[num_blocks][block_size][kv_lora_rank + pe_dim]`.
///
/// # Errors
/// [`KvCacheError::Zero`] (`"kv_lora_rank"`, `"pe_dim"` or a dimension
/// of [`Shape::new`]), [`KvCacheError::Overflow`].
pub fn mla_shape(
    tokens: usize,
    kv_lora_rank: usize,
    pe_dim: usize,
    block_size: usize,
    num_blocks: usize,
) -> Result<Shape, KvCacheError> {
    for (dim, v) in [("kv_lora_rank", kv_lora_rank), ("pe_dim", pe_dim)] {
        if v == 0 {
            return Err(KvCacheError::Zero { dim });
        }
    }
    let row = kv_lora_rank
        .checked_add(pe_dim)
        .ok_or(KvCacheError::Overflow)?;
    Shape::new(Layout::Nhd, tokens, 1, row, block_size, num_blocks, 1)
}

/// MLA's latent-cache write (vLLM's `concat_and_cache_mla`, rule
/// `KV-MLA`): each token's row `kv_c[t] ++ k_pe[t]` (`kv_lora_rank`
/// elements, then `head_size - kv_lora_rank`) written as
/// [`reshape_and_cache`] writes a key of one head, with the one `scale`;
/// there is no value cache. `shape` is [`mla_shape`]'s.
///
/// Source: vLLM `csrc/cache_kernels.cu` (`concat_and_cache_mla_kernel`:
/// `if (slot_idx < 0) return;`, the destination `block_idx *
/// block_stride + block_offset * entry_stride + i` for `kv_c`'s `i`, the
/// same plus `kv_lora_rank` for `k_pe`'s, each element through
/// `fp8::scaled_convert` with `*scale` under FP8).
///
/// # Errors
/// [`KvCacheError::Mla`] for a shape that is not [`mla_shape`]'s with
/// `kv_lora_rank`; [`KvCacheError::Len`] (`"kv_c"`, `"k_pe"`,
/// `"slot_mapping"`, `"kv_cache"`), [`KvCacheError::Slot`],
/// [`KvCacheError::Duplicate`], [`KvCacheError::Scale`] (`"scale"`);
/// nothing is written then.
pub fn concat_and_cache_mla(
    shape: &Shape,
    kv_lora_rank: usize,
    kv: KvCacheDtype,
    dtype: Dtype,
    conv: Conversion,
    x: &MlaInputs<'_>,
    kv_cache: &mut [u32],
) -> Result<(), KvCacheError> {
    let hs = shape.head_size;
    if shape.layout != Layout::Nhd
        || shape.num_kv_heads != 1
        || kv_lora_rank == 0
        || kv_lora_rank >= hs
    {
        return Err(KvCacheError::Mla {
            kv_lora_rank,
            head_size: hs,
        });
    }
    let pe = hs - kv_lora_rank;
    len("kv_c", shape.tokens * kv_lora_rank, x.kv_c.len())?;
    len("k_pe", shape.tokens * pe, x.k_pe.len())?;
    len("slot_mapping", shape.tokens, x.slot_mapping.len())?;
    len("kv_cache", shape.cache_len(), kv_cache.len())?;
    check_slots(shape, x.slot_mapping)?;
    check_scales(kv, &[("scale", x.scale)])?;
    for (t, &slot) in x.slot_mapping.iter().enumerate() {
        // KV-PAD.
        if slot < 0 {
            continue;
        }
        let (b, o) = (
            slot as usize / shape.block_size,
            slot as usize % shape.block_size,
        );
        for d in 0..hs {
            // KV-MLA: the latent, then the rotary part.
            let bits = if d < kv_lora_rank {
                x.kv_c[t * kv_lora_rank + d]
            } else {
                x.k_pe[t * pe + d - kv_lora_rank]
            };
            kv_cache[shape.key_index(b, o, 0, d)] = convert(kv, dtype, conv, bits, x.scale);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::NanMagnitude;

    fn shape(layout: Layout, bytes: usize) -> Shape {
        Shape::new(layout, 3, 2, 16, 4, 3, bytes).unwrap()
    }

    #[test]
    fn kv_index_maps_are_bijections_and_their_coords_invert_them() {
        for layout in Layout::ALL {
            for bytes in [1, 2, 4] {
                let s = shape(layout, bytes);
                let mut seen_k = [false; 3 * 4 * 2 * 16];
                let mut seen_v = [false; 3 * 4 * 2 * 16];
                for b in 0..3 {
                    for o in 0..4 {
                        for h in 0..2 {
                            for d in 0..16 {
                                let c = Coord {
                                    block: b,
                                    offset: o,
                                    head: h,
                                    dim: d,
                                };
                                let (k, v) = (s.key_index(b, o, h, d), s.value_index(b, o, h, d));
                                assert!(!seen_k[k] && !seen_v[v], "{layout:?}");
                                seen_k[k] = true;
                                seen_v[v] = true;
                                assert_eq!(s.key_coord(k), c, "{layout:?} {bytes}");
                                assert_eq!(s.value_coord(v), c, "{layout:?} {bytes}");
                            }
                        }
                    }
                }
                let n: usize = s.key_cache_dims().as_slice().iter().product();
                assert_eq!(n, s.cache_len());
            }
        }
    }

    #[test]
    fn paged_x_is_sixteen_bytes_of_elements() {
        assert_eq!(shape(Layout::Paged, 1).x(), 16);
        assert_eq!(shape(Layout::Paged, 2).x(), 8);
        assert_eq!(shape(Layout::Paged, 4).x(), 4);
        assert_eq!(shape(Layout::Nhd, 2).x(), 1);
        assert_eq!(
            shape(Layout::Paged, 1).key_cache_dims().as_slice(),
            &[3, 2, 1, 4, 16]
        );
        // The key of (block 1, offset 2, head 1, dim 9) with x = 8:
        // ((1*2 + 1)*2 + 1)*4 + 2 = 30 vectors of 8, then 9 % 8.
        assert_eq!(shape(Layout::Paged, 2).key_index(1, 2, 1, 9), 30 * 8 + 1);
        assert_eq!(
            Shape::new(Layout::Paged, 1, 1, 72, 16, 1, 1),
            Err(KvCacheError::PagedX {
                head_size: 72,
                x: 16
            })
        );
        assert!(Shape::new(Layout::Nhd, 1, 1, 72, 16, 1, 1).is_ok());
        assert_eq!(
            Shape::new(Layout::Hnd, 1, 0, 72, 16, 1, 1),
            Err(KvCacheError::Zero {
                dim: "num_kv_heads"
            })
        );
    }

    #[test]
    fn scale_rules_part_where_the_reciprocal_is_inexact() {
        // 1/7 in binary32 is 0x3E124925, 3 * 2^-26 above 1/7 relative to
        // 7: x * fl(1/7) lands above a midpoint x / 7 sits on.
        let (m, s) = (1.6875f32, 7.0f32);
        let x = m * s;
        assert_eq!(ScaleRule::Divide.scaled(Dtype::Bf16, x, s), m);
        assert!(ScaleRule::Reciprocal.scaled(Dtype::Bf16, x, s) > m);
        assert_eq!(ScaleRule::ReciprocalInDtype.scaled(Dtype::Bf16, x, s), m);
        assert_eq!(ScaleRule::Multiply.scaled(Dtype::Bf16, 3.0, 0.5), 1.5);
        // 1.6875 is the midpoint of e4m3 1.625 (0x3D) and 1.75 (0x3E):
        // divide ties to even, the reciprocal rounds up.
        let code = |r: ScaleRule| {
            let bits = Dtype::Bf16.encode(x);
            let conv = Conversion {
                rule: r,
                overflow: Overflow::SatFinite,
            };
            convert(KvCacheDtype::Fp8E4m3, Dtype::Bf16, conv, bits, s)
        };
        assert_eq!(code(ScaleRule::Divide), 0x3E);
        assert_eq!(code(ScaleRule::Reciprocal), 0x3E);
        let x = 1.5625f32 * 7.0; // between 0x3C (1.5) and 0x3D (1.625)
        let bits = Dtype::Bf16.encode(x);
        let c = |r: ScaleRule| {
            let conv = Conversion {
                rule: r,
                overflow: Overflow::SatFinite,
            };
            convert(KvCacheDtype::Fp8E4m3, Dtype::Bf16, conv, bits, 7.0)
        };
        assert_eq!(
            (c(ScaleRule::Divide), c(ScaleRule::Reciprocal)),
            (0x3C, 0x3D)
        );
    }

    #[test]
    fn divide_scale_in_dtype_rounds_the_scale_first() {
        // s = 1 + 2^-8 - 2^-20 rounds to 1.0 in bf16 (8 significant
        // bits). x = 1.1875 = 1.0011b is the E4M3 midpoint of 1.125 (0x39)
        // and 1.25 (0x3A): x / R(s) sits on it and ties to the even 0x3A;
        // x / s = 1.18288.. rounds (to bf16 1.1796875, or in binary32) to
        // 0x39.
        let s = 1.0 + 1.0 / 256.0 - 1.0 / 1_048_576.0;
        let (x, rule) = (1.1875f32, ScaleRule::DivideScaleInDtype);
        assert_eq!(Dtype::Bf16.round(s), 1.0);
        assert_eq!(rule.scaled(Dtype::Bf16, x, s), x);
        assert_eq!(
            ScaleRule::DivideInDtype.scaled(Dtype::Bf16, x, s),
            1.179_687_5
        );
        let code = |r: ScaleRule| {
            let conv = Conversion {
                rule: r,
                overflow: Overflow::NonSaturating,
            };
            convert(
                KvCacheDtype::Fp8E4m3,
                Dtype::Bf16,
                conv,
                Dtype::Bf16.encode(x),
                s,
            )
        };
        assert_eq!(code(rule), 0x3A);
        assert_eq!(code(ScaleRule::DivideInDtype), 0x39);
        assert_eq!(code(ScaleRule::Divide), 0x39);
        // In F32 the rounding is the identity: the plain division.
        assert_eq!(rule.scaled(Dtype::F32, x, s), x / s);
        assert_eq!(ScaleRule::from_name("divide_scale_in_dtype"), Some(rule));
        assert!(!rule.multiplies());
    }

    #[test]
    fn kv_nan_and_overflow_per_policy() {
        let conv = |overflow| Conversion {
            rule: ScaleRule::Divide,
            overflow,
        };
        let bf = |x: f32| Dtype::Bf16.encode(x);
        let e4 = KvCacheDtype::Fp8E4m3;
        let sat = conv(Overflow::SatFinite);
        let non = conv(Overflow::NonSaturating);
        assert_eq!(convert(e4, Dtype::Bf16, sat, bf(f32::INFINITY), 2.0), 0x7E);
        assert_eq!(convert(e4, Dtype::Bf16, sat, bf(-1000.0), 2.0), 0xFE);
        assert_eq!(convert(e4, Dtype::Bf16, non, bf(-1000.0), 2.0), 0xFF);
        assert_eq!(convert(e4, Dtype::Bf16, non, bf(928.0), 2.0), 0x7E);
        let e5 = KvCacheDtype::Fp8E5m2;
        assert_eq!(
            convert(e5, Dtype::Bf16, non, bf(f32::NEG_INFINITY), 2.0),
            0xFC
        );
        assert_eq!(
            convert(e5, Dtype::Bf16, sat, bf(f32::NEG_INFINITY), 2.0),
            0xFB
        );
        let nan = convert(e4, Dtype::Bf16, non, bf(-f32::NAN), 2.0);
        assert!(same_element(e4, nan, 0x7F) && same_element(e5, 0x7D, 0xFF));
        assert!(!same_element(e4, 0x7E, 0x7F));
        // "auto" copies bits: a signaling NaN's payload survives.
        let snan = 0x7F81;
        let auto = KvCacheDtype::Auto;
        assert_eq!(convert(auto, Dtype::Bf16, sat, snan, 0.0), snan);
        assert!(!same_element(auto, 0x7FC0, 0x7FC1));
        assert_eq!(
            crate::e4m3::decode_e4m3(
                convert(e4, Dtype::F32, sat, 1.0f32.to_bits(), 0.25) as u8,
                NanMagnitude::Ieee
            ),
            4.0
        );
    }

    #[test]
    fn kv_mla_concatenates_the_latent_and_the_rotary_part() {
        let s = mla_shape(2, 3, 1, 2, 2).unwrap();
        let kv_c = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(f32::to_bits);
        let k_pe = [7.0f32, 8.0].map(f32::to_bits);
        let slots = [-1i64, 2];
        let x = MlaInputs {
            kv_c: &kv_c,
            k_pe: &k_pe,
            slot_mapping: &slots,
            scale: 0.5,
        };
        let mut c = [0u32; 16];
        let e4 = KvCacheDtype::Fp8E4m3;
        concat_and_cache_mla(&s, 3, e4, Dtype::F32, Conversion::VLLM, &x, &mut c).unwrap();
        // Slot 2 is block 1, offset 0: elements 8..12, the values doubled.
        let code = |v: f32| u32::from(crate::e4m3::encode_e4m3(v, Overflow::SatFinite));
        assert_eq!(c[8..12], [code(8.0), code(10.0), code(12.0), code(16.0)]);
        assert!(c[..8].iter().chain(&c[12..]).all(|&v| v == 0));
        assert_eq!(
            concat_and_cache_mla(&s, 4, e4, Dtype::F32, Conversion::VLLM, &x, &mut c),
            Err(KvCacheError::Mla {
                kv_lora_rank: 4,
                head_size: 4
            })
        );
        assert_eq!(
            mla_shape(2, 0, 1, 2, 2),
            Err(KvCacheError::Zero {
                dim: "kv_lora_rank"
            })
        );
    }

    #[test]
    fn kv_pad_kv_keep_and_kv_slot() {
        let s = Shape::new(Layout::Nhd, 3, 1, 2, 2, 2, 4).unwrap();
        let key = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].map(f32::to_bits);
        let value = [7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0].map(f32::to_bits);
        let slots = [3i64, -1, 0];
        let x = Inputs {
            key: &key,
            value: &value,
            slot_mapping: &slots,
            k_scale: 1.0,
            v_scale: 1.0,
        };
        let (mut kc, mut vc) = ([0xAAu32; 8], [0xBBu32; 8]);
        let run = |x: &Inputs<'_>, kc: &mut [u32], vc: &mut [u32]| {
            reshape_and_cache(
                &s,
                KvCacheDtype::Auto,
                Dtype::F32,
                Conversion::VLLM,
                x,
                kc,
                vc,
            )
        };
        run(&x, &mut kc, &mut vc).unwrap();
        let f = |v: f32| v.to_bits();
        assert_eq!(kc, [f(5.0), f(6.0), 0xAA, 0xAA, 0xAA, 0xAA, f(1.0), f(2.0)]);
        assert_eq!(vc[6..], [f(7.0), f(8.0)]);
        let dup = [3i64, -1, 3];
        let x2 = Inputs {
            slot_mapping: &dup,
            ..x
        };
        assert_eq!(
            run(&x2, &mut kc, &mut vc),
            Err(KvCacheError::Duplicate {
                first: 0,
                second: 2,
                slot: 3
            })
        );
        let past = [4i64, -1, 0];
        let x3 = Inputs {
            slot_mapping: &past,
            ..x
        };
        assert!(matches!(
            run(&x3, &mut kc, &mut vc),
            Err(KvCacheError::Slot { token: 0, .. })
        ));
        let x4 = Inputs { v_scale: 0.0, ..x };
        assert!(run(&x4, &mut kc, &mut vc).is_ok());
        let r = reshape_and_cache(
            &s,
            KvCacheDtype::Fp8E4m3,
            Dtype::F32,
            Conversion::VLLM,
            &x4,
            &mut kc,
            &mut vc,
        );
        assert!(matches!(
            r,
            Err(KvCacheError::Scale {
                which: "v_scale",
                ..
            })
        ));
        assert_eq!(KvCacheDtype::from_name("FP8"), Some(KvCacheDtype::Fp8E4m3));
        assert_eq!(
            ScaleRule::from_name("reciprocal_in_dtype"),
            Some(ScaleRule::ReciprocalInDtype)
        );
        assert_eq!(Layout::from_name("HND"), Some(Layout::Hnd));
    }
}
