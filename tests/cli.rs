//! The command line's behaviour at its edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Without a CUDA driver the gate says so and exits 2; with one it runs.
/// Never a panic.
#[test]
fn check_without_a_device_is_a_clear_error_not_a_panic() {
    let out = kernel_oracle(&["check", "fp8-mmq", "128", "128", "1"]);
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
fn partial_shape_arguments_are_refused() {
    let out = kernel_oracle(&["check", "fp8-mmq", "128", "128"]);
    assert_eq!(out.status.code(), Some(2));
}
