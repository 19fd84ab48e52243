"""check_fp8_scaled_mm on numpy scaled FP8 GEMMs written from the rules
(binary32 in k order, each epilogue) and on the oracle under every
accumulation, and on planted bugs: each correct form passes bit for bit
and is named; each bug is caught by the arm meant to catch it, with a
rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
E4M3 = ko.decode_e4m3(np.arange(256, dtype=np.uint8))
# A k tail of 16 (half an MMA), two promotions of 128, CI's 2 cores.
SHAPES = [(3, 272, 16), (2, 300, 24)]


def numpy_f32(epilogue="activation_first", bug=None, out_dtype="float32", name=None):
    """The binary32 k-order accumulation and an epilogue, in numpy."""

    def f(q, d, w, s, out):
        qf, wf = E4M3[q], E4M3[w]
        if bug == "w-transposed-rows":
            wf = wf[::-1]
        k = q.shape[1] - (16 if bug == "drop-k-tail" else 0)
        acc = np.zeros((q.shape[0], w.shape[0]), f32)
        for i in range(k):
            acc = acc + np.outer(qf[:, i], wf[:, i]).astype(f32)
        dd, ss = d[:, None], s[None, :]
        if bug == "scale-tile-offset":  # each tile reads its scales from tile 0
            dd = d[np.arange(d.shape[0]) % 64][:, None]
            ss = s[np.arange(s.shape[0]) % 256][None, :]
        if bug == "weight-scales-reversed":
            ss = s[None, ::-1]
        if epilogue == "activation_first":
            y = (acc * dd) * ss
        elif epilogue == "weight_first":
            y = (acc * ss) * dd
        else:
            y = acc * (dd * ss)
        y = y.astype(f32)
        if out_dtype == "float32":
            out[...] = y
        elif out_dtype == "bfloat16":
            bits = y.view(np.uint32)
            if bug == "bf16-truncate":
                out[...] = (bits >> 16).astype(np.uint16)
            else:
                out[...] = ko.encode_bf16(y)

    f.__name__ = name or (bug or "numpy_" + epilogue).replace("-", "_")
    return f


def oracle_bug(bug, name=None):
    """The oracle (one wgmma chain, (acc*d)*s) with one planted mistake."""

    def f(q, d, w, s, out):
        if bug == "nan-code-as-zero":
            # A decode table that reads the NaN codes 0x7F/0xFF as zero.
            q, w = np.where((q & 0x7F) == 0x7F, 0, q), np.where((w & 0x7F) == 0x7F, 0, w)
        if bug == "nan-code-as-448":
            # A saturating decode: the NaN codes read as +-448.
            q, w = np.where((q & 0x7F) == 0x7F, q - 1, q), np.where((w & 0x7F) == 0x7F, w - 1, w)
        if bug == "chain-restarted-per-tile":
            # Each 128-k tile's chain from zero, tiles added in f32 (promote=128).
            y = np.zeros((q.shape[0], w.shape[0]), f32)
            for k0 in range(0, q.shape[1], 128):
                y = y + ko.fp8_scaled_mm(q[:, k0:k0 + 128].copy(), np.ones_like(d),
                                         w[:, k0:k0 + 128].copy(), np.ones_like(s))
            out[...] = (y * d[:, None]) * s[None, :]
            return
        y = ko.fp8_scaled_mm(q, np.ones_like(d), w, np.ones_like(s))
        if bug == "activation-scale-per-column":
            dd = d[np.arange(w.shape[0]) % q.shape[0]][None, :]
        else:
            dd = d[:, None]
        y = (y * dd) * s[None, :]
        if bug == "rows-off-by-one":
            y = y[np.minimum(np.arange(q.shape[0]) + 1, q.shape[0] - 1)]
        out[...] = y

    f.__name__ = name or bug.replace("-", "_")
    return f


def oracle_gemm(promote, epilogue="activation_first", accumulation="wgmma"):
    def f(q, d, w, s, out):
        out[...] = ko.fp8_scaled_mm(
            q, d, w, s, accumulation=accumulation, promote=promote, epilogue=epilogue
        )

    f.__name__ = f"oracle_{accumulation}_{promote}_{epilogue}"
    return f


@pytest.mark.parametrize("epilogue", ["activation_first", "weight_first", "scales_first"])
def test_numpy_k_order_passes_declared_f32_and_is_named(epilogue, capsys):
    r = ko.check_fp8_scaled_mm(
        numpy_f32(epilogue), accumulation="f32", epilogue=epilogue, shapes=SHAPES
    )
    assert r.ok and r.passed == r.cases == len(SHAPES) * 3
    sym = {"activation_first": "(acc*d)*s", "weight_first": "(acc*s)*d", "scales_first": "acc*(d*s)"}
    rows = [line for line in r.text.splitlines() if " PASS " in line]
    assert rows and all(f"f32 in k order, {sym[epilogue]}" in line for line in rows)
    assert capsys.readouterr().out.rstrip().endswith("PASS")


@pytest.mark.parametrize("promote", [None, 32, 128])
def test_the_oracle_passes_under_its_schedule_and_only_its_accumulation_is_named(promote):
    r = ko.check_fp8_scaled_mm(oracle_gemm(promote), promote=promote, shapes=SHAPES)
    assert r.ok and r.passed == r.cases
    named = "one chain" if promote is None else f"promote every {promote} k"
    for line in r.text.splitlines():
        if " RAND " in line or " SPIKE " in line:
            assert named in line
            # On RAND and SPIKE no other accumulation matches.
            assert line.count("wgmma") + line.count("f32 in k order") == 1, line


def test_the_case_holds_the_oracles_output():
    c = ko.fp8_scaled_mm_case(3, 272, 16, "SPIKE", promote=64, epilogue="weight_first")
    y = ko.fp8_scaled_mm(c["q"], c["d"], c["w"], c["s"], promote=64, epilogue="weight_first")
    assert y.shape == (3, 16) and (y.view(np.uint32) == c["y"].view(np.uint32)).all()
    with pytest.raises(ValueError, match="multiple of 32"):
        ko.fp8_scaled_mm(c["q"], c["d"], c["w"], c["s"], promote=48)
    with pytest.raises(ValueError, match="f32"):
        ko.fp8_scaled_mm(c["q"], c["d"], c["w"], c["s"], accumulation="f32", promote=64)
    with pytest.raises(ValueError, match="epilogue"):
        ko.fp8_scaled_mm(c["q"], c["d"], c["w"], c["s"], epilogue="fused")
    with pytest.raises(ValueError, match="w must be"):
        ko.fp8_scaled_mm(c["q"], c["d"], c["w"][:, :-1], c["s"])


@pytest.mark.parametrize(
    "gemm,kw,arm,caught_by",
    [
        # The epilogue's association: the scales show it on every arm.
        (numpy_f32("weight_first", name="weight_first_declared_a"), dict(accumulation="f32"), "EXACT", None),
        (numpy_f32(bug="weight-scales-reversed"), dict(accumulation="f32"), "EXACT", None),
        (numpy_f32(bug="w-transposed-rows"), dict(accumulation="f32"), "EXACT", None),
        (numpy_f32(bug="drop-k-tail"), dict(accumulation="f32"), "EXACT", None),
        (numpy_f32(bug="bf16-truncate", out_dtype="bfloat16"), dict(accumulation="f32", out_dtype="bfloat16"), "RAND", None),
        # Fast accumulation declared as promoted, and one interval for another.
        (oracle_gemm(None), dict(promote=128), "SPIKE", "wgmma, one chain"),
        (oracle_gemm(64), dict(promote=128), "RAND", "promote every 64 k"),
        # binary32 in k order declared as a tensor core's chain.
        (numpy_f32(), dict(promote=None), "RAND", "f32 in k order"),
        # NaN codes read as numbers (EXACT's NaN weight and activation rows).
        (oracle_bug("nan-code-as-zero"), dict(), "EXACT", None),
        (oracle_bug("nan-code-as-448"), dict(), "EXACT", None),
        # The scales' indexing and the rows: EXACT shows them.
        (oracle_bug("activation-scale-per-column"), dict(), "EXACT", None),
        (oracle_bug("rows-off-by-one"), dict(), "EXACT", None),
        # A chain restarted per 128-k tile is promotion every 128 k.
        (oracle_bug("chain-restarted-per-tile"), dict(), "SPIKE", "promote every 128 k"),
    ],
)
def test_planted_bugs_are_caught(gemm, kw, arm, caught_by):
    r = ko.check_fp8_scaled_mm(gemm, shapes=SHAPES, arms=[arm], verbose=False, **kw)
    assert not r.ok and r.failed >= 1
    fail = r.failures[0]
    assert "FAIL fp8_scaled_mm" in fail and "reproduce:" in fail
    assert "fp8_scaled_mm_case(" in fail
    if caught_by:
        assert re.search(caught_by, fail.split("the output matches:")[1]), fail
    rerun = re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1)
    shape = re.search(r"shapes=\[\((\d+), (\d+), (\d+)\)\]", fail).groups()
    again = ko.check_fp8_scaled_mm(
        gemm,
        shapes=[tuple(int(v) for v in shape)],
        arms=[arm],
        seeds=[int(rerun, 16)],
        verbose=False,
        **kw,
    )
    assert not again.ok


def test_bad_arguments_raise_before_any_call():
    calls = []

    def gemm(q, d, w, s, out):
        calls.append(1)

    for kw in [
        dict(promote=0),
        dict(accumulation="bf16"),
        dict(epilogue="x"),
        dict(out_dtype="float64"),
        dict(arms=["NOPE"]),
        dict(shapes=[(0, 32, 16)]),
        dict(shapes=[(1 << 16, 1 << 12, 1 << 12)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_fp8_scaled_mm(gemm, verbose=False, **kw)
    assert not calls


def test_the_oracle_refuses_a_gemm_past_the_caps_before_any_arithmetic():
    # 2^23 outputs over a k of 1: little work, too many outputs.
    q = np.zeros((1 << 12, 1), np.uint8)
    w = np.zeros((1 << 11, 1), np.uint8)
    with pytest.raises(ValueError, match="outputs"):
        ko.fp8_scaled_mm(q, np.ones(1 << 12, f32), w, np.ones(1 << 11, f32))
    with pytest.raises(ValueError, match="outputs"):
        ko.fp8_scaled_mm_case(1 << 12, 1, 1 << 11, "RAND")
    with pytest.raises(ValueError, match="d"):
        ko.fp8_scaled_mm(q[:2], np.ones(3, f32), w[:2], np.ones(2, f32))


def test_nan_codes_give_nan_where_the_exact_arm_puts_them():
    c = ko.fp8_scaled_mm_case(7, 1040, 120, "EXACT")
    nan = np.isnan(c["y"])
    assert nan[:, 60].all() and nan[3].all() and nan.sum() == 7 + 120 - 1
    assert c["w"][60, 0] == 0x7F and c["q"][3, 0] == 0xFF
    one = ko.fp8_scaled_mm_case(1, 64, 16, "EXACT")
    assert np.isnan(one["y"]).sum() == 1


@pytest.mark.parametrize(
    "ret,why",
    [
        (lambda y: y.astype(np.float64), "dtype float64"),
        (lambda y: y.T.copy(), "shape"),
        (lambda y: y.tolist(), "list"),
        (lambda y: y[:, :-1].copy(), "shape"),
    ],
)
def test_a_wrong_return_is_a_failing_row_not_an_abort(ret, why):
    def gemm(q, d, w, s, out):
        return ret(ko.fp8_scaled_mm(q, d, w, s))

    r = ko.check_fp8_scaled_mm(gemm, shapes=[(7, 1040, 120)], arms=["EXACT"], verbose=False)
    assert not r.ok and r.failed == r.cases == 1
    assert why in r.failures[0] and "reproduce:" in r.failures[0]


def test_a_refusing_kernel_is_counted_refused():
    def gemm(q, d, w, s, out):
        if w.shape[0] % 16:
            raise ko.Refused("out_f must be a multiple of 16")
        out[...] = ko.fp8_scaled_mm(q, d, w, s)

    r = ko.check_fp8_scaled_mm(gemm, shapes=[(2, 64, 24), (2, 64, 32)], arms=["EXACT"], verbose=False)
    assert r.refused == 1 and r.passed == 1 and r.ok


def test_a_scale_read_without_its_tiles_offset_fails_the_default_shapes():
    # Row scales d[i % 64] and column scales s[i % 256]: a Triton kernel's
    # tl.arange(0, BLOCK) without pid * BLOCK. Only a grid of several
    # tiles each way shows it: the default shapes end with m 145, out_f 288.
    kw = dict(accumulation="f32", epilogue="activation_first", arms=["RAND"])
    assert ko.check_fp8_scaled_mm(numpy_f32(), verbose=False, **kw)
    r = ko.check_fp8_scaled_mm(numpy_f32(bug="scale-tile-offset"), verbose=False, **kw)
    assert not r and r.failed == 1 and "m=145" in r.failures[0]
