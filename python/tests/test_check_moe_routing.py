"""check_moe_routing on numpy routers written from the rules (softmax and
sigmoid scoring, a bias, DeepSeek's groups, float32 and float64
arithmetic, forward and pairwise sums) and on planted bugs: each correct
form passes, each bug is caught by the default arms and shapes, with a
rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32, f64 = np.float32, np.float64

DEEPSEEK_V3 = dict(scoring="sigmoid", n_group=8, topk_group=4, bias=True,
                   routed_scaling_factor=2.5)
DEEPSEEK_V2 = dict(scoring="softmax", n_group=8, topk_group=3, renormalize=False,
                   routed_scaling_factor=16.0)


def logits_f32(logits):
    """The logits' values: bfloat16 bit patterns widened, or float32."""
    if logits.dtype == np.uint16:
        return (logits.astype(np.uint32) << 16).view(f32)
    return logits.astype(f32)


def numpy_router(top_k, scoring="softmax", renormalize=True, n_group=None,
                 topk_group=None, group_score=None, bias=False,
                 routed_scaling_factor=1.0, precision=f32, pairwise=False,
                 bug=None):
    """A router in numpy: scores in `precision`, the bias added for the
    choice, groups by their maximum or top-2 sum, a stable top-k, the
    weights renormalised and scaled; or with a planted bug."""
    score_of = group_score or ("top2_sum" if bias else "max")

    def route(logits, b=None):
        x = logits_f32(logits).astype(precision)
        t, e = x.shape
        if scoring == "softmax":
            m = 0 if bug == "no-max" else x.max(axis=1, keepdims=True)
            ex = np.exp(x - m)
            if pairwise:
                s = ex
                while s.shape[1] > 1:
                    if s.shape[1] % 2:
                        s = np.concatenate([s, np.zeros((t, 1), s.dtype)], axis=1)
                    s = s[:, 0::2] + s[:, 1::2]
                total = s
            else:
                total = ex.sum(axis=1, keepdims=True)
            if bug == "softmax-over-tokens":
                total = ex.sum(axis=0, keepdims=True)
            p = ex / total
        elif bug == "sigmoid-overflows":
            ex = np.exp(x)
            p = ex / (precision(1) + ex)
        else:
            p = precision(1) / (precision(1) + np.exp(-x))
        sel = p.copy()
        if bug == "rank-bf16-probs":  # chosen on probabilities held in bfloat16
            sel = ko.decode_bf16(ko.encode_bf16(p.astype(f32))).astype(precision)
        if b is not None and bug != "bias-ignored":
            sel = sel + b.astype(precision)
        if n_group is not None and bug != "no-groups":
            g = sel.reshape(t, n_group, e // n_group)
            how = score_of
            if bug == "group-max":
                how = "max"
            if bug == "group-top2":
                how = "top2_sum"
            if how == "max":
                gs = g.max(axis=2)
            else:
                gs = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)
            keep = np.argsort(-gs, axis=1, kind="stable")[:, :topk_group]
            mask = np.zeros((t, n_group), bool)
            np.put_along_axis(mask, keep, True, axis=1)
            # Hugging Face's DeepSeek-V3 MoEGate masks with 0.0, below which
            # a biased score can fall.
            masked = 0.0 if bug == "mask-zero" else -np.inf
            sel = np.where(np.repeat(mask, e // n_group, axis=1), sel, masked)
        if bug == "ascending":
            ids = np.argsort(sel, axis=1, kind="stable")[:, -top_k:]
        else:
            ids = np.argsort(-sel, axis=1, kind="stable")[:, :top_k]
        if bug == "ties-twice":
            ids = ids.copy()
            same = np.take_along_axis(sel, ids[:, :2], axis=1)
            ids[:, 1] = np.where(same[:, 0] == same[:, 1], ids[:, 0], ids[:, 1])
        w_from = sel if bug == "biased-weights" else p
        if bug == "raw-logit-weights":  # the gathered logits (SGLang PR 35160)
            w_from = x
        w = np.take_along_axis(w_from, ids, axis=1)
        if renormalize and bug != "no-renormalize":
            w = w / w.sum(axis=1, keepdims=True)
        w = w * precision(routed_scaling_factor)
        if bug == "scale-twice":
            w = w * precision(routed_scaling_factor)
        if bug == "one-based":
            ids = ids + 1
        return w.astype(f32), ids.astype(np.int32)

    if bias:
        def f(logits, b, weights, ids):
            weights[...], ids[...] = route(logits, b)
    else:
        def f(logits, weights, ids):
            weights[...], ids[...] = route(logits)
    f.__name__ = "numpy_router_" + (bug or "ok").replace("-", "_")
    return f


def run(cfg, top_k, bug=None, verbose=False, **kw):
    fn = numpy_router(top_k, bug=bug, **cfg, **kw)
    return ko.check_moe_routing(fn, top_k=top_k, verbose=verbose, **cfg)


@pytest.mark.parametrize("precision,pairwise", [(f32, False), (f32, True), (f64, False)])
@pytest.mark.parametrize("name,cfg,top_k", [
    ("mixtral", dict(), 2),
    ("qwen3", dict(), 8),
    ("qwen2", dict(renormalize=False), 4),
    ("deepseek_v3", DEEPSEEK_V3, 8),
    ("deepseek_v2", DEEPSEEK_V2, 6),
    ("kimi_k2", dict(scoring="sigmoid", bias=True, routed_scaling_factor=2.827), 8),
])
def test_correct_routers_pass(name, cfg, top_k, precision, pairwise):
    fn = numpy_router(top_k, precision=precision, pairwise=pairwise, **cfg)
    r = ko.check_moe_routing(fn, top_k=top_k, verbose=False, **cfg)
    assert r, r.text
    assert r.failed == 0 and r.passed == r.cases > 0
    # The summary names the declared routing among those it is consistent with.
    assert "consistent on every compared case with:" in r.text


def test_sorted_is_checked_and_named():
    fn = numpy_router(8)
    assert ko.check_moe_routing(fn, top_k=8, sorted=True, verbose=False)
    fn = numpy_router(8, bug="ascending")
    r = ko.check_moe_routing(fn, top_k=8, sorted=True, verbose=False)
    assert not r and "declared sorted" in r.failures[0]
    # Unsorted, the same set of ids passes.
    assert ko.check_moe_routing(fn, top_k=8, verbose=False)


@pytest.mark.parametrize("cfg,top_k,bug,arm", [
    (DEEPSEEK_V3, 8, "bias-ignored", "BIAS"),
    (DEEPSEEK_V3, 8, "biased-weights", "RAND"),
    (DEEPSEEK_V3, 8, "group-max", "GROUPS"),
    (DEEPSEEK_V3, 8, "no-groups", "GROUPS"),
    (DEEPSEEK_V3, 8, "scale-twice", "RAND"),
    (DEEPSEEK_V3, 8, "mask-zero", "BIAS"),
    (DEEPSEEK_V3, 8, "no-renormalize", "RAND"),
    (DEEPSEEK_V2, 6, "no-groups", "GROUPS"),
    (DEEPSEEK_V2, 6, "group-top2", "GROUPS"),
    (DEEPSEEK_V3, 8, "sigmoid-overflows", "SKEW"),
    (dict(), 2, "no-max", "SKEW"),
    (dict(), 2, "softmax-over-tokens", "RAND"),
    (dict(), 2, "ties-twice", "TIES"),
    (dict(), 8, "one-based", "RAND"),
    (dict(), 8, "no-renormalize", "RAND"),
    # RAND's tokens of logits 0.1 apart put probabilities within a few
    # percent of each other: bfloat16 merges and misorders them.
    (dict(), 2, "rank-bf16-probs", "RAND"),
    (dict(), 8, "rank-bf16-probs", "RAND"),
])
def test_planted_bugs_fail(cfg, top_k, bug, arm):
    r = run(cfg, top_k, bug=bug)
    assert not r, f"{bug} passed"
    failed_arms = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert arm in failed_arms, (bug, failed_arms)
    # The first failure's rerun line fails again, alone.
    fn = numpy_router(top_k, bug=bug, **cfg)
    again = eval(r.reproductions[0], {"kernel_oracle": ko, fn.__name__: fn})
    assert not again and again.cases == 1


def test_weights_in_bf16_and_float32_declared():
    # A router whose weights are bfloat16 fails a float32 declaration.
    def bf16_weights(logits, weights, ids):
        w, i = np.zeros(weights.shape, f32), np.zeros(ids.shape, np.int32)
        numpy_router(2)(logits, w, i)
        weights[...] = ko.decode_bf16(ko.encode_bf16(w))
        ids[...] = i

    assert not ko.check_moe_routing(bf16_weights, top_k=2, verbose=False)

    def bf16_out(logits, weights, ids):
        w = np.zeros(weights.shape, f32)
        numpy_router(2)(logits, w, ids)
        weights[...] = ko.encode_bf16(w)

    assert ko.check_moe_routing(bf16_out, top_k=2, out_dtype="bfloat16", verbose=False)


def test_unwritten_slots_and_int64_ids_fail_with_a_reason():
    def last_slot_unwritten(logits, weights, ids):
        w, i = np.zeros(weights.shape, f32), np.zeros(ids.shape, np.int32)
        numpy_router(2)(logits, w, i)
        weights[:, 0], ids[:, 0] = w[:, 0], i[:, 0]

    r = ko.check_moe_routing(last_slot_unwritten, top_k=2, verbose=False)
    assert not r and "is not an expert" in r.failures[0]

    def int64_ids(logits, weights, ids):
        w, i = np.zeros(weights.shape, f32), np.zeros(ids.shape, np.int32)
        numpy_router(2)(logits, w, i)
        return w, i.astype(np.int64)

    r = ko.check_moe_routing(int64_ids, top_k=2, verbose=False)
    assert not r and "int32" in r.failures[0]


def test_every_arm_runs_where_it_applies():
    r = run(DEEPSEEK_V3, 8, verbose=True)
    for arm in ["RAND", "TIES", "SKEW", "BIAS", "GROUPS"]:
        assert f" {arm} " in r.text, arm
    r = run(dict(), 2, verbose=True)
    assert " BIAS " not in r.text and " GROUPS " not in r.text
    # Default shapes: only those the groups divide (60 experts is not 8 groups).
    assert "7,60" not in run(DEEPSEEK_V3, 8, verbose=True).text
    assert "7,60" in r.text


def test_bad_arguments_are_refused_before_any_call():
    calls = []

    def never(*a):
        calls.append(1)

    for kw in [dict(scoring="relu"), dict(n_group=8), dict(top_k=0),
               dict(n_group=8, topk_group=9), dict(exp_ulps=1),
               dict(routed_scaling_factor=float("nan")), dict(dtype="int8"),
               dict(shapes=[(4, 60)], n_group=8, topk_group=4),
               dict(shapes=[(1 << 12, 1 << 11)]), dict(group_score="max")]:
        args = dict(top_k=2) | kw
        with pytest.raises(ValueError):
            ko.check_moe_routing(never, verbose=False, **args)
    with pytest.raises(ValueError):
        ko.check_moe_routing(never, top_k=2, arms=["NOPE"], verbose=False)
    assert not calls


def test_the_case_function_gives_the_check_arrays():
    c = ko.moe_routing_case(3, 256, "GROUPS", 8, **DEEPSEEK_V3)
    assert c["logits"].shape == (3, 256) and c["logits"].dtype == np.uint16
    assert c["bias"].shape == (256,) and c["ids"].shape == (3, 8)
    # The reference's ids are what a correct router chooses (decided here).
    weights, ids = np.zeros((3, 8), f32), np.zeros((3, 8), np.int32)
    numpy_router(8, **DEEPSEEK_V3)(c["logits"], c["bias"], weights, ids)
    assert (np.sort(ids, axis=1) == np.sort(c["ids"], axis=1)).all()
