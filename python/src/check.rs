//! The check drivers: any Python callable run through a contract's arms
//! and shapes with the case library's own generators and judges (the
//! same `CaseSpec`s, `reference`s and `Verdict`s as the CUDA and WGSL
//! gates), never a Python re-implementation.
//!
//! Every driver, for each shape (ragged ones first), each arm and each
//! seed:
//! 1. draws fresh inputs from the case's seed (new arrays on every call);
//! 2. hands the callable the inputs and an output array filled with NaN,
//!    so an element it does not write fails the comparison (rule
//!    `CMP-FINITE`: a NaN on either side fails). A float output's NaN is a
//!    signaling NaN with a payload none of the case's inputs holds
//!    (`Fill`), which no arithmetic produces: an element still holding
//!    it after the call was not written, and fails the case even where the
//!    contract's value is a NaN (any NaN passes there), unless the check
//!    leaves that element unjudged (`Breach::forgive`);
//! 3. compares the inputs after the call with copies taken before it, bit
//!    for bit: a callable that writes its inputs fails;
//! 4. judges the output with the contract's verdict (bit for bit in the
//!    exact arms and under a bit-exact schedule, by the written bound
//!    otherwise) and, for the FP8 GEMM, names the known schedules the
//!    output matches bit for bit (`judge::identify`);
//! 5. prints one row per case and, for every failure, what differs and a
//!    Python line that reruns exactly that case.
//!
//! A callable may raise `kernel_oracle.Refused` to decline a shape: the
//! case is counted as refused, not as a failure. Any other exception is a
//! failure of that case (`KeyboardInterrupt` and `SystemExit` stop the
//! check). A check in which no case was compared does not pass.
//!
//! Every driver checks its arguments before the first call: `seeds` and
//! `trials` through `Seeds::new`, every other count (`samples`,
//! `group`, `top_k`, an ulps count, ...) through `count`, so a zero
//! `trials`, an empty `seeds` list or a negative count is a `ValueError`
//! naming the argument, never a silent default or an `OverflowError`.

use crate::arrays::{array, to_vec};
use crate::conventions::{GgmlType, Schedule};
use crate::fp8;
use kernel_oracle::fp8_mmq::generate::Arm;
use kernel_oracle::fp8_mmq::judge::{
    reference, schedule_list, Identify, KernelOut, Verdict, RANDOM_RMS_REL_BOUND,
    RANDOM_RMS_REL_MIN_OUTPUTS,
};
use kernel_oracle::fp8_mmq::report::schedule_line;
use kernel_oracle::mul_mat;
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use oracle::compare::{Comparison, Mismatch};
use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit, PyValueError};
use pyo3::prelude::*;
use std::fmt::Write;
use std::time::Instant;

/// The FP8 block GEMM shapes `(in_f, out_f, m)` a check runs by default,
/// ragged first: unaligned weight rows (in_f % 16 != 0), a k tail with a
/// ragged out_f, a partial last scale column, three k blocks with two
/// scale rows (ceil(in_f/128) % 4 != 0 and out_f >= 256: a 128x128 scale
/// grid read with a padded leading dimension lands on the wrong scales),
/// a partial last scale row (and m = 200: a second, partial 128-row
/// tile of tokens), m = 1, then the gate's aligned shapes and one with
/// twelve k blocks.
pub const FP8_SHAPES: [(usize, usize, usize); 10] = [
    (1000, 130, 7),
    (272, 136, 40),
    (144, 128, 128),
    (384, 320, 200),
    (128, 200, 128),
    (129, 129, 1),
    (128, 128, 128),
    (256, 256, 64),
    (512, 384, 128),
    (1536, 512, 64),
];

/// The `mul_mat` shapes `(m, k, n)` a check runs by default, ragged first
/// (the CUDA gate's CI shapes with n cut): an f32-only k tail, m and n
/// off 64, m = n = 1, a ragged 197 x 67, an aligned one, then k = 32:
/// one block a row for the 32-element formats, so each output is one
/// block's product and a block scale lost (an f16 `d` flushed to zero
/// when subnormal) shows beyond any sum's bound. Each dtype runs the
/// shapes whose k is a multiple of its block.
pub const MUL_MAT_SHAPES: [(usize, usize, usize); 6] = [
    (70, 100, 9),
    (65, 768, 63),
    (1, 256, 1),
    (197, 512, 67),
    (64, 1024, 16),
    (256, 32, 4),
];

/// What a check found. Truthy when it passed: at least one case compared
/// and none failed.
#[pyclass(frozen, get_all, module = "kernel_oracle")]
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// The contract checked (`"fp8_block_gemm"`, `"mul_mat"`,
    /// `"gated_delta_rule"`, `"causal_conv1d_update"`,
    /// `"fp8_group_quant"`, `"moe_align_block_size"`, `"fused_moe_fp8"`,
    /// `"reshape_and_cache"`, ...).
    pub contract: String,
    /// Cases run (compared or refused).
    pub cases: usize,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases the callable refused (`kernel_oracle.Refused`).
    pub refused: usize,
    /// FP8 GEMM and fused MoE: the known schedules every compared case's
    /// output matched bit for bit (empty otherwise).
    pub identified: Vec<Schedule>,
    /// FP8 GEMM and fused MoE: the known schedules every compared EXACT,
    /// FOLD and CODES case matched (the arms where any f32 accumulation order is exact).
    pub identified_exact_arms: Vec<Schedule>,
    /// FP8 GEMM: the e4m3 weight codes (of the 253 observable) the
    /// callable's outputs decoded bit-exactly in CODES cases.
    pub codes_decoded_exactly: usize,
    /// One Python line per failed case that reruns it.
    pub reproductions: Vec<String>,
    /// Every failure's report (what differs, where, both values as bits).
    pub failures: Vec<String>,
    /// The whole printed report.
    pub text: String,
}

#[pymethods]
impl CheckReport {
    /// Passed: at least one case compared and none failed.
    #[getter]
    fn ok(&self) -> bool {
        self.failed == 0 && self.passed > 0
    }

    fn __bool__(&self) -> bool {
        self.ok()
    }

    fn __str__(&self) -> String {
        self.text.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "CheckReport(contract={:?}, cases={}, passed={}, failed={}, refused={})",
            self.contract, self.cases, self.passed, self.failed, self.refused
        )
    }
}

/// What a call that returned left to judge: its outputs in order, and how
/// it broke the calling contract (inputs written, outputs left unwritten).
pub(crate) type Returned = (Vec<Got>, Breach);

/// How a call that returned broke the calling contract, whatever its
/// outputs' values: the inputs it wrote, and the outputs it left partly
/// unwritten. A case with any breach fails (`is_empty` is false), and
/// [`failure_head`] says which.
#[derive(Clone, Debug, Default)]
pub(crate) struct Breach {
    /// The inputs the callable changed (by name).
    pub(crate) inputs: Vec<String>,
    /// The outputs it left partly unwritten.
    pub(crate) unwritten: Vec<Unwritten>,
}

/// The elements of one output still holding the sentinel NaN the check
/// filled it with after the call.
#[derive(Clone, Debug)]
pub(crate) struct Unwritten {
    /// The output's position (0 first).
    pub(crate) out: usize,
    /// Its shape.
    pub(crate) shape: Vec<usize>,
    /// The flat (C-order) indices of the elements left unwritten.
    pub(crate) at: Vec<usize>,
    /// The sentinel's bits (float32, or a 16-bit pattern).
    pub(crate) bits: u32,
    /// Whether the output is float32 (else 16-bit patterns).
    pub(crate) wide: bool,
}

impl Breach {
    /// No input written and no output left unwritten.
    pub(crate) fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.unwritten.is_empty()
    }

    /// Forgives the unwritten elements of output `out` that the contract
    /// leaves unjudged (`unjudged(flat index)`: a padded sequence's rows),
    /// dropping the output's entry when none is left.
    pub(crate) fn forgive(&mut self, out: usize, unjudged: impl Fn(usize) -> bool) {
        for u in self.unwritten.iter_mut().filter(|u| u.out == out) {
            u.at.retain(|&i| !unjudged(i));
        }
        self.unwritten.retain(|u| !u.at.is_empty());
    }

    /// The report's lines for the breaches.
    fn lines(&self, r: &mut String) {
        if !self.inputs.is_empty() {
            let _ = writeln!(
                r,
                "  the callable wrote its input(s): {} (inputs must be left as given)",
                self.inputs.join(", ")
            );
        }
        for u in &self.unwritten {
            let n: usize = u.shape.iter().product();
            let bits = if u.wide {
                format!("0x{:08X}", u.bits)
            } else {
                format!("0x{:04X}", u.bits)
            };
            let _ = writeln!(
                r,
                "  the callable left {} of {n} elements of output {} (shape {:?}) unwritten: they still hold the signaling NaN {bits} the check filled it with (first at {:?}); every judged element must be written, a NaN result too",
                u.at.len(),
                u.out,
                u.shape,
                unravel(u.at[0], &u.shape)
            );
        }
    }
}

