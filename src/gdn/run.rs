//! The runner: one case through the CUDA kernels (`cu/gdn.cu`, or the
//! candidate named by `KERNEL_ORACLE_GDN_CU`) three ways: `t` chained
//! per-row launches, one eager packed step, and the packed step captured
//! in a CUDA graph and replayed on rebound buffers; and the batched step
//! over several sequences. [`per_row_kernels`] also checks each per-row
//! kernel on its own against the oracle.
//!
//! The chained launches' outputs are read back. The other runs take a
//! reference run's outputs still on the device
//! (the chained launches', [`Kept`]) and compare with them there
//! (`cu/bit_diff.cu`, every 32-bit word): a run bit-identical to the
//! reference in all six outputs reads nothing back ([`Got::Same`]); one
//! that differs anywhere is read back whole ([`Got::Read`]) for the host's
//! element-by-element judgement. A case then reads back one run's outputs
//! (and a graph case the three capture-time buffers) instead of five or
//! more. An audited [`Reference`] reads every run back anyway, with the
//! device's verdict beside it ([`Got::Audited`]), so that the judge holds
//! the device comparison to its own.

use super::generate::CaseData;
use super::judge::{compare, Bits, Diff, Six};
use super::pool::POOL;
use device::cuda::{
    Buffer, DeviceError, GdnEngine, GdnFusedEntry, GdnGraph, GdnHeads, GdnState, GdnStep,
    GdnWeights, Src,
};
use oracle::gdn::conv::conv1d_row;
use oracle::gdn::prep::{prep_row, Heads, HeadsMut};
use oracle::gdn::scan::{scan_row, StateIo};
use oracle::gdn::GdnShape;
use std::sync::OnceLock;

/// What the alternate state buffer holds before a graph replay: a NaN, so
/// a kernel that reads the alternate buffer it should only write shows.
pub const ALT_POISON: f32 = f32::from_bits(0x7FFF_FFFF);

/// The process's GDN engine on device 0, guards on. The kernel source is
/// the candidate named by `KERNEL_ORACLE_GDN_CU`, else the builtin
/// `cu/gdn.cu`.
///
/// # Errors
/// Why no engine could be made (no driver, no NVRTC, no device, the source
/// does not compile), as a message; the same message on every call.
pub fn engine() -> Result<&'static GdnEngine, String> {
    engine_cell().as_ref().map_err(|(msg, _)| msg.clone())
}

/// Whether [`engine`] failed because of the kernel source (it does not
/// compile or lacks a kernel: `DeviceError::is_source_fault`) rather
/// than the machine: the gate reports that as a failing row.
pub fn engine_source_fault() -> bool {
    matches!(engine_cell(), Err((_, true)))
}

fn engine_cell() -> &'static Result<GdnEngine, (String, bool)> {
    static ENGINE: OnceLock<Result<GdnEngine, (String, bool)>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut e = GdnEngine::new(0).map_err(|e| (e.to_string(), e.is_source_fault()))?;
        e.set_guards(true);
        Ok(e)
    })
}

/// A case's read-only data, wherever it lies: the layer's weights, the
/// initial ring and state, and the rows' inputs of `batch` sequences (the
/// layout of `oracle::gdn::batch`, sequence `b` the `b`-th block of each).
/// Every run makes its own state, inputs and outputs from these: by
/// upload from the host ([`CaseSrc::host`]), or by device-to-device
/// copies from one upload per case ([`OnDevice`]), the way the harness
/// runs a case (an upload waits for the stream and stages through
/// pageable memory; a case runs up to fifteen ways).
#[derive(Clone, Copy, Debug)]
pub struct CaseSrc<'a> {
    /// The shape of each sequence.
    pub shape: GdnShape,
    /// Sequences (1 but for a batched step).
    pub batch: usize,
    /// The L2 norm's epsilon.
    pub eps: f32,
    /// The query scale.
    pub scale: f32,
    /// `[C][d_conv]`.
    pub conv_w: Src<'a>,
    /// `[num_v]`.
    pub dt_bias: Src<'a>,
    /// `[num_v]`.
    pub a_log: Src<'a>,
    /// `[batch][C][P]`.
    pub ring0: Src<'a>,
    /// `[batch][N]`.
    pub state0: Src<'a>,
    /// `[batch][t][C]`.
    pub qkv: Src<'a>,
    /// `[batch][t][num_v]`.
    pub beta_raw: Src<'a>,
    /// `[batch][t][num_v]`.
    pub alpha: Src<'a>,
}

