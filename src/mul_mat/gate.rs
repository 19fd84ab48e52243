//! The mul-mat gate: every dtype on every shape, EXACT, RANDOM, BAL and
//! ORDER arms, against the core oracle.
//!
//! Two batteries:
//! - [`LFM_SHAPES`]: seed 004's LFM2.5-350M 512-token prefill projections,
//!   at full size. `kernel-oracle check mul-mat --full` and the GPU host
//!   run them (on lavapipe they take minutes).
//! - [`CI_SHAPES`]: what `cargo test` runs on lavapipe: the seed's real K
//!   and M of `ffn_down` and `attn_out` with N cut from 512 to 64 (the
//!   longest K, 4608, is where the EXACT bound is tightest), and ragged
//!   shapes (m and n off the 64-wide workgroup block, m = n = 1, f32 k
//!   not a multiple of TILE_K, whose last partial tile is not a multiple of
//!   4 k either at any gate geometry: K = 101, so the products' one-k-at-a-
//!   time tail runs), and two with n > m (few columns, many
//!   rows: a store that skips the column check writes from the last row's
//!   partial workgroup block into the guard band after `dst`).
//!
//! Every shape runs four arms: EXACT, RANDOM, BAL (RANDOM data with
//! balanced products, so the one-output row fails a kernel that drops any
//! product) and ORDER (exact products whose partial sums round, bit for
//! bit, so a kernel that adds in another k order fails; see
//! `super::judge`).
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
    shape("k-tail", 70, 101, 9),
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

/// The geometry whose TILE_K is not a multiple of 4: quantized src0 is
/// then staged one element per call of the one-element loaders
/// (`load_q4_0` .. `load_q6_k`, which no other geometry runs) and the
/// products go one k at a time.
pub const ELEMENT_GEOMETRY: Geometry = Geometry {
    wg_m: 4,
    wg_n: 4,
    tile_k: 6,
};

/// Two staged scale groups a step (TILE_K 32, what
/// `WgpuEngine::default_geometry` takes on grids of few workgroups on a
/// GPU, but which the gate's 16 x 16 threads do not fit in lavapipe's
/// 32 KiB of workgroup memory): at 8 x 8 threads, so that the gate meets a
/// kernel that indexes its staged scales by row as if each row had one
/// group on every adapter.
pub const GROUPS2_GEOMETRY: Geometry = Geometry {
    wg_m: 8,
    wg_n: 8,
    tile_k: 32,
};

/// The geometries [`run`] also runs on every shape of at most
/// [`SMALL_MAX_MACS`] multiply-adds (on the CI shapes, all but the two
/// long ones), each a code path none of [`GEOMETRIES`] runs, so that a bug
/// there fails the gate, not only the fuzzer.
pub const SMALL_GEOMETRIES: [Geometry; 2] = [ELEMENT_GEOMETRY, GROUPS2_GEOMETRY];

/// The largest shape (`m n k`) [`run`] also runs at [`SMALL_GEOMETRIES`].
pub const SMALL_MAX_MACS: usize = 8 << 20;

/// The gate's result.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GateResult {
    /// Failed rows.
    pub failures: usize,
    /// Rows run.
    pub rows: usize,
}

