"""Per-token-group FP8 activation quantizers as the field runs them,
judged bit for bit through `kernel_oracle.check_fp8_group_quant`:

- `torch_divide`: the pure-torch form (CUDA tensors): `amax =
  x.abs().amax(-1).clamp(min=eps)`, `s = amax / 448`, codes of `(x /
  s).clamp(-448, 448).to(torch.float8_e4m3fn)`, declared `reciprocal`:
  torch divides a CUDA tensor by a Python scalar as a multiply by the
  scalar's binary32 reciprocal, so half the scales sit one ulp from an
  IEEE division's (measured on the H200: declared `divide`, it failed
  with scales one ulp off and named no rule);
- `triton_divide`: a Triton kernel with the structure of vLLM's
  `_per_token_group_quant_fp8` (`tl.max(tl.abs(y))`, `tl.maximum(.., eps)`,
  `/ fp8_max`, `y / y_s`, `tl.clamp`, `.to(fp8)`), declared `divide`, and
  EXPECTED TO FAIL: Triton's `/` on float32 is PTX's approximate
  `div.full.f32`, so scales come out one ulp off and codes one e4m3 step
  off at rounding ties (the finding: vLLM's Triton quantizer and its CUDA
  kernel do not produce the same bits);
- `triton_div_rn`: the same kernel with `tl.div_rn` (IEEE division)
  for both divisions, declared `divide`;
- `torch_ue8m0`: DeepGEMM's `per_token_cast_to_fp8(..., use_ue8m0=True)`
  form (`amax.clamp(1e-4)`, `sf = amax / 448`, `2 ** ceil(log2(sf))` in
  float32, codes of `x * (1 / sf)`), declared `ue8m0` with eps 1e-4:
  the rule takes the ceiling of a correctly rounded binary32 `log2`, so
  torch's `log2` must round `log2(2^k (1 + 2^-23))` as that does (to
  `k` for `|k| >= 4`), which the POW2 arm tests.

Then UE8M0's two ceilings on the POW2 arm alone (float32 input; half its
groups have `amax / 448` 1 to 3 ulps above a power of two where a binary32
`log2` rounds back to the power), each form declared `ue8m0` (the
`log2f` ceiling) and `ue8m0_exact` (the exact ceiling), printing which
passes:
- `torch_ue8m0` (`torch.log2`) and `triton_ue8m0_log2f` (vLLM's Triton
  `_per_token_group_quant_fp8` with `use_ue8m0`: `tl.exp2(tl.ceil(
  tl.log2(s)))`, divisions by `tl.div_rn`): EXPECTED to pass `ue8m0` and
  fail `ue8m0_exact` (on an H100, `torch.log2` and `tl.log2` round those
  scales' `log2` as the correctly rounded model does);
- `triton_ue8m0_bits`: the same kernel with the bit form of DeepEP's and
  DeepSeek's `fast_log2_ceil` (exponent plus one for a non-zero
  mantissa): EXPECTED to pass `ue8m0_exact` and fail `ue8m0`.

Each row names every known rule the output matches. Exit status 1 unless
every check ends as expected (passes, or fails where marked). Run on a
CUDA GPU with torch and triton:
    python3 python/examples/group_quant_fp8.py
"""

import sys

import torch
import triton
import triton.language as tl

import kernel_oracle as ko

DEV = "cuda"
FP8 = torch.float8_e4m3fn


def to_outputs(qt, st, q, s):
    q[...] = qt.view(torch.uint8).cpu().numpy()
    s[...] = st.cpu().numpy()


def groups(x, group=128):
    xt = torch.from_numpy(x).to(DEV)
    m, k = xt.shape
    if k % group:
        raise ko.Refused("k must be a multiple of the group")
    return xt.view(m, k // group, group)


def torch_divide(x, q, s, eps=1e-10):
    xg = groups(x)
    amax = xg.abs().amax(-1).clamp(min=eps)
    sc = amax / 448.0
    qt = (xg / sc.unsqueeze(-1)).clamp(-448.0, 448.0).to(FP8)
    to_outputs(qt.view(x.shape), sc, q, s)


@triton.jit
def _group_quant(y_ptr, q_ptr, s_ptr, eps, fp8_min, fp8_max, GROUP: tl.constexpr, RN: tl.constexpr):
    g = tl.program_id(0)
    cols = tl.arange(0, GROUP)
    y = tl.load(y_ptr + g * GROUP + cols).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(y)), eps)
    if RN:
        y_s = tl.div_rn(amax, fp8_max)
        y_d = tl.div_rn(y, y_s)
    else:
        y_s = amax / fp8_max
        y_d = y / y_s
    y_q = tl.clamp(y_d, fp8_min, fp8_max).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + g * GROUP + cols, y_q)
    tl.store(s_ptr + g, y_s)


