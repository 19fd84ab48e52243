"""check_fp8_scaled_quant on numpy per-tensor and per-token quantizers
written from the rules' definitions (vLLM's static, dynamic per-tensor and
dynamic per-token kernels, the pure-torch forms, PyTorch's to_float8
recipe) and on planted bugs: each rule's implementation passes bit for
bit under its own declaration and is named; each bug is caught by the arm
meant to catch it, with a rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

F = np.float32
MIN = F(ko.MIN_SCALING_FACTOR)
# Ragged widths (a vectorized-by-4 loop's remainder), one row and 33, and
# a model width (CI's 2 cores: the check's default shapes run once, below).
SHAPES = [(1, 7), (33, 7), (3, 129), (17, 1003), (4, 4096)]


def torch_cast(v):
    """torch's `.to(torch.float8_e4m3fn)`: round to nearest even, NaN at
    and beyond 464 (it does not saturate)."""
    return ko.encode_e4m3(np.asarray(v, F), ko.Overflow.NON_SATURATING)


def vllm_clamp(v):
    """CUDA's fmaxf(-448, fminf(v, 448)) (vLLM's scaled_fp8_conversion): a
    NaN becomes +448."""
    return np.fmax(F(-448), np.fmin(v, F(448))).astype(F)


def scaled_quant(x, q, s, granularity="tensor", scale=None, rule="divide", scale_ub=None, min_scale=MIN,
                 bug=None):
    """Per-tensor or per-token e4m3 quantization in float32 numpy: x [m, k]
    -> codes q [m, k] and scales s ([1] per tensor, [m, 1] per token).
    ``bug`` plants one mistake; None computes the rule."""
    m, k = x.shape
    per_row = granularity == "token" or bug == "per-row-amax"
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = None
        if scale is not None:
            sc = np.full((1, 1), F(scale))
        else:
            a = np.abs(x)
            if bug == "signed-amax":
                a = x
            if bug == "drop-last":
                if per_row:
                    a = a[:, :-1] if k > 1 else np.zeros((m, 1), F)
                else:
                    a = a.reshape(1, -1)[:, :-1] if m * k > 1 else np.zeros((1, 1), F)
            amax = a.max(axis=1, keepdims=True) if per_row else a.max().reshape(1, 1)
            amax = np.maximum(amax, F(0)).astype(F)
            if scale_ub is not None and bug != "ub-ignored":
                amax = np.minimum(amax, F(scale_ub))
            if rule == "to_float8":
                r = (F(1) / np.maximum(amax, F(1e-12))) * F(448)
                sc = F(1) / r
            else:
                s0 = amax * (F(1) / F(448)) if rule.startswith("torch_") else amax / F(448)
                sc = s0 if bug == "no-floor" else np.maximum(s0, F(min_scale))
        if r is None:
            r = F(1) / sc
        if rule in ("divide", "torch_divide"):
            y = x / sc
        else:
            y = x * r
        q[...] = torch_cast(y) if bug == "no-clamp" else ko.encode_e4m3(vllm_clamp(y))
        out = (F(1) / sc) if bug == "inverse-stored" else sc
        s[...] = out[:1].reshape(s.shape) if s.size == 1 else out.reshape(s.shape)


def quantizer(bug=None, name=None, **rule):
    def f(x, q, s):
        scaled_quant(x, q, s, bug=bug, **rule)

    f.__name__ = name or (bug or rule.get("rule", "divide")).replace("-", "_")
    return f


# (granularity, scale, rule, scale_ub, min_scale): each the form of a
# kernel the field runs.
FORMS = [
    ("tensor", 0.3, "divide", None, MIN),  # a static scale, divided
    ("tensor", 0.3, "reciprocal", None, MIN),  # vLLM static_scaled_fp8_quant
    ("tensor", None, "reciprocal", None, 0.0),  # vLLM dynamic_scaled_fp8_quant (no floor)
    ("tensor", None, "divide", None, MIN),
    ("tensor", None, "torch_divide", None, MIN),  # torch: amax / 448.0, x / s
    ("tensor", None, "torch_reciprocal", None, MIN),  # vLLM QuantFP8.forward_native
    ("tensor", None, "to_float8", None, MIN),  # PyTorch's to_float8
    ("token", None, "divide", None, MIN),  # vLLM dynamic_per_token_scaled_fp8_quant
    ("token", None, "divide", 1.5, MIN),  # ... with scale_ub
    ("token", None, "reciprocal", None, MIN),
    ("token", None, "torch_reciprocal", 1.5, MIN),
    ("token", None, "to_float8", None, MIN),
]


def form_kwargs(g, scale, rule, ub, ms):
    kw = {"granularity": g, "rule": rule}
    if scale is not None:
        kw["scale"] = scale
    else:
        kw["min_scale"] = float(ms)
        if ub is not None:
            kw["scale_ub"] = ub
    return kw


def label(rule, scale, ms):
    if scale is None and rule != "to_float8" and F(ms) != MIN:
        return f"{rule}(min_scale=0e0)"
    return rule


@pytest.mark.parametrize("form", FORMS, ids=lambda f: "-".join(str(v) for v in f[:4]))
def test_each_rule_passes_bit_for_bit_and_is_named(form, capsys):
    g, scale, rule, ub, ms = form
    kw = form_kwargs(*form)
    r = ko.check_fp8_scaled_quant(quantizer(**kw), shapes=SHAPES, **kw)
    arms = 3 if scale is not None else (6 if ub is not None else 5)
    assert r.ok and r.passed == r.cases == len(SHAPES) * arms, r.failures[:1]
    rows = [line for line in r.text.splitlines() if " PASS " in line]
    named = label(rule, scale, ms)
    assert rows and all(re.search(rf"(  |, ){re.escape(named)}(,|$)", line) for line in rows), rows[0]
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_the_default_shapes_pass():
    kw = {"granularity": "token", "rule": "divide", "scale_ub": 1.5}
    r = ko.check_fp8_scaled_quant(quantizer(**kw), verbose=False, **kw)
    assert r.ok and r.cases == len(ko.SCALED_QUANT_SHAPES) * 6
    assert [tuple(s) for s in ko.SCALED_QUANT_SHAPES][:2] == [(1, 7), (33, 7)]


def test_the_quantizer_function_is_the_oracle():
    c = ko.fp8_scaled_quant_case(17, 1003, "TIES", granularity="token", rule="reciprocal")
    q, s = ko.quantize_fp8_scaled(c["x"], granularity="token", rule="reciprocal")
    assert (q == c["q"]).all() and (s.view(np.uint32) == c["s"].view(np.uint32)).all()
    assert s.shape == (17, 1)
    q, s = ko.quantize_fp8_scaled(c["x"], scale=0.3, rule="reciprocal")
    assert s.shape == (1,) and s[0] == F(0.3)
    with pytest.raises(ValueError, match="rule"):
        ko.quantize_fp8_scaled(c["x"], rule="nearest")
    with pytest.raises(ValueError, match="granularity"):
        ko.quantize_fp8_scaled(c["x"], granularity="group")


def test_the_arms_hit_their_designed_cases():
    # AMAX: the amax element codes exactly -448 (and +448 where present).
    c = ko.fp8_scaled_quant_case(17, 1003, "AMAX", granularity="token")
    amax = np.abs(c["x"]).max(axis=1, keepdims=True)
    at = np.abs(c["x"]) == amax
    assert at.sum() >= 17 and set(c["q"][at].tolist()) <= {0x7E, 0xFE} and 0xFE in c["q"][at]
    # ... and only at the negative sign in some rows.
    assert (c["x"].max(axis=1) < amax[:, 0]).sum() >= 3
    # Static AMAX: elements beyond 448 * scale (a missing clamp's NaN).
    c = ko.fp8_scaled_quant_case(3, 129, "AMAX", scale=0.3)
    assert (np.abs(c["x"] / F(0.3)) >= 465).mean() > 0.3
    assert set(c["q"][np.abs(c["x"] / F(0.3)) >= 448].tolist()) == {0x7E, 0xFE}
    # TAIL: the tensor's last element alone holds the amax.
    c = ko.fp8_scaled_quant_case(33, 5120, "TAIL")
    flat = np.abs(c["x"]).reshape(-1)
    assert flat[-1] == 2 * flat[:-1].max() and c["s"][0] == flat[-1] / F(448)
    # ZERO per token: row 0 is all zero, its scale the floor, its codes 0.
    c = ko.fp8_scaled_quant_case(5, 129, "ZERO", granularity="token")
    assert (c["x"][0] == 0).all() and c["s"][0, 0] == MIN and (c["q"][0] == 0).all()
    assert np.abs(c["x"][1]).max() < 1e-12 and c["s"][1, 0] == MIN
    # UB: even rows above the bound take ub / 448, odd rows below do not.
    c = ko.fp8_scaled_quant_case(4, 129, "UB", granularity="token", scale_ub=1.5)
    assert c["s"][0, 0] == F(1.5) / F(448) and c["s"][1, 0] < F(1.5) / F(448)
    assert np.abs(c["x"][0]).max() > 1.5
    # TIES: a division and a multiply by the reciprocal part on it.
    c = ko.fp8_scaled_quant_case(3, 129, "TIES", scale=0.3)
    q, _ = ko.quantize_fp8_scaled(c["x"], scale=0.3, rule="reciprocal")
    assert (q != c["q"]).sum() >= 10
    with pytest.raises(ValueError, match="UB"):
        ko.fp8_scaled_quant_case(4, 129, "UB", granularity="token")


TENSOR = {"granularity": "tensor", "rule": "divide"}
TOKEN = {"granularity": "token", "rule": "divide"}
TOKEN_UB = {"granularity": "token", "rule": "divide", "scale_ub": 1.5}
STATIC = {"granularity": "tensor", "scale": 0.3, "rule": "reciprocal"}

SCALES = r"scales: [1-9]\d* of"
CODES = r"codes: [1-9]\d* of"


@pytest.mark.parametrize(
    "kw,bug,arm,caught_by",
    [
        # torch's non-saturating cast without the clamp: NaN (0x7F) beyond 464.
        (STATIC, "no-clamp", "AMAX", r"got 0x7F"),
        (TOKEN_UB, "no-clamp", "UB", r"got 0x7F"),
        # An amax reduction that drops the last element.
        (TENSOR, "drop-last", "TAIL", SCALES),
        (TOKEN, "drop-last", "TAIL", SCALES),
        # scale_ub ignored.
        (TOKEN_UB, "ub-ignored", "UB", SCALES),
        # The floor missing: a zero row or tensor gets scale 0 and NaN codes.
        (TOKEN, "no-floor", "ZERO", SCALES),
        (TENSOR, "no-floor", "ZERO", SCALES),
        # A per-tensor amax computed per row (one row's scale written).
        (TENSOR, "per-row-amax", "RAND", CODES),
        # The scale written as its inverse.
        ({"granularity": "tensor", "rule": "reciprocal"}, "inverse-stored", "RAND", SCALES),
        (STATIC, "inverse-stored", "RAND", SCALES),
        # max(x) for max(|x|): a negative amax is lost.
        (TOKEN, "signed-amax", "AMAX", SCALES),
    ],
)
def test_planted_bug_is_caught_by_its_arm_and_reruns(kw, bug, arm, caught_by, capsys):
    f = quantizer(bug, **kw)
    r = ko.check_fp8_scaled_quant(f, shapes=SHAPES, verbose=False, **kw)
    assert not r.ok
    failing = [x for x in r.failures if f"arm={arm}" in x]
    assert failing and any(re.search(caught_by, x) for x in failing), r.failures[0]
    line = next(line for line in r.reproductions if f'arms=["{arm}"]' in line)
    assert line in capsys.readouterr().out
    again = eval(line, {"kernel_oracle": ko, f.__name__: f})
    assert again.cases == 1 and again.failed == 1


@pytest.mark.parametrize("kw", [STATIC, {"granularity": "token", "rule": "reciprocal"}])
def test_a_division_declared_as_reciprocal_fails_at_ties_and_is_named(kw):
    f = quantizer(name="divides", **dict(kw, rule="divide"))
    r = ko.check_fp8_scaled_quant(f, shapes=SHAPES, verbose=False, **kw)
    assert not r.ok
    ties = [x for x in r.failures if "arm=TIES" in x]
    assert ties and all(re.search(CODES, x) and "the output matches: divide" in x for x in ties)
    # RAND and AMAX may not see it: TIES is the arm that does.
    assert len(ties) == len(SHAPES)


def test_vllms_per_tensor_kernel_has_no_floor():
    """vLLM's dynamic_scaled_fp8_quant floors nothing: declared with the
    per-token floor, its all-zero tensors fail (scale 0, codes +448 from
    the clamp of 0 * inf) and are named with min_scale 0."""
    vllm = quantizer(granularity="tensor", rule="reciprocal", min_scale=0.0, name="vllm_dynamic")
    r = ko.check_fp8_scaled_quant(vllm, granularity="tensor", rule="reciprocal", arms=["ZERO"], verbose=False)
    named = r"the output matches: .*\breciprocal\(min_scale=0e0\)"
    assert not r.ok and all(re.search(named, x) for x in r.failures)
    assert any("got 0x7E, want 0x00" in x for x in r.failures)


def test_torchs_scalar_division_declared_as_a_division_fails_on_its_scales():
    f = quantizer(granularity="token", rule="torch_divide", name="torch_form")
    r = ko.check_fp8_scaled_quant(f, granularity="token", rule="divide", shapes=[(16, 7168)], arms=["RAND"],
                                  verbose=False)
    assert not r.ok and "the output matches: torch_divide" in r.failures[0]
    assert "at most 1 ulps" in r.failures[0]


def test_bad_arguments_are_refused_before_any_call():
    calls = []

    def f(x, q, s):
        calls.append(1)

    bad = [
        {"rule": "round"},
        {"granularity": "group"},
        {"granularity": "token", "scale": 0.5},
        {"scale": 0.5, "rule": "to_float8"},
        {"scale": 0.0},
        {"scale": float("nan")},
        {"scale_ub": 1.0},  # per tensor
        {"granularity": "token", "scale_ub": -1.0},
        {"scale": 0.5, "scale_ub": 1.0},
        {"min_scale": float("nan")},
        {"min_scale": -1.0},
        {"granularity": "token", "arms": ["UB"]},  # no scale_ub
        {"arms": ["EDGE"]},
        {"shapes": [(0, 7)]},
    ]
    for kw in bad:
        with pytest.raises(ValueError):
            ko.check_fp8_scaled_quant(f, **kw)
    assert not calls
