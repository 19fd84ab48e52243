"""check_int8_group_quant on numpy per-token-group INT8 quantizers written
from the rules' definitions (vLLM's and SGLang's per_token_group_quant_int8:
fmaxf from eps, absmax / 127, clamp, a cast toward zero; the patched forms
that round to nearest; codes by the reciprocal; UE8M0 scales under either
ceiling) and on
planted bugs: each rule's implementation passes bit for bit under its own
declaration, in float32, bfloat16 and float16 input, and is named; each bug
is caught by the arm meant to catch it, with a rerun line that fails again
alone."""

import re

import numpy as np
import pytest

import kernel_oracle as ko
from numpy_reference import ue8m0_pow2

F = np.float32
# One group; a ragged k (a short last group of 75); two groups; eight
# groups with a short last one (CI's 2 cores: the default shapes run once,
# below).
SHAPES = [(1, 128), (5, 203), (3, 256), (4, 1000)]
DTYPES = ["float32", "bfloat16", "float16"]


def to_f32(x, dtype):
    """The kernel's exact conversion of its input to float32."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(F)
    if dtype == "float16":
        return x.view(np.float16).astype(F)
    return x


def convert(y, rounding):
    """int8_t(y) for y already clamped: toward zero (the C++ cast,
    .to(tl.int8), .to(torch.int8)), to nearest even (cvt.rni) or to nearest
    away (libdevice.round)."""
    if rounding == "trunc":
        r = np.trunc(y)
    elif rounding == "nearest_even":
        r = np.rint(y)
    else:
        t = np.trunc(y)
        r = np.where(np.abs(y - t) >= F(0.5), t + np.sign(y), t)
    return r.astype(np.int8)


def ue8m0(s, ceil=True):
    """2^ceil(log2f(max(s, 1e-10))) with numpy's float32 log2 (``ceil``
    True or "log2f"; numpy_reference.log2f), or with the exact ceiling
    (``ceil`` "exact": the bit form)."""
    return ue8m0_pow2(s, "exact" if ceil == "exact" else "log2f")


def group_quant(x, q, s, group_size=128, rounding="trunc", codes="divide", scale_ue8m0=False, eps=1e-10,
                dtype="bfloat16", bug=None):
    """Per-token-group int8 quantization in float32 numpy: x [m, k] ->
    codes q (int8) and scales s [m, groups]. ``bug`` plants one mistake;
    None computes the rule."""
    x = to_f32(x, dtype)
    m, k = x.shape
    groups = -(-k // group_size)
    scales = np.zeros((m, groups), F)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for g in range(groups):
            lo, hi = g * group_size, min(k, (g + 1) * group_size)
            xg = x[:, lo:hi]
            # The span the amax is taken over: one column too far, into
            # the next group (a boundary off by one).
            span = x[:, lo:min(k, hi + 1)] if bug == "boundary" else xg
            if bug == "drop-last" and hi - lo > 1:
                span = xg[:, :-1]  # an amax loop without its last element
            a = span if bug == "signed-max" else np.abs(span)
            if bug == "nan-propagates":
                a = np.max(a, axis=1)  # torch's amax: a NaN wins
                a = np.maximum(a, F(eps))
            else:
                a = np.fmax.reduce(a, axis=1, initial=F(0 if bug == "no-eps" else eps))  # fmaxf from eps
            amax = a.astype(F)
            if codes == "torch_divide":
                sc = amax * (F(1) / F(127))  # torch's absmax / 127.0 on CUDA
            else:
                sc = amax / (F(128) if bug == "scale-128" else F(127))
            if scale_ue8m0 and bug == "ue8m0-bumps-powers":
                # 2^(floor(log2 s) + 1): a power of two itself doubled.
                b = np.maximum(sc, F(1e-10)).astype(F).view(np.uint32).astype(np.int64)
                sc = np.exp2(((b >> 23) & 0xFF) - 126.0).astype(F)
            elif scale_ue8m0 and bug != "no-ue8m0":
                sc = ue8m0(sc, scale_ue8m0)
            scales[:, g] = sc
            use = scales[:, g - 1] if (bug == "previous-scale" and g > 0) else sc
            if codes == "reciprocal" or bug == "reciprocal":
                y = xg * (F(127) / amax)[:, None]
            else:
                y = xg / use[:, None]
            if bug == "nan-to-zero":
                # cvt.rzi.sat without the clamp's fmaxf: NaN gives 0.
                c = np.where(np.isnan(y), F(0), np.clip(y, -128, 127))
            else:
                c = np.fmin(np.fmax(y, F(-128)), F(127))  # fmaxf(NaN, -128) = -128
            rd = {"nearest": "nearest_even", "trunc": "trunc"}.get(bug, rounding)
            q[:, lo:hi] = convert(c, rd)
    s[...] = scales


def quantizer(bug=None, name=None, **form):
    def f(x, q, s):
        group_quant(x, q, s, bug=bug, **form)

    f.__name__ = name or (bug or label(form)).replace("-", "_").replace("/", "_")
    return f


def label(form):
    lab = form.get("rounding", "trunc")
    if form.get("codes") in ("reciprocal", "torch_divide"):
        lab += "/" + form["codes"]
    if form.get("scale_ue8m0"):
        lab += "/ue8m0_exact" if form["scale_ue8m0"] == "exact" else "/ue8m0"
    return lab


def check_kwargs(form):
    kw = {k: v for k, v in form.items() if k != "scale_ue8m0"}
    if form.get("scale_ue8m0"):
        kw["ue8m0"] = form["scale_ue8m0"]
    return kw


VLLM = dict(rounding="trunc")  # vLLM's and SGLang's CUDA and Triton kernels, torch's .to(int8)
FORMS = [
    VLLM,
    dict(rounding="nearest_even"),  # cvt.rni (vLLM's per-token int8 rounding)
    dict(rounding="nearest_away"),  # the libdevice.round patch
    dict(rounding="trunc", codes="reciprocal"),  # x * (127 / absmax)
    dict(rounding="trunc", codes="torch_divide"),  # torch: x / (absmax / 127.0)
    dict(rounding="trunc", scale_ue8m0=True),  # scale_ue8m0=True
    dict(rounding="nearest_away", scale_ue8m0=True),
    dict(rounding="trunc", scale_ue8m0="exact"),  # the exact ceiling (bit forms)
]
# The check's default arms (POW2 among them).
ARMS = 6


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", FORMS, ids=label)
def test_each_rule_passes_bit_for_bit_and_is_named(form, dtype, capsys):
    r = ko.check_int8_group_quant(quantizer(dtype=dtype, **form), shapes=SHAPES, dtype=dtype,
                                  **check_kwargs(form))
    assert r.ok and r.passed == r.cases == len(SHAPES) * ARMS, r.failures[:1]
    rows = [line for line in r.text.splitlines() if " PASS " in line]
    assert rows and all(re.search(rf"(  |, ){label(form)}(,|$)", line) for line in rows), rows[0]
    assert f"declared: {label(form)}" in r.text
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_the_default_shapes_pass_and_vllm_is_the_default_rule():
    r = ko.check_int8_group_quant(quantizer(), verbose=False)
    assert r.ok and r.cases == len(ko.INT8_GROUP_QUANT_SHAPES) * ARMS, r.failures[:1]
    assert "declared: trunc" in r.text and "input bfloat16" in r.text
    assert [tuple(s) for s in ko.INT8_GROUP_QUANT_SHAPES][:2] == [(1, 128), (5, 203)]


def test_other_group_sizes_and_eps_pass():
    for gs, eps in [(64, 1e-10), (7, 1e-4), (128, 0.0)]:
        fn = quantizer(group_size=gs, eps=eps, dtype="float32")
        r = ko.check_int8_group_quant(fn, group_size=gs, eps=eps, dtype="float32", shapes=SHAPES[:3],
                                      verbose=False)
        assert r.ok, (gs, eps, r.failures[:1])


def failing_arms(r):
    return {m.group(1) for m in re.finditer(r"arm=(\w+)", "\n".join(r.failures))}


def rerun_fails(r, fn):
    """The first rerun line, run alone, fails again; the case line gives
    the arrays."""
    ns = {"kernel_oracle": ko, fn.__name__: fn}
    again = eval(r.reproductions[0], ns)  # noqa: S307 (our own line)
    assert not again.ok and again.cases == 1
    case_line = re.search(r"kernel_oracle\.int8_group_quant_case\(.*\)", r.failures[0]).group(0)
    c = eval(case_line, ns)  # noqa: S307
    assert c["q"].dtype == np.int8 and c["s"].dtype == np.float32
    assert c["s"].shape[1] == -(-c["q"].shape[1] // 128)


MULTI = [s for s in SHAPES if -(-s[1] // 128) * s[0] >= 2]

# (bug, declared form, the arm that must catch it, the shapes it must fail
# on: every shape, or those with two groups or more)
BUGS = [
    ("nearest", VLLM, "TIES", SHAPES),  # rounds where the field's kernels truncate
    ("trunc", dict(rounding="nearest_even"), "TIES", SHAPES),  # truncates where nearest is declared
    ("trunc", dict(rounding="nearest_away"), "TIES", SHAPES),
    ("nearest", dict(rounding="nearest_away"), "TIES", SHAPES),  # ties to even where away is declared
    ("trunc", dict(rounding="nearest_even"), "SAT", MULTI),  # the amax coding 126
    ("no-eps", VLLM, "ZERO", SHAPES),  # amax from 0: a zero group's 0 / 0
    ("scale-128", VLLM, "SAT", SHAPES),  # -absmax codes -128
    ("boundary", VLLM, "AMAX", MULTI),  # one column into the next group
    ("previous-scale", VLLM, "AMAX", MULTI),  # codes by the previous group's scale
    ("signed-max", VLLM, "AMAX", SHAPES),  # max(x) for max|x|
    ("drop-last", VLLM, "AMAX", MULTI),  # the amax over all but the group's last element
    ("reciprocal", VLLM, "SAT", MULTI),  # x * (127 / absmax) declared divide
    ("no-ue8m0", dict(rounding="trunc", scale_ue8m0=True), "RAND", SHAPES),  # UE8M0 declared, not done
    # A ceiling that doubles an exact power of two: POW2's power groups
    # (t % 8 == 1, so two groups or more), in float32 and bfloat16 alike.
    ("ue8m0-bumps-powers", dict(rounding="trunc", scale_ue8m0=True), "POW2", MULTI),
    ("ue8m0-bumps-powers", dict(rounding="trunc", scale_ue8m0="exact"), "POW2", MULTI),
]


@pytest.mark.parametrize("bug,form,arm,shapes", BUGS, ids=lambda v: v if isinstance(v, str) else "")
def test_each_planted_bug_fails_on_its_arm(bug, form, arm, shapes):
    for dtype in ["float32", "bfloat16"]:
        fn = quantizer(bug=bug, dtype=dtype, **form)
        r = ko.check_int8_group_quant(fn, shapes=SHAPES, arms=[arm], verbose=False, dtype=dtype,
                                      **check_kwargs(form))
        assert not r.ok, f"{bug} {dtype}: passed on {arm}"
        assert r.failed >= len(shapes), (bug, dtype, r.failed)
        assert failing_arms(r) == {arm}
        rerun_fails(r, fn)


def test_torch_scalar_division_is_told_from_the_division_and_named():
    # torch's CUDA division by a Python scalar multiplies by fl(1/127).
    fn = quantizer(codes="torch_divide", name="torch_scalar")
    r = ko.check_int8_group_quant(fn, verbose=False)
    assert not r.ok and r.failed >= 3, r.text.splitlines()[-1]
    assert "the output matches: trunc/torch_divide" in r.failures[0], r.failures[0]
    assert ko.check_int8_group_quant(fn, codes="torch_divide", verbose=False).ok


def test_reciprocal_codes_part_from_division_on_ties_in_float32():
    fn = quantizer(bug="reciprocal", dtype="float32")
    r = ko.check_int8_group_quant(fn, dtype="float32", shapes=SHAPES, arms=["TIES"], verbose=False)
    assert r.failed >= len(MULTI), r.text
    assert all("the output matches: trunc/reciprocal" in f for f in r.failures), r.failures[0]


def test_identification_names_the_rounding_an_output_matches():
    r = ko.check_int8_group_quant(quantizer(bug="nearest"), shapes=[(8, 1000)], arms=["TIES"], verbose=False)
    assert "the output matches: nearest_even\n" in r.failures[0], r.failures[0]
    r = ko.check_int8_group_quant(quantizer(rounding="nearest_away"), shapes=[(8, 1000)], arms=["TIES"],
                                  verbose=False)
    assert "the output matches: nearest_away\n" in r.failures[0], r.failures[0]
    assert "known rules: trunc, trunc/reciprocal, trunc/torch_divide, nearest_even" in r.text


@pytest.mark.parametrize("form", [VLLM, dict(rounding="nearest_even", scale_ue8m0=True)], ids=label)
def test_nan_elements_are_skipped_by_the_maximum_and_code_minus_128(form):
    # I8G-NAN (arm NAN, only when named): vLLM's fmaxf skips a NaN and its
    # clamp codes it -128; a torch amax propagates the NaN into the scale,
    # and a conversion without the clamp codes it 0.
    kw = check_kwargs(form)
    for dtype in DTYPES:
        r = ko.check_int8_group_quant(quantizer(dtype=dtype, **form), arms=["NAN"], dtype=dtype, shapes=SHAPES,
                                      verbose=False, **kw)
        assert r, r.failures[:1]
    for bug in ["nan-propagates", "nan-to-zero"]:
        fn = quantizer(bug=bug, **form)
        r = ko.check_int8_group_quant(fn, arms=["NAN"], shapes=SHAPES, verbose=False, **kw)
        assert r.failed == len(SHAPES), (bug, r.failed)
        rerun_fails(r, fn)
        # Not a default arm: they pass every other.
        assert ko.check_int8_group_quant(fn, shapes=SHAPES[:2], verbose=False, **kw)


def test_a_quantizer_that_needs_whole_groups_refuses_the_ragged_shape():
    def whole_groups(x, q, s):
        if x.shape[1] % 128:
            raise ko.Refused("k must be a multiple of group_size (vLLM asserts it)")
        group_quant(x, q, s)

    r = ko.check_int8_group_quant(whole_groups, shapes=SHAPES, verbose=False)
    assert r.ok and r.refused == 2 * ARMS and r.passed == 2 * ARMS

    def short_tail_unwritten(x, q, s):
        # The last short group left as handed (a grid of k // 128 groups).
        full_q, full_s = np.empty_like(q), np.empty_like(s)
        group_quant(x, full_q, full_s)
        whole = x.shape[1] // 128
        q[:, :whole * 128], s[:, :whole] = full_q[:, :whole * 128], full_s[:, :whole]

    r = ko.check_int8_group_quant(short_tail_unwritten, shapes=[(5, 203)], arms=["RAND"], verbose=False)
    assert not r.ok and "codes: 375 of 1015 differ" in r.failures[0], r.failures[0]
    assert "first scale at (row 0, group 1)" in r.failures[0]


def test_returned_outputs_and_a_written_input():
    def returns(x, q, s):
        q2, s2 = np.empty_like(q), np.empty_like(s)
        group_quant(x, q2, s2)
        return q2, s2

    assert ko.check_int8_group_quant(returns, shapes=SHAPES[:2], verbose=False)

    def writes_x(x, q, s):
        group_quant(x, q, s)
        x[0, 0] = 0

    r = ko.check_int8_group_quant(writes_x, shapes=[(3, 256)], arms=["RAND"], verbose=False)
    assert not r.ok and "wrote its input" in r.failures[0]


def test_the_quantizer_function_is_the_oracle():
    for dtype in DTYPES:
        for form in FORMS:
            kw = check_kwargs(form)
            c = ko.int8_group_quant_case(5, 203, "TIES", dtype=dtype, **kw)
            q, s = ko.quantize_int8_group(c["x"], dtype=dtype, **kw)
            assert (q == c["q"]).all() and (s.view(np.uint32) == c["s"].view(np.uint32)).all()
            assert q.dtype == np.int8 and s.shape == (5, 2)
            q2, s2 = np.empty_like(q), np.empty_like(s)
            group_quant(c["x"], q2, s2, dtype=dtype, **form)
            assert (q2 == q).all() and (s2.view(np.uint32) == s.view(np.uint32)).all()
    # A zero group's scale is eps / 127 (I8G-ABSMAX); 11.5 / 0.25 = 46.
    q, s = ko.quantize_int8_group(np.array([[0.0, -0.0, 11.5, 31.75]], F), group_size=2)
    assert (q == [[0, 0, 46, 127]]).all()
    assert s[0, 0] == F(1e-10) / F(127) and s[0, 1] == F(0.25)
    q, s = ko.quantize_int8_group(np.array([[0.725, -0.725, 31.75]], F), rounding="nearest_even")
    assert (q == [[3, -3, 127]]).all()
    q, s = ko.quantize_int8_group(np.array([[0.725, -0.725, 31.75, np.nan]], F))
    assert (q == [[2, -2, 127, -128]]).all() and s[0, 0] == F(0.25)
    with pytest.raises(TypeError):
        ko.quantize_int8_group(np.ones((2, 3), np.float64))
    for g in [0, -3]:
        with pytest.raises(ValueError, match="group_size must be at least 1"):
            ko.quantize_int8_group(np.ones((2, 3), F), group_size=g)
        with pytest.raises(ValueError, match="group_size must be at least 1"):
            ko.int8_group_quant_case(2, 3, "RAND", group_size=g)
    # An eps float32 cannot hold is refused, not rounded to 0 or to inf.
    for eps in [1e-50, 1e40]:
        with pytest.raises(ValueError, match="float32"):
            ko.quantize_int8_group(np.ones((2, 3), F), eps=eps)


BAD = [
    dict(rounding="roundf"),
    dict(codes="multiply"),
    dict(codes="reciprocal", ue8m0=True),
    dict(codes="reciprocal", ue8m0="exact"),
    dict(ue8m0="floor"),
    dict(ue8m0=1),
    dict(dtype="int8"),
    dict(eps=float("nan")),
    dict(eps=-1.0),
    dict(eps=float("inf")),
    dict(eps=1e-50),
    dict(eps=1e40),
    dict(group_size=0),
    dict(group_size=-128),
    dict(arms=["TAIL"]),
    dict(shapes=[(0, 128)]),
    dict(shapes=[(1 << 14, 1 << 13)]),
    dict(trials=0),
    dict(seeds=[]),
]


@pytest.mark.parametrize("kw", BAD, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_bad_arguments_raise_before_any_call(kw):
    calls = []

    def f(x, q, s):
        calls.append(1)

    with pytest.raises(ValueError):
        ko.check_int8_group_quant(f, verbose=False, **kw)
    assert not calls


# ---------------------------------------------------------------------------
# UE8M0's two ceilings: ue8m0=True ("log2f": 2^ceil(log2f(s)), vLLM's CUDA
# kernel) against ue8m0="exact" (the bit forms), parted by POW2 alone, and
# only in float32.
# ---------------------------------------------------------------------------

def test_the_pow2_arm_parts_the_ceilings_on_half_its_groups_in_float32():
    c = ko.int8_group_quant_case(64, 4096, "POW2", ue8m0=True, dtype="float32")
    amax = np.abs(c["x"]).reshape(64, 32, 128).max(axis=2)
    # One amax serves both scale formulas: divide's and torch_divide's.
    assert np.array_equal(amax / F(127), amax * (F(1) / F(127)))
    sc = amax / F(127)
    parts = ue8m0(sc, "log2f") != ue8m0(sc, "exact")
    # Row-major group t parts where t % 4 is 0 or 2: half the groups.
    t = np.arange(64 * 32).reshape(64, 32)
    assert np.array_equal(parts, t % 2 == 0) and parts.mean() == 0.5
    assert np.array_equal(c["s"], ue8m0(amax / F(127), "log2f"))
    for dtype in ["bfloat16", "float16"]:
        c = ko.int8_group_quant_case(8, 1024, "POW2", ue8m0=True, dtype=dtype)
        amax = np.abs(to_f32(c["x"], dtype)).reshape(8, 8, 128).max(axis=2)
        sc = amax / F(127)
        assert np.array_equal(ue8m0(sc, "log2f"), ue8m0(sc, "exact")), dtype


@pytest.mark.parametrize("ceil,declared,named", [(True, "exact", "trunc/ue8m0"),
                                                 ("exact", True, "trunc/ue8m0_exact")])
def test_each_ceiling_fails_the_other_declaration_on_pow2_in_float32_alone(ceil, declared, named):
    own = dict(rounding="trunc", scale_ue8m0=ceil)
    for dtype in DTYPES:
        fn = quantizer(name=f"numpy_ue8m0_{ceil}_{dtype}", dtype=dtype, **own)
        assert ko.check_int8_group_quant(fn, shapes=SHAPES, dtype=dtype, verbose=False, **check_kwargs(own))
        r = ko.check_int8_group_quant(fn, shapes=SHAPES, dtype=dtype, ue8m0=declared, verbose=False)
        if dtype != "float32":
            # A 16-bit amax cannot put a scale 1 to 3 ulps above a power.
            assert r.ok, (dtype, r.failures[:1])
            continue
        assert r.failed == len(SHAPES) and failing_arms(r) == {"POW2"}, r.text
        for x in r.failures:
            assert f"the output matches: {named}\n" in x, x
            assert f"ue8m0={declared!r}".replace("'", '"') in x, x
        rerun_fails(r, fn)
