//! Cases for judging a KV-cache write kernel (vLLM's
//! `reshape_and_cache_flash` and `reshape_and_cache`, its Triton
//! `triton_reshape_and_cache_flash`, SGLang's `set_kv_buffer`, a torch
//! `index_copy_`) bit for bit under the layout, cache dtype and FP8
//! arithmetic it declares ([`oracle::kv_cache`]), and for naming every
//! known FP8 arithmetic ([`Known`]) its written elements match.
//!
//! A case (elements, row-major): `key`, `value` `[T][num_kv_heads]
//! [head_size]` in the model's dtype, `slot_mapping [T]` (int64, negative
//! for padding), `k_scale` and `v_scale` (f32, one each), and the two
//! caches in the layout's shape, filled with poison: random bits drawn
//! from the seed, every one of which an element the contract does not
//! write must keep (rule `KV-KEEP`).

use crate::rng::Rng;
use oracle::conventions::Overflow;
use oracle::dtype::Dtype;
use oracle::fp8::{self, Fp8Format};
use oracle::kv_cache::{
    check_inputs, convert, same_element, Conversion, Inputs, KvCacheDtype, Layout, ScaleRule, Shape,
};
use rayon::prelude::*;
use std::collections::HashSet;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal values (a sixteenth of them scaled down by up to 2^-11, into
    /// the FP8 subnormals), random distinct slots, about one token in
    /// eight padding (`-1`; the last token too on half the seeds), the
    /// cache's last slot left free: the index maps, the scale (a random
    /// binary32, `k_scale != v_scale`), the rounding (nearest even against
    /// toward zero) and a padding token read as slot `-1` (the last
    /// block's last offset, in Python's and torch's negative indexing).
    Rand,
    /// The slots a kernel gets wrong: every third token padding (one of
    /// them `-2`: any negative slot is padding) but never the last, the
    /// cache's last slot and the first slot of its last block, offsets 0
    /// and `block_size - 1` of other blocks and consecutive slots of one
    /// block, handed to the tokens in shuffled order; values as RAND's.
    Slots,
    /// A prefill's slot map: token `t` at slot `start + t`, `start` in
    /// the middle of a block (offset `block_size - 1` or near it, so the
    /// run crosses as many block boundaries as the tokens allow: two and
    /// more wherever `T > block_size + 2`), then on half the seeds one to
    /// three padding tokens at the tail (CUDA-graph padding); values as
    /// RAND's. A kernel's fast path for a contiguous run runs here.
    Prefill,
    /// The edges of the conversion, on power-of-two scales (so every
    /// scaled value is exact): under FP8, scaled values at the format's
    /// max finite, the dtype's neighbours of it, the midpoint past it
    /// (E4M3 464: nearest even gives 448 under either policy) and its
    /// neighbours, twice it, the dtype's max finite, `±inf`, NaN, `±0`,
    /// the FP8 subnormals and the midpoints among them (half the smallest
    /// subnormal ties to zero); under `"auto"`, the dtype's special bit
    /// patterns (quiet and signaling NaNs with payloads, `±inf`, `±0`,
    /// subnormals, max finite), which a copy must keep bit for bit. Slots
    /// as RAND's.
    Sat,
    /// FP8 only: rounding ties, in keys and in values, one of them EXACT
    /// and the other NEAR (which is which drawn from the seed: either way
    /// round on about half the seeds; both EXACT under F32, where there
    /// is no dtype rounding to part). EXACT: elements `m r`, `r = k 2^e`
    /// (`k` a small odd integer whose binary32 reciprocal is inexact:
    /// [`ties_multiplier`]), `m` a midpoint between two codes (or a code),
    /// exact in the dtype. The dividing rules are handed `r`: the division
    /// lands exactly on `m` (nearest even against half away from zero),
    /// the multiply by the reciprocal one binary32 ulp off most midpoints
    /// (78 of 126 for bf16 and E4M3), a code away wherever the even code
    /// lies on the other side. The multiplying rules are handed `RN(1/r)`:
    /// the product is that multiply (ties where it lands on `m`), and a
    /// division by the handed scale's reciprocal gives another code on
    /// about a quarter of the midpoints. NEAR: a random binary32 scale,
    /// chosen among 64 draws so that the declared rule parts from the
    /// rules that round otherwise, each element the dtype's rounding of a
    /// midpoint times the scale:
    /// the scaled value sits within the dtype's half ulp of the midpoint,
    /// so the rules that round to the model's dtype first tie and the
    /// others do not, and a scale the dtype cannot hold parts the rule
    /// that rounds it ([`ScaleRule::DivideScaleInDtype`]).
    Ties,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 5] = [Arm::Rand, Arm::Slots, Arm::Prefill, Arm::Sat, Arm::Ties];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Slots => "SLOTS",
            Arm::Prefill => "PREFILL",
            Arm::Sat => "SAT",
            Arm::Ties => "TIES",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// Whether the arm runs on a cache of `kv` (TIES needs FP8).
    pub fn runs_on(self, kv: KvCacheDtype) -> bool {
        self != Arm::Ties || kv != KvCacheDtype::Auto
    }
}

/// The layout named `s` ([`Layout::name`], any case).
///
/// # Errors
/// A sentence naming the layouts.
pub fn parse_layout(s: &str) -> Result<Layout, String> {
    Layout::from_name(s)
        .ok_or_else(|| format!("layout {s:?}: expected \"nhd\", \"hnd\" or \"paged\""))
}

/// The cache dtype named `s` ([`KvCacheDtype::from_name`]).
///
/// # Errors
/// A sentence naming the cache dtypes.
pub fn parse_kv_cache_dtype(s: &str) -> Result<KvCacheDtype, String> {
    KvCacheDtype::from_name(s).ok_or_else(|| {
        format!("kv_cache_dtype {s:?}: expected \"auto\", \"fp8\", \"fp8_e4m3\" or \"fp8_e5m2\"")
    })
}

/// The scale rule named `s` ([`ScaleRule::name`]).
///
/// # Errors
/// A sentence naming the rules.
pub fn parse_scale_rule(s: &str) -> Result<ScaleRule, String> {
    ScaleRule::from_name(s).ok_or_else(|| {
        format!(
            "scale_rule {s:?}: expected \"divide\", \"reciprocal\", \"multiply\", \"divide_in_dtype\", \"reciprocal_in_dtype\", \"multiply_in_dtype\" or \"divide_scale_in_dtype\""
        )
    })
}

/// The name of an overflow policy in labels: `"sat_finite"` or
/// `"non_saturating"` (the Python enum's members, lowercased).
pub fn overflow_name(o: Overflow) -> &'static str {
    match o {
        Overflow::SatFinite => "sat_finite",
        Overflow::NonSaturating => "non_saturating",
    }
}

/// What a kernel's written elements can be found to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Known {
    /// `"auto"`: the inputs' bits, copied.
    Copy,
    /// FP8: a scale rule and an overflow policy.
    Fp8(Conversion),
}

