//! exp, softplus, sigmoid and SiLU as explicit sequences of binary32 basic
//! operations.
//!
//! `core` has no `f32::exp`, and a kernel's `expf`/`__expf` is not specified
//! bit for bit anyway, so these functions *define* the transcendentals of
//! the Gated DeltaNet contract. Each is a fixed sequence of
//!
//! - binary32 `+ - * /`, each rounded to nearest even on its own;
//! - exact bit operations: sign tests, comparisons, building `2^k` from its
//!   exponent field, and converting an integer-valued `f32` to `i32`.
//!
//! There is no fused multiply-add anywhere. A CUDA kernel reproduces every
//! result bit for bit by spelling the operations with `__fadd_rn`,
//! `__fsub_rn`, `__fmul_rn` and `__fdiv_rn` (or compiling with NVRTC
//! `--fmad=false` and without `-use_fast_math`), keeping subnormals
//! (`-ftz=false`, NVRTC's default), `__int_as_float((k + 127) << 23)` for
//! `2^k`, and `(int)` (or `__float2int_rn`: the operand is already an
//! integer, so every rounding mode agrees) for the integer conversion. The
//! contraction that must be avoided is real: `x * LOG2E + SHIFTER` in step 1
//! of [`exp`] and every Horner step become an `fma` under the default
//! `--fmad=true`, and then the bits differ.
//!
//! Accuracy. `core/tests/gdn_transcendental.rs` evaluates every function on
//! all 2^32 inputs (release builds). Where the mathematics pins the result
//! (saturation to 0, 1 or infinity, the identity above a threshold, the
//! constant near 0: each region proved in the test) the output must be that
//! value exactly; elsewhere it is compared with a reference computed in
//! `f64` with `std` (the platform's `exp`/`ln_1p`, within a few `f64` ulps,
//! about `2^-27` of an `f32` ulp). Error is measured in ulps of the binary32
//! grid at the reference value (below `2^-126` the ulp is `2^-149`), so it
//! is the true error to about `2^-27` ulp, and "codes" counts the distance
//! from the reference rounded to binary32, which is the correctly rounded
//! result except within about `2^-27` ulp of a midpoint. The measured
//! maxima are stated on each function and enforced by the tests.
//!
//! Names of the shared steps: [`exp_parts`] (range reduction and
//! polynomial, `exp(x) = y * 2^n`) and [`scale`] (multiplication by `2^n`
//! with one rounding). SiLU uses them directly so that its negative branch
//! keeps full precision where `exp(x)` is subnormal.

/// `log2(e)` rounded to binary32: `0x3FB8_AA3B` = 1.44269502162933349609375.
pub const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B);
/// The high part of `ln 2`: `0x3F31_7200` = 0.693145751953125, which has 15
/// significant bits, so `n * LN2_HI` is exact for every `|n| < 2^9` used
/// here.
pub const LN2_HI: f32 = f32::from_bits(0x3F31_7200);
/// The low part, `ln 2 - LN2_HI` rounded to binary32: `0x35BF_BE8E` =
/// 1.42860676533018704503774642944e-6 (fdlibm's `e_expf.c` uses the same
/// pair).
pub const LN2_LO: f32 = f32::from_bits(0x35BF_BE8E);
/// `1.5 * 2^23` = 12582912.0 (`0x4B40_0000`): adding and subtracting it
/// rounds a binary32 of magnitude below `2^22` to the nearest integer, ties
/// to even (the sum lies in `[2^23, 2^24)`, where the ulp is 1).
pub const SHIFTER: f32 = f32::from_bits(0x4B40_0000);

/// Taylor coefficients `1/k!` of `exp`, rounded to binary32, for
/// `k = 2..=7`: `1/2` `0x3F00_0000`, `1/6` `0x3E2A_AAAB`, `1/24`
/// `0x3D2A_AAAB`, `1/120` `0x3C08_8889`, `1/720` `0x3AB6_0B61`, `1/5040`
/// `0x3950_0D01`. On `|r| <= 0.35` the truncation error of the degree-7
/// polynomial is below `0.35^8 / 8! < 2^-27`, about a tenth of an ulp.
pub const EXP_C: [f32; 6] = [
    f32::from_bits(0x3F00_0000),
    f32::from_bits(0x3E2A_AAAB),
    f32::from_bits(0x3D2A_AAAB),
    f32::from_bits(0x3C08_8889),
    f32::from_bits(0x3AB6_0B61),
    f32::from_bits(0x3950_0D01),
];

