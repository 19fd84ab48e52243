//! The tensor-core probe's generator and judge on the CPU, and (ignored
//! without a device) the gate on the GPU.

use kernel_oracle::tensor_core::{judge, targeted, CaseSpec, Class, Tiles, PAIRS};
use oracle::tensor_core::{mma_k32, Fp8Kind, Instruction, Model, SM90_MMA_SYNC, SM90_WGMMA};

/// The model's own outputs for `tiles`: what a correct kernel writes.
fn model_out(model: &Model, fa: Fp8Kind, fb: Fp8Kind, t: &Tiles) -> Vec<f32> {
    let mut d = vec![0.0; t.count() * 512];
    for tile in 0..t.count() {
        for i in 0..64 {
            for j in 0..8 {
                let (a, b, c) = t.vector(tile, i, j);
                d[(tile * 64 + i) * 8 + j] = mma_k32(model, fa, &a, fb, &b, c);
            }
        }
    }
    d
}

#[test]
fn every_knob_is_reached_at_its_designed_rate_from_three_bytes() {
    // All 2^16 values of the two leading bytes (what libFuzzer's shortest
    // inputs vary first), the third byte fixed: every class 1/8, every
    // pair 1/4, mma.sync 1/2, the accumulator disabled 1/4.
    let (mut class, mut pair, mut mma, mut no_acc) = ([0u32; 8], [0u32; 4], 0u32, 0u32);
    for x in 0..=u16::MAX {
        let s = CaseSpec::from_bytes(&[x as u8, (x >> 8) as u8, 0]);
        class[Class::ALL.iter().position(|&c| c == s.class).unwrap()] += 1;
        pair[PAIRS.iter().position(|&p| p == (s.fa, s.fb)).unwrap()] += 1;
        mma += u32::from(s.instruction == Instruction::MmaSync);
        no_acc += u32::from(!s.scale_d);
        assert_eq!(s.tiles, 1);
    }
    assert_eq!(class, [8192; 8]);
    assert_eq!(pair, [16384; 4]);
    assert_eq!(mma, 32768);
    assert_eq!(no_acc, 16384);
    // An empty input is a valid case too.
    let s = CaseSpec::from_bytes(&[]);
    assert_eq!((s.class, s.tiles, s.scale_d), (Class::Uniform, 1, true));
}

#[test]
fn a_correct_kernel_passes_and_one_flipped_bit_fails_with_its_vector() {
    for model in [SM90_WGMMA, SM90_MMA_SYNC] {
        for (fa, fb) in PAIRS {
            for class in Class::ALL {
                let spec = CaseSpec {
                    instruction: model.instruction,
                    fa,
                    fb,
                    class,
                    scale_d: true,
                    seed: 7,
                    tiles: 2,
                };
                let t = spec.generate();
                let mut d = model_out(&model, fa, fb, &t);
                let v = judge(&model, fa, fb, &t, true, &d);
                assert_eq!((v.outputs, v.mismatches), (1024, 0), "{spec:?}");
                d[777] = f32::from_bits(d[777].to_bits() ^ 1);
                let v = judge(&model, fa, fb, &t, true, &d);
                assert_eq!(v.mismatches, 1);
                let first = v.first.unwrap();
                assert_eq!(first.at, (1, 33, 1));
                let report = first.report(fa, fb, &model);
                assert!(report.contains("assert_eq!(d.to_bits()"), "{report}");
            }
        }
    }
}

#[test]
fn the_wgmma_and_mma_sync_models_differ_on_the_gate_data() {
    // The random arm tells the two instructions apart (each class but the
    // exact-ish ones), so a probe wired to the wrong instruction fails.
    let spec = CaseSpec {
        instruction: Instruction::Wgmma,
        fa: Fp8Kind::E4m3,
        fb: Fp8Kind::E4m3,
        class: Class::Uniform,
        scale_d: true,
        seed: 1,
        tiles: 4,
    };
    let t = spec.generate();
    let d = model_out(&SM90_MMA_SYNC, spec.fa, spec.fb, &t);
    assert!(judge(&SM90_WGMMA, spec.fa, spec.fb, &t, true, &d).mismatches > 100);
}

#[test]
fn targeted_vectors_cover_every_rule_for_every_pair() {
    for (fa, fb) in PAIRS {
        let (t, rules) = targeted(fa, fb);
        assert_eq!(t.count(), rules.len().div_ceil(8));
        for r in [
            "TC-ALIGN",
            "TC-NORM",
            "TC-ZERO",
            "TC-NAN",
            "TC-INF",
            "TC-PRODUCT",
        ] {
            assert!(
                rules.iter().any(|x| x.starts_with(r)),
                "{r} missing for {fa:?} x {fb:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device (sm_90a for wgmma)"]
fn gate_on_the_device() {
    let engine = kernel_oracle::tensor_core::engine().expect("a CUDA device");
    assert_eq!(kernel_oracle::tensor_core::gate(engine), 0);
}
