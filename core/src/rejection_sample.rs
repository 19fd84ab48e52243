//! Speculative decoding's rejection sampler: `k` draft tokens per request,
//! the draft model's probabilities and the target model's, and the random
//! numbers (handed in, so the contract is deterministic) give the emitted
//! tokens, bit for bit. vLLM v1's `rejection_sample`
//! (`vllm/v1/sample/rejection_sampler.py`: Triton kernels
//! `rejection_greedy_sample_kernel`, `rejection_random_sample_kernel`,
//! `sample_recovered_tokens_kernel`) and FlashInfer's
//! `chain_speculative_sampling` (`include/flashinfer/sampling.cuh`,
//! `ChainSpeculativeSamplingKernel`, uniform samples as an input).
//!
//! Shapes (elements, row-major), `B` requests, `k` draft tokens each, `V`
//! tokens in the vocabulary:
//! - `draft_token_ids [B][k]` (int32, in `0..V`);
//! - `draft_probs [B][k][V]` (f32), or none: an n-gram (or any
//!   probability-free) drafter, vLLM's `NO_DRAFT_PROBS`;
//! - `target_probs [B][k + 1][V]` (f32): row `i < k` the target's
//!   distribution at draft position `i`; row `k` the bonus position's,
//!   which this contract does not read (the bonus token is handed in,
//!   sampled by the caller from it as vLLM does; FlashInfer's shape, where
//!   vLLM flattens the `k` rows to `[B * k][V]`);
//! - `bonus_token_ids [B]` (int32, in `0..V`);
//! - `uniform [B][k]` (f32 in `[0, 1)`: vLLM draws float64, whose values
//!   here are these f32 values exactly, so every comparison is the same);
//! - `noise [B][V]` (f32, finite, at least `2^-126`: the exponential
//!   variates of the recovery race, ONE row per request shared by its `k`
//!   positions, vLLM's `q = torch.empty((batch_size, vocab_size))
//!   .exponential_()`, "only one distribution for each request");
//! - `is_greedy [B]` (0 or 1);
//! - output `out [B][k + 1]` (int32).
//!
//! # The rules, for request `b`
//!
//! `RN` rounds to nearest even in binary32; `x_i` is the draft token at
//! position `i`, `p_i(v) = target_probs[b][i][v]`, `q_i(v) =
//! draft_probs[b][i][v]`, `u_i = uniform[b][i]`, `e(v) = noise[b][v]`.
//!
//! 1. `RS-GREEDY`: a greedy request (`is_greedy[b] = 1`) emits `t_i =
//!    argmax_v p_i(v)` (rule `RS-TIE`) at each position `i` in order, and
//!    stops after the first `i` with `t_i != x_i` (vLLM's
//!    `rejection_greedy_sample_kernel`: the target's argmax is emitted,
//!    which is `x_i` when accepted).
//! 2. `RS-ACCEPT`: a random request accepts `x_i` as [`Accept`] says:
//!    [`Accept::DivideGe`], `q_i(x_i) > 0 && RN(p_i(x_i) / q_i(x_i)) >=
//!    u_i` (vLLM: "If [the draft probability] happens to be 0, we
//!    reject"); [`Accept::MultiplyLt`], `RN(u_i * q_i(x_i)) < p_i(x_i)`
//!    (FlashInfer: `u * q < p`, which accepts a draft token of draft
//!    probability 0 whenever `p > 0`). Without draft probabilities (rule
//!    `RS-NGRAM`) `q_i(x_i)` is `1` (vLLM's `draft_prob = 1`): `p >= u`,
//!    or `u < p`. The two forms part exactly where `p = u q` (`>=` against
//!    `<`), where `q = 0 < p`, and where `u = 0 = p < q`.
//! 3. `RS-STOP`: positions are taken in order; the first rejected position
//!    `j` emits the recovered token (rule `RS-RECOVER`), and every
//!    position after `j` is [`PLACEHOLDER`] (`-1`), as is position `k`.
//! 4. `RS-BONUS`: when all `k` are accepted, position `k` is
//!    `bonus_token_ids[b]` (greedy and random requests alike).
//! 5. `RS-RECOVER` (the exponential race, vLLM's
//!    `sample_recovered_tokens_kernel`): the residual `r(v) =
//!    max(RN(p_j(v) - q_j(v)), +0)`; without draft probabilities `r(v) =
//!    p_j(v)` for `v != x_j` and `+0` for `x_j` (the kernel's masked load,
//!    `other=0.0`); the score `s(v)` as [`Race`] says,
//!    [`Race::Divide`] `RN(r(v) / e(v))` (vLLM before `inv_q`),
//!    [`Race::Reciprocal`] `RN(r(v) * RN(1 / e(v)))` (vLLM now: `inv_q =
//!    q.reciprocal()` in torch, then `prob * inv_q` in Triton); the token
//!    is `argmax_v s(v)` (rule `RS-TIE`). The residual is not normalised:
//!    the argmax does not need it. A residual of zeros (possible only when
//!    the probabilities do not sum alike) gives token 0.
//! 6. `RS-TIE`: an argmax is the LOWEST index of the maximum (`torch.argmax`;
//!    Triton's `tl.max(..., return_indices=True)`, whose tie break is
//!    left, and vLLM's block loop, which replaces only on `local_max >
//!    max_val`).
//!
//! # Arithmetic a kernel may hide
//!
//! Triton lowers a float32 `/` to PTX `div.full.f32`, within 2 ulps, not
//! `RN` (triton issue 10661): vLLM's `target_prob / draft_prob` and the
//! pre-`inv_q` race can differ from [`Accept::DivideGe`] and
//! [`Race::Divide`] only where `u` lies within 2 ulps of `p / q`, or two
//! scores within 2 ulps of each other. The case library draws the
//! acceptance coincidences only where they are exact (a power-of-two `q`,
//! for which every division of the field is exact), and one race
//! coincidence on purpose (`e = 3`, where the two [`Race`] forms part):
//! such a kernel declares its race from a correctly rounded division
//! (`tl.math.div_rn`), or the reciprocal form.
//!
//! # Refused inputs
//!
//! [`validate`]: a token id outside `0..V`, a probability negative or not
//! finite, a `u` outside `[0, 1)`, a noise value not finite or below
//! `2^-126` (its reciprocal would overflow), `is_greedy` other than 0 or
//! 1, or slices of other lengths than the shapes: each an
//! [`RejectionError`].

