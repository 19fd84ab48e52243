//! bolero properties over the MoE tables case generator: the oracle
//! against an independent definition (CPU, always), the shim's length
//! checks against the oracle's (CPU, always), and the kernel against the
//! oracle (GPU). The last runs without bound as the `moe_tables` fuzz
//! target.

use device::cuda::check_moe_tables;
use kernel_oracle::moe_tables::{check, oracle_matches_definition, reference, CaseSpec};
use oracle::moe_tables::{check_lengths, TablesError, CANONICAL_NAN};
use std::sync::Mutex;

/// What the generated cases reached: a property that never saw an edge
/// proves nothing about it.
#[derive(Default)]
struct Seen {
    cases: usize,
    built: usize,
    range: usize,
    overflow: usize,
    nan_weight: usize,
    past_4_gib: usize,
    zero_pairs: usize,
}

/// Specs the CPU and the GPU properties saw (bolero may run the property
/// on another thread).
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

/// What the remembered cases reached.
fn summarize(seen: &Mutex<Vec<CaseSpec>>) -> Seen {
    let specs = seen.lock().unwrap().clone();
    let mut s = Seen::default();
    for spec in &specs {
        s.cases += 1;
        let data = spec.generate();
        s.zero_pairs += usize::from(data.experts.is_empty());
        s.nan_weight += usize::from(data.weights.iter().any(|w| w.is_nan()));
        match reference(&data) {
            Ok(t) => {
                s.built += 1;
                let far = data.experts.iter().zip(0..).any(|(&e, _)| {
                    data.slabs
                        .iter()
                        .any(|sl| e as u128 * u128::from(sl.stride) > 1 << 32)
                });
                s.past_4_gib += usize::from(far);
                // NaN weights gave canonical NaN down scales.
                let n = data.experts.len();
                for (p, w) in data.weights.iter().enumerate() {
                    if w.is_nan() {
                        assert_eq!(t.scales[2 * n + p].to_bits(), CANONICAL_NAN);
                    }
                }
            }
            Err(TablesError::ExpertRange { .. }) => s.range += 1,
            Err(TablesError::AddressOverflow { .. }) => s.overflow += 1,
            Err(e) => panic!("a generated case has wrong lengths: {e}"),
        }
    }
    s
}

#[test]
fn oracle_matches_its_definition_and_the_generator_reaches_every_edge() {
    run_counted!(2_000, oracle_matches_definition, CPU_SEEN);
    let s = summarize(&CPU_SEEN);
    assert_eq!(s.cases, 2_000, "cases that reached the property");
    for (what, n) in [
        ("tables built", s.built),
        ("out-of-range ids", s.range),
        ("64-bit overflows", s.overflow),
        ("NaN weights", s.nan_weight),
        ("offsets past 4 GiB", s.past_4_gib),
        ("zero pairs", s.zero_pairs),
    ] {
        assert!(n > 0, "no case with {what} in {} cases", s.cases);
    }
    assert!(
        s.built * 4 > s.cases,
        "fewer than a quarter of the cases build tables: {} of {}",
        s.built,
        s.cases
    );
}

#[test]
fn shim_length_checks_return_the_oracles_errors() {
    bolero::check!()
        .with_arbitrary::<(CaseSpec, u8, u8, u8)>()
        .with_iterations(500)
        .for_each(|(spec, dw, dp, ds)| {
            let data = spec.generate();
            let bank = data.bank();
            let n = data.experts.len();
            let w = match dw % 3 {
                0 => n,
                1 => n + 1,
                _ => n.saturating_sub(1),
            };
            let p = 3 * n + usize::from(*dp % 2);
            let s = 3 * n + usize::from(*ds % 2);
            let want = check_lengths(&bank, n, w, Some(p), Some(s));
            let got = check_moe_tables(&bank, n, w, Some(p), Some(s));
            match (want, got) {
                (Ok(()), Ok(())) => {}
                (Err(w), Err(g)) => assert_eq!(g.moe_tables_error(), Some(&w)),
                (w, g) => panic!("oracle {w:?}, shim {g:?}"),
            }
        });
}

#[test]
#[ignore = "needs a CUDA device"]
fn kernel_matches_oracle() {
    run_counted!(2_000, check, GPU_SEEN);
    let s = summarize(&GPU_SEEN);
    assert!(s.built > 0 && s.range > 0 && s.overflow > 0);
}
