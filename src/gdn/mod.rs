//! Gated DeltaNet decode (seed 003): cases, the device runner, the judge,
//! the report, the gate and planted bugs.
//!
//! - [`generate`]: [`CaseSpec`] (`Arbitrary`, biased to the edges) and its
//!   data;
//! - [`run`]: the kernels of `cu/gdn.cu` through `device::cuda::GdnEngine`:
//!   chained per-row launches, the packed step eager and graph-replayed;
//! - [`judge`]: the oracle's six outputs and the comparison rules;
//! - [`pool`]: host buffers reused from case to case;
//! - [`report`]: table rows, mismatch lines, reproductions;
//! - [`gate`]: `kernel-oracle check gdn`;
//! - [`mutants`]: planted bugs in `cu/gdn.cu`;
//! - [`cli`]: the kind's registry entry (`kernel_oracle::kind`);
//! - [`rule`]: the gated delta rule from the conv output on, judged by a
//!   written error bound, for other implementations (fla, vLLM);
//! - [`conv_update`]: the conv in causal-conv1d's `causal_conv1d_update`
//!   layouts, its state bit for bit and its output by a bound;
//! - [`slots`]: continuous batching, the rule's states in a pool of slots
//!   addressed by `ssm_state_indices`.
//!
//! Two checks, as the issue states them. Gate 1 (seed 003's check): the
//! packed twins against `t` chained per-row launches, every bit of the six
//! outputs, eagerly and graph-replayed on rebound buffers. Gate 2: every
//! kernel against the core oracle, bit for bit (any NaN equal to any NaN:
//! NaN payloads are not in the contract). No step needs a bound: the
//! kernels spell every operation `__f*_rn` in the contract's order, and
//! `device/tests/gdn_host_emu.rs` shows the same source bit-identical to
//! the oracle on the host.

pub mod cli;
pub mod conv_update;
pub mod gate;
pub mod generate;
pub mod judge;
pub mod mutants;
pub mod pool;
pub mod report;
pub mod rule;
pub mod run;
pub mod slots;

pub use generate::{CaseData, CaseSpec};
pub use judge::{compare_six, oracle_chained, reference, Bits, Diff, Six};
pub use report::Row;
pub use run::engine;

use crate::stats::{count, pct};
use device::cuda::{GdnEngine, GdnFusedEntry};
use pool::POOL;
use rayon::prelude::*;
use run::{BatchInputs, BatchSix, CaseSrc, Got};
use std::sync::atomic::AtomicU64;

/// Counters of one process's checks: outcomes, and what the generator
/// drew (each printed with its share, so a starved path shows).
#[derive(Debug, Default)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases whose outputs hold a NaN or an infinity (states near overflow,
    /// eps = 0 with a zero head): compared under the NaN rule.
    pub nonfinite: AtomicU64,
    /// Cases also replayed through a CUDA graph (designed: 1/4).
    pub graph: AtomicU64,
    /// Cases drawn with specials in the inputs (designed: 1/2).
    pub specials: AtomicU64,
    /// ... with a zero q or k head (designed: 3/4).
    pub zero_qk: AtomicU64,
    /// ... with a state near overflow (designed: 2/5).
    pub big_state: AtomicU64,
    /// ... with an all-negative initial state (designed: 1/4).
    pub negative_state: AtomicU64,
    /// ... with eps = 0 (designed: 1/8).
    pub eps_zero: AtomicU64,
    /// ... with t = 1 (designed: 9/32).
    pub t1: AtomicU64,
    /// ... with t = `MAX_T` (designed: 5/32).
    pub t_max: AtomicU64,
    /// Cases also run as a batched call of 2 or more sequences (designed:
    /// 1/4).
    pub batched: AtomicU64,
    /// Cases whose runs were all read back beside the device comparison
    /// (one in [`AUDIT_EVERY`]).
    pub audited: AtomicU64,
    /// Where [`check`]'s time went, nanoseconds summed over the cases
    /// ([`Phase`] order): generating the data, the oracle's thread, the
    /// device runs (this thread, beside the oracle), the chained outputs
    /// judged on the oracle's thread, judging the rest, handing the buffers
    /// back, the whole case.
    pub phase_ns: [AtomicU64; 7],
    /// Cases timed in `phase_ns` (those that ended without a divergence).
    pub timed: AtomicU64,
    /// The judge's nanoseconds ([`Phase::Judge`]) of the audited cases
    /// among them (every run read back and compared on the host).
    pub audited_judge_ns: AtomicU64,
    /// Audited cases timed in `audited_judge_ns`.
    pub audited_timed: AtomicU64,
    /// The device phase split by run ([`DEVICE_RUNS`] order), nanoseconds
    /// summed over the timed cases (a run a case does not make adds 0).
    pub device_ns: [AtomicU64; 6],
    /// Minor page faults of the whole process over the timed cases (Linux's
    /// `/proc/self/stat` field 10; 0 elsewhere): fresh pages touched,
    /// which a sanitizer's allocator makes costly. Split as
    /// [`FAULT_PARTS`].
    pub page_faults: [AtomicU64; 3],
}

/// A part of [`check`] timed in [`Stats::phase_ns`].
#[derive(Clone, Copy, Debug)]
pub enum Phase {
    /// The case's data (every sequence's).
    Generate,
    /// The oracle (every sequence's, in parallel), on its own thread.
    Oracle,
    /// The device runs, chained, fused, packed, graph and batched.
    Device,
    /// The chained outputs compared with the oracle's, on the oracle's
    /// thread beside the device runs that follow the chained ones (a
    /// case waits for it only where it ends after them).
    ChainedJudge,
    /// The rows' verdicts: the host's other comparisons.
    Judge,
    /// The case's buffers handed back to the host pool ([`pool::POOL`]).
    GiveBack,
    /// The whole case.
    Case,
}

