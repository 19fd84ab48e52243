//! # moe: the MoE verify-rows tables kernel (`cu/moe_tables.cu`)
//!
//! [`MoeEngine`] compiles `cu/moe_tables.cu` (or the candidate named by
//! [`ENV_MOE_TABLES_CU`]) with the same NVRTC cache as [`Engine`], and runs
//! `moe_vrows_tables_from_sel`: from device-resident router selections
//! (expert ids and routing weights) it builds the gate/up/down pointer and
//! scale tables that `oracle::moe_tables::vrows_tables` defines. It can
//! share an [`Engine`]'s context, stream and guard setting
//! ([`MoeEngine::from_engine`]) or open its own ([`MoeEngine::new`]), so it
//! does not depend on `cu/fp8_mmq.cu` compiling.
//!
//! The ABI is written at the top of `cu/moe_tables.cu`.
//!
//! ## What the kernel cannot check, and the shim checks
//!
//! 1. **Lengths** (before launch): `selw`, the three macro planes and the
//!    outputs against `sel`'s length and the bank's `n_expert`, by the
//!    oracle's own `check_lengths`, so the error is the oracle's:
//!    [`DeviceError::MoeTables`].
//! 2. **Pairs count** (before launch): at most 2^31 - 1 pairs (the ABI's
//!    `i32 n_pairs`): [`DeviceError::IndexRange`].
//! 3. **Expert ids and 64-bit overflow** (by the launch): the ids live on
//!    the device, so the kernel checks each pair and reports the count and
//!    the lowest bad pair in a status word; the shim reads it after the
//!    launch and returns [`DeviceError::MoeBadPairs`] carrying the very
//!    `TablesError` the oracle returns, never the tables. A status no input
//!    explains is [`DeviceError::MoeBadStatus`].
//! 4. **Placeholder planes**: without macro planes the shim passes null
//!    pointers, so a kernel that dereferences them faults instead of
//!    reading plausible bytes.
//! 5. **Writes outside the tables**: with guards on, both outputs sit in
//!    guard bands and are poisoned first ([`DeviceError::GuardClobbered`]).
//!
//! ## The per-layer macro-plane cache
//!
//! Macro planes are host slices, uploaded once per layer id and reused, as
//! the seed's launcher does. The cache keeps the host bits of every plane
//! it uploaded and compares them with the planes passed on every call; any
//! difference (another bank under the same layer id, an edited plane)
//! uploads again. It can therefore never serve stale planes; the price is
//! one host comparison of `3 * n_expert` words per call.

use super::buffer::{self, Buffer};
use super::error::{DeviceError, Result};
use super::nvrtc::nvrtc_available;
use super::shim::{launch_config, launched, shim_methods, sm_target, Shim};
use super::source::KernelSource;
use super::{driver_available, drv, Engine, I32_LIMIT};
use cudarc::driver::{CudaFunction, DeviceRepr, PushKernelArg};
use oracle::moe_tables::{check_lengths, Bank, Plane, TablesError, PLANES};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Environment variable naming a candidate `.cu` file with the ABI of
/// `cu/moe_tables.cu`; when set, it is compiled instead of the builtin one.
pub const ENV_MOE_TABLES_CU: &str = "KERNEL_ORACLE_MOE_TABLES_CU";

/// The builtin kernel source, `cu/moe_tables.cu`, embedded at build time.
pub const BUILTIN_MOE_TABLES_CU: &str = include_str!("../../../cu/moe_tables.cu");

/// The kernel every `moe_tables` source must export (`extern "C"`).
pub const MOE_TABLES_KERNEL: &str = "moe_vrows_tables_from_sel";

/// Threads per CTA the shim launches with.
pub const MOE_THREADS: u32 = 256;

/// The most CTAs the shim launches (the kernel loops over the rest).
pub const MOE_MAX_CTAS: u32 = 65_536;

impl KernelSource {
    /// The builtin `cu/moe_tables.cu`.
    pub fn builtin_moe_tables() -> KernelSource {
        KernelSource::builtin_named("cu/moe_tables.cu", BUILTIN_MOE_TABLES_CU)
    }

    /// The candidate named by [`ENV_MOE_TABLES_CU`], else the builtin
    /// `cu/moe_tables.cu`.
    ///
    /// # Errors
    /// [`DeviceError::KernelSource`] if the named file cannot be read.
    pub fn moe_tables_from_env() -> Result<KernelSource> {
        KernelSource::from_env_var(ENV_MOE_TABLES_CU, KernelSource::builtin_moe_tables)
    }
}