/// The multi-index (C order) of flat index `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = i % n;
            i /= n;
        }
    }
    idx
}

/// Signaling NaNs (quiet bit clear, payload non-zero) a check fills its
/// float outputs with: no arithmetic produces a signaling NaN (every IEEE
/// operation quiets one), so an output element holding the sentinel after
/// the call was not written, unless it was copied from an input holding
/// the same bits, which [`Fill::new`] rules out by taking the first
/// candidate no input holds.
const F32_SENTINELS: [u32; 4] = [0x7FA5_A5A5, 0x7F8B_AD0F, 0x7F9C_3A5B, 0x7FB1_E2D4];
const BF16_SENTINELS: [u16; 4] = [0x7FA5, 0x7F8B, 0x7F9C, 0x7FB1];
const F16_SENTINELS: [u16; 4] = [0x7DA5, 0x7C8B, 0x7D9C, 0x7CB1];

/// The bits of a NaN that name its sentinel class: the payload without
/// the sign and the quiet bit, so that a sentinel negated (sign flips keep
/// a NaN signaling) or quieted (staged through a wider float, which every
/// conversion quiets) is still the sentinel. Masks of float32, bfloat16
/// and float16.
const F32_CLASS: u32 = 0x7FBF_FFFF;
const BF16_CLASS: u16 = 0x7FBF;
const F16_CLASS: u16 = 0x7DFF;

/// The sentinel NaNs of one case's float outputs, chosen so that none is
/// in the class ([`F32_CLASS`]) of a NaN of the case's inputs: float32
/// elements, 16-bit patterns read as bfloat16 and as float16, and what a
/// float32 NaN becomes in bfloat16 (truncated or rounded) and float16.
/// `None` where every candidate occurs (the output is then filled with
/// the format's quiet NaN, and elements left unwritten are caught only
/// where the contract's value is not a NaN).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fill {
    f32: Option<u32>,
    bf16: Option<u16>,
    f16: Option<u16>,
}

impl Fill {
    /// The sentinels of a case with these inputs.
    pub(crate) fn new(inputs: &[(&str, Input<'_, '_>)]) -> Fill {
        // The candidates' classes met among the inputs' NaNs.
        let mut w32 = [false; F32_SENTINELS.len()];
        let mut wb = [false; BF16_SENTINELS.len()];
        let mut wh = [false; F16_SENTINELS.len()];
        let mut meet16 = |b: u16| {
            for (seen, &c) in wb.iter_mut().zip(&BF16_SENTINELS) {
                *seen |= b & BF16_CLASS == c;
            }
            for (seen, &c) in wh.iter_mut().zip(&F16_SENTINELS) {
                *seen |= b & F16_CLASS == c;
            }
        };
        for (_, i) in inputs {
            match i {
                Input::F32(_, v) => {
                    for x in v.iter().filter(|x| x.is_nan()) {
                        let b = x.to_bits();
                        for (seen, &c) in w32.iter_mut().zip(&F32_SENTINELS) {
                            *seen |= b & F32_CLASS == c;
                        }
                        let rounded = b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16;
                        meet16((b >> 16) as u16);
                        meet16(rounded as u16);
                        meet16((0x7C00 | ((b >> 13) & 0x3FF)) as u16);
                    }
                }
                Input::U16(_, v) => {
                    for &b in v.iter() {
                        meet16(b);
                    }
                }
                _ => {}
            }
        }
        let free = |c: &[u16; 4], w: [bool; 4]| c.iter().zip(w).find(|(_, s)| !s).map(|(&b, _)| b);
        Fill {
            f32: F32_SENTINELS
                .iter()
                .zip(w32)
                .find(|(_, seen)| !seen)
                .map(|(&b, _)| b),
            bf16: free(&BF16_SENTINELS, wb),
            f16: free(&F16_SENTINELS, wh),
        }
    }
}

impl CheckReport {
    /// Counts one case and records what needs no judge: a refusal (a row)
    /// or an error (a row and a failure with `head` and `repro`). Returns
    /// the outputs and the breach of a call that returned.
    pub(crate) fn take(
        &mut self,
        out: &mut Out<'_>,
        called: Called,
        row: &str,
        head: &str,
        repro: &str,
    ) -> PyResult<Option<Returned>> {
        self.cases += 1;
        match called {
            Called::Output(got, written) => Ok(Some((got, written))),
            Called::Refused(msg) => {
                self.refused += 1;
                out.row(&format!("{row}  refused: {msg}"))?;
                Ok(None)
            }
            Called::Error(msg) => {
                out.row(&format!("{row}  FAIL  {msg}"))?;
                let r = format!("{head}\n  the callable {msg}\nreproduce:\n  {repro}");
                self.fail(out, r, repro.to_string())?;
                Ok(None)
            }
        }
    }

    /// Records a failed case: prints its report `r` and keeps it with its
    /// rerun line.
    pub(crate) fn fail(&mut self, out: &mut Out<'_>, r: String, repro: String) -> PyResult<()> {
        self.failed += 1;
        out.always(&r)?;
        self.failures.push(r);
        self.reproductions.push(repro);
        Ok(())
    }

    /// Prints the summary line, `"<contract>: N cases, ... refused;
    /// <extra>PASS"` (or `FAIL`), and keeps the printed text. A check
    /// that compared no case says why before its FAIL: no case ran (every
    /// case the arguments name was skipped, or none was named), or the
    /// callable refused every one.
    pub(crate) fn finish(mut self, mut out: Out<'_>, extra: &str) -> PyResult<CheckReport> {
        let why = if self.passed + self.failed > 0 {
            ""
        } else if self.cases == 0 {
            "no case ran (every case the arguments name was skipped, or none was named), and a check that compares no case does not pass; "
        } else {
            "the callable refused every case, and a check that compares no case does not pass; "
        };
        let summary = format!(
            "{}: {} cases, {} passed, {} FAILED, {} refused; {extra}{why}{}",
            self.contract,
            self.cases,
            self.passed,
            self.failed,
            self.refused,
            if self.ok() { "PASS" } else { "FAIL" }
        );
        out.always(&summary)?;
        self.text = out.text;
        Ok(self)
    }
}

/// Prints through Python's `print` (so pytest and notebooks capture it)
/// and keeps the text.
pub(crate) struct Out<'py> {
    print: Bound<'py, PyAny>,
    verbose: bool,
    pub(crate) text: String,
}

impl<'py> Out<'py> {
    pub(crate) fn new(py: Python<'py>, verbose: bool) -> PyResult<Out<'py>> {
        Ok(Out {
            print: py.import("builtins")?.getattr("print")?,
            verbose,
            text: String::new(),
        })
    }

    /// Prints `line` when verbose (rows), always keeping it.
    pub(crate) fn row(&mut self, line: &str) -> PyResult<()> {
        self.text.push_str(line);
        self.text.push('\n');
        if self.verbose {
            self.print.call1((line,))?;
        }
        Ok(())
    }

    /// Prints `line` whatever `verbose` says (failures, the summary).
    pub(crate) fn always(&mut self, line: &str) -> PyResult<()> {
        self.text.push_str(line);
        self.text.push('\n');
        self.print.call1((line,))?;
        Ok(())
    }
}

/// What a callable did with one case, before judging its output.
pub(crate) enum Called {
    /// It returned; the outputs it produced (returned, or written into the
    /// sentinel-filled buffers), in order, and how it broke the contract.
    Output(Vec<Got>, Breach),
    /// It raised `kernel_oracle.Refused` (the message).
    Refused(String),
    /// It raised something else, or returned something that is not an
    /// output (the message).
    Error(String),
}

/// The element type of an output the callable fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutKind {
    /// float32, handed filled with a signaling NaN ([`Fill`]).
    F32,
    /// uint8 codes, handed filled with `0x7F` (the e4m3 NaN code, which no
    /// check's data produce).
    U8,
    /// int32 indices and counts, handed filled with `i32::MIN` (no check's
    /// index or count).
    I32,
    /// uint16 bit patterns of a 16-bit float (bfloat16 or IEEE binary16:
    /// numpy has no bfloat16; the pattern is the format's quiet NaN, which
    /// names it), handed filled with a signaling NaN of the format
    /// ([`Fill`]), or that quiet NaN where none is free.
    U16(u16),
}

impl OutKind {
    /// The output buffer of element type `d`: float32 filled with NaN, or
    /// uint16 bit patterns (numpy has no bfloat16) filled with the format's
    /// quiet NaN.
    pub(crate) fn of(d: oracle::dtype::Dtype) -> OutKind {
        match d {
            oracle::dtype::Dtype::F32 => OutKind::F32,
            oracle::dtype::Dtype::Bf16 => OutKind::U16(oracle::bf16::NAN),
            oracle::dtype::Dtype::F16 => OutKind::U16(oracle::f16::NAN),
        }
    }

