"""The logits penalties the field runs before sampling, through
kernel_oracle.check_penalties: which order, scope and forms does each
compute, bit for bit?

A seen token's logit is divided by the repetition penalty when positive
and multiplied by it otherwise (CTRL, arXiv:1909.05858 sec. 4.1, as
vLLM and Hugging Face correct it); then the frequency penalty times the
token's count in the generated output is subtracted, then the presence
penalty if it was generated at all. Every step is one binary32 rounding,
so the check is exact, and each row names the known declarations the
output matches (order, repetition scope, `divide` or `reciprocal`, the
latter correctly rounded or within 1 or 2 ulps, `reciprocal(2 ulps)`,
`separate`, `fma`, `fma_scaled` or `accumulate`).

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. vLLM v0's `apply_penalties` written out in torch (ids padded with
   `vocab_size`, bin counts by `scatter_add_`, `where(logits > 0, logits /
   rep, logits * rep)` with a full tensor of penalties, then `-= f *
   counts`, `-= q * mask`): declared vLLM's, certain;
2. Hugging Face's `RepetitionPenaltyLogitsProcessor` written out in torch
   (gather, `where(score < 0, score * p, score / p)` with `p` a CUDA
   tensor, scatter; each id once), then OpenAI-style frequency and
   presence penalties: declared `divide`, certain; and transformers' own
   processor row by row where importable, declared `reciprocal`: its
   `penalty` is a Python float, and PyTorch's CUDA `div_true_kernel_cuda`
   computes `a / cpu_scalar` as `a * (1 / b)` ("may lose one bit of
   precision"), which the TIES arm tells from a division;
3. a Triton kernel in vLLM v1's GPU-worker form (counts in; written here,
   out of place), its repetition step either as vLLM v1's source writes
   it (`scale = 1.0 / rep; logits *= scale`, declared `reciprocal` with
   `recip_ulps=2`, certain: Triton's f32 `/` is PTX `div.full.f32`, an
   approximation within 2 ulps, triton issue 10661, so each row's
   multiplier is one float32 within 2 ulps of `1/p`, rule
   `PEN-RECIP-ULPS`; run 80 on an H100 found it 1 or 2 ulps off
   `RN(1/p)` on 13 of 45 cases declared correctly rounded) or as a
   select of a correctly rounded division (`tl.math.div_rn`, declared
   `divide`), each with
   `enable_fp_fusion=False` (declared `separate`) and with Triton's
   default FP fusion (declared `fma_scaled` after `logits *= scale`:
   LLVM folds `fsub(fmul(l, scale), fmul(f, c))` into `fma(l, scale,
   -(f * c))`; `fma` after the select: `fma(-f, c, l)`);
4. a Triton kernel in LightLLM's form (`_fwd_kernel_apply_penalty`: the
   generated tokens' logits loaded and stored only, `where(l > 0, l / rep,
   l * rep)` with Triton's f32 `/`, `- count * freq`, `- presence`),
   declared `repetition_scope="output_only"`, `frequency="sparse"`
   (`"fma_sparse"` fused) and `repetition="reciprocal"` with
   `recip_ulps=2`: PTX `div.full.f32` taken as one approximate reciprocal
   of the penalty times the logit, which this run settles (reported, not
   counted);
5. vLLM's own `apply_penalties` (`vllm.model_executor.layers.utils`) and
   v1's `apply_all_penalties` (`vllm.v1.sample.ops.penalties`) where vLLM
   is installed, declared vLLM's (newer builds apply the repetition
   penalty with a CUDA op: the rows say what it computes).

Exit status 1 when a section fails to run (vLLM v1's `apply_all_penalties`,
whose signature has changed between versions, is reported only), or when
a form whose declaration is certain fails it: sections 1 and 2's torch
forms, and section 3's `1.0 / rep` kernels under `recip_ulps=2`.
The other declarations (Triton's `div_rn` kernels, LightLLM's form,
transformers' and vLLM's own) are what their sources suggest; the run settles them (the
summary prints what every TIES case matched).

Run on a GPU with torch (and triton, transformers, vllm as installed):
    python3 python/examples/penalties.py
"""

import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton


def cuda(a):
    """A check's array on the GPU."""
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def give(out, t):
    """A CUDA result into the check's output array."""
    torch.cuda.synchronize()
    out[...] = t.float().cpu().numpy()


def bin_counts(tokens, v):
    """vLLM's `get_token_bin_counts_and_mask`: `vocab_size + 1` bins (the
    padding's last), `scatter_add_`, the padding dropped."""
    counts = torch.zeros((tokens.shape[0], v + 1), dtype=torch.long, device=tokens.device)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    counts = counts[:, :v]
    return counts, counts > 0


def vllm_v0_torch(logits, prompt, output, presence, frequency, repetition, out):
    """vLLM v0's `apply_penalties` in torch."""
    x = cuda(logits)
    v = x.shape[1]
    _, prompt_mask = bin_counts(cuda(prompt), v)
    output_counts, output_mask = bin_counts(cuda(output), v)
    rep = cuda(repetition).unsqueeze(1).repeat(1, v)
    rep[~(prompt_mask | output_mask)] = 1.0
    x = torch.where(x > 0, x / rep, x * rep)
    x -= cuda(frequency).unsqueeze(1) * output_counts
    x -= cuda(presence).unsqueeze(1) * output_mask
    give(out, x)


