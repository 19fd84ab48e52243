//! Planting one bug in a kernel source: the one textual edit every
//! `mutants` module makes (MoE tables, GDN, mul-mat), asserted to apply exactly once
//! so that a rewrite of the kernel that moves an anchor fails loudly
//! instead of silently producing an unchanged "mutant".

/// One planted bug: a textual edit of a kernel source. `C` names what is
/// expected to catch it (gate arms, gate case labels, gate numbers).
#[derive(Clone, Copy, Debug)]
pub struct Mutant<C: 'static> {
    /// The name on the command line.
    pub name: &'static str,
    /// What the bug does.
    pub what: &'static str,
    /// The text replaced.
    pub find: &'static str,
    /// Its replacement.
    pub replace: &'static str,
    /// What is expected to catch it.
    pub caught_by: &'static [C],
}

/// `source` with its one occurrence of `find` replaced by `replace`.
///
/// # Errors
/// A message naming mutant `name` if `find` does not occur exactly once.
pub fn apply_once(name: &str, find: &str, replace: &str, source: &str) -> Result<String, String> {
    match source.matches(find).count() {
        1 => Ok(source.replacen(find, replace, 1)),
        n => Err(format!(
            "mutant {name}: its anchor occurs {n} times in the source (want exactly 1): {find:?}"
        )),
    }
}

/// Writes a candidate source `text` to
/// `<temp>/kernel-oracle-<kind>-mutants-<pid>/<name>.cu` (for tests that
/// load a mutant through `KernelSource::from_file`); returns the path.
///
/// # Errors
/// The file system's error.
pub fn write_candidate(kind: &str, name: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "kernel-oracle-{kind}-mutants-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.cu"));
    std::fs::write(&path, text)?;
    Ok(path)
}
