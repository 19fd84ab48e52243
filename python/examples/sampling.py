"""The sampling filters the field runs, through kernel_oracle.check_sampling:
does each keep the tokens its top-k, top-p and min-p declare?

A sampler divides the logits by the temperature, removes the tokens below
min-p of the maximum probability, keeps the k largest, keeps the nucleus
(the smallest prefix of the descending probabilities whose sum reaches
top_p) and samples from the renormalised survivors. The check holds every
compared quantity to a sound enclosure of any binary32 evaluation, so each
token's membership is judged exactly wherever the enclosures decide it,
and names the declarations (order, tie policies) each output is
consistent with.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. vLLM's `apply_top_k_top_p` and min-p processor written out in torch
   (temperature, min-p, top-k keeping ties, the ascending cumsum `<= 1 -
   p`): the masked logits (`scaled=True`: vLLM masks `logits / T`), the
   renormalised probabilities, and `torch.multinomial` draws from them;
2. Hugging Face's warpers written out in torch (top-k, top-p, then min-p:
   `order="min_p_last"`), and transformers' own `TopKLogitsWarper`,
   `TopPLogitsWarper`, `MinPLogitsWarper` row by row where importable;
3. top-k and top-p as thresholds found by bisection in one Triton program
   a row (no sort; the algorithm class of vLLM's Triton top-k/top-p,
   written here): over binary32 bit patterns (exact in 32 steps), and
   over the value range with 20 midpoint steps (tokens within the last
   bracket are kept: expected to fail where the arms put them there);
   vLLM's own `apply_top_k_top_p` where vLLM is installed;
4. FlashInfer's `top_k_renorm_probs` then `top_p_renorm_probs`
   (renorm form), `top_k_mask_logits` (in vLLM's pipeline), and
   `top_k_top_p_sampling_from_probs` with `filter_apply_order`
   `"top_k_first"` and `"joint"` (sample form), where installed. Its tie
   policies are not documented: the rows name those it is consistent with.

Exit status 1 when a section fails to run, or when one of the torch forms
written from the rules (sections 1 and 2's torch forms) fails its
declaration.

Run on a GPU with torch (and transformers, vllm, flashinfer as installed):
    python3 python/examples/sampling.py
"""

import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton


def cuda(a):
    """A check's array on the GPU (bfloat16 logits arrive as uint16 bits)."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16).float()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def give(out, t):
    """A CUDA result into the check's output array."""
    torch.cuda.synchronize()
    if out.dtype == np.int32:
        out[...] = t.to(torch.int32).cpu().numpy()
    else:
        out[...] = t.float().cpu().numpy()


def min_p_mask(x, min_p):
    """vLLM's `MinPLogitsProcessor`: `probs < min_p * amax(probs)` masked."""
    probs = x.softmax(dim=-1)
    return x.masked_fill(probs < cuda(min_p).unsqueeze(1) * probs.amax(dim=-1, keepdim=True),
                         float("-inf"))


def top_k_mask(x, top_k):
    """vLLM's top-k: `logits_sort < kth` masked (ties kept); k = 0 is V."""
    v = x.shape[1]
    k = cuda(top_k).long()
    k = torch.where(k == 0, torch.full_like(k, v), k)
    kth = x.sort(dim=-1, descending=False)[0].gather(1, (v - k).unsqueeze(1))
    return x.masked_fill(x < kth, float("-inf"))


def top_p_mask(x, top_p):
    """vLLM's top-p: sort ascending, softmax, `cumsum <= 1 - p` masked, the
    last kept."""
    logits_sort, logits_idx = x.sort(dim=-1, descending=False)
    probs_sum = torch.cumsum(logits_sort.softmax(dim=-1), dim=-1)
    mask = probs_sum <= 1 - cuda(top_p).unsqueeze(1)
    mask[:, -1] = False
    logits_sort = logits_sort.masked_fill(mask, float("-inf"))
    return logits_sort.scatter(dim=-1, index=logits_idx, src=logits_sort)


def vllm_filters(logits, temperature, top_k, top_p, min_p):
    """vLLM v1's sampler in torch: temperature, min-p, then
    `apply_top_k_top_p`'s top-k and top-p. Returns the filtered `logits /
    T`."""
    x = cuda(logits).float() / cuda(temperature).unsqueeze(1)
    return top_p_mask(top_k_mask(min_p_mask(x, min_p), top_k), top_p)


