// mul_mat_quad: a CANDIDATE for shaders/mul_mat_reg_tile.wgsl, not the
// production shader: the same contract, ABI and order of operations, with
// vec4 staged tiles, two staging buffers, and the quantized rows decoded a
// quad (four consecutive k) at a time. Judge and time it with
//   KERNEL_ORACLE_MUL_MAT_WGSL=shaders/candidates/mul_mat_quad.wgsl kernel-oracle check mul-mat
//   SHADER=shaders/candidates/mul_mat_quad.wgsl target/release/examples/wgpu_gemm_bench
// Status (2026-12-02): CI gate green on lavapipe (`cargo test` runs it);
// on the H200 (2026-12-02) this form was bit-identical to production, f32
// 1.46-1.93x production's speed, the quantized dtypes 0.23-0.41x (the
// quad loaders stay slow). Its predecessor (every staging unit a
// quad, f32 included, with the four rows' loaders written out by name and
// the next tile's quads prefetched into registers) did, bit-identical to
// production on every LFM2.5 shape and dtype (SHADER= exit 0), WG 16x16,
// TILE_K 16, cuBLAS SGEMM (TF32 off) in the same run:
//   f32   ffn_gate 0.417 ms 0.343x, ffn_down 0.593 ms 0.192x,
//         conv_in 0.245 ms 0.376x, attn_out 0.156 ms 0.226x
//         (production 0.592 / 1.000 / 0.386 / 0.247 ms);
//   q4_0  0.423 / 0.651 / 0.255 / 0.171 ms; q8_0 0.429 / 0.684 / 0.544 / 0.326;
//   q4_K  4.656 / 4.077 / 2.425 / 0.657 ms, q6_K 2.490 / 2.809 / 1.723 / 0.664
//         (production q4_K 0.707 / 1.058 / 0.463 / 0.266 ms): 3.5x to 6.6x
//         slower, as the earlier vec4 candidate's K-quant loaders were.
// The two slow forms shared four inlined copies of a K-quant loader per
// staging unit; here the rows of a quad are a loop with one loader call,
// as in the production shader's one-element loop. Whether that is the
// cause is what its first H200 run will show.
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
// quad (four rows by four consecutive k, k a multiple of 4, so a quad never
// straddles a ggml block or sub-block: 4 divides 32 and 16): the block
// header (f16 scales, packed 6-bit scales) is decoded once per row for four
// elements, and the four quantized values of a row come from one 32-bit
// word (two where the block starts on an odd half-word). The thread writes
// all four components of each of the quad's vec4 (rows past M as 0); the
// quad's k outside the tile (TILE_K or k0 not a multiple of 4) are loaded
// and not stored.
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

// The four bytes at even byte `off` of src0, byte `off` lowest.
fn src0_word(off: u32) -> u32 {
    let w = src0[off >> 2u];
    if ((off & 2u) == 0u) {
        return w;
    }
    return (w >> 16u) | (src0[(off >> 2u) + 1u] << 16u);
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

// Byte c (0..3) of `w`.
fn byte_of(w: u32, c: u32) -> u32 {
    return (w >> (8u * c)) & 0xFFu;
}

// Byte c of `w` as a sign-extended i8.
fn i8_of(w: u32, c: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * c)) >> 24u;
}

// Each loader below returns elements k .. k + 3 of row `row` (k a multiple
// of 4, k < K).

// q4_0 (18-byte blocks of 32): (q - 8) * d.
fn q4_0_of(w: u32, c: u32, hi: bool, d: f32) -> f32 {
    let b = byte_of(w, c);
    let q = select(b & 0x0Fu, b >> 4u, hi);
    return f32(i32(q) - 8) * d;
}

fn quad_q4_0(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 32u) * 18u + (k / 32u) * 18u;
    let j = k % 32u;
    let d = src0_f16(blk);
    let w = src0_word(blk + 2u + (j % 16u));
    let hi = j >= 16u;
    return vec4<f32>(q4_0_of(w, 0u, hi, d), q4_0_of(w, 1u, hi, d), q4_0_of(w, 2u, hi, d), q4_0_of(w, 3u, hi, d));
}

// q8_0 (34-byte blocks of 32): q * d.
fn quad_q8_0(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 32u) * 34u + (k / 32u) * 34u;
    let d = src0_f16(blk);
    let w = src0_word(blk + 2u + (k % 32u));
    return vec4<f32>(f32(i8_of(w, 0u)) * d, f32(i8_of(w, 1u)) * d, f32(i8_of(w, 2u)) * d, f32(i8_of(w, 3u)) * d);
}

// q4_K (144-byte blocks of 256): (d * sc) * q - dmin * mn, with (sc, mn)
// from ggml's get_scale_min_k4.
fn q4_k_of(w: u32, c: u32, hi: bool, dj: f32, mj: f32) -> f32 {
    let b = byte_of(w, c);
    let q = select(b & 0x0Fu, b >> 4u, hi);
    return dj * f32(q) - mj;
}

