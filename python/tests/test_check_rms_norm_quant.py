"""check_rms_norm_fp8_quant on numpy forms of a fused RMSNorm + e4m3
quantization written from the rules (the unfused path, `rms_norm`
rounded to bf16 then the quantizer, as vLLM's fused kernels also compute
it; a fused form that quantizes the float32 product, as FlashInfer's
`rmsnorm_quant` does; static and dynamic per-token scales; the fused add
with its residual written back in place) and on planted bugs: each form
passes its declaration and is named by it, each is caught declared as the
other on TIES, and each bug is caught on the arm aimed at it, with a
rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

F = np.float32
MIN = F(ko.MIN_SCALING_FACTOR)
# A tail past 4 and 8, a model size, two rows of 4096 (CI's 2 cores).
SHAPES = [(5, 129), (3, 2048), (2, 4096)]
SCALE_UB = 2.5

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: v.astype(F), lambda v: v.astype(F)),
}


def vllm_clamp(v):
    """CUDA's fmax(-448, fmin(v, 448)) (vLLM's float_to_fp8)."""
    return np.fmax(F(-448), np.fmin(v, F(448))).astype(F)


def norm_quant(arithmetic="round_then_weight", quantize_input="rounded", rule="divide",
               granularity="tensor", static=True, residual=False, sum_rounding="dtype",
               scale_ub=None, dtype="bfloat16", bug=None, name=None):
    """RMSNorm (with `residual`, the fused add first) then e4m3
    quantization in numpy float32, as declared, or with a bug. The squares
    summed left to right, the mean divided, `1 / sqrt` correctly rounded
    (inside the check's model); the codes through vLLM's clamp."""
    enc, dec = CODECS[dtype]

    def R(v):
        return dec(enc(np.asarray(v, F)))

    def body(x, res, weight, scale, eps, q, s):
        xv, w = dec(x), dec(weight)
        y = xv
        if residual:
            total = xv + dec(res)
            rounded = R(total)
            y = rounded if sum_rounding == "dtype" else total
            if bug == "residual-written-before-rounding":
                # The float32 sum stored without its rounding: the top 16
                # bits of its pattern (truncation).
                res[...] = (total.view(np.uint32) >> 16).astype(np.uint16)
            elif bug != "residual-not-written":
                res[...] = enc(rounded)
        sq = y * y
        n = y.shape[1]
        nn = n - 1 if bug == "mean-over-n-minus-1-on-long-rows" and n >= 4096 else n
        mean = np.add.accumulate(sq, axis=1, dtype=F)[:, -1] / F(nn)
        e = F(eps)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if bug == "eps-outside-sqrt":
                r = F(1) / (np.sqrt(mean) + e)
            else:
                r = F(1) / np.sqrt(mean + e)
            a = y * r[:, None]
            if bug == "weight-skipped":
                w = np.ones_like(w)
            if arithmetic == "round_then_weight":
                v32 = R(a) * w
            elif arithmetic == "f32":
                v32 = a * w
            else:
                v32 = a * (F(1) + w)
            v_rounded = R(v32)
            v = v_rounded if quantize_input == "rounded" else v32
            if static:
                sc = np.full((1, 1), scale[0], F)
            else:
                src = v
                if bug == "amax-over-input":
                    src = xv
                elif bug == "amax-over-rounded":
                    src = v_rounded
                a_ = src if bug == "signed-amax" else np.abs(src)
                if granularity == "token":
                    # A reduction started at column 1, or ended before the
                    # last (a loop's head or tail dropped).
                    a_ = a_[:, 1:] if bug == "amax-skips-first" and a_.shape[1] > 1 else a_
                    a_ = a_[:, :-1] if bug == "amax-skips-last" and a_.shape[1] > 1 else a_
                    amax = np.fmax.reduce(a_, axis=1, keepdims=True)
                else:
                    flat = a_.reshape(-1)
                    flat = flat[1:] if bug == "amax-skips-first" and flat.size > 1 else flat
                    flat = flat[:-1] if bug == "amax-skips-last" and flat.size > 1 else flat
                    amax = np.fmax.reduce(flat).reshape(1, 1)
                if scale_ub is not None and bug != "scale-ub-ignored":
                    amax = np.minimum(amax, F(scale_ub))
                if rule.startswith("torch_"):
                    s0 = amax * (F(1) / F(448))
                else:
                    s0 = amax / F(448)
                sc = (s0 if bug == "floor-missing" else np.maximum(s0, MIN)).astype(F)
                s[...] = sc.reshape(s.shape)
            divide = rule in ("divide", "torch_divide")
            if bug in ("multiply-for-divide", "divide-for-multiply"):
                divide = not divide
            c = v / sc if divide else v * (F(1) / sc)
            if bug == "no-clamp":
                # torch's `.to(float8_e4m3fn)`: NaN at and beyond 464.
                q[...] = ko.encode_e4m3(np.asarray(c, F), ko.Overflow.NON_SATURATING)
            else:
                q[...] = ko.encode_e4m3(vllm_clamp(c))

    if static and residual:
        def f(x, residual_, weight, scale, eps, q):
            body(x, residual_, weight, scale, eps, q, None)
    elif static:
        def f(x, weight, scale, eps, q):
            body(x, None, weight, scale, eps, q, None)
    elif residual:
        def f(x, residual_, weight, eps, q, s):
            body(x, residual_, weight, None, eps, q, s)
    else:
        def f(x, weight, eps, q, s):
            body(x, None, weight, None, eps, q, s)
    f.__name__ = name or (bug or f"numpy_{quantize_input}_{rule}").replace("-", "_")
    return f


def summary(r):
    """The declarations every compared case admitted."""
    return r.text.rsplit("every compared case admitted under: ", 1)[1].rsplit(";", 1)[0].strip()


def failing_arms(r):
    return {re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}


# The unfused path (vLLM's fused kernels compute the same): rounded, under
# vLLM's static rule (reciprocal) and its dynamic per-token one (divide).
UNFUSED_STATIC = dict(arithmetic="round_then_weight", quantize_input="rounded", rule="reciprocal")
UNFUSED_TOKEN = dict(arithmetic="round_then_weight", quantize_input="rounded", rule="divide",
                     granularity="token", static=False)
# A fused form that quantizes the float32 product (FlashInfer's order).
FUSED_STATIC = dict(arithmetic="f32", quantize_input="f32", rule="reciprocal")
FUSED_TOKEN = dict(arithmetic="f32", quantize_input="f32", rule="divide", granularity="token",
                   static=False)
# A dynamic scale per tensor (an unfused rms_norm, then a per-tensor
# quantizer), over the check's default shapes: AMAX puts the tensor's one
# amax element first, last or inside, a third of the cases each.
TENSOR_DYNAMIC = dict(UNFUSED_TOKEN, granularity="tensor", shapes=None)

_RUNS = {}


def run(fn, **kw):
    """The check's report on `fn` with `kw` (the shapes above unless
    given), once per session."""
    kw.setdefault("shapes", SHAPES)
    key = (fn.__name__, repr(sorted(kw.items())))
    if key not in _RUNS:
        _RUNS[key] = ko.check_rms_norm_fp8_quant(fn, verbose=False, **kw)
    return _RUNS[key]


def form_kw(decl):
    """The keywords of norm_quant for a declaration's keywords."""
    return {k: v for k, v in decl.items() if k in (
        "arithmetic", "quantize_input", "rule", "granularity", "static", "residual",
        "sum_rounding", "scale_ub")}


