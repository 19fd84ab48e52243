//! The device build of the MoE verify-rows tables against the host build
//! it replaces, measured in the same run.
//!
//! Device: `moe_vrows_tables_from_sel` on device-resident selections (status
//! zeroed, kernel launched), timed two ways: back to back with CUDA events
//! (what a captured graph pays) and launch + synchronise per call (latency).
//! Host: the oracle's `vrows_tables` into host vectors, then both tables
//! copied to the device (htod) and synchronised; and the same preceded by
//! the router readback (dtoh of ids and weights) that the device build
//! removes. 256 experts, the seed's serving strides, macro planes on.
//!
//! `cargo run --release -p device --example moe_tables_bench`

use device::cuda::{MoeEngine, Result, MOE_MAX_CTAS};
use oracle::moe_tables::{vrows_tables, Bank, Slab};
use std::time::Instant;

fn main() -> Result<()> {
    let e = MoeEngine::new(0)?;
    println!("device: {}", e.device_name());
    println!("kernel source: {}", e.kernel_source());
    let n_expert = 256usize;
    let planes: [Vec<f32>; 3] =
        [1.0f32, 2.0, 3.0].map(|o| (0..n_expert).map(|i| o + i as f32 * 1e-3).collect());
    let strides = [24u64 << 20, 24 << 20, 48 << 20];
    let bases = [0x7f00_0000_0000u64, 0x7f40_0000_0000, 0x7f80_0000_0000];
    let bank = Bank {
        n_expert,
        slabs: [0, 1, 2].map(|i| Slab {
            base: bases[i],
            stride: strides[i],
        }),
        macros: Some([&planes[0], &planes[1], &planes[2]]),
    };
    println!(
        "{:>7} {:>14} {:>14} {:>16} {:>18} {:>8} {:>8}",
        "pairs",
        "dev graph us",
        "dev sync us",
        "host+htod us",
        "readback+host us",
        "ratio",
        "ratio_rb"
    );
    for n_pairs in [8usize, 256, 65_536] {
        let iters = if n_pairs > 10_000 { 200 } else { 2_000 };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let sel: Vec<i32> = (0..n_pairs).map(|_| (next() % 256) as i32).collect();
        let selw: Vec<f32> = (0..n_pairs)
            .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32)
            .collect();
        let sel_d = e.upload(&sel)?;
        let selw_d = e.upload(&selw)?;
        let mut ptrs_d = e.alloc_output::<u64>(3 * n_pairs)?;
        let mut scl_d = e.alloc_output::<f32>(3 * n_pairs)?;
        let mut status = e.new_status()?;
        // Warm-up, and a correctness check of what is being timed.
        e.vrows_tables_into(
            &sel_d,
            &selw_d,
            0,
            &bank,
            &mut ptrs_d,
            &mut scl_d,
            &mut status,
            MOE_MAX_CTAS,
        )?;
        e.check_status(&status, &bank, n_pairs)?;
        let mut ptrs = vec![0u64; 3 * n_pairs];
        let mut scl = vec![0f32; 3 * n_pairs];
        vrows_tables(&bank, &sel, &selw, &mut ptrs, &mut scl).expect("valid bench input");
        assert_eq!(e.download(&ptrs_d)?, ptrs, "device pointers differ");
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&e.download(&scl_d)?),
            bits(&scl),
            "device scales differ"
        );

        let graph_ms = e.time_ms(iters, || {
            e.vrows_tables_into(
                &sel_d,
                &selw_d,
                0,
                &bank,
                &mut ptrs_d,
                &mut scl_d,
                &mut status,
                MOE_MAX_CTAS,
            )
        })?;
        e.synchronize()?;
        let t = Instant::now();
        for _ in 0..iters {
            e.vrows_tables_into(
                &sel_d,
                &selw_d,
                0,
                &bank,
                &mut ptrs_d,
                &mut scl_d,
                &mut status,
                MOE_MAX_CTAS,
            )?;
            e.synchronize()?;
        }
        let dev_us = t.elapsed().as_secs_f64() * 1e6 / iters as f64;

        let host = |readback: bool,
                    ptrs: &mut Vec<u64>,
                    scl: &mut Vec<f32>,
                    ptrs_d: &mut device::cuda::Buffer<u64>,
                    scl_d: &mut device::cuda::Buffer<f32>|
         -> Result<f64> {
            let t = Instant::now();
            for _ in 0..iters {
                let (s, w) = if readback {
                    (e.download(&sel_d)?, e.download(&selw_d)?)
                } else {
                    (Vec::new(), Vec::new())
                };
                let (s, w) = if readback {
                    (s.as_slice(), w.as_slice())
                } else {
                    (sel.as_slice(), selw.as_slice())
                };
                vrows_tables(&bank, s, w, ptrs, scl).expect("valid bench input");
                e.upload_into(ptrs, ptrs_d)?;
                e.upload_into(scl, scl_d)?;
                e.synchronize()?;
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / iters as f64)
        };
        let host_us = host(false, &mut ptrs, &mut scl, &mut ptrs_d, &mut scl_d)?;
        let rb_us = host(true, &mut ptrs, &mut scl, &mut ptrs_d, &mut scl_d)?;
        println!(
            "{:>7} {:>14.2} {:>14.2} {:>16.2} {:>18.2} {:>7.1}x {:>7.1}x",
            n_pairs,
            graph_ms * 1e3,
            dev_us,
            host_us,
            rb_us,
            host_us / dev_us,
            rb_us / dev_us
        );
    }
    println!("ratio = (host build + htod) / (device build, launch + sync); ratio_rb adds the router readback to the host side");
    Ok(())
}
