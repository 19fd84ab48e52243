"""check_int8_scaled_mm on numpy INT8 scaled GEMMs written from the rules
(an int64 matmul, the zero-point adjustment, the conversion to float32,
then the epilogue in float32 numpy in each declared order and bias form)
and on planted bugs: each correct form passes bit for bit and is named;
each bug is caught by the arm meant to catch it, with a rerun line that
fails again alone."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
# A k tail past every power-of-two tile (3077 = 48 * 64 + 5), an odd
# out_f, one token; in_f 3077 lets BIG pass 2^24.
SHAPES = [(3, 3077, 24), (1, 1003, 17)]
EPILOGUES = ["activation_first", "weight_first", "scales_first"]
SYM = {"activation_first": "(acc*d)*s", "weight_first": "(acc*s)*d", "scales_first": "acc*(d*s)"}
FORM = {None: "no bias", "add": "+ bias", "fused": "fma bias", "add_out": "+ bias in out dtype"}


def fma32(x, t, b):
    """float32 fma(x, t, b), one rounding: the exact product in float64,
    the sum rounded to odd (TwoSum), then to float32 (Boldo-Melquiond)."""
    x, t, b = np.broadcast_arrays(x.astype(np.float64), t.astype(np.float64), b.astype(np.float64))
    p = x * t
    s = p + b
    with np.errstate(invalid="ignore"):
        pv = s - b
        cv = s - pv
        e = (p - pv) + (b - cv)
    bits = s.view(np.uint64).copy()
    fix = (e != 0) & ((bits & 1) == 0)
    up = (e > 0) == (s > 0)
    bits[fix & up] += 1
    bits[fix & ~up] -= 1
    # Infinite operands or an overflowing product: one float64 rounding
    # gives IEEE's infinity or NaN.
    special = ~(np.isfinite(p) & np.isfinite(b))
    return np.where(special, p + b, bits.view(np.float64)).astype(f32)


def rounded(y, out_dtype):
    """float32 values rounded to the out dtype (as float32)."""
    if out_dtype == "bfloat16":
        return ko.decode_bf16(ko.encode_bf16(y))
    if out_dtype == "float16":
        return ko.decode_f16(ko.encode_f16(y))
    return y


def f32_toward_zero(a):
    """int64 values to float32 rounded toward zero (cvt.rz.f32.s32)."""
    f = a.astype(f32)
    over = np.abs(f.astype(np.int64)) > np.abs(a)
    return np.where(over, np.nextafter(f, f32(0)), f).astype(f32)


def rounded_once(y64, out_dtype):
    """float64 values rounded once to the out dtype, as its encoding: float32
    directly; bfloat16 and float16 through float32 rounded to odd."""
    r = y64.astype(f32)
    if out_dtype == "float32":
        return r
    over = np.abs(r.astype(np.float64)) > np.abs(y64)
    r = np.where(over, np.nextafter(r, f32(0)), r).astype(f32)
    odd = (r.astype(np.float64) != y64).astype(np.uint32)
    r = (r.view(np.uint32) | odd).view(f32)
    return ko.encode_bf16(r) if out_dtype == "bfloat16" else ko.encode_f16(r)


def numpy_mm(epilogue="weight_first", bias_form=None, out_dtype="bfloat16", bug=None, name=None):
    """The INT8 scaled GEMM from the rules, in numpy, with one planted bug."""

    def mm(q, d, w, s, bias, azp, azp_adj, out):
        assert q.dtype == np.int8 and w.dtype == np.int8
        qi, wi = q.astype(np.int64), w.astype(np.int64)
        if bug == "minus-128-as-plus-128":
            qi[q == -128] = 128
            wi[w == -128] = 128
        if bug == "codes-unsigned":
            qi, wi = q.view(np.uint8).astype(np.int64), w.view(np.uint8).astype(np.int64)
        if bug == "drop-k-tail":
            k = q.shape[1] - q.shape[1] % 64
            qi, wi = qi[:, :k], wi[:, :k]
        if bug == "f32-accumulation":
            # int8 codes cast to float32, products summed in float32.
            fa = np.zeros((q.shape[0], w.shape[0]), f32)
            for k in range(q.shape[1]):
                fa = fa + np.outer(q[:, k].astype(f32), w[:, k].astype(f32))
        else:
            acc = qi @ wi.T
            corr = 0
            if azp_adj is not None and bug != "azp-adj-ignored":
                corr = azp_adj[None, :].astype(np.int64)
                if azp is not None:
                    corr = azp[:, None].astype(np.int64) * corr
            if bug == "azp-subtracted-in-float":
                fa = acc.astype(f32) - np.asarray(corr).astype(f32)
            elif bug == "cvt-rz":
                fa = f32_toward_zero(acc - corr)
            else:
                fa = (acc - corr).astype(f32)
            if bug == "f64-epilogue":
                # acc' exact in float64, both scales and the bias in float64,
                # one rounding to the out dtype.
                y64 = (acc - corr).astype(np.float64) * d.astype(np.float64)[:, None]
                y64 = y64 * s.astype(np.float64)[None, :]
                if bias is not None:
                    y64 = y64 + bias.astype(np.float64)[None, :]
                out[...] = rounded_once(y64, out_dtype)
                return
        ep = epilogue
        for e in EPILOGUES:
            if bug == e.replace("_", "-") + "-computed":
                ep = e
        dd, ss = d[:, None], s[None, :]
        if ep == "activation_first":
            x, t = fa * dd, np.broadcast_to(ss, fa.shape)
        elif ep == "weight_first":
            x, t = fa * ss, np.broadcast_to(dd, fa.shape)
        else:
            x, t = fa, np.broadcast_to(dd * ss, fa.shape)
        prod = (x * t).astype(f32)
        form = bias_form
        if bug == "bias-unfused":
            form = "add"
        if bias is None:
            y = prod
        elif form == "add":
            y = prod + bias[None, :]
        elif form == "fused":
            y = fma32(x, t, bias[None, :])
        else:
            y = rounded(prod, out_dtype) + bias[None, :]
        y = y.astype(f32)
        if out_dtype == "float32":
            out[...] = y
        elif out_dtype == "bfloat16":
            if bug == "bf16-truncate":
                out[...] = (y.view(np.uint32) >> 16).astype(np.uint16)
            elif bug == "bf16-ties-away":
                out[...] = ((y.view(np.uint32) + 0x8000) >> 16).astype(np.uint16)
            else:
                out[...] = ko.encode_bf16(y)
        else:
            out[...] = ko.encode_f16(y)

    mm.__name__ = name or (bug or f"numpy_{epilogue}_{bias_form}").replace("-", "_")
    return mm


def matched_rows(report):
    return [line for line in report.text.splitlines() if " PASS " in line or " FAIL " in line]


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("bias", [None, "add", "fused", "add_out"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_numpy_forms_pass_under_their_declaration_and_are_named(epilogue, bias, out_dtype, capsys):
    r = ko.check_int8_scaled_mm(
        numpy_mm(epilogue, bias, out_dtype), epilogue=epilogue, bias=bias,
        out_dtype=out_dtype, shapes=SHAPES, verbose=False,
    )
    arms = 4 + (bias is not None)
    assert r.ok and r.passed == r.cases == len(SHAPES) * arms, r.text
    label = f"{SYM[epilogue]}, {FORM[bias]}"
    rows = matched_rows(r)
    assert rows and all(label in line for line in rows)
    # ROUND names the declared association alone in every dtype (with more
    # than one token; its bias is +0, so the bias forms agree).
    round_rows = [line for line in rows if " ROUND " in line and line.startswith("3,3077,24 ")]
    assert len(round_rows) == 1
    named = round_rows[0].split(" PASS ", 1)[1]
    assert all(SYM[epilogue] in m for m in named.split(";")), round_rows[0]
    if out_dtype == "float32":
        # RAND's 72 outputs name the declared association alone (add and
        # add_out are one form in float32).
        for line in rows:
            if " RAND " in line and line.startswith("3,3077,24 "):
                named = line.split(" PASS ", 1)[1]
                assert all(SYM[epilogue] in m for m in named.split(";")), line
    if bias == "fused":
        # BIAS tells the associations apart in any dtype.
        for line in rows:
            if " BIAS " in line:
                assert line.count(", fma bias") == 1, line
    assert capsys.readouterr().out.rstrip().endswith("PASS")


@pytest.mark.parametrize("scales", ["row", "tensor"])
@pytest.mark.parametrize("azp", ["tensor", "token"])
def test_zero_points_as_vllm_passes_them(azp, scales):
    seen = {"azp": set(), "d": set()}

    def mm(q, d, w, s, bias, azp_, azp_adj, out):
        seen["azp"].add(azp_ is None)
        seen["d"].add(d.shape)
        numpy_mm("weight_first", "fused")(q, d, w, s, bias, azp_, azp_adj, out)

    r = ko.check_int8_scaled_mm(mm, bias="fused", azp=azp, scales=scales, shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 6, r.text
    assert seen["azp"] == {azp == "tensor"}
    assert seen["d"] == ({(1,)} if scales == "tensor" else {(3,), (1,)})
    c = ko.int8_scaled_mm_case(3, 300, 8, "AZP", azp=azp, scales=scales)
    assert c["d"].shape == ((1,) if scales == "tensor" else (3,))
    colsum = c["w"].astype(np.int64).sum(axis=1)
    if azp == "tensor":
        assert c["azp"] is None and (c["azp_adj"] == c["azp_value"] * colsum).all()
    else:
        assert c["azp"].shape == (3,) and (c["azp_adj"] == colsum).all()


@pytest.mark.parametrize("scales", ["row", "tensor", "tensor_act", "tensor_weight"])
def test_mixed_scale_granularity(scales):
    # vLLM's static W8A8: one activation scale with per-channel weight
    # scales ("tensor_act"), and the reverse ("tensor_weight").
    d_rows = scales in ("row", "tensor_weight")
    s_rows = scales in ("row", "tensor_act")
    seen = set()

    def mm(q, d, w, s, bias, azp, azp_adj, out):
        seen.add((d.shape == ((q.shape[0] if d_rows else 1),), s.shape == ((w.shape[0] if s_rows else 1),)))
        numpy_mm("weight_first", "fused")(q, d, w, s, bias, azp, azp_adj, out)

    r = ko.check_int8_scaled_mm(mm, bias="fused", scales=scales, shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == len(SHAPES) * 5, r.text
    assert seen == {(True, True)}
    assert f"{scales} scales" in r.text
    c = ko.int8_scaled_mm_case(3, 300, 8, "RAND", scales=scales)
    assert c["d"].shape == ((3,) if d_rows else (1,)) and c["s"].shape == ((8,) if s_rows else (1,))
    y = ko.int8_scaled_mm(c["q"], c["d"], c["w"], c["s"], out_dtype="bfloat16")
    assert (y.view(np.uint32) == c["y"].view(np.uint32)).all()
    if scales != "tensor":
        # A kernel that takes the first scale of each side for the tensor's.
        def first_only(q, d, w, s, bias, azp, azp_adj, out):
            numpy_mm("weight_first", "fused")(q, d[:1], w, s[:1], bias, azp, azp_adj, out)

        bad = ko.check_int8_scaled_mm(first_only, bias="fused", scales=scales, shapes=SHAPES,
                                      arms=["RAND"], verbose=False)
        assert not bad.ok


def test_the_case_holds_the_oracles_output():
    c = ko.int8_scaled_mm_case(3, 2085, 16, "BIAS", bias="fused", azp="token", epilogue="activation_first")
    y = ko.int8_scaled_mm(c["q"], c["d"], c["w"], c["s"], c["bias"], c["azp"], c["azp_adj"],
                          epilogue="activation_first", bias_form="fused", out_dtype="bfloat16")
    assert y.shape == (3, 16) and (y.view(np.uint32) == c["y"].view(np.uint32)).all()
    acc = c["q"].astype(np.int64) @ c["w"].astype(np.int64).T - c["azp"][:, None] * c["azp_adj"][None, :]
    assert (acc == c["acc"]).all()
    # BIAS: the fused output is the product's rounding error, the added one +0.
    add = ko.int8_scaled_mm(c["q"], c["d"], c["w"], c["s"], c["bias"], c["azp"], c["azp_adj"],
                            epilogue="activation_first", bias_form="add", out_dtype="bfloat16")
    assert (add.view(np.uint32) == 0).all() and (y != 0).all()
    with pytest.raises(ValueError, match="azp_adj"):
        ko.int8_scaled_mm(c["q"], c["d"], c["w"], c["s"], azp=c["azp"])
    with pytest.raises(ValueError, match="w must be"):
        ko.int8_scaled_mm(c["q"], c["d"], c["w"][:, :-1], c["s"])
    with pytest.raises(ValueError, match="131071"):
        z = np.zeros((1, 131072), np.int8)
        ko.int8_scaled_mm(z, np.ones(1, f32), z, np.ones(1, f32))
    with pytest.raises(ValueError, match="s has 3"):
        ko.int8_scaled_mm(c["q"], c["d"], c["w"], np.ones(3, f32))
    with pytest.raises(ValueError, match="I8MM-AZP"):
        big = np.full((1, 8), 127, np.int8)
        ko.int8_scaled_mm(big, np.ones(1, f32), big, np.ones(1, f32),
                          azp_adj=np.array([-(2**31) + 1], np.int32))


def test_big_passes_2_pow_24_and_edge_is_half_minus_128():
    c = ko.int8_scaled_mm_case(1, 4096, 64, "BIG")
    one_signed = np.arange(64) % 4 != 3
    assert (np.abs(c["acc"][:, one_signed]) > 2**24).all()
    e = ko.int8_scaled_mm_case(3, 3077, 24, "EDGE")
    assert 0.45 < (e["q"] == -128).mean() < 0.55


CASES = [
    # f32 accumulation of the products: BIG's |acc| > 2^24.
    (numpy_mm(out_dtype="float32", bug="f32-accumulation"), dict(out_dtype="float32"), "BIG", SHAPES, None),
    # ... and in bfloat16, where BIG's sign-changing weight rows show it.
    (numpy_mm(bug="f32-accumulation", name="f32_accumulation_bf16"), dict(), "BIG", [(2, 4096, 32)], None),
    # The association: weight_first declared, activation_first computed.
    (numpy_mm(out_dtype="float32", bug="activation-first-computed"), dict(out_dtype="float32"), "RAND",
     SHAPES, r"\(acc\*d\)\*s, no bias"),
    # ... and in bfloat16 through a fused bias's BIAS arm.
    (numpy_mm(bias_form="fused", bug="activation-first-computed", name="activation_first_fused"),
     dict(bias="fused"), "BIAS", SHAPES, r"\(acc\*d\)\*s, fma bias"),
    # The bias added after the rounded product where one FMA is declared.
    (numpy_mm(bias_form="fused", bug="bias-unfused"), dict(bias="fused"), "BIAS", SHAPES,
     r"\(acc\*s\)\*d, \+ bias"),
    # Zero points: azp_adj ignored, or acc and azp*azp_adj converted first.
    (numpy_mm(bug="azp-adj-ignored"), dict(azp="token"), "AZP", SHAPES, None),
    (numpy_mm(bug="azp-adj-ignored", name="azp_adj_ignored_tensor"), dict(azp="tensor"), "AZP", SHAPES, None),
    (numpy_mm(bug="azp-subtracted-in-float"), dict(azp="token"), "AZP", SHAPES, None),
    # The codes: -128 as +128, or read unsigned; the k tail dropped.
    (numpy_mm(bug="minus-128-as-plus-128"), dict(), "EDGE", SHAPES, None),
    (numpy_mm(bug="codes-unsigned"), dict(), "EDGE", SHAPES, None),
    (numpy_mm(bug="drop-k-tail"), dict(), "EDGE", SHAPES, None),
    # The output truncated to bfloat16 instead of rounded.
    (numpy_mm(bug="bf16-truncate"), dict(), "RAND", SHAPES, None),
    # ROUND, in every output dtype: acc' converted toward zero (cvt.rz),
    (numpy_mm(bug="cvt-rz"), dict(), "ROUND", SHAPES, None),
    (numpy_mm(bug="cvt-rz", bias_form="fused", name="cvt_rz_fused"), dict(bias="fused"), "ROUND", SHAPES, None),
    (numpy_mm(bug="cvt-rz", out_dtype="float16", name="cvt_rz_f16"), dict(out_dtype="float16"), "ROUND",
     SHAPES, None),
    (numpy_mm(bug="cvt-rz", out_dtype="float32", name="cvt_rz_f32"), dict(out_dtype="float32"), "ROUND",
     SHAPES, None),
    # ... the bfloat16 output rounded with ties away from zero,
    (numpy_mm(bug="bf16-ties-away"), dict(), "ROUND", SHAPES, None),
    (numpy_mm(bug="bf16-ties-away", bias_form="fused", name="bf16_ties_away_fused"), dict(bias="fused"),
     "ROUND", SHAPES, None),
    # ... another association than the declared one, named,
    (numpy_mm(bug="activation-first-computed", name="activation_first_bf16"), dict(), "ROUND", SHAPES,
     r"\(acc\*d\)\*s, no bias"),
    (numpy_mm(bug="scales-first-computed", name="scales_first_bf16"), dict(), "ROUND", SHAPES,
     r"acc\*\(d\*s\), no bias"),
    (numpy_mm("activation_first", bug="weight-first-computed", name="weight_first_bf16"),
     dict(epilogue="activation_first"), "ROUND", SHAPES, r"\(acc\*s\)\*d, no bias"),
    (numpy_mm("activation_first", bug="scales-first-computed", name="scales_first_for_activation_first_bf16"),
     dict(epilogue="activation_first"), "ROUND", SHAPES, r"acc\*\(d\*s\), no bias"),
    (numpy_mm(bias_form="fused", bug="activation-first-computed", name="activation_first_fused_round"),
     dict(bias="fused"), "ROUND", SHAPES, r"\(acc\*d\)\*s, fma bias"),
    (numpy_mm(out_dtype="float16", bug="activation-first-computed", name="activation_first_f16"),
     dict(out_dtype="float16"), "ROUND", SHAPES, r"\(acc\*d\)\*s, no bias"),
    (numpy_mm(out_dtype="float16", bug="scales-first-computed", name="scales_first_f16"),
     dict(out_dtype="float16"), "ROUND", SHAPES, r"acc\*\(d\*s\), no bias"),
    (numpy_mm(out_dtype="float32", bug="scales-first-computed", name="scales_first_f32"),
     dict(out_dtype="float32"), "ROUND", SHAPES, r"acc\*\(d\*s\), no bias"),
    # ... and the epilogue computed in float64, rounded once.
    (numpy_mm(bug="f64-epilogue"), dict(), "ROUND", SHAPES, "no known epilogue"),
    (numpy_mm(bug="f64-epilogue", bias_form="fused", name="f64_epilogue_fused"), dict(bias="fused"),
     "ROUND", SHAPES, "no known epilogue"),
    (numpy_mm("activation_first", bug="f64-epilogue", name="f64_epilogue_activation_first"),
     dict(epilogue="activation_first"), "ROUND", SHAPES, "no known epilogue"),
    (numpy_mm("scales_first", bug="f64-epilogue", name="f64_epilogue_scales_first"),
     dict(epilogue="scales_first"), "ROUND", SHAPES, "no known epilogue"),
    (numpy_mm(out_dtype="float16", bug="f64-epilogue", name="f64_epilogue_f16"), dict(out_dtype="float16"),
     "ROUND", SHAPES, "no known epilogue"),
    (numpy_mm(out_dtype="float32", bug="f64-epilogue", name="f64_epilogue_f32"), dict(out_dtype="float32"),
     "ROUND", SHAPES, "no known epilogue"),
]


def test_round_bugs_pass_every_other_arm():
    # The rounding bugs ROUND is aimed at pass RAND, BIG and EDGE (and BIAS)
    # in bfloat16 with weight_first: ROUND is the arm that catches them.
    for bug in ["cvt-rz", "bf16-ties-away", "scales-first-computed", "f64-epilogue"]:
        r = ko.check_int8_scaled_mm(numpy_mm(bug=bug), shapes=SHAPES, arms=["RAND", "BIG", "EDGE"],
                                    verbose=False)
        assert r.ok, (bug, r.text)


@pytest.mark.parametrize("mm,kw,arm,shapes,caught_by", CASES, ids=[c[0].__name__ for c in CASES])
def test_planted_bugs_are_caught(mm, kw, arm, shapes, caught_by):
    r = ko.check_int8_scaled_mm(mm, shapes=shapes, arms=[arm], verbose=False, **kw)
    assert not r.ok and r.failed >= 1
    fail = r.failures[0]
    assert "FAIL int8_scaled_mm" in fail and "reproduce:" in fail
    assert "int8_scaled_mm_case(" in fail and "got " in fail
    if caught_by:
        assert re.search(caught_by, fail.split("the output matches:")[1]), fail
    rerun = re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1)
    shape = re.search(r"shapes=\[\((\d+), (\d+), (\d+)\)\]", fail).groups()
    again = ko.check_int8_scaled_mm(
        mm, shapes=[tuple(int(v) for v in shape)], arms=[arm], seeds=[int(rerun, 16)],
        verbose=False, **kw,
    )
    assert not again.ok
    # The case line reproduces the arrays the callable got.
    line = fail.split("the case's arrays and the oracle's output:\n  ")[1].strip()
    c = eval(line, {"kernel_oracle": ko})
    assert c["q"].shape == (int(shape[0]), int(shape[1]))


def test_bad_arguments_raise_before_any_call():
    calls = []

    def mm(*args):
        calls.append(1)

    for kw in [
        dict(epilogue="x"),
        dict(bias="fma"),
        dict(azp="row"),
        dict(scales="col"),
        dict(out_dtype="float64"),
        dict(arms=["NOPE"]),
        dict(arms=["AZP"]),
        dict(arms=["BIAS"]),
        dict(shapes=[(0, 32, 16)]),
        dict(shapes=[(1, 131072, 1)]),
        dict(shapes=[(1 << 16, 1 << 12, 1 << 12)]),
        dict(trials=0),
        dict(seeds=[]),
    ]:
        with pytest.raises(ValueError):
            ko.check_int8_scaled_mm(mm, verbose=False, **kw)
    assert not calls


def test_a_wrong_return_is_a_failing_row_not_an_abort():
    def mm(q, d, w, s, bias, azp, azp_adj, out):
        return np.zeros((q.shape[0], w.shape[0]), np.float64)

    r = ko.check_int8_scaled_mm(mm, shapes=[(2, 64, 8)], arms=["RAND"], verbose=False)
    assert not r.ok and r.failed == r.cases == 1
    assert "float64" in r.failures[0] and "reproduce:" in r.failures[0]


def test_a_refusing_kernel_is_counted_refused():
    def mm(q, d, w, s, bias, azp, azp_adj, out):
        if q.shape[0] <= 16:
            raise ko.Refused("torch._int_mm wants m > 16")
        numpy_mm()(q, d, w, s, bias, azp, azp_adj, out)

    r = ko.check_int8_scaled_mm(mm, shapes=[(2, 64, 8), (17, 64, 8)], arms=["RAND"], verbose=False)
    assert r.refused == 1 and r.passed == 1 and r.ok


def test_a_scale_read_without_its_tiles_offset_fails_the_default_shapes():
    # Row scales d[i % 64] and column scales s[i % 256] (a tile's scales read
    # from tile 0): only a grid of several tiles each way shows it.
    good = numpy_mm()

    def tile0(q, d, w, s, bias, azp, azp_adj, out):
        d2 = d[np.arange(d.shape[0]) % 64] if d.shape[0] > 1 else d
        s2 = s[np.arange(s.shape[0]) % 256] if s.shape[0] > 1 else s
        good(q, d2, w, s2, bias, azp, azp_adj, out)

    assert ko.check_int8_scaled_mm(good, arms=["RAND"], verbose=False)
    r = ko.check_int8_scaled_mm(tile0, arms=["RAND"], verbose=False)
    assert not r and r.failed == 1 and "m=145" in r.failures[0]
