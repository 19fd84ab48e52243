//! The CUDA FP8 MMQ kernels (or the candidate named by
//! KERNEL_ORACLE_FP8_MMQ_CU; with KERNEL_ORACLE_FP8_MMQ=cublaslt, cuBLASLt
//! as the GEMM) against the core oracle. A divergence panics with a
//! reproduction; shapes the peer refuses are counted in the stats line;
//! see `kernel_oracle::fp8_mmq::check`.
#![no_main]
use kernel_oracle::fp8_mmq::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| -> libfuzzer_sys::Corpus {
    kernel_oracle_fuzz::run_typed(data, |spec: &CaseSpec, artifact| {
        check_with_artifact(spec, Some(artifact))
    })
});