impl Phase {
    /// The names of the stats line, in [`Stats::phase_ns`] order.
    pub const NAMES: [&'static str; 7] = [
        "generate",
        "oracle",
        "device",
        "chained judge (oracle's thread)",
        "judge",
        "give back",
        "case",
    ];

    /// Adds `d` to this phase's counter.
    pub fn add(self, d: std::time::Duration) {
        add_ns(&STATS.phase_ns[self as usize], d);
    }
}

/// Adds `d` to the nanosecond counter `c`.
fn add_ns(c: &AtomicU64, d: std::time::Duration) {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    c.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
}

/// `f`'s result and how long it took.
fn timed<R>(f: impl FnOnce() -> R) -> (R, std::time::Duration) {
    let t = std::time::Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    nonfinite: AtomicU64::new(0),
    graph: AtomicU64::new(0),
    specials: AtomicU64::new(0),
    zero_qk: AtomicU64::new(0),
    big_state: AtomicU64::new(0),
    negative_state: AtomicU64::new(0),
    eps_zero: AtomicU64::new(0),
    t1: AtomicU64::new(0),
    t_max: AtomicU64::new(0),
    batched: AtomicU64::new(0),
    audited: AtomicU64::new(0),
    phase_ns: [const { AtomicU64::new(0) }; 7],
    timed: AtomicU64::new(0),
    audited_judge_ns: AtomicU64::new(0),
    audited_timed: AtomicU64::new(0),
    device_ns: [const { AtomicU64::new(0) }; 6],
    page_faults: [const { AtomicU64::new(0) }; 3],
};

/// The runs of a case [`Stats::device_ns`] times apart.
/// "upload" is the case's one upload of its data ([`run::OnDevice`]);
/// a batched case's is in "batched".
pub const DEVICE_RUNS: [&str; 6] = ["upload", "chained", "packed", "twins", "graph", "batched"];

/// The parts of a case [`Stats::page_faults`] counts apart.
pub const FAULT_PARTS: [&str; 3] = ["generate, oracle and device", "judge", "give back"];

/// The process's minor page faults so far: field 10 of
/// `/proc/self/stat` (proc(5)), 0 where it cannot be read.
pub fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which is in parentheses and
            // may hold spaces: state is field 3, minflt field 10.
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The stats line [`check`] prints every [`STATS_EVERY`] cases: outcomes,
/// then what the generator drew, each with its share of the cases.
pub fn stats_line() -> String {
    let n = STATS.cases.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "gdn stats: {n} cases, non-finite outputs {}, graph-replayed {}, batched {}, audited {}; drawn: specials {}, zero q/k head {}, state near overflow {}, negative state {}, eps = 0 {}, t = 1 {}, t = {} {}{}",
        pct(&STATS.nonfinite, n),
        pct(&STATS.graph, n),
        pct(&STATS.batched, n),
        pct(&STATS.audited, n),
        pct(&STATS.specials, n),
        pct(&STATS.zero_qk, n),
        pct(&STATS.big_state, n),
        pct(&STATS.negative_state, n),
        pct(&STATS.eps_zero, n),
        pct(&STATS.t1, n),
        generate::config::MAX_T,
        pct(&STATS.t_max, n),
        phase_ms()
    )
}

/// `; ms a case: generate 0.20, oracle 1.31, ...`: [`Stats::phase_ns`]
/// over the cases timed (empty for none).
fn phase_ms() -> String {
    let n = STATS.timed.load(std::sync::atomic::Ordering::Relaxed);
    if n == 0 {
        return String::new();
    }
    let parts: Vec<String> = Phase::NAMES
        .iter()
        .zip(&STATS.phase_ns)
        .map(|(name, ns)| {
            let ns = ns.load(std::sync::atomic::Ordering::Relaxed);
            format!("{name} {:.2}", ns as f64 / n as f64 / 1e6)
        })
        .collect();
    let load = |c: &AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let audited = load(&STATS.audited_timed).max(1);
    let runs: Vec<String> = DEVICE_RUNS
        .iter()
        .zip(&STATS.device_ns)
        .map(|(name, c)| format!("{name} {:.2}", load(c) as f64 / n as f64 / 1e6))
        .collect();
    let faults: Vec<String> = FAULT_PARTS
        .iter()
        .zip(&STATS.page_faults)
        .map(|(name, c)| format!("{name} {:.1}", load(c) as f64 / n as f64))
        .collect();
    format!(
        "; ms a case: {} (judge of an audited case {:.2}; device runs: {}); minor page faults a case: {}",
        parts.join(", "),
        load(&STATS.audited_judge_ns) as f64 / audited as f64 / 1e6,
        runs.join(", "),
        faults.join(", ")
    )
}

/// Counts what the generator drew for `spec` in [`STATS`] (the graph
/// replay is counted where it runs).
pub fn count_drawn(spec: &CaseSpec) {
    for (on, c) in [
        (spec.specials, &STATS.specials),
        (spec.zero_qk != 0, &STATS.zero_qk),
        (spec.state_spread > 1.0, &STATS.big_state),
        (spec.negative_state, &STATS.negative_state),
        (spec.eps == 0.0, &STATS.eps_zero),
        (spec.t == 1, &STATS.t1),
        (spec.t == generate::config::MAX_T, &STATS.t_max),
    ] {
        if on {
            count(c);
        }
    }
}

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 1_000;

/// One case in this many (the process's first, then every this many) has
/// [`check`] read back every run the device found the same as its
/// reference, and hold the device comparison (`cu/bit_diff.cu`) to the
/// host's ([`run::Got::Audited`]); the gate and `kernel-oracle case gdn`
/// audit every case.
pub const AUDIT_EVERY: u64 = 8;

