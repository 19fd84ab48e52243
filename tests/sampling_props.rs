//! bolero property over the sampling filters' enclosures (CPU): every
//! binary32 filter within the contract's bound (std's `expf`, or `exp2f`
//! of a scaled argument; the temperature by a division or a reciprocal
//! product; top-p by vLLM's ascending cumsum `<= 1 - p`, a descending
//! cumsum of the mass before each token `< p`, or a pivot search that
//! keeps every token at or above the first descending sum to reach `p`)
//! keeps a set the judge admits under its declaration, on logits drawn
//! from the input's bytes. A correct kernel failing would be the check's
//! bug; this hunts for it. Then the wrong forms (`<` for `<=`, the
//! descending cumsum without its shift, top-k ties dropped) are shown
//! rejected on the case library's arms.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::rng::Rng;
use kernel_oracle::sampling::{Arm, Spec};
use oracle::dtype::Dtype;
use oracle::sampling::{classify, judge_kept, Declared, Filters, Order, Token, TopKTies, TopPTies};
use std::sync::Mutex;

/// How a binary32 kernel computes top-p.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TopP {
    /// vLLM: ascending cumsum masked where `<= 1 - p`, the last kept.
    Ascending,
    /// The mass before each token in descending order `< p`.
    Descending,
    /// FlashInfer-like: the first descending cumsum `>= p` is the pivot;
    /// every token at or above its probability kept.
    Pivot,
}

/// A planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bug {
    None,
    /// `cumsum < 1 - p` for `<=`.
    Lt,
    /// The descending cumsum including the token itself `< p`.
    NoShift,
    /// Exactly `k` where all ties are declared kept.
    TiesDropped,
}

#[derive(Clone, Debug)]
struct Case {
    order: Order,
    exact_k: bool,
    topp: TopP,
    exp2: bool,
    reciprocal: bool,
    vocab: usize,
    spread: f32,
    levels: u8,
    filters: Filters,
    seed: u64,
}

const VOCABS: [usize; 6] = [2, 7, 33, 129, 1000, 4096];

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 6] = u.arbitrary()?;
        let vocab = VOCABS[usize::from(h[1]) % VOCABS.len()];
        Ok(Case {
            order: [Order::MinPFirst, Order::MinPLast, Order::Joint][usize::from(h[0]) % 3],
            exact_k: h[0] & 8 != 0,
            topp: [TopP::Ascending, TopP::Descending, TopP::Pivot][usize::from(h[0] >> 4) % 3],
            exp2: h[0] & 64 != 0,
            reciprocal: h[0] & 128 != 0,
            vocab,
            spread: [0.5f32, 2.0, 6.0, 20.0][usize::from(h[2]) % 4],
            // 0: continuous logits; else that many distinct values (ties).
            levels: [0u8, 0, 3, 8][usize::from(h[2] >> 2) % 4],
            filters: Filters {
                temperature: [1.0f32, 0.7, 1.5, 0.25][usize::from(h[3]) % 4],
                top_k: [0u32, 1, 3, 20, 5000][usize::from(h[3] >> 2) % 5],
                top_p: [1.0f32, 0.9, 0.5, 0.1, 1e-4, 0.999][usize::from(h[4]) % 6],
                min_p: [0.0f32, 0.0, 0.05, 0.3][usize::from(h[5]) % 4],
            },
            seed: u.arbitrary()?,
        })
    }
}

fn declared(c: &Case) -> Declared {
    Declared {
        order: c.order,
        topk_ties: if c.exact_k {
            TopKTies::Exact
        } else {
            TopKTies::KeepAll
        },
        topp_ties: if c.topp == TopP::Pivot {
            TopPTies::KeepAll
        } else {
            TopPTies::Order
        },
        exp_ulps: 2,
    }
}

