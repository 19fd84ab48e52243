//! `kernel-oracle check|case|mutant tensor-core`: the kind's registry entry.

use super::{run, CaseSpec, Class};
use crate::kind::{self, GateSummary, Kind};
use clap::Args;
use device::cuda::DeviceError;
use oracle::tensor_core::{Fp8Kind, Instruction, Model};
use std::process::ExitCode;

/// The FP8 tensor-core MMA kind.
pub const KIND: Kind = Kind {
    name: "tensor-core",
    module: "tensor_core",
    short: "tensor",
    builtin: "cu/tensor_core.cu",
    ext: "cu",
    env: device::cuda::ENV_TENSOR_CORE_CU,
    repro_env: || crate::candidate_env(device::cuda::ENV_TENSOR_CORE_CU),
    fuzz_target: "tensor_core",
    backend: "cuda",
    runner,
    check: kind::Command {
        about: "The FP8 tensor-core MMA against its bit-accurate model (oracle::tensor_core): targeted vectors and 2^20 random vectors per operand-format pair, every output bit for bit.",
        args: CheckArgs::augment_args,
        run: check,
    },
    case: kind::Command {
        about: "One tensor-core probe case (the reproduction a divergence prints).",
        args: CaseArgs::augment_args,
        run: case,
    },
    planted,
    fuzz_one,
    selector_bytes: super::SELECTOR_BYTES,
    // Each instruction and operand-format pair, on the specials class.
    sanitize_cases: &[
        "case tensor-core --instruction wgmma --a e4m3 --b e4m3 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction wgmma --a e4m3 --b e5m2 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction wgmma --a e5m2 --b e4m3 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction wgmma --a e5m2 --b e5m2 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction mma-sync --a e4m3 --b e4m3 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction mma-sync --a e4m3 --b e5m2 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction mma-sync --a e5m2 --b e4m3 --class specials --seed 0x5a03 --tiles 1",
        "case tensor-core --instruction mma-sync --a e5m2 --b e5m2 --class specials --seed 0x5a03 --tiles 1",
    ],
};

/// `check tensor-core` takes no arguments.
#[derive(Args)]
struct CheckArgs {}

/// `case tensor-core`'s arguments.
#[derive(Args)]
struct CaseArgs {
    /// The instruction: wgmma or mma-sync.
    #[arg(long, default_value = "wgmma", value_parser = parse_instruction)]
    instruction: Instruction,
    /// A's format: e4m3 or e5m2.
    #[arg(long, value_parser = parse_fp8_kind)]
    a: Fp8Kind,
    /// B's format: e4m3 or e5m2.
    #[arg(long, value_parser = parse_fp8_kind)]
    b: Fp8Kind,
    /// The input class: uniform, uniform-c, band, band-c, sparse, large, specials, dominant.
    #[arg(long, value_parser = parse_class)]
    class: Class,
    /// The data seed, decimal or 0x-hex.
    #[arg(long, value_parser = kind::parse_u64)]
    seed: u64,
    /// Tiles of 64 x 8 outputs (at least 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65536))]
    tiles: u32,
    /// Run with the accumulator input disabled (wgmma scale-d = 0).
    #[arg(long)]
    no_accumulator: bool,
}

fn parse_instruction(s: &str) -> Result<Instruction, String> {
    match s {
        "wgmma" => Ok(Instruction::Wgmma),
        "mma-sync" => Ok(Instruction::MmaSync),
        _ => Err(format!("{s:?}: expected wgmma or mma-sync")),
    }
}

fn parse_fp8_kind(s: &str) -> Result<Fp8Kind, String> {
    match s {
        "e4m3" => Ok(Fp8Kind::E4m3),
        "e5m2" => Ok(Fp8Kind::E5m2),
        _ => Err(format!("{s:?}: expected e4m3 or e5m2")),
    }
}

fn parse_class(s: &str) -> Result<Class, String> {
    Class::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Class::ALL.iter().map(|c| c.name()).collect();
        format!("{s:?}: expected one of {}", names.join(", "))
    })
}

/// The tensor-core probe engine, or exit status 2 with the reason.
fn engine_or_exit() -> Result<&'static device::cuda::TensorCoreEngine, ExitCode> {
    super::engine().map_err(|e| {
        eprintln!("kernel-oracle: no CUDA device to probe: {e}");
        ExitCode::from(2)
    })
}

fn check(_: &clap::ArgMatches) -> Result<GateSummary, ExitCode> {
    let engine = engine_or_exit()?;
    println!("kernel source: {}", engine.kernel_source());
    Ok(GateSummary {
        failures: super::gate(engine),
        rows: None,
    })
}

fn case(m: &clap::ArgMatches) -> ExitCode {
    let a: CaseArgs = kind::args(m);
    let engine = match engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let spec = CaseSpec {
        instruction: a.instruction,
        fa: a.a,
        fb: a.b,
        class: a.class,
        scale_d: !a.no_accumulator,
        seed: a.seed,
        tiles: a.tiles as usize,
    };
    let model = Model {
        instruction: a.instruction,
    };
    match run(
        engine,
        a.instruction,
        a.a,
        a.b,
        &spec.generate(),
        spec.scale_d,
    ) {
        Ok(v) if v.mismatches == 0 => {
            println!(
                "PASS: {} outputs bit-identical to the model ({})",
                v.outputs,
                spec.command()
            );
            ExitCode::SUCCESS
        }
        Ok(v) => {
            println!(
                "FAIL: {} of {} outputs differ ({})",
                v.mismatches,
                v.outputs,
                spec.command()
            );
            if let Some(d) = v.first {
                println!("{}", d.report(a.a, a.b, &model));
            }
            ExitCode::from(1)
        }
        Err(e) if matches!(e, DeviceError::InstructionUnavailable { .. }) => {
            eprintln!("kernel-oracle: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            println!("FAIL: {e} ({})", spec.command());
            ExitCode::from(1)
        }
    }
}

fn runner() -> Result<String, String> {
    super::engine().map(|e| e.kernel_source())
}

fn planted() -> Vec<kind::Planted> {
    kind::planted_mutants(
        &super::mutants::MUTANTS,
        device::cuda::BUILTIN_TENSOR_CORE_CU,
    )
}

/// The `tensor_core` fuzz target's body.
fn fuzz_one(data: &[u8]) {
    super::check(&CaseSpec::from_bytes(data));
}
