"""The INT8 GEMMs with row scales the field runs (W8A8 int8), through
kernel_oracle.check_int8_scaled_mm: is each sum exact, and which epilogue
(scale association, bias form) does each compute?

An int8 tensor-core MMA sums the products exactly in an int32 accumulator,
so every order gives the same bits; what differs is the epilogue: the
conversion of the int32 sum to float32 (rounded above 2^24), the order of
the two scales (`(acc*d)*s`, Triton's `acc * scale_a * scale_b`;
`(acc*s)*d`, CUTLASS's `ScaleA * (ScaleB * Accum)`; `acc*(d*s)`), and how
a bias enters (added after the rounded product; fused into one FMA with
the last multiply; added in the output dtype after the rounding). The
check names every known epilogue the output matches bit for bit; its BIG
arm (`|acc| > 2^24`) fails a kernel that sums the products in float, and
its ROUND arm fails a conversion toward zero, an output rounded with ties
away from zero, another association or an epilogue in float64, in any
output dtype (and names the association even in bfloat16).

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. `torch._int_mm` (int32 out) with the epilogue in torch, in each
   association (float32 out, declared as written); with a bias added
   before the cast ("add") and after it ("add_out", bfloat16 out); with
   per-token zero points subtracted in int32;
2. a Triton kernel written here: `tl.dot(a, b, acc, out_dtype=tl.int32)`
   over int8 tiles, then `acc.to(tl.float32) * d[:, None] * s[None, :]`
   (+ bias, which Triton fuses into an FMA: declared "fused"); and the same
   kernel with the codes cast to float16 before a float32-accumulating
   `tl.dot`, expected to FAIL the BIG arm (the finding says where);
3. vLLM's `cutlass_scaled_mm` and `cutlass_scaled_mm_azp` (declared
   weight_first, bias "fused"; bfloat16 out only) and `triton_scaled_mm`
   (declared activation_first, bias "add_out"), when vLLM imports.

A declared verdict is printed with PASS or FAIL; what matches is the
finding. Exit status 1 only when a section fails to run, or when a torch
form (whose arithmetic its source fixes) or the int32 Triton kernel fails.

Run on a GPU with torch (and triton, vllm as installed):
    python3 python/examples/int8_scaled_mm.py
"""

import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton

SHAPES = list(ko.INT8_SCALED_MM_SHAPES)
ORDERS = ["activation_first", "weight_first", "scales_first"]


def tdtype(name):
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def to_dev(x):
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def write_out(y, out):
    """A torch output into the check's buffer (uint16 bits for 16-bit floats)."""
    torch.cuda.synchronize()
    y = y.contiguous()
    if out.dtype == np.float32:
        out[...] = y.float().cpu().numpy()
    else:
        out[...] = y.view(torch.int16).cpu().numpy().view(np.uint16)


def identified(report):
    """The epilogues named on every compared row of a report."""
    sets = []
    for line in report.text.splitlines():
        for v in (" PASS ", " FAIL "):
            if v in line and not line.startswith("FAIL"):
                sets.append({m.strip() for m in line.split(v, 1)[1].split(";")})
                break
    return set.intersection(*sets) if sets else set()


def torch_int_mm(order, bias_form, out_dtype):
    """torch._int_mm, then the epilogue as separate torch operations."""
    tdt = tdtype(out_dtype)

    def mm(q, d, w, s, bias, azp, azp_adj, out):
        m, k = q.shape
        n = w.shape[0]
        if m <= 16 or k % 8 or n % 8:
            raise ko.Refused("torch._int_mm wants m > 16 and in_f, out_f multiples of 8")
        acc = torch._int_mm(to_dev(q), to_dev(w).t())
        if azp_adj is not None:
            adj = to_dev(azp_adj)[None, :]
            acc = acc - (adj if azp is None else to_dev(azp)[:, None] * adj)
        f = acc.float()
        dt, st = to_dev(d)[:, None], to_dev(s)[None, :]
        if order == "activation_first":
            y = (f * dt) * st
        elif order == "weight_first":
            y = (f * st) * dt
        else:
            y = f * (dt * st)
        if bias is None:
            y = y.to(tdt)
        elif bias_form == "add":
            y = (y + to_dev(bias)[None, :]).to(tdt)
        else:
            y = y.to(tdt) + to_dev(bias).to(tdt)[None, :]
        write_out(y, out)

    mm.__name__ = f"torch_int_mm_{order}_{bias_form or 'nobias'}_{out_dtype}"
    return mm


