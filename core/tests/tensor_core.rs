//! The sm_90 FP8 MMA model (`oracle::tensor_core`): recorded H200 answers,
//! and one targeted vector per rule.

use oracle::conventions::Overflow::SatFinite;
use oracle::e4m3::encode_e4m3;
use oracle::e5m2::encode_e5m2;
use oracle::tensor_core::{mma_k32, Fp8Kind, Model, MMA_K, SM90_MMA_SYNC, SM90_WGMMA};

const E4: Fp8Kind = Fp8Kind::E4m3;
const E5: Fp8Kind = Fp8Kind::E5m2;

/// Each record: a[32], b[32] codes, c and the H200's d as f32 bits (LE).
/// Drawn from `wgmma.mma_async m64n8k32` and `mma.sync m16n8k32` runs on an H200 (driver 580,
/// CUDA 13.0) of `cu/tensor_core.cu` over eight input classes (uniform
/// codes, narrow exponent bands, sparse operands, large codes, NaN/inf/-0
/// codes and special accumulators, accumulators far above the products).
fn recorded(model: &Model, fa: Fp8Kind, fb: Fp8Kind, data: &[u8]) {
    assert_eq!(data.len() % 72, 0);
    let mut n = 0;
    for r in data.chunks(72) {
        let a: [u8; 32] = r[0..32].try_into().unwrap();
        let b: [u8; 32] = r[32..64].try_into().unwrap();
        let c = f32::from_bits(u32::from_le_bytes(r[64..68].try_into().unwrap()));
        let d = u32::from_le_bytes(r[68..72].try_into().unwrap());
        let got = mma_k32(model, fa, &a, fb, &b, c).to_bits();
        assert_eq!(
            got, d,
            "record {n}: a {a:02x?} b {b:02x?} c {c:e}: model {got:08x}, H200 {d:08x}"
        );
        n += 1;
    }
    assert_eq!(n, 1024);
}

#[test]
fn h200_records_e4m3_e4m3() {
    recorded(
        &SM90_WGMMA,
        E4,
        E4,
        include_bytes!("data/h200_wgmma_e4m3_e4m3.bin"),
    );
}
#[test]
fn h200_mma_sync_records_e4m3_e4m3() {
    recorded(
        &SM90_MMA_SYNC,
        E4,
        E4,
        include_bytes!("data/h200_mma_sync_e4m3_e4m3.bin"),
    );
}
#[test]
fn h200_records_e4m3_e5m2() {
    recorded(
        &SM90_WGMMA,
        E4,
        E5,
        include_bytes!("data/h200_wgmma_e4m3_e5m2.bin"),
    );
}
#[test]
fn h200_mma_sync_records_e4m3_e5m2() {
    recorded(
        &SM90_MMA_SYNC,
        E4,
        E5,
        include_bytes!("data/h200_mma_sync_e4m3_e5m2.bin"),
    );
}
#[test]
fn h200_records_e5m2_e4m3() {
    recorded(
        &SM90_WGMMA,
        E5,
        E4,
        include_bytes!("data/h200_wgmma_e5m2_e4m3.bin"),
    );
}
#[test]
fn h200_mma_sync_records_e5m2_e4m3() {
    recorded(
        &SM90_MMA_SYNC,
        E5,
        E4,
        include_bytes!("data/h200_mma_sync_e5m2_e4m3.bin"),
    );
}
#[test]
fn h200_records_e5m2_e5m2() {
    recorded(
        &SM90_WGMMA,
        E5,
        E5,
        include_bytes!("data/h200_wgmma_e5m2_e5m2.bin"),
    );
}
#[test]
fn h200_mma_sync_records_e5m2_e5m2() {
    recorded(
        &SM90_MMA_SYNC,
        E5,
        E5,
        include_bytes!("data/h200_mma_sync_e5m2_e5m2.bin"),
    );
}

/// `d` for e4m3 operand pairs given as values (each exactly an e4m3 value).
fn e4(pairs: &[(f32, f32)], c: f32) -> f32 {
    let (mut a, mut b) = ([0u8; MMA_K], [0u8; MMA_K]);
    for (k, &(x, y)) in pairs.iter().enumerate() {
        a[k] = encode_e4m3(x, SatFinite);
        b[k] = encode_e4m3(y, SatFinite);
        assert_eq!(E4.decode(a[k]), x);
        assert_eq!(E4.decode(b[k]), y);
    }
    mma_k32(&SM90_WGMMA, E4, &a, E4, &b, c)
}

