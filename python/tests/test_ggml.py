"""ggml blocks and mul_mat: dequantization against the block layouts
written out here from ggml-quants.c, mul_mat against numpy on exact
data, and check_mul_mat on a numpy reference and on planted bugs."""

import numpy as np
import pytest

import kernel_oracle as ko
from kernel_oracle import GgmlType
import numpy_reference


def test_row_bytes_and_block_sizes():
    assert [(t.block_elems, t.block_bytes) for t in (GgmlType.F32, GgmlType.Q4_0, GgmlType.Q8_0, GgmlType.Q4_K, GgmlType.Q6_K)] == [
        (1, 4), (32, 18), (32, 34), (256, 144), (256, 210)]
    assert ko.ggml_row_bytes(GgmlType.Q4_K, 512) == 288
    assert str(GgmlType.Q6_K) == "q6_K"
    with pytest.raises(ValueError):
        ko.ggml_row_bytes(GgmlType.Q4_0, 33)


def test_q8_0_is_d_times_the_signed_codes():
    # block_q8_0: f16 d, then 32 int8 codes; x = d * q (ggml-quants.c).
    rng = np.random.default_rng(3)
    d = np.array([-0.375], np.float16)
    codes = rng.integers(-128, 128, 32).astype(np.int8)
    blk = np.concatenate([d.view(np.uint8), codes.view(np.uint8)])
    got = ko.ggml_dequantize(GgmlType.Q8_0, blk)
    assert (got == np.float32(d[0]) * codes.astype(np.float32)).all()


def test_q4_0_is_d_times_nibble_minus_8():
    # block_q4_0: f16 d, 16 bytes; element j < 16 is the low nibble of
    # byte j, element j + 16 its high nibble; x = d * (nibble - 8).
    rng = np.random.default_rng(4)
    d = np.array([1.5], np.float16)
    qs = rng.integers(0, 256, 16).astype(np.uint8)
    blk = np.concatenate([d.view(np.uint8), qs])[None, :]
    got = ko.ggml_dequantize(GgmlType.Q4_0, blk)
    nib = np.concatenate([qs & 0xF, qs >> 4]).astype(np.float32) - 8
    assert got.shape == (1, 32) and (got[0] == np.float32(1.5) * nib).all()


def test_mul_mat_equals_numpy_on_the_exact_arm():
    # f32 weights with small integer values: every order is exact.
    rng = np.random.default_rng(5)
    w = rng.integers(-8, 9, (33, 96)).astype(np.float32)
    x = rng.integers(-4, 5, (5, 96)).astype(np.float32)
    got = ko.ggml_mul_mat(GgmlType.F32, w.view(np.uint8), x)
    assert got.shape == (5, 33) and (got == x @ w.T).all()


def drops_the_last_k(dtype, src0, src1, dst):
    w = ko.ggml_dequantize(dtype, src0)
    dst[...] = src1[:, :-1] @ w[:, :-1].T


def test_check_mul_mat_passes_the_numpy_reference(capsys):
    r = ko.check_mul_mat(numpy_reference.mul_mat, shapes=[(70, 100, 9), (65, 768, 13), (1, 256, 1)])
    assert r.ok and r.failed == 0 and r.passed == r.cases
    # Three arms: f32 on all three shapes, the 32-blocks on two, the
    # 256-blocks on two.
    assert r.cases == 3 * (3 + 2 * 2 + 2 * 2)
    assert capsys.readouterr().out.rstrip().endswith("PASS")


def test_check_mul_mat_catches_a_dropped_k_and_reruns_it():
    r = ko.check_mul_mat(drops_the_last_k, dtypes=[GgmlType.Q4_K, GgmlType.F32], shapes=[(65, 256, 3)], verbose=False)
    # Every arm of both dtypes (BAL: one dropped product of K = 256 always
    # exceeds the bound).
    assert not r.ok and r.failed == 6
    again = eval(r.reproductions[0], {"kernel_oracle": ko, "drops_the_last_k": drops_the_last_k})
    assert again.cases == 1 and again.failed == 1


def test_check_mul_mat_judges_k_zero_and_refuses_a_case_without_outputs():
    def skips_empty_k(dtype, src0, src1, dst):
        if src1.shape[1]:
            numpy_reference.mul_mat(dtype, src0, src1, dst)

    # k = 0: every output is the empty sum +0, so a kernel that leaves dst
    # alone fails; m = 0 or n = 0 would compare nothing, so it is refused.
    assert ko.check_mul_mat(numpy_reference.mul_mat, dtypes=[GgmlType.F32], shapes=[(4, 0, 2)], verbose=False).ok
    assert not ko.check_mul_mat(skips_empty_k, dtypes=[GgmlType.F32], shapes=[(4, 0, 2)], verbose=False).ok
    for shape in [(0, 32, 2), (4, 32, 0)]:
        with pytest.raises(ValueError, match="at least one output"):
            ko.check_mul_mat(numpy_reference.mul_mat, dtypes=[GgmlType.F32], shapes=[shape])


def test_check_mul_mat_refuses_a_bounded_k_past_2_24_before_any_call():
    # RAND and BAL judge within 2 gamma_k sum|terms|, gamma_k = k u / (1 - k u):
    # from k = 2^24 on it is infinite or negative (a correct GEMM failed
    # RAND at k = 2^24 + 256), so such a shape is refused, and before the
    # callable runs on the shapes listed before it.
    calls = []

    def records(dtype, src0, src1, dst):
        calls.append(dtype)
        numpy_reference.mul_mat(dtype, src0, src1, dst)

    for arm in ["RAND", "BAL"]:
        with pytest.raises(ValueError, match="K u < 1"):
            ko.check_mul_mat(records, dtypes=[GgmlType.Q8_0], shapes=[(1, 32, 1), (1, (1 << 24) + 256, 1)], arms=[arm])
    assert calls == []


def test_check_mul_mat_that_runs_no_case_says_why(capsys):
    # q4_0 takes k in whole 32-element blocks: k = 100 names no case. The
    # row says the shape was skipped and why, the summary why it fails.
    r = ko.check_mul_mat(lambda *a: None, dtypes=[ko.GgmlType.Q4_0], shapes=[(1, 100, 1)])
    assert r.cases == 0 and not r.ok
    out = capsys.readouterr().out
    assert "skipped: k = 100 is not a whole number of q4_0's 32-element blocks" in out
    assert "no case ran" in out and out.rstrip().endswith("FAIL")
