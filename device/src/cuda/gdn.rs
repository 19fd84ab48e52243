//! # gdn: the Gated DeltaNet decode kernels (`cu/gdn.cu`)
//!
//! [`GdnEngine`] compiles `cu/gdn.cu` (or the candidate named by
//! [`ENV_GDN_CU`]) with the same NVRTC cache as [`Engine`], and launches the
//! per-row trio (`gdn_conv1d_decode`, `gdn_prep_decode`, `gdn_scan_s128`)
//! and the packed twins over `t` rows (`gdn_conv1d_decode_tloop`,
//! `gdn_prep_decode_rows`, `gdn_scan_s128_tsnap`). `oracle::gdn` is the
//! normative contract; every output must equal it bit for bit.
//!
//! The ABI is written at the top of `cu/gdn.cu`.
//!
//! ## What the kernels cannot check, and the shim checks before launching
//!
//! 1. **The shape**: `num_v` a multiple of `num_k`, `d_state = 128`,
//!    `d_conv` in 2..=4, `t >= 1` ([`gdn_shape`], the oracle's
//!    `GdnShape::new`: [`DeviceError::Gdn`]); the kernels' `i32` indexing
//!    and grid limits ([`check_gdn_limits`]: [`DeviceError::IndexRange`]).
//! 2. **Buffer lengths**: every buffer against the shape, with the oracle's
//!    argument names ([`check_gdn_conv`], [`check_gdn_prep`],
//!    [`check_gdn_scan`], [`check_gdn_state`]: [`DeviceError::Gdn`] holding
//!    `GdnError::Len`). These need no GPU.
//! 3. **The pointer table**: the kernels read the conv ring and the two
//!    state buffers through a device table of pointers. Only [`GdnState`]
//!    builds one, from buffers whose lengths it checked, so a table never
//!    points at a buffer of the wrong size.
//! 4. **Writes outside the outputs**: with guards on, every output the call
//!    allocates or receives sits in guard bands, checked after the launch
//!    ([`DeviceError::GuardClobbered`]); the per-row `launch_*_row`
//!    variants leave the check to one [`GdnEngine::check_guards`] after
//!    the last of many rows. The conv output and the heads, which the next
//!    launch reads before that check, are intermediates
//!    ([`INTERMEDIATE_BAND`](crate::cuda::INTERMEDIATE_BAND) bands: a read
//!    past them meets NaN).
//!
//!
//! ## Packed steps and CUDA graphs
//!
//! [`GdnStep`] owns everything one packed call of `t` rows touches (the
//! weights, a [`GdnState`], the inputs and every output);
//! [`GdnEngine::run_step`] launches it eagerly as one fused kernel
//! (`gdn_step_fused`: conv, prep and scan of every row, the operations of
//! the trio in their order), [`GdnEngine::run_step_twins`] as the three
//! packed twins, and [`GdnEngine::capture_step`] (or
//! [`GdnEngine::capture_step_twins`]) records the same launches into a
//! CUDA graph ([`GdnGraph`]) that owns the step, so no buffer it names can
//! be freed while it may be replayed. The graph reaches the ring and the
//! state buffers only through the state's pointer table, so
//! [`GdnGraph::rebind`] swaps in new buffers (or the same two state buffers
//! with canonical and alternate exchanged, as an odd verify round leaves
//! them) by rewriting the table in place, and the next
//! [`GdnGraph::launch`] runs on them (seed 003, the gate
//! `gpu_gdn_packed_graph_rebind_matches_per_row_bitwise`).

use super::buffer::{self, Buffer, Guarded, Src};
use super::error::{DeviceError, Result};
use super::nvrtc::nvrtc_available;
use super::shim::{launch_config, launched, shim_methods, sm_target, Shim};
use super::source::KernelSource;
use super::{driver_available, drv, Engine, I32_LIMIT};
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig};
use cudarc::driver::{DevicePtr, DeviceRepr, PushKernelArg};
use oracle::gdn::scan::{state_after_row, StateSlot};
use oracle::gdn::{GdnError, GdnShape};
use std::sync::Arc;

/// Environment variable naming a candidate `.cu` file with the ABI of
/// `cu/gdn.cu`; when set, it is compiled instead of the builtin one.
pub const ENV_GDN_CU: &str = "KERNEL_ORACLE_GDN_CU";

/// The builtin kernel source, `cu/gdn.cu`, embedded at build time.
pub const BUILTIN_GDN_CU: &str = include_str!("../../../cu/gdn.cu");

/// The kernels every `gdn` source must export (`extern "C"`): the per-row
/// trio, the packed twins, then the fused (and batched) step.
pub const GDN_KERNELS: [&str; 7] = [
    "gdn_conv1d_decode",
    "gdn_prep_decode",
    "gdn_scan_s128",
    "gdn_conv1d_decode_tloop",
    "gdn_prep_decode_rows",
    "gdn_scan_s128_tsnap",
    "gdn_step_fused",
];

/// The optional second fused entry (the ABI's `gdn_step_fused_c2`: the
/// same step with clusters of 2 CTAs per q/k head; sm_90 and later).
pub const GDN_FUSED_C2: &str = "gdn_step_fused_c2";

/// The optional split form of the main entry (the ABI's
/// `gdn_step_fused_split`): one sequence at `num_v = 2 num_k` in clusters
/// of 8 CTAs of [`GDN_SPLIT_THREADS`] threads, each state column split over
/// four warps and the q/k preparation pipelined beside them (`cu/gdn.cu`).
/// sm_90 and later; [`GdnFusedEntry::Main`] launches it where it applies.
pub const GDN_FUSED_SPLIT: &str = "gdn_step_fused_split";

/// Threads per CTA of [`GDN_FUSED_SPLIT`].
pub const GDN_SPLIT_THREADS: u32 = 256;

/// The optional third fused entry (the ABI's `gdn_step_fused_persistent`:
/// persistent CTAs over the (q/k head, sequence) items, every chunk's
/// inputs and state prefetched into shared memory; no cluster).
pub const GDN_FUSED_PERSISTENT: &str = "gdn_step_fused_persistent";

/// Threads (state columns: one v head per chunk) per CTA of the
/// persistent entry.
pub const GDN_PERSISTENT_THREADS: u32 = 128;

/// Bytes of dynamic shared memory per CTA of the persistent entry: one
/// chunk's state (128 rows of [`GDN_PERSISTENT_THREADS`] f32 columns).
pub const GDN_PERSISTENT_SMEM: u32 = GDN_PERSISTENT_THREADS * 128 * 4;

/// The CTA cap of the persistent entry's second form in
/// [`GdnEngine::fused_entries`]: with 2 CTAs, a CTA runs several items
/// whenever a batch has 3 or more (q/k head, sequence) items, so the
/// prefetch of the next item's inputs and state (and, at ratio 2 or more,
/// of the same item's next chunk) is what gets checked.
pub const GDN_PERSISTENT_FEW_CTAS: u32 = 2;

/// Which entry of the fused step a launch uses (`cu/gdn.cu`'s ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnFusedEntry {
    /// `gdn_step_fused`: clusters of [`gdn_fused_cluster`] CTAs (8 on
    /// sm_90 and later), for a lone sequence (latency). One sequence at
    /// `num_v = 2 num_k` on sm_90 and later runs [`GDN_FUSED_SPLIT`]
    /// instead where the source exports it.
    Main,
    /// `gdn_step_fused_c2`: clusters of 2 CTAs, 4x fewer CTAs convolving
    /// each q/k head, for many sequences (throughput). sm_90 and later.
    C2,
    /// `gdn_step_fused_persistent`: at most `ctas` persistent CTAs
    /// (`None`: as many as the device keeps resident), for many sequences
    /// (throughput: no CTA waits on memory between items).
    Persistent {
        /// The most CTAs launched (`None`: no cap beyond residency).
        ctas: Option<u32>,
    },
}

/// The grid, CTA size and dynamic shared memory (bytes) of
/// `gdn_step_fused_persistent` (see the ABI) for `shape` and `batch`
/// sequences when `resident` CTAs fit on the device at once:
/// `min(num_k * batch, resident, ctas)` CTAs (at least 1) of
/// [`GDN_PERSISTENT_THREADS`] threads, [`GDN_PERSISTENT_SMEM`] bytes each.
pub fn gdn_persistent_launch(
    shape: &GdnShape,
    batch: usize,
    resident: u32,
    ctas: Option<u32>,
) -> ((u32, u32), u32, u32) {
    let items = (shape.num_k() * batch).min(u32::MAX as usize) as u32;
    let grid = items.min(resident).min(ctas.unwrap_or(u32::MAX)).max(1);
    ((grid, 1), GDN_PERSISTENT_THREADS, GDN_PERSISTENT_SMEM)
}

/// The grid and CTA size of `gdn_step_fused` (see the ABI) for `shape`,
/// `batch` sequences, cluster size `cs` and an entry that runs CTAs of at
/// most `max_threads` threads (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`:
/// its `__launch_bounds__` and registers): `(num_k * cs, batch)` CTAs;
/// with `cpc = ratio * 128 / cs` state columns per CTA, `lone =
/// max_threads` capped at [`GDN_FUSED_MAX_THREADS`], whole warps, at least
/// 128, threads when `batch = 1` and `cpc` is a multiple of 32 below
/// `lone` (the threads past `cpc` convolve and normalise the next row
/// while the column threads scan: a lone sequence is latency-bound), else
/// `min(cpc, 128)` (many sequences fill the device with column threads
/// alone).
pub fn gdn_fused_launch(
    shape: &GdnShape,
    batch: usize,
    cs: u32,
    max_threads: u32,
) -> ((u32, u32), u32) {
    let cpc = (shape.ratio() * shape.d_state()) as u32 / cs;
    let lone = (max_threads.min(GDN_FUSED_MAX_THREADS) / 32 * 32).max(GDN_HEAD_THREADS);
    let threads = if batch == 1 && cpc.is_multiple_of(32) && cpc < lone {
        lone
    } else {
        cpc.min(GDN_HEAD_THREADS)
    };
    ((shape.num_k() as u32 * cs, batch as u32), threads)
}

/// Whether [`GdnFusedEntry::Main`] runs [`GDN_FUSED_SPLIT`] (where the
/// source exports it) for `shape` and `batch` with the main entry's
/// cluster size `cs`: one sequence, `num_v = 2 num_k` (32 columns a CTA in
/// clusters of 8), `cs` = 8 (sm_90 and later). The ABI's rule for the
/// entry (`cu/gdn.cu`); it traps on anything else.
pub fn gdn_split_applies(shape: &GdnShape, batch: usize, entry: GdnFusedEntry, cs: u32) -> bool {
    entry == GdnFusedEntry::Main && batch == 1 && shape.num_v() == 2 * shape.num_k() && cs == 8
}

/// The cluster size of `gdn_step_fused` on a device of compute capability
/// `major` (the ABI's `GDN_CS`): 8 CTAs per q/k head on sm_90 and later,
/// where the kernel is compiled with `__cluster_dims__(8, 1, 1)`; 1 before.
pub const fn gdn_fused_cluster(major: i32) -> u32 {
    if major >= 9 {
        8
    } else {
        1
    }
}

/// The largest CTA of the fused step the shim launches (for a lone
/// sequence: the q/k threads beside the column threads).
pub const GDN_FUSED_MAX_THREADS: u32 = 256;