impl Known {
    /// Every known arithmetic of a cache of `kv`: the copy, or the
    /// fourteen FP8 conversions (each rule with `sat_finite`, then with
    /// `non_saturating`).
    pub fn all(kv: KvCacheDtype) -> Vec<Known> {
        if kv == KvCacheDtype::Auto {
            return vec![Known::Copy];
        }
        let mut v = Vec::new();
        for overflow in [Overflow::SatFinite, Overflow::NonSaturating] {
            for rule in ScaleRule::ALL {
                v.push(Known::Fp8(Conversion { rule, overflow }));
            }
        }
        v
    }

    /// `"copy"` or `"divide/sat_finite"`.
    pub fn label(&self) -> String {
        match self {
            Known::Copy => "copy".into(),
            Known::Fp8(c) => format!("{}/{}", c.rule.name(), overflow_name(c.overflow)),
        }
    }
}

/// The most key (and value) elements a case has: 2^22 each (16 MiB of
/// f32).
pub const MAX_ELEMS: usize = 1 << 22;

/// The most elements of each cache: 2^24 (a check holds about six
/// arrays of that many words per cache: the poison, the callable's,
/// the oracle's, where each element comes from).
pub const MAX_CACHE: usize = 1 << 24;

/// The most tokens (the oracle's slot check is a plain quadratic scan).
pub const MAX_TOKENS: usize = 1 << 14;

/// `(tokens, num_kv_heads, head_size, block_size, num_blocks)`.
pub type Dims = (usize, usize, usize, usize, usize);

/// The oracle's shape of `d` in `layout` for a cache of `kv` holding a
/// model of `dtype`, refused past the caps.
///
/// # Errors
/// A shape error ([`oracle::kv_cache::KvCacheError`]) or a case over
/// [`MAX_ELEMS`], [`MAX_CACHE`] or [`MAX_TOKENS`], as a sentence.
pub fn within_caps(
    layout: Layout,
    kv: KvCacheDtype,
    dtype: Dtype,
    d: Dims,
) -> Result<Shape, String> {
    let shape = Shape::new(layout, d.0, d.1, d.2, d.3, d.4, kv.element_bytes(dtype))
        .map_err(|e| format!("{d:?}: {e}"))?;
    if shape.tokens() > MAX_TOKENS {
        return Err(format!(
            "{d:?}: {} tokens, over the check's {MAX_TOKENS}",
            shape.tokens()
        ));
    }
    if shape.key_len() > MAX_ELEMS {
        return Err(format!(
            "{d:?}: {} key elements, over the check's {MAX_ELEMS}",
            shape.key_len()
        ));
    }
    if shape.cache_len() > MAX_CACHE {
        return Err(format!(
            "{d:?}: {} elements a cache (num_blocks*block_size*num_kv_heads*head_size), over the check's {MAX_CACHE}",
            shape.cache_len()
        ));
    }
    Ok(shape)
}

/// `(tokens, kv_lora_rank, pe_dim, block_size, num_blocks)`: an MLA
/// latent cache's dimensions.
pub type MlaDims = (usize, usize, usize, usize, usize);

/// The case dimensions of an MLA latent cache (rule `KV-MLA`): one head
/// of `kv_lora_rank + pe_dim`, the key rows being `kv_c ++ k_pe`.
pub fn mla_dims(d: MlaDims) -> Dims {
    (d.0, 1, d.1.saturating_add(d.2), d.3, d.4)
}

/// The oracle's shape of an MLA latent cache ([`oracle::kv_cache::mla_shape`]),
/// refused past the caps.
///
/// # Errors
/// As [`within_caps`], and a zero `kv_lora_rank` or `pe_dim`.
pub fn mla_within_caps(kv: KvCacheDtype, dtype: Dtype, d: MlaDims) -> Result<Shape, String> {
    oracle::kv_cache::mla_shape(d.0, d.1, d.2, d.3, d.4).map_err(|e| format!("{d:?}: {e}"))?;
    within_caps(Layout::Nhd, kv, dtype, mla_dims(d))
}

/// An MLA case's `kv_c` `[T][kv_lora_rank]` and `k_pe` `[T][pe_dim]`: the
/// key rows of `case` (drawn on [`mla_dims`]) split after `kv_lora_rank`
/// elements. Its scale is `k_scale`; the value side is unused.
pub fn split_mla(case: &Case, kv_lora_rank: usize, row: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut kv_c, mut k_pe) = (Vec::new(), Vec::new());
    for r in case.key.chunks(row) {
        kv_c.extend_from_slice(&r[..kv_lora_rank]);
        k_pe.extend_from_slice(&r[kv_lora_rank..]);
    }
    (kv_c, k_pe)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The dimensions.
    pub dims: Dims,
    /// The caches' layout.
    pub layout: Layout,
    /// What the caches store.
    pub kv: KvCacheDtype,
    /// The model's dtype (keys and values).
    pub dtype: Dtype,
    /// The declared scale rule: SAT and TIES aim the scaled values through
    /// it (a multiplying rule gets `x = target / s`, the others `x =
    /// target s`; TIES's EXACT elements are `target r` either way, a
    /// multiplying rule being handed `s = RN(1/r)`).
    pub rule: ScaleRule,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs, as bits.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[T][num_kv_heads][head_size]`, the dtype's bits.
    pub key: Vec<u32>,
    /// `[T][num_kv_heads][head_size]`, the dtype's bits.
    pub value: Vec<u32>,
    /// `[T]`.
    pub slot_mapping: Vec<i64>,
    /// The keys' scale.
    pub k_scale: f32,
    /// The values' scale.
    pub v_scale: f32,
    /// The key cache before the call (poison), each element's bits.
    pub key_cache: Vec<u32>,
    /// The value cache before the call (poison).
    pub value_cache: Vec<u32>,
}

impl Case {
    /// The inputs as the oracle takes them.
    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            key: &self.key,
            value: &self.value,
            slot_mapping: &self.slot_mapping,
            k_scale: self.k_scale,
            v_scale: self.v_scale,
        }
    }
}

impl Spec {
    /// The default seed of a shape, layout, cache dtype, dtype and arm.
    pub fn base_seed(d: Dims, layout: Layout, kv: KvCacheDtype, dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x0CA0_4E5A_0000_0000u64, &[d.0, d.1, d.2, d.3, d.4]);
        let idx = |i: Option<usize>| i.unwrap_or(0) as u64;
        h ^ (idx(Layout::ALL.iter().position(|&l| l == layout)) << 12)
            ^ (idx(KvCacheDtype::ALL.iter().position(|&k| k == kv)) << 8)
            ^ (idx(Dtype::ALL.iter().position(|&x| x == dtype)) << 4)
            ^ idx(Arm::ALL.iter().position(|&a| a == arm))
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.layout, self.kv, self.dtype, self.dims)
    }

    /// The inputs and the poisoned caches, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`]; TIES on an `"auto"` cache.
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        if !self.arm.runs_on(self.kv) {
            return Err(
                "arm TIES needs an FP8 cache (kv_cache_dtype \"fp8_e4m3\" or \"fp8_e5m2\")".into(),
            );
        }
        let mut rng = Rng(self.seed);
        let slot_mapping = draw_slots(&shape, self.arm, &mut rng);
        let (k_scale, v_scale, key, value) = match self.kv.format() {
            None => {
                let key = auto_values(self, &shape, &mut rng);
                let value = auto_values(self, &shape, &mut rng);
                (rng.f01() + 0.5, rng.f01() + 2.0, key, value)
            }
            Some(f) => fp8_values(self, &shape, f, &mut rng),
        };
        let bits = 8 * self.kv.element_bytes(self.dtype) as u32;
        let mask = if bits == 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        let mut poison =
            |n: usize| -> Vec<u32> { (0..n).map(|_| rng.next_u64() as u32 & mask).collect() };
        let key_cache = poison(shape.cache_len());
        let value_cache = poison(shape.cache_len());
        Ok(Case {
            key,
            value,
            slot_mapping,
            k_scale,
            v_scale,
            key_cache,
            value_cache,
        })
    }
}

