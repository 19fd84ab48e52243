"""check_fp8_block_gemm on a correct numpy reference and on planted bugs:
each bug is caught, by the arm and check meant to catch it, and its
printed reproduction reruns the failing case alone."""

import numpy as np
import pytest

import kernel_oracle as ko
from kernel_oracle import Schedule
from numpy_reference import v2_block_gemm

# Small ragged shapes first, then aligned ones: the default battery's
# character at a fraction of its size (pytest runs on 2 cores in CI).
SHAPES = [(1000, 130, 7), (144, 128, 16), (384, 320, 9), (129, 129, 1), (256, 256, 8)]


def reference_gemm(w, scales, q, d, out):
    v2_block_gemm(w, scales, q, d, out)


def leaves_partial_tile_unwritten(w, scales, q, d, out):
    """Writes only whole 128-column tiles of out (forgets the last one)."""
    tmp = np.empty_like(out)
    v2_block_gemm(w, scales, q, d, tmp)
    full = (out.shape[1] // 128) * 128
    out[:, :full] = tmp[:, :full]


def zeroes_its_weights(w, scales, q, d, out):
    """Right answer, then uses its weight buffer as scratch."""
    v2_block_gemm(w, scales, q, d, out)
    w.fill(0)


def drops_the_last_k(w, scales, q, d, out):
    """Off by one in the k tail: the weights' last column is never read."""
    v2_block_gemm(w, scales, q, d, out, k_used=w.shape[1] - 1)


def casts_to_bf16(w, scales, q, d, out):
    """Accumulates in f32 but stores bfloat16 (round to nearest even)."""
    tmp = np.empty_like(out)
    v2_block_gemm(w, scales, q, d, tmp)
    out[...] = ko.decode_bf16(ko.encode_bf16(tmp))


def returns_float64(w, scales, q, d, out):
    tmp = np.empty_like(out)
    v2_block_gemm(w, scales, q, d, tmp)
    return tmp.astype(np.float64)


def test_reference_passes_and_is_identified_as_v2(capsys):
    r = ko.check_fp8_block_gemm(reference_gemm, shapes=SHAPES)
    assert r.ok and bool(r)
    assert r.failed == 0 and r.refused == 0 and r.passed == r.cases == len(SHAPES) * 4
    # EXACT, FOLD and CODES data make any f32 order exact: the separate
    # fold matches and the fused one does not (FOLD tells the folds apart
    # from two blocks on). The tensor-core models keep 14 bits, which these
    # arms' small integer sums never exceed, so they match here too; RAND
    # tells them apart (see the declared-schedule test below).
    assert r.identified_exact_arms[0] == Schedule.V2
    assert Schedule.V2_FUSED not in r.identified_exact_arms
    assert r.codes_decoded_exactly > 200
    out = capsys.readouterr().out
    assert "bit-identical under: v2" in out and out.rstrip().endswith("PASS")


def test_a_returned_array_is_judged_too():
    def returns(w, scales, q, d, out):
        y = np.empty_like(out)
        v2_block_gemm(w, scales, q, d, y)
        return y

    assert ko.check_fp8_block_gemm(returns, shapes=SHAPES[:2], verbose=False).ok


def test_reference_passes_over_several_trials():
    r = ko.check_fp8_block_gemm(reference_gemm, shapes=[(272, 136, 5)], trials=3, verbose=False)
    assert r.ok and r.cases == 12
    exact_rows = [line.split() for line in r.text.splitlines() if " EXACT " in line]
    assert len({row[2] for row in exact_rows}) == 3  # fresh data per trial


@pytest.mark.parametrize(
    "bug,caught_by",
    [
        (leaves_partial_tile_unwritten, "non-finite"),
        (zeroes_its_weights, "wrote its input(s): w"),
        (drops_the_last_k, "bit patterns differ"),
        (casts_to_bf16, "bit patterns differ"),
        (returns_float64, "returned an array of dtype float64"),
    ],
)
def test_planted_bug_is_caught_and_its_reproduction_reruns(bug, caught_by, capsys):
    r = ko.check_fp8_block_gemm(bug, shapes=SHAPES, verbose=False)
    assert not r.ok and r.failed > 0
    assert any(caught_by in f for f in r.failures), r.failures[0]
    assert len(r.reproductions) == r.failed
    printed = capsys.readouterr().out
    line = r.reproductions[0]
    assert line in printed and line.startswith(f"kernel_oracle.check_fp8_block_gemm({bug.__name__}, ")
    again = eval(line, {"kernel_oracle": ko, bug.__name__: bug})
    assert again.cases == 1 and again.failed == 1
    assert again.failures[0].splitlines()[0] == r.failures[0].splitlines()[0]


def test_bf16_output_is_caught_in_every_arm_with_real_scales():
    r = ko.check_fp8_block_gemm(casts_to_bf16, shapes=[(384, 320, 9)], verbose=False)
    failed_arms = {f.split("arm=")[1].split()[0] for f in r.failures}
    assert {"FOLD", "RAND"} <= failed_arms


def test_the_k_tail_bug_is_caught_on_a_ragged_k():
    r = ko.check_fp8_block_gemm(drops_the_last_k, shapes=[(144, 128, 16)], verbose=False)
    assert not r.ok


def test_refused_cases_are_counted_not_failed_and_all_refused_is_not_a_pass():
    def picky(w, scales, q, d, out):
        if w.shape[1] % 128:
            raise ko.Refused("k must be a multiple of 128")
        v2_block_gemm(w, scales, q, d, out)

    r = ko.check_fp8_block_gemm(picky, shapes=[(144, 128, 4), (256, 128, 4)], verbose=False)
    assert r.ok and r.refused == 4 and r.passed == 4
    r = ko.check_fp8_block_gemm(picky, shapes=[(144, 128, 4)], verbose=False)
    assert not r.ok and r.refused == 4 and r.failed == 0


def test_an_exception_is_a_failure_with_a_reproduction():
    def raises(w, scales, q, d, out):
        raise RuntimeError("boom")

    r = ko.check_fp8_block_gemm(raises, shapes=[(128, 128, 1)], arms=["EXACT"], verbose=False)
    assert r.failed == 1 and "RuntimeError: boom" in r.failures[0]


def test_a_declared_tensor_core_schedule_judges_rand_bit_for_bit():
    # The v2 reference declared as cuBLASLt's schedule: RAND now compares
    # bit for bit, and an f32 accumulation does not match the 14-bit model.
    r = ko.check_fp8_block_gemm(
        reference_gemm, shapes=[(384, 320, 9)], arms=["RAND"], schedule=Schedule.SM90_WGMMA_FUSED, verbose=False
    )
    assert not r.ok and "bit-identical required (0 differing bits allowed)" in r.failures[0]


def test_the_triton_kernels_fold_is_named_and_judged_under_its_schedule():
    # acc + (c * d) * s, as `accumulator += tl.dot(a, b) * a_s[:, None] *
    # b_s[None, :]` reads without FMA contraction: declared v2 it fails on
    # the FOLD arm; declared as what it is, it passes and is named.
    def partial_first(w, scales, q, d, out):
        v2_block_gemm(w, scales, q, d, out, partial_first=True)

    r = ko.check_fp8_block_gemm(partial_first, shapes=SHAPES, arms=["FOLD"], verbose=False)
    assert not r.ok and "v2 + partial-first fold" in r.failures[0]
    r = ko.check_fp8_block_gemm(partial_first, shapes=SHAPES, schedule=Schedule.V2_PARTIAL_FIRST, verbose=False)
    assert r.ok and Schedule.V2_PARTIAL_FIRST in r.identified_exact_arms
    assert Schedule.V2 not in r.identified_exact_arms
