//! The WGSL GEMM over ggml blocks (shaders/mul_mat_reg_tile.wgsl, or the
//! candidate named by KERNEL_ORACLE_MUL_MAT_WGSL) against the core oracle
//! on the wgpu adapter (WGPU_BACKEND, else Vulkan): arbitrary m, n, k in
//! whole blocks, dtype, arm, geometry and data seed. A divergence panics
//! with a reproduction; see `kernel_oracle::mul_mat::check`.
#![no_main]
use kernel_oracle::mul_mat::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| -> libfuzzer_sys::Corpus {
    kernel_oracle_fuzz::run_typed(data, |spec: &CaseSpec, artifact| {
        check_with_artifact(spec, Some(artifact))
    })
});
