//! Gated activations, `act(gate) * up`: SwiGLU and GeGLU as the field's
//! kernels compute them. vLLM's `silu_and_mul`, `mul_and_silu`,
//! `gelu_and_mul` and `gelu_tanh_and_mul` ops (`csrc/activation_kernels.cu`)
//! and their torch form (`SiluAndMul.forward_native`, `F.silu(x[..., :d]) *
//! x[..., d:]`), FlashInfer's `silu_and_mul`, `gelu_and_mul` and
//! `gelu_tanh_and_mul` (`include/flashinfer/activation.cuh`), SGLang's
//! (which calls FlashInfer's, or sgl-kernel's copy of the same template),
//! Liger's Triton `LigerSiLUMulFunction` and `LigerGELUMulFunction`.
//!
//! Shapes (elements, row-major): `x [tokens][2 d]`, values of the model's
//! [`Dtype`]; the output `[tokens][d]` of the same dtype (held here as an
//! interval of dtype values per element, below).
//!
//! The activation is a transcendental function, and no two kernels of the
//! field evaluate it alike (CUDA's `expf` and `__expf`, `erff`, `tanhf`,
//! PTX `tanh.approx.f32`, Triton's `ex2.approx` of a scaled argument,
//! divisions correctly rounded or within 2 ulps). So the contract is an
//! interval with a decided-bits rule. For token `t` and `j < d`:
//!
//! 1. `ACT-LAYOUT`: by the [`Layout`], the gate `g = x[t][j]` and the up
//!    projection `y = x[t][d + j]` ([`Layout::GateFirst`]: vLLM's
//!    `silu_and_mul`, every `*_and_mul`), or the reverse
//!    ([`Layout::UpFirst`]: vLLM's `mul_and_silu`, `x * silu(y)`).
//! 2. `ACT-FN`: the exact activation of the gate ([`Activation`]):
//!    `silu(g) = g / (1 + e^-g)`, `gelu(g) = g/2 (1 + erf(g / sqrt 2))`,
//!    `gelu_tanh(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))`,
//!    `gelu_quick(g) = g / (1 + e^(-1.702 g))`; [`Activation::exact`]
//!    encloses it.
//! 3. `ACT-EVAL`: the binary32 values `[a_lo, a_hi]` any evaluation of
//!    `act(g)` in the field's forms can give, under the model stated at
//!    [`Activation::range`] (each of `exp`, `erf`, `tanh` within the
//!    declared `act_ulps`, `exp` plus CUDA's `__expf` term, divisions
//!    within 2 ulps, every other operation one rounding, flush to zero or
//!    not): [`ActRange`].
//! 4. `ACT-OUT`: the output is a composition of roundings of `a` and `y`
//!    named by the [`Arithmetic`] the kernel declares. For a fixed `y`
//!    each is monotone in `a` (non-decreasing for `y` positive or `+0`,
//!    non-increasing for `y` negative or `-0`, in the total order of
//!    binary32 values where `-0 < +0`), so the outputs of every admissible
//!    `a` lie between the outputs at `a_lo` and `a_hi`. The activation is
//!    not monotone in `g`; the interval is of `act(g)` for the one `g`
//!    given, so that does not matter.
//! 5. `ACT-FTZ`: a kernel compiled with flush to zero (nvcc
//!    `--use_fast_math`, FlashInfer's `ex2.approx.ftz`) reads a subnormal
//!    operand, or writes a subnormal result, as a zero of its sign. Rule
//!    `ACT-EVAL`'s range admits it; in the output, as in
//!    [`crate::rms_norm`]'s `RMS-FTZ`, every flush moves a value towards
//!    the zero of its sign and every later step is monotone, so the
//!    outputs of any flush pattern lie between the all-flushed and the
//!    unflushed output ([`Arithmetic::interval`]).
//! 6. `ACT-DECIDED`: where the interval is one value (its two ends have
//!    the same bits), the kernel's output must be that value bit for bit;
//!    elsewhere it must lie in the interval ([`admits`]). With a 16-bit
//!    dtype most elements are decided; with f32 output most are only
//!    bounded (the interval spans the f32 values of `a y` for every
//!    admissible `a`); `gelu` and `gelu_tanh` of gates below about -4 are
//!    bounded in every dtype (their `1 + erf` and `1 + tanh` cancel: a
//!    2-ulp `erff` near `-1` leaves `1 + erf` anywhere in `[0, 2^-23]`).
//! 7. `ACT-RANGE`: an input that is not finite, or of magnitude `2^127`
//!    or more, is refused (there `1.702 g` and `2 g` overflow and a
//!    kernel's activation may be infinite, its product with a zero NaN).
//!
//! Sources (each [`Arithmetic`] and [`Activation`] cites its own): vLLM
//! `csrc/activation_kernels.cu` (`compute`: `ACT_FN(x) * y` with `ACT_FN`
//! returning `scalar_t`, a c10 `BFloat16`/`Half` product: float
//! multiply, one rounding; current builds' vectorised `packed_compute`
//! rounds `PACKED_ACT_FN(gate)` to the packed dtype, then multiplies in
//! float: the same bits; `act_first = false` for `mul_and_silu`); the CUDA
//! C++ Programming Guide, Mathematical Functions appendix (`expf`, `erff`,
//! `tanhf`: 2 ulps; `__expf`: `2 + floor(|1.173 x|)` ulps; `__fdividef(x,
//! y)`: 2 ulps for `|y|` in `[2^-126, 2^126]`, 0 for `2^126 < |y| <
//! 2^128`); the PTX ISA (`div.full.f32`, `div.approx.f32`: 2 ulps, the
//! latter 0 for a divisor beyond `2^126`); Higham, *Accuracy and Stability
//! of Numerical Algorithms* (2nd ed.), §2.2 (the standard model) and Lemma
//! 3.1 (`gamma_n`); Abramowitz and Stegun 7.1.6 (the series of `erf`) and
//! 7.1.13 (`erfc(x) < e^(-x^2) / (x sqrt(pi))`).

use crate::moe_routing::{abs_f64, exp_enclosure, pow2, Enclosure, U};
use crate::rms_norm::flush_subnormal;

/// The model's element type: [`crate::dtype::Dtype`].
pub use crate::dtype::Dtype;
/// Whether a kernel's output bits are admitted by an interval (rule
/// `ACT-DECIDED`): [`crate::rms_norm::admits`], the same rule.
pub use crate::rms_norm::admits;

/// The default accuracy of the kernel's `exp`, `erf` and `tanh`, in ulps:
/// CUDA's `expf`, `erff` and `tanhf` (2 ulps each, CUDA C++ Programming
/// Guide), which torch's and vLLM's kernels call; Triton's libdevice
/// `tanh` and `erf` (`__nv_tanhf`, `__nv_erff`, the same functions);
/// CUDA's `__expf` and Triton's `tl.exp` (`ex2.approx` of `x log2(e)`)
/// with the `exp` argument term ([`EXP_ARG_ULPS`]). PTX `tanh.approx.f32`
/// (FlashInfer's `math::tanh`) is not inside it: its measured maximum
/// relative error is `1.113e-5` (N. Juffa, NVIDIA developer forums,
/// "Hardware-accelerated tanh() on Turing"), 94 ulps in this module's
/// measure; a kernel that calls it declares at least that (on an H100 a
/// kernel in FlashInfer's form passed every arm at 64 and failed at 2;
/// `python/examples/act_and_mul.py` declares 128).
pub const DEFAULT_ACT_ULPS: u32 = 2;

/// The most ulps a declaration may take (`2^16`: a relative error of
/// `2^-7`, beyond any field kernel; the bound's derivation needs it below
/// 1).
pub const MAX_ACT_ULPS: u32 = 1 << 16;

/// The accuracy of a division, in ulps: correctly rounded (half an ulp),
/// PTX `div.full.f32` (Triton's `/`) and `div.approx.f32` (`__fdividef`,
/// `--use_fast_math`), each within 2 ulps (PTX ISA, `div`).
pub const DIV_ULPS: u32 = 2;

/// The `exp` argument's share of the error, in ulps per unit of `|s|`:
/// CUDA's `__expf(s)` is within `2 + floor(|1.173 s|)` ulps (CUDA C++
/// Programming Guide), being `ex2.approx(s * log2(e))` whose argument
/// rounding moves the result by `e^(|s| u)`; Triton's `tl.exp` is the same
/// composition. Taken at `|s|` up to [`EXP_ARG_CAP`].
pub const EXP_ARG_ULPS: f64 = 1.25;

/// The largest `|s|` the argument term is taken at: beyond `|s| = 104`
/// every `exp` is `+0`, a subnormal or `+inf` (`e^-104 < 2^-150`,
/// `e^89 > 2^128`), and the bound at 200 already admits a subnormal result
/// off by 252 subnormal ulps.
pub const EXP_ARG_CAP: f64 = 200.0;

