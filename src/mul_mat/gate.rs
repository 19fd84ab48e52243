//! The mul-mat gate: every dtype on every shape, EXACT and RANDOM arms,
//! against the core oracle.
//!
//! Two batteries:
//! - [`LFM_SHAPES`]: seed 004's LFM2.5-350M 512-token prefill projections,
//!   at full size. `kernel-oracle check mul-mat --full` and the GPU host
//!   run them (on lavapipe they take minutes).
//! - [`CI_SHAPES`]: what `cargo test` runs on lavapipe: the seed's real K
//!   and M of `ffn_down` and `attn_out` with N cut from 512 to 64 (the
//!   longest K, 4608, is where the EXACT bound is tightest), and ragged
//!   shapes (m and n off the 64-wide workgroup block, m = n = 1, f32 k
//!   not a multiple of TILE_K), and two with n > m (few columns, many
//!   rows: a store that skips the column check writes from the last row's
//!   partial workgroup block into the guard band after `dst`).
//!
//! Every shape runs three arms: EXACT, RANDOM, and BAL (RANDOM data with
//! balanced products, so the one-output row fails a kernel that drops any
//! product; see `super::judge`).
//!
//! Every row runs in each form the engine has (`WgpuEngine::forms`: the
//! plain source, and its subgroup form where the adapter has subgroups),
//! the form named in the row; an engine without a subgroup form says why
//! in the header ([`form_line`]), an explicit skip of that form only. The
//! subgroup rows are followed by the [`exchange_canary`] rows, which show
//! that the form's exchange ran at each geometry rather than its run-time
//! fallback to the plain reads (which computes the same outputs).

use super::generate::{Arm, CaseSpec};
use super::judge::{reference, Verdict};
use super::report;
use super::run::run_case_form;
use device::wgpu::{Dtype, Form, Geometry, WgpuEngine, WgpuError};

/// One named shape: `dst[n, m] = src0[m, k] * src1[n, k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The projection's name.
    pub label: &'static str,
    /// Output rows (src0 rows).
    pub m: usize,
    /// Row length, elements.
    pub k: usize,
    /// Tokens (src1 rows).
    pub n: usize,
}

const fn shape(label: &'static str, m: usize, k: usize, n: usize) -> Shape {
    Shape { label, m, k, n }
}

/// Seed 004's LFM2.5-350M 512-token prefill shapes.
pub const LFM_SHAPES: [Shape; 4] = [
    shape("ffn_gate", 4608, 1024, 512),
    shape("ffn_down", 1024, 4608, 512),
    shape("conv_in", 3072, 1024, 512),
    shape("attn_out", 1024, 1024, 512),
];

/// The shapes `cargo test` runs on lavapipe (see the module doc).
pub const CI_SHAPES: [Shape; 8] = [
    shape("ffn_down/8", 1024, 4608, 64),
    shape("attn_out/8", 1024, 1024, 64),
    shape("ragged", 197, 512, 67),
    shape("m1n1", 1, 256, 1),
    shape("m-edge", 65, 768, 63),
    shape("k-tail", 70, 100, 9),
    shape("n>m", 3, 256, 70),
    shape("n>>m", 17, 512, 131),
];

/// The geometries the gate runs: the seed's default and a small one with a
/// long TILE_K (more workgroups, partial k tiles on every dtype).
pub const GEOMETRIES: [Geometry; 2] = [
    Geometry {
        wg_m: 16,
        wg_n: 16,
        tile_k: 16,
    },
    Geometry {
        wg_m: 8,
        wg_n: 4,
        tile_k: 40,
    },
];

/// The gate's result.
#[derive(Debug, Default)]
pub struct GateResult {
    /// Failed rows.
    pub failures: usize,
    /// Rows run.
    pub rows: usize,
}