@pytest.mark.parametrize("decl,label", [
    (UNFUSED_STATIC, "rounded/reciprocal"),
    (UNFUSED_TOKEN, "rounded/divide"),
    (FUSED_STATIC, "f32/reciprocal"),
    (FUSED_TOKEN, "f32/divide"),
])
def test_each_form_passes_its_declaration_and_is_named(decl, label):
    r = run(norm_quant(**form_kw(decl), name=f"form_{label.replace('/', '_')}"), **decl)
    assert r.ok, r.text
    names = summary(r).split("; ")
    assert label in names, summary(r)
    # Read the other way (rounded for f32, f32 for rounded), it is not.
    other = label.replace("rounded", "X").replace("f32", "rounded").replace("X", "f32")
    assert other not in names, summary(r)
    assert "decided elements checked bit for bit" in r.text


@pytest.mark.parametrize("decl,swapped", [
    (UNFUSED_STATIC, "f32"), (UNFUSED_TOKEN, "f32"), (FUSED_STATIC, "rounded"), (FUSED_TOKEN, "rounded"),
])
def test_each_form_declared_as_the_other_is_caught_on_ties(decl, swapped):
    fn = norm_quant(**form_kw(decl), name="form_" + decl["quantize_input"])
    r = run(fn, **dict(decl, quantize_input=swapped), arms=["TIES"])
    assert not r.ok and r.failed > 0
    assert failing_arms(r) == {"TIES"}


