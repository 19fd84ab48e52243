//! [`Buffer`]: a device array, optionally inside a guard band.

use super::deadline::{alive, settle};
use super::error::{DeviceError, Result};
use cudarc::driver::{
    result as drv, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Bytes of guard band before and after a guarded output.
pub const GUARD_BYTES: usize = 4096;
/// The byte every guard band is filled with.
pub const GUARD_SENTINEL: u8 = 0xA5;
/// The byte a guarded output's own elements are poisoned with before the
/// launch: `0xFF` is NaN as f32 (`0xFFFFFFFF`) and as e4m3, so an element the
/// kernel failed to write fails any comparison.
pub const POISON: u8 = 0xFF;
/// The byte an input's guard bands are filled with (an input an engine's
/// `upload` copies, or `alloc_input` makes, with guards on; the FP8
/// quantizer's outputs once checked, handed on to the MMQ; an
/// intermediate's are [`INTERMEDIATE_BAND`]). `0xFF` is NaN
/// as f32, f16, bf16, e4m3 and e5m2 (OCP OFP8 v1.0, Table 1): a kernel that
/// reads past an input's end and lets what it read into a result makes
/// that result NaN, where the memory past a plain allocation often holds
/// zeros that a zero multiplier or a zero-filled tail would have hidden.
/// As a signed integer it is -1; the one integer input an engine uploads,
/// MoE's expert ids, refuses -1 as out of range (a failing row).
pub const INPUT_BAND: u8 = 0xFF;
/// The 32-bit word an intermediate's guard bands repeat (an engine's
/// `alloc_intermediate`), and those of an f32 buffer the kernels read and
/// write in place from launch to launch (GDN's ring and states,
/// `make_in_place`); in memory, little-endian: `A5 A5 A5 FF`.
/// As f32 it is a NaN (sign set, exponent all ones, payload `0x25A5A5`),
/// so a read past an intermediate lets NaN into a result, as a read past
/// an input's [`INPUT_BAND`] does. As a value a kernel could store, it is
/// no float operation's result: the canonical NaN is `0x7FFFFFFF`
/// (PTX ISA, "Floating Point Instructions"), and a NaN passed through
/// unchanged (a copy, or `x != x ? x : ...`) from an input's band or an
/// output's poison is `0xFFFFFFFF`. So the check after the launches sees
/// every write past an intermediate but a copy of this very word, which
/// only a read past another intermediate's band yields (or an integer or
/// bit-cast store that builds it).
pub const INTERMEDIATE_BAND: u32 = 0xFFA5_A5A5;
/// The environment variable that turns inputs' guard bands off: `off`,
/// `0`, `false` or `no` (any case); anything else, or unset, keeps them.
/// Under compute-sanitizer an input must end where its allocation does,
/// so that memcheck reports a read past it whatever it reads. Off also
/// makes an intermediate an exact allocation (`alloc_intermediate`), and
/// an output a later launch reads once checked (`alloc_handed_on`: the
/// FP8 quantizer's `q` and `d`): a read or a write past either is then
/// memcheck's to see, not the guard check's.
pub const ENV_INPUT_BANDS: &str = "KERNEL_ORACLE_INPUT_BANDS";

/// Whether inputs made with guards on get [`INPUT_BAND`] bands: unless
/// [`ENV_INPUT_BANDS`] turns them off (read once per process).
pub fn input_bands() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var(ENV_INPUT_BANDS).map_or(true, |v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "off" | "0" | "false" | "no"
            )
        })
    })
}

