//! ggml `Q4_K`: 256-element super-blocks of eight 32-element sub-blocks,
//! each sub-block with a 6-bit scale and a 6-bit min, 4-bit codes.
//!
//! Layout of one 144-byte block (`block_q4_K` in `ggml-common.h`):
//!
//! | bytes     | field          | meaning                                   |
//! |-----------|----------------|-------------------------------------------|
//! | 0..2      | `d`            | f16 super-scale of the 6-bit scales, LE   |
//! | 2..4      | `dmin`         | f16 super-scale of the 6-bit mins, LE     |
//! | 4..16     | `scales[12]`   | eight (scale, min) pairs, 6 bits each; see [`scale_min`] |
//! | 16..144   | `qs[128]`      | 4-bit codes; see below                    |
//!
//! Element order: the block is four 64-element chunks c = 0..4. Chunk c
//! uses `qs[32c..32c+32]`: element `64c + l` is the low nibble of
//! `qs[32c + l]` (sub-block 2c) and element `64c + 32 + l` its high nibble
//! (sub-block 2c + 1), for l in 0..32.
//!
//! Source: `ggml-quants.c`, `dequantize_row_q4_K` and `get_scale_min_k4`.

use super::{check_blocks, f16_at, Dtype, GgmlError};

/// Elements per block (`QK_K`).
pub const BLOCK_ELEMS: usize = 256;
/// Bytes per block: 2 (`d`) + 2 (`dmin`) + 12 (`scales`) + 128 (`qs`).
pub const BLOCK_BYTES: usize = 144;
/// Byte offset of `d`.
pub const D_OFFSET: usize = 0;
/// Byte offset of `dmin`.
pub const DMIN_OFFSET: usize = 2;
/// Byte offset of `scales` (`K_SCALE_SIZE` = 12 bytes).
pub const SCALES_OFFSET: usize = 4;
/// Byte offset of `qs`.
pub const QS_OFFSET: usize = 16;

/// The 6-bit (scale, min) of sub-block `j` (0..8) from the 12 packed
/// bytes `s` (ggml's `get_scale_min_k4`):
///
/// - j < 4: `scale = s[j] & 0x3F`, `min = s[j + 4] & 0x3F`.
/// - j >= 4: `scale = (s[j + 4] & 0x0F) | (s[j - 4] >> 6) << 4`,
///   `min = (s[j + 4] >> 4) | (s[j] >> 6) << 4`.
///
/// So bytes 0..4 hold scales 0..4 in bits 0..6 and the top 2 bits of
/// scales 4..8 in bits 6..8; bytes 4..8 do the same for the mins; bytes
/// 8..12 hold the low 4 bits of scale 4 + i (bits 0..4) and min 4 + i
/// (bits 4..8).
///
/// # Panics
/// If `j >= 8` or `s.len() < 12` (an internal helper; the contract never
/// calls it out of range).
pub fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 0x3F, s[j + 4] & 0x3F)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Dequantizes whole `Q4_K` blocks: block b fills `out[256b..256b+256]`.
///
/// Steps, per block:
/// 1. `d = decode_f16(bytes 0..2)`, `dmin = decode_f16(bytes 2..4)`, exact,
///    signs kept.
/// 2. For sub-block j in 0..8: `(sc, m) = scale_min(j, scales)`, then
///    `dj = d * sc as f32` and `mj = dmin * m as f32` (ggml's `d1`/`m1`,
///    `d2`/`m2`). Both are exact (11 x 6 significant bits).
/// 3. For each element with 4-bit code q in sub-block j:
///    `y = dj * q as f32 - mj`: the product is exact (17 x 4 bits), the
///    subtraction is the one rounding (round to nearest even).
///
/// Because the product in step 3 is exact, a compiler or shader that fuses
/// it into `fma(dj, q, -mj)` computes the same bits; the contract holds
/// under either. The association is ggml's: the scale is applied to the
/// code first and the min subtracted last (`d1 * (q & 0xF) - m1`).
///
/// Rules:
/// - `Q4_K-NONFINITE` (`NONFINITE-SCALE`): `d = ±inf` makes `dj` NaN for
///   `sc = 0` and `±inf` otherwise, so `dj * q` is NaN for q = 0 and
///   infinite otherwise, and `inf - mj` is infinite unless `mj` is an
///   infinity of the same sign (NaN). `dmin = ±inf` makes `mj` NaN for
///   m = 0 and infinite otherwise, so the sub-block is NaN or `∓inf`.
///   A NaN `d` or `dmin` gives NaN for the whole block.
///
/// # Errors
/// [`GgmlError::PartialBlock`] if `blocks.len()` is not a multiple of 144;
/// [`GgmlError::Len`] (`"out"`) if `out.len() != blocks.len() / 144 * 256`.
pub fn dequantize_q4_k(blocks: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    let nb = check_blocks(Dtype::Q4K, blocks, out.len())?;
    for b in 0..nb {
        let blk = &blocks[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let y = &mut out[b * BLOCK_ELEMS..(b + 1) * BLOCK_ELEMS];
        // Step 1.
        let d = f16_at(blk, D_OFFSET);
        let dmin = f16_at(blk, DMIN_OFFSET);
        let scales = &blk[SCALES_OFFSET..QS_OFFSET];
        for c in 0..4 {
            // Step 2, sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
            let (sc1, m1) = scale_min(2 * c, scales);
            let d1 = d * sc1 as f32;
            let m1 = dmin * m1 as f32;
            let (sc2, m2) = scale_min(2 * c + 1, scales);
            let d2 = d * sc2 as f32;
            let m2 = dmin * m2 as f32;
            let q = &blk[QS_OFFSET + 32 * c..QS_OFFSET + 32 * c + 32];
            // Step 3.
            for l in 0..32 {
                y[64 * c + l] = d1 * (q[l] & 0x0F) as f32 - m1;
            }
            for l in 0..32 {
                y[64 * c + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
    Ok(())
}
