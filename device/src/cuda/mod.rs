//! # cuda: the v2 FP8 MMQ kernels through cudarc and NVRTC
//!
//! [`Engine`] compiles `cu/fp8_mmq.cu` (or the candidate named by
//! [`ENV_FP8_MMQ_CU`]) with NVRTC for the device's compute capability, loads
//! it, and runs its kernels. Both libcuda and libnvrtc are loaded
//! dynamically: on a machine without them, [`Engine::new`] returns
//! [`DeviceError::NoDriver`] or [`DeviceError::NoNvrtc`], never a panic.
//! Compiling needs only NVRTC ([`compile`]), so CI checks that the kernels
//! compile without a GPU.
//!
//! The kernel ABI and its arithmetic contract are written at the top of
//! `cu/fp8_mmq.cu`; `core/src/fp8_mmq.rs` is the normative definition.
//!
//! ## What the kernels cannot check, and the shim checks before launching
//!
//! 1. **Buffer lengths.** A kernel receives bare pointers. Every buffer's
//!    element count is compared with the [`Shape`] (`w` `[out_f x in_f]`,
//!    `w_scales` `[ceil(out_f/128) x ceil(in_f/128)]`, `x` `[m x in_f]`,
//!    `q` `[m x in_f_pad]`, `d` `[m x in_f_pad/128]`, `y` `[m x out_f]`):
//!    [`DeviceError::ArgLen`].
//! 2. **Shapes.** Zero dimensions and lengths overflowing `usize` cannot be
//!    built ([`Shape::new`] refuses them: [`DeviceError::Shape`]); every
//!    dimension and length must also fit the kernels' `int` indexing, and
//!    the grid must fit CUDA's limits: [`DeviceError::IndexRange`].
//! 3. **Argument types and order.** The shim is the only caller of each
//!    kernel, with the ABI's order and `int`/`u64` widths.
//! 4. **Alignment.** Every pointer passed is an allocation base, or 4096
//!    bytes past one for a guarded output: 16-byte aligned, as the ABI asks.
//! 5. **Weight codes with NaN magnitude.** The MMA reads 0x7F/0xFF as NaN;
//!    the dispatch precondition refuses such weights. [`Engine::mmq`] only
//!    takes [`CheckedWeights`], which [`Engine::check_weights`] hands out
//!    after counting them on the device: [`DeviceError::NanWeights`].
//! 6. **Writes outside the output.** With guards on ([`Engine::set_guards`]),
//!    outputs sit between two [`GUARD_BYTES`] bands of [`GUARD_SENTINEL`] and
//!    their own elements are poisoned with [`POISON`] (NaN as f32 and as
//!    e4m3); after the launch the bands are read back:
//!    [`DeviceError::GuardClobbered`]. Inputs uploaded with guards on sit
//!    between bands of [`INPUT_BAND`] (NaN as every float format), so a
//!    read past an input's end that reaches a result fails by value. The
//!    quantizer's `q` and `d`, once checked, are handed on to the MMQ the
//!    same way: their bands turn to [`INPUT_BAND`] until they are written
//!    again ([`Buffer::band`]). An engine's intermediates (GDN's conv
//!    output and heads, read by the next launch before any check) sit
//!    between bands of [`INTERMEDIATE_BAND`], a NaN no arithmetic stores.
//! 7. **The plan.** The kernel source chooses its own launch geometry
//!    (`fp8_mmq_plan`); the shim checks it against the device's limits and
//!    that it covers the output: [`DeviceError::BadPlan`].
//!
//! cuBLASLt's block-scaled FP8 GEMM is a peer of the MMQ on the same
//! context and stream: [`CublasLtFp8`] (module [`cublaslt`]), chosen by
//! [`ENV_FP8_MMQ`] ([`Fp8Gemm::from_env`]).
//!
//! The MoE verify-rows tables kernel (`cu/moe_tables.cu`) has its own
//! engine, [`MoeEngine`], which can share an [`Engine`]'s context and stream
//! ([`Engine::moe_tables`]).
//!
//! ## Synchronisation
//!
//! Everything runs on one stream. Methods that return a new buffer
//! ([`Engine::quantize`], [`Engine::mmq`], [`Engine::fp8_mmq`]) synchronise
//! before returning, so a kernel fault is reported by the call that caused
//! it. The `_into` methods only launch (for timing loops), unless guards
//! are on: then they synchronise and check the bands.

