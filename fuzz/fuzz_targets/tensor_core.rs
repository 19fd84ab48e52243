//! One FP8 tensor-core MMA instruction against its bit-accurate model
//! (`oracle::tensor_core`): every output bit for bit. The leading bytes
//! choose class, format pair, instruction, accumulator input and tile
//! count
//! (`kernel_oracle::tensor_core::CaseSpec::from_bytes`); a divergence
//! panics with the `case tensor-core ...` line that reruns it
//! (`kernel_oracle::paths::rerun_prefix` names the program).
#![no_main]
use kernel_oracle::tensor_core::{check, CaseSpec};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    check(&CaseSpec::from_bytes(data));
});