impl<'a> CaseSrc<'a> {
    /// One case's data on the host (each run uploads what it needs).
    pub fn host(d: &'a CaseData) -> CaseSrc<'a> {
        CaseSrc {
            shape: d.shape,
            batch: 1,
            eps: d.eps,
            scale: d.scale,
            conv_w: Src::Host(&d.conv_w),
            dt_bias: Src::Host(&d.dt_bias),
            a_log: Src::Host(&d.a_log),
            ring0: Src::Host(&d.ring0),
            state0: Src::Host(&d.state0),
            qkv: Src::Host(&d.qkv),
            beta_raw: Src::Host(&d.beta_raw),
            alpha: Src::Host(&d.alpha),
        }
    }
}

/// A case's read-only data uploaded once ([`OnDevice::new`]), handed to
/// every run as device buffers ([`OnDevice::src`]).
#[derive(Debug)]
pub struct OnDevice {
    shape: GdnShape,
    batch: usize,
    eps: f32,
    scale: f32,
    /// `[conv_w, dt_bias, a_log, ring0, state0, qkv, beta_raw, alpha]`.
    bufs: [Buffer<f32>; 8],
}

impl OnDevice {
    /// Uploads `src`'s eight arrays (a device source is copied).
    ///
    /// # Errors
    /// Every [`DeviceError`].
    pub fn new(e: &GdnEngine, src: &CaseSrc<'_>) -> Result<OnDevice, DeviceError> {
        let s = src;
        let arrays = [
            s.conv_w, s.dt_bias, s.a_log, s.ring0, s.state0, s.qkv, s.beta_raw, s.alpha,
        ];
        let mut bufs = Vec::with_capacity(arrays.len());
        for a in arrays {
            bufs.push(e.make(a)?);
        }
        Ok(OnDevice {
            shape: s.shape,
            batch: s.batch,
            eps: s.eps,
            scale: s.scale,
            bufs: bufs.try_into().expect("eight arrays, eight buffers"),
        })
    }

    /// The data as device sources.
    pub fn src(&self) -> CaseSrc<'_> {
        let [conv_w, dt_bias, a_log, ring0, state0, qkv, beta_raw, alpha] =
            self.bufs.each_ref().map(Src::Device);
        CaseSrc {
            shape: self.shape,
            batch: self.batch,
            eps: self.eps,
            scale: self.scale,
            conv_w,
            dt_bias,
            a_log,
            ring0,
            state0,
            qkv,
            beta_raw,
            alpha,
        }
    }
}

fn weights(e: &GdnEngine, s: &CaseSrc<'_>) -> Result<GdnWeights, DeviceError> {
    e.upload_weights(&s.shape, s.conv_w, s.dt_bias, s.a_log, s.eps, s.scale)
}

/// `src` on the device: the buffer itself when it is one, else uploaded
/// into `keep`.
fn on_device<'b>(
    e: &GdnEngine,
    src: Src<'b>,
    keep: &'b mut Option<Buffer<f32>>,
) -> Result<&'b Buffer<f32>, DeviceError> {
    match src {
        Src::Device(b) => Ok(b),
        Src::Host(_) => Ok(keep.insert(e.make(src)?)),
    }
}

