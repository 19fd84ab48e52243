#!/usr/bin/env python3
"""The peer of device/examples/gdn_bench.rs: flash-linear-attention's
fused_recurrent_gated_delta_rule (Triton) on the same layer (16 q/k heads,
32 v heads through its grouped value attention, d 128, f32 throughout,
q/k L2-normalised in the kernel, the final state written back), at the
bench's (batch, rows) points.

Timing: CUDA events around `iters` back-to-back calls after warm-up,
median of 5 repetitions, us per call; eagerly, and replayed from a CUDA
graph (torch.cuda.CUDAGraph) where capture works.

Also `steps` calls captured in one graph (as a layer's call sits among
the kernels of a model's decode graph): that replay's time / steps.

Output, one line each: "peer fla-<version> torch-<version> <device>",
then "case <batch> <t> <eager us> <graph us or -> <us a call, steps in a
graph, or ->" per point.

usage: gdn_peer.py [--case batch,t ...] [--steps N]
"""
import argparse
import statistics

import torch


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    reps = []
    for _ in range(5):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        torch.cuda.synchronize()
        reps.append(s.elapsed_time(e) * 1e3 / iters)
    return statistics.median(reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", default=None)
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    import fla
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as frgdr

    dev = torch.device("cuda")
    print(f"peer fla-{fla.__version__} torch-{torch.__version__} {torch.cuda.get_device_name(dev)}", flush=True)
    for spec in a.case or ["1,1", "64,1", "1,8"]:
        b, t = (int(x) for x in spec.split(","))
        hk, hv, d = 16, 32, 128
        q = torch.randn(b, t, hk, d, device=dev)
        k = torch.randn(b, t, hk, d, device=dev)
        v = torch.randn(b, t, hv, d, device=dev)
        g = -torch.rand(b, t, hv, device=dev)
        beta = torch.rand(b, t, hv, device=dev)
        h0 = torch.randn(b, hv, d, d, device=dev) * 0.3

        def call():
            return frgdr(q, k, v, g=g, beta=beta, scale=d ** -0.5, initial_state=h0,
                         output_final_state=True, use_qk_l2norm_in_kernel=True)

        iters = max(20, 2000 // (b * t))
        eager = timed(call, iters)
        graph = steps = "-"
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    call()
            torch.cuda.current_stream().wait_stream(s)
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                call()
            graph = f"{timed(gr.replay, iters):.3f}"
            gs = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gs):
                for _ in range(a.steps):
                    call()
            steps = f"{timed(gs.replay, max(2, iters // a.steps)) / a.steps:.3f}"
        except Exception as ex:  # capture is optional: report eager only
            print(f"note: graph capture failed for {spec}: {ex}", flush=True)
        print(f"case {b} {t} {eager:.3f} {graph} {steps}", flush=True)


if __name__ == "__main__":
    main()
