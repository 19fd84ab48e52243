//! The mul-mat gate on the machine's wgpu adapter: lavapipe (CPU Vulkan)
//! in CI, the H200 on the GPU host. Not ignored: a machine without a
//! Vulkan adapter fails these tests (install mesa-vulkan-drivers and
//! libvulkan1), it does not skip them.

use device::wgpu::Dtype;
use kernel_oracle::mul_mat::gate::{self, CI_SHAPES, GEOMETRIES, LFM_SHAPES};
use kernel_oracle::mul_mat::{engine, Arm, CaseSpec};

fn engine_or_fail() -> &'static device::wgpu::WgpuEngine {
    engine().unwrap_or_else(|e| panic!("no wgpu adapter (CI must provide lavapipe): {e}"))
}

/// Every dtype on the CI shapes, every arm, the gate's geometries and the
/// shader's declared one, the quantized rows on both paths.
#[test]
fn mul_mat_gate_ci_shapes() {
    let g = gate::run(engine_or_fail(), &CI_SHAPES, &GEOMETRIES);
    assert_eq!(
        g.failures, 0,
        "{} of {} gate rows failed",
        g.failures, g.rows
    );
}

/// `path` (a candidate shader in `shaders/candidates/`) passes the CI gate:
/// a candidate that has fallen behind the contract is caught here, not on
/// the day someone swaps it in.
fn candidate_passes_the_ci_gate(path: &str) {
    let path = kernel_oracle::paths::project_file(path, env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    source_passes_the_ci_gate(&path);
}

/// The shader file `path` passes the CI gate (`GEOMETRIES` and the
/// shader's declared geometry).
fn source_passes_the_ci_gate(path: &std::path::Path) {
    let source = device::wgpu::ShaderSource::from_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let engine = device::wgpu::WgpuEngine::new(source)
        .unwrap_or_else(|e| panic!("no wgpu adapter (CI must provide lavapipe): {e}"));
    let g = gate::run(&engine, &CI_SHAPES, &GEOMETRIES);
    assert_eq!(
        g.failures,
        0,
        "{} of {} gate rows failed for {}",
        g.failures,
        g.rows,
        path.display()
    );
}

/// `shaders/candidates/mul_mat_wide.wgsl` with `find` (which must occur
/// once) replaced by `replace`, written to a file of its own.
fn wide_variant(name: &str, find: &str, replace: &str) -> std::path::PathBuf {
    candidate_variant("shaders/candidates/mul_mat_wide.wgsl", name, find, replace)
}

/// The candidate `path` with `find` (which must occur once) replaced by
/// `replace`, written to a file of its own named `name`.
fn candidate_variant(path: &str, name: &str, find: &str, replace: &str) -> std::path::PathBuf {
    let path = kernel_oracle::paths::project_file(path, env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.matches(find).count(),
        1,
        "{find:?} in {}",
        path.display()
    );
    let dir = std::env::temp_dir().join(format!("kernel-oracle-variant-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    std::fs::write(&out, text.replace(find, replace)).unwrap();
    out
}

/// The vec4 candidate (vec4 tiles, double-buffered, one element per loader
/// call) passes the CI gate.
#[test]
fn candidate_vec4_passes_the_ci_gate() {
    candidate_passes_the_ci_gate("shaders/candidates/mul_mat_vec4.wgsl");
}

/// The wide candidate (8 x 8 outputs per invocation, declared to the shim
/// as `const TILE_M`/`TILE_N`, so it is dispatched on its own grid) passes
/// the CI gate, at its declared geometry too.
#[test]
fn candidate_wide_passes_the_ci_gate() {
    candidate_passes_the_ci_gate("shaders/candidates/mul_mat_wide.wgsl");
}

/// The wide candidate's 8 x 4 form (`const TILE_N: u32 = 4u;`, the
/// products of one row group of b) passes the CI gate.
#[test]
fn candidate_wide_8x4_passes_the_ci_gate() {
    source_passes_the_ci_gate(&wide_variant(
        "wide8x4.wgsl",
        "const TILE_N: u32 = 8u;",
        "const TILE_N: u32 = 4u;",
    ));
}

/// The unrolled candidate (products four k per loop iteration, quantized
/// rows decoded four k per call; 8 x 4 outputs per invocation) passes the
/// CI gate, at its declared geometry too.
#[test]
fn candidate_unrolled_passes_the_ci_gate() {
    candidate_passes_the_ci_gate("shaders/candidates/mul_mat_unrolled.wgsl");
}

/// The unrolled candidate's 4 x 8 form (one row group, two column groups)
/// passes the CI gate.
#[test]
fn candidate_unrolled_4x8_passes_the_ci_gate() {
    source_passes_the_ci_gate(&candidate_variant(
        "shaders/candidates/mul_mat_unrolled.wgsl",
        "unrolled4x8.wgsl",
        "const TILE_M: u32 = 8u;\nconst TILE_N: u32 = 4u;",
        "const TILE_M: u32 = 4u;\nconst TILE_N: u32 = 8u;",
    ));
}

/// The unrolled candidate's 8 x 8 form (every accumulator) passes the CI
/// gate.
#[test]
fn candidate_unrolled_8x8_passes_the_ci_gate() {
    source_passes_the_ci_gate(&candidate_variant(
        "shaders/candidates/mul_mat_unrolled.wgsl",
        "unrolled8x8.wgsl",
        "const TILE_N: u32 = 4u;",
        "const TILE_N: u32 = 8u;",
    ));
}

/// The unrolled candidate at a TILE_K that is not a multiple of 4 (its
/// quantized rows staged one element per loader call, its products one
/// k at a time) passes every arm of the ragged CI shapes.
#[test]
fn candidate_unrolled_odd_tile_k() {
    odd_tile_k_passes("shaders/candidates/mul_mat_unrolled.wgsl");
}

/// The candidate `path` passes every arm of `CI_SHAPES[2..]` (the ragged
/// ones) at WG 8x4 with TILE_K 6.
fn odd_tile_k_passes(path: &str) {
    ragged_shapes_pass_at(
        path,
        device::wgpu::Geometry {
            wg_m: 8,
            wg_n: 4,
            tile_k: 6,
        },
    );
}

/// The candidate `path` passes every arm of `CI_SHAPES[2..]` (the ragged
/// ones) at `geom`.
fn ragged_shapes_pass_at(path: &str, geom: device::wgpu::Geometry) {
    let path = kernel_oracle::paths::project_file(path, env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    let source = device::wgpu::ShaderSource::from_file(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let engine = device::wgpu::WgpuEngine::new(source)
        .unwrap_or_else(|e| panic!("no wgpu adapter (CI must provide lavapipe): {e}"));
    let mut failed = Vec::new();
    for sh in &CI_SHAPES[2..] {
        for d in Dtype::ALL {
            if !sh.k.is_multiple_of(d.block_elems()) {
                continue;
            }
            for arm in Arm::ALL {
                let v = gate::run_one(&engine, &gate::spec(sh, d, arm), &geom)
                    .unwrap_or_else(|e| panic!("{} {} {}: {e}", sh.label, d.name(), arm.name()));
                if !v.pass() {
                    failed.push(format!("{} {} {}", sh.label, d.name(), arm.name()));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed at {geom:?}: {failed:?}",
        path.display()
    );
}

/// The 4 x 4 candidate (the seed's design, production until 2026-12-02,
/// whose loaders the production decoders transcribe) passes the CI gate.
#[test]
fn candidate_4x4_passes_the_ci_gate() {
    candidate_passes_the_ci_gate("shaders/candidates/mul_mat_4x4.wgsl");
}

/// The production shader's 4 x 8 form (one row group, two column groups)
/// passes the CI gate.
#[test]
fn builtin_4x8_passes_the_ci_gate() {
    source_passes_the_ci_gate(&candidate_variant(
        "shaders/mul_mat_reg_tile.wgsl",
        "prod4x8.wgsl",
        "const TILE_M: u32 = 4u;\nconst TILE_N: u32 = 4u;",
        "const TILE_M: u32 = 4u;\nconst TILE_N: u32 = 8u;",
    ));
}

/// The production shader's 8 x 4 form (two row groups, one column group:
/// production's thread tile until 2026-12-03) passes the CI gate.
#[test]
fn builtin_8x4_passes_the_ci_gate() {
    source_passes_the_ci_gate(&candidate_variant(
        "shaders/mul_mat_reg_tile.wgsl",
        "prod8x4.wgsl",
        "const TILE_M: u32 = 4u;\nconst TILE_N: u32 = 4u;",
        "const TILE_M: u32 = 8u;\nconst TILE_N: u32 = 4u;",
    ));
}

/// The production shader with three scales per row and tile (TILE_K 48:
/// the last tile of a q4_0 row partly past K) and a row-group count that
/// is not a multiple of 4 (WG_M 3: the code units' plain order) passes
/// every arm of the ragged CI shapes, and so does it at TILE_K 6 (products
/// one k at a time, quantized rows one loader call per element) and at
/// TILE_K 32 (two staged scale groups a step: the step
/// `WgpuEngine::default_geometry` takes on few workgroups, here at 8 x 8
/// threads, which lavapipe's 32 KiB of workgroup memory holds). The gate
/// itself runs TILE_K 16 (the declared geometry: the staged scales) and
/// 40 (the four-k fallback); TILE_K 64 and 72 at 4 x 4 threads take the
/// longest tile whose products are written out and the loop past it.
#[test]
fn builtin_odd_geometries() {
    ragged_shapes_pass_at(
        "shaders/mul_mat_reg_tile.wgsl",
        device::wgpu::Geometry {
            wg_m: 3,
            wg_n: 4,
            tile_k: 48,
        },
    );
    odd_tile_k_passes("shaders/mul_mat_reg_tile.wgsl");
    ragged_shapes_pass_at(
        "shaders/mul_mat_reg_tile.wgsl",
        device::wgpu::Geometry {
            wg_m: 8,
            wg_n: 8,
            tile_k: 32,
        },
    );
    // The longest tile whose products are written out (eight steps of
    // eight k), and one past it (the loop over whole tiles).
    for tile_k in [64, 72] {
        ragged_shapes_pass_at(
            "shaders/mul_mat_reg_tile.wgsl",
            device::wgpu::Geometry {
                wg_m: 4,
                wg_n: 4,
                tile_k,
            },
        );
    }
}

/// The seed's full LFM2.5 shapes (minutes on lavapipe; seconds on a GPU).
#[test]
#[ignore = "full LFM2.5 prefill shapes: run on a GPU host (minutes on lavapipe)"]
fn mul_mat_gate_lfm_shapes() {
    let g = gate::run(engine_or_fail(), &LFM_SHAPES, &GEOMETRIES[..1]);
    assert_eq!(
        g.failures, 0,
        "{} of {} gate rows failed",
        g.failures, g.rows
    );
}

/// The EXACT plan holds at the longest K of the seed's shapes for every
/// dtype, so the full battery has an EXACT arm everywhere.
#[test]
fn exact_plan_covers_every_seed_shape() {
    for s in LFM_SHAPES {
        for d in Dtype::ALL {
            let spec = CaseSpec {
                dtype: d,
                m: 1,
                n: 1,
                k: s.k,
                arm: Arm::Exact,
                seed: 0,
            };
            spec.valid()
                .unwrap_or_else(|e| panic!("{} {}: {e}", d.name(), s.label));
        }
    }
}
