//! The ggml block formats and their GEMM, rule by rule.
//!
//! Blocks are built by hand from the layouts in each module's doc (the
//! packers below are the inverse of ggml's unpacking, written from the
//! layout tables), and expected values are computed independently in f64.
// Element indices are the subject here (which code lands at which
// position), so the loops index by position on purpose.
#![allow(clippy::needless_range_loop)]

use oracle::f16::encode_f16;
use oracle::ggml::mul_mat::mul_mat;
use oracle::ggml::q4_0::dequantize_q4_0;
use oracle::ggml::q4_k::{dequantize_q4_k, scale_min};
use oracle::ggml::q6_k::dequantize_q6_k;
use oracle::ggml::q8_0::dequantize_q8_0;
use oracle::ggml::{dequantize, Dtype, GgmlError};

// ---- packers -------------------------------------------------------------

/// One Q4_0 block: f16 `d` bits, 32 codes in 0..16.
fn q4_0_block(d: u16, codes: &[u8; 32]) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..2].copy_from_slice(&d.to_le_bytes());
    for j in 0..16 {
        b[2 + j] = codes[j] | (codes[j + 16] << 4);
    }
    b
}

/// One Q8_0 block: f16 `d` bits, 32 signed codes.
fn q8_0_block(d: u16, codes: &[i8; 32]) -> [u8; 34] {
    let mut b = [0u8; 34];
    b[0..2].copy_from_slice(&d.to_le_bytes());
    for j in 0..32 {
        b[2 + j] = codes[j] as u8;
    }
    b
}

/// One Q4_K block: f16 `d`, `dmin`, eight 6-bit scales and mins, 256 codes in 0..16.
fn q4_k_block(d: u16, dmin: u16, sc: &[u8; 8], mn: &[u8; 8], codes: &[u8]) -> Vec<u8> {
    assert_eq!(codes.len(), 256);
    let mut b = vec![0u8; 144];
    b[0..2].copy_from_slice(&d.to_le_bytes());
    b[2..4].copy_from_slice(&dmin.to_le_bytes());
    let s = &mut b[4..16];
    for j in 0..4 {
        s[j] = (sc[j] & 0x3F) | ((sc[j + 4] >> 4) << 6);
        s[j + 4] = (mn[j] & 0x3F) | ((mn[j + 4] >> 4) << 6);
        s[j + 8] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    for c in 0..4 {
        for l in 0..32 {
            b[16 + 32 * c + l] = codes[64 * c + l] | (codes[64 * c + 32 + l] << 4);
        }
    }
    b
}

/// One Q6_K block: f16 `d`, sixteen i8 scales, 256 unsigned 6-bit codes
/// (the stored value, before the -32).
fn q6_k_block(d: u16, sc: &[i8; 16], codes: &[u8]) -> Vec<u8> {
    assert_eq!(codes.len(), 256);
    let mut b = vec![0u8; 210];
    for h in 0..2 {
        let c = &codes[128 * h..128 * h + 128];
        for l in 0..32 {
            b[64 * h + l] = (c[l] & 0xF) | ((c[l + 64] & 0xF) << 4);
            b[64 * h + l + 32] = (c[l + 32] & 0xF) | ((c[l + 96] & 0xF) << 4);
            b[128 + 32 * h + l] = (c[l] >> 4)
                | ((c[l + 32] >> 4) << 2)
                | ((c[l + 64] >> 4) << 4)
                | ((c[l + 96] >> 4) << 6);
        }
    }
    for (i, s) in sc.iter().enumerate() {
        b[192 + i] = *s as u8;
    }
    b[208..210].copy_from_slice(&d.to_le_bytes());
    b
}

fn h(x: f32) -> u16 {
    let b = encode_f16(x);
    assert_eq!(oracle::f16::decode_f16(b), x, "{x} is not an f16");
    b
}

/// Deterministic bytes (LCG), identical on every host.
fn lcg(seed: u32, len: usize) -> Vec<u8> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 16) as u8
        })
        .collect()
}

// ---- sizes ---------------------------------------------------------------

