//! One Gated DeltaNet layer of Qwen3-Next (num_k = 16, num_v = 32,
//! d_conv = 4) on the device: per-token decode (t = 1) and a t = 8 verify
//! step, each as chained per-row launches (3 per row), as the packed twins
//! (3 launches), as the fused step (1 launch), and as replays of their CUDA
//! graphs; then 64 sequences of one row in one batched fused launch,
//! through each fused entry the source exports (the default pick first,
//! the ABI's `gdn_step_fused` and `gdn_step_fused_c2`). Timed
//! back to back with CUDA events (the median of 5 windows after a warm-up,
//! as the peer script times its own), next to peers measured in the same run:
//! a device-to-device copy, and flash-linear-attention's
//! `fused_recurrent_gated_delta_rule` (Triton) through `gdn_peer.py`,
//! looked for beside this binary (and in `scripts/` of the working
//! directory), when a `python3` with torch and fla runs it (PEER=0: off).
//!
//! Bytes per call are the packed program's useful traffic, the same figure
//! for every mode: conv (inputs, weights, ring read and written, outputs,
//! ring snapshots), prep (conv outputs read; q, k, v, beta, g written),
//! scan (q, k, v, beta, g read; the state read once and written once; o;
//! state snapshots). Chained launches move more than that (the state is
//! read and written once per row), so their GB/s is an effective rate.
//! The copy's rate counts its bytes read plus written.
//!
//! The batched row's rate is its state traffic alone: every sequence's
//! state read once and written once, `2 * B * N * 4` bytes.
//!
//! `cargo run --release -p device --example gdn_bench`

use device::cuda::{gdn_shape, Buffer, GdnEngine, GdnFusedEntry, GdnStep, Result};
use oracle::gdn::{default_scale, GdnShape};
use std::collections::HashMap;
use std::process::Command;

/// xorshift values in `[-spread, spread)`.
fn varied(len: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * spread
        })
        .collect()
}

/// The packed program's useful bytes for `shape` (see the module doc).
fn useful_bytes(s: &GdnShape) -> f64 {
    let (t, c, v, nv, n) = (s.t(), s.conv_dim(), s.value_dim(), s.num_v(), s.state_len());
    let snaps = s.snapshots();
    let conv = t * c * 2 + s.conv_w_len() + 2 * s.ring_len() + snaps * s.ring_len();
    let prep = t * c + 3 * t * v + 2 * t * nv + 2 * t * nv + 2 * nv;
    let scan = 3 * t * v + 2 * t * nv + 2 * n + t * v + snaps * n;
    4.0 * (conv + prep + scan) as f64
}

struct Layer {
    shape: GdnShape,
    qkv: Vec<f32>,
    beta_raw: Vec<f32>,
    alpha: Vec<f32>,
}

fn step(e: &GdnEngine, t: usize) -> Result<(Layer, GdnStep)> {
    step_batched(e, t, 1)
}

/// `batch` sequences of `t` rows (sequence `b`'s data drawn from seeds
/// offset by `b`; batch 1 is the single-sequence step).
fn step_batched(e: &GdnEngine, t: usize, batch: usize) -> Result<(Layer, GdnStep)> {
    let shape = gdn_shape(16, 32, 128, 4, t)?;
    let cat = |len: usize, seed: u64, spread: f32| -> Vec<f32> {
        (0..batch as u64)
            .flat_map(|b| varied(len, seed + 100 * b, spread))
            .collect()
    };
    let w = e.upload_weights(
        &shape,
        &varied(shape.conv_w_len(), 1, 0.5),
        &varied(32, 2, 0.5),
        &varied(32, 3, 1.0),
        1e-6,
        default_scale(),
    )?;
    let st = e.new_state_batched(
        &shape,
        batch,
        &cat(shape.ring_len(), 4, 1.0),
        &cat(shape.state_len(), 5, 0.3),
        None,
    )?;
    let l = Layer {
        qkv: cat(t * shape.conv_dim(), 6, 1.0),
        beta_raw: cat(t * 32, 7, 2.0),
        alpha: cat(t * 32, 8, 2.0),
        shape,
    };
    let mut s = e.new_step_batched(&shape, batch, w, st)?;
    e.set_step_inputs(&mut s, &l.qkv, &l.beta_raw, &l.alpha)?;
    Ok((l, s))
}

