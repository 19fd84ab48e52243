//! The wgpu shim: runs `shaders/mul_mat_reg_tile.wgsl` (issue 5, seed 004).
//!
//! [`WgpuEngine::new`] picks an adapter, builds pipelines per (dtype,
//! [`Geometry`]), uploads, dispatches and reads back; it checks every
//! argument against the `oracle::ggml::mul_mat` contract and the adapter's
//! limits first and reports a typed [`WgpuError`].
//!
//! Adapter selection: the backends named by `WGPU_BACKEND` (wgpu's
//! comma list: `vulkan`, `gl`, ...), else **Vulkan only**. Without a Vulkan
//! loader wgpu would otherwise fall back silently to GL llvmpipe; here that
//! is [`WgpuError::NoAdapter`] instead. On a machine with no GPU, Mesa's
//! lavapipe (`mesa-vulkan-drivers`) is the CPU Vulkan adapter the tests use.
//!
//! Shader variants: one WGSL file, no preprocessor (beyond the subgroup
//! form's marker lines, below). Every knob is a WGSL
//! `override` constant set when the pipeline is built
//! (`PipelineCompilationOptions::constants`): `SRC0_DTYPE` picks the loader
//! through a `switch` on a pipeline constant, which the driver folds away,
//! and `WG_M`, `WG_N`, `TILE_K` size the workgroup and its staged tiles
//! (override-sized workgroup arrays). So a candidate kernel is one file with
//! the same ABI (written at the top of the shader), and the one source
//! serves every dtype and geometry.
//!
//! What the shim must know before a pipeline exists, the shader declares
//! and the shim reads from its text ([`ShaderDecl`]): the thread tile
//! (`const TILE_M`, `const TILE_N`: outputs per invocation, which size the
//! dispatch), the staging buffers (`const STAGES`, which size the
//! workgroup-memory check), the default geometry (the `override`
//! defaults) and the features (`enable f16;`, `enable subgroups;`). So a
//! candidate with an 8 x 8 thread tile runs through the same shim, gate
//! and bench as the 8 x 4 production shader (or the seed's 4 x 4 design,
//! `shaders/candidates/mul_mat_4x4.wgsl`).
//!
//! What the kernel cannot check, and the shim checks before upload:
//! 1. `k` is a multiple of the dtype's block size and `src0`, `src1` have
//!    exactly the contract's lengths ([`WgpuError::Shape`]);
//! 2. every binding fits the adapter's `max_storage_buffer_binding_size`
//!    and `max_buffer_size` ([`WgpuError::BufferTooLarge`]);
//! 3. every index the shader forms fits in 32 bits ([`WgpuError::Index32`]);
//! 4. the grid fits `max_compute_workgroups_per_dimension`
//!    ([`WgpuError::GridTooLarge`]) and the geometry fits the invocation
//!    and workgroup-memory limits ([`WgpuError::Geometry`]).
//!
//! Quantized src0 takes one of two paths ([`QuantPath`]): `main` decodes
//! the blocks as it stages its tiles (one dispatch), or, when the shader
//! declares a `dequant` entry, that entry first decodes all of src0 into an
//! M x K f32 scratch buffer and `main` then runs its f32 pipeline over it
//! (two dispatches; ggml-cuda's dequantize-then-GEMM route for batched
//! prefill). [`WgpuEngine::default_path`] picks the second for
//! `n >= DEQUANT_MIN_N`.
//!
//! Subgroups ([`subgroup`]): a source with `// SUBGROUP: ` lines (the
//! production shader) has a second, subgroup form, built where the adapter
//! offers `Features::SUBGROUP` with one subgroup size; it computes the same
//! bits by other data movement. [`WgpuEngine::default_form`] takes it
//! unless it was measured slower on the adapter
//! ([`subgroup::measured_slower`]: NVIDIA) or
//! `KERNEL_ORACLE_MUL_MAT_SUBGROUPS=off` (`on` takes it everywhere);
//! [`WgpuEngine::subgroup_form`] says why an engine has none, and
//! [`WgpuEngine::default_reason`] why the default is what it is. Both forms
//! run through [`WgpuEngine::prepare_form`], and the gate runs both.
//!
//! `dst` is allocated with a guard band of [`GUARD_WORDS`] words after it,
//! filled with [`GUARD_BITS`] and checked after every read-back, so an
//! out-of-bounds write fails even when the values look right. Its own
//! elements are poisoned with [`POISON_BITS`] (a NaN) before the launch, so
//! an element the kernel never writes fails every arm, K = 0 included
//! (where the contract's output is +0: a zero-filled `dst` would pass a
//! kernel that writes nothing).
//!
//! `src0` and `src1` are bound with [`INPUT_BAND_WORDS`] words of
//! [`INPUT_BAND_BITS`] (NaN as f32 and as every f16 scale of a ggml block)
//! after their data, always (gate, fuzzer and bench alike), so a read up to
//! that many words past an input's end that reaches a result makes it NaN.
//! Without them, such a read meets the binding's end, where the runtime's
//! bounds checks return zero or the last element, and a zero-filled k tail
//! on the other operand hides either. (Further out, a clamping bounds check
//! lands on the band's last word, a zero-filling one answers 0.) The
//! dequant path's scratch, written by `dequant` and read by `main`, is an
//! intermediate: its elements are poisoned with [`POISON_BITS`], and
//! [`GUARD_WORDS`] words of [`INTERMEDIATE_BAND_BITS`] follow them, so a
//! `main` that reads past the scratch meets NaN and a `dequant` that writes
//! past it fails the read-back's check ([`WgpuError::ScratchGuard`]).

mod decl;
mod error;
pub mod subgroup;

pub use decl::ShaderDecl;
pub use error::{Result, WgpuError};
pub use oracle::ggml::Dtype;
pub use subgroup::{Form, SubgroupPolicy, ENV_MUL_MAT_SUBGROUPS};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// Environment variable naming a candidate `.wgsl` file with the ABI of
/// `shaders/mul_mat_reg_tile.wgsl`; [`ShaderSource::from_env`] reads it.
pub const ENV_MUL_MAT_WGSL: &str = "KERNEL_ORACLE_MUL_MAT_WGSL";

/// The builtin shader, `shaders/mul_mat_reg_tile.wgsl`, embedded at build
/// time.
pub const BUILTIN_MUL_MAT_WGSL: &str = include_str!("../../../shaders/mul_mat_reg_tile.wgsl");

/// The smallest TILE_K of the ABI: the shader stages k in quads of four
/// (`QK = TILE_K / 4`, the quantized code units of a row), so a TILE_K
/// below 4 leaves zero-length workgroup arrays.
pub const MIN_TILE_K: u32 = 4;

/// Words of NaN band bound after `src0`'s data (past its zero padding to a
/// whole word) and after `src1`'s.
pub const INPUT_BAND_WORDS: usize = 64;
/// The inputs' band: `0xFF` bytes, NaN as f32, as an f16 (a ggml block's
/// `d`, `dmin`) and as bf16, so a block or an element read from it turns
/// the product NaN.
pub const INPUT_BAND_BITS: u32 = 0xFFFF_FFFF;

