//! Every encoder, every policy, every `f32` bit pattern.
//!
//! - FP8 (E4M3FN and E5M2, each under `SatFinite` and `NonSaturating`):
//!   against an independent reference built here from first principles
//!   (see [`Fp8Reference`]): the finite values of the format computed in
//!   `f64` from the textbook formula, the midpoints between neighbours
//!   computed in `f64`, and ties given to the even code. It never calls
//!   `oracle::round`.
//! - binary16 and bfloat16: against the `half` crate, bit for bit, NaN
//!   payloads included; and all 2^16 decodes likewise.
//!
//! In a release build (`cargo test --workspace --release`) every one of the
//! 2^32 patterns is checked, split across
//! `std::thread::available_parallelism()` threads, and the tests assert that
//! the count checked is exactly 2^32. In a debug build that would take many
//! minutes, so the same tests check a subset instead: every 251st pattern
//! plus the special regions (the first and last 32 patterns of every
//! interval of the reference, which holds every rounding boundary and tie,
//! and windows around zero, the subnormal boundaries, max finite, infinity
//! and the NaNs). Decodes are always exhaustive.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use oracle::bf16::{decode_bf16, encode_bf16};
use oracle::conventions::Overflow;
use oracle::e4m3::encode_e4m3;
use oracle::e5m2::encode_e5m2;
use oracle::f16::{decode_f16, encode_f16};

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

/// All 2^32 patterns in release builds; a subset in debug builds.
const FULL: bool = !cfg!(debug_assertions);
/// The stride of the debug-build subset.
const STRIDE: u32 = 251;
/// Patterns per job handed to a thread.
const CHUNK: u64 = 1 << 22;

// ---------------------------------------------------------------------------
// The parallel driver.

/// A contiguous, inclusive range of `f32` bit patterns and what to expect.
struct Job<E> {
    lo: u32,
    hi: u32,
    expect: E,
}

/// Patterns per block handed to a check.
const BLOCK: usize = 4096;

/// Calls `visit` on blocks of at most [`BLOCK`] values whose bit patterns
/// are those of `lo..=hi` this build checks: all of them when [`FULL`],
/// otherwise the first and last 32 and every multiple of [`STRIDE`] (a
/// pattern may be visited twice near the ends; harmless). Returns the
/// number of patterns visited.
fn for_blocks(lo: u32, hi: u32, mut visit: impl FnMut(&[f32])) -> u64 {
    let mut block = [0f32; BLOCK];
    if FULL {
        let mut start = lo as u64;
        while start <= hi as u64 {
            let len = (hi as u64 - start + 1).min(BLOCK as u64) as usize;
            for (i, x) in block[..len].iter_mut().enumerate() {
                *x = f32::from_bits(start as u32 + i as u32);
            }
            visit(&block[..len]);
            start += len as u64;
        }
        return hi as u64 - lo as u64 + 1;
    }
    let mut subset: Vec<u32> = (lo..=lo.saturating_add(31).min(hi)).collect();
    let first = (lo as u64).div_ceil(STRIDE as u64) * STRIDE as u64;
    subset.extend(
        (first..=hi as u64)
            .step_by(STRIDE as usize)
            .map(|b| b as u32),
    );
    subset.extend(hi.saturating_sub(31).max(lo)..=hi);
    for bits in subset.chunks(BLOCK) {
        for (x, b) in block.iter_mut().zip(bits) {
            *x = f32::from_bits(*b);
        }
        visit(&block[..bits.len()]);
    }
    subset.len() as u64
}

