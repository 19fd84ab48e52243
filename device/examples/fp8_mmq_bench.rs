//! fp8_mmq_bench: TFLOP/s of the v2 FP8 MMQ kernel next to cuBLASLt's
//! per-block FP8 GEMM (torch._scaled_mm, `scripts/scaled_mm_peer.py`),
//! measured in the same run.
//!
//! usage: cargo run --release -p device --example fp8_mmq_bench [m,in_f,out_f ...]
//!
//! Default shapes: in_f = 5120, out_f = 1536 for m = 1, 16, 64, 512, 4096,
//! and 8192^3. Timing: CUDA events around back-to-back launches after a
//! warm-up, the median of 5 repetitions; MMQ kernel time alone (the
//! quantizer is timed separately; the NaN check runs once, outside). The
//! same buffers are reused across launches, as the peer does, so for the
//! small shapes the weights (7.5 MiB) stay in the 50 MiB L2 on both sides.
//! The kernel source (builtin or `KERNEL_ORACLE_FP8_MMQ_CU`) is printed in
//! the header. The peer runs when `python3 -c 'import torch'` works;
//! `KERNEL_ORACLE_PEER_SCRIPT` overrides the script's path.
//! `FP8_MMQ_BENCH_VARIANTS=all` (or a comma list, `9,10,11`) also times
//! those MMQ variants on every shape (for tuning the plan).

use device::cuda::{Engine, Result};
use oracle::fp8_mmq::Shape;
use std::path::PathBuf;
use std::process::Command;

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

