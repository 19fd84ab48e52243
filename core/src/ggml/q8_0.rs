//! ggml `Q8_0`: 32 elements per block, one f16 scale, 8-bit signed codes.
//!
//! Layout of one 34-byte block (`block_q8_0` in `ggml-common.h`):
//!
//! | bytes    | field     | meaning                                |
//! |----------|-----------|----------------------------------------|
//! | 0..2     | `d`       | f16 scale, little-endian               |
//! | 2..34    | `qs[32]`  | `i8` two's complement, element j at 2 + j |
//!
//! Source: `ggml-quants.c`, `dequantize_row_q8_0`.

use super::{check_blocks, f16_at, Dtype, GgmlError};

/// Elements per block (`QK8_0`).
pub const BLOCK_ELEMS: usize = 32;
/// Bytes per block: 2 (f16 `d`) + 32 (`qs`).
pub const BLOCK_BYTES: usize = 34;
/// Byte offset of `d` in a block.
pub const D_OFFSET: usize = 0;
/// Byte offset of `qs` in a block.
pub const QS_OFFSET: usize = 2;

/// Dequantizes whole `Q8_0` blocks: block b fills `out[32b..32b+32]`.
///
/// Steps, per block:
/// 1. `d = decode_f16(bytes 0..2)`, exact (sign kept).
/// 2. For j in 0..32: `out[j] = (qs[j] as i8) as f32 * d`. The code is in
///    -128..=127 and converts exactly; the product is exact (11 x 7
///    significant bits), so every finite result is `q * d` exactly.
///
/// Rules:
/// - `Q8_0-ZERO`: code 0 gives `0.0 * d`: `-0.0` when `d` is negative or
///   `-0`, else `+0.0`.
/// - `Q8_0-NONFINITE` (`NONFINITE-SCALE`): `d = ±inf` gives NaN for code 0
///   and `±inf` (sign of `q * d`) otherwise; `d = NaN` gives NaN everywhere.
///
/// # Errors
/// [`GgmlError::PartialBlock`] if `blocks.len()` is not a multiple of 34;
/// [`GgmlError::Len`] (`"out"`) if `out.len() != blocks.len() / 34 * 32`.
pub fn dequantize_q8_0(blocks: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    let nb = check_blocks(Dtype::Q8_0, blocks, out.len())?;
    for b in 0..nb {
        let blk = &blocks[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let y = &mut out[b * BLOCK_ELEMS..(b + 1) * BLOCK_ELEMS];
        // Step 1.
        let d = f16_at(blk, D_OFFSET);
        // Step 2.
        for (j, o) in y.iter_mut().enumerate() {
            let q = blk[QS_OFFSET + j] as i8;
            *o = q as f32 * d;
        }
    }
    Ok(())
}
