"""check_sampling on numpy samplers written from the rules (vLLM's
ascending cumsum, a descending cumsum, a FlashInfer-like pivot search;
float32 and float64; each order and tie policy; the mask, renorm and
sample forms) and on planted bugs: each correct form passes, each bug is
caught by the default arms and shapes, on the arm named, with a rerun
line that fails again."""

import re
import zlib

import numpy as np
import pytest

import kernel_oracle as ko

f32, f64 = np.float32, np.float64

# The tests' shapes: the check's defaults without Qwen2's 151936, which
# holds three quarters of the time and catches nothing the others miss
# (test_the_default_shapes_pass runs it).
SHAPES = [s for s in ko.SAMPLING_SHAPES if s[1] <= 32000]


def logits_f32(logits, dtype="float32"):
    """The logits' values in float32: 16-bit patterns (as the check passes
    bfloat16 and float16 logits) decoded as the declared `dtype`."""
    if logits.dtype == np.uint16:
        return (ko.decode_f16 if dtype == "float16" else ko.decode_bf16)(logits).astype(f32)
    return logits.astype(f32)


def ordered_keys(s):
    """float32 values as unsigned keys in the order of their values
    (negative values' bits inverted, positive ones' sign bit set)."""
    u = s.astype(f32).view(np.uint32)
    return np.where(u >> 31 == 1, ~u, u | np.uint32(1 << 31)).astype(np.uint32)


