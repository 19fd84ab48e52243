//! The runner: one case through the CUDA kernels, and the verdict. The GEMM
//! is the kernel source's MMQ, or the cuBLASLt peer when
//! `KERNEL_ORACLE_FP8_MMQ` says so ([`gemm_choice`], [`peer`]).

use super::generate::{Arm, CaseData};
use super::judge::{reference, KernelOut, Reference, Verdict};
use device::cuda::{CublasLtFp8, DeviceError, Engine, Fp8Gemm};
use std::sync::OnceLock;

/// Environment variable forcing one MMQ variant (`fp8_mmq_v2_k<v>`, a
/// decimal `v`) for every shape in this process, in place of the plan's
/// choice: the gate, the case command and the fuzzer then check that
/// variant under its own declared schedule (`plan[15]`). Unset or empty:
/// the plan chooses.
pub const ENV_FP8_MMQ_VARIANT: &str = "KERNEL_ORACLE_FP8_MMQ_VARIANT";

/// Environment variable requesting a schedule of the plan's automatic
/// choice: a `plan[15]` code (`device::cuda::SCHEDULE_CODES`: 0 v2, 3 the
/// sm90 e4m3 wgmma with a fused fold, ...); the plan then picks among the
/// variants declaring it ([`Engine::set_mmq_schedule`]). Unset or empty:
/// any schedule. A forced variant ([`ENV_FP8_MMQ_VARIANT`]) takes
/// precedence.
pub const ENV_FP8_MMQ_SCHEDULE: &str = "KERNEL_ORACLE_FP8_MMQ_SCHEDULE";

/// The schedule [`ENV_FP8_MMQ_SCHEDULE`] requests, `None` when unset or
/// empty.
///
/// # Errors
/// A message naming the value when it is not a defined code.
pub fn requested_schedule() -> Result<Option<oracle::fp8_mmq::Schedule>, String> {
    match std::env::var(ENV_FP8_MMQ_SCHEDULE) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse::<u32>()
            .ok()
            .and_then(device::cuda::schedule_from_code)
            .map(Some)
            .ok_or_else(|| {
                format!("{ENV_FP8_MMQ_SCHEDULE}={v:?}: not a schedule code (0 .. 5, see cu/fp8_mmq.cu, plan[15])")
            }),
        _ => Ok(None),
    }
}

/// The variant [`ENV_FP8_MMQ_VARIANT`] forces, `None` when unset or empty.
///
/// # Errors
/// A message naming the value when it is not a decimal `u32`.
pub fn forced_variant() -> Result<Option<u32>, String> {
    match std::env::var(ENV_FP8_MMQ_VARIANT) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map(Some).map_err(|_| {
            format!("{ENV_FP8_MMQ_VARIANT}={v:?}: not a variant number (a decimal integer)")
        }),
        _ => Ok(None),
    }
}

/// The process's CUDA engine on device 0, with guard bands on every output
/// (an out-of-bounds write fails the case even when the values look
/// right). The kernel source is the candidate named by
/// `KERNEL_ORACLE_FP8_MMQ_CU`, else the builtin `cu/fp8_mmq.cu`; the MMQ
/// variant is the one [`ENV_FP8_MMQ_VARIANT`] forces, else the plan's.
///
/// # Errors
/// Why no engine could be made (no driver, no NVRTC, no device, the source
/// does not compile, a forced variant the source does not export), as a
/// message; the same message on every call.
pub fn engine() -> Result<&'static Engine, String> {
    engine_cell().as_ref().map_err(|(msg, _)| msg.clone())
}

/// Whether [`engine`] failed because of the kernel source (it does not
/// compile, lacks a kernel, plans a launch the shim refuses:
/// [`DeviceError::is_source_fault`]) rather than the machine: the gate
/// reports that as a failing row.
pub fn engine_source_fault() -> bool {
    matches!(engine_cell(), Err((_, true)))
}

