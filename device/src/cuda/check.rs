//! Argument checks that need no GPU: every launch runs them first.

use super::error::{DeviceError, Result};
use super::Plan;
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

/// Checks the launch geometry of a plan for `shape` (ABI section 1): no
/// grid with a zero dimension, whole warps, an MMQ grid that covers the
/// out_f x m output with its `tile_rows` x `tile_cols` tiles (or, for a
/// variant that walks the tiles, `plan[17]` = 1, a (P, 1, 1) grid with
/// 1 <= P <= the number of tiles), and tensor-map boxes of 1 ..= 256 rows
/// and tokens (TMA's box limit) for a variant that takes the maps.
///
/// # Errors
/// What is wrong, in words (the caller makes it a `BadPlan`).
pub fn check_plan_geometry(p: &Plan, shape: &Shape) -> std::result::Result<(), String> {
    let zero = |g: (u32, u32, u32)| g.0 == 0 || g.1 == 0 || g.2 == 0;
    if zero(p.mmq_grid) || zero(p.quant_grid) || p.nan_grid == 0 {
        return Err(format!("a grid has a zero dimension: {p:?}"));
    }
    if p.mmq_threads == 0
        || !p.mmq_threads.is_multiple_of(32)
        || p.quant_threads == 0
        || p.nan_threads == 0
    {
        return Err(format!("thread counts {p:?}"));
    }
    if p.tile_rows == 0 || p.tile_cols == 0 {
        return Err(format!("an empty tile, {}x{}", p.tile_rows, p.tile_cols));
    }
    // The MMQ grid must cover the output: no tile may be skipped. A
    // variant that walks the tiles covers them by its walk, from a
    // one-dimensional grid of at most one CTA per tile.
    let (out_f, m) = (shape.out_f() as u64, shape.m() as u64);
    if p.tile_walk {
        let tiles = out_f.div_ceil(u64::from(p.tile_rows)) * m.div_ceil(u64::from(p.tile_cols));
        if p.mmq_grid.1 != 1 || p.mmq_grid.2 != 1 || u64::from(p.mmq_grid.0) > tiles {
            return Err(format!(
                "plan[17] = 1 (tile walk) with grid {:?} over {} tiles of {}x{}: the walk takes (P, 1, 1), 1 <= P <= tiles",
                p.mmq_grid, tiles, p.tile_rows, p.tile_cols
            ));
        }
    } else if u64::from(p.mmq_grid.0) * u64::from(p.tile_rows) < out_f
        || u64::from(p.mmq_grid.1) * u64::from(p.tile_cols) < m
    {
        return Err(format!(
            "grid {:?} of {}x{} tiles does not cover out_f={} x m={}",
            p.mmq_grid, p.tile_rows, p.tile_cols, out_f, m
        ));
    }
    if p.tensor_maps && (p.tile_rows > 256 || p.tile_cols > 256) {
        return Err(format!(
            "plan[16] = 1 (tensor maps) with a {}x{} tile: the maps need 1 ..= 256 rows and 1 ..= 256 tokens",
            p.tile_rows, p.tile_cols
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan shaped like k18's at 4096 x 5120 x 1536 on 132 SMs (128 x 128
    /// tiles, tensor maps), as it would be with the tiles walked by P = 132
    /// CTAs (no builtin variant walks them).
    fn walking() -> (Plan, Shape) {
        let p = Plan {
            variant: 18,
            mmq_grid: (132, 1, 1),
            mmq_threads: 384,
            mmq_smem: 210_000,
            quant_grid: (20480, 1, 1),
            quant_threads: 256,
            nan_grid: 1056,
            nan_threads: 256,
            variants: 23,
            tile_rows: 128,
            tile_cols: 128,
            schedule: oracle::fp8_mmq::Schedule::SM90_WGMMA_FUSED,
            tensor_maps: true,
            tile_walk: true,
        };
        (p, Shape::new(4096, 5120, 1536).unwrap())
    }

    #[test]
    fn a_walk_takes_one_dimensional_grids_of_at_most_one_cta_per_tile() {
        let (p, shape) = walking();
        assert_eq!(check_plan_geometry(&p, &shape), Ok(()));
        // 12 x 32 = 384 tiles: a walk of every tile with one CTA each, or of one CTA.
        for x in [1, 384] {
            let q = Plan {
                mmq_grid: (x, 1, 1),
                ..p
            };
            assert_eq!(check_plan_geometry(&q, &shape), Ok(()), "P = {x}");
        }
        for g in [(385, 1, 1), (132, 2, 1), (132, 1, 2), (0, 1, 1)] {
            let q = Plan { mmq_grid: g, ..p };
            assert!(check_plan_geometry(&q, &shape).is_err(), "{g:?} accepted");
        }
    }

    #[test]
    fn one_tile_per_cta_must_cover_the_output() {
        let (p, shape) = walking();
        let p = Plan {
            tile_walk: false,
            mmq_grid: (12, 32, 1),
            ..p
        };
        assert_eq!(check_plan_geometry(&p, &shape), Ok(()));
        // The walk's grid read as one tile per CTA skips tiles.
        let q = Plan {
            mmq_grid: (132, 1, 1),
            ..p
        };
        let e = check_plan_geometry(&q, &shape).unwrap_err();
        assert!(e.contains("does not cover"), "{e}");
        for g in [(11, 32, 1), (12, 31, 1)] {
            assert!(
                check_plan_geometry(&Plan { mmq_grid: g, ..p }, &shape).is_err(),
                "{g:?}"
            );
        }
    }

    #[test]
    fn tensor_maps_need_boxes_of_at_most_256_and_tiles_are_not_empty() {
        let (p, shape) = walking();
        let q = Plan {
            tile_rows: 512,
            mmq_grid: (3, 1, 1),
            ..p
        };
        assert!(check_plan_geometry(&q, &shape)
            .unwrap_err()
            .contains("tensor maps"));
        assert_eq!(
            check_plan_geometry(
                &Plan {
                    tensor_maps: false,
                    ..q
                },
                &shape
            ),
            Ok(())
        );
        assert!(check_plan_geometry(&Plan { tile_cols: 0, ..p }, &shape).is_err());
        assert!(check_plan_geometry(
            &Plan {
                mmq_threads: 100,
                ..p
            },
            &shape
        )
        .is_err());
    }
}
