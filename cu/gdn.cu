/*
 * cu/gdn.cu -- Gated DeltaNet decode (seed 003): the per-row trio
 * (conv1d fused decode, prep, scan s128) and their packed twins over T
 * rows, with conv-ring and state snapshots after every row but the last.
 *
 * Compiled at run time by NVRTC (device::cuda::gdn) with
 *     --gpu-architecture=sm_XY  (the device's compute capability)
 *     --fmad=false  --ftz=false --prec-div=true --prec-sqrt=true
 * and no include path: this file includes no header. A candidate .cu file
 * that exports the same ABI can replace it (KERNEL_ORACLE_GDN_CU=<path>).
 *
 * core/src/gdn/ (mod.rs, conv.rs, prep.rs, scan.rs, rows.rs, transcendental.rs,
 * sqrt.rs) is NORMATIVE: every output must equal the oracle's bit
 * for bit. Every floating-point operation here is spelled __fadd_rn,
 * __fsub_rn, __fmul_rn, __fdiv_rn or __fsqrt_rn (so the result does not
 * depend on --fmad either), in the contract's order; the transcendentals
 * below transcribe core/src/gdn/transcendental.rs step for step with its
 * constants as hex bits.
 *
 * =============================== ABI ======================================
 * Types: i32 = int, u64 = unsigned long long, f32 = float. Every pointer is
 * a device pointer aligned to at least 16 bytes, or 0 where stated. Layouts
 * are the oracle's (row-major, elements): C = conv_dim = 128 (2 num_k +
 * num_v), P = d_conv - 1, V = 128 num_v, N = num_v * 128 * 128.
 *   ring  [C][P]: ring[c*P + i], i = 0 oldest;  w [C][d_conv];
 *   state [num_v][128][128]: S[h][i][j] at h*16384 + i*128 + j.
 * Preconditions (the shim checks them): 1 <= num_k, num_v % num_k == 0,
 * 2 <= d_conv <= 4, 1 <= t <= 65535, C, t*C, t*V < 2^31.
 *
 * Pointer tables. The ring and the two state buffers are passed through a
 * device table of u64 device pointers, so that a captured graph can be
 * rebound by rewriting the table. The shim builds, per state,
 *     tab[6] = { ring, canonical, alt,  ring, alt, canonical }
 * and passes:  conv (row r)  tab + (r % 2 ? 3 : 0)   reads tab[0] (ring);
 *              scan (row r)  tab + (r % 2 ? 4 : 1)   reads tab[0] (src),
 *                                                    tab[1] (dst);
 *              conv packed   tab + 0                 reads tab[0];
 *              scan packed   tab + 1                 reads tab[0] (canonical),
 *                                                    tab[1] (alt).
 *
 * extern "C" __global__ void gdn_conv1d_decode(
 *     const f32 *x,      // [C] one row of the fused q|k|v projection
 *     const u64 *tab,    // tab[0]: f32* ring [C][P], read and shifted
 *     const f32 *w,      // [C][d_conv]
 *     f32 *out,          // [C] written: SiLU(conv)
 *     i32 conv_dim, i32 d_conv)
 * extern "C" __global__ void gdn_conv1d_decode_tloop(
 *     const f32 *x,      // [t][C]
 *     const u64 *tab,    // tab[0]: ring, holds the ring after row t-1
 *     const f32 *w,
 *     f32 *out,          // [t][C] written
 *     f32 *snap,         // [t-1][C][P]: the ring after rows 0..t-2; 0 if t = 1
 *     i32 conv_dim, i32 d_conv, i32 t)
 *   Launch: any 1-D grid (grid-stride over channels); the shim uses 256
 *   threads per CTA and ceil(C / 256) CTAs.
 *
 * extern "C" __global__ void gdn_prep_decode(      (one row: t = 1)
 * extern "C" __global__ void gdn_prep_decode_rows( (t rows)
 *     const f32 *conv_out,   // [t][C]
 *     const f32 *beta_raw,   // [t][num_v]
 *     const f32 *alpha,      // [t][num_v]
 *     const f32 *dt_bias,    // [num_v]
 *     const f32 *a_log,      // [num_v]
 *     f32 *q, f32 *k, f32 *v,  // [t][V] written
 *     f32 *beta, f32 *g,       // [t][num_v] written
 *     i32 num_k, i32 num_v, f32 eps, i32 t)
 *   (gdn_prep_decode has the same parameters and treats t as 1.)
 *   Launch: grid (num_v, t), 128 threads per CTA (exactly).
 *
 * extern "C" __global__ void gdn_scan_s128(
 *     const f32 *q, const f32 *k, const f32 *v,  // [V] one row of prep
 *     const f32 *g, const f32 *beta,             // [num_v]
 *     const u64 *tab,   // tab[0]: f32* src state, tab[1]: f32* dst state
 *                       // (may be equal: in place)
 *     f32 *o,           // [V] written
 *     i32 num_v, f32 scale)
 * extern "C" __global__ void gdn_scan_s128_tsnap(
 *     const f32 *q, const f32 *k, const f32 *v,  // [t][V]
 *     const f32 *g, const f32 *beta,             // [t][num_v]
 *     const u64 *tab,   // tab[0]: canonical (state before row 0),
 *                       // tab[1]: alt
 *     f32 *o,           // [t][V] written
 *     f32 *snap,        // [t-1][N]: the state after rows 0..t-2; 0 if t = 1
 *     i32 num_v, i32 t, f32 scale)
 *   The final state is written to alt for odd t and to canonical for even
 *   t (rule PARITY); the other buffer is not written (the contract leaves
 *   it unspecified). Columns stay in registers across rows.
 *   Launch: grid (num_v), 128 threads per CTA (exactly): thread j owns
 *   column (h, j).
 *
 * extern "C" __global__ void gdn_step_fused(...)     (required)
 * extern "C" __global__ void gdn_step_fused_c2(...)  (optional)
 *   The fused step of B sequences ("fused step, batched" below has the
 *   parameters and the layout). gdn_step_fused is compiled with
 *   __cluster_dims__(8, 1, 1) on sm_90 and later (no cluster before),
 *   gdn_step_fused_c2 with __cluster_dims__(2, 1, 1); the shim refuses an
 *   entry compiled for another cluster width, launches _c2 only on sm_90
 *   and later, and sizes a lone sequence's CTA by the entry's largest
 *   (its __launch_bounds__). A candidate may leave _c2 out.
 *
 * extern "C" __global__ void gdn_step_fused_split(...)  (optional)
 *   gdn_step_fused's parameters, for one sequence with num_v = 2 num_k:
 *   clusters of 8, grid (num_k * 8, 1), 256 threads per CTA (exactly);
 *   each CTA's 32 columns split over four warps, the q/k, v and gate
 *   preparation pipelined beside them ("the fused step, one sequence,
 *   columns split" below); at t = 1 each sum run by one warp from the
 *   quarters' decayed columns ("the split entry at t = 1" below). The
 *   shim launches it in place of gdn_step_fused where it applies; sm_90
 *   and later.
 *
 * extern "C" __global__ void gdn_step_fused_persistent(...)  (optional)
 *   The same parameters and layout, then i32 batch (B): persistent CTAs
 *   over the num_k * B items (q/k head, sequence), each chunk's inputs
 *   and state prefetched into shared memory ("gdn_step_fused_persistent"
 *   below). No cluster. Launch: grid (G, 1) for any G >= 1 (the shim: as
 *   many as stay resident, at most num_k * B), 128 threads per CTA
 *   (exactly), and 65536 bytes of dynamic shared memory. A candidate may
 *   leave it out.
 */

typedef int i32;
typedef unsigned long long u64;
typedef float f32;

#define GDN_D 128

/* ---------------- transcendentals (core/src/gdn/transcendental.rs) -------- */

#define GDN_LOG2E 0x3FB8AA3B
#define GDN_LN2_HI 0x3F317200
#define GDN_LN2_LO 0x35BFBE8E
#define GDN_SHIFTER 0x4B400000
#define GDN_EXP_HI 0x42B20000
#define GDN_EXP_LO 0xC2D00000
#define GDN_SILU_LO 0xC2F00000
#define GDN_SP_THRESHOLD 0x41A00000

__device__ __forceinline__ f32 gdn_bits(unsigned int b) { return __uint_as_float(b); }

/* 2^k for k in -126..=127, exact. */
__device__ __forceinline__ f32 gdn_pow2(i32 k) { return __int_as_float((k + 127) << 23); }

/* y * 2^n with at most one rounding. */
__device__ __forceinline__ f32 gdn_scale(f32 y, i32 n)
{
    if (n > 127) return __fmul_rn(__fmul_rn(y, gdn_pow2(127)), gdn_pow2(n - 127));
    if (n < -126) return __fmul_rn(__fmul_rn(y, gdn_pow2(n + 64)), gdn_pow2(-64));
    return __fmul_rn(y, gdn_pow2(n));
}

/* exp(x) = *y * 2^*n for finite x in [-120, 89]. */
__device__ __forceinline__ void gdn_exp_parts(f32 x, f32 *y, i32 *n)
{
    const f32 t = __fmul_rn(x, gdn_bits(GDN_LOG2E));
    const f32 nf = __fsub_rn(__fadd_rn(t, gdn_bits(GDN_SHIFTER)), gdn_bits(GDN_SHIFTER));
    *n = (i32)nf;
    const f32 r = __fsub_rn(__fsub_rn(x, __fmul_rn(nf, gdn_bits(GDN_LN2_HI))),
                            __fmul_rn(nf, gdn_bits(GDN_LN2_LO)));
    f32 p = gdn_bits(0x39500D01);                        /* c[5] = 1/5040 */
    p = __fadd_rn(__fmul_rn(p, r), gdn_bits(0x3AB60B61)); /* c[4] = 1/720 */
    p = __fadd_rn(__fmul_rn(p, r), gdn_bits(0x3C088889)); /* c[3] = 1/120 */
    p = __fadd_rn(__fmul_rn(p, r), gdn_bits(0x3D2AAAAB)); /* c[2] = 1/24 */
    p = __fadd_rn(__fmul_rn(p, r), gdn_bits(0x3E2AAAAB)); /* c[1] = 1/6 */
    p = __fadd_rn(__fmul_rn(p, r), gdn_bits(0x3F000000)); /* c[0] = 1/2 */
    const f32 r2 = __fmul_rn(r, r);
    const f32 u = __fmul_rn(r2, p);
    const f32 w = __fadd_rn(r, u);
    *y = __fadd_rn(1.0f, w);
}

__device__ __forceinline__ f32 gdn_exp(f32 x)
{
    if (x != x) return x;
    if (x > gdn_bits(GDN_EXP_HI)) return __int_as_float(0x7F800000);
    if (x < gdn_bits(GDN_EXP_LO)) return 0.0f;
    f32 y;
    i32 n;
    gdn_exp_parts(x, &y, &n);
    return gdn_scale(y, n);
}

/* log(1 + z) for z in [0, 1]. */
__device__ __forceinline__ f32 gdn_log1p_unit(f32 z)
{
    const f32 d = __fadd_rn(2.0f, z);
    const f32 s = __fdiv_rn(z, d);
    const f32 s2 = __fmul_rn(s, s);
    f32 p = gdn_bits(0x3D70F0F1);                         /* c[7] = 1/17 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3D888889)); /* c[6] = 1/15 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3D9D89D9)); /* c[5] = 1/13 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3DBA2E8C)); /* c[4] = 1/11 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3DE38E39)); /* c[3] = 1/9 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3E124925)); /* c[2] = 1/7 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3E4CCCCD)); /* c[1] = 1/5 */
    p = __fadd_rn(__fmul_rn(p, s2), gdn_bits(0x3EAAAAAB)); /* c[0] = 1/3 */
    const f32 a = __fadd_rn(s, s);
    const f32 u = __fmul_rn(s2, p);
    const f32 v = __fmul_rn(a, u);
    return __fadd_rn(a, v);
}

__device__ __forceinline__ f32 gdn_softplus(f32 x)
{
    if (x != x) return x;
    if (x > gdn_bits(GDN_SP_THRESHOLD)) return x;
    if (x > 0.0f) return __fadd_rn(x, gdn_log1p_unit(gdn_exp(-x)));
    return gdn_log1p_unit(gdn_exp(x));
}

__device__ __forceinline__ f32 gdn_sigmoid(f32 x)
{
    if (x != x) return x;
    if (x >= 0.0f) {
        const f32 e = gdn_exp(-x);
        return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
    }
    const f32 z = gdn_exp(x);
    return __fdiv_rn(z, __fadd_rn(1.0f, z));
}

