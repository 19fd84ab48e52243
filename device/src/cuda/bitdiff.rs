//! [`BitDiffs`]: whether two runs' outputs are bit-identical, decided on the
//! device (`cu/bit_diff.cu`), so that a judge reads back only the outputs
//! that differ from a reference run it has already read.
//!
//! A comparison is queued on the engine's stream after the launches that
//! wrote its operands ([`BitDiffs::queue`]); every comparison of a
//! [`BitDiffs`] is read with one copy ([`BitDiffs::read`]). The verdict is
//! of 32-bit words: a NaN equals only the same NaN bits, `-0` differs from
//! `+0` (the rule between two device runs; the judge reads back and
//! compares on the host wherever a word differs).

use super::buffer::Buffer;
use super::error::{DeviceError, Result};
use super::shim::{launch_config, launched, Shim};
use cudarc::driver::{CudaFunction, CudaStream, PushKernelArg};
use std::sync::Arc;

/// `cu/bit_diff.cu`, embedded at build time. It belongs to the harness: no
/// environment variable replaces it.
pub const BUILTIN_BIT_DIFF_CU: &str = include_str!("../../../cu/bit_diff.cu");
/// Its kernel.
pub const BIT_DIFF_KERNEL: &str = "bit_diff_u32";
/// Threads per CTA of a comparison launch (a multiple of 32: the kernel's
/// reduction shuffles over whole warps).
const THREADS: u32 = 256;
/// The most CTAs of one comparison launch (a grid-stride loop covers the
/// rest).
const MAX_CTAS: u64 = 1024;

/// One comparison's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitDiff {
    /// Elements compared.
    pub len: usize,
    /// 32-bit words that differ.
    pub count: u64,
    /// The first index that differs (`None` when none does).
    pub first: Option<u64>,
}

impl BitDiff {
    /// Whether every word agrees.
    pub fn same(&self) -> bool {
        self.count == 0
    }
}

/// Result words for several comparisons on one stream: pair `i` is
/// `[count, first]` at words `2 i`, `2 i + 1`, set to `[0, u64::MAX]` when
/// made. Made by an engine's `bit_diffs`; its comparisons are queued and
/// read on that engine's stream only (the verdicts are read after a wait
/// for that stream: a comparison queued on another would be read before it
/// ran, as "the same").
#[derive(Debug)]
pub struct BitDiffs {
    words: Buffer<u64>,
    lens: Vec<usize>,
    stream: Arc<CudaStream>,
}

/// The refusal of a [`BitDiffs`] used on another engine's stream.
fn other_stream() -> DeviceError {
    DeviceError::ArgLen {
        arg: "bit comparisons made on another engine's stream",
        want: 0,
        got: 1,
    }
}

impl BitDiffs {
    /// Room for `pairs` comparisons on `shim`'s stream (the initial words
    /// are uploaded after the stream's earlier work, which this waits for).
    ///
    /// # Errors
    /// [`DeviceError::Driver`], including a fault of an earlier launch.
    pub(crate) fn new(shim: &Shim, pairs: usize) -> Result<BitDiffs> {
        let init: Vec<u64> = (0..pairs).flat_map(|_| [0, u64::MAX]).collect();
        Ok(BitDiffs {
            words: super::buffer::upload(&shim.stream, &init)?,
            lens: Vec::with_capacity(pairs),
            stream: shim.stream.clone(),
        })
    }

    /// Queues the comparison of `a` with `b` (equal lengths) into the next
    /// free pair, after everything queued before on the stream; returns
    /// its index. Empty buffers launch nothing (their pair stays
    /// `[0, u64::MAX]`: the same).
    ///
    /// # Errors
    /// [`DeviceError::ArgLen`] when the lengths differ, every pair is
    /// taken, or `shim` is not on the stream these were made on (nothing is
    /// queued); [`DeviceError::Compile`] or [`DeviceError::Driver`] when
    /// the kernel cannot be built or launched.
    pub(crate) fn queue(&mut self, shim: &Shim, a: &Buffer<f32>, b: &Buffer<f32>) -> Result<usize> {
        if !Arc::ptr_eq(&self.stream, &shim.stream) {
            return Err(other_stream());
        }
        if a.len() != b.len() {
            return Err(DeviceError::ArgLen {
                arg: "bit comparison operand",
                want: a.len(),
                got: b.len(),
            });
        }
        let pair = self.lens.len();
        if 2 * pair + 2 > self.words.len() {
            return Err(DeviceError::ArgLen {
                arg: "bit comparison pairs",
                want: pair + 1,
                got: self.words.len() / 2,
            });
        }
        if !a.is_empty() {
            let f = shim.bit_diff()?;
            let n = a.len() as u64;
            let ctas = n.div_ceil(THREADS as u64).min(MAX_CTAS) as u32;
            let (av, bv) = (a.view(), b.view());
            let mut out = self.words.view_mut()?;
            let mut out = out.slice_mut(2 * pair..2 * pair + 2);
            let mut l = shim.stream.launch_builder(f);
            l.arg(&av).arg(&bv).arg(&n).arg(&mut out);
            // SAFETY: the ABI of cu/bit_diff.cu: two arrays of `n` 32-bit
            // words (f32 buffers of equal length, checked above) and the
            // two u64 result words of pair `pair` (in range, checked
            // above), all allocations of this context, the launch queued
            // on the stream every buffer here is ordered on (checked
            // above), so it runs after their writers and before their
            // stream-ordered frees; a 1-D grid of `THREADS`-thread CTAs,
            // whole warps as the kernel's shuffles need.
            launched(BIT_DIFF_KERNEL, unsafe {
                l.launch(launch_config((ctas, 1, 1), THREADS, 0))
            })?;
        }
        self.lens.push(a.len());
        Ok(pair)
    }

    /// Waits for the queued comparisons and reads every verdict, in
    /// queueing order (one copy).
    ///
    /// # Errors
    /// [`DeviceError::Driver`], including a fault of an earlier launch;
    /// [`DeviceError::ArgLen`] when `shim` is on another stream.
    pub(crate) fn read(&self, shim: &Shim) -> Result<Vec<BitDiff>> {
        if !Arc::ptr_eq(&self.stream, &shim.stream) {
            return Err(other_stream());
        }
        let words = shim.read_back(&self.words, "bit comparison verdicts")?;
        Ok(self
            .lens
            .iter()
            .enumerate()
            .map(|(i, &len)| BitDiff {
                len,
                count: words[2 * i],
                first: (words[2 * i + 1] != u64::MAX).then_some(words[2 * i + 1]),
            })
            .collect())
    }
}

/// Compiles and loads `cu/bit_diff.cu` on `shim`'s context for its device.
///
/// # Errors
/// [`DeviceError::Compile`], [`DeviceError::MissingKernel`],
/// [`DeviceError::Driver`].
pub(crate) fn load(shim: &Shim) -> Result<CudaFunction> {
    let source = super::source::KernelSource::builtin_named("cu/bit_diff.cu", BUILTIN_BIT_DIFF_CU);
    let target = super::shim::sm_target(shim.arch.0, shim.arch.1)?;
    let aux = shim.share(source, |_, _| Ok(target))?;
    aux.function(BIT_DIFF_KERNEL)
}
