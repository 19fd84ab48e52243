//! The oracle's answer for a case and the verdict on a kernel's.
//!
//! EXACT and ORDER arms: every bit equal and every value finite. EXACT's
//! data make every partial sum exact, so any summation order passes; the
//! ORDER arm's make every product exact but nearly every partial sum
//! round (`super::generate::order_activation`), so only the contract's k
//! order (rule `MM-ORDER`: `acc = +0.0`, then `acc + w[m, k] x[n, k]` for
//! k = 0 .. K - 1) gives the oracle's bits, with or without a fused
//! multiply-add (the product is exact either way). A kernel that adds two
//! k rows in swapped order, sums a tile in reverse or on its own before
//! adding it, or adds tiles out of order fails it on most outputs of a
//! gate row (`tests/mul_mat_generate.rs`,
//! `order_rows_change_under_every_other_schedule`). Outside these data
//! (RANDOM, on a driver that fuses multiply-adds) the order cannot be
//! judged bit for bit, which is why it is an arm of its own.
//!
//! RANDOM and BALANCED arms: every value finite and, for every output i,
//! `|got_i - want_i| <= 2 * gamma_K * S_i`, where
//! `S_i = sum over k of |w[m, k] * x[n, k]|` (exact products, in f64) and
//! `gamma_K = K u / (1 - K u)`, `u = 2^-24`. Rationale: the dequantized
//! weights are exact or rounded once in the contract's own order (q4_K),
//! the same in any correct kernel, so the only freedom is the summation
//! order and fusion (rule `MM-ORDER`). Any order of K products, each
//! rounded or fused, lies within `gamma_K * S_i` of the exact sum (Higham,
//! *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5, for
//! recursive summation of rounded products); kernel and oracle both do, so
//! they differ by at most twice that. The bound is rigorous, needs no
//! tuning per shape, and is far below what a wrong kernel makes (a dropped
//! sign or a stale tile is off by about `|want|`). Squared and summed, it
//! gives the NMSE bound the table prints,
//! `NMSE <= 4 gamma_K^2 * sum S_i^2 / sum want_i^2`, which the RANDOM arm
//! also gates on (implied by the element-wise test, printed to compare
//! with the measured NMSE). Subnormal products would loosen the bound by
//! an absolute error; the RANDOM data have none (scales at least 2^-24,
//! codes and activations well above 2^-100), nor do the BALANCED data
//! (every weight at least 0.5 and every activation at least 0.5 in
//! magnitude).
//!
//! Where the bound cannot tell a kernel from one that writes zeros: with
//! random signs the exact sum grows like `sqrt(K)` while `S_i` grows like K,
//! so from a few thousand K on (sooner on few outputs) `2 gamma_K S_i` can
//! exceed `|want_i|` on every output, and an all-zero `dst` (or a sum cut
//! short) would pass. [`Verdict::decided`] counts the outputs where it
//! cannot (`|want_i| > 2 gamma_K S_i`, or a bound of 0); a verdict with none is
//! [`Verdict::vacuous`]: never a pass, reported as VACUOUS (the `case`
//! command refuses it, the fuzzer counts it apart, a gate row fails).
//!
//! Why the bound is not tightened per block: the summation order is free,
//! so a correct kernel may add a small block's products into a partial
//! sum that already holds a large block's; each such addition rounds by up
//! to `u` times that partial sum, and those errors land anywhere. A
//! per-block bound (`gamma` times the block's own `sum |w x|`) would fail
//! correct kernels; a rigorous bound for any order has to scale with the
//! whole `S_i`. So the bound stays, and what it can see depends on the
//! data. In the RANDOM arm the f16 block scales span `2^-24 .. 2^16`, and
//! one large block makes `S_i` so large that a kernel dropping the k
//! tail passes (one output, q4_0, K = 256, TILE_K = 40: error 117, bound
//! 153). The BALANCED arm (`super::generate::Arm::Balanced`) keeps every
//! product within a factor 38 of every other, `p_min <= |w x| <= 38
//! p_min`, so `2 gamma_K S_i <= 2 gamma_K K * 38 p_min`; a kernel that
//! drops a product p is off by at least `p - 2 gamma_K S_i` (its own
//! rounding and the oracle's), which exceeds the bound whenever
//! `152 gamma_K K < 1`: every K up to 256 (K = 256: the bound is at most
//! 0.30 p_min, the error at least 0.70 p_min). On one output of K = 256
//! dropping any single product therefore fails, whatever the seed
//! (`tests/mul_mat_generate.rs` checks it for each dtype on the gate's
//! rows, product by product).

