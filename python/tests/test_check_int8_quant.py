"""check_int8_quant on numpy INT8 activation quantizers written from the
rules' definitions (vLLM's scaled_int8_quant kernels: static and dynamic,
symmetric and with a zero point; the torch forms that divide) and on
planted bugs: each rule's implementation passes bit for bit under its own
declaration, in float32, bfloat16 and float16 input, and is named; each bug
is caught by the arm meant to catch it, with a rerun line that fails
again alone."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

F = np.float32
FLT_MIN = F(np.finfo(F).tiny)  # std::numeric_limits<float>::min()
# Ragged widths (a by-16 vectorized loop's remainder: 7, 129, 1003, 2049),
# one row and 33 (CI's 2 cores: the default shapes run once, below).
SHAPES = [(1, 7), (33, 7), (3, 129), (17, 1003), (4, 2049)]
DTYPES = ["float32", "bfloat16", "float16"]


def to_f32(x, dtype):
    """The kernel's exact conversion of its input to float32."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(F)
    if dtype == "float16":
        return x.view(np.float16).astype(F)
    return x


def rint(v, away=False):
    """Round to an integer (as float32): ties to even (cvt.rni,
    std::nearbyint, torch.round), or ties away from zero (C roundf)."""
    if not away:
        return np.rint(v)
    t = np.trunc(v)
    return np.where(np.abs(v - t) >= F(0.5), t + np.sign(v), t).astype(v.dtype)


def cvt8(y, away=False, lo=-128):
    """cvt.rni.sat.s8.f32: round, saturate, NaN -> 0."""
    r = rint(y, away)
    r = np.where(np.isnan(r), F(0), r)
    return np.clip(r, lo, 127).astype(np.int8)


def cvt32(y, away=False):
    """cvt.rni.sat.s32.f32 as int64: round, saturate, NaN -> 0."""
    r = rint(y, away).astype(np.float64)
    r = np.where(np.isnan(r), 0.0, r)
    return np.clip(r, -(2.0**31), 2.0**31 - 1).astype(np.int64)


def int8_quant(x, q, s, azp, mode="dynamic", symmetric=True, scale=None, azp0=None, rule="reciprocal",
               dtype="float32", bug=None, skip_nan=False):
    """INT8 quantization in float32 numpy: x [m, k] -> codes q (int8),
    scales s ([1] static, [m, 1] dynamic) and, asymmetric, zero points
    azp (int32, as s). ``bug`` plants one mistake; None computes the rule."""
    x = to_f32(x, dtype)
    m, k = x.shape
    away = bug == "roundf"
    lo = -127 if bug == "clamp127" else -128
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        xs = x
        if bug == "drop-remainder":
            # A by-16 vectorized reduction without its remainder loop.
            xs = x[:, :k - k % 16]
        z = None
        if mode == "static":
            sc = np.full((1, 1), F(scale))
            if not symmetric:
                z = np.full((1, 1), azp0, np.int64)
        elif symmetric:
            a = xs if bug == "signed-amax" else np.abs(xs)
            mx_of = np.nanmax if skip_nan else np.max
            amax = (mx_of(a, axis=1, keepdims=True) if xs.shape[1] else np.zeros((m, 1), F)).astype(F)
            if bug == "amax-floor":
                # An eps under the amax (torch's amax.clamp(min=1e-8)).
                amax = np.maximum(amax, F(1e-8))
            if rule == "torch_divide":
                # torch's amax / 127.0 on CUDA: times fl(1/127).
                sc = amax * (F(1) / F(127))
            else:
                sc = amax / (F(128) if bug == "scale-128" else F(127))
            recip = F(127) / amax
        else:
            mx_of, mn_of = (np.nanmax, np.nanmin) if skip_nan else (np.max, np.min)
            mx = mx_of(xs, axis=1, keepdims=True) if xs.shape[1] else np.full((m, 1), -np.inf, F)
            mn = mn_of(xs, axis=1, keepdims=True) if xs.shape[1] else np.full((m, 1), np.inf, F)
            if bug == "min-init":
                # vLLM's max_val = std::numeric_limits<float>::min().
                mx = np.maximum(mx, FLT_MIN)
            if bug == "min-zero":
                mn = np.minimum(mn, F(0))
            sc = (mx - mn) * (F(1) / F(255)) if rule == "torch_divide" else (mx - mn) / F(255)
            z = cvt32(F(-128) - mn / sc, away or bug == "azp-roundf")
        if z is None:
            y = x * recip if (mode == "dynamic" and rule == "reciprocal") else (
                x * (F(1) / sc) if rule == "reciprocal" else x / sc)
            # "truncate": toward zero (AITER's scaled int8 casts before PR 4637).
            q[...] = cvt8(np.trunc(y) if bug == "truncate" else y, away, lo)
        else:
            y = x * (F(1) / sc) if rule == "reciprocal" else x / sc
            v = cvt32(y, away) + z
            if bug == "azp-wrap":
                q[...] = ((v + 128) % 256 - 128).astype(np.int8)
            else:
                q[...] = np.clip(v, lo, 127).astype(np.int8)
        s[...] = sc.reshape(s.shape)
        if azp is not None:
            azp[...] = z.reshape(azp.shape).astype(np.int32)


