"""The KV-cache writes the field runs, through
kernel_oracle.check_reshape_and_cache: does each write every element it
must, and nothing else, and which FP8 arithmetic does it compute?

A step's keys and values go to slot `slot_mapping[t]` (block `s //
block_size`, offset `s % block_size`; negative: padding) of a paged cache,
in the NHD or HND layout (vLLM's `reshape_and_cache_flash`, FlashInfer) or
the paged-attention layout (vLLM's `reshape_and_cache`, keys packed by `x =
16 // element bytes`). The check hands each kernel caches full of random
bits and demands every element no token writes unchanged. Under an FP8
cache each written code is the input scaled by `k_scale` or `v_scale`,
rounded to nearest even: the scale rule (`divide`: x / s, one binary32
division; `reciprocal`: x * fl(1/s), torch on CUDA dividing a float32
tensor by a Python float; `multiply`; each `_in_dtype`: the scaled value
rounded to the model's dtype first, torch eager on bf16 tensors;
`divide_scale_in_dtype`: the scale rounded to the model's dtype too, torch
on CUDA dividing by a 0-dim float32 tensor) and the overflow policy
(`SAT_FINITE`: CUDA's `__NV_SATFINITE` and Triton's conversion on sm_90;
`NON_SATURATING`: torch's `.to(torch.float8_e4m3fn)`) are the findings.
SAT separates the policies, each TIES case the rules (on keys in some
cases, values in others).

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. torch, `"auto"`: the index-put `cache[block, offset] = key` (`x` packing
   by a view for the paged layout), every layout, declared `copy`;
2. torch, FP8, NHD: `(key.float() / k_scale).to(torch.float8_e4m3fn)` with
   the scale a one-element CUDA tensor (float32 division: declared
   `divide`, NON_SATURATING), SGLang's `set_kv_buffer` form
   (`key.div(k_scale_float)` on the bf16 key, then `.to(fp8)`: torch
   multiplies a CUDA tensor by a Python scalar's binary32 reciprocal and
   rounds to bf16: declared `reciprocal_in_dtype`) and the same with a
   0-dim CUDA scale (declared `divide_scale_in_dtype`: a 0-dim operand takes
   no part in type promotion, so torch's CUDA division
   (`DivFunctor<BFloat16>`) reads the scale cast to bf16, divides in float32
   and rounds the quotient to bf16), and E5M2;
3. a Triton kernel in the form of vLLM's `triton_reshape_and_cache_flash`
   (one program per token and tile, `key / tl.load(k_scale)` stored
   through an FP8 pointer), every layout: with Triton's float32 `/`
   (PTX's approximate `div.full.f32`, expected to FAIL at TIES as
   `divide`), and with `tl.div_rn` (declared `divide`, SAT_FINITE);
4. MLA's latent cache through kernel_oracle.check_concat_and_cache_mla:
   torch's index-put of `cat(kv_c, k_pe)`, `"auto"` (declared `copy`) and
   FP8 through a float32 division (declared `divide`, NON_SATURATING);
5. vLLM's `reshape_and_cache_flash` (NHD, and HND through permuted
   strides), `reshape_and_cache` (paged) and `concat_and_cache_mla` where
   vLLM is installed, `"auto"`, `"fp8"` and `"fp8_e5m2"`, declared
   `divide`, SAT_FINITE (its `scaled_convert`:
   `__nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, ...)`).

A declared arithmetic is printed with PASS or FAIL; what matches on every
SAT and TIES case is the finding. Exit status 1 only when a section fails
to run, or when torch's `"auto"` index-put is not a copy.

Run on a GPU with torch (and triton, vllm as installed):
    python3 python/examples/reshape_and_cache.py
"""

import argparse
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton

SAT, NONSAT = ko.Overflow.SAT_FINITE, ko.Overflow.NON_SATURATING
FP8 = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def to_cuda(a):
    """A numpy array of the check on the GPU, its bits as they are (uint16
    as int16, uint8 codes as uint8, float32, int64)."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).cuda()
    return torch.from_numpy(a).cuda()


def back(t, out):
    """A CUDA tensor's bits into the check's array `out`, in place."""
    if out.dtype == np.uint16:
        out[...] = t.view(torch.int16).cpu().numpy().view(np.uint16)
    elif out.dtype == np.uint8:
        out[...] = t.view(torch.uint8).cpu().numpy()
    else:
        out[...] = t.view(torch.float32).cpu().numpy()


def model(a, dtype):
    """The keys or values as a CUDA tensor of the model's dtype."""
    t = to_cuda(a)
    return t.view(getattr(torch, dtype)) if a.dtype == np.uint16 else t


