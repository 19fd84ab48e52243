"""Public bug reports of the field's kernels, each modelled as a numpy form
of the buggy kernel, run through the check that covers it (default
arguments unless the report needs a declaration, default shapes) beside
the correct form under the same declaration: each must be caught.

A report counts as caught only where the correct form passes (``ok``)
and the buggy form fails (``not ok``) under one declaration.

Run as a script (``.venv/bin/python python/tests/test_public_bug_reports.py
[key ...]``) for the table (the arms that caught each report), or through
pytest (each report one test). The forms reuse the test modules' numpy
forms where they fit."""

import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kernel_oracle as ko  # noqa: E402

F = np.float32
REPORTS = []


def report(key, url, bug_class, check, correct, buggy, kw=None, note=""):
    """Registers one public report: ``check(correct, **kw)`` must pass and
    ``check(buggy, **kw)`` must fail for it to count as caught."""
    REPORTS.append(dict(key=key, url=url, bug_class=bug_class, check=check, correct=correct,
                        buggy=buggy, kw=kw or {}, note=note))


def arms_of(r):
    return sorted({m.group(1) for m in re.finditer(r'arms=\["(\w+)"\]', "\n".join(r.failures))})


def judge(rep):
    t0 = time.time()
    good = rep["check"](rep["correct"], verbose=False, **rep["kw"])
    bad = rep["check"](rep["buggy"], verbose=False, **rep["kw"])
    return dict(correct_ok=good.ok, correct_cases=good.cases, correct_failed=good.failed,
                correct_arms=arms_of(good), caught=good.ok and not bad.ok,
                buggy_failed=bad.failed, buggy_cases=bad.cases, arms=arms_of(bad),
                first=(bad.failures[0].splitlines()[:3] if bad.failures else []),
                secs=time.time() - t0)


def named(fn, name):
    fn.__name__ = name
    return fn


# ---------------------------------------------------------------------------
# FP8 per-tensor / per-token quantization (check_fp8_scaled_quant)
# ---------------------------------------------------------------------------
from test_check_scaled_quant import scaled_quant  # noqa: E402


def sq(name, **kw):
    return named(lambda x, q, s: scaled_quant(x, q, s, **kw), name)


# sglang PR 4362: sgl per_token_quant_fp8 computed `scale_val = 1.0f /
# block_max` and quantized `x * scale_val`; the fix divides by the scale
# (vLLM's dynamic_per_token_scaled_fp8_quant, which it is benchmarked
# against). Declared rule "divide" (the fixed kernel's).
report(
    "sglang#4362", "https://github.com/sgl-project/sglang/pull/4362",
    "fp8 per-token quant: codes of x * fl(1/s) for x / s",
    ko.check_fp8_scaled_quant,
    sq("sgl_per_token_fixed", granularity="token", rule="divide"),
    sq("sgl_per_token_reciprocal", granularity="token", rule="reciprocal"),
    kw=dict(granularity="token", rule="divide"),
)

# transformers PR 42775 (issue 42746): finegrained FP8's static activation
# quantization cast `(x / scale).to(torch.float8_e4m3fn)` without clamping
# first: torch's cast is non-saturating, so |x / s| >= 464 gives NaN.
report(
    "transformers#42775", "https://github.com/huggingface/transformers/pull/42775",
    "fp8 static quant: no clamp before a non-saturating cast (NaN codes)",
    ko.check_fp8_scaled_quant,
    sq("static_clamped", granularity="tensor", scale=0.3, rule="divide"),
    sq("static_no_clamp", granularity="tensor", scale=0.3, rule="divide", bug="no-clamp"),
    kw=dict(granularity="tensor", scale=0.3, rule="divide"),
)

# ---------------------------------------------------------------------------
# FP8 per-token-group quantization (check_fp8_group_quant)
# ---------------------------------------------------------------------------
from numpy_reference import group_quant  # noqa: E402


