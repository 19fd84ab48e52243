//! Microbenchmark of `shaders/mul_mat_reg_tile.wgsl` on seed 004's shapes.
//!
//! ```text
//! cargo run --release --example wgpu_gemm_bench
//! WG_M=32 WG_N=8 TILE_K=32 ITERS=50 ONLY=f32,q4_0 target/release/examples/wgpu_gemm_bench
//! SHADER=cand.wgsl target/release/examples/wgpu_gemm_bench
//! ```
//!
//! What it does, as seed 004's `wgpu_gemm_bench`: every dtype (f32, q4_0,
//! q8_0, q4_K, q6_K) on the LFM2.5-350M 512-token prefill projections
//! (`gate::LFM_SHAPES`), GFLOP/s = `2 m k n / time` per shape, the time per
//! dispatch averaged over `ITERS` dispatches in one submission after two
//! warm-up dispatches, the median of five such submissions.
//!
//! Environment, parsed strictly (set but unparseable is an error, and so is
//! 0): `WG_M`, `WG_N`, `TILE_K` (with none of them set, each shape runs at
//! the shim's choice, `WgpuEngine::default_geometry`: the shader's
//! `override` defaults, 16, 16, 16 in the production shader, with TILE_K
//! doubled on grids of few workgroups; the `geom` column says which; any
//! of them set fixes every shape's, the others from the defaults), `ITERS`
//! (default 20). The thread tile is the shader's (`const TILE_M`,
//! `const TILE_N`, read by `device::wgpu::ShaderDecl`): `TILE_M`/`TILE_N`
//! may be set only to the values the shader declares (a check that the
//! intended candidate runs), anything else is refused. `ONLY=f32,q4_K`
//! restricts the dtypes. The header echoes the adapter, the backend and
//! the geometry compiled.
//!
//! `CHECKS=off`: the timed shader is built without naga's runtime checks
//! (`WgpuEngine::new_unchecked`: no index clamping, no loop bounding, no
//! division guard), to time it as a trusted native module runs; `bounds`
//! keeps the index clamping and division guards and drops only the loop
//! bounding (`WgpuEngine::new_without_loop_bounding`), to split the cost;
//! `on` (the default) keeps them all. The production reference of
//! `SHADER=` mode keeps them either way. Only for shaders that pass the
//! gate: a shader that indexes out of bounds is then undefined behaviour
//! on the device.
//!
//! `QUANT=auto|fused|dequant` (default `auto`): the path of the quantized
//! dtypes (`device::wgpu::QuantPath`): `auto` is the shim's default
//! (`WgpuEngine::default_path`: dequantize-then-GEMM at these n when the
//! shader has a `dequant` entry), the others force one (f32 is always
//! fused). The `path` column says which ran, and `x f32` gives a quantized
//! row's time over the f32 row's on the same shape in the same run;
//! `pre + main ms` a dequant row's two dispatches timed apart (each alone,
//! `ITERS` times in one submission, as the row: each part carries its own
//! submission and wait, and runs without the other between its
//! dispatches, so the two need not add up to the row).
//!
//! `PASSES=one|each` (default `one`): the timed dispatches recorded in one
//! compute pass (`MulMatJob::dispatch`, as the gate runs them) or in a
//! pass each (what a pass costs).
//!
//! `FORM=both|auto|plain|subgroup` (default `both`): the shader forms
//! timed (`device::wgpu::Form`): `both` runs every row in each form the
//! engine has (the plain source, and its subgroup form where the adapter
//! has subgroups; the header's `forms:` line says which, or why there is
//! no subgroup form), `auto` the shim's default form, the others one form
//! (`subgroup` on an engine without one is an error). The `form` column
//! says which ran (`plain`, `sg32`), and `x f32` is over the f32 row of
//! the same form.
//!
//! `SHADER=<path>`: a candidate with the ABI at the top of the shader. Every
//! output of every shape is also computed by the production shader in
//! each of its forms (at its own declared geometry: by the contract's
//! order every geometry gives the same bits) on the same inputs and
//! compared bit for bit over the whole of `dst`: a
//! non-finite output fails, and any difference stops the sweep (exit 1).
//! Anything else that stops it (a bad variable, no adapter, a candidate
//! that does not compile) exits 2, so a tuning script can tell a wrong
//! kernel from a broken run.
//! Both kernels are specified to accumulate k in order, so a correct
//! candidate is bit-identical; a candidate that reorders the reduction on
//! purpose should be judged by `kernel-oracle check mul-mat` instead.
//!
//! Peer: on the f32 shapes, cuBLAS SGEMM through torch with TF32 off
//! (`scripts/sgemm_peer.py`, a `python3` process of its own), measured in
//! the same run when `python3` can import torch and
//! `torch.cuda.is_available()`, and `PEER` is not `0`; the table gives the
//! ratio kernel / cuBLAS. The two sides are timed differently: this
//! binary's rows by the host clock around one submission of `ITERS`
//! dispatches and the wait for it (so a row carries its share of one
//! submission and one wait: the `floor` row), the peer by CUDA events
//! around `ITERS` calls; each the median of five such windows. Both sides' calls run back to
//! back on the GPU.
//!
//! Data: RANDOM-arm data of the gate (`kernel_oracle::mul_mat`): random
//! block bytes with every f16 scale finite and its sign kept (rule
//! `GEN-FINITE`), activations uniform in [-1, 1).

