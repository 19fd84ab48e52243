//! `kernel-oracle`: the gates, single-case reproductions, planted bugs and
//! the catch-rate score, for every kind of `kernel_oracle::kind::KINDS`.
//!
//! ```text
//! kernel-oracle check fp8-mmq [IN_F OUT_F M]     the seed's battery, or one shape
//! kernel-oracle case fp8-mmq --in-f .. --out-f .. --m .. --arm exact|fold|rand --seed 0x..
//! kernel-oracle check moe-tables                 the MoE verify-rows tables gate
//! kernel-oracle case moe-tables --n-expert .. --n-pairs .. --bases a,b,c --strides a,b,c --seed 0x..
//! kernel-oracle check gdn                        the Gated DeltaNet gate (seed 003)
//! kernel-oracle case gdn --num-k .. --num-v .. --d-conv .. --t .. --seed 0x.. [knobs]
//! kernel-oracle check tensor-core                the FP8 MMA against its bit-accurate model
//! kernel-oracle case tensor-core --a e4m3 --b e5m2 --class .. --seed 0x..
//! kernel-oracle check mul-mat [--full]           the WGSL GEMM gate (wgpu)
//! kernel-oracle case mul-mat --dtype q4_K --m .. --n .. --k .. --arm exact|random|bal --seed 0x.. [--wg 16,16,16]
//! kernel-oracle mutant KIND [NAME -o FILE]       planted-bug candidate kernels (and peers' switches)
//! kernel-oracle fuzz KIND [--secs 60]            the kind's fuzz loop in this process (splitmix64 bytes)
//! kernel-oracle score [KIND] [--secs 60] [--sanitize]  every planted bug through its gate and its fuzzer
//!                                                (and compute-sanitizer, on what they miss)
//! kernel-oracle sanitize-cases KIND             the kind's compute-sanitizer runs, one a line
//! kernel-oracle kinds                            the kind registry, tab-separated, for scripts
//! ```
//! Every reproduction a failure prints (`rerun: ...`, and `mutant`'s
//! `run: ...`) names this program as `kernel_oracle::paths::rerun_prefix`
//! prints it: `cargo run --release --` at the source tree's root, the
//! tree's runner and this binary elsewhere in the tree, this binary (by
//! its own path, whatever its name) outside it, `$KERNEL_ORACLE_RERUN`
//! when set.
//!
//! Exit status: 0 all green, 1 any failure (for `score`: a planted bug
//! survived), 2 cannot run (no CUDA device, no wgpu adapter, bad
//! arguments).
//!
//! `KERNEL_ORACLE_FP8_MMQ=cublaslt` runs the FP8 commands' GEMM on
//! cuBLASLt (`device::cuda::CublasLtFp8`) instead of the kernel source's
//! MMQ; `cublaslt-unpadded` is that peer with a planted bug; `builtin` (or
//! unset) is the default; any other value exits 2.

use clap::{Arg, ArgAction, ArgMatches, Command};
use kernel_oracle::kind::{self, Kind, Plant, KINDS};
use kernel_oracle::score;
use std::process::ExitCode;

/// The hidden `check` flag `score` runs gates with: the gate's summary as
/// one last line, [`score::SUMMARY_PREFIX`] `FAILURES ROWS`.
const SCORE_LINE: &str = "score-line";

