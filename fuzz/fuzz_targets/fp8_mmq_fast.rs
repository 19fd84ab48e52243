//! CPU only: the fast GEMM path against the spec in core, bit for bit.
#![no_main]
use kernel_oracle::fp8_mmq::{fast_matches_spec, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|spec: CaseSpec| {
    fast_matches_spec(&spec);
});