/// `t` chained launches of the per-row trio (`gdn_conv1d_decode`,
/// `gdn_prep_decode`, `gdn_scan_s128`), row `r` through table half
/// `r % 2`; the ring and the state after every row but the last are read
/// back as the snapshots (seed 003's reference program).
///
/// Per case, not per row: the rows' inputs are uploaded once (each row
/// handed to the kernels by a device copy), every row's outputs and
/// snapshots are gathered on the device, and the guard bands of every
/// output are checked once after the last row (a band any launch wrote
/// stays written), so the host waits for the device once before the
/// read-back instead of after each of the `3 t` launches.
///
/// # Errors
/// Every [`DeviceError`].
pub fn chained(e: &GdnEngine, d: &CaseData) -> Result<Six, DeviceError> {
    chained_kept(e, &CaseSrc::host(d)).map(|(six, _)| six)
}

/// [`chained`] of a case's data `src` (one sequence), its outputs also
/// left on the device as the reference of the other runs
/// ([`Reference`]).
///
/// # Errors
/// Every [`DeviceError`].
pub fn chained_kept(e: &GdnEngine, src: &CaseSrc<'_>) -> Result<(Six, Kept), DeviceError> {
    let s = src.shape;
    let (t, c, nv, vd) = (s.t(), s.conv_dim(), s.num_v(), s.value_dim());
    let w = weights(e, src)?;
    let mut st = e.new_state(&s, src.ring0, src.state0, None)?;
    let (n, rl) = (s.state_len(), s.ring_len());
    let mut all_conv = e.alloc_output::<f32>(t * c)?;
    let mut all_o = e.alloc_output::<f32>(t * vd)?;
    let mut snap_conv = e.alloc_output::<f32>((t - 1) * rl)?;
    let mut snap_state = e.alloc_output::<f32>((t - 1) * n)?;
    // Read by the next launch before any check: intermediates.
    let mut conv_out = e.alloc_intermediate(c)?;
    let mut heads = e.alloc_heads(&s, 1)?;
    let mut o = e.alloc_output::<f32>(vd)?;
    // All rows' inputs, and one buffer per input rewritten each row.
    let mut keep = [None, None, None];
    let [k0, k1, k2] = &mut keep;
    let (xs, brs, als) = (
        on_device(e, src.qkv, k0)?,
        on_device(e, src.beta_raw, k1)?,
        on_device(e, src.alpha, k2)?,
    );
    // Each row's inputs come by device copy from those uploads.
    let mut x = e.alloc_input::<f32>(c)?;
    let mut br = e.alloc_input::<f32>(nv)?;
    let mut al = e.alloc_input::<f32>(nv)?;
    for r in 0..t {
        e.copy_from_at(xs, r * c, &mut x)?;
        e.launch_conv_row(&s, &x, &w, &mut st, r, &mut conv_out)?;
        e.copy_from_at(brs, r * nv, &mut br)?;
        e.copy_from_at(als, r * nv, &mut al)?;
        e.launch_prep_row(&s, &w, &conv_out, &br, &al, &mut heads)?;
        e.launch_scan_row(&s, &heads, src.scale, &mut st, r, &mut o)?;
        e.copy_at(&conv_out, &mut all_conv, r * c)?;
        e.copy_at(&o, &mut all_o, r * vd)?;
        if r + 1 < t {
            e.copy_at(st.ring(), &mut snap_conv, r * rl)?;
            e.copy_at(st.after_row(r), &mut snap_state, r * n)?;
        }
    }
    let mut outputs = vec![
        (&conv_out, "conv out"),
        (&heads.q, "q"),
        (&heads.k, "k"),
        (&heads.v, "v"),
        (&heads.beta, "beta"),
        (&heads.g, "g"),
        (&o, "o"),
        (&all_conv, "gathered conv outputs"),
        (&all_o, "gathered scan outputs"),
        (&snap_conv, "conv snapshots"),
        (&snap_state, "state snapshots"),
    ];
    // The ring and state, written through the pointer table.
    outputs.extend(st.named());
    e.check_guards(&outputs)?;
    let kept = Kept {
        st,
        t,
        gathered: [all_conv, all_o, snap_conv, snap_state],
    };
    Ok((read_six(e, kept.parts())?, kept))
}

