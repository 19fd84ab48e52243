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
        if bug == "window-wrong-side":
            left, right = right, left
        if left is not None and left >= 0:
            vis &= j >= a - (left + 1 if bug == "window-off-by-one" else left)
        if right is not None and right >= 0:
            vis &= j <= a + right
    if bug == "last-key-dropped":
        vis[:, -1] = False
    if bug == "extra-key":
        vis |= j == a + 1
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
        if bug == "k-transposed":  # k read as [D][Sk] per head
            K = K.reshape(B, Hkv, D, Sk).transpose(0, 1, 3, 2)
        if bug == "v-next":  # v of the next position
            V = np.concatenate([V[:, :, 1:], V[:, :, -1:]], 2)
        if bug == "q-wrong-head":  # q heads swapped in pairs
            Q = Q[:, np.arange(Hq) ^ 1]
        g = Hq // Hkv
        heads = np.arange(Hq) // g
        kh = np.arange(Hq) % Hkv if bug == "gqa-mod" else heads
        vh = np.arange(Hq) % Hkv if bug in ("gqa-mod", "v-head-mod") else heads
        Kq, Vq = K[:, kh], V[:, vh]
        scale = f32(1 / D) if bug == "scale-1/D" else f32(1 / math.sqrt(D))
        if bug == "scale-twice":
            scale = f32(scale * scale)
        if bug == "scale-3e-4":  # off by 3e-4: a scale carried in a narrower type
            scale = f32(scale * (1 + 3e-4))
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
            # exp(-1e4 + ...) is 0 in binary32: the same output as -inf.
            S = np.where(vis, S, S - f32(1e4) if bug == "masked-exp-1e4" else f32(-np.inf))
            S = S.astype(f32)
            if bug == "softmax-wrong-axis":  # normalised over the queries
                P = np.exp(S - S.max(-2, keepdims=True))
                P = R(P / P.sum(-2, keepdims=True))
                out[...] = enc(np.asarray(np.matmul(P, Vq), f32))
                return
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
    assert r.ok and r.passed == r.cases == 7 * 5, r.text
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
        assert r.ok and r.passed == r.cases == 2 * 5, r.text


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
    # One key past the causal diagonal: PEAK's chosen key still dominates
    # it, UNIFORM's mean and RAND's weights move.
    (numpy_attn(causal="bottom_right", bug="extra-key"), dict(causal="bottom_right"),
     {"UNIFORM", "RAND"}),
    (numpy_attn(causal="top_left", bug="extra-key", name="extra_key_top_left"),
     dict(causal="top_left"), {"UNIFORM", "RAND"}),
    (numpy_attn(bug="softmax-wrong-axis"), dict(), {"RAND", "PEAK", "SPIKE"}),
    (numpy_attn(bug="k-transposed"), dict(), {"RAND", "PEAK", "SPIKE"}),
    (numpy_attn(bug="v-next"), dict(), {"RAND", "PEAK", "UNIFORM"}),
    (numpy_attn(bug="q-wrong-head"), dict(), {"RAND", "PEAK", "SPIKE"}),
    (numpy_attn(bug="scale-twice"), dict(), {"RAND", "PEAK", "SPIKE"}),
    # A scale 3e-4 off moves RAND's outputs of magnitude 1 by about a
    # bfloat16 step (some shapes catch it); SCALE's output channel near 0
    # moves by 3e-4 Var_p(x), many steps of the dtype there.
    (numpy_attn("f32", bug="scale-3e-4"), dict(arithmetic="f32"), {"SCALE"}),
    (numpy_attn(window=(8, 2), bug="window-wrong-side"), dict(window=(8, 2)),
     {"PEAK", "UNIFORM"}),
]


def test_a_masked_key_weighted_exp_minus_1e4_passes():
    """Triton's tutorial masks with -1e6 added, Hugging Face with the
    dtype's minimum: exp of it is 0 in binary32, the output the same."""
    kw = dict(causal="bottom_right")
    r = ko.check_attention(numpy_attn(bug="masked-exp-1e4", **kw), shapes=BUG_SHAPES,
                           verbose=False, **kw)
    assert r.ok, r.text


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


# Faithful float32 forms of the field's kernels, each under the arithmetic
# it declares. `E2`/`E` may err by `ulps` (an approximate ex2/exp).
LOG2E = f32(math.log2(math.e))