/// The token of a position after the first rejection (vLLM's
/// `PLACEHOLDER_TOKEN_ID`, FlashInfer's `-1` padding).
pub const PLACEHOLDER: i32 = -1;

/// Rule `RS-ACCEPT`: how the acceptance test is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accept {
    /// `q > 0 && RN(p / q) >= u` (vLLM v1).
    DivideGe,
    /// `RN(u * q) < p` (FlashInfer).
    MultiplyLt,
}

impl Accept {
    /// Both, vLLM's first.
    pub const ALL: [Accept; 2] = [Accept::DivideGe, Accept::MultiplyLt];

    /// The name a check declares (`"divide_ge"`, `"multiply_lt"`).
    pub fn name(self) -> &'static str {
        match self {
            Accept::DivideGe => "divide_ge",
            Accept::MultiplyLt => "multiply_lt",
        }
    }
}

/// Rule `RS-RECOVER`: how the race's score is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Race {
    /// `RN(r / e)`.
    Divide,
    /// `RN(r * RN(1 / e))` (vLLM's `inv_q`).
    Reciprocal,
}

impl Race {
    /// Both, vLLM's current first.
    pub const ALL: [Race; 2] = [Race::Reciprocal, Race::Divide];

    /// The name a check declares (`"reciprocal"`, `"divide"`).
    pub fn name(self) -> &'static str {
        match self {
            Race::Divide => "divide",
            Race::Reciprocal => "reciprocal",
        }
    }
}

/// A declared rejection sampler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Declared {
    /// Rule `RS-ACCEPT`.
    pub accept: Accept,
    /// Rule `RS-RECOVER`.
    pub race: Race,
}

impl Declared {
    /// vLLM v1's current kernels.
    pub const VLLM: Declared = Declared {
        accept: Accept::DivideGe,
        race: Race::Reciprocal,
    };
}

/// One batch's inputs (see the module docs for shapes).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// `[B][k]`.
    pub draft_token_ids: &'a [i32],
    /// `[B][k][V]`, or `None` (rule `RS-NGRAM`).
    pub draft_probs: Option<&'a [f32]>,
    /// `[B][k + 1][V]`.
    pub target_probs: &'a [f32],
    /// `[B]`.
    pub bonus_token_ids: &'a [i32],
    /// `[B][k]`.
    pub uniform: &'a [f32],
    /// `[B][V]`.
    pub noise: &'a [f32],
    /// `[B]`, 0 or 1.
    pub is_greedy: &'a [u8],
}

