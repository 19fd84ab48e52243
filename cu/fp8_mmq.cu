/*
 * cu/fp8_mmq.cu -- the v2 per-block FP8 GEMM ("MMQ", seed 000) for sm_89+.
 *
 * Compiled at run time by NVRTC (device::cuda) with
 *     --gpu-architecture=sm_XY  (the device's compute capability, XY >= 89;
 *                                sm_90a on 9.0: the wgmma variants k9..k14
 *                                exist only when __CUDA_ARCH_FEAT_SM90_ALL)
 *     --fmad=false  --ftz=false --prec-div=true --prec-sqrt=true  -default-device
 * and no include path: this file includes no header. A candidate .cu file
 * that exports the same ABI can replace it (KERNEL_ORACLE_FP8_MMQ_CU=<path>);
 * every gate and fuzzer then checks the candidate.
 *
 * =============================== ABI ======================================
 * Types: u8 = unsigned char, u32 = unsigned int, u64 = unsigned long long,
 * i32 = int, f32 = float. Every pointer is a device pointer aligned to at
 * least 16 bytes (the shim passes allocation bases; an output with a guard
 * band starts 4096 bytes into its allocation). Every buffer length in
 * elements is <= 2^31 - 1, and m, in_f, out_f >= 1 (the shim checks both).
 * Derived sizes (elements):
 *     in_f_pad   = ceil(in_f / 512) * 512        row stride of q
 *     act_blocks = in_f_pad / 128                row stride of d
 *     srows      = ceil(out_f / 128)             scale-grid rows
 *     scols      = ceil(in_f / 128)              scale-grid columns
 *
 * 1. extern "C" __global__ void fp8_mmq_plan(
 *        i32 m, i32 in_f, i32 out_f, i32 sm_count, i32 force_variant,
 *        u32 *plan)                              // 18 words, written
 *    Launch <<<1, 32>>>. Writes the launch geometry of the three kernels
 *    below for this shape, so a candidate chooses its own tiles:
 *        plan[0]  MMQ variant v: the host launches fp8_mmq_v2_k<v>
 *        plan[1..3]  MMQ grid (x, y, z)
 *        plan[4]  MMQ threads per CTA (block (plan[4], 1, 1))
 *        plan[5]  MMQ dynamic shared memory (bytes per CTA)
 *        plan[6..8]  quantizer grid (x, y, z)
 *        plan[9]  quantizer threads per CTA
 *        plan[10] NaN-count grid x (y = z = 1)
 *        plan[11] NaN-count threads per CTA
 *        plan[12] number of MMQ variants exported (k0 .. k<n-1>)
 *        plan[13] MMQ tile: out_f rows per CTA (grid x * plan[13] >= out_f
 *                 when plan[17] = 0)
 *        plan[14] MMQ tile: tokens per CTA     (grid y * plan[14] >= m
 *                 when plan[17] = 0)
 *        plan[15] the schedule code of variant plan[0]: which arithmetic
 *                 it computes (core's fp8_mmq::Schedule), two fields:
 *                   bit 0     the fold: 0 separate, sum + (s*d)*c (three
 *                             roundings); 1 fused, fma(s*d, c, sum)
 *                             (s*d rounded, then one rounding)
 *                   bits 1..  the in-block accumulation: 0 f32 (one chained
 *                             f32 accumulator, order hardware-internal:
 *                             judged bit for bit in EXACT/FOLD/CODES, by a
 *                             bound in RAND); 1 the sm90 FP8 MMA's own
 *                             accumulator (core's tensor_core::SM90_WGMMA:
 *                             per 128-k block four k=32 MMAs chained from
 *                             +0 in increasing k, bit-exact in every arm);
 *                             2 the same with mma.sync m16n8k32 .e4m3 as
 *                             ptxas lowers it on sm_90 (core's
 *                             tensor_core::SM90_MMA_SYNC)
 *                 so 0 = v2 (seed 000's; the value this word had before
 *                 it was defined), 1 = v2 with a fused fold, 2 = sm90 MMA
 *                 with a separate fold, 3 = sm90 MMA with a fused fold,
 *                 4 and 5 = sm90 mma.sync with a separate / fused fold.
 *                 Any other code is refused by the shim with an error
 *                 naming it. The judge compares the variant's output with
 *                 the declared schedule.
 *        plan[16] 1: variant plan[0] takes two tensor maps after its
 *                 other arguments (section 4, "TMA variants"); 0: it
 *                 does not (a source written before this word existed
 *                 leaves it 0: the host zeroes the plan first)
 *        plan[17] 1: variant plan[0] walks the tiles (persistent): the
 *                 grid is (P, 1, 1), 1 <= P <= the number of tiles, and
 *                 CTA c takes tiles c, c + P, c + 2P, ... of the
 *                 ceil(out_f / plan[13]) x ceil(m / plan[14]) tile grid;
 *                 0: one tile per CTA, the grid covers the output (a
 *                 source written before this word leaves it 0); the
 *                 shim refuses any other value, and a walk's grid of
 *                 another shape
 *    force_variant == -1 picks automatically among every variant (any
 *    schedule); force_variant == -2 - c (c >= 0) picks automatically among
 *    the variants declaring schedule code c (a requested schedule; with
 *    none declaring it, any pick, which the shim then refuses since its
 *    plan[15] differs); 0 <= force_variant < plan[12] forces that variant
 *    (tests run every variant); sm_count is the device's multiprocessor
 *    count.
 *
 * 2. extern "C" __global__ void fp8_quantize_act(
 *        const f32 *x,      // [m x in_f], row-major, read
 *        u8 *q,             // [m x in_f_pad] e4m3 codes, written in full
 *        f32 *d,            // [m x act_blocks], written in full
 *        i32 m, i32 in_f)
 *
 * 3. extern "C" __global__ void fp8_nan_count(
 *        const u8 *w, u64 n,   // n bytes, read
 *        u64 *count)           // one u64, ADDED to (host zeroes it first)
 *    Adds the number of bytes b with (b & 0x7F) == 0x7F (the e4m3 NaN
 *    magnitudes 0x7F and 0xFF).
 *
 * 4. extern "C" __global__ void fp8_mmq_v2_k<v>(     v = 0 .. plan[12] - 1
 *        const u8 *w,       // [out_f x in_f] e4m3, row stride in_f bytes
 *                           //   (rows need not be aligned), read
 *        const f32 *s,      // [srows x scols] weight scales, read
 *        const u8 *q,       // [m x in_f_pad] e4m3 activations, read
 *        const f32 *d,      // [m x act_blocks] activation scales, read
 *        f32 *y,            // [m x out_f], y[j * out_f + i], written
 *        i32 m, i32 in_f, i32 out_f)
 *    TMA variants (plan[16] = 1) take two more arguments, 128-byte
 *    CUtensorMap values (cuTensorMapEncodeTiled; `const __grid_constant__`),
 *        ta  // w as u8 [out_f][in_f], row stride in_f bytes, box plan[13]
 *            //   x 128 bytes, SWIZZLE_128B, out-of-bound bytes zero; encoded
 *            //   only when in_f % 16 == 0 and w is 16-byte aligned (TMA's
 *            //   stride and address rules), else all zero and unused
 *        tb  // q as u8 [m][in_f_pad], row stride in_f_pad, box 128 x
 *            //   plan[14] bytes, SWIZZLE_128B, out-of-bound bytes zero
 *    Each writes every element of y exactly once and nothing else. The
 *    variants differ in tiling and MMA instruction (see "MMQ variants"
 *    below) and in the schedule they declare in plan[15]: each implements
 *    the contract below under its own schedule.
 *
 * ========================= ARITHMETIC CONTRACT ============================
 * Variants k0 .. k14 declare schedule 0 (v2, seed 000's), stated here;
 * k15 .. k25 (sm_90a) declare schedule 3, stated in section 4c (M2'). The
 * plan picks among them when in_f % 16 == 0 unless
 * schedule 0 is requested. (core/src/fp8_mmq.rs is normative; this restates it.) IEEE binary32,
 * round-to-nearest-even, each operation rounding on its own (no FMA: the
 * file uses __fmul_rn/__fadd_rn/__fdiv_rn and is compiled --fmad=false).
 *
 * Quantizer, per row j and 128-value block b (0 <= b < act_blocks):
 *   Q1. x[j, k] for k >= in_f reads as +0.0 (zero padding).
 *   Q2. amax = max over the block of |x|; max ignores NaN (fmaxf), starts
 *       from +0.0, so the order of the reduction cannot matter.
 *   Q3. amax == 0: d[j, b] = 0.0 and every q of the block is 0x00.
 *   Q4. otherwise d = amax / 448 and dinv = 448 / amax (two IEEE
 *       divisions), and q = cvt.rn.satfinite.e4m3x2.f32(x * dinv) (one
 *       IEEE multiply, then the conversion: round to nearest even,
 *       beyond +-448 gives +-448, NaN gives NaN 0x7F).
 *
 * MMQ, for every output (j, i), 0 <= j < m, 0 <= i < out_f:
 *   M1. sum = +0.0.
 *   M2. for b = 0, 1, ..., scols - 1 IN ORDER:
 *         c = the block's 128 products w[i, k] * q[j, k], k = 128b..128b+127,
 *             accumulated in ONE f32 accumulator starting from 0 by chained
 *             tensor-core MMAs: four mma.sync m16n8k32 e4m3 (variants with
 *             CV = 0), or eight mma.sync m16n8k16 f16 on the same codes
 *             converted exactly to f16 (CV = 1; on sm_90 the e4m3 mma.sync
 *             is itself emulated by ptxas with this conversion and f16 MMAs,
 *             per instruction), or eight wgmma m64nNk16 f32.f16.f16 on the
 *             converted codes (k9..k14, sm_90a). Every product is exact in f32; the order of
 *             the additions inside the block is the hardware's and is not
 *             specified (the EXACT arm makes it irrelevant);
 *             w[i, k] for k >= in_f reads as 0x00 (the k tail is zero-filled);
 *             q[j, k] is read as stored for every k < 128 * scols <= in_f_pad.
 *         sum = sum + (s[i / 128, b] * d[j, b]) * c   (mul, mul, add; each
 *             rounded on its own).
 *   M3. y[j * out_f + i] = sum.
 *   No split-k: the fold order over b is the contract.
 *
 * What the kernels do NOT check (the shim does, before any launch): buffer
 * lengths, pointer alignment, shapes beyond the i32 index range or the grid
 * limits, and weight codes with NaN magnitude (the MMA reads 0x7F/0xFF as
 * NaN; the dispatch refuses such weights).
 * ==========================================================================
 */

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define E4M3_MAX 448.0f
#define BLOCK_K 128
#define ROW_PADDING 512

/* ------------------------------------------------------------------------ */
/* small PTX wrappers                                                        */
/* ------------------------------------------------------------------------ */

static __device__ __forceinline__ u32 smem_addr(const void *p) {
    u32 r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

/* 16-byte async copy global -> shared; bytes beyond src_bytes are zero. */
static __device__ __forceinline__ void cp_async16(u32 dst, const void *src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

/* 4-byte async copy global -> shared; zero when src_bytes == 0. */
static __device__ __forceinline__ void cp_async4(u32 dst, const void *src, u32 src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

static __device__ __forceinline__ void st_shared_v4(u32 dst, u32 a, u32 b, u32 c, u32 e) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(a), "r"(b), "r"(c), "r"(e));
}

static __device__ __forceinline__ void st_shared_f32(u32 dst, float v) {
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(v) : "memory");
}

