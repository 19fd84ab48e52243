//! `kernel-oracle score mul-mat` on the machine's wgpu adapter (lavapipe
//! in CI): every planted bug of the WGSL GEMM is caught by its gate and
//! by its fuzzer (the in-process loop here, no cargo-fuzz binary beside
//! the test's kernel-oracle), and an unchanged copy of the builtin shader,
//! scored as if it were a planted bug, survives both, so the score can
//! fail and then exits 1.

use kernel_oracle::kind;

#[test]
fn score_mul_mat_catches_every_planted_bug_and_not_a_harmless_copy() {
    let dir = std::env::temp_dir().join(format!("kernel-oracle-score-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let harmless = dir.join("harmless.wgsl");
    std::fs::write(&harmless, device::wgpu::BUILTIN_MUL_MAT_WGSL).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
        .args(["score", "mul-mat", "--secs", "20", "--also"])
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
    for p in &planted {
        let r = row(p.name);
        assert!(!r.contains("SURVIVED"), "{r}");
        assert!(r.contains("rows failed"), "gate: {r}");
        assert!(r.contains("execs, "), "fuzzer: {r}");
        assert!(r.contains("in-process, splitmix64 seed 1"), "{r}");
    }
    let r = row("harmless");
    assert_eq!(r.matches("SURVIVED").count(), 2, "{r}");
    assert!(stdout.contains("=== score: 1 of 6 planted bugs SURVIVED ==="));
    let _ = std::fs::remove_dir_all(&dir);
}
