"""Scaled dot-product attention as the field runs it, through
kernel_oracle.check_attention: which arithmetic does each kernel compute
(`flash`: P rounded to the dtype before the PV product; `f32`: P in
float32; `eager`: scores and P rounded to the dtype), and does each stay
inside the sound enclosure of its declaration?

Sections, each under its own time limit; a backend this host or this
torch cannot run is reported as skipped with the reason, not as a
failure (a shape one backend refuses, such as a head dim it does not
support, is counted as refused by the check):
1. torch `scaled_dot_product_attention` per backend
   (`torch.nn.attention.sdpa_kernel`): FLASH_ATTENTION, EFFICIENT_ATTENTION
   and CUDNN_ATTENTION (declared flash), MATH (declared f32: torch 2.5 and
   later upcast bf16/f16 to float32 unless
   `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`; before
   2.5, or with that set, q and k are scaled by sqrt(scale) and every
   step rounds to the dtype: declared eager), without a mask and with
   `is_causal=True` (top-left, declared causal="top_left");
2. Hugging Face's `eager_attention_forward` written out (`matmul(q, k^T) *
   scaling`, `softmax(..., dtype=float32).to(q.dtype)`, `matmul(p, v)`;
   declared eager), with and without a softcap;
3. FlexAttention (`torch.nn.attention.flex_attention`, compiled, with
   dynamo's recompile limit raised): no mask, causal through a `mask_mod`
   (declared causal="bottom_right" on the check's shapes with `Sq <= Sk`),
   a softcap through a `score_mod` (declared flash); and not compiled, the
   unfused path flex_attention falls back to past the recompile limit
   (scores of `q @ k^T` rounded to the dtype: declared eager).

Each run prints the check's rows and a FINDING line: the declared verdict
and every arithmetic whose intervals admitted every case. Exit status 1
only when a section fails to run.

Run on a GPU with torch:
    python3 python/examples/attention.py [--dtype bfloat16|float16] [--only TITLE]
"""

import argparse
import importlib
import sys

import numpy as np

import kernel_oracle as ko
from sections import Timeout, torch
from sections import section as run_section


def tdtype(name):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def to_cuda(a, dt):
    """A numpy array of the check (uint16 bit patterns) on the GPU as `dt`."""
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).cuda().view(dt)


def to_numpy(t, out):
    """A CUDA 16-bit tensor into the check's uint16 output array `out`."""
    torch.cuda.synchronize()
    out[...] = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16).reshape(out.shape)


def finding(report):
    """What every compared case admitted (the summary's phrase)."""
    tail = report.text.rsplit("every compared case admitted under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


def expand_kv(k, v, hq):
    """GQA by repetition: query head h reads kv head h // (Hq // Hkv)."""
    g = hq // k.shape[1]
    if g == 1:
        return k, v
    return k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)


def math_arithmetic():
    """The math backend's arithmetic on bf16/f16: `f32` where torch
    upcasts (2.5 and later, `fp16_bf16_reduction_math_sdp_allowed()`
    False), else `eager` (`_scaled_dot_product_attention_math` scales q
    and k by sqrt(scale) in the dtype and rounds each step)."""
    allowed = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    return "eager" if allowed is None or allowed() else "f32"


def sdpa(backend, dt, is_causal=False):
    """torch SDPA under one backend; a backend that cannot run a shape
    (`RuntimeError`: no kernel for it) refuses the case."""
    from torch.nn.attention import sdpa_kernel

    F = torch.nn.functional

    def fn(q, k, v, out):
        Q, K, V = to_cuda(q, dt), to_cuda(k, dt), to_cuda(v, dt)
        K, V = expand_kv(K, V, Q.shape[1])
        try:
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(Q, K, V, is_causal=is_causal)
        except RuntimeError as e:
            raise ko.Refused(f"{backend.name}: {str(e).splitlines()[0][:120]}")
        to_numpy(o, out)

    fn.__name__ = f"sdpa_{backend.name.lower()}" + ("_causal" if is_causal else "")
    return fn


def hf_eager(dt, softcap=None):
    """transformers' eager_attention_forward (with Gemma 2's softcap as
    Gemma2's eager attention applies it)."""

    def fn(q, k, v, out):
        Q, K, V = to_cuda(q, dt), to_cuda(k, dt), to_cuda(v, dt)
        K, V = expand_kv(K, V, Q.shape[1])
        scaling = Q.shape[-1] ** -0.5
        w = torch.matmul(Q, K.transpose(2, 3)) * scaling
        if softcap is not None:
            w = w / softcap
            w = torch.tanh(w)
            w = w * softcap
        w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(Q.dtype)
        to_numpy(torch.matmul(w, V), out)

    fn.__name__ = "hf_eager" + ("_softcap" if softcap else "")
    return fn


