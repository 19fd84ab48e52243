//! The MoE tables fuzz generator reaches every path from its leading
//! bytes, at the designed rates, and the fuzzer's stats line prints them.
//! (No test here runs `check`, whose counters the stats test reads.)

use kernel_oracle::moe_tables::CaseSpec;

/// Every path selector comes from the first five bytes (see `CaseSpec`'s
/// `Arbitrary`), at its designed rate over all 2^16 values of two of them
/// (the others zero, nothing after them): bad ids 1/4, macro planes 1/2,
/// special weights 1/2, one CTA 1/2, each layer 1/4, n_expert 1 / 256 / 1024 1/4 each
/// (bytes 0 and 1), each bad-id period 1 to 16 1/16 of the bad-id cases,
/// n_pairs 0, 1, 8, 256, 257 1/8 each (bytes 0 and 1), and each slab's
/// stride and base classes 1/8 each (zero stride 1/4; bytes 2 to 4).
#[test]
fn every_knob_is_reached_at_its_designed_rate_from_five_bytes() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::moe_tables::generate::SELECTOR_BYTES;
    use kernel_oracle::moe_tables::WeightMix;
    assert_eq!(SELECTOR_BYTES, 5);
    let draw = |b: [u8; 5]| CaseSpec::arbitrary(&mut Unstructured::new(&b)).unwrap();
    let (mut bad, mut macros, mut special, mut layer) = (0u32, 0u32, 0u32, [0u32; 4]);
    let mut one_cta = 0u32;
    let (mut experts, mut pairs, mut period) = ([0u32; 3], [0u32; 5], [0u32; 16]);
    for x in 0..=u16::MAX {
        let s = draw([x as u8, (x >> 8) as u8, 0, 0, 0]);
        if s.bad_ids > 0 {
            bad += 1;
            period[usize::from(s.bad_ids - 1)] += 1;
        }
        macros += u32::from(s.macros);
        special += u32::from(s.weights == WeightMix::Special);
        one_cta += u32::from(s.one_cta);
        layer[s.layer as usize] += 1;
        if let Some(i) = [1, 256, 1024].iter().position(|&e| e == s.n_expert) {
            experts[i] += 1;
        }
        if let Some(i) = [0, 1, 8, 256, 257].iter().position(|&p| p == s.n_pairs) {
            pairs[i] += 1;
        }
    }
    assert_eq!(
        (bad, macros, special, one_cta),
        (16384, 32768, 32768, 32768)
    );
    assert_eq!(layer, [16384; 4]);
    assert_eq!(period, [1024; 16]);
    // The "anything" class reads exhausted bytes: 1 expert, 0 pairs.
    assert_eq!(experts, [32768, 16384, 16384]);
    assert_eq!(pairs, [4 * 8192, 8192, 8192, 8192, 8192]);
    for slab in 0..3 {
        let (mut zero_stride, mut top_base) = (0u32, 0u32);
        for x in 0..=u8::MAX {
            let mut b = [0u8; 5];
            b[2 + slab] = x;
            let s = draw(b);
            zero_stride += u32::from(s.slabs[slab].stride == 0);
            top_base += u32::from(s.slabs[slab].base > u64::MAX - (1 << 44));
        }
        // Stride classes 6 and 7, and 0 and 5 on an exhausted input.
        assert_eq!(zero_stride, 4 * 32, "slab {slab}");
        // Base classes 6 and 7.
        assert_eq!(top_base, 2 * 32, "slab {slab}");
    }
}

/// The fuzzer's stats line prints what the generator drew, each with its
/// share: over all 2^16 values of bytes 0 and 1, bad ids at 1/4, macro
/// planes and special weights at 1/2.
#[test]
fn the_stats_line_prints_each_knobs_share() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::moe_tables::{count_drawn, stats_line, STATS};
    for x in 0..=u16::MAX {
        kernel_oracle::stats::count(&STATS.cases);
        let b = [x as u8, (x >> 8) as u8, 0, 0, 0];
        count_drawn(&CaseSpec::arbitrary(&mut Unstructured::new(&b)).unwrap());
    }
    let line = stats_line();
    for want in [
        "65536 cases",
        "bad ids 16384 (25.0%)",
        "macro planes 32768 (50.0%)",
        "special weights 32768 (50.0%)",
        "one CTA 32768 (50.0%)",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
}
