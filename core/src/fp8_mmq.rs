//! The v2 per-block FP8 GEMM ("MMQ", seed 000, `lane/fp8-mmq-v2`).
//!
//! y[j, i] = sum over 128-k scale blocks b of (s[i/128, b] * d[j, b]) * c[j, i, b],
//! where c is the chained f32 accumulation of the block's e4m3 products.
//! Every order and rounding is stated below; see [`mmq_v2`].
//!
//! The seed fixes one arithmetic; hardware and libraries fix others. A
//! [`Schedule`] names the two choices the seed's grouping leaves open: how
//! a block's products are accumulated ([`Accumulation`]) and how the block
//! is folded into the sum ([`Fold`]). [`mmq`] computes any schedule;
//! [`Schedule::V2`] is the seed's and the default.
//!
//! Source: seed 000 (`fp8-mmq-check`, its `host_ref` and `quantize_act_ref`),
//! which defines the arithmetic of `cu/mmq_fp8_blk.cu` v2.

/// Values per scale block along k, and per activation-scale block (elements).
pub const BLOCK_K: usize = 128;
/// Rows of weights sharing one scale along out_f (elements).
pub const BLOCK_N: usize = 128;
/// The quantized activation row is zero-padded to a multiple of this many
/// elements (ggml's `MATRIX_ROW_PADDING`); a multiple of [`BLOCK_K`], so no
/// scale block straddles the padding boundary.
pub const ROW_PADDING: usize = 512;
/// The largest finite E4M3FN magnitude, 448.0 (code `0x7E`). The activation
/// quantizer maps each block's amax onto it.
pub const E4M3_MAX: f32 = 448.0;

/// How a 128-k block's term enters the output's running sum (step 2.2 of
/// [`mmq`]): which product of the block's partial `c`, the weight scale
/// `s` and the activation scale `d` is rounded first, and whether the last
/// multiply and the add are fused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fold {
    /// `sum = sum + (s * d) * c`: a multiply, a multiply, an add, each
    /// rounded on its own (three roundings). Seed 000's `host_ref`.
    Separate,
    /// `sum = fma(s * d, c, sum)`: `s * d` rounded, then one fused
    /// multiply-add ([`crate::fma::fma_f32`]), one rounding (two roundings
    /// in all). What cuBLASLt's block-scaled FP8 GEMM was measured to do
    /// on the H200 (torch 2.11, CUDA 13.0: every FOLD-arm output of the
    /// battery's aligned shapes matches it bit for bit, 64% differ from
    /// [`Fold::Separate`]); the natural choice of a kernel compiled with
    /// FMA contraction (DeepGEMM's promotion `acc += scale * partial`).
    Fused,
    /// `sum = sum + (c * d) * s`: the partial times the activation scale,
    /// then the weight scale, then the add, each rounded (three
    /// roundings). What `acc = acc + tl.dot(a, b) * a_s[:, None] *
    /// b_s[None, :]` computes without FMA contraction.
    PartialFirst,
    /// `sum = fma(c * d, s, sum)`: `c * d` rounded, then one fused
    /// multiply-add (two roundings). The field's Triton block-FP8 GEMMs
    /// write the fold as `accumulator += tl.dot(a, b) * a_s[:, None] *
    /// b_s[None, :]` (vLLM's and SGLang's `_w8a8_block_fp8_matmul`,
    /// DeepSeek-V3's `inference/kernel.py` `fp8_gemm_kernel`), which
    /// Python evaluates left to right and Triton contracts into an FMA by
    /// default (`enable_fp_fusion=True`; with it off, the kernels compute
    /// [`Fold::PartialFirst`]).
    PartialFirstFused,
}

impl Fold {
    /// Every fold, [`Fold::Separate`] first.
    pub const ALL: [Fold; 4] = [
        Fold::Separate,
        Fold::Fused,
        Fold::PartialFirst,
        Fold::PartialFirstFused,
    ];

    /// The block's term added into `sum` (step 2.2 of [`mmq`]), with `c`
    /// the block's partial, `s` its weight scale and `d` its activation
    /// scale.
    pub fn apply(self, sum: f32, c: f32, s: f32, d: f32) -> f32 {
        match self {
            Fold::Separate => sum + (s * d) * c,
            Fold::Fused => crate::fma::fma_f32(s * d, c, sum),
            Fold::PartialFirst => sum + (c * d) * s,
            Fold::PartialFirstFused => crate::fma::fma_f32(c * d, s, sum),
        }
    }
}