/// Threads per CTA of the conv kernels (one channel per thread).
pub const GDN_CONV_THREADS: u32 = 256;

/// Threads per CTA of prep and scan: one per element of a head (exactly
/// 128, the ABI's requirement).
pub const GDN_HEAD_THREADS: u32 = 128;

/// The most rows of a packed call (prep's `grid.y`).
pub const GDN_MAX_T: usize = 65_535;

impl KernelSource {
    /// The builtin `cu/gdn.cu`.
    pub fn builtin_gdn() -> KernelSource {
        KernelSource::builtin_named("cu/gdn.cu", BUILTIN_GDN_CU)
    }

    /// The candidate named by [`ENV_GDN_CU`], else the builtin `cu/gdn.cu`.
    ///
    /// # Errors
    /// [`DeviceError::KernelSource`] if the named file cannot be read.
    pub fn gdn_from_env() -> Result<KernelSource> {
        KernelSource::from_env_var(ENV_GDN_CU, KernelSource::builtin_gdn)
    }
}

impl DeviceError {
    /// The contract's error inside a [`DeviceError::Gdn`].
    pub fn gdn_error(&self) -> Option<&GdnError> {
        match self {
            DeviceError::Gdn(e) => Some(e),
            _ => None,
        }
    }
}

/// `Err(Gdn(Len))` unless `got == want`.
fn len(arg: &'static str, want: usize, got: usize) -> Result<()> {
    if want == got {
        Ok(())
    } else {
        Err(DeviceError::Gdn(GdnError::Len { arg, want, got }))
    }
}

/// Builds and checks a shape: the oracle's [`GdnShape::new`], then
/// [`check_gdn_limits`].
///
/// # Errors
/// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`].
pub fn gdn_shape(
    num_k: usize,
    num_v: usize,
    d_state: usize,
    d_conv: usize,
    t: usize,
) -> Result<GdnShape> {
    let shape = GdnShape::new(num_k, num_v, d_state, d_conv, t).map_err(DeviceError::Gdn)?;
    check_gdn_limits(&shape)?;
    Ok(shape)
}

/// The kernels' limits: `t <= 65535` (prep's grid), and `t * conv_dim`,
/// `t * value_dim` (the largest per-row element counts the kernels index
/// with `i32`) at most `2^31 - 1`.
///
/// # Errors
/// [`DeviceError::IndexRange`].
pub fn check_gdn_limits(shape: &GdnShape) -> Result<()> {
    let range = |what, value: usize, limit: u64| {
        if value as u64 > limit {
            Err(DeviceError::IndexRange {
                what,
                value: value as u64,
                limit,
            })
        } else {
            Ok(())
        }
    };
    range("t", shape.t(), GDN_MAX_T as u64)?;
    range("num_v", shape.num_v(), I32_LIMIT)?;
    // GdnShape::new has checked these products against usize overflow.
    range("t * conv_dim", shape.t() * shape.conv_dim(), I32_LIMIT)?;
    range("t * value_dim", shape.t() * shape.value_dim(), I32_LIMIT)
}

/// Checks a conv call of `rows` rows (1 for `gdn_conv1d_decode`,
/// `shape.t()` for the packed twin): `x` and `out` `rows * C`, `w`
/// `C * d_conv`, `snap` (packed only) `(rows - 1) * C * (d_conv - 1)`.
///
/// # Errors
/// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`].
pub fn check_gdn_conv(
    shape: &GdnShape,
    rows: usize,
    x: usize,
    w: usize,
    out: usize,
    snap: Option<usize>,
) -> Result<()> {
    check_gdn_limits(shape)?;
    let c = shape.conv_dim();
    len("x", rows * c, x)?;
    len("w", shape.conv_w_len(), w)?;
    len("out", rows * c, out)?;
    if let Some(s) = snap {
        len("snap", (rows - 1) * shape.ring_len(), s)?;
    }
    Ok(())
}

/// The lengths of prep's outputs (the scan's operands), in the order
/// `[q, k, v, beta, g]`.
pub type HeadLens = [usize; 5];

const HEAD_NAMES: [&str; 5] = ["q", "k", "v", "beta", "g"];

fn check_heads(shape: &GdnShape, rows: usize, heads: HeadLens) -> Result<()> {
    let (vd, nv) = (rows * shape.value_dim(), rows * shape.num_v());
    for (i, (&name, &got)) in HEAD_NAMES.iter().zip(&heads).enumerate() {
        len(name, if i < 3 { vd } else { nv }, got)?;
    }
    Ok(())
}

/// Checks a prep call of `rows` rows: `conv_out` `rows * C`, `beta_raw`
/// and `alpha` `rows * num_v`, `dt_bias` and `a_log` `num_v`, the outputs
/// `q, k, v` `rows * V` and `beta, g` `rows * num_v`.
///
/// # Errors
/// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`].
#[allow(clippy::too_many_arguments)] // allow: one length per buffer of the ABI
pub fn check_gdn_prep(
    shape: &GdnShape,
    rows: usize,
    conv_out: usize,
    beta_raw: usize,
    alpha: usize,
    dt_bias: usize,
    a_log: usize,
    heads: HeadLens,
) -> Result<()> {
    check_gdn_limits(shape)?;
    let nv = shape.num_v();
    len("conv_out", rows * shape.conv_dim(), conv_out)?;
    len("beta_raw", rows * nv, beta_raw)?;
    len("alpha", rows * nv, alpha)?;
    len("dt_bias", nv, dt_bias)?;
    len("a_log", nv, a_log)?;
    check_heads(shape, rows, heads)
}

/// Checks a scan call of `rows` rows: the operands (as prep writes them),
/// `o` `rows * V`, `snap` (packed only) `(rows - 1) * N`.
///
/// # Errors
/// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`].
pub fn check_gdn_scan(
    shape: &GdnShape,
    rows: usize,
    heads: HeadLens,
    o: usize,
    snap: Option<usize>,
) -> Result<()> {
    check_gdn_limits(shape)?;
    check_heads(shape, rows, heads)?;
    len("o", rows * shape.value_dim(), o)?;
    if let Some(s) = snap {
        len("snap", (rows - 1) * shape.state_len(), s)?;
    }
    Ok(())
}

/// Checks a layer's weights (element counts) against `shape`: the kernels'
/// limits, then `conv_w` `C * d_conv`, `dt_bias` and `a_log` `num_v`.
///
/// # Errors
/// [`DeviceError::IndexRange`]; [`DeviceError::Gdn`] (`GdnError::Len`).
fn check_weight_lens(shape: &GdnShape, conv_w: usize, dt_bias: usize, a_log: usize) -> Result<()> {
    check_gdn_limits(shape)?;
    len("conv_w", shape.conv_w_len(), conv_w)?;
    len("dt_bias", shape.num_v(), dt_bias)?;
    len("a_log", shape.num_v(), a_log)
}

/// Checks the buffers of a [`GdnState`]: `ring` `C * (d_conv - 1)`,
/// `canonical` and `alt` `num_v * 128 * 128`.
///
/// # Errors
/// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`].
pub fn check_gdn_state(shape: &GdnShape, ring: usize, canonical: usize, alt: usize) -> Result<()> {
    check_gdn_batch_state(shape, 1, ring, canonical, alt)
}

/// [`check_gdn_state`] for the pools of `batch` sequences: `ring`
/// `batch * C * (d_conv - 1)`, `canonical` and `alt` `batch * N` (the
/// layout of `oracle::gdn::batch`), `batch` at least 1 and within the
/// fused kernel's grid (`grid.y <= 65535`).
///
/// # Errors
/// [`DeviceError::Gdn`] (`GdnError::Zero` for `batch = 0`,
/// `GdnError::Len`); [`DeviceError::IndexRange`].
pub fn check_gdn_batch_state(
    shape: &GdnShape,
    batch: usize,
    ring: usize,
    canonical: usize,
    alt: usize,
) -> Result<()> {
    check_gdn_batch(shape, batch)?;
    len("ring", batch * shape.ring_len(), ring)?;
    len("canonical", batch * shape.state_len(), canonical)?;
    len("alt", batch * shape.state_len(), alt)
}

/// The most sequences of one batched call (the fused kernel's `grid.y`).
pub const GDN_MAX_BATCH: usize = 65_535;

/// Checks a batch of `batch` sequences of `shape`: the kernels' limits,
/// `1 <= batch <= 65535`, and every pool (`batch` times the largest
/// per-sequence buffer, snapshots included) within `usize` as bytes.
///
/// # Errors
/// [`DeviceError::Gdn`] (`GdnError::Zero`, `GdnError::Overflow`);
/// [`DeviceError::IndexRange`].
pub fn check_gdn_batch(shape: &GdnShape, batch: usize) -> Result<()> {
    check_gdn_limits(shape)?;
    if batch == 0 {
        return Err(DeviceError::Gdn(GdnError::Zero { dim: "batch" }));
    }
    if batch > GDN_MAX_BATCH {
        return Err(DeviceError::IndexRange {
            what: "batch",
            value: batch as u64,
            limit: GDN_MAX_BATCH as u64,
        });
    }
    oracle::gdn::batch::BatchLayout::new(*shape, batch).map_err(DeviceError::Gdn)?;
    Ok(())
}

/// The recurrent buffers of one sequence on the device: the conv ring, the
/// canonical and alternate state buffers, and the pointer table
/// `[ring, canonical, alt, ring, alt, canonical]` the kernels read them
/// through (see the ABI).
#[derive(Debug)]
pub struct GdnState {
    ring: Buffer<f32>,
    canonical: Buffer<f32>,
    alt: Buffer<f32>,
    table: Buffer<u64>,
    batch: usize,
    ring_len: usize,
    state_len: usize,
}

impl GdnState {
    /// The sequences whose buffers this state holds (1 unless made by
    /// [`GdnEngine::new_state_batched`]); each buffer is `batch` equal
    /// blocks, sequence `b` the `b`-th.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The conv ring `[C][d_conv - 1]`.
    pub fn ring(&self) -> &Buffer<f32> {
        &self.ring
    }
    /// The canonical state buffer (the state before a packed call).
    pub fn canonical(&self) -> &Buffer<f32> {
        &self.canonical
    }
    /// The alternate state buffer.
    pub fn alt(&self) -> &Buffer<f32> {
        &self.alt
    }
    /// The buffer of `slot`.
    pub fn slot(&self, slot: StateSlot) -> &Buffer<f32> {
        match slot {
            StateSlot::Canonical => &self.canonical,
            StateSlot::Alt => &self.alt,
        }
    }
    /// The buffer holding the state after row `r` of rows alternating from
    /// the canonical buffer (rule `PARITY`).
    pub fn after_row(&self, r: usize) -> &Buffer<f32> {
        self.slot(state_after_row(r))
    }

    fn fits(&self, shape: &GdnShape) -> Result<()> {
        check_gdn_batch_state(
            shape,
            self.batch,
            self.ring_len,
            self.state_len,
            self.state_len,
        )
    }