/// The chained launches' six outputs left on the device ([`chained_kept`]):
/// the reference the other runs of a case are compared with there.
#[derive(Debug)]
pub struct Kept {
    st: GdnState,
    t: usize,
    /// The gathered conv outputs, scan outputs, conv and state snapshots.
    gathered: [Buffer<f32>; 4],
}

impl Kept {
    /// The reference of the other runs, audited or not.
    pub fn reference(&self, audit: bool) -> Reference<'_> {
        Reference {
            parts: self.parts(),
            audit,
        }
    }

    /// The six outputs, in [`Six::parts`] order.
    pub fn parts(&self) -> Parts<'_> {
        let [conv_out, o, snap_conv, snap_state] = &self.gathered;
        [
            conv_out,
            o,
            self.st.after_row(self.t - 1),
            self.st.ring(),
            snap_conv,
            snap_state,
        ]
    }
}

/// A run's six outputs on the device, in [`Six::parts`] order.
pub type Parts<'a> = [&'a Buffer<f32>; 6];

/// A reference run's outputs on the device for the other runs, and
/// whether to audit the comparison.
#[derive(Clone, Copy, Debug)]
pub struct Reference<'a> {
    /// The reference run's six outputs.
    pub parts: Parts<'a>,
    /// Read every run back even when the device finds it the same
    /// ([`Got::Audited`]).
    pub audit: bool,
}

/// What a run compared on the device with a reference hands the judge.
#[derive(Clone, Debug, PartialEq)]
pub enum Got<T> {
    /// Every output bit-identical to the reference run's, word for word
    /// (decided on the device; nothing was read back).
    Same,
    /// The outputs, read back: no reference was given, or some output
    /// differs from it (or has another length).
    Read(T),
    /// The outputs, read back under an audited [`Reference`], with the
    /// device's verdict: `same` when it found every word equal.
    Audited {
        /// The outputs.
        got: T,
        /// The device comparison's verdict.
        same: bool,
    },
}

impl<T> Got<T> {
    /// The outputs read back, if they were.
    pub fn read(&self) -> Option<&T> {
        match self {
            Got::Same => None,
            Got::Read(got) | Got::Audited { got, .. } => Some(got),
        }
    }

    /// The outputs read back, if they were, by value.
    pub fn into_read(self) -> Option<T> {
        match self {
            Got::Same => None,
            Got::Read(got) | Got::Audited { got, .. } => Some(got),
        }
    }
}

/// The six outputs of `parts`, read back into vectors of the host pool.
fn read_six(e: &GdnEngine, parts: Parts<'_>) -> Result<Six, DeviceError> {
    let [conv_out, o, state, ring, snap_conv, snap_state] = parts;
    Ok(Six {
        conv_out: down(e, conv_out)?,
        o: down(e, o)?,
        state: down(e, state)?,
        ring: down(e, ring)?,
        snap_conv: down(e, snap_conv)?,
        snap_state: down(e, snap_state)?,
    })
}

/// Whether every output of `got` is bit-identical to the same output of
/// `reference` (equal lengths, every 32-bit word), decided on the device
/// with one read-back of the verdicts.
///
/// # Errors
/// Every [`DeviceError`].
fn same_on_device(
    e: &GdnEngine,
    got: Parts<'_>,
    reference: Parts<'_>,
) -> Result<bool, DeviceError> {
    if got.iter().zip(&reference).any(|(g, r)| g.len() != r.len()) {
        return Ok(false);
    }
    let mut diffs = e.bit_diffs(got.len())?;
    for (g, r) in got.iter().zip(&reference) {
        e.queue_bit_diff(g, r, &mut diffs)?;
    }
    Ok(e.read_bit_diffs(&diffs)?.iter().all(|d| d.same()))
}

