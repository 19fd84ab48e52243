//! CPU only: the fast ggml `mul_mat` (every format, every SIMD target,
//! forced) against the spec in core, output for output; raw block bytes,
//! non-finite f16 scales included (`kernel_oracle::ggml_fast`).
#![no_main]
use kernel_oracle::ggml_fast::{fast_matches_spec, FastCase};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|case: FastCase| fast_matches_spec(&case));
