//! The tensor-core probe kernels (`cu/tensor_core.cu`): one FP8 MMA
//! instruction per tile on given operands, so its result can be compared
//! with [`oracle::tensor_core`] bit for bit.

/// The builtin probe source, `cu/tensor_core.cu`, embedded at build time.
pub const BUILTIN_TENSOR_CORE_CU: &str = include_str!("../../../cu/tensor_core.cu");

/// The `mma.sync` probes (sm_89 and later), one per operand-format pair
/// (A, B): e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3, e5m2 x e5m2.
pub const MMA_KERNELS: [&str; 4] = [
    "tc_mma_e4m3_e4m3",
    "tc_mma_e4m3_e5m2",
    "tc_mma_e5m2_e4m3",
    "tc_mma_e5m2_e5m2",
];

/// The `wgmma` probes (sm_90a only), in the order of [`MMA_KERNELS`].
pub const WGMMA_KERNELS: [&str; 4] = [
    "tc_wgmma_e4m3_e4m3",
    "tc_wgmma_e4m3_e5m2",
    "tc_wgmma_e5m2_e4m3",
    "tc_wgmma_e5m2_e5m2",
];