/// f32 words of guard band after `dst`.
pub const GUARD_WORDS: usize = 64;
/// The guard band's fill pattern (a NaN no kernel computes).
pub const GUARD_BITS: u32 = 0x7FA5_5A5A;
/// The bits `dst`'s own elements hold before the launch: NaN, the f32 form
/// of the CUDA shims' poison byte (`0xFF`), which no comparison accepts.
pub const POISON_BITS: u32 = 0xFFFF_FFFF;
/// The band after the dequant path's scratch ([`GUARD_WORDS`] words): the
/// CUDA engines' intermediate band word,
/// [`INTERMEDIATE_BAND`](crate::cuda::INTERMEDIATE_BAND), itself:
/// a NaN, so `main` reading past the scratch lets NaN into its result
/// (where the binding's end would answer 0 or the last element), and a
/// value no arithmetic stores (the canonical NaN is `0x7FFFFFFF`; a NaN
/// copied from an input's band or the poison is `0xFFFFFFFF`), so a
/// `dequant` writing past the scratch is seen unless it copies this word.
pub const INTERMEDIATE_BAND_BITS: u32 = crate::cuda::INTERMEDIATE_BAND;

/// How a quantized src0 reaches the GEMM.
///
/// Both paths decode every element with the same expression (the shader's
/// loaders, `ggml-quants.c` `dequantize_row_*` step for step) and add the
/// products in the same k order, so they give the same bits; the gate runs
/// both, and the fuzzer draws one per case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantPath {
    /// `main` decodes src0's blocks as it stages its tiles: one dispatch,
    /// no scratch.
    Fused,
    /// The shader's `dequant` entry decodes the whole of src0 into an
    /// M x K f32 scratch buffer (`4 M K` bytes, then its band), then `main`
    /// runs as for an
    /// f32 src0 over it (its f32 pipeline): two dispatches, the decode done
    /// once per element instead of once per workgroup column that stages
    /// it. For `dequant`'s ABI see the production shader's header.
    Dequant,
}

impl QuantPath {
    /// The name printed in tables and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            QuantPath::Fused => "fused",
            QuantPath::Dequant => "dequant",
        }
    }
}

/// The smallest n (src1 rows) for which [`WgpuEngine::default_path`] takes
/// [`QuantPath::Dequant`]: the M x K decode and its f32 scratch are paid
/// once and shared by the n columns, which at n of a few tokens the fused
/// path does more cheaply.
pub const DEQUANT_MIN_N: usize = 32;

/// The most workgroups for which [`WgpuEngine::default_geometry`] doubles
/// TILE_K: about two per multiprocessor of a large GPU (132 on the H200).
/// Measured: 128 workgroups gain from it, 384 and 576 lose; nothing
/// between was timed.
pub const FEW_WORKGROUPS: u64 = 256;

/// The shortest k for which [`WgpuEngine::default_geometry`] doubles
/// TILE_K (the shortest measured to gain: attn_out's 1024).
pub const LONG_K: usize = 1024;

/// Invocations per workgroup of the `dequant` entry (its
/// `@workgroup_size(64, 1, 1)`), each decoding four consecutive elements of
/// one row.
pub const DEQUANT_WG: u64 = 64;

/// One WGSL source text and where it came from.
#[derive(Clone, Debug)]
pub struct ShaderSource {
    text: Arc<str>,
    path: Option<PathBuf>,
    /// What [`ShaderSource::describe`] says of a source made in memory
    /// ([`ShaderSource::derived`]).
    note: Option<Arc<str>>,
}

impl ShaderSource {
    /// The builtin `shaders/mul_mat_reg_tile.wgsl`.
    pub fn builtin() -> ShaderSource {
        ShaderSource {
            text: Arc::from(BUILTIN_MUL_MAT_WGSL),
            path: None,
            note: None,
        }
    }

    /// A source made in memory from this one (a planted change, a
    /// canary): `text`, described as `what` followed by this source's
    /// description in parentheses.
    pub fn derived(&self, text: String, what: &str) -> ShaderSource {
        ShaderSource {
            text: Arc::from(text),
            path: None,
            note: Some(Arc::from(format!("{what} (from {})", self.describe()))),
        }
    }

    /// A candidate from a file.
    ///
    /// # Errors
    /// [`WgpuError::ShaderSource`] if it cannot be read.
    pub fn from_file(path: &Path) -> Result<ShaderSource> {
        let text = std::fs::read_to_string(path).map_err(|e| WgpuError::ShaderSource {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(ShaderSource {
            text: Arc::from(text),
            path: Some(path.to_path_buf()),
            note: None,
        })
    }

    /// The candidate named by [`ENV_MUL_MAT_WGSL`] if set, else
    /// [`ShaderSource::builtin`].
    ///
    /// # Errors
    /// As [`ShaderSource::from_file`]; [`WgpuError::ShaderSource`] if the
    /// variable is set but empty (a script's unset `$CANDIDATE` would
    /// otherwise check the builtin and report it green).
    pub fn from_env() -> Result<ShaderSource> {
        match std::env::var_os(ENV_MUL_MAT_WGSL) {
            Some(p) if p.is_empty() => Err(WgpuError::ShaderSource {
                path: format!("${ENV_MUL_MAT_WGSL}"),
                reason: "set but empty: name a file, or unset it for the builtin".into(),
            }),
            Some(p) => ShaderSource::from_file(Path::new(&p)),
            None => Ok(ShaderSource::builtin()),
        }
    }

    /// The WGSL text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `"builtin shaders/mul_mat_reg_tile.wgsl"`, `"candidate PATH"`, or
    /// a derived source's note ([`ShaderSource::derived`]).
    pub fn describe(&self) -> String {
        match (&self.note, &self.path) {
            (Some(n), _) => n.to_string(),
            (None, None) => "builtin shaders/mul_mat_reg_tile.wgsl".into(),
            (None, Some(p)) => format!("candidate {}", p.display()),
        }
    }
}

/// The tunable workgroup geometry: `wg_m x wg_n` threads, each computing
/// the shader's `TILE_M x TILE_N` register tile ([`ShaderDecl`]), staging
/// `tile_k` elements of k at a time. Workgroup memory:
/// `4 * tile_k * (wg_m TILE_M + wg_n TILE_N) * STAGES` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// Threads along m (override `WG_M`).
    pub wg_m: u32,
    /// Threads along n (override `WG_N`).
    pub wg_n: u32,
    /// k elements staged per step (override `TILE_K`).
    pub tile_k: u32,
}

impl Default for Geometry {
    /// 16 x 16 threads, TILE_K = 16 (the seed's defaults; the 4 x 4 design
    /// makes 64 x 64 outputs per workgroup of them). A shader's own default
    /// is its `override` declarations ([`ShaderDecl::geometry`]).
    fn default() -> Self {
        Geometry {
            wg_m: 16,
            wg_n: 16,
            tile_k: 16,
        }
    }
}

impl Geometry {
    /// Outputs per workgroup along m (`wg_m * TILE_M` of `decl`).
    pub fn block_m(&self, decl: &ShaderDecl) -> u64 {
        u64::from(self.wg_m) * u64::from(decl.tile_m)
    }

