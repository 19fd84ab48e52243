//! The fp8-mmq gate (seed 000's `fp8-mmq-check`): the ragged battery, the
//! seed's EXACT and RAND arms plus the FOLD and CODES arms (see
//! [`Arm::Fold`], [`Arm::Codes`]), the NaN precondition, and the e4m3 codes
//! decoded bit-exactly, all gated by counts.

use super::generate::{Arm, CaseSpec};
use super::judge::{reference, CodeSet, Identify};
use super::report;
use super::run::{self, declared_schedule, run_case_with_reference, Outcome};
use device::cuda::Engine;

/// The seed's default battery, `(in_f, out_f, m)`, ragged on purpose, and
/// one shape of ours: every in_f of the seed's nine is a multiple of 16, so
/// no weight row is ever unaligned and the kernel's byte-wise row path
/// never runs; the tenth shape runs it.
pub const BATTERY: [(usize, usize, usize); 10] = [
    (128, 128, 128),   // one scale block, one tile: the smallest complete case
    (256, 256, 64),    // 2x2 grid, m below a full activation tile
    (512, 384, 128),   // 3 scale rows exactly
    (5120, 1536, 512), // a real projection shape (27B q_proj class)
    (128, 200, 128),   // out_f % 128 != 0: partial last scale row
    (384, 320, 96),    // both axes ragged
    (144, 128, 128),   // in_f % 128 != 0: partial last scale column and k tail
    (272, 136, 40),    // in_f % 256 != 0, ragged out_f, small m
    (5120, 1536, 1),   // m = 1, the single-token edge
    (1000, 130, 7),    // ours: in_f % 16 != 0, unaligned weight rows
];

/// Legal e4m3 codes: 256 minus the two NaN magnitudes the dispatch refuses.
pub const LEGAL_CODES: usize = 254;

/// Legal e4m3 codes an output can tell apart, the coverage gate's target:
/// all but 0x80 (-0). Every output is a sum that starts at +0, and
/// `+0 + (-0) = +0` (round to nearest), so the output of a one-term row
/// is +0 whether its weight is 0x00 (+0) or 0x80 (-0): no output of any
/// case observes 0x80 apart from 0x00, and [`codes_decoded_exactly`](super::judge::codes_decoded_exactly)
/// never counts it.
pub const OBSERVABLE_CODES: usize = LEGAL_CODES - 1;

/// The gate's result.
#[derive(Debug, Default)]
pub struct GateResult {
    /// Failed rows (and the coverage line, when it fails).
    pub failures: usize,
    /// Distinct e4m3 weight codes the kernel decoded bit-exactly over all
    /// rows run: a code counts where the kernel's output bits equal the
    /// bits of the oracle's exact product for that output, output by output
    /// (the union of [`codes_decoded_exactly`](super::judge::codes_decoded_exactly) on each row's kernel output,
    /// [`Verdict::codes`](super::judge::Verdict::codes)); a refused row
    /// contributes nothing, a failing row only its matching outputs. At
    /// most [`OBSERVABLE_CODES`].
    pub codes_exact: usize,
    /// Rows run.
    pub rows: usize,
    /// Rows the GEMM peer (`KERNEL_ORACLE_FP8_MMQ=cublaslt`) refused:
    /// counted, printed, not failures.
    pub refused_by_peer: usize,
}