def _fma(a, b, c):
    """fl32(a b + c) with one rounding (a b of two binary32 is exact in binary64)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)
            + np.asarray(c, np.float64)).astype(f32)


def _fa2(Q, K, V, scale, vis, R, E, E2):
    """FlashAttention-2 forward (Dao 2023 Algorithm 1; flash_fwd_kernel.h,
    softmax.h): Bc = 64 keys a block; raw scores in f32, their row max;
    P = exp2f(fma(s, scale_log2, -m scale_log2)) with scale_log2 = f32(scale
    log2 e); acc and the row sum (of the f32 P) rescaled by exp2f((m_old -
    m_new) scale_log2); P to the dtype before PV; acc * (1 / l)."""
    S = np.where(vis, np.matmul(Q, K.transpose(0, 1, 3, 2)).astype(f32), f32(-np.inf))
    sl2 = f32(scale * LOG2E)
    m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
    l = np.zeros_like(m)
    acc = np.zeros(S.shape[:-1] + (V.shape[-1],), f32)
    for j0 in range(0, S.shape[-1], 64):
        Sb = S[..., j0:j0 + 64]
        mn = np.maximum(m, Sb.max(-1, keepdims=True))
        mn0 = np.where(mn == -np.inf, f32(0), mn)
        alpha = E2(((m - mn0) * sl2).astype(f32))
        P = np.where(np.isinf(Sb), f32(0), E2(_fma(Sb, sl2, -(mn0 * sl2).astype(f32))))
        l = (l * alpha + P.sum(-1, keepdims=True, dtype=f32)).astype(f32)
        acc = (acc * alpha + np.matmul(R(P), V[..., j0:j0 + 64, :])).astype(f32)
        m = mn
    return acc * (f32(1) / l)


def _fa2_splitkv(Q, K, V, scale, vis, R, E, E2, splits=4):
    """Flash-Decoding as flash-attn writes it (compute_attn_1rowblock_splitkv,
    combine_attn_seqk_parallel): per split o_s = acc_s / l_s and lse_s = m_s
    scale + log(l_s); lse_logsum = log(sum exp(lse_s - lse_max)) + lse_max;
    o = sum exp(lse_s - lse_logsum) o_s, no division by the weights' sum."""
    Sk = K.shape[2]
    edges = np.linspace(0, Sk, splits + 1).astype(int)
    outs, lses = [], []
    for a, b in zip(edges[:-1], edges[1:]):
        if a == b:
            continue
        sub = vis[:, a:b]
        S = np.where(sub, np.matmul(Q, K[..., a:b, :].transpose(0, 1, 3, 2)).astype(f32),
                     f32(-np.inf))
        sl2 = f32(scale * LOG2E)
        m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
        l = np.zeros_like(m)
        acc = np.zeros(S.shape[:-1] + (V.shape[-1],), f32)
        for j0 in range(0, b - a, 64):
            Sb = S[..., j0:j0 + 64]
            mn = np.maximum(m, Sb.max(-1, keepdims=True))
            mn0 = np.where(mn == -np.inf, f32(0), mn)
            alpha = E2(((m - mn0) * sl2).astype(f32))
            P = np.where(np.isinf(Sb), f32(0), E2(_fma(Sb, sl2, -(mn0 * sl2).astype(f32))))
            l = (l * alpha + P.sum(-1, keepdims=True, dtype=f32)).astype(f32)
            acc = (acc * alpha + np.matmul(R(P), V[..., a + j0:min(a + j0 + 64, b), :])).astype(f32)
            m = mn
        empty = l == 0
        outs.append((acc * np.where(empty, f32(1), f32(1) / np.where(empty, 1, l))).astype(f32))
        lse = _fma(m, f32(scale), np.log(np.where(empty, 1, l)).astype(f32))
        lses.append(np.where(empty, f32(-np.inf), lse))
    L = np.stack(lses)
    lmax = L.max(0)
    lsum = np.sum(np.where(np.isinf(L), f32(0), E((L - lmax).astype(f32))), 0, dtype=f32)
    logsum = (np.log(lsum).astype(f32) + lmax).astype(f32)
    o = np.zeros_like(outs[0])
    for lse, os_ in zip(lses, outs):
        o = (o + np.where(np.isinf(lse), f32(0), E((lse - logsum).astype(f32))) * os_).astype(f32)
    return o


def _triton_tutorial(Q, K, V, scale, vis, R, E, E2):
    """Triton's tutorial 06-fused-attention (3.x): qk_scale = sm_scale *
    1.44269504; m_ij = max(m_i, max(qk) qk_scale), qk = qk qk_scale - m_ij;
    on a masked block qk = qk qk_scale + where(mask, 0, -1e6); p = exp2(qk),
    alpha = exp2(m_i - m_ij), acc = acc alpha + dot(p.to(dtype), v); acc / l."""
    qk_scale = f32(f32(scale) * f32(1.44269504))
    S = np.matmul(Q, K.transpose(0, 1, 3, 2)).astype(f32)
    m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
    l = np.zeros_like(m)
    acc = np.zeros(S.shape[:-1] + (V.shape[-1],), f32)
    for j0 in range(0, S.shape[-1], 64):
        Sb, vb = S[..., j0:j0 + 64], vis[:, j0:j0 + 64]
        if not vb.any():
            continue
        if vb.all():
            mij = np.maximum(m, (Sb.max(-1, keepdims=True) * qk_scale).astype(f32))
            qk = _fma(Sb, qk_scale, -mij)
        else:
            qk = _fma(Sb, qk_scale, np.where(vb, f32(0), f32(-1.0e6)))
            mij = np.maximum(m, qk.max(-1, keepdims=True))
            qk = (qk - mij).astype(f32)
        p = E2(qk)
        alpha = E2((m - mij).astype(f32))
        l = (l * alpha + p.sum(-1, keepdims=True, dtype=f32)).astype(f32)
        acc = (acc * alpha + np.matmul(R(p), V[..., j0:j0 + 64, :])).astype(f32)
        m = mij
    return acc / l


