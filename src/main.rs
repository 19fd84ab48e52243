//! `kernel-oracle`: the gates and single-case reproductions.
//!
//! ```text
//! kernel-oracle check fp8-mmq [IN_F OUT_F M]     the seed's battery, or one shape
//! kernel-oracle case fp8-mmq --in-f .. --out-f .. --m .. --arm exact|fold|rand --seed 0x..
//! kernel-oracle mutant fp8-mmq [NAME -o FILE]    planted-bug candidate kernels (and the cuBLASLt peer's)
//! kernel-oracle check moe-tables                 the MoE verify-rows tables gate
//! kernel-oracle case moe-tables --n-expert .. --n-pairs .. --bases a,b,c --strides a,b,c --seed 0x..
//! kernel-oracle check gdn                        the Gated DeltaNet gate (seed 003)
//! kernel-oracle case gdn --num-k .. --num-v .. --d-conv .. --t .. --seed 0x.. [knobs]
//! kernel-oracle check mul-mat [--full]           the WGSL GEMM gate (wgpu)
//! kernel-oracle case mul-mat --dtype q4_K --m .. --n .. --k .. --arm exact|random|bal --seed 0x.. [--wg 16,16,16]
//! kernel-oracle mutant fp8-mmq|moe-tables|gdn|mul-mat [NAME -o FILE]
//! ```
//! Exit status: 0 all green, 1 any failure, 2 cannot run (no CUDA device,
//! no wgpu adapter, bad arguments).
//!
//! `KERNEL_ORACLE_FP8_MMQ=cublaslt` runs the FP8 commands' GEMM on
//! cuBLASLt (`device::cuda::CublasLtFp8`) instead of the kernel source's
//! MMQ; `cublaslt-unpadded` is that peer with a planted bug; `builtin` (or
//! unset) is the default; any other value exits 2.

use clap::{Parser, Subcommand, ValueEnum};
use kernel_oracle::fp8_mmq::{self, gate, report, Arm, CaseSpec, Knobs, Outcome};
use kernel_oracle::{gdn, moe_tables, mul_mat};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kernel-oracle",
    version,
    about = "Checks GPU inference kernels against the core oracle"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a gate (a deterministic battery) and print its table.
    Check {
        #[command(subcommand)]
        gate: Gate,
    },
    /// Run one case (the reproduction printed by a fuzzer or a gate).
    Case {
        #[command(subcommand)]
        case: Case,
    },
    /// Write a planted-bug candidate kernel (the builtin source with one
    /// bug), to show that the gate and the fuzzer catch it.
    Mutant {
        #[command(subcommand)]
        mutant: MutantCmd,
    },
}

