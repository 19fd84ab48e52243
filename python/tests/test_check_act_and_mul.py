"""check_act_and_mul on numpy gated activations written from the rules
(each activation, each declared arithmetic, both layouts; exp in float32,
exp through exp2 of a scaled argument, everything in float64 rounded once;
bf16, f16 and f32) and on planted bugs: each correct form passes and is
named; each bug fails under the default arms and shapes, with a rerun
line that fails again."""

import math
import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
f64 = np.float64
# A tail past 8, a model width, a row of one; CI's 2 cores.
SHAPES = [(5, 129), (3, 1408), (4, 1)]
ACTIVATIONS = ["silu", "gelu", "gelu_tanh", "gelu_quick"]

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: v.astype(f32), lambda v: v.astype(f32)),
}

_erf = np.vectorize(math.erf, otypes=[f64])


def activation_f32(activation, g, exp="exp", bug=None):
    """The activation in numpy float32, as the field writes it, with `exp`
    as std (`np.exp` in float32) or through exp2 of `s log2(e)` (Triton's
    `tl.exp`, CUDA's `__expf`)."""

    def e(s):
        with np.errstate(over="ignore"):
            if exp == "exp2":
                return np.exp2(s * f32(math.log2(math.e)))
            return np.exp(s)

    one, half = f32(1), f32(0.5)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if activation == "silu":
            if bug == "overflow-form":
                z = e(g)
                return g * (z / (one + z))
            if bug == "sigmoid-rounded":
                sig = one / (one + e(-g))
                return g * ko.decode_bf16(ko.encode_bf16(sig))
            return g / (one + e(-g))
        if activation == "gelu_quick":
            return g * (one / (one + e(-(f32(1.702) * g))))
        if activation == "gelu":
            s = g * f32(1 / math.sqrt(2))
            t = _erf(s.astype(f64)).astype(f32)
            return (g * half) * (one + t)
        if activation == "gelu_tanh":
            beta = f32(math.sqrt(2 / math.pi))
            inner = beta * (g + f32(0.044715) * (g * g * g))
            return g * (half * (one + np.tanh(inner)))
    raise ValueError(activation)


def activation_f64(activation, g):
    """The activation in float64, rounded once to float32."""
    g = g.astype(f64)
    with np.errstate(over="ignore"):
        if activation == "silu":
            a = g / (1 + np.exp(-g))
        elif activation == "gelu_quick":
            a = g / (1 + np.exp(-1.702 * g))
        elif activation == "gelu":
            a = 0.5 * g * (1 + _erf(g / math.sqrt(2)))
        else:
            inner = math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)
            a = 0.5 * g * (1 + np.tanh(inner))
    return a.astype(f32)


