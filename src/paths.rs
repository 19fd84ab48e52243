//! Where the project's files and the `kernel-oracle` binary are, from
//! wherever a binary runs: in the source tree under cargo, or in the GPU
//! bundle (`scripts/gpu-bundle`), unpacked on a host that never saw the
//! source tree, where the files lie beside the binaries in the same layout
//! (`shaders/candidates/...`, `scripts/...`).
//!
//! A path compiled in (`env!("CARGO_MANIFEST_DIR")`,
//! `env!("CARGO_BIN_EXE_...")`) names the build machine's tree: it is the
//! last resort here, never the first.

use std::path::{Path, PathBuf};

/// Environment variable: a directory holding the project's files in the
/// source tree's layout, searched first by [`project_file`].
pub const ENV_ROOT: &str = "KERNEL_ORACLE_ROOT";

/// Environment variable: the `kernel-oracle` binary [`kernel_oracle_exe`]
/// returns when set.
pub const ENV_BIN: &str = "KERNEL_ORACLE_BIN";

/// The directories to search, in order: `$KERNEL_ORACLE_ROOT`, the current
/// executable's directory and each of its ancestors, then `compiled` (the
/// build machine's `CARGO_MANIFEST_DIR`).
fn search_dirs(compiled: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(root) = std::env::var_os(ENV_ROOT).filter(|r| !r.is_empty()) {
        dirs.push(PathBuf::from(root));
    }
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    dirs.push(PathBuf::from(compiled));
    dirs
}

/// The project file `rel` (a path relative to the source tree's root, e.g.
/// `shaders/candidates/mul_mat_vec4.wgsl`), from the first directory of:
/// `$KERNEL_ORACLE_ROOT`, the running executable's directory and its
/// ancestors (the bundle's layout; cargo's `target/<profile>/deps/` sits
/// under the tree), `compiled` (pass `env!("CARGO_MANIFEST_DIR")`).
///
/// # Errors
/// A message naming `rel` and every directory searched, when none holds it.
pub fn project_file(rel: &str, compiled: &str) -> Result<PathBuf, String> {
    let dirs = search_dirs(compiled);
    dirs.iter()
        .map(|d| d.join(rel))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!(
                "{rel}: not found under {} (set {ENV_ROOT} to the directory that holds it)",
                list.join(", ")
            )
        })
}

/// Whether `p` is a regular file with an execute bit set: what a printed
/// line can run (a directory of that name, or a file that is not
/// executable, is not the binary).
pub fn is_executable_file(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// `name` as an executable file ([`is_executable_file`]) in the directory
/// of `exe` or the nearest of its ancestors that holds one.
fn find_beside(exe: &Path, name: &str) -> Option<PathBuf> {
    exe.ancestors()
        .skip(1)
        .map(|d| d.join(name))
        .find(|p| is_executable_file(p))
}

/// The `kernel-oracle` binary, for a test or a tool to run:
/// `$KERNEL_ORACLE_BIN` when set, else `kernel-oracle` (an executable file)
/// in the running executable's directory or an ancestor (the bundle puts
/// it beside the test binaries; cargo puts it in `target/<profile>/`,
/// above `deps/`), else `compiled` (pass
/// `env!("CARGO_BIN_EXE_kernel-oracle")`). Printed lines do not use it
/// ([`rerun_prefix`] has its own rule, without the variable).
pub fn kernel_oracle_exe(compiled: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os(ENV_BIN).filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| find_beside(&exe, "kernel-oracle"))
        .unwrap_or_else(|| PathBuf::from(compiled))
}

