//! The reproduction lines the reports print, without a GPU: a fuzz
//! input's line (`kernel_oracle::fuzz_rerun_lines`) carries the same
//! environment as the case's line, takes its program from
//! `paths::fuzz_rerun_prefix`, and never holds libFuzzer's placeholder
//! (its `<` is a redirection under `sh -c`); a kernel source that cannot
//! load prints a rerun line with the kind's whole environment. Every
//! `rerun:` line is a command alone: no `#` note (interactive zsh takes
//! its words as arguments), no `<` or `>`.
//!
//! The first test sets the candidate variables of this process; the
//! second matches its lines whatever they hold.

use kernel_oracle::paths::{fuzz_rerun_prefix, rerun_prefix};
use kernel_oracle::{fuzz_rerun_lines, libfuzzer_crash_artifact, shell_quote};

/// The commands of `report`'s `rerun:` lines, each asserted to be a
/// command alone.
fn rerun_commands(report: &str) -> Vec<&str> {
    let lines: Vec<&str> = report
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("rerun: "))
        .collect();
    for l in &lines {
        assert!(!l.contains(['#', '<', '>']), "{l}\n{report}");
    }
    lines
}

/// The value `candidate_env` prints for a relative candidate path: the
/// path made absolute, quoted when it needs it.
fn absolute(rel: &str) -> String {
    kernel_oracle::shell_quote(&std::path::absolute(rel).unwrap().to_string_lossy())
}

#[test]
fn fuzz_and_source_fault_lines_carry_the_kinds_environment() {
    std::env::set_var(device::cuda::ENV_MOE_TABLES_CU, "cand moe.cu");
    std::env::set_var(device::cuda::ENV_GDN_CU, "cand_gdn.cu");
    std::env::set_var(device::wgpu::ENV_MUL_MAT_WGSL, "cand.wgsl");
    std::env::set_var(device::cuda::ENV_FP8_MMQ_CU, "cand_fp8.cu");
    std::env::set_var(device::cuda::ENV_TENSOR_CORE_CU, "cand_tc.cu");
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ", "cublaslt");
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ_VARIANT", "3");
    std::env::set_var("KERNEL_ORACLE_FP8_MMQ_SCHEDULE", "1");
    let bytes = [0x5au8; 512];
    let u = || arbitrary::Unstructured::new(&bytes);
    // What a fuzz target passes: the file libFuzzer writes the input to.
    let art = libfuzzer_crash_artifact(&bytes);
    let quoted = shell_quote(&art);

    // moe-tables: the case line, then the fuzz input's, both with the
    // candidate (before, the fuzz input's line had none: its rerun tested
    // the builtin kernel).
    use kernel_oracle::moe_tables::{self, report as moe};
    let spec: moe_tables::CaseSpec = arbitrary::Arbitrary::arbitrary(&mut u()).unwrap();
    let v = moe_tables::Verdict {
        n_pairs: 1,
        want_err: None,
        got_err: Some("planted".into()),
        got_tables_err: None,
        ptr_mismatches: 0,
        scale_mismatches: 0,
        first: Vec::new(),
        compared: 0,
    };
    let env = format!(
        "{}={} ",
        device::cuda::ENV_MOE_TABLES_CU,
        absolute("cand moe.cu")
    );
    let r = moe::divergence(&spec, &v, "cand moe.cu", Some(&art));
    let lines = rerun_commands(&r);
    assert_eq!(lines.len(), 2, "{r}");
    assert_eq!(lines[0], moe::repro_command(&spec), "{r}");
    assert!(lines[0].starts_with(&env), "{r}");
    assert_eq!(
        lines[1],
        format!("{env}{} {quoted}", fuzz_rerun_prefix("moe_tables")),
        "{r}"
    );
    // A known artifact is the line's last word, quoted.
    let r = moe::divergence(&spec, &v, "cand moe.cu", Some("a dir/crash-1"));
    let lines = rerun_commands(&r);
    assert_eq!(
        lines[1],
        format!("{env}{} 'a dir/crash-1'", fuzz_rerun_prefix("moe_tables")),
        "{r}"
    );

    // gdn: the same, for its fuzz target gdn_packed.
    use kernel_oracle::gdn::{self, report as gdn_report};
    let spec = gdn::CaseSpec::seed_like(2, 4, 4, 3, 1);
    let env = format!("{}={} ", device::cuda::ENV_GDN_CU, absolute("cand_gdn.cu"));
    let r = gdn_report::divergence(&spec, &[], "cand_gdn.cu", Some(&art));
    let lines = rerun_commands(&r);
    assert_eq!(lines.len(), 2, "{r}");
    assert!(lines[0].starts_with(&env), "{r}");
    assert_eq!(
        lines[1],
        format!("{env}{} {quoted}", fuzz_rerun_prefix("gdn_packed")),
        "{r}"
    );

    // mul-mat: the fuzz input's line first, with the form's variable too,
    // then the case's; the form and candidate are the same on both.
    use kernel_oracle::mul_mat::{self, report as mm};
    let spec: mul_mat::CaseSpec = arbitrary::Arbitrary::arbitrary(&mut u()).unwrap();
    let geom = device::wgpu::Geometry::default();
    let form = device::wgpu::Form::Plain;
    let env = format!(
        "{}={} {}",
        device::wgpu::ENV_MUL_MAT_WGSL,
        absolute("cand.wgsl"),
        mm::form_env(form)
    );
    let r = mm::rerun_lines(&spec, &geom, form, Some(&art));
    let lines = rerun_commands(&r);
    assert_eq!(lines.len(), 2, "{r}");
    assert_eq!(
        lines[0],
        format!("{env}{} {quoted}", fuzz_rerun_prefix("mul_mat"))
    );
    assert!(
        lines[1].starts_with(&format!("{env}{} case mul-mat ", rerun_prefix())),
        "{r}"
    );

    // fp8-mmq: the fuzz input's line and a source that cannot load carry
    // the candidate, the peer switch, the forced variant and the schedule.
    let env = kernel_oracle::fp8_mmq::report::repro_env();
    for var in [
        "KERNEL_ORACLE_FP8_MMQ_CU=",
        "KERNEL_ORACLE_FP8_MMQ=cublaslt ",
        "KERNEL_ORACLE_FP8_MMQ_VARIANT=3 ",
        "KERNEL_ORACLE_FP8_MMQ_SCHEDULE=1 ",
    ] {
        assert!(env.contains(var), "{var}: {env}");
    }
    let line = fuzz_rerun_lines("", &env, "fp8_mmq", "crash-1");
    assert_eq!(
        line,
        format!("rerun: {env}{} crash-1\n", fuzz_rerun_prefix("fp8_mmq"))
    );
    let fp8 = kernel_oracle::kind::by_name("fp8-mmq").unwrap();
    let r = kernel_oracle::source_fault_report(fp8, "planted #error");
    assert_eq!(
        rerun_commands(&r),
        [format!("{env}{} check fp8-mmq", rerun_prefix())],
        "{r}"
    );
    // Every kind's source fault: its own environment.
    for k in kernel_oracle::kind::KINDS {
        let r = kernel_oracle::source_fault_report(k, "planted");
        let want = format!("{}{} check {}", (k.repro_env)(), rerun_prefix(), k.name);
        assert_eq!(rerun_commands(&r), [want], "{r}");
        assert!(r.contains(&format!("{}=", k.env)), "{r}");
    }
}