/// A device array of `len` elements of `T`. When guarded, the allocation
/// holds [`GUARD_BYTES`] before and after the elements, filled with
/// [`GUARD_SENTINEL`] (an output), [`INPUT_BAND`] (an input) or
/// [`INTERMEDIATE_BAND`] (an intermediate), checked after each launch
/// that writes the buffer.
///
/// An output that passed its check and is read next by another launch of
/// a pipeline (the FP8 quantizer's codes and scales, read by the MMQ) is
/// handed on as an input: with [`input_bands`] on, its bands turn to
/// [`INPUT_BAND`], so a read past its ends meets NaN as any uploaded
/// input's does; handing it to a launch as writable again (the shim's
/// `view_mut`) turns them back to [`GUARD_SENTINEL`] first, so a stray
/// write of `0xFF` bytes past it is still seen. An f32 output that the
/// next launch reads before any check (GDN's conv output and heads) is an
/// intermediate, in [`INTERMEDIATE_BAND`] bands from the start.
/// [`Buffer::band`] tells which it holds.
#[derive(Debug)]
pub struct Buffer<T> {
    raw: CudaSlice<T>,
    front: usize,
    len: usize,
    /// The word the bands repeat now (meaningful when `front > 0`).
    band: AtomicU32,
    /// The word it was made with: of [`GUARD_SENTINEL`] bytes (an output),
    /// of [`INPUT_BAND`] bytes (an input) or [`INTERMEDIATE_BAND`].
    home: u32,
}

impl<T> Buffer<T> {
    pub(crate) fn plain(raw: CudaSlice<T>) -> Buffer<T> {
        let len = raw.len();
        Buffer::plain_len(raw, len)
    }

    /// The first `len` elements of `raw` (a zero-length buffer holds a
    /// one-element allocation: CUDA refuses zero bytes).
    fn plain_len(raw: CudaSlice<T>, len: usize) -> Buffer<T> {
        Buffer {
            raw,
            front: 0,
            len,
            band: AtomicU32::new(byte_word(GUARD_SENTINEL)),
            home: byte_word(GUARD_SENTINEL),
        }
    }

    /// Elements (not counting guard bands).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it sits inside guard bands.
    pub fn is_guarded(&self) -> bool {
        self.front != 0
    }

    /// The 32-bit word its guard bands repeat now: [`byte_word`] of
    /// [`GUARD_SENTINEL`] while it is a launch's output, of [`INPUT_BAND`]
    /// for an input or a checked output handed on as one;
    /// [`INTERMEDIATE_BAND`] for an intermediate; `None` when unguarded.
    pub fn band(&self) -> Option<u32> {
        self.is_guarded().then(|| self.band.load(Ordering::Relaxed))
    }

    /// After its check passed, with [`input_bands`] on: an output's bands
    /// become [`INPUT_BAND`] for the launch that reads it next (see
    /// [`Buffer`]); an input's, an intermediate's, and an unguarded
    /// buffer, stay as they are.
    /// Not for a buffer a CUDA graph writes: a replay writes it with no
    /// `view_mut` to turn the sentinel back.
    ///
    /// # Errors
    /// [`DeviceError::Driver`] (the bands' memsets).
    pub(crate) fn hand_on(&self) -> Result<()> {
        if self.front > 0
            && self.home == byte_word(GUARD_SENTINEL)
            && self.band.load(Ordering::Relaxed) != byte_word(INPUT_BAND)
            && input_bands()
        {
            self.set_band(byte_word(INPUT_BAND))?;
        }
        Ok(())
    }

    /// Fills both bands with `word` (on the buffer's own stream, the
    /// engine's, ordered before later launches) and records it.
    fn set_band(&self, word: u32) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let stream = self.raw.stream();
        let (base, _rec) = self.raw.device_ptr(stream);
        let (band, cu) = (self.front * size, stream.cu_stream());
        // SAFETY: both bands lie inside the allocation, made on `stream`.
        unsafe {
            fill_word(base, word, band, cu, "front guard band")?;
            fill_word(
                base + (band + self.len * size) as u64,
                word,
                band,
                cu,
                "back guard band",
            )?;
        }
        self.band.store(word, Ordering::Relaxed);
        Ok(())
    }

    /// The elements, as a cudarc view (kernel argument).
    pub fn view(&self) -> CudaView<'_, T> {
        self.raw.slice(self.front..self.front + self.len)
    }

    /// The device address of the first element (past the front band).
    pub(crate) fn device_addr(&self, stream: &Arc<CudaStream>) -> u64 {
        let (base, _rec) = self.raw.device_ptr(stream);
        base + (self.front * std::mem::size_of::<T>()) as u64
    }

    /// The elements as a launch's or a copy's writable argument. An
    /// output handed on as an input since its last check gets its
    /// [`GUARD_SENTINEL`] bands back first (stream ordered).
    ///
    /// # Errors
    /// [`DeviceError::Driver`] (the bands' memsets).
    pub(crate) fn view_mut(&mut self) -> Result<CudaViewMut<'_, T>> {
        if self.front > 0 && *self.band.get_mut() != self.home {
            self.set_band(self.home)?;
        }
        let (a, b) = (self.front, self.front + self.len);
        Ok(self.raw.slice_mut(a..b))
    }
}