/// Splits every job into chunks of at most [`CHUNK`] patterns, runs `check`
/// on them across all available threads, and panics listing the first
/// failures. `check` returns the number of patterns it checked and, on a
/// mismatch, a description of the first one in its chunk. Returns the total
/// count checked.
fn run_parallel<E: Copy + Sync>(
    jobs: &[Job<E>],
    check: impl Fn(&Job<E>) -> (u64, Option<String>) + Sync,
) -> u64 {
    let mut chunks = Vec::new();
    for job in jobs {
        let mut lo = job.lo as u64;
        while lo <= job.hi as u64 {
            let hi = (lo + CHUNK - 1).min(job.hi as u64);
            chunks.push(Job {
                lo: lo as u32,
                hi: hi as u32,
                expect: job.expect,
            });
            lo = hi + 1;
        }
    }
    let next = AtomicUsize::new(0);
    let checked = AtomicU64::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(chunk) = chunks.get(i) else { break };
                let (n, failure) = check(chunk);
                checked.fetch_add(n, Ordering::Relaxed);
                if let Some(f) = failure {
                    failures.lock().unwrap().push(f);
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort();
    assert!(
        failures.is_empty(),
        "{} chunk(s) with mismatches; first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
    checked.into_inner()
}

/// The whole `u32` range as one job (the driver splits it).
fn all_patterns() -> Vec<Job<()>> {
    vec![Job {
        lo: 0,
        hi: u32::MAX,
        expect: (),
    }]
}

/// In debug builds, small windows around `f32` patterns where something
/// happens, both signs, as extra jobs (see the module doc).
fn special_windows(centers: &[u32]) -> Vec<Job<()>> {
    if FULL {
        return Vec::new();
    }
    let mut jobs = Vec::new();
    for &c in centers {
        for sign in [0, 0x8000_0000] {
            let c = c | sign;
            jobs.push(Job {
                lo: c.saturating_sub(256).max(c & 0x8000_0000),
                hi: c.saturating_add(256).min(c | 0x7FFF_FFFF),
                expect: (),
            });
        }
    }
    jobs
}

fn assert_count(what: &str, checked: u64) {
    if FULL {
        assert_eq!(
            checked,
            1 << 32,
            "{what}: not every f32 pattern was checked"
        );
    } else {
        assert!(
            checked > (1 << 32) / STRIDE as u64,
            "{what}: subset too small"
        );
    }
}

// ---------------------------------------------------------------------------
// The independent FP8 reference.

/// An FP8 format described from scratch, independently of `oracle::fp8`.
struct Fp8Reference {
    name: &'static str,
    exponent_bits: i32,
    mantissa_bits: i32,
    bias: i32,
    /// Largest finite magnitude code.
    max_finite: u8,
    /// Whether exponent all ones, mantissa zero is infinity.
    has_infinity: bool,
}

const E4M3FN_REF: Fp8Reference = Fp8Reference {
    name: "e4m3fn",
    exponent_bits: 4,
    mantissa_bits: 3,
    bias: 7,
    max_finite: 0x7E,
    has_infinity: false,
};

const E5M2_REF: Fp8Reference = Fp8Reference {
    name: "e5m2",
    exponent_bits: 5,
    mantissa_bits: 2,
    bias: 15,
    max_finite: 0x7B,
    has_infinity: true,
};

/// What a range of patterns must encode to, under each policy.
#[derive(Clone, Copy, Debug)]
struct Fp8Expect {
    /// The reference magnitude index `0..=max_finite + 1` the range rounds
    /// to (`max_finite + 1`: overflow); `None` for infinity and NaN.
    index: Option<usize>,
    sat_finite: u8,
    non_saturating: u8,
}

impl Fp8Reference {
    /// The value of magnitude code `mag` by the textbook formula, in `f64`,
    /// ignoring specials: `e == 0` gives `m * 2^(1 - bias - M)`, otherwise
    /// `(2^M + m) * 2^(e - bias - M)`.
    fn value(&self, mag: u8) -> f64 {
        let e = (mag as i32) >> self.mantissa_bits;
        let m = (mag as i32) & ((1 << self.mantissa_bits) - 1);
        assert!(e < (1 << self.exponent_bits));
        if e == 0 {
            m as f64 * 2f64.powi(1 - self.bias - self.mantissa_bits)
        } else {
            ((1 << self.mantissa_bits) + m) as f64 * 2f64.powi(e - self.bias - self.mantissa_bits)
        }
    }

    /// The code an overflow gives without saturation: infinity, else NaN.
    fn non_saturating_overflow(&self) -> u8 {
        if self.has_infinity {
            (((1 << self.exponent_bits) - 1) << self.mantissa_bits) as u8
        } else {
            0x7F
        }
    }

    /// Every `f32` pattern, partitioned into ranges with their expected
    /// codes.
    ///
    /// The non-negative finite patterns `0x0000_0000..=0x7F7F_FFFF` are
    /// ordered like their values. Magnitude codes `0..=max_finite` and one
    /// more, the "would-be" code `max_finite + 1` with its formula value
    /// (480 in E4M3FN, 65536 in E5M2: the unbounded-exponent view of
    /// IEEE 754-2019 clause 7.4), are sorted by value. Between neighbours
    /// `c - 1` and `c`, the midpoint (exact in `f64`, and exactly an `f32`)
    /// is the boundary: below it `c - 1`, above it `c`, on it the even one
    /// of the two. Landing on the would-be code is overflow. Then:
    /// - finite codes: `sign | code` under both policies;
    /// - overflow and infinity: `sign | max_finite` (saturating), `sign |
    ///   inf` or `sign | 0x7F` (non-saturating);
    /// - NaN: `0x7F` (saturating), `sign | 0x7F` (non-saturating).
    fn jobs(&self) -> Vec<Job<Fp8Expect>> {
        let top = self.max_finite as usize + 1; // the would-be code
        let values: Vec<f64> = (0..=top).map(|c| self.value(c as u8)).collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]), "values not sorted");
        let mut starts = vec![0u32];
        for c in 1..=top {
            let mid = (values[c - 1] + values[c]) / 2.0;
            let mid32 = mid as f32;
            assert_eq!(mid32 as f64, mid, "midpoint not exact");
            let b = mid32.to_bits();
            starts.push(if c % 2 == 0 { b } else { b + 1 });
        }
        let overflow_sat = self.max_finite;
        let overflow_non = self.non_saturating_overflow();
        let mut jobs = Vec::new();
        for sign in [0u8, 0x80] {
            let s32 = (sign as u32) << 24;
            for c in 0..=top {
                let lo = starts[c];
                let hi = if c == top {
                    0x7F7F_FFFF
                } else {
                    starts[c + 1] - 1
                };
                assert!(lo <= hi, "empty interval for code {c:#04x}");
                let expect = if c == top {
                    Fp8Expect {
                        index: Some(c),
                        sat_finite: sign | overflow_sat,
                        non_saturating: sign | overflow_non,
                    }
                } else {
                    Fp8Expect {
                        index: Some(c),
                        sat_finite: sign | c as u8,
                        non_saturating: sign | c as u8,
                    }
                };
                jobs.push(Job {
                    lo: s32 | lo,
                    hi: s32 | hi,
                    expect,
                });
            }
            jobs.push(Job {
                lo: s32 | 0x7F80_0000,
                hi: s32 | 0x7F80_0000,
                expect: Fp8Expect {
                    index: None,
                    sat_finite: sign | overflow_sat,
                    non_saturating: sign | overflow_non,
                },
            });
            jobs.push(Job {
                lo: s32 | 0x7F80_0001,
                hi: s32 | 0x7FFF_FFFF,
                expect: Fp8Expect {
                    index: None,
                    sat_finite: 0x7F,
                    non_saturating: sign | 0x7F,
                },
            });
        }
        jobs
    }

    /// Runs the encoder under both policies over every pattern (or the
    /// debug subset) and compares with [`Self::jobs`].
    fn check_all(&self, encode: impl Fn(f32, Overflow) -> u8 + Sync) {
        let jobs = self.jobs();
        let total: u64 = jobs.iter().map(|j| j.hi as u64 - j.lo as u64 + 1).sum();
        assert_eq!(total, 1 << 32, "reference does not partition the patterns");
        let name = self.name;
        let checked = run_parallel(&jobs, |job| {
            let e = job.expect;
            let (want_sat, want_non) = (e.sat_finite, e.non_saturating);
            let mut bad = false;
            let n = for_blocks(job.lo, job.hi, |xs| {
                // A local accumulator keeps the hot loop free of stores.
                let mut block_bad = false;
                for &x in xs {
                    let sat = encode(x, Overflow::SatFinite);
                    let non = encode(x, Overflow::NonSaturating);
                    block_bad |= (sat != want_sat) | (non != want_non);
                }
                bad |= block_bad;
            });
            if !bad {
                return (n, None);
            }
            // Slow path: find and describe the first mismatch.
            let mut first = None;
            for_blocks(job.lo, job.hi, |xs| {
                for &x in xs {
                    let sat = encode(x, Overflow::SatFinite);
                    let non = encode(x, Overflow::NonSaturating);
                    if first.is_none() && (sat != e.sat_finite || non != e.non_saturating) {
                        first = Some(format!(
                            "{}: x = {x:e} ({:#010x}): SatFinite got {sat:#04x} want {:#04x}, \
                             NonSaturating got {non:#04x} want {:#04x}",
                            name,
                            x.to_bits(),
                            e.sat_finite,
                            e.non_saturating
                        ));
                    }
                }
            });
            (n, first)
        });
        assert_count(name, checked);
    }
}