fn engine_cell() -> &'static Result<Engine, (String, bool)> {
    static ENGINE: OnceLock<Result<Engine, (String, bool)>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut e = Engine::new(0).map_err(|e| (e.to_string(), e.is_source_fault()))?;
        e.set_guards(true);
        if let Some(v) = forced_variant().map_err(|m| (m, false))? {
            e.set_mmq_variant(Some(v))
                .map_err(|e| (e.to_string(), e.is_source_fault()))?;
        }
        if let Some(s) = requested_schedule().map_err(|m| (m, false))? {
            e.set_mmq_schedule(Some(s))
                .map_err(|e| (e.to_string(), e.is_source_fault()))?;
        }
        Ok(e)
    })
}

/// The FP8 GEMM `KERNEL_ORACLE_FP8_MMQ` chooses ([`Fp8Gemm::from_env`]),
/// read once per process.
///
/// # Errors
/// The message for an unknown value (the command line exits 2 with it;
/// the fuzzer panics with it).
pub fn gemm_choice() -> Result<Fp8Gemm, String> {
    static CHOICE: OnceLock<Result<Fp8Gemm, String>> = OnceLock::new();
    CHOICE
        .get_or_init(|| Fp8Gemm::from_env().map_err(|e| e.to_string()))
        .clone()
}

/// The process's cuBLASLt peer on [`engine`]'s stream, guards on, when
/// [`gemm_choice`] asks for it; `None` for the builtin MMQ. The quantizer
/// and the NaN count stay the engine's kernels either way.
///
/// # Errors
/// Why the peer cannot run (no engine, an unknown choice, no cuBLASLt, not
/// sm_90), as a message; the same on every call.
pub fn peer() -> Result<Option<&'static CublasLtFp8>, String> {
    static PEER: OnceLock<Result<Option<CublasLtFp8>, String>> = OnceLock::new();
    PEER.get_or_init(|| match gemm_choice()? {
        Fp8Gemm::Builtin => Ok(None),
        Fp8Gemm::CublasLt(layout) => {
            let mut p = CublasLtFp8::new(engine()?, layout).map_err(|e| e.to_string())?;
            p.set_guards(true);
            Ok(Some(p))
        }
    })
    .as_ref()
    .map(Option::as_ref)
    .map_err(Clone::clone)
}

/// The GEMM in use, for report headers: the builtin MMQ of the kernel
/// source, or [`CublasLtFp8::describe`] (library, layout, declared
/// schedule).
pub fn gemm_description() -> String {
    match peer() {
        Ok(Some(p)) => p.describe(),
        Ok(None) => match forced_variant() {
            Ok(Some(v)) => format!(
                "the kernel source's MMQ, variant fp8_mmq_v2_k{v} forced ({ENV_FP8_MMQ_VARIANT})"
            ),
            _ => match requested_schedule() {
                Ok(Some(s)) => format!(
                    "the kernel source's MMQ (fp8_mmq_v2_k<variant>, the plan's choice among the variants declaring {s}, {ENV_FP8_MMQ_SCHEDULE})"
                ),
                _ => "the kernel source's MMQ (fp8_mmq_v2_k<variant>, the plan's choice)"
                    .to_string(),
            },
        },
        Err(e) => format!("unavailable: {e}"),
    }
}

/// What ran, for divergence reports: the kernel source and, when the GEMM
/// is the cuBLASLt peer, the peer.
pub fn kernel_description(engine: &Engine) -> String {
    describe(engine, peer().ok().flatten())
}

fn describe(engine: &Engine, gemm: Option<&CublasLtFp8>) -> String {
    match gemm {
        Some(p) => format!("{}; GEMM: {}", engine.kernel_source(), p.describe()),
        None => match engine.mmq_variant_forced() {
            Some(v) => format!(
                "{}; MMQ variant k{v} forced ({ENV_FP8_MMQ_VARIANT}={v})",
                engine.kernel_source()
            ),
            None => engine.kernel_source(),
        },
    }
}