#[test]
fn dtype_block_sizes_match_ggml_common() {
    let sizes: Vec<_> = Dtype::ALL
        .iter()
        .map(|d| (d.name(), d.block_elems(), d.block_bytes()))
        .collect();
    assert_eq!(
        sizes,
        [
            ("f32", 1, 4),
            ("q4_0", 32, 18),
            ("q8_0", 32, 34),
            ("q4_K", 256, 144),
            ("q6_K", 256, 210),
        ]
    );
    // The seed's src0_bytes: e / 32 * 18, e / 32 * 34, e / 256 * 144, e / 256 * 210.
    assert_eq!(Dtype::Q4_0.row_bytes(1024), Ok(1024 / 32 * 18));
    assert_eq!(Dtype::Q6K.row_bytes(4608), Ok(4608 / 256 * 210));
    assert_eq!(
        Dtype::Q4K.row_bytes(128),
        Err(GgmlError::RowNotBlocks {
            dtype: Dtype::Q4K,
            k: 128
        })
    );
}

// ---- Q4_0 ----------------------------------------------------------------

#[test]
fn q4_0_is_code_minus_8_times_d_low_nibbles_first() {
    let mut codes = [0u8; 32];
    for (i, c) in codes.iter_mut().enumerate() {
        *c = (i % 16) as u8 ^ ((i / 16) as u8 * 0x5);
    }
    let blk = q4_0_block(h(0.5), &codes);
    let mut out = [0f32; 32];
    dequantize_q4_0(&blk, &mut out).unwrap();
    for i in 0..32 {
        assert_eq!(
            out[i],
            ((codes[i] as f64 - 8.0) * 0.5) as f32,
            "element {i}"
        );
    }
    // Byte 2 + j: element j low, element j + 16 high.
    let mut raw = [0u8; 18];
    raw[0..2].copy_from_slice(&h(1.0).to_le_bytes());
    raw[2] = 0xF0; // element 0: 0 - 8, element 16: 15 - 8
    dequantize_q4_0(&raw, &mut out).unwrap();
    assert_eq!((out[0], out[16], out[1]), (-8.0, 7.0, -8.0));
}

#[test]
fn q4_0_negative_scale_keeps_sign() {
    let mut codes = [0u8; 32];
    for (i, c) in codes.iter_mut().enumerate() {
        *c = (i % 16) as u8;
    }
    let blk = q4_0_block(h(-0.25), &codes);
    let mut out = [0f32; 32];
    dequantize_q4_0(&blk, &mut out).unwrap();
    assert_eq!(out[0], 2.0); // (0 - 8) * -0.25
    assert_eq!(out[15], -1.75); // (15 - 8) * -0.25
                                // Q4_0-ZERO: code 8 with a negative scale is -0.0.
    assert_eq!(out[8].to_bits(), 0x8000_0000);
    // And +0.0 with a positive one.
    let blk = q4_0_block(h(0.25), &codes);
    dequantize_q4_0(&blk, &mut out).unwrap();
    assert_eq!(out[8].to_bits(), 0x0000_0000);
}

#[test]
fn q4_0_infinite_scale_gives_nan_at_code_8_and_signed_inf_elsewhere() {
    let mut codes = [0u8; 32];
    for (i, c) in codes.iter_mut().enumerate() {
        *c = (i % 16) as u8;
    }
    let mut out = [0f32; 32];
    dequantize_q4_0(&q4_0_block(0xFC00, &codes), &mut out).unwrap(); // -inf
    assert_eq!(out[0], f32::INFINITY); // (0 - 8) * -inf
    assert!(out[8].is_nan()); // 0 * inf
    assert_eq!(out[9], f32::NEG_INFINITY);
    dequantize_q4_0(&q4_0_block(0x7E00, &codes), &mut out).unwrap(); // NaN
    assert!(out.iter().all(|y| y.is_nan()));
}

// ---- Q8_0 ----------------------------------------------------------------

#[test]
fn q8_0_is_signed_code_times_d() {
    let mut codes = [0i8; 32];
    let fill = [-128i8, -127, -1, 0, 1, 2, 64, 127];
    for (i, c) in codes.iter_mut().enumerate() {
        *c = fill[i % 8].wrapping_add((i / 8) as i8);
    }
    let mut out = [0f32; 32];
    dequantize_q8_0(&q8_0_block(h(0.125), &codes), &mut out).unwrap();
    for i in 0..32 {
        assert_eq!(out[i], (codes[i] as f64 * 0.125) as f32, "element {i}");
    }
}

