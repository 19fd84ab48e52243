"""check_rms_norm on numpy RMSNorms written from the rules (each declared
arithmetic, any summation order, bf16, f16 and f32, with and without the
fused add) and on planted bugs: each correct form passes and is named;
each bug fails under the default arms and shapes, with a rerun line that
fails again."""

import re
from fractions import Fraction

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
# A tail past 8, a model size, a row of one; CI's 2 cores.
SHAPES = [(5, 129), (3, 2048), (4, 1)]

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: v.astype(f32), lambda v: v.astype(f32)),
}


def sequential(sq):
    """Row sums, left to right in float32."""
    return np.add.accumulate(sq, axis=1, dtype=f32)[:, -1]


def reversed_order(sq):
    """Row sums, right to left in float32."""
    return sequential(sq[:, ::-1])


def fma_sequential(v):
    """Row sums of v * v left to right, each square fused into its add:
    `fl(v_j * v_j + acc)`, emulated in float64 (the square is exact
    there; the float64 add then the float32 rounding err by at most half a
    float32 ulp plus 2^-29 of one, a different neighbour from one fused
    rounding only at a float32 tie: far inside the bound's slack, and on
    the EXACT arm every sum is exact)."""
    acc = np.zeros(v.shape[0], np.float64)
    v64 = v.astype(np.float64)
    for j in range(v.shape[1]):
        acc = (v64[:, j] * v64[:, j] + acc).astype(f32).astype(np.float64)
    return acc.astype(f32)


def rsqrt_2_ulps(v, up):
    """The float32 value 2 ulps from 1/sqrt(v) at the extreme (v a positive
    float32): one above the upper float32 neighbour of 1/sqrt(v) (`up`), or
    one below the lower, the neighbours decided exactly (r^2 v against 1)."""
    fv = Fraction(float(v))
    r = f32(1 / np.sqrt(np.float64(v)))
    inf, zero = f32(np.inf), f32(0)
    while Fraction(float(r)) ** 2 * fv > 1:
        r = np.nextafter(r, zero)
    while Fraction(float(np.nextafter(r, inf))) ** 2 * fv <= 1:
        r = np.nextafter(r, inf)
    if up:
        above = r if Fraction(float(r)) ** 2 * fv == 1 else np.nextafter(r, inf)
        return np.nextafter(above, inf)
    return np.nextafter(r, zero)


def pairwise(sq):
    """Row sums by halves in float32 (a warp-shuffle tree), zero-padded."""
    w = 1 << (sq.shape[1] - 1).bit_length()
    a = np.zeros((sq.shape[0], w), f32)
    a[:, : sq.shape[1]] = sq
    while a.shape[1] > 1:
        h = a.shape[1] // 2
        a = a[:, :h] + a[:, h:]
    return a[:, 0]


