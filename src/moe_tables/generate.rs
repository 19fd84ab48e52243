//! Case generation for the MoE verify-rows tables: an `Arbitrary`
//! [`CaseSpec`] biased to the edges (the top expert, serving strides past
//! 4 GiB, strides up to 2^40 bytes, bases near the top of the address
//! space, out-of-range ids, NaN/subnormal/negative/zero weights), and the
//! data it expands to.
//!
//! Every field of a [`CaseSpec`] is printed in a reproduction; the data
//! (ids, weights, macro planes) are drawn from `seed` with splitmix64, so
//! the same spec regenerates the same bytes on any host.

use crate::rng::Rng;
use arbitrary::{Arbitrary, Unstructured};
use oracle::moe_tables::{Bank, Slab, PLANES};

/// The generator's bounds, one place (cranelift-fuzzgen's `Config`).
pub mod config {
    /// Experts in a bank: 1 ..= this.
    pub const MAX_EXPERTS: u32 = 1024;
    /// Pairs in a case: 0 ..= this (above one 256-thread CTA, several CTAs).
    pub const MAX_PAIRS: u32 = 1200;
    /// The largest generated stride (bytes): 2^40.
    pub const MAX_STRIDE: u64 = 1 << 40;
    /// Layer ids used as the macro-plane cache key: 0 .. this. Few, so
    /// consecutive cases reuse a layer id with other planes (the stale
    /// cache check).
    pub const LAYERS: u32 = 4;
}

/// How the routing weights are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Arbitrary)]
pub enum WeightMix {
    /// Uniform in [0, 1), as a router's softmax gives, and macro planes
    /// near 1.
    Routing,
    /// One in two weights special: negative, subnormal, +-0, +-inf, NaN
    /// with assorted payloads and signs (signalling included), f32::MAX,
    /// raw random bits; macro planes likewise (NaN payloads must survive
    /// the gate and up copies bit for bit; NaN down scales are canonical).
    Special,
}

/// One MoE tables case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CaseSpec {
    /// Experts in the bank (1 ..= 1024).
    pub n_expert: u32,
    /// Pairs (0 ..= 1200).
    pub n_pairs: u32,
    /// Gate, up, down slabs (bytes).
    pub slabs: [Slab; PLANES],
    /// Whether the bank has macro-scale planes.
    pub macros: bool,
    /// The macro-plane cache key.
    pub layer: u32,
    /// One pair in `bad_ids` (on average) gets an expert id outside
    /// `0 .. n_expert`; 0 means none.
    pub bad_ids: u8,
    /// How weights and macro planes are drawn.
    pub weights: WeightMix,
    /// Whether the launch runs on one CTA of 256 threads
    /// (`MoeEngine::vrows_tables`): past 256 pairs the kernel's
    /// grid-stride loop then makes more than one pass, which the shim's
    /// grid of one thread a pair never does.
    pub one_cta: bool,
    /// splitmix64 seed of the ids, weights and planes.
    pub seed: u64,
}

/// A case's data, host side. The gate builds these directly; `weights` may
/// be shorter or longer than `experts` (a length refusal).
#[derive(Clone, Debug, PartialEq)]
pub struct CaseData {
    /// Experts in the bank.
    pub n_expert: usize,
    /// Gate, up, down slabs.
    pub slabs: [Slab; PLANES],
    /// Expert id per pair.
    pub experts: Vec<i32>,
    /// Routing weight per pair.
    pub weights: Vec<f32>,
    /// Macro planes gate, up, down (`n_expert` each), or none.
    pub macros: Option<[Vec<f32>; PLANES]>,
    /// The macro-plane cache key.
    pub layer: u32,
}

impl CaseData {
    /// The bank the contract and the shim take.
    pub fn bank(&self) -> Bank<'_> {
        Bank {
            n_expert: self.n_expert,
            slabs: self.slabs,
            macros: self
                .macros
                .as_ref()
                .map(|m| [m[0].as_slice(), m[1].as_slice(), m[2].as_slice()]),
        }
    }
}

