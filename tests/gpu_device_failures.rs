//! A device failure is a failing gate row, never an abort: candidates that
//! write past an output (a guard-band hit), fault (a sticky
//! `CUDA_ERROR_ILLEGAL_ADDRESS`), never finish (a launch past the
//! deadline) or do not compile, each run through its gate as the command
//! line runs it. The gate prints the row as FAIL with the message and a
//! `rerun:` line, goes on with the next rows (or, after a lost context,
//! prints them as not run), and exits 1, never 101 and never hanging.
//!
//! The candidates are the builtin sources with one statement planted at
//! the top of a kernel's body ([`plant`]). That each compiles (and the
//! broken one does not) is checked here with NVRTC alone; running them
//! needs a CUDA GPU (the tests marked ignored), each gate in its own
//! process, since a fault or a hang ends the process's CUDA context:
//! `cargo test --release --test gpu_device_failures -- --ignored --test-threads=1`
//! (from the GPU bundle: `./gpu_device_failures --ignored --test-threads=1`;
//! the `kernel-oracle` binary is found beside the test binary there, or
//! through `KERNEL_ORACLE_BIN`).

use device::cuda::{
    compile, KernelSource, BUILTIN_FP8_MMQ_CU, BUILTIN_GDN_CU, BUILTIN_MOE_TABLES_CU,
    ENV_FP8_MMQ_CU, ENV_GDN_CU, ENV_LAUNCH_TIMEOUT, ENV_MOE_TABLES_CU,
};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `source` with `code` inserted as the first statement of kernel
/// `kernel`'s definition: the one `<kernel>(` outside comments that
/// follows `extern "C" __global__` (perhaps with `__launch_bounds__` and
/// a line break between).
fn plant(source: &str, kernel: &str, code: &str) -> String {
    let call = format!("{kernel}(");
    let defs: Vec<usize> = source
        .match_indices(&call)
        .map(|(i, _)| i)
        .filter(|&i| {
            let line_start = source[..i].rfind('\n').map_or(0, |l| l + 1);
            let line = source[line_start..i].trim_start();
            let before = &source[i.saturating_sub(120)..i];
            !line.starts_with('*')
                && !line.starts_with("//")
                && before.contains("extern \"C\" __global__")
        })
        .collect();
    assert_eq!(defs.len(), 1, "{kernel}: definitions at {defs:?}");
    let open = defs[0] + source[defs[0]..].find('{').expect("a body") + 1;
    format!("{}\n    {code}\n{}", &source[..open], &source[open..])
}

/// The quantizer writes one f32 just past `d` (`[m x in_f_pad/128]`,
/// `in_f_pad = ceil(in_f / 512) * 512`): into the guard band.
fn fp8_past_d() -> String {
    plant(
        BUILTIN_FP8_MMQ_CU,
        "fp8_quantize_act",
        "if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) d[(size_t)m * (size_t)(((in_f + 511) / 512) * 4)] = 0.0f;",
    )
}

/// The quantizer stores to an unmapped address, 2^40 bytes below `d`: a
/// sticky `CUDA_ERROR_ILLEGAL_ADDRESS`.
fn fp8_illegal_address() -> String {
    plant(
        BUILTIN_FP8_MMQ_CU,
        "fp8_quantize_act",
        "if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile float *)((char *)d - (1ull << 40)) = 1.0f;",
    )
}

/// The quantizer never returns: a PTX branch to itself, which neither
/// the compiler nor ptxas may remove (a C++ loop on a `volatile` local,
/// the first form, was compiled away: the candidate passed the gate).
fn fp8_hang() -> String {
    plant(
        BUILTIN_FP8_MMQ_CU,
        "fp8_quantize_act",
        r#"asm volatile("{\n$planted_hang:\n\tbra.uni $planted_hang;\n}\n" ::: "memory");"#,
    )
}

