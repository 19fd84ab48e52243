//! The wgpu shim's typed errors, on the machine's adapter (lavapipe in CI):
//! every bad argument is refused before it reaches the GPU, and an
//! out-of-bounds write lands in the guard band and is reported.

use device::wgpu::{
    Dtype, Geometry, QuantPath, ShaderSource, WgpuEngine, WgpuError, BUILTIN_MUL_MAT_WGSL,
};
use oracle::ggml::GgmlError;
use std::sync::Mutex;

/// Held while an engine is opened: `backend_env_is_honoured` changes
/// WGPU_BACKEND, which every `WgpuEngine::new` reads.
static ENV: Mutex<()> = Mutex::new(());

fn open(src: ShaderSource) -> Result<WgpuEngine, WgpuError> {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    WgpuEngine::new(src)
}

fn builtin() -> WgpuEngine {
    open(ShaderSource::builtin())
        .unwrap_or_else(|e| panic!("no wgpu adapter (CI must provide lavapipe): {e}"))
}

fn candidate(name: &str, text: &str) -> WgpuEngine {
    let dir = std::env::temp_dir().join(format!("kernel-oracle-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    open(ShaderSource::from_file(&path).unwrap()).unwrap()
}

/// WGPU_BACKEND is honoured: a name wgpu does not know and a backend this
/// build lacks are typed errors, not a silent fallback. (One test, so no
/// other test of this binary reads the variable meanwhile.)
#[test]
fn backend_env_is_honoured() {
    let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("WGPU_BACKEND", "bogus");
    let bad = WgpuEngine::new(ShaderSource::builtin());
    std::env::set_var("WGPU_BACKEND", "metal");
    let none = WgpuEngine::new(ShaderSource::builtin());
    std::env::remove_var("WGPU_BACKEND");
    assert!(
        matches!(bad, Err(WgpuError::BadBackendEnv { .. })),
        "{bad:?}"
    );
    assert!(matches!(none, Err(WgpuError::NoAdapter { .. })), "{none:?}");
}

#[test]
fn shapes_and_geometry_are_refused_before_upload() {
    let e = builtin();
    let g = Geometry::default();
    let r = e.mul_mat(Dtype::Q4_0, g, 1, 1, 48, &[0; 18], &[0.0; 48]);
    assert!(
        matches!(r, Err(WgpuError::Shape(GgmlError::RowNotBlocks { .. }))),
        "{r:?}"
    );
    let r = e.mul_mat(Dtype::Q8_0, g, 2, 1, 32, &[0; 68], &[0.0; 31]);
    assert!(
        matches!(
            r,
            Err(WgpuError::Shape(GgmlError::Len {
                arg: "src1",
                want: 32,
                got: 31
            }))
        ),
        "{r:?}"
    );
    let zero = Geometry { wg_m: 0, ..g };
    let r = e.mul_mat(Dtype::F32, zero, 1, 1, 1, &[0; 4], &[0.0]);
    assert!(matches!(r, Err(WgpuError::Geometry { .. })), "{r:?}");
    let big = Geometry {
        tile_k: 1 << 20,
        ..g
    };
    let r = e.mul_mat(Dtype::F32, big, 1, 1, 1, &[0; 4], &[0.0]);
    assert!(matches!(r, Err(WgpuError::Geometry { .. })), "{r:?}");
}

/// A src0 one row beyond max_storage_buffer_binding_size (lavapipe:
/// 128 MiB) is refused with the limit's name.
#[test]
fn buffer_beyond_binding_limit_is_refused() {
    let e = builtin();
    let limit = e.limits().max_storage_buffer_binding_size;
    let k = 1024usize;
    let m = (limit / (4 * k as u64)) as usize + 1;
    if m * k * 4 > 1 << 30 {
        // A GPU's limit (GiBs) is not worth allocating for; lavapipe's
        // 128 MiB is what CI checks.
        println!("not run: the adapter's binding limit is {limit} bytes, above 1 GiB");
        return;
    }
    let src0 = vec![0u8; m * k * 4];
    let r = e.prepare(
        Dtype::F32,
        Geometry::default(),
        m,
        1,
        k,
        &src0,
        &vec![0.0; k],
    );
    match r {
        Err(WgpuError::BufferTooLarge {
            arg: "src0",
            limit_name,
            ..
        }) => {
            assert_eq!(limit_name, "max_storage_buffer_binding_size")
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a {} byte binding was accepted", m * k * 4),
    }
}

#[test]
fn invalid_shader_is_a_compile_error() {
    let e = candidate(
        "broken.wgsl",
        &BUILTIN_MUL_MAT_WGSL.replace("fn main(", "fn main_("),
    );
    let r = e.pipeline(Dtype::F32, Geometry::default());
    assert!(matches!(r, Err(WgpuError::Compile { .. })), "{r:?}");
}

/// A kernel that writes one element past the last column hits the guard
/// band.
#[test]
fn write_past_dst_hits_the_guard_band() {
    let text = BUILTIN_MUL_MAT_WGSL.replace("if (gm < m && gn < n) {", "if (gm <= m && gn < n) {");
    assert_ne!(text, BUILTIN_MUL_MAT_WGSL);
    let e = candidate("oob.wgsl", &text);
    let (m, n, k) = (5, 3, 4);
    let r = e.mul_mat(
        Dtype::F32,
        Geometry::default(),
        m,
        n,
        k,
        &vec![0; m * k * 4],
        &vec![0.0; n * k],
    );
    assert!(
        matches!(r, Err(WgpuError::Guard { len: 15, first: 0 })),
        "{r:?}"
    );
}

/// A `dequant` entry that writes one vector past the dequant path's
/// scratch (its bound `<` turned `<=`) hits the band after the scratch
/// (`device::wgpu::INTERMEDIATE_BAND_BITS`); the builtin's does not. The
/// stray vector decodes row M, past src0's end, from src0's NaN band.
#[test]
fn write_past_the_dequant_scratch_hits_its_band() {
    let bound = "if (i >= params.m * kq) {";
    assert_eq!(
        BUILTIN_MUL_MAT_WGSL.matches(bound).count(),
        1,
        "update this test's marker"
    );
    let text = BUILTIN_MUL_MAT_WGSL.replace(bound, "if (i > params.m * kq) {");
    let (m, n, k) = (2, 1, 32);
    let src0 = vec![0u8; m * Dtype::Q8_0.row_bytes(k).unwrap()];
    let src1 = vec![1.0f32; n * k];
    let run = |e: &WgpuEngine| {
        let job = e
            .prepare_path(
                Dtype::Q8_0,
                Geometry::default(),
                QuantPath::Dequant,
                m,
                n,
                k,
                &src0,
                &src1,
            )
            .unwrap();
        job.dispatch(1).unwrap();
        job.read()
    };
    assert_eq!(run(&builtin()).unwrap(), vec![0.0; m * n]);
    let r = run(&candidate("scratch_oob.wgsl", &text));
    assert!(
        matches!(r, Err(WgpuError::ScratchGuard { len: 64, first: 0 })),
        "{r:?}"
    );
}

/// A read past an input's end that reaches a result meets the input's NaN
/// band (`device::wgpu::INPUT_BAND_WORDS`), where the binding's own end
/// would have answered zero or the last element. The candidate multiplies
/// whole k tiles, trusting the operands' zero-filled tails, and its src1
/// loader drops the `k < K` test of four whole rows: past K it reads the
/// next rows (finite, times src0's zeros: no change) and, from the second
/// row on, past src1's end. Those rows' outputs turn NaN; without the band
/// they came out exact (the gate's f32 rows all passed such a kernel); the
/// builtin's are exact.
#[test]
fn a_read_past_an_input_meets_its_nan_band() {
    let text = BUILTIN_MUL_MAT_WGSL
        .replace("let kend = min(TILE_K, kdim - k0);", "let kend = TILE_K;")
        .replace("if (k < params.k && col + 3u < n) {", "if (col + 3u < n) {");
    assert_eq!(
        text.matches("let kend = TILE_K;").count() + text.matches("if (col + 3u < n) {").count(),
        2,
        "both anchors moved"
    );
    // K = 4 in a TILE_K of 16: one partial tile; src1 is 4 rows of 4.
    let (m, n, k) = (4, 4, 4);
    let src0: Vec<u8> = (0..m * k).flat_map(|_| 1.0f32.to_le_bytes()).collect();
    let src1 = vec![1.0f32; n * k];
    let geom = Geometry::default();
    let exact = builtin()
        .mul_mat(Dtype::F32, geom, m, n, k, &src0, &src1)
        .unwrap();
    assert!(exact.iter().all(|&v| v == 4.0), "{exact:?}");
    let got = candidate("whole_tiles.wgsl", &text)
        .mul_mat(Dtype::F32, geom, m, n, k, &src0, &src1)
        .unwrap();
    // dst[n][m]: row r reads src1 up to r K + TILE_K - 1, past its n K
    // elements from row 1 on; row 0 reads only inside it.
    assert!(got[..m].iter().all(|&v| v == 4.0), "{got:?}");
    assert!(got[m..].iter().all(|v| v.is_nan()), "{got:?}");
}

/// The builtin shader's line `const NAME: u32 = ...;`.
fn decl_line(name: &str) -> String {
    let head = format!("const {name}: u32 = ");
    BUILTIN_MUL_MAT_WGSL
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("the builtin shader declares no `{head}...`"))
        .to_string()
}

/// The thread tile is the shader's declaration: a candidate that makes it
/// an `override` (the shim could not size the dispatch before building the
/// pipeline) or leaves it out is refused before any adapter is opened.
#[test]
fn thread_tile_must_be_a_declared_const() {
    for (name, text) in [
        (
            "override-tile.wgsl",
            BUILTIN_MUL_MAT_WGSL.replace(&decl_line("TILE_M"), "override TILE_M: u32 = 4u;"),
        ),
        (
            "no-tile.wgsl",
            BUILTIN_MUL_MAT_WGSL.replace(&decl_line("TILE_N"), ""),
        ),
    ] {
        assert_ne!(text, BUILTIN_MUL_MAT_WGSL);
        let dir = std::env::temp_dir().join(format!("kernel-oracle-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let r = open(ShaderSource::from_file(&path).unwrap());
        assert!(
            matches!(r, Err(WgpuError::Declaration { .. })),
            "{name}: {r:?}"
        );
    }
}

/// A source with `enable subgroups;` gets a device with
/// `Features::SUBGROUP` (here it reads `subgroup_size`, which naga accepts
/// only then) and computes what the plain builtin computes; on an adapter
/// without subgroups it is refused as a missing feature.
#[test]
fn enable_subgroups_requests_the_feature() {
    let text = format!(
        "enable subgroups;\n{}",
        BUILTIN_MUL_MAT_WGSL.replace(
            "@builtin(local_invocation_index) li: u32,",
            "@builtin(local_invocation_index) li: u32,\n    @builtin(subgroup_size) sg: u32,"
        )
    );
    let dir = std::env::temp_dir().join(format!("kernel-oracle-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("subgroups.wgsl");
    std::fs::write(&path, text).unwrap();
    let e = match open(ShaderSource::from_file(&path).unwrap()) {
        Err(WgpuError::MissingFeature { adapter, feature }) => {
            assert_eq!(feature, "SUBGROUP");
            println!("not run: {adapter} has no subgroups");
            return;
        }
        r => r.unwrap_or_else(|e| panic!("{e}")),
    };
    assert!(e.decl().subgroups);
    let (m, n, k) = (70, 9, 96);
    let src0: Vec<u8> = (0..m * k)
        .flat_map(|i| ((i % 7) as f32 - 3.0).to_le_bytes())
        .collect();
    let src1: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 - 2.0).collect();
    let got = e
        .mul_mat(Dtype::F32, Geometry::default(), m, n, k, &src0, &src1)
        .unwrap();
    let want = builtin()
        .mul_mat(Dtype::F32, Geometry::default(), m, n, k, &src0, &src1)
        .unwrap();
    assert_eq!(got, want);
}

/// An engine built without naga's runtime checks (the bench's
/// `CHECKS=off`), and one without its loop bounding only (`CHECKS=bounds`),
/// compute what the checked one computes, bit for bit, on
/// a ragged case of every dtype that the builtin shader keeps in bounds.
#[test]
fn unchecked_modules_compute_the_same_bits() {
    use device::wgpu::QuantPath;
    use kernel_oracle::mul_mat::gate::{run_one, spec, Shape};
    use kernel_oracle::mul_mat::{Arm, CaseSpec};
    let checked = builtin();
    // SAFETY: the builtin shader passes the gate on this shape and
    // geometry: every index in bounds, every loop bounded by the params,
    // every divisor a nonzero constant or K's block count.
    let (unchecked, unbounded) = {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        (
            unsafe { WgpuEngine::new_unchecked(ShaderSource::builtin()) }.unwrap(),
            unsafe { WgpuEngine::new_without_loop_bounding(ShaderSource::builtin()) }.unwrap(),
        )
    };
    assert!(checked.runtime_checks() && checked.loop_bounding());
    assert!(!unchecked.runtime_checks() && !unchecked.loop_bounding());
    assert!(unbounded.runtime_checks() && !unbounded.loop_bounding());
    let shape = Shape {
        label: "ragged",
        m: 97,
        k: 512,
        n: 35,
    };
    for d in Dtype::ALL {
        let s: CaseSpec = spec(&shape, d, Arm::Random);
        let data = s.generate();
        let g = Geometry::default();
        // Both paths of a quantized src0: the fused decoders and the pre-pass.
        let paths: &[QuantPath] = match d {
            Dtype::F32 => &[QuantPath::Fused],
            _ => &[QuantPath::Fused, QuantPath::Dequant],
        };
        for &path in paths {
            let a = checked
                .mul_mat_path(d, g, path, s.m, s.n, s.k, &data.src0, &data.src1)
                .unwrap();
            let b = unchecked
                .mul_mat_path(d, g, path, s.m, s.n, s.k, &data.src0, &data.src1)
                .unwrap();
            let c = unbounded
                .mul_mat_path(d, g, path, s.m, s.n, s.k, &data.src0, &data.src1)
                .unwrap();
            let same = |b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same(&b), "{} {path:?}: unchecked differs", d.name());
            assert!(
                same(&c),
                "{} {path:?}: without loop bounding differs",
                d.name()
            );
        }
        assert!(run_one(&unchecked, &s, &g).unwrap().pass(), "{}", d.name());
        assert!(run_one(&unbounded, &s, &g).unwrap().pass(), "{}", d.name());
    }
}

/// The text of the project file `path` (beside the binary in a bundle).
fn project_text(path: &str) -> String {
    let p = kernel_oracle::paths::project_file(path, env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The dequantize-then-GEMM path (`QuantPath::Dequant`): on the builtin
/// shader and on the 4 x 4 candidate (the seed's design) it computes the
/// fused path's bits for every quantized dtype on ragged shapes (m off the block, one
/// block of k, one row, n = 1), including a pre-pass grid wider than one
/// row of the dispatch; `default_path` takes it from n = DEQUANT_MIN_N on a
/// quantized dtype only; an f32 src0 and a shader without a `dequant`
/// entry refuse it by a typed error, before anything is uploaded.
#[test]
fn the_dequant_path_computes_the_fused_bits_and_refuses_what_it_cannot_run() {
    use device::wgpu::{QuantPath, DEQUANT_MIN_N};
    use kernel_oracle::mul_mat::{Arm, CaseSpec};
    let seed_design = project_text("shaders/candidates/mul_mat_4x4.wgsl");
    for e in [builtin(), candidate("4x4.wgsl", &seed_design)] {
        assert!(e.decl().dequant, "{}", e.source().describe());
        let g = e.decl().geometry;
        for d in Dtype::ALL {
            let be = d.block_elems().max(256);
            for (m, n, k) in [(97, 35, 2 * be), (1, 1, be), (3, 40, be)] {
                let data = CaseSpec {
                    dtype: d,
                    m,
                    n,
                    k,
                    arm: Arm::Random,
                    seed: 0xDE0_0000 + m as u64,
                }
                .generate();
                let fused = e
                    .mul_mat_path(d, g, QuantPath::Fused, m, n, k, &data.src0, &data.src1)
                    .unwrap();
                let dq = e.mul_mat_path(d, g, QuantPath::Dequant, m, n, k, &data.src0, &data.src1);
                if d == Dtype::F32 {
                    assert!(matches!(dq, Err(WgpuError::NoDequant { .. })), "{dq:?}");
                    assert_eq!(e.default_path(d, m, 512, k), QuantPath::Fused);
                    continue;
                }
                let dq = dq.unwrap();
                let same = fused
                    .iter()
                    .zip(&dq)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{} {m}x{n}x{k}: the paths differ", d.name());
                let want = if n >= DEQUANT_MIN_N {
                    QuantPath::Dequant
                } else {
                    QuantPath::Fused
                };
                assert_eq!(e.default_path(d, m, n, k), want);
            }
        }
    }
    // A pre-pass of more workgroups than one grid dimension holds (M K / 256
    // past 65535, the limit of lavapipe and the H200): its second row of
    // workgroups decodes the rows past the first 65535 x 256 elements.
    let e = builtin();
    let (m, k) = (4100, 4096);
    assert!(m * k / 256 > e.limits().max_compute_workgroups_per_dimension as usize);
    let data = CaseSpec {
        dtype: Dtype::Q4_0,
        m,
        n: 1,
        k,
        arm: Arm::Random,
        seed: 0xDE0_1000,
    }
    .generate();
    let g = e.decl().geometry;
    let fused = e
        .mul_mat_path(
            Dtype::Q4_0,
            g,
            QuantPath::Fused,
            m,
            1,
            k,
            &data.src0,
            &data.src1,
        )
        .unwrap();
    let dq = e
        .mul_mat_path(
            Dtype::Q4_0,
            g,
            QuantPath::Dequant,
            m,
            1,
            k,
            &data.src0,
            &data.src1,
        )
        .unwrap();
    assert!(fused
        .iter()
        .zip(&dq)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
    // M K = 0: nothing to decode, an empty dst (the scratch still binds a
    // whole vector); the default path stays fused.
    let r = e.mul_mat_path(
        Dtype::Q4_0,
        g,
        QuantPath::Dequant,
        0,
        40,
        32,
        &[],
        &[0.0; 40 * 32],
    );
    assert_eq!(r.unwrap(), Vec::<f32>::new());
    assert_eq!(e.default_path(Dtype::Q4_0, 0, 512, 256), QuantPath::Fused);
    let vec4 = project_text("shaders/candidates/mul_mat_vec4.wgsl");
    let plain = candidate("vec4.wgsl", &vec4);
    assert!(!plain.decl().dequant);
    let r = plain.mul_mat_path(
        Dtype::Q4_0,
        plain.decl().geometry,
        QuantPath::Dequant,
        1,
        1,
        32,
        &[0; 18],
        &[0.0; 32],
    );
    assert!(matches!(r, Err(WgpuError::NoDequant { .. })), "{r:?}");
    assert_eq!(
        plain.default_path(Dtype::Q4_0, 64, 512, 256),
        QuantPath::Fused
    );
}

/// `default_geometry` doubles TILE_K exactly on grids of at most
/// `FEW_WORKGROUPS` workgroups with k >= `LONG_K` when the doubled
/// geometry's padded workgroup memory fits the adapter (the H200: yes;
/// lavapipe's 32 KiB: no), and keeps the declared geometry otherwise; the
/// padded count is the shader's stated 18 and 36 KiB; and TILE_K 32
/// computes TILE_K 16's bits on the fused path (rule MM-ORDER), at 8 x 8
/// threads, which every adapter holds.
#[test]
fn default_geometry_doubles_tile_k_on_few_workgroups_and_long_k() {
    use device::wgpu::{QuantPath, FEW_WORKGROUPS, LONG_K};
    let e = builtin();
    let d = e.decl().geometry;
    let long = Geometry {
        tile_k: 2 * d.tile_k,
        ..d
    };
    assert_eq!(
        (
            d.padded_workgroup_bytes(e.decl()),
            long.padded_workgroup_bytes(e.decl())
        ),
        (18 * 1024, 36 * 1024),
        "the layout of shaders/mul_mat_reg_tile.wgsl at {d:?} and {long:?}"
    );
    let fits = long.validate(e.decl(), e.limits()).is_ok()
        && long.padded_workgroup_bytes(e.decl())
            <= u64::from(e.limits().max_compute_workgroup_storage_size);
    let (bm, bn) = (d.block_m(e.decl()) as usize, d.block_n(e.decl()) as usize);
    // FEW_WORKGROUPS workgroups exactly, then one more column of them.
    let few_m = bm * 16;
    let few_n = bn * (FEW_WORKGROUPS as usize / 16);
    let cases = [
        (few_m, few_n, LONG_K, fits),
        (few_m, few_n + 1, LONG_K, false),
        (few_m, few_n, LONG_K - 32, false),
        (1024, 512, 4608, fits),  // ffn_down: 16 x 8 workgroups
        (4608, 512, 1024, false), // ffn_gate: 72 x 8
        (1, 1, 256, false),
    ];
    for (m, n, k, doubled) in cases {
        let want = if doubled { long } else { d };
        assert_eq!(e.default_geometry(m, n, k), want, "{m} x {n} x {k}");
    }
    let small = |tile_k| Geometry {
        wg_m: 8,
        wg_n: 8,
        tile_k,
    };
    let (m, n, k) = (130, 70, LONG_K + 256);
    for dtype in [Dtype::F32, Dtype::Q4K] {
        let (src0, src1) = oracle_case(dtype, m, n, k);
        let run = |g| {
            e.mul_mat_path(dtype, g, QuantPath::Fused, m, n, k, &src0, &src1)
                .unwrap()
        };
        let (at_32, at_16) = (run(small(32)), run(small(16)));
        assert!(
            at_32
                .iter()
                .zip(&at_16)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{}: TILE_K 32 and 16 differ",
            dtype.name()
        );
    }
}

/// Random finite operands of `dtype` for an `m x n x k` product.
fn oracle_case(dtype: Dtype, m: usize, n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let data = kernel_oracle::mul_mat::generate::CaseSpec {
        dtype,
        m,
        n,
        k,
        arm: kernel_oracle::mul_mat::generate::Arm::Random,
        seed: 0x6E0D,
    }
    .generate();
    (data.src0, data.src1)
}

/// Where the adapter has subgroups (lavapipe does: 8 lanes on a 256-bit
/// host), the builtin shader's subgroup form is the default (unless it was
/// measured slower there: NVIDIA) and computes
/// the plain form's bits on every dtype and path, at the declared
/// geometry, at the gate's 8 x 4 / 40 (partial tiles), and at WG_M 3,
/// where no exchange applies (SG_G 0: every subgroup reads src1 as the
/// plain form). Without subgroups it is an explicit skip of that form,
/// with the reason.
#[test]
fn the_subgroup_form_computes_the_plain_bits_and_defaults_by_vendor() {
    use device::wgpu::{Form, QuantPath};
    use kernel_oracle::mul_mat::{Arm, CaseSpec};
    let e = builtin();
    match e.subgroup_form() {
        Err(reason) => {
            assert_eq!(e.forms(), vec![Form::Plain]);
            assert_eq!(e.default_form(), Form::Plain);
            println!(
                "not run: {} has no subgroup form: {reason}",
                e.adapter_name()
            );
            return;
        }
        Ok(lanes) => {
            println!("{}: subgroup form of {lanes} lanes", e.adapter_name());
            assert!(lanes.is_power_of_two() && (4..=128).contains(&lanes));
        }
    }
    assert_eq!(e.forms(), vec![Form::Plain, Form::Subgroup]);
    // The default as the engine chose it when it was made (a variable
    // set by another test of this binary names itself in the reason).
    if !e
        .default_reason()
        .contains(device::wgpu::ENV_MUL_MAT_SUBGROUPS)
    {
        let slower = device::wgpu::subgroup::measured_slower(e.adapter_vendor());
        let want = match slower {
            Some(_) => Form::Plain,
            None => Form::Subgroup,
        };
        assert_eq!(e.default_form(), want, "{}", e.default_reason());
    }
    let geoms = [
        Geometry::default(),
        Geometry {
            wg_m: 8,
            wg_n: 4,
            tile_k: 40,
        },
        Geometry {
            wg_m: 3,
            wg_n: 4,
            tile_k: 16,
        },
    ];
    for geom in geoms {
        for d in Dtype::ALL {
            let data = CaseSpec {
                dtype: d,
                m: 97,
                n: 35,
                k: 512,
                arm: Arm::Random,
                seed: 7,
            }
            .generate();
            let paths = match d {
                Dtype::F32 => vec![QuantPath::Fused],
                _ => vec![QuantPath::Fused, QuantPath::Dequant],
            };
            for path in paths {
                let run = |form| {
                    let job = e
                        .prepare_form(d, geom, path, form, 97, 35, 512, &data.src0, &data.src1)
                        .unwrap();
                    assert_eq!(job.form(), form);
                    job.dispatch(1).unwrap();
                    job.read().unwrap()
                };
                let (plain, sg) = (run(Form::Plain), run(Form::Subgroup));
                let same = plain
                    .iter()
                    .zip(&sg)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{} {geom:?} {}: the forms differ",
                    d.name(),
                    path.name()
                );
            }
        }
    }
}

/// KERNEL_ORACLE_MUL_MAT_SUBGROUPS=off makes the plain form the default
/// and keeps the subgroup form available to the gate, `on` makes the
/// subgroup form the default wherever there is one (NVIDIA included); a
/// value that is no policy is a typed error. A source without marker lines has no subgroup
/// form, says why, and refuses a subgroup job. (One test, so no other test
/// of this binary reads the variable meanwhile.)
#[test]
fn subgroup_policy_and_sources_without_a_subgroup_form() {
    use device::wgpu::{Form, QuantPath, ENV_MUL_MAT_SUBGROUPS};
    let (off, on, bad) = {
        let _g = ENV.lock().unwrap_or_else(|p| p.into_inner());
        std::env::set_var(ENV_MUL_MAT_SUBGROUPS, "off");
        let off = WgpuEngine::new(ShaderSource::builtin());
        std::env::set_var(ENV_MUL_MAT_SUBGROUPS, "on");
        let on = WgpuEngine::new(ShaderSource::builtin());
        std::env::set_var(ENV_MUL_MAT_SUBGROUPS, "sometimes");
        let bad = WgpuEngine::new(ShaderSource::builtin());
        std::env::remove_var(ENV_MUL_MAT_SUBGROUPS);
        (off.unwrap(), on.unwrap(), bad)
    };
    let on_want = match on.subgroup_form() {
        Ok(_) => Form::Subgroup,
        Err(_) => Form::Plain,
    };
    assert_eq!(on.default_form(), on_want, "{}", on.default_reason());
    assert!(
        matches!(bad, Err(WgpuError::BadSubgroupEnv { ref value }) if value == "sometimes"),
        "{bad:?}"
    );
    assert_eq!(off.default_form(), Form::Plain);
    assert!(
        off.default_reason().contains("=off"),
        "{}",
        off.default_reason()
    );
    assert_eq!(
        off.forms().len(),
        1 + usize::from(off.subgroup_form().is_ok())
    );
    let marked: Vec<&str> = BUILTIN_MUL_MAT_WGSL
        .lines()
        .filter(|l| l.contains("// SUBGROUP: "))
        .collect();
    assert!(marked.len() >= 4, "{marked:?}");
    let plain_only = candidate(
        "no-markers.wgsl",
        &BUILTIN_MUL_MAT_WGSL.replace("// SUBGROUP: ", "// subgroup form: "),
    );
    let reason = plain_only.subgroup_form().unwrap_err();
    assert!(reason.contains("no `// SUBGROUP:` lines"), "{reason}");
    assert_eq!(plain_only.forms(), vec![Form::Plain]);
    assert_eq!(plain_only.default_form(), Form::Plain);
    let r = plain_only.prepare_form(
        Dtype::F32,
        Geometry::default(),
        QuantPath::Fused,
        Form::Subgroup,
        1,
        1,
        4,
        &[0; 16],
        &[0.0; 4],
    );
    assert!(
        matches!(r, Err(WgpuError::NoSubgroupForm { .. })),
        "{:?}",
        r.err()
    );
}