#[derive(Subcommand)]
enum MutantCmd {
    /// A mutant of cu/fp8_mmq.cu, or the cuBLASLt peer's planted bug; without NAME, list them.
    Fp8Mmq {
        /// The mutant's name.
        name: Option<String>,
        /// Where to write the candidate .cu file (`-`: standard output)
        /// [default: ./fp8_mmq-<NAME>.cu].
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// A mutant of cu/moe_tables.cu; without NAME, list them.
    MoeTables {
        /// The mutant's name.
        name: Option<String>,
        /// Where to write the candidate .cu file (`-`: standard output)
        /// [default: ./moe_tables-<NAME>.cu].
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// A mutant of cu/gdn.cu; without NAME, list them.
    Gdn {
        /// The mutant's name.
        name: Option<String>,
        /// Where to write the candidate .cu file (`-`: standard output)
        /// [default: ./gdn-<NAME>.cu].
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// A mutant of shaders/mul_mat_reg_tile.wgsl; without NAME, list them.
    MulMat {
        /// The mutant's name.
        name: Option<String>,
        /// Where to write the candidate .wgsl file (`-`: standard output)
        /// [default: ./mul_mat-<NAME>.wgsl].
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum Gate {
    /// The FP8 per-block MMQ gate (seed 000): the seed's nine ragged shapes and one more, EXACT,
    /// FOLD, CODES and RAND arms, NaN precondition, every e4m3 code decoded bit-exactly.
    Fp8Mmq {
        /// With OUT_F and M: check this one shape instead of the battery.
        in_f: Option<usize>,
        /// Output features.
        out_f: Option<usize>,
        /// Activation rows.
        m: Option<usize>,
    },
    /// The MoE verify-rows tables gate (seed 002): the seed's four cases (small strides, serving
    /// strides past 4 GiB, no macros, spread selection), the stale macro cache, offsets past 2^40
    /// bytes, special weights, 65,536 pairs, and three refusals.
    MoeTables,
    /// The Gated DeltaNet gate (seed 003): packed == chained per-row launches on all six outputs,
    /// eager and graph-replayed on rebound buffers (gate 1), and every kernel == the core oracle
    /// (gate 2).
    Gdn,
    /// The FP8 tensor-core MMA against its bit-accurate model (oracle::tensor_core): targeted
    /// vectors and 2^20 random vectors per operand-format pair, every output bit for bit.
    TensorCore,
    /// The WGSL GEMM over ggml blocks on the wgpu adapter (WGPU_BACKEND,
    /// else Vulkan); the candidate named by KERNEL_ORACLE_MUL_MAT_WGSL.
    MulMat {
        /// Seed 004's full LFM2.5 prefill shapes instead of the CI shapes.
        #[arg(long)]
        full: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ArmArg {
    Exact,
    Fold,
    Codes,
    Rand,
}

#[derive(Clone, Copy, ValueEnum)]
enum MulArmArg {
    Exact,
    Random,
    /// The BAL arm (its reproductions print `bal`).
    #[value(name = "bal", alias = "balanced")]
    Balanced,
}

#[derive(Subcommand)]
enum Case {
    /// One tensor-core probe case (the reproduction a divergence prints).
    TensorCore {
        /// The instruction: wgmma or mma-sync.
        #[arg(long, default_value = "wgmma", value_parser = parse_instruction)]
        instruction: oracle::tensor_core::Instruction,
        /// A's format: e4m3 or e5m2.
        #[arg(long, value_parser = parse_fp8_kind)]
        a: oracle::tensor_core::Fp8Kind,
        /// B's format: e4m3 or e5m2.
        #[arg(long, value_parser = parse_fp8_kind)]
        b: oracle::tensor_core::Fp8Kind,
        /// The input class: uniform, uniform-c, band, band-c, sparse, large, specials, dominant.
        #[arg(long, value_parser = parse_class)]
        class: kernel_oracle::tensor_core::Class,
        /// The data seed, decimal or 0x-hex.
        #[arg(long, value_parser = parse_u64)]
        seed: u64,
        /// Tiles of 64 x 8 outputs (at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=65536))]
        tiles: u32,
        /// Run with the accumulator input disabled (wgmma scale-d = 0).
        #[arg(long)]
        no_accumulator: bool,
    },
    /// One mul-mat case (a reproduction from a divergence report).
    MulMat {
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
        /// The gate's arm (data that make every order exact, random, or
        /// random with balanced products).
        #[arg(long, value_enum)]
        arm: MulArmArg,
        /// The data seed, decimal or 0x-hex.
        #[arg(long, value_parser = parse_u64)]
        seed: u64,
        /// WG_M,WG_N,TILE_K, comma-separated [default: 16,16,16].
        #[arg(long, value_delimiter = ',', default_values_t = [16u32, 16, 16], hide_default_value = true)]
        wg: Vec<u32>,
    },
    /// One FP8 MMQ case.
    Fp8Mmq {
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
        #[arg(long, value_enum)]
        arm: ArmArg,
        /// splitmix64 seed, decimal or 0x-hex.
        #[arg(long, value_parser = parse_u64)]
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
    },
    /// One MoE verify-rows tables case (the fuzzer's reproduction).
    MoeTables {
        #[arg(long)]
        n_expert: u32,
        #[arg(long)]
        n_pairs: u32,
        /// Gate, up and down slab bases (bytes), decimal or 0x-hex, as
        /// `A,B,C`.
        #[arg(long, required = true, value_delimiter = ',', value_parser = parse_u64)]
        bases: Vec<u64>,
        /// Gate, up and down per-expert strides (bytes), decimal or 0x-hex,
        /// as `A,B,C`.
        #[arg(long, required = true, value_delimiter = ',', value_parser = parse_u64)]
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
        /// splitmix64 seed, decimal or 0x-hex.
        #[arg(long, value_parser = parse_u64)]
        seed: u64,
    },
    /// One Gated DeltaNet case (the fuzzer's reproduction).
    Gdn {
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
        #[arg(long, value_parser = parse_u64)]
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
        /// Bit 0: a zero q head; bit 1: a zero k head.
        #[arg(long, default_value_t = 0)]
        zero_qk: u8,
        /// Do not mix transcendental specials into the inputs.
        #[arg(long)]
        no_specials: bool,
        /// Also capture the packed step in a CUDA graph and replay it on rebound buffers.
        #[arg(long)]
        graph: bool,
    },
}

fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?} is not a u64: {e}"))
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
    let engine = fp8_mmq::engine().map_err(|msg| {
        engine_failure(
            fp8_mmq::run::engine_source_fault(),
            "fp8-mmq",
            device::cuda::ENV_FP8_MMQ_CU,
            &msg,
        )
    })?;
    fp8_mmq::run::peer().map_err(|msg| {
        eprintln!("kernel-oracle: cannot run the FP8 GEMM that KERNEL_ORACLE_FP8_MMQ names: {msg}");
        ExitCode::from(2)
    })?;
    Ok(engine)
}

/// One kind of planted-bug candidates, for [`mutant`].
struct MutantKind {
    /// The command-line kind (`fp8-mmq`), also the gate's name.
    kind: &'static str,
    /// The default output file's prefix.
    file: &'static str,
    /// The candidate's file extension (`cu`, `wgsl`).
    ext: &'static str,
    /// The environment variable that selects a candidate.
    env: &'static str,
    /// `(name, what)` of every mutant.
    list: Vec<(&'static str, &'static str)>,
    /// The builtin source with mutant `name` planted, or `None` if there
    /// is no such mutant.
    apply: fn(&str) -> Option<Result<String, String>>,
    /// Planted bugs in a peer kernel (no source file to write): `(name,
    /// what, environment that selects it)`. Listed after the source
    /// mutants, each line marked `(peer; ENV=VALUE)`.
    peers: Vec<(&'static str, &'static str, String)>,
}

/// Lists the mutants of `k` (no NAME), or writes one.
fn mutant(k: MutantKind, name: Option<String>, output: Option<std::path::PathBuf>) -> ExitCode {
    let Some(name) = name else {
        if let Some(o) = &output {
            eprintln!(
                "kernel-oracle: -o {} needs a mutant's NAME; `kernel-oracle mutant {}` lists them",
                o.display(),
                k.kind
            );
            return ExitCode::from(2);
        }
        for (n, what) in &k.list {
            println!("{n:<26} {what}");
        }
        for (n, what, env) in &k.peers {
            println!("{n:<26} (peer; {env}) {what}");
        }
        return ExitCode::SUCCESS;
    };
    if let Some((_, what, env)) = k.peers.iter().find(|(n, _, _)| *n == name) {
        // A planted bug of a peer is selected by the environment; there is
        // no source file to write.
        if let Some(o) = &output {
            eprintln!(
                "kernel-oracle: {name} is a planted bug of a peer kernel, selected by {env}; it has no source file to write to {}",
                o.display()
            );
            return ExitCode::from(2);
        }
        println!("{name}: {what}");
        println!("run: {env} kernel-oracle check {}", k.kind);
        return ExitCode::SUCCESS;
    }
    let text = match (k.apply)(&name) {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
        None => {
            eprintln!(
                "kernel-oracle: no mutant {name:?}; `kernel-oracle mutant {}` lists them",
                k.kind
            );
            return ExitCode::from(2);
        }
    };
    let path = output.unwrap_or_else(|| format!("{}-{name}.{}", k.file, k.ext).into());
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
    let what = k.list.iter().find(|(n, _)| *n == name).map_or("", |m| m.1);
    println!("{}: {what}", path.display());
    println!(
        "run: {}={} kernel-oracle check {}",
        k.env,
        path.display(),
        k.kind
    );
    ExitCode::SUCCESS
}

fn fp8_mutants() -> MutantKind {
    use kernel_oracle::fp8_mmq::mutants::{apply, by_name, MUTANTS};
    MutantKind {
        kind: "fp8-mmq",
        file: "fp8_mmq",
        ext: "cu",
        env: device::cuda::ENV_FP8_MMQ_CU,
        list: MUTANTS.iter().map(|m| (m.name, m.what)).collect(),
        apply: |n| by_name(n).map(|m| apply(m, device::cuda::BUILTIN_FP8_MMQ_CU)),
        peers: vec![(
            "cublaslt-unpadded",
            "the cuBLASLt peer with its 128x128 weight scales unpadded (leading dimension ceil(in_f/128), not a multiple of 4 blocks): output columns >= 128 read the wrong scales whenever ceil(in_f/128) % 4 != 0 (EXACT arm)",
            format!("{}=cublaslt-unpadded", device::cuda::ENV_FP8_MMQ),
        )],
    }
}

fn moe_mutants() -> MutantKind {
    use kernel_oracle::moe_tables::mutants::{apply, by_name, MUTANTS};
    MutantKind {
        kind: "moe-tables",
        file: "moe_tables",
        ext: "cu",
        env: device::cuda::ENV_MOE_TABLES_CU,
        list: MUTANTS.iter().map(|m| (m.name, m.what)).collect(),
        apply: |n| by_name(n).map(|m| apply(m, device::cuda::BUILTIN_MOE_TABLES_CU)),
        peers: Vec::new(),
    }
}

fn mul_mat_mutants() -> MutantKind {
    use kernel_oracle::mul_mat::mutants::{apply, by_name, MUTANTS};
    MutantKind {
        kind: "mul-mat",
        file: "mul_mat",
        ext: "wgsl",
        env: device::wgpu::ENV_MUL_MAT_WGSL,
        list: MUTANTS.iter().map(|m| (m.name, m.what)).collect(),
        apply: |n| by_name(n).map(|m| apply(m, device::wgpu::BUILTIN_MUL_MAT_WGSL)),
        peers: Vec::new(),
    }
}

fn gdn_mutants() -> MutantKind {
    use kernel_oracle::gdn::mutants::{apply, by_name, MUTANTS};
    MutantKind {
        kind: "gdn",
        file: "gdn",
        ext: "cu",
        env: device::cuda::ENV_GDN_CU,
        list: MUTANTS.iter().map(|m| (m.name, m.what)).collect(),
        apply: |n| by_name(n).map(|m| apply(m, device::cuda::BUILTIN_GDN_CU)),
        peers: Vec::new(),
    }
}

/// The MoE tables engine, or the message to print and exit 2 with.
fn moe_engine_or_exit() -> Result<&'static device::cuda::MoeEngine, ExitCode> {
    moe_tables::engine().map_err(|msg| {
        engine_failure(
            moe_tables::run::engine_source_fault(),
            "moe-tables",
            device::cuda::ENV_MOE_TABLES_CU,
            &msg,
        )
    })
}

/// Why an engine could not be made, printed: a kernel source that does not
/// compile or load is a failing row (exit 1, with its rerun line); a
/// machine that cannot run kernels exits 2.
fn engine_failure(source_fault: bool, gate: &str, env: &str, msg: &str) -> ExitCode {
    if source_fault {
        print!("{}", kernel_oracle::source_fault_report(gate, env, msg));
        ExitCode::from(1)
    } else {
        eprintln!("kernel-oracle: cannot run the CUDA kernels: {msg}");
        ExitCode::from(2)
    }
}

/// The GDN engine, or the message to print and exit 2 with.
fn gdn_engine_or_exit() -> Result<&'static device::cuda::GdnEngine, ExitCode> {
    gdn::engine().map_err(|msg| {
        engine_failure(
            gdn::run::engine_source_fault(),
            "gdn",
            device::cuda::ENV_GDN_CU,
            &msg,
        )
    })
}

fn gdn_case(spec: &gdn::CaseSpec) -> ExitCode {
    let data = match spec.generate() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kernel-oracle: {e}");
            return ExitCode::from(2);
        }
    };
    let engine = match gdn_engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("kernel source: {}", engine.kernel_source());
    println!("{}", gdn::report::table_header());
    let want = gdn::reference(&data);
    let rows = gdn::judge_case(engine, spec, &data, &want, spec.graph);
    for row in &rows {
        println!("{}", gdn::report::table_row(row));
    }
    if rows.iter().all(gdn::Row::pass) {
        ExitCode::SUCCESS
    } else {
        print!(
            "{}",
            gdn::report::divergence(spec, &rows, &engine.kernel_source(), None)
        );
        ExitCode::from(1)
    }
}

fn moe_case(spec: &moe_tables::CaseSpec) -> ExitCode {
    let engine = match moe_engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    println!("kernel source: {}", engine.kernel_source());
    println!("{}", moe_tables::report::table_header());
    let data = spec.generate();
    let v = moe_tables::gate::run_one(engine, "case", &data);
    if v.pass() {
        ExitCode::SUCCESS
    } else {
        print!(
            "{}",
            moe_tables::report::divergence(spec, &v, &engine.kernel_source(), None)
        );
        ExitCode::from(1)
    }
}

/// Validates a shape for the kernels (`Shape::new`, then the kernels' i32
/// index range) before anything is generated or launched; the message to
/// print and exit 2 with otherwise.
fn parse_dtype(s: &str) -> Result<oracle::ggml::Dtype, String> {
    oracle::ggml::Dtype::ALL
        .into_iter()
        .find(|d| d.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| format!("{s:?} is not one of f32, q4_0, q8_0, q4_K, q6_K"))
}

fn mul_mat_engine_or_exit() -> Result<&'static device::wgpu::WgpuEngine, ExitCode> {
    mul_mat::engine().map_err(|msg| {
        eprintln!("kernel-oracle: cannot run the WGSL kernel: {msg}");
        ExitCode::from(2)
    })
}