def numpy_sampler(form="mask", order="min_p_first", topk_ties="keep_all", cumsum="asc",
                  precision=f32, bug=None, seed=0, dtype="float32", steps=20, select="sort"):
    """A sampler in numpy, row by row: temperature, min-p against the
    maximum, top-k (ties kept, or a stable first k), top-p over the
    declared candidates by an ascending cumsum (`<= 1 - p`, the last kept),
    a descending one (the mass before each token `< p`) or a pivot (the
    first descending cumsum to reach `p`, every token at or above it kept);
    the k-th value by a sort, or (`select="bits"`) by a bisection of the
    ordered binary32 bit patterns, exact in 32 steps; logits of `dtype`;
    or with a planted bug."""
    # Draws seeded by the case (as a kernel with a fixed seed), so a rerun
    # line draws what the check saw.

    def keep_row(x, temp, k, top_p, min_p):
        v = x.shape[0]
        s = x.astype(precision)
        if bug != "temp-after-softmax":
            s = s / precision(temp)
        if bug == "temp-twice":
            s = s / precision(temp)
        finite = np.isfinite(s)
        m = s.max()
        e = np.exp(s - m)
        p = e / e.sum()
        if bug == "minp-sum":
            keep_minp = p >= precision(min_p)
        elif bug in ("minp-gt", "minp-gt-keep-max"):
            keep_minp = p > precision(min_p) * p.max()
            if bug == "minp-gt-keep-max":  # Hugging Face's min_tokens_to_keep
                keep_minp[np.argmax(s)] = True
        else:
            keep_minp = p >= precision(min_p) * p.max()
        n = int(finite.sum())
        if bug == "k0-as-1" and k == 0:
            k = 1
        if bug == "topk-plus-one" and 0 < k < n - 1:
            k += 1
        if 0 < k < n and bug == "topk-bisect":
            # A threshold kernel's k-th value: a midpoint bisection over
            # [min, max] stopped after `steps` steps, every token at or
            # above its low end kept.
            lo, hi = s[finite].min(), s.max()
            for _ in range(steps):
                mid = precision((lo + hi) / 2)
                if (s >= mid).sum() >= k:
                    lo = mid
                else:
                    hi = mid
            keep_k = s >= lo
        elif 0 < k < n and bug == "topk-in-bf16":
            # The k-th value found and compared on bfloat16 copies.
            b = ko.decode_bf16(ko.encode_bf16(s.astype(f32)))
            keep_k = b >= np.sort(b)[v - k]
        elif 0 < k < n and select == "bits":
            # The largest key t with at least k keys at or above it.
            keys, t = ordered_keys(s), 0
            for b in range(31, -1, -1):
                if (keys >= t | (1 << b)).sum() >= k:
                    t |= 1 << b
            keep_k = keys >= t
        elif 0 < k < n:
            if topk_ties == "keep_all" and bug != "topk-ties-dropped":
                kth = np.sort(s)[v - k]
                keep_k = s >= kth
            else:
                idx = np.argsort(-s, kind="stable")[:k]
                keep_k = np.zeros(v, bool)
                keep_k[idx] = True
        else:
            keep_k = finite.copy()
        cand = {"min_p_first": keep_k & keep_minp, "min_p_last": keep_k,
                "joint": finite}[order]
        keep_p = np.zeros(v, bool)
        ci = np.nonzero(cand)[0]
        if bug == "no-top-p":
            keep_p[ci] = True
        elif cumsum == "asc":
            o = ci[np.argsort(s[ci], kind="stable")]
            pc = s[o] if bug == "topp-on-logits" else e[o] / e[o].sum()
            cs = np.cumsum(pc)
            thr = precision(1) - precision(top_p)
            mask = cs < thr if bug == "lt" else cs <= thr
            mask[-1] = False
            keep_p[o[~mask]] = True
        else:
            o = ci[np.argsort(-s[ci], kind="stable")]
            pc = e[o] / e[o].sum()
            cs = np.cumsum(pc)
            if cumsum == "desc":
                before = cs if bug == "no-shift" else cs - pc
                keep = before < precision(top_p)
                keep[0] = True
                keep_p[o[keep]] = True
            else:  # pivot
                j = min(int(np.searchsorted(cs, precision(top_p))), len(o) - 1)
                keep_p[o] = pc >= pc[j]
        return keep_minp & keep_k & keep_p, e, keep_minp & keep_k

    def f(logits, temperature, top_k, top_p, min_p, out):
        rng = np.random.default_rng([seed, zlib.crc32(np.ascontiguousarray(logits).tobytes())])
        x = logits_f32(logits, dtype)
        for r in range(x.shape[0]):
            k = int(top_k[0] if bug == "k-row0" else top_k[r])
            p = top_p[0] if bug == "p-row0" else top_p[r]
            kept, e, pre = keep_row(x[r], temperature[r], k, p, min_p[r])
            if form == "mask":
                out[r] = np.where(kept, x[r], 0 if bug == "mask-zero" else -np.inf)
            elif form == "renorm":
                q = np.where(kept, e, 0)
                total = e.sum() if bug == "renorm-all" else q.sum()
                out[r] = (q / total).astype(f32)
            else:
                if bug == "sample-ignores-top-p":
                    kept = pre
                q = np.where(kept, e, 0).astype(f64)
                if bug == "sample-uniform":  # the survivors, equally likely
                    q = kept.astype(f64)
                elif bug == "sample-untempered":  # softmax(l), not softmax(l / T)
                    lk = x[r].astype(f64)
                    q = np.where(kept, np.exp(lk - lk[kept].max()), 0)
                out[r] = rng.choice(x.shape[1], size=out.shape[1], p=q / q.sum())

    f.__name__ = "numpy_" + form + "_" + cumsum + "_" + (bug or "ok").replace("-", "_")
    return f


def run(form="mask", bug=None, verbose=False, check=None, **kw):
    fn = numpy_sampler(form=form, bug=bug, **kw)
    decl = {k: kw[k] for k in ("order", "topk_ties") if k in kw}
    if kw.get("cumsum") == "pivot":
        decl["topp_ties"] = "keep_all"
    decl.update(check or {})
    decl.setdefault("shapes", SHAPES)
    return ko.check_sampling(fn, form=form, verbose=verbose, **decl)


@pytest.mark.parametrize("form", ["mask", "renorm", "sample"])
@pytest.mark.parametrize("cumsum,precision", [("asc", f32), ("desc", f32), ("pivot", f32),
                                              ("asc", f64)])
