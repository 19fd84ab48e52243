//! The CUDA kernels against the core oracle, on a GPU (every test ignored with a reason:
//! `cargo test --release -p device --test gpu_fp8_mmq -- --ignored
//! --nocapture --test-threads=1`). Guards are on in every test.
//!
//! - `nan_count` and the quantizer are compared bit for bit.
//! - The MMQ has two arms (seed 000). EXACT: integer-valued weights and
//!   activation codes, so every partial sum inside a 128-k block is an
//!   integer below 2^24 and the hardware's summation order cannot matter;
//!   the fold `sum + (s * d) * c` has no hidden order, so the scales are
//!   arbitrary floats and the output must match bit for bit. RANDOM: all
//!   finite e4m3 codes, compared by rms_rel < 1e-5 (seed 000's bound: about
//!   two orders above the reordering noise, five below an indexing error).
//! - Every MMQ variant the source exports runs every shape.

use device::cuda::{
    byte_word, compile, nvrtc_available, DeviceError, Engine, KernelSource, ENV_FP8_MMQ_CU,
    INPUT_BAND,
};
use oracle::compare::compare_f32;
use oracle::fp8_mmq::{count_nan_magnitude, mmq, quantize_activations, Schedule, Shape};

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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u32 << 24) as f32
    }
    /// An e4m3 code that is not a NaN magnitude.
    fn finite_code(&mut self) -> u8 {
        loop {
            let c = self.byte();
            if c & 0x7F != 0x7F {
                return c;
            }
        }
    }
}

/// e4m3 codes of the integers 0, ±1, ±2, ±3, ±4, ±6, ±8.
const INT_CODES: [u8; 13] = [
    0x00, 0x38, 0xB8, 0x40, 0xC0, 0x44, 0xC4, 0x48, 0xC8, 0x4C, 0xCC, 0x50, 0xD0,
];

fn engine() -> Engine {
    let mut e = Engine::new(0).unwrap_or_else(|err| panic!("{err}"));
    e.set_guards(true);
    eprintln!(
        "device {} (sm_{}{}, {} SMs), kernel source {}",
        e.device_name(),
        e.arch().0,
        e.arch().1,
        e.sm_count(),
        e.kernel_source()
    );
    e
}

/// The oracle's MMQ under `schedule`, rows of m split over threads (rows
/// are independent).
fn oracle_mmq_under(
    schedule: &Schedule,
    shape: &Shape,
    w: &[u8],
    s: &[f32],
    q: &[u8],
    d: &[f32],
) -> Vec<f32> {
    let (m, out_f, pad, blocks) = (
        shape.m(),
        shape.out_f(),
        shape.in_f_pad(),
        shape.act_blocks(),
    );
    let mut y = vec![0f32; shape.out_len()];
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let rows = m.div_ceil(threads).max(1);
    std::thread::scope(|sc| {
        for (c, yc) in y.chunks_mut(rows * out_f).enumerate() {
            let j0 = c * rows;
            let r = yc.len() / out_f;
            sc.spawn(move || {
                let sub = Shape::new(r, shape.in_f(), out_f).unwrap();
                mmq(
                    &sub,
                    schedule,
                    w,
                    s,
                    &q[j0 * pad..(j0 + r) * pad],
                    &d[j0 * blocks..(j0 + r) * blocks],
                    yc,
                )
                .unwrap();
            });
        }
    });
    y
}

#[test]
#[ignore = "needs a CUDA device"]
fn nan_count_matches_oracle() {
    let e = engine();
    let mut rng = Rng(0x4E41_4E00);
    for len in [1usize, 3, 15, 16, 17, 255, 4097, 65_536 + 5, (1 << 22) + 7] {
        let mut w: Vec<u8> = (0..len).map(|_| rng.finite_code()).collect();
        let plants = rng.below(len as u64 / 7 + 2);
        for _ in 0..plants {
            let at = rng.below(len as u64) as usize;
            w[at] = if rng.byte() & 1 == 0 { 0x7F } else { 0xFF };
        }
        let want = count_nan_magnitude(&w) as u64;
        let buf = e.upload(&w).unwrap();
        let got = e.nan_count(&buf).unwrap();
        eprintln!("nan_count len {len:>8}: kernel {got:>6} oracle {want:>6}");
        assert_eq!(got, want, "nan_count over {len} bytes");
        match e.check_weights(&buf) {
            Ok(_) => assert_eq!(want, 0),
            Err(DeviceError::NanWeights { count }) => assert_eq!(count, want),
            Err(other) => panic!("{other}"),
        }
    }
}

