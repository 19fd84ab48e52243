//! The fast path of [`oracle::ggml::mul_mat::mul_mat`]: the same bits, for
//! the `mul-mat` gates and fuzzer at real shapes (issue 6).
//!
//! Only the spec in `core` is normative. For every output `dst[n * M + m]`
//! the operations here are the spec's, in the spec's order: `acc = +0.0`,
//! then `acc = acc + w[m, k] * src1[n, k]` for k = 0, 1, .., K - 1, the
//! product and the sum each rounded on its own (Rust never contracts
//! `a * b + c` into a fused multiply-add), with `w[m, ..]` row m of `src0`
//! dequantized by [`oracle::ggml::dequantize`] itself. The speed comes only
//! from running outputs side by side:
//!
//! - the weights are dequantized once, by the spec's own function, into
//!   panels of `MR` rows stored k-major (`panel[k][i]` = `w[m0 + i, k]`),
//!   so one k step loads `MR` consecutive weights (one or two vectors);
//! - a register tile holds `NR x MR` accumulators (`NR` rows of `src1`,
//!   `MR` rows of `src0`): per k, `NR` broadcasts, one vector multiply and
//!   one vector add per accumulator vector; lanes past M or N run on zero
//!   padding and are discarded;
//! - rayon splits the rows of `dst` (groups of `NR` n), or, when N is too
//!   small to feed every thread, the panels.
//!
//! SIMD comes through `multiversion` as in [`crate::fp8_mmq::fast`]: AVX-512
//! `8 x 32` (16 zmm accumulators), AVX2 `6 x 16` (12 ymm) and the baseline
//! `4 x 8` (8 xmm), each picked by [`Simd`]; a target the CPU lacks runs
//! its tile compiled for the baseline (same bits, slower).
//!
//! NaN: when an output is NaN, which NaN (its payload and sign) may differ
//! from the spec's, since IEEE 754 leaves the propagated payload open and
//! the compiler may commute the operands of a multiply or an add;
//! [`same_bits`] is the equality the proofs use (bits equal, or both NaN).

use crate::fp8_mmq::fast::Simd;
use multiversion::multiversion;
use oracle::ggml::mul_mat::check_operands;
use oracle::ggml::{dequantize, Dtype, GgmlError};
use rayon::prelude::*;

/// Multiply-adds below which the GEMM runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 20;

/// Tile of the AVX-512 target: (src1 rows NR, src0 rows MR).
const AVX512: (usize, usize) = (8, 32);
/// Tile of the AVX2 target.
const AVX2: (usize, usize) = (6, 16);
/// Tile of the baseline target.
const GENERIC: (usize, usize) = (4, 8);

/// Same contract, shapes, errors and output bits (NaN payloads aside, see
/// the module docs) as [`oracle::ggml::mul_mat::mul_mat`], without its
/// scratch row, on the best target of this CPU:
/// `dst[n * M + m] = sum_k w[m, k] * src1[n * K + k]`, `src0` M rows of
/// `dtype.row_bytes(K)` bytes, `src1` N x K f32, `dst` N x M f32.
///
/// # Errors
/// As the spec: [`GgmlError::RowNotBlocks`] if K is not a multiple of the
/// block size, [`GgmlError::Overflow`] if a length overflows `usize`,
/// [`GgmlError::Len`] (`"src0"`, `"src1"`, `"dst"`) on a length mismatch.
/// Nothing is written to `dst` then.
pub fn mul_mat_fast(
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    src0: &[u8],
    src1: &[f32],
    dst: &mut [f32],
) -> Result<(), GgmlError> {
    mul_mat_fast_with(Simd::detected(), dtype, m, n, k, src0, src1, dst)
}

