//! bolero property over the attention enclosures (CPU): every binary32
//! attention written the field's ways (two-pass; an online softmax over
//! key blocks of 1, 16 or 64 with the accumulator and row sum rescaled;
//! a split-KV pass merged by the log-sum-exp, Flash-Decoding's, divided by
//! the merged weights' sum or, as FlashAttention's
//! `combine_attn_seqk_parallel`, weighted by `exp(lse_s - lse_logsum)`
//! without a division; `exp`, or `exp2` of an FMA with `log2(e)` folded
//! in, FlashAttention's; `P` rounded to the dtype before the `PV` product
//! under `flash`, kept under `f32`; the eager form with scores and `P`
//! rounded, the scores either Hugging Face's (`matmul(q, k^T) * scale`)
//! or torch's math backend's without the upcast (`q` and `k` times
//! `sqrt(scale)` in the dtype before the matmul)) lands inside the
//! case library's intervals under its declared arithmetic, on data drawn
//! from the input's bytes through each arm, mask and softcap. A correct
//! kernel failing would be the check's bug; this hunts for it. A second
//! test shows wrong kernels rejected.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::attention::{bits, reference, Arm, Spec, Verdict};
use oracle::attention::{default_scale, Arithmetic, Causal, Declared, Dtype, Mask, Shape, Window};
use std::sync::Mutex;

/// How the kernel evaluates the softmax.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    TwoPass,
    Online(usize),
    Split(usize),
    /// FlashAttention's split-KV combine: no division by the weights' sum.
    Combine(usize),
}

const FORMS: [Form; 8] = [
    Form::TwoPass,
    Form::Online(1),
    Form::Online(16),
    Form::Online(64),
    Form::Split(3),
    Form::Split(8),
    Form::Combine(2),
    Form::Combine(5),
];

/// `[B, Hq, Hkv, Sq, Sk, D, Dv]`.
const DIMS: [[usize; 7]; 5] = [
    [1, 2, 1, 1, 17, 16, 16],
    [1, 4, 2, 5, 9, 32, 8],
    [1, 2, 2, 7, 70, 64, 32],
    [2, 2, 1, 3, 130, 8, 8],
    [1, 2, 1, 1, 300, 24, 4],
];

#[derive(Clone, Debug)]
struct Case {
    arithmetic: Arithmetic,
    dtype: Dtype,
    arm: Arm,
    mask: Mask,
    softcap: Option<f32>,
    form: Form,
    exp2: bool,
    /// Eager only: `q` and `k` pre-scaled by `sqrt(scale)` in the dtype
    /// (torch's math backend without the float upcast).
    prescale: bool,
    dims: [usize; 7],
    seed: u64,
}

const MASKS: [Mask; 5] = [
    Mask {
        causal: None,
        window: None,
    },
    Mask {
        causal: Some(Causal::TopLeft),
        window: None,
    },
    Mask {
        causal: Some(Causal::BottomRight),
        window: None,
    },
    Mask {
        causal: Some(Causal::BottomRight),
        window: Some(Window {
            left: Some(4),
            right: None,
        }),
    },
    Mask {
        causal: None,
        window: Some(Window {
            left: Some(6),
            right: Some(2),
        }),
    },
];

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 4] = u.arbitrary()?;
        Ok(Case {
            arithmetic: Arithmetic::ALL[usize::from(h[0] & 3) % 3],
            dtype: Dtype::ALL[usize::from(h[0] >> 2 & 3) % 3],
            arm: Arm::ALL[usize::from(h[3]) % Arm::ALL.len()],
            mask: MASKS[usize::from(h[1] & 7) % MASKS.len()],
            softcap: if h[0] & 0x40 != 0 { Some(30.0) } else { None },
            form: FORMS[usize::from(h[1] >> 3) % FORMS.len()],
            exp2: h[0] & 0x80 != 0,
            prescale: h[2] & 0x80 != 0,
            dims: DIMS[usize::from(h[2] & 0x7F) % DIMS.len()],
            seed: u.arbitrary()?,
        })
    }
}