/// Set by [`set_main`]: this process is the `kernel-oracle` command.
static MAIN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that the running executable is the `kernel-oracle` command
/// itself (its `main` calls this first), whatever its file is called or
/// wherever it lies: its printed lines then name that very file
/// ([`RerunContext::exe_is_main`]).
pub fn set_main() {
    MAIN.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Environment variable: the program prefix every printed `kernel-oracle`
/// reproduction uses instead of the one [`rerun_prefix`] works out (e.g.
/// `kernel-oracle` for CI logs read on another machine), when set and not
/// empty. Used verbatim, not quoted.
pub const ENV_RERUN: &str = "KERNEL_ORACLE_RERUN";

/// The runner `.cargo/config.toml` gives cargo for every binary it runs
/// (`runner = "scripts/cargo-runner"`, relative to the tree's root; cargo
/// runs `RUNNER BINARY ARGS...`): it puts `.deps/`'s NVRTC on the
/// loader's path. A printed line outside the root names it, since cargo
/// reads that config only from the directory it is run in.
pub const CARGO_RUNNER: &str = "scripts/cargo-runner";

/// What [`rerun_prefix_in`] decides from: the process's view of itself,
/// taken apart so each branch can be tested from any directory.
#[derive(Clone, Debug, Default)]
pub struct RerunContext {
    /// `$KERNEL_ORACLE_RERUN` ([`ENV_RERUN`]).
    pub over: Option<std::ffi::OsString>,
    /// The running executable (`std::env::current_exe`).
    pub exe: Option<PathBuf>,
    /// Whether `exe` is the `kernel-oracle` command itself ([`set_main`]),
    /// rather than a test or fuzz binary that must look for it.
    pub exe_is_main: bool,
    /// The current directory, where the printed line is likely to be run.
    pub cwd: Option<PathBuf>,
    /// The source tree's root as compiled (`env!("CARGO_MANIFEST_DIR")` of
    /// this crate); it may not exist on the machine that runs.
    pub manifest_dir: PathBuf,
    /// `$PATH`.
    pub path: Option<std::ffi::OsString>,
}

impl RerunContext {
    /// This process's context. `$KERNEL_ORACLE_BIN` ([`ENV_BIN`], a test
    /// harness's choice of binary to run) plays no part.
    pub fn current() -> Self {
        RerunContext {
            over: std::env::var_os(ENV_RERUN),
            exe: std::env::current_exe().ok(),
            exe_is_main: MAIN.load(std::sync::atomic::Ordering::Relaxed),
            cwd: std::env::current_dir().ok(),
            manifest_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            path: std::env::var_os("PATH"),
        }
    }

    /// The source tree's root (canonical) when `manifest_dir` holds
    /// `Cargo.toml` and `exe` lies under its `target/` or `fuzz/target/`
    /// (the binary, a test or a fuzz target cargo built there).
    fn tree(&self) -> Option<PathBuf> {
        let root = self
            .manifest_dir
            .canonicalize()
            .ok()
            .filter(|r| r.join("Cargo.toml").is_file())?;
        let exe = self.real_exe()?;
        (exe.starts_with(root.join("target")) || exe.starts_with(root.join("fuzz/target")))
            .then_some(root)
    }

    /// `exe`, symbolic links resolved where it exists.
    fn real_exe(&self) -> Option<PathBuf> {
        let exe = self.exe.as_deref()?;
        Some(exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf()))
    }

    /// Whether the line is run at the tree's root `root` (where cargo
    /// reads `.cargo/config.toml`).
    fn at_root(&self, root: &Path) -> bool {
        self.cwd
            .as_deref()
            .and_then(|d| d.canonicalize().ok())
            .as_deref()
            == Some(root)
    }

    /// The `kernel-oracle` binary: `exe` when it is the command itself,
    /// else the executable file `kernel-oracle` beside `exe` or in an
    /// ancestor ([`find_beside`]).
    fn oracle_binary(&self) -> Option<PathBuf> {
        let exe = self.real_exe()?;
        if self.exe_is_main {
            Some(exe)
        } else {
            find_beside(&exe, "kernel-oracle")
        }
    }

    /// `binary` as a printed program: its file name alone when the first
    /// match of that name on `path` is the same file, else its absolute
    /// path; shell-quoted when it needs it.
    fn program(&self, binary: &Path) -> String {
        let binary = std::path::absolute(binary).unwrap_or_else(|_| binary.to_path_buf());
        let real = binary.canonicalize().ok();
        if let (Some(name), Some(real)) = (binary.file_name(), real) {
            let on_path = self.path.as_deref().and_then(|p| {
                std::env::split_paths(p)
                    .map(|d| d.join(name))
                    .find(|f| is_executable_file(f))
            });
            if on_path.and_then(|f| f.canonicalize().ok()) == Some(real) {
                return crate::shell_quote(&name.to_string_lossy());
            }
        }
        crate::shell_quote(&binary.to_string_lossy())
    }

    /// `binary` in the tree `root`, run outside its root: through the
    /// cargo runner ([`CARGO_RUNNER`]) when the tree has it, as cargo would
    /// run it at the root, else alone.
    fn through_runner(&self, root: &Path, binary: &Path) -> String {
        let runner = root.join(CARGO_RUNNER);
        let binary = crate::shell_quote(&binary.to_string_lossy());
        if is_executable_file(&runner) {
            format!("{} {binary}", crate::shell_quote(&runner.to_string_lossy()))
        } else {
            binary
        }
    }
}