    /// The sentinel an output of this kind is handed filled with under
    /// `fill` and checked for after the call (float kinds), as its bits,
    /// or `None` (uint8 codes, int32 ids, or no free sentinel).
    fn sentinel(self, fill: &Fill) -> Option<u32> {
        match self {
            OutKind::F32 => fill.f32,
            OutKind::U16(q) if q == oracle::f16::NAN => fill.f16.map(u32::from),
            OutKind::U16(_) => fill.bf16.map(u32::from),
            OutKind::U8 | OutKind::I32 => None,
        }
    }

    /// The sentinel an output of this kind was handed filled with (as
    /// [`OutKind::array`] makes it, the candidate [`Fill`] chose): its
    /// first element's bits, where they are one of the kind's candidates
    /// and every element (`bytes`, native order) holds them; else `None`.
    fn handed_sentinel(self, bytes: &[u8]) -> Option<u32> {
        let first = match self {
            OutKind::F32 => u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?),
            OutKind::U16(_) => u32::from(u16::from_ne_bytes(bytes.get(..2)?.try_into().ok()?)),
            OutKind::U8 | OutKind::I32 => return None,
        };
        let candidate = match self {
            OutKind::F32 => F32_SENTINELS.contains(&first),
            OutKind::U16(q) if q == oracle::f16::NAN => {
                F16_SENTINELS.iter().any(|&c| u32::from(c) == first)
            }
            _ => BF16_SENTINELS.iter().any(|&c| u32::from(c) == first),
        };
        (candidate && all_bits(self, bytes, first)).then_some(first)
    }

    /// A new output of this kind and `shape` filled with its sentinel
    /// under `fill` (float32 NaN and the format's quiet NaN where no
    /// sentinel is free; `0x7F` codes; `i32::MIN` ids).
    pub(crate) fn array<'py>(
        self,
        py: Python<'py>,
        shape: &[usize],
        fill: &Fill,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n: usize = shape.iter().product();
        let s = self.sentinel(fill);
        Ok(match self {
            OutKind::F32 => {
                let v = s.map_or(f32::NAN, f32::from_bits);
                array(py, shape, vec![v; n])?.into_any()
            }
            OutKind::U8 => array(py, shape, vec![0x7Fu8; n])?.into_any(),
            OutKind::I32 => array(py, shape, vec![i32::MIN; n])?.into_any(),
            OutKind::U16(q) => {
                let v = s.map_or(q, |b| b as u16);
                array(py, shape, vec![v; n])?.into_any()
            }
        })
    }

    fn dtype(self) -> &'static str {
        match self {
            OutKind::F32 => "float32",
            OutKind::U8 => "uint8",
            OutKind::I32 => "int32",
            OutKind::U16(_) => "uint16",
        }
    }
}

/// One output as the callable left it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Got {
    /// A float32 output, C order.
    F32(Vec<f32>),
    /// A uint8 output, C order.
    U8(Vec<u8>),
    /// An int32 output, C order.
    I32(Vec<i32>),
    /// A uint16 output (16-bit float bit patterns), C order.
    U16(Vec<u16>),
}

impl Got {
    /// The float32 elements (a uint8 output gives none: the kinds are the
    /// caller's own).
    pub(crate) fn f32(&self) -> &[f32] {
        match self {
            Got::F32(v) => v,
            _ => &[],
        }
    }

    /// The uint8 elements (a float32 output gives none).
    pub(crate) fn u8(&self) -> &[u8] {
        match self {
            Got::U8(v) => v,
            _ => &[],
        }
    }

    /// The int32 elements (another kind gives none).
    pub(crate) fn i32(&self) -> &[i32] {
        match self {
            Got::I32(v) => v,
            _ => &[],
        }
    }

    /// The uint16 elements (another kind gives none).
    pub(crate) fn u16(&self) -> &[u16] {
        match self {
            Got::U16(v) => v,
            _ => &[],
        }
    }

    /// An output of element type `d` as its bits widened to 32: float32
    /// elements' own bits, or the uint16 patterns of bfloat16 and float16.
    pub(crate) fn bits(&self, d: oracle::dtype::Dtype) -> Vec<u32> {
        match d {
            oracle::dtype::Dtype::F32 => self.f32().iter().map(|v| v.to_bits()).collect(),
            _ => self.u16().iter().map(|&v| u32::from(v)).collect(),
        }
    }
}

/// The output element type named by a check's `out_dtype` argument
/// (torch's names, or `bf16`, `f16`, `half`, `f32`, `float`).
///
/// # Errors
/// `ValueError` naming the choices.
pub(crate) fn parse_out_dtype(s: &str) -> PyResult<oracle::dtype::Dtype> {
    kernel_oracle::dtype::parse_dtype(s).map_err(|e| PyValueError::new_err(format!("out_{e}")))
}

/// A row's or failure's "matches" list: `names` joined by `sep`, or
/// `none` when empty.
pub(crate) fn names_or(names: &[String], sep: &str, none: &str) -> String {
    if names.is_empty() {
        none.into()
    } else {
        names.join(sep)
    }
}

/// [`call_typed`] with float32 outputs only.
pub(crate) fn call<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    lead: Vec<Bound<'py, PyAny>>,
    inputs: &[(&str, Input<'_, 'py>)],
    out_shapes: &[&[usize]],
) -> PyResult<(Called, f64)> {
    let outs: Vec<(&[usize], OutKind)> = out_shapes.iter().map(|s| (*s, OutKind::F32)).collect();
    call_typed(py, f, lead, inputs, &outs)
}

/// Calls `f(*lead, *inputs, *outs)` with each of `outs` an array of its
/// shape and kind, filled with the kind's sentinel under the case's
/// [`Fill`] (an element the callable does not write then fails), then
/// reads the outputs and compares each input with its copy `before`. The
/// callable writes the outputs and returns None, or returns them: one
/// array for one output, a tuple or list of arrays in `outs`' order for
/// several.
pub(crate) fn call_typed<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    lead: Vec<Bound<'py, PyAny>>,
    inputs: &[(&str, Input<'_, 'py>)],
    outs: &[(&[usize], OutKind)],
) -> PyResult<(Called, f64)> {
    let fill = Fill::new(inputs);
    let mut arrays = Vec::new();
    for &(shape, kind) in outs {
        arrays.push(kind.array(py, shape, &fill)?);
    }
    let mut args = lead;
    for (_, i) in inputs {
        args.push(i.array());
    }
    args.extend(arrays.iter().cloned());
    call_args(py, f, args, inputs, outs, arrays)
}

