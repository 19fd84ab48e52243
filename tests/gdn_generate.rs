//! The GDN fuzz generator reaches every path from its leading bytes, at
//! the designed rates, and the fuzzer's stats line prints them. (No test
//! here runs `check`, whose counters the stats test reads.)

use kernel_oracle::gdn::generate::config;
use kernel_oracle::gdn::CaseSpec;

/// Every path selector comes from the first five bytes (see `CaseSpec`'s
/// `Arbitrary`), at its designed rate over all 2^16 values of two of them
/// (the others zero, no seed bytes): graph 1/4, specials 1/2, a zero q/k
/// head 3/4, alpha spreads 1/2, 1/4, 1/4 (bytes 0 and 1); states near
/// overflow 2/5 and eps = 0 1/8 (to within a byte's `% 5`); num_k 1/4
/// each, d_conv 6/16, 5/16, 5/16, and every t from 1 to 16 (t = 1: 9/32,
/// t = 2 and t = 16: 5/32, every other 1/32; bytes 2 and 3); and over all
/// 256 values of byte 4 (the others zero), a negative state 1/4, drawn
/// apart from every other selector (bytes 0-3 decode the same).
#[test]
fn every_knob_is_reached_at_its_designed_rate_from_five_bytes() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::gdn::generate::SELECTOR_BYTES;
    assert_eq!(SELECTOR_BYTES, 5);
    let draw = |b: [u8; 5]| CaseSpec::arbitrary(&mut Unstructured::new(&b)).unwrap();
    let (mut graph, mut specials, mut zero_qk, mut alpha) = (0u32, 0u32, 0u32, [0u32; 3]);
    let (mut big, mut eps0) = (0u32, 0u32);
    for x in 0..=u16::MAX {
        let s = draw([x as u8, (x >> 8) as u8, 0, 0, 0]);
        assert!(!s.negative_state);
        graph += u32::from(s.graph);
        specials += u32::from(s.specials);
        zero_qk += u32::from(s.zero_qk != 0);
        alpha[[2.0, 100.0, 1e4]
            .iter()
            .position(|&a| a == s.alpha_spread)
            .unwrap()] += 1;
        big += u32::from(s.state_spread > 1.0);
        eps0 += u32::from(s.eps == 0.0);
    }
    assert_eq!((graph, specials, zero_qk), (16384, 32768, 49152));
    assert_eq!(alpha, [32768, 16384, 16384]);
    // Byte 1 % 5 in {3, 4}: 102 of 256 values; (byte / 5) % 8 == 3: 31 of
    // 256 (byte / 5 in 3, 11, .., 51, five bytes each but 51 with one).
    assert_eq!((big, eps0), (102 * 256, 31 * 256));
    let (mut num_k, mut d_conv, mut t) = ([0u32; 4], [0u32; 3], [0u32; 16]);
    let mut batch = [0u32; config::MAX_BATCH];
    for x in 0..=u16::MAX {
        let s = draw([0, 0, x as u8, (x >> 8) as u8, 0]);
        assert!(!s.negative_state);
        num_k[s.num_k - 1] += 1;
        d_conv[s.d_conv - 2] += 1;
        t[s.t - 1] += 1;
        batch[s.batch - 1] += 1;
        assert!(s.num_v <= config::MAX_NUM_V && s.num_v % s.num_k == 0);
    }
    assert_eq!(num_k, [16384; 4]);
    assert_eq!(d_conv, [5 * 4096, 5 * 4096, 6 * 4096]);
    let mut want = [2048u32; 16];
    want[0] = 9 * 2048;
    want[1] = 5 * 2048;
    want[config::MAX_T - 1] = 5 * 2048;
    assert_eq!(t, want);
    // Byte 3's bits 5-7: batch 1 for 0-5, 2 for 6, 3 for 7.
    assert_eq!(batch, [6 * 8192, 8192, 8192]);
    // Byte 4's bits 0-1 both set: 64 of 256 values; the other knobs are
    // those of bytes 0-3 all zero, whatever byte 4 holds.
    let base = draw([0; 5]);
    let mut negative = 0u32;
    for b in 0..=u8::MAX {
        let s = draw([0, 0, 0, 0, b]);
        negative += u32::from(s.negative_state);
        assert_eq!(
            CaseSpec {
                negative_state: false,
                ..s
            },
            base,
            "byte 4 = {b}"
        );
    }
    assert_eq!(negative, 64);
    // The empty input is the seed's shape at t = 1, no knob on.
    let s = draw([0; 5]);
    assert_eq!(
        (s.num_k, s.num_v, s.d_conv, s.t, s.graph, s.negative_state),
        (1, 1, 4, 1, false, false)
    );
}

/// The fuzzer's stats line prints what the generator drew, each with its
/// share: over all 2^16 values of bytes 2 and 3 (and byte 4 their low
/// byte), t = 1 at 9/32, t = 16 at 5/32 and a negative state at 1/4.
#[test]
fn the_stats_line_prints_each_knobs_share() {
    use arbitrary::{Arbitrary, Unstructured};
    use kernel_oracle::gdn::{count_drawn, stats_line, STATS};
    for x in 0..=u16::MAX {
        kernel_oracle::stats::count(&STATS.cases);
        let b = [0, 0, x as u8, (x >> 8) as u8, x as u8];
        count_drawn(&CaseSpec::arbitrary(&mut Unstructured::new(&b)).unwrap());
    }
    let line = stats_line();
    for want in [
        "65536 cases",
        "t = 1 18432 (28.1%)",
        "t = 16 10240 (15.6%)",
        "negative state 16384 (25.0%)",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
}
