//! `kernel-oracle check|case|mutant moe-tables`: the kind's registry entry.

use super::{gate, report, CaseSpec, WeightMix};
use crate::kind::{self, GateSummary, Kind};
use clap::Args;
use std::process::ExitCode;

/// The MoE verify-rows tables kind.
pub const KIND: Kind = Kind {
    name: "moe-tables",
    module: "moe_tables",
    short: "moe",
    builtin: "cu/moe_tables.cu",
    ext: "cu",
    env: device::cuda::ENV_MOE_TABLES_CU,
    repro_env: || crate::candidate_env(device::cuda::ENV_MOE_TABLES_CU),
    fuzz_target: "moe_tables",
    backend: "cuda",
    runner,
    check: kind::Command {
        about: "The MoE verify-rows tables gate (seed 002): the seed's four cases (small strides, serving strides past 4 GiB, no macros, spread selection), the stale macro cache, offsets past 2^40 bytes, special weights, 65,536 pairs (on the shim's grid and on 3 CTAs: the grid-stride loop), a refusal past the first pass, and three refusals.",
        args: CheckArgs::augment_args,
        run: check,
    },
    case: kind::Command {
        about: "One MoE verify-rows tables case (the fuzzer's reproduction).",
        args: CaseArgs::augment_args,
        run: case,
    },
    planted,
    fuzz_one,
    selector_bytes: super::generate::SELECTOR_BYTES,
    sanitize_cases: &["check moe-tables"],
};

/// `check moe-tables` takes no arguments.
#[derive(Args)]
struct CheckArgs {}

/// `case moe-tables`'s arguments.
#[derive(Args)]
struct CaseArgs {
    #[arg(long)]
    n_expert: u32,
    #[arg(long)]
    n_pairs: u32,
    /// Gate, up and down slab bases (bytes), decimal or 0x-hex, as
    /// `A,B,C`.
    #[arg(long, required = true, value_delimiter = ',', value_parser = kind::parse_u64)]
    bases: Vec<u64>,
    /// Gate, up and down per-expert strides (bytes), decimal or 0x-hex,
    /// as `A,B,C`.
    #[arg(long, required = true, value_delimiter = ',', value_parser = kind::parse_u64)]
    strides: Vec<u64>,
    /// The bank has macro-scale planes.
    #[arg(long)]
    macros: bool,
    #[arg(long, default_value_t = 0)]
    layer: u32,
    /// One pair in this many gets an out-of-range expert id (0: none).
    #[arg(long, default_value_t = 0)]
    bad_ids: u8,
    /// Draw special weights (NaN, subnormal, negative, zero, infinity).
    #[arg(long)]
    special_weights: bool,
    /// Launch on one CTA (the kernel's grid-stride loop past 256 pairs).
    #[arg(long)]
    one_cta: bool,
    /// splitmix64 seed, decimal or 0x-hex.
    #[arg(long, value_parser = kind::parse_u64)]
    seed: u64,
}

/// The MoE tables engine, or the message to print and exit 2 with.
fn engine_or_exit() -> Result<&'static device::cuda::MoeEngine, ExitCode> {
    super::engine()
        .map_err(|msg| kind::engine_failure(&KIND, super::run::engine_source_fault(), &msg))
}

fn check(_: &clap::ArgMatches) -> Result<GateSummary, ExitCode> {
    let engine = engine_or_exit()?;
    let g = gate::run(engine, &gate::cases());
    Ok(GateSummary {
        failures: g.failures,
        rows: Some(g.rows),
    })
}

fn case(m: &clap::ArgMatches) -> ExitCode {
    let a: CaseArgs = kind::args(m);
    if a.bases.len() != 3 || a.strides.len() != 3 {
        eprintln!(
            "kernel-oracle: --bases and --strides take three values each (gate,up,down), got {} and {}",
            a.bases.len(),
            a.strides.len()
        );
        return ExitCode::from(2);
    }
    let slabs = [0, 1, 2].map(|i| oracle::moe_tables::Slab {
        base: a.bases[i],
        stride: a.strides[i],
    });
    let spec = CaseSpec {
        n_expert: a.n_expert,
        n_pairs: a.n_pairs,
        slabs,
        macros: a.macros,
        layer: a.layer,
        bad_ids: a.bad_ids,
        weights: if a.special_weights {
            WeightMix::Special
        } else {
            WeightMix::Routing
        },
        one_cta: a.one_cta,
        seed: a.seed,
    };
    let engine = match engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("kernel source: {}", engine.kernel_source());
    println!("{}", report::table_header());
    let data = spec.generate();
    let v = gate::run_one(engine, "case", &data, spec.one_cta.then_some(1));
    if v.pass() {
        ExitCode::SUCCESS
    } else {
        print!(
            "{}",
            report::divergence(&spec, &v, &engine.kernel_source(), None)
        );
        ExitCode::from(1)
    }
}

fn runner() -> Result<String, String> {
    super::engine().map(|e| e.kernel_source())
}

fn planted() -> Vec<kind::Planted> {
    kind::planted_mutants(
        &super::mutants::MUTANTS,
        device::cuda::BUILTIN_MOE_TABLES_CU,
    )
}

/// The `moe_tables` fuzz target's body.
fn fuzz_one(data: &[u8]) {
    kind::fuzz_arbitrary::<CaseSpec>(data, super::check);
}
