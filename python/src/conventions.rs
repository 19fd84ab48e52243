//! The conventions and choices of core as Python enums: the FP8 NaN
//! magnitude and overflow policy (`oracle::conventions`), the FP8 GEMM's
//! schedules (`oracle::fp8_mmq::Schedule`), the MMA operand formats and
//! instructions (`oracle::tensor_core`) and ggml's block types
//! (`oracle::ggml::Dtype`). Each Python member maps to exactly one core
//! value; the docs of the core items are the definitions.

use oracle::fp8_mmq::Schedule as CoreSchedule;
use pyo3::prelude::*;

/// How an FP8 code with the NaN magnitude decodes
/// (`oracle::conventions::NanMagnitude`): `IEEE`, a NaN (OCP OFP8, PTX,
/// torch, what the tensor cores read); `READ_AS_ZERO`, `+0.0` (the
/// modelopt host convention of seed 000's `e4m3_to_f32`).
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NanMagnitude {
    /// `NanMagnitude::Ieee`.
    #[pyo3(name = "IEEE")]
    Ieee,
    /// `NanMagnitude::ReadAsZero`.
    #[pyo3(name = "READ_AS_ZERO")]
    ReadAsZero,
}

impl From<NanMagnitude> for oracle::conventions::NanMagnitude {
    fn from(n: NanMagnitude) -> Self {
        match n {
            NanMagnitude::Ieee => Self::Ieee,
            NanMagnitude::ReadAsZero => Self::ReadAsZero,
        }
    }
}

/// What an FP8 encoder does beyond the largest finite code
/// (`oracle::conventions::Overflow`): `SAT_FINITE`, PTX
/// `cvt.rn.satfinite` (±max finite; NaN gives 0x7F); `NON_SATURATING`,
/// OCP / ml_dtypes / torch `.to(float8_*)` (NaN in E4M3, infinity in E5M2).
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// `Overflow::SatFinite`.
    #[pyo3(name = "SAT_FINITE")]
    SatFinite,
    /// `Overflow::NonSaturating`.
    #[pyo3(name = "NON_SATURATING")]
    NonSaturating,
}

impl From<Overflow> for oracle::conventions::Overflow {
    fn from(o: Overflow) -> Self {
        match o {
            Overflow::SatFinite => Self::SatFinite,
            Overflow::NonSaturating => Self::NonSaturating,
        }
    }
}

/// A declared arithmetic of the per-block FP8 GEMM
/// (`oracle::fp8_mmq::Schedule`: the in-block accumulation and the fold
/// of each 128-k block into the sum). `str()` gives the name reports use.
///
/// - `V2`: f32 accumulation, separate fold `sum + (s * d) * c` (seed 000);
/// - `V2_FUSED`: f32 accumulation, fused fold `fma(s * d, c, sum)`;
/// - `SM90_WGMMA_FUSED` / `SM90_WGMMA_SEPARATE`: the block's four k = 32 sm_90
///   `wgmma` FP8 MMAs (core's bit-accurate model), either fold;
///   `SM90_WGMMA_FUSED` is what cuBLASLt's block-scaled FP8 GEMM computes on
///   the H200;
/// - `SM90_MMA_SYNC_FUSED` / `SM90_MMA_SYNC_SEPARATE`: the sm_90
///   `mma.sync` FP8 MMA as ptxas lowers it (f16 HMMAs), either fold;
/// - `SM90_WGMMA_PARTIAL_FIRST_FUSED` / `SM90_WGMMA_PARTIAL_FIRST` /
///   `V2_PARTIAL_FIRST_FUSED` / `V2_PARTIAL_FIRST`: the partial-first
///   folds `fma(c * d, s,
///   sum)` and `sum + (c * d) * s`, as the field's Triton block-FP8 GEMMs
///   write the fold (`accumulator += tl.dot(a, b) * a_s[:, None] *
///   b_s[None, :]`: vLLM's and SGLang's `_w8a8_block_fp8_matmul`,
///   DeepSeek-V3's `fp8_gemm_kernel`).
///
/// Under a `V2*` schedule the RAND arm is judged by a summation bound (the
/// order inside an MMA is the hardware's); under an `SM90_*` schedule
/// every arm is bit for bit.
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum Schedule {
    /// `Schedule::V2`.
    V2,
    /// `Schedule::V2_FUSED`.
    V2_FUSED,
    /// `Schedule::SM90_WGMMA_FUSED`.
    SM90_WGMMA_FUSED,
    /// `Schedule::SM90_WGMMA_SEPARATE`.
    SM90_WGMMA_SEPARATE,
    /// `Schedule::SM90_MMA_SYNC_FUSED`.
    SM90_MMA_SYNC_FUSED,
    /// `Schedule::SM90_MMA_SYNC_SEPARATE`.
    SM90_MMA_SYNC_SEPARATE,
    /// `Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED`.
    SM90_WGMMA_PARTIAL_FIRST_FUSED,
    /// `Schedule::SM90_WGMMA_PARTIAL_FIRST`.
    SM90_WGMMA_PARTIAL_FIRST,
    /// `Schedule::V2_PARTIAL_FIRST_FUSED`.
    V2_PARTIAL_FIRST_FUSED,
    /// `Schedule::V2_PARTIAL_FIRST`.
    V2_PARTIAL_FIRST,
}

