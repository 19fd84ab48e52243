//! The Gated DeltaNet decode contract, rule by rule: shapes, conv, prep,
//! scan, and packed rows against chained rows.

use oracle::gdn::conv::{conv1d_row, conv1d_rows};
use oracle::gdn::prep::{gate_g, l2_normalize, prep_row, prep_rows, Heads, HeadsMut};
use oracle::gdn::rows::{decode_row, decode_rows, PackedOutputs, RowInputs, RowOutputs};
use oracle::gdn::scan::{scan_row, scan_rows, state_after_row, StateIo, StatePair, StateSlot};
use oracle::gdn::sqrt::sqrt;
use oracle::gdn::transcendental::{exp, sigmoid, silu, softplus};
use oracle::gdn::{default_scale, GdnError, GdnParams, GdnShape, D_STATE};

// ---------------------------------------------------------------------------
// Data.

/// Deterministic values uniform in `[-spread, spread)` (xorshift64, top 24
/// bits), the same on every host.
fn varied(len: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * spread
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A layer: weights and `t` rows of inputs, seeded like the seed's gate
/// (weights spread 0.5, state 0.3, inputs 1.0, beta/alpha 2.0).
struct Case {
    shape: GdnShape,
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    a_log: Vec<f32>,
    ring0: Vec<f32>,
    state0: Vec<f32>,
    qkv: Vec<f32>,
    beta_raw: Vec<f32>,
    alpha: Vec<f32>,
}

impl Case {
    fn new(num_k: usize, num_v: usize, d_conv: usize, t: usize, seed: u64) -> Case {
        let shape = GdnShape::new(num_k, num_v, 128, d_conv, t).unwrap();
        Case {
            conv_w: varied(shape.conv_w_len(), seed + 1, 0.5),
            dt_bias: varied(num_v, seed + 2, 0.5),
            a_log: varied(num_v, seed + 3, 1.0),
            ring0: varied(shape.ring_len(), seed + 10, 1.0),
            state0: varied(shape.state_len(), seed + 20, 0.3),
            qkv: varied(t * shape.conv_dim(), seed + 30, 1.0),
            beta_raw: varied(t * num_v, seed + 40, 2.0),
            alpha: varied(t * num_v, seed + 50, 2.0),
            shape,
        }
    }
    fn params(&self) -> GdnParams<'_> {
        GdnParams {
            conv_w: &self.conv_w,
            dt_bias: &self.dt_bias,
            a_log: &self.a_log,
            eps: 1e-6,
            scale: default_scale(),
        }
    }
    fn inputs(&self) -> RowInputs<'_> {
        RowInputs {
            qkv: &self.qkv,
            beta_raw: &self.beta_raw,
            alpha: &self.alpha,
        }
    }
}

/// The six outputs the seed's gate compares (lines 257-264).
#[derive(Debug, PartialEq)]
struct Six {
    conv_out: Vec<u32>,
    o: Vec<u32>,
    final_state: Vec<u32>,
    final_ring: Vec<u32>,
    snap_conv: Vec<u32>,
    snap_state: Vec<u32>,
}

/// The seed's per-row program: `t` chained [`decode_row`] calls, the state
/// alternating between two buffers by row parity, snapshots by clone.
fn chained(c: &Case) -> Six {
    let s = &c.shape;
    let one = GdnShape::new(s.num_k(), s.num_v(), 128, s.d_conv(), 1).unwrap();
    let (cd, nv) = (s.conv_dim(), s.num_v());
    let mut ring = c.ring0.clone();
    let mut s0 = c.state0.clone();
    let mut s1 = vec![0f32; s.state_len()];
    let mut scratch = vec![0f32; s.scratch_len()];
    let (mut conv_out, mut o, mut snap_conv, mut snap_state) = (vec![], vec![], vec![], vec![]);
    for r in 0..s.t() {
        let input = RowInputs {
            qkv: &c.qkv[r * cd..(r + 1) * cd],
            beta_raw: &c.beta_raw[r * nv..(r + 1) * nv],
            alpha: &c.alpha[r * nv..(r + 1) * nv],
        };
        let mut co = vec![f32::NAN; cd];
        let mut or = vec![f32::NAN; s.value_dim()];
        let io = if r % 2 == 0 {
            StateIo::Alternate {
                src: &s0,
                dst: &mut s1,
            }
        } else {
            StateIo::Alternate {
                src: &s1,
                dst: &mut s0,
            }
        };
        let out = RowOutputs {
            conv_out: &mut co,
            o: &mut or,
        };
        decode_row(&one, &c.params(), &input, &mut ring, io, out, &mut scratch).unwrap();
        conv_out.extend(bits(&co));
        o.extend(bits(&or));
        if r + 1 < s.t() {
            snap_conv.extend(bits(&ring));
            snap_state.extend(bits(if r % 2 == 0 { &s1 } else { &s0 }));
        }
    }
    Six {
        conv_out,
        o,
        final_state: bits(if s.t() % 2 == 1 { &s1 } else { &s0 }),
        final_ring: bits(&ring),
        snap_conv,
        snap_state,
    }
}

