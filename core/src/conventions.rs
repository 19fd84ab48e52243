//! Conventions in one place (the role of SoftFloat's `specialize.h`).
//!
//! Where vendors disagree about an FP8 edge case, the choice is an enum here
//! and every codec takes it as an explicit argument. Nothing in the codecs
//! hard-codes a vendor's choice.
//!
//! Which NaN code each encoder emits, in one table (the rules are in each
//! codec's docs):
//!
//! | encoder                            | NaN input gives          | NaN sign |
//! |------------------------------------|--------------------------|----------|
//! | FP8, [`Overflow::SatFinite`]       | `0x7F`                   | dropped  |
//! | FP8, [`Overflow::NonSaturating`]   | `0x7F` or `0xFF`         | kept     |
//! | [`crate::f16::encode_f16`]         | `s 11111 1ppppppppp`     | kept     |
//! | [`crate::bf16::encode_bf16`]       | `s 11111111 1pppppp`     | kept     |
//!
//! (`p`: the top payload bits of the `f32` NaN below its quiet bit; the
//! quiet bit, the `1`, is forced.)

/// How an FP8 code whose magnitude bits are the NaN magnitude decodes.
///
/// Applies to E4M3FN magnitude `0x7F` (codes `0x7F` and `0xFF`). E5M2 has
/// IEEE-style NaNs (exponent all ones, mantissa non-zero) and follows the
/// same choice for those codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NanMagnitude {
    /// The code is a NaN (OCP OFP8 1.0, PTX `cvt`, CUDA `__nv_fp8_e4m3`,
    /// ml_dtypes, torch). This is what the tensor cores read. The decoders
    /// return the `f32` quiet NaN `0x7FC0_0000` with the code's sign bit
    /// (rule DEC-NAN-IEEE in [`crate::fp8::decode`]).
    Ieee,
    /// The code reads as `+0.0`, whatever its sign bit: `0x7F` and `0xFF`
    /// both give `+0.0`, never `-0.0`. This is the modelopt host convention
    /// that seed 000's `e4m3_to_f32` follows (it tests the magnitude before
    /// it applies the sign). For E5M2 the same rule covers its six NaN codes
    /// (`0x7D..=0x7F`, `0xFD..=0xFF` give `+0.0`), while the infinity codes
    /// `0x7C`/`0xFC` still give `±inf`: the convention only renames NaN
    /// codes. Because the hardware reads NaN where this reads zero, weight
    /// tensors containing these codes are refused by the dispatch
    /// precondition ([`crate::fp8_mmq::count_nan_magnitude`]).
    ReadAsZero,
}

/// What an encoder does with a finite value beyond the largest finite code,
/// and with an infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Overflow {
    /// PTX `cvt.rn.satfinite` (PTX ISA, section "cvt"; CUDA
    /// `__NV_SATFINITE`). The value is first rounded to nearest even; if the
    /// rounded magnitude is beyond max finite, the result is max finite with
    /// the input's sign. `±inf` gives `±max finite` too (E4M3FN `0x7E`/`0xFE`
    /// = ±448, E5M2 `0x7B`/`0xFB` = ±57344). A NaN of either sign gives the
    /// positive NaN code `0x7F` (E4M3FN and E5M2 alike): the hardware emits
    /// a canonical NaN, and CUDA's host emulation replaces any NaN input by
    /// `0x7FFF_FFFF` before converting.
    SatFinite,
    /// OCP OFP8 1.0 / ml_dtypes / torch `.to(float8_*)`: round to nearest
    /// even as if the exponent range were unbounded; a result that rounds
    /// beyond max finite gives infinity where the format has one (E5M2:
    /// `±inf` = `0x7C`/`0xFC`) and NaN where it has none (E4M3FN: `464.0`,
    /// the midpoint of 448 and the would-be 480, ties to even and gives 448;
    /// `465.0` gives `0x7F`). Infinity gives infinity (E5M2) or NaN
    /// (E4M3FN). NaN, infinity-as-NaN and overflow-as-NaN keep the input's
    /// sign: `0x7F` or `0xFF` (torch does the same; ml_dtypes emits `0x7E`
    /// or `0xFE` for an E5M2 NaN).
    NonSaturating,
}