/// The spec the gate runs for `shape`, `dtype`, `arm`: a fixed seed per
/// (shape, dtype, arm).
pub fn spec(shape: &Shape, dtype: Dtype, arm: Arm) -> CaseSpec {
    let seed = 0x5EED_0004_0000_0000
        ^ ((shape.m as u64) << 32)
        ^ ((shape.k as u64) << 16)
        ^ (shape.n as u64)
        ^ ((device::wgpu::dtype_code(dtype) as u64) << 60)
        ^ ((arm == Arm::Exact) as u64) << 59
        ^ ((arm == Arm::Balanced) as u64) << 58;
    CaseSpec {
        dtype,
        m: shape.m,
        n: shape.n,
        k: shape.k,
        arm,
        seed,
    }
}

/// Runs one case in the engine's default form
/// (`WgpuEngine::default_form`); returns its verdict, or the shim's error.
///
/// # Errors
/// The shim's [`WgpuError`] (a refusal, a compile error of
/// a candidate, a device error, a write past `dst`).
pub fn run_one(
    engine: &WgpuEngine,
    spec: &CaseSpec,
    geom: &Geometry,
) -> Result<Verdict, WgpuError> {
    run_one_form(engine, spec, geom, engine.default_form())
}

/// [`run_one`] in the shader form `form`.
///
/// # Errors
/// As [`run_one`]; `WgpuError::NoSubgroupForm` for the subgroup form on
/// an engine without one.
pub fn run_one_form(
    engine: &WgpuEngine,
    spec: &CaseSpec,
    geom: &Geometry,
    form: Form,
) -> Result<Verdict, WgpuError> {
    let data = spec.generate();
    let got = run_case_form(engine, &data, *geom, form)?;
    Ok(Verdict::judge(&data, &got, &reference(&data)))
}

/// The header line naming the forms the gate runs: `forms: plain, sg32
/// (subgroup form: 32 lanes a subgroup)`, or `forms: plain (no subgroup
/// form: REASON)`, and the default form with its reason.
pub fn form_line(engine: &WgpuEngine) -> String {
    let why = match engine.subgroup_form() {
        Ok(lanes) => format!("subgroup form: {lanes} lanes a subgroup"),
        Err(reason) => format!("no subgroup form: {reason}; that form is skipped"),
    };
    format!(
        "forms: {} ({why}); default {} ({})",
        engine.form_labels(&engine.forms()),
        engine.form_label(engine.default_form()),
        engine.default_reason()
    )
}

/// One gate row: runs `spec` with `geom` and returns whether it passes and
/// the lines to print: the table row, and for a failing row its
/// divergence report, or the shim's error (a write past `dst` into the
/// guard band, a device error, a shader that does not compile) with its
/// rerun lines. A shim failure is a failing row, never a panic. A compile
/// error already in `compile_errors` is referred to rather than
/// repeated; a new one is added there.
pub fn row(
    engine: &WgpuEngine,
    label: &str,
    spec: &CaseSpec,
    geom: &Geometry,
    form: Form,
    compile_errors: &mut Vec<String>,
) -> (bool, String) {
    let dtype = spec.dtype;
    let form_label = engine.form_label(form);
    match run_one_form(engine, spec, geom, form) {
        Ok(v) => {
            let mut s = format!(
                "{}\n",
                report::table_row(label, spec, geom, &form_label, &v)
            );
            if !v.pass() {
                s += &report::divergence(spec, geom, form, &v, &engine.source().describe(), None);
            }
            (v.pass(), s)
        }
        // A shader that does not compile fails every row the same way:
        // its log once, then one line a row.
        Err(WgpuError::Compile { ref message, .. }) if compile_errors.contains(message) => (
            false,
            format!(
                "{} {label} {} {form_label}: the shader does not compile (the error above)  FAIL\n{}",
                dtype.name(),
                spec.arm.name(),
                report::rerun_lines(spec, geom, form, None)
            ),
        ),
        Err(e) => {
            let s = format!(
                "{} {label} {} {form_label}: the shim failed: {e}  FAIL\n{}",
                dtype.name(),
                spec.arm.name(),
                report::rerun_lines(spec, geom, form, None)
            );
            if let WgpuError::Compile { message, .. } = e {
                compile_errors.push(message);
            }
            (false, s)
        }
    }
}