/// Buffers for a packed call, pre-filled with NaN so an unwritten element
/// shows.
struct Packed {
    ring: Vec<f32>,
    canonical: Vec<f32>,
    alt: Vec<f32>,
    conv_out: Vec<f32>,
    o: Vec<f32>,
    snap_conv: Vec<f32>,
    snap_state: Vec<f32>,
}

impl Packed {
    fn new(c: &Case) -> Packed {
        let s = &c.shape;
        Packed {
            ring: c.ring0.clone(),
            canonical: c.state0.clone(),
            alt: vec![0f32; s.state_len()],
            conv_out: vec![f32::NAN; s.t() * s.conv_dim()],
            o: vec![f32::NAN; s.t() * s.value_dim()],
            snap_conv: vec![f32::NAN; s.snapshots() * s.ring_len()],
            snap_state: vec![f32::NAN; s.snapshots() * s.state_len()],
        }
    }
    fn six(&self, slot: StateSlot) -> Six {
        Six {
            conv_out: bits(&self.conv_out),
            o: bits(&self.o),
            final_state: bits(match slot {
                StateSlot::Canonical => &self.canonical,
                StateSlot::Alt => &self.alt,
            }),
            final_ring: bits(&self.ring),
            snap_conv: bits(&self.snap_conv),
            snap_state: bits(&self.snap_state),
        }
    }
}

/// [`decode_rows`]: the packed call, row by row.
fn packed(c: &Case) -> (Six, StateSlot) {
    let mut p = Packed::new(c);
    let mut scratch = vec![0f32; c.shape.scratch_len()];
    let slot = decode_rows(
        &c.shape,
        &c.params(),
        &c.inputs(),
        &mut p.ring,
        StatePair {
            canonical: &mut p.canonical,
            alt: &mut p.alt,
        },
        PackedOutputs {
            conv_out: &mut p.conv_out,
            o: &mut p.o,
            snap_conv: &mut p.snap_conv,
            snap_state: &mut p.snap_state,
        },
        &mut scratch,
    )
    .unwrap();
    (p.six(slot), slot)
}

/// The seed's packed program: each stage over all `t` rows before the next
/// (conv tloop, prep over `t` rows, scan tsnap), lines 170-213.
fn staged(c: &Case) -> (Six, StateSlot) {
    let s = &c.shape;
    let mut p = Packed::new(c);
    conv1d_rows(
        s,
        &c.qkv,
        &c.conv_w,
        &mut p.ring,
        &mut p.conv_out,
        &mut p.snap_conv,
    )
    .unwrap();
    let (vd, nv, t) = (s.value_dim(), s.num_v(), s.t());
    let (mut q, mut k, mut v) = (vec![0f32; t * vd], vec![0f32; t * vd], vec![0f32; t * vd]);
    let (mut beta, mut g) = (vec![0f32; t * nv], vec![0f32; t * nv]);
    let mut heads = HeadsMut {
        q: &mut q,
        k: &mut k,
        v: &mut v,
        beta: &mut beta,
        g: &mut g,
    };
    prep_rows(
        s,
        &c.params(),
        &p.conv_out,
        &c.beta_raw,
        &c.alpha,
        &mut heads,
    )
    .unwrap();
    let slot = scan_rows(
        s,
        &heads.as_heads(),
        default_scale(),
        StatePair {
            canonical: &mut p.canonical,
            alt: &mut p.alt,
        },
        &mut p.o,
        &mut p.snap_state,
    )
    .unwrap();
    (p.six(slot), slot)
}

fn assert_six_eq(what: &str, a: &Six, b: &Six) {
    for (name, x, y) in [
        ("conv_out", &a.conv_out, &b.conv_out),
        ("scan o", &a.o, &b.o),
        ("final state", &a.final_state, &b.final_state),
        ("final conv ring", &a.final_ring, &b.final_ring),
        ("conv snapshots", &a.snap_conv, &b.snap_conv),
        ("state snapshots", &a.snap_state, &b.snap_state),
    ] {
        assert_eq!(x.len(), y.len(), "{what}: {name} length");
        let d = x.iter().zip(y).filter(|(p, q)| p != q).count();
        assert_eq!(d, 0, "{what}: {name} differs in {d} of {} words", x.len());
        assert!(
            x.iter().all(|&w| f32::from_bits(w).is_finite()),
            "{what}: {name} not finite"
        );
    }
}

// ---------------------------------------------------------------------------
// Shapes and lengths.

#[test]
fn shape_lengths_follow_the_seed() {
    // Seed 003 lines 51-58 with num_k = 2, num_v = 4.
    let s = GdnShape::new(2, 4, 128, 4, 8).unwrap();
    assert_eq!((s.key_dim(), s.value_dim(), s.conv_dim()), (256, 512, 1024));
    assert_eq!((s.conv_w_len(), s.ring_len()), (4096, 3072));
    assert_eq!((s.state_len(), s.snapshots(), s.ratio()), (65536, 7, 2));
    assert_eq!(s.scratch_len(), 3 * 512 + 2 * 4);
    assert_eq!((s.d_state(), D_STATE), (128, 128));
}

