//! The fast v2 GEMM: [`oracle::fp8_mmq::mmq_v2`] with the per-output order
//! kept exactly and the speed gained across outputs.
//!
//! For every output `(j, i)` the operations are the spec's, in the spec's
//! order: `sum = +0.0`; for each scale block `b` in increasing order,
//! `c = +0.0`, then `c = c + w(i, k) * a(j, k)` for the block's 128 `k` in
//! increasing order (zero weights past `in_f` included, rule `K-TAIL`), then
//! `sum = sum + (s * d) * c`, each operation rounded on its own (or, under
//! the fused fold, `sum = fma(s * d, c, sum)` through `f32::mul_add`, one
//! rounding, which core's `fma_f32` is proven equal to; the partial-first
//! folds `sum + (c * d) * s` and `fma(c * d, s, sum)` likewise). Rust never
//! fuses `x * y + z` into a fused multiply-add (LLVM may contract only with
//! the `contract` fast-math flag, which rustc never sets), so every product
//! and sum is an IEEE binary32 basic operation, on any target. Multiplication
//! commutes bit for bit, so `a * w` and `d * s` would do too.
//!
//! What is parallel is only *which* outputs run side by side:
//!
//! - the register tile ([`micro`]) holds `MR x NR` block accumulators
//!   (`MR` activation rows by `NR` outputs); each `k` step loads `NR`
//!   decoded weights (contiguous vectors) and broadcasts `MR` activations,
//!   one vector multiply and one vector add per accumulator vector;
//! - the weights of `NR` outputs for one 128-k block are decoded into a
//!   `128 x NR` panel on the stack (in L1) and reused by every row group,
//!   and the activations are decoded once into `[group][block][k][MR]`;
//! - panels of outputs are split into tasks run by rayon, each task with
//!   every row and its own outputs' running sums; shapes below
//!   [`PARALLEL_MACS`] run on the calling thread, without rayon.
//!
//! Each target's tile is compiled for that target through `multiversion`
//! (runtime CPU-feature detection): AVX-512 `8 x 32` (16 zmm
//! accumulators), AVX2 `6 x 16` (12 ymm), and the baseline `4 x 8`
//! (8 xmm on SSE2, also what non-x86 hosts run).

use super::codec::decode_w;
use super::Simd;
use multiversion::multiversion;
use oracle::conventions::NanMagnitude;
use oracle::e4m3::decode_e4m3;
use oracle::fp8_mmq::{Fold, Shape, BLOCK_K, BLOCK_N};
use rayon::prelude::*;
use std::sync::OnceLock;

/// Multiply-adds (padded tile counts) below which the GEMM runs on the
/// calling thread: about a millisecond of work there, where rayon's wake-up
/// and the tasks' buffers would cost more than they gain.
pub(super) const PARALLEL_MACS: usize = 1 << 22;

/// Packed activations (bytes) up to which a task runs panel by panel
/// rather than block by block (see [`task`]): half of a 512 KiB L2.
const SMALL_A_BYTES: usize = 256 << 10;

/// Tasks per rayon thread (load balance: panels are not all alike at the
/// ragged edge, and the machine is shared).
const TASKS_PER_THREAD: usize = 4;

/// The GEMM's operands, lengths already checked against `shape`.
pub(super) struct Operands<'a> {
    pub shape: &'a Shape,
    pub w: &'a [u8],
    pub scales: &'a [f32],
    pub q: &'a [u8],
    pub d: &'a [f32],
    /// The fold ([`Fold`]).
    pub fold: Fold,
}

/// `decode_e4m3(code, Ieee)` for every code: the activations' reading
/// (`0x7F`/`0xFF` are NaN). Built from the spec's decoder itself.
fn act_table() -> &'static [f32; 256] {
    static TABLE: OnceLock<[f32; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0f32; 256];
        for (code, v) in t.iter_mut().enumerate() {
            *v = decode_e4m3(code as u8, NanMagnitude::Ieee);
        }
        t
    })
}