def quantizer(bug=None, name=None, **form):
    def f(x, q, s, azp):
        int8_quant(x, q, s, azp, bug=bug, **form)

    f.__name__ = name or (bug or form.get("rule", "reciprocal")).replace("-", "_")
    return f


def check_kwargs(form):
    kw = {k: v for k, v in form.items() if k != "azp0"}
    if "azp0" in form:
        kw["azp"] = form["azp0"]
    return kw


# Each the form of a kernel the field runs.
FORMS = [
    dict(mode="dynamic", symmetric=True, rule="reciprocal"),  # vLLM dynamic_scaled_int8_quant
    dict(mode="dynamic", symmetric=True, rule="divide"),  # torch: x / (amax / 127)
    dict(mode="dynamic", symmetric=False, rule="divide"),  # vLLM's azp kernel before PR #19233, max started right
    dict(mode="static", symmetric=True, scale=0.3, rule="divide"),  # vLLM static_scaled_int8_quant
    dict(mode="static", symmetric=True, scale=0.3, rule="reciprocal"),  # x * (1 / scale)
    dict(mode="static", symmetric=False, scale=0.05, azp0=-19, rule="divide"),  # vLLM static azp before it
    dict(mode="dynamic", symmetric=False, rule="reciprocal"),  # vLLM's azp kernel since PR #19233
    dict(mode="static", symmetric=False, scale=0.05, azp0=-19, rule="reciprocal"),  # its static azp
    dict(mode="dynamic", symmetric=True, rule="torch_divide"),  # torch: x / (amax / 127.0)
    dict(mode="dynamic", symmetric=False, rule="torch_divide"),  # torch: (max - min) / 255.0
]


def arm_count(form):
    return 3 if form["mode"] == "static" else 5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", FORMS, ids=lambda f: "-".join(str(v) for v in f.values()))
def test_each_rule_passes_bit_for_bit_and_is_named(form, dtype, capsys):
    kw = dict(check_kwargs(form), dtype=dtype)
    r = ko.check_int8_quant(quantizer(dtype=dtype, **form), shapes=SHAPES, **kw)
    assert r.ok and r.passed == r.cases == len(SHAPES) * arm_count(form), r.failures[:1]
    rows = [line for line in r.text.splitlines() if " PASS " in line]
    assert rows and all(re.search(rf"(  |, ){form['rule']}(,|$)", line) for line in rows), rows[0]
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_the_default_shapes_pass_and_vllm_is_the_default_rule():
    r = ko.check_int8_quant(quantizer(), verbose=False)
    assert r.ok and r.cases == len(ko.INT8_QUANT_SHAPES) * 5
    assert "declared: reciprocal" in r.text
    r = ko.check_int8_quant(quantizer(mode="static", scale=0.3, rule="divide"), mode="static", scale=0.3,
                            verbose=False, shapes=SHAPES[:2])
    assert r.ok and "declared: divide" in r.text
    assert [tuple(s) for s in ko.INT8_QUANT_SHAPES][:2] == [(1, 7), (33, 7)]


