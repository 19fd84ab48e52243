//! The fp8_mmq kernels compile with NVRTC for sm_90. Needs libnvrtc, no GPU:
//! this runs in CI. Without libnvrtc it FAILS (it does not skip), saying how
//! to install it.
//!
//! cudarc 0.19 (feature `cuda-13000`) opens NVRTC by file name through
//! `dlopen`, trying `libnvrtc.so` first and `libnvrtc.so.13` later; the pip
//! wheel `nvidia-cuda-nvrtc` ships only `libnvrtc.so.13`, in
//! `<site-packages>/nvidia/cu13/lib`, which is enough once that folder is on
//! `LD_LIBRARY_PATH`.

use device::cuda::{
    compile, nvrtc_available, nvrtc_version, KernelSource, ENV_FP8_MMQ_CU, REQUIRED_KERNELS,
};

const ARCH: &str = "sm_90";

fn require_nvrtc() {
    if let Err(e) = nvrtc_available() {
        panic!("{e}");
    }
}

/// Asserts the ABI's kernels are `.entry` points of the PTX.
fn assert_abi(source: &KernelSource) {
    let c = compile(source, ARCH).unwrap_or_else(|e| panic!("{e}"));
    for k in REQUIRED_KERNELS {
        assert!(
            c.ptx.contains(&format!(".entry {k}(")),
            "{}: kernel {k} is not in the PTX",
            source.describe()
        );
    }
    assert!(!c.cubin.is_empty(), "NVRTC produced no CUBIN for {ARCH}");
    eprintln!(
        "{} for {ARCH}: {} bytes of PTX, {} bytes of CUBIN",
        source.describe(),
        c.ptx.len(),
        c.cubin.len()
    );
    eprintln!("{}", c.log);
}

#[test]
fn builtin_kernels_compile_for_sm_90() {
    require_nvrtc();
    let (major, minor) = nvrtc_version().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("NVRTC {major}.{minor}");
    let source = KernelSource::builtin();
    assert_abi(&source);
    let c = compile(&source, ARCH).unwrap_or_else(|e| panic!("{e}"));
    for v in 0..9 {
        assert!(
            c.ptx.contains(&format!(".entry fp8_mmq_v2_k{v}(")),
            "fp8_mmq_v2_k{v} missing"
        );
    }
    assert!(c
        .ptx
        .contains("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"));
    assert!(c.ptx.contains("cvt.rn.satfinite.e4m3x2.f32"));
    // --fmad=false: no multiply and add were contracted into an f32 FMA.
    assert!(!c.ptx.contains("fma.rn.f32"), "the PTX holds an f32 FMA");
    for line in c.log.lines().filter(|l| l.contains("spill stores")) {
        assert!(
            line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
            "ptxas reports spills:\n{}",
            c.log
        );
    }
}

#[test]
fn candidate_kernels_compile_for_sm_90_when_named() {
    require_nvrtc();
    match std::env::var_os(ENV_FP8_MMQ_CU) {
        Some(p) if !p.is_empty() => {
            let source = KernelSource::from_env().unwrap_or_else(|e| panic!("{e}"));
            assert_abi(&source);
        }
        _ => eprintln!("{ENV_FP8_MMQ_CU} is not set: no candidate to compile"),
    }
}

#[test]
fn compile_is_cached_per_source_and_arch() {
    require_nvrtc();
    let s = KernelSource::builtin();
    let a = compile(&s, ARCH).unwrap_or_else(|e| panic!("{e}"));
    let b = compile(&s, ARCH).unwrap_or_else(|e| panic!("{e}"));
    assert!(std::sync::Arc::ptr_eq(&a, &b));
}
