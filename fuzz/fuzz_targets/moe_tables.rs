//! The CUDA MoE verify-rows tables kernel (or the candidate named by
//! KERNEL_ORACLE_MOE_TABLES_CU) against the core oracle: tables bit for
//! bit, refusals error for error. A divergence panics with a
//! reproduction; see `kernel_oracle::moe_tables::check`.
#![no_main]
use kernel_oracle::moe_tables::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

kernel_oracle_fuzz::typed_fuzz_target!(|spec: &CaseSpec, artifact: &str| {
    check_with_artifact(spec, Some(artifact))
});
