//! The gdn commands at their edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Without a CUDA driver the gate says so and exits 2; with one it runs.
#[test]
fn check_gdn_without_a_device_is_a_clear_error_not_a_panic() {
    let out = kernel_oracle(&["check", "gdn"]);
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
fn case_gdn_refuses_a_bad_shape_with_exit_2() {
    let out = kernel_oracle(&[
        "case", "gdn", "--num-k", "2", "--num-v", "3", "--t", "2", "--seed", "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple"));
}

#[test]
fn mutant_gdn_lists_and_writes() {
    let out = kernel_oracle(&["mutant", "gdn"]);
    assert_eq!(out.status.code(), Some(0));
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("decay-after-delta") && list.contains("eps-outside-sqrt"));
    let path = std::env::temp_dir().join(format!("gdn-mutant-{}.cu", std::process::id()));
    let out = kernel_oracle(&[
        "mutant",
        "gdn",
        "eps-outside-sqrt",
        "-o",
        path.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("KERNEL_ORACLE_GDN_CU="));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("__fadd_rn(__fsqrt_rn(ss), eps)"));
    let out = kernel_oracle(&["mutant", "gdn", "no-such-mutant"]);
    assert_eq!(out.status.code(), Some(2));
}

/// The reproduction a fuzzer prints parses: every knob at a non-default
/// value, on a valid shape (exit 2 without a device, never a parse error).
#[test]
fn case_gdn_accepts_the_printed_reproduction() {
    let spec = kernel_oracle::gdn::CaseSpec {
        eps: 0.0,
        alpha_spread: 1e4,
        state_spread: 3e38,
        zero_qk: 3,
        specials: false,
        graph: true,
        ..kernel_oracle::gdn::CaseSpec::seed_like(2, 4, 3, 5, 0xABC)
    };
    let cmd = kernel_oracle::gdn::report::repro_command(&spec);
    let args: Vec<&str> = cmd.split_whitespace().skip(4).collect();
    assert_eq!(args[0], "case", "{cmd}");
    let out = kernel_oracle(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(2)),
        "{cmd}: {stderr}"
    );
    assert!(!stderr.contains("error: "), "{cmd}: {stderr}");
}
