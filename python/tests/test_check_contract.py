"""The calling contract every check shares, on wrappers that break it the
way a GPU wrapper does while the arithmetic is right: an output element
left unwritten where its value is a NaN (the outputs come filled with a
NaN, so only a NaN the check can tell from a computed one catches it),
int8 codes returned as uint8, an array of the other byte order (the same
values: legal), a numpy scalar for a one-element output. Each breaking
wrapper fails with a message naming the breach; the correct forms pass."""

import numpy as np
import pytest

import kernel_oracle as ko
import numpy_reference as nr
from test_check_int8_group_quant import quantizer as int8_group_quantizer
from test_check_int8_quant import quantizer as int8_quantizer
from test_check_penalties import numpy_penalties
from test_check_scaled_mm import numpy_f32

# A k tail of 16 and a ragged one (the EXACT arm puts NaN codes in both).
MM_SHAPES = [(3, 272, 16), (2, 300, 24)]
UNWRITTEN = "unwritten: they still hold the signaling NaN"


def skips_nans(f, out_at=-1, decode=None):
    """`f` writing every output element but those whose value is a NaN
    (left as handed), as a kernel that stores only finite results would."""

    def g(*args):
        out = args[out_at]
        scratch = out.copy()
        a = list(args)
        a[out_at % len(args)] = scratch
        f(*a)
        vals = scratch if decode is None else decode(scratch)
        keep = ~np.isnan(vals)
        out[keep] = scratch[keep]

    g.__name__ = "skips_nans_" + f.__name__
    return g


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_an_unwritten_nan_output_fails_the_scaled_gemm(out_dtype):
    kw = dict(accumulation="f32", out_dtype=out_dtype, shapes=MM_SHAPES, verbose=False)
    good = numpy_f32(out_dtype=out_dtype)
    r = ko.check_fp8_scaled_mm(good, **kw)
    assert r.ok and r.passed == r.cases, r.failures[:1]
    decode = None if out_dtype == "float32" else ko.decode_bf16
    r = ko.check_fp8_scaled_mm(skips_nans(good, decode=decode), **kw)
    # Only EXACT puts NaN codes in; every EXACT case fails, naming the breach.
    assert not r.ok and r.failed == len(MM_SHAPES), r.text
    assert all(UNWRITTEN in f and "arm=EXACT" in f for f in r.failures), r.failures[:1]
    bits = "0x7FA5A5A5" if out_dtype == "float32" else "0x7FA5"
    assert bits in r.failures[0]


def test_an_unwritten_nan_logit_fails_the_penalties():
    good = numpy_penalties()
    r = ko.check_penalties(good, verbose=False)
    assert r.ok, r.failures[:1]
    r = ko.check_penalties(skips_nans(good), verbose=False)
    assert not r.ok and all(UNWRITTEN in f for f in r.failures), r.failures[:1]
    assert all("arms=[\"MASKED\"]" in f or "MASKED" in f for f in r.failures), r.failures[:1]


def test_an_unwritten_sentinel_staged_through_float64_or_negated_still_fails():
    # A wrapper that stages the handed output through float64 quiets the
    # signaling NaN; one that negates it keeps it signaling: either way the
    # element was not written, and its payload says so.
    good = numpy_penalties()

    def staged(*args):
        out = args[-1]
        with np.errstate(invalid="ignore"):
            wide = out.astype(np.float64)
        skips_nans(good)(*args[:-1], wide)
        out[...] = wide.astype(np.float32)

    def negated(*args):
        skips_nans(good)(*args)
        out = args[-1]
        out[np.isnan(out)] = -out[np.isnan(out)]

    for f in (staged, negated):
        r = ko.check_penalties(f, verbose=False)
        assert not r.ok and all(UNWRITTEN in x for x in r.failures), (f.__name__, r.failures[:1])


