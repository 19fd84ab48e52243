//! CPU only: the fast quantizer and GEMM against the spec in core, bit for
//! bit, under every known schedule (`Schedule::KNOWN`). A generated case runs on every SIMD target this CPU has
//! (`fast_matches_spec`); raw operands (every e4m3 code, NaN and infinite
//! scales, activations at any exponent) run on every target, forced, the
//! ones this CPU lacks as their tiles built for the baseline (`check_raw`).
#![no_main]
use kernel_oracle::fp8_mmq::fast::{check_raw, RawCase};
use kernel_oracle::fp8_mmq::{fast_matches_spec, CaseSpec};

kernel_oracle_fuzz::asan_options!();

#[derive(Debug, arbitrary::Arbitrary)]
enum Input {
    Case(CaseSpec),
    Raw(RawCase),
}

libfuzzer_sys::fuzz_target!(|input: Input| {
    match input {
        Input::Case(spec) => fast_matches_spec(&spec),
        Input::Raw(raw) => check_raw(&raw),
    }
});