__device__ __forceinline__ f32 gdn_silu(f32 x)
{
    if (x != x) return x;
    if (x >= 0.0f) {
        const f32 e = gdn_exp(-x);
        return __fdiv_rn(x, __fadd_rn(1.0f, e));
    }
    if (x < gdn_bits(GDN_SILU_LO)) return -0.0f;
    f32 y;
    i32 n;
    gdn_exp_parts(x, &y, &n);
    const f32 z = gdn_scale(y, n);
    const f32 d = __fadd_rn(1.0f, z);
    const f32 m = __fmul_rn(x, y);
    const f32 q = __fdiv_rn(m, d);
    return gdn_scale(q, n);
}

/* gdn_silu without a branch: the same value for every input (each case of
 * gdn_silu computed, the right one selected), so that a thread's several
 * channels interleave. exp's argument is -|x| clamped to [-120, 0] (the
 * clamped cases are selected away); y * 2^n is scaled in two steps, the
 * first exact for every n this range gives (-174..0), so the one rounding
 * is gdn_scale's; one division serves both signs (x / (1 + e) for x >= 0,
 * x y / (1 + z) then scaled by 2^n below 0). */
__device__ __forceinline__ f32 gdn_scale2(f32 y, i32 n)
{
    return __fmul_rn(__fmul_rn(y, gdn_pow2(n + 64)), gdn_pow2(-64));
}
__device__ __forceinline__ f32 gdn_silu_bf(f32 x)
{
    const bool pos = x >= 0.0f;
    const f32 a = pos ? -x : x;
    const f32 ac = fmaxf(a, gdn_bits(GDN_SILU_LO));
    f32 y;
    i32 n;
    gdn_exp_parts(ac, &y, &n);
    const f32 z = gdn_scale2(y, n);
    const f32 e = (pos && a < gdn_bits(GDN_EXP_LO)) ? 0.0f : z;
    const f32 d = __fadd_rn(1.0f, e);
    const f32 num = pos ? x : __fmul_rn(x, y);
    const f32 q = __fdiv_rn(num, d);
    const f32 neg = x < gdn_bits(GDN_SILU_LO) ? -0.0f : gdn_scale2(q, n);
    const f32 r = pos ? q : neg;
    return x != x ? x : r;
}

/* ------------------------------- conv ------------------------------------ */

/* One channel of one row (core/src/gdn/conv.rs conv1d_row, steps 1-3) on a
 * register copy of its ring hist[0..P-1]; BF: SiLU in its branch-free
 * form (gdn_silu_bf, the same values). */
template <bool BF = false>
__device__ __forceinline__ f32 gdn_conv_channel(f32 hist[3], f32 xc, const f32 *taps, i32 d_conv)
{
    const i32 p = d_conv - 1;
    f32 acc = 0.0f;
    for (i32 i = 0; i < d_conv; ++i) {
        const f32 win = i < p ? hist[i] : xc;
        acc = __fadd_rn(acc, __fmul_rn(taps[i], win));
    }
    const f32 out = BF ? gdn_silu_bf(acc) : gdn_silu(acc);
    for (i32 i = 0; i + 1 < p; ++i) hist[i] = hist[i + 1];
    hist[p - 1] = xc;
    return out;
}

extern "C" __global__ void gdn_conv1d_decode(
    const f32 *__restrict__ x, const u64 *__restrict__ tab, const f32 *__restrict__ w,
    f32 *__restrict__ out, i32 conv_dim, i32 d_conv)
{
    f32 *ring = (f32 *)tab[0];
    const i32 p = d_conv - 1;
    const i32 step = gridDim.x * blockDim.x;
    for (i32 c = blockIdx.x * blockDim.x + threadIdx.x; c < conv_dim; c += step) {
        f32 hist[3];
        for (i32 i = 0; i < p; ++i) hist[i] = ring[(u64)c * p + i];
        out[c] = gdn_conv_channel(hist, x[c], w + (u64)c * d_conv, d_conv);
        for (i32 i = 0; i < p; ++i) ring[(u64)c * p + i] = hist[i];
    }
}

extern "C" __global__ void gdn_conv1d_decode_tloop(
    const f32 *__restrict__ x, const u64 *__restrict__ tab, const f32 *__restrict__ w,
    f32 *__restrict__ out, f32 *__restrict__ snap, i32 conv_dim, i32 d_conv, i32 t)
{
    f32 *ring = (f32 *)tab[0];
    const i32 p = d_conv - 1;
    const u64 rl = (u64)conv_dim * p;
    const i32 step = gridDim.x * blockDim.x;
    for (i32 c = blockIdx.x * blockDim.x + threadIdx.x; c < conv_dim; c += step) {
        f32 hist[3];
        for (i32 i = 0; i < p; ++i) hist[i] = ring[(u64)c * p + i];
        const f32 *taps = w + (u64)c * d_conv;
        for (i32 r = 0; r < t; ++r) {
            const u64 row = (u64)r * conv_dim + c;
            out[row] = gdn_conv_channel(hist, x[row], taps, d_conv);
            if (r + 1 < t) {
                for (i32 i = 0; i < p; ++i) snap[(u64)r * rl + (u64)c * p + i] = hist[i];
            }
        }
        for (i32 i = 0; i < p; ++i) ring[(u64)c * p + i] = hist[i];
    }
}

/* ------------------------------- prep ------------------------------------ */

/* CTA (h, r), 128 threads: v head h of row r (core/src/gdn/prep.rs
 * prep_row). Thread 0 sums q's squares, thread 1 k's, each sequentially in
 * increasing j (l2_normalize step 1); thread 2 computes beta, thread 3 g. */
__device__ __forceinline__ void gdn_prep_head(
    const f32 *__restrict__ conv_out, const f32 *__restrict__ beta_raw,
    const f32 *__restrict__ alpha, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ q, f32 *__restrict__ k,
    f32 *__restrict__ v, f32 *__restrict__ beta, f32 *__restrict__ g,
    i32 num_k, i32 num_v, f32 eps, i32 h, i32 r)
{
    __shared__ f32 xs[2][GDN_D];
    __shared__ f32 inv[2];
    const i32 j = threadIdx.x;
    const i32 ratio = num_v / num_k;
    const i32 hk = h / ratio;
    const u64 key_dim = (u64)GDN_D * num_k;
    const u64 conv_dim = 2 * key_dim + (u64)GDN_D * num_v;
    const f32 *row = conv_out + (u64)r * conv_dim;
    const u64 o = (u64)r * GDN_D * num_v + (u64)h * GDN_D + j;
    xs[0][j] = row[(u64)hk * GDN_D + j];
    xs[1][j] = row[key_dim + (u64)hk * GDN_D + j];
    v[o] = row[2 * key_dim + (u64)h * GDN_D + j];
    __syncthreads();
    if (j < 2) {
        f32 ss = 0.0f;
        for (i32 i = 0; i < GDN_D; ++i) ss = __fadd_rn(ss, __fmul_rn(xs[j][i], xs[j][i]));
        const f32 d = __fadd_rn(ss, eps);
        const f32 s = __fsqrt_rn(d);
        inv[j] = __fdiv_rn(1.0f, s);
    } else if (j == 2) {
        const u64 b = (u64)r * num_v + h;
        beta[b] = gdn_sigmoid(beta_raw[b]);
    } else if (j == 3) {
        const u64 b = (u64)r * num_v + h;
        const f32 e = gdn_exp(a_log[h]);
        const f32 a = __fadd_rn(alpha[b], dt_bias[h]);
        const f32 sp = gdn_softplus(a);
        const f32 pr = __fmul_rn(e, sp);
        g[b] = -pr;
    }
    __syncthreads();
    q[o] = __fmul_rn(xs[0][j], inv[0]);
    k[o] = __fmul_rn(xs[1][j], inv[1]);
}

extern "C" __global__ void gdn_prep_decode(
    const f32 *__restrict__ conv_out, const f32 *__restrict__ beta_raw,
    const f32 *__restrict__ alpha, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ q, f32 *__restrict__ k,
    f32 *__restrict__ v, f32 *__restrict__ beta, f32 *__restrict__ g,
    i32 num_k, i32 num_v, f32 eps, i32 t)
{
    (void)t;
    gdn_prep_head(conv_out, beta_raw, alpha, dt_bias, a_log, q, k, v, beta, g, num_k, num_v,
                  eps, blockIdx.x, 0);
}

extern "C" __global__ void gdn_prep_decode_rows(
    const f32 *__restrict__ conv_out, const f32 *__restrict__ beta_raw,
    const f32 *__restrict__ alpha, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ q, f32 *__restrict__ k,
    f32 *__restrict__ v, f32 *__restrict__ beta, f32 *__restrict__ g,
    i32 num_k, i32 num_v, f32 eps, i32 t)
{
    if ((i32)blockIdx.y >= t) return;
    gdn_prep_head(conv_out, beta_raw, alpha, dt_bias, a_log, q, k, v, beta, g, num_k, num_v,
                  eps, blockIdx.x, blockIdx.y);
}

/* ------------------------------- scan ------------------------------------ */

/* One column (h, j) of one row (core/src/gdn/scan.rs column, steps 1-5) on
 * col[0..127] in registers; qs, ks the head's q and k in shared memory. */
__device__ __forceinline__ f32 gdn_scan_column(f32 col[GDN_D], const f32 *qs, const f32 *ks,
                                               f32 v_j, f32 beta, f32 d, f32 scale)
{
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fmul_rn(col[i], d);
    f32 kv = 0.0f;
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) kv = __fadd_rn(kv, __fmul_rn(col[i], ks[i]));
    const f32 delta = __fmul_rn(__fsub_rn(v_j, kv), beta);
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fadd_rn(col[i], __fmul_rn(ks[i], delta));
    f32 acc = 0.0f;
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) acc = __fadd_rn(acc, __fmul_rn(col[i], qs[i]));
    return __fmul_rn(acc, scale);
}

extern "C" __global__ void gdn_scan_s128(
    const f32 *__restrict__ q, const f32 *__restrict__ k, const f32 *__restrict__ v,
    const f32 *__restrict__ g, const f32 *__restrict__ beta, const u64 *__restrict__ tab,
    f32 *__restrict__ o, i32 num_v, f32 scale)
{
    __shared__ f32 qs[GDN_D], ks[GDN_D];
    const i32 h = blockIdx.x, j = threadIdx.x;
    if (h >= num_v) return;
    /* src and dst may alias (in place): no __restrict__ on them. */
    const f32 *src = (const f32 *)tab[0];
    f32 *dst = (f32 *)tab[1];
    const u64 hv = (u64)h * GDN_D;
    qs[j] = q[hv + j];
    ks[j] = k[hv + j];
    __syncthreads();
    const f32 d = gdn_exp(g[h]);
    const u64 base = (u64)h * GDN_D * GDN_D + j;
    f32 col[GDN_D];
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = src[base + (u64)i * GDN_D];
    o[hv + j] = gdn_scan_column(col, qs, ks, v[hv + j], beta[h], d, scale);
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) dst[base + (u64)i * GDN_D] = col[i];
}

extern "C" __global__ void gdn_scan_s128_tsnap(
    const f32 *__restrict__ q, const f32 *__restrict__ k, const f32 *__restrict__ v,
    const f32 *__restrict__ g, const f32 *__restrict__ beta, const u64 *__restrict__ tab,
    f32 *__restrict__ o, f32 *__restrict__ snap, i32 num_v, i32 t, f32 scale)
{
    __shared__ f32 qs[GDN_D], ks[GDN_D];
    const i32 h = blockIdx.x, j = threadIdx.x;
    if (h >= num_v) return;
    f32 *canonical = (f32 *)tab[0];
    f32 *alt = (f32 *)tab[1];
    const u64 n = (u64)num_v * GDN_D * GDN_D;
    const u64 base = (u64)h * GDN_D * GDN_D + j;
    f32 col[GDN_D];
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = canonical[base + (u64)i * GDN_D];
    for (i32 r = 0; r < t; ++r) {
        const u64 hv = ((u64)r * num_v + h) * GDN_D;
        __syncthreads(); /* the previous row's reads of qs, ks are done */
        qs[j] = q[hv + j];
        ks[j] = k[hv + j];
        __syncthreads();
        const f32 d = gdn_exp(g[(u64)r * num_v + h]);
        o[hv + j] = gdn_scan_column(col, qs, ks, v[hv + j], beta[(u64)r * num_v + h], d, scale);
        if (r + 1 < t) {
#pragma unroll
            for (i32 i = 0; i < GDN_D; ++i) snap[(u64)r * n + base + (u64)i * GDN_D] = col[i];
        }
    }
    /* Rule PARITY: the state after row t-1 is in alt for odd t. */
    f32 *fin = (t & 1) ? alt : canonical;
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) fin[base + (u64)i * GDN_D] = col[i];
}

