//! The CUDA MoE verify-rows tables kernel (or the candidate named by
//! KERNEL_ORACLE_MOE_TABLES_CU) against the core oracle: tables bit for
//! bit, refusals error for error. A divergence panics with a
//! reproduction; see `kernel_oracle::moe_tables::check`.
#![no_main]
use kernel_oracle::moe_tables::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| -> libfuzzer_sys::Corpus {
    kernel_oracle_fuzz::run_typed(data, |spec: &CaseSpec, artifact| {
        check_with_artifact(spec, Some(artifact))
    })
});
