//! The fp8-mmq gate (seed 000's `fp8-mmq-check`): the ragged battery, the
//! seed's EXACT and RAND arms plus the FOLD and CODES arms (see
//! [`Arm::Fold`], [`Arm::Codes`]), the NaN precondition, and the e4m3 codes
//! decoded bit-exactly, all gated by counts.

use super::generate::{Arm, CaseData, CaseSpec};
use super::judge::{reference, CodeSet, Identify, Reference};
use super::report;
use super::run::{self, declared_schedule, run_case_with_reference, Outcome};
use device::cuda::Engine;
use oracle::fp8_mmq::Schedule;

/// The seed's default battery, `(in_f, out_f, m)`, ragged on purpose, and
/// one shape of ours: every in_f of the seed's nine is a multiple of 16, so
/// no weight row is ever off a 16-byte boundary and the kernel's byte-wise
/// row path never runs; the tenth shape (in_f 1000) runs it, with rows on
/// 8-byte boundaries (rows off a 4-byte boundary: [`VARIANT_SHAPES`]).
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
    (1000, 130, 7),    // ours: in_f % 16 != 0, weight rows off 16-byte boundaries
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
/// ragged one (k tail, partial last scale row, rows off 16-byte boundaries), so
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

/// The largest row (`in_f * out_f * m` multiply-adds) whose table line
/// says under which known schedules its output is bit-identical even when
/// it passes ([`Identify::Always`]): identification computes the GEMM once
/// per known accumulation on top of the declared one, which on the
/// battery's projection shape (5120 x 1536 x 512, 4.0e9) quadruples the
/// row's oracle time and dominates a `score` of the planted bugs. Larger
/// rows identify only when they fail ([`Identify::OnFailure`]); the
/// verdict is under the declared schedule either way.
pub const IDENTIFY_ALWAYS_MACS: usize = 1 << 28;

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
    /// Rows run (the NaN-weight rows included, and the coverage line when
    /// it is gated).
    pub rows: usize,
    /// Rows the GEMM peer (`KERNEL_ORACLE_FP8_MMQ=cublaslt`) refused:
    /// counted, printed, not failures.
    pub refused_by_peer: usize,
    /// Rows not run because an earlier row lost the CUDA context (counted
    /// in `failures` too).
    pub not_run: usize,
}

/// Runs one NaN-weight row and prints it: the device's refusal count
/// against the oracle's. `variant` is the MMQ variant forced (its plan
/// sizes the count kernel's grid), `None` for the plan's pick. Returns
/// whether it passes.
fn nan_row(engine: &Engine, row: &NanRow, variant: Option<u32>) -> bool {
    let data = nan_case(row);
    let want = oracle::fp8_mmq::count_nan_magnitude(&data.w) as u64;
    let (in_f, out_f, m) = NAN_SHAPE;
    let shape = format!("{in_f},{out_f},{m}");
    let got = if let Some(lost) = device::cuda::context_lost() {
        Err(not_run(&lost))
    } else {
        run::with_variant(engine, variant, || run::device_refusal(engine, &data)).and_then(|r| r)
    };
    let (verdict, what) = match got {
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
        "{shape:<22} {:>6} {:<10} {what}  {verdict}{}",
        "NAN",
        row.label,
        variant_note(variant)
    );
    if verdict == "FAIL" {
        // The one-shape gate runs every NaN row (each variant's too).
        let note = format!(
            "its NaN row {:?}{}",
            row.label,
            variant.map_or(String::new(), |v| format!(", variant {v} forced"))
        );
        let cmd = format!(
            "{}{} check fp8-mmq {in_f} {out_f} {m}",
            report::repro_env(),
            crate::paths::rerun_prefix()
        );
        println!("{}", crate::rerun_row(Some(&note), &cmd));
    }
    verdict == "PASS"
}

