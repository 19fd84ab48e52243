//! Branch-free E4M3FN decode and encode for the fast paths: integer and
//! float operations that LLVM vectorizes, bit-identical to
//! [`oracle::e4m3::decode_e4m3`] and [`oracle::e4m3::encode_e4m3`] (proven
//! over all 256 codes and all 2^32 `f32` patterns by the tests below).

/// `decode_e4m3(code, NanMagnitude::ReadAsZero)` (the weights' reading):
/// `0x7F` and `0xFF` give `+0.0`.
///
/// Normal codes (exponent field `e >= 1`) move their 7 magnitude bits into
/// the top of an `f32` and rebias the exponent by `127 - 7 = 120`;
/// subnormal codes (`e == 0`) are `mantissa * 2^-9`, an exact integer
/// conversion and an exact multiplication by a power of two.
#[inline(always)]
pub(crate) fn decode_w(code: u8) -> f32 {
    let c = u32::from(code);
    let sign = (c & 0x80) << 24;
    let mag = c & 0x7F;
    let normal = (mag << 20) + (120 << 23);
    let sub = (mag as f32 * (1.0 / 512.0)).to_bits();
    let bits = sign | if mag < 8 { sub } else { normal };
    if mag == 0x7F {
        0.0
    } else {
        f32::from_bits(bits)
    }
}

/// The bits of `2^14`, whose ulp is `2^-9`, the E4M3 subnormal step.
const TWO_POW_14_BITS: u32 = 0x4680_0000;
/// The smallest normal E4M3 magnitude, `2^-6`, as `f32` bits.
const MIN_NORMAL_BITS: u32 = 121 << 23;

/// `encode_e4m3(v, Overflow::SatFinite)`: round to nearest even; a rounded
/// magnitude beyond 448 (infinity included) gives `±448` (`0x7E`/`0xFE`);
/// NaN gives `0x7F`; the sign of zero is kept.
///
/// - `|v| >= 2^-6` (normal E4M3): round the `f32` bits to 3 mantissa bits
///   (add `0x7FFFF` plus the kept lsb, drop 20 bits; a carry moves into the
///   exponent), rebias by 120, saturate at `0x7E`.
/// - `|v| < 2^-6` (subnormal E4M3 or zero): `|v| + 2^14` rounds, in the
///   one binary32 addition, to a multiple of `2^-9` to nearest even; its
///   bits minus those of `2^14` count the steps, 0 to 8 (8 is `0x08`, the
///   smallest normal, which the code sequence continues into).
#[inline(always)]
pub(crate) fn encode_sat(v: f32) -> u8 {
    let bits = v.to_bits();
    let abs = bits & 0x7FFF_FFFF;
    let sign = (bits >> 24) & 0x80;
    let rounded = (abs + 0x7_FFFF + ((abs >> 20) & 1)) >> 20;
    let normal = rounded.wrapping_sub(120 << 3).min(0x7E);
    let sub = (f32::from_bits(abs) + 16384.0)
        .to_bits()
        .wrapping_sub(TWO_POW_14_BITS);
    let mag = if abs >= MIN_NORMAL_BITS { normal } else { sub };
    let code = if abs > 0x7F80_0000 { 0x7F } else { sign | mag };
    code as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use oracle::conventions::{NanMagnitude, Overflow};
    use oracle::e4m3::{decode_e4m3, encode_e4m3};

    #[test]
    fn decode_matches_spec_for_every_code() {
        for code in 0..=255u8 {
            assert_eq!(
                decode_w(code).to_bits(),
                decode_e4m3(code, NanMagnitude::ReadAsZero).to_bits(),
                "code 0x{code:02X}"
            );
        }
    }

    /// All 2^32 patterns in release builds (split over the available
    /// threads, and counted); every 61st pattern plus the windows around
    /// the E4M3 boundaries in debug builds.
    #[test]
    fn encode_matches_spec_for_every_f32() {
        const CHUNK: u64 = 1 << 24;
        let full = !cfg!(debug_assertions);
        let check = |lo: u64, hi: u64, step: u64| -> u64 {
            let mut n = 0;
            let mut bits = lo;
            while bits < hi {
                let x = f32::from_bits(bits as u32);
                let (got, want) = (encode_sat(x), encode_e4m3(x, Overflow::SatFinite));
                assert_eq!(got, want, "x = {x:e} (0x{bits:08X})");
                n += 1;
                bits += step;
            }
            n
        };
        if full {
            let next = std::sync::atomic::AtomicU64::new(0);
            let total = std::sync::atomic::AtomicU64::new(0);
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| loop {
                        let lo = next.fetch_add(CHUNK, std::sync::atomic::Ordering::Relaxed);
                        if lo >= 1 << 32 {
                            break;
                        }
                        let n = check(lo, lo + CHUNK, 1);
                        total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                    });
                }
            });
            assert_eq!(total.into_inner(), 1 << 32, "patterns checked");
        } else {
            check(0, 1 << 32, 61);
            // Windows around every E4M3 value and every midpoint between
            // neighbours (the ties; 464 is the one past 448), both signs,
            // and around infinity and the NaNs.
            let mut centers = vec![464f32, f32::INFINITY];
            for code in 0..=0x7Eu8 {
                let v = decode_e4m3(code, NanMagnitude::Ieee);
                centers.push(v);
                if code < 0x7E {
                    // Exact: both have at most 4 significand bits.
                    centers.push((v + decode_e4m3(code + 1, NanMagnitude::Ieee)) / 2.0);
                }
            }
            for v in centers {
                for sign in [0u32, 0x8000_0000] {
                    let c = u64::from(v.to_bits() | sign);
                    check(c.saturating_sub(4096), (c + 4096).min(1 << 32), 1);
                }
            }
        }
    }
}