fn cli() -> Command {
    let mut check = Command::new("check")
        .about("Run a gate (a deterministic battery) and print its table.")
        .subcommand_required(true);
    let mut case = Command::new("case")
        .about("Run one case (the reproduction printed by a fuzzer or a gate).")
        .subcommand_required(true);
    let mut mutant = Command::new("mutant")
        .about("Write a planted-bug candidate kernel (the builtin source with one bug), to show that the gate and the fuzzer catch it.")
        .subcommand_required(true);
    let mut fuzz = Command::new("fuzz")
        .about("Fuzz a kind in this process: its generator, runner and judge on splitmix64 bytes, until a divergence or the time budget.")
        .subcommand_required(true);
    for k in KINDS {
        // The help lines are the registry's, not the argument types' docs.
        let sub = |args: fn(Command) -> Command, about: &'static str| {
            args(Command::new(k.name))
                .about(about)
                .long_about(None::<&str>)
        };
        check = check.subcommand(
            sub(k.check.args, k.check.about).arg(
                Arg::new(SCORE_LINE)
                    .long(SCORE_LINE)
                    .action(ArgAction::SetTrue)
                    .hide(true),
            ),
        );
        case = case.subcommand(sub(k.case.args, k.case.about));
        mutant = mutant.subcommand(
            Command::new(k.name)
                .about(format!(
                    "A mutant of {}{}; without NAME, list them.",
                    k.builtin,
                    if (k.planted)()
                        .iter()
                        .any(|p| matches!(p.plant, Plant::Env { .. }))
                    {
                        ", or a peer's planted bug"
                    } else {
                        ""
                    }
                ))
                .arg(Arg::new("name").value_name("NAME").help("The mutant's name."))
                .arg(
                    Arg::new("output")
                        .short('o')
                        .long("output")
                        .value_name("OUTPUT")
                        .value_parser(clap::value_parser!(std::path::PathBuf))
                        .help(format!(
                            "Where to write the candidate .{} file (`-`: standard output) [default: ./{}-<NAME>.{}]",
                            k.ext, k.module, k.ext
                        )),
                ),
        );
        fuzz = fuzz.subcommand(
            Command::new(k.name)
                .about(format!(
                    "The {} fuzz target's body in a loop (the candidate {} names, if set).",
                    k.fuzz_target, k.env
                ))
                .args(score::fuzz_args()),
        );
    }
    Command::new("kernel-oracle")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Checks GPU inference kernels against the core oracle")
        .subcommand_required(true)
        .subcommand(check)
        .subcommand(case)
        .subcommand(mutant)
        .subcommand(fuzz)
        .subcommand(score::command(KINDS.iter().map(|k| k.name)))
        .subcommand(
            Command::new("sanitize-cases")
                .about("Print the kind's compute-sanitizer runs (the arguments after kernel-oracle), one a line, for gpu-check sanitize.")
                .arg(
                    Arg::new("kind")
                        .value_name("KIND")
                        .required(true)
                        .value_parser(clap::builder::PossibleValuesParser::new(
                            KINDS.iter().map(|k| k.name),
                        )),
                ),
        )
        .subcommand(
            Command::new("kinds").about(
                "Print the kind registry (kind, short name, candidate variable, fuzz target, extension, backend, builtin source, planted bugs), tab-separated, for scripts.",
            ),
        )
}

/// The kind a subcommand named.
fn kind_of(name: &str) -> &'static Kind {
    kind::by_name(name).expect("clap offers only registered kinds")
}