def numpy_act(activation="silu", arithmetic="round_then_mul", dtype="bfloat16", gate_first=True,
              exp="exp", bug=None, name=None):
    """`act(gate) * up` in numpy under one declaration, or with a bug."""
    enc, dec = CODECS[dtype]

    def R(v):
        v = np.asarray(v, f32)
        if bug == "half-away":
            # bf16 by adding half an ulp to the magnitude's bits: ties
            # away from zero.
            return ko.decode_bf16(((v.view(np.uint32) + 0x8000) >> 16).astype(np.uint16))
        return dec(enc(v))

    def fn(x, out):
        v = dec(x)
        d = v.shape[1] // 2
        first, second = v[:, :d], v[:, d:]
        g, y = (first, second) if gate_first else (second, first)
        if bug == "halves-swapped":
            g, y = y, g
        if bug == "wrong-token-up":
            y = np.roll(y, 1, axis=0)
        act = activation
        if bug == "gelu-tanh-for-gelu":
            act = "gelu_tanh"
        if bug == "gelu-for-gelu-tanh":
            act = "gelu"
        a = activation_f64(act, g) if exp == "f64" else activation_f32(act, g, exp, bug)
        with np.errstate(over="ignore", invalid="ignore"):
            o = (R(a) * y) if arithmetic == "round_then_mul" else (a * y)
        if bug == "saturating":
            o = np.clip(o, f32(-65504), f32(65504))
        if bug == "truncated":
            bits = np.asarray(o, f32).view(np.uint32) >> 16
            out[...] = bits.astype(np.uint16)
        elif bug == "half-away":
            out[...] = ko.encode_bf16(R(o))
        else:
            out[...] = enc(np.asarray(o, f32))
        if bug == "tail-dropped":
            out[:, d // 8 * 8:] = enc(np.zeros((v.shape[0], d - d // 8 * 8), f32))

    fn.__name__ = name or (bug or f"numpy_{activation}_{arithmetic}").replace("-", "_")
    return fn


def summary_names(r):
    return r.text.rsplit("every compared case admitted under: ", 1)[1].rsplit(";", 1)[0]


def layout(gate_first):
    return "gate_first" if gate_first else "up_first"


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("arithmetic", ["round_then_mul", "f32"])
@pytest.mark.parametrize("gate_first", [True, False])
def test_numpy_forms_pass_and_are_named_alone(activation, arithmetic, gate_first):
    fn = numpy_act(activation, arithmetic, gate_first=gate_first)
    r = ko.check_act_and_mul(fn, activation=activation, arithmetic=arithmetic,
                             gate_first=gate_first, shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == 3 * 4, r.text
    assert summary_names(r) == f"{activation}/{arithmetic}/{layout(gate_first)}", r.text


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("exp", ["exp2", "f64"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_exp2_and_float64_forms_pass_on_the_default_shapes(activation, exp, dtype):
    for arithmetic in ["round_then_mul", "f32"]:
        fn = numpy_act(activation, arithmetic, dtype=dtype, exp=exp)
        r = ko.check_act_and_mul(fn, activation=activation, arithmetic=arithmetic, dtype=dtype,
                                 verbose=False)
        assert r.ok and r.passed == r.cases == len(ko.ACT_AND_MUL_SHAPES) * 4, r.text
        decided, total = map(int, re.search(r"bit for bit: (\d+) of (\d+)", r.text).groups())
        # gelu and gelu_tanh of gates below about -4 (TAILS' negative half,
        # some of RAND's) are bounded: 1 + erf, 1 + tanh cancel.
        assert decided > (0.9 if activation in ("silu", "gelu_quick") else 0.7) * total, r.text


def test_float32_output_is_mostly_bounded_and_names_both_arithmetics():
    r = ko.check_act_and_mul(numpy_act("silu", "f32", "float32"), arithmetic="f32",
                             dtype="float32", shapes=SHAPES, verbose=False)
    assert r.ok, r.text
    # In float32 rounding the activation first is no rounding at all.
    assert summary_names(r) == "silu/round_then_mul/gate_first; silu/f32/gate_first"
    decided, total = map(int, re.search(r"bit for bit: (\d+) of (\d+)", r.text).groups())
    assert decided < 0.5 * total, r.text


BUGS = [
    (numpy_act(bug="halves-swapped"), dict()),
    (numpy_act("gelu", bug="gelu-tanh-for-gelu"), dict(activation="gelu")),
    (numpy_act("gelu_tanh", bug="gelu-for-gelu-tanh"), dict(activation="gelu_tanh")),
    (numpy_act("silu", "round_then_mul", name="rtm_declared_f32"), dict(arithmetic="f32")),
    (numpy_act("silu", "f32", name="f32_declared_rtm"), dict(arithmetic="round_then_mul")),
    (numpy_act("gelu", "f32", name="gelu_f32_declared_rtm"), dict(activation="gelu")),
    (numpy_act(bug="sigmoid-rounded"), dict()),
    (numpy_act(bug="tail-dropped"), dict()),
    (numpy_act(bug="overflow-form"), dict()),
    (numpy_act(bug="wrong-token-up"), dict()),
    (numpy_act(bug="truncated"), dict()),
    # Ties of the exact product R(a) * up are decided: away from zero fails.
    (numpy_act(bug="half-away"), dict()),
    # TAILS' products past 65504 are decided f16 infinities.
    (numpy_act(dtype="float16", bug="saturating"), dict(dtype="float16")),
    (numpy_act("silu", gate_first=True, name="gate_first_declared_up_first"),
     dict(gate_first=False)),
    (numpy_act("gelu_quick", name="gelu_quick_declared_silu"), dict()),
]


@pytest.mark.parametrize("fn,kw", BUGS, ids=[f.__name__ for f, _ in BUGS])
def test_planted_bugs_fail_under_the_default_arms_and_shapes(fn, kw):
    r = ko.check_act_and_mul(fn, verbose=False, **kw)
    assert not r.ok and r.failed >= 1, r.text
    fail = r.failures[0]
    assert "FAIL " in fail and "reproduce:" in fail and "act_and_mul_case(" in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\((\d+), (\d+)\)\]", fail).groups())
    arm = re.search(r'arms=\["(\w+)"\]', fail).group(1)
    again = ko.check_act_and_mul(fn, shapes=[dims], arms=[arm], seeds=[seed], verbose=False, **kw)
    assert not again.ok


def arms_failing(fn, **kw):
    r = ko.check_act_and_mul(fn, verbose=False, **kw)
    return {re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}, r


def test_each_bug_is_caught_by_the_arm_meant_for_it_and_named():
    # Swapped halves fail on every SPLIT case, and are named as the other
    # layout.
    arms, r = arms_failing(numpy_act(bug="halves-swapped"))
    assert "SPLIT" in arms and r.failed >= len(ko.ACT_AND_MUL_SHAPES), r.text
    split = [f for f in r.failures if 'arms=["SPLIT"]' in f]
    assert len(split) == len(ko.ACT_AND_MUL_SHAPES)
    assert "the output matches: silu/round_then_mul/up_first" in r.failures[0]
    # e^g / (1 + e^g): NaN past 88.7, only in TAILS.
    arms, _ = arms_failing(numpy_act(bug="overflow-form"))
    assert arms == {"TAILS"}, arms
    arms, _ = arms_failing(numpy_act(dtype="float16", bug="saturating"), dtype="float16")
    assert arms == {"TAILS"}, arms
    # The tail past the last vector of 8: only the widths that leave one.
    r = ko.check_act_and_mul(numpy_act(bug="tail-dropped"), verbose=False)
    tails = {re.search(r"shapes=\[\((\d+), (\d+)\)\]", f).group(2) for f in r.failures}
    assert tails == {"7", "129", "1003", "1"}, tails
    assert "past the last whole vector of 8" in r.failures[0]
    # The arithmetic and the activation are named.
    r = ko.check_act_and_mul(numpy_act("silu", "f32"), arithmetic="round_then_mul",
                             shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert "the output matches: silu/f32/gate_first" in r.failures[0], r.failures[0]
    r = ko.check_act_and_mul(numpy_act("gelu", bug="gelu-tanh-for-gelu"), activation="gelu",
                             shapes=SHAPES[1:2], arms=["RAND"], verbose=False)
    assert "the output matches: gelu_tanh/round_then_mul/gate_first" in r.failures[0]


def test_f16_forms_and_bugs():
    fn = numpy_act("gelu_tanh", "f32", dtype="float16")
    r = ko.check_act_and_mul(fn, activation="gelu_tanh", arithmetic="f32", dtype="float16",
                             shapes=SHAPES, verbose=False)
    assert r.ok and summary_names(r) == "gelu_tanh/f32/gate_first", r.text
    bad = numpy_act("gelu_tanh", "f32", dtype="float16", bug="halves-swapped")
    r = ko.check_act_and_mul(bad, activation="gelu_tanh", arithmetic="f32", dtype="float16",
                             verbose=False)
    assert not r.ok


def test_the_case_holds_the_oracles_intervals():
    c = ko.act_and_mul_case(5, 129, "ZERO", activation="gelu", arithmetic="f32",
                            gate_first=False)
    assert c["x"].dtype == np.uint16 and c["x"].shape == (5, 258)
    lo, hi = ko.act_and_mul(c["x"], activation="gelu", arithmetic="f32", gate_first=False)
    assert (lo == c["out_lo"]).all() and (hi == c["out_hi"]).all()
    assert c["act_lo"].dtype == np.float32 and (c["act_lo"] <= c["act_hi"]).all()
    # The gates are the second half: act(0) = 0 there.
    g = ko.decode_bf16(c["x"][:, 129:])
    assert (c["act_lo"][g == 0] == 0).all()
    with pytest.raises(TypeError, match="uint16"):
        ko.act_and_mul(c["x"].astype(f32))
    with pytest.raises(ValueError, match="2 d"):
        ko.act_and_mul(c["x"][:, :-1])
    bad = c["x"].copy()
    bad[0, 0] = 0x7F80
    with pytest.raises(ValueError, match="not finite"):
        ko.act_and_mul(bad)
    x32 = np.array([[1.0, 2.0**127]], f32)
    with pytest.raises(ValueError, match="2\\^127"):
        ko.act_and_mul(x32, dtype="float32")


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(activation="swiglu"),
        dict(arithmetic="f16"),
        dict(dtype="float64"),
        dict(act_ulps=0),
        dict(act_ulps=70000),
        dict(arms=["NOPE"]),
        dict(shapes=[(0, 128)]),
        dict(shapes=[(1 << 12, 1 << 11)]),
        dict(shapes=[(1, 1 << 18)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_act_and_mul(fn, verbose=False, **kw)
    assert not calls


def test_wrong_returns_writes_and_refusals():
    oracle = numpy_act()

    def returns_out(x, out):
        oracle(x, out)
        return out.copy()

    def takes_x_alone(x):
        out = np.empty((x.shape[0], x.shape[1] // 2), x.dtype)
        oracle(x, out)
        return out

    def in_place(x, out):
        oracle(x, out)
        x[:, : out.shape[1]] = out

    def wrong_dtype(x, out):
        oracle(x, out)
        return out.astype(f32)

    def refuses(x, out):
        if x.shape[1] // 2 % 8:
            raise ko.Refused("d must be a multiple of 8")
        oracle(x, out)

    kw = dict(shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert ko.check_act_and_mul(returns_out, **kw).ok
    assert ko.check_act_and_mul(takes_x_alone, **kw).ok
    r = ko.check_act_and_mul(in_place, **kw)
    assert not r.ok and "wrote its input(s): x" in r.failures[0]
    r = ko.check_act_and_mul(wrong_dtype, **kw)
    assert not r.ok and "float32" in r.failures[0]

    # float16 values where their bits are expected: told how to return them.
    def float16_values(x, out):
        oracle(x, out)
        return out.view(np.float16)

    r = ko.check_act_and_mul(float16_values, dtype="float16", **kw)
    assert not r.ok and "array of dtype float16" in r.failures[0] and "y.view(np.uint16)" in r.failures[0]
    r = ko.check_act_and_mul(refuses, **kw)
    assert r.refused == 1 and not r.ok
    r = ko.check_act_and_mul(refuses, shapes=[(2, 64)], arms=["RAND"], verbose=False)
    assert r.ok and r.refused == 0


def test_rows_name_the_declaration(capsys):
    r = ko.check_act_and_mul(numpy_act("gelu_quick", "f32"), activation="gelu_quick",
                             arithmetic="f32", shapes=SHAPES[:1], arms=["RAND", "TAILS"])
    out = capsys.readouterr().out
    assert r.ok and re.search(r"RAND 0x[0-9a-f]+ .* PASS  gelu_quick/f32/gate_first\n", out), out
    # Past |g| = 20 the GELUs are g or 0 alike: TAILS cannot tell them.
    assert re.search(r"TAILS 0x[0-9a-f]+ .* PASS  gelu/.*gelu_quick/f32/gate_first\n", out), out
    assert out.rstrip().endswith("PASS")
