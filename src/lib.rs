//! kernel-oracle's case library: for each kind of kernel, a generator of
//! cases (seeded or `Arbitrary`), a runner (the device), a judge (the core
//! oracle and its comparison) and a report that reproduces a failure.
//!
//! The contract for every `check` function here, as in wasmtime's oracles:
//! **a bug is a panic**. A case the contract refuses (a precondition such as
//! NaN weight codes) is skipped with a reason and counted, never compared;
//! anything else that goes wrong panics with a reproduction.

#![warn(missing_docs)]

pub mod act_and_mul;
pub mod attention;
pub mod dtype;
pub mod elementwise;
pub mod fp8_mmq;
pub mod fp8_quant;
pub mod fp8_scaled_mm;
pub mod gdn;
pub mod gdn_fast;
pub mod ggml_fast;
pub mod int8_group_quant;
pub mod int8_quant;
pub mod int8_scaled_mm;
pub mod kind;
pub mod kv_cache;
pub mod merge_attn_states;
pub mod moe_align;
pub mod moe_routing;
pub mod moe_tables;
pub mod mul_mat;
pub mod mutate;
pub mod names;
pub mod paths;
pub mod penalties;
pub mod refcache;
pub mod rejection_sample;
pub mod rms_norm;
pub mod rms_norm_fp8_quant;
pub mod rng;
pub mod rope;
pub mod sampling;
pub mod score;
pub mod stats;
pub mod tensor_core;

/// Environment variable: `spec` makes the gates, case runners and fuzzers
/// compute the oracle's answers with the spec functions of `core`
/// themselves instead of their fast paths (to time the difference, or to
/// rule the fast paths out of a divergence); unset or `fast`, the fast
/// paths ([`fp8_mmq::fast`], [`gdn_fast`]). Any other value is a panic
/// naming it.
pub const ENV_ORACLE: &str = "KERNEL_ORACLE_ORACLE";

/// What [`ENV_ORACLE`] asks for: `Ok(true)` for the spec functions,
/// `Ok(false)` for the fast paths (unset or `fast`).
///
/// # Errors
/// A message naming the variable and its value, for any other value (the
/// command line checks this first and exits 2 with it).
pub fn oracle_choice() -> Result<bool, String> {
    match std::env::var(ENV_ORACLE).as_deref() {
        Err(_) | Ok("fast") => Ok(false),
        Ok("spec") => Ok(true),
        Ok(other) => Err(format!("{ENV_ORACLE}={other:?}: expected `spec` or `fast`")),
    }
}

/// Whether [`ENV_ORACLE`] asks for the spec functions (read once).
///
/// # Panics
/// If the variable is set to something other than `spec` or `fast` (see
/// [`oracle_choice`]).
pub fn use_spec_oracle() -> bool {
    static SPEC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SPEC.get_or_init(|| oracle_choice().unwrap_or_else(|e| panic!("{e}")))
}

/// The environment a printed reproduction needs to run the same kernel:
/// `NAME=value ` (shell-quoted, with a trailing space) when the candidate
/// variable `name` (e.g. `KERNEL_ORACLE_FP8_MMQ_CU`) is set and not empty,
/// else the empty string. Without it, a rerun of a candidate's divergence
/// would test the builtin kernel and pass. A kind's candidate source
/// variable (`Kind::env`) given as a relative path is printed absolute:
/// the rerun line may be run from another directory than the one the gate
/// was started in (a log read later, the line pasted elsewhere), where a
/// relative path would name no file.
pub fn candidate_env(name: &str) -> String {
    match std::env::var_os(name) {
        Some(v) if !v.is_empty() => {
            let source = kind::KINDS.iter().any(|k| k.env == name);
            let value = match std::path::absolute(&v) {
                Ok(p) if source => p.into_os_string(),
                _ => v,
            };
            format!("{name}={} ", shell_quote(&value.to_string_lossy()))
        }
        _ => String::new(),
    }
}

