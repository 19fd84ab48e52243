// mul_mat_unrolled: a CANDIDATE for shaders/mul_mat_reg_tile.wgsl, not the
// production shader: the same contract, ABI and order of operations, shaped
// to stay cheap under naga's runtime checks (wgpu's default shader module:
// every workgroup-array index with a non-constant index clamped, every loop
// given a bounding counter, integer divisions guarded). 8 x 4 outputs per
// invocation (`const TILE_M`, `const TILE_N` may each be 4 or 8), vec4
// staged tiles in two buffers, the products four k per loop iteration, and
// quantized rows decoded four k at a time. Judge and time it with
//   KERNEL_ORACLE_MUL_MAT_WGSL=shaders/candidates/mul_mat_unrolled.wgsl kernel-oracle check mul-mat
//   SHADER=shaders/candidates/mul_mat_unrolled.wgsl target/release/examples/wgpu_gemm_bench
// (the 4 x 8 and 8 x 8 forms: the same file with another `const TILE_M` /
// `const TILE_N`).
// Status (2026-12-02): lavapipe only (no GPU timing yet). `check mul-mat`
// ALL GREEN (324 rows); `cargo test` runs the CI gate on it and on its
// 4 x 8 and 8 x 8 forms, and the ragged shapes at TILE_K 6; the LFM2.5
// sweep of every dtype bit-identical to the production shader there
// (SHADER=, ITERS=1, WG 8x16, TILE_K 16).
//
// What the checks cost in the production shader's hot loop, read from the
// SPIR-V naga emits with wgpu's Vulkan policies (index: Restrict, loop
// bounding on): per k, eight clamped scalar workgroup loads and one
// decrement-and-test of a 64-bit loop counter for 16 multiply-adds, and a
// private accumulator array indexed by a variable in the store loop. Here,
// per k: VM + VN clamped vec4 loads (3 for 8 x 4) for 32 multiply-adds, one
// loop counter step per four k, accumulators in named vectors (constant
// access only), and the staging divisions by TILE_K (a constant once the
// pipeline's overrides are applied) instead of by a tile length read at
// run time.
//
//   dst[n * stride_dst + m] = sum over k of src0[m, k] * src1[n * stride_src1 + k]
//
// The contract is `oracle::ggml::mul_mat` (core/src/ggml/mul_mat.rs); the
// element loaders below are the production shader's, and the four-k
// decoders compute each element with the same expression, both following
// the dequantization of its format in core/src/ggml/ (ggml-quants.c
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
// block of dst (8 x 16 threads by default: 64 x 64). Along m the block is
// WG_M VM groups of four rows; invocation x owns groups x and x + WG_M
// (TILE_M = 8) or x alone (TILE_M = 4), so the threads of a warp read
// consecutive 16-byte vectors of a staged k row, and likewise along n with
// y. k advances TILE_K at a time through STAGES = 2 buffers in workgroup
// memory, 2 x 4 TILE_K (WG_M TILE_M + WG_N TILE_N) bytes (as
// `Geometry::workgroup_bytes` counts with the declared STAGES).
//
// Staging: every vec4 of the staged tiles has exactly one writer, which
// writes the whole vector (WGSL lets a component store touch the whole
// vector, so four threads storing the four components of one vector would
// race). src1, and src0 when it is f32, are staged as vector units: four
// rows (columns) at one k, consecutive threads along k so that global
// reads coalesce; unit u of a part is group u / TILE_K at k0 + u % TILE_K,
// so every tile has the same units (past K, past M or N: zeros). Up to
// four units per thread of the next tile are loaded into registers before
// this tile's products and stored to the other buffer after them, the
// rest after the products; one barrier per tile. src0 of a quantized
// dtype is staged after the products, one thread per four rows at four
// consecutive k (four whole vectors): per row one block header, one read
// of the scales and one or two words of codes serve the four elements
// (TILE_K a multiple of 4; otherwise one thread per vector and one
// production loader call per element). Rows past M are stored as 0.
//
// Arithmetic order: each output is one f32 accumulator (a component of one
// of the vec4 accumulators below) that starts at +0.0 and adds
// w[m, k] * x[n, k] for k = 0, 1, .., K - 1 in order, exactly the
// contract's order (rule MM-ORDER); a vec4 multiply-add is four
// independent component operations, each rounded as the scalar one. Every
// dequantized value is the production loader's expression on the same
// fields (q4_K through the one function `q4k_value`), so the bench's
// SHADER= diff against the production shader is expected to be
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
override WG_N: u32 = 16u;
// k elements staged per step.
override TILE_K: u32 = 16u;

