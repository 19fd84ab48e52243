"""Merging two partial attention states by their log-sum-exps (split-KV,
cascade prefix + suffix, chunked prefill's context + new tokens) as the
field runs it, through kernel_oracle.check_merge_attn_states: does each
kernel stay inside the sound enclosure of its declaration (LSE base e or
2, both-empty policy `prefix` or `zero`, `+inf` read as empty or not, LSE
layout `[H, T]` or `[T, H]`), and which declarations does it match?

Sections, each under its own time limit; a library this host does not
have is reported as skipped, not as a failure (a shape a kernel refuses
is counted as refused by the check):
1. torch forms of vLLM's formula (any infinity empty, `exp`, two
   divisions, the prefix copied when both sides are empty) in float32,
   bfloat16 and float16: declared e/prefix/head_major, expected PASS;
2. a Triton kernel in the form of vLLM's `merge_attn_states_kernel`
   (`tl.exp`, `tl.log`, Triton's `/`), written here: before the NaN fix
   (`-inf - -inf` when both sides are empty), expected to FAIL EMPTY_BOTH
   (and POS_INF's `+inf, +inf` pairs); after it (the maximum clamped to
   -1e30, 1e-10 in the scales' denominator: zeros), declared `zero`,
   expected PASS, in the chosen dtype and in float32 (where the decided
   outputs test that Triton's approximate division is exact by 1 and 2);
   the fixed one also with `output_lse="in_place"` (the output LSE
   aliasing prefix_lse, as vLLM's callers do);
3. vLLM's own ops where vLLM is installed: the CUDA op
   (`vllm._custom_ops.merge_attn_states`, declared prefix; also in place:
   the race of PR 40924 when one head's threads span two blocks) and the
   Triton op (declared zero: the installed version shows whether it has
   PR 39148);
4. SGLang's `sgl_kernel.merge_state_v2` (LSEs `[T, H]`, natural log,
   declared prefix) and FlashInfer's `flashinfer.merge_state` (LSEs
   `[T, H]`, base 2, `+inf` not empty, declared zero) where installed;
5. FlashAttention 2's split-KV combine (`combine_attn_seqk_parallel`) for
   two splits written in torch: the output LSE first (`log(sum exp(lse -
   max)) + max`), then each scale `exp(lse - out_lse)` (all 0 where both
   sides are empty: FA2's `+inf` LSE there, written here as `-inf`), `out
   = p_scale p + s_scale s` in float32: declared `scales="lse_out"`,
   expected PASS; declared with the weights' scales, a finding (the numpy
   form fails EQUAL and LARGE in bfloat16).

Each run prints the check's rows and a FINDING line: the declared verdict
and every declaration whose intervals admitted every case. Exit status 1
when a section fails to run or a kernel written here does not give its
expected verdict; the library ops' verdicts are findings, not failures.

Run on a GPU with torch (and Triton; vLLM, sgl_kernel, flashinfer
optional), from any directory:
    python3 python/examples/merge_attn_states.py
"""

import argparse
import importlib
import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton


def tdtype(name):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16,
            "float32": torch.float32}[name]


