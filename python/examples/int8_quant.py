"""INT8 activation quantizers for W8A8 int8 GEMMs, judged bit for bit
through `kernel_oracle.check_int8_quant`: is each code exactly the
declared rule's (round to nearest even, saturating), is each scale and
zero point the declared one, and which known rules does the output match?

Forms (CUDA tensors; float32, bfloat16 and float16 activations, each
converted to float32 exactly first), each declared as it is believed to
compute:
1. torch, dynamic per token, symmetric: `amax = x.abs().amax(-1)`, `s =
   amax / full_like(amax, 127.0)` (a tensor division: IEEE), codes of
   `(x / s).round().clamp(-128, 127)` (NaN, from a zero row's 0/0, to 0
   first): declared `divide`; with `r = full_like(amax, 127.0) / amax`
   and `x * r`: declared `reciprocal`;
2. torch, `s = amax / 127.0` (a Python scalar divisor: torch multiplies
   by fl(1/127), so scales may sit an ulp from the contract's): declared
   `divide`, reported as a finding (run 91 on an H100: 10 of 40 cases an
   ulp off), and declared `torch_divide`, EXPECTED TO PASS;
3. torch with `roundf`'s rounding (`sign(y) * floor(|y| + 0.5)`):
   declared `reciprocal`, EXPECTED TO FAIL at TIES (the check can fail);
4. torch, dynamic per token, asymmetric: `s = (max - min) / 255`, `azp =
   (-128 - min / s).round()`, codes `((x / s).round() + azp).clamp(-128,
   127)`: declared `divide`;
5. torch, static (scale 0.3; asymmetric: scale 0.05, azp -19): declared
   `divide`;
6. vLLM's `_custom_ops.scaled_int8_quant` where vLLM is importable (else
   reported as skipped): dynamic symmetric (`dynamic_scaled_int8_quant_kernel`,
   declared `reciprocal`) in all three input dtypes; static symmetric
   (declared `divide`); static and dynamic asymmetric
   (`dynamic_scaled_int8_azp_quant_kernel`) under the default rule, vLLM's
   since PR #19233 (June 2025: `x * fl(1 / s)`, the maximum started at
   `lowest()`), each reported as a finding: a vLLM from before that PR
   divides (the rows then match `divide`) and starts its maximum at
   `FLT_MIN`, which fails SIGN's all-negative rows.

A declared rule is printed with PASS or FAIL and every known rule each
case matched; a FAIL where PASS was expected is a finding (printed as
UNEXPECTED), not an error. Exit status 1 only when a section fails to
run, or when the roundf form passes (a check that cannot fail).

Run on a CUDA GPU with torch (vllm as installed), from any directory:
    python3 python/examples/int8_quant.py
"""

import argparse
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, torch

STATIC = 0.3
STATIC_ASYM = (0.05, -19)
DTYPES = ["float32", "bfloat16", "float16"]


def cuda_x(x, dtype):
    """The check's x (float32, or uint16 bit patterns) as a CUDA tensor
    of its dtype."""
    if dtype == "float32":
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()
    t = torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda()
    return t.view(torch.bfloat16 if dtype == "bfloat16" else torch.float16)


def to_outputs(qt, st, zt, q, s, azp):
    """A quantizer's CUDA codes, scales and zero points into the check's
    arrays."""
    q[...] = qt.to(torch.int8).cpu().numpy()
    s[...] = st.float().reshape(s.shape).cpu().numpy()
    if azp is not None:
        azp[...] = zt.to(torch.int32).reshape(azp.shape).cpu().numpy()


def cvt(y):
    """cvt.rni.sat.s8 in torch: NaN to 0, round half to even, saturate."""
    return torch.nan_to_num(y, nan=0.0).round().clamp(-128, 127)


def torch_symmetric(dtype, codes, scalar_scale=False, roundf=False):
    """Dynamic per-token symmetric: codes "divide" (x / s) or
    "reciprocal" (x * (127 / amax))."""

    def f(x, q, s, azp):
        xt = cuda_x(x, dtype).float()
        amax = xt.abs().amax(dim=-1, keepdim=True)
        st = amax / 127.0 if scalar_scale else amax / torch.full_like(amax, 127.0)
        y = xt / st if codes == "divide" else xt * (torch.full_like(amax, 127.0) / amax)
        if roundf:
            y = torch.nan_to_num(y, nan=0.0)
            qt = (torch.sign(y) * torch.floor(y.abs() + 0.5)).clamp(-128, 127)
        else:
            qt = cvt(y)
        to_outputs(qt, st, None, q, s, azp)

    tag = "_scalar" if scalar_scale else ("_roundf" if roundf else "")
    f.__name__ = f"torch_dynamic_{codes}{tag}_{dtype}"
    return f


