//! The gdn gate as tests (seed 003's `gpu_gdn_packed_*` tests and the
//! kernels against the core oracle), on a GPU; and, on the CPU, that the
//! gate's cases reach what their labels claim.
//!
//! `cargo test --release --test gdn_gate -- --ignored --nocapture --test-threads=1`
//! (`KERNEL_ORACLE_GDN_CU=<path>` checks a candidate).

use kernel_oracle::gdn::gate::{self, edge_cases, SEED_HEADS};
use kernel_oracle::gdn::{engine, judge_case, reference, run, CaseSpec, Row};

fn assert_rows(rows: &[Row]) {
    for row in rows {
        println!("{}", kernel_oracle::gdn::report::table_row(row));
    }
    let failed: Vec<_> = rows.iter().filter(|r| !r.pass()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} rows fail (see the table above)",
        failed.len(),
        rows.len()
    );
}

/// Seed 003's check at one head layout: packed == chained on all six
/// outputs for t = 2..=8 (and both == the oracle), eager, plus the graph
/// replays when `graph`.
fn packed_matches_per_row(num_k: usize, num_v: usize, graph: bool) {
    let e = engine().unwrap_or_else(|err| panic!("no CUDA device: {err}"));
    let mut rows = Vec::new();
    for t in 2..=8usize {
        let spec = CaseSpec::seed_like(num_k, num_v, 4, t, 100 * t as u64 + num_v as u64);
        let data = spec.generate().unwrap();
        rows.extend(judge_case(e, &spec, &data, &reference(&data), graph));
    }
    assert!(rows.iter().any(|r| r.gate == 1));
    assert_rows(&rows);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_packed_matches_per_row_bitwise() {
    packed_matches_per_row(2, 4, false);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_packed_ornith_matches_per_row_bitwise() {
    packed_matches_per_row(16, 32, false);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_packed_graph_rebind_matches_per_row_bitwise() {
    for (num_k, num_v) in SEED_HEADS {
        packed_matches_per_row(num_k, num_v, true);
    }
}

/// Each per-row kernel alone against its oracle function, d_conv 2..=4.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_per_row_kernels_match_the_oracle_bitwise() {
    let e = engine().unwrap_or_else(|err| panic!("no CUDA device: {err}"));
    for (num_k, num_v, d_conv) in [(2, 4, 2), (2, 4, 3), (2, 4, 4), (16, 32, 4), (1, 3, 3)] {
        let spec = CaseSpec::seed_like(num_k, num_v, d_conv, 2, 9);
        let diffs = run::per_row_kernels(e, &spec.generate().unwrap()).unwrap();
        assert!(diffs.len() >= 2 * 9, "every output of both rows compared");
        for d in diffs {
            assert!(d.pass(), "({num_k}, {num_v}, {d_conv}): {d:?}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gdn_gate_is_all_green() {
    let e = engine().unwrap_or_else(|err| panic!("no CUDA device: {err}"));
    let g = gate::run(e);
    assert!(g.rows > 100, "{} rows", g.rows);
    assert_eq!(g.failures, 0, "see the table above: {:?}", g.failed);
}

/// The edge cases reach their edges in the oracle (CPU): non-finite
/// outputs near overflow and with eps = 0 on a zero head, finite ones
/// elsewhere, a zero q head giving exact zeros; over a negative state,
/// every o term `-0` on every row (below).
#[test]
fn edge_cases_reach_what_their_labels_claim() {
    let finite = |s: &CaseSpec| {
        reference(&s.generate().unwrap())
            .parts()
            .iter()
            .all(|p| p.iter().all(|x| x.is_finite()))
    };
    for (label, spec) in edge_cases() {
        let want_finite = !(label.contains("overflow") || label.contains("eps = 0"));
        assert_eq!(finite(&spec), want_finite, "{label}");
    }
    // The negative-state rows: every state after every row (snapshots and
    // final) negative in every element, and the q head zero, so every term
    // c''_i q_i of every o sum is -0; the contract's sum from +0 gives +0
    // (a sum seeded with its first term would give -0).
    let negative: Vec<_> = edge_cases()
        .into_iter()
        .filter(|(_, s)| s.negative_state)
        .collect();
    assert_eq!(
        negative.iter().map(|(_, s)| s.t).collect::<Vec<_>>(),
        [3, 1],
        "at t > 1 and as one row"
    );
    for (label, spec) in negative {
        assert_eq!((spec.num_k, spec.num_v, spec.zero_qk), (1, 2, 3), "{label}");
        let want = reference(&spec.generate().unwrap());
        assert_eq!(want.o.len(), spec.t * 2 * 128, "{label}");
        assert!(want.o.iter().all(|x| x.to_bits() == 0), "{label}: o is +0");
        assert_eq!(want.snap_state.len(), (spec.t - 1) * 2 * 128 * 128);
        for x in want.state.iter().chain(&want.snap_state) {
            assert!(x.is_sign_negative(), "{label}: a state element {x:e}");
        }
    }
    // A zero k head with eps > 0: k is exactly zero, so that head's state
    // only decays (checked through the oracle's own prep, row 0).
    let spec = CaseSpec {
        zero_qk: 2,
        ..CaseSpec::seed_like(2, 4, 4, 1, 3)
    };
    let d = spec.generate().unwrap();
    let s = d.shape;
    let mut conv_out = vec![0f32; s.conv_dim()];
    let mut ring = d.ring0.clone();
    oracle::gdn::conv::conv1d_row(
        &s,
        &d.qkv[..s.conv_dim()],
        &d.conv_w,
        &mut ring,
        &mut conv_out,
    )
    .unwrap();
    let k0 = &conv_out[s.key_dim()..s.key_dim() + 128];
    assert!(k0.iter().all(|&x| x == 0.0), "k head 0 is zero");
    assert!(
        conv_out[..s.key_dim()].iter().any(|&x| x != 0.0),
        "q is not"
    );
}