def block_offset(slot_mapping, block_size):
    """The tokens that write, their blocks and offsets (CUDA tensors)."""
    s = torch.from_numpy(slot_mapping).cuda()
    t = torch.nonzero(s >= 0).squeeze(1)
    s = s[t]
    return t, s // block_size, s % block_size


def put(cache, layout, b, o, rows):
    """`rows` `[n, H, hs]` (the cache's element type) into slots (b, o)."""
    if layout == "nhd":
        cache[b, o] = rows
    elif layout == "hnd":
        cache[b, :, o, :] = rows
    elif cache.dim() == 5:  # the paged key cache, packed by x
        x = cache.shape[4]
        cache[b, :, :, o, :] = rows.view(rows.shape[0], rows.shape[1], -1, x)
    else:  # the paged value cache
        cache[b, :, :, o] = rows


def block_size_of(cache, layout):
    return cache.shape[{"nhd": 1, "hnd": 2, "paged": 3}[layout]]


def torch_cache(layout, kv="auto", dtype="bfloat16", form="float"):
    """An index-put KV-cache write in torch; under FP8 the conversion is
    `form`: "float" (`(key.float() / k_scale).to(fp8)`, the scale a
    one-element CUDA tensor), "scalar" (`key / k_scale.item()` on the model
    dtype, then `.to(fp8)`: SGLang's `set_kv_buffer`) or "zero_dim" (`key /
    k_scale` with a 0-dim CUDA scale, then `.to(fp8)`)."""

    def convert(x, s):
        if kv == "auto":
            return x
        f8 = getattr(torch, FP8[kv])
        if form == "float":
            q = x.float() / s
        elif form == "scalar":
            q = x / s.item()
        else:
            q = x / s.reshape(())
        return q.to(f8).view(torch.uint8)

    def write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        t, b, o = block_offset(slot_mapping, block_size_of(key_cache, layout))
        ks, vs = torch.from_numpy(k_scale).cuda(), torch.from_numpy(v_scale).cuda()
        kc, vc = to_cuda(key_cache), to_cuda(value_cache)
        rows_k = convert(model(key, dtype)[t], ks)
        rows_v = convert(model(value, dtype)[t], vs)
        if kv == "auto" and key.dtype == np.uint16:
            rows_k, rows_v = rows_k.view(torch.int16), rows_v.view(torch.int16)
        put(kc, layout, b, o, rows_k)
        put(vc, layout, b, o, rows_v)
        torch.cuda.synchronize()
        back(kc, key_cache)
        back(vc, value_cache)

    write.__name__ = f"torch_{layout}_{kv}" + ("" if kv == "auto" else f"_{form}")
    return write