static __device__ __forceinline__ void ldsm_x4(u32 addr, u32 &r0, u32 &r1, u32 &r2, u32 &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* D = A * B + C, A 16x32 e4m3 (row), B 32x8 e4m3 (col), C/D 16x8 f32. */
static __device__ __forceinline__ void mma_e4m3_16832(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two f32 -> two e4m3 codes; lo lands in bits 0..7, hi in bits 8..15
 * (the PTX cvt puts its first source in the upper byte). */
static __device__ __forceinline__ u32 cvt_e4m3x2(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return (u32)r;
}

/* ------------------------------------------------------------------------ */
/* 1. plan                                                                   */
/* ------------------------------------------------------------------------ */

/* MMQ variants. Each is one instantiation of mmq_body below:
 *   BM x BN   output tile per CTA: BM rows of out_f (weights, MMA M) by BN
 *             tokens (activations, MMA N); 128 % BM == 0, so one scale row
 *   WM x WN   warps tiling it, each owning a (BM/WM) x (BN/WN) warp tile
 *   WK        warps along k: the WK warps of one (WM, WN) position compute
 *             the accumulators of WK consecutive 128-k blocks at once (the
 *             blocks' accumulators are independent); warp wk == 0 then folds
 *             the WK terms into its sum in increasing block order
 *   ST        cp.async pipeline depth (stages of WK blocks)
 *   CV        0: mma.sync m16n8k32 e4m3 (native on sm_89; on sm_90 ptxas
 *                emulates it per instruction: e4m3 -> f16 and two HMMAs)
 *             1: each e4m3 fragment is converted once to f16
 *                (cvt.rn.f16x2.e4m3x2, exact) and reused by every MMA that
 *                reads it; mma.sync m16n8k16 f16 with f32 accumulation
 *   GR        0, or rasterise CTAs in groups of GR out_f tiles (L2 reuse)
 */
#define V0 64, 64, 2, 2, 1, 4, 0, 0
#define V1 128, 64, 4, 2, 1, 4, 0, 8
#define V2 32, 16, 2, 1, 1, 8, 0, 0
#define V3 64, 64, 2, 2, 1, 4, 1, 0
#define V4 128, 128, 4, 2, 1, 3, 1, 8
#define V5 32, 16, 2, 1, 4, 3, 1, 0
#define V6 64, 16, 4, 1, 2, 3, 1, 0
#define V7 64, 64, 2, 2, 2, 3, 1, 0
#define V8 128, 64, 2, 2, 1, 4, 1, 8
#define N_VARIANTS 9

struct VariantCfg {
    int bm, bn, wm, wn, wk, st, cv, gr;
};

/* wgmma variants (sm_90a only: compiled, exported and planned only when
 * the target has the sm_90a features; see "4b. MMQ with wgmma" below).
 * Each is one instantiation of wg_body:
 *   NWG   consumer warpgroups, each owning 64 out_f rows: BM = 64 * NWG
 *   BN    tokens per CTA (the wgmma N, or twice it with HS)
 *   ST    cp.async stages of raw e4m3 tiles
 *   HS    1: two wgmma groups per block (token halves); the first half's
 *            fold overlaps the second half's MMAs
 *   AS    0: A (weights) from registers (ldmatrix of e4m3, converted);
 *         1: A from shared memory, converted like B
 *   GR    0, or rasterise CTAs in groups of GR out_f tiles
 * Variant k<9 + i> is W<i>. */
#define W0 2, 48, 4, 1, 0, 0
#define W1 2, 64, 4, 1, 0, 0
#define W2 2, 128, 3, 1, 0, 8
#define W3 2, 48, 4, 0, 0, 0
#define W4 2, 96, 3, 1, 0, 0
#define W5 2, 128, 3, 0, 0, 8

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HAVE_WGMMA 1
#define N_WG_VARIANTS 6
#define N_NV_VARIANTS 11
#else
#define HAVE_WGMMA 0
#define N_WG_VARIANTS 0
#define N_NV_VARIANTS 0
#endif
#define N_ALL_VARIANTS (N_VARIANTS + N_WG_VARIANTS + N_NV_VARIANTS)

struct WgCfg {
    int nwg, bn, st, hs, as, gr;
};

/* Raw (e4m3) stage of a wgmma variant: A BM x 128, B BN x 128, BN
 * activation scales, one weight scale (padded to 16); rounded up to 128. */
static __host__ __device__ constexpr u32 wg_stage_bytes(int nwg, int bn) {
    return (u32)(((64 * nwg + bn) * BLOCK_K + bn * 4 + 16 + 127) / 128 * 128);
}

/* Dynamic shared memory of a wgmma variant: 1024 bytes of alignment slack,
 * two f16 B tiles (BN x 256 bytes each), two f16 A tiles when AS, the raw
 * stages, and the scale ring (2 x (BN + 4) floats). */
static __host__ __device__ constexpr u32 wg_smem(int nwg, int bn, int st, int hs, int as, int gr) {
    return 1024u + 2u * (u32)bn * 256u + (as ? 2u * (u32)(64 * nwg) * 256u : 0u) + (u32)st * wg_stage_bytes(nwg, bn) +
           2u * (u32)(bn + 4) * 4u;
}


/* Native variants: BN tokens per CTA (the wgmma N), ST stages, GR raster
 * group (0: none), MINB CTAs per SM the registers must allow, NPW producer
 * warps (threads: 128 NWG consumers + 32 NPW), TMA 1: the A and B tiles come
 * by tensor-map copies (cp.async.bulk.tensor, one thread) instead of
 * cp.async (X3 .. X5 are X0 .. X2 so, their producer warps only load the
 * scales and store s * d; X3 also with DB; X6 is X4 with DB, 4 producer
 * warps and 6 stages, X7 X5 with one consumer warpgroup and 6 stages),
 * DB 1: two accumulator sets,
 * so that the MMAs of block kb + 1 run while block kb is folded (NPW 4,
 * MINB 1: the producer warpgroup gives registers to the consumers,
 * setmaxnreg, as with NWG 3), NWG consumer warpgroups (SW 0: BM = 64 NWG
 * out_f rows per CTA, the weight tensor map's box BM rows), SW 1: the operands swapped, the
 * tokens on the MMA's M side (64 NWG tokens per CTA, A) and BN weight rows
 * on its N side (B, BN <= 128: one scale row per tile), so that each
 * accumulator row is one token and a thread's fold reads two products
 * s * d per block where SW 0 reads BN / 4 (X8 is X3 swapped, X9 X6);
 * X10 is X8 with three consumer warpgroups and one accumulator set (192
 * tokens by 128 weight rows a CTA; the third warpgroup's MMAs keep the
 * tensor cores busy while the others fold, where X8 uses a second set).
 * Variant k<N_VARIANTS + N_WG_VARIANTS + i> is X<i>. */
#define X0 128, 6, 8, 1, 4, 0, 0, 2, 0
#define X1 64, 4, 8, 2, 2, 0, 0, 2, 0
#define X2 32, 5, 0, 2, 2, 0, 0, 2, 0
#define X3 128, 6, 8, 1, 4, 1, 1, 2, 0
#define X4 64, 4, 8, 2, 2, 1, 0, 2, 0
#define X5 32, 5, 0, 2, 2, 1, 0, 2, 0
#define X6 64, 6, 8, 1, 4, 1, 1, 2, 0
#define X7 32, 6, 0, 2, 2, 1, 0, 1, 0
#define X8 128, 6, 8, 1, 4, 1, 1, 2, 1
#define X9 64, 6, 8, 1, 4, 1, 1, 2, 1
#define X10 128, 5, 8, 1, 4, 1, 0, 3, 1
/* Every native configuration in variant order: F(X0), F(X1), ... */
#define NV_CFGS(F) F(X0), F(X1), F(X2), F(X3), F(X4), F(X5), F(X6), F(X7), F(X8), F(X9), F(X10)

/* Bytes of one stage: A BM x 128, B BN x 128, the TR products s * d and
 * TR activation scales d of the tile's tokens (TR = BN, or BM with SW 1)
 * and the weight scale (padded to 16); rounded up to 1024 (swizzle
 * atoms). */
static __host__ __device__ constexpr u32 nv_stage_bytes(int bm, int bn, int tr) {
    return (u32)(((bm + bn) * BLOCK_K + 2 * tr * 4 + 16 + 1023) / 1024 * 1024);
}

/* Dynamic shared memory: 1024 bytes of alignment slack, the stages, two
 * mbarriers (8 bytes each) per stage. */
static __host__ __device__ constexpr u32 nv_smem(int bn, int st, int gr, int minb, int npw, int tma, int db, int nwg, int sw) {
    return 1024u + (u32)st * nv_stage_bytes(64 * nwg, bn, sw ? 64 * nwg : bn) + (u32)st * 16u;
}

/* Tokens per CTA (plan[14]). */
static __host__ __device__ constexpr int nv_bn(int bn, int st, int gr, int minb, int npw, int tma, int db, int nwg, int sw) { return sw ? 64 * nwg : bn; }
#if HAVE_WGMMA
/* NV_CFGS lists exactly the N_NV_VARIANTS configurations. */
static constexpr int nv_cfg_bns[] = {NV_CFGS(nv_bn)};
static_assert(sizeof(nv_cfg_bns) / sizeof(nv_cfg_bns[0]) == N_NV_VARIANTS, "NV_CFGS and N_NV_VARIANTS disagree");
#endif
static __host__ __device__ constexpr u32 nv_tma(int bn, int st, int gr, int minb, int npw, int tma, int db, int nwg, int sw) { return (u32)tma; }
static __host__ __device__ constexpr u32 nv_threads(int bn, int st, int gr, int minb, int npw, int tma, int db, int nwg, int sw) {
    return 128u * (u32)nwg + 32u * (u32)npw;
}
/* out_f rows per CTA (plan[13]). */
static __host__ __device__ constexpr u32 nv_bm(int bn, int st, int gr, int minb, int npw, int tma, int db, int nwg, int sw) {
    return sw ? (u32)bn : 64u * (u32)nwg;
}

#define QUANT_THREADS 256
#define NAN_THREADS 256

/* Shared bytes of one stage: WK blocks of A and B tiles, WK x BN activation
 * scales, WK weight scales (padded to 16), rounded up to 128. */
static __host__ __device__ constexpr u32 stage_bytes(int bm, int bn, int wk) {
    return (u32)(((wk * (bm + bn) * BLOCK_K + wk * bn * 4 + (wk * 4 + 15) / 16 * 16) + 127) / 128 * 128);
}

/* Dynamic shared memory of a variant: the stages, plus the (WK - 1) x BM x
 * BN f32 terms the k-warps hand to the folding warp. */
static __host__ __device__ constexpr u32 variant_smem(int bm, int bn, int wm, int wn, int wk, int st, int cv, int gr) {
    return (u32)st * stage_bytes(bm, bn, wk) + (u32)((wk - 1) * bm * bn * 4);
}

static __device__ __forceinline__ u32 cdiv(u32 a, u32 b) { return (a + b - 1) / b; }

#if HAVE_WGMMA
/* The native e4m3 wgmma variant for m x in_f x out_f (schedule 3), as
 * measured on the H200 (device/NOTES.md, in_f 5120, out_f 1536 unless
 * said). With in_f % 16 == 0, the TMA variants (5-16% faster than their
 * cp.async twins):
 *   up to 256 tokens 64 x 32 tiles (k22: 24 CTAs per 32 tokens where
 *   128 x 32 ran 12; 1 .. 128 tokens 0.0119-0.0125 ms, k20 0.0143-0.0147;
 *   256 tokens 0.0141, k21 0.0163);
 *   beyond, 192 tokens x 128 weight rows (k25: three consumer
 *   warpgroups) from 0.7 of a wave of them on (1536 tokens: k25 0.0300
 *   ms, k23 0.0396; 2048: 0.0345, 0.0430; 4096: 0.0711, 0.0751; 8192^3:
 *   964 TFLOP/s, 907; 1024 tokens, 72 tiles: k25 0.0271, k23 0.0216);
 *   else 128 x 128 tiles with the tokens on the MMA's M side (k23, k18
 *   swapped) from half a wave of them on (1024 tokens: k23 0.0215 ms, k18
 *   0.0247; 4096: k23 0.0756, k18 0.0827; 8192^3: k23 910 TFLOP/s, k18
 *   798);
 *   else 128 tokens x 64 weight rows (k24, k21 swapped; 512 tokens: k24
 *   0.0156 ms, k21 0.0166, k23 0.0208).
 * Else (in_f % 16 != 0) the cp.async variants, whose byte-wise weight path
 * the TMA ones would share: 128 x 128 (k15) from two waves on, else 128 x
 * 64 (k16) beyond 64 tokens, else 128 x 32 (k17). */
static __device__ __forceinline__ int nv_pick(u32 um, u32 uk, u32 un, u32 sms) {
    const int k15 = N_VARIANTS + N_WG_VARIANTS;
    const u32 tiles = cdiv(un, 128) * cdiv(um, 128);
    if ((uk & 15u) != 0) {
        if (tiles >= 2u * sms)
            return k15;
        return um > 64 ? k15 + 1 : k15 + 2;
    }
    if (um <= 256)
        return k15 + 7; /* k22 */
    if (10u * cdiv(un, 128) * cdiv(um, 192) >= 7u * sms)
        return k15 + 10; /* k25 */
    if (2u * tiles >= sms)
        return k15 + 8; /* k23 */
    return k15 + 9;     /* k24 */
}
#endif

extern "C" __global__ void fp8_mmq_plan(int m, int in_f, int out_f, int sm_count, int force_variant, u32 *plan) {
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return;
    const VariantCfg cfgs[N_VARIANTS] = {{V0}, {V1}, {V2}, {V3}, {V4}, {V5}, {V6}, {V7}, {V8}};
    const u32 smem[N_VARIANTS] = {variant_smem(V0), variant_smem(V1), variant_smem(V2),
                                  variant_smem(V3), variant_smem(V4), variant_smem(V5),
                                  variant_smem(V6), variant_smem(V7), variant_smem(V8)};
    const u32 um = (u32)m, uk = (u32)in_f, un = (u32)out_f;
    const u32 sms = (u32)(sm_count > 0 ? sm_count : 1);
    int v;
    const int request = force_variant <= -2 ? -2 - force_variant : -1; /* schedule code, -1: any */
    if (force_variant >= 0 && force_variant < N_ALL_VARIANTS) {
        v = force_variant;
#if HAVE_WGMMA
    } else if (request == 3) {
        v = nv_pick(um, uk, un, sms);
#endif
    } else {
#if __CUDA_ARCH__ >= 900
        /* sm_90, the f16 variants (CV = 1). Measured on an H200 at
         * in_f = 5120, out_f = 1536 and at 8192^3 (device/NOTES.md):
         * m <= 64: k5 (32 x 16 tiles, 4 k-warps) is 2-4x the others;
         * up to ~2 waves of 128 x 128 tiles: k3 (64 x 64);
         * beyond: k4 (128 x 128, grouped raster); with sm_90a, from 16
         * waves of 128 x 128 tiles on (8192^3): the wgmma k14, 7-12%
         * faster than k4 there (and slower at 4096 x 5120 x 1536). */
        if (um <= 64)
            v = 5;
#if HAVE_WGMMA
        else if (cdiv(un, 128) * cdiv(um, 128) >= 16u * sms)
            v = 14;
#endif
        else if (cdiv(un, 128) * cdiv(um, 128) >= 2u * sms)
            v = 4;
        else
            v = 3;
#if HAVE_WGMMA
        /* Any schedule (request -1): the native e4m3 wgmma variants
         * (schedule 3) beat every v2 variant on the H200 from one token
         * on (device/NOTES.md; at 1 .. 32 tokens k22 0.0123-0.0125 ms,
         * k5 0.0131-0.0135, at in_f 5120, out_f 1536; at 2048 x 2048,
         * 1 .. 64 tokens, k22 0.0063-0.0064, k5 0.0066-0.0083). Only for
         * in_f % 16 == 0:
         * on unaligned weight rows the natives' byte-wise copy path is
         * right but 2.3x slower than k4 (device/NOTES.md). */
        if (request < 0 && (uk & 15u) == 0)
            v = nv_pick(um, uk, un, sms);
#endif
#else
        if (um <= 16)
            v = 2;
        else if (cdiv(un, 128) * cdiv(um, 128) >= 2u * sms)
            v = 1;
        else
            v = 0;
#endif
    }
    u32 bm, bn, threads, smem_bytes;
    u32 schedule = 0; /* v2 (f32 accumulation, separate fold): k0 .. k14 */
    u32 tensor_maps = 0;
    if (v < N_VARIANTS) {
        const VariantCfg c = cfgs[v];
        bm = (u32)c.bm;
        bn = (u32)c.bn;
        threads = (u32)(c.wm * c.wn * c.wk * 32);
        smem_bytes = smem[v];
    } else if (v >= N_VARIANTS + N_WG_VARIANTS) {
#if HAVE_WGMMA
        const int nv_bns[N_NV_VARIANTS] = {NV_CFGS(nv_bn)};
        const u32 nv_sm[N_NV_VARIANTS] = {NV_CFGS(nv_smem)};
        const u32 nv_bms[N_NV_VARIANTS] = {NV_CFGS(nv_bm)};
        bm = nv_bms[v - N_VARIANTS - N_WG_VARIANTS];
        bn = (u32)nv_bns[v - N_VARIANTS - N_WG_VARIANTS];
        const u32 nv_th[N_NV_VARIANTS] = {NV_CFGS(nv_threads)};
        threads = nv_th[v - N_VARIANTS - N_WG_VARIANTS];
        smem_bytes = nv_sm[v - N_VARIANTS - N_WG_VARIANTS];
        const u32 nv_tm[N_NV_VARIANTS] = {NV_CFGS(nv_tma)};
        tensor_maps = nv_tm[v - N_VARIANTS - N_WG_VARIANTS];
        schedule = 3; /* SM90_WGMMA_FUSED: the e4m3 wgmma's accumulation, fused fold */
#else
        bm = bn = threads = smem_bytes = 0; /* unreachable: v < N_ALL_VARIANTS */
#endif
    } else {
#if HAVE_WGMMA
        const WgCfg wcfgs[N_WG_VARIANTS] = {{W0}, {W1}, {W2}, {W3}, {W4}, {W5}};
        const u32 wsmem[N_WG_VARIANTS] = {wg_smem(W0), wg_smem(W1), wg_smem(W2),
                                          wg_smem(W3), wg_smem(W4), wg_smem(W5)};
        const WgCfg c = wcfgs[v - N_VARIANTS];
        bm = (u32)(64 * c.nwg);
        bn = (u32)c.bn;
        threads = (u32)(128 * c.nwg);
        smem_bytes = wsmem[v - N_VARIANTS];
#else
        bm = bn = threads = smem_bytes = 0; /* unreachable: v < N_ALL_VARIANTS */
#endif
    }
    plan[0] = (u32)v;
    plan[1] = cdiv(un, bm);
    plan[2] = cdiv(um, bn);
    plan[3] = 1;
    plan[4] = threads;
    plan[5] = smem_bytes;
    const u32 in_f_pad = cdiv(uk, ROW_PADDING) * ROW_PADDING;
    const u64 qblocks = (u64)um * (u64)(in_f_pad / BLOCK_K); /* one warp each */
    plan[6] = (u32)((qblocks + (QUANT_THREADS / 32) - 1) / (QUANT_THREADS / 32));
    plan[7] = 1;
    plan[8] = 1;
    plan[9] = QUANT_THREADS;
    const u64 wbytes = (u64)un * (u64)uk;
    u64 ng = (wbytes + (u64)NAN_THREADS * 16 - 1) / ((u64)NAN_THREADS * 16);
    const u64 ncap = (u64)sms * 8;
    plan[10] = (u32)(ng < ncap ? (ng > 0 ? ng : 1) : ncap);
    plan[11] = NAN_THREADS;
    plan[12] = N_ALL_VARIANTS;
    plan[13] = bm;
    plan[14] = bn;
    plan[15] = schedule;
    plan[16] = tensor_maps;
    plan[17] = 0; /* one tile per CTA */
}

/* ------------------------------------------------------------------------ */
/* 2. activation quantizer: one warp per (row, 128-value block)              */
/* ------------------------------------------------------------------------ */

extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    fp8_quantize_act(const float *__restrict__ x, u8 *__restrict__ q, float *__restrict__ d, int m, int in_f) {
    const int lane = threadIdx.x & 31;
    const u64 blk = (u64)blockIdx.x * (QUANT_THREADS / 32) + (threadIdx.x >> 5);
    const int in_f_pad = (in_f + ROW_PADDING - 1) / ROW_PADDING * ROW_PADDING;
    const int act_blocks = in_f_pad / BLOCK_K;
    if (blk >= (u64)m * (u64)act_blocks)
        return;
    const int j = (int)(blk / (u64)act_blocks);
    const int b = (int)(blk % (u64)act_blocks);
    const int k0 = b * BLOCK_K + lane * 4;

    /* Q1: elements beyond in_f read as +0.0. */
    float v[4];
    const float *xr = x + (u64)j * (u64)in_f;
#pragma unroll
    for (int t = 0; t < 4; ++t)
        v[t] = (k0 + t < in_f) ? xr[k0 + t] : 0.0f;

    /* Q2: amax, NaN ignored, from +0.0. */
    float amax = 0.0f;
#pragma unroll
    for (int t = 0; t < 4; ++t)
        amax = fmaxf(amax, fabsf(v[t]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));

    u32 packed = 0; /* Q3: all-zero block gives 0x00 codes and d = 0 */
    float dv = 0.0f;
    if (amax != 0.0f) {
        /* Q4 */
        dv = __fdiv_rn(amax, E4M3_MAX);
        const float dinv = __fdiv_rn(E4M3_MAX, amax);
        const u32 lo = cvt_e4m3x2(__fmul_rn(v[0], dinv), __fmul_rn(v[1], dinv));
        const u32 hi = cvt_e4m3x2(__fmul_rn(v[2], dinv), __fmul_rn(v[3], dinv));
        packed = lo | (hi << 16);
    }
    *reinterpret_cast<u32 *>(q + (u64)j * (u64)in_f_pad + (u64)k0) = packed;
    if (lane == 0)
        d[(u64)j * (u64)act_blocks + (u64)b] = dv;
}

/* ------------------------------------------------------------------------ */
/* 3. NaN-magnitude count                                                    */
/* ------------------------------------------------------------------------ */

/* Bytes of v whose low 7 bits are all ones: adding 1 to (b & 0x7F) carries
 * into bit 7 exactly then, and never into the next byte. */
static __device__ __forceinline__ u32 nan_bytes(u32 v) {
    return (u32)__popc(((v & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u);
}

extern "C" __global__ void __launch_bounds__(NAN_THREADS)
    fp8_nan_count(const u8 *__restrict__ w, u64 n, u64 *__restrict__ count) {
    __shared__ u32 warp_sums[NAN_THREADS / 32];
    u32 c = 0;
    const u64 nthreads = (u64)gridDim.x * NAN_THREADS;
    const u64 tid = (u64)blockIdx.x * NAN_THREADS + threadIdx.x;
    /* head bytes up to 16-byte alignment, then 16-byte vectors, then tail */
    u64 head = (16 - ((unsigned long long)w & 15)) & 15;
    if (head > n)
        head = n;
    if (tid < head)
        c += ((w[tid] & 0x7F) == 0x7F) ? 1u : 0u;
    const u64 nvec = (n - head) / 16;
    const uint4 *wv = reinterpret_cast<const uint4 *>(w + head);
    for (u64 i = tid; i < nvec; i += nthreads) {
        const uint4 t = wv[i];
        c += nan_bytes(t.x) + nan_bytes(t.y) + nan_bytes(t.z) + nan_bytes(t.w);
    }
    const u64 tail0 = head + nvec * 16;
    if (tid < n - tail0)
        c += ((w[tail0 + tid] & 0x7F) == 0x7F) ? 1u : 0u;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        c += __shfl_xor_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0)
        warp_sums[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 total = 0;
#pragma unroll
        for (int i = 0; i < NAN_THREADS / 32; ++i)
            total += warp_sums[i];
        if (total)
            atomicAdd(count, total);
    }
}

/* ------------------------------------------------------------------------ */
/* 4. MMQ                                                                    */
/* ------------------------------------------------------------------------ */

/* Shared-memory tile rows are 128 bytes (8 chunks of 16); chunk kc of row r
 * lives at chunk kc ^ (r & 7), so the 8 rows an ldmatrix phase reads, and
 * the 8 chunks a cp.async phase writes, hit 8 distinct 16-byte bank groups. */
static __device__ __forceinline__ u32 swz(int r, int kc) { return (u32)(r * 128 + ((kc ^ (r & 7)) << 4)); }

/* Up to 16 bytes of one weight row starting at p, bytes >= nvalid zero.
 * p may be unaligned; never reads outside [w_begin, w_end). */
static __device__ __forceinline__ uint4 load_w_chunk(const u8 *p, int nvalid, const u8 *w_end) {
    const unsigned long long mis = (unsigned long long)p & 3ull;
    const u8 *base = p - mis;
    if (nvalid == 16 && base + 20 <= w_end) {
        /* five aligned words cover the 16 bytes; funnel-shift them. The
         * first word starts at or after the (aligned) buffer start. */
        const u32 *wp = reinterpret_cast<const u32 *>(base);
        const u32 sh = (u32)mis * 8u;
        const u32 t0 = __ldg(wp), t1 = __ldg(wp + 1), t2 = __ldg(wp + 2), t3 = __ldg(wp + 3);
        const u32 t4 = mis != 0 ? __ldg(wp + 4) : 0u;
        return make_uint4(__funnelshift_r(t0, t1, sh), __funnelshift_r(t1, t2, sh), __funnelshift_r(t2, t3, sh),
                          __funnelshift_r(t3, t4, sh));
    }
    /* byte by byte: the k tail of a row, or the last bytes of the buffer */
    u64 lo = 0, hi = 0;
    for (int t = 0; t < nvalid; ++t) {
        const u64 b = (u64)__ldg(p + t);
        if (t < 8)
            lo |= b << (8 * t);
        else
            hi |= b << (8 * (t - 8));
    }
    return make_uint4((u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32));
}

/* D = A * B + C, A 16x16 f16 (row), B 16x8 f16 (col), C/D 16x8 f32. */
static __device__ __forceinline__ void mma_f16_16816(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Four e4m3 codes (bytes 0..3 of x) -> two f16x2: lo = bytes 0, 1 and
 * hi = bytes 2, 3, lower byte in the lower half. Exact: every e4m3 value,
 * NaN included, is an f16 value. */
static __device__ __forceinline__ void e4m3x4_to_f16(u32 x, u32 &lo, u32 &hi) {
    asm("{ .reg .b16 l, h;\n"
        "  mov.b32 {l, h}, %2;\n"
        "  cvt.rn.f16x2.e4m3x2 %0, l;\n"
        "  cvt.rn.f16x2.e4m3x2 %1, h; }\n"
        : "=r"(lo), "=r"(hi)
        : "r"(x));
}

/*
 * The CTA computes y for out_f rows [row0, row0 + BM) and tokens
 * [col0, col0 + BN). Per step it takes WK consecutive 128-k blocks ("a
 * super-block"); warp (wm, wn, wk) computes block sb * WK + wk of its warp
 * tile:
 *   c = 0, then 4 k32 steps chained into c (CV 0: one m16n8k32 e4m3 MMA per
 *       m16 x n8 tile; CV 1: two m16n8k16 f16 MMAs on the converted
 *       fragments; the 32-k pair in each k32 step is permuted identically in
 *       A and B, which a sum over k does not see)
 *   t = (s_blk * d[j]) * c                      (two roundings)
 * and warp (wm, wn, 0) adds the terms into sum in increasing block order,
 * sum = sum + t (one rounding each): the contract's order exactly.
 */
template <int BM, int BN, int WM, int WN, int WK, int STAGES, int CV, int GR>
static __device__ __forceinline__ void mmq_body(const u8 *__restrict__ w, const float *__restrict__ s,
                                                const u8 *__restrict__ q, const float *__restrict__ d,
                                                float *__restrict__ y, int m, int in_f, int out_f) {
    constexpr int THREADS = WM * WN * WK * 32;
    constexpr int WTM = BM / WM; /* warp tile rows (out_f) */
    constexpr int WTN = BN / WN; /* warp tile cols (tokens) */
    constexpr int MI = WTM / 16;
    constexpr int NI = WTN / 8;
    constexpr u32 SB = stage_bytes(BM, BN, WK);
    constexpr int A_CHUNKS = WK * BM * 8;
    constexpr int B_CHUNKS = WK * BN * 8;
    constexpr u32 A_OFF = 0;
    constexpr u32 B_OFF = WK * BM * BLOCK_K;
    constexpr u32 D_OFF = WK * (BM + BN) * BLOCK_K;
    constexpr u32 S_OFF = D_OFF + WK * BN * 4;
    static_assert(BM <= 128 && 128 % BM == 0, "a CTA's rows must share one scale row");
    static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile: m16 rows, pairs of n8 columns");
    static_assert(A_CHUNKS % THREADS == 0 && B_CHUNKS % THREADS == 0, "whole chunks per thread");
    static_assert(WK * (BN + 1) <= THREADS, "one thread per activation and weight scale");

    extern __shared__ __align__(128) u8 smem[];
    const u32 smem0 = smem_addr(smem);
    float *terms = reinterpret_cast<float *>(smem + STAGES * SB); /* [WK - 1][BM][BN] */

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wm0 = (warp % WM) * WTM;
    const int wn0 = ((warp / WM) % WN) * WTN;
    const int wk = warp / (WM * WN);

    /* CTA -> tile; with GR, groups of GR out_f tiles sweep all token tiles
     * before the next group starts (launch order is x fastest). */
    int tx = blockIdx.x, ty = blockIdx.y;
    if (GR > 0) {
        const u32 gx = gridDim.x, gy = gridDim.y;
        const u32 id = blockIdx.y * gx + blockIdx.x;
        const u32 per_group = (u32)GR * gy;
        const u32 grp = id / per_group;
        const u32 first = grp * (u32)GR;
        const u32 width = (gx - first) < (u32)GR ? (gx - first) : (u32)GR;
        const u32 local = id - grp * per_group;
        tx = (int)(first + local % width);
        ty = (int)(local / width);
    }
    const int row0 = tx * BM; /* first out_f row of the CTA */
    const int col0 = ty * BN; /* first token of the CTA */

    const int in_f_pad = (in_f + ROW_PADDING - 1) / ROW_PADDING * ROW_PADDING;
    const int act_blocks = in_f_pad / BLOCK_K;
    const int nblk = (in_f + BLOCK_K - 1) / BLOCK_K; /* scols */
    const int nsb = (nblk + WK - 1) / WK;
    const u8 *w_end = w + (u64)out_f * (u64)in_f;
    const bool w_fast = ((in_f & 15) == 0) && (((unsigned long long)w & 15ull) == 0);
    const float *s_row = s + (u64)(row0 / 128) * (u64)nblk;

    /* Issue the loads of super-block sb into stage st. */
    auto load_stage = [&](int st, int sb) {
        const u32 base = smem0 + (u32)st * SB;
#pragma unroll
        for (int it = 0; it < A_CHUNKS / THREADS; ++it) {
            const int c = tid + it * THREADS;
            const int u = c / (BM * 8);
            const int r = (c >> 3) % BM, kc = c & 7;
            const int kb = sb * WK + u;
            const int gi = row0 + r;
            const int gk = kb * BLOCK_K + kc * 16;
            const u32 dst = base + A_OFF + (u32)u * (BM * BLOCK_K) + swz(r, kc);
            if (kb >= nblk)
                continue;
            if (w_fast) {
                const bool ok = gi < out_f && gk < in_f;
                const u8 *src = ok ? w + (u64)gi * (u64)in_f + (u64)gk : w;
                cp_async16(dst, src, ok ? 16u : 0u);
            } else {
                int nvalid = in_f - gk;
                nvalid = nvalid < 0 ? 0 : (nvalid > 16 ? 16 : nvalid);
                if (gi >= out_f)
                    nvalid = 0;
                const uint4 t = load_w_chunk(w + (u64)gi * (u64)in_f + (u64)gk, nvalid, w_end);
                st_shared_v4(dst, t.x, t.y, t.z, t.w);
            }
        }
#pragma unroll
        for (int it = 0; it < B_CHUNKS / THREADS; ++it) {
            const int c = tid + it * THREADS;
            const int u = c / (BN * 8);
            const int r = (c >> 3) % BN, kc = c & 7;
            const int kb = sb * WK + u;
            const int gj = col0 + r;
            if (kb >= nblk)
                continue;
            const bool ok = gj < m;
            const u8 *src = ok ? q + (u64)gj * (u64)in_f_pad + (u64)(kb * BLOCK_K + kc * 16) : q;
            cp_async16(base + B_OFF + (u32)u * (BN * BLOCK_K) + swz(r, kc), src, ok ? 16u : 0u);
        }
        if (tid < WK * BN) {
            const int u = tid / BN, jl = tid % BN;
            const int kb = sb * WK + u;
            const int gj = col0 + jl;
            if (kb < nblk) {
                const bool ok = gj < m;
                const float *src = ok ? d + (u64)gj * (u64)act_blocks + (u64)kb : d;
                cp_async4(base + D_OFF + (u32)tid * 4, src, ok ? 4u : 0u);
            }
        } else if (tid < WK * BN + WK) {
            const int u = tid - WK * BN;
            const int kb = sb * WK + u;
            if (kb < nblk)
                cp_async4(base + S_OFF + (u32)u * 4, s_row + kb, 4u);
        }
    };

    float sum[MI][NI][4];
#pragma unroll
    for (int a = 0; a < MI; ++a)
#pragma unroll
        for (int b = 0; b < NI; ++b)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                sum[a][b][e] = 0.0f; /* M1 */

#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        if (st < nsb)
            load_stage(st, st);
        cp_async_commit();
    }

    for (int sb = 0; sb < nsb; ++sb) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        {
            const int nk = sb + STAGES - 1;
            if (nk < nsb)
                load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const int st = sb % STAGES;
        const int kb = sb * WK + wk;
        const bool active = WK == 1 || kb < nblk; /* warp-uniform */
        const u32 sA = smem0 + (u32)st * SB + A_OFF + (u32)wk * (BM * BLOCK_K);
        const u32 sB = smem0 + (u32)st * SB + B_OFF + (u32)wk * (BN * BLOCK_K);
        const float *dcol = reinterpret_cast<const float *>(smem + (u32)st * SB + D_OFF) + wk * BN;
        const float s_blk = reinterpret_cast<const float *>(smem + (u32)st * SB + S_OFF)[wk];

        /* M2: one chained accumulator per output for the whole block. */
        float c[MI][NI][4];
#pragma unroll
        for (int a = 0; a < MI; ++a)
#pragma unroll
            for (int b = 0; b < NI; ++b)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    c[a][b][e] = 0.0f;

        if (active) {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                u32 af[MI][4];
                u32 bf[NI][2];
#pragma unroll
                for (int a = 0; a < MI; ++a) {
                    const int mat = lane >> 3;
                    const int r = wm0 + a * 16 + ((mat & 1) << 3) + (lane & 7);
                    const int kc = kk * 2 + (mat >> 1);
                    ldsm_x4(sA + swz(r, kc), af[a][0], af[a][1], af[a][2], af[a][3]);
                }
#pragma unroll
                for (int b = 0; b < NI; b += 2) {
                    const int mat = lane >> 3;
                    const int r = wn0 + (b + (mat >> 1)) * 8 + (lane & 7);
                    const int kc = kk * 2 + (mat & 1);
                    ldsm_x4(sB + swz(r, kc), bf[b][0], bf[b][1], bf[b + 1][0], bf[b + 1][1]);
                }
                if (CV == 0) {
#pragma unroll
                    for (int a = 0; a < MI; ++a)
#pragma unroll
                        for (int b = 0; b < NI; ++b)
                            mma_e4m3_16832(c[a][b], af[a], bf[b][0], bf[b][1]);
                } else {
                    /* a f16 k16 step h covers e4m3 k = 16h + 4t + {0..3}:
                     * lo halves take k 4t, 4t+1; hi halves k 4t+2, 4t+3. */
                    u32 ah[MI][8];
                    u32 bh[NI][4];
#pragma unroll
                    for (int a = 0; a < MI; ++a) {
                        e4m3x4_to_f16(af[a][0], ah[a][0], ah[a][2]);
                        e4m3x4_to_f16(af[a][1], ah[a][1], ah[a][3]);
                        e4m3x4_to_f16(af[a][2], ah[a][4], ah[a][6]);
                        e4m3x4_to_f16(af[a][3], ah[a][5], ah[a][7]);
                    }
#pragma unroll
                    for (int b = 0; b < NI; ++b) {
                        e4m3x4_to_f16(bf[b][0], bh[b][0], bh[b][1]);
                        e4m3x4_to_f16(bf[b][1], bh[b][2], bh[b][3]);
                    }
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int a = 0; a < MI; ++a)
#pragma unroll
                            for (int b = 0; b < NI; ++b)
                                mma_f16_16816(c[a][b], ah[a][4 * h], ah[a][4 * h + 1], ah[a][4 * h + 2],
                                              ah[a][4 * h + 3], bh[b][2 * h], bh[b][2 * h + 1]);
                }
            }

            /* t = (s_blk * d[j]) * c, into c */
#pragma unroll
            for (int b = 0; b < NI; ++b) {
                const int jl = wn0 + b * 8 + (lane & 3) * 2;
                const float sd0 = __fmul_rn(s_blk, dcol[jl]);
                const float sd1 = __fmul_rn(s_blk, dcol[jl + 1]);
#pragma unroll
                for (int a = 0; a < MI; ++a) {
                    c[a][b][0] = __fmul_rn(sd0, c[a][b][0]);
                    c[a][b][1] = __fmul_rn(sd1, c[a][b][1]);
                    c[a][b][2] = __fmul_rn(sd0, c[a][b][2]);
                    c[a][b][3] = __fmul_rn(sd1, c[a][b][3]);
                }
            }
        }

        /* fold: sum = sum + t, blocks in increasing order */
        const int g = lane >> 2, t4 = lane & 3;
        if (WK == 1) {
#pragma unroll
            for (int a = 0; a < MI; ++a)
#pragma unroll
                for (int b = 0; b < NI; ++b)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        sum[a][b][e] = __fadd_rn(sum[a][b][e], c[a][b][e]);
        } else {
            if (wk > 0 && active) {
#pragma unroll
                for (int a = 0; a < MI; ++a)
#pragma unroll
                    for (int b = 0; b < NI; ++b)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int r = wm0 + a * 16 + g + ((e >> 1) << 3);
                            const int jl = wn0 + b * 8 + t4 * 2 + (e & 1);
                            terms[((wk - 1) * BM + r) * BN + jl] = c[a][b][e];
                        }
            }
            __syncthreads();
            if (wk == 0) {
                /* block sb * WK is always < nblk here */
#pragma unroll
                for (int a = 0; a < MI; ++a)
#pragma unroll
                    for (int b = 0; b < NI; ++b)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            sum[a][b][e] = __fadd_rn(sum[a][b][e], c[a][b][e]);
#pragma unroll
                for (int u = 1; u < WK; ++u) {
                    if (sb * WK + u < nblk) {
#pragma unroll
                        for (int a = 0; a < MI; ++a)
#pragma unroll
                            for (int b = 0; b < NI; ++b)
#pragma unroll
                                for (int e = 0; e < 4; ++e) {
                                    const int r = wm0 + a * 16 + g + ((e >> 1) << 3);
                                    const int jl = wn0 + b * 8 + t4 * 2 + (e & 1);
                                    sum[a][b][e] = __fadd_rn(sum[a][b][e], terms[((u - 1) * BM + r) * BN + jl]);
                                }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();

    /* M3: c0, c1 at row g, cols 2t, 2t+1; c2, c3 at row g + 8. */
    if (wk != 0)
        return;
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int a = 0; a < MI; ++a) {
#pragma unroll
        for (int b = 0; b < NI; ++b) {
            const int i0 = row0 + wm0 + a * 16 + g;
            const int j0 = col0 + wn0 + b * 8 + t4 * 2;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = i0 + ((e >> 1) << 3);
                const int j = j0 + (e & 1);
                if (i < out_f && j < m)
                    y[(u64)j * (u64)out_f + (u64)i] = sum[a][b][e];
            }
        }
    }
}

#define MMQ_ARGS                                                                                               \
    const u8 *__restrict__ w, const float *__restrict__ s, const u8 *__restrict__ q, const float *__restrict__ d, \
        float *__restrict__ y, int m, int in_f, int out_f

#define THREADS_OF(bm, bn, wm, wn, wk, st, cv, gr) ((wm) * (wn) * (wk) * 32)
#define APPLY(f, args) f args
#define MMQ_VARIANT(name, cfg, minb)                                                                           \
    extern "C" __global__ void __launch_bounds__(APPLY(THREADS_OF, (cfg)), minb) name(MMQ_ARGS) {             \
        mmq_body<cfg>(w, s, q, d, y, m, in_f, out_f);                                                       \
    }

/* the last argument: CTAs per SM the register allocation must allow */
MMQ_VARIANT(fp8_mmq_v2_k0, V0, 3)
MMQ_VARIANT(fp8_mmq_v2_k1, V1, 1)
MMQ_VARIANT(fp8_mmq_v2_k2, V2, 4)
MMQ_VARIANT(fp8_mmq_v2_k3, V3, 3)
MMQ_VARIANT(fp8_mmq_v2_k4, V4, 1)
MMQ_VARIANT(fp8_mmq_v2_k5, V5, 2)
MMQ_VARIANT(fp8_mmq_v2_k6, V6, 2)
MMQ_VARIANT(fp8_mmq_v2_k7, V7, 1)
MMQ_VARIANT(fp8_mmq_v2_k8, V8, 2)

/* ------------------------------------------------------------------------ */
/* 4b. MMQ with wgmma (sm_90a)                                               */
/* ------------------------------------------------------------------------ */

/*
 * The same contract with Hopper's warpgroup MMA on f16 operands:
 *   - e4m3 codes are converted exactly to f16 (cvt.rn.f16x2.e4m3x2) once per
 *     CTA and 128-k block: the B tile (tokens) from its raw stage into an
 *     f16 tile in shared memory (128-byte swizzled, K-major), the A tile
 *     (weights) either into registers per warpgroup (AS = 0: ldmatrix of the
 *     raw codes, the wgmma A fragment in registers) or into shared memory
 *     like B (AS = 1);
 *   - per 128-k block b, eight wgmma.m64nNk16.f32.f16.f16 chain into one f32
 *     accumulator set, the first with scale-d = 0 (c starts at 0): c is the
 *     block's 128 exact products summed in f32 (the order inside the block
 *     is the hardware's);
 *   - then t = (s_blk * d[j]) * c and sum = sum + t (each rounded on its
 *     own), blocks in increasing order: M2 exactly.
 * Inside every 16-k group the k order is permuted identically in A and B
 * (a sum over k does not see it): f16 position kappa of k16 step s holds k =
 * 16 s + 4 ((kappa & 7) >> 1) + 2 (kappa >> 3) + (kappa & 1), which is what
 * an ldmatrix of the e4m3 codes gives the A fragment after the conversion.
 * The f32 accumulation is full precision (f16 wgmma), unlike the e4m3 wgmma.
 */
#if HAVE_WGMMA

static __device__ __forceinline__ void ld_shared_v4(u32 src, u32 &a, u32 &b, u32 &c, u32 &e) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(e) : "r"(src));
}

static __device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Generic-proxy writes to shared memory, then read by wgmma (async proxy). */
static __device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Descriptor of a K-major f16 tile with 128-byte swizzle: rows of 128 bytes
 * (64 k), 8-row atoms 1024 bytes apart (SBO), atoms 1024-byte aligned;
 * LBO unused (1). Advancing 16 k inside the atom adds 32 bytes to addr. */
static __device__ __forceinline__ u64 sw128_desc(u32 addr) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n24(float (&d)[12], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %17, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, %16, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n24(float (&d)[12], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %14, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, %12, %13, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n32(float (&d)[16], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n32(float (&d)[16], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n48(float (&d)[24], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %29, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, {%24, %25, %26, %27}, %28, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n48(float (&d)[24], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %26, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n48k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, %24, %25, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n96(float (&d)[48], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %53, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, {%48, %49, %50, %51}, %52, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n96(float (&d)[48], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %50, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n96k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const u32 (&a)[4], u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}


template <int N, int SCALE_D>
static __device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 bdesc) {
    if constexpr (N == 24)
        wgmma_rs_n24<SCALE_D>(d, a, bdesc);
    else if constexpr (N == 32)
        wgmma_rs_n32<SCALE_D>(d, a, bdesc);
    else if constexpr (N == 48)
        wgmma_rs_n48<SCALE_D>(d, a, bdesc);
    else if constexpr (N == 64)
        wgmma_rs_n64<SCALE_D>(d, a, bdesc);
    else if constexpr (N == 96)
        wgmma_rs_n96<SCALE_D>(d, a, bdesc);
    else
        wgmma_rs_n128<SCALE_D>(d, a, bdesc);
}

template <int N, int SCALE_D>
static __device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], u64 adesc, u64 bdesc) {
    if constexpr (N == 24)
        wgmma_ss_n24<SCALE_D>(d, adesc, bdesc);
    else if constexpr (N == 32)
        wgmma_ss_n32<SCALE_D>(d, adesc, bdesc);
    else if constexpr (N == 48)
        wgmma_ss_n48<SCALE_D>(d, adesc, bdesc);
    else if constexpr (N == 64)
        wgmma_ss_n64<SCALE_D>(d, adesc, bdesc);
    else if constexpr (N == 96)
        wgmma_ss_n96<SCALE_D>(d, adesc, bdesc);
    else
        wgmma_ss_n128<SCALE_D>(d, adesc, bdesc);
}

/* Converts a raw tile (R rows x 128 e4m3 codes, swz layout) into an f16
 * tile: two halves (k 0..63, 64..127) of R rows x 128 bytes, 128-byte
 * swizzled (chunk c of row r at chunk c ^ (r & 7)), k permuted as above.
 * Task (r, s): the 16 codes of k16 step s of row r, four words w0..w3;
 * w_i -> f16x2 lo_i (codes 4i, 4i+1) and hi_i (4i+2, 4i+3); positions 0..7
 * of the step are lo_0..lo_3, positions 8..15 hi_0..hi_3. Tasks are dealt
 * so that the 8 threads of each quarter-warp read and write 8 distinct
 * 16-byte bank groups: rows (p, p ^ 5) of an 8-row group, four steps each. */
template <int R, int THREADS>
static __device__ __forceinline__ void convert_tile(u32 raw, u32 dst, int tid) {
    constexpr int TASKS = R * 8;
    static_assert(R % 8 == 0, "8-row atoms");
#pragma unroll
    for (int i = 0; i < (TASKS + THREADS - 1) / THREADS; ++i) {
        const int task = tid + i * THREADS;
        if (TASKS % THREADS == 0 || task < TASKS) {
            const int grp = task >> 6, tau = task & 63, qw = tau >> 3, l = tau & 7;
            const int p = qw & 3;
            const int r = grp * 8 + ((l < 4) ? p : (p ^ 5));
            const int s = ((qw >> 2) << 2) + (l & 3);
            u32 w0, w1, w2, w3;
            ld_shared_v4(raw + swz(r, s), w0, w1, w2, w3);
            u32 l0, h0, l1, h1, l2, h2, l3, h3;
            e4m3x4_to_f16(w0, l0, h0);
            e4m3x4_to_f16(w1, l1, h1);
            e4m3x4_to_f16(w2, l2, h2);
            e4m3x4_to_f16(w3, l3, h3);
            const u32 base = dst + (u32)(s >> 2) * (u32)(R * 128) + (u32)r * 128u;
            const int c0 = (s & 3) * 2;
            st_shared_v4(base + (u32)((c0 ^ (r & 7)) << 4), l0, l1, l2, l3);
            st_shared_v4(base + (u32)(((c0 + 1) ^ (r & 7)) << 4), h0, h1, h2, h3);
        }
    }
}

template <int NWG, int BN, int ST, int HS, int AS, int GR>
static __device__ __forceinline__ void wg_body(const u8 *__restrict__ w, const float *__restrict__ s,
                                               const u8 *__restrict__ q, const float *__restrict__ d,
                                               float *__restrict__ y, int m, int in_f, int out_f) {
    constexpr int BM = 64 * NWG;
    constexpr int THREADS = 128 * NWG;
    constexpr int NH = HS ? 2 : 1; /* wgmma groups per block: token halves */
    constexpr int HN = BN / NH;     /* the wgmma N */
    constexpr int HR = HN / 2;      /* accumulator registers per thread and group */
    constexpr u32 SB = wg_stage_bytes(NWG, BN);
    constexpr u32 BF = (u32)BN * 256u; /* one f16 B tile */
    constexpr u32 AF = (u32)BM * 256u; /* one f16 A tile */
    constexpr u32 A_OFF = 0;
    constexpr u32 B_OFF = (u32)BM * BLOCK_K;
    constexpr u32 D_OFF = (u32)(BM + BN) * BLOCK_K;
    constexpr u32 S_OFF = D_OFF + (u32)BN * 4u;
    static_assert(HN % 8 == 0 && HN >= 8 && HN <= 256, "wgmma N");
    static_assert(NWG == 2, "warpgroup 0 loads, warpgroup 1 converts B");
    static_assert(BN <= 128, "one loader thread per activation scale");
    static_assert(ST >= 2, "stages");

    extern __shared__ __align__(1024) u8 smem[];
    const u32 sbase = smem_addr(smem);
    const u32 s0 = (sbase + 1023u) & ~1023u; /* swizzle atoms need 1024-byte alignment */
    u8 *const sp = smem + (s0 - sbase);
    const u32 bf16 = s0;                        /* [2][BN x 256] */
    const u32 af16 = s0 + 2u * BF;              /* [2][BM x 256] when AS */
    const u32 raw0 = af16 + (AS ? 2u * AF : 0u); /* [ST][SB] */
    const u32 raw_off = raw0 - s0;
    float *const ring = reinterpret_cast<float *>(sp + raw_off + (u32)ST * SB); /* [2][BN + 4] */

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wg = warp >> 2;  /* warpgroup: out_f rows 64 wg .. 64 wg + 63 of the tile */
    const int wq = warp & 3;   /* warp in the warpgroup: 16 of those rows */

    int tx = blockIdx.x, ty = blockIdx.y;
    if (GR > 0) {
        const u32 gx = gridDim.x, gy = gridDim.y;
        const u32 id = blockIdx.y * gx + blockIdx.x;
        const u32 per_group = (u32)GR * gy;
        const u32 grp = id / per_group;
        const u32 first = grp * (u32)GR;
        const u32 width = (gx - first) < (u32)GR ? (gx - first) : (u32)GR;
        const u32 local = id - grp * per_group;
        tx = (int)(first + local % width);
        ty = (int)(local / width);
    }
    const int row0 = tx * BM;
    const int col0 = ty * BN;

    const int in_f_pad = (in_f + ROW_PADDING - 1) / ROW_PADDING * ROW_PADDING;
    const int act_blocks = in_f_pad / BLOCK_K;
    const int nblk = (in_f + BLOCK_K - 1) / BLOCK_K; /* scols */
    const u8 *w_end = w + (u64)out_f * (u64)in_f;
    const bool w_fast = ((in_f & 15) == 0) && (((unsigned long long)w & 15ull) == 0);
    const float *s_row = s + (u64)(row0 / 128) * (u64)nblk;

    /* Roles: warpgroup 0 issues every cp.async (and never fences);
     * warpgroup 1 converts the B tile and fences it for the async proxy
     * (fence.proxy.async is MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S: in a thread
     * with cp.async in flight it waits for them, a memory latency per
     * block). Both convert their own A fragments, issue MMAs and fold. */
    constexpr int LT = 128; /* loader threads: warpgroup 0 */

    /* Issue the loads of block kb into raw stage slot (warpgroup 0). */
    auto load_stage = [&](int slot, int kb) {
        const u32 base = raw0 + (u32)slot * SB;
#pragma unroll 2
        for (int it = 0; it < BM * 8 / LT; ++it) {
            const int c = tid + it * LT;
            const int r = c >> 3, kc = c & 7;
            const int gi = row0 + r;
            const int gk = kb * BLOCK_K + kc * 16;
            const u32 dst = base + A_OFF + swz(r, kc);
            if (w_fast) {
                const bool ok = gi < out_f && gk < in_f;
                const u8 *src = ok ? w + (u64)gi * (u64)in_f + (u64)gk : w;
                cp_async16(dst, src, ok ? 16u : 0u);
            } else {
                int nvalid = in_f - gk;
                nvalid = nvalid < 0 ? 0 : (nvalid > 16 ? 16 : nvalid);
                if (gi >= out_f)
                    nvalid = 0;
                const uint4 t = load_w_chunk(w + (u64)gi * (u64)in_f + (u64)gk, nvalid, w_end);
                st_shared_v4(dst, t.x, t.y, t.z, t.w);
            }
        }
#pragma unroll 2
        for (int it = 0; it < (BN * 8 + LT - 1) / LT; ++it) {
            const int c = tid + it * LT;
            if ((BN * 8) % LT == 0 || c < BN * 8) {
                const int r = c >> 3, kc = c & 7;
                const int gj = col0 + r;
                const bool ok = gj < m;
                const u8 *src = ok ? q + (u64)gj * (u64)in_f_pad + (u64)(kb * BLOCK_K + kc * 16) : q;
                cp_async16(base + B_OFF + swz(r, kc), src, ok ? 16u : 0u);
            }
        }
        if (tid < BN) {
            const int gj = col0 + tid;
            const bool ok = gj < m;
            const float *src = ok ? d + (u64)gj * (u64)act_blocks + (u64)kb : d;
            cp_async4(base + D_OFF + (u32)tid * 4u, src, ok ? 4u : 0u);
        }
        if (tid == LT - 1)
            cp_async4(base + S_OFF, s_row + kb, 4u);
    };

    float sum[NH][HR];
    float acc[NH][HR];
    u32 areg[2][8][4]; /* AS = 0: the A fragments of a block, per parity */
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int i = 0; i < HR; ++i) {
            sum[h][i] = 0.0f; /* M1 */
            acc[h][i] = 0.0f;
        }

    /* Convert block kb (raw slot) into the parity-P f16 tiles / registers
     * and copy its scales into ring[P]. */
    auto convert = [&](const int P, int slot) {
        const u32 raw = raw0 + (u32)slot * SB;
        if (wg == 1)
            convert_tile<BN, 128>(raw + B_OFF, bf16 + (u32)P * BF, tid - 128);
        if constexpr (AS) {
            if (wg == 1)
                convert_tile<BM, 128>(raw + A_OFF, af16 + (u32)P * AF, tid - 128);
        } else {
            const int mat = lane >> 3;
            const int r = wg * 64 + wq * 16 + ((mat & 1) << 3) + (lane & 7);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                u32 f0, f1, f2, f3;
                ldsm_x4(raw + A_OFF + swz(r, kk * 2 + (mat >> 1)), f0, f1, f2, f3);
                /* f0: row g, k 32kk + 4t..; f1: row g + 8; f2, f3: k + 16 */
                e4m3x4_to_f16(f0, areg[P][2 * kk][0], areg[P][2 * kk][2]);
                e4m3x4_to_f16(f1, areg[P][2 * kk][1], areg[P][2 * kk][3]);
                e4m3x4_to_f16(f2, areg[P][2 * kk + 1][0], areg[P][2 * kk + 1][2]);
                e4m3x4_to_f16(f3, areg[P][2 * kk + 1][1], areg[P][2 * kk + 1][3]);
            }
        }
        const float *rs = reinterpret_cast<const float *>(sp + raw_off + (u32)slot * SB);
        if (tid < BN)
            ring[P * (BN + 4) + tid] = rs[D_OFF / 4 + tid];
        if (tid == THREADS - 1)
            ring[P * (BN + 4) + BN] = rs[S_OFF / 4];
        if (wg == 1)
            fence_proxy_async(); /* the f16 tiles, before the barrier */
    };

    /* The block's eight k16 steps into acc[h] for each token group h (c = 0
     * first: scale-d = 0), one commit group per h. */
    auto issue = [&](const int P) {
        wgmma_fence();
#pragma unroll
        for (int h = 0; h < NH; ++h) {
#pragma unroll
            for (int st = 0; st < 8; ++st) {
                const u64 bdesc = sw128_desc(bf16 + (u32)P * BF + (u32)(st >> 2) * (u32)(BN * 128) +
                                             (u32)(h * HN * 128) + (u32)(st & 3) * 32u);
                if constexpr (AS) {
                    const u64 adesc = sw128_desc(af16 + (u32)P * AF + (u32)(st >> 2) * (u32)(BM * 128) +
                                                 (u32)wg * (64u * 128u) + (u32)(st & 3) * 32u);
                    if (st == 0)
                        wgmma_ss<HN, 0>(acc[h], adesc, bdesc);
                    else
                        wgmma_ss<HN, 1>(acc[h], adesc, bdesc);
                } else {
                    if (st == 0)
                        wgmma_rs<HN, 0>(acc[h], areg[P][st], bdesc);
                    else
                        wgmma_rs<HN, 1>(acc[h], areg[P][st], bdesc);
                }
            }
            wgmma_commit();
        }
    };

    /* sum = sum + (s_blk * d[j]) * c for group h of the block whose scales
     * are in ring[P]. Accumulator register 4 ni + e of group h: row g + 8
     * (e >> 1), token column h HN + 8 ni + 2 t + (e & 1). */
    const int t4 = lane & 3;
    auto fold = [&](const int P, const int h) {
        const float *rd = ring + P * (BN + 4);
        const float s_blk = rd[BN];
#pragma unroll
        for (int ni = 0; ni < HN / 8; ++ni) {
            const int col = h * HN + ni * 8 + t4 * 2;
            const float sd0 = __fmul_rn(s_blk, rd[col]);
            const float sd1 = __fmul_rn(s_blk, rd[col + 1]);
            sum[h][4 * ni + 0] = __fadd_rn(sum[h][4 * ni + 0], __fmul_rn(sd0, acc[h][4 * ni + 0]));
            sum[h][4 * ni + 1] = __fadd_rn(sum[h][4 * ni + 1], __fmul_rn(sd1, acc[h][4 * ni + 1]));
            sum[h][4 * ni + 2] = __fadd_rn(sum[h][4 * ni + 2], __fmul_rn(sd0, acc[h][4 * ni + 2]));
            sum[h][4 * ni + 3] = __fadd_rn(sum[h][4 * ni + 3], __fmul_rn(sd1, acc[h][4 * ni + 3]));
        }
    };

    /* Prologue: stages 0 .. ST-1 in flight, block 0 converted. */
    if (wg == 0) {
#pragma unroll
        for (int st = 0; st < ST; ++st) {
            if (st < nblk)
                load_stage(st, st);
            cp_async_commit();
        }
        cp_async_wait<ST - 1>();
    }
    __syncthreads();
    convert(0, 0);
    __syncthreads();

    /* Block kb (parity P = kb & 1): issue its MMAs; while they run, load
     * block kb + ST into kb's raw slot and convert block kb + 1; then fold
     * group 0 while group 1 (HS) still runs, and group 1; barrier. (Every
     * commit group is waited for in the same step: ptxas serialises wgmma
     * when a group is still in flight across the loop's back edge.) */
    auto step = [&](const int P, int kb) {
        issue(P);
        if (kb + 1 < nblk) {
            if (wg == 0)
                cp_async_wait<ST - 2>();
            __syncthreads();
            if (wg == 0) {
                if (kb + ST < nblk)
                    load_stage(kb % ST, kb + ST);
                cp_async_commit();
            }
            convert(P ^ 1, (kb + 1) % ST);
        }
        if constexpr (HS) {
            wgmma_wait<1>();
            fold(P, 0);
            wgmma_wait<0>();
            fold(P, 1);
        } else {
            wgmma_wait<0>();
            fold(P, 0);
        }
        __syncthreads();
    };
    for (int kb = 0; kb < nblk; kb += 2) {
        step(0, kb);
        if (kb + 1 < nblk)
            step(1, kb + 1);
    }
    if (wg == 0)
        cp_async_wait<0>();

    /* M3 */
    const int g = lane >> 2;
#pragma unroll
    for (int h = 0; h < NH; ++h) {
#pragma unroll
        for (int ni = 0; ni < HN / 8; ++ni) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row0 + wg * 64 + wq * 16 + g + ((e >> 1) << 3);
                const int j = col0 + h * HN + ni * 8 + t4 * 2 + (e & 1);
                if (i < out_f && j < m)
                    y[(u64)j * (u64)out_f + (u64)i] = sum[h][4 * ni + e];
            }
        }
    }
}

#define WG_THREADS_OF(nwg, bn, st, hs, as, gr) ((nwg) * 128)
#define WG_VARIANT(name, cfg)                                                                                  \
    extern "C" __global__ void __launch_bounds__(APPLY(WG_THREADS_OF, (cfg)), 1) name(MMQ_ARGS) {             \
        wg_body<cfg>(w, s, q, d, y, m, in_f, out_f);                                                         \
    }

WG_VARIANT(fp8_mmq_v2_k9, W0)
WG_VARIANT(fp8_mmq_v2_k10, W1)
WG_VARIANT(fp8_mmq_v2_k11, W2)
WG_VARIANT(fp8_mmq_v2_k12, W3)
WG_VARIANT(fp8_mmq_v2_k13, W4)
WG_VARIANT(fp8_mmq_v2_k14, W5)


/* ------------------------------------------------------------------------ */
/* 4c. MMQ on the native FP8 wgmma (sm_90a), schedule 3                      */
/* ------------------------------------------------------------------------ */

/*
 * Variants k15.. declare schedule code 3, core's Schedule::SM90_WGMMA_FUSED,
 * NOT the v2 contract above:
 *   M2'. for b = 0, 1, ..., scols - 1 IN ORDER:
 *          c = +0.0; for t = 0, 1, 2, 3 in order: c = the e4m3 wgmma
 *              (wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3, the
 *              hardware's own accumulation, core's tensor_core::SM90_WGMMA)
 *              of the 32 weight codes w[i, k] and activation codes q[j, k],
 *              k = 128 b + 32 t .. 128 b + 32 t + 31, onto c (t = 0 with
 *              scale-d = 0, which is c = +0.0); w[i, k] for k >= in_f reads
 *              as 0x00 (the k tail is zero-filled), q as stored;
 *          sd = s[i / 128, b] * d[j, b] (rounded), sum = fma(sd, c, sum)
 *              (one rounding: __fmaf_rn).
 *   M1 and M3 as above; no split-k.
 * The operands go to the tensor cores from shared memory, unconverted: A
 * (weights, BM = 64 NWG out_f rows per CTA) and B (BN tokens) tiles of 128 k codes
 * per row, 128-byte swizzled, K-major (chunk c of row r at c ^ (r & 7)), the
 * k32 step t at byte 32 t of the swizzle atom's row.
 *
 * Roles: warps 4 NWG .. 4 NWG + NPW - 1 (the producers) issue cp.async copies of
 * each block's tiles into a ring of ST stages, store the block's scale
 * products sd = s * d (one per token, rounded: computed once for every
 * consumer warpgroup, from scales loaded one block ahead) with the raw
 * scales beside them, and signal the stage's "full" mbarrier twice per
 * thread: cp.async.mbarrier.arrive.noinc (when that thread's copies have
 * landed) and a release arrival (after its st.shared: the scales, and the
 * slow path's tiles: weight rows not 16-byte aligned, copied byte exact
 * with zeros past in_f, then fenced for the async proxy). In the
 * TMA variants (k18 .. k25) producer thread 0 brings the A and B tiles
 * instead, by two tensor-map copies (cp.async.bulk.tensor, the boxes the
 * ABI's maps describe, 128-byte swizzled by the copy engine into the same
 * layout), announcing their bytes with its release arrival
 * (mbarrier.arrive.expect_tx); the map's zero fill is the k tail and the
 * rows past out_f and m. Without a weight map (in_f % 16 != 0) A takes the
 * slow path above. In the cp.async paths rows
 * beyond out_f or m are not loaded
 * (their outputs are never written; the MMA keeps rows and columns apart),
 * the k tail of the weights is zero-filled. Warpgroups 0 .. NWG - 1 (the
 * consumers, 64 out_f rows each) wait on "full", fence the generic-proxy
 * writes for the async proxy, run the block's four MMAs, wait for them, fold
 * and arrive on the stage's "empty" mbarrier, which the producer waits on
 * before it refills the stage. With NWG 2 or 3 the consumers run on their own: the
 * tensor cores take their MMAs in turn as they are issued, so one
 * warpgroup's fold overlaps the others' MMAs (device/NOTES.md: 6-14% faster
 * than making them alternate with named barriers). Every wgmma group is
 * waited for before its accumulators are read (no group in flight across
 * the loop's back edge).
 */

/* The mask of the bytes of word [at, at + 4) of a chunk below nvalid. */
static __device__ __forceinline__ u32 byte_mask(int nvalid, int at) {
    const int n = nvalid - at;
    return n >= 4 ? 0xFFFFFFFFu : (n <= 0 ? 0u : (0xFFFFFFFFu >> (32 - 8 * n)));
}

static __device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\n" ::"r"(bar) : "memory");
}
/* Arrives on bar when every cp.async this thread issued before has landed;
 * counts against the barrier's expected arrivals (.noinc). */