#[test]
fn bad_shapes_are_errors() {
    use GdnError::*;
    assert_eq!(GdnShape::new(0, 4, 128, 4, 1), Err(Zero { dim: "num_k" }));
    assert_eq!(GdnShape::new(2, 0, 128, 4, 1), Err(Zero { dim: "num_v" }));
    assert_eq!(GdnShape::new(2, 4, 128, 4, 0), Err(Zero { dim: "t" }));
    assert_eq!(
        GdnShape::new(2, 5, 128, 4, 1),
        Err(HeadRatio { num_k: 2, num_v: 5 })
    );
    assert_eq!(GdnShape::new(2, 4, 64, 4, 1), Err(DState { d_state: 64 }));
    assert_eq!(GdnShape::new(2, 4, 128, 1, 1), Err(DConv { d_conv: 1 }));
    assert_eq!(GdnShape::new(2, 4, 128, 5, 1), Err(DConv { d_conv: 5 }));
    assert!(matches!(
        GdnShape::new(1, usize::MAX, 128, 4, 1),
        Err(HeadRatio { .. }) | Err(Overflow { .. })
    ));
    assert!(matches!(
        GdnShape::new(1 << 20, 1 << 20, 128, 4, 1 << 30),
        Err(Overflow { .. })
    ));
    assert!(matches!(
        GdnShape::new(1, 1 << 50, 128, 4, 1),
        Err(Overflow { .. })
    ));
    assert_eq!(
        format!("{}", GdnShape::new(2, 5, 128, 4, 1).unwrap_err()),
        "num_v = 5 is not a multiple of num_k = 2: q/k heads cannot be repeated onto the v heads"
    );
    for d_conv in 2..=4 {
        assert!(GdnShape::new(16, 32, 128, d_conv, 8).is_ok());
    }
}

#[test]
fn wrong_lengths_are_errors_and_write_nothing() {
    let c = Case::new(1, 2, 4, 3, 7);
    let s = &c.shape;
    let mut ring = c.ring0.clone();
    let mut out = vec![7.0f32; s.conv_dim()];
    let err = conv1d_row(
        s,
        &c.qkv[..s.conv_dim() - 1],
        &c.conv_w,
        &mut ring,
        &mut out,
    );
    assert_eq!(
        err,
        Err(GdnError::Len {
            arg: "x",
            want: s.conv_dim(),
            got: s.conv_dim() - 1
        })
    );
    assert_eq!(bits(&ring), bits(&c.ring0));
    assert!(out.iter().all(|&x| x == 7.0));
    // Packed: the snapshot count is t - 1; one more is an error.
    let mut p = Packed::new(&c);
    let mut big = vec![0f32; s.t() * s.ring_len()];
    let err = conv1d_rows(s, &c.qkv, &c.conv_w, &mut p.ring, &mut p.conv_out, &mut big);
    assert_eq!(
        err,
        Err(GdnError::Len {
            arg: "snap",
            want: 2 * s.ring_len(),
            got: 3 * s.ring_len()
        })
    );
    assert_eq!(bits(&p.ring), bits(&c.ring0));
    let mut scratch = vec![0f32; s.scratch_len() - 1];
    let err = decode_rows(
        s,
        &c.params(),
        &c.inputs(),
        &mut p.ring,
        StatePair {
            canonical: &mut p.canonical,
            alt: &mut p.alt,
        },
        PackedOutputs {
            conv_out: &mut p.conv_out,
            o: &mut p.o,
            snap_conv: &mut p.snap_conv,
            snap_state: &mut p.snap_state,
        },
        &mut scratch,
    );
    assert!(matches!(err, Err(GdnError::Len { arg: "scratch", .. })));
    assert!(p.o.iter().all(|x| x.is_nan()) && bits(&p.canonical) == bits(&c.state0));
    let e = GdnError::Len {
        arg: "o",
        want: 4,
        got: 3,
    };
    assert_eq!(format!("{e}"), "o has 3 elements, the shape needs 4");
}

#[test]
fn default_scale_is_the_seeds_one_over_sqrt_128() {
    // Seed 003 line 57: 1.0 / (d_state as f32).sqrt().
    assert_eq!(
        default_scale().to_bits(),
        (1.0f32 / 128f32.sqrt()).to_bits()
    );
    assert_eq!(default_scale().to_bits(), 0x3DB5_04F3);
}

// ---------------------------------------------------------------------------
// Conv.

#[test]
fn conv_sums_taps_oldest_first_then_silu_then_shifts() {
    let s = GdnShape::new(1, 1, 128, 4, 1).unwrap();
    let cd = s.conv_dim();
    let x = varied(cd, 1, 1.0);
    let w = varied(cd * 4, 2, 0.5);
    let ring0 = varied(cd * 3, 3, 1.0);
    let mut ring = ring0.clone();
    let mut out = vec![0f32; cd];
    conv1d_row(&s, &x, &w, &mut ring, &mut out).unwrap();
    for c in 0..cd {
        let h = &ring0[c * 3..c * 3 + 3];
        let t = &w[c * 4..c * 4 + 4];
        let acc = 0.0f32 + t[0] * h[0];
        let acc = acc + t[1] * h[1];
        let acc = acc + t[2] * h[2];
        let acc = acc + t[3] * x[c];
        assert_eq!(out[c].to_bits(), silu(acc).to_bits(), "channel {c}");
        assert_eq!(bits(&ring[c * 3..c * 3 + 3]), bits(&[h[1], h[2], x[c]]));
    }
}

