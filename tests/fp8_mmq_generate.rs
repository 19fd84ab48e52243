//! The fuzz generator spends its cases on the kernel: short and exhausted
//! inputs (most of what libFuzzer tries) must not switch edge knobs on.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::fp8_mmq::generate::bounds;
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

/// Every path selector of the arm, the knobs and the sizes comes from the
/// first four bytes (see `CaseSpec`'s `Arbitrary`; the fifth forces a
/// variant, tested below), each at its designed rate over all 2^16 values
/// of two of them (the others zero, nothing after them): every arm 1/4;
/// `every_code`, `zero_blocks` and `act_exp` 1/4 each; `nan_codes` 1/16
/// with each count 1 to 4 a quarter of those; each `zero_blocks` period 1
/// to 4 a quarter of its cases; in_f, out_f and m each 1 at 1/4 or more,
/// and m = 1 with a k tail together.
#[test]
fn every_knob_is_reached_at_its_designed_rate_from_four_bytes() {
    use kernel_oracle::fp8_mmq::generate::SELECTOR_BYTES;
    use kernel_oracle::fp8_mmq::Arm;
    assert_eq!(SELECTOR_BYTES, 5);
    let pairs = |i: usize, j: usize| {
        (0..=u16::MAX).map(move |x| {
            let mut b = [0u8; 4];
            b[i] = x as u8;
            b[j] = (x >> 8) as u8;
            draw(&b)
        })
    };
    let (mut arm, mut every, mut zero, mut act) = ([0u32; 4], 0u32, 0u32, 0u32);
    for s in pairs(0, 1) {
        arm[Arm::ALL.iter().position(|&a| a == s.arm).unwrap()] += 1;
        every += u32::from(s.knobs.every_code);
        zero += u32::from(s.knobs.zero_blocks > 0);
        act += u32::from(s.knobs.act_exp != 0);
        assert_eq!(s.knobs.nan_codes, 0);
    }
    assert_eq!(arm, [16384; 4]);
    assert_eq!((every, zero), (16384, 16384));
    // The exponent itself comes after the selectors: an exhausted input
    // gives -100, never 0.
    assert_eq!(act, 16384);
    let (mut nan, mut count, mut period) = (0u32, [0u32; 4], [0u32; 4]);
    for s in pairs(1, 2) {
        if s.knobs.nan_codes > 0 {
            nan += 1;
            count[usize::from(s.knobs.nan_codes - 1)] += 1;
        }
        if s.knobs.zero_blocks > 0 {
            period[usize::from(s.knobs.zero_blocks - 1)] += 1;
        }
    }
    assert_eq!(nan, 4096);
    assert_eq!(count, [1024; 4]);
    assert_eq!(period, [4096; 4]);
    let (mut in1, mut out1, mut m1, mut tail_m1) = (0u32, 0u32, 0u32, 0u32);
    for s in pairs(3, 0) {
        in1 += u32::from(s.in_f == 1);
        out1 += u32::from(s.out_f == 1);
        m1 += u32::from(s.m == 1);
        tail_m1 += u32::from(s.m == 1 && s.in_f % 128 != 0);
    }
    assert!(
        in1 >= 16384 && out1 >= 16384 && m1 >= 16384,
        "{in1} {out1} {m1}"
    );
    assert!(tail_m1 >= 16384 / 4 * 3, "{tail_m1}");
    // The wide class (m's "anything", byte 3 bits 4-5 both set, with
    // byte 1's bits 6-7 both set: 1/16) reaches past a 192-token tile, in_f
    // and out_f capped; every other case keeps m small.
    let (mut wide, mut second_tile) = (0u32, 0u32);
    for x in 0..=u16::MAX {
        let (b1, b3) = (x as u8, (x >> 8) as u8);
        let l = (x.wrapping_mul(40503) >> 5) as u8;
        let s = draw(&[0, b1, 0, b3, 0, l, !l, l ^ 0x55, l, !l, l ^ 0x33]);
        if (b3 >> 4) & 3 == 3 && b1 >> 6 == 3 {
            wide += 1;
            second_tile += u32::from(s.m > 192);
            assert!(s.in_f <= bounds::MAX_IN_F_WIDE_M && s.out_f <= bounds::MAX_OUT_F_WIDE_M);
            assert!(s.m <= bounds::MAX_M_WIDE);
        } else {
            assert!(s.m <= bounds::MAX_M, "{s:?}");
        }
    }
    assert_eq!(wide, 4096);
    assert!(second_tile >= wide / 16, "{second_tile}");
    // From the selectors alone (nothing after them, as libFuzzer's first
    // inputs), the wide class gives the largest m.
    let short = (0..=u16::MAX)
        .filter(|&x| draw(&[0, x as u8, 0, (x >> 8) as u8, 0]).m == bounds::MAX_M_WIDE)
        .count();
    assert_eq!(short, 4096);
    // An empty input is a valid EXACT case with no knob on.
    let s = draw(&[]);
    assert_eq!((s.arm, s.in_f, s.out_f, s.m), (Arm::Exact, 1, 1, 1));
}

