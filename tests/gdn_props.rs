//! bolero properties over the GDN case generator: the oracle's packed rows
//! equal its chained rows (CPU, always), the generator reaches every edge
//! it claims (CPU), and the kernels equal the oracle and each other (GPU;
//! without bound, the `gdn_packed` fuzz target).

use kernel_oracle::gdn::generate::config;
use kernel_oracle::gdn::{check, oracle_packed_matches_chained, reference, CaseSpec};
use std::sync::Mutex;

static CPU_SEEN: Mutex<Vec<CaseSpec>> = Mutex::new(Vec::new());
static GPU_SEEN: Mutex<Vec<CaseSpec>> = Mutex::new(Vec::new());

/// Runs `property` on `iterations` generated cases, remembering each in
/// `seen`. A macro, so that bolero's `check!` sits in the test function
/// itself (it names the target after the enclosing function).
macro_rules! run_counted {
    ($iterations:expr, $property:expr, $seen:expr) => {{
        $seen.lock().unwrap().clear();
        bolero::check!()
            .with_arbitrary::<CaseSpec>()
            .with_iterations($iterations)
            .for_each(|spec| {
                $property(spec);
                $seen.lock().unwrap().push(*spec);
            });
    }};
}

#[test]
fn oracle_packed_rows_equal_chained_rows_and_the_generator_reaches_every_edge() {
    run_counted!(400, oracle_packed_matches_chained, CPU_SEEN);
    let specs = CPU_SEEN.lock().unwrap().clone();
    assert_eq!(specs.len(), 400, "cases that reached the property");
    let any = |f: &dyn Fn(&CaseSpec) -> bool| specs.iter().any(f);
    for (what, hit) in [
        ("t = 1", any(&|s| s.t == 1)),
        ("t = MAX_T", any(&|s| s.t == config::MAX_T)),
        ("d_conv = 2", any(&|s| s.d_conv == 2)),
        ("d_conv = 3", any(&|s| s.d_conv == 3)),
        ("d_conv = 4", any(&|s| s.d_conv == 4)),
        ("num_v > num_k", any(&|s| s.num_v > s.num_k)),
        ("eps = 0", any(&|s| s.eps == 0.0)),
        ("|alpha| up to 1e4", any(&|s| s.alpha_spread >= 1e4)),
        ("states near overflow", any(&|s| s.state_spread >= 1e38)),
        ("a negative state", any(&|s| s.negative_state)),
        ("zero q head", any(&|s| s.zero_qk & 1 != 0)),
        ("zero k head", any(&|s| s.zero_qk & 2 != 0)),
        ("graph replay", any(&|s| s.graph)),
        ("no specials", any(&|s| !s.specials)),
    ] {
        assert!(hit, "no generated case with {what}");
    }
    for s in &specs {
        assert!(s.num_v <= config::MAX_NUM_V && s.num_v % s.num_k == 0);
    }
    // Non-finite outputs occur (near overflow), but most cases stay finite.
    let finite = specs
        .iter()
        .filter(|s| {
            reference(&s.generate().unwrap())
                .parts()
                .iter()
                .all(|p| p.iter().all(|x| x.is_finite()))
        })
        .count();
    assert!(finite < specs.len(), "no case reaches a non-finite output");
    assert!(
        finite * 2 > specs.len(),
        "only {finite} of {} cases stay finite",
        specs.len()
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn kernels_match_the_oracle_and_each_other() {
    run_counted!(300, check, GPU_SEEN);
    assert_eq!(GPU_SEEN.lock().unwrap().len(), 300);
}

/// Inputs of 2 to 6 bytes (what libFuzzer tries first) already reach the
/// graph replay, the specials, the zero q/k heads and the near-overflow
/// states, near their designed odds (1/4, 1/2, 3/4, 2/5); the negative
/// state (byte 4) only from 5 bytes on: 1/4 of the inputs of 5 and 6
/// bytes, 1/10 of these.
#[test]
fn short_inputs_reach_every_knob() {
    use arbitrary::{Arbitrary, Unstructured};
    let mut rng = kernel_oracle::rng::Rng(0x6D6E);
    let (mut n, mut graph, mut specials, mut zero_qk, mut big) = (0, 0, 0, 0, 0);
    let mut negative = 0;
    for len in 2..=6 {
        for _ in 0..400 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            let spec = CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
            n += 1;
            graph += usize::from(spec.graph);
            specials += usize::from(spec.specials);
            zero_qk += usize::from(spec.zero_qk != 0);
            big += usize::from(spec.state_spread > 1.0);
            negative += usize::from(spec.negative_state);
        }
    }
    let share = |k: usize| k as f64 / n as f64;
    for (name, got, want) in [
        ("graph", share(graph), 0.25),
        ("specials", share(specials), 0.5),
        ("zero_qk", share(zero_qk), 0.75),
        ("near-overflow state", share(big), 0.4),
        ("negative state", share(negative), 0.1),
    ] {
        assert!(
            (got - want).abs() < 0.08,
            "{name}: share {got:.3}, designed {want}"
        );
    }
}

/// Where a fuzz case's time goes (GPU): 200 cases drawn as libFuzzer's
/// short inputs are, each phase of `check` timed on its own (generation,
/// the CPU oracle, chained per-row launches, the fused step, the packed
/// twins, the graph replays, the batched call), then the same case through
/// `check` itself, as the fuzz target runs it (judge included). Prints
/// milliseconds per case per phase and `check`'s cases per second; fails
/// only on a device error or a divergence.
#[test]
#[ignore = "needs a CUDA GPU (prints the gdn fuzz case's time per phase)"]
fn gdn_case_phases_timed() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::gdn::{engine, run};
    use std::time::{Duration, Instant};
    let e = engine().expect("a CUDA device");
    let mut rng = kernel_oracle::rng::Rng(0x9E0F);
    // The same launches without guard bands (no check after each launch).
    let bare = device::cuda::GdnEngine::new(0).expect("a CUDA device");
    let names = [
        "generate",
        "reference",
        "chained",
        "fused",
        "twins",
        "graph",
        "batched",
        "chained, guards off",
        "fused, guards off",
        "check (whole case)",
    ];
    let mut total = [Duration::ZERO; 10];
    let n = 200;
    let start = Instant::now();
    for _ in 0..n {
        let bytes: Vec<u8> = (0..12).map(|_| rng.u8()).collect();
        let spec = CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let mut t = Instant::now();
        let mut lap = |i: usize, t: &mut Instant| {
            total[i] += t.elapsed();
            *t = Instant::now();
        };
        let data = spec.generate().unwrap();
        lap(0, &mut t);
        let _ = reference(&data);
        lap(1, &mut t);
        // As `check` runs them: the case's data uploaded once, the
        // chained outputs read back, the other runs compared with them on
        // the device.
        let up = run::OnDevice::new(e, &run::CaseSrc::host(&data)).unwrap();
        let src = up.src();
        let (_, kept) = run::chained_kept(e, &src).unwrap();
        let against = Some(kept.reference(false));
        lap(2, &mut t);
        run::packed(e, &src, against).unwrap();
        lap(3, &mut t);
        if spec.graph {
            run::twins(e, &src, against).unwrap();
            lap(4, &mut t);
            run::graph(e, &src, against).unwrap();
            lap(5, &mut t);
        }
        drop(kept);
        drop(up);
        if spec.batch > 1 {
            let ds = spec.generate_batch().unwrap();
            let inputs = run::BatchInputs::new(&ds);
            for (_, got) in kernel_oracle::gdn::batched_runs(e, &inputs, spec.graph, false) {
                got.unwrap();
            }
            inputs.give_back();
            for d in &ds[1..] {
                let _ = reference(d);
            }
            lap(6, &mut t);
        }
        run::chained(&bare, &data).unwrap();
        lap(7, &mut t);
        run::packed(&bare, &run::CaseSrc::host(&data), None).unwrap();
        lap(8, &mut t);
        check(&spec);
        lap(9, &mut t);
    }
    let all = start.elapsed() - total[7] - total[8] - total[9];
    println!(
        "gdn fuzz case phases, {n} cases, {:.2} ms per case ({:.0} cases/s):",
        all.as_secs_f64() * 1e3 / n as f64,
        n as f64 / all.as_secs_f64()
    );
    for (name, d) in names.iter().zip(total) {
        println!(
            "  {name:<20} {:8.3} ms per case",
            d.as_secs_f64() * 1e3 / n as f64
        );
    }
    println!(
        "gdn check (the fuzz target's case, no ASan): {:.0} cases/s",
        n as f64 / total[9].as_secs_f64()
    );
}