/// A slab whose stride and base classes a selector byte picks: bits 0-2
/// the stride (0: up to 1 MiB; 1: 24 MiB; 2: 48 MiB; 3: a power of two up
/// to 2^40; 4: a power of two from 2^20 plus up to 4 KiB; 5: anything up
/// to [`config::MAX_STRIDE`]; 6, 7: zero), bits 3-5 the base (0-3: a
/// user-space heap address; 4: zero; 5: anything; 6: within 2^44 of the
/// top of the address space; 7: within 2^32 of it). Values within a class
/// come from the input's later bytes.
fn slab(u: &mut Unstructured<'_>, sel: u8) -> arbitrary::Result<Slab> {
    use config::MAX_STRIDE;
    let stride = match sel & 7 {
        0 => u.int_in_range(0..=1u64 << 20)?,
        1 => 24 << 20,
        2 => 48 << 20,
        3 => 1u64 << u.int_in_range(0..=40u32)?,
        4 => (1u64 << u.int_in_range(20..=40u32)?) + u.int_in_range(1..=4096u64)?,
        5 => u.int_in_range(0..=MAX_STRIDE)?,
        _ => 0,
    };
    let base = match (sel >> 3) & 7 {
        0..=3 => 0x0000_7f00_0000_0000 + (u.int_in_range(0..=1u64 << 28)? << 12),
        4 => 0,
        5 => u.arbitrary()?,
        6 => u64::MAX - u.int_in_range(0..=1u64 << 44)?,
        _ => u64::MAX - u.int_in_range(0..=u64::from(u32::MAX))?,
    };
    Ok(Slab { base, stride })
}

/// The number of leading bytes [`CaseSpec`]'s `Arbitrary` reads as path
/// selectors (see there).
pub const SELECTOR_BYTES: usize = 5;

impl<'a> Arbitrary<'a> for CaseSpec {
    /// Every choice that selects a path comes from the first
    /// [`SELECTOR_BYTES`] bytes: libFuzzer's inputs start at a few bytes
    /// (its `lim` grows slowly) and a field drawn from an exhausted input
    /// takes its first value, so a choice drawn late is starved. The
    /// layout:
    ///
    /// - byte 0: bits 0-1 all set: bad ids (1/4; an all-zero input has
    ///   none, since libFuzzer keeps many short inputs that would otherwise
    ///   refuse every pair); bit 2: macro planes (1/2); bit 3: special
    ///   weights ([`WeightMix::Special`], 1/2); bits 4-5: the layer id
    ///   (1/4 each); bits 6-7: n_expert (1, 256, 1024, or anything up to
    ///   1024, from later bytes: 1/4 each);
    /// - byte 1: bits 0-2: n_pairs (0, 1, 8, 256, 257: 1/8 each; anything
    ///   up to 1200: 3/8); bits 3-6: one pair in `1 + b` gets a bad id;
    ///   bit 7: the launch on one CTA (1/2);
    /// - bytes 2, 3, 4: the gate, up and down slabs' stride and base
    ///   classes (see `slab`);
    /// - then the values within the classes, and the seed.
    ///
    /// (The classes used to be drawn one after another with the values
    /// between them; inputs of an older fuzz corpus decode to other cases.
    /// A printed reproduction names its case and is unaffected.)
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<CaseSpec> {
        use config::{MAX_EXPERTS, MAX_PAIRS};
        let sel: [u8; SELECTOR_BYTES] = u.arbitrary()?;
        let n_expert = match sel[0] >> 6 {
            0 => 1,
            1 => 256,
            2 => MAX_EXPERTS,
            _ => u.int_in_range(1..=MAX_EXPERTS)?,
        };
        let n_pairs = match sel[1] & 7 {
            0 => 0,
            1 => 1,
            2 => 8,
            3 => 256,
            4 => 257,
            _ => u.int_in_range(0..=MAX_PAIRS)?,
        };
        let slabs = [slab(u, sel[2])?, slab(u, sel[3])?, slab(u, sel[4])?];
        Ok(CaseSpec {
            n_expert,
            n_pairs,
            slabs,
            macros: sel[0] & 4 != 0,
            layer: u32::from((sel[0] >> 4) & 3) % config::LAYERS,
            bad_ids: if sel[0] & 3 == 3 {
                1 + ((sel[1] >> 3) & 15)
            } else {
                0
            },
            weights: if sel[0] & 8 != 0 {
                WeightMix::Special
            } else {
                WeightMix::Routing
            },
            one_cta: sel[1] & 0x80 != 0,
            seed: u.arbitrary()?,
        })
    }