def test_correct_samplers_pass(form, cumsum, precision):
    r = run(form=form, cumsum=cumsum, precision=precision)
    assert r, r.text
    assert r.failed == 0 and r.passed == r.cases == 6 * len(SHAPES)
    assert "consistent on every compared case with:" in r.text


def test_the_default_shapes_pass():
    r = run(check=dict(shapes=None))
    assert r, r.text
    assert r.passed == r.cases == 30


def vllm_sampler(form="mask", scan="seq", min_p_space="prob", seed=0):
    """vLLM v1's sampler in float32, as written in
    `vllm/v1/sample/ops/topk_topp_sampler.py` (`apply_top_k_top_p_pytorch`)
    after the temperature and min-p: `logits / T`; min-p in probability
    space (`MinPLogitsProcessor`: `probs < min_p * amax(probs)`) or in
    logit space (the GPU worker's `_min_p_torch`: `logits < max +
    log(min_p)`); an ascending sort, top-k `logits_sort < gather(V - k)`,
    softmax, a cumulative sum (sequential, or a Kogge-Stone scan as a GPU
    computes it), `<= 1 - p`, the last kept; then the scaled logits, their
    softmax, or exponential-race draws (`random_sample`)."""
    rng = np.random.default_rng(seed)

    def softmax(x):
        e = np.exp(x - x.max()).astype(f32)
        return (e / e.sum(dtype=f32)).astype(f32)

    def f(logits, temperature, top_k, top_p, min_p, out):
        x = logits_f32(logits)
        v = x.shape[1]
        for r in range(x.shape[0]):
            s = (x[r] / temperature[r]).astype(f32)
            if min_p[r] > 0:
                if min_p_space == "prob":
                    pr = softmax(s)
                    s = np.where(pr < f32(pr.max() * min_p[r]), -np.inf, s).astype(f32)
                else:
                    s = np.where(s < f32(s.max() + np.log(min_p[r])), -np.inf, s).astype(f32)
            k = int(top_k[r]) or v
            idx = np.argsort(s, kind="stable")
            ls = s[idx]
            ls = np.where(ls < ls[v - k], -np.inf, ls).astype(f32)
            cs = softmax(ls)
            if scan == "seq":
                cs = np.cumsum(cs, dtype=f32)
            else:
                d = 1
                while d < v:
                    cs = np.concatenate([cs[:d], (cs[d:] + cs[:-d]).astype(f32)])
                    d *= 2
            mask = cs <= f32(1) - top_p[r]
            mask[-1] = False
            ls[mask] = -np.inf
            res = np.empty(v, f32)
            res[idx] = ls
            if form == "mask":
                out[r] = res
            elif form == "renorm":
                out[r] = softmax(res)
            else:
                pr = softmax(res)
                for j in range(out.shape[1]):
                    out[r, j] = np.argmax(pr / rng.exponential(size=v).astype(f32))

    f.__name__ = f"vllm_{form}_{scan}_{min_p_space}"
    return f


@pytest.mark.parametrize("form,scan,min_p_space", [("mask", "seq", "prob"),
                                                   ("mask", "scan", "logit"),
                                                   ("renorm", "scan", "prob"),
                                                   ("sample", "seq", "logit")])
def test_vllm_as_written_passes(form, scan, min_p_space):
    fn = vllm_sampler(form, scan, min_p_space)
    r = ko.check_sampling(fn, form=form, scaled=True, shapes=SHAPES, verbose=False)
    assert r, r.text


@pytest.mark.parametrize("order", ["min_p_last", "joint"])
@pytest.mark.parametrize("topk_ties", ["keep_all", "exact"])
def test_each_order_and_tie_policy_passes_its_declaration(order, topk_ties):
    r = run(order=order, topk_ties=topk_ties)
    assert r, r.text
    # And names itself among the declarations it is consistent with.
    want = f"{order}, topk_ties {topk_ties}, topp_ties order"
    assert want in r.text.splitlines()[-1], r.text.splitlines()[-1]


