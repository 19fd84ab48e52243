"""check_reshape_and_cache on numpy KV-cache writes written from the rules
(each layout, each cache dtype, each scale rule and overflow policy) and on
planted bugs: each correct form passes bit for bit, every unwritten element
keeping its poison, and is named; each bug fails under the default arms and
shapes, caught by the arm meant to catch it, with a rerun line that fails
again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
SAT, NONSAT = ko.Overflow.SAT_FINITE, ko.Overflow.NON_SATURATING
# GQA decode, a head size of 48 (paged FP8 packs 16), block size 1; CI's 2 cores.
SHAPES = [(8, 4, 64, 16, 16), (13, 2, 48, 4, 8), (6, 3, 32, 1, 9)]

DECODE = {
    "bfloat16": (ko.decode_bf16, ko.encode_bf16),
    "float16": (ko.decode_f16, ko.encode_f16),
    "float32": (lambda v: v.astype(f32), lambda v: v.astype(f32)),
}
ENCODE = {"fp8_e4m3": ko.encode_e4m3, "fp8_e5m2": ko.encode_e5m2}


def rtz(codes, v, kv):
    """Codes rounded toward zero: one code down where nearest even went up."""
    dec = ko.decode_e4m3 if kv == "fp8_e4m3" else ko.decode_e5m2
    back = dec(codes)
    up = np.isfinite(back) & np.isfinite(v) & (np.abs(back) > np.abs(v)) & ((codes & 0x7F) > 0)
    return np.where(up, codes - 1, codes).astype(np.uint8)


def make_convert(kv="auto", dtype="bfloat16", rule="divide", overflow=SAT, bug=None):
    """One element's conversion (rule KV-CONVERT) in numpy, or with a bug."""
    dec, enc = DECODE[dtype]

    def convert(bits, s):
        with np.errstate(all="ignore"):  # SAT's overflows and NaNs
            return convert_(bits, s)

    def convert_(bits, s):
        if kv == "auto":
            if bug == "nan-quieted":  # through float and back
                return enc(dec(bits))
            return bits
        x, s = dec(bits), f32(s[0])
        op = rule.replace("_in_dtype", "")
        if op == "divide_scale":  # the scale rounded to the model's dtype first
            s = dec(enc(np.array([s], f32)))[0]
        if bug == "divides-by-reciprocal":  # x / fl(1/s) for x * s
            q = x / (f32(1) / s)
        elif bug == "scale-multiplied" or op == "multiply":
            q = x * s
        elif bug == "reciprocal-for-divide" or op == "reciprocal":
            q = x * (f32(1) / s)
        else:
            q = x / s
        if rule.endswith("_in_dtype"):
            q = dec(enc(q))
        o = NONSAT if bug == "no-saturation" else overflow
        codes = ENCODE[kv](q.astype(f32), o)
        return rtz(codes, q, kv) if bug == "round-toward-zero" else codes

    return convert