use super::generate::{Arm, CaseData};
use oracle::compare::{compare_f32, Comparison};
use oracle::ggml::{dequantize, mul_mat::mul_mat};
use rayon::prelude::*;

/// The oracle's output for the case: [`crate::ggml_fast::mul_mat_fast`]
/// (bit-identical to `oracle::ggml::mul_mat`, NaN payloads aside; proven
/// by `tests/ggml_fast_props.rs`), or, when [`crate::ENV_ORACLE`] is
/// `spec`, the spec itself with rows of src0 split across threads (each
/// block of rows one call of the spec, scattered into `dst[n * M + m]`).
pub fn reference(data: &CaseData) -> Vec<f32> {
    let s = &data.spec;
    let (m, n, k) = (s.m, s.n, s.k);
    if !crate::use_spec_oracle() {
        let mut dst = vec![0.0f32; n * m];
        crate::ggml_fast::mul_mat_fast(s.dtype, m, n, k, &data.src0, &data.src1, &mut dst)
            .expect("a generated case satisfies the contract");
        return dst;
    }
    let row_bytes = s.dtype.row_bytes(k).expect("k in whole blocks");
    const ROWS: usize = 16;
    let blocks: Vec<(usize, Vec<f32>)> = (0..m.div_ceil(ROWS))
        .into_par_iter()
        .map(|b| {
            let r0 = b * ROWS;
            let rows = ROWS.min(m - r0);
            let mut out = vec![0.0f32; n * rows];
            let mut scratch = vec![0.0f32; k];
            mul_mat(
                s.dtype,
                rows,
                n,
                k,
                &data.src0[r0 * row_bytes..(r0 + rows) * row_bytes],
                &data.src1,
                &mut out,
                &mut scratch,
            )
            .expect("a generated case satisfies the contract");
            (r0, out)
        })
        .collect();
    let mut dst = vec![0.0f32; n * m];
    for (r0, out) in blocks {
        let rows = out.len() / n.max(1);
        for ni in 0..n {
            dst[ni * m + r0..ni * m + r0 + rows].copy_from_slice(&out[ni * rows..(ni + 1) * rows]);
        }
    }
    dst
}

/// `S_i = sum over k of |w[m, k] * x[n, k]|` in f64 for every output
/// (index `n * M + m`), the scale of the RANDOM arm's bound.
pub fn abs_sums(data: &CaseData) -> Vec<f64> {
    let s = &data.spec;
    let (m, n, k) = (s.m, s.n, s.k);
    let row_bytes = s.dtype.row_bytes(k).expect("k in whole blocks");
    let cols: Vec<Vec<f64>> = (0..m)
        .into_par_iter()
        .map(|mi| {
            let mut w = vec![0.0f32; k];
            dequantize(
                s.dtype,
                &data.src0[mi * row_bytes..(mi + 1) * row_bytes],
                &mut w,
            )
            .expect("whole blocks");
            (0..n)
                .map(|ni| {
                    let x = &data.src1[ni * k..(ni + 1) * k];
                    w.iter()
                        .zip(x)
                        .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
                        .sum()
                })
                .collect()
        })
        .collect();
    let mut out = vec![0.0f64; n * m];
    for (mi, c) in cols.iter().enumerate() {
        for (ni, v) in c.iter().enumerate() {
            out[ni * m + mi] = *v;
        }
    }
    out
}

/// `gamma_K = K u / (1 - K u)` with `u = 2^-24`.
pub fn gamma(k: usize) -> f64 {
    let ku = k as f64 * (-24f64).exp2();
    ku / (1.0 - ku)
}

