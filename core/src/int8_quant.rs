//! INT8 activation quantization for W8A8 int8 GEMMs: vLLM's
//! `scaled_int8_quant` (`csrc/quantization/compressed_tensors/
//! int8_quant_kernels.cu`: `static_scaled_int8_quant_kernel`,
//! `static_scaled_int8_azp_quant_kernel`, `dynamic_scaled_int8_quant_kernel`,
//! `dynamic_scaled_int8_azp_quant_kernel`) and the torch forms of the
//! same arithmetic.
//!
//! Shapes: `x` is `[rows][cols]` (elements, row-major) of f32 values (a
//! bfloat16 or float16 input is converted to f32 first, exactly); `q` is
//! `[rows][cols]` int8 codes; `s` is 1 f32 (a static scale, written back
//! as given) or `rows` (dynamic, one per row: vLLM's `[rows, 1]`); `azp`
//! (asymmetric only) is 1 or `rows` int32 zero points, as `s`.
//!
//! Operation order, per row (all f32 operations IEEE binary32, round to
//! nearest even, each rounding on its own):
//!
//! 1. Symmetric, static `scale`: `q = cvt(x / scale)` ([`Codes::Divide`],
//!    vLLM) or `q = cvt(x * fl(1 / scale))` ([`Codes::Reciprocal`]).
//! 2. Symmetric, dynamic: `amax` = the running maximum of `|x|` from `+0`
//!    (vLLM's `fmaxf`: a NaN never becomes it), exact; the scale written
//!    is `s = amax / 127.0f`; codes `q = cvt(x * fl(127.0f / amax))`
//!    ([`Codes::Reciprocal`], vLLM's `tmp_scale`) or `q = cvt(x / s)`
//!    ([`Codes::Divide`], the torch form `x / (amax / 127)`).
//! 3. Asymmetric, static `scale` and `azp`: `q = sat8(cvt32(x * fl(1 /
//!    scale)) + azp)` ([`Codes::Reciprocal`], vLLM since its kernels were
//!    vectorized, PR #19233 of June 2025: `inv_s = 1.0f / scale`) or
//!    `x / scale` ([`Codes::Divide`], vLLM before), the addition exact.
//! 4. Asymmetric, dynamic: `max`, `min` the row's true maximum and
//!    minimum (NaN skipped), `s = (max - min) / 255.0f` (a subtraction
//!    then a division, each rounded), `azp = cvt32(nearbyint(-128.0f -
//!    min / s))` (each f32 operation rounded; `nearbyint` ties to even, as
//!    `std::nearbyint` under the default rounding mode), then codes as 3
//!    with `s` (vLLM: `x * fl(1.f / s)` since PR #19233, `x / s` before).
//! 5. [`Codes::TorchDivide`] (the torch forms that divide by a Python
//!    scalar): in 2 and 4 the scale's division is a multiply by `fl(1 /
//!    127)` or `fl(1 / 255)`, the rest as [`Codes::Divide`].
//!
//! Named rules:
//! - `I8Q-CVT` ([`cvt_rni_sat_s8`]): f32 to int8 is PTX `cvt.rni.sat.s8.f32`:
//!   round to the nearest integer, ties to even; saturate to `[-128, 127]`
//!   (±inf too); NaN gives 0 (PTX ISA, `cvt`: float-to-integer
//!   conversions saturate to the destination's range; NaN inputs are
//!   converted to 0). A kernel rounding with C `roundf` (ties away from
//!   zero, as older int8 quantizers did) parts from it at every `n + 1/2`
//!   whose `|n|` is even (`2.5`: 2 against 3): [`Rounding::NearestAway`].
//! - `I8Q-CVT32` ([`cvt_rni_sat_s32`]): f32 to int32, `cvt.rni.sat.s32.f32`,
//!   the same rounding, saturating to `[-2^31, 2^31 - 1]`, NaN 0.
//! - `I8Q-SAT8`: the asymmetric sum `cvt32(..) + azp` is computed exactly
//!   (as i64) and saturated to `[-128, 127]` (`cvt.sat.s8.s32`). CUDA's
//!   `add.s32` wraps where the exact sum passes 2^31 - 1 or -2^31; that
//!   needs `|x / scale|` or `|azp|` near 2^31, which no case draws.
//! - `I8Q-ZERO`: a symmetric dynamic row of zeros has `amax = 0`, scale
//!   `0` and codes 0: `0 * (127 / 0) = 0 * inf` and `0 / 0` are NaN, which
//!   `I8Q-CVT` sends to 0.
//! - `I8Q-TINY`: for `0 < amax < 127 / FLT_MAX` (about 3.7e-37: f32 and
//!   bfloat16 hold such rows, float16 does not) `127 / amax` is `+inf`, so
//!   under [`Codes::Reciprocal`] every non-zero element codes 127 or -128
//!   (`-amax` codes -128); [`Codes::Divide`] divides by a subnormal (or
//!   zero) scale. The contract is whatever the rule gives, bit for bit.
//! - `I8Q-FLAT`: an asymmetric dynamic row whose maximum equals its
//!   minimum (or that has no element but NaN) has scale 0 and `min / 0`
//!   undefined through vLLM's `static_cast<int32_t>`: outside the
//!   contract, refused ([`Int8Error::FlatRow`]); no case draws one.
//! - `I8Q-NAN`: NaN elements are skipped by every reduction (`fmaxf`,
//!   `std::max`, `std::min` keep the running value) and code as
//!   `cvt(NaN) = 0` (symmetric) or `sat8(0 + azp)` (asymmetric).
//!
//! vLLM's `dynamic_scaled_int8_azp_quant_kernel` before PR #19233 (June
//! 2025) started its running maximum at `std::numeric_limits<float>::min()`,
//! the least positive normal (1.2e-38), not the lowest value: on a row
//! whose elements are all negative it found `max = 1.2e-38`, a scale from
//! `(1.2e-38 - min) / 255` and the zero point 127, where the contract (the
//! true maximum) gives another scale and zero point (likewise any row
//! whose maximum is under 1.2e-38). That is a bug of the kernel, not a
//! rule: the contract keeps the true maximum (vLLM's `MinMax` now starts
//! at `lowest()`).