/// A candidate NVRTC refuses.
fn fp8_no_compile() -> String {
    format!("{BUILTIN_FP8_MMQ_CU}\n#error planted: this candidate does not compile\n")
}

/// The MoE tables kernel writes one f32 past `scales` (`[3 x n_pairs]`).
fn moe_past_scales() -> String {
    plant(
        BUILTIN_MOE_TABLES_CU,
        "moe_vrows_tables_from_sel",
        "if (blockIdx.x == 0 && threadIdx.x == 0) scales[3 * (u64)n_pairs] = 0.0f;",
    )
}

/// The GDN conv kernel writes one f32 past `out` (`[conv_dim]`).
fn gdn_past_out() -> String {
    plant(
        BUILTIN_GDN_CU,
        "gdn_conv1d_decode",
        "if (blockIdx.x == 0 && threadIdx.x == 0) out[conv_dim] = 0.0f;",
    )
}

/// Writes `text` to a fresh file named for `name` and returns its path.
fn candidate(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-oracle-failures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.cu"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Every planted candidate but the broken one compiles for sm_90a (so on
/// the GPU it fails for the planted reason), and the broken one is a
/// compile error, which the gate counts as the source's fault (a failing
/// row, exit 1) rather than the machine's (exit 2). Needs NVRTC, no GPU.
#[test]
fn planted_candidates_compile_and_the_broken_one_is_the_sources_fault() {
    device::cuda::nvrtc_available().unwrap_or_else(|e| panic!("{e}"));
    for (name, text) in [
        ("fp8-past-d", fp8_past_d()),
        ("fp8-illegal-address", fp8_illegal_address()),
        ("fp8-hang", fp8_hang()),
        ("moe-past-scales", moe_past_scales()),
        ("gdn-past-out", gdn_past_out()),
    ] {
        let src = KernelSource::from_file(&candidate(name, &text)).unwrap();
        // sm_90: the plants sit outside the sm_90a-only (wgmma) code.
        compile(&src, "sm_90").unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let src = KernelSource::from_file(&candidate("fp8-no-compile", &fp8_no_compile())).unwrap();
    let e = compile(&src, "sm_90a").expect_err("the planted #error");
    assert!(e.is_source_fault(), "{e}");
    assert!(e.to_string().contains("planted"), "{e}");
    let fp8 = kernel_oracle::kind::by_name("fp8-mmq").unwrap();
    let row = kernel_oracle::source_fault_report(fp8, &e.to_string());
    let rerun = format!(
        "  rerun: {}{} check fp8-mmq",
        kernel_oracle::fp8_mmq::report::repro_env(),
        kernel_oracle::paths::rerun_prefix()
    );
    assert!(row.contains("FAIL") && row.contains(&rerun), "{row}");
    assert!(row.contains("=== fp8-mmq-check 1 FAILURES"));
}

/// The `kernel-oracle` binary: `KERNEL_ORACLE_BIN` if set, else the one
/// beside this test binary (the GPU bundle's layout), else cargo's.
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KERNEL_ORACLE_BIN") {
        return p.into();
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("kernel-oracle")));
    match beside {
        Some(p) if p.is_file() => p,
        _ => PathBuf::from(env!("CARGO_BIN_EXE_kernel-oracle")),
    }
}

/// How one gate run ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `kernel-oracle ARGS` with `env`, killed (and the test failed) if
/// it runs past `limit`.
fn kernel_oracle(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Ran {
    let t0 = Instant::now();
    let mut child = Command::new(binary())
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Both pipes are read to the end on threads (a full pipe would stall
    // the child), while this thread polls for its exit with the limit.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let r_out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut so, &mut s).ok();
        s
    });
    let r_err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut se, &mut s).ok();
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kernel-oracle {args:?} still running after {limit:?}: killed\n{}",
                r_out.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Ran {
        code,
        stdout: r_out.join().unwrap(),
        stderr: r_err.join().unwrap(),
        took: t0.elapsed(),
    }
}

