//! Opening a device and loading one kernel source: the sequence every
//! shim's constructor shares (the MoE and GDN engines).

use super::error::{DeviceError, Result};
use super::nvrtc::{compile, nvrtc_available, Compiled};
use super::source::KernelSource;
use super::{driver_available, drv};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

/// Checks libcuda and libnvrtc, opens device `ordinal` and one stream on it.
///
/// # Errors
/// [`DeviceError::NoDriver`], [`DeviceError::NoNvrtc`], [`DeviceError::Driver`].
pub(crate) fn open_device(ordinal: usize) -> Result<(Arc<CudaContext>, Arc<CudaStream>)> {
    driver_available()?;
    nvrtc_available()?;
    let ctx = drv(
        || format!("cuInit / open device {ordinal}"),
        CudaContext::new(ordinal),
    )?;
    // One stream, so cudarc's per-buffer event tracking is not needed.
    // SAFETY: no other stream of this context touches these buffers.
    unsafe { ctx.disable_event_tracking() };
    let stream = drv(|| "cuStreamCreate".into(), ctx.new_stream())?;
    Ok((ctx, stream))
}

/// A kernel source compiled for the device of `ctx` and loaded.
pub(crate) struct Loaded {
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) module: Arc<CudaModule>,
    pub(crate) name: String,
    pub(crate) arch: (i32, i32),
}

impl Loaded {
    /// Compiles `source` for the device's `sm_XY` (NVRTC cache) and loads it.
    ///
    /// # Errors
    /// [`DeviceError::Compile`], [`DeviceError::Driver`].
    pub(crate) fn new(ctx: &Arc<CudaContext>, source: &KernelSource) -> Result<Loaded> {
        use cudarc::driver::sys::CUdevice_attribute as A;
        let attr = |a: A| drv(|| format!("cuDeviceGetAttribute {a:?}"), ctx.attribute(a));
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let name = ctx.name().unwrap_or_else(|_| "unknown device".into());
        let compiled = compile(source, &format!("sm_{major}{minor}"))?;
        let image = if compiled.cubin.is_empty() {
            Ptx::from_src(compiled.ptx.clone())
        } else {
            Ptx::from_binary(compiled.cubin.clone())
        };
        let module = drv(
            || format!("cuModuleLoadData ({})", source.describe()),
            ctx.load_module(image),
        )?;
        Ok(Loaded {
            compiled,
            module,
            name,
            arch: (major, minor),
        })
    }

    /// The kernel `name` of the module.
    ///
    /// # Errors
    /// [`DeviceError::MissingKernel`] naming the source.
    pub(crate) fn function(&self, kernel: &str, source: &KernelSource) -> Result<CudaFunction> {
        self.module
            .load_function(kernel)
            .map_err(|e| DeviceError::MissingKernel {
                name: kernel.to_string(),
                source_desc: source.describe(),
                detail: DeviceError::driver("cuModuleGetFunction", e).to_string(),
            })
    }
}

/// Milliseconds per call of `f`, timed with CUDA events on `stream` around
/// `iters` calls (after the caller's warm-up). `f` should only launch.
///
/// # Errors
/// The first error of `f`; [`DeviceError::Driver`].
pub(crate) fn time_ms(
    stream: &Arc<CudaStream>,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    use cudarc::driver::sys::CUevent_flags;
    let ev = || {
        drv(
            || "cuEventCreate".into(),
            stream
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)),
        )
    };
    let (start, end) = (ev()?, ev()?);
    drv(|| "cuEventRecord".into(), start.record(stream))?;
    for _ in 0..iters {
        f()?;
    }
    drv(|| "cuEventRecord".into(), end.record(stream))?;
    let ms = drv(|| "cuEventElapsedTime".into(), start.elapsed_ms(&end))?;
    Ok(f64::from(ms) / iters.max(1) as f64)
}
