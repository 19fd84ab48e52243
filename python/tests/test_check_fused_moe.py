"""check_fused_moe_fp8 on numpy forms of vLLM's fused-MoE block-FP8
expert GEMM written from the contract (one pair at a time, and grouped by
expert as the kernel walks the pairs) and on planted bugs: the contract's
forms pass, each bug fails, with a rerun line that fails again.

numpy has no FMA: its fold ``acc + (c * d) * s`` is the schedule
V2_PARTIAL_FIRST, which the numpy forms declare; the module's own
reference passes under any declared schedule it is asked for."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from kernel_oracle import Schedule
from numpy_reference import fused_moe_fp8, fused_moe_fp8_grouped

# (tokens, k, n, experts, topk), small for CI's 2 cores: a k tail with a
# partial scale row, one decode token, a k tail of one with three scale
# rows, an aligned shape with several pairs per expert.
SHAPES = [(5, 200, 136, 6, 2), (1, 256, 64, 8, 4), (6, 257, 257, 4, 3), (12, 384, 128, 4, 2)]
NUMPY = Schedule.V2_PARTIAL_FIRST


def form(f=fused_moe_fp8, name=None, **kw):
    def g(a, a_scale, w, w_scale, topk_weights, topk_ids, out):
        f(a, a_scale, w, w_scale, topk_weights, topk_ids, out, **kw)

    g.__name__ = name or kw.get("bug", "contract").replace("-", "_")
    return g


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("f", [fused_moe_fp8, fused_moe_fp8_grouped])
def test_numpy_forms_of_the_contract_pass(f, out_dtype, capsys):
    g = form(f, out_dtype=out_dtype, name=f.__name__)
    r = ko.check_fused_moe_fp8(g, shapes=SHAPES, schedule=NUMPY, out_dtype=out_dtype)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 4 and r.failed == 0
    assert Schedule.V2_PARTIAL_FIRST in r.identified_exact_arms
    out = capsys.readouterr().out
    assert out.rstrip().endswith("PASS")
    # The default pairing runs every routing arm, INVALID's -1 slots among them.
    for routing in ("RAND", "SKEW", "EDGE", "INVALID"):
        assert f" {routing} 0x" in out


def test_without_the_routed_weight():
    g = form(mul_routed_weight=False, out_dtype="float32")
    assert ko.check_fused_moe_fp8(g, shapes=SHAPES[:2], schedule=NUMPY, mul_routed_weight=False,
                                  out_dtype="float32", verbose=False).ok
    # Declared the other way round, the same form fails.
    assert not ko.check_fused_moe_fp8(g, shapes=SHAPES[:2], schedule=NUMPY, out_dtype="float32",
                                      verbose=False).ok


def test_the_reference_is_the_oracle_under_every_schedule():
    for s in (Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED, Schedule.V2, Schedule.SM90_WGMMA_FUSED):
        def ref(a, a_scale, w, w_scale, topk_weights, topk_ids, out, s=s):
            out[...] = ko.fused_moe_fp8(a, a_scale, w, w_scale, topk_weights, topk_ids, schedule=s)

        r = ko.check_fused_moe_fp8(ref, shapes=SHAPES[:2], schedule=s, verbose=False)
        assert r.ok and s in r.identified


def test_the_field_fold_is_not_the_seed_fold():
    # The sm_90 model with the field's fold, judged as cuBLASLt's fused
    # fold: the FOLD and RAND arms tell them apart (float32 out sees every bit).
    def field(a, a_scale, w, w_scale, topk_weights, topk_ids):
        return ko.fused_moe_fp8(a, a_scale, w, w_scale, topk_weights, topk_ids, out_dtype="float32")

    def returns(a, a_scale, w, w_scale, topk_weights, topk_ids, out):
        return field(a, a_scale, w, w_scale, topk_weights, topk_ids)

    r = ko.check_fused_moe_fp8(returns, shapes=[(12, 384, 128, 4, 2)], arms=["FOLD", "RAND"],
                               routings=["RAND"], schedule=Schedule.SM90_WGMMA_FUSED,
                               out_dtype="float32", verbose=False)
    assert not r.ok and r.failed == 2
    assert r.identified == [Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED]


def test_the_case_function_gives_the_check_data():
    c = ko.fused_moe_fp8_case(5, 200, 136, 6, 2, "EXACT", "INVALID")
    assert c["a"].shape == (5, 200) and c["a"].dtype == np.uint8
    assert c["a_scale"].shape == (5, 2) and c["w"].shape == (6, 136, 200)
    assert c["w_scale"].shape == (6, 2, 2) and c["topk_ids"].dtype == np.int32
    assert c["topk_weights"].shape == (5, 2) and (c["topk_ids"] >= -1).all()
    assert (c["topk_ids"] == -1).any() and c["arm"] == "EXACT" and c["routing"] == "INVALID"
    again = ko.fused_moe_fp8_case(5, 200, 136, 6, 2, "EXACT", "INVALID", seed=c["seed"])
    assert all((again[x] == c[x]).all() for x in ("a", "w", "topk_ids", "topk_weights"))
    args = [c[x] for x in ("a", "a_scale", "w", "w_scale", "topk_weights", "topk_ids")]
    out = ko.fused_moe_fp8(*args, schedule=NUMPY, out_dtype="float32")
    mine = np.full((5, 2, 136), np.nan, np.float32)
    fused_moe_fp8(*args, mine, out_dtype="float32")
    assert out.shape == (5, 2, 136) and (out.view(np.uint32) == mine.view(np.uint32)).all()
    assert (out[c["topk_ids"] == -1] == 0).all()
    bf = ko.fused_moe_fp8(*args, schedule=NUMPY)
    assert bf.dtype == np.uint16 and (bf == ko.encode_bf16(out)).all()


def test_bad_arguments_raise_before_any_call():
    calls = []

    def f(*args):
        calls.append(1)

    for kw in (dict(shapes=[(0, 128, 128, 4, 2)]), dict(shapes=[(4, 128, 128, 4, 0)]),
               dict(arms=["EXACTLY"]), dict(routings=["HOT"]), dict(out_dtype="int8"),
               dict(shapes=[(4, 128, 128, 4, 2), (1 << 20, 7168, 4096, 256, 8)]),
               dict(shapes=[(1, 1 << 16, 1 << 16, 1024, 1)])):
        with pytest.raises(ValueError):
            ko.check_fused_moe_fp8(f, **kw)
    assert not calls
    c = ko.fused_moe_fp8_case(2, 128, 128, 4, 2, "RAND", "RAND")
    args = [c[x] for x in ("a", "a_scale", "w", "w_scale", "topk_weights", "topk_ids")]
    bad = args[5].copy()
    bad[0, 0] = 4
    with pytest.raises(ValueError, match="topk_ids"):
        ko.fused_moe_fp8(*args[:5], bad)
    with pytest.raises(ValueError, match="w_scale"):
        ko.fused_moe_fp8(args[0], args[1], args[2], args[3][:, :, :0], *args[4:])


# Each planted bug, the out_dtype it is run with, and the arms that must
# catch it. A 16-bit out hides GEMM differences below half an output ulp,
# so the association bugs run with float32 out.
BUGS = {
    "scales-first": ("float32", ["FOLD"]),
    "weight-inside-fold": ("float32", ["FOLD"]),
    "weight-twice": ("bfloat16", ["EXACT", "FOLD", "CODES", "RAND"]),
    "weight-missing": ("bfloat16", ["EXACT", "FOLD", "CODES", "RAND"]),
    "scale-of-next-expert": ("bfloat16", ["EXACT", "FOLD", "RAND"]),
    "scale-row-of-64": ("bfloat16", ["EXACT", "FOLD", "RAND"]),
    "a-scale-of-pair-row": ("bfloat16", ["FOLD", "RAND"]),
    "truncates-bf16": ("bfloat16", ["EXACT", "FOLD", "RAND"]),
    "k-tail-unmasked": ("bfloat16", ["FOLD", "RAND"]),
    "drops-a-pair": ("bfloat16", ["EXACT", "FOLD", "CODES", "RAND"]),
    "minus-one-is-last-expert": ("bfloat16", ["EXACT", "FOLD", "CODES", "RAND"]),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bug_is_caught(bug, capsys):
    out_dtype, arms = BUGS[bug]
    routings = ["INVALID"] if bug == "minus-one-is-last-expert" else ["RAND", "INVALID"]
    g = form(bug=bug, out_dtype=out_dtype)
    r = ko.check_fused_moe_fp8(g, shapes=SHAPES, arms=arms, routings=routings, schedule=NUMPY,
                               out_dtype=out_dtype, verbose=False)
    assert not r.ok and r.failed > 0
    # Every arm meant to catch it fails on some shape.
    for arm in arms:
        assert any(f'arms=["{arm}"]' in line for line in r.reproductions), (bug, arm)
    text = capsys.readouterr().out
    assert "FAIL fused_moe_fp8" in text and "kernel_oracle.fused_moe_fp8_case(" in text
    # The first rerun line fails again, alone.
    line = r.reproductions[0]
    kw = dict(re.findall(r'(shapes|arms|routings|seeds)=(\[[^\]]*\]\]?)', line))
    again = ko.check_fused_moe_fp8(g, shapes=eval(kw["shapes"]), arms=eval(kw["arms"]),
                                   routings=eval(kw["routings"]), seeds=eval(kw["seeds"]),
                                   schedule=NUMPY, out_dtype=out_dtype, verbose=False)
    assert not again.ok and again.cases == 1


def test_a_callable_that_writes_its_inputs_or_raises_fails_per_case():
    def scribbles(a, a_scale, w, w_scale, topk_weights, topk_ids, out):
        fused_moe_fp8(a, a_scale, w, w_scale, topk_weights, topk_ids, out)
        topk_weights[...] = 1.0

    def raises(*args):
        raise RuntimeError("no kernel for this shape")

    def refuses(*args):
        raise ko.Refused("k must be a multiple of 128")

    kw = dict(shapes=SHAPES[:1], schedule=NUMPY, verbose=False)
    r = ko.check_fused_moe_fp8(scribbles, **kw)
    assert r.failed == r.cases and "topk_weights" in r.failures[0]
    r = ko.check_fused_moe_fp8(raises, **kw)
    assert r.failed == r.cases == 4 and "no kernel" in r.failures[0]
    r = ko.check_fused_moe_fp8(refuses, **kw)
    assert r.refused == r.cases == 4 and not r.ok
