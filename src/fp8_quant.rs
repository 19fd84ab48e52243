//! Cases for judging a per-token-group e4m3 activation quantizer (vLLM's
//! and SGLang's `per_token_group_quant_fp8`, DeepGEMM's
//! `per_token_cast_to_fp8`, seed 000's v2 quantizer) bit for bit under the
//! rule it declares ([`oracle::fp8_quant::GroupScale`]), and for naming
//! the known rules its output matches.
//!
//! A case: `x` `[m][k]` f32 (elements), groups of `group` columns; the
//! outputs `q` `[m][k]` e4m3 codes and `s` `[m][ceil(k / group)]` f32.

use crate::elementwise::Part;
use crate::rng::Rng;
use oracle::fp8_quant::{quantize_groups, GroupScale};

/// The data a case draws, each arm aimed at one choice that separates the
/// rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal elements, each group at its own magnitude (10^-3 to 10^3).
    Rand,
    /// The amax floor: one group in four all zero, one tiny (amax near
    /// 1e-12, under a 1e-10 floor), one with a single non-zero element,
    /// one normal.
    Zero,
    /// Rounding ties: in half the groups, elements within one f32 ulp of
    /// a midpoint between two e4m3 values after scaling by an inexact
    /// `amax / 448` (a multiply by the reciprocal and a division round
    /// some of them apart); in the other half, elements exactly at
    /// midpoints times the power of two a UE8M0 scale takes (round half
    /// to even against half away from zero).
    Ties,
    /// UE8M0's ceiling: half the groups with `amax / 448` exactly a power
    /// of two, half one f32 ulp above one (where a binary32 `log2` rounds
    /// back to the power for exponents of magnitude 4 and more).
    Pow2,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 4] = [Arm::Rand, Arm::Zero, Arm::Ties, Arm::Pow2];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Zero => "ZERO",
            Arm::Ties => "TIES",
            Arm::Pow2 => "POW2",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        Arm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("arm {s:?}: expected \"RAND\", \"ZERO\", \"TIES\" or \"POW2\""))
    }
}

/// The rules a check names when an output matches them: v2, the
/// division and UE8M0 rules at the floors the field passes (vLLM and
/// SGLang `1e-10`, DeepGEMM `1e-4`), and the pure-torch form's reciprocal
/// scale at `1e-10`.
pub const KNOWN: [GroupScale; 6] = [
    GroupScale::V2,
    GroupScale::Divide { eps: 1e-10 },
    GroupScale::Divide { eps: 1e-4 },
    GroupScale::Reciprocal { eps: 1e-10 },
    GroupScale::Ue8m0 { eps: 1e-10 },
    GroupScale::Ue8m0 { eps: 1e-4 },
];

/// A rule in one line: its formula and floor.
pub fn rule_label(rule: &GroupScale) -> String {
    match rule {
        GroupScale::V2 => "v2".into(),
        GroupScale::Divide { eps } => format!("divide(eps={eps:e})"),
        GroupScale::Reciprocal { eps } => format!("reciprocal(eps={eps:e})"),
        GroupScale::Ue8m0 { eps } => format!("ue8m0(eps={eps:e})"),
    }
}

/// The largest case: `m k` at most this.
pub const MAX_ELEMS: usize = 1 << 26;

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Rows (tokens).
    pub m: usize,
    /// Columns (features).
    pub k: usize,
    /// Columns per group.
    pub group: usize,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

impl Spec {
    /// The default seed of a shape and arm.
    pub fn base_seed(m: usize, k: usize, group: usize, arm: Arm) -> u64 {
        0xF8A0_0000_0000_0000
            ^ ((m as u64) << 36)
            ^ ((k as u64) << 12)
            ^ ((group as u64) << 2)
            ^ Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64
    }

    /// Groups per row.
    pub fn groups(&self) -> usize {
        self.k.div_ceil(self.group.max(1))
    }

    /// # Errors
    /// A zero dimension or group; a case over [`MAX_ELEMS`].
    pub fn valid(&self) -> Result<(), String> {
        if self.m == 0 || self.k == 0 || self.group == 0 {
            return Err(format!(
                "m={} k={} group={}: each must be at least 1",
                self.m, self.k, self.group
            ));
        }
        if self.m.saturating_mul(self.k) > MAX_ELEMS {
            return Err(format!(
                "m={} k={}: over the check's {MAX_ELEMS} elements",
                self.m, self.k
            ));
        }
        Ok(())
    }

