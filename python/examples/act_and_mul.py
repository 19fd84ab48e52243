"""The gated activations the field runs (SwiGLU, GeGLU), through
kernel_oracle.check_act_and_mul: which activation, arithmetic and layout
does each compute, and does each stay inside the sound bound?

A gated activation is `act(gate) * up` per element, the gate and up halves
of one `[tokens, 2 d]` input. The activation is transcendental (`exp`,
`erf`, `tanh` within a few ulps, no two kernels alike), so the check
encloses every float32 value the field's forms of it can give and holds
each output to the interval of values those give: bit for bit where that
interval is one value (most bf16 elements), within it elsewhere. Kernels
differ in where they round: `round_then_mul` rounds the activation to the
model dtype, then the product (vLLM's CUDA ops, torch eager, Liger's
GeGLU); `f32` rounds once at the end (FlashInfer, Liger's SwiGLU,
torch.compile). The check names every activation, arithmetic and layout
whose intervals admit the output.

Sections, each under its own time limit, each skipped with a line when its
library is not importable:
1. torch eager `F.silu(a) * b`, `F.gelu(a) * b`, `F.gelu(a,
   approximate="tanh") * b` on CUDA tensors (vLLM's and SGLang's
   `forward_native`; declared round_then_mul), and `a * F.silu(b)` (the
   layout of vLLM's `mul_and_silu`, declared gate_first=False);
2. torch.compile of `F.silu(a) * b` (Inductor's fused kernel; declared
   f32: the finding says);
3. Triton kernels written here in Liger's forms: SwiGLU `silu(a) * b` in
   float32 with one rounding (declared f32) and GeGLU with the activation
   cast to the dtype before the product (declared round_then_mul);
4. CUDA kernels written here in FlashInfer's forms (`__expf`, `erff`, PTX
   `tanh.approx.f32`; declared f32, the last with act_ulps=128) and
   vLLM's (`expf`, the activation rounded first; declared round_then_mul),
   built by nvcc with --use_fast_math (approximate divisions, flush to
   zero) through torch's `load_inline`;
5. vLLM's `silu_and_mul`, `mul_and_silu`, `gelu_and_mul`,
   `gelu_tanh_and_mul` ops (`torch.ops._C`; declared round_then_mul);
6. FlashInfer's `silu_and_mul`, `gelu_and_mul`, `gelu_tanh_and_mul`
   (declared f32; its `gelu_tanh` calls PTX `tanh.approx.f32`, declared
   with act_ulps=128 over the 94 its measured error needs).

A declared verdict is printed with PASS or FAIL; what matches is the
finding. Exit status 1 only when a section fails to run, or when torch's
eager forms (whose arithmetic its source fixes) fail.

Run on a GPU with torch (and triton, vllm, flashinfer as installed):
    python3 python/examples/act_and_mul.py [--dtype bfloat16|float16]
"""

import argparse
import sys

import kernel_oracle as ko
from rms_norm import finding, tdtype, to_cuda, to_numpy
from sections import section, tl, torch, triton


def halves(x, dt):
    t = to_cuda(x, dt)
    d = t.shape[-1] // 2
    return t[:, :d], t[:, d:]


def torch_eager(act, dt, gate_first=True):
    """torch eager: the activation, one operator (rounded to the dtype),
    then the product, another."""
    F = torch.nn.functional
    fns = {
        "silu": F.silu,
        "gelu": F.gelu,
        "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
    }
    f = fns[act]

    def fn(x, out):
        a, b = halves(x, dt)
        to_numpy(f(a) * b if gate_first else a * f(b), out)

    fn.__name__ = f"torch_eager_{act}_and_mul" if gate_first else f"torch_eager_mul_and_{act}"
    return fn


def torch_compiled(dt):
    F = torch.nn.functional
    compiled = torch.compile(lambda a, b: F.silu(a) * b, dynamic=True)

    def fn(x, out):
        a, b = halves(x, dt)
        to_numpy(compiled(a, b), out)

    fn.__name__ = "torch_compile_silu_and_mul"
    return fn


if triton is not None:
    try:
        from triton.language.extra import libdevice
    except ImportError:  # older Triton
        libdevice = None

    @triton.jit
    def swiglu_liger_kernel(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        mask = cols < d
        a = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0).to(tl.float32)
        b = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0)
        c = a * tl.sigmoid(a) * b
        tl.store(out_ptr + row * d + cols, c, mask=mask)

    if libdevice is not None:
        @triton.jit
        def geglu_liger_kernel(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            cols = tl.arange(0, BLOCK)
            mask = cols < d
            a = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0).to(tl.float32)
            b = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0)
            a_cubed = a * a * a
            t = libdevice.tanh(0.7978845608028654 * (a + 0.044715 * a_cubed))
            g = 0.5 * a * (1 + t)
            tl.store(out_ptr + row * d + cols, g.to(b.dtype) * b, mask=mask)


