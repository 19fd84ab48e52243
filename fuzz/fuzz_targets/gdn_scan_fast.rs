//! CPU only: the fast GDN scan (T packed rows, snapshots, buffer parity)
//! against the spec in core, every output (`kernel_oracle::gdn_fast`).
#![no_main]
use kernel_oracle::gdn_fast::{scan_fast_matches_spec, ScanCase};

kernel_oracle_fuzz::asan_options!();

libfuzzer_sys::fuzz_target!(|case: ScanCase| scan_fast_matches_spec(&case));