def test_the_readings_part_off_the_ties_too():
    # Rounding the value to bf16 moves about one code in a hundred across
    # an e4m3 midpoint on RAND (and, dynamic, the scale by up to half a
    # bf16 ulp): TIES is where they part densely, not alone.
    for decl in (UNFUSED_STATIC, UNFUSED_TOKEN):
        fn = norm_quant(**form_kw(decl), name="unfused_" + decl["rule"])
        r = run(fn, **dict(decl, quantize_input="f32"), arms=["RAND", "TIES"])
        assert failing_arms(r) == {"RAND", "TIES"}
        if decl is UNFUSED_TOKEN:
            assert any("  s: " in f for f in r.failures)


def test_the_fused_add_forms_pass_with_the_residual_written_in_place():
    # vLLM's static fused add rounds the sum before normalizing it; its
    # dynamic per-token kernel normalizes the float32 sum.
    for decl in [dict(UNFUSED_STATIC, residual=True, sum_rounding="dtype"),
                 dict(UNFUSED_TOKEN, residual=True, sum_rounding="f32")]:
        fn = norm_quant(**form_kw(decl), name=f"fused_add_{decl['sum_rounding']}")
        r = run(fn, **decl)
        assert r.ok, r.text
        assert "RESIDUAL" in r.text
        # The other sum rounding is caught.
        other = "f32" if decl["sum_rounding"] == "dtype" else "dtype"
        r2 = run(fn, **dict(decl, sum_rounding=other))
        assert not r2.ok


def test_a_scale_ub_form_passes_and_the_bound_decides():
    decl = dict(UNFUSED_TOKEN, scale_ub=SCALE_UB)
    r = run(norm_quant(**form_kw(decl), name="ub_form"), **decl)
    assert r.ok, r.text
    assert " UB " in r.text


BUGS = [
    # (bug, declaration, the arm that must catch it)
    ("multiply-for-divide", UNFUSED_TOKEN, "TIES"),
    ("divide-for-multiply", UNFUSED_STATIC, "TIES"),
    ("amax-over-input", UNFUSED_TOKEN, "RAND"),
    ("amax-over-input", FUSED_TOKEN, "RAND"),
    ("amax-over-rounded", FUSED_TOKEN, "RAND"),
    ("residual-not-written", dict(UNFUSED_STATIC, residual=True), "RAND"),
    ("residual-written-before-rounding", dict(UNFUSED_TOKEN, residual=True, sum_rounding="f32"),
     "RESIDUAL"),
    ("weight-skipped", UNFUSED_STATIC, "RAND"),
    ("weight-skipped", FUSED_TOKEN, "RAND"),
    ("eps-outside-sqrt", UNFUSED_TOKEN, "ZERO"),
    ("eps-outside-sqrt", FUSED_STATIC, "ZERO"),
    ("no-clamp", UNFUSED_STATIC, "AMAX"),
    ("no-clamp", FUSED_STATIC, "AMAX"),
    ("scale-ub-ignored", dict(UNFUSED_TOKEN, scale_ub=SCALE_UB), "UB"),
    ("scale-ub-ignored", dict(FUSED_TOKEN, scale_ub=SCALE_UB), "UB"),
    ("floor-missing", UNFUSED_TOKEN, "ZERO"),
    ("floor-missing", FUSED_TOKEN, "ZERO"),
    ("signed-amax", UNFUSED_TOKEN, "AMAX"),
    ("amax-skips-first", UNFUSED_TOKEN, "AMAX"),
    ("amax-skips-last", FUSED_TOKEN, "AMAX"),
    ("amax-skips-first", TENSOR_DYNAMIC, "AMAX"),
    ("amax-skips-last", TENSOR_DYNAMIC, "AMAX"),
    ("mean-over-n-minus-1-on-long-rows", FUSED_TOKEN, "EXACT"),
]


@pytest.mark.parametrize("bug,decl,arm", BUGS, ids=[
    f"{b}-{d['quantize_input']}-{d.get('granularity', 'tensor')}" for b, d, _ in BUGS])
def test_planted_bug_is_caught_on_its_arm_with_a_rerun_line(bug, decl, arm):
    fn = norm_quant(**form_kw(decl), bug=bug)
    r = run(fn, **decl)
    assert not r.ok, f"{bug} passed:\n{r.text}"
    assert arm in failing_arms(r), (bug, failing_arms(r))
    # The first failure's line reruns it and fails again.
    line = next(p for p in r.reproductions if f'arms=["{arm}"]' in p)
    again = eval(line, {"kernel_oracle": ko, fn.__name__: fn})
    assert not again.ok and again.cases == 1
    failure = next(f for f in r.failures if f'arms=["{arm}"]' in f)
    assert "kernel_oracle.rms_norm_fp8_quant_case(" in failure


