//! `kernel-oracle check|case|mutant mul-mat`: the kind's registry entry.

use super::{gate, report, Arm, CaseSpec};
use crate::kind::{self, GateSummary, Kind};
use clap::{Args, ValueEnum};
use std::process::ExitCode;

/// The mul-mat kind.
pub const KIND: Kind = Kind {
    name: "mul-mat",
    module: "mul_mat",
    short: "mul",
    builtin: "shaders/mul_mat_reg_tile.wgsl",
    ext: "wgsl",
    env: device::wgpu::ENV_MUL_MAT_WGSL,
    repro_env: || crate::candidate_env(device::wgpu::ENV_MUL_MAT_WGSL),
    fuzz_target: "mul_mat",
    backend: "wgpu",
    runner,
    check: kind::Command {
        about: "The WGSL GEMM over ggml blocks on the wgpu adapter (Vulkan: the backend this build has; WGPU_BACKEND may only name it); the candidate named by KERNEL_ORACLE_MUL_MAT_WGSL.",
        args: CheckArgs::augment_args,
        run: check,
    },
    case: kind::Command {
        about: "One mul-mat case (a reproduction from a divergence report).",
        args: CaseArgs::augment_args,
        run: case,
    },
    planted,
    fuzz_one,
    selector_bytes: super::generate::SELECTOR_BYTES,
    sanitize_cases: &[],
};

/// `check mul-mat`'s arguments.
#[derive(Args)]
struct CheckArgs {
    /// Seed 004's full LFM2.5 prefill shapes instead of the CI shapes.
    #[arg(long)]
    full: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ArmArg {
    Exact,
    /// The RANDOM arm (`rand` also accepted).
    #[value(alias = "rand")]
    Random,
    /// The BAL arm (its reproductions print `bal`).
    #[value(name = "bal", alias = "balanced")]
    Balanced,
    /// The ORDER arm (exact products, rounded partial sums: k in order).
    Order,
}

/// `case mul-mat`'s arguments.
#[derive(Args)]
struct CaseArgs {
    /// f32, q4_0, q8_0, q4_K or q6_K.
    #[arg(long, value_parser = parse_dtype)]
    dtype: oracle::ggml::Dtype,
    /// src0 rows (weight rows; dst's fast axis).
    #[arg(long)]
    m: usize,
    /// src1 rows (tokens; dst's columns).
    #[arg(long)]
    n: usize,
    /// The reduction length, a multiple of the dtype's block (32 or 256).
    #[arg(long)]
    k: usize,
    /// The gate's arm (data that make every order exact, random, random
    /// with balanced products, or exact products whose sums round).
    #[arg(long, value_enum, ignore_case = true)]
    arm: ArmArg,
    /// The case seed, decimal or 0x-hex: the data, and (as a fuzz case
    /// prints it) the path and form: bit 63 set takes a quantized dtype
    /// through the dequantize-then-GEMM pass, and with
    /// KERNEL_ORACLE_MUL_MAT_SUBGROUPS unset bit 60 set asks for the
    /// subgroup form.
    #[arg(long, value_parser = kind::parse_u64)]
    seed: u64,
    /// WG_M,WG_N,TILE_K, comma-separated [default: 16,16,16].
    #[arg(long, value_delimiter = ',', default_values_t = [16u32, 16, 16], hide_default_value = true)]
    wg: Vec<u32>,
}

fn parse_dtype(s: &str) -> Result<oracle::ggml::Dtype, String> {
    oracle::ggml::Dtype::ALL
        .into_iter()
        .find(|d| d.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("{s:?} is not one of f32, q4_0, q8_0, q4_K, q6_K"))
}

fn engine_or_exit() -> Result<&'static device::wgpu::WgpuEngine, ExitCode> {
    super::run::engine_or_fault().map_err(|(msg, own)| {
        if *own {
            eprintln!("kernel-oracle: the WGSL kernel is broken: {msg}");
            ExitCode::from(1)
        } else {
            eprintln!("kernel-oracle: cannot run the WGSL kernel: {msg}");
            ExitCode::from(2)
        }
    })
}

fn check(m: &clap::ArgMatches) -> Result<GateSummary, ExitCode> {
    let a: CheckArgs = kind::args(m);
    let engine = engine_or_exit()?;
    let g = if a.full {
        gate::run(engine, &gate::LFM_SHAPES, &gate::GEOMETRIES[..1])
    } else {
        gate::run(engine, &gate::CI_SHAPES, &gate::GEOMETRIES)
    };
    Ok(GateSummary {
        failures: g.failures,
        rows: Some(g.rows),
    })
}

fn case(m: &clap::ArgMatches) -> ExitCode {
    let a: CaseArgs = kind::args(m);
    let spec = CaseSpec {
        dtype: a.dtype,
        m: a.m,
        n: a.n,
        k: a.k,
        arm: match a.arm {
            ArmArg::Exact => Arm::Exact,
            ArmArg::Random => Arm::Random,
            ArmArg::Balanced => Arm::Balanced,
            ArmArg::Order => Arm::Order,
        },
        seed: a.seed,
    };
    if let Err(e) = spec.valid() {
        eprintln!("kernel-oracle: {e}");
        return ExitCode::from(2);
    }
    let wg = a.wg;
    if wg.len() != 3 {
        eprintln!("kernel-oracle: --wg takes WG_M,WG_N,TILE_K, got {wg:?}");
        return ExitCode::from(2);
    }
    let geom = device::wgpu::Geometry {
        wg_m: wg[0],
        wg_n: wg[1],
        tile_k: wg[2],
    };
    let engine = match engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let desc = engine.source().describe();
    println!("shader: {desc}");
    println!("adapter: {} ({})", engine.adapter_name(), engine.backend());
    // The fuzzer's form for this case (its seed, or the variable a rerun
    // line sets), so that a fuzz case reruns as it ran.
    let form = super::form_for(engine, &spec);
    println!("{}", gate::form_line(engine));
    println!("{}", report::table_header());
    match gate::run_one_form(engine, &spec, &geom, form) {
        Ok(v) => {
            let label = engine.form_label(form);
            println!("{}", report::table_row("case", &spec, &geom, &label, &v));
            if v.pass() {
                ExitCode::SUCCESS
            } else if v.within_bound() {
                eprintln!(
                    "kernel-oracle: VACUOUS: the {} bound 2 gamma_K sum|w x| at k = {} exceeds |want| on \
                     every output (NMSE bound {:.2e}), so an all-zero dst would pass: this case cannot \
                     judge the kernel; take a smaller k, more outputs, or the EXACT or ORDER arm",
                    spec.arm.name(),
                    spec.k,
                    v.nmse_bound
                );
                ExitCode::from(2)
            } else {
                print!(
                    "{}",
                    report::divergence(&spec, &geom, form, &v, &desc, None)
                );
                ExitCode::from(1)
            }
        }
        Err(e) if e.is_refusal() => {
            eprintln!("kernel-oracle: the shim refused the case: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("kernel-oracle: the shim failed: {e}");
            ExitCode::from(1)
        }
    }
}

fn runner() -> Result<String, String> {
    super::engine().map(|e| e.source().describe())
}

fn planted() -> Vec<kind::Planted> {
    use super::mutants::{apply, MUTANTS};
    kind::planted_sources(
        &MUTANTS,
        |m| (m.name, m.what),
        |m| apply(m, device::wgpu::BUILTIN_MUL_MAT_WGSL),
    )
}

/// The `mul_mat` fuzz target's body.
fn fuzz_one(data: &[u8]) {
    kind::fuzz_arbitrary::<CaseSpec>(data, super::check);
}