def hf_filters(logits, temperature, top_k, top_p, min_p):
    """Hugging Face's warpers in torch, per-row parameters: temperature,
    `TopKLogitsWarper` (`scores < topk[..., -1]` masked), `TopPLogitsWarper`
    (ascending `cumsum <= 1 - top_p` masked, the last kept),
    `MinPLogitsWarper` (`probs < min_p * max` masked)."""
    x = cuda(logits).float() / cuda(temperature).unsqueeze(1)
    v = x.shape[1]
    k = cuda(top_k).long()
    k = torch.where(k == 0, torch.full_like(k, v), k)
    kth = x.sort(dim=-1, descending=True)[0].gather(1, (k - 1).unsqueeze(1))
    x = x.masked_fill(x < kth, float("-inf"))
    sorted_logits, sorted_idx = torch.sort(x, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - cuda(top_p)).unsqueeze(1)
    remove[:, -1] = False
    x = x.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))
    probs = x.softmax(dim=-1)
    return x.masked_fill(probs < cuda(min_p).unsqueeze(1) * probs.amax(dim=-1, keepdim=True),
                         float("-inf"))


def as_form(filters, form, samples=16):
    """A callable of `form` from a torch filter returning masked logits."""

    def mask(logits, temperature, top_k, top_p, min_p, out):
        give(out, filters(logits, temperature, top_k, top_p, min_p))

    def renorm(logits, temperature, top_k, top_p, min_p, out):
        give(out, filters(logits, temperature, top_k, top_p, min_p).softmax(dim=-1))

    def sample(logits, temperature, top_k, top_p, min_p, out):
        probs = filters(logits, temperature, top_k, top_p, min_p).softmax(dim=-1)
        give(out, torch.multinomial(probs, out.shape[1], replacement=True))

    fn = {"mask": mask, "renorm": renorm, "sample": sample}[form]
    fn.__name__ = f"{filters.__name__}_{form}"
    return fn


