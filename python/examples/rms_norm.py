"""The RMSNorms the field runs, through kernel_oracle.check_rms_norm: which
arithmetic does each compute, and does each stay inside the sound bound?

RMSNorm is `y * r * w` per element with `r = 1/sqrt(mean(y^2) + eps)` per
row. The sum of squares is not bit-determined (each kernel reduces in its
own tree, `rsqrtf` is within 2 ulps), so the check bounds `r` soundly and
holds each output to the interval of values an admissible `r` gives: bit
for bit where that interval is one value (most bf16 elements), within it
elsewhere. Kernels differ in where they round: `round_then_weight` rounds
`y * r` to the model dtype, then multiplies by the weight and rounds again
(vLLM's CUDA ops, Hugging Face's `LlamaRMSNorm`, Liger's "llama" mode);
`f32` rounds once at the end (FlashInfer, torch 2.11's `rms_norm`); `gemma`
multiplies by `1 + w` in float32 and rounds once. The check names every
arithmetic whose intervals admit the output.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. Hugging Face's `LlamaRMSNorm` forward in torch (declared
   round_then_weight), and its decoder layer's residual add in the model
   dtype before it (fused add, sum_rounding "dtype");
2. Hugging Face's `GemmaRMSNorm` forward in torch (declared gemma);
3. `torch.nn.functional.rms_norm` with a bf16 weight (declared f32 for
   torch 2.11, the GPU host's: its CUDA `_fused_rms_norm` computes `gamma *
   (rstd * x)` in float and casts once; torch 2.4's composite rounded `x *
   rstd` to the input dtype before the weight, round_then_weight, and the
   run names what the installed torch computes; on hidden sizes that are
   not multiples of 4 it takes Welford's mean and variance instead of a sum
   of squares, outside the bound's derivation, which the EXACT arm holds
   to a few ulps of the inverse RMS: the run says whether it stays inside);
4. a Triton kernel in Liger's llama form (`(x * rstd).to(dtype) * w`),
   written here (declared round_then_weight);
5. vLLM's `rms_norm` and `fused_add_rms_norm` ops (declared
   round_then_weight, the fused add "dtype");
6. FlashInfer's `rmsnorm`, `gemma_rmsnorm` and `fused_add_rmsnorm`
   (declared f32, gemma, and f32 with sum_rounding "f32").

A declared arithmetic is printed with PASS or FAIL; what matches is the
finding. Exit status 1 only when a section fails to run, or when the
Hugging Face torch forms (whose arithmetic their source fixes) fail.

Run on a GPU with torch (and triton, vllm, flashinfer as installed):
    python3 python/examples/rms_norm.py [--dtype bfloat16|float16]
"""

import argparse
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton


def tdtype(name):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def to_cuda(a, dt):
    """A numpy array of the check (uint16 bit patterns) on the GPU as `dt`."""
    return torch.from_numpy(a.view(np.int16)).cuda().view(dt)


def to_numpy(t, out):
    """A CUDA 16-bit tensor into the check's uint16 output array `out`."""
    torch.cuda.synchronize()
    out[...] = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16).reshape(out.shape)


def hf_llama(dt):
    """transformers' LlamaRMSNorm.forward."""

    def rms(x, weight, eps, out):
        h = to_cuda(x, dt)
        w = to_cuda(weight, dt)
        input_dtype = h.dtype
        h = h.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + eps)
        to_numpy(w * h.to(input_dtype), out)

    rms.__name__ = "hf_llama_rms_norm"
    return rms


def hf_llama_residual(dt):
    """A Llama decoder layer's `hidden_states = residual + hidden_states`
    in the model dtype, then the next layer's LlamaRMSNorm."""

    def rms(x, residual, weight, eps, out, residual_out):
        s = to_cuda(residual, dt) + to_cuda(x, dt)
        to_numpy(s, residual_out)
        h = s.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        to_numpy(to_cuda(weight, dt) * h.to(dt), out)

    rms.__name__ = "hf_llama_residual_add_rms_norm"
    return rms


def hf_gemma(dt):
    """transformers' GemmaRMSNorm.forward."""

    def rms(x, weight, eps, out):
        xt = to_cuda(x, dt)
        w = to_cuda(weight, dt)
        h = xt.float()
        o = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        o = o * (1.0 + w.float())
        to_numpy(o.type_as(xt), out)

    rms.__name__ = "hf_gemma_rms_norm"
    return rms


def torch_rms_norm(dt):
    def rms(x, weight, eps, out):
        xt, w = to_cuda(x, dt), to_cuda(weight, dt)
        to_numpy(torch.nn.functional.rms_norm(xt, (xt.shape[-1],), w, eps), out)

    rms.__name__ = "torch_nn_functional_rms_norm"
    return rms


if triton is not None:
    @triton.jit
    def rms_norm_llama_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        mean_square = tl.sum(x * x, axis=0) / n_cols
        rstd = tl.rsqrt(mean_square + eps)
        y = (x * rstd).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + row * n_cols + cols, y * w, mask=mask)


