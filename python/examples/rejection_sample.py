"""Speculative decoding's rejection sampler, through
kernel_oracle.check_rejection_sample: which acceptance test and race
form does each compute, bit for bit?

The random numbers are inputs (a uniform per draft position, an
exponential row per request), so the sampler is deterministic: a random
request accepts draft token `x` at position `i` iff `q > 0 and p / q >=
u` (vLLM v1's `rejection_random_sample_kernel`) or `u * q < p`
(FlashInfer's `chain_speculative_sampling`); the first rejection emits
`argmax_v max(p_v - q_v, 0) / e_v` (vLLM's `sample_recovered_tokens_kernel`,
now as `prob * inv_q`), every later position is -1, and the bonus token
follows only when all `k` are accepted; a greedy request emits the
target's argmax until it differs from the draft. Each row names the known
declarations the output matches.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. vLLM v1's three kernels written out in torch, vectorised over the
   batch (`(q > 0) & (p / q >= u)`, `clamp(p - q, min=0) * (1 / e)`,
   `argmax`, the first rejection by a cumulative product): declared
   `divide_ge`/`reciprocal`, certain (torch's CUDA `/` and `reciprocal`
   are correctly rounded);
2. the same with FlashInfer's acceptance test (`u * q < p`): declared
   `multiply_lt`, certain. FlashInfer's kernel itself is not run: it
   draws the recovered token by inverse CDF from `relu(p - q)` and the
   bonus token from the target's last row with its own uniforms (newer
   versions from a generator), which this contract does not model;
3. vLLM's own `rejection_sample` (`vllm.v1.sample.rejection_sampler`)
   where vLLM is installed, its random draws replaced by the check's
   (`generate_uniform_probs` and `Tensor.exponential_` patched for the
   call): declared vLLM's. Its Triton `target_prob / draft_prob` is PTX
   `div.full.f32`, within 2 ulps (triton issue 10661), so TIES' race
   that parts `divide` from `reciprocal` is where an older build (`prob /
   q`) may match neither; its signature has changed between versions, so
   it is reported, not counted.

Exit status 1 when a section whose declaration is certain fails it or
fails to run.

Run on a GPU with torch (and vllm as installed):
    python3 python/examples/rejection_sample.py
"""

import sys
import types

import numpy as np

import kernel_oracle as ko
from sections import section, torch


def cuda(a):
    """A check's array on the GPU."""
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def torch_form(accept):
    """vLLM v1's kernels in torch, with `accept` vLLM's or FlashInfer's
    acceptance test."""

    def sample(draft_token_ids, draft_probs, target_probs, bonus_token_ids,
               uniform, noise, is_greedy, out):
        x = cuda(draft_token_ids).long()                       # [B, k]
        b, k = x.shape
        tp = cuda(target_probs)[:, :k]                          # [B, k, V]
        u = cuda(uniform)
        e = cuda(noise)                                         # [B, V]
        p = tp.gather(2, x[..., None])[..., 0]
        if draft_probs is None:
            dq = None
            q = torch.ones_like(p)
            r = tp.scatter(2, x[..., None], 0.0)
        else:
            dq = cuda(draft_probs)
            q = dq.gather(2, x[..., None])[..., 0]
            r = torch.clamp(tp - dq, min=0.0)
        if accept == "divide_ge":
            acc = (q > 0) & (p / q >= u)
        else:
            acc = u * q < p
        recovered = (r * e.reciprocal()[:, None, :]).argmax(-1)
        greedy = cuda(is_greedy).bool()[:, None]
        t_argmax = tp.argmax(-1)
        acc = torch.where(greedy, t_argmax == x, acc)
        tok = torch.where(greedy, t_argmax, torch.where(acc, x, recovered))
        # Positions up to and including the first rejection are emitted.
        before = torch.cumprod(acc.int(), 1)                    # accepted prefix
        emitted = torch.cat([torch.ones_like(before[:, :1]), before[:, :-1]], 1).bool()
        o = torch.full((b, k + 1), -1, dtype=torch.int32, device=x.device)
        o[:, :k] = torch.where(emitted, tok, -1).int()
        all_acc = before[:, -1].bool()
        o[:, k] = torch.where(all_acc, cuda(bonus_token_ids), -1)
        torch.cuda.synchronize()
        out[...] = o.cpu().numpy()

    sample.__name__ = f"torch_{accept}"
    return sample


def vllm_own():
    """vLLM's `rejection_sample` with the check's random numbers."""
    import vllm.v1.sample.rejection_sampler as rs

    def sample(draft_token_ids, draft_probs, target_probs, bonus_token_ids,
               uniform, noise, is_greedy, out):
        b, k = draft_token_ids.shape
        v = target_probs.shape[-1]
        e = cuda(noise)
        u = cuda(uniform).double().reshape(-1)
        meta = types.SimpleNamespace(
            all_greedy=bool(is_greedy.all()), all_random=not is_greedy.any(),
            temperature=torch.where(cuda(is_greedy).bool(), -1.0, 1.0),
            generators={}, top_k=None, top_p=None)
        old_uniform, old_exp = rs.generate_uniform_probs, torch.Tensor.exponential_
        rs.generate_uniform_probs = lambda *a, **kw: u
        torch.Tensor.exponential_ = lambda self, *a, **kw: self.copy_(e) if self.shape == e.shape else self
        try:
            y = rs.rejection_sample(
                cuda(draft_token_ids).reshape(-1), [k] * b, k,
                torch.arange(1, b + 1, device="cuda", dtype=torch.int32) * k,
                None if draft_probs is None else cuda(draft_probs).reshape(b * k, v),
                cuda(target_probs)[:, :k].reshape(b * k, v),
                cuda(bonus_token_ids)[:, None], meta)
        finally:
            rs.generate_uniform_probs, torch.Tensor.exponential_ = old_uniform, old_exp
        torch.cuda.synchronize()
        out[...] = y.int().cpu().numpy()

    sample.__name__ = "vllm_rejection_sample"
    return sample


def main():
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = 0
    r = section("vLLM v1's kernels in torch", 300,
                lambda: ko.check_rejection_sample(torch_form("divide_ge"), verbose=True))
    bad += r is None or not r.ok
    r = section("FlashInfer's acceptance test in torch", 300,
                lambda: ko.check_rejection_sample(torch_form("multiply_lt"), verbose=True,
                                                  accept="multiply_lt"))
    bad += r is None or not r.ok
    try:
        fn = vllm_own()
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM rejection_sample: not importable ({type(e).__name__}), skipped")
    else:
        # Its signature has changed between versions: reported, not counted.
        section("vLLM's rejection_sample", 300,
                lambda: ko.check_rejection_sample(fn, verbose=True))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