/// Calls `f(*args)`, `args` holding the inputs and the output `arrays`
/// in the callable's order (an output handed with contents of its own,
/// as a KV cache it writes in place), then reads the outputs and compares
/// each input with its copy `before`, as [`call_typed`]: the callable
/// writes `arrays` and returns None, or returns new arrays of `outs`'
/// shapes and kinds (one, or a tuple or list in `outs`' order; an array
/// of the other byte order is read as its values). An output handed
/// wholly filled with its kind's sentinel under the case's [`Fill`] (as
/// [`OutKind::array`] makes it) is then searched for elements still
/// holding it: the breach's `unwritten`.
pub(crate) fn call_args<'py>(
    py: Python<'py>,
    f: &Bound<'py, PyAny>,
    args: Vec<Bound<'py, PyAny>>,
    inputs: &[(&str, Input<'_, 'py>)],
    outs: &[(&[usize], OutKind)],
    arrays: Vec<Bound<'py, PyAny>>,
) -> PyResult<(Called, f64)> {
    let bytes = |a: &Bound<'py, PyAny>| -> PyResult<Vec<u8>> {
        a.call_method0("tobytes")?.extract::<Vec<u8>>()
    };
    // The handed outputs as they were, so that a callable that writes them
    // and returns other arrays is caught (one of the two is not its output).
    let handed: Vec<Vec<u8>> = arrays.iter().map(bytes).collect::<PyResult<_>>()?;
    // The sentinel of each output handed wholly filled with it.
    let sentinels: Vec<Option<u32>> = outs
        .iter()
        .zip(&handed)
        .map(|(&(_, kind), h)| kind.handed_sentinel(h))
        .collect();
    let args = pyo3::types::PyTuple::new(py, args)?;
    let t0 = Instant::now();
    let r = f.call1(args);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let ret = match r {
        Err(e)
            if e.is_instance_of::<PyKeyboardInterrupt>(py)
                || e.is_instance_of::<PySystemExit>(py) =>
        {
            return Err(e)
        }
        Err(e) if e.is_instance_of::<crate::Refused>(py) => {
            return Ok((Called::Refused(e.value(py).to_string()), ms))
        }
        Err(e) => return Ok((Called::Error(format!("raised {e}")), ms)),
        Ok(r) => r,
    };
    let mut breach = Breach::default();
    for (name, i) in inputs {
        if !i.unchanged()? {
            breach.inputs.push(name.to_string());
        }
    }
    let expected = if outs.len() == 1 {
        format!(
            "None (the output written into `out`) or a {} array of shape {:?}",
            outs[0].1.dtype(),
            outs[0].0
        )
    } else {
        let list: Vec<String> = outs
            .iter()
            .map(|(s, k)| format!("{} {s:?}", k.dtype()))
            .collect();
        format!(
            "None (the outputs written) or a tuple of arrays: {}",
            list.join(", ")
        )
    };
    let returned = !ret.is_none();
    let items: Vec<Bound<'py, PyAny>> = if !returned {
        arrays.clone()
    } else if outs.len() == 1 {
        vec![ret]
    } else {
        // A tuple or a list only: an array is a sequence too, and would
        // be split along its first axis.
        let items: Option<Vec<Bound<'py, PyAny>>> =
            if let Ok(t) = ret.cast::<pyo3::types::PyTuple>() {
                Some(t.iter().collect())
            } else if let Ok(l) = ret.cast::<pyo3::types::PyList>() {
                Some(l.iter().collect())
            } else {
                None
            };
        match items {
            Some(v) if v.len() == outs.len() => v,
            other => {
                let what = match other {
                    Some(v) => format!("a sequence of {} items", v.len()),
                    None => format!("{}, not a tuple of {}", describe(&ret), outs.len()),
                };
                return Ok((
                    Called::Error(format!("returned {what}: expected {expected}")),
                    ms,
                ));
            }
        }
    };
    // An array of the other byte order holds the same values: read them.
    let items: Vec<Bound<'py, PyAny>> = items
        .into_iter()
        .map(|item| native_order(&item).unwrap_or(item))
        .collect();
    let mut got = Vec::new();
    for (item, &(shape, kind)) in items.iter().zip(outs) {
        let read = match kind {
            OutKind::F32 => item
                .extract::<PyReadonlyArrayDyn<'py, f32>>()
                .ok()
                .map(|a| (a.shape() == shape, a.shape().to_vec(), Got::F32(to_vec(&a)))),
            OutKind::U8 => item
                .extract::<PyReadonlyArrayDyn<'py, u8>>()
                .ok()
                .map(|a| (a.shape() == shape, a.shape().to_vec(), Got::U8(to_vec(&a)))),
            OutKind::I32 => item
                .extract::<PyReadonlyArrayDyn<'py, i32>>()
                .ok()
                .map(|a| (a.shape() == shape, a.shape().to_vec(), Got::I32(to_vec(&a)))),
            OutKind::U16(_) => item
                .extract::<PyReadonlyArrayDyn<'py, u16>>()
                .ok()
                .map(|a| (a.shape() == shape, a.shape().to_vec(), Got::U16(to_vec(&a)))),
        };
        match read {
            Some((true, _, g)) => got.push(g),
            Some((false, had, _)) => {
                return Ok((
                    Called::Error(format!(
                        "returned a {} array of shape {had:?}, expected {shape:?}",
                        kind.dtype()
                    )),
                    ms,
                ))
            }
            None => {
                let hint = match kind {
                    OutKind::U16(_) if is_16_bit_float(item) => {
                        " (a 16-bit float output goes back as its bits: `y.view(np.uint16)`)"
                    }
                    _ => "",
                };
                return Ok((
                    Called::Error(format!(
                        "returned {}: expected {expected}{hint}",
                        describe(item)
                    )),
                    ms,
                ));
            }
        }
    }
    if returned {
        for (k, ((out, item), before)) in arrays.iter().zip(&items).zip(&handed).enumerate() {
            let now = bytes(out)?;
            if now != *before && now != bytes(item)? {
                return Ok((
                    Called::Error(format!(
                        "wrote output {k} in place and returned a different array for it: which is the kernel's?"
                    )),
                    ms,
                ));
            }
        }
    }
    for (k, (g, s)) in got.iter().zip(&sentinels).enumerate() {
        if let Some(s) = *s {
            // The sentinel's class: negated or quieted, it is still unwritten.
            let class = match outs[k].1 {
                OutKind::U16(q) if q == oracle::f16::NAN => u32::from(F16_CLASS),
                OutKind::U16(_) => u32::from(BF16_CLASS),
                _ => F32_CLASS,
            };
            let at: Vec<usize> = match g {
                Got::F32(v) => (0..v.len())
                    .filter(|&i| v[i].to_bits() & class == s)
                    .collect(),
                Got::U16(v) => (0..v.len())
                    .filter(|&i| u32::from(v[i]) & class == s)
                    .collect(),
                _ => Vec::new(),
            };
            if !at.is_empty() {
                breach.unwritten.push(Unwritten {
                    out: k,
                    shape: outs[k].0.to_vec(),
                    at,
                    bits: s,
                    wide: outs[k].1 == OutKind::F32,
                });
            }
        }
    }
    Ok((Called::Output(got, breach), ms))
}

/// Whether every element of `bytes` (an output of `kind` as `tobytes`
/// gives it, native order) has the bits `s`.
fn all_bits(kind: OutKind, bytes: &[u8], s: u32) -> bool {
    match kind {
        OutKind::F32 => bytes
            .chunks_exact(4)
            .all(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) == s),
        OutKind::U16(_) => bytes
            .chunks_exact(2)
            .all(|c| u32::from(u16::from_ne_bytes([c[0], c[1]])) == s),
        OutKind::U8 | OutKind::I32 => false,
    }
}

/// `x` converted to native byte order when it is a numpy array of the
/// other order (`'>f4'` on a little-endian host): the same values, which
/// the typed readers would refuse. `None` for anything else.
fn native_order<'py>(x: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    let a = x.cast::<numpy::PyUntypedArray>().ok()?;
    let d = a.getattr("dtype").ok()?;
    if d.getattr("isnative").ok()?.extract::<bool>().ok()? {
        return None;
    }
    let native = d.call_method1("newbyteorder", ("=",)).ok()?;
    a.call_method1("astype", (native,)).ok()
}

/// Whether `x` is an array of a 16-bit float (numpy's float16, or
/// ml_dtypes' and torch-through-numpy bfloat16, whose numpy kind is `V`):
/// what a callable returns where the check takes uint16 bit patterns.
fn is_16_bit_float(x: &Bound<'_, PyAny>) -> bool {
    let Ok(d) = x.getattr("dtype") else {
        return false;
    };
    let size = d.getattr("itemsize").and_then(|v| v.extract::<usize>());
    let kind = d.getattr("kind").and_then(|v| v.extract::<String>());
    matches!((size, kind), (Ok(2), Ok(k)) if k == "f" || k == "V")
}

/// What a returned object is, for a message: an array's dtype, a numpy
/// scalar's (not an array: a one-element output goes back as an array),
/// else its type's name.
/// Whether `x` is a numpy scalar (`numpy.generic`).
fn is_numpy_scalar(x: &Bound<'_, PyAny>) -> bool {
    let py = x.py();
    py.import("numpy")
        .and_then(|np| np.getattr("generic"))
        .and_then(|g| x.is_instance(&g))
        .unwrap_or(false)
}

fn describe(x: &Bound<'_, PyAny>) -> String {
    let ty = x
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    match x.getattr("dtype") {
        Ok(d) if x.cast::<numpy::PyUntypedArray>().is_ok() => format!("an array of dtype {d}"),
        Ok(d) if is_numpy_scalar(x) => format!("a numpy scalar of dtype {d}, not an array"),
        Ok(d) => format!(
            "a {ty} of dtype {d}, not a numpy array (a torch tensor goes back as `t.cpu().numpy()`)"
        ),
        Err(_) => format!("a value of type {ty}"),
    }
}

/// A case's value array and the bits it is checked against after the call.
pub(crate) enum Held {
    /// float32 values.
    F32(Vec<f32>),
    /// bfloat16 or float16 bit patterns.
    U16(Vec<u16>),
}

impl Held {
    /// `v` (values of `dtype`) as the array a callable gets.
    pub(crate) fn new(dtype: oracle::dtype::Dtype, v: &[f32]) -> Held {
        Held::from_bits(dtype, &kernel_oracle::dtype::bits(dtype, v))
    }

    /// `bits` (of `dtype`, widened to 32) as the array a callable gets,
    /// every bit kept (NaN payloads and signaling NaNs too).
    pub(crate) fn from_bits(dtype: oracle::dtype::Dtype, bits: &[u32]) -> Held {
        match dtype {
            oracle::dtype::Dtype::F32 => {
                Held::F32(bits.iter().map(|&b| f32::from_bits(b)).collect())
            }
            _ => Held::U16(bits.iter().map(|&b| b as u16).collect()),
        }
    }

    /// The input array (a fresh copy) and what it must still hold after
    /// the call.
    pub(crate) fn input<'a, 'py>(
        &'a self,
        py: Python<'py>,
        shape: &[usize],
    ) -> PyResult<Input<'a, 'py>> {
        Ok(match self {
            Held::F32(v) => Input::F32(array(py, shape, v.clone())?, v),
            Held::U16(v) => Input::U16(array(py, shape, v.clone())?, v),
        })
    }
}