def numpy_rms(arithmetic="round_then_weight", dtype="bfloat16", fused=False,
              sum_rounding="dtype", order=sequential, mean="divide", nudge=0,
              bug=None, name=None):
    """RMSNorm (or fused add + RMSNorm) in numpy float32 under one declared
    arithmetic, or with a bug. `order` sums the squares (`fma_sequential`
    takes the row itself); `nudge` 1 moves 1/sqrt one ulp, 2 takes the
    float32 values 2 ulps from the exact rsqrt, up and down by row."""
    enc, dec = CODECS[dtype]

    def R(v):
        return dec(enc(np.asarray(v, f32)))

    def norm(x, residual, weight, eps, out, residual_out):
        xv, w = dec(x), dec(weight)
        rows, n = xv.shape
        y = xv
        if fused:
            s = xv + dec(residual)
            res = R(s)
            y = res if sum_rounding == "dtype" else s
            if bug == "residual-not-written":
                residual_out[...] = residual
            elif bug == "residual-written-before-add":
                residual_out[...] = x
            else:
                residual_out[...] = enc(res)
        v = xv if bug == "variance-over-input" else y
        sq = v * v
        if bug == "tail-dropped-from-sum":
            sq = sq.copy()
            sq[:, n // 8 * 8:] = 0
        if bug == "element-dropped-on-long-rows" and n >= 7168:
            sq = sq.copy()
            sq[:, n // 2] = 0
        if bug == "sum-in-dtype":
            total = np.zeros(rows, f32)
            for j in range(n):
                total = R(total + R(sq[:, j]))
        elif order is fma_sequential:
            total = fma_sequential(v)
        else:
            total = order(sq)
        nn = n
        if bug == "mean-over-padded-hidden":
            nn = -(-n // 8) * 8
        if bug == "mean-over-n-minus-1-on-long-rows" and n >= 4096:
            nn = n - 1
        m = total / f32(nn) if mean == "divide" else total * (f32(1) / f32(nn))
        if bug == "short-row-first-element-only" and n < 4:
            m = sq[:, 0]
        e = f32(eps)
        if bug == "eps-outside-sqrt":
            r = f32(1) / (np.sqrt(m) + e)
        elif bug == "eps-added-to-sum":
            r = f32(1) / np.sqrt((total + e) / f32(nn))
        elif bug == "rsqrt-without-sqrt":
            r = f32(1) / (m + e)
        else:
            r = f32(1) / np.sqrt(m + e)
        if nudge == 2:
            # The extremes of an rsqrt within 2 ulps, up and down by row.
            r = np.array([rsqrt_2_ulps(vi, i % 2 == 0) for i, vi in enumerate(m + e)], f32)
        elif nudge:
            # An rsqrt off by one more ulp, up and down by row: admissible.
            r = np.where(np.arange(rows) % 2 == 0, np.nextafter(r, f32(np.inf)),
                         np.nextafter(r, f32(0))).astype(f32)
        if bug == "previous-row-r":
            r = np.concatenate([r[:1], r[:-1]])
        a = y * r[:, None]
        if bug == "weight-dropped-in-tail":
            w = w.copy()
            w[n // 8 * 8:] = f32(1)
        if arithmetic == "round_then_weight":
            o = R(R(a) * w)
        elif arithmetic == "f32":
            o = R(a * w)
        else:
            o = R(a * (f32(1) + w))
        if bug == "saturating-conversion":
            o = R(np.clip(a * w, f32(-65504), f32(65504)))
        if bug == "zero-weight-gives-positive-zero":
            o = np.where(w == 0, f32(0), o)
        out[...] = enc(o)

    if fused:
        def f(x, residual, weight, eps, out, residual_out):
            norm(x, residual, weight, eps, out, residual_out)
    else:
        def f(x, weight, eps, out):
            norm(x, None, weight, eps, out, None)
    f.__name__ = name or (bug or f"numpy_{arithmetic}").replace("-", "_")
    return f


def summary_names(r):
    return r.text.rsplit("every compared case admitted under: ", 1)[1].rsplit(";", 1)[0]


_BATTERIES = {}


def battery(fn, **kw):
    """The default battery's report on `fn` (a planted bug, named uniquely
    with its keywords), run once per session: the planted-bug tests and the
    per-arm test read the same reports (CI has 2 cores)."""
    key = (fn.__name__, tuple(sorted(kw.items())))
    if key not in _BATTERIES:
        _BATTERIES[key] = ko.check_rms_norm(fn, verbose=False, **kw)
    return _BATTERIES[key]


def failing(r, what):
    """The arms (`what="arm"`) or hidden sizes (`"hidden"`) of r's failures."""
    if what == "arm":
        return {re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}
    return {int(re.search(r"shapes=\[\((\d+), (\d+)\)\]", f).group(2)) for f in r.failures}


@pytest.mark.parametrize("arithmetic", ["round_then_weight", "f32", "gemma"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_numpy_forms_pass_and_are_named_alone(arithmetic, dtype):
    r = ko.check_rms_norm(numpy_rms(arithmetic, dtype), dtype=dtype, arithmetic=arithmetic,
                          shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == 3 * 5, r.text
    assert summary_names(r) == arithmetic, r.text


@pytest.mark.parametrize(
    "order,mean,dtype,arithmetic",
    [
        (sequential, "divide", "bfloat16", "round_then_weight"),
        (pairwise, "reciprocal", "bfloat16", "round_then_weight"),
        (reversed_order, "divide", "float16", "round_then_weight"),
        # Squares fused into the adds: float32 squares are not exact (bf16
        # and f16 squares are, and give the sequential sums).
        (fma_sequential, "reciprocal", "float32", "f32"),
    ],
)
def test_any_summation_order_and_mean_pass_on_the_default_shapes(order, mean, dtype,
                                                                  arithmetic):
    # The reduction order is free; so is torch's mean (a multiply by
    # fl(1/n)); so is an rsqrt 2 ulps off either way, on every arm, EXACT
    # (whose interval of r is a few ulps wide) included.
    fn = numpy_rms(arithmetic, dtype, order=order, mean=mean, nudge=2)
    r = ko.check_rms_norm(fn, dtype=dtype, arithmetic=arithmetic, verbose=False)
    assert r.ok and r.passed == r.cases == 11 * 5, r.text
    decided, total = map(int, re.search(r"bit for bit: (\d+) of (\d+)", r.text).groups())
    # Most bf16 outputs are decided, many f16 ones (3 more bits), few f32.
    assert decided > {"bfloat16": 0.9, "float16": 0.6, "float32": 0.0}[dtype] * total, r.text


def test_float32_output_is_mostly_bounded_and_names_both_forms():
    r = ko.check_rms_norm(numpy_rms("f32", "float32"), dtype="float32", arithmetic="f32",
                          shapes=SHAPES, verbose=False)
    assert r.ok, r.text
    # In float32 rounding before the weight is no rounding at all.
    assert summary_names(r) == "round_then_weight; f32"
    decided, total = map(int, re.search(r"bit for bit: (\d+) of (\d+)", r.text).groups())
    assert decided < 0.5 * total, r.text


@pytest.mark.parametrize("sum_rounding", ["dtype", "f32"])
@pytest.mark.parametrize("arithmetic", ["round_then_weight", "f32"])
def test_fused_add_forms_pass_and_the_sum_rounding_is_named(sum_rounding, arithmetic):
    fn = numpy_rms(arithmetic, fused=True, sum_rounding=sum_rounding, order=pairwise)
    r = ko.check_rms_norm(fn, arithmetic=arithmetic, fused_add=True, sum_rounding=sum_rounding,
                          shapes=SHAPES, verbose=False)
    assert r.ok and r.contract == "fused_add_rms_norm", r.text
    assert summary_names(r) == f"{arithmetic}/{sum_rounding}_sum", r.text


@pytest.mark.parametrize(
    "fn,kw",
    [
        (numpy_rms(bug="eps-outside-sqrt"), dict()),
        (numpy_rms(bug="eps-added-to-sum"), dict()),
        (numpy_rms(bug="mean-over-padded-hidden"), dict()),
        (numpy_rms(bug="sum-in-dtype"), dict()),
        (numpy_rms(bug="sum-in-dtype", dtype="float16"), dict(dtype="float16")),
        (numpy_rms("round_then_weight", name="rtw_declared_f32"), dict(arithmetic="f32")),
        (numpy_rms("f32", name="f32_declared_rtw"), dict(arithmetic="round_then_weight")),
        (numpy_rms("f32", name="gemma_without_one"), dict(arithmetic="gemma")),
        (numpy_rms(bug="weight-dropped-in-tail"), dict()),
        (numpy_rms(bug="tail-dropped-from-sum"), dict()),
        (numpy_rms(bug="previous-row-r"), dict()),
        (numpy_rms(bug="rsqrt-without-sqrt"), dict()),
        (numpy_rms(fused=True, bug="residual-not-written"), dict(fused_add=True)),
        (numpy_rms(fused=True, bug="residual-written-before-add"), dict(fused_add=True)),
        (numpy_rms(fused=True, bug="variance-over-input"), dict(fused_add=True)),
        (numpy_rms(fused=True, sum_rounding="f32", name="f32_sum_declared_dtype"),
         dict(fused_add=True)),
        # Slipped through before the EXACT arm (the general bound spans them).
        (numpy_rms(bug="mean-over-n-minus-1-on-long-rows"), dict()),
        (numpy_rms(bug="element-dropped-on-long-rows"), dict()),
        (numpy_rms(fused=True, bug="element-dropped-on-long-rows"), dict(fused_add=True)),
        # Slipped through before f16 weights up to 65504 and signed zero weights.
        (numpy_rms("f32", "float16", bug="saturating-conversion"),
         dict(dtype="float16", arithmetic="f32")),
        (numpy_rms(bug="zero-weight-gives-positive-zero"), dict()),
        # Slipped through before hidden 3 (a row of one hides it).
        (numpy_rms(bug="short-row-first-element-only"), dict()),
    ],
)
def test_planted_bugs_fail_under_the_default_arms_and_shapes(fn, kw):
    r = battery(fn, **kw)
    assert not r.ok and r.failed >= 1, r.text
    fail = r.failures[0]
    assert "FAIL " in fail and "reproduce:" in fail and "rms_norm_case(" in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\((\d+), (\d+)\)\]", fail).groups())
    arm = re.search(r'arms=\["(\w+)"\]', fail).group(1)
    again = ko.check_rms_norm(fn, shapes=[dims], arms=[arm], seeds=[seed], verbose=False, **kw)
    assert not again.ok


def test_each_bug_is_caught_by_the_arm_meant_for_it():
    def arms(bug, **kw):
        return failing(battery(bug, **kw), "arm")

    assert "SMALL" in arms(numpy_rms(bug="eps-outside-sqrt"))
    f16 = arms(numpy_rms(bug="sum-in-dtype", dtype="float16"), dtype="float16")
    assert {"LARGE", "SPIKE"} <= f16, f16
    # One element in 4097 is lost in the sum: the spike in the last place shows it.
    assert "SPIKE" in arms(numpy_rms(bug="tail-dropped-from-sum"))
    r = battery(numpy_rms(bug="weight-dropped-in-tail"))
    # Only the hidden sizes that are not multiples of 8 show it.
    assert failing(r, "hidden") == {7, 129, 4097, 5123, 1, 3}, failing(r, "hidden")
    assert "past the last whole vector of 8" in r.failures[0]
    # Long-row sum bugs: EXACT's few-ulp interval of r shows them (RAND's
    # general bound spans most drops: only a dropped element several times
    # the row's typical square shows there; LARGE's heaviest elements may
    # show a drop too).
    dropped = arms(numpy_rms(bug="element-dropped-on-long-rows"))
    assert "EXACT" in dropped, dropped
    assert "EXACT" in arms(numpy_rms(bug="mean-over-n-minus-1-on-long-rows"))
    # f16 overflow: LARGE and SPIKE, whose large weights make infinities.
    sat = arms(numpy_rms("f32", "float16", bug="saturating-conversion"),
               dtype="float16", arithmetic="f32")
    assert sat and sat <= {"LARGE", "SPIKE"}, sat
    # A short-row path right only at hidden 1: hidden 3 shows it.
    assert failing(battery(numpy_rms(bug="short-row-first-element-only")), "hidden") == {3}


def test_a_fused_add_that_overflows_is_named():
    # f16: 40000 + 30000 is infinite as normalized; the oracle names the
    # add, not the sum of squares.
    x = ko.encode_f16(np.array([[1, 40000, 1]], f32))
    res = ko.encode_f16(np.array([[1, 30000, 1]], f32))
    w = ko.encode_f16(np.ones(3, f32))
    with pytest.raises(ValueError, match=r"row 0, col 1: the fused add's x \+ residual overflows"):
        ko.rms_norm(x, w, 1e-6, residual=res, dtype="float16")
    # Its float32 sum is finite: normalized, and the residual output inf.
    lo, hi, out = ko.rms_norm(x, w, 1e-6, residual=res, dtype="float16", sum_rounding="f32")
    assert ko.decode_f16(out)[0, 1] == np.inf


def test_a_wrong_residual_is_reported_as_such():
    r = ko.check_rms_norm(numpy_rms(fused=True, bug="residual-not-written"), fused_add=True,
                          shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert "residual_out:" in r.failures[0] and "R(x + residual)" in r.failures[0]


def test_the_case_holds_the_oracles_intervals():
    c = ko.rms_norm_case(5, 129, "SMALL", fused_add=True, arithmetic="gemma", eps=1e-5)
    assert c["x"].dtype == np.uint16 and c["inv_rms_lo"].shape == (5,)
    assert c["eps"] == float(f32(1e-5))
    lo, hi, res = ko.rms_norm(c["x"], c["weight"], 1e-5, residual=c["residual"],
                              arithmetic="gemma")
    assert (lo == c["out_lo"]).all() and (hi == c["out_hi"]).all()
    assert (res == c["residual_out"]).all()
    assert (c["inv_rms_lo"] <= c["inv_rms_hi"]).all()
    # An all-zero row normalizes to signed zeros: r = 1/sqrt(eps).
    zero = ~c["x"].any(axis=1)
    assert zero.any()
    lo2, hi2 = ko.rms_norm(c["x"], c["weight"], 1e-5)
    assert lo2.shape == (5, 129)
    with pytest.raises(TypeError, match="uint16"):
        ko.rms_norm(c["x"].astype(f32), c["weight"], 1e-5)
    with pytest.raises(ValueError, match="hidden"):
        ko.rms_norm(c["x"], c["weight"][:-1], 1e-5)
    with pytest.raises(ValueError, match="eps"):
        ko.rms_norm(c["x"], c["weight"], 0.0)
    bad = c["x"].copy()
    bad[0, 0] = 0x7FC0
    with pytest.raises(ValueError, match="not finite"):
        ko.rms_norm(bad, c["weight"], 1e-5)


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(arithmetic="llama"),
        dict(dtype="float64"),
        dict(sum_rounding="bf16"),
        dict(sum_rounding="f32"),  # without fused_add: no sum to round
        dict(eps=0.0),
        dict(eps=1e-50),
        dict(rsqrt_ulps=0),
        dict(arms=["NOPE"]),
        dict(shapes=[(0, 128)]),
        dict(shapes=[(1 << 12, 1 << 11)]),
        dict(shapes=[(1, 1 << 18)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_rms_norm(fn, verbose=False, **kw)
    assert not calls
    # An eps float32 cannot hold is named as given, beside what it became.
    for eps, said in [(1e-50, "1e-50 rounds to 0e0"), (1e300, "1e300 rounds to inf")]:
        with pytest.raises(ValueError, match=f"the declared eps {said} in float32"):
            ko.check_rms_norm(fn, eps=eps, verbose=False)
    # Only an error about eps names it: the default 1e-6 is not a float32
    # either, and a bad rsqrt_ulps is not about eps.
    with pytest.raises(ValueError) as bad_ulps:
        ko.check_rms_norm(fn, rsqrt_ulps=0, verbose=False)
    assert "eps" not in str(bad_ulps.value)


def test_wrong_returns_writes_and_refusals():
    oracle = numpy_rms()

    def returns_out(x, weight, eps, out):
        oracle(x, weight, eps, out)
        return out.copy()

    def in_place(x, weight, eps, out):
        oracle(x, weight, eps, out)
        x[...] = out

    def wrong_dtype(x, weight, eps, out):
        oracle(x, weight, eps, out)
        return out.astype(f32)

    def refuses(x, weight, eps, out):
        if x.shape[1] % 8:
            raise ko.Refused("hidden must be a multiple of 8")
        oracle(x, weight, eps, out)

    def eps_is_float32(x, weight, eps, out):
        assert isinstance(eps, float) and f32(eps) == eps == float(f32(1e-6))
        oracle(x, weight, eps, out)

    kw = dict(shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert ko.check_rms_norm(returns_out, **kw).ok
    assert ko.check_rms_norm(eps_is_float32, **kw).ok
    r = ko.check_rms_norm(in_place, **kw)
    assert not r.ok and "wrote its input(s): x" in r.failures[0]
    r = ko.check_rms_norm(wrong_dtype, **kw)
    assert not r.ok and "float32" in r.failures[0]
    r = ko.check_rms_norm(refuses, **kw)
    assert r.refused == 1 and not r.ok
    r = ko.check_rms_norm(refuses, shapes=[(2, 64)], arms=["RAND"], verbose=False)
    assert r.ok and r.refused == 0


def test_a_kernel_that_returns_its_outputs_takes_the_inputs_alone():
    oracle, fused = numpy_rms(), numpy_rms(fused=True)

    def kernel(x, weight, eps):
        out = np.empty(x.shape, x.dtype)
        oracle(x, weight, eps, out)
        return out

    def fused_kernel(x, residual, weight, eps):
        out, res = np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)
        fused(x, residual, weight, eps, out, res)
        return out, res

    def forgets_to_return(x, weight, eps):
        oracle(x, weight, eps, np.empty(x.shape, x.dtype))

    kw = dict(shapes=SHAPES[:2], verbose=False)
    assert ko.check_rms_norm(kernel, **kw).ok
    assert ko.check_rms_norm(lambda *a: kernel(*a[:3]), **kw).ok
    assert ko.check_rms_norm(fused_kernel, fused_add=True, **kw).ok
    r = ko.check_rms_norm(forgets_to_return, **kw)
    assert not r.ok and "not admitted" in r.failures[0]


def test_rows_name_the_arithmetic(capsys):
    r = ko.check_rms_norm(numpy_rms("gemma"), arithmetic="gemma", shapes=SHAPES[:1],
                          arms=["RAND"])
    out = capsys.readouterr().out
    assert r.ok and re.search(r"RAND 0x[0-9a-f]+ .* PASS  gemma\n", out), out
    assert out.rstrip().endswith("PASS")


def torch_welford_rms_norm(x, weight, eps, out):
    """torch's CUDA `_fused_rms_norm` off its vectorized path (hidden not a
    multiple of 4): `RowwiseMomentsCUDAKernel`'s Welford update per thread
    (512 threads, strided), Welford combines by halves, `rsqrt(m2 / n + m1
    * m1 + eps)`, then `(x * rstd) * gamma` in float32, cast once."""
    y, w = ko.decode_bf16(x), ko.decode_bf16(weight)
    rows, n = y.shape
    t = 512
    mean, m2, cnt = (np.zeros((rows, t), f32) for _ in range(3))
    for k in range(-(-n // t)):
        idx = np.arange(t) + k * t
        ok = idx < n
        d = np.zeros((rows, t), f32)
        d[:, ok] = y[:, idx[ok]]
        cnt = cnt + ok.astype(f32)
        delta = d - mean
        new_mean = np.where(ok, mean + delta / np.maximum(cnt, f32(1)), mean).astype(f32)
        m2 = np.where(ok, m2 + delta * (d - new_mean), m2).astype(f32)
        mean = new_mean
    while mean.shape[1] > 1:
        h = mean.shape[1] // 2
        (am, bm), (a2, b2), (an, bn) = ((v[:, :h], v[:, h:]) for v in (mean, m2, cnt))
        new = an + bn
        nb = np.where(new > 0, bn / np.maximum(new, f32(1)), f32(0)).astype(f32)
        delta = bm - am
        mean = np.where(an == 0, bm, np.where(bn == 0, am, am + delta * nb)).astype(f32)
        m2 = np.where(an == 0, b2, np.where(bn == 0, a2, a2 + b2 + delta * delta * an * nb))
        m2, cnt = m2.astype(f32), new
    var = m2[:, 0] / cnt[:, 0]
    r = f32(1) / np.sqrt(var + mean[:, 0] * mean[:, 0] + f32(eps))
    out[...] = ko.encode_bf16((y * r[:, None]) * w)


def test_torchs_welford_path_lands_inside_the_bound():
    # Outside the derivation (not a sum of squares), inside the intervals:
    # its error is of the same order as a sum's.
    r = ko.check_rms_norm(torch_welford_rms_norm, arithmetic="f32", trials=3, verbose=False,
                          shapes=[(9, 7), (5, 129), (3, 4097), (2, 5123), (6, 1), (7, 1030)])
    assert r.ok and r.passed == 6 * 5 * 3, r.text