/// The spec the gate runs for `shape`, `dtype`, `arm`: a fixed seed per
/// (shape, dtype, arm) (EXACT sets seed bit 59, BAL bit 58, ORDER bit 57;
/// the seeds of the first three arms are as before ORDER came).
pub fn spec(shape: &Shape, dtype: Dtype, arm: Arm) -> CaseSpec {
    let seed = 0x5EED_0004_0000_0000
        ^ ((shape.m as u64) << 32)
        ^ ((shape.k as u64) << 16)
        ^ (shape.n as u64)
        ^ ((device::wgpu::dtype_code(dtype) as u64) << 60)
        ^ ((arm == Arm::Exact) as u64) << 59
        ^ ((arm == Arm::Balanced) as u64) << 58
        ^ ((arm == Arm::Order) as u64) << 57;
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

/// The share of the canary case's outputs the planted line must change
/// (in percent): a subgroup that falls back leaves its own outputs as they
/// were, and one subgroup of a workgroup holds more than 1% of a gate
/// shape's outputs; on correct sources the unchanged outputs were 0-3 of
/// 3,395 and 65,536 (equal sums by coincidence).
pub const CANARY_MIN_CHANGED_PCT: usize = 99;

/// Why the subgroup form's exchange cannot run at `geom` with `lanes`
/// lanes a subgroup, by the builtin shader's own rules (its overrides
/// `SG_SPAN`, `SG_G`, `SG_C` and `sg_plan`'s `whole`), or `None` where it
/// is designed to: the lanes that share a column group must be an aligned
/// power-of-two block (`SG_G != 0`) of at least two (`SG_C >= 2`, else no
/// lane reads another's row), the workgroup whole subgroups, and a tile
/// at least one step of eight k.
pub fn exchange_blocked(geom: &Geometry, lanes: u32) -> Option<String> {
    let span = lanes.min(geom.wg_m);
    let g = if span > 0 && lanes.max(geom.wg_m).is_multiple_of(span) && span.is_power_of_two() {
        span
    } else {
        0
    };
    if g.min(8) < 2 {
        return Some(format!(
            "{lanes} lanes a subgroup and WG_M = {} share no column group of two or more lanes (SG_G = {g})",
            geom.wg_m
        ));
    }
    if !(geom.wg_m * geom.wg_n).is_multiple_of(lanes) {
        return Some(format!(
            "a workgroup of {} x {} invocations is not whole subgroups of {lanes}",
            geom.wg_m, geom.wg_n
        ));
    }
    if geom.tile_k < 8 {
        return Some(format!("TILE_K = {} holds no step of eight k", geom.tile_k));
    }
    None
}

/// The exchange canary's rows, one for each geometry the gate runs in the
/// subgroup form (`geoms`, each with the shape of the longest k it runs
/// there): the f32 EXACT case of that shape in the subgroup form through
/// the engine's source and through that source with [`EXCHANGE_CANARY`]
/// planted. A row passes when the planted line changes at least
/// [`CANARY_MIN_CHANGED_PCT`]% of the outputs (the exchange ran in every
/// subgroup that holds more than the rest), and fails when it changes
/// fewer (subgroups fell back to the plain reads, so the `sgN` rows of
/// that geometry tested the plain form there), or either run fails. Where
/// [`exchange_blocked`] says the exchange cannot run by design and nothing
/// changed, a note says that the `sgN` rows there run the plain reads.
/// A source with a subgroup form but without the canary's anchor fails
/// one row: its exchange cannot be shown to run. It checks the f32
/// pipeline (the quantized ones share its subgroup size and geometry).
/// Prints the rows; returns their count and failures.
pub fn exchange_canary(engine: &WgpuEngine, geoms: &[(Geometry, &Shape)]) -> GateResult {
    let m = super::mutants::by_name(EXCHANGE_CANARY).expect("the canary is a planted bug");
    let text = match super::mutants::apply(m, engine.source().text()) {
        Ok(t) => t,
        Err(why) => {
            println!(
                "exchange canary {EXCHANGE_CANARY}: cannot be planted in this source ({why}), so nothing shows that its subgroup form's exchange runs rather than a fallback  FAIL"
            );
            return GateResult {
                failures: 1,
                rows: 1,
            };
        }
    };
    let label = engine.form_label(Form::Subgroup);
    let lanes = engine.subgroup_form().unwrap_or(0);
    let canary = engine
        .source()
        .derived(text, &format!("exchange canary {EXCHANGE_CANARY}"));
    let canary = WgpuEngine::new(canary);
    let mut g = GateResult::default();
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
                let n = source_out.len();
                let changed = source_out
                    .iter()
                    .zip(&planted)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                match exchange_blocked(geom, lanes) {
                    Some(why) if changed == 0 => {
                        println!(
                            "{what}: no output changed, as designed: {why}; the {label} rows at this geometry run the plain reads"
                        );
                        continue;
                    }
                    _ => {}
                }
                g.rows += 1;
                if changed * 100 >= n * CANARY_MIN_CHANGED_PCT {
                    println!(
                        "{what}: {changed} of {n} outputs changed by the planted line: the exchange ran  PASS"
                    );
                } else {
                    g.failures += 1;
                    println!(
                        "{what}: {changed} of {n} outputs changed by the planted line (fewer than {CANARY_MIN_CHANGED_PCT}%): subgroups fell back to the plain reads at this geometry, so its {label} rows did not test the exchange there  FAIL"
                    );
                }
            }
            Err(e) => {
                g.rows += 1;
                g.failures += 1;
                println!("{what}: the canary did not run: {e}  FAIL");
            }
        }
    }
    g
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
/// the bench times) is none of those at that geometry too; then the
/// shapes of at most [`SMALL_MAX_MACS`] at each of [`SMALL_GEOMETRIES`]
/// where they have not run at it; then,
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
    for geom in SMALL_GEOMETRIES {
        // A geometry the adapter cannot hold for this shader's thread tile
        // (a candidate whose tile makes TILE_K 32 at 8 x 8 threads pass
        // lavapipe's 32 KiB) is one the shim refuses everywhere on that
        // adapter: said, not run.
        if let Err(e) = geom.validate(decl, engine.limits()) {
            println!("not run at {}: {e}", report::geometry(&geom));
            continue;
        }
        let small: Vec<&Shape> = shapes
            .iter()
            .filter(|sh| sh.m * sh.n * sh.k <= SMALL_MAX_MACS)
            .filter(|sh| {
                !runs
                    .iter()
                    .any(|(g, d, l)| *g == geom && !d && l.contains(sh))
            })
            .collect();
        if !small.is_empty() {
            runs.push((geom, false, small));
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
    let subgroup = engine.forms().contains(&Form::Subgroup);
    if subgroup {
        // Each geometry once, with the shape of the longest k it runs
        // (the most steps of eight k through the exchange).
        let mut geoms: Vec<(Geometry, &Shape)> = Vec::new();
        for (geom, _, list) in &runs {
            for sh in list {
                match geoms.iter_mut().find(|(g, _)| g == geom) {
                    Some((_, best)) if sh.k > best.k => *best = sh,
                    Some(_) => {}
                    None => geoms.push((*geom, sh)),
                }
            }
        }
        let c = exchange_canary(engine, &geoms);
        g.rows += c.rows;
        g.failures += c.failures;
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== mul-mat-check ALL GREEN ({} rows: EXACT and ORDER bit-identical, RANDOM and BAL within 2 gamma_K sum|w x| per output{}; forms {}) ===",
            g.rows,
            if subgroup {
                ", the subgroup exchange shown to run by its canary"
            } else {
                ""
            },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(wg_m: u32, wg_n: u32, tile_k: u32) -> Geometry {
        Geometry { wg_m, wg_n, tile_k }
    }

    /// The gate's geometries let the exchange run at 8 and 32 lanes; 64
    /// lanes fill no workgroup of 8 x 4; a row of one invocation, a span
    /// that is not a power of two and a tile under eight k block it.
    #[test]
    fn exchange_blocked_follows_the_shaders_rules() {
        for lanes in [8, 32] {
            for g in [geom(16, 16, 16), geom(8, 4, 40), geom(16, 16, 32)] {
                assert_eq!(exchange_blocked(&g, lanes), None, "{g:?} {lanes}");
            }
        }
        assert!(exchange_blocked(&geom(16, 16, 16), 64).is_none());
        let blocked = [
            (geom(8, 4, 40), 64, "not whole subgroups"),
            (geom(1, 64, 16), 32, "SG_G = 1"),
            (geom(12, 8, 16), 32, "SG_G = 0"),
            (geom(16, 16, 4), 32, "no step of eight"),
        ];
        for (g, lanes, why) in blocked {
            let r = exchange_blocked(&g, lanes).unwrap_or_default();
            assert!(r.contains(why), "{g:?} {lanes}: {r}");
        }
    }
}
