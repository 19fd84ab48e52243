/*
 * cu/moe_tables.cu -- MoE verify-rows pointer/scale tables built on the
 * device from device-resident router selections (seed 002,
 * moe_vrows_tables_from_sel).
 *
 * Compiled at run time by NVRTC (device::cuda::moe) with
 *     --gpu-architecture=sm_XY  (the device's compute capability)
 *     --fmad=false  --ftz=false --prec-div=true --prec-sqrt=true
 * and no include path: this file includes no header. A candidate .cu file
 * that exports the same ABI can replace it
 * (KERNEL_ORACLE_MOE_TABLES_CU=<path>); every gate and fuzzer then checks
 * the candidate.
 *
 * Building the tables here instead of on the host removes the host
 * readback of the router output, which is what lets a decode step be
 * captured as a CUDA graph. A wrong table reads the wrong weight bytes.
 *
 * =============================== ABI ======================================
 * Types: u32 = unsigned int, u64 = unsigned long long, i32 = int,
 * f32 = float. Every pointer is a device pointer aligned to at least 16
 * bytes, or 0 where stated. 1 <= n_pairs <= 2^31 - 1 (the shim launches
 * nothing for 0 pairs and refuses more).
 *
 * extern "C" __global__ void moe_vrows_tables_from_sel(
 *     const i32 *sel,        // [n_pairs] expert id per pair, read
 *     const f32 *selw,       // [n_pairs] routing weight per pair, read
 *     const f32 *macro_g,    // [n_expert] gate macro scales, read only
 *     const f32 *macro_u,    // [n_expert] up macro scales,   when
 *     const f32 *macro_d,    // [n_expert] down macro scales, has_macros != 0
 *     i32 has_macros,        // 0: no macro planes; the three pointers above
 *                            //    are placeholders (the shim passes 0) and
 *                            //    must never be dereferenced
 *     u64 base_g, u64 base_u, u64 base_d,        // slab bases (bytes)
 *     u64 stride_g, u64 stride_u, u64 stride_d,  // per-expert strides (bytes)
 *     u64 n_expert,          // valid ids are 0 .. n_expert - 1
 *     i32 n_pairs,
 *     u64 *ptrs,             // [3 * n_pairs] written: gate, up, down planes
 *     f32 *scales,           // [3 * n_pairs] written: gate, up, down planes
 *     u64 *status)           // [2], zeroed by the host before the launch
 * Launch: any 1-D grid (grid-stride loop); the shim uses 256 threads per
 * CTA and ceil(n_pairs / 256) CTAs, at most 65,536.
 *
 * Each pair p writes ptrs[k * n_pairs + p] and scales[k * n_pairs + p] for
 * k = 0 (gate), 1 (up), 2 (down), and nothing else.
 *
 * Errors. A kernel cannot return one, so it reports bad pairs in status:
 *     status[0] += 1 for every bad pair (atomicAdd);
 *     status[1] = max over bad pairs of ~key (atomicMax), where
 *         key = (u64)p << 34 | (u64)code << 32 | (u32)sel[p]
 *         code 0: sel[p] outside 0 .. n_expert - 1 (rule RANGE)
 *         code 1, 2, 3: base + e * stride overflows 64 bits for the
 *                 gate, up, down plane, the first such plane (rule PTR-64)
 *     so ~status[1] is the key of the LOWEST bad pair: the error the
 *     oracle reports. A bad pair's own entries are written as 0 / 0.0 and
 *     its macro scales are never read (no out-of-bounds read). The shim
 *     reads status after the launch and returns a typed error, not the
 *     tables, when status[0] != 0.
 *
 * ========================= ARITHMETIC CONTRACT ============================
 * (core/src/moe_tables.rs is normative; this restates it.) For a good
 * pair with e = sel[p], w = selw[p]:
 *   T1. ptr = base + e * stride, exact in 64 bits (the product's high half
 *       is checked with __umul64hi; a 32-bit product wraps once a slab
 *       passes 4 GiB, which is the bug this gate exists for).
 *   T2. gate = macro_g[e], up = macro_u[e]: bit copies (NaN payloads kept);
 *       1.0 each when has_macros == 0.
 *   T3. down = __fmul_rn(w, macro_d[e]) (macro_d read as 1.0 when
 *       has_macros == 0): one IEEE multiply, no flush to zero; a NaN result
 *       is written as 0x7FFFFFFF (rule NAN-1), explicitly, whatever NaN the
 *       multiplier returned.
 */

typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef float f32;

/* The canonical NaN of rule NAN-1. */
#define MOE_CANONICAL_NAN 0x7FFFFFFFu

/* Rule PTR-64: *ptr = base + e * stride; false when the exact sum does not
 * fit in 64 bits (the high half of the product is non-zero, or the sum
 * carries out). */
__device__ __forceinline__ bool slab_ptr(u64 base, u64 e, u64 stride, u64 *ptr)
{
    const u64 hi = __umul64hi(e, stride);
    const u64 off = e * stride; /* the 64-bit product */
    const u64 sum = base + off;
    *ptr = sum;
    return hi == 0ull && sum >= base;
}

extern "C" __global__ void moe_vrows_tables_from_sel(
    const i32 *__restrict__ sel, const f32 *__restrict__ selw,
    const f32 *__restrict__ macro_g, const f32 *__restrict__ macro_u,
    const f32 *__restrict__ macro_d, i32 has_macros,
    u64 base_g, u64 base_u, u64 base_d,
    u64 stride_g, u64 stride_u, u64 stride_d,
    u64 n_expert, i32 n_pairs,
    u64 *__restrict__ ptrs, f32 *__restrict__ scales, u64 *__restrict__ status)
{
    const u64 n = (u64)n_pairs;
    const u64 step = (u64)gridDim.x * (u64)blockDim.x;
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += step) {
        const i32 id = sel[p];
        u64 pg = 0, pu = 0, pd = 0;
        u32 code = 4; /* 4: good */
        if (id < 0 || (u64)id >= n_expert) {
            code = 0;
        } else {
            const u64 e = (u64)id;
            if (!slab_ptr(base_g, e, stride_g, &pg)) code = 1;
            else if (!slab_ptr(base_u, e, stride_u, &pu)) code = 2;
            else if (!slab_ptr(base_d, e, stride_d, &pd)) code = 3;
        }
        if (code != 4) {
            const u64 key = (p << 34) | ((u64)code << 32) | (u64)(u32)id;
            atomicAdd(status, 1ull);
            atomicMax(status + 1, ~key);
            ptrs[p] = 0; ptrs[n + p] = 0; ptrs[2 * n + p] = 0;
            scales[p] = 0.0f; scales[n + p] = 0.0f; scales[2 * n + p] = 0.0f;
            continue;
        }
        const u64 e = (u64)id;
        u32 g_bits = 0x3F800000u, u_bits = 0x3F800000u; /* 1.0f */
        f32 md = 1.0f;
        if (has_macros != 0) {
            g_bits = ((const u32 *)macro_g)[e];
            u_bits = ((const u32 *)macro_u)[e];
            md = macro_d[e];
        }
        f32 down = __fmul_rn(selw[p], md);
        if (down != down) down = __uint_as_float(MOE_CANONICAL_NAN);
        ptrs[p] = pg;
        ptrs[n + p] = pu;
        ptrs[2 * n + p] = pd;
        ((u32 *)scales)[p] = g_bits;
        ((u32 *)scales)[n + p] = u_bits;
        scales[2 * n + p] = down;
    }
}