/// `parts` judged against `reference` on the device: [`Got::Same`] when
/// all six are bit-identical, else (or without a reference) read back;
/// audited, read back with the device's verdict.
fn got_six(
    e: &GdnEngine,
    parts: Parts<'_>,
    reference: Option<Reference<'_>>,
) -> Result<Got<Six>, DeviceError> {
    let Some(r) = reference else {
        return read_six(e, parts).map(Got::Read);
    };
    let same = same_on_device(e, parts, r.parts)?;
    if same && !r.audit {
        return Ok(Got::Same);
    }
    let got = read_six(e, parts)?;
    Ok(if r.audit {
        Got::Audited { got, same }
    } else {
        Got::Read(got)
    })
}

/// A packed step of `src.batch` sequences holding `src`'s layer, initial
/// states and inputs.
fn step(e: &GdnEngine, src: &CaseSrc<'_>) -> Result<GdnStep, DeviceError> {
    let (s, nb) = (src.shape, src.batch);
    let st = e.new_state_batched(&s, nb, src.ring0, src.state0, None)?;
    let mut step = e.new_step_batched(&s, nb, weights(e, src)?, st)?;
    e.set_step_inputs(&mut step, src.qkv, src.beta_raw, src.alpha)?;
    Ok(step)
}

/// The six outputs a packed step left, on the device.
fn step_parts(step: &GdnStep) -> Parts<'_> {
    [
        step.conv_out(),
        step.o(),
        step.final_state(),
        step.state().ring(),
        step.snap_conv(),
        step.snap_state(),
    ]
}

/// One eager packed step, fused (`gdn_step_fused`, one launch), judged
/// against `reference` on the device ([`Got`]; without one, read back).
///
/// # Errors
/// Every [`DeviceError`].
pub fn packed(
    e: &GdnEngine,
    src: &CaseSrc<'_>,
    reference: Option<Reference<'_>>,
) -> Result<Got<Six>, DeviceError> {
    let mut st = step(e, src)?;
    e.run_step(&mut st)?;
    got_six(e, step_parts(&st), reference)
}

/// One eager packed step as the three packed twins
/// (`gdn_conv1d_decode_tloop`, `gdn_prep_decode_rows`,
/// `gdn_scan_s128_tsnap`), judged as [`packed`] is.
///
/// # Errors
/// Every [`DeviceError`].
pub fn twins(
    e: &GdnEngine,
    src: &CaseSrc<'_>,
    reference: Option<Reference<'_>>,
) -> Result<Got<Six>, DeviceError> {
    let mut st = step(e, src)?;
    e.run_step_twins(&mut st)?;
    got_six(e, step_parts(&st), reference)
}

/// The inputs of a batched step over the sequences `ds` (one shape,
/// shared weights: those of `ds[0]`), each concatenated over the sequences
/// in the layout of `oracle::gdn::batch` (sequence `b` the `b`-th block):
/// made once per case and uploaded by every batched run.
#[derive(Debug)]
pub struct BatchInputs<'a> {
    /// The sequences.
    pub ds: &'a [CaseData],
    /// `[B][C][P]`.
    pub ring0: Vec<f32>,
    /// `[B][N]`.
    pub state0: Vec<f32>,
    /// `[B][t][C]`.
    pub qkv: Vec<f32>,
    /// `[B][t][num_v]`.
    pub beta_raw: Vec<f32>,
    /// `[B][t][num_v]`.
    pub alpha: Vec<f32>,
}

