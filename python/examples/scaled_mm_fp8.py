"""The FP8 GEMMs with row scales the field runs, through
kernel_oracle.check_fp8_scaled_mm: how does each accumulate over k?

A tensor core's FP8 accumulator keeps about 14 bits (kernel_oracle's
sm_90 MMA model). Kernels differ in whether, and how often, they move it
into an f32 sum: torch's `_scaled_mm` (with and without `use_fast_accum`;
rowwise scales run cuBLASLt with CUDA 12.9 or later, else the CUTLASS kernel
`f8f8bf16_rowwise`, whose epilogue is `(acc*d)*s` and which writes bfloat16
only: a float32 output it refuses is counted refused), and Triton's FP8
`tl.dot` (its `max_num_imprecise_acc`: per `tl.dot`, a partial accumulator
added every that many k; unset on sm_90, never).
The check computes every known schedule (the wgmma chain over all of k, or
promoted every 32 .. 8192 k, or binary32 in k order; each with three
epilogue associations) and names those the kernel's output matches bit for
bit. The RAND and SPIKE arms separate every accumulation from every other.

Sections, each under its own time limit:
1. a Triton kernel, `acc = tl.dot(a, b, acc)` over BLOCK_K = 128 tiles,
   then `acc * d[:, None] * s[None, :]` (vLLM's `triton_scaled_mm` form),
   with `max_num_imprecise_acc` left to Triton, and set to 32 and to 128;
2. torch `_scaled_mm` rowwise (`scale_a [m, 1]`, `scale_b [1, n]`),
   `use_fast_accum` False and True, bfloat16 and float32 outputs.

A declared schedule is printed with PASS or FAIL; what matches is the
finding. Exit status 1 only when a section fails to run, or when the
Triton kernel with `max_num_imprecise_acc=128` does not match the wgmma
chain promoted every 128 k with the activation-first epilogue (what
Triton documents that setting to do).

Run on an sm_90 GPU with torch and triton:
    python3 python/examples/scaled_mm_fp8.py
"""

import sys

import numpy as np
import torch
import triton
import triton.language as tl

import kernel_oracle as ko
from sections import section

SHAPES = [(1, 7168, 256), (16, 4096, 256), (64, 4096, 128)]


@triton.jit
def scaled_mm_kernel(q_ptr, w_ptr, d_ptr, s_ptr, y_ptr, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     IMPRECISE: tl.constexpr, OUT_BF16: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        a = tl.load(q_ptr + rm[:, None] * K + k[None, :], mask=(rm[:, None] < M) & (k[None, :] < K), other=0)
        b = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0)
        a8 = a.to(tl.float8e4nv, bitcast=True)
        b8 = b.to(tl.float8e4nv, bitcast=True)
        if IMPRECISE > 0:
            acc = tl.dot(a8, b8, acc, max_num_imprecise_acc=IMPRECISE)
        else:
            acc = tl.dot(a8, b8, acc)
    d = tl.load(d_ptr + rm, mask=rm < M, other=0.0)
    s = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    y = acc * d[:, None] * s[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if OUT_BF16:
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(tl.bfloat16), mask=mask)
    else:
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)


def triton_gemm(imprecise, out_bf16):
    def gemm(q, d, w, s, out):
        m, k = q.shape
        n = w.shape[0]
        dev = "cuda"
        qt, wt = torch.from_numpy(q).to(dev), torch.from_numpy(w).to(dev)
        dt, st = torch.from_numpy(d).to(dev), torch.from_numpy(s).to(dev)
        if out_bf16:
            yt = torch.from_numpy(out.view(np.int16)).to(dev).view(torch.bfloat16)
        else:
            yt = torch.from_numpy(out).to(dev)
        grid = (triton.cdiv(m, 64), triton.cdiv(n, 128))
        scaled_mm_kernel[grid](qt, wt, dt, st, yt, m, n, k, BLOCK_M=64, BLOCK_N=128, BLOCK_K=128,
                               IMPRECISE=imprecise, OUT_BF16=out_bf16, num_warps=4)
        torch.cuda.synchronize()
        if out_bf16:
            out[...] = yt.view(torch.int16).cpu().numpy().view(np.uint16)
        else:
            out[...] = yt.cpu().numpy()

    gemm.__name__ = f"triton_scaled_mm_imprecise_{imprecise or 'default'}_{'bf16' if out_bf16 else 'f32'}"
    return gemm