#[test]
fn q8_0_negative_scale_keeps_sign() {
    let mut codes = [0i8; 32];
    codes[0] = -128;
    codes[1] = 127;
    let mut out = [0f32; 32];
    dequantize_q8_0(&q8_0_block(h(-2.0), &codes), &mut out).unwrap();
    assert_eq!((out[0], out[1]), (256.0, -254.0));
    assert_eq!(out[2].to_bits(), 0x8000_0000); // Q8_0-ZERO
}

#[test]
fn q8_0_infinite_scale_gives_nan_at_zero_codes() {
    let mut codes = [0i8; 32];
    codes[0] = -3;
    codes[1] = 3;
    let mut out = [0f32; 32];
    dequantize_q8_0(&q8_0_block(0x7C00, &codes), &mut out).unwrap();
    assert_eq!((out[0], out[1]), (f32::NEG_INFINITY, f32::INFINITY));
    assert!(out[2..].iter().all(|y| y.is_nan()));
}

// ---- Q4_K ----------------------------------------------------------------

/// The twelve scale bytes, unpacked by hand (get_scale_min_k4):
/// j < 4 take bits 0..6 of bytes j and j + 4; j >= 4 take a nibble of byte
/// j + 4 and bits 6..8 of bytes j - 4 (scale) and j (min). The top bits of
/// the scales (3, 2, 1, 0) and of the mins (0, 1, 2, 3) differ, so reading
/// either from the other's bytes fails.
const K4_SCALES: [u8; 12] = [
    0xC1, 0x82, 0x43, 0x04, // scales 0..4 = 1, 2, 3, 4; top bits of scales 4..8 = 3, 2, 1, 0
    0x05, 0x46, 0x87, 0xC8, // mins 0..4 = 5, 6, 7, 8; top bits of mins 4..8 = 0, 1, 2, 3
    0x9A, 0xBC, 0xDE, 0xF1, // low nibble: scale 4 + i, high nibble: min 4 + i
];
const K4_SC: [u8; 8] = [0x01, 0x02, 0x03, 0x04, 0x3A, 0x2C, 0x1E, 0x01];
const K4_MN: [u8; 8] = [0x05, 0x06, 0x07, 0x08, 0x09, 0x1B, 0x2D, 0x3F];

#[test]
fn q4_k_unpacks_scale_and_min_of_all_8_sub_blocks() {
    for j in 0..8 {
        assert_eq!(
            scale_min(j, &K4_SCALES),
            (K4_SC[j], K4_MN[j]),
            "sub-block {j}"
        );
    }
    // Through the contract: codes 1 with dmin = 0 give the scale; codes 0
    // with d = 0 give minus the min; sub-block j is elements 32j..32j+32.
    let mut blk = vec![0u8; 144];
    blk[4..16].copy_from_slice(&K4_SCALES);
    blk[0..2].copy_from_slice(&h(1.0).to_le_bytes());
    blk[16..144].fill(0x11);
    let mut out = [0f32; 256];
    dequantize_q4_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        assert_eq!(out[i], K4_SC[i / 32] as f32, "element {i}");
    }
    blk[0..2].copy_from_slice(&0u16.to_le_bytes());
    blk[2..4].copy_from_slice(&h(1.0).to_le_bytes());
    blk[16..144].fill(0x00);
    dequantize_q4_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        assert_eq!(out[i], -(K4_MN[i / 32] as f32), "element {i}");
    }
}

#[test]
fn q4_k_is_d_times_scale_times_code_minus_dmin_times_min() {
    let codes: Vec<u8> = lcg(7, 256).iter().map(|b| b & 0xF).collect();
    let blk = q4_k_block(h(0.5), h(0.25), &K4_SC, &K4_MN, &codes);
    assert_eq!(&blk[4..16], &K4_SCALES, "packer and hand unpacking agree");
    let mut out = [0f32; 256];
    dequantize_q4_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        let j = i / 32;
        let want = 0.5 * K4_SC[j] as f64 * codes[i] as f64 - 0.25 * K4_MN[j] as f64;
        assert_eq!(out[i], want as f32, "element {i}");
    }
    // Element order: qs[32c + l] low nibble is element 64c + l, high is 64c + 32 + l.
    let mut raw = blk.clone();
    raw[16..144].fill(0);
    raw[16 + 32 * 2 + 5] = 0xF0;
    dequantize_q4_k(&raw, &mut out).unwrap();
    assert_eq!(
        out[64 * 2 + 32 + 5],
        0.5 * K4_SC[5] as f32 * 15.0 - 0.25 * K4_MN[5] as f32
    );
    assert_eq!(out[64 * 2 + 5], -0.25 * K4_MN[4] as f32);
}

