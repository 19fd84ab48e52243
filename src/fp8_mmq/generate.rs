//! Case generation for the FP8 MMQ: the seed's deterministic battery and an
//! `Arbitrary` generator biased to the ragged edges.

use crate::rng::Rng;
use arbitrary::{Arbitrary, Unstructured};
use oracle::fp8_mmq::{Shape, ShapeError, BLOCK_K, E4M3_MAX};

/// Which arm of the check a case belongs to (seed 000).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Arbitrary)]
pub enum Arm {
    /// Integer-valued e4m3 weights in [-8, 8], power-of-two scales in
    /// [2^-4, 2^3], integer activations with every complete 128-block's
    /// amax pinned to 448 (so `d = 1` and `q = x` exactly) and partial
    /// blocks left zero. Every partial sum is an integer below 2^24, so any
    /// summation order gives the same bits: compared bit for bit.
    Exact,
    /// Random legal e4m3 weight codes, scales in [0.002, 0.502), activations
    /// uniform in [-1, 1): compared with `rms_rel < 1e-5`.
    Random,
    /// The GEMM's own arithmetic, bit for bit with real scales: integer
    /// weight codes as in EXACT, and the GEMM's activation operand given
    /// directly (integer codes, also in the padding beyond in_f, with
    /// random activation scales d) instead of through the quantizer. Every
    /// block accumulator c is then an exact integer (|c| <= 128 * 8 * 8), so
    /// the hidden order inside one MMA cannot matter, while the fold
    /// `sum + (s * d) * c` with real scales rounds at every step: the kernel
    /// must follow the contract's fold order and rounding exactly (no FMA,
    /// no other association, blocks in increasing order), and must zero-fill
    /// the weights' k tail, since the activation codes there are not zero.
    /// The quantizer still runs on random activations and is compared bit
    /// for bit. (Not in seed 000, which cannot see a fused fold.)
    Fold,
    /// Every legal e4m3 weight code decoded on its own, bit for bit. The
    /// weights walk the 254 legal codes, `w[o, k] = legal_code(o + k + r)`
    /// with r drawn from the seed (NaN magnitudes 0x7F/0xFF skipped), so
    /// the subnormals 0x01..0x07 and 0x81..0x87 and the fractional normals
    /// are all there (the E4M3 table of OCP OFP8 1.0 section 5: bias 7,
    /// subnormal `m * 2^-9`, normal `1.mmm * 2^(e - 7)`). Scales are powers
    /// of two as in EXACT. Each activation row j is one-hot: one `±448 *
    /// 2^e` (e in [-8, 8]) at `k_j = (in_f - 1 + 97 j) % in_f`, so row 0
    /// sits on the last column (in the k tail when in_f % 128 != 0) and the
    /// first min(m, in_f) rows sit on distinct columns unless 97 divides
    /// in_f. The quantizer then gives `d = 2^e` and
    /// `q = ±448` (0x7E/0xFE) exactly in k_j's block and `d = 0` (rule
    /// `QUANT-ZERO`) in every other, and each output is one product
    /// `(s * 2^e) * (decode(w[o, k_j]) * ±448)`: exact in binary32 for
    /// every legal code (at most 4 + 3 significand bits, magnitudes between
    /// 2^-13 and 2^29) in any summation order, so compared bit for bit. A
    /// decode that flushes subnormals or misreads any one code changes an
    /// output's bits; RANDOM sees an error of that size only statistically
    /// (seed 000's `rms_rel`, from 512 outputs on; its per-output bound
    /// mostly lets it through), and EXACT and FOLD draw only integer
    /// codes. One legal code is not observable: 0x80 (-0) gives the product
    /// -0, and a sum that starts at +0 turns it into +0, the output of 0x00
    /// (see [`OBSERVABLE_CODES`](super::gate::OBSERVABLE_CODES)). (Not in
    /// seed 000.)
    Codes,
}

impl Arm {
    /// Every arm, in the gate's order.
    pub const ALL: [Arm; 4] = [Arm::Exact, Arm::Fold, Arm::Codes, Arm::Random];

    /// The name printed in tables and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Exact => "EXACT",
            Arm::Random => "RAND",
            Arm::Fold => "FOLD",
            Arm::Codes => "CODES",
        }
    }

    /// Whether the arm's outputs are compared bit for bit (all but RANDOM).
    pub fn bit_exact(self) -> bool {
        self != Arm::Random
    }
}

