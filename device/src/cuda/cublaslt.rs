//! # cublaslt: cuBLASLt's block-scaled FP8 GEMM as a peer of the v2 MMQ
//!
//! [`CublasLtFp8`] computes the FP8 MMQ's output `y` `[m x out_f]` (f32,
//! row-major) from the same operands as [`Engine::mmq`]: weights `w`
//! `[out_f x in_f]` e4m3 (row stride `in_f` bytes), weight scales
//! `[ceil(out_f/128) x ceil(in_f/128)]` f32, quantized activations `q`
//! `[m x in_f_pad]` e4m3 and activation scales `d` `[m x in_f_pad/128]` f32
//! (`core/src/fp8_mmq.rs` is the normative definition of each). It calls
//! `cublasLtMatmul` in process through cudarc's `cublaslt` module, which
//! loads libcublasLt dynamically like the driver: on a machine without it,
//! [`CublasLtFp8::new`] returns [`DeviceError::PeerUnavailable`], never a
//! panic. The peer is the GEMM only; the quantizer and the NaN count stay
//! the [`Engine`]'s kernels.
//!
//! ## The call
//!
//! cuBLASLt is column-major and runs FP8 only in the "TN" form (`A`
//! transposed, `B` not: cublasLtMatmul's FP8 requirements), so the roles
//! are chosen to need no transposition of FP8 data:
//!
//! - `A` = the weights: row-major `[out_f x in_f]` is column-major
//!   `[in_f x out_f]` with `lda = in_f`; `TRANSA = T` makes `op(A)`
//!   `[out_f x in_f]`. Scale mode `CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F`.
//! - `B` = the quantized activations: row-major `[m x in_f_pad]` is
//!   column-major `[in_f_pad x m]`; the first `in_f` rows are read,
//!   `ldb = in_f_pad`, `TRANSB = N`. Scale mode
//!   `CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F` (one f32 per token per 128 k).
//! - `D` = `y^T`, column-major `[out_f x m]` with `ldd = out_f`, which is
//!   `y` row-major `[m x out_f]`. f32, `beta = 0` (`C` is `D`, not read),
//!   `alpha = 1`, compute type `CUBLAS_COMPUTE_32F`, scale type f32.
//!
//! cuBLASLt's `(m, n, k)` is therefore `(out_f, m, in_f)`.
//!
//! ## Scale layouts (layout only: every scale value is passed unchanged)
//!
//! - **Weights, BLK128x128_32F** ([`blk128x128_weight_scales`]): one f32 per
//!   128x128 block, the k-block index fastest, with the leading dimension
//!   (the stride from one 128-row block of out_f to the next) padded to a
//!   multiple of 4 blocks: element `(kb, nb)` at `nb * L4 + kb`,
//!   `L4 = round_up(ceil(in_f/128), 4)`, padding zero. Sources: NVIDIA's
//!   CUDALibrarySamples (`cuBLASLt/Common/helpers.h`, `getScaleTensorSize`:
//!   `roundoff(ceildiv(inner, 128), 4) * ceildiv(outer, 128)`) and pytorch
//!   PR 166752 ("Fix DeepSeek scaling tensor handling": `B_scale: [L4,
//!   N // 128], stride: [1, L4]`, after silent wrong answers whenever
//!   `(K // 128) % 4 != 0`). Our grid `[ceil(out_f/128) x ceil(in_f/128)]`
//!   row-major has the same order with leading dimension `ceil(in_f/128)`,
//!   so the re-layout only inserts the padding.
//! - **Activations, VEC128_32F** ([`vec128_act_scales`]): one f32 per token
//!   per 128-k block, the token index fastest: element `(j, kb)` at
//!   `kb * m_pad + j` (pytorch PR 166752: `A_scale: [M, K // 128], stride:
//!   [1, M]`; NVIDIA's sample sizes it `ceildiv(K, 128) * M`). Only the
//!   `ceil(in_f/128)` blocks the GEMM reads are kept (the rest of `d`'s
//!   `in_f_pad/128` cover zero padding).
//! - **Tokens padded to a multiple of 4** ([`token_pad`]): `m_pad =
//!   round_up(m, 4)`; when `m % 4 != 0` the peer copies `q` into a buffer
//!   with `m_pad - m` zero rows (scales 0) and writes `D` with `m_pad`
//!   columns, of which `y` is the first `m` (column `j` of `D` depends on
//!   column `j` of `B` only, so the padding changes no output of `y`). The
//!   pytorch peer the project measured with also padded the token count to
//!   4; whether cuBLASLt would read an unpadded `M` with stride `M` is not
//!   documented where we looked, and with the padding the question does
//!   not arise.
//!
//! The re-layout runs on the host (the scale tensors are small: a download,
//! a pure function, an upload), once per [`CublasLtFp8::prepare`].
//!
//! ## Refusals
//!
//! Shapes the peer cannot take are [`DeviceError::PeerRefused`], found
//! before anything is launched: `in_f % 16 != 0` (the weight rows are `A`'s
//! columns; FP8 needs 16-byte aligned leading dimensions), `out_f % 4 != 0`
//! (`ldd` of f32 16-byte aligned), and whatever cuBLASLt's heuristic
//! refuses (no algorithm, `CUBLAS_STATUS_NOT_SUPPORTED` or
//! `CUBLAS_STATUS_INVALID_VALUE`; `CUBLASLT_LOG_LEVEL=1` prints its reason).
//!
//! ## The planted bug
//!
//! [`WeightScaleLayout::Unpadded`] passes the 128x128 weight scales with
//! the plain leading dimension `ceil(in_f/128)` (our grid as it is), the
//! mistake pytorch PR 166752 fixed: every output column of 128 or more
//! reads another block's scale (or a padding zero) whenever
//! `ceil(in_f/128) % 4 != 0`. Selected with
//! `KERNEL_ORACLE_FP8_MMQ=cublaslt-unpadded`; the FP8 gate's EXACT arm
//! must catch it. Its buffer still holds `L4 * ceil(out_f/128)` floats
//! (the tail zero), so cuBLASLt never reads outside an allocation.

