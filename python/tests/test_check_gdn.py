"""check_gated_delta_rule and check_causal_conv1d_update on float32 numpy
implementations of the two halves of GDN decode (another summation
order, numpy's own exp and log1p) and on planted bugs: the
implementations pass within the bound on every arm; each bug is caught
by the arm meant to catch it, and its printed reproduction reruns the
failing case alone."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from numpy_reference import causal_conv1d_update, causal_conv1d_update_pool, gated_delta_rule, gated_delta_rule_pool

# Small shapes: one head, GQA ratios 2 and 4 with several rows and
# sequences (pytest runs on 2 cores in CI).
SHAPES = [(1, 1, 1, 1), (1, 2, 2, 1), (2, 8, 3, 2)]

# A failure line that counts at least one NaN or infinite element.
NON_FINITE = r"\([1-9][0-9]* NaN or infinite\)"


def rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
    gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state)


def planted(bug):
    def f(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state, bug=bug)

    f.__name__ = bug.replace("-", "_")
    return f


def test_the_numpy_rule_passes_within_the_bound_and_is_not_bit_exact(capsys):
    r = ko.check_gated_delta_rule(rule, shapes=SHAPES)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 3 and r.refused == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("PASS")
    # Another order and other transcendentals: not core's bits, so a
    # bit-exact declaration fails, with a differing element named.
    r = ko.check_gated_delta_rule(rule, shapes=SHAPES[2:], arms=["RAND"], bit_exact=True, verbose=False)
    assert not r.ok and "differ from core's bits" in r.failures[0] and "first differing at" in r.failures[0]


def test_the_oracle_passes_bit_for_bit():
    def oracle(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        case = cases[(q.shape, float(q.flat[0]))]
        return case["o"], case["final_state"]

    cases = {}
    for sh in SHAPES:
        for arm in ("RAND", "GATES", "NORM"):
            c = ko.gated_delta_rule_case(*sh, arm)
            cases[(c["q"].shape, float(c["q"].flat[0]))] = c
    r = ko.check_gated_delta_rule(oracle, shapes=SHAPES, bit_exact=True, verbose=False)
    assert r.ok and r.passed == len(SHAPES) * 3
    assert "identical" in r.text and " 100.0% " in r.text


def test_the_case_function_gives_arrays_and_limits():
    c = ko.gated_delta_rule_case(2, 4, 3, 2, "gates")
    assert c["q"].shape == (2, 3, 2, 128) and c["v"].shape == (2, 3, 4, 128)
    assert c["state"].shape == c["final_state"].shape == (2, 4, 128, 128)
    assert c["o"].shape == c["o_limit"].shape == (2, 3, 4, 128)
    assert c["o_limit"].dtype == np.float64 and (c["o_limit"] > 0).all()
    o, s = np.full_like(c["o"], np.nan), np.full_like(c["final_state"], np.nan)
    gated_delta_rule(*(c[n] for n in ("q", "k", "v", "alpha", "beta_raw", "a_log", "dt_bias", "state")), o, s)
    assert (np.abs(o.astype(np.float64) - c["o"]) <= c["o_limit"]).all()
    with pytest.raises(ValueError, match="num_v"):
        ko.gated_delta_rule_case(3, 4, 1, 1, "RAND")
    with pytest.raises(ValueError, match="arm"):
        ko.gated_delta_rule_case(1, 1, 1, 1, "EXACT")


@pytest.mark.parametrize(
    "bug,arm,caught_by",
    [
        ("softplus-overflow", "GATES", "over their limit"),
        ("softplus-threshold-5", "GATES", "over their limit"),
        ("eps-outside-sqrt", "NORM", "over their limit"),
        ("no-eps", "NORM", NON_FINITE),
        ("gqa-modulo", "RAND", "over their limit"),
        ("decay-after-delta", "RAND", "over their limit"),
        ("read-before-update", "RAND", "over their limit"),
        ("first-sequence-state", "RAND", "over their limit"),
        ("stores-bf16-state", "RAND", "final_state:"),
        ("updates-state-in-place", "RAND", r"wrote its input\(s\): state"),
        ("leaves-final-state-unwritten", "RAND", NON_FINITE),
    ],
)
def test_planted_bug_is_caught_and_its_reproduction_reruns(bug, arm, caught_by, capsys):
    f = planted(bug)
    r = ko.check_gated_delta_rule(f, shapes=SHAPES, verbose=False)
    assert not r.ok and r.failed > 0
    failing = [x for x in r.failures if f"arm={arm}" in x]
    assert failing and any(re.search(caught_by, x) for x in failing), r.failures[0]
    assert len(r.reproductions) == r.failed
    printed = capsys.readouterr().out
    line = r.reproductions[0]
    assert line in printed and line.startswith(f"kernel_oracle.check_gated_delta_rule({f.__name__}, ")
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1
    assert again.failures[0].splitlines()[0] == r.failures[0].splitlines()[0]


def test_returned_outputs_are_judged_and_a_wrong_return_fails():
    def returns(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        o2, s2 = np.empty_like(o), np.empty_like(final_state)
        gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o2, s2)
        return o2, s2

    assert ko.check_gated_delta_rule(returns, shapes=SHAPES[:2], verbose=False).ok

    def returns_one(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        return o

    r = ko.check_gated_delta_rule(returns_one, shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert not r.ok and "expected None (the outputs written) or a tuple" in r.failures[0]


def test_refused_and_bad_arguments():
    def picky(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        if v.shape[2] != q.shape[2]:
            raise ko.Refused("GQA not supported")
        gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state)

    r = ko.check_gated_delta_rule(picky, shapes=SHAPES, verbose=False)
    assert r.ok and r.refused == 6 and r.passed == 3
    with pytest.raises(ValueError, match="num_v"):
        ko.check_gated_delta_rule(rule, shapes=[(3, 4, 1, 1)])
    with pytest.raises(ValueError, match="arm"):
        ko.check_gated_delta_rule(rule, arms=["EXACT"])


# Ragged channel counts, t past the state, sequences (CI's 2 cores).
CONV_SHAPES = [(1, 4, 1, 1), (130, 4, 1, 3), (300, 3, 2, 2), (200, 2, 5, 1)]


def conv(x, conv_state, weight, out, final_state):
    causal_conv1d_update(x, conv_state, weight, out, final_state)


def planted_conv(bug):
    def f(x, conv_state, weight, out, final_state):
        causal_conv1d_update(x, conv_state, weight, out, final_state, bug=bug)

    f.__name__ = bug.replace("-", "_")
    return f


def test_the_numpy_conv_passes_within_the_bound_with_its_state_bit_for_bit(capsys):
    r = ko.check_causal_conv1d_update(conv, shapes=CONV_SHAPES)
    assert r.ok and r.passed == r.cases == len(CONV_SHAPES) * 3
    assert capsys.readouterr().out.rstrip().endswith("PASS")
    c = ko.causal_conv1d_update_case(130, 4, 3, 2, "WIDE")
    out, st = np.full_like(c["out"], np.nan), np.full_like(c["final_state"], np.nan)
    causal_conv1d_update(c["x"], c["conv_state"], c["weight"], out, st)
    assert (st == c["final_state"]).all()
    assert (np.abs(out.astype(np.float64) - c["out"]) <= c["out_limit"]).all()


@pytest.mark.parametrize(
    "bug,caught_by",
    [
        ("convolution", r"out: \d+ of \d+ elements over their limit"),
        ("stale-window", r"out: \d+ of \d+ elements over their limit"),
        ("no-silu", r"out: \d+ of \d+ elements over their limit"),
        ("ragged-channels-unwritten", NON_FINITE),
        ("state-shifted-once", r"final_state: \d+ of \d+ elements differ from core's bits"),
        ("state-newest-first", r"final_state: \d+ of \d+ elements differ from core's bits"),
        ("reads-state-head", r"arm=LONG(.|\n)*out: \d+ of \d+ elements over their limit"),
        ("shifts-only-the-window", r"arm=LONG(.|\n)*final_state: \d+ of \d+ elements differ"),
    ],
)
def test_planted_conv_bug_is_caught_and_its_reproduction_reruns(bug, caught_by, capsys):
    f = planted_conv(bug)
    r = ko.check_causal_conv1d_update(f, shapes=CONV_SHAPES, verbose=False)
    assert not r.ok and any(re.search(caught_by, x) for x in r.failures), r.failures[0]
    line = r.reproductions[0]
    assert line in capsys.readouterr().out
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1
    assert again.failures[0].splitlines()[0] == r.failures[0].splitlines()[0]


def test_conv_arguments_are_checked_before_any_call():
    with pytest.raises(ValueError, match="d_conv"):
        ko.check_causal_conv1d_update(conv, shapes=[(8, 5, 1, 1)])
    with pytest.raises(ValueError, match="arm"):
        ko.check_causal_conv1d_update(conv, arms=["GATES"])


def rule_states(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, states, bug=None):
    final = np.empty_like(state)
    gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final, bug=bug, states=states)


def conv_states(x, conv_state, weight, out, states, bug=None):
    final = np.empty_like(conv_state)
    causal_conv1d_update(x, conv_state, weight, out, final, bug=bug, states=states)


def test_the_state_after_every_row_is_judged_when_asked(capsys):
    r = ko.check_gated_delta_rule(rule_states, shapes=SHAPES, states=True)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 3
    r = ko.check_causal_conv1d_update(conv_states, shapes=CONV_SHAPES, states=True)
    assert r.ok and r.passed == r.cases == len(CONV_SHAPES) * 3
    c = ko.gated_delta_rule_case(1, 2, 3, 2, "RAND", states=True)
    assert c["states"].shape == c["state_limit"].shape == (2, 3, 2, 128, 128) and "final_state" not in c
    last = ko.gated_delta_rule_case(1, 2, 3, 2, "RAND")["final_state"]
    assert (c["states"][:, -1] == last).all()
    c = ko.causal_conv1d_update_case(130, 4, 5, 2, "RAND", states=True)
    assert c["states"].shape == (2, 5, 130, 3)
    assert (c["states"][:, -1] == ko.causal_conv1d_update_case(130, 4, 5, 2, "RAND")["final_state"]).all()


@pytest.mark.parametrize(
    "check,impl,bug,shapes,caught_by",
    [
        ("check_gated_delta_rule", rule_states, "states-before-row", SHAPES, r"states: \d+ of \d+ elements over"),
        ("check_gated_delta_rule", rule_states, "states-last-only", SHAPES[1:], NON_FINITE),
        ("check_causal_conv1d_update", conv_states, "states-before-input", CONV_SHAPES,
         r"states: \d+ of \d+ elements differ from core's bits"),
    ],
)
def test_a_wrong_state_snapshot_is_caught_and_its_reproduction_reruns(check, impl, bug, shapes, caught_by, capsys):
    def f(*args):
        impl(*args, bug=bug)

    f.__name__ = bug.replace("-", "_")
    r = getattr(ko, check)(f, shapes=shapes, states=True, verbose=False)
    assert not r.ok and any(re.search(caught_by, x) for x in r.failures), r.failures[0]
    line = r.reproductions[0]
    assert "states=True" in line and line in capsys.readouterr().out
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


def test_one_array_for_two_outputs_is_refused_not_split():
    # An array is a sequence; a B = 2 final state must not be taken for
    # the pair (o, final_state).
    def returns_the_state_alone(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state)
        return final_state

    r = ko.check_gated_delta_rule(returns_the_state_alone, shapes=[(1, 1, 1, 2)], arms=["RAND"], verbose=False)
    assert not r.ok and "returned an array of dtype float32, not a tuple of 2: expected None (the outputs written) or a tuple" in r.failures[0]

    def returns_an_int(*args):
        return 3

    r = ko.check_gated_delta_rule(returns_an_int, shapes=[(1, 1, 1, 1)], arms=["RAND"], verbose=False)
    assert "returned a value of type int" in r.failures[0]


def test_many_trials_are_drawn_one_at_a_time():
    calls = []

    def stops_after_three(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state)

    with pytest.raises(KeyboardInterrupt):
        ko.check_gated_delta_rule(stops_after_three, shapes=[(1, 1, 1, 1)], arms=["RAND"], trials=2**40, verbose=False)
    assert len(calls) == 4


# Shapes for the pool: several sequences (padding, distinct slots) and
# several rows (num_accepted_tokens past 1).
POOL_SHAPES = [(1, 1, 1, 1), (1, 2, 3, 3), (2, 4, 4, 4)]


def pooled(bug=None):
    def f(*args):
        gated_delta_rule_pool(*args, bug=bug)

    f.__name__ = (bug or "pooled_rule").replace("-", "_")
    return f


def test_the_pooled_rule_passes_in_both_modes_and_padding_is_drawn(capsys):
    for mode in ("decode", "spec"):
        r = ko.check_gated_delta_rule(pooled(), shapes=POOL_SHAPES, arms=["RAND"], trials=4, pool=mode)
        assert r.ok and r.passed == r.cases == len(POOL_SHAPES) * 4, r.failures[:1]
        out = capsys.readouterr().out
        assert f"states in a pool of slots ({mode})" in out
    padded = accepted = 0
    for seed in range(40):
        c = ko.gated_delta_rule_case(1, 2, 3, 3, "RAND", seed=seed, pool="spec")
        padded += len(c["padded"])
        accepted += int((c["num_accepted_tokens"] > 1).sum())
    # One sequence in four is padding; num_accepted_tokens is uniform in 1..=3.
    assert 15 <= padded <= 45 and 60 <= accepted <= 100


def test_the_pool_case_gives_its_arrays():
    c = ko.gated_delta_rule_case(2, 4, 3, 2, "RAND", seed=5, pool="spec")
    n = c["state_pool"].shape[0]
    assert c["state_pool"].shape == c["final_pool"].shape == c["pool_limit"].shape == (n, 4, 128, 128)
    assert c["ssm_state_indices"].shape == (2, 3) and c["ssm_state_indices"].dtype == np.int32
    assert c["num_accepted_tokens"].shape == (2,) and n > 6 - (c["ssm_state_indices"] < 0).sum()
    o, pool = np.full_like(c["o"], np.nan), np.full_like(c["final_pool"], np.nan)
    names = ("q", "k", "v", "alpha", "beta_raw", "a_log", "dt_bias", "state_pool", "ssm_state_indices", "num_accepted_tokens")
    gated_delta_rule_pool(*(c[x] for x in names), o, pool)
    assert (np.abs(pool.astype(np.float64) - c["final_pool"]) <= c["pool_limit"]).all()
    untouched = (c["pool_limit"] == 0).all(axis=(1, 2, 3))
    assert untouched.any() and (c["final_pool"][untouched] == c["state_pool"][untouched]).all()
    d = ko.gated_delta_rule_case(2, 4, 3, 2, "RAND", seed=5, pool="decode")
    assert d["ssm_state_indices"].shape == (2,) and "num_accepted_tokens" not in d
    with pytest.raises(ValueError, match="expected \"decode\" or \"spec\""):
        ko.gated_delta_rule_case(1, 1, 1, 1, "RAND", pool="prefill")
    with pytest.raises(ValueError, match="states=True with a pool"):
        ko.check_gated_delta_rule(pooled(), states=True, pool="spec")


@pytest.mark.parametrize(
    "bug,mode,caught_by",
    [
        ("ignores-indices", "decode", "over their limit"),
        ("computes-padded-sequences", "decode", "a slot no sequence writes"),
        ("reads-first-column", "spec", "over their limit"),
        ("bound-by-row-stride", "spec", NON_FINITE),
        ("stores-final-only", "spec", "the state of sequence"),
        ("stores-unindexed-rows", "spec", "final_pool:"),
        ("pool-not-copied", "decode", NON_FINITE),
        ("zeroes-untouched-slots", "spec", "a slot no sequence writes"),
        ("transposed-pool", "decode", "over their limit"),
    ],
)
def test_a_pool_addressing_bug_is_caught_and_its_reproduction_reruns(bug, mode, caught_by, capsys):
    f = pooled(bug)
    r = ko.check_gated_delta_rule(f, shapes=POOL_SHAPES, arms=["RAND"], trials=4, pool=mode, verbose=False)
    assert not r.ok and any(re.search(caught_by, x) for x in r.failures), r.failures[0]
    line = r.reproductions[0]
    assert f'pool="{mode}"' in line
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


def conv_pooled(bug=None):
    def f(*args):
        causal_conv1d_update_pool(*args, bug=bug)

    f.__name__ = (bug or "conv_pooled").replace("-", "_")
    return f


CONV_POOL_SHAPES = [(1, 4, 1, 1), (130, 4, 2, 3), (700, 2, 5, 4)]


def test_the_pooled_conv_passes_and_addressing_bugs_are_caught():
    r = ko.check_causal_conv1d_update(conv_pooled(), shapes=CONV_POOL_SHAPES, trials=3, pool="decode", verbose=False)
    assert r.ok and r.passed == r.cases == len(CONV_POOL_SHAPES) * 3 * 3, r.failures[:1]
    c = ko.causal_conv1d_update_case(130, 4, 2, 3, "RAND", seed=3, pool="decode")
    n = c["conv_state"].shape[0]
    assert c["final_pool"].shape == (n, 130, 3) and c["conv_state_indices"].shape == (3,) and n > 3
    for bug, caught_by in [
        ("ignores-indices", "final_pool:"),
        ("computes-padding", "a slot no sequence writes"),
        ("pool-not-copied", NON_FINITE),
    ]:
        f = conv_pooled(bug)
        r = ko.check_causal_conv1d_update(f, shapes=CONV_POOL_SHAPES, trials=3, pool="decode", verbose=False)
        assert not r.ok and any(re.search(caught_by, x) for x in r.failures), (bug, r.failures[:1])
        again = eval(r.reproductions[0], {"kernel_oracle": ko, f.__name__: f})
        assert again.failed == 1 and 'pool="decode"' in r.reproductions[0]
    with pytest.raises(ValueError, match="speculative window"):
        ko.check_causal_conv1d_update(conv_pooled(), pool="spec")