/// `count` distinct slots from `0..n`, in random order.
fn distinct(n: usize, count: usize, rng: &mut Rng) -> Vec<usize> {
    let count = count.min(n);
    if count * 4 < n {
        let mut seen = HashSet::new();
        let mut v = Vec::with_capacity(count);
        while v.len() < count {
            let s = rng.below(n);
            if seen.insert(s) {
                v.push(s);
            }
        }
        v
    } else {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..count {
            let j = i + rng.below(n - i);
            all.swap(i, j);
        }
        all.truncate(count);
        all
    }
}

/// Shuffles `v` in place (Fisher-Yates).
fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i + 1);
        v.swap(i, j);
    }
}

/// The slot mapping of an arm (see [`Arm`]).
fn draw_slots(shape: &Shape, arm: Arm, rng: &mut Rng) -> Vec<i64> {
    let (t_n, n, bs) = (shape.tokens(), shape.num_slots(), shape.block_size());
    if arm == Arm::Prefill {
        return prefill_slots(shape, rng);
    }
    let pad: Vec<bool> = match arm {
        Arm::Slots => (0..t_n).map(|t| t % 3 == 1 && t + 1 != t_n).collect(),
        _ => {
            // The last token padding on half the seeds, writing on the rest.
            let last = rng.below(2) == 0;
            (0..t_n)
                .map(|t| {
                    if t_n >= 2 && t + 1 == t_n {
                        last
                    } else {
                        rng.below(8) == 0
                    }
                })
                .collect()
        }
    };
    let valid = pad.iter().filter(|&&p| !p).count();
    let chosen: Vec<usize> = match arm {
        Arm::Slots => {
            let nb = shape.num_blocks();
            let mut want = vec![n - 1, (nb - 1) * bs, 0, bs - 1];
            let b = rng.below(nb);
            want.extend([b * bs, b * bs + bs - 1]);
            // Consecutive slots of one block (shuffled with the rest below).
            let b = rng.below(nb);
            want.extend((0..bs.min(8)).map(|o| b * bs + o));
            let mut seen = HashSet::new();
            let mut v: Vec<usize> = want.into_iter().filter(|&s| seen.insert(s)).collect();
            v.truncate(valid);
            let more = distinct(n, valid.min(n), rng);
            v.extend(more.into_iter().filter(|&s| seen.insert(s)));
            v.truncate(valid);
            shuffle(&mut v, rng);
            v
        }
        // The cache's last slot stays free.
        _ => distinct(n - 1, valid, rng),
    };
    // Tokens past the slots available become padding too: the first ones,
    // so that the last token keeps its slot.
    let mut it = chosen.into_iter();
    let mut out: Vec<i64> = pad
        .iter()
        .rev()
        .map(|&p| {
            if p {
                -1
            } else {
                it.next().map_or(-1, |s| s as i64)
            }
        })
        .collect();
    out.reverse();
    if arm == Arm::Slots {
        if let Some(t) = out.iter().position(|&s| s < 0) {
            out[t] = -2;
        }
    }
    out
}

/// PREFILL's slot map (see [`Arm::Prefill`]): `run` tokens at slots
/// `start..start + run`, then the tail's padding. The first slot's offset
/// is drawn among the offsets `1..block_size` (0 when `block_size` is 1)
/// whose run crosses the most block boundaries and fits the cache; its
/// block among those the run fits from.
fn prefill_slots(shape: &Shape, rng: &mut Rng) -> Vec<i64> {
    let (t_n, n, bs) = (shape.tokens(), shape.num_slots(), shape.block_size());
    let tail = if t_n >= 2 && rng.below(2) == 0 {
        1 + rng.below((t_n - 1).min(3))
    } else {
        0
    };
    let run = (t_n - tail).min(n);
    let crossings = |o: usize| (o + run - 1) / bs;
    let fits: Vec<usize> = (1..bs).filter(|&o| o + run <= n).collect();
    let o = match fits.iter().map(|&o| crossings(o)).max() {
        Some(most) => {
            let best: Vec<usize> = fits.into_iter().filter(|&o| crossings(o) == most).collect();
            best[rng.below(best.len())]
        }
        None => 0,
    };
    let start = rng.below((n - o - run) / bs + 1) * bs + o;
    (0..t_n)
        .map(|t| if t < run { (start + t) as i64 } else { -1 })
        .collect()
}

/// Bits of `x` rounded to `dtype`.
fn enc(dtype: Dtype, x: f32) -> u32 {
    dtype.encode(x)
}

/// The dtype's special bit patterns (SAT under `"auto"`): quiet NaNs
/// with and without payload, negative, a signaling NaN, `±inf`, `±0`, the
/// smallest and largest subnormal, the smallest normal, max finite and
/// its negation.
fn specials(dtype: Dtype) -> Vec<u32> {
    match dtype {
        Dtype::F32 => vec![
            0x7FC0_0000,
            0x7FC0_1234,
            0xFFC0_0000,
            0x7F80_0001,
            0x7F80_0000,
            0xFF80_0000,
            0x0000_0000,
            0x8000_0000,
            0x0000_0001,
            0x007F_FFFF,
            0x0080_0000,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x8000_0001,
        ],
        Dtype::Bf16 => vec![
            0x7FC0, 0x7FC5, 0xFFC0, 0x7F81, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001, 0x007F, 0x0080,
            0x7F7F, 0xFF7F, 0x8001,
        ],
        Dtype::F16 => vec![
            0x7E00, 0x7E05, 0xFE00, 0x7C01, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x03FF, 0x0400,
            0x7BFF, 0xFBFF, 0x8001,
        ],
    }
}

/// The keys or values of a case under `"auto"`: normal values; under
/// SAT half of them special bit patterns.
fn auto_values(sp: &Spec, shape: &Shape, rng: &mut Rng) -> Vec<u32> {
    let sp_bits = specials(sp.dtype);
    (0..shape.key_len())
        .map(|_| {
            if sp.arm == Arm::Sat && rng.below(2) == 0 {
                sp_bits[rng.below(sp_bits.len())]
            } else {
                enc(sp.dtype, rng.normal())
            }
        })
        .collect()
}

/// The value of code `c` (positive, finite) of `f`.
fn code_value(f: &Fp8Format, c: u8) -> f32 {
    fp8::decode(f, c, oracle::conventions::NanMagnitude::Ieee)
}