def test_the_swap_is_not_decidable_in_f32_under_the_f32_arithmetic():
    # Read in float32 under the f32 arithmetic a value is a few binary32
    # ulps wide, the two rules an ulp apart: documented as not decidable.
    fn = norm_quant(**form_kw(FUSED_TOKEN), bug="multiply-for-divide", name="f32_swap")
    assert run(fn, **FUSED_TOKEN, arms=["TIES"]).ok


def test_the_case_function_and_the_oracle_agree_with_the_check():
    kw = dict(UNFUSED_STATIC)
    c = ko.rms_norm_fp8_quant_case(5, 129, "TIES", **kw)
    assert c["x"].dtype == np.uint16 and c["scale"].shape == (1,)
    w = ko.rms_norm_fp8_quant(c["x"], c["weight"], c["eps"], scale=float(c["scale"][0]),
                              arithmetic="round_then_weight", quantize_input="rounded",
                              rule="reciprocal")
    for k in ("code_lo", "code_hi", "v_lo", "v_hi", "scale_lo", "scale_hi"):
        assert np.array_equal(w[k], c[k]), k
    # The numpy form's codes lie in the sets, most of them decided.
    q = np.full((5, 129), 0x7F, np.uint8)
    norm_quant(**form_kw(kw))(c["x"], c["weight"], c["scale"], c["eps"], q)
    decided = c["code_lo"] == c["code_hi"]
    assert decided.mean() > 0.9
    assert np.array_equal(q[decided], c["code_lo"][decided])
    # Dynamic per token: the scales [rows, 1], the residual written back.
    kw = dict(UNFUSED_TOKEN, residual=True, sum_rounding="f32")
    c = ko.rms_norm_fp8_quant_case(4, 64, "RESIDUAL", **kw)
    assert c["scale"] is None and c["scale_lo"].shape == (4, 1)
    res = c["residual"].copy()
    q, s = np.zeros((4, 64), np.uint8), np.zeros((4, 1), F)
    norm_quant(**form_kw(kw))(c["x"], res, c["weight"], c["eps"], q, s)
    assert np.array_equal(res, c["residual_out"])
    w = ko.rms_norm_fp8_quant(c["x"], c["weight"], c["eps"], residual=c["residual"],
                              granularity="token", rule="divide", sum_rounding="f32")
    for k in ("code_lo", "code_hi", "scale_lo", "scale_hi", "residual_out"):
        assert np.array_equal(w[k], c[k]), k
    with pytest.raises(ValueError, match="scale"):
        ko.rms_norm_fp8_quant(c["x"], c["weight"], c["eps"], scale=-1.0)
    assert np.array_equal(s, c["scale_lo"]) or (c["scale_lo"] <= s).all() and (s <= c["scale_hi"]).all()


def test_inputs_written_and_unwritten_outputs_fail():
    def writes_x(x, weight, scale, eps, q):
        norm_quant(**form_kw(UNFUSED_STATIC))(x, weight, scale, eps, q)
        x[0, 0] ^= 1

    r = ko.check_rms_norm_fp8_quant(writes_x, **UNFUSED_STATIC, shapes=[(2, 64)], arms=["RAND"],
                                    verbose=False)
    assert not r.ok and "wrote its input(s): x" in r.failures[0]

    def skips_last(x, weight, eps, q, s):
        norm_quant(**form_kw(UNFUSED_TOKEN))(x, weight, eps, q, s)
        q[:, -1] = 0x7F

    r = ko.check_rms_norm_fp8_quant(skips_last, **UNFUSED_TOKEN, shapes=[(2, 129)], arms=["RAND"],
                                    verbose=False)
    assert not r.ok and "past the last whole vector of 4" in r.failures[0]


@pytest.mark.parametrize("kw,match", [
    (dict(granularity="token"), "per tensor"),
    (dict(rule="torch_divide"), "derives its own scale"),
    (dict(scale_ub=2.0), "static=True takes none"),
    (dict(static=False, scale_ub=2.0), "per token"),
    (dict(static=False, granularity="token", scale_ub=-1.0), "finite and positive"),
    (dict(static=False, min_scale=-1.0), "min_scale"),
    (dict(quantize_input="bf16"), "quantize_input"),
    (dict(rule="nearest"), "rule"),
    (dict(arms=["UB"]), "scale_ub"),
    (dict(arms=["RESIDUAL"]), "residual=True"),
    (dict(arms=["SPIKE"]), "arm"),
    (dict(shapes=[(1, 1 << 18)]), "hidden"),
    (dict(eps=0.0), "eps"),
])
def test_bad_arguments_are_refused_before_any_call(kw, match):
    calls = []

    def f(*args):
        calls.append(1)

    with pytest.raises(ValueError, match=match):
        ko.check_rms_norm_fp8_quant(f, verbose=False, **kw)
    assert not calls
