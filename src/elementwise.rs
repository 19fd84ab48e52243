//! One output against the oracle's, element by element, each element
//! against its own limit (a written error bound, or 0 for bits): the
//! comparison of the checks that judge the field's kernels
//! (`gdn::rule`, `gdn::conv_update`, `fp8_quant`).

/// How one output compares with the oracle's, element by element.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Part {
    /// Elements compared.
    pub n: usize,
    /// Elements with the oracle's bits.
    pub identical: usize,
    /// Elements that are NaN or infinite where the oracle's differ (the
    /// oracle's are finite on every check's data).
    pub non_finite: usize,
    /// The largest distance in f32 ulps (ordered-integer distance; a
    /// non-finite element counts as `u32::MAX`).
    pub max_ulp: u64,
    /// Elements over their limit (non-finite ones included).
    pub over: usize,
    /// The largest `|got - want| / limit` (infinite for a non-finite
    /// element).
    pub worst: f64,
    /// Where `worst` is: `(index, got, want, limit)`.
    pub worst_at: Option<(usize, f32, f32, f64)>,
    /// The first element over its limit: `(index, got, want, limit)`.
    pub first_over: Option<(usize, f32, f32, f64)>,
    /// The first element whose bits differ from the oracle's.
    pub first_diff: Option<(usize, f32, f32, f64)>,
}

/// The distance of `a` from `b` in f32 ulps (through the ordered integer
/// view, so that -0 and +0 are 0 apart and the scale crosses zero).
pub fn ulps(a: f32, b: f32) -> u64 {
    let ord = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 {
            -i64::from(i & 0x7FFF_FFFF)
        } else {
            i64::from(i)
        }
    };
    (ord(a) - ord(b)).unsigned_abs()
}

impl Part {
    /// Compares `got` with `want` element by element against `limit`.
    pub fn judge(got: &[f32], want: &[f32], limit: &[f64]) -> Part {
        let mut p = Part {
            n: want.len(),
            ..Part::default()
        };
        for (i, ((&g, &w), &l)) in got.iter().zip(want).zip(limit).enumerate() {
            if g.to_bits() == w.to_bits() {
                p.identical += 1;
                continue;
            }
            p.first_diff.get_or_insert((i, g, w, l));
            let (u, ratio) = if g.is_finite() {
                (ulps(g, w), (f64::from(g) - f64::from(w)).abs() / l)
            } else {
                p.non_finite += 1;
                (u64::from(u32::MAX), f64::INFINITY)
            };
            p.max_ulp = p.max_ulp.max(u);
            if p.worst_at.is_none() || ratio > p.worst {
                p.worst = ratio;
                p.worst_at = Some((i, g, w, l));
            }
            if ratio > 1.0 {
                p.over += 1;
                p.first_over.get_or_insert((i, g, w, l));
            }
        }
        p
    }

    /// Passes under the bound: no element over its limit.
    pub fn within(&self) -> bool {
        self.over == 0 && self.non_finite == 0
    }

    /// Passes bit for bit.
    pub fn bit_exact(&self) -> bool {
        self.identical == self.n
    }
}
