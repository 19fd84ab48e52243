//! Quick timing of the oracle's fast paths on one shape, per SIMD target,
//! with the spec as the peer when asked (the benchmark proper is
//! `cargo bench --bench oracle`).
//!
//! ```text
//! cargo run --release --example oracle_speed -- IN_F OUT_F M [--spec] [--reps N] [--target T]
//! ```
//!
//! `--target` (`generic`, `avx2`, `avx512`) times that target alone.
//!
//! Prints, for the quantizer and the GEMM, the best time of `N` calls
//! (default 5) on every target this CPU runs, in GFLOP/s (GEMM:
//! `2 * m * in_f * out_f`) or Melem/s (quantizer), and checks that every
//! target gives the same bits (and the spec's, with `--spec`, which runs
//! the spec once: minutes at large shapes).

use kernel_oracle::fp8_mmq::fast::{mmq_v2_fast_with, quantize_activations_fast_with, Simd};
use kernel_oracle::fp8_mmq::{Arm, CaseSpec};
use std::time::Instant;

fn usage() -> ! {
    eprintln!(
        "usage: oracle_speed IN_F OUT_F M [--spec] [--reps N] [--target generic|avx2|avx512]"
    );
    std::process::exit(2)
}

/// Best wall time of `reps` calls of `f`, seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mut dims = Vec::new();
    let (mut spec, mut reps, mut only) = (false, 5, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--spec" => spec = true,
            "--target" => {
                let name = args.next().unwrap_or_else(|| usage());
                only = Some(
                    Simd::ALL
                        .into_iter()
                        .find(|t| t.name() == name)
                        .unwrap_or_else(|| usage()),
                );
            }
            "--reps" => {
                reps = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            _ => dims.push(a.parse::<usize>().unwrap_or_else(|_| usage())),
        }
    }
    let [in_f, out_f, m] = dims[..] else { usage() };
    let data = CaseSpec::battery(in_f, out_f, m, Arm::Random)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2)
        });
    let s = &data.shape;
    let (flops, elems) = (s.flops(), s.act_len() as f64);
    println!(
        "in_f={in_f} out_f={out_f} m={m}; detected target {}; {} rayon threads; best of {reps}",
        Simd::detected().name(),
        rayon::current_num_threads()
    );
    println!(
        "{:<10} {:>16} {:>16}",
        "target", "quantize Melem/s", "GEMM GFLOP/s"
    );

    let mut answer: Option<(Vec<u8>, Vec<u32>, Vec<u32>)> = None;
    let targets = Simd::ALL
        .into_iter()
        .filter(|t| only.map_or(t.is_available(), |o| o == *t));
    for simd in targets {
        let (mut q, mut d) = (vec![0u8; s.q_len()], vec![0f32; s.d_len()]);
        let tq = best(reps, || {
            quantize_activations_fast_with(simd, s, &data.x, &mut q, &mut d).expect("lengths")
        });
        let mut y = vec![0f32; s.out_len()];
        let ty = best(reps, || {
            mmq_v2_fast_with(simd, s, &data.w, &data.scales, &q, &d, &mut y).expect("lengths")
        });
        println!(
            "{:<10} {:>16.1} {:>16.2}",
            simd.name(),
            elems / tq / 1e6,
            flops / ty / 1e9
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        let got = (q, bits(&d), bits(&y));
        match &answer {
            None => answer = Some(got),
            Some(first) => assert!(*first == got, "targets disagree"),
        }
    }

    if spec {
        let (q0, d0, y0) = answer.expect("at least one target runs");
        let (mut q, mut d) = (vec![0u8; s.q_len()], vec![0f32; s.d_len()]);
        let tq = best(1, || {
            oracle::fp8_mmq::quantize_activations(s, &data.x, &mut q, &mut d).expect("lengths")
        });
        let mut y = vec![0f32; s.out_len()];
        let ty = best(1, || {
            oracle::fp8_mmq::mmq_v2(s, &data.w, &data.scales, &q, &d, &mut y).expect("lengths")
        });
        println!(
            "{:<10} {:>16.1} {:>16.3}  (one call)",
            "spec",
            elems / tq / 1e6,
            flops / ty / 1e9
        );
        let same =
            q == q0 && d.iter().map(|v| v.to_bits()).eq(d0) && y.iter().map(|v| v.to_bits()).eq(y0);
        assert!(same, "the fast paths differ from the spec");
        println!("bits: every target matches the spec");
    } else {
        println!("bits: every target agrees (run with --spec to compare with the spec)");
    }
}