/// How a float becomes an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// To nearest, ties to even: PTX `cvt.rni`, `std::nearbyint`,
    /// `torch.round`, `np.rint` (the contract's).
    NearestEven,
    /// To nearest, ties away from zero: C `roundf`, `std::round`; a
    /// known departure (older int8 quantizers).
    NearestAway,
    /// Toward zero: PTX `cvt.rzi`, a C++ float-to-integer conversion
    /// (`int8_t(q)`), Triton's `.to(tl.int8)` (LLVM `fptosi`) and torch's
    /// `.to(torch.int8)`: the per-token-group int8 quantizers of vLLM and
    /// SGLang ([`crate::int8_group_quant`]).
    TowardZero,
}

impl Rounding {
    /// Every rounding, in the order reports list them.
    pub const ALL: [Rounding; 3] = [
        Rounding::TowardZero,
        Rounding::NearestEven,
        Rounding::NearestAway,
    ];

    /// The rounding's name as a check declares it: `trunc`,
    /// `nearest_even`, `nearest_away` (in [`Int8Rule::label`] the last two
    /// are no suffix and `/roundf`, the first `/trunc`).
    pub const fn name(self) -> &'static str {
        match self {
            Rounding::TowardZero => "trunc",
            Rounding::NearestEven => "nearest_even",
            Rounding::NearestAway => "nearest_away",
        }
    }
}

/// The range codes saturate to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Range {
    /// `[-128, 127]`: `cvt.sat.s8` (the contract's).
    Full,
    /// `[-127, 127]`: a symmetric ("restricted") clamp some quantizers use;
    /// a known departure (it never codes -128).
    Narrow,
}

/// How codes are formed from the scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codes {
    /// A multiply by a reciprocal: dynamic symmetric `x * fl(127 / amax)`
    /// (vLLM's `dynamic_scaled_int8_quant_kernel`), otherwise `x * fl(1 /
    /// scale)`.
    Reciprocal,
    /// A division by the scale, `x / scale` (vLLM's static and
    /// asymmetric kernels; the torch forms `x / (amax / 127)` with a tensor
    /// divisor).
    Divide,
    /// A division by a dynamic scale formed as torch forms it when the
    /// divisor is a Python scalar: `s = amax * fl(1 / 127)` (asymmetric:
    /// `(max - min) * fl(1 / 255)`), since PyTorch's CUDA true division by
    /// a CPU scalar multiplies by the scalar's reciprocal
    /// (`aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu`,
    /// `div_true_kernel_cuda`); then codes `x / s` as [`Codes::Divide`]
    /// (the zero point's `min / s` too). Such a scale sits an ulp from
    /// the division's on some rows. A static scale is [`Codes::Divide`]'s.
    TorchDivide,
}

impl Codes {
    /// Every form, in the order reports list them.
    pub const ALL: [Codes; 3] = [Codes::Divide, Codes::Reciprocal, Codes::TorchDivide];

    /// The name a check declares it by: `divide` or `reciprocal`.
    pub const fn name(self) -> &'static str {
        match self {
            Codes::Divide => "divide",
            Codes::Reciprocal => "reciprocal",
            Codes::TorchDivide => "torch_divide",
        }
    }
}