#[test]
fn q4_k_negative_scale_keeps_sign() {
    let codes = [3u8; 256];
    let blk = q4_k_block(h(-1.0), h(-0.5), &K4_SC, &K4_MN, &codes);
    let mut out = [0f32; 256];
    dequantize_q4_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        let j = i / 32;
        let want = -(K4_SC[j] as f64) * 3.0 + 0.5 * K4_MN[j] as f64;
        assert_eq!(out[i], want as f32, "element {i}");
    }
}

#[test]
fn q4_k_final_subtraction_is_the_one_rounding() {
    // d * sc * q = 1024 exactly; dmin * m = 2^-16 exactly (f16 subnormal
    // 0x0100). 1024 - 2^-16 lies between 1024 - 2^-14 and 1024, nearer
    // 1024: the result rounds to 1024.0.
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    sc[0] = 1;
    mn[0] = 1;
    let mut codes = [0u8; 256];
    codes[0] = 1;
    let blk = q4_k_block(h(1024.0), 0x0100, &sc, &mn, &codes);
    let mut out = [0f32; 256];
    dequantize_q4_k(&blk, &mut out).unwrap();
    assert_eq!(out[0], 1024.0);
    assert_eq!(out[1], -(2f32.powi(-16))); // 0 * 1024 - 2^-16, exact
}

#[test]
fn q4_k_infinite_dmin_gives_nan_where_min_is_zero_and_neg_inf_elsewhere() {
    let sc = [1u8; 8];
    let mut mn = [1u8; 8];
    mn[3] = 0;
    let codes = [2u8; 256];
    let blk = q4_k_block(h(1.0), 0x7C00, &sc, &mn, &codes);
    let mut out = [0f32; 256];
    dequantize_q4_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        if i / 32 == 3 {
            assert!(out[i].is_nan(), "element {i}: 2 - inf * 0");
        } else {
            assert_eq!(out[i], f32::NEG_INFINITY, "element {i}: 2 - inf");
        }
    }
    // Infinite d with a zero scale: inf * 0 is NaN for every code.
    let mut sc0 = [1u8; 8];
    sc0[0] = 0;
    let blk = q4_k_block(0x7C00, 0, &sc0, &[0u8; 8], &codes);
    dequantize_q4_k(&blk, &mut out).unwrap();
    assert!(out[..32].iter().all(|y| y.is_nan()));
    assert!(out[32..].iter().all(|y| *y == f32::INFINITY));
}

// ---- Q6_K ----------------------------------------------------------------

#[test]
fn q6_k_high_bits_come_from_qh_in_pairs() {
    // ql = 0: codes are high << 4. qh = 0xE4 = 0b11_10_01_00: element l has
    // high bits 0, l + 32 has 1, l + 64 has 2, l + 96 has 3.
    let mut blk = vec![0u8; 210];
    blk[128..192].fill(0xE4);
    blk[192..208].fill(1);
    blk[208..210].copy_from_slice(&h(1.0).to_le_bytes());
    let mut out = [0f32; 256];
    dequantize_q6_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        let want = [-32.0, -16.0, 0.0, 16.0][(i % 128) / 32];
        assert_eq!(out[i], want, "element {i}");
    }
    // Low nibbles: ql[l] low -> l, high -> l + 64; ql[l + 32] low -> l + 32, high -> l + 96.
    blk[0..32].fill(0xA5);
    blk[32..64].fill(0x3C);
    dequantize_q6_k(&blk, &mut out).unwrap();
    assert_eq!(
        (out[0], out[32], out[64], out[96]),
        (5.0 - 32.0, 12.0 - 16.0, 10.0, 3.0 + 16.0)
    );
    assert_eq!(out[128], -32.0, "second half reads ql[64..]");
}