/// The verdict on one case.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// The arm judged.
    pub arm: Arm,
    /// The figures of `got` against `want` (rows n, columns m).
    pub cmp: Comparison,
    /// RANDOM and BALANCED: the NMSE bound `4 gamma_K^2 sum S^2 / sum want^2`.
    pub nmse_bound: f64,
    /// RANDOM and BALANCED: outputs beyond `2 gamma_K S_i`, and the first (index).
    pub over_bound: usize,
    /// The first output beyond the element-wise bound.
    pub first_over: Option<usize>,
    /// RANDOM and BALANCED: outputs the bound decides against zero,
    /// `|want_i| > 2 gamma_K S_i` (an output the kernel left +0 fails
    /// there), or with a bound of 0 (`S_i = 0`, K = 0 among them: only the
    /// exact answer passes); EXACT and ORDER: every output.
    pub decided: usize,
}

impl Verdict {
    /// Judges `got` against `want` for `data`'s arm (see the module doc).
    ///
    /// # Panics
    /// If the lengths differ (a shim bug, not a kernel's).
    pub fn judge(data: &CaseData, got: &[f32], want: &[f32]) -> Verdict {
        let s = &data.spec;
        let cmp = compare_f32(got, want, s.m.max(1)).expect("dst lengths agree");
        let mut v = Verdict {
            arm: s.arm,
            cmp,
            nmse_bound: 0.0,
            over_bound: 0,
            first_over: None,
            decided: got.len(),
        };
        if s.arm.bounded() && !got.is_empty() {
            let sums = abs_sums(data);
            let g = gamma(s.k);
            let (mut s2, mut w2) = (0.0f64, 0.0f64);
            v.decided = 0;
            for (i, ((&a, &b), &si)) in got.iter().zip(want).zip(&sums).enumerate() {
                s2 += si * si;
                w2 += f64::from(b) * f64::from(b);
                let bound = 2.0 * g * si;
                v.decided += usize::from(bound == 0.0 || f64::from(b).abs() > bound);
                let err = (f64::from(a) - f64::from(b)).abs();
                if err.is_nan() || err > bound {
                    v.over_bound += 1;
                    v.first_over.get_or_insert(i);
                }
            }
            v.nmse_bound = if w2 > 0.0 { 4.0 * g * g * s2 / w2 } else { 0.0 };
        }
        v
    }

    /// Whether `got` is within the arm's bound: bit for bit (EXACT,
    /// ORDER), or finite, every output within `2 gamma_K S_i` and the NMSE
    /// within its bound (RANDOM, BALANCED). Not a pass when
    /// [`Verdict::vacuous`].
    pub fn within_bound(&self) -> bool {
        match self.arm {
            Arm::Exact | Arm::Order => self.cmp.bit_identical(),
            Arm::Random | Arm::Balanced => {
                self.cmp.non_finite == 0 && self.over_bound == 0 && self.cmp.nmse <= self.nmse_bound
            }
        }
    }

    /// Whether the bound decides no output ([`Verdict::decided`] is 0 on a
    /// non-empty `dst`): an all-zero `dst` would be within it (then
    /// `sum want^2 <= 4 gamma_K^2 sum S^2`, so the NMSE bound is at least
    /// 1, a zero output's NMSE), so the case judges nothing but gross
    /// errors, and passing it says nothing of the kernel.
    pub fn vacuous(&self) -> bool {
        self.decided == 0 && self.cmp.n > 0
    }

    /// Whether the kernel passes: within the bound, on a case that is not
    /// vacuous.
    pub fn pass(&self) -> bool {
        self.within_bound() && !self.vacuous()
    }

    /// The verdict's word: PASS, FAIL (beyond the bound) or VACUOUS
    /// (within a bound that decides no output).
    pub fn status(&self) -> &'static str {
        match (self.within_bound(), self.vacuous()) {
            (false, _) => "FAIL",
            (true, true) => "VACUOUS",
            (true, false) => "PASS",
        }
    }
}