/// A declared rule: how codes are formed, rounded and saturated. The
/// contract is `NearestEven` and `Full` with either [`Codes`]; the other
/// roundings and ranges are known departures a check can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Int8Rule {
    /// Reciprocal or divide.
    pub codes: Codes,
    /// The rounding of every float-to-integer step (codes and the dynamic
    /// zero point's `nearbyint`).
    pub rounding: Rounding,
    /// The range codes saturate to.
    pub range: Range,
}

impl Int8Rule {
    /// The contract's rule with codes formed by `codes`.
    pub const fn new(codes: Codes) -> Int8Rule {
        Int8Rule {
            codes,
            rounding: Rounding::NearestEven,
            range: Range::Full,
        }
    }

    /// The rule's name in reports: `reciprocal` or `divide`, then
    /// `/roundf` for ties away, `/trunc` for toward zero and `/clamp127`
    /// for the narrow range.
    pub fn label(&self) -> &'static str {
        use Codes::*;
        use Range::*;
        use Rounding::*;
        match (self.codes, self.rounding, self.range) {
            (Reciprocal, NearestEven, Full) => "reciprocal",
            (Reciprocal, NearestAway, Full) => "reciprocal/roundf",
            (Reciprocal, TowardZero, Full) => "reciprocal/trunc",
            (Reciprocal, NearestEven, Narrow) => "reciprocal/clamp127",
            (Reciprocal, NearestAway, Narrow) => "reciprocal/roundf/clamp127",
            (Reciprocal, TowardZero, Narrow) => "reciprocal/trunc/clamp127",
            (Divide, NearestEven, Full) => "divide",
            (Divide, NearestAway, Full) => "divide/roundf",
            (Divide, TowardZero, Full) => "divide/trunc",
            (Divide, NearestEven, Narrow) => "divide/clamp127",
            (Divide, NearestAway, Narrow) => "divide/roundf/clamp127",
            (Divide, TowardZero, Narrow) => "divide/trunc/clamp127",
            (TorchDivide, NearestEven, Full) => "torch_divide",
            (TorchDivide, NearestAway, Full) => "torch_divide/roundf",
            (TorchDivide, TowardZero, Full) => "torch_divide/trunc",
            (TorchDivide, NearestEven, Narrow) => "torch_divide/clamp127",
            (TorchDivide, NearestAway, Narrow) => "torch_divide/roundf/clamp127",
            (TorchDivide, TowardZero, Narrow) => "torch_divide/trunc/clamp127",
        }
    }
}

/// Where the scale (and zero point) come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Int8Scale {
    /// A given per-tensor scale (finite, positive) and, for an asymmetric
    /// quantizer, a given zero point (vLLM's `static_scaled_int8_quant`
    /// with a `[1]` scale and optional `[1]` azp).
    Static {
        /// The scale.
        scale: f32,
        /// The zero point; `None` for symmetric.
        azp: Option<i32>,
    },
    /// Per row (token), from the row (vLLM's `dynamic_scaled_int8_quant`).
    Dynamic {
        /// Symmetric (`amax / 127`, no zero point) or asymmetric (`(max -
        /// min) / 255` and a zero point).
        symmetric: bool,
    },
}

impl Int8Scale {
    /// Whether the quantizer has no zero point.
    pub fn symmetric(&self) -> bool {
        match *self {
            Int8Scale::Static { azp, .. } => azp.is_none(),
            Int8Scale::Dynamic { symmetric } => symmetric,
        }
    }

    /// Scales (and, asymmetric, zero points) written for `rows` rows: 1
    /// static, `rows` dynamic.
    pub fn scales(&self, rows: usize) -> usize {
        match self {
            Int8Scale::Static { .. } => 1,
            Int8Scale::Dynamic { .. } => rows,
        }
    }
}

/// Why [`quantize_int8`] refused its arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Int8Error {
    /// A slice whose length disagrees with the shape: its name, the
    /// length expected and the length given.
    Len(&'static str, usize, usize),
    /// A static scale that is not finite and positive.
    Scale(f32),
    /// `I8Q-FLAT`: an asymmetric dynamic row whose maximum equals its
    /// minimum (or has only NaN elements): its index.
    FlatRow(usize),
}

impl core::fmt::Display for Int8Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Int8Error::Len(arg, want, got) => write!(f, "{arg}: {got} elements, expected {want}"),
            Int8Error::Scale(s) => write!(f, "scale = {s}: it must be finite and positive"),
            Int8Error::FlatRow(j) => write!(
                f,
                "row {j}: its maximum equals its minimum, so the asymmetric scale is 0 (outside the contract, I8Q-FLAT)"
            ),
        }
    }
}

