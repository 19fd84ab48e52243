//! The Gated DeltaNet kernels (`cu/gdn.cu`) against the core oracle
//! (`oracle::gdn`), bit for bit, on a GPU. Every test is ignored with a
//! reason; run them with
//! `cargo test --release -p device --test gdn_gpu -- --ignored --nocapture --test-threads=1`
//! (set `KERNEL_ORACLE_GDN_CU=<path>` to check a candidate source). Guards
//! are on in every test.
//!
//! - Each per-row kernel on its own, fed the oracle's inputs: conv (and the
//!   ring it shifts) for d_conv = 2, 3, 4; prep; scan on rows 0 and 1 (both
//!   halves of the pointer table, canonical -> alt -> canonical).
//! - Packed vs chained (seed 003's gate): for t = 1..=8 at (num_k, num_v) =
//!   (2, 4) and (16, 32), the packed twins and the chained per-row kernels
//!   each equal the oracle's `decode_rows` on all six outputs (conv
//!   outputs, scan outputs, final state in the PARITY slot, final ring,
//!   conv snapshots, state snapshots), hence each other.
//!
//! The inputs mix smooth values with specials that hit every branch of the
//! transcendentals (signed zeros, subnormals, SiLU's tail and subnormal
//! range, softplus's linear branch, exp's saturations); no NaN or infinity,
//! whose payloads the contract leaves open.

use device::cuda::{gdn_shape, Buffer, GdnEngine, GdnHeads, GdnWeights};
use oracle::gdn::conv::conv1d_row;
use oracle::gdn::prep::{prep_row, Heads, HeadsMut};
use oracle::gdn::rows::{decode_rows, PackedOutputs, RowInputs};
use oracle::gdn::scan::{scan_row, state_after_row, StateIo, StatePair};
use oracle::gdn::{default_scale, GdnParams, GdnShape};

#[path = "common/gdn_data.rs"]
mod gdn_data;
use gdn_data::{varied, with_specials};

fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        let bad = (0..got.len())
            .filter(|&i| got[i].to_bits() != want[i].to_bits())
            .count();
        panic!(
            "{what}: {bad} of {} elements differ; first at {i}: device {:e} ({:#010x}), oracle {:e} ({:#010x})",
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

fn engine() -> GdnEngine {
    let mut e = GdnEngine::new(0).unwrap_or_else(|err| panic!("GdnEngine on device 0: {err}"));
    e.set_guards(true);
    eprintln!("{} on {}", e.kernel_source(), e.device_name());
    e
}

/// A layer and `t` rows of inputs (weights spread 0.5, state 0.3, inputs
/// 1.0, beta/alpha 2.0, as seed 003's gate).
struct Layer {
    shape: GdnShape,
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    a_log: Vec<f32>,
    ring0: Vec<f32>,
    state0: Vec<f32>,
    qkv: Vec<f32>,
    beta_raw: Vec<f32>,
    alpha: Vec<f32>,
    eps: f32,
    scale: f32,
}

fn layer(num_k: usize, num_v: usize, d_conv: usize, t: usize, seed: u64) -> Layer {
    let shape = gdn_shape(num_k, num_v, 128, d_conv, t).unwrap_or_else(|e| panic!("{e}"));
    Layer {
        conv_w: varied(shape.conv_w_len(), seed + 1, 0.5),
        dt_bias: varied(num_v, seed + 2, 0.5),
        a_log: varied(num_v, seed + 3, 1.0),
        ring0: with_specials(shape.ring_len(), seed + 10, 1.0),
        state0: varied(shape.state_len(), seed + 20, 0.3),
        qkv: with_specials(t * shape.conv_dim(), seed + 30, 1.0),
        beta_raw: with_specials(t * num_v, seed + 40, 2.0),
        alpha: with_specials(t * num_v, seed + 50, 2.0),
        eps: 1e-6,
        scale: default_scale(),
        shape,
    }
}

impl Layer {
    fn params(&self) -> GdnParams<'_> {
        GdnParams {
            conv_w: &self.conv_w,
            dt_bias: &self.dt_bias,
            a_log: &self.a_log,
            eps: self.eps,
            scale: self.scale,
        }
    }
    fn weights(&self, e: &GdnEngine) -> GdnWeights {
        e.upload_weights(
            &self.shape,
            &self.conv_w,
            &self.dt_bias,
            &self.a_log,
            self.eps,
            self.scale,
        )
        .unwrap_or_else(|err| panic!("{err}"))
    }
}

