//! splitmix64: the deterministic generator every case is drawn from, so a
//! seed printed in a report regenerates the same bytes on any host.

/// splitmix64 (Steele, Lea, Flood 2014), as in seed 000's `Rng`.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 8 random bits (bits 33..41 of the next draw, as the seed takes them).
    pub fn u8(&mut self) -> u8 {
        (self.next_u64() >> 33) as u8
    }

    /// A uniform value in `[0, 1)` with 24 random bits.
    pub fn f01(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32) / (1u32 << 24) as f32
    }

    /// A standard normal value (Box-Muller on `(0, 1] x [0, 1)`, from two
    /// [`Rng::f01`] draws, the cosine branch; computed in f64, rounded to
    /// f32).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - f64::from(self.f01());
        let u2 = f64::from(self.f01());
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// A uniform index in `0..n` (n >= 1), by modulo (bias irrelevant here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A case library's default seed before its dtype and arm bits: `tag` (the
/// library's own constant) mixed with every dimension of the shape, one
/// multiply by the FNV-1a 64-bit prime per dimension, so that every shape
/// of a battery draws unrelated data.
pub fn shape_hash(tag: u64, dims: &[usize]) -> u64 {
    dims.iter().fold(tag, |h, &v| {
        (h ^ v as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The index a seed's leading byte draws by `odds` (shares of the 256
/// values of the byte, in order; they sum to 256): the first `i` whose
/// running sum of `odds[..=i]` passes the byte (a case library's
/// `Arm::from_seed`; an arm whose share is 0 is never drawn).
pub fn index_from_seed(seed: u64, odds: &[u32]) -> usize {
    let b = (seed >> 56) as u32;
    let mut acc = 0;
    for (i, &o) in odds.iter().enumerate() {
        acc += o;
        if b < acc {
            return i;
        }
    }
    odds.len().saturating_sub(1)
}

/// `h` with its leading byte replaced by one that [`index_from_seed`]
/// draws as `i` (the byte within `i`'s share chosen by `h`'s own); `h`
/// as it is where `i`'s share is 0.
pub fn lead_with(h: u64, i: usize, odds: &[u32]) -> u64 {
    let share = u64::from(odds[i]);
    if share == 0 {
        return h;
    }
    let start: u32 = odds[..i].iter().sum();
    let lead = u64::from(start) + (h >> 56) % share;
    (lead << 56) | (h & 0x00FF_FFFF_FFFF_FFFF)
}