/// Activations with every edge the quantizer has: zero blocks, -0.0,
/// subnormals, huge and tiny magnitudes, NaN, infinities, ties.
fn edge_activations(rng: &mut Rng, m: usize, in_f: usize) -> Vec<f32> {
    let mut x = vec![0f32; m * in_f];
    for j in 0..m {
        for b in 0..in_f.div_ceil(128) {
            let kind = rng.below(10);
            let scale = 2f32.powi(rng.below(40) as i32 - 20);
            for t in 0..128 {
                let k = b * 128 + t;
                if k >= in_f {
                    break;
                }
                let u = 2.0 * rng.unit() - 1.0;
                x[j * in_f + k] = match kind {
                    0 => 0.0,
                    1 => -0.0,
                    2 => u * 1e-40,                                  // subnormal f32
                    3 => u * 3e38,                                   // huge
                    4 => u * 1e-37,                                  // QUANT-TINY territory
                    5 if t == 5 => f32::NAN,                         // QUANT-NAN
                    6 if t == 9 => f32::INFINITY * u.signum(),       // QUANT-INF
                    7 => (rng.below(17) as f32 - 8.0) * 0.5 * scale, // many ties
                    _ => u * scale,
                };
            }
        }
    }
    x
}

#[test]
#[ignore = "needs a CUDA device"]
fn quantize_matches_oracle_bit_for_bit() {
    let e = engine();
    let mut rng = Rng(0x0051_7541);
    for (m, in_f) in [
        (1, 1),
        (1, 144),
        (3, 128),
        (5, 272),
        (2, 512),
        (7, 1000),
        (16, 5120),
        (33, 4099),
    ] {
        let shape = Shape::new(m, in_f, 1).unwrap();
        let x = edge_activations(&mut rng, m, in_f);
        let mut q = vec![0u8; shape.q_len()];
        let mut d = vec![0f32; shape.d_len()];
        quantize_activations(&shape, &x, &mut q, &mut d).unwrap();
        let xb = e.upload(&x).unwrap();
        let (qb, db) = e.quantize(&xb, &shape).unwrap();
        let (gq, gd) = (e.download(&qb).unwrap(), e.download(&db).unwrap());
        let qbad = gq.iter().zip(&q).position(|(a, b)| a != b);
        let dbad = gd
            .iter()
            .zip(&d)
            .position(|(a, b)| a.to_bits() != b.to_bits());
        eprintln!("quantize m={m:>3} in_f={in_f:>5}: q mismatch {qbad:?}, d mismatch {dbad:?}");
        if let Some(i) = qbad {
            let (j, k) = (i / shape.in_f_pad(), i % shape.in_f_pad());
            let xv = if k < in_f { x[j * in_f + k] } else { 0.0 };
            panic!(
                "q[{j}, {k}]: kernel 0x{:02X}, oracle 0x{:02X} (x = {xv:e} = 0x{:08X}, d = {:e})",
                gq[i],
                q[i],
                xv.to_bits(),
                d[j * shape.act_blocks() + k / 128]
            );
        }
        if let Some(i) = dbad {
            panic!(
                "d[{i}]: kernel {:e} (0x{:08X}), oracle {:e} (0x{:08X})",
                gd[i],
                gd[i].to_bits(),
                d[i],
                d[i].to_bits()
            );
        }
    }
}

