// mul_mat_vec4: a CANDIDATE for shaders/mul_mat_reg_tile.wgsl, not the
// production shader. The same contract, ABI and arithmetic; the difference is
// the layout of the staged tiles (vec4, below). Swap it in to judge it:
//   KERNEL_ORACLE_MUL_MAT_WGSL=shaders/candidates/mul_mat_vec4.wgsl kernel-oracle check mul-mat
//   SHADER=shaders/candidates/mul_mat_vec4.wgsl target/release/examples/wgpu_gemm_bench
// Status (2026-11-29): the CI gate passes on lavapipe (tests/mul_mat_gate.rs
// runs it). On the H200 two earlier forms of it were measured, both
// bit-identical to the production shader on every LFM2.5 shape and dtype:
// (a) each thread stored one component of a shared vec4: 1.03x-1.34x the
// production shader, but a race under WGSL's memory model (a component
// store may touch the whole vector, gpuweb #2112), so not shipped; (b) the
// race fixed with a loop-indexed component store: gates green and 92 s of
// fuzzing clean, but the quantized dtypes ran 6x slower. This form names
// the components instead of indexing them; it has not run on the H200 yet.
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
//                      with zero bytes to a multiple of 4.
//   binding 1  src1    array<f32>, read: N rows, row n at element n * stride_src1.
//   binding 2  dst     array<f32>, read_write: dst[n * stride_dst + m].
//   binding 3  params  MulMatParams (storage, read).
//   entry point `main`, dispatched as (ceil(M / (WG_M * 4)), ceil(N / (WG_N * 4)), 1).
//   Pipeline-overridable constants: SRC0_DTYPE, WG_M, WG_N, TILE_K.
//
// Geometry: a WG_M x WG_N workgroup computes a (4 WG_M) x (4 WG_N) block of
// dst, each thread a 4 x 4 register tile (TILE_M = TILE_N = 4, unrolled by
// hand below, hence not overridable). k advances TILE_K at a time: all
// threads stage a (4 WG_M) x TILE_K tile of dequantized src0 and a
// (4 WG_N) x TILE_K tile of src1 in workgroup memory, synchronise, and
// accumulate from there. A thread's four rows (columns) at one k sit in one
// vec4, so each k step is two 16-byte workgroup loads for 16 multiply-adds
// (scalar tiles read at a 4-word stride took eight loads, with bank
// conflicts; the vec4 layout measured 1.03x to 1.34x faster on the H200,
// bit-identical outputs, in the racy form (a) above).
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

// Staged tiles, k-major, four consecutive rows to a vector:
// sh0[kk * WG_M + i][c] is src0 row m0 + 4 i + c at k0 + kk, and
// sh1[kk * WG_N + j][c] is src1 row n0 + 4 j + c at k0 + kk. A thread's
// four rows (columns) at one k are then one 16-byte load.
var<workgroup> sh0: array<vec4<f32>, TILE_K * WG_M>;
var<workgroup> sh1: array<vec4<f32>, TILE_K * WG_N>;

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
        // Stage: each thread fills whole vectors (four rows, or columns, at
        // one k), consecutive threads consecutive k (global reads coalesced
        // along k). A whole-vector store: WGSL lets a store to one
        // component of a vector touch the others, so four threads storing
        // the four components of one vector would race (gpuweb #2112).
        for (var e = li; e < WG_M * TILE_K; e += threads) {
            let r = 4u * (e / TILE_K);
            let kk = e % TILE_K;
            let row = m0 + r;
            let k = k0 + kk;
            var v = vec4<f32>(0.0);
            if (k < kdim) {
                // Components by name, not by a loop index: a dynamically
                // indexed vector left the quantized loaders 6x slower on
                // the H200 (the vector went to memory).
                if (row < m) { v.x = load_src0(row, k); }
                if (row + 1u < m) { v.y = load_src0(row + 1u, k); }
                if (row + 2u < m) { v.z = load_src0(row + 2u, k); }
                if (row + 3u < m) { v.w = load_src0(row + 3u, k); }
            }
            sh0[kk * WG_M + e / TILE_K] = v;
        }
        for (var e = li; e < WG_N * TILE_K; e += threads) {
            let r = 4u * (e / TILE_K);
            let kk = e % TILE_K;
            let col = n0 + r;
            let k = k0 + kk;
            var v = vec4<f32>(0.0);
            if (k < kdim) {
                if (col < n) { v.x = src1[col * params.stride_src1 + k]; }
                if (col + 1u < n) { v.y = src1[(col + 1u) * params.stride_src1 + k]; }
                if (col + 2u < n) { v.z = src1[(col + 2u) * params.stride_src1 + k]; }
                if (col + 3u < n) { v.w = src1[(col + 3u) * params.stride_src1 + k]; }
            }
            sh1[kk * WG_N + e / TILE_K] = v;
        }
        workgroupBarrier(); // staged tiles complete before anyone reads them

        let kend = min(TILE_K, kdim - k0);
        for (var kk = 0u; kk < kend; kk++) {
            let a = sh0[kk * WG_M + lid.x];
            let b = sh1[kk * WG_N + lid.y];
            acc[0] += a.x * b.x;
            acc[1] += a.x * b.y;
            acc[2] += a.x * b.z;
            acc[3] += a.x * b.w;
            acc[4] += a.y * b.x;
            acc[5] += a.y * b.y;
            acc[6] += a.y * b.z;
            acc[7] += a.y * b.w;
            acc[8] += a.z * b.x;
            acc[9] += a.z * b.y;
            acc[10] += a.z * b.z;
            acc[11] += a.z * b.w;
            acc[12] += a.w * b.x;
            acc[13] += a.w * b.y;
            acc[14] += a.w * b.z;
            acc[15] += a.w * b.w;
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