/// The program every printed `kernel-oracle` reproduction line runs, up
/// to its subcommand: the gates' `rerun: ... check KIND` rows, the cases'
/// `rerun: ... case KIND --...` lines (gates, `case`, the fuzz targets'
/// panics) and `mutant`'s `run: VAR=... check KIND`. A line is printed as
/// `[VAR=value ...] PREFIX SUBCOMMAND KIND ARGS`, the prefix from this one
/// function, so that it runs as printed (through `sh -c`) where it was
/// printed, whatever the build. [`rerun_prefix_in`] of
/// [`RerunContext::current`]: see there for the rule. A fuzz artifact's
/// line takes its program from [`fuzz_rerun_prefix`].
pub fn rerun_prefix() -> String {
    rerun_prefix_in(&RerunContext::current())
}

/// The rule of [`rerun_prefix`] (this project's own convention, the one
/// the README's commands follow: `cargo run --release -- ...` at the
/// source tree's root, the binary itself elsewhere), first that applies:
///
/// 1. `over` ([`ENV_RERUN`]) when set and not empty, verbatim.
/// 2. The source tree (`manifest_dir` holds `Cargo.toml` and `exe` lies
///    under its `target/` or `fuzz/target/`): at its root, `cargo run
///    --release --` (cargo rebuilds first if the sources changed, and runs
///    the binary through the tree's runner). Elsewhere, cargo would read
///    no `.cargo/config.toml` and so lose the runner: the runner
///    ([`CARGO_RUNNER`], when the tree has it) and the binary, both by
///    absolute path, which builds nothing. The binary is `exe` when it is
///    the command itself, else the `kernel-oracle` beside `exe` or in an
///    ancestor, else `<root>/target/release/kernel-oracle`.
/// 3. Anywhere else (the bundle, an install, a copy): `exe` when it is the
///    command itself (whatever its name), else the executable file
///    `kernel-oracle` beside `exe` or in an ancestor; printed by its name
///    when that name's first match on `path` is the same file, else by
///    its absolute path, shell-quoted when it needs it. When there is no
///    such file: `kernel-oracle`, for `PATH` to find.
///
/// Paths are compared after resolving symbolic links. A file that is not
/// executable, or a directory, is never the binary.
pub fn rerun_prefix_in(c: &RerunContext) -> String {
    if let Some(o) = c.over.as_ref().filter(|o| !o.is_empty()) {
        return o.to_string_lossy().into_owned();
    }
    if let Some(root) = c.tree() {
        if c.at_root(&root) {
            return "cargo run --release --".to_string();
        }
        let binary = c
            .oracle_binary()
            .unwrap_or_else(|| root.join("target/release/kernel-oracle"));
        return c.through_runner(&root, &binary);
    }
    match c.oracle_binary() {
        Some(b) => c.program(&b),
        None => "kernel-oracle".to_string(),
    }
}

/// The program that reruns fuzz target `target` (`mul_mat`) on one input,
/// up to the input's path (a libFuzzer artifact); [`fuzz_rerun_prefix_in`]
/// of [`RerunContext::current`]. `$KERNEL_ORACLE_RERUN` plays no part (it
/// names `kernel-oracle`, not a fuzz binary).
pub fn fuzz_rerun_prefix(target: &str) -> String {
    fuzz_rerun_prefix_in(&RerunContext::current(), target)
}