def transformers_warpers():
    """transformers' own warpers, one row at a time (they take scalars)."""
    from transformers.generation.logits_process import (
        MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

    def mask(logits, temperature, top_k, top_p, min_p, out):
        x = cuda(logits).float()
        rows = []
        for r in range(x.shape[0]):
            s = x[r:r + 1] / float(temperature[r])
            if top_k[r] > 0:
                s = TopKLogitsWarper(int(top_k[r]))(None, s)
            if top_p[r] < 1.0:
                s = TopPLogitsWarper(float(top_p[r]))(None, s)
            if min_p[r] > 0.0:
                s = MinPLogitsWarper(float(min_p[r]))(None, s)
            rows.append(s)
        give(out, torch.cat(rows))

    mask.__name__ = "transformers_warpers"
    return mask


if triton is not None:
    @triton.jit
    def _key(x):
        """binary32 values as int64 keys in the same order (the sign-magnitude
        bits of a negative value flipped)."""
        b = x.to(tl.int32, bitcast=True)
        return tl.where(b >= 0, b, b ^ 0x7FFFFFFF).to(tl.int64)

    @triton.jit
    def _at_least(x, t, BITS: tl.constexpr):
        """`x >= t`, t a key (BITS) or a value."""
        if BITS:
            r = _key(x) >= t
        else:
            r = x >= t
        return r

    @triton.jit
    def _mid(lo, hi, BITS: tl.constexpr):
        """The bisection's next probe: the middle key, or the midpoint value."""
        if BITS:
            r = lo + (hi - lo) // 2
        else:
            r = (lo + hi) * 0.5
        return r

    @triton.jit
    def _threshold_filter(x_ptr, out_ptr, k_ptr, p_ptr, V, stride,
                          BITS: tl.constexpr, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        """One row: top-k then top-p as thresholds found by bisection (no
        sort). BITS = 0: midpoint bisection of the value range, ITERS
        steps; BITS = 1: bisection of the ordered binary32 bit patterns,
        exact in 32 steps. Tokens `>=` the threshold stay, others -inf."""
        row = tl.program_id(0)
        base = x_ptr + row * stride
        k = tl.load(k_ptr + row)
        p = tl.load(p_ptr + row)
        mx = float("-inf")
        mn = float("inf")
        n_fin = 0
        for s in range(0, V, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            m = offs < V
            x = tl.load(base + offs, mask=m, other=float("-inf"))
            fin = m & (x > float("-inf"))
            mx = tl.maximum(mx, tl.max(x, 0))
            mn = tl.minimum(mn, tl.min(tl.where(fin, x, float("inf")), 0))
            n_fin += tl.sum(fin.to(tl.int32), 0)
        # Top-k: the largest threshold t with count(x >= t) >= k.
        if BITS:
            lo = _key(mn)
            top = _key(mx) + 1
        else:
            lo = mn
            top = mx
        hi = top
        if k < n_fin:
            for _ in range(ITERS):
                mid = _mid(lo, hi, BITS)
                cnt = 0
                for s in range(0, V, BLOCK):
                    offs = s + tl.arange(0, BLOCK)
                    x = tl.load(base + offs, mask=offs < V, other=float("-inf"))
                    ge = _at_least(x, mid, BITS)
                    cnt += tl.sum((ge & (x > float("-inf"))).to(tl.int32), 0)
                lo = tl.where(cnt >= k, mid, lo)
                hi = tl.where(cnt >= k, hi, mid)
        # The softmax's denominator over the top-k survivors.
        den = 0.0
        for s in range(0, V, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            x = tl.load(base + offs, mask=offs < V, other=float("-inf"))
            keep = _at_least(x, lo, BITS)
            den += tl.sum(tl.where(keep & (x > float("-inf")), tl.exp(x - mx), 0.0), 0)
        # Top-p: the largest threshold t >= the top-k one whose survivors
        # carry at least p of the mass, searched up to the row's maximum.
        lo2 = lo
        hi2 = top
        if p < 1.0:
            for _ in range(ITERS):
                mid = _mid(lo2, hi2, BITS)
                mass = 0.0
                for s in range(0, V, BLOCK):
                    offs = s + tl.arange(0, BLOCK)
                    x = tl.load(base + offs, mask=offs < V, other=float("-inf"))
                    ge = _at_least(x, mid, BITS)
                    mass += tl.sum(tl.where(ge & (x > float("-inf")), tl.exp(x - mx), 0.0), 0)
                ok = mass / den >= p
                lo2 = tl.where(ok, mid, lo2)
                hi2 = tl.where(ok, hi2, mid)
        for s in range(0, V, BLOCK):
            offs = s + tl.arange(0, BLOCK)
            m = offs < V
            x = tl.load(base + offs, mask=m, other=float("-inf"))
            keep = _at_least(x, lo2, BITS)
            tl.store(out_ptr + row * stride + offs, tl.where(keep, x, float("-inf")), mask=m)


def threshold_filter(bits, iters):
    """vLLM's pipeline (temperature, min-p in torch) with top-k and top-p as
    bisected thresholds in one Triton program a row: the algorithm class of
    vLLM's Triton top-k/top-p (`topk_topp_triton.py`: thresholds by search,
    no sort), written here, not vLLM's code. `bits`: bisect bit patterns
    (exact) or the value range (`iters` midpoint steps)."""

    def mask(logits, temperature, top_k, top_p, min_p, out):
        x = min_p_mask(cuda(logits).float() / cuda(temperature).unsqueeze(1), min_p)
        x = x.contiguous()
        v = x.shape[1]
        k = cuda(top_k).int()
        k = torch.where(k == 0, torch.full_like(k, v), k).contiguous()
        y = torch.empty_like(x)
        _threshold_filter[(x.shape[0],)](x, y, k, cuda(top_p).float().contiguous(), v,
                                         x.stride(0), BITS=int(bits), ITERS=iters,
                                         BLOCK=1024)
        give(out, y)

    mask.__name__ = f"triton_threshold_{'bits' if bits else 'midpoint'}_{iters}"
    return mask


def main():
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = 0
    summary = []

    def run(fn, certain=False, **kw):
        r = ko.check_sampling(fn, verbose=True, **kw)
        summary.append(f"{fn.__name__}: {r.text.strip().splitlines()[-1]}")
        if certain and not r.ok:
            print(f"UNEXPECTED: {fn.__name__} fails its declaration")
        return r

    for form in ("mask", "renorm", "sample"):
        kw = dict(form=form, scaled=form == "mask")
        r = section(f"vLLM's filters in torch, {form}", 300,
                    lambda f=form, k=kw: run(as_form(vllm_filters, f), True, **k))
        bad += r is None or not r.ok
    for form in ("mask", "sample"):
        kw = dict(form=form, scaled=form == "mask", order="min_p_last")
        r = section(f"Hugging Face's warpers in torch, {form}", 300,
                    lambda f=form, k=kw: run(as_form(hf_filters, f), True, **k))
        bad += r is None or not r.ok
    try:
        warpers = transformers_warpers()
    except Exception as e:  # transformers absent or changed
        print(f"\n=== transformers' warpers: not importable ({type(e).__name__}), skipped")
    else:
        r = section("transformers' TopK/TopP/MinP warpers (row by row)", 600,
                    lambda: run(warpers, form="mask", scaled=True, order="min_p_last",
                                shapes=[(4, 7), (9, 129), (16, 1000), (3, 32000)]))
        bad += r is None
    if triton is not None:
        # Exact over bit patterns (32 steps): expected to pass. Midpoint
        # bisection with a capped step count: wherever a token lies within
        # the last bracket below the k-th value (or the top-p cut), it is
        # kept though its declaration removes it: a finding, not expected.
        # A threshold keeps the whole tie group at the top-p boundary:
        # declared topp_ties="keep_all".
        for bits, iters in ((True, 33), (False, 20)):
            r = section(f"Triton threshold bisection ({'bit patterns' if bits else 'midpoint'}, "
                        f"{iters} steps)", 300,
                        lambda b=bits, i=iters: run(threshold_filter(b, i), certain=b,
                                                    form="mask", scaled=True,
                                                    topp_ties="keep_all"))
            bad += r is None or (bits and not r.ok)
    try:
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM apply_top_k_top_p: not importable ({type(e).__name__}), skipped")
    else:
        def vllm_apply(logits, temperature, top_k, top_p, min_p, out):
            x = min_p_mask(cuda(logits).float() / cuda(temperature).unsqueeze(1), min_p)
            k = cuda(top_k).long()
            k = torch.where(k == 0, torch.full_like(k, x.shape[1]), k)
            give(out, apply_top_k_top_p(x, k, cuda(top_p)))

        r = section("vLLM apply_top_k_top_p (min-p in torch before it)", 300,
                    lambda: run(vllm_apply, form="mask", scaled=True))
        bad += r is None
    try:
        import flashinfer.sampling as fis
    except Exception as e:  # FlashInfer absent
        print(f"\n=== FlashInfer sampling: not importable ({type(e).__name__}), skipped")
    else:
        def probs_of(logits, temperature):
            return (cuda(logits).float() / cuda(temperature).unsqueeze(1)).softmax(dim=-1)

        def k_of(top_k, v):
            k = cuda(top_k).int()
            return torch.where(k == 0, torch.full_like(k, v), k)

        def min_p_then(probs, min_p):
            probs = probs.masked_fill(
                probs < cuda(min_p).unsqueeze(1) * probs.amax(dim=-1, keepdim=True), 0.0)
            return probs / probs.sum(dim=-1, keepdim=True)

        def fi_renorm(logits, temperature, top_k, top_p, min_p, out):
            probs = probs_of(logits, temperature)
            probs = fis.top_k_renorm_probs(probs, k_of(top_k, probs.shape[1]))
            probs = fis.top_p_renorm_probs(probs, cuda(top_p))
            give(out, min_p_then(probs, min_p))

        def fi_sampling(order):
            def sample(logits, temperature, top_k, top_p, min_p, out):
                probs = min_p_then(probs_of(logits, temperature), min_p)
                n = out.shape[1]
                probs = probs.repeat_interleave(n, dim=0)
                k = k_of(top_k, probs.shape[1]).repeat_interleave(n)
                p = cuda(top_p).repeat_interleave(n)
                ids = fis.top_k_top_p_sampling_from_probs(probs, k, p,
                                                          filter_apply_order=order)
                give(out, ids.view(-1, n))

            sample.__name__ = f"flashinfer_top_k_top_p_sampling_{order}"
            return sample

        def fi_mask(logits, temperature, top_k, top_p, min_p, out):
            # vLLM's pipeline with FlashInfer's top-k masking in its place.
            x = cuda(logits).float() / cuda(temperature).unsqueeze(1)
            x = min_p_mask(x, min_p)
            x = fis.top_k_mask_logits(x, k_of(top_k, x.shape[1]))
            give(out, top_p_mask(x, top_p))

        fi_renorm.__name__ = "flashinfer_top_k_then_top_p_renorm"
        fi_mask.__name__ = "flashinfer_top_k_mask_logits"
        r = section("FlashInfer top_k_renorm_probs, top_p_renorm_probs (then min-p)", 300,
                    lambda: run(fi_renorm, form="renorm", order="min_p_last"))
        bad += r is None
        r = section("FlashInfer top_k_mask_logits (in vLLM's pipeline)", 300,
                    lambda: run(fi_mask, form="mask", scaled=True))
        bad += r is None
        # Min-p is applied (and renormalised) in torch before FlashInfer's
        # sampler: with "top_k_first" that is vLLM's order; with "joint" the
        # top-p candidates are min-p's survivors, which no declared order
        # is, so its rows with min-p may fail: a finding about the
        # composition, not about FlashInfer.
        for order, declared in (("top_k_first", "min_p_first"), ("joint", "joint")):
            r = section(f"FlashInfer top_k_top_p_sampling_from_probs ({order})", 300,
                        lambda o=order, d=declared: run(fi_sampling(o), form="sample",
                                                        order=d))
            bad += r is None
    print("\nSUMMARY")
    for line in summary:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