#[test]
fn conv_accumulator_starts_at_positive_zero() {
    // Every product -0.0: -0.0 + ... would stay -0.0, +0.0 + -0.0 is +0.0,
    // and silu keeps the sign of a zero.
    let s = GdnShape::new(1, 1, 128, 2, 1).unwrap();
    let cd = s.conv_dim();
    let mut ring = vec![-0.0f32; cd];
    let mut out = vec![f32::NAN; cd];
    conv1d_row(&s, &vec![-0.0; cd], &vec![1.0; cd * 2], &mut ring, &mut out).unwrap();
    assert!(out.iter().all(|x| x.to_bits() == 0));
}

// ---------------------------------------------------------------------------
// Prep.

fn one_head(value: f32) -> [f32; D_STATE] {
    [value; D_STATE]
}

#[test]
fn gdn_eps_inside_sqrt() {
    // sum x^2 = 128e-8 is comparable to eps = 1e-6: inside the root the
    // factor is 1/sqrt(2.28e-6) = 662.3, outside (1/(sqrt(ss) + eps)) it
    // would be 883.4.
    let x = one_head(1e-4);
    let mut y = [0f32; D_STATE];
    l2_normalize(&x, 1e-6, &mut y);
    let mut ss = 0.0f32;
    for v in x {
        ss += v * v;
    }
    let inv = 1.0 / sqrt(ss + 1e-6);
    assert_eq!(y[0].to_bits(), (1e-4f32 * inv).to_bits());
    assert!((y[0] - 0.06623).abs() < 1e-4, "{}", y[0]);
    let outside = 1e-4 / (sqrt(ss) + 1e-6);
    assert!((y[0] - outside).abs() > 0.02);
}

#[test]
fn l2_sum_is_sequential_from_positive_zero() {
    // Values whose sum of squares depends on the order: one large first,
    // then 127 small ones.
    let mut x = one_head(f32::from_bits(0x3980_0000)); // 2^-12, square 2^-24
    x[0] = 1.0;
    let mut y = [0f32; D_STATE];
    l2_normalize(&x, 0.0, &mut y);
    // 1.0 + 2^-24 is a tie between 1.0 and 1.0 + 2^-23: even, 1.0. So the
    // sequential sum stays 1.0, and y[0] = 1 / sqrt(1) = 1 exactly.
    assert_eq!(y[0], 1.0);
    // A pairwise order would have summed the 127 small squares first (to
    // 127 * 2^-24) and then changed the result.
    let small = 127.0 * 2f32.powi(-24);
    assert_ne!(1.0 / sqrt(1.0 + small), 1.0);
}

#[test]
fn zero_q_and_k_heads_stay_finite() {
    let s = GdnShape::new(1, 2, 128, 4, 1).unwrap();
    let c = Case::new(1, 2, 4, 1, 3);
    let mut conv_out = varied(s.conv_dim(), 9, 1.0);
    for v in &mut conv_out[..2 * s.key_dim()] {
        *v = 0.0;
    }
    conv_out[5] = -0.0;
    let (mut q, mut k, mut v) = (vec![1f32; 256], vec![1f32; 256], vec![0f32; 256]);
    let (mut beta, mut g) = (vec![0f32; 2], vec![0f32; 2]);
    let mut out = HeadsMut {
        q: &mut q,
        k: &mut k,
        v: &mut v,
        beta: &mut beta,
        g: &mut g,
    };
    prep_row(&s, &c.params(), &conv_out, &[0.0; 2], &[0.0; 2], &mut out).unwrap();
    assert!(q.iter().chain(&k).all(|x| *x == 0.0));
    assert_eq!(q[5].to_bits(), 0x8000_0000, "the sign of a zero is kept");
    // A scan with zero q and k: kv = 0, o = 0, the state only decays and
    // takes no update (k = 0).
    let mut state = c.state0.clone();
    let mut o = vec![f32::NAN; 256];
    let x = Heads {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
    };
    scan_row(
        &s,
        &x,
        default_scale(),
        StateIo::InPlace(&mut state),
        &mut o,
    )
    .unwrap();
    assert!(o.iter().all(|x| *x == 0.0));
    let d = exp(g[0]);
    assert_eq!(state[3].to_bits(), (c.state0[3] * d).to_bits());
}

