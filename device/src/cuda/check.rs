//! Argument checks that need no GPU: every launch runs them first.

use super::error::{DeviceError, Result};
use oracle::fp8_mmq::Shape;

/// The largest element count or dimension the kernels index with `int`.
pub const I32_LIMIT: u64 = i32::MAX as u64;

/// Checks that every dimension and buffer length of `shape` fits the
/// kernels' i32 indexing.
///
/// # Errors
/// [`DeviceError::IndexRange`] naming the first quantity over the limit.
pub fn check_index_range(shape: &Shape) -> Result<()> {
    let items: [(&'static str, usize); 10] = [
        ("m", shape.m()),
        ("in_f", shape.in_f()),
        ("out_f", shape.out_f()),
        ("in_f_pad", shape.in_f_pad()),
        ("weight_len", shape.weight_len()),
        ("scale_len", shape.scale_len()),
        ("act_len", shape.act_len()),
        ("q_len", shape.q_len()),
        ("d_len", shape.d_len()),
        ("out_len", shape.out_len()),
    ];
    for (what, v) in items {
        if v as u64 > I32_LIMIT {
            return Err(DeviceError::IndexRange {
                what,
                value: v as u64,
                limit: I32_LIMIT,
            });
        }
    }
    Ok(())
}

fn check_len(arg: &'static str, want: usize, got: usize) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(DeviceError::ArgLen { arg, want, got })
    }
}

/// Checks the quantizer's arguments: `x` `[m x in_f]` f32, outputs `q`
/// `[m x in_f_pad]` bytes and `d` `[m x in_f_pad/128]` f32 (lengths in
/// elements; pass `None` for outputs the shim allocates itself).
///
/// # Errors
/// [`DeviceError::IndexRange`], then [`DeviceError::ArgLen`] for the first
/// argument whose length is wrong, in signature order.
pub fn check_quantize(shape: &Shape, x: usize, q: Option<usize>, d: Option<usize>) -> Result<()> {
    check_index_range(shape)?;
    check_len("x", shape.act_len(), x)?;
    if let Some(q) = q {
        check_len("q", shape.q_len(), q)?;
    }
    if let Some(d) = d {
        check_len("d", shape.d_len(), d)?;
    }
    Ok(())
}

/// Checks the MMQ's arguments (lengths in elements): `w` `[out_f x in_f]`
/// bytes, `w_scales` `[ceil(out_f/128) x ceil(in_f/128)]` f32, `q`
/// `[m x in_f_pad]` bytes, `d` `[m x in_f_pad/128]` f32 and the output `y`
/// `[m x out_f]` f32 (`None` when the shim allocates it).
///
/// # Errors
/// [`DeviceError::IndexRange`], then [`DeviceError::ArgLen`] for the first
/// argument whose length is wrong, in signature order.
pub fn check_mmq(
    shape: &Shape,
    w: usize,
    w_scales: usize,
    q: usize,
    d: usize,
    y: Option<usize>,
) -> Result<()> {
    check_index_range(shape)?;
    check_len("w", shape.weight_len(), w)?;
    check_len("w_scales", shape.scale_len(), w_scales)?;
    check_len("q", shape.q_len(), q)?;
    check_len("d", shape.d_len(), d)?;
    if let Some(y) = y {
        check_len("y", shape.out_len(), y)?;
    }
    Ok(())
}

/// Checks a launch grid against CUDA's limits (x < 2^31, y and z <= 65535,
/// at most 1024 threads, `smem` within the device's opt-in maximum).
///
/// # Errors
/// [`DeviceError::IndexRange`] naming the dimension.
pub fn check_grid(grid: (u32, u32, u32), threads: u32, smem: u32, smem_limit: u32) -> Result<()> {
    let items: [(&'static str, u64, u64); 5] = [
        ("grid.x", u64::from(grid.0), I32_LIMIT),
        ("grid.y", u64::from(grid.1), 65_535),
        ("grid.z", u64::from(grid.2), 65_535),
        ("threads per CTA", u64::from(threads), 1024),
        (
            "dynamic shared memory (bytes)",
            u64::from(smem),
            u64::from(smem_limit),
        ),
    ];
    for (what, value, limit) in items {
        if value > limit {
            return Err(DeviceError::IndexRange { what, value, limit });
        }
    }
    Ok(())
}