use anyhow::{ensure, Context};
use device::wgpu::{Dtype, Form, Geometry, Parts, Passes, QuantPath, ShaderSource, WgpuEngine};
use kernel_oracle::mul_mat::gate::LFM_SHAPES;
use kernel_oracle::mul_mat::{Arm, CaseSpec};
use std::collections::HashMap;
use std::process::Command;

/// A positive u32 from the environment, `default` only when unset.
fn env_u32(key: &str, default: u32) -> anyhow::Result<u32> {
    let Some(raw) = std::env::var_os(key) else {
        return Ok(default);
    };
    let raw = raw.to_string_lossy();
    let v: u32 = raw
        .trim()
        .parse()
        .with_context(|| format!("{key}={raw:?} is not a u32"))?;
    ensure!(v > 0, "{key} must be at least 1, got 0");
    Ok(v)
}

/// Windows a row's time is the median of, as the peer's.
const WINDOWS: usize = 5;

/// Milliseconds a run of `job` (its `parts`, recorded by `passes`): two
/// warm-up runs, then the median over [`WINDOWS`] windows of `iters` in
/// one submission each, by the host clock.
fn time_ms(
    job: &device::wgpu::MulMatJob<'_>,
    iters: u32,
    parts: Parts,
    passes: Passes,
) -> anyhow::Result<f64> {
    job.dispatch_parts(2, parts, passes)?;
    let mut ms = Vec::with_capacity(WINDOWS);
    for _ in 0..WINDOWS {
        let t0 = std::time::Instant::now();
        job.dispatch_parts(iters, parts, passes)?;
        ms.push(t0.elapsed().as_secs_f64() * 1e3 / f64::from(iters));
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[WINDOWS / 2])
}

/// cuBLAS SGEMM ms per call by shape label, and the peer's header line.
fn run_peer(iters: u32) -> (String, HashMap<String, f64>) {
    let mut out = HashMap::new();
    if std::env::var("PEER").is_ok_and(|v| v == "0") {
        return ("peer: off (PEER=0)".into(), out);
    }
    let torch = Command::new("python3")
        .args(["-c", "import torch; assert torch.cuda.is_available()"])
        .output();
    if !torch.is_ok_and(|o| o.status.success()) {
        return ("peer: none (no python3 with CUDA torch)".into(), out);
    }
    let script = match kernel_oracle::paths::project_file(
        "scripts/sgemm_peer.py",
        env!("CARGO_MANIFEST_DIR"),
    ) {
        Ok(p) => p,
        Err(e) => return (format!("peer: none ({e})"), out),
    };
    let mut cmd = Command::new("python3");
    cmd.arg(script).args(["--iters", &iters.to_string()]);
    for s in &LFM_SHAPES {
        cmd.args(["--shape", &format!("{},{},{},{}", s.label, s.m, s.k, s.n)]);
    }
    let o = match cmd.output() {
        Ok(o) => o,
        Err(e) => return (format!("peer: cannot run python3: {e}"), out),
    };
    let text = String::from_utf8_lossy(&o.stdout);
    let mut header = format!(
        "peer: failed: {}",
        String::from_utf8_lossy(&o.stderr).trim()
    );
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["peer", rest @ ..] => header = format!("peer: {}", rest.join(" ")),
            ["shape", label, ms] => {
                if let Ok(ms) = ms.parse() {
                    out.insert(label.to_string(), ms);
                }
            }
            _ => {}
        }
    }
    (header, out)
}

