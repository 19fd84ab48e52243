//! ggml `Q4_0`: 32 elements per block, one f16 scale, 4-bit codes.
//!
//! Layout of one 18-byte block (`block_q4_0` in `ggml-common.h`):
//!
//! | bytes    | field     | meaning                                     |
//! |----------|-----------|---------------------------------------------|
//! | 0..2     | `d`       | f16 scale, little-endian                    |
//! | 2..18    | `qs[16]`  | byte j: element j in bits 0..4, element j + 16 in bits 4..8 |
//!
//! Source: `ggml-quants.c`, `dequantize_row_q4_0`.

use super::{check_blocks, f16_at, Dtype, GgmlError};

/// Elements per block (`QK4_0`).
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block: 2 (f16 `d`) + 16 (`qs`).
pub const BLOCK_BYTES: usize = 18;
/// Byte offset of `d` in a block.
pub const D_OFFSET: usize = 0;
/// Byte offset of `qs` in a block.
pub const QS_OFFSET: usize = 2;

/// Dequantizes whole `Q4_0` blocks: block b fills `out[32b..32b+32]`.
///
/// Steps, per block:
/// 1. `d = decode_f16(bytes 0..2)`, exact (sign kept).
/// 2. For j in 0..16, with `c = qs[j]`:
///    `out[j] = ((c & 0x0F) as i32 - 8) as f32 * d` and
///    `out[j + 16] = ((c >> 4) as i32 - 8) as f32 * d`.
///    The integer is in -8..=7 and converts exactly; the one product is
///    exact too (11 x 4 significant bits), so every finite result is
///    `(q - 8) * d` exactly.
///
/// Rules:
/// - `Q4_0-ZERO`: code 8 gives `0.0 * d`: `+0.0` for `d > 0` or `d = +0`,
///   `-0.0` for `d < 0` or `d = -0`.
/// - `Q4_0-NONFINITE` (`NONFINITE-SCALE`): `d = ±inf` gives `±inf` times the
///   sign of `q - 8`, and NaN for code 8 (`inf * 0`); `d = NaN` gives NaN
///   for all 32 elements.
///
/// # Errors
/// [`GgmlError::PartialBlock`] if `blocks.len()` is not a multiple of 18;
/// [`GgmlError::Len`] (`"out"`) if `out.len() != blocks.len() / 18 * 32`.
pub fn dequantize_q4_0(blocks: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    let nb = check_blocks(Dtype::Q4_0, blocks, out.len())?;
    for b in 0..nb {
        let blk = &blocks[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let y = &mut out[b * BLOCK_ELEMS..(b + 1) * BLOCK_ELEMS];
        // Step 1.
        let d = f16_at(blk, D_OFFSET);
        // Step 2.
        for j in 0..16 {
            let c = blk[QS_OFFSET + j];
            let x0 = (c & 0x0F) as i32 - 8;
            let x1 = (c >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + 16] = x1 as f32 * d;
        }
    }
    Ok(())
}