// Outputs per invocation along m and n, each 4 or 8 (the products below
// are written out for both).
const TILE_M: u32 = 8u;
const TILE_N: u32 = 4u;
// Staging buffers in workgroup memory.
const STAGES: u32 = 2u;

// Groups of four rows (columns) per invocation.
const VM: u32 = TILE_M / 4u;
const VN: u32 = TILE_N / 4u;
// Vectors per staged k row of src0 (src1), and the vector units of a
// tile: src1's, then src0's when it is f32 (derived, never set by the
// pipeline).
override RM: u32 = WG_M * VM;
override RN: u32 = WG_N * VN;
override UNITS1: u32 = RN * TILE_K;
override UNITS0: u32 = RM * TILE_K;

// Staged tiles, k-major, four consecutive rows to a vector:
// sh0[b * TILE_K * RM + kk * RM + q][c] is src0 row m0 + 4 q + c at
// k0 + kk in buffer b; sh1 likewise with src1 row n0 + 4 q + c.
var<workgroup> sh0: array<vec4<f32>, STAGES * TILE_K * RM>;
var<workgroup> sh1: array<vec4<f32>, STAGES * TILE_K * RN>;

// Byte `off` of src0 (little-endian words).
fn src0_byte(off: u32) -> u32 {
    return (src0[off >> 2u] >> ((off & 3u) * 8u)) & 0xFFu;
}

// Bytes off .. off + 3 of src0 as one little-endian word (byte off in bits
// 0..7), at any alignment; the second word is read only when `off` is not
// a multiple of 4.
fn src0_word_at(off: u32) -> u32 {
    let w0 = src0[off >> 2u];
    let sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return w0;
    }
    let w1 = src0[(off >> 2u) + 1u];
    return (w0 >> sh) | (w1 << (32u - sh));
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

// Byte i (0..3) of the word w, sign-extended.
fn word_i8(w: u32, i: u32) -> i32 {
    return bitcast<i32>(w << (24u - 8u * i)) >> 24u;
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

// One q4_K element from its sub-block's scale dj = d * sc, min
// mj = dmin * mn and code q: the one place both q4_K paths compute it.
fn q4k_value(dj: f32, q: u32, mj: f32) -> f32 {
    return dj * f32(q) - mj;
}

// The 6-bit scale and min of q4_K sub-block `sub` (ggml's
// get_scale_min_k4) from the block's scale bytes at s = blk + 4.
fn q4k_scale_min(s: u32, sub: u32) -> vec2<u32> {
    var sc: u32;
    var mn: u32;
    if (sub < 4u) {
        sc = src0_byte(s + sub) & 0x3Fu;
        mn = src0_byte(s + sub + 4u) & 0x3Fu;
    } else {
        sc = (src0_byte(s + sub + 4u) & 0x0Fu) | ((src0_byte(s + sub - 4u) >> 6u) << 4u);
        mn = (src0_byte(s + sub + 4u) >> 4u) | ((src0_byte(s + sub) >> 6u) << 4u);
    }
    return vec2<u32>(sc, mn);
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
    let sm = q4k_scale_min(blk + 4u, sub);
    let dj = src0_f16(blk) * f32(sm.x);
    let mj = src0_f16(blk + 2u) * f32(sm.y);
    return q4k_value(dj, q, mj);
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

// The q4_0 element of code byte i of w (low nibble when lo): (q - 8) * d.
fn q4_0_value(w: u32, i: u32, lo: bool, d: f32) -> f32 {
    let c = (w >> (8u * i)) & 0xFFu;
    let q = select(c >> 4u, c & 0x0Fu, lo);
    return f32(i32(q) - 8) * d;
}

// q4_0, elements k .. k + 3 of `row` (k a multiple of 4: one block, one
// half of its codes): each the production loader's expression.
fn load4_q4_0(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 32u) * 18u + (k / 32u) * 18u;
    let j = k % 32u;
    let d = src0_f16(blk);
    let w = src0_word_at(blk + 2u + (j % 16u));
    let lo = j < 16u;
    return vec4<f32>(
        q4_0_value(w, 0u, lo, d),
        q4_0_value(w, 1u, lo, d),
        q4_0_value(w, 2u, lo, d),
        q4_0_value(w, 3u, lo, d),
    );
}

// q8_0, elements k .. k + 3 of `row` (k a multiple of 4).
fn load4_q8_0(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 32u) * 34u + (k / 32u) * 34u;
    let d = src0_f16(blk);
    let w = src0_word_at(blk + 2u + (k % 32u));
    return vec4<f32>(
        f32(word_i8(w, 0u)) * d,
        f32(word_i8(w, 1u)) * d,
        f32(word_i8(w, 2u)) * d,
        f32(word_i8(w, 3u)) * d,
    );
}