/// `x` with its fraction bits cleared: the integer part, toward zero
/// (`|x| >= 2^23`, infinities and NaN unchanged).
fn trunc(x: f32) -> f32 {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32 - 127;
    if exp >= 23 {
        x
    } else if exp < 0 {
        f32::from_bits(bits & 0x8000_0000)
    } else {
        f32::from_bits(bits & !(0x007F_FFFF >> exp))
    }
}

/// `x` rounded to an integral f32 by `rounding` (NaN and ±inf kept, the
/// sign kept: `-0.4` gives `-0`; toward zero, `-2.9` gives `-2`). `d = |x| - trunc(|x|)` is exact (it is
/// `|x|`'s own low bits), so the tie test `d == 0.5` is exact; for
/// `|x| < 2^23`, `t + 1` is exact too.
pub fn round_integral(x: f32, rounding: Rounding) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let a = f32::from_bits(x.to_bits() & 0x7FFF_FFFF);
    let t = trunc(a);
    let d = a - t;
    let up = match rounding {
        // Odd t: its last integer bit is 1 (t < 2^23 here whenever d > 0).
        Rounding::NearestEven => d > 0.5 || (d == 0.5 && (t as u32) & 1 == 1),
        Rounding::NearestAway => d >= 0.5,
        Rounding::TowardZero => false,
    };
    let r = if up { t + 1.0 } else { t };
    if x.is_sign_negative() {
        -r
    } else {
        r
    }
}

/// `std::nearbyint(x)` under round-to-nearest-even: [`round_integral`]
/// with [`Rounding::NearestEven`].
pub fn nearbyint(x: f32) -> f32 {
    round_integral(x, Rounding::NearestEven)
}

/// An integral f32 (or ±inf, NaN) to int32, saturating, NaN to 0 (the
/// saturation of PTX `cvt.s32.f32`).
fn sat_i32(v: f32) -> i32 {
    if v.is_nan() {
        0
    } else if v >= 2_147_483_648.0 {
        i32::MAX
    } else if v < -2_147_483_648.0 {
        i32::MIN
    } else {
        v as i32
    }
}

/// `I8Q-CVT32`: PTX `cvt.rni.sat.s32.f32` (under `rounding`): round to an
/// integer, saturate to `[-2^31, 2^31 - 1]`, NaN gives 0.
pub fn cvt_s32(x: f32, rounding: Rounding) -> i32 {
    sat_i32(round_integral(x, rounding))
}

/// `I8Q-CVT32` as PTX has it: [`cvt_s32`] with [`Rounding::NearestEven`].
pub fn cvt_rni_sat_s32(x: f32) -> i32 {
    cvt_s32(x, Rounding::NearestEven)
}

/// The lower bound of `range`.
fn low(range: Range) -> i64 {
    match range {
        Range::Full => -128,
        Range::Narrow => -127,
    }
}

/// `I8Q-SAT8`: an integer saturated to `range` (`cvt.sat.s8.s32` for
/// [`Range::Full`]).
pub fn sat8(v: i64, range: Range) -> i8 {
    v.clamp(low(range), 127) as i8
}

/// `I8Q-CVT` under `rounding` and `range`: round, saturate, NaN to 0.
pub fn cvt_s8(x: f32, rounding: Rounding, range: Range) -> i8 {
    if x.is_nan() {
        return 0;
    }
    let r = round_integral(x, rounding);
    // ±inf and every finite value compare correctly with the bounds.
    if r >= 127.0 {
        127
    } else if r <= low(range) as f32 {
        low(range) as i8
    } else {
        r as i8
    }
}

/// `I8Q-CVT` as PTX has it: `cvt.rni.sat.s8.f32`, [`cvt_s8`] with
/// [`Rounding::NearestEven`] and [`Range::Full`].
pub fn cvt_rni_sat_s8(x: f32) -> i8 {
    cvt_s8(x, Rounding::NearestEven, Range::Full)
}

/// One row's scale, zero point and code factor, once its reductions are
/// done: the codes are `cvt(x / factor)` or `cvt(x * factor)`, plus the
/// zero point when there is one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowScale {
    /// The scale written.
    pub scale: f32,
    /// The zero point written (asymmetric).
    pub azp: Option<i32>,
    /// What codes divide by (`divide`) or multiply by.
    pub factor: f32,
    /// Whether codes divide by `factor`.
    pub divide: bool,
}