/// One MMQ case: weights, scales, activation codes and scales (host side).
struct Case {
    shape: Shape,
    w: Vec<u8>,
    s: Vec<f32>,
    q: Vec<u8>,
    d: Vec<f32>,
}

fn make_case(rng: &mut Rng, m: usize, in_f: usize, out_f: usize, exact: bool) -> Case {
    let shape = Shape::new(m, in_f, out_f).unwrap();
    let code = |rng: &mut Rng| {
        if exact {
            INT_CODES[rng.below(INT_CODES.len() as u64) as usize]
        } else {
            rng.finite_code()
        }
    };
    let w: Vec<u8> = (0..shape.weight_len()).map(|_| code(rng)).collect();
    // Every activation code, the padding included: the kernel reads q for
    // k < 128 * scols (the weights' k tail is what must read as zero).
    let q: Vec<u8> = (0..shape.q_len()).map(|_| code(rng)).collect();
    let s: Vec<f32> = (0..shape.scale_len())
        .map(|_| 0.002 + 0.5 * rng.unit())
        .collect();
    let d: Vec<f32> = (0..shape.d_len())
        .map(|_| {
            if rng.below(16) == 0 {
                0.0
            } else {
                (0.001 + rng.unit()) * 2f32.powi(rng.below(9) as i32 - 4)
            }
        })
        .collect();
    Case { shape, w, s, q, d }
}

const SHAPES: [(usize, usize, usize); 18] = [
    // (in_f, out_f, m)
    (128, 128, 128),
    (256, 256, 64),
    (512, 384, 128),
    (128, 200, 128),
    (384, 320, 96),
    (144, 128, 128),
    (272, 136, 40),
    (144, 200, 1),
    (272, 200, 17),
    (1, 1, 1),
    (16, 8, 3),
    (130, 129, 65),
    (1000, 300, 33),
    (4099, 257, 130),
    (5120, 1536, 1),
    (5120, 1536, 16),
    (5120, 1536, 512),
    // A second, partial 192-token tile (k25) on a small shape.
    (272, 200, 300),
];

#[test]
#[ignore = "needs a CUDA device"]
fn mmq_matches_oracle_on_ragged_shapes() {
    let e = engine();
    let mut fails = Vec::new();
    eprintln!(
        "{:<18} {:>3} {:>6} {:>11} {:>11} {:>17}",
        "in_f,out_f,m", "var", "arm", "max_abs", "rms_rel", "bit_mismatch"
    );
    // FP8_MMQ_TEST_SMALL=1 keeps the shapes under 10^8 multiply-adds (for
    // runs under compute-sanitizer); FP8_MMQ_TEST_VARIANTS=9,10 runs only
    // those variants (default: every variant the source exports).
    let small = std::env::var_os("FP8_MMQ_TEST_SMALL").is_some();
    let variants: Vec<u32> = match std::env::var("FP8_MMQ_TEST_VARIANTS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|t| {
                t.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("FP8_MMQ_TEST_VARIANTS: bad variant {t:?}"))
            })
            .collect(),
        _ => (0..e.mmq_variants()).collect(),
    };
    eprintln!(
        "{} MMQ variants exported; testing {variants:?}",
        e.mmq_variants()
    );
    if e.arch() == (9, 0) && std::env::var_os(ENV_FP8_MMQ_CU).is_none() {
        // sm_90a: the builtin source exports its wgmma variants too.
        assert_eq!(e.mmq_variants(), 26, "builtin source on sm_90a");
    }
    for (n, &(in_f, out_f, m)) in SHAPES.iter().enumerate() {
        if small && in_f * out_f * m > 100_000_000 {
            continue;
        }
        for exact in [true, false] {
            let mut rng = Rng(0xC0FF_EE00 ^ (n as u64) << 8 ^ u64::from(exact));
            let c = make_case(&mut rng, m, in_f, out_f, exact);
            // The oracle's answer under each schedule the variants declare,
            // computed once per schedule.
            let mut wants: Vec<(Schedule, Vec<f32>)> = Vec::new();
            let (wb, sb, qb, db) = (
                e.upload(&c.w).unwrap(),
                e.upload(&c.s).unwrap(),
                e.upload(&c.q).unwrap(),
                e.upload(&c.d).unwrap(),
            );
            for &v in &variants {
                e.set_mmq_variant(Some(v)).unwrap();
                let schedule = e.plan(&c.shape).unwrap().schedule;
                if !wants.iter().any(|(s, _)| *s == schedule) {
                    let y = oracle_mmq_under(&schedule, &c.shape, &c.w, &c.s, &c.q, &c.d);
                    wants.push((schedule, y));
                }
                let want = &wants.iter().find(|(s, _)| *s == schedule).unwrap().1;
                let cw = e.check_weights(&wb).unwrap();
                let got = e
                    .download(&e.mmq(&cw, &sb, &qb, &db, &c.shape).unwrap())
                    .unwrap();
                let r = compare_f32(&got, want, out_f).unwrap();
                // A tensor-core schedule fixes every bit, in both arms.
                let ok = if exact || schedule.bit_exact() {
                    r.bit_identical()
                } else {
                    r.within_rms_rel(1e-5)
                };
                let arm = if exact { "EXACT" } else { "RAND" };
                eprintln!(
                    "{:<18} {:>3} {:>6} {:>11.3e} {:>11.3e} {:>9}/{:<7} {}",
                    format!("{in_f},{out_f},{m}"),
                    v,
                    arm,
                    r.max_abs,
                    r.rms_rel,
                    r.bit_mismatches,
                    r.n,
                    if ok { "PASS" } else { "FAIL" }
                );
                if !ok {
                    fails.push(format!(
                        "{in_f},{out_f},{m} variant {v} {arm}: {:?}",
                        r.first_mismatch.or(r.first_non_finite)
                    ));
                }
            }
        }
    }
    e.set_mmq_variant(None).unwrap();
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

