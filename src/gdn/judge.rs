//! The judge: the oracle's six outputs of a packed call
//! (`oracle::gdn::rows::decode_rows`), and the comparison of any two sets
//! of outputs, element by element.
//!
//! Two rules ([`Bits`]): between two device paths (packed against chained)
//! every bit must agree, as the seed asserts; between a kernel and the
//! oracle every bit must agree except that any NaN equals any NaN, because
//! NaN payloads are not part of the contract (`core/src/gdn/sqrt.rs`: "NaN
//! bits are not part of any contract in this module"; the device's default
//! NaN is `0x7FFFFFFF`, the host's `0xFFC00000` or `0x7FC00000`). An
//! infinity must match exactly, sign included.

use super::generate::CaseData;
use super::pool::POOL;
use oracle::gdn::rows::{decode_row, decode_rows, PackedOutputs, RowInputs, RowOutputs};
use oracle::gdn::scan::{state_after_row, StateIo, StatePair, StateSlot};
use rayon::prelude::*;

/// The names of the six outputs, in [`Six::parts`] order (seed 003 lines
/// 257-264).
pub const OUTPUTS: [&str; 6] = [
    "conv outputs",
    "scan outputs",
    "final state",
    "final ring",
    "conv snapshots",
    "state snapshots",
];

/// The six outputs of `t` rows (elements, f32): `conv_out [t][C]`,
/// `o [t][V]`, the final state `[N]` (from the `PARITY` slot), the final
/// ring `[C][P]`, `snap_conv [t-1][C][P]`, `snap_state [t-1][N]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Six {
    /// `[t][C]`.
    pub conv_out: Vec<f32>,
    /// `[t][V]`.
    pub o: Vec<f32>,
    /// `[N]`.
    pub state: Vec<f32>,
    /// `[C][P]`.
    pub ring: Vec<f32>,
    /// `[t-1][C][P]`.
    pub snap_conv: Vec<f32>,
    /// `[t-1][N]`.
    pub snap_state: Vec<f32>,
}

impl Six {
    /// The outputs in [`OUTPUTS`] order.
    pub fn parts(&self) -> [&[f32]; 6] {
        [
            &self.conv_out,
            &self.o,
            &self.state,
            &self.ring,
            &self.snap_conv,
            &self.snap_state,
        ]
    }
}

/// How two values must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bits {
    /// Every bit (device against device).
    Exact,
    /// Every bit, except that any NaN equals any NaN (kernel against
    /// oracle).
    NanAny,
}

impl Bits {
    /// Whether `got` and `want` agree under this rule.
    pub fn same(self, got: f32, want: f32) -> bool {
        got.to_bits() == want.to_bits() || (self == Bits::NanAny && got.is_nan() && want.is_nan())
    }

    /// The rule's name in a report.
    pub fn describe(self) -> &'static str {
        match self {
            Bits::Exact => "bit-identical",
            Bits::NanAny => "bit-identical, any NaN = any NaN",
        }
    }
}

/// One compared output.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The output's name.
    pub what: String,
    /// Elements compared (the expected length).
    pub len: usize,
    /// Elements that differ (all of them if the lengths differ).
    pub diffs: usize,
    /// The first difference: `(index, got, want)`.
    pub first: Option<(usize, f32, f32)>,
    /// The length received, when it is not `len`.
    pub got_len: Option<usize>,
}

impl Diff {
    /// Whether nothing differs.
    pub fn pass(&self) -> bool {
        self.diffs == 0 && self.got_len.is_none()
    }
}

/// Compares `got` with `want` element by element under `rule`.
pub fn compare(what: &str, got: &[f32], want: &[f32], rule: Bits) -> Diff {
    if got.len() != want.len() {
        return Diff {
            what: what.to_string(),
            len: want.len(),
            diffs: want.len().max(1),
            first: None,
            got_len: Some(got.len()),
        };
    }
    let mut d = Diff {
        what: what.to_string(),
        len: want.len(),
        diffs: 0,
        first: None,
        got_len: None,
    };
    // Spans of a long output are compared on rayon's threads (a case's
    // snapshots hold megabytes), then counted in order, so the count and
    // the first difference are those of one walk from the start.
    let spans: Vec<SpanDiffs> = if want.len() > COMPARE_SPAN {
        got.par_chunks(COMPARE_SPAN)
            .zip(want.par_chunks(COMPARE_SPAN))
            .enumerate()
            .map(|(s, (gs, ws))| compare_span(gs, ws, rule, s * COMPARE_SPAN))
            .collect()
    } else {
        vec![compare_span(got, want, rule, 0)]
    };
    for (diffs, first) in spans {
        d.diffs += diffs;
        if d.first.is_none() {
            d.first = first;
        }
    }
    d
}

/// One span's differences and the first of them, `(index, got, want)`.
type SpanDiffs = (usize, Option<(usize, f32, f32)>);

