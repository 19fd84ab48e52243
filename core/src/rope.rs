//! Rotary position embedding ("RoPE") with a cos/sin cache: vLLM's
//! `rotary_embedding` op (`csrc/pos_encoding_kernels.cu`,
//! `apply_token_rotary_embedding`), its torch form (`RotaryEmbedding.forward_native`),
//! FlashInfer's and SGLang's `apply_rope_with_cos_sin_cache`, and
//! Hugging Face's `apply_rotary_pos_emb` (`q * cos + rotate_half(q) * sin`).
//! The layout is one; the arithmetic is not, so a kernel declares its
//! [`Arithmetic`] and is held to it bit for bit.
//!
//! Shapes (elements, row-major): `positions [T]` (token `t`'s position),
//! `query [T][num_heads][head_size]`, `key [T][num_kv_heads][head_size]`
//! (`num_kv_heads` may be 0: no key, vLLM's `key=None`), `cache
//! [max_position][rotary_dim]`, the first `rotary_dim / 2` columns of a
//! row the cosines and the last `rotary_dim / 2` the sines. The query and
//! key hold values of the model's [`Dtype`], the cache values of f32 or of
//! the model's dtype (either way held here as the `f32` of the same
//! value); the outputs have the query's and key's shapes.
//!
//! The rules, for token `t`, one head `v` (of the query or the key) and
//! `p = 0, 1, ..., rotary_dim / 2 - 1`:
//!
//! 1. `ROPE-POS`: `pos = positions[t]` with `0 <= pos < max_position`
//!    (a kernel reads the cache unchecked; a position outside is an error
//!    here, nothing written).
//! 2. `ROPE-PAIR`: by the [`Layout`], the pair `(i1, i2)` is `(p, p +
//!    rotary_dim / 2)` (GPT-NeoX, `is_neox=True`) or `(2p, 2p + 1)` (GPT-J,
//!    interleaved); `c = cache[pos][p]`, `s = cache[pos][rotary_dim / 2 + p]`
//!    in both layouts; `x = v[i1]`, `y = v[i2]`.
//! 3. `ROPE-ROT`: `out[i1] = x c - y s`, `out[i2] = y c + x s`, evaluated
//!    as the [`Arithmetic`] says.
//! 4. `ROPE-PASS`: `out[j] = v[j]` for `rotary_dim <= j < head_size` (the
//!    dimensions past `rotary_dim`, when `rotary_dim < head_size`, are
//!    carried unchanged).
//!
//! Source: vLLM `csrc/pos_encoding_kernels.cu`
//! (`apply_token_rotary_embedding`: NeoX `x_index = rot_offset`, `y_index
//! = embed_dim + rot_offset`, GPT-J `x_index = 2 * rot_offset`, `y_index =
//! x_index + 1`, the cosine read at `x_index` (NeoX) or `x_index / 2`
//! (GPT-J) from `cos_ptr`; then `arr[x_index] = x * cos - y * sin` and
//! `arr[y_index] = y * cos + x * sin`, with `embed_dim = rot_dim / 2` and
//! `cos_ptr`, `sin_ptr = cos_ptr + embed_dim` the position's cache row;
//! `scalar_t` is the query's type; older builds hold the cache as
//! `scalar_t` too, current ones convert both to float); FlashInfer's
//! `apply_rope_with_cos_sin_cache` docstring ("Cosine is the first half and
//! Sine is the second half on rotary_dim"; NeoX rotates `[..., :d/2]` with
//! `[..., d/2:]`, interleaved the even with the odd dimensions); Hugging
//! Face `rotate_half(x) = cat(-x2, x1)`, which is the same pair rule.

use crate::fma::fma_f32;

/// The type of the query, key and outputs (and of a cache that is not
/// f32): [`crate::dtype::Dtype`].
pub use crate::dtype::Dtype;

/// Which dimensions of a head rotate together (rule `ROPE-PAIR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// GPT-NeoX (`is_neox=True`, Llama, Qwen): `(p, p + rotary_dim / 2)`.
    Neox,
    /// GPT-J (`is_neox=False`, interleaved): `(2p, 2p + 1)`.
    Gptj,
}