impl Case {
    fn r(&self, x: f32) -> f32 {
        self.dtype.round(x)
    }

    /// `e^x` as the kernel evaluates it at `s - m`.
    fn e(&self, s: f32, m: f32) -> f32 {
        if self.exp2 {
            let l = std::f32::consts::LOG2_E;
            s.mul_add(l, -(m * l)).exp2()
        } else {
            (s - m).exp()
        }
    }

    /// The kernel's visible scores of one row.
    fn scores(&self, q: &[f32], k: &[f32], js: &[usize], scale: f32) -> Vec<f32> {
        let d = q.len();
        js.iter()
            .map(|&j| {
                let eager = self.arithmetic == Arithmetic::Eager;
                let pre = eager && self.prescale;
                // torch's math backend: sqrt(scale) as a binary32 scalar.
                let c = (f64::from(scale)).sqrt() as f32;
                let mut dot = 0f32;
                for t in 0..d {
                    dot += if pre {
                        self.r(q[t] * c) * self.r(k[j * d + t] * c)
                    } else {
                        q[t] * k[j * d + t]
                    };
                }
                let mut s = if pre {
                    self.r(dot)
                } else if eager {
                    self.r(self.r(dot) * scale)
                } else {
                    dot * scale
                };
                if let Some(cap) = self.softcap {
                    s = if eager {
                        self.r(self.r(self.r(s / cap).tanh()) * cap)
                    } else {
                        (s / cap).tanh() * cap
                    };
                }
                s
            })
            .collect()
    }

    /// (m, l, acc) of a two-pass or online pass over `js`.
    fn pass(
        &self,
        s: &[f32],
        v: &[f32],
        js: &[usize],
        dv: usize,
        block: usize,
    ) -> (f32, f32, Vec<f32>) {
        let flash = self.arithmetic == Arithmetic::Flash;
        let (mut m, mut l, mut acc) = (f32::NEG_INFINITY, 0f32, vec![0f32; dv]);
        for b0 in (0..js.len()).step_by(block) {
            let b1 = (b0 + block).min(js.len());
            let mn = s[b0..b1].iter().fold(m, |a, &x| a.max(x));
            let alpha = if m == f32::NEG_INFINITY {
                0.0
            } else {
                self.e(m, mn)
            };
            let mut rs = 0f32;
            for e in acc.iter_mut() {
                *e *= alpha;
            }
            for x in b0..b1 {
                let p = self.e(s[x], mn);
                rs += p;
                let p = if flash { self.r(p) } else { p };
                for (e, a) in acc.iter_mut().enumerate() {
                    *a += p * v[js[x] * dv + e];
                }
            }
            l = l * alpha + rs;
            m = mn;
        }
        (m, l, acc)
    }

