//! Cases for judging a rotary position embedding kernel (vLLM's
//! `rotary_embedding`, FlashInfer's and SGLang's
//! `apply_rope_with_cos_sin_cache`, torch's `forward_native`, a Triton
//! kernel) bit for bit under the arithmetic it declares
//! ([`oracle::rope::Arithmetic`]), and for naming the arithmetics and
//! layouts its output matches.
//!
//! A case (elements, row-major): `positions [T]` (int64), `query [T]
//! [num_heads][head_size]` and `key [T][num_kv_heads][head_size]` in the
//! model's dtype, `cache [max_position][rotary_dim]` (cos half, sin half)
//! in f32 or the model's dtype: a real RoPE cache, `cos` and `sin` of
//! `pos * 10000^(-2p / rotary_dim)` computed in binary64 and rounded to
//! the cache's dtype (the values vLLM's `_compute_cos_sin_cache` builds,
//! up to its f32 rounding).

pub use crate::dtype::bits;
use crate::rng::Rng;
use oracle::rope::{rotate_head, Arithmetic, Dtype, Inputs, Layout, RopeError, Shape};
use rayon::prelude::*;

/// The data a case draws, each arm aimed at a class of bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    /// Normal values, random positions: the layout (NeoX or GPT-J pairs),
    /// the sign of the sine, which half of the cache row is the cosine,
    /// the GQA key heads, and (with a 16-bit dtype) per-op against f32
    /// arithmetic in a few outputs in ten.
    Rand,
    /// The positions a kernel gets wrong: `max_position - 1` (the cache's
    /// last row), 0 (the identity rotation), a position repeated from the
    /// token before, positions counting down from the top, and random
    /// ones; no token's position is its index past token 1, so a kernel
    /// that indexes the cache by token, or by position plus or minus one,
    /// fails.
    Pos,
    /// Run on shapes with `rotary_dim < head_size` only: the dimensions
    /// past `rotary_dim` hold values 8 times larger than the rotated ones,
    /// and one in eight `-0`, so a kernel that rotates them (even by the
    /// identity: `-0 c - y s` with `c = 1`, `s = 0` is `+0` for a negative
    /// `y`), adds `0` to them (`-0 + 0 = +0`), zeroes them, or leaves them
    /// unwritten (the output arrays start as NaN) fails (rule
    /// `ROPE-PASS`).
    Partial,
    /// Cancellation: in each pair, `x` (among 128 neighbouring values) and
    /// `y` are chosen so that `x c - y s` nearly cancels (in every other
    /// pair, `y c + x s`), where each rounding of a product shows: per-op
    /// and f32 arithmetic differ in most outputs and, with an f32 cache,
    /// so do the two FMA contractions and the unfused f32.
    Ties,
}

impl Arm {
    /// Every arm, in the order a check runs them.
    pub const ALL: [Arm; 4] = [Arm::Rand, Arm::Pos, Arm::Partial, Arm::Ties];

    /// The arm's name in rows and reproductions.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Rand => "RAND",
            Arm::Pos => "POS",
            Arm::Partial => "PARTIAL",
            Arm::Ties => "TIES",
        }
    }

    /// The arm named `s` (any case).
    ///
    /// # Errors
    /// A sentence naming the arms.
    pub fn parse(s: &str) -> Result<Arm, String> {
        crate::names::parse_named("arm", s, &Arm::ALL, Arm::name, true)
    }

    /// Whether the arm runs on `shape` (PARTIAL needs `rotary_dim <
    /// head_size`).
    pub fn runs_on(self, shape: &Shape) -> bool {
        self != Arm::Partial || shape.rotary_dim() < shape.head_size()
    }
}

/// The arithmetic named `s` ([`Arithmetic::name`]).
///
/// # Errors
/// A sentence naming the arithmetics.
pub fn parse_arithmetic(s: &str) -> Result<Arithmetic, String> {
    crate::names::parse_named("arithmetic", s, &Arithmetic::ALL, Arithmetic::name, false)
}

