"""The FP8 block GEMM's pieces against independent values: the
quantizer's rules, the GEMM against the numpy reference on data where
any order is exact, schedule identification, and the tensor-core model
against the H200's recorded answers (core/tests/data)."""

import pathlib

import numpy as np
import pytest

import kernel_oracle as ko
from kernel_oracle import Fp8Format, Instruction, Schedule
from numpy_reference import E4M3, v2_block_gemm

DATA = pathlib.Path(__file__).resolve().parents[2] / "core" / "tests" / "data"


def test_in_f_pad_is_a_multiple_of_512():
    assert [ko.fp8_in_f_pad(k) for k in (1, 512, 513, 1000)] == [512, 512, 1024, 1024]


def test_quantizer_maps_each_blocks_amax_onto_448():
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, (3, 300)).astype(np.float32)
    x[1, 128:256] = 0  # QUANT-ZERO: an all-zero block gives d = 0
    q, d = ko.quantize_activations(x)
    assert q.shape == (3, 512) and q.dtype == np.uint8 and d.shape == (3, 4)
    for j in range(3):
        for b in range(3):
            blk = x[j, b * 128 : min((b + 1) * 128, 300)]
            amax = np.abs(blk).max()
            if amax == 0:
                assert d[j, b] == 0 and (q[j, b * 128 : (b + 1) * 128] == 0).all()
                continue
            assert d[j, b] == np.float32(amax) / np.float32(448)
            dinv = np.float32(448) / np.float32(amax)
            assert (q[j, b * 128 : b * 128 + blk.size] == ko.encode_e4m3(blk * dinv)).all()
        assert d[j, 3] == 0 and (q[j, 300:] == 0).all()


@pytest.mark.parametrize("arm", ["EXACT", "FOLD", "CODES"])
def test_gemm_equals_the_numpy_reference_where_every_order_is_exact(arm):
    c = ko.fp8_block_gemm_case(1000, 130, 7, arm)
    want = np.full((7, 130), np.nan, np.float32)
    v2_block_gemm(c["w"], c["scales"], c["q"], c["d"], want)
    got = ko.fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"])
    assert got.dtype == np.float32 and got.shape == (7, 130)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()
    assert Schedule.V2 in ko.identify_fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"], got)


def test_every_schedule_is_identified_as_itself():
    c = ko.fp8_block_gemm_case(384, 320, 5, "RAND")
    assert len(ko.SCHEDULES) == 10 and len(set(map(str, ko.SCHEDULES))) == 10
    for s in ko.SCHEDULES:
        y = ko.fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"], schedule=s)
        assert s in ko.identify_fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"], y), str(s)


def test_gemm_refuses_inconsistent_shapes():
    c = ko.fp8_block_gemm_case(256, 128, 2, "EXACT")
    with pytest.raises(ValueError, match="scales"):
        ko.fp8_block_gemm(c["w"], c["scales"][:, :1], c["q"], c["d"])
    with pytest.raises(ValueError, match="q"):
        ko.fp8_block_gemm(c["w"], c["scales"], c["q"][:, :256], c["d"])


@pytest.mark.parametrize("instruction", [Instruction.WGMMA, Instruction.MMA_SYNC])
@pytest.mark.parametrize("fa", ["e4m3", "e5m2"])
@pytest.mark.parametrize("fb", ["e4m3", "e5m2"])
def test_mma_k32_reproduces_the_h200s_recorded_answers(instruction, fa, fb):
    name = "wgmma" if instruction == Instruction.WGMMA else "mma_sync"
    raw = np.frombuffer((DATA / f"h200_{name}_{fa}_{fb}.bin").read_bytes(), np.uint8).reshape(-1, 72)
    assert raw.shape[0] == 1024
    a, b = raw[:, :32].copy(), raw[:, 32:64].copy()
    c = raw[:, 64:68].copy().view("<u4").view(np.float32)[:, 0]
    want = raw[:, 68:72].copy().view("<u4")[:, 0]
    fmt = {"e4m3": Fp8Format.E4M3, "e5m2": Fp8Format.E5M2}
    got = ko.mma_k32(a, b, c, a_format=fmt[fa], b_format=fmt[fb], instruction=instruction)
    assert got.shape == (1024,)
    assert (got.view(np.uint32) == want).all()


def test_mma_k32_truncates_the_sum_to_14_bits():
    # TC-NORM: 1 + 2^-14 needs 15 significant bits; wgmma keeps 14.
    a = np.zeros((1, 32), np.uint8)
    b = np.zeros((1, 32), np.uint8)
    a[0, :2] = ko.encode_e4m3(np.array([1.0, 2.0**-7], np.float32))
    b[0, :2] = ko.encode_e4m3(np.array([1.0, 2.0**-7], np.float32))
    d = ko.mma_k32(a, b, np.zeros(1, np.float32))
    assert d[0] == 1.0
    assert E4M3[a[0, 1]] * E4M3[b[0, 1]] == 2.0**-14


def test_schedules_are_cores_known_schedules_in_order():
    # On EXACT data every known schedule gives the same bits, so
    # identification returns core's whole list, in core's order: a
    # schedule core knows and Python does not name would be missing here.
    c = ko.fp8_block_gemm_case(256, 128, 2, "EXACT")
    y = ko.fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"])
    assert ko.identify_fp8_block_gemm(c["w"], c["scales"], c["q"], c["d"], y) == list(ko.SCHEDULES)