def flex(dt, causal=False, softcap=None, compiled=True):
    """FlexAttention: causal (bottom-right) through a mask_mod, the softcap
    through a score_mod; compiled (the fused Triton kernel) or not (torch's
    unfused path, which materialises the scores: what flex_attention runs,
    with a warning, once dynamo gives up compiling it)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if compiled:
        # Every shape of the check is a recompilation of the one function;
        # past dynamo's recompile limit (8) flex_attention silently runs its
        # unfused path, whose arithmetic is another one (see the sections).
        cfg = torch._dynamo.config
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, knob):
                setattr(cfg, knob, max(getattr(cfg, knob), 256))
        torch._dynamo.reset()
        call = torch.compile(flex_attention, dynamic=False)
    else:
        call = flex_attention

    def fn(q, k, v, out):
        Q, K, V = to_cuda(q, dt), to_cuda(k, dt), to_cuda(v, dt)
        sq, sk = Q.shape[2], K.shape[2]
        kw = {}
        if causal:
            off = sk - sq

            def mask_mod(b, h, q_idx, kv_idx):
                return kv_idx <= q_idx + off

            kw["block_mask"] = create_block_mask(mask_mod, None, None, sq, sk, device="cuda")
        if softcap is not None:
            def score_mod(score, b, h, q_idx, kv_idx):
                return softcap * torch.tanh(score / softcap)

            kw["score_mod"] = score_mod
        try:
            o = call(Q, K, V, enable_gqa=Q.shape[1] != K.shape[1], **kw)
        except Timeout:
            raise
        except Exception as e:  # an unsupported shape (head dim, Dv != D) is refused
            raise ko.Refused(f"flex_attention: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        to_numpy(o, out)

    fn.__name__ = ("flex" + ("" if compiled else "_unfused") + ("_causal" if causal else "")
                   + ("_softcap" if softcap else ""))
    return fn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--only", default=None,
                   help="run only the sections whose title contains this (case-insensitive)")
    args = p.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    dt = tdtype(args.dtype)
    bad = 0
    findings = []

    def section(title, seconds, fn):
        if args.only is not None and args.only.lower() not in title.lower():
            return True  # not asked for: neither run nor counted as failed
        return run_section(title, seconds, fn)

    def run(fn, arithmetic, **kw):
        r = ko.check_attention(fn, dtype=args.dtype, arithmetic=arithmetic, verbose=True, **kw)
        found = finding(r)
        compared = r.cases - r.refused
        verdict = "SKIPPED (every case refused)" if compared == 0 else (
            "PASS" if r.ok else "FAIL")
        findings.append((fn.__name__, arithmetic, verdict, found, r.refused))
        print(f"FINDING {fn.__name__}: declared {arithmetic}: {verdict}; "
              f"{r.refused} refused; matches: {found}")
        return r

    try:
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        print(f"\n=== torch SDPA backends: {e}, skipped")
        SDPBackend = None
    if SDPBackend is not None:
        for name, arithmetic in [("FLASH_ATTENTION", "flash"), ("EFFICIENT_ATTENTION", "flash"),
                                 ("CUDNN_ATTENTION", "flash"), ("MATH", math_arithmetic())]:
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                print(f"\n=== SDPA {name}: not in this torch, skipped")
                continue
            for causal in [False, True]:
                kw = dict(causal="top_left") if causal else {}
                bad += section(f"SDPA {name}{' causal' if causal else ''}", 300,
                               lambda b=backend, a=arithmetic, c=causal, kw=kw: run(
                                   sdpa(b, dt, c), a, **kw)) is None
    bad += section("Hugging Face eager", 300, lambda: run(hf_eager(dt), "eager")) is None
    bad += section("Hugging Face eager, softcap 50", 300, lambda: run(
        hf_eager(dt, 50.0), "eager", softcap=50.0)) is None
    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError as e:
        print(f"\n=== FlexAttention: not importable ({e}), skipped")
    else:
        bad += section("FlexAttention", 900, lambda: run(flex(dt), "flash")) is None
        bad += section("FlexAttention causal (mask_mod)", 900, lambda: run(
            flex(dt, causal=True), "flash", causal="bottom_right")) is None
        bad += section("FlexAttention softcap 30 (score_mod)", 900, lambda: run(
            flex(dt, softcap=30.0), "flash", softcap=30.0)) is None
        # The unfused path: `q @ k^T` in the input dtype (rounded), then
        # float32 softmax: declared eager.
        bad += section("FlexAttention unfused (not compiled)", 300, lambda: run(
            flex(dt, causal=True, compiled=False), "eager", causal="bottom_right")) is None
    print("\nSUMMARY (declared verdict; every arithmetic whose intervals admitted every case)")
    for name, arithmetic, verdict, found, refused in findings:
        print(f"  {name}: declared {arithmetic}: {verdict}; {refused} refused; {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
