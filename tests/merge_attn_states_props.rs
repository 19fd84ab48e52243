//! bolero property over the merge enclosures (CPU): every binary32 merge
//! of two attention states written the field's ways lands inside the
//! case library's intervals under its declaration, output and output LSE,
//! on data drawn from the input's bytes through each arm: the weights
//! `expf(d)` (vLLM's CUDA kernel), `exp2f(fl(d log2 e))` (Triton's
//! `tl.exp`) or `exp2f(d)` (base 2, FlashInfer's); the scales by two
//! divisions, by a reciprocal and products, or the unnormalised sum
//! divided once (FlashInfer's `state_t::merge`); the weighted sum plain or
//! with either product fused (FMA); the log as `ln(se)`, `log2(se) ln 2`
//! (Triton's `tl.log`) or `ln_1p(w)`; with or without flush to zero;
//! both-empty pairs by the vLLM CUDA copy or the Triton fix's clamp to
//! `-1e30` and `1e-10` denominator; and, declared `scales="lse_out"`,
//! FlashAttention's combine (each side's scale `expf(lse - out_lse)`, or
//! FlashAttention 3's `exp2f` of pre-scaled arguments, from the rounded
//! output LSE). A correct kernel failing would be the
//! check's bug; this hunts for it. A second test shows wrong kernels
//! rejected.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::merge_attn_states::{bits, reference, Arm, Spec, Verdicts};
use oracle::merge_attn_states::{
    Base, Declared, Dtype, Empty, Layout, Scales as DeclaredScales, Shape,
};
use std::sync::Mutex;

/// How the kernel computes the weight of a side from `d = lse - max`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ExpForm {
    /// `expf(d)` (base e) or `exp2f(d)` (base 2).
    Plain,
    /// Base e only: `exp2f(fl(d log2 e))`, Triton's `tl.exp`.
    Exp2Scaled,
}

/// How the kernel forms the output from the weights.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scales {
    /// `w_p / se`, `w_s / se`.
    Div,
    /// `r = 1 / se`, `w_p r`, `w_s r`.
    Recip,
    /// `(w_p p + w_s s) / se`.
    Unnormalised,
    /// FlashAttention's: the output LSE first, then `b^(lse - out_lse)`
    /// per side (declared `lse_out`).
    LseOut,
}

/// Which product of the weighted sum is fused into its add.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fused {
    None,
    Prefix,
    Suffix,
}

/// How the kernel computes `log_b(se)`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LogForm {
    /// `logf(se)` or `log2f(se)`.
    Plain,
    /// Base e: `log2f(se) ln 2` (Triton's `tl.log`); base 2: `logf(se)
    /// log2 e`.
    Other,
    /// `log1p(w)` of the smaller weight.
    Log1p,
}

const DIMS: [[usize; 3]; 4] = [[3, 2, 8], [1, 4, 16], [5, 3, 4], [2, 1, 24]];

#[derive(Clone, Debug)]
struct Case {
    decl: Declared,
    arm: Arm,
    exp: ExpForm,
    scales: Scales,
    fused: Fused,
    log: LogForm,
    ftz: bool,
    dims: [usize; 3],
    seed: u64,
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 3] = u.arbitrary()?;
        let base = Base::ALL[usize::from(h[0] & 1)];
        let inf_is_empty = h[0] & 2 != 0;
        let arms = Arm::defaults(inf_is_empty);
        let scales = [
            Scales::Div,
            Scales::Recip,
            Scales::Unnormalised,
            Scales::LseOut,
        ][usize::from(h[1] >> 3) % 4];
        Ok(Case {
            decl: Declared {
                dtype: Dtype::ALL[usize::from(h[0] >> 2 & 3) % 3],
                base,
                empty: Empty::ALL[usize::from(h[0] >> 4 & 1)],
                inf_is_empty,
                layout: Layout::ALL[usize::from(h[0] >> 5 & 1)],
                scales: if scales == Scales::LseOut {
                    DeclaredScales::LseOut
                } else {
                    DeclaredScales::Weights
                },
            },
            arm: arms[usize::from(h[1] & 7) % arms.len()],
            exp: if base == Base::E && h[0] & 0x40 != 0 {
                ExpForm::Exp2Scaled
            } else {
                ExpForm::Plain
            },
            scales,
            fused: [Fused::None, Fused::Prefix, Fused::Suffix][usize::from(h[1] >> 5) % 3],
            log: [LogForm::Plain, LogForm::Other, LogForm::Log1p][usize::from(h[2] & 3) % 3],
            ftz: h[0] & 0x80 != 0,
            dims: DIMS[usize::from(h[2] >> 2) % DIMS.len()],
            seed: u.arbitrary()?,
        })
    }
}

impl Case {
    fn flush(&self, x: f32) -> f32 {
        if self.ftz && x != 0.0 && x.abs() < f32::MIN_POSITIVE {
            0.0
        } else {
            x
        }
    }