impl<'a> BatchInputs<'a> {
    /// `ds`'s inputs concatenated (at least one sequence).
    pub fn new(ds: &'a [CaseData]) -> BatchInputs<'a> {
        let cat = |f: &dyn Fn(&CaseData) -> &[f32]| {
            let mut v = POOL.take(ds.iter().map(|d| f(d).len()).sum());
            let mut at = 0;
            for d in ds {
                let part = f(d);
                v[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            v
        };
        BatchInputs {
            ds,
            ring0: cat(&|d| &d.ring0),
            state0: cat(&|d| &d.state0),
            qkv: cat(&|d| &d.qkv),
            beta_raw: cat(&|d| &d.beta_raw),
            alpha: cat(&|d| &d.alpha),
        }
    }

    /// The concatenations as a case's data on the host (the weights and
    /// parameters of the first sequence).
    pub fn src(&self) -> CaseSrc<'_> {
        CaseSrc {
            batch: self.ds.len(),
            ring0: Src::Host(&self.ring0),
            state0: Src::Host(&self.state0),
            qkv: Src::Host(&self.qkv),
            beta_raw: Src::Host(&self.beta_raw),
            alpha: Src::Host(&self.alpha),
            ..CaseSrc::host(&self.ds[0])
        }
    }

    /// Hands the concatenations back to the host pool.
    pub fn give_back(self) {
        for v in [self.ring0, self.state0, self.qkv, self.beta_raw, self.alpha] {
            POOL.give(v);
        }
    }
}

/// The six outputs of a batched step, each over all its sequences
/// (`[B][...]`, the layout of `oracle::gdn::batch`), as read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchSix {
    /// The outputs, sequence `b` the `b`-th of `batch` equal blocks of each.
    pub all: Six,
    /// Sequences.
    pub batch: usize,
}

impl BatchSix {
    /// Sequence `b`'s six outputs, in [`Six::parts`] order.
    pub fn parts(&self, b: usize) -> [&[f32]; 6] {
        self.all.parts().map(|v| {
            let per = v.len() / self.batch;
            &v[b * per..(b + 1) * per]
        })
    }

    /// The sequences `seqs` laid out as a batched step's outputs.
    pub fn from_seqs(seqs: &[Six]) -> BatchSix {
        let cat = |f: &dyn Fn(&Six) -> &[f32]| -> Vec<f32> {
            seqs.iter().flat_map(|s| f(s).iter().copied()).collect()
        };
        BatchSix {
            all: Six {
                conv_out: cat(&|s| &s.conv_out),
                o: cat(&|s| &s.o),
                state: cat(&|s| &s.state),
                ring: cat(&|s| &s.ring),
                snap_conv: cat(&|s| &s.snap_conv),
                snap_state: cat(&|s| &s.snap_state),
            },
            batch: seqs.len(),
        }
    }
}

/// A batched step that ran, its outputs on the device: eagerly, or as the
/// replay of the CUDA graph it was captured in.
#[derive(Debug)]
pub enum Ran {
    /// Launched eagerly.
    Eager(GdnStep),
    /// Captured (nothing ran) and replayed once.
    Graph(GdnGraph),
}

impl Ran {
    /// The step (its buffers hold the outputs).
    pub fn step(&self) -> &GdnStep {
        match self {
            Ran::Eager(s) => s,
            Ran::Graph(g) => g.step(),
        }
    }

    /// The six outputs over all sequences, on the device.
    pub fn parts(&self) -> Parts<'_> {
        step_parts(self.step())
    }
}

/// The sequences of `src` (a batch: [`BatchInputs::src`], or those
/// uploaded, [`OnDevice`]) in one batched fused step through `entry`
/// (`gdn_step_fused`, `gdn_step_fused_c2` or the persistent entry over
/// `B` sequences, the layout of `oracle::gdn::batch`), left on the
/// device. With `graph`, the step is captured in a CUDA graph (nothing
/// runs) and the graph replayed once instead of an eager launch.
///
/// # Errors
/// Every [`DeviceError`].
pub fn batched_ran(
    e: &GdnEngine,
    src: &CaseSrc<'_>,
    entry: GdnFusedEntry,
    graph: bool,
) -> Result<Ran, DeviceError> {
    let mut step = step(e, src)?;
    e.set_step_entry(&mut step, Some(entry))?;
    if graph {
        let g = e.capture_step(step)?;
        g.launch()?;
        Ok(Ran::Graph(g))
    } else {
        e.run_step(&mut step)?;
        Ok(Ran::Eager(step))
    }
}