/// The kernel's kept set in binary32.
fn kernel(c: &Case, logits: &[f32], f: &Filters, bug: Bug) -> Vec<bool> {
    let v = logits.len();
    let exp = |x: f32| {
        if c.exp2 {
            (x * std::f32::consts::LOG2_E).exp2()
        } else {
            x.exp()
        }
    };
    let inv = 1.0 / f.temperature;
    let x: Vec<f32> = logits
        .iter()
        .map(|&l| {
            if c.reciprocal {
                l * inv
            } else {
                l / f.temperature
            }
        })
        .collect();
    let m = x.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f32> = x.iter().map(|&s| exp(s - m)).collect();
    let z: f32 = e.iter().sum();
    let p: Vec<f32> = e.iter().map(|&t| t / z).collect();
    let pmax = p.iter().fold(0.0f32, |a, &b| a.max(b));
    let minp: Vec<bool> = (0..v)
        .map(|i| x[i].is_finite() && p[i] >= f.min_p * pmax)
        .collect();
    let mut desc: Vec<usize> = (0..v).collect();
    desc.sort_by(|&a, &b| x[b].total_cmp(&x[a]).then(a.cmp(&b)));
    let finite = x.iter().filter(|s| s.is_finite()).count();
    let k = f.top_k as usize;
    let mut topk = vec![false; v];
    for (pos, &i) in desc.iter().enumerate() {
        topk[i] = x[i].is_finite()
            && (k == 0
                || k >= finite
                || if c.exact_k || bug == Bug::TiesDropped {
                    pos < k
                } else {
                    x[i] >= x[desc[k - 1]]
                });
    }
    let cand: Vec<bool> = (0..v)
        .map(|i| match c.order {
            Order::MinPFirst => topk[i] && minp[i],
            Order::MinPLast => topk[i],
            Order::Joint => x[i].is_finite(),
        })
        .collect();
    let live: Vec<usize> = desc.iter().copied().filter(|&i| cand[i]).collect();
    let zc: f32 = live.iter().rev().map(|&i| e[i]).sum();
    let pc: Vec<f32> = live.iter().map(|&i| e[i] / zc).collect();
    let mut topp = vec![false; v];
    match c.topp {
        TopP::Ascending => {
            let thr = 1.0 - f.top_p;
            let mut cum = 0.0f32;
            for (j, &i) in live.iter().enumerate().rev() {
                cum += pc[j];
                let masked = if bug == Bug::Lt {
                    cum < thr
                } else {
                    cum <= thr
                };
                topp[i] = !masked || j == 0;
            }
        }
        TopP::Descending => {
            let mut cum = 0.0f32;
            for (j, &i) in live.iter().enumerate() {
                let before = cum;
                cum += pc[j];
                let c = if bug == Bug::NoShift { cum } else { before };
                topp[i] = c < f.top_p || j == 0;
            }
        }
        TopP::Pivot => {
            let mut cum = 0.0f32;
            let mut pivot = pc.last().copied().unwrap_or(0.0);
            for &q in &pc {
                cum += q;
                if cum >= f.top_p {
                    pivot = q;
                    break;
                }
            }
            for (j, &i) in live.iter().enumerate() {
                topp[i] = pc[j] >= pivot;
            }
        }
    }
    (0..v).map(|i| minp[i] && topk[i] && topp[i]).collect()
}

fn logits_of(c: &Case) -> Vec<f32> {
    let mut rng = Rng(c.seed);
    let mut l: Vec<f32> = (0..c.vocab)
        .map(|_| {
            if c.levels == 0 {
                c.spread * rng.normal()
            } else {
                c.spread * (rng.below(usize::from(c.levels)) as f32) / f32::from(c.levels)
            }
        })
        .collect();
    // One token in sixteen masked, never all.
    let keep = rng.below(c.vocab);
    for (i, x) in l.iter_mut().enumerate() {
        if i != keep && rng.below(16) == 0 {
            *x = f32::NEG_INFINITY;
        }
    }
    l
}

