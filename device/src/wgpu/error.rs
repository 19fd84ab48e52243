//! [`WgpuError`]: everything the wgpu shim can refuse or run into.

use oracle::ggml::GgmlError;

/// An error from the wgpu shim. Argument, limit and geometry errors are
/// found before anything is uploaded; a bad argument never reaches the GPU.
#[derive(Debug, thiserror::Error)]
pub enum WgpuError {
    /// `WGPU_BACKEND` is set but names no backend this build knows
    /// (`vulkan`/`vk`, `gl`, `metal`, `dx12`, ...).
    #[error("WGPU_BACKEND={value:?} names no wgpu backend (this build has Vulkan only: WGPU_BACKEND=vulkan, or unset)")]
    BadBackendEnv {
        /// The variable's value.
        value: String,
    },

    /// No adapter on the requested backends. On a machine without a Vulkan
    /// driver: install `mesa-vulkan-drivers libvulkan1` (lavapipe).
    #[error(
        "no wgpu adapter on backends {backends}: {reason} (for CPU Vulkan install \
         mesa-vulkan-drivers and libvulkan1; WGPU_BACKEND picks other backends)"
    )]
    NoAdapter {
        /// The backends asked for (`"VULKAN"`).
        backends: String,
        /// wgpu's reason.
        reason: String,
    },

    /// The adapter would not open a device.
    #[error("adapter {adapter} refused to open a device: {reason}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's reason.
        reason: String,
    },

    /// The shader needs a feature the adapter lacks (a candidate that
    /// declares `enable f16;` needs `SHADER_F16`, `enable subgroups;`
    /// needs `SUBGROUP`).
    #[error("adapter {adapter} lacks feature {feature}, which the shader needs")]
    MissingFeature {
        /// The adapter's name.
        adapter: String,
        /// The wgpu feature (`"SHADER_F16"`, `"SUBGROUP"`).
        feature: &'static str,
    },

    /// `KERNEL_ORACLE_MUL_MAT_SUBGROUPS` ([`super::ENV_MUL_MAT_SUBGROUPS`])
    /// is set to a value other than `off`, `0`, `plain`, `on`, `1`, `auto`
    /// or empty.
    #[error("KERNEL_ORACLE_MUL_MAT_SUBGROUPS={value:?} is not a policy (off, plain, 0; on, 1; auto, or unset)")]
    BadSubgroupEnv {
        /// The variable's value.
        value: String,
    },

    /// [`super::Form::Subgroup`] asked of an engine without a subgroup
    /// form: the source has no `// SUBGROUP: ` lines, the adapter lacks
    /// `Features::SUBGROUP`, or its subgroup size is not one size
    /// ([`super::subgroup::lanes_for`]).
    #[error("no subgroup form of {source_desc}: {reason}")]
    NoSubgroupForm {
        /// [`super::ShaderSource::describe`].
        source_desc: String,
        /// Why ([`super::WgpuEngine::subgroup_form`]).
        reason: String,
    },

    /// [`super::QuantPath::Dequant`] asked of a case it cannot serve: an f32
    /// src0 (nothing to dequantize), or a shader that declares no
    /// `fn dequant` entry.
    #[error("the dequantize-then-GEMM path cannot run {dtype} on {source_desc}: {reason}")]
    NoDequant {
        /// The dtype asked for.
        dtype: &'static str,
        /// [`super::ShaderSource::describe`].
        source_desc: String,
        /// Why.
        reason: &'static str,
    },

    /// A buffer is larger than the adapter allows for one storage binding
    /// (lavapipe: 128 MiB) or for one buffer.
    #[error("{arg} needs {bytes} bytes, beyond the adapter's {limit_name} of {limit} bytes")]
    BufferTooLarge {
        /// The binding (`"src0"`, `"src1"`, `"dst"`).
        arg: &'static str,
        /// Bytes it needs (including padding, and the NaN band after an
        /// input or the guard band after `dst`).
        bytes: u64,
        /// The limit (bytes).
        limit: u64,
        /// `max_storage_buffer_binding_size` or `max_buffer_size`.
        limit_name: &'static str,
    },

    /// A size does not fit the shader's 32-bit indices (`m`, `n`, `k`,
    /// byte offsets into `src0`, element offsets into `src1` and `dst`).
    #[error("{what} = {value} does not fit the shader's 32-bit indices")]
    Index32 {
        /// What overflowed.
        what: &'static str,
        /// Its value.
        value: u64,
    },

    /// The shapes or lengths break the `oracle::ggml::mul_mat` contract.
    #[error("mul_mat arguments: {0}")]
    Shape(GgmlError),

    /// The workgroup geometry is invalid or beyond the adapter's limits.
    #[error("geometry WG_M={wg_m} WG_N={wg_n} TILE_K={tile_k}: {reason}")]
    Geometry {
        /// Threads along m.
        wg_m: u32,
        /// Threads along n.
        wg_n: u32,
        /// k per staged tile.
        tile_k: u32,
        /// What is wrong, with the limit.
        reason: String,
    },

    /// More workgroups along one grid dimension than the adapter allows.
    #[error("grid dimension {dim} needs {groups} workgroups, the adapter allows {limit}")]
    GridTooLarge {
        /// `"x"` (m tiles) or `"y"` (n tiles).
        dim: &'static str,
        /// Workgroups needed.
        groups: u64,
        /// `max_compute_workgroups_per_dimension`.
        limit: u32,
    },

    /// The shader source does not validate or the pipeline cannot be built
    /// (WGSL parse or validation error, an unknown override constant).
    #[error("shader {source_desc} ({dtype}): {message}")]
    Compile {
        /// [`super::ShaderSource::describe`].
        source_desc: String,
        /// The dtype the pipeline was built for.
        dtype: &'static str,
        /// wgpu's message.
        message: String,
    },

    /// The shader's declarations cannot be read or are not what the shim
    /// needs (`super::ShaderDecl`): a missing `const TILE_M`, a tile given
    /// as an `override` or an expression, an `enable` the shim cannot
    /// request.
    #[error("shader {source_desc}: declaration {name}: {reason}")]
    Declaration {
        /// [`super::ShaderSource::describe`].
        source_desc: String,
        /// The declared name (`"TILE_M"`, `"enable"`).
        name: String,
        /// What is wrong.
        reason: String,
    },

    /// The candidate shader file cannot be read.
    #[error("shader source {path}: {reason}")]
    ShaderSource {
        /// The path given.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },

    /// A wgpu operation failed (validation, out of memory, device lost,
    /// mapping).
    #[error("wgpu {op} failed: {message}")]
    Wgpu {
        /// What the shim was doing.
        op: &'static str,
        /// wgpu's message.
        message: String,
    },

    /// The kernel wrote past the end of `dst` into its guard band.
    #[error(
        "the kernel wrote past dst[{len}] into the guard band (first clobbered guard word {first})"
    )]
    Guard {
        /// Elements of `dst`.
        len: usize,
        /// First guard element clobbered (0-based, after `dst`).
        first: usize,
    },

    /// The `dequant` entry wrote past the end of the dequant path's scratch
    /// into its band (`INTERMEDIATE_BAND_BITS`).
    #[error(
        "the dequant entry wrote past its scratch's {len} elements into the band after it (first clobbered band word {first})"
    )]
    ScratchGuard {
        /// Elements of the scratch (M K, at least 4).
        len: usize,
        /// First band word clobbered (0-based, after the scratch).
        first: usize,
    },
}

impl From<GgmlError> for WgpuError {
    fn from(e: GgmlError) -> Self {
        WgpuError::Shape(e)
    }
}

/// The shim's result type.
pub type Result<T> = std::result::Result<T, WgpuError>;

impl WgpuError {
    /// Whether the error says the request cannot run here (a bad argument,
    /// a limit of the adapter, no adapter or feature) rather than that the
    /// shader ran wrong or failed (a candidate that does not compile, a
    /// device error, a write past `dst` or past the dequant scratch). The
    /// command line exits 2 for the first kind and 1 for the second.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            WgpuError::Compile { .. }
                | WgpuError::Wgpu { .. }
                | WgpuError::Guard { .. }
                | WgpuError::ScratchGuard { .. }
        )
    }
}
