"""check_fp8_scaled_quant on numpy per-tensor and per-token quantizers
written from the rules' definitions (vLLM's static, dynamic per-tensor and
dynamic per-token kernels, the pure-torch forms, PyTorch's to_float8
recipe, torchao's float64 one) and on planted bugs: each rule's
implementation passes bit for bit under its own declaration and is named;
each bug is caught by the arm meant to catch it, with a rerun line that
fails again."""

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


DECODED = ko.decode_e4m3(np.arange(256, dtype=np.uint8)).astype(np.float64)


def nearest_e4m3_f64(y):
    """Codes of float64 values rounded straight to e4m3 (nearest, ties to
    even), skipping the binary32 rounding a kernel's f32 quotient has."""
    pos = DECODED[:0x7F]  # 0 .. 448, increasing
    a = np.abs(y)
    hi = np.clip(np.searchsorted(pos, a), 1, 0x7E)
    lo_v, hi_v = pos[hi - 1], pos[hi]
    up = (a - lo_v > hi_v - a) | ((a - lo_v == hi_v - a) & (hi % 2 == 0))
    c = np.where(up, hi, hi - 1)
    return np.where(np.signbit(y), c | 0x80, c).astype(np.uint8)


def scaled_quant(x, q, s, granularity="tensor", scale=None, rule="divide", scale_ub=None, min_scale=MIN,
                 bug=None):
    """Per-tensor or per-token e4m3 quantization in float32 numpy: x [m, k]
    -> codes q [m, k] and scales s ([1] per tensor, [m, 1] per token).
    ``bug`` plants one mistake; None computes the rule."""
    m, k = x.shape
    per_row = granularity == "token" or bug == "per-row-amax"
    fp8_max = F(240) if bug == "fnuz-scale" else F(448)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = None
        if scale is not None:
            sc = np.full((1, 1), F(scale))
        else:
            a = np.abs(x)
            if bug == "signed-amax":
                a = x
            if bug == "drop-first":  # a reduction started at element 1
                if per_row:
                    a = a[:, 1:] if k > 1 else np.zeros((m, 1), F)
                else:
                    a = a.reshape(1, -1)[:, 1:] if m * k > 1 else np.zeros((1, 1), F)
            if bug == "drop-last":
                if per_row:
                    a = a[:, :-1] if k > 1 else np.zeros((m, 1), F)
                else:
                    a = a.reshape(1, -1)[:, :-1] if m * k > 1 else np.zeros((1, 1), F)
            if bug == "wrong-axis":
                # A transposed layout's reduction: amax over columns, the
                # first m of them (cycled) written as the row scales.
                amax = np.resize(a.max(axis=0), m).reshape(m, 1)
            else:
                # np.fmax skips NaN, as CUDA's fmaxf; np.max propagates it.
                red = np.max if bug == "nan-amax" else np.fmax.reduce
                amax = red(a, axis=1, keepdims=True) if per_row else red(a.reshape(-1)).reshape(1, 1)
            amax = np.maximum(amax, F(0)).astype(F)
            if scale_ub is not None and bug not in ("ub-ignored", "ub-on-scale"):
                amax = np.minimum(amax, F(scale_ub))
            if rule == "to_float8":
                r = (F(1) / np.maximum(amax, F(1e-12))) * F(448)
                sc = F(1) / r
            elif rule == "torchao":
                # amax_to_scale: float64 448 / max(amax, 1e-12), then float32.
                r = (448.0 / np.maximum(amax.astype(np.float64), 1e-12)).astype(F)
                sc = F(1) / r
            else:
                s0 = amax * (F(1) / fp8_max) if rule.startswith("torch_") else amax / fp8_max
                if bug == "ub-on-scale":
                    s0 = np.minimum(s0, F(scale_ub))
                if bug == "one-if-zero":
                    # Triton's `tl.where(scale == 0.0, 1.0, scale)` for the floor.
                    sc = np.where(s0 == 0, F(1), s0).astype(F)
                else:
                    sc = s0 if bug == "no-floor" else np.maximum(s0, F(min_scale))
        if r is None:
            r = F(1) / sc
        if bug == "f64-codes":
            y64 = x / sc.astype(np.float64) if rule in ("divide", "torch_divide") else x * r.astype(np.float64)
            q[...] = nearest_e4m3_f64(np.clip(y64, -448, 448))
        else:
            y = x / sc if rule in ("divide", "torch_divide") else x * r
            if bug == "no-clamp":
                q[...] = torch_cast(y)
            elif bug == "nan-kept":
                # torch's clamp: NaN stays NaN (code 0x7F).
                q[...] = ko.encode_e4m3(np.clip(y, F(-448), F(448)).astype(F))
            elif bug == "clamp-order":
                # fminf(fmaxf(v, -448), 448): a NaN goes to -448.
                q[...] = ko.encode_e4m3(np.fmin(np.fmax(y, F(-448)), F(448)).astype(F))
            elif bug == "fnuz-clamp":
                q[...] = ko.encode_e4m3(np.fmax(F(-240), np.fmin(y, F(240))).astype(F))
            else:
                q[...] = ko.encode_e4m3(vllm_clamp(y))
        if bug == "round-to-zero":
            # Truncation: where nearest rounded away from zero, one code back.
            away = np.abs(DECODED[q]) > np.abs(y)
            q[...] = np.where(away, q - 1, q)
        if bug == "minus-zero":
            q[q == 0x80] = 0
        if bug == "no-tail-codes":
            # A by-4 vectorized code loop without its remainder.
            q[:, k - k % 4:] = 0x7F
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
    ("tensor", None, "torchao", None, MIN),  # torchao's float8 (amax_to_scale in float64)
    ("token", None, "torchao", None, MIN),
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
    if scale is None and rule not in ("to_float8", "torchao") and F(ms) != MIN:
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
    # TAIL: the tensor's last element alone holds the amax (m odd: the rows
    # past a tile), or its first (m even).
    c = ko.fp8_scaled_quant_case(33, 5120, "TAIL")
    flat = np.abs(c["x"]).reshape(-1)
    assert flat[-1] == 2 * flat[:-1].max() and c["s"][0] == flat[-1] / F(448)
    c = ko.fp8_scaled_quant_case(32, 5120, "TAIL")
    flat = np.abs(c["x"]).reshape(-1)
    assert flat[0] == 2 * flat[1:].max() and c["s"][0] == flat[0] / F(448)
    # Per token: even rows at the last element, odd rows at the first.
    c = ko.fp8_scaled_quant_case(4, 129, "TAIL", granularity="token")
    a = np.abs(c["x"])
    assert (a[0::2, -1] == 2 * a[0::2, :-1].max(axis=1)).all()
    assert (a[1::2, 0] == 2 * a[1::2, 1:].max(axis=1)).all()
    # ZERO per token: row 0 is all zero, its scale the floor, its codes 0.
    c = ko.fp8_scaled_quant_case(5, 129, "ZERO", granularity="token")
    assert (c["x"][0] == 0).all() and c["s"][0, 0] == MIN and (c["q"][0] == 0).all()
    assert np.abs(c["x"][1]).max() < 1e-12 and c["s"][1, 0] == MIN
    # UB: even rows above the bound take ub / 448, odd rows below do not.
    c = ko.fp8_scaled_quant_case(4, 129, "UB", granularity="token", scale_ub=1.5)
    assert c["s"][0, 0] == F(1.5) / F(448) and c["s"][1, 0] < F(1.5) / F(448)
    assert np.abs(c["x"][0]).max() > 1.5
    # TIES: a division and a multiply by the reciprocal part on about half
    # the elements (static or dynamic), and on none for a static scale
    # whose reciprocal leaves no parting point (0.0173, a power of two).
    for kw in [{"scale": 0.3}, {}, {"granularity": "token"}]:
        c = ko.fp8_scaled_quant_case(17, 1003, "TIES", **kw)
        q, _ = ko.quantize_fp8_scaled(c["x"], rule="reciprocal", **kw)
        assert 0.45 <= (q != c["q"]).mean() <= 0.7, kw
    for scale in [0.0173, 0.5]:
        c = ko.fp8_scaled_quant_case(17, 1003, "TIES", scale=scale)
        q, _ = ko.quantize_fp8_scaled(c["x"], scale=scale, rule="reciprocal")
        assert (q == c["q"]).all()
    with pytest.raises(ValueError, match="UB"):
        ko.fp8_scaled_quant_case(4, 129, "UB", granularity="token")