/// The most query plus key elements a case has (64 MiB of f32): a check
/// keeps about eight arrays of that many (inputs, outputs, the oracle's,
/// their bits) and identification computes the case eight times.
pub const MAX_ELEMS: usize = 1 << 24;

/// The most cache elements (`max_position rotary_dim`; 64 MiB of f32).
pub const MAX_CACHE: usize = 1 << 24;

/// `(tokens, num_heads, num_kv_heads, head_size, rotary_dim,
/// max_position)`.
pub type Dims = (usize, usize, usize, usize, usize, usize);

/// The oracle's shape of `d`, refused past the caps.
///
/// # Errors
/// A shape error ([`RopeError`]) or a case over [`MAX_ELEMS`] or
/// [`MAX_CACHE`], as a sentence.
pub fn within_caps(d: Dims) -> Result<Shape, String> {
    let shape = Shape::new(d.0, d.1, d.2, d.3, d.4, d.5).map_err(|e| e.to_string())?;
    let elems = shape.query_len() + shape.key_len();
    if elems > MAX_ELEMS {
        return Err(format!(
            "{d:?}: {elems} query and key elements, over the check's {MAX_ELEMS}"
        ));
    }
    if shape.cache_len() > MAX_CACHE {
        return Err(format!(
            "{d:?}: {} cache elements (max_position*rotary_dim), over the check's {MAX_CACHE}",
            shape.cache_len()
        ));
    }
    Ok(shape)
}

/// One case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The dimensions.
    pub dims: Dims,
    /// The query's and key's dtype.
    pub dtype: Dtype,
    /// The cache's dtype (f32 or `dtype`).
    pub cache_dtype: Dtype,
    /// The declared layout: TIES cancels within its pairs.
    pub layout: Layout,
    /// The data.
    pub arm: Arm,
    /// The data seed.
    pub seed: u64,
}

/// A case's inputs, as values (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// `[T]`.
    pub positions: Vec<i64>,
    /// `[T][num_heads][head_size]`, model-dtype values.
    pub query: Vec<f32>,
    /// `[T][num_kv_heads][head_size]`, model-dtype values.
    pub key: Vec<f32>,
    /// `[max_position][rotary_dim]`, cache-dtype values.
    pub cache: Vec<f32>,
}

impl Case {
    /// The inputs as the oracle takes them.
    pub fn inputs(&self) -> Inputs<'_> {
        Inputs {
            positions: &self.positions,
            query: &self.query,
            key: &self.key,
            cache: &self.cache,
        }
    }
}

/// The real RoPE cache, base 10000, rounded to `dtype`.
pub fn rope_cache(max_position: usize, rotary_dim: usize, dtype: Dtype) -> Vec<f32> {
    let half = rotary_dim / 2;
    let inv: Vec<f64> = (0..half)
        .map(|p| 10000f64.powf(-((2 * p) as f64) / rotary_dim as f64))
        .collect();
    let mut cache = vec![0f32; max_position * rotary_dim];
    cache
        .par_chunks_mut(rotary_dim)
        .enumerate()
        .for_each(|(pos, row)| {
            for p in 0..half {
                let (s, c) = (pos as f64 * inv[p]).sin_cos();
                row[p] = dtype.round(c as f32);
                row[half + p] = dtype.round(s as f32);
            }
        });
    cache
}

impl Spec {
    /// The default seed of a shape, dtypes and arm.
    pub fn base_seed(d: Dims, dtype: Dtype, cache_dtype: Dtype, arm: Arm) -> u64 {
        let h = crate::rng::shape_hash(0x0120_7A7E_0000_0000u64, &[d.0, d.1, d.2, d.3, d.4, d.5]);
        let idx = |x: Dtype| Dtype::ALL.iter().position(|&y| y == x).unwrap_or(0) as u64;
        let arm = Arm::ALL.iter().position(|&a| a == arm).unwrap_or(0) as u64;
        h ^ (idx(dtype) << 8) ^ (idx(cache_dtype) << 4) ^ arm
    }

    /// The oracle's shape.
    ///
    /// # Errors
    /// As [`within_caps`].
    pub fn shape(&self) -> Result<Shape, String> {
        within_caps(self.dims)
    }