    /// Outputs per workgroup along n (`wg_n * TILE_N` of `decl`).
    pub fn block_n(&self, decl: &ShaderDecl) -> u64 {
        u64::from(self.wg_n) * u64::from(decl.tile_n)
    }

    /// Workgroup memory (bytes) of a shader that stages, in each of its
    /// `STAGES` buffers, two f32 tiles of `tile_k x block_m` and
    /// `tile_k x block_n` (the 4 x 4 design: one buffer). A shader
    /// that pads its tiles needs more, and the pipeline's own validation
    /// reports that. Saturates at `u64::MAX` (beyond every adapter's
    /// limit) rather than overflow.
    pub fn workgroup_bytes(&self, decl: &ShaderDecl) -> u64 {
        (4 * u64::from(self.tile_k))
            .saturating_mul(self.block_m(decl).saturating_add(self.block_n(decl)))
            .saturating_mul(u64::from(decl.stages))
    }

    /// Workgroup memory (bytes) of the production shader's layout
    /// (`shaders/mul_mat_reg_tile.wgsl`, its "Geometry" comment): in each
    /// of `STAGES` buffers, `tile_k` rows of `(block_m / 4) | 1` plus
    /// `(block_n / 4) | 1` 16-byte vectors (odd strides against bank
    /// conflicts), and `8 block_m ceil(tile_k / 16)` bytes of staged
    /// scales: 18 KiB at 16 x 16 x 16, 36 KiB at 16 x 16 x 32, where
    /// [`Geometry::workgroup_bytes`] counts 16 and 32. wgpu 30 does not
    /// check a pipeline's workgroup memory against the adapter's limit, so
    /// [`WgpuEngine::default_geometry`] checks this count itself.
    pub fn padded_workgroup_bytes(&self, decl: &ShaderDecl) -> u64 {
        let rows = ((self.block_m(decl) / 4) | 1).saturating_add((self.block_n(decl) / 4) | 1);
        let tiles = (16 * u64::from(self.tile_k)).saturating_mul(rows);
        let scales = (8 * self.block_m(decl)).saturating_mul(u64::from(self.tile_k.div_ceil(16)));
        tiles
            .saturating_add(scales)
            .saturating_mul(u64::from(decl.stages))
    }

    /// Workgroups along m and n for an `m x n` output.
    pub fn grid(&self, decl: &ShaderDecl, m: u64, n: u64) -> (u64, u64) {
        (
            m.div_ceil(self.block_m(decl)),
            n.div_ceil(self.block_n(decl)),
        )
    }

    /// Checks the knobs against each other, against the shader's
    /// declarations and against `limits`.
    ///
    /// # Errors
    /// [`WgpuError::Geometry`] if a knob is 0, TILE_K is below
    /// [`MIN_TILE_K`], or the workgroup exceeds
    /// `max_compute_workgroup_size_x/y`, `max_compute_invocations_per_workgroup`
    /// or `max_compute_workgroup_storage_size` (counted by
    /// [`Geometry::workgroup_bytes`]).
    pub fn validate(&self, decl: &ShaderDecl, limits: &wgpu::Limits) -> Result<()> {
        let bad = |reason: String| WgpuError::Geometry {
            wg_m: self.wg_m,
            wg_n: self.wg_n,
            tile_k: self.tile_k,
            reason,
        };
        if self.wg_m == 0 || self.wg_n == 0 || self.tile_k == 0 {
            return Err(bad("every knob must be at least 1".into()));
        }
        if self.tile_k < MIN_TILE_K {
            return Err(bad(format!(
                "TILE_K must be at least {MIN_TILE_K}: the quantized loaders stage k in quads \
                 (QK = TILE_K / 4 code units a row)"
            )));
        }
        if self.wg_m > limits.max_compute_workgroup_size_x
            || self.wg_n > limits.max_compute_workgroup_size_y
        {
            return Err(bad(format!(
                "workgroup size beyond the adapter's {} x {}",
                limits.max_compute_workgroup_size_x, limits.max_compute_workgroup_size_y
            )));
        }
        let threads = u64::from(self.wg_m) * u64::from(self.wg_n);
        if threads > u64::from(limits.max_compute_invocations_per_workgroup) {
            return Err(bad(format!(
                "{threads} threads per workgroup, the adapter allows {}",
                limits.max_compute_invocations_per_workgroup
            )));
        }
        let shmem = self.workgroup_bytes(decl);
        if shmem > u64::from(limits.max_compute_workgroup_storage_size) {
            return Err(bad(format!(
                "{shmem} bytes of workgroup memory, the adapter allows {}",
                limits.max_compute_workgroup_storage_size
            )));
        }
        Ok(())
    }
}

/// The shader's `SRC0_DTYPE` code of `dtype`: its index in [`Dtype::ALL`]
/// (0 f32, 1 q4_0, 2 q8_0, 3 q4_K, 4 q6_K).
pub fn dtype_code(dtype: Dtype) -> u32 {
    match dtype {
        Dtype::F32 => 0,
        Dtype::Q4_0 => 1,
        Dtype::Q8_0 => 2,
        Dtype::Q4K => 3,
        Dtype::Q6K => 4,
    }
}

/// A built pipeline's dtype, geometry, entry point (`"main"`,
/// `"dequant"`) and form.
type PipelineKey = (Dtype, Geometry, &'static str, Form);

/// An adapter, its device and the pipelines built so far for one shader
/// source.
pub struct WgpuEngine {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    source: ShaderSource,
    decl: ShaderDecl,
    checks: wgpu::ShaderRuntimeChecks,
    /// The subgroup form's text and lanes per subgroup, or why there is none.
    subgroup: std::result::Result<(Arc<str>, u32), String>,
    /// The default form and why.
    default: (Form, String),
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl std::fmt::Debug for WgpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuEngine")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .field("source", &self.source.describe())
            .finish()
    }
}

/// The backends to ask for: `WGPU_BACKEND` if set, else Vulkan.
///
/// # Errors
/// [`WgpuError::BadBackendEnv`] if `WGPU_BACKEND` is set but names none.
pub fn backends_from_env() -> Result<wgpu::Backends> {
    match std::env::var("WGPU_BACKEND") {
        Ok(v) => {
            let b = wgpu::Backends::from_comma_list(&v);
            if b.is_empty() {
                Err(WgpuError::BadBackendEnv { value: v })
            } else {
                Ok(b)
            }
        }
        Err(_) => Ok(wgpu::Backends::VULKAN),
    }
}

fn wgpu_err(op: &'static str, e: impl std::fmt::Display) -> WgpuError {
    WgpuError::Wgpu {
        op,
        message: e.to_string(),
    }
}

impl WgpuEngine {
    /// Opens the adapter picked by [`backends_from_env`] (high-performance
    /// preference), with all its limits, for `source`.
    ///
    /// # Errors
    /// [`WgpuError::Declaration`] (see [`ShaderDecl::parse`]),
    /// [`WgpuError::BadBackendEnv`], [`WgpuError::NoAdapter`],
    /// [`WgpuError::MissingFeature`] (a source with `enable f16;` on an
    /// adapter without `SHADER_F16`, or `enable subgroups;` without
    /// `SUBGROUP`), [`WgpuError::RequestDevice`],
    /// [`WgpuError::BadSubgroupEnv`]. An adapter without subgroups is no
    /// error for a source with a subgroup form: the engine then has the
    /// plain form only ([`WgpuEngine::subgroup_form`] says why).
    pub fn new(source: ShaderSource) -> Result<WgpuEngine> {
        Self::with_checks(source, wgpu::ShaderRuntimeChecks::checked())
    }

