//! Which `.cu` text is compiled: the builtin `cu/fp8_mmq.cu`, or a candidate
//! named by [`ENV_FP8_MMQ_CU`].

use super::error::{DeviceError, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Environment variable naming a candidate `.cu` file with the same ABI as
/// `cu/fp8_mmq.cu`; when set, it is compiled instead of the builtin one.
pub const ENV_FP8_MMQ_CU: &str = "KERNEL_ORACLE_FP8_MMQ_CU";

/// The builtin kernel source, `cu/fp8_mmq.cu`, embedded at build time.
pub const BUILTIN_FP8_MMQ_CU: &str = include_str!("../../../cu/fp8_mmq.cu");

/// The kernels every `fp8_mmq` source must export (`extern "C"`), besides
/// the MMQ variants `fp8_mmq_v2_k0` .. `fp8_mmq_v2_k<n-1>` its plan names.
pub const REQUIRED_KERNELS: [&str; 4] = [
    "fp8_mmq_plan",
    "fp8_quantize_act",
    "fp8_nan_count",
    "fp8_mmq_v2_k0",
];

/// One kernel source text and where it came from.
#[derive(Clone, Debug)]
pub struct KernelSource {
    text: Arc<str>,
    path: Option<PathBuf>,
    hash: u64,
    /// The builtin file this source is, or replaces (`cu/fp8_mmq.cu`).
    builtin: &'static str,
}

impl KernelSource {
    /// The builtin `cu/fp8_mmq.cu`.
    pub fn builtin() -> KernelSource {
        KernelSource::builtin_named("cu/fp8_mmq.cu", BUILTIN_FP8_MMQ_CU)
    }

    /// Another builtin kernel file (`cu/moe_tables.cu`), embedded at build
    /// time; `name` is what [`KernelSource::describe`] prints.
    pub fn builtin_named(name: &'static str, text: &'static str) -> KernelSource {
        KernelSource {
            text: Arc::from(text),
            path: None,
            hash: fnv1a64(text.as_bytes()),
            builtin: name,
        }
    }

    /// The candidate named by the environment variable `var` if it is set,
    /// else `builtin()`.
    ///
    /// # Errors
    /// [`DeviceError::KernelSource`] if the named file cannot be read, or
    /// if `var` is set but empty (a script's unset `$CANDIDATE` would
    /// otherwise check the builtin and report it green).
    pub fn from_env_var(var: &str, builtin: fn() -> KernelSource) -> Result<KernelSource> {
        match std::env::var_os(var) {
            Some(p) if p.is_empty() => Err(DeviceError::KernelSource {
                path: format!("${var}"),
                reason: "set but empty: name a file, or unset it for the builtin".into(),
            }),
            Some(p) => {
                let mut s = KernelSource::from_file(Path::new(&p))?;
                s.builtin = builtin().builtin;
                Ok(s)
            }
            None => Ok(builtin()),
        }
    }

    /// The candidate named by [`ENV_FP8_MMQ_CU`] if it is set, else the
    /// builtin source.
    ///
    /// # Errors
    /// As [`KernelSource::from_env_var`].
    pub fn from_env() -> Result<KernelSource> {
        KernelSource::from_env_var(ENV_FP8_MMQ_CU, KernelSource::builtin)
    }

    /// A candidate source file.
    ///
    /// # Errors
    /// [`DeviceError::KernelSource`] if it cannot be read as UTF-8 or holds
    /// a NUL byte (NVRTC takes a C string).
    pub fn from_file(path: &Path) -> Result<KernelSource> {
        let text = std::fs::read_to_string(path).map_err(|e| DeviceError::KernelSource {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        if text.contains('\0') {
            return Err(DeviceError::KernelSource {
                path: path.display().to_string(),
                reason: "contains a NUL byte".into(),
            });
        }
        let hash = fnv1a64(text.as_bytes());
        Ok(KernelSource {
            text: Arc::from(text),
            path: Some(path.to_path_buf()),
            hash,
            builtin: "cu/fp8_mmq.cu",
        })
    }

    /// The source text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The candidate's path; `None` for the builtin source.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The file name NVRTC compiles it under (`nvrtcCreateProgram`'s
    /// `name`), which the line information, and so compute-sanitizer's and
    /// ncu's reports, cite: a candidate's own file name, else the
    /// builtin's (`gdn.cu` for `cu/gdn.cu`).
    pub fn program_name(&self) -> String {
        match self.path.as_deref().and_then(Path::file_name) {
            Some(f) => f.to_string_lossy().into_owned(),
            None => self
                .builtin
                .rsplit('/')
                .next()
                .unwrap_or(self.builtin)
                .to_string(),
        }
    }

    /// FNV-1a 64 of the text: the compile cache key, and what reports print.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// One line for report headers: `builtin cu/fp8_mmq.cu (fnv1a64
    /// 0123456789abcdef)` or `candidate /path/x.cu (fnv1a64 ...)`.
    pub fn describe(&self) -> String {
        match &self.path {
            None => format!("builtin {} (fnv1a64 {:016x})", self.builtin, self.hash),
            Some(p) => format!("candidate {} (fnv1a64 {:016x})", p.display(), self.hash),
        }
    }
}

/// FNV-1a, 64 bits: small, stable across builds and hosts.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn builtin_exports_the_abi_names() {
        let s = KernelSource::builtin();
        for k in REQUIRED_KERNELS {
            assert!(s.text().contains(k), "{k} missing from cu/fp8_mmq.cu");
        }
        assert!(s.describe().starts_with("builtin cu/fp8_mmq.cu"));
    }

    /// Line information names the file compiled: the builtin's own file
    /// (not every kernel as `fp8_mmq.cu`), a candidate's file name.
    #[test]
    fn program_name_is_the_compiled_file() {
        assert_eq!(KernelSource::builtin().program_name(), "fp8_mmq.cu");
        let gdn = KernelSource::builtin_named("cu/gdn.cu", "");
        assert_eq!(gdn.program_name(), "gdn.cu");
        let dir = std::env::temp_dir().join(format!("ko-progname-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("m07.cu");
        std::fs::write(&file, "// a candidate").unwrap();
        let cand =
            KernelSource::from_env_var("KO_UNSET_FOR_THIS_TEST", KernelSource::builtin).unwrap();
        assert_eq!(cand.program_name(), "fp8_mmq.cu");
        assert_eq!(
            KernelSource::from_file(&file).unwrap().program_name(),
            "m07.cu"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
