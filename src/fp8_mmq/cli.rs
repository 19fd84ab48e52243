//! `kernel-oracle check|case|mutant fp8-mmq`: the kind's registry entry.
//!
//! `KERNEL_ORACLE_FP8_MMQ=cublaslt` runs the FP8 commands' GEMM on
//! cuBLASLt (`device::cuda::CublasLtFp8`) instead of the kernel source's
//! MMQ; `cublaslt-unpadded` is that peer with a planted bug; `builtin` (or
//! unset) is the default; any other value exits 2.

use super::{gate, report, Arm, CaseSpec, Knobs, Outcome};
use crate::kind::{self, GateSummary, Kind, Plant, Planted};
use clap::{Args, ValueEnum};
use std::process::ExitCode;

/// The FP8 per-block MMQ kind.
pub const KIND: Kind = Kind {
    name: "fp8-mmq",
    module: "fp8_mmq",
    short: "fp8",
    builtin: "cu/fp8_mmq.cu",
    ext: "cu",
    env: device::cuda::ENV_FP8_MMQ_CU,
    repro_env: report::repro_env,
    fuzz_target: "fp8_mmq",
    backend: "cuda",
    runner,
    check: kind::Command {
        about: "The FP8 per-block MMQ gate (seed 000): the seed's nine ragged shapes and one more, EXACT, FOLD, CODES and RAND arms, NaN precondition, every e4m3 code decoded bit-exactly.",
        args: CheckArgs::augment_args,
        run: check,
    },
    case: kind::Command {
        about: "One FP8 MMQ case.",
        args: CaseArgs::augment_args,
        run: case,
    },
    planted,
    fuzz_one,
    selector_bytes: super::generate::SELECTOR_BYTES,
    // Aligned rows (cp.async copies), then rows at every byte offset mod 4
    // (the unaligned loads' shifts and the byte-wise k tail).
    sanitize_cases: &["check fp8-mmq 272 136 40", "check fp8-mmq 1003 130 7"],
};

/// `check fp8-mmq`'s arguments.
#[derive(Args)]
struct CheckArgs {
    /// With OUT_F and M: check this one shape instead of the battery.
    in_f: Option<usize>,
    /// Output features.
    out_f: Option<usize>,
    /// Activation rows.
    m: Option<usize>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ArmArg {
    Exact,
    Fold,
    Codes,
    Rand,
}

/// `case fp8-mmq`'s arguments.
#[derive(Args)]
struct CaseArgs {
    /// Input features (k), elements.
    #[arg(long)]
    in_f: usize,
    /// Output features (n), elements.
    #[arg(long)]
    out_f: usize,
    /// Activation rows (tokens).
    #[arg(long)]
    m: usize,
    /// The gate's arm (see the README's FP8 section).
    #[arg(long, value_enum, ignore_case = true)]
    arm: ArmArg,
    /// splitmix64 seed, decimal or 0x-hex.
    #[arg(long, value_parser = kind::parse_u64)]
    seed: u64,
    /// RAND arm: weights cycle through the 254 legal e4m3 codes.
    #[arg(long)]
    every_code: bool,
    /// One activation block in this many all zero (d = 0); 0: none.
    #[arg(long, default_value_t = 0)]
    zero_blocks: u8,
    /// RAND arm: activations scaled by 2^ACT_EXP.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true,
          value_parser = clap::value_parser!(i8).range(-100..=100))]
    act_exp: i8,
    /// Weight codes overwritten with a NaN magnitude (must be refused).
    #[arg(long, default_value_t = 0)]
    nan_codes: u8,
    /// Force MMQ variant N (fp8_mmq_v2_kN) instead of the plan's pick.
    #[arg(long)]
    variant: Option<u8>,
}

/// Validates a shape for the kernels (`Shape::new`, then the kernels' i32
/// index range) before anything is generated or launched; the message to
/// print and exit 2 with otherwise.
fn valid_shape(in_f: usize, out_f: usize, m: usize) -> Result<(), ExitCode> {
    oracle::fp8_mmq::Shape::new(m, in_f, out_f)
        .map_err(|e| e.to_string())
        .and_then(|s| device::cuda::check_index_range(&s).map_err(|e| e.to_string()))
        .map_err(|msg| {
            eprintln!("kernel-oracle: shape in_f={in_f} out_f={out_f} m={m}: {msg}");
            ExitCode::from(2)
        })
}

/// The CUDA engine (and the GEMM peer `KERNEL_ORACLE_FP8_MMQ` names, if
/// any), or the message to print and exit 2 with.
fn engine_or_exit() -> Result<&'static device::cuda::Engine, ExitCode> {
    let engine = super::engine()
        .map_err(|msg| kind::engine_failure(&KIND, super::run::engine_source_fault(), &msg))?;
    super::run::peer().map_err(|msg| {
        eprintln!("kernel-oracle: cannot run the FP8 GEMM that KERNEL_ORACLE_FP8_MMQ names: {msg}");
        ExitCode::from(2)
    })?;
    Ok(engine)
}