/// Runs `f` with MMQ variant `variant` forced on `engine`
/// ([`Engine::set_mmq_variant`]; `None`: the plan's pick), then restores
/// the setting it found.
///
/// # Errors
/// The message when the source exports no such variant (`f` not run).
pub fn with_variant<R>(
    engine: &Engine,
    variant: Option<u32>,
    f: impl FnOnce() -> R,
) -> Result<R, String> {
    let before = engine.mmq_variant_forced();
    engine.set_mmq_variant(variant).map_err(|e| e.to_string())?;
    let r = f();
    engine
        .set_mmq_variant(before)
        .expect("the variant forced before was exported");
    Ok(r)
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
    /// The GEMM is a peer ([`peer`]) and it refuses this shape
    /// ([`DeviceError::PeerRefused`]): not compared, not a failure.
    PeerRefused {
        /// The peer's reason.
        reason: String,
    },
    /// The device failed on a valid case, or answered in a way no verdict
    /// covers: a launch error, a write past an output (a guard band
    /// changed), a fault, a launch past the deadline, a plan the shim
    /// refuses, a NaN count other than the oracle's, a NaN-weight case
    /// computed instead of refused, or a case not run because an earlier
    /// failure lost the CUDA context. Always a failure.
    Failed {
        /// What happened, with the kernel source.
        message: String,
    },
}

impl Outcome {
    /// [`Outcome::Failed`] for device error `e` on the GEMM `gemm`.
    fn device_failed(engine: &Engine, gemm: Option<&CublasLtFp8>, e: &DeviceError) -> Outcome {
        Outcome::Failed {
            message: format!(
                "the device failed on a valid case ({}): {e}",
                describe(engine, gemm)
            ),
        }
    }
}

/// Runs `data` through the NaN count, the quantizer and the MMQ, downloads
/// everything and judges it against the oracle. A device error (a driver
/// error, a clobbered guard band, a deadline) is [`Outcome::Failed`], never
/// a panic, so a gate goes on with its next row.
pub fn run_case(engine: &Engine, data: &CaseData, arm: Arm) -> Outcome {
    let nan = oracle::fp8_mmq::count_nan_magnitude(&data.w);
    if nan == 0 {
        let schedule = match declared_schedule(engine, &data.shape) {
            Ok(s) => s,
            Err(message) => return Outcome::Failed { message },
        };
        let want = reference(data, schedule);
        return run_case_with_reference(engine, data, arm, &want);
    }
    // The oracle refuses (rule NAN-W): no GEMM to compute, the device must
    // refuse too, with the same count.
    match kernel_out(engine, the_peer(), data) {
        Err(DeviceError::NanWeights { count }) => nan_refusal(engine, count, nan),
        Ok(_) => Outcome::Failed {
            message: format!(
                "the device computed a case with {nan} NaN-magnitude weight codes, which the dispatch precondition must refuse ({})",
                kernel_description(engine)
            ),
        },
        Err(e) => Outcome::device_failed(engine, the_peer(), &e),
    }
}

/// The device refused with `count` NaN weight codes, the oracle counts
/// `want`: [`Outcome::Refused`] when they agree, else [`Outcome::Failed`].
fn nan_refusal(engine: &Engine, count: u64, want: usize) -> Outcome {
    if count == want as u64 {
        Outcome::Refused { count }
    } else {
        Outcome::Failed {
            message: format!(
                "the device refused with {count} NaN weight codes, the oracle counts {want} ({})",
                kernel_description(engine)
            ),
        }
    }
}

/// The schedule the GEMM declares for `shape`: the cuBLASLt peer's own
/// ([`CublasLtFp8::schedule`]) when `KERNEL_ORACLE_FP8_MMQ` selects it,
/// else `plan[15]` of the variant the kernel source's plan picks or the
/// engine forces. The oracle's answer for a case of this shape is computed
/// under it.
///
/// # Errors
/// When the plan cannot be had (a driver error, a plan the shim refuses,
/// a schedule code the ABI does not define), the message.
pub fn declared_schedule(
    engine: &Engine,
    shape: &oracle::fp8_mmq::Shape,
) -> Result<oracle::fp8_mmq::Schedule, String> {
    if let Some(p) = the_peer() {
        return Ok(p.schedule());
    }
    engine.plan(shape).map(|p| p.schedule).map_err(|e| {
        format!(
            "no usable plan for m={} in_f={} out_f={}{} ({}): {e}",
            shape.m(),
            shape.in_f(),
            shape.out_f(),
            engine
                .mmq_variant_forced()
                .map_or(String::new(), |v| format!(", variant {v} forced")),
            engine.kernel_source()
        )
    })
}

