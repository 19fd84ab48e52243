"""RMSNorm then FP8 quantization, fused and unfused, through
kernel_oracle.check_rms_norm_fp8_quant: does each kernel quantize what it
declares (the normalized value rounded to the model dtype, or its float32
product), under the scale rule it declares, bit for bit where sound
enclosures decide the codes?

vLLM's torch.compile fusion passes replace `rms_norm` then
`static_scaled_fp8_quant` (or `dynamic_per_token_scaled_fp8_quant`) with
one fused op. The unfused pair quantizes the rounded bf16 output; vLLM's
fused kernels round `out_norm` to the model dtype too (`((scalar_t)(x *
s_variance)) * weight[idx]` is a c10 16-bit product), so both are declared
`quantize_input="rounded"`; a fused kernel that quantizes the float32
product `x * rstd * w` is `"f32"`. The check names every declaration
(reading x rule) the output matches; TIES puts values on e4m3 midpoints,
where the two readings part.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. torch, unfused: Hugging Face's `LlamaRMSNorm` forward, then a static
   per-tensor quantizer, `(h.float() / s).clamp(-448, 448).to(fp8)`
   (declared rounded/divide) and `h.float() * (1.0 / s)` (rounded/
   reciprocal); with Hugging Face's residual add in the model dtype first
   (the residual written back, sum_rounding "dtype"); then the dynamic
   per-token form of vLLM's `QuantFP8.forward_native` (`(x_max /
   448.0).clamp(min=1/(448*512))`, codes `x * s.reciprocal()`: rounded/
   torch_reciprocal), with and without `scale_ub`;
2. Triton fused kernels written here: the f32 form (`x * rstd * w`
   quantized in float32: declared f32) and the rounded form (`(x *
   rstd).to(bf16) * w` rounded, then quantized: declared rounded), each
   static (`tl.div_rn`, a correctly rounded division: the reciprocal
   `div_rn(1, s)` then a multiply, as vLLM's static kernel) and dynamic
   per token (`div_rn(y, s)`, as vLLM's per-token kernel), and each
   declared as the other reading on TIES (expected to fail);
3. vLLM's `torch.ops._C.rms_norm_static_fp8_quant` and
   `fused_add_rms_norm_static_fp8_quant` (declared round_then_weight,
   rounded, reciprocal; the fused add's sum_rounding "dtype") and
   `rms_norm_dynamic_per_token_quant` (rounded, divide, per token; with
   its residual, sum_rounding "f32", and with `scale_ub`), where vLLM is
   importable.

A declaration is printed with PASS or FAIL and what every case matched; a
FAIL where PASS was expected is a finding (UNEXPECTED), not an error.
Exit status 1 only when a section fails to run, or when a torch or Triton
form written here fails its declaration.

Run on a CUDA GPU with torch (triton, vllm as installed), from any
directory:
    python3 python/examples/rms_norm_fp8_quant.py [--dtype bfloat16|float16]
"""

import argparse
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton

MIN = float(ko.MIN_SCALING_FACTOR)
SCALE_UB = 2.5


def tdtype(name):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def to_cuda(a, dt):
    """A numpy array of the check (uint16 bit patterns) on the GPU as `dt`."""
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).cuda().view(dt)


def to_numpy16(t, out):
    """A CUDA 16-bit tensor into the check's uint16 array `out` (in place)."""
    torch.cuda.synchronize()
    out[...] = t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16).reshape(out.shape)


def codes_out(qt, q):
    """CUDA e4m3 codes into the check's uint8 array `q`."""
    torch.cuda.synchronize()
    q[...] = qt.contiguous().view(torch.uint8).cpu().numpy().reshape(q.shape)


def scales_out(st, s):
    s[...] = st.float().reshape(s.shape).cpu().numpy()


def fp8():
    return torch.float8_e4m3fn


def hf_norm(h, w, eps):
    """transformers' LlamaRMSNorm.forward on a CUDA tensor: the bf16 output."""
    dt = h.dtype
    h32 = h.to(torch.float32)
    h32 = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
    return w * h32.to(dt)


def torch_static(dt, mode, residual=False):
    """Unfused: HF's norm (after HF's residual add), then a static
    per-tensor quantizer: "divide" or "reciprocal"."""

    def quant(h, scale):
        st = torch.from_numpy(scale).cuda()
        y = h.float() / st if mode == "divide" else h.float() * (1.0 / st)
        return y.clamp(-448.0, 448.0).to(fp8())

    if residual:
        def f(x, res, weight, scale, eps, q):
            s = to_cuda(res, dt) + to_cuda(x, dt)
            to_numpy16(s, res)
            codes_out(quant(hf_norm(s, to_cuda(weight, dt), eps), scale), q)
    else:
        def f(x, weight, scale, eps, q):
            codes_out(quant(hf_norm(to_cuda(x, dt), to_cuda(weight, dt), eps), scale), q)
    f.__name__ = f"torch_hf_norm_then_static_{mode}" + ("_residual" if residual else "")
    return f