static __device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
/* Arrives on bar and adds `bytes` to the transaction count its phase
 * waits for (the tensor-map copies' complete_tx). */
static __device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
/* A 128-byte CUtensorMap (cuTensorMapEncodeTiled), passed by value. */
struct __align__(64) TmaDesc {
    unsigned long long v[16];
};
/* The box of `map` at (c0 = byte in the row, c1 = row) into shared dst,
 * completing `bar`'s transaction count (PTX ISA, "Data movement:
 * cp.async.bulk.tensor"; the .2d tile mode, sm_90). */
static __device__ __forceinline__ void tma_load_2d(u32 dst, const TmaDesc *map, int c0, int c1, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
static __device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* Register budget of the executing warpgroup (PTX ISA, "setmaxnreg";
 * sm_90a): the producers give registers back, the consumers take them. */
template <int N> static __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> static __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
/* Pins the accumulator registers at this point of the program: no read or
 * write of them moves across it (the wgmma results are defined only after
 * the wait, and must not be overwritten before the fold has read them). */
template <int N> static __device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+f"(r[i])::"memory");
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_e4m3_n32(float (&d)[16], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_e4m3_n64(float (&d)[32], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}

template <int SCALE_D>
static __device__ __forceinline__ void wgmma_e4m3_n128(float (&d)[64], u64 adesc, u64 bdesc) {
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1; }\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(adesc), "l"(bdesc), "n"(SCALE_D));
}