/// `s` as one POSIX shell word: unchanged when it is made of letters,
/// digits and `_./:=+,-` only (and not empty), else in single quotes.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./:=+,-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The gate's row for a kernel source the engine of `kind` cannot load
/// (it does not compile, lacks a kernel the ABI requires, or plans a
/// launch the shim refuses): the message, the rerun line (with the kind's
/// whole environment, [`kind::Kind::repro_env`]) and the gate's failure
/// line. The gate exits 1 with it, as for any failing row (a machine that
/// cannot run kernels at all exits 2 instead).
pub fn source_fault_report(kind: &kind::Kind, message: &str) -> String {
    let gate = kind.name;
    format!(
        "{gate}: the kernel source cannot be loaded: {message}  FAIL\n  rerun: {}{} check {gate}\n\n=== {gate}-check 1 FAILURES (the kernel source) ===\n",
        (kind.repro_env)(),
        paths::rerun_prefix()
    )
}

/// A failing gate row's reproduction, as the gates print it: `note` (what
/// the command reruns, when it reruns more than the row) on a line of its
/// own, `  (note)`, then `  rerun: COMMAND`, the command alone. A note
/// after the command, even as a `# ...` comment, would become arguments
/// where the line is pasted into a shell that takes no comments
/// (interactive zsh by default).
pub fn rerun_row(note: Option<&str>, command: &str) -> String {
    match note {
        Some(n) => format!("  ({n})\n  rerun: {command}"),
        None => format!("  rerun: {command}"),
    }
}

/// The file that holds this process's crashing input `data` once
/// libFuzzer has handled the report's panic, which a fuzz target passes as
/// its artifact (`check_with_artifact`), absolute (so the rerun line runs
/// from anywhere):
/// - when every argument that is not a flag names a file (libFuzzer then
///   runs those files and writes no artifact, `AllInputsAreFiles` in
///   `FuzzerDriver.cpp`: a rerun), the first of them whose contents are
///   `data`, else the first of them;
/// - otherwise the last `-exact_artifact_path=PATH` if any, else the last
///   `-artifact_prefix=PREFIX` (none: the empty prefix, the working
///   directory) followed by `crash-` and the input's SHA-1 in lower-case
///   hex (libFuzzer's `Fuzzer::DumpCurrentUnit` in `FuzzerLoop.cpp` with
///   `Hash`, `FuzzerSHA1.cpp`; cargo-fuzz passes
///   `-artifact_prefix=<fuzz dir>/artifacts/<target>/`).
pub fn libfuzzer_crash_artifact(data: &[u8]) -> String {
    let args = std::env::args_os().skip(1);
    libfuzzer_crash_artifact_in(args.map(|a| a.to_string_lossy().into_owned()), data)
}

/// [`libfuzzer_crash_artifact`] for the arguments `args` (without the
/// program's name).
pub fn libfuzzer_crash_artifact_in(args: impl Iterator<Item = String>, data: &[u8]) -> String {
    let (mut exact, mut prefix, mut inputs) = (None, String::new(), Vec::new());
    for a in args {
        if let Some(p) = a.strip_prefix("-exact_artifact_path=") {
            exact = Some(p.to_string());
        } else if let Some(p) = a.strip_prefix("-artifact_prefix=") {
            prefix = p.to_string();
        } else if !a.starts_with('-') {
            inputs.push(a);
        }
    }
    let rerun = !inputs.is_empty() && inputs.iter().all(|i| std::path::Path::new(i).is_file());
    let path = if rerun {
        let holds = |i: &&String| std::fs::read(i.as_str()).is_ok_and(|b| b == data);
        inputs.iter().find(holds).unwrap_or(&inputs[0]).clone()
    } else {
        exact.unwrap_or_else(|| format!("{prefix}crash-{}", sha1_smol::Sha1::from(data).digest()))
    };
    match std::env::current_dir() {
        Ok(cwd) if !std::path::Path::new(&path).is_absolute() => {
            cwd.join(&path).to_string_lossy().into_owned()
        }
        _ => path,
    }
}

