//! The moe-tables commands at their edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Without a CUDA driver the gate says so and exits 2; with one it runs.
#[test]
fn check_moe_tables_without_a_device_is_a_clear_error_not_a_panic() {
    let out = kernel_oracle(&["check", "moe-tables"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stderr.contains("panicked"), "{stderr}");
    match out.status.code() {
        Some(2) => assert!(stderr.contains("cannot run the CUDA kernels"), "{stderr}"),
        Some(0) => assert!(stdout.contains("ALL GREEN"), "{stdout}"),
        other => panic!("exit {other:?}\n{stdout}\n{stderr}"),
    }
}

#[test]
fn mutant_moe_tables_lists_and_writes() {
    let out = kernel_oracle(&["mutant", "moe-tables"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stride-product-32bit"));
    let path = std::env::temp_dir().join(format!("moe-mutant-{}.cu", std::process::id()));
    let out = kernel_oracle(&[
        "mutant",
        "moe-tables",
        "stride-product-32bit",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("(unsigned)e * (unsigned)stride"));
    let out = kernel_oracle(&["mutant", "moe-tables", "no-such-mutant"]);
    assert_eq!(out.status.code(), Some(2));
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
