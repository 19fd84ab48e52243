//! Case generation for `mul_mat`: the EXACT, RANDOM, BALANCED and ORDER
//! arms' data and an `Arbitrary` case spec biased to the edges, every choice
//! that selects a path drawn from the leading bytes (see
//! [`CaseSpec`]'s `Arbitrary`).
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
    /// Random data whose products all have about the same magnitude
    /// ([`balanced_block`]; activations `±[0.5, 1)`), compared with the
    /// RANDOM arm's bound. In the RANDOM arm one block with a large f16
    /// scale dominates `sum |w x|`, and with it the bound: a kernel that
    /// drops the k tail, or any product of a small-scale block, passes
    /// there. Here every product lies in `[p_min, 38 p_min]`, so the bound
    /// `2 gamma_K S <= 2 gamma_K K * 38 p_min`, and a kernel that drops one
    /// product p is off by at least `p - 2 gamma_K S` (its own rounding and
    /// the oracle's): whatever the seed, dropping any product fails when
    /// `4 gamma_K K * 38 < 1`, that is for K up to 256 (`K^2 u * 152 < 1`
    /// holds to K = 332); on longer rows a dropped block or tile still
    /// fails unless its products cancel.
    Balanced,
    /// Data whose every product is exact in binary32 but whose partial
    /// sums round ([`order_activation`]), so that the kernel must add the
    /// products in the contract's k order (rule `MM-ORDER`) to match the
    /// oracle bit for bit: the EXACT arm's weights, activations with
    /// full-width odd significands. Any fusion of a multiply with its add
    /// gives the same bits (the product is exact), and so does any
    /// association of the dequantized weight's factors with the
    /// activation; an addition out of order does not, for most outputs
    /// (`tests/mul_mat_generate.rs` measures it on the gate's rows).
    Order,
}

impl Arm {
    /// Every arm, in the gate's order.
    pub const ALL: [Arm; 4] = [Arm::Exact, Arm::Random, Arm::Balanced, Arm::Order];

    /// The name printed in tables and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Exact => "EXACT",
            Arm::Random => "RANDOM",
            Arm::Balanced => "BAL",
            Arm::Order => "ORDER",
        }
    }

    /// Whether the arm is judged by the rounding-error bound (RANDOM and
    /// BALANCED) rather than bit for bit (EXACT and ORDER).
    pub fn bounded(self) -> bool {
        matches!(self, Arm::Random | Arm::Balanced)
    }
}

/// The longest K the RANDOM and BALANCED arms judge: their bound
/// `2 gamma_K S_i`, `gamma_K = K u / (1 - K u)` with `u = 2^-24`, is
/// defined only while `K u < 1`, so K stays below `2^24` elements.
pub const MAX_BOUNDED_K: usize = (1 << 24) - 1;

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
    let (emin, emax, codes) = exact_weight_range(dtype);
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

/// The EXACT arm's weights for `dtype`: the exponents `emin..=emax` of
/// its power-of-two f16 scales (f32: of the weight itself) and the
/// largest code magnitude times sub-block scale ([`ExactPlan::w_max`]
/// over `2^emax`). Shared by the EXACT and ORDER arms.
fn exact_weight_range(dtype: Dtype) -> (i32, i32, f64) {
    match dtype {
        Dtype::F32 => (-2, 1, 8.0),
        Dtype::Q4_0 => (-2, 1, 8.0),
        Dtype::Q8_0 => (-2, 1, 128.0),
        Dtype::Q4K => (-1, 0, 63.0 * 15.0 + 63.0),
        Dtype::Q6K => (-1, 0, 32.0 * 32.0),
    }
}

/// The most significant bits an EXACT-arm weight of `dtype` can have (the
/// odd part of `|w| / 2^emin`, an integer, is below `2^bits`):
/// - f32 and q4_0: 3 (`|i| <= 8` times `2^e`: 7 is `0b111`);
/// - q8_0: 7 (codes `-128..=127`: 127);
/// - q4_K: 11 (`d sc q - dmin mn` with `d`, `dmin` each `±2^-1` or `±2^0`,
///   6-bit `sc`, `mn` and 4-bit `q`: at most `2 (63 * 15 + 63) = 2016` in
///   units of `2^-1`);
/// - q6_K: 10 (`d sc (q - 32)` with `sc`, `q - 32` in `-32..=31`: an odd
///   part at most `31 * 31 = 961`).
pub fn exact_weight_bits(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F32 | Dtype::Q4_0 => 3,
        Dtype::Q8_0 => 7,
        Dtype::Q4K => 11,
        Dtype::Q6K => 10,
    }
}

