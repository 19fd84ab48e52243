"""Wrong kernels that a cold mutation hunt found passing the default
batteries, now failing them: a reduction that drops the partial tail of its
domain (the last group's remainder, a partial last tile of rows), a GEMM's
partial last row tile read from another tile, a batch stride taken as 0, a
pair index or a cache slot kept in 16 bits, a zero input's sign lost, a
flushed subnormal block scale, an expert given one tile of pairs, and ids
read one block only, a vocabulary walked in whole blocks, draft positions
past 8 never judged. Each kernel is the
numpy reference with one such change (`bug=True`); each must fail the
check's default battery (no shapes or arms given), and pass it without the
change (`bug=False`), so the failure is the change's."""

import numpy as np
import pytest

import kernel_oracle as ko
import test_check_moe as moe_tests
from numpy_reference import fused_moe_fp8_grouped, moe_align

F = np.float32
enc, dec = ko.encode_bf16, ko.decode_bf16


def rounded(v):
    return dec(enc(np.asarray(v, F)))


def sat_e4m3(y):
    return ko.encode_e4m3(np.fmax(F(-448), np.fmin(np.asarray(y, F), F(448))).astype(F))


def vectorized(n, width):
    """The elements a loop vectorized by `width` with no remainder reads."""
    return n // width * width


BUG = pytest.mark.parametrize("bug", [False, True], ids=["reference", "bug"])


def judged(r, bug):
    """The check fails the kernel exactly when it carries the bug."""
    assert bool(r) is not bug, r