    fn exp(&self, d: f32) -> f32 {
        self.flush(match (self.decl.base, self.exp) {
            (Base::E, ExpForm::Plain) => d.exp(),
            (Base::E, ExpForm::Exp2Scaled) => self.flush(d * std::f32::consts::LOG2_E).exp2(),
            (Base::Two, _) => d.exp2(),
        })
    }

    fn log(&self, se: f32, w: f32) -> f32 {
        let two = self.decl.base == Base::Two;
        match (self.log, two) {
            (LogForm::Plain, false) => se.ln(),
            (LogForm::Plain, true) => se.log2(),
            (LogForm::Other, false) => se.log2() * std::f32::consts::LN_2,
            (LogForm::Other, true) => se.ln() * std::f32::consts::LOG2_E,
            (LogForm::Log1p, false) => w.ln_1p(),
            (LogForm::Log1p, true) => w.ln_1p() * std::f32::consts::LOG2_E,
        }
    }

    /// `a x + b y` in the declared fusion.
    fn sum(&self, a: f32, x: f32, b: f32, y: f32) -> f32 {
        let f = |v: f32| self.flush(v);
        match self.fused {
            Fused::None => f(f(a * x) + f(b * y)),
            Fused::Prefix => f(a.mul_add(x, f(b * y))),
            Fused::Suffix => f(b.mul_add(y, f(a * x))),
        }
    }

    /// One pair: `(outputs, output LSE)`, `bug` applied.
    fn pair(&self, p: f32, s: f32, po: &[f32], so: &[f32], bug: Option<&str>) -> (Vec<f32>, f32) {
        let d = &self.decl;
        let ninf = f32::NEG_INFINITY;
        let e = |x: f32| {
            if x == f32::INFINITY && d.inf_is_empty {
                ninf
            } else {
                x
            }
        };
        let (p, s) = (self.flush(e(p)), self.flush(e(s)));
        let mut m = p.max(s);
        let both = m == ninf;
        let triton = d.empty == Empty::Zero;
        if both && !triton {
            // vLLM's CUDA kernel: the prefix copied, the LSE -inf.
            return (po.to_vec(), ninf);
        }
        if triton {
            m = m.max(-1e30);
        }
        let (mut wp, mut ws) = (self.exp(self.flush(p - m)), self.exp(self.flush(s - m)));
        if bug == Some("base-swapped") {
            let o = Case {
                decl: Declared {
                    base: if d.base == Base::E {
                        Base::Two
                    } else {
                        Base::E
                    },
                    ..*d
                },
                exp: ExpForm::Plain,
                ..self.clone()
            };
            (wp, ws) = (o.exp(p - m), o.exp(s - m));
        }
        let se = self.flush(wp + ws);
        let den = if triton { se + 1e-10 } else { se };
        let lse = if both {
            ninf // the clamped maximum's log(0) + -1e30, or log1p's explicit case
        } else {
            self.flush(self.log(se, wp.min(ws)) + m)
        };
        let outs = po
            .iter()
            .zip(so)
            .map(|(&a, &c)| {
                let o = match self.scales {
                    Scales::Div => self.sum(a, self.flush(wp / den), c, self.flush(ws / den)),
                    Scales::Recip => {
                        let r = self.flush(1.0 / den);
                        self.sum(a, self.flush(wp * r), c, self.flush(ws * r))
                    }
                    Scales::Unnormalised => {
                        let n = self.sum(a, wp, c, ws);
                        if both {
                            0.0
                        } else {
                            self.flush(n / se)
                        }
                    }
                    Scales::LseOut => {
                        let k = std::f32::consts::LOG2_E;
                        let scale = |x: f32| match (d.base, self.exp) {
                            _ if x == ninf => 0.0,
                            (Base::E, ExpForm::Exp2Scaled) => {
                                let pre = self.flush(self.flush(x * k) - self.flush(lse * k));
                                self.flush(pre.exp2())
                            }
                            _ => self.exp(self.flush(x - lse)),
                        };
                        if both {
                            0.0
                        } else {
                            self.sum(a, scale(p), c, scale(s))
                        }
                    }
                };
                if bug == Some("cast-before-sum") {
                    let r = |x: f32| d.dtype.round(x);
                    r(r(a * self.flush(wp / den)) + r(c * self.flush(ws / den)))
                } else {
                    d.dtype.round(o)
                }
            })
            .collect();
        (outs, lse)
    }

    fn run(
        &self,
        shape: &Shape,
        x: &kernel_oracle::merge_attn_states::Case,
        bug: Option<&str>,
    ) -> (Vec<f32>, Vec<f32>) {
        let [t_n, h_n, dn] = shape.dims();
        let mut out = vec![0f32; shape.out_elems()];
        let mut lse = vec![0f32; shape.lse_elems()];
        for t in 0..t_n {
            for h in 0..h_n {
                let i = self.decl.layout.index(shape, t, h);
                let r = (t * h_n + h) * dn;
                let (o, l) = self.pair(
                    x.p_lse[i],
                    x.s_lse[i],
                    &x.p_out[r..r + dn],
                    &x.s_out[r..r + dn],
                    bug,
                );
                out[r..r + dn].copy_from_slice(&o);
                lse[i] = l;
            }
        }
        (out, lse)
    }
}

