//! `kernel-oracle score mul-mat` on the machine's wgpu adapter (lavapipe
//! in CI): two planted bugs of the WGSL GEMM (a dropped k tail, an
//! unguarded column write) are caught by their gate and by their fuzzer
//! (the in-process loop here, no cargo-fuzz binary beside the test's
//! kernel-oracle), and an unchanged copy of the builtin shader, scored as
//! if it were a planted bug, survives both, so the score can fail and then
//! exits 1. (Every planted bug through the gate: `tests/mul_mat_mutants.rs`;
//! the whole score, every kind: `gpu-check score` on the GPU host.)

use kernel_oracle::kind;

#[test]
fn score_mul_mat_catches_planted_bugs_and_not_a_harmless_copy() {
    let dir = std::env::temp_dir().join(format!("kernel-oracle-score-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let harmless = dir.join("harmless.wgsl");
    std::fs::write(&harmless, device::wgpu::BUILTIN_MUL_MAT_WGSL).unwrap();
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    const BUGS: [&str; 2] = ["drop-k-tail", "unguarded-column"];
    let out = std::process::Command::new(bin)
        .args(["score", "mul-mat", "--secs", "10"])
        .args(BUGS.iter().flat_map(|b| ["--bug", b]))
        .arg("--also")
        .arg(&harmless)
        .arg("--logs")
        .arg(dir.join("logs"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let row = |name: &str| -> String {
        let head = format!("mul-mat {name} ");
        stdout
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"))
            .to_string()
    };
    let mul_mat = kind::by_name("mul-mat").unwrap();
    let planted = (mul_mat.planted)();
    assert_eq!(
        planted.len(),
        kernel_oracle::mul_mat::mutants::MUTANTS.len()
    );
    for name in BUGS {
        assert!(planted.iter().any(|p| p.name == name), "{name}");
        let r = row(name);
        assert!(!r.contains("SURVIVED"), "{r}");
        assert!(r.contains("rows failed"), "gate: {r}");
        assert!(r.contains("execs, "), "fuzzer: {r}");
        assert!(r.contains("in-process, splitmix64 seed 1"), "{r}");
    }
    let r = row("harmless");
    assert_eq!(r.matches("SURVIVED").count(), 2, "{r}");
    assert!(stdout.contains("=== score: 1 of 3 planted bugs SURVIVED ==="));
    let _ = std::fs::remove_dir_all(&dir);
}