/// Per-row device inputs of the chained mode.
struct Rows {
    x: Vec<Buffer<f32>>,
    beta_raw: Vec<Buffer<f32>>,
    alpha: Vec<Buffer<f32>>,
}

fn rows(e: &GdnEngine, l: &Layer) -> Result<Rows> {
    let (c, nv) = (l.shape.conv_dim(), l.shape.num_v());
    let mut r = Rows {
        x: Vec::new(),
        beta_raw: Vec::new(),
        alpha: Vec::new(),
    };
    for i in 0..l.shape.t() {
        r.x.push(e.upload(&l.qkv[i * c..(i + 1) * c])?);
        r.beta_raw
            .push(e.upload(&l.beta_raw[i * nv..(i + 1) * nv])?);
        r.alpha.push(e.upload(&l.alpha[i * nv..(i + 1) * nv])?);
    }
    Ok(r)
}

/// How a row was timed, and so which of the peer's figures sits beside it.
#[derive(Clone, Copy)]
enum Timed {
    /// Launched from the host, back to back.
    Eager,
    /// One replay of a one-call graph per call.
    Graph,
    /// [`STEPS`] calls in one graph, the replay's time / [`STEPS`].
    GraphSteps,
}

/// Calls a graph in the `GraphSteps` rows (here and in the peer).
const STEPS: usize = 16;

/// fla's figures by `(batch, t)`: eager us, graph us, and us a call with
/// [`STEPS`] calls in one graph (graph capture is optional).
type Peer = HashMap<(usize, usize), (f64, Option<f64>, Option<f64>)>;

/// Milliseconds per call of `f`: three warm-up calls, then the median of
/// 5 windows of `iters` calls, each timed with CUDA events
/// (`GdnEngine::time_ms`). `gdn_peer.py` times fla the same way, so a row
/// and its peer figure are taken alike.
fn median_ms(e: &GdnEngine, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let mut reps = [0.0f64; 5];
    for r in &mut reps {
        *r = e.time_ms(iters, &mut f)?;
    }
    reps.sort_by(f64::total_cmp);
    Ok(reps[2])
}

