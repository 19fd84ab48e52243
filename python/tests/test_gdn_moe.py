"""GDN decode rows and the MoE tables: the contracts' own properties
(a packed call is its rows chained, rule PACKED-EQ-CHAINED; the first
row's conv against the definition) and the MoE rules (PTR-64, DOWN-1,
RANGE) on values worked out here."""

import numpy as np
import pytest

import kernel_oracle as ko


def gdn_inputs(t, num_k=1, num_v=2, d_conv=4, seed=0):
    rng = np.random.default_rng(seed)
    c = 2 * 128 * num_k + 128 * num_v
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)
    return dict(qkv=f(t, c), beta_raw=f(t, num_v), alpha=f(t, num_v), conv_w=f(c, d_conv),
                dt_bias=f(num_v), a_log=f(num_v), ring=f(c, d_conv - 1),
                state=f(num_v, 128, 128) * np.float32(0.1), num_k=num_k)


def bits(a):
    return a.view(np.uint32)


def test_gdn_packed_rows_are_the_rows_chained():
    x = gdn_inputs(3)
    packed = ko.gdn_decode_rows(**x)
    ring, state = x["ring"], x["state"]
    for r in range(3):
        one = dict(x, qkv=x["qkv"][r:r + 1], beta_raw=x["beta_raw"][r:r + 1], alpha=x["alpha"][r:r + 1],
                   ring=ring, state=state)
        step = ko.gdn_decode_rows(**one)
        assert (bits(step["o"][0]) == bits(packed["o"][r])).all()
        assert (bits(step["conv_out"][0]) == bits(packed["conv_out"][r])).all()
        ring, state = step["ring"], step["state"]
        if r < 2:
            assert (bits(packed["snap_state"][r]) == bits(state)).all()
            assert (bits(packed["snap_conv"][r]) == bits(ring)).all()
    assert (bits(packed["state"]) == bits(state)).all() and (bits(packed["ring"]) == bits(ring)).all()
    assert packed["snap_state"].shape == (2, 2, 128, 128)


def test_gdn_conv_is_silu_of_the_ring_dot_the_weights():
    x = gdn_inputs(1, seed=2)
    got = ko.gdn_decode_rows(**x)["conv_out"][0].astype(np.float64)
    window = np.concatenate([x["ring"], x["qkv"][0][:, None]], axis=1).astype(np.float64)
    pre = (window * x["conv_w"]).sum(axis=1)
    want = pre / (1 + np.exp(-pre))
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gdn_refuses_a_head_ratio_that_does_not_divide():
    x = gdn_inputs(1, num_k=1, num_v=2)
    with pytest.raises(ValueError):
        ko.gdn_decode_rows(**dict(x, num_k=3))


def test_moe_tables_follow_ptr_64_and_down_1():
    experts = np.array([0, 5, 2], np.int32)
    weights = np.array([0.5, -0.25, 3.0], np.float32)
    macros = np.arange(3 * 6, dtype=np.float32).reshape(3, 6) / np.float32(7)
    big = 5 << 30  # a 5 GiB stride: a 32-bit product would wrap
    ptrs, scales = ko.moe_vrows_tables(experts, weights, 6, (1000, 2000, 3000), (big, 16, 8), macros)
    assert ptrs.dtype == np.uint64 and ptrs.shape == (3, 3)
    assert ptrs[0].tolist() == [1000, 1000 + 5 * big, 1000 + 2 * big]
    assert ptrs[2].tolist() == [3000, 3040, 3016]
    assert (bits(scales[0]) == bits(macros[0][experts])).all()
    assert (bits(scales[2]) == bits(weights * macros[2][experts])).all()
    _, ones = ko.moe_vrows_tables(experts, weights, 6, (0, 0, 0), (1, 1, 1))
    assert ones[0].tolist() == [1.0] * 3 and (ones[2] == weights).all()
    with pytest.raises(ValueError):
        ko.moe_vrows_tables(np.array([6], np.int32), np.ones(1, np.float32), 6, (0, 0, 0), (1, 1, 1))
