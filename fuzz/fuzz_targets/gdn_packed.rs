//! The CUDA Gated DeltaNet kernels (or the candidate named by
//! KERNEL_ORACLE_GDN_CU): the packed twins against chained per-row
//! launches (and, one case in four, a graph replay on rebound buffers),
//! and every kernel against the core oracle. A divergence panics with a
//! reproduction; see `kernel_oracle::gdn::check`.
#![no_main]
use kernel_oracle::gdn::{check_with_artifact, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|spec: CaseSpec| {
    check_with_artifact(&spec, Some("<the crash-* artifact libFuzzer names below>"));
});