def openai_penalties(x, output, presence, frequency):
    """`x - f * counts - q * (counts > 0)` over the generated ids."""
    output_counts, output_mask = bin_counts(cuda(output), x.shape[1])
    x = x - cuda(frequency).unsqueeze(1) * output_counts
    return x - cuda(presence).unsqueeze(1) * output_mask


def hf_torch(logits, prompt, output, presence, frequency, repetition, out):
    """Hugging Face's processor written out, row by row (the padding
    dropped, prompt and generated ids together), the penalty a CUDA
    tensor; then OpenAI-style frequency and presence penalties."""
    x = cuda(logits)
    v = x.shape[1]
    p = cuda(repetition)
    rows = []
    for r in range(x.shape[0]):
        ids = cuda(np.concatenate([prompt[r], output[r]]))
        ids = ids[ids < v].unsqueeze(0)
        s = x[r:r + 1]
        score = torch.gather(s, 1, ids)
        score = torch.where(score < 0, score * p[r], score / p[r])
        rows.append(s.scatter(1, ids, score))
    give(out, openai_penalties(torch.cat(rows), output, presence, frequency))


def transformers_processor():
    """transformers' own `RepetitionPenaltyLogitsProcessor`, one row at a
    time (it takes one penalty), then the OpenAI-style penalties."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    def penalize(logits, prompt, output, presence, frequency, repetition, out):
        x = cuda(logits)
        v = x.shape[1]
        rows = []
        for r in range(x.shape[0]):
            ids = cuda(np.concatenate([prompt[r], output[r]]))
            ids = ids[ids < v].unsqueeze(0)
            proc = RepetitionPenaltyLogitsProcessor(penalty=float(repetition[r]))
            rows.append(proc(ids, x[r:r + 1].clone()))
        give(out, openai_penalties(torch.cat(rows), output, presence, frequency))

    penalize.__name__ = "transformers_repetition_processor"
    return penalize


if triton is not None:
    @triton.jit
    def penalties_kernel(logits_ptr, out_ptr, rep_ptr, freq_ptr, pres_ptr,
                         prompt_counts_ptr, output_counts_ptr, vocab,
                         BLOCK: tl.constexpr, RECIPROCAL: tl.constexpr):
        # vLLM v1's GPU-worker `_penalties_kernel`, out of place (so no
        # early return for neutral rows: every element is written).
        row = tl.program_id(0)
        block = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = block < vocab
        base = row.to(tl.int64) * vocab
        logits = tl.load(logits_ptr + base + block, mask=mask, other=0.0)
        rep = tl.load(rep_ptr + row)
        freq = tl.load(freq_ptr + row)
        pres = tl.load(pres_ptr + row)
        pc = tl.load(prompt_counts_ptr + base + block, mask=mask, other=0)
        oc = tl.load(output_counts_ptr + base + block, mask=mask, other=0)
        seen = (pc + oc) > 0
        if RECIPROCAL:
            scale = tl.where(seen, rep, 1.0)
            scale = tl.where(logits > 0, 1.0 / scale, scale)
            logits = logits * scale
        else:
            # div_rn takes two blocks: the penalty broadcast (0 + rep is rep).
            rep_b = tl.zeros([BLOCK], dtype=tl.float32) + rep
            penalised = tl.where(logits > 0, tl.math.div_rn(logits, rep_b), logits * rep)
            logits = tl.where(seen, penalised, logits)
        logits = logits - freq * oc.to(tl.float32)
        logits = logits - pres * (oc > 0).to(tl.float32)
        tl.store(out_ptr + base + block, logits, mask=mask)


if triton is not None:
    @triton.jit
    def lightllm_kernel(out_ptr, rep_ptr, freq_ptr, pres_ptr, output_counts_ptr, vocab,
                        BLOCK: tl.constexpr):
        # LightLLM's `_fwd_kernel_apply_penalty` over counts: only the
        # generated tokens' logits are loaded and stored (in place in
        # `out`, a copy of the logits).
        row = tl.program_id(0)
        block = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        base = row.to(tl.int64) * vocab
        oc = tl.load(output_counts_ptr + base + block, mask=block < vocab, other=0)
        mask = (block < vocab) & (oc > 0)
        rep = tl.load(rep_ptr + row)
        freq = tl.load(freq_ptr + row)
        pres = tl.load(pres_ptr + row)
        logits = tl.load(out_ptr + base + block, mask=mask, other=0.0)
        logits = tl.where(logits > 0, logits / rep, logits * rep)
        logits = logits - oc * freq
        logits = logits - pres
        tl.store(out_ptr + base + block, logits, mask=mask)


def lightllm_penalties(fusion):
    def penalize(logits, prompt, output, presence, frequency, repetition, out):
        o = cuda(logits)
        b, v = o.shape
        block = 1024
        extra = {} if fusion else {"enable_fp_fusion": False}
        lightllm_kernel[(b, triton.cdiv(v, block))](
            o, cuda(repetition), cuda(frequency), cuda(presence), cuda(output), v,
            BLOCK=block, **extra)
        give(out, o)

    penalize.__name__ = f"triton_lightllm_{'fused' if fusion else 'nofma'}"
    return penalize


def triton_penalties(reciprocal, fusion):
    def penalize(logits, prompt, output, presence, frequency, repetition, out):
        x = cuda(logits)
        b, v = x.shape
        o = torch.empty_like(x)
        block = 1024
        extra = {} if fusion else {"enable_fp_fusion": False}
        penalties_kernel[(b, triton.cdiv(v, block))](
            x, o, cuda(repetition), cuda(frequency), cuda(presence), cuda(prompt),
            cuda(output), v, BLOCK=block, RECIPROCAL=reciprocal, **extra)
        give(out, o)

    penalize.__name__ = (f"triton_vllm_v1_{'reciprocal' if reciprocal else 'div_rn'}_"
                         f"{'fused' if fusion else 'nofma'}")
    return penalize


def ties_finding(report):
    """What every TIES case matched (the summary's phrase)."""
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

    def run(fn, certain=False, **kw):
        r = ko.check_penalties(fn, verbose=True, **kw)
        found = ties_finding(r)
        findings.append((fn.__name__, found, r.ok))
        print(f"FINDING {fn.__name__}: {found}", flush=True)
        if certain and not r.ok:
            print(f"UNEXPECTED: {fn.__name__} fails its declaration")
        return r

    r = section("vLLM v0's apply_penalties in torch", 300,
                lambda: run(vllm_v0_torch, True))
    bad += r is None or not r.ok
    r = section("Hugging Face's repetition processor in torch, OpenAI-style penalties", 600,
                lambda: run(hf_torch, True))
    bad += r is None or not r.ok
    try:
        proc = transformers_processor()
    except Exception as e:  # transformers absent or changed
        print(f"\n=== transformers' RepetitionPenaltyLogitsProcessor: not importable ({type(e).__name__}), skipped")
    else:
        r = section("transformers' RepetitionPenaltyLogitsProcessor (row by row)", 600,
                    lambda: run(proc, repetition="reciprocal"))
        bad += r is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        for reciprocal in (True, False):
            for fusion in (True, False):
                fused = "fma_scaled" if reciprocal else "fma"
                kw = dict(inputs="counts", repetition="reciprocal" if reciprocal else "divide",
                          frequency=fused if fusion else "separate")
                if reciprocal:
                    # PTX div.full.f32: one multiplier per row within 2
                    # ulps of 1/p (rule PEN-RECIP-ULPS).
                    kw["recip_ulps"] = 2
                r = section(f"Triton, vLLM v1's form, {'1.0 / rep' if reciprocal else 'div_rn'}, "
                            f"fp fusion {'on' if fusion else 'off'}", 300,
                            lambda rc=reciprocal, f=fusion, k=kw: run(triton_penalties(rc, f),
                                                                      certain=rc, **k))
                # The 1.0 / rep kernels must pass their declaration.
                bad += r is None or (reciprocal and not r.ok)
        for fusion in (True, False):
            # LightLLM's `l / rep` per element through div.full.f32: one
            # multiplier per row if it is `l * rcp(rep)` (reported only).
            kw = dict(inputs="counts", repetition_scope="output_only", repetition="reciprocal",
                      recip_ulps=2, frequency="fma_sparse" if fusion else "sparse")
            r = section(f"Triton, LightLLM's form, fp fusion {'on' if fusion else 'off'}", 300,
                        lambda f=fusion, k=kw: run(lightllm_penalties(f), **k))
            bad += r is None
    try:
        from vllm.model_executor.layers.utils import apply_penalties as vllm_apply
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM apply_penalties: not importable ({type(e).__name__}), skipped")
    else:
        def vllm_own(logits, prompt, output, presence, frequency, repetition, out):
            y = vllm_apply(cuda(logits), cuda(prompt), cuda(output), cuda(presence),
                           cuda(frequency), cuda(repetition))
            give(out, y)

        r = section("vLLM's apply_penalties", 300, lambda: run(vllm_own))
        bad += r is None
    try:
        from vllm.v1.sample.ops.penalties import apply_all_penalties
    except Exception as e:  # vLLM absent, or a version without it
        print(f"\n=== vLLM v1 apply_all_penalties: not importable ({type(e).__name__}), skipped")
    else:
        def vllm_v1_own(logits, prompt, output, presence, frequency, repetition, out):
            v = logits.shape[1]
            outputs = [[int(t) for t in row if t < v] for row in output]
            y = apply_all_penalties(cuda(logits), cuda(prompt), cuda(presence),
                                    cuda(frequency), cuda(repetition), outputs)
            give(out, y)

        # Its signature has changed between versions: reported, not counted.
        section("vLLM v1's apply_all_penalties", 300, lambda: run(vllm_v1_own))
    print("\nSUMMARY (what every TIES case matched)")
    for name, found, ok in findings:
        print(f"  {name} ({'PASS' if ok else 'FAIL'} as declared): {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