/// The widest `d` the contract takes.
pub const MAX_D: usize = 1 << 20;

/// Rule `ACT-RANGE`: `x` finite and below `2^127` in magnitude.
pub fn in_range(x: f32) -> bool {
    x.abs() < 1.701_411_8e38
}

/// The smallest normal binary32, `2^-126`.
const MIN_NORMAL: f64 = pow2(-126);
/// The largest finite binary32.
const MAX32: f64 = f32::MAX as f64;
/// Where binary32 rounding to nearest overflows: `2^128 - 2^103`, the
/// largest finite value plus half its ulp (a tie rounds to the even
/// infinity).
const OVERFLOW: f64 = pow2(128) - pow2(103);

/// The activation of the gate (rule `ACT-FN`), and the field's forms of
/// its binary32 evaluation (rule `ACT-EVAL`, [`Activation::range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// SiLU (swish), `g sigma(g) = g / (1 + e^-g)`: SwiGLU (Llama, Qwen,
    /// Mistral, DeepSeek). vLLM's `silu_kernel` (`(float)x / (1.0f +
    /// expf((float)-x))`), torch's CUDA `silu` (`x_acc / (1 + exp(-x_acc))`
    /// in float), FlashInfer's `silu` (`val / (1.0f + __expf(-val))`),
    /// Liger's `silu` (`x * tl.sigmoid(x)`, `tl.sigmoid(x) = 1 / (1 +
    /// exp(-x))`).
    Silu,
    /// GELU, the erf form, `g/2 (1 + erf(g / sqrt 2))`: GeGLU (Gemma's
    /// `gelu`). vLLM's `gelu_kernel` and FlashInfer's `gelu` (`f * 0.5f *
    /// (1.0f + ::erf(f * M_SQRT1_2))`), torch's `gelu(approximate="none")`
    /// (the same expression in float).
    Gelu,
    /// GELU, the tanh form, `g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715
    /// g^3)))` (Gemma's `gelu_pytorch_tanh`). vLLM's `gelu_tanh_kernel`
    /// and torch's `gelu(approximate="tanh")` (`x_cube = f * f * f; inner =
    /// kBeta * (f + kKappa * x_cube); 0.5f * f * (1.0f + tanhf(inner))`),
    /// FlashInfer's `gelu_tanh` (`val * (0.5f * (1.0f +
    /// math::tanh(...)))`, PTX `tanh.approx.f32`), Liger's GeGLU (libdevice
    /// `tanh`). The same function is `g sigma(2 inner)`, which is also
    /// admitted.
    GeluTanh,
    /// Quick GELU, `g sigma(1.702 g) = g / (1 + e^(-1.702 g))`: vLLM's
    /// `gelu_quick_kernel` (`(float)x / (1.0f + expf(-1.702f *
    /// (float)x))`), CLIP's `QuickGELU`.
    GeluQuick,
}

impl Activation {
    /// Every activation, in the order identification reports them.
    pub const ALL: [Activation; 4] = [
        Activation::Silu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::GeluQuick,
    ];

    /// The name a check takes (vLLM's): `"silu"`, `"gelu"`, `"gelu_tanh"`,
    /// `"gelu_quick"`.
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::GeluQuick => "gelu_quick",
        }
    }

    /// An enclosure of the exact real `act(x)` (rule `ACT-FN`), for a
    /// finite `x`: the contract's expression with every operation exact,
    /// computed in binary64 with each result rounded outward and the
    /// transcendentals enclosed soundly (`exp` from this crate's binary32
    /// [`crate::gdn::transcendental::exp`], within 1.03 ulp on all 2^32
    /// inputs, as [`crate::moe_routing`] encloses it; `tanh` from `exp`;
    /// `erf` from its series, below). Its width is a few binary32 ulps of
    /// the value (`gelu` and `gelu_tanh` far in the negative tail: a few
    /// ulps of `1` in `1 + erf`). A NaN or infinite `x` gives `[NaN, NaN]`.
    pub fn exact(self, x: f32) -> Enclosure {
        if !x.is_finite() {
            return pt(f64::NAN);
        }
        eval(self, x, &Model::EXACT)
    }

    /// The binary32 values `[lo, hi]` any admissible evaluation of
    /// `act(x)` gives (rule `ACT-EVAL`), for a binary32 `x` below `2^127`
    /// in magnitude (any other `x` gives `[NaN, NaN]`, which admits
    /// nothing: rule `ACT-RANGE`).
    ///
    /// The model. Let `u = 2^-24` and `rho(k) = k 2^-23 (1 + k 2^-22)`,
    /// the relative error of a result within `k` ulps (`ulp(z) <= 2^-23
    /// |z|` for a normal `z`, measured at the exact or the computed value,
    /// rms_norm's `rho_k`). A kernel evaluates, in binary32:
    ///
    /// - `OP`: `+ - *` correctly rounded, each result within `u |v|` of
    ///   the exact `v`, or `2^-150` where it is subnormal (Higham §2.2); a
    ///   fused multiply-add has one rounding where the two operations have
    ///   two, so every contraction is inside. Constants (`1.702`,
    ///   `1/sqrt 2`, `sqrt(2/pi)`, `0.044715`) are the real number rounded
    ///   once (`c (1 +- u)`: `M_SQRT1_2` as float, a double `kBeta`
    ///   converted, a Python float in Triton).
    /// - `DIV`: `/` within [`DIV_ULPS`] (`rho(2)`, plus 2 subnormal ulps),
    ///   and where the divisor may exceed `2^126` the quotient may be a
    ///   zero of its sign (`__fdividef`, `div.approx.f32`).
    /// - `EXP`: `exp(s)` at the binary32 argument `s` it computed, within
    ///   `act_ulps + 1.25 min(|s|, 200)` ulps ([`EXP_ARG_ULPS`],
    ///   [`EXP_ARG_CAP`]), never negative; a result past `2^128` is
    ///   `+inf` (and one that may reach it may be the largest finite
    ///   value or `+inf`).
    /// - `ERF`, `TANH`: within `act_ulps` ulps of `erf(s)`, `tanh(s)`, and
    ///   in `[-1, 1]` (every implementation's range: `±1` are binary32
    ///   values, and CUDA's `erff`, `tanhf` and `tanh.approx.f32` saturate
    ///   there).
    /// - `FTZ`: any operand or result below `2^-126` in magnitude may be
    ///   a zero of its sign (rule `ACT-FTZ`), the gate itself included.
    ///
    /// The forms, each operation as above, the gate `g` and `sigma(s) =
    /// 1 / (1 + e^-s)`:
    ///
    /// - [`Activation::Silu`], [`Activation::GeluQuick`] and
    ///   [`Activation::GeluTanh`] are `g sigma(s)` with `s = g`, `s =
    ///   fl(1.702 g)`, and `s = 2 inner` with `inner = sqrt(2/pi) (g +
    ///   0.044715 g^3)` evaluated in any order of products and sums (all
    ///   its terms have `g`'s sign, so its relative error is at most
    ///   `gamma_10` from seven roundings, a `powf` for the cube or a
    ///   division by a constant: Higham Lemma 3.1; below `2^-40` a cube
    ///   that underflows or is flushed leaves `sqrt(2/pi) g`; a cube that overflows, for
    ///   `|g| >= 2^42`, leaves `±inf`). Each as `g / (1 + e^-s)`, as `g *
    ///   (1 / (1 + e^-s))`, and where `g <= 0` also in the stable forms
    ///   `g * (z / (1 + z))` and `(g z) / (1 + z)` with `z = e^s`. Not the
    ///   form `e^s / (1 + e^s)` at `g > 0`, which is `inf / inf` past `s =
    ///   88.7`.
    /// - [`Activation::GeluTanh`] also as `g/2 (1 + tanh(inner))`: `(g
    ///   0.5) (1 + tanh)` (vLLM, torch, Liger) or `g (0.5 (1 + tanh))`
    ///   (FlashInfer's `cdf`).
    /// - [`Activation::Gelu`] as `g/2 (1 + erf(s))` with `s = g / sqrt 2`
    ///   rounded once or divided (within `DIV`), the products in the same
    ///   two orders.
    ///
    /// The range is computed by interval arithmetic over each form, in
    /// binary64 with every result rounded outward: an operation's interval
    /// is the exact image of its operands' intervals (each step is
    /// monotone in each operand on the intervals that occur, so the image
    /// is bounded by the ends) widened by its error, and `exp`, `tanh`
    /// and `erf` of an argument interval are their values at its ends
    /// ([`Activation::exact`]'s enclosures) widened by the declared ulps
    /// of the largest magnitude. Every rounding may be exact, so the range
    /// contains the exact value too. The hull of the forms' intervals, its
    /// ends moved inward to binary32 values, is the range.
    ///
    /// # Panics
    /// If `act_ulps` is 0 or over [`MAX_ACT_ULPS`].
    pub fn range(self, x: f32, act_ulps: u32) -> ActRange {
        assert!(
            (1..=MAX_ACT_ULPS).contains(&act_ulps),
            "act_ulps {act_ulps} outside 1..={MAX_ACT_ULPS}"
        );
        if !in_range(x) {
            return ActRange {
                lo: f32::NAN,
                hi: f32::NAN,
            };
        }
        let e = eval(
            self,
            x,
            &Model {
                exact: false,
                ulps: f64::from(act_ulps),
            },
        );
        ActRange {
            lo: f32_at_least(e.lo),
            hi: f32_at_most(e.hi),
        }
    }
}

