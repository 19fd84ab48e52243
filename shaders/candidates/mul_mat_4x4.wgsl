// mul_mat_4x4: register-tiled GEMM over ggml blocks (seed 004), the
// seed's design and the production shader until 2026-12-02 (now
// shaders/mul_mat_reg_tile.wgsl, which keeps this file's contract, ABI,
// loaders and order of operations): a 4 x 4 tile per thread, one staging
// buffer. Kept as a candidate: its loaders are the reference expressions
// the production shader's decoders transcribe.
//
//   dst[n * stride_dst + m] = sum over k of src0[m, k] * src1[n * stride_src1 + k]
//
// The contract is `oracle::ggml::mul_mat` (core/src/ggml/mul_mat.rs); each
// loader below follows the dequantization of its format in core/src/ggml/
// (ggml-quants.c `dequantize_row_*`), step for step.
//
// ABI (what a candidate kernel given by SHADER= or
// KERNEL_ORACLE_MUL_MAT_WGSL must keep):
//   binding 0  src0    array<u32>, read: M rows of K elements in the dtype
//                      SRC0_DTYPE, rows back to back (row m at byte
//                      m * K / block_elems * block_bytes), the buffer padded
//                      with zero bytes to a multiple of 4, then 64 words of
//                      0xFFFFFFFF (a NaN band: bound reads by params, not
//                      arrayLength).
//   binding 1  src1    array<f32>, read: N rows, row n at element n * stride_src1,
//                      then 64 words of 0xFFFFFFFF.
//   binding 2  dst     array<f32>, read_write: dst[n * stride_dst + m].
//   binding 3  params  MulMatParams (storage, read).
//   entry point `main`, dispatched as
//   (ceil(M / (WG_M * TILE_M)), ceil(N / (WG_N * TILE_N)), 1).
//   Optional entry point `dequant` (the dequantize-then-GEMM path,
//   device::wgpu::QuantPath::Dequant; quantized SRC0_DTYPE only):
//   @workgroup_size(64, 1, 1), bindings 0, 2 and 3 only, dst bound to an
//   M x K f32 scratch buffer (at least 4 elements), poisoned, then 64 words
//   of 0xFFA5A5A5 checked after the run (bound writes by params, not
//   arrayLength; `main` then meets that band past its src0, not
//   0xFFFFFFFF). Invocation i = 64 (wg.y * nwg.x + wg.x) +
//   local index writes dst[4 i + j] = element (row, k + j) of src0 for
//   j = 0..3, row = i / (K / 4), k = 4 (i % (K / 4)), with i < M K / 4
//   (every quantized K is a multiple of 32); the shim dispatches
//   (min(G, max), ceil(G / min(G, max)), 1) workgroups for
//   G = ceil(M K / 256), then `main` with SRC0_DTYPE = 0 (f32) and the
//   scratch as src0. Each element is the value `main` would decode, so the
//   two paths give the same bits.
//   Pipeline-overridable constants: SRC0_DTYPE, WG_M, WG_N, TILE_K (their
//   defaults are the declared geometry, from which device::wgpu's
//   default_geometry picks the one the bench runs when none is given).
//   Declared for the shim (device::wgpu::ShaderDecl reads them from this
//   text): const TILE_M, TILE_N (outputs per invocation, which size the
//   dispatch), and optionally const STAGES (staging buffers, 1 when
//   absent, which size the workgroup-memory check); `enable f16;` and
//   `enable subgroups;` request those device features.
//
// Geometry: a WG_M x WG_N workgroup computes a (4 WG_M) x (4 WG_N) block of
// dst, each thread a 4 x 4 register tile (TILE_M = TILE_N = 4, unrolled by
// hand below, hence not overridable). k advances TILE_K at a time: all
// threads stage a (4 WG_M) x TILE_K tile of dequantized src0 and a
// (4 WG_N) x TILE_K tile of src1 in workgroup memory, synchronise, and
// accumulate from there.
//
// Arithmetic order: each output is one f32 accumulator that starts at +0.0
// and adds w[m, k] * x[n, k] for k = 0, 1, .., K - 1 in order, exactly the
// contract's order (rule MM-ORDER). WGSL allows the compiler to fuse the
// multiply-add, so the gate's EXACT arm makes every order and fusion give
// the same bits and its RANDOM arm bounds the rest.

struct MulMatParams {
    m: u32,
    k: u32,
    n: u32,
    stride_src1: u32,
    stride_dst: u32,
}

@group(0) @binding(0) var<storage, read> src0: array<u32>;
@group(0) @binding(1) var<storage, read> src1: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read> params: MulMatParams;

