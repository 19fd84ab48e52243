"""The MoE routers the field runs, through kernel_oracle.check_moe_routing:
does each choose the experts and weights its routing declares?

A router scores the gating logits (softmax or sigmoid), adds a bias for the
choice only (DeepSeek-V3), keeps the best groups of experts first
(DeepSeek-V2 and V3), takes the top k, and weighs them by the unbiased
scores, renormalised and scaled as declared. The check holds every score to
a sound enclosure of any binary32 evaluation, so the ids are judged exactly
wherever the enclosures decide them, and names the routings (scoring, group
score, renormalisation) each output is consistent with.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. Hugging Face's Mixtral router in torch (softmax in float32, `torch.topk`,
   renormalised) and Qwen2-MoE's (`norm_topk_prob=False`);
2. DeepSeek-V3's `MoEGate` in torch (sigmoid, bias, top-2-sum groups 8/4,
   `sorted=False`, `weight / (sum + 1e-20) * 2.5`), the groups not kept
   masked with -inf (vLLM's torch form) and with 0.0 (Hugging Face's
   `modeling_deepseek.py`, which chooses from them when every biased
   score is negative: the BIAS arm's data);
3. a Triton kernel: softmax and an arg-max top-k per token in registers,
   declared sorted;
4. vLLM's `fused_topk` (its `topk_softmax` CUDA kernel) and `grouped_topk`
   (on bfloat16 logits, whose sigmoid vLLM takes in bfloat16, and on
   float32), where vLLM is installed.

Exit status 1 when a section fails to run, or when one of the torch forms
whose routing is certain (section 1, and section 2 with -inf) fails its
declaration.

Run on a GPU with torch (and triton, vllm as installed):
    python3 python/examples/moe_routing.py
"""

import sys

import numpy as np

import kernel_oracle as ko
from sections import section, tl, torch, triton

DEEPSEEK_V3 = dict(scoring="sigmoid", n_group=8, topk_group=4, bias=True,
                   routed_scaling_factor=2.5)


def logits_cuda(a):
    """The check's logits (uint16 bfloat16 bits, or float32) on the GPU."""
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(a).cuda()


def give(weights, ids, w, i):
    """A router's CUDA results into the check's output arrays."""
    torch.cuda.synchronize()
    weights[...] = w.float().cpu().numpy()
    ids[...] = i.to(torch.int32).cpu().numpy()


def hf_softmax_router(top_k, renormalize):
    """Mixtral's and Qwen2-MoE's `forward`: softmax in float32, top-k."""

    def route(logits, weights, ids):
        x = logits_cuda(logits)
        p = torch.nn.functional.softmax(x, dim=1, dtype=torch.float)
        w, i = torch.topk(p, top_k, dim=-1)
        if renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        give(weights, ids, w, i)

    route.__name__ = f"hf_softmax_top{top_k}_{'renorm' if renormalize else 'raw'}"
    return route


def deepseek_v3_gate(mask_value):
    """DeepSeek-V3's `MoEGate.forward` (`noaux_tc`) on float32 logits, the
    groups not kept masked with `mask_value` (Hugging Face's code: 0.0;
    vLLM's torch `grouped_topk`: -inf)."""

    def route(logits, bias, weights, ids):
        x = logits_cuda(logits).float()
        b = torch.from_numpy(bias).cuda()
        t, e = x.shape
        scores = x.sigmoid()
        choice = scores + b.unsqueeze(0)
        group_scores = choice.view(t, 8, -1).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=4, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = mask.unsqueeze(-1).expand(t, 8, e // 8).reshape(t, -1)
        masked = choice.masked_fill(~mask.bool(), mask_value)
        _, i = torch.topk(masked, k=8, dim=-1, sorted=False)
        w = scores.gather(1, i)
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20) * 2.5
        give(weights, ids, w, i)

    route.__name__ = f"deepseek_v3_gate_mask_{'zero' if mask_value == 0 else 'neg_inf'}"
    return route


if triton is not None:
    @triton.jit
    def softmax_topk_kernel(x_ptr, w_ptr, i_ptr, E, K: tl.constexpr, BLOCK: tl.constexpr,
                            RENORM: tl.constexpr):
        t = tl.program_id(0)
        j = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + t * E + j, mask=j < E, other=-float("inf")).to(tl.float32)
        ex = tl.exp(x - tl.max(x, axis=0))
        p = ex / tl.sum(ex, axis=0)
        left = tl.where(j < E, p, -1.0)
        total = 0.0
        for s in tl.static_range(K):
            best = tl.argmax(left, axis=0)
            pb = tl.max(left, axis=0)
            tl.store(i_ptr + t * K + s, best)
            tl.store(w_ptr + t * K + s, pb)
            total += pb
            left = tl.where(j == best, -1.0, left)
        if RENORM:
            k = tl.arange(0, K)
            w = tl.load(w_ptr + t * K + k)
            tl.store(w_ptr + t * K + k, w / total)


