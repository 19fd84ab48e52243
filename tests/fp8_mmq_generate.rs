//! The fuzz generator spends its cases on the kernel: short and exhausted
//! inputs (most of what libFuzzer tries) must not switch edge knobs on.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::fp8_mmq::CaseSpec;
use kernel_oracle::rng::Rng;

fn draw(bytes: &[u8]) -> CaseSpec {
    CaseSpec::arbitrary(&mut Unstructured::new(bytes)).expect("every input makes a case")
}

#[test]
fn an_exhausted_input_switches_no_knob_on() {
    let spec = draw(&[]);
    assert_eq!(spec.knobs, Default::default(), "{spec:?}");
}

/// Over random inputs of every length from 0 to 63 bytes, the refused
/// share (NaN weight codes planted) stays near its designed 1 in 16, and
/// each other knob near 1 in 4: the cases reach the GEMM.
#[test]
fn short_inputs_reach_the_kernel() {
    let mut rng = Rng(0x5EED);
    let (mut n, mut refused, mut every_code) = (0usize, 0usize, 0usize);
    for len in 0..64 {
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            let spec = draw(&bytes);
            n += 1;
            refused += usize::from(spec.knobs.nan_codes > 0);
            every_code += usize::from(spec.knobs.every_code);
        }
    }
    let share = |k: usize| k as f64 / n as f64;
    assert!(share(refused) < 0.08, "refused share {:.3}", share(refused));
    assert!(
        share(every_code) < 0.3,
        "every_code share {:.3}",
        share(every_code)
    );
    assert!(share(refused) > 0.0, "the precondition is never fuzzed");
}

/// Every arm is drawn about equally often from inputs of 1 to 8 bytes (the
/// lengths libFuzzer tries first): a planted bug only one arm can see (a
/// re-associated fold: FOLD; a flushed subnormal decode: CODES) must be
/// reachable from the first second.
#[test]
fn short_inputs_draw_every_arm() {
    use kernel_oracle::fp8_mmq::Arm;
    let mut rng = Rng(0xA2A2);
    let mut count = [0usize; Arm::ALL.len()];
    let mut n = 0;
    for len in 1..=8 {
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            let arm = draw(&bytes).arm;
            count[Arm::ALL.iter().position(|&a| a == arm).unwrap()] += 1;
            n += 1;
        }
    }
    assert_eq!(Arm::ALL.len(), 4);
    for (arm, &c) in Arm::ALL.iter().zip(&count) {
        let share = c as f64 / n as f64;
        assert!(
            share > 0.8 / Arm::ALL.len() as f64,
            "{} share {share:.3} from short inputs",
            arm.name()
        );
    }
}