#[test]
fn tc_align_uses_the_exponent_sum_not_the_leading_bit() {
    // -13 * 13 = -169 = -2.640625 * 2^6: E = 6, unit 2^-7. 0.875 * 0.1171875
    // = 0.1025390625 = 13.125 units -> 13. Sum -21632 + 13 = -21619 units;
    // TC-NORM keeps 14 of its 15 bits: 21618 -> -168.890625. (Aligned to the
    // leading bit, 2^7, the small product would keep 6 units: -168.90625.)
    assert_eq!(
        e4(&[(-13.0, 13.0), (0.875, 0.1171875)], 0.0),
        -21618.0 / 128.0
    );
}

#[test]
fn tc_align_truncates_toward_zero() {
    // 5184 = 72 * 72 = 1.265625 * 2^12, E = 12, unit 2^-1: -0.00146484375
    // truncates to -0 (toward zero), not to -0.5 (toward -inf).
    assert_eq!(e4(&[(72.0, 72.0), (-0.046875, 0.03125)], 0.0), 5184.0);
    // Same with the signs swapped: symmetric.
    assert_eq!(e4(&[(-72.0, 72.0), (0.046875, 0.03125)], 0.0), -5184.0);
}

#[test]
fn tc_align_ignores_zero_products() {
    // 0 * 448 has exponent sum -6 + 8 but is zero: it does not raise E, so
    // 1 + 2^-9 * 2^-3 keeps its small term (E = 0, unit 2^-13: 2^-12 kept).
    let small = e4(&[(1.0, 1.0), (0.001953125, 0.125)], 0.0);
    assert_eq!(small, 1.0 + 2f32.powi(-12));
    assert_eq!(
        e4(&[(0.0, 448.0), (1.0, 1.0), (0.001953125, 0.125)], 0.0),
        small
    );
}

#[test]
fn tc_align_includes_the_accumulator() {
    // c = 2^20 sets E = 20, unit 2^7: a product of 96 truncates to 0.
    assert_eq!(e4(&[(8.0, 12.0)], 1048576.0), 1048576.0);
    // Without c the product is exact.
    assert_eq!(e4(&[(8.0, 12.0)], 0.0), 96.0);
}

#[test]
fn tc_norm_truncates_the_accumulator_to_14_bits() {
    // No products: d = c truncated toward zero to 14 significant bits.
    let c = 1.0 + 2f32.powi(-13) + 2f32.powi(-20);
    assert_eq!(e4(&[], c), 1.0 + 2f32.powi(-13));
    assert_eq!(e4(&[], -c), -(1.0 + 2f32.powi(-13)));
    assert_eq!(e4(&[], f32::MAX), f32::from_bits(0x7F7F_FC00));
    // A subnormal c: E = -126, unit 2^-139; 2^-149 truncates to +0.
    assert_eq!(e4(&[], f32::from_bits(1)).to_bits(), 0);
}

#[test]
fn tc_norm_after_carries() {
    // 32 * 448 * 448 = 6422528 = 3.0625 * 2^21: carries above 2^E, exact.
    let p = [(448.0, 448.0); 32];
    assert_eq!(e4(&p, 0.0), 6422528.0);
    // 2^14 + 1 (15 bits) truncates to 2^14: sixteen 1024s and one 1.
    let mut q = vec![(32.0, 32.0); 16];
    q.push((1.0, 1.0));
    assert_eq!(e4(&q, 0.0), 16384.0);
}

#[test]
fn tc_zero_is_positive() {
    assert_eq!(e4(&[(-0.0, 1.0)], -0.0).to_bits(), 0);
    assert_eq!(e4(&[(2.0, 3.0), (-2.0, 3.0)], 0.0).to_bits(), 0);
    assert_eq!(e4(&[(2.0, 3.0)], -6.0).to_bits(), 0);
}

#[test]
fn tc_nan_and_inf() {
    let mut a = [0x38u8; MMA_K]; // 1.0 in e4m3
    let b = [0x38u8; MMA_K];
    a[5] = 0x7F;
    assert_eq!(
        mma_k32(&SM90_WGMMA, E4, &a, E4, &b, 0.0).to_bits(),
        0x7FFF_FFFF
    );
    assert_eq!(
        mma_k32(&SM90_WGMMA, E4, &b, E4, &b, f32::NAN).to_bits(),
        0x7FFF_FFFF
    );
    assert_eq!(
        mma_k32(&SM90_WGMMA, E4, &b, E4, &b, f32::INFINITY),
        f32::INFINITY
    );
    assert_eq!(
        mma_k32(&SM90_WGMMA, E4, &b, E4, &b, f32::NEG_INFINITY),
        f32::NEG_INFINITY
    );
    // e5m2 infinities: inf * 1 + c = inf; inf * 0 = NaN; inf - inf = NaN.
    let one5 = encode_e5m2(1.0, SatFinite);
    let mut x = [one5; MMA_K];
    let y = [one5; MMA_K];
    x[0] = 0x7C;
    assert_eq!(mma_k32(&SM90_WGMMA, E5, &x, E5, &y, 1.0), f32::INFINITY);
    assert_eq!(
        mma_k32(&SM90_WGMMA, E5, &x, E5, &y, f32::NEG_INFINITY).to_bits(),
        0x7FFF_FFFF
    );
    let mut z = y;
    z[0] = 0x00;
    assert_eq!(
        mma_k32(&SM90_WGMMA, E5, &x, E5, &z, 1.0).to_bits(),
        0x7FFF_FFFF
    );
    x[1] = 0xFC;
    assert_eq!(
        mma_k32(&SM90_WGMMA, E5, &x, E5, &y, 1.0).to_bits(),
        0x7FFF_FFFF
    );
}