/// How one 128-k block's products are accumulated into `c` (step 2.1 of
/// [`mmq`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accumulation {
    /// One chained binary32 accumulator from `+0.0` over the block's 128
    /// products, each product exact, each addition rounded to nearest
    /// even. The contract's order is increasing k; a kernel's order is
    /// hardware-internal (the additions inside each MMA and the chaining
    /// of the block's MMAs), so a kernel declaring this accumulation is
    /// compared bit for bit only where every order gives the same bits
    /// (the EXACT, FOLD and CODES arms) and by a summation bound elsewhere
    /// (the RANDOM arm). Seed 000's v2.
    F32,
    /// A bit-accurate model of one FP8 tensor-core MMA instruction: the
    /// block's four k = 32 MMAs chained through the instruction's own
    /// accumulator, in increasing k, with nothing hidden: every arm
    /// compares bit for bit. The promotion every 128 k into a separately
    /// folded f32 sum is DeepSeek-V3's (technical report, section 3.3.2,
    /// "Increasing Accumulation Precision": the tensor cores' FP8
    /// accumulation keeps about 14 bits, so partial results are promoted
    /// to CUDA cores at an interval of 128 k) and DeepGEMM's.
    TensorCore(crate::tensor_core::Model),
}

/// A declared arithmetic of the per-block FP8 GEMM: the in-block
/// accumulation and the fold. The grouping is always v2's (one accumulator
/// per 128-k scale block, blocks folded in increasing order, no split-k).
///
/// The known schedules ([`Schedule::KNOWN`]), each a constant:
/// [`Schedule::V2`] (seed 000, the default), [`Schedule::V2_FUSED`] (a fused
/// fold over v2's accumulation), [`Schedule::SM90_WGMMA_FUSED`] (what
/// cuBLASLt computes on the H200) and [`Schedule::SM90_WGMMA_SEPARATE`] (the
/// sm_90 `wgmma` FP8 MMA inside the block, either fold), and
/// [`Schedule::SM90_MMA_SYNC_FUSED`] and [`Schedule::SM90_MMA_SYNC_SEPARATE`]
/// (the lowered `mma.sync`), and the partial-first folds of the field's
/// Triton kernels: [`Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED`] (what
/// `accumulator += tl.dot(a, b) * a_s[:, None] * b_s[None, :]` computes on
/// sm_90), [`Schedule::SM90_WGMMA_PARTIAL_FIRST`],
/// [`Schedule::V2_PARTIAL_FIRST_FUSED`] and [`Schedule::V2_PARTIAL_FIRST`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// How a block's term enters the sum.
    pub fold: Fold,
    /// How a block's products are accumulated.
    pub accumulation: Accumulation,
}

