//! `kernel_oracle`, the Python module: core's contracts on numpy arrays,
//! bit for bit the Rust API's (the fast paths of the case library where
//! they exist, which are proven bit-identical to core), and `check_*`
//! drivers that run any Python callable through a contract's arms and
//! shapes with the case library's own generators and judges.
//!
//! Every function takes and returns numpy arrays of the dtypes its doc
//! names (a wrong dtype is a `TypeError`, a wrong shape a `ValueError`
//! whose message names the argument and both shapes); any memory layout is
//! accepted and read in C order. Arrays returned are new, C-contiguous.
//!
//! - [`codecs`]: e4m3, e5m2, f16 and bf16 encode and decode, with
//!   [`conventions`]' enums as arguments;
//! - [`fp8`]: the activation quantizer, the per-block FP8 GEMM under a
//!   [`conventions::Schedule`], the tensor-core MMA model, schedule
//!   identification and a case's data;
//! - [`ggml`]: ggml block dequantization and `mul_mat`;
//! - [`gdn`]: Gated DeltaNet decode rows (one step or packed);
//! - [`moe`]: the MoE verify-rows tables;
//! - [`check`]: `check_fp8_block_gemm` and `check_mul_mat`;
//! - [`check_gdn`]: `check_causal_conv1d_update` and `check_gated_delta_rule`
//!   (the two halves of GDN decode as the field's kernels run them,
//!   judged by a written error bound);
//! - [`check_quant`]: `quantize_fp8_groups` and `check_fp8_group_quant`
//!   (per-token-group e4m3 quantizers, bit for bit under a declared scale
//!   rule), and `quantize_fp8_scaled` and `check_fp8_scaled_quant` (the
//!   per-tensor and per-token ones);
//! - [`check_moe`]: `moe_align_block_size` and `check_moe_align_block_size`
//!   (the MoE routing table a fused-MoE GEMM walks);
//! - [`check_fused_moe`]: `fused_moe_fp8`, `fused_moe_fp8_case` and
//!   `check_fused_moe_fp8` (vLLM's fused-MoE block-FP8 expert GEMM, judged
//!   per (token, slot) pair under a declared schedule);
//! - [`check_scaled_mm`]: `fp8_scaled_mm`, `fp8_scaled_mm_case` and
//!   `check_fp8_scaled_mm` (the FP8 GEMM with row or tensor scales: torch
//!   `_scaled_mm`, CUTLASS and Triton; its accumulation over k named).
//! - [`check_rope`]: `rotary_embedding`, `rotary_embedding_case` and
//!   `check_rotary_embedding` (RoPE with a cos/sin cache, bit for bit;
//!   its arithmetic and layout named).
//! - [`check_kv_cache`]: `reshape_and_cache`, `reshape_and_cache_case`
//!   and `check_reshape_and_cache` (the KV-cache write in the NHD, HND and
//!   paged layouts, copied or as FP8 codes, every cache element bit for
//!   bit; its FP8 arithmetic named), and the same three for MLA's latent
//!   cache (`concat_and_cache_mla`).
//! - [`check_rms_norm`]: `rms_norm`, `rms_norm_case` and `check_rms_norm`
//!   (RMSNorm and fused add + RMSNorm: each output within the interval a
//!   sound bound on the inverse RMS leaves, bit for bit where it is one
//!   value; its arithmetic named).
//! - [`check_rms_norm_fp8_quant`]: `rms_norm_fp8_quant`, its case and
//!   `check_rms_norm_fp8_quant` (RMSNorm, or fused add + RMSNorm, then
//!   e4m3 quantization, fused: each code within the set sound enclosures
//!   of the value and the scale leave, bit for bit where it is one code;
//!   what is quantized and the scale rule named).
//! - [`check_act_and_mul`]: `act_and_mul`, `act_and_mul_case` and
//!   `check_act_and_mul` (gated activations, SwiGLU and GeGLU: each output
//!   within the interval a sound enclosure of the activation leaves, bit
//!   for bit where it is one value; its activation, arithmetic and layout
//!   named).
//! - [`check_attention`]: `attention`, `attention_case` and
//!   `check_attention` (scaled dot-product attention: each output within
//!   the interval a sound enclosure leaves, bit for bit where it is one
//!   value; its arithmetic named: flash, f32, eager).
//! - [`check_merge_attn_states`]: the oracle `merge_attn_states`,
//!   `merge_attn_states_case` and `check_merge_attn_states` (merging two
//!   partial attention states by their log-sum-exps: each output and
//!   output LSE within the interval a sound enclosure leaves, bit for bit
//!   where it is one value; its base, both-empty policy and LSE layout
//!   named).
//! - [`check_sampling`]: `sampling_case` and `check_sampling` (the
//!   sampling filters, temperature, top-k, top-p and min-p: each token's
//!   membership exact wherever sound enclosures decide it; the masked
//!   logits, renormalised probabilities or sampled ids judged; the order
//!   and tie policies named).
//! - [`check_penalties`]: `penalties_case` and `check_penalties` (the
//!   logits penalties, repetition, frequency and presence, every element
//!   bit for bit; the order, repetition scope and forms named).
//! - [`check_rejection_sample`]: `rejection_sample_case` and
//!   `check_rejection_sample` (speculative decoding's rejection sampler,
//!   vLLM v1's `rejection_sample` and FlashInfer's
//!   `chain_speculative_sampling`: every emitted token bit for bit with
//!   the random numbers handed in; the acceptance test and race form
//!   named).
//! - [`check_int8`]: `quantize_int8`, `int8_quant_case` and
//!   `check_int8_quant` (INT8 activation quantization for W8A8 int8,
//!   vLLM's `scaled_int8_quant`: codes, scales and zero points bit for
//!   bit; the code rule named).
//! - [`check_int8_group`]: `quantize_int8_group`, `int8_group_quant_case`
//!   and `check_int8_group_quant` (per-token-group INT8 activation
//!   quantization, vLLM's and SGLang's `per_token_group_quant_int8`: codes
//!   and scales bit for bit; the rounding, code rule and UE8M0 named).
//! - [`check_int8_mm`]: `int8_scaled_mm`, `int8_scaled_mm_case` and
//!   `check_int8_scaled_mm` (the INT8 GEMM with row or tensor scales,
//!   W8A8 int8: vLLM's CUTLASS and Triton scaled mm, `torch._int_mm` plus
//!   an epilogue; exact int32 sums, the epilogue and bias form named).