template <int N, int SCALE_D>
static __device__ __forceinline__ void wgmma_e4m3(float (&d)[N / 2], u64 adesc, u64 bdesc) {
    if constexpr (N == 32)
        wgmma_e4m3_n32<SCALE_D>(d, adesc, bdesc);
    else if constexpr (N == 64)
        wgmma_e4m3_n64<SCALE_D>(d, adesc, bdesc);
    else
        wgmma_e4m3_n128<SCALE_D>(d, adesc, bdesc);
}

template <int BN, int ST, int GR, int MINB, int NPW, int TMA, int DB, int NWG, int SW>
static __device__ __forceinline__ void nv_body(const u8 *__restrict__ w, const float *__restrict__ s,
                                               const u8 *__restrict__ q, const float *__restrict__ d,
                                               float *__restrict__ y, int m, int in_f, int out_f,
                                               const TmaDesc *ta, const TmaDesc *tb) {
    constexpr int BM = 64 * NWG;
    constexpr int CT = 128 * NWG; /* consumer threads: warps 0 .. 4 NWG - 1 */
    constexpr int R = BN / 2;     /* accumulator registers per thread */
    constexpr int PT = 32 * NPW;  /* producer threads: the NPW warps after them */
    constexpr int RS = PT / 8;    /* rows one pass of the producers covers */
    static_assert(NPW == 2 || NPW == 4, "RS a multiple of 8");
    constexpr u32 SB = nv_stage_bytes(BM, BN, SW ? BM : BN);
    constexpr u32 A_OFF = 0;
    constexpr u32 B_OFF = (u32)BM * BLOCK_K;
    /* SW 0: the MMA's M side (A, BM rows) is the weights, N (B, BN rows)
     * the tokens; SW 1: A the tokens, B the weights. WR weight rows and
     * TR tokens per tile, in the stage at W_OFF and T_OFF. */
    constexpr int WR = SW ? BN : BM;
    constexpr int TR = SW ? BM : BN;
    constexpr u32 W_OFF = SW ? B_OFF : A_OFF;
    constexpr u32 T_OFF = SW ? A_OFF : B_OFF;
    constexpr u32 D_OFF = (u32)(BM + BN) * BLOCK_K; /* TR products s * d */
    constexpr u32 DR_OFF = D_OFF + (u32)TR * 4u;     /* TR activation scales d */
    constexpr u32 S_OFF = DR_OFF + (u32)TR * 4u;     /* the weight scale s */
    constexpr int DPT = (TR + PT - 1) / PT;          /* tokens per producer thread */
    static_assert(!SW || BN <= 128, "one weight scale row per tile");
    static_assert(BN == 32 || BN == 64 || BN == 128, "wgmma N");
    static_assert(ST >= 2, "stages");
    static_assert(NWG >= 1 && NWG <= 3, "consumer warpgroups");
    /* The register split (setmaxnreg, in registers per thread) of a CTA
     * that needs more than an even share of the 64 Ki registers: two
     * accumulator sets, or three consumer warpgroups (one set of BN / 2
     * accumulators and BN / 2 sums each). The split cannot hand out more
     * than the block starts with: PR + NWG CR <= (NWG + 1) CAP, CAP the
     * compiler's per-thread cap (64 Ki / threads, rounded down to 8): 504
     * at 384 threads, 512 at 512. PR 40 spills in the producers. */
    constexpr bool SPLIT = DB || NWG == 3;
    constexpr int PR = NWG == 3 ? 48 : 56;   /* the producer warpgroup's */
    constexpr int CR = NWG == 3 ? 152 : 224; /* each consumer warpgroup's */
    constexpr int CAP = (65536 / (128 * (NWG + 1))) & ~7; /* registers a thread starts with */
    static_assert(!SPLIT || (NPW == 4 && MINB == 1 && PR + NWG * CR <= (NWG + 1) * CAP),
                  "the register split of setmaxnreg: no more than the block starts with");
    static_assert(!DB || NWG == 2, "two accumulator sets: two consumer warpgroups");

    extern __shared__ __align__(1024) u8 smem[];
    const u32 sbase = smem_addr(smem);
    const u32 s0 = (sbase + 1023u) & ~1023u; /* swizzle atoms need 1024-byte alignment */
    const u8 *const sp = smem + (s0 - sbase);
    const u32 full0 = s0 + (u32)ST * SB; /* full[ST], then empty[ST] */
    const u32 empty0 = full0 + (u32)ST * 8u;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    int tx = blockIdx.x, ty = blockIdx.y;
    if (GR > 0) {
        const u32 gx = gridDim.x, gy = gridDim.y;
        const u32 id = blockIdx.y * gx + blockIdx.x;
        const u32 per_group = (u32)GR * gy;
        const u32 grp = id / per_group;
        const u32 first = grp * (u32)GR;
        const u32 width = (gx - first) < (u32)GR ? (gx - first) : (u32)GR;
        const u32 local = id - grp * per_group;
        tx = (int)(first + local % width);
        ty = (int)(local / width);
    }
    const int row0 = tx * WR;
    const int col0 = ty * TR;

    const int in_f_pad = (in_f + ROW_PADDING - 1) / ROW_PADDING * ROW_PADDING;
    const int act_blocks = in_f_pad / BLOCK_K;
    const int nblk = (in_f + BLOCK_K - 1) / BLOCK_K; /* scols */

    if (tid == 0) {
        for (int st = 0; st < ST; ++st) {
            /* two arrivals per producer thread: the asynchronous one (its
             * copies landed) and a release (its st.shared, slow path) */
            mbar_init(full0 + (u32)st * 8u, (u32)(2 * PT));
            mbar_init(empty0 + (u32)st * 8u, (u32)CT); /* every consumer thread */
        }
        /* The tensor-map copies complete the full barriers through the
         * async proxy: make their initialisation visible to it (PTX ISA,
         * "membar/fence": fence.mbarrier_init). */
        if constexpr (TMA)
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (tid >= CT) {
        if constexpr (SPLIT)
            setmaxnreg_dec<PR>();
        /* Producer: PT threads. Thread pt copies chunk kc = pt & 7 of rows
         * r0 + RS i, r0 = pt >> 3: each group of 8 threads writes one whole
         * swizzled 128-byte row (no bank conflict) and reads 128 contiguous
         * bytes; (r & 7) is r0's for every i (RS is a multiple of 8). */
        const int pt = tid - CT;
        const int kc = pt & 7, r0 = pt >> 3;
        const u8 *w_end = w + (u64)out_f * (u64)in_f;
        const bool w_fast = ((in_f & 15) == 0) && (((unsigned long long)w & 15ull) == 0);
        /* ta is encoded exactly when w_fast holds (the ABI) */
        const bool a_tma = TMA && w_fast;
        const float *s_row = s + (u64)(row0 / 128) * (u64)nblk;
        const int a_rows = (out_f - row0) < WR ? (out_f - row0) : WR;
        const int b_rows = (m - col0) < TR ? (m - col0) : TR;
        const u8 *a_src = w + (u64)(row0 + r0) * (u64)in_f + (u64)(kc * 16);
        const u8 *b_src = q + (u64)(col0 + r0) * (u64)in_f_pad + (u64)(kc * 16);
        const u64 a_step = (u64)RS * (u64)in_f, b_step = (u64)RS * (u64)in_f_pad;
        /* The block's scales, loaded one block ahead: d of tokens
         * pt + PT i, and s. */
        float dn[DPT], sn = 0.0f;
        const auto load_scales = [&](int kb) {
#pragma unroll
            for (int i = 0; i < DPT; ++i) {
                const int r = pt + PT * i;
                dn[i] = r < b_rows ? d[(u64)(col0 + r) * (u64)act_blocks + (u64)kb] : 0.0f;
            }
            sn = s_row[kb];
        };
        load_scales(0);
        for (int kb = 0; kb < nblk; ++kb) {
            const int slot = kb % ST;
            if (kb >= ST)
                mbar_wait(empty0 + (u32)slot * 8u, (u32)((kb / ST - 1) & 1));
            const u32 base = s0 + (u32)slot * SB;
            const int gk = kb * BLOCK_K + kc * 16;
            const u32 a_dst = base + W_OFF + swz(r0, kc);
            const u8 *as = a_src + (u64)kb * BLOCK_K;
            if (a_tma) {
                /* A by thread 0's tensor-map copy below */
            } else if (w_fast && a_rows == WR) {
                const bool ok = gk < in_f;
#pragma unroll
                for (int i = 0; i < WR / RS; ++i)
                    cp_async16(a_dst + (u32)i * (u32)(RS * 128), ok ? as + (u64)i * a_step : w, ok ? 16u : 0u);
            } else {
                for (int i = 0; r0 + RS * i < a_rows; ++i) {
                    const u32 dst = a_dst + (u32)i * (u32)(RS * 128);
                    const u8 *src = as + (u64)i * a_step;
                    if (w_fast) {
                        const bool ok = gk < in_f;
                        cp_async16(dst, ok ? src : w, ok ? 16u : 0u);
                    } else {
                        int nvalid = in_f - gk;
                        nvalid = nvalid < 0 ? 0 : (nvalid > 16 ? 16 : nvalid);
                        const uint4 t = load_w_chunk(nvalid > 0 ? src : w, nvalid, w_end);
                        /* bytes nvalid .. 15 zero (K-TAIL), explicitly */
                        const u32 keep[4] = {byte_mask(nvalid, 0), byte_mask(nvalid, 4), byte_mask(nvalid, 8),
                                             byte_mask(nvalid, 12)};
                        st_shared_v4(dst, t.x & keep[0], t.y & keep[1], t.z & keep[2], t.w & keep[3]);
                    }
                }
            }
            /* B: b_rows x 8 chunks, always inside the padded row. */
            const u32 b_dst = base + T_OFF + swz(r0, kc);
            const u8 *bs = b_src + (u64)kb * BLOCK_K;
            if (TMA) {
                /* B by thread 0's tensor-map copy below */
            } else if (b_rows == TR) {
#pragma unroll
                for (int i = 0; i < (TR + RS - 1) / RS; ++i)
                    if (TR % RS == 0 || r0 + RS * i < TR)
                        cp_async16(b_dst + (u32)i * (u32)(RS * 128), bs + (u64)i * b_step, 16u);
            } else {
                for (int i = 0; r0 + RS * i < b_rows; ++i)
                    cp_async16(b_dst + (u32)i * (u32)(RS * 128), bs + (u64)i * b_step, 16u);
            }
            /* M2' sd = s * d (rounded), once per token for every consumer
             * warpgroup, and the raw scales beside them (st.shared,
             * released by this thread's arrival below; the consumers read
             * them with generic loads) */
            float dv[DPT];
            const float sv = sn;
#pragma unroll
            for (int i = 0; i < DPT; ++i)
                dv[i] = dn[i];
            if (kb + 1 < nblk)
                load_scales(kb + 1);
#pragma unroll
            for (int i = 0; i < DPT; ++i) {
                const int r = pt + PT * i;
                if (r < b_rows) {
                    st_shared_f32(base + D_OFF + (u32)r * 4u, __fmul_rn(sv, dv[i]));
                    st_shared_f32(base + DR_OFF + (u32)r * 4u, dv[i]);
                }
            }
            if (pt == 0)
                st_shared_f32(base + S_OFF, sv);
            if (!w_fast)
                fence_proxy_async(); /* the st.shared of the slow path, for the async proxy */
            cp_async_mbar_arrive(full0 + (u32)slot * 8u);
            if (TMA && pt == 0) {
                /* release, and the bytes the tensor-map copies bring (the
                 * whole boxes: out-of-bound bytes arrive as zeros) */
                const u32 full = full0 + (u32)slot * 8u;
                mbar_arrive_expect_tx(full, (a_tma ? (u32)WR * BLOCK_K : 0u) + (u32)TR * BLOCK_K);
                if (a_tma)
                    tma_load_2d(base + W_OFF, ta, kb * BLOCK_K, row0, full);
                tma_load_2d(base + T_OFF, tb, kb * BLOCK_K, col0, full);
            } else {
                mbar_arrive(full0 + (u32)slot * 8u); /* release: this thread's st.shared */
            }
        }
        cp_async_wait<0>();
        return;
    }

    /* Consumers: warpgroup wg owns out_f rows 64 wg .. 64 wg + 63 of the tile. */
    if constexpr (SPLIT)
        setmaxnreg_inc<CR>();
    const int wg = warp >> 2;
    const int wq = warp & 3;
    const int g = lane >> 2, t4 = lane & 3;
    float sum[R];
    float acc0[R];
    float acc1[R]; /* DB: block kb's MMAs in acc0 (kb even) or acc1 (kb odd) */
    float sdq0[2] = {0.0f, 0.0f}, sdq1[2] = {0.0f, 0.0f}; /* SW: their blocks' s * d (issue) */
#pragma unroll
    for (int i = 0; i < R; ++i) {
        sum[i] = 0.0f; /* M1 */
        acc0[i] = 0.0f;
        acc1[i] = 0.0f;
    }
    /* M2' chain: block kb's four k=32 MMAs, the first from +0, committed as
     * one group (not waited for). */
    const auto issue = [&](float (&acc)[R], float (&sdq)[2], int kb) {
        const int slot = kb % ST;
        const u32 base = s0 + (u32)slot * SB;
        mbar_wait(full0 + (u32)slot * 8u, (u32)((kb / ST) & 1));
        if constexpr (SW) {
            /* the two products s * d this thread's fold of block kb takes
             * (its token rows 64 wg + 16 wq + g and + 8), read here so that
             * the fold does not wait for them */
            const float *rsd = reinterpret_cast<const float *>(sp + (u32)slot * SB + D_OFF);
            sdq[0] = rsd[wg * 64 + wq * 16 + g];
            sdq[1] = rsd[wg * 64 + wq * 16 + g + 8];
        }
        fence_proxy_async(); /* the stage's generic-proxy writes, for the MMA */
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u64 adesc = sw128_desc(base + A_OFF + (u32)wg * (64u * 128u) + (u32)t * 32u);
            const u64 bdesc = sw128_desc(base + B_OFF + (u32)t * 32u);
            if (t == 0)
                wgmma_e4m3<BN, 0>(acc, adesc, bdesc);
            else
                wgmma_e4m3<BN, 1>(acc, adesc, bdesc);
        }
        wgmma_commit();
    };
    /* M2' fold of block kb, whose MMAs have completed, then the stage goes
     * back to the producers: accumulator register 4 ni + e is row
     * 64 wg + 16 wq + g + 8 (e >> 1), column 8 ni + 2 t4 + (e & 1) of the
     * CTA's tile (SW 0: rows weight rows, columns tokens; SW 1 the other
     * way round). */
    const auto fold = [&](float (&acc)[R], const float (&sdq)[2], int kb) {
        const int slot = kb % ST;
        fence_regs(acc); /* no read of acc above the wait */
        const float *rsd = reinterpret_cast<const float *>(sp + (u32)slot * SB + D_OFF);
        const float *rd = reinterpret_cast<const float *>(sp + (u32)slot * SB + DR_OFF);
        const float *rs = reinterpret_cast<const float *>(sp + (u32)slot * SB + S_OFF);
        /* The raw scales: no variant reads them; a fold that multiplies
         * them in another order would (`kernel-oracle mutant fp8-mmq
         * fold-association` plants one here). */
        (void)rd;
        (void)rs;
#pragma unroll
        for (int ni = 0; ni < BN / 8; ++ni) {
            /* tok0: the tile's token of register 4 ni + 0; sd0 .. sd3: s * d
             * of registers 4 ni + 0 .. 3 (SW 0: the token columns
             * 8 ni + 2 t4 and + 1; SW 1: the token rows 64 wg + 16 wq + g
             * and + 8, whatever ni). */
            const int tok0 = SW ? wg * 64 + wq * 16 + g : ni * 8 + t4 * 2;
            float sd0, sd1, sd2, sd3;
            if constexpr (SW) {
                sd0 = sd1 = sdq[0]; /* rsd[tok0], read by issue */
                sd2 = sd3 = sdq[1]; /* rsd[tok0 + 8] */
            } else {
                const float2 sd = *reinterpret_cast<const float2 *>(rsd + tok0);
                sd0 = sd2 = sd.x;
                sd1 = sd3 = sd.y;
            }
            (void)tok0;
            sum[4 * ni + 0] = __fmaf_rn(sd0, acc[4 * ni + 0], sum[4 * ni + 0]);
            sum[4 * ni + 1] = __fmaf_rn(sd1, acc[4 * ni + 1], sum[4 * ni + 1]);
            sum[4 * ni + 2] = __fmaf_rn(sd2, acc[4 * ni + 2], sum[4 * ni + 2]);
            sum[4 * ni + 3] = __fmaf_rn(sd3, acc[4 * ni + 3], sum[4 * ni + 3]);
        }
        fence_regs(acc); /* every read of acc before the next MMA into it */
        mbar_arrive(empty0 + (u32)slot * 8u);
    };
    if constexpr (DB) {
        /* Two blocks in flight: the MMAs of kb + 1 are issued before the
         * fold of kb waits for kb's (wgmma.wait_group 1: every group but
         * the newest complete). The order of the folds, and each fold's
         * arithmetic, are those of the one-set loop below. */
        if (nblk > 0) {
            int kb = 0;
            issue(acc0, sdq0, 0);
            for (; kb + 2 < nblk; kb += 2) {
                issue(acc1, sdq1, kb + 1);
                wgmma_wait<1>();
                fold(acc0, sdq0, kb);
                issue(acc0, sdq0, kb + 2);
                wgmma_wait<1>();
                fold(acc1, sdq1, kb + 1);
            }
            if (kb + 1 < nblk) {
                issue(acc1, sdq1, kb + 1);
                wgmma_wait<1>();
                fold(acc0, sdq0, kb);
                wgmma_wait<0>();
                fold(acc1, sdq1, kb + 1);
            } else {
                wgmma_wait<0>();
                fold(acc0, sdq0, kb);
            }
        }
    } else {
        for (int kb = 0; kb < nblk; ++kb) {
            issue(acc0, sdq0, kb);
            wgmma_wait<0>();
            fold(acc0, sdq0, kb);
        }
    }

    /* M3 */
    if constexpr (SW) {
        /* Through shared memory: once every consumer warpgroup is past
         * their last fold (named barrier 1, the CT consumer threads; every
         * tile copy has landed and every MMA has read its operands), the
         * tile's sums are staged row-major, token r at floats r * YS (YS =
         * BN + 8: a half warp's 8-byte stores, rows g .. g + 3, fall in 32
         * distinct banks), then each thread stores 16 bytes along out_f:
         * a warp writes whole 512-byte (BN 128) or 256-byte runs. */
        constexpr int YS = BN + 8;
        constexpr int LPR = BN / 4; /* threads per staged row */
        static_assert((u32)BM * (u32)YS * 4u <= (u32)ST * SB, "the staged tile fits the stages");
        float *const ys = reinterpret_cast<float *>(smem + (s0 - sbase));
        fence_proxy_async(); /* the MMAs' reads of the stages, before these writes */
        asm volatile("bar.sync 1, %0;\n" ::"r"(CT) : "memory");
#pragma unroll
        for (int ni = 0; ni < BN / 8; ++ni) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wg * 64 + wq * 16 + g + 8 * h;
                *reinterpret_cast<float2 *>(ys + r * YS + ni * 8 + t4 * 2) =
                    make_float2(sum[4 * ni + 2 * h], sum[4 * ni + 2 * h + 1]);
            }
        }
        asm volatile("bar.sync 1, %0;\n" ::"r"(CT) : "memory");
        const bool vec = ((out_f & 3) == 0) && (((unsigned long long)y & 15ull) == 0);
        const int c = (tid % LPR) * 4;
        const int i = row0 + c;