#[test]
fn q6_k_element_e_uses_scale_e_over_16() {
    let codes: Vec<u8> = lcg(11, 256).iter().map(|b| b & 0x3F).collect();
    let mut sc = [0i8; 16];
    for (i, s) in sc.iter_mut().enumerate() {
        *s = [-128i8, 127, -1, 3, 0, -7, 64, 9][i % 8] ^ (i as i8 >> 3);
    }
    let blk = q6_k_block(h(0.5), &sc, &codes);
    let mut out = [0f32; 256];
    dequantize_q6_k(&blk, &mut out).unwrap();
    for i in 0..256 {
        let want = 0.5 * sc[i / 16] as f64 * (codes[i] as f64 - 32.0);
        assert_eq!(out[i], want as f32, "element {i}");
    }
}

#[test]
fn q6_k_negative_scale_keeps_sign() {
    let codes = [40u8; 256]; // q = 8
    let mut sc = [2i8; 16];
    sc[1] = -2;
    let blk = q6_k_block(h(-0.5), &sc, &codes);
    let mut out = [0f32; 256];
    dequantize_q6_k(&blk, &mut out).unwrap();
    assert_eq!((out[0], out[16]), (-8.0, 8.0));
    // A zero code with a negative d and a positive scale: (-0.5 * 2) * 0 = -0.0.
    let blk = q6_k_block(h(-0.5), &[2i8; 16], &[32u8; 256]);
    dequantize_q6_k(&blk, &mut out).unwrap();
    assert_eq!(out[0].to_bits(), 0x8000_0000);
}

#[test]
fn q6_k_infinite_scale_gives_nan_at_zero_scale_or_code() {
    let mut codes = [33u8; 256]; // q = 1
    codes[1] = 32; // q = 0
    let mut sc = [-1i8; 16];
    sc[2] = 0;
    let blk = q6_k_block(0x7C00, &sc, &codes);
    let mut out = [0f32; 256];
    dequantize_q6_k(&blk, &mut out).unwrap();
    assert_eq!(out[0], f32::NEG_INFINITY);
    assert!(out[1].is_nan());
    assert!(out[32..48].iter().all(|y| y.is_nan()));
}

// ---- errors --------------------------------------------------------------

#[test]
fn dequantize_refuses_partial_blocks_and_wrong_out_and_writes_nothing() {
    let mut out = [7.0f32; 32];
    assert_eq!(
        dequantize_q4_0(&[0u8; 17], &mut out),
        Err(GgmlError::PartialBlock {
            dtype: Dtype::Q4_0,
            bytes: 17
        })
    );
    assert_eq!(
        dequantize_q8_0(&[0u8; 34], &mut out[..31]),
        Err(GgmlError::Len {
            arg: "out",
            want: 32,
            got: 31
        })
    );
    let mut big = [7.0f32; 256];
    assert!(dequantize_q4_k(&[0u8; 143], &mut big).is_err());
    assert!(dequantize_q6_k(&[0u8; 420], &mut big).is_err());
    assert!(dequantize(Dtype::F32, &[0u8; 6], &mut big[..1]).is_err());
    assert!(out.iter().chain(&big).all(|y| *y == 7.0));
    assert_eq!(
        GgmlError::PartialBlock {
            dtype: Dtype::Q6K,
            bytes: 211
        }
        .to_string(),
        "q6_K data has 211 bytes, not a whole number of 210-byte blocks"
    );
    assert_eq!(
        GgmlError::RowNotBlocks {
            dtype: Dtype::Q4_0,
            k: 48
        }
        .to_string(),
        "k = 48 is not a multiple of the q4_0 block size (32 elements)"
    );
    assert_eq!(
        GgmlError::Len {
            arg: "dst",
            want: 6,
            got: 5
        }
        .to_string(),
        "dst has length 5, the shape needs 6"
    );
}

#[test]
fn f32_rows_are_read_bit_for_bit() {
    let vals = [
        1.5f32,
        -0.0,
        f32::from_bits(0x7FC0_1234),
        f32::MIN_POSITIVE / 2.0,
    ];
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = [0f32; 4];
    dequantize(Dtype::F32, &bytes, &mut out).unwrap();
    for i in 0..4 {
        assert_eq!(out[i].to_bits(), vals[i].to_bits());
    }
}

// ---- mul_mat -------------------------------------------------------------

/// Runs mul_mat, allocating dst and scratch.
fn run(dtype: Dtype, m: usize, n: usize, k: usize, src0: &[u8], src1: &[f32]) -> Vec<f32> {
    let mut dst = vec![f32::NAN; n * m];
    let mut scratch = vec![0f32; k];
    mul_mat(dtype, m, n, k, src0, src1, &mut dst, &mut scratch).unwrap();
    dst
}

