//! The sm_90 FP8 tensor-core MMA inner product (H100/H200), bit for bit: one
//! output element of `wgmma.mma_async.sync.aligned.m64nNk32.f32.<A>.<B>`,
//! `d = c + sum over k < 32 of a[k] * b[k]`, with A and B in e4m3 or e5m2
//! and an f32 accumulator.
//!
//! The PTX ISA leaves this arithmetic unspecified ("the order and precision
//! of the internal additions are implementation-defined"). The rules below
//! were derived from test vectors run through the instruction on an H200
//! (`cu/tensor_core.cu`, one `wgmma` per tile on given operands) and are
//! checked against it by `kernel-oracle check tensor-core` (targeted vectors,
//! one per rule, and at least 10^6 random vectors per operand-format pair,
//! compared bit for bit). The structure follows Fasi, Higham, Mikaitis and
//! Pranesh, "Numerical behavior of NVIDIA tensor cores" (PeerJ CS 2021), and
//! Khattak and Mikaitis, "Accurate Models of NVIDIA Tensor Cores"
//! (arXiv 2512.07004): products exact, aligned to the largest exponent,
//! truncated, summed, normalised, truncated. The widths are the H200's:
//! 13 fraction bits after alignment, 14 significant bits after
//! normalisation (the "about 14 bits" of the DeepSeek-V3 report, section
//! 3.3.2).
//!
//! # The rules, in order
//!
//! For one output, with `a[k]`, `b[k]` FP8 codes and `c` an f32 (the
//! specials, `TC-NAN` and `TC-INF`, are decided first; the rest apply to
//! finite terms):
//!
//! 1. `TC-NAN`: if `c` is NaN, or any `a[k]` or `b[k]` is a NaN code, the
//!    result is NaN. Infinities (e5m2 codes `0x7C`/`0xFC`, and `c = ±inf`)
//!    follow `TC-INF`.
//! 2. `TC-PRODUCT`: each operand is `(-1)^s * m * 2^(e - f)` with `m` its
//!    integer significand (the implicit bit included for normal codes), `e`
//!    its unbiased exponent (the minimum normal exponent for subnormals and
//!    zero: -6 for e4m3, -14 for e5m2) and `f` its fraction bits (3 for
//!    e4m3, 2 for e5m2). The product `a[k] * b[k]` is exact:
//!    sign `s_a xor s_b`, significand `m_a * m_b`, and its *alignment
//!    exponent* is `e_a + e_b` -- not the exponent of its leading bit, which
//!    is `e_a + e_b + 1` when `m_a * m_b` carries into a second integer bit.
//! 3. `TC-ALIGN`: `E` is the largest alignment exponent among the products
//!    that are not zero (a product with a zero operand takes no part, even
//!    though its exponent field reads as the minimum) and the exponent of
//!    `c` when `c` is not zero (`c`'s unbiased exponent, -126 for a
//!    subnormal: a subnormal `c` shows only when every product is zero,
//!    which no recorded H200 answer has; the gate's targeted vectors
//!    include it). Every term -- the 32 products and `c` -- is truncated
//!    toward zero (its magnitude rounded down, its sign kept) to a multiple
//!    of `2^(E - 13)`: 13 bits below `2^E` survive.
//! 4. `TC-SUM`: the truncated terms are added exactly (a wide fixed-point
//!    sum with carries: no rounding here).
//! 5. `TC-NORM`: the sum's magnitude is truncated toward zero to its 14
//!    leading bits (counting from its own leading bit, which may lie above
//!    `2^E` after carries or far below it after cancellation).
//! 6. `TC-ZERO`: a zero sum gives +0.0. (Where this differs from IEEE
//!    addition -- every term -0 -- no H200 answer has been recorded yet;
//!    the gate's targeted vectors include that case.)
//! 7. `TC-INF`: (see `TC-NAN`) an infinite term makes the result that
//!    infinity; infinities of both signs, or an infinity times zero, give
//!    NaN. A NaN result is `0x7FFF_FFFF`.
//!
//! The result is then exactly representable in binary32, so no further
//! rounding happens: it has at most 14 significant bits, its least
//! significant bit is at least `2^(E - 13) >= 2^-139`, and it cannot
//! overflow (products are below `2^32`, so next to a `c` near f32's
//! maximum they truncate to zero, and `c` itself only loses bits).
//!
//! `mma.sync.aligned.m16n8k32` with e4m3/e5m2 operands is not a native
//! instruction on sm_90: ptxas lowers it to `F2FP` conversions to f16 and
//! two `HMMA.16816.F32`, a different arithmetic, with rules `MMA-*` (see
//! [`Instruction::MmaSync`]).