@pytest.mark.parametrize("symmetric", [True, False])
def test_torch_scalar_division_is_told_from_the_division_and_named(symmetric):
    # torch's CUDA division by a Python scalar multiplies by its
    # reciprocal: the scale sits an ulp from amax / 127 on some rows (on an
    # H100, 10 of 40 default cases of the symmetric form, run 91).
    fn = quantizer(mode="dynamic", symmetric=symmetric, rule="torch_divide", name="torch_scalar")
    r = ko.check_int8_quant(fn, symmetric=symmetric, rule="divide", verbose=False)
    assert not r.ok and r.failed >= 3, r.text.splitlines()[-1]
    assert "the output matches: torch_divide" in r.failures[0], r.failures[0]
    assert ko.check_int8_quant(fn, symmetric=symmetric, rule="torch_divide", verbose=False).ok


def failing_arms(r):
    return {m.group(1) for m in re.finditer(r"arm=(\w+)", "\n".join(r.failures))}


def rerun_fails(r, fn):
    """The first rerun line, run alone, fails again; the case line gives
    the arrays."""
    ns = {"kernel_oracle": ko, fn.__name__: fn}
    again = eval(r.reproductions[0], ns)  # noqa: S307 (our own line)
    assert not again.ok and again.cases == 1
    case_line = re.search(r"kernel_oracle\.int8_quant_case\(.*\)", r.failures[0]).group(0)
    c = eval(case_line, ns)  # noqa: S307
    assert c["q"].dtype == np.int8 and c["s"].dtype == np.float32


# A static scale that is a power of two: x / scale is exact, and the
# reciprocal rule is the divide rule.
STATIC_POW2 = dict(mode="static", symmetric=True, scale=0.25, rule="divide")

# (bug, form, the arm that must catch it)
BUGS = [
    ("roundf", FORMS[0], "TIES"),
    ("roundf", FORMS[2], "TIES"),
    ("roundf", FORMS[3], "TIES"),
    ("roundf", STATIC_POW2, "TIES"),
    ("clamp127", FORMS[3], "SAT"),
    ("min-init", FORMS[2], "SIGN"),
    ("min-zero", FORMS[2], "SIGN"),
    ("signed-amax", FORMS[0], "SIGN"),
    ("drop-remainder", FORMS[0], "TAIL"),
    ("drop-remainder", FORMS[2], "TAIL"),
    ("scale-128", FORMS[0], "TIES"),
    ("amax-floor", FORMS[0], "ZERO"),
    ("azp-wrap", FORMS[5], "SAT"),
    ("azp-roundf", FORMS[2], "TIES"),
]


@pytest.mark.parametrize("bug,form,arm", BUGS, ids=lambda v: v if isinstance(v, str) else "")
def test_each_planted_bug_fails_on_its_arm(bug, form, arm):
    for dtype in ["float32", "bfloat16"]:
        fn = quantizer(bug=bug, dtype=dtype, **form)
        r = ko.check_int8_quant(fn, shapes=SHAPES, arms=[arm], verbose=False, dtype=dtype,
                                **check_kwargs(form))
        assert not r.ok, f"{bug} {dtype}: passed on {arm}"
        # Every shape's case of the arm catches it (k % 16 != 0 in every
        # shape here), but a minimum started at 0 needs a positive row,
        # which SIGN draws from the second row on.
        want = len([s for s in SHAPES if s[0] >= 2]) if bug == "min-zero" else len(SHAPES)
        assert r.failed == want, (bug, dtype, r.failed)
        rerun_fails(r, fn)


def test_the_flt_min_start_passes_rows_that_straddle_zero():
    """vLLM's FLT_MIN start shows on SIGN's all-negative rows; RAND's,
    TIES's and TAIL's asymmetric rows straddle zero, so it passes there."""
    for dtype in ["float32", "bfloat16"]:
        fn = quantizer(bug="min-init", symmetric=False, rule="divide", dtype=dtype)
        r = ko.check_int8_quant(fn, symmetric=False, rule="divide", dtype=dtype, shapes=SHAPES,
                                arms=["RAND", "TIES", "TAIL"], verbose=False)
        assert r.ok, r.failures[:1]


