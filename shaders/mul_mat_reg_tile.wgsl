// mul_mat_reg_tile: register-tiled GEMM over ggml blocks (seed 004), the
// production shader (until 2026-12-02 the candidate mul_mat_fast; the
// seed's 4 x 4 design it replaced is shaders/candidates/mul_mat_4x4.wgsl,
// bit-identical on the LFM2.5 sweep). It keeps mul_mat_unrolled's
// products (named vec4 accumulators, `const TILE_M`, `const TILE_N` each
// 4 or 8: 4 x 4 since 2026-12-03, 8 x 4 before) and changes what feeds them:
//   1. padded staged tiles: the k rows of sh0 (sh1) are SM = RM | 1 (SN)
//      vectors apart, an odd stride, so the eight lanes of one 128-bit
//      store phase (consecutive k, or consecutive row groups) hit eight
//      different 16-byte bank groups; mul_mat_unrolled's stride of 16
//      vectors put every lane of a phase in one group (8-way conflicts on
//      every staging store);
//   2. the whole next tile of f32 units in registers during the products
//      (up to 8 per thread: all of them at the default geometry and at
//      TILE_K 32), so no global load waits after the products;
//   3. quantized rows (TILE_K a multiple of 16): each 16-k group of a row
//      has one scale (and min) for every dtype, so a tile's scales are
//      decoded once per (row, group) by one thread into workgroup memory
//      (`shh`, two slots), two tiles ahead of their use, and the code
//      words of the next tile are fetched into registers before the
//      products and decoded after them with the staged scales: per
//      element a shift, a mask, a conversion and the dtype's one or two
//      operations. No barrier is added: the scales of tile t + 2 are
//      written during tile t, into the slot tile t's codes were decoded
//      from before the previous barrier;
//   4. a whole tile's products (TILE_K a multiple of 8, at most 64)
//      written out without a loop, so naga's loop bounding (a counter and
//      a test each iteration, which kept the driver from unrolling the
//      loop) has nothing to count there (nor in the staging loop past
//      the prefetch slots, behind a test on override constants), and f32
//      units of four rows wholly inside the matrix loaded without a test
//      each: on the H200 10-14% off every LFM2.5 shape, bit-identical.
// Where the adapter has subgroups the shim also builds this source's
// subgroup form (see "The subgroup form" below the products): src1's
// staged vectors exchanged between lanes by subgroupShuffle, the same
// bits; both forms are gated.
// Quantized src0 at n >= 32 goes through the `dequant` pre-pass (ABI
// below; device::wgpu::QuantPath::Dequant): the whole of src0 decoded once
// into an f32 scratch, then this GEMM's f32 pipeline over it.
// H200 (2026-12-04, `ex_wgpu_gemm_bench`, naga's runtime checks on, the
// runs of a job in one compute pass, cuBLAS SGEMM with TF32 off in the
// same run): f32 0.53x-0.66x cuBLAS on the LFM2.5 shapes (the 4 x 4
// design, 2026-12-02: 0.11x-0.25x); the quantized dtypes through the
// pre-pass 1.07x-1.18x of the f32 time on the same shape.
//
//   dst[n * stride_dst + m] = sum over k of src0[m, k] * src1[n * stride_src1 + k]
//
// The contract is `oracle::ggml::mul_mat` (core/src/ggml/mul_mat.rs); the
// element loaders below are the 4 x 4 design's
// (candidates/mul_mat_4x4.wgsl), and the staged-scale decoders compute each element with the same expression on the same
// fields (the scale and min products are the 4 x 4 design's loader's
// sub-expressions, computed once and stored exactly), both following the
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
//   Pipeline-overridable constants: SRC0_DTYPE, WG_M, WG_N, TILE_K; and
//   SG_LANES (the adapter's subgroup size) in the subgroup form only, which
//   the shim derives from a source with `// SUBGROUP: ` lines
//   (device::wgpu::subgroup; a candidate without them runs plain).
//   Declared for the shim: const TILE_M, TILE_N, STAGES.
//
// Geometry: a WG_M x WG_N workgroup computes a (TILE_M WG_M) x (TILE_N WG_N)
// block of dst (16 x 16 threads of 4 x 4 outputs by default: 64 x 64).
// Along m the block is RM = WG_M VM groups of four rows; invocation x owns
// groups x and x + WG_M (TILE_M = 8) or x alone (TILE_M = 4), likewise
// along n with y. k
// advances TILE_K at a time (default 16: one q6_K scale, half a q4_K
// sub-block or q4_0 / q8_0 block; TILE_K=32: half the barriers, twice the
// prefetch registers, which the shim's WgpuEngine::default_geometry takes
// on grids of few workgroups) through STAGES = 2 buffers. Workgroup memory: 2 x 16 TILE_K (SM + SN) bytes of tiles plus
// 2 x 8 (TILE_M WG_M) ceil(TILE_K / 16) of scales, a little more than
// `Geometry::workgroup_bytes` counts (the padding and the scales, which
// `Geometry::padded_workgroup_bytes` counts; wgpu 30 does not check a
// pipeline's workgroup memory against the adapter's limit): 18 KiB at the default, 36 KiB
// at TILE_K 32.
//
// Staging: every vec4 of the staged tiles has exactly one writer, which
// writes the whole vector (WGSL lets a component store touch the whole
// vector, so four threads storing the four components of one vector would
// race); every scale (vec2) of `shh` likewise. src1, and src0 when it is
// f32, are staged as vector units: four rows (columns) at one k,
// consecutive threads along k so that global reads coalesce; unit u of a
// part is group u / TILE_K at k0 + u % TILE_K (past K, past M or N:
// zeros). Quantized src0 with TILE_K a multiple of 16 is staged in code
// units of four rows at four consecutive k (group q, quad kq: four whole
// vectors from one code word per row); consecutive threads take four row
// groups, then the quads (when RM is a multiple of 4), so a 128-bit store
// phase is conflict-free and a global read covers four rows. With another
// TILE_K, src0 is staged as mul_mat_unrolled does (four k per call, or one
// 4 x 4 design loader call per element).
//
// Arithmetic order: each output is one f32 accumulator (a component of one
// of the vec4 accumulators below) that starts at +0.0 and adds
// w[m, k] * x[n, k] for k = 0, 1, .., K - 1 in order, exactly the
// contract's order (rule MM-ORDER); a vec4 multiply-add is four
// independent component operations, each rounded as the scalar one. Every
// dequantized value is the 4 x 4 design's loader's expression on the same
// fields (q4_K through the one function `q4k_value`, q6_K as
// `(d * f32(sc)) * f32(q)`, which is how `d * f32(sc) * f32(q)` groups),
// so the bench's SHADER= diff against the 4 x 4 design is expected
// to be bit-identical. WGSL allows the compiler to fuse the multiply-add,
// so the gate's EXACT arm makes every order and fusion give the same bits
// and its RANDOM arm bounds the rest.

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
override WG_M: u32 = 16u;
override WG_N: u32 = 16u;
// k elements staged per step.
override TILE_K: u32 = 16u;

