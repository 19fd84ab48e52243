//! The WGSL GEMM over ggml blocks (shaders/mul_mat_reg_tile.wgsl, or the
//! candidate named by KERNEL_ORACLE_MUL_MAT_WGSL) against the core oracle
//! on the wgpu adapter (WGPU_BACKEND, else Vulkan): arbitrary m, n, k in
//! whole blocks, dtype, arm, geometry and data seed. A divergence panics
//! with a reproduction; see `kernel_oracle::mul_mat::check`.
#![no_main]
use kernel_oracle::mul_mat::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

kernel_oracle_fuzz::typed_fuzz_target!(|spec: &CaseSpec, artifact: &str| {
    check_with_artifact(spec, Some(artifact))
});
