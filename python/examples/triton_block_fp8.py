"""A small Triton block-FP8 GEMM, written for this example, through
kernel_oracle.check_fp8_block_gemm: which schedule does it compute?

The kernel follows the contract's grouping: one output tile of
BLOCK_M x 128 (one weight-scale row per tile), and for each 128-k block b
in increasing order one `tl.dot` of the e4m3 codes from a zero
accumulator (the block's c, on the tensor cores), then the fold
`acc += (d[j, b] * s[i/128, b]) * c`, "promoting" each block into an f32
sum as DeepSeek-V3 / DeepGEMM do. The weights' k tail beyond in_f is
masked to zero. How tl.dot accumulates (wgmma's 14-bit accumulator or
another order) and whether Triton contracts the fold into an FMA (it does
by default) are not written in the source: the check's identification
says what the hardware and compiler made of it.

The kernel writes into the check's NaN-filled output buffer (copied to
the device), so an element it never stores fails the check.

The same kernel with the fold as the field's Triton block-FP8 GEMMs write
it, `acc += c * d[:, None] * s` (vLLM's and SGLang's
`_w8a8_block_fp8_matmul`, DeepSeek-V3's `fp8_gemm_kernel`:
`accumulator += tl.dot(a, b) * a_s[:, None] * b_s[None, :]`, evaluated
left to right), runs second, declared
`Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED`: the partial times the
activation scale rounded first, then one FMA with the weight scale. Exit
status 1 unless that declaration passes every arm bit for bit.

Run on an sm_90 GPU with triton and torch:
    python3 python/examples/triton_block_fp8.py
"""

import sys

import torch
import triton
import triton.language as tl

import kernel_oracle as ko


@triton.jit
def block_fp8_gemm_kernel(q_ptr, w_ptr, d_ptr, s_ptr, y_ptr, M, N, K, K_pad, n_kblk, n_dblk, n_sblk,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          FIELD_FOLD: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for b in range(0, n_kblk):
        k = b * BLOCK_K + rk
        a = tl.load(q_ptr + rm[:, None] * K_pad + k[None, :], mask=rm[:, None] < M, other=0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None], mask=(rn[None, :] < N) & (k[:, None] < K), other=0)
        c = tl.dot(a.to(tl.float8e4nv, bitcast=True), w.to(tl.float8e4nv, bitcast=True))
        d = tl.load(d_ptr + rm * n_dblk + b, mask=rm < M, other=0.0)
        s = tl.load(s_ptr + pid_n * n_sblk + b)
        if FIELD_FOLD:
            acc += c * d[:, None] * s
        else:
            acc += (d[:, None] * s) * c
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run_gemm(w, scales, q, d, out, field_fold):
    out_f, in_f = w.shape
    m, k_pad = q.shape
    dev = "cuda"
    wt = torch.from_numpy(w).to(dev)
    qt = torch.from_numpy(q).to(dev)
    dt = torch.from_numpy(d).to(dev)
    st = torch.from_numpy(scales).to(dev).contiguous()
    yt = torch.from_numpy(out).to(dev)  # NaN-filled, as the check gives it
    BLOCK_M, BLOCK_N, BLOCK_K = 64, 128, 128
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(out_f, BLOCK_N))
    block_fp8_gemm_kernel[grid](qt, wt, dt, st, yt, m, out_f, in_f, k_pad, triton.cdiv(in_f, 128), d.shape[1],
                                scales.shape[1], BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                FIELD_FOLD=field_fold, num_warps=4)
    torch.cuda.synchronize()
    out[...] = yt.cpu().numpy()


def triton_block_fp8_gemm(w, scales, q, d, out):
    run_gemm(w, scales, q, d, out, False)


def triton_field_fold_gemm(w, scales, q, d, out):
    run_gemm(w, scales, q, d, out, True)


def main():
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    shapes = list(ko.FP8_SHAPES) + [(5120, 1536, 512)]
    print("\n== declared v2 (EXACT/FOLD/CODES bit for bit, RAND by the bound) ==")
    v2 = ko.check_fp8_block_gemm(triton_block_fp8_gemm, shapes=shapes)
    guess = v2.identified[0] if v2.identified else None
    print(f"\nidentified on every case: {', '.join(map(str, v2.identified)) or 'none'}; "
          f"on every EXACT/FOLD/CODES case: {', '.join(map(str, v2.identified_exact_arms)) or 'none'}")
    if guess is not None and guess != ko.Schedule.V2:
        print(f"\n== declared {guess} (every arm bit for bit) ==")
        again = ko.check_fp8_block_gemm(triton_block_fp8_gemm, shapes=shapes, schedule=guess, verbose=False)
        print(f"declared {guess}: {'PASS' if again.ok else 'FAIL'}")
    declared = ko.Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED
    print(f"\n== the field's fold, declared {declared} (every arm bit for bit) ==")
    field = ko.check_fp8_block_gemm(triton_field_fold_gemm, shapes=shapes, schedule=declared)
    print(f"\nidentified on every case: {', '.join(map(str, field.identified)) or 'none'}")
    return 0 if field.ok else 1


if __name__ == "__main__":
    sys.exit(main())
