"""Plain numpy implementations of two contracts, written for the tests
from the contracts' definitions (not from the Rust code): the per-block
FP8 GEMM in v2's order (one accumulator per 128-k block, folded as
``sum + (s * d) * c`` in increasing block order) and ggml's ``mul_mat``
on weights dequantized by the module.

They are what a Python kernel author would write as a reference, so the
checks must pass them, and the planted bugs in ``test_check_*.py`` are
small edits of them.
"""

import numpy as np

import kernel_oracle as ko

# Every e4m3 code's value (NaN magnitudes as NaN; the checks never give
# them, rule NAN-W).
E4M3 = ko.decode_e4m3(np.arange(256, dtype=np.uint8))


def v2_block_gemm(w, scales, q, d, out, k_used=None):
    """out[m, out_f] = the v2 per-block FP8 GEMM of w[out_f, in_f],
    scales[ceil(out_f/128), ceil(in_f/128)], q[m, in_f_pad], d[m, in_f_pad/128].

    Each block's c is a float32 matmul (any order is exact on the check's
    EXACT, FOLD and CODES data); ``k_used`` < in_f drops the weights'
    last columns (a planted bug)."""
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
        sd = d[:, b : b + 1] * scales[srow, b][None, :]
        acc = acc + sd * c
    out[...] = acc


def mul_mat(dtype, src0, src1, dst):
    """dst[n, m] = sum_k dequantize(src0)[m, k] * src1[n, k]: ggml's
    mul_mat, the weights dequantized by the module, the sums a float32
    matmul (exact on the EXACT arm, within the bound on RAND)."""
    w = ko.ggml_dequantize(dtype, src0)
    dst[...] = src1 @ w.T
