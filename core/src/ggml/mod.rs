//! ggml's quantized block formats and the GEMM over them (issue 5, seed 004).
//!
//! The WGSL kernel `mul_mat_reg_tile` (seed 004: cera's `wgpu_gemm_bench`)
//! reads its weights `src0` as rows of ggml blocks and its activations
//! `src1` as f32. This module is its CPU contract: the byte layout of each
//! block format, the dequantization of each as ggml's `ggml-quants.c`
//! computes it, and the GEMM [`mul_mat::mul_mat`].
//!
//! One file per format, each with its byte layout (offsets in bytes inside
//! one block), its operations in order, and its named edge cases:
//! - [`q4_0`]: 32 elements in 18 bytes, one f16 scale, 4-bit codes.
//! - [`q8_0`]: 32 elements in 34 bytes, one f16 scale, 8-bit codes.
//! - [`q4_k`]: 256 elements in 144 bytes, f16 `d` and `dmin`, eight 6-bit
//!   scale/min pairs, 4-bit codes.
//! - [`q6_k`]: 256 elements in 210 bytes, f16 `d`, sixteen i8 scales,
//!   6-bit codes.
//! - [`mul_mat`](mod@mul_mat): `dst[n, m] = sum over k of src0[m, k] * src1[n, k]`.
//!
//! Conventions shared by every format:
//! - Multi-byte fields are little-endian (ggml writes the host's bytes;
//!   every target this project runs on is little-endian, and the seed's
//!   WGSL loaders read `u32` words the same way).
//! - An f16 field is IEEE binary16 widened exactly by
//!   [`crate::f16::decode_f16`] (ggml's `GGML_FP16_TO_FP32`). Its sign is
//!   kept: ggml's own quantizers write negative scales (q4_0's
//!   `d = max / -8`, q6_K's `max_scale / -128`), so about half of real
//!   blocks carry one.
//! - Rule `NONFINITE-SCALE`: an f16 scale of ±inf or NaN is not refused.
//!   The dequantized values follow IEEE 754 binary32: NaN propagates,
//!   `inf * 0 = NaN`, `inf * q = ±inf` for q != 0, `inf - inf = NaN`.
//!   Each format states what that gives for its codes.
//! - Integer-to-float conversions of codes are exact (all codes are below
//!   2^24 in magnitude); every float operation is a binary32 basic
//!   operation rounded to nearest even on its own, never fused.
//!
//! Source: ggml `ggml-common.h` (`block_q4_0`, `block_q8_0`, `block_q4_K`,
//! `block_q6_K`; `QK4_0 = QK8_0 = 32`, `QK_K = 256`, `K_SCALE_SIZE = 12`)
//! and `ggml-quants.c` (`dequantize_row_q4_0`, `dequantize_row_q8_0`,
//! `dequantize_row_q4_K`, `dequantize_row_q6_K`, `get_scale_min_k4`).

pub mod mul_mat;
pub mod q4_0;
pub mod q4_k;
pub mod q6_k;
pub mod q8_0;

use crate::f16::decode_f16;

/// The element type of `src0`, the weights of [`mul_mat::mul_mat`]. Each
/// is a block of [`Dtype::block_elems`] elements stored in
/// [`Dtype::block_bytes`] bytes; a row of k elements is `k / block_elems`
/// consecutive blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// binary32, little-endian: a "block" of 1 element in 4 bytes. Bits are
    /// kept as stored (NaN payloads included).
    F32,
    /// ggml `GGML_TYPE_Q4_0`: 32 elements in 18 bytes; see [`q4_0`].
    Q4_0,
    /// ggml `GGML_TYPE_Q8_0`: 32 elements in 34 bytes; see [`q8_0`].
    Q8_0,
    /// ggml `GGML_TYPE_Q4_K`: 256 elements in 144 bytes; see [`q4_k`].
    Q4K,
    /// ggml `GGML_TYPE_Q6_K`: 256 elements in 210 bytes; see [`q6_k`].
    Q6K,
}

impl Dtype {
    /// Every dtype, in declaration order.
    pub const ALL: [Dtype; 5] = [Dtype::F32, Dtype::Q4_0, Dtype::Q8_0, Dtype::Q4K, Dtype::Q6K];

    /// Elements per block (1, 32, 32, 256, 256).
    pub const fn block_elems(self) -> usize {
        match self {
            Dtype::F32 => 1,
            Dtype::Q4_0 => q4_0::BLOCK_ELEMS,
            Dtype::Q8_0 => q8_0::BLOCK_ELEMS,
            Dtype::Q4K => q4_k::BLOCK_ELEMS,
            Dtype::Q6K => q6_k::BLOCK_ELEMS,
        }
    }

