//! Planted bugs in cu/gdn.cu must stay plantable and compile (CPU, NVRTC)
//! and must be caught by the gate (GPU).

use device::cuda::{compile, GdnEngine, KernelSource, BUILTIN_GDN_CU, GDN_KERNELS};
use kernel_oracle::gdn::gate;
use kernel_oracle::gdn::mutants::{apply, by_name, MUTANTS};

fn write_mutant(name: &str, text: &str) -> std::path::PathBuf {
    kernel_oracle::mutate::write_candidate("gdn", name, text).unwrap()
}

/// Every anchor occurs exactly once in the builtin kernel and every mutant
/// compiles (NVRTC, sm_90, no GPU) and still exports every kernel, so
/// it reaches the gate as a wrong kernel rather than as a compile error.
#[test]
fn every_mutant_applies_once_and_compiles() {
    for name in ["decay-after-delta", "eps-outside-sqrt"] {
        assert!(by_name(name).is_some(), "{name}");
    }
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_GDN_CU).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(text, BUILTIN_GDN_CU);
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let c = compile(&src, "sm_90")
            .unwrap_or_else(|e| panic!("mutant {} does not compile: {e}", m.name));
        for k in GDN_KERNELS {
            assert!(c.ptx.contains(&format!(".entry {k}(")), "{}: {k}", m.name);
        }
    }
    assert!(apply(&MUTANTS[0], "no anchor here").is_err());
}

/// Each mutant fails the gate, in every gate it claims.
#[test]
#[ignore = "needs a CUDA device"]
fn every_mutant_is_caught_by_the_gate() {
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_GDN_CU).unwrap();
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let mut e = GdnEngine::with_source(0, src).unwrap();
        e.set_guards(true);
        println!("mutant {}: {}", m.name, m.what);
        let g = gate::run(&e);
        for &n in m.caught_by {
            assert!(
                g.failures_by_gate[usize::from(n - 1)] > 0,
                "mutant {} passed gate {n}",
                m.name
            );
        }
    }
}