/// The 32-bit word of four `byte`s (a byte band as [`Buffer::band`]
/// gives it).
pub const fn byte_word(byte: u8) -> u32 {
    u32::from_ne_bytes([byte; 4])
}

/// Fills `bytes` bytes from `at` with `word` repeated, stream ordered: one
/// byte memset when the word is four equal bytes, else a 32-bit one (`at`
/// and `bytes` then multiples of 4, as every band of an f32 buffer is).
///
/// # Safety
/// The range lies inside an allocation made on `cu`'s stream.
unsafe fn fill_word(
    at: u64,
    word: u32,
    bytes: usize,
    cu: cudarc::driver::sys::CUstream,
    what: &str,
) -> Result<()> {
    let b = word.to_le_bytes();
    if b == [b[0]; 4] {
        return drv::memset_d8_async(at, b[0], bytes, cu)
            .map_err(|e| DeviceError::driver(format!("cuMemsetD8Async ({what})"), e));
    }
    // Words that are not four equal bytes come only from
    // `alloc_intermediate` and `make_in_place`, whose buffers are f32 on a
    // 256-byte aligned base.
    assert!(
        at.is_multiple_of(4) && bytes.is_multiple_of(4),
        "{what}: a word band needs 4-byte alignment"
    );
    cudarc::driver::sys::cuMemsetD32Async(at, word, bytes / 4, cu)
        .result()
        .map_err(|e| DeviceError::driver(format!("cuMemsetD32Async ({what})"), e))
}

/// Copies `data` to a new (unguarded) device buffer; an empty slice gets a
/// one-element allocation of length 0 (CUDA refuses zero-byte
/// allocations; nothing reads it).
pub(crate) fn upload<T: DeviceRepr>(stream: &Arc<CudaStream>, data: &[T]) -> Result<Buffer<T>> {
    alive()?;
    if data.is_empty() {
        return alloc(stream, 0, false);
    }
    // A copy from pageable host memory may wait for the stream: only
    // after the stream's earlier work, under the deadline.
    settle(stream, "cuStreamSynchronize (before cuMemcpyHtoD)")?;
    let raw = stream
        .clone_htod(data)
        .map_err(|e| DeviceError::driver(format!("cuMemcpyHtoD ({} elements)", data.len()), e))?;
    Ok(Buffer::plain(raw))
}

/// Where the elements of a buffer an engine makes or fills come from:
/// host memory, or another device buffer.
///
/// A host slice is uploaded: the copy from pageable memory waits for the
/// stream first (CUDA runtime API, "API synchronization behavior"), so
/// each costs a synchronisation and a staged copy. A device buffer is
/// copied device to device, stream ordered, with no synchronisation: a
/// harness that runs one case many ways uploads its inputs once and hands
/// every run the device copies.
#[derive(Clone, Copy, Debug)]
pub enum Src<'a, T = f32> {
    /// Host memory, uploaded.
    Host(&'a [T]),
    /// A device buffer's elements (not its guard bands), copied on the
    /// device.
    Device(&'a Buffer<T>),
}

impl<T> Src<'_, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Src::Host(h) => h.len(),
            Src::Device(d) => d.len(),
        }
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a, T> From<&'a [T]> for Src<'a, T> {
    fn from(h: &'a [T]) -> Self {
        Src::Host(h)
    }
}

impl<'a, T> From<&'a Vec<T>> for Src<'a, T> {
    fn from(h: &'a Vec<T>) -> Self {
        Src::Host(h)
    }
}

impl<'a, T, const N: usize> From<&'a [T; N]> for Src<'a, T> {
    fn from(h: &'a [T; N]) -> Self {
        Src::Host(h)
    }
}

impl<'a, T> From<&'a Buffer<T>> for Src<'a, T> {
    fn from(d: &'a Buffer<T>) -> Self {
        Src::Device(d)
    }
}