/// E4M3FN, `SatFinite` and `NonSaturating`, every `f32` pattern (debug
/// builds: the subset described in the module doc) against the independent
/// midpoint reference.
#[test]
fn e4m3_encode_matches_reference_for_every_f32() {
    E4M3FN_REF.check_all(encode_e4m3);
}

/// E5M2, `SatFinite` and `NonSaturating`, every `f32` pattern (debug
/// builds: the subset described in the module doc) against the independent
/// midpoint reference.
#[test]
fn e5m2_encode_matches_reference_for_every_f32() {
    E5M2_REF.check_all(encode_e5m2);
}

/// The reference itself agrees with plain nearest-value search (the
/// obviously correct definition) on a sample of every interval boundary:
/// for each pattern near a boundary, scan all finite values for the nearest
/// in `f64`, ties to the even code.
#[test]
fn fp8_reference_agrees_with_nearest_search() {
    for r in [&E4M3FN_REF, &E5M2_REF] {
        let top = r.max_finite as usize + 1;
        let values: Vec<f64> = (0..=top).map(|c| r.value(c as u8)).collect();
        let nearest = |x: f64| -> usize {
            // Beyond the largest candidate the nearest is the largest. (Said
            // outright because f64 distances to values near 2^128 would
            // round to equal and fake a tie.)
            if x >= values[top] {
                return top;
            }
            let mut best = 0;
            for c in 1..=top {
                let (d, db) = ((values[c] - x).abs(), (values[best] - x).abs());
                if d < db || (d == db && c % 2 == 0) {
                    best = c;
                }
            }
            best
        };
        for job in r.jobs() {
            let Some(want) = job.expect.index else {
                continue;
            };
            for b in [job.lo, job.lo.saturating_add(1).min(job.hi), job.hi] {
                let got = nearest((f32::from_bits(b) as f64).abs());
                assert_eq!(got, want, "{}: pattern {b:#010x}", r.name);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// binary16 and bfloat16 against the `half` crate.

/// Checks `ours` against `theirs` over the patterns of every job: the
/// reference converts a whole block at once (so `half` can use its
/// vectorized slice conversion), then the codes are compared one by one.
/// Returns the count checked; panics with the first mismatch per chunk.
fn check_against(
    what: &'static str,
    jobs: &[Job<()>],
    ours: impl Fn(f32) -> u16 + Sync,
    theirs: impl Fn(&[f32], &mut [u16]) + Sync,
) -> u64 {
    run_parallel(jobs, |job| {
        let mut want = [0u16; BLOCK];
        let mut first = None;
        let n = for_blocks(job.lo, job.hi, |xs| {
            let want = &mut want[..xs.len()];
            theirs(xs, want);
            let mut bad = false;
            for (x, w) in xs.iter().zip(want.iter()) {
                bad |= ours(*x) != *w;
            }
            if bad && first.is_none() {
                let (x, w) = xs
                    .iter()
                    .zip(want.iter())
                    .find(|(x, w)| ours(**x) != **w)
                    .unwrap();
                first = Some(format!(
                    "{what}: {:#010x} got {:#06x} want {w:#06x}",
                    x.to_bits(),
                    ours(*x)
                ));
            }
        });
        (n, first)
    })
}

/// `encode_f16` equals `half::f16::from_f32` bit for bit (NaN payloads
/// included) for every `f32` pattern (debug builds: every 251st pattern and
/// windows around the binary16 boundaries).
#[test]
fn f16_encode_matches_half_for_every_f32() {
    let mut jobs = all_patterns();
    let centers = [
        0x0000_0000, // zero
        0x3300_0000, // 2^-25: half the smallest subnormal
        0x3380_0000, // 2^-24: smallest subnormal
        0x33C0_0000, // 1.5 * 2^-24: a subnormal tie
        0x3880_0000, // 2^-14: smallest normal
        0x3F80_0000, // 1.0
        0x477F_E000, // 65504: max finite
        0x477F_F000, // 65520: overflow midpoint
        0x7F80_0000, // infinity, and the NaNs above it
        0x7FC0_0000, // the default quiet NaN
    ];
    jobs.extend(special_windows(&centers));
    let checked = check_against("f16", &jobs, encode_f16, |xs, want| {
        let dst = want.reinterpret_cast_mut::<half::f16>();
        dst.convert_from_f32_slice(xs);
    });
    assert_count("f16", checked);
}

/// `encode_bf16` equals `half::bf16::from_f32` bit for bit (NaN payloads
/// included) for every `f32` pattern (debug builds: every 251st pattern and
/// windows around the bfloat16 boundaries).
#[test]
fn bf16_encode_matches_half_for_every_f32() {
    let mut jobs = all_patterns();
    let centers = [
        0x0000_0000, // zero
        0x0000_8000, // half the smallest bf16 subnormal (2^-134)
        0x0001_0000, // smallest bf16 subnormal (2^-133)
        0x0080_0000, // smallest normal
        0x3F80_8000, // 1.0 + half an ulp: a tie
        0x7F7F_0000, // max finite
        0x7F7F_8000, // overflow midpoint
        0x7F80_0000, // infinity, and the NaNs above it
        0x7FC0_0000, // the default quiet NaN
    ];
    jobs.extend(special_windows(&centers));
    let checked = check_against("bf16", &jobs, encode_bf16, |xs, want| {
        for (x, w) in xs.iter().zip(want.iter_mut()) {
            *w = half::bf16::from_f32(*x).to_bits();
        }
    });
    assert_count("bf16", checked);
}

/// `decode_f16` equals `half::f16::to_f32` bit for bit for all 2^16 codes,
/// in every build.
#[test]
fn f16_decode_matches_half_for_every_code() {
    for b in 0..=u16::MAX {
        let got = decode_f16(b).to_bits();
        let want = half::f16::from_bits(b).to_f32().to_bits();
        assert_eq!(got, want, "f16 {b:#06x}");
    }
}

/// `decode_bf16` equals `half::bf16::to_f32` bit for bit for all 2^16
/// codes, in every build.
#[test]
fn bf16_decode_matches_half_for_every_code() {
    for b in 0..=u16::MAX {
        let got = decode_bf16(b).to_bits();
        let want = half::bf16::from_bits(b).to_f32().to_bits();
        assert_eq!(got, want, "bf16 {b:#06x}");
    }
}
