"""MoE token alignments as the field runs them, judged through
`kernel_oracle.check_moe_align_block_size` (the routing table a fused-MoE
GEMM walks: each expert's pairs, padded with `numel` to a multiple of
`block_size`; a block's expert id; `num_tokens_post_pad`):

- `torch_sort`: the pure-torch form written for platforms without the
  CUDA op (a stable `torch.sort` of the flat ids, `torch.bincount`, the
  padded cumulative sum, a scatter), declared `order="stable"`;
- `triton_four_stage`: a Triton kernel in the four stages of the
  `moe_align_block_size_triton` forms (per-program counts, a cumulative
  sum over programs per expert, the padded offsets and block ids, the
  scatter), declared `order="stable"`;
- vLLM's `ops.moe_align_block_size` (the CUDA kernel: an `atomicAdd`
  scatter, so `order="any"`), with and without an expert map, where
  installed: the arms RAND, SKEW and EDGE first, then INVALID last and on
  its own (its small-batch path indexes shared memory with an id past
  `num_experts`, which can leave the CUDA context unusable for every
  later call). SGLang's `sgl_kernel` form is not run: it routes `-1` to a
  leading segment of its own, another contract.

Exit status 1 unless every check passes. Run on a CUDA GPU with torch and
triton:
    python3 python/examples/moe_align_block_size.py
"""

import sys

import torch
import triton
import triton.language as tl

import kernel_oracle as ko

DEV = "cuda"


def shape_of(topk_ids, sorted_ids, expert_ids):
    """num_experts and block_size of a case, from the outputs' lengths
    (capacity = numel + E (bs - 1), shrunk to numel bs when numel < E)."""
    return SHAPE[(topk_ids.shape, sorted_ids.size, expert_ids.size)]


