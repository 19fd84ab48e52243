"""Per-token-group INT8 activation quantizers (DeepSeek-style W8A8 int8
block quantization) judged bit for bit through
`kernel_oracle.check_int8_group_quant`: is each scale `max(eps, absmax) /
127` and each code `int8(clamp(x / s, -128, 127))` by the declared
rounding (`trunc`: toward zero, the field's kernels), and which known
rules does the output match?

Forms (CUDA tensors; bfloat16 input unless said, groups of 128), each
declared as its source computes it:
1. `triton_vllm`: vLLM's (and SGLang's) Triton
   `_per_token_group_quant_int8` written out (`tl.maximum(tl.max(
   tl.abs(y)), eps)`, `_absmax / int8_max`, `tl.clamp(y / y_s, int8_min,
   int8_max).to(tl.int8)`: a cast toward zero), declared `trunc`, reported
   as a finding: Triton's `/` on float32 is PTX's approximate
   `div.full.f32`, so scales may come out an ulp from the IEEE division
   (the FP8 twin of this kernel failed so on an H200);
2. `triton_div_rn`: the same kernel with `tl.div_rn` for both divisions:
   declared `trunc`, in all three input dtypes, EXPECTED TO PASS;
3. `triton_round_away`: the patched form that rounds before the cast
   (`libdevice.round`: ties away from zero), with `tl.div_rn`: declared
   `nearest_away`, EXPECTED TO PASS; and declared `trunc` on the TIES arm,
   EXPECTED TO FAIL (the check can fail);
4. `torch_trunc`: `absmax = x.view(m, k // 128, 128).float().abs().amax(-1)
   .clamp(min=eps)`, `s = absmax / full_like(absmax, 127.0)` (a tensor
   division: IEEE), codes `(x / s).clamp(-128, 127).to(torch.int8)`
   (torch's float-to-int8 cast truncates): declared `trunc`, EXPECTED TO
   PASS;
5. `torch_scalar`: the same with `s = absmax / 127.0` (a Python-scalar
   divisor: torch multiplies by fl(1/127), so scales may sit an ulp from
   the IEEE division's): declared `codes="torch_divide"`, EXPECTED TO
   PASS;
6. vLLM's CUDA op `torch.ops._C.per_token_group_quant_int8(x, q, s,
   group_size, eps, -128.0, 127.0)` where vLLM is importable (else
   reported as skipped): declared `trunc` in all three input dtypes,
   EXPECTED TO PASS (its `per_token_group_quant_8bit_kernel` divides and
   casts with `int8_t(q)`); and `torch.ops._C.per_token_group_fp8_quant`
   handed an int8 output with `scale_ue8m0=True` (the shared 8-bit kernel
   dispatches on the output's dtype), declared `trunc/ue8m0`, a finding.
7. UE8M0's two ceilings on the POW2 arm alone (float32 input: half its
   groups have `absmax / 127` 1 to 3 ulps above a power of two where a
   binary32 `log2` rounds back to the power), each form declared
   `ue8m0=True` (the `log2f` ceiling) and `ue8m0="exact"`:
   `triton_ue8m0_log2f` (the Triton kernel above with `tl.exp2(tl.ceil(
   tl.log2(s)))`, `tl.div_rn`) and `torch_ue8m0` (`torch.exp2(torch.ceil(
   torch.log2(s)))`) EXPECTED to pass `True` and fail `"exact"` (on an
   H100, `tl.log2` and `torch.log2` round those scales' `log2` as the
   correctly rounded model does); `triton_ue8m0_bits` (DeepEP's and
   DeepSeek's bit form `fast_log2_ceil`) EXPECTED the reverse; and, where
   vLLM is importable, its CUDA op of item 6 on float32 input under both,
   reported.

The quantizers need `k % 128 == 0` (vLLM asserts it): the ragged default
shape is refused (`ko.Refused`), counted, not failed. A declared rule is
printed with PASS or FAIL and every known rule each case matched; a FAIL
where PASS was expected, or a PASS where FAIL was, is printed as
UNEXPECTED. Exit status 1 only when a section fails to run, or when an
expectation above does not hold.

Run on a CUDA GPU with torch and triton (vllm as installed), from any
directory:
    python3 python/examples/int8_group_quant.py
"""

import argparse
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton

GROUP = 128
EPS = 1e-10
DTYPES = ["bfloat16", "float16", "float32"]

try:  # Triton 3.x
    from triton.language.extra import libdevice
except Exception:  # older Triton, or none
    try:
        libdevice = tl.math if tl is not None else None
    except Exception:
        libdevice = None


def cuda_x(x, dtype):
    """The check's x (float32, or uint16 bit patterns) as a contiguous
    CUDA tensor of its dtype."""
    if dtype == "float32":
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()
    t = torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda()
    return t.view(torch.bfloat16 if dtype == "bfloat16" else torch.float16)