def test_the_order_is_judged():
    # vLLM's order (min-p before top-p) declared, Hugging Face's computed.
    r = run(order="min_p_last", check=dict(order="min_p_first"))
    assert not r
    r = run(order="joint", check=dict(order="min_p_first"))
    assert not r


@pytest.mark.parametrize("form,bug,arm", [
    ("mask", "lt", "FLAT"),
    ("mask", "no-shift", "RAND"),
    ("mask", "no-shift", "FLAT"),
    ("mask", "topk-ties-dropped", "TIES"),
    ("mask", "k-row0", "RAND"),
    ("mask", "temp-after-softmax", "RAND"),
    ("mask", "minp-sum", "RAND"),
    ("mask", "no-top-p", "PEAK"),
    ("renorm", "renorm-all", "RAND"),
    ("renorm", "lt", "FLAT"),
    ("sample", "sample-ignores-top-p", "RAND"),
    ("sample", "sample-ignores-top-p", "EDGE"),
    # From a cold review: top-p on the logits, the temperature twice, k + 1
    # kept, min-p's `>` (decided only where ties at the maximum meet
    # min_p = 1: EDGE without the argmax kept, TIES with it), row 0's top_p,
    # removed logits written 0, and top_k = 0 read as 1 (a greedy sampler).
    ("mask", "topp-on-logits", "RAND"),
    ("mask", "temp-twice", "RAND"),
    ("mask", "topk-plus-one", "RAND"),
    ("mask", "minp-gt", "EDGE"),
    ("mask", "minp-gt-keep-max", "TIES"),
    ("mask", "p-row0", "RAND"),
    ("mask", "mask-zero", "RAND"),
    ("mask", "k0-as-1", "RAND"),
    ("sample", "k0-as-1", "EDGE"),
    # Draws from the kept set at the wrong frequencies: the pooled
    # likelihood ratio against each alternative.
    ("sample", "sample-uniform", "RAND"),
    # Approximate k-th values: only NEAR puts distinct values closer than
    # the bisection's last bracket at the boundary.
    ("mask", "topk-bisect", "NEAR"),
    ("mask", "topk-in-bf16", "NEAR"),
    ("sample", "topk-bisect", "NEAR"),
])
def test_planted_bugs_fail(form, bug, arm):
    cumsum = "desc" if bug == "no-shift" else "asc"
    r = run(form=form, bug=bug, cumsum=cumsum)
    assert not r, f"{bug} passed"
    failed_arms = {re.search(r"arm=(\w+)", f).group(1) for f in r.failures}
    assert arm in failed_arms, (bug, failed_arms)
    # The first failure's rerun line fails again, alone.
    fn = numpy_sampler(form=form, bug=bug, cumsum=cumsum)
    again = eval(r.reproductions[0], {"kernel_oracle": ko, fn.__name__: fn})
    assert not again and again.cases == 1


@pytest.mark.parametrize("dtype,steps", [("bfloat16", 20), ("float16", 20), ("float32", 24),
                                         ("float32", 28)])
def test_a_fixed_step_bisection_fails_near(dtype, steps):
    # NEAR's rows with the k-th value at 0 (16-bit steps finest there) and
    # with a far-low token (`finfo.min` as a mask: a range of ~2^128)
    # put neighbours inside any fixed-step bisection's last bracket.
    fn = numpy_sampler(form="mask", bug="topk-bisect", dtype=dtype, steps=steps)
    r = ko.check_sampling(fn, dtype=dtype, shapes=SHAPES, arms=["NEAR"], verbose=False)
    assert not r and r.failed >= 3, r.failed


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_an_exact_bisection_passes_every_arm(dtype):
    # Bisecting the ordered bit patterns is exact: NEAR must not fail it.
    fn = numpy_sampler(form="mask", select="bits", dtype=dtype)
    r = ko.check_sampling(fn, dtype=dtype, shapes=SHAPES, verbose=False)
    assert r, r.text