/// The binary32 activation values `[lo, hi]` a kernel may hold for one
/// gate (rule `ACT-EVAL`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActRange {
    /// The least admissible binary32 `a`.
    pub lo: f32,
    /// The greatest admissible binary32 `a`.
    pub hi: f32,
}

/// Which half of a row of `x` is the gate (rule `ACT-LAYOUT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `x[t] = [gate, up]`: vLLM's `silu_and_mul`, `gelu_and_mul`,
    /// `gelu_tanh_and_mul`, FlashInfer's, Liger's, the torch form
    /// `act(x[..., :d]) * x[..., d:]`.
    GateFirst,
    /// `x[t] = [up, gate]`: vLLM's `mul_and_silu` (`x * ACT_FN(y)`,
    /// `act_first = false`).
    UpFirst,
}

impl Layout {
    /// Both layouts, gate first first.
    pub const ALL: [Layout; 2] = [Layout::GateFirst, Layout::UpFirst];

    /// `"gate_first"` or `"up_first"`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::GateFirst => "gate_first",
            Layout::UpFirst => "up_first",
        }
    }

    /// `(gate, up)` of element `j` of a row `row` of `2 d` values.
    ///
    /// # Panics
    /// If `j >= d` or the row is shorter than `2 d`.
    pub fn split(self, row: &[f32], d: usize, j: usize) -> (f32, f32) {
        assert!(j < d, "j {j} >= d {d}");
        match self {
            Layout::GateFirst => (row[j], row[d + j]),
            Layout::UpFirst => (row[d + j], row[j]),
        }
    }
}

/// How the activation `a` (binary32) and the up value `y` make an output
/// element (rule `ACT-OUT`), with `fl` a binary32 operation rounded to
/// nearest even and `R` the rounding to the model's dtype
/// ([`Dtype::round`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    /// `R(fl(R(a) y))`: the activation rounded to the dtype, then the
    /// product rounded again. vLLM's CUDA ops (`ACT_FN(x) * y`, `ACT_FN`
    /// returning `scalar_t`; the packed path rounds the activation to the
    /// packed dtype the same way), torch eager on bf16/f16 tensors (vLLM's
    /// and SGLang's `forward_native`, `F.silu(a) * b`, `F.gelu(a,
    /// approximate=...) * b`: one operator, one rounding each), Liger's
    /// GeGLU (`geglu_a.cast(b_row.dtype) * b_row`). A product of two bf16
    /// or two f16 values is exact in binary32, so the `fl` is exact there
    /// but for underflow. In F32 this is [`Arithmetic::F32`].
    RoundThenMul,
    /// `R(fl(a y))`: one rounding to the dtype at the end. FlashInfer's
    /// `act_and_mul_kernel` (`out_vec[i] = Activation(x_vec[i]) *
    /// y_vec[i]` in float, then `cast_store`; SGLang's CUDA path), Liger's
    /// SwiGLU (`silu(a_row) * b_row` with `a_row` in float32, stored to the
    /// dtype), torch.compile's fused pointwise kernel.
    F32,
}

impl Arithmetic {
    /// Both, in the order identification reports them.
    pub const ALL: [Arithmetic; 2] = [Arithmetic::RoundThenMul, Arithmetic::F32];

    /// The name a check takes: `"round_then_mul"` or `"f32"`.
    pub const fn name(self) -> &'static str {
        match self {
            Arithmetic::RoundThenMul => "round_then_mul",
            Arithmetic::F32 => "f32",
        }
    }

    /// One output element at one binary32 activation `a` (rule
    /// `ACT-OUT`), `y` the up value (a dtype value); with `flush`, every
    /// binary32 operand and result below `2^-126` in magnitude becomes a
    /// zero of its sign first (rule `ACT-FTZ`).
    pub fn output(self, dtype: Dtype, a: f32, y: f32, flush: bool) -> f32 {
        let f = |v: f32| if flush { flush_subnormal(v) } else { v };
        let (a, y) = (f(a), f(y));
        let p = match self {
            Arithmetic::RoundThenMul => f(f(dtype.round(a)) * y),
            Arithmetic::F32 => f(a * y),
        };
        dtype.round(p)
    }

    /// The interval `(lo, hi)` of outputs an admissible `a` gives (rules
    /// `ACT-OUT`, `ACT-FTZ`): the least and the greatest, in the total
    /// order of binary32 (`-0 < +0`), of [`Arithmetic::output`] at `a.lo`
    /// and `a.hi`, each with and without flush to zero. Both ends are
    /// dtype values; when their bits are the same, the element is decided.
    pub fn interval(self, dtype: Dtype, a: ActRange, y: f32) -> (f32, f32) {
        let v = [
            self.output(dtype, a.lo, y, false),
            self.output(dtype, a.hi, y, false),
            self.output(dtype, a.lo, y, true),
            self.output(dtype, a.hi, y, true),
        ];
        let (mut lo, mut hi) = (v[0], v[0]);
        for &o in &v[1..] {
            if o.total_cmp(&lo).is_lt() {
                lo = o;
            }
            if o.total_cmp(&hi).is_gt() {
                hi = o;
            }
        }
        (lo, hi)
    }
}

/// A shape, a declaration or an input that cannot be computed. Displays
/// as a sentence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ActAndMulError {
    /// `tokens` or `d` is 0.
    Zero {
        /// `"tokens"` or `"d"`.
        dim: &'static str,
    },
    /// `d` is over [`MAX_D`].
    Width {
        /// The output width.
        d: usize,
    },
    /// A buffer length overflows `usize`.
    Overflow,
    /// `act_ulps` is 0 or over [`MAX_ACT_ULPS`].
    ActUlps {
        /// The value given.
        ulps: u32,
    },
    /// A buffer has the wrong number of elements.
    Len {
        /// `"x"`, `"out_lo"` or `"out_hi"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// An input element is NaN, infinite, or `2^127` or more in magnitude
    /// (rule `ACT-RANGE`).
    OutOfRange {
        /// Its index in `x`, row-major.
        index: usize,
    },
}

impl core::fmt::Display for ActAndMulError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ActAndMulError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            ActAndMulError::Width { d } => {
                write!(f, "d {d} is over the contract's {MAX_D}")
            }
            ActAndMulError::Overflow => write!(f, "a buffer length overflows usize"),
            ActAndMulError::ActUlps { ulps } => {
                write!(f, "act_ulps {ulps}: it must be from 1 to {MAX_ACT_ULPS}")
            }
            ActAndMulError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            ActAndMulError::OutOfRange { index } => write!(
                f,
                "x[{index}] is not finite or is 2^127 or more in magnitude (the activation may overflow)"
            ),
        }
    }
}

/// The dimensions of one call: `x [tokens][2 d]`, the output `[tokens][d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    tokens: usize,
    d: usize,
}

impl Shape {
    /// `tokens` and `d` at least 1, `d` at most [`MAX_D`], `tokens * 2 d *
    /// 4` within `usize`.
    ///
    /// # Errors
    /// [`ActAndMulError::Zero`], [`ActAndMulError::Width`],
    /// [`ActAndMulError::Overflow`].
    pub fn new(tokens: usize, d: usize) -> Result<Shape, ActAndMulError> {
        if tokens == 0 {
            return Err(ActAndMulError::Zero { dim: "tokens" });
        }
        if d == 0 {
            return Err(ActAndMulError::Zero { dim: "d" });
        }
        if d > MAX_D {
            return Err(ActAndMulError::Width { d });
        }
        if tokens
            .checked_mul(d)
            .and_then(|n| n.checked_mul(8))
            .is_none()
        {
            return Err(ActAndMulError::Overflow);
        }
        Ok(Shape { tokens, d })
    }

    /// Rows (tokens).
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Output elements per row (`d`; a row of `x` has `2 d`).
    pub fn d(&self) -> usize {
        self.d
    }
    /// Output elements, `tokens * d`.
    pub fn len(&self) -> usize {
        self.tokens * self.d
    }
    /// Input elements, `tokens * 2 d`.
    pub fn input_len(&self) -> usize {
        2 * self.len()
    }
    /// Never: a shape has at least one element.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What a kernel declares: its activation, arithmetic, layout, dtype and
/// the accuracy of its transcendentals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    activation: Activation,
    arithmetic: Arithmetic,
    layout: Layout,
    dtype: Dtype,
    act_ulps: u32,
}

