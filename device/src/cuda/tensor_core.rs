//! The tensor-core probe kernels (`cu/tensor_core.cu`): one FP8 MMA
//! instruction per tile on given operands, so its result can be compared
//! with [`oracle::tensor_core`] bit for bit.

use super::buffer::Buffer;
use super::error::{DeviceError, Result};
use super::shim::{launch_config, launched, shim_methods, Shim};
use super::source::KernelSource;
use super::{driver_available, nvrtc_arch, nvrtc_available};
use cudarc::driver::{CudaFunction, PushKernelArg};
use oracle::tensor_core::{Fp8Kind, Instruction};

/// The builtin probe source, `cu/tensor_core.cu`, embedded at build time.
pub const BUILTIN_TENSOR_CORE_CU: &str = include_str!("../../../cu/tensor_core.cu");

/// Environment variable naming a candidate `.cu` file with the ABI of
/// `cu/tensor_core.cu`; when set, [`TensorCoreEngine::new`]
/// compiles it instead of the builtin probes (a planted bug, to show the
/// gate catches a wrong probe).
pub const ENV_TENSOR_CORE_CU: &str = "KERNEL_ORACLE_TENSOR_CORE_CU";

impl KernelSource {
    /// The builtin `cu/tensor_core.cu`.
    pub fn builtin_tensor_core() -> KernelSource {
        KernelSource::builtin_named("cu/tensor_core.cu", BUILTIN_TENSOR_CORE_CU)
    }
}

/// The `mma.sync` probes (sm_89 and later), one per operand-format pair
/// (A, B): e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3, e5m2 x e5m2.
pub const MMA_KERNELS: [&str; 4] = [
    "tc_mma_e4m3_e4m3",
    "tc_mma_e4m3_e5m2",
    "tc_mma_e5m2_e4m3",
    "tc_mma_e5m2_e5m2",
];

/// The `wgmma` probes (sm_90a only), in the order of [`MMA_KERNELS`].
pub const WGMMA_KERNELS: [&str; 4] = [
    "tc_wgmma_e4m3_e4m3",
    "tc_wgmma_e4m3_e5m2",
    "tc_wgmma_e5m2_e4m3",
    "tc_wgmma_e5m2_e5m2",
];

/// Rows of A (and of C, D) per tile (elements).
pub const TILE_M: usize = 64;
/// Columns of B (and of C, D) per tile (elements).
pub const TILE_N: usize = 8;
/// The reduction length of one MMA (elements).
pub const TILE_K: usize = 32;

/// Operands of `tiles` probe tiles (the ABI of `cu/tensor_core.cu`):
/// `a` `[tiles x 64 x 32]` FP8 codes row-major, `bt` `[tiles x 8 x 32]`
/// (B transposed: `bt[t][j][k] = B[k][j]`), `c` `[tiles x 64 x 8]` f32.
#[derive(Clone, Copy, Debug)]
pub struct ProbeTiles<'a> {
    /// A codes (bytes).
    pub a: &'a [u8],
    /// B codes, transposed (bytes).
    pub bt: &'a [u8],
    /// The incoming accumulators (f32 elements).
    pub c: &'a [f32],
    /// false: the instruction runs with its accumulator input disabled
    /// (`wgmma` scale-d = 0, with `c` still loaded into the accumulator
    /// registers, so a probe that ignored the predicate would show;
    /// `mma.sync` with +0.0 registers, `c` unread).
    pub scale_d: bool,
}

impl ProbeTiles<'_> {
    /// The number of tiles, after checking every length against it.
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] when `a` is empty or not a whole number of
    /// tiles, or `bt`/`c` disagree with it; [`DeviceError::IndexRange`]
    /// beyond 2^24 tiles (the kernels index with 32-bit grid ids and the
    /// shim bounds one call's memory).
    pub fn tiles(&self) -> Result<usize> {
        let per = TILE_M * TILE_K;
        let tiles = self.a.len() / per;
        if tiles == 0 || !self.a.len().is_multiple_of(per) {
            return Err(DeviceError::ArgLen {
                arg: "a",
                want: tiles.max(1) * per,
                got: self.a.len(),
            });
        }
        if tiles > 1 << 24 {
            return Err(DeviceError::IndexRange {
                what: "tiles",
                value: tiles as u64,
                limit: 1 << 24,
            });
        }
        for (arg, want, got) in [
            ("bt", tiles * TILE_N * TILE_K, self.bt.len()),
            ("c", tiles * TILE_M * TILE_N, self.c.len()),
        ] {
            if want != got {
                return Err(DeviceError::ArgLen { arg, want, got });
            }
        }
        Ok(tiles)
    }
}

/// The probe kernels loaded on one device.
pub struct TensorCoreEngine {
    shim: Shim,
    mma: [CudaFunction; 4],
    wgmma: Option<[CudaFunction; 4]>,
}

shim_methods!(TensorCoreEngine);

