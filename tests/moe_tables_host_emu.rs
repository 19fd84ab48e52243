//! `cu/moe_tables.cu` run on the host, without a GPU: the moe-tables
//! gate's battery and the fuzzer's generated cases through the kernel
//! source, judged by the gate's own judge against the oracle, and every
//! planted bug of the kind caught there by the rows it names.
//!
//! The kernel source (the builtin, or the candidate named by
//! `KERNEL_ORACLE_MOE_TABLES_CU`) is compiled with the host C++ compiler
//! (`g++ -std=c++17 -ffp-contract=off`, AddressSanitizer and
//! UndefinedBehaviorSanitizer, any report fatal: a read or write past any
//! buffer, the macro planes' placeholders included, fails the run) inside a
//! small emulator: the launch is the shim's (`MoeEngine::vrows_tables`: 256
//! threads a CTA, `ceil(n_pairs / 256)` CTAs up to the row's cap), every
//! thread of the grid runs the kernel in turn (last CTA and last thread
//! first), `atomicAdd`/`atomicMax` on the status are host updates,
//! `__umul64hi` a 128-bit product, `__fmul_rn` the host's IEEE binary32
//! multiply (SSE: round to nearest even, subnormals kept), and the
//! outputs start as the shim's poison (`0xFF` bytes), so an entry the
//! kernel leaves unwritten is seen. The status words go through the
//! shim's own decoding (`decode_moe_status`). What it cannot check is the
//! GPU itself (NVRTC's code generation, real concurrency): the device gate
//! does (`kernel-oracle check moe-tables`).
//!
//! A kernel that needs what the emulator does not model (`__syncthreads`,
//! shared memory shared between threads, warp intrinsics) fails to build or
//! aborts, saying so: it is not passed unrun.

use device::cuda::{
    check_moe_tables, decode_moe_status, DeviceError, KernelSource, MOE_MAX_CTAS, MOE_THREADS,
};
use kernel_oracle::kind::{self, Plant};
use kernel_oracle::moe_tables::gate::{self, GateCase};
use kernel_oracle::moe_tables::generate::{CaseData, CaseSpec};
use kernel_oracle::moe_tables::judge::{reference, Tables, Verdict};
use kernel_oracle::moe_tables::mutants::MUTANTS;
use kernel_oracle::moe_tables::report;
use oracle::moe_tables::PLANES;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one emulated launch may run (the gate's largest, 65,536 pairs
/// under the sanitizers, takes well under a second).
const DEADLINE: Duration = Duration::from_secs(30);

/// The CUDA spellings `moe_tables.cu` uses, as host C++, the kernel
/// included, and a `main` that reads one launch from stdin and writes
/// `ptrs`, `scales` and `status` to stdout (raw little-endian).
const HARNESS: &str = r#"#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>
extern "C" const char *__asan_default_options() { return "detect_leaks=0"; }
struct dim3 { unsigned x, y, z; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
inline void __syncthreads() {
    fprintf(stderr, "moe host emulator: __syncthreads is not modelled (a grid's threads run one after another)\n");
    abort();
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; *p = o + v; return o; }
inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; if (v > o) *p = v; return o; }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) { unsigned long long o = *p; if (v < o) *p = v; return o; }
#include "moe_tables.cu"
template <class T> static T *read_n(size_t n) {
    T *p = new T[n ? n : 1];
    if (n && fread(p, sizeof(T), n, stdin) != n) { fprintf(stderr, "moe host emulator: short input\n"); exit(3); }
    return p;
}
int main() {
    struct { int32_t n_pairs, has_macros; uint64_t n_expert, base[3], stride[3]; uint32_t ctas, pad; } h;
    if (fread(&h, sizeof h, 1, stdin) != 1) { fprintf(stderr, "moe host emulator: no header\n"); return 3; }
    const size_t n = (size_t)h.n_pairs, t = 3 * n;
    int32_t *sel = read_n<int32_t>(n);
    float *selw = read_n<float>(n);
    float *mg = nullptr, *mu = nullptr, *md = nullptr;
    if (h.has_macros) { mg = read_n<float>(h.n_expert); mu = read_n<float>(h.n_expert); md = read_n<float>(h.n_expert); }
    /* Exactly sized: AddressSanitizer sees an entry past the tables. */
    unsigned long long *ptrs = new unsigned long long[t];
    float *scales = new float[t];
    memset(ptrs, 0xFF, t * sizeof *ptrs);
    memset(scales, 0xFF, t * sizeof *scales);
    unsigned long long *status = new unsigned long long[2]();
    gridDim = {h.ctas, 1, 1};
    blockDim = {256, 1, 1};
    for (unsigned b = h.ctas; b-- > 0;) {
        for (unsigned th = 256; th-- > 0;) {
            blockIdx = {b, 0, 0};
            threadIdx = {th, 0, 0};
            moe_vrows_tables_from_sel(sel, selw, mg, mu, md, h.has_macros, h.base[0], h.base[1], h.base[2],
                                      h.stride[0], h.stride[1], h.stride[2], h.n_expert, h.n_pairs, ptrs, scales,
                                      status);
        }
    }
    fwrite(ptrs, sizeof *ptrs, t, stdout);
    fwrite(scales, sizeof *scales, t, stdout);
    fwrite(status, sizeof *status, 2, stdout);
    return 0;
}
"#;