/// The naive f64 GEMM over the dequantized rows.
fn naive(dtype: Dtype, m: usize, n: usize, k: usize, src0: &[u8], src1: &[f32]) -> Vec<f64> {
    let rb = dtype.row_bytes(k).unwrap();
    let mut w = vec![0f32; k];
    let mut dst = vec![0f64; n * m];
    for mi in 0..m {
        dequantize(dtype, &src0[mi * rb..(mi + 1) * rb], &mut w).unwrap();
        for ni in 0..n {
            dst[ni * m + mi] = (0..k)
                .map(|kk| w[kk] as f64 * src1[ni * k + kk] as f64)
                .sum();
        }
    }
    dst
}

#[test]
fn mul_mat_dst_is_column_major_with_stride_m() {
    // src0 = [[1, 2], [3, 4]] (M = 2, K = 2); src1 rows (1, 0), (0, 1), (1, 1).
    let src0: Vec<u8> = [1f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let dst = run(Dtype::F32, 2, 3, 2, &src0, &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_eq!(dst, [1.0, 3.0, 2.0, 4.0, 3.0, 7.0]);
}

/// Small-integer data with power-of-two scales: every product and partial
/// sum is exact in binary32, so the result is bit-exact whatever the order.
fn exact_case(dtype: Dtype, m: usize, n: usize, k: usize, seed: u32) {
    let rb = dtype.row_bytes(k).unwrap();
    let mut src0 = lcg(seed, m * rb);
    let scales = [h(0.5), h(-1.0), h(2.0), h(-0.25)];
    for (b, blk) in src0.chunks_mut(dtype.block_bytes()).enumerate() {
        let d = scales[b % 4].to_le_bytes();
        match dtype {
            Dtype::F32 => {
                let v = (blk[0] % 15) as f32 - 7.0;
                blk.copy_from_slice(&v.to_le_bytes());
            }
            Dtype::Q4_0 | Dtype::Q8_0 => blk[0..2].copy_from_slice(&d),
            Dtype::Q4K => {
                blk[0..2].copy_from_slice(&d);
                blk[2..4].copy_from_slice(&scales[(b + 1) % 4].to_le_bytes());
            }
            Dtype::Q6K => {
                blk[208..210].copy_from_slice(&d);
                for s in &mut blk[192..208] {
                    *s = (*s % 17).wrapping_sub(8); // -8..=8 as i8
                }
            }
        }
    }
    let src1: Vec<f32> = lcg(seed ^ 0xABCD, n * k)
        .iter()
        .map(|b| (b % 7) as f32 - 3.0)
        .collect();
    let got = run(dtype, m, n, k, &src0, &src1);
    let want = naive(dtype, m, n, k, &src0, &src1);
    for i in 0..n * m {
        assert_eq!(
            got[i].to_bits(),
            (want[i] as f32).to_bits(),
            "{} dst[{i}]",
            dtype.name()
        );
        assert_eq!(
            got[i] as f64,
            want[i],
            "{} dst[{i}] not exact",
            dtype.name()
        );
    }
}

#[test]
fn mul_mat_matches_naive_f64_bit_exact_on_small_integer_data() {
    exact_case(Dtype::F32, 3, 2, 5, 1);
    exact_case(Dtype::Q4_0, 3, 2, 64, 2);
    exact_case(Dtype::Q8_0, 2, 3, 96, 3);
    exact_case(Dtype::Q4K, 2, 2, 512, 4);
    exact_case(Dtype::Q6K, 3, 2, 256, 5);
}

#[test]
fn mul_mat_sums_k_in_order_from_zero() {
    // 2^24 + 1 rounds back to 2^24 (tie to even), twice: 2^24. Any order
    // adding the ones first would give 2^24 + 2.
    let src0: Vec<u8> = [1f32; 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let dst = run(Dtype::F32, 1, 1, 3, &src0, &[16_777_216.0, 1.0, 1.0]);
    assert_eq!(dst, [16_777_216.0]);
    // MM-ZERO: all products -0.0, the sum starts at +0.0 and stays +0.0.
    let src0: Vec<u8> = [-1f32; 2].iter().flat_map(|v| v.to_le_bytes()).collect();
    let dst = run(Dtype::F32, 1, 1, 2, &src0, &[0.0, 0.0]);
    assert_eq!(dst[0].to_bits(), 0);
}

#[test]
fn mul_mat_rounds_product_before_adding() {
    // acc = -(1 + 2^-11); then (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to
    // 1 + 2^-11 (tie to even) before the add, giving +0.0. A fused
    // multiply-add would give 2^-24.
    let a = 1.0 + 2f32.powi(-12);
    let src0: Vec<u8> = [-1f32, a].iter().flat_map(|v| v.to_le_bytes()).collect();
    let dst = run(Dtype::F32, 1, 1, 2, &src0, &[1.0 + 2f32.powi(-11), a]);
    assert_eq!(dst[0].to_bits(), 0);
    assert_eq!(a.mul_add(a, -(1.0 + 2f32.powi(-11))), 2f32.powi(-24));
}

#[test]
fn mul_mat_propagates_a_nonfinite_scale() {
    // One Q8_0 row with d = +inf and code 0 at k = 0: inf * 0 is NaN.
    let mut codes = [1i8; 32];
    codes[0] = 0;
    let row = q8_0_block(0x7C00, &codes);
    let dst = run(Dtype::Q8_0, 1, 2, 32, &row, &[1.0; 64]);
    assert!(dst.iter().all(|y| y.is_nan()));
    // Without the zero code the sum is +inf.
    let row = q8_0_block(0x7C00, &[1i8; 32]);
    assert_eq!(
        run(Dtype::Q8_0, 1, 1, 32, &row, &[1.0; 32]),
        [f32::INFINITY]
    );
}

#[test]
fn mul_mat_empty_k_gives_positive_zero_and_empty_m_writes_nothing() {
    assert_eq!(
        run(Dtype::Q4K, 2, 1, 0, &[], &[])
            .iter()
            .map(|y| y.to_bits())
            .collect::<Vec<_>>(),
        [0, 0]
    );
    assert!(run(Dtype::Q4_0, 0, 3, 32, &[], &[0.0; 96]).is_empty());
}

#[test]
fn mul_mat_refuses_bad_shapes_and_writes_nothing() {
    let src0 = vec![0u8; 2 * 18];
    let src1 = vec![0f32; 3 * 32];
    let mut dst = vec![5f32; 6];
    let mut scratch = vec![0f32; 32];
    assert_eq!(
        mul_mat(Dtype::Q4_0, 2, 3, 48, &src0, &src1, &mut dst, &mut scratch),
        Err(GgmlError::RowNotBlocks {
            dtype: Dtype::Q4_0,
            k: 48
        })
    );
    assert_eq!(
        mul_mat(
            Dtype::Q4_0,
            2,
            3,
            32,
            &src0[..35],
            &src1,
            &mut dst,
            &mut scratch
        ),
        Err(GgmlError::Len {
            arg: "src0",
            want: 36,
            got: 35
        })
    );
    assert_eq!(
        mul_mat(
            Dtype::Q4_0,
            2,
            3,
            32,
            &src0,
            &src1[..95],
            &mut dst,
            &mut scratch
        ),
        Err(GgmlError::Len {
            arg: "src1",
            want: 96,
            got: 95
        })
    );
    assert_eq!(
        mul_mat(
            Dtype::Q4_0,
            2,
            3,
            32,
            &src0,
            &src1,
            &mut dst[..5],
            &mut scratch
        ),
        Err(GgmlError::Len {
            arg: "dst",
            want: 6,
            got: 5
        })
    );
    assert_eq!(
        mul_mat(
            Dtype::Q4_0,
            2,
            3,
            32,
            &src0,
            &src1,
            &mut dst,
            &mut scratch[..31]
        ),
        Err(GgmlError::Len {
            arg: "scratch",
            want: 32,
            got: 31
        })
    );
    assert_eq!(
        mul_mat(
            Dtype::Q4_0,
            usize::MAX,
            1,
            32,
            &src0,
            &src1,
            &mut dst,
            &mut scratch
        ),
        Err(GgmlError::Overflow)
    );
    assert_eq!(
        mul_mat(
            Dtype::F32,
            1,
            usize::MAX,
            2,
            &src0,
            &src1,
            &mut dst,
            &mut scratch
        ),
        Err(GgmlError::Overflow)
    );
    assert!(dst.iter().all(|y| *y == 5.0));
}