/// Copies `data` to a new device buffer between two [`GUARD_BYTES`] bands
/// of [`INPUT_BAND`] (an input under a gate, with guards on), or to a
/// plain one ([`upload`]) where [`input_bands`] is off.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn upload_banded<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    data: &[T],
) -> Result<Buffer<T>> {
    if !input_bands() {
        return upload(stream, data);
    }
    let mut b = alloc_banded(stream, data.len(), byte_word(INPUT_BAND), None)?;
    upload_into(stream, data, &mut b)?;
    Ok(b)
}

/// A new buffer of `len` zeroed elements that device copies will fill (an
/// input rewritten in place, row by row): between two [`GUARD_BYTES`]
/// bands of [`INPUT_BAND`] when `guards` is on and [`input_bands`], else
/// plain. `what` names it in a driver error.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn alloc_input<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
    guards: bool,
    what: &str,
) -> Result<Buffer<T>> {
    if guards && input_bands() {
        return alloc_banded(stream, len, byte_word(INPUT_BAND), Some(0));
    }
    alive()?;
    let raw = stream
        .alloc_zeros::<T>(len.max(1))
        .map_err(|e| DeviceError::driver(format!("cuMemAlloc ({what})"), e))?;
    Ok(Buffer::plain_len(raw, len))
}

/// A new device buffer holding `src`'s elements: an upload or a
/// device-to-device copy into a fresh allocation; between
/// [`INPUT_BAND`] bands when `banded` ([`upload_banded`]), else plain.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn make<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: Src<'_, T>,
    banded: bool,
) -> Result<Buffer<T>> {
    match src {
        Src::Host(h) if banded => upload_banded(stream, h),
        Src::Host(h) => upload(stream, h),
        Src::Device(d) => {
            let mut b = if banded && input_bands() {
                alloc_banded(stream, d.len(), byte_word(INPUT_BAND), None)?
            } else {
                alloc(stream, d.len(), false)?
            };
            copy_dtod(stream, d, &mut b)?;
            Ok(b)
        }
    }
}

/// A new f32 buffer that the kernels read and write in place from launch
/// to launch (GDN's conv ring and two state buffers): `src`'s elements, or
/// `len` zeros when `src` is `None`. With `guards` and [`input_bands`] on
/// it sits between bands of [`INTERMEDIATE_BAND`]: a read past it meets
/// NaN, as past an input's [`INPUT_BAND`], and the check after a launch
/// that writes it sees every write past it but one of that word, where
/// `0xFF` bands would miss a store of `0xFFFFFFFF` (a NaN passed through
/// from an input's band). Otherwise plain, as [`make`] and [`alloc_input`]
/// make it. `what` names it in a driver error.
///
/// # Errors
/// [`DeviceError::ArgLen`] if `src`'s length is not `len`;
/// [`DeviceError::Driver`].
pub(crate) fn make_in_place(
    stream: &Arc<CudaStream>,
    src: Option<Src<'_, f32>>,
    len: usize,
    guards: bool,
    what: &str,
) -> Result<Buffer<f32>> {
    if let Some(s) = src.filter(|s| s.len() != len) {
        return Err(DeviceError::ArgLen {
            arg: "in-place buffer source",
            want: len,
            got: s.len(),
        });
    }
    if !(guards && input_bands()) {
        return match src {
            Some(s) => make(stream, s, false),
            None => alloc_input(stream, len, false, what),
        };
    }
    let zeros = src.is_none().then_some(0);
    let mut b = alloc_banded(stream, len, INTERMEDIATE_BAND, zeros)?;
    if let Some(s) = src {
        fill(stream, s, &mut b)?;
    }
    Ok(b)
}

/// Copies `src`'s elements into `buf` (stream ordered): an upload
/// ([`upload_into`]) or a device-to-device copy.
///
/// # Errors
/// [`DeviceError::ArgLen`] if the lengths differ (nothing copied);
/// [`DeviceError::Driver`].
pub(crate) fn fill<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: Src<'_, T>,
    buf: &mut Buffer<T>,
) -> Result<()> {
    match src {
        Src::Host(h) => upload_into(stream, h, buf),
        Src::Device(d) => copy_dtod(stream, d, buf),
    }
}