mod bitdiff;
mod buffer;
mod check;
pub mod cublaslt;
mod deadline;
mod error;
mod gdn;
mod moe;
mod nvrtc;
mod open;
mod schedule;
mod shim;
mod source;
mod tensor_core;
mod tma;

pub use bitdiff::{BitDiff, BitDiffs, BIT_DIFF_KERNEL, BUILTIN_BIT_DIFF_CU};
pub use buffer::{
    byte_word, input_bands, Buffer, Src, ENV_INPUT_BANDS, GUARD_BYTES, GUARD_SENTINEL, INPUT_BAND,
    INTERMEDIATE_BAND, POISON,
};
pub use check::{
    check_grid, check_index_range, check_mmq, check_plan_geometry, check_quantize, I32_LIMIT,
};
pub use cublaslt::{
    peer_aligned, CublasLtFp8, Fp8Gemm, PeerOperands, WeightScaleLayout, ENV_FP8_MMQ,
    PEER_IN_F_ALIGN, PEER_OUT_F_ALIGN,
};
pub use deadline::{
    context_lost, exit_process, is_sticky, launch_timeout, parse_launch_timeout, Lost,
    DEFAULT_LAUNCH_TIMEOUT_S, ENV_LAUNCH_TIMEOUT,
};
pub use error::{DeviceError, Result, NVRTC_HINT};
pub use gdn::{
    check_gdn_batch, check_gdn_batch_state, check_gdn_conv, check_gdn_limits, check_gdn_prep,
    check_gdn_scan, check_gdn_state, gdn_fused_cluster, gdn_fused_launch, gdn_persistent_launch,
    gdn_shape, gdn_split_applies, GdnEngine, GdnFusedEntry, GdnGraph, GdnHeads, GdnState, GdnStep,
    GdnWeights, HeadLens, BUILTIN_GDN_CU, ENV_GDN_CU, GDN_CONV_THREADS, GDN_FUSED_C2,
    GDN_FUSED_MAX_THREADS, GDN_FUSED_PERSISTENT, GDN_FUSED_SPLIT, GDN_HEAD_THREADS, GDN_KERNELS,
    GDN_MAX_BATCH, GDN_MAX_T, GDN_PERSISTENT_FEW_CTAS, GDN_PERSISTENT_SMEM, GDN_PERSISTENT_THREADS,
    GDN_SPLIT_THREADS,
};
pub use moe::{
    check_moe_tables, decode_moe_status, MoeEngine, MoeStatus, BUILTIN_MOE_TABLES_CU,
    ENV_MOE_TABLES_CU, MOE_MAX_CTAS, MOE_TABLES_KERNEL, MOE_THREADS,
};
pub use nvrtc::{
    compile, compile_options, nvrtc_available, nvrtc_version, Compiled, ENV_NVRTC_CACHE,
};
pub use schedule::{schedule_code, schedule_from_code, SCHEDULE_CODES};
pub use source::{KernelSource, BUILTIN_FP8_MMQ_CU, ENV_FP8_MMQ_CU, REQUIRED_KERNELS};
pub use tensor_core::{
    ProbeTiles, TensorCoreEngine, BUILTIN_TENSOR_CORE_CU, ENV_TENSOR_CORE_CU, MMA_KERNELS, TILE_K,
    TILE_M, TILE_N, WGMMA_KERNELS,
};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{CudaFunction, PushKernelArg};
use oracle::fp8_mmq::Shape;
use shim::{launch_config, launched, shim_methods, Shim};
use std::collections::HashMap;
use std::sync::Mutex;

/// Whether libcuda can be loaded.
///
/// # Errors
/// [`DeviceError::NoDriver`].
pub fn driver_available() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::NoDriver {
            searched: nvrtc::searched("cuda"),
        })
    }
}

/// The NVRTC target for a device of compute capability `major.minor`:
/// `sm_90a` on 9.0 (the architecture-specific features `wgmma` needs; the
/// source exports its wgmma variants only when `__CUDA_ARCH_FEAT_SM90_ALL`
/// is defined), `sm_XY` otherwise.
pub fn nvrtc_arch(major: i32, minor: i32) -> String {
    if (major, minor) == (9, 0) {
        "sm_90a".to_string()
    } else {
        format!("sm_{major}{minor}")
    }
}