def _xformers(Q, K, V, scale, vis, R, E, E2):
    """xformers' cutlass memory-efficient forward (kernel_forward.h,
    iterative_softmax): 128 keys a block; s scale in f32, mi = max; P =
    exp2f(log2e (s - mi)); the row sum of the f32 P; P stored in the dtype
    for the second GEMM; out / s_prime."""
    S = np.where(vis, (np.matmul(Q, K.transpose(0, 1, 3, 2)).astype(f32) * f32(scale)).astype(f32),
                 f32(-np.inf))
    m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
    l = np.zeros_like(m)
    acc = np.zeros(S.shape[:-1] + (V.shape[-1],), f32)
    for j0 in range(0, S.shape[-1], 128):
        Sb = S[..., j0:j0 + 128]
        mn = np.maximum(m, Sb.max(-1, keepdims=True))
        resc = np.where(m == -np.inf, f32(0), E2((LOG2E * (m - mn)).astype(f32)))
        P = np.where(np.isinf(Sb), f32(0), E2((LOG2E * (Sb - mn).astype(f32)).astype(f32)))
        l = (l * resc + P.sum(-1, keepdims=True, dtype=f32)).astype(f32)
        acc = (acc * resc + np.matmul(R(P), V[..., j0:j0 + 128, :])).astype(f32)
        m = mn
    return acc / l


def _torch_math(Q, K, V, scale, vis, R, E, E2, upcast=True):
    """torch's _scaled_dot_product_attention_math (attention.cpp): q and k
    each times sqrt(scale) (a binary32 scalar), the matmul, the mask (-inf),
    softmax, the PV matmul. Since torch 2.5 f16/bf16 are upcast to float
    first (f32); without the upcast (torch < 2.5, or
    allow_fp16_bf16_reduction_math_sdp(True)) each step rounds to the dtype
    (eager)."""
    T = (lambda x: np.asarray(x, f32)) if upcast else R
    c = f32(math.sqrt(float(scale)))
    S = T(np.matmul(T(Q * c), T(K * c).transpose(0, 1, 3, 2)))
    S = np.where(vis, S, f32(-np.inf))
    P = E((S - S.max(-1, keepdims=True)).astype(f32))
    P = T(P / P.sum(-1, keepdims=True, dtype=f32))
    return np.matmul(P, V).astype(f32)


def _triton21(Q, K, V, scale, vis, R, E, E2):
    """Triton 2.1's tutorial: q = (q * qk_scale).to(float16) before the loop
    (q pre-scaled and rounded to the dtype), then an online exp2 softmax
    with p.to(float16) before dot(p, v): eager's PRESCALE."""
    qk_scale = f32(f32(scale) * f32(1.44269504))
    S = np.where(vis, np.matmul(R(Q * qk_scale), K.transpose(0, 1, 3, 2)).astype(f32),
                 f32(-np.inf))
    m = np.full(S.shape[:-1] + (1,), -np.inf, f32)
    l = np.zeros_like(m)
    acc = np.zeros(S.shape[:-1] + (V.shape[-1],), f32)
    for j0 in range(0, S.shape[-1], 64):
        Sb = S[..., j0:j0 + 64]
        mij = np.maximum(m, Sb.max(-1, keepdims=True))
        mij0 = np.where(mij == -np.inf, f32(0), mij)
        p = np.where(np.isinf(Sb), f32(0), E2((Sb - mij0).astype(f32)))
        alpha = E2((m - mij0).astype(f32))
        l = (l * alpha + p.sum(-1, keepdims=True, dtype=f32)).astype(f32)
        acc = (acc * alpha + np.matmul(R(p), V[..., j0:j0 + 64, :])).astype(f32)
        m = mij
    return acc / l


REAL_FORMS = {
    "fa2": (_fa2, "flash"),
    "fa2_splitkv": (_fa2_splitkv, "flash"),
    "triton_tutorial": (_triton_tutorial, "flash"),
    "xformers": (_xformers, "flash"),
    "torch_math": (_torch_math, "f32"),
    "torch_math_no_upcast": (lambda *a: _torch_math(*a, upcast=False), "eager"),
    "triton21": (_triton21, "eager"),
}