#[test]
fn q_and_k_repeat_interleave_onto_v_heads() {
    // num_k = 2, num_v = 6: v heads 0, 1, 2 read q/k head 0; 3, 4, 5 head 1.
    let s = GdnShape::new(2, 6, 128, 4, 1).unwrap();
    let c = Case::new(2, 6, 4, 1, 5);
    let conv_out = varied(s.conv_dim(), 11, 1.0);
    let vd = s.value_dim();
    let (mut q, mut k, mut v) = (vec![0f32; vd], vec![0f32; vd], vec![0f32; vd]);
    let (mut beta, mut g) = (vec![0f32; 6], vec![0f32; 6]);
    let mut out = HeadsMut {
        q: &mut q,
        k: &mut k,
        v: &mut v,
        beta: &mut beta,
        g: &mut g,
    };
    let beta_raw = varied(6, 12, 2.0);
    let alpha = varied(6, 13, 2.0);
    prep_row(&s, &c.params(), &conv_out, &beta_raw, &alpha, &mut out).unwrap();
    let head = |off: usize| -> [f32; D_STATE] {
        let mut x = [0f32; D_STATE];
        x.copy_from_slice(&conv_out[off..off + D_STATE]);
        let mut y = [0f32; D_STATE];
        l2_normalize(&x, 1e-6, &mut y);
        y
    };
    for h in 0..6 {
        let hk = h / 3;
        let r = h * 128..(h + 1) * 128;
        assert_eq!(bits(&q[r.clone()]), bits(&head(hk * 128)), "q head {h}");
        assert_eq!(
            bits(&k[r.clone()]),
            bits(&head(256 + hk * 128)),
            "k head {h}"
        );
        assert_eq!(
            bits(&v[r]),
            bits(&conv_out[512 + h * 128..512 + (h + 1) * 128])
        );
        assert_eq!(beta[h].to_bits(), sigmoid(beta_raw[h]).to_bits());
        let want = -(exp(c.a_log[h]) * softplus(alpha[h] + c.dt_bias[h]));
        assert_eq!(g[h].to_bits(), want.to_bits());
    }
}

#[test]
fn large_alpha_takes_the_softplus_branches() {
    // SP-LINEAR: alpha + dt_bias > 20 gives g = -(exp(a_log) * (alpha + dt_bias)).
    assert_eq!(gate_g(1e4, 0.5, 0.25), -(exp(0.25) * 10000.5));
    assert_eq!(gate_g(30.0, -9.0, 0.0), -21.0);
    // Just at the threshold, the formula (log1p(e^-20) is far below an ulp).
    assert_eq!(gate_g(20.0, 0.0, 0.0), -20.0);
    // G-ZERO: a very negative sum gives softplus +0.0, g = -0.0, decay 1.
    let g = gate_g(-1e4, 0.0, 1.0);
    assert_eq!(g.to_bits(), 0x8000_0000);
    assert_eq!(exp(g), 1.0);
    // In between, softplus is positive and tends to e^x.
    assert_eq!(gate_g(-50.0, 0.0, 0.0), -exp(-50.0));
    // G-NAN: exp(a_log) overflows and softplus is 0.
    assert!(gate_g(-1e4, 0.0, 100.0).is_nan());
    // g <= 0 and exp(g) in [0, 1] for finite, non-overflowing inputs.
    for (i, a) in varied(1000, 77, 60.0).into_iter().enumerate() {
        let g = gate_g(a, 0.1, (i % 7) as f32 - 3.0);
        assert!(g <= 0.0 && (0.0..=1.0).contains(&exp(g)), "{a} -> {g}");
    }
}

// ---------------------------------------------------------------------------
// Scan.

/// One head, state column 0 only: `S[0][0] = s00`, `k = e_0`, `q = e_0`.
fn one_column_case(s00: f32, v0: f32, beta: f32, g: f32) -> (f32, f32) {
    let s = GdnShape::new(1, 1, 128, 4, 1).unwrap();
    let mut state = vec![0f32; s.state_len()];
    state[0] = s00;
    let mut e0 = vec![0f32; 128];
    e0[0] = 1.0;
    let mut v = vec![0f32; 128];
    v[0] = v0;
    let x = Heads {
        q: &e0,
        k: &e0,
        v: &v,
        beta: &[beta],
        g: &[g],
    };
    let mut o = vec![0f32; 128];
    scan_row(&s, &x, 1.0, StateIo::InPlace(&mut state), &mut o).unwrap();
    (state[0], o[0])
}

#[test]
fn gdn_decay_precedes_delta() {
    // S = 1, k = q = e_0, v = 1, beta = 1, d = exp(g) < 1.
    // Decay first: S' = d, kv = d, delta = 1 - d, S'' = d + (1 - d).
    // Delta first would give kv = 1, delta = 0, S'' = d.
    let g = -0.75f32;
    let d = exp(g);
    let (s_after, o) = one_column_case(1.0, 1.0, 1.0, g);
    let want = d + (1.0 - d) * 1.0;
    assert_eq!(s_after.to_bits(), want.to_bits());
    assert_eq!(o.to_bits(), (want * 1.0).to_bits());
    assert!((s_after - 1.0).abs() < 1e-6 && (d - 1.0).abs() > 0.5);
}

#[test]
fn output_reads_the_updated_state() {
    // READ-AFTER: S = 0, v = 3, beta = 0.5, g = -0: delta = 1.5, S'' = 1.5,
    // o = 1.5 (reading before the update would give 0).
    let (s_after, o) = one_column_case(0.0, 3.0, 0.5, -0.0);
    assert_eq!((s_after, o), (1.5, 1.5));
}