def test_a_tensor_returned_is_named_as_one():
    class Tensor:  # what a torch tensor looks like to the check: a dtype, no numpy array
        dtype = "torch.float32"

    r = ko.check_fp8_scaled_mm(lambda q, d, w, s, out: Tensor(), accumulation="f32", shapes=MM_SHAPES[:1],
                               arms=["RAND"], verbose=False)
    assert not r.ok and "a Tensor of dtype torch.float32, not a numpy array" in r.failures[0], r.failures[:1]


def test_a_nan_of_another_payload_still_passes():
    # NaN payloads are not part of the contract: a NaN computed as another
    # NaN (sign and payload) passes; only the handed sentinel is a breach.
    good = numpy_f32()

    def other_nan(q, d, w, s, out):
        good(q, d, w, s, out)
        bits = out.view(np.uint32)
        bits[np.isnan(out)] = 0xFFC00001

    r = ko.check_fp8_scaled_mm(other_nan, accumulation="f32", shapes=MM_SHAPES, verbose=False)
    assert r.ok, r.failures[:1]


def test_padded_rows_of_a_state_pool_may_stay_unwritten():
    # The pool's padded sequences' rows of `o` are not judged: a kernel
    # that skips them (numpy_reference's does) passes.
    def pooled(*args):
        nr.gated_delta_rule_pool(*args)

    r = ko.check_gated_delta_rule(pooled, shapes=[(1, 2, 3, 3), (2, 4, 4, 4)], arms=["RAND"], trials=4,
                                  pool="spec", verbose=False)
    assert r.ok, r.failures[:1]

    def conv_pooled(*args):
        nr.causal_conv1d_update_pool(*args)

    r = ko.check_causal_conv1d_update(conv_pooled, shapes=[(130, 4, 2, 3), (700, 2, 5, 4)], trials=3,
                                      pool="decode", verbose=False)
    assert r.ok, r.failures[:1]


@pytest.mark.parametrize("check,make", [
    (ko.check_int8_quant, int8_quantizer),
    (ko.check_int8_group_quant, int8_group_quantizer),
])
def test_int8_codes_returned_as_uint8_fail(check, make):
    good = make()

    def returns_int8(*args):
        x, q, s = args[:3]
        good(*args)
        return q.copy(), s.copy()

    def returns_uint8(*args):
        x, q, s = args[:3]
        good(*args)
        return q.view(np.uint8).copy(), s.copy()

    def returns_int16(*args):
        x, q, s = args[:3]
        good(*args)
        return q.astype(np.int16), s.copy()

    assert check(returns_int8, verbose=False).ok
    for bad in (returns_uint8, returns_int16):
        r = check(bad, verbose=False)
        assert not r.ok and r.failed == r.cases
        assert "q: returned an array of dtype" in r.failures[0] and "expected int8" in r.failures[0], r.failures[0]


def test_an_array_of_the_other_byte_order_is_read_as_its_values():
    def big_endian(w, scales, q, d, out):
        nr.v2_block_gemm(w, scales, q, d, out)
        return out.astype(">f4")

    r = ko.check_fp8_block_gemm(big_endian, shapes=[(144, 128, 16), (129, 129, 1)], verbose=False)
    assert r.ok, r.failures[:1]

    def wrong_and_big_endian(w, scales, q, d, out):
        nr.v2_block_gemm(w, scales, q, d, out)
        return (out * np.float32(2)).astype(">f4")

    r = ko.check_fp8_block_gemm(wrong_and_big_endian, shapes=[(144, 128, 16)], verbose=False)
    assert not r.ok and r.failed == r.cases


def test_a_numpy_scalar_is_named_as_one():
    import test_check_scaled_quant as t

    good = t.quantizer()

    def returns_scalar(x, q, s):
        good(x, q, s)
        return q.copy(), s[0]

    assert ko.check_fp8_scaled_quant(lambda x, q, s: (good(x, q, s), (q.copy(), s.copy()))[1],
                                     verbose=False).ok
    r = ko.check_fp8_scaled_quant(returns_scalar, verbose=False)
    assert not r.ok and r.failed == r.cases
    assert "a numpy scalar of dtype float32, not an array" in r.failures[0], r.failures[0]