impl Layout {
    /// Both layouts, NeoX first.
    pub const ALL: [Layout; 2] = [Layout::Neox, Layout::Gptj];

    /// The pair `(i1, i2)` of pair index `p` (`p < rotary_dim / 2`).
    pub const fn pair(self, rotary_dim: usize, p: usize) -> (usize, usize) {
        match self {
            Layout::Neox => (p, p + rotary_dim / 2),
            Layout::Gptj => (2 * p, 2 * p + 1),
        }
    }

    /// `"neox"` or `"gptj"`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Neox => "neox",
            Layout::Gptj => "gptj",
        }
    }
}

/// How `x c - y s` and `y c + x s` are evaluated (rule `ROPE-ROT`), with
/// `RN` rounding to nearest even to binary32 and `R` to the model's dtype
/// ([`Dtype::round`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arithmetic {
    /// Every operation in the model's dtype: `c' = R(c)`, `s' = R(s)`,
    /// then `R(RN(R(RN(x c')) - R(RN(y s'))))` and `R(RN(R(RN(y c')) +
    /// R(RN(x s'))))`: each binary32 operation's result rounded to the
    /// dtype, as c10's `BFloat16`/`Half` operators compute (`float(a) *
    /// float(b)` converted back) and as torch eager computes on bf16 or
    /// f16 tensors, one kernel per operation (vLLM's `forward_native`
    /// casts the cache to the query's dtype first: `cos.to(x.dtype)`,
    /// hence `c'`). vLLM's CUDA op computed this in the builds whose cache
    /// was `scalar_t` (each `*`, `-`, `+` a c10 operator); current vLLM
    /// converts to float, computes there and rounds once (one of the f32
    /// forms, its cache f32 or the model's dtype). Products of two bf16 or two f16 values are exact in
    /// binary32 (at most 22 significant bits, normal for the data a check
    /// draws), and binary32 has at least `2p + 2` bits for p = 8 or 11, so
    /// each `R(RN(..))` is the dtype's correctly rounded operation
    /// (Figueroa, "When is double rounding innocuous?", SIGNUM 1995). In
    /// F32 this is [`Arithmetic::F32`].
    PerOp,
    /// binary32, unfused, one rounding to the dtype at the end:
    /// `R(RN(RN(x c) - RN(y s)))`, `R(RN(RN(y c) + RN(x s)))` (a kernel
    /// that upcasts to f32 and is compiled without contraction: nvcc
    /// `--fmad=false`, `__fmul_rn`/`__fadd_rn`).
    F32,
    /// binary32 with the first product of each expression fused:
    /// `R(fma(x, c, -RN(y s)))`, `R(fma(y, c, RN(x s)))`. LLVM's
    /// DAGCombiner contracts `fsub(fmul(a, b), fmul(c, d))` to `fma(a, b,
    /// fneg(fmul(c, d)))` and `fadd(fmul(a, b), fmul(c, d))` to `fma(a, b,
    /// fmul(c, d))` when both products have one use
    /// (`visitFSUBForFMACombine`/`visitFADDForFMACombine`). Triton's
    /// default build (`enable_fp_fusion`) measured otherwise:
    /// [`Arithmetic::F32FmaX`] (run 78).
    F32FmaFirst,
    /// binary32 with the second product fused: `R(fma(-y, s, RN(x c)))`,
    /// `R(fma(x, s, RN(y c)))`: the other contraction, which a compiler
    /// that orders the operands otherwise (nvcc's NVVM is not LLVM's open
    /// DAG combiner; a source written `-y * s + x * c`) gives.
    F32FmaSecond,
    /// binary32 with the first product of `x c - y s` fused and the second
    /// of `y c + x s`: `R(fma(x, c, -RN(y s)))`, `R(fma(x, s, RN(y c)))`.
    /// Both fused products are the ones with `x`. A compiler contracts
    /// each expression on its own, so mixed forms occur: Triton's build
    /// with FP fusion (`x * c - y * s`, `y * c + x * s` in float32 on an
    /// H100) is this one, bit for bit on every case, TIES included, and
    /// neither uniform contraction (`device/NOTES.md`, run 78).
    F32FmaX,
    /// binary32 with the second product of `x c - y s` fused and the first
    /// of `y c + x s`: `R(fma(-y, s, RN(x c)))`, `R(fma(y, c, RN(x s)))`
    /// (both fused products the ones with `y`): the last of the four
    /// contractions.
    F32FmaY,
}

