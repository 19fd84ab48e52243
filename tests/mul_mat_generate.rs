//! The `mul_mat` fuzz generator spends short inputs (what libFuzzer tries
//! first) on every arm and every dtype.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::mul_mat::{Arm, CaseSpec};
use kernel_oracle::rng::Rng;
use oracle::ggml::Dtype;

#[test]
fn short_inputs_draw_every_arm_and_dtype() {
    let mut rng = Rng(0x3A3A);
    let (mut n, mut random) = (0usize, 0usize);
    let mut dtypes = [0usize; 5];
    for len in 1..=8 {
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            let spec = CaseSpec::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
            n += 1;
            random += usize::from(spec.arm == Arm::Random);
            dtypes[Dtype::ALL.iter().position(|&d| d == spec.dtype).unwrap()] += 1;
        }
    }
    let share = random as f64 / n as f64;
    assert!((share - 0.5).abs() < 0.08, "RANDOM share {share:.3}");
    for (d, &c) in Dtype::ALL.iter().zip(&dtypes) {
        let share = c as f64 / n as f64;
        assert!(share > 0.12, "{d:?} share {share:.3}");
    }
}
