"""Plain numpy implementations of three contracts, written for the tests
from the contracts' definitions (not from the Rust code): the per-block
FP8 GEMM in v2's order (one accumulator per 128-k block, folded as
``sum + (s * d) * c`` in increasing block order), ggml's ``mul_mat``
on weights dequantized by the module, and the gated delta rule (GDN
decode from the conv output on) in float32 with numpy's own
transcendentals and summation order.

They are what a Python kernel author would write as a reference, so the
checks must pass them, and the planted bugs in ``test_check_*.py`` are
small edits of them.
"""

import numpy as np

import kernel_oracle as ko

# Every e4m3 code's value (NaN magnitudes as NaN; the checks never give
# them, rule NAN-W).
E4M3 = ko.decode_e4m3(np.arange(256, dtype=np.uint8))


def v2_block_gemm(w, scales, q, d, out, k_used=None, partial_first=False):
    """out[m, out_f] = the v2 per-block FP8 GEMM of w[out_f, in_f],
    scales[ceil(out_f/128), ceil(in_f/128)], q[m, in_f_pad], d[m, in_f_pad/128].

    Each block's c is a float32 matmul (any order is exact on the check's
    EXACT, FOLD and CODES data); ``k_used`` < in_f drops the weights'
    last columns (a planted bug); ``partial_first`` folds as the field's
    Triton kernels write it, ``acc + (c * d) * s``."""
    out_f, in_f = w.shape
    k_used = in_f if k_used is None else k_used
    nblk = -(-in_f // 128)
    wf = np.zeros((out_f, nblk * 128), np.float32)
    wf[:, :k_used] = E4M3[w[:, :k_used]]
    qf = E4M3[q[:, : nblk * 128]]
    srow = np.repeat(np.arange(scales.shape[0]), 128)[:out_f]
    acc = np.zeros((q.shape[0], out_f), np.float32)
    for b in range(nblk):
        c = qf[:, b * 128 : (b + 1) * 128] @ wf[:, b * 128 : (b + 1) * 128].T
        if partial_first:
            acc = acc + (c * d[:, b : b + 1]) * scales[srow, b][None, :]
        else:
            sd = d[:, b : b + 1] * scales[srow, b][None, :]
            acc = acc + sd * c
    out[...] = acc


def mul_mat(dtype, src0, src1, dst):
    """dst[n, m] = sum_k dequantize(src0)[m, k] * src1[n, k]: ggml's
    mul_mat, the weights dequantized by the module, the sums a float32
    matmul (exact on the EXACT arm, within the bound on RAND)."""
    w = ko.ggml_dequantize(dtype, src0)
    dst[...] = src1 @ w.T


def gated_delta_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state, bug=None, states=None):
    """The gated delta rule with its L2 norm and gates inside, in float32:
    q, k [B, t, num_k, 128], v [B, t, num_v, 128], alpha, beta_raw
    [B, t, num_v], a_log, dt_bias [num_v], state [B, num_v, 128, 128]
    (S[h][key][value]); writes o [B, t, num_v, 128] and final_state (and,
    when given, ``states`` [B, t, num_v, 128, 128], the state after each
    row).

    ``bug`` plants one of the mistakes ``test_check_gdn.py`` expects the
    check to catch (see there); None computes the contract."""
    f32 = np.float32
    nb, nt, nk, _ = q.shape
    nv = v.shape[2]
    scale = f32(1) / np.sqrt(f32(128))
    heads = np.arange(nv) % nk if bug == "gqa-modulo" else np.arange(nv) // (nv // nk)
    src = state if bug == "updates-state-in-place" else state.copy()
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for b in range(nb):
            S = src[0 if bug == "first-sequence-state" else b]

            def norm(x):
                ss = np.sum(x * x, axis=-1, keepdims=True, dtype=f32)
                if bug == "eps-outside-sqrt":
                    return x / (np.sqrt(ss) + f32(1e-6))
                if bug == "no-eps":
                    return x / np.sqrt(ss)
                return x / np.sqrt(ss + f32(1e-6))

            for r in range(nt):
                if states is not None and bug == "states-before-row":
                    states[b, r] = S
                qh, kh = norm(q[b, r])[heads], norm(k[b, r])[heads]
                beta = f32(1) / (f32(1) + np.exp(-beta_raw[b, r]))
                x = alpha[b, r] + dt_bias
                sp = np.log1p(np.exp(x))
                if bug != "softplus-overflow":
                    sp = np.where(x > f32(5 if bug == "softplus-threshold-5" else 20), x, sp)
                decay = np.exp(-np.exp(a_log) * sp)[:, None, None]
                if bug == "decay-after-delta":
                    kv = np.einsum("hi,hij->hj", kh, S)
                    S = S * decay
                else:
                    S = S * decay
                    kv = np.einsum("hi,hij->hj", kh, S)
                delta = beta[:, None] * (v[b, r] - kv)
                if bug == "read-before-update":
                    o[b, r] = np.einsum("hi,hij->hj", qh, S) * scale
                S = S + kh[:, :, None] * delta[:, None, :]
                if bug != "read-before-update":
                    o[b, r] = np.einsum("hi,hij->hj", qh, S) * scale
                if bug == "updates-state-in-place":
                    src[b] = S
                if states is not None and bug != "states-before-row" and (bug != "states-last-only" or r == nt - 1):
                    states[b, r] = S
            if bug == "stores-bf16-state":
                S = ko.decode_bf16(ko.encode_bf16(S))
            if bug != "leaves-final-state-unwritten":
                final_state[b] = S


