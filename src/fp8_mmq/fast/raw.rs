//! Raw operands for proving the fast paths: what the case generator keeps
//! away from on purpose, because a kernel check wants finite outputs. Here
//! only the spec is the peer, so anything goes: every e4m3 code in the
//! weights (the NaN magnitudes, which the spec reads as 0.0) and in the
//! GEMM's activation operand (NaN codes included, also in the padding past
//! `in_f`), scales and activation scales of every class (zero, `-0.0`,
//! subnormal, huge, infinite, NaN), and activations whose blocks span the
//! whole exponent range, so the quantizer meets `QUANT-TINY`, `QUANT-INF`
//! and `QUANT-NAN`.

use super::{targets_for, SpecRun};
use crate::rng::Rng;
use arbitrary::{Arbitrary, Unstructured};
use oracle::fp8_mmq::Schedule;
use oracle::fp8_mmq::{Shape, BLOCK_K};

/// Generation bounds (kept small: the spec is the slow side).
pub mod bounds {
    /// Largest in_f (elements): 4 scale blocks and a little.
    pub const MAX_IN_F: usize = 128 * 4 + 7;
    /// Largest out_f (elements): 2 scale rows and a little.
    pub const MAX_OUT_F: usize = 128 * 2 + 7;
    /// Largest m (rows).
    pub const MAX_M: usize = 20;
}

/// One raw case: a shape, a seed for all the data, and which wild classes
/// the data draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawCase {
    /// Input features (k), elements.
    pub in_f: usize,
    /// Output features (n), elements.
    pub out_f: usize,
    /// Activation rows.
    pub m: usize,
    /// splitmix64 seed of all the data.
    pub seed: u64,
    /// About one activation code in 8192 is a NaN code (`0x7F`/`0xFF`).
    pub nan_codes: bool,
    /// Scales and activation scales drawn from every class of `f32`.
    pub wild_scales: bool,
    /// Activations: blocks at any exponent, with zeros, subnormals,
    /// infinities and NaNs sprinkled in.
    pub wild_x: bool,
}

/// A raw case's data.
#[derive(Clone, Debug)]
pub struct RawData {
    /// The shape.
    pub shape: Shape,
    /// Weights, every code.
    pub w: Vec<u8>,
    /// Weight scales.
    pub scales: Vec<f32>,
    /// Activations for the quantizer.
    pub x: Vec<f32>,
    /// The GEMM's activation operand: codes `[m x in_f_pad]`.
    pub q: Vec<u8>,
    /// The GEMM's activation scales `[m x in_f_pad/128]`.
    pub d: Vec<f32>,
}

/// A dimension biased to the edges: a multiple of `unit` plus or minus a
/// little, 1, or anything up to `max`.
fn edge_dim(u: &mut Unstructured<'_>, unit: usize, max: usize) -> arbitrary::Result<usize> {
    Ok(match u.int_in_range(0u8..=7)? {
        0 => 1,
        1..=4 => {
            let units = u.int_in_range(1..=max / unit)?;
            let delta = u.int_in_range(-3i32..=3)?;
            ((units * unit) as i64 + i64::from(delta)).clamp(1, max as i64) as usize
        }
        _ => u.int_in_range(1..=max)?,
    })
}

/// Byte 0 selects the data's classes, one bit each (each at 1/2):
/// bit 0 `nan_codes`, bit 1 `wild_scales`, bit 2 `wild_x`; then the three
/// dimensions (byte 1 picks in_f's class, and so on), then the seed. A
/// short input (libFuzzer's first ones) reaches every class; the seed,
/// drawn last, reads zeros when the input runs out.
impl<'a> Arbitrary<'a> for RawCase {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let classes = u8::arbitrary(u)?;
        Ok(RawCase {
            nan_codes: classes & 1 != 0,
            wild_scales: classes & 2 != 0,
            wild_x: classes & 4 != 0,
            in_f: edge_dim(u, 128, bounds::MAX_IN_F)?,
            out_f: edge_dim(u, 128, bounds::MAX_OUT_F)?,
            m: edge_dim(u, 8, bounds::MAX_M)?,
            seed: u64::arbitrary(u)?,
        })
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(1 + 3 * 3 + 8))
    }
}

/// `2^e` for e in [-149, 127], exactly (subnormal below -126).
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