impl Schedule {
    /// Every member, in `oracle::fp8_mmq::Schedule::KNOWN`'s order.
    pub const ALL: [Schedule; 10] = [
        Schedule::V2,
        Schedule::V2_FUSED,
        Schedule::SM90_WGMMA_FUSED,
        Schedule::SM90_WGMMA_SEPARATE,
        Schedule::SM90_MMA_SYNC_FUSED,
        Schedule::SM90_MMA_SYNC_SEPARATE,
        Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED,
        Schedule::SM90_WGMMA_PARTIAL_FIRST,
        Schedule::V2_PARTIAL_FIRST_FUSED,
        Schedule::V2_PARTIAL_FIRST,
    ];

    /// The core schedule.
    pub fn core(self) -> CoreSchedule {
        match self {
            Schedule::V2 => CoreSchedule::V2,
            Schedule::V2_FUSED => CoreSchedule::V2_FUSED,
            Schedule::SM90_WGMMA_FUSED => CoreSchedule::SM90_WGMMA_FUSED,
            Schedule::SM90_WGMMA_SEPARATE => CoreSchedule::SM90_WGMMA_SEPARATE,
            Schedule::SM90_MMA_SYNC_FUSED => CoreSchedule::SM90_MMA_SYNC_FUSED,
            Schedule::SM90_MMA_SYNC_SEPARATE => CoreSchedule::SM90_MMA_SYNC_SEPARATE,
            Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED => {
                CoreSchedule::SM90_WGMMA_PARTIAL_FIRST_FUSED
            }
            Schedule::SM90_WGMMA_PARTIAL_FIRST => CoreSchedule::SM90_WGMMA_PARTIAL_FIRST,
            Schedule::V2_PARTIAL_FIRST_FUSED => CoreSchedule::V2_PARTIAL_FIRST_FUSED,
            Schedule::V2_PARTIAL_FIRST => CoreSchedule::V2_PARTIAL_FIRST,
        }
    }

    /// The member for a core schedule (`None` for a schedule core knows
    /// and this module does not name).
    pub fn from_core(s: CoreSchedule) -> Option<Schedule> {
        Schedule::ALL.into_iter().find(|p| p.core() == s)
    }
}

#[pymethods]
impl Schedule {
    /// The report name, e.g. `"v2"`, `"sm90 FP8 wgmma + fused fold"`.
    fn __str__(&self) -> String {
        self.core().to_string()
    }