fn check(m: &clap::ArgMatches) -> Result<GateSummary, ExitCode> {
    let a: CheckArgs = kind::args(m);
    let shapes = match (a.in_f, a.out_f, a.m) {
        (None, None, None) => gate::BATTERY.to_vec(),
        (Some(a), Some(b), Some(c)) => vec![(a, b, c)],
        _ => {
            eprintln!("kernel-oracle: give all of IN_F OUT_F M, or none for the battery");
            return Err(ExitCode::from(2));
        }
    };
    for &(in_f, out_f, m) in &shapes {
        valid_shape(in_f, out_f, m)?;
    }
    let engine = engine_or_exit()?;
    let g = gate::run(engine, &shapes);
    Ok(GateSummary {
        failures: g.failures,
        rows: Some(g.rows),
    })
}

fn case(m: &clap::ArgMatches) -> ExitCode {
    let a: CaseArgs = kind::args(m);
    let arm = match a.arm {
        ArmArg::Exact => Arm::Exact,
        ArmArg::Fold => Arm::Fold,
        ArmArg::Codes => Arm::Codes,
        ArmArg::Rand => Arm::Random,
    };
    let spec = CaseSpec {
        in_f: a.in_f,
        out_f: a.out_f,
        m: a.m,
        arm,
        seed: a.seed,
        knobs: Knobs {
            every_code: a.every_code,
            zero_blocks: a.zero_blocks,
            act_exp: a.act_exp,
            nan_codes: a.nan_codes,
            variant: a.variant,
        },
    };
    if let Err(code) = valid_shape(a.in_f, a.out_f, a.m) {
        return code;
    }
    let data = match spec.generate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    let engine = match engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("kernel source: {}", engine.kernel_source());
    println!("fp8 GEMM: {}", super::run::gemm_description());
    println!("{}", report::table_header());
    let forced = a.variant.map(u32::from);
    let run = || {
        let schedule = super::run::declared_schedule(engine, &data.shape)?;
        let t0 = std::time::Instant::now();
        let mut want = super::reference(&data, schedule);
        let oracle_time = t0.elapsed();
        want.identify = super::judge::Identify::Always;
        Ok((
            super::run::run_case_with_reference(engine, &data, arm, &want),
            oracle_time,
        ))
    };
    let (outcome, oracle_time) = match super::run::with_variant(engine, forced, run).and_then(|r| r)
    {
        Ok(r) => r,
        Err(message) => (Outcome::Failed { message }, std::time::Duration::ZERO),
    };
    match outcome {
        Outcome::Failed { message } => {
            print!("{}", report::failure(&spec, &message));
            ExitCode::from(1)
        }
        Outcome::Judged(v) => {
            println!("{}", report::table_row(&spec, &v, oracle_time));
            if v.pass() {
                ExitCode::SUCCESS
            } else {
                print!(
                    "{}",
                    report::divergence(&spec, &v, &super::run::kernel_description(engine), None)
                );
                ExitCode::from(1)
            }
        }
        Outcome::PeerRefused { reason } => {
            // A shape the peer cannot take is not a failure.
            println!("{reason}");
            ExitCode::SUCCESS
        }
        Outcome::Refused { count } => {
            // run_case has checked the count against the oracle's.
            println!(
                "refused by the dispatch precondition (rule NAN-W): {count} NaN-magnitude weight codes, as the oracle counts"
            );
            ExitCode::SUCCESS
        }
    }
}

/// The engine and the GEMM peer `KERNEL_ORACLE_FP8_MMQ` names, if any.
fn runner() -> Result<String, String> {
    let e = super::engine()?;
    super::run::peer()?;
    Ok(format!(
        "{} (fp8 GEMM: {})",
        e.kernel_source(),
        super::run::gemm_description()
    ))
}

fn planted() -> Vec<Planted> {
    use super::mutants::{apply, MUTANTS};
    let mut v = kind::planted_sources(
        &MUTANTS,
        |m| (m.name, m.what),
        |m| apply(m, device::cuda::BUILTIN_FP8_MMQ_CU),
    );
    v.push(Planted {
        name: "cublaslt-unpadded",
        what: "the cuBLASLt peer with its 128x128 weight scales unpadded (leading dimension ceil(in_f/128), not a multiple of 4 blocks): output columns >= 128 read the wrong scales whenever ceil(in_f/128) % 4 != 0 (EXACT arm)",
        plant: Plant::Env {
            var: device::cuda::ENV_FP8_MMQ,
            value: "cublaslt-unpadded",
        },
    });
    v
}

/// The `fp8_mmq` fuzz target's body.
fn fuzz_one(data: &[u8]) {
    kind::fuzz_arbitrary::<CaseSpec>(data, super::check);
}
