//! [`Shim`]: what every engine ([`super::Engine`], [`super::MoeEngine`],
//! [`super::GdnEngine`]) holds, one stream and one compiled, loaded kernel
//! source with the guard setting, and the operations all three repeat on
//! it: opening, uploads and downloads, small zeroed result words, the guard
//! check after a launch, and the mapping of a launch's driver error.
//!
//! [`shim_methods!`] writes the public methods the three engines share, so
//! each is defined once; each engine keeps its own kernels and launches.

use super::buffer::{self, Buffer, Guarded};
use super::deadline::{alive, settle};
use super::drv;
use super::error::{DeviceError, Result};
use super::nvrtc::{compile, Compiled};
use super::open::{attribute, new_stream, open_device};
use super::source::KernelSource;
use cudarc::driver::sys::CUdevice_attribute as A;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, DeviceRepr, DriverError,
    LaunchConfig, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;
use std::sync::{Arc, OnceLock};

/// One stream on a device with one kernel source compiled and loaded, and
/// whether outputs get guard bands. Everything an engine launches goes on
/// `stream`, so stream order is program order.
pub(crate) struct Shim {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) source: KernelSource,
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) module: Arc<CudaModule>,
    /// The device's name (`NVIDIA H200`).
    pub(crate) name: String,
    /// Compute capability `(major, minor)`.
    pub(crate) arch: (i32, i32),
    pub(crate) guards: bool,
    /// `cu/bit_diff.cu`'s kernel on this context, loaded at first use.
    bit_diff: OnceLock<CudaFunction>,
}

/// The NVRTC target for compute capability `major.minor` as the MoE and
/// GDN engines compile: `sm_XY`, for any device.
pub(crate) fn sm_target(major: i32, minor: i32) -> Result<String> {
    Ok(format!("sm_{major}{minor}"))
}

/// A launch of `grid` CTAs of `threads` threads each (x only) with `smem`
/// bytes of dynamic shared memory per CTA.
pub(crate) fn launch_config(grid: (u32, u32, u32), threads: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// The result of `LaunchArgs::launch` of kernel `kernel`, as the shim
/// reports it: the launch's events (none: event tracking is off) dropped,
/// a driver error named `launch <kernel>`. The caller keeps the `unsafe`
/// launch itself, with its SAFETY argument.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn launched(
    kernel: impl std::fmt::Display,
    r: std::result::Result<Option<(CudaEvent, CudaEvent)>, DriverError>,
) -> Result<()> {
    drv(|| format!("launch {kernel}"), r).map(drop)
}

impl Shim {
    /// Opens device `ordinal` ([`open_device`]: libcuda and libnvrtc
    /// checked) and loads `source` on a new stream, guards off. The device's
    /// compute capability is judged by `target` before anything is created
    /// on it (no stream, no compile, for a device the engine refuses).
    ///
    /// # Errors
    /// As [`open_device`] and [`Shim::load`].
    pub(crate) fn open(
        ordinal: usize,
        source: KernelSource,
        target: impl FnOnce(i32, i32) -> Result<String>,
    ) -> Result<Shim> {
        let ctx = open_device(ordinal)?;
        let (arch, target) = Shim::target(&ctx, target)?;
        let stream = new_stream(&ctx)?;
        Shim::load(ctx, stream, source, false, arch, &target)
    }

    /// Another source on this shim's context and stream, with its guard
    /// setting (an engine built from another engine).
    ///
    /// # Errors
    /// As [`Shim::load`].
    pub(crate) fn share(
        &self,
        source: KernelSource,
        target: impl FnOnce(i32, i32) -> Result<String>,
    ) -> Result<Shim> {
        let (arch, target) = Shim::target(&self.ctx, target)?;
        Shim::load(
            self.ctx.clone(),
            self.stream.clone(),
            source,
            self.guards,
            arch,
            &target,
        )
    }