// Outputs per invocation along m and n, each 4 or 8 (the products below
// are written out for both). 4 x 4 at WG 16 x 16 (a 64 x 64 block of 256
// invocations): on the H200 1.14x-1.27x the 8 x 4 tile at WG 8 x 16 (the
// same block, half the invocations), bit-identical, since the shapes with
// few workgroups then have twice the warps per SM.
const TILE_M: u32 = 4u;
const TILE_N: u32 = 4u;
// Staging buffers in workgroup memory.
const STAGES: u32 = 2u;

// Groups of four rows (columns) per invocation.
const VM: u32 = TILE_M / 4u;
const VN: u32 = TILE_N / 4u;
// Vectors per staged k row of src0 (src1), the padded strides of the k
// rows (odd), and the vector units of a tile: src1's, then src0's when it
// is f32 (derived, never set by the pipeline).
override RM: u32 = WG_M * VM;
override RN: u32 = WG_N * VN;
override SM: u32 = RM | 1u;
override SN: u32 = RN | 1u;
override UNITS1: u32 = RN * TILE_K;
override UNITS0: u32 = RM * TILE_K;
// Staged scales: 16-k groups per tile (rounded up, so never 0: the
// staged scales run only when TILE_K is a multiple of 16, but every
// division by GROUPS must be valid), scales per tile (row, group), which
// is also the length of one of the two slots, k quads per tile and the
// code units of a tile (four rows at four k).
override GROUPS: u32 = (TILE_K + 15u) / 16u;
override HDRS: u32 = WG_M * TILE_M * GROUPS;
override HSLOT: u32 = HDRS;
override QK: u32 = TILE_K / 4u;
override CUNITS: u32 = RM * QK;

// The subgroup form's exchange (see "The subgroup form" below the
// products; named overrides are declared before the workgroup arrays,
// whose override-sized lengths naga 30 must meet after them).
// Lanes per subgroup the form is built for: the adapter's subgroup size,
// set by the shim; 0 in the plain form.
override SG_LANES: u32 = 0u;
// Lanes of a subgroup that share one column group: the whole subgroup when
// it fits in a row of WG_M invocations, else a row.
override SG_SPAN: u32 = min(SG_LANES, WG_M);
// SG_SPAN when the exchange applies, else 0: the plain form, and a WG_M
// that SG_LANES neither divides nor is divided by (the lanes sharing a
// column group would not be an aligned block), or a span that is not a
// power of two (not a multiple of SG_C).
override SG_G: u32 = select(0u, SG_SPAN, SG_SPAN > 0u && max(SG_LANES, WG_M) % max(SG_SPAN, 1u) == 0u && (SG_SPAN & (max(SG_SPAN, 1u) - 1u)) == 0u);
// k rows of a step of eight that one read per lane covers: every lane of a
// column group reads row lk = id % SG_C of each SG_C rows (lanes past SG_C
// repeat the first SG_C's reads).
override SG_C: u32 = max(min(SG_G, 8u), 1u);

// Staged tiles, k-major, four consecutive rows to a vector:
// sh0[b * TILE_K * SM + kk * SM + q][c] is src0 row m0 + 4 q + c at
// k0 + kk in buffer b (q < RM; the vector at q = RM when SM > RM is
// padding, never read); sh1 likewise with src1 row n0 + 4 q + c.
var<workgroup> sh0: array<vec4<f32>, STAGES * TILE_K * SM>;
var<workgroup> sh1: array<vec4<f32>, STAGES * TILE_K * SN>;
// Staged scales of quantized src0: shh[s * HSLOT + r * GROUPS + g] is
// (scale, min) of row m0 + r at k 16 g of the tile whose slot is s (tile
// index mod 2): q4_0 / q8_0 (d, 0), q4_K (d * sc, dmin * mn), q6_K
// (d * sc, 0).
var<workgroup> shh: array<vec2<f32>, 2u * HSLOT>;

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

// The two aligned words holding bytes off .. off + 3 (the second 0 when
// `off` is a multiple of 4, and then not read), for `join_at`.
fn src0_words_at(off: u32) -> vec2<u32> {
    var w = vec2<u32>(src0[off >> 2u], 0u);
    if ((off & 3u) != 0u) {
        w.y = src0[(off >> 2u) + 1u];
    }
    return w;
}