/// Device-to-device copy of `src`'s elements into `dst`'s (stream
/// ordered, no synchronisation).
///
/// # Errors
/// [`DeviceError::ArgLen`] if the lengths differ (nothing copied);
/// [`DeviceError::Driver`].
pub(crate) fn copy_dtod<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    src: &Buffer<T>,
    dst: &mut Buffer<T>,
) -> Result<()> {
    if src.len() != dst.len() {
        return Err(DeviceError::ArgLen {
            arg: "copy destination",
            want: src.len(),
            got: dst.len(),
        });
    }
    if src.is_empty() {
        return Ok(());
    }
    alive()?;
    stream
        .memcpy_dtod(&src.view(), &mut dst.view_mut()?)
        .map_err(|e| DeviceError::driver(format!("cuMemcpyDtoD ({} elements)", src.len()), e))
}

/// A new (unguarded) buffer of `len` f32 elements, each `value` (bit for
/// bit, NaN payloads included): one `cuMemsetD32Async`, no host copy.
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn filled(stream: &Arc<CudaStream>, len: usize, value: f32) -> Result<Buffer<f32>> {
    let b = alloc::<f32>(stream, len, false)?;
    if len > 0 {
        let (base, _rec) = b.raw.device_ptr(stream);
        // SAFETY: `len` 32-bit words from `base` lie inside the allocation
        // made above on `stream`.
        let r = unsafe {
            cudarc::driver::sys::cuMemsetD32Async(base, value.to_bits(), len, stream.cu_stream())
        };
        r.result()
            .map_err(|e| DeviceError::driver(format!("cuMemsetD32Async ({len} words)"), e))?;
    }
    Ok(b)
}

/// Copies `data` into `buf` (stream ordered).
///
/// # Errors
/// [`DeviceError::ArgLen`] if the lengths differ; [`DeviceError::Driver`].
pub(crate) fn upload_into<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    data: &[T],
    buf: &mut Buffer<T>,
) -> Result<()> {
    if data.len() != buf.len() {
        return Err(DeviceError::ArgLen {
            arg: "upload destination",
            want: data.len(),
            got: buf.len(),
        });
    }
    if data.is_empty() {
        return Ok(());
    }
    alive()?;
    settle(stream, "cuStreamSynchronize (before cuMemcpyHtoD)")?;
    stream
        .memcpy_htod(data, &mut buf.view_mut()?)
        .map_err(|e| DeviceError::driver(format!("cuMemcpyHtoD ({} elements)", data.len()), e))
}

/// Copies `buf`'s elements back and synchronises the stream.
///
/// # Errors
/// [`DeviceError::Driver`], including a fault of an earlier launch.
pub(crate) fn download<T: DeviceRepr + Default + Clone>(
    stream: &Arc<CudaStream>,
    buf: &Buffer<T>,
) -> Result<Vec<T>> {
    let mut out = vec![T::default(); buf.len()];
    download_into(stream, buf, &mut out)?;
    Ok(out)
}

/// Copies `buf`'s elements into `out` and synchronises the stream: every
/// element of `out` is written, or an error returned.
///
/// # Errors
/// [`DeviceError::ArgLen`] if the lengths differ (nothing is copied);
/// [`DeviceError::Driver`], including a fault of an earlier launch.
pub(crate) fn download_into<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    buf: &Buffer<T>,
    out: &mut [T],
) -> Result<()> {
    if out.len() != buf.len() {
        return Err(DeviceError::ArgLen {
            arg: "download destination",
            want: buf.len(),
            got: out.len(),
        });
    }
    settle(stream, "cuStreamSynchronize (before cuMemcpyDtoH)")?;
    if !out.is_empty() {
        stream.memcpy_dtoh(&buf.view(), out).map_err(|e| {
            DeviceError::driver(format!("cuMemcpyDtoH ({} elements)", buf.len()), e)
        })?;
    }
    settle(stream, "cuStreamSynchronize (after cuMemcpyDtoH)")?;
    Ok(())
}

fn guard_elems<T>() -> usize {
    GUARD_BYTES.div_ceil(std::mem::size_of::<T>().max(1))
}