    /// The ring and both state buffers with their names, for a guard check
    /// after launches that write them ([`GdnEngine::check_guards`]): the
    /// kernels write them through the pointer table, and (made by
    /// [`GdnEngine::make_state_buffer`], with guards and input bands on)
    /// their bands are [`INTERMEDIATE_BAND`](crate::cuda::INTERMEDIATE_BAND)
    /// words, so a write past one changes them unless it stores that word.
    pub fn named(&self) -> [(&Buffer<f32>, &'static str); 3] {
        [
            (&self.ring, "conv ring"),
            (&self.canonical, "canonical state"),
            (&self.alt, "alternate state"),
        ]
    }

    /// [`GdnState::named`] as entries of a guard check list.
    fn guarded(&self) -> [(&dyn Guarded, &'static str); 3] {
        self.named().map(|(b, n)| (b as &dyn Guarded, n))
    }

    /// [`GdnState::fits`] for the per-row and packed-twin kernels, which
    /// handle one sequence.
    fn fits_one(&self, shape: &GdnShape) -> Result<()> {
        len("batch", 1, self.batch)?;
        self.fits(shape)
    }

    /// Checks replacements for the state's buffers (element counts): `ring`
    /// against its ring length, `canonical` and `alt` (when given) against
    /// its state length, in that order.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] (`GdnError::Len`).
    fn check_lens(&self, ring: usize, canonical: usize, alt: Option<usize>) -> Result<()> {
        len("ring", self.ring_len, ring)?;
        len("canonical", self.state_len, canonical)?;
        if let Some(a) = alt {
            len("alt", self.state_len, a)?;
        }
        Ok(())
    }
}

/// Prep's outputs on the device, `rows` rows: `q, k, v` `[rows][V]`,
/// `beta, g` `[rows][num_v]`.
#[derive(Debug)]
pub struct GdnHeads {
    /// L2-normalized, repeated queries.
    pub q: Buffer<f32>,
    /// L2-normalized, repeated keys.
    pub k: Buffer<f32>,
    /// Values.
    pub v: Buffer<f32>,
    /// `sigmoid(beta_raw)`.
    pub beta: Buffer<f32>,
    /// `-(exp(a_log) * softplus(alpha + dt_bias))`.
    pub g: Buffer<f32>,
}

impl GdnHeads {
    /// The five buffers with their names, for the guard check.
    fn named(&self) -> [(&dyn Guarded, &'static str); 5] {
        [
            (&self.q, "q"),
            (&self.k, "k"),
            (&self.v, "v"),
            (&self.beta, "beta"),
            (&self.g, "g"),
        ]
    }

    /// The five lengths, `[q, k, v, beta, g]`.
    pub fn lens(&self) -> HeadLens {
        [
            self.q.len(),
            self.k.len(),
            self.v.len(),
            self.beta.len(),
            self.g.len(),
        ]
    }
}

/// The layer's device weights: conv weights `[C][d_conv]`, `dt_bias` and
/// `a_log` `[num_v]`, the L2 epsilon and the output scale.
#[derive(Debug)]
pub struct GdnWeights {
    /// `[C][d_conv]`.
    pub conv_w: Buffer<f32>,
    /// `[num_v]`.
    pub dt_bias: Buffer<f32>,
    /// `[num_v]`.
    pub a_log: Buffer<f32>,
    /// Inside the square root of the L2 norm.
    pub eps: f32,
    /// Multiplies `S^T q`.
    pub scale: f32,
}

/// One CUDA device with `cu/gdn.cu` compiled and loaded.
pub struct GdnEngine {
    shim: Shim,
    f: [CudaFunction; 7],
    /// [`GDN_FUSED_C2`], where the source exports it and the device has
    /// clusters; else why not.
    c2: std::result::Result<CudaFunction, String>,
    /// [`GDN_FUSED_PERSISTENT`] and how many of its CTAs stay resident on
    /// the device at once, where the source exports it and the device fits
    /// its CTA; else why not.
    persistent: std::result::Result<(CudaFunction, u32), String>,
    /// [`GDN_FUSED_SPLIT`], where the source exports it for a device with
    /// clusters and it takes [`GDN_SPLIT_THREADS`] threads.
    split: Option<CudaFunction>,
    /// The largest CTA each clustered fused entry runs (`[Main, C2]`).
    max_threads: [u32; 2],
    /// Multiprocessors.
    sm_count: u32,
}

shim_methods!(GdnEngine);

impl Engine {
    /// A [`GdnEngine`] on this engine's context and stream, with its guard
    /// setting, compiling the source [`KernelSource::gdn_from_env`] picks.
    ///
    /// # Errors
    /// As [`GdnEngine::from_engine`].
    pub fn gdn(&self) -> Result<GdnEngine> {
        GdnEngine::from_engine(self, KernelSource::gdn_from_env()?)
    }
}

/// A launch of `grid` CTAs of `threads` threads, no dynamic shared memory.
fn cfg(grid: (u32, u32), threads: u32) -> LaunchConfig {
    launch_config((grid.0, grid.1, 1), threads, 0)
}

/// How many CTAs of the persistent entry `func` stay resident on a device
/// of `sm_count` multiprocessors (its dynamic shared memory allowed first),
/// or why it cannot run there (a CTA of [`GDN_PERSISTENT_THREADS`] threads
/// does not fit, the device refuses the shared memory, or the driver
/// refuses a query: the entry is left out, not the engine).
fn persistent_residency(func: &CudaFunction, sm_count: u32) -> std::result::Result<u32, String> {
    use cudarc::driver::sys::CUfunction_attribute_enum as A;
    let most = func
        .get_attribute(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        .map_err(|e| format!("cuFuncGetAttribute MAX_THREADS_PER_BLOCK: {e}"))?;
    if most < GDN_PERSISTENT_THREADS as i32 {
        return Err(format!(
            "its CTAs run at most {most} threads, the shim launches {GDN_PERSISTENT_THREADS}"
        ));
    }
    func.set_attribute(
        A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        GDN_PERSISTENT_SMEM as i32,
    )
    .map_err(|e| {
        format!("the device refuses {GDN_PERSISTENT_SMEM} bytes of dynamic shared memory: {e}")
    })?;
    let per_sm = func
        .occupancy_max_active_blocks_per_multiprocessor(
            GDN_PERSISTENT_THREADS,
            GDN_PERSISTENT_SMEM as usize,
            None,
        )
        .map_err(|e| format!("cuOccupancyMaxActiveBlocksPerMultiprocessor: {e}"))?;
    if per_sm == 0 {
        return Err(format!(
            "no CTA of {GDN_PERSISTENT_THREADS} threads and {GDN_PERSISTENT_SMEM} bytes of \
             dynamic shared memory fits a multiprocessor"
        ));
    }
    Ok(per_sm * sm_count)
}

impl GdnEngine {
    /// Opens device `ordinal` (its primary context, on a new stream) with
    /// the source [`KernelSource::gdn_from_env`] picks.
    ///
    /// # Errors
    /// [`DeviceError::NoDriver`], [`DeviceError::NoNvrtc`],
    /// [`DeviceError::Driver`], [`DeviceError::Compile`],
    /// [`DeviceError::MissingKernel`], [`DeviceError::KernelSource`].
    pub fn new(ordinal: usize) -> Result<GdnEngine> {
        driver_available()?;
        nvrtc_available()?;
        GdnEngine::with_source(ordinal, KernelSource::gdn_from_env()?)
    }

    /// Opens device `ordinal` with an explicit kernel source.
    ///
    /// # Errors
    /// As [`GdnEngine::new`].
    pub fn with_source(ordinal: usize, source: KernelSource) -> Result<GdnEngine> {
        GdnEngine::load(Shim::open(ordinal, source, sm_target)?)
    }

    /// Shares `engine`'s context, stream and guard setting.
    ///
    /// # Errors
    /// [`DeviceError::Compile`], [`DeviceError::MissingKernel`],
    /// [`DeviceError::Driver`].
    pub fn from_engine(engine: &Engine, source: KernelSource) -> Result<GdnEngine> {
        GdnEngine::load(engine.shim.share(source, sm_target)?)
    }

    /// Looks up the seven kernels ([`GDN_KERNELS`], in order) in `shim`'s
    /// module.
    fn load(shim: Shim) -> Result<GdnEngine> {
        let load = |k: &str| shim.function(k);
        let f = [
            load(GDN_KERNELS[0])?,
            load(GDN_KERNELS[1])?,
            load(GDN_KERNELS[2])?,
            load(GDN_KERNELS[3])?,
            load(GDN_KERNELS[4])?,
            load(GDN_KERNELS[5])?,
            load(GDN_KERNELS[6])?,
        ];
        // The second entry is optional (a candidate may export the main
        // one only) and needs hardware clusters.
        let c2 = if shim.arch.0 >= 9 {
            shim.function(GDN_FUSED_C2).map_err(|e| e.to_string())
        } else {
            Err(format!(
                "compute capability {}.{} has no thread block clusters",
                shim.arch.0, shim.arch.1
            ))
        };
        let attr = |f: &CudaFunction, a| -> Result<u32> {
            f.get_attribute(a)
                .map(|n| n.max(0) as u32)
                .map_err(|e| DeviceError::driver("cuFuncGetAttribute", e))
        };
        use cudarc::driver::sys::CUfunction_attribute_enum as A;
        let most = |f: &CudaFunction| attr(f, A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        let persistent = shim
            .function(GDN_FUSED_PERSISTENT)
            .map_err(|e| e.to_string());
        let split = if shim.arch.0 >= 9 {
            shim.function(GDN_FUSED_SPLIT).ok()
        } else {
            None
        };
        // A fused entry compiled for another cluster than the shim launches
        // it with would order nothing between the CTAs sharing a q/k ring
        // (a width of 0: no cluster declared, nothing to compare; the
        // persistent entry's items share nothing: no cluster, or one of 1).
        let entries = [
            (GDN_KERNELS[6], Some(&f[6])),
            (GDN_FUSED_C2, c2.as_ref().ok()),
            (GDN_FUSED_PERSISTENT, persistent.as_ref().ok()),
            (GDN_FUSED_SPLIT, split.as_ref()),
        ];
        let widths = [gdn_fused_cluster(shim.arch.0), 2, 1, 8];
        for ((name, func), want) in entries.into_iter().zip(widths) {
            if let Some(func) = func {
                let got = attr(func, A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)?;
                if shim.arch.0 >= 9 && got != 0 && got != want {
                    return Err(DeviceError::ClusterMismatch {
                        name,
                        source_desc: shim.source.describe(),
                        want,
                        got,
                    });
                }
            }
        }
        let max_threads = [most(&f[6])?, c2.as_ref().map_or(Ok(0), most)?];
        // A split entry that cannot take its CTA is not launched.
        let split = match split {
            Some(f) if most(&f)? >= GDN_SPLIT_THREADS => Some(f),
            _ => None,
        };
        let sm_count = shim
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(|e| DeviceError::driver("cuDeviceGetAttribute MULTIPROCESSOR_COUNT", e))?
            .max(1) as u32;
        let persistent =
            persistent.and_then(|func| persistent_residency(&func, sm_count).map(|r| (func, r)));
        Ok(GdnEngine {
            shim,
            f,
            c2,
            persistent,
            split,
            max_threads,
            sm_count,
        })
    }

    /// Uploads the layer's weights (or copies them on the device from
    /// buffers already there: [`Src`]), checking their lengths against
    /// `shape` first: `conv_w [C][d_conv]`, `dt_bias`, `a_log [num_v]`.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] before any copy; [`DeviceError::Driver`].
    pub fn upload_weights<'a>(
        &self,
        shape: &GdnShape,
        conv_w: impl Into<Src<'a>>,
        dt_bias: impl Into<Src<'a>>,
        a_log: impl Into<Src<'a>>,
        eps: f32,
        scale: f32,
    ) -> Result<GdnWeights> {
        let (conv_w, dt_bias, a_log) = (conv_w.into(), dt_bias.into(), a_log.into());
        check_weight_lens(shape, conv_w.len(), dt_bias.len(), a_log.len())?;
        Ok(GdnWeights {
            conv_w: self.make(conv_w)?,
            dt_bias: self.make(dt_bias)?,
            a_log: self.make(a_log)?,
            eps,
            scale,
        })
    }

    /// Uploads a sequence's recurrent buffers (or copies them on the
    /// device: [`Src`]): the ring `[C][P]`, the state `[N]` into the
    /// canonical buffer, `alt [N]` (zeros unless given), and builds their
    /// pointer table.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] before any copy; [`DeviceError::Driver`].
    pub fn new_state<'a>(
        &self,
        shape: &GdnShape,
        ring: impl Into<Src<'a>>,
        canonical: impl Into<Src<'a>>,
        alt: Option<Src<'a>>,
    ) -> Result<GdnState> {
        self.new_state_batched(shape, 1, ring, canonical, alt)
    }

    /// [`GdnEngine::new_state`] for `batch` sequences: `ring
    /// [batch][C][P]`, `canonical` and `alt` (zeros unless given)
    /// `[batch][N]`, sequence `b` the `b`-th block of each (the layout of
    /// `oracle::gdn::batch`). Only the fused step
    /// ([`GdnEngine::run_step`]) takes a state of more than one sequence.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`]; [`DeviceError::IndexRange`];
    /// [`DeviceError::Driver`].
    pub fn new_state_batched<'a>(
        &self,
        shape: &GdnShape,
        batch: usize,
        ring: impl Into<Src<'a>>,
        canonical: impl Into<Src<'a>>,
        alt: Option<Src<'a>>,
    ) -> Result<GdnState> {
        let (ring, canonical) = (ring.into(), canonical.into());
        check_gdn_batch(shape, batch)?;
        let n = batch * shape.state_len();
        let alt_len = alt.map_or(n, |a| a.len());
        check_gdn_batch_state(shape, batch, ring.len(), canonical.len(), alt_len)?;
        // Read and written in place by every step: with guards on, between
        // bands of the intermediates' word, so a store past one changes a
        // band whatever it stores but that word; the alternate buffer
        // zeroed on the device when not given (a memset, no host copy).
        let alt = buffer::make_in_place(
            &self.shim.stream,
            alt,
            alt_len,
            self.shim.guards,
            "gdn alternate state",
        )?;
        let mut state = GdnState {
            ring: self.make_state_buffer(ring)?,
            canonical: self.make_state_buffer(canonical)?,
            alt,
            // Written by `write_table` below; zeroed by a memset, not an
            // upload (one synchronisation fewer).
            table: self.shim.zeros::<u64>(6, "gdn state pointer table")?,
            batch,
            ring_len: batch * shape.ring_len(),
            state_len: batch * shape.state_len(),
        };
        self.write_table(&mut state)?;
        Ok(state)
    }

    /// Allocates prep outputs for `rows` rows: intermediates, read by the
    /// scan (`alloc_intermediate`: with guards on, a read past one meets
    /// NaN).
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn alloc_heads(&self, shape: &GdnShape, rows: usize) -> Result<GdnHeads> {
        let (vd, nv) = (rows * shape.value_dim(), rows * shape.num_v());
        Ok(GdnHeads {
            q: self.alloc_intermediate(vd)?,
            k: self.alloc_intermediate(vd)?,
            v: self.alloc_intermediate(vd)?,
            beta: self.alloc_intermediate(nv)?,
            g: self.alloc_intermediate(nv)?,
        })
    }

    fn conv_grid(shape: &GdnShape) -> (u32, u32) {
        let c = shape.conv_dim() as u64;
        (c.div_ceil(u64::from(GDN_CONV_THREADS)) as u32, 1)
    }

    /// `gdn_conv1d_decode`: row `row` of a per-row sequence (its parity
    /// picks the table half; the ring is the same either way): `x [C]`
    /// into `out [C]`, the ring advancing in `state`.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`], [`DeviceError::IndexRange`] before launch;
    /// [`DeviceError::GuardClobbered`]; [`DeviceError::Driver`].
    pub fn conv_row(
        &self,
        shape: &GdnShape,
        x: &Buffer<f32>,
        w: &GdnWeights,
        state: &mut GdnState,
        row: usize,
        out: &mut Buffer<f32>,
    ) -> Result<()> {
        self.launch_conv_row(shape, x, w, state, row, out)?;
        let [r, ..] = state.guarded();
        self.shim.check_outputs(&[(out, "out"), r])
    }

    /// [`GdnEngine::conv_row`] without the guard check (no
    /// synchronisation): a caller launching many rows checks the bands
    /// once after the last ([`GdnEngine::check_guards`]).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`], [`DeviceError::IndexRange`] before launch;
    /// [`DeviceError::Driver`].
    pub fn launch_conv_row(
        &self,
        shape: &GdnShape,
        x: &Buffer<f32>,
        w: &GdnWeights,
        state: &mut GdnState,
        row: usize,
        out: &mut Buffer<f32>,
    ) -> Result<()> {
        check_gdn_conv(shape, 1, x.len(), w.conv_w.len(), out.len(), None)?;
        state.fits_one(shape)?;
        let off = if row.is_multiple_of(2) { 0 } else { 3 };
        let tv = state.table.view();
        let tab = tv.slice(off..off + 3);
        let (cd, dc) = (shape.conv_dim() as i32, shape.d_conv() as i32);
        let (xv, wv) = (x.view(), w.conv_w.view());
        let mut ov = out.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f[0]);
        b.arg(&xv).arg(&tab).arg(&wv).arg(&mut ov).arg(&cd).arg(&dc);
        // SAFETY: the ABI's argument types and order; every length checked
        // above; the table points at the state's own checked buffers.
        launched(GDN_KERNELS[0], unsafe {
            b.launch(cfg(Self::conv_grid(shape), GDN_CONV_THREADS))
        })?;
        Ok(())
    }

    /// `gdn_conv1d_decode_tloop`: `t = shape.t()` rows `x [t][C]` into
    /// `out [t][C]`, the ring snapshots after rows `0..t-1` into
    /// `snap [t-1][C][P]` (length 0 when `t = 1`: a null pointer is
    /// passed).
    ///
    /// # Errors
    /// As [`GdnEngine::conv_row`].
    pub fn conv_rows(
        &self,
        shape: &GdnShape,
        x: &Buffer<f32>,
        w: &GdnWeights,
        state: &mut GdnState,
        out: &mut Buffer<f32>,
        snap: &mut Buffer<f32>,
    ) -> Result<()> {
        self.launch_conv_rows(shape, x, w, state, out, snap)?;
        let [r, ..] = state.guarded();
        self.shim.check_outputs(&[(out, "out"), (snap, "snap"), r])
    }

    /// [`GdnEngine::conv_rows`] without the guard check (no synchronisation:
    /// it may be captured into a graph).
    fn launch_conv_rows(
        &self,
        shape: &GdnShape,
        x: &Buffer<f32>,
        w: &GdnWeights,
        state: &GdnState,
        out: &mut Buffer<f32>,
        snap: &mut Buffer<f32>,
    ) -> Result<()> {
        let t = shape.t();
        check_gdn_conv(
            shape,
            t,
            x.len(),
            w.conv_w.len(),
            out.len(),
            Some(snap.len()),
        )?;
        state.fits_one(shape)?;
        let tv = state.table.view();
        let tab = tv.slice(0..3);
        let (cd, dc, ti) = (shape.conv_dim() as i32, shape.d_conv() as i32, t as i32);
        let (xv, wv) = (x.view(), w.conv_w.view());
        let null = 0u64;
        let mut ov = out.view_mut()?;
        let mut sv = snap.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f[3]);
        b.arg(&xv).arg(&tab).arg(&wv).arg(&mut ov);
        if t > 1 {
            b.arg(&mut sv);
        } else {
            b.arg(&null);
        }
        b.arg(&cd).arg(&dc).arg(&ti);
        // SAFETY: as conv_row; snap is null only when t = 1 (never written).
        launched(GDN_KERNELS[3], unsafe {
            b.launch(cfg(Self::conv_grid(shape), GDN_CONV_THREADS))
        })?;
        Ok(())
    }