/// An input array handed to a callable and the copy it is compared with.
pub(crate) enum Input<'a, 'py> {
    /// uint8 codes or bytes.
    U8(Bound<'py, PyArrayDyn<u8>>, &'a [u8]),
    /// float32 values (compared by bits).
    F32(Bound<'py, PyArrayDyn<f32>>, &'a [f32]),
    /// int32 ids.
    I32(Bound<'py, PyArrayDyn<i32>>, &'a [i32]),
    /// int64 ids.
    I64(Bound<'py, PyArrayDyn<i64>>, &'a [i64]),
    /// uint16 bit patterns of a 16-bit float.
    U16(Bound<'py, PyArrayDyn<u16>>, &'a [u16]),
    /// A Python scalar passed as it is (an `eps`): immutable, so never
    /// compared.
    Scalar(Bound<'py, PyAny>),
}

impl<'py> Input<'_, 'py> {
    /// The array handed to the callable.
    pub(crate) fn array(&self) -> Bound<'py, PyAny> {
        match self {
            Input::U8(a, _) => a.clone().into_any(),
            Input::F32(a, _) => a.clone().into_any(),
            Input::I32(a, _) => a.clone().into_any(),
            Input::I64(a, _) => a.clone().into_any(),
            Input::U16(a, _) => a.clone().into_any(),
            Input::Scalar(a) => a.clone(),
        }
    }

    fn unchanged(&self) -> PyResult<bool> {
        fn same<T: Element + Copy>(
            a: &Bound<'_, PyArrayDyn<T>>,
            eq: impl Fn(&[T]) -> bool,
        ) -> PyResult<bool> {
            let r = a
                .try_readonly()
                .map_err(|e| PyValueError::new_err(format!("input array still borrowed: {e}")))?;
            Ok(eq(&to_vec(&r)))
        }
        match self {
            Input::U8(a, before) => same(a, |v| v == *before),
            Input::I32(a, before) => same(a, |v| v == *before),
            Input::I64(a, before) => same(a, |v| v == *before),
            Input::U16(a, before) => same(a, |v| v == *before),
            Input::Scalar(_) => Ok(true),
            Input::F32(a, before) => same(a, |v| {
                v.len() == before.len()
                    && v.iter()
                        .zip(before.iter())
                        .all(|(x, y)| x.to_bits() == y.to_bits())
            }),
        }
    }
}

pub(crate) fn value(x: f32) -> String {
    format!("{x:e} (0x{:08X})", x.to_bits())
}

fn mismatch_line(label: &str, m: &Mismatch, row: &str, col: &str) -> String {
    format!(
        "  {label}: first at ({row}={}, {col}={}): got {}, want {}",
        m.row,
        m.col,
        value(m.got),
        value(m.want)
    )
}

pub(crate) fn comparison_lines(r: &mut String, y: &Comparison, row: &str, col: &str) {
    let _ = writeln!(
        r,
        "  out: max_abs {:e}, rms_rel {:e}, nmse {:e}, {}/{} bit patterns differ, {} non-finite",
        y.max_abs, y.rms_rel, y.nmse, y.bit_mismatches, y.n, y.non_finite
    );
    if let Some(m) = y.first_non_finite {
        let _ = writeln!(r, "{}", mismatch_line("non-finite", &m, row, col));
    }
    if let Some(m) = y.first_mismatch {
        let _ = writeln!(r, "{}", mismatch_line("differing", &m, row, col));
    }
}

/// A name for `f` in reproductions: `name` if given, else `f.__name__`
/// when it is an identifier (not `<lambda>`), else `fn`.
pub(crate) fn callable_name(f: &Bound<'_, PyAny>, name: Option<String>) -> String {
    name.or_else(|| {
        f.getattr("__name__")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
            .filter(|n| {
                !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !n.starts_with(|c: char| c.is_ascii_digit())
            })
    })
    .unwrap_or_else(|| "fn".to_string())
}

fn derive_seed(base: u64, trial: usize) -> u64 {
    if trial == 0 {
        base
    } else {
        // splitmix64's increment: trials of one case get unrelated seeds.
        let mut z = base.wrapping_add((trial as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Output bits as a failure line shows them: a float32 value, or a 16-bit
/// pattern in hex with its value.
pub(crate) fn shown_bits(out: oracle::dtype::Dtype, b: u32) -> String {
    match out {
        oracle::dtype::Dtype::F32 => value(f32::from_bits(b)),
        _ => format!("0x{b:04X} ({})", value(out.decode(b))),
    }
}

/// One case of a GEMM judged bit for bit, as its table row: the outputs
/// whose bits differ from `want`'s (`Dtype::same`: any NaN equals any
/// NaN), printed with their count, the call's time, the verdict and the
/// known schedules the output matches. Returns the differing indices and
/// whether the case passes (none differs and the call broke no contract:
/// no input written, no output left unwritten).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_bits_row(
    o: &mut Out<'_>,
    row: &str,
    ms: f64,
    out: oracle::dtype::Dtype,
    got: &[u32],
    want: &[u32],
    written: &Breach,
    matches: &[String],
) -> PyResult<(Vec<usize>, bool)> {
    let differ: Vec<usize> = (0..want.len())
        .filter(|&i| !out.same(got[i], want[i]))
        .collect();
    let pass = differ.is_empty() && written.is_empty();
    o.row(&format!(
        "{row} {:>7}/{:<7} {ms:>9.2}  {}  {}",
        differ.len(),
        want.len(),
        if pass { "PASS" } else { "FAIL" },
        names_or(matches, "; ", "none known")
    ))?;
    Ok((differ, pass))
}

/// A GEMM failure's line on its first differing output of `[m][cols]`:
/// how many differ, where, got and want, and `operands(j, i)` (what made
/// output `(j, i)`: its scales, its exact sum).
pub(crate) fn first_output_line(
    r: &mut String,
    out: oracle::dtype::Dtype,
    differ: &[usize],
    got: &[u32],
    want: &[u32],
    cols: usize,
    operands: impl Fn(usize, usize) -> String,
) {
    if let Some(&at) = differ.first() {
        let (j, i) = (at / cols, at % cols);
        let _ = writeln!(
            r,
            "  {} of {} outputs differ; first at (row {j}, column {i}): got {}, want {} ({})",
            differ.len(),
            want.len(),
            shown_bits(out, got[at]),
            shown_bits(out, want[at]),
            operands(j, i)
        );
    }
}

/// The callable every `check_*` takes first: a `TypeError` naming the
/// argument when it is not callable (`None`, a tensor), raised before any
/// case is generated, so a wrong argument is one clear error, not one
/// failed row per case.
pub(crate) fn require_callable(f: &Bound<'_, PyAny>, arg: &str) -> PyResult<()> {
    if f.is_callable() {
        Ok(())
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{arg} must be callable (the kernel under test), got {}",
            f.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        )))
    }
}

/// `ValueError` for an empty `arms` list, which would run no case.
pub(crate) fn refuse_empty_arms(given: &Option<Vec<String>>) -> PyResult<()> {
    if given.as_ref().is_some_and(Vec::is_empty) {
        return Err(PyValueError::new_err(
            "arms must name at least one arm (arms=None runs them all)",
        ));
    }
    Ok(())
}

/// The arms a check runs: each of `given` through `parse` (the case
/// library's `Arm::parse`), else every arm of `all` in order.
///
/// # Errors
/// `ValueError` with `parse`'s sentence for the first unknown name, or for
/// an empty list (it would run no case).
pub(crate) fn arms_or_all<A: Copy>(
    given: Option<Vec<String>>,
    all: &[A],
    parse: impl Fn(&str) -> Result<A, String>,
) -> PyResult<Vec<A>> {
    refuse_empty_arms(&given)?;
    match given {
        Some(a) => a
            .iter()
            .map(|s| parse(s).map_err(PyValueError::new_err))
            .collect(),
        None => Ok(all.to_vec()),
    }
}

/// A check's `shapes` argument: the shapes given, each held to `caps`
/// (the case library's `within_caps`), or `default` when none was given.
///
/// # Errors
/// `ValueError` with `caps`' message for the first shape past a cap.
pub(crate) fn shapes_or<D: Copy, T>(
    given: Option<Vec<D>>,
    default: &[D],
    caps: impl Fn(D) -> Result<T, String>,
) -> PyResult<Vec<D>> {
    match given {
        Some(s) => {
            for &dims in &s {
                caps(dims).map_err(PyValueError::new_err)?;
            }
            Ok(s)
        }
        None => Ok(default.to_vec()),
    }
}

