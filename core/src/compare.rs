//! Comparison of a kernel's output with the oracle's.
//!
//! One pass over both slices gives every figure the gates print: max_abs,
//! rms_rel, NMSE, the count of differing bit patterns and the first
//! mismatch with its (row, column). A non-finite value on either side fails
//! the comparison outright (rule `CMP-FINITE`): a maximum taken over NaN
//! silently passes, so NaN is never allowed to reach one.
//!
//! Source: seed 000 (`compare`, `ArmResult`): rms_rel is
//! `max|got - want| / rms(want)`, the GEMM-standard relative measure,
//! because per-element relative error is meaningless where random outputs
//! cancel to near zero.

/// One element that differs, with its coordinates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// Flat index into the slices (elements).
    pub index: usize,
    /// `index / cols`.
    pub row: usize,
    /// `index % cols`.
    pub col: usize,
    /// The kernel's value.
    pub got: f32,
    /// The oracle's value.
    pub want: f32,
}

/// The figures of one comparison. See the module doc for definitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// Elements compared.
    pub n: usize,
    /// `max |got - want|` over the finite pairs.
    pub max_abs: f32,
    /// `max_abs / rms(want)`; `max_abs` itself when `rms(want) == 0`.
    pub rms_rel: f64,
    /// `sum (got - want)^2 / sum want^2` (f64 accumulation); `0` when both
    /// sums are zero, `inf` when only the denominator is.
    pub nmse: f64,
    /// Elements whose bit patterns differ (`+0.0` and `-0.0` differ).
    pub bit_mismatches: usize,
    /// The first element whose bit patterns differ.
    pub first_mismatch: Option<Mismatch>,
    /// Elements where either side is NaN or infinite.
    pub non_finite: usize,
    /// The first such element.
    pub first_non_finite: Option<Mismatch>,
}

impl Comparison {
    /// EXACT-arm verdict: every bit pattern equal and every value finite.
    pub fn bit_identical(&self) -> bool {
        self.bit_mismatches == 0 && self.non_finite == 0
    }

    /// RANDOM-arm verdict: `rms_rel < bound` and every value finite.
    pub fn within_rms_rel(&self, bound: f64) -> bool {
        self.non_finite == 0 && self.rms_rel < bound
    }
}

/// A comparison that cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareError {
    /// `got` and `want` have different lengths (elements).
    Len {
        /// `got.len()`.
        got: usize,
        /// `want.len()`.
        want: usize,
    },
    /// `cols` is 0, or does not divide the length.
    Cols {
        /// Elements per row passed.
        cols: usize,
        /// Slice length (elements).
        len: usize,
    },
}

impl core::fmt::Display for CompareError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            CompareError::Len { got, want } => {
                write!(f, "got has {got} elements, want has {want}")
            }
            CompareError::Cols { cols, len } => {
                write!(f, "{len} elements do not form rows of {cols}")
            }
        }
    }
}

/// Compares `got` with `want`, both `[rows x cols]` row-major f32.
///
/// # Errors
/// [`CompareError`] if the lengths differ or `cols` does not divide them.
pub fn compare_f32(got: &[f32], want: &[f32], cols: usize) -> Result<Comparison, CompareError> {
    if got.len() != want.len() {
        return Err(CompareError::Len {
            got: got.len(),
            want: want.len(),
        });
    }
    if cols == 0 || !got.len().is_multiple_of(cols) {
        return Err(CompareError::Cols {
            cols,
            len: got.len(),
        });
    }
    let mut r = Comparison {
        n: got.len(),
        max_abs: 0.0,
        rms_rel: 0.0,
        nmse: 0.0,
        bit_mismatches: 0,
        first_mismatch: None,
        non_finite: 0,
        first_non_finite: None,
    };
    let (mut err_sq, mut want_sq) = (0.0f64, 0.0f64);
    for (index, (&g, &w)) in got.iter().zip(want).enumerate() {
        let at = Mismatch {
            index,
            row: index / cols,
            col: index % cols,
            got: g,
            want: w,
        };
        if g.to_bits() != w.to_bits() {
            r.bit_mismatches += 1;
            r.first_mismatch.get_or_insert(at);
        }
        if !g.is_finite() || !w.is_finite() {
            r.non_finite += 1;
            r.first_non_finite.get_or_insert(at);
            continue;
        }
        let diff = (g as f64) - (w as f64);
        let a = f32::from_bits((g - w).to_bits() & 0x7FFF_FFFF);
        if a > r.max_abs {
            r.max_abs = a;
        }
        err_sq += diff * diff;
        want_sq += (w as f64) * (w as f64);
    }
    let rms = sqrt_f64(want_sq / r.n.max(1) as f64);
    r.rms_rel = if rms > 0.0 {
        r.max_abs as f64 / rms
    } else {
        r.max_abs as f64
    };
    r.nmse = if want_sq > 0.0 {
        err_sq / want_sq
    } else if err_sq == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    Ok(r)
}

/// Square root for the diagnostic figures above (not part of any kernel
/// contract): Newton's iteration from an exponent-halved first guess, which
/// converges to within an ulp. `f64::sqrt` is a `std` method, and these
/// figures are only ever compared with bounds.
pub(crate) fn sqrt_f64(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return x.max(0.0);
    }
    // Halve the exponent for a first guess within a factor of 2.
    let mut y = f64::from_bits(((x.to_bits() >> 1) + (1023u64 << 51)) & 0x7FFF_FFFF_FFFF_FFFF);
    for _ in 0..8 {
        y = 0.5 * (y + x / y);
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_fails_outright_even_when_bits_match() {
        let c = compare_f32(&[1.0, f32::NAN], &[1.0, f32::NAN], 2).unwrap();
        assert_eq!(c.non_finite, 1);
        assert!(!c.bit_identical());
        assert!(!c.within_rms_rel(1.0));
        assert_eq!(c.first_non_finite.unwrap().col, 1);
    }

    #[test]
    fn signed_zero_is_a_bit_mismatch() {
        let c = compare_f32(&[0.0, -0.0], &[0.0, 0.0], 1).unwrap();
        assert_eq!(c.bit_mismatches, 1);
        let m = c.first_mismatch.unwrap();
        assert_eq!((m.row, m.col), (1, 0));
        assert_eq!(c.max_abs, 0.0);
    }

    #[test]
    fn rms_rel_is_max_abs_over_rms_of_want() {
        // want = [3, 4] -> rms = sqrt(12.5); got differs by 0.5 at one place.
        let c = compare_f32(&[3.0, 4.5], &[3.0, 4.0], 2).unwrap();
        let expect = 0.5 / 12.5f64.powf(0.5);
        assert!((c.rms_rel - expect).abs() < 1e-12, "{}", c.rms_rel);
        assert!((c.nmse - 0.25 / 25.0).abs() < 1e-15);
    }

    #[test]
    fn sqrt_matches_within_an_ulp() {
        for &x in &[1e-300, 2.0, 12.5, 1e10, 3.3e300] {
            let y = sqrt_f64(x);
            let back = y * y;
            assert!(((back - x) / x).abs() < 4e-16, "{x}");
        }
    }

    #[test]
    fn bad_lengths_are_errors() {
        assert!(compare_f32(&[1.0], &[1.0, 2.0], 1).is_err());
        assert!(compare_f32(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], 2).is_err());
        assert!(compare_f32(&[], &[], 0).is_err());
    }
}
