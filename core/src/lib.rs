//! # oracle: the normative arithmetic of kernel-oracle
//!
//! This crate *defines* what the GPU kernels of this project compute. An
//! auditor reads it as the specification; every kernel in `cu/` (and, as
//! they come, the WGSL shaders) is checked against it, bit for bit where the
//! contract claims bits. It is `no_std`, has no dependencies and no `unsafe`, so
//! `cargo test -p core` runs on any machine.
//!
//! Arithmetic is IEEE 754 binary32 basic operations (`+ - * /`, correctly
//! rounded `sqrt`), round-to-nearest-even, each operation rounding on its own
//! unless a fused operation is named. Every contract states its shapes (with
//! units), the exact order of its operations, its edge cases as named rules,
//! and the source of each rule.
//!
//! Modules, one contract each:
//! - [`conventions`]: the choices that differ between vendors (NaN-magnitude
//!   decode, overflow policy), one enum each.
//! - [`round`]: the one round-to-nearest-even-and-pack routine.
//! - [`fma`]: the binary32 fused multiply-add, one rounding, from binary64
//!   basic operations.
//! - [`fp8`], [`e4m3`], [`e5m2`], [`f16`](mod@f16), [`bf16`]: the float codecs;
//!   [`dtype`]: the output types a kernel rounds to (f32, bf16, f16).
//! - [`fp8_mmq`]: the per-block FP8 GEMM (seed 000's v2) and its declared
//!   schedules (fold and in-block accumulation).
//! - [`fp8_quant`]: per-token-group e4m3 activation quantizers under the
//!   field's declared scale rules (v2's, vLLM's and SGLang's division,
//!   UE8M0), and the per-tensor (static or dynamic) and per-token ones.
//! - [`fp8_scaled_mm`]: the FP8 GEMM with row or tensor scales (torch
//!   `_scaled_mm`, CUTLASS and Triton scaled mm) and its declared
//!   accumulation (the tensor core's chain, promotion interval) and
//!   epilogue.
//! - [`tensor_core`]: the sm_90 FP8 tensor-core MMA inner product.
//! - [`int8_quant`]: INT8 activation quantization for W8A8 int8 (vLLM's
//!   `scaled_int8_quant`: static or dynamic per token, symmetric or with a
//!   zero point), bit for bit under a declared rule (reciprocal, divide).
//! - [`int8_group_quant`]: per-token-group INT8 activation quantization
//!   (vLLM's and SGLang's `per_token_group_quant_int8`: DeepSeek-style
//!   W8A8 int8 block quantization), bit for bit under a declared rounding
//!   (toward zero, the field's; to nearest even or away), code rule and
//!   UE8M0 choice.
//! - [`int8_scaled_mm`]: the INT8 GEMM with row or tensor scales (vLLM's
//!   CUTLASS and Triton scaled mm, `torch._int_mm`): exact int32 sums, the
//!   zero-point correction, the conversion and the declared epilogue.
//! - [`gdn`]: Gated DeltaNet decode (seed 003): conv1d, prep, the gated
//!   delta-rule scan, packed rows with snapshots; exp, softplus, sigmoid,
//!   SiLU and sqrt as binary32 basic operations.
//! - [`moe_tables`]: the MoE verify-rows pointer and scale tables (seed 002).
//! - [`moe_align`]: the MoE token alignment a fused-MoE GEMM walks (vLLM's
//!   and SGLang's `moe_align_block_size`).
//! - [`moe_routing`]: an MoE router's top-k choice of experts and their
//!   weights (softmax or sigmoid scores, a bias, groups), held to sound
//!   enclosures: exact wherever the scores' bounds separate.
//! - [`ggml`]: ggml's Q4_0, Q8_0, Q4_K, Q6_K blocks and the WGSL GEMM over them (seed 004).
//! - [`rope`]: rotary position embedding with a cos/sin cache (vLLM,
//!   FlashInfer, torch) under a declared arithmetic (per-op in the model
//!   dtype, f32, f32 with either product fused).
//! - [`kv_cache`]: writing a step's keys and values into a paged KV cache
//!   (vLLM's `reshape_and_cache_flash` in the NHD and HND layouts,
//!   `reshape_and_cache` in the paged-attention layout), copied or as FP8
//!   codes under a declared scale rule and overflow policy.
//! - [`rms_norm`]: RMSNorm and fused add + RMSNorm (vLLM, Hugging Face,
//!   FlashInfer, Liger, torch) as an interval per element from a sound
//!   bound on the inverse RMS, bit for bit where the interval is one value,
//!   under a declared arithmetic (round then weight, f32, Gemma's `1 + w`).
//! - [`rms_norm_fp8_quant`]: RMSNorm (or fused add + RMSNorm) then e4m3
//!   quantization, fused (vLLM's `rms_norm_static_fp8_quant`,
//!   `rms_norm_dynamic_per_token_quant`): each code a set from the norm's
//!   enclosure and the scale's, bit for bit where it is one code, under a
//!   declared input (rounded to the dtype, or the float32 product) and
//!   scale rule.
//! - [`act_and_mul`]: gated activations, `act(gate) * up` (SwiGLU, GeGLU:
//!   vLLM, FlashInfer, Liger, torch) as an interval per element from a
//!   sound enclosure of every binary32 evaluation of the activation, bit
//!   for bit where the interval is one value, under a declared arithmetic
//!   (round then multiply, f32) and layout.
//! - [`attention`]: scaled dot-product attention (FlashAttention, torch
//!   SDPA, FlexAttention, Hugging Face's eager form) held to a sound
//!   enclosure per output element under a declared arithmetic (flash, f32,
//!   eager), mask alignment, window, softcap and GQA.
//! - [`merge_attn_states`]: merging two partial attention states by their
//!   log-sum-exps (vLLM's `merge_attn_states`, SGLang's `merge_state_v2`,
//!   FlashInfer's `merge_state`) held to a sound enclosure per output
//!   element and output LSE under a declared base, both-empty policy and
//!   LSE layout: exact where a side is empty or the LSEs are equal.
//! - [`sampling`]: the sampling filters (temperature, top-k, top-p,
//!   min-p: vLLM, FlashInfer, Hugging Face) held to sound enclosures:
//!   each token's membership exact wherever the enclosures decide it.
//! - [`penalties`]: the logits penalties before sampling (repetition,
//!   frequency, presence: vLLM, Hugging Face, SGLang), bit for bit under
//!   a declared order, scope and form.
//! - [`rejection_sample`]: speculative decoding's rejection sampler
//!   (vLLM v1's `rejection_sample`, FlashInfer's
//!   `chain_speculative_sampling`), bit for bit with its random numbers
//!   handed in, under a declared acceptance test and race form.
//! - [`compare`]: how a kernel's output is compared with the oracle's.
//!
//! No allocation anywhere: every contract writes into caller-provided
//! slices, and the crate has no features.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod act_and_mul;
pub mod attention;
pub mod bf16;
pub mod compare;
pub mod conventions;
pub mod dtype;
pub mod e4m3;
pub mod e5m2;
pub mod f16;
pub mod fma;
pub mod fp8;
pub mod fp8_mmq;
pub mod fp8_quant;
pub mod fp8_scaled_mm;
pub mod gdn;
pub mod ggml;
pub mod int8_group_quant;
pub mod int8_quant;
pub mod int8_scaled_mm;
pub mod kv_cache;
pub mod merge_attn_states;
pub mod moe_align;
pub mod moe_routing;
pub mod moe_tables;
pub mod penalties;
pub mod rejection_sample;
pub mod rms_norm;
pub mod rms_norm_fp8_quant;
pub mod rope;
pub mod round;
pub mod sampling;
pub mod tensor_core;
#[cfg(test)]
mod test_gen;
