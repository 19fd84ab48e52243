//! Waiting for the device with a deadline, and what a lost context means.
//!
//! Two device failures end the usefulness of the process's CUDA context:
//!
//! 1. **A sticky error.** After a kernel faults (`CUDA_ERROR_ILLEGAL_ADDRESS`,
//!    `CUDA_ERROR_LAUNCH_FAILED`, a trap, a misaligned address, ...), every
//!    later driver call on the context returns the same error (CUDA driver
//!    API, "Error Handling": these errors leave the context in an unusable
//!    state; only destroying it recovers). Every engine of this crate opens
//!    device 0's primary context, so one fault ends all of them.
//! 2. **A launch that does not finish.** A kernel cannot be stopped from
//!    the host inside the process that launched it; the driver ends it only
//!    when the context is destroyed, which is what process exit does. A
//!    blocking `cuStreamSynchronize` would wait forever.
//!
//! So the shim never blocks on the device without a deadline: every host
//! wait ([`settle`]) polls `cuStreamQuery` until the stream's work is done,
//! a driver error comes back, or [`launch_timeout`] passes
//! ([`DeviceError::Timeout`]). Either failure is recorded once per process
//! ([`context_lost`]); from then on every shim call that would touch the
//! device returns [`DeviceError::ContextLost`] at once, so a gate can print
//! its remaining rows as not run (each with its own reproduction) and exit.
//! [`exit_process`] ends the process without running exit handlers when a
//! launch is still running, so no library teardown waits on it; the driver
//! destroys the context, and the running kernel with it, when the process's
//! device files close.
//!
//! Recovering in-process (resetting the primary context and reopening every
//! engine) was not chosen: each engine is opened once per process and
//! shared, and a reset invalidates every module, stream and buffer any of
//! them holds. A row that cannot run says so, and its rerun line runs it
//! alone in a fresh process.

use super::error::{DeviceError, Result};
use cudarc::driver::sys::CUresult;
use cudarc::driver::CudaStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable: the deadline of one host wait on the device, in
/// seconds (a decimal, `0` for none); default [`DEFAULT_LAUNCH_TIMEOUT_S`].
/// A wait covers the launches queued since the previous one (with guards
/// on, one launch or the few of one call).
pub const ENV_LAUNCH_TIMEOUT: &str = "KERNEL_ORACLE_LAUNCH_TIMEOUT";

/// The default deadline of one host wait, seconds: the gates' largest
/// launch (5120 x 1536 x 512 on the FP8 MMQ) takes milliseconds on an H200,
/// so 10 s is far from any correct kernel and short enough for a gate.
pub const DEFAULT_LAUNCH_TIMEOUT_S: f64 = 10.0;

/// The deadline [`ENV_LAUNCH_TIMEOUT`] sets, `None` for no deadline (`0`).
///
/// # Errors
/// [`DeviceError::BadEnv`] for a value that is not a non-negative decimal.
pub fn launch_timeout() -> Result<Option<Duration>> {
    parse_launch_timeout(
        std::env::var_os(ENV_LAUNCH_TIMEOUT)
            .map(|v| v.to_string_lossy().into_owned())
            .as_deref(),
    )
}

/// [`launch_timeout`] of the variable's value (`None`: unset).
///
/// # Errors
/// As [`launch_timeout`].
pub fn parse_launch_timeout(value: Option<&str>) -> Result<Option<Duration>> {
    let Some(s) = value else {
        return Ok(Some(Duration::from_secs_f64(DEFAULT_LAUNCH_TIMEOUT_S)));
    };
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok((x > 0.0).then(|| Duration::from_secs_f64(x))),
        _ => Err(DeviceError::BadEnv {
            var: ENV_LAUNCH_TIMEOUT,
            value: s.to_string(),
            expected: "seconds, a non-negative decimal (0: no deadline)",
        }),
    }
}

/// How the process's CUDA context was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    /// What happened, as the error that lost it displays.
    pub what: String,
    /// Whether a launch is still running (a deadline passed): the process
    /// must end without waiting for the device ([`exit_process`]).
    pub running: bool,
}

static LOST: Mutex<Option<Lost>> = Mutex::new(None);

