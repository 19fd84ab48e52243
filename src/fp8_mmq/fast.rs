//! The fast path of [`oracle::fp8_mmq::mmq_v2`]: the same bits, for the
//! gates and fuzzers at real shapes.
//!
//! Only the spec in `core` is normative. This path keeps the spec's
//! per-output order exactly (blocks in increasing order, one chained
//! accumulator per block in increasing k, the fold `sum + (s * d) * c`,
//! each operation rounded on its own; Rust never contracts `a * b + c` into a
//! fused multiply-add) and gains its speed only *across* outputs: e4m3
//! codes are decoded once through 256-entry tables, weights are transposed
//! per scale block so that 16 outputs sit side by side, 4 activation rows
//! share each weight load, and tiles of outputs run on all cores (rayon).
//! `tests/fp8_mmq_fast.rs` and the `fp8_mmq_fast` fuzz target prove it
//! bit-identical to the spec.

use oracle::conventions::NanMagnitude;
use oracle::e4m3::decode_e4m3;
use oracle::fp8_mmq::{Shape, ShapeError, BLOCK_K, BLOCK_N};
use rayon::prelude::*;

/// Outputs side by side in one register tile (elements of out_f).
const TILE_I: usize = 16;
/// Activation rows sharing one weight load.
const TILE_J: usize = 4;

fn check_len(arg: &'static str, want: usize, got: usize) -> Result<(), ShapeError> {
    if want == got {
        Ok(())
    } else {
        Err(ShapeError::Len { arg, want, got })
    }
}

fn table(nan: NanMagnitude) -> [f32; 256] {
    let mut t = [0f32; 256];
    for (code, v) in t.iter_mut().enumerate() {
        *v = decode_e4m3(code as u8, nan);
    }
    t
}

/// Same contract, shapes and errors as [`oracle::fp8_mmq::mmq_v2`], and the
/// same output bits.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`.
pub fn mmq_v2_fast(
    shape: &Shape,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    check_len("w", shape.weight_len(), w.len())?;
    check_len("scales", shape.scale_len(), scales.len())?;
    check_len("q", shape.q_len(), q.len())?;
    check_len("d", shape.d_len(), d.len())?;
    check_len("y", shape.out_len(), y.len())?;
    let (m, in_f, out_f, in_f_pad) = (shape.m(), shape.in_f(), shape.out_f(), shape.in_f_pad());
    let (scols, blocks) = (shape.scale_cols(), shape.act_blocks());
    let kpad = scols * BLOCK_K;
    let i_pad = out_f.next_multiple_of(TILE_I);
    let j_pad = m.next_multiple_of(TILE_J);
    let wt = table(NanMagnitude::ReadAsZero);
    let at = table(NanMagnitude::Ieee);

    // Weights decoded and transposed per scale block: wd[(b*128 + kk)*i_pad + i]
    // (k tail and padded outputs are +0.0, rule K-TAIL).
    let mut wd = vec![0f32; kpad * i_pad];
    wd.par_chunks_mut(BLOCK_K * i_pad)
        .enumerate()
        .for_each(|(b, blk)| {
            for i in 0..out_f {
                for kk in 0..BLOCK_K {
                    let k = b * BLOCK_K + kk;
                    if k < in_f {
                        blk[kk * i_pad + i] = wt[w[i * in_f + k] as usize];
                    }
                }
            }
        });
    // Activations decoded: ad[j*kpad + k]; padded rows are +0.0.
    let mut ad = vec![0f32; j_pad * kpad];
    ad.par_chunks_mut(kpad)
        .enumerate()
        .take(m)
        .for_each(|(j, row)| {
            for (k, v) in row.iter_mut().enumerate() {
                *v = at[q[j * in_f_pad + k] as usize];
            }
        });

    // Output tiles of `tile` outputs; each task computes all rows for its
    // outputs into a local [j_pad x tile] buffer.
    let threads = rayon::current_num_threads().max(1);
    let tile = (i_pad / (threads * 4))
        .next_multiple_of(TILE_I)
        .clamp(TILE_I, 256);
    let tiles: Vec<(usize, Vec<f32>)> = (0..i_pad.div_ceil(tile))
        .into_par_iter()
        .map(|t| {
            let i_lo = t * tile;
            let width = tile.min(i_pad - i_lo);
            let mut out = vec![0f32; j_pad * width];
            for j0 in (0..j_pad).step_by(TILE_J) {
                for i0 in (i_lo..i_lo + width).step_by(TILE_I) {
                    let mut sum = [[0f32; TILE_I]; TILE_J];
                    for b in 0..scols {
                        let mut c = [[0f32; TILE_I]; TILE_J];
                        for kk in 0..BLOCK_K {
                            let k = b * BLOCK_K + kk;
                            let wrow: &[f32; TILE_I] =
                                wd[k * i_pad + i0..][..TILE_I].try_into().unwrap();
                            for jj in 0..TILE_J {
                                let a = ad[(j0 + jj) * kpad + k];
                                for ii in 0..TILE_I {
                                    c[jj][ii] += wrow[ii] * a;
                                }
                            }
                        }
                        for jj in 0..TILE_J {
                            let d_blk = if j0 + jj < m {
                                d[(j0 + jj) * blocks + b]
                            } else {
                                0.0
                            };
                            for ii in 0..TILE_I {
                                let srow = ((i0 + ii) / BLOCK_N).min(shape.scale_rows() - 1);
                                let s_blk = scales[srow * scols + b];
                                sum[jj][ii] += (s_blk * d_blk) * c[jj][ii];
                            }
                        }
                    }
                    for jj in 0..TILE_J {
                        out[(j0 + jj) * width + (i0 - i_lo)..][..TILE_I].copy_from_slice(&sum[jj]);
                    }
                }
            }
            (i_lo, out)
        })
        .collect();
    for (i_lo, out) in tiles {
        let width = out.len() / j_pad;
        for j in 0..m {
            for ii in 0..width.min(out_f.saturating_sub(i_lo)) {
                y[j * out_f + i_lo + ii] = out[j * width + ii];
            }
        }
    }
    Ok(())
}