impl RowScale {
    /// The row scale of `source` under `rule` for the row `x` (step order
    /// in the module docs).
    ///
    /// # Errors
    /// [`Int8Error::FlatRow`] (with index 0) for an asymmetric dynamic
    /// row whose maximum equals its minimum.
    pub fn of_row(x: &[f32], source: Int8Scale, rule: Int8Rule) -> Result<RowScale, Int8Error> {
        let divide = rule.codes != Codes::Reciprocal;
        let torch = rule.codes == Codes::TorchDivide;
        let (scale, azp, factor) = match source {
            Int8Scale::Static { scale, azp } => {
                let f = if divide { scale } else { 1.0 / scale };
                (scale, azp, f)
            }
            Int8Scale::Dynamic { symmetric: true } => {
                let mut amax = 0.0f32;
                for &v in x {
                    let a = f32::from_bits(v.to_bits() & 0x7FFF_FFFF);
                    if a > amax {
                        amax = a;
                    }
                }
                let s = if torch {
                    amax * (1.0 / 127.0)
                } else {
                    amax / 127.0
                };
                let f = if divide { s } else { 127.0 / amax };
                (s, None, f)
            }
            Int8Scale::Dynamic { symmetric: false } => {
                let (mut max, mut min) = (f32::NEG_INFINITY, f32::INFINITY);
                for &v in x {
                    if v > max {
                        max = v;
                    }
                    if v < min {
                        min = v;
                    }
                }
                if max <= min {
                    return Err(Int8Error::FlatRow(0));
                }
                let s = if torch {
                    (max - min) * (1.0 / 255.0)
                } else {
                    (max - min) / 255.0
                };
                let z = sat_i32(round_integral(-128.0 - min / s, rule.rounding));
                let f = if divide { s } else { 1.0 / s };
                (s, Some(z), f)
            }
        };
        Ok(RowScale {
            scale,
            azp,
            factor,
            divide,
        })
    }

    /// The code of element `v` under `rule`'s rounding and range:
    /// `cvt(v op factor)` (`I8Q-CVT`), or with a zero point
    /// `sat8(cvt32(v op factor) + azp)` (`I8Q-CVT32`, `I8Q-SAT8`).
    pub fn code(&self, v: f32, rule: Int8Rule) -> i8 {
        let y = if self.divide {
            v / self.factor
        } else {
            v * self.factor
        };
        match self.azp {
            None => cvt_s8(y, rule.rounding, rule.range),
            Some(z) => sat8(
                i64::from(cvt_s32(y, rule.rounding)) + i64::from(z),
                rule.range,
            ),
        }
    }
}