/// The line that reruns fuzz target `target` (`mul_mat`) on the input
/// `artifact`: `{indent}rerun: {env}PROGRAM ARTIFACT`, the program from
/// [`paths::fuzz_rerun_prefix`] and `env` the variables the case line
/// carries (the candidate's, so the rerun tests the same kernel).
pub fn fuzz_rerun_lines(indent: &str, env: &str, target: &str, artifact: &str) -> String {
    let program = paths::fuzz_rerun_prefix(target);
    format!("{indent}rerun: {env}{program} {}\n", shell_quote(artifact))
}

/// The line a gate prints after its rows when a failure lost the process's
/// CUDA context (`device::cuda::context_lost`: a sticky fault, a launch
/// past its deadline): every row after it failed as not run, and each
/// rerun line runs its row alone in a fresh process. `None` while the
/// context is usable.
pub fn lost_context_line() -> Option<String> {
    device::cuda::context_lost().map(|l| {
        format!(
            "the CUDA context was lost ({}): the rows after it failed as not run; each rerun line runs its row alone in a fresh process",
            l.what
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quote_keeps_plain_words_and_quotes_the_rest_and_the_empty_word() {
        assert_eq!(shell_quote("a/b.wgsl"), "a/b.wgsl");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("<x>"), "'<x>'");
    }

    #[test]
    fn a_gate_rows_note_is_a_line_of_its_own_and_the_rerun_line_the_command_alone() {
        let cmd = "V='a b' kernel-oracle check moe-tables";
        assert_eq!(rerun_row(None, cmd), format!("  rerun: {cmd}"));
        let noted = rerun_row(Some("row \"65,536 pairs\""), cmd);
        let lines: Vec<&str> = noted.lines().collect();
        assert_eq!(
            lines,
            ["  (row \"65,536 pairs\")", &format!("  rerun: {cmd}")]
        );
    }

    /// An artifact's line is a `rerun:` line with the env, the fuzz
    /// program and the artifact's path, quoted.
    #[test]
    fn a_fuzz_artifacts_line_carries_the_env_and_the_quoted_path() {
        let program = paths::fuzz_rerun_prefix("mul_mat");
        let known = fuzz_rerun_lines("  ", "V='a b' ", "mul_mat", "crash-1 x");
        assert_eq!(known, format!("  rerun: V='a b' {program} 'crash-1 x'\n"));
    }

    /// libFuzzer's name for a crashing input: the prefix, `crash-` and the
    /// SHA-1 (FIPS 180-4's test vector "abc"), absolute; the exact path
    /// wins over the prefix; the last of each flag counts; a rerun of
    /// files names the file.
    #[test]
    fn the_libfuzzer_artifact_is_the_prefix_then_crash_and_the_sha1() {
        let abc = "crash-a9993e364706816aba3e25717850c26c9cd0d89d";
        let args = |a: &[&str]| {
            a.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into_iter()
        };
        let got = libfuzzer_crash_artifact_in(
            args(&["-artifact_prefix=/a/", "-artifact_prefix=/f/art/"]),
            b"abc",
        );
        assert_eq!(got, format!("/f/art/{abc}"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            libfuzzer_crash_artifact_in(args(&["corpus"]), b"abc"),
            cwd.join(abc).to_string_lossy()
        );
        let exact = libfuzzer_crash_artifact_in(
            args(&["-exact_artifact_path=/x/y", "-artifact_prefix=/f/"]),
            b"abc",
        );
        assert_eq!(exact, "/x/y");
        // A rerun (every input a file): the file holding the input, else
        // the first; a directory among them is a fuzzing run.
        let dir = std::env::temp_dir().join(format!("ko-artifact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"xyz").unwrap();
        std::fs::write(&b, b"abc").unwrap();
        let (sa, sb) = (a.to_string_lossy(), b.to_string_lossy());
        let got = libfuzzer_crash_artifact_in(args(&["-runs=1", &sa, &sb]), b"abc");
        assert_eq!(got, sb);
        assert_eq!(libfuzzer_crash_artifact_in(args(&[&sa, &sb]), b"q"), sa);
        let d = dir.to_string_lossy();
        let fuzzing = libfuzzer_crash_artifact_in(args(&["-artifact_prefix=/f/", &d, &sa]), b"abc");
        assert_eq!(fuzzing, format!("/f/{abc}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
