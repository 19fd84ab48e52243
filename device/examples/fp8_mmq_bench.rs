//! fp8_mmq_bench: TFLOP/s of the v2 FP8 MMQ kernel next to cuBLASLt's
//! block-scaled FP8 GEMM (`device::cuda::CublasLtFp8`, in process),
//! measured in the same run, the same way.
//!
//! usage: cargo run --release -p device --example fp8_mmq_bench [m,in_f,out_f ...]
//!
//! Default shapes: in_f = 5120, out_f = 1536 for m = 1, 16, 64, 512, 4096,
//! and 8192^3. Timing, both sides alike: CUDA events on the engine's stream
//! around back-to-back launches after a warm-up, the median of 5
//! repetitions, GEMM time alone on operands prepared once (ours: the MMQ
//! launch, the quantizer timed separately, the NaN check outside; cuBLASLt:
//! `cublasLtMatmul` alone, its scale re-layout and token padding done once
//! outside the timing, as a model loader and a quantizer writing the
//! VEC128 layout would). The same buffers are reused across launches on
//! both sides, so for the small shapes the weights (7.5 MiB) stay in the
//! 50 MiB L2 on both. The kernel source (builtin or
//! `KERNEL_ORACLE_FP8_MMQ_CU`) and the cuBLASLt version are printed in the
//! header. `KERNEL_ORACLE_FP8_MMQ=cublaslt` (or `cublaslt-unpadded`) makes
//! "ours" the peer itself (ratio about 1: a check of the timing's
//! symmetry); any other value but `builtin` exits 2.
//! `FP8_MMQ_BENCH_VARIANTS=all` (or a comma list, `9,10,11`) also times
//! those MMQ variants on every shape (for tuning the plan). Needs nothing
//! outside the binary but the CUDA libraries (libcuda, libnvrtc,
//! libcublasLt), so it runs from the GPU bundle unpacked anywhere.

use device::cuda::{CublasLtFp8, Engine, Fp8Gemm, Result, WeightScaleLayout};
use oracle::fp8_mmq::Shape;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u32 << 24) as f32
    }
}

/// Median over 5 repetitions of `iters` timed calls, in ms per call;
/// `iters` is sized from a short trial so one repetition takes ~50 ms.
fn median_ms(e: &Engine, mut f: impl FnMut() -> Result<()>) -> Result<(f64, usize)> {
    for _ in 0..3 {
        f()?;
    }
    let trial = e.time_ms(3, &mut f)?.max(1e-4);
    let iters = ((50.0 / trial) as usize).clamp(10, 2000);
    let mut reps = Vec::new();
    for _ in 0..5 {
        reps.push(e.time_ms(iters, &mut f)?);
    }
    reps.sort_by(f64::total_cmp);
    Ok((reps[2], iters))
}

struct Ours {
    shape: Shape,
    variant: u32,
    ms: f64,
    quant_ms: f64,
}

/// One shape's device buffers (random finite weights, real-valued scales
/// and activations: never time zeros), quantized once.
struct Prepared {
    shape: Shape,
    w: device::cuda::Buffer<u8>,
    s: device::cuda::Buffer<f32>,
    x: device::cuda::Buffer<f32>,
    q: device::cuda::Buffer<u8>,
    d: device::cuda::Buffer<f32>,
    y: device::cuda::Buffer<f32>,
}

fn prepare(e: &Engine, shape: Shape) -> Result<Prepared> {
    let mut rng =
        Rng(shape.m() as u64 ^ (shape.in_f() as u64) << 20 ^ (shape.out_f() as u64) << 40);
    let w: Vec<u8> = (0..shape.weight_len())
        .map(|_| {
            let c = (rng.next() >> 56) as u8;
            if c & 0x7F == 0x7F {
                c & 0xBF
            } else {
                c
            }
        })
        .collect();
    let s: Vec<f32> = (0..shape.scale_len())
        .map(|_| 0.002 + 0.5 * rng.unit())
        .collect();
    let x: Vec<f32> = (0..shape.act_len())
        .map(|_| 2.0 * rng.unit() - 1.0)
        .collect();
    let (w, s, x) = (e.upload(&w)?, e.upload(&s)?, e.upload(&x)?);
    let (q, d) = e.quantize(&x, &shape)?;
    let y = e.alloc_output::<f32>(shape.out_len())?;
    Ok(Prepared {
        shape,
        w,
        s,
        x,
        q,
        d,
        y,
    })
}

/// Times the MMQ (the variant the plan picks, or the forced one) and the
/// quantizer on prepared buffers.
fn time_ours(e: &Engine, p: &mut Prepared) -> Result<Ours> {
    let shape = p.shape;
    let cw = e.check_weights(&p.w)?;
    let plan = e.plan(&shape)?;
    let (sb, q, d, y) = (&p.s, &p.q, &p.d, &mut p.y);
    let (ms, _) = median_ms(e, || e.mmq_into(&cw, sb, q, d, &shape, y))?;
    let (xb, q, d) = (&p.x, &mut p.q, &mut p.d);
    let (quant_ms, _) = median_ms(e, || e.quantize_into(xb, &shape, q, d))?;
    e.synchronize()?;
    Ok(Ours {
        shape,
        variant: plan.variant,
        ms,
        quant_ms,
    })
}

