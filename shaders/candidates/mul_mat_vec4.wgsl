// mul_mat_vec4: a CANDIDATE for shaders/mul_mat_reg_tile.wgsl, not the
// production shader: the same contract, ABI and order of operations, with
// vec4 staged tiles and two staging buffers; the quantized rows are decoded
// one element at a time by the production shader's own loaders. Judge and
// time it with
//   KERNEL_ORACLE_MUL_MAT_WGSL=shaders/candidates/mul_mat_vec4.wgsl kernel-oracle check mul-mat
//   SHADER=shaders/candidates/mul_mat_vec4.wgsl target/release/examples/wgpu_gemm_bench
// Status (2026-12-02): CI gate green on lavapipe (`cargo test` runs it);
// on the H200 (2026-12-02) this form was bit-identical to production, f32
// 1.48-1.96x production's speed, the quantized dtypes 0.24-0.41x. Earlier forms of it did, all
// bit-identical to production: (a) each thread stored one component of a
// shared vec4: 1.03x-1.34x the production shader, but a race under WGSL's
// memory model; (b) one thread per vec4 with a loop-indexed component of a
// private vec4: quantized dtypes 6x slower (the vector went to memory);
// (c) the components by name (four inlined loader calls): f32 0.354 /
// 0.588 / 0.235 / 0.147 ms on ffn_gate / ffn_down / conv_in / attn_out
// (0.40x / 0.19x / 0.39x / 0.23x cuBLAS SGEMM), q4_K and q6_K 4.5x slower
// than production. This form adds the double buffer and the register
// prefetch, and writes a quantized vec4's components from a loop with one
// loader call (the production shader's one-element loop, in shape).
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
//   entry point `main`, dispatched as (ceil(M / (WG_M * 4)), ceil(N / (WG_N * 4)), 1).
//   Pipeline-overridable constants: SRC0_DTYPE, WG_M, WG_N, TILE_K.
//   Declared for the shim (device::wgpu::ShaderDecl reads them from this
//   text): const TILE_M, TILE_N (outputs per invocation), STAGES.
//
// Geometry: a WG_M x WG_N workgroup computes a (4 WG_M) x (4 WG_N) block of
// dst, each thread a 4 x 4 register tile (TILE_M = TILE_N = 4, unrolled by
// hand below, hence not overridable). k advances TILE_K at a time through
// two staging buffers in workgroup memory, 2 x 16 TILE_K (WG_M + WG_N)
// bytes (declared as `const STAGES: u32 = 2u;`, so the shim's
// `Geometry::workgroup_bytes` and its limit check count both). A thread's four rows (columns) at one k sit in
// one vec4, so each k is two 16-byte workgroup loads for 16 multiply-adds.
//
// Staging: each vec4 of the staged tiles has exactly one writer, and a
// thread writes either the whole vector or all four of its components
// (WGSL lets a component store touch the whole vector, gpuweb #2112, so
// four threads storing the four components of one vector would race).
// src1, and src0 when it is f32, are staged as vector units (four rows at
// one k, consecutive threads along k so that global reads coalesce); each
// thread's first two units of the next tile are loaded into registers
// before this tile's products and stored to the other buffer after them,
// so their global latency hides behind the products; one barrier per tile.
// src0 of a quantized dtype is staged after the products, one thread per
// vec4 (four rows at one k), the rows a loop over the production loader;
// the thread writes all four components (rows past M as 0).
//
// Arithmetic order: each output is one f32 accumulator that starts at +0.0
// and adds w[m, k] * x[n, k] for k = 0, 1, .., K - 1 in order, exactly the
// contract's order (rule MM-ORDER), and every dequantized value is the
// expression of the production shader's loader, so the bench's SHADER=
// diff against it is expected to be bit-identical. WGSL allows the compiler
// to fuse the multiply-add, so the gate's EXACT arm makes every order and
// fusion give the same bits and its RANDOM arm bounds the rest.

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
// Staging buffers in workgroup memory (read by the shim).
const STAGES: u32 = 2u;