fn run_ours(e: &Engine, shape: Shape) -> Result<Ours> {
    let mut p = prepare(e, shape)?;
    time_ours(e, &mut p)
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

/// `"key": number` from one flat JSON line.
fn json_num(line: &str, key: &str) -> Option<f64> {
    let pat = format!("\"{key}\":");
    let at = line.find(&pat)? + pat.len();
    let rest = line[at..].trim_start();
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// `"key": "string"` from one flat JSON line.
fn json_str(line: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\": \"");
    let at = line.find(&pat)? + pat.len();
    let end = line[at..].find('"')?;
    Some(line[at..at + end].to_string())
}

fn peer_script() -> PathBuf {
    if let Some(p) = std::env::var_os("KERNEL_ORACLE_PEER_SCRIPT") {
        return PathBuf::from(p);
    }
    let local = PathBuf::from("scripts/scaled_mm_peer.py");
    if local.exists() {
        return local;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/scaled_mm_peer.py")
}

/// A peer result: ms per call, and whether it was timed by graph replay.
type PeerResult = std::result::Result<(f64, bool), String>;

/// Peer results per shape, plus the peer's header line.
fn run_peer(shapes: &[Shape]) -> (String, Vec<PeerResult>) {
    let none = |why: String| {
        (
            why.clone(),
            shapes.iter().map(|_| Err(why.clone())).collect(),
        )
    };
    let torch_ok = Command::new("python3")
        .args(["-c", "import torch"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !torch_ok {
        return none("no peer: `python3 -c 'import torch'` fails here".into());
    }
    let mut cmd = Command::new("python3");
    cmd.arg(peer_script());
    for s in shapes {
        cmd.arg("--shape")
            .arg(format!("{},{},{}", s.m(), s.in_f(), s.out_f()));
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return none(format!("no peer: cannot run python3: {e}")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.stderr.is_empty() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut header = String::from("peer printed no header");
    let mut results: Vec<PeerResult> = shapes
        .iter()
        .map(|_| Err("peer printed no result".into()))
        .collect();
    for line in stdout.lines() {
        if let Some(p) = json_str(line, "peer") {
            header = format!(
                "{p}; torch {}, CUDA {}, {}",
                json_str(line, "torch").unwrap_or_default(),
                json_str(line, "cuda").unwrap_or_default(),
                json_str(line, "device").unwrap_or_default()
            );
            continue;
        }
        if let Some(err) = json_str(line, "error") {
            if json_num(line, "m").is_none() {
                return none(format!("peer failed: {err}"));
            }
        }
        let (Some(m), Some(k), Some(n)) = (
            json_num(line, "m"),
            json_num(line, "in_f"),
            json_num(line, "out_f"),
        ) else {
            continue;
        };
        for (i, s) in shapes.iter().enumerate() {
            if (s.m(), s.in_f(), s.out_f()) == (m as usize, k as usize, n as usize) {
                results[i] = match (json_num(line, "ms"), json_str(line, "error")) {
                    (Some(ms), _) => Ok((
                        ms,
                        json_str(line, "timing").as_deref() == Some("cuda_graph"),
                    )),
                    (None, Some(e)) => Err(format!("torch refused: {e}")),
                    (None, None) => Err("peer gave no time".into()),
                };
            }
        }
    }
    (header, results)
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
    let mut e = match Engine::new(0) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("fp8_mmq_bench: {err}");
            std::process::exit(1);
        }
    };
    println!("fp8_mmq_bench");
    println!("kernel source: {}", e.kernel_source());
    println!(
        "device: {} (sm_{}{}, {} SMs); MMQ variants exported: {}",
        e.device_name(),
        e.arch().0,
        e.arch().1,
        e.sm_count(),
        e.mmq_variants()
    );
    let mut ours = Vec::new();
    for s in &shapes {
        match run_ours(&e, *s) {
            Ok(o) => ours.push(Ok(o)),
            Err(err) => {
                eprintln!("shape {},{},{}: {err}", s.m(), s.in_f(), s.out_f());
                ours.push(Err(err.to_string()));
            }
        }
    }
    let (peer_header, peer) = run_peer(&shapes);
    println!("peer: {peer_header}");
    println!();
    println!(
        "{:<18} {:>3} {:>10} {:>9} {:>10} {:>10} {:>9} {:>7}",
        "shape m,in,out", "var", "ours ms", "TFLOP/s", "quant ms", "cuBLAS ms", "TFLOP/s", "ratio"
    );
    for (i, s) in shapes.iter().enumerate() {
        let name = format!("{},{},{}", s.m(), s.in_f(), s.out_f());
        let tf = |ms: f64| s.flops() / (ms * 1e-3) / 1e12;
        let (var, ours_ms, ours_tf, q_ms) = match &ours[i] {
            Ok(o) => {
                debug_assert_eq!(o.shape, *s);
                (
                    o.variant.to_string(),
                    format!("{:.4}", o.ms),
                    format!("{:.1}", tf(o.ms)),
                    format!("{:.4}", o.quant_ms),
                )
            }
            Err(_) => ("-".into(), "error".into(), "-".into(), "-".into()),
        };
        let (p_ms, p_tf) = match &peer[i] {
            Ok((ms, graph)) => (
                format!("{ms:.4}{}", if *graph { "" } else { "*" }),
                format!("{:.1}", tf(*ms)),
            ),
            Err(_) => ("-".into(), "-".into()),
        };
        let ratio = match (&ours[i], &peer[i]) {
            (Ok(o), Ok((p, _))) => format!("{:.2}", p / o.ms),
            _ => "-".into(),
        };
        println!("{name:<18} {var:>3} {ours_ms:>10} {ours_tf:>9} {q_ms:>10} {p_ms:>10} {p_tf:>9} {ratio:>7}");
    }
    println!();
    println!("ratio = ours TFLOP/s / cuBLASLt TFLOP/s (> 1: ours faster). TFLOP/s = 2*m*in_f*out_f / MMQ kernel time.");
    println!("cuBLAS ms: CUDA-graph replay of back-to-back calls; * = eager Python loop (graph capture failed).");
    println!("ours: back-to-back launches from Rust, CUDA events; quant ms is the activation quantizer alone.");
    for (i, p) in peer.iter().enumerate() {
        if let Err(why) = p {
            println!(
                "peer {},{},{}: {why}",
                shapes[i].m(),
                shapes[i].in_f(),
                shapes[i].out_f()
            );
        }
    }
    if let Some(variants) = bench_variants(&e) {
        println!();
        println!("variants {variants:?} (MMQ ms / TFLOP/s):");
        for s in &shapes {
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
                        line += &format!(
                            "  k{v} {:.4} ms {:>6.1}",
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