def torch_dynamic(dt, scale_ub=None):
    """Unfused: HF's norm, then vLLM's QuantFP8.forward_native per token."""

    def f(x, weight, eps, q, s):
        h = hf_norm(to_cuda(x, dt), to_cuda(weight, dt), eps)
        x_max = h.abs().amax(dim=-1, keepdim=True).to(torch.float32)
        if scale_ub is not None:
            x_max = x_max.clamp(max=scale_ub)
        st = (x_max / 448.0).clamp(min=MIN)
        y = (h.to(torch.float32) * st.reciprocal()).clamp(-448.0, 448.0)
        codes_out(y.to(fp8()), q)
        scales_out(st, s)

    f.__name__ = "torch_hf_norm_then_forward_native" + ("_ub" if scale_ub is not None else "")
    return f


if triton is not None:
    @triton.jit
    def rms_norm_fp8_kernel(x_ptr, w_ptr, q_ptr, s_ptr, n_cols, eps, scale, min_scale, fp8_max,
                            ROUNDED: tl.constexpr, DYNAMIC: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        xr = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        x = xr.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        if ROUNDED:
            # The unfused norm's output, rounded to the model dtype.
            y = ((x * rstd).to(xr.dtype) * w).to(tl.float32)
        else:
            y = x * rstd * w.to(tl.float32)
        # Correctly rounded divisions (Triton's `/` is div.full.f32, 2 ulps):
        # div_rn takes two blocks or two scalars.
        if DYNAMIC:
            amax = tl.max(tl.where(mask, tl.abs(y), 0.0), axis=0)
            s = tl.maximum(tl.div_rn(amax, fp8_max), min_scale)
            tl.store(s_ptr + row, s)
            c = tl.div_rn(y, tl.zeros([BLOCK], dtype=tl.float32) + s)
        else:
            c = y * tl.div_rn(fp8_max * 0.0 + 1.0, scale)
        c = tl.minimum(tl.maximum(c, -fp8_max), fp8_max)
        # The store's conversion: cvt.rn.satfinite (round to nearest even).
        tl.store(q_ptr + row * n_cols + cols, c.to(q_ptr.dtype.element_ty), mask=mask)


def triton_form(dt, rounded, dynamic):
    def launch(x, weight, eps, scale):
        xt, w = to_cuda(x, dt), to_cuda(weight, dt)
        rows, n = xt.shape
        qt = torch.empty((rows, n), dtype=fp8(), device="cuda")
        st = torch.empty((rows,), dtype=torch.float32, device="cuda")
        rms_norm_fp8_kernel[(rows,)](xt, w, qt, st, n, eps, scale, MIN, 448.0, ROUNDED=rounded,
                                     DYNAMIC=dynamic, BLOCK=triton.next_power_of_2(n))
        return qt, st

    if dynamic:
        def f(x, weight, eps, q, s):
            qt, st = launch(x, weight, eps, 1.0)
            codes_out(qt, q)
            scales_out(st, s)
    else:
        def f(x, weight, scale, eps, q):
            qt, _ = launch(x, weight, eps, float(scale[0]))
            codes_out(qt, q)
    f.__name__ = f"triton_{'rounded' if rounded else 'f32'}_{'token' if dynamic else 'static'}"
    return f


def vllm_forms(dt):
    ops = torch.ops._C

    def static(x, weight, scale, eps, q):
        xt = to_cuda(x, dt)
        qt = torch.empty(xt.shape, dtype=fp8(), device="cuda")
        ops.rms_norm_static_fp8_quant(qt, xt, to_cuda(weight, dt), torch.from_numpy(scale).cuda(), eps)
        codes_out(qt, q)

    def static_add(x, res, weight, scale, eps, q):
        xt, rt = to_cuda(x, dt), to_cuda(res, dt)
        qt = torch.empty(xt.shape, dtype=fp8(), device="cuda")
        ops.fused_add_rms_norm_static_fp8_quant(qt, xt, rt, to_cuda(weight, dt),
                                                torch.from_numpy(scale).cuda(), eps)
        codes_out(qt, q)
        to_numpy16(rt, res)  # updated in place by the op

    def dynamic(ub=None, with_residual=False):
        def run(xt, rt, weight, eps, q, s):
            qt = torch.empty(xt.shape, dtype=fp8(), device="cuda")
            st = torch.empty((xt.shape[0], 1), dtype=torch.float32, device="cuda")
            ubt = torch.tensor([ub], dtype=torch.float32, device="cuda") if ub is not None else None
            ops.rms_norm_dynamic_per_token_quant(qt, xt, to_cuda(weight, dt), st, eps, ubt, rt)
            codes_out(qt, q)
            scales_out(st, s)

        if with_residual:
            def f(x, res, weight, eps, q, s):
                rt = to_cuda(res, dt)
                run(to_cuda(x, dt), rt, weight, eps, q, s)
                to_numpy16(rt, res)
        else:
            def f(x, weight, eps, q, s):
                run(to_cuda(x, dt), None, weight, eps, q, s)
        f.__name__ = "vllm_rms_norm_dynamic_per_token_quant" + ("_ub" if ub else "") + (
            "_residual" if with_residual else "")
        return f

    static.__name__ = "vllm_rms_norm_static_fp8_quant"
    static_add.__name__ = "vllm_fused_add_rms_norm_static_fp8_quant"
    return static, static_add, dynamic


def finding(report):
    """What every compared case admitted (the summary's phrase)."""
    tail = report.text.rsplit("every compared case admitted under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


STATIC_RECIP = dict(arithmetic="round_then_weight", quantize_input="rounded", rule="reciprocal")
TOKEN_DIVIDE = dict(arithmetic="round_then_weight", quantize_input="rounded", rule="divide",
                    granularity="token", static=False)


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

    def run(fn, expect, **kw):
        r = ko.check_rms_norm_fp8_quant(fn, dtype=args.dtype, eps=args.eps, verbose=True, **kw)
        found = finding(r)
        note = "" if r.ok == expect else " (UNEXPECTED)"
        decl = f"{kw['quantize_input']}/{kw['rule']}"
        findings.append(f"{fn.__name__}: declared {decl}, {'PASS' if r.ok else 'FAIL'}{note}; "
                        f"admitted under: {found}")
        print(f"FINDING {findings[-1]}", flush=True)
        return r

    def own(title, fn, **kw):
        """A form written here: its declaration must pass."""
        nonlocal bad
        r = section(title, 300, lambda: run(fn, True, **kw))
        if r is None or not r.ok:
            bad += 1

    own("torch: HF norm, then static x / s", torch_static(dt, "divide"),
        **dict(STATIC_RECIP, rule="divide"))
    own("torch: HF norm, then static x * (1 / s)", torch_static(dt, "reciprocal"), **STATIC_RECIP)
    own("torch: HF residual add + norm, then static x * (1 / s)",
        torch_static(dt, "reciprocal", residual=True), **STATIC_RECIP, residual=True,
        sum_rounding="dtype")
    own("torch: HF norm, then QuantFP8.forward_native per token", torch_dynamic(dt),
        **dict(TOKEN_DIVIDE, rule="torch_reciprocal"))
    own("torch: HF norm, then QuantFP8.forward_native per token, scale_ub",
        torch_dynamic(dt, SCALE_UB), **dict(TOKEN_DIVIDE, rule="torch_reciprocal"), scale_ub=SCALE_UB)
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        for rounded in (False, True):
            reading = "rounded" if rounded else "f32"
            arith = "round_then_weight" if rounded else "f32"
            own(f"Triton fused, {reading} form, static", triton_form(dt, rounded, False),
                arithmetic=arith, quantize_input=reading, rule="reciprocal")
            own(f"Triton fused, {reading} form, per token", triton_form(dt, rounded, True),
                arithmetic=arith, quantize_input=reading, rule="divide", granularity="token",
                static=False)
            # Declared as the other reading: TIES tells them apart.
            other = "f32" if rounded else "rounded"
            section(f"Triton fused, {reading} form declared {other} (expected to FAIL)", 300,
                    lambda r=rounded, a=arith, o=other: run(
                        triton_form(dt, r, False), False, arithmetic=a, quantize_input=o,
                        rule="reciprocal", arms=["TIES"]))
    try:
        from vllm import _custom_ops  # noqa: F401  (loads torch.ops._C)
        torch.ops._C.rms_norm_static_fp8_quant  # noqa: B018
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM fused norm + quant ops: not importable ({type(e).__name__}: {e}), skipped")
    else:
        static, static_add, dynamic = vllm_forms(dt)
        for title, fn, kw in [
            ("vLLM rms_norm_static_fp8_quant", static, STATIC_RECIP),
            ("vLLM fused_add_rms_norm_static_fp8_quant", static_add,
             dict(STATIC_RECIP, residual=True, sum_rounding="dtype")),
            ("vLLM rms_norm_dynamic_per_token_quant", dynamic(), TOKEN_DIVIDE),
            ("vLLM rms_norm_dynamic_per_token_quant, scale_ub", dynamic(SCALE_UB),
             dict(TOKEN_DIVIDE, scale_ub=SCALE_UB)),
            ("vLLM rms_norm_dynamic_per_token_quant, residual", dynamic(with_residual=True),
             dict(TOKEN_DIVIDE, residual=True, sum_rounding="f32")),
        ]:
            bad += section(title, 300, lambda f=fn, k=kw: run(f, True, **k)) is None
    print("\nSUMMARY (declared verdict; every declaration whose sets admitted every case)")
    for line in findings:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
