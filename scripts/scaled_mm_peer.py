#!/usr/bin/env python3
"""The peer of device/examples/fp8_mmq_bench.rs: cuBLASLt's per-block FP8 GEMM
through torch._scaled_mm, on the same shapes, timed the same way.

Operands: x [m x k] e4m3 with one f32 scale per 1x128 block (scale_a
[m x k/128], outer-dim-major, i.e. the transpose of a contiguous
[k/128 x m]), w [n x k] e4m3 with one f32 scale per 128x128 block (scale_b
[k/128 x n/128], the transpose of the contiguous [n/128 x k/128] grid), passed
as w.t() (column-major B). This is torch's BlockWise1x128 x BlockWise128x128
recipe, which dispatches to cuBLASLt (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F /
BLK128x128_32F) on sm_90 with CUDA >= 12.9. Only bf16 output is accepted for
block-wise scaling; fast accumulation is refused. cuBLASLt wants the token
count padded to a multiple of 4: m is zero-padded and m_padded says so; the
TFLOP/s figure counts the m real rows only.

Timing: CUDA events around `iters` back-to-back calls after warm-up; the
median of 5 such repetitions, in ms per call. "ms" replays a CUDA graph of
the `iters` calls (no Python dispatch between kernels: kernel time, which is
what the Rust side reports); "eager_ms" is the same loop from Python, kept
for reference; if capture fails, "ms" falls back to eager and "timing" says
so.

Output: one JSON object per line: {"peer": ...} first, then one result per
shape, or {"error": ...}; exit status 1 if torch refuses a shape (loudly:
the exception text is in the JSON and on stderr).

usage: scaled_mm_peer.py --shape m,in_f,out_f [--shape ...]
"""
import argparse
import json
import sys


def bench(torch, fn, target_ms=50.0):
    """Median ms per call of fn over 5 repetitions: eager (Python dispatch
    included, which bounds small shapes at ~20-30 us) and, when fn can be
    captured, replaying a CUDA graph of `iters` calls (kernel time)."""
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    end.record()
    end.synchronize()
    est = max(start.elapsed_time(end) / 3, 1e-3)
    iters = max(10, min(2000, int(target_ms / est)))

    def median(run):
        reps = []
        for _ in range(5):
            start.record()
            run()
            end.record()
            end.synchronize()
            reps.append(start.elapsed_time(end) / iters)
        reps.sort()
        return reps[len(reps) // 2]

    def eager():
        for _ in range(iters):
            fn()

    eager_ms = median(eager)
    graph_ms, graph_err = None, None
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        g.replay()
        torch.cuda.synchronize()
        graph_ms = median(g.replay)
        del g
    except Exception as e:  # noqa: BLE001
        graph_err = f"{type(e).__name__}: {e}".replace("\n", " ")
    return eager_ms, graph_ms, graph_err, iters


def one_shape(torch, m, k, n):
    if k % 128 or n % 128:
        raise ValueError(f"in_f={k} and out_f={n} must be multiples of 128 for block-wise _scaled_mm")
    dev = "cuda"
    e4m3 = torch.float8_e4m3fn
    mp = (m + 3) // 4 * 4
    gen = torch.Generator(device=dev).manual_seed(m * 1000003 + k * 101 + n)
    x = torch.randn(mp, k, device=dev, generator=gen)
    x[m:] = 0
    w = torch.randn(n, k, device=dev, generator=gen)
    # 1x128 activation blocks
    xb = x.view(mp, k // 128, 128)
    xs = xb.abs().amax(dim=-1).clamp(min=1e-12) / 448.0  # [mp, k/128]
    x8 = (xb / xs[..., None]).view(mp, k).to(e4m3)
    # 128x128 weight blocks
    wb = w.view(n // 128, 128, k // 128, 128)
    ws = wb.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0  # [n/128, k/128]
    w8 = (wb / ws[:, None, :, None]).view(n, k).to(e4m3)
    scale_a = xs.t().contiguous().t()  # [mp, k/128], outer-dim-major
    scale_b = ws.t()  # [k/128, n/128]

    def fn():
        return torch._scaled_mm(x8, w8.t(), scale_a, scale_b, out_dtype=torch.bfloat16)

    y = fn().float()
    # sanity: against the dequantized operands in f32 (no TF32)
    torch.backends.cuda.matmul.allow_tf32 = False
    xd = (x8.float().view(mp, k // 128, 128) * xs[..., None]).view(mp, k)
    wd = (w8.float().view(n // 128, 128, k // 128, 128) * ws[:, None, :, None]).view(n, k)
    ref = xd @ wd.t()
    rel = ((y - ref).norm() / ref.norm().clamp(min=1e-30)).item()
    if not rel < 2e-2:
        raise RuntimeError(f"_scaled_mm disagrees with the dequantized product: rel err {rel:.3e}")
    del xd, wd, ref, y
    eager_ms, graph_ms, graph_err, iters = bench(torch, fn)
    ms = graph_ms if graph_ms is not None else eager_ms
    return {
        "m": m,
        "in_f": k,
        "out_f": n,
        "m_padded": mp,
        "ms": ms,
        "timing": "cuda_graph" if graph_ms is not None else "eager",
        "eager_ms": eager_ms,
        "graph_error": graph_err,
        "iters": iters,
        "tflops": 2.0 * m * k * n / (ms * 1e-3) / 1e12,
        "rel_err": rel,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append", default=[], help="m,in_f,out_f")
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": f"import torch failed: {e}"}))
        return 2
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 2
    print(json.dumps({
        "peer": "torch._scaled_mm BlockWise1x128 x BlockWise128x128 (cuBLASLt)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
    }), flush=True)
    status = 0
    for s in args.shape:
        m, k, n = (int(v) for v in s.split(","))
        try:
            r = one_shape(torch, m, k, n)
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {e}"
            print(f"scaled_mm_peer: shape {m},{k},{n} refused: {msg}", file=sys.stderr)
            r = {"m": m, "in_f": k, "out_f": n, "error": msg.replace("\n", " ")}
            status = 1
        print(json.dumps(r), flush=True)
        torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
