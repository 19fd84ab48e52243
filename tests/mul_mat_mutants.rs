//! Planted bugs in shaders/mul_mat_reg_tile.wgsl must stay plantable and
//! must be caught by the gate, on the machine's wgpu adapter (lavapipe in
//! CI, the H200 on the GPU host).
//!
//! `missing-barrier` measured on lavapipe (Mesa 22.3 llvmpipe, 2 cores):
//! caught 40 of 40 runs (20 seeds each of f32 65x63x768 RANDOM at 8x4/40
//! and q6_K 1x1x256 EXACT at 16x16/16), and on every gate row. Why it is
//! not a race there: lavapipe runs a workgroup's invocations on one CPU
//! thread, SIMD group after SIMD group, switching only at a barrier; with
//! the barrier gone, the first group stages its share of the tile and
//! reads the rest before any other group has written it, every time.
//! So on lavapipe the test asserts the catch. On a real GPU the outcome
//! depends on warp scheduling; there the test reports the rate and
//! asserts nothing (a flaky assertion would be a defect).
//!
//! Each check runs in every form the engine has (`WgpuEngine::forms`: the
//! plain source and, where the adapter has subgroups, its subgroup form,
//! which is derived from the mutated text, so the bug is in both). The
//! subgroup-only bug is asserted where there is a subgroup form and
//! reported as not run elsewhere.

use device::wgpu::{Dtype, Form, Geometry, ShaderSource, WgpuEngine, BUILTIN_MUL_MAT_WGSL};
use kernel_oracle::mul_mat::gate::{self, run_one_form, spec, GateResult, Shape};
use kernel_oracle::mul_mat::mutants::{apply, by_name, MUTANTS};
use kernel_oracle::mul_mat::Arm;
use kernel_oracle::paths::ENV_RERUN;

fn engine_for(name: &str) -> WgpuEngine {
    let m = by_name(name).unwrap();
    let text = apply(m, BUILTIN_MUL_MAT_WGSL).unwrap_or_else(|e| panic!("{e}"));
    engine_of(text, &format!("mutant {name}"))
}

fn engine_of(text: String, what: &str) -> WgpuEngine {
    WgpuEngine::new(ShaderSource::builtin().derived(text, what))
        .unwrap_or_else(|e| panic!("no wgpu adapter (CI must provide lavapipe): {e}"))
}

const SMALL: Shape = Shape {
    label: "ragged",
    m: 97,
    k: 512,
    n: 35,
};

/// Every anchor occurs once and every mutant builds for every dtype in
/// every form, so it reaches the gate as a wrong kernel rather than as a
/// compile error.
#[test]
fn every_mutant_applies_once_and_builds() {
    for m in &MUTANTS {
        let e = engine_for(m.name);
        for form in e.forms() {
            for d in Dtype::ALL {
                e.pipeline_form(d, Geometry::default(), form)
                    .unwrap_or_else(|err| {
                        panic!("mutant {} ({}, {}): {err}", m.name, d.name(), form.name())
                    });
            }
        }
    }
}

/// Every planted bug's anchor also occurs exactly once in the wide
/// candidate, so the planted bugs carry over if it replaces the builtin.
#[test]
fn every_anchor_occurs_once_in_the_wide_candidate() {
    every_anchor_occurs_once_in("shaders/candidates/mul_mat_wide.wgsl");
}

/// And in the unrolled candidate.
#[test]
fn every_anchor_occurs_once_in_the_unrolled_candidate() {
    every_anchor_occurs_once_in("shaders/candidates/mul_mat_unrolled.wgsl");
}

/// And in the 4 x 4 candidate (the seed's design).
#[test]
fn every_anchor_occurs_once_in_the_4x4_candidate() {
    every_anchor_occurs_once_in("shaders/candidates/mul_mat_4x4.wgsl");
}