    /// One output row in binary32, rounded to the dtype.
    fn row(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        js: &[usize],
        dv: usize,
        scale: f32,
    ) -> Vec<f32> {
        let s = self.scores(q, k, js, scale);
        let n = js.len();
        let o: Vec<f32> = if self.arithmetic == Arithmetic::Eager {
            let m = s.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
            let p: Vec<f32> = s.iter().map(|&x| (x - m).exp()).collect();
            let l: f32 = p.iter().sum();
            let p: Vec<f32> = p.iter().map(|&x| self.r(x / l)).collect();
            (0..dv)
                .map(|e| (0..n).map(|x| p[x] * v[js[x] * dv + e]).sum())
                .collect()
        } else {
            match self.form {
                Form::TwoPass => {
                    let (_, l, acc) = self.pass(&s, v, js, dv, n);
                    acc.iter().map(|a| a / l).collect()
                }
                Form::Online(b) => {
                    let (_, l, acc) = self.pass(&s, v, js, dv, b);
                    let inv = 1.0 / l;
                    acc.iter().map(|a| a * inv).collect()
                }
                Form::Split(parts) => {
                    let chunk = n.div_ceil(parts);
                    let mut lse = Vec::new();
                    let mut outs = Vec::new();
                    for c0 in (0..n).step_by(chunk) {
                        let c1 = (c0 + chunk).min(n);
                        let (m, l, acc) = self.pass(&s[c0..c1], v, &js[c0..c1], dv, 16);
                        lse.push(m + l.ln());
                        outs.push(acc.iter().map(|a| a / l).collect::<Vec<f32>>());
                    }
                    let lm = lse.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                    let w: Vec<f32> = lse.iter().map(|&x| (x - lm).exp()).collect();
                    let ws: f32 = w.iter().sum();
                    (0..dv)
                        .map(|e| {
                            let a: f32 = w.iter().zip(&outs).map(|(w, o)| w * o[e]).sum();
                            a / ws
                        })
                        .collect()
                }
                Form::Combine(parts) => {
                    // flash_fwd_kernel.h's split-KV pass and
                    // combine_attn_seqk_parallel: o_s normalised, lse_s =
                    // m_s + log(l_s), o = sum exp(lse_s - lse_logsum) o_s.
                    let chunk = n.div_ceil(parts);
                    let mut lse = Vec::new();
                    let mut outs = Vec::new();
                    for c0 in (0..n).step_by(chunk) {
                        let c1 = (c0 + chunk).min(n);
                        let (m, l, acc) = self.pass(&s[c0..c1], v, &js[c0..c1], dv, 64);
                        lse.push(m + l.ln());
                        let inv = 1.0 / l;
                        outs.push(acc.iter().map(|a| a * inv).collect::<Vec<f32>>());
                    }
                    let lm = lse.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                    let ls: f32 = lse.iter().map(|&x| (x - lm).exp()).sum();
                    let logsum = ls.ln() + lm;
                    let w: Vec<f32> = lse.iter().map(|&x| (x - logsum).exp()).collect();
                    (0..dv)
                        .map(|e| w.iter().zip(&outs).map(|(w, o)| w * o[e]).sum())
                        .collect()
                }
            }
        };
        o.iter().map(|&x| self.r(x)).collect()
    }

    /// The whole output, with `bug` applied (`None`: correct).
    fn run(
        &self,
        shape: &Shape,
        x: &kernel_oracle::attention::Case,
        scale: f32,
        bug: Option<&str>,
    ) -> Vec<f32> {
        let [b, hq, hkv, sq, sk, d, dv] = shape.dims();
        let mut out = vec![0f32; shape.out_elems()];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + shape.kv_head(h);
                let k = &x.k[kh * sk * d..(kh + 1) * sk * d];
                let v = &x.v[kh * sk * dv..(kh + 1) * sk * dv];
                for i in 0..sq {
                    let r = (bi * hq + h) * sq + i;
                    let (first, mut end) = self.mask.range(i, sq, sk);
                    if bug == Some("last-key-dropped") && end == sk && end - first > 1 {
                        end -= 1;
                    }
                    let js: Vec<usize> = (first..end).collect();
                    let q = &x.q[r * d..(r + 1) * d];
                    let o = self.row(q, k, v, &js, dv, scale);
                    out[r * dv..(r + 1) * dv].copy_from_slice(&o);
                }
            }
        }
        out
    }
}

static SEEN: Mutex<Vec<Case>> = Mutex::new(Vec::new());