/// [`compare`] of one span starting at element `at` of its output: the
/// differences and the first (its index counted from the output's start).
fn compare_span(got: &[f32], want: &[f32], rule: Bits, at: usize) -> SpanDiffs {
    let (mut diffs, mut first) = (0, None);
    // A block whose bits all agree passes under either rule; only the
    // other blocks are walked element by element under `rule`. (The walk
    // alone, a branch per element, cost more than the oracle on a case's
    // megabytes of snapshots: 54 ms of a case's 67 ms of host time in the
    // ASan fuzz build.)
    for (b, (gb, wb)) in got
        .chunks(COMPARE_BLOCK)
        .zip(want.chunks(COMPARE_BLOCK))
        .enumerate()
    {
        if same_bits_all(gb, wb) {
            continue;
        }
        for (i, (&g, &w)) in gb.iter().zip(wb).enumerate() {
            if !rule.same(g, w) {
                diffs += 1;
                first.get_or_insert((at + b * COMPARE_BLOCK + i, g, w));
            }
        }
    }
    (diffs, first)
}

/// Elements of the spans [`compare`] hands to rayon's threads (a multiple
/// of [`COMPARE_BLOCK`]).
const COMPARE_SPAN: usize = 64 * COMPARE_BLOCK;

/// Elements per block of [`compare`]'s bitwise pre-check.
const COMPARE_BLOCK: usize = 1024;

/// Whether `got` and `want` (equal lengths) agree in every bit: one
/// `memcmp` of the bits (`[u32]` equality), which an ASan build checks as
/// one range instead of element by element.
fn same_bits_all(got: &[f32], want: &[f32]) -> bool {
    bytemuck::cast_slice::<f32, u32>(got) == bytemuck::cast_slice::<f32, u32>(want)
}

/// Whether `v` holds a NaN or an infinity (exponent bits all ones): the
/// bits ORed together without a branch per element, so it runs
/// vectorised (a case's outputs hold megabytes).
pub fn any_nonfinite(v: &[f32]) -> bool {
    v.iter().fold(0u32, |acc, x| {
        acc | u32::from(!x.to_bits() & 0x7F80_0000 == 0)
    }) != 0
}

/// The six comparisons of `got` against `want` (made in parallel, listed
/// in [`OUTPUTS`] order).
pub fn compare_six(got: &Six, want: &Six, rule: Bits) -> Vec<Diff> {
    let (g, w) = (got.parts(), want.parts());
    (0..6)
        .into_par_iter()
        .map(|i| compare(OUTPUTS[i], g[i], w[i], rule))
        .collect()
}

fn slot<'a>(s: StateSlot, canonical: &'a [f32], alt: &'a [f32]) -> &'a [f32] {
    match s {
        StateSlot::Canonical => canonical,
        StateSlot::Alt => alt,
    }
}

/// The oracle's outputs: one `decode_rows` call from `ring0` and `state0`
/// in the canonical buffer (alt zero), through its fast path
/// [`crate::gdn_fast::decode_rows_fast`] (bit-identical, NaN payloads
/// aside), or the spec's own when [`crate::ENV_ORACLE`] is `spec`.
pub fn reference(d: &CaseData) -> Six {
    reference_with(d, !crate::use_spec_oracle())
}

/// [`reference()`] through the spec's `decode_rows` itself.
pub fn reference_spec(d: &CaseData) -> Six {
    reference_with(d, false)
}

fn reference_with(d: &CaseData, fast: bool) -> Six {
    let s = d.shape;
    let n = s.state_len();
    // The working buffers and outputs from the host pool, initialised as
    // fresh ones would be (copies, zeros).
    let (mut ring, mut canonical, mut alt) = (
        POOL.copy_of(&d.ring0),
        POOL.copy_of(&d.state0),
        POOL.zeros(n),
    );
    let mut six = Six {
        conv_out: POOL.zeros(s.t() * s.conv_dim()),
        o: POOL.zeros(s.t() * s.value_dim()),
        snap_conv: POOL.zeros(s.snapshots() * s.ring_len()),
        snap_state: POOL.zeros(s.snapshots() * n),
        ..Six::default()
    };
    let input = RowInputs {
        qkv: &d.qkv,
        beta_raw: &d.beta_raw,
        alpha: &d.alpha,
    };
    let out = PackedOutputs {
        conv_out: &mut six.conv_out,
        o: &mut six.o,
        snap_conv: &mut six.snap_conv,
        snap_state: &mut six.snap_state,
    };
    let pair = StatePair {
        canonical: &mut canonical,
        alt: &mut alt,
    };
    let last = if fast {
        crate::gdn_fast::decode_rows_fast(&s, &d.params(), &input, &mut ring, pair, out)
    } else {
        let mut scratch = vec![0f32; s.scratch_len()];
        decode_rows(&s, &d.params(), &input, &mut ring, pair, out, &mut scratch)
    }
    .expect("generated data fit their shape");
    // The final state is the buffer that holds it; the other goes back.
    let (state, other) = match last {
        StateSlot::Canonical => (canonical, alt),
        StateSlot::Alt => (alt, canonical),
    };
    POOL.give(other);
    six.state = state;
    six.ring = ring;
    six
}