/// A built emulator of one kernel source.
struct Emulator {
    bin: PathBuf,
    describe: String,
}

/// Builds the emulator around `text` in a folder of its own (`name`
/// unique per test: tests run in parallel).
fn build(name: &str, text: &str, describe: String) -> Emulator {
    let dir = std::env::temp_dir().join(format!("moe-host-emu-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("moe_tables.cu"), text).unwrap();
    std::fs::write(dir.join("emu.cpp"), HARNESS).unwrap();
    let bin = dir.join("emu");
    let out = Command::new("g++")
        .args([
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-w",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ])
        .arg(dir.join("emu.cpp"))
        .arg("-o")
        .arg(&bin)
        .output();
    match out {
        Ok(o) if o.status.success() => Emulator { bin, describe },
        Ok(o) => panic!(
            "g++ could not build the host emulator of {describe}:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "no g++ ({e}): the host emulation of cu/moe_tables.cu needs g++ (apt-get install g++)"
        ),
    }
}

fn builtin_or_candidate(name: &str) -> Emulator {
    let source = KernelSource::moe_tables_from_env().unwrap_or_else(|e| panic!("{e}"));
    build(name, source.text(), source.describe())
}

fn le(out: &mut Vec<u8>, words: &[u64]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

impl Emulator {
    /// The shim's `vrows_tables` on the emulator: its length checks, no
    /// launch for zero pairs, its grid capped at `max_ctas`, and its status
    /// decoding.
    fn tables(&self, data: &CaseData, max_ctas: Option<u32>) -> Result<Tables, DeviceError> {
        let bank = data.bank();
        let n = data.experts.len();
        check_moe_tables(&bank, n, data.weights.len(), None, None)?;
        if n == 0 {
            return Ok(Tables {
                ptrs: Vec::new(),
                scales: Vec::new(),
            });
        }
        let cap = max_ctas.unwrap_or(MOE_MAX_CTAS).clamp(1, MOE_MAX_CTAS);
        let ctas = (n as u64)
            .div_ceil(u64::from(MOE_THREADS))
            .min(u64::from(cap)) as u32;
        let mut input = Vec::new();
        input.extend_from_slice(&(n as i32).to_le_bytes());
        input.extend_from_slice(&i32::from(data.macros.is_some()).to_le_bytes());
        le(&mut input, &[data.n_expert as u64]);
        le(&mut input, &data.slabs.map(|s| s.base));
        le(&mut input, &data.slabs.map(|s| s.stride));
        input.extend_from_slice(&ctas.to_le_bytes());
        input.extend_from_slice(&0u32.to_le_bytes());
        input.extend(data.experts.iter().flat_map(|e| e.to_le_bytes()));
        input.extend(data.weights.iter().flat_map(|w| w.to_bits().to_le_bytes()));
        for plane in data.macros.iter().flatten() {
            input.extend(plane.iter().flat_map(|w| w.to_bits().to_le_bytes()));
        }
        let mut child = Command::new(&self.bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the moe host emulator");
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&input));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                r.read_to_end(&mut b).map(|_| b)
            })
        };
        let stdout = drain(Box::new(child.stdout.take().unwrap()));
        let stderr = drain(Box::new(child.stderr.take().unwrap()));
        // The device shim's deadline, here: a kernel that never ends is a
        // failure naming the hang, not a test that never ends.
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the host emulator of {} did not finish in {} s: the kernel hangs ({} pairs, {ctas} CTAs)",
                    self.describe,
                    DEADLINE.as_secs(),
                    n
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let _ = writer.join().unwrap();
        let out = stdout.join().unwrap().unwrap();
        let err = stderr.join().unwrap().unwrap();
        assert!(
            status.success(),
            "the host emulator of {} failed ({status:?}):\n{}",
            self.describe,
            String::from_utf8_lossy(&err)
        );
        let t = PLANES * n;
        assert_eq!(out.len(), 8 * t + 4 * t + 16, "emulator output length");
        let (p, rest) = out.split_at(8 * t);
        let (s, st) = rest.split_at(4 * t);
        let u64s = |b: &[u8]| -> Vec<u64> {
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let status = u64s(st);
        decode_moe_status([status[0], status[1]], &bank, n, &self.describe)?;
        Ok(Tables {
            ptrs: u64s(p),
            scales: s
                .chunks_exact(4)
                .map(|c| f32::from_bits(u32::from_le_bytes(c.try_into().unwrap())))
                .collect(),
        })
    }

    /// Runs one case; its row (and mismatch lines) on stdout.
    fn judge(&self, label: &str, data: &CaseData, max_ctas: Option<u32>) -> Verdict {
        let v = Verdict::judge(data, &self.tables(data, max_ctas), &reference(data));
        println!("{}", report::table_row(label, data, &v));
        if !v.pass() {
            print!("{}", report::mismatch_lines(label, &v));
        }
        v
    }

    /// The gate's battery; the labels of the rows that failed.
    fn gate(&self, cases: &[GateCase]) -> Vec<&'static str> {
        println!("kernel source: {} (host emulator)", self.describe);
        println!("{}", report::table_header());
        let mut failed = Vec::new();
        for c in cases {
            let mut ok = true;
            if let Some(p) = &c.prime {
                ok &= self.judge("  (prime: first planes)", p, None).pass();
            }
            ok &= self.judge(c.label, &c.data, c.max_ctas).pass();
            if !ok {
                failed.push(c.label);
            }
        }
        failed
    }
}

/// The gate's whole battery passes on the emulated kernel (the builtin, or
/// the candidate named by `KERNEL_ORACLE_MOE_TABLES_CU`), the grid-stride
/// rows on 3 CTAs and the refusals included.
#[test]
fn host_emulated_kernel_passes_the_gate() {
    let emu = builtin_or_candidate("gate");
    let cases = gate::cases();
    assert!(
        cases.iter().any(|c| c.max_ctas.is_some()),
        "no grid-stride row"
    );
    let failed = emu.gate(&cases);
    assert!(
        failed.is_empty(),
        "{}: rows failed: {failed:?}",
        emu.describe
    );
}

/// The fuzzer's generator (the same `CaseSpec` from splitmix64 bytes, one
/// CTA and the shim's grid both drawn) through the emulated kernel: every
/// case agrees with the oracle, and the cases cover tables built, refusals
/// and the one-CTA grid-stride launch, so the agreement is not vacuous.
#[test]
fn host_emulated_kernel_agrees_on_generated_cases() {
    let emu = builtin_or_candidate("fuzz");
    let mut rng = kernel_oracle::rng::Rng(0x40E_7AB1E5);
    let (mut built, mut refused, mut one_cta) = (0, 0, 0);
    let mut cases = 0;
    while cases < 400 {
        let bytes: Vec<u8> = (0..96).map(|_| rng.u8()).collect();
        let Ok(spec) =
            arbitrary::Arbitrary::arbitrary_take_rest(arbitrary::Unstructured::new(&bytes))
        else {
            continue;
        };
        let spec: CaseSpec = spec;
        cases += 1;
        let data = spec.generate();
        let ctas = spec.one_cta.then_some(1);
        let v = emu.judge("generated", &data, ctas);
        assert!(
            v.pass(),
            "{}: a generated case diverges; rerun on a device with\n  {}",
            emu.describe,
            report::repro_command(&spec)
        );
        if v.refused() {
            refused += 1;
        } else if v.compared > 0 {
            built += 1;
            if spec.one_cta && data.experts.len() > MOE_THREADS as usize {
                one_cta += 1;
            }
        }
    }
    assert!(
        built >= 100,
        "tables built in only {built} of {cases} cases"
    );
    assert!(refused >= 20, "refusals in only {refused} of {cases} cases");
    assert!(one_cta >= 5, "one-CTA grid-stride cases: {one_cta}");
}

/// Every planted bug of moe-tables fails, on the emulated kernel, every
/// gate row its registry entry says catches it; the kind's registry plants
/// the same text `mutant moe-tables` writes.
#[test]
fn host_emulated_planted_bugs_fail_their_rows() {
    let cases = gate::cases();
    let planted = (kind::by_name("moe-tables").expect("the kind").planted)();
    assert_eq!(planted.len(), MUTANTS.len());
    for m in &MUTANTS {
        let text = planted
            .iter()
            .find(|p| p.name == m.name)
            .map(|p| match &p.plant {
                Plant::Source(t) => t.clone().unwrap_or_else(|e| panic!("{e}")),
                Plant::Env { .. } => panic!("{}: not a source plant", m.name),
            })
            .unwrap_or_else(|| panic!("{} is not in the registry", m.name));
        let emu = build(m.name, &text, format!("mutant {}", m.name));
        let failed = emu.gate(&cases);
        for row in m.caught_by {
            assert!(
                failed.contains(row),
                "{}: row {row} passed (failed: {failed:?})",
                m.name
            );
        }
        remove(&emu.bin);
    }
}

fn remove(bin: &Path) {
    if let Some(dir) = bin.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