    /// The inputs, drawn from `seed` alone.
    ///
    /// # Errors
    /// As [`Spec::shape`]; PARTIAL on a shape without pass-through
    /// dimensions; a cache dtype other than f32 or `dtype`.
    pub fn generate(&self) -> Result<Case, String> {
        let shape = self.shape()?;
        if !self.arm.runs_on(&shape) {
            return Err(format!(
                "arm PARTIAL needs rotary_dim < head_size, the shape has {} and {}",
                shape.rotary_dim(),
                shape.head_size()
            ));
        }
        if self.cache_dtype != Dtype::F32 && self.cache_dtype != self.dtype {
            return Err(format!(
                "cache dtype {}: it is float32 or the model's dtype {}",
                self.cache_dtype.name(),
                self.dtype.name()
            ));
        }
        let (t_n, hs, rot, maxp) = (
            shape.tokens(),
            shape.head_size(),
            shape.rotary_dim(),
            shape.max_position(),
        );
        let mut rng = Rng(self.seed);
        let cache = rope_cache(maxp, rot, self.cache_dtype);
        let mut positions = Vec::with_capacity(t_n);
        for t in 0..t_n {
            let random = rng.below(maxp) as i64;
            let top = maxp as i64 - 1;
            let p = match self.arm {
                Arm::Pos => match t % 5 {
                    0 => top,
                    1 => 0,
                    2 => positions[t - 1],
                    3 => (top - t as i64).max(0),
                    _ => random,
                },
                _ => random,
            };
            // POS: never the token's own index past token 1.
            let own = self.arm == Arm::Pos && t > 1 && p == t as i64;
            positions.push(if own { p - 1 } else { p });
        }
        let dt = self.dtype;
        let half = rot / 2;
        let heads = |n: usize, rng: &mut Rng| -> Vec<f32> {
            let mut v = vec![0f32; t_n * n * hs];
            for (i, head) in v.chunks_mut(hs).enumerate() {
                let pos = positions[i / n] as usize;
                let row = &cache[pos * rot..(pos + 1) * rot];
                for e in head.iter_mut() {
                    *e = dt.round(rng.normal());
                }
                if self.arm == Arm::Partial {
                    for (j, e) in head[rot..].iter_mut().enumerate() {
                        let v = dt.round(8.0 * rng.normal());
                        *e = if j % 8 == 3 { -0.0 } else { v };
                    }
                }
                if self.arm == Arm::Ties {
                    for p in 0..half {
                        let (i1, i2) = self.layout.pair(rot, p);
                        let (c, s) = (row[p], row[half + p]);
                        if c.abs() < 1e-3 || s.abs() < 1e-3 {
                            continue;
                        }
                        let (x, y) = near_cancel(dt, head[i1], c, s, p % 2 == 0);
                        head[i1] = x;
                        head[i2] = y;
                    }
                }
            }
            v
        };
        let query = heads(shape.num_heads(), &mut rng);
        let key = heads(shape.num_kv_heads(), &mut rng);
        Ok(Case {
            positions,
            query,
            key,
            cache,
        })
    }
}

/// TIES candidates per pair: the `x` tried are this many consecutive
/// values of the dtype from the drawn one.
const TIES_CANDIDATES: u32 = 128;

/// A pair `(x, y)` of `dtype` values, `x` among [`TIES_CANDIDATES`]
/// consecutive values from `x0`, `y` rounded from `x c / s` (when
/// `first`: `x c - y s` cancels) or `-x s / c` (`y c + x s` cancels),
/// whichever leaves the smallest residual: about `2^-16` of the products
/// in bf16, so the rounding of each product shows in the result's last
/// bits.
fn near_cancel(dtype: Dtype, x0: f32, c: f32, s: f32, first: bool) -> (f32, f32) {
    let (c, s) = (f64::from(c), f64::from(s));
    let mut best = (x0, x0, f64::INFINITY);
    let b0 = dtype.encode(x0);
    for k in 0..TIES_CANDIDATES {
        let x = dtype.decode(b0.wrapping_add(k));
        if !x.is_finite() || x == 0.0 {
            continue;
        }
        let xd = f64::from(x);
        let y = dtype.round(if first { xd * c / s } else { -xd * s / c } as f32);
        let yd = f64::from(y);
        let residual = if first {
            xd * c - yd * s
        } else {
            yd * c + xd * s
        }
        .abs()
            / xd.abs();
        if residual < best.2 {
            best = (x, y, residual);
        }
    }
    (best.0, best.1)
}