impl DeviceError {
    /// The contract's error inside a MoE tables error
    /// ([`DeviceError::MoeTables`] or [`DeviceError::MoeBadPairs`]): what
    /// `oracle::moe_tables::vrows_tables` returns for the same input.
    pub fn moe_tables_error(&self) -> Option<&TablesError> {
        match self {
            DeviceError::MoeTables(e) => Some(e),
            DeviceError::MoeBadPairs { first, .. } => Some(first),
            _ => None,
        }
    }
}

/// Checks the lengths of a tables call before launch (the oracle's
/// `check_lengths`, then the ABI's pair limit). `ptrs` and `scales` are
/// `None` when the shim allocates them.
///
/// # Errors
/// [`DeviceError::MoeTables`]; [`DeviceError::IndexRange`] past 2^31 - 1
/// pairs.
pub fn check_moe_tables(
    bank: &Bank<'_>,
    n_pairs: usize,
    weights: usize,
    ptrs: Option<usize>,
    scales: Option<usize>,
) -> Result<()> {
    check_lengths(bank, n_pairs, weights, ptrs, scales).map_err(DeviceError::MoeTables)?;
    if n_pairs as u64 > I32_LIMIT {
        return Err(DeviceError::IndexRange {
            what: "n_pairs",
            value: n_pairs as u64,
            limit: I32_LIMIT,
        });
    }
    Ok(())
}

/// Turns the kernel's status words `[count, max(~key)]` into the contract's
/// error for the lowest bad pair (see the ABI); `Ok` when no pair was bad.
///
/// # Errors
/// [`DeviceError::MoeBadPairs`]; [`DeviceError::MoeBadStatus`] when the
/// words are inconsistent (`source_desc` names the kernel in that error).
pub fn decode_moe_status(
    status: [u64; 2],
    bank: &Bank<'_>,
    n_pairs: usize,
    source_desc: &str,
) -> Result<()> {
    let [count, inv] = status;
    if count == 0 && inv == 0 {
        return Ok(());
    }
    let bad = |detail: String| DeviceError::MoeBadStatus {
        source_desc: source_desc.to_string(),
        detail,
    };
    if count == 0 || inv == 0 || count > n_pairs as u64 {
        return Err(bad(format!(
            "status = [{count}, 0x{inv:016x}] for {n_pairs} pairs"
        )));
    }
    let key = !inv;
    let pair = (key >> 34) as usize;
    let code = (key >> 32) & 3;
    let expert = key as u32 as i32;
    if pair >= n_pairs {
        return Err(bad(format!("first bad pair {pair} of {n_pairs}")));
    }
    let in_range = expert >= 0 && (expert as u64) < bank.n_expert as u64;
    let first = match code {
        0 if !in_range => TablesError::ExpertRange {
            pair,
            expert,
            n_expert: bank.n_expert,
        },
        1..=3 if in_range => {
            let plane = Plane::ALL[code as usize - 1];
            let slab = bank.slabs[plane.index()];
            TablesError::AddressOverflow {
                plane,
                pair,
                expert,
                base: slab.base,
                stride: slab.stride,
            }
        }
        _ => {
            return Err(bad(format!(
                "pair {pair} flagged with code {code} for expert {expert} of {}",
                bank.n_expert
            )))
        }
    };
    Err(DeviceError::MoeBadPairs {
        bad_pairs: count,
        first,
    })
}

/// The kernel's status words (`u64[2]`), zeroed by each launch.
#[derive(Debug)]
pub struct MoeStatus {
    buf: Buffer<u64>,
}

/// One layer's uploaded macro planes and the host bits they came from.
struct LayerPlanes {
    bits: Vec<u32>,
    dev: [Buffer<f32>; PLANES],
}

/// One CUDA device with `cu/moe_tables.cu` compiled and loaded.
pub struct MoeEngine {
    shim: Shim,
    f_tables: CudaFunction,
    planes: Mutex<HashMap<u32, LayerPlanes>>,
    uploads: AtomicU64,
}

shim_methods!(MoeEngine);

impl Engine {
    /// A [`MoeEngine`] on this engine's context and stream, with its guard
    /// setting, compiling the source [`KernelSource::moe_tables_from_env`]
    /// picks.
    ///
    /// # Errors
    /// As [`MoeEngine::from_engine`].
    pub fn moe_tables(&self) -> Result<MoeEngine> {
        MoeEngine::from_engine(self, KernelSource::moe_tables_from_env()?)
    }
}

