//! Planted bugs must stay plantable (CPU) and must be caught (GPU).

use device::cuda::{compile, Engine, KernelSource, BUILTIN_FP8_MMQ_CU};
use kernel_oracle::fp8_mmq::gate::BATTERY;
use kernel_oracle::fp8_mmq::mutants::{apply, MUTANTS};
use kernel_oracle::fp8_mmq::{run, CaseSpec, Outcome};

fn write_mutant(name: &str, text: &str) -> std::path::PathBuf {
    kernel_oracle::mutate::write_candidate("fp8", name, text).unwrap()
}

/// Every anchor occurs in the builtin kernel, and every mutant
/// still compiles (NVRTC, sm_90, no GPU), so it reaches the gate as a
/// wrong kernel rather than as a compile error.
#[test]
fn every_mutant_applies_and_compiles() {
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_FP8_MMQ_CU).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(text, BUILTIN_FP8_MMQ_CU);
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        compile(&src, "sm_90")
            .unwrap_or_else(|e| panic!("mutant {} does not compile: {e}", m.name));
    }
}

/// Each mutant fails at least one battery shape in each arm it claims.
#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn every_mutant_is_caught_by_the_gate() {
    // The gate's own battery (it includes (1000, 130, 7), the only shape
    // with unaligned weight rows, where the byte-wise k-tail path runs),
    // less its one large-m shape to keep the test quick.
    let shapes: Vec<_> = BATTERY
        .iter()
        .copied()
        .filter(|&(_, _, m)| m <= 128)
        .collect();
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_FP8_MMQ_CU).unwrap();
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let mut engine = Engine::with_source(0, src).unwrap();
        engine.set_guards(true);
        for &arm in m.caught_by {
            let failed = shapes.iter().any(|&(in_f, out_f, mm)| {
                let data = CaseSpec::battery(in_f, out_f, mm, arm).generate().unwrap();
                match run::run_case(&engine, &data, arm) {
                    Outcome::Judged(v) => !v.pass(),
                    Outcome::Refused { .. } => false,
                }
            });
            assert!(
                failed,
                "mutant {} ({}) passed every {} shape",
                m.name,
                m.what,
                arm.name()
            );
        }
    }
}