/// The launch geometry `fp8_mmq_plan` chose for one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// MMQ variant: the kernel launched is `fp8_mmq_v2_k<variant>`.
    pub variant: u32,
    /// MMQ grid (CTAs).
    pub mmq_grid: (u32, u32, u32),
    /// MMQ threads per CTA.
    pub mmq_threads: u32,
    /// MMQ dynamic shared memory (bytes per CTA).
    pub mmq_smem: u32,
    /// Quantizer grid (CTAs).
    pub quant_grid: (u32, u32, u32),
    /// Quantizer threads per CTA.
    pub quant_threads: u32,
    /// NaN-count grid x (CTAs).
    pub nan_grid: u32,
    /// NaN-count threads per CTA.
    pub nan_threads: u32,
    /// MMQ variants the source exports.
    pub variants: u32,
    /// MMQ tile: out_f rows per CTA.
    pub tile_rows: u32,
    /// MMQ tile: tokens per CTA.
    pub tile_cols: u32,
    /// The arithmetic the variant declares (`plan[15]`, decoded by
    /// [`schedule_from_code`]: 0 is seed 000's v2, [`oracle::fp8_mmq::Schedule::V2`]).
    pub schedule: oracle::fp8_mmq::Schedule,
    /// Whether the variant takes the two tensor maps of the ABI's TMA
    /// variants after its other arguments (`plan[16]`: 1; 0 for a source
    /// written before that word).
    pub tensor_maps: bool,
    /// Whether the variant walks the tiles (`plan[17]`: 1, a persistent
    /// variant: a grid of (P, 1, 1) CTAs, CTA c taking tiles c, c + P, ...
    /// of the ceil(out_f / tile_rows) x ceil(m / tile_cols) tile grid) rather
    /// than one tile per CTA (0; a source written before that word).
    pub tile_walk: bool,
}

/// Weights whose NaN-magnitude count was found to be 0 by
/// [`Engine::check_weights`]; the only form [`Engine::mmq`] accepts.
#[derive(Debug, Clone, Copy)]
pub struct CheckedWeights<'a> {
    buf: &'a Buffer<u8>,
}

impl CheckedWeights<'_> {
    /// Bytes (one e4m3 code each).
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether there is no byte.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// One CUDA device with the fp8_mmq kernels compiled and loaded.
pub struct Engine {
    shim: Shim,
    sm_count: u32,
    smem_optin: u32,
    f_plan: CudaFunction,
    f_quant: CudaFunction,
    f_nan: CudaFunction,
    f_mmq: Vec<CudaFunction>,
    plans: Mutex<HashMap<(usize, usize, usize, i32), Plan>>,
    /// The forced MMQ variant, or -1 for the plan's choice.
    force_variant: std::sync::atomic::AtomicI64,
    request: Option<oracle::fp8_mmq::Schedule>,
}

shim_methods!(Engine);

fn drv<T>(
    op: impl FnOnce() -> String,
    r: std::result::Result<T, cudarc::driver::DriverError>,
) -> Result<T> {
    r.map_err(|e| DeviceError::driver(op(), e))
}

impl Engine {
    /// Opens device `ordinal` with the kernel source [`KernelSource::from_env`]
    /// picks (the candidate named by [`ENV_FP8_MMQ_CU`], else the builtin).
    ///
    /// # Errors
    /// [`DeviceError::NoDriver`] / [`DeviceError::NoNvrtc`] when a library is
    /// missing; [`DeviceError::Driver`] when the device cannot be opened;
    /// [`DeviceError::UnsupportedArch`] below sm_89; [`DeviceError::Compile`]
    /// and [`DeviceError::MissingKernel`] for a bad source.
    pub fn new(ordinal: usize) -> Result<Engine> {
        driver_available()?;
        nvrtc_available()?;
        Engine::with_source(ordinal, KernelSource::from_env()?)
    }

