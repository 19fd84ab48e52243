//! Case generation for `mul_mat`: the EXACT and RANDOM arms' data and an
//! `Arbitrary` case spec biased to the edges.
//!
//! Rule `GEN-FINITE` (seed 004's `fill_quant_bytes`): random block bytes
//! keep every f16 scale finite and keep its sign. A scale whose exponent
//! field is all ones (inf or NaN) has bit 6 of its high byte cleared, which
//! puts its exponent at 15 (a value in [1, 2)); nothing else is touched, so
//! negative, subnormal and zero scales all occur. ggml's quantizers write
//! negative scales (q4_0 `max / -8`, q6_K `max_scale / -128`), so about
//! half of real blocks carry one; a generator that dropped the sign would
//! let a kernel that drops it pass. Non-finite scales (rule
//! `NONFINITE-SCALE`) make NaN outputs, which no comparison can judge
//! (`CMP-FINITE`), so they are kept out at generation rather than
//! compared.

use crate::rng::Rng;
use arbitrary::{Arbitrary, Unstructured};
use oracle::ggml::{q4_0, q4_k, q6_k, q8_0, Dtype};

/// Which arm of the check a case belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Arbitrary)]
pub enum Arm {
    /// Data that make every summation order and every fusion exact, so the
    /// kernel must match the oracle bit for bit. See [`exact_plan`].
    Exact,
    /// Random block bytes (`GEN-FINITE`) and activations uniform in
    /// [-1, 1): compared with the rounding-error bound of
    /// [`super::judge::Verdict`].
    Random,
}

impl Arm {
    /// The name printed in tables and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Exact => "EXACT",
            Arm::Random => "RANDOM",
        }
    }
}

/// The EXACT arm's data plan for one dtype and row length K.
///
/// Every dequantized weight is a multiple of `g = 2^emin` (codes are
/// integers, every f16 scale is `±2^e` with `e >= emin`, sub-block scales
/// and mins are integers) with `|w| <= w_max`, and every activation is an
/// integer in `[-x_max, x_max]`. So every product and every partial sum of
/// any subset, in any order, is a multiple of g of magnitude at most
/// `K * w_max * x_max <= 2^24 * g`, which binary32 holds exactly: every
/// order and every fused multiply-add give the exact sum, bit for bit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExactPlan {
    /// The exponents of the power-of-two f16 scales, `emin..=emax`; each
    /// scale's sign is random.
    pub emin: i32,
    /// See `emin`.
    pub emax: i32,
    /// Bound on `|w|`: the largest code magnitude times the largest scale
    /// (q4_K: `2^emax * (63 * 15 + 63)`; q6_K: `2^emax * 32 * 32` with the
    /// i8 sub-block scales drawn in -32..=31 instead of the full range).
    pub w_max: f64,
    /// Activations are integers in `[-x_max, x_max]`, at most 8.
    pub x_max: i32,
}

/// The EXACT plan for `dtype` at row length `k` (elements), or `None` when
/// K is too long for any integer activation range (the bound above fails
/// even for `x_max = 1`).
pub fn exact_plan(dtype: Dtype, k: usize) -> Option<ExactPlan> {
    let (emin, emax, codes) = match dtype {
        Dtype::F32 => (-2, 1, 8.0),
        Dtype::Q4_0 => (-2, 1, 8.0),
        Dtype::Q8_0 => (-2, 1, 128.0),
        Dtype::Q4K => (-1, 0, 63.0 * 15.0 + 63.0),
        Dtype::Q6K => (-1, 0, 32.0 * 32.0),
    };
    let w_max = codes * f64::from(emax).exp2();
    let g = f64::from(emin).exp2();
    let x = ((1u64 << 24) as f64 * g / (k.max(1) as f64 * w_max)).floor();
    if x < 1.0 {
        return None;
    }
    Some(ExactPlan {
        emin,
        emax,
        w_max,
        x_max: x.min(8.0) as i32,
    })
}