/// Where a fuzz case's host time goes (CPU only): the 200 cases of
/// [`gdn_case_phases_timed`], each host phase of `check` timed on its own
/// (generation, the oracle through its fast path and through the spec, the
/// comparisons `judge_case` makes, the batched call's other sequences and
/// their oracle), each case's buffers handed back to the host pool as
/// `check` does. Prints milliseconds per case per phase; checks nothing.
#[test]
#[ignore = "a measurement, not a check (prints the gdn fuzz case's host time per phase)"]
fn gdn_case_host_phases_timed() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::gdn::judge::reference_spec;
    use kernel_oracle::gdn::pool::POOL;
    use kernel_oracle::gdn::{compare_six, Bits};
    use std::time::{Duration, Instant};
    let mut rng = kernel_oracle::rng::Rng(0x9E0F);
    let names = [
        "generate",
        "reference (fast)",
        "reference (spec)",
        "judge (compare)",
        "batch generate",
        "batch reference",
    ];
    let mut total = [Duration::ZERO; 6];
    let n = 200;
    for _ in 0..n {
        let bytes: Vec<u8> = (0..12).map(|_| rng.u8()).collect();
        let spec = CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let mut t = Instant::now();
        let mut lap = |i: usize, t: &mut Instant| {
            total[i] += t.elapsed();
            *t = Instant::now();
        };
        let data = spec.generate().unwrap();
        lap(0, &mut t);
        let want = reference(&data);
        lap(1, &mut t);
        POOL.give_six(reference_spec(&data));
        lap(2, &mut t);
        // chained == oracle, packed == oracle, packed == chained; with the
        // graph, twins == chained and the two replays == chained.
        let compares = if spec.graph { 6 } else { 3 };
        for _ in 0..compares {
            let d = compare_six(&want, &want, Bits::NanAny);
            assert!(d.iter().all(|d| d.pass()));
        }
        lap(3, &mut t);
        if spec.batch > 1 {
            let ds = spec.generate_batch().unwrap();
            lap(4, &mut t);
            for d in &ds[1..] {
                POOL.give_six(reference(d));
            }
            lap(5, &mut t);
            ds.into_iter().for_each(|d| POOL.give_data(d));
        }
        // As `check` does: the case's buffers back to the host pool.
        POOL.give_six(want);
        POOL.give_data(data);
    }
    let all: Duration = total.iter().sum::<Duration>() - total[2];
    println!(
        "gdn fuzz case host phases, {n} cases, {:.3} ms per case without the spec oracle:",
        all.as_secs_f64() * 1e3 / n as f64
    );
    for (name, d) in names.iter().zip(total) {
        println!(
            "  {name:<20} {:8.3} ms per case",
            d.as_secs_f64() * 1e3 / n as f64
        );
    }
}