def launch(kernel, x, q, s, eps, **flags):
    """One program per group of `kernel` on `x`'s groups, its codes and
    scales written into `q` and `s`."""
    xg = groups(x)
    m, n, group = xg.shape
    qt = torch.empty((m, n * group), dtype=FP8, device=DEV)
    st = torch.empty((m, n), dtype=torch.float32, device=DEV)
    kernel[(m * n,)](xg.contiguous(), qt, st, eps, -448.0, 448.0, GROUP=group, **flags)
    to_outputs(qt, st, q, s)


def triton_quant(x, q, s, eps, rn):
    launch(_group_quant, x, q, s, eps, RN=rn)


def triton_divide(x, q, s, eps=1e-10):
    triton_quant(x, q, s, eps, False)


def triton_div_rn(x, q, s, eps=1e-10):
    triton_quant(x, q, s, eps, True)


@triton.jit
def _group_quant_ue8m0(y_ptr, q_ptr, s_ptr, eps, fp8_min, fp8_max, GROUP: tl.constexpr, BITS: tl.constexpr):
    g = tl.program_id(0)
    cols = tl.arange(0, GROUP)
    y = tl.load(y_ptr + g * GROUP + cols).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(y)), eps)
    raw = tl.maximum(tl.div_rn(amax, fp8_max), 1e-10)
    if BITS:
        # fast_log2_ceil then fast_pow2: the exponent, plus one for a
        # non-zero mantissa (raw is positive and normal).
        bits = raw.to(tl.uint32, bitcast=True)
        up = ((bits & 0x7FFFFF) != 0).to(tl.uint32)
        y_s = (((bits >> 23) + up) << 23).to(tl.float32, bitcast=True)
    else:
        y_s = tl.exp2(tl.ceil(tl.log2(raw)))
    y_q = tl.clamp(tl.div_rn(y, y_s), fp8_min, fp8_max).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + g * GROUP + cols, y_q)
    tl.store(s_ptr + g, y_s)


def triton_ue8m0(x, q, s, eps, bits):
    launch(_group_quant_ue8m0, x, q, s, eps, BITS=bits)


def triton_ue8m0_log2f(x, q, s, eps=1e-10):
    triton_ue8m0(x, q, s, eps, False)


def triton_ue8m0_bits(x, q, s, eps=1e-10):
    triton_ue8m0(x, q, s, eps, True)


def torch_ue8m0(x, q, s):
    xg = groups(x)
    amax = xg.abs().float().amax(-1).clamp(1e-4)
    sf = amax / 448.0
    sf = torch.pow(2.0, torch.ceil(torch.log2(sf.abs())))
    qt = (xg * (1.0 / sf.unsqueeze(-1))).to(FP8)
    to_outputs(qt.view(x.shape), sf, q, s)


def main():
    plan = [
        (torch_divide, "reciprocal", 1e-10, True),
        (triton_divide, "divide", 1e-10, False),
        (triton_div_rn, "divide", 1e-10, True),
        (torch_ue8m0, "ue8m0", 1e-4, True),
    ]
    unexpected = 0
    for fn, rule, eps, should_pass in plan:
        ok = bool(ko.check_fp8_group_quant(fn, rule=rule, eps=eps))
        print(f"{fn.__name__} declared {rule}: {'PASS' if ok else 'FAIL'}, "
              f"{'as expected' if ok == should_pass else 'NOT as expected'}")
        unexpected += ok != should_pass
    # UE8M0's two ceilings on POW2 alone: each form under both declarations.
    print("\nUE8M0 ceilings on POW2 (float32 input):")
    ceilings = [
        (torch_ue8m0, 1e-4, "ue8m0"),
        (triton_ue8m0_log2f, 1e-10, "ue8m0"),
        (triton_ue8m0_bits, 1e-10, "ue8m0_exact"),
    ]
    for fn, eps, own in ceilings:
        for rule in ["ue8m0", "ue8m0_exact"]:
            r = ko.check_fp8_group_quant(fn, rule=rule, eps=eps, arms=["POW2"], verbose=False)
            should_pass = rule == own
            print(f"{fn.__name__} declared {rule} on POW2: {'PASS' if r.ok else 'FAIL'} "
                  f"({r.failed} of {r.cases} cases failed), "
                  f"{'as expected' if r.ok == should_pass else 'NOT as expected'}")
            if not r.ok:
                named = [ln.strip() for ln in r.failures[0].splitlines() if "the output matches" in ln]
                print("  " + (named[0] if named else r.failures[0].splitlines()[0]))
            unexpected += r.ok != should_pass
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