/// The first failure that lost the process's CUDA context, if any (see the
/// module doc).
pub fn context_lost() -> Option<Lost> {
    LOST.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Records the first loss of the context; later ones keep the first.
pub(crate) fn mark_lost(what: String, running: bool) {
    let mut l = LOST.lock().unwrap_or_else(|e| e.into_inner());
    if l.is_none() {
        *l = Some(Lost { what, running });
    }
}

/// `Ok` while the context is usable; [`DeviceError::ContextLost`] naming
/// the first failure once it is not. Every shim call that would touch the
/// device asks first.
///
/// # Errors
/// [`DeviceError::ContextLost`].
pub(crate) fn alive() -> Result<()> {
    match context_lost() {
        None => Ok(()),
        Some(l) => Err(DeviceError::ContextLost { first: l.what }),
    }
}

/// Whether a driver error leaves the context unusable (a sticky error):
/// the kernel faults of the driver API's error list. Other errors (an
/// invalid launch configuration, out of memory, a missing function) leave
/// the context as it was.
pub fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK
    )
}

/// Waits for all work queued on `stream` (what `cuStreamSynchronize`
/// does), polling `cuStreamQuery`, for at most [`launch_timeout`]; `op`
/// names the wait in errors (`"cuStreamSynchronize (guard check)"`).
///
/// # Errors
/// [`DeviceError::ContextLost`] before touching the device when the
/// context is already lost; [`DeviceError::Driver`] with the fault of an
/// earlier launch (a sticky one marks the context lost);
/// [`DeviceError::Timeout`] when the deadline passes (the context is marked
/// lost with a launch running); [`DeviceError::BadEnv`] for a bad
/// [`ENV_LAUNCH_TIMEOUT`].
pub(crate) fn settle(stream: &Arc<CudaStream>, op: &str) -> Result<()> {
    alive()?;
    let deadline = launch_timeout()?;
    super::drv(|| op.to_string(), stream.context().bind_to_thread())?;
    let t0 = Instant::now();
    // The first millisecond polls without sleeping (a sleep lasts at least
    // the timer slack, ~50 us, which would slow the fuzzers' short
    // launches); then sleeps growing to 1 ms between polls.
    let spin = Duration::from_millis(1);
    let mut pause = Duration::from_micros(50);
    loop {
        // SAFETY: the stream is alive (held by `stream`) and current.
        let r = unsafe { cudarc::driver::sys::cuStreamQuery(stream.cu_stream()) };
        match r {
            CUresult::CUDA_SUCCESS => return Ok(()),
            CUresult::CUDA_ERROR_NOT_READY => {}
            _ => return Err(DeviceError::driver(op, r.result().unwrap_err())),
        }
        if let Some(d) = deadline {
            if t0.elapsed() >= d {
                let e = DeviceError::Timeout {
                    op: op.to_string(),
                    seconds: d.as_secs_f64(),
                };
                mark_lost(e.to_string(), true);
                return Err(e);
            }
        }
        if t0.elapsed() < spin {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }
}

/// Ends the process with exit status `code` after flushing standard output
/// and error. When a launch is still running ([`Lost::running`]), exit
/// handlers and destructors are skipped (`_exit`), so nothing waits on the
/// device; the driver ends the kernel as the process's device files close.
/// Otherwise an ordinary [`std::process::exit`].
pub fn exit_process(code: u8) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if context_lost().is_some_and(|l| l.running) {
        extern "C" {
            fn _exit(status: std::ffi::c_int) -> !;
        }
        // SAFETY: `_exit` ends the process; nothing runs after it.
        unsafe { _exit(std::ffi::c_int::from(code)) }
    }
    std::process::exit(i32::from(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_defaults_to_ten_seconds_and_zero_means_none() {
        let secs = |v| parse_launch_timeout(v).map(|d| d.map(|d| d.as_secs_f64()));
        assert_eq!(secs(None).unwrap(), Some(10.0));
        assert_eq!(secs(Some("2.5")).unwrap(), Some(2.5));
        assert_eq!(secs(Some(" 0 ")).unwrap(), None);
        for bad in ["-1", "ten", "inf", "NaN", ""] {
            let e = parse_launch_timeout(Some(bad)).expect_err(bad);
            assert!(e.to_string().contains(ENV_LAUNCH_TIMEOUT), "{e}");
        }
    }

    #[test]
    fn kernel_faults_are_sticky_and_argument_errors_are_not() {
        for c in [
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
            CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        ] {
            assert!(is_sticky(c), "{c:?}");
        }
        for c in [
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_NOT_FOUND,
            CUresult::CUDA_ERROR_NOT_READY,
        ] {
            assert!(!is_sticky(c), "{c:?}");
        }
    }
}
