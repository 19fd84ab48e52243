//! The fp8_mmq kernels compile with NVRTC for sm_90, and for sm_90a (what
//! the shim compiles for on a 9.0 device: the wgmma variants are exported
//! only there). Needs libnvrtc, no GPU: this runs in CI. Without libnvrtc it FAILS (it does not skip), saying how
//! to install it.
//!
//! cudarc 0.19 (feature `cuda-13000`) opens NVRTC by file name through
//! `dlopen`, trying `libnvrtc.so` first and `libnvrtc.so.13` later; the pip
//! wheel `nvidia-cuda-nvrtc` ships only `libnvrtc.so.13`, in
//! `<site-packages>/nvidia/cu13/lib`, which is enough once that folder is on
//! `LD_LIBRARY_PATH`.

use device::cuda::{
    compile, nvrtc_arch, nvrtc_available, nvrtc_version, KernelSource, ENV_FP8_MMQ_CU, ENV_GDN_CU,
    GDN_FUSED_SPLIT, GDN_KERNELS, REQUIRED_KERNELS,
};

const ARCH: &str = "sm_90";
/// What the shim compiles for on a 9.0 device (H100, H200).
const ARCH_A: &str = "sm_90a";
/// MMQ variants of the builtin source without / with the sm_90a features.
const PLAIN_VARIANTS: usize = 9;
const SM90A_VARIANTS: usize = 26;
/// The variants of `cu/candidates/fp8_mmq_walk.cu` before its own two (it
/// was made from the builtin source of 25 variants).
const WALK_BASE: usize = 25;
/// The first variant on the native e4m3 wgmma (schedule code 3, fused
/// fold); k0 .. k14 convert to f16 and declare v2.
const FIRST_NATIVE: usize = 15;
/// The first native variant whose tiles come by tensor-map copies (TMA).
const FIRST_TMA: usize = 18;

fn require_nvrtc() {
    if let Err(e) = nvrtc_available() {
        panic!("{e}");
    }
}

/// Asserts the ABI's kernels are `.entry` points of the PTX.
fn assert_abi(source: &KernelSource, arch: &str) {
    let c = compile(source, arch).unwrap_or_else(|e| panic!("{e}"));
    for k in REQUIRED_KERNELS {
        assert!(
            c.ptx.contains(&format!(".entry {k}(")),
            "{}: kernel {k} is not in the PTX",
            source.describe()
        );
    }
    assert!(!c.cubin.is_empty(), "NVRTC produced no CUBIN for {arch}");
    eprintln!(
        "{} for {arch}: {} bytes of PTX, {} bytes of CUBIN",
        source.describe(),
        c.ptx.len(),
        c.cubin.len()
    );
    eprintln!("{}", c.log);
}

/// No spill, and (sm_90a) no wgmma serialised by ptxas (C7513 / C7514:
/// registers of an in-flight wgmma touched), in the resource report.
fn assert_clean_log(log: &str) {
    for line in log.lines().filter(|l| l.contains("spill stores")) {
        assert!(
            line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
            "ptxas reports spills:\n{log}"
        );
    }
    assert!(
        !log.contains("serialized"),
        "ptxas serialises wgmma:\n{log}"
    );
}

fn assert_variants(ptx: &str, n: usize) {
    for v in 0..n {
        assert!(
            ptx.contains(&format!(".entry fp8_mmq_v2_k{v}(")),
            "fp8_mmq_v2_k{v} missing"
        );
    }
    assert!(
        !ptx.contains(&format!(".entry fp8_mmq_v2_k{n}(")),
        "fp8_mmq_v2_k{n} exported: more than {n} variants"
    );
}

