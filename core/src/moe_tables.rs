//! MoE verify-rows pointer and scale tables (seed 002,
//! `moe_vrows_tables_from_sel`).
//!
//! In a speculative-decode verify step every (row, selected expert) pair
//! needs the addresses of that expert's gate, up and down weight rows and
//! the scales that go with them. This contract defines both tables; the
//! kernel in `cu/moe_tables.cu` builds them on the device (so the router's
//! output never has to be read back by the host) and must agree with
//! [`vrows_tables`] pointer for pointer and scale bit for bit.
//!
//! # Shapes
//!
//! - `n_pairs` pairs: `experts[p]` (i32, an expert id) and `weights[p]`
//!   (f32, the routing weight), `p = 0 .. n_pairs`.
//! - A [`Bank`] of `n_expert` experts: for each [`Plane`] (gate, up, down) a
//!   [`Slab`] with a base address and a per-expert stride (both bytes), and
//!   optionally three macro-scale planes of `n_expert` f32 each.
//! - Outputs, in plane order gate, up, down, each plane `n_pairs` long:
//!   `ptrs[plane * n_pairs + p]` (u64 bytes) and
//!   `scales[plane * n_pairs + p]` (f32), so both are `3 * n_pairs` long.
//!
//! # Order of operations
//!
//! 1. Lengths are checked in signature order (`weights`, the macro planes
//!    gate, up, down, `ptrs`, `scales`); the first wrong one is the error.
//! 2. Every pair is checked in increasing `p` before anything is written:
//!    first the expert id (`0 <= e < n_expert`), then for gate, up and down
//!    in that order whether `base + e * stride` fits in 64 bits. The first
//!    failing check of the lowest failing pair is the error.
//! 3. Then for every pair, with `e = experts[p]`, `w = weights[p]`:
//!    - `ptrs[plane][p] = base[plane] + e * stride[plane]`, exact integer
//!      arithmetic in 64 bits (rule `PTR-64`);
//!    - `scales[gate][p] = macro_g[e]`, `scales[up][p] = macro_u[e]`: copies
//!      of the stored bits, no arithmetic (rule `SCALE-COPY`);
//!    - `scales[down][p] = w * macro_d[e]`: one IEEE 754 binary32 multiply,
//!      round to nearest even, gradual underflow (no flush to zero), with a
//!      NaN result replaced by [`CANONICAL_NAN`] (rules `DOWN-1`, `NAN-1`);
//!    - with no macro planes every macro reads as 1.0 (rule `NO-MACRO`).
//!
//! # Rules
//!
//! - `PTR-64`: the product `e * stride` and the sum are computed in 64 bits
//!   (the classic bug is a 32-bit product: it wraps once a slab passes
//!   4 GiB and the kernel reads another expert's bytes). A sum that would
//!   exceed `u64::MAX` is the error [`TablesError::AddressOverflow`], never
//!   a wrapped pointer.
//! - `RANGE`: an expert id outside `0 .. n_expert` (negative included) is
//!   [`TablesError::ExpertRange`]; no table is produced, so no macro plane
//!   is ever read out of bounds.
//! - `ALL-OR-NOTHING`: on any error the outputs are left untouched.
//! - `SCALE-COPY`: gate and up scales are the macro planes' bits, NaN
//!   payloads, signs and subnormals included.
//! - `DOWN-1`: the down scale is one multiply, so `w * macro_d` keeps the
//!   sign rule of IEEE multiplication (a negative weight gives a negative
//!   scale, `-0.0 * 1.0 = -0.0`), keeps subnormal products (`--ftz=false`
//!   on the device), and overflows to infinity.
//! - `NAN-1`: NaN propagates: if `w` or `macro_d[e]` is NaN, or the product
//!   is `0 * inf`, the down scale is NaN, and its bits are [`CANONICAL_NAN`]
//!   (`0x7FFFFFFF`) whatever the input's payload or sign. IEEE 754 (clause
//!   6.2.3) only says a NaN operand's payload *should* be kept, and CPUs and
//!   GPUs differ there; a canonical NaN makes the table comparable bit for
//!   bit. `0x7FFFFFFF` is the NaN the CUDA f32 units return; the kernel
//!   still canonicalizes explicitly rather than relying on it.
//! - `NO-MACRO`: a bank without macro planes gives gate and up scales of
//!   exactly 1.0 and a down scale of `w * 1.0` (so NaN weights still give
//!   [`CANONICAL_NAN`]); the kernel must not read the placeholder planes.
//!
//! Source: seed 002 (`moe_vrows_tables_from_sel`'s gate and its host
//! arithmetic from `moe_vrows_pairs_q8`'s `VrowsSel::Host` arm); the range
//! and overflow errors and the NaN rule are this project's, because the
//! seed's host arithmetic indexes out of bounds and wraps instead.