fn up(e: &GdnEngine, v: &[f32]) -> Buffer<f32> {
    e.upload(v).unwrap_or_else(|err| panic!("{err}"))
}

fn down(e: &GdnEngine, b: &Buffer<f32>) -> Vec<f32> {
    e.download(b).unwrap_or_else(|err| panic!("{err}"))
}

/// Host prep outputs of one row.
struct HostHeads {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
}

impl HostHeads {
    fn new(shape: &GdnShape) -> HostHeads {
        let (vd, nv) = (shape.value_dim(), shape.num_v());
        HostHeads {
            q: vec![0.0; vd],
            k: vec![0.0; vd],
            v: vec![0.0; vd],
            beta: vec![0.0; nv],
            g: vec![0.0; nv],
        }
    }
    fn as_mut(&mut self) -> HeadsMut<'_> {
        HeadsMut {
            q: &mut self.q,
            k: &mut self.k,
            v: &mut self.v,
            beta: &mut self.beta,
            g: &mut self.g,
        }
    }
    fn as_heads(&self) -> Heads<'_> {
        Heads {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            beta: &self.beta,
            g: &self.g,
        }
    }
    fn upload(&self, e: &GdnEngine) -> GdnHeads {
        GdnHeads {
            q: up(e, &self.q),
            k: up(e, &self.k),
            v: up(e, &self.v),
            beta: up(e, &self.beta),
            g: up(e, &self.g),
        }
    }
}

fn assert_heads(what: &str, e: &GdnEngine, got: &GdnHeads, want: &HostHeads) {
    assert_bits(&format!("{what} q"), &down(e, &got.q), &want.q);
    assert_bits(&format!("{what} k"), &down(e, &got.k), &want.k);
    assert_bits(&format!("{what} v"), &down(e, &got.v), &want.v);
    assert_bits(&format!("{what} beta"), &down(e, &got.beta), &want.beta);
    assert_bits(&format!("{what} g"), &down(e, &got.g), &want.g);
}