#pragma unroll 4
        for (int r = tid / LPR; r < BM; r += CT / LPR) {
            const int j = col0 + r;
            if (j >= m)
                break; /* r only grows */
            const float4 v = *reinterpret_cast<const float4 *>(ys + r * YS + c);
            float *const dst = y + (u64)j * (u64)out_f + (u64)i;
            if (vec && i + 3 < out_f) {
                *reinterpret_cast<float4 *>(dst) = v;
            } else {
                if (i < out_f)
                    dst[0] = v.x;
                if (i + 1 < out_f)
                    dst[1] = v.y;
                if (i + 2 < out_f)
                    dst[2] = v.z;
                if (i + 3 < out_f)
                    dst[3] = v.w;
            }
        }
    } else {
#pragma unroll
    for (int ni = 0; ni < BN / 8; ++ni) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = row0 + wg * 64 + wq * 16 + g + ((e >> 1) << 3);
            const int j = col0 + ni * 8 + t4 * 2 + (e & 1);
            if (i < out_f && j < m)
                y[(u64)j * (u64)out_f + (u64)i] = sum[4 * ni + e];
        }
    }
    }
}

#define NV_VARIANT(name, cfg)                                                                                  \
    extern "C" __global__ void __launch_bounds__(APPLY(nv_threads, (cfg)), APPLY(NV_MINB_OF, (cfg)))         \
        name(MMQ_ARGS) {                                                                                       \
        nv_body<cfg>(w, s, q, d, y, m, in_f, out_f, nullptr, nullptr);                                       \
    }