/// [`mul_mat_fast`] on the tile of `simd` (the tests force every target).
///
/// # Errors
/// As [`mul_mat_fast`].
#[allow(clippy::too_many_arguments)]
pub fn mul_mat_fast_with(
    simd: Simd,
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    src0: &[u8],
    src1: &[f32],
    dst: &mut [f32],
) -> Result<(), GgmlError> {
    let row_bytes = check_operands(dtype, m, n, k, src0.len(), src1.len(), dst.len())?;
    let ops = Operands {
        dtype,
        m,
        n,
        k,
        row_bytes,
        src0,
        src1,
    };
    match simd {
        Simd::Avx512 => drive::<{ AVX512.0 }, { AVX512.1 }>(&ops, dst, tile_avx512),
        Simd::Avx2 => drive::<{ AVX2.0 }, { AVX2.1 }>(&ops, dst, tile_avx2),
        Simd::Generic => drive::<{ GENERIC.0 }, { GENERIC.1 }>(&ops, dst, tile_generic),
    }
    Ok(())
}

/// Whether `a` and `b` are the same output in the sense of the proofs:
/// equal bits, or both NaN (see the module docs).
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// The checked operands.
struct Operands<'a> {
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    row_bytes: usize,
    src0: &'a [u8],
    src1: &'a [f32],
}

/// One register tile over the whole k range: `acc[j][i] = +0.0`, then for
/// each k in increasing order `acc[j][i] = acc[j][i] + panel[k][i] *
/// x[j][k]`. Every `x[j]` has `panel.len()` elements.
#[inline(always)]
fn tile<const NR: usize, const MR: usize>(
    panel: &[[f32; MR]],
    x: &[&[f32]; NR],
) -> [[f32; MR]; NR] {
    let kk = panel.len();
    let x: [&[f32]; NR] = core::array::from_fn(|j| &x[j][..kk]);
    let mut acc = [[0f32; MR]; NR];
    for (t, w) in panel.iter().enumerate() {
        for j in 0..NR {
            let xv = x[j][t];
            for i in 0..MR {
                acc[j][i] += w[i] * xv;
            }
        }
    }
    acc
}

/// A tile compiled for one target.
type TileFn<const NR: usize, const MR: usize> = fn(&[[f32; MR]], &[&[f32]; NR]) -> [[f32; MR]; NR];

#[multiversion(targets("x86_64+avx512f+avx512bw"))]
fn tile_avx512(panel: &[[f32; AVX512.1]], x: &[&[f32]; AVX512.0]) -> [[f32; AVX512.1]; AVX512.0] {
    tile(panel, x)
}

#[multiversion(targets("x86_64+avx2"))]
fn tile_avx2(panel: &[[f32; AVX2.1]], x: &[&[f32]; AVX2.0]) -> [[f32; AVX2.1]; AVX2.0] {
    tile(panel, x)
}

fn tile_generic(
    panel: &[[f32; GENERIC.1]],
    x: &[&[f32]; GENERIC.0],
) -> [[f32; GENERIC.1]; GENERIC.0] {
    tile(panel, x)
}

/// Dequantizes rows `m0 .. m0 + MR` (those below M; zeros past it) into a
/// k-major panel, through the spec's [`dequantize`].
fn pack_panel<const MR: usize>(ops: &Operands<'_>, m0: usize, panel: &mut [[f32; MR]]) {
    let mut row = vec![0f32; ops.k];
    for i in 0..MR.min(ops.m - m0) {
        let bytes = &ops.src0[(m0 + i) * ops.row_bytes..(m0 + i + 1) * ops.row_bytes];
        dequantize(ops.dtype, bytes, &mut row).expect("lengths checked by the caller");
        for (p, &v) in panel.iter_mut().zip(&row) {
            p[i] = v;
        }
    }
}

/// The `NR` rows of `src1` starting at n0 (a zero row past N).
fn x_rows<'a, const NR: usize>(ops: &Operands<'a>, n0: usize, zero: &'a [f32]) -> [&'a [f32]; NR] {
    core::array::from_fn(|j| {
        let n = n0 + j;
        if n < ops.n {
            &ops.src1[n * ops.k..(n + 1) * ops.k]
        } else {
            zero
        }
    })
}

