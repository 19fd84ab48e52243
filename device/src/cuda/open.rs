//! Opening a device, reading its attributes and timing launches: the
//! driver sequences every engine shares (through [`super::shim::Shim`]).

use super::error::Result;
use super::nvrtc::nvrtc_available;
use super::{driver_available, drv};
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

/// Checks libcuda and libnvrtc and opens device `ordinal` (its primary
/// context, event tracking off); no stream yet.
///
/// # Errors
/// [`DeviceError::NoDriver`], [`DeviceError::NoNvrtc`], [`DeviceError::Driver`].
pub(crate) fn open_device(ordinal: usize) -> Result<Arc<CudaContext>> {
    driver_available()?;
    nvrtc_available()?;
    let ctx = drv(
        || format!("cuInit / open device {ordinal}"),
        CudaContext::new(ordinal),
    )?;
    // One stream per engine, so cudarc's per-buffer event tracking is not
    // needed. SAFETY: no other stream of this context touches these buffers.
    unsafe { ctx.disable_event_tracking() };
    Ok(ctx)
}

/// A new stream on `ctx`.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn new_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    drv(|| "cuStreamCreate".into(), ctx.new_stream())
}

/// Device attribute `a` of `ctx`'s device.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn attribute(ctx: &Arc<CudaContext>, a: CUdevice_attribute) -> Result<i32> {
    drv(|| format!("cuDeviceGetAttribute {a:?}"), ctx.attribute(a))
}

/// Milliseconds per call of `f`, timed with CUDA events on `stream` around
/// `iters` calls (after the caller's warm-up). `f` should only launch. The
/// host waits for the end event under the launch deadline
/// ([`super::deadline::settle`]) before reading the elapsed time, since
/// reading it synchronises on the events without one.
///
/// # Errors
/// The first error of `f`; [`DeviceError::Driver`];
/// [`DeviceError::Timeout`] past the deadline; [`DeviceError::ContextLost`]
/// after an earlier one.
pub(crate) fn time_ms(
    stream: &Arc<CudaStream>,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    use cudarc::driver::sys::CUevent_flags;
    super::deadline::alive()?;
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
    super::deadline::settle(stream, "cuStreamSynchronize (timing)")?;
    let ms = drv(|| "cuEventElapsedTime".into(), start.elapsed_ms(&end))?;
    Ok(f64::from(ms) / iters.max(1) as f64)
}
