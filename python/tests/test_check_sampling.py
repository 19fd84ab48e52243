"""check_sampling on numpy samplers written from the rules (vLLM's
ascending cumsum, a descending cumsum, a FlashInfer-like pivot search;
float32 and float64; each order and tie policy; the mask, renorm and
sample forms) and on planted bugs: each correct form passes, each bug is
caught by the default arms and shapes, on the arm named, with a rerun
line that fails again."""

import re

import numpy as np
import pytest

import kernel_oracle as ko

f32, f64 = np.float32, np.float64


def logits_f32(logits):
    """The logits' values: bfloat16 bit patterns widened, or float32."""
    if logits.dtype == np.uint16:
        return (logits.astype(np.uint32) << 16).view(f32)
    return logits.astype(f32)


def numpy_sampler(form="mask", order="min_p_first", topk_ties="keep_all", cumsum="asc",
                  precision=f32, bug=None, seed=0):
    """A sampler in numpy, row by row: temperature, min-p against the
    maximum, top-k (ties kept, or a stable first k), top-p over the
    declared candidates by an ascending cumsum (`<= 1 - p`, the last kept),
    a descending one (the mass before each token `< p`) or a pivot (the
    first descending cumsum to reach `p`, every token at or above it kept);
    or with a planted bug."""
    rng = np.random.default_rng(seed)

    def keep_row(x, temp, k, top_p, min_p):
        v = x.shape[0]
        s = x.astype(precision)
        if bug != "temp-after-softmax":
            s = s / precision(temp)
        finite = np.isfinite(s)
        m = s.max()
        e = np.exp(s - m)
        p = e / e.sum()
        if bug == "minp-sum":
            keep_minp = p >= precision(min_p)
        else:
            keep_minp = p >= precision(min_p) * p.max()
        n = int(finite.sum())
        if 0 < k < n:
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
            pc = e[o] / e[o].sum()
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
        x = logits_f32(logits)
        for r in range(x.shape[0]):
            k = int(top_k[0] if bug == "k-row0" else top_k[r])
            kept, e, pre = keep_row(x[r], temperature[r], k, top_p[r], min_p[r])
            if form == "mask":
                out[r] = np.where(kept, x[r], -np.inf)
            elif form == "renorm":
                q = np.where(kept, e, 0)
                total = e.sum() if bug == "renorm-all" else q.sum()
                out[r] = (q / total).astype(f32)
            else:
                if bug == "sample-ignores-top-p":
                    kept = pre
                q = np.where(kept, e, 0).astype(f64)
                out[r] = rng.choice(x.shape[1], size=out.shape[1], p=q / q.sum())

    f.__name__ = "numpy_" + form + "_" + cumsum + "_" + (bug or "ok").replace("-", "_")
    return f


def run(form="mask", bug=None, verbose=False, check=None, **kw):
    fn = numpy_sampler(form=form, bug=bug, **kw)
    decl = {k: kw[k] for k in ("order", "topk_ties") if k in kw}
    if kw.get("cumsum") == "pivot":
        decl["topp_ties"] = "keep_all"
    decl.update(check or {})
    return ko.check_sampling(fn, form=form, verbose=verbose, **decl)


@pytest.mark.parametrize("form", ["mask", "renorm", "sample"])
@pytest.mark.parametrize("cumsum,precision", [("asc", f32), ("desc", f32), ("pivot", f32),
                                              ("asc", f64)])
def test_correct_samplers_pass(form, cumsum, precision):
    r = run(form=form, cumsum=cumsum, precision=precision)
    assert r, r.text
    assert r.failed == 0 and r.passed == r.cases == 25
    assert "consistent on every compared case with:" in r.text


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


def test_bfloat16_logits_and_renorm_output():
    fn = numpy_sampler(form="mask")
    assert ko.check_sampling(fn, dtype="bfloat16", verbose=False)

    def bf16_renorm(logits, temperature, top_k, top_p, min_p, out):
        o = np.zeros(out.shape, f32)
        numpy_sampler(form="renorm")(logits, temperature, top_k, top_p, min_p, o)
        out[...] = ko.encode_bf16(o)

    assert ko.check_sampling(bf16_renorm, form="renorm", out_dtype="bfloat16", verbose=False)
    # bfloat16 probabilities declared float32 fail.

    def bf16_as_f32(logits, temperature, top_k, top_p, min_p, out):
        numpy_sampler(form="renorm")(logits, temperature, top_k, top_p, min_p, out)
        out[...] = ko.decode_bf16(ko.encode_bf16(out))

    assert not ko.check_sampling(bf16_as_f32, form="renorm", verbose=False)


def test_scaled_mask_values():
    def scaled(logits, temperature, top_k, top_p, min_p, out):
        numpy_sampler(form="mask")(logits, temperature, top_k, top_p, min_p, out)
        out[...] = out / temperature[:, None]

    assert not ko.check_sampling(scaled, verbose=False)
    assert ko.check_sampling(scaled, scaled=True, verbose=False)


def test_every_arm_runs_and_rows_are_mostly_decided():
    r = run(verbose=True)
    for arm in ["RAND", "TIES", "PEAK", "FLAT", "EDGE"]:
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