/// The midpoints between consecutive positive finite codes of `f`
/// (`0x00`..`max_finite`), in increasing order.
fn midpoints(f: &Fp8Format) -> Vec<f32> {
    (0..f.max_finite)
        .map(|c| (code_value(f, c) + code_value(f, c + 1)) / 2.0)
        .collect()
}

/// The dtype's significant bits (8, 11, 24).
fn precision(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F32 => 24,
        Dtype::Bf16 => 8,
        Dtype::F16 => 11,
    }
}

/// TIES's EXACT scale multiplier: the odd `k` (3..=63) whose product with
/// every midpoint of `f` fits `dtype`'s precision and that parts the most
/// midpoints `m` (1 when none fits). For the dividing rules (`multiplies`
/// false), the most moved off themselves by the binary32 reciprocal
/// (`RN(RN(m k) RN(1/k)) != m`): bf16: 7 for E4M3 (78 of 126 midpoints),
/// 15 for E5M2; f16 and f32: 63 (125 of 126). For the multiplying rules,
/// handed `RN(1/k)`, the most whose code under that product differs from
/// the code of `RN(m k) / RN(1/RN(1/k))` (a division by the reciprocal of
/// the handed scale): 7 for bf16 (33 of 126, E4M3), 13 for f16 and f32
/// (48) under E4M3; 7 under E5M2.
pub fn ties_multiplier(dtype: Dtype, f: &Fp8Format, multiplies: bool) -> u32 {
    let m_bits = f.mantissa_bits + 2;
    let room = precision(dtype).saturating_sub(m_bits);
    let mids = midpoints(f);
    let code = |q: f32| fp8::encode(f, q, Overflow::SatFinite);
    let mut best = (0usize, 1u32);
    for k in (3..=63u32).step_by(2) {
        if 32 - k.leading_zeros() > room {
            continue;
        }
        let r = 1.0 / k as f32;
        let parted = mids
            .iter()
            .filter(|&&m| {
                let x = m * k as f32;
                if multiplies {
                    code(x * r) != code(x / (1.0 / r))
                } else {
                    x * r != m
                }
            })
            .count();
        if parted > best.0 {
            best = (parted, k);
        }
    }
    best.1
}

/// `2^e` as f32 (`-126 <= e <= 127`).
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// The dtype's largest finite value.
fn dtype_max(dtype: Dtype) -> f32 {
    dtype.decode(match dtype {
        Dtype::F32 => 0x7F7F_FFFF,
        Dtype::Bf16 => u32::from(oracle::bf16::MAX_FINITE),
        Dtype::F16 => u32::from(oracle::f16::MAX_FINITE),
    })
}

/// The next dtype value above (`up`) or below the positive finite `x`.
fn step(dtype: Dtype, x: f32, up: bool) -> f32 {
    dtype.steps(x, if up { 1 } else { -1 })
}

/// `(k_scale, v_scale, key, value)` of an FP8 case.
fn fp8_values(
    sp: &Spec,
    shape: &Shape,
    f: &Fp8Format,
    rng: &mut Rng,
) -> (f32, f32, Vec<u32>, Vec<u32>) {
    let dt = sp.dtype;
    let max = code_value(f, f.max_finite);
    let mul = sp.rule.multiplies();
    // x with scaled value `target` under scale s.
    let place = |target: f32, s: f32| if mul { target / s } else { target * s };
    // A random binary32 scale for normal inputs of amplitude `amp`: the
    // scaled values reach about half the max finite.
    let random_scale = |rng: &mut Rng, amp: f32| {
        let s = amp * 8.0 / max * (1.0 + rng.f01());
        if mul {
            1.0 / s
        } else {
            s
        }
    };
    let n = shape.key_len();
    match sp.arm {
        Arm::Rand | Arm::Slots | Arm::Prefill => {
            let draw = |rng: &mut Rng| {
                let amp = pow2(rng.below(5) as i32 - 2);
                let s = random_scale(rng, amp);
                let v: Vec<u32> = (0..n)
                    .map(|_| {
                        let mut x = rng.normal() * amp;
                        if rng.below(16) == 0 {
                            x *= pow2(-(rng.below(12) as i32));
                        }
                        enc(dt, x)
                    })
                    .collect();
                (s, v)
            };
            let (mut ks, key) = draw(rng);
            let (vs, value) = draw(rng);
            if ks == vs {
                ks *= 1.5;
            }
            (ks, vs, key, value)
        }
        Arm::Sat => {
            let ek = -(1 + rng.below(6) as i32);
            let ev = ek - 1 - rng.below(3) as i32;
            let draw = |rng: &mut Rng, s: f32| -> Vec<u32> {
                let mu = code_value(f, 0x01);
                let prev = code_value(f, f.max_finite - 1);
                let over = max + (max - prev) / 2.0;
                let at = |t: f32| dt.round(place(t, s));
                let mut targets = vec![
                    at(max),
                    step(dt, at(max), true),
                    step(dt, at(max), false),
                    at((max + prev) / 2.0),
                    at(over),
                    step(dt, at(over), true),
                    step(dt, at(over), false),
                    at(2.0 * max),
                    dtype_max(dt),
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    f32::NAN,
                    -f32::NAN,
                    0.0,
                    -0.0,
                    at(mu),
                    at(mu / 2.0),
                    step(dt, at(mu / 2.0), true),
                    step(dt, at(mu / 2.0), false),
                    at(mu / 4.0),
                    at(mu * 1.5),
                    at(code_value(f, 1 << f.mantissa_bits)),
                ];
                // The midpoint between the largest subnormal and the
                // smallest normal.
                let sub_top = (1u8 << f.mantissa_bits) - 1;
                targets.push(at(
                    (code_value(f, sub_top) + code_value(f, sub_top + 1)) / 2.0
                ));
                (0..n)
                    .map(|_| {
                        if rng.below(2) == 0 {
                            let t = targets[rng.below(targets.len())];
                            let t = if t.is_nan() || rng.below(2) == 0 {
                                t
                            } else {
                                -t
                            };
                            enc(dt, t)
                        } else {
                            enc(dt, place(rng.normal() * max / 4.0, s))
                        }
                    })
                    .collect()
            };
            let (ks, vs) = (pow2(ek), pow2(ev));
            let (ks, vs) = if mul { (1.0 / ks, 1.0 / vs) } else { (ks, vs) };
            let key = draw(rng, ks);
            let value = draw(rng, vs);
            (ks, vs, key, value)
        }
        Arm::Ties => {
            // Which of keys and values is EXACT, the other NEAR; both EXACT
            // under F32 (no dtype rounding to part).
            let keys_exact = rng.below(2) == 0;
            let f32_model = dt == Dtype::F32;
            let draw = |rng: &mut Rng, exact: bool| {
                if exact || f32_model {
                    ties_exact(sp, n, f, rng)
                } else {
                    let s = ties_near_scale(sp, f, rng, random_scale);
                    let mids = midpoints(f);
                    let v = (0..n)
                        .map(|_| {
                            let m = mids[rng.below(mids.len())];
                            let m = if rng.below(2) == 0 { m } else { -m };
                            enc(dt, place(m, s))
                        })
                        .collect();
                    (s, v)
                }
            };
            let (ks, key) = draw(rng, keys_exact);
            let (vs, value) = draw(rng, !keys_exact);
            (ks, vs, key, value)
        }
    }
}