// Staged tiles, two buffers, k-major, four consecutive rows to a vector:
// sh0[b * TILE_K * WG_M + kk * WG_M + i][c] is src0 row m0 + 4 i + c at
// k0 + kk in buffer b, and likewise sh1 with src1 row n0 + 4 j + c. A
// thread's four rows (columns) at one k are then one 16-byte load.
var<workgroup> sh0: array<vec4<f32>, STAGES * TILE_K * WG_M>;
var<workgroup> sh1: array<vec4<f32>, STAGES * TILE_K * WG_N>;

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

// The loaders of one element (the previous production shader's).
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

// Rows row .. row + 3 of src0 at one k (f32 only), zero past the last row.
fn col4_src0_f32(row: u32, k: u32) -> vec4<f32> {
    let m = params.m;
    let kdim = params.k;
    var v = vec4<f32>(0.0);
    if (row < m) { v.x = bitcast<f32>(src0[row * kdim + k]); }
    if (row + 1u < m) { v.y = bitcast<f32>(src0[(row + 1u) * kdim + k]); }
    if (row + 2u < m) { v.z = bitcast<f32>(src0[(row + 2u) * kdim + k]); }
    if (row + 3u < m) { v.w = bitcast<f32>(src0[(row + 3u) * kdim + k]); }
    return v;
}

// Rows col .. col + 3 of src1 at one k, zero past the last row.
fn col4_src1(col: u32, k: u32) -> vec4<f32> {
    let n = params.n;
    let s = params.stride_src1;
    var v = vec4<f32>(0.0);
    if (col < n) { v.x = src1[col * s + k]; }
    if (col + 1u < n) { v.y = src1[(col + 1u) * s + k]; }
    if (col + 2u < n) { v.z = src1[(col + 2u) * s + k]; }
    if (col + 3u < n) { v.w = src1[(col + 3u) * s + k]; }
    return v;
}

// k elements of the tile at k0: TILE_K, less in the last tile.
fn tile_len(k0: u32) -> u32 {
    return min(TILE_K, params.k - k0);
}

// Vector units of the tile at k0 (each four rows or columns at one k,
// consecutive units along k, so consecutive threads read consecutive
// words): src1's WG_N * len, after them src0's WG_M * len when src0 is f32.
fn vec_units(k0: u32) -> u32 {
    let len = tile_len(k0);
    if (SRC0_DTYPE == 0u) {
        return (WG_N + WG_M) * len;
    }
    return WG_N * len;
}

// Vector unit u of the tile at k0.
fn load_vec_unit(u: u32, k0: u32, m0: u32, n0: u32) -> vec4<f32> {
    let len = tile_len(k0);
    let units1 = WG_N * len;
    if (u < units1) {
        return col4_src1(n0 + 4u * (u / len), k0 + u % len);
    }
    let v = u - units1;
    return col4_src0_f32(m0 + 4u * (v / len), k0 + v % len);
}

// Stores vector unit u of the tile at k0, as loaded by `load_vec_unit`, to
// buffer `buf`: one whole vec4.
fn store_vec_unit(u: u32, k0: u32, buf: u32, x: vec4<f32>) {
    let len = tile_len(k0);
    let units1 = WG_N * len;
    if (u < units1) {
        sh1[buf * TILE_K * WG_N + (u % len) * WG_N + u / len] = x;
    } else {
        let v = u - units1;
        sh0[buf * TILE_K * WG_M + (v % len) * WG_M + v / len] = x;
    }
}

// Stages src0 of the tile at k0 (quantized dtypes) into buffer `buf`,
// one thread per vec4 (four rows at one k), one element at a time: the
// rows are a loop with one loader call; the thread stores all four
// components of the vec4 (rows past M as 0), so it has one writer.
fn stage_src0_rows(li: u32, k0: u32, buf: u32, m0: u32) {
    let len = tile_len(k0);
    let m = params.m;
    for (var u = li; u < WG_M * len; u += WG_M * WG_N) {
        let i = u / len;
        let kk = u % len;
        let row0 = m0 + 4u * i;
        let at = buf * TILE_K * WG_M + kk * WG_M + i;
        var rows = 0u;
        if (row0 < m) {
            rows = min(4u, m - row0);
        }
        for (var r = 0u; r < rows; r++) {
            sh0[at][r] = load_src0(row0 + r, k0 + kk);
        }
        for (var r = rows; r < 4u; r++) {
            sh0[at][r] = 0.0;
        }
    }
}