if triton is not None:
    @triton.jit
    def int8_mm_kernel(q_ptr, w_ptr, d_ptr, s_ptr, b_ptr, y_ptr, M, N, K, d_stride, s_stride,
                       HAS_BIAS: tl.constexpr, AS_F16: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        if AS_F16:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + rk
            a = tl.load(q_ptr + rm[:, None] * K + k[None, :],
                        mask=(rm[:, None] < M) & (k[None, :] < K), other=0)
            b = tl.load(w_ptr + rn[None, :] * K + k[:, None],
                        mask=(rn[None, :] < N) & (k[:, None] < K), other=0)
            if AS_F16:
                acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
            else:
                acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        d = tl.load(d_ptr + rm * d_stride, mask=rm < M, other=0.0)
        s = tl.load(s_ptr + rn * s_stride, mask=rn < N, other=0.0)
        y = acc.to(tl.float32) * d[:, None] * s[None, :]
        if HAS_BIAS:
            y = y + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def triton_mm(out_dtype, as_f16=False):
    def mm(q, d, w, s, bias, azp, azp_adj, out):
        if azp_adj is not None:
            raise ko.Refused("this Triton kernel takes no zero points")
        m, k = q.shape
        n = w.shape[0]
        dt, st = to_dev(d), to_dev(s)
        bt = to_dev(bias) if bias is not None else st
        yt = torch.empty((m, n), dtype=tdtype(out_dtype), device="cuda")
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 64))
        int8_mm_kernel[grid](to_dev(q), to_dev(w), dt, st, bt, yt, m, n, k,
                             0 if d.shape[0] == 1 else 1, 0 if s.shape[0] == 1 else 1,
                             HAS_BIAS=bias is not None, AS_F16=as_f16,
                             BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4)
        write_out(yt, out)

    mm.__name__ = f"triton_int8_{'f16_cast' if as_f16 else 'int32_dot'}_{out_dtype}"
    return mm


def vllm_cutlass(ops, out_dtype):
    tdt = tdtype(out_dtype)

    def mm(q, d, w, s, bias, azp, azp_adj, out):
        if out_dtype == "float32":
            raise ko.Refused("vLLM's cutlass_scaled_mm writes bfloat16 or float16 only")
        if q.shape[1] % 16 or w.shape[0] % 16:
            raise ko.Refused("vLLM's CUTLASS int8 GEMM wants in_f and out_f multiples of 16")
        qt, wt = to_dev(q), to_dev(w).t()  # b [in_f, out_f], column-major
        sa, sb = to_dev(d).reshape(-1, 1), to_dev(s).reshape(-1, 1)
        bt = to_dev(bias).to(tdt) if bias is not None else None
        if azp_adj is None:
            y = ops.cutlass_scaled_mm(qt, wt, sa, sb, tdt, bt)
        else:
            y = ops.cutlass_scaled_mm_azp(qt, wt, sa, sb, tdt, to_dev(azp_adj),
                                          to_dev(azp) if azp is not None else None, bt)
        write_out(y, out)

    mm.__name__ = f"vllm_cutlass_scaled_mm_{out_dtype}"
    return mm


def vllm_triton(fn, out_dtype):
    tdt = tdtype(out_dtype)

    def mm(q, d, w, s, bias, azp, azp_adj, out):
        y = fn(to_dev(q), to_dev(w).t(), to_dev(d).reshape(-1, 1), to_dev(s).reshape(-1, 1), tdt,
               to_dev(bias).to(tdt) if bias is not None else None)
        write_out(y, out)

    mm.__name__ = f"vllm_triton_scaled_mm_{out_dtype}"
    return mm