    /// Bytes per block (4, 18, 34, 144, 210).
    pub const fn block_bytes(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::Q4_0 => q4_0::BLOCK_BYTES,
            Dtype::Q8_0 => q8_0::BLOCK_BYTES,
            Dtype::Q4K => q4_k::BLOCK_BYTES,
            Dtype::Q6K => q6_k::BLOCK_BYTES,
        }
    }

    /// ggml's name for the type (`"f32"`, `"q4_0"`, `"q8_0"`, `"q4_K"`,
    /// `"q6_K"`), as error messages print it.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Q4_0 => "q4_0",
            Dtype::Q8_0 => "q8_0",
            Dtype::Q4K => "q4_K",
            Dtype::Q6K => "q6_K",
        }
    }

    /// Bytes of one row of `k` elements: `k / block_elems * block_bytes`.
    ///
    /// # Errors
    /// [`GgmlError::RowNotBlocks`] if `k` is not a multiple of
    /// [`Dtype::block_elems`]; [`GgmlError::Overflow`] if the byte count
    /// does not fit in `usize`.
    pub const fn row_bytes(self, k: usize) -> Result<usize, GgmlError> {
        let be = self.block_elems();
        if !k.is_multiple_of(be) {
            return Err(GgmlError::RowNotBlocks { dtype: self, k });
        }
        match (k / be).checked_mul(self.block_bytes()) {
            Some(v) => Ok(v),
            None => Err(GgmlError::Overflow),
        }
    }
}

/// Why a ggml contract refused its arguments. Nothing is written to any
/// output when a contract returns one. Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlError {
    /// The block data is not a whole number of blocks.
    PartialBlock {
        /// The format.
        dtype: Dtype,
        /// Bytes passed.
        bytes: usize,
    },
    /// A row length k (elements) is not a multiple of the block size.
    RowNotBlocks {
        /// The format.
        dtype: Dtype,
        /// The row length (elements).
        k: usize,
    },
    /// A slice has the wrong length.
    Len {
        /// The argument's name, as in the contract's signature.
        arg: &'static str,
        /// The length the shape requires (bytes for `src0`/`blocks`,
        /// elements otherwise).
        want: usize,
        /// The length passed (same unit).
        got: usize,
    },
    /// A derived length (elements or bytes) does not fit in `usize`.
    Overflow,
}

impl core::fmt::Display for GgmlError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            GgmlError::PartialBlock { dtype, bytes } => write!(
                f,
                "{} data has {bytes} bytes, not a whole number of {}-byte blocks",
                dtype.name(),
                dtype.block_bytes()
            ),
            GgmlError::RowNotBlocks { dtype, k } => write!(
                f,
                "k = {k} is not a multiple of the {} block size ({} elements)",
                dtype.name(),
                dtype.block_elems()
            ),
            GgmlError::Len { arg, want, got } => {
                write!(f, "{arg} has length {got}, the shape needs {want}")
            }
            GgmlError::Overflow => {
                write!(
                    f,
                    "a derived buffer length (elements or bytes) does not fit in usize"
                )
            }
        }
    }
}

/// Dequantizes whole blocks of `dtype` into `out`, dispatching to
/// [`dequantize_f32`], [`q4_0::dequantize_q4_0`], [`q8_0::dequantize_q8_0`],
/// [`q4_k::dequantize_q4_k`] or [`q6_k::dequantize_q6_k`].
///
/// # Errors
/// As the function dispatched to.
pub fn dequantize(dtype: Dtype, blocks: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    match dtype {
        Dtype::F32 => dequantize_f32(blocks, out),
        Dtype::Q4_0 => q4_0::dequantize_q4_0(blocks, out),
        Dtype::Q8_0 => q8_0::dequantize_q8_0(blocks, out),
        Dtype::Q4K => q4_k::dequantize_q4_k(blocks, out),
        Dtype::Q6K => q6_k::dequantize_q6_k(blocks, out),
    }
}

/// Reads little-endian binary32 values: `out[i]` has the bits of
/// `bytes[4i..4i+4]`, unchanged (NaN payloads kept).
///
/// # Errors
/// [`GgmlError::PartialBlock`] if `bytes.len()` is not a multiple of 4;
/// [`GgmlError::Len`] (`"out"`) if `out.len() != bytes.len() / 4`.
pub fn dequantize_f32(bytes: &[u8], out: &mut [f32]) -> Result<(), GgmlError> {
    check_blocks(Dtype::F32, bytes, out.len())?;
    for (i, o) in out.iter_mut().enumerate() {
        let b = [
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ];
        *o = f32::from_bits(u32::from_le_bytes(b));
    }
    Ok(())
}

/// Checks that `blocks` is whole blocks of `dtype` and that `out_len`
/// elements is exactly what they hold; returns the block count.
pub(crate) fn check_blocks(
    dtype: Dtype,
    blocks: &[u8],
    out_len: usize,
) -> Result<usize, GgmlError> {
    let bb = dtype.block_bytes();
    if !blocks.len().is_multiple_of(bb) {
        return Err(GgmlError::PartialBlock {
            dtype,
            bytes: blocks.len(),
        });
    }
    let nb = blocks.len() / bb;
    // nb * block_elems <= blocks.len() * 8 for every dtype, but check anyway.
    let want = match nb.checked_mul(dtype.block_elems()) {
        Some(v) => v,
        None => return Err(GgmlError::Overflow),
    };
    if out_len != want {
        return Err(GgmlError::Len {
            arg: "out",
            want,
            got: out_len,
        });
    }
    Ok(nb)
}

/// The f16 field at byte `off` of `block`, little-endian, widened exactly
/// (sign, infinities and NaN kept).
pub(crate) fn f16_at(block: &[u8], off: usize) -> f32 {
    decode_f16(u16::from_le_bytes([block[off], block[off + 1]]))
}