// The 16 products of one k, each added to its own accumulator:
// acc[4 i + j] += a[i] * b[j].
fn mac(acc: ptr<function, array<f32, 16>>, a: vec4<f32>, b: vec4<f32>) {
    (*acc)[0] += a.x * b.x;
    (*acc)[1] += a.x * b.y;
    (*acc)[2] += a.x * b.z;
    (*acc)[3] += a.x * b.w;
    (*acc)[4] += a.y * b.x;
    (*acc)[5] += a.y * b.y;
    (*acc)[6] += a.y * b.z;
    (*acc)[7] += a.y * b.w;
    (*acc)[8] += a.z * b.x;
    (*acc)[9] += a.z * b.y;
    (*acc)[10] += a.z * b.z;
    (*acc)[11] += a.z * b.w;
    (*acc)[12] += a.w * b.x;
    (*acc)[13] += a.w * b.y;
    (*acc)[14] += a.w * b.z;
    (*acc)[15] += a.w * b.w;
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
    let m0 = wg.x * WG_M * TILE_M;
    let n0 = wg.y * WG_N * TILE_N;
    let threads = WG_M * WG_N;

    var acc: array<f32, 16>; // acc[4 i + j]: row m0 + 4 lid.x + i, column n0 + 4 lid.y + j
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }

    // The first tile, straight to buffer 0.
    if (kdim > 0u) {
        let units = vec_units(0u);
        for (var u = li; u < units; u += threads) {
            store_vec_unit(u, 0u, 0u, load_vec_unit(u, 0u, m0, n0));
        }
        if (SRC0_DTYPE != 0u) {
            stage_src0_rows(li, 0u, 0u, m0);
        }
    }
    workgroupBarrier(); // the first tile staged

    var buf = 0u;
    for (var k0 = 0u; k0 < kdim; k0 += TILE_K) {
        // The next tile's first two vector units per thread, in flight
        // while this tile's products run.
        let k1 = k0 + TILE_K;
        var units1 = 0u;
        if (k1 < kdim) {
            units1 = vec_units(k1);
        }
        var pre0 = vec4<f32>(0.0);
        var pre1 = vec4<f32>(0.0);
        if (li < units1) {
            pre0 = load_vec_unit(li, k1, m0, n0);
        }
        if (li + threads < units1) {
            pre1 = load_vec_unit(li + threads, k1, m0, n0);
        }

        let a0 = buf * TILE_K * WG_M + lid.x;
        let b0 = buf * TILE_K * WG_N + lid.y;
        if (k1 <= kdim) {
            for (var kk = 0u; kk < TILE_K; kk++) {
                mac(&acc, sh0[a0 + kk * WG_M], sh1[b0 + kk * WG_N]);
            }
        } else {
            for (var kk = 0u; kk < kdim - k0; kk++) {
                mac(&acc, sh0[a0 + kk * WG_M], sh1[b0 + kk * WG_N]);
            }
        }

        // The next tile into the other buffer: every thread has passed the
        // previous iteration's barrier, so nobody reads it any more.
        let nbuf = 1u - buf;
        if (li < units1) {
            store_vec_unit(li, k1, nbuf, pre0);
        }
        if (li + threads < units1) {
            store_vec_unit(li + threads, k1, nbuf, pre1);
        }
        for (var u = li + 2u * threads; u < units1; u += threads) {
            store_vec_unit(u, k1, nbuf, load_vec_unit(u, k1, m0, n0));
        }
        if (SRC0_DTYPE != 0u && k1 < kdim) {
            stage_src0_rows(li, k1, nbuf, m0);
        }
        workgroupBarrier(); // staged tiles complete before anyone reads them
        buf = nbuf;
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
