//! The gdn gate (`kernel-oracle check gdn`): seed 003's check and the
//! kernels against the core oracle.
//!
//! - Gate 1, the seed's check: the packed step (fused, and the three
//!   packed twins) against `t` chained
//!   per-row launches, every bit of the six outputs (conv outputs, scan
//!   outputs, final state, final ring, conv snapshots, state snapshots),
//!   for t = 2..=8 at (num_k, num_v) = (2, 4) and (16, 32): eagerly, and
//!   captured in a CUDA graph replayed twice on rebound buffers, the second
//!   time with canonical and alt swapped (and the capture-time buffers left
//!   untouched).
//! - Gate 2: the same runs against the oracle's `decode_rows` (t = 1..=8, and t = 1 at d_conv 2 and 3),
//!   each per-row kernel on its own against its oracle function (d_conv 2,
//!   3, 4 and three head layouts), and edge cases: |alpha| up to 1e4, zero
//!   q/k heads with eps = 0, states near f32's overflow, a subnormal eps,
//!   and a zero q/k head over an all-negative state (every o term `-0`,
//!   the sum from `+0` gives `+0`).
//!   The batched fused step over ragged batches and rows against each
//!   sequence's oracle. Bit for bit, any NaN equal to any NaN.

use super::generate::CaseSpec;
use super::judge::{reference, Bits};
use super::report::{self, Row};
use super::{judge_case, run};
use device::cuda::GdnEngine;

/// The seed's head layouts: Qwen3-Next's 16 q/k and 32 v heads, and a
/// small one.
pub const SEED_HEADS: [(usize, usize); 2] = [(2, 4), (16, 32)];

/// The batched rows: `(num_k, num_v, d_conv, t, batch)`.
pub const BATCHED: [(usize, usize, usize, usize, usize); 12] = [
    (2, 4, 4, 1, 2),
    (1, 3, 2, 1, 4),
    (1, 16, 4, 1, 3),
    (2, 2, 3, 1, 5),
    (2, 4, 4, 3, 5),
    (2, 2, 3, 8, 3),
    (1, 3, 2, 2, 7),
    (16, 32, 4, 1, 9),
    (16, 32, 4, 3, 3),
    (1, 16, 4, 3, 2),
    (1, 24, 4, 2, 2),
    (4, 8, 4, 5, 4),
];

/// The edge cases (gate 1 and 2 rows each), with their labels: each at
/// its own row count, and again as one row (t = 1: the fused step's
/// one-row path, which a lone sequence at num_v = 2 num_k takes in the
/// split entry).
pub fn edge_cases() -> Vec<(String, CaseSpec)> {
    let base = CaseSpec::seed_like(2, 4, 4, 5, 0xED6E);
    let cases = [
        (
            "|alpha| up to 1e4",
            CaseSpec {
                alpha_spread: 1e4,
                ..base
            },
        ),
        (
            "zero q and k heads, eps = 0",
            CaseSpec {
                zero_qk: 3,
                eps: 0.0,
                ..base
            },
        ),
        (
            "zero q and k heads, eps = 1e-6",
            CaseSpec {
                zero_qk: 3,
                t: 4,
                ..base
            },
        ),
        (
            "state near overflow (3e38)",
            CaseSpec {
                state_spread: 3e38,
                d_conv: 3,
                ..base
            },
        ),
        (
            "subnormal eps, d_conv = 2",
            CaseSpec {
                eps: f32::from_bits(1),
                d_conv: 2,
                t: 3,
                ..base
            },
        ),
        // One q/k head, both zero, over a state negative in every element
        // (eps = 1e-6, so q is +0, not NaN): the update adds +0, the state
        // stays negative, and every term of the o sum is -0. The contract
        // sums from +0 (READ-AFTER): o = +0; a sum seeded with its first
        // term gives -0. Ratio 2: a lone sequence takes the split entry
        // (its one-row path as one row).
        (
            "zero q/k head over a negative state, (1, 2)",
            CaseSpec {
                num_k: 1,
                num_v: 2,
                zero_qk: 3,
                negative_state: true,
                t: 3,
                ..base
            },
        ),
    ];
    let one_row = |(label, spec): &(&str, CaseSpec)| {
        (format!("{label}, one row"), CaseSpec { t: 1, ..*spec })
    };
    cases
        .iter()
        .map(|(label, spec)| (label.to_string(), *spec))
        .chain(cases.iter().map(one_row))
        .collect()
}

/// The gate's result.
#[derive(Debug, Default)]
pub struct GateResult {
    /// Rows run.
    pub rows: usize,
    /// Failed rows.
    pub failures: usize,
    /// Failed rows per gate (index 0: gate 1, 1: gate 2).
    pub failures_by_gate: [usize; 2],
    /// Labels of the failed rows, with their shapes.
    pub failed: Vec<String>,
}

impl GateResult {
    /// Prints `row` and counts it; a failing row also prints `rerun`, the
    /// command that reruns it (a device failure is a failing row with its
    /// message, [`Row::error`]).
    fn add(&mut self, row: &Row, rerun: &str) {
        self.add_noted(row, None, rerun);
    }