/* ------------------------ fused step, batched ---------------------------- */

/* gdn_step_fused: a whole packed call (conv, prep and scan of t rows, with
 * the snapshots) in one launch, for B independent sequences. Every output
 * is computed with the same operations as the per-row trio, on the same
 * operands in the same order, so it equals t chained rows bit for bit.
 *
 * Layout: sequence b's buffers are the b-th of B equal blocks (elements;
 * core/src/gdn/batch.rs):
 *   x [B][t][C], beta_raw and alpha [B][t][num_v], conv_out [B][t][C],
 *   o [B][t][V], snap_conv [B][t-1][C][P], snap_state [B][t-1][N];
 *   tab[0] = ring pool [B][C][P], tab[1] = canonical pool [B][N],
 *   tab[2] = alt pool [B][N] (the shim passes its table + 0).
 *   The weights (w, dt_bias, a_log) are the layer's, shared. snap_conv and
 *   snap_state may be 0 when t = 1.
 *
 * Work split: the CS CTAs of one cluster (consecutive blockIdx.x) own
 * q/k head hk = blockIdx.x / CS of sequence b = blockIdx.y and the
 * ratio * 128 state columns of its v heads; CTA rank r = blockIdx.x %
 * CS owns columns [r * cpc, (r + 1) * cpc), cpc = ratio * 128 / CS, in
 * chunks of blockDim.x, one column per thread ("column
 * threads"): the column stays in registers across the t rows, and the
 * column's own v channel is convolved by the same thread. The 256 q/k
 * channels of hk are convolved, normalised and written to shared memory by
 * the "q/k threads": the threads past cpc when blockDim.x > cpc and cpc is
 * a multiple of 32 (so the two groups are whole warps and run side by
 * side), else every thread. Every CTA of the cluster convolves the q/k
 * channels from the ring as it was before the call (identical bits);
 * rank 0 writes their conv outputs and snapshots, and their final ring
 * only after a cluster barrier, once every CTA of the cluster has read
 * the old ring. Each v channel and state column has exactly one owner.
 *
 * The scan's sums are chains of 128 dependent additions in the contract's
 * order; nothing shortens a chain, so the kernel keeps every chain's
 * operands ready when it starts and runs independent work beside it:
 * - the q/k channels' ring, taps and next two input rows are copied to
 *   shared memory with asynchronous 16-byte copies (cp.async), a column's
 *   taps and next two v inputs and the next row's beta_raw and alpha are
 *   held in registers, exp(a_log) is computed once per head;
 * - the dot products read their shared operands 16 bytes at a time;
 * - the conv width is a template parameter (every tap loop unrolled, no
 *   local memory);
 * - rows are pipelined in three phases between __syncthreads: while the
 *   column threads scan row r (A: decay and k.S; B1: update and q.S), the
 *   q/k threads convolve row r + 1 (A) and take its L2 norms while other
 *   q/k threads (another warp when there is one) compute its heads' beta
 *   and exp(g) (B1); then (B2) the column threads write the snapshot and
 *   convolve their v channel of row r + 1 while the q/k threads write its
 *   normalised q and k.
 *
 * Two entries, the same body with another cluster size CS:
 *   gdn_step_fused     CS = GDN_CS: 8 on sm_90 and later (a compile-time
 *                      cluster of 8 CTAs: a lone sequence's columns spread
 *                      over 8 SMs per q/k head), 1 before (one CTA per q/k
 *                      head: nothing to wait for);
 *   gdn_step_fused_c2  CS = 2 (a cluster of 2 CTAs; sm_90 and later only:
 *                      below, nothing orders the ring's write after the
 *                      other CTA's read, and the shim does not launch it):
 *                      4x fewer CTAs convolving each q/k head, for many
 *                      sequences.
 * Launch: grid (num_k * CS, B), blockDim.x <= 256 (the shim: for B = 1
 * when cpc is a multiple of 32 below it, the entry's largest CTA (its
 * __launch_bounds__, 128 here; 256 ran slower on the H200: t = 1 11.4 us
 * against 7.0, t = 8 46.1 against 29.7); else min(cpc, 128)).
 * GDN_CS may be defined before this file is compiled for a target below
 * sm_90 (the host emulator runs the CTAs of a cluster one after another,
 * rank 0 last, which is what the cluster barrier guarantees).
 */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDN_CS 8
#define GDN_HW_CLUSTERS 1
#define GDN_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#else
#ifndef GDN_CS
#define GDN_CS 1
#endif
#define GDN_HW_CLUSTERS 0
#define GDN_CLUSTER_DIMS(n)
#endif

/* A CTA arrives once it has read the q/k ring (asynchronous copies it
 * waited for, or plain loads whose values it has already used, so the
 * reads are complete: no memory ordering is needed, and none is paid
 * for); rank 0 waits before writing the ring.
 * Without a hardware cluster (CS = 1, or a target below sm_90) the wait
 * is the CTA's own barrier; the host emulator (GDN_HOST_ASYNC) checks
 * each thread's pairing of the two at CS > 1 as well. */
