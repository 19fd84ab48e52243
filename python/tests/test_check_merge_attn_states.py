"""check_merge_attn_states on numpy merges written from the field's
kernels (vLLM's CUDA `merge_attn_states`: base e, any infinity empty, the
prefix copied when both sides are empty; vLLM's Triton kernel after its
NaN fix: `exp2` of a scaled argument, the maximum clamped to -1e30 and
1e-10 in the denominator, zeros when both are empty; a FlashInfer-style
base-2, token-major merge that divides the unnormalised sum) and on
planted bugs: each correct form passes under its declaration and is named
by it; each bug fails, under the arm meant for it, with a rerun line that
fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32
INF = f32(np.inf)

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: np.asarray(v, f32), lambda v: np.asarray(v, f32)),
}
LOG2E = f32(np.log2(np.e))
LN2 = f32(np.log(2.0))


def numpy_merge(form="cuda", dtype="bfloat16", base="e", layout="head_major", bug=None,
                name=None):
    """A merge in numpy float32. `form`: "cuda" (vLLM's CUDA kernel:
    `expf`, two divisions, the prefix copied when both sides are empty),
    "triton" (vLLM's Triton kernel after PR 39148: `tl.exp` as `exp2` of
    `x log2(e)`, `tl.log` as `log2(x) ln 2`, the maximum clamped to
    -1e30, 1e-10 added to the scales' denominator: zeros when both are
    empty), "unnormalised" (FlashInfer's `state_t::merge`: the sum `o_b +
    w o_s` then one division; zeros when both are empty), "reciprocal"
    (`1 / se` once, scales by products, the weighted sum fused) or
    "fa-combine" (FlashAttention 2's split-KV combine for two splits,
    declared scales="lse_out": the scales `expf(lse - lse_out)` from the rounded
    output LSE, the sum as FMAs from zero; zeros when both are empty). `base`
    and `layout`: what the kernel computes and reads (not what it
    declares); `bug`: one of BUGS' names."""
    enc, dec = CODECS[dtype]
    two = base == "2"
    ex = np.exp2 if two else np.exp
    lg = np.log2 if two else np.log

    def R(x):
        return dec(enc(np.asarray(x, f32)))

    def fn(p_out, p_lse, s_out, s_lse, out, out_lse=None):
        P, S = dec(p_out), dec(s_out)
        T, H, D = P.shape
        # [T][H] views of the LSE buffers as this kernel reads them.
        tm = (layout == "token_major") != (bug == "layout-transposed")
        rd = (lambda a: a.reshape(T, H)) if tm else (lambda a: a.reshape(H, T).T)
        pl, sl = rd(p_lse).astype(f32), rd(s_lse).astype(f32)
        if bug != "pos-inf-not-empty":
            pl = np.where(pl == INF, -INF, pl)
            sl = np.where(sl == INF, -INF, sl)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            m = np.maximum(pl, sl)
            both = m == -INF
            if form == "triton" and bug != "nan-both-empty":
                m = np.maximum(m, f32(-1e30))
            if bug == "no-max":
                m = np.zeros_like(m)
            if form == "triton":
                E = lambda x: np.exp2((x * LOG2E).astype(f32)).astype(f32)
                Lg = lambda x: (np.log2(x) * LN2).astype(f32)
            else:
                E = lambda x: ex(x).astype(f32)
                Lg = lambda x: lg(x).astype(f32)
            ps, ss = E((pl - m).astype(f32)), E((sl - m).astype(f32))
            if bug == "ftz":  # flush-to-zero: subnormal weights are 0
                ps = np.where(ps < np.finfo(f32).tiny, f32(0), ps)
                ss = np.where(ss < np.finfo(f32).tiny, f32(0), ss)
            se = (ps + ss).astype(f32)
            lse = (Lg(se) + m).astype(f32)
            if bug == "lse-no-log":
                lse = m
            if bug == "lse-no-max":
                lse = Lg(se)
            den = (se + f32(1e-10)).astype(f32) if form == "triton" else se
            if bug == "logistic-no-max":  # 1 / (1 + e^(s - p)), no maximum
                z = E((sl - pl).astype(f32))
                pa = (f32(1) / (f32(1) + z)).astype(f32)
                sa = (z / (f32(1) + z)).astype(f32)
            elif form == "fa-combine":
                lo = np.where(both, -INF, lse)  # FA2 writes +inf there
                pa = E((pl - lo).astype(f32))
                sa = E((sl - lo).astype(f32))
            elif form == "reciprocal":
                r = (f32(1) / den).astype(f32)
                pa, sa = (ps * r).astype(f32), (ss * r).astype(f32)
            else:
                pa, sa = (ps / den).astype(f32), (ss / den).astype(f32)
            if bug == "scales-not-normalised":
                pa, sa = ps, ss
            if bug == "weights-swapped":
                pa, sa = sa, pa
            pa, sa = pa[..., None], sa[..., None]
            if form == "unnormalised":
                o = ((P * ps[..., None] + S * ss[..., None]).astype(f32) / se[..., None])
            elif form == "reciprocal":
                o = (P.astype(np.float64) * pa + (S * sa).astype(f32)).astype(f32)  # fused
            elif form == "fa-combine":  # o = fma(s_scale, s, p_scale * p)
                o = (S.astype(np.float64) * sa + (P * pa).astype(f32)).astype(f32)
            elif bug == "cast-before-sum":
                o = R(P * pa) + R(S * sa)
            else:
                o = (P * pa).astype(f32) + (S * sa).astype(f32)
            o = np.asarray(o, f32)
            if bug != "nan-both-empty":
                if form == "cuda" or form == "reciprocal":
                    o = np.where(both[..., None], P, o)
                elif form in ("unnormalised", "fa-combine"):
                    o = np.where(both[..., None], f32(0), o)
                lse = np.where(both, -INF, lse)
            if bug == "gap-early-out":  # the smaller side dropped past a gap of 8
                far = np.abs(pl - sl) > 8
                big = (pl >= sl)[..., None]
                o = np.where(far[..., None], np.where(big, P, S), o)
                lse = np.where(far, m, lse)
            if bug == "equal-lse-skips-merge":  # equal LSEs read as one state
                o = np.where((pl == sl)[..., None], P, o)
                lse = np.where(pl == sl, pl, lse)
            if bug == "both-empty-copies-suffix":
                o = np.where(both[..., None], S, o)
            if bug == "empty-copies-wrong-side":
                pe, se_ = (pl == -INF)[..., None], (sl == -INF)[..., None]
                o = np.where(pe & ~se_, P, np.where(se_ & ~pe, S, o))
            if bug == "race-in-place":
                # One head's threads span two blocks: the second half of the
                # head reads prefix_lse after the first wrote the merged LSE
                # there (vLLM PR 40924), here in that order.
                h = D // 2
                out[:, :, :h] = enc(o[:, :, :h])
                wr = (lambda a, v: a.reshape(T, H).__setitem__(slice(None), v)) if tm else \
                    (lambda a, v: a.reshape(H, T).__setitem__(slice(None), v.T))
                wr(out_lse, lse)
                pl2 = rd(p_lse).astype(f32)  # out_lse itself when aliased
                pl2 = np.where(pl2 == INF, -INF, pl2)
                ps2 = E((pl2 - np.maximum(pl2, sl)).astype(f32))
                ss2 = E((sl - np.maximum(pl2, sl)).astype(f32))
                se2 = ps2 + ss2
                o2 = P * (ps2 / se2)[..., None] + S * (ss2 / se2)[..., None]
                o2 = np.where(both[..., None], P, o2)
                out[:, :, h:] = enc(np.asarray(o2[:, :, h:], f32))
                return
        if bug == "last-head-dropped":
            out[:, :-1] = enc(o[:, :-1])
        elif bug == "tail-unwritten":
            # Whole packs of 8 elements, no tail: head_size % 8 left unwritten.
            k = D - D % 8
            out[..., :k] = enc(o[..., :k])
        else:
            out[...] = enc(o)
        if out_lse is not None:
            full = lse.reshape(-1) if tm else lse.T.reshape(-1)
            flat = out_lse.reshape(-1)
            if bug == "last-head-dropped":
                keep = np.ones((T, H), bool)
                keep[:, -1] = False
                k = keep.reshape(-1) if tm else keep.T.reshape(-1)
                flat[k] = full[k]
            else:
                flat[...] = full

    fn.__name__ = name or (bug or f"numpy_{form}").replace("-", "_")
    return fn


def summary_names(r):
    return r.text.rsplit("every compared case admitted under: ", 1)[1].rsplit(";", 1)[0]


FORMS = [
    # (form, kernel kwargs, declaration, the only declaration it is named by)
    ("cuda", dict(), dict(), "e/prefix/head_major"),
    ("triton", dict(), dict(empty="zero"), "e/zero/head_major"),
    ("unnormalised", dict(base="2", layout="token_major"),
     dict(base="2", lse_layout="token_major", empty="zero"), "2/zero/token_major"),
    ("reciprocal", dict(layout="token_major"), dict(lse_layout="token_major"),
     "e/prefix/token_major"),
]


@pytest.mark.parametrize("form,kk,kw,named", FORMS, ids=[f[0] for f in FORMS])
def test_numpy_forms_pass_on_the_default_shapes_and_are_named(form, kk, kw, named):
    r = ko.check_merge_attn_states(numpy_merge(form, **kk), verbose=False, **kw)
    assert r.ok and r.passed == r.cases == len(ko.MERGE_ATTN_STATES_SHAPES) * 7, r.text
    assert summary_names(r) == named, r.text


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("form", ["cuda", "triton"])
def test_other_dtypes_and_flush_to_zero_pass(dtype, form):
    kw = dict(dtype=dtype, empty="prefix" if form == "cuda" else "zero")
    r = ko.check_merge_attn_states(numpy_merge(form, dtype), verbose=False, **kw)
    assert r.ok and r.passed == r.cases == len(ko.MERGE_ATTN_STATES_SHAPES) * 7, r.text
    r = ko.check_merge_attn_states(numpy_merge(form, dtype, bug="ftz", name="ftz"),
                                   verbose=False, arms=["FAR", "RAND"], **kw)
    assert r.ok, r.text


def test_output_lse_off_is_not_judged_and_a_kernel_without_it_passes():
    fn = numpy_merge(bug="lse-no-log")
    assert not ko.check_merge_attn_states(fn, arms=["RAND"], verbose=False)
    r = ko.check_merge_attn_states(fn, arms=["RAND"], output_lse=False, verbose=False)
    assert r.ok, r.text
    assert "output_lse=False" in r.text.splitlines()[0]


def test_in_place_output_lse_catches_the_race():
    """vLLM PR 40924: the output LSE aliasing prefix_lse, one head's
    threads in two blocks. The racing kernel passes when the output LSE
    is its own array and fails when it is prefix_lse itself; the correct
    kernel passes both ways."""
    racy = numpy_merge(bug="race-in-place")
    kw = dict(arms=["RAND"], verbose=False)
    assert ko.check_merge_attn_states(racy, **kw).ok
    r = ko.check_merge_attn_states(racy, output_lse="in_place", **kw)
    assert not r.ok and "output_lse=\"in_place\"" in r.reproductions[0], r.text
    assert "wrote its input" not in r.failures[0]
    assert ko.check_merge_attn_states(numpy_merge(), output_lse="in_place", **kw).ok


BUG_SHAPES = [(7, 3, 80), (130, 8, 64), (5, 16, 512)]


_RUNS = {}


def arms_failing(fn, **kw):
    """The arms whose cases fail (BUG_SHAPES, every default arm), and the
    report; each (kernel, declaration) run once per session."""
    key = (fn.__name__, tuple(sorted(kw.items())))
    if key not in _RUNS:
        r = ko.check_merge_attn_states(fn, shapes=BUG_SHAPES, verbose=False, **kw)
        _RUNS[key] = ({re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}, r)
    return _RUNS[key]


# (kernel, declaration, the arms that must catch it)
BUGS = [
    # log(exp(p) + exp(s)) also misses the decided LSE of a lone side.
    (numpy_merge(bug="no-max"), dict(), {"LARGE", "EMPTY_ONE"}),
    (numpy_merge("triton", bug="nan-both-empty"), dict(empty="zero"), {"EMPTY_BOTH", "POS_INF"}),
    (numpy_merge(bug="pos-inf-not-empty"), dict(), {"POS_INF"}),
    (numpy_merge(base="2", name="base_2_declared_e"), dict(), {"RAND", "EQUAL", "LARGE"}),
    (numpy_merge(name="base_e_declared_2"), dict(base="2"), {"RAND", "EQUAL", "LARGE"}),
    (numpy_merge(bug="layout-transposed"), dict(), {"RAND", "FAR", "EMPTY_ONE", "LARGE"}),
    (numpy_merge(layout="token_major", bug="layout-transposed", name="head_major_declared_token"),
     dict(lse_layout="token_major"), {"RAND", "LARGE"}),
    (numpy_merge(bug="lse-no-log"), dict(), {"RAND", "EQUAL", "LARGE"}),
    (numpy_merge(bug="lse-no-max"), dict(), {"RAND", "EQUAL", "EMPTY_ONE", "LARGE"}),
    (numpy_merge(bug="weights-swapped"), dict(), {"RAND", "FAR", "EMPTY_ONE", "LARGE"}),
    # Products rounded to bf16 before their sum: outside the contract (module
    # docs of core), a double rounding RAND and LARGE show.
    (numpy_merge(bug="cast-before-sum"), dict(), {"RAND", "LARGE"}),
    (numpy_merge(bug="last-head-dropped"), dict(),
     {"RAND", "FAR", "EQUAL", "EMPTY_ONE", "EMPTY_BOTH", "POS_INF", "LARGE"}),
    (numpy_merge(bug="scales-not-normalised"), dict(), {"RAND", "EQUAL", "LARGE"}),
    (numpy_merge(bug="logistic-no-max"), dict(), {"FAR", "EMPTY_ONE"}),
    (numpy_merge(bug="empty-copies-wrong-side"), dict(), {"EMPTY_ONE"}),
    # EMPTY_BOTH's prefix and suffix outputs differ: the copy tells them apart.
    (numpy_merge(bug="both-empty-copies-suffix"), dict(), {"EMPTY_BOTH", "POS_INF"}),
    # FlashAttention's combine declared with the weights' scales (module
    # docs of core): its scales are not exactly 1/2 at equal LSEs and carry
    # the output LSE's rounding (2^-10 relative near 1e4); declared
    # scales="lse_out" it passes (test_flash_attention_combine_...).
    (numpy_merge("fa-combine", name="fa_combine"), dict(empty="zero"), {"EQUAL", "LARGE"}),
    (numpy_merge(bug="equal-lse-skips-merge"), dict(), {"EQUAL"}),
    # The smaller side dropped as negligible past a gap of 8 (e^-8 still
    # moves the output LSE by many binary32 ulps): FAR's gaps of 3 to 20.
    (numpy_merge(bug="gap-early-out"), dict(), {"FAR"}),
    (numpy_merge("cuda", name="prefix_declared_zero"), dict(empty="zero"), {"EMPTY_BOTH"}),
    (numpy_merge("triton", name="zero_declared_prefix"), dict(), {"EMPTY_BOTH"}),
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_flash_attention_combine_passes_declared_lse_out(dtype):
    """FlashAttention's combine, rejected under the weights' declaration
    (BUGS), passes declared scales="lse_out" and is named so; a bug in it
    is still caught there."""
    fn = numpy_merge("fa-combine", dtype=dtype, name="fa_combine")
    kw = dict(dtype=dtype, empty="zero", scales="lse_out")
    r = ko.check_merge_attn_states(fn, verbose=True, **kw)
    assert r.ok, r.text
    assert "e/zero/head_major/lse_out" in r.text
    bad = numpy_merge("fa-combine", dtype=dtype, bug="weights-swapped", name="fa_swapped")
    caught, r = arms_failing(bad, **kw)
    assert not r.ok and "RAND" in caught, caught
    assert 'scales="lse_out"' in r.failures[0]


@pytest.mark.parametrize("fn,kw,arms", BUGS, ids=[f.__name__ for f, _, _ in BUGS])
def test_planted_bugs_fail_under_the_arm_meant_for_them(fn, kw, arms):
    caught, r = arms_failing(fn, **kw)
    assert not r.ok and arms <= caught, (caught, r.text)
    fail = r.failures[0]
    assert "FAIL merge_attn_states" in fail and "reproduce:" in fail
    assert "merge_attn_states_case(" in fail
    assert "not admitted" in fail and "first at [t " in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\(([\d, ]+)\)\]", fail).group(1).split(", "))
    arm = re.search(r'arms=\["(\w+)"\]', fail).group(1)
    again = ko.check_merge_attn_states(fn, shapes=[dims], arms=[arm], seeds=[seed],
                                       verbose=False, **kw)
    assert not again.ok


def test_every_arm_catches_a_bug_of_its_own():
    """Each arm is the only one (of the seven) to catch some planted bug,
    or catches one the RAND arm misses."""
    only = {}
    for fn, kw, _ in BUGS:
        caught, _ = arms_failing(fn, **kw)
        for a in caught:
            only.setdefault(a, set()).add(fn.__name__)
    rand = only.get("RAND", set())
    for arm in ["RAND", "FAR", "EQUAL", "EMPTY_ONE", "EMPTY_BOTH", "POS_INF", "LARGE"]:
        assert arm in only, arm
        if arm != "RAND":
            assert only[arm] - rand, (arm, only[arm])


def test_default_shapes_cover_one_token_one_head_and_a_head_size_tail():
    """T = 1, H = 1, T != H and a head size not a multiple of 8 are among
    the default shapes: a kernel that writes whole packs of 8 elements and
    leaves the tail unwritten passes every other shape."""
    shapes = ko.MERGE_ATTN_STATES_SHAPES
    assert any(t == 1 for t, _, _ in shapes) and any(h == 1 for _, h, _ in shapes)
    assert any(t != h for t, h, _ in shapes)
    fn = numpy_merge(bug="tail-unwritten")
    r = ko.check_merge_attn_states(fn, arms=["RAND"], verbose=False)
    tails = [s for s in shapes if s[2] % 8]
    assert tails and not r.ok and r.failed == len(tails), r.text
    even = [s for s in shapes if s[2] % 8 == 0]
    assert ko.check_merge_attn_states(fn, arms=["RAND"], shapes=even, verbose=False).ok


def test_the_case_holds_the_oracles_intervals():
    shape = (5, 3, 8)
    c = ko.merge_attn_states_case(shape, "EMPTY_ONE")
    assert c["prefix_output"].dtype == np.uint16 and c["prefix_output"].shape == shape
    assert c["prefix_lse"].dtype == np.float32 and c["prefix_lse"].shape == (3, 5)
    lo, hi, llo, lhi = ko.merge_attn_states(c["prefix_output"], c["prefix_lse"],
                                            c["suffix_output"], c["suffix_lse"])
    for k, v in [("out_lo", lo), ("out_hi", hi), ("lse_lo", llo), ("lse_hi", lhi)]:
        assert (v.view(np.uint32 if v.dtype == f32 else np.uint16)
                == c[k].view(np.uint32 if v.dtype == f32 else np.uint16)).all(), k
    # EMPTY_ONE: the other side bit for bit, its LSE too.
    assert (lo == hi).all() and (llo == lhi).all()
    pe = (c["prefix_lse"] == -INF).T[..., None]
    assert (lo == np.where(pe, c["suffix_output"], c["prefix_output"])).all()
    assert (llo == np.where(c["prefix_lse"] == -INF, c["suffix_lse"], c["prefix_lse"])).all()
    # token_major: [T, H] LSEs.
    t = ko.merge_attn_states_case(shape, "RAND", lse_layout="token_major")
    assert t["prefix_lse"].shape == (5, 3) and t["lse_lo"].shape == (5, 3)
    args = (c["prefix_output"], c["prefix_lse"], c["suffix_output"], c["suffix_lse"])
    with pytest.raises(TypeError, match="float32"):
        ko.merge_attn_states(args[0], args[1].astype(np.float64), *args[2:])
    with pytest.raises(TypeError, match="uint16"):
        ko.merge_attn_states(args[0].astype(f32), *args[1:])
    with pytest.raises(ValueError, match="expected"):
        ko.merge_attn_states(args[0], args[1].T.copy(), *args[2:])
    bad = args[1].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ko.merge_attn_states(args[0], bad, *args[2:])
    bad[0, 0] = np.inf
    ko.merge_attn_states(args[0], bad, *args[2:])
    with pytest.raises(ValueError, match="inf_is_empty"):
        ko.merge_attn_states(args[0], bad, *args[2:], inf_is_empty=False)
    with pytest.raises(ValueError, match="POS_INF"):
        ko.merge_attn_states_case(shape, "POS_INF", inf_is_empty=False)


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(base="10"),
        dict(lse_layout="hm"),
        dict(empty="nan"),
        dict(dtype="float64"),
        dict(arms=["NOPE"]),
        dict(arms=["POS_INF"], inf_is_empty=False),
        dict(output_lse="yes"),
        dict(output_lse=2),
        dict(shapes=[(0, 1, 8)]),
        dict(shapes=[(-1, 2, 8)]),
        dict(shapes=[(1 << 12, 32, 128)]),
        dict(trials=0),
        dict(seeds=[]),
    ]:
        with pytest.raises(ValueError):
            ko.check_merge_attn_states(fn, verbose=False, **kw)
    assert not calls


def test_default_arms_skip_pos_inf_without_inf_is_empty():
    """A kernel that reads +inf as a number (FlashInfer's merge_state)
    declares inf_is_empty=False: POS_INF is not run, the rest pass."""
    fn = numpy_merge(bug="pos-inf-not-empty", name="plain_inf")
    r = ko.check_merge_attn_states(fn, shapes=BUG_SHAPES[:1], inf_is_empty=False,
                                   verbose=False)
    assert r.ok and r.cases == 6, r.text
    assert "POS_INF" not in r.text


def test_returns_writes_and_refusals():
    oracle = numpy_merge()

    def returns(p, pl, s, sl, out, out_lse):
        oracle(p, pl, s, sl, out, out_lse)
        return out.copy(), out_lse.copy()

    def inputs_alone(p, pl, s, sl):
        out = np.empty(p.shape, p.dtype)
        lse = np.empty(pl.shape, f32)
        oracle(p, pl, s, sl, out, lse)
        return out, lse

    def writes_suffix(p, pl, s, sl, out, out_lse):
        oracle(p, pl, s, sl, out, out_lse)
        sl[...] = 0

    def refuses(p, pl, s, sl, out, out_lse):
        if p.shape[-1] % 16:
            raise ko.Refused("head_size must be a multiple of 16")
        oracle(p, pl, s, sl, out, out_lse)

    kw = dict(shapes=[(7, 3, 80), (2, 2, 12)], arms=["RAND"], verbose=False)
    assert ko.check_merge_attn_states(returns, **kw).ok
    assert ko.check_merge_attn_states(inputs_alone, **kw).ok
    r = ko.check_merge_attn_states(writes_suffix, **kw)
    assert not r.ok and "wrote its input(s): suffix_lse" in r.failures[0]
    r = ko.check_merge_attn_states(refuses, **kw)
    assert r.refused == 1 and r.passed == 1 and not r.failed


def test_rows_name_the_declarations(capsys):
    r = ko.check_merge_attn_states(numpy_merge(), shapes=[(7, 3, 80)],
                                   arms=["EMPTY_BOTH", "FAR"])
    out = capsys.readouterr().out
    # EMPTY_BOTH parts the policies; FAR's pairs 3 to 20 apart tell the
    # bases (its far pairs' weights alone could not), its empty sides none.
    assert r.ok and re.search(r"EMPTY_BOTH 0x[0-9a-f]+ .* PASS  e/prefix/head_major\n", out), out
    assert re.search(r"FAR 0x[0-9a-f]+ .* PASS  e/prefix/head_major; e/zero/head_major\n", out), out
    assert out.rstrip().endswith("PASS")