impl Schedule {
    /// Seed 000's v2: f32 accumulation, separate fold. What [`mmq_v2`]
    /// computes.
    pub const V2: Schedule = Schedule {
        fold: Fold::Separate,
        accumulation: Accumulation::F32,
    };
    /// v2's accumulation with a fused fold.
    pub const V2_FUSED: Schedule = Schedule {
        fold: Fold::Fused,
        accumulation: Accumulation::F32,
    };
    /// The sm_90 `wgmma` FP8 MMA inside each block
    /// ([`crate::tensor_core::SM90_WGMMA`]), fused fold: the schedule
    /// cuBLASLt's block-scaled FP8 GEMM follows on the H200 (measured bit
    /// for bit on every arm of the FP8 gate, CUDA 13.0).
    pub const SM90_WGMMA_FUSED: Schedule = Schedule {
        fold: Fold::Fused,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_WGMMA),
    };
    /// The sm_90 `wgmma` FP8 MMA inside each block, separate fold.
    pub const SM90_WGMMA_SEPARATE: Schedule = Schedule {
        fold: Fold::Separate,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_WGMMA),
    };
    /// The sm_90 `mma.sync` FP8 MMA (as ptxas lowers it,
    /// [`crate::tensor_core::SM90_MMA_SYNC`]) inside each block, fused fold.
    pub const SM90_MMA_SYNC_FUSED: Schedule = Schedule {
        fold: Fold::Fused,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_MMA_SYNC),
    };
    /// The sm_90 `mma.sync` FP8 MMA inside each block, separate fold.
    pub const SM90_MMA_SYNC_SEPARATE: Schedule = Schedule {
        fold: Fold::Separate,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_MMA_SYNC),
    };
    /// The sm_90 `wgmma` FP8 MMA inside each block, the partial-first fused
    /// fold ([`Fold::PartialFirstFused`]): what the field's Triton
    /// block-FP8 GEMMs compute on sm_90 when `tl.dot` lowers to FP8
    /// `wgmma` and Triton contracts the fold (its default,
    /// `enable_fp_fusion=True`; without contraction,
    /// [`Schedule::SM90_WGMMA_PARTIAL_FIRST`]). Measured on the H200
    /// (torch 2.11's Triton): a kernel with that fold matched it bit for
    /// bit on every arm of 44 cases and matched no other schedule.
    pub const SM90_WGMMA_PARTIAL_FIRST_FUSED: Schedule = Schedule {
        fold: Fold::PartialFirstFused,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_WGMMA),
    };
    /// The sm_90 `wgmma` FP8 MMA inside each block, the partial-first fold
    /// without contraction.
    pub const SM90_WGMMA_PARTIAL_FIRST: Schedule = Schedule {
        fold: Fold::PartialFirst,
        accumulation: Accumulation::TensorCore(crate::tensor_core::SM90_WGMMA),
    };
    /// v2's accumulation, the partial-first fused fold.
    pub const V2_PARTIAL_FIRST_FUSED: Schedule = Schedule {
        fold: Fold::PartialFirstFused,
        accumulation: Accumulation::F32,
    };
    /// v2's accumulation, the partial-first fold without contraction (a
    /// numpy or CPU reference of the Triton kernels' expression).
    pub const V2_PARTIAL_FIRST: Schedule = Schedule {
        fold: Fold::PartialFirst,
        accumulation: Accumulation::F32,
    };
    /// The known schedules, [`Schedule::V2`] first.
    pub const KNOWN: [Schedule; 10] = [
        Schedule::V2,
        Schedule::V2_FUSED,
        Schedule::SM90_WGMMA_FUSED,
        Schedule::SM90_WGMMA_SEPARATE,
        Schedule::SM90_MMA_SYNC_FUSED,
        Schedule::SM90_MMA_SYNC_SEPARATE,
        Schedule::SM90_WGMMA_PARTIAL_FIRST_FUSED,
        Schedule::SM90_WGMMA_PARTIAL_FIRST,
        Schedule::V2_PARTIAL_FIRST_FUSED,
        Schedule::V2_PARTIAL_FIRST,
    ];

    /// Whether every output of every case is fixed bit for bit (the
    /// accumulation is a model), so no arm needs a bound.
    pub const fn bit_exact(&self) -> bool {
        matches!(self.accumulation, Accumulation::TensorCore(_))
    }
}

impl Default for Schedule {
    /// [`Schedule::V2`].
    fn default() -> Schedule {
        Schedule::V2
    }
}

impl core::fmt::Display for Schedule {
    /// A short name: `v2` and `v2 + fused fold` for the f32 accumulations,
    /// `sm90 FP8 wgmma + fused fold` (or `+ separate fold`) and
    /// `sm90 FP8 mma.sync + ...` for the sm_90 models, else the model's
    /// `Debug` and the fold.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let fold = match self.fold {
            Fold::Separate => "separate fold",
            Fold::Fused => "fused fold",
            Fold::PartialFirst => "partial-first fold",
            Fold::PartialFirstFused => "partial-first fused fold",
        };
        match (self.accumulation, self.fold) {
            (Accumulation::F32, Fold::Separate) => write!(f, "v2"),
            (Accumulation::F32, _) => write!(f, "v2 + {fold}"),
            (Accumulation::TensorCore(m), _) if m == crate::tensor_core::SM90_WGMMA => {
                write!(f, "sm90 FP8 wgmma + {fold}")
            }
            (Accumulation::TensorCore(m), _) if m == crate::tensor_core::SM90_MMA_SYNC => {
                write!(f, "sm90 FP8 mma.sync + {fold}")
            }
            (Accumulation::TensorCore(m), _) => write!(f, "FP8 MMA {m:?} + {fold}"),
        }
    }
}

/// A validated problem shape: `m` activation rows (tokens), `in_f` input
/// features (k), `out_f` output features (n).
///
/// Construction checks that every dimension is at least 1 and that every
/// buffer length derived from the shape fits in `usize`, so the accessors
/// below never overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    m: usize,
    in_f: usize,
    out_f: usize,
    in_f_pad: usize,
}