// Bytes off .. off + 3 from the words `src0_words_at(off)` fetched: the
// value `src0_word_at(off)` reads.
fn join_at(w: vec2<u32>, off: u32) -> u32 {
    let sh = (off & 3u) * 8u;
    if (sh == 0u) {
        return w.x;
    }
    return (w.x >> sh) | (w.y << (32u - sh));
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
    return word_f16(src0[off >> 2u], off);
}

// The f16 field at even byte `off` from the aligned word w holding it.
fn word_f16(w: u32, off: u32) -> f32 {
    return f16_to_f32((w >> ((off & 2u) * 8u)) & 0xFFFFu);
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
// mj = dmin * mn and code q: the one place every q4_K path computes it.
fn q4k_value(dj: f32, q: u32, mj: f32) -> f32 {
    return dj * f32(q) - mj;
}

// The 6-bit scale and min of q4_K sub-block `sub` (ggml's
// get_scale_min_k4) from the block's three words of scale bytes
// (bytes 4..15 of the block: s0 bytes 0..3, s1 4..7, s2 8..11).
fn q4k_scale_min(s0: u32, s1: u32, s2: u32, sub: u32) -> vec2<u32> {
    var sc: u32;
    var mn: u32;
    if (sub < 4u) {
        sc = scale_byte(s0, s1, s2, sub) & 0x3Fu;
        mn = scale_byte(s0, s1, s2, sub + 4u) & 0x3Fu;
    } else {
        sc = (scale_byte(s0, s1, s2, sub + 4u) & 0x0Fu) | ((scale_byte(s0, s1, s2, sub - 4u) >> 6u) << 4u);
        mn = (scale_byte(s0, s1, s2, sub + 4u) >> 4u) | ((scale_byte(s0, s1, s2, sub) >> 6u) << 4u);
    }
    return vec2<u32>(sc, mn);
}

// Scale byte i (0..11) of the three words of a q4_K block's scales.
fn scale_byte(s0: u32, s1: u32, s2: u32, i: u32) -> u32 {
    let w = select(select(s2, s1, i < 8u), s0, i < 4u);
    return (w >> (8u * (i % 4u))) & 0xFFu;
}

// The (scale, min) of q4_K sub-block `sub` of the block at byte blk (a
// multiple of 4): d * sc and dmin * mn, from the block's first four words.
fn q4k_dm(w: vec4<u32>, blk: u32, sub: u32) -> vec2<f32> {
    let sm = q4k_scale_min(w.y, w.z, w.w, sub);
    let dj = word_f16(w.x, blk) * f32(sm.x);
    let mj = word_f16(w.x, blk + 2u) * f32(sm.y);
    return vec2<f32>(dj, mj);
}

// The first four words of the q4_K block at byte blk.
fn q4k_head(blk: u32) -> vec4<u32> {
    let a = blk >> 2u;
    return vec4<u32>(src0[a], src0[a + 1u], src0[a + 2u], src0[a + 3u]);
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
    let dm = q4k_dm(q4k_head(blk), blk, sub);
    return q4k_value(dm.x, q, dm.y);
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
// half of its codes): each the 4 x 4 design's loader's expression.
fn load4_q4_0(row: u32, k: u32) -> vec4<f32> {
    let blk = row * (params.k / 32u) * 18u + (k / 32u) * 18u;
    let j = k % 32u;
    let d = src0_f16(blk);
    let w = src0_word_at(blk + 2u + (j % 16u));
    return q4_0_vec(w, j < 16u, d);
}

fn q4_0_vec(w: u32, lo: bool, d: f32) -> vec4<f32> {
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
    return q8_0_vec(w, d);
}

fn q8_0_vec(w: u32, d: f32) -> vec4<f32> {
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
    return q4k_vec(w, l < 32u, q4k_dm(q4k_head(blk), blk, sub));
}

fn q4k_vec(w: u32, lo: bool, dm: vec2<f32>) -> vec4<f32> {
    return vec4<f32>(
        q4k_value(dm.x, nibble(w, 0u, lo), dm.y),
        q4k_value(dm.x, nibble(w, 1u, lo), dm.y),
        q4k_value(dm.x, nibble(w, 2u, lo), dm.y),
        q4k_value(dm.x, nibble(w, 3u, lo), dm.y),
    );
}

// The q6_K code (q - 32) of byte i of the low-code word lo_w and the
// high-code word hi_w, in quarter t of its half.
fn q6k_code(lo_w: u32, hi_w: u32, i: u32, t: u32) -> i32 {
    let lo_byte = (lo_w >> (8u * i)) & 0xFFu;
    let lo = select(lo_byte & 0x0Fu, lo_byte >> 4u, t >= 2u);
    let hi = ((hi_w >> (8u * i)) >> (2u * t)) & 3u;
    return i32(lo | (hi << 4u)) - 32;
}

// Four q6_K elements (d * sc) * (q - 32) from ds = d * sc: the 4 x 4 design's
// loader's `d * f32(sc) * f32(q)`, whose first product is ds.
fn q6k_vec(lo_w: u32, hi_w: u32, t: u32, ds: f32) -> vec4<f32> {
    return vec4<f32>(
        ds * f32(q6k_code(lo_w, hi_w, 0u, t)),
        ds * f32(q6k_code(lo_w, hi_w, 1u, t)),
        ds * f32(q6k_code(lo_w, hi_w, 2u, t)),
        ds * f32(q6k_code(lo_w, hi_w, 3u, t)),
    );
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
    return q6k_vec(lo_w, hi_w, t, d * f32(sc));
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

// ---- Staged scales (quantized src0, TILE_K a multiple of 16) ----

// Whether quantized src0 goes through the staged scales (a constant once
// the pipeline's overrides are applied).
fn staged_scales() -> bool {
    return SRC0_DTYPE != 0u && TILE_K % 16u == 0u;
}

// Byte offset of the block of `row` holding element k, and the dtype's
// block bytes and elements.
fn block_of(row: u32, k: u32) -> u32 {
    switch SRC0_DTYPE {
        case 1u: { return row * (params.k / 32u) * 18u + (k / 32u) * 18u; }
        case 2u: { return row * (params.k / 32u) * 34u + (k / 32u) * 34u; }
        case 3u: { return row * (params.k / 256u) * 144u + (k / 256u) * 144u; }
        default: { return row * (params.k / 256u) * 210u + (k / 256u) * 210u; }
    }
}

// The words the scale of `row`'s 16-k group at k (a multiple of 16) is
// decoded from: q4_0 / q8_0 the word of d; q4_K the block's first four
// words; q6_K the word of d and the word of the group's i8 scale.
fn scale_words(row: u32, k: u32) -> vec4<u32> {
    let blk = block_of(row, k);
    switch SRC0_DTYPE {
        case 3u: { return q4k_head(blk); }
        case 4u: {
            let j = k % 256u;
            let sc_off = blk + 192u + 8u * (j / 128u) + (j % 32u) / 16u + 2u * ((j % 128u) / 32u);
            return vec4<u32>(src0[(blk + 208u) >> 2u], src0[sc_off >> 2u], 0u, 0u);
        }
        default: { return vec4<u32>(src0[blk >> 2u], 0u, 0u, 0u); }
    }
}

// The (scale, min) of `row`'s 16-k group at k from `scale_words(row, k)`:
// exactly the 4 x 4 design's loader's sub-expressions.
fn scale_decode(row: u32, k: u32, w: vec4<u32>) -> vec2<f32> {
    let blk = block_of(row, k);
    let j = k % 256u;
    switch SRC0_DTYPE {
        case 3u: { return q4k_dm(w, blk, 2u * (j / 64u) + (j % 64u) / 32u); }
        case 4u: {
            let sc_off = blk + 192u + 8u * (j / 128u) + (j % 32u) / 16u + 2u * ((j % 128u) / 32u);
            let sc = word_i8(w.y, sc_off & 3u);
            let d = word_f16(w.x, blk + 208u);
            return vec2<f32>(d * f32(sc), 0.0);
        }
        default: { return vec2<f32>(word_f16(w.x, blk), 0.0); }
    }
}

// Scale h (row h / GROUPS, group h % GROUPS) of the tile at k0: the row
// and k it stands for (possibly past M or K: the callers check).
fn scale_row(h: u32, m0: u32) -> u32 {
    return m0 + h / GROUPS;
}

fn scale_k(h: u32, k0: u32) -> u32 {
    return k0 + 16u * (h % GROUPS);
}

// Stores scale h of the tile at k0 into slot `slot` from its words (rows
// past M and groups past K are never read; they are left alone).
fn put_scale(h: u32, k0: u32, slot: u32, m0: u32, w: vec4<u32>) {
    let row = scale_row(h, m0);
    let k = scale_k(h, k0);
    if (row < params.m && k < params.k) {
        shh[slot * HSLOT + h] = scale_decode(row, k, w);
    }
}

// The words of scale h of the tile at k0 (zero past M or K).
fn fetch_scale(h: u32, k0: u32, m0: u32) -> vec4<u32> {
    let row = scale_row(h, m0);
    let k = scale_k(h, k0);
    var w = vec4<u32>(0u);
    if (row < params.m && k < params.k) {
        w = scale_words(row, k);
    }
    return w;
}

// Every scale of the tile at k0 from a thread's first (hl in `main`)
// onwards (first = hl: all of its share; hl + threads: all but the
// prefetched one).
fn stage_scales(first: u32, k0: u32, slot: u32, m0: u32) {
    for (var h = first; h < HDRS; h += WG_M * WG_N) {
        put_scale(h, k0, slot, m0, fetch_scale(h, k0, m0));
    }
}

// Code unit u of a tile: row group (q) and k quad (kq). Consecutive units
// take four row groups, then the quads, when RM is a multiple of 4 (a
// store phase of eight lanes is then conflict-free, SM being odd); else
// the quads first.
fn cunit_q(u: u32) -> u32 {
    if (RM % 4u == 0u) {
        return u % 4u + 4u * (u / (4u * QK));
    }
    return u / QK;
}

fn cunit_kq(u: u32) -> u32 {
    if (RM % 4u == 0u) {
        return (u / 4u) % QK;
    }
    return u % QK;
}

// The code words of elements k .. k + 3 of `row` (k a multiple of 4), as
// aligned words: q4_0 / q8_0 (x, y) the two words holding the four code
// bytes; q4_K x the one aligned word; q6_K (x, y) the low codes, (z, w)
// the high codes.
fn code_words(row: u32, k: u32) -> vec4<u32> {
    let blk = block_of(row, k);
    let j = k % 256u;
    switch SRC0_DTYPE {
        case 1u: { return vec4<u32>(src0_words_at(blk + 2u + (k % 16u)), 0u, 0u); }
        case 2u: { return vec4<u32>(src0_words_at(blk + 2u + (k % 32u)), 0u, 0u); }
        case 3u: {
            return vec4<u32>(src0[(blk + 16u + 32u * (j / 64u) + (j % 32u)) >> 2u], 0u, 0u, 0u);
        }
        default: {
            let h = j / 128u;
            let r = j % 128u;
            let t = r / 32u;
            let l = r % 32u;
            let lo = src0_words_at(blk + 64u * h + l + 32u * (t & 1u));
            let hi = src0_words_at(blk + 128u + 32u * h + l);
            return vec4<u32>(lo, hi);
        }
    }
}

// Elements k .. k + 3 of `row` from `code_words(row, k)` and the staged
// (scale, min) dm of their group: each the 4 x 4 design's loader's
// expression.
fn code_decode(row: u32, k: u32, w: vec4<u32>, dm: vec2<f32>) -> vec4<f32> {
    let blk = block_of(row, k);
    let j = k % 256u;
    switch SRC0_DTYPE {
        case 1u: { return q4_0_vec(join_at(w.xy, blk + 2u + (k % 16u)), k % 32u < 16u, dm.x); }
        case 2u: { return q8_0_vec(join_at(w.xy, blk + 2u + (k % 32u)), dm.x); }
        case 3u: { return q4k_vec(w.x, j % 64u < 32u, dm); }
        default: {
            let h = j / 128u;
            let r = j % 128u;
            let t = r / 32u;
            let l = r % 32u;
            let lo_w = join_at(w.xy, blk + 64u * h + l + 32u * (t & 1u));
            let hi_w = join_at(w.zw, blk + 128u + 32u * h + l);
            return q6k_vec(lo_w, hi_w, t, dm.x);
        }
    }
}

// The code words of unit u of the tile at k0, one vec4 per row
// (`code_words`; zero past M or K).
struct UnitWords {
    r0: vec4<u32>,
    r1: vec4<u32>,
    r2: vec4<u32>,
    r3: vec4<u32>,
}

fn fetch_unit(u: u32, k0: u32, m0: u32) -> UnitWords {
    let row0 = m0 + 4u * cunit_q(u);
    let k = k0 + 4u * cunit_kq(u);
    let m = params.m;
    var w: UnitWords;
    w.r0 = vec4<u32>(0u);
    w.r1 = vec4<u32>(0u);
    w.r2 = vec4<u32>(0u);
    w.r3 = vec4<u32>(0u);
    // K is a multiple of the block (32 or 256), so the four k are all
    // below K or all past it.
    if (k < params.k) {
        if (row0 < m) { w.r0 = code_words(row0, k); }
        if (row0 + 1u < m) { w.r1 = code_words(row0 + 1u, k); }
        if (row0 + 2u < m) { w.r2 = code_words(row0 + 2u, k); }
        if (row0 + 3u < m) { w.r3 = code_words(row0 + 3u, k); }
    }
    return w;
}

// Decodes unit u of the tile at k0 from its words with the scales of slot
// `slot` and stores its four whole vectors (rows past M, k past K: 0) to
// buffer `buf`.
fn put_unit(u: u32, k0: u32, buf: u32, slot: u32, m0: u32, w: UnitWords) {
    let q = cunit_q(u);
    let kk = 4u * cunit_kq(u);
    let row0 = m0 + 4u * q;
    let k = k0 + kk;
    let m = params.m;
    // Scale of local row r, group of kk.
    let hs = slot * HSLOT + 4u * q * GROUPS + kk / 16u;
    var r0 = vec4<f32>(0.0);
    var r1 = vec4<f32>(0.0);
    var r2 = vec4<f32>(0.0);
    var r3 = vec4<f32>(0.0);
    if (k < params.k) {
        if (row0 < m) { r0 = code_decode(row0, k, w.r0, shh[hs]); }
        if (row0 + 1u < m) { r1 = code_decode(row0 + 1u, k, w.r1, shh[hs + GROUPS]); }
        if (row0 + 2u < m) { r2 = code_decode(row0 + 2u, k, w.r2, shh[hs + 2u * GROUPS]); }
        if (row0 + 3u < m) { r3 = code_decode(row0 + 3u, k, w.r3, shh[hs + 3u * GROUPS]); }
    }
    let at = buf * TILE_K * SM + kk * SM + q;
    sh0[at] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
    sh0[at + SM] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
    sh0[at + 2u * SM] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
    sh0[at + 3u * SM] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
}

// Every code unit of the tile at k0 from `first` on (see `stage_scales`).
fn stage_units(first: u32, k0: u32, buf: u32, slot: u32, m0: u32) {
    for (var u = first; u < CUNITS; u += WG_M * WG_N) {
        put_unit(u, k0, buf, slot, m0, fetch_unit(u, k0, m0));
    }
}

// ---- f32 vector units and the unrolled fallback ----

// Rows row .. row + 3 of src0 at one k (f32 only), zero past the last row
// and past K.
fn col4_src0_f32(row: u32, k: u32) -> vec4<f32> {
    let m = params.m;
    let kdim = params.k;
    let at = row * kdim + k;
    // A whole group inside the matrix: four loads, no test each.
    if (k < kdim && row + 3u < m) {
        return vec4<f32>(
            bitcast<f32>(src0[at]),
            bitcast<f32>(src0[at + kdim]),
            bitcast<f32>(src0[at + 2u * kdim]),
            bitcast<f32>(src0[at + 3u * kdim]),
        );
    }
    var v = vec4<f32>(0.0);
    if (k < kdim) {
        if (row < m) { v.x = bitcast<f32>(src0[row * kdim + k]); }
        if (row + 1u < m) { v.y = bitcast<f32>(src0[(row + 1u) * kdim + k]); }
        if (row + 2u < m) { v.z = bitcast<f32>(src0[(row + 2u) * kdim + k]); }
    }
    return v;
}

// Rows col .. col + 3 of src1 at one k, zero past the last row and past K.
fn col4_src1(col: u32, k: u32) -> vec4<f32> {
    let n = params.n;
    let s = params.stride_src1;
    let at = col * s + k;
    if (k < params.k && col + 3u < n) {
        return vec4<f32>(src1[at], src1[at + s], src1[at + 2u * s], src1[at + 3u * s]);
    }
    var v = vec4<f32>(0.0);
    if (k < params.k) {
        if (col < n) { v.x = src1[col * s + k]; }
        if (col + 1u < n) { v.y = src1[(col + 1u) * s + k]; }
        if (col + 2u < n) { v.z = src1[(col + 2u) * s + k]; }
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
        sh1[buf * TILE_K * SN + (u % TILE_K) * SN + u / TILE_K] = x;
    } else {
        let v = u - UNITS1;
        sh0[buf * TILE_K * SM + (v % TILE_K) * SM + v / TILE_K] = x;
    }
}

// Prefetch slot i (0..7) of thread li: vector unit li + i threads of the
// tile at k0, loaded when there is a next tile; stored to `buf` after the
// products. A slot no thread uses (i threads >= units: a constant once the
// pipeline's overrides are applied) is compiled away and holds no
// registers.
fn pre_load(i: u32, li: u32, more: bool, units: u32, k0: u32, m0: u32, n0: u32) -> vec4<f32> {
    let u = li + i * WG_M * WG_N;
    if (i * WG_M * WG_N < units && more && u < units) {
        return load_vec_unit(u, k0, m0, n0);
    }
    return vec4<f32>(0.0);
}

fn pre_store(i: u32, li: u32, units: u32, buf: u32, x: vec4<f32>) {
    let u = li + i * WG_M * WG_N;
    if (i * WG_M * WG_N < units && u < units) {
        store_vec_unit(u, buf, x);
    }
}

// Stages src0 of a quantized dtype for the tile at k0 (k0 < K) into buffer
// `buf` when TILE_K is not a multiple of 16 (mul_mat_unrolled's staging).
// TILE_K a multiple of 4: one thread per four rows at four consecutive k,
// each row decoded by one four-k call, the thread storing the four whole
// vectors (rows past M, and k past K, as 0). Otherwise one thread per
// vector, one 4 x 4 design loader call per element.
fn stage_src0_rows(li: u32, k0: u32, buf: u32, m0: u32) {
    let m = params.m;
    let kdim = params.k;
    let base = buf * TILE_K * SM;
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
            let at = base + kk * SM + q;
            sh0[at] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
            sh0[at + SM] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
            sh0[at + 2u * SM] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
            sh0[at + 3u * SM] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
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
            sh0[base + kk * SM + q] = v;
        }
    }
}

// ---- Products and stores ----

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

// The products of staged k row kk: a at a_at + kk SM, b at b_at + kk SN.
fn step_at(acc: ptr<function, Acc>, a: u32, b: u32) {
    step(acc, sh0[a], a_hi(a + WG_M), sh1[b], b_hi(b + WG_N));
}

// The products of the staged k rows at a, b and the three after each.
fn step4(acc: ptr<function, Acc>, a: u32, b: u32) {
    step_at(acc, a, b);
    step_at(acc, a + SM, b + SN);
    step_at(acc, a + 2u * SM, b + 2u * SN);
    step_at(acc, a + 3u * SM, b + 3u * SN);
}

// The products of the staged k rows at a, b and the seven after each.
fn step8(acc: ptr<function, Acc>, a: u32, b: u32) {
    step4(acc, a, b);
    step4(acc, a + 4u * SM, b + 4u * SN);
}

// ---- The subgroup form ----
//
// Where the adapter has subgroups (WGSL's `subgroups` extension), the shim
// builds a second form of this source (device::wgpu::subgroup): the text
// with `enable subgroups;` first and every line whose comment begins
// `SUBGROUP:` replaced by the text after that word (its indentation
// kept), the override SG_LANES set to the adapter's subgroup size. The
// plain form is the text as it stands: SG_LANES is 0, the `sg_`
// functions below return their plain values, and every exchange is
// behind a test on SG_G (an override constant, 0 there), so the driver
// drops it and the plain form computes what it computed before.
//
// What the subgroup form changes: in a whole step of eight k (`step8_sg`),
// the lanes of one subgroup that share a column group (the same lid.y)
// no longer each read the eight staged src1 vectors of that group from
// workgroup memory. Each lane reads one of them (k row j + lk), and every
// lane takes row j + i from the lane that read it (subgroupShuffle): one
// workgroup-memory read of src1 per lane per SG_C k rows instead of one a
// k row. The products are `step`'s, on the same values in the same k
// order (rule MM-ORDER): only where an operand is read from changes, so
// the two forms give the same bits (the gate runs both).
//
// What WGSL guarantees, and so what is checked at run time (W3C WGSL,
// "Subgroup Built-in Functions" and the built-in values
// `subgroup_invocation_id`, `subgroup_size`): the id is 0 ..
// subgroup_size - 1 within the subgroup; nothing relates it to
// local_invocation_index, the size may differ from the adapter's (Vulkan's
// varying subgroup size, which wgpu allows), and a subgroup may have
// inactive invocations. The exchange assumes subgroups of SG_LANES lanes,
// all active, holding local_invocation_index base .. base + SG_LANES - 1 in
// id order with base a multiple of SG_LANES (what NVIDIA and lavapipe do).
// `sg_plan` checks exactly that per subgroup; a subgroup without it reads
// src1 as the plain form does. subgroupShuffle is called only in control
// flow uniform within the subgroup (the branch on the plan, which is the
// same for every lane of a subgroup) with every lane active.

// The subgroup operations: plain values here, the builtins in the
// subgroup form (never called in the plain form).
fn sg_shuffle4(v: vec4<f32>, lane: u32) -> vec4<f32> {
    return v; // SUBGROUP: return subgroupShuffle(v, lane);
}

fn sg_all(p: bool) -> bool {
    return false; // SUBGROUP: return subgroupAll(p);
}

fn sg_first(v: u32) -> u32 {
    return v; // SUBGROUP: return subgroupBroadcastFirst(v);
}

fn sg_active() -> u32 {
    return 0u; // SUBGROUP: return subgroupAdd(1u);
}

// The lane's rank among the subgroup's active lanes in id order: its
// subgroup_invocation_id when every lane is active. (The built-in value
// itself is not used: naga 30 rejects an entry point that takes it once
// the pipeline's overrides are applied, "Entry point main at Compute is
// invalid".)
fn sg_rank() -> u32 {
    return 0u; // SUBGROUP: return subgroupExclusiveAdd(1u);
}

// One lane's part in the exchange: `on` when its subgroup has the layout
// the exchange assumes (the same for every lane of a subgroup), g0 the id
// of the first lane of its column group, lk the k row it reads of each
// SG_C.
struct SgPlan {
    on: bool,
    g0: u32,
    lk: u32,
}

// The plan of the invocation at local index li in a subgroup of sg_size
// lanes (0 in the plain form). Every lane of the subgroup reaches the four
// subgroup operations (uniform control flow): the test before them is on
// override constants only. With every lane active (`whole`), the rank is
// the lane's subgroup_invocation_id, the id subgroupShuffle takes.
fn sg_plan(li: u32, sg_size: u32) -> SgPlan {
    var p = SgPlan(false, 0u, 0u);
    if (SG_G == 0u) {
        return p;
    }
    let sg_id = sg_rank();
    let base = li - sg_id;
    // (Divisors kept nonzero: the plain form's SG_LANES and SG_G are 0,
    // and naga folds a division by a zero constant even where it cannot
    // run.)
    let lined = sg_size == SG_LANES && sg_id <= li && base % max(SG_LANES, 1u) == 0u;
    let same = sg_first(base) == base;
    let whole = sg_active() == SG_LANES;
    p.on = sg_all(lined && same) && whole;
    p.g0 = sg_id - sg_id % max(SG_G, 1u);
    p.lk = sg_id % SG_C;
    return p;
}

// Staged k row j of a step of eight through the exchange: the lane reads
// its row of the SG_C starting at j when j starts them, then every lane
// takes row j from lane g0 + j % SG_C of its column group.
fn sg_step(acc: ptr<function, Acc>, j: u32, a: u32, b: u32, plan: SgPlan, held: ptr<function, vec4<f32>>, held_hi: ptr<function, vec4<f32>>) {
    if (j % SG_C == 0u) {
        *held = sh1[b + (j + plan.lk) * SN];
        *held_hi = b_hi(b + WG_N + (j + plan.lk) * SN);
    }
    let src = plan.g0 + j % SG_C;
    var x_hi = vec4<f32>(0.0);
    if (VN == 2u) {
        x_hi = sg_shuffle4(*held_hi, src);
    }
    step(acc, sh0[a + j * SM], a_hi(a + WG_M + j * SM), sg_shuffle4(*held, src), x_hi);
}

// step8 (the staged k rows at a, b and the seven after each), src1's
// vectors exchanged in the subgroup when `plan` is on; else step8 itself.
fn step8_sg(acc: ptr<function, Acc>, a: u32, b: u32, plan: SgPlan) {
    if (SG_G == 0u || !plan.on) {
        step8(acc, a, b);
        return;
    }
    var held = vec4<f32>(0.0);
    var held_hi = vec4<f32>(0.0);
    sg_step(acc, 0u, a, b, plan, &held, &held_hi);
    sg_step(acc, 1u, a, b, plan, &held, &held_hi);
    sg_step(acc, 2u, a, b, plan, &held, &held_hi);
    sg_step(acc, 3u, a, b, plan, &held, &held_hi);
    sg_step(acc, 4u, a, b, plan, &held, &held_hi);
    sg_step(acc, 5u, a, b, plan, &held, &held_hi);
    sg_step(acc, 6u, a, b, plan, &held, &held_hi);
    sg_step(acc, 7u, a, b, plan, &held, &held_hi);
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
    // SUBGROUP: @builtin(subgroup_size) sg_size: u32,
) {
    let kdim = params.k;
    let m0 = wg.x * WG_M * TILE_M;
    let n0 = wg.y * WG_N * TILE_N;
    let threads = WG_M * WG_N;
    let units = vec_units();
    let scaled = staged_scales();
    // This thread's first scale: the threads in reverse order, so that
    // when a tile has fewer scales and code units than threads (TILE_K 16:
    // half as many), the last threads decode the scales and the first
    // ones the codes.
    let hl = threads - 1u - li;
    // This lane's part in the subgroup form's exchange (off in the plain
    // form).
    let plan = sg_plan(li, 0u); // SUBGROUP: let plan = sg_plan(li, sg_size);

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

    // The first tile's vector units straight to buffer 0; with staged
    // scales, the scales of the first two tiles (slots 0 and 1), then,
    // after a barrier, the first tile's codes.
    if (kdim > 0u) {
        for (var u = li; u < units; u += threads) {
            store_vec_unit(u, 0u, load_vec_unit(u, 0u, m0, n0));
        }
        if (scaled) {
            stage_scales(hl, 0u, 0u, m0);
            if (TILE_K < kdim) {
                stage_scales(hl, TILE_K, 1u, m0);
            }
        } else if (SRC0_DTYPE != 0u) {
            stage_src0_rows(li, 0u, 0u, m0);
        }
    }
    if (scaled) {
        workgroupBarrier(); // the first two tiles' scales staged
        if (kdim > 0u) {
            stage_units(li, 0u, 0u, 0u, m0);
        }
    }
    workgroupBarrier(); // the first tile staged

    var buf = 0u;
    for (var k0 = 0u; k0 < kdim; k0 += TILE_K) {
        // The next tile's first eight vector units of this thread, and
        // with staged scales its first code unit and the first scale of
        // the tile after it, in flight while this tile's products run.
        let k1 = k0 + TILE_K;
        let more = k1 < kdim;
        let more2 = more && TILE_K < kdim - k1;
        let k2 = select(k1, k1 + TILE_K, more2);
        let pre0 = pre_load(0u, li, more, units, k1, m0, n0);
        let pre1 = pre_load(1u, li, more, units, k1, m0, n0);
        let pre2 = pre_load(2u, li, more, units, k1, m0, n0);
        let pre3 = pre_load(3u, li, more, units, k1, m0, n0);
        let pre4 = pre_load(4u, li, more, units, k1, m0, n0);
        let pre5 = pre_load(5u, li, more, units, k1, m0, n0);
        let pre6 = pre_load(6u, li, more, units, k1, m0, n0);
        let pre7 = pre_load(7u, li, more, units, k1, m0, n0);
        var cw: UnitWords;
        var hw = vec4<u32>(0u);
        if (scaled) {
            if (more && li < CUNITS) {
                cw = fetch_unit(li, k1, m0);
            }
            if (more2 && hl < HDRS) {
                hw = fetch_scale(hl, k2, m0);
            }
        }

        // The products, k in order: eight (or four) staged k rows per
        // iteration of a whole tile; a partial tile four, then one, at a
        // time.
        let a_at = buf * TILE_K * SM + lid.x;
        let b_at = buf * TILE_K * SN + lid.y;
        let kend = min(TILE_K, kdim - k0);
        if (kend == TILE_K && TILE_K % 8u == 0u && TILE_K <= 64u) {
            // A whole tile of up to 64 k written out, no loop: naga's
            // loop bounding (a counter and a test an iteration, which
            // keeps the driver from unrolling the loop) has nothing to
            // count here. Each test is on override constants, so every
            // pipeline keeps only its own steps.
            step8_sg(&acc, a_at, b_at, plan);
            if (TILE_K > 8u) { step8_sg(&acc, a_at + 8u * SM, b_at + 8u * SN, plan); }
            if (TILE_K > 16u) { step8_sg(&acc, a_at + 16u * SM, b_at + 16u * SN, plan); }
            if (TILE_K > 24u) { step8_sg(&acc, a_at + 24u * SM, b_at + 24u * SN, plan); }
            if (TILE_K > 32u) { step8_sg(&acc, a_at + 32u * SM, b_at + 32u * SN, plan); }
            if (TILE_K > 40u) { step8_sg(&acc, a_at + 40u * SM, b_at + 40u * SN, plan); }
            if (TILE_K > 48u) { step8_sg(&acc, a_at + 48u * SM, b_at + 48u * SN, plan); }
            if (TILE_K > 56u) { step8_sg(&acc, a_at + 56u * SM, b_at + 56u * SN, plan); }
        } else if (kend == TILE_K && TILE_K % 8u == 0u) {
            for (var kk = 0u; kk < TILE_K; kk += 8u) {
                step8_sg(&acc, a_at + kk * SM, b_at + kk * SN, plan);
            }
        } else {
            var kk = 0u;
            for (; kk + 4u <= kend; kk += 4u) {
                step4(&acc, a_at + kk * SM, b_at + kk * SN);
            }
            for (; kk < kend; kk++) {
                step_at(&acc, a_at + kk * SM, b_at + kk * SN);
            }
        }

        // The next tile into the other buffer (its scales from slot nbuf),
        // the scales of the tile after it into slot buf: every thread has
        // passed the previous iteration's barrier, so nobody reads either
        // any more.
        let nbuf = 1u - buf;
        if (more) {
            pre_store(0u, li, units, nbuf, pre0);
            pre_store(1u, li, units, nbuf, pre1);
            pre_store(2u, li, units, nbuf, pre2);
            pre_store(3u, li, units, nbuf, pre3);
            pre_store(4u, li, units, nbuf, pre4);
            pre_store(5u, li, units, nbuf, pre5);
            pre_store(6u, li, units, nbuf, pre6);
            pre_store(7u, li, units, nbuf, pre7);
            // Units past the eight prefetch slots, only where a tile has
            // them (a test on override constants: no loop, and so no loop
            // bounding, in the other pipelines).
            if (units > 8u * threads) {
                for (var u = li + 8u * threads; u < units; u += threads) {
                    store_vec_unit(u, nbuf, load_vec_unit(u, k1, m0, n0));
                }
            }
            if (scaled) {
                if (li < CUNITS) {
                    put_unit(li, k1, nbuf, nbuf, m0, cw);
                }
                stage_units(li + threads, k1, nbuf, nbuf, m0);
                if (more2) {
                    if (hl < HDRS) {
                        put_scale(hl, k2, buf, m0, hw);
                    }
                    stage_scales(hl + threads, k2, buf, m0);
                }
            } else if (SRC0_DTYPE != 0u) {
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

// The pre-pass's view of binding 2 (the scratch): four f32 to a vector, so
// each invocation writes its four elements with one 128-bit store (the
// same bytes as dst[4 i + j]). Only `dequant` uses it and `main` only
// `dst`, so no entry point's interface holds both.
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4<f32>>;

// The dequantize-then-GEMM pre-pass (see the ABI above): four consecutive
// elements of one row per invocation through `load4_src0` (each the 4 x 4
// design's loader expression).
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
    dst4[i] = load4_src0(i / kq, 4u * (i % kq));
}