fn quad_q4_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 256u) * 144u + (k / 256u) * 144u;
    let j = k % 256u;
    let c = j / 64u;
    let l = j % 64u;
    let sub = 2u * c + l / 32u;
    let w = src0[(blk + 16u + 32u * c + (l % 32u)) >> 2u];
    let hi = l >= 32u;
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
    return vec4<f32>(q4_k_of(w, 0u, hi, dj, mj), q4_k_of(w, 1u, hi, dj, mj), q4_k_of(w, 2u, hi, dj, mj), q4_k_of(w, 3u, hi, dj, mj));
}

// q6_K (210-byte blocks of 256): (d * sc) * (q - 32).
fn q6_k_of(lo_w: u32, hi_w: u32, c: u32, t: u32, d: f32, sc: i32) -> f32 {
    let lo_byte = byte_of(lo_w, c);
    let lo = select(lo_byte & 0x0Fu, lo_byte >> 4u, t >= 2u);
    let hi = (byte_of(hi_w, c) >> (2u * t)) & 3u;
    let q = i32(lo | (hi << 4u)) - 32;
    return d * f32(sc) * f32(q);
}

fn quad_q6_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 256u) * 210u + (k / 256u) * 210u;
    let j = k % 256u;
    let h = j / 128u;
    let r = j % 128u;
    let t = r / 32u;
    let l = r % 32u;
    let lo_w = src0_word(blk + 64u * h + l + 32u * (t & 1u));
    let hi_w = src0_word(blk + 128u + 32u * h + l);
    let scb = blk + 192u + 8u * h + l / 16u + 2u * t;
    let sc = bitcast<i32>(src0_byte(scb) << 24u) >> 24;
    let d = src0_f16(blk + 208u);
    return vec4<f32>(q6_k_of(lo_w, hi_w, 0u, t, d, sc), q6_k_of(lo_w, hi_w, 1u, t, d, sc), q6_k_of(lo_w, hi_w, 2u, t, d, sc), q6_k_of(lo_w, hi_w, 3u, t, d, sc));
}

// Row `row` of src0 at k .. k + 3, zero past the last row (quantized
// dtypes; f32 is staged as vector units).
fn quad_src0(row: u32, k: u32) -> vec4<f32> {
    if (row >= params.m) {
        return vec4<f32>(0.0);
    }
    switch SRC0_DTYPE {
        case 1u: { return quad_q4_0(row, k); }
        case 2u: { return quad_q8_0(row, k); }
        case 3u: { return quad_q4_k(row, k); }
        case 4u: { return quad_q6_k(row, k); }
        default: { return vec4<f32>(0.0); }
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

// Quads of src0 (quantized dtypes) in the tile at k0, per row quad: those
// from k0 rounded down to a multiple of 4 to the tile's end.
fn quads_in_tile(k0: u32) -> u32 {
    let kend = k0 + tile_len(k0);
    return (kend + 3u) / 4u - k0 / 4u;
}

// Stages src0's quads of the tile at k0 (quantized dtypes) into buffer
// `buf`, one thread per quad. The rows are a loop with one loader call;
// the thread stores all four components of each vec4 it touches (rows
// past M as 0), so every vec4 has one writer.
fn stage_quads(li: u32, k0: u32, buf: u32, m0: u32) {
    let nq = quads_in_tile(k0);
    let m = params.m;
    for (var u = li; u < WG_M * nq; u += WG_M * WG_N) {
        let i = u / nq;
        let k = 4u * (k0 / 4u + u % nq);
        let row0 = m0 + 4u * i;
        let base = buf * TILE_K * WG_M + i;
        // Rows in range, then zeros.
        var rows = 0u;
        if (row0 < m) {
            rows = min(4u, m - row0);
        }
        for (var r = 0u; r < rows; r++) {
            let v = quad_src0(row0 + r, k);
            if (k >= k0 && k < k0 + TILE_K) { sh0[base + (k - k0) * WG_M][r] = v.x; }
            if (k + 1u >= k0 && k + 1u < k0 + TILE_K) { sh0[base + (k + 1u - k0) * WG_M][r] = v.y; }
            if (k + 2u >= k0 && k + 2u < k0 + TILE_K) { sh0[base + (k + 2u - k0) * WG_M][r] = v.z; }
            if (k + 3u >= k0 && k + 3u < k0 + TILE_K) { sh0[base + (k + 3u - k0) * WG_M][r] = v.w; }
        }
        for (var r = rows; r < 4u; r++) {
            for (var c = 0u; c < 4u; c++) {
                if (k + c >= k0 && k + c < k0 + TILE_K) { sh0[base + (k + c - k0) * WG_M][r] = 0.0; }
            }
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
            stage_quads(li, 0u, 0u, m0);
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
            stage_quads(li, k1, nbuf, m0);
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
