"""torch._scaled_mm's block-scaled FP8 GEMM (cuBLASLt on sm_90: 1x128
activation scales, 128x128 weight scales, f32 output) through
kernel_oracle.check_fp8_block_gemm, with the weight scales in two layouts.

cuBLASLt reads a 128x128 scale grid with its leading dimension (the k
blocks) padded to a multiple of 4 blocks (cuBLAS docs, "1D and 128x128 2D
block scaling for FP8"). torch passes the pointer through, so:

- PADDED: K padded with zero weights and activations (and unit scales) to
  a multiple of 4 scale blocks, so that the compact [L4, ceil(N/128)] grid
  torch accepts is also the padded one cuBLASLt reads (torch 2.11 refuses a
  [L, ...] view with leading dimension L4, and an [L4, ...] grid when K has
  L blocks: "Invalid scaling configuration"). The extra blocks add +0 to
  every output, which changes nothing unless an output is -0 before them
  (not in these arms). Expected: every arm bit for bit under "sm90 FP8
  wgmma + fused fold" (what the cuBLASLt peer measured in Rust).
- UNPADDED: the plain [ceil(N/128), L] grid transposed: the same shape,
  leading dimension L, which is what torch accepts for any K. Wrong as
  soon as L % 4 != 0 and there is a second scale row (N > 128): the check
  must catch it, on (384, 320, 96) at least (pytorch/pytorch#166752
  describes the same silent wrong answers).

The wrapper adapts the contract's operands to what _scaled_mm accepts,
without changing the arithmetic: K is the contract's k rounded up to 128
(the weights zero-filled beyond in_f, as the contract reads them), N is
padded with zero weight rows to a multiple of 128 and M with zero
activation rows to a multiple of 16; the extra output rows and columns are
dropped. A shape torch refuses is reported as refused.

Run on an sm_90 GPU with torch >= 2.9 (CUDA >= 12.9):
    python3 python/examples/scaled_mm_block_fp8.py
"""

import sys

import numpy as np
import torch

import kernel_oracle as ko


# The scale_b forms torch accepted (printed at the end).
ACCEPTED = set()


def round_up(x, n):
    return (x + n - 1) // n * n


def make_gemm(padded):
    def scaled_mm_gemm(w, scales, q, d, out):
        out_f, in_f = w.shape
        m = q.shape[0]
        L = -(-in_f // 128)
        L4 = round_up(L, 4) if padded else L
        K, N, M = L4 * 128, round_up(out_f, 128), round_up(m, 16)
        dev = "cuda"
        wp = np.zeros((N, K), np.uint8)
        wp[:out_f, :in_f] = w
        qp = np.zeros((M, K), np.uint8)
        qp[:m, :L * 128] = q[:, :L * 128]
        dp = np.ones((M, L4), np.float32)
        dp[:m, :L] = d[:, :L]
        a = torch.from_numpy(qp).to(dev).view(torch.float8_e4m3fn)           # [M, K] row-major
        b = torch.from_numpy(wp).to(dev).view(torch.float8_e4m3fn).t()       # [K, N] column-major
        # 1x128 scales: [M, L4], outer-dim-major (stride (1, M)).
        scale_a = torch.from_numpy(dp).to(dev).t().contiguous().t()
        store = np.ones((scales.shape[0], L4), np.float32)
        store[:, :L] = scales
        # 128x128 scales: [L4, ceil(N/128)], stride (1, L4).
        scale_b = torch.from_numpy(store).to(dev).t()
        try:
            y = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
        except (RuntimeError, NotImplementedError, ValueError) as e:
            raise ko.Refused(f"torch._scaled_mm: scale_b {tuple(scale_b.shape)}: {str(e).splitlines()[0]}")
        ACCEPTED.add(f"{'padded' if padded else 'unpadded'} scale_b shape {tuple(scale_b.shape)} stride {scale_b.stride()}")
        torch.cuda.synchronize()
        out[...] = y[:m, :out_f].cpu().numpy()

    scaled_mm_gemm.__name__ = "scaled_mm_padded" if padded else "scaled_mm_unpadded"
    return scaled_mm_gemm


def main():
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    scaled_mm_padded = make_gemm(True)
    scaled_mm_unpadded = make_gemm(False)
    shapes = list(ko.FP8_SHAPES) + [(5120, 1536, 512)]
    print("\n== PADDED (K to 4 scale blocks: cuBLASLt's layout), declared sm90 FP8 wgmma + fused fold ==")
    padded = ko.check_fp8_block_gemm(scaled_mm_padded, shapes=shapes, schedule=ko.Schedule.SM90_WGMMA_FUSED)
    print("\n== UNPADDED weight scales (a plain (K/128, N/128) view): must be caught ==")
    unpadded = ko.check_fp8_block_gemm(scaled_mm_unpadded, shapes=shapes, schedule=ko.Schedule.SM90_WGMMA_FUSED,
                                       verbose=False)
    caught = [f.splitlines()[0] for f in unpadded.failures]
    must = any("in_f=384 out_f=320" in c for c in caught)
    print("\nsummary:")
    for a in sorted(ACCEPTED):
        print("  torch accepted " + a)
    print(f"  padded, declared sm90 FP8 wgmma + fused fold: {'PASS' if padded.ok else 'FAIL'} "
          f"({padded.passed} passed, {padded.failed} failed, {padded.refused} refused); "
          f"bit-identical on every case under: {', '.join(map(str, padded.identified)) or 'none'}")
    print(f"  unpadded: {unpadded.failed} cases caught of {unpadded.cases} "
          f"({'including' if must else 'NOT including'} in_f=384 out_f=320)")
    for c in caught[:8]:
        print("    " + c)
    ok = padded.ok and unpadded.failed > 0 and must
    print("RESULT:", "as expected" if ok else "NOT as expected")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