def triton_router(top_k, renormalize):
    def route(logits, weights, ids):
        x = logits_cuda(logits)
        t, e = x.shape
        w = torch.empty(t, top_k, device="cuda", dtype=torch.float32)
        i = torch.empty(t, top_k, device="cuda", dtype=torch.int32)
        softmax_topk_kernel[(t,)](x, w, i, e, K=top_k, BLOCK=triton.next_power_of_2(e),
                                  RENORM=renormalize)
        give(weights, ids, w, i)

    route.__name__ = f"triton_softmax_top{top_k}"
    return route


def main():
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    bad = 0
    summary = []

    def run(fn, top_k, certain=False, **cfg):
        r = ko.check_moe_routing(fn, top_k=top_k, verbose=True, **cfg)
        line = r.text.strip().splitlines()[-1]
        summary.append(f"{fn.__name__}: {line}")
        if certain and not r.ok:
            print(f"UNEXPECTED: {fn.__name__} fails its declaration")
        return r

    for top_k, renorm in ((2, True), (8, True), (4, False)):
        r = section(f"HF softmax router, top {top_k}, renormalize={renorm}", 120,
                    lambda k=top_k, n=renorm: run(hf_softmax_router(k, n), k, True,
                                                  renormalize=n))
        bad += r is None or not r.ok
    r = section("DeepSeek-V3 MoEGate (torch), groups masked with -inf", 120,
                lambda: run(deepseek_v3_gate(float("-inf")), 8, True, **DEEPSEEK_V3))
    bad += r is None or not r.ok
    # Hugging Face's form: a finding either way (BIAS makes every biased
    # score negative, below the mask's 0).
    r = section("DeepSeek-V3 MoEGate (torch), groups masked with 0.0 (Hugging Face)", 120,
                lambda: run(deepseek_v3_gate(0.0), 8, **DEEPSEEK_V3))
    bad += r is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        for top_k in (2, 8):
            r = section(f"Triton softmax top-{top_k}, declared sorted", 180,
                        lambda k=top_k: run(triton_router(k, True), k, sorted=True))
            bad += r is None
    try:
        from vllm.model_executor.layers.fused_moe import fused_moe as vllm_fm
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM fused_topk / grouped_topk: not importable ({type(e).__name__}), skipped")
    else:
        def vllm_fused_topk(top_k):
            def route(logits, weights, ids):
                x = logits_cuda(logits)
                hidden = torch.empty(x.shape[0], 16, device="cuda", dtype=torch.bfloat16)
                out = vllm_fm.fused_topk(hidden, x, top_k, True)
                give(weights, ids, out[0], out[1])

            route.__name__ = f"vllm_fused_topk_{top_k}"
            return route

        def vllm_grouped_topk(logits, bias, weights, ids):
            x = logits_cuda(logits)
            hidden = torch.empty(x.shape[0], 16, device="cuda", dtype=torch.bfloat16)
            w, i = vllm_fm.grouped_topk(hidden, x, 8, True, num_expert_group=8, topk_group=4,
                                        scoring_func="sigmoid", routed_scaling_factor=2.5,
                                        e_score_correction_bias=torch.from_numpy(bias).cuda())
            give(weights, ids, w, i)

        for top_k in (2, 8):
            r = section(f"vLLM fused_topk, top {top_k}", 180,
                        lambda k=top_k: run(vllm_fused_topk(k), k))
            bad += r is None
        # vLLM's torch grouped_topk casts to float32 for softmax only: on
        # bfloat16 logits its sigmoid is bfloat16's, which fails the binary32
        # contract (a finding); on float32 logits it is binary32.
        for dtype in ("bfloat16", "float32"):
            r = section(f"vLLM grouped_topk (DeepSeek-V3), {dtype} logits", 180,
                        lambda d=dtype: run(vllm_grouped_topk, 8, dtype=d, **DEEPSEEK_V3))
            bad += r is None
    print("\nSUMMARY")
    for line in summary:
        print(f"  {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