/// Why a batch is refused (nothing is written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectionError {
    /// An input's length is not its shape's (the input's name).
    Length {
        /// The input.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The shape's.
        want: usize,
    },
    /// `k` or `V` is 0, or a shape overflows.
    Shape,
    /// A token id outside `0..V` (the input, the flat index).
    Token {
        /// The input.
        what: &'static str,
        /// The flat index.
        at: usize,
    },
    /// A value outside its range (the input, the flat index).
    Value {
        /// The input.
        what: &'static str,
        /// The flat index.
        at: usize,
    },
}

impl core::fmt::Display for RejectionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            RejectionError::Length { what, got, want } => {
                write!(f, "{what} has {got} elements, the shape {want}")
            }
            RejectionError::Shape => write!(f, "k and V must be at least 1"),
            RejectionError::Token { what, at } => {
                write!(f, "{what}[{at}] is not a token id in 0..V")
            }
            RejectionError::Value { what, at } => write!(
                f,
                "{what}[{at}] is out of range (probabilities finite and >= 0, uniform in [0, 1), noise finite and >= 2^-126, is_greedy 0 or 1)"
            ),
        }
    }
}

fn len(what: &'static str, got: usize, want: Option<usize>) -> Result<usize, RejectionError> {
    let want = want.ok_or(RejectionError::Shape)?;
    if got != want {
        return Err(RejectionError::Length { what, got, want });
    }
    Ok(want)
}

fn ids(what: &'static str, x: &[i32], v: usize) -> Result<(), RejectionError> {
    for (at, &t) in x.iter().enumerate() {
        if t < 0 || t as usize >= v {
            return Err(RejectionError::Token { what, at });
        }
    }
    Ok(())
}

fn values(what: &'static str, x: &[f32], ok: impl Fn(f32) -> bool) -> Result<(), RejectionError> {
    for (at, &y) in x.iter().enumerate() {
        if !ok(y) {
            return Err(RejectionError::Value { what, at });
        }
    }
    Ok(())
}

/// Checks every shape and value of a batch of `b` requests, `k` draft
/// tokens, `v` tokens, and an output of `b * (k + 1)`.
///
/// # Errors
/// [`RejectionError`].
pub fn validate(
    b: usize,
    k: usize,
    v: usize,
    x: &Inputs<'_>,
    out_len: usize,
) -> Result<(), RejectionError> {
    if k == 0 || v == 0 {
        return Err(RejectionError::Shape);
    }
    let bk = b.checked_mul(k);
    len("draft_token_ids", x.draft_token_ids.len(), bk)?;
    if let Some(q) = x.draft_probs {
        len("draft_probs", q.len(), bk.and_then(|n| n.checked_mul(v)))?;
    }
    let rows = b.checked_mul(k + 1);
    len(
        "target_probs",
        x.target_probs.len(),
        rows.and_then(|n| n.checked_mul(v)),
    )?;
    len("bonus_token_ids", x.bonus_token_ids.len(), Some(b))?;
    len("uniform", x.uniform.len(), bk)?;
    len("noise", x.noise.len(), b.checked_mul(v))?;
    len("is_greedy", x.is_greedy.len(), Some(b))?;
    len("out", out_len, rows)?;
    ids("draft_token_ids", x.draft_token_ids, v)?;
    ids("bonus_token_ids", x.bonus_token_ids, v)?;
    let prob = |y: f32| y.is_finite() && y >= 0.0;
    if let Some(q) = x.draft_probs {
        values("draft_probs", q, prob)?;
    }
    values("target_probs", x.target_probs, prob)?;
    values("uniform", x.uniform, |u| (0.0..1.0).contains(&u))?;
    values("noise", x.noise, |e| {
        e.is_finite() && e >= f32::MIN_POSITIVE
    })?;
    for (at, &g) in x.is_greedy.iter().enumerate() {
        if g > 1 {
            return Err(RejectionError::Value {
                what: "is_greedy",
                at,
            });
        }
    }
    Ok(())
}

/// Rule `RS-TIE`: the lowest index of the maximum of `s` (`s` not empty,
/// no NaN).
pub fn argmax_lowest(s: &[f32]) -> usize {
    let mut best = 0;
    for (i, &y) in s.iter().enumerate() {
        if y > s[best] {
            best = i;
        }
    }
    best
}

