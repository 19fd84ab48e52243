"""check_rotary_embedding on numpy rotary embeddings written from the
rules (each arithmetic, each layout, bf16, f16 and f32) and on planted
bugs: each correct form passes bit for bit and is named; each bug is
caught by the arm meant to catch it, with a rerun line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32, f64 = np.float32, np.float64
# GQA with full rotation, and partial rotation (80/64, 256/64); CI's 2 cores.
SHAPES = [(5, 4, 2, 64, 64, 512), (3, 3, 1, 80, 64, 256), (2, 2, 1, 256, 64, 300)]

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: v.astype(f32), lambda v: v.astype(f32)),
}


def fma(a, b, c):
    """binary32 fma: the exact product in binary64, the sum rounded to odd
    (TwoSum), then once to binary32 (as core's fma_f32)."""
    p = a.astype(f64) * b.astype(f64)
    cd = np.broadcast_to(c, p.shape).astype(f64)
    s = p + cd
    pv = s - cd
    e = (p - pv) + (cd - (s - pv))
    bits = s.view(np.uint64)
    nudge = (e != 0) & ((bits & 1) == 0)
    up = (e > 0) == (s > 0)
    bits = np.where(nudge, np.where(up, bits + 1, bits - 1), bits)
    return bits.view(f64).astype(f32)


def numpy_rope(arithmetic="f32", is_neox=True, dtype="bfloat16", bug=None, name=None):
    """Rotary embedding in numpy under one arithmetic, or with a bug."""
    enc, dec = CODECS[dtype]

    def R(v):
        return dec(enc(np.asarray(v, f32)))

    def rotate(x, y, c, s):
        if arithmetic == "per_op":
            c, s = R(c), R(s)
            return R(R(x * c) - R(y * s)), R(R(y * c) + R(x * s))
        if arithmetic == "f32":
            return R(x * c - y * s), R(y * c + x * s)
        if arithmetic == "f32_fma":
            return R(fma(x, c, -(y * s))), R(fma(y, c, x * s))
        if arithmetic == "f32_fma_x":
            return R(fma(x, c, -(y * s))), R(fma(x, s, y * c))
        if arithmetic == "f32_fma_y":
            return R(fma(-y, s, x * c)), R(fma(y, c, x * s))
        return R(fma(-y, s, x * c)), R(fma(x, s, y * c))

    def f(positions, query, key, cache, out_query, out_key):
        cv = cache if cache.dtype == f32 else dec(cache)
        rot, half = cv.shape[1], cv.shape[1] // 2
        pos = positions
        if bug == "position-off-by-one":
            pos = np.minimum(positions + 1, cv.shape[0] - 1)
        if bug == "cache-by-token-index":
            pos = np.arange(len(positions)) % cv.shape[0]
        neox = is_neox != (bug == "layout-swapped")
        # A kernel rotating 8 pairs at a time with no tail loop.
        pairs = half // 8 * 8 if bug == "vector-tail-dropped" else half
        i1 = np.arange(pairs) if neox else 2 * np.arange(pairs)
        i2 = i1 + half if neox else i1 + 1
        for v, out, is_key in ((query, out_query, False), (key, out_key, True)):
            x = dec(v)
            if is_key and bug == "gqa-key-token-stride":
                # The key's token stride taken from the query's head count.
                stride = query.shape[1] * query.shape[2]
                flat = dec(key).reshape(-1)
                at = (np.arange(len(positions))[:, None] * stride + np.arange(x[0].size)[None, :])
                x = flat.take(at, mode="wrap").reshape(x.shape)
            c = cv[pos][:, None, :pairs]
            s = cv[pos][:, None, half : half + pairs]
            if bug == "cos-sin-swapped":
                c, s = s, c
            if bug == "sin-sign-flipped":
                s = -s
            o1, o2 = rotate(x[..., i1], x[..., i2], c, s)
            o = x.copy()
            o[..., i1], o[..., i2] = o1, o2
            if bug == "pass-through-zeroed":
                o[..., rot:] = 0
            if bug == "pass-through-rotated":
                # The pass-through dims scaled by the first pair's cosine.
                o[..., rot:] = R(x[..., rot:] * c[..., :1])
            out[...] = enc(o)

    f.__name__ = name or (bug or f"numpy_{arithmetic}").replace("-", "_")
    return f


def ties_rows(r):
    return [line for line in r.text.splitlines() if " TIES 0x" in line]


@pytest.mark.parametrize("arithmetic", ["per_op", "f32", "f32_fma", "f32_fma_second", "f32_fma_x", "f32_fma_y"])
@pytest.mark.parametrize("is_neox", [True, False])
def test_numpy_forms_pass_and_are_named_alone_on_ties(arithmetic, is_neox):
    r = ko.check_rotary_embedding(
        numpy_rope(arithmetic, is_neox), is_neox=is_neox, arithmetic=arithmetic,
        cache_dtype="float32", shapes=SHAPES, verbose=False,
    )
    assert r.ok and r.passed == r.cases == 3 * 3 + 2, r.text
    want = f"{arithmetic}/{'neox' if is_neox else 'gptj'}"
    rows = ties_rows(r)
    assert len(rows) == 3 and all(row.endswith(f"PASS  {want}") for row in rows), rows
    assert f"on every TIES case under: {want}; PASS" in r.text


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_other_dtypes_pass(dtype):
    for arithmetic in ["per_op", "f32_fma"]:
        r = ko.check_rotary_embedding(
            numpy_rope(arithmetic, dtype=dtype), arithmetic=arithmetic, dtype=dtype,
            cache_dtype="float32", shapes=SHAPES[1:2], verbose=False,
        )
        assert r.ok, r.text
        if dtype == "float32":
            # In f32, per_op is f32: both are named.
            assert "per_op/neox; f32/neox" in r.text or arithmetic != "per_op"


def test_a_model_dtype_cache_cannot_tell_the_f32_forms_apart(capsys):
    r = ko.check_rotary_embedding(numpy_rope("f32_fma"), arithmetic="f32_fma", shapes=SHAPES[:1])
    assert r.ok
    assert "on every TIES case under: f32/neox; f32_fma/neox; f32_fma_second/neox; f32_fma_x/neox; f32_fma_y/neox; PASS" in r.text
    assert capsys.readouterr().out.rstrip().endswith("PASS")


@pytest.mark.parametrize(
    "fn,kw,arm,caught_by",
    [
        (numpy_rope(bug="layout-swapped"), dict(), "RAND", "gptj"),
        (numpy_rope(bug="sin-sign-flipped"), dict(), "RAND", None),
        (numpy_rope(bug="cos-sin-swapped"), dict(), "RAND", None),
        (numpy_rope(bug="pass-through-zeroed"), dict(), "PARTIAL", None),
        (numpy_rope(bug="pass-through-rotated"), dict(), "PARTIAL", None),
        (numpy_rope(bug="position-off-by-one"), dict(), "POS", None),
        (numpy_rope(bug="cache-by-token-index"), dict(), "POS", None),
        (numpy_rope(bug="gqa-key-token-stride"), dict(), "RAND", None),
        # per_op declared, f32 computed: TIES names what it is.
        (numpy_rope("f32", name="f32_declared_per_op"), dict(arithmetic="per_op"), "TIES", "f32/neox"),
        # The unfused f32 declared, Triton's contraction computed.
        (numpy_rope("f32_fma", name="fma_declared_f32"), dict(cache_dtype="float32"), "TIES", "f32_fma/neox"),
    ],
)
def test_planted_bugs_are_caught(fn, kw, arm, caught_by):
    r = ko.check_rotary_embedding(fn, shapes=SHAPES, arms=[arm], verbose=False, **kw)
    assert not r.ok and r.failed >= 1
    fail = r.failures[0]
    assert "FAIL rotary_embedding" in fail and "reproduce:" in fail
    assert "rotary_embedding_case(" in fail
    if caught_by:
        assert caught_by in fail.split("the output matches:")[1], fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = re.search(r"shapes=\[\(([\d, ]+)\)\]", fail).group(1)
    again = ko.check_rotary_embedding(
        fn, shapes=[tuple(int(v) for v in dims.split(", "))], arms=[arm], seeds=[seed],
        verbose=False, **kw,
    )
    assert not again.ok


def test_a_clobbered_pass_through_dim_is_reported_as_such():
    r = ko.check_rotary_embedding(
        numpy_rope(bug="pass-through-zeroed"), shapes=SHAPES[1:2], arms=["PARTIAL"], verbose=False
    )
    assert "(past rotary_dim: passed through)" in r.failures[0]


def test_the_case_holds_the_oracles_output():
    c = ko.rotary_embedding_case(3, 3, 1, 80, 64, 256, "TIES", is_neox=False,
                                 arithmetic="f32_fma", cache_dtype="float32")
    assert c["query"].dtype == np.uint16 and c["cos_sin_cache"].dtype == f32
    q, k = ko.rotary_embedding(c["positions"], c["query"], c["key"], c["cos_sin_cache"],
                               is_neox=False, arithmetic="f32_fma")
    assert (q == c["out_query"]).all() and (k == c["out_key"]).all()
    assert (q[..., 64:] == c["query"][..., 64:]).all()
    q2, none = ko.rotary_embedding(c["positions"], c["query"], None, c["cos_sin_cache"],
                                   is_neox=False, arithmetic="f32_fma")
    assert none is None and (q2 == q).all()
    with pytest.raises(ValueError, match="positions"):
        ko.rotary_embedding(c["positions"] + 256, c["query"], None, c["cos_sin_cache"])
    with pytest.raises(TypeError, match="uint16"):
        ko.rotary_embedding(c["positions"], c["query"].astype(f32), None, c["cos_sin_cache"])
    with pytest.raises(ValueError, match="rotary_dim"):
        ko.rotary_embedding(c["positions"], c["query"][..., :62], None, c["cos_sin_cache"])


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(arithmetic="fma"),
        dict(dtype="float64"),
        dict(dtype="bfloat16", cache_dtype="float16"),
        dict(arms=["NOPE"]),
        dict(shapes=[(1, 1, 1, 64, 63, 8)]),
        dict(shapes=[(1 << 12, 64, 8, 128, 128, 8)]),
        dict(shapes=[(1, 1, 1, 64, 64, 1 << 20)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_rotary_embedding(fn, verbose=False, **kw)
    assert not calls


def test_wrong_returns_writes_and_refusals():
    oracle = numpy_rope()

    def returns_tuple(positions, query, key, cache, oq, ok):
        oracle(positions, query, key, cache, oq, ok)
        return oq.copy(), ok.copy()

    def in_place(positions, query, key, cache, oq, ok):
        oracle(positions, query, key, cache, oq, ok)
        query[...] = oq

    def wrong_dtype(positions, query, key, cache, oq, ok):
        oracle(positions, query, key, cache, oq, ok)
        return oq.astype(f32), ok

    def refuses(positions, query, key, cache, oq, ok):
        if cache.dtype != f32:
            raise ko.Refused("cos_sin_cache should be float32")
        oracle(positions, query, key, cache, oq, ok)

    kw = dict(shapes=SHAPES[:1], arms=["RAND"], verbose=False)
    assert ko.check_rotary_embedding(returns_tuple, **kw).ok
    r = ko.check_rotary_embedding(in_place, **kw)
    assert not r.ok and "wrote its input(s): query" in r.failures[0]
    r = ko.check_rotary_embedding(wrong_dtype, **kw)
    assert not r.ok and "float32" in r.failures[0]
    r = ko.check_rotary_embedding(refuses, **kw)
    assert r.refused == 1 and not r.ok
    r = ko.check_rotary_embedding(refuses, cache_dtype="float32", **kw)
    assert r.ok and r.refused == 0


def test_partial_is_skipped_on_full_rotation_shapes():
    r = ko.check_rotary_embedding(numpy_rope(), shapes=SHAPES[:1], arms=["PARTIAL"], verbose=False)
    assert r.cases == 0 and not r.ok


def test_the_default_shapes_catch_a_dropped_vector_tail():
    # Every pair count of SHAPES is a multiple of 8, so the bug passes there;
    # the default shapes hold 10 and 3 pairs.
    bug = numpy_rope(bug="vector-tail-dropped")
    assert ko.check_rotary_embedding(bug, shapes=SHAPES, arms=["RAND"], verbose=False).ok
    r = ko.check_rotary_embedding(bug, arms=["RAND"], verbose=False)
    assert not r.ok and r.failed == 2
    assert all(re.search(r"shapes=\[\((3, 2, 1, 80, 20|2, 2, 2, 32, 6), ", f) for f in r.failures)