    /// [`WgpuEngine::new`], but the shader modules are built without the
    /// runtime checks naga otherwise adds (`ShaderRuntimeChecks::unchecked`:
    /// no bounds checks on buffer and workgroup-array indices, no loop
    /// bounding, no guard on integer division by zero), so a benchmark can
    /// time the kernel as a trusted native module runs it. The arithmetic
    /// of a kernel that stays in bounds, terminates and never divides by
    /// zero is unchanged; the gates never use this.
    ///
    /// # Safety
    /// The caller guarantees, for every dtype and geometry it runs, that
    /// the shader (1) indexes `src0`, `src1`, `dst`, `params` and its
    /// workgroup arrays only in bounds, (2) has no infinite loop and (3)
    /// never divides or takes a remainder by zero (wgpu's
    /// `create_shader_module_trusted`). The shim's checks of shapes and
    /// lengths still run, but nothing checks the shader itself.
    ///
    /// # Errors
    /// As [`WgpuEngine::new`].
    pub unsafe fn new_unchecked(source: ShaderSource) -> Result<WgpuEngine> {
        Self::with_checks(source, wgpu::ShaderRuntimeChecks::unchecked())
    }

    /// [`WgpuEngine::new`], but without naga's loop bounding only
    /// (`ShaderRuntimeChecks { bounds_checks: true, force_loop_bounding:
    /// false }`): every buffer and workgroup-array index is still clamped
    /// and every division guarded, but loops no longer carry the extra
    /// iteration counter naga adds so that a driver cannot assume a loop
    /// terminates. A benchmark uses it to split the cost of the checks.
    ///
    /// # Safety
    /// The caller guarantees that the shader has no infinite loop for any
    /// dtype and geometry it runs (condition (2) of
    /// [`WgpuEngine::new_unchecked`]; wgpu's `create_shader_module_trusted`).
    ///
    /// # Errors
    /// As [`WgpuEngine::new`].
    pub unsafe fn new_without_loop_bounding(source: ShaderSource) -> Result<WgpuEngine> {
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        checks.force_loop_bounding = false;
        Self::with_checks(source, checks)
    }

    /// Whether the shader modules keep naga's bounds checks (false only
    /// for [`WgpuEngine::new_unchecked`]).
    pub fn runtime_checks(&self) -> bool {
        self.checks.bounds_checks
    }

    /// Whether the shader modules keep naga's loop bounding (false for
    /// [`WgpuEngine::new_unchecked`] and
    /// [`WgpuEngine::new_without_loop_bounding`]).
    pub fn loop_bounding(&self) -> bool {
        self.checks.force_loop_bounding
    }