impl Declared {
    /// A declaration; `act_ulps` from 1 to [`MAX_ACT_ULPS`].
    ///
    /// # Errors
    /// [`ActAndMulError::ActUlps`].
    pub fn new(
        activation: Activation,
        arithmetic: Arithmetic,
        layout: Layout,
        dtype: Dtype,
        act_ulps: u32,
    ) -> Result<Declared, ActAndMulError> {
        if act_ulps == 0 || act_ulps > MAX_ACT_ULPS {
            return Err(ActAndMulError::ActUlps { ulps: act_ulps });
        }
        Ok(Declared {
            activation,
            arithmetic,
            layout,
            dtype,
            act_ulps,
        })
    }

    /// The activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }
    /// The arithmetic.
    pub fn arithmetic(&self) -> Arithmetic {
        self.arithmetic
    }
    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// The dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }
    /// The transcendentals' accuracy in ulps.
    pub fn act_ulps(&self) -> u32 {
        self.act_ulps
    }

    /// The interval of one output element for gate `g` and up value `y`
    /// (rules `ACT-EVAL`, `ACT-OUT`).
    pub fn element(&self, g: f32, y: f32) -> (f32, f32) {
        let a = self.activation.range(g, self.act_ulps);
        self.arithmetic.interval(self.dtype, a, y)
    }
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), ActAndMulError> {
    if want == got {
        Ok(())
    } else {
        Err(ActAndMulError::Len { arg, want, got })
    }
}

/// Checks the lengths (`x`, then the outputs `out_lo`, `out_hi` of the
/// given lengths) and that every input element is in range ([`in_range`]).
///
/// # Errors
/// [`ActAndMulError::Len`] naming the first wrong buffer, then
/// [`ActAndMulError::OutOfRange`] naming the first bad element.
pub fn check_inputs(shape: &Shape, x: &[f32], out: [usize; 2]) -> Result<(), ActAndMulError> {
    len("x", shape.input_len(), x.len())?;
    len("out_lo", shape.len(), out[0])?;
    len("out_hi", shape.len(), out[1])?;
    if let Some(index) = x.iter().position(|&e| !in_range(e)) {
        return Err(ActAndMulError::OutOfRange { index });
    }
    Ok(())
}

/// `act(gate) * up` row by row (rules `ACT-*` in the module
/// documentation): per element, the gate and up value by the layout
/// ([`Layout::split`]), the gate's [`ActRange`] ([`Activation::range`])
/// and the output's interval ([`Arithmetic::interval`]) into `lo[t][j]`,
/// `hi[t][j]`.
///
/// # Errors
/// As [`check_inputs`] (nothing written then).
pub fn act_and_mul(
    shape: &Shape,
    d: &Declared,
    x: &[f32],
    lo: &mut [f32],
    hi: &mut [f32],
) -> Result<(), ActAndMulError> {
    check_inputs(shape, x, [lo.len(), hi.len()])?;
    let w = shape.d;
    for t in 0..shape.tokens {
        let row = &x[t * 2 * w..(t + 1) * 2 * w];
        for j in 0..w {
            let (g, y) = d.layout.split(row, w, j);
            let (l, h) = d.element(g, y);
            lo[t * w + j] = l;
            hi[t * w + j] = h;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------
// The interval arithmetic of rule ACT-EVAL. An `Enclosure` is a closed
// interval of reals with binary64 ends (-0.0 and +0.0 kept apart where
// an exact zero's sign is known); every binary64 result is rounded
// outward, except an exact zero (a sum or product is 0 in binary64 only
// when it is 0 exactly here: no binary64 underflow occurs at these
// magnitudes) and an infinity.
// ---------------------------------------------------------------------

/// `v`, or the next binary64 below it (a rounded result's lower bound).
fn dn(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        v
    } else {
        v.next_down()
    }
}

/// `v`, or the next binary64 above it.
fn up(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        v
    } else {
        v.next_up()
    }
}

/// `[v, v]`.
fn pt(v: f64) -> Enclosure {
    Enclosure { lo: v, hi: v }
}

/// The interval every real is in: what an undefined combination (`0
/// inf`, `inf - inf`) leaves.
const EVERYTHING: Enclosure = Enclosure {
    lo: f64::NEG_INFINITY,
    hi: f64::INFINITY,
};

/// The smallest interval holding `a` and `b` (ends in the total order:
/// `-0 < +0`).
fn hull(a: Enclosure, b: Enclosure) -> Enclosure {
    Enclosure {
        lo: if b.lo.total_cmp(&a.lo).is_lt() {
            b.lo
        } else {
            a.lo
        },
        hi: if b.hi.total_cmp(&a.hi).is_gt() {
            b.hi
        } else {
            a.hi
        },
    }
}

/// The least and greatest of four binary64 results, moved outward;
/// [`EVERYTHING`] when one is NaN.
fn outward(c: [f64; 4]) -> Enclosure {
    if c.iter().any(|v| v.is_nan()) {
        return EVERYTHING;
    }
    let mut e = pt(c[0]);
    for &v in &c[1..] {
        e = hull(e, pt(v));
    }
    Enclosure {
        lo: dn(e.lo),
        hi: up(e.hi),
    }
}

fn neg(a: Enclosure) -> Enclosure {
    Enclosure {
        lo: -a.hi,
        hi: -a.lo,
    }
}

fn add(a: Enclosure, b: Enclosure) -> Enclosure {
    let (lo, hi) = (a.lo + b.lo, a.hi + b.hi);
    if lo.is_nan() || hi.is_nan() {
        return EVERYTHING;
    }
    Enclosure {
        lo: dn(lo),
        hi: up(hi),
    }
}

fn mul(a: Enclosure, b: Enclosure) -> Enclosure {
    outward([a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi])
}

/// `n / d` for a positive divisor interval (`d.lo >= 1` wherever used).
fn div(n: Enclosure, d: Enclosure) -> Enclosure {
    debug_assert!(d.lo > 0.0);
    outward([n.lo / d.lo, n.lo / d.hi, n.hi / d.lo, n.hi / d.hi])
}

/// `a` extended to the zero of its sign when it holds no zero: what a
/// flush to zero, or `div.approx`'s tiny quotient, may give.
fn with_zero(a: Enclosure) -> Enclosure {
    Enclosure {
        lo: if a.lo > 0.0 { 0.0 } else { a.lo },
        hi: if a.hi < 0.0 { -0.0 } else { a.hi },
    }
}

/// `rho(k) = k 2^-23 (1 + k 2^-22)`, rounded up.
fn rho(k: f64) -> f64 {
    up(up(k * pow2(-23)) * up(1.0 + k * pow2(-22)))
}

/// One end of an interval of exact values, moved to bound what a binary32
/// result within `rel |v| + abs` of each value gives (`lower`: the least),
/// with flush to zero (a result below `2^-126` may be the zero of its
/// sign) and overflow (a result whose every admissible value is past
/// [`OVERFLOW`] is infinite; one that may reach it, the largest finite
/// value or infinite). Exact
/// zeros and infinities stay: binary32 represents them. Monotone in `v`
/// for `rel < 1`, so the ends of an interval bound the image of all of it.
fn end(v: f64, rel: f64, abs: f64, lower: bool) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let t = up(abs_f64(v) * rel);
    if lower {
        let w = dn(dn(v - t) - abs);
        if v > 0.0 {
            if w < MIN_NORMAL {
                0.0
            } else if w >= OVERFLOW {
                f64::INFINITY
            } else {
                w.min(MAX32)
            }
        } else if w < -MAX32 {
            f64::NEG_INFINITY
        } else {
            w
        }
    } else {
        let w = up(up(v + t) + abs);
        if v < 0.0 {
            if w > -MIN_NORMAL {
                -0.0
            } else if w <= -OVERFLOW {
                f64::NEG_INFINITY
            } else {
                w.max(-MAX32)
            }
        } else if w > MAX32 {
            f64::INFINITY
        } else {
            w
        }
    }
}

/// How a form is evaluated: exactly (the reference), or as a kernel
/// within the model of [`Activation::range`].
struct Model {
    exact: bool,
    /// The declared `act_ulps`.
    ulps: f64,
}

impl Model {
    const EXACT: Model = Model {
        exact: true,
        ulps: 0.0,
    };

    /// One correctly rounded operation (rule `OP`).
    fn round(&self, a: Enclosure) -> Enclosure {
        self.within(a, 0.5)
    }