/// A count argument of a check (`trials`, `samples`, `group`, `top_k`,
/// `exp_ulps`, ...) as Python gives it: every check takes its counts as
/// `i64` and converts them here, so that a negative count is a
/// `ValueError` naming the argument, never PyO3's `OverflowError` from
/// an unsigned conversion.
///
/// Returns `got` as `T` when `got >= least` and `T` holds it. `least` is
/// 1 for a count that must be positive (`trials`, `samples`, `top_k`) and
/// 0 for one whose own range the contract checks after (an ulps count:
/// this rules out the sign only).
///
/// # Errors
/// `ValueError` `"{arg} must be at least {least}, got {got}"` below
/// `least` (`"{arg} must not be negative, got {got}"` where `least` is 0),
/// and `"{arg} is {got}, more than a {T} holds"` past `T`'s range (a
/// `u32` count above 2^32 - 1).
pub(crate) fn count<T: TryFrom<i64>>(arg: &str, got: i64, least: i64) -> PyResult<T> {
    if got < least {
        return Err(PyValueError::new_err(if least == 0 {
            format!("{arg} must not be negative, got {got}")
        } else {
            format!("{arg} must be at least {least}, got {got}")
        }));
    }
    T::try_from(got).map_err(|_| {
        PyValueError::new_err(format!(
            "{arg} is {got}, more than a {} holds",
            std::any::type_name::<T>()
        ))
    })
}

/// The data seeds of a check, from the `seeds` and `trials` arguments
/// every check shares, validated once by [`Seeds::new`] before the
/// callable is first called.
#[derive(Clone, Debug)]
pub(crate) struct Seeds {
    /// `seeds` as given (never an empty list).
    given: Option<Vec<u64>>,
    /// `trials`, at least 1; ignored when `given` is `Some`.
    trials: usize,
}

impl Seeds {
    /// The checked `seeds` (None: derive them) and `trials` (the seeds
    /// per (shape, arm) when `seeds` is None) of a check. `trials` is
    /// checked even when `seeds` is given.
    ///
    /// # Errors
    /// `ValueError` `"trials must be at least 1, got {trials}"` for
    /// `trials` below 1 (zero or negative), and `"seeds must name at
    /// least one seed (seeds=None draws the battery's)"` for an empty
    /// `seeds` list, which would run no case.
    pub(crate) fn new(seeds: Option<Vec<u64>>, trials: i64) -> PyResult<Self> {
        let trials = count("trials", trials, 1)?;
        if seeds.as_ref().is_some_and(Vec::is_empty) {
            return Err(PyValueError::new_err(
                "seeds must name at least one seed (seeds=None draws the battery's)",
            ));
        }
        Ok(Seeds {
            given: seeds,
            trials,
        })
    }

    /// The data seeds of one (shape, arm) whose battery seed is `base`:
    /// `seeds` as given, else `base` and `trials - 1` derived ones, drawn
    /// one at a time (a huge `trials` runs long, never allocates).
    pub(crate) fn for_case(&self, base: u64) -> Box<dyn Iterator<Item = u64> + '_> {
        match &self.given {
            Some(s) => Box::new(s.iter().copied()),
            None => Box::new((0..self.trials).map(move |t| derive_seed(base, t))),
        }
    }
}

/// check_fp8_block_gemm(gemm, shapes=None, arms=None, seeds=None, trials=1, schedule=Schedule.V2, verbose=True, name=None) -> CheckReport
///
/// Runs `gemm`, a per-block FP8 GEMM, through the FP8 MMQ gate's arms and
/// judges it under `schedule` (the arithmetic it declares), with the case
/// library's generator (`fp8_mmq::CaseSpec`), oracle (`judge::reference`,
/// the fast path of `oracle::fp8_mmq::mmq`) and verdict
/// (`judge::Verdict::judge`).
///
/// The callable: `gemm(w, scales, q, d, out)` with (shapes in elements)
/// - `w`: uint8 `[out_f, in_f]`, e4m3 codes (row-major, k fastest);
/// - `scales`: float32 `[ceil(out_f/128), ceil(in_f/128)]`, one scale per
///   128x128 weight block;
/// - `q`: uint8 `[m, in_f_pad]`, e4m3 activation codes, `in_f_pad` =
///   `fp8_in_f_pad(in_f)` (a multiple of 512; the FOLD arm puts non-zero
///   codes beyond in_f, which the weights' zero k tail must cancel);
/// - `d`: float32 `[m, in_f_pad/128]`, one scale per 128 activations;
/// - `out`: float32 `[m, out_f]`, filled with NaN;
///
/// computing `out[j, i] = sum over blocks b < ceil(in_f/128) of
/// scales[i/128, b] * d[j, b] * (sum over the block's k < in_f of
/// e4m3(w[i, k]) * e4m3(q[j, k]))` (see `fp8_block_gemm`), and either
/// writing `out` and returning None, or returning a new float32
/// `[m, out_f]` array. It must not write its inputs. torch users wrap:
/// `torch.from_numpy(w).view(torch.float8_e4m3fn)`, ..., then
/// `out[...] = y.cpu().numpy()`.
///
/// Arguments:
/// - `shapes`: `(in_f, out_f, m)` tuples (default `FP8_SHAPES`, ragged
///   first);
/// - `arms`: any of `"EXACT"`, `"FOLD"`, `"CODES"`, `"RAND"` (default all,
///   in that order; see the README for what each proves);
/// - `seeds`: the data seeds of every (shape, arm), a list of at least
///   one (default None: the gate's battery seed, then `trials - 1`
///   derived ones);
/// - `trials`: the seeds per (shape, arm) when `seeds` is None, at least
///   1 (checked even when `seeds` is given);
/// - `schedule`: the declared arithmetic: EXACT, FOLD and CODES compare
///   bit for bit under every schedule; RAND compares bit for bit under an
///   `SM90_*` schedule and by the summation bound `3 gamma_(130 + nblk)`
///   per output (plus `rms_rel < 1e-5` from 512 outputs) under `V2*`;
/// - `verbose`: print a row per case (failures and the summary always
///   print);
/// - `name`: the callable's name in reproductions (default `__name__`).
///
/// Returns a `CheckReport` (truthy when every compared case passed and at
/// least one was compared). Each row names the known schedules its output
/// matches bit for bit.
///
/// Errors: `ValueError` on a zero shape or an unknown arm; exceptions of
/// `print` and `KeyboardInterrupt` propagate.
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `seeds` and `trials` above).
#[pyfunction]
#[pyo3(signature = (gemm, shapes = None, arms = None, seeds = None, trials = 1, schedule = Schedule::V2, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_fp8_block_gemm<'py>(
    py: Python<'py>,
    gemm: Bound<'py, PyAny>,
    shapes: Option<Vec<(usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    schedule: Schedule,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    require_callable(&gemm, "gemm")?;
    let seeds = Seeds::new(seeds, trials)?;
    let shapes = shapes.unwrap_or_else(|| FP8_SHAPES.to_vec());
    refuse_empty_arms(&arms)?;
    let arms: Vec<Arm> = match arms {
        Some(a) => a.iter().map(|s| fp8::arm(s)).collect::<PyResult<_>>()?,
        None => Arm::ALL.to_vec(),
    };
    let fname = callable_name(&gemm, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "fp8_block_gemm".into(),
        ..CheckReport::default()
    };
    let mut matched = Matched::default();
    let mut codes = kernel_oracle::fp8_mmq::judge::CodeSet::default();
    out.row(&format!(
        "check_fp8_block_gemm({fname}), declared schedule: {}",
        schedule.core()
    ))?;
    out.row(&format!(
        "{:<16} {:>5} {:>18} {:>10} {:>10} {:>13} {:>5} {:>9}  verdict  schedule",
        "in_f,out_f,m", "arm", "seed", "max_abs", "rms_rel", "bit_mismatch", "codes", "call_ms"
    ))?;
    for &(in_f, out_f, m) in &shapes {
        fp8::shape(m, in_f, out_f)?;
        for &arm in &arms {
            let base = fp8::case_spec(in_f, out_f, m, arm, None).seed;
            for seed in seeds.for_case(base) {
                let spec = fp8::case_spec(in_f, out_f, m, arm, Some(seed));
                let ca = fp8::case_arrays(py, &spec)?;
                let mut want = reference(&ca.data, schedule.core());
                want.identify = Identify::Always;
                let inputs = [
                    ("w", Input::U8(ca.w.clone(), &ca.data.w)),
                    ("scales", Input::F32(ca.scales.clone(), &ca.data.scales)),
                    ("q", Input::U8(ca.q.clone(), &ca.gq)),
                    ("d", Input::F32(ca.d.clone(), &ca.gd)),
                ];
                let (called, ms) = call(py, &gemm, Vec::new(), &inputs, &[&[m, out_f]])?;
                let shape_s = format!("{in_f},{out_f},{m}");
                let repro = format!(
                    "kernel_oracle.check_fp8_block_gemm({fname}, shapes=[({in_f}, {out_f}, {m})], arms=[\"{}\"], seeds=[0x{seed:016x}], schedule=kernel_oracle.Schedule.{schedule:?})",
                    arm.name()
                );
                let head = format!(
                    "FAIL fp8_block_gemm: in_f={in_f} out_f={out_f} m={m} arm={} seed=0x{seed:016x}, declared: {}",
                    arm.name(),
                    schedule.core()
                );
                let Some((mut got, written)) = rep.take(
                    &mut out,
                    called,
                    &format!("{shape_s:<16} {:>5} 0x{seed:016x}", arm.name()),
                    &head,
                    &repro,
                )?
                else {
                    continue;
                };
                let got = got.swap_remove(0).f32().to_vec();
                let kout = KernelOut {
                    nan: want.nan as u64,
                    q: want.q.clone(),
                    d: want.d.clone(),
                    y: got,
                };
                let v = Verdict::judge(&ca.data, arm, &kout, &want);
                let pass = v.pass() && written.is_empty();
                matched.add(v.identified.as_deref().unwrap_or_default(), arm.bit_exact());
                codes.union(&v.codes);
                out.row(&format!(
                    "{shape_s:<16} {:>5} 0x{seed:016x} {:>10.3e} {:>10.3e} {:>7}/{:<5} {:>5} {:>9.2}  {}  {}",
                    arm.name(),
                    v.y.max_abs,
                    v.y.rms_rel,
                    v.y.bit_mismatches,
                    v.y.n,
                    if arm == Arm::Codes { v.codes.count().to_string() } else { "-".into() },
                    ms,
                    if pass { "PASS" } else { "FAIL" },
                    schedule_line(&v)
                ))?;
                if pass {
                    rep.passed += 1;
                } else {
                    let mut r = failure_head(&head, &written);
                    if !v.pass() {
                        let bound = if v.y_bit_exact() {
                            "bit-identical required (0 differing bits allowed)".to_string()
                        } else {
                            format!("every |got - want| <= 3 gamma_(130+nblk) sum|terms|, and rms_rel < {RANDOM_RMS_REL_BOUND:e} from {RANDOM_RMS_REL_MIN_OUTPUTS} outputs on")
                        };
                        let _ = writeln!(r, "  bound: {bound}");
                        let _ = writeln!(r, "  schedule: {}", schedule_line(&v));
                        if let (n, Some((j, i, err, allowed))) = v.over_bound {
                            let _ = writeln!(
                                r,
                                "  out: {n} outputs over the per-output bound; first at (row j={j}, col i={i}): |got - want| = {err:e}, allowed {allowed:e}"
                            );
                        }
                        comparison_lines(&mut r, &v.y, "row j", "col i");
                    }
                    let _ = write!(
                        r,
                        "reproduce:\n  {repro}\nthe case's arrays:\n  kernel_oracle.fp8_block_gemm_case({in_f}, {out_f}, {m}, \"{}\", seed=0x{seed:016x})",
                        arm.name()
                    );
                    rep.fail(&mut out, r, repro)?;
                }
            }
        }
    }
    rep.codes_decoded_exactly = codes.count();
    let extra = format!(
        "{}e4m3 codes decoded bit-exactly: {} of {}; ",
        matched.record(&mut rep),
        rep.codes_decoded_exactly,
        kernel_oracle::fp8_mmq::gate::OBSERVABLE_CODES,
    );
    rep.finish(out, &extra)
}