fn row(gate: u8, label: &'static str, spec: &CaseSpec, rule: Bits) -> Row {
    Row {
        gate,
        label,
        spec: *spec,
        rule,
        diffs: Vec::new(),
        error: None,
    }
}

/// The device's outputs of one case, every way [`judge_case`] runs it
/// ([`run_case`]), before any comparison on the host: the chained
/// launches' read back, every other run's compared with them on the
/// device first ([`run::Got`]).
#[derive(Debug)]
pub struct CaseRuns {
    /// `t` chained per-row launches ([`run::chained_kept`]).
    pub chained: ChainedSix,
    /// The eager fused step ([`run::packed`]).
    pub packed: Result<Got<Six>, device::cuda::DeviceError>,
    /// The packed twins ([`run::twins`]), when run.
    pub twins: Option<Result<Got<Six>, device::cuda::DeviceError>>,
    /// The graph replays ([`run::graph`]), when run.
    pub graph: Option<Result<run::GraphRun, device::cuda::DeviceError>>,
    /// How long the upload and the chained, packed, twin and graph runs
    /// took (zero for one not made), for [`Stats::device_ns`].
    pub times: [std::time::Duration; 5],
}

impl CaseRuns {
    /// Hands every output read back to the host pool ([`pool::POOL`]).
    pub fn give_back(self) {
        let CaseRuns {
            chained,
            packed,
            twins,
            graph,
            times: _,
        } = self;
        let read = Got::into_read;
        let mut sixes: Vec<Six> = chained.into_iter().collect();
        sixes.extend([packed].into_iter().chain(twins).flatten().filter_map(read));
        if let Some(Ok(g)) = graph {
            sixes.extend([g.rebound, g.swapped].into_iter().filter_map(read));
            for v in g.capture_time {
                POOL.give(v);
            }
        }
        for six in sixes {
            POOL.give_six(six);
        }
    }
}

/// Runs `data` through the device every way [`judge_case`] judges:
/// chained, packed, and when `graph` the packed twins and the graph
/// replays; the chained outputs are read back, the others compared with
/// them on the device ([`run::Got`]), and with `audit` read back too.
/// Compares nothing on the host (so the oracle can be computed meanwhile).
pub fn run_case(e: &GdnEngine, data: &CaseData, graph: bool, audit: bool) -> CaseRuns {
    run_case_handing(e, data, graph, audit, |c| c)
}

/// [`run_case`], the chained launches' outputs handed to `hand` as soon
/// as they are read back, before the other runs start (so another thread
/// can judge them meanwhile); what `hand` returns is the result's
/// `chained`.
pub(crate) fn run_case_handing(
    e: &GdnEngine,
    data: &CaseData,
    graph: bool,
    audit: bool,
    hand: impl FnOnce(ChainedSix) -> ChainedSix,
) -> CaseRuns {
    // The case's data uploaded once, every run made from it on the
    // device. Should the upload fail, each run uploads from the host
    // itself and reports its own error.
    let (up, t_up) = timed(|| run::OnDevice::new(e, &CaseSrc::host(data)).ok());
    let src = up
        .as_ref()
        .map_or_else(|| CaseSrc::host(data), run::OnDevice::src);
    let ((chained, kept), t_chained) = timed(|| match run::chained_kept(e, &src) {
        Ok((six, kept)) => (Ok(six), Some(kept)),
        Err(err) => (Err(err), None),
    });
    let chained = hand(chained);
    let reference = kept.as_ref().map(|k| k.reference(audit));
    let (packed, t_packed) = timed(|| run::packed(e, &src, reference));
    let (twins, t_twins) = timed(|| graph.then(|| run::twins(e, &src, reference)));
    let (graph, t_graph) = timed(|| graph.then(|| run::graph(e, &src, reference)));
    let times = [t_up, t_chained, t_packed, t_twins, t_graph];
    CaseRuns {
        chained,
        packed,
        twins,
        graph,
        times,
    }
}

/// The chained launches' outputs read back, or why not.
pub type ChainedSix = Result<Six, device::cuda::DeviceError>;

/// The diffs of a run judged against the chained launches' outputs `c`
/// (every bit): [`Got::Same`] passes every output (the device found each
/// word equal), [`Got::Read`] is compared element by element, and
/// [`Got::Audited`] too, with a failing diff more when the device's
/// verdict and the host's disagree ([`audit_diff`]).
fn against_chained(got: &Got<Six>, c: &Six) -> Vec<Diff> {
    match got {
        Got::Same => identical(c),
        Got::Read(g) => compare_six(g, c, Bits::Exact),
        Got::Audited { got, same } => {
            let mut d = compare_six(got, c, Bits::Exact);
            d.extend(audit_diff(*same, d.iter().all(Diff::pass)));
            d
        }
    }
}

/// The audit of the device comparison (`cu/bit_diff.cu`): a failing diff
/// when its verdict `device_same` is not the host's `host_same`.
fn audit_diff(device_same: bool, host_same: bool) -> Option<Diff> {
    (device_same != host_same).then(|| Diff {
        what: format!(
            "device comparison (cu/bit_diff.cu) said {}, the host {}",
            if device_same { "same" } else { "different" },
            if host_same { "same" } else { "different" }
        ),
        len: 1,
        diffs: 1,
        first: None,
        got_len: None,
    })
}

/// A passing diff for each of `c`'s six outputs: what a run bit-identical
/// to `c` compares as.
fn identical(c: &Six) -> Vec<Diff> {
    c.parts()
        .iter()
        .zip(judge::OUTPUTS)
        .map(|(p, what)| Diff {
            what: what.to_string(),
            len: p.len(),
            diffs: 0,
            first: None,
            got_len: None,
        })
        .collect()
}