/// [`run_case`] with the oracle's answer already computed (under the
/// kernel's declared schedule, [`declared_schedule`]).
pub fn run_case_with_reference(
    engine: &Engine,
    data: &CaseData,
    arm: Arm,
    want: &Reference,
) -> Outcome {
    run_case_with_gemm(engine, the_peer(), data, arm, want)
}

/// A NaN-weight case on the device: the count of NaN-magnitude weight
/// codes its precondition kernel found (`fp8_nan_count`), with which the
/// shim refused the case. The refusal comes from
/// [`Engine::check_weights`], which hands out the `CheckedWeights` the
/// GEMM takes only when the count is zero, so a refused case launches
/// neither the quantizer nor the GEMM.
///
/// # Errors
/// A message when the device computed the case instead of refusing it
/// (with its output's length), or failed otherwise (the driver's error).
pub fn device_refusal(engine: &Engine, data: &CaseData) -> Result<u64, String> {
    match kernel_out(engine, the_peer(), data) {
        Err(DeviceError::NanWeights { count }) => Ok(count),
        Ok(out) => Err(format!(
            "the device computed the case ({} outputs) instead of refusing it",
            out.y.len()
        )),
        Err(e) => Err(format!("the device failed: {e}")),
    }
}

/// [`peer`], or a panic with its message (the command line and the fuzzer
/// have checked it already).
fn the_peer() -> Option<&'static CublasLtFp8> {
    peer().unwrap_or_else(|e| panic!("fp8_mmq: {e}"))
}

/// [`run_case_with_reference`] with the GEMM given: `None` for the kernel
/// source's MMQ, `Some(peer)` for a cuBLASLt peer (tests run both layouts
/// in one process this way).
pub fn run_case_with_gemm(
    engine: &Engine,
    gemm: Option<&CublasLtFp8>,
    data: &CaseData,
    arm: Arm,
    want: &Reference,
) -> Outcome {
    let t0 = std::time::Instant::now();
    let got = kernel_out(engine, gemm, data);
    let device_time = t0.elapsed();
    match got {
        Ok(got) => {
            let mut v = Verdict::judge(data, arm, &got, want);
            v.device_time = device_time;
            Outcome::Judged(Box::new(v))
        }
        Err(DeviceError::NanWeights { count }) => nan_refusal(engine, count, want.nan),
        Err(e @ DeviceError::PeerRefused { .. }) => Outcome::PeerRefused {
            reason: e.to_string(),
        },
        Err(e) => Outcome::device_failed(engine, gemm, &e),
    }
}

fn kernel_out(
    engine: &Engine,
    gemm: Option<&CublasLtFp8>,
    data: &CaseData,
) -> Result<KernelOut, DeviceError> {
    let s = &data.shape;
    let w = engine.upload(&data.w)?;
    let scales = engine.upload(&data.scales)?;
    let x = engine.upload(&data.x)?;
    // The NaN-count kernel runs here; a non-zero count is the refusal.
    let checked = engine.check_weights(&w)?;
    let (q, d) = engine.quantize(&x, s)?;
    let given = match &data.qd {
        Some((gq, gd)) => Some((engine.upload(gq)?, engine.upload(gd)?)),
        None => None,
    };
    let (gq, gd) = given.as_ref().map_or((&q, &d), |(a, b)| (a, b));
    // The GEMM: the kernel source's MMQ, or the peer (it refuses shapes it
    // cannot take: DeviceError::PeerRefused).
    let y = match gemm {
        None => engine.mmq(&checked, &scales, gq, gd, s)?,
        Some(p) => p.mmq(&checked, &scales, gq, gd, s)?,
    };
    Ok(KernelOut {
        nan: 0, // check_weights counted none
        q: engine.download(&q)?,
        d: engine.download(&d)?,
        y: engine.download(&y)?,
    })
}