/// The fuzzer's stats line prints what the generator drew, each with its
/// share: over all 2^16 values of bytes 1 and 2 (what `check` counts for
/// each case), `nan_codes` at 1/16 and `every_code` at 1/4; with byte 4
/// the low byte again, a forced variant at 1/2.
#[test]
fn the_stats_line_prints_each_knobs_share() {
    use kernel_oracle::fp8_mmq::{count_drawn, stats_line, STATS};
    for x in 0..=u16::MAX {
        kernel_oracle::stats::count(&STATS.cases);
        count_drawn(&draw(&[0, x as u8, (x >> 8) as u8, 0, x as u8]));
    }
    let line = stats_line();
    for want in [
        "65536 cases",
        "EXACT 65536 (100.0%)",
        "every_code 16384 (25.0%)",
        "zero_blocks 16384 (25.0%)",
        "act_exp 16384 (25.0%)",
        "nan_codes 4096 (6.2%)",
        "variant forced 32768 (50.0%)",
        "m = 1 65536 (100.0%)",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
}

/// The raw-operand cases of the fast path's fuzzer (`RawCase`): byte 0
/// selects the data's classes, one bit each, so over its 256 values every
/// one of the eight combinations of NaN codes, wild scales and wild
/// activations is drawn 32 times, from inputs of one byte.
#[test]
fn every_raw_data_class_is_reached_from_the_first_byte() {
    use kernel_oracle::fp8_mmq::fast::RawCase;
    let mut combos = [0u32; 8];
    for b in 0..=u8::MAX {
        let c = RawCase::arbitrary(&mut Unstructured::new(&[b])).unwrap();
        combos[usize::from(c.nan_codes)
            | usize::from(c.wild_scales) << 1
            | usize::from(c.wild_x) << 2] += 1;
    }
    assert_eq!(combos, [32; 8]);
}

/// The fifth selector byte forces an MMQ variant in half of its values
/// (bit 7), and each of n exported variants (`plan[12]`, any n from 1 to
/// the shim's 64) is forced in `floor(128 / n)` or `ceil(128 / n)` of the
/// 256 values (bits 0-6 taken modulo n): a variant added to the kernel
/// source is fuzzed forced without a change to the generator.
#[test]
fn a_forced_variant_is_drawn_from_the_fifth_byte_for_every_variant_count() {
    use kernel_oracle::fp8_mmq::resolve_variant;
    let drawn: Vec<Option<u8>> = (0..=u8::MAX)
        .map(|b| draw(&[0, 0, 0, 0, b]).knobs.variant)
        .collect();
    assert_eq!(drawn.iter().filter(|v| v.is_some()).count(), 128);
    for n in 1..=64u32 {
        let mut per = vec![0u32; n as usize];
        for &v in &drawn {
            if let Some(r) = resolve_variant(v, n) {
                per[r as usize] += 1;
            }
        }
        assert_eq!(per.iter().sum::<u32>(), 128, "n = {n}");
        let (lo, hi) = (128 / n, 128_u32.div_ceil(n));
        assert!(per.iter().all(|&c| c == lo || c == hi), "n = {n}: {per:?}");
    }
    // The plan's pick when nothing is forced or nothing is exported.
    assert_eq!(resolve_variant(None, 15), None);
    assert_eq!(resolve_variant(Some(3), 0), None);
    assert_eq!(resolve_variant(Some(17), 15), Some(2));
}

/// From random inputs of 5 to 12 bytes, about half the cases force a
/// variant.
#[test]
fn short_inputs_force_a_variant_in_half_the_cases() {
    let mut rng = Rng(0x7A7A);
    let (mut n, mut forced) = (0u32, 0u32);
    for len in 5..=12 {
        for _ in 0..500 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.u8()).collect();
            forced += u32::from(draw(&bytes).knobs.variant.is_some());
            n += 1;
        }
    }
    let share = f64::from(forced) / f64::from(n);
    assert!((0.45..0.55).contains(&share), "forced share {share:.3}");
}