/// The variants `FP8_MMQ_BENCH_VARIANTS` asks for: `all`, or a comma list.
fn bench_variants(e: &Engine) -> Option<Vec<u32>> {
    let v = std::env::var("FP8_MMQ_BENCH_VARIANTS").ok()?;
    if v == "all" {
        return Some((0..e.mmq_variants()).collect());
    }
    Some(
        v.split(',')
            .filter_map(|t| t.trim().parse().ok())
            .filter(|&t| t < e.mmq_variants())
            .collect(),
    )
}

/// Times `peer`'s GEMM on `p`'s buffers (prepared once, then
/// `cublasLtMatmul` alone), ms per call; `Err` with the reason when the
/// peer refuses the shape or fails.
fn time_peer(e: &Engine, peer: &CublasLtFp8, p: &Prepared) -> std::result::Result<f64, String> {
    let cw = e.check_weights(&p.w).map_err(|x| x.to_string())?;
    let mut ops = peer
        .prepare(&cw, &p.s, &p.q, &p.d, &p.shape)
        .map_err(|x| x.to_string())?;
    let (ms, _) = median_ms(e, || peer.run(&mut ops)).map_err(|x| x.to_string())?;
    e.synchronize().map_err(|x| x.to_string())?;
    Ok(ms)
}

fn parse_shapes() -> std::result::Result<Vec<Shape>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dims: Vec<(usize, usize, usize)> = if args.is_empty() {
        vec![
            (1, 5120, 1536),
            (16, 5120, 1536),
            (64, 5120, 1536),
            (512, 5120, 1536),
            (4096, 5120, 1536),
            (8192, 8192, 8192),
        ]
    } else {
        let mut v = Vec::new();
        for a in args {
            let p: Vec<usize> = a
                .split(',')
                .map(|t| {
                    t.parse()
                        .map_err(|_| format!("bad shape {a:?}: want m,in_f,out_f"))
                })
                .collect::<std::result::Result<_, _>>()?;
            if p.len() != 3 {
                return Err(format!("bad shape {a:?}: want m,in_f,out_f"));
            }
            v.push((p[0], p[1], p[2]));
        }
        v
    };
    dims.into_iter()
        .map(|(m, k, n)| Shape::new(m, k, n).map_err(|e| e.to_string()))
        .collect()
}