def test_draws_at_the_wrong_frequencies_fail_given_enough_draws():
    # softmax(l) drawn where the filters used softmax(l / T): the rows'
    # temperatures (0.5 to 1.3) make each draw weak evidence, so it takes
    # more draws than the default 16 a row; a correct sampler still passes.
    fn = numpy_sampler(form="sample", bug="sample-untempered")
    r = ko.check_sampling(fn, form="sample", shapes=SHAPES, samples=256, verbose=False)
    assert not r and any("softmax(l) without the temperature" in f for f in r.failures)
    assert ko.check_sampling(numpy_sampler(form="sample"), form="sample", shapes=SHAPES,
                             samples=256, verbose=False)


def test_an_approximate_kth_value_passes_every_arm_but_near():
    fn = numpy_sampler(form="mask", bug="topk-bisect")
    arms = ["RAND", "TIES", "PEAK", "FLAT", "EDGE"]
    assert ko.check_sampling(fn, shapes=SHAPES, arms=arms, verbose=False)
    r = ko.check_sampling(fn, shapes=SHAPES, arms=["NEAR"], verbose=False)
    assert not r and r.failed == r.cases, (r.failed, r.cases)


def probs_topk_sampler(dtype="float32"):
    """FlashInfer's `top_k_renorm_probs` as a torch pipeline calls it (the
    renorm form): `p = softmax(l / T)` in binary32 first, then the k largest
    *probabilities*, ties kept, renormalised; top-p by the ascending cumsum
    over them, then min-p (Hugging Face's order, as
    python/examples/sampling.py composes FlashInfer's filters)."""

    def f(logits, temperature, top_k, top_p, min_p, out):
        if logits.dtype == np.uint16:
            dec = ko.decode_f16 if dtype == "float16" else ko.decode_bf16
            x = dec(logits).astype(f32)
        else:
            x = logits.astype(f32)
        v = x.shape[1]
        for r in range(x.shape[0]):
            s = (x[r] / f32(temperature[r])).astype(f32)
            e = np.exp((s - s.max()).astype(f32)).astype(f32)
            p = (e / e.sum(dtype=f32)).astype(f32)
            k = int(top_k[r])
            keep = p >= np.sort(p)[v - k] if 0 < k < v else np.isfinite(s)
            o = np.nonzero(keep)[0]
            o = o[np.argsort(p[o], kind="stable")]
            mask = np.cumsum(p[o] / p[o].sum(dtype=f32), dtype=f32) <= f32(1) - top_p[r]
            mask[-1] = False
            kept = np.zeros(v, bool)
            kept[o[~mask]] = True
            kept &= p >= min_p[r] * p.max()
            q = np.where(kept, p, f32(0))
            out[r] = (q / q.sum(dtype=f32)).astype(f32)

    f.__name__ = "probs_topk_" + dtype
    return f


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_kernel_ranking_probabilities_passes_near(dtype):
    # Ranking binary32 probabilities (FlashInfer's top-k over a softmax)
    # rather than logits: fl(s - m) and exp may merge or swap logits a few
    # steps apart, so NEAR keeps its neighbours apart in probability too.
    # (From a cold review: with neighbours 1 to 3 steps apart this failed
    # NEAR at V = 7, k = 6 in float32, and passed every other arm.)
    fn = probs_topk_sampler(dtype)
    r = ko.check_sampling(fn, form="renorm", order="min_p_last", dtype=dtype,
                          shapes=[s for s in SHAPES if s[1] <= 1000], arms=["NEAR"],
                          trials=8, verbose=False)
    assert r, r.text