    /// Prep over `rows` rows: `gdn_prep_decode` when `rows = 1`, else
    /// `gdn_prep_decode_rows`; no guard check (no synchronisation: it may be
    /// captured into a graph).
    #[allow(clippy::too_many_arguments)] // allow: the ABI's buffers, each one argument
    fn launch_prep(
        &self,
        shape: &GdnShape,
        rows: usize,
        w: &GdnWeights,
        conv_out: &Buffer<f32>,
        beta_raw: &Buffer<f32>,
        alpha: &Buffer<f32>,
        heads: &mut GdnHeads,
    ) -> Result<()> {
        check_gdn_prep(
            shape,
            rows,
            conv_out.len(),
            beta_raw.len(),
            alpha.len(),
            w.dt_bias.len(),
            w.a_log.len(),
            heads.lens(),
        )?;
        let i = if rows == 1 { 1 } else { 4 };
        let (nk, nv, ti) = (shape.num_k() as i32, shape.num_v() as i32, rows as i32);
        let (cv, bv, av) = (conv_out.view(), beta_raw.view(), alpha.view());
        let (dv, lv) = (w.dt_bias.view(), w.a_log.view());
        let mut qv = heads.q.view_mut()?;
        let mut kv = heads.k.view_mut()?;
        let mut vv = heads.v.view_mut()?;
        let mut betav = heads.beta.view_mut()?;
        let mut gv = heads.g.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f[i]);
        b.arg(&cv).arg(&bv).arg(&av).arg(&dv).arg(&lv);
        b.arg(&mut qv)
            .arg(&mut kv)
            .arg(&mut vv)
            .arg(&mut betav)
            .arg(&mut gv);
        b.arg(&nk).arg(&nv).arg(&w.eps).arg(&ti);
        let grid = (shape.num_v() as u32, rows as u32);
        // SAFETY: the ABI's argument types and order; lengths checked above;
        // grid (num_v, rows) within limits (check_gdn_limits).
        launched(GDN_KERNELS[i], unsafe {
            b.launch(cfg(grid, GDN_HEAD_THREADS))
        })?;
        Ok(())
    }

    /// `gdn_prep_decode`: one row, `conv_out [C]`, `beta_raw`, `alpha`
    /// `[num_v]` into `heads` (one row).
    ///
    /// # Errors
    /// As [`GdnEngine::conv_row`].
    pub fn prep_row(
        &self,
        shape: &GdnShape,
        w: &GdnWeights,
        conv_out: &Buffer<f32>,
        beta_raw: &Buffer<f32>,
        alpha: &Buffer<f32>,
        heads: &mut GdnHeads,
    ) -> Result<()> {
        self.launch_prep(shape, 1, w, conv_out, beta_raw, alpha, heads)?;
        self.shim.check_outputs(&heads.named())
    }

    /// [`GdnEngine::prep_row`] without the guard check (no
    /// synchronisation; see [`GdnEngine::launch_conv_row`]).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`], [`DeviceError::IndexRange`] before launch;
    /// [`DeviceError::Driver`].
    pub fn launch_prep_row(
        &self,
        shape: &GdnShape,
        w: &GdnWeights,
        conv_out: &Buffer<f32>,
        beta_raw: &Buffer<f32>,
        alpha: &Buffer<f32>,
        heads: &mut GdnHeads,
    ) -> Result<()> {
        self.launch_prep(shape, 1, w, conv_out, beta_raw, alpha, heads)
    }

    /// `gdn_prep_decode_rows`: `t = shape.t()` rows.
    ///
    /// # Errors
    /// As [`GdnEngine::conv_row`].
    pub fn prep_rows(
        &self,
        shape: &GdnShape,
        w: &GdnWeights,
        conv_out: &Buffer<f32>,
        beta_raw: &Buffer<f32>,
        alpha: &Buffer<f32>,
        heads: &mut GdnHeads,
    ) -> Result<()> {
        self.launch_prep(shape, shape.t(), w, conv_out, beta_raw, alpha, heads)?;
        self.shim.check_outputs(&heads.named())
    }

    /// `gdn_scan_s128`: row `row` of a per-row sequence, reading the state
    /// after row `row - 1` (the canonical buffer for row 0) and writing the
    /// state after row `row` into [`GdnState::after_row`]`(row)`; `o [V]`.
    ///
    /// # Errors
    /// As [`GdnEngine::conv_row`].
    pub fn scan_row(
        &self,
        shape: &GdnShape,
        heads: &GdnHeads,
        scale: f32,
        state: &mut GdnState,
        row: usize,
        o: &mut Buffer<f32>,
    ) -> Result<()> {
        self.launch_scan_row(shape, heads, scale, state, row, o)?;
        let [_, c, a] = state.guarded();
        self.shim.check_outputs(&[(o, "o"), c, a])
    }

    /// [`GdnEngine::scan_row`] without the guard check (no
    /// synchronisation; see [`GdnEngine::launch_conv_row`]).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`], [`DeviceError::IndexRange`] before launch;
    /// [`DeviceError::Driver`].
    pub fn launch_scan_row(
        &self,
        shape: &GdnShape,
        heads: &GdnHeads,
        scale: f32,
        state: &mut GdnState,
        row: usize,
        o: &mut Buffer<f32>,
    ) -> Result<()> {
        check_gdn_scan(shape, 1, heads.lens(), o.len(), None)?;
        state.fits_one(shape)?;
        let off = if row.is_multiple_of(2) { 1 } else { 4 };
        let tv = state.table.view();
        let tab = tv.slice(off..off + 2);
        let nv = shape.num_v() as i32;
        let (qv, kv, vv) = (heads.q.view(), heads.k.view(), heads.v.view());
        let (gv, bv) = (heads.g.view(), heads.beta.view());
        let mut ov = o.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f[2]);
        b.arg(&qv).arg(&kv).arg(&vv).arg(&gv).arg(&bv).arg(&tab);
        b.arg(&mut ov).arg(&nv).arg(&scale);
        // SAFETY: the ABI's argument types and order; lengths checked above;
        // the table points at the state's own checked buffers.
        launched(GDN_KERNELS[2], unsafe {
            b.launch(cfg((shape.num_v() as u32, 1), GDN_HEAD_THREADS))
        })?;
        Ok(())
    }

    /// `gdn_scan_s128_tsnap`: `t = shape.t()` rows from the canonical
    /// buffer, `o [t][V]`, the state after rows `0..t-1` into
    /// `snap [t-1][N]` (length 0 when `t = 1`: a null pointer is passed).
    /// Returns the slot of the final state (rule `PARITY`).
    ///
    /// # Errors
    /// As [`GdnEngine::conv_row`].
    pub fn scan_rows(
        &self,
        shape: &GdnShape,
        heads: &GdnHeads,
        scale: f32,
        state: &mut GdnState,
        o: &mut Buffer<f32>,
        snap: &mut Buffer<f32>,
    ) -> Result<StateSlot> {
        let slot = self.launch_scan_rows(shape, heads, scale, state, o, snap)?;
        let [_, c, a] = state.guarded();
        self.shim.check_outputs(&[(o, "o"), (snap, "snap"), c, a])?;
        Ok(slot)
    }

    /// [`GdnEngine::scan_rows`] without the guard check.
    fn launch_scan_rows(
        &self,
        shape: &GdnShape,
        heads: &GdnHeads,
        scale: f32,
        state: &GdnState,
        o: &mut Buffer<f32>,
        snap: &mut Buffer<f32>,
    ) -> Result<StateSlot> {
        let t = shape.t();
        check_gdn_scan(shape, t, heads.lens(), o.len(), Some(snap.len()))?;
        state.fits_one(shape)?;
        let tv = state.table.view();
        let tab = tv.slice(1..3);
        let (nv, ti) = (shape.num_v() as i32, t as i32);
        let (qv, kv, vv) = (heads.q.view(), heads.k.view(), heads.v.view());
        let (gv, bv) = (heads.g.view(), heads.beta.view());
        let null = 0u64;
        let mut ov = o.view_mut()?;
        let mut sv = snap.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f[5]);
        b.arg(&qv).arg(&kv).arg(&vv).arg(&gv).arg(&bv).arg(&tab);
        b.arg(&mut ov);
        if t > 1 {
            b.arg(&mut sv);
        } else {
            b.arg(&null);
        }
        b.arg(&nv).arg(&ti).arg(&scale);
        // SAFETY: as scan_row; snap is null only when t = 1 (never written).
        launched(GDN_KERNELS[5], unsafe {
            b.launch(cfg((shape.num_v() as u32, 1), GDN_HEAD_THREADS))
        })?;
        Ok(state_after_row(t - 1))
    }
}