template <i32 CS> __device__ __forceinline__ void gdn_cluster_arrive()
{
#if GDN_HW_CLUSTERS
    if (CS > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#elif defined(GDN_HOST_ASYNC)
    if (CS > 1) gdn_host_cluster_arrive();
#endif
}
template <i32 CS> __device__ __forceinline__ void gdn_cluster_wait()
{
#if GDN_HW_CLUSTERS
    if (CS > 1) {
        asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
        return;
    }
#elif defined(GDN_HOST_ASYNC)
    if (CS > 1) gdn_host_cluster_wait();
#endif
    __syncthreads();
}

/* 16 bytes from global src to shared dst (both 16-byte aligned), without
 * waiting (cp.async on sm_80 and later); gdn_cp_wait waits for every copy
 * this thread issued. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ void gdn_cp16(f32 *dst, const f32 *src)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}
__device__ __forceinline__ void gdn_cp_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#elif defined(GDN_HOST_ASYNC)
/* The host emulator's asynchronous copies (device/tests/gdn_host_emu.rs):
 * the destination poisoned when a copy is issued and filled at the wait,
 * so a read before the wait, or a copy into memory still being read,
 * shows. */
__device__ __forceinline__ void gdn_cp16(f32 *dst, const f32 *src) { gdn_host_cp(dst, src, 4); }
__device__ __forceinline__ void gdn_cp_wait() { gdn_host_wait(); }
#else
__device__ __forceinline__ void gdn_cp16(f32 *dst, const f32 *src)
{
    for (i32 i = 0; i < 4; ++i) dst[i] = src[i];
}
__device__ __forceinline__ void gdn_cp_wait() {}
#endif

/* n4 16-byte blocks from src (global) to dst (shared), by lanes lane,
 * lane + nl, ... */
__device__ __forceinline__ void gdn_stage(f32 *dst, const f32 *src, i32 n4, i32 lane, i32 nl)
{
    for (i32 i = lane; i < n4; i += nl) gdn_cp16(dst + 4 * i, src + 4 * i);
}

/* Elements 4 q .. 4 q + 3 of a 16-byte-aligned array. */
__device__ __forceinline__ float4 gdn_ld4(const f32 *a, i32 q)
{
#ifdef GDN_HOST_ASYNC
    gdn_host_aligned(a + 4 * q, 16);
#endif
    return reinterpret_cast<const float4 *>(a)[q];
}
__device__ __forceinline__ void gdn_st4(f32 *a, i32 q, float4 v)
{
#ifdef GDN_HOST_ASYNC
    gdn_host_aligned(a + 4 * q, 16);
#endif
    reinterpret_cast<float4 *>(a)[q] = v;
}
/* Four floats as one float4. */
__device__ __forceinline__ float4 gdn_f4(const f32 r[4])
{
    float4 v;
    v.x = r[0];
    v.y = r[1];
    v.z = r[2];
    v.w = r[3];
    return v;
}

/* acc + a[i] * b[i] for i = 0..127 in increasing order, one rounding each
 * (b 16-byte aligned in shared memory). */
__device__ __forceinline__ f32 gdn_dot_seq(f32 acc, const f32 a[GDN_D], const f32 *b)
{
#pragma unroll
    for (i32 q = 0; q < GDN_D / 4; ++q) {
        const float4 v = gdn_ld4(b, q);
        acc = __fadd_rn(acc, __fmul_rn(a[4 * q], v.x));
        acc = __fadd_rn(acc, __fmul_rn(a[4 * q + 1], v.y));
        acc = __fadd_rn(acc, __fmul_rn(a[4 * q + 2], v.z));
        acc = __fadd_rn(acc, __fmul_rn(a[4 * q + 3], v.w));
    }
    return acc;
}

/* 1 / sqrt(sum of x[i]^2 for i = 0..127 in increasing order + eps), as
 * gdn_prep_head (l2_normalize steps 1-2; x 16-byte aligned in shared
 * memory). U: the loop's unroll (a timing choice only). */
template <i32 U = 8> __device__ __forceinline__ f32 gdn_inv_norm(const f32 *x, f32 eps)
{
    f32 ss = 0.0f;
#pragma unroll U
    for (i32 q = 0; q < GDN_D / 4; ++q) {
        const float4 v = gdn_ld4(x, q);
        ss = __fadd_rn(ss, __fmul_rn(v.x, v.x));
        ss = __fadd_rn(ss, __fmul_rn(v.y, v.y));
        ss = __fadd_rn(ss, __fmul_rn(v.z, v.z));
        ss = __fadd_rn(ss, __fmul_rn(v.w, v.w));
    }
    const f32 dd = __fadd_rn(ss, eps);
    const f32 sq = __fsqrt_rn(dd);
    return __fdiv_rn(1.0f, sq);
}

/* gdn_scan_column steps 1-3: decay, kv, delta (returned). */
__device__ __forceinline__ f32 gdn_scan_decay_delta(f32 col[GDN_D], const f32 *ks, f32 v_j,
                                                    f32 beta, f32 d)
{
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fmul_rn(col[i], d);
    const f32 kv = gdn_dot_seq(0.0f, col, ks);
    return __fmul_rn(__fsub_rn(v_j, kv), beta);
}

/* gdn_scan_column steps 4-5: update, read. */
__device__ __forceinline__ f32 gdn_scan_update_read(f32 col[GDN_D], const f32 *qs, const f32 *ks,
                                                    f32 delta, f32 scale)
{
#pragma unroll
    for (i32 q = 0; q < GDN_D / 4; ++q) {
        const float4 v = gdn_ld4(ks, q);
        col[4 * q] = __fadd_rn(col[4 * q], __fmul_rn(v.x, delta));
        col[4 * q + 1] = __fadd_rn(col[4 * q + 1], __fmul_rn(v.y, delta));
        col[4 * q + 2] = __fadd_rn(col[4 * q + 2], __fmul_rn(v.z, delta));
        col[4 * q + 3] = __fadd_rn(col[4 * q + 3], __fmul_rn(v.w, delta));
    }
    const f32 acc = gdn_dot_seq(0.0f, col, qs);
    return __fmul_rn(acc, scale);
}

/* d = exp(g), g = -(e * softplus(alpha + dt_bias)) with e = exp(a_log)
 * computed by the caller, from e and the softplus (gdn_decay_of); with
 * it beta = sigmoid(beta_raw) (gdn_beta_decay), as gdn_prep_head and
 * gdn_scan_s128. */
__device__ __forceinline__ f32 gdn_decay_of(f32 e, f32 sp)
{
    const f32 pr = __fmul_rn(e, sp);
    const f32 g = -pr;
    return gdn_exp(g);
}
__device__ __forceinline__ void gdn_beta_decay(f32 beta_raw, f32 alpha, f32 dt_bias, f32 e,
                                               f32 *beta, f32 *d)
{
    *beta = gdn_sigmoid(beta_raw);
    *d = gdn_decay_of(e, gdn_softplus(__fadd_rn(alpha, dt_bias)));
}

/* q/k conv channel c (0..255) of q/k head hk: q channels first. */
__device__ __forceinline__ i32 gdn_qk_channel(i32 c, i32 hk, i32 key_dim)
{
    return c < GDN_D ? hk * GDN_D + c : key_dim + hk * GDN_D + (c - GDN_D);
}

/* The fused step's shared memory (16-byte aligned: copied and read 16
 * bytes at a time). */
struct GdnFusedSmem {
    f32 ring[2 * GDN_D * 3]; /* the q/k channels' ring: channel c's at c * P */
    f32 w[2 * GDN_D * 4];    /* their taps: channel c's at c * d_conv */
    f32 xin[2][2 * GDN_D];   /* their inputs, rows by parity */
    f32 xs[2][GDN_D];        /* their conv outputs (q, k), the latest row */
    f32 qk[2][2][GDN_D];     /* normalised q, k, rows by parity */
    f32 inv[4];              /* 1 / norm of xs[0], xs[1] */
    f32 hbd[2][4];           /* beta, exp(g) of the chunk's heads, one row */
};

/* Row r's conv of q/k channel c (0..255) from the staged ring, taps and
 * input (gdn_conv_channel); its output into sm.xs. When `writes`, also
 * its conv output and, unless r is the last row, its ring snapshot. */
template <i32 DC>
__device__ __forceinline__ void gdn_qk_conv(GdnFusedSmem &sm, i32 c, i32 r, i32 t, i32 hk,
                                            i32 key_dim, bool writes, f32 *cob, f32 *scb,
                                            u64 cd, u64 rl)
{
    constexpr i32 P = DC - 1;
    f32 hist[3];
#pragma unroll
    for (i32 i = 0; i < P; ++i) hist[i] = sm.ring[c * P + i];
    const f32 y = gdn_conv_channel(hist, sm.xin[r & 1][c], sm.w + c * DC, DC);
#pragma unroll
    for (i32 i = 0; i < P; ++i) sm.ring[c * P + i] = hist[i];
    sm.xs[c / GDN_D][c % GDN_D] = y;
    if (writes) {
        const u64 ch = gdn_qk_channel(c, hk, key_dim);
        cob[(u64)r * cd + ch] = y;
        if (r + 1 < t) {
#pragma unroll
            for (i32 i = 0; i < P; ++i) scb[(u64)r * rl + ch * P + i] = hist[i];
        }
    }
}

/* sm.qk[par] = sm.xs * sm.inv (l2_normalize step 3), 16-byte blocks
 * lane, lane + nl, ... */
__device__ __forceinline__ void gdn_qk_scale(GdnFusedSmem &sm, i32 par, i32 lane, i32 nl)
{
    for (i32 i = lane; i < 2 * GDN_D / 4; i += nl) {
        const i32 s = i / (GDN_D / 4), q = i % (GDN_D / 4);
        const f32 iv = sm.inv[s];
        float4 v = gdn_ld4(sm.xs[s], q);
        v.x = __fmul_rn(v.x, iv);
        v.y = __fmul_rn(v.y, iv);
        v.z = __fmul_rn(v.z, iv);
        v.w = __fmul_rn(v.w, iv);
        gdn_st4(sm.qk[par][s], q, v);
    }
}

/* Sequence b's blocks of the batched buffers (the layout above): its conv
 * ring, its two state buffers, and its rows of x, beta_raw and alpha. */
struct GdnSeq {
    f32 *ring, *canonical, *alt;
    const f32 *xb, *brb, *alb;
};
__device__ __forceinline__ GdnSeq gdn_seq(const u64 *tab, const f32 *x, const f32 *beta_raw,
                                          const f32 *alpha, u64 b, i32 t, u64 cd, u64 rl, u64 n,
                                          i32 num_v)
{
    GdnSeq s;
    s.ring = (f32 *)tab[0] + b * rl;
    s.canonical = (f32 *)tab[1] + b * n;
    s.alt = (f32 *)tab[2] + b * n;
    const f32 *xb = x + b * (u64)t * cd;
    s.xb = xb;
    s.brb = beta_raw + b * (u64)t * num_v;
    s.alb = alpha + b * (u64)t * num_v;
    return s;
}

/* The persistent entry's column inputs of one chunk (GDN_D columns: one
 * v head), staged with its q/k inputs. */
/* The persistent entry's dynamic shared memory (the host emulator gives a
 * static array instead). */
#ifndef GDN_DYNAMIC_SMEM
#define GDN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) f32 name[]
#endif
struct GdnChunkStage {
    f32 vring[GDN_D * 3]; /* the v channels' ring: column tid's at tid * P */
    f32 vw[GDN_D * 4];    /* their taps: at tid * d_conv */
    f32 vx[2][GDN_D];     /* their inputs of rows 0 and 1 */
    f32 hin[4];           /* the head's a_log, dt_bias, beta_raw and alpha (row 0) */
};

/* 4 bytes from global src to shared dst, without waiting. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ void gdn_cp4(f32 *dst, const f32 *src)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(src) : "memory");
}
#elif defined(GDN_HOST_ASYNC)
__device__ __forceinline__ void gdn_cp4(f32 *dst, const f32 *src) { gdn_host_cp(dst, src, 1); }
#else
__device__ __forceinline__ void gdn_cp4(f32 *dst, const f32 *src) { *dst = *src; }
#endif

/* The q/k channels' ring, taps and rows 0 and 1 of q/k head (qoff, koff)
 * into sm, by lanes lane, lane + nl, ... */
template <i32 DC>
__device__ __forceinline__ void gdn_stage_qk(GdnFusedSmem &sm, const f32 *ring, const f32 *w,
                                             const f32 *xb, u64 cd, u64 qoff, u64 koff, i32 t,
                                             i32 lane, i32 nl)
{
    constexpr i32 P = DC - 1;
    gdn_stage(sm.ring, ring + qoff * P, GDN_D * P / 4, lane, nl);
    gdn_stage(sm.ring + GDN_D * P, ring + koff * P, GDN_D * P / 4, lane, nl);
    gdn_stage(sm.w, w + qoff * DC, GDN_D * DC / 4, lane, nl);
    gdn_stage(sm.w + GDN_D * DC, w + koff * DC, GDN_D * DC / 4, lane, nl);
    gdn_stage(sm.xin[0], xb + qoff, GDN_D / 4, lane, nl);
    gdn_stage(sm.xin[0] + GDN_D, xb + koff, GDN_D / 4, lane, nl);
    if (t > 1) {
        gdn_stage(sm.xin[1], xb + cd + qoff, GDN_D / 4, lane, nl);
        gdn_stage(sm.xin[1] + GDN_D, xb + cd + koff, GDN_D / 4, lane, nl);
    }
}

/* What gdn_prefetch_chunk copies (bits). */
#define GDN_PF_INPUTS 1
#define GDN_PF_STATE 2
#define GDN_PF_NO_QK 4

/* The persistent entry's chunk (q/k head hk of sequence b, columns c0 ..
 * c0 + 127 of its group: one v head) copied by every thread, without
 * waiting: with GDN_PF_INPUTS into (sm, cs) the q/k stage, the v
 * channels' ring, taps and rows 0 and 1, the head's a_log, dt_bias and
 * row 0's beta_raw and alpha; with GDN_PF_STATE the head's state
 * (canonical) into sbuf. */
template <i32 DC>
__device__ __forceinline__ void gdn_prefetch_chunk(
    GdnFusedSmem &sm, GdnChunkStage &cs, f32 *sbuf, const f32 *x, const f32 *beta_raw,
    const f32 *alpha, const u64 *tab, const f32 *w, const f32 *dt_bias, const f32 *a_log,
    i32 num_k, i32 num_v, i32 t, i32 hk, u64 b, i32 c0, i32 what)
{
    constexpr i32 P = DC - 1;
    const i32 tid = threadIdx.x, bd = blockDim.x;
    const i32 ratio = num_v / num_k, key_dim = GDN_D * num_k;
    const u64 cd = 2 * (u64)key_dim + (u64)GDN_D * num_v;
    const u64 n = (u64)GDN_D * GDN_D * num_v;
    const GdnSeq sq = gdn_seq(tab, x, beta_raw, alpha, b, t, cd, cd * P, n, num_v);
    const f32 *ring = sq.ring;
    const f32 *xb = sq.xb;
    const i32 hfirst = hk * ratio + c0 / GDN_D;
    const u64 v0 = 2 * (u64)key_dim + (u64)hfirst * GDN_D; /* the chunk's first v channel */
    if (what & GDN_PF_STATE)
        gdn_stage(sbuf, sq.canonical + (u64)hfirst * GDN_D * GDN_D, bd * GDN_D / 4, tid, bd);
    if (!(what & GDN_PF_INPUTS)) return;
    if (!(what & GDN_PF_NO_QK))
        gdn_stage_qk<DC>(sm, ring, w, xb, cd, (u64)hk * GDN_D, (u64)key_dim + (u64)hk * GDN_D, t,
                         tid, bd);
    gdn_stage(cs.vring, ring + v0 * P, bd * P / 4, tid, bd);
    gdn_stage(cs.vw, w + v0 * DC, bd * DC / 4, tid, bd);
    gdn_stage(cs.vx[0], xb + v0, bd / 4, tid, bd);
    if (t > 1) gdn_stage(cs.vx[1], xb + cd + v0, bd / 4, tid, bd);
    if (tid == 0) {
        gdn_cp4(&cs.hin[0], a_log + hfirst);
        gdn_cp4(&cs.hin[1], dt_bias + hfirst);
        gdn_cp4(&cs.hin[2], sq.brb + hfirst);
        gdn_cp4(&cs.hin[3], sq.alb + hfirst);
    }
}

template <i32 DC, i32 CS, bool PST>
__device__ __forceinline__ void gdn_step_fused_body(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 t,
    f32 eps, f32 scale, GdnFusedSmem *smp, GdnChunkStage *csp, i32 &kc, i32 hk, i32 rank, u64 b,
    f32 *sbuf, long long items, long long nxt)
{
    constexpr i32 P = DC - 1;
    const i32 tid = threadIdx.x, bd = blockDim.x;
    const i32 ratio = num_v / num_k;
    const i32 cpc = ratio * GDN_D / CS;
    const i32 key_dim = GDN_D * num_k;
    const u64 cd = 2 * (u64)key_dim + (u64)GDN_D * num_v;
    const u64 vd = (u64)GDN_D * num_v;
    const u64 n = vd * GDN_D;
    const u64 rl = cd * P;
    const u64 snaps = (u64)t - 1;
    const GdnSeq sq = gdn_seq(tab, x, beta_raw, alpha, b, t, cd, rl, n, num_v);
    f32 *ring = sq.ring;
    f32 *canonical = sq.canonical;
    f32 *alt = sq.alt;
    const f32 *xb = sq.xb;
    const f32 *brb = sq.brb;
    const f32 *alb = sq.alb;
    f32 *cob = conv_out + b * (u64)t * cd;
    f32 *ob = o + b * (u64)t * vd;
    f32 *scb = snap_conv + b * snaps * rl;
    f32 *ssb = snap_state + b * snaps * n;
    f32 *const fin = (t & 1) ? alt : canonical; /* rule PARITY */
    /* The q/k threads: [h0, bd), nh of them; the norms by m = 0, 1, the
     * heads' beta and exp(g) by m = mb, mb + 1 (in another warp when the
     * q/k threads are two warps or more). */
    const bool split = bd > cpc && cpc % 32 == 0;
    const i32 h0 = split ? cpc : 0, nh = bd - h0;
    const bool qk_thread = tid >= h0;
    const i32 m = tid - h0;
    const i32 mb = nh >= 64 ? 32 : 2;
    const u64 qoff = (u64)hk * GDN_D, koff = (u64)key_dim + (u64)hk * GDN_D;

    GdnFusedSmem *ls = smp;
    const bool early_ring = PST && t == 1;
    const i32 kf = kc; /* the item's first chunk */
    for (i32 c0 = rank * cpc; c0 < (rank + 1) * cpc; c0 += bd, ++kc) {
        GdnFusedSmem &sm = smp[PST ? (kc & 1) : 0];
        /* The persistent entry's stage of this chunk (csp is 0 for the
         * clustered entries, which never read it). */
        const GdnChunkStage *cs = csp + (PST ? (kc & 1) : 0);
        const bool reuse = early_ring && c0 > rank * cpc;
        ls = &sm;
        const i32 gc = c0 + tid; /* column in the q/k head's group */
        const bool mine = gc < (rank + 1) * cpc && (!split || tid < cpc);
        const i32 h = hk * ratio + (mine ? gc / GDN_D : 0);
        const i32 j = gc % GDN_D;
        const i32 hfirst = hk * ratio + c0 / GDN_D; /* the chunk's first head */
        const i32 cend = c0 + (split ? cpc : bd); /* past the chunk's last column */
        const i32 clast = (cend < (rank + 1) * cpc ? cend : (rank + 1) * cpc) - 1;
        const i32 nheads = hk * ratio + clast / GDN_D - hfirst + 1; /* 1 or 2 */
        const bool bd_thread = qk_thread && m >= mb && m < mb + nheads;
        const i32 hh = hfirst + (bd_thread ? m - mb : 0);
        const u64 base = (u64)h * GDN_D * GDN_D + j;
        const u64 vch = 2 * (u64)key_dim + (u64)h * GDN_D + j;
        const bool writes_qk = rank == 0 && c0 == rank * cpc;
        /* One row on the persistent entry: a chunk after the item's first
         * takes the normalised q and k the item's first chunk wrote to
         * its stage (the same q/k head, computed from the same inputs with
         * the same operations, so the same bits; the copies into that
         * stage before the item ends leave q and k alone), and neither
         * convolves nor normalises them again. */
        const GdnFusedSmem &qs = reuse ? smp[kf & 1] : sm;
        f32 col[GDN_D];
        f32 vh[3], wv[4];
        f32 vj = 0.0f, xv1 = 0.0f, xv2 = 0.0f, delta = 0.0f;
        f32 e_h = 0.0f, dtb = 0.0f, br1 = 0.0f, al1 = 0.0f;
        /* Stage the q/k channels' ring, taps and rows 0 and 1; load the
         * columns, their v channels' ring, taps and rows 0 and 1, and the
         * heads' inputs of row 0. */
        if (!PST) {
            gdn_stage_qk<DC>(sm, ring, w, xb, cd, qoff, koff, t, tid, bd);
            if (mine) {
#pragma unroll
                for (i32 i = 0; i < GDN_D; ++i) col[i] = canonical[base + (u64)i * GDN_D];
#pragma unroll
                for (i32 i = 0; i < P; ++i) vh[i] = ring[vch * P + i];
#pragma unroll
                for (i32 i = 0; i < DC; ++i) wv[i] = w[vch * DC + i];
                xv1 = xb[vch];
                if (t > 1) xv2 = xb[cd + vch];
            }
            if (bd_thread) {
                e_h = a_log[hh];
                dtb = dt_bias[hh];
                br1 = brb[hh];
                al1 = alb[hh];
            }
        }
        gdn_cp_wait();
        __syncthreads();
        /* The next chunk of this CTA (persistent entry): the same item's,
         * else the next item's first; none past the last item. */
        const bool more = PST && (c0 + bd < cpc || nxt < items);
        const i32 nhk = c0 + bd < cpc ? hk : (i32)(nxt % num_k);
        const u64 nb = c0 + bd < cpc ? b : (u64)(nxt / num_k);
        const i32 nc0 = c0 + bd < cpc ? c0 + bd : 0;
        if (PST) {
            /* The chunk's inputs and state, prefetched (gdn_prefetch_chunk;
             * one v head, every column a thread's: tid = gc - c0). The
             * other stage's last reader, the chunk before this one, is
             * past a barrier. */
            if (mine) {
#pragma unroll
                for (i32 i = 0; i < P; ++i) vh[i] = cs->vring[tid * P + i];
#pragma unroll
                for (i32 i = 0; i < DC; ++i) wv[i] = cs->vw[tid * DC + i];
                xv1 = cs->vx[0][tid];
                if (t > 1) xv2 = cs->vx[1][tid];
            }
            if (bd_thread) {
                e_h = cs->hin[0];
                dtb = cs->hin[1];
                br1 = cs->hin[2];
                al1 = cs->hin[3];
            }
            /* One row: the next chunk's inputs now (row 0's phase B2, the
             * wait for row 2's q/k inputs, does not exist). */
            if (more && t == 1)
                gdn_prefetch_chunk<DC>(smp[(kc + 1) & 1], csp[(kc + 1) & 1], sbuf, x, beta_raw,
                                       alpha, tab, w, dt_bias, a_log, num_k, num_v, t, nhk, nb,
                                       nc0, GDN_PF_INPUTS | (nc0 > 0 ? GDN_PF_NO_QK : 0));
            if (mine) {
                const f32 *sc = sbuf + (base - (u64)hfirst * GDN_D * GDN_D);
#pragma unroll
                for (i32 i = 0; i < GDN_D; ++i) col[i] = sc[i * GDN_D];
            }
        }
        /* The last chunk has read the q/k ring. */
        if (c0 + bd >= (rank + 1) * cpc) gdn_cluster_arrive<CS>();
        /* Row 0's q/k conv, by every thread. */
        if (!reuse)
            for (i32 c = tid; c < 2 * GDN_D; c += bd)
                gdn_qk_conv<DC>(sm, c, 0, t, hk, key_dim, writes_qk, cob, scb, cd, rl);
        __syncthreads();
        /* One row: every thread has read sbuf, the next chunk's state into
         * it. */
        if (more && t == 1)
            gdn_prefetch_chunk<DC>(smp[(kc + 1) & 1], csp[(kc + 1) & 1], sbuf, x, beta_raw, alpha,
                                   tab, w, dt_bias, a_log, num_k, num_v, t, nhk, nb, nc0,
                                   GDN_PF_STATE);
        /* One row on the persistent entry: the q/k ring, convolved, back
         * now. Nothing reads it again in this call (the item's later
         * chunks copy no q/k inputs: GDN_PF_NO_QK), and with an even
         * ratio the next item's copy lands in this stage before the item
         * ends, so the item's end could not write it from here. */
        if (early_ring && !reuse && qk_thread) {
            for (i32 i = m; i < GDN_D * P / 4; i += nh) {
                gdn_st4(ring + qoff * P, i, gdn_ld4(sm.ring, i));
                gdn_st4(ring + koff * P, i, gdn_ld4(sm.ring + GDN_D * P, i));
            }
        }
        /* Row 0's norms | its heads' beta and exp(g) | its v channels. */
        if (!reuse && qk_thread && m < 2) sm.inv[m] = gdn_inv_norm(sm.xs[m], eps);
        if (bd_thread) {
            e_h = gdn_exp(e_h);
            gdn_beta_decay(br1, al1, dtb, e_h, &sm.hbd[m - mb][0], &sm.hbd[m - mb][1]);
            if (t > 1) {
                br1 = brb[num_v + hh];
                al1 = alb[num_v + hh];
            }
        }
        if (mine) {
            vj = gdn_conv_channel(vh, xv1, wv, DC);
            cob[vch] = vj;
            if (t > 1) {
#pragma unroll
                for (i32 i = 0; i < P; ++i) scb[vch * P + i] = vh[i];
            }
            xv1 = xv2;
        }
        __syncthreads();
        if (!reuse) {
            gdn_qk_scale(sm, 0, tid, bd);
            __syncthreads();
        }
        for (i32 r = 0; r < t; ++r) {
            const i32 par = r & 1;
            const bool next = r + 1 < t;
            /* Phase A: scan row r, steps 1-3 | row r + 1's q/k conv; row
             * r + 2's q/k inputs into the buffer row r used. */
            /* Several rows: the next chunk's inputs and state, in the last
             * row (the last wait, row t - 2's phase B2, is past; sbuf and
             * the other stage were read rows ago). */
            if (more && t > 1 && r + 1 == t)
                gdn_prefetch_chunk<DC>(smp[(kc + 1) & 1], csp[(kc + 1) & 1], sbuf, x, beta_raw,
                                       alpha, tab, w, dt_bias, a_log, num_k, num_v, t, nhk, nb,
                                       nc0, GDN_PF_INPUTS | GDN_PF_STATE);
            if (qk_thread && r + 2 < t) {
                const f32 *x2 = xb + (u64)(r + 2) * cd;
                gdn_stage(sm.xin[par], x2 + qoff, GDN_D / 4, m, nh);
                gdn_stage(sm.xin[par] + GDN_D, x2 + koff, GDN_D / 4, m, nh);
            }
            if (mine) {
                if (r + 2 < t) xv2 = xb[(u64)(r + 2) * cd + vch];
                const i32 lh = h - hfirst;
                delta = gdn_scan_decay_delta(col, qs.qk[par][1], vj, sm.hbd[lh][0], sm.hbd[lh][1]);
            }
            if (qk_thread && next) {
                for (i32 c = m; c < 2 * GDN_D; c += nh)
                    gdn_qk_conv<DC>(sm, c, r + 1, t, hk, key_dim, writes_qk, cob, scb, cd, rl);
            }
            __syncthreads();
            /* Phase B1: scan row r, steps 4-5 | row r + 1's norms, its
             * heads' beta and exp(g). */
            if (mine)
                ob[(u64)r * vd + (u64)h * GDN_D + j] =
                    gdn_scan_update_read(col, qs.qk[par][0], qs.qk[par][1], delta, scale);
            if (next) {
                if (qk_thread && m < 2) sm.inv[m] = gdn_inv_norm(sm.xs[m], eps);
                if (bd_thread) {
                    gdn_beta_decay(br1, al1, dtb, e_h, &sm.hbd[m - mb][0], &sm.hbd[m - mb][1]);
                    if (r + 2 < t) {
                        br1 = brb[(u64)(r + 2) * num_v + hh];
                        al1 = alb[(u64)(r + 2) * num_v + hh];
                    }
                }
            }
            __syncthreads();
            if (next) {
                /* Phase B2: row r's state snapshot, row r + 1's v channel |
                 * row r + 1's normalised q and k. */
                if (mine) {
#pragma unroll
                    for (i32 i = 0; i < GDN_D; ++i) ssb[(u64)r * n + base + (u64)i * GDN_D] = col[i];
                    vj = gdn_conv_channel(vh, xv1, wv, DC);
                    cob[(u64)(r + 1) * cd + vch] = vj;
                    if (r + 2 < t) {
#pragma unroll
                        for (i32 i = 0; i < P; ++i) scb[(u64)(r + 1) * rl + vch * P + i] = vh[i];
                    }
                    xv1 = xv2;
                }
                if (qk_thread) gdn_qk_scale(sm, par ^ 1, m, nh);
                gdn_cp_wait();
                __syncthreads();
            }
        }
        if (mine) {
#pragma unroll
            for (i32 i = 0; i < GDN_D; ++i) fin[base + (u64)i * GDN_D] = col[i];
            /* Only this thread reads its v channel's ring. */
#pragma unroll
            for (i32 i = 0; i < P; ++i) ring[vch * P + i] = vh[i];
        }
    }
    /* Every CTA of the cluster has read the q/k ring: rank 0 may write it. */
    if (early_ring) return;
    gdn_cluster_wait<CS>();
    if (rank == 0 && qk_thread) {
        for (i32 i = m; i < GDN_D * P / 4; i += nh) {
            gdn_st4(ring + qoff * P, i, gdn_ld4(ls->ring, i));
            gdn_st4(ring + koff * P, i, gdn_ld4(ls->ring + GDN_D * P, i));
        }
    }
}

/* ---------------- the fused step, one sequence, columns split ----------- */

/* Named barriers (PTX ISA, "Parallel synchronization and communication
 * instructions: bar, barrier"): bar.sync waits until `n` threads (a
 * multiple of 32) have arrived at barrier `id`; bar.arrive arrives without
 * waiting. Either orders the arriving threads' earlier memory accesses
 * before the waiting threads' later ones. mbarriers (same chapter,
 * "mbarrier"): an arrival releases, a wait on a phase's parity acquires;
 * the barrier counts `count` arrivals a phase. cp.async groups ("Data
 * movement: cp.async.commit_group / wait_group"): gdn_cp_wait_prior waits
 * for every group this thread committed but the newest `N`. The host
 * emulator defines its own (it waits for every copy). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void gdn_bar_sync(i32 id, i32 n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
typedef u64 gdn_mbar_t;
__device__ __forceinline__ unsigned gdn_smem(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void gdn_mbar_init(gdn_mbar_t *b, i32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(gdn_smem(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void gdn_mbar_arrive(gdn_mbar_t *b)
{
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(gdn_smem(b))
                 : "memory");
}
__device__ __forceinline__ void gdn_mbar_wait(gdn_mbar_t *b, i32 parity)
{
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(gdn_smem(b)), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void gdn_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <i32 N> __device__ __forceinline__ void gdn_cp_wait_prior()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#elif defined(__CUDA_ARCH__)
/* The split form runs in clusters of 8 (sm_90 and later): declared only. */
typedef u64 gdn_mbar_t;
__device__ void gdn_bar_sync(i32 id, i32 n);
__device__ void gdn_mbar_init(gdn_mbar_t *b, i32 count);
__device__ void gdn_mbar_arrive(gdn_mbar_t *b);
__device__ void gdn_mbar_wait(gdn_mbar_t *b, i32 parity);
__device__ void gdn_cp_commit();
template <i32 N> __device__ void gdn_cp_wait_prior();
#endif

/* The split form's named barrier: the q/k warps among themselves (128
 * threads). */
#define GDN_BAR_QKI 1

/* The split form's conv channels: the q/k head's 256, then the CTA's 32 v
 * channels. */
#define GDN_SPLIT_CH (2 * GDN_D + 32)

struct GdnSplitSmem {
    gdn_mbar_t qkbar[2];   /* a row's q, k, v, beta, exp(g) ready (the 128 q/k threads), by parity */
    gdn_mbar_t donebar[2]; /* a row's q, k, v, beta, exp(g) read (the 128 quarter threads), by parity */
    gdn_mbar_t kvbar[3];   /* quarter w's kv partial sum written (its 32 threads), one phase a row */
    gdn_mbar_t obar[3];    /* quarter w's o partial sum written (its 32 threads), one phase a row */
    gdn_mbar_t dlbar;      /* delta written, every partial read (the 128 quarter threads), a phase a row */
    /* Read 16 bytes at a time: 16-byte aligned whatever precedes them. */
    __align__(16) f32 sx[4][GDN_SPLIT_CH]; /* the conv channels' inputs, rows mod 4 */
    __align__(16) f32 xs[3][GDN_SPLIT_CH]; /* their conv outputs (q, k, the CTA's v), rows mod 3 */
    __align__(16) f32 qk[2][2][GDN_D];     /* normalised q, k, rows by parity */
    f32 vq[2][32];           /* the CTA's v channels, rows by parity */
    f32 hbd[2][2];           /* beta, exp(g) of the CTA's head, rows by parity */
    f32 inv[2][2];           /* 1 / norm of q and k, rows by parity */
    f32 part[2][3][32];      /* the kv and o sums' partials by quarter */
    f32 dl[2][32];           /* delta by column, rows by parity */
};

/* gdn_step_fused for one sequence in CTAs of 256 threads with 32 columns
 * each (clusters of 8, num_v = 2 num_k). Each column's 128 state elements
 * are split over four warps ("quarters": warp w holds i = 32 w .. 32 w +
 * 31 of its lane's column in registers), so that a warp runs a quarter of
 * the scan's code: a row's kv sum runs i = 0..127 in increasing order
 * through the quarters (each continues the partial sum of the one before,
 * handed over in shared memory at a named barrier), quarter 3 forms delta
 * and hands it to the others, and the o sum runs through the quarters the
 * same way; quarter w starts the next row's kv sum once it has handed on
 * this row's o sum, so the two sums of consecutive rows overlap.
 *
 * Warps 4-7 prepare row r + 1's normalised q and k, v, beta and exp(g)
 * while the quarters run row r (buffers by row parity, mbarriers between
 * the groups): threads m = 0..95 convolve channels m, m + 96 and m + 192
 * of the q/k head's 256 and the CTA's 32 v channels (their rings and taps
 * in registers, their inputs copied three rows ahead by cp.async, SiLU in
 * its branch-free form so that the three interleave), warp 7's lanes 0
 * and 1 take the norms of the row before while the others convolve, and
 * m = 95 the head's beta and exp(g). Every
 * output's operations and their order are gdn_step_fused_body's and the
 * contract's (core/src/gdn/conv.rs, prep.rs, scan.rs scan_row). */
template <i32 DC>
__device__ __forceinline__ void gdn_step_fused_split(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 t,
    f32 eps, f32 scale, i32 hk, i32 rank, u64 b, GdnSplitSmem &sm)
{
    constexpr i32 P = DC - 1;
    const i32 tid = threadIdx.x;
    const i32 ratio = num_v / num_k;
    const i32 key_dim = GDN_D * num_k;
    const u64 cd = 2 * (u64)key_dim + (u64)GDN_D * num_v;
    const u64 vd = (u64)GDN_D * num_v;
    const u64 n = vd * GDN_D;
    const u64 rl = cd * P;
    const u64 snaps = (u64)t - 1;
    const GdnSeq sq = gdn_seq(tab, x, beta_raw, alpha, b, t, cd, rl, n, num_v);
    const f32 *xb = sq.xb;
    f32 *cob = conv_out + b * (u64)t * cd;
    f32 *ob = o + b * (u64)t * vd;
    f32 *scb = snap_conv + b * snaps * rl;
    f32 *ssb = snap_state + b * snaps * n;
    const i32 c0 = rank * 32; /* the CTA's first column in its q/k head's group */
    const i32 h = hk * ratio + c0 / GDN_D;
    const u64 qoff = (u64)hk * GDN_D, koff = (u64)key_dim + (u64)hk * GDN_D;
    if (tid == 0) {
        for (i32 i = 0; i < 2; ++i) {
            gdn_mbar_init(&sm.qkbar[i], 128);
            gdn_mbar_init(&sm.donebar[i], 128);
        }
        for (i32 i = 0; i < 3; ++i) {
            gdn_mbar_init(&sm.kvbar[i], 32);
            gdn_mbar_init(&sm.obar[i], 32);
        }
        gdn_mbar_init(&sm.dlbar, 128);
    }
    __syncthreads();
    if (tid < 128) {
        /* A quarter: warp qw, column j, elements i = 32 qw + e. */
        const i32 qw = tid >> 5, l = tid & 31;
        const i32 j = c0 % GDN_D + l;
        const u64 base = (u64)h * GDN_D * GDN_D + j + (u64)(32 * qw) * GDN_D;
        f32 *const fin = (t & 1) ? sq.alt : sq.canonical; /* rule PARITY */
        f32 c[32];
#pragma unroll
        for (i32 e = 0; e < 32; ++e) c[e] = sq.canonical[base + (u64)e * GDN_D];
        gdn_cluster_arrive<8>();
        for (i32 r = 0; r < t; ++r) {
            const i32 p = r & 1;
            /* Decay and the kv sum, continued from the quarter before. */
            gdn_mbar_wait(&sm.qkbar[p], (r >> 1) & 1);
            if (qw > 0) gdn_mbar_wait(&sm.kvbar[qw - 1], r & 1);
            const f32 d = sm.hbd[p][1];
            const f32 *ks = sm.qk[p][1] + 32 * qw;
            const f32 *qs = sm.qk[p][0] + 32 * qw;
            f32 kv = qw == 0 ? 0.0f : sm.part[0][qw - 1][l];
#pragma unroll
            for (i32 q = 0; q < 8; ++q) {
                const float4 k4 = gdn_ld4(ks, q);
                c[4 * q] = __fmul_rn(c[4 * q], d);
                kv = __fadd_rn(kv, __fmul_rn(c[4 * q], k4.x));
                c[4 * q + 1] = __fmul_rn(c[4 * q + 1], d);
                kv = __fadd_rn(kv, __fmul_rn(c[4 * q + 1], k4.y));
                c[4 * q + 2] = __fmul_rn(c[4 * q + 2], d);
                kv = __fadd_rn(kv, __fmul_rn(c[4 * q + 2], k4.z));
                c[4 * q + 3] = __fmul_rn(c[4 * q + 3], d);
                kv = __fadd_rn(kv, __fmul_rn(c[4 * q + 3], k4.w));
            }
            if (qw < 3) {
                sm.part[0][qw][l] = kv;
                gdn_mbar_arrive(&sm.kvbar[qw]);
            } else {
                sm.dl[p][l] = __fmul_rn(__fsub_rn(sm.vq[p][l], kv), sm.hbd[p][0]);
            }
            /* Every quarter has read the partial before its own and quarter
             * 3 has written delta. */
            gdn_mbar_arrive(&sm.dlbar);
            gdn_mbar_wait(&sm.dlbar, r & 1);
            const f32 delta = sm.dl[p][l];
            /* The update, the o products; then the o sum, continued from
             * the quarter before. */
            f32 pr[32];
#pragma unroll
            for (i32 q = 0; q < 8; ++q) {
                const float4 k4 = gdn_ld4(ks, q), q4 = gdn_ld4(qs, q);
                c[4 * q] = __fadd_rn(c[4 * q], __fmul_rn(k4.x, delta));
                c[4 * q + 1] = __fadd_rn(c[4 * q + 1], __fmul_rn(k4.y, delta));
                c[4 * q + 2] = __fadd_rn(c[4 * q + 2], __fmul_rn(k4.z, delta));
                c[4 * q + 3] = __fadd_rn(c[4 * q + 3], __fmul_rn(k4.w, delta));
                pr[4 * q] = __fmul_rn(c[4 * q], q4.x);
                pr[4 * q + 1] = __fmul_rn(c[4 * q + 1], q4.y);
                pr[4 * q + 2] = __fmul_rn(c[4 * q + 2], q4.z);
                pr[4 * q + 3] = __fmul_rn(c[4 * q + 3], q4.w);
            }
            /* This quarter has read row r's q, k, beta and exp(g): the q/k
             * warps may refill the parity for row r + 2. */
            if (r + 2 < t) gdn_mbar_arrive(&sm.donebar[p]);
            if (qw > 0) gdn_mbar_wait(&sm.obar[qw - 1], r & 1);
            f32 acc = qw == 0 ? 0.0f : sm.part[1][qw - 1][l];
#pragma unroll
            for (i32 e = 0; e < 32; ++e) acc = __fadd_rn(acc, pr[e]);
            if (qw < 3) {
                sm.part[1][qw][l] = acc;
                gdn_mbar_arrive(&sm.obar[qw]);
            } else {
                ob[(u64)r * vd + (u64)h * GDN_D + j] = __fmul_rn(acc, scale);
            }
            if (r + 1 < t) {
#pragma unroll
                for (i32 e = 0; e < 32; ++e) ssb[(u64)r * n + base + (u64)e * GDN_D] = c[e];
            }
        }
#pragma unroll
        for (i32 e = 0; e < 32; ++e) fin[base + (u64)e * GDN_D] = c[e];
        gdn_cluster_wait<8>();
        return;
    }
    /* The q/k warps. */
    const i32 m = tid - 128;
    const bool conv_thread = m < 96;
    /* Channel k of this thread: g = m + 96 k (q channels 0..127, k
     * channels, then the CTA's v channels). */
    const u64 v0 = 2 * (u64)key_dim + (u64)h * GDN_D + c0 % GDN_D;
    f32 hist[3][3], taps[3][4];
    u64 ch[3];
#pragma unroll
    for (i32 k = 0; k < 3; ++k) {
        const i32 g = m + 96 * k;
        ch[k] = g < GDN_D ? qoff + g : (g < 2 * GDN_D ? koff + (g - GDN_D) : v0 + (g - 2 * GDN_D));
#pragma unroll
        for (i32 i = 0; i < 3; ++i) hist[k][i] = 0.0f;
#pragma unroll
        for (i32 i = 0; i < 4; ++i) taps[k][i] = 0.0f;
        if (conv_thread) {
#pragma unroll
            for (i32 i = 0; i < P; ++i) hist[k][i] = sq.ring[ch[k] * P + i];
#pragma unroll
            for (i32 i = 0; i < DC; ++i) taps[k][i] = w[ch[k] * DC + i];
        }
    }
    /* Row u's inputs of this thread's channels into sx[u % 4]. */
    auto stage = [&](i32 u) {
        if (conv_thread && u < t) {
#pragma unroll
            for (i32 k = 0; k < 3; ++k) {
                const i32 g = m + 96 * k;
                gdn_cp4(&sm.sx[u & 3][g], xb + (u64)u * cd + ch[k]);
            }
        }
        gdn_cp_commit();
    };
    /* Row u's conv of this thread's channels into xs[u % 3], and their
     * conv outputs and ring snapshots (the q/k channels' by rank 0). */
    const bool writes = rank == 0;
    auto conv = [&](i32 u) {
#pragma unroll
        for (i32 k = 0; k < 3; ++k) {
            const i32 g = m + 96 * k;
            {
                const f32 y = gdn_conv_channel<true>(hist[k], sm.sx[u & 3][g], taps[k], DC);
                sm.xs[u % 3][g] = y;
                if (writes || g >= 2 * GDN_D) {
                    cob[(u64)u * cd + ch[k]] = y;
                    if (u + 1 < t) {
#pragma unroll
                        for (i32 i = 0; i < P; ++i) scb[(u64)u * rl + ch[k] * P + i] = hist[k][i];
                    }
                }
            }
        }
    };
    f32 e_h = 0.0f, dtb = 0.0f, br1 = 0.0f, al1 = 0.0f;
    if (m == 95) {
        e_h = gdn_exp(a_log[h]);
        dtb = dt_bias[h];
        br1 = sq.brb[h];
        al1 = sq.alb[h];
    }
    stage(0);
    stage(1);
    stage(2);
    if (conv_thread) {
        gdn_cp_wait_prior<2>();
        conv(0);
    }
    /* Every CTA of the cluster has read the q/k ring once row 0's conv has
     * used it. */
    gdn_cluster_arrive<8>();
    gdn_bar_sync(GDN_BAR_QKI, 128);
    for (i32 u = 0; u < t; ++u) {
        const i32 p = u & 1;
        /* Row u + 1's conv and row u's beta and exp(g) | row u's norms. */
        f32 beta = 0.0f, dd = 0.0f;
        if (conv_thread) {
            if (u + 1 < t) {
                gdn_cp_wait_prior<1>();
                conv(u + 1);
                stage(u + 3);
            }
            if (m == 95) {
                gdn_beta_decay(br1, al1, dtb, e_h, &beta, &dd);
                if (u + 1 < t) {
                    br1 = sq.brb[(u64)(u + 1) * num_v + h];
                    al1 = sq.alb[(u64)(u + 1) * num_v + h];
                }
            }
        } else if (m < 98) {
            sm.inv[p][m - 96] = gdn_inv_norm(sm.xs[u % 3] + (m - 96) * GDN_D, eps);
        }
        gdn_bar_sync(GDN_BAR_QKI, 128);
        /* Row u - 2, the last reader of this parity, is done. */
        if (u >= 2) gdn_mbar_wait(&sm.donebar[p], ((u - 2) >> 1) & 1);
        if (m == 95) {
            sm.hbd[p][0] = beta;
            sm.hbd[p][1] = dd;
        }
        if (m < 2 * GDN_D / 4) {
            const i32 s = m / (GDN_D / 4), q = m % (GDN_D / 4);
            const f32 iv = sm.inv[p][s];
            float4 v = gdn_ld4(sm.xs[u % 3] + s * GDN_D, q);
            v.x = __fmul_rn(v.x, iv);
            v.y = __fmul_rn(v.y, iv);
            v.z = __fmul_rn(v.z, iv);
            v.w = __fmul_rn(v.w, iv);
            gdn_st4(sm.qk[p][s], q, v);
        } else if (m < 96) {
            sm.vq[p][m - 64] = sm.xs[u % 3][2 * GDN_D + (m - 64)];
        }
        gdn_mbar_arrive(&sm.qkbar[p]);
    }
    gdn_cp_wait_prior<0>();
    /* Every CTA of the cluster has read the q/k ring: rank 0 writes it. */
    gdn_cluster_wait<8>();
    if (conv_thread) {
#pragma unroll
        for (i32 k = 0; k < 3; ++k) {
            if (writes || m + 96 * k >= 2 * GDN_D) {
#pragma unroll
                for (i32 i = 0; i < P; ++i) sq.ring[ch[k] * P + i] = hist[k][i];
            }
        }
    }
}

/* ---------------- the split entry at t = 1 (one row) ----------------------
 *
 * With one row there is nothing to pipeline, and the launch's time is its
 * one chain: the loads (the table, then the ring), row 0's conv, the k
 * norm's 128 additions, the kv sum's 128, delta, the o sum's 128. This
 * form keeps the split entry's geometry (clusters of 8, 256 threads, 32
 * columns a CTA, the cluster barrier only for rank 0's ring write) and
 * takes everything else off that chain:
 *   - every load (ring, taps, input, state, the gate's inputs) issued at
 *     the first instructions, straight into registers (no cp.async, no
 *     staging);
 *   - the gate's two halves that need no conv output, exp(a_log) (warp
 *     6) and softplus(alpha + dt_bias) (the spare warp), while the ring
 *     is still in flight, before their conv; after the __syncthreads,
 *     exp(g) from them (warp 6) and beta (the spare warp; needed only for
 *     delta);
 *   - row 0's conv by all 256 threads (one q/k channel each; the chain
 *     warp also convolves the CTA's 32 v channels after the barrier, so
 *     v_j stays in the register that forms delta), then one
 *     __syncthreads;
 *   - the norms (one warp: q in lanes 0-15, k in lanes 16-31, fully
 *     unrolled) while the quarters decay their 32 elements of column j;
 *     each single value (exp(g), beta, a norm) by whole warps, every lane
 *     computing the same, so that no lane waits on a diverged one;
 *   - every term of both sums formed by the quarters (the 128 threads that
 *     hold the state, 32 elements each) into shared memory: the kv terms
 *     c_i' (k_i (1/|k|)) once 1/|k| is known, the o terms
 *     (c_i' + k_i delta) (q_i (1/|q|)) once delta is; so that the chain
 *     warp (lane l = column l) runs only the two chains of 128 additions,
 *     with delta between them, each term one read (132-float rows: no
 *     bank conflict). The quarters store the final state (the same
 *     c_i' + k_i delta) after the o terms.
 * Every value's operations and order are the split form's (and so the
 * contract's): k_i = xs_k[i] * inv_k, kv = (..((0 + c0' k0) + c1' k1)..),
 * delta = (v - kv) * beta, c_i'' = c_i' + k_i delta, o = (sum of c_i'' q_i
 * from 0, increasing i) * scale.
 *
 * Timing (H100, graph replay of one launch, the seed's layer): 5.1-5.3 us,
 * of which 1.8-1.9 us is the launch. Measured with clock64 stamps: the
 * sums run near the FADD latency (about 550 cycles each, 4.3 a term)
 * once their terms are in shared memory; a k-sum formed on the fly ran at
 * 8, the o sum at 12-15. The fully unrolled norm beat 2-, 4- and 8-fold
 * unrolls; rolled sums ran 1.6-3x slower. */
/* A warp converged (before the .aligned cluster barrier); nothing on the
 * host emulator, whose threads have no warps. */
__device__ __forceinline__ void gdn_t1_syncwarp()
{
#if defined(__CUDA_ARCH__)
    __syncwarp();
#endif
}

/* The t = 1 form's hand-offs, one mbarrier each: the producing threads
 * arrive, the consuming ones wait. (Named barriers, bar.arrive by the
 * producers and bar.sync by the consumers, ran no faster, and
 * compute-sanitizer's racecheck does not follow their ordering.) */
enum GdnT1Hand {
    GDN_T1_DECAY,  /* exp(g): warp 6 -> the quarters */
    GDN_T1_NORM,   /* 1/|q|, 1/|k|: the norms' warp -> the quarters */
    GDN_T1_TERMS,  /* the kv terms: the quarters -> the chain warp */
    GDN_T1_BETA,   /* beta: the spare warp -> the chain warp */
    GDN_T1_DELTA,  /* delta: the chain warp -> the quarters */
    GDN_T1_OTERMS, /* the o terms: the quarters -> the chain warp */
    GDN_T1_HANDS
};
struct GdnT1Smem {
    gdn_mbar_t bar[GDN_T1_HANDS];       /* one a hand-off */
    __align__(16) f32 xs[2 * GDN_D];     /* row 0's q, k conv outputs */
    __align__(16) f32 tm[32][GDN_D + 4]; /* column l's terms by i: kv's, then o's */
    f32 inv[2];                          /* 1/|q|, 1/|k| */
    f32 gate[4];                         /* beta, exp(g), exp(a_log), softplus(alpha + dt_bias) */
    f32 dl[32];                          /* delta by column */
};

/* The t = 1 form's chain warp, 4 or 5 by the CTA's parity, and with it
 * the norms' warp (7 or 4) and the spare warp (5 or 7). Two CTAs of 8
 * warps on one SM put warp w on scheduler w mod 4 in both, so with one
 * parity their two chain warps, each issuing about one instruction a
 * cycle, would share a scheduler; the ranks of a cluster alternate. By
 * blockIdx alone (not the warp's slot), so every launch runs both
 * assignments and the gate sees both. */
__device__ __forceinline__ i32 gdn_t1_chain_warp()
{
    return 4 + (i32)(blockIdx.x & 1u);
}

/* 128 terms of one column, summed from +0 in increasing i: the contract's
 * order (gdn_dot_seq's), one read of 16 bytes a 4 terms. */
__device__ __forceinline__ f32 gdn_t1_chain(const f32 *tm)
{
    f32 acc = 0.0f;
#pragma unroll
    for (i32 q = 0; q < GDN_D / 4; ++q) {
        const float4 v = gdn_ld4(tm, q);
        acc = __fadd_rn(acc, v.x);
        acc = __fadd_rn(acc, v.y);
        acc = __fadd_rn(acc, v.z);
        acc = __fadd_rn(acc, v.w);
    }
    return acc;
}

template <i32 DC>
__device__ __forceinline__ void gdn_step_fused_split_t1(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o, i32 num_k,
    i32 num_v, f32 eps, f32 scale, i32 hk, i32 rank, GdnT1Smem &sm)
{
    constexpr i32 P = DC - 1;
    const i32 tid = threadIdx.x;
    const i32 ratio = num_v / num_k;
    const i32 key_dim = GDN_D * num_k;
    const u64 cd = 2 * (u64)key_dim + (u64)GDN_D * num_v;
    const u64 vd = (u64)GDN_D * num_v;
    const u64 n = vd * GDN_D;
    const GdnSeq sq = gdn_seq(tab, x, beta_raw, alpha, 0, 1, cd, cd * P, n, num_v);
    const i32 c0 = rank * 32; /* the CTA's first column in its q/k head's group */
    const i32 h = hk * ratio + c0 / GDN_D;
    const u64 qoff = (u64)hk * GDN_D, koff = (u64)key_dim + (u64)hk * GDN_D;
    const i32 qw = tid >> 5, l = tid & 31;
    const bool quarter = tid < 128;
    const i32 cw = gdn_t1_chain_warp();
    const bool chain = qw == cw;
    const i32 nw = cw == 4 ? 7 : 4; /* the norms' warp */
    const i32 sw = cw == 4 ? 5 : 7; /* the spare warp: beta */
    const i32 j = c0 % GDN_D + l;  /* a quarter's or the chain warp's column */
    const u64 base = (u64)h * GDN_D * GDN_D + j + (u64)(32 * (qw & 3)) * GDN_D;

    /* Every load first. */
    const u64 ch = tid < GDN_D ? qoff + tid : koff + (tid - GDN_D); /* q/k channel tid */
    const u64 vch = 2 * (u64)key_dim + (u64)h * GDN_D + j;           /* the chain lane's v channel */
    f32 hist[3], taps[4], hv[3], tv[4];
    f32 xc, xv = 0.0f;
#pragma unroll
    for (i32 i = 0; i < P; ++i) hist[i] = sq.ring[ch * P + i];
#pragma unroll
    for (i32 i = 0; i < DC; ++i) taps[i] = w[ch * DC + i];
    xc = sq.xb[ch];
#pragma unroll
    for (i32 i = 0; i < 3; ++i) hv[i] = 0.0f;
#pragma unroll
    for (i32 i = 0; i < 4; ++i) tv[i] = 0.0f;
    if (chain) {
#pragma unroll
        for (i32 i = 0; i < P; ++i) hv[i] = sq.ring[vch * P + i];
#pragma unroll
        for (i32 i = 0; i < DC; ++i) tv[i] = w[vch * DC + i];
        xv = sq.xb[vch];
    }
    f32 c[32];
    if (quarter) {
#pragma unroll
        for (i32 e = 0; e < 32; ++e) c[e] = sq.canonical[base + (u64)e * GDN_D];
    }
    if (tid == 0) {
        gdn_mbar_init(&sm.bar[GDN_T1_DECAY], 1);
        gdn_mbar_init(&sm.bar[GDN_T1_NORM], 2);
        gdn_mbar_init(&sm.bar[GDN_T1_TERMS], 128);
        gdn_mbar_init(&sm.bar[GDN_T1_BETA], 1);
        gdn_mbar_init(&sm.bar[GDN_T1_DELTA], 32);
        gdn_mbar_init(&sm.bar[GDN_T1_OTERMS], 128);
    }
    /* The gate's two halves that need no conv output, while the ring is
     * in flight (their inputs are not behind the table): exp(a_log) by
     * warp 6, the softplus by the spare warp; published by the
     * __syncthreads below. */
    if (qw == 6) {
        const f32 e = gdn_exp(a_log[h]);
        if (l == 0) sm.gate[2] = e;
    } else if (qw == sw) {
        const f32 sp = gdn_softplus(__fadd_rn(sq.alb[h], dt_bias[h]));
        if (l == 0) sm.gate[3] = sp;
    }

    /* Row 0's conv: q/k channel tid by every thread (its output into xs,
     * and into conv_out by rank 0). */
    {
        const f32 y = gdn_conv_channel<true>(hist, xc, taps, DC);
        sm.xs[tid] = y;
        if (rank == 0) conv_out[ch] = y;
    }
    /* This CTA has read the q/k ring (the values stored above came from
     * it, so the loads are complete). The cluster barrier is .aligned:
     * each warp converged first. */
    gdn_t1_syncwarp();
    gdn_cluster_arrive<8>();
    __syncthreads();

    /* The single values (the decay, beta, the two norms) each by a whole
     * warp, every lane computing the same (no lane waits on a diverged
     * one); one lane stores and arrives. */
    if (qw == 6) {
        const f32 d = gdn_decay_of(sm.gate[2], sm.gate[3]);
        if (l == 0) {
            sm.gate[1] = d;
            gdn_mbar_arrive(&sm.bar[GDN_T1_DECAY]);
        }
    } else if (qw == sw) {
        const f32 beta = gdn_sigmoid(sq.brb[h]);
        if (l == 0) {
            sm.gate[0] = beta;
            gdn_mbar_arrive(&sm.bar[GDN_T1_BETA]);
        }
    } else if (qw == nw) {
        /* The norms of q (lanes 0-15) and k (lanes 16-31), fully unrolled. */
        const i32 qk = l >> 4;
        const f32 inv = gdn_inv_norm<GDN_D / 4>(sm.xs + qk * GDN_D, eps);
        if ((l & 15) == 0) {
            sm.inv[qk] = inv;
            gdn_mbar_arrive(&sm.bar[GDN_T1_NORM]);
        }
    } else if (quarter) {
        /* Column j, elements i = 32 qw + e: decayed, the kv terms once
         * 1/|k| is known, the o terms once delta is, then the final state
         * (rule PARITY: t = 1 is odd, so alt). */
        gdn_mbar_wait(&sm.bar[GDN_T1_DECAY], 0);
        const f32 d = sm.gate[1];
#pragma unroll
        for (i32 e = 0; e < 32; ++e) c[e] = __fmul_rn(c[e], d);
        f32 kn[32];
        gdn_mbar_wait(&sm.bar[GDN_T1_NORM], 0);
        {
            const f32 ik = sm.inv[1];
            const f32 *ks = sm.xs + GDN_D + 32 * qw;
#pragma unroll
            for (i32 q = 0; q < 8; ++q) {
                const float4 k4 = gdn_ld4(ks, q);
                const f32 kr[4] = {k4.x, k4.y, k4.z, k4.w};
                f32 tr[4];
#pragma unroll
                for (i32 r = 0; r < 4; ++r) {
                    const i32 e = 4 * q + r;
                    kn[e] = __fmul_rn(kr[r], ik);
                    tr[r] = __fmul_rn(c[e], kn[e]);
                }
                gdn_st4(sm.tm[l] + 32 * qw, q, gdn_f4(tr));
            }
        }
        gdn_mbar_arrive(&sm.bar[GDN_T1_TERMS]);
        /* The chain warp has read every kv term before it posts delta. */
        gdn_mbar_wait(&sm.bar[GDN_T1_DELTA], 0);
        {
            const f32 delta = sm.dl[l], iq = sm.inv[0];
            const f32 *qs = sm.xs + 32 * qw;
#pragma unroll
            for (i32 q = 0; q < 8; ++q) {
                const float4 q4 = gdn_ld4(qs, q);
                const f32 qr[4] = {q4.x, q4.y, q4.z, q4.w};
                f32 tr[4];
#pragma unroll
                for (i32 r = 0; r < 4; ++r) {
                    const i32 e = 4 * q + r;
                    const f32 cu = __fadd_rn(c[e], __fmul_rn(kn[e], delta)); /* c_i'' */
                    tr[r] = __fmul_rn(cu, __fmul_rn(qr[r], iq));
                    c[e] = cu;
                }
                gdn_st4(sm.tm[l] + 32 * qw, q, gdn_f4(tr));
            }
        }
        gdn_mbar_arrive(&sm.bar[GDN_T1_OTERMS]);
#pragma unroll
        for (i32 e = 0; e < 32; ++e) sq.alt[base + (u64)e * GDN_D] = c[e];
    } else if (chain) {
        /* Row 0's conv of column j's v channel (conv_out by every CTA: its
         * own columns), while the norms run. */
        const f32 yv = gdn_conv_channel<true>(hv, xv, tv, DC);
        conv_out[vch] = yv;
        /* kv of column j, then delta. */
        gdn_mbar_wait(&sm.bar[GDN_T1_TERMS], 0);
        const f32 kv = gdn_t1_chain(sm.tm[l]);
        gdn_mbar_wait(&sm.bar[GDN_T1_BETA], 0);
        sm.dl[l] = __fmul_rn(__fsub_rn(yv, kv), sm.gate[0]);
        gdn_mbar_arrive(&sm.bar[GDN_T1_DELTA]);
        /* o of column j. */
        gdn_mbar_wait(&sm.bar[GDN_T1_OTERMS], 0);
        o[(u64)h * GDN_D + j] = __fmul_rn(gdn_t1_chain(sm.tm[l]), scale);
    }

    /* Every CTA of the cluster has read the q/k ring: rank 0 writes it;
     * each CTA writes its own v channels' ring. */
    gdn_t1_syncwarp();
    gdn_cluster_wait<8>();
    if (rank == 0) {
#pragma unroll
        for (i32 i = 0; i < P; ++i) sq.ring[ch * P + i] = hist[i];
    }
    if (chain) {
#pragma unroll
        for (i32 i = 0; i < P; ++i) sq.ring[vch * P + i] = hv[i];
    }
}

/* One CTA of a clustered entry: q/k head and rank from blockIdx.x, the
 * sequence from blockIdx.y, the conv width dispatched to the template. */
template <i32 CS>
__device__ __forceinline__ void gdn_step_fused_cta(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 d_conv,
    i32 t, f32 eps, f32 scale)
{
    __shared__ __align__(16) GdnFusedSmem sm;
    const i32 hk = blockIdx.x / CS, rank = blockIdx.x % CS;
    i32 kc = 0;
    if (d_conv == 4)
        gdn_step_fused_body<4, CS, false>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o,
                                          snap_conv, snap_state, num_k, num_v, t, eps, scale, &sm,
                                          0, kc, hk, rank, blockIdx.y, 0, 0, 0);
    else if (d_conv == 3)
        gdn_step_fused_body<3, CS, false>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o,
                                          snap_conv, snap_state, num_k, num_v, t, eps, scale, &sm,
                                          0, kc, hk, rank, blockIdx.y, 0, 0, 0);
    else
        gdn_step_fused_body<2, CS, false>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o,
                                          snap_conv, snap_state, num_k, num_v, t, eps, scale, &sm,
                                          0, kc, hk, rank, blockIdx.y, 0, 0, 0);
}