use super::buffer::{self, Buffer};
use super::check::check_mmq;
use super::error::{DeviceError, Result};
use super::{drv, CheckedWeights, Engine};
use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};
use oracle::fp8_mmq::{Schedule, Shape};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Environment variable choosing the FP8 GEMM the gate, `case`, the
/// fuzzer and the benchmark run: `builtin` (the default: the `.cu`
/// source's MMQ kernel), `cublaslt` (this peer) or `cublaslt-unpadded`
/// (the peer with its planted bug). See [`Fp8Gemm::from_env`].
pub const ENV_FP8_MMQ: &str = "KERNEL_ORACLE_FP8_MMQ";

/// The peer's name in reports and errors.
pub const PEER_NAME: &str = "cuBLASLt";

/// The oldest cuBLASLt with the VEC128_32F and BLK128x128_32F scale modes
/// (cuBLAS 12.9, as `cublasLtGetVersion` numbers it).
pub const MIN_CUBLASLT_VERSION: usize = 120_900;

/// The most workspace the heuristic may ask for (bytes): NVIDIA's
/// recommendation for Hopper (32 MiB).
pub const WORKSPACE_LIMIT: usize = 32 << 20;

/// How the 128x128 weight scales are laid out for cuBLASLt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightScaleLayout {
    /// Leading dimension `round_up(ceil(in_f/128), 4)`: what cuBLASLt reads.
    Padded,
    /// Leading dimension `ceil(in_f/128)`: the planted bug (see the module
    /// documentation).
    Unpadded,
}

/// The FP8 GEMM chosen by [`ENV_FP8_MMQ`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Gemm {
    /// The kernel source's MMQ (`fp8_mmq_v2_k<variant>`).
    Builtin,
    /// cuBLASLt's block-scaled FP8 GEMM ([`CublasLtFp8`]) with this weight
    /// scale layout.
    CublasLt(WeightScaleLayout),
}

impl Fp8Gemm {
    /// Every value [`ENV_FP8_MMQ`] takes, with its meaning.
    pub const CHOICES: [(&'static str, Fp8Gemm); 3] = [
        ("builtin", Fp8Gemm::Builtin),
        ("cublaslt", Fp8Gemm::CublasLt(WeightScaleLayout::Padded)),
        (
            "cublaslt-unpadded",
            Fp8Gemm::CublasLt(WeightScaleLayout::Unpadded),
        ),
    ];

    /// What [`ENV_FP8_MMQ`] accepts, for error messages.
    pub const EXPECTED: &'static str = "`builtin` (the default), `cublaslt` or `cublaslt-unpadded`";

    /// The value of [`ENV_FP8_MMQ`] that selects this GEMM.
    pub fn name(self) -> &'static str {
        Fp8Gemm::CHOICES
            .iter()
            .find(|(_, g)| *g == self)
            .map_or("builtin", |(n, _)| n)
    }

    /// Parses a value of [`ENV_FP8_MMQ`].
    ///
    /// # Errors
    /// [`DeviceError::BadEnv`] for anything but the names in
    /// [`Fp8Gemm::CHOICES`].
    pub fn parse(value: &str) -> Result<Fp8Gemm> {
        Fp8Gemm::CHOICES
            .iter()
            .find(|(n, _)| *n == value)
            .map(|(_, g)| *g)
            .ok_or_else(|| DeviceError::BadEnv {
                var: ENV_FP8_MMQ,
                value: value.to_string(),
                expected: Fp8Gemm::EXPECTED,
            })
    }

    /// The GEMM [`ENV_FP8_MMQ`] names: unset or empty is
    /// [`Fp8Gemm::Builtin`]. The one place the variable is read.
    ///
    /// # Errors
    /// [`DeviceError::BadEnv`] for an unknown value (or one that is not
    /// UTF-8).
    pub fn from_env() -> Result<Fp8Gemm> {
        match std::env::var_os(ENV_FP8_MMQ) {
            None => Ok(Fp8Gemm::Builtin),
            Some(v) if v.is_empty() => Ok(Fp8Gemm::Builtin),
            Some(v) => Fp8Gemm::parse(&v.to_string_lossy()),
        }
    }
}