/// Lists the planted bugs of `k` (no NAME), or writes one.
fn mutant(k: &Kind, m: &ArgMatches) -> ExitCode {
    let name = m.get_one::<String>("name");
    let output = m.get_one::<std::path::PathBuf>("output");
    let planted = (k.planted)();
    let Some(name) = name else {
        if let Some(o) = output {
            eprintln!(
                "kernel-oracle: -o {} needs a mutant's NAME; `kernel-oracle mutant {}` lists them",
                o.display(),
                k.name
            );
            return ExitCode::from(2);
        }
        for p in planted
            .iter()
            .filter(|p| matches!(p.plant, Plant::Source(_)))
        {
            println!("{:<26} {}", p.name, p.what);
        }
        for p in &planted {
            if let Plant::Env { var, value } = p.plant {
                println!("{:<26} (peer; {var}={value}) {}", p.name, p.what);
            }
        }
        return ExitCode::SUCCESS;
    };
    let Some(p) = planted.iter().find(|p| p.name == name) else {
        eprintln!(
            "kernel-oracle: no mutant {name:?}; `kernel-oracle mutant {}` lists them",
            k.name
        );
        return ExitCode::from(2);
    };
    let text = match &p.plant {
        Plant::Env { var, value } => {
            // A planted bug of a peer is selected by the environment; there
            // is no source file to write.
            if let Some(o) = output {
                eprintln!(
                    "kernel-oracle: {name} is a planted bug of a peer kernel, selected by {var}={value}; it has no source file to write to {}",
                    o.display()
                );
                return ExitCode::from(2);
            }
            println!("{name}: {}", p.what);
            println!(
                "run: {var}={} {} check {}",
                kernel_oracle::shell_quote(value),
                kernel_oracle::paths::rerun_prefix(),
                k.name
            );
            return ExitCode::SUCCESS;
        }
        Plant::Source(Err(e)) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
        Plant::Source(Ok(t)) => t,
    };
    let path = output
        .cloned()
        .unwrap_or_else(|| format!("{}-{name}.{}", k.module, k.ext).into());
    if path.as_os_str() == "-" {
        use std::io::Write;
        // Not print!: it panics when the reader has gone (`... -o - | head`).
        return match std::io::stdout().write_all(text.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            // The reader took what it wanted (`-o - | head`): not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kernel-oracle: cannot write the candidate to standard output: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("kernel-oracle: cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!("{}: {}", path.display(), p.what);
    // Absolute: the line may be run from another directory.
    let abs = std::path::absolute(&path).unwrap_or(path);
    println!(
        "run: {}={} {} check {}",
        k.env,
        kernel_oracle::shell_quote(&abs.to_string_lossy()),
        kernel_oracle::paths::rerun_prefix(),
        k.name
    );
    ExitCode::SUCCESS
}

/// Runs the command line; when a launch was left running (a deadline
/// passed), ends the process without waiting on the device
/// (`device::cuda::exit_process`).
fn main() -> ExitCode {
    // Printed reproductions name this very executable outside the tree.
    kernel_oracle::paths::set_main();
    exit_quietly_on_a_closed_stdout();
    let code = run_cli();
    if let Some(lost) = device::cuda::context_lost() {
        if lost.running {
            eprintln!(
                "kernel-oracle: a launch is still running ({}); exiting without waiting for it",
                lost.what
            );
            device::cuda::exit_process(1);
        }
    }
    code
}

/// A print to a closed standard output (`kernel-oracle score | head`)
/// ends the program as SIGPIPE ends a C tool: exit status 141, no panic
/// message. Rust ignores SIGPIPE, so the write returns EPIPE and
/// `println!` panics "failed printing to stdout"; every other panic keeps
/// the default hook.
fn exit_quietly_on_a_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let p = info.payload();
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("os error 32") {
            device::cuda::exit_process(141);
        }
        default(info);
    }));
}

fn run_cli() -> ExitCode {
    let matches = cli().get_matches();
    if let Err(e) = kernel_oracle::oracle_choice() {
        eprintln!("kernel-oracle: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = kernel_oracle::fp8_mmq::run::gemm_choice() {
        eprintln!("kernel-oracle: {e}");
        return ExitCode::from(2);
    }
    let (cmd, m) = matches.subcommand().expect("a subcommand is required");
    match cmd {
        "kinds" => {
            println!("{}", kind::table());
            ExitCode::SUCCESS
        }
        "score" => score::run_command(m),
        "sanitize-cases" => {
            let k = kind_of(m.get_one::<String>("kind").expect("required"));
            for c in k.sanitize_cases {
                println!("{c}");
            }
            ExitCode::SUCCESS
        }
        _ => {
            let (name, sub) = m.subcommand().expect("a kind is required");
            let k = kind_of(name);
            match cmd {
                "check" => match (k.check.run)(sub) {
                    Ok(summary) => {
                        if sub.get_flag(SCORE_LINE) {
                            println!("{}", score::summary_line(&summary));
                        }
                        kind::gate_exit(&summary)
                    }
                    Err(code) => code,
                },
                "case" => (k.case.run)(sub),
                "mutant" => mutant(k, sub),
                "fuzz" => score::fuzz_command(k, sub),
                _ => unreachable!("every subcommand is matched"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's sanitizer cases are commands this binary takes (a
    /// usage error under compute-sanitizer sanitizes nothing).
    #[test]
    fn every_sanitizer_case_parses() {
        for k in KINDS {
            for c in k.sanitize_cases {
                let argv = std::iter::once("kernel-oracle").chain(c.split_whitespace());
                if let Err(e) = cli().try_get_matches_from(argv) {
                    panic!("{} sanitizer case `{c}`: {e}", k.name);
                }
            }
        }
    }
}