#define GDN_FUSED_ENTRY(name, cs)                                                                  \
    extern "C" __global__ void GDN_CLUSTER_DIMS(cs) __launch_bounds__(128) name(                   \
        const f32 *__restrict__ x, const f32 *__restrict__ beta_raw,                               \
        const f32 *__restrict__ alpha, const u64 *__restrict__ tab, const f32 *__restrict__ w,     \
        const f32 *__restrict__ dt_bias, const f32 *__restrict__ a_log, f32 *__restrict__ conv_out,\
        f32 *__restrict__ o, f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state,            \
        i32 num_k, i32 num_v, i32 d_conv, i32 t, f32 eps, f32 scale)                               \
    {                                                                                              \
        gdn_step_fused_cta<cs>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv, \
                               snap_state, num_k, num_v, d_conv, t, eps, scale);                   \
    }

GDN_FUSED_ENTRY(gdn_step_fused, GDN_CS)
GDN_FUSED_ENTRY(gdn_step_fused_c2, 2)

/* gdn_step_fused_split: gdn_step_fused's parameters; clusters of 8 (sm_90
 * and later), 256 threads, one sequence (grid (num_k * 8, 1)), num_v = 2
 * num_k; two CTAs fit an SM (__launch_bounds__(256, 2)), so that the 16
 * clusters of Qwen3-Next's layer run in one wave. The shim launches it in
 * place of gdn_step_fused where those hold; anything else traps. */
