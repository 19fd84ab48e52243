"""check_attention on numpy attention kernels written from the rules (the
flash form with P rounded to the dtype before the PV product, the f32
form, the eager form with scores and P rounded; two-pass and online over
key blocks; bf16, f16 and f32) and on planted bugs: each correct form
passes under its declaration; each bug fails, under the arm meant for it,
with a rerun line that fails again."""

import math
import re

import numpy as np
import pytest

import kernel_oracle as ko

f32 = np.float32

CODECS = {
    "bfloat16": (ko.encode_bf16, ko.decode_bf16),
    "float16": (ko.encode_f16, ko.decode_f16),
    "float32": (lambda v: v.astype(f32), lambda v: v.astype(f32)),
}

# A decode row, a short chunked prefill (Sq < Sk), GQA 4/2, a ragged head
# dim; CI's 2 cores.
SHAPES = [(1, 4, 2, 1, 33, 64, 64), (1, 4, 2, 9, 24, 80, 48)]


def visible(Sq, Sk, causal, window, bug=None):
    """The [Sq, Sk] mask of rule ATTN-MASK (or a bug's)."""
    i = np.arange(Sq)[:, None]
    j = np.arange(Sk)[None, :]
    a = i if causal == "top_left" else i + Sk - Sq
    if bug == "top-left-for-bottom-right":
        a = i
    vis = np.ones((Sq, Sk), bool)
    if causal is not None:
        vis &= j <= (a - 1 if bug == "causal-off-by-one" else a)
    if window is not None:
        left, right = (window, None) if isinstance(window, int) else window
        if left is not None and left >= 0:
            vis &= j >= a - (left + 1 if bug == "window-off-by-one" else left)
        if right is not None and right >= 0:
            vis &= j <= a + right
    if bug == "last-key-dropped":
        vis[:, -1] = False
    return vis


def numpy_attn(arithmetic="flash", dtype="bfloat16", causal=None, window=None, softcap=None,
               block=None, bug=None, name=None):
    """Attention in numpy float32 under one arithmetic, or with a bug;
    `block`: an online softmax over key blocks of that many keys."""
    enc, dec = CODECS[dtype]

    def R(x):
        return dec(enc(np.asarray(x, f32)))

    def fn(q, k, v, out):
        Q, K, V = dec(q), dec(k), dec(v)
        B, Hq, Sq, D = Q.shape
        Hkv, Sk = K.shape[1], K.shape[2]
        g = Hq // Hkv
        heads = np.arange(Hq) // g
        kh = np.arange(Hq) % Hkv if bug == "gqa-mod" else heads
        vh = np.arange(Hq) % Hkv if bug in ("gqa-mod", "v-head-mod") else heads
        Kq, Vq = K[:, kh], V[:, vh]
        scale = f32(1 / D) if bug == "scale-1/D" else f32(1 / math.sqrt(D))
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            S = np.matmul(Q, Kq.transpose(0, 1, 3, 2))
            if arithmetic == "eager" or bug == "scores-rounded":
                S = R(R(S) * scale)
            else:
                S = S * scale
            if softcap is not None and bug != "no-softcap":
                cap = f32(softcap)
                if arithmetic == "eager":
                    S = R(R(np.tanh(R(S / cap))) * cap)
                else:
                    S = np.tanh(S / cap) * cap
            vis = visible(Sq, Sk, causal, window, bug)
            S = np.where(vis, S, f32(-np.inf)).astype(f32)
            if arithmetic == "eager":
                m = S.max(-1, keepdims=True)
                P = np.exp(S - m)
                P = R(P / P.sum(-1, keepdims=True))
                O = np.matmul(P, Vq)
            elif block is None:
                m = f32(0) if bug == "no-max" else S.max(-1, keepdims=True)
                P = np.exp(S - m)
                l = P.sum(-1, keepdims=True, dtype=f32)
                if arithmetic == "flash":
                    P = R(P)
                O = np.matmul(P, Vq) / l
            else:
                m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
                l = np.zeros_like(m)
                acc = np.zeros(S.shape[:-1] + (Vq.shape[-1],), f32)
                for j0 in range(0, Sk, block):
                    Sb = S[..., j0:j0 + block]
                    mn = np.maximum(m, Sb.max(-1, keepdims=True))
                    # exp2 with log2(e) folded, as FlashAttention writes it.
                    log2e = f32(math.log2(math.e))
                    alpha = np.where(mn == -np.inf, f32(1), np.exp2((m - mn) * log2e))
                    P = np.where(np.isinf(Sb), f32(0), np.exp2(Sb * log2e - mn * log2e))
                    l = l * alpha + P.sum(-1, keepdims=True, dtype=f32)
                    if arithmetic == "flash":
                        P = R(P)
                    acc = acc * alpha + np.matmul(P, Vq[..., j0:j0 + block, :])
                    m = mn
                O = acc * (f32(1) / l)
        out[...] = enc(np.asarray(O, f32))

    fn.__name__ = name or (bug or f"numpy_{arithmetic}").replace("-", "_").replace("/", "_")
    return fn


