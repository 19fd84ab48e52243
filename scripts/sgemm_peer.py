#!/usr/bin/env python3
"""The peer of examples/wgpu_gemm_bench.rs: cuBLAS SGEMM through torch, TF32
off (torch.backends.cuda.matmul.allow_tf32 = False, float32 matmul precision
"highest"), on the same shapes: dst[n, m] = src1[n, k] @ src0[m, k]^T.

Timing: CUDA events around `iters` back-to-back calls after warm-up, median
of 5 repetitions, ms per call.

Output, one line each: "peer <torch version> <device>", then
"shape <label> <ms>" per shape.

usage: sgemm_peer.py --shape label,m,k,n [--shape ...]
"""
import argparse
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device("cuda")
    print(f"peer torch-{torch.__version__} cuBLAS-SGEMM(TF32-off) {torch.cuda.get_device_name(dev)}")
    for spec in a.shape:
        label, m, k, n = spec.split(",")
        m, k, n = int(m), int(k), int(n)
        w = torch.rand(m, k, device=dev) * 2 - 1
        x = torch.rand(n, k, device=dev) * 2 - 1
        out = torch.empty(n, m, device=dev)
        wt = w.t()
        for _ in range(3):
            torch.matmul(x, wt, out=out)
        torch.cuda.synchronize()
        reps = []
        for _ in range(5):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(a.iters):
                torch.matmul(x, wt, out=out)
            e.record()
            torch.cuda.synchronize()
            reps.append(s.elapsed_time(e) / a.iters)
        print(f"shape {label} {statistics.median(reps):.5f}", flush=True)


if __name__ == "__main__":
    main()