/// TIES's EXACT elements and their scale (see [`Arm::Ties`]): `r = k 2^e`
/// with `k` [`ties_multiplier`]'s and `e` the largest at most 0 with `r`
/// times the format's max finite within half the dtype's, less 0..2;
/// elements `m r` exact in the dtype, `m` a midpoint between two codes (or,
/// one in eight, a code), of random sign. The dividing rules are handed `r`
/// (`x / r` is `m`; `x RN(1/r)` is one binary32 ulp off a third of the
/// midpoints); the multiplying rules `RN(1/r)`, the scale inverted (`x
/// RN(1/r)` is that product; a division by the handed scale's reciprocal
/// lands elsewhere).
fn ties_exact(sp: &Spec, n: usize, f: &Fp8Format, rng: &mut Rng) -> (f32, Vec<u32>) {
    let dt = sp.dtype;
    let max = code_value(f, f.max_finite);
    let k = ties_multiplier(dt, f, sp.rule.multiplies()) as f32;
    let mut e = 0i32;
    while e > -40 && k * pow2(e) * max > dtype_max(dt) / 2.0 {
        e -= 1;
    }
    let r = k * pow2(e - rng.below(3) as i32);
    // `m r`, where it is exact in binary32 (a product of 5 and 6
    // significant bits at most) and in the dtype.
    let exact = |m: f32| {
        let x = m * r;
        (f64::from(m) * f64::from(r) == f64::from(x) && dt.round(x) == x).then_some(x)
    };
    let mids: Vec<f32> = midpoints(f).into_iter().filter_map(exact).collect();
    let codes: Vec<f32> = (0..=f.max_finite)
        .filter_map(|c| exact(code_value(f, c)))
        .collect();
    let v = (0..n)
        .map(|_| {
            let pool = if mids.is_empty() || rng.below(8) == 0 {
                &codes
            } else {
                &mids
            };
            let x = pool[rng.below(pool.len())];
            enc(dt, if rng.below(2) == 0 { x } else { -x })
        })
        .collect();
    (if sp.rule.multiplies() { 1.0 / r } else { r }, v)
}

/// The rules a NEAR tensor parts `rule` from: those of its family that
/// round otherwise (to the model's dtype, its scale, or neither). The
/// division and the multiply by the reciprocal round alike there; EXACT
/// parts them.
fn near_rivals(rule: ScaleRule) -> &'static [ScaleRule] {
    use ScaleRule as R;
    match rule {
        R::Multiply => &[R::MultiplyInDtype],
        R::MultiplyInDtype => &[R::Multiply],
        R::Divide => &[R::DivideInDtype, R::DivideScaleInDtype],
        R::Reciprocal => &[R::ReciprocalInDtype, R::DivideScaleInDtype],
        R::DivideInDtype => &[R::Divide, R::DivideScaleInDtype],
        R::ReciprocalInDtype => &[R::Reciprocal, R::DivideScaleInDtype],
        R::DivideScaleInDtype => &[R::Divide, R::DivideInDtype],
    }
}

/// TIES's NEAR scale (see [`Arm::Ties`]): a random binary32 scale (as `draw` gives them)
/// under which the declared rule's code differs from each of its
/// [`near_rivals`]' on the most classes of midpoints (the midpoints in
/// `[1, 2)`: every binade's share the pattern, the products' mantissas
/// being the same), each element being the dtype's rounding of a midpoint
/// times the scale; the first of up to 64 draws reaching half the classes
/// for every rival, else the best.
fn ties_near_scale(
    sp: &Spec,
    f: &Fp8Format,
    rng: &mut Rng,
    draw: impl Fn(&mut Rng, f32) -> f32,
) -> f32 {
    let dt = sp.dtype;
    let mids: Vec<f32> = midpoints(f)
        .into_iter()
        .filter(|&m| (1.0..2.0).contains(&m))
        .collect();
    let mul = sp.rule.multiplies();
    let mut best = (0usize, draw(rng, 1.0));
    for _ in 0..64 {
        let s = draw(rng, 1.0);
        let parted = near_rivals(sp.rule)
            .iter()
            .map(|&rival| {
                mids.iter()
                    .filter(|&&m| {
                        let x = dt.round(if mul { m / s } else { m * s });
                        let code =
                            |r: ScaleRule| fp8::encode(f, r.scaled(dt, x, s), Overflow::SatFinite);
                        code(sp.rule) != code(rival)
                    })
                    .count()
            })
            .min()
            .unwrap_or(0);
        if parted > best.0 {
            best = (parted, s);
        }
        if 2 * parted >= mids.len() {
            break;
        }
    }
    best.1
}

/// The oracle's caches for a case and where each element comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Want {
    /// The key cache after the call, each element's bits.
    pub key_cache: Vec<u32>,
    /// The value cache after the call.
    pub value_cache: Vec<u32>,
    /// For each key cache element, the index into `key` of the element
    /// written there, or [`UNWRITTEN`].
    pub key_src: Vec<u32>,
    /// For each value cache element, the index into `value`, or
    /// [`UNWRITTEN`].
    pub value_src: Vec<u32>,
}

/// A cache element no token writes (rule `KV-KEEP`).
pub const UNWRITTEN: u32 = u32::MAX;

/// The caches after the call under `kv`, `dtype` and `conv`, and where
/// each element comes from: core's [`oracle::kv_cache::check_inputs`],
/// then each token's elements by core's [`oracle::kv_cache::convert`] at
/// [`Shape::key_index`] and [`Shape::value_index`], in
/// [`oracle::kv_cache::reshape_and_cache`]'s order.
///
/// # Errors
/// As [`oracle::kv_cache::check_inputs`].
pub fn reference(
    shape: &Shape,
    case: &Case,
    kv: KvCacheDtype,
    dtype: Dtype,
    conv: Conversion,
) -> Result<Want, String> {
    let x = case.inputs();
    check_inputs(shape, kv, &x, case.key_cache.len(), case.value_cache.len())
        .map_err(|e| e.to_string())?;
    let mut w = Want {
        key_cache: case.key_cache.clone(),
        value_cache: case.value_cache.clone(),
        key_src: vec![UNWRITTEN; shape.cache_len()],
        value_src: vec![UNWRITTEN; shape.cache_len()],
    };
    let (nh, hs, bs) = (shape.num_kv_heads(), shape.head_size(), shape.block_size());
    for (t, &slot) in case.slot_mapping.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let (b, o) = (slot as usize / bs, slot as usize % bs);
        for h in 0..nh {
            for d in 0..hs {
                let src = (t * nh + h) * hs + d;
                let (ki, vi) = (shape.key_index(b, o, h, d), shape.value_index(b, o, h, d));
                w.key_cache[ki] = convert(kv, dtype, conv, case.key[src], case.k_scale);
                w.value_cache[vi] = convert(kv, dtype, conv, case.value[src], case.v_scale);
                w.key_src[ki] = src as u32;
                w.value_src[vi] = src as u32;
            }
        }
    }
    Ok(w)
}