    /// At most 5 selector bytes and 67 of values (the widest choice of
    /// every field); bounded, so bolero's random driver hands over enough
    /// bytes.
    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (SELECTOR_BYTES, Some(SELECTOR_BYTES + 2 + 2 + 3 * 16 + 8))
    }
}

/// A special f32 (weights and macro planes of [`WeightMix::Special`]).
fn special(r: &mut Rng) -> f32 {
    let bits: u32 = match r.below(12) {
        0 => 0x8000_0000,                               // -0.0
        1 => 0x0000_0000,                               // +0.0
        2 => 1 + r.below(0x007F_FFFF) as u32,           // positive subnormal
        3 => 0x8000_0001 + r.below(0x007F_FFFF) as u32, // negative subnormal
        4 => 0x7FC0_0000,                               // the default quiet NaN
        5 => 0xFFC0_0000 | r.below(1 << 22) as u32,     // negative quiet NaN, payload
        6 => 0x7F80_0001 + r.below(0x003F_FFFF) as u32, // signalling NaN
        7 => 0x7F80_0000 | ((r.below(2) as u32) << 31), // +-inf
        8 => 0x7F7F_FFFF,                               // f32::MAX
        9 => (-(r.f01() * 4.0)).to_bits(),              // negative weight
        10 => r.next_u64() as u32,                      // any bits
        _ => 0x0080_0000,                               // f32::MIN_POSITIVE
    };
    f32::from_bits(bits)
}

impl CaseSpec {
    /// Draws the case's data from `seed`.
    pub fn generate(&self) -> CaseData {
        let mut r = Rng(self.seed);
        let n = self.n_expert as usize;
        let mut experts = Vec::with_capacity(self.n_pairs as usize);
        let mut weights = Vec::with_capacity(self.n_pairs as usize);
        for _ in 0..self.n_pairs {
            let e = if self.bad_ids != 0 && r.below(usize::from(self.bad_ids)) == 0 {
                match r.below(6) {
                    0 => -1,
                    1 => self.n_expert as i32,
                    2 => self.n_expert as i32 + 1 + r.below(1000) as i32,
                    3 => i32::MIN,
                    4 => i32::MAX,
                    _ => -(1 + r.below(1 << 20) as i32),
                }
            } else if r.below(4) == 0 {
                n as i32 - 1 // the top expert: the largest offset
            } else {
                r.below(n) as i32
            };
            experts.push(e);
            let w = match self.weights {
                WeightMix::Special if r.below(2) == 0 => special(&mut r),
                _ => r.f01(),
            };
            weights.push(w);
        }
        let macros = self.macros.then(|| {
            [1.0f32, 2.0, 3.0].map(|o| {
                (0..n)
                    .map(|i| match self.weights {
                        WeightMix::Special if r.below(4) == 0 => special(&mut r),
                        _ => o + i as f32 * 1e-3 + r.f01() * 1e-4,
                    })
                    .collect()
            })
        });
        CaseData {
            n_expert: n,
            slabs: self.slabs,
            experts,
            weights,
            macros,
            layer: self.layer,
        }
    }
}