/* The TMA variants' two extra arguments (plan[16] = 1). */
#define NV_TMA_VARIANT(name, cfg)                                                                              \
    extern "C" __global__ void __launch_bounds__(APPLY(nv_threads, (cfg)), APPLY(NV_MINB_OF, (cfg)))         \
        name(MMQ_ARGS, const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb) {              \
        nv_body<cfg>(w, s, q, d, y, m, in_f, out_f, &ta, &tb);                                               \
    }
#define NV_MINB_OF(bn, st, gr, minb, npw, tma, db, nwg, sw) (minb)

NV_VARIANT(fp8_mmq_v2_k15, X0)
NV_VARIANT(fp8_mmq_v2_k16, X1)
NV_VARIANT(fp8_mmq_v2_k17, X2)
NV_TMA_VARIANT(fp8_mmq_v2_k18, X3)
NV_TMA_VARIANT(fp8_mmq_v2_k19, X4)
NV_TMA_VARIANT(fp8_mmq_v2_k20, X5)
NV_TMA_VARIANT(fp8_mmq_v2_k21, X6)
NV_TMA_VARIANT(fp8_mmq_v2_k22, X7)
NV_TMA_VARIANT(fp8_mmq_v2_k23, X8)
NV_TMA_VARIANT(fp8_mmq_v2_k24, X9)
NV_TMA_VARIANT(fp8_mmq_v2_k25, X10)

#endif /* HAVE_WGMMA */