/// A shape that cannot be computed. Displays as a sentence a kernel engineer
/// can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// A dimension is zero.
    Zero {
        /// Which dimension: `"m"`, `"in_f"` or `"out_f"`.
        dim: &'static str,
    },
    /// A derived buffer length overflows `usize` (elements) or its byte size
    /// overflows `usize`.
    Overflow {
        /// m (rows).
        m: usize,
        /// in_f (elements).
        in_f: usize,
        /// out_f (elements).
        out_f: usize,
    },
    /// A buffer passed to a contract has the wrong length.
    Len {
        /// The argument's name, as in the contract's signature.
        arg: &'static str,
        /// The length the shape requires (elements).
        want: usize,
        /// The length passed (elements).
        got: usize,
    },
}

impl core::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ShapeError::Zero { dim } => write!(f, "{dim} is 0; every dimension must be at least 1"),
            ShapeError::Overflow { m, in_f, out_f } => write!(
                f,
                "shape m={m} in_f={in_f} out_f={out_f} overflows: a derived buffer length (elements or bytes) does not fit in usize"
            ),
            ShapeError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
        }
    }
}

impl Shape {
    /// Validates `m x in_f` activations against `out_f x in_f` weights.
    ///
    /// # Errors
    /// [`ShapeError::Zero`] if a dimension is 0; [`ShapeError::Overflow`] if
    /// any buffer length below, or its size in bytes as f32, overflows.
    pub const fn new(m: usize, in_f: usize, out_f: usize) -> Result<Shape, ShapeError> {
        if m == 0 {
            return Err(ShapeError::Zero { dim: "m" });
        }
        if in_f == 0 {
            return Err(ShapeError::Zero { dim: "in_f" });
        }
        if out_f == 0 {
            return Err(ShapeError::Zero { dim: "out_f" });
        }
        let ovf = ShapeError::Overflow { m, in_f, out_f };
        // in_f_pad = ceil(in_f / 512) * 512
        let in_f_pad = match in_f.checked_add(ROW_PADDING - 1) {
            Some(v) => (v / ROW_PADDING) * ROW_PADDING,
            None => return Err(ovf),
        };
        // Largest products: weights out_f*in_f, activations m*in_f_pad,
        // outputs m*out_f; each times 4 bytes must fit too.
        let w = match out_f.checked_mul(in_f) {
            Some(v) => v,
            None => return Err(ovf),
        };
        let q = match m.checked_mul(in_f_pad) {
            Some(v) => v,
            None => return Err(ovf),
        };
        let y = match m.checked_mul(out_f) {
            Some(v) => v,
            None => return Err(ovf),
        };
        if w.checked_mul(4).is_none() || q.checked_mul(4).is_none() || y.checked_mul(4).is_none() {
            return Err(ovf);
        }
        Ok(Shape {
            m,
            in_f,
            out_f,
            in_f_pad,
        })
    }

    /// Activation rows (tokens).
    pub const fn m(&self) -> usize {
        self.m
    }
    /// Input features, the reduction length k (elements).
    pub const fn in_f(&self) -> usize {
        self.in_f
    }
    /// Output features, n (elements).
    pub const fn out_f(&self) -> usize {
        self.out_f
    }
    /// `in_f` rounded up to a multiple of [`ROW_PADDING`] (512 elements): the
    /// row stride of the quantized activations.
    pub const fn in_f_pad(&self) -> usize {
        self.in_f_pad
    }
    /// Scale-grid rows, `ceil(out_f / 128)`.
    pub const fn scale_rows(&self) -> usize {
        self.out_f.div_ceil(BLOCK_N)
    }
    /// Scale-grid columns, `ceil(in_f / 128)`: the 128-k blocks the GEMM
    /// iterates over.
    pub const fn scale_cols(&self) -> usize {
        self.in_f.div_ceil(BLOCK_K)
    }
    /// Activation scales per row, `in_f_pad / 128` (the row stride of `d`).
    pub const fn act_blocks(&self) -> usize {
        self.in_f_pad / BLOCK_K
    }
    /// Length of the weight plane `[out_f x in_f]` (bytes, one e4m3 code each).
    pub const fn weight_len(&self) -> usize {
        self.out_f * self.in_f
    }
    /// Length of the weight scale grid `[scale_rows x scale_cols]` (f32 elements).
    pub const fn scale_len(&self) -> usize {
        self.scale_rows() * self.scale_cols()
    }
    /// Length of the f32 activations `[m x in_f]` (elements).
    pub const fn act_len(&self) -> usize {
        self.m * self.in_f
    }
    /// Length of the quantized activations `[m x in_f_pad]` (bytes).
    pub const fn q_len(&self) -> usize {
        self.m * self.in_f_pad
    }
    /// Length of the activation scales `[m x in_f_pad/128]` (f32 elements).
    pub const fn d_len(&self) -> usize {
        self.m * self.act_blocks()
    }
    /// Length of the output `[m x out_f]`, row-major (f32 elements).
    pub const fn out_len(&self) -> usize {
        self.m * self.out_f
    }
    /// Floating-point operations of the GEMM, `2 * m * in_f * out_f`, as
    /// f64 (for throughput reports).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.in_f as f64 * self.out_f as f64
    }
}