/// One register tile over one 128-k block: `c` from `+0.0` through the 128
/// products in increasing `k`, then the fold: `sum = sum + sd * c` with
/// `sd = s * d` (already rounded, as in the spec), `sum = fma(sd, c,
/// sum)`, `sum = sum + (c * d) * s` or `sum = fma(c * d, s, sum)`
/// ([`Fold`]), with `s` the panel's weight scale and `d` the rows'.
///
/// One implementation per tile height `MR`, written out row by row by
/// [`micro_tile!`]: with the rows as straight-line code LLVM keeps the
/// accumulators in registers and vectorizes each row across its `NR`
/// outputs. (As a loop over rows, it may instead vectorize *across the
/// rows*, with gathers and scatters: it did, for the AVX-512 tile.)
trait Micro<const MR: usize, const NR: usize> {
    fn tile(
        a: &[[f32; MR]; BLOCK_K],
        w: &[[f32; NR]; BLOCK_K],
        scales: (f32, &[f32; MR], &[f32; MR]),
        sum: &mut [[f32; NR]; MR],
        fold: Fold,
    );
}

/// Defines `$name`, the [`Micro`] tile of height `$mr` (rows `$jj`).
macro_rules! micro_tile {
    ($name:ident, $mr:literal, $($jj:literal)+) => {
        /// The register tile of this many rows (see [`Micro`]).
        struct $name;
        impl<const NR: usize> Micro<$mr, NR> for $name {
            #[inline(always)]
            fn tile(
                a: &[[f32; $mr]; BLOCK_K],
                w: &[[f32; NR]; BLOCK_K],
                (s, d, sd): (f32, &[f32; $mr], &[f32; $mr]),
                sum: &mut [[f32; NR]; $mr],
                fold: Fold,
            ) {
                let mut c = [[0f32; NR]; $mr];
                for (wr, ar) in w.iter().zip(a) {
                    let wr: [f32; NR] = *wr;
                    $(
                        let av = ar[$jj];
                        for ii in 0..NR {
                            c[$jj][ii] += wr[ii] * av;
                        }
                    )+
                }
                match fold {
                    Fold::Separate => {
                        $(
                            for (sv, &cv) in sum[$jj].iter_mut().zip(&c[$jj]) {
                                *sv += sd[$jj] * cv;
                            }
                        )+
                    }
                    Fold::Fused => {
                        $(
                            for (sv, &cv) in sum[$jj].iter_mut().zip(&c[$jj]) {
                                *sv = sd[$jj].mul_add(cv, *sv);
                            }
                        )+
                    }
                    Fold::PartialFirst => {
                        $(
                            for (sv, &cv) in sum[$jj].iter_mut().zip(&c[$jj]) {
                                *sv += (cv * d[$jj]) * s;
                            }
                        )+
                    }
                    Fold::PartialFirstFused => {
                        $(
                            for (sv, &cv) in sum[$jj].iter_mut().zip(&c[$jj]) {
                                *sv = (cv * d[$jj]).mul_add(s, *sv);
                            }
                        )+
                    }
                }
            }
        }
    };
}

micro_tile!(Rows4, 4, 0 1 2 3);
micro_tile!(Rows6, 6, 0 1 2 3 4 5);
micro_tile!(Rows8, 8, 0 1 2 3 4 5 6 7);

/// Decodes the weights of outputs `i0 .. i0 + NR` in block `b` into
/// `out[kk][ii]`; `+0.0` past `in_f` (rule `K-TAIL`) and past `out_f`.
#[inline(always)]
fn decode_panel<const NR: usize>(
    ops: &Operands<'_>,
    i0: usize,
    b: usize,
    out: &mut [[f32; NR]; BLOCK_K],
) {
    let (in_f, out_f) = (ops.shape.in_f(), ops.shape.out_f());
    let k0 = b * BLOCK_K;
    let kn = (in_f - k0).min(BLOCK_K);
    for ii in 0..NR {
        let i = i0 + ii;
        let mut col = [0f32; BLOCK_K];
        if i < out_f {
            let row = &ops.w[i * in_f + k0..][..kn];
            for (v, &code) in col.iter_mut().zip(row) {
                *v = decode_w(code);
            }
        }
        for (o, &v) in out.iter_mut().zip(&col) {
            o[ii] = v;
        }
    }
}

/// The packed activations of row group `g` (rows `g*MR ..`), block `b`.
#[inline(always)]
fn a_block<const MR: usize>(
    a: &[[f32; MR]],
    nb: usize,
    g: usize,
    b: usize,
) -> &[[f32; MR]; BLOCK_K] {
    a[(g * nb + b) * BLOCK_K..][..BLOCK_K]
        .try_into()
        .expect("BLOCK_K rows")
}

/// A task's running sums: tiles `[group][panel - p0]`, `np` panels wide.
struct TaskOut<'o, const MR: usize, const NR: usize> {
    out: &'o mut [[[f32; NR]; MR]],
    p0: usize,
    np: usize,
}