/// The device buffers of one packed call of `t = shape.t()` rows (seed
/// 003's packed program), owned together so that a captured graph
/// ([`GdnGraph`]) can own them all:
///
/// - the layer's [`GdnWeights`] and the sequence's [`GdnState`];
/// - inputs (written by [`GdnEngine::set_step_inputs`], zero until then):
///   `qkv [t][C]`, `beta_raw [t][num_v]`, `alpha [t][num_v]`;
/// - outputs (guarded when the engine's guards are on): `conv_out [t][C]`,
///   `snap_conv [t-1][C][P]`, prep's [`GdnHeads`] (`t` rows), `o [t][V]`,
///   `snap_state [t-1][N]`; the final ring in the state, the final state in
///   [`GdnStep::final_state`] (rule `PARITY`). `conv_out` and the heads
///   are intermediates, read by the twins' prep and scan: with guards on,
///   in NaN bands (`alloc_intermediate`); with input bands off, exact
///   allocations, unguarded (memcheck's to check).
#[derive(Debug)]
pub struct GdnStep {
    shape: GdnShape,
    batch: usize,
    weights: GdnWeights,
    state: GdnState,
    qkv: Buffer<f32>,
    beta_raw: Buffer<f32>,
    alpha: Buffer<f32>,
    conv_out: Buffer<f32>,
    snap_conv: Buffer<f32>,
    heads: GdnHeads,
    o: Buffer<f32>,
    snap_state: Buffer<f32>,
    /// The fused entry its launches take (`None`: the engine's default).
    entry: Option<GdnFusedEntry>,
}

impl GdnStep {
    /// The shape (`t` rows).
    pub fn shape(&self) -> &GdnShape {
        &self.shape
    }
    /// The sequences of the step (1 unless made by
    /// [`GdnEngine::new_step_batched`]); every input, output and state
    /// buffer is `batch` equal blocks, sequence `b` the `b`-th.
    pub fn batch(&self) -> usize {
        self.batch
    }
    /// The layer's weights.
    pub fn weights(&self) -> &GdnWeights {
        &self.weights
    }
    /// The recurrent buffers (read them after a launch; rewrite them with
    /// [`GdnEngine::write_state`], [`GdnEngine::rebind_state`],
    /// [`GdnEngine::swap_state_slots`]).
    pub fn state(&self) -> &GdnState {
        &self.state
    }
    /// `[t][C]` conv outputs.
    pub fn conv_out(&self) -> &Buffer<f32> {
        &self.conv_out
    }
    /// `[t-1][C][P]` conv-ring snapshots (length 0 when `t = 1`).
    pub fn snap_conv(&self) -> &Buffer<f32> {
        &self.snap_conv
    }
    /// Prep's outputs, `t` rows: written by [`GdnEngine::run_step_twins`]
    /// only (the fused step keeps them on chip).
    pub fn heads(&self) -> &GdnHeads {
        &self.heads
    }
    /// `[t][V]` scan outputs.
    pub fn o(&self) -> &Buffer<f32> {
        &self.o
    }
    /// `[t-1][N]` state snapshots (length 0 when `t = 1`).
    pub fn snap_state(&self) -> &Buffer<f32> {
        &self.snap_state
    }
    /// The buffer the final state lands in: the state's
    /// [`GdnState::after_row`]`(t - 1)` (rule `PARITY`).
    pub fn final_state(&self) -> &Buffer<f32> {
        self.state.after_row(self.shape.t() - 1)
    }

    fn outputs(&self) -> Vec<(&dyn Guarded, &'static str)> {
        let mut v: Vec<(&dyn Guarded, &'static str)> = vec![
            (&self.conv_out, "conv_out"),
            (&self.snap_conv, "snap_conv"),
            (&self.o, "o"),
            (&self.snap_state, "snap_state"),
        ];
        v.extend(self.heads.named());
        v.extend(self.state.guarded());
        v
    }
}

/// A captured CUDA graph of one [`GdnStep`] (the fused launch, or the
/// three packed twins),
/// owning the step: every buffer the graph names lives as long as the
/// graph. The ring and state buffers are reached through the state's
/// pointer table, so [`GdnGraph::rebind`] and [`GdnGraph::swap_slots`]
/// move the next replay onto other buffers without capturing again.
pub struct GdnGraph {
    // Dropped before `step`: the executable graph goes first.
    graph: cudarc::driver::CudaGraph,
    step: GdnStep,
    stream: Arc<CudaStream>,
    guards: bool,
}

impl std::fmt::Debug for GdnGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GdnGraph")
            .field("step", &self.step)
            .field("guards", &self.guards)
            .finish()
    }
}

impl GdnGraph {
    /// Replays the graph: one packed call on the step's current inputs and
    /// state buffers. Returns the slot of the final state (rule `PARITY`).
    /// With guards on, synchronises and checks every output's bands.
    ///
    /// # Errors
    /// [`DeviceError::Driver`]; [`DeviceError::GuardClobbered`].
    pub fn launch(&self) -> Result<StateSlot> {
        drv(
            || "cuGraphLaunch (gdn packed step)".into(),
            self.graph.launch(),
        )?;
        buffer::check_outputs(&self.stream, self.guards, &self.step.outputs())?;
        Ok(state_after_row(self.step.shape.t() - 1))
    }

    /// The captured step (its outputs after a replay).
    pub fn step(&self) -> &GdnStep {
        &self.step
    }

