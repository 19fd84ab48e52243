//! The fused-MoE block-FP8 expert GEMM (vLLM's `fused_moe_kernel` with
//! `use_fp8_w8a8=True`, `block_shape=[128, 128]`): the reference
//! `fused_moe_fp8`, a case's arrays `fused_moe_fp8_case`, and
//! `check_fused_moe_fp8`, which judges any Python callable per (token,
//! slot) pair, bit for bit under a declared schedule.
//!
//! # Shapes
//!
//! For `tokens` tokens (M), `k` input features (K), `n` output features
//! (N), `experts` experts (E) and `topk` slots per token, in elements:
//! - `a`: uint8 `[M, K]`, e4m3 activation codes;
//! - `a_scale`: float32 `[M, ceil(K/128)]`, one per token and 128-k block;
//! - `w`: uint8 `[E, N, K]`, e4m3 weight codes (row-major, k fastest);
//! - `w_scale`: float32 `[E, ceil(N/128), ceil(K/128)]`, one per expert and
//!   128x128 weight block;
//! - `topk_weights`: float32 `[M, topk]`, the routed weights;
//! - `topk_ids`: int32 `[M, topk]`, expert ids in `0 .. E`, or `-1`;
//! - `out`: `[M, topk, N]` in the compute type: float32 values, or the
//!   uint16 bit patterns of bfloat16 or float16 (numpy has no bfloat16).
//!
//! Pair `p = t * topk + j` is token `t`'s slot `j`; vLLM's `C` is `out`
//! viewed as `[M * topk, N]`, row `p`.
//!
//! # Definition
//!
//! For each pair `p = (t, j)` with `e = topk_ids[t, j]`:
//! 1. Rule `EP-ZERO`: `e == -1` (an expert on another rank under expert
//!    parallelism): `out[t, j, :] = +0.0` in the compute type, whatever
//!    `topk_weights[t, j]` holds and whether or not the routed weight is
//!    applied.
//! 2. Otherwise, for each `i < N`: `y = oracle::fp8_mmq::mmq` under the
//!    declared schedule for the one activation row `a[t, :]` (zero codes
//!    beyond K, rule `K-TAIL`), scale row `a_scale[t, :]`, and expert `e`'s
//!    weight row `w[e, i, :]` with scale grid `w_scale[e]` (rule
//!    `PARTIAL-GRID`: row `i / 128`, column `b` for k block `b`). The
//!    activation row is the token's, shared by its `topk` pairs (rule
//!    `TOKEN-ROW`: vLLM's `offs_token // top_k`); the routed weight is the
//!    pair's (`topk_weights[t, j]`, vLLM's `offs_token`).
//! 3. Rule `ROUTED-WEIGHT`: with `mul_routed_weight`, `y = y * topk_weights[t,
//!    j]`, one binary32 multiply rounded to nearest even, after the last
//!    fold (never inside it).
//! 4. Rule `CAST`: `out[t, j, i]` is `y` rounded to nearest even to the
//!    compute type (bfloat16 or float16: `oracle::bf16::encode_bf16`,
//!    `oracle::f16::encode_f16`, overflow to infinity; float32: `y`
//!    itself).
//!
//! vLLM writes the fold `accumulator += tl.dot(a, b) * a_scale[:, None] *
//! b_scale[None, :]`, which Triton contracts into `fma(c * d, s, sum)`:
//! `oracle::fp8_mmq::Fold::PartialFirstFused`, so the field kernel's
//! schedule on sm_90 is `Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED` (the
//! default here).
//!
//! Rule `BLOCK-K-128`: the contract is the kernel's with `BLOCK_SIZE_K =
//! 128`, one `tl.dot` and one fold per 128-k scale block (vLLM's default
//! block-FP8 config, `get_default_config`: `BLOCK_SIZE_K =
//! block_shape[1]`; `invoke_fused_moe_kernel` clamps it to `min(block_shape)`).
//! A tuned config with `BLOCK_SIZE_K = 64` folds each half block on its own
//! (two `tl.dot`s and two folds with the same scales): another
//! arithmetic, not this contract.
//!
//! Out of the contract: ids outside `-1 .. E` (vLLM's Triton alignments
//! route them nowhere, so the kernel leaves their rows unwritten, and its
//! CUDA alignment does not test for them: `oracle::moe_align` rule
//! `ROUTE`; the reference refuses them), and weight codes with the NaN
//! magnitude (rule `NAN-W`: read as zero, never drawn by the check).
//!
//! Sources: vLLM `vllm/model_executor/layers/fused_moe/fused_moe.py`:
//! `fused_moe_kernel` (the block-wise branch: `a_scale_ptrs` at
//! `offs_token // top_k`, `offs_bsn = offs_bn // group_n`, the masked
//! loads `offs_k < K - k * BLOCK_SIZE_K` with `other=0.0`, the fold, `if
//! MUL_ROUTED_WEIGHT: accumulator = accumulator * moe_weight[:, None]`,
//! then `accumulator.to(compute_type)`; `token_mask = offs_token <
//! num_valid_tokens` skips the alignment's pads), `write_zeros_to_output`
//! (a block whose `expert_ids` entry is -1 stores `tl.zeros(...,
//! compute_type)`), `invoke_fused_moe_kernel` and `get_default_config`;
//! `prepare_finalize/deepep_ht.py` (DeepEP's empty slot `-1` is sent to an
//! expert on another rank, which `expert_map` turns into the block id -1);
//! PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
//! Instructions" (`wgmma.mma_async`, e4m3 operands, f32 accumulator:
//! `oracle::tensor_core::SM90_WGMMA`).

use crate::arrays::{array, dims, read, value_error};
use crate::check::{
    arms_or_all, call_typed, callable_name, failure_head, refuse_empty_arms, value, CheckReport,
    Input, Matched, Out, OutKind, Seeds,
};
use crate::conventions::Schedule;
use crate::fp8;
use kernel_oracle::fp8_mmq::fast::{mmq_fast, mmq_fast_all_folds, quantize_activations_fast, Simd};
use kernel_oracle::fp8_mmq::generate::Arm;
use kernel_oracle::fp8_mmq::judge::{random_bound_factor, schedule_list};
use kernel_oracle::moe_align;
use kernel_oracle::rng::Rng;
use numpy::PyReadonlyArrayDyn;
use oracle::dtype::Dtype;
use oracle::fp8_mmq::{Accumulation, Fold, Schedule as CoreSchedule, Shape, BLOCK_K, BLOCK_N};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fmt::Write;

