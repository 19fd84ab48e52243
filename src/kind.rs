//! The kind registry: the one place that knows which kinds of kernel the
//! project checks and, for each, everything the command line, the score
//! and `scripts/gpu-check` need: its name, its gate, its one-case
//! reproduction, its planted bugs, its fuzz target and the environment
//! variable that selects a candidate kernel.
//!
//! Each kind's library module (`fp8_mmq`, `moe_tables`, `gdn`, `mul_mat`,
//! `tensor_core`) holds its generator (`CaseSpec`, `Arbitrary` or
//! `from_bytes`), runner (`run`), judge (`judge`), report (`report`), gate
//! (`gate`) and planted bugs (`mutants`), and exports one [`Kind`] (its
//! `cli::KIND`) that ties them together; [`KINDS`] lists them. A new kind
//! is one module and one line of [`KINDS`].
//!
//! `kernel-oracle kinds` prints [`table`], which `scripts/gpu-check` and
//! `scripts/gpu-bundle` read instead of restating it.

use std::process::ExitCode;

/// What a gate reports back to the command line: its failing rows and
/// the rows it ran (`None` where the gate does not count rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateSummary {
    /// Failed rows.
    pub failures: usize,
    /// Rows run, where the gate counts them.
    pub rows: Option<usize>,
}

/// One command of a kind (`check KIND`, `case KIND`): its help line, its
/// arguments and what it does with them.
#[derive(Clone, Copy)]
pub struct Command<R: 'static> {
    /// The one-line help.
    pub about: &'static str,
    /// Adds the command's arguments (a `clap::Args` type's
    /// `augment_args`).
    pub args: fn(clap::Command) -> clap::Command,
    /// Runs the command on the parsed arguments.
    pub run: fn(&clap::ArgMatches) -> R,
}

/// A planted bug: a candidate source made from the builtin by one textual
/// change, or a switch of a peer kernel selected by the environment.
#[derive(Clone, Debug)]
pub struct Planted {
    /// The name on the command line (`drop-k-tail`).
    pub name: &'static str,
    /// What the bug does.
    pub what: &'static str,
    /// How the bug reaches the kernel under test.
    pub plant: Plant,
}

/// How a planted bug reaches the kernel under test.
#[derive(Clone, Debug)]
pub enum Plant {
    /// The candidate source text (the builtin with the bug planted), or the
    /// message why the bug no longer plants (its anchor moved); written to
    /// a file that the kind's candidate variable names.
    Source(Result<String, String>),
    /// A peer kernel's planted bug, selected by setting `var` to `value`
    /// (no source file).
    Env {
        /// The variable (`KERNEL_ORACLE_FP8_MMQ`).
        var: &'static str,
        /// Its value (`cublaslt-unpadded`).
        value: &'static str,
    },
}

/// Everything the command line knows about one kind of kernel.
pub struct Kind {
    /// The command-line name (`mul-mat`), also the gate's.
    pub name: &'static str,
    /// The library module (`mul_mat`): also the prefix of a written
    /// candidate file (`mul_mat-<bug>.wgsl`).
    pub module: &'static str,
    /// The short name of the GPU bundle's candidate files
    /// (`mut/<short>-<bug>.<ext>`).
    pub short: &'static str,
    /// The builtin kernel source (`shaders/mul_mat_reg_tile.wgsl`).
    pub builtin: &'static str,
    /// The candidate's file extension (`cu`, `wgsl`).
    pub ext: &'static str,
    /// The environment variable that names a candidate source file
    /// (`KERNEL_ORACLE_MUL_MAT_WGSL`).
    pub env: &'static str,
    /// The environment every printed rerun of the kind carries
    /// (`VAR=value ` words, [`crate::candidate_env`] of each variable that
    /// selects the kernel under test: the candidate source's, and for
    /// fp8-mmq the peer, the forced variant and the schedule too), so that
    /// the rerun tests the same kernel.
    pub repro_env: fn() -> String,
    /// The cargo-fuzz target that fuzzes the kind on the device
    /// (`fuzz/fuzz_targets/<fuzz_target>.rs`; the GPU bundle's
    /// `fuzz_<fuzz_target>`).
    pub fuzz_target: &'static str,
    /// The device API the kernel runs on (`cuda`, `wgpu`).
    pub backend: &'static str,
    /// Opens the kind's engine (the device, and the candidate its variable
    /// names, compiled); the kernel source it runs (`describe`), or why it
    /// cannot run. The fuzz loop calls it first, so that a missing device
    /// is exit 2 rather than a divergence.
    pub runner: fn() -> Result<String, String>,
    /// `kernel-oracle check KIND`: the gate.
    pub check: Command<Result<GateSummary, ExitCode>>,
    /// `kernel-oracle case KIND`: one case, a printed reproduction.
    pub case: Command<ExitCode>,
    /// The planted bugs, in the order `mutant KIND` lists them.
    pub planted: fn() -> Vec<Planted>,
    /// One fuzz execution in this process: the kind's generator on `data`
    /// (as its fuzz target decodes it), the runner, the judge; a
    /// divergence is a panic carrying the report (the fuzz target's body).
    pub fuzz_one: fn(&[u8]),
    /// The leading input bytes that select the case's paths (the
    /// generator's `SELECTOR_BYTES`): a fuzz input shorter than this never
    /// reaches some paths, so `fuzz --max-len` below it is refused.
    pub selector_bytes: usize,
    /// The runs compute-sanitizer makes of the kind (`gpu-check sanitize`,
    /// `score --sanitize`): each the arguments after `kernel-oracle`, split
    /// at spaces; the gate's small shapes, which reach every kernel of the
    /// kind at a size a sanitizer's slowdown allows. Empty for a kind off
    /// CUDA.
    pub sanitize_cases: &'static [&'static str],
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kind").field("name", &self.name).finish()
    }
}