/// `scripts/gpu-check collect` picks each fuzz log's reproduction by its
/// `grep -E` pattern: it must match a case's rerun line in every form the
/// program takes (the bundle's binary by its quoted path, by name, cargo
/// in the tree), after the candidate's quoted variable. It matched
/// `kernel-oracle case` before, which a quoted path (`'.../kernel-oracle'
/// case`) does not contain.
#[test]
fn gpu_checks_log_summary_matches_every_form_of_a_case_line() {
    // In the bundle, gpu-check lies at its root.
    let script =
        kernel_oracle::paths::project_file("scripts/gpu-check", env!("CARGO_MANIFEST_DIR"))
            .or_else(|_| {
                kernel_oracle::paths::project_file("gpu-check", env!("CARGO_MANIFEST_DIR"))
            })
            .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&script).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("grep -E \"INITED|"))
        .unwrap_or_else(|| panic!("no log summary grep in {}", script.display()));
    let pattern = line.split('"').nth(1).unwrap();
    let spec = kernel_oracle::gdn::CaseSpec::seed_like(2, 4, 4, 3, 1);
    let printed = kernel_oracle::gdn::report::repro_command(&spec);
    let lines = [
        "rerun: KERNEL_ORACLE_GDN_CU='/tmp/a b/g.cu' '/tmp/kernel oracle/kernel-oracle' case gdn --num-k 2".to_string(),
        "  rerun: KERNEL_ORACLE_MUL_MAT_SUBGROUPS=off kernel-oracle case mul-mat --dtype q4_0".to_string(),
        "rerun: /x/scripts/cargo-runner /x/target/release/kernel-oracle case moe-tables --n-expert 1".to_string(),
        "rerun: cargo run --release -- case fp8-mmq --in-f 256".to_string(),
        format!("rerun: {printed}"),
    ];
    for l in &lines {
        let out = std::process::Command::new("grep")
            .args(["-E", "-c", pattern])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(format!("{l}\n").as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        let n = String::from_utf8_lossy(&out.stdout);
        assert_eq!(n.trim(), "1", "{pattern:?} does not match {l:?}");
    }
}
