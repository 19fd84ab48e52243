//! The CUDA FP8 MMQ kernels (or the candidate named by
//! KERNEL_ORACLE_FP8_MMQ_CU; with KERNEL_ORACLE_FP8_MMQ=cublaslt, cuBLASLt
//! as the GEMM) against the core oracle. A divergence panics with a
//! reproduction; shapes the peer refuses are counted in the stats line;
//! see `kernel_oracle::fp8_mmq::check`.
#![no_main]
use kernel_oracle::fp8_mmq::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

kernel_oracle_fuzz::typed_fuzz_target!(|spec: &CaseSpec, artifact: &str| {
    check_with_artifact(spec, Some(artifact))
});