/// A shape as Python gives it: `(tokens, k, n, experts, topk)`.
pub type MoeShape = (usize, usize, usize, usize, usize);

/// The shapes `(tokens, k, n, experts, topk)` a check runs by default,
/// ragged first: a k tail with a partial last scale row (k = 200, n = 136),
/// one decode token over many experts, a k tail of one element with an n
/// tail of one (three scale columns, three scale rows), aligned shapes
/// with several pairs per expert, and 300 tokens over 2 experts (about 300
/// pairs an expert: past one, two and four 64-row tiles, so a grid of a
/// fixed count of tiles per expert fails).
pub const FUSED_MOE_SHAPES: [MoeShape; 6] = [
    (7, 200, 136, 8, 2),
    (1, 256, 128, 16, 4),
    (16, 257, 257, 6, 3),
    (33, 384, 256, 4, 2),
    (64, 512, 384, 8, 2),
    (300, 128, 128, 2, 2),
];

/// The alignment block the routing arms aim their counts at (EDGE: 1,
/// 15, 16, 17, 32 pairs per expert): vLLM's smallest `BLOCK_SIZE_M`. The
/// callable's own alignment may use any block.
pub const ROUTING_BLOCK: usize = 16;

/// The most `tokens * topk * n` a case takes (elements of `out`): the
/// reference keeps a few arrays of that many f32.
pub const MAX_OUT: usize = 1 << 26;

/// The most `experts * n * k` a case takes (bytes of `w`, 1 GiB; a check
/// holds a few copies: the case, the callable's array, the judge's
/// absolute values).
pub const MAX_WEIGHTS: usize = 1 << 30;

/// The most `tokens * k` a case takes (bytes of `a`).
pub const MAX_ACT: usize = 1 << 28;

/// The most multiply-adds (`tokens * topk * n * 128 ceil(k/128)`) a case
/// takes: the tensor-core models run at about 1.7e8 a second on two cores,
/// and identification runs two of them.
pub const MAX_WORK: usize = 1 << 33;

/// One problem's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Tokens (M).
    pub tokens: usize,
    /// Input features (K).
    pub k: usize,
    /// Output features (N).
    pub n: usize,
    /// Experts (E).
    pub experts: usize,
    /// Slots per token.
    pub topk: usize,
}

impl Dims {
    fn from_tuple((tokens, k, n, experts, topk): MoeShape) -> Dims {
        Dims {
            tokens,
            k,
            n,
            experts,
            topk,
        }
    }

    /// Pairs: `tokens * topk`.
    pub fn pairs(&self) -> usize {
        self.tokens * self.topk
    }

    /// Scale columns (k blocks): `ceil(k / 128)`.
    pub fn kb(&self) -> usize {
        self.k.div_ceil(BLOCK_K)
    }

    /// Scale rows: `ceil(n / 128)`.
    pub fn nb(&self) -> usize {
        self.n.div_ceil(BLOCK_N)
    }

    /// One activation row's GEMM shape (`m` rows).
    fn shape(&self, m: usize) -> Result<Shape, String> {
        Shape::new(m, self.k, self.n).map_err(|e| e.to_string())
    }

    /// # Errors
    /// A zero dimension, or a case past the caps ([`MAX_OUT`],
    /// [`MAX_WEIGHTS`], [`MAX_ACT`], [`MAX_WORK`], and the routing
    /// generator's `moe_align::within_caps`), as a sentence naming it.
    pub fn valid(&self) -> Result<(), String> {
        let d = self;
        if [d.tokens, d.k, d.n, d.experts, d.topk].contains(&0) {
            return Err(format!(
                "tokens={} k={} n={} experts={} topk={}: each must be at least 1",
                d.tokens, d.k, d.n, d.experts, d.topk
            ));
        }
        let prod = |xs: &[usize]| xs.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        let over = |what: &str, v: Option<usize>, cap: usize| match v {
            Some(v) if v <= cap => Ok(()),
            _ => Err(format!(
                "tokens={} k={} n={} experts={} topk={}: {what} over the check's {cap}",
                d.tokens, d.k, d.n, d.experts, d.topk
            )),
        };
        over("tokens*topk*n", prod(&[d.tokens, d.topk, d.n]), MAX_OUT)?;
        over("experts*n*k", prod(&[d.experts, d.n, d.k]), MAX_WEIGHTS)?;
        over("tokens*k", prod(&[d.tokens, d.k]), MAX_ACT)?;
        over(
            "tokens*topk*n*128*ceil(k/128) multiply-adds",
            prod(&[d.tokens, d.topk, d.n, d.kb(), BLOCK_K]),
            MAX_WORK,
        )?;
        moe_align::within_caps(d.pairs(), d.experts, 0)?;
        d.shape(d.tokens).map(|_| ())
    }
}

/// One case's operands (module doc shapes, C order).
#[derive(Clone, Debug)]
pub struct Case {
    /// The dimensions.
    pub dims: Dims,
    /// `[M, K]` e4m3 codes.
    pub a: Vec<u8>,
    /// `[M, ceil(K/128)]`.
    pub a_scale: Vec<f32>,
    /// `[E, N, K]` e4m3 codes.
    pub w: Vec<u8>,
    /// `[E, ceil(N/128), ceil(K/128)]`.
    pub w_scale: Vec<f32>,
    /// `[M, topk]`.
    pub topk_weights: Vec<f32>,
    /// `[M, topk]`, in `-1 .. E`.
    pub topk_ids: Vec<i32>,
}