/// The shapes every exported MMQ variant runs forced, `(in_f, out_f, m)`
/// (the battery runs only the variant the plan picks per shape): weight
/// rows at every byte offset mod 4 (in_f = 1003 = 3 mod 4: row o starts
/// at byte 1003 o, offsets 0, 3, 2, 1 in turn, so every shift of the
/// unaligned weight loads runs; the battery's in_f are multiples of 4 and
/// reach none of them), with a k tail and a partial scale row and column,
/// a small m off every tile, several tiles each way with both
/// axes ragged, and in_f an exact multiple of the activations' row
/// padding (512: `in_f_pad = in_f`, the ABI's row stride of `q` and
/// `act_blocks` with no padding; a variant rounding it up one pad too far
/// read every token's codes and scales but the first at the wrong row and
/// passed the other three shapes, whose in_f are not multiples of 512).
pub const VARIANT_SHAPES: [(usize, usize, usize); 4] = [
    (1003, 130, 7),
    (272, 200, 17),
    (384, 320, 96),
    (512, 136, 24),
];

/// The k extent of [`tile_covering_shape`]: two 128-k scale blocks and a
/// 16-k tail.
pub const TILE_COVERING_IN_F: usize = 272;

/// A shape that gives variant `v`'s tile grid (its plan's `tile_rows` out_f
/// rows by `tile_cols` tokens a CTA, `plan[13]` and `plan[14]`) two whole
/// tiles and a ragged third along both axes: out_f = 2.5 tile_rows + 3 and
/// m = 2.5 tile_cols + 5, in_f [`TILE_COVERING_IN_F`]. Each output row
/// group and token group a CTA splits its tile into (warpgroups, warps,
/// accumulator sets) then holds real outputs in the two whole tiles, and
/// the ragged third (half a tile and 3 rows or 5 tokens) ends inside a
/// group, whatever the variant's geometry; [`VARIANT_SHAPES`] alone
/// (m <= 96) leaves a 192-token tile's third warpgroup empty.
///
/// # Errors
/// The engine's message when `v` is not exported or its plan is refused.
pub fn tile_covering_shape(engine: &Engine, v: u32) -> Result<(usize, usize, usize), String> {
    let probe = oracle::fp8_mmq::Shape::new(1, TILE_COVERING_IN_F, 1).map_err(|e| e.to_string())?;
    let plan =
        run::with_variant(engine, Some(v), || engine.plan(&probe))?.map_err(|e| e.to_string())?;
    Ok(covering_dims(
        plan.tile_rows as usize,
        plan.tile_cols as usize,
    ))
}

/// [`tile_covering_shape`] of a tile of `rows` out_f rows by `cols` tokens
/// (multiples of 16, as every variant plans them): `(in_f, out_f, m)`.
pub fn covering_dims(rows: usize, cols: usize) -> (usize, usize, usize) {
    (
        TILE_COVERING_IN_F,
        (5 * rows).div_ceil(2) + 3,
        (5 * cols).div_ceil(2) + 5,
    )
}

/// The message of a row not run because the context was lost.
fn not_run(lost: &device::cuda::Lost) -> String {
    format!(
        "not run: the CUDA context was lost at an earlier row ({}); the rerun line runs this row alone",
        lost.what
    )
}

fn variant_note(variant: Option<u32>) -> String {
    variant.map_or(String::new(), |v| format!("  (variant {v} forced)"))
}