    /// [`GdnEngine::set_step_inputs`] on the captured step.
    ///
    /// # Errors
    /// As [`GdnEngine::set_step_inputs`].
    pub fn set_inputs<'a>(
        &mut self,
        engine: &GdnEngine,
        qkv: impl Into<Src<'a>>,
        beta_raw: impl Into<Src<'a>>,
        alpha: impl Into<Src<'a>>,
    ) -> Result<()> {
        engine.set_step_inputs(&mut self.step, qkv, beta_raw, alpha)
    }

    /// [`GdnEngine::write_state`] on the captured step's state.
    ///
    /// # Errors
    /// As [`GdnEngine::write_state`].
    pub fn write_state<'a>(
        &mut self,
        engine: &GdnEngine,
        ring: impl Into<Src<'a>>,
        canonical: impl Into<Src<'a>>,
        alt: Option<Src<'a>>,
    ) -> Result<()> {
        engine.write_state(&mut self.step.state, ring, canonical, alt)
    }

    /// [`GdnEngine::rebind_state`] on the captured step's state: the next
    /// replay runs on `ring`, `canonical`, `alt`. Returns the buffers
    /// replaced, `[ring, canonical, alt]`.
    ///
    /// # Errors
    /// As [`GdnEngine::rebind_state`].
    pub fn rebind(
        &mut self,
        engine: &GdnEngine,
        ring: Buffer<f32>,
        canonical: Buffer<f32>,
        alt: Buffer<f32>,
    ) -> Result<[Buffer<f32>; 3]> {
        engine.rebind_state(&mut self.step.state, ring, canonical, alt)
    }

    /// [`GdnEngine::swap_state_slots`] on the captured step's state.
    ///
    /// # Errors
    /// As [`GdnEngine::swap_state_slots`].
    pub fn swap_slots(&mut self, engine: &GdnEngine) -> Result<()> {
        engine.swap_state_slots(&mut self.step.state)
    }

    /// Gives the step back (the graph is destroyed first).
    pub fn into_step(self) -> GdnStep {
        let GdnGraph { graph, step, .. } = self;
        drop(graph);
        step
    }
}

impl GdnEngine {
    /// Copies `data` into `buf` (stream ordered).
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if the lengths differ; [`DeviceError::Driver`].
    pub fn upload_into<T: DeviceRepr>(&self, data: &[T], buf: &mut Buffer<T>) -> Result<()> {
        buffer::upload_into(&self.shim.stream, data, buf)
    }

    /// Copies `buf`'s elements into `out` (synchronises): a download into
    /// a buffer the caller reuses (the GDN harness's host pool), so that a
    /// read-back of megabytes faults in no fresh pages.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if the lengths differ; [`DeviceError::Driver`],
    /// including a fault of an earlier launch.
    pub fn download_into<T: DeviceRepr>(&self, buf: &Buffer<T>, out: &mut [T]) -> Result<()> {
        buffer::download_into(&self.shim.stream, buf, out)
    }

    /// Device-to-device copy of `src` into `dst` (the benchmark's peer).
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if the lengths differ; [`DeviceError::Driver`].
    pub fn copy(&self, src: &Buffer<f32>, dst: &mut Buffer<f32>) -> Result<()> {
        buffer::copy_dtod(&self.shim.stream, src, dst)
    }