/// A seed for part `part` of a case (splitmix64's finalizer of `seed +
/// part * golden`): the activations, each expert's weights, the routing and
/// the routed weights draw from unrelated streams.
fn sub_seed(seed: u64, part: u64) -> u64 {
    let mut z = seed.wrapping_add(part.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The power of two the weight scales of arm `arm` are multiplied by, so
/// that every output is finite in float16 (largest finite 65504): the FP8
/// gate's EXACT outputs reach `12 * 8 * 7648` (twelve blocks of `448 * 8 +
/// 127 * 4 * 8` at scale 8), its CODES outputs `8 * 2^8 * 448 * 448`
/// (about `2^28.6`). A power of two keeps both arms' sums exact in any
/// order (every value moves by the same exponent; the smallest CODES
/// product, `2^-4 * 2^-8 * 2^-9 * 448 * 2^-14`, stays a normal binary32);
/// the FOLD and RANDOM outputs stay within a few thousand as drawn.
fn f16_range(arm: Arm) -> f32 {
    match arm {
        Arm::Exact => 1.0 / 64.0,
        Arm::Codes => 1.0 / 16384.0,
        Arm::Fold | Arm::Random => 1.0,
    }
}

/// The default seed of a shape and its arms.
pub fn base_seed(d: &Dims, arm: Arm, routing: moe_align::Arm) -> u64 {
    let fp8_seed = fp8::case_spec(d.k, d.n, d.tokens, arm, None).seed;
    let route_seed =
        moe_align::Spec::base_seed(d.tokens, d.topk, d.experts, ROUTING_BLOCK, routing);
    0x0F05_ED00_0000_0000 ^ fp8_seed ^ route_seed.rotate_left(23) ^ (d.experts as u64) << 40
}

impl Case {
    /// Draws a case: the activations from the FP8 gate's generator under
    /// `arm` (`fp8_mmq::CaseSpec`, `m = tokens`; the quantizer's codes
    /// and scales of its `x`, or the FOLD arm's operand, cut to K and
    /// `ceil(K/128)`), each expert's weights and scale grid from the same
    /// generator under its own seed (so the arm's exactness holds for every
    /// pair), the ids from the MoE alignment's routing arm `routing`
    /// (`moe_align::Spec`, block [`ROUTING_BLOCK`]; INVALID's ids outside
    /// `0 .. E`, which this contract does not define, become -1), and the
    /// routed weights uniform in `[0.05, 1)` with full significands. The
    /// weight scales of EXACT and CODES are moved by a power of two so
    /// that every output is finite in float16 (`f16_range`).
    ///
    /// # Errors
    /// As [`Dims::valid`].
    pub fn generate(
        dims: Dims,
        arm: Arm,
        routing: moe_align::Arm,
        seed: u64,
    ) -> Result<Case, String> {
        dims.valid()?;
        let (m, k, n, ne) = (dims.tokens, dims.k, dims.n, dims.experts);
        let (kb, nb) = (dims.kb(), dims.nb());
        let act = fp8::case_spec(k, 1, m, arm, Some(sub_seed(seed, 0)))
            .generate()
            .map_err(|e| e.to_string())?;
        let s = act.shape;
        let (q, d) = match act.qd {
            Some(qd) => qd,
            None => {
                let mut q = vec![0u8; s.q_len()];
                let mut d = vec![0f32; s.d_len()];
                quantize_activations_fast(&s, &act.x, &mut q, &mut d).map_err(|e| e.to_string())?;
                (q, d)
            }
        };
        let (pad, blocks) = (s.in_f_pad(), s.act_blocks());
        let mut a = Vec::with_capacity(m * k);
        let mut a_scale = Vec::with_capacity(m * kb);
        for t in 0..m {
            a.extend_from_slice(&q[t * pad..][..k]);
            a_scale.extend_from_slice(&d[t * blocks..][..kb]);
        }
        let mut w = Vec::with_capacity(ne * n * k);
        let mut w_scale = Vec::with_capacity(ne * nb * kb);
        let range = f16_range(arm);
        for e in 0..ne {
            let data = fp8::case_spec(k, n, 1, arm, Some(sub_seed(seed, 1 + e as u64)))
                .generate()
                .map_err(|e| e.to_string())?;
            w.extend_from_slice(&data.w);
            w_scale.extend(data.scales.iter().map(|&s| s * range));
        }
        let route = moe_align::Spec {
            tokens: m,
            topk: dims.topk,
            num_experts: ne,
            block_size: ROUTING_BLOCK,
            map: None,
            pad_sorted_ids: false,
            arm: routing,
            seed: sub_seed(seed, u64::MAX - 1),
        }
        .generate()?;
        let topk_ids = route
            .ids
            .into_iter()
            .map(|id| {
                if id >= 0 && (id as usize) < ne {
                    id
                } else {
                    -1
                }
            })
            .collect();
        let mut rng = Rng(sub_seed(seed, u64::MAX - 2));
        let topk_weights = (0..dims.pairs()).map(|_| 0.05 + 0.95 * rng.f01()).collect();
        Ok(Case {
            dims,
            a,
            a_scale,
            w,
            w_scale,
            topk_weights,
            topk_ids,
        })
    }

    /// Each expert with pairs, and its pairs in increasing order.
    fn groups(&self) -> Vec<(usize, Vec<usize>)> {
        let mut by: Vec<Vec<usize>> = vec![Vec::new(); self.dims.experts];
        for (p, &e) in self.topk_ids.iter().enumerate() {
            if e >= 0 {
                by[e as usize].push(p);
            }
        }
        by.into_iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .collect()
    }

    /// The GEMM operands of expert `e`'s pairs: the shape, the pairs'
    /// activation rows (their tokens', rule `TOKEN-ROW`) zero-padded to
    /// `in_f_pad` (rule `K-TAIL`: zero codes, as vLLM's masked loads give),
    /// and their scales (zero beyond `ceil(K/128)`, never read).
    fn operands(&self, pairs: &[usize]) -> Result<(Shape, Vec<u8>, Vec<f32>), String> {
        let d = &self.dims;
        let s = d.shape(pairs.len())?;
        let (pad, blocks, kb) = (s.in_f_pad(), s.act_blocks(), d.kb());
        let mut q = vec![0u8; s.q_len()];
        let mut ds = vec![0f32; s.d_len()];
        for (r, &p) in pairs.iter().enumerate() {
            let t = p / d.topk;
            q[r * pad..][..d.k].copy_from_slice(&self.a[t * d.k..][..d.k]);
            ds[r * blocks..][..kb].copy_from_slice(&self.a_scale[t * kb..][..kb]);
        }
        Ok((s, q, ds))
    }

    /// Expert `e`'s weights and scale grid.
    fn expert(&self, e: usize) -> (&[u8], &[f32]) {
        let d = &self.dims;
        let (wl, sl) = (d.n * d.k, d.nb() * d.kb());
        (&self.w[e * wl..][..wl], &self.w_scale[e * sl..][..sl])
    }

    /// The f32 GEMM `y` of every routed pair under each fold of
    /// `accumulation` (`[4][pairs * n]`, `Fold::ALL`'s order; rows of `-1`
    /// pairs stay `+0.0`), through the case library's fast paths
    /// (bit-identical to `oracle::fp8_mmq::mmq`), one expert at a time.
    fn gemm_all_folds(&self, accumulation: &Accumulation) -> Result<[Vec<f32>; 4], String> {
        let n = self.dims.n;
        let mut ys: [Vec<f32>; 4] = std::array::from_fn(|_| vec![0f32; self.dims.pairs() * n]);
        for (e, pairs) in self.groups() {
            let (s, q, d) = self.operands(&pairs)?;
            let (w, sc) = self.expert(e);
            let got = mmq_fast_all_folds(Simd::detected(), &s, accumulation, w, sc, &q, &d)
                .map_err(|e| e.to_string())?;
            for (y, g) in ys.iter_mut().zip(&got) {
                for (r, &p) in pairs.iter().enumerate() {
                    y[p * n..][..n].copy_from_slice(&g[r * n..][..n]);
                }
            }
        }
        Ok(ys)
    }

    /// The f32 GEMM `y` of every routed pair under `schedule` (rows of
    /// `-1` pairs `+0.0`).
    fn gemm(&self, schedule: &CoreSchedule) -> Result<Vec<f32>, String> {
        let n = self.dims.n;
        let mut y = vec![0f32; self.dims.pairs() * n];
        for (e, pairs) in self.groups() {
            let (s, q, d) = self.operands(&pairs)?;
            let (w, sc) = self.expert(e);
            let mut g = vec![0f32; s.out_len()];
            mmq_fast(&s, schedule, w, sc, &q, &d, &mut g).map_err(|e| e.to_string())?;
            for (r, &p) in pairs.iter().enumerate() {
                y[p * n..][..n].copy_from_slice(&g[r * n..][..n]);
            }
        }
        Ok(y)
    }

    /// The same case on absolute values (sign bits of every code cleared,
    /// `|scale|`, `|routed weight|`): its v2 GEMM is the sum of absolute
    /// terms the RAND arm's bound scales.
    fn absolute(&self) -> Case {
        let codes = |c: &[u8]| c.iter().map(|&b| b & 0x7F).collect();
        let abs = |x: &[f32]| x.iter().map(|v| v.abs()).collect();
        Case {
            dims: self.dims,
            a: codes(&self.a),
            a_scale: abs(&self.a_scale),
            w: codes(&self.w),
            w_scale: abs(&self.w_scale),
            topk_weights: abs(&self.topk_weights),
            topk_ids: self.topk_ids.clone(),
        }
    }

    /// `out` from the GEMM `y` (steps 1, 3 and 4 of the module doc), as
    /// f32 values of the compute type, `[pairs * n]`.
    fn finish(&self, y: &[f32], mul: bool, dt: Dtype) -> Vec<f32> {
        let n = self.dims.n;
        let mut out = vec![0f32; y.len()];
        for (p, (&e, &tw)) in self.topk_ids.iter().zip(&self.topk_weights).enumerate() {
            if e < 0 {
                continue; // EP-ZERO: +0.0.
            }
            for i in 0..n {
                let v = y[p * n + i];
                out[p * n + i] = dt.round(if mul { v * tw } else { v });
            }
        }
        out
    }
}

/// Whether two outputs hold the same bits (NaN equals NaN whatever its
/// payload; `-0.0` differs from `+0.0`).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// What the oracle says about one case: the declared schedule's answer and
/// the known schedules the callable's output matches.
struct Judged {
    /// The declared schedule's `out` (f32 values of the compute type).
    want: Vec<f32>,
    /// The declared schedule's f32 GEMM (before the routed weight).
    y: Vec<f32>,
    /// The known schedules whose `out` is bit-identical to the callable's.
    identified: Vec<CoreSchedule>,
}

/// Computes every known schedule's answer once per accumulation (four
/// folds from one pass of the MMA models), keeps the declared one, and
/// names the known schedules `got` matches.
fn judge_all(
    c: &Case,
    declared: CoreSchedule,
    mul: bool,
    dt: Dtype,
    got: &[f32],
) -> Result<Judged, String> {
    let mut accs: Vec<Accumulation> = Vec::new();
    for s in CoreSchedule::KNOWN {
        if !accs.contains(&s.accumulation) {
            accs.push(s.accumulation);
        }
    }
    let mut j = Judged {
        want: Vec::new(),
        y: Vec::new(),
        identified: Vec::new(),
    };
    let mut matched = Vec::new();
    for acc in accs {
        let ys = c.gemm_all_folds(&acc)?;
        for (fold, y) in Fold::ALL.into_iter().zip(ys) {
            let s = CoreSchedule {
                fold,
                accumulation: acc,
            };
            if !CoreSchedule::KNOWN.contains(&s) && s != declared {
                continue;
            }
            let out = c.finish(&y, mul, dt);
            if same_bits(got, &out) {
                matched.push(s);
            }
            if s == declared {
                j.want = out;
                j.y = y;
            }
        }
    }
    j.identified = CoreSchedule::KNOWN
        .into_iter()
        .filter(|s| matched.contains(s))
        .collect();
    Ok(j)
}

/// The first output outside the RAND arm's interval under a `V2*`
/// schedule, and how many: `(count, first (pair, i, got, lo, hi))`.
type Excess = (usize, Option<(usize, usize, f32, f32, f32)>);

/// The RAND arm under an f32-accumulation schedule: each output of a
/// routed pair must lie in `[R(lo), R(hi)]`, where `y` is the declared
/// schedule's GEMM, `A` the same sum over absolute terms, `e =
/// random_bound_factor(nblk) * A` (the FP8 gate's per-output bound,
/// `fp8_mmq::judge`), `lo, hi = (y -+ e) * tw` (swapped for a negative
/// weight; without the routed weight, `y -+ e`), widened by `2^-50` of
/// their magnitude for the f64 products, and `R` the routed multiply's
/// rounding to binary32 followed by the cast, both monotone, so every GEMM
/// within the bound lands inside. A `-1` pair must be `+0.0` exactly.
fn over_interval(
    c: &Case,
    j: &Judged,
    got: &[f32],
    mul: bool,
    dt: Dtype,
) -> Result<Excess, String> {
    let n = c.dims.n;
    let a = c.absolute().gemm(&CoreSchedule::V2)?;
    let factor = random_bound_factor(c.dims.kb());
    let mut over: Excess = (0, None);
    for (p, (&e, &tw)) in c.topk_ids.iter().zip(&c.topk_weights).enumerate() {
        for i in 0..n {
            let idx = p * n + i;
            let g = got[idx];
            let (lo, hi) = if e < 0 {
                (0.0f32, 0.0f32)
            } else {
                let err = factor * f64::from(a[idx]);
                let y = f64::from(j.y[idx]);
                let (mut lo, mut hi) = (y - err, y + err);
                if mul {
                    let w = f64::from(tw);
                    (lo, hi) = (lo * w, hi * w);
                    if lo > hi {
                        (lo, hi) = (hi, lo);
                    }
                }
                let pad = lo.abs().max(hi.abs()) * f64::powi(2.0, -50);
                (dt.round((lo - pad) as f32), dt.round((hi + pad) as f32))
            };
            let inside = if e < 0 {
                g.to_bits() == 0
            } else {
                g.is_finite() && g >= lo && g <= hi
            };
            if !inside {
                over.0 += 1;
                over.1.get_or_insert((p, i, g, lo, hi));
            }
        }
    }
    Ok(over)
}

/// The operands read from numpy and checked against each other.
fn read_case(
    a: &PyReadonlyArrayDyn<'_, u8>,
    a_scale: &PyReadonlyArrayDyn<'_, f32>,
    w: &PyReadonlyArrayDyn<'_, u8>,
    w_scale: &PyReadonlyArrayDyn<'_, f32>,
    topk_weights: &PyReadonlyArrayDyn<'_, f32>,
    topk_ids: &PyReadonlyArrayDyn<'_, i32>,
) -> PyResult<Case> {
    let (ash, wsh, ish) = (
        dims("a", a, 2)?,
        dims("w", w, 3)?,
        dims("topk_ids", topk_ids, 2)?,
    );
    let d = Dims {
        tokens: ash[0],
        k: ash[1],
        n: wsh[1],
        experts: wsh[0],
        topk: ish[1],
    };
    d.valid().map_err(PyValueError::new_err)?;
    let c = Case {
        dims: d,
        a: read("a", a, &[d.tokens, d.k])?,
        a_scale: read("a_scale", a_scale, &[d.tokens, d.kb()])?,
        w: read("w", w, &[d.experts, d.n, d.k])?,
        w_scale: read("w_scale", w_scale, &[d.experts, d.nb(), d.kb()])?,
        topk_weights: read("topk_weights", topk_weights, &[d.tokens, d.topk])?,
        topk_ids: read("topk_ids", topk_ids, &[d.tokens, d.topk])?,
    };
    if let Some((p, &e)) = c
        .topk_ids
        .iter()
        .enumerate()
        .find(|(_, &e)| e < -1 || e >= 0 && e as usize >= d.experts)
    {
        return Err(PyValueError::new_err(format!(
            "topk_ids[{}, {}] = {e}: expected an expert in 0 .. {} or -1 (expert on another rank)",
            p / d.topk,
            p % d.topk,
            d.experts
        )));
    }
    Ok(c)
}

/// `out` as a numpy array of the compute type: float32, or uint16 bit
/// patterns.
fn out_array<'py>(
    py: Python<'py>,
    d: &Dims,
    dt: Dtype,
    v: Vec<f32>,
) -> PyResult<Bound<'py, PyAny>> {
    let shape = [d.tokens, d.topk, d.n];
    Ok(match dt {
        Dtype::F32 => array(py, &shape, v)?.into_any(),
        _ => array(
            py,
            &shape,
            v.into_iter().map(|x| dt.encode(x) as u16).collect(),
        )?
        .into_any(),
    })
}