/// `(out_query, out_key)` of `case` under `layout`, `arithmetic` and
/// `dtype`, tokens in parallel (each head by core's
/// [`oracle::rope::rotate_head`], as [`oracle::rope::rotary_embedding`]).
///
/// # Errors
/// As [`oracle::rope::check_inputs`].
pub fn reference(
    shape: &Shape,
    case: &Case,
    layout: Layout,
    arithmetic: Arithmetic,
    dtype: Dtype,
) -> Result<(Vec<f32>, Vec<f32>), RopeError> {
    let x = case.inputs();
    let (ql, kl) = (shape.query_len(), shape.key_len());
    oracle::rope::check_inputs(shape, &x, ql, kl)?;
    let (hs, rot) = (shape.head_size(), shape.rotary_dim());
    let run = |src: &[f32], heads: usize| -> Vec<f32> {
        let mut out = vec![0f32; src.len()];
        if heads == 0 {
            return out;
        }
        out.par_chunks_mut(heads * hs)
            .zip(src.par_chunks(heads * hs))
            .enumerate()
            .for_each(|(t, (o, v))| {
                let pos = x.positions[t] as usize;
                let row = &x.cache[pos * rot..(pos + 1) * rot];
                for (oh, vh) in o.chunks_mut(hs).zip(v.chunks(hs)) {
                    rotate_head(layout, arithmetic, dtype, row, vh, oh);
                }
            });
        out
    };
    Ok((
        run(x.query, shape.num_heads()),
        run(x.key, shape.num_kv_heads()),
    ))
}

/// Every known (arithmetic, layout) whose output equals `got_q` and
/// `got_k` (bits of `dtype`, widened to 32) everywhere.
///
/// # Errors
/// As [`reference()`], or outputs of the wrong length.
pub fn identify(
    shape: &Shape,
    case: &Case,
    dtype: Dtype,
    got_q: &[u32],
    got_k: &[u32],
) -> Result<Vec<(Arithmetic, Layout)>, String> {
    if got_q.len() != shape.query_len() || got_k.len() != shape.key_len() {
        return Err("outputs of the wrong length".into());
    }
    let mut found = Vec::new();
    for layout in Layout::ALL {
        for a in Arithmetic::ALL {
            let (q, k) = reference(shape, case, layout, a, dtype).map_err(|e| e.to_string())?;
            let same = |want: &[f32], got: &[u32]| {
                want.par_iter()
                    .zip(got.par_iter())
                    .all(|(&w, &g)| dtype.same(dtype.encode(w), g))
            };
            if same(&q, got_q) && same(&k, got_k) {
                found.push((a, layout));
            }
        }
    }
    Ok(found)
}