fn mul_mat_command(cmd: Command) -> ExitCode {
    use mul_mat::gate;
    match cmd {
        Command::Check {
            gate: Gate::MulMat { full },
        } => {
            let engine = match mul_mat_engine_or_exit() {
                Ok(e) => e,
                Err(code) => return code,
            };
            let g = if full {
                gate::run(engine, &gate::LFM_SHAPES, &gate::GEOMETRIES[..1])
            } else {
                gate::run(engine, &gate::CI_SHAPES, &gate::GEOMETRIES)
            };
            if g.failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Case {
            case:
                Case::MulMat {
                    dtype,
                    m,
                    n,
                    k,
                    arm,
                    seed,
                    wg,
                },
        } => {
            let spec = mul_mat::CaseSpec {
                dtype,
                m,
                n,
                k,
                arm: match arm {
                    MulArmArg::Exact => mul_mat::Arm::Exact,
                    MulArmArg::Random => mul_mat::Arm::Random,
                    MulArmArg::Balanced => mul_mat::Arm::Balanced,
                },
                seed,
            };
            if let Err(e) = spec.valid() {
                eprintln!("kernel-oracle: {e}");
                return ExitCode::from(2);
            }
            if wg.len() != 3 {
                eprintln!("kernel-oracle: --wg takes WG_M,WG_N,TILE_K, got {wg:?}");
                return ExitCode::from(2);
            }
            let geom = device::wgpu::Geometry {
                wg_m: wg[0],
                wg_n: wg[1],
                tile_k: wg[2],
            };
            let engine = match mul_mat_engine_or_exit() {
                Ok(e) => e,
                Err(code) => return code,
            };
            let desc = engine.source().describe();
            println!("shader: {desc}");
            println!("adapter: {} ({})", engine.adapter_name(), engine.backend());
            println!("{}", mul_mat::report::table_header());
            match gate::run_one(engine, &spec, &geom) {
                Ok(v) => {
                    println!("{}", mul_mat::report::table_row("case", &spec, &geom, &v));
                    if v.pass() {
                        ExitCode::SUCCESS
                    } else {
                        print!(
                            "{}",
                            mul_mat::report::divergence(&spec, &geom, &v, &desc, None)
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
        _ => unreachable!("only mul-mat commands come here"),
    }
}

fn parse_instruction(s: &str) -> Result<oracle::tensor_core::Instruction, String> {
    match s {
        "wgmma" => Ok(oracle::tensor_core::Instruction::Wgmma),
        "mma-sync" => Ok(oracle::tensor_core::Instruction::MmaSync),
        _ => Err(format!("{s:?}: expected wgmma or mma-sync")),
    }
}

fn parse_fp8_kind(s: &str) -> Result<oracle::tensor_core::Fp8Kind, String> {
    match s {
        "e4m3" => Ok(oracle::tensor_core::Fp8Kind::E4m3),
        "e5m2" => Ok(oracle::tensor_core::Fp8Kind::E5m2),
        _ => Err(format!("{s:?}: expected e4m3 or e5m2")),
    }
}

fn parse_class(s: &str) -> Result<kernel_oracle::tensor_core::Class, String> {
    kernel_oracle::tensor_core::Class::parse(s).ok_or_else(|| {
        let names: Vec<&str> = kernel_oracle::tensor_core::Class::ALL
            .iter()
            .map(|c| c.name())
            .collect();
        format!("{s:?}: expected one of {}", names.join(", "))
    })
}

/// The tensor-core probe engine, or exit status 2 with the reason.
fn tensor_core_engine_or_exit() -> Result<&'static device::cuda::TensorCoreEngine, ExitCode> {
    kernel_oracle::tensor_core::engine().map_err(|e| {
        eprintln!("kernel-oracle: no CUDA device to probe: {e}");
        ExitCode::from(2)
    })
}

fn tensor_core_command(cmd: Command) -> ExitCode {
    use kernel_oracle::tensor_core as tc;
    let engine = match tensor_core_engine_or_exit() {
        Ok(e) => e,
        Err(code) => return code,
    };
    match cmd {
        Command::Check { .. } => {
            if tc::gate(engine) == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Case {
            case:
                Case::TensorCore {
                    instruction,
                    a,
                    b,
                    class,
                    seed,
                    tiles,
                    no_accumulator,
                },
        } => {
            let spec = tc::CaseSpec {
                instruction,
                fa: a,
                fb: b,
                class,
                scale_d: !no_accumulator,
                seed,
                tiles: tiles as usize,
            };
            let model = oracle::tensor_core::Model { instruction };
            match tc::run(engine, instruction, a, b, &spec.generate(), spec.scale_d) {
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
                        println!("{}", d.report(a, b, &model));
                    }
                    ExitCode::from(1)
                }
                Err(e) if matches!(e, device::cuda::DeviceError::InstructionUnavailable { .. }) => {
                    eprintln!("kernel-oracle: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    println!("FAIL: {e} ({})", spec.command());
                    ExitCode::from(1)
                }
            }
        }
        _ => unreachable!("only tensor-core commands come here"),
    }
}

/// Runs the command line; when a launch was left running (a deadline
/// passed), ends the process without waiting on the device
/// (`device::cuda::exit_process`).
fn main() -> ExitCode {
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

fn run_cli() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = kernel_oracle::oracle_choice() {
        eprintln!("kernel-oracle: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = fp8_mmq::run::gemm_choice() {
        eprintln!("kernel-oracle: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        cmd @ (Command::Check {
            gate: Gate::TensorCore,
        }
        | Command::Case {
            case: Case::TensorCore { .. },
        }) => tensor_core_command(cmd),
        cmd @ (Command::Check {
            gate: Gate::MulMat { .. },
        }
        | Command::Case {
            case: Case::MulMat { .. },
        }) => mul_mat_command(cmd),
        Command::Mutant {
            mutant: MutantCmd::MulMat { name, output },
        } => mutant(mul_mat_mutants(), name, output),
        Command::Mutant {
            mutant: MutantCmd::MoeTables { name, output },
        } => mutant(moe_mutants(), name, output),
        Command::Mutant {
            mutant: MutantCmd::Gdn { name, output },
        } => mutant(gdn_mutants(), name, output),
        Command::Check { gate: Gate::Gdn } => {
            let engine = match gdn_engine_or_exit() {
                Ok(e) => e,
                Err(code) => return code,
            };
            if gdn::gate::run(engine).failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Case {
            case:
                Case::Gdn {
                    num_k,
                    num_v,
                    d_conv,
                    t,
                    seed,
                    eps,
                    alpha_spread,
                    state_spread,
                    zero_qk,
                    no_specials,
                    graph,
                },
        } => gdn_case(&gdn::CaseSpec {
            num_k,
            num_v,
            d_conv,
            t,
            eps,
            alpha_spread,
            state_spread,
            zero_qk,
            specials: !no_specials,
            graph,
            seed,
        }),
        Command::Check {
            gate: Gate::MoeTables,
        } => {
            let engine = match moe_engine_or_exit() {
                Ok(e) => e,
                Err(code) => return code,
            };
            if moe_tables::gate::run(engine, &moe_tables::gate::cases()).failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Case {
            case:
                Case::MoeTables {
                    n_expert,
                    n_pairs,
                    bases,
                    strides,
                    macros,
                    layer,
                    bad_ids,
                    special_weights,
                    seed,
                },
        } => {
            if bases.len() != 3 || strides.len() != 3 {
                eprintln!(
                    "kernel-oracle: --bases and --strides take three values each (gate,up,down), got {} and {}",
                    bases.len(),
                    strides.len()
                );
                return ExitCode::from(2);
            }
            let slabs = [0, 1, 2].map(|i| oracle::moe_tables::Slab {
                base: bases[i],
                stride: strides[i],
            });
            moe_case(&moe_tables::CaseSpec {
                n_expert,
                n_pairs,
                slabs,
                macros,
                layer,
                bad_ids,
                weights: if special_weights {
                    moe_tables::WeightMix::Special
                } else {
                    moe_tables::WeightMix::Routing
                },
                seed,
            })
        }
        Command::Mutant {
            mutant: MutantCmd::Fp8Mmq { name, output },
        } => mutant(fp8_mutants(), name, output),
        Command::Check {
            gate: Gate::Fp8Mmq { in_f, out_f, m },
        } => {
            let shapes = match (in_f, out_f, m) {
                (None, None, None) => gate::BATTERY.to_vec(),
                (Some(a), Some(b), Some(c)) => vec![(a, b, c)],
                _ => {
                    eprintln!("kernel-oracle: give all of IN_F OUT_F M, or none for the battery");
                    return ExitCode::from(2);
                }
            };
            for &(in_f, out_f, m) in &shapes {
                if let Err(code) = valid_shape(in_f, out_f, m) {
                    return code;
                }
            }
            let engine = match engine_or_exit() {
                Ok(e) => e,
                Err(code) => return code,
            };
            if gate::run(engine, &shapes).failures == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Case {
            case:
                Case::Fp8Mmq {
                    in_f,
                    out_f,
                    m,
                    arm,
                    seed,
                    every_code,
                    zero_blocks,
                    act_exp,
                    nan_codes,
                    variant,
                },
        } => {
            let arm = match arm {
                ArmArg::Exact => Arm::Exact,
                ArmArg::Fold => Arm::Fold,
                ArmArg::Codes => Arm::Codes,
                ArmArg::Rand => Arm::Random,
            };
            let spec = CaseSpec {
                in_f,
                out_f,
                m,
                arm,
                seed,
                knobs: Knobs {
                    every_code,
                    zero_blocks,
                    act_exp,
                    nan_codes,
                    variant,
                },
            };
            if let Err(code) = valid_shape(in_f, out_f, m) {
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
            println!("fp8 GEMM: {}", fp8_mmq::run::gemm_description());
            println!("{}", report::table_header());
            let forced = variant.map(u32::from);
            let run = || {
                let schedule = fp8_mmq::run::declared_schedule(engine, &data.shape)?;
                let t0 = std::time::Instant::now();
                let mut want = fp8_mmq::reference(&data, schedule);
                let oracle_time = t0.elapsed();
                want.identify = fp8_mmq::judge::Identify::Always;
                Ok((
                    fp8_mmq::run::run_case_with_reference(engine, &data, arm, &want),
                    oracle_time,
                ))
            };
            let (outcome, oracle_time) =
                match fp8_mmq::run::with_variant(engine, forced, run).and_then(|r| r) {
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
                            report::divergence(
                                &spec,
                                &v,
                                &fp8_mmq::run::kernel_description(engine),
                                None
                            )
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
    }
}