/// Panel `p`, block `b`, every row group: decode the weights, then one
/// register tile per group. (A function, not a closure: a closure would
/// be compiled without the caller's target features.)
#[inline(always)]
fn step<const MR: usize, const NR: usize, M: Micro<MR, NR>>(
    ops: &Operands<'_>,
    a: &[[f32; MR]],
    dp: &[[f32; MR]],
    panel: &mut [[f32; NR]; BLOCK_K],
    out: &mut TaskOut<'_, MR, NR>,
    p: usize,
    b: usize,
) {
    let nb = ops.shape.scale_cols();
    decode_panel(ops, p * NR, b, panel);
    // NR divides BLOCK_N, so a panel lies in one scale row.
    let s_blk = ops.scales[(p * NR / BLOCK_N) * nb + b];
    for (g, dg) in dp.chunks_exact(nb).enumerate() {
        let mut sd = [0f32; MR];
        for (x, &d_blk) in sd.iter_mut().zip(&dg[b]) {
            *x = s_blk * d_blk;
        }
        M::tile(
            a_block(a, nb, g, b),
            panel,
            (s_blk, &dg[b], &sd),
            &mut out.out[g * out.np + (p - out.p0)],
            ops.fold,
        );
    }
}

/// Panels `p0 .. p1` (outputs `p0*NR .. p1*NR`) for every row: `out` is
/// `[group][panel - p0]` tiles of running sums, starting at `+0.0`.
#[inline(always)]
fn task<const MR: usize, const NR: usize, M: Micro<MR, NR>>(
    ops: &Operands<'_>,
    a: &[[f32; MR]],
    dp: &[[f32; MR]],
    p0: usize,
    p1: usize,
    out: &mut [[[f32; NR]; MR]],
) {
    let nb = ops.shape.scale_cols();
    let np = p1 - p0;
    let mut panel = [[0f32; NR]; BLOCK_K];
    let mut out = TaskOut { out, p0, np };
    // Either order keeps every output's blocks in increasing order. With
    // few rows, panel by panel: each weight row is read as one stream and
    // the panel's sums stay in L1. With many, block by block: one block of
    // activations stays in L2 across all panels.
    if a.len() * MR * 4 <= SMALL_A_BYTES {
        for p in p0..p1 {
            for b in 0..nb {
                step::<MR, NR, M>(ops, a, dp, &mut panel, &mut out, p, b);
            }
        }
    } else {
        for b in 0..nb {
            for p in p0..p1 {
                step::<MR, NR, M>(ops, a, dp, &mut panel, &mut out, p, b);
            }
        }
    }
}

