//! The catch-rate score: `kernel-oracle score [KIND]` runs every planted
//! bug of a kind (of every kind without one) through its gate and through
//! its fuzzer, each with a time budget, and prints what caught it and how
//! fast; it exits 1 when any bug survives either, so the project measures
//! its own detection instead of asserting it.
//!
//! Every run is a child process of this binary (`check KIND`, `fuzz KIND`)
//! or a cargo-fuzz target beside it, with the kind's candidate variable
//! naming the planted bug's source (engines are per process, chosen by the
//! environment). The fuzzer is the libFuzzer binary `fuzz_<target>` when it
//! sits next to `kernel-oracle` (as in the GPU bundle), else
//! `kernel-oracle fuzz KIND`: the same generator, runner and judge in a
//! loop over bytes from splitmix64 with a fixed seed. The table says which.
//!
//! With `--sanitize`, a bug its gate or its fuzzer missed also runs the
//! kind's sanitizer cases (`Kind::sanitize_cases`, the runs of `gpu-check
//! sanitize`) under compute-sanitizer's memcheck, racecheck, synccheck and
//! initcheck: a bug whose values come out right (a race the schedule hides,
//! a read past an input that lands on zeros, a barrier dropped) is caught
//! when a tool reports an error, and survives when every tool ran every
//! case clean (or a case failed on its values: a check the gate lacks). The
//! unmutated kernels of each kind run first and must be clean, so a report
//! is the bug's; the runs go one at a time.

use crate::kind::{self, GateSummary, Kind, Plant};
use crate::rng::Rng;
use clap::{Arg, ArgAction, ArgMatches, Command};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The prefix of the line `check KIND --score-line` prints last:
/// `score-line: FAILURES ROWS` (`ROWS` is `-` where the gate does not
/// count rows).
pub const SUMMARY_PREFIX: &str = "score-line:";

/// The prefix of the line `fuzz KIND` prints last: `fuzz-result: caught
/// EXECS SECONDS` or `fuzz-result: survived EXECS SECONDS`.
pub const FUZZ_PREFIX: &str = "fuzz-result:";

/// The default time budget of each fuzzer run, seconds.
pub const DEFAULT_SECS: u64 = 60;

/// The directory under the logs where the gates share their oracle
/// answers ([`crate::refcache`]): the planted bugs of a kind run the same
/// battery, so each row's answer is computed once per score. Emptied when
/// a score starts.
pub const REFERENCE_CACHE_DIR: &str = "reference-cache";

/// Where `score --sanitize` finds compute-sanitizer by default (the CUDA
/// toolkit's).
pub const DEFAULT_SANITIZER: &str = "/usr/local/cuda/bin/compute-sanitizer";

/// The compute-sanitizer tools `score --sanitize` runs, in order (the
/// CUDA Compute Sanitizer manual, "Compute Sanitizer Tools"): accesses out
/// of bounds, shared-memory hazards between threads, barriers misused,
/// device memory read before it was written.
pub const SANITIZER_TOOLS: [&str; 4] = ["memcheck", "racecheck", "synccheck", "initcheck"];

/// The seed of the in-process fuzz loop's byte source (splitmix64).
pub const DEFAULT_SEED: u64 = 1;

/// `summary` as the line [`SUMMARY_PREFIX`] names.
pub fn summary_line(summary: &GateSummary) -> String {
    match summary.rows {
        Some(r) => format!("{SUMMARY_PREFIX} {} {r}", summary.failures),
        None => format!("{SUMMARY_PREFIX} {} -", summary.failures),
    }
}

/// The arguments of `kernel-oracle fuzz KIND`.
pub fn fuzz_args() -> Vec<Arg> {
    vec![
        Arg::new("secs")
            .long("secs")
            .value_name("SECONDS")
            .default_value("60")
            .value_parser(clap::value_parser!(u64).range(1..))
            .help("The time budget, seconds (after the engine is open; at least 1)."),
        Arg::new("seed")
            .long("seed")
            .value_name("SEED")
            .default_value("1")
            .value_parser(kind::parse_u64)
            .help("The splitmix64 seed of the input bytes, decimal or 0x-hex."),
        Arg::new("max-len")
            .long("max-len")
            .value_name("BYTES")
            .default_value("64")
            .value_parser(clap::value_parser!(usize))
            .help("Inputs are 0..=BYTES long (uniform), as a fuzzer's short inputs; at least the bytes that select the kind's paths (3 to 5)."),
    ]
}

/// The in-process fuzz loop's inputs: execution `i`'s bytes, from
/// splitmix64 seeded with `seed`: a length uniform in `0..=max_len`, then
/// that many bytes.
pub fn fuzz_input(rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let len = rng.below(max_len + 1);
    (0..len).map(|_| rng.u8()).collect()
}