    /// A result within `k` ulps (of a normal or a subnormal value).
    fn within(&self, a: Enclosure, k: f64) -> Enclosure {
        if self.exact {
            return a;
        }
        let (rel, abs) = (rho(k), k * pow2(-149));
        Enclosure {
            lo: end(a.lo, rel, abs, true),
            hi: end(a.hi, rel, abs, false),
        }
    }

    /// A constant: the real `c` (its binary64 within half an ulp), rounded
    /// once to binary32 by a kernel.
    fn constant(&self, c: f64) -> Enclosure {
        self.round(Enclosure {
            lo: dn(c),
            hi: up(c),
        })
    }

    /// `e^s` (rule `EXP`).
    fn exp(&self, s: Enclosure) -> Enclosure {
        let e = Enclosure {
            lo: exp_real(s.lo).lo,
            hi: exp_real(s.hi).hi,
        };
        if self.exact {
            return e;
        }
        let mag = abs_f64(s.lo).max(abs_f64(s.hi)).min(EXP_ARG_CAP);
        let mut r = self.within(e, self.ulps + EXP_ARG_ULPS * mag);
        if r.lo < 0.0 {
            r.lo = 0.0;
        }
        r
    }

    /// `tanh(s)` (rule `TANH`).
    fn tanh(&self, s: Enclosure) -> Enclosure {
        let e = Enclosure {
            lo: tanh_enclosure(s.lo).lo,
            hi: tanh_enclosure(s.hi).hi,
        };
        clamp_unit(self.within(e, self.ulps))
    }

    /// `erf(s)` (rule `ERF`).
    fn erf(&self, s: Enclosure) -> Enclosure {
        let e = Enclosure {
            lo: erf_enclosure(s.lo).lo,
            hi: erf_enclosure(s.hi).hi,
        };
        clamp_unit(self.within(e, self.ulps))
    }

    /// `n / d`, `d >= 1` (rule `DIV`).
    fn div(&self, n: Enclosure, d: Enclosure) -> Enclosure {
        let q = div(n, d);
        if self.exact {
            return q;
        }
        let q = self.within(q, f64::from(DIV_ULPS));
        if d.hi > pow2(126) {
            with_zero(q)
        } else {
            q
        }
    }

    /// `g h a` with `h = 0.5`: `(g h) a` or `g (h a)`, each product
    /// rounded (nobody computes `g a` first, which overflows for `|g|`
    /// near the largest finite value).
    fn half_product(&self, g: Enclosure, a: Enclosure) -> Enclosure {
        let h = pt(0.5);
        let first = self.round(mul(self.round(mul(g, h)), a));
        if self.exact {
            return first;
        }
        hull(first, self.round(mul(g, self.round(mul(h, a)))))
    }

    /// `g sigma(s)` in the field's forms (see [`Activation::range`]);
    /// `inner = s / 2` as the kernel computed it, for the tanh form.
    fn gate_sigmoid(&self, g: Enclosure, s: Enclosure, inner: Option<Enclosure>) -> Enclosure {
        let one = pt(1.0);
        let e = self.exp(neg(s));
        let d = self.round(add(one, e));
        let mut r = self.div(g, d);
        if self.exact {
            return r;
        }
        r = hull(r, self.round(mul(g, self.div(one, d))));
        if g.hi <= 0.0 {
            let z = self.exp(s);
            let dz = self.round(add(one, z));
            r = hull(r, self.round(mul(g, self.div(z, dz))));
            r = hull(r, self.div(self.round(mul(g, z)), dz));
        }
        if let Some(inner) = inner {
            let t = self.round(add(one, self.tanh(inner)));
            r = hull(r, self.half_product(g, t));
        }
        r
    }

    /// `sqrt(2/pi) (g + 0.044715 g^3)` (see [`Activation::range`]); `x`
    /// the gate's binary32 value.
    fn tanh_inner(&self, g: Enclosure, x: f32) -> Enclosure {
        use core::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};
        let beta = self.round(mul(
            Enclosure {
                lo: dn(FRAC_2_SQRT_PI),
                hi: up(FRAC_2_SQRT_PI),
            },
            Enclosure {
                lo: dn(FRAC_1_SQRT_2),
                hi: up(FRAC_1_SQRT_2),
            },
        ));
        let cube = mul(mul(g, g), g);
        let inner = mul(beta, add(g, mul(self.constant(0.044715), cube)));
        if self.exact {
            return inner;
        }
        // Below 2^-40 the cube may underflow or be flushed: lost. Then
        // seven roundings (ten taken: a powf cube, a division by a
        // constant).
        let inner = if x.abs() < 9.094_947e-13 {
            hull(inner, mul(beta, g))
        } else {
            inner
        };
        let gamma = up(10.0 * U * (1.0 + 20.0 * U));
        let mut r = Enclosure {
            lo: end(inner.lo, gamma, 10.0 * pow2(-150), true),
            hi: end(inner.hi, gamma, 10.0 * pow2(-150), false),
        };
        if x.abs() >= 4_398_046_511_104.0 {
            // |g| >= 2^42: the binary32 cube may overflow.
            r = hull(
                r,
                pt(if x > 0.0 {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                }),
            );
        }
        r
    }
}

/// `a` cut to `[-1, 1]` (rules `ERF`, `TANH`).
fn clamp_unit(a: Enclosure) -> Enclosure {
    Enclosure {
        lo: a.lo.max(-1.0),
        hi: a.hi.min(1.0),
    }
}

/// The activation's interval under `m` (see [`Activation::range`]).
fn eval(act: Activation, x: f32, m: &Model) -> Enclosure {
    let xv = f64::from(x);
    let mut g = pt(xv);
    if !m.exact && x != 0.0 && x.abs() < f32::MIN_POSITIVE {
        // Rule FTZ: the gate itself read as a zero.
        g = with_zero(g);
    }
    match act {
        Activation::Silu => m.gate_sigmoid(g, g, None),
        Activation::GeluQuick => {
            let s = m.round(mul(g, m.constant(1.702)));
            m.gate_sigmoid(g, s, None)
        }
        Activation::GeluTanh => {
            let inner = m.tanh_inner(g, x);
            m.gate_sigmoid(g, mul(inner, pt(2.0)), Some(inner))
        }
        Activation::Gelu => {
            let c = m.constant(core::f64::consts::FRAC_1_SQRT_2);
            let s = m.within(mul(g, c), f64::from(DIV_ULPS));
            let t = m.round(add(pt(1.0), m.erf(s)));
            m.half_product(g, t)
        }
    }
}

/// An enclosure of `e^t` for any real `t` in binary64:
/// [`crate::moe_routing`]'s (from the binary32 `exp`) up to `t = 88`, its
/// square at `t / 2` to 176, `[2^250, inf]` beyond, `[0, 2^-148]` below
/// -150 (`e^-150 < 2^-216`).
fn exp_real(t: f64) -> Enclosure {
    if t.is_nan() {
        return Enclosure {
            lo: 0.0,
            hi: f64::INFINITY,
        };
    }
    if t < -150.0 {
        return Enclosure {
            lo: 0.0,
            hi: pow2(-148),
        };
    }
    if t > 176.0 {
        return Enclosure {
            lo: pow2(250),
            hi: f64::INFINITY,
        };
    }
    if t > 88.0 {
        let h = exp_enclosure(t * 0.5);
        return Enclosure {
            lo: dn(h.lo * h.lo),
            hi: up(h.hi * h.hi),
        };
    }
    exp_enclosure(t)
}

/// An enclosure of `tanh(z)` for any real `z` in binary64 (odd; exact at
/// `±0`): for `0 < z <= 1/16` the alternating series' first terms, `z -
/// z^3/3 <= tanh z <= z - z^3/3 + 2 z^5/15`; above, `(1 - q) / (1 + q)`
/// with `q = e^(-2z)` enclosed by [`exp_real`] (decreasing in `q`), cut to
/// `[0, 1]`.
fn tanh_enclosure(z: f64) -> Enclosure {
    if z.is_nan() {
        return Enclosure { lo: -1.0, hi: 1.0 };
    }
    if z < 0.0 {
        return neg(tanh_enclosure(-z));
    }
    if z == 0.0 {
        return pt(z);
    }
    if z <= 0.0625 {
        let z2 = mul(pt(z), pt(z));
        let z3 = mul(z2, pt(z));
        let z5 = mul(z3, z2);
        let third = div(z3, pt(3.0));
        let lo = add(pt(z), neg(third)).lo;
        let hi = add(add(pt(z), neg(third)), mul(div(z5, pt(15.0)), pt(2.0))).hi;
        return Enclosure { lo, hi };
    }
    let q = exp_real(-2.0 * z);
    let lo = dn(dn(1.0 - q.hi) / up(1.0 + q.hi));
    let hi = up(up(1.0 - q.lo) / dn(1.0 + q.lo));
    Enclosure {
        lo: lo.max(0.0),
        hi: hi.min(1.0),
    }
}