@BUG
def test_group_amax_without_its_remainder(bug):
    # The amax loop of each group vectorized by 8 without its tail; the
    # code loop covers the whole group.
    def quant(x, q, s):
        for g in range(-(-x.shape[1] // 128)):
            lo, hi = g * 128, min((g + 1) * 128, x.shape[1])
            ahi = lo + vectorized(hi - lo, 8) if bug else hi
            amax = np.maximum(np.max(np.abs(x[:, lo:ahi]), axis=1), F(1e-10))
            sc = (amax / F(448)).astype(F)
            q[:, lo:hi] = sat_e4m3(x[:, lo:hi] / sc[:, None])
            s[:, g] = sc

    r = ko.check_fp8_group_quant(quant, verbose=False)
    judged(r, bug)


@BUG
def test_group_quant_negative_zero_code_written_as_positive_zero(bug):
    # A negative element that rounds to zero coded 0x00 instead of 0x80.
    def quant(x, q, s):
        for g in range(-(-x.shape[1] // 128)):
            lo, hi = g * 128, min((g + 1) * 128, x.shape[1])
            amax = np.maximum(np.max(np.abs(x[:, lo:hi]), axis=1), F(1e-10))
            sc = (amax / F(448)).astype(F)
            c = sat_e4m3(x[:, lo:hi] / sc[:, None])
            q[:, lo:hi] = np.where(bug & (c == 0x80), np.uint8(0), c)
            s[:, g] = sc

    r = ko.check_fp8_group_quant(quant, verbose=False)
    judged(r, bug)


@BUG
@pytest.mark.parametrize("tile", [8, 16, 32])
def test_tensor_amax_over_whole_row_tiles(tile, bug):
    # A per-tensor amax over whole tiles of rows only (the partial last
    # tile dropped), codes over every row.
    def quant(x, q, s):
        m = x.shape[0]
        rows = vectorized(m, tile) if bug and m >= tile else m
        sc = np.maximum(F(np.abs(x[:rows]).max()) / F(448), F(ko.MIN_SCALING_FACTOR)).astype(F)
        q[...] = sat_e4m3((x / sc).astype(F))
        s[...] = sc

    r = ko.check_fp8_scaled_quant(quant, granularity="tensor", rule="divide", verbose=False)
    judged(r, bug)


@BUG
def test_rms_norm_quant_tensor_amax_over_whole_row_tiles(bug):
    def fn(x, weight, eps, q, s):
        xv, w = dec(x), dec(weight)
        mean = np.add.accumulate(xv * xv, axis=1, dtype=F)[:, -1] / F(xv.shape[1])
        r = F(1) / np.sqrt(mean + F(eps))
        v = rounded(rounded(xv * r[:, None]) * w)
        m = v.shape[0]
        a = np.abs(v[: vectorized(m, 8)] if bug and m >= 8 else v)
        sc = np.maximum(np.fmax.reduce(a.reshape(-1)) / F(448), F(ko.MIN_SCALING_FACTOR)).astype(F)
        s[...] = sc
        q[...] = sat_e4m3((v / sc).astype(F))

    r = ko.check_rms_norm_fp8_quant(fn, static=False, granularity="tensor", rule="divide", verbose=False)
    judged(r, bug)


def first_tile_rows(m, bug):
    """Row indices of a GEMM whose partial last 16-row tile (m > 16) reads
    the first tile's rows (a tile index that forgot its offset) with the
    bug, every row's own without."""
    idx = np.arange(m)
    if bug and m > 16 and m % 16:
        t = vectorized(m, 16)
        idx[t:] -= t
    return idx


@BUG
def test_fp8_scaled_mm_partial_row_tile(bug):
    def gemm(q, d, w, s, out):
        idx = first_tile_rows(q.shape[0], bug)
        out[...] = ko.fp8_scaled_mm(q[idx].copy(), d[idx].copy(), w, s)

    r = ko.check_fp8_scaled_mm(gemm, verbose=False)
    judged(r, bug)


@BUG
def test_int8_scaled_mm_partial_row_tile(bug):
    def mm(q, d, w, s, bias, azp, azp_adj, out):
        idx = first_tile_rows(q.shape[0], bug)
        acc = q[idx].astype(np.int64) @ w.astype(np.int64).T
        out[...] = enc(((acc.astype(F) * s[None, :]) * d[idx][:, None]).astype(F))

    r = ko.check_int8_scaled_mm(mm, epilogue="weight_first", verbose=False)
    judged(r, bug)


@BUG
def test_attention_batch_stride_of_q_and_k_taken_as_zero(bug):
    def attn(q, k, v, out):
        Q, K, V = dec(q), dec(k), dec(v)
        if bug:
            Q = np.broadcast_to(Q[:1], Q.shape)
            K = np.broadcast_to(K[:1], K.shape)
        B, Hq, Sq, D = Q.shape
        heads = np.arange(Hq) // (Hq // K.shape[1])
        S = (np.matmul(Q, K[:, heads].transpose(0, 1, 3, 2)) * F(1 / np.sqrt(D))).astype(F)
        P = np.exp(S - S.max(-1, keepdims=True)).astype(F)
        l = P.sum(-1, keepdims=True, dtype=F)
        out[...] = enc((np.matmul(dec(enc(P)), V[:, heads]) / l).astype(F))

    r = ko.check_attention(attn, verbose=False)
    judged(r, bug)


@BUG
def test_moe_align_pair_index_in_16_bits(monkeypatch, bug):
    def int16_index(topk_ids, num_experts, block_size, sorted_ids, expert_ids, total, **kw):
        moe_align(topk_ids, num_experts, block_size, sorted_ids, expert_ids, total, **kw)
        n, numel = total[0], topk_ids.size
        v = sorted_ids[:n]
        if bug:
            sorted_ids[:n] = np.where(v < numel, v.astype(np.int16).astype(np.int32), v)

    monkeypatch.setattr(moe_tests, "moe_align", int16_index)
    f = moe_tests.for_shapes(moe_tests.aligner("atomic"), list(ko.MOE_ALIGN_SHAPES))
    r = ko.check_moe_align_block_size(f, verbose=False)
    judged(r, bug)


@BUG
def test_rms_norm_zero_input_as_positive_zero(bug):
    def rms(x, weight, eps, out):
        xv, w = dec(x), dec(weight)
        m = np.add.accumulate(xv * xv, axis=1, dtype=F)[:, -1] / F(xv.shape[1])
        r = F(1) / np.sqrt(m + F(eps))
        o = rounded(rounded(xv * r[:, None]) * w)
        out[...] = enc(np.where(bug & (xv == 0), F(0) * w, o).astype(F))

    r = ko.check_rms_norm(rms, verbose=False)
    judged(r, bug)


@BUG
def test_rope_pass_through_rotated_by_the_identity(bug):
    def rope(positions, query, key, cache, out_query, out_key):
        cv = cache if cache.dtype == F else dec(cache)
        rot, half = cv.shape[1], cv.shape[1] // 2
        i1 = np.arange(half)
        i2 = i1 + half
        for v, out in ((query, out_query), (key, out_key)):
            x = dec(v)
            c, s = cv[positions][:, None, :half], cv[positions][:, None, half:]
            o = x.copy()
            o[..., i1] = rounded(x[..., i1] * c - x[..., i2] * s)
            o[..., i2] = rounded(x[..., i2] * c + x[..., i1] * s)
            if bug and rot < x.shape[-1]:
                p = x[..., rot:]
                hp = p.shape[-1] // 2
                a, b = p[..., :hp], p[..., hp : 2 * hp]
                o[..., rot : rot + hp] = a * F(1) - b * F(0)
                o[..., rot + hp : rot + 2 * hp] = b * F(1) + a * F(0)
            out[...] = enc(o)

    r = ko.check_rotary_embedding(rope, cache_dtype="float32", verbose=False)
    judged(r, bug)


@BUG
def test_mul_mat_subnormal_block_scale_flushed(bug):
    # q4_0 with its f16 block scale `d` decoded flush-to-zero when
    # subnormal (a hand-written half decode, or an f16 path without
    # denormals): the k = 32 shape's outputs are one block each.
    def f16(h):
        v = h.view(np.float16).astype(F)
        return np.where(bug & ((h & 0x7C00) == 0), F(0) * np.sign(v), v).astype(F)

    def mul_mat(dtype, src0, src1, dst):
        m = src0.shape[0]
        b = src0.reshape(m, -1, 18)
        d = f16(np.ascontiguousarray(b[:, :, :2]).view(np.uint16)[..., 0])
        qs = b[:, :, 2:]
        q = np.concatenate([(qs & 0xF).astype(np.int32) - 8, (qs >> 4).astype(np.int32) - 8], axis=-1)
        w = (d[:, :, None] * q.astype(F)).reshape(m, -1)
        dst[...] = src1 @ w.T

    r = ko.check_mul_mat(mul_mat, dtypes=[ko.GgmlType.Q4_0], verbose=False)
    judged(r, bug)


def slots(slot_mapping, bug):
    """The slot a cache write uses: kept in 16 bits with the bug."""
    return slot_mapping.astype(np.int16).astype(np.int64) if bug else slot_mapping.astype(np.int64)


@BUG
def test_reshape_and_cache_slot_in_16_bits(bug):
    def cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        s = slots(slot_mapping, bug)
        t = np.nonzero(s >= 0)[0]
        bs = key_cache.shape[1]
        key_cache[s[t] // bs, s[t] % bs] = key[t]
        value_cache[s[t] // bs, s[t] % bs] = value[t]

    r = ko.check_reshape_and_cache(cache, verbose=False)
    judged(r, bug)


@BUG
def test_concat_and_cache_mla_slot_in_16_bits(bug):
    def mla(kv_c, k_pe, kv_cache, slot_mapping, scale):
        s = slots(slot_mapping, bug)
        t = np.nonzero(s >= 0)[0]
        bs = kv_cache.shape[1]
        kv_cache[s[t] // bs, s[t] % bs] = np.concatenate([kv_c, k_pe], axis=1)[t]

    r = ko.check_concat_and_cache_mla(mla, verbose=False)
    judged(r, bug)


E4M3 = ko.decode_e4m3(np.arange(256, dtype=np.uint8))


@BUG
def test_fused_moe_one_row_tile_per_expert(bug):
    # An expert GEMM whose grid covers one 64-row tile of pairs per expert.
    def moe(*args):
        fused_moe_fp8_grouped(*args, max_pairs=64 if bug else None)

    r = ko.check_fused_moe_fp8(moe, schedule=ko.Schedule.V2_PARTIAL_FIRST, verbose=False)
    judged(r, bug)


@BUG
def test_fp8_block_gemm_first_row_tile_only(bug):
    def gemm(w, scales, q, d, out):
        out_f, in_f = w.shape
        nblk = -(-in_f // 128)
        wf = np.zeros((out_f, nblk * 128), F)
        wf[:, :in_f] = E4M3[w]
        qf = E4M3[q[:, : nblk * 128]]
        srow = np.arange(out_f) // 128
        acc = np.zeros((q.shape[0], out_f), F)
        for b in range(nblk):
            c = qf[:, b * 128 : (b + 1) * 128] @ wf[:, b * 128 : (b + 1) * 128].T
            acc = acc + (d[:, b : b + 1] * scales[srow, b][None, :]) * c
        out[...] = acc
        if bug:
            out[128:] = 0

    r = ko.check_fp8_block_gemm(gemm, verbose=False)
    judged(r, bug)


@BUG
def test_penalties_reading_one_block_of_ids(bug):
    # Only the first 256 prompt ids and 1024 output ids read (a fixed
    # BLOCK over the ids with no loop).
    import test_check_penalties as tp

    ref = tp.numpy_penalties()

    def capped(logits, prompt, output, pres, freq, rep, out):
        p, o = prompt.copy(), output.copy()
        if bug:
            p[:, 256:] = logits.shape[1]
            o[:, 1024:] = logits.shape[1]
        ref(logits, p, o, pres, freq, rep, out)

    r = ko.check_penalties(capped, verbose=False)
    judged(r, bug)


def leaves_unwritten(fn, region):
    """`fn`, whose outputs keep the check's prefill in `region(output)`
    (a grid that stops at a fixed count of rows, groups, heads or tokens)."""

    def wrapped(*args):
        outs = [a for a in args if isinstance(a, np.ndarray) and a.flags.writeable]
        before = [o.copy() for o in outs]
        fn(*args)
        for o, b in zip(outs, before):
            sel = region(o)
            if sel is not None:
                o[sel] = b[sel]

    return wrapped


@BUG
@pytest.mark.parametrize("past", ["rows", "groups"])
def test_int8_group_quant_grid_stopping_at_64(past, bug):
    from test_check_int8_group_quant import quantizer

    def region(o):
        if not bug:
            return None
        # q is [m, k], s is [m, groups]: 64 groups of 128 elements.
        cols = 64 * 128 if o.dtype == np.int8 else 64
        return np.s_[64:] if past == "rows" else np.s_[:, cols:]

    r = ko.check_int8_group_quant(leaves_unwritten(quantizer(), region), verbose=False)
    judged(r, bug)


@BUG
@pytest.mark.parametrize("past", ["heads", "tokens"])
def test_merge_attn_states_grid_stopping_short(past, bug):
    from test_check_merge_attn_states import numpy_merge

    def region(o):
        if not bug:
            return None
        if o.ndim == 3:  # out [T, H, D]
            return np.s_[:, 32:] if past == "heads" else np.s_[512:]
        # out_lse [H, T]
        return np.s_[32:] if past == "heads" else np.s_[:, 512:]

    r = ko.check_merge_attn_states(leaves_unwritten(numpy_merge(), region), verbose=False)
    judged(r, bug)


@BUG
@pytest.mark.parametrize("form", ["whole-blocks", "first-8"])
def test_rejection_sample_partial_vocab_block_and_late_drafts(form, bug):
    # The recovered token's argmax over whole 1024-id blocks only (the
    # partial last block of a 1280-id vocabulary never read), or a kernel
    # that judges at most 8 draft positions.
    from test_check_rejection_sample import numpy_rejection_sample

    r = ko.check_rejection_sample(numpy_rejection_sample(bug=form if bug else None), verbose=False)
    judged(r, bug)