static SEEN: Mutex<Vec<Case>> = Mutex::new(Vec::new());

#[test]
fn binary32_merge_forms_pass_their_own_check() {
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<Case>()
        .with_iterations(20000)
        .for_each(|c| {
            let spec = Spec {
                dims: c.dims,
                decl: c.decl,
                arm: c.arm,
                seed: c.seed,
            };
            let shape = spec.shape().unwrap();
            let x = spec.generate().unwrap();
            let want = reference(&shape, &x, &c.decl).unwrap();
            let (out, lse) = c.run(&shape, &x, None);
            let v = Verdicts::judge(
                c.decl.dtype,
                &want,
                &bits(c.decl.dtype, &out),
                Some(&bits(Dtype::F32, &lse)),
            );
            if let Some(i) = v.out.first {
                panic!(
                    "{c:?}: element {i}: got {:e}, want [{:e}, {:e}] ({v:?})",
                    out[i], want.out.lo[i], want.out.hi[i]
                );
            }
            if let Some(i) = v.lse.as_ref().and_then(|l| l.first) {
                panic!(
                    "{c:?}: output LSE {i} (lse {} {}): got {:e}, want [{:e}, {:e}]",
                    x.p_lse[i], x.s_lse[i], lse[i], want.lse.lo[i], want.lse.hi[i]
                );
            }
            SEEN.lock().unwrap().push(c.clone());
        });
    let seen = SEEN.lock().unwrap();
    let n = seen.len();
    assert!(n >= 2000, "{n} cases");
    let rate = |f: &dyn Fn(&Case) -> bool| seen.iter().filter(|s| f(s)).count() as f64 / n as f64;
    for (what, r, lo) in [
        ("base 2", rate(&|c| c.decl.base == Base::Two), 0.3),
        ("f16", rate(&|c| c.decl.dtype == Dtype::F16), 0.15),
        ("f32", rate(&|c| c.decl.dtype == Dtype::F32), 0.15),
        ("zero", rate(&|c| c.decl.empty == Empty::Zero), 0.3),
        (
            "token_major",
            rate(&|c| c.decl.layout == Layout::TokenMajor),
            0.3,
        ),
        ("exp2 scaled", rate(&|c| c.exp == ExpForm::Exp2Scaled), 0.1),
        ("recip", rate(&|c| c.scales == Scales::Recip), 0.2),
        (
            "unnormalised",
            rate(&|c| c.scales == Scales::Unnormalised),
            0.2,
        ),
        ("lse_out", rate(&|c| c.scales == Scales::LseOut), 0.2),
        ("fused", rate(&|c| c.fused != Fused::None), 0.4),
        ("log1p", rate(&|c| c.log == LogForm::Log1p), 0.2),
        ("other log", rate(&|c| c.log == LogForm::Other), 0.2),
        ("ftz", rate(&|c| c.ftz), 0.3),
        ("FAR", rate(&|c| c.arm == Arm::Far), 0.08),
        ("EMPTY_BOTH", rate(&|c| c.arm == Arm::EmptyBoth), 0.08),
        ("POS_INF", rate(&|c| c.arm == Arm::PosInf), 0.04),
        ("LARGE", rate(&|c| c.arm == Arm::Large), 0.08),
        ("EQUAL", rate(&|c| c.arm == Arm::Equal), 0.08),
    ] {
        assert!(r >= lo, "{what}: {r:.3} of {n}");
    }
}

#[test]
fn wrong_kernels_are_rejected() {
    // The products rounded to bf16 before their sum, and the other base's
    // weights, on RAND: rejected on (nearly) every seed.
    let (mut cast, mut base) = (0, 0);
    for seed in 0..20u64 {
        let dims = [9, 4, 32];
        let decl = Declared::vllm(Dtype::Bf16);
        let spec = Spec {
            dims,
            decl,
            arm: Arm::Rand,
            seed,
        };
        let shape = spec.shape().unwrap();
        let x = spec.generate().unwrap();
        let want = reference(&shape, &x, &decl).unwrap();
        let c = Case {
            decl,
            arm: Arm::Rand,
            exp: ExpForm::Plain,
            scales: Scales::Div,
            fused: Fused::None,
            log: LogForm::Plain,
            ftz: false,
            dims,
            seed,
        };
        for (bug, n) in [("cast-before-sum", &mut cast), ("base-swapped", &mut base)] {
            let (out, lse) = c.run(&shape, &x, Some(bug));
            let v = Verdicts::judge(
                Dtype::Bf16,
                &want,
                &bits(Dtype::Bf16, &out),
                Some(&bits(Dtype::F32, &lse)),
            );
            *n += usize::from(!v.pass());
        }
        // The same kernel without the bug passes.
        let (out, lse) = c.run(&shape, &x, None);
        assert!(Verdicts::judge(
            Dtype::Bf16,
            &want,
            &bits(Dtype::Bf16, &out),
            Some(&bits(Dtype::F32, &lse))
        )
        .pass());
    }
    assert!(cast >= 18, "{cast} of 20");
    assert_eq!(base, 20);
}