/// One `mul_mat` case: dtype, shape, arm and the seed of all its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaseSpec {
    /// The weights' format.
    pub dtype: Dtype,
    /// Rows of src0 (output rows m), elements.
    pub m: usize,
    /// Rows of src1 (tokens), elements.
    pub n: usize,
    /// Row length, elements; a multiple of `dtype.block_elems()`.
    pub k: usize,
    /// The arm.
    pub arm: Arm,
    /// splitmix64 seed of all the data.
    pub seed: u64,
}

/// The inputs of one case.
#[derive(Clone, Debug)]
pub struct CaseData {
    /// The spec it came from.
    pub spec: CaseSpec,
    /// M rows of K elements in `spec.dtype`, bytes.
    pub src0: Vec<u8>,
    /// N x K f32.
    pub src1: Vec<f32>,
}

/// The byte offsets of the f16 scale fields inside one block of `dtype`
/// (empty for f32).
pub fn f16_fields(dtype: Dtype) -> &'static [usize] {
    match dtype {
        Dtype::F32 => &[],
        Dtype::Q4_0 => &[q4_0::D_OFFSET],
        Dtype::Q8_0 => &[q8_0::D_OFFSET],
        Dtype::Q4K => &[q4_k::D_OFFSET, q4_k::DMIN_OFFSET],
        Dtype::Q6K => &[q6_k::D_OFFSET],
    }
}

/// Rule `GEN-FINITE` applied in place to whole blocks of `dtype`: every f16
/// scale field with an all-ones exponent gets bit 6 of its high byte
/// cleared. Returns how many fields were changed.
pub fn keep_scales_finite(dtype: Dtype, blocks: &mut [u8]) -> usize {
    let bb = dtype.block_bytes();
    let mut changed = 0;
    for blk in blocks.chunks_exact_mut(bb) {
        for &off in f16_fields(dtype) {
            if blk[off + 1] & 0x7C == 0x7C {
                blk[off + 1] &= !0x40;
                changed += 1;
            }
        }
    }
    changed
}

/// `±2^e` as f16 bits, e in -14..=15, sign from `neg`.
fn f16_pow2(e: i32, neg: bool) -> u16 {
    (u16::from(neg) << 15) | (((e + 15) as u16) << 10)
}

fn put_f16(blk: &mut [u8], off: usize, bits: u16) {
    blk[off..off + 2].copy_from_slice(&bits.to_le_bytes());
}

impl CaseSpec {
    /// The case's data.
    ///
    /// # Panics
    /// If `k` is not a multiple of the block size, or (EXACT arm) K is too
    /// long for [`exact_plan`]; [`CaseSpec::valid`] says in advance.
    pub fn generate(&self) -> CaseData {
        let mut r = Rng(self.seed);
        let row_bytes = self.dtype.row_bytes(self.k).expect("k in whole blocks");
        let mut src0: Vec<u8> = (0..self.m * row_bytes).map(|_| r.u8()).collect();
        let src1: Vec<f32> = match self.arm {
            Arm::Random => {
                if self.dtype == Dtype::F32 {
                    for w in src0.chunks_exact_mut(4) {
                        w.copy_from_slice(&(2.0 * r.f01() - 1.0).to_le_bytes());
                    }
                } else {
                    keep_scales_finite(self.dtype, &mut src0);
                }
                (0..self.n * self.k).map(|_| 2.0 * r.f01() - 1.0).collect()
            }
            Arm::Exact => {
                let p = exact_plan(self.dtype, self.k).expect("K within the EXACT bound");
                let scale = |r: &mut Rng| {
                    let e = p.emin + r.below((p.emax - p.emin + 1) as usize) as i32;
                    f16_pow2(e, r.u8() & 1 == 1)
                };
                let bb = self.dtype.block_bytes();
                for blk in src0.chunks_exact_mut(bb) {
                    match self.dtype {
                        Dtype::F32 => {
                            let e = p.emin + r.below((p.emax - p.emin + 1) as usize) as i32;
                            let i = r.below(17) as f32 - 8.0;
                            blk.copy_from_slice(&(i * (e as f32).exp2()).to_le_bytes());
                        }
                        Dtype::Q6K => {
                            put_f16(blk, q6_k::D_OFFSET, scale(&mut r));
                            for s in &mut blk[q6_k::SCALES_OFFSET..q6_k::D_OFFSET] {
                                *s = (r.below(64) as i32 - 32) as i8 as u8;
                            }
                        }
                        _ => {
                            for &off in f16_fields(self.dtype) {
                                put_f16(blk, off, scale(&mut r));
                            }
                        }
                    }
                }
                let span = 2 * p.x_max as usize + 1;
                (0..self.n * self.k)
                    .map(|_| (r.below(span) as i32 - p.x_max) as f32)
                    .collect()
            }
        };
        CaseData {
            spec: *self,
            src0,
            src1,
        }
    }

