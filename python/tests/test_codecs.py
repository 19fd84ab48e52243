"""The codecs against independent definitions: every FP8 code's value
from the OCP OFP8 1.0 formulas, every binary16 pattern against numpy's
float16, bfloat16 as the top 16 bits of binary32, and the conventions'
named edge cases (the values core's docs give)."""

import numpy as np
import pytest

import kernel_oracle as ko
from kernel_oracle import NanMagnitude, Overflow

CODES = np.arange(256, dtype=np.uint8)


def ofp8_value(code, exp_bits, man_bits, bias):
    """The OCP OFP8 value of a finite code: subnormal m * 2^(1 - bias -
    man_bits), normal (1 + m / 2^man_bits) * 2^(e - bias)."""
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> man_bits) & ((1 << exp_bits) - 1)
    m = code & ((1 << man_bits) - 1)
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + m / 2**man_bits) * 2.0 ** (e - bias)


def test_e4m3_decode_every_code_is_the_ocp_value():
    got = ko.decode_e4m3(CODES)
    assert got.dtype == np.float32 and got.shape == (256,)
    for c in range(256):
        if c & 0x7F == 0x7F:
            assert np.isnan(got[c]) and np.signbit(got[c]) == bool(c & 0x80)
        else:
            assert got[c] == ofp8_value(c, 4, 3, 7), hex(c)
            assert np.signbit(got[c]) == bool(c & 0x80), hex(c)


def test_e4m3_read_as_zero_reads_nan_magnitude_as_positive_zero():
    got = ko.decode_e4m3(np.array([0x7F, 0xFF], np.uint8), nan=NanMagnitude.READ_AS_ZERO)
    assert got.view(np.uint32).tolist() == [0, 0]


def test_e5m2_decode_every_code_is_the_ocp_value():
    got = ko.decode_e5m2(CODES)
    for c in range(256):
        mag = c & 0x7F
        if mag == 0x7C:
            assert np.isinf(got[c]) and np.signbit(got[c]) == bool(c & 0x80)
        elif mag > 0x7C:
            assert np.isnan(got[c])
        else:
            assert got[c] == ofp8_value(c, 5, 2, 15), hex(c)


@pytest.mark.parametrize(
    "encode,decode,maxval",
    [(ko.encode_e4m3, ko.decode_e4m3, 448.0), (ko.encode_e5m2, ko.decode_e5m2, 57344.0)],
)
def test_fp8_encode_round_trips_every_finite_code_and_rounds_ties_to_even(encode, decode, maxval):
    vals = decode(CODES)
    finite = np.isfinite(vals) & (CODES != 0x80)
    assert (encode(vals[finite]) == CODES[finite]).all()
    # Midpoints between neighbouring positive codes round to the even code.
    pos = np.sort(vals[np.isfinite(vals) & (vals > 0)])
    mids = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(np.float32)
    got = decode(encode(mids))
    lo_even = (encode(pos[:-1]) & 1) == 0
    assert (got == np.where(lo_even, pos[:-1], pos[1:])).all()
    # SAT-1: beyond max finite saturates; NON_SATURATING does not.
    big = np.array([maxval * 1.5, -maxval * 1.5, np.inf], np.float32)
    assert decode(encode(big)).tolist() == [maxval, -maxval, maxval]
    assert not np.isfinite(decode(encode(big, overflow=Overflow.NON_SATURATING))).any()


def test_e4m3_named_edges():
    e = ko.encode_e4m3
    x = np.array([448.0, 464.0, 465.0, np.nan, -np.nan, 2.0**-9, 2.0**-10], np.float32)
    assert e(x).tolist() == [0x7E, 0x7E, 0x7E, 0x7F, 0x7F, 0x01, 0x00]
    # OCP / torch: 464 rounds to even (448) but 465 overflows to NaN.
    assert e(x[:3], overflow=Overflow.NON_SATURATING).tolist() == [0x7E, 0x7E, 0x7F]


def test_f16_decode_every_pattern_is_numpys():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = ko.decode_f16(bits)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all()


def test_f16_encode_matches_numpy_on_every_f16_neighbourhood():
    # Every f16 value, and the f32s just below, at and above each midpoint.
    f = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    f = f[np.isfinite(f)].astype(np.float32)
    f = np.sort(f)
    mids = ((f[:-1].astype(np.float64) + f[1:]) / 2).astype(np.float32)
    x = np.concatenate([f, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                        np.array([70000.0, -70000.0, 65520.0, 65519.996], np.float32)])
    with np.errstate(over="ignore"):  # numpy warns on the casts to inf
        want = x.astype(np.float16).view(np.uint16)
    assert (ko.encode_f16(x) == want).all()


def test_bf16_is_the_top_half_of_binary32_rounded_to_nearest_even():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = ko.decode_bf16(bits)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    nan = np.isnan(want)
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all() and np.isnan(got[nan]).all()
    rng = np.random.default_rng(7)
    u = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    x = u.view(np.float32)
    x = x[np.isfinite(x)]
    u = x.view(np.uint32).astype(np.uint64)
    # Round to nearest even on the low 16 bits (overflow to inf included).
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    assert (ko.encode_bf16(x) == rne).all()


def test_codecs_keep_the_shape_and_refuse_other_dtypes():
    x = np.zeros((2, 3, 4), np.float32)
    assert ko.encode_e4m3(x).shape == (2, 3, 4)
    assert ko.decode_f16(np.zeros((5, 1), np.uint16)).shape == (5, 1)
    with pytest.raises(TypeError):
        ko.encode_e4m3(np.zeros(3, np.float64))