/// A batched run's outputs judged against `reference` (another batched
/// run's, on the device): [`Got::Same`] when all six are bit-identical,
/// else (or without a reference) read back.
///
/// # Errors
/// Every [`DeviceError`].
pub fn batch_got(
    e: &GdnEngine,
    ran: &Ran,
    batch: usize,
    reference: Option<Reference<'_>>,
) -> Result<Got<BatchSix>, DeviceError> {
    let b = |all| BatchSix { all, batch };
    Ok(match got_six(e, ran.parts(), reference)? {
        Got::Same => Got::Same,
        Got::Read(all) => Got::Read(b(all)),
        Got::Audited { got, same } => Got::Audited { got: b(got), same },
    })
}

/// The outputs of [`graph`]: two replays and the capture-time buffers.
#[derive(Clone, Debug)]
pub struct GraphRun {
    /// Replay 1, after rebinding the ring, canonical and alt to fresh
    /// buffers (alt poisoned with [`ALT_POISON`]).
    pub rebound: Got<Six>,
    /// Replay 2, after exchanging canonical and alt (and rewriting the
    /// ring, the initial state into the new canonical and the poison into
    /// the new alt).
    pub swapped: Got<Six>,
    /// The buffers the graph was captured with, `[ring, canonical, alt]`,
    /// read after both replays: the replays must not have touched them.
    pub capture_time: [Vec<f32>; 3],
}

