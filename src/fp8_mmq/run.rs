//! The runner: one case through the CUDA kernels, and the verdict.

use super::generate::{Arm, CaseData};
use super::judge::{reference, KernelOut, Reference, Verdict};
use device::cuda::{DeviceError, Engine};
use std::sync::OnceLock;

/// The process's CUDA engine on device 0, with guard bands on every output
/// (an out-of-bounds write fails the case even when the values look
/// right). The kernel source is the candidate named by
/// `KERNEL_ORACLE_FP8_MMQ_CU`, else the builtin `cu/fp8_mmq.cu`.
///
/// # Errors
/// Why no engine could be made (no driver, no NVRTC, no device, the source
/// does not compile), as a message; the same message on every call.
pub fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut e = Engine::new(0).map_err(|e| e.to_string())?;
            e.set_guards(true);
            Ok(e)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// How a case ended.
#[derive(Debug)]
pub enum Outcome {
    /// The dispatch precondition refused the weights (rule `NAN-W`): the
    /// device counted this many NaN-magnitude codes. Not compared.
    Refused {
        /// NaN-magnitude weight codes.
        count: u64,
    },
    /// The kernels ran; the verdict says whether they agree.
    Judged(Box<Verdict>),
}

/// Runs `data` through the NaN count, the quantizer and the MMQ, downloads
/// everything and judges it against the oracle.
///
/// # Panics
/// On a driver error, an argument the shim refuses (the case library only
/// makes valid ones) or a clobbered guard band: each is a bug.
pub fn run_case(engine: &Engine, data: &CaseData, arm: Arm) -> Outcome {
    let nan = oracle::fp8_mmq::count_nan_magnitude(&data.w);
    if nan == 0 {
        let want = reference(data, declared_schedule(engine, &data.shape));
        return run_case_with_reference(engine, data, arm, &want);
    }
    // The oracle refuses (rule NAN-W): no GEMM to compute, the device must
    // refuse too, with the same count.
    match kernel_out(engine, data) {
        Err(DeviceError::NanWeights { count }) => {
            assert_eq!(
                count, nan as u64,
                "the device and the oracle count NaN weight codes differently"
            );
            Outcome::Refused { count }
        }
        Ok(_) => panic!(
            "fp8_mmq: the device computed a case with {nan} NaN-magnitude weight codes, which the dispatch precondition must refuse ({})",
            engine.kernel_source()
        ),
        Err(e) => panic!(
            "fp8_mmq: the device failed on a valid case ({}): {e}",
            engine.kernel_source()
        ),
    }
}

/// The schedule the kernel declares for `shape` (`plan[15]` of the variant
/// its plan picks or the engine forces): what the oracle's answer for a
/// case of this shape must be computed under.
///
/// # Panics
/// When the plan cannot be had (a driver error, a plan the shim refuses,
/// a schedule code the ABI does not define), with the error.
pub fn declared_schedule(
    engine: &Engine,
    shape: &oracle::fp8_mmq::Shape,
) -> oracle::fp8_mmq::Schedule {
    match engine.plan(shape) {
        Ok(p) => p.schedule,
        Err(e) => panic!(
            "fp8_mmq: no usable plan for m={} in_f={} out_f={} ({}): {e}",
            shape.m(),
            shape.in_f(),
            shape.out_f(),
            engine.kernel_source()
        ),
    }
}

/// [`run_case`] with the oracle's answer already computed (under the
/// kernel's declared schedule, [`declared_schedule`]).
///
/// # Panics
/// As [`run_case`]; also if the kernel's NaN count disagrees with the
/// oracle's on a refused case.
pub fn run_case_with_reference(
    engine: &Engine,
    data: &CaseData,
    arm: Arm,
    want: &Reference,
) -> Outcome {
    let t0 = std::time::Instant::now();
    let got = kernel_out(engine, data);
    let device_time = t0.elapsed();
    match got {
        Ok(got) => {
            let mut v = Verdict::judge(data, arm, &got, want);
            v.device_time = device_time;
            Outcome::Judged(Box::new(v))
        }
        Err(DeviceError::NanWeights { count }) => {
            assert_eq!(
                count, want.nan as u64,
                "the device and the oracle count NaN weight codes differently"
            );
            Outcome::Refused { count }
        }
        Err(e) => panic!(
            "fp8_mmq: the device failed on a valid case ({}): {e}",
            engine.kernel_source()
        ),
    }
}

fn kernel_out(engine: &Engine, data: &CaseData) -> Result<KernelOut, DeviceError> {
    let s = &data.shape;
    let w = engine.upload(&data.w)?;
    let scales = engine.upload(&data.scales)?;
    let x = engine.upload(&data.x)?;
    // The NaN-count kernel runs here; a non-zero count is the refusal.
    let checked = engine.check_weights(&w)?;
    let (q, d) = engine.quantize(&x, s)?;
    let y = match &data.qd {
        Some((gq, gd)) => engine.mmq(
            &checked,
            &scales,
            &engine.upload(gq)?,
            &engine.upload(gd)?,
            s,
        )?,
        None => engine.mmq(&checked, &scales, &q, &d, s)?,
    };
    Ok(KernelOut {
        nan: 0, // check_weights counted none
        q: engine.download(&q)?,
        d: engine.download(&d)?,
        y: engine.download(&y)?,
    })
}
