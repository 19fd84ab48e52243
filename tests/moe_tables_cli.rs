//! The moe-tables commands at their edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
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
