"""check_fp8_group_quant on numpy per-token-group quantizers written from
the rules' definitions (v2's, vLLM's division, UE8M0 under either
ceiling) and on planted bugs: each rule's implementation passes bit for
bit and is named; each bug is caught by the arm meant to catch it, with a
rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from numpy_reference import (NP_LOG2F_CEIL_IS_MODELS, group_quant, group_quant_ue8m0, log2f, log2f_model,
                             ue8m0_pow2, ue8m0_table)

# One group, a short last group, DeepSeek's 7168 (CI's 2 cores).
SHAPES = [(1, 128), (5, 200), (4, 7168)]


def quantizer(rule, eps=1e-10, bug=None, name=None):
    def f(x, q, s):
        if rule == "ue8m0_exact":
            group_quant_ue8m0(x, q, s, ceil="exact", eps=eps)
        else:
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
        ("ue8m0_exact", 1e-4, "ue8m0_exact(eps=1e-4)"),
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


# ---------------------------------------------------------------------------
# UE8M0's two ceilings: 2^ceil(log2f(s)) (vLLM's CUDA kernel, torch, Triton)
# against the exact ceiling (the bit forms), parted by POW2 alone.
# ---------------------------------------------------------------------------

def amax_for(target, fmax=np.float32(448)):
    """A float32 amax with amax / fmax == target bit for bit (the check's
    own scale formula), from fl(fmax * target) and its neighbours."""
    c = int(np.array([fmax * target], np.float32).view(np.uint32)[0])
    for d in (0, 1, -1, 2, -2, 3, -3):
        a = np.array([c + d], np.uint32).view(np.float32)[0]
        if a / fmax == target:
            return a
    raise AssertionError(target)


def test_numpys_float32_log2_takes_the_h100_tables_ceilings():
    # numpy's float32 log2 is the log2f forms' log2: its ceilings must be
    # the correctly rounded model's on the table (else the forms use the
    # model, and this says so).
    s, pairs = ue8m0_table()
    assert NP_LOG2F_CEIL_IS_MODELS, "numpy's float32 log2 parts from the model: the forms use the model"
    model = np.ceil(log2f_model(s))
    assert np.array_equal(np.ceil(np.log2(s)), model) and np.array_equal(np.ceil(log2f(s)), model)
    kept = [(e, u) for (e, u), c in zip(pairs, model) if u > 0 and c == e]
    assert len(kept) == 124
    assert all(c == e for (e, u), c in zip(pairs, model) if u < 0)
    # The oracle's scales under both rules, on a group whose amax / 448 is
    # each table scale above vLLM's floor (2^-33).
    for (e, u), target in zip(pairs, s):
        if e < -33:
            continue
        a = amax_for(target)
        x = np.array([[a, -0.5 * a]], np.float32)
        for rule, ceil in [("ue8m0", "log2f"), ("ue8m0_exact", "exact")]:
            _, sc = ko.quantize_fp8_groups(x, rule=rule)
            assert sc[0, 0] == ue8m0_pow2(target, ceil), (e, u, rule)
        assert ue8m0_pow2(target, "exact") == np.float32(2.0 ** (e + (u > 0)))


def test_the_pow2_arm_parts_the_ceilings_on_half_its_groups():
    c = ko.fp8_group_quant_case(64, 4096, "POW2", rule="ue8m0")
    amax = np.abs(c["x"]).reshape(64, 32, 128).max(axis=2)
    sc = amax / np.float32(448)
    parts = ue8m0_pow2(sc, "log2f") != ue8m0_pow2(sc, "exact")
    assert parts.mean() == 0.5
    # Row-major group t parts where t % 4 is 0 or 2.
    t = np.arange(64 * 32).reshape(64, 32)
    assert np.array_equal(parts, t % 2 == 0)
    assert np.array_equal(c["s"], ue8m0_pow2(sc, "log2f"))
    # torch's amax / 448.0 (times fl(1/448)) gives the same scale wherever
    # the ceilings part (and at or above every power of two).
    torch_sc = amax * (np.float32(1) / np.float32(448))
    assert np.array_equal(torch_sc[parts], sc[parts])
    assert np.array_equal(ue8m0_pow2(torch_sc, "log2f"), ue8m0_pow2(sc, "log2f"))


@pytest.mark.parametrize("form,declared,named", [("log2f", "ue8m0_exact", "ue8m0(eps=1e-10)"),
                                                 ("exact", "ue8m0", "ue8m0_exact(eps=1e-10)")])
def test_each_ceiling_fails_the_other_declaration_on_pow2_alone(form, declared, named):
    def f(x, q, s):
        group_quant_ue8m0(x, q, s, ceil=form)

    f.__name__ = f"numpy_ue8m0_{form}"
    own = "ue8m0" if form == "log2f" else "ue8m0_exact"
    r = ko.check_fp8_group_quant(f, rule=own, shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == len(SHAPES) * 4, r.failures[:1]
    r = ko.check_fp8_group_quant(f, rule=declared, shapes=SHAPES, verbose=False)
    assert r.failed == len(SHAPES) and all("arm=POW2" in x for x in r.failures), r.text
    for x in r.failures:
        assert re.search(r"scales: [1-9]\d* of", x) and f"the output matches: {named}" in x, x
        assert f'rule="{declared}"' in x
    again = eval(r.reproductions[0], {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


def test_a_ceiling_that_doubles_exact_powers_fails_pow2_alone():
    # 2^(floor(log2 s) + 1): right wherever s is not a power of two, so
    # only POW2's exact powers (one group in eight) catch it, under either
    # declared ceiling.
    def bumps_powers(x, q, s):
        m, k = x.shape
        for g in range(-(-k // 128)):
            lo, hi = g * 128, min((g + 1) * 128, k)
            amax = np.maximum(np.max(np.abs(x[:, lo:hi]), axis=1), np.float32(1e-10))
            b = np.maximum(amax / np.float32(448), np.float32(1e-10)).view(np.uint32).astype(np.int64)
            sc = np.exp2(((b >> 23) & 0xFF) - 126.0).astype(np.float32)
            q[:, lo:hi] = ko.encode_e4m3(np.clip(x[:, lo:hi] / sc[:, None], -448, 448).astype(np.float32))
            s[:, g] = sc

    for rule in ["ue8m0", "ue8m0_exact"]:
        r = ko.check_fp8_group_quant(bumps_powers, rule=rule, shapes=[(5, 200), (4, 7168)], verbose=False)
        assert r.failed == 2 and all("arm=POW2" in x for x in r.failures), r.text