/// The known schedules every compared case's output matched bit for bit,
/// and every compared case of a bit-exact arm (EXACT, FOLD, CODES): the
/// FP8 GEMM checks' summary. `None` until a case is added.
#[derive(Clone, Debug, Default)]
pub(crate) struct Matched {
    all: Every<oracle::fp8_mmq::Schedule>,
    exact: Every<oracle::fp8_mmq::Schedule>,
}

impl Matched {
    /// Adds one compared case that matched `ids`; `exact_arm`: its arm is
    /// bit-exact.
    pub(crate) fn add(&mut self, ids: &[oracle::fp8_mmq::Schedule], exact_arm: bool) {
        self.all.meet(ids);
        if exact_arm {
            self.exact.meet(ids);
        }
    }

    /// Sets `rep.identified` and `rep.identified_exact_arms`, and returns
    /// the summary's phrase, `"bit-identical on every compared case under:
    /// ...; on every EXACT/FOLD/CODES case under: ...; "`.
    pub(crate) fn record(&self, rep: &mut CheckReport) -> String {
        let to_py = |v: &Every<oracle::fp8_mmq::Schedule>| -> Vec<Schedule> {
            v.get()
                .unwrap_or_default()
                .iter()
                .filter_map(|&s| Schedule::from_core(s))
                .collect()
        };
        let list = |v: &Every<oracle::fp8_mmq::Schedule>| match v.get() {
            Some(v) => schedule_list(v),
            None => "(no case compared)".into(),
        };
        rep.identified = to_py(&self.all);
        rep.identified_exact_arms = to_py(&self.exact);
        format!(
            "bit-identical on every compared case under: {}; on every EXACT/FOLD/CODES case under: {}; ",
            list(&self.all),
            list(&self.exact)
        )
    }
}

