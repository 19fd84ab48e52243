//! `KERNEL_ORACLE_FP8_MMQ`, the switch that runs the FP8 commands' GEMM on
//! the cuBLASLt peer: strict values, the peer's planted bug in the mutant
//! listing, and reproductions that carry the switch. No GPU needed.

use std::process::Command;

fn kernel_oracle(args: &[&str], switch: Option<&str>) -> std::process::Output {
    let mut c = Command::new(kernel_oracle::paths::kernel_oracle_exe(env!(
        "CARGO_BIN_EXE_kernel-oracle"
    )));
    c.args(args);
    match switch {
        Some(v) => c.env("KERNEL_ORACLE_FP8_MMQ", v),
        None => c.env_remove("KERNEL_ORACLE_FP8_MMQ"),
    };
    c.output().expect("the binary runs")
}

/// An unknown value exits 2 naming the variable and the values it takes,
/// before anything runs.
#[test]
fn an_unknown_value_exits_2() {
    for args in [
        &["check", "fp8-mmq", "128", "128", "1"][..],
        &["mutant", "fp8-mmq"],
    ] {
        let out = kernel_oracle(args, Some("cuBLAS"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("KERNEL_ORACLE_FP8_MMQ=\"cuBLAS\": expected `builtin`"),
            "{stderr}"
        );
        assert!(stderr.contains("cublaslt-unpadded"), "{stderr}");
    }
}

/// Without a device the peer cannot run either: exit 2, never a panic; with
/// one, the gate runs (exit 0 or 1: FOLD and RAND compare the seed's v2
/// schedule, which cuBLASLt does not follow).
#[test]
fn the_peer_without_a_device_is_a_clear_error() {
    let out = kernel_oracle(&["check", "fp8-mmq", "128", "128", "1"], Some("cublaslt"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    match out.status.code() {
        Some(2) => assert!(stderr.contains("cannot run"), "{stderr}"),
        Some(0 | 1) => {
            assert!(String::from_utf8_lossy(&out.stdout).contains("fp8 GEMM: peer cuBLASLt"))
        }
        other => panic!("exit {other:?}: {stderr}"),
    }
}

/// `mutant fp8-mmq` lists the peer's planted bug after the `.cu` mutants,
/// marked so scripts can skip it; naming it prints how to run it; asking
/// for its file is an error (there is none).
#[test]
fn the_peer_mutant_is_listed_and_explained() {
    let out = kernel_oracle(&["mutant", "fp8-mmq"], None);
    assert_eq!(out.status.code(), Some(0));
    let list = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = list
        .lines()
        .find(|l| l.starts_with("cublaslt-unpadded "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        line.contains("(peer; KERNEL_ORACLE_FP8_MMQ=cublaslt-unpadded)"),
        "{line}"
    );
    assert!(
        list.lines().last() == Some(line),
        "peer mutants come last: {list}"
    );
    let out = kernel_oracle(&["mutant", "fp8-mmq", "cublaslt-unpadded"], None);
    assert_eq!(out.status.code(), Some(0));
    // The binary runs where this test does: its program prefix is ours.
    let run = format!(
        "run: KERNEL_ORACLE_FP8_MMQ=cublaslt-unpadded {} check fp8-mmq",
        kernel_oracle::paths::rerun_prefix()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&run), "{stdout}");
    let out = kernel_oracle(
        &["mutant", "fp8-mmq", "cublaslt-unpadded", "-o", "/tmp/x.cu"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
}

/// Every reproduction line of a divergence carries the switch, so a rerun
/// runs the peer again (and fails again) instead of the builtin MMQ.
#[test]
fn reproductions_carry_the_switch() {
    use kernel_oracle::fp8_mmq::{report, Arm, CaseSpec};
    // The only test of this binary that touches its own environment.
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ", "cublaslt-unpadded");
    let spec = CaseSpec::battery(256, 256, 64, Arm::Exact);
    let cmd = report::repro_command(&spec);
    let want = format!(
        "KERNEL_ORACLE_FP8_MMQ=cublaslt-unpadded {} case fp8-mmq",
        kernel_oracle::paths::rerun_prefix()
    );
    assert!(cmd.starts_with(&want), "{cmd}");
    assert!(report::repro_env().contains("KERNEL_ORACLE_FP8_MMQ=cublaslt-unpadded"));
    // A forced MMQ variant and a requested schedule travel too.
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ_VARIANT", "15");
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ_SCHEDULE", "3");
    let env = report::repro_env();
    assert!(env.contains("KERNEL_ORACLE_FP8_MMQ_VARIANT=15 "), "{env}");
    assert!(env.contains("KERNEL_ORACLE_FP8_MMQ_SCHEDULE=3 "), "{env}");
    assert_eq!(kernel_oracle::fp8_mmq::run::forced_variant(), Ok(Some(15)));
    assert_eq!(
        kernel_oracle::fp8_mmq::run::requested_schedule(),
        Ok(Some(oracle::fp8_mmq::Schedule::SM90_WGMMA_FUSED))
    );
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ_SCHEDULE", "9");
    assert!(kernel_oracle::fp8_mmq::run::requested_schedule().is_err());
}