/// Coefficients `1/(2k+1)` of `atanh(s)/s = 1 + s^2/3 + s^4/5 + ...`, rounded
/// to binary32, for `k = 1..=8`: `1/3` `0x3EAA_AAAB`, `1/5` `0x3E4C_CCCD`,
/// `1/7` `0x3E12_4925`, `1/9` `0x3DE3_8E39`, `1/11` `0x3DBA_2E8C`, `1/13`
/// `0x3D9D_89D9`, `1/15` `0x3D88_8889`, `1/17` `0x3D70_F0F1`. With
/// `s <= 1/3` the first omitted term is below `(1/9)^9 / 19 < 2^-32`.
pub const ATANH_C: [f32; 8] = [
    f32::from_bits(0x3EAA_AAAB),
    f32::from_bits(0x3E4C_CCCD),
    f32::from_bits(0x3E12_4925),
    f32::from_bits(0x3DE3_8E39),
    f32::from_bits(0x3DBA_2E8C),
    f32::from_bits(0x3D9D_89D9),
    f32::from_bits(0x3D88_8889),
    f32::from_bits(0x3D70_F0F1),
];

/// Above this, [`exp`] is `+inf`: 89.0 (`0x42B2_0000`). `exp(88.7228394)`
/// is already above `f32::MAX`; inputs in between overflow inside
/// [`scale`], which gives the same `+inf` by rounding.
pub const EXP_HI: f32 = f32::from_bits(0x42B2_0000);
/// Below this, [`exp`] is `+0.0`: -104.0 (`0xC2D0_0000`); `exp(-104) <
/// 2^-150`, half the smallest subnormal, so `+0.0` is the correctly rounded
/// result there, and inputs just above it round to 0 inside [`scale`].
pub const EXP_LO: f32 = f32::from_bits(0xC2D0_0000);
/// Below this, [`silu`] is `-0.0`: -120.0 (`0xC2F0_0000`); `|x| e^x < 2^-150`
/// from about -108.9 down.
pub const SILU_LO: f32 = f32::from_bits(0xC2F0_0000);
/// Above this, [`softplus`] returns its input: 20.0 (`0x41A0_0000`), torch's
/// default `threshold`.
pub const SOFTPLUS_THRESHOLD: f32 = f32::from_bits(0x41A0_0000);

/// `2^k` for `k` in `-126..=127`, built from its exponent field (exact).
/// CUDA: `__int_as_float((k + 127) << 23)`.
#[inline]
pub fn pow2(k: i32) -> f32 {
    debug_assert!((-126..=127).contains(&k));
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `y * 2^n` with at most one rounding, for `n` in `-190..=254`.
///
/// 1. `n > 127`: `(y * 2^127) * 2^(n - 127)`.
/// 2. `n < -126`: `(y * 2^(n + 64)) * 2^-64`.
/// 3. otherwise: `y * 2^n`.
///
/// Each factor is built by [`pow2`]. In cases 1 and 2 the first product is
/// exact whenever it is finite and normal, which holds for every caller here
/// (`|y| >= 0.5` in case 2, and `y * 2^127` is finite in case 1 because
/// `|y| < 2`), so the only rounding is the last multiply: overflow gives
/// `inf`, a subnormal result is rounded once (IEEE 754-2019 clause 7.5).
#[inline]
pub fn scale(y: f32, n: i32) -> f32 {
    if n > 127 {
        (y * pow2(127)) * pow2(n - 127)
    } else if n < -126 {
        (y * pow2(n + 64)) * pow2(-64)
    } else {
        y * pow2(n)
    }
}

/// The reduced exponential: `exp(x) = y * 2^n` with `y` in about
/// `[0.70, 1.42]`, for finite `x` in `[-120, 89]` (precondition; the callers
/// check it).
///
/// 1. `t = x * LOG2E`; `nf = (t + SHIFTER) - SHIFTER`: `t` rounded to the
///    nearest integer, ties to even (exact: `|t| < 2^8`); `n = nf` as `i32`
///    (exact).
/// 2. `r = (x - nf * LN2_HI) - nf * LN2_LO`, left to right. `nf * LN2_HI` is
///    exact (15 + 8 significant bits), and so is the first subtraction (its
///    result is below 0.35 in magnitude and a multiple of the smaller of the
///    operands' ulps, so it fits in 24 bits); `r` carries one rounding from
///    the second product and one from the second subtraction. `|r| < 0.35`.
///    (Because the first product is exact, a kernel that fuses it into an
///    `fma` gets the same bits there; nowhere else.)
/// 3. Horner, highest coefficient first, with `c = EXP_C`:
///    `p = c[5]; p = p * r + c[4]; p = p * r + c[3]; p = p * r + c[2];
///    p = p * r + c[1]; p = p * r + c[0]` (each step a multiply then an add).
/// 4. `y = 1 + (r + (r * r) * p)`: `r2 = r * r`, `u = r2 * p`, `w = r + u`,
///    `y = 1 + w`.
#[inline]
pub fn exp_parts(x: f32) -> (f32, i32) {
    // Step 1.
    let t = x * LOG2E;
    let nf = (t + SHIFTER) - SHIFTER;
    let n = nf as i32;
    // Step 2.
    let r = (x - nf * LN2_HI) - nf * LN2_LO;
    // Step 3.
    let c = &EXP_C;
    let mut p = c[5];
    p = p * r + c[4];
    p = p * r + c[3];
    p = p * r + c[2];
    p = p * r + c[1];
    p = p * r + c[0];
    // Step 4.
    let r2 = r * r;
    let u = r2 * p;
    let w = r + u;
    (1.0 + w, n)
}

/// `e^x` in binary32.
///
/// 1. `EXP-NAN`: a NaN returns `x` itself.
/// 2. `EXP-HI`: `x > 89.0` (`+inf` included) returns `+inf`.
/// 3. `EXP-LO`: `x < -104.0` (`-inf` included) returns `+0.0`.
/// 4. Otherwise `(y, n) = exp_parts(x)` and the result is `scale(y, n)`:
///    one rounding when the result is subnormal, overflow to `+inf` from
///    `x > 88.7228394` (by rounding inside [`scale`]).
///
/// Measured accuracy (all 2^32 inputs): max error **1.0226 ulp** (at
/// `x = 59.270813`), never more than **1 code** from the correctly rounded
/// result; the test enforces 1.03 ulp and 1 code. `exp(-0.0) = exp(+0.0) =
/// 1.0` exactly.
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    if x < EXP_LO {
        return 0.0;
    }
    let (y, n) = exp_parts(x);
    scale(y, n)
}

