//! Gated DeltaNet decode (seed 003): the linear-attention layer of
//! Qwen3-Next, one token ("row") at a time or `T` rows packed.
//!
//! One row is three stages, each its own contract and file:
//!
//! 1. [`conv`]: the causal depthwise conv1d over a ring of the `d_conv - 1`
//!    previous inputs, then SiLU, per channel of
//!    `conv_dim = 2 * key_dim + value_dim`; the ring then shifts.
//! 2. [`prep`]: split the conv output into q, k, v; L2-normalize q and k per
//!    head with eps inside the square root; repeat them from `num_k` to
//!    `num_v` heads; `beta = sigmoid(beta_raw)`,
//!    `g = -exp(A_log) * softplus(alpha + dt_bias)`.
//! 3. [`scan`]: the gated delta rule on a `[num_v, 128, 128]` f32 state:
//!    decay by `exp(g)` first, delta against the decayed state scaled by
//!    beta, rank-1 update, then read `o = (S^T q) * scale`.
//!
//! [`batch`] lays out `B` independent sequences, each through [`rows`].
//!
//! [`rows`] chains them for one row, or for `T` rows with a snapshot of the
//! conv ring and of the state after every row but the last (speculative
//! decoding rolls back to the last accepted row), in the alternating state
//! buffers of the seed. [`transcendental`] and [`sqrt`] define exp,
//! softplus, sigmoid, SiLU and the square root as binary32 basic operations.
//!
//! Every floating-point operation is a binary32 `+ - * /` or [`sqrt::sqrt`],
//! rounded to nearest even on its own: there is no fused multiply-add, and
//! subnormals are kept (no flush to zero). A kernel compiled with NVRTC
//! `--fmad=false` (or spelling `__fadd_rn`, `__fmul_rn`, `__fdiv_rn`,
//! `__fsqrt_rn`) that follows the stated orders reproduces every output bit
//! for bit.
//!
//! Source: seed 003 (`lane/dspark-gdn-packed`: the per-row and packed
//! kernels `ssm_conv1d_fused_decode`, `gdn_prep_decode`, `gdn_scan_s128`,
//! and the bit-identity of the packed twins); Yang, Kautz, Hatamizadeh,
//! "Gated Delta Networks: Improving Mamba2 with Delta Rule" (ICLR 2025),
//! the gated delta rule `S_t = S_{t-1} (a_t (I - b_t k_t k_t^T)) + b_t v_t
//! k_t^T`; Hugging Face `transformers` `modeling_qwen3_next.py`
//! (`Qwen3NextGatedDeltaNet`: the q/k/v split after the conv, the
//! `repeat_interleave` of q and k, `g = -A_log.exp() * softplus(a +
//! dt_bias)`, `torch_recurrent_gated_delta_rule`).

pub mod batch;
pub mod conv;
pub mod prep;
pub mod rows;
pub mod scan;
pub mod sqrt;
pub mod transcendental;

/// The head dimension, `head_k_dim = head_v_dim = d_state` (elements): 128
/// in Qwen3-Next and the only size the seed's kernels (`gdn_scan_s128`)
/// handle (seed 003 line 51).
pub const D_STATE: usize = 128;

/// A validated Gated DeltaNet decode shape.
///
/// - `num_k`: q/k heads; `num_v`: v heads, a multiple of `num_k` (each q/k
///   head serves `num_v / num_k` consecutive v heads);
/// - `d_state`: the head dimension of q, k and v, which must be
///   [`D_STATE`] = 128;
/// - `d_conv`: the conv kernel width, 2..=4 (4 in Qwen3-Next and the seed);
/// - `t`: rows per packed call, at least 1. The `_row` functions process
///   one row whatever `t` is; the `_rows` functions process `t`.
///
/// Construction checks every derived buffer length, and its size in bytes
/// as f32, against `usize` overflow, so the accessors never overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GdnShape {
    num_k: usize,
    num_v: usize,
    d_conv: usize,
    t: usize,
}