/// The tokens cuBLASLt sees: `round_up(m, 4)` (see the module
/// documentation).
pub fn token_pad(m: usize) -> usize {
    m.div_ceil(4) * 4
}

/// The leading dimension (f32 elements) of the 128x128 weight-scale tensor
/// in `layout`: `round_up(ceil(in_f/128), 4)` padded, `ceil(in_f/128)`
/// unpadded.
pub fn weight_scale_ld(shape: &Shape, layout: WeightScaleLayout) -> usize {
    let kb = shape.scale_cols();
    match layout {
        WeightScaleLayout::Padded => kb.div_ceil(4) * 4,
        WeightScaleLayout::Unpadded => kb,
    }
}

/// Length (f32 elements) of the BLK128x128_32F weight-scale buffer:
/// `round_up(ceil(in_f/128), 4) * ceil(out_f/128)` in either layout.
pub fn blk128x128_len(shape: &Shape) -> usize {
    weight_scale_ld(shape, WeightScaleLayout::Padded) * shape.scale_rows()
}

/// The weight scales `scales` (`[ceil(out_f/128) x ceil(in_f/128)]` f32,
/// row-major, `shape.scale_len()` elements) as cuBLASLt's BLK128x128_32F
/// tensor in `layout`: element `(kb, nb)` at `nb * weight_scale_ld + kb`,
/// every other element 0; [`blk128x128_len`] elements. Layout only: every
/// value is copied unchanged.
///
/// # Errors
/// [`DeviceError::ArgLen`] if `scales` has the wrong length.
pub fn blk128x128_weight_scales(
    scales: &[f32],
    shape: &Shape,
    layout: WeightScaleLayout,
) -> Result<Vec<f32>> {
    if scales.len() != shape.scale_len() {
        return Err(DeviceError::ArgLen {
            arg: "w_scales",
            want: shape.scale_len(),
            got: scales.len(),
        });
    }
    let (kb, ld) = (shape.scale_cols(), weight_scale_ld(shape, layout));
    let mut out = vec![0.0f32; blk128x128_len(shape)];
    for (nb, row) in scales.chunks_exact(kb).enumerate() {
        out[nb * ld..nb * ld + kb].copy_from_slice(row);
    }
    Ok(out)
}

/// The activation scales `d` (`[m x in_f_pad/128]` f32, row-major,
/// `shape.d_len()` elements) as cuBLASLt's VEC128_32F tensor for
/// `m_pad = token_pad(m)` tokens: element `(j, kb)` at `kb * m_pad + j` for
/// the `ceil(in_f/128)` blocks the GEMM reads, 0 for the padding tokens;
/// `ceil(in_f/128) * m_pad` elements. Layout only.
///
/// # Errors
/// [`DeviceError::ArgLen`] if `d` has the wrong length.
pub fn vec128_act_scales(d: &[f32], shape: &Shape) -> Result<Vec<f32>> {
    if d.len() != shape.d_len() {
        return Err(DeviceError::ArgLen {
            arg: "d",
            want: shape.d_len(),
            got: d.len(),
        });
    }
    let (m, kb, stride) = (shape.m(), shape.scale_cols(), shape.act_blocks());
    let m_pad = token_pad(m);
    let mut out = vec![0.0f32; kb * m_pad];
    for j in 0..m {
        for b in 0..kb {
            out[b * m_pad + j] = d[j * stride + b];
        }
    }
    Ok(out)
}

/// Elements `in_f` must be a multiple of for the peer ([`check_peer_shape`]).
pub const PEER_IN_F_ALIGN: usize = 16;
/// Elements `out_f` must be a multiple of for the peer ([`check_peer_shape`]).
pub const PEER_OUT_F_ALIGN: usize = 4;

/// `(in_f, out_f)` rounded up to the alignment the peer takes
/// ([`PEER_IN_F_ALIGN`], [`PEER_OUT_F_ALIGN`]): still ragged against the
/// 128-element scale blocks (k tail, partial scale row and column), so a
/// fuzzer aimed at the peer compares its cases instead of counting them
/// refused.
pub fn peer_aligned(in_f: usize, out_f: usize) -> (usize, usize) {
    (
        in_f.div_ceil(PEER_IN_F_ALIGN) * PEER_IN_F_ALIGN,
        out_f.div_ceil(PEER_OUT_F_ALIGN) * PEER_OUT_F_ALIGN,
    )
}

/// Checks the alignment rules the peer knows before asking cuBLASLt:
/// `in_f % 16 == 0` (FP8 operands need 16-byte aligned leading dimensions;
/// `lda = in_f` bytes) and `out_f % 4 == 0` (`ldd = out_f` f32 elements,
/// 16-byte aligned). `ldb = in_f_pad` is a multiple of 512.
///
/// # Errors
/// [`DeviceError::PeerRefused`] naming the rule.
pub fn check_peer_shape(shape: &Shape) -> Result<()> {
    let refuse = |reason: String| {
        Err(DeviceError::PeerRefused {
            peer: PEER_NAME,
            reason,
        })
    };
    if !shape.in_f().is_multiple_of(PEER_IN_F_ALIGN) {
        return refuse(format!(
            "in_f = {} is not a multiple of 16: the weight rows are cuBLASLt's A with lda = in_f bytes, and FP8 operands need 16-byte aligned leading dimensions",
            shape.in_f()
        ));
    }
    if !shape.out_f().is_multiple_of(PEER_OUT_F_ALIGN) {
        return refuse(format!(
            "out_f = {} is not a multiple of 4: the output is cuBLASLt's D with ldd = out_f f32 elements, which must be 16-byte aligned",
            shape.out_f()
        ));
    }
    Ok(())
}