    /// The device's compute capability `(major, minor)` and the NVRTC
    /// target `target(major, minor)` names for it.
    ///
    /// # Errors
    /// [`DeviceError::Driver`]; the error of `target` (the FP8 engine refuses
    /// old devices there: [`DeviceError::UnsupportedArch`]).
    fn target(
        ctx: &Arc<CudaContext>,
        target: impl FnOnce(i32, i32) -> Result<String>,
    ) -> Result<((i32, i32), String)> {
        let major = attribute(ctx, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(ctx, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Ok(((major, minor), target(major, minor)?))
    }

    /// Compiles `source` for NVRTC target `target` (NVRTC cache) and loads
    /// the image (the CUBIN, else the PTX) into `ctx`; `arch` is the
    /// device's compute capability.
    ///
    /// # Errors
    /// [`DeviceError::Compile`], [`DeviceError::Driver`].
    fn load(
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        source: KernelSource,
        guards: bool,
        arch: (i32, i32),
        target: &str,
    ) -> Result<Shim> {
        let name = ctx.name().unwrap_or_else(|_| "unknown device".into());
        let compiled = compile(&source, target)?;
        let image = if compiled.cubin.is_empty() {
            Ptx::from_src(compiled.ptx.clone())
        } else {
            Ptx::from_binary(compiled.cubin.clone())
        };
        let module = drv(
            || format!("cuModuleLoadData ({})", source.describe()),
            ctx.load_module(image),
        )?;
        Ok(Shim {
            ctx,
            stream,
            source,
            compiled,
            module,
            name,
            arch,
            guards,
            bit_diff: OnceLock::new(),
        })
    }

    /// `cu/bit_diff.cu`'s kernel, compiled and loaded on this context at
    /// the first call ([`super::bitdiff::load`]).
    ///
    /// # Errors
    /// As [`super::bitdiff::load`]; a failure is not kept (the next call
    /// tries again).
    pub(crate) fn bit_diff(&self) -> Result<&CudaFunction> {
        if let Some(f) = self.bit_diff.get() {
            return Ok(f);
        }
        let f = super::bitdiff::load(self)?;
        Ok(self.bit_diff.get_or_init(|| f))
    }

    /// The kernel `kernel` of the loaded module.
    ///
    /// # Errors
    /// [`DeviceError::MissingKernel`] naming the source.
    pub(crate) fn function(&self, kernel: &str) -> Result<CudaFunction> {
        self.module
            .load_function(kernel)
            .map_err(|e| DeviceError::MissingKernel {
                name: kernel.to_string(),
                source_desc: self.source.describe(),
                detail: DeviceError::driver("cuModuleGetFunction", e).to_string(),
            })
    }

    /// Waits for all work on the stream, for at most the launch deadline
    /// ([`super::deadline::settle`]).
    ///
    /// # Errors
    /// [`DeviceError::Driver`] with the fault of any earlier launch;
    /// [`DeviceError::Timeout`]; [`DeviceError::ContextLost`].
    pub(crate) fn synchronize(&self) -> Result<()> {
        settle(&self.stream, "cuStreamSynchronize")
    }

    /// A new plain buffer of `len` zeroed elements (result words a kernel
    /// accumulates into). Stream ordered; `what` names it in a driver error
    /// (`cuMemAlloc (<what>)`).
    ///
    /// # Errors
    /// [`DeviceError::Driver`].
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<Buffer<T>> {
        alive()?;
        let raw = drv(
            || format!("cuMemAlloc ({what})"),
            self.stream.alloc_zeros::<T>(len),
        )?;
        Ok(Buffer::plain(raw))
    }

    /// Copies all of `buf` back (`buf.len()` elements) and synchronises;
    /// `what` names the copy in a driver error (`cuMemcpyDtoH (<what>)`).
    ///
    /// # Errors
    /// [`DeviceError::Driver`], including a fault of an earlier launch.
    pub(crate) fn read_back<T: DeviceRepr>(&self, buf: &Buffer<T>, what: &str) -> Result<Vec<T>> {
        settle(&self.stream, "cuStreamSynchronize (before cuMemcpyDtoH)")?;
        let v = drv(
            || format!("cuMemcpyDtoH ({what})"),
            self.stream.clone_dtoh(&buf.view()),
        )?;
        self.synchronize()?;
        Ok(v)
    }

    /// After launches that wrote `outputs`: with guards on, synchronises
    /// and checks each output's bands in order ([`buffer::check_outputs`]);
    /// with guards off, nothing (no synchronisation).
    ///
    /// # Errors
    /// [`DeviceError::Driver`]; [`DeviceError::GuardClobbered`] naming the
    /// first output whose band changed.
    pub(crate) fn check_outputs(&self, outputs: &[(&dyn Guarded, &'static str)]) -> Result<()> {
        buffer::check_outputs(&self.stream, self.guards, outputs)
    }
}

/// The public methods every engine shares, written once: `impl Debug`
/// (device, arch, source, guards) and `set_guards`, `guards`,
/// `kernel_source`, `compiled`, `device_name`, `arch`, `upload`,
/// `download`, `alloc_output`, `alloc_intermediate`, `synchronize`,
/// `time_ms`, each on the
/// engine's field `shim: Shim`.
macro_rules! shim_methods {
    ($engine:ident) => {
        impl ::std::fmt::Debug for $engine {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($engine))
                    .field("device", &self.shim.name)
                    .field("arch", &self.shim.arch)
                    .field("source", &self.shim.source.describe())
                    .field("guards", &self.shim.guards)
                    .finish()
            }
        }

        impl $engine {
            /// Turns guard bands around outputs on or off (off by default;
            /// gates and fuzzers turn them on).
            pub fn set_guards(&mut self, on: bool) {
                self.shim.guards = on;
            }

            /// Whether outputs get guard bands.
            pub fn guards(&self) -> bool {
                self.shim.guards
            }

            /// The kernel source in use, for report headers: its path (or
            /// the builtin file's name) and a short hash of its text.
            pub fn kernel_source(&self) -> String {
                self.shim.source.describe()
            }

            /// NVRTC's output for this source and device (PTX, CUBIN, log).
            pub fn compiled(&self) -> &$crate::cuda::Compiled {
                &self.shim.compiled
            }

            /// The device's name (`NVIDIA H200`).
            pub fn device_name(&self) -> &str {
                &self.shim.name
            }

            /// Compute capability `(major, minor)`.
            pub fn arch(&self) -> (i32, i32) {
                self.shim.arch
            }

            /// Copies `data` (an input) to a new device buffer: with guards
            /// on, between two [`GUARD_BYTES`](crate::cuda::GUARD_BYTES)
            /// bands of [`INPUT_BAND`](crate::cuda::INPUT_BAND) (NaN as every
            /// float format), so a kernel that lets a read past its end into
            /// a result fails by value (unless
            /// [`ENV_INPUT_BANDS`](crate::cuda::ENV_INPUT_BANDS) is `off`);
            /// plain with guards off. An empty slice gets an allocation of
            /// length 0.
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn upload<T: ::cudarc::driver::DeviceRepr>(
                &self,
                data: &[T],
            ) -> $crate::cuda::Result<$crate::cuda::Buffer<T>> {
                if self.shim.guards {
                    $crate::cuda::buffer::upload_banded(&self.shim.stream, data)
                } else {
                    $crate::cuda::buffer::upload(&self.shim.stream, data)
                }
            }

            /// Allocates an input of `len` zeroed elements that device
            /// copies fill (one row of a longer input at a time): with
            /// guards on, between [`INPUT_BAND`](crate::cuda::INPUT_BAND)
            /// bands as [`upload`](Self::upload) places an input.
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn alloc_input<
                T: ::cudarc::driver::DeviceRepr + ::cudarc::driver::ValidAsZeroBits,
            >(
                &self,
                len: usize,
            ) -> $crate::cuda::Result<$crate::cuda::Buffer<T>> {
                $crate::cuda::buffer::alloc_input(&self.shim.stream, len, self.shim.guards, "input")
            }

            /// Copies a device buffer's elements back (synchronises).
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver),
            /// including a fault of an earlier launch.
            pub fn download<T: ::cudarc::driver::DeviceRepr + Default + Clone>(
                &self,
                buf: &$crate::cuda::Buffer<T>,
            ) -> $crate::cuda::Result<Vec<T>> {
                $crate::cuda::buffer::download(&self.shim.stream, buf)
            }

            /// Result words for `pairs` device-side comparisons of two
            /// runs' outputs ([`BitDiffs`](crate::cuda::BitDiffs)).
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn bit_diffs(&self, pairs: usize) -> $crate::cuda::Result<$crate::cuda::BitDiffs> {
                $crate::cuda::BitDiffs::new(&self.shim, pairs)
            }

            /// Queues, on this engine's stream, whether `a` and `b` (equal
            /// lengths) are bit-identical, word for word, into the next pair
            /// of `diffs`; returns the pair's index. Reads nothing back.
            ///
            /// # Errors
            /// [`DeviceError::ArgLen`](crate::cuda::DeviceError::ArgLen)
            /// when the lengths differ or `diffs` is full (nothing queued);
            /// compile and driver errors of `cu/bit_diff.cu`.
            pub fn queue_bit_diff(
                &self,
                a: &$crate::cuda::Buffer<f32>,
                b: &$crate::cuda::Buffer<f32>,
                diffs: &mut $crate::cuda::BitDiffs,
            ) -> $crate::cuda::Result<usize> {
                diffs.queue(&self.shim, a, b)
            }

            /// Waits for `diffs`' comparisons and reads their verdicts, in
            /// queueing order (one copy back).
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver),
            /// including a fault of an earlier launch.
            pub fn read_bit_diffs(
                &self,
                diffs: &$crate::cuda::BitDiffs,
            ) -> $crate::cuda::Result<Vec<$crate::cuda::BitDiff>> {
                diffs.read(&self.shim)
            }

            /// Allocates an output of `len` elements: guarded and poisoned
            /// when guards are on, uninitialised otherwise.
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn alloc_output<T: ::cudarc::driver::DeviceRepr>(
                &self,
                len: usize,
            ) -> $crate::cuda::Result<$crate::cuda::Buffer<T>> {
                $crate::cuda::buffer::alloc(&self.shim.stream, len, self.shim.guards)
            }

            /// Allocates an intermediate of `len` f32 elements, an output
            /// that a later launch reads before the next check: with guards
            /// on, poisoned and between
            /// [`INTERMEDIATE_BAND`](crate::cuda::INTERMEDIATE_BAND) bands
            /// (a NaN no arithmetic stores), so a read past it meets NaN;
            /// an exact allocation when input bands are off (under
            /// compute-sanitizer); as [`alloc_output`](Self::alloc_output)
            /// with guards off.
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn alloc_intermediate(
                &self,
                len: usize,
            ) -> $crate::cuda::Result<$crate::cuda::Buffer<f32>> {
                $crate::cuda::buffer::alloc_intermediate(&self.shim.stream, len, self.shim.guards)
            }

            /// Waits for all work on the engine's stream.
            ///
            /// # Errors
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver)
            /// with the fault of any earlier launch.
            pub fn synchronize(&self) -> $crate::cuda::Result<()> {
                self.shim.synchronize()
            }

            /// Milliseconds per call of `f`, timed with CUDA events on the
            /// engine's stream around `iters` calls (after the caller's
            /// warm-up). `f` should only launch (the `_into` methods with
            /// guards off).
            ///
            /// # Errors
            /// The first error of `f`;
            /// [`DeviceError::Driver`](crate::cuda::DeviceError::Driver).
            pub fn time_ms(
                &self,
                iters: usize,
                f: impl FnMut() -> $crate::cuda::Result<()>,
            ) -> $crate::cuda::Result<f64> {
                $crate::cuda::open::time_ms(&self.shim.stream, iters, f)
            }
        }
    };
}
pub(crate) use shim_methods;