    /// A new buffer holding `src`'s elements: uploaded from the host
    /// (synchronises) or copied on the device (stream ordered); with guards
    /// on, between [`INPUT_BAND`](super::INPUT_BAND) bands as the engine's
    /// `upload` places an input.
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn make<'a>(&self, src: impl Into<Src<'a>>) -> Result<Buffer<f32>> {
        buffer::make(&self.shim.stream, src.into(), self.shim.guards)
    }

    /// A new buffer for a [`GdnState`]'s ring or state, read and written in
    /// place step after step, holding `src`'s elements (uploaded, or copied
    /// on the device): with guards and input bands on, between bands of
    /// [`INTERMEDIATE_BAND`](crate::cuda::INTERMEDIATE_BAND), as
    /// [`GdnEngine::new_state`] makes its three; plain otherwise. For
    /// [`GdnEngine::rebind_state`] and [`GdnGraph::rebind`].
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn make_state_buffer<'a>(&self, src: impl Into<Src<'a>>) -> Result<Buffer<f32>> {
        let src = src.into();
        let len = src.len();
        buffer::make_in_place(
            &self.shim.stream,
            Some(src),
            len,
            self.shim.guards,
            "gdn state buffer",
        )
    }

    /// A new (unguarded) buffer of `len` elements, each `value` bit for
    /// bit (a NaN's payload kept): a device memset, no host copy.
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn filled(&self, len: usize, value: f32) -> Result<Buffer<f32>> {
        buffer::filled(&self.shim.stream, len, value)
    }

    /// Copies `src`'s elements into `buf`: uploaded from the host
    /// (synchronises) or copied on the device (stream ordered).
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if the lengths differ; [`DeviceError::Driver`].
    fn fill(&self, src: Src<'_>, buf: &mut Buffer<f32>) -> Result<()> {
        buffer::fill(&self.shim.stream, src, buf)
    }

    /// Device-to-device copy of all of `src` into `dst[at..at + src.len()]`
    /// (stream ordered, no synchronisation): the runner gathers per-row
    /// outputs and snapshots on the device and reads them back once.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if `src` does not fit at `at`;
    /// [`DeviceError::Driver`].
    pub fn copy_at(&self, src: &Buffer<f32>, dst: &mut Buffer<f32>, at: usize) -> Result<()> {
        let end = at.checked_add(src.len()).filter(|&e| e <= dst.len());
        let Some(end) = end else {
            return Err(DeviceError::ArgLen {
                arg: "copy destination",
                want: at.saturating_add(src.len()),
                got: dst.len(),
            });
        };
        if src.is_empty() {
            return Ok(());
        }
        super::deadline::alive()?;
        let mut dv = dst.view_mut()?;
        let mut part = dv.slice_mut(at..end);
        drv(
            || format!("cuMemcpyDtoD ({} elements at {at})", src.len()),
            self.shim.stream.memcpy_dtod(&src.view(), &mut part),
        )
    }

    /// Device-to-device copy of `src[at..at + dst.len()]` into all of
    /// `dst` (stream ordered, no synchronisation): the runner uploads a
    /// case's rows once and hands each row to the per-row kernels from
    /// there.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] if `src` holds no `dst.len()` elements at
    /// `at`; [`DeviceError::Driver`].
    pub fn copy_from_at(&self, src: &Buffer<f32>, at: usize, dst: &mut Buffer<f32>) -> Result<()> {
        let end = at.checked_add(dst.len()).filter(|&e| e <= src.len());
        let Some(end) = end else {
            return Err(DeviceError::ArgLen {
                arg: "copy source",
                want: at.saturating_add(dst.len()),
                got: src.len(),
            });
        };
        if dst.is_empty() {
            return Ok(());
        }
        super::deadline::alive()?;
        let n = dst.len();
        let sv = src.view();
        let part = sv.slice(at..end);
        drv(
            || format!("cuMemcpyDtoD ({n} elements from {at})"),
            self.shim.stream.memcpy_dtod(&part, &mut dst.view_mut()?),
        )
    }

    /// After launches that wrote `outputs` (each with its argument name),
    /// such as the `launch_*_row` calls of many rows: with guards on,
    /// synchronises once and checks every output's guard bands, in order
    /// (one read-back for all); with guards off, nothing. A band written by
    /// any of the launches stays written, so one check after the last
    /// catches it; the error names the output, not the launch.
    ///
    /// # Errors
    /// [`DeviceError::Driver`] (a fault of the launches shows here);
    /// [`DeviceError::GuardClobbered`] naming the first output whose band
    /// changed.
    pub fn check_guards(&self, outputs: &[(&Buffer<f32>, &'static str)]) -> Result<()> {
        let list: Vec<(&dyn Guarded, &'static str)> = outputs
            .iter()
            .map(|&(b, name)| (b as &dyn Guarded, name))
            .collect();
        self.shim.check_outputs(&list)
    }

    /// Overwrites a state's buffers in place (the table is unchanged):
    /// `ring [C][P]`, `canonical [N]`, and `alt [N]` when given, from the
    /// host or from device buffers ([`Src`]).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] (`GdnError::Len`) before any copy;
    /// [`DeviceError::Driver`].
    pub fn write_state<'a>(
        &self,
        state: &mut GdnState,
        ring: impl Into<Src<'a>>,
        canonical: impl Into<Src<'a>>,
        alt: Option<Src<'a>>,
    ) -> Result<()> {
        let (ring, canonical) = (ring.into(), canonical.into());
        state.check_lens(ring.len(), canonical.len(), alt.map(|a| a.len()))?;
        self.fill(ring, &mut state.ring)?;
        self.fill(canonical, &mut state.canonical)?;
        if let Some(a) = alt {
            self.fill(a, &mut state.alt)?;
        }
        Ok(())
    }

    /// Rewrites `state`'s pointer table for its current buffers (stream
    /// ordered: launches queued before see the old table).
    fn write_table(&self, state: &mut GdnState) -> Result<()> {
        let ptr = |b: &Buffer<f32>| {
            let v = b.view();
            let (p, _sync) = v.device_ptr(&self.shim.stream);
            p
        };
        let (pr, pc, pa) = (ptr(&state.ring), ptr(&state.canonical), ptr(&state.alt));
        self.upload_into(&[pr, pc, pa, pr, pa, pc], &mut state.table)
    }

    /// Moves `state` onto other buffers: the table (at the same device
    /// address, so captured graphs follow) is rewritten to point at `ring`,
    /// `canonical`, `alt`. Returns the replaced buffers
    /// `[ring, canonical, alt]`; they are no longer referenced by the table.
    /// Seed 003: "replace every cache allocation" before a graph replay.
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] (`GdnError::Len`: `ring` must hold `C * P`,
    /// `canonical` and `alt` `N` elements) before anything changes;
    /// [`DeviceError::Driver`] when the table's upload fails: the state
    /// keeps its old buffers (the ones the table still points at) and the
    /// new ones are dropped.
    pub fn rebind_state(
        &self,
        state: &mut GdnState,
        ring: Buffer<f32>,
        canonical: Buffer<f32>,
        alt: Buffer<f32>,
    ) -> Result<[Buffer<f32>; 3]> {
        state.check_lens(ring.len(), canonical.len(), Some(alt.len()))?;
        let old = [
            std::mem::replace(&mut state.ring, ring),
            std::mem::replace(&mut state.canonical, canonical),
            std::mem::replace(&mut state.alt, alt),
        ];
        if let Err(e) = self.write_table(state) {
            // The table was not rewritten: it still points at the old
            // buffers, so the state keeps them (dropping them would leave
            // the table pointing at freed memory).
            let [r, c, a] = old;
            state.ring = r;
            state.canonical = c;
            state.alt = a;
            return Err(e);
        }
        Ok(old)
    }

    /// Exchanges the canonical and alternate buffers of `state` and
    /// rewrites its table: after a packed call of odd `t` the newest state
    /// is in `alt` (rule `PARITY`), and this makes it the canonical state
    /// of the next call, as an odd verify round leaves the buffers.
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn swap_state_slots(&self, state: &mut GdnState) -> Result<()> {
        std::mem::swap(&mut state.canonical, &mut state.alt);
        self.write_table(state)
    }

    /// Allocates a packed step of `shape.t()` rows around `weights` and
    /// `state` (inputs zeroed, outputs guarded when guards are on).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] if `weights` or `state` do not fit `shape`;
    /// [`DeviceError::IndexRange`]; [`DeviceError::Driver`].
    pub fn new_step(
        &self,
        shape: &GdnShape,
        weights: GdnWeights,
        state: GdnState,
    ) -> Result<GdnStep> {
        self.new_step_batched(shape, 1, weights, state)
    }

    /// [`GdnEngine::new_step`] for `batch` independent sequences sharing
    /// the layer's weights: `state` must hold `batch` sequences
    /// ([`GdnEngine::new_state_batched`]); inputs `qkv [batch][t][C]`,
    /// `beta_raw`, `alpha [batch][t][num_v]`; outputs `conv_out
    /// [batch][t][C]`, `o [batch][t][V]`, `snap_conv [batch][t-1][C][P]`,
    /// `snap_state [batch][t-1][N]` (the layout of `oracle::gdn::batch`).
    /// Prep's [`GdnHeads`] are allocated for one sequence (the packed twins
    /// run on a step of one sequence only).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] if `weights` or `state` do not fit `shape` and
    /// `batch`; [`DeviceError::IndexRange`]; [`DeviceError::Driver`].
    pub fn new_step_batched(
        &self,
        shape: &GdnShape,
        batch: usize,
        weights: GdnWeights,
        state: GdnState,
    ) -> Result<GdnStep> {
        check_weight_lens(
            shape,
            weights.conv_w.len(),
            weights.dt_bias.len(),
            weights.a_log.len(),
        )?;
        check_gdn_batch(shape, batch)?;
        len("state batch", batch, state.batch)?;
        state.fits(shape)?;
        let (t, c, nv) = (shape.t(), shape.conv_dim(), shape.num_v());
        // Zeroed on the device (a memset, no host copy); inputs, so in
        // NaN bands under a gate.
        let zeros = |n: usize| self.alloc_input::<f32>(n);
        Ok(GdnStep {
            shape: *shape,
            batch,
            qkv: zeros(batch * t * c)?,
            beta_raw: zeros(batch * t * nv)?,
            alpha: zeros(batch * t * nv)?,
            // Read by the twins' prep: an intermediate.
            conv_out: self.alloc_intermediate(batch * t * c)?,
            snap_conv: self.alloc_output(batch * shape.snapshots() * shape.ring_len())?,
            heads: self.alloc_heads(shape, t)?,
            o: self.alloc_output(batch * t * shape.value_dim())?,
            snap_state: self.alloc_output(batch * shape.snapshots() * shape.state_len())?,
            weights,
            state,
            entry: None,
        })
    }

    /// Copies `t` rows of inputs (of each of the step's `batch` sequences)
    /// into `step`: `qkv [batch][t][C]`, `beta_raw [batch][t][num_v]`,
    /// `alpha [batch][t][num_v]`, from the host or from device buffers
    /// ([`Src`]).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] (`GdnError::Len`, the oracle's argument names)
    /// before any copy; [`DeviceError::Driver`].
    pub fn set_step_inputs<'a>(
        &self,
        step: &mut GdnStep,
        qkv: impl Into<Src<'a>>,
        beta_raw: impl Into<Src<'a>>,
        alpha: impl Into<Src<'a>>,
    ) -> Result<()> {
        let (qkv, beta_raw, alpha) = (qkv.into(), beta_raw.into(), alpha.into());
        let (s, bt) = (step.shape, step.batch * step.shape.t());
        len("qkv", bt * s.conv_dim(), qkv.len())?;
        len("beta_raw", bt * s.num_v(), beta_raw.len())?;
        len("alpha", bt * s.num_v(), alpha.len())?;
        self.fill(qkv, &mut step.qkv)?;
        self.fill(beta_raw, &mut step.beta_raw)?;
        self.fill(alpha, &mut step.alpha)
    }

    /// The launches of a step, no synchronisation: the fused kernel, or
    /// the three packed twins (one sequence only).
    fn launch_step(&self, step: &mut GdnStep, fused: bool) -> Result<StateSlot> {
        if fused {
            self.launch_fused(step)
        } else {
            len("batch", 1, step.batch)?;
            self.launch_twins(step)
        }
    }

    /// The fused entry a step of `batch` sequences of `shape` takes unless
    /// it names one ([`GdnEngine::set_step_entry`]): for two sequences or
    /// more, [`GdnFusedEntry::Persistent`] (no cap) when there are more
    /// (q/k head, sequence) items than multiprocessors (the clusters of 2
    /// would need more than one wave: two CTAs per multiprocessor) and the
    /// engine can launch it (the source exports it, the device fits its
    /// CTA), else [`GdnFusedEntry::C2`] where the source exports it and the
    /// device has clusters; else [`GdnFusedEntry::Main`].
    pub fn fused_entry(&self, shape: &GdnShape, batch: usize) -> GdnFusedEntry {
        let items = shape.num_k().saturating_mul(batch);
        if batch > 1 && self.persistent.is_ok() && items > self.sm_count as usize {
            GdnFusedEntry::Persistent { ctas: None }
        } else if batch > 1 && self.c2.is_ok() {
            GdnFusedEntry::C2
        } else {
            GdnFusedEntry::Main
        }
    }

    /// The fused entries this engine can launch: [`GdnFusedEntry::Main`],
    /// then [`GdnFusedEntry::C2`] where the source exports it and the
    /// device has clusters, then [`GdnFusedEntry::Persistent`] uncapped and
    /// capped at [`GDN_PERSISTENT_FEW_CTAS`] where the source exports it
    /// and the device fits its CTA.
    pub fn fused_entries(&self) -> Vec<GdnFusedEntry> {
        let mut v = vec![GdnFusedEntry::Main];
        if self.c2.is_ok() {
            v.push(GdnFusedEntry::C2);
        }
        if self.persistent.is_ok() {
            v.push(GdnFusedEntry::Persistent { ctas: None });
            v.push(GdnFusedEntry::Persistent {
                ctas: Some(GDN_PERSISTENT_FEW_CTAS),
            });
        }
        v
    }

    /// Makes `step`'s fused launches (eager and captured) take `entry`;
    /// `None` restores the default ([`GdnEngine::fused_entry`]).
    ///
    /// # Errors
    /// [`DeviceError::MissingKernel`] for [`GdnFusedEntry::C2`] when the
    /// source does not export [`GDN_FUSED_C2`] or the device has no
    /// clusters (below sm_90), and for [`GdnFusedEntry::Persistent`] when
    /// the source does not export [`GDN_FUSED_PERSISTENT`] or the device
    /// does not fit its CTA; [`DeviceError::Gdn`] (`GdnError::Zero`) for a
    /// cap of 0 CTAs; `step` is unchanged.
    pub fn set_step_entry(&self, step: &mut GdnStep, entry: Option<GdnFusedEntry>) -> Result<()> {
        match entry {
            Some(GdnFusedEntry::C2) => {
                self.c2_function()?;
            }
            Some(GdnFusedEntry::Persistent { ctas }) => {
                self.persistent_function()?;
                if ctas == Some(0) {
                    return Err(DeviceError::Gdn(GdnError::Zero {
                        dim: "persistent CTAs",
                    }));
                }
            }
            _ => {}
        }
        step.entry = entry;
        Ok(())
    }

    /// [`GDN_FUSED_PERSISTENT`] and its resident CTAs, or why this engine
    /// cannot launch it.
    fn persistent_function(&self) -> Result<(&CudaFunction, u32)> {
        self.persistent
            .as_ref()
            .map(|(f, r)| (f, *r))
            .map_err(|why| DeviceError::MissingKernel {
                name: GDN_FUSED_PERSISTENT.to_string(),
                source_desc: self.shim.source.describe(),
                detail: why.clone(),
            })
    }

    /// [`GDN_FUSED_C2`], or why this engine cannot launch it.
    fn c2_function(&self) -> Result<&CudaFunction> {
        self.c2.as_ref().map_err(|why| DeviceError::MissingKernel {
            name: GDN_FUSED_C2.to_string(),
            source_desc: self.shim.source.describe(),
            detail: why.clone(),
        })
    }

    /// Whether `entry` runs [`GDN_FUSED_SPLIT`] for `shape` and `batch` on
    /// this engine ([`gdn_split_applies`] with its cluster size and whether
    /// the source exports the entry).
    pub fn split_runs(&self, shape: &GdnShape, batch: usize, entry: GdnFusedEntry) -> bool {
        self.split.is_some() && gdn_split_applies(shape, batch, entry, self.entry_cluster(entry))
    }

    /// The cluster size of `entry` on this device.
    fn entry_cluster(&self, entry: GdnFusedEntry) -> u32 {
        match entry {
            GdnFusedEntry::Main => gdn_fused_cluster(self.arch().0),
            GdnFusedEntry::C2 => 2,
            GdnFusedEntry::Persistent { .. } => 1,
        }
    }

    /// The grid, CTA size and dynamic shared memory (bytes) of the fused
    /// `entry` for `shape` and `batch` on this device:
    /// [`gdn_fused_launch`] with the entry's cluster size (no dynamic
    /// shared memory), or [`gdn_persistent_launch`] with the device's
    /// resident CTAs (taken as 0 when this engine cannot launch the entry:
    /// then a grid of 1, which [`GdnEngine::set_step_entry`] and the launch
    /// refuse).
    pub fn fused_launch(
        &self,
        shape: &GdnShape,
        batch: usize,
        entry: GdnFusedEntry,
    ) -> ((u32, u32), u32, u32) {
        if let GdnFusedEntry::Persistent { ctas } = entry {
            let resident = self.persistent.as_ref().map_or(0, |p| p.1);
            return gdn_persistent_launch(shape, batch, resident, ctas);
        }
        if self.split_runs(shape, batch, entry) {
            let grid = (shape.num_k() as u32 * 8, 1);
            return (grid, GDN_SPLIT_THREADS, 0);
        }
        let most = self.max_threads[usize::from(entry == GdnFusedEntry::C2)];
        let (grid, threads) = gdn_fused_launch(shape, batch, self.entry_cluster(entry), most);
        (grid, threads, 0)
    }

    /// The fused step on `step` through its entry (`gdn_step_fused`,
    /// `gdn_step_fused_c2` or `gdn_step_fused_persistent`), no
    /// synchronisation.
    fn launch_fused(&self, step: &mut GdnStep) -> Result<StateSlot> {
        let (s, batch) = (step.shape, step.batch);
        check_weight_lens(
            &s,
            step.weights.conv_w.len(),
            step.weights.dt_bias.len(),
            step.weights.a_log.len(),
        )?;
        check_gdn_batch(&s, batch)?;
        step.state.fits(&s)?;
        let entry = step.entry.unwrap_or(self.fused_entry(&s, batch));
        let grid_x = s.num_k() as u64 * u64::from(self.entry_cluster(entry));
        if grid_x > I32_LIMIT {
            return Err(DeviceError::IndexRange {
                what: "num_k * cluster",
                value: grid_x,
                limit: I32_LIMIT,
            });
        }
        let GdnStep {
            weights: w,
            state,
            qkv,
            beta_raw,
            alpha,
            conv_out,
            snap_conv,
            o,
            snap_state,
            ..
        } = step;
        let (t, nk, nv, dc) = (
            s.t() as i32,
            s.num_k() as i32,
            s.num_v() as i32,
            s.d_conv() as i32,
        );
        let tv = state.table.view();
        let tab = tv.slice(0..3);
        let (xv, bv, av) = (qkv.view(), beta_raw.view(), alpha.view());
        let (wv, dv, lv) = (w.conv_w.view(), w.dt_bias.view(), w.a_log.view());
        let null = 0u64;
        let mut cv = conv_out.view_mut()?;
        let mut ov = o.view_mut()?;
        let mut scv = snap_conv.view_mut()?;
        let mut ssv = snap_state.view_mut()?;
        // The name, function and grid of one resolved entry (a step set
        // to C2 on another engine sharing the context may meet one that
        // cannot launch it: refused, not run on the main entry's grid).
        let split = self
            .split
            .as_ref()
            .filter(|_| self.split_runs(&s, batch, entry));
        let (name, func) = match entry {
            GdnFusedEntry::C2 => (GDN_FUSED_C2, self.c2_function()?),
            GdnFusedEntry::Main => match split {
                Some(f) => (GDN_FUSED_SPLIT, f),
                None => (GDN_KERNELS[6], &self.f[6]),
            },
            GdnFusedEntry::Persistent { .. } => {
                (GDN_FUSED_PERSISTENT, self.persistent_function()?.0)
            }
        };
        let mut b = self.shim.stream.launch_builder(func);
        b.arg(&xv)
            .arg(&bv)
            .arg(&av)
            .arg(&tab)
            .arg(&wv)
            .arg(&dv)
            .arg(&lv);
        b.arg(&mut cv).arg(&mut ov);
        if s.t() > 1 {
            b.arg(&mut scv).arg(&mut ssv);
        } else {
            b.arg(&null).arg(&null);
        }
        b.arg(&nk)
            .arg(&nv)
            .arg(&dc)
            .arg(&t)
            .arg(&w.eps)
            .arg(&w.scale);
        // The persistent entry's last parameter (checked: below 2^31).
        let nb = batch as i32;
        if matches!(entry, GdnFusedEntry::Persistent { .. }) {
            b.arg(&nb);
        }
        let (grid, threads, smem) = self.fused_launch(&s, batch, entry);
        // SAFETY: the ABI's argument types and order; every length checked
        // (new_step_batched, set_step_inputs, the state's fits); the table
        // points at the state's own checked pools; the snapshots are null
        // only when t = 1 (never written).
        let config = launch_config((grid.0, grid.1, 1), threads, smem);
        launched(name, unsafe { b.launch(config) })?;
        Ok(state_after_row(s.t() - 1))
    }

    /// The three packed twins on `step` (one sequence), no
    /// synchronisation.
    fn launch_twins(&self, step: &mut GdnStep) -> Result<StateSlot> {
        let s = step.shape;
        let GdnStep {
            weights: w,
            state,
            qkv,
            beta_raw,
            alpha,
            conv_out,
            snap_conv,
            heads,
            o,
            snap_state,
            ..
        } = step;
        self.launch_conv_rows(&s, qkv, w, state, conv_out, snap_conv)?;
        self.launch_prep(&s, s.t(), w, conv_out, beta_raw, alpha, heads)?;
        self.launch_scan_rows(&s, heads, w.scale, state, o, snap_state)
    }

    /// Runs `step` eagerly in one launch of the fused step (its entry, else
    /// [`GdnEngine::fused_entry`]'s: `gdn_step_fused`, `gdn_step_fused_c2` or
    /// `gdn_step_fused_persistent`; conv, prep
    /// and scan of every row of every sequence) on the step's inputs and
    /// state. Returns the slot of the final state (rule `PARITY`, every
    /// sequence alike).
    ///
    /// # Errors
    /// [`DeviceError::Driver`]; [`DeviceError::GuardClobbered`].
    pub fn run_step(&self, step: &mut GdnStep) -> Result<StateSlot> {
        let slot = self.launch_step(step, true)?;
        self.shim.check_outputs(&step.outputs())?;
        Ok(slot)
    }

    /// Runs `step` (one sequence) eagerly as the three packed twins:
    /// `gdn_conv1d_decode_tloop`, then `gdn_prep_decode_rows`
    /// (`gdn_prep_decode` when `t = 1`), then `gdn_scan_s128_tsnap`.
    /// Returns the slot of the final state (rule `PARITY`).
    ///
    /// # Errors
    /// [`DeviceError::Gdn`] (`GdnError::Len` "batch") for a batched step;
    /// [`DeviceError::Driver`]; [`DeviceError::GuardClobbered`].
    pub fn run_step_twins(&self, step: &mut GdnStep) -> Result<StateSlot> {
        let slot = self.launch_step(step, false)?;
        self.shim.check_outputs(&step.outputs())?;
        Ok(slot)
    }

    /// Captures the launch of [`GdnEngine::run_step`] into a CUDA graph
    /// (stream capture, thread-local mode); nothing runs until
    /// [`GdnGraph::launch`]. The graph takes `step`.
    ///
    /// # Errors
    /// [`DeviceError::Driver`] (capture, instantiation);
    /// [`DeviceError::GraphEmpty`].
    pub fn capture_step(&self, step: GdnStep) -> Result<GdnGraph> {
        self.capture(step, true, 1)
    }

    /// Captures `n` launches of [`GdnEngine::run_step`] one after another
    /// into one CUDA graph, each on the step's same inputs and buffers: a
    /// launch reads the conv ring the launch before it wrote (the ring is
    /// updated in place), and at even t the state it left, so the outputs
    /// differ from launch to launch, as in a decode loop fed the same
    /// tokens. For timing a step as it sits among the kernels of a model's
    /// decode graph, without one graph launch a step: the replay's time /
    /// `n`.
    ///
    /// # Errors
    /// As [`GdnEngine::capture_step`]; [`DeviceError::Gdn`] for `n` = 0.
    pub fn capture_steps(&self, step: GdnStep, n: usize) -> Result<GdnGraph> {
        if n == 0 {
            return Err(DeviceError::Gdn(GdnError::Zero { dim: "launches" }));
        }
        self.capture(step, true, n)
    }

    /// Captures the three launches of [`GdnEngine::run_step_twins`].
    ///
    /// # Errors
    /// As [`GdnEngine::capture_step`]; [`DeviceError::Gdn`] for a batched
    /// step.
    pub fn capture_step_twins(&self, step: GdnStep) -> Result<GdnGraph> {
        self.capture(step, false, 1)
    }

    fn capture(&self, mut step: GdnStep, fused: bool, n: usize) -> Result<GdnGraph> {
        use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
        self.synchronize()?;
        drv(
            || "cuStreamBeginCapture".into(),
            self.shim
                .stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        )?;
        let launched = (0..n).try_for_each(|_| self.launch_step(&mut step, fused).map(|_| ()));
        // End the capture whatever happened, so the stream is usable again.
        let ended = self.shim.stream.end_capture(CUgraphInstantiate_flags(0));
        launched?;
        let graph = drv(|| "cuStreamEndCapture / cuGraphInstantiate".into(), ended)?.ok_or(
            DeviceError::GraphEmpty {
                what: "gdn packed step",
            },
        )?;
        Ok(GdnGraph {
            graph,
            step,
            stream: self.shim.stream.clone(),
            guards: self.shim.guards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split entry's rule: the main entry, one sequence, ratio 2,
    /// clusters of 8; nothing else.
    #[test]
    fn split_applies_to_one_sequence_at_ratio_2_in_clusters_of_8() {
        let s = GdnShape::new(16, 32, 128, 4, 8).unwrap();
        assert!(gdn_split_applies(&s, 1, GdnFusedEntry::Main, 8));
        assert!(!gdn_split_applies(&s, 2, GdnFusedEntry::Main, 8));
        assert!(!gdn_split_applies(&s, 1, GdnFusedEntry::Main, 1));
        assert!(!gdn_split_applies(&s, 1, GdnFusedEntry::C2, 8));
        let p = GdnFusedEntry::Persistent { ctas: None };
        assert!(!gdn_split_applies(&s, 1, p, 8));
        for (nk, nv) in [(4, 4), (4, 12), (2, 16), (1, 3)] {
            let r = GdnShape::new(nk, nv, 128, 4, 1).unwrap();
            assert!(
                !gdn_split_applies(&r, 1, GdnFusedEntry::Main, 8),
                "{nk} {nv}"
            );
        }
        assert!(gdn_split_applies(
            &GdnShape::new(1, 2, 128, 2, 34).unwrap(),
            1,
            GdnFusedEntry::Main,
            8
        ));
    }

    /// The fused step's launch geometry for Qwen3-Next's layer (num_k 16,
    /// num_v 32: ratio 2) and a ratio-1 layout, per entry and CTA cap.
    #[test]
    fn fused_launch_geometry() {
        let s = GdnShape::new(16, 32, 128, 4, 1).unwrap();
        // Clusters of 8: 32 columns per CTA; a lone sequence takes the
        // entry's largest CTA, a batch one column warp.
        assert_eq!(gdn_fused_launch(&s, 1, 8, 128), ((128, 1), 128));
        assert_eq!(gdn_fused_launch(&s, 1, 8, 256), ((128, 1), 256));
        assert_eq!(gdn_fused_launch(&s, 1, 8, 1024), ((128, 1), 256));
        assert_eq!(gdn_fused_launch(&s, 64, 8, 256), ((128, 64), 32));
        // Clusters of 2: 128 columns per CTA, every thread a column thread
        // unless the cap leaves room for q/k warps.
        assert_eq!(gdn_fused_launch(&s, 1, 2, 128), ((32, 1), 128));
        assert_eq!(gdn_fused_launch(&s, 1, 2, 256), ((32, 1), 256));
        assert_eq!(gdn_fused_launch(&s, 64, 2, 128), ((32, 64), 128));
        // Ratio 1 in clusters of 8: 16 columns, not whole warps.
        let r1 = GdnShape::new(4, 4, 128, 4, 2).unwrap();
        assert_eq!(gdn_fused_launch(&r1, 1, 8, 128), ((32, 1), 16));
        assert_eq!(gdn_fused_launch(&r1, 3, 2, 128), ((8, 3), 64));
    }

    /// The persistent entry's grid: one CTA per (q/k head, sequence) item
    /// up to the resident CTAs and the cap, never 0.
    #[test]
    fn persistent_launch_geometry() {
        let s = GdnShape::new(16, 32, 128, 4, 1).unwrap();
        let (t, m) = (GDN_PERSISTENT_THREADS, GDN_PERSISTENT_SMEM);
        assert_eq!(m, 64 << 10);
        assert_eq!(gdn_persistent_launch(&s, 64, 264, None), ((264, 1), t, m));
        assert_eq!(gdn_persistent_launch(&s, 2, 264, None), ((32, 1), t, m));
        assert_eq!(gdn_persistent_launch(&s, 64, 264, Some(2)), ((2, 1), t, m));
        assert_eq!(gdn_persistent_launch(&s, 1, 0, None), ((1, 1), t, m));
    }
}
