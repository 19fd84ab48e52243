//! ggml `Q6_K`: 256-element super-blocks of sixteen 16-element sub-blocks,
//! each with an 8-bit signed scale, 6-bit codes split into 4 low bits and
//! 2 high bits.
//!
//! Layout of one 210-byte block (`block_q6_K` in `ggml-common.h`):
//!
//! | bytes     | field         | meaning                                  |
//! |-----------|---------------|------------------------------------------|
//! | 0..128    | `ql[128]`     | low 4 bits of the codes                  |
//! | 128..192  | `qh[64]`      | high 2 bits of the codes                 |
//! | 192..208  | `scales[16]`  | `i8` sub-block scales                    |
//! | 208..210  | `d`           | f16 super-scale, little-endian           |
//!
//! Element order: two halves h = 0..2 of 128 elements; half h uses
//! `ql[64h..64h+64]`, `qh[32h..32h+32]` and `scales[8h..8h+8]`. For l in
//! 0..32, with `L = ql[64h..]`, `H = qh[32h..]`, the 6-bit code of
//!
//! | element        | low 4 bits        | high 2 bits          | scale                |
//! |----------------|-------------------|----------------------|----------------------|
//! | 128h + l       | `L[l] & 0xF`      | `H[l] >> 0 & 3`      | `scales[8h + l/16]`     |
//! | 128h + l + 32  | `L[l + 32] & 0xF` | `H[l] >> 2 & 3`      | `scales[8h + l/16 + 2]` |
//! | 128h + l + 64  | `L[l] >> 4`       | `H[l] >> 4 & 3`      | `scales[8h + l/16 + 4]` |
//! | 128h + l + 96  | `L[l + 32] >> 4`  | `H[l] >> 6 & 3`      | `scales[8h + l/16 + 6]` |
//!
//! is `low | high << 4`, and the signed code is that minus 32 (-32..=31).
//!
//! Source: `ggml-quants.c`, `dequantize_row_q6_K`.

use super::{check_blocks, f16_at, Dtype, GgmlError};

/// Elements per block (`QK_K`).
pub const BLOCK_ELEMS: usize = 256;
/// Bytes per block: 128 (`ql`) + 64 (`qh`) + 16 (`scales`) + 2 (`d`).
pub const BLOCK_BYTES: usize = 210;
/// Byte offset of `ql`.
pub const QL_OFFSET: usize = 0;
/// Byte offset of `qh`.
pub const QH_OFFSET: usize = 128;
/// Byte offset of `scales`.
pub const SCALES_OFFSET: usize = 192;
/// Byte offset of `d`.
pub const D_OFFSET: usize = 208;

/// Dequantizes whole `Q6_K` blocks: block b fills `out[256b..256b+256]`.
///
/// Steps, per block:
/// 1. `d = decode_f16(bytes 208..210)`, exact, sign kept.
/// 2. For each element, with scale `sc` (`i8`) and signed code `q`
///    (-32..=31) from the table in the module doc:
///    `y = (d * sc as f32) * q as f32`, left to right as ggml's
///    `d * sc[is] * q1`. Both products are exact (d's significand is below
///    2^11, `|sc| <= 2^7`, `|q| <= 2^5`: at most 23 significant bits), so
///    the association does not change a finite result, nor the sign of a
///    zero.
///
/// Rules:
/// - `Q6_K-NONFINITE` (`NONFINITE-SCALE`): `d = ±inf` gives NaN where
///   `sc = 0` or `q = 0` (`inf * 0`) and an infinity with the sign of
///   `d * sc * q` elsewhere; `d = NaN` gives NaN everywhere.
///
/// # Errors
/// [`GgmlError::PartialBlock`] if `blocks.len()` is not a multiple of 210;
/// [`GgmlError::Len`] (`"out"`) if `out.len() != blocks.len() / 210 * 256`.
pub fn dequantize_q6_k(blocks: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    let nb = check_blocks(Dtype::Q6K, blocks, out.len())?;
    for b in 0..nb {
        let blk = &blocks[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let y = &mut out[b * BLOCK_ELEMS..(b + 1) * BLOCK_ELEMS];
        // Step 1.
        let d = f16_at(blk, D_OFFSET);
        for h in 0..2 {
            let ql = &blk[QL_OFFSET + 64 * h..QL_OFFSET + 64 * h + 64];
            let qh = &blk[QH_OFFSET + 32 * h..QH_OFFSET + 32 * h + 32];
            let sc = &blk[SCALES_OFFSET + 8 * h..SCALES_OFFSET + 8 * h + 8];
            let yh = &mut y[128 * h..128 * h + 128];
            // Step 2.
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                yh[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                yh[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                yh[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                yh[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
    Ok(())
}