/// `kernel-oracle fuzz KIND`: opens the kind's engine (exit 2 if it
/// cannot), then runs its fuzz target's body on [`fuzz_input`]s until one
/// panics (a divergence: its report is on standard error; exit 1) or the
/// budget is spent (exit 0). The last line is [`FUZZ_PREFIX`].
pub fn fuzz_command(k: &Kind, m: &ArgMatches) -> ExitCode {
    let secs = *m.get_one::<u64>("secs").expect("defaulted");
    let seed = *m.get_one::<u64>("seed").expect("defaulted");
    let max_len = *m.get_one::<usize>("max-len").expect("defaulted");
    if max_len < k.selector_bytes {
        eprintln!(
            "kernel-oracle: --max-len {max_len} is below {}'s {} selector bytes: inputs that short \
             never reach some of its paths; give at least {}",
            k.name, k.selector_bytes, k.selector_bytes
        );
        return ExitCode::from(2);
    }
    match (k.runner)() {
        Ok(desc) => println!("kernel source: {desc}"),
        Err(e) => {
            eprintln!("kernel-oracle: cannot run {}: {e}", k.name);
            return ExitCode::from(2);
        }
    }
    // A divergence is the fuzz body's panic: its report is the message, so
    // print that alone, with no "thread panicked" line or backtrace (the
    // place it was raised only when it is not a divergence report).
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("(a panic without a message)");
        eprintln!("{msg}");
        if !msg.contains("DIVERGENCE") {
            if let Some(at) = info.location() {
                eprintln!("  (raised at {at})");
            }
        }
    }));
    let mut rng = Rng(seed);
    let t0 = Instant::now();
    let mut execs: u64 = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        let input = fuzz_input(&mut rng, max_len);
        execs += 1;
        let f = k.fuzz_one;
        if std::panic::catch_unwind(|| f(&input)).is_err() {
            println!(
                "DIVERGENCE at execution {execs} (input {} bytes: {}), {:.1} s",
                input.len(),
                hex(&input),
                t0.elapsed().as_secs_f64()
            );
            println!(
                "{FUZZ_PREFIX} caught {execs} {:.1}",
                t0.elapsed().as_secs_f64()
            );
            return ExitCode::from(1);
        }
    }
    println!(
        "{FUZZ_PREFIX} survived {execs} {:.1}",
        t0.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The `score` subcommand, with `kinds` as the choices of its KIND.
pub fn command(kinds: impl Iterator<Item = &'static str>) -> Command {
    let kinds: Vec<&'static str> = kinds.collect();
    Command::new("score")
        .about("Run every planted bug of KIND (of every kind without one) through its gate and its fuzzer, print what caught each and how fast; exit 1 if one survives.")
        .arg(
            Arg::new("kind")
                .value_name("KIND")
                .value_parser(clap::builder::PossibleValuesParser::new(kinds)),
        )
        .arg(
            Arg::new("secs")
                .long("secs")
                .value_name("SECONDS")
                .default_value("60")
                .value_parser(clap::value_parser!(u64).range(1..))
                .help(
                    "Each fuzzer's time budget, seconds, at least 1 (libFuzzer reads \
                     -max_total_time=0 as no limit).",
                ),
        )
        .arg(
            Arg::new("gate-secs")
                .long("gate-secs")
                .value_name("SECONDS")
                .default_value("1800")
                .value_parser(clap::value_parser!(u64).range(1..))
                .help("A gate still running after this long is killed (at least 1): caught if it had failed a row by then, else SURVIVED (a slow gate is not a catch)."),
        )
        .arg(
            Arg::new("jobs")
                .short('j')
                .long("jobs")
                .value_name("N")
                .value_parser(clap::value_parser!(u64).range(1..=256))
                .help("Planted bugs run at once, 1 to 256 [default: the CPUs, at most 8]."),
        )
        .arg(
            Arg::new("bug")
                .long("bug")
                .value_name("NAME")
                .action(ArgAction::Append)
                .help("Only this planted bug (repeatable); `--bug none` runs only the --also files."),
        )
        .arg(
            Arg::new("also")
                .long("also")
                .value_name("FILE")
                .action(ArgAction::Append)
                .value_parser(clap::value_parser!(PathBuf))
                .requires("kind")
                .help("Score this candidate source too, named by its file stem (repeatable; needs KIND). An unchanged copy of the builtin must survive: the score can fail."),
        )
        .arg(
            Arg::new("no-fuzz")
                .long("no-fuzz")
                .action(ArgAction::SetTrue)
                .help("Gates only."),
        )
        .arg(
            Arg::new("sanitize")
                .long("sanitize")
                .action(ArgAction::SetTrue)
                .help("A bug its gate or its fuzzer missed runs the kind's sanitizer cases under compute-sanitizer (memcheck, racecheck, synccheck, initcheck): any error it reports catches the bug (a race, an access out of bounds, a read of memory never written, where the values came out right). The unmutated kernels run first and must be clean (else exit 2)."),
        )
        .arg(
            Arg::new("sanitizer")
                .requires("sanitize")
                .long("sanitizer")
                .value_name("PATH")
                .default_value(DEFAULT_SANITIZER)
                .value_parser(clap::value_parser!(PathBuf))
                .help("The compute-sanitizer binary --sanitize runs."),
        )
        .arg(
            Arg::new("sanitize-secs")
                .requires("sanitize")
                .long("sanitize-secs")
                .value_name("SECONDS")
                .default_value("120")
                .value_parser(clap::value_parser!(u64).range(1..))
                .help("A sanitizer run still going after this long is killed, and is not a catch."),
        )
        .arg(
            Arg::new("logs")
                .long("logs")
                .value_name("DIR")
                .value_parser(clap::value_parser!(PathBuf))
                .help("Where the candidates and every run's log go [default: a new directory under the temporary directory]."),
        )
}

/// One planted bug to score.
struct Entry {
    kind: &'static Kind,
    name: String,
    /// The environment that plants it.
    env: Vec<(String, String)>,
    /// Why it cannot be planted (an anchor that moved).
    error: Option<String>,
}

/// What one run (a gate or a fuzzer) made of a planted bug.
#[derive(Clone, Debug)]
enum Verdict {
    /// The gate failed rows: `(failed, rows)`.
    GateCaught(usize, Option<usize>),
    /// The fuzzer diverged after `(executions, seconds)`.
    FuzzCaught(Option<u64>, f64),
    /// The run ended in another way that is not a pass (a crash, an exit
    /// by a signal): the bug did not go unnoticed. The text says how.
    Other(String),
    /// The gate was killed at the limit after `secs` seconds, with
    /// `failed` rows failed before it: caught when `failed > 0`; with
    /// none, the bug is not shown caught (a slow gate is not a catch).
    GateKilled { failed: usize, secs: f64 },
    /// The fuzzer was killed at the limit after `secs` seconds without a
    /// reproduction: not a catch (a stuck harness is not a divergence).
    FuzzKilled { secs: f64 },
    /// The gate passed every row (`rows`, where it counts them).
    GateSurvived(Option<usize>),
    /// The fuzzer noticed nothing: `(executions, seconds)`.
    Survived(Option<u64>, f64),
    /// The run could not start or the kind cannot run here (exit 2).
    CannotRun(String),
    /// Not run (`--no-fuzz`, or the gate could not run).
    Skipped,
}

impl Verdict {
    fn survived(&self) -> bool {
        matches!(
            self,
            Verdict::Survived(..)
                | Verdict::GateSurvived(_)
                | Verdict::GateKilled { failed: 0, .. }
                | Verdict::FuzzKilled { .. }
        )
    }

    fn cannot_run(&self) -> bool {
        matches!(self, Verdict::CannotRun(_))
    }

    fn cell(&self) -> String {
        let execs = |e: &Option<u64>| e.map_or("? execs".to_string(), |e| format!("{e} execs"));
        match self {
            Verdict::GateCaught(f, Some(r)) => format!("{f}/{r} rows failed"),
            Verdict::GateCaught(f, None) => format!("{f} rows failed"),
            Verdict::FuzzCaught(e, s) => format!("{}, {s:.1} s", execs(e)),
            Verdict::Other(t) => t.clone(),
            Verdict::GateKilled { failed: 0, secs } => {
                format!("SURVIVED (killed after {secs:.0} s, no row failed)")
            }
            Verdict::GateKilled { failed, secs } => {
                format!("{failed} rows failed (killed after {secs:.0} s)")
            }
            Verdict::FuzzKilled { secs } => {
                format!("SURVIVED (killed after {secs:.0} s, no reproduction)")
            }
            Verdict::GateSurvived(Some(r)) => format!("SURVIVED (0/{r} rows failed)"),
            Verdict::GateSurvived(None) => "SURVIVED (no row failed)".to_string(),
            Verdict::Survived(e, s) => format!("SURVIVED ({}, {s:.0} s)", execs(e)),
            Verdict::CannotRun(t) => format!("cannot run: {t}"),
            Verdict::Skipped => "-".to_string(),
        }
    }
}

/// What compute-sanitizer made of a planted bug its gate or its fuzzer
/// missed (`score --sanitize`).
#[derive(Clone, Debug)]
enum Sanitized {
    /// `tool` reported `errors` on the kind's sanitizer case `case`
    /// (1-based): caught.
    Found {
        tool: &'static str,
        errors: u64,
        case: usize,
    },
    /// The case itself failed on its values under the tool (exit 1): not a
    /// sanitizer finding but a value check the gate's battery lacks, so
    /// the bug still counts as having survived the gate.
    CaseFailed { tool: &'static str, case: usize },
    /// Every tool ran every case to its summary and reported nothing.
    Clean { runs: usize },
    /// A run was killed at the limit, or ended without a summary, before
    /// any report: not a catch. The text says which.
    Incomplete(String),
    /// A run could not start, or the case could not run here (exit 2: no
    /// device, a compile error): neither caught nor survived.
    CannotRun(String),
    /// Not run (no `--sanitize`, the gate and the fuzzer caught it, or the
    /// kind has no sanitizer case).
    Skipped,
}

impl Sanitized {
    fn caught(&self) -> bool {
        matches!(self, Sanitized::Found { .. })
    }

    fn cannot_run(&self) -> bool {
        matches!(self, Sanitized::CannotRun(_))
    }

    fn cell(&self) -> String {
        match self {
            Sanitized::Found { tool, errors, case } => format!("{tool}: {errors} (case {case})"),
            Sanitized::CaseFailed { tool, case } => {
                format!("SURVIVED (case {case} failed by value under {tool}: the gate lacks it)")
            }
            Sanitized::Clean { runs } => format!("SURVIVED (0 in {runs} runs)"),
            Sanitized::Incomplete(t) => format!("SURVIVED ({t})"),
            Sanitized::CannotRun(t) => format!("cannot run: {t}"),
            Sanitized::Skipped => "-".to_string(),
        }
    }
}

/// The error count of a compute-sanitizer log: memcheck, synccheck and
/// initcheck print `ERROR SUMMARY: N errors`, racecheck `RACECHECK
/// SUMMARY: N hazards displayed (E errors, W warnings)` (hazards, warnings
/// included, as `gpu-check sanitize` counts them); the last such line.
/// Where there is none (the run was cut short), the reports it printed
/// (lines `========= Invalid ...`, `... Race reported ...`, `Barrier
/// error ...`, `Uninitialized ...`), or `None` if it printed none.
fn sanitizer_errors(log: &str) -> Option<u64> {
    let summary = log.lines().rev().find_map(|l| {
        let (_, rest) = l
            .split_once("ERROR SUMMARY:")
            .or_else(|| l.split_once("RACECHECK SUMMARY:"))?;
        rest.split_whitespace().next()?.parse().ok()
    });
    summary.or_else(|| {
        let reports = log
            .lines()
            .filter(|l| {
                let l = l.trim_start_matches("=========").trim_start();
                [
                    "Invalid ",
                    "Race reported",
                    "Barrier error",
                    "Uninitialized ",
                ]
                .iter()
                .any(|p| l.starts_with(p) || l.starts_with(&format!("Error: {p}")))
            })
            .count() as u64;
        (reports > 0).then_some(reports)
    })
}

/// Runs the kind's sanitizer cases under each of [`SANITIZER_TOOLS`] with
/// `e`'s environment, stopping at the first report. Each run has a launch
/// deadline of `limit` (a hung launch ends the run as an error of its
/// own), no reports of CUDA API errors (an allocation refused while other
/// runs share the GPU is not the kernel's bug), and inputs without guard
/// bands (each ends where its allocation does, so memcheck sees a read
/// past it); it is killed with its process group at `limit`.
fn sanitize(exe: &Path, e: &Entry, logs: &Path, sanitizer: &Path, limit: Duration) -> Sanitized {
    if e.kind.sanitize_cases.is_empty() {
        return Sanitized::Skipped;
    }
    let mut runs = 0;
    for tool in SANITIZER_TOOLS {
        for (i, case) in e.kind.sanitize_cases.iter().enumerate() {
            let log = logs.join(format!("{}-{}.{tool}-{}.log", e.kind.short, e.name, i + 1));
            let mut cmd = std::process::Command::new(sanitizer);
            cmd.args(["--tool", tool, "--error-exitcode", "99"])
                .args(["--print-limit", "20", "--report-api-errors", "no"])
                .arg(exe)
                .args(case.split_whitespace())
                .env(
                    device::cuda::ENV_LAUNCH_TIMEOUT,
                    limit.as_secs().to_string(),
                )
                .env(device::cuda::ENV_INPUT_BANDS, "off");
            cmd.envs(e.env.iter().map(|(k, v)| (k, v)));
            #[cfg(unix)]
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            let (code, killed, secs) = match run_logged(cmd, &log, limit) {
                Ok(r) => r,
                Err(err) => return Sanitized::CannotRun(format!("{}: {err}", sanitizer.display())),
            };
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            runs += 1;
            let case = i + 1;
            match (sanitizer_errors(&text), code) {
                (Some(errors), _) if errors > 0 => return Sanitized::Found { tool, errors, case },
                (_, Some(1)) => return Sanitized::CaseFailed { tool, case },
                (_, Some(2)) => {
                    return Sanitized::CannotRun(format!(
                        "{tool} case {case}: {}",
                        last_words(&text)
                    ))
                }
                (Some(_), Some(0)) => {}
                _ if killed => {
                    return Sanitized::Incomplete(format!(
                        "{tool} case {case} killed after {secs:.0} s"
                    ))
                }
                _ => {
                    return Sanitized::Incomplete(format!(
                        "{tool} case {case}: {}",
                        last_words(&text)
                    ))
                }
            }
        }
    }
    Sanitized::Clean { runs }
}

/// Runs `cmd` with its output to `log`, killing it after `limit`; its exit
/// code (`None`: killed or by a signal), and the seconds it ran.
fn run_logged(
    mut cmd: std::process::Command,
    log: &Path,
    limit: Duration,
) -> std::io::Result<(Option<i32>, bool, f64)> {
    let out = std::fs::File::create(log)?;
    let err = out.try_clone()?;
    let t0 = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(out).stderr(err).spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status.code(), false, t0.elapsed().as_secs_f64()));
        }
        if t0.elapsed() > limit {
            // A child in its own process group (a sanitizer and the run it
            // started) goes with the whole group.
            #[cfg(unix)]
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            return Ok((None, true, t0.elapsed().as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last line of `text` that starts with `prefix`, after it.
fn last_line_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(prefix))
        .map(str::trim)
}

/// The last line of `text` that is not empty (for a message).
fn last_words(text: &str) -> String {
    let l = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    l.trim()
        .trim_start_matches("kernel-oracle: ")
        .chars()
        .take(100)
        .collect()
}

fn gate(exe: &Path, e: &Entry, logs: &Path, limit: Duration) -> Verdict {
    let log = logs.join(format!("{}-{}.gate.log", e.kind.short, e.name));
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["check", e.kind.name, "--score-line"]);
    cmd.env(
        crate::refcache::ENV_REFERENCE_CACHE,
        logs.join(REFERENCE_CACHE_DIR),
    );
    cmd.envs(e.env.iter().map(|(k, v)| (k, v)));
    let (code, killed, secs) = match run_logged(cmd, &log, limit) {
        Ok(r) => r,
        Err(err) => return Verdict::CannotRun(format!("{}: {err}", exe.display())),
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if killed {
        return Verdict::GateKilled {
            failed: failing_rows(&text),
            secs,
        };
    }
    let summary = last_line_after(&text, SUMMARY_PREFIX).and_then(|s| {
        let mut w = s.split_whitespace();
        let f: usize = w.next()?.parse().ok()?;
        let r = w.next()?.parse::<usize>().ok();
        Some((f, r))
    });
    match (code, summary) {
        (Some(0), Some((0, rows))) => Verdict::GateSurvived(rows),
        (Some(1), Some((f, rows))) if f > 0 => Verdict::GateCaught(f, rows),
        (Some(2), _) => Verdict::CannotRun(last_words(&text)),
        (Some(c), _) => Verdict::Other(format!("exit {c}: {}", last_words(&text))),
        (None, _) => Verdict::Other(format!("killed by a signal: {}", last_words(&text))),
    }
}

/// The failing rows a gate printed (lines with a `FAIL` verdict, the
/// closing `===` line apart): what a gate killed at the limit had found.
fn failing_rows(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            !l.starts_with("===")
                && l.split_whitespace()
                    .any(|w| w.trim_end_matches(':') == "FAIL")
        })
        .count()
}