use crate::conventions::NanMagnitude;

/// An FP8 operand format of the MMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Kind {
    /// OCP E4M3FN (PTX `.e4m3`): NaN at `0x7F`/`0xFF`, no infinity.
    E4m3,
    /// OCP E5M2 (PTX `.e5m2`): IEEE-style infinities and NaNs.
    E5m2,
}

impl Fp8Kind {
    /// The PTX type name, `"e4m3"` or `"e5m2"`.
    pub const fn name(self) -> &'static str {
        match self {
            Fp8Kind::E4m3 => "e4m3",
            Fp8Kind::E5m2 => "e5m2",
        }
    }

    /// The value of `code` as an f32 (exact), NaN codes as NaN.
    pub fn decode(self, code: u8) -> f32 {
        match self {
            Fp8Kind::E4m3 => crate::e4m3::decode_e4m3(code, NanMagnitude::Ieee),
            Fp8Kind::E5m2 => crate::e5m2::decode_e5m2(code, NanMagnitude::Ieee),
        }
    }
}

/// The instruction whose arithmetic a [`Model`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `wgmma.mma_async.sync.aligned.m64nNk32.f32.<a>.<b>` (sm_90a): the
    /// native FP8 tensor-core MMA (SASS `QGMMA`), rules `TC-*` above.
    Wgmma,
    /// `mma.sync.aligned.m16n8k32.row.col.f32.<a>.<b>.f32` on sm_90, which
    /// ptxas lowers to `F2FP` conversions to f16 and two `HMMA.16816.F32`
    /// (seen in the SASS of `cu/tensor_core.cu`, CUDA 13.0), and whose
    /// arithmetic is therefore the f16 MMA's:
    ///
    /// 1. `MMA-F16`: every operand becomes the f16 of the same value (exact;
    ///    e4m3 subnormals become f16 normal numbers, e5m2 subnormals stay
    ///    subnormal, exponent -14).
    /// 2. `MMA-SPLIT`: the first HMMA takes the 16 products with
    ///    `k mod 4 in {0, 1}` onto an accumulator of +0.0, the second the
    ///    16 with `k mod 4 in {2, 3}` onto the first's f32 result (ptxas's
    ///    register pairing of the e4m3 fragments, not k order).
    /// 3. `MMA-ALIGN`, `MMA-SUM`, `MMA-NORM`, `MMA-ZERO`: in each HMMA, the
    ///    16 exact products and the accumulator are aligned as in
    ///    `TC-ALIGN` but keeping 25 fraction bits below `2^E` (truncated
    ///    toward zero), added exactly, and the sum truncated toward zero to
    ///    24 significant bits (binary32's precision); a zero sum is +0.0.
    ///    NaN and infinities as in `TC-NAN`, `TC-INF`.
    /// 4. `MMA-ADD`: `d = r + c`, one binary32 addition rounded to nearest
    ///    even, where `r` is the second HMMA's result (the instruction's
    ///    `c` does not enter the HMMAs); a NaN result is `0x7FFF_FFFF`,
    ///    whatever `c`'s payload.
    MmaSync,
}

/// A bit-accurate model of one FP8 MMA instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Model {
    /// The instruction modelled.
    pub instruction: Instruction,
}

/// The sm_90 `wgmma` FP8 MMA (H100, H200).
pub const SM90_WGMMA: Model = Model {
    instruction: Instruction::Wgmma,
};

/// The sm_90 `mma.sync` FP8 MMA, as ptxas lowers it (H100, H200).
pub const SM90_MMA_SYNC: Model = Model {
    instruction: Instruction::MmaSync,
};

/// Products per MMA along k (elements).
pub const MMA_K: usize = 32;

/// Fraction bits kept below `2^E` by `TC-ALIGN`.
pub const ALIGN_FRACTION_BITS: i32 = 13;

/// Significant bits kept by `TC-NORM`.
pub const SUM_BITS: u32 = 14;

