//! The oracle's speed: the v2 FP8 GEMM (`mmq_v2`) and the activation
//! quantizer, spec against fast path, at the Qwen-like shape in_f = 5120,
//! out_f = 1536 with m = 1, 64 and 512 rows; and the ggml `mul_mat` of
//! seed 004 in every format at the LFM2.5-350M attn_out shape (M = 1024,
//! N = 512, K = 1024), spec against `kernel_oracle::ggml_fast`; and the GDN
//! scan of seed 003 at num_v = 32, T = 8 (7 flops per state element and
//! row), spec against `kernel_oracle::gdn_fast`.
//!
//! `cargo bench --bench oracle` (about a minute and a half on 2 cores).
//! Criterion measures the fast GEMM at every m, the spec GEMM at m = 1, and
//! both quantizers at m = 512. The spec GEMM at m = 64 and 512 takes
//! seconds to most of a minute per call (about 0.2 GFLOP/s, one thread), so
//! it is timed once, by a single call, and the table says so. The closing
//! table gives GFLOP/s
//! (`2 * m * in_f * out_f` per call; the quantizer: elements per second)
//! and the ratio; each figure is the median over criterion's samples
//! (warm-up included) of the time per call. Set `ORACLE_BENCH_SPEC=skip`
//! to leave out the two single spec calls.

use criterion::{BenchmarkId, Criterion, Throughput};
use kernel_oracle::fp8_mmq::fast::{mmq_v2_fast, quantize_activations_fast, Simd};
use kernel_oracle::fp8_mmq::{Arm, CaseData, CaseSpec};
use kernel_oracle::gdn_fast::{scan_rows_fast, ScanCase, Spread};
use kernel_oracle::ggml_fast::{mul_mat_fast, same_bits, FastCase};
use oracle::fp8_mmq::{mmq_v2, quantize_activations};
use oracle::gdn::prep::Heads;
use oracle::gdn::scan::{scan_rows, StatePair, StateSlot};
use oracle::gdn::{GdnError, GdnShape};
use oracle::ggml::{mul_mat::mul_mat, Dtype};

/// The spec's and the fast scan's common signature.
type ScanFn = fn(
    &GdnShape,
    &Heads<'_>,
    f32,
    StatePair<'_>,
    &mut [f32],
    &mut [f32],
) -> Result<StateSlot, GdnError>;
use std::cell::RefCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

const IN_F: usize = 5120;
const OUT_F: usize = 1536;
const MS: [usize; 3] = [1, 64, 512];

/// Seconds per call: the median over samples of (sample time / calls).
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

/// Times `iters` calls of `f`, records seconds per call.
fn timed(rec: &RefCell<Samples>, iters: u64, mut f: impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    let e = t.elapsed();
    rec.borrow_mut().0.push(e.as_secs_f64() / iters as f64);
    e
}

/// A case's data and its quantized operand.
struct Case {
    data: CaseData,
    q: Vec<u8>,
    d: Vec<f32>,
}

fn case(m: usize) -> Case {
    let data = CaseSpec::battery(IN_F, OUT_F, m, Arm::Random)
        .generate()
        .expect("valid shape");
    let s = &data.shape;
    let (mut q, mut d) = (vec![0u8; s.q_len()], vec![0f32; s.d_len()]);
    quantize_activations(s, &data.x, &mut q, &mut d).expect("lengths");
    Case { data, q, d }
}

fn spec_gemm(c: &Case) -> Vec<f32> {
    let s = &c.data.shape;
    let mut y = vec![0f32; s.out_len()];
    mmq_v2(s, &c.data.w, &c.data.scales, &c.q, &c.d, &mut y).expect("lengths");
    y
}

fn fast_gemm(c: &Case) -> Vec<f32> {
    let s = &c.data.shape;
    let mut y = vec![0f32; s.out_len()];
    mmq_v2_fast(s, &c.data.w, &c.data.scales, &c.q, &c.d, &mut y).expect("lengths");
    y
}