def gated_delta_rule_pool(q, k, v, alpha, beta_raw, a_log, dt_bias, state_pool, ssm_state_indices, *rest, bug=None):
    """The gated delta rule on a pool of states addressed by
    ``ssm_state_indices``, as vLLM's ``fused_recurrent_gated_delta_rule``
    with ``inplace_final_state=True`` addresses it: ``rest`` is ``(o,
    final_pool)`` in decode (indices [B]) or ``(num_accepted_tokens, o,
    final_pool)`` in spec (indices [B, t]). Sequence b reads slot
    ``idx[b, num_accepted[b] - 1]`` (decode: ``idx[b]``), skips itself
    when that is -1, and stores the state after row r to ``idx[b, r]``
    when it is not -1 (decode: the final state to ``idx[b]``).

    ``bug`` plants one of the addressing mistakes ``test_check_gdn.py``
    expects the check to catch; None computes the contract."""
    o, final_pool = rest[-2], rest[-1]
    spec = ssm_state_indices.ndim == 2
    nb, nt = q.shape[:2]
    idx = ssm_state_indices.reshape(nb, -1)
    accepted = rest[0] if spec else np.ones(nb, dtype=np.int32)
    pool = state_pool.copy()
    if bug == "transposed-pool":
        pool = np.ascontiguousarray(pool.swapaxes(-1, -2))
    if bug == "pool-not-copied":
        pass
    elif bug == "zeroes-untouched-slots":
        final_pool[...] = 0
    else:
        final_pool[...] = pool
    for b in range(nb):
        col = 0 if bug == "reads-first-column" else accepted[b] - 1
        if bug == "bound-by-row-stride" and col >= 1:
            continue
        read = idx[b, col]
        if read < 0 and bug != "computes-padded-sequences":
            continue
        one = lambda x: x[b : b + 1]
        states = np.empty((1, nt) + pool.shape[1:], dtype=np.float32)
        last = np.empty((1,) + pool.shape[1:], dtype=np.float32)
        start = pool[b] if bug == "ignores-indices" else pool[read]
        gated_delta_rule(*map(one, (q, k, v, alpha, beta_raw)), a_log, dt_bias, start[None], one(o), last, states=states)
        if not spec:
            final_pool[b if bug == "ignores-indices" else read] = last[0]
            continue
        for r in range(nt):
            if bug == "stores-final-only" and r != nt - 1:
                continue
            if idx[b, r] >= 0 or bug == "stores-unindexed-rows":
                final_pool[idx[b, r]] = states[0, r]
    if bug == "transposed-pool":
        final_pool[...] = final_pool.swapaxes(-1, -2).copy()


