//! `oracle::fma::fma_f32` against std's `f32::mul_add` (a correctly
//! rounded fused multiply-add on every host Rust supports: the hardware
//! instruction or the C library's `fmaf`): edge cases by hand, then random
//! triples of every class, then adversarial ones (ties and near-ties of
//! the final rounding, where a binary64 sum rounded twice goes wrong,
//! subnormal results, overflow, cancellation to signed zeros).

use oracle::fma::fma_f32;

/// splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
}

/// Same bits, or both NaN (the NaN payload is not specified).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn check(a: f32, b: f32, c: f32) {
    let (got, want) = (fma_f32(a, b, c), a.mul_add(b, c));
    assert!(
        same(got, want),
        "fma({a:e} 0x{:08X}, {b:e} 0x{:08X}, {c:e} 0x{:08X}) = {got:e} 0x{:08X}, std says {want:e} 0x{:08X}",
        a.to_bits(),
        b.to_bits(),
        c.to_bits(),
        got.to_bits(),
        want.to_bits()
    );
}

/// The naive emulation: the binary64 sum rounded to nearest, then to
/// binary32 (two roundings). Used to show a test set has teeth.
fn naive(a: f32, b: f32, c: f32) -> f32 {
    (f64::from(a) * f64::from(b) + f64::from(c)) as f32
}

/// `2^e` as f32, e in [-149, 127].
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

#[test]
fn fma_special_operands_follow_ieee() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    check(inf, 0.0, 1.0); // inf * 0: NaN
    check(0.0, -inf, 1.0);
    check(inf, 1.0, -inf); // inf - inf: NaN
    check(inf, 2.0, 5.0);
    check(-inf, 2.0, 5.0);
    check(1.0, 2.0, inf);
    check(1.0, 2.0, -inf);
    check(nan, 1.0, 0.0);
    check(1.0, nan, 0.0);
    check(1.0, 1.0, nan);
    check(f32::MAX, f32::MAX, -inf);
    assert!(fma_f32(inf, 0.0, 1.0).is_nan());
    assert_eq!(fma_f32(inf, 2.0, 5.0), inf);
}

#[test]
fn fma_signed_zeros_follow_ieee() {
    for &(a, b, c) in &[
        (0.0f32, 1.0f32, 0.0f32),
        (-0.0, 1.0, 0.0),
        (-0.0, 1.0, -0.0), // -0 + -0 = -0
        (0.0, -1.0, -0.0),
        (1.0, 1.0, -1.0), // exact cancellation: +0
        (-1.0, 1.0, 1.0),
        (pow2(-149), pow2(-1), -0.0), // +2^-150 + -0: the tie rounds to even, +0
        (-pow2(-149), pow2(-1), 0.0), // -tiny rounds to -0
        (-pow2(-149), pow2(-1), -0.0),
    ] {
        check(a, b, c);
    }
    assert_eq!(fma_f32(-0.0, 1.0, -0.0).to_bits(), 0x8000_0000);
    assert_eq!(fma_f32(1.0, 1.0, -1.0).to_bits(), 0x0000_0000);
    assert_eq!(fma_f32(-pow2(-149), pow2(-1), 0.0).to_bits(), 0x8000_0000);
}

#[test]
fn fma_rounds_once_where_two_roundings_differ() {
    // 1 + 2^-24 is the tie between 1 and 1 + 2^-23; a product just above
    // 2^-24 by less than binary64 keeps must round up, not to even.
    // a * b = (1 + 2^-23)(2^-24 - 2^-48) = 2^-24 + 2^-47 - 2^-48 - 2^-71,
    // so 1 + a * b = 1 + 2^-24 + 2^-48 - 2^-71: above the tie.
    let a = 1.0 + pow2(-23);
    let b = pow2(-24) - pow2(-48);
    check(a, b, 1.0);
    assert_eq!(fma_f32(a, b, 1.0), 1.0 + pow2(-23));
    // A product of 2^-25 * (1 + 2^-23) below a tie-to-even case: exact
    // tie 1 + 2^-24 with an extra -2^-72 must round down.
    let b2 = pow2(-24);
    let a2 = 1.0 - pow2(-24);
    // a2 * b2 = 2^-24 - 2^-48: 1 + that is below the tie, rounds to 1.
    check(a2, b2, 1.0);
    assert_eq!(fma_f32(a2, b2, 1.0), 1.0);
    // The exact tie rounds to even.
    check(pow2(-24), 1.0, 1.0);
    assert_eq!(fma_f32(pow2(-24), 1.0, 1.0), 1.0);
    check(pow2(-24), 1.0, 1.0 + pow2(-23));
    assert_eq!(fma_f32(pow2(-24), 1.0, 1.0 + pow2(-23)), 1.0 + pow2(-22));
}

