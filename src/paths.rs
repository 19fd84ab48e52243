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

/// The `kernel-oracle` binary: `$KERNEL_ORACLE_BIN` when set, else
/// `kernel-oracle` in the running executable's directory or an ancestor
/// (the bundle puts it beside the test binaries; cargo puts it in
/// `target/<profile>/`, above `deps/`), else `compiled` (pass
/// `env!("CARGO_BIN_EXE_kernel-oracle")`).
pub fn kernel_oracle_exe(compiled: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os(ENV_BIN).filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .map(|d| d.join("kernel-oracle"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from(compiled))
}

/// Environment variable: the program prefix every printed reproduction
/// uses instead of the one [`rerun_prefix`] works out (e.g. `kernel-oracle`
/// for CI logs read on another machine), when set and not empty. Used
/// verbatim, not quoted.
pub const ENV_RERUN: &str = "KERNEL_ORACLE_RERUN";

/// What [`rerun_prefix_in`] decides from: the process's view of itself,
/// taken apart so each branch can be tested from any directory.
#[derive(Clone, Debug, Default)]
pub struct RerunContext {
    /// `$KERNEL_ORACLE_RERUN` ([`ENV_RERUN`]).
    pub over: Option<std::ffi::OsString>,
    /// The running executable (`std::env::current_exe`).
    pub exe: Option<PathBuf>,
    /// The current directory, where the printed line is likely to be run.
    pub cwd: Option<PathBuf>,
    /// The source tree's root as compiled (`env!("CARGO_MANIFEST_DIR")` of
    /// this crate); it may not exist on the machine that runs.
    pub manifest_dir: PathBuf,
    /// The `kernel-oracle` binary ([`kernel_oracle_exe`]).
    pub binary: PathBuf,
    /// `$PATH`.
    pub path: Option<std::ffi::OsString>,
}

impl RerunContext {
    /// This process's context.
    pub fn current() -> Self {
        RerunContext {
            over: std::env::var_os(ENV_RERUN),
            exe: std::env::current_exe().ok(),
            cwd: std::env::current_dir().ok(),
            manifest_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            binary: kernel_oracle_exe("kernel-oracle"),
            path: std::env::var_os("PATH"),
        }
    }
}

/// The program every printed reproduction line runs, up to its subcommand:
/// the gates' `rerun: ... check KIND` rows, the cases' `rerun: ... case
/// KIND --...` lines (gates, `case`, the fuzz targets' panics) and
/// `mutant`'s `run: VAR=... check KIND`. A line is printed as
/// `[VAR=value ...] PREFIX SUBCOMMAND KIND ARGS`, the prefix from this one
/// function, so that it runs as printed where it was printed, whatever the
/// build. [`rerun_prefix_in`] of [`RerunContext::current`]: see there for
/// the rule.
pub fn rerun_prefix() -> String {
    rerun_prefix_in(&RerunContext::current())
}

/// The rule of [`rerun_prefix`] (this project's own convention, the one
/// the README's commands follow: `cargo run --release -- ...` in the
/// source tree, the binary itself in the GPU bundle), first that applies:
///
/// 1. `over` ([`ENV_RERUN`]) when set and not empty, verbatim.
/// 2. The source tree: `manifest_dir` holds `Cargo.toml` and `exe` lies
///    under its `target/` or `fuzz/target/` (the binary, a test or a fuzz
///    target cargo built): `cargo run --release --` when `cwd` is
///    `manifest_dir`, else `cargo run --release --manifest-path
///    <manifest_dir>/Cargo.toml --` (cargo runs the binary in the
///    directory the line is run from, so relative paths in it keep their
///    meaning). Cargo rebuilds first if the sources changed: the line
///    reruns the tree as it is.
/// 3. Anywhere else (the bundle, an install): `binary`, printed
///    `kernel-oracle` when that name's first match on `path` is the same
///    file, else as its absolute path, shell-quoted when it needs it.
///
/// Paths are compared after resolving symbolic links.
pub fn rerun_prefix_in(c: &RerunContext) -> String {
    if let Some(o) = c.over.as_ref().filter(|o| !o.is_empty()) {
        return o.to_string_lossy().into_owned();
    }
    let root = c
        .manifest_dir
        .canonicalize()
        .ok()
        .filter(|r| r.join("Cargo.toml").is_file());
    if let (Some(root), Some(exe)) = (root, c.exe.as_deref()) {
        let exe = exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf());
        if exe.starts_with(root.join("target")) || exe.starts_with(root.join("fuzz/target")) {
            let here = c.cwd.as_deref().and_then(|d| d.canonicalize().ok());
            if here.as_deref() == Some(root.as_path()) {
                return "cargo run --release --".to_string();
            }
            let manifest = root.join("Cargo.toml");
            return format!(
                "cargo run --release --manifest-path {} --",
                crate::shell_quote(&manifest.to_string_lossy())
            );
        }
    }
    let binary = std::path::absolute(&c.binary).unwrap_or_else(|_| c.binary.clone());
    let Ok(real) = binary.canonicalize() else {
        // No such file: the name as given is the best guess.
        return crate::shell_quote(&c.binary.to_string_lossy());
    };
    let on_path = c.path.as_deref().and_then(|p| {
        std::env::split_paths(p)
            .map(|d| d.join("kernel-oracle"))
            .find(|f| f.is_file())
    });
    if on_path.and_then(|f| f.canonicalize().ok()) == Some(real) {
        "kernel-oracle".to_string()
    } else {
        crate::shell_quote(&binary.to_string_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory with a space in its name (so the quoting is
    /// seen), holding a source tree (`tree/Cargo.toml`, a binary in
    /// `tree/target/release/`), a bundle (`bundle/kernel-oracle`) and
    /// another directory with a different `kernel-oracle` (`other/`).
    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!("kernel oracle rerun {}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let d = d.canonicalize().unwrap();
        for dir in [
            "tree/target/release/deps",
            "tree/fuzz/target/x86_64-unknown-linux-gnu/release",
            "bundle",
            "other",
            "hidden/target/release/deps",
        ] {
            std::fs::create_dir_all(d.join(dir)).unwrap();
        }
        for f in [
            "tree/Cargo.toml",
            "tree/target/release/kernel-oracle",
            "bundle/kernel-oracle",
            "other/kernel-oracle",
        ] {
            std::fs::write(d.join(f), "").unwrap();
        }
        d
    }

    #[test]
    fn the_rerun_prefix_is_the_override_else_cargo_in_the_tree_else_the_binary() {
        let d = scratch();
        let tree = d.join("tree");
        let q = |p: PathBuf| format!("'{}'", p.display());
        let in_tree = RerunContext {
            over: None,
            exe: Some(tree.join("target/release/deps/fp8_mmq_gate-0123")),
            cwd: Some(tree.clone()),
            manifest_dir: tree.clone(),
            binary: tree.join("target/release/kernel-oracle"),
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
        // 2. Under the tree's target/ or fuzz/target/: cargo, with the
        // manifest unless the line runs at the tree's root.
        assert_eq!(rerun_prefix_in(&in_tree), "cargo run --release --");
        let with_manifest = format!(
            "cargo run --release --manifest-path {} --",
            q(tree.join("Cargo.toml"))
        );
        let elsewhere = RerunContext {
            cwd: Some(d.join("other")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&elsewhere), with_manifest);
        let below = RerunContext {
            cwd: Some(tree.join("target")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&below), with_manifest);
        let fuzz = RerunContext {
            exe: Some(tree.join("fuzz/target/x86_64-unknown-linux-gnu/release/fp8_mmq")),
            cwd: Some(tree.join("fuzz")),
            ..in_tree.clone()
        };
        assert_eq!(rerun_prefix_in(&fuzz), with_manifest);
        // 3. Elsewhere: the bundle's binary, by name when PATH finds that
        // very file first, else by its absolute path.
        let bundle = RerunContext {
            over: None,
            exe: Some(d.join("bundle/fuzz_fp8_mmq")),
            cwd: Some(d.join("bundle")),
            manifest_dir: d.join("no such tree"),
            binary: d.join("bundle/kernel-oracle"),
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
            manifest_dir: tree.clone(),
            ..found.clone()
        };
        assert_eq!(rerun_prefix_in(&installed), "kernel-oracle");
        let _ = std::fs::remove_dir_all(&d);
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