TENSOR = {"granularity": "tensor", "rule": "divide"}
TOKEN = {"granularity": "token", "rule": "divide"}
TOKEN_UB = {"granularity": "token", "rule": "divide", "scale_ub": 1.5}
STATIC = {"granularity": "tensor", "scale": 0.3, "rule": "reciprocal"}
VLLM_TENSOR = {"granularity": "tensor", "rule": "reciprocal", "min_scale": 0.0}

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
        (TENSOR, "drop-first", "TAIL", SCALES),
        (TOKEN, "drop-first", "TAIL", SCALES),
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
        # Truncation in the e4m3 cast for round-to-nearest-even.
        (STATIC, "round-to-zero", "RAND", CODES),
        (TOKEN, "round-to-zero", "RAND", CODES),
        # e4m3fnuz's 240 where e4m3fn's 448 belongs: in the clamp (the
        # amax codes 240, 0x77) or in the scale.
        (TENSOR, "fnuz-clamp", "AMAX", r"got 0x[7F]7, want 0x[7F]E"),
        (TOKEN, "fnuz-scale", "RAND", SCALES),
        # -0 written as +0 (tiny negatives under the floor round to -0).
        (TOKEN, "minus-zero", "ZERO", r"got 0x00, want 0x80"),
        (STATIC, "minus-zero", "RAND", r"got 0x00, want 0x80"),
        # The quotient rounded once, in float64, straight to e4m3: ties
        # the binary32 quotient makes are missed.
        (TOKEN, "f64-codes", "TIES", CODES),
        (STATIC, "f64-codes", "TIES", CODES),
        # A transposed layout's amax: over columns, not rows.
        (TOKEN, "wrong-axis", "RAND", SCALES),
        # Triton's `where(scale == 0, 1, scale)` for the floor.
        (TOKEN, "one-if-zero", "ZERO", SCALES),
        (TENSOR, "one-if-zero", "ZERO", SCALES),
        # scale_ub read as a bound on the scale, not on the amax.
        (TOKEN_UB, "ub-on-scale", "UB", SCALES),
        # The clamp's fminf and fmaxf swapped: vLLM's per-tensor kernel
        # (no floor) codes an all-zero tensor's 0 * inf = NaN as -448.
        (VLLM_TENSOR, "clamp-order", "ZERO", r"got 0xFE, want 0x7E"),
        # A by-4 vectorized loop that never writes the last k % 4 codes.
        (TOKEN, "no-tail-codes", "RAND", r"got 0x7F"),
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