/// Runs `data` (generated from `spec`) every way and judges it: gate 2's
/// "chained == oracle" and "packed == oracle" (the fused step), gate 1's
/// "packed == chained", and when `graph` the packed twins (three launches)
/// against the chained launches, and the two graph replays against them
/// plus the capture-time buffers left untouched. `want` is the
/// oracle's [`reference()`]. ([`run_case`] then [`judge_runs`].)
pub fn judge_case(
    e: &GdnEngine,
    spec: &CaseSpec,
    data: &CaseData,
    want: &Six,
    graph: bool,
) -> Vec<Row> {
    judge_runs(spec, data, want, &run_case(e, data, graph, true))
}

/// The rows of [`judge_case`] from the device's outputs `runs` of `data`
/// and the oracle's `want`.
pub fn judge_runs(spec: &CaseSpec, data: &CaseData, want: &Six, runs: &CaseRuns) -> Vec<Row> {
    judge_runs_given(spec, data, want, runs, None)
}

/// [`judge_runs`], with the chained outputs' diffs against `want`
/// (`compare_six(chained, want, Bits::NanAny)`) already made, when
/// `chained_vs_oracle` holds them. The runs' comparisons with the chained
/// outputs are independent and made in parallel.
pub fn judge_runs_given(
    spec: &CaseSpec,
    data: &CaseData,
    want: &Six,
    runs: &CaseRuns,
    chained_vs_oracle: Option<Vec<Diff>>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut r_chained = row(2, "chained per-row == oracle", spec, Bits::NanAny);
    let mut r_packed = row(2, "packed eager == oracle", spec, Bits::NanAny);
    let mut r_1 = row(1, "packed eager == chained", spec, Bits::Exact);
    let (chained, packed) = (&runs.chained, &runs.packed);
    // Each run read back (or found the same on the device) against the
    // chained outputs: packed, twins, the two graph replays.
    let vs = |got: Option<&Got<Six>>| Some(against_chained(got?, chained.as_ref().ok()?));
    let graph_ok = match &runs.graph {
        Some(Ok(g)) => Some(g),
        _ => None,
    };
    let twins_ok = match &runs.twins {
        Some(Ok(p)) => Some(p),
        _ => None,
    };
    let ((p_vs, twins_vs), (rebound_vs, swapped_vs)) = rayon::join(
        || rayon::join(|| vs(packed.as_ref().ok()), || vs(twins_ok)),
        || {
            rayon::join(
                || vs(graph_ok.map(|g| &g.rebound)),
                || vs(graph_ok.map(|g| &g.swapped)),
            )
        },
    );
    match chained {
        Ok(c) => {
            r_chained.diffs =
                chained_vs_oracle.unwrap_or_else(|| compare_six(c, want, Bits::NanAny))
        }
        Err(err) => r_chained.error = Some(err.to_string()),
    }
    match (packed, chained) {
        (Ok(_), Ok(_)) => r_1.diffs = p_vs.expect("both runs read"),
        (Err(err), _) | (_, Err(err)) => r_1.error = Some(err.to_string()),
    }
    match packed {
        // Bit-identical to the chained outputs (there is no Same without
        // them): the chained diffs are this run's.
        Ok(Got::Same) => r_packed.diffs = r_chained.diffs.clone(),
        Ok(Got::Read(p) | Got::Audited { got: p, .. }) => {
            // An output bit-identical to the chained one compares with the
            // oracle as the chained one did: its diff is the chained one's
            // (same name, same values); only the others are walked again.
            let same: Vec<bool> = match chained {
                Ok(_) => r_1.diffs.iter().map(Diff::pass).collect(),
                Err(_) => vec![false; 6],
            };
            let (g, w) = (p.parts(), want.parts());
            r_packed.diffs = (0..6)
                .map(|i| match (same[i], r_chained.diffs.get(i)) {
                    (true, Some(d)) => d.clone(),
                    _ => judge::compare(judge::OUTPUTS[i], g[i], w[i], Bits::NanAny),
                })
                .collect();
        }
        Err(err) => r_packed.error = Some(err.to_string()),
    }
    rows.extend([r_1, r_chained, r_packed]);
    if let Some(twins) = &runs.twins {
        let mut r_twins = row(1, "packed twins == chained", spec, Bits::Exact);
        match (twins, chained) {
            (Ok(_), Ok(_)) => r_twins.diffs = twins_vs.expect("both runs read"),
            (Err(err), _) | (_, Err(err)) => r_twins.error = Some(err.to_string()),
        }
        rows.push(r_twins);
    }
    if let Some(graph) = &runs.graph {
        let mut rebound = row(1, "graph replay, rebound == chained", spec, Bits::Exact);
        let mut swapped = row(1, "graph replay, swapped == chained", spec, Bits::Exact);
        match (graph, chained) {
            (Ok(g), Ok(_)) => {
                rebound.diffs = rebound_vs.expect("both runs read");
                swapped.diffs = swapped_vs.expect("both runs read");
                let zeros = vec![0f32; data.shape.state_len()];
                let before = [&data.ring0, &data.state0, &zeros];
                let names = [
                    "capture-time ring untouched",
                    "capture-time canonical untouched",
                    "capture-time alt untouched",
                ];
                for i in 0..3 {
                    rebound.diffs.push(judge::compare(
                        names[i],
                        &g.capture_time[i],
                        before[i],
                        Bits::Exact,
                    ));
                }
            }
            (Err(err), _) | (_, Err(err)) => {
                rebound.error = Some(err.to_string());
                swapped.error = Some(err.to_string());
            }
        }
        rows.extend([rebound, swapped]);
    }
    rows
}