    /// `x`, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::valid`].
    pub fn generate(&self) -> Result<Vec<f32>, String> {
        self.valid()?;
        let mut rng = Rng(self.seed);
        let mut x = vec![0f32; self.m * self.k];
        let g = self.group;
        for row in x.chunks_mut(self.k) {
            for grp in row.chunks_mut(g) {
                let mag = 10f32.powf(6.0 * (rng.normal().abs() % 1.0) - 3.0);
                let regime = (rng.normal().to_bits() >> 7) % 4;
                for v in grp.iter_mut() {
                    *v = rng.normal() * mag;
                }
                match self.arm {
                    Arm::Rand => {}
                    Arm::Zero => match regime {
                        0 => grp.fill(0.0),
                        1 => grp.iter_mut().for_each(|v| *v *= 1e-12 / mag),
                        2 => {
                            let one = grp[0];
                            grp.fill(0.0);
                            let at = (one.to_bits() as usize >> 3) % grp.len();
                            grp[at] = one;
                        }
                        _ => {}
                    },
                    Arm::Ties => {
                        // Regimes 0 and 1: amax 3 times a power of two times
                        // (1 + odd / 2^20), so amax / 448 is inexact, and
                        // elements nudged around midpoints times it.
                        // Regimes 2 and 3: amax 384 times a power of two p
                        // (amax / 448 in (p / 2, p], so a UE8M0 scale is
                        // p) and elements exactly midpoints times p.
                        let p = 2f32.powi((mag.log2().round() as i32).clamp(-20, 20));
                        let exact = regime >= 2;
                        let (amax, s) = if exact {
                            (384.0 * p, p)
                        } else {
                            let a = 3.0 * mag * (1.0 + ((regime as f32) * 2.0 + 1.0) / 1048576.0);
                            (a, a / 448.0)
                        };
                        for (i, v) in grp.iter_mut().enumerate() {
                            if i == 0 {
                                *v = amax;
                                continue;
                            }
                            // A midpoint between adjacent e4m3 magnitudes
                            // (normal range, 3 mantissa bits: odd / 16 at
                            // binade e), signed, then scaled and nudged by
                            // up to one ulp.
                            let e = (rng.normal().to_bits() % 13) as i32 - 5;
                            let odd = (2 * (rng.normal().to_bits() % 8) + 17) as f32;
                            let mid = odd / 16.0 * 2f32.powi(e);
                            let nudge = if exact {
                                0
                            } else {
                                (rng.normal().to_bits() % 3) as i32 - 1
                            };
                            let t = f32::from_bits((mid * s).to_bits().wrapping_add(nudge as u32));
                            *v = if rng.normal() < 0.0 { -t } else { t };
                        }
                    }
                    Arm::Pow2 => {
                        let p = 2f32.powi((regime as i32 * 7) - 12);
                        let amax = 448.0 * p;
                        let amax = if regime.is_multiple_of(2) {
                            amax
                        } else {
                            f32::from_bits(amax.to_bits() + 1)
                        };
                        let big = grp
                            .iter()
                            .fold(0f32, |a, v| a.max(v.abs()))
                            .max(f32::MIN_POSITIVE);
                        for v in grp.iter_mut() {
                            *v = *v / big * amax * 0.999;
                        }
                        grp[0] = amax;
                    }
                }
            }
        }
        Ok(x)
    }
}

/// The oracle's codes and scales for `x` under `rule`.
///
/// # Errors
/// As [`Spec::valid`].
pub fn reference(spec: &Spec, x: &[f32], rule: GroupScale) -> Result<(Vec<u8>, Vec<f32>), String> {
    spec.valid()?;
    let mut q = vec![0u8; x.len()];
    let mut s = vec![0f32; spec.m * spec.groups()];
    quantize_groups(x, spec.k, spec.group, rule, &mut q, &mut s).map_err(|e| e.to_string())?;
    Ok((q, s))
}

/// How a quantizer's output compares with the oracle's under one rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Codes compared, and those that differ.
    pub codes: (usize, usize),
    /// The scales, bit for bit (every limit 0; `first_diff`'s index is
    /// `row * groups + group`, `max_ulp` the largest distance in f32 ulps).
    pub scales: Part,
    /// The first differing code: `(row, column, got, want)`.
    pub first_code: Option<(usize, usize, u8, u8)>,
    /// The largest distance between a code and the oracle's, in e4m3
    /// steps (the ordered code scale: 1 is one rounding apart).
    pub max_code_steps: u32,
}

/// An e4m3 code on an ordered integer scale (sign-magnitude to two's
/// complement), so adjacent values are one apart.
fn ordered(c: u8) -> i32 {
    let mag = i32::from(c & 0x7F);
    if c & 0x80 != 0 {
        -mag
    } else {
        mag
    }
}

impl Verdict {
    /// Compares `q` and `s` with the oracle's `want` (`spec`'s shapes).
    pub fn judge(spec: &Spec, q: &[u8], s: &[f32], want: &(Vec<u8>, Vec<f32>)) -> Verdict {
        let mut v = Verdict {
            codes: (want.0.len(), 0),
            scales: Part::judge(s, &want.1, &vec![0.0; want.1.len()]),
            ..Verdict::default()
        };
        for (i, (&g, &w)) in q.iter().zip(&want.0).enumerate() {
            if g != w {
                v.codes.1 += 1;
                v.first_code.get_or_insert((i / spec.k, i % spec.k, g, w));
                v.max_code_steps = v.max_code_steps.max(ordered(g).abs_diff(ordered(w)));
            }
        }
        v
    }