/// The planted change whose failure shows that the subgroup form's
/// exchange runs ([`super::mutants::MUTANTS`]): it pairs each weight with
/// the wrong lane's activation, so it changes the outputs exactly where
/// the exchange runs. The subgroup form checks the subgroup layout at run
/// time and falls back to the plain reads without it, which computes the
/// same outputs; so a passing `sgN` row alone does not show that the
/// exchange ran.
pub const EXCHANGE_CANARY: &str = "sg-shuffle-wrong-lane";

/// The exchange canary's rows, one for each `(geometry, shape)` the gate
/// runs in the subgroup form: the f32 EXACT case of `shape` in the
/// subgroup form through the engine's source and through that source with
/// [`EXCHANGE_CANARY`] planted. A row passes when the two outputs differ
/// (the exchange ran: the planted line changed them), and fails when they
/// are bit-identical (every subgroup of that geometry fell back to the
/// plain reads, so its `sgN` rows tested the plain form) or either does
/// not run. A source without the canary's anchor gets a note and no rows.
/// Prints the rows; returns (rows, failures).
pub fn exchange_canary(engine: &WgpuEngine, geoms: &[(Geometry, &Shape)]) -> (usize, usize) {
    let m = super::mutants::by_name(EXCHANGE_CANARY).expect("the canary is a planted bug");
    let text = match super::mutants::apply(m, engine.source().text()) {
        Ok(t) => t,
        Err(why) => {
            println!(
                "exchange canary {EXCHANGE_CANARY}: cannot be planted in this source ({why}); its sg rows show the subgroup form's outputs, not that its exchange ran"
            );
            return (0, 0);
        }
    };
    let label = engine.form_label(Form::Subgroup);
    let canary = engine
        .source()
        .derived(text, &format!("exchange canary {EXCHANGE_CANARY}"));
    let canary = WgpuEngine::new(canary);
    let mut failures = 0;
    for (geom, sh) in geoms {
        let spec = spec(sh, Dtype::F32, Arm::Exact);
        let what = format!(
            "exchange canary {EXCHANGE_CANARY}: f32 {} {}x{}x{} EXACT {} {label}",
            sh.label,
            sh.m,
            sh.n,
            sh.k,
            report::geometry(geom)
        );
        let data = spec.generate();
        let outputs = canary
            .as_ref()
            .map_err(|e| format!("the canary engine: {e}"))
            .and_then(|c| {
                let run = |e: &WgpuEngine| {
                    run_case_form(e, &data, *geom, Form::Subgroup).map_err(|e| e.to_string())
                };
                Ok((run(engine)?, run(c)?))
            });
        match outputs {
            Ok((source_out, planted)) => {
                let differ = source_out
                    .iter()
                    .zip(&planted)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                if differ > 0 {
                    println!(
                        "{what}: {differ} of {} outputs changed by the planted line: the exchange ran  PASS",
                        source_out.len()
                    );
                } else {
                    failures += 1;
                    println!(
                        "{what}: no output changed by the planted line: the subgroup form fell back to the plain reads at this geometry, so its {label} rows did not test the exchange  FAIL"
                    );
                }
            }
            Err(e) => {
                failures += 1;
                println!("{what}: the canary did not run: {e}  FAIL");
            }
        }
    }
    (geoms.len(), failures)
}

/// The geometries [`run`] runs for every shape: `geoms`, then the shader's
/// declared geometry (the defaults of its `override` declarations) when it
/// is not among them. ([`run`] also runs each shape at its
/// [`WgpuEngine::default_geometry`], the one the bench times, when that is
/// none of these.)
pub fn geometries(engine: &WgpuEngine, geoms: &[Geometry]) -> Vec<Geometry> {
    let mut all = geoms.to_vec();
    let declared = engine.decl().geometry;
    if !all.contains(&declared) {
        all.push(declared);
    }
    all
}

