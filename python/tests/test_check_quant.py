"""check_fp8_group_quant on numpy per-token-group quantizers written from
the rules' definitions (v2's, vLLM's division, UE8M0) and on planted
bugs: each rule's implementation passes bit for bit and is named; each
bug is caught by the arm meant to catch it, with a rerun line that fails
again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from numpy_reference import group_quant

# One group, a short last group, DeepSeek's 7168 (CI's 2 cores).
SHAPES = [(1, 128), (5, 200), (4, 7168)]


def quantizer(rule, eps=1e-10, bug=None, name=None):
    def f(x, q, s):
        group_quant(x, q, s, rule=rule, eps=eps, bug=bug)

    f.__name__ = name or (bug or rule).replace("-", "_")
    return f


@pytest.mark.parametrize(
    "rule,eps,named",
    [
        ("v2", 0.0, "v2"),
        ("divide", 1e-10, "divide(eps=1e-10)"),
        ("reciprocal", 1e-10, "reciprocal(eps=1e-10)"),
        ("ue8m0", 1e-4, "ue8m0(eps=1e-4)"),
    ],
)
def test_each_rule_passes_bit_for_bit_and_is_named(rule, eps, named, capsys):
    r = ko.check_fp8_group_quant(quantizer(rule, eps), rule=rule, eps=eps, shapes=SHAPES)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 4
    rows = [line for line in r.text.splitlines() if " PASS " in line]
    assert rows and all(named in line for line in rows)
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_the_quantizer_function_is_the_oracle():
    c = ko.fp8_group_quant_case(5, 200, "TIES", rule="divide")
    q, s = ko.quantize_fp8_groups(c["x"], rule="divide")
    assert (q == c["q"]).all() and (s.view(np.uint32) == c["s"].view(np.uint32)).all()
    assert s.shape == (5, 2)
    with pytest.raises(ValueError, match="rule"):
        ko.quantize_fp8_groups(c["x"], rule="nearest")
    with pytest.raises(ValueError, match="group"):
        ko.quantize_fp8_groups(c["x"], group=0)


@pytest.mark.parametrize(
    "rule,eps,bug,arm,caught_by",
    [
        ("divide", 1e-10, "no-eps", "ZERO", r"scales: [1-9]\d* of"),
        ("divide", 1e-10, "reciprocal-multiply", "TIES", r"codes: [1-9]\d* of"),
        ("divide", 1e-10, "truncate", "RAND", r"codes: [1-9]\d* of"),
        ("divide", 1e-10, "inverted-scale", "RAND", r"scales: [1-9]\d* of"),
        ("divide", 1e-10, "group-64", "RAND", r"codes: [1-9]\d* of"),
        ("divide", 1e-10, "unwritten-last-group", "RAND", r"got 0x7F"),
        ("ue8m0", 1e-4, "ue8m0-exact-ceil", "POW2", r"scales: [1-9]\d* of"),
        ("ue8m0", 1e-10, "truncate", "TIES", r"codes: [1-9]\d* of"),
    ],
)
def test_planted_bug_is_caught_by_its_arm_and_reruns(rule, eps, bug, arm, caught_by, capsys):
    f = quantizer(rule, eps, bug)
    r = ko.check_fp8_group_quant(f, rule=rule, eps=eps, shapes=SHAPES, verbose=False)
    assert not r.ok
    failing = [x for x in r.failures if f"arm={arm}" in x]
    assert failing and any(re.search(caught_by, x) for x in failing), r.failures[0]
    line = r.reproductions[0]
    assert line in capsys.readouterr().out
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


def test_torchs_scalar_division_declared_as_a_division_fails_on_its_scales():
    r = ko.check_fp8_group_quant(quantizer("reciprocal"), rule="divide", shapes=[(4, 7168)], arms=["RAND"],
                                 verbose=False)
    assert not r.ok and "the output matches: reciprocal(eps=1e-10)" in r.failures[0]
    assert "at most 1 ulps" in r.failures[0] and "codes: 0 of" in r.failures[0]


def test_a_multiply_declared_as_a_division_is_named_v2_where_no_floor_shows():
    r = ko.check_fp8_group_quant(quantizer("v2"), rule="divide", shapes=[(4, 7168)], arms=["TIES"], verbose=False)
    assert not r.ok and "the output matches: v2" in r.failures[0]


def test_refusals_and_bad_arguments():
    def needs_whole_groups(x, q, s):
        if x.shape[1] % 128:
            raise ko.Refused("k must be a multiple of 128")
        group_quant(x, q, s)

    r = ko.check_fp8_group_quant(needs_whole_groups, shapes=SHAPES, verbose=False)
    assert r.ok and r.refused == 4 and r.passed == 8
    with pytest.raises(ValueError, match="rule"):
        ko.check_fp8_group_quant(needs_whole_groups, rule="round")
    with pytest.raises(ValueError, match="at least 1"):
        ko.check_fp8_group_quant(needs_whole_groups, shapes=[(0, 128)])
    # A NaN floor would make the sentinels the oracle's own answer.
    for eps in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="eps"):
            ko.check_fp8_group_quant(lambda x, q, s: None, eps=eps)


def test_a_group_loop_vectorized_by_8_without_its_tail_fails_the_default_shapes():
    # The default ragged shape's last group holds 75 elements: a kernel
    # moving 8 at a time with no tail loop leaves 3 codes unwritten.
    good = quantizer("divide")

    def vec8(x, q, s):
        good(x, q, s)
        k = x.shape[1]
        if k % 8:
            q[:, k - k % 8:] = 0x7F

    assert ko.check_fp8_group_quant(good, verbose=False)
    r = ko.check_fp8_group_quant(vec8, verbose=False)
    assert not r and all("k=203" in f or "203" in f for f in r.failures), r.failures[:1]
