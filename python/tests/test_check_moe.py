"""check_moe_align_block_size on a numpy MoE token alignment written from
vLLM's definition (the pairs of each expert in a random order, as an
atomicAdd scatter leaves them, or stable) and on planted bugs: the
contract's implementation passes, each bug is caught by the arm meant to
catch it, with a rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from numpy_reference import moe_align

# A few of MOE_ALIGN_SHAPES, CI's 2 cores: one DeepSeek decode token, fewer
# pairs than experts, Mixtral, 60 experts, and 2400 pairs.
SHAPES = [(1, 8, 256, 16), (3, 8, 256, 64), (100, 2, 8, 16), (200, 4, 60, 16), (300, 8, 128, 32)]


def aligner(order="atomic", bug=None, map_mode="mark", name=None):
    def f(topk_ids, *rest):
        if len(rest) == 4:
            expert_map, s, e, n = rest
        else:
            expert_map, (s, e, n) = None, rest
        ne = expert_map.size if expert_map is not None else f.num_experts(topk_ids, s, e)
        moe_align(topk_ids, ne, f.block_size(topk_ids, s, e), s, e, n, expert_map=expert_map,
                  map_mode=map_mode, order=order, seed=int(topk_ids.sum()) & 0xFFFF, bug=bug)

    f.__name__ = name or (bug or order).replace("-", "_")
    return f


def for_shapes(f, shapes):
    """Tells f each case's num_experts and block_size from the outputs'
    lengths (the check hands none: a real wrapper closes over them)."""
    by_len = {}
    for t, k, e, bs in shapes:
        cap = t * k + e * (bs - 1)
        if t * k < e:
            cap = min(cap, t * k * bs)
        by_len[(t, k, cap, -(-cap // bs))] = (e, bs)
    f.num_experts = lambda ids, s, ex: by_len[(*ids.shape, s.size, ex.size)][0]
    f.block_size = lambda ids, s, ex: by_len[(*ids.shape, s.size, ex.size)][1]
    return f


@pytest.mark.parametrize("order", ["atomic", "stable"])
def test_the_contract_passes_in_any_order(order, capsys):
    f = for_shapes(aligner(order), ko.MOE_ALIGN_SHAPES)
    r = ko.check_moe_align_block_size(f)
    assert r.ok and r.passed == r.cases == len(ko.MOE_ALIGN_SHAPES) * 4
    assert capsys.readouterr().out.rstrip().endswith("PASS")
    r = ko.check_moe_align_block_size(f, shapes=SHAPES, order="stable", verbose=False)
    assert r.ok == (order == "stable")


@pytest.mark.parametrize("mode", ["mark", "ignore"])
def test_expert_parallel_maps_pass_in_their_mode(mode):
    f = for_shapes(aligner(map_mode=mode), SHAPES)
    r = ko.check_moe_align_block_size(f, shapes=SHAPES, map=mode, tail_sorted=True, tail_expert=-1,
                                      verbose=False)
    assert r.ok and r.passed == r.cases
    other = "ignore" if mode == "mark" else "mark"
    r = ko.check_moe_align_block_size(f, shapes=SHAPES, map=other, verbose=False)
    assert not r.ok


def test_the_table_function_is_the_oracle():
    ids = np.array([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=np.int32)
    s, e, n = ko.moe_align_block_size(ids, 5, 4)
    assert n.tolist() == [16] and s.size == 12 + 5 * 3 and e.size == 7
    assert s[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    assert e.tolist() == [1, 2, 3, 4, -1, -1, -1]
    s64, _, _ = ko.moe_align_block_size(ids.astype(np.int64), 5, 4)
    assert (s64 == s).all()
    c = ko.moe_align_case(200, 4, 60, 16, "INVALID", map="ignore")
    s, e, n = ko.moe_align_block_size(c["topk_ids"], 60, 16, expert_map=c["expert_map"], map="ignore")
    assert (s == c["sorted_ids"]).all() and (e == c["expert_ids"]).all() and n == c["num_tokens_post_pad"]
    with pytest.raises(ValueError, match="block_size"):
        ko.moe_align_block_size(ids, 5, 0)
    with pytest.raises(ValueError, match="expert_map"):
        ko.moe_align_block_size(ids, 5, 4, expert_map=np.array([0, 1], dtype=np.int32))
    with pytest.raises(TypeError, match="int32 or int64"):
        ko.moe_align_block_size(ids.astype(np.float32), 5, 4)


@pytest.mark.parametrize(
    "bug,arm,caught_by",
    [
        ("floor-not-ceil", "RAND", r"total .* is \d+, want"),
        ("pad-full-blocks", "EDGE", r"total .* is \d+, want"),
        ("empty-expert-block", "SKEW", r"total .* is \d+, want"),
        ("pad-numel-minus-1", "RAND", r"repeats pair|neither a pair"),
        ("negative-wraps", "INVALID", r"total .* is \d+, want|neither a pair"),
        ("clamp-high", "INVALID", r"total .* is \d+, want|neither a pair"),
        ("drop-last-pair", "RAND", r"missing from its segment|total"),
        ("block-shift", "RAND", r"expert_ids\[\d+\] is"),
        ("first-1024-pairs", "RAND", r"missing from its segment"),
    ],
)
def test_planted_bug_is_caught_by_its_arm_and_reruns(bug, arm, caught_by, capsys):
    f = for_shapes(aligner(bug=bug), SHAPES)
    r = ko.check_moe_align_block_size(f, shapes=SHAPES, verbose=False)
    assert not r.ok
    failing = [x for x in r.failures if f"arm={arm}" in x]
    assert failing and any(re.search(caught_by, x) for x in failing), r.failures[0]
    line = r.reproductions[0]
    assert line in capsys.readouterr().out
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


def test_a_map_mode_swapped_is_caught():
    f = for_shapes(aligner(bug="map-mode-swapped"), SHAPES)
    r = ko.check_moe_align_block_size(f, shapes=SHAPES, map="mark", verbose=False)
    assert not r.ok and r.failed == r.cases


def test_unwritten_tails_pass_unless_declared_and_inputs_must_stay():
    def no_tail(topk_ids, s, e, n):
        f(topk_ids, s, e, n)
        used = n[0]
        s[used:] = np.iinfo(np.int32).min
        e[-(-used // 16):] = 0

    f = for_shapes(aligner(), SHAPES[:1])
    r = ko.check_moe_align_block_size(no_tail, shapes=SHAPES[:1], verbose=False)
    assert r.ok
    r = ko.check_moe_align_block_size(no_tail, shapes=SHAPES[:1], tail_sorted=True, verbose=False)
    assert not r.ok and "past total" in r.failures[0]
    r = ko.check_moe_align_block_size(no_tail, shapes=SHAPES[:1], tail_expert=-1, verbose=False)
    assert not r.ok and "past the used blocks" in r.failures[0]

    def sorts_in_place(topk_ids, s, e, n):
        f(topk_ids, s, e, n)
        topk_ids.sort(axis=1)

    r = ko.check_moe_align_block_size(sorts_in_place, shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert not r.ok and "wrote its input(s): topk_ids" in r.failures[0]


def test_refusals_returns_and_bad_arguments():
    f = for_shapes(aligner(), SHAPES)

    def small_only(topk_ids, s, e, n):
        if topk_ids.size >= 1024:
            raise ko.Refused("one CTA: fewer than 1024 pairs")
        f(topk_ids, s, e, n)

    r = ko.check_moe_align_block_size(small_only, shapes=SHAPES, verbose=False)
    assert r.ok and r.refused == 4 and r.passed == 16

    def returns(topk_ids, s, e, n):
        f(topk_ids, s, e, n)
        return s.copy(), e.copy(), n.copy()

    assert ko.check_moe_align_block_size(returns, shapes=SHAPES, verbose=False).ok

    def returns_int64(topk_ids, s, e, n):
        f(topk_ids, s, e, n)
        return s.astype(np.int64), e, n

    r = ko.check_moe_align_block_size(returns_int64, shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert not r.ok and "int64" in r.failures[0]
    with pytest.raises(ValueError, match="map"):
        ko.check_moe_align_block_size(f, map="drop")
    with pytest.raises(ValueError, match="order"):
        ko.check_moe_align_block_size(f, order="sorted")
    with pytest.raises(ValueError, match="at least 1"):
        ko.check_moe_align_block_size(f, shapes=[(1, 8, 256, 0)])
    with pytest.raises(ValueError, match="arm"):
        ko.check_moe_align_block_size(f, arms=["HOT"])


def test_int64_ids_empty_batches_and_caps():
    shapes = SHAPES + [(0, 8, 256, 16)]
    f = for_shapes(aligner(), shapes)
    r = ko.check_moe_align_block_size(f, shapes=shapes, ids_dtype="int64", verbose=False)
    assert r.ok and r.passed == r.cases == len(shapes) * 4

    def int32_only(topk_ids, s, e, n):
        assert topk_ids.dtype == np.int32, "int32 ids only"
        f(topk_ids, s, e, n)

    r = ko.check_moe_align_block_size(int32_only, shapes=SHAPES[:1], ids_dtype="int64", verbose=False)
    assert not r.ok and "int32 ids only" in r.failures[0]

    def skips_empty(topk_ids, s, e, n):
        if topk_ids.size:
            f(topk_ids, s, e, n)

    r = ko.check_moe_align_block_size(skips_empty, shapes=[(0, 8, 256, 16)], verbose=False)
    assert not r.ok and "total (num_tokens_post_pad) is -2147483648, want 0" in r.failures[0]
    with pytest.raises(ValueError, match="over the check's"):
        ko.check_moe_align_block_size(f, shapes=[(1 << 16, 8, 256, 16)])
    with pytest.raises(ValueError, match="over the check's"):
        ko.moe_align_block_size(np.zeros((1 << 21,), dtype=np.int32), 8, 16)
    with pytest.raises(ValueError, match="ids_dtype"):
        ko.check_moe_align_block_size(f, ids_dtype="uint8")
    m = ko.moe_align_block_size(np.array([[0, 1]], dtype=np.int64), 4, 2,
                                expert_map=np.array([0, -1, 1, -1], dtype=np.int64))
    assert m[1].tolist()[:2] == [0, -1]


def test_every_arm_reaches_what_it_is_for_on_every_default_shape():
    for t, k, e, bs in ko.MOE_ALIGN_SHAPES:
        numel = t * k
        ids = ko.moe_align_case(t, k, e, bs, "INVALID")["topk_ids"].reshape(-1)
        assert ((ids < 0) | (ids >= e)).sum() == -(-numel // 8)
        ids = ko.moe_align_case(t, k, e, bs, "EDGE")["topk_ids"].reshape(-1)
        counts = np.bincount(ids, minlength=e)
        used = counts[counts > 0]
        near = np.isin(used % bs, [0, 1, bs - 1]).sum()
        assert near + 1 >= used.size, (t, k, e, bs, counts)