#if GDN_CS == 8
extern "C" __global__ void GDN_CLUSTER_DIMS(8) __launch_bounds__(256, 2) gdn_step_fused_split(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 d_conv,
    i32 t, f32 eps, f32 scale)
{
    if (blockDim.x != 256 || gridDim.y != 1 || num_v != 2 * num_k || d_conv < 2 || d_conv > 4)
        __trap();
    const i32 hk = blockIdx.x / 8, rank = blockIdx.x % 8;
    /* One shared block for every form (the split form's and the t = 1
     * form's, each conv width): only one of them runs. */
    __shared__ __align__(16) union {
        GdnSplitSmem s;
        GdnT1Smem t1;
    } smu;
    if (t == 1) {
        if (d_conv == 4)
            gdn_step_fused_split_t1<4>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, num_k,
                                       num_v, eps, scale, hk, rank, smu.t1);
        else if (d_conv == 3)
            gdn_step_fused_split_t1<3>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, num_k,
                                       num_v, eps, scale, hk, rank, smu.t1);
        else
            gdn_step_fused_split_t1<2>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, num_k,
                                       num_v, eps, scale, hk, rank, smu.t1);
        return;
    }
    if (d_conv == 4)
        gdn_step_fused_split<4>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, hk, rank, 0, smu.s);
    else if (d_conv == 3)
        gdn_step_fused_split<3>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, hk, rank, 0, smu.s);
    else
        gdn_step_fused_split<2>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, hk, rank, 0, smu.s);
}
#endif