/// Allocates `len` elements; guarded (bands filled, elements poisoned) or
/// plain and uninitialised.
pub(crate) fn alloc<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
    guarded: bool,
) -> Result<Buffer<T>> {
    if guarded {
        return alloc_banded(stream, len, byte_word(GUARD_SENTINEL), Some(POISON));
    }
    alive()?;
    let size = std::mem::size_of::<T>();
    // SAFETY: plain memory is written by the kernel before anything reads
    // it (the ABI writes outputs in full), or by the caller's copy.
    let raw: CudaSlice<T> = unsafe { stream.alloc(len.max(1)) }
        .map_err(|e| DeviceError::driver(format!("cuMemAlloc ({} bytes)", len * size), e))?;
    Ok(Buffer::plain_len(raw, len))
}

/// Allocates an intermediate: an f32 output of one launch that a later
/// launch of the same pipeline reads before any check runs in between
/// (GDN's conv output, read by the prep, and its heads, read by the scan).
/// With guards on, its elements are poisoned as an output's (`0xFF`), and:
/// - with [`input_bands`] on, it sits between bands of
///   [`INTERMEDIATE_BAND`], a NaN: a read past it meets NaN, as past an
///   uploaded input, and the check after the launches sees every write
///   past it but one of that very word;
/// - with them off (under compute-sanitizer), it is an exact allocation,
///   as an input is then, so that memcheck reports a read past it.
///
/// With guards off, as [`alloc`].
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn alloc_intermediate(
    stream: &Arc<CudaStream>,
    len: usize,
    guarded: bool,
) -> Result<Buffer<f32>> {
    if !guarded {
        return alloc(stream, len, false);
    }
    if input_bands() {
        return alloc_banded(stream, len, INTERMEDIATE_BAND, Some(POISON));
    }
    alloc_exact_poisoned(stream, len)
}

/// Allocates an output that a later launch reads as its input once the
/// check after its own launch passed (the FP8 quantizer's `q` and `d`,
/// read by the MMQ; see [`Buffer::hand_on`]):
/// - with guards and [`input_bands`] on, as [`alloc`] makes a guarded
///   output (its bands become [`INPUT_BAND`] when it is handed on);
/// - with guards on and input bands off (under compute-sanitizer), an
///   exact allocation, poisoned: the reading launch then finds the end of
///   the allocation where the elements end, so memcheck reports a read
///   past them, which an output's own bands (inside the allocation) would
///   hide; a write past it is memcheck's to see too;
/// - with guards off, as [`alloc`].
///
/// # Errors
/// [`DeviceError::Driver`].
pub(crate) fn alloc_handed_on<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
    guarded: bool,
) -> Result<Buffer<T>> {
    if guarded && !input_bands() {
        return alloc_exact_poisoned(stream, len);
    }
    alloc(stream, len, guarded)
}

/// Allocates exactly `len` elements (one, left as it is, when `len` is 0:
/// CUDA refuses zero bytes), every byte of the `len` elements [`POISON`],
/// no bands.
///
/// # Errors
/// [`DeviceError::Driver`].
fn alloc_exact_poisoned<T: DeviceRepr>(stream: &Arc<CudaStream>, len: usize) -> Result<Buffer<T>> {
    let b = alloc::<T>(stream, len, false)?;
    if len > 0 {
        let (base, _rec) = b.raw.device_ptr(stream);
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: the elements lie inside the allocation made on `stream`.
        unsafe { drv::memset_d8_async(base, POISON, bytes, stream.cu_stream()) }
            .map_err(|e| DeviceError::driver("cuMemsetD8Async (poison)", e))?;
    }
    Ok(b)
}