fn status(e: CublasError) -> String {
    format!("{:?}", e.0)
}

fn lt_err(op: impl Into<String>) -> impl FnOnce(CublasError) -> DeviceError {
    let op = op.into();
    move |e| DeviceError::CublasLt {
        op,
        status: status(e),
    }
}

/// The cuBLASLt handle. cuBLASLt ties a handle to a device, not to a
/// thread; the peer only uses it under its mutex, one thread at a time.
struct Handle(sys::cublasLtHandle_t);

// SAFETY: the handle is an opaque pointer to cuBLASLt's host-side context.
// It may move between threads (it belongs to the device, and the peer binds
// the device's context to the calling thread before each call); it is only
// ever used behind `CublasLtFp8::inner`'s mutex, so never concurrently.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `create_handle` and destroyed only here. An
        // error while tearing down is not worth a panic.
        let _ = unsafe { lt::destroy_handle(self.0) };
    }
}

/// A matmul descriptor, destroyed on drop.
struct Desc(sys::cublasLtMatmulDesc_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by `create_matmul_desc`, destroyed only here.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}

impl Desc {
    /// Sets attribute `attr` to the bytes of `value`.
    fn set<T: Copy>(&self, attr: sys::cublasLtMatmulDescAttributes_t, value: &T) -> Result<()> {
        // SAFETY: the descriptor is live; `value` is a plain value of the
        // size cuBLASLt reads for `attr` (the caller's choice of `T`:
        // int32 for enums, a 64-bit device pointer for pointers), copied
        // by cuBLASLt before this returns.
        unsafe {
            lt::set_matmul_desc_attribute(
                self.0,
                attr,
                (value as *const T).cast::<c_void>(),
                std::mem::size_of::<T>(),
            )
        }
        .map_err(lt_err(format!("cublasLtMatmulDescSetAttribute {attr:?}")))
    }
}

/// A matrix layout, destroyed on drop.
struct Layout(sys::cublasLtMatrixLayout_t);

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created by `create_matrix_layout`, destroyed only here.
        let _ = unsafe { lt::destroy_matrix_layout(self.0) };
    }
}

impl Layout {
    fn new(
        ty: sys::cudaDataType,
        rows: usize,
        cols: usize,
        ld: usize,
        what: &str,
    ) -> Result<Layout> {
        lt::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64)
            .map(Layout)
            .map_err(lt_err(format!("cublasLtMatrixLayoutCreate ({what})")))
    }
}

/// A heuristic preference, destroyed on drop.
struct Pref(sys::cublasLtMatmulPreference_t);

impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created by `create_matmul_pref`, destroyed only here.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

/// What the mutex guards: the handle and the workspace (grown to the
/// largest size a heuristic asked for, then reused).
struct Inner {
    handle: Handle,
    workspace: Option<Buffer<u8>>,
}

/// cuBLASLt's block-scaled FP8 GEMM on an [`Engine`]'s context and stream
/// (see the module documentation for the call, the layouts and the
/// refusals).
pub struct CublasLtFp8 {
    stream: Arc<CudaStream>,
    layout: WeightScaleLayout,
    version: usize,
    guards: bool,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for CublasLtFp8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CublasLtFp8")
            .field("version", &self.version)
            .field("layout", &self.layout)
            .field("guards", &self.guards)
            .finish()
    }
}

/// The FP8 operands prepared for one [`CublasLtFp8::run`]: the re-laid
/// scales, the (padded) activations, the output `D` and the descriptors
/// with the heuristic's algorithm. Reusable: every run computes the same
/// GEMM into [`PeerOperands::output`].
pub struct PeerOperands<'a> {
    shape: Shape,
    m_pad: usize,
    w: &'a Buffer<u8>,
    q: QOperand<'a>,
    w_scales: Buffer<f32>,
    a_scales: Buffer<f32>,
    d: Buffer<f32>,
    desc: Desc,
    a_layout: Layout,
    b_layout: Layout,
    d_layout: Layout,
    algo: sys::cublasLtMatmulAlgo_t,
    workspace_size: usize,
}

/// The activations cuBLASLt reads: the caller's `q` when `m % 4 == 0`,
/// else a copy with zero rows up to `token_pad(m)`.
enum QOperand<'a> {
    Borrowed(&'a Buffer<u8>),
    Padded(Buffer<u8>),
}

impl QOperand<'_> {
    fn buf(&self) -> &Buffer<u8> {
        match self {
            QOperand::Borrowed(b) => b,
            QOperand::Padded(b) => b,
        }
    }
}

