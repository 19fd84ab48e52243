"""check_penalties on numpy penalisers written from the field's sources
(vLLM v0's `apply_penalties`, Hugging Face's
`RepetitionPenaltyLogitsProcessor` followed by OpenAI-style frequency and
presence penalties, vLLM v1's reciprocal, exact or approximate as
Triton's `1.0 / rep` computes it, a contracted FMA, SGLang's
accumulating penalizers, LightLLM's sparse update of the generated
tokens) and on planted bugs: each correct form passes
its declaration and is identified as it, each bug is caught by the
default arms on the arm named, with a rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32, f64 = np.float32, np.float64

# The tests' shapes: the check's defaults without Qwen2's 151936
# (test_the_default_shapes_pass runs it).
SHAPES = [s for s in ko.PENALTIES_SHAPES if s[1] <= 32000]
ARMS = ["RAND", "NEG", "ZERO", "TIES", "MASKED", "PAD", "IDENTITY", "COUNTS", "PROMPT_ONLY"]
VLLM = "repetition_frequency_presence/prompt_and_output/divide/separate"


def fma32(a, b, c):
    """`a * b + c` rounded once to float32 (numpy has no FMA): the exact
    product in float64, TwoSum, rounded to odd at 53 bits, then to float32
    (Boldo and Melquiond's Theorem 1, as `oracle::fma`)."""
    a, b, c = (np.asarray(x, f64) for x in (a, b, c))
    p = a * b
    s = p + c
    pv = s - c
    cv = s - pv
    e = (p - pv) + (c - cv)
    bits = s.view(np.int64)
    fix = np.isfinite(e) & (e != 0) & ((bits & 1) == 0)
    step = np.where((e > 0) == (s > 0), 1, -1)
    s = np.where(fix, (bits + step).view(f64), s)
    return s.astype(f32)


def counts_of(ids, v, pad="ignore"):
    """vLLM's `get_token_bin_counts_and_mask`: `vocab_size + 1` bins, the
    padding's dropped; or a planted padding bug (wrapped onto token 0,
    clamped onto token V - 1)."""
    if pad == "wrap":
        ids = ids % v
    elif pad == "clamp":
        ids = np.minimum(ids, v - 1)
    return np.stack([np.bincount(row, minlength=v + 1)[:v] for row in ids])


def stepped(k):
    """A multiplier `RN(1/p)` moved `k` float32 steps: `k` an int (one
    multiplier per row, as Triton's `1.0 / rep` through PTX
    `div.full.f32` computes one), or a function of the token index
    (`[V]` int32 steps: a multiplier that changes within a row)."""

    def recip(p, v):
        rn = (f32(1) / p).astype(f32)  # [B, 1]
        steps = k(np.arange(v)) if callable(k) else np.int32(k)
        return (rn.view(np.int32) + np.asarray(steps, np.int32)).view(f32)

    return recip


def numpy_penalties(inputs="ids", repetition="divide", frequency="separate",
                    order="repetition_frequency_presence", scope="prompt_and_output",
                    bug=None, recip=None):
    """vLLM v0's `apply_penalties` in float32 numpy, with its forms and
    order as parameters, or with a planted bug; `recip` (`stepped(k)`)
    the reciprocal forms' multiplier in place of `RN(1/p)`."""

    def multiplier(p, v):
        return recip(p, v) if recip is not None else f32(1) / p

    def rep_step(x, p, pc, oc):
        seen = (oc > 0) if scope == "output_only" or bug == "rep-output-only" else (pc > 0) | (oc > 0)
        p = p[:, None]
        if bug == "divide-negative":  # transformers issue 2302
            y = x / p
        elif bug == "reciprocal-all":  # NeMo issue 8194
            y = x * (f32(1) / p)
        elif bug == "divide-even-tokens":  # a true division on some tokens
            even = np.arange(x.shape[1]) % 2 == 0
            y = np.where(x > 0, np.where(even, x / p, x * multiplier(p, x.shape[1])), x * p)
        elif repetition == "reciprocal":
            y = np.where(x > 0, x * multiplier(p, x.shape[1]), x * p)
        elif bug == "ge-zero":
            y = np.where(x >= 0, x / p, x * p)
        else:
            y = np.where(x > 0, x / p, x * p)
        if bug == "rep-per-occurrence":
            n = pc + oc
            for k in range(1, int(n.max(initial=0))):
                y = np.where(seen & (n > k), np.where(y > 0, y / p, y * p), y)
        return np.where(seen, y, x)

    # The subtractions on the generated tokens only: the sparse forms, or
    # a planted bug under another declaration.
    masked = bug == "masked-subtraction" or frequency in ("sparse", "fma_sparse")

    def freq_step(x, f, pc, oc):
        n = oc + pc if bug in ("freq-over-prompt", "freq-presence-over-prompt") else oc
        c = n.astype(f32)
        f = f[:, None]
        if frequency in ("fma", "fma_scaled", "fma_sparse"):
            y = fma32(-f, c, x)
        elif frequency == "accumulate":
            s = np.zeros_like(x)
            for k in range(int(n.max(initial=0))):
                s = np.where(n > k, s + f, s)
            y = x - s
        else:
            y = x - f * c
        return np.where(n > 0, y, x) if masked else y

    def fused_step(x, p, f, pc, oc):
        # PEN-FMA-SCALED: `x *= scale` and `x -= f * c` contracted.
        seen = (oc > 0) if scope == "output_only" else (pc > 0) | (oc > 0)
        p = p[:, None]
        scale = np.where(seen, np.where(x > 0, multiplier(p, x.shape[1]), p), f32(1))
        return fma32(x, scale, -(f[:, None] * oc.astype(f32)))

    def pres_step(x, q, pc, oc):
        q = q[:, None]
        if bug == "freq-presence-over-prompt":  # TensorRT-LLM PR 5623
            oc = oc + pc
        if bug == "presence-as-count":
            return x - q * oc.astype(f32)
        if frequency == "accumulate":
            return x - np.where(oc > 0, q, f32(0))
        y = x - q * (oc > 0).astype(f32)
        return np.where(oc > 0, y, x) if masked else y

    steps = {"repetition": rep_step, "frequency": freq_step, "presence": pres_step}
    names = order.split("_")
    if bug == "order-swapped":
        names = ["frequency", "presence", "repetition"]

    def penalize(logits, prompt, output, presence, frequency_p, repetition_p, out):
        b, v = logits.shape
        if inputs == "ids":
            pad = {"pad-wrap": "wrap", "pad-clamp": "clamp"}.get(bug, "ignore")
            pc, oc = counts_of(prompt, v, pad), counts_of(output, v, pad)
        else:
            pc, oc = prompt.astype(np.int64), output.astype(np.int64)
        if bug == "counts-uint8":
            oc = oc.astype(np.uint8).astype(np.int64)
        params = {"repetition": repetition_p, "frequency": frequency_p, "presence": presence}
        if bug == "row0-penalties":
            params = {k: np.full_like(p, p[0]) for k, p in params.items()}
        x = np.nan_to_num(logits) if bug == "nan-to-num" else logits.copy()
        todo = list(names)
        with np.errstate(all="ignore"):
            while todo:
                name = todo.pop(0)
                if (frequency == "fma_scaled" and repetition == "reciprocal"
                        and name == "repetition" and todo[:1] == ["frequency"]):
                    todo.pop(0)
                    x = fused_step(x, repetition_p, frequency_p, pc, oc)
                else:
                    x = steps[name](x, params[name], pc, oc).astype(f32)
        if bug == "skip-neutral-rows":
            active = (repetition_p != 1) | (frequency_p != 0) | (presence != 0)
            out[active] = x[active]
        else:
            out[...] = x

    penalize.__name__ = (f"numpy_{inputs}_{repetition}_{frequency}_" + (bug or "ok").replace("-", "_")
                         + ("_approx" if recip is not None else ""))
    return penalize


def hf_penalties(logits, prompt, output, presence, frequency, repetition, out):
    """Hugging Face's `RepetitionPenaltyLogitsProcessor` row by row (the
    padding dropped, prompt and generated ids together: `gather`,
    `where(score < 0, score * p, score / p)`, `scatter`, so each id once),
    then OpenAI-style frequency and presence penalties over the generated
    ids, as vLLM subtracts them."""
    b, v = logits.shape
    x = logits.copy()
    oc = counts_of(output, v)
    with np.errstate(all="ignore"):
        for r in range(b):
            ids = np.concatenate([prompt[r], output[r]])
            ids = ids[ids < v]
            score = x[r, ids]
            score = np.where(score < 0, score * repetition[r], score / repetition[r])
            x[r, ids] = score
        x = x - frequency[:, None] * oc.astype(f32)
        x = x - presence[:, None] * (oc > 0).astype(f32)
    out[...] = x


def sglang_penalties(logits, prompt, output, presence, frequency, repetition, out):
    """SGLang's penalizers: zero-initialised per-token tensors, the
    frequency penalty added once per generated token (`scatter_add_`), the
    presence penalty set (`scatter_`), the repetition penalty set for
    generated tokens (`scatter_` into ones); applied presence, then
    frequency, then repetition (one order a set may iterate in): `sub_`,
    `sub_`, `where(logits < 0, logits * p, logits / p)`."""
    b, v = logits.shape
    acc_f = np.zeros((b, v), f32)
    acc_p = np.zeros((b, v), f32)
    rep = np.ones((b, v), f32)
    for r in range(b):
        for t in output[r]:
            if t < v:
                acc_f[r, t] += frequency[r]
                acc_p[r, t] = presence[r]
                rep[r, t] = repetition[r]
    with np.errstate(all="ignore"):
        x = logits - acc_p
        x = x - acc_f
        x = np.where(x < 0, x * rep, x / rep)
    out[...] = x


def lightllm_penalties(fused):
    """LightLLM's `_fwd_kernel_apply_penalty` (counts in): per row, only
    the generated tokens' logits are loaded and stored, `where(l > 0, l /
    rep, l * rep)` (a correctly rounded division here), `- count * freq`
    (one FMA under Triton's default FP fusion), `- presence`; every other
    logit is never written."""

    def penalize(logits, prompt, output, presence, frequency, repetition, out):
        x = logits.copy()
        with np.errstate(all="ignore"):
            for r in range(x.shape[0]):
                ids = np.nonzero(output[r] > 0)[0]
                l = x[r, ids]
                l = np.where(l > 0, l / repetition[r], l * repetition[r]).astype(f32)
                c = output[r, ids].astype(f32)
                l = fma32(-c, frequency[r], l) if fused else (l - c * frequency[r]).astype(f32)
                x[r, ids] = (l - presence[r]).astype(f32)
        out[...] = x

    penalize.__name__ = f"lightllm_{'fused' if fused else 'nofma'}"
    return penalize


def run(fn, **kw):
    kw.setdefault("shapes", SHAPES)
    kw.setdefault("verbose", False)
    return ko.check_penalties(fn, **kw)


def summary(r):
    """The declarations every compared case matched, from the summary."""
    line = r.text.strip().splitlines()[-1]
    return line.split("on every compared case under: ", 1)[1].split(";")[0].strip()


@pytest.mark.parametrize("inputs", ["ids", "counts"])
def test_vllm_form_passes_and_is_identified(inputs):
    r = run(numpy_penalties(inputs), inputs=inputs)
    assert r, r.text
    assert r.failed == 0 and r.passed == r.cases == len(ARMS) * len(SHAPES)
    # The arms leave exactly vLLM's declaration.
    assert summary(r) == VLLM, r.text.splitlines()[-1]


def test_the_default_shapes_pass():
    r = ko.check_penalties(numpy_penalties(), verbose=False)
    assert r, r.text
    assert r.passed == r.cases == len(ARMS) * len(ko.PENALTIES_SHAPES)
    assert any(b == 1 for b, _ in ko.PENALTIES_SHAPES)


def test_a_kernel_that_squeezes_the_batch_away_fails_by_default():
    """`penalties.squeeze()[:, None]` is right for every batch but one row,
    where the squeeze leaves a scalar (a server with one request raises):
    the default shapes include a batch of one."""
    good = numpy_penalties()

    def squeezing(logits, prompt, output, presence, frequency, repetition, out):
        presence = presence.squeeze()[:, None][:, 0]
        good(logits, prompt, output, presence, frequency, repetition, out)

    assert run(squeezing, arms=["RAND"], shapes=[s for s in SHAPES if s[0] > 1])
    r = ko.check_penalties(squeezing, arms=["RAND"], verbose=False)
    assert not r and r.failed == 1, r.text
    assert "(batch, vocab) = (1, " in r.failures[0], r.failures[0]


def test_hugging_faces_repetition_form_passes_its_declaration():
    r = run(hf_penalties)
    assert r, r.text
    assert summary(r) == VLLM


@pytest.mark.parametrize("form,kw,label", [
    (dict(repetition="reciprocal"), dict(repetition="reciprocal"),
     "repetition_frequency_presence/prompt_and_output/reciprocal/separate"),
    (dict(frequency="fma", inputs="counts"), dict(frequency="fma", inputs="counts"),
     "repetition_frequency_presence/prompt_and_output/divide/fma"),
    (dict(repetition="reciprocal", frequency="fma_scaled", inputs="counts"),
     dict(repetition="reciprocal", frequency="fma_scaled", inputs="counts"),
     "repetition_frequency_presence/prompt_and_output/reciprocal/fma_scaled"),
    (dict(order="presence_repetition_frequency", scope="output_only"),
     dict(order="presence_repetition_frequency", repetition_scope="output_only"),
     "presence_repetition_frequency/output_only/divide/separate"),
])
def test_each_declarable_form_passes_and_names_itself(form, kw, label):
    r = run(numpy_penalties(**form), **kw)
    assert r, r.text
    assert summary(r) == label
    # Declared as vLLM's, it fails.
    assert not run(numpy_penalties(**form), inputs=kw.get("inputs", "ids"))


@pytest.mark.parametrize("fused", [False, True])
def test_lightllms_sparse_update_passes_as_sparse(fused):
    """LightLLM writes the generated tokens' logits only: an unseen `-0`
    keeps its sign where vLLM's `logits -= f * counts` (every token) makes
    it `+0` for a negative `f` (rule PEN-ZERO-SIGN). Declared `"sparse"`
    (`"fma_sparse"` fused) it passes and is identified as it; declared
    `"separate"` (`"fma"`) it fails on ZERO."""
    form = "fma_sparse" if fused else "sparse"
    kw = dict(inputs="counts", repetition_scope="output_only", frequency=form)
    r = run(lightllm_penalties(fused), **kw)
    assert r, r.text
    assert summary(r) == f"repetition_frequency_presence/output_only/divide/{form}"
    r = run(lightllm_penalties(fused), **dict(kw, frequency="fma" if fused else "separate"))
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert "ZERO" in failed, failed


def test_sglangs_penalizers_pass_as_accumulate():
    kw = dict(order="presence_frequency_repetition", repetition_scope="output_only",
              frequency="accumulate")
    r = run(sglang_penalties, **kw)
    assert r, r.text
    assert summary(r) == "presence_frequency_repetition/output_only/divide/accumulate"
    # Declared separate, the accumulated sums (COUNTS) and the kept -0
    # (ZERO) fail.
    r = run(sglang_penalties, **dict(kw, frequency="separate"))
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert {"COUNTS", "ZERO"} <= failed, failed


def test_fma_declared_separate_fails_on_ties():
    r = run(numpy_penalties(frequency="fma"))
    assert not r
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert "TIES" in failed, failed
    assert "on every TIES case under: repetition_frequency_presence/prompt_and_output/divide/fma;" in r.text


def test_ge_at_zero_changes_no_bit():
    """`x >= 0 ? x / p : x * p` against vLLM's `x > 0`: at `±0` both give
    the zero of the logit's sign (`±0 / p` and `±0 * p` are `±0`), so the
    direction is not a bug, and ZERO (two thirds `±0` logits) passes it."""
    r = run(numpy_penalties(bug="ge-zero"))
    assert r, r.text
    assert summary(r) == VLLM


@pytest.mark.parametrize("bug,arm,inputs", [
    ("divide-negative", "NEG", "ids"),          # transformers issue 2302
    ("reciprocal-all", "NEG", "ids"),           # NeMo issue 8194, higgs PR 32
    ("freq-over-prompt", "PROMPT_ONLY", "ids"),
    ("presence-as-count", "COUNTS", "ids"),
    ("rep-output-only", "PROMPT_ONLY", "counts"),
    ("pad-wrap", "PAD", "ids"),
    ("pad-clamp", "PAD", "ids"),
    ("rep-per-occurrence", "COUNTS", "ids"),
    ("order-swapped", "RAND", "ids"),
    ("masked-subtraction", "ZERO", "ids"),
    ("nan-to-num", "MASKED", "counts"),
    ("skip-neutral-rows", "IDENTITY", "ids"),
    ("counts-uint8", "COUNTS", "counts"),
    ("row0-penalties", "RAND", "ids"),
])
def test_planted_bugs_fail(bug, arm, inputs):
    fn = numpy_penalties(inputs, bug=bug)
    r = run(fn, inputs=inputs)
    assert not r, f"{bug} passed"
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert arm in failed, (bug, failed)
    # The first failure's rerun line fails again, alone.
    again = eval(r.reproductions[0], {"kernel_oracle": ko, fn.__name__: fn})
    assert not again and again.cases == 1


def test_known_bugs_are_named():
    r = run(numpy_penalties(bug="divide-negative"), arms=["NEG"])
    assert "divide_all" in r.failures[0], r.failures[0]
    r = run(numpy_penalties(bug="reciprocal-all"), arms=["NEG"])
    assert "reciprocal_all" in r.failures[0], r.failures[0]


def test_every_arm_runs_and_prints_its_matches():
    r = run(numpy_penalties(), verbose=True)
    for arm in ARMS:
        assert f" {arm} " in r.text, arm
    assert "bit-identical on every compared case under:" in r.text


def test_an_unwritten_output_fails():
    def half(logits, prompt, output, presence, frequency, repetition, out):
        numpy_penalties()(logits, prompt, output, presence, frequency, repetition, out)
        out[:, ::2] = np.nan

    assert not run(half, arms=["RAND"])


def test_bad_arguments_are_refused_before_any_call():
    calls = []

    def never(*a):
        calls.append(1)

    for kw in [dict(order="rep_freq_pres"), dict(repetition_scope="prompt"),
               dict(repetition="multiply"), dict(repetition="divide_all"),
               dict(frequency="fused"), dict(inputs="mask"), dict(arms=["NOPE"]),
               dict(recip_ulps=1), dict(repetition="reciprocal", recip_ulps=9),
               dict(repetition="reciprocal", recip_ulps=-1),
               dict(shapes=[(0, 5)]), dict(shapes=[(1 << 12, 1 << 11)]),
               dict(trials=0), dict(seeds=[])]:
        with pytest.raises(ValueError):
            ko.check_penalties(never, verbose=False, **kw)
    assert not calls


def test_the_case_function_gives_the_check_arrays():
    c = ko.penalties_case(9, 129, "PAD")
    assert c["logits"].shape == (9, 129) and c["logits"].dtype == f32
    assert c["prompt_ids"].dtype == np.int64 and c["prompt_counts"].dtype == np.int32
    assert (c["prompt_ids"] == 129).any(axis=1).all()
    assert (counts_of(c["output_ids"], 129) == c["output_counts"]).all()
    out = np.empty((9, 129), f32)
    numpy_penalties()(c["logits"], c["prompt_ids"], c["output_ids"], c["presence_penalties"],
                      c["frequency_penalties"], c["repetition_penalties"], out)
    assert (out.view(np.uint32) == c["out"].view(np.uint32)).all()
    bug = ko.penalties_case(9, 129, "NEG", repetition="divide_all")["out"]
    assert (bug != ko.penalties_case(9, 129, "NEG")["out"]).any()


# Rule PEN-RECIP-ULPS: Triton's float32 `1.0 / rep` is PTX `div.full.f32`
# (within 2 ulps), so vLLM v1's kernel multiplies each row by one `r`
# near, not always at, RN(1/p) (run 80 on an H100).
TRITON_V1 = dict(repetition="reciprocal", frequency="fma_scaled", inputs="counts")
APPROX = "repetition_frequency_presence/prompt_and_output/reciprocal(2 ulps)/fma_scaled"


@pytest.mark.parametrize("k", [1, -1])
def test_an_approximate_reciprocal_passes_its_ulps_and_fails_the_exact_one(k):
    fn = numpy_penalties(recip=stepped(k), **TRITON_V1)
    r = run(fn, recip_ulps=2, **TRITON_V1)
    assert r, r.text
    # Identified as the approximate form (some row's RN(1/p) +- 1 step
    # is more than one ulp from 1/p), not as the exact one.
    assert summary(r) == APPROX, r.text.splitlines()[-1]
    # Declared correctly rounded, it fails, TIES among the failures, each
    # element named as the approximate form's value.
    r = run(fn, **TRITON_V1)
    assert not r
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert "TIES" in failed, failed
    ties = next(f for f in r.failures if "arm=TIES" in f)
    assert "reciprocal(1 ulp)/fma_scaled" in ties or "reciprocal(2 ulps)/fma_scaled" in ties, ties
    assert "recip_ulps=0" in ties, ties


def test_the_exact_reciprocal_passes_an_approximate_declaration_and_names_itself():
    r = run(numpy_penalties(**TRITON_V1), recip_ulps=2, **TRITON_V1)
    assert r, r.text
    # The tightest form matched: RN(1/p), recip_ulps 0.
    assert summary(r) == "repetition_frequency_presence/prompt_and_output/reciprocal/fma_scaled"


@pytest.mark.parametrize("name,kw", [
    # A multiplier 3 steps (2.5 ulps or more) off.
    ("three-ulps", dict(recip=stepped(3))),
    # One step up on even tokens, one down on odd ones: each within 2
    # ulps, but not one per row.
    ("per-token", dict(recip=stepped(lambda t: np.where(t % 2 == 0, 1, -1)))),
    # A true division on even tokens, RN(1/p) + 1 step on the others.
    ("divide-even", dict(recip=stepped(1), bug="divide-even-tokens")),
])
def test_a_multiplier_off_the_ulps_or_changing_within_a_row_fails(name, kw):
    decl = dict(repetition="reciprocal", inputs="counts")
    fn = numpy_penalties(**decl, **kw)
    r = run(fn, recip_ulps=2, **decl)
    assert not r, f"{name} passed"
    failed = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert "TIES" in failed, (name, failed)
    ties = next(f for f in r.failures if "arm=TIES" in f)
    # The report names each failing row's closest multiplier.
    assert "reproduced by no multiplier" in ties and "within 2 ulps of 1/p" in ties, ties
    assert "the closest," in ties, ties
    # The first failure's rerun line fails again, alone.
    again = eval(r.reproductions[0], {"kernel_oracle": ko, fn.__name__: fn})
    assert not again and again.cases == 1


def test_the_case_function_gives_each_rows_multipliers():
    c = ko.penalties_case(9, 129, "TIES", repetition="reciprocal", recip_ulps=2)
    m = c["reciprocals"]
    assert m.dtype == f32 and m.shape[0] == 9
    p = c["repetition_penalties"]
    rn = f32(1) / p
    assert (m[:, 0].view(np.uint32) == rn.view(np.uint32)).all()
    # 1/p in [0.51, 0.96): one binade, 2 ulps reach 2 values either side
    # of 1/p, RN(1/p) one of them: 4 members.
    assert (np.isfinite(m).sum(axis=1) == 4).all(), m
    d = np.abs(m.astype(f64) - 1 / p.astype(f64)[:, None])
    ulp = np.spacing(rn)[:, None].astype(f64)
    assert (d <= 2 * ulp).all()
    assert ko.penalties_case(9, 129, "TIES")["reciprocals"].shape == (9, 1)