/// Planes per table: gate, up, down.
pub const PLANES: usize = 3;

/// The down scale's bits when it is NaN (rule `NAN-1`): positive, quiet,
/// all payload bits set.
pub const CANONICAL_NAN: u32 = 0x7FFF_FFFF;

/// One of the three projections of an expert, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Plane {
    /// The gate projection (plane 0).
    Gate = 0,
    /// The up projection (plane 1).
    Up = 1,
    /// The down projection (plane 2).
    Down = 2,
}

impl Plane {
    /// The three planes in table order.
    pub const ALL: [Plane; PLANES] = [Plane::Gate, Plane::Up, Plane::Down];

    /// `"gate"`, `"up"` or `"down"`.
    pub const fn name(self) -> &'static str {
        match self {
            Plane::Gate => "gate",
            Plane::Up => "up",
            Plane::Down => "down",
        }
    }

    /// The plane's index in the tables, 0, 1 or 2.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Where one projection's experts live: expert `e`'s weight rows start at
/// `base + e * stride` (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slab {
    /// Address of expert 0's rows (bytes).
    pub base: u64,
    /// Distance between consecutive experts (bytes).
    pub stride: u64,
}

/// An expert bank: how many experts, where each projection's slab lies, and
/// the per-expert macro scales if the bank has them.
#[derive(Clone, Copy, Debug)]
pub struct Bank<'a> {
    /// Experts in the bank; valid ids are `0 .. n_expert`.
    pub n_expert: usize,
    /// The slabs in plane order gate, up, down.
    pub slabs: [Slab; PLANES],
    /// Macro-scale planes in plane order gate, up, down, `n_expert` f32
    /// each; `None` when the bank has none (every macro reads as 1.0).
    pub macros: Option<[&'a [f32]; PLANES]>,
}

/// Why no tables can be built. Displays as a sentence a kernel engineer can
/// act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TablesError {
    /// A buffer has the wrong length.
    Len {
        /// The argument: `"weights"`, `"macro_g"`, `"macro_u"`, `"macro_d"`,
        /// `"ptrs"` or `"scales"`.
        arg: &'static str,
        /// Elements required (`n_pairs`, `n_expert` or `3 * n_pairs`).
        want: usize,
        /// Elements passed.
        got: usize,
    },
    /// `3 * n_pairs` does not fit in `usize`.
    TooManyPairs {
        /// Pairs.
        n_pairs: usize,
    },
    /// Rule `RANGE`: a pair selects an expert outside `0 .. n_expert`.
    ExpertRange {
        /// The pair (index into `experts`).
        pair: usize,
        /// Its expert id.
        expert: i32,
        /// Experts in the bank.
        n_expert: usize,
    },
    /// Rule `PTR-64`: `base + expert * stride` exceeds `u64::MAX`.
    AddressOverflow {
        /// The plane whose pointer overflows (the first of gate, up, down).
        plane: Plane,
        /// The pair.
        pair: usize,
        /// Its expert id (in range).
        expert: i32,
        /// The plane's slab base (bytes).
        base: u64,
        /// The plane's per-expert stride (bytes).
        stride: u64,
    },
}

impl core::fmt::Display for TablesError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            TablesError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the tables need {want}")
            }
            TablesError::TooManyPairs { n_pairs } => write!(
                f,
                "{n_pairs} pairs are too many: 3 * n_pairs table entries do not fit in usize"
            ),
            TablesError::ExpertRange {
                pair,
                expert,
                n_expert,
            } => write!(
                f,
                "pair {pair} selects expert {expert}, outside the bank's experts 0..{n_expert}"
            ),
            TablesError::AddressOverflow {
                plane,
                pair,
                expert,
                base,
                stride,
            } => write!(
                f,
                "pair {pair} (expert {expert}): the {} pointer 0x{base:x} + {expert} * {stride} bytes does not fit in 64 bits",
                plane.name()
            ),
        }
    }
}

/// `base + expert * stride` in exact integer arithmetic, or `None` if it
/// exceeds `u64::MAX` (rule `PTR-64`). `expert` is a valid, non-negative id.
pub const fn slab_pointer(slab: Slab, expert: u32) -> Option<u64> {
    let off = (expert as u128) * (slab.stride as u128);
    let sum = (slab.base as u128) + off;
    if sum > u64::MAX as u128 {
        None
    } else {
        Some(sum as u64)
    }
}