def summary_names(r):
    return r.text.rsplit("every compared case admitted under: ", 1)[1].rsplit(";", 1)[0]


# What each form is named on the default shapes: the flash form is not
# f32's (RAND parts them); eager's wide intervals admit the other two.
NAMED = {"flash": ["flash", "eager"], "f32": ["flash", "f32", "eager"], "eager": ["eager"]}


@pytest.mark.parametrize("arithmetic,dtype", [("flash", "bfloat16"), ("f32", "bfloat16"),
                                              ("eager", "bfloat16"), ("flash", "float16"),
                                              ("eager", "float16")])
def test_numpy_forms_pass_on_the_default_shapes_and_are_named(arithmetic, dtype):
    fn = numpy_attn(arithmetic, dtype)
    r = ko.check_attention(fn, arithmetic=arithmetic, dtype=dtype, verbose=False)
    assert r.ok and r.passed == r.cases == 7 * 4, r.text
    names = summary_names(r).split("; ")
    assert arithmetic in names, r.text
    if dtype == "bfloat16":
        assert names == NAMED[arithmetic], r.text


@pytest.mark.parametrize("arithmetic", ["flash", "f32"])
@pytest.mark.parametrize("block", [1, 16, 64])
def test_online_softmax_forms_pass_under_masks_and_softcap(arithmetic, block):
    for kw in [dict(causal="bottom_right"), dict(causal="top_left", window=7),
               dict(window=(5, 3), softcap=30.0)]:
        fn = numpy_attn(arithmetic, block=block, **kw)
        r = ko.check_attention(fn, arithmetic=arithmetic, shapes=SHAPES, verbose=False, **kw)
        assert r.ok and r.passed == r.cases == 2 * 4, r.text


def test_eager_with_softcap_and_float32_pass():
    kw = dict(causal="bottom_right", softcap=20.0)
    r = ko.check_attention(numpy_attn("eager", **kw), arithmetic="eager", shapes=SHAPES,
                           verbose=False, **kw)
    assert r.ok, r.text
    r = ko.check_attention(numpy_attn("f32", "float32"), arithmetic="f32", dtype="float32",
                           shapes=SHAPES, verbose=False)
    assert r.ok, r.text


# The default shapes less the costliest (4097 keys) and the one-key decode:
# GQA 8/2 and MQA decode, a prefill, a chunked prefill (Sq < Sk), MLA dims.
BUG_SHAPES = [s for s in ko.ATTENTION_SHAPES if s[4] not in (1, 4097)]


def arms_failing(fn, **kw):
    r = ko.check_attention(fn, shapes=BUG_SHAPES, verbose=False, **kw)
    return {re.search(r'arms=\["(\w+)"\]', f).group(1) for f in r.failures}, r


# (kernel, declaration, the arms that must catch it)
BUGS = [
    (numpy_attn(bug="scale-1/D"), dict(), {"RAND", "PEAK", "SPIKE"}),
    (numpy_attn(bug="gqa-mod"), dict(), {"RAND", "PEAK", "SPIKE", "UNIFORM"}),
    (numpy_attn(bug="v-head-mod"), dict(), {"PEAK", "UNIFORM"}),
    (numpy_attn(causal="bottom_right", bug="causal-off-by-one"),
     dict(causal="bottom_right"), {"PEAK", "UNIFORM"}),
    (numpy_attn(causal="bottom_right", bug="top-left-for-bottom-right"),
     dict(causal="bottom_right"), {"PEAK", "UNIFORM"}),
    (numpy_attn(bug="last-key-dropped"), dict(), {"PEAK", "UNIFORM"}),
    (numpy_attn(bug="no-max"), dict(), {"SPIKE"}),
    (numpy_attn(softcap=30.0, bug="no-softcap"), dict(softcap=30.0), {"SPIKE"}),
    (numpy_attn(causal="bottom_right", window=(8, 0), bug="window-off-by-one"),
     dict(causal="bottom_right", window=(8, 0)), {"UNIFORM", "RAND"}),
    (numpy_attn("flash", name="flash_declared_f32"), dict(arithmetic="f32"), {"RAND"}),
    (numpy_attn("eager", name="eager_declared_flash"), dict(arithmetic="flash"), {"RAND"}),
    # Scores rounded to bf16 (eager's first step) in a flash kernel: SPIKE's
    # scores of 100 and more move by up to 0.5, RAND's by a few 1e-3.
    (numpy_attn(bug="scores-rounded"), dict(), {"RAND", "SPIKE"}),
]


