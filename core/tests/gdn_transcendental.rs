//! The Gated DeltaNet transcendentals and `sqrt`, over every `f32`.
//!
//! In a release build (`cargo test -p core --release`) each function is
//! evaluated on all 2^32 bit patterns, split across
//! `std::thread::available_parallelism()` threads, and the tests assert that
//! exactly 2^32 were checked. A debug build checks every 251st pattern plus
//! windows around the points where something happens (the branch thresholds,
//! zero, the subnormal boundary, overflow), because the full sweep would take
//! many minutes unoptimized.
//!
//! - `sqrt`: bit for bit against `std`'s `f32::sqrt` (a NaN result: any
//!   NaN).
//! - exp, softplus, sigmoid, SiLU: against a reference computed in `f64`
//!   with `std` (see [`Reference`]). Two figures per function: the largest
//!   error in ulps of the binary32 grid at the reference value (the ulp
//!   below `2^-126` is `2^-149`), and the largest distance, in codes, from
//!   the reference rounded to `f32` (round to nearest even). The `f64`
//!   reference is within a few `f64` ulps of the exact value, about `2^-27`
//!   of an `f32` ulp, so the first figure is the true error to that
//!   precision; the second is the distance from the correctly rounded
//!   result except for inputs whose exact value lies within about `2^-27`
//!   ulp of a rounding midpoint (no such input moves the first figure).
//!   NaN inputs must give NaN; infinite and zero results must match in
//!   sign.
//! - Where the mathematics pins the result (saturation to 0, 1 or infinity,
//!   the identity above a threshold, the constant near 0; each region is
//!   proved on its `*_known` function), the output must equal that value
//!   bit for bit and no `f64` reference is computed. This keeps the sweeps
//!   to about a minute of CPU time each: the reference is evaluated only on
//!   `[-104, 89]` for exp, `[-104, 20]` for softplus, `[-104, 18)` for
//!   sigmoid and `[-120, 19]` for SiLU.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use oracle::gdn::sqrt::sqrt;
use oracle::gdn::transcendental::{
    exp, pow2, scale, sigmoid, silu, softplus, ATANH_C, EXP_C, LN2_HI, LN2_LO, LOG2E, SHIFTER,
};

/// All 2^32 patterns in release builds; a subset in debug builds.
const FULL: bool = !cfg!(debug_assertions);
/// The stride of the debug-build subset.
const STRIDE: u64 = 251;
/// Patterns per job handed to a thread.
const CHUNK: u64 = 1 << 22;

// ---------------------------------------------------------------------------
// Measuring.

/// What one function did on a set of inputs.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    /// Inputs checked.
    count: u64,
    /// Largest error in ulps against the `f64` reference, and its input.
    max_ulp: f64,
    max_ulp_x: u32,
    /// Largest distance in codes from the reference rounded to `f32`, and
    /// its input.
    max_codes: u64,
    max_codes_x: u32,
}

impl Stats {
    fn merge(&mut self, o: &Stats) {
        self.count += o.count;
        if o.max_ulp > self.max_ulp {
            self.max_ulp = o.max_ulp;
            self.max_ulp_x = o.max_ulp_x;
        }
        if o.max_codes > self.max_codes {
            self.max_codes = o.max_codes;
            self.max_codes_x = o.max_codes_x;
        }
    }
}

/// An `f32` pattern mapped to an integer that orders like its value, with
/// both zeros at 0 (so the code distance across zero is the number of
/// values strictly between plus one).
fn ordered(x: f32) -> i64 {
    let b = x.to_bits();
    let mag = (b & 0x7FFF_FFFF) as i64;
    if b >> 31 != 0 {
        -mag
    } else {
        mag
    }
}

/// The spacing of the binary32 grid at the magnitude `a` (finite, `f64`):
/// `2^(e - 23)` for `2^e <= a < 2^(e+1)`, `e >= -126`; `2^-149` below
/// `2^-126`; `2^104` at and beyond `2^128` (the grid continued upward).
fn ulp_at(a: f64) -> f64 {
    if a < f64::from(f32::MIN_POSITIVE) {
        return 2f64.powi(-149);
    }
    let e = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
    2f64.powi(e.min(127) - 23)
}