def triton_kernel(kernel, dt, name):
    def fn(x, out):
        xt = to_cuda(x, dt)
        tokens, d = xt.shape[0], xt.shape[1] // 2
        o = torch.empty((tokens, d), dtype=dt, device="cuda")
        kernel[(tokens,)](xt, o, d, BLOCK=triton.next_power_of_2(d))
        to_numpy(o, out)

    fn.__name__ = name
    return fn


# CUDA kernels in the forms of FlashInfer's and vLLM's activations, built
# here with nvcc --use_fast_math (expf becomes __expf, divisions
# approximate, subnormals flushed): FlashInfer's `val / (1.0f +
# __expf(-val))`, `val * 0.5f * (1.0f + erf(val * M_SQRT1_2))` and
# `val * (0.5f * (1.0f + tanh.approx(...)))` times y in float, one
# rounding; vLLM's `x / (1.0f + expf(-x))` rounded to the dtype before
# the product.
CUDA_SOURCE = r"""
#include <ATen/cuda/CUDAContext.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <torch/extension.h>

__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float v) { return __float2bfloat16(v); }
template <> __device__ __forceinline__ __half from_f(float v) { return __float2half(v); }

__device__ __forceinline__ float tanh_approx(float v) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

__device__ __forceinline__ float act(int kind, float v) {
  switch (kind) {
    case 0: return v / (1.0f + __expf(-v));
    case 1: return v * 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    case 2: return v * (0.5f * (1.0f + tanh_approx(0.7978845608028654f * (v + 0.044715f * v * v * v))));
    default: return v / (1.0f + expf(-v));
  }
}

template <typename T>
__global__ void act_and_mul(T* out, const T* in, int d, int kind, int round_first) {
  const T* row = in + (size_t)blockIdx.x * 2 * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float a = act(kind, to_f(row[j]));
    if (round_first) a = to_f(from_f<T>(a));
    out[(size_t)blockIdx.x * d + j] = from_f<T>(a * to_f(row[d + j]));
  }
}

void run(torch::Tensor out, torch::Tensor x, int64_t kind, int64_t round_first) {
  int tokens = x.size(0), d = x.size(1) / 2;
  auto stream = at::cuda::getCurrentCUDAStream();
  if (x.scalar_type() == at::kBFloat16) {
    act_and_mul<<<tokens, std::min(d, 1024), 0, stream>>>(
        (__nv_bfloat16*)out.data_ptr(), (const __nv_bfloat16*)x.data_ptr(), d, (int)kind, (int)round_first);
  } else {
    act_and_mul<<<tokens, std::min(d, 1024), 0, stream>>>(
        (__half*)out.data_ptr(), (const __half*)x.data_ptr(), d, (int)kind, (int)round_first);
  }
}
"""