@pytest.mark.parametrize("fn,kw,arms", BUGS, ids=[f.__name__ for f, _, _ in BUGS])
def test_planted_bugs_fail_under_the_arm_meant_for_them(fn, kw, arms):
    """Each bug fails on the arms meant for it (BUG_SHAPES)."""
    caught, r = arms_failing(fn, **kw)
    assert not r.ok and arms <= caught, (caught, r.text)
    fail = r.failures[0]
    assert "FAIL " in fail and "reproduce:" in fail and "attention_case(" in fail
    assert "ulps outside; first at [b " in fail
    seed = int(re.search(r"seeds=\[(0x[0-9a-f]+)\]", fail).group(1), 16)
    dims = tuple(int(v) for v in re.search(r"shapes=\[\(([\d, ]+)\)\]", fail).group(1).split(", "))
    arm = re.search(r'arms=\["(\w+)"\]', fail).group(1)
    again = ko.check_attention(fn, shapes=[dims], arms=[arm], seeds=[seed], verbose=False, **kw)
    assert not again.ok


def test_the_case_holds_the_oracles_intervals():
    shape = (1, 4, 2, 9, 24, 80, 48)
    c = ko.attention_case(shape, "PEAK", causal="bottom_right")
    assert c["q"].dtype == np.uint16 and c["q"].shape == (1, 4, 9, 80)
    assert c["v"].shape == (1, 2, 24, 48) and c["peak"].shape == (1, 4, 9)
    lo, hi = ko.attention(c["q"], c["k"], c["v"], causal="bottom_right")
    assert (lo == c["out_lo"]).all() and (hi == c["out_hi"]).all()
    # PEAK: decided, each row the chosen key's v row (kv head h // 2).
    assert (lo == hi).all()
    for h in range(4):
        for i in range(9):
            j = c["peak"][0, h, i]
            assert (lo[0, h, i] == c["v"][0, h // 2, j]).all()
    with pytest.raises(TypeError, match="uint16"):
        ko.attention(c["q"].astype(f32), c["k"], c["v"])
    with pytest.raises(ValueError, match="expected"):
        ko.attention(c["q"], c["k"][:, :, :, :-1], c["v"])
    bad = c["v"].copy()
    bad[0, 0, 0, 0] = 0x7F80
    with pytest.raises(ValueError, match="not finite"):
        ko.attention(c["q"], c["k"], bad)
    with pytest.raises(ValueError, match="sees no key"):
        ko.attention(c["k"][:, :, :9], c["q"][:, :2, :4], c["v"][:, :, :4],
                     causal="bottom_right")


def test_bad_arguments_raise_before_any_call():
    calls = []

    def fn(*a):
        calls.append(1)

    for kw in [
        dict(arithmetic="math"),
        dict(dtype="float64"),
        dict(causal="lower_right"),
        dict(window="wide"),
        dict(softcap=-1.0),
        dict(scale=0.0),
        dict(arms=["NOPE"]),
        dict(shapes=[(1, 3, 2, 1, 8, 64, 64)]),
        dict(shapes=[(1, 1, 1, 0, 8, 64, 64)]),
        dict(shapes=[(1, 1, 1, 1, 1 << 23, 64, 64)]),
        dict(causal="bottom_right", shapes=[(1, 1, 1, 8, 4, 64, 64)]),
    ]:
        with pytest.raises(ValueError):
            ko.check_attention(fn, verbose=False, **kw)
    assert not calls


def test_returns_writes_and_refusals():
    oracle = numpy_attn()

    def returns_out(q, k, v, out):
        oracle(q, k, v, out)
        return out.copy()

    def takes_inputs_alone(q, k, v):
        out = np.empty(q.shape[:3] + (v.shape[-1],), q.dtype)
        oracle(q, k, v, out)
        return out

    def in_place(q, k, v, out):
        oracle(q, k, v, out)
        k[...] = 0

    def refuses(q, k, v, out):
        if q.shape[-1] % 64:
            raise ko.Refused("head dim must be a multiple of 64")
        oracle(q, k, v, out)

    kw = dict(shapes=SHAPES, arms=["RAND"], verbose=False)
    assert ko.check_attention(returns_out, **kw).ok
    assert ko.check_attention(takes_inputs_alone, **kw).ok
    r = ko.check_attention(in_place, **kw)
    assert not r.ok and "wrote its input(s): k" in r.failures[0]
    r = ko.check_attention(refuses, **kw)
    assert r.refused == 1 and r.passed == 1 and not r.failed


def test_rows_name_the_arithmetics(capsys):
    r = ko.check_attention(numpy_attn("flash"), shapes=SHAPES[:1], arms=["PEAK", "RAND"])
    out = capsys.readouterr().out
    # PEAK is decided under every arithmetic: all three admit it.
    assert r.ok and re.search(r"PEAK 0x[0-9a-f]+ .* PASS  flash; f32; eager\n", out), out
    assert out.rstrip().endswith("PASS")