/// The packed step captured in a CUDA graph and replayed twice on rebound
/// buffers, as seed 003's `graph_rebind` gate does: capture on the step's
/// own buffers (nothing runs), rebind to fresh buffers and replay, then
/// swap canonical and alt, rewrite the initial data, and replay again.
/// Each replay is judged against `reference` on the device ([`Got`];
/// without one, read back) before the next one overwrites its outputs.
///
/// # Errors
/// Every [`DeviceError`].
pub fn graph(
    e: &GdnEngine,
    src: &CaseSrc<'_>,
    reference: Option<Reference<'_>>,
) -> Result<GraphRun, DeviceError> {
    // A device memset, made only by the cases that run graphs.
    let poison = e.filled(src.shape.state_len(), ALT_POISON)?;
    let mut g = e.capture_step(step(e, src)?)?;
    let old = g.rebind(
        e,
        e.make_state_buffer(src.ring0)?,
        e.make_state_buffer(src.state0)?,
        e.make_state_buffer(&poison)?,
    )?;
    g.launch()?;
    let rebound = got_six(e, step_parts(g.step()), reference)?;
    g.swap_slots(e)?;
    g.write_state(e, src.ring0, src.state0, Some(Src::Device(&poison)))?;
    g.launch()?;
    let swapped = got_six(e, step_parts(g.step()), reference)?;
    let [r, c, a] = &old;
    Ok(GraphRun {
        rebound,
        swapped,
        capture_time: [down(e, r)?, down(e, c)?, down(e, a)?],
    })
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
    fn upload(&self, e: &GdnEngine) -> Result<GdnHeads, DeviceError> {
        Ok(GdnHeads {
            q: e.upload(&self.q)?,
            k: e.upload(&self.k)?,
            v: e.upload(&self.v)?,
            beta: e.upload(&self.beta)?,
            g: e.upload(&self.g)?,
        })
    }
    fn parts(&self) -> [(&'static str, &[f32]); 5] {
        [
            ("q", &self.q),
            ("k", &self.k),
            ("v", &self.v),
            ("beta", &self.beta),
            ("g", &self.g),
        ]
    }
}

/// `b`'s elements, read back into a vector of the host pool.
fn down(e: &GdnEngine, b: &Buffer<f32>) -> Result<Vec<f32>, DeviceError> {
    let mut v = POOL.take(b.len());
    e.download_into(b, &mut v)?;
    Ok(v)
}

/// Each per-row kernel on its own, fed the oracle's inputs, for every row
/// of `d` (row `r` through table half `r % 2`): conv (its output and the
/// ring), prep (q, k, v, beta, g), scan (o and the state it writes), each
/// compared with the oracle's function ([`Bits::NanAny`]).
///
/// # Errors
/// Every [`DeviceError`].
pub fn per_row_kernels(e: &GdnEngine, d: &CaseData) -> Result<Vec<Diff>, DeviceError> {
    let s = d.shape;
    let (c, nv, vd) = (s.conv_dim(), s.num_v(), s.value_dim());
    let w = weights(e, &CaseSrc::host(d))?;
    let mut st = e.new_state(&s, &d.ring0, &d.state0, None)?;
    let mut ring = d.ring0.clone();
    let mut bufs = [d.state0.clone(), vec![0f32; s.state_len()]];
    let mut diffs = Vec::new();
    let mut cmp = |what: String, got: &[f32], want: &[f32]| {
        diffs.push(compare(&what, got, want, Bits::NanAny));
    };
    for r in 0..s.t() {
        let x = &d.qkv[r * c..(r + 1) * c];
        let mut want_out = vec![0f32; c];
        conv1d_row(&s, x, &d.conv_w, &mut ring, &mut want_out).expect("generated shapes fit");
        let mut out = e.alloc_output::<f32>(c)?;
        e.conv_row(&s, &e.upload(x)?, &w, &mut st, r, &mut out)?;
        cmp(format!("row {r} conv out"), &down(e, &out)?, &want_out);
        cmp(format!("row {r} conv ring"), &down(e, st.ring())?, &ring);

        let (br, al) = (
            &d.beta_raw[r * nv..(r + 1) * nv],
            &d.alpha[r * nv..(r + 1) * nv],
        );
        let mut want = HostHeads {
            q: vec![0.0; vd],
            k: vec![0.0; vd],
            v: vec![0.0; vd],
            beta: vec![0.0; nv],
            g: vec![0.0; nv],
        };
        prep_row(&s, &d.params(), &want_out, br, al, &mut want.as_mut())
            .expect("generated shapes fit");
        let mut heads = e.alloc_heads(&s, 1)?;
        let (cv, bv, av) = (e.upload(&want_out)?, e.upload(br)?, e.upload(al)?);
        e.prep_row(&s, &w, &cv, &bv, &av, &mut heads)?;
        let got = [&heads.q, &heads.k, &heads.v, &heads.beta, &heads.g];
        for (g, (name, want)) in got.iter().zip(want.parts()) {
            cmp(format!("row {r} prep {name}"), &down(e, g)?, want);
        }

        let [b0, b1] = &mut bufs;
        let io = if r % 2 == 0 {
            StateIo::Alternate { src: b0, dst: b1 }
        } else {
            StateIo::Alternate { src: b1, dst: b0 }
        };
        let mut want_o = vec![0f32; vd];
        scan_row(&s, &want.as_heads(), d.scale, io, &mut want_o).expect("generated shapes fit");
        let mut o = e.alloc_output::<f32>(vd)?;
        e.scan_row(&s, &want.upload(e)?, d.scale, &mut st, r, &mut o)?;
        cmp(format!("row {r} scan o"), &down(e, &o)?, &want_o);
        cmp(
            format!("row {r} scan state"),
            &down(e, st.after_row(r))?,
            &bufs[(r + 1) % 2],
        );
    }
    Ok(diffs)
}