/// The down scale `w * macro_d` (rules `DOWN-1`, `NAN-1`): one IEEE
/// multiply, a NaN result replaced by [`CANONICAL_NAN`].
pub fn down_scale(w: f32, macro_d: f32) -> f32 {
    let s = w * macro_d;
    if s.is_nan() {
        f32::from_bits(CANONICAL_NAN)
    } else {
        s
    }
}

fn check_len(arg: &'static str, want: usize, got: usize) -> Result<(), TablesError> {
    if want == got {
        Ok(())
    } else {
        Err(TablesError::Len { arg, want, got })
    }
}

/// Checks every length of a call to [`vrows_tables`] (step 1), in
/// signature order. `ptrs` and `scales` are `None` where the caller
/// allocates the outputs itself.
///
/// # Errors
/// [`TablesError::TooManyPairs`], then [`TablesError::Len`] for the first
/// wrong length.
pub fn check_lengths(
    bank: &Bank<'_>,
    n_pairs: usize,
    weights: usize,
    ptrs: Option<usize>,
    scales: Option<usize>,
) -> Result<(), TablesError> {
    let table = match n_pairs.checked_mul(PLANES) {
        Some(t) => t,
        None => return Err(TablesError::TooManyPairs { n_pairs }),
    };
    check_len("weights", n_pairs, weights)?;
    if let Some(m) = bank.macros {
        check_len("macro_g", bank.n_expert, m[0].len())?;
        check_len("macro_u", bank.n_expert, m[1].len())?;
        check_len("macro_d", bank.n_expert, m[2].len())?;
    }
    if let Some(p) = ptrs {
        check_len("ptrs", table, p)?;
    }
    if let Some(s) = scales {
        check_len("scales", table, s)?;
    }
    Ok(())
}

/// Checks one pair (step 2): its expert id, then each plane's pointer.
///
/// # Errors
/// [`TablesError::ExpertRange`], then [`TablesError::AddressOverflow`] for
/// the first overflowing plane.
pub fn check_pair(bank: &Bank<'_>, pair: usize, expert: i32) -> Result<(), TablesError> {
    if expert < 0 || expert as u64 >= bank.n_expert as u64 {
        return Err(TablesError::ExpertRange {
            pair,
            expert,
            n_expert: bank.n_expert,
        });
    }
    for plane in Plane::ALL {
        let slab = bank.slabs[plane.index()];
        if slab_pointer(slab, expert as u32).is_none() {
            return Err(TablesError::AddressOverflow {
                plane,
                pair,
                expert,
                base: slab.base,
                stride: slab.stride,
            });
        }
    }
    Ok(())
}

/// Builds the verify-rows pointer and scale tables (see the module doc for
/// shapes, order and rules).
///
/// `experts` and `weights` hold one entry per pair; `ptrs` and `scales`
/// receive `3 * n_pairs` entries each, plane-major (gate, up, down). Zero
/// pairs is valid and writes nothing.
///
/// # Errors
/// [`TablesError::Len`] / [`TablesError::TooManyPairs`] for lengths;
/// [`TablesError::ExpertRange`] and [`TablesError::AddressOverflow`] for the
/// first bad pair. On any error nothing is written (`ALL-OR-NOTHING`).
pub fn vrows_tables(
    bank: &Bank<'_>,
    experts: &[i32],
    weights: &[f32],
    ptrs: &mut [u64],
    scales: &mut [f32],
) -> Result<(), TablesError> {
    let n = experts.len();
    check_lengths(bank, n, weights.len(), Some(ptrs.len()), Some(scales.len()))?;
    let mut p = 0;
    while p < n {
        check_pair(bank, p, experts[p])?;
        p += 1;
    }
    let mut p = 0;
    while p < n {
        let e = experts[p] as u32; // checked: 0 <= e < n_expert
        let w = weights[p];
        for plane in Plane::ALL {
            let i = plane.index();
            // Always Some: step 2 checked every plane of every pair.
            ptrs[i * n + p] = slab_pointer(bank.slabs[i], e).unwrap_or(0);
        }
        let (mg, mu, md) = match bank.macros {
            Some(m) => (m[0][e as usize], m[1][e as usize], m[2][e as usize]),
            None => (1.0, 1.0, 1.0),
        };
        scales[p] = mg;
        scales[n + p] = mu;
        scales[2 * n + p] = down_scale(w, md);
        p += 1;
    }
    Ok(())
}
