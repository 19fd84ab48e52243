//! Test data shared by the GDN kernel tests (GPU and host emulation):
//! reproducible values, with specials that reach every transcendental branch.
#![allow(dead_code)]

/// xorshift64 values uniform in `[-spread, spread)`.
pub fn varied(len: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * spread
        })
        .collect()
}

/// Inputs that reach every branch of the transcendentals
/// (`oracle::gdn::transcendental::BRANCH_INPUTS`).
pub const SPECIALS: [f32; 18] = oracle::gdn::transcendental::BRANCH_INPUTS;

/// `varied`, with every 13th element replaced by a special.
pub fn with_specials(len: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut v = varied(len, seed, spread);
    for (n, i) in (0..len).step_by(13).enumerate() {
        v[i] = SPECIALS[(n + seed as usize) % SPECIALS.len()];
    }
    v
}