    /// Whether every arm is compared bit for bit under this schedule (a
    /// tensor-core model accumulates; `Schedule::bit_exact`).
    #[getter]
    fn bit_exact(&self) -> bool {
        self.core().bit_exact()
    }
}

/// An FP8 operand format of the MMA (`oracle::tensor_core::Fp8Kind`).
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Format {
    /// OCP E4M3FN.
    #[pyo3(name = "E4M3")]
    E4m3,
    /// OCP E5M2.
    #[pyo3(name = "E5M2")]
    E5m2,
}

impl From<Fp8Format> for oracle::tensor_core::Fp8Kind {
    fn from(f: Fp8Format) -> Self {
        match f {
            Fp8Format::E4m3 => Self::E4m3,
            Fp8Format::E5m2 => Self::E5m2,
        }
    }
}

/// The FP8 MMA instruction a model describes
/// (`oracle::tensor_core::Instruction`): `WGMMA` (sm_90a
/// `wgmma.mma_async ... k32`, rules TC-*), `MMA_SYNC` (sm_90
/// `mma.sync.m16n8k32` as ptxas lowers it, rules MMA-*).
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// `oracle::tensor_core::SM90_WGMMA`.
    #[pyo3(name = "WGMMA")]
    Wgmma,
    /// `oracle::tensor_core::SM90_MMA_SYNC`.
    #[pyo3(name = "MMA_SYNC")]
    MmaSync,
}

impl Instruction {
    /// The core model.
    pub fn model(self) -> oracle::tensor_core::Model {
        match self {
            Instruction::Wgmma => oracle::tensor_core::SM90_WGMMA,
            Instruction::MmaSync => oracle::tensor_core::SM90_MMA_SYNC,
        }
    }
}

/// A ggml weight format (`oracle::ggml::Dtype`): `F32`, `Q4_0`, `Q8_0`,
/// `Q4_K`, `Q6_K`; `str()` is ggml's name. Block sizes (elements, bytes):
/// f32 (1, 4), q4_0 (32, 18), q8_0 (32, 34), q4_K (256, 144),
/// q6_K (256, 210).
#[pyclass(eq, eq_int, frozen, from_py_object, module = "kernel_oracle")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// `Dtype::F32`.
    F32,
    /// `Dtype::Q4_0`.
    Q4_0,
    /// `Dtype::Q8_0`.
    Q8_0,
    /// `Dtype::Q4K`.
    Q4_K,
    /// `Dtype::Q6K`.
    Q6_K,
}

impl GgmlType {
    /// Every member, in `Dtype::ALL`'s order.
    pub const ALL: [GgmlType; 5] = [
        GgmlType::F32,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];

    /// The core dtype.
    pub fn core(self) -> oracle::ggml::Dtype {
        use oracle::ggml::Dtype;
        match self {
            GgmlType::F32 => Dtype::F32,
            GgmlType::Q4_0 => Dtype::Q4_0,
            GgmlType::Q8_0 => Dtype::Q8_0,
            GgmlType::Q4_K => Dtype::Q4K,
            GgmlType::Q6_K => Dtype::Q6K,
        }
    }
}

#[pymethods]
impl GgmlType {
    /// ggml's name (`"q4_K"`).
    fn __str__(&self) -> &'static str {
        self.core().name()
    }

    /// Elements per block.
    #[getter]
    fn block_elems(&self) -> usize {
        self.core().block_elems()
    }

    /// Bytes per block.
    #[getter]
    fn block_bytes(&self) -> usize {
        self.core().block_bytes()
    }
}

/// Adds the enums to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NanMagnitude>()?;
    m.add_class::<Overflow>()?;
    m.add_class::<Schedule>()?;
    m.add("SCHEDULES", Schedule::ALL.to_vec())?;
    m.add_class::<Fp8Format>()?;
    m.add_class::<Instruction>()?;
    m.add_class::<GgmlType>()?;
    Ok(())
}