    fn with_checks(source: ShaderSource, checks: wgpu::ShaderRuntimeChecks) -> Result<WgpuEngine> {
        let decl = ShaderDecl::parse(source.text(), &source.describe())?;
        let policy =
            SubgroupPolicy::from_env().map_err(|value| WgpuError::BadSubgroupEnv { value })?;
        let backends = backends_from_env()?;
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| WgpuError::NoAdapter {
            backends: format!("{backends:?}"),
            reason: e.to_string(),
        })?;
        let info = adapter.get_info();
        let mut features = wgpu::Features::empty();
        for (wanted, feature, name) in [
            (decl.f16, wgpu::Features::SHADER_F16, "SHADER_F16"),
            (decl.subgroups, wgpu::Features::SUBGROUP, "SUBGROUP"),
        ] {
            if !wanted {
                continue;
            }
            if !adapter.features().contains(feature) {
                return Err(WgpuError::MissingFeature {
                    adapter: info.name.clone(),
                    feature: name,
                });
            }
            features |= feature;
        }
        // The subgroup form: a source with marker lines, on an adapter
        // with subgroups of one size (subgroup::lanes_for).
        let subgroup = subgroup::specialise(source.text()).and_then(|text| {
            if !adapter.features().contains(wgpu::Features::SUBGROUP) {
                return Err(format!("adapter {} lacks Features::SUBGROUP", info.name));
            }
            let lanes = subgroup::lanes_for(info.subgroup_min_size, info.subgroup_max_size)?;
            Ok((Arc::from(text), lanes))
        });
        if subgroup.is_ok() {
            features |= wgpu::Features::SUBGROUP;
        }
        let default = match (&subgroup, policy, subgroup::measured_slower(info.vendor)) {
            (Err(reason), _, _) => (Form::Plain, format!("no subgroup form: {reason}")),
            (Ok(_), SubgroupPolicy::Off, _) => (
                Form::Plain,
                format!("{}=off", subgroup::ENV_MUL_MAT_SUBGROUPS),
            ),
            (Ok(_), SubgroupPolicy::On, _) => (
                Form::Subgroup,
                format!("{}=on", subgroup::ENV_MUL_MAT_SUBGROUPS),
            ),
            (Ok(_), SubgroupPolicy::Auto, Some(why)) => (
                Form::Plain,
                format!("{why}; {}=on takes it", subgroup::ENV_MUL_MAT_SUBGROUPS),
            ),
            (Ok(_), SubgroupPolicy::Auto, None) => {
                (Form::Subgroup, "the adapter has subgroups".to_string())
            }
        };
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kernel-oracle mul_mat"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| WgpuError::RequestDevice {
            adapter: info.name.clone(),
            reason: e.to_string(),
        })?;
        Ok(WgpuEngine {
            device,
            queue,
            info,
            limits,
            source,
            decl,
            checks,
            subgroup,
            default,
            pipelines: Mutex::new(HashMap::new()),
        })
    }

    /// The adapter's name (`"llvmpipe (LLVM 15.0.6, 256 bits)"`,
    /// `"NVIDIA H200"`).
    pub fn adapter_name(&self) -> &str {
        &self.info.name
    }

    /// The adapter's vendor id (PCI: `0x10DE` NVIDIA; Mesa's lavapipe
    /// `0x10005`), which [`subgroup::measured_slower`] reads.
    pub fn adapter_vendor(&self) -> u32 {
        self.info.vendor
    }

    /// The backend in use (`"vulkan"`, `"gl"`).
    pub fn backend(&self) -> &'static str {
        self.info.backend.to_str()
    }

    /// The adapter's limits, as requested for the device.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The shader source this engine builds.
    pub fn source(&self) -> &ShaderSource {
        &self.source
    }

    /// What the source declares: thread tile, staging buffers, default
    /// geometry, features.
    pub fn decl(&self) -> &ShaderDecl {
        &self.decl
    }

    /// The subgroup form's lanes per subgroup (the `SG_LANES` it is built
    /// with), or why the engine has no subgroup form (the source has no
    /// marker lines, the adapter lacks `Features::SUBGROUP`, its subgroup
    /// size is a range: [`subgroup::lanes_for`]).
    ///
    /// # Errors
    /// The reason, as text for a report.
    pub fn subgroup_form(&self) -> std::result::Result<u32, &str> {
        match &self.subgroup {
            Ok((_, lanes)) => Ok(*lanes),
            Err(reason) => Err(reason),
        }
    }

    /// The forms this engine can run: [`Form::Plain`], then
    /// [`Form::Subgroup`] when it has one.
    pub fn forms(&self) -> Vec<Form> {
        let mut v = vec![Form::Plain];
        if self.subgroup.is_ok() {
            v.push(Form::Subgroup);
        }
        v
    }

    /// The form [`WgpuEngine::prepare`], [`WgpuEngine::prepare_path`] and
    /// [`WgpuEngine::mul_mat`] run: [`Form::Subgroup`] when the engine has
    /// one, unless [`subgroup::measured_slower`] names the adapter (NVIDIA)
    /// or `KERNEL_ORACLE_MUL_MAT_SUBGROUPS=off`; `=on` takes it wherever
    /// the engine has one ([`SubgroupPolicy`]). Else [`Form::Plain`].
    pub fn default_form(&self) -> Form {
        self.default.0
    }

    /// Why [`WgpuEngine::default_form`] is what it is, for a report
    /// (`"the adapter has subgroups"`, `"no subgroup form: ..."`, the
    /// measurement that keeps NVIDIA plain, the variable that set it).
    pub fn default_reason(&self) -> &str {
        &self.default.1
    }

    /// `form` as the gate and the bench print it: `"plain"`, or
    /// `"sgN"` for the subgroup form built for N lanes.
    pub fn form_label(&self, form: Form) -> String {
        match (form, &self.subgroup) {
            (Form::Subgroup, Ok((_, lanes))) => format!("sg{lanes}"),
            (f, _) => f.name().to_string(),
        }
    }

    /// `forms`' labels ([`WgpuEngine::form_label`]), comma-separated
    /// (`"plain, sg32"`).
    pub fn form_labels(&self, forms: &[Form]) -> String {
        forms
            .iter()
            .map(|&f| self.form_label(f))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The pipeline for `dtype` and `geom` in the default form
    /// ([`WgpuEngine::default_form`]), built on first use.
    ///
    /// # Errors
    /// [`WgpuError::Geometry`] (see [`Geometry::validate`]);
    /// [`WgpuError::Compile`] if the source or its override constants do
    /// not validate.
    pub fn pipeline(&self, dtype: Dtype, geom: Geometry) -> Result<Arc<wgpu::ComputePipeline>> {
        self.pipeline_entry(dtype, geom, "main", self.default_form())
    }

    /// [`WgpuEngine::pipeline`] in the given form.
    ///
    /// # Errors
    /// As [`WgpuEngine::pipeline`]; [`WgpuError::NoSubgroupForm`] for
    /// [`Form::Subgroup`] on an engine without one.
    pub fn pipeline_form(
        &self,
        dtype: Dtype,
        geom: Geometry,
        form: Form,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.pipeline_entry(dtype, geom, "main", form)
    }

    /// The pipeline of entry point `entry` (`"main"`, `"dequant"`) for
    /// `dtype`, `geom` and `form`, built on first use.
    fn pipeline_entry(
        &self,
        dtype: Dtype,
        geom: Geometry,
        entry: &'static str,
        form: Form,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        geom.validate(&self.decl, &self.limits)?;
        let sg = match form {
            Form::Plain => None,
            Form::Subgroup => {
                Some(
                    self.subgroup
                        .as_ref()
                        .map_err(|reason| WgpuError::NoSubgroupForm {
                            source_desc: self.source.describe(),
                            reason: reason.clone(),
                        })?,
                )
            }
        };
        let mut map = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = map.get(&(dtype, geom, entry, form)) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let text = match sg {
            Some((text, _)) => decl::without_subgroups_enable(text).into(),
            None if self.decl.subgroups => {
                decl::without_subgroups_enable(self.source.text()).into()
            }
            None => std::borrow::Cow::Borrowed(self.source.text()),
        };
        // Named after the source (a candidate's path), so a compiler
        // message names the file it is about.
        let label = self.source.describe();
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(text),
        };
        // SAFETY: with every check on this is `create_shader_module`;
        // with them off (only through `new_unchecked`) its caller has
        // taken on the conditions of `create_shader_module_trusted`.
        let module = unsafe { self.device.create_shader_module_trusted(desc, self.checks) };
        let mut constants = vec![
            ("SRC0_DTYPE", f64::from(dtype_code(dtype))),
            ("WG_M", f64::from(geom.wg_m)),
            ("WG_N", f64::from(geom.wg_n)),
            ("TILE_K", f64::from(geom.tile_k)),
        ];
        if let Some((_, lanes)) = sg {
            constants.push((subgroup::LANES_OVERRIDE, f64::from(*lanes)));
        }
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(dtype.name()),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            // The error and its causes (naga's reason is a cause of
            // wgpu's "... is invalid"), each once: wgpu's own text may
            // already hold its chain ("Caused by: ...").
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                let text = c.to_string();
                if !message.contains(text.trim()) {
                    message += &format!(": {text}");
                }
                cause = c.source();
            }
            return Err(WgpuError::Compile {
                source_desc: self.source.describe(),
                dtype: dtype.name(),
                message,
            });
        }
        let p = Arc::new(pipeline);
        map.insert((dtype, geom, entry, form), p.clone());
        Ok(p)
    }

    fn check_binding(&self, arg: &'static str, bytes: u64) -> Result<()> {
        let l = &self.limits;
        for (limit, limit_name) in [
            (
                l.max_storage_buffer_binding_size,
                "max_storage_buffer_binding_size",
            ),
            (l.max_buffer_size, "max_buffer_size"),
        ] {
            if bytes > limit {
                return Err(WgpuError::BufferTooLarge {
                    arg,
                    bytes,
                    limit,
                    limit_name,
                });
            }
        }
        Ok(())
    }

    /// Checks and uploads one `mul_mat` (shapes as `oracle::ggml::mul_mat`:
    /// `src0` M rows of K elements of `dtype` as bytes, `src1` N x K f32,
    /// `dst` N x M f32 with stride M) and builds its pipeline; nothing runs
    /// until [`MulMatJob::dispatch`].
    ///
    /// # Errors
    /// [`WgpuError::Geometry`], [`WgpuError::Shape`], [`WgpuError::Index32`],
    /// [`WgpuError::BufferTooLarge`], [`WgpuError::GridTooLarge`], and as
    /// [`WgpuEngine::pipeline`]. Nothing is uploaded when one is returned.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        &self,
        dtype: Dtype,
        geom: Geometry,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<MulMatJob<'_>> {
        let path = self.default_path(dtype, m, n, k);
        self.prepare_path(dtype, geom, path, m, n, k, src0, src1)
    }

    /// The path [`WgpuEngine::prepare`] and [`WgpuEngine::mul_mat`] take:
    /// [`QuantPath::Dequant`] when the shader declares `dequant`, src0 is
    /// quantized, `n >= DEQUANT_MIN_N` and the `4 M K`-byte scratch is not
    /// empty and fits one storage binding; else [`QuantPath::Fused`].
    pub fn default_path(&self, dtype: Dtype, m: usize, n: usize, k: usize) -> QuantPath {
        // The scratch as prepare_path checks it: M K elements, not 0, under
        // 2^32, and 4 M K bytes and the band within one binding.
        let fits = m.checked_mul(k).is_some_and(|elems| {
            elems > 0
                && u32::try_from(elems).is_ok()
                && self
                    .check_binding("dequantized src0", 4 * (elems + GUARD_WORDS) as u64)
                    .is_ok()
        });
        if self.decl.dequant && dtype != Dtype::F32 && n >= DEQUANT_MIN_N && fits {
            QuantPath::Dequant
        } else {
            QuantPath::Fused
        }
    }

    /// The geometry to run an `m x n` output over `k` with: the shader's
    /// declared one ([`ShaderDecl::geometry`]), with TILE_K doubled when
    /// that grid has at most [`FEW_WORKGROUPS`] workgroups, `k` is at least
    /// [`LONG_K`], and the doubled geometry is within the adapter's limits,
    /// its workgroup memory counted by [`Geometry::padded_workgroup_bytes`]
    /// (36 KiB at 16 x 16 x 32: the H200's 48 KiB, not lavapipe's 32). So
    /// few workgroups leave each multiprocessor of a large GPU one or two
    /// (8 warps each at the 16 x 16 default), whose two barriers per
    /// TILE_K step are then not hidden; the longer step halves them. Measured on
    /// the H200 (`device/NOTES.md`, run 27; `ex_wgpu_gemm_bench`, f32,
    /// against cuBLAS SGEMM in the same run): TILE_K 32 takes ffn_down
    /// (1024 x 4608 x 512, 16 x 8 workgroups) from 0.379x to 0.429x and
    /// attn_out (1024 x 1024 x 512) from 0.420x to 0.442x, and costs
    /// ffn_gate (72 x 8) and conv_in (48 x 8) 5-9%. Every geometry
    /// computes the same bits (the contract adds k in order, rule
    /// MM-ORDER), so this chooses speed only.
    pub fn default_geometry(&self, m: usize, n: usize, k: usize) -> Geometry {
        let declared = self.decl.geometry;
        let (gm, gn) = declared.grid(&self.decl, m as u64, n as u64);
        let long = Geometry {
            tile_k: declared.tile_k.saturating_mul(2),
            ..declared
        };
        if gm.saturating_mul(gn) <= FEW_WORKGROUPS
            && k >= LONG_K
            && long.validate(&self.decl, &self.limits).is_ok()
            && long.padded_workgroup_bytes(&self.decl)
                <= u64::from(self.limits.max_compute_workgroup_storage_size)
        {
            long
        } else {
            declared
        }
    }

    /// [`WgpuEngine::prepare`] on the given [`QuantPath`], in the default
    /// form ([`WgpuEngine::default_form`]).
    ///
    /// # Errors
    /// As [`WgpuEngine::prepare`]; [`WgpuError::NoDequant`] for
    /// [`QuantPath::Dequant`] with an f32 src0 or a shader without
    /// `dequant`; with it, the scratch counts as binding `"dequantized
    /// src0"` ([`WgpuError::BufferTooLarge`], [`WgpuError::Index32`]) and
    /// the pre-pass grid as [`WgpuError::GridTooLarge`].
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_path(
        &self,
        dtype: Dtype,
        geom: Geometry,
        path: QuantPath,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<MulMatJob<'_>> {
        let form = self.default_form();
        self.prepare_form(dtype, geom, path, form, m, n, k, src0, src1)
    }

    /// [`WgpuEngine::prepare_path`] in the given [`Form`] (both
    /// dispatches of [`QuantPath::Dequant`] in that form).
    ///
    /// # Errors
    /// As [`WgpuEngine::prepare_path`]; [`WgpuError::NoSubgroupForm`] for
    /// [`Form::Subgroup`] on an engine without one.
    #[allow(clippy::too_many_arguments)]
    pub fn prepare_form(
        &self,
        dtype: Dtype,
        geom: Geometry,
        path: QuantPath,
        form: Form,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<MulMatJob<'_>> {
        use oracle::ggml::GgmlError;
        if path == QuantPath::Dequant {
            let refuse = |reason| WgpuError::NoDequant {
                dtype: dtype.name(),
                source_desc: self.source.describe(),
                reason,
            };
            if dtype == Dtype::F32 {
                return Err(refuse("an f32 src0 has nothing to dequantize"));
            }
            if !self.decl.dequant {
                return Err(refuse("the shader declares no `fn dequant` entry"));
            }
        }
        geom.validate(&self.decl, &self.limits)?;
        let row_bytes = dtype.row_bytes(k)?;
        let src0_len = m.checked_mul(row_bytes).ok_or(GgmlError::Overflow)?;
        let src1_len = n.checked_mul(k).ok_or(GgmlError::Overflow)?;
        let dst_len = n.checked_mul(m).ok_or(GgmlError::Overflow)?;
        for (arg, want, got) in [
            ("src0", src0_len, src0.len()),
            ("src1", src1_len, src1.len()),
        ] {
            if want != got {
                return Err(GgmlError::Len { arg, want, got }.into());
            }
        }
        for (what, value) in [
            ("m", m),
            ("n", n),
            ("k", k),
            ("src0 bytes", src0_len),
            ("src1 elements", src1_len),
            ("dst elements + guard", dst_len + GUARD_WORDS),
        ] {
            if u32::try_from(value).is_err() {
                return Err(WgpuError::Index32 {
                    what,
                    value: value as u64,
                });
            }
        }
        // Bindings: src0 padded with zero bytes to whole words, never empty;
        // each input followed by its NaN band.
        let band = 4 * INPUT_BAND_WORDS;
        let src0_data = (src0_len.div_ceil(4) * 4).max(4);
        let src0_bytes = (src0_data + band) as u64;
        let src1_data = (4 * src1_len).max(4);
        let src1_bytes = (src1_data + band) as u64;
        let dst_bytes = 4 * (dst_len + GUARD_WORDS) as u64;
        self.check_binding("src0", src0_bytes)?;
        self.check_binding("src1", src1_bytes)?;
        self.check_binding("dst", dst_bytes)?;
        let (gx, gy) = geom.grid(&self.decl, m as u64, n as u64);
        let max_groups = u64::from(self.limits.max_compute_workgroups_per_dimension);
        for (dim, groups) in [("x", gx), ("y", gy)] {
            if groups > max_groups {
                return Err(WgpuError::GridTooLarge {
                    dim,
                    groups,
                    limit: self.limits.max_compute_workgroups_per_dimension,
                });
            }
        }
        // The pre-pass: `4 M K` bytes of scratch (and its band), M K / 4 invocations of
        // DEQUANT_WG per workgroup on a grid as wide as the adapter allows
        // (every quantized K is whole blocks of 32 or 256: a multiple of 4).
        let pre = match path {
            QuantPath::Fused => None,
            QuantPath::Dequant => {
                let elems = m.checked_mul(k).ok_or(GgmlError::Overflow)?;
                if u32::try_from(elems).is_err() {
                    return Err(WgpuError::Index32 {
                        what: "dequantized src0 elements",
                        value: elems as u64,
                    });
                }
                // At least one vector: a `dequant` that sees the scratch as
                // `array<vec4<f32>>` needs 16 bytes bound even when M K = 0.
                // Then its band.
                let words = elems.max(4);
                let bytes = 4 * (words + GUARD_WORDS) as u64;
                self.check_binding("dequantized src0", bytes)?;
                let groups = (elems as u64 / 4).div_ceil(DEQUANT_WG);
                let px = groups.clamp(1, max_groups);
                let py = groups.div_ceil(px);
                if py > max_groups {
                    return Err(WgpuError::GridTooLarge {
                        dim: "y (dequant)",
                        groups: py,
                        limit: self.limits.max_compute_workgroups_per_dimension,
                    });
                }
                let pipeline = self.pipeline_entry(dtype, geom, "dequant", form)?;
                // No workgroups (M K = 0): py is 0 and the dispatch is skipped.
                Some((pipeline, words, (px as u32, py as u32)))
            }
        };
        // On the dequant path `main` is the f32 GEMM over the scratch.
        let main_dtype = if pre.is_some() { Dtype::F32 } else { dtype };
        let pipeline = self.pipeline_entry(main_dtype, geom, "main", form)?;

        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        // A bind group that does not match the layout a candidate's entry
        // point derives (a `dequant` that reads src1, say) is a validation
        // error: an error returned here, not wgpu's uncaptured-error panic.
        let bind_scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let storage = wgpu::BufferUsages::STORAGE;
        let band_bytes = INPUT_BAND_BITS.to_le_bytes();
        let with_band = |mut v: Vec<u8>, data: usize| {
            v.resize(data, 0);
            for _ in 0..INPUT_BAND_WORDS {
                v.extend_from_slice(&band_bytes);
            }
            v
        };
        let s0 = with_band(src0.to_vec(), src0_data);
        let b_src0 = self.init_buffer("src0", &s0, storage);
        let s1 = with_band(
            src1.iter().flat_map(|v| v.to_le_bytes()).collect(),
            src1_data,
        );
        let b_src1 = self.init_buffer("src1", &s1, storage);
        let mut d: Vec<u8> = Vec::with_capacity(dst_bytes as usize);
        for i in 0..dst_len + GUARD_WORDS {
            let w = if i < dst_len { POISON_BITS } else { GUARD_BITS };
            d.extend_from_slice(&w.to_le_bytes());
        }
        let b_dst = self.init_buffer("dst", &d, storage | wgpu::BufferUsages::COPY_SRC);
        let params: Vec<u8> = [m, k, n, k, m]
            .iter()
            .flat_map(|&v| (v as u32).to_le_bytes())
            .collect();
        let b_params = self.init_buffer("params", &params, storage);
        let pre = pre.map(|(pipeline, words, grid)| {
            // POISON_BITS is four 0xFF bytes: one fill, then the band.
            const _: () = assert!(POISON_BITS == u32::from_ne_bytes([0xFF; 4]));
            let mut init = vec![0xFFu8; 4 * words];
            for _ in 0..GUARD_WORDS {
                init.extend_from_slice(&INTERMEDIATE_BAND_BITS.to_le_bytes());
            }
            let scratch = self.init_buffer(
                "dequantized src0",
                &init,
                storage | wgpu::BufferUsages::COPY_SRC,
            );
            let band_read = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("scratch band readback"),
                size: 4 * GUARD_WORDS as u64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("dequant"),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: b_src0.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: scratch.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: b_params.as_entire_binding(),
                    },
                ],
            });
            PrePass {
                pipeline,
                bind,
                grid,
                scratch,
                words,
                band_read,
            }
        });
        let b_read = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: dst_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("mul_mat"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: match &pre {
                        Some(p) => p.scratch.as_entire_binding(),
                        None => b_src0.as_entire_binding(),
                    },
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: b_src1.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: b_dst.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: b_params.as_entire_binding(),
                },
            ],
        });
        let bind_err = pollster::block_on(bind_scope.pop());
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(wgpu_err("upload", e));
        }
        if let Some(e) = bind_err {
            return Err(WgpuError::Compile {
                source_desc: self.source.describe(),
                dtype: dtype.name(),
                message: format!("binding the buffers to the pipeline's layout: {e}"),
            });
        }
        Ok(MulMatJob {
            engine: self,
            path,
            form,
            pre,
            pipeline,
            bind,
            dst: b_dst,
            read: b_read,
            dst_len,
            grid: (gx as u32, gy as u32),
            _inputs: [b_src0, b_src1, b_params],
        })
    }

    fn init_buffer(&self, label: &str, bytes: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage,
            })
    }

    /// `oracle::ggml::mul_mat` on the GPU: [`WgpuEngine::prepare`], one
    /// dispatch, [`MulMatJob::read`]. Returns `dst`, N x M f32 with stride M.
    ///
    /// # Errors
    /// As [`WgpuEngine::prepare`], [`MulMatJob::dispatch`] and
    /// [`MulMatJob::read`].
    #[allow(clippy::too_many_arguments)]
    pub fn mul_mat(
        &self,
        dtype: Dtype,
        geom: Geometry,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<Vec<f32>> {
        let job = self.prepare(dtype, geom, m, n, k, src0, src1)?;
        job.dispatch(1)?;
        job.read()
    }

    /// [`WgpuEngine::mul_mat`] on the given [`QuantPath`].
    ///
    /// # Errors
    /// As [`WgpuEngine::prepare_path`], [`MulMatJob::dispatch`] and
    /// [`MulMatJob::read`].
    #[allow(clippy::too_many_arguments)]
    pub fn mul_mat_path(
        &self,
        dtype: Dtype,
        geom: Geometry,
        path: QuantPath,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<Vec<f32>> {
        let form = self.default_form();
        self.mul_mat_form(dtype, geom, path, form, m, n, k, src0, src1)
    }

    /// [`WgpuEngine::mul_mat_path`] in the given [`Form`].
    ///
    /// # Errors
    /// As [`WgpuEngine::prepare_form`], [`MulMatJob::dispatch`] and
    /// [`MulMatJob::read`].
    #[allow(clippy::too_many_arguments)]
    pub fn mul_mat_form(
        &self,
        dtype: Dtype,
        geom: Geometry,
        path: QuantPath,
        form: Form,
        m: usize,
        n: usize,
        k: usize,
        src0: &[u8],
        src1: &[f32],
    ) -> Result<Vec<f32>> {
        let job = self.prepare_form(dtype, geom, path, form, m, n, k, src0, src1)?;
        job.dispatch(1)?;
        job.read()
    }
}

/// Which dispatches of a job's run [`MulMatJob::dispatch_parts`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// The `dequant` pre-pass (if the job has one) and `main`: a whole run.
    Both,
    /// The `dequant` pre-pass alone (nothing on [`QuantPath::Fused`]).
    Pre,
    /// `main` alone.
    Main,
}