impl MoeEngine {
    /// Opens device `ordinal` (its primary context, on a new stream) with
    /// the source [`KernelSource::moe_tables_from_env`] picks.
    ///
    /// # Errors
    /// [`DeviceError::NoDriver`], [`DeviceError::NoNvrtc`],
    /// [`DeviceError::Driver`], [`DeviceError::Compile`],
    /// [`DeviceError::MissingKernel`], [`DeviceError::KernelSource`].
    pub fn new(ordinal: usize) -> Result<MoeEngine> {
        driver_available()?;
        nvrtc_available()?;
        MoeEngine::with_source(ordinal, KernelSource::moe_tables_from_env()?)
    }

    /// Opens device `ordinal` with an explicit kernel source.
    ///
    /// # Errors
    /// As [`MoeEngine::new`].
    pub fn with_source(ordinal: usize, source: KernelSource) -> Result<MoeEngine> {
        MoeEngine::load(Shim::open(ordinal, source, sm_target)?)
    }

    /// Shares `engine`'s context, stream and guard setting.
    ///
    /// # Errors
    /// [`DeviceError::Compile`], [`DeviceError::MissingKernel`],
    /// [`DeviceError::Driver`].
    pub fn from_engine(engine: &Engine, source: KernelSource) -> Result<MoeEngine> {
        MoeEngine::load(engine.shim.share(source, sm_target)?)
    }

    /// Looks up the kernel in `shim`'s module.
    fn load(shim: Shim) -> Result<MoeEngine> {
        Ok(MoeEngine {
            f_tables: shim.function(MOE_TABLES_KERNEL)?,
            shim,
            planes: Mutex::new(HashMap::new()),
            uploads: AtomicU64::new(0),
        })
    }

    /// The kernel source itself.
    pub fn source(&self) -> &KernelSource {
        &self.shim.source
    }

