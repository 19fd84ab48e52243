//! Planted bugs in cu/tensor_core.cu must stay plantable and compile
//! (CPU, NVRTC for sm_90a), the gate must have rows whose answer each bug
//! changes (CPU: the bug's effect on the operands, through the model), and
//! the gate must catch each on the device (GPU).

use device::cuda::{compile, KernelSource, BUILTIN_TENSOR_CORE_CU, MMA_KERNELS, WGMMA_KERNELS};
use kernel_oracle::tensor_core::mutants::{apply, MUTANTS};
use kernel_oracle::tensor_core::{judge, targeted, CaseSpec, Class, Tiles, GATE_TILES, PAIRS};
use oracle::tensor_core::{mma_k32, Instruction, Model};

fn write_mutant(name: &str, text: &str) -> std::path::PathBuf {
    kernel_oracle::mutate::write_candidate("tensor-core", name, text).unwrap()
}

/// Every anchor occurs exactly once in the builtin probes and every mutant
/// compiles for sm_90a with all eight probes, so it reaches the gate as a
/// wrong probe rather than as a compile error.
#[test]
fn every_mutant_applies_once_and_compiles() {
    assert!(MUTANTS.len() >= 3);
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_TENSOR_CORE_CU).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(text, BUILTIN_TENSOR_CORE_CU);
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let c = compile(&src, "sm_90a")
            .unwrap_or_else(|e| panic!("mutant {} does not compile: {e}", m.name));
        for k in MMA_KERNELS.iter().chain(&WGMMA_KERNELS) {
            assert!(c.ptx.contains(&format!(".entry {k}(")), "{}: {k}", m.name);
        }
    }
}

/// What the model answers on `tiles` (accumulator +0 without `scale_d`):
/// a probe that runs the instruction on these operands returns this.
fn model_d(model: &Model, pair: usize, tiles: &Tiles, scale_d: bool) -> Vec<f32> {
    let (fa, fb) = PAIRS[pair];
    let mut d = Vec::with_capacity(tiles.c.len());
    for t in 0..tiles.count() {
        for i in 0..64 {
            for j in 0..8 {
                let (a, b, c) = tiles.vector(t, i, j);
                d.push(mma_k32(
                    model,
                    fa,
                    &a,
                    fb,
                    &b,
                    if scale_d { c } else { 0.0 },
                ));
            }
        }
    }
    d
}

/// Outputs of the gate row (`tiles`, `scale_d`) that differ when the probe
/// runs on `bent` operands with `bent_scale_d` instead.
fn caught(
    inst: Instruction,
    pair: usize,
    tiles: &Tiles,
    scale_d: bool,
    bent: &Tiles,
    bent_scale_d: bool,
) -> usize {
    let model = Model { instruction: inst };
    let (fa, fb) = PAIRS[pair];
    let d = model_d(&model, pair, bent, bent_scale_d);
    judge(&model, fa, fb, tiles, scale_d, &d).mismatches
}

/// The gate's random row of `class` (its seed, fewer tiles).
fn gate_row(inst: Instruction, pair: usize, class: Class, scale_d: bool) -> Tiles {
    let ci = Class::ALL.iter().position(|&c| c == class).unwrap();
    let (fa, fb) = PAIRS[pair];
    CaseSpec {
        instruction: inst,
        fa,
        fb,
        class,
        scale_d,
        seed: 0x7C00_0000 + (pair as u64) * 16 + ci as u64 + if scale_d { 0 } else { 8 },
        tiles: GATE_TILES.min(8),
    }
    .generate()
}

/// b-fragment-k-slip: B's k 16..31 read as k 0..15. Every random row of
/// mma.sync fails (the uniform class of every pair, measured here).
#[test]
fn b_fragment_k_slip_changes_the_mma_sync_rows() {
    for pair in 0..4 {
        let t = gate_row(Instruction::MmaSync, pair, Class::Uniform, true);
        let mut bent = t.clone();
        for col in bent.bt.chunks_mut(32) {
            let (lo, hi) = col.split_at_mut(16);
            hi.copy_from_slice(lo);
        }
        let n = caught(Instruction::MmaSync, pair, &t, true, &bent, true);
        assert!(n > 0, "pair {pair}: no output differs");
    }
}