def test_reciprocal_declared_divide_fails_on_ties_and_is_named():
    fn = quantizer(mode="dynamic", rule="reciprocal", name="vllm_like")
    r = ko.check_int8_quant(fn, rule="divide", shapes=SHAPES, arms=["TIES"], verbose=False)
    assert not r.ok
    multi = [s for s in SHAPES if s[0] >= 2]
    assert r.failed >= len(multi)
    assert all("the output matches: reciprocal" in f for f in r.failures), r.failures[0]
    rerun_fails(r, fn)


def test_identification_names_roundf_and_the_narrow_clamp():
    r = ko.check_int8_quant(quantizer(bug="roundf", **FORMS[0]), shapes=[(8, 129)], arms=["TIES"],
                            verbose=False)
    assert "the output matches: reciprocal/roundf" in r.failures[0]
    form = FORMS[3]
    r = ko.check_int8_quant(quantizer(bug="clamp127", **form), shapes=[(8, 129)], arms=["SAT"], verbose=False,
                            **check_kwargs(form))
    # (SAT's elements lie off the points where a multiply by fl(1/0.3)
    # and the division part, so both are named.)
    assert re.search(r"the output matches: (.*, )?divide/clamp127(,|\n)", r.failures[0]), r.failures[0]


def test_unwritten_codes_and_a_written_input_fail():
    def short(x, q, s, azp):
        # A by-16 vectorized code loop without its remainder: the last
        # k % 16 codes of each row are left as handed.
        full = np.empty_like(q)
        int8_quant(x, full, s, azp)
        k = x.shape[1]
        q[:, :k - k % 16] = full[:, :k - k % 16]

    r = ko.check_int8_quant(short, shapes=[(3, 129)], arms=["RAND"], verbose=False)
    assert not r.ok and "codes: 3 of 387 differ" in r.failures[0]

    def writes_x(x, q, s, azp):
        int8_quant(x, q, s, azp)
        x[0, 0] = 0

    r = ko.check_int8_quant(writes_x, shapes=[(3, 129)], arms=["RAND"], verbose=False)
    assert not r.ok and "wrote its input" in r.failures[0]


def test_returned_outputs_are_read_as_vllm_returns_them():
    """(q, s, None) symmetric and (q, s, azp) asymmetric, q int8."""

    def vllm_style(symmetric):
        def f(x, q, s, azp):
            q2, s2 = np.empty_like(q), np.empty_like(s)
            z2 = None if symmetric else np.empty((x.shape[0], 1), np.int32)
            int8_quant(x, q2, s2, z2, symmetric=symmetric, rule="reciprocal")
            return q2, s2, z2

        return f

    for symmetric in [True, False]:
        r = ko.check_int8_quant(vllm_style(symmetric), symmetric=symmetric, shapes=SHAPES[:3], verbose=False)
        assert r.ok, r.failures[:1]


def test_the_quantizer_function_is_the_oracle():
    for dtype in DTYPES:
        c = ko.int8_quant_case(17, 1003, "TIES", symmetric=False, dtype=dtype)
        q, s, z = ko.quantize_int8(c["x"], symmetric=False, dtype=dtype)
        assert (q == c["q"]).all() and (s.view(np.uint32) == c["s"].view(np.uint32)).all()
        assert (z == c["azp"]).all() and s.shape == z.shape == (17, 1) and q.dtype == np.int8
        q2, s2, z2 = np.empty_like(q), np.empty_like(s), np.empty_like(z)
        int8_quant(c["x"], q2, s2, z2, symmetric=False, rule="reciprocal", dtype=dtype)
        assert (q2 == q).all() and (s2.view(np.uint32) == s.view(np.uint32)).all() and (z2 == z).all()
    q, s, z = ko.quantize_int8(c["x"].view(np.float16).astype(F), scale=0.25)
    assert z is None and s.shape == (1,) and s[0] == F(0.25)
    q, s, z = ko.quantize_int8(np.array([[0.0, -0.0], [1e-38, -1e-38]], F))
    assert (q == [[0, 0], [127, -128]]).all() and s[0, 0] == 0
    q, s, z = ko.quantize_int8(np.array([[-10.0, -2.0, -6.0]], F), symmetric=False)
    assert z[0, 0] > 127 and (q[0, :2] == [-128, 127]).all()
    with pytest.raises(ValueError, match="maximum equals its minimum"):
        ko.quantize_int8(np.ones((2, 3), F), symmetric=False)
    with pytest.raises(TypeError):
        ko.quantize_int8(np.ones((2, 3), np.float64))
    with pytest.raises(ValueError, match="azp without scale"):
        ko.quantize_int8(np.ones((2, 3), F), azp=3, symmetric=False)