def ue8m0_fallback(x, q, s, group=128, eps=1e-10):
    """vLLM's Triton fallback of per_token_group_quant_fp8 with
    use_ue8m0=True before PR 53346: the absmax floored at eps, the scale
    absmax / 448 rounded up to a power of two with no 1e-10 floor under it
    (the CUDA op floors the scale: exp2f(ceilf(log2f(fmaxf(y_s, 1e-10)))))."""
    m, k = x.shape
    with np.errstate(divide="ignore"):
        for g in range(-(-k // group)):
            lo, hi = g * group, min((g + 1) * group, k)
            amax = np.maximum(np.max(np.abs(x[:, lo:hi]), axis=1), F(eps))
            sc = amax / F(448)
            sc = (2.0 ** np.ceil(np.log2(sc.astype(np.float64)).astype(F))).astype(F)
            y = x[:, lo:hi] / sc[:, None]
            q[:, lo:hi] = ko.encode_e4m3(np.clip(y, F(-448), F(448)).astype(F))
            s[:, g] = sc


report(
    "vllm#53346", "https://github.com/vllm-project/vllm/pull/53346",
    "fp8 group quant UE8M0: scale floor 1e-10 missing in the Triton fallback",
    ko.check_fp8_group_quant,
    named(lambda x, q, s: group_quant(x, q, s, rule="ue8m0", eps=1e-10), "ue8m0_cuda"),
    named(ue8m0_fallback, "ue8m0_triton_fallback"),
    kw=dict(rule="ue8m0", eps=1e-10),
)


def soft_e4m3_early_sat(v):
    """sglang's software float -> E4M3FN cast before PR 40581: saturates to
    448 once the biased exponent reaches 15 (|v| >= 256), and rounds the
    mantissa half-up (ties away from zero) instead of to nearest even."""
    v = np.asarray(v, F)
    a = np.abs(v).astype(np.float64)
    out = np.zeros(a.shape)
    # normal range: mantissa of 3 bits, half-up
    e = np.floor(np.log2(np.where(a > 0, a, 1)))
    e = np.maximum(e, -6)  # subnormals share exponent -6
    ulp = 2.0 ** (e - 3)
    out = np.floor(a / ulp + 0.5) * ulp
    out = np.where(a >= 256, 448.0, np.minimum(out, 448.0))
    out = np.where(a == 0, 0.0, out)
    return ko.encode_e4m3(np.copysign(out, v).astype(F))


def dsv4_group_quant(x, q, s, group=128):
    """A UE8M0 group quantizer with the software cast of soft_e4m3_early_sat
    (sglang's DeepSeek-V4 path)."""
    m, k = x.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        for g in range(-(-k // group)):
            lo, hi = g * group, min((g + 1) * group, k)
            amax = np.maximum(np.max(np.abs(x[:, lo:hi]), axis=1), F(1e-10))
            sc = amax / F(448)
            log2 = np.log2(np.maximum(sc, F(1e-10)).astype(np.float64)).astype(F)
            sc = (2.0 ** np.ceil(log2)).astype(F)
            y = x[:, lo:hi] / sc[:, None]
            q[:, lo:hi] = soft_e4m3_early_sat(np.clip(y, F(-448), F(448)))
            s[:, g] = sc


report(
    "sglang#40581", "https://github.com/sgl-project/sglang/pull/40581",
    "software e4m3 cast: saturates at 256 (not 448) and rounds ties away",
    ko.check_fp8_group_quant,
    named(lambda x, q, s: group_quant(x, q, s, rule="ue8m0", eps=1e-10), "ue8m0_rne_cast"),
    named(dsv4_group_quant, "dsv4_soft_cast"),
    kw=dict(rule="ue8m0", eps=1e-10),
)


# ---------------------------------------------------------------------------
# RMSNorm (check_rms_norm)
# ---------------------------------------------------------------------------
from test_check_rms_norm import numpy_rms  # noqa: E402

# vLLM PR 42379 (issue 42325): PR 40860 changed csrc/layernorm_kernels.cu
# to upcast the weight and write `(scalar_t)(x * s_variance * w)` (one
# rounding) where the spec is `(scalar_t)(x * s_variance) * w` (the
# normalized value rounded to the model dtype, then the weight product
# rounded: round_then_weight); in rms_norm and fused_add_rms_norm.
report(
    "vllm#42379", "https://github.com/vllm-project/vllm/pull/42379",
    "RMSNorm weight product in f32 (one rounding) for round_then_weight",
    ko.check_rms_norm,
    numpy_rms("round_then_weight", name="rms_norm_v0_19"),
    numpy_rms("f32", name="rms_norm_weight_upcast"),
)
report(
    "vllm#42379-fused", "https://github.com/vllm-project/vllm/pull/42379",
    "fused_add_rms_norm weight product in f32 for round_then_weight",
    ko.check_rms_norm,
    numpy_rms("round_then_weight", fused=True, name="fused_add_rms_norm_v0_19"),
    numpy_rms("f32", fused=True, name="fused_add_rms_norm_weight_upcast"),
    kw=dict(fused_add=True),
)

# ---------------------------------------------------------------------------
# Rotary embedding (check_rotary_embedding)
# ---------------------------------------------------------------------------
from test_check_rope import CODECS as ROPE_CODECS, numpy_rope  # noqa: E402


def _rope_parts(dtype="bfloat16"):
    enc, dec = ROPE_CODECS[dtype]

    def R(v):
        return dec(enc(np.asarray(v, F)))
    return enc, dec, R


def colossal_rope_crosswired(positions, query, key, cache, out_query, out_key):
    """ColossalAI's fused_rotary_emb Triton kernel (issue 6428, PR 6444):
    out_q1 = k_0 sin + k_1 cos (reads K) and out_k0 = q_0 cos - q_1 sin
    (reads Q); NeoX halves, f32 arithmetic. A query head h reads key head
    h mod num_kv (the kernel assumed equal head counts)."""
    enc, dec, R = _rope_parts()
    cv = cache if cache.dtype == F else dec(cache)
    rot, half = cv.shape[1], cv.shape[1] // 2
    c = cv[positions][:, None, :half]
    s = cv[positions][:, None, half:]
    q, k = dec(query), dec(key)
    hq, hk = q.shape[1], k.shape[1]
    kq = k[:, np.arange(hq) % hk]  # key heads seen by query head h
    qk = q[:, np.arange(hk) % hq]  # query heads seen by key head h
    oq, ok = q.copy(), k.copy()
    oq[..., :half] = R(q[..., :half] * c - q[..., half:rot] * s)
    oq[..., half:rot] = R(kq[..., :half] * s + kq[..., half:rot] * c)  # bug: K
    ok[..., :half] = R(qk[..., :half] * c - qk[..., half:rot] * s)  # bug: Q
    ok[..., half:rot] = R(k[..., :half] * s + k[..., half:rot] * c)
    out_query[...] = enc(oq)
    out_key[...] = enc(ok)


report(
    "ColossalAI#6428", "https://github.com/hpcaitech/ColossalAI/issues/6428",
    "RoPE: q's second half from k, k's first half from q (cross-wired)",
    ko.check_rotary_embedding,
    numpy_rope("f32", name="rope_f32"),
    named(colossal_rope_crosswired, "colossal_fused_rotary_emb"),
)


def sgl_dsv4_flat_rope(positions, query, key, cache, out_query, out_key):
    """sglang's apply_rotary_emb_flat_kernel (issue 35096): launched with
    RD = next_power_of_2(rope_dim) columns and only the row mask, in place,
    GPT-J pairs (2p, 2p + 1); so columns rope_dim .. RD - 1 are read,
    rotated with cos/sin read past the rotary half (the flat cache, its next
    row, zero past its end) and written back; past head_size the writes
    land on the next head, and past the token's last head they are lost.
    Modelled on the out-of-place contract: the wrapper copies the input to
    the output and runs the in-place kernel there, heads in order."""
    enc, dec, R = _rope_parts()
    cv = cache if cache.dtype == F else dec(cache)
    rot = cv.shape[1]
    half = rot // 2
    RD = max(1 << (rot - 1).bit_length(), 2)
    flat_cache = np.concatenate([cv.reshape(-1), np.zeros(RD, F)])
    for x, out in ((query, out_query), (key, out_key)):
        T, H, D = x.shape
        buf = dec(x).reshape(T, H * D).copy()
        for t in range(T):
            base = int(positions[t]) * rot
            for h in range(H):
                cols = h * D + np.arange(RD)
                ok = cols < H * D
                v = np.where(ok, buf[t, np.minimum(cols, H * D - 1)], F(0))
                p = np.arange(RD // 2)
                cos = flat_cache[base + p]  # p >= rot/2 reads the sines
                sin = flat_cache[base + half + p]  # p >= rot/2 reads the next row
                x0, x1 = v[0::2], v[1::2]
                o = np.empty(RD, F)
                o[0::2] = R(x0 * cos - x1 * sin)
                o[1::2] = R(x1 * cos + x0 * sin)
                buf[t, cols[ok]] = o[ok]
        out[...] = enc(buf.reshape(T, H, D))


report(
    "sglang#35096", "https://github.com/sgl-project/sglang/issues/35096",
    "RoPE: columns rope_dim..next_pow2(rope_dim) rotated and written back",
    ko.check_rotary_embedding,
    numpy_rope("f32", is_neox=False, name="rope_gptj_f32"),
    named(sgl_dsv4_flat_rope, "sgl_dsv4_flat_rope"),
    kw=dict(is_neox=False),
)


def aiter_rope_full_head(positions, query, key, cache, out_query, out_key):
    """vLLM's ROCm fused QK-norm + RoPE + KV-cache path before PR 43676:
    aiter's kernel defaults rotary_dim to head_size when not passed, so
    partial-RoPE models get all head dims rotated (NeoX pairs (p, p + D/2))
    with cos/sin read from the cache as if it were D wide (reading on into
    the following positions' rows; zero past the cache's end)."""
    enc, dec, R = _rope_parts()
    cv = cache if cache.dtype == F else dec(cache)
    rot = cv.shape[1]
    for x, out in ((query, out_query), (key, out_key)):
        T, H, D = x.shape
        half = D // 2
        flat = np.concatenate([cv.reshape(-1), np.zeros(2 * D, F)])
        v = dec(x)
        o = v.copy()
        for t in range(T):
            base = int(positions[t]) * rot
            c = flat[base + np.arange(half)]
            s = flat[base + half + np.arange(half)]
            o[t, :, :half] = R(v[t, :, :half] * c - v[t, :, half:] * s)
            o[t, :, half:] = R(v[t, :, half:] * c + v[t, :, :half] * s)
        out[...] = enc(o)


report(
    "vllm#43676", "https://github.com/vllm-project/vllm/pull/43676",
    "RoPE: rotary_dim not passed, whole head rotated, cache read past its width",
    ko.check_rotary_embedding,
    numpy_rope("f32", name="rope_f32"),
    named(aiter_rope_full_head, "aiter_fused_rope_no_rotary_dim"),
)

# ---------------------------------------------------------------------------
# MoE routing (check_moe_routing)
# ---------------------------------------------------------------------------
from test_check_moe_routing import DEEPSEEK_V3, logits_f32, numpy_router  # noqa: E402


def vllm_grouped_topk_pre_13474(top_k, n_group, topk_group, routed_scaling_factor):
    """vLLM's grouped_topk before PR 13474 with e_score_correction_bias:
    each group scored by its biased maximum (not the top-2 sum) and the
    dropped groups' scores masked with 0.0 (not -inf)."""
    def f(logits, b, weights, ids):
        x = logits_f32(logits)
        t, e = x.shape
        p = F(1) / (F(1) + np.exp(-x))
        sel = p + b.astype(F)
        g = sel.reshape(t, n_group, e // n_group).max(axis=2)
        keep = np.argsort(-g, axis=1, kind="stable")[:, :topk_group]
        mask = np.zeros((t, n_group), bool)
        np.put_along_axis(mask, keep, True, axis=1)
        sel = np.where(np.repeat(mask, e // n_group, axis=1), sel, F(0))
        i = np.argsort(-sel, axis=1, kind="stable")[:, :top_k]
        w = np.take_along_axis(p, i, axis=1)
        w = w / w.sum(axis=1, keepdims=True) * F(routed_scaling_factor)
        weights[...], ids[...] = w.astype(F), i.astype(np.int32)
    return f


report(
    "vllm#13474", "https://github.com/vllm-project/vllm/pull/13474",
    "grouped top-k (biased): group max for top-2 sum, masked groups 0 not -inf",
    lambda fn, **kw: ko.check_moe_routing(fn, 8, **DEEPSEEK_V3, **kw),
    named(numpy_router(8, **DEEPSEEK_V3), "deepseek_v3_router"),
    named(vllm_grouped_topk_pre_13474(8, 8, 4, 2.5), "vllm_grouped_topk_pre_13474"),
)

SIG_NORENORM = dict(scoring="sigmoid", bias=True, renormalize=False, routed_scaling_factor=2.5)
report(
    "sglang-jax#1282", "https://github.com/sgl-project/sglang-jax/pull/1282",
    "routed_scaling_factor applied only inside the renormalize branch",
    lambda fn, **kw: ko.check_moe_routing(fn, 8, **SIG_NORENORM, **kw),
    named(numpy_router(8, **SIG_NORENORM), "router_scaled"),
    named(numpy_router(8, **dict(SIG_NORENORM, routed_scaling_factor=1.0)), "router_scale_skipped"),
)


def unbiased_by_subtraction(top_k, routed_scaling_factor):
    """FlashInfer's DeepSeek no-group warp-per-token top-k before PR 3875:
    the unbiased sigmoid of a chosen expert recovered as
    fl(fl(sigmoid + bias) - bias), then renormalized and scaled."""
    def f(logits, b, weights, ids):
        x = logits_f32(logits)
        p = F(1) / (F(1) + np.exp(-x))
        sel = (p + b.astype(F)).astype(F)
        i = np.argsort(-sel, axis=1, kind="stable")[:, :top_k]
        w = (np.take_along_axis(sel, i, axis=1) - b.astype(F)[i]).astype(F)
        w = w / (w.sum(axis=1, keepdims=True) + F(1e-20)) * F(routed_scaling_factor)
        weights[...], ids[...] = w.astype(F), i.astype(np.int32)
    return f


SIG_BIAS = dict(scoring="sigmoid", bias=True, routed_scaling_factor=2.827)
report(
    "flashinfer#3875", "https://github.com/flashinfer-ai/flashinfer/pull/3875",
    "sigmoid routing: unbiased score recovered as (s + b) - b (cancellation)",
    lambda fn, **kw: ko.check_moe_routing(fn, 8, **SIG_BIAS, **kw),
    named(numpy_router(8, **SIG_BIAS), "router_sigmoid_bias"),
    named(unbiased_by_subtraction(8, 2.827), "flashinfer_weight_by_subtraction"),
)


def metax_topk_softmax(top_k):
    """MetaX's _moe_C.topk_softmax (issue 270): with a correction bias, at
    exactly (num_experts=128, topk=8) the weights are the biased scores;
    every other shape is right."""
    good = numpy_router(top_k, bias=True)
    bad = numpy_router(top_k, bias=True, bug="biased-weights")

    def f(logits, b, weights, ids):
        (bad if logits.shape[1] == 128 and top_k == 8 else good)(logits, b, weights, ids)
    return f


report(
    "vLLM-metax#270", "https://github.com/MetaX-MACA/vLLM-metax/issues/270",
    "topk_softmax + bias: biased weights at (E=128, k=8) only (dispatch bug)",
    lambda fn, **kw: ko.check_moe_routing(fn, 8, bias=True, **kw),
    named(numpy_router(8, bias=True), "router_softmax_bias"),
    named(metax_topk_softmax(8), "metax_topk_softmax"),
)

# ---------------------------------------------------------------------------
# MoE align (check_moe_align_block_size)
# ---------------------------------------------------------------------------
from numpy_reference import moe_align  # noqa: E402
from test_check_moe import aligner, for_shapes  # noqa: E402


def align_with(transform, name):
    def f(topk_ids, s, e, n):
        ne, bs = f.num_experts(topk_ids, s, e), f.block_size(topk_ids, s, e)
        transform(topk_ids, ne, bs, s, e, n)
    f.__name__ = name
    return for_shapes(f, ko.MOE_ALIGN_SHAPES)


def sglang_last_expert_lost(topk_ids, ne, bs, s, e, n):
    """sglang PR 15250: after PR 8514 shifted ids by one (expert_id + 1) for
    EP filtering, the last expert fell outside the counted range: its pairs
    are neither counted nor placed (modelled as ids that go nowhere)."""
    ids = np.where(topk_ids == ne - 1, ne, topk_ids).astype(topk_ids.dtype)
    moe_align(ids, ne, bs, s, e, n, seed=int(topk_ids.sum()) & 0xFFFF)


def xpu_only_first_index(topk_ids, ne, bs, s, e, n):
    """vllm-xpu-kernels issue 453: sorted_token_ids keeps only token index 0;
    every other pair index is replaced by the padding value (numel)."""
    moe_align(topk_ids, ne, bs, s, e, n, seed=int(topk_ids.sum()) & 0xFFFF)
    numel = topk_ids.size
    s[(s != 0) & (s < numel)] = numel


report(
    "sglang#15250", "https://github.com/sgl-project/sglang/pull/15250",
    "moe_align: the last expert's pairs uncounted and unplaced (id + 1 shift)",
    ko.check_moe_align_block_size,
    for_shapes(aligner(), ko.MOE_ALIGN_SHAPES),
    align_with(sglang_last_expert_lost, "sglang_moe_align_last_expert_lost"),
)
report(
    "vllm-xpu-kernels#453", "https://github.com/vllm-project/vllm-xpu-kernels/issues/453",
    "moe_align: sorted ids keep token index 0 only, the rest padding",
    ko.check_moe_align_block_size,
    for_shapes(aligner(), ko.MOE_ALIGN_SHAPES),
    align_with(xpu_only_first_index, "xpu_moe_align_first_index_only"),
)

# ---------------------------------------------------------------------------
# Merge of attention states (check_merge_attn_states)
# ---------------------------------------------------------------------------
from test_check_merge_attn_states import numpy_merge  # noqa: E402

report(
    "flashinfer#4051", "https://github.com/flashinfer-ai/flashinfer/issues/4051",
    "cascade merge_state: NaN output and LSE when both states are empty",
    ko.check_merge_attn_states,
    numpy_merge("unnormalised", base="2", layout="token_major", name="flashinfer_merge_guarded"),
    numpy_merge("unnormalised", base="2", layout="token_major", bug="nan-both-empty",
                name="flashinfer_merge_state"),
    kw=dict(base="2", lse_layout="token_major", empty="zero"),
)
report(
    "vllm#28181", "https://github.com/vllm-project/vllm/pull/28181",
    "merge_attn_states CUDA: NaN when prefix and suffix are both empty (-inf)",
    ko.check_merge_attn_states,
    numpy_merge("cuda", name="vllm_merge_cuda_fixed"),
    numpy_merge("cuda", bug="nan-both-empty", name="vllm_merge_cuda_pre_28181"),
)

# ---------------------------------------------------------------------------
# Sampling filters (check_sampling)
# ---------------------------------------------------------------------------
from test_check_sampling import numpy_sampler  # noqa: E402

report(
    "sglang#33539", "https://github.com/sgl-project/sglang/pull/33539",
    "top-k keeps exactly k by rank where the kernels keep every tie at the k-th",
    ko.check_sampling,
    named(numpy_sampler(), "topk_ties_kept"),
    named(numpy_sampler(topk_ties="exact"), "sglang_torch_fallback_exact_k"),
)
report(
    "transformers#18976", "https://github.com/huggingface/transformers/issues/18976",
    "top-p keeps an extra token when the cumulative mass equals top_p",
    ko.check_sampling,
    named(numpy_sampler(), "topp_le"),
    named(numpy_sampler(bug="lt"), "topp_boundary_token_kept"),
    note="modelled in vLLM's ascending form (`cs < 1 - p` for `<=`), the same kept set",
)

# ---------------------------------------------------------------------------
# Penalties (check_penalties)
# ---------------------------------------------------------------------------
from test_check_penalties import numpy_penalties  # noqa: E402


def vllm_bincount_unbounded(logits, prompt, output, presence, frequency, repetition, out):
    """vLLM model runner v2's _bincount_kernel before PR 49081: no
    `token_id < vocab_size` test, so an id of vocab_size (vLLM's padding, or
    an input-only multimodal token) sets bit vocab_size of the row's packed
    prompt bitset (int32 words, ceil(V/32) a row) and adds one at column
    vocab_size of the row's output counts: both land on the next row's
    token 0 when V % 32 == 0 (past the last row, nothing)."""
    b, v = logits.shape
    words = -(-v // 32)
    bits = np.zeros(b * words * 32 + 32, bool)
    counts = np.zeros(b * v + 1, np.int64)
    for r in range(b):
        for t in prompt[r]:
            bits[r * words * 32 + int(t)] = True
        for t in output[r]:
            counts[r * v + int(t)] += 1
    pc = np.stack([bits[r * words * 32: r * words * 32 + v] for r in range(b)]).astype(np.int64)
    oc = counts[: b * v].reshape(b, v)
    numpy_penalties(inputs="counts")(logits, pc, oc, presence, frequency, repetition, out)


report(
    "vllm#49081", "https://github.com/vllm-project/vllm/pull/49081",
    "penalty bincount: id == vocab_size written into the next row's token 0",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(vllm_bincount_unbounded, "vllm_mrv2_bincount_unbounded"),
)
def vllm_bincount_unbounded_prompt_only(logits, prompt, output, presence, frequency, repetition, out):
    """The report's own path of vllm#49081: only the prompt's packed bitset
    is written unbounded (an input-only token id == vocab_size in the
    prompt); output counts bounds-checked. The bit lands on the next row's
    token 0 only when V % 32 == 0."""
    b, v = logits.shape
    words = -(-v // 32)
    bits = np.zeros(b * words * 32 + 32, bool)
    for r in range(b):
        for t in prompt[r]:
            bits[r * words * 32 + int(t)] = True
    pc = np.stack([bits[r * words * 32: r * words * 32 + v] for r in range(b)]).astype(np.int64)
    oc = np.stack([np.bincount(row, minlength=v + 1)[:v] for row in output])
    numpy_penalties(inputs="counts")(logits, pc, oc, presence, frequency, repetition, out)


report(
    "vllm#49081-prompt", "https://github.com/vllm-project/vllm/pull/49081",
    "penalty bincount, prompt bitset only: id == V sets the next row's token 0",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(vllm_bincount_unbounded_prompt_only, "vllm_mrv2_prompt_bitset_unbounded"),
)
report(
    "transformers#2302", "https://github.com/huggingface/transformers/issues/2302",
    "repetition penalty divides negative logits (raises them)",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(numpy_penalties(bug="divide-negative"), "hf_repetition_pre_2303"),
)
report(
    "NeMo#8194", "https://github.com/NVIDIA-NeMo/Speech/issues/8194",
    "repetition penalty: logits / p on every sign (scatter of gathered / p)",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(numpy_penalties(bug="reciprocal-all"), "nemo_repetition_penalty"),
    note="NeMo computes logits / p; the test form's `x * fl(1/p)` differs from it in the last bit only",
)

# ---------------------------------------------------------------------------
# Attention (check_attention)
# ---------------------------------------------------------------------------
import math  # noqa: E402

from test_check_attention import CODECS as ATT_CODECS, numpy_attn, visible  # noqa: E402

W = 32  # a sliding window of 32 keys, the current one included
report(
    "transformers#39408", "https://github.com/huggingface/transformers/issues/39408",
    "sliding window passed as (w, w) to flash-attn: w + 1 keys (causal)",
    ko.check_attention,
    numpy_attn(causal="bottom_right", window=(W - 1, 0), name="window_w_minus_1"),
    numpy_attn(causal="bottom_right", window=(W, W), name="hf_window_w_w"),
    kw=dict(causal="bottom_right", window=(W - 1, 0)),
)


def softcap_after_mask(causal, window, softcap):
    """FlashInfer's decode kernel before PR 350: the logits soft cap applied
    after masking, so a masked score (-inf) becomes -cap: masked keys keep
    a weight e^(-cap - max). Flash arithmetic (P rounded to bf16)."""
    enc, dec = ATT_CODECS["bfloat16"]

    def fn(q, k, v, out):
        Q, K, V = dec(q), dec(k), dec(v)
        B, Hq, Sq, D = Q.shape
        Hkv, Sk = K.shape[1], K.shape[2]
        h = np.arange(Hq) // (Hq // Hkv)
        Kq, Vq = K[:, h], V[:, h]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            S = np.matmul(Q, Kq.transpose(0, 1, 3, 2)) * F(1 / math.sqrt(D))
            S = np.where(visible(Sq, Sk, causal, window), S, F(-np.inf)).astype(F)
            cap = F(softcap)
            S = (np.tanh(S / cap) * cap).astype(F)
            m = S.max(-1, keepdims=True)
            P = np.exp(S - m)
            l = P.sum(-1, keepdims=True, dtype=F)
            P = dec(enc(P.astype(F)))
            O = np.matmul(P, Vq) / l
        out[...] = enc(np.asarray(O, F))
    return fn


report(
    "flashinfer#350", "https://github.com/flashinfer-ai/flashinfer/pull/350",
    "logits soft cap applied after the mask: masked keys weigh e^(-cap - m)",
    ko.check_attention,
    numpy_attn(causal="bottom_right", window=(W - 1, 0), softcap=30.0, name="softcap_then_mask"),
    named(softcap_after_mask("bottom_right", (W - 1, 0), 30.0), "flashinfer_decode_mask_then_softcap"),
    kw=dict(causal="bottom_right", window=(W - 1, 0), softcap=30.0),
)

# ---------------------------------------------------------------------------
# Gated activation (check_act_and_mul)
# ---------------------------------------------------------------------------
from test_check_act_and_mul import numpy_act  # noqa: E402


def xpu_silu_and_mul_768(x, out):
    """vllm-xpu-kernels issue 454: at output width 768 channels 257 and up
    are left unwritten (the buffer keeps what it held); other widths right."""
    full = np.empty_like(out)
    numpy_act()(x, full)
    if out.shape[1] == 768:
        out[:, :257] = full[:, :257]
    else:
        out[...] = full


report(
    "vllm-xpu-kernels#454", "https://github.com/vllm-project/vllm-xpu-kernels/issues/454",
    "silu_and_mul: channels >= 257 unwritten at width 768 only",
    ko.check_act_and_mul,
    named(numpy_act(), "silu_and_mul"),
    named(xpu_silu_and_mul_768, "xpu_silu_and_mul"),
)

# ---------------------------------------------------------------------------
# INT8 scaled mm with a per-tensor zero point (check_int8_scaled_mm)
# ---------------------------------------------------------------------------
from test_check_int8_scaled_mm import numpy_mm  # noqa: E402


def vllm_static_azp_pre_fix(q, d, w, s, bias, azp, azp_adj, out):
    """vLLM's compressed-tensors W8A8 static per-tensor asymmetric scheme
    before the fix discussed in PR 10292: azp_adj = sum_k w, not scaled by
    the zero point, handed to the per-tensor AZP epilogue (which subtracts
    it as given). A layer + kernel form: the check hands the folded
    azp_adj, the layer recomputes the unscaled one."""
    numpy_mm("weight_first")(q, d, w, s, bias, azp, w.astype(np.int64).sum(axis=1).astype(np.int32), out)


report(
    "vllm#10292", "https://github.com/vllm-project/vllm/pull/10292",
    "static per-tensor AZP: azp_adj not multiplied by the zero point (layer)",
    ko.check_int8_scaled_mm,
    named(numpy_mm("weight_first"), "cutlass_scaled_mm_azp"),
    named(vllm_static_azp_pre_fix, "vllm_static_asym_azp_adj_unscaled"),
    kw=dict(azp="tensor", scales="tensor_act"),
    note="caller-side bug: modelled as layer + kernel",
)

# ---------------------------------------------------------------------------
# KV-cache write (check_reshape_and_cache)
# ---------------------------------------------------------------------------
from test_check_kv_cache import numpy_cache  # noqa: E402


def reshape_and_cache_grid_by_key(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
    """vLLM PR 13922 (issue 13418): `reshape_and_cache` took num_tokens
    from `key.size(0)`; under V1's CUDA-graph padding `key` has more rows
    than `slot_mapping`, so the padded rows read the slot map past its end,
    modelled as slot 0 (a live slot): their keys and values land there."""
    T, n = key.shape[0], slot_mapping.shape[0]
    slots = np.concatenate([slot_mapping, np.zeros(max(0, T - n), slot_mapping.dtype)])[:T]
    numpy_cache()(key, value, key_cache, value_cache, slots, k_scale, v_scale)


report(
    "vllm#13922", "https://github.com/vllm-project/vllm/pull/13922",
    "KV-cache write: the grid sized by key, not slot_mapping (CUDA-graph padding rows written)",
    ko.check_reshape_and_cache,
    named(numpy_cache(), "reshape_and_cache_flash"),
    named(reshape_and_cache_grid_by_key, "reshape_and_cache_grid_by_key"),
)


# ---------------------------------------------------------------------------
# MLA latent cache write (check_concat_and_cache_mla)
# ---------------------------------------------------------------------------
from test_check_kv_cache import DECODE as KV_DECODE, NONSAT  # noqa: E402
from test_check_kv_cache import numpy_mla  # noqa: E402


def xpu_concat_and_cache_mla_fp8(kv_c, k_pe, kv_cache, slot_mapping, scale):
    """vllm-xpu-kernels PR 475: concat_and_cache_mla with an fp8 cache
    multiplied by the scale (for a division) and cast without clamping to
    the fp8 maximum (a non-saturating cast)."""
    dec = KV_DECODE["bfloat16"][0]
    row = np.concatenate([kv_c, k_pe], axis=1)
    with np.errstate(all="ignore"):
        codes = ko.encode_e4m3((dec(row) * F(scale[0])).astype(F), NONSAT)
    t = np.nonzero(slot_mapping >= 0)[0]
    sl, bs = slot_mapping[t], kv_cache.shape[1]
    kv_cache[sl // bs, sl % bs] = codes[t]


report(
    "vllm-xpu-kernels#475", "https://github.com/vllm-project/vllm-xpu-kernels/pull/475",
    "concat_and_cache_mla fp8: scale multiplied, no clamp to the fp8 max",
    ko.check_concat_and_cache_mla,
    named(numpy_mla("fp8_e4m3"), "concat_and_cache_mla_fp8"),
    named(xpu_concat_and_cache_mla_fp8, "xpu_concat_and_cache_mla_fp8"),
    kw=dict(kv_cache_dtype="fp8_e4m3"),
)


# ---------------------------------------------------------------------------
# Gated delta rule (check_gated_delta_rule)
# ---------------------------------------------------------------------------
from numpy_reference import gated_delta_rule  # noqa: E402


def gdn_beta_rounded(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
    """vLLM 0.24's packed GDN decode kernel (vllm-plugin-FL PR 385): sigmoid(b)
    computed in f32, rounded to the input dtype (bf16) and widened back
    before the state update. Modelled by handing the rule the logit of the
    bf16-rounded gate (its f32 sigmoid is the rounded gate within an ulp)."""
    f32 = np.float32
    with np.errstate(over="ignore", divide="ignore"):
        beta = f32(1) / (f32(1) + np.exp(-beta_raw.astype(f32)))
        b16 = ko.decode_bf16(ko.encode_bf16(beta.astype(f32))).astype(np.float64)
        raw = np.log(b16) - np.log1p(-b16)
    gated_delta_rule(q, k, v, alpha, raw.astype(f32), a_log, dt_bias, state, o, final_state)


report(
    "vllm-plugin-FL#385", "https://github.com/flagos-ai/vllm-plugin-FL/pull/385",
    "GDN decode: the beta gate rounded to bf16 before the state update",
    ko.check_gated_delta_rule,
    named(lambda *a: gated_delta_rule(*a), "gdn_rule"),
    named(gdn_beta_rounded, "vllm_packed_gdn_decode_beta_bf16"),
)

from numpy_reference import gated_delta_rule_pool  # noqa: E402


def pooled(bug, name):
    return named(lambda *a: gated_delta_rule_pool(*a, bug=bug), name)


report(
    "vllm#50021", "https://github.com/vllm-project/vllm/pull/50021",
    "GDN spec decode: the accepted-token read index bounded by the row stride (1), so every "
    "sequence with num_accepted_tokens > 1 is skipped",
    ko.check_gated_delta_rule,
    pooled(None, "gdn_rule_pool"),
    pooled("bound-by-row-stride", "vllm_gdn_spec_bound_by_stride_1"),
    kw=dict(pool="spec"),
)

report(
    "sgl-kernel-npu#640", "https://github.com/sgl-project/sgl-kernel-npu/issues/640",
    "GDN decode: the state pool read and written K-major while it is V-major (S^T, K == V == 128)",
    ko.check_gated_delta_rule,
    pooled(None, "gdn_rule_pool"),
    pooled("transposed-pool", "npu_gdn_update_transposed_pool"),
    kw=dict(pool="decode"),
)

from numpy_reference import causal_conv1d_update  # noqa: E402

report(
    "sglang#38622", "https://github.com/sgl-project/sglang/issues/38622",
    "causal_conv1d_update (Triton fallback): a conv_state longer than width - 1 read from its head, "
    "not its trailing window",
    ko.check_causal_conv1d_update,
    named(lambda *a: causal_conv1d_update(*a), "conv_update"),
    named(lambda *a: causal_conv1d_update(*a, bug="reads-state-head"), "sglang_triton_conv_update_oversized_state"),
)

# ---------------------------------------------------------------------------
# RMSNorm odd hidden sizes (check_rms_norm, float16)
# ---------------------------------------------------------------------------


def aiter_rms_norm_odd(x, weight, eps, out):
    """ROCm aiter issue 5044 (PR 5290): the HIP RMSNorm fast path takes every
    fp16 row with no alignment check; on an odd hidden size a row's last
    4-byte vector straddles into the next row, so the block writes the next
    row's column 0, normalized with its own inverse RMS (the race's loser
    modelled as row r + 1's own block). round_then_weight, f16."""
    numpy_rms("round_then_weight", dtype="float16")(x, weight, eps, out)
    rows, n = x.shape
    if n % 2 == 1 and rows > 1:
        dec, enc = ko.decode_f16, ko.encode_f16
        xv, w = dec(x), dec(weight)
        r = F(1) / np.sqrt((xv * xv).sum(axis=1, dtype=F) / F(n) + F(eps))
        # row r's block: x[r + 1, 0] * r_r, times the weight it holds for lane
        # n (past the end: modelled as weight[0])
        v = dec(enc((xv[1:, 0] * r[:-1]).astype(F))) * w[0]
        out[1:, 0] = enc(v.astype(F))


report(
    "aiter#5044", "https://github.com/ROCm/aiter/issues/5044",
    "RMSNorm odd fp16 hidden: next row's column 0 overwritten (vector straddle)",
    ko.check_rms_norm,
    numpy_rms("round_then_weight", dtype="float16", name="rms_norm_f16"),
    named(aiter_rms_norm_odd, "aiter_hip_rms_norm"),
    kw=dict(dtype="float16"),
)


# ---------------------------------------------------------------------------
# Speculative decoding's rejection sampler (check_rejection_sample)
# ---------------------------------------------------------------------------
from test_check_rejection_sample import numpy_rejection_sample  # noqa: E402

report(
    "vllm-ascend#13766", "https://github.com/vllm-project/vllm-ascend/pull/13766",
    "rejection sampler: uniform hardcoded to 0.0 (NPU lacks tl_rand64), every draft with p > 0 accepted",
    ko.check_rejection_sample,
    named(numpy_rejection_sample(), "vllm_rejection_sample"),
    named(numpy_rejection_sample(bug="u-zero-log"), "ascend_v2_rejection_u_zero"),
    note="the NPU kernel's `target_log_prob > log(u) + draft_log_prob` with u = 0: accept iff p > 0",
)


# ---------------------------------------------------------------------------
# Fourth hunt: more bug classes (a wrong fp8 bound, double rounding through
# float16, a stuck scale pointer, a K block wider than its scale group,
# truncation, a wrong argument, a layout flag ignored, a log base, an
# activation skipped, an epsilon outside the square root)
# ---------------------------------------------------------------------------

# SGLang PR 30900: `_per_token_group_quant_8bit_raw` (fp8_kernel.py) hard-
# coded the fp8 clamp/scale bound 224.0 on every ROCm device, e4m3fnuz's
# maximum, while gfx95x (MI355X) stores e4m3fn (max 448): the group scale
# came out as absmax / 224 and the codes clamped to [-224, 224] (only half
# the range used). The fix uses the device's fp8_max.
report(
    "sglang#30900", "https://github.com/sgl-project/sglang/pull/30900",
    "fp8 group quant: e4m3fnuz's 224 as the bound of an e4m3fn kernel (scale and clamp)",
    ko.check_fp8_group_quant,
    named(lambda x, q, s: group_quant(x, q, s, rule="divide"), "sgl_group_quant_fp8_max_448"),
    named(lambda x, q, s: group_quant(x, q, s, rule="divide", bug="fp8-max-224"), "sgl_rocm_group_quant_224"),
    kw=dict(rule="divide"),
)

# Triton PR 11753: on Ada (sm_89) Triton's `x.to(tl.float8e4nv,
# fp_downcast_rounding="rtne")` of a float32 went through a float16
# intermediate, each step to nearest even, so a value just past an e4m3
# midpoint is rounded onto it and then ties to even (the report's
# 1.0625001 -> 1.0 where 1.125 is nearest); the fix converts from float32
# directly. Triton PR 10846 removed the same two-step path on AMD. Modelled
# in vLLM's Triton per-token-group quantizer (`clamp(y / y_s).to(fp8)`).
report(
    "triton#11753", "https://github.com/triton-lang/triton/pull/11753",
    "fp8 cast: float32 -> float16 -> e4m3, double rounding at e4m3 midpoints",
    ko.check_fp8_group_quant,
    named(lambda x, q, s: group_quant(x, q, s, rule="divide"), "triton_group_quant_direct_cast"),
    named(lambda x, q, s: group_quant(x, q, s, rule="divide", bug="f16-intermediate"),
          "triton_group_quant_cast_via_f16"),
    kw=dict(rule="divide"),
    note="the quotient divided exactly (tl.div_rn); only the cast differs",
)

# ---------------------------------------------------------------------------
# Block-scaled FP8 GEMM (check_fp8_block_gemm)
# ---------------------------------------------------------------------------
from numpy_reference import E4M3, v2_block_gemm  # noqa: E402
from kernel_oracle import Schedule  # noqa: E402


def sgl_block_gemm_scale_step_0(w, scales, q, d, out):
    """SGLang's Triton w8a8 block-FP8 matmul before PR 20819 under a tuned
    config with BLOCK_SIZE_K = 64 < group_k = 128: `scale_step_k =
    BLOCK_SIZE_K // group_k` is 0, so the scale pointers never advance and
    every 64-k block is scaled by k-group 0's activation and weight scales;
    folded as the kernel writes it, `acc + (c * a_s) * b_s`."""
    out_f, in_f = w.shape
    nblk = -(-in_f // 128)
    wf = np.zeros((out_f, nblk * 128), np.float32)
    wf[:, :in_f] = E4M3[w]
    qf = E4M3[q[:, : nblk * 128]]
    srow = np.repeat(np.arange(scales.shape[0]), 128)[:out_f]
    acc = np.zeros((q.shape[0], out_f), np.float32)
    for h in range(2 * nblk):
        c = qf[:, h * 64:(h + 1) * 64] @ wf[:, h * 64:(h + 1) * 64].T
        acc = acc + (c * d[:, 0:1]) * scales[srow, 0][None, :]
    out[...] = acc


report(
    "sglang#20819", "https://github.com/sgl-project/sglang/pull/20819",
    "block-FP8 GEMM: BLOCK_SIZE_K < group_k gives scale_step_k = 0, k-group 0's scales for all k",
    ko.check_fp8_block_gemm,
    named(lambda w, s, q, d, out: v2_block_gemm(w, s, q, d, out, partial_first=True), "sgl_w8a8_block_fp8_bk128"),
    named(sgl_block_gemm_scale_step_0, "sgl_w8a8_block_fp8_bk64_stuck_scales"),
    kw=dict(schedule=Schedule.V2_PARTIAL_FIRST),
    note="the correct form is the default config (BLOCK_SIZE_K = group_k = 128)",
)

# ---------------------------------------------------------------------------
# Fused-MoE block-FP8 expert GEMM (check_fused_moe_fp8)
# ---------------------------------------------------------------------------
from numpy_reference import fused_moe_fp8  # noqa: E402


def moe_form(name, **kw):
    return named(lambda a, a_s, w, w_s, tw, ti, out: fused_moe_fp8(a, a_s, w, w_s, tw, ti, out, **kw), name)


# vLLM PR 14987: "fused_moe_kernel returns incorrect values if BLOCK_SIZE_K
# is larger than the fp8 scaling group size": with block_shape [128, 128]
# and a config of BLOCK_SIZE_K = 256 the kernel loads one scale per k block
# (`offs_ks = k * BLOCK_SIZE_K // group_k`), so each 256-wide dot is scaled
# by its first 128-group's a_scale and b_scale; the PR works around it by
# keeping BLOCK_SIZE_K within the group.
report(
    "vllm#14987", "https://github.com/vllm-project/vllm/pull/14987",
    "fused MoE block FP8: BLOCK_SIZE_K = 256 over 128-k groups, one scale per 256 k",
    lambda fn, **kw: ko.check_fused_moe_fp8(fn, schedule=Schedule.V2_PARTIAL_FIRST, **kw),
    moe_form("fused_moe_kernel_bk128"),
    moe_form("fused_moe_kernel_bk256", bug="block-k-256"),
)

# ---------------------------------------------------------------------------
# INT8 activation quantization (check_int8_quant)
# ---------------------------------------------------------------------------
from test_check_int8_quant import quantizer as int8_quantizer  # noqa: E402

# AITER PR 4637: AITER's shared scaled FP32 -> INT8 x2/x4 helpers (its
# dynamic per-token INT8 quant and RMSNorm INT8 output) converted by
# truncation; the PR makes them round to nearest even and then saturate
# (27 of 524,288 codes differed from torch on a bf16 128x4096 input).
report(
    "aiter#4637", "https://github.com/ROCm/aiter/pull/4637",
    "int8 quant: codes truncated toward zero, not rounded to nearest even",
    ko.check_int8_quant,
    named(int8_quantizer(), "dynamic_int8_rne"),
    named(int8_quantizer(bug="truncate"), "aiter_scaled_int8_truncating"),
)

# ---------------------------------------------------------------------------
# Penalties: a wrong argument (check_penalties)
# ---------------------------------------------------------------------------


def mlc_presence_twice(logits, prompt, output, presence, frequency, repetition, out):
    """MLC LLM before PR 1693: `ApplyPresenceAndFrequencyPenaltyOnCPU` was
    handed the presence penalty for both of its arguments, so the frequency
    penalty applied is the presence penalty's value."""
    numpy_penalties()(logits, prompt, output, presence, presence, repetition, out)


report(
    "mlc-llm#1693", "https://github.com/mlc-ai/mlc-llm/pull/1693",
    "frequency penalty: the presence penalty passed in its place",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(mlc_presence_twice, "mlc_presence_as_frequency"),
)

# ---------------------------------------------------------------------------
# RoPE: the pairing flag ignored (check_rotary_embedding)
# ---------------------------------------------------------------------------

# vLLM issue 49290 (PR 49323): `MRotaryEmbedding.forward_cuda`'s 2-D mrope
# branch calls `_triton_mrope_forward`, which hardcodes NeoX (half-split)
# pairs and never reads `is_neox_style`: a GPT-J-style model (GLM-OCR) gets
# (x[i], x[i + rot/2]) rotated where (x[2i], x[2i + 1]) are the pairs.
# Modelled on text tokens (the three position sections equal: 1-D RoPE).
report(
    "vllm#49290", "https://github.com/vllm-project/vllm/issues/49290",
    "RoPE: NeoX pairs hardcoded, is_neox_style=False ignored (GPT-J model)",
    ko.check_rotary_embedding,
    numpy_rope("f32", is_neox=False, name="rope_gptj_f32"),
    numpy_rope("f32", is_neox=True, name="triton_mrope_neox_hardcoded"),
    kw=dict(is_neox=False),
)

# ---------------------------------------------------------------------------
# Merge of attention states: base-2 LSEs merged as natural logs
# ---------------------------------------------------------------------------

# SGLang PR 35045: `FlashInferMhaChunkKVRunner.forward` fed FlashInfer's
# LSEs (base 2: log2(sum(exp2(x)))) to `sgl_kernel.merge_state_v2`, which
# weighs the states with exp(lse) (natural log); the fix converts the LSEs
# to natural log first (max error 0.105 -> 0.0005 at prefix 4096). Modelled
# as caller + kernel: the merge handed base-2 LSEs computes in base e.
report(
    "sglang#35045", "https://github.com/sgl-project/sglang/pull/35045",
    "merge of attention states: base-2 LSEs weighed as natural logs",
    ko.check_merge_attn_states,
    numpy_merge("cuda", base="2", layout="token_major", name="merge_state_v2_base2"),
    numpy_merge("cuda", base="e", layout="token_major", name="sgl_merge_state_v2_on_flashinfer_lse"),
    kw=dict(base="2", lse_layout="token_major"),
    note="caller-side bug: modelled as layer + kernel",
)

# ---------------------------------------------------------------------------
# MoE routing: no softmax without renormalize (check_moe_routing)
# ---------------------------------------------------------------------------
NORENORM = dict(renormalize=False)

# SGLang PR 35160: `fused_topk_softmax_torch_raw_logits` (the
# flashinfer_trtllm_routed MoE runner, softmax scoring, no bias) applied the
# softmax only inside the renormalize branch, so with renormalize=False
# (norm_topk_prob=False: Qwen2MoE, Qwen3 GGUF) the top-k weights were the
# raw gathered router logits; the fix gathers from the softmax over all
# experts.
report(
    "sglang#35160", "https://github.com/sgl-project/sglang/pull/35160",
    "top-k softmax routing, renormalize=False: raw logits as the weights",
    lambda fn, **kw: ko.check_moe_routing(fn, 8, **NORENORM, **kw),
    named(numpy_router(8, **NORENORM), "router_softmax_no_renorm"),
    named(numpy_router(8, **NORENORM, bug="raw-logit-weights"), "sgl_topk_raw_logits_no_renorm"),
)

# ---------------------------------------------------------------------------
# Gated delta rule: epsilon placement (check_gated_delta_rule)
# ---------------------------------------------------------------------------

# SGLang PR 10466 ("fix the l2norm accuracy issue"): SGLang's copy of fla's
# fused_recurrent_gated_delta_rule kernel normalized q and k in-kernel as
# `b_q / (tl.sqrt(tl.sum(b_q * b_q)) + 1e-6)`, eps outside the square root;
# the fix writes fla's `b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)`.
report(
    "sglang#10466", "https://github.com/sgl-project/sglang/pull/10466",
    "GDN in-kernel L2 norm: eps added outside the square root",
    ko.check_gated_delta_rule,
    named(lambda *a: gated_delta_rule(*a), "gdn_rule"),
    named(lambda *a: gated_delta_rule(*a, bug="eps-outside-sqrt"), "sgl_fused_recurrent_l2norm_eps_outside"),
)

# ---------------------------------------------------------------------------
# Attention: GQA heads tiled (check_attention)
# ---------------------------------------------------------------------------

# jax-js PR 180: its GQA attention applied the KV heads to the query heads
# by tiling (query head h reads KV head h mod Hkv) where they must repeat
# (h // (Hq / Hkv)); fixed to repeat.
report(
    "jax-js#180", "https://github.com/ekzhang/jax-js/pull/180",
    "GQA: KV heads tiled (h mod Hkv) where they repeat (h // group)",
    ko.check_attention,
    numpy_attn(name="attention_gqa_repeat"),
    numpy_attn(bug="gqa-mod", name="jaxjs_attention_gqa_tile"),
)


# vllm-xpu-kernels issue 520: the vectorized per-token-group FP8 quant's
# absmax shuffle spans a 32-lane sub-group, so a 256-element group's amax
# covers its first 128 elements only; the scale and every code of the
# group follow from it (the garbage scales the report also saw are not
# modelled).
report(
    "vllm-xpu-kernels#520", "https://github.com/vllm-project/vllm-xpu-kernels/issues/520",
    "fp8 group quant: absmax shuffle over more lanes than the 32-lane sub-group (group 256, f32)",
    ko.check_fp8_group_quant,
    named(lambda x, q, s: group_quant(x, q, s, rule="divide", group=256), "group_quant_g256"),
    named(lambda x, q, s: group_quant(x, q, s, rule="divide", group=256, bug="amax-first-128"),
          "xpu_vectorized_group_quant_g256"),
    kw=dict(rule="divide", group=256),
    note="declared group=256 (the kernel is right at 128, where the default check runs)",
)

# TensorRT-LLM PR 5623: TensorRT-LLM's penaltyKernels.cu counted the
# context (prompt) tokens into the occurrence counts its presence and
# frequency penalties use; the fix marks prompt tokens with a sentinel so
# only generated tokens are counted for them (as vLLM), the repetition
# penalty still seeing both. vmlx-swift issue 295 (PR 294) reports the same
# of its presence and frequency processors.
report(
    "TensorRT-LLM#5623", "https://github.com/NVIDIA/TensorRT-LLM/pull/5623",
    "presence and frequency penalties counting prompt tokens (output only)",
    ko.check_penalties,
    named(numpy_penalties(), "vllm_penalties"),
    named(numpy_penalties(bug="freq-presence-over-prompt"), "trtllm_penalties_context_counted"),
)


# ---------------------------------------------------------------------------
# runner
# ---------------------------------------------------------------------------
def _ids():
    return [r["key"] for r in REPORTS]


@pytest.mark.parametrize("key", _ids())
def test_public_report(key):
    rep = next(r for r in REPORTS if r["key"] == key)
    res = judge(rep)
    assert res["correct_ok"], (key, res)
    assert res["caught"], (key, res)


def main(keys):
    rows = []
    for rep in REPORTS:
        if keys and rep["key"] not in keys:
            continue
        res = judge(rep)
        verdict = ("CAUGHT " + ",".join(res["arms"])) if res["caught"] else (
            "MISSED (PASS)" if res["correct_ok"] else "INVALID: correct form failed " + ",".join(res["correct_arms"]))
        rows.append((rep["key"], verdict, res))
        print(f"{rep['key']:<24} {verdict:<40} correct {res['correct_cases'] - res['correct_failed']}/"
              f"{res['correct_cases']} pass; buggy {res['buggy_failed']}/{res['buggy_cases']} fail "
              f"({res['secs']:.1f}s)", flush=True)
        if res["first"]:
            print("    " + " | ".join(res["first"][:2]), flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
