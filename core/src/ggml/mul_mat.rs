//! The GEMM of seed 004's `mul_mat_reg_tile`:
//! `dst[n, m] = sum over k of src0[m, k] * src1[n, k]`.
//!
//! Shapes (the seed's `MulMatParams` are `[m, k, n, k, m]`: src0 row
//! stride k, src1 row stride k, dst column stride m):
//! - `src0`: M rows of K elements in a [`Dtype`]; row m is
//!   `row_bytes = K / block_elems * block_bytes` bytes at byte
//!   `m * row_bytes`. K must be a multiple of the block size.
//! - `src1`: N rows of K f32 elements, row n at element `n * K`.
//! - `dst`: N x M f32, "column-major with stride M": `dst[n * M + m]`.
//!
//! Source: seed 004 (`wgpu_gemm_bench`: "`dst[n, m] = src0[m, k] *
//! src1[n, k]`", the params layout and the packed byte sizes per dtype).
//! The WGSL source is not in the seed; see [`mul_mat`] for what that means
//! for the gate.

use super::{dequantize, Dtype, GgmlError};

/// Computes `dst[n * M + m] = sum_k w[m, k] * src1[n * K + k]`, where
/// `w[m, ..]` is row m of `src0` dequantized by [`dequantize`].
///
/// Steps, for each m in 0..M (order of m and n is immaterial: each output
/// is computed on its own):
/// 1. Dequantize row m of `src0` into `scratch[0..K]` (the format's
///    contract, [`super::q4_0`] etc.; f32 rows are read bit for bit).
/// 2. For each n in 0..N: `acc = +0.0`; for k = 0, 1, .., K - 1 in
///    order, `acc = acc + w[m, k] * src1[n, k]`, the product rounded to
///    binary32, then the sum rounded: two roundings per k, never fused.
///    `dst[n * M + m] = acc`.
///
/// Rules:
/// - `MM-EMPTY`: K = 0 gives `+0.0` everywhere; M = 0 or N = 0 writes
///   nothing (all lengths 0).
/// - `MM-ZERO`: starting at `+0.0` means a sum whose every product is
///   `-0.0` is `+0.0`.
/// - `MM-NONFINITE`: a NaN or infinity in `w` (from `NONFINITE-SCALE`) or
///   in `src1` propagates by IEEE 754: any NaN product makes the sum NaN,
///   `inf + -inf` is NaN.
/// - `MM-ORDER`: the order above is this contract's: one accumulator from
///   `+0.0`, k = 0, 1, .., K - 1, one product added at a time (no k split
///   into partial sums, reversed or reordered). The seed's shader
///   accumulates each output in one f32 register per thread over TILE_K
///   chunks of k staged through shared memory; its source is not in the
///   seed, so whether its k order within a chunk is also sequential, and
///   whether the WGSL compiler fuses the multiply-add (WGSL permits it),
///   cannot be read from here. Fusion and order are told apart by the
///   data: where every product is exact in binary32 (at most 24
///   significant bits), a fused multiply-add gives the bits of the product
///   rounded and then the sum rounded, so only the order is left to judge.
///   A gate therefore needs an EXACT arm (data whose every product and
///   partial sum is exact in binary32, such as small integers times
///   power-of-two scales, where any order and any fusion give these bits),
///   a RANDOM arm with an error bound (any order, any fusion), and an
///   ORDER arm (every product exact, nearly every partial sum rounded:
///   only this order gives these bits, with or without fusion); on data
///   whose products round, a driver that fuses (NVIDIA's Vulkan does)
///   differs from this contract in most outputs' last bits, so the order
///   is checked bit for bit only on the ORDER arm's data (the
///   `kernel-oracle` crate's `mul_mat::generate::Arm::Order`).
///
/// # Errors
/// - [`GgmlError::RowNotBlocks`] if K is not a multiple of
///   `dtype.block_elems()`.
/// - [`GgmlError::Overflow`] if `M * row_bytes`, `N * K` or `N * M`
///   overflows `usize`.
/// - [`GgmlError::Len`] with `arg` `"src0"` (bytes, want `M * row_bytes`),
///   `"src1"` (want `N * K`), `"dst"` (want `N * M`) or `"scratch"`
///   (want K) on a length mismatch.
///
/// Nothing is written to `dst` when an error is returned.
#[allow(clippy::too_many_arguments)]
pub fn mul_mat(
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    src0: &[u8],
    src1: &[f32],
    dst: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), GgmlError> {
    let row_bytes = check_operands(dtype, m, n, k, src0.len(), src1.len(), dst.len())?;
    check_len("scratch", k, scratch.len())?;
    for mi in 0..m {
        // Step 1.
        let row = &src0[mi * row_bytes..(mi + 1) * row_bytes];
        dequantize(dtype, row, scratch)?;
        // Step 2.
        for ni in 0..n {
            let x = &src1[ni * k..(ni + 1) * k];
            let mut acc = 0.0f32;
            for kk in 0..k {
                let p = scratch[kk] * x[kk];
                acc += p;
            }
            dst[ni * m + mi] = acc;
        }
    }
    Ok(())
}

/// The argument checks of [`mul_mat`] but the scratch row, in its order,
/// on the lengths of `src0` (bytes), `src1` and `dst` (elements); returns
/// `row_bytes`. Shared with the fast paths outside core, so that they
/// refuse exactly what the spec refuses.
///
/// # Errors
/// As [`mul_mat`]: [`GgmlError::RowNotBlocks`], [`GgmlError::Overflow`],
/// [`GgmlError::Len`] (`"src0"`, `"src1"`, `"dst"`).
pub fn check_operands(
    dtype: Dtype,
    m: usize,
    n: usize,
    k: usize,
    src0_len: usize,
    src1_len: usize,
    dst_len: usize,
) -> Result<usize, GgmlError> {
    let row_bytes = dtype.row_bytes(k)?;
    let want0 = m.checked_mul(row_bytes).ok_or(GgmlError::Overflow)?;
    let want1 = n.checked_mul(k).ok_or(GgmlError::Overflow)?;
    let want_dst = n.checked_mul(m).ok_or(GgmlError::Overflow)?;
    check_len("src0", want0, src0_len)?;
    check_len("src1", want1, src1_len)?;
    check_len("dst", want_dst, dst_len)?;
    Ok(row_bytes)
}

fn check_len(arg: &'static str, want: usize, got: usize) -> Result<(), GgmlError> {
    if want == got {
        Ok(())
    } else {
        Err(GgmlError::Len { arg, want, got })
    }
}