/// How one cache compares with the oracle's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheVerdict {
    /// Elements the contract writes.
    pub written: usize,
    /// Of those, how many differ ([`same_element`]).
    pub wrong: usize,
    /// The first of them (cache element index).
    pub first_wrong: Option<usize>,
    /// Elements the contract does not write.
    pub unwritten: usize,
    /// Of those, how many changed (bit for bit).
    pub clobbered: usize,
    /// The first of them.
    pub first_clobbered: Option<usize>,
}

impl CacheVerdict {
    /// `got` (a cache's bits after the call) against `want` and `src`
    /// ([`Want`]) under `kv`.
    pub fn judge(kv: KvCacheDtype, got: &[u32], want: &[u32], src: &[u32]) -> CacheVerdict {
        let mut v = CacheVerdict::default();
        for i in 0..want.len() {
            if src[i] == UNWRITTEN {
                v.unwritten += 1;
                if got[i] != want[i] {
                    v.clobbered += 1;
                    v.first_clobbered.get_or_insert(i);
                }
            } else {
                v.written += 1;
                if !same_element(kv, got[i], want[i]) {
                    v.wrong += 1;
                    v.first_wrong.get_or_insert(i);
                }
            }
        }
        v
    }

    /// No written element differs and no other element changed.
    pub fn pass(&self) -> bool {
        self.wrong == 0 && self.clobbered == 0
    }
}

