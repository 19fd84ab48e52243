"""The rotary embeddings the field runs, through
kernel_oracle.check_rotary_embedding: which arithmetic does each compute?

The rotation is `x c - y s`, `y c + x s` per pair (NeoX or GPT-J pairs).
Implementations differ in how they evaluate it: in the model's dtype, each
product and sum rounded to bf16 ("per_op": torch eager on bf16 tensors,
older vLLM's CUDA op with c10's BFloat16 operators), in f32 rounded once at the
end ("f32"), or in f32 with one product fused into an FMA ("f32_fma",
LLVM's contraction of `a*b - c*d` to `fma(a, b, -(c*d))`; "f32_fma_second",
the other product; "f32_fma_x" and "f32_fma_y", one expression contracted
each way: the products with `x`, or with `y`, fused). The check computes all
six in both layouts and names
those the kernel's output matches bit for bit; its TIES arm separates every
arithmetic from every other, the three f32 forms only with a float32 cache
(a product of two bf16 values is exact in f32).

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. torch eager, bf16 (vLLM's `forward_native` form: the cache cast to the
   query's dtype, `x1 * cos - x2 * sin`), with a bf16 and a float32 cache;
2. a small Triton kernel that loads bf16, computes in f32, stores bf16,
   with Triton's default FP fusion and with `enable_fp_fusion=False`;
3. vLLM's `rotary_embedding` op (in place): with a bf16 cache declared
   per_op (older vLLM: `scalar_t` arithmetic), and with a float32 cache
   declared f32_fma (current vLLM computes in float32; which product nvcc
   fuses is the finding);
4. FlashInfer's and SGLang's `apply_rope_with_cos_sin_cache_inplace`
   (float32 cache only).

A declared arithmetic is printed with PASS or FAIL; what matches is the
finding. Only torch eager's declaration is certain; the Triton, vLLM and
FlashInfer declarations are what their sources suggest (LLVM's and nvcc's
contraction order is not written down), and the run settles them. Exit status 1 only when a section fails to run, or when torch eager
bf16 is not per_op (each torch operator rounds its result to bf16).

Run on a GPU with torch (and triton, vllm, flashinfer, sgl_kernel as
installed):
    python3 python/examples/rotary_embedding.py
"""

import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton


def to_cuda(a, dtype):
    """A numpy array of the check (uint16 bf16 bits, float32, int64) on the GPU."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).cuda().view(dtype)
    return torch.from_numpy(a).cuda()


def to_numpy(t, out):
    """A CUDA tensor into the check's output array `out`."""
    if out.dtype == np.uint16:
        out[...] = t.view(torch.int16).cpu().numpy().view(np.uint16)
    else:
        out[...] = t.cpu().numpy()


def torch_eager(is_neox):
    """vLLM's `forward_native` on bf16 tensors: one torch operator per step."""

    def rope(positions, query, key, cache, out_query, out_key):
        pos = torch.from_numpy(positions).cuda()
        c = to_cuda(cache, torch.bfloat16)[pos]
        rot = c.shape[-1]
        cos, sin = c.chunk(2, dim=-1)
        cos, sin = cos.unsqueeze(-2).to(torch.bfloat16), sin.unsqueeze(-2).to(torch.bfloat16)
        for x_np, out in ((query, out_query), (key, out_key)):
            x = to_cuda(x_np, torch.bfloat16)
            xr, xp = x[..., :rot], x[..., rot:]
            if is_neox:
                x1, x2 = torch.chunk(xr, 2, dim=-1)
            else:
                x1, x2 = xr[..., ::2], xr[..., 1::2]
            o1 = x1 * cos - x2 * sin
            o2 = x2 * cos + x1 * sin
            if is_neox:
                o = torch.cat((o1, o2), dim=-1)
            else:
                o = torch.stack((o1, o2), dim=-1).flatten(-2)
            to_numpy(torch.cat((o, xp), dim=-1), out)
        torch.cuda.synchronize()

    rope.__name__ = f"torch_eager_bf16_{'neox' if is_neox else 'gptj'}"
    return rope


if triton is not None:
    @triton.jit
    def rope_kernel(pos_ptr, x_ptr, out_ptr, cache_ptr, n_heads, head_size, rot,
                    HALF: tl.constexpr, HS: tl.constexpr, IS_NEOX: tl.constexpr):
        t = tl.program_id(0)
        h = tl.program_id(1)
        base = (t * n_heads + h) * head_size
        pos = tl.load(pos_ptr + t)
        half = rot // 2
        p = tl.arange(0, HALF)
        m = p < half
        if IS_NEOX:
            i1 = p
            i2 = p + half
        else:
            i1 = 2 * p
            i2 = 2 * p + 1
        c = tl.load(cache_ptr + pos * rot + p, mask=m, other=0.0).to(tl.float32)
        s = tl.load(cache_ptr + pos * rot + half + p, mask=m, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + base + i1, mask=m, other=0.0).to(tl.float32)
        y = tl.load(x_ptr + base + i2, mask=m, other=0.0).to(tl.float32)
        o1 = x * c - y * s
        o2 = y * c + x * s
        tl.store(out_ptr + base + i1, o1.to(out_ptr.dtype.element_ty), mask=m)
        tl.store(out_ptr + base + i2, o2.to(out_ptr.dtype.element_ty), mask=m)
        j = tl.arange(0, HS)
        keep = (j >= rot) & (j < head_size)
        tl.store(out_ptr + base + j, tl.load(x_ptr + base + j, mask=keep, other=0.0), mask=keep)