// The low (lo) or high nibble of byte i of w.
fn nibble(w: u32, i: u32, lo: bool) -> u32 {
    let byte = (w >> (8u * i)) & 0xFFu;
    return select(byte >> 4u, byte & 0x0Fu, lo);
}

// q4_K, elements k .. k + 3 of `row` (k a multiple of 4: one sub-block;
// the codes are one aligned word, 144 and 16 + 32 c + l % 32 being
// multiples of 4).
fn load4_q4_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 256u) * 144u + (k / 256u) * 144u;
    let j = k % 256u;
    let c = j / 64u;
    let l = j % 64u;
    let sub = 2u * c + l / 32u;
    let w = src0[(blk + 16u + 32u * c + (l % 32u)) >> 2u];
    let lo = l < 32u;
    let sm = q4k_scale_min(blk + 4u, sub);
    let dj = src0_f16(blk) * f32(sm.x);
    let mj = src0_f16(blk + 2u) * f32(sm.y);
    return vec4<f32>(
        q4k_value(dj, nibble(w, 0u, lo), mj),
        q4k_value(dj, nibble(w, 1u, lo), mj),
        q4k_value(dj, nibble(w, 2u, lo), mj),
        q4k_value(dj, nibble(w, 3u, lo), mj),
    );
}

// The q6_K element of byte i of the low-code word lo_w and the high-code
// word hi_w, in quarter t of its half: (d * sc) * (q - 32).
fn q6k_value(lo_w: u32, hi_w: u32, i: u32, t: u32, sc: i32, d: f32) -> f32 {
    let lo_byte = (lo_w >> (8u * i)) & 0xFFu;
    let lo = select(lo_byte & 0x0Fu, lo_byte >> 4u, t >= 2u);
    let hi = ((hi_w >> (8u * i)) >> (2u * t)) & 3u;
    let q = i32(lo | (hi << 4u)) - 32;
    return d * f32(sc) * f32(q);
}

// q6_K, elements k .. k + 3 of `row` (k a multiple of 4: one 16-element
// scale, four consecutive low and high code bytes).
fn load4_q6_k(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 256u) * 210u + (k / 256u) * 210u;
    let j = k % 256u;
    let h = j / 128u;
    let r = j % 128u;
    let t = r / 32u;
    let l = r % 32u;
    let lo_w = src0_word_at(blk + 64u * h + l + 32u * (t & 1u));
    let hi_w = src0_word_at(blk + 128u + 32u * h + l);
    let sc = src0_i8(blk + 192u + 8u * h + l / 16u + 2u * t);
    let d = src0_f16(blk + 208u);
    return vec4<f32>(
        q6k_value(lo_w, hi_w, 0u, t, sc, d),
        q6k_value(lo_w, hi_w, 1u, t, sc, d),
        q6k_value(lo_w, hi_w, 2u, t, sc, d),
        q6k_value(lo_w, hi_w, 3u, t, sc, d),
    );
}

// Elements k .. k + 3 of quantized `row` (k a multiple of 4).
fn load4_src0(row: u32, k: u32) -> vec4<f32> {
    switch SRC0_DTYPE {
        case 1u: { return load4_q4_0(row, k); }
        case 2u: { return load4_q8_0(row, k); }
        case 3u: { return load4_q4_k(row, k); }
        default: { return load4_q6_k(row, k); }
    }
}