/// `"f32_fma/neox"`.
pub fn label(a: Arithmetic, l: Layout) -> String {
    format!("{}/{}", a.name(), l.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Dims = (5, 4, 2, 80, 64, 512);

    fn case(arm: Arm, dtype: Dtype, cache_dtype: Dtype) -> (Shape, Case) {
        case_l(arm, dtype, cache_dtype, Layout::Neox)
    }

    fn case_l(arm: Arm, dtype: Dtype, cache_dtype: Dtype, layout: Layout) -> (Shape, Case) {
        let sp = Spec {
            dims: D,
            dtype,
            cache_dtype,
            layout,
            arm,
            seed: Spec::base_seed(D, dtype, cache_dtype, arm),
        };
        (sp.shape().unwrap(), sp.generate().unwrap())
    }

    #[test]
    fn reference_is_cores_rotary_embedding() {
        for arm in Arm::ALL {
            let (shape, c) = case(arm, Dtype::Bf16, Dtype::F32);
            for l in Layout::ALL {
                for a in Arithmetic::ALL {
                    let (q, k) = reference(&shape, &c, l, a, Dtype::Bf16).unwrap();
                    let (mut q2, mut k2) = (vec![0f32; q.len()], vec![0f32; k.len()]);
                    oracle::rope::rotary_embedding(
                        &shape,
                        l,
                        a,
                        Dtype::Bf16,
                        &c.inputs(),
                        &mut q2,
                        &mut k2,
                    )
                    .unwrap();
                    assert_eq!(bits(Dtype::F32, &q), bits(Dtype::F32, &q2));
                    assert_eq!(bits(Dtype::F32, &k), bits(Dtype::F32, &k2));
                }
            }
        }
    }

    #[test]
    fn ties_separate_every_arithmetic_and_each_identifies_itself() {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            for l in Layout::ALL {
                let (shape, c) = case_l(Arm::Ties, dtype, Dtype::F32, l);
                for a in Arithmetic::ALL {
                    let (q, k) = reference(&shape, &c, l, a, dtype).unwrap();
                    let found =
                        identify(&shape, &c, dtype, &bits(dtype, &q), &bits(dtype, &k)).unwrap();
                    assert_eq!(found, vec![(a, l)], "{dtype:?} {a:?} {l:?}");
                }
            }
        }
    }

    #[test]
    fn a_model_dtype_cache_makes_the_f32_forms_one() {
        let (shape, c) = case(Arm::Ties, Dtype::Bf16, Dtype::Bf16);
        let (q, k) = reference(&shape, &c, Layout::Neox, Arithmetic::F32, Dtype::Bf16).unwrap();
        let found = identify(
            &shape,
            &c,
            Dtype::Bf16,
            &bits(Dtype::Bf16, &q),
            &bits(Dtype::Bf16, &k),
        )
        .unwrap();
        assert_eq!(
            found,
            [
                Arithmetic::F32,
                Arithmetic::F32FmaFirst,
                Arithmetic::F32FmaSecond,
                Arithmetic::F32FmaX,
                Arithmetic::F32FmaY
            ]
            .map(|a| (a, Layout::Neox))
        );
    }

    #[test]
    fn pos_arm_hits_the_edges_and_partial_needs_pass_through() {
        let (shape, c) = case(Arm::Pos, Dtype::Bf16, Dtype::Bf16);
        assert_eq!(c.positions[0], 511);
        assert_eq!(c.positions[1], 0);
        assert_eq!(c.positions[2], 0);
        assert!(c
            .positions
            .iter()
            .skip(1)
            .enumerate()
            .all(|(t, &p)| p != t as i64 + 1));
        assert_eq!(shape.cache_len(), c.cache.len());
        // A cache short enough that the patterns would meet the index.
        let small = Spec {
            dims: (40, 1, 1, 8, 8, 9),
            dtype: Dtype::Bf16,
            cache_dtype: Dtype::Bf16,
            layout: Layout::Neox,
            arm: Arm::Pos,
            seed: 7,
        };
        let p = small.generate().unwrap().positions;
        assert!(p
            .iter()
            .enumerate()
            .skip(2)
            .all(|(t, &v)| v != t as i64 && (0..9).contains(&v)));
        let sp = Spec {
            dims: (2, 1, 1, 64, 64, 16),
            dtype: Dtype::F16,
            cache_dtype: Dtype::F16,
            layout: Layout::Gptj,
            arm: Arm::Partial,
            seed: 1,
        };
        assert!(sp.generate().is_err());
        let bad = Spec {
            cache_dtype: Dtype::Bf16,
            arm: Arm::Rand,
            ..sp
        };
        assert!(bad.generate().is_err());
        assert!(within_caps((1 << 13, 32, 8, 128, 128, 16)).is_err());
        assert_eq!(Arm::parse("ties"), Ok(Arm::Ties));
        assert_eq!(parse_arithmetic("f32_fma"), Ok(Arithmetic::F32FmaFirst));
        assert!(crate::dtype::parse_dtype("float64").is_err());
    }
}