/// An enclosure of `erf(w)` for any real `w` in binary64 (odd; exact at
/// `±0`):
/// - `0 < w < 4`: `erf(w) = (2 / sqrt(pi)) e^(-w^2) sum_(n >= 0) 2^n
///   w^(2n+1) / (1 3 5 ... (2n+1))` (Abramowitz and Stegun 7.1.6), every
///   term positive, each term `t_n = t_(n-1) 2 w^2 / (2n+1)` and each
///   partial sum rounded outward; summed until the ratio `2 w^2 / (2n+3)`
///   is below 1/2 and the term below `2^-60` of the sum, the tail (at most
///   the last term, a geometric series of ratio below 1/2) added to the
///   upper sum; `e^(-w^2)` by [`exp_real`];
/// - `w >= 4`: `1 - e^(-w^2) / (w sqrt(pi)) < erf(w) <= 1` (Abramowitz
///   and Stegun 7.1.13), `[1 - 2^-53, 1]` from `w >= 6` (`erfc(6) <
///   2.2e-17`).
fn erf_enclosure(w: f64) -> Enclosure {
    use core::f64::consts::FRAC_2_SQRT_PI;
    if w.is_nan() {
        return Enclosure { lo: -1.0, hi: 1.0 };
    }
    if w < 0.0 {
        return neg(erf_enclosure(-w));
    }
    if w == 0.0 {
        return pt(w);
    }
    let c = Enclosure {
        lo: dn(FRAC_2_SQRT_PI),
        hi: up(FRAC_2_SQRT_PI),
    };
    if w >= 6.0 {
        return Enclosure {
            lo: 1.0 - pow2(-53),
            hi: 1.0,
        };
    }
    let w2 = mul(pt(w), pt(w));
    let e = Enclosure {
        lo: exp_real(-w2.hi).lo,
        hi: exp_real(-w2.lo).hi,
    };
    if w >= 4.0 {
        // erfc(w) < e^(-w^2) / (w sqrt(pi)) = e^(-w^2) (2/sqrt(pi)) / (2w).
        let tail = up(up(e.hi * c.hi) / dn(2.0 * w));
        return Enclosure {
            lo: dn(1.0 - tail),
            hi: 1.0,
        };
    }
    let (mut t, mut s) = (pt(w), pt(w));
    let mut n = 0.0f64;
    let mut converged = false;
    for _ in 0..1000 {
        n += 1.0;
        let q = div(mul(w2, pt(2.0)), pt(2.0 * n + 1.0));
        t = mul(t, q);
        s = add(s, t);
        let next_ratio = up(up(2.0 * w2.hi) / dn(2.0 * n + 3.0));
        if next_ratio < 0.5 && t.hi < s.lo * pow2(-60) {
            s.hi = up(s.hi + t.hi);
            converged = true;
            break;
        }
    }
    if !converged {
        return Enclosure { lo: 0.0, hi: 1.0 };
    }
    let r = mul(mul(c, e), s);
    Enclosure {
        lo: r.lo.max(0.0),
        hi: r.hi.min(1.0),
    }
}

/// The least binary32 at or above `v` (`-inf` stays; past the largest
/// finite value, `+inf`).
fn f32_at_least(v: f64) -> f32 {
    let f = v as f32;
    if f64::from(f) < v {
        f.next_up()
    } else {
        f
    }
}