/// Compares `got` with the reference value `want`. `Err` for a class error
/// (NaN where none is due, or the reverse; a wrong sign of a zero or an
/// infinity); otherwise the error in ulps and the distance in codes.
fn measure(got: f32, want: f64) -> Result<(f64, u64), String> {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            Ok((0.0, 0))
        } else {
            Err(format!("got {got:e}, want {want:e}"))
        };
    }
    let rounded = want as f32;
    if (rounded == 0.0 || rounded.is_infinite() || got == 0.0 || got.is_infinite())
        && got.is_sign_negative() != rounded.is_sign_negative()
    {
        return Err(format!("got {got:e}, want {rounded:e}: sign"));
    }
    let codes = (ordered(got) - ordered(rounded)).unsigned_abs();
    if got == rounded {
        return Ok((0.0, 0));
    }
    if want.is_infinite() {
        return Err(format!("got {got:e}, want {want:e}"));
    }
    // Beyond the f32 range the grid continues upward (ulp 2^104).
    let want = want.clamp(-(2f64.powi(128)), 2f64.powi(128));
    // An infinite result counts as the would-be next code, 2^128.
    let g = if got.is_infinite() {
        2f64.powi(128).copysign(f64::from(got))
    } else {
        f64::from(got)
    };
    Ok(((g - want).abs() / ulp_at(want.abs()), codes))
}

/// Checks `f` on `bits`, adding to `stats`; a class error is pushed to
/// `failures` (the first 20). Where `known(x)` gives the exact expected
/// result (a region where the mathematics pins it, proved at each use), the
/// output must equal it bit for bit (NaN: any NaN); elsewhere it is measured
/// against `reference`. A result equal to the rounded reference has error
/// at most 0.5 ulp (plus the reference's own `2^-27`) and is not measured
/// further: every stated bound is above 1 ulp, so the maximum comes from the
/// inputs that differ.
fn check_patterns(
    name: &str,
    bits: impl Iterator<Item = u32>,
    f: &F<'_>,
    stats: &mut Stats,
    failures: &Mutex<Vec<String>>,
) {
    for b in bits {
        let x = f32::from_bits(b);
        let got = (f.f)(x);
        stats.count += 1;
        let result = match (f.known)(x) {
            Some(want) => {
                if got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()) {
                    Ok((0.0, 0))
                } else {
                    Err(format!("got {got:e}, want exactly {want:e}"))
                }
            }
            None => {
                let want = (f.reference)(x);
                if got.to_bits() == (want as f32).to_bits() {
                    Ok((0.0, 0))
                } else {
                    measure(got, want)
                }
            }
        };
        match result {
            Ok((ulp, codes)) => {
                if ulp > stats.max_ulp {
                    stats.max_ulp = ulp;
                    stats.max_ulp_x = b;
                }
                if codes > stats.max_codes {
                    stats.max_codes = codes;
                    stats.max_codes_x = b;
                }
            }
            Err(e) => {
                let mut fl = failures.lock().unwrap();
                if fl.len() < 20 {
                    fl.push(format!("{name}({x:e} = {b:#010x}): {e}"));
                }
            }
        }
    }
}

/// A function under test: the oracle, the exact result where it is known,
/// and the `f64` reference elsewhere.
struct F<'a> {
    f: &'a (dyn Fn(f32) -> f32 + Sync),
    known: &'a (dyn Fn(f32) -> Option<f32> + Sync),
    reference: &'a (dyn Fn(f32) -> f64 + Sync),
}

/// Runs `f` over every pattern (or the debug subset), across all threads.
/// Panics on a class error; returns the statistics.
fn sweep(name: &str, f: F<'_>) -> Stats {
    let start = std::time::Instant::now();
    let chunks = (1u64 << 32) / CHUNK;
    let next = AtomicUsize::new(0);
    let total = Mutex::new(Stats::default());
    let failures = Mutex::new(Vec::<String>::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut local = Stats::default();
                loop {
                    let c = next.fetch_add(1, Ordering::Relaxed) as u64;
                    if c >= chunks {
                        break;
                    }
                    let (lo, hi) = (c * CHUNK, (c + 1) * CHUNK);
                    if FULL {
                        let it = (lo..hi).map(|b| b as u32);
                        check_patterns(name, it, &f, &mut local, &failures);
                    } else {
                        let it = (lo.div_ceil(STRIDE) * STRIDE..hi)
                            .step_by(STRIDE as usize)
                            .map(|b| b as u32);
                        check_patterns(name, it, &f, &mut local, &failures);
                    }
                }
                total.lock().unwrap().merge(&local);
            });
        }
    });
    let mut st = total.into_inner().unwrap();
    if FULL {
        assert_eq!(st.count, 1 << 32, "{name}: not every pattern was checked");
    } else {
        let mut sp = Stats::default();
        let it = special_patterns().into_iter();
        check_patterns(name, it, &f, &mut sp, &failures);
        st.merge(&sp);
    }
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{name}: class errors:\n{}",
        failures.join("\n")
    );
    eprintln!(
        "{name}: {} inputs in {:.1?}, max {:.4} ulp at {:e} ({:#010x}), max {} code(s) from the rounded reference at {:e} ({:#010x})",
        st.count,
        start.elapsed(),
        st.max_ulp,
        f32::from_bits(st.max_ulp_x),
        st.max_ulp_x,
        st.max_codes,
        f32::from_bits(st.max_codes_x),
        st.max_codes_x
    );
    st
}

