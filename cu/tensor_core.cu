/*
 * cu/tensor_core.cu -- probes of one FP8 tensor-core MMA instruction, for
 * the bit-accurate model in core/src/tensor_core.rs.
 *
 * Each kernel runs exactly one MMA instruction per tile on operands given in
 * global memory and writes the instruction's f32 result: nothing else is
 * computed, so every bit of the output is the hardware's.
 *
 * Compiled at run time by NVRTC (device::cuda) for sm_89+ (mma.sync) and
 * sm_90a (wgmma: exported only when __CUDA_ARCH_FEAT_SM90_ALL), with no
 * include path: this file includes no header.
 *
 * =============================== ABI ======================================
 * One tile is one MMA of shape M = 64, N = 8, K = 32 (the wgmma m64n8k32;
 * the mma.sync m16n8k32 runs four times on its four 16-row quarters):
 *     a   [tiles x 64 x 32] FP8 codes, row-major: a[t][i][k]         read
 *     bt  [tiles x  8 x 32] FP8 codes, B transposed: bt[t][j][k] = B[k][j]
 *     c   [tiles x 64 x  8] f32: the incoming accumulator c[t][i][j]   read
 *     d   [tiles x 64 x  8] f32: d[t][i][j] = c[t][i][j] + sum_k
 *         a[t][i][k] * B[k][j], as the instruction computes it      written
 *     scale_d: 0 runs the instruction with the accumulator input disabled
 *         (wgmma scale-d = false; mma.sync with c = +0.0 registers), else 1.
 *
 * extern "C" __global__ void tc_wgmma_<A>_<B>(a, bt, c, d, i32 tiles, i32 scale_d)
 *     <<<tiles, 128>>>, one warpgroup per tile; 2304 bytes of static shared
 *     memory. A and B are read by the tensor cores from shared memory
 *     through matrix descriptors (no swizzle, K-major core matrices of
 *     8 rows x 16 bytes).
 * extern "C" __global__ void tc_mma_<A>_<B>(a, bt, c, d, i32 tiles, i32 scale_d)
 *     <<<tiles, 128>>>: warp w of the block runs one mma.sync m16n8k32 on
 *     rows 16w .. 16w + 15 of the tile.
 * <A>, <B> in {e4m3, e5m2}: the PTX operand types of A and B.
 */

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef float f32;

#define TC_M 64
#define TC_N 8
#define TC_K 32

/* Four consecutive bytes of a row as one little-endian 32-bit word. */
static __device__ __forceinline__ u32 tc_word(const u8 *p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

/* mma.sync m16n8k32 fragments (PTX ISA, "Matrix Fragments for
 * mma.m16n8k32"): g = lane / 4, t = lane % 4;
 *   A: a0 = A[g][4t..4t+3], a1 = A[g+8][4t..], a2 = A[g][16+4t..], a3 = A[g+8][16+4t..]
 *   B: b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]
 *   C/D: c0,c1 = C[g][2t, 2t+1], c2,c3 = C[g+8][2t, 2t+1]. */
#define TC_MMA_KERNEL(AT, BT)                                                                    \
    extern "C" __global__ void tc_mma_##AT##_##BT(const u8 *a, const u8 *bt, const f32 *c,         \
                                                  f32 *d, i32 tiles, i32 scale_d) {              \
        i32 tile = blockIdx.x;                                                                   \
        if (tile >= tiles) return;                                                               \
        u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;                                       \
        u32 g = lane >> 2, t = lane & 3;                                                         \
        const u8 *A = a + (u64)tile * TC_M * TC_K + (u64)w * 16 * TC_K;                          \
        const u8 *B = bt + (u64)tile * TC_N * TC_K;                                              \
        const f32 *C = c + (u64)tile * TC_M * TC_N + (u64)w * 16 * TC_N;                         \
        f32 *D = d + (u64)tile * TC_M * TC_N + (u64)w * 16 * TC_N;                               \
        u32 a0 = tc_word(A + g * TC_K + 4 * t), a1 = tc_word(A + (g + 8) * TC_K + 4 * t);        \
        u32 a2 = tc_word(A + g * TC_K + 16 + 4 * t), a3 = tc_word(A + (g + 8) * TC_K + 16 + 4 * t); \
        u32 b0 = tc_word(B + g * TC_K + 4 * t), b1 = tc_word(B + g * TC_K + 16 + 4 * t);         \
        f32 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;                                          \
        if (scale_d) {                                                                           \
            c0 = C[g * TC_N + 2 * t];                                                            \
            c1 = C[g * TC_N + 2 * t + 1];                                                        \
            c2 = C[(g + 8) * TC_N + 2 * t];                                                      \
            c3 = C[(g + 8) * TC_N + 2 * t + 1];                                                  \
        }                                                                                        \
        f32 d0, d1, d2, d3;                                                                      \
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." #AT "." #BT ".f32 "                \
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"     \
                     : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)                                    \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1),   \
                       "f"(c2), "f"(c3));                                                        \
        D[g * TC_N + 2 * t] = d0;                                                                \
        D[g * TC_N + 2 * t + 1] = d1;                                                            \
        D[(g + 8) * TC_N + 2 * t] = d2;                                                          \
        D[(g + 8) * TC_N + 2 * t + 1] = d3;                                                      \
    }