    /// [`Self::add`], with `note` on its own line before the rerun line
    /// of a failing row ([`crate::rerun_row`]).
    fn add_noted(&mut self, row: &Row, note: Option<&str>, rerun: &str) {
        println!("{}", report::table_row(row));
        self.rows += 1;
        if !row.pass() {
            println!("{}", crate::rerun_row(note, rerun));
            self.failures += 1;
            self.failures_by_gate[usize::from(row.gate - 1)] += 1;
            self.failed.push(format!(
                "gate {} {} ({}, {}) t={} batch={}",
                row.gate, row.label, row.spec.num_k, row.spec.num_v, row.spec.t, row.spec.batch
            ));
        }
    }
}

/// Runs every row, printing the table and the verdict line.
pub fn run(e: &GdnEngine) -> GateResult {
    let mut g = GateResult::default();
    println!("kernel source: {}", e.kernel_source());
    println!("device: {}", e.device_name());
    println!(
        "gate 1: packed == chained per-row launches ({}); gate 2: kernels == core oracle ({})",
        Bits::Exact.describe(),
        Bits::NanAny.describe()
    );
    println!("{}", report::table_header());
    // The seed's rows at d_conv 4, t = 1..=8; and one row at d_conv 2 and
    // 3 (the fused step's one-row path is compiled once per conv width).
    let seed_rows = SEED_HEADS.iter().flat_map(|&(num_k, num_v)| {
        (1..=8usize)
            .map(move |t| (num_k, num_v, 4, t))
            .chain([2, 3].map(|d_conv| (num_k, num_v, d_conv, 1)))
    });
    for (num_k, num_v, d_conv, t) in seed_rows {
        let seed = 100 * t as u64 + num_v as u64 + 1000 * (4 - d_conv as u64);
        let spec = CaseSpec::seed_like(num_k, num_v, d_conv, t, seed);
        let data = spec.generate().expect("the gate's shapes are valid");
        let want = reference(&data);
        // The seed's check is t = 2..=8; t = 1 runs against the oracle only.
        let rerun = report::repro_command(&CaseSpec {
            graph: t >= 2,
            ..spec
        });
        for row in judge_case(e, &spec, &data, &want, t >= 2) {
            if t >= 2 || row.gate == 2 {
                g.add(&row, &rerun);
            }
        }
    }
    let per_row = [(2, 4, 2), (2, 4, 3), (2, 4, 4), (16, 32, 4), (1, 3, 3)];
    for (num_k, num_v, d_conv) in per_row {
        let spec = CaseSpec::seed_like(num_k, num_v, d_conv, 2, 7 * num_v as u64 + d_conv as u64);
        let data = spec.generate().expect("the gate's shapes are valid");
        let mut row = Row {
            gate: 2,
            label: "per-row kernels alone == oracle",
            spec,
            rule: Bits::NanAny,
            diffs: Vec::new(),
            error: None,
        };
        match run::per_row_kernels(e, &data) {
            Ok(d) => row.diffs = d,
            Err(err) => row.error = Some(err.to_string()),
        }
        // The per-row kernels alone run only in the gate: its rerun line
        // is the gate's, after a note naming the row.
        let rerun = format!(
            "{}{} check gdn",
            crate::candidate_env(device::cuda::ENV_GDN_CU),
            crate::paths::rerun_prefix()
        );
        let note = format!(
            "the row \"per-row kernels alone == oracle\" of ({num_k}, {num_v}), d_conv {d_conv}"
        );
        g.add_noted(&row, Some(&note), &rerun);
    }
    // The batched fused step through each entry the engine launches:
    // ragged batches and rows, head layouts whose columns per CTA are 16,
    // 32, 48, 256 (two chunks of 128) and 384 (three) in clusters of 8, and
    // 64 to 1536 in clusters of 2, every sequence against its own oracle.
    for (num_k, num_v, d_conv, t, batch) in BATCHED {
        let spec = CaseSpec {
            batch,
            ..CaseSpec::seed_like(num_k, num_v, d_conv, t, 31 * batch as u64 + t as u64)
        };
        let datas = spec.generate_batch().expect("the gate's shapes are valid");
        let rerun = report::repro_command(&spec);
        for row in super::judge_batch(e, &spec, &datas, None) {
            g.add(&row, &rerun);
        }
    }
    for (label, spec) in edge_cases() {
        println!("  edge: {label}");
        let data = spec.generate().expect("the gate's shapes are valid");
        let want = reference(&data);
        let rerun = report::repro_command(&CaseSpec {
            graph: true,
            ..spec
        });
        for row in judge_case(e, &spec, &data, &want, true) {
            g.add(&row, &rerun);
        }
    }
    if let Some(line) = crate::lost_context_line() {
        println!("\n{line}");
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== gdn-check ALL GREEN ({} rows: packed (fused and twins) == chained bit for bit, eager and graph-replayed; kernels and batched == oracle) ===",
            g.rows
        );
    } else {
        println!(
            "=== gdn-check {} FAILURES (gate 1: {}, gate 2: {}): {} ===",
            g.failures,
            g.failures_by_gate[0],
            g.failures_by_gate[1],
            g.failed.join("; ")
        );
    }
    g
}