/// The rows one arm of one shape adds to the gate: runs the case (with
/// `variant` forced, or the plan's pick) and prints its row, and its
/// reproduction when it fails. A device failure is a failing row with the
/// message and the rerun line, never a panic; a row after a lost context
/// is a failing row that says it was not run.
fn arm_row(
    engine: &Engine,
    g: &mut GateResult,
    codes: &mut CodeSet,
    spec: &CaseSpec,
    variant: Option<u32>,
) {
    let (in_f, out_f, m) = (spec.in_f, spec.out_f, spec.m);
    g.rows += 1;
    let fail = |g: &mut GateResult, message: String| {
        g.failures += 1;
        println!(
            "{:<22} {:>6} {message}  FAIL{}",
            format!("{in_f},{out_f},{m}"),
            spec.arm.name(),
            variant_note(variant)
        );
        println!("  rerun: {}", report::repro_command(spec));
    };
    if let Some(lost) = device::cuda::context_lost() {
        g.not_run += 1;
        return fail(g, not_run(&lost));
    }
    let data = match spec.generate() {
        Ok(d) => d,
        Err(e) => return fail(g, format!("bad shape: {e}")),
    };
    let outcome = run::with_variant(engine, variant, || {
        let schedule = match declared_schedule(engine, &data.shape) {
            Ok(s) => s,
            Err(message) => return (Outcome::Failed { message }, Default::default()),
        };
        let t0 = std::time::Instant::now();
        let mut want = shared_reference(spec, &data, schedule);
        let oracle_time = t0.elapsed();
        // Every row up to IDENTIFY_ALWAYS_MACS says which known schedules
        // its output matches; a larger one only when it fails.
        if in_f * out_f * m <= IDENTIFY_ALWAYS_MACS {
            want.identify = Identify::Always;
        }
        (
            run_case_with_reference(engine, &data, spec.arm, &want),
            oracle_time,
        )
    });
    let (outcome, oracle_time) = match outcome {
        Ok(o) => o,
        Err(message) => return fail(g, message),
    };
    match outcome {
        Outcome::Judged(v) => {
            // The codes the plan's picks decoded bit-exactly, whether or
            // not the row passes (a forced variant's CODES rows are judged
            // bit for bit on their own).
            if variant.is_none() {
                codes.union(&v.codes);
            }
            println!(
                "{}{}",
                report::table_row(spec, &v, oracle_time),
                variant_note(variant)
            );
            if !v.pass() {
                g.failures += 1;
                print!(
                    "{}",
                    report::divergence(spec, &v, &run::kernel_description(engine), None)
                );
            }
        }
        Outcome::PeerRefused { reason } => {
            // The peer cannot take this shape: counted, not compared.
            g.refused_by_peer += 1;
            println!(
                "{:<22} {:>6} {reason}  REFUSED",
                format!("{in_f},{out_f},{m}"),
                spec.arm.name()
            );
        }
        Outcome::Refused { count } => {
            // The battery never draws NaN codes; a refusal is a bug here.
            // No outputs: the row's codes do not count.
            fail(
                g,
                format!("refused, {count} NaN weight codes, on weights with none"),
            );
        }
        Outcome::Failed { message } => fail(g, message),
    }
}

/// [`reference`] for the row `spec` under `schedule`, through the
/// reference cache ([`crate::refcache`]; off unless `score` or the user
/// names a directory): the gates of the planted bugs run the same rows,
/// so the projection shape's oracle is computed once per score, not once
/// per bug. The key is the spec (shape, arm, seed, knobs: the data), the
/// schedule and the oracle path ([`crate::ENV_ORACLE`]).
fn shared_reference(spec: &CaseSpec, data: &CaseData, schedule: Schedule) -> Reference {
    use crate::refcache::{bytes_f32, f32_bytes, get_or_compute};
    let key = format!(
        "fp8-mmq {spec:?} {schedule:?} spec-oracle={}",
        crate::use_spec_oracle()
    );
    let (q_len, d_len) = (data.shape.q_len(), data.shape.d_len());
    let bytes = get_or_compute(&key, || {
        let r = reference(data, schedule);
        let mut b = (r.nan as u64).to_le_bytes().to_vec();
        b.extend_from_slice(&r.q);
        b.extend(f32_bytes(&r.d));
        b.extend(f32_bytes(&r.y));
        b
    });
    let y_len = data.shape.out_len();
    if bytes.len() != 8 + q_len + 4 * (d_len + y_len) {
        // Not this row's answer (a file from elsewhere): compute it.
        return reference(data, schedule);
    }
    let nan = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let q = bytes[8..8 + q_len].to_vec();
    let d = bytes_f32(&bytes[8 + q_len..8 + q_len + 4 * d_len]);
    let y = bytes_f32(&bytes[8 + q_len + 4 * d_len..]);
    Reference {
        schedule,
        identify: Identify::OnFailure,
        nan,
        q,
        d,
        y,
    }
}