/// A shape or buffer that the contract refuses. Displays as a sentence a
/// kernel engineer can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdnError {
    /// A count is zero: `"num_k"`, `"num_v"` or `"t"`.
    Zero {
        /// Which count.
        dim: &'static str,
    },
    /// `num_v` is not a multiple of `num_k`.
    HeadRatio {
        /// q/k heads.
        num_k: usize,
        /// v heads.
        num_v: usize,
    },
    /// The head dimension is not [`D_STATE`].
    DState {
        /// The head dimension asked for (elements).
        d_state: usize,
    },
    /// The conv width is outside 2..=4.
    DConv {
        /// The width asked for (taps).
        d_conv: usize,
    },
    /// A derived buffer length (elements) or its size in bytes overflows
    /// `usize`.
    Overflow {
        /// q/k heads.
        num_k: usize,
        /// v heads.
        num_v: usize,
        /// rows.
        t: usize,
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

impl core::fmt::Display for GdnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            GdnError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            GdnError::HeadRatio { num_k, num_v } => write!(
                f,
                "num_v = {num_v} is not a multiple of num_k = {num_k}: q/k heads cannot be repeated onto the v heads"
            ),
            GdnError::DState { d_state } => {
                write!(f, "d_state = {d_state}; the contract is defined for d_state = 128 only")
            }
            GdnError::DConv { d_conv } => write!(f, "d_conv = {d_conv}; it must be 2, 3 or 4"),
            GdnError::Overflow { num_k, num_v, t } => write!(
                f,
                "shape num_k={num_k} num_v={num_v} t={t} overflows: a derived buffer length (elements or bytes) does not fit in usize"
            ),
            GdnError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
        }
    }
}

/// `a * b`, or `None` on overflow (a `const` helper for [`GdnShape::new`]).
const fn mul(a: usize, b: usize) -> Option<usize> {
    a.checked_mul(b)
}

impl GdnShape {
    /// Validates a shape.
    ///
    /// # Errors
    /// [`GdnError::Zero`] if `num_k`, `num_v` or `t` is 0;
    /// [`GdnError::HeadRatio`] if `num_v % num_k != 0`; [`GdnError::DState`]
    /// if `d_state != 128`; [`GdnError::DConv`] if `d_conv` is not in
    /// 2..=4; [`GdnError::Overflow`] if any length below, times 4 bytes,
    /// overflows `usize`.
    pub const fn new(
        num_k: usize,
        num_v: usize,
        d_state: usize,
        d_conv: usize,
        t: usize,
    ) -> Result<GdnShape, GdnError> {
        if num_k == 0 {
            return Err(GdnError::Zero { dim: "num_k" });
        }
        if num_v == 0 {
            return Err(GdnError::Zero { dim: "num_v" });
        }
        if t == 0 {
            return Err(GdnError::Zero { dim: "t" });
        }
        if !num_v.is_multiple_of(num_k) {
            return Err(GdnError::HeadRatio { num_k, num_v });
        }
        if d_state != D_STATE {
            return Err(GdnError::DState { d_state });
        }
        if d_conv < 2 || d_conv > 4 {
            return Err(GdnError::DConv { d_conv });
        }
        // The largest lengths: conv_dim * d_conv (weights), t * conv_dim
        // (inputs and conv outputs), t * conv_dim * (d_conv - 1) (conv
        // snapshots, bounded by t * weights), t * num_v * 128 * 128 (state
        // snapshots), each times 4 bytes. conv_dim = 128 * (2 num_k + num_v).
        let ovf = Err(GdnError::Overflow { num_k, num_v, t });
        let heads = match mul(num_k, 2) {
            Some(v) => match v.checked_add(num_v) {
                Some(v) => v,
                None => return ovf,
            },
            None => return ovf,
        };
        let conv_w = match mul(heads, D_STATE * 4) {
            Some(v) => v,
            None => return ovf,
        };
        let rows_w = match mul(conv_w, t) {
            Some(v) => v,
            None => return ovf,
        };
        let state = match mul(num_v, D_STATE * D_STATE) {
            Some(v) => v,
            None => return ovf,
        };
        let states = match mul(state, t) {
            Some(v) => v,
            None => return ovf,
        };
        if mul(rows_w, 4).is_none() || mul(states, 4).is_none() {
            return ovf;
        }
        Ok(GdnShape {
            num_k,
            num_v,
            d_conv,
            t,
        })
    }