fn main() {
    let shapes = match parse_shapes() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let gemm = match Fp8Gemm::from_env() {
        Ok(g) => g,
        Err(err) => {
            eprintln!("fp8_mmq_bench: {err}");
            std::process::exit(2);
        }
    };
    let e = match Engine::new(0) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("fp8_mmq_bench: {err}");
            std::process::exit(1);
        }
    };
    // The peer column: cuBLASLt with the layout it needs.
    let peer = CublasLtFp8::new(&e, WeightScaleLayout::Padded);
    // "ours": the kernel source's MMQ, or the peer KERNEL_ORACLE_FP8_MMQ names.
    let ours_peer = match gemm {
        Fp8Gemm::Builtin => None,
        Fp8Gemm::CublasLt(layout) => match CublasLtFp8::new(&e, layout) {
            Ok(p) => Some(p),
            Err(err) => {
                eprintln!(
                    "fp8_mmq_bench: KERNEL_ORACLE_FP8_MMQ={}: {err}",
                    gemm.name()
                );
                std::process::exit(1);
            }
        },
    };
    println!("fp8_mmq_bench");
    println!("kernel source: {}", e.kernel_source());
    match &ours_peer {
        None => println!("ours: the kernel source's MMQ"),
        Some(p) => println!(
            "ours (KERNEL_ORACLE_FP8_MMQ={}): {}",
            gemm.name(),
            p.describe()
        ),
    }
    match &peer {
        Ok(p) => println!("peer: {}", p.describe()),
        Err(err) => println!("peer: none: {err}"),
    }
    println!(
        "device: {} (sm_{}{}, {} SMs); MMQ variants exported: {}",
        e.device_name(),
        e.arch().0,
        e.arch().1,
        e.sm_count(),
        e.mmq_variants()
    );
    let mut ours: Vec<std::result::Result<Ours, String>> = Vec::new();
    let mut theirs: Vec<std::result::Result<f64, String>> = Vec::new();
    for s in &shapes {
        let name = format!("{},{},{}", s.m(), s.in_f(), s.out_f());
        let mut p = match prepare(&e, *s) {
            Ok(p) => p,
            Err(err) => {
                eprintln!("shape {name}: {err}");
                ours.push(Err(err.to_string()));
                theirs.push(Err(err.to_string()));
                continue;
            }
        };
        let o = match &ours_peer {
            None => time_ours(&e, &mut p).map_err(|x| x.to_string()),
            Some(op) => time_peer(&e, op, &p).and_then(|ms| {
                let (xb, q, d) = (&p.x, &mut p.q, &mut p.d);
                let (quant_ms, _) =
                    median_ms(&e, || e.quantize_into(xb, s, q, d)).map_err(|x| x.to_string())?;
                Ok(Ours {
                    shape: *s,
                    variant: u32::MAX,
                    ms,
                    quant_ms,
                })
            }),
        };
        if let Err(err) = &o {
            eprintln!("shape {name}: ours: {err}");
        }
        ours.push(o);
        theirs.push(match &peer {
            Ok(pp) => time_peer(&e, pp, &p),
            Err(err) => Err(err.to_string()),
        });
    }
    println!();
    println!(
        "{:<18} {:>3} {:>10} {:>9} {:>10} {:>12} {:>9} {:>7}",
        "shape m,in,out",
        "var",
        "ours ms",
        "TFLOP/s",
        "quant ms",
        "cuBLASLt ms",
        "TFLOP/s",
        "ratio"
    );
    for (i, s) in shapes.iter().enumerate() {
        let name = format!("{},{},{}", s.m(), s.in_f(), s.out_f());
        let tf = |ms: f64| s.flops() / (ms * 1e-3) / 1e12;
        let (var, ours_ms, ours_tf, q_ms) = match &ours[i] {
            Ok(o) => {
                debug_assert_eq!(o.shape, *s);
                (
                    if o.variant == u32::MAX {
                        "lt".to_string()
                    } else {
                        o.variant.to_string()
                    },
                    format!("{:.4}", o.ms),
                    format!("{:.1}", tf(o.ms)),
                    format!("{:.4}", o.quant_ms),
                )
            }
            Err(_) => ("-".into(), "error".into(), "-".into(), "-".into()),
        };
        let (p_ms, p_tf) = match &theirs[i] {
            Ok(ms) => (format!("{ms:.4}"), format!("{:.1}", tf(*ms))),
            Err(_) => ("-".into(), "-".into()),
        };
        let ratio = match (&ours[i], &theirs[i]) {
            (Ok(o), Ok(p)) => format!("{:.2}", p / o.ms),
            _ => "-".into(),
        };
        println!("{name:<18} {var:>3} {ours_ms:>10} {ours_tf:>9} {q_ms:>10} {p_ms:>12} {p_tf:>9} {ratio:>7}");
    }
    println!();
    println!("ratio = ours TFLOP/s / cuBLASLt TFLOP/s (> 1: ours faster). TFLOP/s = 2*m*in_f*out_f / GEMM time.");
    println!("both: back-to-back launches from Rust on one stream, CUDA events, median of 5; quant ms is the activation quantizer alone.");
    println!("var: the MMQ variant the plan chose (lt: ours is cuBLASLt, KERNEL_ORACLE_FP8_MMQ).");
    for (i, p) in theirs.iter().enumerate() {
        if let Err(why) = p {
            println!(
                "cuBLASLt {},{},{}: {why}",
                shapes[i].m(),
                shapes[i].in_f(),
                shapes[i].out_f()
            );
        }
    }
    if let (None, Some(variants)) = (&ours_peer, bench_variants(&e)) {
        println!();
        println!("variants {variants:?} (MMQ ms / TFLOP/s / ratio to cuBLASLt's TFLOP/s in the table above):");
        for &v in &variants {
            let declared = e
                .set_mmq_variant(Some(v))
                .and_then(|_| e.plan(&shapes[0]))
                .map_or_else(|err| format!("error: {err}"), |p| p.schedule.to_string());
            println!("  k{v} declares: {declared}");
        }
        for (i, s) in shapes.iter().enumerate() {
            let mut line = format!("{:<18}", format!("{},{},{}", s.m(), s.in_f(), s.out_f()));
            let mut p = match prepare(&e, *s) {
                Ok(p) => p,
                Err(err) => {
                    println!("{line}  error: {err}");
                    continue;
                }
            };
            for &v in &variants {
                let r = e
                    .set_mmq_variant(Some(v))
                    .and_then(|_| time_ours(&e, &mut p));
                match r {
                    Ok(o) => {
                        let ratio = match &theirs[i] {
                            Ok(p) => format!("{:.2}", p / o.ms),
                            Err(_) => "-".into(),
                        };
                        line += &format!(
                            "  k{v} {:.4} ms {:>6.1} {ratio:>5}",
                            o.ms,
                            s.flops() / (o.ms * 1e-3) / 1e12
                        )
                    }
                    Err(err) => line += &format!("  k{v} error: {err}"),
                }
            }
            println!("{line}");
        }
        let _ = e.set_mmq_variant(None);
    }
    if ours.iter().any(|o| o.is_err()) {
        std::process::exit(1);
    }
}