/// fused_moe_fp8(a, a_scale, w, w_scale, topk_weights, topk_ids, schedule=Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED, mul_routed_weight=True, out_dtype="bfloat16") -> out[M, topk, N]
///
/// The fused-MoE block-FP8 expert GEMM as vLLM's `fused_moe_kernel`
/// computes it (`use_fp8_w8a8=True`, `block_shape=[128, 128]`,
/// `BLOCK_SIZE_K = 128`), per (token t, slot j) pair with `e =
/// topk_ids[t, j]`:
/// `out[t, j, :] = cast(fold over 128-k blocks b of (c_b, a_scale[t, b],
/// w_scale[e, n/128, b]) * topk_weights[t, j])`, with `c_b` the block's
/// e4m3 dot product and the fold and accumulation as `schedule` says
/// (`oracle::fp8_mmq::mmq`; the field's `accumulator += tl.dot(a, b) *
/// a_scale[:, None] * b_scale[None, :]` is
/// `SM90_WGMMA_PARTIAL_FIRST_FUSED` on sm_90); the routed-weight multiply
/// only with `mul_routed_weight`, one f32 rounding after the last fold;
/// the cast to `out_dtype` rounds to nearest even. A pair with expert -1
/// gets `+0.0` everywhere (vLLM's `write_zeros_to_output`). The k tail
/// beyond K reads as zero codes.
///
/// Shapes (elements): `a` uint8 `[M, K]` e4m3 codes; `a_scale` float32
/// `[M, ceil(K/128)]`; `w` uint8 `[E, N, K]` e4m3 codes; `w_scale`
/// float32 `[E, ceil(N/128), ceil(K/128)]`; `topk_weights` float32 `[M,
/// topk]`; `topk_ids` int32 `[M, topk]`, each in `0 .. E` or -1. Returns
/// `[M, topk, N]`: float32 for `"float32"`, else uint16 bit patterns of
/// bfloat16 or float16 (`decode_bf16` / `decode_f16` give the values; torch:
/// `torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)`).
///
/// Errors: `ValueError` on a shape disagreement, a zero dimension, a case
/// past the check's caps (`tokens*topk*n` 2^26, `experts*n*k` 2^30,
/// `tokens*k` 2^28, multiply-adds 2^33, pairs 2^20, experts 4096), an id
/// outside `-1 .. E`, or an unknown `out_dtype`. Weight codes with the NaN
/// magnitude read as zero (rule NAN-W).
///
/// Source: vLLM `vllm/model_executor/layers/fused_moe/fused_moe.py`,
/// `fused_moe_kernel` and `write_zeros_to_output` (the module doc of
/// `kernel_oracle_py::check_fused_moe` states every rule).
#[pyfunction]
#[pyo3(signature = (a, a_scale, w, w_scale, topk_weights, topk_ids, schedule = Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED, mul_routed_weight = true, out_dtype = "bfloat16"))]
#[allow(clippy::too_many_arguments)]
fn fused_moe_fp8<'py>(
    py: Python<'py>,
    a: PyReadonlyArrayDyn<'py, u8>,
    a_scale: PyReadonlyArrayDyn<'py, f32>,
    w: PyReadonlyArrayDyn<'py, u8>,
    w_scale: PyReadonlyArrayDyn<'py, f32>,
    topk_weights: PyReadonlyArrayDyn<'py, f32>,
    topk_ids: PyReadonlyArrayDyn<'py, i32>,
    schedule: Schedule,
    mul_routed_weight: bool,
    out_dtype: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let dt = crate::check::parse_out_dtype(out_dtype)?;
    let c = read_case(&a, &a_scale, &w, &w_scale, &topk_weights, &topk_ids)?;
    let want = py
        .detach(|| {
            c.gemm(&schedule.core())
                .map(|y| c.finish(&y, mul_routed_weight, dt))
        })
        .map_err(PyValueError::new_err)?;
    out_array(py, &c.dims, dt, want)
}