// Rows row .. row + 3 of src0 at one k (f32 only), zero past the last row
// and past K.
fn col4_src0_f32(row: u32, k: u32) -> vec4<f32> {
    let m = params.m;
    let kdim = params.k;
    var v = vec4<f32>(0.0);
    if (k < kdim) {
        if (row < m) { v.x = bitcast<f32>(src0[row * kdim + k]); }
        if (row + 1u < m) { v.y = bitcast<f32>(src0[(row + 1u) * kdim + k]); }
        if (row + 2u < m) { v.z = bitcast<f32>(src0[(row + 2u) * kdim + k]); }
        if (row + 3u < m) { v.w = bitcast<f32>(src0[(row + 3u) * kdim + k]); }
    }
    return v;
}

// Rows col .. col + 3 of src1 at one k, zero past the last row and past K.
fn col4_src1(col: u32, k: u32) -> vec4<f32> {
    let n = params.n;
    let s = params.stride_src1;
    var v = vec4<f32>(0.0);
    if (k < params.k) {
        if (col < n) { v.x = src1[col * s + k]; }
        if (col + 1u < n) { v.y = src1[(col + 1u) * s + k]; }
        if (col + 2u < n) { v.z = src1[(col + 2u) * s + k]; }
        if (col + 3u < n) { v.w = src1[(col + 3u) * s + k]; }
    }
    return v;
}

// Vector units of every tile: src1's UNITS1, after them src0's UNITS0 when
// src0 is f32 (a constant once the pipeline's overrides are applied).
fn vec_units() -> u32 {
    if (SRC0_DTYPE == 0u) {
        return UNITS1 + UNITS0;
    }
    return UNITS1;
}

// Vector unit u of the tile at k0.
fn load_vec_unit(u: u32, k0: u32, m0: u32, n0: u32) -> vec4<f32> {
    if (u < UNITS1) {
        return col4_src1(n0 + 4u * (u / TILE_K), k0 + u % TILE_K);
    }
    let v = u - UNITS1;
    return col4_src0_f32(m0 + 4u * (v / TILE_K), k0 + v % TILE_K);
}

// Stores vector unit u, as `load_vec_unit` loaded it, to buffer `buf`: one
// whole vec4.
fn store_vec_unit(u: u32, buf: u32, x: vec4<f32>) {
    if (u < UNITS1) {
        sh1[buf * TILE_K * RN + (u % TILE_K) * RN + u / TILE_K] = x;
    } else {
        let v = u - UNITS1;
        sh0[buf * TILE_K * RM + (v % TILE_K) * RM + v / TILE_K] = x;
    }
}

// Stages src0 of a quantized dtype for the tile at k0 (k0 < K) into buffer
// `buf`. TILE_K a multiple of 4: one thread per four rows at four
// consecutive k (quad kq of group q, consecutive threads along k), each
// row decoded by one four-k call, the thread storing the four whole
// vectors (rows past M, and k past K, as 0). Otherwise one thread per
// vector, one production loader call per element.
fn stage_src0_rows(li: u32, k0: u32, buf: u32, m0: u32) {
    let m = params.m;
    let kdim = params.k;
    let base = buf * TILE_K * RM;
    if (TILE_K % 4u == 0u) {
        let quads = TILE_K / 4u;
        for (var u = li; u < RM * quads; u += WG_M * WG_N) {
            let q = u / quads;
            let kk = 4u * (u % quads);
            let row0 = m0 + 4u * q;
            let k = k0 + kk;
            var r0 = vec4<f32>(0.0);
            var r1 = vec4<f32>(0.0);
            var r2 = vec4<f32>(0.0);
            var r3 = vec4<f32>(0.0);
            // K is a multiple of the block (32 or 256), so the four k are
            // all below K or all past it.
            if (k < kdim) {
                if (row0 < m) { r0 = load4_src0(row0, k); }
                if (row0 + 1u < m) { r1 = load4_src0(row0 + 1u, k); }
                if (row0 + 2u < m) { r2 = load4_src0(row0 + 2u, k); }
                if (row0 + 3u < m) { r3 = load4_src0(row0 + 3u, k); }
            }
            let at = base + kk * RM + q;
            sh0[at] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
            sh0[at + RM] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
            sh0[at + 2u * RM] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
            sh0[at + 3u * RM] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
        }
    } else {
        let len = min(TILE_K, kdim - k0);
        for (var u = li; u < RM * len; u += WG_M * WG_N) {
            let q = u / len;
            let kk = u % len;
            let row0 = m0 + 4u * q;
            var v = vec4<f32>(0.0);
            if (row0 < m) { v.x = load_src0(row0, k0 + kk); }
            if (row0 + 1u < m) { v.y = load_src0(row0 + 1u, k0 + kk); }
            if (row0 + 2u < m) { v.z = load_src0(row0 + 2u, k0 + kk); }
            if (row0 + 3u < m) { v.w = load_src0(row0 + 3u, k0 + kk); }
            sh0[base + kk * RM + q] = v;
        }
    }
}