/// The libFuzzer binary of `k` beside `exe`, if there is one.
fn libfuzzer_binary(exe: &Path, k: &Kind) -> Option<PathBuf> {
    let p = exe.with_file_name(format!("fuzz_{}", k.fuzz_target));
    p.is_file().then_some(p)
}

/// How the fuzzer of `k` runs next to `exe`, for the table.
fn fuzzer_kind(exe: &Path, k: &Kind, seed: u64) -> String {
    match libfuzzer_binary(exe, k) {
        Some(_) => format!("libFuzzer fuzz_{} -seed={seed}", k.fuzz_target),
        None => format!("in-process, splitmix64 seed {seed}"),
    }
}

fn fuzz(exe: &Path, e: &Entry, logs: &Path, secs: u64, seed: u64) -> Verdict {
    let stem = format!("{}-{}", e.kind.short, e.name);
    let log = logs.join(format!("{stem}.fuzz.log"));
    let limit = Duration::from_secs(secs * 2 + 300);
    let libfuzzer = libfuzzer_binary(exe, e.kind);
    let mut cmd = match &libfuzzer {
        Some(bin) => {
            let corpus = logs.join(format!("{stem}.corpus"));
            let artifacts = logs.join(format!("{stem}.artifacts"));
            for d in [&corpus, &artifacts] {
                if let Err(err) = std::fs::create_dir_all(d) {
                    return Verdict::CannotRun(format!("{}: {err}", d.display()));
                }
            }
            let mut c = std::process::Command::new(bin);
            c.arg(format!("-max_total_time={secs}"))
                .arg(format!("-seed={seed}"))
                .arg("-print_final_stats=1")
                .arg(format!("-artifact_prefix={}/", artifacts.display()))
                .arg(corpus);
            c
        }
        None => {
            let mut c = std::process::Command::new(exe);
            c.args(["fuzz", e.kind.name, "--secs", &secs.to_string()])
                .args(["--seed", &seed.to_string()]);
            c
        }
    };
    cmd.envs(e.env.iter().map(|(k, v)| (k, v)));
    let (code, killed, wall) = match run_logged(cmd, &log, limit) {
        Ok(r) => r,
        Err(err) => return Verdict::CannotRun(format!("{err}")),
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if killed {
        // A divergence found before the kill printed its reproduction.
        return if text.contains("rerun:") {
            Verdict::FuzzCaught(None, wall)
        } else {
            Verdict::FuzzKilled { secs: wall }
        };
    }
    if libfuzzer.is_some() {
        // libFuzzer prints its final stats at the end of the budget and
        // after a crash; else the last status line (`#N ...`).
        let execs = last_line_after(&text, "stat::number_of_executed_units:")
            .and_then(|s| s.parse().ok())
            .or_else(|| {
                text.lines()
                    .rev()
                    .find_map(|l| l.strip_prefix('#')?.split_whitespace().next()?.parse().ok())
            });
        // A divergence prints its reproduction (every kind's failure has a
        // rerun line); another crash (out of memory, libFuzzer's own
        // timeout) is shown as what it was.
        return match code {
            Some(0) => Verdict::Survived(execs, wall),
            _ if text.contains("rerun:") => Verdict::FuzzCaught(execs, wall),
            Some(c) => Verdict::Other(format!("exit {c}, no reproduction: {}", last_words(&text))),
            None => Verdict::Other(format!("killed by a signal: {}", last_words(&text))),
        };
    }
    let result = last_line_after(&text, FUZZ_PREFIX).and_then(|s| {
        let w: Vec<&str> = s.split_whitespace().collect();
        Some((
            w.first()?.to_string(),
            w.get(1)?.parse().ok()?,
            w.get(2)?.parse().ok()?,
        ))
    });
    match (code, result) {
        (Some(0), Some((ref r, n, s))) if r == "survived" => Verdict::Survived(Some(n), s),
        (Some(1), Some((ref r, n, s))) if r == "caught" => Verdict::FuzzCaught(Some(n), s),
        (Some(2), _) => Verdict::CannotRun(last_words(&text)),
        (Some(c), _) => Verdict::Other(format!("exit {c}: {}", last_words(&text))),
        (None, _) => Verdict::Other(format!("killed by a signal: {}", last_words(&text))),
    }
}

/// The planted bugs `score` runs: every kind's (or `only`'s), filtered by
/// `bugs`, their candidates written under `logs`, then the `also` files.
/// Why planted bug `name` of kind `k` cannot be caught on this machine, if
/// so: a bug planted only in the WGSL GEMM's subgroup form
/// (`mul_mat::mutants::Mutant::subgroup_only`) where the adapter has no
/// subgroup form (or no adapter). Such a bug is scored "cannot run", not
/// a survivor.
fn unreachable_here(k: &Kind, name: &str) -> Option<String> {
    if k.name != "mul-mat" {
        return None;
    }
    let m = crate::mul_mat::mutants::MUTANTS
        .iter()
        .find(|m| m.name == name)?;
    if !m.subgroup_only {
        return None;
    }
    match crate::mul_mat::engine() {
        Ok(e) => e
            .subgroup_form()
            .err()
            .map(|why| format!("planted in the subgroup form, which this adapter lacks: {why}")),
        Err(msg) => Some(msg),
    }
}

fn entries(
    only: Option<&'static Kind>,
    bugs: &[String],
    also: &[PathBuf],
    logs: &Path,
) -> Result<Vec<Entry>, String> {
    let mut v = Vec::new();
    for k in kind::KINDS.iter().copied() {
        if only.is_some_and(|o| o.name != k.name) {
            continue;
        }
        for p in (k.planted)() {
            if !bugs.is_empty() && !bugs.iter().any(|b| b == p.name) {
                continue;
            }
            let (env, error) = match (unreachable_here(k, p.name), p.plant) {
                (Some(why), _) => (Vec::new(), Some(why)),
                (None, Plant::Env { var, value }) => {
                    (vec![(var.to_string(), value.to_string())], None)
                }
                (None, Plant::Source(Err(e))) => (Vec::new(), Some(e)),
                (None, Plant::Source(Ok(text))) => {
                    let path = logs.join(format!("{}-{}.{}", k.short, p.name, k.ext));
                    std::fs::write(&path, text)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    (vec![(k.env.to_string(), path.display().to_string())], None)
                }
            };
            v.push(Entry {
                kind: k,
                name: p.name.to_string(),
                env,
                error,
            });
        }
    }
    if let Some(k) = only {
        for f in also {
            let path = std::fs::canonicalize(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let name = path
                .file_stem()
                .map_or("candidate".into(), |s| s.to_string_lossy().into_owned());
            v.push(Entry {
                kind: k,
                name,
                env: vec![(k.env.to_string(), path.display().to_string())],
                error: None,
            });
        }
    }
    Ok(v)
}

/// `kernel-oracle score`: see the module doc. Prints one line per planted
/// bug as it finishes (standard error), then the table and a verdict
/// line; exit 1 if a bug survived its gate or its fuzzer, else 2 if one
/// could not run, else 0.
pub fn run_command(m: &ArgMatches) -> ExitCode {
    let only = m
        .get_one::<String>("kind")
        .map(|n| kind::by_name(n).expect("clap offers only registered kinds"));
    let secs = *m.get_one::<u64>("secs").expect("defaulted");
    let gate_limit = Duration::from_secs(*m.get_one::<u64>("gate-secs").expect("defaulted"));
    let bugs: Vec<String> = m.get_many("bug").into_iter().flatten().cloned().collect();
    let also: Vec<PathBuf> = m.get_many("also").into_iter().flatten().cloned().collect();
    let no_fuzz = m.get_flag("no-fuzz");
    let sanitizer = m.get_flag("sanitize").then(|| {
        m.get_one::<PathBuf>("sanitizer")
            .expect("defaulted")
            .clone()
    });
    let sanitize_limit =
        Duration::from_secs(*m.get_one::<u64>("sanitize-secs").expect("defaulted"));
    if let Some(cs) = &sanitizer {
        if !cs.is_file() {
            eprintln!(
                "kernel-oracle: --sanitize: no compute-sanitizer at {} (--sanitizer PATH)",
                cs.display()
            );
            return ExitCode::from(2);
        }
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kernel-oracle: cannot find this binary to run the gates: {e}");
            return ExitCode::from(2);
        }
    };
    let logs = m.get_one::<PathBuf>("logs").cloned().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("kernel-oracle-score-{}", std::process::id()))
    });
    // A fresh reference cache: its answers are this binary's.
    let _ = std::fs::remove_dir_all(logs.join(REFERENCE_CACHE_DIR));
    if let Err(e) = std::fs::create_dir_all(&logs) {
        eprintln!("kernel-oracle: cannot create {}: {e}", logs.display());
        return ExitCode::from(2);
    }
    let entries = match entries(only, &bugs, &also, &logs) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    if entries.is_empty() {
        if bugs.iter().any(|b| b == "none") && also.is_empty() {
            eprintln!("kernel-oracle: --bug none scores only the --also files, and none was given");
        } else {
            eprintln!("kernel-oracle: no planted bug matches --bug {bugs:?}");
        }
        return ExitCode::from(2);
    }
    let jobs = m
        .get_one::<u64>("jobs")
        .map(|&j| j as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(8)))
        .clamp(1, entries.len());
    println!(
        "score: {} planted bugs, {jobs} at a time; {}; logs and candidates in {}",
        entries.len(),
        match (no_fuzz, &sanitizer) {
            (true, None) => "gates only".to_string(),
            (true, Some(_)) => "gates, then compute-sanitizer on what they miss".to_string(),
            (false, None) => format!("fuzzers {secs} s each"),
            (false, Some(_)) =>
                format!("fuzzers {secs} s each, then compute-sanitizer on what either misses"),
        },
        logs.display()
    );
    // The unmutated kernels of every kind scored must run clean under
    // every tool, or a count would not be the planted bug's.
    if let Some(cs) = &sanitizer {
        let mut seen: Vec<&str> = Vec::new();
        for e in &entries {
            if seen.contains(&e.kind.name) || e.kind.sanitize_cases.is_empty() {
                continue;
            }
            seen.push(e.kind.name);
            let builtin = Entry {
                kind: e.kind,
                name: "builtin".into(),
                env: Vec::new(),
                error: None,
            };
            match sanitize(&exe, &builtin, &logs, cs, sanitize_limit) {
                Sanitized::Clean { runs } => println!(
                    "score: {} builtin: compute-sanitizer clean in {runs} runs (the baseline)",
                    e.kind.name
                ),
                other => {
                    eprintln!(
                        "kernel-oracle: --sanitize: the unmutated {} kernels do not run clean under compute-sanitizer ({}); logs in {}",
                        e.kind.name,
                        other.cell(),
                        logs.display()
                    );
                    return ExitCode::from(2);
                }
            }
        }
    }
    // One sanitizer run at a time: many on one GPU would slow each past
    // its limit.
    let one_sanitizer = Mutex::new(());
    let results: Mutex<Vec<Option<(Verdict, Verdict, Sanitized)>>> =
        Mutex::new(entries.iter().map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(e) = entries.get(i) else { break };
                let (g, f, z) = if let Some(err) = &e.error {
                    (
                        Verdict::CannotRun(err.clone()),
                        Verdict::Skipped,
                        Sanitized::Skipped,
                    )
                } else {
                    let g = gate(&exe, e, &logs, gate_limit);
                    let f = if no_fuzz || g.cannot_run() {
                        Verdict::Skipped
                    } else {
                        fuzz(&exe, e, &logs, secs, DEFAULT_SEED)
                    };
                    let missed =
                        (g.survived() || f.survived()) && !(g.cannot_run() || f.cannot_run());
                    let z = match &sanitizer {
                        Some(cs) if missed => {
                            let _one = one_sanitizer.lock().unwrap_or_else(|p| p.into_inner());
                            sanitize(&exe, e, &logs, cs, sanitize_limit)
                        }
                        _ => Sanitized::Skipped,
                    };
                    (g, f, z)
                };
                eprintln!(
                    "score: {} {}: gate {}; fuzzer {}; sanitizer {}",
                    e.kind.name,
                    e.name,
                    g.cell(),
                    f.cell(),
                    z.cell()
                );
                results.lock().expect("no panics under the lock")[i] = Some((g, f, z));
            });
        }
    });
    let results = results.into_inner().expect("no panics under the lock");
    let w = entries
        .iter()
        .map(|e| e.kind.name.len() + 1 + e.name.len())
        .max()
        .unwrap_or(0)
        .max(3);
    println!();
    println!(
        "{:<w$}  {:<30}  {:<34}  {:<30}  fuzzer run",
        "bug", "gate", "fuzzer", "sanitizer"
    );
    let (mut survived, mut cannot, mut by_sanitizer) = (0, 0, 0);
    for (e, r) in entries.iter().zip(&results) {
        let (g, f, z) = r.as_ref().expect("every entry ran");
        let missed = g.survived() || f.survived();
        survived += usize::from(missed && !z.caught());
        by_sanitizer += usize::from(missed && z.caught());
        cannot += usize::from(g.cannot_run() || f.cannot_run() || z.cannot_run());
        let how = if matches!(f, Verdict::Skipped) {
            "-".to_string()
        } else {
            fuzzer_kind(&exe, e.kind, DEFAULT_SEED)
        };
        println!(
            "{:<w$}  {:<30}  {:<34}  {:<30}  {how}",
            format!("{} {}", e.kind.name, e.name),
            g.cell(),
            f.cell(),
            z.cell()
        );
    }
    println!();
    if by_sanitizer > 0 {
        println!(
            "({by_sanitizer} of {} planted bugs missed by the values and caught by compute-sanitizer)",
            entries.len()
        );
    }
    if survived > 0 {
        println!(
            "=== score: {survived} of {} planted bugs SURVIVED ===",
            entries.len()
        );
        ExitCode::from(1)
    } else if cannot > 0 {
        println!(
            "=== score: {cannot} of {} planted bugs could not run here ===",
            entries.len()
        );
        ExitCode::from(2)
    } else {
        println!(
            "=== score: all {} planted bugs caught by their gate{}{} ===",
            entries.len(),
            if no_fuzz { "" } else { " and their fuzzer" },
            if by_sanitizer > 0 {
                ", or by compute-sanitizer"
            } else {
                ""
            }
        );
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate killed at the limit is caught only by the rows it had
    /// failed; with none, the bug is shown as surviving.
    #[test]
    fn a_killed_gate_is_caught_only_by_rows_it_failed() {
        let log = "shape arm ...  PASS\n\
                   272,136,40 EXACT ...  FAIL  declared: v2\n\
                   wgmma e4m3xe4m3 specials 16 3  FAIL: a device error\n\
                   === fp8-mmq-check 2 FAILURES ===\n";
        assert_eq!(failing_rows(log), 2);
        assert_eq!(failing_rows("a  PASS\nFAILED to parse\n"), 0);
        let caught = Verdict::GateKilled {
            failed: 2,
            secs: 9.0,
        };
        let slow = Verdict::GateKilled {
            failed: 0,
            secs: 9.0,
        };
        assert!(!caught.survived() && slow.survived());
        assert!(slow.cell().starts_with("SURVIVED"), "{}", slow.cell());
        let stuck = Verdict::FuzzKilled { secs: 420.0 };
        assert!(stuck.survived() && stuck.cell().starts_with("SURVIVED"));
    }

    /// The error counts of the four tools' summaries, as
    /// compute-sanitizer 2025 prints them; none where the run ended early.
    #[test]
    fn sanitizer_summaries_are_read() {
        let memcheck =
            "========= COMPUTE-SANITIZER\nPASS: 512 outputs\n========= ERROR SUMMARY: 0 errors\n";
        assert_eq!(sanitizer_errors(memcheck), Some(0));
        let found = "========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 25 errors\n";
        assert_eq!(sanitizer_errors(found), Some(25));
        let race = "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n";
        assert_eq!(sanitizer_errors(race), Some(3));
        // Cut short before its summary: the reports it printed.
        let cut = "========= COMPUTE-SANITIZER\n\
                   ========= Invalid __global__ read of size 4 bytes\n\
                   =========     at gdn_step+0x1a0\n\
                   ========= Error: Race reported between Write access and Read access\n";
        assert_eq!(sanitizer_errors(cut), Some(2));
        assert_eq!(
            sanitizer_errors("========= COMPUTE-SANITIZER\nkilled\n"),
            None
        );
    }

    /// `sanitize` through a stand-in for compute-sanitizer (a script that
    /// runs nothing and prints the summary its environment names): a count
    /// catches the bug at the first run that has one, a clean sweep runs
    /// every tool on every case, and a run without a summary or one the
    /// case failed is shown as what it was.
    #[cfg(unix)]
    #[test]
    fn sanitize_stops_at_the_first_finding() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ko-sanitize-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("compute-sanitizer");
        std::fs::write(
            &fake,
            "#!/bin/sh\n\
             # $2 is the tool; FAKE_TOOL and FAKE_OUT say which tool prints what.\n\
             if [ \"$2\" = \"$FAKE_TOOL\" ]; then printf '%b' \"$FAKE_OUT\"; exit $FAKE_RC; fi\n\
             echo '========= ERROR SUMMARY: 0 errors'; exit 0\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let k = &crate::tensor_core::cli::KIND;
        let entry = |tool: &str, out: &str, rc: &str| Entry {
            kind: k,
            name: "t".into(),
            env: vec![
                ("FAKE_TOOL".into(), tool.into()),
                ("FAKE_OUT".into(), out.into()),
                ("FAKE_RC".into(), rc.into()),
            ],
            error: None,
        };
        let exe = Path::new("/bin/true");
        let run = |e: &Entry| sanitize(exe, e, &dir, &fake, Duration::from_secs(30));
        let racy = run(&entry(
            "racecheck",
            "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\\n",
            "99",
        ));
        assert!(
            matches!(
                racy,
                Sanitized::Found {
                    tool: "racecheck",
                    errors: 2,
                    case: 1
                }
            ),
            "{racy:?}"
        );
        assert!(racy.caught());
        let clean = run(&entry("none", "", "0"));
        let runs = SANITIZER_TOOLS.len() * k.sanitize_cases.len();
        assert!(
            matches!(clean, Sanitized::Clean { runs: r } if r == runs),
            "{clean:?}"
        );
        assert!(!clean.caught() && clean.cell().starts_with("SURVIVED"));
        let failed = run(&entry(
            "synccheck",
            "FAIL\\n========= ERROR SUMMARY: 0 errors\\n",
            "1",
        ));
        assert!(
            matches!(
                failed,
                Sanitized::CaseFailed {
                    tool: "synccheck",
                    case: 1
                }
            ),
            "{failed:?}"
        );
        // A case that fails on its values is the gate's gap, not a catch.
        assert!(!failed.caught() && failed.cell().starts_with("SURVIVED"));
        let cut = run(&entry("initcheck", "no summary\\n", "3"));
        assert!(
            matches!(cut, Sanitized::Incomplete(_)) && !cut.caught(),
            "{cut:?}"
        );
        let no_device = run(&entry("memcheck", "kernel-oracle: no CUDA device\\n", "2"));
        assert!(
            no_device.cannot_run() && !no_device.caught(),
            "{no_device:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
