//! The judge: the oracle's tables (or its refusal) against the device's,
//! pointer for pointer, scale bit for bit, refusal for refusal.

use super::generate::CaseData;
use device::cuda::DeviceError;
use oracle::moe_tables::{vrows_tables, Plane, TablesError, PLANES};

/// Both tables, plane-major (gate, up, down), `3 * n_pairs` each.
#[derive(Clone, Debug, PartialEq)]
pub struct Tables {
    /// Pointers (bytes).
    pub ptrs: Vec<u64>,
    /// Scales.
    pub scales: Vec<f32>,
}

/// The oracle's answer for `data`.
///
/// # Errors
/// The contract's refusal.
pub fn reference(data: &CaseData) -> Result<Tables, TablesError> {
    let n = data.experts.len() * PLANES;
    let mut t = Tables {
        ptrs: vec![0; n],
        scales: vec![0.0; n],
    };
    vrows_tables(
        &data.bank(),
        &data.experts,
        &data.weights,
        &mut t.ptrs,
        &mut t.scales,
    )?;
    Ok(t)
}

/// One differing table entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Entry {
    /// A pointer: host (oracle) and device values.
    Ptr {
        /// The oracle's pointer.
        host: u64,
        /// The device's pointer.
        dev: u64,
    },
    /// A scale: host (oracle) and device values (compared as bits).
    Scale {
        /// The oracle's scale.
        host: f32,
        /// The device's scale.
        dev: f32,
    },
}

/// Where an entry differs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mismatch {
    /// The plane.
    pub plane: Plane,
    /// The pair.
    pub pair: usize,
    /// The pair's expert id.
    pub expert: i32,
    /// The values.
    pub entry: Entry,
}

/// Mismatches kept for the report (all are counted).
pub const KEEP_MISMATCHES: usize = 6;

/// The outcome of one case.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Pairs.
    pub n_pairs: usize,
    /// The oracle's refusal, if it refused.
    pub want_err: Option<TablesError>,
    /// The device's error as text, if it returned one.
    pub got_err: Option<String>,
    /// The contract error inside the device's error, if any.
    pub got_tables_err: Option<TablesError>,
    /// Pointers that differ (when both built tables).
    pub ptr_mismatches: usize,
    /// Scales whose bits differ (when both built tables).
    pub scale_mismatches: usize,
    /// The first few mismatches, in table order.
    pub first: Vec<Mismatch>,
    /// Table entries compared per table (`3 * n_pairs`) when both built.
    pub compared: usize,
}

impl Verdict {
    /// Judges the device's result against the oracle's.
    pub fn judge(
        data: &CaseData,
        got: &Result<Tables, DeviceError>,
        want: &Result<Tables, TablesError>,
    ) -> Verdict {
        let n = data.experts.len();
        let mut v = Verdict {
            n_pairs: n,
            want_err: want.as_ref().err().copied(),
            got_err: got.as_ref().err().map(|e| e.to_string()),
            got_tables_err: got
                .as_ref()
                .err()
                .and_then(DeviceError::moe_tables_error)
                .copied(),
            ptr_mismatches: 0,
            scale_mismatches: 0,
            first: Vec::new(),
            compared: 0,
        };
        let (Ok(g), Ok(w)) = (got, want) else {
            return v;
        };
        v.compared = PLANES * n;
        if g.ptrs.len() != v.compared || g.scales.len() != v.compared {
            v.ptr_mismatches = v.compared; // a wrong-length download: nothing lines up
            return v;
        }
        for i in 0..PLANES * n {
            let (plane, pair) = (Plane::ALL[i / n], i % n);
            let expert = data.experts[pair];
            let mut note = |entry| {
                if v.first.len() < KEEP_MISMATCHES {
                    v.first.push(Mismatch {
                        plane,
                        pair,
                        expert,
                        entry,
                    });
                }
            };
            if g.ptrs[i] != w.ptrs[i] {
                note(Entry::Ptr {
                    host: w.ptrs[i],
                    dev: g.ptrs[i],
                });
                v.ptr_mismatches += 1;
            }
            // BITS: a scale one ulp off is a different program.
            if g.scales[i].to_bits() != w.scales[i].to_bits() {
                note(Entry::Scale {
                    host: w.scales[i],
                    dev: g.scales[i],
                });
                v.scale_mismatches += 1;
            }
        }
        v
    }

    /// Whether the device agrees: both built identical tables, or both
    /// refused with the same contract error.
    pub fn pass(&self) -> bool {
        match (&self.want_err, &self.got_err) {
            (None, None) => self.ptr_mismatches == 0 && self.scale_mismatches == 0,
            (Some(w), Some(_)) => self.got_tables_err.as_ref() == Some(w),
            _ => false,
        }
    }

    /// Whether the oracle refused the case.
    pub fn refused(&self) -> bool {
        self.want_err.is_some()
    }
}