/// Debug builds: 512 patterns around each point where a branch, an
/// underflow or an overflow happens, both signs, and the first 256 NaNs.
fn special_patterns() -> Vec<u32> {
    let centers: [f32; 14] = [
        0.0,
        f32::MIN_POSITIVE,
        1.0,
        0.346_573_6, // ln2 / 2: the first n = 1
        20.0,
        87.33654,
        88.72284,
        89.0,
        103.27893,
        103.97208,
        104.0,
        108.9,
        120.0,
        f32::MAX,
    ];
    let mut v = Vec::new();
    for c in centers {
        for sign in [0, 0x8000_0000u32] {
            let mag = i64::from(c.to_bits());
            for d in -256..256i64 {
                v.push(sign | (mag + d).clamp(0, 0x7F7F_FFFF) as u32);
            }
        }
    }
    v.extend(0x7F80_0000..0x7F80_0100);
    v.extend(0xFF80_0000..0xFF80_0100);
    v
}

// ---------------------------------------------------------------------------
// The `f64` references.

/// `f64` references, each the textbook formula in its numerically stable
/// form with `std`'s `exp` and `ln_1p`.
struct Reference;

impl Reference {
    fn exp(x: f32) -> f64 {
        f64::from(x).exp()
    }
    /// `max(x, 0) + ln_1p(e^-|x|)`.
    fn softplus(x: f32) -> f64 {
        let x = f64::from(x);
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    }
    fn sigmoid64(x: f64) -> f64 {
        if x >= 0.0 {
            1.0 / (1.0 + (-x).exp())
        } else {
            let z = x.exp();
            z / (1.0 + z)
        }
    }
    fn sigmoid(x: f32) -> f64 {
        Self::sigmoid64(f64::from(x))
    }
    /// `x * sigmoid(x)`; `-0.0` at `-inf` (the limit).
    fn silu(x: f32) -> f64 {
        let x = f64::from(x);
        if x == f64::NEG_INFINITY {
            return -0.0;
        }
        x * Self::sigmoid64(x)
    }
}

// ---------------------------------------------------------------------------
// Exhaustive sweeps, with the bounds the docs state.

/// `2^-25`: below it in magnitude, `e^x` and `sigmoid(x)` round to a
/// constant (see [`exp_known`], [`sigmoid_known`]).
const TINY: f32 = f32::from_bits(0x3300_0000);

/// Where `exp` is pinned: NaN gives NaN; `x > 89` gives `+inf` (`e^89 >
/// f32::MAX`); `x < -104` gives `+0.0` (`e^-104 < 2^-150`, below half the
/// smallest subnormal); `|x| < 2^-25` gives `1.0` (`1 - 2^-25 < 1 + x <=
/// e^x < 1 + 2^-24` for such `x`, and `1 - 2^-25`, `1 + 2^-24` are the
/// midpoints around 1).
fn exp_known(x: f32) -> Option<f32> {
    match x {
        _ if x.is_nan() => Some(f32::NAN),
        _ if x > 89.0 => Some(f32::INFINITY),
        _ if x < -104.0 => Some(0.0),
        _ if x.abs() < TINY => Some(1.0),
        _ => None,
    }
}

/// Where `softplus` is pinned: NaN; `x > 20` gives `x` (`log(1 + e^-x) <
/// 2.1e-9` is below half an ulp of any `x >= 16`); `x < -104` gives `+0.0`
/// (`0 < log(1 + e^x) < e^x < 2^-150`).
fn softplus_known(x: f32) -> Option<f32> {
    match x {
        _ if x.is_nan() => Some(f32::NAN),
        _ if x > 20.0 => Some(x),
        _ if x < -104.0 => Some(0.0),
        _ => None,
    }
}