/// Every kind, in the order the command line lists them.
pub static KINDS: [&Kind; 5] = [
    &crate::fp8_mmq::cli::KIND,
    &crate::moe_tables::cli::KIND,
    &crate::gdn::cli::KIND,
    &crate::tensor_core::cli::KIND,
    &crate::mul_mat::cli::KIND,
];

/// The kind called `name` (`mul-mat`).
pub fn by_name(name: &str) -> Option<&'static Kind> {
    KINDS.iter().copied().find(|k| k.name == name)
}

/// Planted bugs from a `mutants` module's list: each `(name, what)` with
/// `apply(name)` as its source.
pub fn planted_sources<M>(
    list: &'static [M],
    name_what: fn(&M) -> (&'static str, &'static str),
    apply: impl Fn(&M) -> Result<String, String>,
) -> Vec<Planted> {
    list.iter()
        .map(|m| {
            let (name, what) = name_what(m);
            Planted {
                name,
                what,
                plant: Plant::Source(apply(m)),
            }
        })
        .collect()
}

/// Planted bugs that are textual edits of `builtin`
/// ([`crate::mutate::Mutant`], each applied exactly once by
/// [`crate::mutate::apply_once`]).
pub fn planted_mutants<C>(
    list: &'static [crate::mutate::Mutant<C>],
    builtin: &'static str,
) -> Vec<Planted> {
    planted_sources(
        list,
        |m| (m.name, m.what),
        |m| crate::mutate::apply_once(m.name, m.find, m.replace, builtin),
    )
}

/// A fuzz target's body for a kind whose case is `Arbitrary`: `data` as a
/// `T` (`arbitrary_take_rest`), then `check` on it; bytes that make no
/// case are skipped.
pub fn fuzz_arbitrary<'a, T: arbitrary::Arbitrary<'a>>(data: &'a [u8], check: impl FnOnce(&T)) {
    if let Ok(case) = T::arbitrary_take_rest(arbitrary::Unstructured::new(data)) {
        check(&case);
    }
}

/// The header of [`table`].
pub const TABLE_HEADER: &str = "#kind\tshort\tenv\tfuzz_target\text\tbackend\tbuiltin\tplanted";

/// The registry as tab-separated lines, after [`TABLE_HEADER`]: kind,
/// short name, candidate variable, fuzz target, candidate extension,
/// backend, builtin source, and the planted bugs' names (comma-separated;
/// a peer's as `name=VAR=value`). `kernel-oracle kinds` prints it for the
/// scripts.
pub fn table() -> String {
    let mut s = String::from(TABLE_HEADER);
    for k in KINDS {
        let planted: Vec<String> = (k.planted)()
            .iter()
            .map(|p| match &p.plant {
                Plant::Source(_) => p.name.to_string(),
                Plant::Env { var, value } => format!("{}={var}={value}", p.name),
            })
            .collect();
        s.push_str(&format!(
            "\n{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            k.name,
            k.short,
            k.env,
            k.fuzz_target,
            k.ext,
            k.backend,
            k.builtin,
            planted.join(",")
        ));
    }
    s
}

/// `ExitCode` for a gate's summary: 0 with no failures, else 1.
pub fn gate_exit(summary: &GateSummary) -> ExitCode {
    if summary.failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Parses a `u64` written in decimal or as `0x`-hex (seeds, bases).
///
/// # Errors
/// A message naming the text.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?} is not a u64: {e}"))
}

/// The parsed arguments of a `clap::Args` type, from the matches its
/// `augment_args` defined.
///
/// # Panics
/// If `m` does not come from `T::augment_args` (a registry error).
pub fn args<T: clap::FromArgMatches>(m: &clap::ArgMatches) -> T {
    T::from_arg_matches(m).unwrap_or_else(|e| panic!("a kind's arguments: {e}"))
}

/// Why `kind`'s engine could not be made, printed: a kernel source that
/// does not compile or load (`source_fault`) is a failing gate row, exit 1,
/// with its rerun line naming the kind's gate and environment
/// ([`crate::source_fault_report`]); a machine that cannot run kernels
/// prints the message and exits 2.
pub fn engine_failure(kind: &Kind, source_fault: bool, msg: &str) -> ExitCode {
    if source_fault {
        print!("{}", crate::source_fault_report(kind, msg));
        ExitCode::from(1)
    } else {
        eprintln!("kernel-oracle: cannot run the CUDA kernels: {msg}");
        ExitCode::from(2)
    }
}
