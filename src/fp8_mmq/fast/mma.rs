//! The fast GEMM under [`Accumulation::TensorCore`]: core's own
//! [`mma_k32`] for every output, in the spec's order, with the outputs
//! split over all cores.
//!
//! Per output `(j, i)`, exactly [`oracle::fp8_mmq::mmq`]'s steps: for each
//! block in increasing order `c = +0.0`, four `mma_k32` in increasing k on
//! the block's weight codes (k tail `0x00`, NaN magnitudes `0x00`:
//! [`mma_weight_code`], applied once to a padded copy of the weights) and
//! activation codes, then the fold. The four folds are computed in the
//! same pass from the same `c` (identification wants them all; the MMAs
//! are the cost), `fma` through `f32::mul_add`.
//!
//! [`Accumulation::TensorCore`]: oracle::fp8_mmq::Accumulation::TensorCore

use super::gemm::Operands;
#[cfg(doc)]
use oracle::fp8_mmq::Fold;
use oracle::fp8_mmq::{mma_weight_code, BLOCK_K, BLOCK_N};
use oracle::tensor_core::{mma_k32, Fp8Kind::E4m3, Model, MMA_K};
use rayon::prelude::*;

/// Outputs per rayon task.
const CHUNK: usize = 64;

/// Writes `ys[f]`, each `[m x out_f]`, on checked operands: the GEMM under
/// fold [`Fold::ALL`]`[f]`, for every `f` whose slice is not empty (the
/// MMAs, the cost, are shared by the four folds).
pub(super) fn gemm(model: &Model, ops: &Operands<'_>, ys: [&mut [f32]; 4]) {
    let s = ops.shape;
    let (in_f, in_f_pad, out_f) = (s.in_f(), s.in_f_pad(), s.out_f());
    let (nb, blocks) = (s.scale_cols(), s.act_blocks());
    let kp = nb * BLOCK_K;
    // The weight codes as the MMA reads them, rows padded to nb * 128.
    let mut wp = vec![0u8; out_f * kp];
    for (dst, src) in wp.chunks_exact_mut(kp).zip(ops.w.chunks_exact(in_f)) {
        for (d, &c) in dst.iter_mut().zip(src) {
            *d = mma_weight_code(c);
        }
    }
    let want: [bool; 4] = std::array::from_fn(|f| !ys[f].is_empty());
    let mut out = vec![[0f32; 4]; s.out_len()];
    out.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(t, chunk)| {
            for (o, y4) in chunk.iter_mut().enumerate() {
                let idx = t * CHUNK + o;
                let (j, i) = (idx / out_f, idx % out_f);
                let wrow = &wp[i * kp..][..kp];
                let qrow = &ops.q[j * in_f_pad..][..kp];
                let mut sums = [0f32; 4];
                for b in 0..nb {
                    let mut c = 0f32;
                    for k0 in (b * BLOCK_K..(b + 1) * BLOCK_K).step_by(MMA_K) {
                        let w32: &[u8; MMA_K] = wrow[k0..][..MMA_K].try_into().expect("32 codes");
                        let a32: &[u8; MMA_K] = qrow[k0..][..MMA_K].try_into().expect("32 codes");
                        c = mma_k32(model, E4m3, w32, E4m3, a32, c);
                    }
                    let (sc, d) = (ops.scales[(i / BLOCK_N) * nb + b], ops.d[j * blocks + b]);
                    let (sd, cd) = (sc * d, c * d);
                    sums[0] += sd * c;
                    sums[1] = sd.mul_add(c, sums[1]);
                    sums[2] += cd * sc;
                    sums[3] = cd.mul_add(sc, sums[3]);
                }
                *y4 = sums;
            }
        });
    for (f, y) in ys.into_iter().enumerate() {
        if want[f] {
            for (v, o) in y.iter_mut().zip(&out) {
                *v = o[f];
            }
        }
    }
}