fn judged(logits: &[f32], f: &Filters, d: &Declared, kept: &[bool]) -> bool {
    let mut s = vec![Token::default(); logits.len()];
    let row = classify(logits, f, d, &mut s).unwrap();
    judge_kept(&s, &row, d, kept).is_ok()
}

static SEEN: Mutex<Vec<Case>> = Mutex::new(Vec::new());

#[test]
fn binary32_filters_pass_their_own_check() {
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<Case>()
        .with_iterations(20000)
        .for_each(|c| {
            let logits = logits_of(c);
            let d = declared(c);
            let kept = kernel(c, &logits, &c.filters, Bug::None);
            let mut s = vec![Token::default(); logits.len()];
            let row = classify(&logits, &c.filters, &d, &mut s).unwrap();
            assert_eq!(
                judge_kept(&s, &row, &d, &kept),
                Ok(()),
                "{c:?}: kept {:?}",
                kept.iter().filter(|&&b| b).count()
            );
            SEEN.lock().unwrap().push(c.clone());
        });
    let seen = SEEN.lock().unwrap();
    let n = seen.len();
    assert!(n >= 1000, "{n} cases");
    let rate = |f: &dyn Fn(&Case) -> bool| seen.iter().filter(|c| f(c)).count() as f64 / n as f64;
    for (what, r, lo) in [
        ("ascending", rate(&|c| c.topp == TopP::Ascending), 0.25),
        ("pivot", rate(&|c| c.topp == TopP::Pivot), 0.25),
        ("joint", rate(&|c| c.order == Order::Joint), 0.25),
        ("exact k", rate(&|c| c.exact_k), 0.4),
        ("ties", rate(&|c| c.levels > 0), 0.4),
        ("temperature", rate(&|c| c.filters.temperature != 1.0), 0.6),
        ("top-k on", rate(&|c| c.filters.top_k > 0), 0.6),
    ] {
        assert!(r >= lo, "{what}: {r:.3} of {n}");
    }
}

/// The wrong forms are rejected on the case library's arms (FLAT's exact
/// sums judge `<` and the missing shift; TIES the dropped ties), and never
/// on all of them by chance alone: each bug fails at least one row.
#[test]
fn wrong_filters_are_rejected() {
    let vllm = Declared {
        order: Order::MinPFirst,
        topk_ties: TopKTies::KeepAll,
        topp_ties: TopPTies::Order,
        exp_ulps: 2,
    };
    for (bug, topp, arm) in [
        (Bug::Lt, TopP::Ascending, Arm::Flat),
        (Bug::NoShift, TopP::Descending, Arm::Flat),
        (Bug::NoShift, TopP::Descending, Arm::Rand),
        (Bug::TiesDropped, TopP::Ascending, Arm::Ties),
    ] {
        let mut rejected = 0;
        let mut rows = 0;
        for dims in [(4, 7), (9, 129), (16, 1000)] {
            let sp = Spec {
                dims,
                declared: vllm,
                dtype: Dtype::F32,
                arm,
                seed: Spec::base_seed(dims, Dtype::F32, arm),
            };
            let case = sp.generate().unwrap();
            let c = Case {
                order: Order::MinPFirst,
                exact_k: false,
                topp,
                exp2: false,
                reciprocal: false,
                vocab: dims.1,
                spread: 1.0,
                levels: 0,
                filters: Filters::OFF,
                seed: 0,
            };
            for r in 0..dims.0 {
                let row = &case.logits[r * dims.1..(r + 1) * dims.1];
                let f = case.filters[r];
                rows += 1;
                // The correct form passes every row.
                let good = kernel(&c, row, &f, Bug::None);
                assert!(judged(row, &f, &vllm, &good), "{bug:?} {arm:?} row {r}");
                if !judged(row, &f, &vllm, &kernel(&c, row, &f, bug)) {
                    rejected += 1;
                }
            }
        }
        assert!(
            rejected > 0,
            "{bug:?} on {arm:?}: 0 of {rows} rows rejected"
        );
    }
}