def triton_rope(is_neox, fusion):
    def rope(positions, query, key, cache, out_query, out_key):
        pos = torch.from_numpy(positions).cuda()
        c = to_cuda(cache, torch.bfloat16)
        rot = c.shape[1]
        for x_np, out in ((query, out_query), (key, out_key)):
            t, heads, hs = x_np.shape
            if heads == 0:
                continue
            x = to_cuda(x_np, torch.bfloat16)
            o = torch.empty_like(x)
            extra = {} if fusion else {"enable_fp_fusion": False}
            rope_kernel[(t, heads)](pos, x, o, c, heads, hs, rot,
                                    HALF=triton.next_power_of_2(rot // 2),
                                    HS=triton.next_power_of_2(hs), IS_NEOX=is_neox, **extra)
            to_numpy(o, out)
        torch.cuda.synchronize()

    rope.__name__ = f"triton_rope_f32_{'fused' if fusion else 'nofma'}_{'neox' if is_neox else 'gptj'}"
    return rope


def in_place(op, name, f32_cache_only):
    """An in-place library op `op(positions, q2d, k2d, head_size, cache)` on copies."""

    def rope(positions, query, key, cache, out_query, out_key):
        if f32_cache_only and cache.dtype != np.float32:
            raise ko.Refused("cos_sin_cache should be float32")
        t, _, hs = query.shape
        q = to_cuda(query, torch.bfloat16).reshape(t, -1).contiguous()
        k = to_cuda(key, torch.bfloat16).reshape(t, -1).contiguous()
        op(torch.from_numpy(positions).cuda(), q, k, hs, to_cuda(cache, torch.bfloat16))
        torch.cuda.synchronize()
        to_numpy(q.view(query.shape), out_query)
        to_numpy(k.view(key.shape), out_key)

    rope.__name__ = name
    return rope


def ties_finding(report):
    """What every TIES row matched (the summary's phrase)."""
    tail = report.text.rsplit("on every TIES case under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


def main():
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    bad = 0
    findings = []

    def run(fn, arithmetic, cache_dtype, is_neox=True):
        r = ko.check_rotary_embedding(fn, is_neox=is_neox, arithmetic=arithmetic,
                                      dtype="bfloat16", cache_dtype=cache_dtype, verbose=True)
        found = ties_finding(r)
        findings.append((f"{fn.__name__}, {cache_dtype} cache", found))
        print(f"FINDING {fn.__name__} ({cache_dtype} cache): {found}", flush=True)
        return r

    for is_neox in (True, False):
        for cache_dtype in ("bfloat16", "float32"):
            r = section(f"torch eager bf16, is_neox={is_neox}, {cache_dtype} cache", 240,
                        lambda n=is_neox, c=cache_dtype: run(torch_eager(n), "per_op", c, n))
            if r is None:
                bad += 1
            elif not r.ok:
                print("UNEXPECTED: torch eager bf16 is not per_op")
                bad += 1
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        for fusion in (True, False):
            r = section(f"Triton f32 kernel, fp fusion {'on' if fusion else 'off'}", 240,
                        lambda f=fusion: run(triton_rope(True, f), "f32_fma_x" if f else "f32", "float32"))
            bad += r is None
    try:
        from vllm import _custom_ops as vllm_ops
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM rotary_embedding: not importable ({type(e).__name__}), skipped")
    else:
        for is_neox in (True, False):
            op = in_place(lambda p, q, k, hs, c, n=is_neox: vllm_ops.rotary_embedding(p, q, k, hs, c, n),
                          f"vllm_rotary_embedding_{'neox' if is_neox else 'gptj'}", False)
            r = section(f"vLLM rotary_embedding, is_neox={is_neox}", 240,
                        lambda op=op, n=is_neox: run(op, "per_op", "bfloat16", n))
            bad += r is None
            # Current vLLM computes in float32 and takes a float32 cache (older
            # builds refuse it: reported, not counted); its TIES rows say which
            # product nvcc fused.
            section(f"vLLM rotary_embedding, is_neox={is_neox}, float32 cache", 240,
                    lambda op=op, n=is_neox: run(op, "f32_fma", "float32", n))
    for module, label in (("flashinfer.rope", "FlashInfer"), ("sgl_kernel", "SGLang sgl_kernel")):
        try:
            mod = __import__(module, fromlist=["apply_rope_with_cos_sin_cache_inplace"])
            fn = mod.apply_rope_with_cos_sin_cache_inplace
        except Exception as e:
            print(f"\n=== {label} apply_rope_with_cos_sin_cache_inplace: not importable ({type(e).__name__}), skipped")
            continue
        op = in_place(lambda p, q, k, hs, c, fn=fn: fn(p, q, k, hs, c, is_neox=True),
                      f"{label.split()[0].lower()}_apply_rope_with_cos_sin_cache", True)
        r = section(f"{label} apply_rope_with_cos_sin_cache_inplace", 240,
                    lambda op=op: run(op, "f32_fma", "float32"))
        bad += r is None
    print("\nSUMMARY (what every TIES case matched)")
    for name, found in findings:
        print(f"  {name}: {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