def numpy_cache(layout="nhd", kv="auto", dtype="bfloat16", rule="divide", overflow=SAT, bug=None, name=None):
    """A KV-cache write in numpy under one declared arithmetic, or with a bug."""
    convert = make_convert(kv, dtype, rule, overflow, bug)

    def f(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        T, H, hs = key.shape
        kc = convert(key, k_scale)
        vc = convert(value, k_scale if bug == "k-scale-for-values" else v_scale)
        if bug == "values-times-reciprocal":  # keys x / s, values x * fl(1/s)
            vc = make_convert(kv, dtype, "reciprocal", overflow)(value, v_scale)
        keep = slot_mapping >= 0
        if bug == "pad-as-last-block":
            keep[:] = True  # -1 indexes from the end
        if bug == "last-token-dropped":  # a grid one token short
            keep[-1] = False
        t = np.nonzero(keep)[0]
        s = slot_mapping[t]
        bs = key_cache.shape[1] if layout == "nhd" else key_cache.shape[2 if layout == "hnd" else 3]
        nb = key_cache.shape[0]
        b, o = s // bs, s % bs
        if bug == "run-fast-path" and len(t) > 1 and (t == np.arange(len(t))).all() and (np.diff(s) == 1).all():
            # A prefill's fast path (HND): the valid tokens lead and their slots
            # run on by one; the block of the first slot, offsets counted on
            # past the block's end.
            o = s[0] % bs + np.arange(len(t))
            idx = ((((s[0] // bs) * H + np.arange(H)[None, :]) * bs + o[:, None]) * hs)[..., None] + np.arange(hs)
            key_cache.reshape(-1)[idx % key_cache.size] = kc[t]
            value_cache.reshape(-1)[idx % value_cache.size] = vc[t]
            return
        if bug == "block-offset-swapped":
            b, o = s % nb, s // nb % bs
        kc, vc = kc[t], vc[t]
        if bug == "tail-dropped":  # vectors of 8 over the token's row, no tail loop
            n = H * hs // 8 * 8
            kc = kc.reshape(len(t), -1)[:, :n]
            vc = vc.reshape(len(t), -1)[:, :n]
            key_cache.reshape(nb, bs, -1)[b, o, :n] = kc
            value_cache.reshape(nb, bs, -1)[b, o, :n] = vc
            return
        if layout == "nhd":
            key_cache[b, o] = kc
            value_cache[b, o] = vc
        elif layout == "hnd":
            key_cache[b, :, o, :] = kc
            value_cache[b, :, o, :] = vc
        else:
            x = key_cache.shape[4]
            if bug == "x-wrong":  # x taken as 8 elements whatever the element size
                X = 8
                h, d = np.meshgrid(np.arange(H), np.arange(hs), indexing="ij")
                idx = ((((b[:, None, None] * H + h) * (hs // X) + d // X) * bs + o[:, None, None]) * X + d % X)
                key_cache.reshape(-1)[idx] = kc
            else:
                key_cache[b, :, :, o, :] = kc.reshape(len(t), H, hs // x, x)
            if bug == "value-in-key-layout":  # the value cache indexed as the key's
                h, d = np.meshgrid(np.arange(H), np.arange(hs), indexing="ij")
                idx = ((((b[:, None, None] * H + h) * (hs // x) + d // x) * bs + o[:, None, None]) * x + d % x)
                value_cache.reshape(-1)[idx] = vc
            else:
                value_cache[b, :, :, o] = vc
        if bug == "past-head-size":  # each head writes head_size + 1 elements
            flat_k, flat_v = key_cache.reshape(-1), value_cache.reshape(-1)
            src_k, src_v = convert(key, k_scale).reshape(-1), convert(value, v_scale).reshape(-1)
            for i, tok in enumerate(t):
                for h in range(H):
                    if layout == "nhd":
                        at = ((b[i] * bs + o[i]) * H + h) * hs + hs
                    else:
                        at = ((b[i] * H + h) * bs + o[i]) * hs + hs
                    src = ((tok * H + h) * hs + hs) % src_k.size
                    flat_k[at % flat_k.size] = src_k[src]
                    flat_v[at % flat_v.size] = src_v[src]

    f.__name__ = name or (bug or f"numpy_{layout}_{kv}_{rule}").replace("-", "_")
    return f


def edge_rows(r):
    return [line for line in r.text.splitlines() if re.search(r" (SAT|TIES) 0x", line)]


@pytest.mark.parametrize("layout", ["nhd", "hnd", "paged"])
@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3", "fp8_e5m2"])
def test_each_layout_and_cache_dtype_passes(layout, kv):
    r = ko.check_reshape_and_cache(numpy_cache(layout, kv), layout=layout, kv_cache_dtype=kv,
                                   shapes=SHAPES, verbose=False)
    arms = 4 if kv == "auto" else 5
    assert r.ok and r.passed == r.cases == 3 * arms, r.text
    want = "copy" if kv == "auto" else "divide/sat_finite"
    rows = [line for line in r.text.splitlines() if " 0x" in line]
    assert all(want in row.split("PASS", 1)[1] for row in rows), rows
    if kv != "auto":
        assert "on every SAT and TIES case under: divide/sat_finite; PASS" in r.text


RULES = ["divide", "reciprocal", "multiply", "divide_in_dtype", "reciprocal_in_dtype", "multiply_in_dtype",
         "divide_scale_in_dtype"]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("overflow", [SAT, NONSAT])
def test_each_rule_and_overflow_passes_and_is_named_on_the_edges(rule, overflow):
    r = ko.check_reshape_and_cache(numpy_cache(kv="fp8_e4m3", rule=rule, overflow=overflow),
                                   kv_cache_dtype="fp8", scale_rule=rule, overflow=overflow,
                                   shapes=SHAPES, verbose=False)
    assert r.ok and r.passed == 15, r.text
    o = "sat_finite" if overflow == SAT else "non_saturating"
    named = r.text.rsplit("on every SAT and TIES case under: ", 1)[1].rsplit("; PASS", 1)[0]
    twins = {"divide_in_dtype": "reciprocal_in_dtype", "reciprocal_in_dtype": "divide_in_dtype"}
    allowed = {f"{rule}/{o}"} | ({f"{twins[rule]}/{o}"} if rule in twins else set())
    assert f"{rule}/{o}" in named.split("; ") and set(named.split("; ")) <= allowed, named


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_other_dtypes_pass(dtype):
    for layout, kv in [("paged", "auto"), ("nhd", "fp8_e5m2"), ("hnd", "fp8_e4m3")]:
        r = ko.check_reshape_and_cache(numpy_cache(layout, kv, dtype=dtype), layout=layout,
                                       kv_cache_dtype=kv, dtype=dtype, shapes=SHAPES, verbose=False)
        assert r.ok, r.text
        if dtype == "float32" and kv != "auto":
            # In f32 the rules that round to the dtype are the others.
            assert "divide/sat_finite; divide_in_dtype/sat_finite" in r.text


# Each bug, what it is declared against, and the arm (of the defaults) that
# catches it. Every bug is run on the default arms and shapes. The last four
# passed every default arm and shape before the cold review's fixes (F1, F3,
# F4; F2 on the default shapes with T % 3 == 2: see its own test).
BUGS = [
    ("pad-as-last-block", dict(), "RAND", "the cache's last slot, where slot -1 lands"),
    ("block-offset-swapped", dict(), "RAND", None),
    ("x-wrong", dict(layout="paged", dtype="float32"), "RAND", None),
    ("x-wrong", dict(layout="paged", kv="fp8_e4m3"), "RAND", None),
    ("tail-dropped", dict(), "RAND", "written elements differ"),
    ("value-in-key-layout", dict(layout="paged"), "RAND", None),
    ("scale-multiplied", dict(kv="fp8_e4m3"), "RAND", "multiply/sat_finite"),
    ("reciprocal-for-divide", dict(kv="fp8_e4m3"), "TIES", "reciprocal/sat_finite"),
    ("no-saturation", dict(kv="fp8_e4m3"), "SAT", "divide/non_saturating"),
    ("no-saturation", dict(kv="fp8_e5m2"), "SAT", "divide/non_saturating"),
    ("round-toward-zero", dict(kv="fp8_e4m3"), "RAND", "none known"),
    ("k-scale-for-values", dict(kv="fp8_e4m3"), "RAND", "none known"),
    ("past-head-size", dict(), "RAND", "elements no token writes changed"),
    ("nan-quieted", dict(), "SAT", "none known"),
    # F1: values on the reciprocal, keys divided: only an EXACT value side sees it.
    ("values-times-reciprocal", dict(kv="fp8_e4m3"), "TIES", "value_cache"),
    # F2: a grid one token short.
    ("last-token-dropped", dict(), "SLOTS", "written elements differ"),
    # F3: a contiguous run's fast path, the block taken from the run's first slot.
    ("run-fast-path", dict(layout="hnd"), "PREFILL", None),
    # F4: declared multiply, x / fl(1/s).
    ("divides-by-reciprocal", dict(kv="fp8_e4m3", rule="multiply"), "TIES", "none known"),
]


def check_kw(kw):
    return dict(layout=kw.get("layout", "nhd"), kv_cache_dtype=kw.get("kv", "auto"),
                dtype=kw.get("dtype", "bfloat16"), scale_rule=kw.get("rule", "divide"))


def bug_cache(bug, kw):
    return numpy_cache(kw.get("layout", "nhd"), kw.get("kv", "auto"), kw.get("dtype", "bfloat16"),
                       kw.get("rule", "divide"), bug=bug)


# Bugs invisible to every arm but the one that catches them: one binary32
# ulp, which moves an FP8 code only at a midpoint (TIES's EXACT side), or a
# contiguous run of slots (PREFILL).
ONLY = {"reciprocal-for-divide", "values-times-reciprocal", "run-fast-path", "divides-by-reciprocal"}


def arms_failing(r):
    return {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}


@pytest.mark.parametrize("bug,kw,arm,caught_by", BUGS)
def test_planted_bugs_fail_under_the_defaults(bug, kw, arm, caught_by):
    fn = bug_cache(bug, kw)
    r = ko.check_reshape_and_cache(fn, verbose=False, **check_kw(kw))
    assert not r.ok and r.failed >= 1
    arms = arms_failing(r)
    assert arm in arms, (arm, arms)
    if bug in ONLY:
        assert arms == {arm}, r.text
    ties = len(ko.KV_CACHE_SHAPES)
    if bug in ("reciprocal-for-divide", "divides-by-reciprocal"):
        assert r.failed == ties  # every TIES case has an EXACT side
    if bug == "values-times-reciprocal":
        # Keys and values take turns being EXACT: the default shapes hold
        # both turns, and the cases that fail are those whose values are.
        assert 0 < r.failed < ties, r.text
        assert all("key_cache:" not in f and "value_cache:" in f for f in r.failures)
    fail = next(f for f in r.failures if f"arm={arm}" in f)
    assert "FAIL reshape_and_cache" in fail and "reproduce:" in fail
    assert "reshape_and_cache_case(" in fail
    if caught_by:
        assert caught_by in fail, fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = re.search(r"shapes=\[\(([\d, ]+)\)\]", fail).group(1)
    again = ko.check_reshape_and_cache(fn, shapes=[tuple(int(v) for v in dims.split(", "))], arms=[arm],
                                       seeds=[seed], verbose=False, **check_kw(kw))
    assert not again.ok


def test_the_last_token_writes_in_every_arm_family():
    # F2: on the default shapes with T % 3 == 2 every arm made the last
    # token padding, so a grid one token short passed all of them. Now
    # SLOTS never pads it, and RAND, PREFILL and SAT write it on half their
    # seeds.
    shapes = [d for d in ko.KV_CACHE_SHAPES if d[0] % 3 == 2]
    assert len(shapes) == 5
    fn = bug_cache("last-token-dropped", {})
    r = ko.check_reshape_and_cache(fn, shapes=shapes, verbose=False)
    failing = {(re.search(r"arm=(\w+)", f).group(1), re.search(r"shapes=\[\(([\d, ]+)\)", f).group(1))
               for f in r.failures}
    assert {s for a, s in failing if a == "SLOTS"} == {", ".join(map(str, d)) for d in shapes}
    assert {a for a, _ in failing} >= {"SLOTS", "RAND", "PREFILL", "SAT"}, failing
    fp8 = ko.check_reshape_and_cache(bug_cache("last-token-dropped", dict(kv="fp8_e4m3")),
                                     kv_cache_dtype="fp8", shapes=shapes, arms=["TIES"], verbose=False)
    assert not fp8.ok


def test_the_default_shapes_catch_a_dropped_tail():
    # Every row of SHAPES is a multiple of 8 elements: the bug passes there;
    # the default shapes hold a row of 36.
    bug = numpy_cache(bug="tail-dropped")
    assert ko.check_reshape_and_cache(bug, shapes=SHAPES, arms=["RAND"], verbose=False).ok
    r = ko.check_reshape_and_cache(bug, arms=["RAND"], verbose=False)
    assert not r.ok and r.failed == 1 and "shapes=[(5, 1, 36, 16, 3)]" in r.failures[0]


def test_the_case_holds_the_oracles_caches():
    c = ko.reshape_and_cache_case(13, 2, 48, 4, 8, "TIES", layout="paged", kv_cache_dtype="fp8_e5m2",
                                  scale_rule="reciprocal", overflow=NONSAT)
    assert c["key_cache"].shape == (8, 2, 3, 4, 16) and c["value_cache"].shape == (8, 2, 48, 4)
    assert c["key_cache"].dtype == np.uint8 and c["key"].dtype == np.uint16
    args = [c[n] for n in ("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale", "v_scale")]
    kw = dict(layout="paged", kv_cache_dtype="fp8_e5m2", scale_rule="reciprocal", overflow=NONSAT)
    k, v = ko.reshape_and_cache(*args, **kw)
    assert (k == c["out_key_cache"]).all() and (v == c["out_value_cache"]).all()
    fn = numpy_cache("paged", "fp8_e5m2", rule="reciprocal", overflow=NONSAT)
    kc, vc = c["key_cache"].copy(), c["value_cache"].copy()
    fn(c["key"], c["value"], kc, vc, c["slot_mapping"], c["k_scale"], c["v_scale"])
    assert (kc == k).all() and (vc == v).all()
    k32, v32 = ko.reshape_and_cache(*args[:4], c["slot_mapping"].astype(np.int32), *args[5:], **kw)
    assert (k32 == k).all() and (v32 == v).all()
    with pytest.raises(TypeError, match="slot_mapping"):
        ko.reshape_and_cache(*args[:4], c["slot_mapping"].astype(f32), *args[5:], **kw)
    with pytest.raises(ValueError, match="slot"):
        ko.reshape_and_cache(*args[:4], c["slot_mapping"] + 1000, *args[5:], **kw)
    with pytest.raises(ValueError, match="share a slot"):
        ko.reshape_and_cache(*args[:4], np.zeros(13, np.int64), *args[5:], **kw)
    with pytest.raises(TypeError, match="uint8"):
        ko.reshape_and_cache(*args[:2], k.astype(f32), *args[3:], **kw)
    with pytest.raises(ValueError, match="positive"):
        ko.reshape_and_cache(*args[:5], 0.0, 1.0, **kw)
    with pytest.raises(ValueError, match="needs"):
        ko.reshape_and_cache(*args[:2], k.reshape(8, 2, 6, 4, 8), *args[3:], **kw)


def test_paged_defaults_print_the_shapes_they_skip():
    # FP8 codes pack x = 16 elements: head sizes 72, 40 and 36 cannot run.
    r = ko.check_reshape_and_cache(numpy_cache("paged", "fp8_e4m3"), layout="paged", kv_cache_dtype="fp8",
                                   arms=["RAND"], verbose=False)
    assert r.ok and r.cases == 7, r.text
    rows = [line for line in r.text.splitlines() if "skipped, a default shape" in line]
    assert [row.split()[0] for row in rows] == ["7,2,72,16,4", "6,3,40,32,2", "5,1,36,16,3"]
    assert all("multiple of it" in row for row in rows)
    assert "3 default shape(s) skipped" in r.text.splitlines()[-1]


def test_auto_copies_every_bit():
    c = ko.reshape_and_cache_case(6, 3, 32, 1, 9, "SAT", dtype="bfloat16")
    k, _ = ko.reshape_and_cache(*[c[n] for n in ("key", "value", "key_cache", "value_cache", "slot_mapping",
                                                 "k_scale", "v_scale")])
    t = np.nonzero(c["slot_mapping"] >= 0)[0]
    assert (k[c["slot_mapping"][t], 0] == c["key"][t]).all()
    assert ((c["key"] & 0x7FC0) == 0x7F80).any() and ((c["key"] & 0x7F) != 0).any()  # a signaling NaN


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(layout="NHDX"),
        dict(kv_cache_dtype="int8"),
        dict(dtype="float64"),
        dict(scale_rule="div"),
        dict(arms=["NOPE"]),
        dict(layout="paged", kv_cache_dtype="fp8", shapes=[(7, 2, 72, 16, 4)]),
        dict(shapes=[(1, 0, 64, 16, 4)]),
        dict(shapes=[(1 << 15, 1, 8, 16, 4096)]),
        dict(shapes=[(1, 8, 128, 16, 1 << 12)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_reshape_and_cache(fn, verbose=False, **kw)
    assert not calls


def test_returns_writes_and_refusals():
    oracle = numpy_cache()

    def returns_tuple(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        kc, vc = key_cache.copy(), value_cache.copy()
        oracle(key, value, kc, vc, slot_mapping, k_scale, v_scale)
        return kc, vc

    def writes_key(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        oracle(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
        key[...] = 0

    def refuses(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        if key_cache.shape[1] == 1:
            raise ko.Refused("block_size 1")
        oracle(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)

    kw = dict(shapes=SHAPES, arms=["RAND"], verbose=False)
    assert ko.check_reshape_and_cache(returns_tuple, **kw).ok
    r = ko.check_reshape_and_cache(writes_key, **kw)
    assert not r.ok and "wrote its input(s): key" in r.failures[0]
    r = ko.check_reshape_and_cache(refuses, **kw)
    assert r.refused == 1 and r.passed == 2 and r.ok


def test_ties_does_not_run_on_auto():
    r = ko.check_reshape_and_cache(numpy_cache(), shapes=SHAPES, arms=["TIES"], verbose=False)
    assert r.cases == 0 and not r.ok


MLA_SHAPES = [(8, 64, 16, 16, 4), (6, 36, 12, 1, 9)]


def numpy_mla(kv="auto", dtype="bfloat16", rule="divide", overflow=SAT, bug=None):
    """MLA's latent-cache write in numpy (rule KV-MLA), or with a bug."""
    convert = make_convert(kv, dtype, rule, overflow, bug)

    def f(kv_c, k_pe, kv_cache, slot_mapping, scale):
        parts = (k_pe, kv_c) if bug == "pe-first" else (kv_c, k_pe)
        if bug == "latent-tail-dropped":  # the latent in vectors of 8, no tail loop
            n = kv_c.shape[1] // 8 * 8
            parts = (kv_c[:, :n], k_pe)
        row = convert(np.concatenate(parts, axis=1), scale)
        keep = slot_mapping >= 0
        if bug == "pad-as-last-block":
            keep[:] = True
        t = np.nonzero(keep)[0]
        s, bs = slot_mapping[t], kv_cache.shape[1]
        if bug == "latent-tail-dropped":
            pe = k_pe.shape[1]
            kv_cache[s // bs, s % bs, :n] = row[t, :n]
            kv_cache[s // bs, s % bs, -pe:] = row[t, n:]
            return
        kv_cache[s // bs, s % bs] = row[t]

    f.__name__ = (bug or f"numpy_mla_{kv}_{rule}").replace("-", "_")
    return f


@pytest.mark.parametrize("kv,rule,overflow", [
    ("auto", "divide", SAT), ("fp8_e4m3", "divide", SAT), ("fp8_e5m2", "reciprocal", NONSAT),
    ("fp8_e4m3", "multiply_in_dtype", SAT), ("fp8_e4m3", "divide_scale_in_dtype", NONSAT),
])
def test_mla_forms_pass(kv, rule, overflow):
    r = ko.check_concat_and_cache_mla(numpy_mla(kv, rule=rule, overflow=overflow), kv_cache_dtype=kv,
                                      scale_rule=rule, overflow=overflow, shapes=MLA_SHAPES, verbose=False)
    assert r.ok and r.passed == r.cases == 2 * (4 if kv == "auto" else 5), r.text
    o = "sat_finite" if overflow == SAT else "non_saturating"
    want = "copy" if kv == "auto" else f"{rule}/{o}"
    assert f"every compared case under: {want}" in r.text


@pytest.mark.parametrize("bug,kv,arm", [
    ("pe-first", "auto", "RAND"),
    ("latent-tail-dropped", "auto", "RAND"),
    ("pad-as-last-block", "fp8_e4m3", "RAND"),
    ("no-saturation", "fp8_e4m3", "SAT"),
    ("reciprocal-for-divide", "fp8_e4m3", "TIES"),
])
def test_mla_planted_bugs_fail_under_the_defaults(bug, kv, arm):
    r = ko.check_concat_and_cache_mla(numpy_mla(kv, bug=bug), kv_cache_dtype=kv, verbose=False)
    assert not r.ok
    fail = next(f for f in r.failures if f"arm={arm}" in f)
    assert "FAIL concat_and_cache_mla" in fail and "concat_and_cache_mla_case(" in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\(([\d, ]+)\)\]", fail).group(1).split(", "))
    assert not ko.check_concat_and_cache_mla(numpy_mla(kv, bug=bug), kv_cache_dtype=kv, shapes=[dims],
                                             arms=[arm], seeds=[seed], verbose=False).ok


def test_the_mla_case_holds_the_oracles_cache():
    c = ko.concat_and_cache_mla_case(6, 36, 12, 1, 9, "SAT", kv_cache_dtype="fp8", scale_rule="reciprocal")
    assert c["kv_c"].shape == (6, 36) and c["k_pe"].shape == (6, 12) and c["kv_cache"].shape == (9, 1, 48)
    args = [c[n] for n in ("kv_c", "k_pe", "kv_cache", "slot_mapping", "scale")]
    out = ko.concat_and_cache_mla(*args, kv_cache_dtype="fp8", scale_rule="reciprocal")
    assert (out == c["out_kv_cache"]).all()
    kc = c["kv_cache"].copy()
    numpy_mla("fp8_e4m3", rule="reciprocal")(c["kv_c"], c["k_pe"], kc, c["slot_mapping"], c["scale"])
    assert (kc == out).all()
    with pytest.raises(ValueError, match="kv_lora_rank"):
        ko.concat_and_cache_mla(c["kv_c"], c["k_pe"], c["kv_cache"][..., :40], *args[3:], kv_cache_dtype="fp8")


def test_a_slot_split_by_shift_and_mask_fails_the_default_shapes():
    # s >> log2(block_size), s & (block_size - 1): right for powers of two
    # only; a default shape of each check has 48 slots a block.
    def split(s, bs):
        return s >> (int(bs).bit_length() - 1), s & (bs - 1)

    def cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        c = make_convert()
        t = np.nonzero(slot_mapping >= 0)[0]
        b, o = split(slot_mapping[t], key_cache.shape[1])
        key_cache[b, o] = c(key, k_scale)[t]
        value_cache[b, o] = c(value, v_scale)[t]

    def mla(kv_c, k_pe, kv_cache, slot_mapping, scale):
        c = make_convert()
        row = c(np.concatenate([kv_c, k_pe], 1), scale)
        t = np.nonzero(slot_mapping >= 0)[0]
        b, o = split(slot_mapping[t], kv_cache.shape[1])
        kv_cache[b, o] = row[t]

    r = ko.check_reshape_and_cache(cache, verbose=False)
    assert not r and all("(9, 2, 80, 48, 4)" in f for f in r.failures), r.failures[:1]
    r = ko.check_concat_and_cache_mla(mla, verbose=False)
    assert not r and all("(7, 256, 32, 48, 2)" in f for f in r.failures), r.failures[:1]


def by_key(seen=None, pad_first=False):
    """A write sized by key's rows, not slot_mapping's: the padding rows
    read the slot map past its end (modelled as slot 0, a zeroed buffer's
    next element), written before the tokens' rows or after them."""

    def f(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        T, n = key.shape[0], slot_mapping.shape[0]
        if seen is not None:
            seen.append(T - n)
        if pad_first and T > n:
            numpy_cache()(key[n:], value[n:], key_cache, value_cache,
                          np.zeros(T - n, slot_mapping.dtype), k_scale, v_scale)
            numpy_cache()(key[:n], value[:n], key_cache, value_cache, slot_mapping, k_scale, v_scale)
            return
        slots = np.concatenate([slot_mapping, np.zeros(T - n, slot_mapping.dtype)])
        numpy_cache()(key, value, key_cache, value_cache, slots, k_scale, v_scale)

    return f


@pytest.mark.parametrize("pad_first", [False, True])
def test_rand_hands_rows_past_the_slot_map_unless_declared_otherwise(pad_first):
    seen = []
    r = ko.check_reshape_and_cache(by_key(seen, pad_first), arms=["SLOTS", "RAND"],
                                   shapes=[(8, 2, 16, 16, 4)], trials=4, verbose=False)
    assert not r and r.failed == 4 and all('arms=["RAND"]' in f for f in r.failures), r.text
    assert "past slot_mapping's 8 tokens" in r.failures[0]
    assert 0 in seen and max(seen) <= 7 and len(set(seen)) > 1
    seen.clear()
    r = ko.check_reshape_and_cache(by_key(seen, pad_first), graph_padding=False, arms=["RAND"],
                                   shapes=[(8, 2, 16, 16, 4)], trials=4, verbose=False)
    assert r and set(seen) == {0}, r.text
    m = ko.check_concat_and_cache_mla(numpy_mla(), arms=["RAND"], trials=2, verbose=False)
    assert m, m.text


def test_the_failing_case_line_hands_the_padding_rows():
    # The failure's `reshape_and_cache_case(...)` line gives the arrays the
    # kernel got, padding rows included; the oracle takes them and ignores
    # the rows past slot_mapping's tokens.
    r = ko.check_reshape_and_cache(by_key(), arms=["RAND"], shapes=[(8, 2, 16, 16, 4)], verbose=False)
    assert not r
    line = r.failures[0].split("the case's arrays and the oracle's caches:\n  ")[1].splitlines()[0]
    c = eval(line, {"kernel_oracle": ko, "Overflow": ko.Overflow})
    assert c["key"].shape[0] > c["slot_mapping"].shape[0]
    kc, vc = c["key_cache"].copy(), c["value_cache"].copy()
    by_key()(c["key"], c["value"], kc, vc, c["slot_mapping"], c["k_scale"], c["v_scale"])
    assert not (np.array_equal(kc, c["out_key_cache"]) and np.array_equal(vc, c["out_value_cache"]))
    okc, ovc = ko.reshape_and_cache(c["key"], c["value"], c["key_cache"], c["value_cache"],
                                    c["slot_mapping"], c["k_scale"], c["v_scale"])
    assert np.array_equal(okc, c["out_key_cache"]) and np.array_equal(ovc, c["out_value_cache"])