/// scale-d-ignored: c added though the accumulator input is disabled. The
/// gate's no-accumulator rows of the uniform-c class (c not zero) fail.
#[test]
fn scale_d_ignored_changes_the_no_accumulator_rows() {
    for pair in 0..4 {
        let t = gate_row(Instruction::Wgmma, pair, Class::UniformC, false);
        let n = caught(Instruction::Wgmma, pair, &t, false, &t, true);
        assert!(n > 0, "pair {pair}: no output differs");
    }
}

/// subnormal-c-flushed: the targeted vectors have a subnormal accumulator;
/// flushing it changes the answer of at least one of them for every pair.
#[test]
fn subnormal_c_flushed_changes_the_targeted_rows() {
    for (pair, &(fa, fb)) in PAIRS.iter().enumerate() {
        let (t, _) = targeted(fa, fb);
        let mut bent = t.clone();
        for c in &mut bent.c {
            if c.is_subnormal() {
                *c = if c.is_sign_negative() { -0.0 } else { 0.0 };
            }
        }
        assert_ne!(bent.c, t.c, "pair {pair}: no subnormal accumulator");
        let n = caught(Instruction::MmaSync, pair, &t, true, &bent, true);
        assert!(n > 0, "pair {pair}: no output differs");
    }
}

/// subnormal-c-flushed is in the fuzzer's reach too: every one-tile
/// mma.sync case of the sparse class that the fuzz target draws
/// (`CaseSpec::from_bytes`, byte 0 = the class, byte 1 = the instruction
/// and pair; 1 input in 16) has outputs whose only term is a subnormal
/// accumulator, so flushing them changes the answer, for 64 seeds of each
/// format pair.
#[test]
fn subnormal_c_flushed_is_reached_by_the_fuzzers_sparse_class() {
    let sparse = Class::ALL.iter().position(|&c| c == Class::Sparse).unwrap() as u8;
    for pair in 0..4u8 {
        for seed in 0..64u8 {
            let spec = CaseSpec::from_bytes(&[sparse, 4 | pair, 0, seed, 0x5A]);
            assert_eq!(
                (spec.instruction, spec.class, spec.tiles),
                (Instruction::MmaSync, Class::Sparse, 1)
            );
            let t = spec.generate();
            let mut bent = t.clone();
            for c in &mut bent.c {
                if c.is_subnormal() {
                    *c = if c.is_sign_negative() { -0.0 } else { 0.0 };
                }
            }
            let n = caught(
                Instruction::MmaSync,
                usize::from(pair),
                &t,
                true,
                &bent,
                true,
            );
            assert!(n > 0, "pair {pair} seed {seed}: no output differs");
        }
    }
}

/// On the device, each planted bug fails the gate, and the gate's rows
/// the CPU tests above name fail: the mma.sync uniform row
/// (b-fragment-k-slip), the wgmma uniform-c row without the accumulator
/// (scale-d-ignored), the mma.sync targeted vectors
/// (subnormal-c-flushed), for the first format pair.
#[test]
#[ignore = "needs a CUDA GPU (sm_90: H100, H200)"]
fn every_mutant_is_caught_by_the_gate() {
    use device::cuda::TensorCoreEngine;
    use kernel_oracle::tensor_core::{gate, mutants::by_name, run};
    let engine = |name: &str| {
        let text = apply(by_name(name).unwrap(), BUILTIN_TENSOR_CORE_CU).unwrap();
        let src = KernelSource::from_file(&write_mutant(name, &text)).unwrap();
        let mut e = TensorCoreEngine::with_source(0, src).unwrap();
        e.set_guards(true);
        e
    };
    for m in &MUTANTS {
        println!("mutant {}: {}", m.name, m.what);
        assert!(
            gate(&engine(m.name)) > 0,
            "mutant {} passed the gate",
            m.name
        );
    }
    let (fa, fb) = PAIRS[0];
    let rows = [
        (
            "b-fragment-k-slip",
            Instruction::MmaSync,
            gate_row(Instruction::MmaSync, 0, Class::Uniform, true),
            true,
        ),
        (
            "scale-d-ignored",
            Instruction::Wgmma,
            gate_row(Instruction::Wgmma, 0, Class::UniformC, false),
            false,
        ),
        (
            "subnormal-c-flushed",
            Instruction::MmaSync,
            targeted(fa, fb).0,
            true,
        ),
    ];
    for (name, inst, tiles, scale_d) in rows {
        let v = run(&engine(name), inst, fa, fb, &tiles, scale_d).unwrap();
        assert!(v.mismatches > 0, "{name}: its row passes on the device");
    }
}