def whole_groups(x):
    if x.shape[1] % GROUP:
        raise ko.Refused(f"k = {x.shape[1]} is not a multiple of group_size {GROUP} (vLLM asserts it)")


def to_outputs(qt, st, q, s):
    q[...] = qt.reshape(q.shape).cpu().numpy()
    s[...] = st.float().reshape(s.shape).cpu().numpy()


if triton is not None:

    @triton.jit
    def _group_quant_int8(y_ptr, y_q_ptr, y_s_ptr, N, eps, int8_min, int8_max, BLOCK: tl.constexpr,
                          RN: tl.constexpr, ROUND: tl.constexpr):
        # vLLM's `_per_token_group_quant_int8`: one program per group of N
        # contiguous elements (x viewed as [m * k / N, N]).
        g_id = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        y = tl.load(y_ptr + g_id * N + cols, mask=mask, other=0.0).to(tl.float32)
        _absmax = tl.maximum(tl.max(tl.abs(y)), eps)
        if RN:
            y_s = tl.div_rn(_absmax, int8_max)
            y_d = tl.div_rn(y, y_s)
        else:
            y_s = _absmax / int8_max
            y_d = y / y_s
        if ROUND:
            y_d = libdevice.round(y_d)  # the patch: ties away from zero
        y_q = tl.clamp(y_d, int8_min, int8_max).to(y_q_ptr.dtype.element_ty)
        tl.store(y_q_ptr + g_id * N + cols, y_q, mask=mask)
        tl.store(y_s_ptr + g_id, y_s)


if triton is not None:

    @triton.jit
    def _group_quant_int8_ue8m0(y_ptr, y_q_ptr, y_s_ptr, N, eps, int8_min, int8_max, BLOCK: tl.constexpr,
                                BITS: tl.constexpr):
        # The kernel above with UE8M0 scales (vLLM's scale_ue8m0): the
        # scale rounded up to a power of two through log2f, or (BITS) by
        # the bit form: the exponent, plus one for a non-zero mantissa.
        g_id = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        y = tl.load(y_ptr + g_id * N + cols, mask=mask, other=0.0).to(tl.float32)
        _absmax = tl.maximum(tl.max(tl.abs(y)), eps)
        raw = tl.maximum(tl.div_rn(_absmax, int8_max), 1e-10)
        if BITS:
            bits = raw.to(tl.uint32, bitcast=True)
            up = ((bits & 0x7FFFFF) != 0).to(tl.uint32)
            y_s = (((bits >> 23) + up) << 23).to(tl.float32, bitcast=True)
        else:
            y_s = tl.exp2(tl.ceil(tl.log2(raw)))
        y_q = tl.clamp(tl.div_rn(y, y_s), int8_min, int8_max).to(y_q_ptr.dtype.element_ty)
        tl.store(y_q_ptr + g_id * N + cols, y_q, mask=mask)
        tl.store(y_s_ptr + g_id, y_s)