/// check_mul_mat(mul_mat, dtypes=None, shapes=None, arms=None, seeds=None, trials=1, verbose=True, name=None) -> CheckReport
///
/// Runs `mul_mat`, a GEMM over ggml blocks, through the WGSL gate's arms
/// with the case library's generator (`mul_mat::CaseSpec`: EXACT data
/// make every order and fusion exact, RAND data keep every f16 scale
/// finite with its sign, BAL data make every product about the same
/// magnitude, so the bound sees one dropped product; ORDER data make every
/// product exact and nearly every partial sum round, so only the
/// contract's k order gives its bits), oracle (`mul_mat::judge::reference`, the fast
/// path of `oracle::ggml::mul_mat::mul_mat`) and verdict
/// (`mul_mat::judge::Verdict`: EXACT and ORDER bit for bit; RAND and BAL
/// within `2 gamma_k sum|terms|` per output and an NMSE bound).
///
/// The callable: `mul_mat(dtype, src0, src1, dst)` with (elements)
/// - `dtype`: a `GgmlType` (`str(dtype)` is ggml's name);
/// - `src0`: uint8 `[m, row_bytes]`, m rows of k elements in `dtype`
///   (`ggml_row_bytes(dtype, k)` bytes each);
/// - `src1`: float32 `[n, k]`;
/// - `dst`: float32 `[n, m]`, filled with NaN;
///
/// computing `dst[n, m] = sum_k dequantize(src0)[m, k] * src1[n, k]`
/// (`ggml_mul_mat`), writing `dst` and returning None or returning a new
/// float32 `[n, m]` array, inputs untouched.
///
/// Arguments: `dtypes` (default every `GgmlType`), `shapes` `(m, k, n)`
/// tuples (default `MUL_MAT_SHAPES`, ragged first; a dtype runs only the
/// shapes whose k is a multiple of its block), `arms` (`"EXACT"`, `"RAND"`,
/// `"BAL"`, `"ORDER"`; default the first three: ORDER asks for the
/// contract's summation order, k = 0 .. K - 1 one product at a time (rule
/// `MM-ORDER`), which a BLAS matmul does not follow, so it is asked for by
/// name),
/// `seeds` / `trials` / `verbose` / `name` as `check_fp8_block_gemm`.
///
/// Errors: `ValueError`, before any call, on an unknown arm or a shape the
/// generator refuses (no output, a buffer beyond 2^32 elements, an EXACT k
/// too long for exactness, a RAND or BAL k of 2^24 or more, where the
/// bound's `gamma_k` is undefined).
/// Every check also raises `ValueError`, before any call, for `trials`
/// below 1 or an empty `seeds` list (see `check_fp8_block_gemm`).
#[pyfunction]
#[pyo3(signature = (mul_mat, dtypes = None, shapes = None, arms = None, seeds = None, trials = 1, verbose = true, name = None))]
#[allow(clippy::too_many_arguments)]
fn check_mul_mat<'py>(
    py: Python<'py>,
    mul_mat: Bound<'py, PyAny>,
    dtypes: Option<Vec<GgmlType>>,
    shapes: Option<Vec<(usize, usize, usize)>>,
    arms: Option<Vec<String>>,
    seeds: Option<Vec<u64>>,
    trials: i64,
    verbose: bool,
    name: Option<String>,
) -> PyResult<CheckReport> {
    require_callable(&mul_mat, "mul_mat")?;
    let seeds = Seeds::new(seeds, trials)?;
    use mul_mat::generate::Arm as MArm;
    let dtypes = dtypes.unwrap_or_else(|| GgmlType::ALL.to_vec());
    let shapes = shapes.unwrap_or_else(|| MUL_MAT_SHAPES.to_vec());
    refuse_empty_arms(&arms)?;
    let arms: Vec<MArm> = match arms {
        Some(a) => a
            .iter()
            .map(|s| match s.to_ascii_uppercase().as_str() {
                "EXACT" => Ok(MArm::Exact),
                "RAND" | "RANDOM" => Ok(MArm::Random),
                "BAL" | "BALANCED" => Ok(MArm::Balanced),
                "ORDER" => Ok(MArm::Order),
                _ => Err(PyValueError::new_err(format!(
                    "arm {s:?}: expected \"EXACT\", \"RAND\", \"BAL\" or \"ORDER\""
                ))),
            })
            .collect::<PyResult<_>>()?,
        // ORDER only by name (see the docstring).
        None => vec![MArm::Exact, MArm::Random, MArm::Balanced],
    };
    // Every case the arguments name is one the generator takes, checked
    // before any call (the seed does not change what it refuses).
    for &(m, k, n) in &shapes {
        for &dt in dtypes
            .iter()
            .filter(|dt| k.is_multiple_of(dt.core().block_elems()))
        {
            for &arm in &arms {
                let (dtype, seed) = (dt.core(), 0);
                mul_mat::CaseSpec {
                    dtype,
                    m,
                    n,
                    k,
                    arm,
                    seed,
                }
                .valid()
                .map_err(PyValueError::new_err)?;
            }
        }
    }
    let fname = callable_name(&mul_mat, name);
    let mut out = Out::new(py, verbose)?;
    let mut rep = CheckReport {
        contract: "mul_mat".into(),
        ..CheckReport::default()
    };
    out.row(&format!("check_mul_mat({fname})"))?;
    out.row(&format!(
        "{:<6} {:<14} {:>6} {:>18} {:>10} {:>10} {:>13} {:>9}  verdict",
        "dtype", "m,k,n", "arm", "seed", "max_abs", "nmse", "bit_mismatch", "call_ms"
    ))?;
    for &(m, k, n) in &shapes {
        for &dt in &dtypes {
            if !k.is_multiple_of(dt.core().block_elems()) {
                out.row(&format!(
                    "{:<6} {:<14} skipped: k = {k} is not a whole number of {}'s {}-element blocks",
                    dt.core().name(),
                    format!("{m},{k},{n}"),
                    dt.core().name(),
                    dt.core().block_elems()
                ))?;
                continue;
            }
            for &arm in &arms {
                let gshape = mul_mat::gate::Shape {
                    label: "python",
                    m,
                    k,
                    n,
                };
                let base = mul_mat::gate::spec(&gshape, dt.core(), arm).seed;
                for seed in seeds.for_case(base) {
                    let spec = mul_mat::CaseSpec {
                        dtype: dt.core(),
                        m,
                        n,
                        k,
                        arm,
                        seed,
                    };
                    let data = spec.generate();
                    let want = mul_mat::reference(&data);
                    let row_bytes = dt.core().row_bytes(k).map_err(crate::arrays::value_error)?;
                    let inputs = [
                        (
                            "src0",
                            Input::U8(array(py, &[m, row_bytes], data.src0.clone())?, &data.src0),
                        ),
                        (
                            "src1",
                            Input::F32(array(py, &[n, k], data.src1.clone())?, &data.src1),
                        ),
                    ];
                    let dt_obj = Bound::new(py, dt)?.into_any();
                    let (called, ms) = call(py, &mul_mat, vec![dt_obj], &inputs, &[&[n, m]])?;
                    let arm_s = match arm {
                        MArm::Exact => "EXACT",
                        MArm::Random => "RAND",
                        MArm::Balanced => "BAL",
                        MArm::Order => "ORDER",
                    };
                    let dname = dt.core().name();
                    let shape_s = format!("{m},{k},{n}");
                    let repro = format!(
                        "kernel_oracle.check_mul_mat({fname}, dtypes=[kernel_oracle.GgmlType.{dt:?}], shapes=[({m}, {k}, {n})], arms=[\"{arm_s}\"], seeds=[0x{seed:016x}])"
                    );
                    let head = format!(
                        "FAIL mul_mat: dtype={dname} m={m} k={k} n={n} arm={arm_s} seed=0x{seed:016x}"
                    );
                    let Some((got, written)) = rep.take(
                        &mut out,
                        called,
                        &format!("{dname:<6} {shape_s:<14} {arm_s:>6} 0x{seed:016x}"),
                        &head,
                        &repro,
                    )?
                    else {
                        continue;
                    };
                    let v = mul_mat::Verdict::judge(&data, got[0].f32(), &want);
                    let pass = v.pass() && written.is_empty();
                    out.row(&format!(
                        "{dname:<6} {shape_s:<14} {arm_s:>6} 0x{seed:016x} {:>10.3e} {:>10.3e} {:>7}/{:<5} {:>9.2}  {}",
                        v.cmp.max_abs,
                        v.cmp.nmse,
                        v.cmp.bit_mismatches,
                        v.cmp.n,
                        ms,
                        if written.is_empty() { v.status() } else { "FAIL" }
                    ))?;
                    if pass {
                        rep.passed += 1;
                    } else {
                        let mut r = failure_head(&head, &written);
                        if !v.pass() {
                            let bound = match arm {
                                MArm::Exact | MArm::Order => "bit-identical required (0 differing bits allowed)".to_string(),
                                MArm::Random | MArm::Balanced => format!(
                                    "every |got - want| <= 2 gamma_k sum|terms|, nmse <= {:e}; {} outputs over",
                                    v.nmse_bound, v.over_bound
                                ),
                            };
                            let _ = writeln!(r, "  bound: {bound}");
                            if v.within_bound() {
                                let _ = writeln!(
                                    r,
                                    "  VACUOUS: the bound exceeds |want| on every output (an all-zero out would pass): \
                                     this shape and arm judge nothing; take a smaller k, more outputs, or arm \"order\""
                                );
                            }
                            comparison_lines(&mut r, &v.cmp, "n", "m");
                        }
                        let _ = write!(r, "reproduce:\n  {repro}");
                        rep.fail(&mut out, r, repro)?;
                    }
                }
            }
        }
    }
    rep.finish(out, "")
}

/// Adds the check drivers and their default shapes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CheckReport>()?;
    m.add("FP8_SHAPES", FP8_SHAPES.to_vec())?;
    m.add("MUL_MAT_SHAPES", MUL_MAT_SHAPES.to_vec())?;
    m.add_function(wrap_pyfunction!(check_fp8_block_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(check_mul_mat, m)?)?;
    Ok(())
}

/// The first lines of a failure report: the row's header, then how the
/// call broke the contract: the inputs it changed, the outputs it left
/// partly unwritten.
pub(crate) fn failure_head(head: &str, breach: &Breach) -> String {
    let mut r = format!("{head}\n");
    breach.lines(&mut r);
    r
}

/// What the compared cases of an interval check (each output within an
/// interval, bit for bit where it is one value: `check_rms_norm`,
/// `check_act_and_mul`) admitted: the labels every case matched, and the
/// decided and all elements.
#[derive(Debug, Default)]
pub(crate) struct Admitted {
    all: Every<String>,
    decided: usize,
    elements: usize,
}

impl Admitted {
    /// One compared case: the labels it matched, its decided and all
    /// elements.
    pub(crate) fn add(&mut self, found: &[String], decided: usize, elements: usize) {
        self.all.meet(found);
        self.decided += decided;
        self.elements += elements;
    }

    /// The summary's phrase: `"decided elements checked bit for bit: D of
    /// N (...); every compared case admitted under: LABELS; "`.
    pub(crate) fn summary(&self) -> String {
        let every = self.all.phrase(String::clone);
        format!(
            "decided elements checked bit for bit: {} of {} (the rest within their intervals); every compared case admitted under: {every}; ",
            self.decided, self.elements
        )
    }
}

/// The known declarations every compared case of a check matched: the
/// intersection of what each case was found consistent with (`None`
/// before the first case), for the report's summary.
#[derive(Clone, Debug)]
pub(crate) struct Every<T>(Option<Vec<T>>);

impl<T> Default for Every<T> {
    fn default() -> Self {
        Every(None)
    }
}

impl<T: Clone + PartialEq> Every<T> {
    /// One compared case, consistent with `found`.
    pub(crate) fn meet(&mut self, found: &[T]) {
        let now = self.0.take().unwrap_or_else(|| found.to_vec());
        self.0 = Some(now.into_iter().filter(|s| found.contains(s)).collect());
    }

    /// The declarations kept, `None` when no case was compared.
    pub(crate) fn get(&self) -> Option<&[T]> {
        self.0.as_deref()
    }

    /// Their labels joined by `"; "`, `"none known"` when none is left,
    /// `"(no case compared)"` before the first case.
    pub(crate) fn phrase(&self, label: impl Fn(&T) -> String) -> String {
        match &self.0 {
            Some(v) => {
                let names: Vec<String> = v.iter().map(label).collect();
                names_or(&names, "; ", "none known")
            }
            None => "(no case compared)".into(),
        }
    }
}

/// The last lines of an interval check's failure report: what the output
/// matched, the line that reruns the case and the one that gives its
/// arrays and intervals (`case_call`).
pub(crate) fn failure_tail(r: &mut String, matches: &str, repro: &str, case_call: &str) {
    let _ = writeln!(r, "  the output matches: {matches}");
    rerun_tail(r, repro, "intervals", case_call);
}

/// The last lines of every failure report: the line that reruns the case
/// and the one that gives its arrays and the oracle's `what` (`"codes
/// and scales"`, `"intervals"`).
pub(crate) fn rerun_tail(r: &mut String, repro: &str, what: &str, case_call: &str) {
    let _ = write!(
        r,
        "reproduce:\n  {repro}\nthe case's arrays and the oracle's {what}:\n  {case_call}"
    );
}
