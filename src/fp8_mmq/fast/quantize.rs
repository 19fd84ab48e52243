//! The fast activation quantizer: [`oracle::fp8_mmq::quantize_activations`]
//! per 128-element block, with the block's steps vectorized.
//!
//! Why the bits are the spec's: step 1 (amax) is the running maximum of the
//! non-NaN `|x|` (`|x| > amax` never holds for NaN) from `+0.0`, a value
//! that does not depend on the order it is taken in (all candidates are
//! non-negative and `+0.0` is the only zero `abs` produces), so a tree of
//! pairwise maxima that ignore NaN gives it too; steps 2 and 3 are the same two divisions;
//! step 4 is the same multiply per element followed by
//! [`super::codec::encode_sat`], proven equal to the spec's encoder for
//! every `f32`. Elements past `in_f` read as `+0.0`, as in the spec, so
//! `0 * inf = NaN` (rule `QUANT-TINY`) reaches the padding too.

use super::codec::encode_sat;
use super::Simd;
use multiversion::multiversion;
use oracle::fp8_mmq::{Shape, BLOCK_K, E4M3_MAX};
use rayon::prelude::*;

/// Quantizer work (elements of `q`) below which one thread does it all.
const PARALLEL_ELEMENTS: usize = 1 << 18;

/// Quantizes whole rows: `x` is `[rows x in_f]`, `q` is
/// `[rows x blocks*128]`, `d` is `[rows x blocks]`.
#[inline(always)]
fn rows(in_f: usize, blocks: usize, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    let in_f_pad = blocks * BLOCK_K;
    for ((xr, qr), dr) in x
        .chunks_exact(in_f)
        .zip(q.chunks_exact_mut(in_f_pad))
        .zip(d.chunks_exact_mut(blocks))
    {
        for (b, (qb, db)) in qr.chunks_exact_mut(BLOCK_K).zip(dr.iter_mut()).enumerate() {
            let qb: &mut [u8; BLOCK_K] = qb.try_into().expect("chunks of BLOCK_K");
            let mut xb = [0f32; BLOCK_K];
            let lo = b * BLOCK_K;
            if lo < in_f {
                let n = (in_f - lo).min(BLOCK_K);
                xb[..n].copy_from_slice(&xr[lo..lo + n]);
            }
            block(&xb, qb, db);
        }
    }
}

/// The larger of two values each `NaN` or non-negative, ignoring a `NaN`
/// (`NaN` only if both are).
#[inline(always)]
fn max_ignoring_nan(a: f32, b: f32) -> f32 {
    if b.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// One block: steps 1 to 4 of the spec.
///
/// Step 1 as a tree of pairwise maxima over `|x|` (halves of 64, 32, ...,
/// 1: each stage a plain elementwise loop, which vectorizes), then
/// `amax = r` if `r > 0` else `+0.0`: the largest non-NaN `|x|`, or `+0.0`
/// when there is none, which is what the spec's running maximum is.
#[inline(always)]
fn block(x: &[f32; BLOCK_K], q: &mut [u8; BLOCK_K], d: &mut f32) {
    let mut m = [0f32; BLOCK_K / 2];
    for (t, (&lo, &hi)) in m.iter_mut().zip(x.iter().zip(&x[BLOCK_K / 2..])) {
        *t = max_ignoring_nan(lo.abs(), hi.abs());
    }
    let mut half = BLOCK_K / 4;
    while half > 0 {
        let (lo, hi) = m.split_at_mut(half);
        for (a, &b) in lo.iter_mut().zip(&hi[..half]) {
            *a = max_ignoring_nan(*a, b);
        }
        half /= 2;
    }
    let amax = if m[0] > 0.0 { m[0] } else { 0.0 };
    if amax == 0.0 {
        *d = 0.0;
        q.fill(0);
    } else {
        *d = amax / E4M3_MAX;
        let dinv = E4M3_MAX / amax;
        for (c, &v) in q.iter_mut().zip(x) {
            *c = encode_sat(v * dinv);
        }
    }
}

#[multiversion(targets("x86_64+avx512f+avx512bw"))]
fn rows_avx512(in_f: usize, blocks: usize, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    rows(in_f, blocks, x, q, d)
}

#[multiversion(targets("x86_64+avx2"))]
fn rows_avx2(in_f: usize, blocks: usize, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    rows(in_f, blocks, x, q, d)
}

fn rows_generic(in_f: usize, blocks: usize, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    rows(in_f, blocks, x, q, d)
}

/// The quantizer on checked slices (lengths as `shape` says).
pub(super) fn quantize(simd: Simd, shape: &Shape, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    let f: fn(usize, usize, &[f32], &mut [u8], &mut [f32]) = match simd {
        Simd::Avx512 => rows_avx512,
        Simd::Avx2 => rows_avx2,
        Simd::Generic => rows_generic,
    };
    let (in_f, in_f_pad, blocks) = (shape.in_f(), shape.in_f_pad(), shape.act_blocks());
    if shape.q_len() < PARALLEL_ELEMENTS || rayon::current_num_threads() < 2 {
        f(in_f, blocks, x, q, d);
        return;
    }
    // About 2^16 elements of q per task.
    let per = ((1 << 16) / in_f_pad).max(1);
    x.par_chunks(per * in_f)
        .zip(q.par_chunks_mut(per * in_f_pad))
        .zip(d.par_chunks_mut(per * blocks))
        .for_each(|((x, q), d)| f(in_f, blocks, x, q, d));
}
