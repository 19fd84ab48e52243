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
/// Tests of one process run in parallel and write the same mutants: the
/// text goes to a file of this call's own and is renamed into place, so a
/// reader sees a whole candidate, never one being rewritten (an empty
/// file compiles to a module with no kernel).
///
/// # Errors
/// The file system's error.
pub fn write_candidate(kind: &str, name: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "kernel-oracle-{kind}-mutants-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{name}.cu"));
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.cu.{n}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    /// Writers of one candidate racing readers: every read sees the whole
    /// text (the race two parallel mutant tests of one process run).
    #[test]
    fn a_candidate_being_rewritten_is_read_whole() {
        let text = "x".repeat(1 << 20);
        let path = super::write_candidate("selftest", "race", &text).unwrap();
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20 {
                        super::write_candidate("selftest", "race", &text).unwrap();
                    }
                });
            }
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..40 {
                        let got = std::fs::read_to_string(&path).unwrap();
                        assert_eq!(got.len(), text.len());
                    }
                });
            }
        });
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
