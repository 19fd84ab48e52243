// mul_mat_wide: a CANDIDATE for shaders/mul_mat_reg_tile.wgsl, not the
// production shader: the same contract, ABI and order of operations, with
// a wider thread tile (8 x 8 outputs per invocation here; `const TILE_M`
// and `const TILE_N` may each be 4 or 8), vec4 staged tiles and two staging
// buffers. The shim reads the tile, the staging buffers and the default
// geometry from the declarations below (device::wgpu::ShaderDecl), so the
// gate, the fuzzer and the bench dispatch it on its own grid. Judge and
// time it with
//   KERNEL_ORACLE_MUL_MAT_WGSL=shaders/candidates/mul_mat_wide.wgsl kernel-oracle check mul-mat
//   SHADER=shaders/candidates/mul_mat_wide.wgsl target/release/examples/wgpu_gemm_bench
// (an 8 x 4 form: the same file with `const TILE_N: u32 = 4u;`).
// Status (2026-12-02): CI gate green on lavapipe (`cargo test` runs it and
// the 8 x 4 form; the 4 x 8 form passed `check mul-mat`) and the LFM2.5
// sweep of every dtype bit-identical to the production shader there
// (SHADER=, ITERS=1; 8 x 8 at WG 8x8 and 8 x 4 at WG 8x16). H200 (one run,
// 2026-12-02, `.gpu/wgsl/measure2.sh`): `check mul-mat` ALL GREEN (324 rows)
// and every dtype bit-identical to production on the sweep; ms ratios to
// production (above 1: faster) and to cuBLAS SGEMM (TF32 off) in that run:
// 8 x 4 at WG 8x16: f32 1.40-1.57x (0.17-0.38x cuBLAS), q4_0 0.89-1.14x,
// q4_K 0.81-1.12x, q6_K 0.98-1.26x; 8 x 8 at WG 8x8: f32 0.85-1.17x,
// quantized 0.47-0.90x. Not promoted: q4_K is slower on ffn_down and
// attn_out, and neither form reaches 0.5x cuBLAS.
//
// Why wider: with 4 x 4 outputs per invocation, each k costs two 16-byte
// workgroup loads per 16 multiply-adds; 8 x 8 costs four per 64, and the
// staged tiles are read half as often per output. The price is fewer
// invocations: M N / 64 (ffn_down and attn_out, 1024 x 512: 8192, about two
// warps per SM of an H200), hence the 8 x 4 form (M N / 32) to compare.
//
//   dst[n * stride_dst + m] = sum over k of src0[m, k] * src1[n * stride_src1 + k]
//
// The contract is `oracle::ggml::mul_mat` (core/src/ggml/mul_mat.rs); each
// loader below is the production shader's, verbatim, which follows the
// dequantization of its format in core/src/ggml/ (ggml-quants.c
// `dequantize_row_*`), step for step.
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
//   Pipeline-overridable constants: SRC0_DTYPE, WG_M, WG_N, TILE_K.
//   Declared for the shim: const TILE_M, TILE_N, STAGES.
//
// Geometry: a WG_M x WG_N workgroup computes a (TILE_M WG_M) x (TILE_N WG_N)
// block of dst. Along m the block is UM = WG_M TILE_M / 4 groups of four
// rows; invocation x owns groups x and x + WG_M (8 rows, TILE_M = 8) or x
// alone (TILE_M = 4), so the threads of a warp read consecutive 16-byte
// vectors of a staged k row (no bank conflicts), and likewise along n
// with y. k advances TILE_K at a time through STAGES = 2 buffers in
// workgroup memory, 2 x 4 TILE_K (WG_M TILE_M + WG_N TILE_N) bytes (as
// `Geometry::workgroup_bytes` counts with the declared STAGES).
//
// Staging: every vec4 of the staged tiles has exactly one writer, which
// writes the whole vector or all four of its components (WGSL lets a
// component store touch the whole vector, so four threads storing the
// four components of one vector would race). src1, and src0
// when it is f32, are staged as vector units: four rows (columns) at one
// k, consecutive threads along k so that global reads coalesce. Up to
// PREFETCH units per thread of the next tile are loaded into registers
// before this tile's products and stored to the other buffer after them,
// the rest after the products; one barrier per tile. src0 of a quantized
// dtype is staged after the products, one thread per vec4 (four rows at
// one k, consecutive threads along k as in the production shader, so a
// warp's loads share block headers), the rows a loop over the production
// loader, one element per call; rows past M are stored as 0.
//
// Arithmetic order: each output is one f32 accumulator (a component of one
// of the vec4 accumulators below) that starts at +0.0 and adds
// w[m, k] * x[n, k] for k = 0, 1, .., K - 1 in order, exactly the
// contract's order (rule MM-ORDER); a vec4 multiply-add is four
// independent component operations, each rounded as the scalar one.
// Every dequantized value is the production loader's expression, so the
// bench's SHADER= diff against the production shader is expected to be
// bit-identical. WGSL allows the compiler to fuse the multiply-add, so the
// gate's EXACT arm makes every order and fusion give the same bits and its
// RANDOM arm bounds the rest.

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
// Workgroup size in threads along m and along n (the defaults are the
// declared geometry, from which device::wgpu's default_geometry picks each
// shape's: the bench runs that when WG_M, WG_N, TILE_K are not set).
override WG_M: u32 = 8u;
override WG_N: u32 = 8u;
// k elements staged per step.
override TILE_K: u32 = 16u;

