//! The command line's behaviour at its edges.

use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(kernel_oracle::paths::kernel_oracle_exe(env!(
        "CARGO_BIN_EXE_kernel-oracle"
    )))
    .args(args)
    .output()
    .expect("the binary runs")
}

/// Without a CUDA driver each gate says so and exits 2; with one it runs.
/// Never a panic.
#[test]
fn check_without_a_device_is_a_clear_error_not_a_panic() {
    for args in [
        &["check", "fp8-mmq", "128", "128", "1"][..],
        &["check", "gdn"],
    ] {
        let out = kernel_oracle(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        match out.status.code() {
            Some(2) => assert!(stderr.contains("cannot run the CUDA kernels"), "{stderr}"),
            Some(0) => assert!(stdout.contains("ALL GREEN"), "{stdout}"),
            other => panic!("{args:?}: exit {other:?}\n{stdout}\n{stderr}"),
        }
    }
}

#[test]
fn partial_shape_arguments_are_refused() {
    let out = kernel_oracle(&["check", "fp8-mmq", "128", "128"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A zero time budget is refused before anything runs: `fuzz` would
/// report a survival after no execution, and libFuzzer, which `score`
/// runs with `-max_total_time=SECS`, reads 0 as no limit.
#[test]
fn a_zero_fuzz_budget_is_refused() {
    for args in [
        &["fuzz", "mul-mat", "--secs", "0"][..],
        &["score", "mul-mat", "--secs", "0"],
    ] {
        let out = kernel_oracle(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("'--secs <SECONDS>'"), "{args:?}: {stderr}");
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

/// `mutant KIND` lists the planted bugs, `mutant KIND NAME -o FILE`
/// writes the candidate and prints how to check it, an unknown name exits
/// 2; for the MoE tables and the GDN kernels.
#[test]
fn mutant_lists_and_writes() {
    for (kind, name, env, planted) in [
        (
            "moe-tables",
            "stride-product-32bit",
            "KERNEL_ORACLE_MOE_TABLES_CU=",
            "(unsigned)e * (unsigned)stride",
        ),
        (
            "gdn",
            "eps-outside-sqrt",
            "KERNEL_ORACLE_GDN_CU=",
            "__fadd_rn(__fsqrt_rn(ss), eps)",
        ),
    ] {
        let out = kernel_oracle(&["mutant", kind]);
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains(name));
        let path = std::env::temp_dir().join(format!("{kind}-mutant-{}.cu", std::process::id()));
        let out = kernel_oracle(&["mutant", kind, name, "-o", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(env));
        assert!(std::fs::read_to_string(&path).unwrap().contains(planted));
        let out = kernel_oracle(&["mutant", kind, "no-such-mutant"]);
        assert_eq!(out.status.code(), Some(2));
    }
    let list = String::from_utf8_lossy(&kernel_oracle(&["mutant", "gdn"]).stdout).into_owned();
    assert!(list.contains("decay-after-delta"), "{list}");
}

/// The reproduction a fuzzer prints parses: every knob at a non-default
/// value, on a valid shape (exit 2 without a device, never a parse error).
#[test]
fn case_gdn_accepts_the_printed_reproduction() {
    let spec = kernel_oracle::gdn::CaseSpec {
        eps: 0.0,
        alpha_spread: 1e4,
        state_spread: 3e38,
        negative_state: true,
        zero_qk: 3,
        specials: false,
        graph: true,
        ..kernel_oracle::gdn::CaseSpec::seed_like(2, 4, 3, 5, 0xABC)
    };
    assert_reproduction_parses(&kernel_oracle::gdn::report::repro_command(&spec));
}

/// Runs a printed reproduction line (from its `case` on): it must get past
/// argument parsing (exit 0, 1 or 2 with the engine's own message, never a
/// clap "error: ").
fn assert_reproduction_parses(cmd: &str) {
    let args: Vec<&str> = cmd
        .split_whitespace()
        .skip_while(|a| *a != "case")
        .collect();
    assert_eq!(args.first(), Some(&"case"), "{cmd}");
    let out = kernel_oracle(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0..=2)), "{cmd}: {stderr}");
    assert!(!stderr.contains("error: "), "{cmd}: {stderr}");
}

/// Every fp8-mmq arm's printed reproduction parses (`--arm codes` among
/// them), with every knob at a non-default value: exit 2 without a device
/// (0 or 1 with one), never a parse error.
#[test]
fn case_fp8_mmq_accepts_the_printed_reproduction_for_every_arm() {
    use kernel_oracle::fp8_mmq::{report, Arm, CaseSpec, Knobs};
    for arm in Arm::ALL {
        let spec = CaseSpec {
            knobs: Knobs {
                every_code: true,
                zero_blocks: 2,
                act_exp: -3,
                nan_codes: 1,
                variant: Some(3),
            },
            ..CaseSpec::battery(130, 3, 2, arm)
        };
        let cmd = report::repro_command(&spec);
        assert!(cmd.contains(&format!("--arm {}", arm.name().to_lowercase())));
        assert_reproduction_parses(&cmd);
    }
}

/// A closed standard output (`kernel-oracle kinds | head -0`) ends the
/// program as SIGPIPE ends a C tool, exit status 141, with no panic
/// message: Rust ignores SIGPIPE, so a print to a closed pipe returns
/// EPIPE, which `println!` turns into a panic.
#[test]
fn a_closed_stdout_is_exit_141_not_a_panic() {
    for args in [
        &["kinds"][..],
        &["mutant", "gdn"],
        &["sanitize-cases", "gdn"],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = Command::new(kernel_oracle::paths::kernel_oracle_exe(env!(
            "CARGO_BIN_EXE_kernel-oracle"
        )))
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    }
}