    /// Opens device `ordinal` with an explicit kernel source.
    ///
    /// # Errors
    /// As [`Engine::new`].
    pub fn with_source(ordinal: usize, source: KernelSource) -> Result<Engine> {
        let shim = Shim::open(ordinal, source, |major, minor| {
            if (major, minor) < (8, 9) {
                return Err(DeviceError::UnsupportedArch { major, minor });
            }
            Ok(nvrtc_arch(major, minor))
        })?;
        let attr = |a| open::attribute(&shim.ctx, a);
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let smem_optin =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        let f_plan = shim.function("fp8_mmq_plan")?;
        let f_quant = shim.function("fp8_quantize_act")?;
        let f_nan = shim.function("fp8_nan_count")?;
        let mut engine = Engine {
            shim,
            sm_count,
            smem_optin,
            f_plan,
            f_quant,
            f_nan,
            f_mmq: Vec::new(),
            plans: Mutex::new(HashMap::new()),
            force_variant: std::sync::atomic::AtomicI64::new(-1),
            request: None,
        };
        let probe = engine.plan_uncached(&Shape::new(1, 1, 1)?, -1)?;
        if probe.variants == 0 || probe.variants > 64 {
            return Err(engine.bad_plan(format!("plan[12] = {} MMQ variants", probe.variants)));
        }
        for v in 0..probe.variants {
            let f = engine.shim.function(&format!("fp8_mmq_v2_k{v}"))?;
            engine.f_mmq.push(f);
        }
        Ok(engine)
    }

    /// Forces MMQ variant `v` (`fp8_mmq_v2_k<v>`) for every shape, or `None`
    /// for the plan's automatic choice. Tests and the gate run every
    /// variant; the setting is the engine's (a shared engine switches for
    /// every user), so a caller that forces one sets `None` again after.
    ///
    /// # Errors
    /// [`DeviceError::BadPlan`] if the source exports no such variant.
    pub fn set_mmq_variant(&self, v: Option<u32>) -> Result<()> {
        if let Some(v) = v {
            if v as usize >= self.f_mmq.len() {
                return Err(self.bad_plan(format!(
                    "variant {v} forced, the source exports {}",
                    self.f_mmq.len()
                )));
            }
        }
        self.force_variant.store(
            v.map_or(-1, i64::from),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    /// Requests that the plan's automatic choice compute `schedule` (its
    /// `plan[15]` code, [`schedule_code`], passed to `fp8_mmq_plan` as
    /// `force_variant = -2 - code`), or `None` for any schedule (the
    /// plan's fastest). A forced variant ([`Engine::set_mmq_variant`])
    /// takes precedence. A source whose plan ignores the request (any
    /// `force_variant < 0` meant "automatic" before requests existed) is
    /// refused by [`Engine::plan`] when its variant declares another
    /// schedule.
    ///
    /// # Errors
    /// [`DeviceError::BadPlan`] for a schedule with no code.
    pub fn set_mmq_schedule(&mut self, schedule: Option<oracle::fp8_mmq::Schedule>) -> Result<()> {
        if let Some(s) = schedule {
            if schedule_code(&s).is_none() {
                return Err(
                    self.bad_plan(format!("schedule {s} requested: it has no plan[15] code"))
                );
            }
        }
        self.request = schedule;
        Ok(())
    }

    /// The schedule requested by [`Engine::set_mmq_schedule`].
    pub fn mmq_schedule_request(&self) -> Option<oracle::fp8_mmq::Schedule> {
        self.request
    }

    /// The variant [`Engine::set_mmq_variant`] forces, `None` for the
    /// plan's choice.
    pub fn mmq_variant_forced(&self) -> Option<u32> {
        u32::try_from(
            self.force_variant
                .load(std::sync::atomic::Ordering::Relaxed),
        )
        .ok()
    }

    /// How many MMQ variants the kernel source exports.
    pub fn mmq_variants(&self) -> u32 {
        self.f_mmq.len() as u32
    }

    /// The kernel source itself.
    pub fn source(&self) -> &KernelSource {
        &self.shim.source
    }

    /// Multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    fn bad_plan(&self, detail: String) -> DeviceError {
        DeviceError::BadPlan {
            source_desc: self.shim.source.describe(),
            detail,
        }
    }

    fn plan_uncached(&self, shape: &Shape, force: i32) -> Result<Plan> {
        check_index_range(shape)?;
        let mut out = self.shim.zeros::<u32>(18, "plan")?;
        let (m, k, n) = (shape.m() as i32, shape.in_f() as i32, shape.out_f() as i32);
        let sms = self.sm_count as i32;
        let mut ov = out.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f_plan);
        b.arg(&m).arg(&k).arg(&n).arg(&sms).arg(&force).arg(&mut ov);
        let cfg = launch_config((1, 1, 1), 32, 0);
        // SAFETY: argument types and order are the ABI's fp8_mmq_plan.
        launched("fp8_mmq_plan", unsafe { b.launch(cfg) })?;
        drop(b);
        let v = self.shim.read_back(&out, "plan")?;
        let schedule = schedule_from_code(v[15]).ok_or_else(|| DeviceError::UnknownSchedule {
            source_desc: self.shim.source.describe(),
            variant: v[0],
            code: v[15],
        })?;
        if v[16] > 1 || v[17] > 1 {
            return Err(self.bad_plan(format!(
                "plan[16] = {}, plan[17] = {}: each 0 or 1",
                v[16], v[17]
            )));
        }
        Ok(Plan {
            variant: v[0],
            mmq_grid: (v[1], v[2], v[3]),
            mmq_threads: v[4],
            mmq_smem: v[5],
            quant_grid: (v[6], v[7], v[8]),
            quant_threads: v[9],
            nan_grid: v[10],
            nan_threads: v[11],
            variants: v[12],
            tile_rows: v[13],
            tile_cols: v[14],
            schedule,
            tensor_maps: v[16] == 1,
            tile_walk: v[17] == 1,
        })
    }