    /// Why this spec cannot be generated, if it cannot.
    pub fn valid(&self) -> Result<(), String> {
        if !self.k.is_multiple_of(self.dtype.block_elems()) {
            return Err(format!(
                "k = {} is not a multiple of {}",
                self.k,
                self.dtype.block_elems()
            ));
        }
        // Every buffer within the shader's 32-bit indices, and the case
        // within what a host allocates: checked here, before generating,
        // so an oversized reproduction is an error, not an abort.
        let row_bytes = self.dtype.row_bytes(self.k).map_err(|e| e.to_string())?;
        let too_big = || {
            format!(
                "m = {}, n = {}, k = {}: a buffer would pass 2^32 elements (the shader's 32-bit indices)",
                self.m, self.n, self.k
            )
        };
        for len in [
            self.m.checked_mul(row_bytes),
            self.n.checked_mul(self.k),
            self.n.checked_mul(self.m),
        ] {
            if len.is_none_or(|l| l > u32::MAX as usize) {
                return Err(too_big());
            }
        }
        if self.arm == Arm::Exact && exact_plan(self.dtype, self.k).is_none() {
            return Err(format!("k = {} is too long for an EXACT arm", self.k));
        }
        Ok(())
    }
}

/// Bounds of the fuzzer's shapes.
pub mod config {
    /// Largest m (rows of src0).
    pub const M_MAX: usize = 300;
    /// Largest n (rows of src1).
    pub const N_MAX: usize = 140;
    /// Largest K, elements (a multiple of 256, so every dtype can reach it).
    pub const K_MAX: usize = 2048;
}

/// A size biased to the tile edges: 1, a multiple of 64 (the default
/// workgroup's output block) plus or minus a little, or anything in
/// `1..=max`.
fn edge_size(u: &mut Unstructured<'_>, max: usize) -> arbitrary::Result<usize> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => 1,
        1 => {
            let base = 64 * u.int_in_range(1..=(max / 64).max(1))?;
            let d = u.int_in_range(-2i32..=2)?;
            (base as i64 + i64::from(d)).clamp(1, max as i64) as usize
        }
        _ => u.int_in_range(1..=max)?,
    })
}

impl<'a> Arbitrary<'a> for CaseSpec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        // One byte picks the arm (low bit) and the dtype, first: libFuzzer's
        // inputs start at a few bytes, and a field drawn from an exhausted
        // input takes its first value. Drawn last, the arm was EXACT in 9,999
        // of the first 10,000 cases of a 4-minute run on the H200.
        let pick = u.arbitrary::<u8>()?;
        let arm = if pick & 1 == 0 {
            Arm::Exact
        } else {
            Arm::Random
        };
        let dtype = Dtype::ALL[usize::from(pick >> 1) % Dtype::ALL.len()];
        let be = dtype.block_elems();
        let m = edge_size(u, config::M_MAX)?;
        let n = edge_size(u, config::N_MAX)?;
        // K in whole blocks; f32 K is any length, so k tails inside one
        // TILE_K occur.
        let k = be * u.int_in_range(1..=config::K_MAX / be)?;
        let seed = u64::arbitrary(u)?;
        Ok(CaseSpec {
            dtype,
            m,
            n,
            k,
            arm,
            seed,
        })
    }
}