impl Arithmetic {
    /// Every arithmetic, in the order identification reports them.
    pub const ALL: [Arithmetic; 6] = [
        Arithmetic::PerOp,
        Arithmetic::F32,
        Arithmetic::F32FmaFirst,
        Arithmetic::F32FmaSecond,
        Arithmetic::F32FmaX,
        Arithmetic::F32FmaY,
    ];

    /// The name a check takes: `"per_op"`, `"f32"`, `"f32_fma"`,
    /// `"f32_fma_second"`, `"f32_fma_x"`, `"f32_fma_y"`.
    pub const fn name(self) -> &'static str {
        match self {
            Arithmetic::PerOp => "per_op",
            Arithmetic::F32 => "f32",
            Arithmetic::F32FmaFirst => "f32_fma",
            Arithmetic::F32FmaSecond => "f32_fma_second",
            Arithmetic::F32FmaX => "f32_fma_x",
            Arithmetic::F32FmaY => "f32_fma_y",
        }
    }

    /// `(x c - y s, y c + x s)` in `dtype` under this arithmetic (rule
    /// `ROPE-ROT`); `x`, `y` are `dtype` values, `c`, `s` the cache's.
    pub fn rotate(self, dtype: Dtype, x: f32, y: f32, c: f32, s: f32) -> (f32, f32) {
        let r = |v: f32| dtype.round(v);
        match self {
            Arithmetic::PerOp => {
                let (c, s) = (r(c), r(s));
                (r(r(x * c) - r(y * s)), r(r(y * c) + r(x * s)))
            }
            Arithmetic::F32 => (r(x * c - y * s), r(y * c + x * s)),
            Arithmetic::F32FmaFirst => (r(fma_f32(x, c, -(y * s))), r(fma_f32(y, c, x * s))),
            Arithmetic::F32FmaSecond => (r(fma_f32(-y, s, x * c)), r(fma_f32(x, s, y * c))),
            Arithmetic::F32FmaX => (r(fma_f32(x, c, -(y * s))), r(fma_f32(x, s, y * c))),
            Arithmetic::F32FmaY => (r(fma_f32(-y, s, x * c)), r(fma_f32(y, c, x * s))),
        }
    }
}

/// A shape or input that cannot be computed. Displays as a sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeError {
    /// A dimension that must be at least 1 is 0.
    Zero {
        /// `"tokens"`, `"num_heads"`, `"head_size"` or `"max_position"`.
        dim: &'static str,
    },
    /// `rotary_dim` is odd, 0, or past `head_size`.
    RotaryDim {
        /// The rotary dimension.
        rotary_dim: usize,
        /// The head size.
        head_size: usize,
    },
    /// A buffer length overflows `usize`.
    Overflow,
    /// A buffer has the wrong number of elements.
    Len {
        /// `"positions"`, `"query"`, `"key"`, `"cache"`, `"out_query"`
        /// or `"out_key"`.
        arg: &'static str,
        /// Elements the shape needs.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// A position outside `0..max_position` (rule `ROPE-POS`).
    Position {
        /// The token.
        token: usize,
        /// Its position.
        position: i64,
        /// The cache's rows.
        max_position: usize,
    },
}

impl core::fmt::Display for RopeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RopeError::Zero { dim } => write!(f, "{dim} is 0; it must be at least 1"),
            RopeError::RotaryDim { rotary_dim, head_size } => write!(
                f,
                "rotary_dim {rotary_dim} with head_size {head_size}: rotary_dim must be even, at least 2 and at most head_size"
            ),
            RopeError::Overflow => write!(f, "a buffer length overflows usize"),
            RopeError::Len { arg, want, got } => {
                write!(f, "{arg} has {got} elements, the shape needs {want}")
            }
            RopeError::Position { token, position, max_position } => write!(
                f,
                "positions[{token}] = {position}, outside the cache's 0..{max_position} rows"
            ),
        }
    }
}

