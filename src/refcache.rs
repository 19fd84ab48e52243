//! A reference cache shared by processes: the oracle's answer to a gate
//! row, computed once and read by every other process that runs the same
//! row (the gates of `score`, which run one battery once per planted bug,
//! in parallel, where only the kernel differs).
//!
//! Off unless [`ENV_REFERENCE_CACHE`] names a directory; `score` sets it to
//! a fresh directory under its logs, so the cache never outlives one
//! binary (an answer is keyed by the row, not by the oracle's version).
//!
//! Protocol, per key (a string naming everything the answer depends on:
//! the kind, the case spec and the schedule): the answer lives in
//! `<dir>/<fnv1a64(key)>.ref`, whose first line is the key itself (a hash
//! collision reads as a miss). A process that finds no answer creates
//! `<dir>/<hash>.lock` exclusively and computes; the others wait for the
//! answer, and compute it themselves when the lock goes away without one
//! or its holder died (the lock holds its process id, looked up in
//! `/proc` where there is one), or after [`WAIT_LIMIT`]. The answer is
//! written to a temporary file and renamed, so a reader never sees half of
//! one. Any
//! I/O error makes the process compute the answer itself: the cache only
//! saves time, it never changes an answer.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Environment variable: a directory where gates share their oracle
/// answers ([`get_or_compute`]); unset or empty, no cache.
pub const ENV_REFERENCE_CACHE: &str = "KERNEL_ORACLE_REFERENCE_CACHE";

/// How long a process waits for another's answer before computing its
/// own: well below `score`'s gate limit (1800 s by default), so a waiter
/// stuck behind a lock it cannot judge (a reused process id) still
/// finishes its gate.
pub const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// The cache directory, when [`ENV_REFERENCE_CACHE`] names one.
pub fn dir() -> Option<PathBuf> {
    std::env::var_os(ENV_REFERENCE_CACHE)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// FNV-1a, 64 bits, of `bytes`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The answer bytes stored for `key` in `file`, if it holds `key`'s.
fn read_answer(file: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = fs::read(file).ok()?;
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    (bytes[..nl] == *key.as_bytes()).then(|| bytes[nl + 1..].to_vec())
}

fn write_answer(dir: &Path, file: &Path, key: &str, answer: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!(
        "{}.{}.tmp",
        file.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("answer"),
        std::process::id()
    ));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(key.as_bytes())?;
    f.write_all(b"\n")?;
    f.write_all(answer)?;
    f.sync_all()?;
    fs::rename(&tmp, file)
}

/// `compute()`'s bytes for `key`, from the cache in [`dir`] when another
/// process (or an earlier row) computed them, else computed here and
/// stored. Without a cache directory, `compute()`.
///
/// `key` must name everything the answer depends on; it must not contain
/// a newline (one is replaced by a space).
pub fn get_or_compute(key: &str, compute: impl FnOnce() -> Vec<u8>) -> Vec<u8> {
    get_or_compute_in(dir().as_deref(), key, compute)
}

/// [`get_or_compute`] with the cache directory given (`None`: no cache).
pub fn get_or_compute_in(
    dir: Option<&Path>,
    key: &str,
    compute: impl FnOnce() -> Vec<u8>,
) -> Vec<u8> {
    let Some(dir) = dir else {
        return compute();
    };
    let key = key.replace('\n', " ");
    let hash = format!("{:016x}", fnv1a64(key.as_bytes()));
    let file = dir.join(format!("{hash}.ref"));
    let lock = dir.join(format!("{hash}.lock"));
    if fs::create_dir_all(dir).is_err() {
        return compute();
    }
    let start = Instant::now();
    loop {
        if let Some(a) = read_answer(&file, &key) {
            return a;
        }
        match OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(mut f) => {
                if write!(f, "{}", std::process::id()).is_err() {
                    // A lock without a holder's id would be waited on
                    // for WAIT_LIMIT: give it up and compute alone.
                    drop(f);
                    let _ = fs::remove_file(&lock);
                    return compute();
                }
                drop(f);
                let answer = compute();
                let _ = write_answer(dir, &file, &key, &answer);
                let _ = fs::remove_file(&lock);
                return answer;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Another process computes it: wait for its answer (the
                // loop re-reads), or for its lock to go away.
                if start.elapsed() > WAIT_LIMIT {
                    return compute();
                }
                if holder_died(&lock) {
                    // Take the dead holder's lock out of the way under a
                    // name of our own, so that two waiters that both saw
                    // it dead do not remove each other's new lock.
                    let stale = dir.join(format!(
                        "{hash}.stale.{}.{}",
                        std::process::id(),
                        start.elapsed().as_nanos()
                    ));
                    if fs::rename(&lock, &stale).is_ok() {
                        let _ = fs::remove_file(&stale);
                    }
                    continue;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(_) => return compute(),
        }
    }
}

/// Whether the process whose id `lock` holds has ended (a lock that is
/// empty or unreadable is being written, or is not ours to judge: alive).
/// Only where `/proc` lists processes; elsewhere, alive.
fn holder_died(lock: &Path) -> bool {
    if !Path::new("/proc/self").exists() {
        return false;
    }
    match fs::read_to_string(lock)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}

/// `f32`s as little-endian bytes.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes as `f32`s (a trailing partial word is dropped).
pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_shared_keyed_and_survive_a_dead_lock_holder() {
        let dir = std::env::temp_dir().join(format!("refcache-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let c = Some(dir.as_path());
        let mut calls = 0;
        let a = get_or_compute_in(c, "row a", || {
            calls += 1;
            vec![1, 2, 3]
        });
        let b = get_or_compute_in(c, "row a", || {
            calls += 1;
            vec![9]
        });
        assert_eq!((a, b, calls), (vec![1, 2, 3], vec![1, 2, 3], 1));
        // Another key is another answer.
        assert_eq!(get_or_compute_in(c, "row b", || vec![7]), vec![7]);
        // A file holding another key (a hash collision) reads as a miss.
        let hash = format!("{:016x}", fnv1a64(b"row c"));
        fs::write(dir.join(format!("{hash}.ref")), b"row x\n\x05").unwrap();
        assert_eq!(get_or_compute_in(c, "row c", || vec![6]), vec![6]);
        assert_eq!(get_or_compute_in(c, "row c", || vec![0]), vec![6]);
        // A lock left by a process that has ended is taken over (where
        // /proc tells; elsewhere such a lock is waited on).
        let hash_e = format!("{:016x}", fnv1a64(b"row e"));
        fs::write(
            dir.join(format!("{hash_e}.lock")),
            format!("{}", u32::MAX - 1),
        )
        .unwrap();
        if Path::new("/proc/self").exists() {
            assert_eq!(get_or_compute_in(c, "row e", || vec![5]), vec![5]);
        }
        // A live holder's answer is waited for.
        let hash = format!("{:016x}", fnv1a64(b"row d"));
        fs::write(
            dir.join(format!("{hash}.lock")),
            format!("{}", std::process::id()),
        )
        .unwrap();
        let d = std::thread::scope(|s| {
            let t = s.spawn(|| get_or_compute_in(c, "row d", || vec![1]));
            std::thread::sleep(Duration::from_millis(200));
            write_answer(&dir, &dir.join(format!("{hash}.ref")), "row d", &[4]).unwrap();
            t.join().unwrap()
        });
        assert_eq!(d, vec![4]);
        // No directory: no cache.
        assert_eq!(get_or_compute_in(None, "row a", || vec![8]), vec![8]);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            bytes_f32(&f32_bytes(&[1.5, -0.0, f32::NAN]))[..2],
            [1.5, -0.0]
        );
    }
}