/// Allocates `len` elements between two [`GUARD_BYTES`] bands of the
/// word `band` repeated; the elements set to `fill`'s byte, or left for
/// the caller's copy (`None`).
fn alloc_banded<T: cudarc::driver::DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
    band: u32,
    fill: Option<u8>,
) -> Result<Buffer<T>> {
    alive()?;
    let size = std::mem::size_of::<T>();
    let front = guard_elems::<T>();
    let total = len + 2 * front;
    // SAFETY: the bands are filled below; the elements too, or by the
    // caller's copy before any launch reads them.
    let raw: CudaSlice<T> = unsafe { stream.alloc(total) }
        .map_err(|e| DeviceError::driver(format!("cuMemAlloc ({} bytes)", total * size), e))?;
    {
        let (base, _rec) = raw.device_ptr(stream);
        let cu = stream.cu_stream();
        // SAFETY: every range lies inside the allocation made above on `stream`.
        unsafe {
            fill_word(base, band, total * size, cu, "guard bands")?;
            if let Some(p) = fill {
                drv::memset_d8_async(base + (front * size) as u64, p, len * size, cu)
                    .map_err(|e| DeviceError::driver("cuMemsetD8Async (poison)", e))?;
            }
        }
    }
    Ok(Buffer {
        raw,
        front,
        len,
        band: AtomicU32::new(band),
        home: band,
    })
}

/// An output whose guard bands can be checked, whatever its element type
/// (so one list can name a call's `u8`, `u64` and `f32` outputs).
pub(crate) trait Guarded {
    /// Where this buffer's bands lie and what they hold; `None` for an
    /// unguarded buffer.
    fn band_span(&self, stream: &Arc<CudaStream>) -> Option<BandSpan>;
}

/// A guarded buffer's bands: `(allocation base, band bytes, element
/// bytes, band word)`.
pub(crate) type BandSpan = (u64, usize, usize, u32);

impl<T> Guarded for Buffer<T> {
    fn band_span(&self, stream: &Arc<CudaStream>) -> Option<BandSpan> {
        if self.front == 0 {
            return None;
        }
        let size = std::mem::size_of::<T>();
        let (base, _rec) = self.raw.device_ptr(stream);
        Some((
            base,
            self.front * size,
            self.len * size,
            self.band.load(Ordering::Relaxed),
        ))
    }
}