/// The dimensions of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    tokens: usize,
    num_heads: usize,
    num_kv_heads: usize,
    head_size: usize,
    rotary_dim: usize,
    max_position: usize,
}

impl Shape {
    /// A shape: `tokens`, `num_heads`, `head_size`, `max_position` at
    /// least 1, `num_kv_heads` any (0: no key), `rotary_dim` even, at
    /// least 2 and at most `head_size`, every buffer length within `usize`.
    ///
    /// # Errors
    /// [`RopeError::Zero`], [`RopeError::RotaryDim`], [`RopeError::Overflow`].
    pub fn new(
        tokens: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_size: usize,
        rotary_dim: usize,
        max_position: usize,
    ) -> Result<Shape, RopeError> {
        for (dim, v) in [
            ("tokens", tokens),
            ("num_heads", num_heads),
            ("head_size", head_size),
            ("max_position", max_position),
        ] {
            if v == 0 {
                return Err(RopeError::Zero { dim });
            }
        }
        if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) || rotary_dim > head_size {
            return Err(RopeError::RotaryDim {
                rotary_dim,
                head_size,
            });
        }
        let fits = |a: usize, b: usize, c: usize| {
            a.checked_mul(b)
                .and_then(|n| n.checked_mul(c))
                .and_then(|n| n.checked_mul(4))
                .is_some()
        };
        if !fits(tokens, num_heads, head_size)
            || !fits(tokens, num_kv_heads, head_size)
            || !fits(max_position, rotary_dim, 1)
        {
            return Err(RopeError::Overflow);
        }
        Ok(Shape {
            tokens,
            num_heads,
            num_kv_heads,
            head_size,
            rotary_dim,
            max_position,
        })
    }

    /// Tokens (`T`).
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Query heads per token.
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }
    /// Key heads per token (0: no key).
    pub fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }
    /// Elements per head.
    pub fn head_size(&self) -> usize {
        self.head_size
    }
    /// Rotated elements per head (the cache's row length).
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }
    /// Cache rows.
    pub fn max_position(&self) -> usize {
        self.max_position
    }
    /// Query elements, `T num_heads head_size`.
    pub fn query_len(&self) -> usize {
        self.tokens * self.num_heads * self.head_size
    }
    /// Key elements, `T num_kv_heads head_size`.
    pub fn key_len(&self) -> usize {
        self.tokens * self.num_kv_heads * self.head_size
    }
    /// Cache elements, `max_position rotary_dim`.
    pub fn cache_len(&self) -> usize {
        self.max_position * self.rotary_dim
    }
}

/// The inputs of [`rotary_embedding`] (layouts in the module
/// documentation).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `[T]` positions.
    pub positions: &'a [i64],
    /// `[T][num_heads][head_size]` model-dtype values.
    pub query: &'a [f32],
    /// `[T][num_kv_heads][head_size]` model-dtype values.
    pub key: &'a [f32],
    /// `[max_position][rotary_dim]` cache values (cos half, sin half).
    pub cache: &'a [f32],
}

fn len(arg: &'static str, want: usize, got: usize) -> Result<(), RopeError> {
    if want == got {
        Ok(())
    } else {
        Err(RopeError::Len { arg, want, got })
    }
}

/// Checks the lengths (`positions`, `query`, `key`, `cache`, then the
/// outputs' `out_query`, `out_key`) and every position (rule `ROPE-POS`).
///
/// # Errors
/// [`RopeError::Len`] naming the first wrong buffer, then
/// [`RopeError::Position`] naming the first bad position.
pub fn check_inputs(
    shape: &Shape,
    x: &Inputs<'_>,
    out_query: usize,
    out_key: usize,
) -> Result<(), RopeError> {
    len("positions", shape.tokens, x.positions.len())?;
    len("query", shape.query_len(), x.query.len())?;
    len("key", shape.key_len(), x.key.len())?;
    len("cache", shape.cache_len(), x.cache.len())?;
    len("out_query", shape.query_len(), out_query)?;
    len("out_key", shape.key_len(), out_key)?;
    for (token, &position) in x.positions.iter().enumerate() {
        if position < 0 || position as u64 >= shape.max_position as u64 {
            return Err(RopeError::Position {
                token,
                position,
                max_position: shape.max_position,
            });
        }
    }
    Ok(())
}

