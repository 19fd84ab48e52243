//! bolero property over the gated activation intervals (CPU): every
//! binary32 `act(gate) * up` written the field's ways (std's `expf`, or
//! `exp2f` of a scaled argument as `__expf` and Triton's `tl.exp` compute
//! it; `tanhf`; `erff` as binary64 `erf` rounded; the quotient or the
//! reciprocal form, the stable negative branch; flush to zero and the fast
//! division's zero past `2^126`, or not; the declared rounding of the
//! product) lands inside the case library's intervals, on data drawn from
//! the input's bytes through each arm of the case library. A correct
//! kernel failing the check would be the check's bug; this hunts for it.

use arbitrary::{Arbitrary, Unstructured};
use kernel_oracle::act_and_mul::{bits, reference, Arm, Spec, Verdict};
use oracle::act_and_mul::{Activation, Arithmetic, Declared, Dtype, Layout};
use std::sync::Mutex;

/// One generated case; every path choice is in the first three bytes:
/// the activation, arithmetic, layout and dtype, the arm, and the
/// kernel's `exp`, form, flush to zero and division.
#[derive(Clone, Debug)]
struct Case {
    activation: Activation,
    arithmetic: Arithmetic,
    layout: Layout,
    dtype: Dtype,
    arm: Arm,
    exp2: bool,
    reciprocal: bool,
    stable: bool,
    ftz: bool,
    fast_div: bool,
    dims: (usize, usize),
    seed: u64,
}

const WIDTHS: [usize; 6] = [1, 7, 8, 33, 129, 300];

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let h: [u8; 3] = u.arbitrary()?;
        Ok(Case {
            activation: Activation::ALL[usize::from(h[0] & 3)],
            arithmetic: Arithmetic::ALL[usize::from(h[0] >> 2 & 1)],
            layout: Layout::ALL[usize::from(h[0] >> 3 & 1)],
            dtype: Dtype::ALL[usize::from(h[0] >> 4) % 3],
            arm: Arm::ALL[usize::from(h[1] & 3)],
            exp2: h[1] & 4 != 0,
            reciprocal: h[1] & 8 != 0,
            stable: h[1] & 16 != 0,
            ftz: h[1] & 32 != 0,
            fast_div: h[1] & 64 != 0,
            dims: (
                1 + usize::from(h[2] & 3),
                WIDTHS[usize::from(h[2] >> 2) % WIDTHS.len()],
            ),
            seed: u.arbitrary()?,
        })
    }
}