/// Extra patterns layered on an arm's data, each one an edge the kernel
/// must survive. All default to off; a reproduction prints only those on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Knobs {
    /// Weights cycle through all 254 legal e4m3 codes in order (instead of
    /// random codes) in the RANDOM arm. (The CODES arm always does.)
    pub every_code: bool,
    /// Some activation blocks (one in `zero_blocks`) are all zero, so
    /// `d = 0` (rule `QUANT-ZERO`). 0 means none.
    pub zero_blocks: u8,
    /// Activations scaled by `2^act_exp` (RANDOM arm): exponent range of the
    /// quantizer's `amax / 448` and `448 / amax`. Kept in [-100, 100] so no
    /// block reaches `QUANT-TINY`. (The CODES arm draws its own exponents.)
    pub act_exp: i8,
    /// Weight codes overwritten with a NaN magnitude (`0x7F`/`0xFF`, at
    /// random places, possibly the same place twice): the dispatch
    /// precondition must refuse the case with the exact count (rule NAN-W).
    pub nan_codes: u8,
    /// The MMQ variant the case forces (`fp8_mmq_v2_k<variant>`), `None`
    /// for the one the kernel source's plan picks. The generator draws it
    /// before it can know how many variants the source exports
    /// (`plan[12]`); the runner takes it modulo that count
    /// ([`resolve_variant`]) and reports the variant run.
    pub variant: Option<u8>,
}

/// The MMQ variant a case with `knob` runs when the source exports
/// `exported` variants: `None` (the plan's pick) for `None` or no variant
/// exported, else `knob % exported`.
pub fn resolve_variant(knob: Option<u8>, exported: u32) -> Option<u32> {
    match (knob, exported) {
        (Some(v), n) if n > 0 => Some(u32::from(v) % n),
        _ => None,
    }
}

/// One FP8 MMQ case: a shape, an arm, a seed for the data, and knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaseSpec {
    /// Input features (k), elements.
    pub in_f: usize,
    /// Output features (n), elements.
    pub out_f: usize,
    /// Activation rows (tokens).
    pub m: usize,
    /// The arm.
    pub arm: Arm,
    /// splitmix64 seed of all the data.
    pub seed: u64,
    /// Edge patterns.
    pub knobs: Knobs,
}

/// A case's data, host side.
#[derive(Clone, Debug)]
pub struct CaseData {
    /// The validated shape.
    pub shape: Shape,
    /// Weights `[out_f x in_f]`, e4m3 codes.
    pub w: Vec<u8>,
    /// Scale grid `[ceil(out_f/128) x ceil(in_f/128)]`.
    pub scales: Vec<f32>,
    /// Activations `[m x in_f]`.
    pub x: Vec<f32>,
    /// The GEMM's activation operand given directly, `(q [m x in_f_pad],
    /// d [m x in_f_pad/128])` (FOLD arm); `None` means the quantizer's
    /// output of `x`.
    pub qd: Option<(Vec<u8>, Vec<f32>)>,
}

/// e4m3 codes whose decoded value is a small integer in [-8, 8] (EXACT arm):
/// 0, ±1, ±2, ±3, ±4, ±6, ±8. Integers only, so every product and every
/// partial sum is an exact integer.
pub const INT_CODES: [u8; 13] = [
    0x00, 0x38, 0xB8, 0x40, 0xC0, 0x44, 0xC4, 0x48, 0xC8, 0x4C, 0xCC, 0x50, 0xD0,
];

impl CaseSpec {
    /// The seed's battery entry: `(in_f, out_f, m)` with the seed's own
    /// per-arm seeds (`0xC0FFEE ^ in_f*7919` for EXACT, `0xBADC0DE ^
    /// out_f*104729` for RANDOM) and ours (`0xF01D ^ m*15485863` for FOLD,
    /// `0xC0DE5 ^ out_f*49979687` for CODES), no knobs.
    pub fn battery(in_f: usize, out_f: usize, m: usize, arm: Arm) -> CaseSpec {
        let seed = match arm {
            Arm::Exact => 0xC0FFEE_u64 ^ (in_f as u64).wrapping_mul(7919),
            Arm::Random => 0xBADC0DE_u64 ^ (out_f as u64).wrapping_mul(104729),
            Arm::Fold => 0xF01D_u64 ^ (m as u64).wrapping_mul(15485863),
            Arm::Codes => 0xC0DE5_u64 ^ (out_f as u64).wrapping_mul(49979687),
        };
        CaseSpec {
            in_f,
            out_f,
            m,
            arm,
            seed,
            knobs: Knobs::default(),
        }
    }

