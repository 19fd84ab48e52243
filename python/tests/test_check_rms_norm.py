"""check_rms_norm on numpy RMSNorms written from the rules (each declared
arithmetic, any summation order, bf16, f16 and f32, with and without the
fused add) and on planted bugs: each correct form passes and is named;
each bug fails under the default arms and shapes, with a rerun line that
fails again."""

import re

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
              sum_rounding="dtype", order=sequential, mean="divide", nudge=False,
              bug=None, name=None):
    """RMSNorm (or fused add + RMSNorm) in numpy float32 under one declared
    arithmetic, or with a bug."""
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
        if bug == "sum-in-dtype":
            total = np.zeros(rows, f32)
            for j in range(n):
                total = R(total + R(sq[:, j]))
        else:
            total = order(sq)
        nn = -(-n // 8) * 8 if bug == "mean-over-padded-hidden" else n
        m = total / f32(nn) if mean == "divide" else total * (f32(1) / f32(nn))
        e = f32(eps)
        if bug == "eps-outside-sqrt":
            r = f32(1) / (np.sqrt(m) + e)
        elif bug == "eps-added-to-sum":
            r = f32(1) / np.sqrt((total + e) / f32(nn))
        elif bug == "rsqrt-without-sqrt":
            r = f32(1) / (m + e)
        else:
            r = f32(1) / np.sqrt(m + e)
        if nudge:
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


@pytest.mark.parametrize("arithmetic", ["round_then_weight", "f32", "gemma"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_numpy_forms_pass_and_are_named_alone(arithmetic, dtype):
    r = ko.check_rms_norm(numpy_rms(arithmetic, dtype), dtype=dtype, arithmetic=arithmetic,
                          shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == 3 * 4, r.text
    assert summary_names(r) == arithmetic, r.text


@pytest.mark.parametrize("order", [sequential, pairwise])
@pytest.mark.parametrize("mean", ["divide", "reciprocal"])
def test_any_summation_order_and_mean_pass_on_the_default_shapes(order, mean):
    # The reduction order is free; so is torch's mean (a multiply by
    # fl(1/n)); an rsqrt a further ulp off still passes.
    fn = numpy_rms("round_then_weight", order=order, mean=mean, nudge=order is pairwise)
    r = ko.check_rms_norm(fn, verbose=False)
    assert r.ok and r.passed == r.cases == 10 * 4, r.text
    decided, total = map(int, re.search(r"bit for bit: (\d+) of (\d+)", r.text).groups())
    assert decided > 0.9 * total, r.text


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
    ],
)
def test_planted_bugs_fail_under_the_default_arms_and_shapes(fn, kw):
    r = ko.check_rms_norm(fn, verbose=False, **kw)
    assert not r.ok and r.failed >= 1, r.text
    fail = r.failures[0]
    assert "FAIL " in fail and "reproduce:" in fail and "rms_norm_case(" in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\((\d+), (\d+)\)\]", fail).groups())
    arm = re.search(r'arms=\["(\w+)"\]', fail).group(1)
    again = ko.check_rms_norm(fn, shapes=[dims], arms=[arm], seeds=[seed], verbose=False, **kw)
    assert not again.ok


def test_each_bug_is_caught_by_the_arm_meant_for_it():
    def arms_failing(fn, **kw):
        r = ko.check_rms_norm(fn, verbose=False, **kw)
        return {re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}

    assert "SMALL" in arms_failing(numpy_rms(bug="eps-outside-sqrt"))
    assert "LARGE" in arms_failing(numpy_rms(bug="sum-in-dtype", dtype="float16"),
                                   dtype="float16")
    assert "SPIKE" in arms_failing(numpy_rms(bug="sum-in-dtype", dtype="float16"),
                                   dtype="float16")
    # One element in 4097 is lost in the sum: the spike in the last place shows it.
    assert "SPIKE" in arms_failing(numpy_rms(bug="tail-dropped-from-sum"))
    r = ko.check_rms_norm(numpy_rms(bug="weight-dropped-in-tail"), verbose=False)
    tails = {re.search(r"shapes=\[\((\d+), (\d+)\)\]", f).group(2) for f in r.failures}
    # Only the hidden sizes that are not multiples of 8 show it.
    assert tails == {"7", "129", "4097", "5123", "1"}, tails
    assert "past the last whole vector of 8" in r.failures[0]


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
    assert r.ok and r.passed == 6 * 4 * 3, r.text