/// `log(1 + z)` for `z` in `[0, 1]` (precondition), through
/// `log(1 + z) = 2 atanh(s)`, `s = z / (2 + z)` in `[0, 1/3]`.
///
/// 1. `d = 2 + z`; `s = z / d`; `s2 = s * s`.
/// 2. Horner with `c = ATANH_C`: `p = c[7]; p = p * s2 + c[6]; ...;
///    p = p * s2 + c[0]` (seven multiply-add steps, each a multiply then an
///    add).
/// 3. `a = s + s` (exact); `result = a + a * (s2 * p)`: `u = s2 * p`,
///    `v = a * u`, `a + v`.
#[inline]
pub fn log1p_unit(z: f32) -> f32 {
    // Step 1.
    let d = 2.0 + z;
    let s = z / d;
    let s2 = s * s;
    // Step 2.
    let c = &ATANH_C;
    let mut p = c[7];
    let mut i = 7;
    while i > 0 {
        i -= 1;
        p = p * s2 + c[i];
    }
    // Step 3.
    let a = s + s;
    let u = s2 * p;
    let v = a * u;
    a + v
}

/// `softplus(x) = log(1 + e^x)` in binary32, torch's `threshold = 20`.
///
/// 1. `SP-NAN`: a NaN returns `x`.
/// 2. `SP-LINEAR`: `x > 20.0` (`+inf` included) returns `x`, as
///    `torch.nn.functional.softplus` does with its default `beta = 1`,
///    `threshold = 20` ("reverts to the linear function when
///    input x beta > threshold"). Here that is also the correctly rounded
///    value: `log(1 + e^-x) < 2.1e-9`, far below half an ulp of `x`.
/// 3. `SP-POS`: `x > 0` returns `x + log1p_unit(exp(-x))` (one add after the
///    two calls; the stable form `max(x, 0) + log1p(e^-|x|)`).
/// 4. `SP-NEG`: otherwise (`x <= 0`, `-0.0` and `-inf` included) returns
///    `log1p_unit(exp(x))`; `exp` underflows to `+0.0` below -104 and the
///    result is then `+0.0`.
///
/// Measured accuracy (all 2^32 inputs): max error **2.7969 ulp** (at
/// `x = -2.7570076`), never more than **3 codes** from the correctly rounded
/// result; the test enforces 2.80 ulp and 3 codes.
pub fn softplus(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > SOFTPLUS_THRESHOLD {
        return x;
    }
    if x > 0.0 {
        x + log1p_unit(exp(-x))
    } else {
        log1p_unit(exp(x))
    }
}