def causal_conv1d_update(x, conv_state, weight, out, final_state, bug=None, states=None):
    """The causal depthwise conv1d update with SiLU and no bias, in
    float32: x [B, dim, t] (oldest first), conv_state [B, dim, L] with L >=
    d_conv - 1 (the window reads its trailing d_conv - 1), weight [dim,
    d_conv] (tap d_conv - 1 on the newest input); writes out [B, dim, t]
    and final_state [B, dim, L], the last L inputs (and, when given,
    ``states`` [B, t, dim, L], the state after each new input).

    ``bug`` plants one of the mistakes ``test_check_gdn.py`` expects the
    check to catch; None computes the contract."""
    f32 = np.float32
    k = weight.shape[1]
    p = k - 1
    ln = conv_state.shape[2]
    # The window's first input: the state's trailing p (its first p when
    # planted, as SGLang's Triton port read an oversized state).
    head = 0 if bug == "reads-state-head" else ln - p
    taps = weight[:, ::-1] if bug == "convolution" else weight
    win = np.concatenate([conv_state, x], axis=2)
    with np.errstate(over="ignore"):
        for r in range(x.shape[2]):
            if bug == "stale-window":
                w = np.concatenate([conv_state[:, :, ln - p:], x[:, :, r:r + 1]], axis=2)
            elif bug == "reads-state-head":
                w = np.concatenate([conv_state[:, :, :p], x], axis=2)[:, :, r:r + k]
            else:
                w = win[:, :, head + r:head + r + k]
            a = np.sum(w * taps[None], axis=2, dtype=f32)
            y = a if bug == "no-silu" else a / (f32(1) + np.exp(-a))
            if states is not None:
                # The last ln inputs after input r (after the one before
                # it, planted).
                at = r + 1 - (bug == "states-before-input")
                states[:, r] = win[:, :, at:at + ln]
            if bug == "ragged-channels-unwritten":
                full = (x.shape[1] // 128) * 128
                out[:, :full, r] = y[:, :full]
            else:
                out[:, :, r] = y
    state = win[:, :, -ln:]
    if bug == "state-shifted-once":
        state = win[:, :, 1:1 + ln]
    if bug == "state-newest-first":
        state = state[:, :, ::-1]
    if bug == "shifts-only-the-window":
        # An oversized state's head kept, only its last p entries moved.
        state = np.concatenate([conv_state[:, :, :ln - p], win[:, :, -p:]], axis=2)
    final_state[...] = state


def causal_conv1d_update_pool(x, conv_state, weight, conv_state_indices, out, final_pool, bug=None):
    """The conv update on a pool of states addressed by
    ``conv_state_indices`` [B] (vLLM's ``causal_conv1d_update``): sequence b
    reads and writes slot ``idx[b]``, skipped when that is -1 (padding);
    final_pool is the whole pool after the call.

    ``bug``: "ignores-indices" (slot b for sequence b), "computes-padding"
    (a -1 index dereferenced: numpy's last slot), "pool-not-copied"."""
    if bug != "pool-not-copied":
        final_pool[...] = conv_state
    for b, idx in enumerate(conv_state_indices):
        slot = b if bug == "ignores-indices" else idx
        if idx < 0 and bug != "computes-padding":
            continue
        fin = np.empty((1,) + conv_state.shape[1:], dtype=np.float32)
        causal_conv1d_update(x[b : b + 1], conv_state[slot][None], weight, out[b : b + 1], fin)
        final_pool[slot] = fin[0]


def group_quant(x, q, s, rule="divide", eps=1e-10, group=128, bug=None):
    """Per-token-group e4m3 quantization in float32 numpy: x [m, k] ->
    codes q [m, k] (through ``ko.encode_e4m3``) and scales s [m, ceil(k /
    group)], under ``rule``: "v2" (codes of x * (448 / amax); a zero group
    gets scale 0), "reciprocal" (the scale as amax * fl(1/448), then as
    "divide"), "divide" (vLLM's per_token_group_quant_8bit: amax from
    eps, codes of clip(x / s)), "ue8m0" (s floored at 1e-10, then
    2^ceil(log2(s)) with the log2 rounded to float32, as a correctly
    rounded log2f gives it).

    ``bug`` plants one of the mistakes ``test_check_quant.py`` expects the
    check to catch; None computes the rule."""
    f32 = np.float32
    m, k = x.shape
    # "group-64" / "amax-first-128": each group's amax over its first 64 /
    # 128 elements only (vllm-xpu-kernels issue 520: a 32-lane sub-group's
    # shuffle over a 256-element group).
    step = {"group-64": 64, "amax-first-128": 128}.get(bug, group)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for g in range(-(-k // group)):
            if bug == "unwritten-last-group" and g == -(-k // group) - 1:
                continue
            lo, hi = g * group, min((g + 1) * group, k)
            xs = x[:, lo:hi]
            if bug in ("group-64", "amax-first-128"):
                xs = x[:, g * group:min(g * group + step, k)]
            amax = np.max(np.abs(xs), axis=1)
            if rule == "v2":
                sc = amax / f32(448)
                r = f32(448) / amax
                codes = ko.encode_e4m3(x[:, lo:hi] * r[:, None])
                codes[amax == 0] = 0
                sc[amax == 0] = 0
            else:
                if bug != "no-eps":
                    amax = np.maximum(amax, f32(eps))
                if rule == "reciprocal":
                    # torch's CUDA tensor / Python scalar: times fl(1/448).
                    sc = amax * (f32(1) / f32(448))
                else:
                    sc = amax / f32(448)
                if rule == "ue8m0":
                    log2 = np.log2(np.maximum(sc, f32(1e-10)).astype(np.float64))
                    if bug != "ue8m0-exact-ceil":
                        log2 = log2.astype(f32)
                    sc = (2.0 ** np.ceil(log2)).astype(f32)
                if bug == "fp8-max-224":
                    # e4m3fnuz's bound on an e4m3fn kernel (SGLang PR 30900).
                    sc = amax / f32(224)
                if bug == "reciprocal-multiply":
                    y = x[:, lo:hi] * (f32(448) / amax)[:, None]
                else:
                    y = x[:, lo:hi] / sc[:, None]
                bound = f32(224) if bug == "fp8-max-224" else f32(448)
                y = np.clip(y, -bound, bound).astype(f32)
                if bug == "f16-intermediate":
                    # float32 -> float16 -> e4m3, each to nearest even: a
                    # value just past an e4m3 midpoint lands on it, then
                    # ties to even (Triton's cast on sm_89, PR 11753).
                    y = y.astype(np.float16).astype(f32)
                codes = ko.encode_e4m3(y)
                if bug == "truncate":
                    back = ko.decode_e4m3(codes)
                    over = np.abs(back) > np.abs(y)
                    codes = np.where(over & (codes & 0x7F > 0), codes - 1, codes).astype(np.uint8)
            if bug == "inverted-scale":
                sc = f32(1) / sc
            q[:, lo:hi] = codes
            s[:, g] = sc


def moe_align(topk_ids, num_experts, block_size, sorted_ids, expert_ids, total, expert_map=None,
              map_mode="mark", order="atomic", seed=0, bug=None):
    """MoE token alignment as vLLM's moe_align_block_size defines it, in
    numpy: each expert's pairs (flat indices of topk_ids), then pads of
    value numel up to a multiple of block_size, experts in increasing id;
    expert_ids[b] the expert of block b (under map_mode "mark" mapped
    through expert_map, -1 for another rank's); ids outside 0 ..
    num_experts go nowhere; under "ignore" a non-local expert's pairs go
    nowhere and ids are local. The outputs are written in place; past the
    used part sorted_ids gets pads and expert_ids -1.

    ``order``: "atomic" places each expert's pairs in a random order (as
    vLLM's atomicAdd scatter does), "stable" in increasing flat index.
    ``bug`` plants one of the mistakes ``test_check_moe.py`` expects the
    check to catch; None computes the contract."""
    flat = topk_ids.reshape(-1).astype(np.int64)
    numel = flat.size
    n_keys = num_experts
    if bug == "negative-wraps":
        # Python indexing: -1 is the last expert.
        flat = np.where(flat < 0, flat % num_experts, flat)
    if bug == "clamp-high":
        flat = np.where(flat >= num_experts, num_experts - 1, flat)
    valid = (flat >= 0) & (flat < num_experts)
    key = np.where(valid, flat, -1)
    if expert_map is not None and (map_mode == "ignore") != (bug == "map-mode-swapped"):
        key = np.where(valid, expert_map[np.clip(flat, 0, num_experts - 1)], -1)
    if bug == "drop-last-pair":
        key[-1] = -1
    counts = np.bincount(key[key >= 0], minlength=n_keys)
    if bug == "floor-not-ceil":
        padded = counts // block_size * block_size
    elif bug == "pad-full-blocks":
        padded = (counts // block_size + 1) * block_size * (counts > 0)
    elif bug == "empty-expert-block":
        padded = np.maximum(-(-counts // block_size) * block_size, block_size)
    else:
        padded = -(-counts // block_size) * block_size
    start = np.concatenate([[0], np.cumsum(padded)])
    pad = numel - 1 if bug == "pad-numel-minus-1" else numel
    sorted_ids[:] = pad
    expert_ids[:] = -1
    rng = np.random.default_rng(seed)
    for e in range(n_keys):
        pairs = np.nonzero(key == e)[0]
        if order == "atomic":
            pairs = rng.permutation(pairs)
        if bug == "first-1024-pairs":
            pairs = pairs[pairs < 1024]
        take = min(pairs.size, padded[e])
        sorted_ids[start[e]:start[e] + take] = pairs[:take]
        value = e
        if expert_map is not None and map_mode == "mark" and bug != "map-mode-swapped":
            value = expert_map[e]
        for b in range(start[e] // block_size, start[e + 1] // block_size):
            expert_ids[b + (1 if bug == "block-shift" else 0)] = value
    total[0] = start[-1]


def fused_moe_fp8(a, a_scale, w, w_scale, topk_weights, topk_ids, out, mul_routed_weight=True,
                  out_dtype="bfloat16", bug=None):
    """vLLM's fused-MoE block-FP8 expert GEMM, one (token t, slot j) pair
    at a time, in float32: a [M, K] and w [E, N, K] e4m3 codes, a_scale
    [M, ceil(K/128)], w_scale [E, ceil(N/128), ceil(K/128)], topk_weights
    and topk_ids [M, topk]; writes out [M, topk, N] (float32, or uint16
    bit patterns of bfloat16 / float16). Per 128-k block b the block's dot
    product c (a float32 matvec, exact on the EXACT, FOLD and CODES data)
    is folded as ``acc + (c * a_scale[t, b]) * w_scale[e, n // 128, b]``,
    the Triton kernel's ``tl.dot(a, b) * a_scale[:, None] * b_scale[None,
    :]`` without FMA contraction; then ``acc * topk_weights[t, j]`` and the
    cast, rounding to nearest even. Expert -1 writes zeros.

    ``bug`` plants one of the mistakes ``test_check_fused_moe.py`` expects
    the check to catch; None computes the contract."""
    f32 = np.float32
    m, k = a.shape
    ne, n, _ = w.shape
    topk = topk_ids.shape[1]
    nb = -(-k // 128)
    kp = nb * 128
    if bug == "k-tail-unmasked":
        # Unmasked loads run on into the next row (zeros past the end).
        flat_a = np.concatenate([E4M3[a.reshape(-1)], np.zeros(kp, f32)])
        flat_w = np.concatenate([E4M3[w.reshape(-1)], np.zeros(kp, f32)])
        A = np.stack([flat_a[t * k:t * k + kp] for t in range(m)])
        W = np.stack([flat_w[r * k:r * k + kp] for r in range(ne * n)]).reshape(ne, n, kp)
    else:
        A = np.zeros((m, kp), f32)
        A[:, :k] = E4M3[a]
        W = np.zeros((ne, n, kp), f32)
        W[:, :, :k] = E4M3[w]
    srow = np.arange(n) // (64 if bug == "scale-row-of-64" else 128)
    srow = np.minimum(srow, w_scale.shape[1] - 1)
    pairs = [(t, j) for t in range(m) for j in range(topk)]
    if bug == "drops-a-pair":
        pairs = [p for p in pairs if topk_ids[p] >= 0][:-1] + [p for p in pairs if topk_ids[p] < 0]
    for t, j in pairs:
        e = int(topk_ids[t, j])
        tw = topk_weights[t, j]
        if e == -1 and bug != "minus-one-is-last-expert":
            acc = np.zeros(n, f32)
        else:
            es = (e + 1) % ne if bug == "scale-of-next-expert" else e
            ta = (t * topk + j) % m if bug == "a-scale-of-pair-row" else t
            acc = np.zeros(n, f32)
            # BLOCK_SIZE_K = 256 over 128-k scale groups (a planted bug,
            # vLLM PR 14987): one dot per 256 k, scaled by its first group's.
            kstep = 2 if bug == "block-k-256" else 1
            for b in range(0, nb, kstep):
                c = W[e, :, b * 128:(b + kstep) * 128] @ A[t, b * 128:(b + kstep) * 128]
                d, s = a_scale[ta, b], w_scale[es, srow, b]
                if bug == "weight-inside-fold":
                    d = d * tw
                if bug == "scales-first":
                    acc = acc + (d * s) * c
                else:
                    acc = acc + (c * d) * s
            if mul_routed_weight and bug not in ("weight-missing", "weight-inside-fold"):
                acc = acc * tw
                if bug == "weight-twice":
                    acc = acc * tw
        if out_dtype == "float32":
            out[t, j] = acc
        elif out_dtype == "float16":
            out[t, j] = acc.astype(np.float16).view(np.uint16)
        elif bug == "truncates-bf16":
            out[t, j] = (acc.view(np.uint32) >> 16).astype(np.uint16)
        else:
            # Round to nearest even on the top 16 bits (finite inputs).
            u = acc.view(np.uint32).astype(np.uint64)
            out[t, j] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def fused_moe_fp8_grouped(a, a_scale, w, w_scale, topk_weights, topk_ids, out, mul_routed_weight=True,
                          out_dtype="bfloat16", max_pairs=None):
    """The same contract computed the way the kernel walks it: the pairs
    grouped by expert (a stable sort of the flat ids, as an alignment
    does), one float32 matmul per expert and 128-k block over its pairs'
    token rows, the fold, the routed weight and the cast per group, then
    scattered to the pairs' rows; expert -1 rows zeroed. `max_pairs` (a
    planted bug) keeps only each expert's first pairs, as a grid of a fixed
    count of tiles per expert does."""
    f32 = np.float32
    m, k = a.shape
    ne, n, _ = w.shape
    topk = topk_ids.shape[1]
    nb = -(-k // 128)
    flat = topk_ids.reshape(-1)
    C = np.zeros((m * topk, n), f32)
    order = np.argsort(flat, kind="stable")
    srow = np.arange(n) // 128
    for e in range(ne):
        p = order[flat[order] == e][:max_pairs]
        if p.size == 0:
            continue
        tok = p // topk
        acc = np.zeros((p.size, n), f32)
        for b in range(nb):
            lo, hi = b * 128, min(k, (b + 1) * 128)
            c = E4M3[a[tok, lo:hi]] @ E4M3[w[e, :, lo:hi]].T
            acc = acc + (c * a_scale[tok, b][:, None]) * w_scale[e, srow, b][None, :]
        if mul_routed_weight:
            acc = acc * topk_weights.reshape(-1)[p][:, None]
        C[p] = acc
    C = C.reshape(m, topk, n)
    if out_dtype == "float32":
        out[...] = C
    elif out_dtype == "float16":
        out[...] = C.astype(np.float16).view(np.uint16)
    else:
        out[...] = ko.encode_bf16(C)


# ---------------------------------------------------------------------------
# UE8M0 scales under either ceiling (check_fp8_group_quant's rule="ue8m0" /
# "ue8m0_exact", check_int8_group_quant's ue8m0=True / "exact").
# ---------------------------------------------------------------------------

def ue8m0_table():
    """The H100 table's scales, float32: 2^e (1 + u 2^-23) for e in -40 ..
    19 and u in 1, 2, 3, then the same u ulps below 2^e; and (e, u) of
    each (u negative below)."""
    pairs = [(e, u) for sign in (1, -1) for e in range(-40, 20) for u in (sign, 2 * sign, 3 * sign)]
    p = np.array([2.0**e for e, _ in pairs], np.float32).view(np.uint32).astype(np.int64)
    s = (p + np.array([u for _, u in pairs])).astype(np.uint32).view(np.float32)
    return s, pairs


def log2f_model(s):
    """The correctly rounded float32 log2: the float64 log2 (within an ulp
    of float64, far inside float32's rounding on these inputs) rounded to
    float32. core's ceil_log2f is the ceiling of this."""
    return np.log2(np.asarray(s, np.float32).astype(np.float64)).astype(np.float32)


_T, _ = ue8m0_table()
# numpy's float32 log2 (its own SIMD routine, not libm's) agrees with the
# correctly rounded model on the table's ceilings: the log2f forms use it;
# where a numpy build does not, they compute the model's way.
NP_LOG2F_CEIL_IS_MODELS = bool(np.array_equal(np.ceil(np.log2(_T)), np.ceil(log2f_model(_T))))


def log2f(s):
    """float32 log2 as the numpy forms take it: numpy's own float32 log2
    where its ceilings agree with the correctly rounded model on the H100
    table (NP_LOG2F_CEIL_IS_MODELS), else the model."""
    s = np.asarray(s, np.float32)
    return np.log2(s) if NP_LOG2F_CEIL_IS_MODELS else log2f_model(s)


def ue8m0_pow2(s, ceil="log2f"):
    """A scale rounded up to a power of two with vLLM's 1e-10 floor under
    it: ``ceil`` "log2f", 2^ceil(log2f(s)) (vLLM's CUDA
    exp2f(ceilf(log2f(fmaxf(s, 1e-10)))), torch's and Triton's log2 in
    float32); "exact", the bit form ((bits >> 23) & 0xFF) - 127 +
    (mantissa != 0) (DeepEP's fast_log2_ceil): the exact ceiling of a
    normal float32, which the floor keeps s."""
    s = np.maximum(np.asarray(s, np.float32), np.float32(1e-10)).astype(np.float32)
    if ceil == "log2f":
        e = np.ceil(log2f(s)).astype(np.float64)
    else:
        b = s.view(np.uint32).astype(np.int64)
        e = (((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0)).astype(np.float64)
    return np.exp2(e).astype(np.float32)


def group_quant_ue8m0(x, q, s, ceil="log2f", eps=1e-10, group=128):
    """Per-token-group e4m3 quantization with UE8M0 scales in float32 numpy
    (vLLM's per_token_group_quant_8bit with scale_ue8m0): amax from eps,
    the scale amax / 448 rounded up by ue8m0_pow2(., ceil), codes of
    clip(x / s, -448, 448)."""
    f32 = np.float32
    m, k = x.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        for g in range(-(-k // group)):
            lo, hi = g * group, min((g + 1) * group, k)
            amax = np.maximum(np.max(np.abs(x[:, lo:hi]), axis=1), f32(eps))
            sc = ue8m0_pow2(amax / f32(448), ceil)
            y = x[:, lo:hi] / sc[:, None]
            q[:, lo:hi] = ko.encode_e4m3(np.clip(y, f32(-448), f32(448)).astype(f32))
            s[:, g] = sc