fn drive<const NR: usize, const MR: usize>(
    ops: &Operands<'_>,
    dst: &mut [f32],
    tile: TileFn<NR, MR>,
) {
    let (m, n, k) = (ops.m, ops.n, ops.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // MM-EMPTY: +0.0 everywhere.
        dst.fill(0.0);
        return;
    }
    let panels = m.div_ceil(MR);
    let mut packed = vec![[0f32; MR]; panels * k];
    let zero = vec![0f32; k];
    let parallel = m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MACS;
    let pack = |(p, panel): (usize, &mut [[f32; MR]])| pack_panel(ops, p * MR, panel);
    if parallel {
        packed.par_chunks_mut(k).enumerate().for_each(pack);
    } else {
        packed.chunks_mut(k).enumerate().for_each(pack);
    }
    let packed = &packed;
    // One group of NR rows of dst (each row M outputs), every panel.
    let group = |(g, out): (usize, &mut [f32])| {
        let x = x_rows::<NR>(ops, g * NR, &zero);
        for p in 0..panels {
            let acc = tile(&packed[p * k..(p + 1) * k], &x);
            let m0 = p * MR;
            let mw = MR.min(m - m0);
            for (j, row) in out.chunks_mut(m).enumerate() {
                row[m0..m0 + mw].copy_from_slice(&acc[j][..mw]);
            }
        }
    };
    let groups = n.div_ceil(NR);
    if !parallel {
        dst.chunks_mut(NR * m).enumerate().for_each(group);
    } else if groups >= 2 * rayon::current_num_threads() {
        dst.par_chunks_mut(NR * m).enumerate().for_each(group);
    } else {
        // Few rows of dst (decode-like N): split the panels instead, each
        // task computing its panel for every n, then scatter.
        let cols: Vec<Vec<[f32; MR]>> = (0..panels)
            .into_par_iter()
            .map(|p| {
                let panel = &packed[p * k..(p + 1) * k];
                (0..groups)
                    .flat_map(|g| tile(panel, &x_rows::<NR>(ops, g * NR, &zero)))
                    .collect()
            })
            .collect();
        for (p, col) in cols.iter().enumerate() {
            let m0 = p * MR;
            let mw = MR.min(m - m0);
            for (ni, row) in dst.chunks_mut(m).enumerate() {
                row[m0..m0 + mw].copy_from_slice(&col[ni][..mw]);
            }
        }
    }
}

/// A generated fast-against-spec case (the `mul_mat_fast` fuzz target and
/// `tests/ggml_fast_props.rs`): a dtype, a shape biased to the register
/// tiles' edges, and a seed for the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastCase {
    /// The weights' format.
    pub dtype: Dtype,
    /// Rows of `src0` (M), 1 ..= 97: three AVX-512 panels and a little.
    pub m: usize,
    /// Rows of `src1` (N), 1 ..= 40.
    pub n: usize,
    /// Blocks per row: K = `kblocks * dtype.block_elems()`, 0 ..= 3 (f32:
    /// 0 ..= 300 elements).
    pub kblocks: usize,
    /// Whether every f16 scale is kept finite (its sign kept); otherwise the
    /// bytes are as drawn, `NONFINITE-SCALE` included.
    pub finite_scales: bool,
    /// Seed of the bytes of `src0` and the values of `src1`.
    pub seed: u64,
}