/// How [`MulMatJob::dispatch_parts`] groups its dispatches into compute
/// passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// Every dispatch of the call in one compute pass.
    One,
    /// A compute pass for each dispatch.
    Each,
}

/// The `dequant` dispatch of a [`QuantPath::Dequant`] job.
struct PrePass {
    pipeline: Arc<wgpu::ComputePipeline>,
    bind: wgpu::BindGroup,
    grid: (u32, u32),
    /// M x K f32 (at least 4 elements), then [`GUARD_WORDS`] of
    /// [`INTERMEDIATE_BAND_BITS`]: written by `dequant`, read by `main` as
    /// its src0.
    scratch: wgpu::Buffer,
    /// The scratch's elements before its band.
    words: usize,
    /// Where the band is copied back to be checked.
    band_read: wgpu::Buffer,
}

/// One uploaded `mul_mat`, ready to dispatch any number of times.
pub struct MulMatJob<'e> {
    engine: &'e WgpuEngine,
    path: QuantPath,
    form: Form,
    pre: Option<PrePass>,
    pipeline: Arc<wgpu::ComputePipeline>,
    bind: wgpu::BindGroup,
    dst: wgpu::Buffer,
    read: wgpu::Buffer,
    dst_len: usize,
    grid: (u32, u32),
    _inputs: [wgpu::Buffer; 3],
}