/// erf in binary64: the alternating series below 2.5, `1 - erfc` by its
/// continued fraction above (about 1e-15); the kernel's `erff` is this
/// rounded to binary32.
fn erf64(w: f64) -> f64 {
    if w < 0.0 {
        return -erf64(-w);
    }
    if w < 2.5 {
        let (mut term, mut sum, w2) = (w, w, w * w);
        let mut n = 0.0;
        while term.abs() > 1e-18 * sum.abs() {
            n += 1.0;
            term *= -w2 / n;
            sum += term / (2.0 * n + 1.0);
        }
        return sum * std::f64::consts::FRAC_2_SQRT_PI;
    }
    let (mut f, mut c, mut d) = (w, w, 0.0f64);
    for k in 1..300 {
        let a = f64::from(k) / 2.0;
        d = 1.0 / (w + a * d);
        c = w + a / c;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    1.0 - (-w * w).exp() / (f * std::f64::consts::PI.sqrt())
}

impl Case {
    fn f(&self, v: f32) -> f32 {
        if self.ftz && v.abs() < f32::MIN_POSITIVE {
            f32::from_bits(v.to_bits() & 0x8000_0000)
        } else {
            v
        }
    }
    fn exp(&self, s: f32) -> f32 {
        let s = self.f(s);
        self.f(if self.exp2 {
            (s * std::f32::consts::LOG2_E).exp2()
        } else {
            s.exp()
        })
    }
    fn div(&self, n: f32, d: f32) -> f32 {
        let (n, d) = (self.f(n), self.f(d));
        if self.fast_div && d.abs() > 2f32.powi(126) {
            return 0.0 * n.signum();
        }
        self.f(n / d)
    }
    fn mul(&self, a: f32, b: f32) -> f32 {
        self.f(self.f(a) * self.f(b))
    }
    fn add(&self, a: f32, b: f32) -> f32 {
        self.f(self.f(a) + self.f(b))
    }

    /// `g sigma(s)` in the case's form.
    fn gate_sigmoid(&self, g: f32, s: f32) -> f32 {
        if self.stable && g < 0.0 {
            let z = self.exp(s);
            return self.mul(g, self.div(z, self.add(1.0, z)));
        }
        let d = self.add(1.0, self.exp(-s));
        if self.reciprocal {
            self.mul(g, self.div(1.0, d))
        } else {
            self.div(g, d)
        }
    }

    /// The kernel's binary32 activation.
    fn act(&self, g: f32) -> f32 {
        let g = self.f(g);
        match self.activation {
            Activation::Silu => self.gate_sigmoid(g, g),
            Activation::GeluQuick => self.gate_sigmoid(g, self.mul(1.702, g)),
            Activation::GeluTanh => {
                let cube = self.mul(self.mul(g, g), g);
                let inner = self.mul(0.797_884_6, self.add(g, self.mul(0.044715, cube)));
                if self.reciprocal {
                    // The sigmoid form of the same function.
                    return self.gate_sigmoid(g, self.mul(2.0, inner));
                }
                let t = self.f(self.f(inner).tanh());
                self.mul(self.mul(g, 0.5), self.add(1.0, t))
            }
            Activation::Gelu => {
                let s = self.mul(g, std::f32::consts::FRAC_1_SQRT_2);
                let t = self.f(erf64(f64::from(s)) as f32);
                self.mul(self.mul(g, 0.5), self.add(1.0, t))
            }
        }
    }

    /// One output element as the declared arithmetic rounds it.
    fn out(&self, g: f32, y: f32) -> f32 {
        let a = self.act(g);
        let dt = self.dtype;
        let p = match self.arithmetic {
            Arithmetic::RoundThenMul => self.mul(dt.round(a), y),
            Arithmetic::F32 => self.mul(a, y),
        };
        dt.round(p)
    }
}

static SEEN: Mutex<Vec<Case>> = Mutex::new(Vec::new());

#[test]
fn binary32_gated_activations_pass_their_own_check() {
    SEEN.lock().unwrap().clear();
    bolero::check!()
        .with_arbitrary::<Case>()
        .with_iterations(20000)
        .for_each(|c| {
            let spec = Spec {
                dims: c.dims,
                dtype: c.dtype,
                layout: c.layout,
                arm: c.arm,
                seed: c.seed,
            };
            let shape = spec.shape().unwrap();
            let x = spec.generate().unwrap();
            let d = Declared::new(c.activation, c.arithmetic, c.layout, c.dtype, 2).unwrap();
            let want = reference(&shape, &x, &d).unwrap();
            let w = shape.d();
            let got: Vec<f32> = (0..shape.len())
                .map(|i| {
                    let row = &x.x[i / w * 2 * w..(i / w + 1) * 2 * w];
                    let (g, y) = c.layout.split(row, w, i % w);
                    c.out(g, y)
                })
                .collect();
            let v = Verdict::judge(c.dtype, &want, &bits(c.dtype, &got));
            if let Some(i) = v.first {
                let row = &x.x[i / w * 2 * w..(i / w + 1) * 2 * w];
                let (g, y) = c.layout.split(row, w, i % w);
                panic!(
                    "{c:?}: element {i}, gate {g:e} up {y:e}: got {:e}, want [{:e}, {:e}], activation {:e} in {:?}",
                    got[i], want.lo[i], want.hi[i], c.act(g), want.act[i]
                );
            }
            SEEN.lock().unwrap().push(c.clone());
        });
    // Each path was reached at about its designed rate.
    let seen = SEEN.lock().unwrap();
    let n = seen.len();
    assert!(n >= 500, "{n} cases");
    let rate = |f: &dyn Fn(&Case) -> bool| seen.iter().filter(|s| f(s)).count() as f64 / n as f64;
    for (what, r, lo) in [
        ("gelu", rate(&|c| c.activation == Activation::Gelu), 0.15),
        ("f32", rate(&|c| c.arithmetic == Arithmetic::F32), 0.35),
        ("up first", rate(&|c| c.layout == Layout::UpFirst), 0.35),
        ("f16", rate(&|c| c.dtype == Dtype::F16), 0.2),
        ("TAILS", rate(&|c| c.arm == Arm::Tails), 0.15),
        ("ZERO", rate(&|c| c.arm == Arm::Zero), 0.15),
        ("exp2", rate(&|c| c.exp2), 0.35),
        ("stable", rate(&|c| c.stable), 0.35),
        ("ftz", rate(&|c| c.ftz), 0.35),
        ("fast division", rate(&|c| c.fast_div), 0.35),
    ] {
        assert!(r >= lo, "{what}: {r:.3} of {n}");
    }
}
