//! The WGSL register-tiled GEMM over ggml blocks (issue 5, seed 004):
//! cases, the wgpu runner, the judge, the report, the gate and planted
//! bugs.
//!
//! - [`generate`]: [`CaseSpec`] (`Arbitrary`, biased to the tile edges),
//!   the EXACT plan and the RANDOM data (rule `GEN-FINITE`);
//! - [`run`]: `shaders/mul_mat_reg_tile.wgsl` through `device::wgpu`;
//! - [`judge`]: the oracle (`oracle::ggml::mul_mat`) and the verdict, with
//!   the RANDOM arm's bound and its rationale;
//! - [`report`]: table rows and reproductions;
//! - [`gate`]: `kernel-oracle check mul-mat`;
//! - [`mutants`]: planted bugs in the shader;
//! - [`cli`]: the kind's registry entry (`kernel_oracle::kind`).

pub mod cli;
pub mod gate;
pub mod generate;
pub mod judge;
pub mod mutants;
pub mod report;
pub mod run;

pub use generate::{Arm, CaseData, CaseSpec};
pub use judge::{reference, Verdict};
pub use run::engine;

use crate::stats::{count, pct};
use device::wgpu::{Form, Geometry, QuantPath};
use oracle::ggml::Dtype;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one process's checks: what the generator drew (arms,
/// dtypes, geometries, the m = 1 and n = 1 edges, each printed with its
/// share so a starved path shows) and what was compared.
#[derive(Debug)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases the spec refused (`CaseSpec::valid`), never run.
    pub invalid: AtomicU64,
    /// Cases drawn per arm, in [`Arm::ALL`] order (designed: 1/4 each).
    pub arm: [AtomicU64; 4],
    /// Cases drawn per dtype, in `Dtype::ALL` order (designed: 1/5 each).
    pub dtype: [AtomicU64; 5],
    /// Cases drawn per geometry, in [`FUZZ_GEOMETRIES`] order (designed:
    /// 1/8 each).
    pub geometry: [AtomicU64; 8],
    /// Cases with m = 1 (designed: at least 1/4).
    pub m1: AtomicU64,
    /// Cases with n = 1 (designed: at least 1/4).
    pub n1: AtomicU64,
    /// Quantized cases on [`QuantPath::Dequant`] (designed: 1/2 of the
    /// quantized, 2/5 of all cases).
    pub dequant: AtomicU64,
    /// Cases run and judged.
    pub compared: AtomicU64,
    /// Of those, cases whose bound decided no output
    /// (`judge::Verdict::vacuous`: within it, but not a pass).
    pub vacuous: AtomicU64,
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    invalid: AtomicU64::new(0),
    arm: [const { AtomicU64::new(0) }; 4],
    dtype: [const { AtomicU64::new(0) }; 5],
    geometry: [const { AtomicU64::new(0) }; 8],
    m1: AtomicU64::new(0),
    n1: AtomicU64::new(0),
    dequant: AtomicU64::new(0),
    compared: AtomicU64::new(0),
    vacuous: AtomicU64::new(0),
};

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 10_000;

