//! The moe-tables commands at their edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(kernel_oracle::paths::kernel_oracle_exe(env!(
        "CARGO_BIN_EXE_kernel-oracle"
    )))
    .args(args)
    .output()
    .expect("the binary runs")
}

#[test]
fn case_moe_tables_needs_three_bases() {
    let out = kernel_oracle(&[
        "case",
        "moe-tables",
        "--n-expert",
        "4",
        "--n-pairs",
        "2",
        "--bases",
        "0,0",
        "--strides",
        "1,1,1",
        "--seed",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// The reproduction line a divergence prints parses: it reaches the CUDA
/// check (exit 2 without a driver, "no CUDA" in the message) rather than
/// an argument error.
#[test]
fn the_printed_reproduction_parses() {
    use arbitrary::{Arbitrary, Unstructured};
    let bytes: Vec<u8> = (0u8..64).map(|b| b.wrapping_mul(37)).collect();
    let spec =
        kernel_oracle::moe_tables::CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
    let line = kernel_oracle::moe_tables::report::repro_command(&spec);
    let args: Vec<&str> = line
        .split_whitespace()
        .skip_while(|a| *a != "case")
        .collect();
    let out = kernel_oracle(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    // clap's argument errors start with "error:"; past them, a host with
    // no GPU gets the engine's "kernel-oracle: ..." message.
    assert!(!err.starts_with("error:"), "{line}\n{err}");
    assert!(!err.contains("panicked"), "{line}\n{err}");
}

#[test]
fn case_moe_tables_without_bases_is_an_error_not_a_panic() {
    let out = kernel_oracle(&[
        "case",
        "moe-tables",
        "--n-expert",
        "4",
        "--n-pairs",
        "4",
        "--seed",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
}