#[test]
fn builtin_kernels_compile_for_sm_90() {
    require_nvrtc();
    let (major, minor) = nvrtc_version().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("NVRTC {major}.{minor}");
    let source = KernelSource::builtin();
    assert_abi(&source, ARCH);
    let c = compile(&source, ARCH).unwrap_or_else(|e| panic!("{e}"));
    assert_variants(&c.ptx, PLAIN_VARIANTS);
    assert!(c
        .ptx
        .contains("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"));
    assert!(c.ptx.contains("cvt.rn.satfinite.e4m3x2.f32"));
    assert!(!c.ptx.contains("wgmma"), "wgmma in a plain sm_90 build");
    // --fmad=false: no multiply and add were contracted into an f32 FMA.
    assert!(!c.ptx.contains("fma.rn.f32"), "the PTX holds an f32 FMA");
    assert_clean_log(&c.log);
}

#[test]
fn builtin_kernels_compile_for_sm_90a_with_wgmma() {
    require_nvrtc();
    assert_eq!(nvrtc_arch(9, 0), ARCH_A);
    assert_eq!(nvrtc_arch(8, 9), "sm_89");
    assert_eq!(nvrtc_arch(10, 0), "sm_100");
    let source = KernelSource::builtin();
    assert_abi(&source, ARCH_A);
    let c = compile(&source, ARCH_A).unwrap_or_else(|e| panic!("{e}"));
    assert_variants(&c.ptx, SM90A_VARIANTS);
    // k0 .. k14 (schedule v2): f16 operands with f32 accumulation, never
    // the e4m3 wgmma (whose accumulation is not f32), no FMA (separate
    // fold). k15 ..: the e4m3 wgmma on unconverted codes (schedule
    // SM90_WGMMA_FUSED: its accumulation, a fused fold).
    for v in 0..SM90A_VARIANTS {
        let body = entry_ptx(&c.ptx, &format!("fp8_mmq_v2_k{v}"));
        if v < FIRST_NATIVE {
            assert!(!body.contains(".e4m3.e4m3 "), "k{v}: e4m3 wgmma");
            assert!(!body.contains("fma.rn.f32"), "k{v}: an f32 FMA");
            if v >= PLAIN_VARIANTS {
                assert!(body.contains(".f32.f16.f16"), "k{v}: no f16 wgmma");
            }
        } else {
            assert!(
                body.contains("wgmma.mma_async.sync.aligned.m64n")
                    && body.contains("k32.f32.e4m3.e4m3"),
                "k{v}: no e4m3 wgmma"
            );
            assert!(!body.contains(".f16.f16"), "k{v}: an f16 MMA");
            assert!(!body.contains("cvt.rn.f16x2.e4m3x2"), "k{v}: a conversion");
            assert!(body.contains("fma.rn.f32"), "k{v}: no fused fold");
            // k18 ..: the tiles by tensor-map copies (the ABI's TMA
            // variants), k15 .. k17 by cp.async.
            assert_eq!(
                body.contains("cp.async.bulk.tensor.2d"),
                v >= FIRST_TMA,
                "k{v}: tensor-map copies"
            );
        }
    }
    assert!(c.ptx.contains("cvt.rn.f16x2.e4m3x2"));
    for k in ["fp8_mmq_plan", "fp8_quantize_act", "fp8_nan_count"] {
        assert!(
            !entry_ptx(&c.ptx, k).contains("fma.rn.f32"),
            "{k}: an f32 FMA"
        );
    }
    assert_clean_log(&c.log);
}

/// The PTX of entry `name`, from its `.entry` line to the next entry's.
fn entry_ptx<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("{name} is not in the PTX"));
    let rest = &ptx[start + 1..];
    match rest.find(".entry ") {
        Some(end) => &rest[..end],
        None => rest,
    }
}

#[test]
fn builtin_kernels_compile_for_sm_89() {
    require_nvrtc();
    let c = compile(&KernelSource::builtin(), "sm_89").unwrap_or_else(|e| panic!("{e}"));
    assert_variants(&c.ptx, PLAIN_VARIANTS);
    assert!(!c.ptx.contains("wgmma"));
}