def test_bfloat16_logits_and_renorm_output():
    fn = numpy_sampler(form="mask")
    assert ko.check_sampling(fn, dtype="bfloat16", shapes=SHAPES, verbose=False)

    def bf16_renorm(logits, temperature, top_k, top_p, min_p, out):
        o = np.zeros(out.shape, f32)
        numpy_sampler(form="renorm")(logits, temperature, top_k, top_p, min_p, o)
        out[...] = ko.encode_bf16(o)

    assert ko.check_sampling(bf16_renorm, form="renorm", out_dtype="bfloat16", shapes=SHAPES, verbose=False)
    # bfloat16 probabilities declared float32 fail.

    def bf16_as_f32(logits, temperature, top_k, top_p, min_p, out):
        numpy_sampler(form="renorm")(logits, temperature, top_k, top_p, min_p, out)
        out[...] = ko.decode_bf16(ko.encode_bf16(out))

    assert not ko.check_sampling(bf16_as_f32, form="renorm", shapes=SHAPES, verbose=False)


def test_scaled_mask_values():
    def scaled(logits, temperature, top_k, top_p, min_p, out):
        numpy_sampler(form="mask")(logits, temperature, top_k, top_p, min_p, out)
        out[...] = out / temperature[:, None]

    assert not ko.check_sampling(scaled, shapes=SHAPES, verbose=False)
    assert ko.check_sampling(scaled, scaled=True, shapes=SHAPES, verbose=False)


def test_every_arm_runs_and_rows_are_mostly_decided():
    r = run(verbose=True)
    for arm in ["RAND", "TIES", "PEAK", "FLAT", "EDGE", "NEAR"]:
        assert f" {arm} " in r.text, arm
    rows = [l for l in r.text.splitlines() if " PASS " in l and "16,1000" in l]
    assert rows
    for line in rows:
        if " TIES " in line:
            continue
        failed, decided = re.search(r"(\d+)/(\d+)\s+(\d+)", line).group(2, 3)
        assert int(decided) * 4 >= int(failed) * 3, line


def test_bad_arguments_are_refused_before_any_call():
    calls = []

    def never(*a):
        calls.append(1)

    for kw in [dict(form="logits"), dict(order="hf"), dict(topk_ties="some"),
               dict(topp_ties="exact"), dict(exp_ulps=1), dict(dtype="int8"),
               dict(samples=0), dict(shapes=[(1 << 12, 1 << 11)]), dict(shapes=[(0, 5)]),
               dict(arms=["NOPE"])]:
        with pytest.raises(ValueError):
            ko.check_sampling(never, verbose=False, **kw)
    assert not calls


def test_the_case_function_gives_the_check_arrays():
    c = ko.sampling_case(9, 129, "FLAT")
    assert c["logits"].shape == (9, 129) and c["logits"].dtype == np.float32
    assert c["top_k"].dtype == np.int32 and c["top_p"].shape == (9,)
    assert c["sample"].shape == (9, 16)
    out = np.zeros((9, 129), f32)
    numpy_sampler()(c["logits"], c["temperature"], c["top_k"], c["top_p"], c["min_p"], out)
    # FLAT's power-of-two rows are exact: the reference's kept count is ours.
    assert (np.isfinite(out).sum(axis=1) == np.isfinite(c["mask"]).sum(axis=1)).all()


def test_the_case_function_follows_exp_ulps():
    # NEAR's neighbours are kept apart by the declared exp's bound, so its
    # arrays depend on exp_ulps: the failure's sampling_case line names it.
    seen = []

    def bad(logits, temperature, top_k, top_p, min_p, out):
        seen.append(logits.copy())
        numpy_sampler(bug="topk-in-bf16")(logits, temperature, top_k, top_p, min_p, out)

    r = ko.check_sampling(bad, exp_ulps=16, shapes=[(4, 7)], arms=["NEAR"], verbose=False)
    assert not r and "exp_ulps=16)" in r.failures[0]
    c = ko.sampling_case(4, 7, "NEAR", exp_ulps=16)
    assert (c["logits"] == seen[0]).all()
    assert (ko.sampling_case(4, 7, "NEAR")["logits"] != seen[0]).any()