/// The dispatch precondition: how many weight codes have the E4M3 NaN
/// magnitude (`0x7F` or `0xFF`).
///
/// Shapes: `w` is any number of e4m3 codes (bytes). Returns a count of codes.
///
/// Rule `NAN-W`: a weight tensor with a non-zero count is refused, never
/// computed: the tensor cores read these codes as NaN, while the checkpoint
/// convention the seed's host reference follows
/// ([`crate::conventions::NanMagnitude::ReadAsZero`]) reads them as 0.0, so
/// no answer would be right for both. Source: seed 000 (the gate's `nan`
/// column and its 254-code coverage rule).
pub fn count_nan_magnitude(w: &[u8]) -> usize {
    let mut count = 0;
    for &code in w {
        if code & 0x7F == 0x7F {
            count += 1;
        }
    }
    count
}

/// The quantizer's argument check: `x` `[m x in_f]`, `q` `[m x in_f_pad]`,
/// `d` `[m x in_f_pad/128]` (elements), as [`quantize_activations`] makes
/// it first; exported so fast paths refuse exactly what the spec refuses.
///
/// # Errors
/// [`ShapeError::Len`] naming the first argument whose length disagrees.
pub fn check_quantize_operands(
    shape: &Shape,
    x: &[f32],
    q: &[u8],
    d: &[f32],
) -> Result<(), ShapeError> {
    check_len("x", shape.act_len(), x.len())?;
    check_len("q", shape.q_len(), q.len())?;
    check_len("d", shape.d_len(), d.len())
}

/// The GEMM's argument check: `w` `[out_f x in_f]`, `scales`
/// `[ceil(out_f/128) x ceil(in_f/128)]`, `q` `[m x in_f_pad]`, `d`
/// `[m x in_f_pad/128]`, `y` `[m x out_f]` (elements), as [`mmq`] makes it
/// first; exported so fast paths refuse exactly what the spec refuses.
///
/// # Errors
/// [`ShapeError::Len`] naming the first argument whose length disagrees.
pub fn check_gemm_operands(
    shape: &Shape,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &[f32],
) -> Result<(), ShapeError> {
    check_len("w", shape.weight_len(), w.len())?;
    check_len("scales", shape.scale_len(), scales.len())?;
    check_len("q", shape.q_len(), q.len())?;
    check_len("d", shape.d_len(), d.len())?;
    check_len("y", shape.out_len(), y.len())
}

fn check_len(arg: &'static str, want: usize, got: usize) -> Result<(), ShapeError> {
    if want == got {
        Ok(())
    } else {
        Err(ShapeError::Len { arg, want, got })
    }
}