/// Fraction bits kept below `2^E` by `MMA-ALIGN` (the lowered `mma.sync`).
pub const MMA_ALIGN_FRACTION_BITS: i32 = 25;

/// Significant bits kept by `MMA-NORM` (the lowered `mma.sync`).
pub const MMA_SUM_BITS: u32 = 24;

/// An exact finite term `(-1)^neg * sig * 2^lsb`, with the exponent `align`
/// that `TC-ALIGN` compares.
#[derive(Clone, Copy, Debug)]
struct Term {
    neg: bool,
    sig: u64,
    lsb: i32,
    align: i32,
}

/// The class of an FP8 operand: a finite value, or a special.
#[derive(Clone, Copy)]
enum Operand {
    Finite {
        neg: bool,
        sig: u64,
        exp: i32,
        frac: i32,
    },
    Inf {
        neg: bool,
    },
    Nan,
}

fn unpack_fp8(kind: Fp8Kind, code: u8) -> Operand {
    let neg = code & 0x80 != 0;
    match kind {
        Fp8Kind::E4m3 => {
            if code & 0x7F == 0x7F {
                return Operand::Nan;
            }
            let (e, m) = (((code >> 3) & 0xF) as i32, (code & 7) as u64);
            if e == 0 {
                Operand::Finite {
                    neg,
                    sig: m,
                    exp: -6,
                    frac: 3,
                }
            } else {
                Operand::Finite {
                    neg,
                    sig: 8 | m,
                    exp: e - 7,
                    frac: 3,
                }
            }
        }
        Fp8Kind::E5m2 => {
            let (e, m) = (((code >> 2) & 0x1F) as i32, (code & 3) as u64);
            if e == 31 {
                return if m == 0 {
                    Operand::Inf { neg }
                } else {
                    Operand::Nan
                };
            }
            if e == 0 {
                Operand::Finite {
                    neg,
                    sig: m,
                    exp: -14,
                    frac: 2,
                }
            } else {
                Operand::Finite {
                    neg,
                    sig: 4 | m,
                    exp: e - 15,
                    frac: 2,
                }
            }
        }
    }
}

/// `|x|` truncated toward zero to a multiple of `2^unit`, for
/// `x = sig * 2^lsb`; returned in units of `2^unit`.
fn truncate_to(sig: u64, lsb: i32, unit: i32) -> i64 {
    let sh = lsb - unit;
    let v = if sig == 0 {
        0
    } else if sh >= 0 {
        // Only small left shifts occur: a non-zero term's alignment
        // exponent is at most E, so its lsb is at most 9 above the unit
        // (13 - f_a - f_b for a product: 9 for e5m2 x e5m2; 25 - 20 = 5
        // for an HMMA product; below the unit for c).
        sig << sh
    } else if sh > -64 {
        sig >> -sh
    } else {
        0
    };
    v as i64
}

/// One output element of one k = 32 FP8 MMA: `d = c + sum_k a[k] * b[k]`
/// under `model` (rules `TC-*` in the module documentation).
///
/// Shapes: `a` and `b` are 32 FP8 codes each (bytes) in formats `fa` and
/// `fb`; `c` is the incoming f32 accumulator. Returns the f32 `d`; a NaN
/// result is the canonical `0x7FFF_FFFF`.
///
/// Source: H200 test vectors (module documentation).
pub fn mma_k32(
    model: &Model,
    fa: Fp8Kind,
    a: &[u8; MMA_K],
    fb: Fp8Kind,
    b: &[u8; MMA_K],
    c: f32,
) -> f32 {
    match model.instruction {
        Instruction::Wgmma => wgmma_k32(fa, a, fb, b, c),
        Instruction::MmaSync => mma_sync_k32(fa, a, fb, b, c),
    }
}

const NAN: f32 = f32::from_bits(0x7FFF_FFFF);

fn wgmma_k32(fa: Fp8Kind, a: &[u8; MMA_K], fb: Fp8Kind, b: &[u8; MMA_K], c: f32) -> f32 {
    match terms_or_special::<{ MMA_K + 1 }>(unpack_fp8, fa, a, fb, b, |_| true, c) {
        Ok(terms) => sum_truncated(&terms, ALIGN_FRACTION_BITS, SUM_BITS),
        Err(special) => special,
    }
}