    /// Every code and every scale bit for bit.
    pub fn pass(&self) -> bool {
        self.codes.1 == 0 && self.scales.bit_exact()
    }
}

/// The rules of [`KNOWN`] whose output equals `q` and `s` bit for bit.
pub fn identify(spec: &Spec, x: &[f32], q: &[u8], s: &[f32]) -> Vec<GroupScale> {
    KNOWN
        .into_iter()
        .filter(|rule| {
            reference(spec, x, *rule)
                .map(|want| Verdict::judge(spec, q, s, &want).pass())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(m: usize, k: usize, arm: Arm) -> Spec {
        Spec {
            m,
            k,
            group: 128,
            arm,
            seed: Spec::base_seed(m, k, 128, arm),
        }
    }

    /// Each arm separates the rules it is aimed at: ZERO tells v2 from a
    /// floor and one floor from another, TIES a multiply from a division,
    /// POW2 UE8M0 from the plain division.
    #[test]
    fn each_arm_separates_the_rules_it_aims_at() {
        let differ = |arm: Arm, a: GroupScale, b: GroupScale| {
            let sp = spec(16, 1024, arm);
            let x = sp.generate().unwrap();
            let wa = reference(&sp, &x, a).unwrap();
            let wb = reference(&sp, &x, b).unwrap();
            !Verdict::judge(&sp, &wa.0, &wa.1, &wb).pass()
        };
        let v2 = GroupScale::V2;
        let (d10, d4) = (
            GroupScale::Divide { eps: 1e-10 },
            GroupScale::Divide { eps: 1e-4 },
        );
        let u10 = GroupScale::Ue8m0 { eps: 1e-10 };
        assert!(differ(Arm::Zero, v2, d10));
        assert!(differ(Arm::Zero, d10, d4));
        assert!(differ(Arm::Ties, v2, d10));
        assert!(differ(Arm::Pow2, d10, u10));
        assert!(differ(Arm::Rand, d10, u10));
        // torch's scalar division (a multiply by fl(1/448)) parts from
        // the IEEE division on RAND's scales already.
        assert!(differ(
            Arm::Rand,
            d10,
            GroupScale::Reciprocal { eps: 1e-10 }
        ));
        // And RAND alone cannot tell a multiply from a division: the
        // arms above are needed.
        let sp = spec(16, 1024, Arm::Ties);
        let x = sp.generate().unwrap();
        let w = reference(&sp, &x, v2).unwrap();
        let mut ids = identify(&sp, &x, &w.0, &w.1);
        assert_eq!(ids, vec![v2]);
        let w = reference(&sp, &x, d10).unwrap();
        ids = identify(&sp, &x, &w.0, &w.1);
        assert!(ids.contains(&d10) && !ids.contains(&v2), "{ids:?}");
    }

    /// ZERO's four regimes at one group in four each.
    #[test]
    fn the_zero_arm_draws_its_regimes_at_their_rates() {
        let sp = spec(64, 2048, Arm::Zero);
        let x = sp.generate().unwrap();
        let groups: Vec<&[f32]> = x.chunks(128).collect();
        let n = groups.len() as f64;
        let share = |f: &dyn Fn(&[f32]) -> bool| groups.iter().filter(|g| f(g)).count() as f64 / n;
        let amax = |g: &[f32]| g.iter().fold(0f32, |a, v| a.max(v.abs()));
        let near = |got: f64| (got - 0.25).abs() < 0.06;
        assert!(near(share(&|g| amax(g) == 0.0)));
        assert!(near(share(&|g| amax(g) > 0.0 && amax(g) < 1e-10)));
        assert!(near(share(
            &|g| g.iter().filter(|v| **v != 0.0).count() == 1
        )));
    }

    #[test]
    fn the_judge_counts_and_places_differences() {
        let sp = spec(3, 300, Arm::Rand);
        let x = sp.generate().unwrap();
        let want = reference(&sp, &x, GroupScale::V2).unwrap();
        let (mut q, mut s) = want.clone();
        assert!(Verdict::judge(&sp, &q, &s, &want).pass());
        q[301] ^= 1;
        s[4] = f32::from_bits(s[4].to_bits() + 2);
        let v = Verdict::judge(&sp, &q, &s, &want);
        assert_eq!((v.codes.1, v.scales.n - v.scales.identical), (1, 1));
        assert_eq!(v.first_code.unwrap().0, 1);
        assert_eq!(v.first_code.unwrap().1, 1);
        assert_eq!(v.scales.first_diff.unwrap().0, 4);
        assert_eq!((v.max_code_steps, v.scales.max_ulp), (1, 2));
        assert!(spec(0, 1, Arm::Rand).generate().is_err());
        assert!(Spec { group: 0, ..sp }.generate().is_err());
        assert_eq!(Arm::parse("ties"), Ok(Arm::Ties));
    }
}