/// One row of the closing table.
struct Row {
    what: String,
    unit: &'static str,
    spec: (f64, &'static str),
    fast: f64,
}

fn main() {
    let mut crit = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let spec_once = std::env::var("ORACLE_BENCH_SPEC").as_deref() != Ok("skip");
    let mut rows = Vec::new();

    for m in MS {
        let c = case(m);
        let flops = c.data.shape.flops();
        // The fast path must give the spec's bits here too (checked where
        // the spec output is at hand, below).
        let fast_y = fast_gemm(&c);
        let mut g = crit.benchmark_group(format!("mmq_v2 in_f={IN_F} out_f={OUT_F}"));
        g.throughput(Throughput::Elements(flops as u64));
        let fast = RefCell::new(Samples::default());
        g.bench_function(BenchmarkId::new("fast", m), |b| {
            b.iter_custom(|iters| timed(&fast, iters, || drop(black_box(fast_gemm(&c)))))
        });
        let spec = if m == 1 {
            let rec = RefCell::new(Samples::default());
            g.bench_function(BenchmarkId::new("spec", m), |b| {
                b.iter_custom(|iters| timed(&rec, iters, || drop(black_box(spec_gemm(&c)))))
            });
            let y = spec_gemm(&c);
            assert_bits(&y, &fast_y, m);
            (flops / rec.into_inner().median() / 1e9, "criterion")
        } else if spec_once {
            let t = Instant::now();
            let y = black_box(spec_gemm(&c));
            let secs = t.elapsed().as_secs_f64();
            assert_bits(&y, &fast_y, m);
            (flops / secs / 1e9, "one call")
        } else {
            (f64::NAN, "skipped")
        };
        g.finish();
        rows.push(Row {
            what: format!("mmq_v2 m={m}"),
            unit: "GFLOP/s",
            spec,
            fast: flops / fast.into_inner().median() / 1e9,
        });
    }

    // The quantizer at m = 512.
    let m = *MS.last().expect("MS");
    let c = case(m);
    let s = &c.data.shape;
    let elems = s.act_len() as f64;
    let mut g = crit.benchmark_group(format!("quantize in_f={IN_F}"));
    g.throughput(Throughput::Elements(s.act_len() as u64));
    let (spec, fast) = (RefCell::default(), RefCell::default());
    let (mut q, mut d) = (vec![0u8; s.q_len()], vec![0f32; s.d_len()]);
    g.bench_function(BenchmarkId::new("spec", m), |b| {
        b.iter_custom(|iters| {
            timed(&spec, iters, || {
                quantize_activations(s, black_box(&c.data.x), &mut q, &mut d).expect("lengths")
            })
        })
    });
    g.bench_function(BenchmarkId::new("fast", m), |b| {
        b.iter_custom(|iters| {
            timed(&fast, iters, || {
                quantize_activations_fast(s, black_box(&c.data.x), &mut q, &mut d).expect("lengths")
            })
        })
    });
    g.finish();
    assert!(q == c.q && d.iter().zip(&c.d).all(|(a, b)| a.to_bits() == b.to_bits()));
    rows.push(Row {
        what: format!("quantize m={m}"),
        unit: "Melem/s",
        spec: (elems / spec.into_inner().median() / 1e6, "criterion"),
        fast: elems / fast.into_inner().median() / 1e6,
    });

    // The ggml mul_mat (seed 004) at the LFM2.5-350M attn_out shape, every
    // format: criterion for the fast path, one call for the spec.
    let (gm, gn, gk) = (1024, 512, 1024);
    for dtype in Dtype::ALL {
        let case = FastCase {
            dtype,
            m: gm,
            n: gn,
            kblocks: gk / dtype.block_elems(),
            finite_scales: true,
            seed: 0x5EED,
        };
        let (k, src0, src1) = case.operands();
        let flops = 2.0 * (gm * gn * k) as f64;
        let mut fast_y = vec![0f32; gm * gn];
        let rec = RefCell::new(Samples::default());
        let mut g = crit.benchmark_group(format!("ggml mul_mat m={gm} n={gn} k={gk}"));
        g.bench_function(BenchmarkId::new("fast", dtype.name()), |b| {
            b.iter_custom(|iters| {
                timed(&rec, iters, || {
                    mul_mat_fast(dtype, gm, gn, k, black_box(&src0), &src1, &mut fast_y)
                        .expect("lengths")
                })
            })
        });
        g.finish();
        let spec = if spec_once {
            let mut y = vec![0f32; gm * gn];
            let t = Instant::now();
            mul_mat(dtype, gm, gn, k, &src0, &src1, &mut y, &mut vec![0f32; k]).expect("lengths");
            let secs = t.elapsed().as_secs_f64();
            assert!(
                y.iter().zip(&fast_y).all(|(a, b)| same_bits(*a, *b)),
                "fast ggml mul_mat differs from the spec ({})",
                dtype.name()
            );
            (flops / secs / 1e9, "one call")
        } else {
            (f64::NAN, "skipped")
        };
        rows.push(Row {
            what: format!("mul_mat {}", dtype.name()),
            unit: "GFLOP/s",
            spec,
            fast: flops / rec.into_inner().median() / 1e9,
        });
    }

    // The GDN scan (seed 003) at num_v = 32, T = 8 rows with snapshots.
    let case = ScanCase {
        spread: Spread::Unit,
        num_v: 31,
        t: 7,
        seed: 0x5EED,
    };
    let shape = case.shape();
    let (state, [q, k, v, beta, g]) = case.operands();
    let x = Heads {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
    };
    let n = shape.state_len();
    // Multiply-adds and multiplies per row and head: decay, kv, update, o.
    let flops = (shape.t() * shape.num_v() * 128 * 128 * 7) as f64;
    let (mut alt, mut o) = (vec![0f32; n], vec![0f32; shape.t() * shape.value_dim()]);
    let mut snap = vec![0f32; shape.snapshots() * n];
    let mut canonical = state.clone();
    let (spec, fast) = (RefCell::default(), RefCell::default());
    let mut g = crit.benchmark_group("gdn scan num_v=32 t=8");
    for (name, rec, f) in [
        ("spec", &spec, scan_rows as ScanFn),
        ("fast", &fast, scan_rows_fast as ScanFn),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(rec, iters, || {
                    canonical.copy_from_slice(&state);
                    let st = StatePair {
                        canonical: &mut canonical,
                        alt: &mut alt,
                    };
                    f(&shape, &x, 0.088388346, st, &mut o, &mut snap).expect("lengths");
                })
            })
        });
    }
    g.finish();
    rows.push(Row {
        what: "gdn scan t=8".into(),
        unit: "GFLOP/s",
        spec: (flops / spec.into_inner().median() / 1e9, "criterion"),
        fast: flops / fast.into_inner().median() / 1e9,
    });

    crit.final_summary();
    println!();
    println!(
        "mmq_v2/quantize: in_f={IN_F} out_f={OUT_F}; mul_mat: M=1024 N=512 K=1024; fast target {}, {} rayon threads",
        Simd::detected().name(),
        rayon::current_num_threads()
    );
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>8}  spec measured by",
        "", "unit", "spec", "fast", "ratio"
    );
    for r in rows {
        println!(
            "{:<16} {:>8} {:>10.3} {:>10.2} {:>8.0}  {}",
            r.what,
            r.unit,
            r.spec.0,
            r.fast,
            r.fast / r.spec.0,
            r.spec.1
        );
    }
}

fn assert_bits(spec: &[f32], fast: &[f32], m: usize) {
    assert!(
        spec.iter()
            .zip(fast)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "fast GEMM differs from the spec at m={m}"
    );
}