def main():
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    bad = 0
    findings = []

    def run(fn, out_dtype="bfloat16", **declared):
        r = ko.check_int8_scaled_mm(fn, out_dtype=out_dtype, shapes=SHAPES, verbose=True, **declared)
        found = identified(r)
        findings.append((fn.__name__, r.ok, found))
        print(f"FINDING {fn.__name__}: declared {declared}: {'PASS' if r.ok else 'FAIL'}; "
              f"matches: {'; '.join(sorted(found)) or 'no known epilogue'}", flush=True)
        return r

    def expect(title, fn, **kw):
        r = section(title, 300, lambda: run(fn, **kw))
        if r is None or not r.ok:
            print(f"UNEXPECTED: {fn.__name__} is not its declared epilogue")
            return 1
        return 0

    for order in ORDERS:
        bad += expect(f"torch._int_mm, {order}, float32", torch_int_mm(order, None, "float32"),
                      out_dtype="float32", epilogue=order)
    bad += expect("torch._int_mm, activation_first, + bias before the cast, bfloat16",
                  torch_int_mm("activation_first", "add", "bfloat16"),
                  epilogue="activation_first", bias="add")
    bad += expect("torch._int_mm, activation_first, + bias after the cast, bfloat16",
                  torch_int_mm("activation_first", "add_out", "bfloat16"),
                  epilogue="activation_first", bias="add_out")
    for azp in ("token", "tensor"):
        bad += expect(f"torch._int_mm, zero points per {azp}, bfloat16",
                      torch_int_mm("activation_first", None, "bfloat16"),
                      epilogue="activation_first", azp=azp)
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        bad += expect("Triton int8 tl.dot (int32), float32", triton_mm("float32"),
                      out_dtype="float32", epilogue="activation_first")
        bad += expect("Triton int8 tl.dot (int32), fused bias, bfloat16", triton_mm("bfloat16"),
                      epilogue="activation_first", bias="fused")
        r = section("Triton, codes cast to float16, float32 tl.dot (expected to FAIL on BIG)", 300,
                    lambda: run(triton_mm("bfloat16", as_f16=True), epilogue="activation_first"))
        bad += r is None
    try:
        from vllm import _custom_ops as ops
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM cutlass_scaled_mm: not importable ({type(e).__name__}), skipped")
    else:
        for bias in (None, "fused"):
            bad += section(f"vLLM cutlass_scaled_mm, bias {bias}, bfloat16", 300, lambda b=bias: run(
                vllm_cutlass(ops, "bfloat16"), epilogue="weight_first", bias=b)) is None
        for azp in ("tensor", "token"):
            bad += section(f"vLLM cutlass_scaled_mm_azp per {azp}, fused bias, bfloat16", 300,
                           lambda a=azp: run(vllm_cutlass(ops, "bfloat16"), epilogue="weight_first",
                                             bias="fused", azp=a)) is None
    try:
        from vllm.model_executor.layers.quantization.compressed_tensors.triton_scaled_mm import (
            triton_scaled_mm,
        )
    except Exception as e:
        print(f"\n=== vLLM triton_scaled_mm: not importable ({type(e).__name__}), skipped")
    else:
        for bias in (None, "add_out"):
            bad += section(f"vLLM triton_scaled_mm, bias {bias}, bfloat16", 300, lambda b=bias: run(
                vllm_triton(triton_scaled_mm, "bfloat16"), epilogue="activation_first",
                bias=b)) is None
    print("\nSUMMARY (declared verdict; the epilogues matched on every compared case)")
    for name, ok, found in findings:
        print(f"  {name}: {'PASS' if ok else 'FAIL'}; {'; '.join(sorted(found)) or 'no known epilogue'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