/// `TC-PRODUCT` with `TC-NAN` and `TC-INF`: the exact products of the
/// `N - 1` pairs `k` with `sel(k)`, operands read by `unpack`, and the
/// accumulator `acc` as the last term; or, when a special decides the
/// output, that output (NaN as `0x7FFF_FFFF`, or an infinity).
fn terms_or_special<const N: usize>(
    unpack: fn(Fp8Kind, u8) -> Operand,
    fa: Fp8Kind,
    a: &[u8; MMA_K],
    fb: Fp8Kind,
    b: &[u8; MMA_K],
    sel: impl Fn(usize) -> bool,
    acc: f32,
) -> Result<[Term; N], f32> {
    let mut terms = [Term {
        neg: false,
        sig: 0,
        lsb: 0,
        align: 0,
    }; N];
    let (mut pos_inf, mut neg_inf, mut nan) = (false, false, acc.is_nan());
    for (n, k) in (0..MMA_K).filter(|&k| sel(k)).enumerate() {
        match (unpack(fa, a[k]), unpack(fb, b[k])) {
            (Operand::Nan, _) | (_, Operand::Nan) => nan = true,
            (Operand::Inf { neg: x }, Operand::Inf { neg: y }) => {
                if x ^ y {
                    neg_inf = true
                } else {
                    pos_inf = true
                }
            }
            (Operand::Inf { neg: x }, Operand::Finite { neg: y, sig, .. })
            | (Operand::Finite { neg: y, sig, .. }, Operand::Inf { neg: x }) => {
                if sig == 0 {
                    nan = true
                } else if x ^ y {
                    neg_inf = true
                } else {
                    pos_inf = true
                }
            }
            (
                Operand::Finite {
                    neg: n1,
                    sig: m1,
                    exp: e1,
                    frac: f1,
                },
                Operand::Finite {
                    neg: n2,
                    sig: m2,
                    exp: e2,
                    frac: f2,
                },
            ) => {
                terms[n] = Term {
                    neg: n1 ^ n2,
                    sig: m1 * m2,
                    lsb: e1 + e2 - f1 - f2,
                    align: e1 + e2,
                };
            }
        }
    }
    if acc.is_infinite() {
        if acc < 0.0 {
            neg_inf = true
        } else {
            pos_inf = true
        }
    }
    if nan || (pos_inf && neg_inf) {
        return Err(NAN);
    }
    if pos_inf {
        return Err(f32::INFINITY);
    }
    if neg_inf {
        return Err(f32::NEG_INFINITY);
    }
    terms[N - 1] = f32_term(acc);
    Ok(terms)
}

/// A finite f32 as a term: its unbiased exponent (-126 for subnormals)
/// and 24-bit significand.
fn f32_term(c: f32) -> Term {
    let cb = c.to_bits();
    let (cexp, cman) = ((cb >> 23) & 0xFF, (cb & 0x7F_FFFF) as u64);
    let neg = cb >> 31 != 0;
    if cexp == 0 {
        Term {
            neg,
            sig: cman,
            lsb: -149,
            align: -126,
        }
    } else {
        Term {
            neg,
            sig: cman | 0x80_0000,
            lsb: cexp as i32 - 150,
            align: cexp as i32 - 127,
        }
    }
}

/// The multi-term addition of `terms` (all finite): align to the largest
/// exponent of a non-zero term keeping `fraction_bits` below it, each term
/// truncated toward zero; sum exactly; truncate the sum toward zero to
/// `sum_bits` significant bits; a zero sum is +0.0 (`TC-ALIGN` to
/// `TC-ZERO`; `MMA-ALIGN` to `MMA-ZERO`).
fn sum_truncated(terms: &[Term], fraction_bits: i32, sum_bits: u32) -> f32 {
    // TC-ALIGN: the largest exponent among the non-zero terms.
    let mut e_max: Option<i32> = None;
    for t in terms {
        if t.sig != 0 {
            e_max = Some(match e_max {
                Some(e) if e >= t.align => e,
                _ => t.align,
            });
        }
    }
    let Some(e_max) = e_max else {
        return 0.0; // every term is zero
    };
    let unit = e_max - fraction_bits;
    let mut sum: i64 = 0;
    for t in terms {
        let v = truncate_to(t.sig, t.lsb, unit);
        sum += if t.neg { -v } else { v };
    }
    if sum == 0 {
        return 0.0;
    }
    let neg = sum < 0;
    let mut mag = sum.unsigned_abs();
    let lead = 63 - mag.leading_zeros();
    if lead >= sum_bits {
        let drop = lead + 1 - sum_bits;
        mag = (mag >> drop) << drop;
    }
    let v = scale_pow2(mag, unit);
    if neg {
        -v
    } else {
        v
    }
}