// The accumulators: cJ_G is column J of the thread's tile
// (n0 + 4 (h WG_N + lid.y) + c for J = 4 h + c), rows of group G
// (m0 + 4 (G WG_M + lid.x) + 0..3).
struct Acc {
    c0_0: vec4<f32>,
    c1_0: vec4<f32>,
    c2_0: vec4<f32>,
    c3_0: vec4<f32>,
    c4_0: vec4<f32>,
    c5_0: vec4<f32>,
    c6_0: vec4<f32>,
    c7_0: vec4<f32>,
    c0_1: vec4<f32>,
    c1_1: vec4<f32>,
    c2_1: vec4<f32>,
    c3_1: vec4<f32>,
    c4_1: vec4<f32>,
    c5_1: vec4<f32>,
    c6_1: vec4<f32>,
    c7_1: vec4<f32>,
}

// The products of one k: a0 (a1) the thread's row group 0 (1), b0 (b1) its
// column group 0 (1); a1 and b1 are unused when VM (VN) is 1.
fn step(acc: ptr<function, Acc>, a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>) {
    (*acc).c0_0 += a0 * b0.x;
    (*acc).c1_0 += a0 * b0.y;
    (*acc).c2_0 += a0 * b0.z;
    (*acc).c3_0 += a0 * b0.w;
    if (VN == 2u) {
        (*acc).c4_0 += a0 * b1.x;
        (*acc).c5_0 += a0 * b1.y;
        (*acc).c6_0 += a0 * b1.z;
        (*acc).c7_0 += a0 * b1.w;
    }
    if (VM == 2u) {
        (*acc).c0_1 += a1 * b0.x;
        (*acc).c1_1 += a1 * b0.y;
        (*acc).c2_1 += a1 * b0.z;
        (*acc).c3_1 += a1 * b0.w;
        if (VN == 2u) {
            (*acc).c4_1 += a1 * b1.x;
            (*acc).c5_1 += a1 * b1.y;
            (*acc).c6_1 += a1 * b1.z;
            (*acc).c7_1 += a1 * b1.w;
        }
    }
}

// The staged vector at index i of sh0 when the thread has a second row
// group (VM = 2), else zero without a load; `b_hi` likewise for sh1.
fn a_hi(i: u32) -> vec4<f32> {
    if (VM == 2u) {
        return sh0[i];
    }
    return vec4<f32>(0.0);
}

fn b_hi(i: u32) -> vec4<f32> {
    if (VN == 2u) {
        return sh1[i];
    }
    return vec4<f32>(0.0);
}