#[test]
fn fma_overflow_and_subnormal_results() {
    let max = f32::MAX;
    check(max, 1.0, max); // overflow to inf
    check(max, -1.0, -max);
    check(max, 2.0, -max); // 2 max - max = max, no intermediate overflow
    check(max, max, -f32::INFINITY);
    // Half an ulp above max: the tie 2^128 - 2^103 rounds to inf (even).
    check(pow2(103), 1.0, max);
    check(pow2(102), 1.0, max);
    check(pow2(102) + pow2(80), 1.0, max);
    // Subnormal results: products far below the least normal.
    check(pow2(-100), pow2(-40), 0.0);
    check(pow2(-100), pow2(-50), 0.0); // 2^-150: tie between 0 and 2^-149, to even (0)
    check(pow2(-100) * 1.5, pow2(-50), 0.0); // 1.5 * 2^-150 rounds up to 2^-149
    check(pow2(-149), pow2(-149), pow2(-149)); // product far below, added to a subnormal
    check(pow2(-149), -pow2(-149), pow2(-149));
    check(pow2(-126), -1.0, pow2(-126) + pow2(-149));
    check(f32::MIN_POSITIVE, 0.5, -pow2(-149) * 3.0);
}

#[test]
fn fma_matches_std_on_random_triples_of_every_class() {
    let mut rng = Rng(0xF3A);
    let draw = |rng: &mut Rng| -> f32 {
        let sign = rng.u32() & 0x8000_0000;
        let bits = match rng.below(16) {
            0 => 0,
            1 => rng.u32() & 0x007F_FFFF,               // subnormal
            2 => 0x7F80_0000,                           // inf
            3 => 0x7FC0_0000 | (rng.u32() & 0x3F_FFFF), // NaN
            4 => 0x7F7F_FFFF - rng.below(16),           // near max
            5..=9 => {
                // Exponents near 0, where products and sums interact.
                ((127 - 20 + rng.below(40)) << 23) | (rng.u32() & 0x007F_FFFF)
            }
            _ => rng.u32() & 0x7FFF_FFFF,
        };
        f32::from_bits(sign | bits)
    };
    for _ in 0..2_000_000 {
        let (a, b, c) = (draw(&mut rng), draw(&mut rng), draw(&mut rng));
        check(a, b, c);
    }
}

#[test]
fn fma_matches_std_on_adversarial_triples() {
    let mut rng = Rng(0x71E5);
    let mut naive_wrong = 0u32;
    let sig = |rng: &mut Rng| f32::from_bits(0x3F80_0000 | (rng.u32() & 0x007F_FFFF)); // [1, 2)
    for n in 0..2_000_000u32 {
        let sign = |rng: &mut Rng| if rng.u32() & 1 == 0 { 1.0f32 } else { -1.0 };
        let (a, b, c) = match n % 5 {
            // Near-ties: a * b about half an ulp of c, low bits random.
            0 | 1 => {
                let ec = rng.below(200) as i32 - 100;
                let c = sign(&mut rng) * sig(&mut rng) * pow2(ec);
                let half_ulp = pow2(ec - 24);
                let a = sig(&mut rng) * pow2(rng.below(20) as i32 - 10);
                let mut b = sign(&mut rng) * (half_ulp / a);
                if n % 5 == 1 {
                    // Nudge by a few ulps of b either way.
                    let k = rng.below(7) as i32 - 3;
                    b = f32::from_bits((b.to_bits() as i32 + k) as u32);
                }
                (a, b, c)
            }
            // Exact ties: a power of two times half an ulp.
            2 => {
                let ec = rng.below(200) as i32 - 100;
                let c = sign(&mut rng) * sig(&mut rng) * pow2(ec);
                let k = rng.below(20) as i32 - 10;
                (pow2(k), sign(&mut rng) * pow2(ec - 24 - k), c)
            }
            // Cancellation: c close to -a * b.
            3 => {
                let a = sign(&mut rng) * sig(&mut rng) * pow2(rng.below(60) as i32 - 30);
                let b = sign(&mut rng) * sig(&mut rng) * pow2(rng.below(60) as i32 - 30);
                let p = a * b;
                let k = rng.below(5) as i32 - 2;
                (a, b, -f32::from_bits((p.to_bits() as i32 + k) as u32))
            }
            // Subnormal territory and the overflow edge.
            _ => {
                if rng.u32() & 1 == 0 {
                    let a = sign(&mut rng) * sig(&mut rng) * pow2(-60 - rng.below(60) as i32);
                    let b = sig(&mut rng) * pow2(-60 - rng.below(30) as i32);
                    let c = f32::from_bits(rng.u32() & 0x80FF_FFFF); // subnormal or tiny normal
                    (a, b, c)
                } else {
                    let a = sign(&mut rng) * sig(&mut rng) * pow2(100 + rng.below(27) as i32);
                    let b = sig(&mut rng) * pow2(rng.below(30) as i32 - 3);
                    let c =
                        sign(&mut rng) * f32::from_bits(0x7F00_0000 | (rng.u32() & 0x007F_FFFF));
                    (a, b, c)
                }
            }
        };
        check(a, b, c);
        naive_wrong += u32::from(!same(naive(a, b, c), a.mul_add(b, c)));
    }
    // The set reaches the cases a binary64 sum rounded twice gets wrong.
    assert!(naive_wrong > 0, "no triple where double rounding differs");
    eprintln!("triples where double rounding differs from one rounding: {naive_wrong}");
}
