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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_found_through_the_compiled_root_and_a_missing_one_names_the_search() {
        let here = env!("CARGO_MANIFEST_DIR");
        let p = project_file("src/paths.rs", here).unwrap();
        assert!(p.ends_with("src/paths.rs"), "{}", p.display());
        let e = project_file("no/such/file.txt", here).unwrap_err();
        assert!(e.contains("no/such/file.txt") && e.contains(here), "{e}");
    }
}
