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
//! - [`mutants`]: planted bugs in the shader.

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
use device::wgpu::Geometry;
use std::sync::atomic::AtomicU64;

/// Counters of one process's checks.
#[derive(Debug, Default)]
pub struct Stats {
    /// Cases generated.
    pub cases: AtomicU64,
    /// Cases the spec refused (`CaseSpec::valid`), never run.
    pub invalid: AtomicU64,
    /// EXACT cases compared.
    pub exact: AtomicU64,
    /// RANDOM cases compared.
    pub random: AtomicU64,
}

/// This process's counters.
pub static STATS: Stats = Stats {
    cases: AtomicU64::new(0),
    invalid: AtomicU64::new(0),
    exact: AtomicU64::new(0),
    random: AtomicU64::new(0),
};

/// How often [`check`] prints [`STATS`] (cases).
pub const STATS_EVERY: u64 = 10_000;

/// The geometry a fuzz case runs with, picked by its seed among
/// [`gate::GEOMETRIES`] and one with a TILE_K of 8 (more k tiles).
pub fn geometry_for(spec: &CaseSpec) -> Geometry {
    const EXTRA: Geometry = Geometry {
        wg_m: 4,
        wg_n: 8,
        tile_k: 8,
    };
    match (spec.seed >> 61) % 3 {
        0 => gate::GEOMETRIES[0],
        1 => gate::GEOMETRIES[1],
        _ => EXTRA,
    }
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
    check_inner(spec, geom, None)
}

/// [`check`], naming the fuzz artifact in the reproduction.
pub fn check_with_artifact(spec: &CaseSpec, artifact: Option<&str>) {
    check_inner(spec, &geometry_for(spec), artifact)
}

fn check_inner(spec: &CaseSpec, geom: &Geometry, artifact: Option<&str>) {
    let n = count(&STATS.cases);
    if n.is_multiple_of(STATS_EVERY) {
        eprintln!(
            "mul_mat stats: {n} cases, {} EXACT, {} RANDOM, {} refused by the spec",
            pct(&STATS.exact, n),
            pct(&STATS.random, n),
            pct(&STATS.invalid, n)
        );
    }
    if spec.valid().is_err() {
        count(&STATS.invalid);
        return;
    }
    let engine = match engine() {
        Ok(e) => e,
        Err(msg) => panic!("mul_mat: no wgpu adapter to check against: {msg}"),
    };
    let desc = engine.source().describe();
    let v = match gate::run_one(engine, spec, geom) {
        Ok(v) => v,
        Err(e) => panic!(
            "mul_mat: the shim failed on a valid case ({desc}): {e}\n  {}",
            report::spec_literal(spec)
        ),
    };
    if !v.pass() {
        panic!("{}", report::divergence(spec, geom, &v, &desc, artifact));
    }
    match spec.arm {
        Arm::Exact => count(&STATS.exact),
        Arm::Random => count(&STATS.random),
    };
}