/// The ORDER arm's activation exponents: `x = ±o * 2^(e - b)` with `e` in
/// `ORDER_EXP.0..=ORDER_EXP.1` (see [`order_activation`]).
pub const ORDER_EXP: (i32, i32) = (-2, 2);

/// The ORDER arm's activation for `dtype`, drawn from `r` (three draws):
/// `x = ±o * 2^(e - b)`, `o` a uniform odd integer below `2^b` with
/// `b = 24 - exact_weight_bits(dtype)`, `e` uniform in [`ORDER_EXP`], the
/// sign uniform. So `|x|` lies in `[2^(-2 - b), 4)`, units of f32 values.
///
/// Why these data (rule `MM-ORDER`):
/// - every product `w x` of an EXACT-arm weight ([`exact_weight_bits`])
///   has at most 24 significant bits: exact in binary32, so a fused
///   multiply-add, `d * (q * x)`, `(d q) x` or `d sc q x - dmin mn x` all
///   give the contract's product, and only the additions round;
/// - the products have full-width significands (about 24 bits), so nearly
///   every addition to a running sum of like magnitude rounds;
/// - within one binade two rounded additions commute (`s + a + b` and
///   `s + b + a` round to the same grid), so an order change shows only
///   where a partial sum changes binade or a tie breaks to another even
///   neighbour; products within a factor of about `2^6` of one another
///   (the narrow exponent range; the weights add `2^3`, or a small code)
///   keep the running sum comparable to them, so its binade changes often;
/// - no output is subnormal, infinite or NaN: every partial sum, rounded
///   or not, is a multiple of `2^(emin - 2 - b) >= 2^-25` or zero, and
///   at most `K * 2^11 * 4`, far below `2^60` for any K the shim takes.
pub fn order_activation(dtype: Dtype, r: &mut Rng) -> f32 {
    let b = 24 - exact_weight_bits(dtype);
    let e = ORDER_EXP.0 + r.below((ORDER_EXP.1 - ORDER_EXP.0 + 1) as usize) as i32;
    let o = (2 * r.below(1 << (b - 1)) + 1) as f32;
    let v = o * ((e - b as i32) as f32).exp2();
    if r.u8() & 1 == 0 {
        v
    } else {
        -v
    }
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

/// `±[lo, 2 lo)`, uniform, random sign (BALANCED activations and f32
/// weights).
fn signed(r: &mut Rng, lo: f32) -> f32 {
    let v = lo * (1.0 + r.f01());
    if r.u8() & 1 == 0 {
        v
    } else {
        -v
    }
}

/// An f16 `±2^e * [1, 2)`: exponent `e`, 10 random fraction bits, sign
/// `neg`.
fn f16_band(r: &mut Rng, e: i32, neg: bool) -> u16 {
    f16_pow2(e, neg) | (u16::from(r.u8()) << 2) | u16::from(r.u8() & 3)
}

/// Fills one block of `dtype` (`blk`, whole block bytes, already random)
/// for the BALANCED arm: every dequantized weight non-zero and within a
/// small ratio of every other of the same dtype, all codes of each field
/// still reached where the ratio allows.
///
/// - f32: `±[0.5, 1)` (ratio 2).
/// - q4_0: `d = ±[1, 2)`, every nibble but 8 (`q - 8` in `±1..=8`):
///   `|w|` in `[1, 16)` (ratio 16).
/// - q8_0: `d = ±[1, 2)`, codes `±32..=127`: `|w|` in `[32, 254)` (ratio
///   8).
/// - q4_K: `d = ±[1, 2)` and `dmin = ∓[4, 8)` (opposite signs, so
///   `(d sc) q - dmin mn` never cancels), every 6-bit sub-block scale and
///   min in `32..=63` (bits 5 and 7 of scale bytes 0..8 set; the
///   `get_scale_min_k4` packing): `|w|` in `[128, 2394)` (ratio 19).
/// - q6_K: `d = ±[1, 2)`, i8 sub-block scales `±32..=127`, every 2-bit
///   high field 0 or 3 (`q - 32` in `-32..=-17` or `16..=31`): `|w|` in
///   `[512, 8128]` (ratio 16).
///
/// With activations `±[0.5, 1)` the products span a ratio of at most 38.
pub fn balanced_block(dtype: Dtype, blk: &mut [u8], r: &mut Rng) {
    let neg = r.u8() & 1 == 1;
    match dtype {
        Dtype::F32 => blk.copy_from_slice(&signed(r, 0.5).to_le_bytes()),
        Dtype::Q4_0 => {
            put_f16(blk, q4_0::D_OFFSET, f16_band(r, 0, neg));
            for b in &mut blk[q4_0::QS_OFFSET..] {
                let mut nib = || {
                    let v = r.below(15) as u8;
                    v + u8::from(v >= 8)
                };
                *b = nib() | (nib() << 4);
            }
        }
        Dtype::Q8_0 => {
            put_f16(blk, q8_0::D_OFFSET, f16_band(r, 0, neg));
            for b in &mut blk[q8_0::QS_OFFSET..] {
                let mag = 32 + r.below(96) as i8;
                *b = (if r.u8() & 1 == 0 { mag } else { -mag }) as u8;
            }
        }
        Dtype::Q4K => {
            put_f16(blk, q4_k::D_OFFSET, f16_band(r, 0, neg));
            put_f16(blk, q4_k::DMIN_OFFSET, f16_band(r, 2, !neg));
            for b in &mut blk[q4_k::SCALES_OFFSET..q4_k::SCALES_OFFSET + 8] {
                *b |= 0xA0;
            }
        }
        Dtype::Q6K => {
            put_f16(blk, q6_k::D_OFFSET, f16_band(r, 0, neg));
            for b in &mut blk[q6_k::QH_OFFSET..q6_k::SCALES_OFFSET] {
                // Each 2-bit field 00 or 11: four random bits, doubled.
                let h = r.u8();
                *b = (0..4).fold(0, |acc, i| acc | ((((h >> i) & 1) * 3) << (2 * i)));
            }
            for b in &mut blk[q6_k::SCALES_OFFSET..q6_k::D_OFFSET] {
                let mag = 32 + r.below(96) as i8;
                *b = (if r.u8() & 1 == 0 { mag } else { -mag }) as u8;
            }
        }
    }
}

/// Rewrites `src0` (whole blocks of `dtype`, already random) into the
/// EXACT arm's weights: every f16 scale `±2^e` with `e` in
/// [`exact_weight_range`] and a random sign (q6_K: i8 sub-block scales in
/// `-32..=31`); f32 weights `i * 2^e` with `i` in `-8..=8`.
fn exact_weights(dtype: Dtype, src0: &mut [u8], r: &mut Rng) {
    let (emin, emax, _) = exact_weight_range(dtype);
    let exp = |r: &mut Rng| emin + r.below((emax - emin + 1) as usize) as i32;
    let scale = |r: &mut Rng| {
        let e = exp(r);
        f16_pow2(e, r.u8() & 1 == 1)
    };
    for blk in src0.chunks_exact_mut(dtype.block_bytes()) {
        match dtype {
            Dtype::F32 => {
                let e = exp(r);
                let i = r.below(17) as f32 - 8.0;
                blk.copy_from_slice(&(i * (e as f32).exp2()).to_le_bytes());
            }
            Dtype::Q6K => {
                put_f16(blk, q6_k::D_OFFSET, scale(r));
                for s in &mut blk[q6_k::SCALES_OFFSET..q6_k::D_OFFSET] {
                    *s = (r.below(64) as i32 - 32) as i8 as u8;
                }
            }
            _ => {
                for &off in f16_fields(dtype) {
                    put_f16(blk, off, scale(r));
                }
            }
        }
    }
}

impl CaseSpec {
    /// The case's data.
    ///
    /// The ORDER arm's weights are the EXACT arm's for any K (only their
    /// exponents and codes, `exact_weight_range`, not the EXACT plan's
    /// limit on K), its activations [`order_activation`].
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
            Arm::Balanced => {
                for blk in src0.chunks_exact_mut(self.dtype.block_bytes()) {
                    balanced_block(self.dtype, blk, &mut r);
                }
                (0..self.n * self.k).map(|_| signed(&mut r, 0.5)).collect()
            }
            Arm::Exact => {
                let p = exact_plan(self.dtype, self.k).expect("K within the EXACT bound");
                exact_weights(self.dtype, &mut src0, &mut r);
                let span = 2 * p.x_max as usize + 1;
                (0..self.n * self.k)
                    .map(|_| (r.below(span) as i32 - p.x_max) as f32)
                    .collect()
            }
            Arm::Order => {
                exact_weights(self.dtype, &mut src0, &mut r);
                (0..self.n * self.k)
                    .map(|_| order_activation(self.dtype, &mut r))
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
        // A case without outputs compares nothing, so it could only pass.
        // k = 0 stays: every output is then an empty sum, +0.
        if self.m == 0 || self.n == 0 {
            return Err(format!(
                "m = {}, n = {}: a case needs at least one output to compare",
                self.m, self.n
            ));
        }
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
        // The bounded arms' limit `2 gamma_K S_i` (super::judge) holds only
        // while `K u < 1`: from K = 2^24 on, gamma_K is infinite or
        // negative, and a correct kernel would pass everything or fail.
        if self.arm.bounded() && self.k > MAX_BOUNDED_K {
            return Err(format!(
                "k = {} is too long for the {} arm: its bound 2 gamma_K sum|w x| needs K u < 1 \
                 (K at most {MAX_BOUNDED_K})",
                self.k,
                self.arm.name()
            ));
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

/// The size class a selector value picks (two bits): 0 gives 1, 1 a
/// multiple of 64 (the default workgroup's output block) plus or minus a
/// little, 2 and 3 anything in `1..=max`; the value itself is drawn from
/// the input's later bytes.
fn edge_size(u: &mut Unstructured<'_>, class: u8, max: usize) -> arbitrary::Result<usize> {
    Ok(match class & 3 {
        0 => 1,
        1 => {
            let base = 64 * u.int_in_range(1..=(max / 64).max(1))?;
            let d = u.int_in_range(-2i32..=2)?;
            (base as i64 + i64::from(d)).clamp(1, max as i64) as usize
        }
        _ => u.int_in_range(1..=max)?,
    })
}

/// The number of leading bytes [`CaseSpec`]'s `Arbitrary` reads as path
/// selectors (see there).
pub const SELECTOR_BYTES: usize = 4;

impl<'a> Arbitrary<'a> for CaseSpec {
    /// Every choice that selects a path comes from the first
    /// [`SELECTOR_BYTES`] bytes, so that libFuzzer's short inputs (its
    /// `lim` grows slowly, and a field drawn from an exhausted input takes
    /// its first value) reach every arm, dtype, shape class and geometry
    /// at its designed rate; the later bytes only pick values within the
    /// chosen class:
    ///
    /// - byte 0: the arm, `b % 4` ([`Arm::ALL`]: 1/4 each, exactly: 64
    ///   of the 256 values);
    /// - byte 1: the dtype, `b % 5` (`Dtype::ALL`: 1/5 each);
    /// - byte 2: the size classes of `edge_size`, bits 0-1 m and bits 2-3
    ///   n (1: 1/4, a multiple of 64 plus or minus 2: 1/4, any: 1/2), bits
    ///   4-5 k (one block: 1/4, [`config::K_MAX`]: 1/4, any: 1/2);
    /// - byte 3: the geometry, bits 0-2 (seed bits 61-62 and 59, which
    ///   [`super::geometry_for`] reads: 1/8 each of the eight
    ///   [`super::FUZZ_GEOMETRIES`]), bit 6 the shader form
    ///   (seed bit 60, which [`super::form_for`] reads: the subgroup form,
    ///   where the adapter has one, 1/2), and bit 7 the path of a
    ///   quantized src0 (seed bit 63, which [`super::path_for`] reads:
    ///   dequantize-then-GEMM 1/2);
    /// - then m, n, k within their classes, and the seed.
    ///
    /// (Until the ORDER arm came, byte 0 drew the arm by `b % 3`. The arm
    /// and dtype used to share byte 0, with m, n, k and the seed
    /// after it and the geometry from the seed; until the odd geometries
    /// came, the geometry was bits 0-1 of byte 3 and seed bit 59 was data.
    /// Inputs of an older fuzz corpus decode to other cases. A printed
    /// reproduction names its case and geometry (`--wg`) and is
    /// unaffected.)
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let sel: [u8; SELECTOR_BYTES] = [
            u.arbitrary()?,
            u.arbitrary()?,
            u.arbitrary()?,
            u.arbitrary()?,
        ];
        let arm = Arm::ALL[usize::from(sel[0]) % Arm::ALL.len()];
        let dtype = Dtype::ALL[usize::from(sel[1]) % Dtype::ALL.len()];
        let be = dtype.block_elems();
        let m = edge_size(u, sel[2], config::M_MAX)?;
        let n = edge_size(u, sel[2] >> 2, config::N_MAX)?;
        // K in whole blocks; f32 K is any length, so k tails inside one
        // TILE_K occur.
        let blocks = match (sel[2] >> 4) & 3 {
            0 => 1,
            1 => config::K_MAX / be,
            _ => u.int_in_range(1..=config::K_MAX / be)?,
        };
        let geometry = u64::from(sel[3] & 7);
        let subgroup = u64::from((sel[3] >> 6) & 1);
        let dequant = u64::from(sel[3] >> 7);
        let seed = (u64::arbitrary(u)? & !(15 << 60) & !(1 << 59))
            | (geometry >> 2) << 59
            | (subgroup << 60)
            | ((geometry & 3) << 61)
            | (dequant << 63);
        Ok(CaseSpec {
            dtype,
            m,
            n,
            k: be * blocks,
            arm,
            seed,
        })
    }
}