/// The routing arm named `s` (`moe_align::Arm::parse`).
fn routing_arm(s: &str) -> PyResult<moe_align::Arm> {
    moe_align::Arm::parse(s).map_err(PyValueError::new_err)
}

/// fused_moe_fp8_case(tokens, k, n, experts, topk, arm, routing, seed=None) -> dict
///
/// The arrays `check_fused_moe_fp8` hands a callable for one case (module
/// doc shapes): keys `a`, `a_scale`, `w`, `w_scale`, `topk_weights`,
/// `topk_ids`, `seed` (int), `arm`, `routing` (str). `arm`: the FP8 gate's
/// data arm (`"EXACT"`, `"FOLD"`, `"CODES"`, `"RAND"`), drawn for the
/// activations and for every expert's weights; `routing`: the MoE
/// alignment's routing arm (`"RAND"`, `"SKEW"`, `"EDGE"`, `"INVALID"`;
/// INVALID's out-of-range ids become -1). `seed=None`: the check's first
/// seed for the shape and arms.
///
/// Errors: `ValueError` on an unknown arm, a zero dimension or a case past
/// the caps (see `fused_moe_fp8`).
#[pyfunction]
#[pyo3(signature = (tokens, k, n, experts, topk, arm, routing, seed = None))]
#[allow(clippy::too_many_arguments)]
fn fused_moe_fp8_case<'py>(
    py: Python<'py>,
    tokens: usize,
    k: usize,
    n: usize,
    experts: usize,
    topk: usize,
    arm: &str,
    routing: &str,
    seed: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let (a, r) = (fp8::arm(arm)?, routing_arm(routing)?);
    let d = Dims::from_tuple((tokens, k, n, experts, topk));
    d.valid().map_err(PyValueError::new_err)?;
    let seed = seed.unwrap_or_else(|| base_seed(&d, a, r));
    let c = py
        .detach(|| Case::generate(d, a, r, seed))
        .map_err(PyValueError::new_err)?;
    let dict = PyDict::new(py);
    dict.set_item("a", array(py, &[tokens, k], c.a)?)?;
    dict.set_item("a_scale", array(py, &[tokens, d.kb()], c.a_scale)?)?;
    dict.set_item("w", array(py, &[experts, n, k], c.w)?)?;
    dict.set_item("w_scale", array(py, &[experts, d.nb(), d.kb()], c.w_scale)?)?;
    dict.set_item("topk_weights", array(py, &[tokens, topk], c.topk_weights)?)?;
    dict.set_item("topk_ids", array(py, &[tokens, topk], c.topk_ids)?)?;
    dict.set_item("seed", seed)?;
    dict.set_item("arm", a.name())?;
    dict.set_item("routing", r.name())?;
    Ok(dict)
}