def torch_scaled_mm(fast_accum, out_dtype):
    def gemm(q, d, w, s, out):
        if q.shape[1] % 16 or w.shape[0] % 16:
            raise ko.Refused("torch._scaled_mm wants in_f and out_f multiples of 16")
        dev = "cuda"
        qt = torch.from_numpy(q).to(dev).view(torch.float8_e4m3fn)
        wt = torch.from_numpy(w).to(dev).view(torch.float8_e4m3fn)
        dt = torch.from_numpy(d).to(dev)[:, None].contiguous()
        st = torch.from_numpy(s).to(dev)[None, :].contiguous()
        try:
            y = torch._scaled_mm(qt, wt.t(), scale_a=dt, scale_b=st, out_dtype=out_dtype,
                                 use_fast_accum=fast_accum)
        except RuntimeError as e:
            if "Only bf16" in str(e):
                raise ko.Refused(str(e).splitlines()[0]) from e
            raise
        torch.cuda.synchronize()
        if out_dtype == torch.bfloat16:
            out[...] = y.view(torch.int16).cpu().numpy().view(np.uint16)
        else:
            out[...] = y.cpu().numpy()

    gemm.__name__ = f"torch_scaled_mm_rowwise_fast_accum_{fast_accum}_{str(out_dtype).split('.')[-1]}"
    return gemm


def identified(report):
    """The schedules named on every RAND and SPIKE row of a report."""
    sets = []
    for line in report.text.splitlines():
        if (" RAND " in line or " SPIKE " in line) and (" PASS " in line or " FAIL " in line):
            tail = line.split(" PASS ", 1)[-1] if " PASS " in line else line.split(" FAIL ", 1)[-1]
            sets.append({m.strip() for m in tail.split(";")})
    return set.intersection(*sets) if sets else set()


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    bad = 0
    findings = []

    def run(gemm, out_dtype, **declared):
        r = ko.check_fp8_scaled_mm(gemm, out_dtype=out_dtype, shapes=SHAPES, verbose=True, **declared)
        found = identified(r)
        findings.append((gemm.__name__, sorted(found)))
        print(f"FINDING {gemm.__name__}: {'; '.join(sorted(found)) or 'no known schedule'}", flush=True)
        return r

    for imprecise in (0, 32, 128):
        def tri(imprecise=imprecise):
            return run(triton_gemm(imprecise, False), "float32", promote=128)
        r = section(f"Triton tl.dot chain, max_num_imprecise_acc={imprecise or 'default'}, float32", 240, tri)
        if r is None:
            bad += 1
        elif imprecise == 128 and not r.ok:
            print("UNEXPECTED: max_num_imprecise_acc=128 is not the wgmma chain promoted every 128 k, (acc*d)*s")
            bad += 1
    section("Triton, default max_num_imprecise_acc, bfloat16", 240,
            lambda: run(triton_gemm(0, True), "bfloat16", promote=None))
    for fast in (False, True):
        for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
            r = section(f"torch._scaled_mm rowwise, use_fast_accum={fast}, {name}", 240,
                        lambda fast=fast, dtype=dtype, name=name: run(
                            torch_scaled_mm(fast, dtype), name, promote=None if fast else 128,
                            epilogue="activation_first"))
            if r is None:
                bad += 1
    print("\nSUMMARY")
    for name, found in findings:
        print(f"  {name}: {'; '.join(found) or 'no known schedule'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