/// Runs `gdn_peer.py` (beside this binary, else `scripts/` of the working
/// directory): its header line and its figures.
fn run_peer() -> (String, Peer) {
    let mut out = Peer::new();
    if std::env::var("PEER").as_deref() == Ok("0") {
        return ("peer fla: off (PEER=0)".into(), out);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("gdn_peer.py")));
    let script = beside
        .into_iter()
        .chain([std::path::PathBuf::from("scripts/gdn_peer.py")])
        .find(|p| p.is_file());
    let Some(script) = script else {
        return (
            "peer fla: none (no gdn_peer.py beside the binary)".into(),
            out,
        );
    };
    let o = match Command::new("python3")
        .arg(&script)
        .args(["--case", "1,1", "--case", "64,1", "--case", "1,8"])
        .args(["--steps", &STEPS.to_string()])
        .output()
    {
        Ok(o) => o,
        Err(err) => return (format!("peer fla: cannot run python3: {err}"), out),
    };
    let text = String::from_utf8_lossy(&o.stdout);
    let mut header = format!(
        "peer fla: failed: {}",
        String::from_utf8_lossy(&o.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["peer", rest @ ..] => header = format!("peer: {}", rest.join(" ")),
            ["case", b, t, eager, graph, steps] => {
                if let (Ok(b), Ok(t), Ok(eager)) = (b.parse(), t.parse(), eager.parse()) {
                    out.insert((b, t), (eager, graph.parse().ok(), steps.parse().ok()));
                }
            }
            _ => println!("{line}"),
        }
    }
    (header, out)
}

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn main() -> Result<()> {
    let e = GdnEngine::new(0)?; // guards off: launches only, no synchronisation
    println!("device: {}", e.device_name());
    println!("kernel source: {}", e.kernel_source());
    let one = gdn_shape(16, 32, 128, 4, 1)?;
    for entry in e.fused_entries() {
        let (l1, l64) = (
            e.fused_launch(&one, 1, entry),
            e.fused_launch(&one, 64, entry),
        );
        println!(
            "fused entry {entry:?}: grid, CTA size and dynamic shared memory {l1:?} at B = 1, {l64:?} at B = 64"
        );
    }
    let (peer_header, peer) = run_peer();
    println!("{peer_header}");

    // The peer: device-to-device copies, one state (2 MiB) and 256 MiB.
    let mut copy_gbs = Vec::new();
    for (label, len) in [
        ("copy 2 MiB (one state)", 1usize << 19),
        ("copy 256 MiB", 1 << 26),
    ] {
        let src = e.upload(&vec![1f32; len])?;
        let mut dst = e.upload(&vec![0f32; len])?;
        e.copy(&src, &mut dst)?;
        let iters = if len > 1 << 20 { 50 } else { 2000 };
        let ms = median_ms(&e, iters, || e.copy(&src, &mut dst))?;
        copy_gbs.push((label, ms * 1e3, 2.0 * 4.0 * len as f64 / (ms * 1e-3) / 1e9));
    }
    let peak = copy_gbs[1].2;

    println!(
        "{:<30} {:>3} {:>3} {:>8} {:>9} {:>10} {:>9} {:>10} {:>22}",
        "mode",
        "B",
        "t",
        "launches",
        "us/call",
        "MiB/call",
        "GB/s",
        "% of copy",
        "fla us (fla/ours)"
    );
    for (label, us, gbs) in &copy_gbs {
        println!(
            "{:<30} {:>3} {:>3} {:>8} {:>9.2} {:>10} {:>9.1} {:>9.1}% {:>22}",
            label,
            "-",
            "-",
            1,
            us,
            "-",
            gbs,
            100.0 * gbs / peak,
            "-"
        );
    }
    let row =
        |mode: &str, batch: usize, t: usize, launches: usize, bytes: f64, ms: f64, how: Timed| {
            let gbs = bytes / (ms * 1e-3) / 1e9;
            let us = ms * 1e3;
            let fla = match peer.get(&(batch, t)) {
                Some(&(eager, g, gs)) => match how {
                    Timed::Eager => Some(eager),
                    Timed::Graph => g,
                    Timed::GraphSteps => gs,
                }
                .map_or("-".into(), |p| format!("{p:.2} ({:.2}x)", p / us)),
                None => "-".into(),
            };
            println!(
                "{:<30} {:>3} {:>3} {:>8} {:>9.2} {:>10.2} {:>9.1} {:>9.1}% {:>22}",
                mode,
                batch,
                t,
                launches,
                us,
                bytes / (1 << 20) as f64,
                gbs,
                100.0 * gbs / peak,
                fla
            );
        };
    for t in [1usize, 8] {
        let (l, mut st) = step(&e, t)?;
        let (_, mut tw) = step(&e, t)?;
        let s = l.shape;
        let bytes = useful_bytes(&s);
        let iters = 2000 / t;

        // Chained per-row launches on their own state (the same initial
        // data), buffers and per-row inputs, with the step's weights.
        let r = rows(&e, &l)?;
        let w = e.upload_weights(
            &s,
            &varied(s.conv_w_len(), 1, 0.5),
            &varied(32, 2, 0.5),
            &varied(32, 3, 1.0),
            1e-6,
            default_scale(),
        )?;
        let mut cst = e.new_state(
            &s,
            &varied(s.ring_len(), 4, 1.0),
            &varied(s.state_len(), 5, 0.3),
            None,
        )?;
        let mut conv_out = e.alloc_intermediate(s.conv_dim())?;
        let mut heads = e.alloc_heads(&s, 1)?;
        let mut o = e.alloc_output::<f32>(s.value_dim())?;
        let mut chain = |cst: &mut device::cuda::GdnState, o: &mut Buffer<f32>| -> Result<()> {
            for i in 0..t {
                e.conv_row(&s, &r.x[i], &w, cst, i, &mut conv_out)?;
                e.prep_row(&s, &w, &conv_out, &r.beta_raw[i], &r.alpha[i], &mut heads)?;
                e.scan_row(&s, &heads, w.scale, cst, i, o)?;
            }
            Ok(())
        };
        // What is timed computes the same thing: one call each from the
        // same data, fused == twins == chained on the last row's o, the
        // final state and the final ring, bit for bit.
        chain(&mut cst, &mut o)?;
        e.run_step(&mut st)?;
        e.run_step_twins(&mut tw)?;
        let vd = s.value_dim();
        for (name, step) in [("fused", &st), ("twins", &tw)] {
            let o_packed = e.download(step.o())?;
            assert_eq!(
                bits(e.download(&o)?),
                bits(o_packed[(t - 1) * vd..].to_vec()),
                "{name} and chained o differ"
            );
            assert_eq!(
                bits(e.download(cst.after_row(t - 1))?),
                bits(e.download(step.final_state())?),
                "{name} and chained final states differ"
            );
            assert_eq!(
                bits(e.download(cst.ring())?),
                bits(e.download(step.state().ring())?),
                "{name} and chained final rings differ"
            );
        }
        row(
            "chained per-row launches",
            1,
            t,
            3 * t,
            bytes,
            median_ms(&e, iters, || chain(&mut cst, &mut o))?,
            Timed::Eager,
        );
        row(
            "packed twins",
            1,
            t,
            3,
            bytes,
            median_ms(&e, iters, || e.run_step_twins(&mut tw).map(|_| ()))?,
            Timed::Eager,
        );
        let g = e.capture_step_twins(tw)?;
        g.launch()?;
        e.synchronize()?;
        row(
            "packed twins, graph replay",
            1,
            t,
            3,
            bytes,
            median_ms(&e, iters, || g.launch().map(|_| ()))?,
            Timed::Graph,
        );
        row(
            "fused step",
            1,
            t,
            1,
            bytes,
            median_ms(&e, iters, || e.run_step(&mut st).map(|_| ()))?,
            Timed::Eager,
        );
        let g = e.capture_step(st)?;
        g.launch()?;
        e.synchronize()?;
        row(
            "fused step, graph replay",
            1,
            t,
            1,
            bytes,
            median_ms(&e, iters, || g.launch().map(|_| ()))?,
            Timed::Graph,
        );
        // The step among other kernels of one graph (a model's decode
        // graph runs many a launch): STEPS launches a replay, time / STEPS.
        let (_, st) = step(&e, t)?;
        let g = e.capture_steps(st, STEPS)?;
        g.launch()?;
        e.synchronize()?;
        let ms = median_ms(&e, (iters / STEPS).max(2), || g.launch().map(|_| ()))?;
        row(
            &format!("fused step, {STEPS} a graph"),
            1,
            t,
            1,
            bytes,
            ms / STEPS as f64,
            Timed::GraphSteps,
        );
    }
    // Batched decode: 64 sequences, one row each, in one launch, through
    // each fused entry the source exports (the default pick first).
    let batch = 64;
    let default_entry = e.fused_entry(&one, batch);
    let mut entries = e.fused_entries();
    entries.sort_by_key(|&x| x != default_entry);
    for entry in entries {
        let tag = match entry {
            GdnFusedEntry::Main => "main",
            GdnFusedEntry::C2 => "c2",
            GdnFusedEntry::Persistent { ctas: None } => "persistent",
            // A correctness form (a CTA cap), not a speed one.
            GdnFusedEntry::Persistent { ctas: Some(_) } => continue,
        };
        let (l, mut st) = step_batched(&e, 1, batch)?;
        e.set_step_entry(&mut st, Some(entry))?;
        let state_bytes = 2.0 * 4.0 * (batch * l.shape.state_len()) as f64;
        e.run_step(&mut st)?;
        row(
            &format!("batched fused ({tag})"),
            batch,
            1,
            1,
            state_bytes,
            median_ms(&e, 100, || e.run_step(&mut st).map(|_| ()))?,
            Timed::Eager,
        );
        let g = e.capture_step(st)?;
        g.launch()?;
        e.synchronize()?;
        row(
            &format!("batched, graph ({tag})"),
            batch,
            1,
            1,
            state_bytes,
            median_ms(&e, 100, || g.launch().map(|_| ()))?,
            Timed::Graph,
        );
    }
    println!("GB/s = the packed program's useful bytes per call / time per call (batched rows: the state read and written, 2 B N 4 bytes); % of copy: of the 256 MiB device-to-device copy's GB/s (bytes read + written) measured above; fla us: the peer's time at the same (B, t) measured the same way (eager, a one-call graph replayed, or {STEPS} calls in one graph), (fla/ours) > 1 when ours is faster");
    Ok(())
}