def triton_llama(dt):
    def rms(x, weight, eps, out):
        xt, w = to_cuda(x, dt), to_cuda(weight, dt)
        o = torch.empty_like(xt)
        rows, n = xt.shape
        rms_norm_llama_kernel[(rows,)](xt, w, o, n, eps, BLOCK=triton.next_power_of_2(n))
        to_numpy(o, out)

    rms.__name__ = "triton_liger_llama_rms_norm"
    return rms


def vllm_ops(ops, dt):
    def rms(x, weight, eps, out):
        xt, w = to_cuda(x, dt), to_cuda(weight, dt)
        o = torch.empty_like(xt)
        ops.rms_norm(o, xt, w, eps)
        to_numpy(o, out)

    def fused(x, residual, weight, eps, out, residual_out):
        xt, r, w = to_cuda(x, dt), to_cuda(residual, dt), to_cuda(weight, dt)
        ops.fused_add_rms_norm(xt, r, w, eps)  # in place: x <- norm, residual <- sum
        to_numpy(xt, out)
        to_numpy(r, residual_out)

    rms.__name__, fused.__name__ = "vllm_rms_norm", "vllm_fused_add_rms_norm"
    return rms, fused


def flashinfer_ops(norm, dt):
    def rms(x, weight, eps, out):
        to_numpy(norm.rmsnorm(to_cuda(x, dt), to_cuda(weight, dt), eps=eps), out)

    def gemma(x, weight, eps, out):
        to_numpy(norm.gemma_rmsnorm(to_cuda(x, dt), to_cuda(weight, dt), eps=eps), out)

    def fused(x, residual, weight, eps, out, residual_out):
        xt, r, w = to_cuda(x, dt), to_cuda(residual, dt), to_cuda(weight, dt)
        norm.fused_add_rmsnorm(xt, r, w, eps=eps)  # in place
        to_numpy(xt, out)
        to_numpy(r, residual_out)

    rms.__name__ = "flashinfer_rmsnorm"
    gemma.__name__ = "flashinfer_gemma_rmsnorm"
    fused.__name__ = "flashinfer_fused_add_rmsnorm"
    return rms, gemma, fused


def finding(report):
    """What every compared case admitted (the summary's phrase)."""
    tail = report.text.rsplit("every compared case admitted under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--eps", type=float, default=1e-6)
    args = p.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    dt = tdtype(args.dtype)
    bad = 0
    findings = []

    def run(fn, arithmetic, fused_add=False, sum_rounding="dtype"):
        r = ko.check_rms_norm(fn, dtype=args.dtype, arithmetic=arithmetic, eps=args.eps,
                              fused_add=fused_add, sum_rounding=sum_rounding, verbose=True)
        found = finding(r)
        findings.append((fn.__name__, r.ok, found))
        print(f"FINDING {fn.__name__}: declared {arithmetic}: {'PASS' if r.ok else 'FAIL'}; "
              f"admitted under: {found}", flush=True)
        return r

    for title, fn, arith, fused in [
        ("Hugging Face LlamaRMSNorm (torch)", hf_llama(dt), "round_then_weight", False),
        ("Hugging Face residual add + LlamaRMSNorm (torch)", hf_llama_residual(dt),
         "round_then_weight", True),
        ("Hugging Face GemmaRMSNorm (torch)", hf_gemma(dt), "gemma", False),
    ]:
        r = section(title, 300, lambda fn=fn, a=arith, f=fused: run(fn, a, fused_add=f))
        if r is None:
            bad += 1
        elif not r.ok:
            print(f"UNEXPECTED: {fn.__name__} is outside its declared arithmetic")
            bad += 1
    r = section(f"torch.nn.functional.rms_norm (torch {torch.__version__})", 300,
                lambda: run(torch_rms_norm(dt), "f32"))
    bad += r is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        r = section("Triton kernel, Liger's llama form", 300,
                    lambda: run(triton_llama(dt), "round_then_weight"))
        bad += r is None
    try:
        from vllm import _custom_ops as vllm_custom_ops
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM rms_norm, fused_add_rms_norm: not importable ({type(e).__name__}), skipped")
    else:
        rms, fused = vllm_ops(vllm_custom_ops, dt)
        bad += section("vLLM rms_norm", 300, lambda: run(rms, "round_then_weight")) is None
        bad += section("vLLM fused_add_rms_norm", 300,
                       lambda: run(fused, "round_then_weight", fused_add=True)) is None
    try:
        import flashinfer.norm as fi_norm
    except Exception as e:
        print(f"\n=== FlashInfer norm: not importable ({type(e).__name__}), skipped")
    else:
        rms, gemma, fused = flashinfer_ops(fi_norm, dt)
        bad += section("FlashInfer rmsnorm", 300, lambda: run(rms, "f32")) is None
        bad += section("FlashInfer gemma_rmsnorm", 300, lambda: run(gemma, "gemma")) is None
        bad += section("FlashInfer fused_add_rmsnorm", 300,
                       lambda: run(fused, "f32", fused_add=True, sum_rounding="f32")) is None
    print("\nSUMMARY (declared verdict; every arithmetic whose intervals admitted every case)")
    for name, ok, found in findings:
        print(f"  {name}: {'PASS' if ok else 'FAIL'}; {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