TC_MMA_KERNEL(e4m3, e4m3)
TC_MMA_KERNEL(e4m3, e5m2)
TC_MMA_KERNEL(e5m2, e4m3)
TC_MMA_KERNEL(e5m2, e5m2)

/* The host pass of a whole-program nvcc build sees the declarations too. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)

#ifndef TC_LBO
#define TC_LBO 128
#endif
#ifndef TC_SBO
#define TC_SBO 256
#endif

/* Shared-memory layout of a K-major operand without swizzle: core matrix
 * (r8, k16) -- rows 8 r8 .. 8 r8 + 7, bytes 16 k16 .. 16 k16 + 15 of each
 * row -- at byte (2 r8 + k16) * 128, its row r at + 16 r. So the leading
 * (K) byte offset is 128 and the stride (M or N) byte offset is 256. */
static __device__ __forceinline__ u32 tc_smem_off(u32 row, u32 k) {
    return ((row >> 3) * 2 + (k >> 4)) * 128 + (row & 7) * 16 + (k & 15);
}

/* PTX ISA, "Matrix Descriptor Format": bits 0-13 start address >> 4,
 * 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
 * 62-63 swizzle mode (0: none). */
static __device__ __forceinline__ u64 tc_desc(const void *smem) {
    u32 addr;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(addr) : "l"(smem));
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(TC_LBO >> 4) << 16) | ((u64)(TC_SBO >> 4) << 32);
}

/* wgmma m64n8k32 accumulator fragment: warp w holds rows 16 w + g and
 * 16 w + g + 8, columns 2t and 2t + 1 (PTX ISA, "Register Fragments and
 * Shared Memory Matrix Layouts", wgmma .m64nNk32 D). */
#define TC_WGMMA_KERNEL(AT, BT)                                                                  \
    extern "C" __global__ void tc_wgmma_##AT##_##BT(const u8 *a, const u8 *bt, const f32 *c,       \
                                                    f32 *d, i32 tiles, i32 scale_d) {            \
        __shared__ __align__(128) u8 sa[TC_M * TC_K];                                            \
        __shared__ __align__(128) u8 sb[TC_N * TC_K];                                            \
        i32 tile = blockIdx.x;                                                                   \
        if (tile >= tiles) return;                                                               \
        const u8 *A = a + (u64)tile * TC_M * TC_K;                                               \
        const u8 *B = bt + (u64)tile * TC_N * TC_K;                                              \
        for (u32 e = threadIdx.x; e < TC_M * TC_K; e += blockDim.x)                              \
            sa[tc_smem_off(e / TC_K, e % TC_K)] = A[e];                                          \
        for (u32 e = threadIdx.x; e < TC_N * TC_K; e += blockDim.x)                              \
            sb[tc_smem_off(e / TC_K, e % TC_K)] = B[e];                                          \
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");                           \
        __syncthreads();                                                                         \
        u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5;                                       \
        u32 g = lane >> 2, t = lane & 3;                                                         \
        u32 r0 = 16 * w + g, r1 = r0 + 8;                                                        \
        const f32 *C = c + (u64)tile * TC_M * TC_N;                                              \
        f32 *D = d + (u64)tile * TC_M * TC_N;                                                    \
        f32 d0 = C[r0 * TC_N + 2 * t], d1 = C[r0 * TC_N + 2 * t + 1];                            \
        f32 d2 = C[r1 * TC_N + 2 * t], d3 = C[r1 * TC_N + 2 * t + 1];                            \
        u64 da = tc_desc(sa), db = tc_desc(sb);                                                  \
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");                                \
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %6, 0;\n"                                   \
                     "wgmma.mma_async.sync.aligned.m64n8k32.f32." #AT "." #BT                    \
                     " {%0, %1, %2, %3}, %4, %5, p, 1, 1; }\n"                                   \
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)                                    \
                     : "l"(da), "l"(db), "r"(scale_d));                                          \
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");                         \
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");                         \
        D[r0 * TC_N + 2 * t] = d0;                                                               \
        D[r0 * TC_N + 2 * t + 1] = d1;                                                           \
        D[r1 * TC_N + 2 * t] = d2;                                                               \
        D[r1 * TC_N + 2 * t + 1] = d3;                                                           \
    }

TC_WGMMA_KERNEL(e4m3, e4m3)
TC_WGMMA_KERNEL(e4m3, e5m2)
TC_WGMMA_KERNEL(e5m2, e4m3)
TC_WGMMA_KERNEL(e5m2, e5m2)

#endif