#[test]
fn scan_follows_the_stated_order_bit_for_bit() {
    // An independent transcription of the steps, in the test.
    let c = Case::new(1, 2, 4, 1, 21);
    let s = &c.shape;
    let (vd, nv) = (s.value_dim(), s.num_v());
    let (q, k, v) = (varied(vd, 1, 0.1), varied(vd, 2, 0.1), varied(vd, 3, 1.0));
    let (beta, g) = (varied(nv, 4, 1.0), varied(nv, 5, 1.0));
    let scale = default_scale();
    let x = Heads {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
    };
    let mut dst = vec![0f32; s.state_len()];
    let mut o = vec![0f32; vd];
    let io = StateIo::Alternate {
        src: &c.state0,
        dst: &mut dst,
    };
    scan_row(s, &x, scale, io, &mut o).unwrap();
    for h in 0..nv {
        let d = exp(g[h]);
        for j in 0..128 {
            let at = |i: usize| h * 16384 + i * 128 + j;
            let sp: Vec<f32> = (0..128).map(|i| c.state0[at(i)] * d).collect();
            let mut kv = 0.0f32;
            for i in 0..128 {
                kv += sp[i] * k[h * 128 + i];
            }
            let delta = (v[h * 128 + j] - kv) * beta[h];
            let spp: Vec<f32> = (0..128).map(|i| sp[i] + k[h * 128 + i] * delta).collect();
            let mut acc = 0.0f32;
            for i in 0..128 {
                acc += spp[i] * q[h * 128 + i];
            }
            assert_eq!(
                o[h * 128 + j].to_bits(),
                (acc * scale).to_bits(),
                "o[{h}][{j}]"
            );
            for i in 0..128 {
                assert_eq!(dst[at(i)].to_bits(), spp[i].to_bits());
            }
        }
    }
}

#[test]
fn scan_matches_the_delta_rule_in_f64() {
    // Semantics, not bits: the transformers recurrence in f64 (scale on q,
    // the state [K, V]) agrees to a small relative error.
    let c = Case::new(1, 2, 4, 1, 31);
    let s = &c.shape;
    let (vd, nv) = (s.value_dim(), s.num_v());
    let mut q = varied(vd, 6, 1.0);
    let mut k = varied(vd, 7, 1.0);
    for h in 0..nv {
        for a in [&mut q, &mut k] {
            let head = &mut a[h * 128..(h + 1) * 128];
            let n: f32 = head.iter().map(|x| x * x).sum::<f32>().sqrt();
            head.iter_mut().for_each(|x| *x /= n);
        }
    }
    let v = varied(vd, 8, 1.0);
    let beta: Vec<f32> = varied(nv, 9, 2.0).into_iter().map(sigmoid).collect();
    let g: Vec<f32> = varied(nv, 10, 1.0)
        .into_iter()
        .map(|a| -softplus(a))
        .collect();
    let x = Heads {
        q: &q,
        k: &k,
        v: &v,
        beta: &beta,
        g: &g,
    };
    let mut state = c.state0.clone();
    let mut o = vec![0f32; vd];
    scan_row(s, &x, default_scale(), StateIo::InPlace(&mut state), &mut o).unwrap();
    let sc = 1.0 / 128f64.sqrt();
    for h in 0..nv {
        let mut st: Vec<f64> = c.state0[h * 16384..(h + 1) * 16384]
            .iter()
            .map(|&x| x as f64)
            .collect();
        let dk = (g[h] as f64).exp();
        st.iter_mut().for_each(|x| *x *= dk);
        for j in 0..128 {
            let kv: f64 = (0..128)
                .map(|i| st[i * 128 + j] * k[h * 128 + i] as f64)
                .sum();
            let delta = (v[h * 128 + j] as f64 - kv) * beta[h] as f64;
            for i in 0..128 {
                st[i * 128 + j] += k[h * 128 + i] as f64 * delta;
            }
        }
        for j in 0..128 {
            let want: f64 = (0..128)
                .map(|i| st[i * 128 + j] * q[h * 128 + i] as f64 * sc)
                .sum();
            let got = o[h * 128 + j] as f64;
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "o[{h}][{j}] {got} {want}"
            );
            for i in 0..128 {
                let (g, w) = (state[h * 16384 + i * 128 + j] as f64, st[i * 128 + j]);
                assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()));
            }
        }
    }
}

#[test]
fn in_place_and_alternate_give_the_same_bits() {
    let c = Case::new(2, 4, 4, 1, 41);
    let s = &c.shape;
    let mut p = Packed::new(&c);
    let mut scratch = vec![0f32; s.scratch_len()];
    let mut inplace = c.state0.clone();
    let mut ring2 = c.ring0.clone();
    let (mut co2, mut o2) = (vec![0f32; s.conv_dim()], vec![0f32; s.value_dim()]);
    decode_row(
        s,
        &c.params(),
        &c.inputs(),
        &mut p.ring,
        StateIo::Alternate {
            src: &p.canonical,
            dst: &mut p.alt,
        },
        RowOutputs {
            conv_out: &mut p.conv_out,
            o: &mut p.o,
        },
        &mut scratch,
    )
    .unwrap();
    decode_row(
        s,
        &c.params(),
        &c.inputs(),
        &mut ring2,
        StateIo::InPlace(&mut inplace),
        RowOutputs {
            conv_out: &mut co2,
            o: &mut o2,
        },
        &mut scratch,
    )
    .unwrap();
    assert_eq!(bits(&inplace), bits(&p.alt));
    assert_eq!(bits(&o2), bits(&p.o));
    assert_eq!(bits(&p.canonical), bits(&c.state0), "src is not written");
}