/// Asserts the common shape of a failing gate: exit 1 (no panic, no 101),
/// at least `min_fail` FAIL rows each followed by a rerun line, the gate's
/// closing line printed; returns stdout.
fn assert_failing_gate(r: &Ran, gate: &str, min_fail: usize) -> String {
    let all = format!("{}\n--- stderr\n{}", r.stdout, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{all}");
    assert_eq!(r.code, Some(1), "{all}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let fails: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("FAIL") && !lines[i].starts_with("==="))
        .collect();
    assert!(fails.len() >= min_fail, "{} FAIL rows\n{all}", fails.len());
    assert!(r.stdout.contains("  rerun: "), "{all}");
    // Each rerun line is the command alone (a row's note on the line
    // before): pasted into a shell without comments it runs as printed.
    for l in r.stdout.lines() {
        if let Some(cmd) = l.trim_start().strip_prefix("rerun: ") {
            assert!(!cmd.contains('#'), "{cmd}\n{all}");
        }
    }
    assert!(
        r.stdout.contains(&format!("=== {gate}-check ")) && r.stdout.contains(" FAILURES"),
        "{all}"
    );
    r.stdout.clone()
}

const SHAPE: [&str; 5] = ["check", "fp8-mmq", "272", "136", "40"];

/// A quantizer that writes past `d`: every row that runs it is a FAIL
/// row naming the guard band, with its rerun line; the NaN rows (refused
/// before the quantizer) still pass, and every exported variant's forced
/// rows are run: the gate went on.
#[test]
#[ignore = "needs a CUDA GPU (sm_89 or later); run with --test-threads=1"]
fn fp8_guard_band_hit_is_a_failing_row_and_the_gate_goes_on() {
    let path = candidate("fp8-past-d", &fp8_past_d());
    let r = kernel_oracle(
        &SHAPE,
        &[(ENV_FP8_MMQ_CU, path.to_str().unwrap())],
        Duration::from_secs(300),
    );
    let out = assert_failing_gate(&r, "fp8-mmq", 4);
    assert!(out.contains("kernel wrote outside output d"), "{out}");
    assert!(out.contains("every exported MMQ variant forced"), "{out}");
    assert!(out.contains("(variant 0 forced)"), "{out}");
    assert!(out.contains("refused: device 5, oracle 5"), "{out}");
    assert!(
        !out.contains("not run"),
        "a guard-band hit does not lose the context\n{out}"
    );
}

/// A quantizer that faults: the row reports the driver's sticky error,
/// every later row is a FAIL row marked not run (with its own rerun
/// line), and the process exits 1.
#[test]
#[ignore = "needs a CUDA GPU (sm_89 or later); run with --test-threads=1"]
fn fp8_illegal_address_fails_its_row_and_marks_the_rest_not_run() {
    let path = candidate("fp8-illegal-address", &fp8_illegal_address());
    let r = kernel_oracle(
        &SHAPE,
        &[(ENV_FP8_MMQ_CU, path.to_str().unwrap())],
        Duration::from_secs(300),
    );
    let out = assert_failing_gate(&r, "fp8-mmq", 8);
    assert!(out.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{out}");
    assert!(out.contains("not run: the CUDA context was lost"), "{out}");
    assert!(out.contains("later row(s) were not run"), "{out}");
}

/// A quantizer that never returns, with a 2-second deadline: its row is a
/// FAIL naming the deadline, the rest are not run, and the process ends
/// (exit 1) instead of hanging.
#[test]
#[ignore = "needs a CUDA GPU (sm_89 or later); run with --test-threads=1 (its gate leaves a kernel spinning until that process exits)"]
fn fp8_hang_is_a_failing_row_after_the_deadline_and_the_process_ends() {
    let path = candidate("fp8-hang", &fp8_hang());
    let r = kernel_oracle(
        &SHAPE,
        &[
            (ENV_FP8_MMQ_CU, path.to_str().unwrap()),
            (ENV_LAUNCH_TIMEOUT, "2"),
        ],
        Duration::from_secs(120),
    );
    let out = assert_failing_gate(&r, "fp8-mmq", 8);
    assert!(out.contains("did not finish within 2 s"), "{out}");
    assert!(out.contains("not run: the CUDA context was lost"), "{out}");
    assert!(r.took < Duration::from_secs(100), "took {:?}", r.took);
}

/// A candidate that does not compile: one FAIL row with NVRTC's log and
/// the rerun line, exit 1 (not 2: the machine is fine, the source is not).
#[test]
#[ignore = "needs a CUDA GPU (sm_89 or later)"]
fn fp8_compile_error_is_a_failing_row() {
    let path = candidate("fp8-no-compile", &fp8_no_compile());
    let r = kernel_oracle(
        &SHAPE,
        &[(ENV_FP8_MMQ_CU, path.to_str().unwrap())],
        Duration::from_secs(120),
    );
    let out = assert_failing_gate(&r, "fp8-mmq", 1);
    assert!(out.contains("NVRTC could not compile"), "{out}");
    assert!(out.contains("planted"), "{out}");
    assert!(out.contains(&format!("rerun: {ENV_FP8_MMQ_CU}=")), "{out}");
}

/// The single-case command prints a device failure with its rerun line
/// (what the fuzzer's panic carries) and exits 1.
#[test]
#[ignore = "needs a CUDA GPU (sm_89 or later)"]
fn fp8_case_prints_a_device_failure_with_its_rerun_line() {
    let path = candidate("fp8-past-d-case", &fp8_past_d());
    let r = kernel_oracle(
        &[
            "case",
            "fp8-mmq",
            "--in-f",
            "272",
            "--out-f",
            "136",
            "--m",
            "40",
            "--arm",
            "exact",
            "--seed",
            "0x1",
            "--variant",
            "0",
        ],
        &[(ENV_FP8_MMQ_CU, path.to_str().unwrap())],
        Duration::from_secs(120),
    );
    let all = format!("{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, Some(1), "{all}");
    assert!(r.stdout.contains("fp8_mmq FAILURE"), "{all}");
    assert!(r.stdout.contains("kernel wrote outside output d"), "{all}");
    assert!(
        r.stdout.contains("rerun: ") && r.stdout.contains("--variant 0"),
        "{all}"
    );
}

/// The MoE tables gate with a kernel that writes past `scales`: FAIL rows
/// naming the guard band, each with a rerun line; every case still runs.
#[test]
#[ignore = "needs a CUDA GPU"]
fn moe_guard_band_hit_is_a_failing_row() {
    let path = candidate("moe-past-scales", &moe_past_scales());
    let r = kernel_oracle(
        &["check", "moe-tables"],
        &[(ENV_MOE_TABLES_CU, path.to_str().unwrap())],
        Duration::from_secs(300),
    );
    let out = assert_failing_gate(&r, "moe-tables", 4);
    assert!(out.contains("kernel wrote outside output"), "{out}");
    assert!(out.contains("refuse-lengths"), "the last case ran\n{out}");
}

/// The GDN gate with a conv kernel that writes past `out`: FAIL rows
/// naming the guard band, each with a rerun line; the gate goes on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gdn_guard_band_hit_is_a_failing_row() {
    let path = candidate("gdn-past-out", &gdn_past_out());
    let r = kernel_oracle(
        &["check", "gdn"],
        &[(ENV_GDN_CU, path.to_str().unwrap())],
        Duration::from_secs(300),
    );
    let out = assert_failing_gate(&r, "gdn", 4);
    assert!(out.contains("kernel wrote outside output"), "{out}");
    assert!(
        out.contains("edge: subnormal eps"),
        "the last rows ran\n{out}"
    );
}
