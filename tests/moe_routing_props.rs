//! bolero property over the MoE routing enclosures (CPU): every binary32
//! router within the contract's bound (std's `expf`, or `exp2f` of a
//! scaled argument; forward, reverse, pairwise or ascending sums) chooses
//! ids the judge admits and weights inside their enclosures, on logits
//! drawn from the input's bytes. A correct kernel failing the check would
//! be the check's bug; this hunts for it.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::moe_routing::choose;
use kernel_oracle::rng::Rng;
use oracle::moe_routing::{
    judge_selection, score_enclosures, weight_enclosure, Enclosure, GroupScore, Grouping, Routing,
    Scoring,
};
use std::sync::Mutex;

/// One generated router case; every path choice is in the first four
/// bytes: scoring, groups and their score, bias, the kernel's `exp` and
/// sum, the expert count, `k` and the logits' spread.
#[derive(Clone, Debug)]
struct Spec {
    routing: Routing,
    bias: bool,
    exp2: bool,
    sum: u8,
    experts: usize,
    spread: f32,
    seed: u64,
}

const EXPERTS: [usize; 6] = [8, 16, 60, 64, 160, 256];
const SPREADS: [f32; 4] = [0.5, 2.0, 12.0, 40.0];

impl<'a> Arbitrary<'a> for Spec {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 4] = u.arbitrary()?;
        let experts = EXPERTS[usize::from(h[1]) % EXPERTS.len()];
        let grouping = (h[0] & 2 != 0 && experts.is_multiple_of(8)).then_some(Grouping {
            n_group: 8,
            topk_group: 1 + usize::from(h[2] >> 5) % 8,
            score: if h[0] & 4 != 0 && experts >= 16 {
                GroupScore::Top2Sum
            } else {
                GroupScore::Max
            },
        });
        let candidates = grouping.map_or(experts, |g| experts / 8 * g.topk_group);
        let top_k = 1 + usize::from(h[2] & 7) % candidates.min(8);
        Ok(Spec {
            routing: Routing {
                scoring: if h[0] & 1 != 0 {
                    Scoring::Sigmoid
                } else {
                    Scoring::Softmax
                },
                top_k,
                grouping,
                renormalize: h[0] & 8 != 0,
                routed_scaling_factor: if h[0] & 16 != 0 { 2.5 } else { 1.0 },
                exp_ulps: 2,
            },
            bias: h[0] & 32 != 0,
            exp2: h[0] & 64 != 0,
            sum: h[3] % 4,
            experts,
            spread: SPREADS[usize::from(h[3] >> 2) % SPREADS.len()],
            seed: u.arbitrary()?,
        })
    }
}

/// The router in binary32, as a kernel writes it: its own `exp` and sum,
/// then the case library's choice ([`choose`]).
fn route(spec: &Spec, logits: &[f32], bias: &[f32]) -> (Vec<i64>, Vec<f32>) {
    let exp = |x: f32| {
        if spec.exp2 {
            (x * std::f32::consts::LOG2_E).exp2()
        } else {
            x.exp()
        }
    };
    let p: Vec<f32> = match spec.routing.scoring {
        Scoring::Sigmoid => logits.iter().map(|&l| 1.0 / (1.0 + exp(-l))).collect(),
        Scoring::Softmax => {
            let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let ex: Vec<f32> = logits.iter().map(|&l| exp(l - m)).collect();
            let total: f32 = match spec.sum {
                0 => ex.iter().sum(),
                1 => ex.iter().rev().sum(),
                2 => {
                    let mut v = ex.clone();
                    while v.len() > 1 {
                        v = v.chunks(2).map(|c| c.iter().sum()).collect();
                    }
                    v[0]
                }
                _ => {
                    let mut v = ex.clone();
                    v.sort_by(f32::total_cmp);
                    v.iter().sum()
                }
            };
            ex.iter().map(|&x| x / total).collect()
        }
    };
    let k = spec.routing.top_k;
    let (mut ids, mut w) = (vec![0i64; k], vec![0f32; k]);
    choose(&spec.routing, &p, Some(bias), &mut ids, &mut w);
    (ids, w)
}

static SEEN: Mutex<Vec<Spec>> = Mutex::new(Vec::new());

#[test]
fn binary32_routers_pass_their_own_check() {
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<Spec>()
        .with_iterations(20000)
        .for_each(|spec| {
            let e = spec.experts;
            let mut rng = Rng(spec.seed);
            let logits: Vec<f32> = (0..e).map(|_| spec.spread * rng.normal()).collect();
            let bias: Vec<f32> = (0..e)
                .map(|_| {
                    if spec.bias {
                        0.2 * rng.f01() - 0.1 - 1.0
                    } else {
                        0.0
                    }
                })
                .collect();
            oracle::moe_routing::validate(&spec.routing, e).unwrap();
            let (ids, w) = route(spec, &logits, &bias);
            let mut p = vec![Enclosure::default(); e];
            let mut s = p.clone();
            let b = spec.bias.then_some(&bias[..]);
            score_enclosures(&logits, b, &spec.routing, &mut p, &mut s).unwrap();
            assert_eq!(
                judge_selection(&ids, &s, &spec.routing, true),
                Ok(()),
                "{spec:?}: ids {ids:?}"
            );
            for (slot, &ws) in w.iter().enumerate() {
                let enc = weight_enclosure(&ids, slot, &p, &spec.routing);
                assert!(
                    enc.contains(f64::from(ws)),
                    "{spec:?}: slot {slot} weight {ws} not in {enc:?}"
                );
            }
            SEEN.lock().unwrap().push(spec.clone());
        });
    // Each path was reached at about its designed rate (a half for each
    // flag bit; groups wherever the expert count allows: 5 of 6 counts).
    let seen = SEEN.lock().unwrap();
    let n = seen.len();
    assert!(n >= 1000, "{n} cases");
    let rate = |f: &dyn Fn(&Spec) -> bool| seen.iter().filter(|s| f(s)).count() as f64 / n as f64;
    for (what, r, lo) in [
        (
            "sigmoid",
            rate(&|s| s.routing.scoring == Scoring::Sigmoid),
            0.4,
        ),
        ("groups", rate(&|s| s.routing.grouping.is_some()), 0.3),
        (
            "top-2 sums",
            rate(&|s| {
                s.routing
                    .grouping
                    .is_some_and(|g| g.score == GroupScore::Top2Sum)
            }),
            0.15,
        ),
        ("bias", rate(&|s| s.bias), 0.4),
        ("exp2", rate(&|s| s.exp2), 0.4),
        ("renormalize", rate(&|s| s.routing.renormalize), 0.4),
        ("ascending sums", rate(&|s| s.sum == 3), 0.2),
        ("spread 40", rate(&|s| s.spread == 40.0), 0.2),
    ] {
        assert!(r >= lo, "{what}: {r:.3} of {n}");
    }
}