/// Runs every arm on every shape under the schedule the kernel declares
/// for that shape (`plan[15]`), printing the seed's table (each row with
/// the declared schedule and, up to [`IDENTIFY_ALWAYS_MACS`] and on every
/// failing row, the known schedules its output matches bit for bit), the
/// coverage
/// line (e4m3 codes the kernel decoded bit-exactly, [`codes_decoded_exactly`](super::judge::codes_decoded_exactly)
/// on each row's kernel output, gated at [`OBSERVABLE_CODES`] on the
/// battery), the NaN-weight rows ([`NAN_ROWS`]: the device must refuse
/// with the oracle's count) and the verdict; each failing row also prints
/// its reproduction.
///
/// Then every MMQ variant the source exports (`plan[12]`, so a variant
/// added to the source is run without a change here) runs forced, every
/// arm on [`VARIANT_SHAPES`] and on its own [`tile_covering_shape`] (on
/// `shapes` itself when it is one shape), and the NaN row with both codes,
/// each judged under the schedule that variant declares.
///
/// A device failure (a launch error, a write past an output, a fault, a
/// launch past the deadline `KERNEL_ORACLE_LAUNCH_TIMEOUT`) is a failing
/// row with its message and rerun line, and the gate goes on; after a
/// failure that loses the CUDA context (a sticky fault, a deadline), the
/// remaining rows are failing rows marked not run, each with its rerun line.
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
            arm_row(engine, &mut g, &mut codes, &spec, None);
        }
    }
    for row in &NAN_ROWS {
        g.rows += 1;
        g.not_run += usize::from(device::cuda::context_lost().is_some());
        if !nan_row(engine, row, None) {
            g.failures += 1;
        }
    }
    // Every exported variant, forced (the peer has no variants).
    let forced_variants = matches!(run::peer(), Ok(None));
    if forced_variants {
        let variant_shapes: &[(usize, usize, usize)] = if shapes.len() == 1 {
            shapes
        } else {
            &VARIANT_SHAPES
        };
        println!();
        println!(
            "every exported MMQ variant forced ({} of plan[12]), every arm on {variant_shapes:?}{}:",
            engine.mmq_variants(),
            if shapes.len() > 1 {
                " and on its own tile-covering shape (in_f 272, out_f 2.5 tile rows + 3, m 2.5 tile tokens + 5)"
            } else {
                ""
            }
        );
        for v in 0..engine.mmq_variants() {
            // The battery's run also gives each variant a shape that covers
            // its own tile geometry; no such shape is a failing row.
            let mut own: Vec<(usize, usize, usize)> = variant_shapes.to_vec();
            if shapes.len() > 1 {
                match tile_covering_shape(engine, v) {
                    Ok(shape) => own.push(shape),
                    Err(msg) => {
                        g.rows += 1;
                        g.failures += 1;
                        println!("variant {v}: no tile-covering shape: {msg}  FAIL");
                    }
                }
            }
            for &(in_f, out_f, m) in &own {
                for arm in Arm::ALL {
                    let mut spec = CaseSpec::battery(in_f, out_f, m, arm);
                    spec.knobs.variant = Some(v as u8);
                    arm_row(engine, &mut g, &mut codes, &spec, Some(v));
                }
            }
            g.rows += 1;
            g.not_run += usize::from(device::cuda::context_lost().is_some());
            if !nan_row(engine, &NAN_ROWS[2], Some(v)) {
                g.failures += 1;
            }
        }
    }
    if let Some(lost) = device::cuda::context_lost() {
        println!();
        println!(
            "the CUDA context was lost ({}); {} later row(s) were not run and count as failures; each rerun line runs its row alone in a fresh process",
            lost.what, g.not_run
        );
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
    // The coverage line is a row of its own when gated, so that failures
    // never outnumber rows.
    if gated {
        g.rows += 1;
        g.failures += usize::from(!codes_ok);
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
            "=== fp8-mmq-check ALL GREEN under the declared schedules (EXACT, FOLD and CODES arms bit-identical, {}/{OBSERVABLE_CODES} observable e4m3 codes decoded bit-exactly, RAND arm bit-identical under a tensor-core schedule, else within the bound and < 1e-5 of RMS; {} rows{}) ===",
            g.codes_exact,
            g.rows,
            if forced_variants {
                ", every exported MMQ variant forced among them"
            } else {
                ""
            }
        );
    } else {
        println!("=== fp8-mmq-check {} FAILURES ===", g.failures);
    }
    g
}