/* gdn_step_fused_persistent: the fused body on persistent CTAs, for many
 * sequences. Item i = (q/k head hk = i % num_k, sequence b = i / num_k),
 * for i = blockIdx.x, blockIdx.x + gridDim.x, ... (any grid: no CTA waits
 * for another). No cluster (CS = 1): the CTA of 128 threads convolves
 * its q/k head and owns all ratio * 128 columns, in chunks of one v head,
 * and writes the q/k ring after its last chunk (with several rows; with
 * one, after its first). gdn_prefetch_chunk copies
 * the next chunk's q/k and v inputs into the other of two stages and its
 * state into sbuf (dynamic shared memory, 128 * 128 floats) while this
 * chunk runs, so a chunk starts without a trip to memory: with one row,
 * the inputs when the chunk starts and the state once every thread has
 * read this chunk's state from sbuf (after row 0's q/k conv); with
 * several rows, both in the last row (phase B2 waits for every copy this
 * thread issued, so an earlier prefetch would be waited for there). The
 * column registers are filled from sbuf. With one row, an item's chunks
 * after its first take the normalised q and k from the stage its first
 * chunk wrote them to (no second conv, norm or scale of the same q/k head;
 * on the H200 at B = 64 worth 0-1%, within the run-to-run spread: the
 * chunk's time is its state traffic), and the first chunk writes the
 * convolved q/k ring back at once (with an even ratio the stage it sits
 * in takes the next item's copy before the item ends). The
 * order of operations on every output is the body's. */