/// Every known arithmetic ([`Known::all`]) whose elements equal `got_k`
/// and `got_v` (the caches' bits after the call; `None`: no value cache,
/// as MLA's) wherever the contract writes (`want`'s sources; the
/// unwritten elements are [`CacheVerdict`]'s).
///
/// # Errors
/// Caches of the wrong length.
pub fn identify(
    case: &Case,
    kv: KvCacheDtype,
    dtype: Dtype,
    want: &Want,
    got_k: &[u32],
    got_v: Option<&[u32]>,
) -> Result<Vec<Known>, String> {
    if got_k.len() != want.key_cache.len()
        || got_v.is_some_and(|v| v.len() != want.value_cache.len())
    {
        return Err("caches of the wrong length".into());
    }
    let mut found = Vec::new();
    for known in Known::all(kv) {
        let conv = match known {
            Known::Copy => Conversion::VLLM,
            Known::Fp8(c) => c,
        };
        let same = |got: &[u32], src: &[u32], input: &[u32], scale: f32| {
            got.par_iter().zip(src.par_iter()).all(|(&g, &s)| {
                s == UNWRITTEN
                    || same_element(kv, g, convert(kv, dtype, conv, input[s as usize], scale))
            })
        };
        if same(got_k, &want.key_src, &case.key, case.k_scale)
            && got_v.is_none_or(|v| same(v, &want.value_src, &case.value, case.v_scale))
        {
            found.push(known);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Dims = (23, 2, 48, 16, 4);

    /// A spec of `arm` on `dims`, with `seed`.
    fn spec(
        dims: Dims,
        layout: Layout,
        kv: KvCacheDtype,
        dtype: Dtype,
        rule: ScaleRule,
        arm: Arm,
        seed: u64,
    ) -> Spec {
        Spec {
            dims,
            layout,
            kv,
            dtype,
            rule,
            arm,
            seed,
        }
    }

    fn case(
        layout: Layout,
        kv: KvCacheDtype,
        dtype: Dtype,
        rule: ScaleRule,
        arm: Arm,
    ) -> (Shape, Case) {
        let sp = spec(
            D,
            layout,
            kv,
            dtype,
            rule,
            arm,
            Spec::base_seed(D, layout, kv, dtype, arm),
        );
        (sp.shape().unwrap(), sp.generate().unwrap())
    }

    fn conv(rule: ScaleRule, overflow: Overflow) -> Conversion {
        Conversion { rule, overflow }
    }

    #[test]
    fn reference_is_cores_reshape_and_cache() {
        for layout in [Layout::Nhd, Layout::Hnd, Layout::Paged] {
            for kv in KvCacheDtype::ALL {
                for arm in Arm::ALL.into_iter().filter(|a| a.runs_on(kv)) {
                    let (shape, c) = case(layout, kv, Dtype::Bf16, ScaleRule::Divide, arm);
                    let cv = Conversion::VLLM;
                    let w = reference(&shape, &c, kv, Dtype::Bf16, cv).unwrap();
                    let (mut k, mut v) = (c.key_cache.clone(), c.value_cache.clone());
                    oracle::kv_cache::reshape_and_cache(
                        &shape,
                        kv,
                        Dtype::Bf16,
                        cv,
                        &c.inputs(),
                        &mut k,
                        &mut v,
                    )
                    .unwrap();
                    assert_eq!(
                        (w.key_cache, w.value_cache),
                        (k, v),
                        "{layout:?} {kv:?} {arm:?}"
                    );
                    let written = w.key_src.iter().filter(|&&s| s != UNWRITTEN).count();
                    let valid = c.slot_mapping.iter().filter(|&&s| s >= 0).count();
                    assert_eq!(written, valid * 2 * 48);
                }
            }
        }
    }

    #[test]
    fn slots_arms_reach_their_edges() {
        let (shape, c) = case(
            Layout::Nhd,
            KvCacheDtype::Auto,
            Dtype::Bf16,
            ScaleRule::Divide,
            Arm::Slots,
        );
        let s = &c.slot_mapping;
        let last = shape.num_slots() as i64 - 1;
        assert!(s.contains(&last) && s.contains(&(last - 15)) && s.contains(&0) && s.contains(&15));
        assert!(s.contains(&-2) && s.iter().filter(|&&v| v == -1).count() >= 6);
        // SLOTS's last token writes.
        assert!(s[22] >= 0);
        let (_, r) = case(
            Layout::Nhd,
            KvCacheDtype::Auto,
            Dtype::Bf16,
            ScaleRule::Divide,
            Arm::Rand,
        );
        assert!(!r.slot_mapping.contains(&last));
        assert!(r.slot_mapping.iter().filter(|&&v| v >= 0).count() >= 12);
        // More tokens than slots: the rest are padding.
        let sp = spec(
            (9, 1, 8, 2, 2),
            Layout::Hnd,
            KvCacheDtype::Auto,
            Dtype::F32,
            ScaleRule::Divide,
            Arm::Slots,
            3,
        );
        let m = sp.generate().unwrap().slot_mapping;
        assert_eq!(m.iter().filter(|&&v| v >= 0).count(), 4);
        let sp = Spec {
            arm: Arm::Rand,
            ..sp
        };
        assert!(sp.generate().unwrap().slot_mapping.iter().all(|&v| v < 3));
    }

    #[test]
    fn ties_separate_rounding_division_and_the_dtype_rounding() {
        let (e4, e5) = (&oracle::fp8::E4M3FN, &oracle::fp8::E5M2);
        assert_eq!(ties_multiplier(Dtype::Bf16, e4, false), 7);
        assert_eq!(ties_multiplier(Dtype::Bf16, e5, false), 15);
        assert_eq!(ties_multiplier(Dtype::F16, e4, false), 63);
        assert_eq!(ties_multiplier(Dtype::Bf16, e4, true), 7);
        assert_eq!(ties_multiplier(Dtype::F16, e4, true), 13);
        assert_eq!(ties_multiplier(Dtype::F32, e5, true), 7);
        for kv in [KvCacheDtype::Fp8E4m3, KvCacheDtype::Fp8E5m2] {
            for dtype in Dtype::ALL {
                let (shape, c) = case(Layout::Nhd, kv, dtype, ScaleRule::Divide, Arm::Ties);
                let want = reference(&shape, &c, kv, dtype, Conversion::VLLM).unwrap();
                let found = identify(
                    &c,
                    kv,
                    dtype,
                    &want,
                    &want.key_cache,
                    Some(&want.value_cache),
                )
                .unwrap();
                // TIES stays below max finite: both overflow policies.
                let mut expect = Vec::new();
                for o in [Overflow::SatFinite, Overflow::NonSaturating] {
                    expect.push(Known::Fp8(conv(ScaleRule::Divide, o)));
                    if dtype == Dtype::F32 {
                        expect.push(Known::Fp8(conv(ScaleRule::DivideInDtype, o)));
                        expect.push(Known::Fp8(conv(ScaleRule::DivideScaleInDtype, o)));
                    }
                }
                assert_eq!(found, expect, "{kv:?} {dtype:?}");
                // Every scaled element of the EXACT side sits exactly on a
                // midpoint (or, one in eight, a code); both sides under F32.
                let f = kv.format().unwrap();
                let mids = midpoints(f);
                let on = |v: &[u32], s: f32| {
                    v.iter()
                        .filter(|&&b| mids.contains(&(dtype.decode(b) / s).abs()))
                        .count()
                };
                let (k, v) = (on(&c.key, c.k_scale), on(&c.value, c.v_scale));
                let n = c.key.len();
                let exact = |m: usize| m * 4 > n * 3;
                assert!(exact(k) || exact(v), "{kv:?} {dtype:?}: {k}, {v} of {n}");
                assert!(dtype != Dtype::F32 || (exact(k) && exact(v)));
            }
        }
        // The rules that round to bf16 first part from the others on the
        // values (near-ties).
        let kv = KvCacheDtype::Fp8E4m3;
        let (shape, c) = case(
            Layout::Paged,
            kv,
            Dtype::Bf16,
            ScaleRule::DivideInDtype,
            Arm::Ties,
        );
        let cv = conv(ScaleRule::DivideInDtype, Overflow::SatFinite);
        let want = reference(&shape, &c, kv, Dtype::Bf16, cv).unwrap();
        let found = identify(
            &c,
            kv,
            Dtype::Bf16,
            &want,
            &want.key_cache,
            Some(&want.value_cache),
        )
        .unwrap();
        assert!(found.contains(&Known::Fp8(cv)));
        assert!(!found.contains(&Known::Fp8(Conversion::VLLM)));
    }

    #[test]
    fn sat_parts_the_overflow_policies_and_every_rule_identifies_itself_on_each_ties_case() {
        for kv in [KvCacheDtype::Fp8E4m3, KvCacheDtype::Fp8E5m2] {
            for dtype in [Dtype::Bf16, Dtype::F16] {
                for rule in ScaleRule::ALL {
                    for overflow in [Overflow::SatFinite, Overflow::NonSaturating] {
                        identifies_itself(kv, dtype, conv(rule, overflow));
                    }
                }
            }
        }
    }

    /// `cv` matches every arm's case (bf16 or f16, HND); SAT matches only
    /// its overflow policy; SAT with any one TIES case (of three seeds,
    /// keys EXACT on some, values on others) matches nothing but `cv` and
    /// its twin (divide and reciprocal in the dtype tie alike).
    fn identifies_itself(kv: KvCacheDtype, dtype: Dtype, cv: Conversion) {
        let (rule, overflow) = (cv.rule, cv.overflow);
        let found = |arm: Arm, seed: u64| {
            let sp = spec(D, Layout::Hnd, kv, dtype, rule, arm, seed);
            let (shape, c) = (sp.shape().unwrap(), sp.generate().unwrap());
            let w = reference(&shape, &c, kv, dtype, cv).unwrap();
            let found = identify(&c, kv, dtype, &w, &w.key_cache, Some(&w.value_cache)).unwrap();
            assert!(found.contains(&Known::Fp8(cv)), "{kv:?} {cv:?} {arm:?}");
            found
        };
        for arm in [Arm::Rand, Arm::Slots, Arm::Prefill] {
            found(arm, 1);
        }
        let sat = found(Arm::Sat, 1);
        assert!(sat
            .iter()
            .all(|k| matches!(k, Known::Fp8(c) if c.overflow == overflow)));
        let twin = match rule {
            ScaleRule::DivideInDtype => Some(ScaleRule::ReciprocalInDtype),
            ScaleRule::ReciprocalInDtype => Some(ScaleRule::DivideInDtype),
            _ => None,
        };
        for seed in 1..4 {
            let ties = found(Arm::Ties, seed);
            let both: Vec<&Known> = sat.iter().filter(|k| ties.contains(k)).collect();
            assert!(
                both.iter().all(|&&k| k == Known::Fp8(cv)
                    || Some(k) == twin.map(|r| Known::Fp8(conv(r, overflow)))),
                "{kv:?} {dtype:?} {rule:?} {overflow:?} seed {seed}: {both:?}"
            );
        }
    }

    #[test]
    fn ties_takes_keys_or_values_exact_by_seed() {
        let kv = KvCacheDtype::Fp8E4m3;
        let f = kv.format().unwrap();
        let mids = midpoints(f);
        // EXACT's scale (its inverse for the multiplying rules) is k 2^e,
        // NEAR's a random binary32.
        let exact = |dtype: Dtype, v: &[u32], s: f32, mul: bool| {
            let r = if mul { 1.0 / s } else { s };
            let r = Dtype::Bf16.round(r);
            let on = v
                .iter()
                .filter(|&&b| mids.contains(&(dtype.decode(b) / r).abs()))
                .count();
            on * 4 > v.len() * 3
        };
        for rule in [ScaleRule::Divide, ScaleRule::Multiply] {
            let mut seen = HashSet::new();
            for seed in 0..8 {
                let sp = spec(D, Layout::Nhd, kv, Dtype::Bf16, rule, Arm::Ties, seed);
                let c = sp.generate().unwrap();
                let m = rule.multiplies();
                let (k, v) = (
                    exact(Dtype::Bf16, &c.key, c.k_scale, m),
                    exact(Dtype::Bf16, &c.value, c.v_scale, m),
                );
                assert!(k != v, "{rule:?} seed {seed}: one side EXACT");
                seen.insert(k);
                // F32: both.
                let c = Spec {
                    dtype: Dtype::F32,
                    ..sp
                }
                .generate()
                .unwrap();
                assert!(exact(Dtype::F32, &c.key, c.k_scale, m));
                assert!(exact(Dtype::F32, &c.value, c.v_scale, m));
            }
            assert_eq!(
                seen.len(),
                2,
                "{rule:?}: keys EXACT on some seeds, values on others"
            );
        }
    }

    #[test]
    fn ties_parts_the_multiply_from_a_division_by_the_reciprocal() {
        // Declared multiply, the kernel computing x / RN(1/s): EXACT's
        // elements m r with s = RN(1/r) part the two on a share of them.
        for kv in [KvCacheDtype::Fp8E4m3, KvCacheDtype::Fp8E5m2] {
            for dtype in Dtype::ALL {
                let f = kv.format().unwrap();
                let sp = spec(D, Layout::Nhd, kv, dtype, ScaleRule::Multiply, Arm::Ties, 5);
                let c = sp.generate().unwrap();
                let parted = |v: &[u32], s: f32| {
                    v.iter()
                        .filter(|&&b| {
                            let x = dtype.decode(b);
                            let code = |q: f32| fp8::encode(f, q, Overflow::SatFinite);
                            code(x * s) != code(x / (1.0 / s))
                        })
                        .count()
                };
                let p = parted(&c.key, c.k_scale) + parted(&c.value, c.v_scale);
                assert!(p * 40 > c.key.len(), "{kv:?} {dtype:?}: {p}");
            }
        }
    }

    #[test]
    fn the_last_token_writes_in_every_arm_and_pads_in_some() {
        for arm in Arm::ALL {
            let (mut writes, mut pads) = (0, 0);
            for seed in 0..16 {
                let sp = spec(
                    (8, 1, 16, 4, 8),
                    Layout::Nhd,
                    KvCacheDtype::Fp8E4m3,
                    Dtype::Bf16,
                    ScaleRule::Divide,
                    arm,
                    seed,
                );
                if sp.generate().unwrap().slot_mapping[7] >= 0 {
                    writes += 1;
                } else {
                    pads += 1;
                }
            }
            assert!(writes > 0, "{arm:?}");
            assert!((arm == Arm::Slots) == (pads == 0), "{arm:?}: {pads}");
        }
    }

    #[test]
    fn prefill_runs_on_by_one_from_mid_block_across_block_boundaries() {
        let mut tails = HashSet::new();
        for (dims, least) in [
            ((300, 8, 128, 16, 32), 17),
            ((11, 4, 96, 1, 40), 7),
            ((40, 2, 16, 16, 8), 2),
            ((8, 8, 128, 16, 64), 0),
            ((9, 1, 8, 2, 2), 1),
        ] {
            for seed in 0..6 {
                let sp = spec(
                    dims,
                    Layout::Hnd,
                    KvCacheDtype::Auto,
                    Dtype::Bf16,
                    ScaleRule::Divide,
                    Arm::Prefill,
                    seed,
                );
                let s = sp.generate().unwrap().slot_mapping;
                let run = s.iter().take_while(|&&v| v >= 0).count();
                assert!(run >= 1 && s[run..].iter().all(|&v| v == -1), "{s:?}");
                assert!(s[..run].windows(2).all(|w| w[1] == w[0] + 1), "{s:?}");
                let bs = dims.3 as i64;
                let (first, last) = (s[0], s[run - 1]);
                assert!(bs == 1 || first % bs != 0 || run as i64 == bs * dims.4 as i64);
                assert!(last / bs - first / bs >= least, "{dims:?}: {s:?}");
                tails.insert(s.len() - run);
            }
        }
        // A full prefill (the last token writes) and one to three padding
        // tokens at the tail.
        assert!(tails.contains(&0) && tails.iter().any(|&t| (1..=3).contains(&t)));
    }

    #[test]
    fn mla_is_one_nhd_head_of_the_concatenated_row() {
        let d: MlaDims = (9, 40, 8, 16, 2);
        let shape = mla_within_caps(KvCacheDtype::Fp8E4m3, Dtype::Bf16, d).unwrap();
        for arm in Arm::ALL {
            let sp = spec(
                mla_dims(d),
                Layout::Nhd,
                KvCacheDtype::Fp8E4m3,
                Dtype::Bf16,
                ScaleRule::Divide,
                arm,
                11,
            );
            let c = sp.generate().unwrap();
            let cv = conv(ScaleRule::Reciprocal, Overflow::NonSaturating);
            let w = reference(&shape, &c, sp.kv, sp.dtype, cv).unwrap();
            let (kv_c, k_pe) = split_mla(&c, 40, 48);
            let x = oracle::kv_cache::MlaInputs {
                kv_c: &kv_c,
                k_pe: &k_pe,
                slot_mapping: &c.slot_mapping,
                scale: c.k_scale,
            };
            let mut cache = c.key_cache.clone();
            oracle::kv_cache::concat_and_cache_mla(&shape, 40, sp.kv, sp.dtype, cv, &x, &mut cache)
                .unwrap();
            assert_eq!(cache, w.key_cache, "{arm:?}");
            let found = identify(&c, sp.kv, sp.dtype, &w, &w.key_cache, None).unwrap();
            assert!(found.contains(&Known::Fp8(cv)));
        }
        assert!(mla_within_caps(KvCacheDtype::Auto, Dtype::Bf16, (1, 0, 64, 16, 2)).is_err());
    }

    #[test]
    fn verdict_counts_wrong_and_clobbered_elements() {
        let kv = KvCacheDtype::Auto;
        let (shape, c) = case(Layout::Paged, kv, Dtype::F16, ScaleRule::Divide, Arm::Sat);
        let w = reference(&shape, &c, kv, Dtype::F16, Conversion::VLLM).unwrap();
        let mut got = w.key_cache.clone();
        assert!(CacheVerdict::judge(kv, &got, &w.key_cache, &w.key_src).pass());
        let un = w.key_src.iter().position(|&s| s == UNWRITTEN).unwrap();
        let wr = w.key_src.iter().position(|&s| s != UNWRITTEN).unwrap();
        got[un] ^= 1;
        got[wr] ^= 0x8000;
        let v = CacheVerdict::judge(kv, &got, &w.key_cache, &w.key_src);
        assert_eq!(
            (v.wrong, v.clobbered, v.first_wrong, v.first_clobbered),
            (1, 1, Some(wr), Some(un))
        );
        assert_eq!(v.written + v.unwritten, shape.cache_len());
        assert_eq!(
            identify(&c, kv, Dtype::F16, &w, &got, Some(&w.value_cache)).unwrap(),
            vec![]
        );
        assert!(spec(
            D,
            Layout::Nhd,
            kv,
            Dtype::F16,
            ScaleRule::Divide,
            Arm::Ties,
            1
        )
        .generate()
        .is_err());
        assert!(within_caps(
            Layout::Paged,
            KvCacheDtype::Fp8E4m3,
            Dtype::Bf16,
            (1, 1, 72, 16, 4)
        )
        .is_err());
        assert!(within_caps(Layout::Nhd, kv, Dtype::Bf16, (1 << 15, 1, 8, 16, 4)).is_err());
        assert!(within_caps(Layout::Nhd, kv, Dtype::Bf16, (1, 8, 128, 16, 1 << 12)).is_err());
        assert_eq!(Arm::parse("sat"), Ok(Arm::Sat));
        assert!(parse_scale_rule("div").is_err());
        assert_eq!(Known::Fp8(Conversion::VLLM).label(), "divide/sat_finite");
    }
}
