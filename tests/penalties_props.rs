//! bolero property over the penalties contract (CPU): core's
//! `oracle::penalties::penalize` equals an independent evaluation on
//! every declaration, on logits and penalties drawn from arbitrary bit
//! patterns (zeros of both signs, infinities, NaN, subnormals and the
//! largest values among them) and counts up to 4096. The independent
//! side computes each binary32 basic operation in binary64 and rounds once
//! to binary32 (innocuous for `+ - * /`: binary64 has at least `2 * 24 +
//! 2` bits, Figueroa, "When is double rounding innocuous?", SIGNUM 1995)
//! and the fused multiply-add with std's `f32::mul_add`, not core's
//! `fma_f32`. The row's multiplier (rule `PEN-RECIP-ULPS`) is drawn from
//! core's `reciprocals` under 0 to 2 ulps and given to
//! `penalize_with_reciprocal`, and to the independent side as its `1/p`.

use arbitrary::{Arbitrary, Unstructured};
use oracle::penalties::{
    penalize, penalize_with_reciprocal, validate, Declared, Frequency, Order, Penalties,
    Repetition, Scope, Step,
};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Debug)]
struct Case {
    d: Declared,
    l: f32,
    p: Penalties,
    pc: u32,
    oc: u32,
    /// The row's multiplier: a member of `d.reciprocals(p.repetition)`.
    r: f32,
}

/// Values that meet the rules' edges.
const SPECIAL: [f32; 12] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::MIN_POSITIVE,
    -1.0e-45,
    f32::MAX,
    -f32::MAX,
    0.5,
];

fn value(u: &mut Unstructured<'_>) -> arbitrary::Result<f32> {
    let k: u8 = u.arbitrary()?;
    Ok(if k < 64 {
        SPECIAL[usize::from(k) % SPECIAL.len()]
    } else if k < 160 {
        // Ordinary magnitudes, 24 random significand bits.
        let m: u32 = u.arbitrary()?;
        let e = 120 + (m >> 28); // 2^-7 .. 2^8
        f32::from_bits((m & 0x8000_0000) | (e << 23) | (m & 0x7F_FFFF))
    } else {
        f32::from_bits(u.arbitrary()?)
    })
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 6] = u.arbitrary()?;
        let d = Declared {
            order: Order::ALL[usize::from(h[0]) % 6],
            scope: Scope::ALL[usize::from(h[1]) % 2],
            repetition: Repetition::ALL[usize::from(h[2]) % 4],
            frequency: Frequency::ALL[usize::from(h[3]) % Frequency::ALL.len()],
            recip_ulps: u32::from(h[4] % 3),
        };
        let l = value(u)?;
        let mut p = Penalties {
            repetition: value(u)?.abs(),
            frequency: value(u)?,
            presence: value(u)?,
        };
        // Refused penalties are redrawn as ordinary ones.
        if !(p.repetition.is_finite() && p.repetition > 0.0) {
            p.repetition = 1.3;
        }
        if !p.frequency.is_finite() {
            p.frequency = -0.7;
        }
        if !p.presence.is_finite() {
            p.presence = 0.4;
        }
        let count = |u: &mut Unstructured<'a>| -> arbitrary::Result<u32> {
            let c: u16 = u.arbitrary()?;
            Ok(if c & 1 == 0 {
                0
            } else {
                u32::from(c >> 1) % 4097
            })
        };
        let members = d.reciprocals(p.repetition);
        let r = members.as_slice()[usize::from(h[5]) % members.as_slice().len()];
        Ok(Case {
            d,
            l,
            p,
            pc: count(u)?,
            oc: count(u)?,
            r,
        })
    }
}

/// `a op b` in binary64, rounded once to binary32.
fn rn(x: f64) -> f32 {
    x as f32
}

