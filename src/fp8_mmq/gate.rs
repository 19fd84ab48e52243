//! The fp8-mmq gate (seed 000's `fp8-mmq-check`): the ragged battery, the
//! seed's EXACT and RAND arms plus the FOLD arm (see [`Arm::Fold`]), the NaN
//! precondition and the e4m3 code coverage, all gated by counts.

use super::generate::{Arm, CaseSpec};
use super::judge::reference;
use super::report;
use super::run::{run_case_with_reference, Outcome};
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

/// The gate's result.
#[derive(Debug, Default)]
pub struct GateResult {
    /// Failed rows (and the coverage line, when it fails).
    pub failures: usize,
    /// The most distinct e4m3 codes seen in one case's operands.
    pub codes_max: usize,
    /// Rows run.
    pub rows: usize,
}

/// Distinct e4m3 codes among the weights and the quantized activations.
pub fn code_coverage(w: &[u8], q: &[u8]) -> usize {
    let mut seen = [false; 256];
    for &b in w.iter().chain(q) {
        seen[b as usize] = true;
    }
    seen.iter().filter(|s| **s).count()
}

/// Runs every arm on every shape, printing the seed's table, the coverage
/// line and the verdict; each failing row also prints its reproduction.
pub fn run(engine: &Engine, shapes: &[(usize, usize, usize)]) -> GateResult {
    let mut g = GateResult::default();
    println!("kernel source: {}", engine.kernel_source());
    println!("device: {}", engine.device_name());
    println!("{}", report::table_header());
    for &(in_f, out_f, m) in shapes {
        for arm in [Arm::Exact, Arm::Fold, Arm::Random] {
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
            let t0 = std::time::Instant::now();
            let want = reference(&data);
            let oracle_time = t0.elapsed();
            let codes = code_coverage(&data.w, data.qd.as_ref().map_or(&want.q, |(q, _)| q));
            g.codes_max = g.codes_max.max(codes);
            match run_case_with_reference(engine, &data, arm, &want) {
                Outcome::Judged(v) => {
                    println!("{}", report::table_row(&spec, &v, codes, oracle_time));
                    if !v.pass() {
                        g.failures += 1;
                        print!(
                            "{}",
                            report::divergence(
                                &spec,
                                &v,
                                &engine.kernel_source().to_string(),
                                None
                            )
                        );
                    }
                }
                Outcome::Refused { count } => {
                    // The battery never draws NaN codes; a refusal is a bug here.
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
    // Coverage is gated on the battery, whose shapes are large enough to hold
    // every code; a single small shape only reports it (a 16x8 weight plane
    // cannot hold 254 codes).
    let gated = shapes == BATTERY.as_slice();
    let codes_ok = g.codes_max >= LEGAL_CODES;
    println!(
        "e4m3 code coverage: {}/{LEGAL_CODES} legal codes exercised (both NaN magnitudes 0x7F/0xFF excluded by the dispatch precondition)  {}",
        g.codes_max,
        match (gated, codes_ok) {
            (true, true) => "PASS",
            (true, false) => "FAIL",
            (false, _) => "(reported, gated only on the battery)",
        }
    );
    if gated && !codes_ok {
        g.failures += 1;
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== fp8-mmq-check ALL GREEN (EXACT and FOLD arms bit-identical, RAND arm < 1e-5 of RMS, {LEGAL_CODES}/{LEGAL_CODES} codes) ==="
        );
    } else {
        println!("=== fp8-mmq-check {} FAILURES ===", g.failures);
    }
    g
}