// The products of staged k row kk: a at a_at + kk RM, b at b_at + kk RN.
fn step_at(acc: ptr<function, Acc>, a: u32, b: u32) {
    step(acc, sh0[a], a_hi(a + WG_M), sh1[b], b_hi(b + WG_N));
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
    let units = vec_units();

    var acc: Acc;
    acc.c0_0 = vec4<f32>(0.0);
    acc.c1_0 = vec4<f32>(0.0);
    acc.c2_0 = vec4<f32>(0.0);
    acc.c3_0 = vec4<f32>(0.0);
    acc.c4_0 = vec4<f32>(0.0);
    acc.c5_0 = vec4<f32>(0.0);
    acc.c6_0 = vec4<f32>(0.0);
    acc.c7_0 = vec4<f32>(0.0);
    acc.c0_1 = vec4<f32>(0.0);
    acc.c1_1 = vec4<f32>(0.0);
    acc.c2_1 = vec4<f32>(0.0);
    acc.c3_1 = vec4<f32>(0.0);
    acc.c4_1 = vec4<f32>(0.0);
    acc.c5_1 = vec4<f32>(0.0);
    acc.c6_1 = vec4<f32>(0.0);
    acc.c7_1 = vec4<f32>(0.0);

    // The first tile, straight to buffer 0.
    if (kdim > 0u) {
        for (var u = li; u < units; u += threads) {
            store_vec_unit(u, 0u, load_vec_unit(u, 0u, m0, n0));
        }
        if (SRC0_DTYPE != 0u) {
            stage_src0_rows(li, 0u, 0u, m0);
        }
    }
    workgroupBarrier(); // the first tile staged

    var buf = 0u;
    for (var k0 = 0u; k0 < kdim; k0 += TILE_K) {
        // The next tile's first four vector units of this thread, in
        // flight while this tile's products run.
        let k1 = k0 + TILE_K;
        let more = k1 < kdim;
        let u0 = li;
        let u1 = li + threads;
        let u2 = li + 2u * threads;
        let u3 = li + 3u * threads;
        var pre0 = vec4<f32>(0.0);
        var pre1 = vec4<f32>(0.0);
        var pre2 = vec4<f32>(0.0);
        var pre3 = vec4<f32>(0.0);
        if (more && u0 < units) {
            pre0 = load_vec_unit(u0, k1, m0, n0);
        }
        if (more && u1 < units) {
            pre1 = load_vec_unit(u1, k1, m0, n0);
        }
        if (more && u2 < units) {
            pre2 = load_vec_unit(u2, k1, m0, n0);
        }
        if (more && u3 < units) {
            pre3 = load_vec_unit(u3, k1, m0, n0);
        }

        // The products, k in order: four staged k rows per iteration, then
        // the rest of a partial tile one at a time.
        let a_at = buf * TILE_K * RM + lid.x;
        let b_at = buf * TILE_K * RN + lid.y;
        let kend = min(TILE_K, kdim - k0);
        var kk = 0u;
        for (; kk + 4u <= kend; kk += 4u) {
            let a = a_at + kk * RM;
            let b = b_at + kk * RN;
            step_at(&acc, a, b);
            step_at(&acc, a + RM, b + RN);
            step_at(&acc, a + 2u * RM, b + 2u * RN);
            step_at(&acc, a + 3u * RM, b + 3u * RN);
        }
        for (; kk < kend; kk++) {
            step_at(&acc, a_at + kk * RM, b_at + kk * RN);
        }

        // The next tile into the other buffer: every thread has passed the
        // previous iteration's barrier, so nobody reads it any more.
        let nbuf = 1u - buf;
        if (more) {
            if (u0 < units) {
                store_vec_unit(u0, nbuf, pre0);
            }
            if (u1 < units) {
                store_vec_unit(u1, nbuf, pre1);
            }
            if (u2 < units) {
                store_vec_unit(u2, nbuf, pre2);
            }
            if (u3 < units) {
                store_vec_unit(u3, nbuf, pre3);
            }
            for (var u = li + 4u * threads; u < units; u += threads) {
                store_vec_unit(u, nbuf, load_vec_unit(u, k1, m0, n0));
            }
            if (SRC0_DTYPE != 0u) {
                stage_src0_rows(li, k1, nbuf, m0);
            }
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
    store4(gm0, gn0, acc.c0_0);
    store4(gm0, gn0 + 1u, acc.c1_0);
    store4(gm0, gn0 + 2u, acc.c2_0);
    store4(gm0, gn0 + 3u, acc.c3_0);
    if (VN == 2u) {
        store4(gm0, gn1, acc.c4_0);
        store4(gm0, gn1 + 1u, acc.c5_0);
        store4(gm0, gn1 + 2u, acc.c6_0);
        store4(gm0, gn1 + 3u, acc.c7_0);
    }
    if (VM == 2u) {
        store4(gm1, gn0, acc.c0_1);
        store4(gm1, gn0 + 1u, acc.c1_1);
        store4(gm1, gn0 + 2u, acc.c2_1);
        store4(gm1, gn0 + 3u, acc.c3_1);
        if (VN == 2u) {
            store4(gm1, gn1, acc.c4_1);
            store4(gm1, gn1 + 1u, acc.c5_1);
            store4(gm1, gn1 + 2u, acc.c6_1);
            store4(gm1, gn1 + 3u, acc.c7_1);
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