/// check_fused_moe_fp8(fn, shapes=None, arms=None, routings=None, seeds=None, trials=1, schedule=Schedule.SM90_WGMMA_PARTIAL_FIRST_FUSED, mul_routed_weight=True, out_dtype="bfloat16", verbose=True, name=None) -> CheckReport
///
/// Runs `fn`, a fused-MoE block-FP8 expert GEMM (vLLM's
/// `fused_moe_kernel` with `use_fp8_w8a8=True`, `block_shape=[128, 128]`,
/// `BLOCK_SIZE_K = 128`, behind its own `moe_align_block_size`), on cases
/// drawn by `fused_moe_fp8_case` and judges every (token, slot) pair's
/// output against `fused_moe_fp8` under the declared `schedule`.
///
/// The callable: `fn(a, a_scale, w, w_scale, topk_weights, topk_ids,
/// out)` with the arrays of `fused_moe_fp8` and `out` `[M, topk, N]`
/// (float32 filled with NaN for `out_dtype="float32"`, else uint16 filled
/// with the type's NaN pattern, `0x7FC0` or `0x7E00`), writing `out` and
/// returning None, or returning a new array of that dtype and shape. It
/// must not write its inputs; it aligns the pairs itself. vLLM's `C` is
/// `out` as `[M * topk, N]`: `torch.from_numpy(out.view(np.int16))
/// .view(torch.bfloat16)` on the host, `C.view(torch.int16).cpu().numpy()`
/// back.
///
/// The cases: for each shape (default `FUSED_MOE_SHAPES`, tuples `(tokens,
/// k, n, experts, topk)`), each data arm of `arms` (default `"EXACT"`,
/// `"FOLD"`, `"CODES"`, `"RAND"`: the FP8 gate's, drawn for the
/// activations and every expert) and each routing arm of `routings`
/// (`"RAND"`, `"SKEW"`, `"EDGE"`, `"INVALID"`: the MoE alignment's; INVALID
/// puts -1, an expert on another rank, in one slot in eight); with
/// `routings=None` each data arm runs one routing, rotating with the
/// shape's place in `shapes`, so the default battery pairs every data arm
/// with every routing. `seeds` / `trials`: as `check_fp8_block_gemm`.
///
/// Judgement: every pair of an expert in `0 .. E` must hold `fused_moe_fp8`
/// under `schedule`; a pair with expert -1 must hold `+0.0` (rule
/// `EP-ZERO`). Bit for bit under an `SM90_*` schedule and in the EXACT,
/// FOLD and CODES arms under every schedule; the RAND arm under a `V2*`
/// schedule by an interval: the FP8 gate's per-output bound on the GEMM
/// (`3 gamma_(130+nblk)` times the sum of absolute terms), carried through
/// the routed multiply and the cast, both monotone roundings. A non-finite
/// output fails. A 16-bit `out_dtype` hides GEMM differences below half
/// an output ulp (a fold association or routed weight misplaced inside
/// the fold shows only near a rounding boundary): `out_dtype="float32"`
/// sees every bit. Each row names the known schedules whose `out` the
/// callable's output matches bit for bit.
///
/// `mul_routed_weight`: vLLM's `MUL_ROUTED_WEIGHT` (the down projection's
/// GEMM runs it; the gate-up GEMM only with `apply_router_weight_on_input`).
/// `verbose` / `name`: as `check_fp8_block_gemm`.
///
/// Returns a `CheckReport` (`identified` / `identified_exact_arms`: the
/// known schedules every compared case, every EXACT/FOLD/CODES case,
/// matched). Failing cases print a rerun line and a `fused_moe_fp8_case`
/// line.
///
/// Errors: `ValueError` before any call on an unknown arm, routing or
/// `out_dtype`, a zero dimension or a case past the caps (see
/// `fused_moe_fp8`); `KeyboardInterrupt` and exceptions of `print`
/// propagate.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (r#fn, shapes = None, arms = None, routings = None, seeds = None, trials = 1, schedule = Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED, mul_routed_weight = true, out_dtype = "bfloat16", verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fused_moe_fp8<'py>(
    py: Python<'py>,
    r#fn: Bound<'py, PyAny>,
    shapes: Option<Vec<MoeShape>>,
    arms: Option<Vec<String>>,
    routings: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    schedule: Schedule,
    mul_routed_weight: bool,
    out_dtype: &str,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    crate::check::require_callable(&r#fn, "fn")?;
    let seeds = Seeds::new(seeds, trials)?;
    let f = r#fn;
    let dt = crate::check::parse_out_dtype(out_dtype)?;
    let shapes: Vec<Dims> = shapes
        .unwrap_or_else(|| FUSED_MOE_SHAPES.to_vec())
        .into_iter()
        .map(Dims::from_tuple)
        .collect();
    for d in &shapes {
        d.valid().map_err(PyValueError::new_err)?;
    }
    refuse_empty_arms(&arms)?;
    let arms = match arms {
        Some(a) => a
            .iter()
            .map(|s| fp8::arm(s))
            .collect::<PyResult<Vec<_>>>()?,
        None => Arm::ALL.to_vec(),
    };
    let given_routings = routings.is_some();
    let routings = arms_or_all(routings, &moe_align::Arm::ALL, moe_align::Arm::parse)?;
    let declared = schedule.core();
    let fname = callable_name(&f, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "fused_moe_fp8".into(),
        ..CheckReport::default()
    };
    let mut kw = format!(", schedule=kernel_oracle.Schedule.{schedule:?}");
    if !mul_routed_weight {
        kw.push_str(", mul_routed_weight=False");
    }
    if dt != Dtype::Bf16 {
        let _ = write!(kw, ", out_dtype=\"{}\"", dt.name());
    }
    out.row(&format!(
        "check_fused_moe_fp8({fname}), declared schedule: {declared}, routed weight {}, out {}",
        if mul_routed_weight {
            "applied"
        } else {
            "not applied"
        },
        dt.name()
    ))?;
    out.row(&format!(
        "{:<22} {:>5} {:>7} {:>18} {:>10} {:>13} {:>6} {:>9}  verdict  schedule",
        "tokens,k,n,E,topk", "arm", "routing", "seed", "max_abs", "bit_mismatch", "ep-1", "call_ms"
    ))?;
    let mut matched = Matched::default();
    for (si, d) in shapes.iter().enumerate() {
        for (ai, &arm) in arms.iter().enumerate() {
            let rs: Vec<moe_align::Arm> = if given_routings {
                routings.clone()
            } else {
                vec![routings[(si + ai) % routings.len()]]
            };
            for routing in rs {
                let base = base_seed(d, arm, routing);
                for seed in seeds.for_case(base) {
                    let c = py
                        .detach(|| Case::generate(*d, arm, routing, seed))
                        .map_err(PyValueError::new_err)?;
                    let (m, k, n, ne, topk) = (d.tokens, d.k, d.n, d.experts, d.topk);
                    let (kb, nb) = (d.kb(), d.nb());
                    let inputs = [
                        ("a", Input::U8(array(py, &[m, k], c.a.clone())?, &c.a)),
                        (
                            "a_scale",
                            Input::F32(array(py, &[m, kb], c.a_scale.clone())?, &c.a_scale),
                        ),
                        ("w", Input::U8(array(py, &[ne, n, k], c.w.clone())?, &c.w)),
                        (
                            "w_scale",
                            Input::F32(array(py, &[ne, nb, kb], c.w_scale.clone())?, &c.w_scale),
                        ),
                        (
                            "topk_weights",
                            Input::F32(
                                array(py, &[m, topk], c.topk_weights.clone())?,
                                &c.topk_weights,
                            ),
                        ),
                        (
                            "topk_ids",
                            Input::I32(array(py, &[m, topk], c.topk_ids.clone())?, &c.topk_ids),
                        ),
                    ];
                    let (called, ms) = call_typed(
                        py,
                        &f,
                        Vec::new(),
                        &inputs,
                        &[(&[m, topk, n], OutKind::of(dt))],
                    )?;
                    let (an, rn) = (arm.name(), routing.name());
                    let shape_s = format!("{m},{k},{n},{ne},{topk}");
                    let row = format!("{shape_s:<22} {an:>5} {rn:>7} 0x{seed:016x}");
                    let repro = format!(
                        "kernel_oracle.check_fused_moe_fp8({fname}, shapes=[({m}, {k}, {n}, {ne}, {topk})], arms=[\"{an}\"], routings=[\"{rn}\"], seeds=[0x{seed:016x}]{kw})"
                    );
                    let head = format!(
                        "FAIL fused_moe_fp8: tokens={m} k={k} n={n} experts={ne} topk={topk} arm={an} routing={rn} seed=0x{seed:016x}, declared: {declared}"
                    );
                    let Some((got, written)) = rep.take(&mut out, called, &row, &head, &repro)?
                    else {
                        continue;
                    };
                    let got: Vec<f32> = match dt {
                        Dtype::F32 => got[0].f32().to_vec(),
                        _ => got[0]
                            .u16()
                            .iter()
                            .map(|&b| dt.decode(u32::from(b)))
                            .collect(),
                    };
                    let bit_exact = arm.bit_exact() || declared.bit_exact();
                    let (j, over) = py
                        .detach(|| {
                            let j = judge_all(&c, declared, mul_routed_weight, dt, &got)?;
                            let over = if bit_exact {
                                (0, None)
                            } else {
                                over_interval(&c, &j, &got, mul_routed_weight, dt)?
                            };
                            Ok::<_, String>((j, over))
                        })
                        .map_err(PyValueError::new_err)?;
                    let cmp =
                        oracle::compare::compare_f32(&got, &j.want, n).map_err(value_error)?;
                    let ok = if bit_exact {
                        cmp.bit_identical()
                    } else {
                        over.0 == 0
                    };
                    let pass = ok && written.is_empty();
                    matched.add(&j.identified, arm.bit_exact());
                    let ep = c.topk_ids.iter().filter(|&&e| e < 0).count();
                    let ids_line = if j.identified.len() == CoreSchedule::KNOWN.len() {
                        "matches every known schedule".to_string()
                    } else {
                        format!("matches {}", schedule_list(&j.identified))
                    };
                    out.row(&format!(
                        "{row} {:>10.3e} {:>7}/{:<5} {ep:>6} {ms:>9.2}  {}  {ids_line}",
                        cmp.max_abs,
                        cmp.bit_mismatches,
                        cmp.n,
                        if pass { "PASS" } else { "FAIL" },
                    ))?;
                    if pass {
                        rep.passed += 1;
                        continue;
                    }
                    let mut r = failure_head(&head, &written);
                    if !ok {
                        let bound = if bit_exact {
                            "bit-identical required (0 differing bits allowed; expert -1 pairs +0.0)".to_string()
                        } else {
                            "each output within the GEMM bound 3 gamma_(130+nblk) sum|terms|, through the routed multiply and the cast; expert -1 pairs +0.0".to_string()
                        };
                        let _ = writeln!(r, "  bound: {bound}\n  schedule: {ids_line}");
                        let _ = writeln!(
                            r,
                            "  out: max_abs {:e}, {}/{} bit patterns differ, {} non-finite",
                            cmp.max_abs, cmp.bit_mismatches, cmp.n, cmp.non_finite
                        );
                        let at = |p: usize| {
                            let e = c.topk_ids[p];
                            format!(
                                "token t={}, slot j={}, expert {e}{}",
                                p / topk,
                                p % topk,
                                if e < 0 { " (on another rank)" } else { "" }
                            )
                        };
                        for (label, mm) in [
                            ("non-finite", cmp.first_non_finite),
                            ("differing", cmp.first_mismatch),
                        ] {
                            if let Some(mm) = mm {
                                let _ = writeln!(
                                    r,
                                    "  {label}: first at ({}, n i={}): got {}, want {}",
                                    at(mm.row),
                                    mm.col,
                                    value(mm.got),
                                    value(mm.want)
                                );
                            }
                        }
                        if let (cnt, Some((p, i, g, lo, hi))) = over {
                            let _ = writeln!(
                                r,
                                "  {cnt} outputs outside their interval; first at ({}, n i={i}): got {}, allowed [{}, {}]",
                                at(p),
                                value(g),
                                value(lo),
                                value(hi)
                            );
                        }
                    }
                    let _ = write!(
                        r,
                        "reproduce:\n  {repro}\nthe case's arrays:\n  kernel_oracle.fused_moe_fp8_case({m}, {k}, {n}, {ne}, {topk}, \"{an}\", \"{rn}\", seed=0x{seed:016x})"
                    );
                    rep.fail(&mut out, r, repro)?;
                }
            }
        }
    }
    let extra = matched.record(&mut rep);
    rep.finish(out, &extra)
}

/// Adds the fused-MoE FP8 GEMM, its case, its check and default shapes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FUSED_MOE_SHAPES", FUSED_MOE_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(fused_moe_fp8, m)?)?;
    m.add_function(wrap_pyfunction!(fused_moe_fp8_case, m)?)?;
    m.add_function(wrap_pyfunction!(check_fused_moe_fp8, m)?)?;
    Ok(())
}