/// The batched fused step over `datas` (the sequences of
/// [`CaseSpec::generate_batch`]) through every fused entry the engine
/// launches ([`GdnEngine::fused_entries`]), eagerly and as a replayed
/// CUDA graph, against each sequence's oracle ([`reference()`], any NaN
/// equal to any NaN; `want0`, when given, is sequence 0's, already
/// computed): one gate-2 row per entry and mode, its diffs named by
/// sequence ([`batched_runs`], every run read back and its device
/// comparison audited, then [`judge_batches`]).
pub fn judge_batch(
    e: &GdnEngine,
    spec: &CaseSpec,
    datas: &[CaseData],
    want0: Option<&Six>,
) -> Vec<Row> {
    let inputs = BatchInputs::new(datas);
    let gots = batched_runs(e, &inputs, true, true);
    inputs.give_back();
    let computed: Vec<Six> = if gots.iter().any(|(_, g)| g.is_ok()) {
        datas[usize::from(want0.is_some())..]
            .iter()
            .map(reference)
            .collect()
    } else {
        Vec::new()
    };
    let wants: Vec<&Six> = want0.into_iter().chain(&computed).collect();
    let rows = judge_batches(spec, &gots, &wants);
    give_back_batches(gots);
    rows
}

/// The rows of the batched runs `gots` ([`batched_runs`]), in order, each
/// sequence against its oracle `wants`: a run read back is compared
/// element by element ([`judge_batch_runs`]); a run bit-identical to the
/// reference run (the first read back) takes that run's diffs; an audited
/// run is compared, and its device verdict held to the host's comparison
/// with the reference run's outputs (a failing diff where they disagree).
pub fn judge_batches(spec: &CaseSpec, gots: &[(BatchHow, BatchGot)], wants: &[&Six]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::with_capacity(gots.len());
    let mut reference: Option<(usize, &BatchSix)> = None;
    for (how, got) in gots {
        let mut r = judge_batch_runs(spec, *how, got, wants, reference.map(|(i, _)| &rows[i]));
        if let (Ok(Got::Audited { got, same }), Some((_, base))) = (got, reference) {
            let host_same = compare_six(&got.all, &base.all, Bits::Exact)
                .iter()
                .all(Diff::pass);
            r.diffs.extend(audit_diff(*same, host_same));
        }
        if reference.is_none() {
            if let Ok(got) = got {
                reference = got.read().map(|g| (rows.len(), g));
            }
        }
        rows.push(r);
    }
    rows
}

/// Hands the batched runs' outputs read back to the host pool.
fn give_back_batches(gots: Vec<(BatchHow, BatchGot)>) {
    for (_, got) in gots {
        if let Some(got) = got.ok().and_then(Got::into_read) {
            POOL.give_six(got.all);
        }
    }
}

/// One batched run's fused entry and whether it was graph-replayed.
type BatchHow = (GdnFusedEntry, bool);

/// One batched run's outputs: read back, or bit-identical to the
/// reference run's ([`batched_runs`]).
pub type BatchGot = Result<Got<BatchSix>, device::cuda::DeviceError>;

/// The batched fused step over `inputs` through every fused entry the
/// engine launches, eagerly and, with `graph`, also as a replayed CUDA
/// graph ([`run::batched_ran`]): each run with its outputs. The first run
/// that succeeds is read back and kept on the device as the reference;
/// every later run is compared with it there ([`run::batch_got`]) and read
/// back only where it differs (with `audit`, read back always).
pub fn batched_runs(
    e: &GdnEngine,
    inputs: &BatchInputs<'_>,
    graph: bool,
    audit: bool,
) -> Vec<(BatchHow, BatchGot)> {
    let modes: &[bool] = if graph { &[false, true] } else { &[false] };
    let hows: Vec<BatchHow> = e
        .fused_entries()
        .into_iter()
        .flat_map(|entry| modes.iter().map(move |&g| (entry, g)))
        .collect();
    let nb = inputs.ds.len();
    // Uploaded once for every run (each run uploads from the host itself
    // should this fail, and reports its own error).
    let host = inputs.src();
    let up = run::OnDevice::new(e, &host).ok();
    let src = up.as_ref().map_or(host, run::OnDevice::src);
    let mut reference: Option<run::Ran> = None;
    let mut out = Vec::with_capacity(hows.len());
    for how in hows {
        let got = run::batched_ran(e, &src, how.0, how.1).and_then(|ran| {
            let against = reference.as_ref().map(|r: &run::Ran| run::Reference {
                parts: r.parts(),
                audit,
            });
            let got = run::batch_got(e, &ran, nb, against);
            if reference.is_none() && got.is_ok() {
                reference = Some(ran);
            }
            got
        });
        out.push((how, got));
    }
    out
}

/// The label of the batched row of `entry`, eager or graph-replayed.
pub fn batch_label(entry: GdnFusedEntry, graph: bool) -> &'static str {
    use GdnFusedEntry::{Persistent, C2};
    match (entry, graph) {
        (GdnFusedEntry::Main, false) => "batched fused == per-sequence oracle",
        (GdnFusedEntry::Main, true) => "batched fused, graph == per-sequence oracle",
        (C2, false) => "batched fused (clusters of 2) == per-sequence oracle",
        (C2, true) => "batched fused (clusters of 2), graph == per-seq. oracle",
        (Persistent { ctas: None }, false) => "batched fused (persistent) == per-sequence oracle",
        (Persistent { ctas: None }, true) => "batched fused (persistent), graph == per-seq. oracle",
        (Persistent { ctas: Some(_) }, false) => {
            "batched fused (persistent, capped) == per-seq. oracle"
        }
        (Persistent { ctas: Some(_) }, true) => {
            "batched fused (persistent, capped), graph == oracle"
        }
    }
}