SHAPE = {}
for _t, _k, _e, _bs in ko.MOE_ALIGN_SHAPES:
    _cap = _t * _k + _e * (_bs - 1)
    if _t * _k < _e:
        _cap = min(_cap, _t * _k * _bs)
    SHAPE[((_t, _k), _cap, -(-_cap // _bs))] = (_e, _bs)


def copy_back(s, e, n, st, et, nt):
    s[...] = st.cpu().numpy()
    e[...] = et.cpu().numpy()
    n[...] = nt.cpu().numpy().reshape(1)


def torch_sort(topk_ids, s, e, n):
    num_experts, bs = shape_of(topk_ids, s, e)
    ids = torch.from_numpy(topk_ids).to(DEV).reshape(-1).long()
    numel = ids.numel()
    valid = (ids >= 0) & (ids < num_experts)
    key = torch.where(valid, ids, torch.full_like(ids, num_experts))
    order = torch.sort(key, stable=True).indices
    counts = torch.bincount(ids[valid], minlength=num_experts)
    padded = (counts + bs - 1) // bs * bs
    start = torch.cumsum(padded, 0) - padded
    raw = torch.cumsum(counts, 0) - counts
    st = torch.full((s.size,), numel, dtype=torch.int32, device=DEV)
    sk = key[order]
    keep = sk < num_experts
    ex = sk[keep]
    rank = torch.arange(ex.numel(), device=DEV) - raw[ex]
    st[start[ex] + rank] = order[keep].int()
    et = torch.full((e.size,), -1, dtype=torch.int32, device=DEV)
    blocks = padded // bs
    owner = torch.repeat_interleave(torch.arange(num_experts, device=DEV), blocks)
    et[: owner.numel()] = owner.int()
    copy_back(s, e, n, st, et, padded.sum().reshape(1).int())


@triton.jit
def _stage1(ids_ptr, cnt_ptr, numel, E: tl.constexpr, PER: tl.constexpr):
    # Program p counts its PER consecutive pairs into row p + 1.
    p = tl.program_id(0)
    for j in range(PER):
        i = p * PER + j
        if i < numel:
            x = tl.load(ids_ptr + i)
            if (x >= 0) & (x < E):
                c = tl.load(cnt_ptr + (p + 1) * E + x)
                tl.store(cnt_ptr + (p + 1) * E + x, c + 1)


@triton.jit
def _stage2(cnt_ptr, P, E: tl.constexpr):
    # Expert e's counts summed over programs: row p (p >= 1) ends as the
    # pairs of programs 0 .. p - 1.
    e = tl.program_id(0)
    acc = tl.load(cnt_ptr + E + e)
    for p in range(2, P + 1):
        acc += tl.load(cnt_ptr + p * E + e)
        tl.store(cnt_ptr + p * E + e, acc)


@triton.jit
def _stage3(cnt_ptr, cum_ptr, total_ptr, P, E, BS: tl.constexpr):
    last = tl.load(cum_ptr)
    for e in range(E):
        c = tl.load(cnt_ptr + P * E + e)
        last += tl.cdiv(c, BS) * BS
        tl.store(cum_ptr + e + 1, last)
    tl.store(total_ptr, last)


@triton.jit
def _stage4(ids_ptr, cnt_ptr, cum_ptr, sorted_ptr, experts_ptr, numel, E: tl.constexpr,
            BS: tl.constexpr, PER: tl.constexpr):
    p = tl.program_id(0)
    if p < E:
        lo = tl.load(cum_ptr + p)
        hi = tl.load(cum_ptr + p + 1)
        for b in range(lo // BS, hi // BS):
            tl.store(experts_ptr + b, p)
    for j in range(PER):
        i = p * PER + j
        if i < numel:
            x = tl.load(ids_ptr + i)
            if (x >= 0) & (x < E):
                r = tl.load(cnt_ptr + p * E + x)
                tl.store(sorted_ptr + tl.load(cum_ptr + x) + r, i)
                tl.store(cnt_ptr + p * E + x, r + 1)


def triton_four_stage(topk_ids, s, e, n):
    num_experts, bs = shape_of(topk_ids, s, e)
    ids = torch.from_numpy(topk_ids).to(DEV).reshape(-1)
    numel = ids.numel()
    programs = max(1, min(num_experts, numel))
    per = -(-numel // programs)
    cnt = torch.zeros((programs + 1, num_experts), dtype=torch.int32, device=DEV)
    cum = torch.zeros((num_experts + 1,), dtype=torch.int32, device=DEV)
    st = torch.full((s.size,), numel, dtype=torch.int32, device=DEV)
    et = torch.full((e.size,), -1, dtype=torch.int32, device=DEV)
    nt = torch.empty((1,), dtype=torch.int32, device=DEV)
    _stage1[(programs,)](ids, cnt, numel, E=num_experts, PER=per)
    _stage2[(num_experts,)](cnt, programs, E=num_experts)
    _stage3[(1,)](cnt, cum, nt, programs, num_experts, BS=bs)
    _stage4[(max(programs, num_experts),)](ids, cnt, cum, st, et, numel, E=num_experts, BS=bs,
                                           PER=per)
    copy_back(s, e, n, st, et, nt)


def field_ops():
    """vLLM's CUDA op, where installed: (name, op)."""
    found = []
    try:
        from vllm import _custom_ops as ops

        def vllm_op(topk_ids, *rest):
            expert_map, (s, e, n) = (rest[0], rest[1:]) if len(rest) == 4 else (None, rest)
            num_experts, bs = shape_of(topk_ids, s, e)
            ids = torch.from_numpy(topk_ids).to(DEV)
            st = torch.empty((s.size,), dtype=torch.int32, device=DEV)
            et = torch.empty((e.size,), dtype=torch.int32, device=DEV)
            nt = torch.empty((1,), dtype=torch.int32, device=DEV)
            m = torch.from_numpy(expert_map).to(DEV) if expert_map is not None else None
            ops.moe_align_block_size(ids, num_experts, bs, st, et, nt, m)
            copy_back(s, e, n, st, et, nt)

        found.append(("vllm", vllm_op))
    except ImportError:
        print("vllm: not installed")
    return found


def main():
    bad = 0
    bad += not ko.check_moe_align_block_size(torch_sort, order="stable")
    bad += not ko.check_moe_align_block_size(triton_four_stage, order="stable")
    ops = field_ops()
    valid_arms = ["RAND", "SKEW", "EDGE"]
    for name, op in ops:
        bad += not ko.check_moe_align_block_size(op, arms=valid_arms, name=name)
        # The map is applied inside the kernel (ignore_invalid_experts).
        bad += not ko.check_moe_align_block_size(op, map="ignore", arms=valid_arms, name=name)
    for name, op in ops:
        bad += not ko.check_moe_align_block_size(op, arms=["INVALID"], name=name)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