/// Runs every arm on every shape under the schedule the kernel declares
/// for that shape (`plan[15]`), printing the seed's table (each row with
/// the declared schedule and the known schedules its output matches bit
/// for bit), the coverage
/// line (e4m3 codes the kernel decoded bit-exactly, [`codes_decoded_exactly`](super::judge::codes_decoded_exactly)
/// on each row's kernel output, gated at [`OBSERVABLE_CODES`] on the
/// battery) and the verdict; each failing row also prints its
/// reproduction.
pub fn run(engine: &Engine, shapes: &[(usize, usize, usize)]) -> GateResult {
    let mut g = GateResult::default();
    let mut codes = CodeSet::default();
    println!("kernel source: {}", engine.kernel_source());
    println!("fp8 GEMM: {}", run::gemm_description());
    println!("device: {}", engine.device_name());
    println!("{}", report::table_header());
    for &(in_f, out_f, m) in shapes {
        for arm in Arm::ALL {
            let spec = CaseSpec::battery(in_f, out_f, m, arm);
            g.rows += 1;
            let data = match spec.generate() {
                Ok(d) => d,
                Err(e) => {
                    println!("{in_f},{out_f},{m} {}: bad shape: {e}  FAIL", arm.name());
                    g.failures += 1;
                    continue;
                }
            };
            let schedule = declared_schedule(engine, &data.shape);
            let t0 = std::time::Instant::now();
            let mut want = reference(&data, schedule);
            let oracle_time = t0.elapsed();
            // Every row says which known schedules its output matches.
            want.identify = Identify::Always;
            match run_case_with_reference(engine, &data, arm, &want) {
                Outcome::Judged(v) => {
                    // The codes this kernel's outputs decoded bit-exactly,
                    // whether or not the row passes.
                    codes.union(&v.codes);
                    println!("{}", report::table_row(&spec, &v, oracle_time));
                    if !v.pass() {
                        g.failures += 1;
                        print!(
                            "{}",
                            report::divergence(&spec, &v, &run::kernel_description(engine), None)
                        );
                    }
                }
                Outcome::PeerRefused { reason } => {
                    // The peer cannot take this shape: counted, not compared.
                    g.refused_by_peer += 1;
                    println!(
                        "{:<22} {:>6} {reason}  REFUSED",
                        format!("{in_f},{out_f},{m}"),
                        arm.name()
                    );
                }
                Outcome::Refused { count } => {
                    // The battery never draws NaN codes; a refusal is a bug
                    // here. No outputs: the row's codes do not count.
                    println!(
                        "{in_f},{out_f},{m} {}: refused, {count} NaN weight codes  FAIL",
                        arm.name()
                    );
                    g.failures += 1;
                }
            }
        }
    }
    println!();
    // Coverage is gated on the battery, whose every shape reaches all the
    // observable codes in its CODES row (with a right kernel); a single
    // small shape only reports it (one output row of out_f < 253 cannot
    // hold 253 codes).
    g.codes_exact = codes.count();
    let gated = shapes == BATTERY.as_slice();
    let codes_ok = g.codes_exact >= OBSERVABLE_CODES;
    println!(
        "e4m3 codes decoded bit-exactly by the kernel: {}/{OBSERVABLE_CODES} observable weight codes, each alone in an output of a CODES row whose kernel bits equal the exact product's (of the {LEGAL_CODES} legal codes, 0x80 (-0) is not observable: each output is a sum that starts at +0, so it reads +0 as 0x00 does; the NaN magnitudes 0x7F/0xFF are refused by the dispatch precondition)  {}",
        g.codes_exact,
        match (gated, codes_ok) {
            (true, true) => "PASS",
            (true, false) => "FAIL",
            (false, _) => "(reported, gated only on the battery)",
        }
    );
    if gated && !codes_ok {
        g.failures += 1;
    }
    if g.refused_by_peer > 0 {
        println!(
            "{} of {} rows refused by the peer (not compared, not failures)",
            g.refused_by_peer, g.rows
        );
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== fp8-mmq-check ALL GREEN under the declared schedules (EXACT, FOLD and CODES arms bit-identical, {}/{OBSERVABLE_CODES} observable e4m3 codes decoded bit-exactly, RAND arm bit-identical under a tensor-core schedule, else within the bound and < 1e-5 of RMS) ===",
            g.codes_exact
        );
    } else {
        println!("=== fp8-mmq-check {} FAILURES ===", g.failures);
    }
    g
}