/// The candidate path: a .cu file read from disk compiles and is named by
/// its path. With the environment variable set, that file; otherwise a
/// copy of the builtin source written to a temporary file.
#[test]
fn candidate_kernels_compile_for_sm_90() {
    require_nvrtc();
    let source = match std::env::var_os(ENV_FP8_MMQ_CU) {
        Some(p) if !p.is_empty() => KernelSource::from_env().unwrap_or_else(|e| panic!("{e}")),
        _ => {
            let path = std::env::temp_dir().join(format!("candidate-{}.cu", std::process::id()));
            std::fs::write(&path, KernelSource::builtin().text()).unwrap();
            let s = KernelSource::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                s.describe().contains(&*path.to_string_lossy()),
                "{}",
                s.describe()
            );
            s
        }
    };
    assert_abi(&source, ARCH);
    assert_abi(&source, ARCH_A);
}

/// The kept FP8 candidate (`cu/candidates/fp8_mmq_walk.cu`: the builtin
/// variants plus k25 and k26, which walk the tiles) still compiles for
/// sm_90a with the ABI, exports its 27 variants, and has no spill and no
/// serialised wgmma; k25 and k26 run the e4m3 wgmma with a fused fold.
#[test]
fn kept_fp8_candidate_compiles_for_sm_90a() {
    require_nvrtc();
    let source = KernelSource::builtin_named(
        "cu/candidates/fp8_mmq_walk.cu",
        include_str!("../../cu/candidates/fp8_mmq_walk.cu"),
    );
    assert_abi(&source, ARCH_A);
    let c = compile(&source, ARCH_A).unwrap_or_else(|e| panic!("{e}"));
    assert_variants(&c.ptx, WALK_BASE + 2);
    for v in [WALK_BASE, WALK_BASE + 1] {
        let body = entry_ptx(&c.ptx, &format!("fp8_mmq_v2_k{v}"));
        assert!(
            body.contains("k32.f32.e4m3.e4m3") && body.contains("fma.rn.f32"),
            "k{v}: not the e4m3 wgmma with a fused fold"
        );
        assert!(
            body.contains("cp.async.bulk.tensor.2d"),
            "k{v}: no tensor-map copies"
        );
    }
    assert_clean_log(&c.log);
}

#[test]
fn compile_is_cached_per_source_and_arch() {
    require_nvrtc();
    let s = KernelSource::builtin();
    let a = compile(&s, ARCH).unwrap_or_else(|e| panic!("{e}"));
    let b = compile(&s, ARCH).unwrap_or_else(|e| panic!("{e}"));
    assert!(std::sync::Arc::ptr_eq(&a, &b));
}

/// `cu/gdn.cu` (and the candidate named by `KERNEL_ORACLE_GDN_CU`, when
/// set): every kernel of the ABI is an entry point, and no multiply and add
/// were contracted into an f32 FMA (the contract's bits need separate
/// roundings), no fast-math approximations of division or square root.
fn assert_gdn(source: &KernelSource) {
    let c = compile(source, ARCH).unwrap_or_else(|e| panic!("{e}"));
    for k in GDN_KERNELS {
        assert!(
            c.ptx.contains(&format!(".entry {k}(")),
            "{}: kernel {k} is not in the PTX",
            source.describe()
        );
    }
    assert!(!c.cubin.is_empty(), "NVRTC produced no CUBIN for {ARCH}");
    assert!(!c.ptx.contains("fma.rn.f32"), "the PTX holds an f32 FMA");
    assert!(
        !c.ptx.contains(".approx.f32"),
        "approximate f32 arithmetic in the PTX"
    );
    assert!(
        !c.ptx.contains(".ftz.f32"),
        "flush-to-zero f32 arithmetic in the PTX"
    );
    assert!(
        c.ptx.contains("sqrt.rn.f32"),
        "no correctly rounded sqrt in the PTX"
    );
    assert!(
        c.ptx.contains("div.rn.f32"),
        "no correctly rounded division in the PTX"
    );
    eprintln!(
        "{} for {ARCH}: {} bytes of PTX, {} bytes of CUBIN\n{}",
        source.describe(),
        c.ptx.len(),
        c.cubin.len(),
        c.log
    );
}