    /// Draws the case's data.
    ///
    /// # Errors
    /// The shape's error if it is zero or overflows.
    pub fn generate(&self) -> Result<CaseData, ShapeError> {
        let shape = Shape::new(self.m, self.in_f, self.out_f)?;
        let mut rng = Rng(self.seed);
        let (in_f, m) = (self.in_f, self.m);
        let exact = self.arm == Arm::Exact;
        let codes = self.arm == Arm::Codes;
        let int_weights = matches!(self.arm, Arm::Exact | Arm::Fold);
        let pow2_scales = matches!(self.arm, Arm::Exact | Arm::Codes);

        // CODES: where the walk starts, so that over seeds a small shape
        // reaches other codes.
        let walk = if codes { rng.below(254) } else { 0 };
        let mut w = vec![0u8; shape.weight_len()];
        for (idx, b) in w.iter_mut().enumerate() {
            *b = if codes {
                // w[o, k] = legal_code(o + k + walk): along a row and down a
                // column the codes walk the 254 legal ones.
                legal_code(idx / in_f + idx % in_f + walk)
            } else if int_weights {
                INT_CODES[rng.u8() as usize % INT_CODES.len()]
            } else if self.knobs.every_code {
                legal_code(idx)
            } else {
                // Avoid the NaN magnitude (rule NAN-W refuses it).
                let c = rng.u8();
                if c & 0x7F == 0x7F {
                    c & 0xBF
                } else {
                    c
                }
            };
        }

        let mut scales = vec![0f32; shape.scale_len()];
        for s in scales.iter_mut() {
            *s = if pow2_scales {
                // Powers of two in [2^-4, 2^3]: exact multiplication.
                pow2(i32::from(rng.u8() % 8) - 4)
            } else {
                0.002 + 0.5 * rng.f01()
            };
        }

        let mut x = vec![0f32; shape.act_len()];
        if exact {
            // Per complete 128-block: integers in [-4, 4] and one 448 at a
            // rotating slot, so amax = 448, d = 1 and q = x exactly. A block
            // only partly inside in_f stays zero: d = 0 on both sides, which
            // keeps k-tail shapes inside the bit-identity arm.
            for j in 0..m {
                for b in 0..in_f / BLOCK_K {
                    let row = &mut x[j * in_f + b * BLOCK_K..][..BLOCK_K];
                    for v in row.iter_mut() {
                        let mag = f32::from(rng.u8() % 5);
                        *v = if rng.u8() & 1 == 0 { mag } else { -mag };
                    }
                    row[(b * 37 + j) % BLOCK_K] = 448.0;
                }
            }
        } else if codes {
            // One-hot rows: x[j, k_j] = ±448 * 2^e, so amax = 448 * 2^e,
            // d = amax / 448 = 2^e and dinv = 448 / amax = 2^-e exactly, and
            // q = ±448 (0x7E/0xFE); every other block of the row is zero
            // (d = 0). 97 is prime: unless 97 divides in_f, the first
            // min(m, in_f) rows land on distinct columns.
            for j in 0..m {
                let k = (in_f - 1 + j * CODES_K_STRIDE) % in_f;
                let e = i32::from(rng.u8() % 17) - 8;
                let mag = E4M3_MAX * pow2(e);
                x[j * in_f + k] = if rng.u8() & 1 == 0 { mag } else { -mag };
            }
        } else {
            let scale = pow2(i32::from(self.knobs.act_exp.clamp(-100, 100)));
            for v in x.iter_mut() {
                *v = (2.0 * rng.f01() - 1.0) * scale;
            }
        }
        if self.knobs.zero_blocks > 0 {
            let every = usize::from(self.knobs.zero_blocks);
            for j in 0..m {
                for b in (0..in_f.div_ceil(BLOCK_K)).filter(|b| (b + j) % every == 0) {
                    let lo = j * in_f + b * BLOCK_K;
                    let hi = j * in_f + ((b + 1) * BLOCK_K).min(in_f);
                    x[lo..hi].fill(0.0);
                }
            }
        }
        for _ in 0..self.knobs.nan_codes {
            let at = rng.below(w.len());
            w[at] = if rng.u8() & 1 == 0 { 0x7F } else { 0xFF };
        }
        let qd = (self.arm == Arm::Fold).then(|| {
            let q = (0..shape.q_len())
                .map(|_| INT_CODES[rng.u8() as usize % INT_CODES.len()])
                .collect();
            let d = (0..shape.d_len())
                .map(|_| (0.25 + rng.f01()) / 448.0)
                .collect();
            (q, d)
        });
        Ok(CaseData {
            shape,
            w,
            scales,
            x,
            qd,
        })
    }
}