#[test]
fn state_near_overflow_goes_non_finite_without_clamping() {
    // STATE-OVERFLOW: a column of 3e38 with k = 1/sqrt(128) per element:
    // kv overflows to +inf, delta = -inf, the update gives 3e38 + -inf =
    // -inf, and o = -inf * q summed: -inf (q > 0) scaled.
    let s = GdnShape::new(1, 1, 128, 4, 1).unwrap();
    let mut state = vec![0f32; s.state_len()];
    for i in 0..128 {
        state[i * 128] = 3e38;
    }
    let kq = vec![default_scale(); 128];
    let v = vec![0f32; 128];
    let x = Heads {
        q: &kq,
        k: &kq,
        v: &v,
        beta: &[0.5],
        g: &[-0.0],
    };
    let mut o = vec![0f32; 128];
    scan_row(&s, &x, 1.0, StateIo::InPlace(&mut state), &mut o).unwrap();
    assert_eq!(o[0], f32::NEG_INFINITY);
    assert!(state
        .iter()
        .step_by(128)
        .take(128)
        .all(|&x| x == f32::NEG_INFINITY));
    // Other columns are untouched by column 0's overflow.
    assert!(o[1..].iter().all(|&x| x == 0.0));
    // With a zero k element, 0 * -inf = NaN enters the state.
    let mut state2 = vec![0f32; s.state_len()];
    for i in 0..128 {
        state2[i * 128] = 3e38;
    }
    let mut k2 = kq.clone();
    k2[7] = 0.0;
    let x2 = Heads { k: &k2, ..x };
    scan_row(&s, &x2, 1.0, StateIo::InPlace(&mut state2), &mut o).unwrap();
    assert!(state2[7 * 128].is_nan() && o[0].is_nan());
    // The decay alone never overflows: exp(g) <= 1.
    let mut state3 = vec![f32::MAX; s.state_len()];
    let zero = vec![0f32; 128];
    let x3 = Heads {
        q: &zero,
        k: &zero,
        v: &zero,
        beta: &[1.0],
        g: &[-0.0],
    };
    scan_row(&s, &x3, 1.0, StateIo::InPlace(&mut state3), &mut o).unwrap();
    assert!(state3.iter().all(|&x| x == f32::MAX));
}

// ---------------------------------------------------------------------------
// Rows.

#[test]
fn packed_rows_equal_chained_rows() {
    // The seed's gate (lines 63-274) on the oracle: T in 1..=8, its two head
    // configurations and every d_conv; all six outputs bit for bit, for the
    // row-by-row packed call and for the stage-by-stage program.
    let mut cells = 0;
    for (num_k, num_v) in [(2, 4), (16, 32), (1, 3)] {
        for d_conv in 2..=4 {
            for t in 1..=8 {
                // The large shape: d_conv 4, t in {2, 5, 8} (debug builds:
                // t = 2 only, to stay fast unoptimized).
                let big_ts: &[usize] = if cfg!(debug_assertions) {
                    &[2]
                } else {
                    &[2, 5, 8]
                };
                if num_v == 32 && (d_conv != 4 || !big_ts.contains(&t)) {
                    continue;
                }
                let c = Case::new(num_k, num_v, d_conv, t, 100 * t as u64 + d_conv as u64);
                let want = chained(&c);
                let (got, slot) = packed(&c);
                let (staged_six, staged_slot) = staged(&c);
                let what = format!("num_k={num_k} num_v={num_v} d_conv={d_conv} t={t}");
                assert_six_eq(&format!("{what} packed"), &want, &got);
                assert_six_eq(&format!("{what} staged"), &want, &staged_six);
                assert_eq!(slot, staged_slot);
                cells += 12;
            }
        }
    }
    assert!(cells > 0);
}

#[test]
fn snapshot_count_is_t_minus_one() {
    for t in 1..=5 {
        let c = Case::new(1, 1, 3, t, 60 + t as u64);
        let s = &c.shape;
        assert_eq!(s.snapshots(), t - 1);
        let (six, _) = packed(&c);
        assert_eq!(six.snap_conv.len(), (t - 1) * s.ring_len());
        assert_eq!(six.snap_state.len(), (t - 1) * s.state_len());
        // Snapshot r is the state after row r: the last one is the state a
        // chained run has after row t - 2, and differs from the final.
        if t >= 2 {
            let last = &six.snap_state[(t - 2) * s.state_len()..];
            assert_ne!(last, &six.final_state[..]);
        }
    }
}

