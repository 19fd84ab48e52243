//! Planted bugs in cu/moe_tables.cu must stay plantable (CPU) and must be
//! caught by the gate (GPU).

use device::cuda::{compile, KernelSource, MoeEngine, BUILTIN_MOE_TABLES_CU, MOE_TABLES_KERNEL};
use kernel_oracle::moe_tables::gate::{self, run_one};
use kernel_oracle::moe_tables::mutants::{apply, by_name, MUTANTS};

fn write_mutant(name: &str, text: &str) -> std::path::PathBuf {
    kernel_oracle::mutate::write_candidate("moe", name, text).unwrap()
}

/// Every anchor occurs exactly once in the builtin kernel and every mutant
/// compiles (NVRTC, sm_90, no GPU), so it reaches the gate as a wrong
/// kernel rather than as a compile error.
#[test]
fn every_mutant_applies_once_and_compiles() {
    assert!(by_name("stride-product-32bit").is_some());
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_MOE_TABLES_CU).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(text, BUILTIN_MOE_TABLES_CU);
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let c = compile(&src, "sm_90")
            .unwrap_or_else(|e| panic!("mutant {} does not compile: {e}", m.name));
        assert!(c.ptx.contains(&format!(".entry {MOE_TABLES_KERNEL}(")));
    }
}

/// The gate has a case that the subnormal flush changes: the oracle's
/// tables of `nan-subnormal-negative` hold a subnormal down scale (so a
/// bit-exact comparison fails a kernel that flushes it).
#[test]
fn the_gate_has_a_subnormal_down_scale() {
    let cases = gate::cases();
    let c = cases
        .iter()
        .find(|c| c.label == "nan-subnormal-negative")
        .unwrap();
    let t = kernel_oracle::moe_tables::reference(&c.data).unwrap();
    let n = c.data.experts.len();
    let subnormal = t.scales[2 * n..]
        .iter()
        .filter(|s| s.is_subnormal())
        .count();
    assert!(subnormal > 0, "down scales {:?}", &t.scales[2 * n..]);
}

/// Each mutant fails every gate case it claims, and in particular the
/// 32-bit stride product fails the seed's serving-stride case while the
/// small-stride control still passes (which is why the control alone
/// proves nothing).
#[test]
#[ignore = "needs a CUDA device"]
fn every_mutant_is_caught_by_the_gate() {
    let cases = gate::cases();
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_MOE_TABLES_CU).unwrap();
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let mut engine = MoeEngine::with_source(0, src).unwrap();
        engine.set_guards(true);
        println!("mutant {}: {}", m.name, m.what);
        for &label in m.caught_by {
            let c = cases.iter().find(|c| c.label == label).unwrap();
            let v = run_one(&engine, label, &c.data, c.max_ctas);
            assert!(!v.pass(), "mutant {} passed gate case {label}", m.name);
        }
        if m.name == "stride-product-32bit" {
            let c = cases.iter().find(|c| c.label == "small-strides").unwrap();
            assert!(
                run_one(&engine, "small-strides", &c.data, None).pass(),
                "the 32-bit product should pass the fixture-scale control"
            );
        }
    }
}