/// The full pipeline (NaN check, quantize, MMQ) with activations whose
/// every 128-block has amax 448, so `d = 1` and `q = x` exactly.
#[test]
#[ignore = "needs a CUDA device"]
fn pipeline_matches_oracle_and_refuses_nan_weights() {
    let e = engine();
    let mut rng = Rng(0x0919_E11E);
    for &(in_f, out_f, m) in &[
        (144usize, 200usize, 1usize),
        (272, 136, 40),
        (5120, 1536, 64),
    ] {
        let shape = Shape::new(m, in_f, out_f).unwrap();
        let w: Vec<u8> = (0..shape.weight_len())
            .map(|_| INT_CODES[rng.below(13) as usize])
            .collect();
        let s: Vec<f32> = (0..shape.scale_len()).map(|_| 0.01 + rng.unit()).collect();
        let mut x = vec![0f32; shape.act_len()];
        for j in 0..m {
            for k in 0..in_f {
                x[j * in_f + k] = rng.below(9) as f32 - 4.0;
            }
            for b in 0..in_f.div_ceil(128) {
                let k = (b * 128 + (b * 37 + j) % 128).min(in_f - 1);
                x[j * in_f + k] = 448.0;
            }
        }
        let mut q = vec![0u8; shape.q_len()];
        let mut d = vec![0f32; shape.d_len()];
        quantize_activations(&shape, &x, &mut q, &mut d).unwrap();
        // Under the schedule the plan's variant declares for this shape.
        let schedule = e.plan(&shape).unwrap().schedule;
        let want = oracle_mmq_under(&schedule, &shape, &w, &s, &q, &d);
        let (wb, sb, xb) = (
            e.upload(&w).unwrap(),
            e.upload(&s).unwrap(),
            e.upload(&x).unwrap(),
        );
        let got = e
            .download(&e.fp8_mmq(&wb, &sb, &xb, &shape).unwrap())
            .unwrap();
        let r = compare_f32(&got, &want, out_f).unwrap();
        eprintln!(
            "pipeline {in_f},{out_f},{m}: {} / {} bits differ",
            r.bit_mismatches, r.n
        );
        assert!(r.bit_identical(), "{r:?}");

        let mut bad = w.clone();
        bad[w.len() / 2] = 0x7F;
        bad[0] = 0xFF;
        let bb = e.upload(&bad).unwrap();
        match e.fp8_mmq(&bb, &sb, &xb, &shape) {
            Err(DeviceError::NanWeights { count: 2 }) => {}
            other => panic!("expected NanWeights {{ count: 2 }}, got {other:?}"),
        }
    }
}