def torch_asymmetric(dtype):
    def f(x, q, s, azp):
        xt = cuda_x(x, dtype).float()
        mx = xt.amax(dim=-1, keepdim=True)
        mn = xt.amin(dim=-1, keepdim=True)
        st = (mx - mn) / torch.full_like(mx, 255.0)
        zt = (torch.full_like(mn, -128.0) - mn / st).round()
        qt = ((xt / st).round() + zt).clamp(-128, 127)
        to_outputs(qt, st, zt, q, s, azp)

    f.__name__ = f"torch_dynamic_azp_{dtype}"
    return f


def torch_static(dtype, symmetric):
    scale, z = (STATIC, 0) if symmetric else STATIC_ASYM

    def f(x, q, s, azp):
        xt = cuda_x(x, dtype).float()
        st = torch.tensor([scale], dtype=torch.float32, device="cuda")
        y = xt / st
        qt = cvt(y) if symmetric else (y.round() + z).clamp(-128, 127)
        to_outputs(qt, st, torch.tensor([z], device="cuda"), q, s, azp)

    f.__name__ = f"torch_static_{'sym' if symmetric else 'azp'}_{dtype}"
    return f


def vllm_form(ops, dtype, mode, symmetric):
    def f(x, q, s, azp):
        xt = cuda_x(x, dtype)
        if mode == "static":
            scale, z = (STATIC, None) if symmetric else STATIC_ASYM
            st = torch.tensor([scale], dtype=torch.float32, device="cuda")
            zt = None if z is None else torch.tensor([z], dtype=torch.int32, device="cuda")
            qt, st, zt = ops.scaled_int8_quant(xt, st, zt, symmetric=symmetric)
        else:
            qt, st, zt = ops.scaled_int8_quant(xt, symmetric=symmetric)
        to_outputs(qt, st, zt, q, s, azp)

    f.__name__ = f"vllm_scaled_int8_quant_{mode}_{'sym' if symmetric else 'azp'}_{dtype}"
    return f


def static_kw(symmetric):
    if symmetric:
        return {"mode": "static", "scale": STATIC}
    return {"mode": "static", "symmetric": False, "scale": STATIC_ASYM[0], "azp": STATIC_ASYM[1]}


def main():
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = 0
    findings = []

    def run(fn, expect, **kw):
        r = ko.check_int8_quant(fn, **kw)
        verdict = "PASS" if r.ok else "FAIL"
        note = "" if expect is None or expect == r.ok else " (UNEXPECTED)"
        arms = f" (arms {kw['arms']})" if "arms" in kw else ""
        line = f"{fn.__name__}: declared {kw.get('rule', 'vLLM default')}{arms}, {verdict}{note}"
        findings.append(line)
        print(f"FINDING {line}", flush=True)
        return r

    plan = []
    for dtype in DTYPES:
        plan += [
            (torch_symmetric(dtype, "divide"), True, {"rule": "divide", "dtype": dtype}),
            (torch_symmetric(dtype, "reciprocal"), True, {"rule": "reciprocal", "dtype": dtype}),
            (torch_asymmetric(dtype), True, {"symmetric": False, "rule": "divide", "dtype": dtype}),
            (torch_static(dtype, True), True, dict(static_kw(True), rule="divide", dtype=dtype)),
            (torch_static(dtype, False), True, dict(static_kw(False), rule="divide", dtype=dtype)),
        ]
    plan += [
        (torch_symmetric("float32", "divide", scalar_scale=True), None, {"rule": "divide"}),
        (torch_symmetric("float32", "divide", scalar_scale=True), True, {"rule": "torch_divide"}),
        (torch_symmetric("float32", "reciprocal", roundf=True), False, {"rule": "reciprocal", "arms": ["TIES"]}),
    ]
    for fn, expect, kw in plan:
        r = section(f"{fn.__name__}", 300, lambda f=fn, e=expect, k=kw: run(f, e, **k))
        if r is None:
            bad += 1
        elif "roundf" in fn.__name__ and r.ok:
            print("UNEXPECTED: the roundf form passed; the TIES arm cannot fail")
            bad += 1
    try:
        from vllm import _custom_ops as ops
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM scaled_int8_quant: not importable ({type(e).__name__}: {e}), SKIPPED")
    else:
        vplan = []
        for dtype in DTYPES:
            vplan.append((vllm_form(ops, dtype, "dynamic", True), True, {"dtype": dtype}))
        vplan += [
            (vllm_form(ops, "bfloat16", "static", True), True, dict(static_kw(True), dtype="bfloat16")),
            # The zero-point kernels: findings, as vLLM's version decides
            # (before PR #19233: divide, and max_val = FLT_MIN, which SIGN's
            # all-negative rows fail).
            (vllm_form(ops, "bfloat16", "static", False), None, dict(static_kw(False), dtype="bfloat16")),
            (vllm_form(ops, "bfloat16", "dynamic", False), None, {"symmetric": False, "dtype": "bfloat16"}),
        ]
        for fn, expect, kw in vplan:
            r = section(f"{fn.__name__} {kw.get('arms', '')}", 300, lambda f=fn, e=expect, k=kw: run(f, e, **k))
            bad += r is None
    print("\nSUMMARY")
    for line in findings:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