/// The rule of [`fuzz_rerun_prefix`], first that applies:
///
/// 1. The source tree (as in [`rerun_prefix_in`]): at its root, `cargo
///    +nightly fuzz run TARGET`. Elsewhere, when `exe` is that target's
///    fuzz binary (under `fuzz/target/`, named `TARGET`), the runner and
///    `exe` by absolute path; else `cargo +nightly fuzz run --fuzz-dir
///    <root>/fuzz TARGET`.
/// 2. Anywhere else (the bundle, which holds each target as `fuzz_TARGET`,
///    and `gdn_packed` also as `nosan_gdn_packed`): `exe` when it is named
///    `fuzz_TARGET` or `nosan_TARGET`, else the executable file
///    `fuzz_TARGET` beside `exe` or in an ancestor, printed as
///    [`rerun_prefix_in`] prints a binary; `fuzz_TARGET` when there is no
///    such file.
pub fn fuzz_rerun_prefix_in(c: &RerunContext, target: &str) -> String {
    let exe = c.real_exe();
    let named = |names: &[String]| {
        exe.as_deref().filter(|e| {
            e.file_name()
                .is_some_and(|n| names.iter().any(|x| n == x.as_str()))
        })
    };
    if let Some(root) = c.tree() {
        if c.at_root(&root) {
            return format!("cargo +nightly fuzz run {target}");
        }
        let fuzz = named(&[target.to_string()]).filter(|e| e.starts_with(root.join("fuzz/target")));
        return match fuzz {
            Some(e) => c.through_runner(&root, e),
            None => format!(
                "cargo +nightly fuzz run --fuzz-dir {} {target}",
                crate::shell_quote(&root.join("fuzz").to_string_lossy())
            ),
        };
    }
    let bundled = format!("fuzz_{target}");
    let own = named(&[bundled.clone(), format!("nosan_{target}")]).map(Path::to_path_buf);
    match own.or_else(|| exe.as_deref().and_then(|e| find_beside(e, &bundled))) {
        Some(b) => c.program(&b),
        None => bundled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An executable file at `p` (empty: only its kind and mode matter).
    fn executable(p: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(p, "").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A scratch directory with a space in its name (so the quoting is
    /// seen), holding a source tree (`tree/`: `Cargo.toml`, the runner, a
    /// binary in `target/release/`), a tree without the runner
    /// (`bare/`), a bundle (`bundle/`: `kernel-oracle`, `fuzz_mul_mat`),
    /// another directory with a different `kernel-oracle` (`other/`), a
    /// renamed copy (`copies/ko`), a `kernel-oracle` that is not executable
    /// (`noexec/`) and one that is a directory (`dirs/`); `what` names it
    /// apart from other tests' scratch directories.
    fn scratch(what: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("kernel oracle rerun {what} {}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let d = d.canonicalize().unwrap();
        for dir in [
            "tree/target/release/deps",
            "tree/fuzz/target/x86_64-unknown-linux-gnu/release",
            "tree/scripts",
            "bare/target/release/deps",
            "bundle",
            "other",
            "hidden/target/release/deps",
            "copies",
            "noexec",
            "dirs/kernel-oracle",
            "dirs/sub",
        ] {
            std::fs::create_dir_all(d.join(dir)).unwrap();
        }
        for f in ["tree/Cargo.toml", "bare/Cargo.toml", "noexec/kernel-oracle"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        for f in [
            "tree/scripts/cargo-runner",
            "tree/target/release/kernel-oracle",
            "tree/fuzz/target/x86_64-unknown-linux-gnu/release/mul_mat",
            "bare/target/release/kernel-oracle",
            "bundle/kernel-oracle",
            "bundle/fuzz_mul_mat",
            "bundle/nosan_gdn_packed",
            "other/kernel-oracle",
            "copies/ko",
        ] {
            executable(&d.join(f));
        }
        d
    }

    #[test]
    fn the_rerun_prefix_is_the_override_else_cargo_at_the_root_else_the_binary() {
        let d = scratch("prefix");
        let tree = d.join("tree");
        let q = |p: PathBuf| format!("'{}'", p.display());
        let in_tree = RerunContext {
            over: None,
            exe: Some(tree.join("target/release/deps/fp8_mmq_gate-0123")),
            exe_is_main: false,
            cwd: Some(tree.clone()),
            manifest_dir: tree.clone(),
            path: None,
        };
        // 1. The override, verbatim; empty is unset.
        let over = |o: &str| RerunContext {
            over: Some(o.into()),
            ..in_tree.clone()
        };
        assert_eq!(
            rerun_prefix_in(&over("ssh gpu kernel-oracle")),
            "ssh gpu kernel-oracle"
        );
        assert_eq!(rerun_prefix_in(&over("")), "cargo run --release --");
        // 2. Under the tree's target/ or fuzz/target/: cargo at the root;
        // elsewhere the runner and the binary (cargo would lose the
        // runner there), which builds nothing.
        assert_eq!(rerun_prefix_in(&in_tree), "cargo run --release --");
        let runner_and_binary = format!(
            "{} {}",
            q(tree.join("scripts/cargo-runner")),
            q(tree.join("target/release/kernel-oracle"))
        );
        let elsewhere = RerunContext {
            cwd: Some(d.join("other")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&elsewhere), runner_and_binary);
        let below = RerunContext {
            cwd: Some(tree.join("target")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&below), runner_and_binary);
        // A fuzz target's binary finds no kernel-oracle above it: the
        // release binary's path.
        let fuzz = RerunContext {
            exe: Some(tree.join("fuzz/target/x86_64-unknown-linux-gnu/release/mul_mat")),
            cwd: Some(tree.join("fuzz")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&fuzz), runner_and_binary);
        // The command itself, renamed, in the tree: that very file.
        std::fs::copy(
            tree.join("target/release/kernel-oracle"),
            tree.join("target/release/ko"),
        )
        .unwrap();
        let main = RerunContext {
            exe: Some(tree.join("target/release/ko")),
            exe_is_main: true,
            ..elsewhere.clone()
        };
        assert_eq!(
            rerun_prefix_in(&main),
            format!(
                "{} {}",
                q(tree.join("scripts/cargo-runner")),
                q(tree.join("target/release/ko"))
            )
        );
        // A tree without the runner: the binary alone.
        let bare = RerunContext {
            exe: Some(d.join("bare/target/release/deps/fp8_mmq_gate-0123")),
            manifest_dir: d.join("bare"),
            ..elsewhere.clone()
        };
        assert_eq!(
            rerun_prefix_in(&bare),
            q(d.join("bare/target/release/kernel-oracle"))
        );
        // 3. Elsewhere: the bundle's binary, by name when PATH finds that
        // very file first, else by its absolute path.
        let bundle = RerunContext {
            over: None,
            exe: Some(d.join("bundle/fuzz_fp8_mmq")),
            exe_is_main: false,
            cwd: Some(d.join("bundle")),
            manifest_dir: d.join("no such tree"),
            path: None,
        };
        assert_eq!(rerun_prefix_in(&bundle), q(d.join("bundle/kernel-oracle")));
        let path =
            |dirs: &[&str]| Some(std::env::join_paths(dirs.iter().map(|x| d.join(x))).unwrap());
        let found = RerunContext {
            path: path(&["tree", "bundle"]),
            ..bundle.clone()
        };
        assert_eq!(rerun_prefix_in(&found), "kernel-oracle");
        let shadowed = RerunContext {
            path: path(&["other", "bundle"]),
            ..bundle.clone()
        };
        assert_eq!(
            rerun_prefix_in(&shadowed),
            q(d.join("bundle/kernel-oracle"))
        );
        // A renamed copy of the command: itself, by its path (never a
        // `kernel-oracle` beside it, on PATH or in the current directory),
        // by its name where PATH finds it.
        let copy = RerunContext {
            exe: Some(d.join("copies/ko")),
            exe_is_main: true,
            cwd: Some(d.clone()),
            path: path(&["other"]),
            ..bundle.clone()
        };
        assert_eq!(rerun_prefix_in(&copy), q(d.join("copies/ko")));
        let copy_on_path = RerunContext {
            path: path(&["copies"]),
            ..copy.clone()
        };
        assert_eq!(rerun_prefix_in(&copy_on_path), "ko");
        // A test binary whose neighbour `kernel-oracle` is not executable,
        // or whose ancestor holds a directory of that name (run from that
        // directory): neither is the binary; the name, for PATH.
        for exe in ["noexec/fp8_mmq_gate", "dirs/sub/fp8_mmq_gate"] {
            let c = RerunContext {
                exe: Some(d.join(exe)),
                cwd: Some(d.join("dirs")),
                ..bundle.clone()
            };
            assert_eq!(rerun_prefix_in(&c), "kernel-oracle", "{exe}");
        }
        // The tree's directory is there but empty (hidden, as
        // scripts/bundle-selftest does): the binary.
        let hidden = RerunContext {
            exe: Some(d.join("hidden/target/release/deps/fp8_mmq_gate-0123")),
            manifest_dir: d.join("hidden"),
            ..found.clone()
        };
        assert_eq!(rerun_prefix_in(&hidden), "kernel-oracle");
        // The tree exists but the executable is not cargo's: the binary.
        let installed = RerunContext {
            exe: Some(d.join("bundle/kernel-oracle")),
            exe_is_main: true,
            manifest_dir: tree.clone(),
            ..found.clone()
        };
        assert_eq!(rerun_prefix_in(&installed), "kernel-oracle");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fuzz_artifacts_program_is_cargo_fuzz_at_the_root_else_the_fuzz_binary() {
        let d = scratch("fuzz");
        let tree = d.join("tree");
        let q = |p: PathBuf| format!("'{}'", p.display());
        let fuzz_exe = tree.join("fuzz/target/x86_64-unknown-linux-gnu/release/mul_mat");
        let at_root = RerunContext {
            over: Some("kernel-oracle".into()),
            exe: Some(fuzz_exe.clone()),
            exe_is_main: false,
            cwd: Some(tree.clone()),
            manifest_dir: tree.clone(),
            path: None,
        };
        // The override names kernel-oracle, not a fuzz binary: unused.
        assert_eq!(
            fuzz_rerun_prefix_in(&at_root, "mul_mat"),
            "cargo +nightly fuzz run mul_mat"
        );
        let elsewhere = RerunContext {
            cwd: Some(d.join("other")),
            ..at_root.clone()
        };
        assert_eq!(
            fuzz_rerun_prefix_in(&elsewhere, "mul_mat"),
            format!("{} {}", q(tree.join("scripts/cargo-runner")), q(fuzz_exe))
        );
        // Another target's line from this binary, or a test's: cargo fuzz
        // with the tree's fuzz directory.
        let want = format!(
            "cargo +nightly fuzz run --fuzz-dir {} gdn_packed",
            q(tree.join("fuzz"))
        );
        assert_eq!(fuzz_rerun_prefix_in(&elsewhere, "gdn_packed"), want);
        // The bundle: the fuzz binary itself, or the one beside the
        // running executable; its name alone when there is none.
        let bundle = RerunContext {
            over: None,
            exe: Some(d.join("bundle/fuzz_mul_mat")),
            exe_is_main: false,
            cwd: Some(d.clone()),
            manifest_dir: d.join("no such tree"),
            path: None,
        };
        let fm = q(d.join("bundle/fuzz_mul_mat"));
        assert_eq!(fuzz_rerun_prefix_in(&bundle, "mul_mat"), fm);
        let test = RerunContext {
            exe: Some(d.join("bundle/mul_mat_mutants")),
            ..bundle.clone()
        };
        assert_eq!(fuzz_rerun_prefix_in(&test, "mul_mat"), fm);
        let nosan = RerunContext {
            exe: Some(d.join("bundle/nosan_gdn_packed")),
            ..bundle.clone()
        };
        assert_eq!(
            fuzz_rerun_prefix_in(&nosan, "gdn_packed"),
            q(d.join("bundle/nosan_gdn_packed"))
        );
        assert_eq!(fuzz_rerun_prefix_in(&test, "moe_tables"), "fuzz_moe_tables");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// `$KERNEL_ORACLE_BIN` chooses the binary a test runs, never the
    /// program a line prints (`/bin/true` there would make every rerun
    /// pass).
    #[test]
    fn kernel_oracle_bin_does_not_feed_the_printed_program() {
        let before = rerun_prefix();
        std::env::set_var(ENV_BIN, "/bin/true");
        let during = rerun_prefix();
        std::env::remove_var(ENV_BIN);
        assert_eq!(during, before);
        assert!(!during.contains("/bin/true"), "{during}");
    }

    #[test]
    fn a_file_is_found_through_the_compiled_root_and_a_missing_one_names_the_search() {
        let here = env!("CARGO_MANIFEST_DIR");
        let p = project_file("src/paths.rs", here).unwrap();
        assert!(p.ends_with("src/paths.rs"), "{}", p.display());
        let e = project_file("no/such/file.txt", here).unwrap_err();
        assert!(e.contains("no/such/file.txt") && e.contains(here), "{e}");
    }
}