#![warn(missing_docs)]

pub mod arrays;
pub mod check;
pub mod check_act_and_mul;
pub mod check_attention;
pub mod check_fused_moe;
pub mod check_gdn;
pub mod check_int8;
pub mod check_int8_group;
pub mod check_int8_mm;
pub mod check_kv_cache;
pub mod check_merge_attn_states;
pub mod check_moe;
pub mod check_moe_routing;
pub mod check_penalties;
pub mod check_quant;
pub mod check_rejection_sample;
pub mod check_rms_norm;
pub mod check_rms_norm_fp8_quant;
pub mod check_rope;
pub mod check_sampling;
pub mod check_scaled_mm;
pub mod codecs;
pub mod conventions;
pub mod fp8;
pub mod gdn;
pub mod ggml;
pub mod moe;

use pyo3::prelude::*;

pyo3::create_exception!(
    kernel_oracle,
    Refused,
    pyo3::exceptions::PyException,
    "Raised by a callable under check to refuse a shape it does not support \
     (for example a library that needs k to be a multiple of 128): the case \
     is counted as refused, never as a failure, and the check's report lists it."
);

/// The module `kernel_oracle` (the Rust library is `kernel_oracle_py`, so
/// that it does not share a name with the case library it wraps).
#[pymodule]
#[pyo3(name = "kernel_oracle")]
fn kernel_oracle_py(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Refused", m.py().get_type::<Refused>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    conventions::register(m)?;
    codecs::register(m)?;
    fp8::register(m)?;
    ggml::register(m)?;
    gdn::register(m)?;
    moe::register(m)?;
    check::register(m)?;
    check_gdn::register(m)?;
    check_quant::register(m)?;
    check_moe::register(m)?;
    check_moe_routing::register(m)?;
    check_fused_moe::register(m)?;
    check_scaled_mm::register(m)?;
    check_rope::register(m)?;
    check_kv_cache::register(m)?;
    check_rms_norm::register(m)?;
    check_rms_norm_fp8_quant::register(m)?;
    check_act_and_mul::register(m)?;
    check_attention::register(m)?;
    check_merge_attn_states::register(m)?;
    check_sampling::register(m)?;
    check_penalties::register(m)?;
    check_rejection_sample::register(m)?;
    check_int8::register(m)?;
    check_int8_group::register(m)?;
    check_int8_mm::register(m)?;
    Ok(())
}