/// The CODES arm's step between the one-hot columns of consecutive rows:
/// `k_j = (in_f - 1 + CODES_K_STRIDE * j) % in_f` (elements).
pub const CODES_K_STRIDE: usize = 97;

/// The `idx % 254`-th legal e4m3 code (0x00..=0x7E, 0x80..=0xFE).
pub fn legal_code(idx: usize) -> u8 {
    let r = (idx % 254) as u8;
    if r < 0x7F {
        r
    } else {
        r + 1
    }
}

/// `2^e` for e in [-126, 127], exactly.
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// Generation bounds for [`CaseSpec`]'s `Arbitrary`: small enough for a high
/// exec rate, biased to the edges.
pub mod bounds {
    /// Largest in_f (elements): 12 scale blocks and a little.
    pub const MAX_IN_F: usize = 128 * 12 + 7;
    /// Largest out_f (elements): 3 scale rows and a little.
    pub const MAX_OUT_F: usize = 128 * 3 + 7;
    /// Largest m (rows).
    pub const MAX_M: usize = 72;
    /// Largest m of the wide class (m's "anything" class with byte 1's
    /// bits 6-7 set): the widest token tile a variant plans (192 tokens,
    /// k25) and a ragged second, so that every warpgroup of every tile
    /// geometry, and a CTA's second token tile, hold real outputs.
    pub const MAX_M_WIDE: usize = 192 + 17;
    /// Largest in_f beside an m of the wide class (two scale blocks and a
    /// little), which keeps its cases' multiply-adds near the others'.
    pub const MAX_IN_F_WIDE_M: usize = 128 * 2 + 7;
    /// Largest out_f beside an m of the wide class (a weight tile and a
    /// little).
    pub const MAX_OUT_F_WIDE_M: usize = 128 + 7;
}

/// A dimension biased to the edges, its class chosen by a selector value
/// (two bits): 0 gives 1, 1 and 2 a multiple of `unit` plus or minus a
/// little, 3 anything up to `max`; the value within the class comes from
/// the input's later bytes.
fn edge_dim(
    u: &mut Unstructured<'_>,
    class: u8,
    unit: usize,
    max: usize,
) -> arbitrary::Result<usize> {
    Ok(match class & 3 {
        0 => 1,
        1 | 2 => {
            let blocks = u.int_in_range(1..=max / unit)?;
            let delta = u.int_in_range(-3i32..=3)?;
            ((blocks * unit) as i64 + i64::from(delta)).clamp(1, max as i64) as usize
        }
        _ => u.int_in_range(1..=max)?,
    })
}

/// The number of leading bytes [`CaseSpec`]'s `Arbitrary` reads as path
/// selectors (see there).
pub const SELECTOR_BYTES: usize = 5;