/// After launches that wrote `outputs` (each with its argument name): when
/// `guards` is on, gathers every guarded output's two bands into one
/// device staging buffer (device-to-device copies queued after the
/// launches), reads it back in one copy, synchronises, and checks each
/// output's bands in order; when off, does nothing, so a launch-only call
/// stays free of synchronisation. One read-back per call, whatever the
/// number of outputs (the fuzzers check several outputs after every
/// launch).
///
/// # Errors
/// [`DeviceError::Driver`] (a fault of the launches shows here);
/// [`DeviceError::GuardClobbered`] for the first output, in order, whose
/// band changed.
pub(crate) fn check_outputs(
    stream: &Arc<CudaStream>,
    guards: bool,
    outputs: &[(&dyn Guarded, &'static str)],
) -> Result<()> {
    if !guards {
        return Ok(());
    }
    let spans: Vec<(BandSpan, &'static str)> = outputs
        .iter()
        .filter_map(|(b, arg)| b.band_span(stream).map(|s| (s, *arg)))
        .collect();
    let total: usize = spans.iter().map(|((_, band, _, _), _)| 2 * band).sum();
    if total == 0 {
        return settle(stream, "cuStreamSynchronize");
    }
    // SAFETY: every byte of the staging buffer is written by the copies
    // below before the read-back.
    let staging: CudaSlice<u8> = unsafe { stream.alloc(total) }.map_err(|e| {
        DeviceError::driver(format!("cuMemAlloc ({total} bytes, guard staging)"), e)
    })?;
    let mut host = vec![0u8; total];
    {
        let (dst, _rec) = staging.device_ptr(stream);
        let cu = stream.cu_stream();
        let mut at = 0u64;
        for &((base, band, len_bytes, _), _) in &spans {
            // SAFETY: both bands lie inside their allocation (made on
            // `stream`), the destinations inside the staging buffer.
            unsafe {
                drv::memcpy_dtod_async(dst + at, base, band, cu)
                    .map_err(|e| DeviceError::driver("cuMemcpyDtoDAsync (front guard band)", e))?;
                drv::memcpy_dtod_async(
                    dst + at + band as u64,
                    base + (band + len_bytes) as u64,
                    band,
                    cu,
                )
                .map_err(|e| DeviceError::driver("cuMemcpyDtoDAsync (back guard band)", e))?;
            }
            at += 2 * band as u64;
        }
        // The launches and the band copies first, under the deadline: a
        // copy to pageable host memory returns only once it has completed,
        // so issued behind a launch that never finishes it would block
        // forever (CUDA runtime API, "API synchronization behavior").
        settle(stream, "cuStreamSynchronize (guard check)")?;
        // SAFETY: the host vector outlives the synchronisation below.
        unsafe {
            drv::memcpy_dtoh_async(&mut host[..], dst, cu)
                .map_err(|e| DeviceError::driver("cuMemcpyDtoH (guard bands)", e))?;
        }
    }
    settle(
        stream,
        "cuStreamSynchronize (after cuMemcpyDtoH of the bands)",
    )?;
    let mut at = 0usize;
    for &((_, band, len_bytes, word), arg) in &spans {
        let bytes = &host[at..at + 2 * band];
        at += 2 * band;
        if let Some(offset) = first_changed(bytes, len_bytes, word) {
            return Err(DeviceError::GuardClobbered {
                arg,
                offset,
                len_bytes,
            });
        }
    }
    Ok(())
}

/// The first changed byte of a buffer's two bands, read back as `bands`
/// (the front band, then the back one, equal lengths) around `len_bytes`
/// bytes of elements, against `word` repeated from the allocation's base:
/// its offset from the elements' start (negative in the front band).
fn first_changed(bands: &[u8], len_bytes: usize, word: u32) -> Option<i64> {
    let band = bands.len() / 2;
    let fill = word.to_le_bytes();
    let want = |off: usize| fill[off % 4];
    let (front, back) = bands.split_at(band);
    if let Some(i) = front.iter().enumerate().position(|(i, &b)| b != want(i)) {
        return Some(i as i64 - band as i64);
    }
    back.iter()
        .enumerate()
        .position(|(i, &b)| b != want(band + len_bytes + i))
        .map(|i| (len_bytes + i) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bands of `word` as the device leaves them: written from the base.
    fn bands(word: u32, band: usize, len_bytes: usize) -> Vec<u8> {
        let at = |off: usize| word.to_le_bytes()[off % 4];
        let front = (0..band).map(at);
        front
            .chain((0..band).map(|i| at(band + len_bytes + i)))
            .collect()
    }

    #[test]
    fn untouched_bands_of_every_word_pass() {
        for word in [
            byte_word(GUARD_SENTINEL),
            byte_word(INPUT_BAND),
            INTERMEDIATE_BAND,
        ] {
            for len_bytes in [0, 4, 12, 4000] {
                assert_eq!(
                    first_changed(&bands(word, 64, len_bytes), len_bytes, word),
                    None
                );
            }
        }
    }

    #[test]
    fn a_write_past_either_end_is_found_at_its_offset() {
        let (band, len) = (64, 12);
        for word in [byte_word(GUARD_SENTINEL), INTERMEDIATE_BAND] {
            let mut b = bands(word, band, len);
            b[band + 5] = 0; // back band, byte 5: offset len + 5
            assert_eq!(first_changed(&b, len, word), Some(len as i64 + 5));
            b[band - 1] = 0; // the front band's last byte: offset -1
            assert_eq!(first_changed(&b, len, word), Some(-1));
        }
    }

    /// What an intermediate's bands do not see, and what they do: a store
    /// of a NaN passed through from an input's band or poison
    /// (`0xFFFFFFFF`) or of the canonical NaN changes them; only the word
    /// itself does not.
    #[test]
    fn an_intermediate_band_sees_every_nan_but_its_own_word() {
        let (band, len) = (16, 8);
        for (stored, seen) in [
            (0xFFFF_FFFFu32, true),
            (0x7FFF_FFFF, true),
            (0, true),
            (INTERMEDIATE_BAND, false),
        ] {
            let mut b = bands(INTERMEDIATE_BAND, band, len);
            b[band..band + 4].copy_from_slice(&stored.to_le_bytes());
            assert_eq!(
                first_changed(&b, len, INTERMEDIATE_BAND).is_some(),
                seen,
                "{stored:#x}"
            );
        }
        assert!(f32::from_bits(INTERMEDIATE_BAND).is_nan());
    }
}
