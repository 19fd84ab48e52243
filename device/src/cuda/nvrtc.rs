//! Compiling a [`KernelSource`] with NVRTC, cached per process by (source
//! hash, program name, architecture). Needs libnvrtc, no GPU.

use super::error::{DeviceError, Result, NVRTC_HINT};
use super::source::KernelSource;
use cudarc::nvrtc::{result as nv, sys as nvsys};
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// The NVRTC output for one (source, architecture).
#[derive(Debug)]
pub struct Compiled {
    /// The target, `sm_90a`.
    pub arch: String,
    /// The PTX text.
    pub ptx: String,
    /// The SASS image for `arch` (what the shim loads: it does not depend
    /// on the driver's PTX JIT accepting this NVRTC's PTX version).
    pub cubin: Vec<u8>,
    /// NVRTC's log (warnings, and the ptxas resource report).
    pub log: String,
    /// The options passed.
    pub options: Vec<String>,
}

/// The library names cudarc tries for `lib` (`"nvrtc"`, `"cuda"`).
pub(crate) fn searched(lib: &str) -> String {
    cudarc::get_lib_name_candidates(lib).join(", ")
}

/// Whether libnvrtc can be loaded.
///
/// # Errors
/// [`DeviceError::NoNvrtc`], saying how to install it.
pub fn nvrtc_available() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { nvsys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::NoNvrtc {
            searched: searched("nvrtc"),
            hint: NVRTC_HINT,
        })
    }
}

/// NVRTC's version, `(major, minor)`.
///
/// # Errors
/// [`DeviceError::NoNvrtc`] if it cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    nvrtc_available()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-pointers to live ints.
    unsafe { nvsys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|source| DeviceError::Nvrtc {
            op: "nvrtcVersion",
            source,
        })?;
    Ok((major, minor))
}

/// The options every kernel is compiled with (the arithmetic contract needs
/// `--fmad=false`: no contraction of a multiply and an add into an FMA).
pub fn compile_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--ftz=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--std=c++17".into(),
        "--generate-line-info".into(),
        "--ptxas-options=-v".into(),
    ]
}

/// Compiled code by (source hash, program name, target).
type Cache = Mutex<HashMap<(u64, String, String), Arc<Compiled>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Environment variable naming a directory that caches NVRTC's output on
/// disk across processes, keyed by the source text, its program name, the
/// target and the options (for GPU runs that start many processes; off
/// when unset). Only successful compiles are stored; a file that cannot be
/// read or written is ignored.
pub const ENV_NVRTC_CACHE: &str = "KERNEL_ORACLE_NVRTC_CACHE";

/// Compiles `source` for `arch` (`"sm_90a"`), or returns the copy this
/// process already compiled (or the one in [`ENV_NVRTC_CACHE`]).
///
/// # Errors
/// [`DeviceError::NoNvrtc`] without libnvrtc; [`DeviceError::Compile`] with
/// NVRTC's log if the source does not compile.
pub fn compile(source: &KernelSource, arch: &str) -> Result<Arc<Compiled>> {
    nvrtc_available()?;
    let key = (source.hash(), source.program_name(), arch.to_string());
    if let Some(c) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let disk = disk_cache_stem(source, arch);
    let compiled = match disk.as_deref().and_then(|stem| disk_load(stem, arch)) {
        Some(c) => Arc::new(c),
        None => {
            let c = compile_uncached(source, arch)?;
            if let Some(stem) = &disk {
                disk_store(stem, &c);
            }
            Arc::new(c)
        }
    };
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, compiled.clone());
    Ok(compiled)
}