/// The dtypes `ONLY` names, in `Dtype::ALL` order; every dtype when it is
/// unset. Strict: each comma-separated entry (trimmed, any case) must name a
/// dtype, so `ONLY=` (empty) and `ONLY=f32,` are errors too.
fn env_dtypes() -> anyhow::Result<Vec<Dtype>> {
    let Some(raw) = std::env::var_os("ONLY") else {
        return Ok(Dtype::ALL.to_vec());
    };
    let only = raw.to_string_lossy();
    let mut named = Vec::new();
    for o in only.split(',').map(str::trim) {
        named.push(
            Dtype::ALL
                .into_iter()
                .find(|d| o.eq_ignore_ascii_case(d.name()))
                .with_context(|| {
                    format!("ONLY={only:?}: {o:?} is not one of f32, q4_0, q8_0, q4_K, q6_K")
                })?,
        );
    }
    Ok(Dtype::ALL
        .into_iter()
        .filter(|d| named.contains(d))
        .collect())
}

/// A candidate's output differs from the production shader's, or is not
/// finite: the verdict the sweep exists for (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Mismatch(String);

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wgpu_gemm_bench: {e:#}");
            std::process::ExitCode::from(if e.is::<Mismatch>() { 1 } else { 2 })
        }
    }
}

fn run() -> anyhow::Result<()> {
    let iters = env_u32("ITERS", 20)?;
    let dtypes = env_dtypes()?;
    let candidate = std::env::var_os("SHADER").filter(|p| !p.is_empty());
    let source = match &candidate {
        Some(p) => ShaderSource::from_file(std::path::Path::new(p))?,
        None => ShaderSource::builtin(),
    };
    let passes = match std::env::var("PASSES").as_deref() {
        Err(_) | Ok("one") => Passes::One,
        Ok("each") => Passes::Each,
        Ok(other) => anyhow::bail!("PASSES={other:?}: one or each"),
    };
    let quant = match std::env::var("QUANT").as_deref() {
        Err(_) | Ok("auto") => None,
        Ok("fused") => Some(QuantPath::Fused),
        Ok("dequant") => Some(QuantPath::Dequant),
        Ok(other) => anyhow::bail!("QUANT={other:?}: auto, fused or dequant"),
    };
    let engine = match std::env::var("CHECKS").as_deref() {
        Err(_) | Ok("on") => WgpuEngine::new(source)?,
        // SAFETY: CHECKS=bounds is the user's statement that the shader
        // terminates for these shapes (every loop of a shader that passed
        // the gate is counted by its uniforms); indices stay clamped.
        Ok("bounds") => unsafe { WgpuEngine::new_without_loop_bounding(source)? },
        // SAFETY: CHECKS=off is the user's statement that the shader stays
        // in bounds, terminates and never divides by zero for these shapes
        // (it passed the gate); the shim still checks every shape and
        // length first.
        Ok("off") => unsafe { WgpuEngine::new_unchecked(source)? },
        Ok(other) => anyhow::bail!("CHECKS={other:?}: on, bounds or off"),
    };
    let forms: Vec<Form> = match std::env::var("FORM").as_deref() {
        Err(_) | Ok("both") => engine.forms(),
        Ok("auto") => vec![engine.default_form()],
        Ok("plain") => vec![Form::Plain],
        Ok("subgroup") => {
            if let Err(reason) = engine.subgroup_form() {
                anyhow::bail!("FORM=subgroup: {reason}");
            }
            vec![Form::Subgroup]
        }
        Ok(other) => anyhow::bail!("FORM={other:?}: both, auto, plain or subgroup"),
    };
    let decl = *engine.decl();
    let geom = Geometry {
        wg_m: env_u32("WG_M", decl.geometry.wg_m)?,
        wg_n: env_u32("WG_N", decl.geometry.wg_n)?,
        tile_k: env_u32("TILE_K", decl.geometry.tile_k)?,
    };
    // None of the three set: each shape at the shim's own geometry.
    let fixed = ["WG_M", "WG_N", "TILE_K"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    let (tm, tn) = (
        env_u32("TILE_M", decl.tile_m)?,
        env_u32("TILE_N", decl.tile_n)?,
    );
    ensure!(
        tm == decl.tile_m && tn == decl.tile_n,
        "TILE_M/TILE_N are the shader's (`const TILE_M`/`TILE_N`, unrolled by hand): {} \
         declares {}x{}, the environment asks for {tm}x{tn}",
        engine.source().describe(),
        decl.tile_m,
        decl.tile_n
    );
    let production = match candidate {
        Some(_) => Some(WgpuEngine::new(ShaderSource::builtin())?),
        None => None,
    };
    geom.validate(&decl, engine.limits())?;
    println!("adapter: {} ({})", engine.adapter_name(), engine.backend());
    println!(
        "{}; timed: {}",
        kernel_oracle::mul_mat::gate::form_line(&engine),
        engine.form_labels(&forms)
    );
    if let Some(p) = &production {
        println!("reference: {}", kernel_oracle::mul_mat::gate::form_line(p));
    }
    println!(
        "shader: {}{}{}",
        engine.source().describe(),
        match (engine.runtime_checks(), engine.loop_bounding()) {
            (true, true) => "",
            (true, false) => " (CHECKS=bounds: built without loop bounding)",
            _ => " (CHECKS=off: built without runtime checks)",
        },
        if production.is_some() {
            " (every output diffed bit for bit against the production shader)"
        } else {
            ""
        }
    );
    println!(
        "geometry{}: WG_M={} WG_N={} TILE_M={} TILE_N={} TILE_K={} STAGES={} -> {} threads/wg, \
         {}x{} outputs/wg, {:.1} KiB workgroup memory; ITERS={iters}",
        if fixed {
            ""
        } else {
            " (declared; each shape's own in the geom column)"
        },
        geom.wg_m,
        geom.wg_n,
        decl.tile_m,
        decl.tile_n,
        geom.tile_k,
        decl.stages,
        geom.wg_m * geom.wg_n,
        geom.block_m(&decl),
        geom.block_n(&decl),
        geom.workgroup_bytes(&decl) as f64 / 1024.0
    );
    // The floor of a timed dispatch: one workgroup's job (64 x 64 outputs,
    // k 16), timed as every row.
    {
        let (m, n, k) = (64, 64, 16);
        let data = CaseSpec {
            dtype: Dtype::F32,
            m,
            n,
            k,
            arm: Arm::Random,
            seed: 1,
        }
        .generate();
        let g = engine.default_geometry(m, n, k);
        let job = engine.prepare_path(
            Dtype::F32,
            g,
            QuantPath::Fused,
            m,
            n,
            k,
            &data.src0,
            &data.src1,
        )?;
        let us = 1e3 * time_ms(&job, iters, Parts::Both, passes)?;
        let (gx, gy) = job.grid();
        println!(
            "floor: {us:.1} us a dispatch ({m}x{k}x{n} f32, {gx}x{gy} workgroups; PASSES={passes:?})"
        );
    }
    let (peer_header, peer) = if dtypes.contains(&Dtype::F32) {
        run_peer(iters)
    } else {
        ("peer: not run (no f32 in ONLY)".into(), HashMap::new())
    };
    println!("{peer_header}");
    println!();
    println!(
        "{:<5} {:<9} {:>5} {:>5} {:>4}  {:>8} {:>9} {:<7} {:<8}  {:>9} {:>10}  {:>10} {:>9} {:>6}  pre + main ms",
        "dtype",
        "shape",
        "m",
        "k",
        "n",
        "geom",
        "grid",
        "path",
        "form",
        "ms",
        "GFLOP/s",
        "cuBLAS",
        "ratio",
        "x f32"
    );
    let mut f32_ms: HashMap<(&str, Form), f64> = HashMap::new();
    for &dtype in &dtypes {
        for s in &LFM_SHAPES {
            for &form in &forms {
                let data = CaseSpec {
                    dtype,
                    m: s.m,
                    n: s.n,
                    k: s.k,
                    arm: Arm::Random,
                    seed: 0x0004_BE4C,
                }
                .generate();
                let path = match quant {
                    Some(QuantPath::Dequant) if dtype != Dtype::F32 => QuantPath::Dequant,
                    Some(_) => QuantPath::Fused,
                    None => engine.default_path(dtype, s.m, s.n, s.k),
                };
                let geom = match fixed {
                    true => geom,
                    false => engine.default_geometry(s.m, s.n, s.k),
                };
                let job = engine.prepare_form(
                    dtype, geom, path, form, s.m, s.n, s.k, &data.src0, &data.src1,
                )?;
                let ms = time_ms(&job, iters, Parts::Both, passes)?;
                // Against every form of the production shader.
                let refs = production
                    .iter()
                    .flat_map(|p| p.forms().into_iter().map(move |f| (p, f)));
                for (p, pform) in refs {
                    let got = job.read()?;
                    let pg = p.decl().geometry;
                    let ppath = p.default_path(dtype, s.m, s.n, s.k);
                    let want = p.mul_mat_form(
                        dtype, pg, ppath, pform, s.m, s.n, s.k, &data.src0, &data.src1,
                    )?;
                    if let Some(i) = got.iter().position(|v| !v.is_finite()) {
                        return Err(Mismatch(format!(
                        "{} {}: non-finite output dst[n={}, m={}] = {} — the diff would validate nothing",
                        dtype.name(),
                        s.label,
                        i / s.m,
                        i % s.m,
                        got[i]
                    ))
                    .into());
                    }
                    let diff = got
                        .iter()
                        .zip(&want)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    if let Some(i) = got
                        .iter()
                        .zip(&want)
                        .position(|(a, b)| a.to_bits() != b.to_bits())
                    {
                        return Err(Mismatch(format!(
                            "{} {} ({} form): {diff} of {} outputs differ from the production \
                         shader's {} form, first dst[n={}, m={}]: candidate {:e}, production {:e} \
                         — the sweep stops here",
                            dtype.name(),
                            s.label,
                            form.name(),
                            got.len(),
                            pform.name(),
                            i / s.m,
                            i % s.m,
                            got[i],
                            want[i]
                        ))
                        .into());
                    }
                }
                // The dequant path's two dispatches timed apart, the same way:
                // where a quantized row's time over f32 goes.
                let parts = if job.path() == QuantPath::Dequant {
                    let pre = time_ms(&job, iters, Parts::Pre, passes)?;
                    let main = time_ms(&job, iters, Parts::Main, passes)?;
                    format!("{pre:.3} + {main:.3}")
                } else {
                    "-".to_string()
                };
                let gflops = 2.0 * (s.m * s.k * s.n) as f64 / (ms * 1e6);
                let (g0, g1) = job.grid();
                let (peer_col, ratio) = match (dtype, peer.get(s.label)) {
                    (Dtype::F32, Some(&pm)) => {
                        let pg = 2.0 * (s.m * s.k * s.n) as f64 / (pm * 1e6);
                        (format!("{pg:10.1}"), format!("{:9.3}", gflops / pg))
                    }
                    _ => (format!("{:>10}", "-"), format!("{:>9}", "-")),
                };
                if dtype == Dtype::F32 {
                    f32_ms.insert((s.label, form), ms);
                }
                let vs_f32 = match f32_ms.get(&(s.label, form)) {
                    Some(&f) if dtype != Dtype::F32 => format!("{:6.2}", ms / f),
                    _ => format!("{:>6}", "-"),
                };
                println!(
                "{:<5} {:<9} {:>5} {:>5} {:>4}  {:>8} {:>4}x{:<4} {:<7} {:<8}  {:9.3} {:10.1}  {peer_col} {ratio} {vs_f32}  {parts}",
                dtype.name(),
                s.label,
                s.m,
                s.k,
                s.n,
                format!("{}x{}x{}", geom.wg_m, geom.wg_n, geom.tile_k),
                g0,
                g1,
                job.path().name(),
                engine.form_label(job.form()),
                ms,
                gflops
            );
            }
        }
    }
    Ok(())
}