/// One head rotated: `out` from `v` (both `head_size` elements) with the
/// position's cache `row` (`rotary_dim` elements), rules `ROPE-PAIR`,
/// `ROPE-ROT`, `ROPE-PASS`, pairs in increasing `p`.
///
/// # Panics
/// If `v` and `out` differ in length, or `row` is longer than `v` or odd.
pub fn rotate_head(
    layout: Layout,
    arithmetic: Arithmetic,
    dtype: Dtype,
    row: &[f32],
    v: &[f32],
    out: &mut [f32],
) {
    assert_eq!(v.len(), out.len(), "a head in, a head out");
    let rot = row.len();
    assert!(
        rot.is_multiple_of(2) && rot <= v.len(),
        "rotary_dim even, <= head_size"
    );
    let half = rot / 2;
    for p in 0..half {
        let (i1, i2) = layout.pair(rot, p);
        let (o1, o2) = arithmetic.rotate(dtype, v[i1], v[i2], row[p], row[half + p]);
        out[i1] = o1;
        out[i2] = o2;
    }
    // ROPE-PASS.
    out[rot..].copy_from_slice(&v[rot..]);
}

/// Rotary embedding of every head of the query and the key, token by
/// token, query heads then key heads (rules `ROPE-*` in the module
/// documentation), into `out_query` and `out_key`.
///
/// # Errors
/// As [`check_inputs`]; nothing is written then.
pub fn rotary_embedding(
    shape: &Shape,
    layout: Layout,
    arithmetic: Arithmetic,
    dtype: Dtype,
    x: &Inputs<'_>,
    out_query: &mut [f32],
    out_key: &mut [f32],
) -> Result<(), RopeError> {
    check_inputs(shape, x, out_query.len(), out_key.len())?;
    let (hs, rot) = (shape.head_size, shape.rotary_dim);
    for t in 0..shape.tokens {
        let pos = x.positions[t] as usize;
        let row = &x.cache[pos * rot..(pos + 1) * rot];
        for (src, dst, heads) in [
            (x.query, &mut *out_query, shape.num_heads),
            (x.key, &mut *out_key, shape.num_kv_heads),
        ] {
            let at = t * heads * hs;
            for h in 0..heads {
                let (a, b) = (at + h * hs, at + (h + 1) * hs);
                rotate_head(layout, arithmetic, dtype, row, &src[a..b], &mut dst[a..b]);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_pair_rule_per_layout() {
        assert_eq!(Layout::Neox.pair(64, 3), (3, 35));
        assert_eq!(Layout::Gptj.pair(64, 3), (6, 7));
    }

    #[test]
    fn rotation_by_a_quarter_turn_swaps_with_sign() {
        for a in Arithmetic::ALL {
            for d in Dtype::ALL {
                assert_eq!(a.rotate(d, 3.0, 5.0, 0.0, 1.0), (-5.0, 3.0), "{a:?} {d:?}");
                assert_eq!(a.rotate(d, 3.0, 5.0, 1.0, 0.0), (3.0, 5.0), "{a:?} {d:?}");
            }
        }
    }

    /// `n` (x, y, c, s) quadruples of bf16 values from a fixed LCG, x and
    /// y in [1, 2), c and s in (0, 1).
    fn quads(n: usize) -> impl Iterator<Item = [f32; 4]> {
        let mut z = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            z = z
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            Dtype::Bf16.round(((z >> 40) as f32) / (1u32 << 24) as f32)
        };
        (0..n).map(move |_| [1.0 + next(), 1.0 + next(), next(), next()])
    }

    #[test]
    fn per_op_rounds_each_operation_to_the_dtype_and_f32_once() {
        let mut differ = 0;
        for [x, y, c, s] in quads(1000) {
            let p = Arithmetic::PerOp.rotate(Dtype::Bf16, x, y, c, s);
            let f = Arithmetic::F32.rotate(Dtype::Bf16, x, y, c, s);
            assert_eq!(Dtype::Bf16.round(p.0), p.0);
            // Products of bf16 values are exact in f32: every f32 order
            // is one rounding of the exact value, fused or not.
            assert_eq!(f, Arithmetic::F32FmaFirst.rotate(Dtype::Bf16, x, y, c, s));
            assert_eq!(f, Arithmetic::F32FmaSecond.rotate(Dtype::Bf16, x, y, c, s));
            assert_eq!(f, Arithmetic::F32FmaX.rotate(Dtype::Bf16, x, y, c, s));
            assert_eq!(f, Arithmetic::F32FmaY.rotate(Dtype::Bf16, x, y, c, s));
            differ += usize::from(p != f);
            // In F32 per_op is f32.
            assert_eq!(
                Arithmetic::PerOp.rotate(Dtype::F32, x, y, c, s),
                Arithmetic::F32.rotate(Dtype::F32, x, y, c, s)
            );
        }
        assert!(differ > 100, "{differ}");
    }

    #[test]
    fn fma_orders_differ_when_the_products_are_inexact() {
        // An f32 cache: c and s with 24 bits make the products inexact.
        let (mut first, mut second) = (0, 0);
        for [x, y, c, s] in quads(1000) {
            let (c, s) = (c * (1.0 + f32::EPSILON * 3.0), s / 3.0);
            let f = Arithmetic::F32.rotate(Dtype::F32, x, y, c, s);
            let a = Arithmetic::F32FmaFirst.rotate(Dtype::F32, x, y, c, s);
            let b = Arithmetic::F32FmaSecond.rotate(Dtype::F32, x, y, c, s);
            let fx = Arithmetic::F32FmaX.rotate(Dtype::F32, x, y, c, s);
            let fy = Arithmetic::F32FmaY.rotate(Dtype::F32, x, y, c, s);
            first += usize::from(a != f);
            second += usize::from(b != a);
            // The mixed contractions take one output from each uniform one.
            assert_eq!((fx.0, fx.1), (a.0, b.1));
            assert_eq!((fy.0, fy.1), (b.0, a.1));
        }
        assert!(first > 100 && second > 100, "{first} {second}");
    }

    #[test]
    fn rope_pass_and_rope_pos() {
        let shape = Shape::new(2, 1, 1, 6, 4, 3).unwrap();
        let positions = [2i64, 0];
        let query = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let key = query;
        // Row 0: cos 1, sin 0; row 2: cos 0, sin 1.
        let cache = [1.0, 1.0, 0.0, 0.0, 9.0, 9.0, 9.0, 9.0, 0.0, 0.0, 1.0, 1.0];
        let x = Inputs {
            positions: &positions,
            query: &query,
            key: &key,
            cache: &cache,
        };
        let (mut q, mut k) = ([f32::NAN; 12], [f32::NAN; 12]);
        let run = |l: Layout, x: &Inputs<'_>, q: &mut [f32], k: &mut [f32]| {
            rotary_embedding(&shape, l, Arithmetic::F32, Dtype::F32, x, q, k)
        };
        run(Layout::Neox, &x, &mut q, &mut k).unwrap();
        // NeoX pairs (0, 2), (1, 3) a quarter turn; 5, 6 passed through.
        let want = [-3.0, -4.0, 1.0, 2.0, 5.0, 6.0];
        assert_eq!((&q[..6], &q[6..]), (&want[..], &query[..6]));
        assert_eq!(k, q);
        run(Layout::Gptj, &x, &mut q, &mut k).unwrap();
        assert_eq!(&q[..6], &[-2.0, 1.0, -4.0, 3.0, 5.0, 6.0]);
        let bad = [3i64, 0];
        let x = Inputs {
            positions: &bad,
            ..x
        };
        let err = RopeError::Position {
            token: 0,
            position: 3,
            max_position: 3,
        };
        assert_eq!(run(Layout::Neox, &x, &mut q, &mut k), Err(err));
        assert_eq!(
            Shape::new(1, 1, 0, 6, 7, 3),
            Err(RopeError::RotaryDim {
                rotary_dim: 7,
                head_size: 6
            })
        );
        assert!(Shape::new(1, 1, 0, 6, 6, 3).is_ok());
    }
}