/// The v2 activation quantizer: per 128 values, `d = amax / 448` and
/// `q = e4m3_satfinite(x * (448 / amax))`.
///
/// Shapes: `x` is `[m x in_f]` f32 row-major (elements); `q` is
/// `[m x in_f_pad]` e4m3 codes (bytes), `in_f_pad = ceil(in_f / 512) * 512`;
/// `d` is `[m x in_f_pad/128]` f32 (one scale per 128-element block).
///
/// For each row j and each block b of 128 elements (elements at column
/// `g >= in_f` read as `+0.0`, the zero padding):
/// 1. `amax` = the running maximum of `|x[j, g]|` over the block in
///    increasing g, starting at `+0.0` and replaced only when `|x| > amax`
///    (so a NaN element never becomes amax: CUDA `fmaxf` semantics).
/// 2. If `amax == 0`: `d = +0.0` and every code of the block is `0x00`
///    (rule `QUANT-ZERO`: an all-zero block, and every padding-only block).
///    This is the "an all-zero block gives d = 0 and q = 0" and what
///    the kernel writes. It departs from the seed's literal
///    `quantize_act_ref`, which encodes `x * 0` there: a `-0.0` element
///    gives `0x80` and a NaN element `0x7F` in the seed, `0x00` here. (The
///    GEMM result is the same for `-0.0`, since `d = 0`; for NaN see
///    `ACT-NAN` in [`mmq_v2`].)
/// 3. Otherwise `d = amax / 448` and `dinv = 448 / amax`, each one IEEE
///    binary32 division rounded to nearest even.
/// 4. `q[j, g] = encode_e4m3(x[j, g] * dinv, SatFinite)`: one binary32
///    multiply, rounded, then PTX `cvt.rn.satfinite.e4m3x2.f32` (round to
///    nearest even, beyond ±448 gives ±448, NaN gives `0x7F`).
///
/// Edge rules, which follow from the steps and which the kernel must match:
/// - `QUANT-TINY`: if `amax < 448 / f32::MAX` (about 1.3e-36) then `dinv`
///   overflows to `+inf`; non-zero elements saturate to ±448 and a zero
///   element gives `0 * inf = NaN`, code `0x7F`, which the GEMM reads as NaN.
/// - `QUANT-INF`: an infinite element gives `amax = inf`, `d = inf`,
///   `dinv = 0`; the infinite element itself gives `inf * 0 = NaN` (`0x7F`).
/// - `QUANT-NAN`: a NaN element gives code `0x7F`.
///
/// Generators that want finite outputs avoid these three on purpose.
///
/// Source: seed 000, `quantize_act_ref` (modelling v2's
/// `quantize_mmq_e4m3_d128_kernel`); PTX ISA, `cvt` (`.satfinite`).
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing is
/// written then.
pub fn quantize_activations(
    shape: &Shape,
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
) -> Result<(), ShapeError> {
    check_quantize_operands(shape, x, q, d)?;
    let (in_f, in_f_pad, blocks) = (shape.in_f(), shape.in_f_pad(), shape.act_blocks());
    for j in 0..shape.m() {
        for b in 0..blocks {
            // The block, its columns past in_f read as +0.0 (the padding);
            // steps 1 to 4 are the group rule `GroupScale::V2`.
            let mut block = [0.0f32; BLOCK_K];
            for (t, v) in block.iter_mut().enumerate() {
                let g = b * BLOCK_K + t;
                if g < in_f {
                    *v = x[j * in_f + g];
                }
            }
            d[j * blocks + b] = crate::fp8_quant::quantize_group(
                &block,
                crate::fp8_quant::GroupScale::V2,
                &mut q[j * in_f_pad + b * BLOCK_K..][..BLOCK_K],
            );
        }
    }
    Ok(())
}