def real_form(name, dtype="bfloat16", causal=None, window=None, ulps=0, seed=0):
    """The named form as a check callable; `ulps`: exp and exp2 off by up
    to that many ulps at random (the approximate ex2 FlashAttention and
    Triton use is within 2)."""
    enc, dec = CODECS[dtype]
    body = REAL_FORMS[name][0]
    rng = np.random.default_rng(seed)

    def R(x):
        return dec(enc(np.asarray(x, f32)))

    def off(x):
        x = np.asarray(x, f32)
        if not ulps:
            return x
        k = rng.integers(-ulps, ulps + 1, size=x.shape)
        b = x.view(np.int32).astype(np.int64) + np.where(x > 0, k, 0)
        return np.maximum(b, 0).astype(np.int32).view(f32)

    def fn(q, k, v, out):
        Q, K, V = dec(q), dec(k), dec(v)
        Hq, Hkv, Sq, Sk = Q.shape[1], K.shape[1], Q.shape[2], K.shape[2]
        heads = np.arange(Hq) // (Hq // Hkv)
        vis = visible(Sq, Sk, causal, window)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            O = body(Q, K[:, heads], V[:, heads], f32(1 / math.sqrt(Q.shape[-1])), vis, R,
                     lambda x: off(np.exp(x)), lambda x: off(np.exp2(x)))
        out[...] = enc(np.asarray(O, f32))

    fn.__name__ = name
    return fn


@pytest.mark.parametrize("name,dtype,kw", [
    ("fa2", "bfloat16", dict(causal="bottom_right")),
    ("fa2", "float16", dict()),
    ("fa2_splitkv", "bfloat16", dict()),
    ("fa2_splitkv", "float32", dict(causal="bottom_right")),
    ("triton_tutorial", "float16", dict(causal="bottom_right")),
    ("xformers", "bfloat16", dict(causal="top_left")),
    ("torch_math", "bfloat16", dict(causal="top_left")),
    ("torch_math_no_upcast", "bfloat16", dict()),
    ("torch_math_no_upcast", "float16", dict(causal="top_left")),
    ("triton21", "float16", dict(causal="bottom_right", window=(16, 0))),
])
def test_real_kernel_forms_pass_their_declaration(name, dtype, kw):
    """Each real kernel's arithmetic, exp2/exp off by 2 ulps, on every
    default shape and arm: a correct kernel failing is the check's bug."""
    fn = real_form(name, dtype, ulps=2, **kw)
    r = ko.check_attention(fn, arithmetic=REAL_FORMS[name][1], dtype=dtype, verbose=False, **kw)
    assert r.ok and r.passed == r.cases == 7 * 5, r.text


def test_adversarial_cases_of_real_forms_stay_inside():
    """The two cases that fell outside before MERGE-NORM and PRESCALE
    (core's module docs): flash-attn's split-KV combine with scores near
    1000 in float32, and torch's math backend without the upcast on a dot
    product that cancels (each factor rounded the other way on its + and
    - terms)."""
    rng = np.random.default_rng(0)
    fn = real_form("fa2_splitkv", "float32")
    bad = 0
    for _ in range(50):
        q = np.ones((1, 1, 1, 1), f32)
        k = (1000 + rng.uniform(-2, 2, (1, 1, 4, 1))).astype(f32)
        v = np.full((1, 1, 4, 1), 1 + rng.uniform(-0.5, 0.5), f32)
        lo, hi = ko.attention(q, k, v, dtype="float32", scale=1.0)
        out = np.empty_like(lo)
        fn(q, k, v, out)
        bad += int(not (lo <= out).all() & (out <= hi).all())
    assert bad == 0
    enc, dec = ko.encode_bf16, ko.decode_bf16
    c = f32(math.sqrt(1 / 8))
    cand = np.unique(dec(enc(np.linspace(1, 2, 2000).astype(f32))))
    rel = (dec(enc(cand * c)).astype(np.float64) - cand * np.float64(c)) / (cand * np.float64(c))
    a, b = cand[np.argmax(rel)], cand[np.argmin(rel)]
    q = enc(np.array([a] * 32 + [b] * 32, f32).reshape(1, 1, 1, 64))
    k = enc(np.stack([np.array([a] * 32 + [-b] * 32, f32), np.zeros(64, f32)]).reshape(1, 1, 2, 64))
    v = enc(np.array([1.0, -1.0], f32).reshape(1, 1, 2, 1))
    lo, hi = ko.attention(q, k, v, arithmetic="eager")
    out = np.empty_like(lo)
    real_form("torch_math_no_upcast")(q, k, v, out)
    assert dec(lo)[0, 0, 0, 0] <= dec(out)[0, 0, 0, 0] <= dec(hi)[0, 0, 0, 0]
