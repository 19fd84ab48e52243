//! `kernel-oracle check|case|mutant gdn`: the kind's registry entry.

use super::{gate, report, CaseSpec};
use crate::kind::{self, GateSummary, Kind};
use clap::Args;
use std::process::ExitCode;

/// The Gated DeltaNet kind.
pub const KIND: Kind = Kind {
    name: "gdn",
    module: "gdn",
    short: "gdn",
    builtin: "cu/gdn.cu",
    ext: "cu",
    env: device::cuda::ENV_GDN_CU,
    repro_env: || crate::candidate_env(device::cuda::ENV_GDN_CU),
    fuzz_target: "gdn_packed",
    backend: "cuda",
    runner,
    check: kind::Command {
        about: "The Gated DeltaNet gate (seed 003): packed == chained per-row launches on all six outputs, eager and graph-replayed on rebound buffers (gate 1), and every kernel == the core oracle (gate 2).",
        args: CheckArgs::augment_args,
        run: check,
    },
    case: kind::Command {
        about: "One Gated DeltaNet case (the fuzzer's reproduction).",
        args: CaseArgs::augment_args,
        run: case,
    },
    planted,
    fuzz_one,
    selector_bytes: super::generate::SELECTOR_BYTES,
    // A graph-replayed batch, a one-CTA head, one sequence at
    // num_v = 2 num_k (the split entry: its shuffles and mbarriers), and
    // one row (t = 1: a kernel that stages a second row reads past x).
    sanitize_cases: &[
        "case gdn --num-k 2 --num-v 4 --d-conv 4 --t 3 --seed 0x5a01 --graph --batch 3",
        "case gdn --num-k 1 --num-v 3 --d-conv 2 --t 2 --seed 0x5a02",
        "case gdn --num-k 2 --num-v 4 --d-conv 4 --t 3 --seed 0x5a04",
        "case gdn --num-k 2 --num-v 4 --d-conv 4 --t 1 --seed 0x5a03 --batch 2",
    ],
};

/// `check gdn` takes no arguments.
#[derive(Args)]
struct CheckArgs {}

/// `case gdn`'s arguments.
#[derive(Args)]
struct CaseArgs {
    #[arg(long)]
    num_k: usize,
    #[arg(long)]
    num_v: usize,
    #[arg(long, default_value_t = 4)]
    d_conv: usize,
    /// Rows per packed call.
    #[arg(long)]
    t: usize,
    /// splitmix64 seed, decimal or 0x-hex.
    #[arg(long, value_parser = kind::parse_u64)]
    seed: u64,
    /// The L2-norm epsilon (inside the square root).
    #[arg(long, default_value_t = 1e-6)]
    eps: f32,
    /// alpha is uniform in [-s, s).
    #[arg(long, default_value_t = 2.0)]
    alpha_spread: f32,
    /// The initial state is uniform in [-s, s).
    #[arg(long, default_value_t = 0.3)]
    state_spread: f32,
    /// Draw the initial state as -|x| (every element negative, the same spread).
    #[arg(long)]
    negative_state: bool,
    /// Bit 0: a zero q head; bit 1: a zero k head.
    #[arg(long, default_value_t = 0)]
    zero_qk: u8,
    /// Do not mix transcendental specials into the inputs.
    #[arg(long)]
    no_specials: bool,
    /// Also capture the packed step in a CUDA graph and replay it on rebound buffers.
    #[arg(long)]
    graph: bool,
    /// Also run this many independent sequences in one batched fused call, each against
    /// its own oracle (1: none).
    #[arg(long, default_value_t = 1)]
    batch: usize,
}

/// The GDN engine, or the message to print and exit 2 with.
fn engine_or_exit() -> Result<&'static device::cuda::GdnEngine, ExitCode> {
    super::engine()
        .map_err(|msg| kind::engine_failure(&KIND, super::run::engine_source_fault(), &msg))
}

fn check(_: &clap::ArgMatches) -> Result<GateSummary, ExitCode> {
    let engine = engine_or_exit()?;
    let g = gate::run(engine);
    Ok(GateSummary {
        failures: g.failures,
        rows: Some(g.rows),
    })
}

fn case(m: &clap::ArgMatches) -> ExitCode {
    let a: CaseArgs = kind::args(m);
    let spec = CaseSpec {
        num_k: a.num_k,
        num_v: a.num_v,
        d_conv: a.d_conv,
        t: a.t,
        eps: a.eps,
        alpha_spread: a.alpha_spread,
        state_spread: a.state_spread,
        negative_state: a.negative_state,
        zero_qk: a.zero_qk,
        specials: !a.no_specials,
        graph: a.graph,
        seed: a.seed,
        batch: a.batch,
    };
    // A batched case's sequence 0 is the case's own data (the fuzzer's
    // check draws them the same way), so its rerun line reproduces the
    // batched rows too.
    let drawn = if spec.batch > 1 {
        spec.generate_batch()
    } else {
        spec.generate().map(|d| vec![d])
    };
    let datas = match drawn {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    let data = &datas[0];
    let engine = match engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("kernel source: {}", engine.kernel_source());
    println!("{}", report::table_header());
    let want = super::reference(data);
    let mut rows = super::judge_case(engine, &spec, data, &want, spec.graph);
    if spec.batch > 1 {
        rows.extend(super::judge_batch(engine, &spec, &datas, Some(&want)));
    }
    for row in &rows {
        println!("{}", report::table_row(row));
    }
    if rows.iter().all(super::Row::pass) {
        ExitCode::SUCCESS
    } else {
        print!(
            "{}",
            report::divergence(&spec, &rows, &engine.kernel_source(), None)
        );
        ExitCode::from(1)
    }
}

fn runner() -> Result<String, String> {
    super::engine().map(|e| e.kernel_source())
}

fn planted() -> Vec<kind::Planted> {
    kind::planted_mutants(&super::mutants::MUTANTS, device::cuda::BUILTIN_GDN_CU)
}

/// The `gdn_packed` fuzz target's body.
fn fuzz_one(data: &[u8]) {
    kind::fuzz_arbitrary::<CaseSpec>(data, super::check);
}