/// The row of [`judge_batch`] from the batched step's outputs `got` (all
/// sequences', [`BatchSix::parts`]) through `how.0`, graph-replayed when
/// `how.1`, and each sequence's oracle `wants`, in order. `reference` is
/// the row of the run `got` was compared with on the device: a run
/// bit-identical to it ([`Got::Same`]) takes its diffs.
///
/// # Panics
/// When `got` holds outputs and `wants` holds another number of
/// sequences, or `got` is [`Got::Same`] with no `reference` (a caller's
/// bug).
pub fn judge_batch_runs(
    spec: &CaseSpec,
    how: BatchHow,
    got: &BatchGot,
    wants: &[&Six],
    reference: Option<&Row>,
) -> Row {
    let mut r = row(2, batch_label(how.0, how.1), spec, Bits::NanAny);
    match got {
        Ok(Got::Same) => {
            let base = reference.expect("a run found the same as a reference run has its row");
            r.diffs = base.diffs.clone();
            r.error = base.error.clone();
        }
        Ok(Got::Read(got) | Got::Audited { got, .. }) => {
            assert_eq!(got.batch, wants.len(), "sequences run and oracles given");
            // Every sequence's every output, in parallel, listed in order.
            r.diffs = (0..6 * wants.len())
                .into_par_iter()
                .map(|k| {
                    let (b, i) = (k / 6, k % 6);
                    judge::compare(
                        &format!("sequence {b} {}", judge::OUTPUTS[i]),
                        got.parts(b)[i],
                        wants[b].parts()[i],
                        Bits::NanAny,
                    )
                })
                .collect();
        }
        Err(err) => r.error = Some(err.to_string()),
    }
    r
}

/// Runs one case on the device and judges it against the oracle and
/// against itself (packed, chained, and graph-replayed when `spec.graph`).
///
/// # Panics
/// A bug is a panic: when any row of [`judge_case`] fails (an output
/// differs, or the device returns an error), and when there is no CUDA
/// device. The message is a reproduction ([`report::divergence`]).
pub fn check(spec: &CaseSpec) {
    check_with_artifact(spec, None)
}