/// Where `sigmoid` is pinned: NaN; `x >= 18` gives `1.0` (`1 - sigmoid(x) <
/// e^-18 < 2^-25`, the midpoint below 1); `x < -104` gives `+0.0`
/// (`sigmoid(x) < e^x < 2^-150`); `|x| < 2^-25` gives `0.5`
/// (`|sigmoid(x) - 0.5| < |x| / 4 < 2^-27`, below the half-ulps `2^-26`
/// under 0.5 and `2^-25` over it).
fn sigmoid_known(x: f32) -> Option<f32> {
    match x {
        _ if x.is_nan() => Some(f32::NAN),
        _ if x >= 18.0 => Some(1.0),
        _ if x < -104.0 => Some(0.0),
        _ if x.abs() < TINY => Some(0.5),
        _ => None,
    }
}

/// Where `silu` is pinned: NaN; `x > 19` gives `x` (`x - silu(x) = x e^-x /
/// (1 + e^-x) < x 2^-27`, below a quarter ulp of `x`); `x < -120` gives
/// `-0.0` (`|x| e^x < 2^-150` from -108.9 down).
fn silu_known(x: f32) -> Option<f32> {
    match x {
        _ if x.is_nan() => Some(f32::NAN),
        _ if x > 19.0 => Some(x),
        _ if x < -120.0 => Some(-0.0),
        _ => None,
    }
}

/// Bounds stated on `oracle::gdn::transcendental::exp` (measured: 1.0226
/// ulp at 59.270813, 1 code).
const EXP_MAX_ULP: f64 = 1.03;
const EXP_MAX_CODES: u64 = 1;

#[test]
fn exp_error_is_within_its_stated_bound_for_every_f32() {
    let st = sweep(
        "exp",
        F {
            f: &exp,
            known: &exp_known,
            reference: &Reference::exp,
        },
    );
    assert!(
        st.max_ulp <= EXP_MAX_ULP && st.max_codes <= EXP_MAX_CODES,
        "{st:?}"
    );
}

/// Bounds stated on `softplus` (measured: 2.7969 ulp at -2.7570076, 3
/// codes).
const SOFTPLUS_MAX_ULP: f64 = 2.80;
const SOFTPLUS_MAX_CODES: u64 = 3;

#[test]
fn softplus_error_is_within_its_stated_bound_for_every_f32() {
    let st = sweep(
        "softplus",
        F {
            f: &softplus,
            known: &softplus_known,
            reference: &Reference::softplus,
        },
    );
    assert!(
        st.max_ulp <= SOFTPLUS_MAX_ULP && st.max_codes <= SOFTPLUS_MAX_CODES,
        "{st:?}"
    );
}

/// Bounds stated on `sigmoid` (measured: 2.4019 ulp at -4.157294, 2 codes).
const SIGMOID_MAX_ULP: f64 = 2.41;
const SIGMOID_MAX_CODES: u64 = 2;

#[test]
fn sigmoid_error_is_within_its_stated_bound_for_every_f32() {
    let st = sweep(
        "sigmoid",
        F {
            f: &sigmoid,
            known: &sigmoid_known,
            reference: &Reference::sigmoid,
        },
    );
    assert!(
        st.max_ulp <= SIGMOID_MAX_ULP && st.max_codes <= SIGMOID_MAX_CODES,
        "{st:?}"
    );
}

/// Bounds stated on `silu` (measured: 3.3938 ulp at -3.2112513, 3 codes).
const SILU_MAX_ULP: f64 = 3.40;
const SILU_MAX_CODES: u64 = 3;

#[test]
fn silu_error_is_within_its_stated_bound_for_every_f32() {
    let st = sweep(
        "silu",
        F {
            f: &silu,
            known: &silu_known,
            reference: &Reference::silu,
        },
    );
    assert!(
        st.max_ulp <= SILU_MAX_ULP && st.max_codes <= SILU_MAX_CODES,
        "{st:?}"
    );
}

/// `sqrt` against `std`, bit for bit, every pattern (NaN results: any NaN).
#[test]
fn sqrt_is_correctly_rounded_for_every_f32() {
    let st = sweep(
        "sqrt",
        F {
            f: &sqrt,
            known: &|x: f32| Some(x.sqrt()),
            reference: &|x: f32| f64::from(x.sqrt()),
        },
    );
    assert_eq!((st.max_codes, st.max_ulp), (0, 0.0), "{st:?}");
}

// ---------------------------------------------------------------------------
// The constants are what their docs say.