/// Rule `RS-ACCEPT` for one position: target probability `p` of the draft
/// token, its draft probability `q` (`None`: rule `RS-NGRAM`), uniform
/// `u`.
pub fn accepts(a: Accept, p: f32, q: Option<f32>, u: f32) -> bool {
    let q = q.unwrap_or(1.0);
    match a {
        Accept::DivideGe => q > 0.0 && p / q >= u,
        Accept::MultiplyLt => u * q < p,
    }
}

/// Rule `RS-RECOVER` for one position: `p` and `q` (`None`: rule
/// `RS-NGRAM`, `x` the draft token) the position's rows (`V` long),
/// `noise` the request's.
pub fn recover(race: Race, p: &[f32], q: Option<&[f32]>, x: usize, noise: &[f32]) -> usize {
    let mut best = 0;
    let mut best_s = f32::NEG_INFINITY;
    for v in 0..p.len() {
        // Step 1: the residual, clamped at +0 (`tl.maximum(p - q, 0.0)`).
        let r = match q {
            Some(q) => {
                let d = p[v] - q[v];
                if d > 0.0 {
                    d
                } else {
                    0.0
                }
            }
            None => {
                if v == x {
                    0.0
                } else {
                    p[v]
                }
            }
        };
        // Step 2: the score.
        let s = match race {
            Race::Divide => r / noise[v],
            Race::Reciprocal => r * (1.0 / noise[v]),
        };
        // Step 3: strictly greater replaces (rule `RS-TIE`).
        if s > best_s {
            best_s = s;
            best = v;
        }
    }
    best
}