/// A value of any class: zero of either sign, subnormal, normal at any
/// exponent, the largest finite, infinity, NaN with any payload.
fn wild(rng: &mut Rng) -> f32 {
    let sign = (rng.next_u64() as u32) & 0x8000_0000;
    let bits = match rng.below(16) {
        0 => 0,
        1 => rng.next_u64() as u32 & 0x007F_FFFF,
        2 => 0x7F7F_FFFF,
        3 => 0x7F80_0000,
        4 => 0x7F80_0001 + (rng.next_u64() as u32 % 0x007F_FFFF),
        _ => (rng.next_u64() as u32) & 0x7FFF_FFFF,
    };
    f32::from_bits(sign | bits)
}

/// A scale of the tame kind: positive, in [2^-20, 2^4).
fn tame(rng: &mut Rng) -> f32 {
    (1.0 + rng.f01()) * pow2(rng.below(24) as i32 - 20)
}

impl RawCase {
    /// Draws the case's data.
    ///
    /// # Panics
    /// If the shape is invalid; [`Arbitrary`] draws only valid ones.
    pub fn generate(&self) -> RawData {
        let shape = Shape::new(self.m, self.in_f, self.out_f).expect("bounded, non-zero shape");
        let mut rng = Rng(self.seed);
        let w: Vec<u8> = (0..shape.weight_len()).map(|_| rng.u8()).collect();
        let scale = |rng: &mut Rng| {
            if self.wild_scales && rng.below(8) == 0 {
                wild(rng)
            } else {
                tame(rng)
            }
        };
        let scales: Vec<f32> = (0..shape.scale_len()).map(|_| scale(&mut rng)).collect();
        let d: Vec<f32> = (0..shape.d_len()).map(|_| scale(&mut rng)).collect();
        let q: Vec<u8> = (0..shape.q_len())
            .map(|_| {
                // NaN codes: none, or about one in 8192 (so that some rows
                // of a few blocks stay finite and some do not).
                let c = rng.u8();
                if c & 0x7F == 0x7F && !(self.nan_codes && rng.below(64) == 0) {
                    c ^ 0x01
                } else {
                    c
                }
            })
            .collect();
        let mut x = vec![0f32; shape.act_len()];
        for row in x.chunks_mut(self.in_f) {
            for block in row.chunks_mut(BLOCK_K) {
                // One exponent per block, so whole blocks are tiny or huge.
                let e = if self.wild_x {
                    rng.below(277) as i32 - 149
                } else {
                    rng.below(40) as i32 - 20
                };
                for v in block.iter_mut() {
                    *v = if self.wild_x && rng.below(32) == 0 {
                        wild(&mut rng)
                    } else {
                        (2.0 * rng.f01() - 1.0) * pow2(e)
                    };
                }
            }
        }
        RawData {
            shape,
            w,
            scales,
            x,
            q,
            d,
        }
    }
}

impl RawData {
    /// The spec's answers on these operands (the quantizer on `x`, the
    /// GEMM under `schedule` on `q` and `d`).
    pub fn spec(&self, schedule: Schedule) -> SpecRun<'_> {
        SpecRun::new(
            self.shape,
            schedule,
            &self.w,
            &self.scales,
            &self.x,
            Some((&self.q, &self.d)),
        )
        .expect("lengths come from the shape")
    }
}

/// Checks every target, forced ([`Simd::ALL`](super::Simd::ALL): a target
/// this CPU lacks runs its tile compiled for the baseline), against the
/// spec on `case`, under every known schedule ([`Schedule::KNOWN`]; the
/// targets of [`targets_for`] each).
///
/// # Panics
/// On any differing bit pattern, naming the target, the schedule and the
/// case.
pub fn check_raw(case: &RawCase) {
    let data = case.generate();
    for schedule in Schedule::KNOWN {
        check_raw_schedule(case, &data, schedule);
    }
}

fn check_raw_schedule(case: &RawCase, data: &RawData, schedule: Schedule) {
    let spec = data.spec(schedule);
    for &simd in targets_for(&schedule) {
        if let Some(diff) = spec.diff(simd) {
            panic!(
                "fast path ({}, {}) differs from the spec on raw operands: {diff}\n  case: {case:?}",
                simd.name(),
                if simd.is_available() {
                    "native"
                } else {
                    "baseline build of its tile"
                }
            );
        }
    }
}