impl MulMatJob<'_> {
    /// Workgroups along m and n.
    pub fn grid(&self) -> (u32, u32) {
        self.grid
    }

    /// The path the job runs (an f32 src0 is always [`QuantPath::Fused`]).
    pub fn path(&self) -> QuantPath {
        self.path
    }

    /// The form the job runs.
    pub fn form(&self) -> Form {
        self.form
    }

    /// Records `times` runs (on the dequant path each run is the `dequant`
    /// dispatch then `main`'s) in one compute pass of one command buffer,
    /// submits it and waits until the GPU is done. wgpu puts a barrier
    /// between two dispatches of the pass wherever a buffer one writes is
    /// used by the other (the scratch, `dst`), so each run sees the last
    /// one's writes, as with a pass each.
    ///
    /// # Errors
    /// [`WgpuError::Wgpu`] on a validation error or device loss.
    pub fn dispatch(&self, times: u32) -> Result<()> {
        self.dispatch_parts(times, Parts::Both, Passes::One)
    }

    /// As [`MulMatJob::dispatch`], recording only the given dispatches of
    /// each run (`Parts::Main` alone reads whatever the scratch holds, so
    /// its output is meaningful only after a whole run), in one compute
    /// pass or in a pass each: the benchmark's split of a
    /// [`QuantPath::Dequant`] job's time and of what a pass costs.
    ///
    /// # Errors
    /// As [`MulMatJob::dispatch`].
    pub fn dispatch_parts(&self, times: u32, parts: Parts, passes: Passes) -> Result<()> {
        let dev = &self.engine.device;
        let scope = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut enc = dev.create_command_encoder(&Default::default());
        let mut steps: Vec<(&wgpu::ComputePipeline, &wgpu::BindGroup, (u32, u32))> = Vec::new();
        if self.grid.0 > 0 && self.grid.1 > 0 {
            let pre = self
                .pre
                .as_ref()
                .filter(|p| p.grid.1 > 0 && parts != Parts::Main);
            for _ in 0..times {
                if let Some(p) = pre {
                    steps.push((&p.pipeline, &p.bind, p.grid));
                }
                if parts != Parts::Pre {
                    steps.push((&self.pipeline, &self.bind, self.grid));
                }
            }
        }
        // wgpu orders the dispatches of one pass by their bindings'
        // usages (each dispatch is its own usage scope), as it orders
        // passes: the same results either way.
        let per_pass = match passes {
            Passes::One => steps.len().max(1),
            Passes::Each => 1,
        };
        for chunk in steps.chunks(per_pass) {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for (pipeline, bind, grid) in chunk {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, *bind, &[]);
                pass.dispatch_workgroups(grid.0, grid.1, 1);
            }
        }
        self.engine.queue.submit(Some(enc.finish()));
        dev.poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| wgpu_err("poll after dispatch", e))?;
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(wgpu_err("dispatch", e));
        }
        Ok(())
    }

    /// Copies `dst` back (N x M f32, stride M) and checks its guard band,
    /// and on the dequant path the scratch's band.
    ///
    /// # Errors
    /// [`WgpuError::Guard`] if the kernel wrote past `dst`;
    /// [`WgpuError::ScratchGuard`] if `dequant` wrote past the scratch;
    /// [`WgpuError::Wgpu`] if a copy or a mapping fails.
    pub fn read(&self) -> Result<Vec<f32>> {
        let dev = &self.engine.device;
        let mut enc = dev.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.dst, 0, &self.read, 0, self.read.size());
        if let Some(p) = &self.pre {
            let at = 4 * p.words as u64;
            enc.copy_buffer_to_buffer(&p.scratch, at, &p.band_read, 0, p.band_read.size());
        }
        self.engine.queue.submit(Some(enc.finish()));
        let words = self.map_words(&self.read)?;
        if let Some(first) = words[self.dst_len..].iter().position(|&w| w != GUARD_BITS) {
            return Err(WgpuError::Guard {
                len: self.dst_len,
                first,
            });
        }
        if let Some(p) = &self.pre {
            let band = self.map_words(&p.band_read)?;
            if let Some(first) = band.iter().position(|&w| w != INTERMEDIATE_BAND_BITS) {
                return Err(WgpuError::ScratchGuard {
                    len: p.words,
                    first,
                });
            }
        }
        Ok(words[..self.dst_len]
            .iter()
            .map(|&w| f32::from_bits(w))
            .collect())
    }

    /// Maps `buf` (its copies submitted), reads it as little-endian words
    /// and unmaps it.
    fn map_words(&self, buf: &wgpu::Buffer) -> Result<Vec<u32>> {
        let dev = &self.engine.device;
        let slice = buf.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        dev.poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| wgpu_err("poll after copy", e))?;
        rx.recv()
            .map_err(|e| wgpu_err("map_async", e))?
            .map_err(|e| wgpu_err("map_async", e))?;
        let words: Vec<u32> = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| wgpu_err("get_mapped_range", e))?;
            view.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        buf.unmap();
        Ok(words)
    }
}