def triton_ue8m0_form(bits):
    def f(x, q, s):
        whole_groups(x)
        xt = cuda_x(x, "float32")
        m, k = xt.shape
        qt = torch.empty((m, k), dtype=torch.int8, device="cuda")
        st = torch.empty((m, k // GROUP), dtype=torch.float32, device="cuda")
        _group_quant_int8_ue8m0[(m * k // GROUP,)](xt, qt, st, GROUP, EPS, -128.0, 127.0,
                                                   BLOCK=triton.next_power_of_2(GROUP), BITS=bits, num_warps=1)
        to_outputs(qt, st, q, s)

    f.__name__ = f"triton_ue8m0_{'bits' if bits else 'log2f'}"
    return f


def torch_ue8m0(x, q, s):
    whole_groups(x)
    xt = cuda_x(x, "float32")
    m, k = xt.shape
    xg = xt.view(m, k // GROUP, GROUP)
    amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=EPS)
    st = amax / torch.full_like(amax, 127.0)
    st = torch.exp2(torch.ceil(torch.log2(st.clamp(min=1e-10))))
    qt = (xg / st).clamp(-128, 127).to(torch.int8)
    to_outputs(qt, st, q, s)


def triton_form(dtype, rn, round_away=False):
    def f(x, q, s):
        whole_groups(x)
        xt = cuda_x(x, dtype)
        m, k = xt.shape
        qt = torch.empty((m, k), dtype=torch.int8, device="cuda")
        st = torch.empty((m, k // GROUP), dtype=torch.float32, device="cuda")
        _group_quant_int8[(m * k // GROUP,)](xt, qt, st, GROUP, EPS, -128.0, 127.0,
                                             BLOCK=triton.next_power_of_2(GROUP), RN=rn, ROUND=round_away,
                                             num_warps=1)
        to_outputs(qt, st, q, s)

    tag = "round_away" if round_away else ("div_rn" if rn else "vllm")
    f.__name__ = f"triton_{tag}_{dtype}"
    return f


def torch_form(dtype, scalar=False):
    def f(x, q, s):
        whole_groups(x)
        xt = cuda_x(x, dtype).float()
        m, k = xt.shape
        xg = xt.view(m, k // GROUP, GROUP)
        amax = xg.abs().amax(dim=-1, keepdim=True).clamp(min=EPS)
        st = amax / 127.0 if scalar else amax / torch.full_like(amax, 127.0)
        qt = (xg / st).clamp(-128, 127).to(torch.int8)
        to_outputs(qt, st, q, s)

    f.__name__ = f"torch_{'scalar' if scalar else 'trunc'}_{dtype}"
    return f


def vllm_form(dtype, ue8m0=False):
    def f(x, q, s):
        whole_groups(x)
        xt = cuda_x(x, dtype)
        m, k = xt.shape
        qt = torch.empty((m, k), dtype=torch.int8, device="cuda")
        st = torch.empty((m, k // GROUP), dtype=torch.float32, device="cuda")
        if ue8m0:
            torch.ops._C.per_token_group_fp8_quant(xt, qt, st, GROUP, EPS, -128.0, 127.0, True)
        else:
            torch.ops._C.per_token_group_quant_int8(xt, qt, st, GROUP, EPS, -128.0, 127.0)
        to_outputs(qt, st, q, s)

    f.__name__ = f"vllm_{'fp8_op_int8_ue8m0' if ue8m0 else 'per_token_group_quant_int8'}_{dtype}"
    return f


def main():
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {getattr(triton, '__version__', None)}")
    bad = 0
    findings = []

    def run(fn, expect, **kw):
        r = ko.check_int8_group_quant(fn, group_size=GROUP, eps=EPS, **kw)
        verdict = "PASS" if r.ok else "FAIL"
        note = "" if expect is None or expect == r.ok else " (UNEXPECTED)"
        arms = f" (arms {kw['arms']})" if "arms" in kw else ""
        u = kw.get("ue8m0")
        declared = kw.get("rounding", "trunc") + ("/ue8m0_exact" if u == "exact" else "/ue8m0" if u else "")
        line = f"{fn.__name__}: declared {declared}{arms}, {verdict}, {r.refused} refused{note}"
        findings.append(line)
        print(f"FINDING {line}", flush=True)
        return r

    plan = []
    if triton is not None:
        plan.append((triton_form("bfloat16", rn=False), None, {}))
        for dtype in DTYPES:
            plan.append((triton_form(dtype, rn=True), True, {"dtype": dtype}))
        if libdevice is not None and hasattr(libdevice, "round"):
            plan += [
                (triton_form("bfloat16", rn=True, round_away=True), True, {"rounding": "nearest_away"}),
                (triton_form("bfloat16", rn=True, round_away=True), False, {"arms": ["TIES"]}),
            ]
        else:
            print("\n=== triton libdevice.round: not importable, the rounding variant SKIPPED")
    else:
        print("\n=== triton: not importable, its forms SKIPPED")
    for dtype in DTYPES:
        plan.append((torch_form(dtype), True, {"dtype": dtype}))
    plan.append((torch_form("bfloat16", scalar=True), True, {"codes": "torch_divide"}))

    # 7: UE8M0's two ceilings on POW2, float32 input, each form under both.
    pow2 = {"dtype": "float32", "arms": ["POW2"]}
    ceiling_forms = [(torch_ue8m0, True)]
    if triton is not None:
        ceiling_forms += [(triton_ue8m0_form(False), True), (triton_ue8m0_form(True), "exact")]
    for fn, own in ceiling_forms:
        for declared in (True, "exact"):
            plan.append((fn, declared == own, {**pow2, "ue8m0": declared}))

    try:
        from vllm import _custom_ops  # noqa: F401 (loads vllm._C, which registers torch.ops._C)
        has_int8 = hasattr(torch.ops._C, "per_token_group_quant_int8")
        has_fp8 = hasattr(torch.ops._C, "per_token_group_fp8_quant")
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM per_token_group_quant_int8: not importable ({type(e).__name__}: {e}), SKIPPED")
    else:
        if has_int8:
            for dtype in DTYPES:
                plan.append((vllm_form(dtype), True, {"dtype": dtype}))
        else:
            print("\n=== torch.ops._C.per_token_group_quant_int8: absent in this vLLM, SKIPPED")
        if has_fp8:
            plan.append((vllm_form("bfloat16", ue8m0=True), None, {"ue8m0": True}))
            for declared in (True, "exact"):
                plan.append((vllm_form("float32", ue8m0=True), None,
                             {"dtype": "float32", "arms": ["POW2"], "ue8m0": declared}))

    for fn, expect, kw in plan:
        r = section(f"{fn.__name__} {kw}", 300, lambda f=fn, e=expect, k=kw: run(f, e, **k))
        if r is None:
            bad += 1
        elif expect is not None and r.ok != expect:
            bad += 1
    print("\nSUMMARY")
    for line in findings:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