#[test]
fn constants_are_the_stated_roundings() {
    assert_eq!(LOG2E, std::f64::consts::LOG2_E as f32);
    assert_eq!(f64::from(LN2_HI), 0.693145751953125);
    assert_eq!(
        LN2_HI.to_bits() & 0x1FF,
        0,
        "LN2_HI has 15 significant bits"
    );
    assert_eq!(LN2_LO, (std::f64::consts::LN_2 - f64::from(LN2_HI)) as f32);
    assert_eq!(SHIFTER, 1.5 * 8388608.0);
    let mut fact = 1.0f64;
    for (i, &c) in EXP_C.iter().enumerate() {
        fact *= (i + 2) as f64;
        assert_eq!(c, (1.0 / fact) as f32, "EXP_C[{i}] = 1/{}!", i + 2);
    }
    for (i, &c) in ATANH_C.iter().enumerate() {
        assert_eq!(c, (1.0 / (2 * i + 3) as f64) as f32, "ATANH_C[{i}]");
    }
    for k in -126..=127 {
        assert_eq!(f64::from(pow2(k)), 2f64.powi(k));
    }
}

// ---------------------------------------------------------------------------
// Named edge rules.

#[test]
fn exp_edges() {
    assert_eq!(exp(0.0).to_bits(), 1.0f32.to_bits());
    assert_eq!(exp(-0.0).to_bits(), 1.0f32.to_bits());
    assert_eq!(exp(f32::INFINITY), f32::INFINITY);
    assert_eq!(exp(f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(exp(89.0), f32::INFINITY); // overflow inside scale
    assert_eq!(exp(88.72283), f64::from(88.72283f32).exp() as f32); // just below f32::MAX
    assert!(exp(88.72283) < f32::MAX);
    assert_eq!(exp(-104.0).to_bits(), 0);
    assert_eq!(exp(-103.0), f32::from_bits(1)); // 1.29 * 2^-149, one rounding
    assert!(exp(f32::NAN).is_nan());
}

#[test]
fn scale_rounds_once_into_the_subnormals() {
    // 1.5 * 2^-150 is 0.75 of the smallest subnormal: rounds up to it once;
    // 1.0 * 2^-150 is a tie between 0 and 2^-149: even, 0.
    assert_eq!(scale(1.5, -150).to_bits(), 1);
    assert_eq!(scale(1.0, -150).to_bits(), 0);
    assert_eq!(scale(-1.0, -149).to_bits(), 0x8000_0001);
    assert_eq!(scale(1.5, 127), 1.5 * 2f32.powi(127));
    assert_eq!(scale(1.0, 128), f32::INFINITY);
}

#[test]
fn softplus_branches() {
    // SP-LINEAR: above 20 the input itself; at 20 the formula.
    assert_eq!(softplus(20.000002), 20.000002);
    assert_eq!(softplus(1e30), 1e30);
    assert_eq!(softplus(f32::INFINITY), f32::INFINITY);
    assert_eq!(softplus(20.0), 20.0);
    // SP-NEG: tends to e^x, then +0.0.
    assert_eq!(softplus(-0.0), softplus(0.0));
    assert_eq!(softplus(-30.0), exp(-30.0));
    assert_eq!(softplus(-1e30).to_bits(), 0);
    assert_eq!(softplus(f32::NEG_INFINITY).to_bits(), 0);
    assert!(softplus(f32::NAN).is_nan());
}

#[test]
fn sigmoid_and_silu_edges() {
    assert_eq!(sigmoid(0.0), 0.5);
    assert_eq!(sigmoid(-0.0), 0.5);
    assert_eq!(sigmoid(f32::INFINITY), 1.0);
    assert_eq!(sigmoid(f32::NEG_INFINITY).to_bits(), 0);
    assert!(sigmoid(-100.0) > 0.0, "SIG-NEG keeps the tail");
    assert_eq!(silu(0.0).to_bits(), 0);
    assert_eq!(silu(-0.0).to_bits(), 0x8000_0000);
    assert_eq!(silu(f32::INFINITY), f32::INFINITY);
    assert_eq!(silu(f32::NEG_INFINITY).to_bits(), 0x8000_0000);
    assert_eq!(silu(-121.0).to_bits(), 0x8000_0000);
    assert!(silu(-100.0) < 0.0, "SILU-NEG keeps the tail");
    assert!(sigmoid(f32::NAN).is_nan() && silu(f32::NAN).is_nan());
}

#[test]
fn sqrt_edges() {
    assert_eq!(sqrt(0.0).to_bits(), 0);
    assert_eq!(sqrt(-0.0).to_bits(), 0x8000_0000);
    assert_eq!(sqrt(f32::INFINITY), f32::INFINITY);
    assert!(sqrt(-1.0).is_nan() && sqrt(f32::NEG_INFINITY).is_nan() && sqrt(f32::NAN).is_nan());
    assert_eq!(sqrt(4.0), 2.0);
    assert_eq!(sqrt(f32::from_bits(1)), 2f32.powf(-74.5));
    assert_eq!(sqrt(128.0), 128f32.sqrt());
}