fn pair_index(fa: Fp8Kind, fb: Fp8Kind) -> usize {
    let f = |k: Fp8Kind| usize::from(k == Fp8Kind::E5m2);
    2 * f(fa) + f(fb)
}

fn probe_target(major: i32, minor: i32) -> Result<String> {
    if (major, minor) < (8, 9) {
        return Err(DeviceError::UnsupportedArch { major, minor });
    }
    Ok(nvrtc_arch(major, minor))
}

impl TensorCoreEngine {
    /// Opens device `ordinal` and loads `cu/tensor_core.cu` (or the
    /// candidate [`ENV_TENSOR_CORE_CU`] names), compiled for
    /// sm_90a on a 9.0 device (the `wgmma` probes exist only there), else
    /// for the device's own target.
    ///
    /// # Errors
    /// [`DeviceError::NoDriver`], [`DeviceError::NoNvrtc`],
    /// [`DeviceError::UnsupportedArch`] below 8.9, [`DeviceError::Driver`],
    /// [`DeviceError::KernelSource`] (an unreadable candidate),
    /// [`DeviceError::Compile`], [`DeviceError::MissingKernel`].
    pub fn new(ordinal: usize) -> Result<TensorCoreEngine> {
        let source =
            KernelSource::from_env_var(ENV_TENSOR_CORE_CU, KernelSource::builtin_tensor_core)?;
        TensorCoreEngine::with_source(ordinal, source)
    }

    /// [`TensorCoreEngine::new`] with the probes of `source` (a candidate
    /// with the ABI of `cu/tensor_core.cu`), whatever the environment says.
    ///
    /// # Errors
    /// As [`TensorCoreEngine::new`].
    pub fn with_source(ordinal: usize, source: KernelSource) -> Result<TensorCoreEngine> {
        driver_available()?;
        nvrtc_available()?;
        let shim = Shim::open(ordinal, source, probe_target)?;
        let load = |names: [&str; 4]| -> Result<[CudaFunction; 4]> {
            Ok([
                shim.function(names[0])?,
                shim.function(names[1])?,
                shim.function(names[2])?,
                shim.function(names[3])?,
            ])
        };
        let mma = load(MMA_KERNELS)?;
        let wgmma = if shim.arch == (9, 0) {
            Some(load(WGMMA_KERNELS)?)
        } else {
            None
        };
        Ok(TensorCoreEngine { shim, mma, wgmma })
    }

    /// Whether this device runs `instruction`.
    pub fn has(&self, instruction: Instruction) -> bool {
        match instruction {
            Instruction::MmaSync => true,
            Instruction::Wgmma => self.wgmma.is_some(),
        }
    }

    /// Runs `instruction` with operand formats (`fa`, `fb`) once per tile
    /// and returns `d` `[tiles x 64 x 8]` f32, every bit the hardware's.
    ///
    /// # Errors
    /// As [`ProbeTiles::tiles`] (nothing launched);
    /// [`DeviceError::InstructionUnavailable`] for `wgmma` off sm_90a;
    /// [`DeviceError::Driver`]; [`DeviceError::GuardClobbered`] when guards
    /// are on and a kernel wrote outside `d`.
    pub fn run(
        &self,
        instruction: Instruction,
        fa: Fp8Kind,
        fb: Fp8Kind,
        tiles: &ProbeTiles<'_>,
    ) -> Result<Vec<f32>> {
        let n = tiles.tiles()?;
        let (f, name) = match instruction {
            Instruction::MmaSync => (&self.mma, MMA_KERNELS),
            Instruction::Wgmma => match &self.wgmma {
                Some(w) => (w, WGMMA_KERNELS),
                None => {
                    return Err(DeviceError::InstructionUnavailable {
                        instruction: "wgmma.mma_async",
                        needs: "sm_90a",
                        major: self.shim.arch.0,
                        minor: self.shim.arch.1,
                    })
                }
            },
        };
        let i = pair_index(fa, fb);
        let a: Buffer<u8> = self.upload(tiles.a)?;
        let bt: Buffer<u8> = self.upload(tiles.bt)?;
        let c: Buffer<f32> = self.upload(tiles.c)?;
        let mut d: Buffer<f32> = self.alloc_output(n * TILE_M * TILE_N)?;
        let (av, bv, cv) = (a.view(), bt.view(), c.view());
        let mut dv = d.view_mut()?;
        let (count, scale_d) = (n as i32, i32::from(tiles.scale_d));
        let mut b = self.shim.stream.launch_builder(&f[i]);
        b.arg(&av)
            .arg(&bv)
            .arg(&cv)
            .arg(&mut dv)
            .arg(&count)
            .arg(&scale_d);
        let cfg = launch_config((n as u32, 1, 1), 128, 0);
        // SAFETY: argument types and order are the ABI of cu/tensor_core.cu;
        // every length was checked against `n` tiles above, and one CTA of
        // 128 threads per tile is the launch the ABI states.
        launched(name[i], unsafe { b.launch(cfg) })?;
        drop(b);
        self.shim.check_outputs(&[(&d, "d")])?;
        self.download(&d)
    }
}