/// The int8 quantizer (module docs): `x` `[rows][cols]`, codes `q`
/// `[rows][cols]`, scales `s` and zero points `azp` (each 1 static,
/// `rows` dynamic; `azp` empty for a symmetric quantizer), by `rule`
/// from `source`. A static scale and zero point are written as given.
/// Rows are independent; each is reduced, then coded, in order.
///
/// # Errors
/// [`Int8Error`] for a slice of the wrong length, a static scale that is
/// not finite and positive, or an asymmetric dynamic row with `max ==
/// min` (`I8Q-FLAT`, checked for every row first); nothing is written
/// then.
pub fn quantize_int8(
    x: &[f32],
    cols: usize,
    source: Int8Scale,
    rule: Int8Rule,
    q: &mut [i8],
    s: &mut [f32],
    azp: &mut [i32],
) -> Result<(), Int8Error> {
    if let Int8Scale::Static { scale, .. } = source {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Int8Error::Scale(scale));
        }
    }
    let rows = x.len().checked_div(cols).unwrap_or(0);
    if rows * cols != x.len() {
        return Err(Int8Error::Len("x", rows * cols, x.len()));
    }
    if q.len() != x.len() {
        return Err(Int8Error::Len("q", x.len(), q.len()));
    }
    let n = source.scales(rows);
    if s.len() != n {
        return Err(Int8Error::Len("s", n, s.len()));
    }
    let n_azp = if source.symmetric() { 0 } else { n };
    if azp.len() != n_azp {
        return Err(Int8Error::Len("azp", n_azp, azp.len()));
    }
    if let Int8Scale::Dynamic { symmetric: false } = source {
        for (j, row) in x.chunks(cols.max(1)).enumerate() {
            RowScale::of_row(row, source, rule).map_err(|_| Int8Error::FlatRow(j))?;
        }
    }
    // A static scale is one for every row (and written once).
    let fixed = match source {
        Int8Scale::Static { .. } => Some(RowScale::of_row(&[], source, rule)?),
        Int8Scale::Dynamic { .. } => None,
    };
    let rows_q = q.chunks_mut(cols.max(1));
    for (j, (row, qr)) in x.chunks(cols.max(1)).zip(rows_q).enumerate() {
        let rs = match fixed {
            Some(rs) => rs,
            None => RowScale::of_row(row, source, rule).map_err(|_| Int8Error::FlatRow(j))?,
        };
        for (c, &v) in qr.iter_mut().zip(row) {
            *c = rs.code(v, rule);
        }
        if fixed.is_none() {
            s[j] = rs.scale;
            if let Some(z) = rs.azp {
                azp[j] = z;
            }
        }
    }
    if let Some(rs) = fixed {
        s[0] = rs.scale;
        if let Some(z) = rs.azp {
            azp[0] = z;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVEN: Rounding = Rounding::NearestEven;
    const AWAY: Rounding = Rounding::NearestAway;

    /// Ties: 0.5 = 0b0.1 (tie) goes to 0 (even), 1.5 = 0b1.1 to 2, 2.5 =
    /// 0b10.1 to 2; roundf takes every tie away from zero.
    #[test]
    fn cvt_rounds_ties_to_even_and_roundf_away() {
        for (x, even, away) in [
            (0.5f32, 0i8, 1i8),
            (1.5, 2, 2),
            (2.5, 2, 3),
            (-0.5, 0, -1),
            (-2.5, -2, -3),
            (126.5, 126, 127),
            (-127.5, -128, -128),
            (3.4999998, 3, 3),
            (0.49999997, 0, 0),
            (-0.49999997, 0, 0),
        ] {
            assert_eq!(cvt_rni_sat_s8(x), even, "{x}");
            assert_eq!(cvt_s8(x, AWAY, Range::Full), away, "{x}");
        }
        // Every k + 0.5 in range: even is the even neighbour.
        for k in -129i32..=128 {
            let x = k as f32 + 0.5;
            let want = if k % 2 == 0 { k } else { k + 1 }.clamp(-128, 127);
            assert_eq!(i32::from(cvt_rni_sat_s8(x)), want, "{x}");
        }
    }

    /// Toward zero (`cvt.rzi`): 2.9 = 0b10.111.. gives 2, -2.9 gives -2,
    /// every tie the integer part; saturating as `cvt.rni`.
    #[test]
    fn cvt_toward_zero_drops_the_fraction() {
        let rz = Rounding::TowardZero;
        for (x, want) in [
            (2.9f32, 2i8),
            (-2.9, -2),
            (0.5, 0),
            (-0.5, 0),
            (126.99999, 126),
            (-127.99998, -127),
            (127.5, 127),
            (-128.5, -128),
            (f32::INFINITY, 127),
        ] {
            assert_eq!(cvt_s8(x, rz, Range::Full), want, "{x}");
        }
        assert!(round_integral(-0.25, rz).is_sign_negative());
    }

    #[test]
    fn cvt_saturates_and_sends_nan_to_zero() {
        assert_eq!(cvt_rni_sat_s8(127.49998), 127);
        assert_eq!(cvt_rni_sat_s8(127.5), 127);
        assert_eq!(cvt_rni_sat_s8(-128.5), -128);
        assert_eq!(cvt_rni_sat_s8(-128.50002), -128);
        assert_eq!(cvt_rni_sat_s8(1e30), 127);
        assert_eq!(cvt_rni_sat_s8(f32::INFINITY), 127);
        assert_eq!(cvt_rni_sat_s8(f32::NEG_INFINITY), -128);
        assert_eq!(cvt_rni_sat_s8(f32::NAN), 0);
        assert_eq!(cvt_rni_sat_s8(-f32::NAN), 0);
        assert_eq!(cvt_rni_sat_s8(-0.0), 0);
        assert_eq!(cvt_rni_sat_s8(f32::from_bits(1)), 0);
        assert_eq!(cvt_s8(-127.6, EVEN, Range::Narrow), -127);
        assert_eq!(cvt_s8(f32::NEG_INFINITY, EVEN, Range::Narrow), -127);
        assert_eq!(cvt_rni_sat_s32(f32::NAN), 0);
        assert_eq!(cvt_rni_sat_s32(2_147_483_648.0), i32::MAX);
        assert_eq!(cvt_rni_sat_s32(f32::INFINITY), i32::MAX);
        assert_eq!(cvt_rni_sat_s32(-2_147_483_648.0), i32::MIN);
        assert_eq!(cvt_rni_sat_s32(-3e9), i32::MIN);
        assert_eq!(cvt_rni_sat_s32(2_147_483_520.0), 2_147_483_520);
        assert_eq!(cvt_rni_sat_s32(8_388_607.5), 8_388_608);
        assert_eq!(cvt_rni_sat_s32(8_388_609.0), 8_388_609);
        assert_eq!(sat8(i64::from(i32::MAX) + 5, Range::Full), 127);
        assert_eq!(sat8(-300, Range::Full), -128);
    }

    /// The rounding against an independent definition on a dense sample
    /// of binary32 patterns (every 2^k + j ulps step through the integer
    /// range, both signs): nearest integer by f64 arithmetic, ties by
    /// parity or away.
    #[test]
    fn round_integral_matches_an_f64_definition() {
        let f64_round = |x: f64, r: Rounding| -> f64 {
            if r == Rounding::TowardZero {
                // Toward zero: the integer part, sign kept.
                return x as i64 as f64;
            }
            let fl = {
                let t = x as i64 as f64;
                if t > x {
                    t - 1.0
                } else {
                    t
                }
            };
            let d = x - fl;
            if d > 0.5 {
                fl + 1.0
            } else if d < 0.5 {
                fl
            } else {
                match r {
                    EVEN => {
                        if (fl as i64) % 2 == 0 {
                            fl
                        } else {
                            fl + 1.0
                        }
                    }
                    _ => {
                        if x > 0.0 {
                            fl + 1.0
                        } else {
                            fl
                        }
                    }
                }
            }
        };
        let mut bits = 0u32;
        while bits < 0x4B80_0000 {
            for sign in [0u32, 0x8000_0000] {
                let x = f32::from_bits(bits | sign);
                for r in Rounding::ALL {
                    let got = round_integral(x, r);
                    let want = f64_round(f64::from(x), r);
                    assert_eq!(f64::from(got), want, "{x:e} {r:?}");
                }
            }
            bits += 0x1F1 + (bits >> 12);
        }
    }

    #[test]
    fn a_zero_row_codes_zero_under_both_rules_and_a_tiny_one_saturates() {
        let dynamic = Int8Scale::Dynamic { symmetric: true };
        for codes in [Codes::Reciprocal, Codes::Divide] {
            let rule = Int8Rule::new(codes);
            let (mut q, mut s) = ([7i8; 3], [1f32]);
            quantize_int8(&[0.0, -0.0, 0.0], 3, dynamic, rule, &mut q, &mut s, &mut []).unwrap();
            assert_eq!((q, s[0]), ([0; 3], 0.0), "{codes:?}");
        }
        // I8Q-TINY: amax 1e-38 < 127 / FLT_MAX, so 127 / amax = inf.
        let x = [1e-38f32, -1e-38, 5e-39, 0.0];
        let (mut q, mut s) = ([0i8; 4], [0f32]);
        let rec = Int8Rule::new(Codes::Reciprocal);
        quantize_int8(&x, 4, dynamic, rec, &mut q, &mut s, &mut []).unwrap();
        assert_eq!(q, [127, -128, 127, 0]);
        assert_eq!(s[0], 1e-38 / 127.0);
        let div = Int8Rule::new(Codes::Divide);
        quantize_int8(&x, 4, dynamic, div, &mut q, &mut s, &mut []).unwrap();
        assert_eq!(q[3], 0);
        assert_eq!(q[0], cvt_rni_sat_s8(1e-38 / (1e-38f32 / 127.0)));
    }

    /// At amax = 127 * 2^e both rules scale exactly; at an inexact 127 /
    /// amax they part near some midpoints.
    #[test]
    fn reciprocal_and_divide_agree_at_power_of_two_scales_and_part_elsewhere() {
        let dynamic = Int8Scale::Dynamic { symmetric: true };
        let (rec, div) = (
            Int8Rule::new(Codes::Reciprocal),
            Int8Rule::new(Codes::Divide),
        );
        let x: [f32; 4] = [127.0 * 0.25, 2.5 * 0.25, -3.5 * 0.25, 0.5 * 0.25];
        let mut q = [[0i8; 4]; 2];
        let mut s = [0f32];
        for (i, r) in [rec, div].into_iter().enumerate() {
            quantize_int8(&x, 4, dynamic, r, &mut q[i], &mut s, &mut []).unwrap();
            assert_eq!(s[0], 0.25);
        }
        assert_eq!(q[0], [127, 2, -4, 0]);
        assert_eq!(q[0], q[1]);
        let mut parted = 0;
        for amax in [100.3f32, 3.7, 0.0191, 777.7] {
            let (sc, r) = (amax / 127.0, 127.0 / amax);
            for k in -127..127 {
                let mid = (k as f32 + 0.5) * sc;
                for d in -4i32..=4 {
                    let v = f32::from_bits((mid.to_bits() as i32 + d) as u32);
                    parted += usize::from(cvt_rni_sat_s8(v * r) != cvt_rni_sat_s8(v / sc));
                }
            }
        }
        assert!(parted > 20, "{parted}");
    }

    /// Asymmetric dynamic: scale (max - min) / 255, azp nearbyint(-128 -
    /// min / s); min codes -128 and max 127; a tie in the azp's argument
    /// goes to even.
    #[test]
    fn asymmetric_scale_and_zero_point_follow_vllm() {
        let dynamic = Int8Scale::Dynamic { symmetric: false };
        let div = Int8Rule::new(Codes::Divide);
        // min -127.5, max 127.5: s = 1, -128 - (-127.5) = -0.5 -> -0 -> 0.
        let x = [-127.5f32, 127.5, 0.5, -1.5];
        let (mut q, mut s, mut z) = ([0i8; 4], [0f32], [9i32]);
        quantize_int8(&x, 4, dynamic, div, &mut q, &mut s, &mut z).unwrap();
        assert_eq!((s[0], z[0]), (1.0, 0));
        assert_eq!(q, [-128, 127, 0, -2]);
        let away = Int8Rule {
            rounding: AWAY,
            ..div
        };
        quantize_int8(&x, 4, dynamic, away, &mut q, &mut s, &mut z).unwrap();
        assert_eq!(z[0], -1);
        // All negative: the zero point leaves int8, codes still span it.
        let x = [-10.0f32, -2.0, -6.0];
        quantize_int8(&x, 3, dynamic, div, &mut q[..3], &mut s, &mut z).unwrap();
        assert_eq!(s[0], 8.0 / 255.0);
        assert_eq!(z[0], cvt_rni_sat_s32(-128.0 - (-10.0 / (8.0f32 / 255.0))));
        assert!(z[0] > 127);
        assert_eq!((q[0], q[1]), (-128, 127));
        // I8Q-FLAT.
        assert_eq!(
            quantize_int8(
                &[1.0, 2.0, 3.0, 3.0],
                2,
                dynamic,
                div,
                &mut q,
                &mut s[..0],
                &mut z[..0]
            ),
            Err(Int8Error::Len("s", 2, 0))
        );
        let (mut s2, mut z2) = ([0f32; 2], [0i32; 2]);
        assert_eq!(
            quantize_int8(
                &[1.0, 2.0, 3.0, 3.0],
                2,
                dynamic,
                div,
                &mut q,
                &mut s2,
                &mut z2
            ),
            Err(Int8Error::FlatRow(1))
        );
    }

    /// Static asymmetric: the exact sum saturates (I8Q-SAT8) where a wrap
    /// into int8 would not; the static scale and azp are written back.
    #[test]
    fn static_zero_point_saturates_and_bad_arguments_are_refused() {
        let src = Int8Scale::Static {
            scale: 0.5,
            azp: Some(100),
        };
        let div = Int8Rule::new(Codes::Divide);
        let (mut q, mut s, mut z) = ([0i8; 3], [0f32], [0i32]);
        quantize_int8(&[20.0, -200.0, 1.0], 3, src, div, &mut q, &mut s, &mut z).unwrap();
        assert_eq!(q, [127, -128, 102]);
        assert_eq!((s[0], z[0]), (0.5, 100));
        let sym = Int8Scale::Static {
            scale: 0.5,
            azp: None,
        };
        assert_eq!(
            quantize_int8(&[1.0; 3], 3, sym, div, &mut q, &mut s, &mut z),
            Err(Int8Error::Len("azp", 0, 1))
        );
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let src = Int8Scale::Static {
                scale: bad,
                azp: None,
            };
            assert!(matches!(
                quantize_int8(&[1.0; 3], 3, src, div, &mut q, &mut s, &mut []),
                Err(Int8Error::Scale(_))
            ));
        }
        assert_eq!(
            quantize_int8(&[1.0; 3], 2, sym, div, &mut q, &mut s, &mut []),
            Err(Int8Error::Len("x", 2, 3))
        );
    }

    /// NaN elements: skipped by the reductions, coded 0 (or the azp).
    #[test]
    fn nan_elements_are_skipped_and_code_zero() {
        let x = [f32::NAN, 2.0, -1.0];
        let (mut q, mut s, mut z) = ([9i8; 3], [0f32], [0i32]);
        let sym = Int8Scale::Dynamic { symmetric: true };
        let rec = Int8Rule::new(Codes::Reciprocal);
        quantize_int8(&x, 3, sym, rec, &mut q, &mut s, &mut []).unwrap();
        assert_eq!((q, s[0]), ([0, 127, -64], 2.0 / 127.0));
        let asym = Int8Scale::Dynamic { symmetric: false };
        quantize_int8(&x, 3, asym, rec, &mut q, &mut s, &mut z).unwrap();
        assert_eq!(s[0], 3.0 / 255.0);
        assert_eq!(q[0], sat8(i64::from(z[0]), Range::Full));
    }

    #[test]
    fn labels_name_every_rule() {
        let r = Int8Rule {
            codes: Codes::Divide,
            rounding: AWAY,
            range: Range::Narrow,
        };
        assert_eq!(r.label(), "divide/roundf/clamp127");
        let t = Int8Rule {
            rounding: Rounding::TowardZero,
            ..Int8Rule::new(Codes::Divide)
        };
        assert_eq!(t.label(), "divide/trunc");
        assert_eq!(
            Rounding::ALL.map(Rounding::name),
            ["trunc", "nearest_even", "nearest_away"]
        );
        assert_eq!(Int8Rule::new(Codes::Reciprocal).label(), "reciprocal");
    }
}