#[test]
fn final_state_parity_odd_t_in_alt_even_t_in_canonical() {
    assert_eq!(state_after_row(0), StateSlot::Alt);
    assert_eq!(state_after_row(1), StateSlot::Canonical);
    for t in 1..=6 {
        let c = Case::new(1, 1, 4, t, 80 + t as u64);
        let (six, slot) = packed(&c);
        let want = if t % 2 == 1 {
            StateSlot::Alt
        } else {
            StateSlot::Canonical
        };
        assert_eq!(slot, want, "t={t}");
        assert_eq!(six, chained(&c));
    }
    // t = 1: the canonical buffer is only read.
    let c = Case::new(1, 1, 4, 1, 90);
    let mut p = Packed::new(&c);
    let mut scratch = vec![0f32; c.shape.scratch_len()];
    decode_rows(
        &c.shape,
        &c.params(),
        &c.inputs(),
        &mut p.ring,
        StatePair {
            canonical: &mut p.canonical,
            alt: &mut p.alt,
        },
        PackedOutputs {
            conv_out: &mut p.conv_out,
            o: &mut p.o,
            snap_conv: &mut p.snap_conv,
            snap_state: &mut p.snap_state,
        },
        &mut scratch,
    )
    .unwrap();
    assert_eq!(bits(&p.canonical), bits(&c.state0));
    assert!(p.snap_conv.is_empty() && p.snap_state.is_empty());
}

/// The batch layout: sequence `b` of a [`decode_batch`] call is the
/// `b`-th block of every pool and equals its own [`decode_rows`] call (the
/// layer shared), bit for bit; a pool of the wrong length is refused
/// before anything is written.
#[test]
fn batch_is_each_sequence_in_its_own_block() {
    use oracle::gdn::batch::{decode_batch, BatchLayout};
    let (nb, t) = (3usize, 3usize);
    let seqs: Vec<Case> = (0..nb as u64)
        .map(|b| Case::new(2, 4, 4, t, 7 + 100 * b))
        .collect();
    let layout = BatchLayout::new(seqs[0].shape, nb).unwrap();
    assert_eq!(
        BatchLayout::new(seqs[0].shape, 0),
        Err(GdnError::Zero { dim: "batch" })
    );
    let cat = |f: &dyn Fn(&Case) -> &[f32]| {
        seqs.iter()
            .flat_map(|c| f(c).iter().copied())
            .collect::<Vec<f32>>()
    };
    // Every sequence with sequence 0's weights.
    let shared: Vec<Case> = (0..nb)
        .map(|b| Case {
            conv_w: seqs[0].conv_w.clone(),
            dt_bias: seqs[0].dt_bias.clone(),
            a_log: seqs[0].a_log.clone(),
            ..Case::new(2, 4, 4, t, 7 + 100 * b as u64)
        })
        .collect();
    let mut ring = cat(&|c| &c.ring0);
    let mut canonical = cat(&|c| &c.state0);
    let n = seqs[0].shape.state_len();
    let mut alt = vec![0f32; nb * n];
    let per = layout.lens();
    let mut outs: Vec<Vec<f32>> = (5..9).map(|i| vec![0f32; nb * per[i]]).collect();
    let mut scratch = vec![0f32; seqs[0].shape.scratch_len()];
    let (qkv, br, al) = (cat(&|c| &c.qkv), cat(&|c| &c.beta_raw), cat(&|c| &c.alpha));
    let input = RowInputs {
        qkv: &qkv,
        beta_raw: &br,
        alpha: &al,
    };
    let [co, o, sc, ss] = &mut outs[..] else {
        unreachable!()
    };
    let bad = decode_batch(
        &layout,
        &shared[0].params(),
        &input,
        &mut ring[1..],
        StatePair {
            canonical: &mut canonical,
            alt: &mut alt,
        },
        PackedOutputs {
            conv_out: co,
            o,
            snap_conv: sc,
            snap_state: ss,
        },
        &mut scratch,
    );
    assert!(matches!(bad, Err(GdnError::Len { arg: "ring", .. })));
    assert!(co.iter().all(|&x| x == 0.0));
    let slot = decode_batch(
        &layout,
        &shared[0].params(),
        &input,
        &mut ring,
        StatePair {
            canonical: &mut canonical,
            alt: &mut alt,
        },
        PackedOutputs {
            conv_out: co,
            o,
            snap_conv: sc,
            snap_state: ss,
        },
        &mut scratch,
    )
    .unwrap();
    assert_eq!(slot, state_after_row(t - 1));
    for (b, c) in shared.iter().enumerate() {
        let (want, wslot) = packed(c);
        assert_eq!(wslot, slot);
        let fin = if slot == StateSlot::Alt {
            &alt
        } else {
            &canonical
        };
        let cut = |v: &[f32], i: usize| bits(&v[layout.range(b, per[i])]);
        assert_eq!(cut(co, 5), want.conv_out, "sequence {b} conv_out");
        assert_eq!(cut(o, 6), want.o, "sequence {b} o");
        assert_eq!(cut(sc, 7), want.snap_conv, "sequence {b} snap_conv");
        assert_eq!(cut(ss, 8), want.snap_state, "sequence {b} snap_state");
        assert_eq!(cut(&ring, 3), want.final_ring, "sequence {b} ring");
        assert_eq!(cut(fin, 4), want.final_state, "sequence {b} state");
    }
}