// Outputs per invocation along m and n, each 4 or 8 (the products below
// are written out for both).
const TILE_M: u32 = 8u;
const TILE_N: u32 = 8u;
// Staging buffers in workgroup memory.
const STAGES: u32 = 2u;
// Vector units of the next tile each thread holds in registers across the
// products (0 to 4).
const PREFETCH: u32 = 4u;
// Padding vectors after each staged k row (0 or 1): with 1, the k-major
// stores of consecutive threads (consecutive k) fall in different banks.
// Workgroup memory grows by 2 x 16 TILE_K SKEW bytes per tile, which the
// shim's pre-launch count leaves out (the pipeline's validation has it).
const SKEW: u32 = 0u;

// Groups of four rows (columns) per invocation.
const VM: u32 = TILE_M / 4u;
const VN: u32 = TILE_N / 4u;

// Staged tiles, k-major, four consecutive rows to a vector, each k row
// RM = WG_M VM + SKEW vectors long:
// sh0[b * TILE_K * RM + kk * RM + q][c] is src0 row m0 + 4 q + c at
// k0 + kk in buffer b; sh1 likewise (RN = WG_N VN + SKEW) with src1 row
// n0 + 4 q + c.
var<workgroup> sh0: array<vec4<f32>, STAGES * TILE_K * (WG_M * VM + SKEW)>;
var<workgroup> sh1: array<vec4<f32>, STAGES * TILE_K * (WG_N * VN + SKEW)>;

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

// Vector units of the tile at k0 (k0 < K): src1's WG_N VN len, after them
// src0's WG_M VM len when src0 is f32. Unit u of a part is group u / len
// at k0 + u % len, so consecutive units run along k.
fn vec_units(k0: u32) -> u32 {
    let len = tile_len(k0);
    if (SRC0_DTYPE == 0u) {
        return (WG_N * VN + WG_M * VM) * len;
    }
    return WG_N * VN * len;
}

// Vector unit u of the tile at k0.
fn load_vec_unit(u: u32, k0: u32, m0: u32, n0: u32) -> vec4<f32> {
    let len = tile_len(k0);
    let units1 = WG_N * VN * len;
    if (u < units1) {
        return col4_src1(n0 + 4u * (u / len), k0 + u % len);
    }
    let v = u - units1;
    return col4_src0_f32(m0 + 4u * (v / len), k0 + v % len);
}