if triton is not None:
    @triton.jit
    def cache_kernel(key_ptr, value_ptr, kc_ptr, vc_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
                     block_stride, page_stride, head_stride, dim_stride_k, dim_stride_v,
                     num_heads: tl.constexpr, head_size: tl.constexpr, block_size: tl.constexpr,
                     x: tl.constexpr, PAGED: tl.constexpr, FP8: tl.constexpr,
                     DIV_RN: tl.constexpr, TILE: tl.constexpr):
        t = tl.program_id(0)
        slot = tl.load(slot_ptr + t).to(tl.int64)
        if slot < 0:  # padding
            return
        b = slot // block_size
        o = slot % block_size
        pos = tl.program_id(1) * TILE + tl.arange(0, TILE)
        m = pos < num_heads * head_size
        h = pos // head_size
        d = pos % head_size
        if PAGED:
            tk = b * block_stride + h * head_stride + (d // x) * dim_stride_k + o * x + d % x
            tv = b * block_stride + h * head_stride + d * dim_stride_v + o
        else:
            tk = b * block_stride + o * page_stride + h * head_stride + d
            tv = tk
        k = tl.load(key_ptr + t * num_heads * head_size + pos, mask=m)
        v = tl.load(value_ptr + t * num_heads * head_size + pos, mask=m)
        if FP8:
            ks = tl.load(k_scale_ptr)
            vs = tl.load(v_scale_ptr)
            if DIV_RN:
                k = tl.div_rn(k.to(tl.float32), ks)
                v = tl.div_rn(v.to(tl.float32), vs)
            else:
                k = k / ks
                v = v / vs
        # The store converts to the cache's element type (FP8: cvt.rn.satfinite).
        tl.store(kc_ptr + tk, k, mask=m)
        tl.store(vc_ptr + tv, v, mask=m)


def triton_cache(layout, kv="auto", dtype="bfloat16", div_rn=False):
    """The Triton kernel above on the check's arrays."""

    def write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        # The grid by slot_mapping, not key: key may hold CUDA-graph
        # padding rows past the slot map's tokens (vLLM PR 13922).
        T, (_, H, hs) = slot_mapping.shape[0], key.shape
        kc, vc = to_cuda(key_cache), to_cuda(value_cache)
        if kv == "auto":
            kc, vc = kc.view(getattr(torch, dtype)), vc.view(getattr(torch, dtype))
        else:
            kc, vc = kc.view(getattr(torch, FP8[kv])), vc.view(getattr(torch, FP8[kv]))
        k, v = model(key, dtype), model(value, dtype)
        bs = block_size_of(key_cache, layout)
        x = key_cache.shape[4] if layout == "paged" else 1
        if layout == "nhd":
            strides = (kc.stride(0), kc.stride(1), kc.stride(2), 0, 0)
        elif layout == "hnd":
            strides = (kc.stride(0), kc.stride(2), kc.stride(1), 0, 0)
        else:
            strides = (kc.stride(0), 0, kc.stride(1), kc.stride(2), vc.stride(2))
        n = H * hs
        tile = min(2048, triton.next_power_of_2(n))
        cache_kernel[(T, triton.cdiv(n, tile))](
            k, v, kc, vc, torch.from_numpy(slot_mapping).cuda(),
            torch.from_numpy(k_scale).cuda(), torch.from_numpy(v_scale).cuda(), *strides,
            num_heads=H, head_size=hs, block_size=bs, x=x, PAGED=layout == "paged",
            FP8=kv != "auto", DIV_RN=div_rn, TILE=tile)
        torch.cuda.synchronize()
        back(kc, key_cache)
        back(vc, value_cache)

    write.__name__ = f"triton_{layout}_{kv}" + ("_div_rn" if div_rn else "")
    return write


def vllm_cache(op, layout, kv, dtype="bfloat16"):
    """vLLM's `reshape_and_cache_flash` (NHD, HND by permuted strides) or
    `reshape_and_cache` (paged), in place on CUDA copies."""

    def write(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        kc, vc = to_cuda(key_cache), to_cuda(value_cache)
        if kv == "auto":
            kc, vc = kc.view(getattr(torch, dtype)), vc.view(getattr(torch, dtype))
        k, v = model(key, dtype), model(value, dtype)
        # HND: vLLM takes the logical [blocks, block_size, heads, head_size] view.
        kv_view = (kc.permute(0, 2, 1, 3), vc.permute(0, 2, 1, 3)) if layout == "hnd" else (kc, vc)
        op(k, v, *kv_view, torch.from_numpy(slot_mapping).cuda(), "fp8" if kv == "fp8_e4m3" else kv,
           torch.from_numpy(k_scale).cuda(), torch.from_numpy(v_scale).cuda())
        torch.cuda.synchronize()
        back(kc, key_cache)
        back(vc, value_cache)

    write.__name__ = f"vllm_{op.__name__}_{layout}_{kv}"
    return write


def torch_mla(kv="auto", dtype="bfloat16"):
    """MLA's latent-cache write in torch: the row `cat(kv_c, k_pe)` put at
    each slot of `kv_cache` `[blocks, block_size, rank + pe]`; under FP8
    `(row.float() / scale).to(fp8)` (the scale a one-element CUDA tensor)."""

    def write(kv_c, k_pe, kv_cache, slot_mapping, scale):
        t, b, o = block_offset(slot_mapping, kv_cache.shape[1])
        row = torch.cat((model(kv_c, dtype), model(k_pe, dtype)), dim=1)[t]
        if kv == "auto":
            row = row.view(torch.int16) if kv_c.dtype == np.uint16 else row
        else:
            s = torch.from_numpy(scale).cuda()
            row = (row.float() / s).to(getattr(torch, FP8[kv])).view(torch.uint8)
        c = to_cuda(kv_cache)
        c[b, o] = row
        torch.cuda.synchronize()
        back(c, kv_cache)

    write.__name__ = f"torch_mla_{kv}"
    return write


def vllm_mla(op, kv, dtype="bfloat16"):
    """vLLM's `concat_and_cache_mla`, in place on a CUDA copy."""

    def write(kv_c, k_pe, kv_cache, slot_mapping, scale):
        c = to_cuda(kv_cache)
        if kv == "auto":
            c = c.view(getattr(torch, dtype))
        op(model(kv_c, dtype), model(k_pe, dtype), c, torch.from_numpy(slot_mapping).cuda(),
           "fp8" if kv == "fp8_e4m3" else kv, torch.from_numpy(scale).cuda())
        torch.cuda.synchronize()
        back(c, kv_cache)

    write.__name__ = f"vllm_concat_and_cache_mla_{kv}"
    return write


def edge_finding(report):
    """What every SAT and TIES case matched (the summary's phrase)."""
    tail = report.text.rsplit("on every SAT and TIES case under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


def all_finding(report):
    """What every compared case matched."""
    tail = report.text.split("bit-identical on every compared case under: ", 1)[-1]
    return tail.split("; on every SAT", 1)[0].strip()


def main():
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    bad = 0
    findings = []

    def run(fn, layout, kv, rule="divide", overflow=SAT, expect=None):
        kw = dict(kv_cache_dtype=kv, dtype="bfloat16", scale_rule=rule, overflow=overflow, verbose=True)
        if layout == "mla":
            r = ko.check_concat_and_cache_mla(fn, **kw)
        else:
            r = ko.check_reshape_and_cache(fn, layout=layout, **kw)
        found = edge_finding(r) if kv != "auto" else all_finding(r)
        verdict = "PASS" if r.ok else "FAIL"
        note = "" if expect is None or expect == r.ok else " (UNEXPECTED)"
        findings.append((fn.__name__, f"{verdict}{note}; matches: {found}"))
        print(f"FINDING {fn.__name__}: declared {rule}, {verdict}{note}; matches: {found}", flush=True)
        return r

    for layout in ("nhd", "hnd", "paged"):
        r = section(f"torch index-put, auto, {layout}", 240,
                    lambda l=layout: run(torch_cache(l), l, "auto", expect=True))
        if r is None:
            bad += 1
        elif not r.ok:
            print("UNEXPECTED: torch's index-put is not a copy")
            bad += 1
    for form, rule, overflow in (("float", "divide", NONSAT), ("scalar", "reciprocal_in_dtype", NONSAT),
                                 ("zero_dim", "divide_scale_in_dtype", NONSAT)):
        r = section(f"torch FP8 E4M3, nhd, form {form}", 240,
                    lambda f=form, ru=rule, o=overflow: run(torch_cache("nhd", "fp8_e4m3", form=f),
                                                           "nhd", "fp8_e4m3", ru, o))
        bad += r is None
    r = section("torch FP8 E5M2, nhd, form float", 240,
                lambda: run(torch_cache("nhd", "fp8_e5m2"), "nhd", "fp8_e5m2", "divide", NONSAT))
    bad += r is None
    for kv, overflow in (("auto", SAT), ("fp8_e4m3", NONSAT)):
        r = section(f"torch MLA latent cache, {kv}", 240,
                    lambda k=kv, o=overflow: run(torch_mla(k), "mla", k, "divide", o, expect=True))
        bad += r is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        for layout in ("nhd", "hnd", "paged"):
            r = section(f"Triton, auto, {layout}", 240,
                        lambda l=layout: run(triton_cache(l), l, "auto", expect=True))
            bad += r is None
            for kv in ("fp8_e4m3", "fp8_e5m2"):
                # Triton's float32 `/` is div.full.f32: expected off at TIES.
                r = section(f"Triton, {kv}, {layout}, `/`", 240,
                            lambda l=layout, k=kv: run(triton_cache(l, k), l, k, expect=False))
                bad += r is None
                r = section(f"Triton, {kv}, {layout}, tl.div_rn", 240,
                            lambda l=layout, k=kv: run(triton_cache(l, k, div_rn=True), l, k, expect=True))
                bad += r is None
    try:
        from vllm import _custom_ops as vllm_ops
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM reshape_and_cache: not importable ({type(e).__name__}), skipped")
    else:
        for layout, op in (("nhd", vllm_ops.reshape_and_cache_flash), ("hnd", vllm_ops.reshape_and_cache_flash),
                           ("paged", vllm_ops.reshape_and_cache)):
            for kv in ("auto", "fp8_e4m3", "fp8_e5m2"):
                r = section(f"vLLM {op.__name__}, {kv}, {layout}", 240,
                            lambda o=op, l=layout, k=kv: run(vllm_cache(o, l, k), l, k))
                bad += r is None
        for kv in ("auto", "fp8_e4m3"):
            r = section(f"vLLM concat_and_cache_mla, {kv}", 240,
                        lambda k=kv: run(vllm_mla(vllm_ops.concat_and_cache_mla, k), "mla", k))
            bad += r is None
    print("\nSUMMARY (declared, verdict; what every SAT and TIES case matched, under auto every case)")
    for name, found in findings:
        print(f"  {name}: {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