fn every_anchor_occurs_once_in(candidate: &str) {
    let path = kernel_oracle::paths::project_file(candidate, env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&path).unwrap();
    for m in MUTANTS.iter().filter(|m| !m.production_only) {
        apply(m, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Dropping the f16 sign fails both arms of every quantized dtype (the
/// generators keep negative scales) and leaves f32 (no f16 scale) passing,
/// in each form.
#[test]
fn drop_f16_sign_is_caught() {
    let e = engine_for("drop-f16-sign");
    for form in e.forms() {
        for d in Dtype::ALL {
            for arm in [Arm::Exact, Arm::Random] {
                let v =
                    run_one_form(&e, &spec(&SMALL, d, arm), &Geometry::default(), form).unwrap();
                assert_eq!(
                    v.pass(),
                    d == Dtype::F32,
                    "drop-f16-sign on {} {} ({} form): pass = {}",
                    d.name(),
                    arm.name(),
                    form.name(),
                    v.pass()
                );
            }
        }
    }
}

/// Adding the q4_K min fails q4_K only, in each form.
#[test]
fn q4k_min_added_is_caught() {
    let e = engine_for("q4k-min-added");
    for form in e.forms() {
        for d in Dtype::ALL {
            let v =
                run_one_form(&e, &spec(&SMALL, d, Arm::Exact), &Geometry::default(), form).unwrap();
            assert_eq!(
                v.pass(),
                d != Dtype::Q4K,
                "q4k-min-added on {} ({} form)",
                d.name(),
                form.name()
            );
        }
    }
}

/// The subgroup form's exchange taking the wrong lane's row fails every
/// dtype's EXACT arm in the subgroup form (its f32 GEMM runs the exchange
/// on every path), at the declared geometry and the gate's 8 x 4 / 40, and
/// passes in the plain form, which never runs the exchange. On an adapter
/// without a subgroup form it is reported as not run: that form is the
/// only one that could catch it. This is also the proof that the exchange
/// runs at all on the adapter (a subgroup whose layout check fails reads
/// src1 as the plain form does, and would pass).
#[test]
fn sg_shuffle_wrong_lane_is_caught_in_the_subgroup_form() {
    let e = engine_for("sg-shuffle-wrong-lane");
    if let Err(reason) = e.subgroup_form() {
        println!(
            "not run: no subgroup form on {} ({reason})",
            e.adapter_name()
        );
        return;
    }
    let geoms = [
        Geometry::default(),
        Geometry {
            wg_m: 8,
            wg_n: 4,
            tile_k: 40,
        },
    ];
    for geom in geoms {
        for d in Dtype::ALL {
            let s = spec(&SMALL, d, Arm::Exact);
            let plain = run_one_form(&e, &s, &geom, Form::Plain).unwrap();
            let sg = run_one_form(&e, &s, &geom, Form::Subgroup).unwrap();
            println!(
                "sg-shuffle-wrong-lane, {} {geom:?}: plain {}, {} {} ({} bit mismatches)",
                d.name(),
                plain.pass(),
                e.form_label(Form::Subgroup),
                sg.pass(),
                sg.cmp.bit_mismatches
            );
            assert!(plain.pass(), "the plain form runs no exchange");
            assert!(
                !sg.pass(),
                "{} {geom:?}: the subgroup form passed",
                d.name()
            );
        }
    }
}

/// The pre-pass that stops one invocation short fails every quantized
/// dtype on the dequantize-then-GEMM path (the gate's `+dq` rows) and
/// nothing on the fused path, which never runs it.
#[test]
fn dequant_last_unit_dropped_is_caught_on_the_dequant_path() {
    use kernel_oracle::mul_mat::gate::dequant_spec;
    let e = engine_for("dequant-last-unit-dropped");
    let g = Geometry::default();
    for form in e.forms() {
        for d in Dtype::ALL {
            let fused = spec(&SMALL, d, Arm::Exact);
            assert!(run_one_form(&e, &fused, &g, form).unwrap().pass());
            if d != Dtype::F32 {
                let v = run_one_form(&e, &dequant_spec(&fused), &g, form).unwrap();
                assert!(
                    !v.pass(),
                    "dequant-last-unit-dropped passes {} ({} form)",
                    d.name(),
                    form.name()
                );
            }
        }
    }
}

/// q6_K's one-element loader with the high code at the wrong shift fails
/// q6_K at the gate's element geometry (TILE_K 6: the only one that runs
/// the one-element loaders) and passes every other dtype there, and q6_K
/// itself at the declared geometry and on the dequant path, which decode
/// through other code; in each form.
#[test]
fn q6k_element_hi_shift_is_caught_at_the_element_geometry() {
    use kernel_oracle::mul_mat::gate::{dequant_spec, ELEMENT_GEOMETRY};
    let e = engine_for("q6k-element-hi-shift");
    for form in e.forms() {
        for d in Dtype::ALL {
            let s = spec(&SMALL, d, Arm::Exact);
            let v = run_one_form(&e, &s, &ELEMENT_GEOMETRY, form).unwrap();
            assert_eq!(
                v.pass(),
                d != Dtype::Q6K,
                "q6k-element-hi-shift on {} at {:?} ({} form)",
                d.name(),
                ELEMENT_GEOMETRY,
                form.name()
            );
        }
        let s = spec(&SMALL, Dtype::Q6K, Arm::Exact);
        assert!(run_one_form(&e, &s, &Geometry::default(), form)
            .unwrap()
            .pass());
        assert!(
            run_one_form(&e, &dequant_spec(&s), &Geometry::default(), form)
                .unwrap()
                .pass()
        );
    }
}

/// Two k rows added in swapped order (`k-pair-swap`, in `step4`) fail
/// the ORDER arm on every dtype and pass EXACT, RANDOM and BAL (each
/// product right, each added once: only the order of two additions
/// differs). In the plain form at the declared geometry (16x16/16, every
/// tile through `step4`) and at 8x4/40 (K = 512: a last partial tile of 32
/// k); in the subgroup form only at 8x4/40, whose partial tile goes
/// through `step4`, while at 16x16/16 every tile is whole steps of eight
/// k through the exchange's own products, which keep the order (so the
/// ORDER rows pass there, where the exchange runs: `gate::exchange_blocked`).
#[test]
fn k_pair_swap_fails_the_order_arm_only() {
    let e = engine_for("k-pair-swap");
    for form in e.forms() {
        for (geom, in_step4) in [
            (
                gate::GEOMETRIES[0],
                form == Form::Plain
                    || gate::exchange_blocked(&gate::GEOMETRIES[0], e.subgroup_form().unwrap_or(0))
                        .is_some(),
            ),
            (gate::GEOMETRIES[1], true),
        ] {
            for d in Dtype::ALL {
                for arm in Arm::ALL {
                    let v = run_one_form(&e, &spec(&SMALL, d, arm), &geom, form).unwrap();
                    assert_eq!(
                        v.pass(),
                        arm != Arm::Order || !in_step4,
                        "k-pair-swap on {} {} at {geom:?} ({} form): {} bits differ",
                        d.name(),
                        arm.name(),
                        form.name(),
                        v.cmp.bit_mismatches
                    );
                }
            }
        }
    }
}

/// The missing barrier: asserted on lavapipe, where it is deterministic
/// (module doc), reported elsewhere.
#[test]
fn missing_barrier_catch_rate() {
    let e = engine_for("missing-barrier");
    let lavapipe = e.adapter_name().contains("llvmpipe");
    let mut caught = 0;
    let mut runs = 0;
    for form in e.forms() {
        for d in Dtype::ALL {
            for geom in [
                Geometry::default(),
                Geometry {
                    wg_m: 8,
                    wg_n: 4,
                    tile_k: 40,
                },
            ] {
                let v = run_one_form(&e, &spec(&SMALL, d, Arm::Random), &geom, form).unwrap();
                runs += 1;
                caught += usize::from(!v.pass());
            }
        }
    }
    println!(
        "missing-barrier caught {caught}/{runs} on {} ({})",
        e.adapter_name(),
        e.backend()
    );
    if lavapipe {
        assert_eq!(
            caught, runs,
            "lavapipe serialises invocations: every run must fail"
        );
    }
}

/// The one case the rerun-line tests run: an EXACT q4_0 case that
/// `drop-f16-sign` fails.
const RERUN_CASE: [&str; 14] = [
    "case", "mul-mat", "--dtype", "q4_0", "--m", "4", "--n", "4", "--k", "32", "--arm", "exact",
    "--seed", "1",
];

/// The command of the `rerun: ` line in `stdout` (a failing case prints
/// one).
fn rerun_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("rerun: "))
        .unwrap_or_else(|| panic!("no rerun line in\n{stdout}"))
}

/// A candidate's divergence prints a rerun line that names the candidate
/// (`KERNEL_ORACLE_MUL_MAT_WGSL=...`): without it the rerun would check the
/// builtin shader and pass. The line, run as printed, fails again.
#[test]
fn a_candidates_rerun_line_reruns_the_candidate() {
    let m = by_name("drop-f16-sign").unwrap();
    let text = apply(m, BUILTIN_MUL_MAT_WGSL).unwrap_or_else(|e| panic!("{e}"));
    let path =
        std::env::temp_dir().join(format!("kernel-oracle-rerun-{}.wgsl", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    let out = std::process::Command::new(&bin)
        .args(RERUN_CASE)
        .env(device::wgpu::ENV_MUL_MAT_WGSL, &path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let rerun = rerun_line(&stdout);
    let want = format!("{}={} ", device::wgpu::ENV_MUL_MAT_WGSL, path.display());
    assert!(rerun.starts_with(&want), "{rerun}");
    // Run it as printed (the environment from the line, the rest as args).
    let args: Vec<&str> = rerun
        .split_whitespace()
        .skip_while(|a| *a != "case")
        .collect();
    let again = std::process::Command::new(&bin)
        .args(&args)
        .env(device::wgpu::ENV_MUL_MAT_WGSL, &path)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "{rerun}");
    let _ = std::fs::remove_file(&path);
}

/// A candidate named by a relative path is printed absolute in the rerun
/// line: the line may be run from another directory, where the path as
/// given (relative to where the gate ran) names no file.
#[test]
fn a_relative_candidate_path_is_printed_absolute() {
    let m = by_name("drop-f16-sign").unwrap();
    let text = apply(m, BUILTIN_MUL_MAT_WGSL).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir();
    let name = format!("kernel-oracle-relative-{}.wgsl", std::process::id());
    std::fs::write(dir.join(&name), text).unwrap();
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    let out = std::process::Command::new(&bin)
        .args(RERUN_CASE)
        .current_dir(&dir)
        .env(device::wgpu::ENV_MUL_MAT_WGSL, &name)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(dir.join(&name));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let rerun = rerun_line(&stdout);
    let want = format!(
        "{}={} ",
        device::wgpu::ENV_MUL_MAT_WGSL,
        std::fs::canonicalize(&dir).unwrap().join(&name).display()
    );
    assert!(rerun.starts_with(&want), "{rerun}");
}

/// A scratch directory whose name has a space (so a printed path must be
/// quoted to run), holding the `drop-f16-sign` candidate as `cand.wgsl`.
fn scratch_with_candidate(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kernel-oracle {what} {}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = std::fs::canonicalize(&dir).unwrap();
    let m = by_name("drop-f16-sign").unwrap();
    let text = apply(m, BUILTIN_MUL_MAT_WGSL).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("cand.wgsl"), text).unwrap();
    dir
}

/// Runs `bin` on [`RERUN_CASE`] in `dir` with the candidate `cand.wgsl`
/// (relative) and no [`ENV_RERUN`]: it fails, and its rerun line is
/// returned exactly as printed.
fn printed_rerun_line(bin: &std::path::Path, dir: &std::path::Path) -> (String, String) {
    let out = std::process::Command::new(bin)
        .args(RERUN_CASE)
        .current_dir(dir)
        .env(device::wgpu::ENV_MUL_MAT_WGSL, "cand.wgsl")
        .env_remove(ENV_RERUN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    (rerun_line(&stdout).to_string(), stdout)
}

/// Runs `line` through `sh -c` in `dir` with neither [`ENV_RERUN`] nor
/// the candidate variable set (the line must carry what it needs), and
/// asserts it reproduces `first`: exit 1, the same first failing table
/// row and first mismatch, and the same rerun line again.
fn assert_reproduces(line: &str, dir: &std::path::Path, first: &str) {
    let again = std::process::Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env_remove(ENV_RERUN)
        .env_remove(device::wgpu::ENV_MUL_MAT_WGSL)
        .env_remove(device::wgpu::ENV_MUL_MAT_SUBGROUPS)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&again.stdout);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{line}\n{stdout}\n{stderr}");
    // The first failing row and its first mismatch (the line reruns that
    // row's form alone).
    let verdict = |s: &str| {
        let row = s.lines().find(|l| l.ends_with("FAIL")).map(str::to_string);
        let at = s
            .lines()
            .find(|l| l.trim_start().starts_with("first at "))
            .map(str::to_string);
        (row, at)
    };
    assert!(
        verdict(first).0.is_some() && verdict(first).1.is_some(),
        "{first}"
    );
    assert_eq!(verdict(&stdout), verdict(first), "{line}\n{stdout}");
    assert_eq!(rerun_line(&stdout), line, "{stdout}");
}

/// A failing case's rerun line, taken exactly as the tool printed it in a
/// directory other than the repository's root and run there through
/// `sh -c`, fails again the same way and prints the same line. In the
/// source tree the line is the tree's cargo runner and the binary by
/// their paths (no cargo: a nested build would relink the binary other
/// tests run, and cargo outside the root loses the runner); in the bundle
/// it is the bundle's binary by its path.
#[test]
fn a_printed_rerun_line_runs_as_printed_from_another_directory() {
    let dir = scratch_with_candidate("rerun sh");
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    let (line, first) = printed_rerun_line(&bin, &dir);
    println!("{line}");
    assert!(line.contains(" case mul-mat "), "{line}");
    assert!(!line.contains("cargo run"), "{line}");
    // The build machine's tree, when this runs in it (not in the bundle).
    let tree = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR")).ok();
    let bin_real = std::fs::canonicalize(&bin).unwrap();
    if let Some(tree) = tree.filter(|t| bin_real.starts_with(t.join("target"))) {
        let q = |p: &std::path::Path| kernel_oracle::shell_quote(&p.to_string_lossy());
        let program = format!(
            "=off {} {} case mul-mat ",
            q(&tree.join(kernel_oracle::paths::CARGO_RUNNER)),
            q(&bin_real)
        );
        assert!(line.contains(&program), "{line}");
    }
    assert_reproduces(&line, &dir, &first);
    // `mutant`'s line for the file it writes (given relative): the file by
    // its absolute path, quoted, then the same program as the case line.
    let out = std::process::Command::new(&bin)
        .args(["mutant", "mul-mat", "drop-f16-sign", "-o", "m.wgsl"])
        .current_dir(&dir)
        .env_remove(ENV_RERUN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let run = stdout
        .lines()
        .find_map(|l| l.strip_prefix("run: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let var = format!(
        "{}='{}' ",
        device::wgpu::ENV_MUL_MAT_WGSL,
        dir.join("m.wgsl").display()
    );
    assert!(
        run.starts_with(&var) && run.ends_with(" check mul-mat"),
        "{run}"
    );
    // The case line's program: after its last variable, before `case`.
    let (vars, _) = line.split_once(" case mul-mat ").unwrap();
    let program = vars.split_once("_SUBGROUPS=off ").unwrap().1;
    assert_eq!(
        &run[var.len()..run.len() - " check mul-mat".len()],
        program,
        "{run}\n{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Outside the source tree (a copy of the binary, as in the bundle or an
/// install, not on PATH) the line names the binary by its absolute path,
/// quoted where the path needs it, and runs as printed.
#[test]
fn outside_the_tree_the_rerun_line_names_the_binary_by_its_path() {
    let dir = scratch_with_candidate("rerun copy");
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    std::fs::create_dir_all(dir.join("bundle")).unwrap();
    let copy = dir.join("bundle/kernel-oracle");
    std::fs::copy(&bin, &copy).unwrap();
    // The copy is the binary it names, not one KERNEL_ORACLE_BIN names.
    let out = std::process::Command::new(&copy)
        .args(RERUN_CASE)
        .current_dir(&dir)
        .env(device::wgpu::ENV_MUL_MAT_WGSL, "cand.wgsl")
        .env_remove(ENV_RERUN)
        .env_remove(kernel_oracle::paths::ENV_BIN)
        .output()
        .unwrap();
    let first = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{first}");
    let line = rerun_line(&first).to_string();
    println!("{line}");
    let want = format!(
        "{}='{}' {}=off '{}' case mul-mat ",
        device::wgpu::ENV_MUL_MAT_WGSL,
        dir.join("cand.wgsl").display(),
        device::wgpu::ENV_MUL_MAT_SUBGROUPS,
        copy.display()
    );
    assert!(line.starts_with(&want), "{line}\nwant {want}");
    assert_reproduces(&line, &dir, &first);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A renamed copy of the binary outside the tree names itself, by its
/// path: not `kernel-oracle` (which PATH may not find, or find another
/// of), not a directory called `kernel-oracle` beside it or where it runs,
/// not `$KERNEL_ORACLE_BIN` (`/bin/true` there would make the rerun pass).
/// Its case line runs as printed and fails again; `mutant`'s run line
/// names the same program.
#[test]
fn a_renamed_copy_outside_the_tree_names_itself() {
    let dir = scratch_with_candidate("rerun renamed");
    let bin = kernel_oracle::paths::kernel_oracle_exe(env!("CARGO_BIN_EXE_kernel-oracle"));
    for d in ["bin dir/kernel-oracle", "kernel-oracle"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let copy = dir.join("bin dir/ko");
    std::fs::copy(&bin, &copy).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&copy)
            .args(args)
            .current_dir(&dir)
            .env(device::wgpu::ENV_MUL_MAT_WGSL, "cand.wgsl")
            .env(kernel_oracle::paths::ENV_BIN, "/bin/true")
            .env_remove(ENV_RERUN)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, first) = run(&RERUN_CASE);
    assert_eq!(code, Some(1), "{first}");
    let line = rerun_line(&first).to_string();
    println!("{line}");
    let program = format!("'{}'", copy.display());
    let want = format!(
        "{}='{}' {}=off {program} case mul-mat ",
        device::wgpu::ENV_MUL_MAT_WGSL,
        dir.join("cand.wgsl").display(),
        device::wgpu::ENV_MUL_MAT_SUBGROUPS,
    );
    assert!(line.starts_with(&want), "{line}\nwant {want}");
    assert_reproduces(&line, &dir, &first);
    let (code, out) = run(&["mutant", "mul-mat", "drop-k-tail", "-o", "a.wgsl"]);
    assert_eq!(code, Some(0), "{out}");
    let want = format!(
        "run: {}='{}' {program} check mul-mat",
        device::wgpu::ENV_MUL_MAT_WGSL,
        dir.join("a.wgsl").display()
    );
    assert!(out.lines().any(|l| l == want), "{out}\nwant {want}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Dropping the k tail: on the gate's one-output row (m = n = 1, K = 256)
/// at TILE_K = 40 (16 products dropped) the RANDOM arm of q4_0 lets it
/// through (its bound is dominated by one large block scale) and the BAL
/// arm fails it for every dtype; the k-tail shape's EXACT arm fails it too.
#[test]
fn drop_k_tail_is_caught_by_the_one_output_row() {
    use kernel_oracle::mul_mat::gate::CI_SHAPES;
    let e = engine_for("drop-k-tail");
    let geom = Geometry {
        wg_m: 8,
        wg_n: 4,
        tile_k: 40,
    };
    let m1n1 = CI_SHAPES.iter().find(|s| s.label == "m1n1").unwrap();
    for form in e.forms() {
        let random = run_one_form(&e, &spec(m1n1, Dtype::Q4_0, Arm::Random), &geom, form).unwrap();
        println!(
            "drop-k-tail, q4_0 m1n1 RANDOM ({} form): max_abs {:e}, passes: {}",
            form.name(),
            random.cmp.max_abs,
            random.pass()
        );
        for d in Dtype::ALL {
            let v = run_one_form(&e, &spec(m1n1, d, Arm::Balanced), &geom, form).unwrap();
            println!(
                "drop-k-tail, {} m1n1 BAL ({} form): max_abs {:e}, over bound {}",
                d.name(),
                form.name(),
                v.cmp.max_abs,
                v.over_bound
            );
            assert!(
                !v.pass(),
                "drop-k-tail passes {} m1n1 BAL ({} form)",
                d.name(),
                form.name()
            );
        }
        let tail = CI_SHAPES.iter().find(|s| s.label == "k-tail").unwrap();
        let v = run_one_form(&e, &spec(tail, Dtype::F32, Arm::Exact), &geom, form).unwrap();
        assert!(!v.pass(), "{} form", form.name());
    }
}

/// A store without the column check writes past dst from a partial
/// workgroup block in the last row: the shim's guard band reports it on
/// the gate's n > m shapes.
#[test]
fn unguarded_column_reaches_the_guard_band() {
    use device::wgpu::WgpuError;
    use kernel_oracle::mul_mat::gate::CI_SHAPES;
    let e = engine_for("unguarded-column");
    let mut guard = 0;
    for form in e.forms() {
        for sh in CI_SHAPES.iter().filter(|s| s.n > s.m) {
            for geom in kernel_oracle::mul_mat::gate::GEOMETRIES {
                match run_one_form(&e, &spec(sh, Dtype::F32, Arm::Exact), &geom, form) {
                    Err(WgpuError::Guard { .. }) => guard += 1,
                    other => panic!("{} {geom:?} ({} form): {other:?}", sh.label, form.name()),
                }
            }
        }
    }
    assert!(guard >= 4 * e.forms().len(), "{guard} guard-band hits");
}

/// A write past `dst` is a failing gate row with the shim's message and
/// its rerun line, and the gate goes on to its next rows (every row of the
/// n > m shape is run and counted); the fuzzer's failure on the same case
/// is a panic that carries the artifact's and the case's rerun lines.
#[test]
fn a_guard_band_hit_is_a_failing_row_and_a_fuzz_failure_with_its_rerun_line() {
    use kernel_oracle::mul_mat::gate::{self, CI_SHAPES, GEOMETRIES};
    let e = engine_for("unguarded-column");
    let sh = *CI_SHAPES.iter().find(|s| s.label == "n>m").unwrap();
    let geom = GEOMETRIES[0];
    let sp = spec(&sh, Dtype::F32, Arm::Exact);
    let (pass, lines) = gate::row(&e, sh.label, &sp, &geom, Form::Plain, &mut Vec::new());
    assert!(!pass, "{lines}");
    assert!(
        lines.contains("wrote past dst") && lines.contains("FAIL"),
        "{lines}"
    );
    let case = format!(
        "case mul-mat --dtype f32 --m {} --n {} --k {} --arm exact --seed {:#x} --wg 16,16,16",
        sh.m, sh.n, sh.k, sp.seed
    );
    assert!(
        lines.contains("  rerun: ") && lines.contains(&case),
        "{lines}"
    );
    // The whole gate on that shape: every row run (at `geom`, the
    // shader's declared geometry and, the shape being small, the small
    // geometries the adapter holds, and the quantized ones again on the
    // dequantize-then-GEMM path), the failing ones counted.
    let g = gate::run(&e, &[sh], &[geom]);
    let dtypes = Dtype::ALL
        .iter()
        .filter(|d| sh.k % d.block_elems() == 0)
        .count();
    assert!(e.decl().dequant);
    let named = gate::geometries(&e, &[geom]);
    assert!(sh.m * sh.n * sh.k <= gate::SMALL_MAX_MACS);
    let small = gate::SMALL_GEOMETRIES
        .iter()
        .filter(|g| !named.contains(g) && g.validate(e.decl(), e.limits()).is_ok())
        .count();
    let geoms = named.len() + small;
    // The exchange canary adds a row a geometry in the subgroup form.
    let canary = if e.forms().contains(&Form::Subgroup) {
        geoms
    } else {
        0
    };
    let rows = (geoms * dtypes + dtypes - 1) * Arm::ALL.len() * e.forms().len() + canary;
    assert_eq!(g.rows, rows);
    assert!(g.failures >= 1 && g.failures <= rows, "{g:?}");
    // The fuzzer: a panic with both rerun lines.
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        kernel_oracle::mul_mat::check_on(&e, &sp, &geom, Some("crash-planted"))
    }))
    .expect_err("a guard-band hit must fail the fuzz case");
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("wrote past dst"), "{msg}");
    let fuzz = format!(
        "  rerun: {}{}{} crash-planted\n",
        kernel_oracle::candidate_env(device::wgpu::ENV_MUL_MAT_WGSL),
        kernel_oracle::mul_mat::report::form_env(kernel_oracle::mul_mat::form_for(&e, &sp)),
        kernel_oracle::paths::fuzz_rerun_prefix("mul_mat")
    );
    assert!(msg.contains(&fuzz), "{msg}\nwant {fuzz}");
    assert!(msg.contains(&case), "{msg}");
}

/// The gate's exchange canary (`gate::EXCHANGE_CANARY`): on the builtin
/// source the planted lane changes the subgroup form's outputs at every
/// geometry (the exchange runs), and on a source whose run-time layout
/// check always falls back to the plain reads (the same outputs as the
/// plain form, so every `sgN` row passes) every canary row fails, as on one
/// where every other subgroup falls back. Asserted where the adapter has a
/// subgroup form (lavapipe's sg8 in CI), reported as not run elsewhere.
#[test]
fn exchange_canary_fails_where_the_subgroup_form_falls_back() {
    let geoms = [
        Geometry::default(),
        Geometry {
            wg_m: 8,
            wg_n: 4,
            tile_k: 16,
        },
    ];
    let shapes: Vec<(Geometry, &Shape)> = geoms.iter().map(|g| (*g, &SMALL)).collect();
    let builtin = engine_of(BUILTIN_MUL_MAT_WGSL.to_string(), "builtin");
    if !builtin.forms().contains(&Form::Subgroup) {
        eprintln!(
            "not run: no subgroup form on {} ({:?})",
            builtin.adapter_name(),
            builtin.subgroup_form()
        );
        return;
    }
    let result = |failures| GateResult { failures, rows: 2 };
    assert_eq!(gate::exchange_canary(&builtin, &shapes), result(0));
    let find = "    p.on = sg_all(lined && same) && whole;";
    assert_eq!(BUILTIN_MUL_MAT_WGSL.matches(find).count(), 1);
    let off =
        BUILTIN_MUL_MAT_WGSL.replace(find, "    p.on = sg_all(lined && same) && whole && false;");
    let fallback = engine_of(off, "the exchange's plan always off");
    // Its subgroup rows pass: the fallback computes the plain form's
    // outputs.
    for g in &geoms {
        let v = run_one_form(
            &fallback,
            &spec(&SMALL, Dtype::F32, Arm::Exact),
            g,
            Form::Subgroup,
        )
        .unwrap();
        assert!(v.pass());
    }
    assert_eq!(gate::exchange_canary(&fallback, &shapes), result(2));
    // Every other subgroup of a workgroup falls back: half the outputs
    // unchanged by the planted line, still a failing row.
    let half = BUILTIN_MUL_MAT_WGSL.replace(
        find,
        "    p.on = sg_all(lined && same) && whole && base % (2u * SG_LANES) == 0u;",
    );
    let half = engine_of(half, "the exchange in every other subgroup");
    assert_eq!(gate::exchange_canary(&half, &shapes), result(2));
}