/// A candidate that writes one element past `y` from every MMQ body (the
/// write planted before each body's `M3` step, the output stores) is
/// caught by the guard with every exported variant forced.
#[test]
#[ignore = "needs a CUDA device"]
fn guard_catches_a_write_past_the_output() {
    let marker = "    /* M3";
    let text = KernelSource::builtin().text().to_string();
    // The v2, f16-wgmma and native bodies.
    let bodies = text.matches(marker).count();
    assert_eq!(
        bodies, 3,
        "cu/fp8_mmq.cu changed: update this test's marker (found {bodies} M3 steps)"
    );
    let bad = text.replace(
        marker,
        &format!(
            "    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) y[(u64)m * (u64)out_f] = 0.0f;\n{marker}"
        ),
    );
    let (dir, source) = write_candidate("guard", &bad);
    let mut e = Engine::with_source(0, source).unwrap();
    e.set_guards(true);
    let mut rng = Rng(7);
    let c = make_case(&mut rng, 3, 144, 200, true);
    let (wb, sb, qb, db) = (
        e.upload(&c.w).unwrap(),
        e.upload(&c.s).unwrap(),
        e.upload(&c.q).unwrap(),
        e.upload(&c.d).unwrap(),
    );
    let cw = e.check_weights(&wb).unwrap();
    for v in 0..e.mmq_variants() {
        e.set_mmq_variant(Some(v)).unwrap();
        match e.mmq(&cw, &sb, &qb, &db, &c.shape) {
            Err(DeviceError::GuardClobbered {
                arg: "y",
                offset,
                len_bytes,
            }) => {
                assert_eq!(offset, len_bytes as i64, "k{v}");
                eprintln!(
                    "k{v} caught: {}",
                    e.mmq(&cw, &sb, &qb, &db, &c.shape).unwrap_err()
                );
            }
            other => panic!("k{v}: expected GuardClobbered on y, got {other:?}"),
        }
    }
    e.set_mmq_variant(None).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The candidate of [`a_checked_output_is_handed_on_as_an_input`], written
/// to a temporary file: the built-in source with every MMQ body's output
/// store (the staged one of the swapped variants too) reading one scale
/// past `d` (times zero, so only a NaN there
/// changes a result), and the quantizer writing `0xFF` one byte past `q`
/// when `x[0]` is 1234.
fn handed_on_candidate() -> (std::path::PathBuf, KernelSource) {
    let text = KernelSource::builtin().text().to_string();
    let store = "y[(u64)j * (u64)out_f + (u64)i] = sum";
    // The swapped native variants (tokens on the MMA's M side) store
    // through a shared-memory tile, four outputs a thread.
    let staged = "const float4 v = *reinterpret_cast<const float4 *>(ys + r * YS + c);";
    let q1 = "    /* Q1: elements beyond in_f read as +0.0. */";
    assert_eq!(
        text.matches(store).count(),
        3,
        "cu/fp8_mmq.cu changed: update this test's store marker"
    );
    assert_eq!(
        text.matches(staged).count(),
        1,
        "cu/fp8_mmq.cu changed: update this test's staged-store marker"
    );
    assert_eq!(
        text.matches(q1).count(),
        1,
        "cu/fp8_mmq.cu changed: update this test's Q1 marker"
    );
    let bad = text
        .replace(
            store,
            "y[(u64)j * (u64)out_f + (u64)i] = 0.0f * d[(u64)m * (u64)act_blocks] + sum",
        )
        .replace(
            staged,
            "float4 v = *reinterpret_cast<const float4 *>(ys + r * YS + c);\n            { const float z = 0.0f * d[(u64)m * (u64)act_blocks]; v.x += z; v.y += z; v.z += z; v.w += z; }",
        )
        .replace(
            q1,
            &format!(
                "    if (blk == 0 && lane == 0 && x[0] == 1234.0f)\n        q[(u64)m * (u64)in_f_pad] = 0xFF;\n{q1}"
            ),
        );
    write_candidate("handed-on", &bad)
}

/// Writes a candidate source to `fp8_mmq.cu` in a fresh temporary
/// directory named after `what` and this process: the directory (for the
/// test to remove) and the source read back.
fn write_candidate(what: &str, text: &str) -> (std::path::PathBuf, KernelSource) {
    let dir = std::env::temp_dir().join(format!("kernel-oracle-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fp8_mmq.cu");
    std::fs::write(&path, text).unwrap();
    (dir, KernelSource::from_file(&path).unwrap())
}

/// [`handed_on_candidate`] compiles for sm_90a (NVRTC, no GPU), so its
/// markers are checked wherever the tests run.
#[test]
fn the_handed_on_candidate_compiles() {
    if let Err(e) = nvrtc_available() {
        panic!("{e}");
    }
    let (dir, source) = handed_on_candidate();
    compile(&source, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The quantizer's `q` and `d` are outputs until their check passes, then
/// the MMQ's inputs: their bands hold [`INPUT_BAND`] (NaN), so an MMQ that
/// reads one scale past `d` into every output (times zero) turns every
/// output NaN, with every exported variant forced, where the output
/// sentinel there (-2.9e-16 as f32) left every output exact. Relaunching
/// the quantizer into the same `q` turns its bands back to the sentinel
/// first: a write of `0xFF` one byte past it is caught, which a band of
/// `0xFF` would not see.
#[test]
#[ignore = "needs a CUDA device"]
fn a_checked_output_is_handed_on_as_an_input() {
    let (dir, source) = handed_on_candidate();
    let mut e = Engine::with_source(0, source).unwrap();
    e.set_guards(true);
    let mut rng = Rng(11);
    let c = make_case(&mut rng, 3, 144, 200, false);
    let mut x: Vec<f32> = (0..c.shape.m() * c.shape.in_f())
        .map(|_| rng.unit() * 8.0 - 4.0)
        .collect();
    let (wb, sb, xb) = (
        e.upload(&c.w).unwrap(),
        e.upload(&c.s).unwrap(),
        e.upload(&x).unwrap(),
    );
    let cw = e.check_weights(&wb).unwrap();
    let (mut q, mut d) = e.quantize(&xb, &c.shape).unwrap();
    // With input bands off (under compute-sanitizer) q and d are exact
    // allocations: memcheck, not a band, sees a read past them.
    let want = device::cuda::input_bands().then(|| byte_word(INPUT_BAND));
    assert_eq!(q.band(), want, "q handed on");
    assert_eq!(d.band(), want, "d handed on");
    for v in 0..e.mmq_variants() {
        e.set_mmq_variant(Some(v)).unwrap();
        let y = e
            .download(&e.mmq(&cw, &sb, &q, &d, &c.shape).unwrap())
            .unwrap();
        let nan = y.iter().filter(|v| v.is_nan()).count();
        eprintln!("k{v}: {nan} of {} outputs NaN", y.len());
        assert_eq!(
            nan,
            y.len(),
            "k{v}: the read past d must reach every output"
        );
    }
    e.set_mmq_variant(None).unwrap();
    x[0] = 1234.0;
    let xt = e.upload(&x).unwrap();
    match e.quantize_into(&xt, &c.shape, &mut q, &mut d) {
        Err(DeviceError::GuardClobbered {
            arg: "q",
            offset,
            len_bytes,
        }) => assert_eq!(offset, len_bytes as i64),
        other => panic!("expected GuardClobbered on q, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