/// The oracle's per-row program: `t` chained `decode_row` calls
/// alternating the state buffers (row `r` from the slot
/// `state_after_row(r - 1)` into `state_after_row(r)`), the ring and the
/// state copied after every row but the last (seed 003 lines 96-147).
/// Rule `PACKED-EQ-CHAINED` says this equals [`reference()`] bit for bit.
pub fn oracle_chained(d: &CaseData) -> Six {
    let s = d.shape;
    let (t, c, nv, vd, n) = (s.t(), s.conv_dim(), s.num_v(), s.value_dim(), s.state_len());
    let mut ring = d.ring0.clone();
    let mut bufs = [d.state0.clone(), vec![0f32; n]];
    let mut six = Six::default();
    let mut scratch = vec![0f32; s.scratch_len()];
    let (mut conv_out, mut o) = (vec![0f32; c], vec![0f32; vd]);
    for r in 0..t {
        let input = RowInputs {
            qkv: &d.qkv[r * c..(r + 1) * c],
            beta_raw: &d.beta_raw[r * nv..(r + 1) * nv],
            alpha: &d.alpha[r * nv..(r + 1) * nv],
        };
        // Row r reads buffer r % 2 and writes buffer (r + 1) % 2.
        let [b0, b1] = &mut bufs;
        let io = if r % 2 == 0 {
            StateIo::Alternate { src: b0, dst: b1 }
        } else {
            StateIo::Alternate { src: b1, dst: b0 }
        };
        let out = RowOutputs {
            conv_out: &mut conv_out,
            o: &mut o,
        };
        decode_row(&s, &d.params(), &input, &mut ring, io, out, &mut scratch)
            .expect("generated data fit their shape");
        six.conv_out.extend_from_slice(&conv_out);
        six.o.extend_from_slice(&o);
        let after = slot(state_after_row(r), &bufs[0], &bufs[1]);
        if r + 1 < t {
            six.snap_conv.extend_from_slice(&ring);
            six.snap_state.extend_from_slice(after);
        } else {
            six.state = after.to_vec();
        }
    }
    six.ring = ring;
    six
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bitwise pre-check skips only blocks that agree in every bit:
    /// differences in the first and a later block are all counted, the
    /// first with its index; two NaNs of other payloads pass under
    /// `NanAny` and fail under `Exact`; `-0.0` never equals `+0.0`; an
    /// output of several spans (compared in parallel) counts every
    /// difference and names the lowest index first.
    #[test]
    fn compare_counts_every_difference_across_blocks() {
        let want = vec![1.0f32; 3 * COMPARE_BLOCK + 5];
        let mut got = want.clone();
        got[7] = -0.0;
        got[2 * COMPARE_BLOCK + 3] = 2.0;
        got[3 * COMPARE_BLOCK + 4] = 3.0;
        let d = compare("x", &got, &want, Bits::NanAny);
        assert_eq!((d.diffs, d.first), (3, Some((7, -0.0, 1.0))));
        let mut w = want.clone();
        w[COMPARE_BLOCK + 1] = f32::from_bits(0x7FC0_0000);
        let mut g = want.clone();
        g[COMPARE_BLOCK + 1] = f32::from_bits(0x7FFF_FFFF);
        assert!(compare("nan", &g, &w, Bits::NanAny).pass());
        let d = compare("nan", &g, &w, Bits::Exact);
        assert_eq!(
            (d.diffs, d.first.map(|f| f.0)),
            (1, Some(COMPARE_BLOCK + 1))
        );
        assert!(compare("same", &want, &want, Bits::Exact).pass());
        // Across the spans compared in parallel: every one counted, the
        // first the lowest index.
        let want = vec![1.0f32; 3 * COMPARE_SPAN + 7];
        let mut got = want.clone();
        for i in [COMPARE_SPAN + 2, 5, 3 * COMPARE_SPAN + 6, 2 * COMPARE_SPAN] {
            got[i] = 0.5;
        }
        let d = compare("spans", &got, &want, Bits::Exact);
        assert_eq!((d.diffs, d.first), (4, Some((5, 0.5, 1.0))));
        assert!(!compare("len", &want[1..], &want, Bits::Exact).pass());
    }

    /// NaN and both infinities count as non-finite; `f32::MAX`, zeros and
    /// subnormals do not.
    #[test]
    fn any_nonfinite_sees_nan_and_infinities_only() {
        let finite = [0.0, -0.0, f32::MAX, f32::MIN, f32::from_bits(1), 1.0];
        assert!(!any_nonfinite(&finite));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut v = finite.to_vec();
            v.insert(3, bad);
            assert!(any_nonfinite(&v), "{bad}");
        }
    }
}