/// The spec of `spec`'s row on the dequantize-then-GEMM path: its seed with
/// bit 63 set ([`super::path_for`]), so a printed reproduction reruns that
/// path.
pub fn dequant_spec(spec: &CaseSpec) -> CaseSpec {
    CaseSpec {
        seed: spec.seed | 1 << 63,
        ..*spec
    }
}

/// Runs every dtype x shape x arm x geometry ([`geometries`]: `geoms` and
/// the shader's declared one; shapes whose k is not whole blocks of a
/// dtype skip that dtype), the quantized dtypes on the fused path; then
/// each shape whose own geometry ([`WgpuEngine::default_geometry`], what
/// the bench times) is none of those at that geometry too; then,
/// when the shader declares a `dequant` entry, every quantized dtype x
/// shape x arm on the dequantize-then-GEMM path ([`dequant_spec`]) at the
/// shader's declared geometry (that path's GEMM is the f32 pipeline, which
/// the f32 rows run at every geometry; what is new is the pre-pass, which
/// no geometry changes). All of it once in each form the engine has
/// ([`WgpuEngine::forms`]: plain, then subgroup); with a subgroup form,
/// then the [`exchange_canary`] rows, one a geometry. Prints the forms
/// ([`form_line`]), the table, each failure's reproduction and the
/// verdict line.
pub fn run(engine: &WgpuEngine, shapes: &[Shape], geoms: &[Geometry]) -> GateResult {
    let mut g = GateResult::default();
    let mut compile_errors: Vec<String> = Vec::new();
    let decl = engine.decl();
    println!("shader: {}", engine.source().describe());
    println!(
        "thread tile: {}x{} outputs per invocation, {} staging buffer(s) (declared by the shader)",
        decl.tile_m, decl.tile_n, decl.stages
    );
    println!("adapter: {} ({})", engine.adapter_name(), engine.backend());
    println!("{}", form_line(engine));
    println!("{}", report::table_header());
    let all = geometries(engine, geoms);
    let mut runs: Vec<(Geometry, bool, Vec<&Shape>)> = all
        .iter()
        .map(|&geom| (geom, false, shapes.iter().collect()))
        .collect();
    for sh in shapes {
        let own = engine.default_geometry(sh.m, sh.n, sh.k);
        if all.contains(&own) {
            continue;
        }
        match runs.iter_mut().find(|(g, d, _)| *g == own && !d) {
            Some((_, _, list)) => list.push(sh),
            None => runs.push((own, false, vec![sh])),
        }
    }
    if decl.dequant {
        runs.push((decl.geometry, true, shapes.iter().collect()));
    }
    for form in engine.forms() {
        for (geom, dequant, list) in &runs {
            for sh in list {
                for dtype in Dtype::ALL {
                    if !sh.k.is_multiple_of(dtype.block_elems())
                        || (*dequant && dtype == Dtype::F32)
                    {
                        continue;
                    }
                    for arm in Arm::ALL {
                        let spec = match dequant {
                            false => spec(sh, dtype, arm),
                            true => dequant_spec(&spec(sh, dtype, arm)),
                        };
                        g.rows += 1;
                        let (pass, lines) =
                            row(engine, sh.label, &spec, geom, form, &mut compile_errors);
                        print!("{lines}");
                        if !pass {
                            g.failures += 1;
                        }
                    }
                }
            }
        }
    }
    if engine.forms().contains(&Form::Subgroup) {
        let mut geoms: Vec<(Geometry, &Shape)> = Vec::new();
        for (geom, _, list) in &runs {
            if let (false, Some(sh)) = (geoms.iter().any(|(g, _)| g == geom), list.first()) {
                geoms.push((*geom, sh));
            }
        }
        let (rows, failures) = exchange_canary(engine, &geoms);
        g.rows += rows;
        g.failures += failures;
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== mul-mat-check ALL GREEN ({} rows: EXACT bit-identical, RANDOM and BAL within 2 gamma_K sum|w x| per output; forms {}) ===",
            g.rows,
            engine.form_labels(&engine.forms())
        );
    } else {
        println!(
            "=== mul-mat-check {} FAILURES of {} rows ===",
            g.failures, g.rows
        );
    }
    g
}