    /// How many times macro planes were uploaded (one per layer and
    /// content change): the cache's refills.
    pub fn macro_uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }

    /// Copies `data` into an existing buffer of the same length (stream
    /// ordered; for timing the host build it replaces).
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`]; [`DeviceError::Driver`].
    pub fn upload_into<T: DeviceRepr>(&self, data: &[T], buf: &mut Buffer<T>) -> Result<()> {
        buffer::upload_into(&self.shim.stream, data, buf)
    }

    /// A status word pair for [`MoeEngine::vrows_tables_into`].
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub fn new_status(&self) -> Result<MoeStatus> {
        Ok(MoeStatus {
            buf: self.shim.zeros(2, "moe status")?,
        })
    }

    /// Builds both tables from device-resident selections `sel` (expert
    /// ids) and `selw` (routing weights) into new buffers `(ptrs, scales)`,
    /// `3 * n_pairs` each, plane-major (gate, up, down). `layer` keys the
    /// macro-plane cache. The grid has at most `max_ctas` CTAs (clamped to
    /// 1 ..= [`MOE_MAX_CTAS`]; [`MOE_MAX_CTAS`] gives the shim's grid of
    /// one thread a pair up to 2^24 pairs). The ABI's launch is "any 1-D
    /// grid (grid-stride loop)": fewer than `n_pairs / 256` CTAs run the
    /// loop past its first pass, as the gate's grid-stride rows and half
    /// the fuzzer's cases do. Synchronises and reads the status back.
    ///
    /// # Errors
    /// [`DeviceError::MoeTables`] / [`DeviceError::IndexRange`] before
    /// launch; [`DeviceError::MoeBadPairs`] (the oracle's error for the
    /// same input) after it, with no tables; [`DeviceError::MoeBadStatus`];
    /// [`DeviceError::GuardClobbered`]; [`DeviceError::Driver`].
    pub fn vrows_tables(
        &self,
        sel: &Buffer<i32>,
        selw: &Buffer<f32>,
        layer: u32,
        bank: &Bank<'_>,
        max_ctas: u32,
    ) -> Result<(Buffer<u64>, Buffer<f32>)> {
        check_moe_tables(bank, sel.len(), selw.len(), None, None)?;
        let n = sel.len() * PLANES;
        let mut ptrs = self.alloc_output::<u64>(n)?;
        let mut scales = self.alloc_output::<f32>(n)?;
        let mut status = self.new_status()?;
        let (p, s, st) = (&mut ptrs, &mut scales, &mut status);
        self.vrows_tables_into(sel, selw, layer, bank, p, s, st, max_ctas)?;
        self.check_status(&status, bank, sel.len())?;
        Ok((ptrs, scales))
    }

    /// Launches the tables kernel into existing outputs, zeroing `status`
    /// first. Does not synchronise or read the status unless guards are on
    /// (then it synchronises and checks the bands); call
    /// [`MoeEngine::check_status`] before trusting the tables. The grid as
    /// [`MoeEngine::vrows_tables`]'s.
    ///
    /// # Errors
    /// As [`MoeEngine::vrows_tables`], except the status errors.
    #[allow(clippy::too_many_arguments)] // allow: the kernel's inputs, outputs and status, each one buffer, and the grid
    pub fn vrows_tables_into(
        &self,
        sel: &Buffer<i32>,
        selw: &Buffer<f32>,
        layer: u32,
        bank: &Bank<'_>,
        ptrs: &mut Buffer<u64>,
        scales: &mut Buffer<f32>,
        status: &mut MoeStatus,
        max_ctas: u32,
    ) -> Result<()> {
        let n_pairs = sel.len();
        check_moe_tables(
            bank,
            n_pairs,
            selw.len(),
            Some(ptrs.len()),
            Some(scales.len()),
        )?;
        drv(
            || "cuMemsetD8Async (moe status)".into(),
            self.shim.stream.memset_zeros(&mut status.buf.view_mut()?),
        )?;
        if n_pairs == 0 {
            return Ok(());
        }
        let mut cache = self.planes.lock().unwrap_or_else(|e| e.into_inner());
        let planes = match bank.macros {
            Some(m) => Some(self.layer_planes(&mut cache, layer, m)?),
            None => None,
        };
        let null = 0u64;
        let has_macros: i32 = i32::from(planes.is_some());
        let views = planes.map(|p| [p[0].view(), p[1].view(), p[2].view()]);
        let n_expert = bank.n_expert as u64;
        let n = n_pairs as i32;
        let [sg, su, sd] = bank.slabs;
        let (sv, wv) = (sel.view(), selw.view());
        let mut pv = ptrs.view_mut()?;
        let mut cv = scales.view_mut()?;
        let mut st = status.buf.view_mut()?;
        let mut b = self.shim.stream.launch_builder(&self.f_tables);
        b.arg(&sv).arg(&wv);
        match &views {
            Some(v) => b.arg(&v[0]).arg(&v[1]).arg(&v[2]),
            None => b.arg(&null).arg(&null).arg(&null),
        };
        b.arg(&has_macros)
            .arg(&sg.base)
            .arg(&su.base)
            .arg(&sd.base)
            .arg(&sg.stride)
            .arg(&su.stride)
            .arg(&sd.stride)
            .arg(&n_expert)
            .arg(&n)
            .arg(&mut pv)
            .arg(&mut cv)
            .arg(&mut st);
        let ctas = (n_pairs as u64)
            .div_ceil(u64::from(MOE_THREADS))
            .min(u64::from(max_ctas.clamp(1, MOE_MAX_CTAS))) as u32;
        let cfg = launch_config((ctas, 1, 1), MOE_THREADS, 0);
        // SAFETY: argument types and order are the ABI's; lengths checked
        // above; the macro planes hold n_expert elements each (checked), and
        // a null placeholder is passed only with has_macros = 0.
        launched(MOE_TABLES_KERNEL, unsafe { b.launch(cfg) })?;
        drop(b);
        drop(cache);
        self.shim
            .check_outputs(&[(ptrs, "ptrs"), (scales, "scales")])
    }

    /// Synchronises, reads the status words back and turns them into the
    /// contract's error for the lowest bad pair.
    ///
    /// # Errors
    /// [`DeviceError::MoeBadPairs`], [`DeviceError::MoeBadStatus`],
    /// [`DeviceError::Driver`].
    pub fn check_status(&self, status: &MoeStatus, bank: &Bank<'_>, n_pairs: usize) -> Result<()> {
        let words = self.download(&status.buf)?;
        decode_moe_status([words[0], words[1]], bank, n_pairs, &self.kernel_source())
    }

    /// The uploaded planes of `layer`, uploading them again unless the
    /// cached host bits equal `m` exactly.
    fn layer_planes<'c>(
        &self,
        cache: &'c mut HashMap<u32, LayerPlanes>,
        layer: u32,
        m: [&[f32]; PLANES],
    ) -> Result<&'c [Buffer<f32>; PLANES]> {
        let same = |c: &LayerPlanes| {
            let n = m[0].len();
            c.bits.len() == PLANES * n
                && m.iter().enumerate().all(|(k, plane)| {
                    plane
                        .iter()
                        .zip(&c.bits[k * n..(k + 1) * n])
                        .all(|(v, &b)| v.to_bits() == b)
                })
        };
        let fresh = cache.get(&layer).is_some_and(same);
        if !fresh {
            let dev = [self.upload(m[0])?, self.upload(m[1])?, self.upload(m[2])?];
            let bits = m
                .iter()
                .flat_map(|p| p.iter().map(|v| v.to_bits()))
                .collect();
            cache.insert(layer, LayerPlanes { bits, dev });
            self.uploads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(&cache.get(&layer).expect("inserted above").dev)
    }
}
