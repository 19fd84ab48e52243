"""check_rejection_sample on numpy rejection samplers written from the
field's sources (vLLM v1's `rejection_sample`: `rejection_greedy_sample_kernel`,
`rejection_random_sample_kernel` and `sample_recovered_tokens_kernel`,
with the current `prob * inv_q` race and the earlier `prob / q`;
FlashInfer's `chain_speculative_sampling` acceptance, `u * q < p`) and on
planted bugs: each correct form passes its declaration and is
identified as it, each bug is caught by the default arms on the arm
named, with a rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32

# The tests' shapes: the check's defaults without Qwen2's 151936
# (test_the_default_shapes_pass runs it).
SHAPES = [s for s in ko.REJECTION_SAMPLE_SHAPES if s[2] <= 32000]
ARMS = ["RAND", "TIES", "ZERO_Q", "EARLY", "ALL", "NGRAM", "GREEDY"]
VLLM = "divide_ge/reciprocal"


def numpy_rejection_sample(accept="divide_ge", race="reciprocal", bug=None):
    """vLLM v1's rejection sampler in float32 numpy, one request at a
    time as its kernels take them (a program per request), the acceptance
    test and race form as parameters, or with a planted bug."""

    def recover(p, q, x, e):
        # sample_recovered_tokens_kernel: the residual, clamped at 0; the
        # n-gram path masks the draft token's load to 0.
        if q is None:
            r = p.copy()
            r[x] = 0
        elif bug == "unclamped":
            r = p - q
        elif bug == "from-p":
            r = p.copy()
        else:
            r = np.maximum(p - q, f32(0))
        s = r / e if race == "divide" else r * (f32(1) / e)
        if bug == "whole-blocks":
            # The vocabulary walked in whole 1024-id blocks (one at least),
            # the partial last block never read.
            s = s[: max(1, len(s) // 1024) * 1024]
        if bug == "last-tie":
            return len(s) - 1 - int(np.argmax(s[::-1]))
        return int(np.argmax(s))

    def accepts(p, q, u):
        if bug == "u-zero-log":
            # vllm-ascend's v2 NPU kernel before PR 13766: u = 0.0 in
            # `target_log_prob > log(u) + draft_log_prob`, so `p > 0`.
            return p > 0
        if accept == "multiply_lt":
            return f32(u * q) < p
        if bug == "gt":
            return q > 0 and f32(p / q) > u
        return q > 0 and f32(p / q) >= u

    def sample(draft_token_ids, draft_probs, target_probs, bonus_token_ids,
               uniform, noise, is_greedy, out):
        b_, k = draft_token_ids.shape
        v = target_probs.shape[-1]
        out[:] = -1
        for b in range(b_):
            rejected = False
            # "first-8": draft positions past 8 neither judged nor written.
            for i in range(min(k, 8) if bug == "first-8" else k):
                if rejected and bug != "no-stop":
                    break
                x = int(draft_token_ids[b, i])
                p = target_probs[b, i + 1 if bug == "target-next" else i]
                if is_greedy[b]:
                    t = int(np.argmax(p))
                    out[b, i] = t
                    rejected |= t != x
                    continue
                q = None if draft_probs is None else draft_probs[b, i]
                qx = f32(1) if q is None else q[(x + 1) % v if bug == "q-wrong-token" else x]
                if accepts(p[x], qx, uniform[b, i]):
                    out[b, i] = x
                else:
                    out[b, i] = recover(p, q, x, noise[b])
                    rejected = True
            if bug == "no-bonus":
                continue
            if not rejected or bug == "bonus-always":
                out[b, k] = bonus_token_ids[b]

    sample.__name__ = (f"numpy_{accept}_{race}" + (f"_{bug}" if bug else "")).replace("-", "_")
    return sample


def run(fn, **kw):
    kw.setdefault("shapes", SHAPES)
    kw.setdefault("verbose", False)
    return ko.check_rejection_sample(fn, **kw)


def summary(r):
    """The declarations every compared case matched, from the summary."""
    line = r.text.strip().splitlines()[-1]
    return line.split("on every compared case under: ", 1)[1].split(";")[0].strip()


def test_vllm_form_passes_and_is_identified():
    r = run(numpy_rejection_sample())
    assert r, r.text
    assert r.failed == 0 and r.passed == r.cases == len(ARMS) * len(SHAPES)
    # TIES parts both the acceptance tests and the race forms.
    assert summary(r) == VLLM, r.text.splitlines()[-1]


def test_the_default_shapes_pass():
    r = ko.check_rejection_sample(numpy_rejection_sample(), verbose=False)
    assert r, r.text
    assert r.passed == r.cases == len(ARMS) * len(ko.REJECTION_SAMPLE_SHAPES)


@pytest.mark.parametrize("accept,race", [
    ("divide_ge", "divide"),      # vLLM before inv_q: prob / q
    ("multiply_lt", "reciprocal"),  # FlashInfer's acceptance test
    ("multiply_lt", "divide"),
])
def test_each_declarable_form_passes_and_names_itself(accept, race):
    fn = numpy_rejection_sample(accept, race)
    r = run(fn, accept=accept, race=race)
    assert r, r.text
    assert summary(r) == f"{accept}/{race}"
    # And fails vLLM's declaration.
    assert not run(fn)


def test_flashinfer_acceptance_declared_as_vllm_fails_on_ties_and_zero_q():
    r = run(numpy_rejection_sample("multiply_lt"))
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert {"TIES", "ZERO_Q", "NGRAM"} <= failed, failed
    assert "the output matches: multiply_lt/reciprocal" in r.failures[0], r.failures[0]


@pytest.mark.parametrize("bug,arm", [
    ("gt", "TIES"),                # `>` for `>=`
    ("gt", "NGRAM"),
    ("q-wrong-token", "RAND"),     # q read at the wrong token
    ("no-stop", "EARLY"),          # positions after a rejection decided
    ("from-p", "RAND"),            # recovered from p, not max(p - q, 0)
    ("unclamped", "ZERO_Q"),       # residual not clamped at 0
    ("no-bonus", "ALL"),           # bonus token missing
    ("bonus-always", "EARLY"),     # bonus appended after a rejection
    ("target-next", "RAND"),       # target probs from position i + 1
    ("last-tie", "TIES"),          # argmax ties to the last index
])
def test_planted_bugs_fail(bug, arm):
    fn = numpy_rejection_sample(bug=bug)
    r = run(fn)
    assert not r, f"{bug} passed"
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert arm in failed, (bug, failed)
    # The first failure's rerun line fails again, alone.
    again = eval(r.reproductions[0], {"kernel_oracle": ko, fn.__name__: fn})
    assert not again and again.cases == 1


def test_the_case_is_the_checks():
    c = ko.rejection_sample_case(5, 3, 129, "TIES")
    out = np.full((5, 4), -7, np.int32)
    numpy_rejection_sample()(c["draft_token_ids"], c["draft_probs"], c["target_probs"],
                             c["bonus_token_ids"], c["uniform"], c["noise"],
                             c["is_greedy"], out)
    assert (out == c["out"]).all()
    assert ko.rejection_sample_case(2, 2, 33, "NGRAM")["draft_probs"] is None
    fi = ko.rejection_sample_case(5, 3, 129, "ZERO_Q", accept="multiply_lt")["out"]
    assert (fi != ko.rejection_sample_case(5, 3, 129, "ZERO_Q")["out"]).any()


def test_a_failure_names_the_position_and_the_draft_tokens_probabilities():
    r = run(numpy_rejection_sample(bug="gt"), arms=["TIES"], shapes=[(5, 3, 129)])
    f = r.failures[0]
    assert re.search(r"request \d+ position \d+: got -?\d+, want -?\d+", f), f
    assert "p / q = " in f and "u = " in f, f
    assert "kernel_oracle.rejection_sample_case(5, 3, 129, \"TIES\"" in f, f


def test_bad_arguments_are_refused_before_any_call():
    def never(*a):
        raise AssertionError("called")

    for kw in [dict(accept="divide_gt"), dict(race="gumbel"), dict(arms=["NOPE"]),
               dict(shapes=[(1, 0, 7)]), dict(shapes=[(1, 65, 7)]), dict(trials=0)]:
        with pytest.raises(ValueError):
            ko.check_rejection_sample(never, **kw)


def test_a_refused_ngram_arm_is_counted_not_failed():
    inner = numpy_rejection_sample()

    def no_ngram(draft_token_ids, draft_probs, *rest):
        if draft_probs is None:
            raise ko.Refused("no n-gram path")
        return inner(draft_token_ids, draft_probs, *rest)

    r = run(no_ngram)
    assert r, r.text
    assert r.refused == len(SHAPES)


def test_every_arm_runs_and_prints_its_matches():
    r = run(numpy_rejection_sample(), verbose=True)
    for arm in ARMS:
        assert f" {arm} " in r.text, arm
    assert "bit-identical on every compared case under:" in r.text
