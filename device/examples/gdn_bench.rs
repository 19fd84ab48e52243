//! One Gated DeltaNet layer of Qwen3-Next (num_k = 16, num_v = 32,
//! d_conv = 4) on the device: per-token decode (t = 1) and a t = 8 verify
//! step, each as chained per-row launches (3 per row), as the packed step
//! (3 launches) and as a replay of the packed step's CUDA graph, timed
//! back to back with CUDA events; next to a device-to-device copy measured
//! in the same run.
//!
//! Bytes per call are the packed program's useful traffic, the same figure
//! for every mode: conv (inputs, weights, ring read and written, outputs,
//! ring snapshots), prep (conv outputs read; q, k, v, beta, g written),
//! scan (q, k, v, beta, g read; the state read once and written once; o;
//! state snapshots). Chained launches move more than that (the state is
//! read and written once per row), so their GB/s is an effective rate.
//! The copy's rate counts its bytes read plus written.
//!
//! `cargo run --release -p device --example gdn_bench`

use device::cuda::{gdn_shape, Buffer, GdnEngine, GdnStep, Result};
use oracle::gdn::{default_scale, GdnShape};

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
    let shape = gdn_shape(16, 32, 128, 4, t)?;
    let w = e.upload_weights(
        &shape,
        &varied(shape.conv_w_len(), 1, 0.5),
        &varied(32, 2, 0.5),
        &varied(32, 3, 1.0),
        1e-6,
        default_scale(),
    )?;
    let st = e.new_state(
        &shape,
        &varied(shape.ring_len(), 4, 1.0),
        &varied(shape.state_len(), 5, 0.3),
        None,
    )?;
    let l = Layer {
        qkv: varied(t * shape.conv_dim(), 6, 1.0),
        beta_raw: varied(t * 32, 7, 2.0),
        alpha: varied(t * 32, 8, 2.0),
        shape,
    };
    let mut s = e.new_step(&shape, w, st)?;
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

fn main() -> Result<()> {
    let e = GdnEngine::new(0)?; // guards off: launches only, no synchronisation
    println!("device: {}", e.device_name());
    println!("kernel source: {}", e.kernel_source());

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
        let ms = e.time_ms(iters, || e.copy(&src, &mut dst))?;
        copy_gbs.push((label, ms * 1e3, 2.0 * 4.0 * len as f64 / (ms * 1e-3) / 1e9));
    }
    let peak = copy_gbs[1].2;

    println!(
        "{:<28} {:>3} {:>9} {:>10} {:>12} {:>9} {:>11}",
        "mode", "t", "launches", "us/call", "MiB/call", "GB/s", "% of copy"
    );
    for (label, us, gbs) in &copy_gbs {
        println!(
            "{:<28} {:>3} {:>9} {:>10.2} {:>12} {:>9.1} {:>10.1}%",
            label,
            "-",
            1,
            us,
            "-",
            gbs,
            100.0 * gbs / peak
        );
    }
    for t in [1usize, 8] {
        let (l, mut st) = step(&e, t)?;
        let s = l.shape;
        let bytes = useful_bytes(&s);
        let iters = 2000 / t;
        let row = |mode: &str, launches: usize, ms: f64| {
            let gbs = bytes / (ms * 1e-3) / 1e9;
            println!(
                "{:<28} {:>3} {:>9} {:>10.2} {:>12.2} {:>9.1} {:>10.1}%",
                mode,
                t,
                launches,
                ms * 1e3,
                bytes / (1 << 20) as f64,
                gbs,
                100.0 * gbs / peak
            );
        };

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
        let mut conv_out = e.alloc_output::<f32>(s.conv_dim())?;
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
        // same data, packed == chained on the last row's o, the final state
        // and the final ring, bit for bit.
        chain(&mut cst, &mut o)?;
        e.run_step(&mut st)?;
        let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let vd = s.value_dim();
        let o_packed = e.download(st.o())?;
        assert_eq!(
            bits(e.download(&o)?),
            bits(o_packed[(t - 1) * vd..].to_vec()),
            "packed and chained o differ"
        );
        assert_eq!(
            bits(e.download(cst.after_row(t - 1))?),
            bits(e.download(st.final_state())?),
            "packed and chained final states differ"
        );
        assert_eq!(
            bits(e.download(cst.ring())?),
            bits(e.download(st.state().ring())?),
            "packed and chained final rings differ"
        );
        row(
            "chained per-row launches",
            3 * t,
            e.time_ms(iters, || chain(&mut cst, &mut o))?,
        );
        row(
            "packed step",
            3,
            e.time_ms(iters, || e.run_step(&mut st).map(|_| ()))?,
        );
        let g = e.capture_step(st)?;
        g.launch()?;
        e.synchronize()?;
        row(
            "packed step, graph replay",
            3,
            e.time_ms(iters, || g.launch().map(|_| ()))?,
        );
    }
    println!("GB/s = the packed program's useful bytes per call / time per call; % of copy: of the 256 MiB device-to-device copy's GB/s (bytes read + written) measured above");
    Ok(())
}