/// The v2 per-block FP8 GEMM: `y[j, i]` for `m` activation rows against
/// `out_f` weight rows. Seed 000's schedule, [`Schedule::V2`]: the same
/// as [`mmq`]`(shape, &Schedule::V2, ...)`, stated here in full.
///
/// Shapes (all row-major):
/// - `w`: `[out_f x in_f]` e4m3 codes (bytes), row stride `in_f`;
/// - `scales`: the weight scale grid `[ceil(out_f/128) x ceil(in_f/128)]`
///   (f32); the last row and column may cover fewer than 128 weights;
/// - `q`: `[m x in_f_pad]` e4m3 codes and `d`: `[m x in_f_pad/128]` f32, as
///   written by [`quantize_activations`];
/// - `y`: `[m x out_f]` f32 output (elements), `y[j * out_f + i]`.
///
/// For each output (j, i), in this order:
/// 1. `sum = +0.0`.
/// 2. For each scale block `b = 0, 1, ..., ceil(in_f/128) - 1`, in
///    increasing order (the scale block is the outer k loop):
///    1. `c = +0.0`; for `k = 128 b, ..., 128 b + 127` in increasing order:
///       `c = c + w(i, k) * a(j, k)`, one chained accumulator for the whole
///       block, no intermediate scaling. `w(i, k)` is
///       `decode_e4m3(w[i, k], ReadAsZero)` for `k < in_f` and `+0.0` beyond
///       (rule `K-TAIL`: the k tail is zero-filled); `a(j, k)` is
///       `decode_e4m3(q[j, k], Ieee)`.
///    2. `sum = sum + (s[i / 128, b] * d[j, b]) * c`: a multiply, a
///       multiply, an add, each rounded on its own (no fused multiply-add).
/// 3. `y[j, i] = sum`.
///
/// Every product `w * a` of two e4m3 values is exact in binary32 (4 + 4
/// significand bits), so the only roundings in step 2.1 are the additions.
/// The order of those additions within one block is *hardware-internal* in
/// the kernel (the 32-product reduction inside one `mma.sync ... m16n8k32`
/// and the chaining of the block's four MMAs): the contract fixes the order
/// above, the kernel's may differ, and the gate therefore has two arms. In
/// the EXACT arm every partial sum is an integer below 2^24 and addition is
/// exact in any order, so the kernel must match these bits exactly; in the
/// RANDOM arm the difference is bounded (seed 000, ARM 2). Steps 1, 2.2 and
/// 3 have no hidden order: a kernel must follow them exactly.
///
/// Rule `PARTIAL-GRID`: output rows in the last, partial 128-row band use
/// scale row `ceil(out_f/128) - 1`, and the last, partial k block uses scale
/// column `ceil(in_f/128) - 1`. Rule `NAN-W`: weights with NaN magnitude are
/// refused by dispatch ([`count_nan_magnitude`]); this function reads them
/// as 0.0, the seed's host convention.
///
/// Rule `ACT-NAN`: activation codes are decoded the way the tensor cores
/// read them, `0x7F`/`0xFF` as NaN, so the outputs of that row become NaN.
/// This departs from the seed's `host_ref`, which decodes activations with
/// its modelopt reader too (NaN magnitude as 0.0): the seed's answer is one
/// no kernel computes. The quantizer only emits these codes for non-finite
/// or tiny inputs (`QUANT-TINY`, `QUANT-INF`, `QUANT-NAN` in
/// [`quantize_activations`]); on finite inputs above the tiny bound the two
/// readings never differ.
///
/// The seed's `host_ref` also clamps the scale column to `scols - 1` and
/// reads `d = 0` for `kb >= in_f_pad`; both branches are unreachable there
/// (every `kb < scols * 128 <= in_f_pad`), so they have no counterpart here.
///
/// Source: seed 000, `host_ref` (v2 grouping: one chained accumulator per
/// 128-k block, one fold per block with the per-128 activation scale),
/// departing only as `ACT-NAN` says.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing is
/// written then.
pub fn mmq_v2(
    shape: &Shape,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    mmq(shape, &Schedule::V2, w, scales, q, d, y)
}