@pytest.mark.parametrize("kw", [STATIC, TOKEN, TENSOR, VLLM_TENSOR, TOKEN_UB])
def test_the_nan_arm_passes_vllms_forms_and_catches_nan_bugs(kw, capsys):
    """NAN (named only): vLLM's CUDA semantics pass; a NaN-propagating
    amax, a clamp that keeps NaN and a swapped fminf/fmaxf each fail."""
    r = ko.check_fp8_scaled_quant(quantizer(**kw), arms=["NAN"], shapes=SHAPES, verbose=False, **kw)
    assert r.ok and r.cases == len(SHAPES)
    bugs = [("nan-kept", r"got 0x7F, want 0x7E"), ("clamp-order", r"got 0xFE, want 0x7E")]
    if "scale" not in kw:
        bugs.append(("nan-amax", SCALES))
    for bug, caught_by in bugs:
        r = ko.check_fp8_scaled_quant(quantizer(bug, **kw), arms=["NAN"], shapes=SHAPES, verbose=False, **kw)
        assert r.failed == len(SHAPES) and all(re.search(caught_by, x) for x in r.failures), (bug, r.failures[:1])
    capsys.readouterr()


def test_the_nan_arm_is_named_only_and_refused_for_torch_rules():
    r = ko.check_fp8_scaled_quant(quantizer(bug="nan-kept", **TOKEN), shapes=SHAPES, verbose=False, **TOKEN)
    assert r.ok, "NAN is not a default arm"
    for rule in ["torch_divide", "torch_reciprocal", "to_float8", "torchao"]:
        with pytest.raises(ValueError, match="NAN"):
            ko.check_fp8_scaled_quant(quantizer(rule=rule), rule=rule, arms=["NAN"])
        with pytest.raises(ValueError, match="NAN"):
            ko.fp8_scaled_quant_case(3, 7, "NAN", rule=rule)
    c = ko.fp8_scaled_quant_case(4, 129, "NAN", granularity="token")
    assert np.isnan(c["x"][0, [0, -1]]).all() and np.isfinite(c["x"][1]).all()
    assert (c["q"][np.isnan(c["x"])] == 0x7E).all()


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


@pytest.mark.parametrize("g", ["tensor", "token"])
def test_torchao_and_the_to_float8_recipe_part_and_are_named(g):
    """torchao's amax_to_scale divides in float64 (one rounding of 448 /
    amax); the to_float8 recipe multiplies fl(1/amax) by 448: an ulp apart
    on about a fifth of amaxes, so each fails the other's declaration."""
    for form, declared in [("torchao", "to_float8"), ("to_float8", "torchao")]:
        f = quantizer(granularity=g, rule=form, name=form + "_form")
        r = ko.check_fp8_scaled_quant(f, granularity=g, rule=declared, shapes=SHAPES, verbose=False)
        assert not r.ok and r.failed >= 3
        assert all(re.search(rf"the output matches: (.*, )?{form}(,|\n)", x) for x in r.failures)


def test_nan_elements_follow_vllms_cuda_kernels():
    """The oracle's NaN semantics are vLLM's CUDA kernels' (fmaxf skips a
    NaN in the amax; fmaxf(-448, fminf(NaN, 448)) codes +448); only the
    NAN arm, when named, draws NaN, and the torch forms (which propagate
    it) are not held to this."""
    x = np.array([[1.0, np.nan, -2.0, 0.5]], F)
    for g in ["tensor", "token"]:
        q, s = ko.quantize_fp8_scaled(x, granularity=g)
        assert s.reshape(-1)[0] == F(2) / F(448)
        assert q.tolist() == [[ko.encode_e4m3(np.array([224.0], F))[0], 0x7E, 0xFE, q[0, 3]]]
    q, _ = ko.quantize_fp8_scaled(x, scale=0.5, rule="reciprocal")
    assert q[0, 1] == 0x7E


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