// Stores vector unit u of the tile at k0, as `load_vec_unit` loaded it, to
// buffer `buf`: one whole vec4.
fn store_vec_unit(u: u32, k0: u32, buf: u32, x: vec4<f32>) {
    let len = tile_len(k0);
    let units1 = WG_N * VN * len;
    let rn = WG_N * VN + SKEW;
    let rm = WG_M * VM + SKEW;
    if (u < units1) {
        sh1[buf * TILE_K * rn + (u % len) * rn + u / len] = x;
    } else {
        let v = u - units1;
        sh0[buf * TILE_K * rm + (v % len) * rm + v / len] = x;
    }
}

// Stages src0 of a quantized dtype for the tile at k0 into buffer `buf`:
// one thread per vec4 (four rows at one k), consecutive threads along k,
// the rows a loop with one production loader call per element; the thread
// stores all four components (rows past M as 0), so every vec4 has one
// writer.
fn stage_src0_rows(li: u32, k0: u32, buf: u32, m0: u32) {
    let len = tile_len(k0);
    let m = params.m;
    let rm = WG_M * VM + SKEW;
    for (var u = li; u < WG_M * VM * len; u += WG_M * WG_N) {
        let q = u / len;
        let kk = u % len;
        let row0 = m0 + 4u * q;
        let at = buf * TILE_K * rm + kk * rm + q;
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

// Stores output (gm, gn) if it is in bounds.
fn store1(gm: u32, gn: u32, x: f32) {
    let m = params.m;
    let n = params.n;
    if (gm < m && gn < n) {
        dst[gn * params.stride_dst + gm] = x;
    }
}

// Stores the accumulator of rows gm0 .. gm0 + 3 at column gn (components by
// name: a vector indexed by a variable may go to memory).
fn store4(gm0: u32, gn: u32, v: vec4<f32>) {
    store1(gm0, gn, v.x);
    store1(gm0 + 1u, gn, v.y);
    store1(gm0 + 2u, gn, v.z);
    store1(gm0 + 3u, gn, v.w);
}

@compute @workgroup_size(WG_M, WG_N, 1)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let kdim = params.k;
    let m0 = wg.x * WG_M * TILE_M;
    let n0 = wg.y * WG_N * TILE_N;
    let threads = WG_M * WG_N;
    let um = WG_M * VM + SKEW; // vectors per staged k row of src0
    let un = WG_N * VN + SKEW; // and of src1

    // cJ_G: column J of the thread's tile (n0 + 4 (h WG_N + lid.y) + c for
    // J = 4 h + c), rows of group G (m0 + 4 (G WG_M + lid.x) + 0..3).
    var c0_0 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0);
    var c0_1 = vec4<f32>(0.0);
    var c1_1 = vec4<f32>(0.0);
    var c2_1 = vec4<f32>(0.0);
    var c3_1 = vec4<f32>(0.0);
    var c4_1 = vec4<f32>(0.0);
    var c5_1 = vec4<f32>(0.0);
    var c6_1 = vec4<f32>(0.0);
    var c7_1 = vec4<f32>(0.0);

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
        // The next tile's first PREFETCH vector units of this thread, in
        // flight while this tile's products run.
        let k1 = k0 + TILE_K;
        var units1 = 0u;
        if (k1 < kdim) {
            units1 = vec_units(k1);
        }
        var pre0 = vec4<f32>(0.0);
        var pre1 = vec4<f32>(0.0);
        var pre2 = vec4<f32>(0.0);
        var pre3 = vec4<f32>(0.0);
        if (PREFETCH > 0u && li < units1) {
            pre0 = load_vec_unit(li, k1, m0, n0);
        }
        if (PREFETCH > 1u && li + threads < units1) {
            pre1 = load_vec_unit(li + threads, k1, m0, n0);
        }
        if (PREFETCH > 2u && li + 2u * threads < units1) {
            pre2 = load_vec_unit(li + 2u * threads, k1, m0, n0);
        }
        if (PREFETCH > 3u && li + 3u * threads < units1) {
            pre3 = load_vec_unit(li + 3u * threads, k1, m0, n0);
        }

        // The products, k in order.
        let a_at = buf * TILE_K * um + lid.x;
        let b_at = buf * TILE_K * un + lid.y;
        let kend = min(TILE_K, kdim - k0);
        for (var kk = 0u; kk < kend; kk++) {
            let a0 = sh0[a_at + kk * um];
            let b0 = sh1[b_at + kk * un];
            c0_0 += a0 * b0.x;
            c1_0 += a0 * b0.y;
            c2_0 += a0 * b0.z;
            c3_0 += a0 * b0.w;
            if (VN == 2u) {
                let b1 = sh1[b_at + kk * un + WG_N];
                c4_0 += a0 * b1.x;
                c5_0 += a0 * b1.y;
                c6_0 += a0 * b1.z;
                c7_0 += a0 * b1.w;
                if (VM == 2u) {
                    let a1 = sh0[a_at + kk * um + WG_M];
                    c0_1 += a1 * b0.x;
                    c1_1 += a1 * b0.y;
                    c2_1 += a1 * b0.z;
                    c3_1 += a1 * b0.w;
                    c4_1 += a1 * b1.x;
                    c5_1 += a1 * b1.y;
                    c6_1 += a1 * b1.z;
                    c7_1 += a1 * b1.w;
                }
            } else if (VM == 2u) {
                let a1 = sh0[a_at + kk * um + WG_M];
                c0_1 += a1 * b0.x;
                c1_1 += a1 * b0.y;
                c2_1 += a1 * b0.z;
                c3_1 += a1 * b0.w;
            }
        }

        // The next tile into the other buffer: every thread has passed the
        // previous iteration's barrier, so nobody reads it any more.
        let nbuf = 1u - buf;
        if (PREFETCH > 0u && li < units1) {
            store_vec_unit(li, k1, nbuf, pre0);
        }
        if (PREFETCH > 1u && li + threads < units1) {
            store_vec_unit(li + threads, k1, nbuf, pre1);
        }
        if (PREFETCH > 2u && li + 2u * threads < units1) {
            store_vec_unit(li + 2u * threads, k1, nbuf, pre2);
        }
        if (PREFETCH > 3u && li + 3u * threads < units1) {
            store_vec_unit(li + 3u * threads, k1, nbuf, pre3);
        }
        for (var u = li + min(PREFETCH, 4u) * threads; u < units1; u += threads) {
            store_vec_unit(u, k1, nbuf, load_vec_unit(u, k1, m0, n0));
        }
        if (SRC0_DTYPE != 0u && k1 < kdim) {
            stage_src0_rows(li, k1, nbuf, m0);
        }
        workgroupBarrier(); // staged tiles complete before anyone reads them
        buf = nbuf;
    }

    // Row group G starts at m0 + 4 (G WG_M + lid.x); column J = 4 h + c
    // is n0 + 4 (h WG_N + lid.y) + c.
    let gm0 = m0 + 4u * lid.x;
    let gm1 = m0 + 4u * (WG_M + lid.x);
    let gn0 = n0 + 4u * lid.y;
    let gn1 = n0 + 4u * (WG_N + lid.y);
    store4(gm0, gn0, c0_0);
    store4(gm0, gn0 + 1u, c1_0);
    store4(gm0, gn0 + 2u, c2_0);
    store4(gm0, gn0 + 3u, c3_0);
    if (VN == 2u) {
        store4(gm0, gn1, c4_0);
        store4(gm0, gn1 + 1u, c5_0);
        store4(gm0, gn1 + 2u, c6_0);
        store4(gm0, gn1 + 3u, c7_0);
    }
    if (VM == 2u) {
        store4(gm1, gn0, c0_1);
        store4(gm1, gn0 + 1u, c1_1);
        store4(gm1, gn0 + 2u, c2_1);
        store4(gm1, gn0 + 3u, c3_1);
        if (VN == 2u) {
            store4(gm1, gn1, c4_1);
            store4(gm1, gn1 + 1u, c5_1);
            store4(gm1, gn1 + 2u, c6_1);
            store4(gm1, gn1 + 3u, c7_1);
        }
    }
}

// The dequantize-then-GEMM pre-pass (the production shader's ABI): four
// consecutive elements of one row per invocation, each through
// `load_src0` (the element loader; each value the one `main` decodes).
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