def fast_math_kernels(dt):
    """The CUDA kernels above, built with nvcc --use_fast_math: (callable,
    activation, arithmetic, act_ulps) for each."""
    from torch.utils.cpp_extension import load_inline

    mod = load_inline("act_and_mul_fast_math", cpp_sources=[
        "void run(torch::Tensor out, torch::Tensor x, int64_t kind, int64_t round_first);"],
        cuda_sources=[CUDA_SOURCE], functions=["run"],
        extra_cuda_cflags=["--use_fast_math", "-O3"], verbose=False)
    rows = []
    for kind, act, arithmetic, ulps, name in [
        (0, "silu", "f32", 2, "cuda_fast_math_flashinfer_silu"),
        (1, "gelu", "f32", 2, "cuda_fast_math_flashinfer_gelu"),
        (2, "gelu_tanh", "f32", 128, "cuda_fast_math_flashinfer_gelu_tanh_approx"),
        (3, "silu", "round_then_mul", 2, "cuda_fast_math_vllm_silu"),
    ]:
        def fn(x, out, kind=kind, rtm=int(arithmetic == "round_then_mul")):
            xt = to_cuda(x, dt)
            o = torch.empty((xt.shape[0], xt.shape[1] // 2), dtype=dt, device="cuda")
            mod.run(o, xt, kind, rtm)
            to_numpy(o, out)

        fn.__name__ = name
        rows.append((fn, act, arithmetic, ulps))
    return rows


def vllm_op(op, dt, name):
    def fn(x, out):
        xt = to_cuda(x, dt)
        o = torch.empty((xt.shape[0], xt.shape[1] // 2), dtype=dt, device="cuda")
        op(o, xt)
        to_numpy(o, out)

    fn.__name__ = name
    return fn


def flashinfer_op(op, dt, name):
    def fn(x, out):
        xt = to_cuda(x, dt)
        if (xt.shape[1] // 2) % 8:
            # Its Python wrapper needs 16-byte rows; its launch uses d / 8
            # threads (none below 8).
            raise ko.Refused("FlashInfer needs d a multiple of 8 (16-byte rows)")
        to_numpy(op(xt), out)

    fn.__name__ = name
    return fn


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = p.parse_args(argv)
    if torch is None or not torch.cuda.is_available():
        print("no torch with a CUDA device: nothing to run")
        return 1
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}"
          + (f", triton {triton.__version__}" if triton else ""))
    dt = tdtype(args.dtype)
    bad = 0
    findings = []

    def run(fn, activation, arithmetic, gate_first=True, act_ulps=2):
        r = ko.check_act_and_mul(fn, activation=activation, arithmetic=arithmetic,
                                 gate_first=gate_first, dtype=args.dtype, act_ulps=act_ulps,
                                 verbose=True)
        found = finding(r)
        findings.append((fn.__name__, r.ok, found))
        print(f"FINDING {fn.__name__}: declared {activation}/{arithmetic}"
              f"{'' if gate_first else '/up_first'}: {'PASS' if r.ok else 'FAIL'}; "
              f"admitted under: {found}", flush=True)
        return r

    for act in ["silu", "gelu", "gelu_tanh"]:
        fn = torch_eager(act, dt)
        r = section(f"torch eager {act}(a) * b", 300,
                    lambda fn=fn, act=act: run(fn, act, "round_then_mul"))
        if r is None or not r.ok:
            print(f"UNEXPECTED: {fn.__name__} is outside its declared arithmetic")
            bad += 1
    fn = torch_eager("silu", dt, gate_first=False)
    r = section("torch eager a * silu(b) (mul_and_silu's layout)", 300,
                lambda: run(fn, "silu", "round_then_mul", gate_first=False))
    if r is None or not r.ok:
        print(f"UNEXPECTED: {fn.__name__} is outside its declared arithmetic")
        bad += 1
    bad += section("torch.compile silu(a) * b", 600,
                   lambda: run(torch_compiled(dt), "silu", "f32")) is None
    if triton is None:
        print("\n=== Triton: not importable, skipped")
    else:
        bad += section("Triton SwiGLU, Liger's form", 300, lambda: run(
            triton_kernel(swiglu_liger_kernel, dt, "triton_liger_swiglu"), "silu", "f32")) is None
        if libdevice is None:
            print("\n=== Triton GeGLU: no triton.language.extra.libdevice, skipped")
        else:
            bad += section("Triton GeGLU, Liger's form", 300, lambda: run(
                triton_kernel(geglu_liger_kernel, dt, "triton_liger_geglu"), "gelu_tanh",
                "round_then_mul")) is None
    kernels = section("nvcc --use_fast_math build of the CUDA kernels", 300,
                      lambda: fast_math_kernels(dt))
    if kernels is None:
        print("(no nvcc build: the fast-math CUDA sections are skipped)")
    for fn, act, arithmetic, ulps in kernels or []:
        bad += section(f"CUDA {fn.__name__}", 300, lambda fn=fn, a=act, ar=arithmetic, u=ulps: run(
            fn, a, ar, act_ulps=u)) is None
    try:
        import vllm._C  # noqa: F401  registers torch.ops._C
        ops = torch.ops._C
    except Exception as e:  # vLLM absent or unusable on this host
        print(f"\n=== vLLM activation ops: not importable ({type(e).__name__}), skipped")
    else:
        for op, act, gate_first in [("silu_and_mul", "silu", True), ("mul_and_silu", "silu", False),
                                    ("gelu_and_mul", "gelu", True),
                                    ("gelu_tanh_and_mul", "gelu_tanh", True)]:
            if not hasattr(ops, op):
                print(f"\n=== vLLM {op}: not in this build, skipped")
                continue
            fn = vllm_op(getattr(ops, op), dt, f"vllm_{op}")
            bad += section(f"vLLM {op}", 300, lambda fn=fn, act=act, gf=gate_first: run(
                fn, act, "round_then_mul", gate_first=gf)) is None
    try:
        import flashinfer.activation as fi
    except Exception as e:
        print(f"\n=== FlashInfer activation: not importable ({type(e).__name__}), skipped")
    else:
        for op, act, ulps in [("silu_and_mul", "silu", 2), ("gelu_and_mul", "gelu", 2),
                              ("gelu_tanh_and_mul", "gelu_tanh", 128)]:
            fn = flashinfer_op(getattr(fi, op), dt, f"flashinfer_{op}")
            bad += section(f"FlashInfer {op}", 300, lambda fn=fn, act=act, ulps=ulps: run(
                fn, act, "f32", act_ulps=ulps)) is None
    print("\nSUMMARY (declared verdict; every declaration whose intervals admitted every case)")
    for name, ok, found in findings:
        print(f"  {name}: {'PASS' if ok else 'FAIL'}; {found}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