/// The greatest binary32 at or below `v`.
fn f32_at_most(v: f64) -> f32 {
    let f = v as f32;
    if f64::from(f) > v {
        f.next_down()
    } else {
        f
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    // ------------------------------------------------------------------
    // References in binary64 with std (not sound, but within a few
    // binary64 ulps: about 2^-29 of a binary32 ulp), and binary32 kernels
    // written the field's ways with their primitives pushed to the ends
    // of the declared accuracy.
    // ------------------------------------------------------------------

    /// erfc in binary64 for `w >= 2.5` by its continued fraction
    /// (Lentz), to about 1e-15 relative.
    fn erfc64(w: f64) -> f64 {
        // erfc(w) = e^-w^2 / sqrt(pi) / (w + (1/2)/(w + 1/(w + (3/2)/(w + ...))))
        let tiny = 1e-300;
        let mut f = w;
        let (mut c, mut d) = (w, 0.0);
        for k in 1..300 {
            let a = f64::from(k) / 2.0;
            d = w + a * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = w + a / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        (-w * w).exp() / (f * core::f64::consts::PI.sqrt())
    }

    /// erf in binary64: the alternating Taylor series below 2.5 (at most
    /// 9 bits lost to cancellation), else `1 - erfc`, both to about
    /// 1e-15.
    fn erf64(w: f64) -> f64 {
        if w < 0.0 {
            return -erf64(-w);
        }
        if w < 2.5 {
            let (mut term, mut sum) = (w, w);
            let w2 = w * w;
            let mut n = 0.0;
            while term.abs() > 1e-18 * sum.abs() {
                n += 1.0;
                term *= -w2 / n;
                sum += term / (2.0 * n + 1.0);
            }
            return sum * core::f64::consts::FRAC_2_SQRT_PI;
        }
        1.0 - erfc64(w)
    }

    fn exact64(act: Activation, x: f64) -> f64 {
        let sig = |s: f64| 1.0 / (1.0 + (-s).exp());
        match act {
            Activation::Silu => x * sig(x),
            Activation::GeluQuick => x * sig(1.702 * x),
            Activation::Gelu => {
                let w = x * core::f64::consts::FRAC_1_SQRT_2;
                // 1 + erf(w) = erfc(-w), without the cancellation.
                let one_plus = if w < -2.5 { erfc64(-w) } else { 1.0 + erf64(w) };
                0.5 * x * one_plus
            }
            Activation::GeluTanh => {
                let inner = (2.0 / core::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                x * sig(2.0 * inner)
            }
        }
    }

    /// The binary32 value farthest from `exact` on the side of `k` (`k`
    /// ulps of `exact` away at most, an ulp being `2^(e - 23)` for
    /// `exact` in `[2^e, 2^(e+1))`, `2^-149` below `2^-126`); `k = 0`:
    /// `exact` rounded to nearest.
    fn push(exact: f64, k: f64) -> f32 {
        if k == 0.0 || exact == 0.0 || !exact.is_finite() {
            return exact as f32;
        }
        let m = exact.abs();
        let ulp = if m < f64::from(f32::MIN_POSITIVE) {
            pow2(-149)
        } else {
            let e = ((m.to_bits() >> 52) & 0x7FF) as i32 - 1023;
            pow2(e - 23)
        };
        let target = exact + k * ulp;
        if target.abs() >= OVERFLOW {
            // Past the range: rounded, an infinity.
            return target as f32;
        }
        let v = if k > 0.0 {
            f32_at_most(target)
        } else {
            f32_at_least(target)
        };
        // No result changes sign (a subnormal exact value pushed past 0
        // stays a zero of its sign).
        if (v < 0.0) != (exact < 0.0) {
            if exact < 0.0 {
                -0.0
            } else {
                0.0
            }
        } else {
            v
        }
    }

    /// One adversarial binary32 kernel: how it computes `exp` (`expf`
    /// within the model's `act_ulps + 1.25 |s|` ulps, or `__expf`'s
    /// composition: `2^fl(s log2(e))` within `act_ulps`), which end of its
    /// accuracy each primitive takes (`-1`, `0`, `+1`), whether it flushes
    /// subnormals, and whether its division returns 0 past `2^126`.
    #[derive(Clone, Copy, Debug)]
    struct Kernel {
        ulps: f64,
        exp2: bool,
        push_exp: i32,
        push_div: i32,
        push_fn: i32,
        ftz: bool,
        fast_div: bool,
    }

    impl Kernel {
        fn f(&self, v: f32) -> f32 {
            if self.ftz {
                flush_subnormal(v)
            } else {
                v
            }
        }
        fn exp(&self, s: f32) -> f32 {
            let s = self.f(s);
            let side = f64::from(self.push_exp);
            let e = if self.exp2 {
                let t = s * core::f32::consts::LOG2_E;
                push(f64::from(t).exp2(), side * self.ulps)
            } else {
                let k = self.ulps + EXP_ARG_ULPS * f64::from(s.abs()).min(EXP_ARG_CAP);
                push(f64::from(s).exp(), side * k)
            };
            self.f(e.max(0.0))
        }
        fn div(&self, n: f32, d: f32) -> f32 {
            let (n, d) = (self.f(n), self.f(d));
            if self.fast_div && d.abs() > 2f32.powi(126) {
                return if n.is_sign_negative() { -0.0 } else { 0.0 };
            }
            let q = f64::from(n) / f64::from(d);
            let q = if q == 0.0 || !q.is_finite() {
                n / d
            } else {
                push(q, f64::from(self.push_div) * f64::from(DIV_ULPS))
            };
            self.f(q)
        }
        fn tanh(&self, s: f32) -> f32 {
            let s = self.f(s);
            let t = if s == 0.0 {
                s
            } else {
                push(f64::from(s).tanh(), f64::from(self.push_fn) * self.ulps)
            };
            self.f(t.clamp(-1.0, 1.0))
        }
        fn erf(&self, s: f32) -> f32 {
            let s = self.f(s);
            let t = if s == 0.0 {
                s
            } else {
                push(erf64(f64::from(s)), f64::from(self.push_fn) * self.ulps)
            };
            self.f(t.clamp(-1.0, 1.0))
        }
        fn mul(&self, a: f32, b: f32) -> f32 {
            self.f(self.f(a) * self.f(b))
        }
        fn add(&self, a: f32, b: f32) -> f32 {
            self.f(self.f(a) + self.f(b))
        }

        /// Every form this kernel may take for `act(g)`.
        fn forms(&self, act: Activation, g: f32) -> Vec<f32> {
            let mut out = Vec::new();
            let sigmoid_forms = |s: f32, out: &mut Vec<f32>| {
                let d = self.add(1.0, self.exp(-s));
                out.push(self.div(g, d));
                out.push(self.mul(g, self.div(1.0, d)));
                if g <= 0.0 {
                    let z = self.exp(s);
                    let dz = self.add(1.0, z);
                    out.push(self.mul(g, self.div(z, dz)));
                    out.push(self.div(self.mul(g, z), dz));
                }
            };
            match act {
                Activation::Silu => sigmoid_forms(g, &mut out),
                Activation::GeluQuick => sigmoid_forms(self.mul(1.702, g), &mut out),
                Activation::GeluTanh => {
                    const BETA: f32 = 0.797_884_6;
                    let cube = self.mul(self.mul(g, g), g);
                    let inner_a = self.mul(BETA, self.add(g, self.mul(0.044715, cube)));
                    let inner_b = self.mul(
                        self.mul(BETA, g),
                        self.add(1.0, self.mul(self.mul(0.044715, g), g)),
                    );
                    let fused = crate::fma::fma_f32(0.044715, cube, self.f(g));
                    let inner_c = self.mul(self.f(fused), BETA);
                    for inner in [inner_a, inner_b, inner_c] {
                        let t = self.add(1.0, self.tanh(inner));
                        out.push(self.mul(self.mul(g, 0.5), t));
                        out.push(self.mul(g, self.mul(0.5, t)));
                        sigmoid_forms(self.mul(2.0, inner), &mut out);
                    }
                }
                Activation::Gelu => {
                    for s in [
                        self.mul(g, core::f32::consts::FRAC_1_SQRT_2),
                        self.div(g, core::f32::consts::SQRT_2),
                    ] {
                        let t = self.add(1.0, self.erf(s));
                        out.push(self.mul(self.mul(g, 0.5), t));
                        out.push(self.mul(g, self.mul(0.5, t)));
                    }
                }
            }
            out
        }
    }

    fn kernels(ulps: u32) -> Vec<Kernel> {
        let mut v = Vec::new();
        for exp2 in [false, true] {
            for push_exp in [-1, 0, 1] {
                for push_div in [-1, 0, 1] {
                    for push_fn in [-1, 0, 1] {
                        for ftz in [false, true] {
                            v.push(Kernel {
                                ulps: f64::from(ulps),
                                exp2,
                                push_exp,
                                push_div,
                                push_fn,
                                ftz,
                                fast_div: ftz,
                            });
                        }
                    }
                }
            }
        }
        v
    }

    /// Gates: every bf16 value (finite), and binary32 values around the
    /// thresholds (exp's overflow at 88.72, the fast division's 2^126,
    /// the subnormal boundary).
    fn gates() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=0xFFFFu32)
            .map(|b| crate::bf16::decode_bf16(b as u16))
            .filter(|&x| in_range(x))
            .collect();
        for c in [
            -88.72f32, 88.72, -87.34, -52.13, 52.13, -104.0, -103.3, 3.0e-39, -3.0e-39, 1.0e-45,
        ] {
            let mut x = c;
            for _ in 0..64 {
                v.push(x);
                x = x.next_up();
            }
        }
        v
    }

    /// Every gate of [`gates`] in release builds; every 37th in debug
    /// builds, where the whole takes minutes.
    fn stride() -> usize {
        if cfg!(debug_assertions) {
            37
        } else {
            1
        }
    }

    #[test]
    fn act_eval_holds_every_adversarial_binary32_kernel() {
        let ys = [1.171875f32, -0.6875, 0.0, -0.0, 3000.0, -2.0e-39];
        for ulps in [DEFAULT_ACT_ULPS, 94] {
            let ks = kernels(ulps);
            for act in Activation::ALL {
                for (i, &g) in gates().iter().enumerate().step_by(stride()) {
                    let r = act.range(g, ulps);
                    for k in &ks {
                        for a in k.forms(act, g) {
                            // The range admits a as rule ACT-DECIDED would.
                            let ok = if r.lo.to_bits() == r.hi.to_bits() {
                                a.to_bits() == r.lo.to_bits()
                            } else {
                                r.lo <= a && a <= r.hi
                            };
                            assert!(
                                ok,
                                "{} at {g:e} ({:#010X}): {a:e} outside [{:e}, {:e}] ({k:?})",
                                act.name(),
                                g.to_bits(),
                                r.lo,
                                r.hi
                            );
                            if i % (61 * stride()) != 0 {
                                continue;
                            }
                            // And every output made of it (rule ACT-OUT).
                            // Gates of the dtype only (an f16 gate is at most 65504).
                            for dtype in Dtype::ALL.into_iter().filter(|d| d.round(g) == g) {
                                for ar in Arithmetic::ALL {
                                    for &y in &ys {
                                        let y = dtype.round(y);
                                        let (lo, hi) = ar.interval(dtype, r, y);
                                        let got = dtype.encode(ar.output(dtype, a, y, k.ftz));
                                        assert!(
                                            admits(dtype, lo, hi, got),
                                            "{} {} {dtype:?} g {g:e} a {a:e} y {y:e}: {got:#X} outside [{lo:e}, {hi:e}]",
                                            act.name(),
                                            ar.name()
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn act_eval_is_a_few_ulps_wide_where_nothing_cancels() {
        // Each activation's range, for gates where neither 1 + erf nor
        // 1 + tanh cancels: within 40 binary32 ulps (the declared 2-ulp
        // primitives, the argument term, a few roundings).
        for act in Activation::ALL {
            let from = match act {
                Activation::Gelu | Activation::GeluTanh => -0.5,
                _ => -1.0,
            };
            for i in 1..400 {
                let g = from + 0.01 * i as f32;
                let r = act.range(g, DEFAULT_ACT_ULPS);
                let width = f64::from(r.hi) - f64::from(r.lo);
                let mag = f64::from(r.hi.abs().max(r.lo.abs()));
                assert!(
                    width <= 40.0 * pow2(-23) * mag,
                    "{} at {g}: [{:e}, {:e}]",
                    act.name(),
                    r.lo,
                    r.hi
                );
            }
        }
    }

    #[test]
    fn act_eval_is_nearly_tight_a_sloppier_exp_lands_outside() {
        // An exp 48 ulps further off than the model allows at small |s|:
        // silu moves by about half that, past the range's few ulps.
        let mut outside = 0;
        for i in 1..200 {
            let g = 0.01 * i as f32;
            let r = Activation::Silu.range(g, DEFAULT_ACT_ULPS);
            for side in [-1.0, 1.0] {
                let k = side * (50.0 + EXP_ARG_ULPS * f64::from(g));
                let e = push(f64::from(-g).exp(), k);
                let a = g / (1.0 + e);
                outside += usize::from(a < r.lo || a > r.hi);
            }
        }
        assert!(outside > 300, "{outside}");
    }

    #[test]
    fn act_fn_exact_encloses_the_binary64_reference_tightly() {
        for act in Activation::ALL {
            for &g in &gates() {
                if g.abs() > 60.0 && act == Activation::GeluTanh {
                    continue; // std's tanh is the reference's limit there
                }
                let e = act.exact(g);
                let want = exact64(act, f64::from(g));
                let slack = 1e-13 * want.abs() + 1e-300;
                assert!(
                    e.lo - slack <= want && want <= e.hi + slack,
                    "{} at {g:e}: {want:e} outside [{:e}, {:e}]",
                    act.name(),
                    e.lo,
                    e.hi
                );
                // Tight: a few binary32 ulps of the value where nothing
                // cancels.
                let cancels = matches!(act, Activation::Gelu | Activation::GeluTanh) && g < -2.0;
                if !cancels && want.abs() > 1e-30 {
                    assert!(
                        e.hi - e.lo <= 64.0 * U * want.abs() * (1.0 + f64::from(g.abs())),
                        "{} at {g:e}: width {:e} of {want:e}",
                        act.name(),
                        e.hi - e.lo
                    );
                }
            }
        }
    }

    #[test]
    fn the_range_holds_the_exact_value_and_keeps_zeros_signed() {
        for act in Activation::ALL {
            for &g in &[0.5f32, -0.5, 3.0, -3.0, 30.0, -30.0, 1e-20, -1e-20] {
                let e = act.exact(g);
                let r = act.range(g, 2);
                assert!(
                    f64::from(r.lo) <= e.lo && e.hi <= f64::from(r.hi),
                    "{act:?} {g}"
                );
            }
            for z in [0.0f32, -0.0] {
                let r = act.range(z, 2);
                assert_eq!((r.lo.to_bits(), r.hi.to_bits()), (z.to_bits(), z.to_bits()));
                for a in Arithmetic::ALL {
                    for (y, sign) in [(1.5f32, z.to_bits()), (-1.5, z.to_bits() ^ 0x8000_0000)] {
                        let (lo, hi) = a.interval(Dtype::Bf16, r, y);
                        assert_eq!(
                            (lo.to_bits(), hi.to_bits()),
                            (sign, sign),
                            "{act:?} {z} {y}"
                        );
                    }
                }
            }
            assert!(act.range(f32::NAN, 2).lo.is_nan());
            // Rule ACT-RANGE: 2^127 and beyond are refused.
            assert!(act.range(1.701_411_8e38, 2).hi.is_nan());
            assert!(!act.range(1.701_411_7e38, 2).hi.is_nan());
            assert!(act.exact(f32::INFINITY).lo.is_nan());
        }
    }

    #[test]
    fn most_bf16_outputs_are_decided_and_the_arithmetics_differ() {
        let (mut decided, mut differ, mut n) = (0, 0, 0);
        for b in (0..0x8000u32).step_by(7) {
            let g = crate::bf16::decode_bf16(b as u16);
            if !(1e-3..=8.0).contains(&g.abs()) {
                continue;
            }
            for gs in [g, -g] {
                for act in Activation::ALL {
                    let r = act.range(gs, 2);
                    let y = 1.171875f32;
                    let (l1, h1) = Arithmetic::RoundThenMul.interval(Dtype::Bf16, r, y);
                    let (l2, h2) = Arithmetic::F32.interval(Dtype::Bf16, r, y);
                    n += 1;
                    if l1.to_bits() == h1.to_bits() && l2.to_bits() == h2.to_bits() {
                        decided += 1;
                        differ += usize::from(l1 != l2);
                    }
                }
            }
        }
        assert!(decided > n * 9 / 10, "{decided} of {n}");
        assert!(differ > n / 20, "{differ} of {n}");
        // In F32 the two are one.
        let r = Activation::Silu.range(0.3, 2);
        assert_eq!(
            Arithmetic::RoundThenMul.interval(Dtype::F32, r, 1.3),
            Arithmetic::F32.interval(Dtype::F32, r, 1.3)
        );
    }

    #[test]
    fn gelu_and_gelu_tanh_part_at_moderate_gates() {
        let mut apart = 0;
        for i in 0..200 {
            let g = 0.5 + 0.0125 * i as f32;
            let a = Activation::Gelu.range(g, 2);
            let b = Activation::GeluTanh.range(g, 2);
            apart += usize::from(a.hi < b.lo || b.hi < a.lo);
        }
        assert!(apart > 80, "{apart}");
    }

    #[test]
    fn tails_are_decided_and_the_overflowing_form_is_not_admitted() {
        for g in [20.0f32, 50.0, 89.0, 100.0] {
            let r = Activation::Silu.range(g, 2);
            let (lo, hi) = Arithmetic::RoundThenMul.interval(Dtype::Bf16, r, 1.0);
            assert_eq!((lo, hi), (g, g));
            // e^g / (1 + e^g) past 88.7: inf / inf.
            let e = g.exp();
            let bad = g * (e / (1.0 + e));
            assert_eq!(bad.is_nan(), g > 88.8);
            assert!(bad.is_nan() || admits(Dtype::Bf16, lo, hi, Dtype::Bf16.encode(bad)));
            if g > 88.8 {
                assert!(!admits(Dtype::Bf16, lo, hi, Dtype::Bf16.encode(bad)));
            }
        }
        // Far in the negative tail, silu is decided: about g e^g.
        let r = Activation::Silu.range(-30.0, 2);
        let (lo, hi) = Arithmetic::RoundThenMul.interval(Dtype::Bf16, r, 1.0);
        assert_eq!(lo, hi);
        assert!((f64::from(lo) / (-30.0 * (-30f64).exp()) - 1.0).abs() < 4e-3);
        // Where exp overflows the standard form gives -0: admitted.
        let r = Activation::Silu.range(-95.0, 2);
        assert!(r.hi.to_bits() == 0x8000_0000 && r.lo < 0.0);
    }

    #[test]
    fn ulps_widen_and_declarations_are_checked() {
        let a = Activation::GeluTanh.range(0.7, 2);
        let b = Activation::GeluTanh.range(0.7, 94);
        assert!(b.lo < a.lo && a.hi < b.hi);
        let new = |ulps| {
            Declared::new(
                Activation::Silu,
                Arithmetic::F32,
                Layout::GateFirst,
                Dtype::Bf16,
                ulps,
            )
        };
        assert_eq!(new(0), Err(ActAndMulError::ActUlps { ulps: 0 }));
        assert!(new(MAX_ACT_ULPS + 1).is_err());
        assert!(new(MAX_ACT_ULPS).is_ok());
        assert_eq!(
            Shape::new(0, 4),
            Err(ActAndMulError::Zero { dim: "tokens" })
        );
        assert_eq!(Shape::new(1, 0), Err(ActAndMulError::Zero { dim: "d" }));
        assert!(Shape::new(1, MAX_D + 1).is_err());
    }

    #[test]
    fn act_and_mul_splits_by_layout_and_checks_inputs() {
        let shape = Shape::new(2, 3).unwrap();
        let x = [
            1.0f32, -2.0, 0.5, 3.0, 0.25, -1.0, 4.0, 0.0, -0.5, 2.0, 2.0, 2.0,
        ];
        let run = |layout| {
            let d = Declared::new(
                Activation::Silu,
                Arithmetic::RoundThenMul,
                layout,
                Dtype::Bf16,
                2,
            )
            .unwrap();
            let (mut lo, mut hi) = ([0f32; 6], [0f32; 6]);
            act_and_mul(&shape, &d, &x, &mut lo, &mut hi).unwrap();
            (d, lo, hi)
        };
        let (d, lo, _) = run(Layout::GateFirst);
        assert_eq!(lo[0], d.element(1.0, 3.0).0);
        assert_eq!(lo[4], d.element(0.0, 2.0).0);
        let (d, lo, _) = run(Layout::UpFirst);
        assert_eq!(lo[0], d.element(3.0, 1.0).0);
        assert_eq!(lo[5], d.element(2.0, -0.5).0);
        let d = run(Layout::GateFirst).0;
        let (mut a, mut b) = ([0f32; 6], [0f32; 6]);
        let mut bad = x;
        bad[7] = f32::INFINITY;
        assert_eq!(
            act_and_mul(&shape, &d, &bad, &mut a, &mut b),
            Err(ActAndMulError::OutOfRange { index: 7 })
        );
        assert_eq!(
            act_and_mul(&shape, &d, &x[..11], &mut a, &mut b),
            Err(ActAndMulError::Len {
                arg: "x",
                want: 12,
                got: 11
            })
        );
    }

    #[test]
    fn enclosures_of_tanh_erf_and_exp_hold_binary64_references() {
        let mut z = 1e-30f64;
        while z < 400.0 {
            for v in [z, -z] {
                let t = tanh_enclosure(v);
                assert!(
                    t.lo <= v.tanh() + 1e-16 && v.tanh() - 1e-16 <= t.hi,
                    "tanh {v}"
                );
                let e = erf_enclosure(v);
                let w = erf64(v);
                assert!(e.lo <= w + 1e-15 && w - 1e-15 <= e.hi, "erf {v}: {w} {e:?}");
                let x = exp_real(v);
                assert!(x.lo <= v.exp() * (1.0 + 1e-15) && v.exp() * (1.0 - 1e-15) <= x.hi);
            }
            z *= 1.37;
        }
        assert_eq!(tanh_enclosure(-0.0).lo.to_bits(), (-0.0f64).to_bits());
        assert_eq!(erf_enclosure(f64::INFINITY).hi, 1.0);
        assert_eq!(exp_real(f64::NEG_INFINITY).lo, 0.0);
    }
}