    /// The launch geometry for `shape` (asked of the kernel source once
    /// per shape, then cached), checked against the device's limits.
    ///
    /// # Errors
    /// [`DeviceError::IndexRange`] for grids beyond CUDA's limits;
    /// [`DeviceError::UnknownSchedule`] for a schedule code the ABI does
    /// not define; [`DeviceError::BadPlan`] for a plan that is otherwise
    /// unusable.
    pub fn plan(&self, shape: &Shape) -> Result<Plan> {
        let requested = self
            .request
            .and_then(|s| schedule_code(&s))
            .map_or(-1, |c| -2 - c as i32);
        let forced = self.mmq_variant_forced();
        let force = forced.map_or(requested, |v| v as i32);
        let key = (shape.m(), shape.in_f(), shape.out_f(), force);
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(*p);
        }
        let p = self.plan_uncached(shape, force)?;
        if p.variant as usize >= self.f_mmq.len() {
            return Err(self.bad_plan(format!(
                "variant {} of {} exported",
                p.variant,
                self.f_mmq.len()
            )));
        }
        if let Some(v) = forced {
            if p.variant != v {
                return Err(self.bad_plan(format!("variant {v} forced, plan chose {}", p.variant)));
            }
        } else if let Some(s) = self.request {
            if p.schedule != s {
                return Err(self.bad_plan(format!(
                    "schedule {s} requested, the plan chose variant {} declaring {}",
                    p.variant, p.schedule
                )));
            }
        }
        check_plan_geometry(&p, shape).map_err(|detail| self.bad_plan(detail))?;
        check_grid(p.mmq_grid, p.mmq_threads, p.mmq_smem, self.smem_optin)?;
        check_grid(p.quant_grid, p.quant_threads, 0, self.smem_optin)?;
        check_grid((p.nan_grid, 1, 1), p.nan_threads, 0, self.smem_optin)?;
        let f = &self.f_mmq[p.variant as usize];
        drv(
            || {
                format!(
                    "cuFuncSetAttribute fp8_mmq_v2_k{} MAX_DYNAMIC_SHARED_SIZE_BYTES {}",
                    p.variant, p.mmq_smem
                )
            },
            f.set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                p.mmq_smem as i32,
            ),
        )?;
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, p);
        Ok(p)
    }

    /// Counts the weight bytes with NaN magnitude (0x7F, 0xFF) on the device.
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn nan_count(&self, w: &Buffer<u8>) -> Result<u64> {
        if w.is_empty() {
            return Ok(0);
        }
        if w.len() as u64 > I32_LIMIT {
            return Err(DeviceError::IndexRange {
                what: "weight_len",
                value: w.len() as u64,
                limit: I32_LIMIT,
            });
        }
        // Any shape with this many weights gives the same NaN-count grid.
        let p = self.plan(&Shape::new(1, w.len(), 1)?)?;
        let mut count = self.shim.zeros::<u64>(1, "nan count")?;
        let n = w.len() as u64;
        let wv = w.view();
        let mut cv = count.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f_nan);
        b.arg(&wv).arg(&n).arg(&mut cv);
        let cfg = launch_config((p.nan_grid, 1, 1), p.nan_threads, 0);
        // SAFETY: argument types and order are the ABI's fp8_nan_count; n is w's length.
        launched("fp8_nan_count", unsafe { b.launch(cfg) })?;
        drop(b);
        let v = self.shim.read_back(&count, "nan count")?;
        Ok(v[0])
    }

    /// Counts NaN-magnitude codes in `w` and hands out [`CheckedWeights`]
    /// when there are none.
    ///
    /// # Errors
    /// [`DeviceError::NanWeights`] with the count; [`DeviceError::Driver`].
    pub fn check_weights<'a>(&self, w: &'a Buffer<u8>) -> Result<CheckedWeights<'a>> {
        match self.nan_count(w)? {
            0 => Ok(CheckedWeights { buf: w }),
            count => Err(DeviceError::NanWeights { count }),
        }
    }

    /// Quantizes activations `x` `[m x in_f]` into new buffers `q`
    /// `[m x in_f_pad]` (e4m3) and `d` `[m x in_f_pad/128]` (f32).
    /// Synchronises. With guards on they are guarded outputs, handed on
    /// to the MMQ as inputs once checked; with input bands off (under
    /// compute-sanitizer, [`ENV_INPUT_BANDS`]) exact allocations, so that
    /// memcheck sees the MMQ read past them.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`], [`DeviceError::IndexRange`] before any
    /// launch; [`DeviceError::GuardClobbered`]; [`DeviceError::Driver`].
    pub fn quantize(&self, x: &Buffer<f32>, shape: &Shape) -> Result<(Buffer<u8>, Buffer<f32>)> {
        check_quantize(shape, x.len(), None, None)?;
        // Read next by the MMQ: exact allocations under compute-sanitizer.
        let (stream, guards) = (&self.shim.stream, self.shim.guards);
        let mut q = buffer::alloc_handed_on::<u8>(stream, shape.q_len(), guards)?;
        let mut d = buffer::alloc_handed_on::<f32>(stream, shape.d_len(), guards)?;
        self.quantize_into(x, shape, &mut q, &mut d)?;
        self.synchronize()?;
        Ok((q, d))
    }

    /// Launches the quantizer into existing outputs. Does not synchronise
    /// unless guards are on (then it checks the bands of `q` and `d`, and
    /// hands them on to the MMQ as inputs: see [`Buffer`]).
    ///
    /// # Errors
    /// As [`Engine::quantize`].
    pub fn quantize_into(
        &self,
        x: &Buffer<f32>,
        shape: &Shape,
        q: &mut Buffer<u8>,
        d: &mut Buffer<f32>,
    ) -> Result<()> {
        check_quantize(shape, x.len(), Some(q.len()), Some(d.len()))?;
        let p = self.plan(shape)?;
        let (m, k) = (shape.m() as i32, shape.in_f() as i32);
        let xv = x.view();
        let mut qv = q.view_mut()?;
        let mut dv = d.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f_quant);
        b.arg(&xv).arg(&mut qv).arg(&mut dv).arg(&m).arg(&k);
        let cfg = launch_config(p.quant_grid, p.quant_threads, 0);
        // SAFETY: argument types, order and lengths checked above against the ABI.
        launched("fp8_quantize_act", unsafe { b.launch(cfg) })?;
        drop(b);
        self.shim.check_outputs(&[(q, "q"), (d, "d")])?;
        // Checked: from here on the MMQ's inputs.
        if self.shim.guards {
            q.hand_on()?;
            d.hand_on()?;
        }
        Ok(())
    }

    /// The v2 MMQ into a new output `y` `[m x out_f]`. Synchronises.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`], [`DeviceError::IndexRange`],
    /// [`DeviceError::BadPlan`] before any launch;
    /// [`DeviceError::GuardClobbered`]; [`DeviceError::Driver`].
    pub fn mmq(
        &self,
        w: &CheckedWeights<'_>,
        w_scales: &Buffer<f32>,
        q: &Buffer<u8>,
        d: &Buffer<f32>,
        shape: &Shape,
    ) -> Result<Buffer<f32>> {
        check_mmq(shape, w.len(), w_scales.len(), q.len(), d.len(), None)?;
        let mut y = self.alloc_output::<f32>(shape.out_len())?;
        self.mmq_into(w, w_scales, q, d, shape, &mut y)?;
        self.synchronize()?;
        Ok(y)
    }

    /// Launches the MMQ into an existing output. Does not synchronise
    /// unless guards are on (then it checks the bands of `y`).
    ///
    /// # Errors
    /// As [`Engine::mmq`].
    pub fn mmq_into(
        &self,
        w: &CheckedWeights<'_>,
        w_scales: &Buffer<f32>,
        q: &Buffer<u8>,
        d: &Buffer<f32>,
        shape: &Shape,
        y: &mut Buffer<f32>,
    ) -> Result<()> {
        check_mmq(
            shape,
            w.len(),
            w_scales.len(),
            q.len(),
            d.len(),
            Some(y.len()),
        )?;
        let p = self.plan(shape)?;
        let f = &self.f_mmq[p.variant as usize];
        let (m, k, n) = (shape.m() as i32, shape.in_f() as i32, shape.out_f() as i32);
        let wv = w.buf.view();
        let sv = w_scales.view();
        let qv = q.view();
        let dv = d.view();
        // The TMA variants' maps (the ABI, section 4): the weights' only
        // where TMA can address their rows (in_f % 16 == 0, 16-byte aligned
        // base), else zero, which the kernel then does not read.
        let maps = if p.tensor_maps {
            let stream = &self.shim.stream;
            drv(
                || "cuCtxSetCurrent".into(),
                stream.context().bind_to_thread(),
            )?;
            let (in_f, w_addr) = (shape.in_f() as u64, w.buf.device_addr(stream));
            let ta = if in_f % 16 == 0 && w_addr % 16 == 0 {
                tma::TensorMap::tiled_u8(
                    w_addr,
                    in_f,
                    shape.out_f() as u64,
                    in_f,
                    128,
                    p.tile_rows,
                )?
            } else {
                tma::TensorMap::zeroed()
            };
            let pad = shape.in_f_pad() as u64;
            let tb = tma::TensorMap::tiled_u8(
                q.device_addr(stream),
                pad,
                shape.m() as u64,
                pad,
                128,
                p.tile_cols,
            )?;
            Some((ta, tb))
        } else {
            None
        };
        let mut yv = y.view_mut()?;
        let mut b = self.shim.stream.launch_builder(f);
        b.arg(&wv)
            .arg(&sv)
            .arg(&qv)
            .arg(&dv)
            .arg(&mut yv)
            .arg(&m)
            .arg(&k)
            .arg(&n);
        if let Some((ta, tb)) = &maps {
            b.arg(ta).arg(tb);
        }
        let cfg = launch_config(p.mmq_grid, p.mmq_threads, p.mmq_smem);
        // SAFETY: argument types, order and lengths checked above against the
        // ABI; the weights were checked for NaN magnitudes.
        launched(format_args!("fp8_mmq_v2_k{}", p.variant), unsafe {
            b.launch(cfg)
        })?;
        drop(b);
        self.shim.check_outputs(&[(y, "y")])
    }

    /// The whole pipeline: refuse weights with NaN magnitudes, quantize
    /// `x`, run the MMQ. Synchronises.
    ///
    /// # Errors
    /// [`DeviceError::NanWeights`] and every error of [`Engine::quantize`]
    /// and [`Engine::mmq`]; all argument checks come before any launch.
    pub fn fp8_mmq(
        &self,
        w: &Buffer<u8>,
        w_scales: &Buffer<f32>,
        x: &Buffer<f32>,
        shape: &Shape,
    ) -> Result<Buffer<f32>> {
        check_quantize(shape, x.len(), None, None)?;
        check_mmq(
            shape,
            w.len(),
            w_scales.len(),
            shape.q_len(),
            shape.d_len(),
            None,
        )?;
        let cw = self.check_weights(w)?;
        let (q, d) = self.quantize(x, shape)?;
        self.mmq(&cw, w_scales, &q, &d, shape)
    }
}