/// The path selectors first (a short input reaches each): byte 0 the dtype
/// (each of the five at 1/5, to within a byte's `% 5`), byte 1 whether the
/// f16 scales are kept finite (3/4) or left as drawn (1/4); then m, n,
/// kblocks and the seed.
impl<'a> arbitrary::Arbitrary<'a> for FastCase {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let dtype = Dtype::ALL[usize::from(u.arbitrary::<u8>()?) % Dtype::ALL.len()];
        let finite_scales = u.arbitrary::<u8>()? % 4 != 3;
        let kmax = if dtype == Dtype::F32 { 300 } else { 3 };
        Ok(FastCase {
            dtype,
            finite_scales,
            m: u.int_in_range(1..=97)?,
            n: u.int_in_range(1..=40)?,
            kblocks: u.int_in_range(0..=kmax)?,
            seed: u.arbitrary()?,
        })
    }

    /// 1 byte each for the dtype, the finite flag, m and n, up to 2 for
    /// kblocks, 8 for the seed (bolero sizes its inputs from this).
    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(14))
    }
}

/// Byte offsets of the f16 scales inside one block of `dtype` (ggml
/// `block_q4_0.d`, `block_q8_0.d`, `block_q4_K.d/.dmin`, `block_q6_K.d`).
pub fn f16_scale_offsets(dtype: Dtype) -> &'static [usize] {
    match dtype {
        Dtype::F32 => &[],
        Dtype::Q4_0 | Dtype::Q8_0 => &[0],
        Dtype::Q4K => &[0, 2],
        Dtype::Q6K => &[208],
    }
}

/// Clears the top exponent bit of every f16 scale in `blocks`: each becomes
/// finite (exponent at most 15, |d| < 2) and keeps its sign.
pub fn make_scales_finite(dtype: Dtype, blocks: &mut [u8]) {
    for block in blocks.chunks_mut(dtype.block_bytes()) {
        for &off in f16_scale_offsets(dtype) {
            block[off + 1] &= 0xBF;
        }
    }
}

impl FastCase {
    /// The case's operands `(k, src0, src1)`: random bytes (f32 weights and
    /// `src1` random values in about +-4, with a NaN, an infinity or a -0.0
    /// now and then).
    pub fn operands(&self) -> (usize, Vec<u8>, Vec<f32>) {
        let mut rng = crate::rng::Rng(self.seed);
        let k = self.kblocks * self.dtype.block_elems();
        let row_bytes = self.dtype.row_bytes(k).expect("k is whole blocks");
        let value = |rng: &mut crate::rng::Rng| match rng.below(64) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -0.0,
            _ => (rng.f01() - 0.5) * 8.0,
        };
        let mut src0: Vec<u8> = if self.dtype == Dtype::F32 {
            (0..self.m * k)
                .flat_map(|_| value(&mut rng).to_le_bytes())
                .collect()
        } else {
            (0..self.m * row_bytes).map(|_| rng.u8()).collect()
        };
        if self.finite_scales {
            make_scales_finite(self.dtype, &mut src0);
        }
        let src1 = (0..self.n * k).map(|_| value(&mut rng)).collect();
        (k, src0, src1)
    }
}

/// The fast GEMM on every SIMD target (forced; a target the CPU lacks runs
/// its own tile built for the baseline) against the spec, output for
/// output ([`same_bits`]). An oracle: a difference is a panic naming the
/// case, the target and the first differing output.
pub fn fast_matches_spec(case: &FastCase) {
    let (k, src0, src1) = case.operands();
    let (m, n) = (case.m, case.n);
    let mut want = vec![0f32; m * n];
    let mut scratch = vec![0f32; k];
    oracle::ggml::mul_mat::mul_mat(case.dtype, m, n, k, &src0, &src1, &mut want, &mut scratch)
        .expect("the case is well formed");
    for simd in Simd::ALL {
        let mut got = vec![f32::from_bits(0x7FC0_DEAD); m * n];
        mul_mat_fast_with(simd, case.dtype, m, n, k, &src0, &src1, &mut got)
            .expect("the case is well formed");
        if let Some(i) = (0..m * n).find(|&i| !same_bits(got[i], want[i])) {
            panic!(
                "ggml mul_mat fast ({}) differs from the spec at dst[n={}, m={}]: got {:e} (0x{:08X}), want {:e} (0x{:08X})\n  case: {case:?}",
                simd.name(),
                i / m,
                i % m,
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            );
        }
    }
}