/// `d` of the lowered `mma.sync` for e4m3 operand pairs given as values
/// at positions `k`.
fn mma_sync_e4(pairs: &[(usize, f32, f32)], c: f32) -> f32 {
    let (mut a, mut b) = ([0u8; MMA_K], [0u8; MMA_K]);
    for &(k, x, y) in pairs {
        a[k] = encode_e4m3(x, SatFinite);
        b[k] = encode_e4m3(y, SatFinite);
    }
    mma_k32(&SM90_MMA_SYNC, E4, &a, E4, &b, c)
}

#[test]
fn mma_split_pairs_k_mod_4() {
    // k = 0, 1, 4 (k mod 4 in {0, 1}) share the first HMMA: E = 16 keeps
    // 25 fraction bits (unit 2^-9), so 2^16 + 2^-8 - 2^16 = 2^-8 exactly.
    let tiny = (1, 0.0625, 0.0625); // 2^-8
    assert_eq!(
        mma_sync_e4(&[(0, 256.0, 256.0), tiny, (4, -256.0, 256.0)], 0.0),
        2f32.powi(-8)
    );
    // k = 2 goes to the second HMMA: the first's result 2^16 + 2^-8 is
    // truncated to 24 bits (2^16), and then -2^16 cancels it.
    assert_eq!(
        mma_sync_e4(&[(0, 256.0, 256.0), tiny, (2, -256.0, 256.0)], 0.0),
        0.0
    );
}

#[test]
fn mma_add_rounds_to_nearest_and_canonicalises_nan() {
    // The HMMAs give exactly 1.0; c = 2^-24 + 2^-47 rounds 1 + c up to
    // 1 + 2^-23 (round to nearest in one binary32 addition).
    let c = 2f32.powi(-24) + 2f32.powi(-47);
    assert_eq!(mma_sync_e4(&[(0, 1.0, 1.0)], c), 1.0 + 2f32.powi(-23));
    // Through wgmma the same c is truncated away (TC-ALIGN).
    assert_eq!(e4(&[(1.0, 1.0)], c), 1.0);
    assert_eq!(
        mma_sync_e4(&[(0, 1.0, 1.0)], f32::from_bits(0x7FC0_0001)).to_bits(),
        0x7FFF_FFFF
    );
}

#[test]
fn tc_align_subnormal_c_at_minus_126() {
    // No products: E = -126, unit 2^-139. 0x007FFFFF keeps its 14 leading
    // bits (0x007FFC00); aligned at -127 it would keep 0x007FFE00.
    assert_eq!(e4(&[], f32::from_bits(0x007F_FFFF)).to_bits(), 0x007F_FC00);
    assert_eq!(e4(&[], f32::from_bits(0x807F_FFFF)).to_bits(), 0x807F_FC00);
    // The smallest negative subnormal truncates to zero, and zero is +0.
    assert_eq!(e4(&[], f32::from_bits(0x8000_0001)).to_bits(), 0);
}

#[test]
fn tc_zero_when_every_term_is_negative_zero() {
    // IEEE addition of -0 terms gives -0; TC-ZERO gives +0.
    assert_eq!(e4(&[(-0.0, 1.0); 32], -0.0).to_bits(), 0);
}

#[test]
fn tc_align_zero_products_of_the_largest_value() {
    // 0 * 448 has exponent sum -6 + 8 = 2 > E = 0: not counted, so 2^-13
    // (2^-9 * 2^-4) stays; counted, the unit would be 2^-11.
    let want = 1.0 + 2f32.powi(-13);
    assert_eq!(
        e4(
            &[
                (0.0, 448.0),
                (448.0, 0.0),
                (1.0, 1.0),
                (2f32.powi(-9), 0.0625)
            ],
            0.0
        ),
        want
    );
    // 13 bits below E: 2^-13 kept, 2^-14 dropped.
    assert_eq!(e4(&[(1.0, 1.0), (2f32.powi(-6), 2f32.powi(-7))], 0.0), want);
    assert_eq!(e4(&[(1.0, 1.0), (2f32.powi(-7), 2f32.powi(-7))], 0.0), 1.0);
}
