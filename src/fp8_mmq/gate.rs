//! The fp8-mmq gate (seed 000's `fp8-mmq-check`): the ragged battery, the
//! seed's EXACT and RAND arms plus the FOLD and CODES arms (see
//! [`Arm::Fold`], [`Arm::Codes`]), the NaN precondition, and the e4m3 codes
//! decoded bit-exactly, all gated by counts.

use super::generate::{Arm, CaseData, CaseSpec};
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

/// One row of the NaN-weight battery: the battery's EXACT case on
/// [`NAN_SHAPE`] with the codes `codes` planted in turn at
/// [`nan_positions`]. The device must refuse it (rule `NAN-W`) with the
/// oracle's count ([`oracle::fp8_mmq::count_nan_magnitude`]), before the
/// quantizer and the GEMM launch ([`run::device_refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NanRow {
    /// The row's name in the table.
    pub label: &'static str,
    /// The NaN-magnitude codes planted, cycled over the positions.
    pub codes: &'static [u8],
}

/// The NaN-weight rows: `0x7F` only, `0xFF` only, both.
pub const NAN_ROWS: [NanRow; 3] = [
    NanRow {
        label: "0x7F",
        codes: &[0x7F],
    },
    NanRow {
        label: "0xFF",
        codes: &[0xFF],
    },
    NanRow {
        label: "0x7F+0xFF",
        codes: &[0x7F, 0xFF],
    },
];

/// The shape of the NaN-weight rows, `(in_f, out_f, m)`: the battery's
/// ragged one (k tail, partial last scale row, unaligned weight rows), so
/// a count kernel that skips a row's tail or the last partial row
/// miscounts.
pub const NAN_SHAPE: (usize, usize, usize) = (1000, 130, 7);

/// The weight indices (row-major `[out_f x in_f]`) where a NaN row plants
/// its codes: the first weight, the last of the first row (the k tail),
/// one in the middle, the first of the last row, the last weight. Five
/// distinct indices for any shape of at least 2 x 3 weights.
pub fn nan_positions(in_f: usize, out_f: usize) -> [usize; 5] {
    let len = in_f * out_f;
    [0, in_f - 1, len / 2, (out_f - 1) * in_f, len - 1]
}

/// The data of a NaN row: the battery's EXACT case on [`NAN_SHAPE`] with
/// `row.codes` planted at [`nan_positions`].
pub fn nan_case(row: &NanRow) -> CaseData {
    let (in_f, out_f, m) = NAN_SHAPE;
    let mut data = CaseSpec::battery(in_f, out_f, m, Arm::Exact)
        .generate()
        .expect("the NaN shape is valid");
    for (i, at) in nan_positions(in_f, out_f).into_iter().enumerate() {
        data.w[at] = row.codes[i % row.codes.len()];
    }
    data
}

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
    /// Rows run (the NaN-weight rows included).
    pub rows: usize,
    /// Rows the GEMM peer (`KERNEL_ORACLE_FP8_MMQ=cublaslt`) refused:
    /// counted, printed, not failures.
    pub refused_by_peer: usize,
}

/// Runs one NaN-weight row and prints it: the device's refusal count
/// against the oracle's. Returns whether it passes.
fn nan_row(engine: &Engine, row: &NanRow) -> bool {
    let data = nan_case(row);
    let want = oracle::fp8_mmq::count_nan_magnitude(&data.w) as u64;
    let (in_f, out_f, m) = NAN_SHAPE;
    let shape = format!("{in_f},{out_f},{m}");
    let (verdict, what) = match run::device_refusal(engine, &data) {
        Ok(got) if got == want => (
            "PASS",
            format!("refused: device {got}, oracle {want} NaN weight codes; quantizer and GEMM not launched"),
        ),
        Ok(got) => (
            "FAIL",
            format!("refused with device count {got}, oracle {want} NaN weight codes"),
        ),
        Err(e) => ("FAIL", format!("{e}; oracle {want} NaN weight codes")),
    };
    println!(
        "{shape:<22} {:>6} {:<10} {what}  {verdict}",
        "NAN", row.label
    );
    if verdict == "FAIL" {
        println!(
            "  reproduce: the NaN row {:?} of kernel_oracle::fp8_mmq::gate::NAN_ROWS (gate::nan_case), on {}",
            row.label,
            run::kernel_description(engine)
        );
    }
    verdict == "PASS"
}

/// Runs every arm on every shape under the schedule the kernel declares
/// for that shape (`plan[15]`), printing the seed's table (each row with
/// the declared schedule and the known schedules its output matches bit
/// for bit), the coverage
/// line (e4m3 codes the kernel decoded bit-exactly, [`codes_decoded_exactly`](super::judge::codes_decoded_exactly)
/// on each row's kernel output, gated at [`OBSERVABLE_CODES`] on the
/// battery), the NaN-weight rows ([`NAN_ROWS`]: the device must refuse
/// with the oracle's count) and the verdict; each failing row also prints
/// its reproduction.
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
    for row in &NAN_ROWS {
        g.rows += 1;
        if !nan_row(engine, row) {
            g.failures += 1;
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
