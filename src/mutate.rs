//! Planting one bug in a kernel source: the one textual edit every
//! `mutants` module makes (MoE tables, GDN), asserted to apply exactly once
//! so that a rewrite of the kernel that moves an anchor fails loudly
//! instead of silently producing an unchanged "mutant".

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