// The loader, fixed when the pipeline is built: 0 f32, 1 q4_0, 2 q8_0,
// 3 q4_K, 4 q6_K (device::wgpu::Dtype order, ggml's names).
override SRC0_DTYPE: u32 = 0u;
// Workgroup size in threads along m and along n.
override WG_M: u32 = 16u;
override WG_N: u32 = 16u;
// k elements staged per step.
override TILE_K: u32 = 16u;

const TILE_M: u32 = 4u;
const TILE_N: u32 = 4u;

// Staged tiles, k-major: sh0[kk * (WG_M * TILE_M) + row].
var<workgroup> sh0: array<f32, TILE_K * WG_M * TILE_M>;
var<workgroup> sh1: array<f32, TILE_K * WG_N * TILE_N>;

// Byte `off` of src0 (little-endian words).
fn src0_byte(off: u32) -> u32 {
    return (src0[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFu;
}

// IEEE binary16 bits widened exactly to binary32, sign, subnormals,
// infinities and NaN included (core/src/f16.rs `decode_f16`). Written out in
// integer operations so no driver's f16 conversion (which may flush
// subnormals) is involved.
fn f16_to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1Fu;
    let man = h & 0x3FFu;
    if (e == 0x1Fu) {
        return bitcast<f32>(sign | 0x7F800000u | (man << 13u));
    }
    if (e == 0u) {
        // Zero or subnormal: man * 2^-24, exact (normal in binary32).
        let mag = f32(man) * 5.9604644775390625e-8;
        return bitcast<f32>(sign | bitcast<u32>(mag));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (man << 13u));
}

// The f16 field at even byte `off` of src0 (never straddles a word).
fn src0_f16(off: u32) -> f32 {
    return f16_to_f32((src0[off >> 2u] >> ((off & 2u) * 8u)) & 0xFFFFu);
}

// The sign-extended i8 at byte `off`.
fn src0_i8(off: u32) -> i32 {
    return bitcast<i32>(src0_byte(off) << 24u) >> 24u;
}

// f32: element (row, k) is word row * K + k.
fn load_f32(row: u32, k: u32) -> f32 {
    return bitcast<f32>(src0[row * params.k + k]);
}

// q4_0 (18-byte blocks of 32): (q - 8) * d.
fn load_q4_0(row: u32, k: u32) -> f32 {
    let blk = row * (params.k / 32u) * 18u + (k / 32u) * 18u;
    let j = k % 32u;
    let d = src0_f16(blk);
    let c = src0_byte(blk + 2u + (j % 16u));
    let q = select(c >> 4u, c & 0x0Fu, j < 16u);
    return f32(i32(q) - 8) * d;
}

// q8_0 (34-byte blocks of 32): q * d.
fn load_q8_0(row: u32, k: u32) -> f32 {
    let blk = row * (params.k / 32u) * 34u + (k / 32u) * 34u;
    let d = src0_f16(blk);
    return f32(src0_i8(blk + 2u + (k % 32u))) * d;
}

// q4_K (144-byte blocks of 256): (d * sc) * q - dmin * mn, with (sc, mn)
// from ggml's get_scale_min_k4.
fn load_q4_k(row: u32, k: u32) -> f32 {
    let blk = row * (params.k / 256u) * 144u + (k / 256u) * 144u;
    let j = k % 256u;
    let c = j / 64u;
    let l = j % 64u;
    let sub = 2u * c + l / 32u;
    let byte = src0_byte(blk + 16u + 32u * c + (l % 32u));
    let q = select(byte >> 4u, byte & 0x0Fu, l < 32u);
    let s = blk + 4u;
    var sc: u32;
    var mn: u32;
    if (sub < 4u) {
        sc = src0_byte(s + sub) & 0x3Fu;
        mn = src0_byte(s + sub + 4u) & 0x3Fu;
    } else {
        sc = (src0_byte(s + sub + 4u) & 0x0Fu) | ((src0_byte(s + sub - 4u) >> 6u) << 4u);
        mn = (src0_byte(s + sub + 4u) >> 4u) | ((src0_byte(s + sub) >> 6u) << 4u);
    }
    let dj = src0_f16(blk) * f32(sc);
    let mj = src0_f16(blk + 2u) * f32(mn);
    return dj * f32(q) - mj;
}

// q6_K (210-byte blocks of 256): (d * sc) * (q - 32).
fn load_q6_k(row: u32, k: u32) -> f32 {
    let blk = row * (params.k / 256u) * 210u + (k / 256u) * 210u;
    let j = k % 256u;
    let h = j / 128u;
    let r = j % 128u;
    let t = r / 32u;
    let l = r % 32u;
    let lo_byte = src0_byte(blk + 64u * h + l + 32u * (t & 1u));
    let lo = select(lo_byte & 0x0Fu, lo_byte >> 4u, t >= 2u);
    let hi = (src0_byte(blk + 128u + 32u * h + l) >> (2u * t)) & 3u;
    let q = i32(lo | (hi << 4u)) - 32;
    let sc = src0_i8(blk + 192u + 8u * h + l / 16u + 2u * t);
    let d = src0_f16(blk + 208u);
    return d * f32(sc) * f32(q);
}

fn load_src0(row: u32, k: u32) -> f32 {
    switch SRC0_DTYPE {
        case 1u: { return load_q4_0(row, k); }
        case 2u: { return load_q8_0(row, k); }
        case 3u: { return load_q4_k(row, k); }
        case 4u: { return load_q6_k(row, k); }
        default: { return load_f32(row, k); }
    }
}

@compute @workgroup_size(WG_M, WG_N, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = params.m;
    let n = params.n;
    let kdim = params.k;
    let bm = WG_M * TILE_M;
    let bn = WG_N * TILE_N;
    let m0 = wg.x * bm;
    let n0 = wg.y * bn;
    let threads = WG_M * WG_N;

    var acc: array<f32, 16>; // acc[4 i + j]: row m0 + 4 lid.x + i, column n0 + 4 lid.y + j
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }

    for (var k0 = 0u; k0 < kdim; k0 += TILE_K) {
        // Stage: consecutive threads take consecutive k of one row.
        for (var e = li; e < bm * TILE_K; e += threads) {
            let r = e / TILE_K;
            let kk = e % TILE_K;
            var v = 0.0;
            if (m0 + r < m && k0 + kk < kdim) {
                v = load_src0(m0 + r, k0 + kk);
            }
            sh0[kk * bm + r] = v;
        }
        for (var e = li; e < bn * TILE_K; e += threads) {
            let r = e / TILE_K;
            let kk = e % TILE_K;
            var v = 0.0;
            if (n0 + r < n && k0 + kk < kdim) {
                v = src1[(n0 + r) * params.stride_src1 + k0 + kk];
            }
            sh1[kk * bn + r] = v;
        }
        workgroupBarrier(); // staged tiles complete before anyone reads them

        let kend = min(TILE_K, kdim - k0);
        for (var kk = 0u; kk < kend; kk++) {
            let a0 = sh0[kk * bm + 4u * lid.x];
            let a1 = sh0[kk * bm + 4u * lid.x + 1u];
            let a2 = sh0[kk * bm + 4u * lid.x + 2u];
            let a3 = sh0[kk * bm + 4u * lid.x + 3u];
            let b0 = sh1[kk * bn + 4u * lid.y];
            let b1 = sh1[kk * bn + 4u * lid.y + 1u];
            let b2 = sh1[kk * bn + 4u * lid.y + 2u];
            let b3 = sh1[kk * bn + 4u * lid.y + 3u];
            acc[0] += a0 * b0;
            acc[1] += a0 * b1;
            acc[2] += a0 * b2;
            acc[3] += a0 * b3;
            acc[4] += a1 * b0;
            acc[5] += a1 * b1;
            acc[6] += a1 * b2;
            acc[7] += a1 * b3;
            acc[8] += a2 * b0;
            acc[9] += a2 * b1;
            acc[10] += a2 * b2;
            acc[11] += a2 * b3;
            acc[12] += a3 * b0;
            acc[13] += a3 * b1;
            acc[14] += a3 * b2;
            acc[15] += a3 * b3;
        }
        workgroupBarrier(); // everyone done reading before the next stage
    }

    for (var i = 0u; i < TILE_M; i++) {
        let gm = m0 + 4u * lid.x + i;
        for (var j = 0u; j < TILE_N; j++) {
            let gn = n0 + 4u * lid.y + j;
            if (gm < m && gn < n) {
                dst[gn * params.stride_dst + gm] = acc[4u * i + j];
            }
        }
    }
}

// The dequantize-then-GEMM pre-pass (see the ABI above): four consecutive
// elements of one row per invocation, each through `load_src0` (the
// element loader; each value the one `main` decodes).
@compute @workgroup_size(64, 1, 1)
fn dequant(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let i = (wg.y * nwg.x + wg.x) * 64u + li;
    let kq = params.k / 4u;
    if (i >= params.m * kq) {
        return;
    }
    let row = i / kq;
    let k = 4u * (i % kq);
    dst[4u * i] = load_src0(row, k);
    dst[4u * i + 1u] = load_src0(row, k + 1u);
    dst[4u * i + 2u] = load_src0(row, k + 2u);
    dst[4u * i + 3u] = load_src0(row, k + 3u);
}