fn independent(c: &Case) -> f32 {
    let w = f64::from;
    let mut x = c.l;
    let steps = c.d.order.steps();
    let mut fused = false;
    for (k, &step) in steps.iter().enumerate() {
        if fused {
            // The frequency step went into the repetition's FMA.
            fused = false;
            continue;
        }
        x = match step {
            Step::Repetition => {
                let seen = match c.d.scope {
                    Scope::PromptAndOutput => c.pc > 0 || c.oc > 0,
                    Scope::OutputOnly => c.oc > 0,
                };
                let p = c.p.repetition;
                // The row's multiplier: RN(1/p) in binary64 rounded once,
                // or the drawn member of PEN-RECIP-ULPS.
                let inv = if c.d.repetition.has_reciprocal() {
                    c.r
                } else {
                    rn(1.0 / w(p))
                };
                // PEN-FMA-SCALED: a product by a multiplier, then the
                // frequency step, fused.
                let multiplier = match c.d.repetition {
                    Repetition::Reciprocal if x > 0.0 => Some(inv),
                    Repetition::Reciprocal => Some(p),
                    Repetition::ReciprocalAll => Some(inv),
                    _ => None,
                };
                if c.d.frequency == Frequency::FmaScaled
                    && steps.get(k + 1) == Some(&Step::Frequency)
                    && multiplier.is_some()
                {
                    fused = true;
                    let s = if seen { multiplier.unwrap_or(1.0) } else { 1.0 };
                    let fc = rn(w(c.p.frequency) * w(rn(f64::from(c.oc))));
                    x.mul_add(s, -fc)
                } else if !seen {
                    x
                } else {
                    match c.d.repetition {
                        Repetition::Divide if x > 0.0 => rn(w(x) / w(p)),
                        Repetition::Reciprocal if x > 0.0 => rn(w(x) * w(inv)),
                        Repetition::Divide | Repetition::Reciprocal => rn(w(x) * w(p)),
                        Repetition::DivideAll => rn(w(x) / w(p)),
                        Repetition::ReciprocalAll => rn(w(x) * w(inv)),
                    }
                }
            }
            Step::Frequency => {
                let f = c.p.frequency;
                let n = rn(f64::from(c.oc));
                match c.d.frequency {
                    Frequency::Separate => rn(w(x) - w(rn(w(f) * w(n)))),
                    Frequency::Fma | Frequency::FmaScaled => (-f).mul_add(n, x),
                    Frequency::Accumulate => {
                        let mut s = 0.0f32;
                        for _ in 0..c.oc {
                            s = rn(w(s) + w(f));
                        }
                        rn(w(x) - w(s))
                    }
                    // Only a generated token's logit is written.
                    Frequency::Sparse | Frequency::FmaSparse if c.oc == 0 => x,
                    Frequency::Sparse => rn(w(x) - w(rn(w(f) * w(n)))),
                    Frequency::FmaSparse => (-f).mul_add(n, x),
                }
            }
            Step::Presence => {
                let q = c.p.presence;
                let m = if c.oc > 0 { 1.0 } else { 0.0 };
                match c.d.frequency {
                    Frequency::Separate | Frequency::Fma | Frequency::FmaScaled => {
                        rn(w(x) - w(rn(w(q) * m)))
                    }
                    Frequency::Accumulate => rn(w(x) - if c.oc > 0 { w(q) } else { 0.0 }),
                    Frequency::Sparse | Frequency::FmaSparse if c.oc == 0 => x,
                    Frequency::Sparse | Frequency::FmaSparse => rn(w(x) - w(q)),
                }
            }
        };
    }
    x
}

static RUN: AtomicUsize = AtomicUsize::new(0);
static ZERO_SIGN: AtomicUsize = AtomicUsize::new(0);
static OFF: AtomicUsize = AtomicUsize::new(0);

#[test]
fn core_penalize_matches_an_independent_binary64_evaluation() {
    bolero::check!()
        .with_arbitrary::<Case>()
        .with_iterations(50_000)
        .for_each(|c| {
            assert_eq!(validate(0, &c.p), Ok(()));
            let got = penalize_with_reciprocal(&c.d, c.l, &c.p, c.r, c.pc, c.oc);
            let want = independent(c);
            if c.r.to_bits() == (1.0 / c.p.repetition).to_bits() {
                // RN(1/p): penalize itself.
                let plain = penalize(&c.d, c.l, &c.p, c.pc, c.oc);
                assert!(plain.to_bits() == got.to_bits() || (plain.is_nan() && got.is_nan()));
                assert_eq!(c.r, rn(1.0 / f64::from(c.p.repetition)));
            } else {
                OFF.fetch_add(1, Ordering::Relaxed);
            }
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{c:?}: core {got:e} ({:#010x}), independent {want:e} ({:#010x})",
                got.to_bits(),
                want.to_bits()
            );
            RUN.fetch_add(1, Ordering::Relaxed);
            if got == 0.0 {
                ZERO_SIGN.fetch_add(1, Ordering::Relaxed);
            }
        });
    let n = RUN.load(Ordering::Relaxed);
    assert!(n >= 1000, "{n} cases");
    // Zero results (the sign rules) are reached, not only in theory.
    assert!(ZERO_SIGN.load(Ordering::Relaxed) * 100 >= n, "{n}");
    // Multipliers other than RN(1/p) are reached.
    assert!(OFF.load(Ordering::Relaxed) * 20 >= n, "{n}");
}