/// FNV-1a over bytes (the disk-cache key; not cryptographic).
fn fnv1a64(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// `<dir>/<key>.<arch>` for the disk cache, when [`ENV_NVRTC_CACHE`] is set.
fn disk_cache_stem(source: &KernelSource, arch: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os(ENV_NVRTC_CACHE).filter(|d| !d.is_empty())?;
    let mut h = fnv1a64(source.text().as_bytes(), 0xCBF2_9CE4_8422_2325);
    h = fnv1a64(source.program_name().as_bytes(), h);
    h = fnv1a64(compile_options(arch).join(" ").as_bytes(), h);
    if let Ok((major, minor)) = nvrtc_version() {
        h = fnv1a64(format!("nvrtc {major}.{minor}").as_bytes(), h);
    }
    Some(std::path::Path::new(&dir).join(format!("{h:016x}.{arch}")))
}

fn disk_load(stem: &std::path::Path, arch: &str) -> Option<Compiled> {
    let with = |ext: &str| stem.with_extension(format!("{arch}.{ext}"));
    let cubin = std::fs::read(with("cubin")).ok()?;
    let ptx = std::fs::read_to_string(with("ptx")).ok()?;
    let log = std::fs::read_to_string(with("log")).unwrap_or_default();
    Some(Compiled {
        arch: arch.to_string(),
        ptx,
        cubin,
        log,
        options: compile_options(arch),
    })
}

/// Stores `c` under `stem`. Processes share the directory (a score's
/// gates compile the same planted bugs at once), so each file is written
/// under a name of its own (process id, serial) and renamed into place: a reader sees a
/// whole file or none, never one being written.
fn disk_store(stem: &std::path::Path, c: &Compiled) {
    let with = |ext: &str| stem.with_extension(format!("{}.{ext}", c.arch));
    if let Some(dir) = stem.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let put = |ext: &str, bytes: &[u8]| {
        let to = with(ext);
        static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = to.with_extension(format!("{ext}.{}-{n}.tmp", std::process::id()));
        if std::fs::write(&tmp, bytes).is_err() || std::fs::rename(&tmp, &to).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    };
    put("ptx", c.ptx.as_bytes());
    put("log", c.log.as_bytes());
    // The cubin last: its presence marks a complete entry.
    put("cubin", &c.cubin);
}

/// Destroys the program on every path out of [`compile_uncached`].
struct Program(nvsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let _ = unsafe { nv::destroy_program(self.0) };
    }
}

fn c_chars_to_string(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn compile_uncached(source: &KernelSource, arch: &str) -> Result<Compiled> {
    let src = CString::new(source.text()).map_err(|_| DeviceError::KernelSource {
        path: source.describe(),
        reason: "contains a NUL byte".into(),
    })?;
    // A file name holds no NUL byte; the fallback is for the type's sake.
    let name = CString::new(source.program_name()).unwrap_or_else(|_| c"kernel.cu".into());
    let prog =
        Program(
            nv::create_program(&src, Some(&name)).map_err(|source| DeviceError::Nvrtc {
                op: "nvrtcCreateProgram",
                source,
            })?,
        );
    let options = compile_options(arch);
    // SAFETY: prog is live; the options hold no NUL.
    let status = unsafe { nv::compile_program(prog.0, &options) };
    // SAFETY: prog is live.
    let log = unsafe { nv::get_program_log(prog.0) }
        .map(|v| c_chars_to_string(&v))
        .unwrap_or_default();
    if status.is_err() {
        return Err(DeviceError::Compile {
            source_desc: source.describe(),
            arch: arch.to_string(),
            options: options.join(" "),
            log,
        });
    }
    // SAFETY: prog is live and compiled.
    let ptx = unsafe { nv::get_ptx(prog.0) }.map_err(|source| DeviceError::Nvrtc {
        op: "nvrtcGetPTX",
        source,
    })?;
    let ptx = c_chars_to_string(&ptx);
    let mut size = 0usize;
    // SAFETY: prog is live; size is a live out-pointer.
    unsafe { nvsys::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|source| DeviceError::Nvrtc {
            op: "nvrtcGetCUBINSize",
            source,
        })?;
    let mut cubin = vec![0u8; size];
    if size > 0 {
        // SAFETY: cubin has exactly `size` bytes.
        unsafe { nvsys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) }
            .result()
            .map_err(|source| DeviceError::Nvrtc {
                op: "nvrtcGetCUBIN",
                source,
            })?;
    }
    Ok(Compiled {
        arch: arch.to_string(),
        ptx,
        cubin,
        log,
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries round-trip, and writers racing on one entry (threads here,
    /// processes in a score) leave whole files and no temporary ones.
    #[test]
    fn disk_cache_entries_are_whole_under_racing_writers() {
        let dir = std::env::temp_dir().join(format!("nvrtc-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let stem = dir.join("0123456789abcdef.sm_90a");
        let c = Compiled {
            arch: "sm_90a".into(),
            ptx: "ptx text".into(),
            cubin: vec![7u8; 1 << 20],
            log: "log".into(),
            options: compile_options("sm_90a"),
        };
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| disk_store(&stem, &c));
            }
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        if let Some(got) = disk_load(&stem, "sm_90a") {
                            assert_eq!(got.cubin.len(), c.cubin.len(), "a cubin being written");
                        }
                    }
                });
            }
        });
        let got = disk_load(&stem, "sm_90a").expect("stored");
        assert_eq!((got.ptx, got.cubin, got.log), (c.ptx, c.cubin, c.log));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