/// [`check`], with a line that reruns the fuzz input `artifact` (its path,
/// or [`crate::libfuzzer_crash_artifact`] from a fuzz target) in the
/// reproduction ([`crate::fuzz_rerun_lines`]).
pub fn check_with_artifact(spec: &CaseSpec, artifact: Option<&str>) {
    let n = count(&STATS.cases);
    count_drawn(spec);
    if n.is_multiple_of(STATS_EVERY) {
        eprintln!("{}", stats_line());
    }
    let e = match engine() {
        Ok(e) => e,
        Err(msg) => panic!("gdn: no CUDA device to check against: {msg}"),
    };
    let audit = (n - 1).is_multiple_of(AUDIT_EVERY);
    if audit {
        count(&STATS.audited);
    }
    let case_start = std::time::Instant::now();
    let faults_start = minor_faults();
    // A batched case's sequence 0 is the case's own data, so it is drawn
    // once, with the others.
    let datas = if spec.batch > 1 {
        spec.generate_batch()
            .unwrap_or_else(|err| panic!("gdn: the generator made a refused batch: {err}"))
    } else {
        vec![spec
            .generate()
            .unwrap_or_else(|err| panic!("gdn: the generator made a refused shape: {err}"))]
    };
    let data = &datas[0];
    let generate = case_start.elapsed();
    // The oracle (every sequence's, in parallel) on another thread while
    // this one drives the device, which it mostly waits for: a case costs
    // the longer of the two, not their sum. That thread then takes the
    // chained launches' outputs as soon as they are read back, and
    // compares them with the oracle's while the other runs go on.
    let (
        runs,
        batched,
        wants,
        nonfinite,
        chained_vs_oracle,
        [oracle, chained_judge],
        [device, batched_time],
    ) = std::thread::scope(|sc| {
        // The sender is this closure's: a panic here drops it, so the
        // oracle's thread does not wait forever.
        let (tx, rx) = std::sync::mpsc::channel::<ChainedSix>();
        let ds = &datas;
        let oracle = sc.spawn(move || {
            let (wants, oracle) = timed(|| ds.par_iter().map(reference).collect::<Vec<Six>>());
            let nonfinite = wants[0].parts().iter().any(|p| judge::any_nonfinite(p));
            // Nothing comes when the device thread panicked before
            // sending (the scope then resumes its panic).
            let chained = rx.recv().ok();
            let (diffs, judged) = timed(|| {
                chained
                    .as_ref()
                    .and_then(|c| c.as_ref().ok())
                    .map(|c| compare_six(c, &wants[0], Bits::NanAny))
            });
            (wants, nonfinite, chained, diffs, [oracle, judged])
        });
        let device_start = std::time::Instant::now();
        let mut runs = run_case_handing(e, data, spec.graph, audit, |c| {
            // The outputs go to the oracle's thread, which hands them
            // back with its verdict; this placeholder is replaced
            // before anything judges it. (A send fails only when that
            // thread panicked: its join below resumes the panic.)
            match tx.send(c) {
                Ok(()) => Err(device::cuda::DeviceError::ArgLen {
                    arg: "chained outputs (with the oracle's thread)",
                    want: 0,
                    got: 0,
                }),
                Err(back) => back.0,
            }
        });
        // Graph-replayed too when the case asks for graphs.
        let (batched, batched_time) = timed(|| {
            if spec.batch > 1 {
                let inputs = BatchInputs::new(&datas);
                let runs = batched_runs(e, &inputs, spec.graph, audit);
                inputs.give_back();
                runs
            } else {
                Vec::new()
            }
        });
        let device = device_start.elapsed();
        let (wants, nonfinite, chained, diffs, times) = oracle
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        runs.chained = chained.expect("the chained outputs were sent");
        (
            runs,
            batched,
            wants,
            nonfinite,
            diffs,
            times,
            [device, batched_time],
        )
    });
    let judge_start = std::time::Instant::now();
    let faults_judge = minor_faults();
    let want = &wants[0];
    if nonfinite {
        count(&STATS.nonfinite);
    }
    if spec.graph {
        count(&STATS.graph);
    }
    let mut rows = judge_runs_given(spec, data, want, &runs, chained_vs_oracle);
    if !batched.is_empty() {
        count(&STATS.batched);
    }
    let refs: Vec<&Six> = wants.iter().collect();
    rows.extend(judge_batches(spec, &batched, &refs));
    if !rows.iter().all(Row::pass) {
        panic!(
            "{}",
            report::divergence(spec, &rows, &e.kernel_source(), artifact)
        );
    }
    let judge = judge_start.elapsed();
    let runs_times = runs.times;
    let faults_give_back = minor_faults();
    let give_back_start = std::time::Instant::now();
    runs.give_back();
    give_back_batches(batched);
    for six in wants {
        POOL.give_six(six);
    }
    for d in datas {
        POOL.give_data(d);
    }
    // Timed only when the case ends without a divergence (`Stats::timed`).
    for (phase, d) in [
        (Phase::Generate, generate),
        (Phase::Oracle, oracle),
        (Phase::Device, device),
        (Phase::ChainedJudge, chained_judge),
        (Phase::Judge, judge),
        (Phase::GiveBack, give_back_start.elapsed()),
        (Phase::Case, case_start.elapsed()),
    ] {
        phase.add(d);
    }
    for (c, d) in STATS
        .device_ns
        .iter()
        .zip(runs_times.iter().chain([&batched_time]))
    {
        add_ns(c, *d);
    }
    if audit {
        count(&STATS.audited_timed);
        add_ns(&STATS.audited_judge_ns, judge);
    }
    // Counted only where every read succeeded (a failed read gives 0).
    let faults = [faults_start, faults_judge, faults_give_back, minor_faults()];
    if faults.iter().all(|&f| f > 0) {
        for (c, w) in STATS.page_faults.iter().zip(faults.windows(2)) {
            c.fetch_add(
                w[1].saturating_sub(w[0]),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }
    count(&STATS.timed);
}

/// The oracle against itself (CPU only): one packed `decode_rows` call
/// equals `t` chained `decode_row` calls on all six outputs, every bit
/// (rule `PACKED-EQ-CHAINED` of `oracle::gdn::rows`), the fast path
/// [`crate::gdn_fast::decode_rows_fast`] equals the spec (any NaN equal to
/// any NaN: the payload is not in the contract), and the generated data
/// have the lengths the shape asks for.
///
/// # Panics
/// On any difference, with the case's literal.
pub fn oracle_packed_matches_chained(spec: &CaseSpec) {
    let data = spec
        .generate()
        .unwrap_or_else(|err| panic!("{err}: {}", report::spec_literal(spec)));
    let packed = judge::reference_spec(&data);
    let chained = oracle_chained(&data);
    let fast = reference(&data);
    for (what, got, bits) in [
        ("chained", &chained, Bits::Exact),
        ("fast", &fast, Bits::NanAny),
    ] {
        for d in compare_six(got, &packed, bits) {
            assert!(
                d.pass(),
                "oracle packed != {what}: {} ({} of {} differ, first {:?}): {}",
                d.what,
                d.diffs,
                d.len,
                d.first,
                report::spec_literal(spec)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::cuda::DeviceError;

    /// On Linux the fault count is read, and touching 64 MiB of fresh
    /// pages raises it by at least half their number counted as 2 MiB
    /// huge pages (16), whatever page size the kernel backs them with.
    #[test]
    #[cfg(target_os = "linux")]
    fn minor_faults_counts_fresh_pages() {
        let before = minor_faults();
        assert!(before > 0, "/proc/self/stat read");
        let mut v: Vec<u8> = Vec::with_capacity(64 << 20);
        for i in (0..v.capacity()).step_by(4096) {
            v.spare_capacity_mut()[i].write(1);
        }
        std::hint::black_box(&v);
        let after = minor_faults();
        assert!(after >= before, "{before} -> {after}");
        assert!(
            after - before >= (64 << 20) / 4096 / 2 / 512,
            "{before} -> {after}"
        );
    }

    /// The stats line names each phase with its time, the audited cases'
    /// judge, each device run and each part's page faults, in that order.
    #[test]
    fn stats_line_puts_each_figure_after_its_name() {
        STATS
            .timed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let line = stats_line();
        let tail = line.split("; ms a case: ").nth(1).expect("the timed part");
        let mut at = 0;
        for name in Phase::NAMES
            .iter()
            .chain(&["judge of an audited case"])
            .chain(&DEVICE_RUNS)
            .chain(&FAULT_PARTS)
        {
            let i = tail[at..]
                .find(&format!("{name} "))
                .unwrap_or_else(|| panic!("{name} after byte {at}: {tail}"));
            at += i + name.len() + 1;
            let figure: String = tail[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            assert!(figure.parse::<f64>().is_ok(), "{name}: {tail}");
        }
    }

    fn err() -> DeviceError {
        DeviceError::ArgLen {
            arg: "test",
            want: 1,
            got: 0,
        }
    }

    /// The judge of a case's device outputs, without a device: outputs
    /// equal to the oracle pass every row; one flipped bit of the packed
    /// step's final state fails "packed == oracle" and "packed == chained"
    /// and nothing else; a device error fails the rows that need that run;
    /// the twins and graph rows appear only when they ran; the batched row
    /// names the sequence that differs.
    #[test]
    fn judge_runs_fails_exactly_the_rows_a_difference_reaches() {
        let spec = CaseSpec::seed_like(1, 2, 4, 3, 7);
        let data = spec.generate().unwrap();
        let want = reference(&data);
        let runs = |packed: Six| CaseRuns {
            chained: Ok(want.clone()),
            packed: Ok(Got::Read(packed)),
            twins: None,
            graph: None,
            times: Default::default(),
        };
        let rows = judge_runs(&spec, &data, &want, &runs(want.clone()));
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(Row::pass));
        let mut bad = want.clone();
        bad.state[5] = f32::from_bits(bad.state[5].to_bits() ^ 1);
        let rows = judge_runs(&spec, &data, &want, &runs(bad.clone()));
        let failed: Vec<&str> = rows.iter().filter(|r| !r.pass()).map(|r| r.label).collect();
        assert_eq!(
            failed,
            ["packed eager == chained", "packed eager == oracle"]
        );
        let mut with_twins = runs(want.clone());
        with_twins.twins = Some(Err(err()));
        let rows = judge_runs(&spec, &data, &want, &with_twins);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[3].label, "packed twins == chained");
        assert!(!rows[3].pass() && rows[..3].iter().all(Row::pass));

        // A run the device found bit-identical to the chained one: it
        // passes "== chained" with every output's length, and "packed ==
        // oracle" fails exactly when "chained == oracle" does.
        let same = |chained: Six| CaseRuns {
            chained: Ok(chained),
            packed: Ok(Got::Same),
            twins: Some(Ok(Got::Same)),
            graph: None,
            times: Default::default(),
        };
        let rows = judge_runs(&spec, &data, &want, &same(want.clone()));
        assert!(rows.iter().all(Row::pass));
        let lens: Vec<usize> = rows[0].diffs.iter().map(|d| d.len).collect();
        assert_eq!(lens, want.parts().map(<[f32]>::len));
        let rows = judge_runs(&spec, &data, &want, &same(bad.clone()));
        let failed: Vec<&str> = rows.iter().filter(|r| !r.pass()).map(|r| r.label).collect();
        assert_eq!(
            failed,
            ["chained per-row == oracle", "packed eager == oracle"]
        );

        // An audited run: the device's verdict held to the host's. Equal
        // verdicts add nothing; a device that called a different run the
        // same, or the same run different, fails "== chained".
        let audited = |got: Six, same: bool| CaseRuns {
            chained: Ok(want.clone()),
            packed: Ok(Got::Audited { got, same }),
            twins: None,
            graph: None,
            times: Default::default(),
        };
        let rows = judge_runs(&spec, &data, &want, &audited(want.clone(), true));
        assert!(rows.iter().all(Row::pass));
        assert_eq!(rows[0].diffs.len(), 6);
        for (got, same) in [(bad.clone(), true), (want.clone(), false)] {
            let rows = judge_runs(&spec, &data, &want, &audited(got, same));
            assert!(!rows[0].pass(), "{}", rows[0].label);
            assert!(rows[0].diffs[6].what.starts_with("device comparison"));
        }

        let batch = CaseSpec { batch: 2, ..spec };
        let datas = batch.generate_batch().unwrap();
        let wants: Vec<Six> = datas.iter().map(reference).collect();
        let refs: Vec<&Six> = wants.iter().collect();
        let main = (GdnFusedEntry::Main, false);
        let all = BatchSix::from_seqs(&wants);
        assert!(judge_batch_runs(&batch, main, &Ok(Got::Read(all.clone())), &refs, None).pass());
        let mut got = wants.clone();
        got[1].o[0] = f32::from_bits(got[1].o[0].to_bits() ^ 1);
        let bad = BatchSix::from_seqs(&got);
        let r = judge_batch_runs(&batch, main, &Ok(Got::Read(bad.clone())), &refs, None);
        let failed: Vec<&str> = r
            .diffs
            .iter()
            .filter(|d| !d.pass())
            .map(|d| d.what.as_str())
            .collect();
        assert_eq!(failed, ["sequence 1 scan outputs"]);
        assert!(!judge_batch_runs(&batch, main, &Err(err()), &refs, None).pass());

        // Runs found bit-identical to the reference (the first read back)
        // take its verdict, whichever way it went; a failed run before it
        // is no reference.
        let c2 = (GdnFusedEntry::C2, false);
        let graph = (GdnFusedEntry::Main, true);
        let gots = [(main, Ok(Got::Read(bad))), (c2, Ok(Got::Same))];
        let rows = judge_batches(&batch, &gots, &refs);
        assert!(rows.iter().all(|r| !r.pass()));
        assert_eq!(rows[0].diffs, rows[1].diffs);
        let gots = [
            (main, Err(err())),
            (c2, Ok(Got::Read(all))),
            (graph, Ok(Got::Same)),
        ];
        let rows = judge_batches(&batch, &gots, &refs);
        let pass: Vec<bool> = rows.iter().map(Row::pass).collect();
        assert_eq!(pass, [false, true, true]);
        assert_eq!(rows[2].diffs.len(), 12);

        // Audited batched runs: held to the reference run's outputs.
        let all = BatchSix::from_seqs(&wants);
        let odd = BatchSix::from_seqs(&got);
        let gots = [
            (main, Ok(Got::Read(all.clone()))),
            (
                c2,
                Ok(Got::Audited {
                    got: all.clone(),
                    same: true,
                }),
            ),
            (
                graph,
                Ok(Got::Audited {
                    got: all,
                    same: false,
                }),
            ),
            (
                c2,
                Ok(Got::Audited {
                    got: odd,
                    same: true,
                }),
            ),
        ];
        let rows = judge_batches(&batch, &gots, &refs);
        let pass: Vec<bool> = rows.iter().map(Row::pass).collect();
        assert_eq!(pass, [true, true, false, false]);
        assert!(rows[2].diffs[12].what.starts_with("device comparison"));
        assert!(rows[3].diffs[12].what.starts_with("device comparison"));
    }
}