BAD = [
    dict(mode="per_tensor"),
    dict(rule="roundf"),
    dict(dtype="int8"),
    dict(scale=0.3),
    dict(mode="static"),
    dict(mode="static", scale=0.0),
    dict(mode="static", scale=float("nan")),
    dict(mode="static", scale=float("inf")),
    dict(mode="static", scale=0.3, azp=4),
    dict(mode="static", scale=0.3, symmetric=False),
    dict(mode="static", scale=0.3, symmetric=False, azp=2**31),
    dict(arms=["SAT"]),
    dict(arms=["SIGN"], mode="static", scale=0.3),
    dict(arms=["NOPE"]),
    dict(symmetric=False, shapes=[(4, 1)]),
    dict(shapes=[(0, 7)]),
    dict(shapes=[(1 << 14, 1 << 13)]),
    dict(trials=0),
    dict(seeds=[]),
]


@pytest.mark.parametrize("kw", BAD, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_bad_arguments_raise_before_any_call(kw):
    calls = []

    def f(x, q, s, azp):
        calls.append(1)

    with pytest.raises(ValueError):
        ko.check_int8_quant(f, verbose=False, **kw)
    assert not calls


def test_the_default_rule_is_vllms_current_kernels():
    # vLLM's zero-point kernels multiply by fl(1 / s) since PR #19233 (June
    # 2025); they divided before. rule=None declares the current ones.
    for form in [dict(mode="dynamic", symmetric=False), dict(mode="static", symmetric=False, scale=0.05, azp0=-19)]:
        kw = check_kwargs(form)
        assert ko.check_int8_quant(quantizer(rule="reciprocal", **form), shapes=SHAPES, verbose=False, **kw)
        assert not ko.check_int8_quant(quantizer(rule="divide", **form), shapes=SHAPES, verbose=False, **kw)
    assert ko.check_int8_quant(quantizer(mode="static", scale=0.3, rule="divide"), mode="static", scale=0.3,
                               shapes=SHAPES, verbose=False)


@pytest.mark.parametrize("form", [FORMS[0], FORMS[6], FORMS[3]], ids=["dynamic", "dynamic-azp", "static"])
def test_nan_elements_are_skipped_by_the_reductions_and_code_zero(form):
    # I8Q-NAN (arm NAN, only when named): vLLM's fmaxf/fminf skip a NaN and
    # cvt.rni.sat codes it 0 (plus the zero point); a torch amax or max
    # propagates the NaN into the scale and fails.
    kw = check_kwargs(form)

    def skipping(dtype):
        def f(x, q, s, azp):
            int8_quant(x, q, s, azp, skip_nan=True, dtype=dtype, **form)
        return f

    for dtype in DTYPES:
        r = ko.check_int8_quant(skipping(dtype), arms=["NAN"], dtype=dtype, shapes=SHAPES, verbose=False, **kw)
        assert r, r.failures[:1]
    r = ko.check_int8_quant(quantizer(**form), arms=["NAN"], shapes=SHAPES, verbose=False, **kw)
    assert r.ok == (form["mode"] == "static") and (r.ok or r.failed >= 3)
    # Not a default arm.
    assert "NAN" not in ko.check_int8_quant(quantizer(**form), shapes=SHAPES[:1], verbose=True, **kw).text