template <i32 DC>
__device__ __forceinline__ void gdn_step_fused_items(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 t,
    f32 eps, f32 scale, i32 batch, GdnFusedSmem *smp, GdnChunkStage *csp, f32 *sbuf)
{
    const long long items = (long long)num_k * batch;
    i32 kc = 0;
    long long i = blockIdx.x;
    if (i < items) {
        gdn_prefetch_chunk<DC>(smp[0], csp[0], sbuf, x, beta_raw, alpha, tab, w, dt_bias, a_log,
                               num_k, num_v, t, (i32)(i % num_k), (u64)(i / num_k), 0,
                               GDN_PF_INPUTS | GDN_PF_STATE);
    }
    for (; i < items; i += gridDim.x)
        gdn_step_fused_body<DC, 1, true>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o,
                                         snap_conv, snap_state, num_k, num_v, t, eps, scale, smp,
                                         csp, kc, (i32)(i % num_k), 0, (u64)(i / num_k), sbuf,
                                         items, i + gridDim.x);
}

extern "C" __global__ void __launch_bounds__(128) gdn_step_fused_persistent(
    const f32 *__restrict__ x, const f32 *__restrict__ beta_raw, const f32 *__restrict__ alpha,
    const u64 *__restrict__ tab, const f32 *__restrict__ w, const f32 *__restrict__ dt_bias,
    const f32 *__restrict__ a_log, f32 *__restrict__ conv_out, f32 *__restrict__ o,
    f32 *__restrict__ snap_conv, f32 *__restrict__ snap_state, i32 num_k, i32 num_v, i32 d_conv,
    i32 t, f32 eps, f32 scale, i32 batch)
{
    __shared__ __align__(16) GdnFusedSmem smp[2];
    __shared__ __align__(16) GdnChunkStage csp[2];
    GDN_DYNAMIC_SMEM(sbuf);
    if (d_conv == 4)
        gdn_step_fused_items<4>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, batch, smp, csp, sbuf);
    else if (d_conv == 3)
        gdn_step_fused_items<3>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, batch, smp, csp, sbuf);
    else
        gdn_step_fused_items<2>(x, beta_raw, alpha, tab, w, dt_bias, a_log, conv_out, o, snap_conv,
                                snap_state, num_k, num_v, t, eps, scale, batch, smp, csp, sbuf);
}