/// The logistic function `1 / (1 + e^-x)` in binary32, in its two-branch
/// stable form.
///
/// 1. `SIG-NAN`: a NaN returns `x`.
/// 2. `SIG-POS`: `x >= 0` (`+0.0`, `-0.0` and `+inf` included):
///    `1 / (1 + exp(-x))`, that is `e = exp(-x)`, `d = 1 + e`, `1 / d`.
/// 3. `SIG-NEG`: `x < 0`: `z = exp(x)`, `z / (1 + z)`. The one-branch form
///    `1 / (1 + exp(-x))` would return `+0.0` for every `x < -88.8` (where
///    `exp(-x)` overflows) although the true value stays a normal or
///    subnormal number down to -103.3; this branch keeps it, and costs the
///    same operations.
///
/// Measured accuracy (all 2^32 inputs): max error **2.4019 ulp** (at
/// `x = -4.157294`), never more than **2 codes** from the correctly rounded
/// result; the test enforces 2.41 ulp and 2 codes.
pub fn sigmoid(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x >= 0.0 {
        let e = exp(-x);
        1.0 / (1.0 + e)
    } else {
        let z = exp(x);
        z / (1.0 + z)
    }
}

/// SiLU (swish) `x * sigmoid(x) = x / (1 + e^-x)` in binary32.
///
/// 1. `SILU-NAN`: a NaN returns `x`.
/// 2. `SILU-POS`: `x >= 0` (`+0.0`, `-0.0` and `+inf` included):
///    `x / (1 + exp(-x))`, that is `e = exp(-x)`, `d = 1 + e`, `x / d`.
///    (`-0.0` gives `-0.0`.)
/// 3. `SILU-TAIL`: `x < -120.0` (`-inf` included) returns `-0.0`: the exact
///    value `x e^x` is below `2^-150` in magnitude from -108.9 down, so this
///    is the correctly rounded result (and the limit at `-inf`, where
///    torch's `x * sigmoid(x)` gives NaN).
/// 4. `SILU-NEG`: `-120 <= x < 0`: `(y, n) = exp_parts(x)`,
///    `z = scale(y, n)` (that is `exp(x)`), `d = 1 + z`, `m = x * y`,
///    `q = m / d`, result `scale(q, n)`. Algebraically `x e^x / (1 + e^x)`;
///    the factor `2^n` is applied last so that `x * y` keeps 24 bits where
///    `e^x` alone would be subnormal (`x < -87.3`), with one final rounding
///    when the result is subnormal. Where nothing is subnormal the scalings
///    are exact and this equals `(x * z) / (1 + z)`.
///
/// Measured accuracy (all 2^32 inputs): max error **3.3938 ulp** (at
/// `x = -3.2112513`), never more than **3 codes** from the correctly rounded
/// result; the test enforces 3.40 ulp and 3 codes. (At subnormal `x > 0`
/// the exact value lies just above a tie that `x / 2` breaks to even, so
/// the result can be one code low there: within 0.5 ulp.)
pub fn silu(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x >= 0.0 {
        let e = exp(-x);
        return x / (1.0 + e);
    }
    if x < SILU_LO {
        return -0.0;
    }
    let (y, n) = exp_parts(x);
    let z = scale(y, n);
    let d = 1.0 + z;
    let m = x * y;
    let q = m / d;
    scale(q, n)
}

/// Inputs that reach every branch of [`exp`], [`softplus`], [`sigmoid`]
/// and [`silu`]: signed zeros, subnormals (`+-1e-40`), both sides of exp's
/// lower cut-off (`-104` ) and SiLU's (`-120`) with subnormal results in
/// between (`-87.5` .. `-121`), softplus's linear branch above 20 (`21`,
/// `30`, `59.27`), both sides of exp's overflow at 89 (`88.9`, `89.5`),
/// and ordinary negative arguments (`-2.76`, `-3.21`, `-4.16`, `-20.5`).
/// Test data, not part of the contract: the kernels' tests and generators
/// mix them into their inputs so that every branch of the device's
/// transcriptions is compared.
pub const BRANCH_INPUTS: [f32; 18] = [
    0.0,
    -0.0,
    1e-40,
    -1e-40,
    -87.5,
    -90.0,
    -104.5,
    -110.0,
    -121.0,
    21.0,
    88.9,
    89.5,
    -3.211_251_3,
    -2.757_007_6,
    -4.157_294,
    30.0,
    -20.5,
    59.270_813,
];