/// `mag * 2^exp` as f32, for `mag` of at most 24 significant bits and
/// `exp >= -139` (always exact: see the module documentation).
fn scale_pow2(mag: u64, exp: i32) -> f32 {
    // mag < 2^40 here, exact in f64; 2^exp is split so each factor is normal.
    let mut v = mag as f64;
    let mut e = exp;
    while e > 0 {
        let s = if e > 1000 { 1000 } else { e };
        v *= pow2_f64(s);
        e -= s;
    }
    while e < 0 {
        let s = if e < -1000 { -1000 } else { e };
        v *= pow2_f64(s);
        e -= s;
    }
    v as f32
}

/// `2^e` for `-1022 <= e <= 1023`, built from its bits.
fn pow2_f64(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// One FP8 operand as the f16 that `F2FP` converts it to (exactly: every
/// e4m3 and e5m2 value is an f16 value): `(neg, sig, exp)` with the value
/// `(-1)^neg * sig * 2^(exp - 10)`, `sig` of 11 bits with the implicit bit,
/// `exp` the f16 exponent (-14 for f16 subnormals and zero). e4m3
/// subnormals become f16 *normal* numbers here, so their exponent is their
/// leading bit's, unlike in [`Instruction::Wgmma`]'s `TC-PRODUCT`.
fn to_f16(kind: Fp8Kind, code: u8) -> Operand {
    match unpack_fp8(kind, code) {
        Operand::Finite {
            neg,
            sig,
            exp,
            frac,
        } => {
            if sig == 0 {
                return Operand::Finite {
                    neg,
                    sig: 0,
                    exp: -14,
                    frac: 10,
                };
            }
            // value = sig * 2^(exp - frac); normalise to 11 bits unless the
            // f16 exponent would fall below -14 (e5m2 subnormals stay so).
            let lead = 63 - sig.leading_zeros() as i32; // leading bit of sig
            let mut e = exp - frac + lead; // exponent of the leading bit
            let mut s = sig << (10 - lead);
            if e < -14 {
                s >>= -14 - e;
                e = -14;
            }
            Operand::Finite {
                neg,
                sig: s,
                exp: e,
                frac: 10,
            }
        }
        other => other,
    }
}

/// One `HMMA.16816.F32` of the lowered `mma.sync` on the products `k` with
/// `sel(k)`, onto the f32 accumulator `acc` (rules `MMA-*` on
/// [`Instruction::MmaSync`]).
fn hmma_k16(
    fa: Fp8Kind,
    a: &[u8; MMA_K],
    fb: Fp8Kind,
    b: &[u8; MMA_K],
    sel: impl Fn(usize) -> bool,
    acc: f32,
) -> f32 {
    match terms_or_special::<{ MMA_K / 2 + 1 }>(to_f16, fa, a, fb, b, sel, acc) {
        Ok(terms) => sum_truncated(&terms, MMA_ALIGN_FRACTION_BITS, MMA_SUM_BITS),
        Err(special) => special,
    }
}

fn mma_sync_k32(fa: Fp8Kind, a: &[u8; MMA_K], fb: Fp8Kind, b: &[u8; MMA_K], c: f32) -> f32 {
    // MMA-SPLIT: the first HMMA takes k mod 4 in {0, 1} onto +0, the second
    // k mod 4 in {2, 3} onto the first's result; MMA-ADD: then c, one
    // binary32 addition rounded to nearest even.
    let first = hmma_k16(fa, a, fb, b, |k| k % 4 < 2, 0.0);
    let second = hmma_k16(fa, a, fb, b, |k| k % 4 >= 2, first);
    let d = second + c;
    if d.is_nan() {
        NAN // the FADD's NaN is the canonical one, whatever c's payload
    } else {
        d
    }
}
