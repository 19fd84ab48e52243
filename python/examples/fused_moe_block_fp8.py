"""Fused-MoE block-FP8 expert GEMMs through kernel_oracle.check_fused_moe_fp8:
each (token, slot) pair's output judged bit for bit under the schedule the
implementation declares.

The contract (the module doc of `check_fused_moe_fp8`): for pair (t, j)
with expert e = topk_ids[t, j],
    out[t, j, :] = cast(fold over 128-k blocks b of (c_b, a_scale[t, b],
                   w_scale[e, n/128, b]) * topk_weights[t, j])
with c_b the block's e4m3 dot product, the routed-weight multiply after
the last fold, the cast rounding to nearest even, and +0.0 for expert -1
(an expert on another rank: vLLM's `write_zeros_to_output`).

Sections, each under its own time limit:

1. `torch_form`: pure torch, one expert group at a time, the block's c as
   an f32 matmul (TF32 off), the fold `acc + (c * d) * s` in eager ops
   (each rounded on its own: no FMA), declared
   `Schedule.V2_PARTIAL_FIRST`; expected PASS (RAND judged by the bound,
   since cuBLAS's f32 order is its own). Declared
   `SM90_WGMMA_PARTIAL_FIRST_FUSED` it is expected to FAIL (the RAND arm:
   f32 matmul is not the FP8 MMA, and eager torch does not fuse).
2. `triton_field_form`: a Triton kernel in the form of vLLM's
   `fused_moe_kernel` (written for this example): a torch alignment
   (`moe_align_block_size`'s table, expert -1 sent to an extra expert id
   whose blocks are marked -1, as DeepEP's prepare step and `expert_map`
   do), token_mask over the pads, zeros for a -1 block, masked k-tail
   loads, `accumulator += tl.dot(a, b) * a_scale[:, None] * b_scale[None,
   :]`, the routed-weight multiply, `.to(compute_type)`; BLOCK_SIZE_M 64,
   BLOCK_SIZE_N 128, BLOCK_SIZE_K 128 (vLLM's default block-FP8 config).
   Declared `Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED`; expected PASS with
   bfloat16 out and with float32 out (which shows every bit).
3. vLLM's own `invoke_fused_moe_kernel` with its `moe_align_block_size`
   (global ids with -1 sent to an extra expert that `expert_map` marks -1),
   the same config, declared `SM90_WGMMA_PARTIAL_FIRST_FUSED`; expected
   PASS. Skipped with a line when vLLM is not installed or its signature
   is not one this example knows.

Exit status 1 on any unexpected result (a FAIL where PASS is expected, a
PASS where FAIL is expected, a timeout or an error). Run on an sm_90 GPU
with torch and triton (vLLM optional):
    python3 python/examples/fused_moe_block_fp8.py
"""

import contextlib
import inspect
import signal
import sys
import traceback

import numpy as np
import torch
import triton
import triton.language as tl

import kernel_oracle as ko

DEV = "cuda"
BLOCK_M, BLOCK_N, BLOCK_K = 64, 128, 128
SECTION_SECONDS = 540

TORCH_DTYPE = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
TL_DTYPE = {"bfloat16": tl.bfloat16, "float16": tl.float16, "float32": tl.float32}


class SectionTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    def on_alarm(signum, frame):
        raise SectionTimeout(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def to_device(a, a_scale, w, w_scale, topk_weights, topk_ids):
    """The check's numpy arrays as torch tensors on the GPU (e4m3 codes as
    float8_e4m3fn)."""
    f8 = torch.float8_e4m3fn
    return (
        torch.from_numpy(a).to(DEV).view(f8),
        torch.from_numpy(a_scale).to(DEV),
        torch.from_numpy(w).to(DEV).view(f8),
        torch.from_numpy(w_scale).to(DEV),
        torch.from_numpy(topk_weights).to(DEV),
        torch.from_numpy(topk_ids).to(DEV),
    )


def prologue(a, a_scale, w, w_scale, topk_weights, topk_ids, out):
    """The device tensors (to_device's), (m, k, n, experts, topk), the
    out dtype's name, and a NaN-filled device output [m, topk, n] of that
    dtype (a pair the kernel never writes stays NaN)."""
    m, k = a.shape
    ne, n, _ = w.shape
    topk = topk_ids.shape[1]
    dt = out_dtype_of(out)
    c = torch.full((m, topk, n), float("nan"), dtype=TORCH_DTYPE[dt], device=DEV)
    return to_device(a, a_scale, w, w_scale, topk_weights, topk_ids), (m, k, n, ne, topk), dt, c


def copy_out(out, c):
    """The device result `c` [M, topk, N] into the check's buffer (float32,
    or uint16 bit patterns of a 16-bit type)."""
    if out.dtype == np.uint16:
        out[...] = c.view(torch.int16).cpu().numpy().view(np.uint16)
    else:
        out[...] = c.float().cpu().numpy()


def out_dtype_of(out):
    return "float32" if out.dtype == np.float32 else OUT16[0]


# The 16-bit type a uint16 `out` stands for (the check's out_dtype, set
# by the section that runs it).
OUT16 = ["bfloat16"]


# ---------------------------------------------------------------- 1. torch


def torch_form(a, a_scale, w, w_scale, topk_weights, topk_ids, out, mul_routed_weight=True):
    (at, ast, wt, wst, twt, idt), (m, k, n, ne, topk), dt, _ = prologue(
        a, a_scale, w, w_scale, topk_weights, topk_ids, out)
    nb = -(-k // 128)
    af = torch.zeros((m, nb * 128), dtype=torch.float32, device=DEV)
    af[:, :k] = at.float()
    c_all = torch.zeros((m * topk, n), dtype=torch.float32, device=DEV)
    flat = idt.reshape(-1).long()
    srow = torch.arange(n, device=DEV) // 128
    for e in range(ne):
        pairs = torch.nonzero(flat == e).flatten()
        if pairs.numel() == 0:
            continue
        tok = pairs // topk
        wf = torch.zeros((n, nb * 128), dtype=torch.float32, device=DEV)
        wf[:, :k] = wt[e].float()
        acc = torch.zeros((pairs.numel(), n), dtype=torch.float32, device=DEV)
        for b in range(nb):
            c = af[tok, b * 128:(b + 1) * 128] @ wf[:, b * 128:(b + 1) * 128].T
            acc = acc + (c * ast[tok, b][:, None]) * wst[e, srow, b][None, :]
        if mul_routed_weight:
            acc = acc * twt.reshape(-1)[pairs][:, None]
        c_all[pairs] = acc
    res = c_all.reshape(m, topk, n).to(TORCH_DTYPE[dt])
    copy_out(out, res)


# ----------------------------------------------------- 2. Triton, vLLM form


def align(topk_ids_t, num_experts, block_m):
    """moe_align_block_size's table in torch (stable order): ids -1 go to an
    extra expert `num_experts` whose blocks get expert id -1, as vLLM's
    DeepEP prepare step and `expert_map` arrange it. Returns (sorted_ids,
    expert_ids, num_tokens_post_padded)."""
    flat = topk_ids_t.reshape(-1).long()
    numel = flat.numel()
    key = torch.where(flat < 0, torch.full_like(flat, num_experts), flat)
    counts = torch.bincount(key, minlength=num_experts + 1)
    padded = (counts + block_m - 1) // block_m * block_m
    start = torch.cumsum(padded, 0) - padded
    raw = torch.cumsum(counts, 0) - counts
    total = int(padded.sum())
    order = torch.sort(key, stable=True).indices
    sk = key[order]
    rank = torch.arange(numel, device=flat.device) - raw[sk]
    sorted_ids = torch.full((max(total, block_m),), numel, dtype=torch.int32, device=flat.device)
    sorted_ids[start[sk] + rank] = order.int()
    owners = torch.repeat_interleave(torch.arange(num_experts + 1, device=flat.device),
                                     padded // block_m)
    expert_ids = torch.where(owners == num_experts, -1, owners).int()
    ntp = torch.tensor([total], dtype=torch.int32, device=flat.device)
    return sorted_ids, expert_ids, ntp


@triton.jit
def moe_fp8_block_kernel(a_ptr, w_ptr, c_ptr, as_ptr, ws_ptr, tw_ptr, sorted_ptr, experts_ptr, ntp_ptr,
                         N, K, EM, num_valid, top_k, kb, nb,
                         BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                         BLOCK_SIZE_K: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
                         compute_type: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_SIZE_M >= tl.load(ntp_ptr):
        return
    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    pair = tl.load(sorted_ptr + rows).to(tl.int64)
    live = pair < num_valid
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    store_mask = live[:, None] & (cols[None, :] < N)
    c_ptrs = c_ptr + pair[:, None] * N + cols[None, :]
    expert = tl.load(experts_ptr + pid_m).to(tl.int64)
    if expert == -1:
        tl.store(c_ptrs, tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=compute_type), mask=store_mask)
        return
    token = pair // top_k
    wcols = cols % N
    kk = tl.arange(0, BLOCK_SIZE_K)
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for b in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        kmask = kk < K - b * BLOCK_SIZE_K
        a = tl.load(a_ptr + token[:, None] * K + (b * BLOCK_SIZE_K + kk)[None, :],
                    mask=live[:, None] & kmask[None, :], other=0.0)
        w = tl.load(w_ptr + expert * N * K + wcols[None, :] * K + (b * BLOCK_SIZE_K + kk)[:, None],
                    mask=kmask[:, None], other=0.0)
        a_s = tl.load(as_ptr + token * kb + b, mask=live, other=0.0)
        w_s = tl.load(ws_ptr + expert * nb * kb + (wcols // 128) * kb + b)
        acc += tl.dot(a, w) * a_s[:, None] * w_s[None, :]
    if MUL_ROUTED_WEIGHT:
        tw = tl.load(tw_ptr + pair, mask=live, other=0)
        acc = acc * tw[:, None]
    tl.store(c_ptrs, acc.to(compute_type), mask=store_mask)


def triton_field_form(a, a_scale, w, w_scale, topk_weights, topk_ids, out, mul_routed_weight=True):
    (at, ast, wt, wst, twt, idt), (m, k, n, ne, topk), dt, c = prologue(
        a, a_scale, w, w_scale, topk_weights, topk_ids, out)
    sorted_ids, expert_ids, ntp = align(idt, ne, BLOCK_M)
    grid = (triton.cdiv(sorted_ids.numel(), BLOCK_M), triton.cdiv(n, BLOCK_N))
    moe_fp8_block_kernel[grid](at, wt, c, ast, wst, twt, sorted_ids, expert_ids, ntp,
                               n, k, sorted_ids.numel(), m * topk, topk, a_scale.shape[1],
                               w_scale.shape[1], BLOCK_SIZE_M=BLOCK_M, BLOCK_SIZE_N=BLOCK_N,
                               BLOCK_SIZE_K=BLOCK_K, MUL_ROUTED_WEIGHT=mul_routed_weight,
                               compute_type=TL_DTYPE[dt], num_warps=4, num_stages=3)
    torch.cuda.synchronize()
    copy_out(out, c)


# ------------------------------------------------------------ 3. vLLM's own


def vllm_form():
    """vLLM's invoke_fused_moe_kernel as a check callable, or (None, why)."""
    try:
        from vllm.model_executor.layers.fused_moe.fused_moe import invoke_fused_moe_kernel
        from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size
    except Exception as e:  # ImportError, or a vLLM that fails to import here
        return None, f"vllm not importable ({type(e).__name__}: {e})"
    if "expert_map" not in inspect.signature(moe_align_block_size).parameters:
        return None, "moe_align_block_size takes no expert_map in this vLLM (expert -1 has no route)"
    params = inspect.signature(invoke_fused_moe_kernel).parameters
    known = {"A", "B", "C", "A_scale", "B_scale", "B_zp", "topk_weights", "sorted_token_ids",
             "expert_ids", "num_tokens_post_padded", "mul_routed_weight", "top_k", "config",
             "compute_type", "use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16",
             "per_channel_quant", "block_shape", "B_bias"}
    required = [p for p, v in params.items() if v.default is inspect.Parameter.empty]
    unknown = [p for p in required if p not in known]
    if unknown:
        return None, f"invoke_fused_moe_kernel needs {unknown}, which this example does not know"

    def vllm_invoke(a, a_scale, w, w_scale, topk_weights, topk_ids, out, mul_routed_weight=True):
        (at, ast, wt, wst, twt, idt), (m, k, n, ne, topk), dt, c = prologue(
            a, a_scale, w, w_scale, topk_weights, topk_ids, out)
        # Global ids: -1 goes to an extra expert ne that the map marks -1.
        gids = torch.where(idt < 0, torch.full_like(idt, ne), idt)
        expert_map = torch.cat([torch.arange(ne, device=DEV, dtype=torch.int32),
                                torch.tensor([-1], device=DEV, dtype=torch.int32)])
        sorted_ids, expert_ids, ntp = moe_align_block_size(gids, BLOCK_M, ne + 1, expert_map)
        config = {"BLOCK_SIZE_M": BLOCK_M, "BLOCK_SIZE_N": BLOCK_N, "BLOCK_SIZE_K": BLOCK_K,
                  "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}
        args = dict(A=at, B=wt, C=c, A_scale=ast, B_scale=wst, B_zp=None, topk_weights=twt,
                    sorted_token_ids=sorted_ids, expert_ids=expert_ids, num_tokens_post_padded=ntp,
                    mul_routed_weight=mul_routed_weight, top_k=topk, config=config,
                    compute_type=TL_DTYPE[dt], use_fp8_w8a8=True, use_int8_w8a8=False,
                    use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                    block_shape=[128, 128], B_bias=None)
        invoke_fused_moe_kernel(**{p: v for p, v in args.items() if p in params})
        torch.cuda.synchronize()
        copy_out(out, c)

    return vllm_invoke, None


# ------------------------------------------------------------------- main


def section(title, expect_pass, run):
    """Runs one check under the time limit; returns True when its result
    is the expected one."""
    print(f"\n== {title} (expected {'PASS' if expect_pass else 'FAIL'}) ==", flush=True)
    try:
        with time_limit(SECTION_SECONDS):
            r = run()
    except SectionTimeout as e:
        print(f"{title}: TIMEOUT ({e}) -- unexpected")
        return False
    except Exception:
        traceback.print_exc()
        print(f"{title}: ERROR -- unexpected")
        return False
    ok = bool(r) == expect_pass
    print(f"{title}: {'PASS' if r else 'FAIL'}"
          f" ({'as expected' if ok else 'UNEXPECTED'}); identified on every case: "
          f"{', '.join(map(str, r.identified)) or 'none'}", flush=True)
    return ok


def main():
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    torch.backends.cuda.matmul.allow_tf32 = False
    field = ko.Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED
    good = []
    good.append(section("torch form, declared V2_PARTIAL_FIRST", True, lambda: ko.check_fused_moe_fp8(
        torch_form, schedule=ko.Schedule.V2_PARTIAL_FIRST)))
    good.append(section("torch form, declared SM90_WGMMA_PARTIAL_FIRST_FUSED", False,
                        lambda: ko.check_fused_moe_fp8(torch_form, schedule=field, verbose=False)))
    good.append(section("Triton field form, bfloat16 out", True, lambda: ko.check_fused_moe_fp8(
        triton_field_form, schedule=field)))
    good.append(section("Triton field form, float32 out, no routed weight", True,
                        lambda: ko.check_fused_moe_fp8(
                            lambda *x: triton_field_form(*x, mul_routed_weight=False), schedule=field,
                            mul_routed_weight=False, out_dtype="float32", name="triton_field_form")))

    def f16():
        OUT16[0] = "float16"
        try:
            return ko.check_fused_moe_fp8(triton_field_form, schedule=field, out_dtype="float16",
                                          verbose=False)
        finally:
            OUT16[0] = "bfloat16"

    good.append(section("Triton field form, float16 out", True, f16))
    vllm_invoke, why = vllm_form()
    if vllm_invoke is None:
        print(f"\n== vLLM invoke_fused_moe_kernel: SKIPPED: {why} ==")
    else:
        good.append(section("vLLM invoke_fused_moe_kernel, bfloat16 out", True,
                            lambda: ko.check_fused_moe_fp8(vllm_invoke, schedule=field,
                                                           name="vllm_invoke")))
        good.append(section("vLLM invoke_fused_moe_kernel, float32 out", True,
                            lambda: ko.check_fused_moe_fp8(vllm_invoke, schedule=field,
                                                           out_dtype="float32", verbose=False,
                                                           name="vllm_invoke")))
    bad = good.count(False)
    print(f"\n{len(good)} sections, {bad} unexpected: {'FAIL' if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