#[test]
fn binary32_attention_forms_pass_their_own_check() {
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<Case>()
        .with_iterations(20000)
        .for_each(|c| {
            let scale = default_scale(c.dims[5]);
            let spec = Spec {
                dims: c.dims,
                dtype: c.dtype,
                mask: c.mask,
                scale,
                arm: c.arm,
                seed: c.seed,
            };
            let shape = spec.shape().unwrap();
            let x = spec.generate().unwrap();
            let d = Declared::new(c.arithmetic, c.dtype, scale, c.softcap, c.mask).unwrap();
            let want = reference(&shape, &x, &d).unwrap();
            let got = c.run(&shape, &x, scale, None);
            let v = Verdict::judge(c.dtype, &want, &bits(c.dtype, &got));
            if let Some(i) = v.first {
                panic!(
                    "{c:?}: element {i}: got {:e}, want [{:e}, {:e}] ({v:?})",
                    got[i], want.lo[i], want.hi[i]
                );
            }
            SEEN.lock().unwrap().push(c.clone());
        });
    let seen = SEEN.lock().unwrap();
    let n = seen.len();
    assert!(n >= 2000, "{n} cases");
    let rate = |f: &dyn Fn(&Case) -> bool| seen.iter().filter(|s| f(s)).count() as f64 / n as f64;
    for (what, r, lo) in [
        ("flash", rate(&|c| c.arithmetic == Arithmetic::Flash), 0.2),
        ("eager", rate(&|c| c.arithmetic == Arithmetic::Eager), 0.2),
        ("f16", rate(&|c| c.dtype == Dtype::F16), 0.15),
        ("PEAK", rate(&|c| c.arm == Arm::Peak), 0.15),
        ("SPIKE", rate(&|c| c.arm == Arm::Spike), 0.15),
        ("SCALE", rate(&|c| c.arm == Arm::Scale), 0.15),
        ("online 1", rate(&|c| c.form == Form::Online(1)), 0.08),
        ("split", rate(&|c| matches!(c.form, Form::Split(_))), 0.15),
        (
            "combine",
            rate(&|c| matches!(c.form, Form::Combine(_))),
            0.15,
        ),
        (
            "prescale",
            rate(&|c| c.prescale && c.arithmetic == Arithmetic::Eager),
            0.1,
        ),
        ("exp2", rate(&|c| c.exp2), 0.3),
        ("softcap", rate(&|c| c.softcap.is_some()), 0.3),
    ] {
        assert!(r >= lo, "{what}: {r:.3} of {n}");
    }
}

#[test]
fn wrong_kernels_are_rejected() {
    // A dropped last key on PEAK (the last key is chosen in about 2 rows
    // of 5) and P rounded to bf16 declared f32 on RAND.
    let (mut dropped, mut p_rounded) = (0, 0);
    for seed in 0..20u64 {
        let dims = [1, 4, 2, 1, 40, 64, 64];
        let scale = default_scale(64);
        for (arm, bug) in [(Arm::Peak, Some("last-key-dropped")), (Arm::Rand, None)] {
            let spec = Spec {
                dims,
                dtype: Dtype::Bf16,
                mask: Mask::default(),
                scale,
                arm,
                seed,
            };
            let shape = spec.shape().unwrap();
            let x = spec.generate().unwrap();
            let c = Case {
                arithmetic: Arithmetic::Flash,
                dtype: Dtype::Bf16,
                arm,
                mask: Mask::default(),
                softcap: None,
                form: Form::Online(16),
                exp2: true,
                prescale: false,
                dims,
                seed,
            };
            let got = bits(Dtype::Bf16, &c.run(&shape, &x, scale, bug));
            let declared = if bug.is_some() {
                Arithmetic::Flash
            } else {
                Arithmetic::F32
            };
            let d = Declared::new(declared, Dtype::Bf16, scale, None, Mask::default()).unwrap();
            let want = reference(&shape, &x, &d).unwrap();
            let fail = !Verdict::judge(Dtype::Bf16, &want, &got).pass();
            if bug.is_some() {
                dropped += usize::from(fail);
            } else {
                p_rounded += usize::from(fail);
            }
        }
    }
    assert!(dropped >= 15, "{dropped} of 20");
    assert!(p_rounded >= 15, "{p_rounded} of 20");
}
