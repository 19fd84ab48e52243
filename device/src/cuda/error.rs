//! [`DeviceError`]: everything the CUDA shim can refuse or run into.

use cudarc::driver::DriverError;
use cudarc::nvrtc::result::NvrtcError;
use oracle::fp8_mmq::ShapeError;
use oracle::gdn::GdnError;
use oracle::moe_tables::TablesError;

/// Where to get NVRTC when it is missing; printed by [`DeviceError::NoNvrtc`].
pub const NVRTC_HINT: &str = "install it with `pip install nvidia-cuda-nvrtc` and put \
     $(python3 -c 'import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))')/nvidia/cu13/lib \
     on LD_LIBRARY_PATH (cudarc looks for libnvrtc.so, then libnvrtc.so.13, among others), \
     or use the CUDA toolkit's lib64";

/// An error from the CUDA shim. Argument errors are found before any
/// launch; a bad argument never reaches the GPU.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The CUDA driver library (libcuda.so) cannot be loaded on this
    /// machine, so no GPU work can run here.
    #[error(
        "no CUDA driver: libcuda.so could not be loaded (searched {searched}); \
         the GPU kernels cannot run on this machine"
    )]
    NoDriver {
        /// The library names cudarc tried.
        searched: String,
    },

    /// NVRTC (libnvrtc) cannot be loaded, so no kernel can be compiled.
    #[error("NVRTC could not be loaded (searched {searched}); {hint}")]
    NoNvrtc {
        /// The library names cudarc tried.
        searched: String,
        /// How to install it ([`NVRTC_HINT`]).
        hint: &'static str,
    },

    /// A CUDA driver call failed; `name` is the CUresult's name
    /// (`CUDA_ERROR_ILLEGAL_ADDRESS`, ...), `text` the driver's description.
    #[error("CUDA driver call {op} failed: {name} ({text})")]
    Driver {
        /// What the shim was doing (`"launch fp8_mmq_v2_k0"`, `"cuMemcpyDtoH"`).
        op: String,
        /// `cuGetErrorName`.
        name: String,
        /// `cuGetErrorString`.
        text: String,
        /// The driver's error code.
        #[source]
        source: DriverError,
    },

    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC call {op} failed: {source:?}")]
    Nvrtc {
        /// The call (`"nvrtcCreateProgram"`, `"nvrtcGetCUBIN"`).
        op: &'static str,
        /// NVRTC's status.
        source: NvrtcError,
    },

    /// NVRTC rejected the kernel source; `log` is its compiler output.
    #[error("NVRTC could not compile {source_desc} for {arch}:\n{log}")]
    Compile {
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// The target, `sm_90`.
        arch: String,
        /// The options passed.
        options: String,
        /// NVRTC's program log.
        log: String,
    },

    /// The candidate kernel source named by the environment cannot be used.
    #[error("kernel source {path}: {reason}")]
    KernelSource {
        /// The path given.
        path: String,
        /// Why it cannot be used (I/O error, NUL byte).
        reason: String,
    },

    /// The compiled module lacks a kernel the ABI requires.
    #[error("{source_desc} does not export `extern \"C\"` kernel {name} ({detail})")]
    MissingKernel {
        /// The kernel's name.
        name: String,
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// The driver's answer.
        detail: String,
    },

    /// A kernel was compiled for another thread block cluster than the
    /// ABI launches it with (`__cluster_dims__`; the driver's
    /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`).
    #[error("{source_desc}: kernel {name} is compiled for clusters of {got} CTAs; the ABI launches it in clusters of {want}")]
    ClusterMismatch {
        /// The kernel's name.
        name: &'static str,
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// The cluster width the shim launches.
        want: u32,
        /// The kernel's compiled cluster width.
        got: u32,
    },

    /// The device is older than the kernels need (sm_89: e4m3 `mma` and
    /// `cvt.e4m3x2`).
    #[error(
        "compute capability {major}.{minor} is below 8.9, which the e4m3 mma.sync and cvt need"
    )]
    UnsupportedArch {
        /// Major compute capability.
        major: i32,
        /// Minor compute capability.
        minor: i32,
    },

    /// The device cannot run this instruction (`wgmma` needs sm_90a).
    #[error("{instruction} needs {needs}; this device is compute capability {major}.{minor}")]
    InstructionUnavailable {
        /// The PTX instruction (`"wgmma.mma_async"`).
        instruction: &'static str,
        /// What it needs (`"sm_90a"`).
        needs: &'static str,
        /// Major compute capability.
        major: i32,
        /// Minor compute capability.
        minor: i32,
    },

    /// The shape is not computable (a zero dimension or a length overflow).
    #[error("bad shape: {0}")]
    Shape(ShapeError),

    /// A buffer's length does not match the shape.
    #[error("{arg} has {got} elements, the shape needs {want}")]
    ArgLen {
        /// The argument (`"w"`, `"w_scales"`, `"x"`, `"q"`, `"d"`, `"y"`).
        arg: &'static str,
        /// Elements the shape requires.
        want: usize,
        /// Elements passed.
        got: usize,
    },

    /// The shape is valid but beyond what the kernels index with i32, or
    /// beyond the launch grid limits.
    #[error("{what} = {value} exceeds the kernel's limit {limit} (i32 indexing / grid size)")]
    IndexRange {
        /// Which quantity (`"weight_len"`, `"grid.y"`, ...).
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest value the kernels accept.
        limit: u64,
    },

    /// The weights contain e4m3 codes with NaN magnitude (0x7F or 0xFF),
    /// which the dispatch precondition refuses: the MMA reads them as NaN.
    #[error("weights hold {count} e4m3 code(s) with NaN magnitude (0x7F/0xFF); refused by the dispatch precondition")]
    NanWeights {
        /// How many such bytes.
        count: u64,
    },

    /// A kernel wrote outside its output: the guard band around `arg` was
    /// changed. `offset` is in bytes from the output's first byte (negative:
    /// before it; at or beyond its size: after it).
    #[error("kernel wrote outside output {arg}: guard byte at offset {offset} (bytes from the output's start; output is {len_bytes} bytes) was changed")]
    GuardClobbered {
        /// The output argument.
        arg: &'static str,
        /// First changed guard byte, relative to the output's start.
        offset: i64,
        /// The output's size in bytes.
        len_bytes: usize,
    },

    /// The kernel's plan (launch geometry from `fp8_mmq_plan`) is unusable.
    #[error("{source_desc}: fp8_mmq_plan returned an unusable launch geometry: {detail}")]
    BadPlan {
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// What is wrong.
        detail: String,
    },

    /// The plan declares a schedule code (`plan[15]`) the ABI does not
    /// define (see [`super::schedule_from_code`]).
    #[error("{source_desc}: fp8_mmq_plan declares schedule code {code} for MMQ variant {variant}; the ABI defines 0 (v2: f32 accumulation, separate fold), 1 (f32 accumulation, fused fold), 2 and 3 (sm90 FP8 wgmma accumulation, separate / fused fold), 4 and 5 (sm90 FP8 mma.sync accumulation, separate / fused fold)")]
    UnknownSchedule {
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// The MMQ variant the plan picked (`plan[0]`).
        variant: u32,
        /// The code it declared (`plan[15]`).
        code: u32,
    },

    /// The MoE verify-rows tables were refused before any launch (a
    /// length, as `oracle::moe_tables::check_lengths` finds it).
    #[error("MoE verify-rows tables refused before launch: {0}")]
    MoeTables(TablesError),

    /// The MoE tables kernel flagged pairs the contract refuses (an expert
    /// id out of range, a pointer overflowing 64 bits); the tables were not
    /// returned. `first` is the lowest bad pair's error, the one
    /// `oracle::moe_tables::vrows_tables` returns for the same input.
    #[error("MoE verify-rows tables not returned: the kernel flagged {bad_pairs} bad pair(s); the first: {first}")]
    MoeBadPairs {
        /// Bad pairs the kernel counted.
        bad_pairs: u64,
        /// The lowest bad pair's error.
        first: TablesError,
    },

    /// The MoE tables kernel left a status word that no input explains (a
    /// candidate kernel's bug).
    #[error("{source_desc}: moe_vrows_tables_from_sel left an inconsistent status word: {detail}")]
    MoeBadStatus {
        /// [`super::KernelSource::describe`] of the source.
        source_desc: String,
        /// What is wrong.
        detail: String,
    },

    /// A stream capture ended without a graph (`cuStreamEndCapture` gave
    /// none): nothing was launched while capturing.
    #[error("CUDA graph capture of {what} recorded no work")]
    GraphEmpty {
        /// What was captured (`"gdn packed step"`).
        what: &'static str,
    },

    /// A Gated DeltaNet call was refused before launch: a shape the
    /// contract refuses or a buffer of the wrong length, as `oracle::gdn`
    /// reports it.
    #[error("Gated DeltaNet call refused before launch: {0}")]
    Gdn(GdnError),

    /// A peer kernel (a GEMM nobody here wrote, such as cuBLASLt's) refuses
    /// this shape: its documented alignment rules, or the library itself
    /// (no algorithm, `CUBLAS_STATUS_NOT_SUPPORTED`). Nothing was computed;
    /// the gates count such a case as refused by the peer, not as a
    /// failure.
    #[error("refused by the peer {peer}: {reason}")]
    PeerRefused {
        /// The peer (`"cuBLASLt"`).
        peer: &'static str,
        /// Why, with the rule or the library's status.
        reason: String,
    },

    /// A peer kernel cannot run on this machine at all (its library is
    /// missing or too old, or the device lacks what it needs).
    #[error("the peer {peer} cannot run here: {reason}")]
    PeerUnavailable {
        /// The peer (`"cuBLASLt"`).
        peer: &'static str,
        /// Why.
        reason: String,
    },

    /// A cuBLASLt call failed for a reason other than refusing the shape;
    /// `status` is the `cublasStatus_t` name.
    #[error("cuBLASLt call {op} failed: {status}")]
    CublasLt {
        /// The call (`"cublasLtMatmul"`, `"cublasLtMatmulDescSetAttribute A_SCALE_MODE"`).
        op: String,
        /// `CUBLAS_STATUS_...`.
        status: String,
    },

    /// A host wait on the device did not end within the deadline
    /// ([`super::launch_timeout`]): a launch is still running (a kernel
    /// that does not terminate, or one far slower than any correct one).
    /// The context is lost for the rest of the process
    /// ([`super::context_lost`]).
    #[error("{op}: the device did not finish within {seconds} s ({var}); a launch is still running, the CUDA context is lost for the rest of this process", var = super::ENV_LAUNCH_TIMEOUT)]
    Timeout {
        /// The wait (`"cuStreamSynchronize (guard check)"`).
        op: String,
        /// The deadline, seconds.
        seconds: f64,
    },

    /// Not run: an earlier failure (a sticky driver error, a deadline)
    /// lost the process's CUDA context ([`super::context_lost`]); no call
    /// reaches the device any more.
    #[error("not run: the CUDA context was lost earlier in this process ({first})")]
    ContextLost {
        /// The failure that lost it.
        first: String,
    },

    /// An environment variable of the project holds a value it does not
    /// know.
    #[error("{var}={value:?}: expected {expected}")]
    BadEnv {
        /// The variable (`KERNEL_ORACLE_FP8_MMQ`).
        var: &'static str,
        /// Its value.
        value: String,
        /// The values it takes.
        expected: &'static str,
    },
}

impl DeviceError {
    /// Wraps a driver error with what the shim was doing. A sticky error
    /// ([`super::is_sticky`]) marks the process's context lost.
    pub fn driver(op: impl Into<String>, source: DriverError) -> DeviceError {
        let name = source
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {}", source.0 as u32));
        let text = source
            .error_string()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let sticky = super::is_sticky(source.0);
        let e = DeviceError::Driver {
            op: op.into(),
            name,
            text,
            source,
        };
        if sticky {
            super::deadline::mark_lost(e.to_string(), false);
        }
        e
    }

    /// Whether the error is the kernel source's fault rather than the
    /// machine's: it does not compile, lacks a kernel the ABI requires, or
    /// plans a launch the shim refuses. A gate reports such an engine as a
    /// failing row (exit 1), where a machine that cannot run kernels at all
    /// exits 2.
    pub fn is_source_fault(&self) -> bool {
        matches!(
            self,
            DeviceError::Compile { .. }
                | DeviceError::MissingKernel { .. }
                | DeviceError::BadPlan { .. }
                | DeviceError::UnknownSchedule { .. }
        )
    }
}

impl From<ShapeError> for DeviceError {
    fn from(e: ShapeError) -> DeviceError {
        DeviceError::Shape(e)
    }
}

/// `Result` with [`DeviceError`].
pub type Result<T> = std::result::Result<T, DeviceError>;