/// The per-block FP8 GEMM under a declared [`Schedule`]: `y[j, i]` for `m`
/// activation rows against `out_f` weight rows.
///
/// Shapes as in [`mmq_v2`]: `w` `[out_f x in_f]` e4m3 codes (bytes),
/// `scales` `[ceil(out_f/128) x ceil(in_f/128)]` f32, `q` `[m x in_f_pad]`
/// e4m3 codes (bytes), `d` `[m x in_f_pad/128]` f32, `y` `[m x out_f]` f32
/// (elements), all row-major.
///
/// For each output (j, i), in this order:
/// 1. `sum = +0.0`.
/// 2. For each scale block `b = 0, 1, ..., ceil(in_f/128) - 1`, in
///    increasing order:
///    1. `c`, the block's accumulator, by `schedule.accumulation`:
///       - [`Accumulation::F32`]: `c = +0.0`; for `k = 128 b, ..., 128 b +
///         127` in increasing order, `c = c + w(i, k) * a(j, k)`, one
///         chained binary32 accumulator, each product exact, each addition
///         rounded (rule `ACC-F32`; the order is the contract's, a
///         kernel's is hardware-internal: see [`Accumulation::F32`]).
///         `w(i, k)` is `decode_e4m3(w[i, k], ReadAsZero)` for `k < in_f`
///         and `+0.0` beyond (rule `K-TAIL`); `a(j, k)` is
///         `decode_e4m3(q[j, k], Ieee)`.
///       - [`Accumulation::TensorCore`]`(model)`: `c = +0.0`; for `t = 0,
///         1, 2, 3` in increasing order, `c = tensor_core::mma_k32(&model,
///         E4m3, &w32, E4m3, &a32, c)`, where `w32` holds the 32 weight
///         codes `w[i, k]`, `k = 128 b + 32 t, ..., 128 b + 32 t + 31`,
///         with code `0x00` for `k >= in_f` (rule `K-TAIL`) and `0x00` for
///         a NaN-magnitude code (`0x7F`/`0xFF`, rule `NAN-W`: refused by
///         dispatch, read as 0.0 like [`crate::conventions::NanMagnitude::ReadAsZero`]),
///         and `a32` the 32 activation codes `q[j, k]` at the same k, as
///         stored (rule `ACC-MMA`: the weights are the MMA's A operand,
///         the activations its B operand, the incoming accumulator the
///         previous MMA's f32 output; see [`crate::tensor_core::mma_k32`]).
///    2. The fold, by `schedule.fold`, with `sd = s[i / 128, b] * d[j, b]`
///       rounded to binary32 first:
///       - [`Fold::Separate`]: `sum = sum + sd * c`, the multiply and the
///         add each rounded (rule `FOLD-SEPARATE`);
///       - [`Fold::Fused`]: `sum = fma(sd, c, sum)`, one rounding
///         ([`crate::fma::fma_f32`], rule `FOLD-FUSED`).
/// 3. `y[j, i] = sum`.
///
/// Rules `PARTIAL-GRID`, `NAN-W` and `ACT-NAN` are [`mmq_v2`]'s, under
/// every schedule.
///
/// Sources: seed 000, `host_ref`, for the grouping, [`Accumulation::F32`]
/// and [`Fold::Separate`]; DeepSeek-V3 technical report, section 3.3.2, and
/// DeepGEMM for the tensor-core accumulation promoted to an f32 sum every
/// 128 k; cuBLASLt's measured behaviour on the H200 for [`Fold::Fused`]
/// over v2's grouping.
///
/// # Errors
/// [`ShapeError::Len`] if a slice's length disagrees with `shape`; nothing is
/// written then.
pub fn mmq(
    shape: &Shape,
    schedule: &Schedule,
    w: &[u8],
    scales: &[f32],
    q: &[u8],
    d: &[f32],
    y: &mut [f32],
) -> Result<(), ShapeError> {
    use crate::conventions::NanMagnitude::{Ieee, ReadAsZero};
    use crate::e4m3::decode_e4m3;
    use crate::tensor_core::{mma_k32, Fp8Kind::E4m3, MMA_K};
    check_gemm_operands(shape, w, scales, q, d, y)?;
    let (in_f, in_f_pad, out_f) = (shape.in_f(), shape.in_f_pad(), shape.out_f());
    let (scols, blocks) = (shape.scale_cols(), shape.act_blocks());
    for j in 0..shape.m() {
        for i in 0..out_f {
            let srow = i / BLOCK_N;
            let mut sum = 0.0f32;
            for b in 0..scols {
                // Step 2.1.
                let mut c = 0.0f32;
                match schedule.accumulation {
                    Accumulation::F32 => {
                        for k in b * BLOCK_K..(b + 1) * BLOCK_K {
                            let wv = if k < in_f {
                                decode_e4m3(w[i * in_f + k], ReadAsZero)
                            } else {
                                0.0
                            };
                            let av = decode_e4m3(q[j * in_f_pad + k], Ieee);
                            c += wv * av;
                        }
                    }
                    Accumulation::TensorCore(model) => {
                        for t in 0..BLOCK_K / MMA_K {
                            let k0 = b * BLOCK_K + t * MMA_K;
                            let mut w32 = [0u8; MMA_K];
                            let mut a32 = [0u8; MMA_K];
                            for kk in 0..MMA_K {
                                let k = k0 + kk;
                                w32[kk] =
                                    mma_weight_code(if k < in_f { w[i * in_f + k] } else { 0x00 });
                                a32[kk] = q[j * in_f_pad + k];
                            }
                            c = mma_k32(&model, E4m3, &w32, E4m3, &a32, c);
                        }
                    }
                }
                // Step 2.2.
                sum = schedule
                    .fold
                    .apply(sum, c, scales[srow * scols + b], d[j * blocks + b]);
            }
            y[j * out_f + i] = sum;
        }
    }
    Ok(())
}

/// The weight code the MMA of [`Accumulation::TensorCore`] reads for a
/// stored code: `0x00` for the NaN magnitudes `0x7F`/`0xFF` (rule `NAN-W`:
/// refused by dispatch; read as 0.0, as [`mmq_v2`] reads them), else the
/// code itself.
pub const fn mma_weight_code(code: u8) -> u8 {
    if code & 0x7F == 0x7F {
        0x00
    } else {
        code
    }
}