/// A task compiled for one target (see [`task`]).
type TaskFn<const MR: usize, const NR: usize> =
    fn(&Operands<'_>, &[[f32; MR]], &[[f32; MR]], usize, usize, &mut [[[f32; NR]; MR]]);

/// Tile of the AVX-512 target: rows, outputs.
const AVX512: (usize, usize) = (8, 32);
/// Tile of the AVX2 target.
const AVX2: (usize, usize) = (6, 16);
/// Tile of the baseline target.
const GENERIC: (usize, usize) = (4, 8);

#[multiversion(targets("x86_64+avx512f+avx512bw"))]
fn task_avx512(
    ops: &Operands,
    a: &[[f32; AVX512.0]],
    dp: &[[f32; AVX512.0]],
    p0: usize,
    p1: usize,
    out: &mut [[[f32; AVX512.1]; AVX512.0]],
) {
    task::<{ AVX512.0 }, { AVX512.1 }, Rows8>(ops, a, dp, p0, p1, out)
}

#[multiversion(targets("x86_64+avx2"))]
fn task_avx2(
    ops: &Operands,
    a: &[[f32; AVX2.0]],
    dp: &[[f32; AVX2.0]],
    p0: usize,
    p1: usize,
    out: &mut [[[f32; AVX2.1]; AVX2.0]],
) {
    task::<{ AVX2.0 }, { AVX2.1 }, Rows6>(ops, a, dp, p0, p1, out)
}

fn task_generic(
    ops: &Operands,
    a: &[[f32; GENERIC.0]],
    dp: &[[f32; GENERIC.0]],
    p0: usize,
    p1: usize,
    out: &mut [[[f32; GENERIC.1]; GENERIC.0]],
) {
    task::<{ GENERIC.0 }, { GENERIC.1 }, Rows4>(ops, a, dp, p0, p1, out)
}

/// The GEMM on checked operands, with `simd`'s tile.
pub(super) fn gemm(simd: Simd, ops: &Operands<'_>, y: &mut [f32]) {
    match simd {
        Simd::Avx512 => drive(ops, y, task_avx512),
        Simd::Avx2 => drive(ops, y, task_avx2),
        Simd::Generic => drive(ops, y, task_generic),
    }
}

/// One row group's packed activations and scales.
type GroupMut<'g, const MR: usize> = (&'g mut [[f32; MR]], &'g mut [[f32; MR]]);

/// Decodes row group `g`'s activations into `ag` (`[block][kk][MR]`) and
/// copies its scales into `dg` (`[block][MR]`); rows past `m` stay `+0.0`.
fn pack_group<const MR: usize>(
    ops: &Operands<'_>,
    table: &[f32; 256],
    g: usize,
    ag: &mut [[f32; MR]],
    dg: &mut [[f32; MR]],
) {
    let s = ops.shape;
    let (m, in_f_pad, blocks, nb) = (s.m(), s.in_f_pad(), s.act_blocks(), s.scale_cols());
    for jj in 0..MR.min(m - g * MR) {
        let j = g * MR + jj;
        let qrow = &ops.q[j * in_f_pad..][..nb * BLOCK_K];
        for (dst, &code) in ag.iter_mut().zip(qrow) {
            dst[jj] = table[usize::from(code)];
        }
        for (dst, &d_blk) in dg.iter_mut().zip(&ops.d[j * blocks..][..nb]) {
            dst[jj] = d_blk;
        }
    }
}

/// Packs the activations, runs the tasks (on this thread when small) and
/// writes `y`.
fn drive<const MR: usize, const NR: usize>(
    ops: &Operands<'_>,
    y: &mut [f32],
    task: TaskFn<MR, NR>,
) {
    const {
        assert!(
            BLOCK_N.is_multiple_of(NR),
            "a panel must lie in one scale row"
        )
    };
    let s = ops.shape;
    let (m, out_f, nb) = (s.m(), s.out_f(), s.scale_cols());
    let groups = m.div_ceil(MR);
    let panels = out_f.div_ceil(NR);
    let macs = groups * MR * panels * NR * nb * BLOCK_K;
    let threads = rayon::current_num_threads();
    let parallel = macs >= PARALLEL_MACS && threads > 1;

    // Activations decoded once: a[(g*nb + b)*128 + kk][jj] is a(g*MR + jj,
    // b*128 + kk); dp[g*nb + b][jj] is d[g*MR + jj, b]; padding rows +0.0.
    let table = act_table();
    let mut a = vec![[0f32; MR]; groups * nb * BLOCK_K];
    let mut dp = vec![[0f32; MR]; groups * nb];
    let pack = |(g, (ag, dg)): (usize, GroupMut<'_, MR>)| pack_group(ops, table, g, ag, dg);
    if parallel && groups > 1 {
        a.par_chunks_mut(nb * BLOCK_K)
            .zip(dp.par_chunks_mut(nb))
            .enumerate()
            .for_each(pack);
    } else {
        a.chunks_mut(nb * BLOCK_K)
            .zip(dp.chunks_mut(nb))
            .enumerate()
            .for_each(pack);
    }

    let tasks = if parallel {
        (threads * TASKS_PER_THREAD).min(panels)
    } else {
        1
    };
    let per = panels.div_ceil(tasks);
    let run = |t: usize| {
        let p0 = t * per;
        let p1 = (p0 + per).min(panels);
        let mut out = vec![[[0f32; NR]; MR]; groups * (p1 - p0)];
        task(ops, &a, &dp, p0, p1, &mut out);
        (p0, out)
    };
    let parts: Vec<(usize, Vec<[[f32; NR]; MR]>)> = if parallel {
        (0..panels.div_ceil(per)).into_par_iter().map(run).collect()
    } else {
        vec![run(0)]
    };

    for (p0, out) in parts {
        let np = out.len() / groups;
        for (g, tiles) in out.chunks_exact(np).enumerate() {
            for (pi, tile) in tiles.iter().enumerate() {
                let i0 = (p0 + pi) * NR;
                let n = NR.min(out_f - i0);
                for (jj, row) in tile.iter().enumerate().take(m - g * MR) {
                    let j = g * MR + jj;
                    y[j * out_f + i0..][..n].copy_from_slice(&row[..n]);
                }
            }
        }
    }
}