    /// q/k heads.
    pub const fn num_k(&self) -> usize {
        self.num_k
    }
    /// v heads (and heads of the state, of beta, g and o).
    pub const fn num_v(&self) -> usize {
        self.num_v
    }
    /// v heads per q/k head, `num_v / num_k`: v head `h` reads q/k head
    /// `h / ratio` (`repeat_interleave`).
    pub const fn ratio(&self) -> usize {
        self.num_v / self.num_k
    }
    /// The head dimension, always [`D_STATE`] = 128 (elements).
    pub const fn d_state(&self) -> usize {
        D_STATE
    }
    /// The conv kernel width (taps).
    pub const fn d_conv(&self) -> usize {
        self.d_conv
    }
    /// Rows per packed call.
    pub const fn t(&self) -> usize {
        self.t
    }
    /// `key_dim = 128 * num_k` (elements): the q part, and the k part, of a
    /// conv row.
    pub const fn key_dim(&self) -> usize {
        D_STATE * self.num_k
    }
    /// `value_dim = 128 * num_v` (elements): the v part of a conv row, and
    /// the length of one row of repeated q, k, of v and of o.
    pub const fn value_dim(&self) -> usize {
        D_STATE * self.num_v
    }
    /// `conv_dim = 2 * key_dim + value_dim` (elements, channels): one row of
    /// the fused qkv input and of the conv output.
    pub const fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
    /// The conv weights `[conv_dim][d_conv]` (elements).
    pub const fn conv_w_len(&self) -> usize {
        self.conv_dim() * self.d_conv
    }
    /// The conv ring `[conv_dim][d_conv - 1]` (elements).
    pub const fn ring_len(&self) -> usize {
        self.conv_dim() * (self.d_conv - 1)
    }
    /// The recurrent state `[num_v][128][128]` (elements).
    pub const fn state_len(&self) -> usize {
        self.num_v * D_STATE * D_STATE
    }
    /// The scratch of one row of [`rows::decode_row`] and
    /// [`rows::decode_rows`] (elements): q, k, v (`value_dim` each), beta
    /// and g (`num_v` each).
    pub const fn scratch_len(&self) -> usize {
        3 * self.value_dim() + 2 * self.num_v
    }
    /// `t - 1`, the snapshots of a packed call (one after every row but the
    /// last).
    pub const fn snapshots(&self) -> usize {
        self.t - 1
    }
}

/// The layer's weights and constants, the same for every row.
#[derive(Clone, Copy, Debug)]
pub struct GdnParams<'a> {
    /// The depthwise conv weights `[conv_dim][d_conv]` (elements), see
    /// [`conv`].
    pub conv_w: &'a [f32],
    /// `dt_bias [num_v]`, added to alpha before softplus.
    pub dt_bias: &'a [f32],
    /// `A_log [num_v]` (the seed's `a`): the decay rate is `exp(A_log)`.
    pub a_log: &'a [f32],
    /// The L2-norm epsilon, inside the square root (seed 003 line 56:
    /// `1e-6`).
    pub eps: f32,
    /// The output scale of the scan (seed 003 line 57: [`default_scale`]).
    pub scale: f32,
}

impl GdnParams<'_> {
    /// Checks `conv_w`, `dt_bias` and `a_log` against `shape`.
    ///
    /// # Errors
    /// [`GdnError::Len`] naming the first slice whose length is wrong.
    pub fn check(&self, shape: &GdnShape) -> Result<(), GdnError> {
        check_len("conv_w", shape.conv_w_len(), self.conv_w.len())?;
        check_len("dt_bias", shape.num_v(), self.dt_bias.len())?;
        check_len("a_log", shape.num_v(), self.a_log.len())
    }
}

/// `1 / sqrt(128)` as the seed computes it (line 57: `1.0 / (d_state as
/// f32).sqrt()`): a correctly rounded `sqrt(128.0)`, then one division.
/// The value is `0x3DB5_04F3` (0.088388346).
pub fn default_scale() -> f32 {
    1.0 / sqrt::sqrt(D_STATE as f32)
}

/// `Err(Len)` unless `got == want`.
pub(crate) fn check_len(arg: &'static str, want: usize, got: usize) -> Result<(), GdnError> {
    if want == got {
        Ok(())
    } else {
        Err(GdnError::Len { arg, want, got })
    }
}