def to_cuda(a, dt):
    """A numpy array of the check (uint16 bit patterns, or float32) on the
    GPU as `dt`."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.float32:
        return torch.from_numpy(a).cuda().to(dt)
    return torch.from_numpy(a.view(np.int16)).cuda().view(dt)


def to_numpy(t, out):
    """A CUDA tensor into the check's output array `out` (uint16 bit
    patterns of a 16-bit float, or float32)."""
    torch.cuda.synchronize()
    t = t.contiguous()
    if out.dtype == np.float32:
        out[...] = t.float().cpu().numpy().reshape(out.shape)
    else:
        out[...] = t.view(torch.int16).cpu().numpy().view(np.uint16).reshape(out.shape)


def lse_tensors(pl, sl, out_lse):
    """The LSE arrays on the GPU; the output LSE aliases the prefix's when
    the check hands prefix_lse itself (`output_lse="in_place"`)."""
    PL = torch.from_numpy(np.ascontiguousarray(pl)).cuda()
    SL = torch.from_numpy(np.ascontiguousarray(sl)).cuda()
    if out_lse is None:
        return PL, SL, None
    OL = PL if out_lse is pl else torch.empty_like(PL)
    return PL, SL, OL


def finding(report):
    """What every compared case admitted (the summary's phrase)."""
    tail = report.text.rsplit("every compared case admitted under: ", 1)[-1]
    return tail.rsplit(";", 1)[0].strip()


def torch_states(p, pl, s, sl, out_lse, dt):
    """The two states on the GPU as the torch forms read them: the outputs
    in float32 `[T, H, D]`, the LSEs `[H, T]` with any infinity read as
    `-inf` (`a`, `b`), their maximum with 0 where both are empty (`m0`),
    that mask (`both`), and the output LSE tensor (or None)."""
    P, S = to_cuda(p, dt).float(), to_cuda(s, dt).float()
    PL, SL, OL = lse_tensors(pl, sl, out_lse)
    inf = float("inf")
    a = torch.where(torch.isinf(PL), -inf, PL)
    b = torch.where(torch.isinf(SL), -inf, SL)
    m = torch.maximum(a, b)
    both = torch.isinf(m)
    return P, S, a, b, torch.where(both, 0.0, m), both, OL


def torch_vllm(dt):
    """vLLM's formula in torch (its test's reference with the both-empty
    copy of the CUDA kernel): any infinity empty, max, `exp(lse - max)`,
    scales by division, `p_out * p_scale + s_out * s_scale` in float32,
    `log(out_se) + max`."""

    def fn(p, pl, s, sl, out, out_lse):
        P, S, a, b, m0, both, OL = torch_states(p, pl, s, sl, out_lse, dt)
        inf = float("inf")
        pe, se_ = torch.exp(a - m0), torch.exp(b - m0)
        se = pe + se_
        safe = torch.where(both, 1.0, se)
        ps, ss = (pe / safe).T[..., None], (se_ / safe).T[..., None]
        o = torch.where(both.T[..., None], P, P * ps + S * ss)
        if OL is not None:
            OL.copy_(torch.where(both, -inf, torch.log(se) + m0))
            to_numpy(OL, out_lse)
        to_numpy(o.to(dt), out)

    fn.__name__ = f"torch_vllm_{str(dt).split('.')[-1]}"
    return fn


def torch_flash_combine(dt):
    """FlashAttention 2's combine of two splits in torch float32: `m =
    max(lse)` (0 where both are empty), `out_lse = log(exp(p - m) + exp(s
    - m)) + m`, the scales `exp(lse - out_lse)` (0 for an empty side, and
    both when both are empty), `out = p * p_scale + s * s_scale`."""

    def fn(p, pl, s, sl, out, out_lse):
        P, S, a, b, m0, both, OL = torch_states(p, pl, s, sl, out_lse, dt)
        inf = float("inf")
        lse = torch.log(torch.exp(a - m0) + torch.exp(b - m0)) + m0
        lse0 = torch.where(both, inf, lse)  # FA2's +inf: every scale exp(-inf) = 0
        ps, ss = torch.exp(a - lse0).T[..., None], torch.exp(b - lse0).T[..., None]
        o = P * ps + S * ss
        if OL is not None:
            OL.copy_(torch.where(both, -inf, lse))
            to_numpy(OL, out_lse)
        to_numpy(o.to(dt), out)

    fn.__name__ = f"torch_flash_combine_{str(dt).split('.')[-1]}"
    return fn


if triton is not None:
    # vLLM's merge_attn_states_kernel form, written here: one program per
    # (token, head), LSEs [H, T]; FIXED: the maximum clamped to -1e30 and
    # 1e-10 added to the scales' denominator (both sides empty give 0).
    @triton.jit
    def _merge_kernel(out, out_lse, p_out, p_lse, s_out, s_lse, num_tokens, num_heads,
                      HEAD_SIZE: tl.constexpr, PADDED: tl.constexpr,
                      OUTPUT_LSE: tl.constexpr, FIXED: tl.constexpr):
        t = tl.program_id(0)
        h = tl.program_id(1)
        pl = tl.load(p_lse + h * num_tokens + t)
        sl = tl.load(s_lse + h * num_tokens + t)
        pl = tl.where(pl == float("inf"), float("-inf"), pl)
        sl = tl.where(sl == float("inf"), float("-inf"), sl)
        m = tl.maximum(pl, sl)
        if FIXED:
            m = tl.maximum(m, -1e30)
        pse = tl.exp(pl - m)
        sse = tl.exp(sl - m)
        se = pse + sse
        if OUTPUT_LSE:
            tl.store(out_lse + h * num_tokens + t, tl.log(se) + m)
        if FIXED:
            den = se + 1e-10
        else:
            den = se
        ps = pse / den
        ss = sse / den
        offs = tl.arange(0, PADDED)
        mask = offs < HEAD_SIZE
        row = (t * num_heads + h) * HEAD_SIZE
        po = tl.load(p_out + row + offs, mask=mask).to(tl.float32)
        so = tl.load(s_out + row + offs, mask=mask).to(tl.float32)
        o = po * ps + so * ss
        tl.store(out + row + offs, o.to(out.dtype.element_ty), mask=mask)


def triton_merge(dt, fixed):
    def fn(p, pl, s, sl, out, out_lse):
        P, S = to_cuda(p, dt), to_cuda(s, dt)
        PL, SL, OL = lse_tensors(pl, sl, out_lse)
        O = torch.empty_like(P)
        T, H, D = P.shape
        _merge_kernel[(T, H)](O, OL if OL is not None else PL, P, PL, S, SL, T, H,
                              HEAD_SIZE=D, PADDED=triton.next_power_of_2(D),
                              OUTPUT_LSE=OL is not None, FIXED=fixed)
        if OL is not None:
            to_numpy(OL, out_lse)
        to_numpy(O, out)

    fn.__name__ = "triton_merge_fixed" if fixed else "triton_merge_prefix_nan"
    return fn


def vllm_op(dt, op, name):
    """A vLLM op `op(output, prefix_output, prefix_lse, suffix_output,
    suffix_lse, output_lse)`; a shape it rejects is refused."""

    def fn(p, pl, s, sl, out, out_lse):
        P, S = to_cuda(p, dt), to_cuda(s, dt)
        PL, SL, OL = lse_tensors(pl, sl, out_lse)
        O = torch.empty_like(P)
        try:
            op(O, P, PL, S, SL, OL)
        except (RuntimeError, AssertionError, ValueError) as e:
            raise ko.Refused(f"{name}: {str(e).splitlines()[0][:120]}")
        if OL is not None:
            to_numpy(OL, out_lse)
        to_numpy(O, out)

    fn.__name__ = name
    return fn


def state_op(dt, op, name):
    """SGLang's `merge_state_v2(v_a, s_a, v_b, s_b)` and FlashInfer's
    `merge_state(v_a, s_a, v_b, s_b)`: LSEs [T, H], new (v, s) returned."""

    def fn(p, pl, s, sl, out, out_lse):
        P, S = to_cuda(p, dt), to_cuda(s, dt)
        PL, SL, _ = lse_tensors(pl, sl, None)
        try:
            v, lse = op(P, PL, S, SL)[:2]
        except (RuntimeError, AssertionError, ValueError, TypeError) as e:
            raise ko.Refused(f"{name}: {str(e).splitlines()[0][:120]}")
        to_numpy(v, out)
        to_numpy(lse, out_lse)

    fn.__name__ = name
    return fn


def first_import(*paths):
    """The first `module:attribute` of `paths` that imports, or None."""
    for p in paths:
        mod, attr = p.split(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError):
            continue
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="the dtype of sections 2 to 4 (section 1 runs all three)")
    args = p.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    dt = tdtype(args.dtype)
    bad = 0
    findings = []

    def run(fn, expect=None, **kw):
        """Runs the check; `expect`: None (a finding), "PASS", or a set of
        arms that must fail (and no other)."""
        r = ko.check_merge_attn_states(fn, verbose=True, **kw)
        compared = r.cases - r.refused
        verdict = "SKIPPED (every case refused)" if compared == 0 else (
            "PASS" if r.ok else "FAIL")
        failed = sorted({x.split("arms=[\"", 1)[1].split("\"", 1)[0] for x in r.reproductions})
        ok = True
        if expect == "PASS":
            ok = r.ok
        elif expect is not None:
            ok = set(failed) == set(expect)
        note = "" if expect is None else ("; as expected" if ok else f"; UNEXPECTED (expected {expect})")
        decl = ", ".join(f"{k}={v!r}" for k, v in kw.items())
        print(f"FINDING {fn.__name__} ({decl}): {verdict}; arms failing: {failed or 'none'}; "
              f"{r.refused} refused; matches: {finding(r)}{note}")
        findings.append(f"{fn.__name__} ({decl}): {verdict}; failing {failed or 'none'}; "
                        f"{finding(r)}{note}")
        if not ok:
            raise AssertionError(f"{fn.__name__}: {verdict}, failing {failed}, expected {expect}")
        return r

    for name in ["float32", "bfloat16", "float16"]:
        bad += section(f"torch vLLM formula {name}", 300, lambda n=name: run(
            torch_vllm(tdtype(n)), "PASS", dtype=n)) is None
    for name in ["float32", "bfloat16"]:
        bad += section(f"torch FlashAttention 2 combine {name}, scales lse_out", 300,
                       lambda n=name: run(torch_flash_combine(tdtype(n)), "PASS", dtype=n,
                                          empty="zero", scales="lse_out")) is None
    bad += section("torch FlashAttention 2 combine, the weights' scales declared", 300,
                   lambda: run(torch_flash_combine(dt), dtype=args.dtype, empty="zero")) is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        bad += section("Triton merge, before the NaN fix", 300, lambda: run(
            triton_merge(dt, False), {"EMPTY_BOTH", "POS_INF"}, dtype=args.dtype,
            empty="zero")) is None
        # float32 too: its one-side-empty and equal-LSE outputs are decided
        # in binary32, so they test MERGE-EXACT's rule that Triton's `/`
        # (div.full.f32, an approximate reciprocal) is exact at 1 and 2.
        for name in sorted({args.dtype, "float32"}):
            bad += section(f"Triton merge, after the NaN fix, {name}", 300, lambda n=name: run(
                triton_merge(tdtype(n), True), "PASS", dtype=n, empty="zero")) is None
        bad += section("Triton merge, after the fix, output LSE in place", 300, lambda: run(
            triton_merge(dt, True), "PASS", dtype=args.dtype, empty="zero",
            output_lse="in_place")) is None
    cuda_op = first_import("vllm._custom_ops:merge_attn_states")
    if cuda_op is None:
        print("\n=== vLLM CUDA merge_attn_states: vllm not importable, skipped")
    else:
        for mode in [True, "in_place"]:
            bad += section(f"vLLM CUDA merge_attn_states, output_lse={mode!r}", 300,
                           lambda m=mode: run(vllm_op(dt, cuda_op, "vllm_cuda"),
                                              dtype=args.dtype, output_lse=m)) is None
    tri_op = first_import("vllm.attention.ops.triton_merge_attn_states:merge_attn_states",
                          "vllm.v1.attention.ops.triton_merge_attn_states:merge_attn_states")
    if tri_op is None:
        print("\n=== vLLM Triton merge_attn_states: not importable, skipped")
    else:
        bad += section("vLLM Triton merge_attn_states", 300, lambda: run(
            vllm_op(dt, tri_op, "vllm_triton"), dtype=args.dtype, empty="zero")) is None
    sgl = first_import("sgl_kernel:merge_state_v2")
    if sgl is None:
        print("\n=== SGLang merge_state_v2: sgl_kernel not importable, skipped")
    else:
        bad += section("SGLang merge_state_v2", 300, lambda: run(
            state_op(dt, sgl, "sglang_merge_state_v2"), dtype=args.dtype,
            lse_layout="token_major")) is None
    fi = first_import("flashinfer:merge_state")
    if fi is None:
        print("\n=== FlashInfer merge_state: flashinfer not importable, skipped")
    else:
        bad += section("FlashInfer merge_state", 300, lambda: run(
            state_op(dt, fi, "flashinfer_merge_state"), dtype=args.dtype, base="2",
            lse_layout="token_major", empty="zero", inf_is_empty=False)) is None
    print("\nSUMMARY (verdict; arms failing; every declaration admitting every case)")
    for f in findings:
        print(f"  {f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