/// The rejection sampler, rules `RS-GREEDY` to `RS-TIE`: writes `out
/// [B][k + 1]`.
///
/// # Errors
/// [`validate`]'s.
pub fn rejection_sample(
    b: usize,
    k: usize,
    v: usize,
    d: &Declared,
    x: &Inputs<'_>,
    out: &mut [i32],
) -> Result<(), RejectionError> {
    validate(b, k, v, x, out.len())?;
    for r in 0..b {
        let row = &mut out[r * (k + 1)..(r + 1) * (k + 1)];
        for o in row.iter_mut() {
            *o = PLACEHOLDER;
        }
        let noise = &x.noise[r * v..(r + 1) * v];
        let mut rejected = false;
        for (i, slot) in row[..k].iter_mut().enumerate() {
            let xi = x.draft_token_ids[r * k + i] as usize;
            let t0 = (r * (k + 1) + i) * v;
            let p = &x.target_probs[t0..t0 + v];
            let q0 = (r * k + i) * v;
            let q = x.draft_probs.map(|q| &q[q0..q0 + v]);
            if x.is_greedy[r] == 1 {
                // Rule RS-GREEDY.
                let t = argmax_lowest(p);
                *slot = t as i32;
                if t != xi {
                    rejected = true;
                    break;
                }
            } else if accepts(d.accept, p[xi], q.map(|q| q[xi]), x.uniform[r * k + i]) {
                *slot = xi as i32;
            } else {
                *slot = recover(d.race, p, q, xi, noise) as i32;
                rejected = true;
                break;
            }
        }
        if !rejected {
            row[k] = x.bonus_token_ids[r];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(d: &Declared, x: &Inputs<'_>, b: usize, k: usize, v: usize) -> [i32; 8] {
        let mut out = [0i32; 8];
        rejection_sample(b, k, v, d, x, &mut out[..b * (k + 1)]).unwrap();
        out
    }

    /// `p / q = u` exactly: `>=` accepts, FlashInfer's `u q < p` rejects.
    #[test]
    fn divide_ge_accepts_the_tie_multiply_lt_rejects_it() {
        // p = 0.125 = 0.5 * 0.25: the quotient and the product exact.
        let q = [0.25f32, 0.75];
        let p = [0.125f32, 0.875, 0.0, 0.0];
        let x = Inputs {
            draft_token_ids: &[0],
            draft_probs: Some(&q),
            target_probs: &p,
            bonus_token_ids: &[1],
            uniform: &[0.5],
            noise: &[1.0, 1.0],
            is_greedy: &[0],
        };
        assert_eq!(run(&Declared::VLLM, &x, 1, 1, 2)[..2], [0, 1]);
        let fi = Declared {
            accept: Accept::MultiplyLt,
            ..Declared::VLLM
        };
        // Rejected: the residual max(p - q, 0) is (0, 0.125): token 1, no bonus.
        assert_eq!(run(&fi, &x, 1, 1, 2)[..2], [1, PLACEHOLDER]);
    }

    /// A draft probability of 0 at the draft token: vLLM rejects,
    /// FlashInfer accepts when `p > 0`.
    #[test]
    fn zero_draft_prob_rejects_under_divide_ge_only() {
        assert!(!accepts(Accept::DivideGe, 0.5, Some(0.0), 0.25));
        assert!(accepts(Accept::MultiplyLt, 0.5, Some(0.0), 0.25));
        assert!(!accepts(Accept::MultiplyLt, 0.0, Some(0.0), 0.0));
        // u = 0 = p < q: `0 >= 0` accepts, `0 < 0` does not.
        assert!(accepts(Accept::DivideGe, 0.0, Some(0.5), 0.0));
        assert!(!accepts(Accept::MultiplyLt, 0.0, Some(0.5), 0.0));
    }

    /// Equal scores: the lowest index wins; a residual of zeros gives 0.
    #[test]
    fn recover_ties_go_to_the_lowest_index() {
        // r = (0, 0.25, 0.5), e = (1, 1, 2): scores 0, 0.25, 0.25.
        let p = [0.0f32, 0.5, 0.75];
        let q = [0.5f32, 0.25, 0.25];
        for race in Race::ALL {
            assert_eq!(recover(race, &p, Some(&q), 0, &[1.0, 1.0, 2.0]), 1);
            assert_eq!(recover(race, &q, Some(&q), 0, &[1.0, 1.0, 2.0]), 0);
        }
        assert_eq!(argmax_lowest(&[1.0, 3.0, 3.0]), 1);
    }

    /// N-gram drafts: the draft token is masked out of the race, `q = 1`.
    #[test]
    fn ngram_masks_the_draft_token_and_reads_q_as_one() {
        assert!(accepts(Accept::DivideGe, 0.25, None, 0.25));
        assert!(!accepts(Accept::MultiplyLt, 0.25, None, 0.25));
        assert_eq!(recover(Race::Divide, &[0.9, 0.1], None, 0, &[1.0, 1.0]), 1);
    }

    /// After the first rejection every position is -1, the bonus only
    /// when all are accepted; greedy emits the target's argmax.
    #[test]
    fn stop_after_first_rejection_and_bonus_only_when_all_accepted() {
        let p = [0.25f32, 0.75, 0.9, 0.1, 0.2, 0.8];
        let q = [0.5f32, 0.5, 0.5, 0.5];
        let mut x = Inputs {
            draft_token_ids: &[0, 0],
            draft_probs: Some(&q),
            target_probs: &p,
            bonus_token_ids: &[1],
            uniform: &[0.5, 0.5],
            noise: &[1.0, 1.0],
            is_greedy: &[0],
        };
        assert_eq!(run(&Declared::VLLM, &x, 1, 2, 2)[..3], [0, 0, 1]);
        x.uniform = &[0.99, 0.0];
        assert_eq!(run(&Declared::VLLM, &x, 1, 2, 2)[..3], [1, -1, -1]);
        x.is_greedy = &[1];
        // The argmax of row 0 is 1: the draft 0 is rejected, 1 emitted.
        assert_eq!(run(&Declared::VLLM, &x, 1, 2, 2)[..3], [1, -1, -1]);
        x.draft_token_ids = &[1, 0];
        assert_eq!(run(&Declared::VLLM, &x, 1, 2, 2)[..3], [1, 0, 1]);
    }

    #[test]
    fn refuses_bad_ids_and_values() {
        let x = Inputs {
            draft_token_ids: &[2],
            draft_probs: None,
            target_probs: &[0.5; 4],
            bonus_token_ids: &[0],
            uniform: &[0.5],
            noise: &[1.0, 1.0],
            is_greedy: &[0],
        };
        let mut out = [0; 2];
        assert_eq!(
            rejection_sample(1, 1, 2, &Declared::VLLM, &x, &mut out),
            Err(RejectionError::Token {
                what: "draft_token_ids",
                at: 0
            })
        );
        let x = Inputs {
            draft_token_ids: &[1],
            uniform: &[1.0],
            ..x
        };
        assert_eq!(
            rejection_sample(1, 1, 2, &Declared::VLLM, &x, &mut out),
            Err(RejectionError::Value {
                what: "uniform",
                at: 0
            })
        );
    }
}