impl PeerOperands<'_> {
    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Tokens cuBLASLt computes, [`token_pad`]`(m)`.
    pub fn m_pad(&self) -> usize {
        self.m_pad
    }

    /// `D`: `[m_pad x out_f]` f32 row-major; its first `m * out_f` elements
    /// are `y` after a [`CublasLtFp8::run`].
    pub fn output(&self) -> &Buffer<f32> {
        &self.d
    }

    /// The weight scales as cuBLASLt reads them (BLK128x128_32F,
    /// [`blk128x128_len`] elements, [`blk128x128_weight_scales`]); their
    /// address is in the matmul descriptor, so they live as long as this.
    pub fn weight_scales(&self) -> &Buffer<f32> {
        &self.w_scales
    }

    /// The activation scales as cuBLASLt reads them (VEC128_32F,
    /// `ceil(in_f/128) * m_pad` elements, [`vec128_act_scales`]).
    pub fn act_scales(&self) -> &Buffer<f32> {
        &self.a_scales
    }

    /// Workspace bytes the chosen algorithm needs.
    pub fn workspace_size(&self) -> usize {
        self.workspace_size
    }
}

impl CublasLtFp8 {
    /// Opens cuBLASLt on `engine`'s context and stream, with the weight
    /// scales laid out as `layout` and the engine's guard setting.
    ///
    /// # Errors
    /// [`DeviceError::PeerUnavailable`] when the device is not sm_90 (the
    /// VEC128_32F and BLK128x128_32F scale modes run on Hopper only,
    /// per NVIDIA's cuBLAS scaling-mode support table), when libcublasLt
    /// cannot be loaded, or when it is older than
    /// [`MIN_CUBLASLT_VERSION`]; [`DeviceError::CublasLt`] when no handle
    /// can be created.
    pub fn new(engine: &Engine, layout: WeightScaleLayout) -> Result<CublasLtFp8> {
        let unavailable = |reason: String| DeviceError::PeerUnavailable {
            peer: PEER_NAME,
            reason,
        };
        let (major, minor) = engine.arch();
        if (major, minor) != (9, 0) {
            return Err(unavailable(format!(
                "its VEC128_32F / BLK128x128_32F block-scaled FP8 GEMM runs on sm_90 (Hopper) only; this device is sm_{major}{minor}"
            )));
        }
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(unavailable(format!(
                "libcublasLt could not be loaded (searched {}); put the CUDA toolkit's lib64 on LD_LIBRARY_PATH",
                super::nvrtc::searched("cublasLt")
            )));
        }
        // SAFETY: the library is present (checked above); takes no argument.
        let version = unsafe { sys::cublasLtGetVersion() };
        if version < MIN_CUBLASLT_VERSION {
            return Err(unavailable(format!(
                "libcublasLt {version} predates the VEC128_32F / BLK128x128_32F scale modes (cuBLAS 12.9, {MIN_CUBLASLT_VERSION})"
            )));
        }
        let stream = engine.shim.stream.clone();
        drv(
            || "cuCtxSetCurrent".into(),
            stream.context().bind_to_thread(),
        )?;
        let handle = Handle(lt::create_handle().map_err(lt_err("cublasLtCreate"))?);
        Ok(CublasLtFp8 {
            stream,
            layout,
            version,
            guards: engine.guards(),
            inner: Mutex::new(Inner {
                handle,
                workspace: None,
            }),
        })
    }

    /// The weight-scale layout in use ([`WeightScaleLayout::Unpadded`] is
    /// the planted bug).
    pub fn layout(&self) -> WeightScaleLayout {
        self.layout
    }

    /// `cublasLtGetVersion` (`130000` and up for CUDA 13).
    pub fn version(&self) -> usize {
        self.version
    }

    /// The schedule this GEMM declares: the v2 grouping with the sm_90
    /// `wgmma` FP8 MMA inside each 128-k block and a fused fold
    /// ([`Schedule::SM90_WGMMA_FUSED`]), as the project measured it (bit for
    /// bit on every arm of the FP8 gate).
    pub fn schedule(&self) -> Schedule {
        Schedule::SM90_WGMMA_FUSED
    }

    /// Turns guard bands around the output on or off (see
    /// [`Engine::set_guards`]).
    pub fn set_guards(&mut self, on: bool) {
        self.guards = on;
    }

    /// One line for report headers: the library, its version, the scale
    /// modes and layout, and the declared schedule.
    pub fn describe(&self) -> String {
        let layout = match self.layout {
            WeightScaleLayout::Padded => "128x128 weight scales padded to 4 blocks",
            WeightScaleLayout::Unpadded => {
                "PLANTED BUG: 128x128 weight scales unpadded (leading dimension ceil(in_f/128))"
            }
        };
        format!(
            "peer {PEER_NAME} {} block-scaled FP8 GEMM (A = weights BLK128x128_32F, B = activations VEC128_32F, f32 out; {layout}); declared schedule: {}",
            self.version,
            self.schedule()
        )
    }

    /// Re-lays the scales, pads the activations, creates the descriptors
    /// and asks cuBLASLt's heuristic for an algorithm (growing the shared
    /// workspace to what it asks). Synchronises (the scales are re-laid on
    /// the host). Arguments as [`Engine::mmq`].
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`], [`DeviceError::IndexRange`] and
    /// [`DeviceError::PeerRefused`] (alignment) before anything is copied or
    /// launched; [`DeviceError::PeerRefused`] when the heuristic has no
    /// algorithm; [`DeviceError::CublasLt`], [`DeviceError::Driver`].
    pub fn prepare<'a>(
        &self,
        w: &CheckedWeights<'a>,
        w_scales: &Buffer<f32>,
        q: &'a Buffer<u8>,
        d: &Buffer<f32>,
        shape: &Shape,
    ) -> Result<PeerOperands<'a>> {
        check_mmq(shape, w.len(), w_scales.len(), q.len(), d.len(), None)?;
        check_peer_shape(shape)?;
        let s = &self.stream;
        drv(|| "cuCtxSetCurrent".into(), s.context().bind_to_thread())?;
        let (m, in_f, out_f) = (shape.m(), shape.in_f(), shape.out_f());
        let m_pad = token_pad(m);
        // The scales, re-laid on the host.
        let ws = blk128x128_weight_scales(&buffer::download(s, w_scales)?, shape, self.layout)?;
        let acts = vec128_act_scales(&buffer::download(s, d)?, shape)?;
        let w_scales = buffer::upload(s, &ws)?;
        let a_scales = buffer::upload(s, &acts)?;
        // The activations with m_pad - m zero rows.
        let q_op = if m_pad == m {
            QOperand::Borrowed(q)
        } else {
            let len = m_pad * shape.in_f_pad();
            let mut raw = drv(
                || format!("cuMemAlloc (padded q, {len} bytes)"),
                s.alloc_zeros::<u8>(len),
            )?;
            drv(
                || "cuMemcpyDtoD (q into its padded copy)".into(),
                s.memcpy_dtod(&q.view(), &mut raw.slice_mut(0..q.len())),
            )?;
            QOperand::Padded(Buffer::plain(raw))
        };
        let out = buffer::alloc::<f32>(s, m_pad * out_f, self.guards)?;

        let desc = Desc(
            lt::create_matmul_desc(
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                sys::cudaDataType_t::CUDA_R_32F,
            )
            .map_err(lt_err("cublasLtMatmulDescCreate"))?,
        );
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cublasLtMatmulMatrixScale_t as S;
        // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 (int32).
        desc.set(D::CUBLASLT_MATMUL_DESC_TRANSA, &1i32)?;
        desc.set(D::CUBLASLT_MATMUL_DESC_TRANSB, &0i32)?;
        desc.set(
            D::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
            &(S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F as i32),
        )?;
        desc.set(
            D::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
            &(S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F as i32),
        )?;
        let a_ptr = ptr_of(s, &w_scales);
        let b_ptr = ptr_of(s, &a_scales);
        desc.set(D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_ptr)?;
        desc.set(D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_ptr)?;

        let e4m3 = sys::cudaDataType_t::CUDA_R_8F_E4M3;
        let f32t = sys::cudaDataType_t::CUDA_R_32F;
        let a_layout = Layout::new(e4m3, in_f, out_f, in_f, "A = weights")?;
        let b_layout = Layout::new(e4m3, in_f, m_pad, shape.in_f_pad(), "B = activations")?;
        let d_layout = Layout::new(f32t, out_f, m_pad, out_f, "C = D = y^T")?;
        let pref =
            Pref(lt::create_matmul_pref().map_err(lt_err("cublasLtMatmulPreferenceCreate"))?);
        // SAFETY: the preference is live; the value is a size_t, as
        // MAX_WORKSPACE_BYTES takes.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref.0,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&WORKSPACE_LIMIT as *const usize).cast::<c_void>(),
                std::mem::size_of::<usize>(),
            )
        }
        .map_err(lt_err(
            "cublasLtMatmulPreferenceSetAttribute MAX_WORKSPACE_BYTES",
        ))?;

        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every descriptor is live; cuBLASLt only reads them.
        let heur = unsafe {
            lt::get_matmul_algo_heuristic(
                inner.handle.0,
                desc.0,
                a_layout.0,
                b_layout.0,
                d_layout.0,
                d_layout.0,
                pref.0,
            )
        };
        let heur = match heur {
            Ok(h) => h,
            Err(e) if refusal(e) => {
                return Err(DeviceError::PeerRefused {
                    peer: PEER_NAME,
                    reason: format!(
                        "cublasLtMatmulAlgoGetHeuristic: {} for (m, n, k) = ({out_f}, {m_pad}, {in_f}) with A BLK128x128_32F, B VEC128_32F, D f32 (CUBLASLT_LOG_LEVEL=1 prints cuBLASLt's reason)",
                        status(e)
                    ),
                });
            }
            Err(e) => return Err(lt_err("cublasLtMatmulAlgoGetHeuristic")(e)),
        };
        let need = heur.workspaceSize;
        if need > inner.workspace.as_ref().map_or(0, Buffer::len) {
            inner.workspace = Some(buffer::alloc::<u8>(s, need, false)?);
        }
        drop(inner);
        Ok(PeerOperands {
            shape: *shape,
            m_pad,
            w: w.buf,
            q: q_op,
            w_scales,
            a_scales,
            d: out,
            desc,
            a_layout,
            b_layout,
            d_layout,
            algo: heur.algo,
            workspace_size: need,
        })
    }

    /// Launches the GEMM on prepared operands into their output `D`. Does
    /// not synchronise unless guards are on (then it checks `D`'s bands).
    ///
    /// # Errors
    /// [`DeviceError::PeerRefused`] if `cublasLtMatmul` answers
    /// `NOT_SUPPORTED` / `INVALID_VALUE`; [`DeviceError::CublasLt`];
    /// [`DeviceError::GuardClobbered`]; [`DeviceError::Driver`].
    pub fn run(&self, ops: &mut PeerOperands<'_>) -> Result<()> {
        let s = &self.stream;
        drv(|| "cuCtxSetCurrent".into(), s.context().bind_to_thread())?;
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let ws_ptr = match &inner.workspace {
            Some(b) if ops.workspace_size > 0 => {
                if b.len() < ops.workspace_size {
                    // Only grows: a prepared algorithm always fits.
                    return Err(DeviceError::CublasLt {
                        op: "workspace".into(),
                        status: format!(
                            "{} bytes allocated, the algorithm needs {}",
                            b.len(),
                            ops.workspace_size
                        ),
                    });
                }
                ptr_of(s, b)
            }
            _ => 0,
        };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let a = ptr_of(s, ops.w);
        let b = ptr_of(s, ops.q.buf());
        let d = {
            let mut v = ops.d.view_mut()?;
            let (p, _rec) = v.device_ptr_mut(s);
            p
        };
        // SAFETY: the descriptors and layouts are live and describe the
        // buffers passed (lengths checked in `prepare`: A = w is
        // in_f x out_f with lda in_f, B = q (or its padded copy) is in_f x
        // m_pad with ldb in_f_pad, D is out_f x m_pad with ldd out_f, the
        // scale buffers are the lengths `blk128x128_len` and
        // `ceil(in_f/128) * m_pad`); C = D with beta = 0 is not read;
        // alpha and beta are host f32 (the default pointer mode); the
        // workspace holds at least the algorithm's size; all on the
        // engine's stream, whose buffers these are.
        let r = unsafe {
            lt::matmul(
                inner.handle.0,
                ops.desc.0,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                a as *const c_void,
                ops.a_layout.0,
                b as *const c_void,
                ops.b_layout.0,
                d as *const c_void,
                ops.d_layout.0,
                d as *mut c_void,
                ops.d_layout.0,
                &ops.algo,
                ws_ptr as *mut c_void,
                ops.workspace_size,
                s.cu_stream() as sys::cudaStream_t,
            )
        };
        drop(inner);
        match r {
            Ok(()) => {}
            Err(e) if refusal(e) => {
                return Err(DeviceError::PeerRefused {
                    peer: PEER_NAME,
                    reason: format!("cublasLtMatmul: {}", status(e)),
                })
            }
            Err(e) => return Err(lt_err("cublasLtMatmul")(e)),
        }
        buffer::check_outputs(s, self.guards, &[(&ops.d, "y (cuBLASLt's D)")])
    }

    /// The whole GEMM into a new output `y` `[m x out_f]` (f32, row-major):
    /// [`CublasLtFp8::prepare`], [`CublasLtFp8::run`], and (when
    /// `m % 4 != 0`) a copy of `D`'s first `m` rows. Synchronises.
    ///
    /// # Errors
    /// As [`CublasLtFp8::prepare`] and [`CublasLtFp8::run`].
    pub fn mmq(
        &self,
        w: &CheckedWeights<'_>,
        w_scales: &Buffer<f32>,
        q: &Buffer<u8>,
        d: &Buffer<f32>,
        shape: &Shape,
    ) -> Result<Buffer<f32>> {
        let mut ops = self.prepare(w, w_scales, q, d, shape)?;
        self.run(&mut ops)?;
        let s = &self.stream;
        let y = if ops.m_pad == shape.m() {
            ops.d
        } else {
            let mut y = buffer::alloc::<f32>(s, shape.out_len(), self.guards)?;
            drv(
                || "cuMemcpyDtoD (y from cuBLASLt's padded D)".into(),
                s.memcpy_dtod(&ops.d.view().slice(0..shape.out_len()), &mut y.view_mut()?),
            )?;
            buffer::check_outputs(s, self.guards, &[(&y, "y")])?;
            y
        };
        super::deadline::settle(s, "cuStreamSynchronize")?;
        Ok(y)
    }
}

/// Whether a cuBLASLt status means "this shape, not with me".
fn refusal(e: CublasError) -> bool {
    matches!(
        e.0,
        sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED
            | sys::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE
    )
}

/// The device address of `buf`'s first element.
fn ptr_of<T>(stream: &Arc<CudaStream>, buf: &Buffer<T>) -> u64 {
    let v = buf.view();
    let (p, _rec) = v.device_ptr(stream);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BLK128x128 tensor by its definition: element (kb, nb) of the
    /// weight grid at `nb * ld + kb`.
    fn blk_by_definition(scales: &[f32], shape: &Shape, ld: usize) -> Vec<f32> {
        let (rows, cols) = (shape.scale_rows(), shape.scale_cols());
        let mut out = vec![0.0; ld.div_ceil(4) * 4 * rows];
        for nb in 0..rows {
            for kb in 0..cols {
                out[nb * ld + kb] = scales[nb * cols + kb];
            }
        }
        out
    }

    fn distinct(n: usize) -> Vec<f32> {
        (0..n).map(|i| 1.0 + i as f32).collect()
    }

    #[test]
    fn weight_scales_are_padded_to_four_blocks() {
        for (in_f, out_f) in [
            (128, 128),
            (256, 256),
            (384, 320),
            (512, 384),
            (144, 128),
            (640, 200),
            (5120, 1536),
            (1000, 130),
        ] {
            let shape = Shape::new(1, in_f, out_f).unwrap();
            let kb = in_f.div_ceil(128);
            let l4 = kb.div_ceil(4) * 4;
            assert_eq!(weight_scale_ld(&shape, WeightScaleLayout::Padded), l4);
            assert_eq!(weight_scale_ld(&shape, WeightScaleLayout::Unpadded), kb);
            assert_eq!(blk128x128_len(&shape), l4 * out_f.div_ceil(128));
            let s = distinct(shape.scale_len());
            let got = blk128x128_weight_scales(&s, &shape, WeightScaleLayout::Padded).unwrap();
            assert_eq!(got, blk_by_definition(&s, &shape, l4), "{in_f}x{out_f}");
            // Every value appears once, the padding is zero.
            assert_eq!(got.iter().filter(|&&v| v != 0.0).count(), s.len());
            let bad = blk128x128_weight_scales(&s, &shape, WeightScaleLayout::Unpadded).unwrap();
            assert_eq!(bad, blk_by_definition(&s, &shape, kb));
            assert_eq!(
                bad.len(),
                got.len(),
                "the planted bug keeps the padded size"
            );
            // Unpadded equals padded exactly when ceil(in_f/128) % 4 == 0,
            // or when there is a single 128-row block of out_f.
            assert_eq!(
                bad == got,
                kb.is_multiple_of(4) || out_f <= 128,
                "{in_f}x{out_f}"
            );
        }
    }

    #[test]
    fn vec128_scales_are_token_major_over_the_read_blocks() {
        for (m, in_f) in [
            (1, 128),
            (4, 256),
            (7, 144),
            (40, 272),
            (128, 5120),
            (3, 1000),
        ] {
            let shape = Shape::new(m, in_f, 16).unwrap();
            let d = distinct(shape.d_len());
            let got = vec128_act_scales(&d, &shape).unwrap();
            let (kb, m_pad) = (in_f.div_ceil(128), m.div_ceil(4) * 4);
            assert_eq!(token_pad(m), m_pad);
            assert_eq!(got.len(), kb * m_pad);
            for b in 0..kb {
                for j in 0..m_pad {
                    let want = if j < m {
                        d[j * shape.act_blocks() + b]
                    } else {
                        0.0
                    };
                    assert_eq!(got[b * m_pad + j], want, "m={m} in_f={in_f} j={j} b={b}");
                }
            }
        }
    }

    #[test]
    fn wrong_lengths_are_typed_errors() {
        let shape = Shape::new(2, 256, 256).unwrap();
        assert!(matches!(
            blk128x128_weight_scales(&[1.0; 3], &shape, WeightScaleLayout::Padded),
            Err(DeviceError::ArgLen {
                arg: "w_scales",
                want: 4,
                got: 3
            })
        ));
        assert!(matches!(
            vec128_act_scales(&[1.0; 3], &shape),
            Err(DeviceError::ArgLen {
                arg: "d",
                want: 8,
                got: 3
            })
        ));
    }

    #[test]
    fn misaligned_shapes_are_refused_before_anything_runs() {
        let refused = |in_f, out_f| {
            matches!(
                check_peer_shape(&Shape::new(1, in_f, out_f).unwrap()),
                Err(DeviceError::PeerRefused {
                    peer: PEER_NAME,
                    ..
                })
            )
        };
        assert!(refused(1000, 128), "in_f % 16 != 0");
        assert!(refused(128, 130), "out_f % 4 != 0");
        assert!(!refused(144, 200));
        assert!(!refused(5120, 1536));
    }

    #[test]
    fn the_switch_parses_strictly() {
        assert_eq!(Fp8Gemm::parse("builtin").unwrap(), Fp8Gemm::Builtin);
        assert_eq!(
            Fp8Gemm::parse("cublaslt").unwrap(),
            Fp8Gemm::CublasLt(WeightScaleLayout::Padded)
        );
        assert_eq!(
            Fp8Gemm::parse("cublaslt-unpadded").unwrap(),
            Fp8Gemm::CublasLt(WeightScaleLayout::Unpadded)
        );
        for (n, g) in Fp8Gemm::CHOICES {
            assert_eq!(g.name(), n);
        }
        for bad in ["", "cuBLASLt", "cublas", " cublaslt"] {
            let e = Fp8Gemm::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("KERNEL_ORACLE_FP8_MMQ="), "{e}");
            assert!(e.contains("cublaslt-unpadded"), "{e}");
        }
    }
}