#[test]
fn gdn_kernels_compile_for_sm_90_without_fma() {
    require_nvrtc();
    assert_gdn(&KernelSource::builtin_gdn());
    match std::env::var_os(ENV_GDN_CU) {
        Some(p) if !p.is_empty() => {
            assert_gdn(&KernelSource::gdn_from_env().unwrap_or_else(|e| panic!("{e}")))
        }
        _ => eprintln!("{ENV_GDN_CU} is not set: no candidate to compile"),
    }
}

/// The builtin's split form of the fused step (`gdn_step_fused_split`) is
/// there for sm_90 as the shim launches it (clusters of 8, 256 threads,
/// two CTAs an SM) and not for sm_89 (no clusters).
#[test]
fn gdn_split_entry_compiles_for_sm_90_only() {
    require_nvrtc();
    let src = KernelSource::builtin_gdn();
    let c = compile(&src, ARCH).unwrap_or_else(|e| panic!("{e}"));
    let ptx = entry_ptx(&c.ptx, GDN_FUSED_SPLIT);
    for want in [
        ".maxntid 256, 1, 1",
        ".minnctapersm 2",
        ".reqnctapercluster 8, 1, 1",
        "mbarrier.try_wait.parity",
    ] {
        assert!(
            ptx.contains(want),
            "{GDN_FUSED_SPLIT}: no `{want}` in its PTX"
        );
    }
    let old = compile(&src, "sm_89").unwrap_or_else(|e| panic!("{e}"));
    assert!(!old.ptx.contains(&format!(".entry {GDN_FUSED_SPLIT}(")));
}

/// The tensor-core probes compile: the mma.sync ones for sm_89 and sm_90,
/// the wgmma ones too for sm_90a (one QGMMA each, no serialisation).
#[test]
fn tensor_core_probes_compile() {
    require_nvrtc();
    let src =
        KernelSource::builtin_named("cu/tensor_core.cu", device::cuda::BUILTIN_TENSOR_CORE_CU);
    for arch in ["sm_89", ARCH, ARCH_A] {
        let c = compile(&src, arch).unwrap_or_else(|e| panic!("{e}"));
        for k in device::cuda::MMA_KERNELS {
            assert!(
                c.ptx.contains(&format!(".entry {k}(")),
                "{k} missing for {arch}"
            );
        }
        for k in device::cuda::WGMMA_KERNELS {
            assert_eq!(
                c.ptx.contains(&format!(".entry {k}(")),
                arch == ARCH_A,
                "{k} for {arch}"
            );
        }
        assert_clean_log(&c.log);
    }
}

/// The harness's device-side comparison (`cu/bit_diff.cu`) compiles for
/// the H100/H200 and for an older device, with its kernel and its two
/// atomics (a count added, a first index minimised).
#[test]
fn bit_diff_compiles() {
    require_nvrtc();
    let source = KernelSource::builtin_named("cu/bit_diff.cu", device::cuda::BUILTIN_BIT_DIFF_CU);
    for arch in [ARCH, "sm_80"] {
        let c = compile(&source, arch).unwrap_or_else(|e| panic!("{e}"));
        assert_clean_log(&c.log);
        let entry = entry_ptx(&c.ptx, device::cuda::BIT_DIFF_KERNEL);
        assert!(
            entry.contains("atom.global.add.u64"),
            "{arch}: no count added"
        );
        assert!(
            entry.contains("atom.global.min.u64"),
            "{arch}: no first index kept"
        );
        assert!(!c.cubin.is_empty(), "NVRTC produced no CUBIN for {arch}");
    }
}