/// Each per-row kernel on its own, fed the oracle's inputs.
fn per_row(e: &GdnEngine, num_k: usize, num_v: usize, d_conv: usize) {
    let l = layer(num_k, num_v, d_conv, 2, 7 * num_v as u64 + d_conv as u64);
    let s = l.shape;
    let (c, nv) = (s.conv_dim(), s.num_v());
    let tag = format!("(num_k, num_v, d_conv) = ({num_k}, {num_v}, {d_conv})");
    let w = l.weights(e);
    let mut st = e
        .new_state(&s, &l.ring0, &l.state0, None)
        .unwrap_or_else(|err| panic!("{err}"));
    let mut ring = l.ring0.clone();
    let mut state = [l.state0.clone(), vec![0f32; s.state_len()]];
    for r in 0..2 {
        // Conv.
        let x = &l.qkv[r * c..(r + 1) * c];
        let mut want_out = vec![0f32; c];
        conv1d_row(&s, x, &l.conv_w, &mut ring, &mut want_out).unwrap();
        let xd = up(e, x);
        let mut out = e.alloc_output::<f32>(c).unwrap();
        e.conv_row(&s, &xd, &w, &mut st, r, &mut out)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_bits(
            &format!("{tag} row {r} conv out"),
            &down(e, &out),
            &want_out,
        );
        assert_bits(&format!("{tag} row {r} ring"), &down(e, st.ring()), &ring);
        // Prep, from the oracle's conv output.
        let (br, al) = (
            &l.beta_raw[r * nv..(r + 1) * nv],
            &l.alpha[r * nv..(r + 1) * nv],
        );
        let mut want = HostHeads::new(&s);
        prep_row(&s, &l.params(), &want_out, br, al, &mut want.as_mut()).unwrap();
        let mut heads = e.alloc_heads(&s, 1).unwrap();
        e.prep_row(
            &s,
            &w,
            &up(e, &want_out),
            &up(e, br),
            &up(e, al),
            &mut heads,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_heads(&format!("{tag} row {r} prep"), e, &heads, &want);
        // Scan, from the oracle's prep output: row 0 canonical -> alt, row
        // 1 alt -> canonical.
        let (src, dst) = if r == 0 { (0, 1) } else { (1, 0) };
        let [s0, s1] = &mut state;
        let (src_s, dst_s) = if src == 0 { (&*s0, s1) } else { (&*s1, s0) };
        let mut want_o = vec![0f32; s.value_dim()];
        let io = StateIo::Alternate {
            src: src_s,
            dst: dst_s,
        };
        scan_row(&s, &want.as_heads(), l.scale, io, &mut want_o).unwrap();
        let mut o = e.alloc_output::<f32>(s.value_dim()).unwrap();
        e.scan_row(&s, &want.upload(e), l.scale, &mut st, r, &mut o)
            .unwrap_or_else(|err| panic!("{err}"));
        assert_bits(&format!("{tag} row {r} scan o"), &down(e, &o), &want_o);
        assert_bits(
            &format!("{tag} row {r} state"),
            &down(e, st.after_row(r)),
            &state[dst],
        );
    }
    eprintln!("{tag}: per-row conv, prep, scan bit-identical to the oracle");
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_per_row_kernels_match_the_oracle_bitwise() {
    let e = engine();
    for d_conv in 2..=4 {
        per_row(&e, 2, 4, d_conv);
    }
    per_row(&e, 16, 32, 4);
    per_row(&e, 1, 3, 3);
}

/// The six outputs of `t` rows.
struct Six {
    conv_out: Vec<f32>,
    o: Vec<f32>,
    snap_conv: Vec<f32>,
    snap_state: Vec<f32>,
    ring: Vec<f32>,
    state: Vec<f32>,
}

fn assert_six(what: &str, got: &Six, want: &Six) {
    assert_bits(
        &format!("{what}: conv outputs"),
        &got.conv_out,
        &want.conv_out,
    );
    assert_bits(&format!("{what}: scan outputs"), &got.o, &want.o);
    assert_bits(
        &format!("{what}: conv snapshots"),
        &got.snap_conv,
        &want.snap_conv,
    );
    assert_bits(
        &format!("{what}: state snapshots"),
        &got.snap_state,
        &want.snap_state,
    );
    assert_bits(&format!("{what}: final ring"), &got.ring, &want.ring);
    assert_bits(&format!("{what}: final state"), &got.state, &want.state);
}

fn oracle_rows(l: &Layer) -> Six {
    let s = l.shape;
    let (t, n) = (s.t(), s.state_len());
    let mut ring = l.ring0.clone();
    let mut canonical = l.state0.clone();
    let mut alt = vec![0f32; n];
    let mut six = Six {
        conv_out: vec![0.0; t * s.conv_dim()],
        o: vec![0.0; t * s.value_dim()],
        snap_conv: vec![0.0; s.snapshots() * s.ring_len()],
        snap_state: vec![0.0; s.snapshots() * n],
        ring: Vec::new(),
        state: Vec::new(),
    };
    let mut scratch = vec![0f32; s.scratch_len()];
    let input = RowInputs {
        qkv: &l.qkv,
        beta_raw: &l.beta_raw,
        alpha: &l.alpha,
    };
    let slot = decode_rows(
        &s,
        &l.params(),
        &input,
        &mut ring,
        StatePair {
            canonical: &mut canonical,
            alt: &mut alt,
        },
        PackedOutputs {
            conv_out: &mut six.conv_out,
            o: &mut six.o,
            snap_conv: &mut six.snap_conv,
            snap_state: &mut six.snap_state,
        },
        &mut scratch,
    )
    .unwrap();
    assert_eq!(slot, state_after_row(t - 1));
    six.ring = ring;
    six.state = match slot {
        oracle::gdn::scan::StateSlot::Canonical => canonical,
        oracle::gdn::scan::StateSlot::Alt => alt,
    };
    six
}

/// `t` chained launches of the per-row trio, alternating the state buffers.
fn chained(e: &GdnEngine, l: &Layer) -> Six {
    let s = l.shape;
    let (t, c, nv, vd) = (s.t(), s.conv_dim(), s.num_v(), s.value_dim());
    let w = l.weights(e);
    let mut st = e.new_state(&s, &l.ring0, &l.state0, None).unwrap();
    let mut six = Six {
        conv_out: Vec::new(),
        o: Vec::new(),
        snap_conv: Vec::new(),
        snap_state: Vec::new(),
        ring: Vec::new(),
        state: Vec::new(),
    };
    let mut conv_out = e.alloc_output::<f32>(c).unwrap();
    let mut heads = e.alloc_heads(&s, 1).unwrap();
    let mut o = e.alloc_output::<f32>(vd).unwrap();
    for r in 0..t {
        let x = up(e, &l.qkv[r * c..(r + 1) * c]);
        e.conv_row(&s, &x, &w, &mut st, r, &mut conv_out).unwrap();
        let br = up(e, &l.beta_raw[r * nv..(r + 1) * nv]);
        let al = up(e, &l.alpha[r * nv..(r + 1) * nv]);
        e.prep_row(&s, &w, &conv_out, &br, &al, &mut heads).unwrap();
        e.scan_row(&s, &heads, l.scale, &mut st, r, &mut o).unwrap();
        six.conv_out.extend(down(e, &conv_out));
        six.o.extend(down(e, &o));
        if r + 1 < t {
            six.snap_conv.extend(down(e, st.ring()));
            six.snap_state.extend(down(e, st.after_row(r)));
        }
    }
    six.ring = down(e, st.ring());
    six.state = down(e, st.after_row(t - 1));
    six
}

/// One launch of each packed twin.
fn packed(e: &GdnEngine, l: &Layer) -> Six {
    let s = l.shape;
    let (t, c, vd) = (s.t(), s.conv_dim(), s.value_dim());
    let w = l.weights(e);
    let mut st = e.new_state(&s, &l.ring0, &l.state0, None).unwrap();
    let qkv = up(e, &l.qkv);
    let (br, al) = (up(e, &l.beta_raw), up(e, &l.alpha));
    let mut conv_out = e.alloc_output::<f32>(t * c).unwrap();
    let mut snap_conv = e.alloc_output::<f32>(s.snapshots() * s.ring_len()).unwrap();
    let mut snap_state = e
        .alloc_output::<f32>(s.snapshots() * s.state_len())
        .unwrap();
    let mut heads = e.alloc_heads(&s, t).unwrap();
    let mut o = e.alloc_output::<f32>(t * vd).unwrap();
    e.conv_rows(&s, &qkv, &w, &mut st, &mut conv_out, &mut snap_conv)
        .unwrap_or_else(|err| panic!("{err}"));
    e.prep_rows(&s, &w, &conv_out, &br, &al, &mut heads)
        .unwrap_or_else(|err| panic!("{err}"));
    let slot = e
        .scan_rows(&s, &heads, l.scale, &mut st, &mut o, &mut snap_state)
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(slot, state_after_row(t - 1));
    Six {
        conv_out: down(e, &conv_out),
        o: down(e, &o),
        snap_conv: down(e, &snap_conv),
        snap_state: down(e, &snap_state),
        ring: down(e, st.ring()),
        state: down(e, st.slot(slot)),
    }
}

fn packed_matches_chained(e: &GdnEngine, num_k: usize, num_v: usize) {
    for t in 1..=8usize {
        let l = layer(num_k, num_v, 4, t, 100 * t as u64 + num_v as u64);
        let want = oracle_rows(&l);
        let tag = format!("(num_k, num_v) = ({num_k}, {num_v}), t = {t}");
        assert_six(
            &format!("{tag}, chained per-row kernels"),
            &chained(e, &l),
            &want,
        );
        assert_six(&format!("{tag}, packed kernels"), &packed(e, &l), &want);
        eprintln!("{tag}: packed == chained == oracle on all six outputs");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_packed_matches_chained_bitwise_2_4() {
    packed_matches_chained(&engine(), 2, 4);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_packed_matches_chained_bitwise_16_32() {
    packed_matches_chained(&engine(), 16, 32);
}

/// A shape the kernels' ABI cannot take is refused before launch, with an
/// engine open (the same checks as `gdn_validation`, through the launch
/// methods).
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_gdn_launches_refuse_wrong_lengths() {
    let e = engine();
    let l = layer(2, 4, 4, 3, 5);
    let s = l.shape;
    let w = l.weights(&e);
    let mut st = e.new_state(&s, &l.ring0, &l.state0, None).unwrap();
    let x = up(&e, &l.qkv[..s.conv_dim() - 1]);
    let mut out = e.alloc_output::<f32>(s.conv_dim()).unwrap();
    let err = e.conv_row(&s, &x, &w, &mut st, 0, &mut out).unwrap_err();
    assert!(err.gdn_error().is_some(), "{err}");
    let other = gdn_shape(2, 8, 128, 4, 3).unwrap();
    let x = up(&e, &vec![0f32; other.conv_dim()]);
    let w8 = e
        .upload_weights(
            &other,
            &vec![0.0; other.conv_w_len()],
            &[0.0; 8],
            &[0.0; 8],
            1e-6,
            1.0,
        )
        .unwrap();
    let mut out = e.alloc_output::<f32>(other.conv_dim()).unwrap();
    let err = e
        .conv_row(&other, &x, &w8, &mut st, 0, &mut out)
        .unwrap_err();
    assert!(err.to_string().contains("ring"), "{err}");
    assert!(e.new_state(&s, &l.ring0, &l.state0[1..], None).is_err());
}