/// The stats line [`check`] prints every [`STATS_EVERY`] cases: every
/// counter of [`STATS`] with its share of the cases.
pub fn stats_line() -> String {
    let n = STATS.cases.load(Ordering::Relaxed);
    let list = |names: &[String], c: &[AtomicU64]| {
        names
            .iter()
            .zip(c)
            .map(|(name, c)| format!("{name} {}", pct(c, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "mul_mat stats: {n} cases, {} compared ({} vacuous), {} refused by the spec; arms: {}; dtypes: {}; geometries: {}; m = 1 {}, n = 1 {}, dequant path {}",
        pct(&STATS.compared, n),
        pct(&STATS.vacuous, n),
        pct(&STATS.invalid, n),
        list(&Arm::ALL.map(|a| a.name().to_string()), &STATS.arm),
        list(&Dtype::ALL.map(|d| d.name().to_string()), &STATS.dtype),
        list(&FUZZ_GEOMETRIES.map(|g| report::geometry(&g)), &STATS.geometry),
        pct(&STATS.m1, n),
        pct(&STATS.n1, n),
        pct(&STATS.dequant, n)
    )
}

/// The geometries of fuzz cases: [`gate::GEOMETRIES`], one with a TILE_K
/// of 8 (more k tiles), and one with the TILE_K of 32 that
/// `WgpuEngine::default_geometry` takes on grids of few workgroups (two
/// staged scale groups a step), at 8 x 8 threads so that every thread
/// tile's workgroup fits every adapter (lavapipe's 32 KiB); then the odd
/// geometries `tests/mul_mat_gate.rs`'s `builtin_odd_geometries` pins for
/// the production shader, so that a candidate meets them too: TILE_K 6
/// ([`gate::ELEMENT_GEOMETRY`]: not a multiple of 4, so quantized rows go
/// through the one-element loaders, which no other geometry runs, and
/// the products one k at a time), TILE_K 48 at 3 x 4 threads (three staged
/// scale groups a step, a row-group count that is not a multiple of 4),
/// and TILE_K 64 and 72 at 4 x 4 (the longest tile whose products are
/// written out, and the loop over whole tiles past it).
pub const FUZZ_GEOMETRIES: [Geometry; 8] = [
    gate::GEOMETRIES[0],
    gate::GEOMETRIES[1],
    Geometry {
        wg_m: 4,
        wg_n: 8,
        tile_k: 8,
    },
    gate::GROUPS2_GEOMETRY,
    gate::ELEMENT_GEOMETRY,
    Geometry {
        wg_m: 3,
        wg_n: 4,
        tile_k: 48,
    },
    Geometry {
        wg_m: 4,
        wg_n: 4,
        tile_k: 64,
    },
    Geometry {
        wg_m: 4,
        wg_n: 4,
        tile_k: 72,
    },
];

/// The index in [`FUZZ_GEOMETRIES`] a fuzz case runs with: bits 61-62 of
/// its seed, and bit 59 as the index's bit 2 (which `CaseSpec`'s
/// `Arbitrary` sets from a leading byte: 1/8 each).
pub fn geometry_index(spec: &CaseSpec) -> usize {
    (((spec.seed >> 61) & 3) | (((spec.seed >> 59) & 1) << 2)) as usize
}

/// Whether a fuzz case asks for the subgroup form ([`form_for`]): bit 60
/// of its seed.
pub fn asks_subgroup_form(spec: &CaseSpec) -> bool {
    (spec.seed >> 60) & 1 == 1
}

/// The shader form a fuzz case runs on `engine` ([`Form`]): with
/// `KERNEL_ORACLE_MUL_MAT_SUBGROUPS` unset or `auto`, bit 60 of its seed
/// set gives [`Form::Subgroup`] where the engine has one (which
/// `CaseSpec`'s `Arbitrary` sets from a leading byte: 1/2), else
/// [`Form::Plain`]; `=on` or `=off` (a rerun line's) gives the engine's
/// default form, which that setting fixes.
pub fn form_for(engine: &device::wgpu::WgpuEngine, spec: &CaseSpec) -> Form {
    match device::wgpu::SubgroupPolicy::from_env() {
        Ok(device::wgpu::SubgroupPolicy::Auto) => {
            if asks_subgroup_form(spec) && engine.forms().contains(&Form::Subgroup) {
                Form::Subgroup
            } else {
                Form::Plain
            }
        }
        _ => engine.default_form(),
    }
}

/// The path a case's quantized src0 takes ([`QuantPath`]): bit 63 of its
/// seed set gives [`QuantPath::Dequant`] (which `CaseSpec`'s `Arbitrary`
/// sets from a leading byte, and the gate sets for its dequant rows), else
/// [`QuantPath::Fused`]; an f32 src0 is always fused. A shader without a
/// `dequant` entry runs every case fused ([`run::run_case`]).
pub fn path_for(spec: &CaseSpec) -> QuantPath {
    if spec.dtype != Dtype::F32 && spec.seed >> 63 == 1 {
        QuantPath::Dequant
    } else {
        QuantPath::Fused
    }
}

/// The geometry a fuzz case runs with: [`FUZZ_GEOMETRIES`] at
/// [`geometry_index`].
pub fn geometry_for(spec: &CaseSpec) -> Geometry {
    FUZZ_GEOMETRIES[geometry_index(spec)]
}

/// Runs one case on the adapter and judges it against the oracle, with
/// [`geometry_for`] the case.
///
/// # Panics
/// A bug is a panic: when the kernel's output fails the arm's verdict,
/// when the shim fails on a valid case (a clobbered guard band, a compile
/// error of a candidate), and when there is no adapter. The message is a
/// reproduction ([`report::divergence`]).
pub fn check(spec: &CaseSpec) {
    check_with_artifact(spec, None)
}

/// [`check`] with an explicit geometry.
pub fn check_geometry(spec: &CaseSpec, geom: &Geometry) {
    check_inner(spec, geom, None, None)
}

/// [`check_geometry`] in the shader form `form` (a divergence's pasted
/// regression test names the form it failed in).
///
/// # Panics
/// As [`check`]; a shim failure (`NoSubgroupForm`) for the subgroup form
/// on an adapter without one.
pub fn check_geometry_form(spec: &CaseSpec, geom: &Geometry, form: Form) {
    check_inner(spec, geom, None, Some(form))
}

/// [`check`], with a line that reruns the fuzz input `artifact` (its path,
/// or [`crate::libfuzzer_crash_artifact`] from a fuzz target) in the
/// reproduction ([`crate::fuzz_rerun_lines`]).
pub fn check_with_artifact(spec: &CaseSpec, artifact: Option<&str>) {
    check_inner(spec, &geometry_for(spec), artifact, None)
}

fn check_inner(spec: &CaseSpec, geom: &Geometry, artifact: Option<&str>, form: Option<Form>) {
    let n = count(&STATS.cases);
    count_drawn(spec);
    if n.is_multiple_of(STATS_EVERY) {
        eprintln!("{}", stats_line());
    }
    if spec.valid().is_err() {
        count(&STATS.invalid);
        return;
    }
    let engine = match engine() {
        Ok(e) => e,
        Err(msg) => panic!("mul_mat: no wgpu adapter to check against: {msg}"),
    };
    check_form_on(
        engine,
        spec,
        geom,
        artifact,
        form.unwrap_or_else(|| form_for(engine, spec)),
    );
}

/// [`check`] on `engine` with `geom`, naming the fuzz artifact (if any) in
/// the reproduction; counts the case compared when it passes.
///
/// # Panics
/// As [`check`]: a divergence ([`report::divergence`]) or a shim failure
/// on a valid case ([`report::shim_failure`]), each with its rerun lines.
pub fn check_on(
    engine: &device::wgpu::WgpuEngine,
    spec: &CaseSpec,
    geom: &Geometry,
    artifact: Option<&str>,
) {
    check_form_on(engine, spec, geom, artifact, form_for(engine, spec))
}

/// [`check_on`] in the shader form `form`.
///
/// # Panics
/// As [`check_on`].
pub fn check_form_on(
    engine: &device::wgpu::WgpuEngine,
    spec: &CaseSpec,
    geom: &Geometry,
    artifact: Option<&str>,
    form: Form,
) {
    let desc = engine.source().describe();
    let v = match gate::run_one_form(engine, spec, geom, form) {
        Ok(v) => v,
        Err(e) => panic!(
            "{}",
            report::shim_failure(spec, geom, form, &desc, &e.to_string(), artifact)
        ),
    };
    if !v.within_bound() {
        panic!(
            "{}",
            report::divergence(spec, geom, form, &v, &desc, artifact)
        );
    }
    count(&STATS.compared);
    if v.vacuous() {
        count(&STATS.vacuous);
    }
}

/// Counts what the generator drew for `spec` in [`STATS`].
pub fn count_drawn(spec: &CaseSpec) {
    let arm = Arm::ALL.iter().position(|&a| a == spec.arm);
    let dtype = Dtype::ALL.iter().position(|&d| d == spec.dtype);
    count(&STATS.arm[arm.expect("every arm is listed")]);
    count(&STATS.dtype[dtype.expect("every dtype is listed")]);
    count(&STATS.geometry[geometry_index(spec)]);
    if spec.m == 1 {
        count(&STATS.m1);
    }
    if spec.n == 1 {
        count(&STATS.n1);
    }
    if path_for(spec) == QuantPath::Dequant {
        count(&STATS.dequant);
    }
}