impl<'a> Arbitrary<'a> for CaseSpec {
    /// Every choice that selects a path comes from the first
    /// [`SELECTOR_BYTES`] bytes: libFuzzer's inputs start at a few bytes
    /// (its `lim` grows slowly), and a field drawn from an exhausted input
    /// takes its first value, so a knob drawn last is starved (drawn after
    /// the shape and seed, `nan_codes` planted no NaN code in 22,813 cases
    /// of a 2-minute H200 run; the arm, drawn after the shape, was EXACT
    /// in nearly every case of a first minute). The layout:
    ///
    /// - byte 0: the arm, `b % 4` ([`Arm::ALL`]: 1/4 each);
    /// - byte 1: bits 0-1 all set: `every_code` (1/4); bits 2-3 all set:
    ///   `zero_blocks` on (1/4); bits 4-5 all set: `act_exp` on (1/4);
    /// - byte 2: bits 0-3 all set: `nan_codes` on (1/16), bits 4-5 its
    ///   count (1 to 4, 1/4 each); bits 6-7 the `zero_blocks` period (1 to
    ///   4, 1/4 each);
    /// - byte 3: the size classes of `edge_dim`, bits 0-1 in_f, bits 2-3
    ///   out_f, bits 4-5 m (1: 1/4; a multiple of the unit, 128 or 16,
    ///   plus or minus 3: 1/2; anything: 1/4); with byte 1's bits 6-7 both
    ///   set too (1/16 of the cases), m's "anything" is the wide class: up
    ///   to [`bounds::MAX_M_WIDE`] (past a 192-token tile), drawn from the
    ///   top (an exhausted input gives the largest), in_f and out_f then
    ///   capped at [`bounds::MAX_IN_F_WIDE_M`] and
    ///   [`bounds::MAX_OUT_F_WIDE_M`]; else m stays within
    ///   [`bounds::MAX_M`];
    /// - byte 4: bit 7 set: a forced MMQ variant (1/2), bits 0-6 the
    ///   variant before [`resolve_variant`] (so each of n exported variants
    ///   is forced in `floor(128 / n)` or `ceil(128 / n)` of 256 byte
    ///   values);
    /// - then the dimensions within their classes, the seed, and the
    ///   `act_exp` exponent (`-100..=100`).
    ///
    /// An input whose selector bytes are all zero (the empty input
    /// included) is an EXACT case of shape 1 x 1 x 1 with no knob on.
    ///
    /// (Until the selectors moved here, the arm alone led and the knobs
    /// came last; inputs of an older fuzz corpus decode to other cases. A
    /// printed `case` reproduction names its case and is unaffected.)
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let sel: [u8; SELECTOR_BYTES] = [
            u.arbitrary()?,
            u.arbitrary()?,
            u.arbitrary()?,
            u.arbitrary()?,
            u.arbitrary()?,
        ];
        let arm = Arm::ALL[usize::from(sel[0]) % Arm::ALL.len()];
        let on = |byte: u8, mask: u8| byte & mask == mask;
        let wide_m = (sel[3] >> 4) & 3 == 3 && on(sel[1], 0xC0);
        let (max_in_f, max_out_f) = match wide_m {
            true => (bounds::MAX_IN_F_WIDE_M, bounds::MAX_OUT_F_WIDE_M),
            false => (bounds::MAX_IN_F, bounds::MAX_OUT_F),
        };
        let in_f = edge_dim(u, sel[3], 128, max_in_f)?;
        let out_f = edge_dim(u, sel[3] >> 2, 128, max_out_f)?;
        // m's "anything" class from the top: an exhausted input (libFuzzer's
        // first inputs are a few bytes) gives MAX_M_WIDE, not 1.
        let m = if wide_m {
            bounds::MAX_M_WIDE + 1 - u.int_in_range(1..=bounds::MAX_M_WIDE)?
        } else {
            edge_dim(u, sel[3] >> 4, 16, bounds::MAX_M)?
        };
        let seed = u64::arbitrary(u)?;
        let knobs = Knobs {
            every_code: on(sel[1], 0x03),
            zero_blocks: if on(sel[1], 0x0C) {
                1 + (sel[2] >> 6)
            } else {
                0
            },
            act_exp: if on(sel[1], 0x30) {
                u.int_in_range(-100..=100)?
            } else {
                0
            },
            nan_codes: if on(sel[2], 0x0F) {
                1 + ((sel[2] >> 4) & 3)
            } else {
                0
            },
            variant: on(sel[4], 0x80).then_some(sel[4] & 0x7F),
        };
        Ok(CaseSpec {
            in_f,
            out_f,
            m,
            arm,
            seed,
            knobs,
        })
    }

    /// The selector bytes, at most 3 bytes per dimension, 8 for the seed
    /// and 1 for the exponent (bolero sizes its inputs from this).
    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (SELECTOR_BYTES, Some(SELECTOR_BYTES + 3 * 3 + 8 + 1))
    }
}
