//! Host buffers reused from case to case.
//!
//! A case holds megabytes of f32 on the host: the initial states, the
//! oracle's working states and snapshots, and every device read-back
//! (about 25 MB per fuzz case on average, a batched case up to hundreds).
//! Drawn fresh each case, every page of them faults in on first touch,
//! and an ASan build maps and unmaps each large block on its own: that,
//! not the arithmetic, was most of a case's host time. [`check`] hands a
//! case's buffers back to [`POOL`] when it is judged, and the next case
//! takes them again.
//!
//! Only vectors of [`MIN_LEN`] elements or more are kept, at most
//! [`MAX_KEPT`] of them and [`MAX_BYTES`] in all. A vector taken keeps the
//! values of its earlier use ([`Pool::take`]): every caller of
//! [`Pool::take`] writes each element before reading it.
//!
//! [`check`]: super::check

use super::generate::CaseData;
use super::judge::Six;
use std::sync::Mutex;

/// The shortest vector kept (elements; 64 KiB): shorter ones are cheap to
/// allocate.
pub const MIN_LEN: usize = 16 << 10;
/// The most vectors kept.
pub const MAX_KEPT: usize = 512;
/// The most bytes kept (capacity): a fuzz case holds about 25 MB on
/// average and a batched one up to about 250 MB; libFuzzer stops a process
/// at 2 GiB of resident memory, and the CUDA context takes much of that.
pub const MAX_BYTES: usize = 256 << 20;

/// Kept vectors, shared by the threads of a case (the device driver's and
/// the oracle's).
#[derive(Debug, Default)]
pub struct Pool {
    /// The kept vectors, and their total capacity in bytes.
    kept: Mutex<(Vec<Vec<f32>>, usize)>,
}

/// The process's pool.
pub static POOL: Pool = Pool::new();

fn bytes(v: &Vec<f32>) -> usize {
    v.capacity() * std::mem::size_of::<f32>()
}

impl Pool {
    /// An empty pool.
    pub const fn new() -> Pool {
        Pool {
            kept: Mutex::new((Vec::new(), 0)),
        }
    }

    /// A vector of `len` elements whose values are unspecified (those of
    /// an earlier use, or zeros): the caller writes every element before
    /// it reads one. The kept vector of the least capacity that holds
    /// `len`, else a new one.
    pub fn take(&self, len: usize) -> Vec<f32> {
        if len < MIN_LEN {
            return vec![0.0; len];
        }
        let found = {
            let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            let best =
                k.0.iter()
                    .enumerate()
                    .filter(|(_, v)| v.capacity() >= len)
                    .min_by_key(|(_, v)| v.capacity())
                    .map(|(i, _)| i);
            best.map(|i| {
                let v = k.0.swap_remove(i);
                k.1 -= bytes(&v);
                v
            })
        };
        match found {
            Some(mut v) => {
                // Within the capacity: no allocation, and only elements
                // past the earlier length are written here.
                if v.len() >= len {
                    v.truncate(len);
                } else {
                    v.resize(len, 0.0);
                }
                v
            }
            None => vec![0.0; len],
        }
    }

    /// A vector of `len` zeros ([`Pool::take`], then filled).
    pub fn zeros(&self, len: usize) -> Vec<f32> {
        let mut v = self.take(len);
        v.fill(0.0);
        v
    }

    /// A copy of `src` ([`Pool::take`], then copied).
    pub fn copy_of(&self, src: &[f32]) -> Vec<f32> {
        let mut v = self.take(src.len());
        v.copy_from_slice(src);
        v
    }

    /// Keeps `v` for a later [`Pool::take`] (or drops it: too short, or
    /// the pool full).
    pub fn give(&self, v: Vec<f32>) {
        if v.capacity() < MIN_LEN {
            return;
        }
        let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if k.0.len() < MAX_KEPT && k.1 + bytes(&v) <= MAX_BYTES {
            k.1 += bytes(&v);
            k.0.push(v);
        }
    }

    /// [`Pool::give`]s each of `six`'s outputs.
    pub fn give_six(&self, six: Six) {
        let Six {
            conv_out,
            o,
            state,
            ring,
            snap_conv,
            snap_state,
        } = six;
        for v in [conv_out, o, state, ring, snap_conv, snap_state] {
            self.give(v);
        }
    }

    /// [`Pool::give`]s each of `d`'s vectors.
    pub fn give_data(&self, d: CaseData) {
        let CaseData {
            conv_w,
            dt_bias,
            a_log,
            ring0,
            state0,
            qkv,
            beta_raw,
            alpha,
            ..
        } = d;
        for v in [conv_w, dt_bias, a_log, ring0, state0, qkv, beta_raw, alpha] {
            self.give(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vector given back is taken again for a request it holds, at the
    /// requested length; a short request bypasses the pool; zeros() and
    /// copy_of() hold exactly what they say whatever the vector held.
    #[test]
    fn take_reuses_a_given_vector_at_the_requested_length() {
        let pool = Pool::new();
        let len = MIN_LEN * 3 + 3;
        let v = vec![1.5f32; len];
        let p = v.as_ptr();
        pool.give(v);
        pool.give(vec![2.5f32; len * 2]);
        let w = pool.take(len - 5);
        assert_eq!((w.len(), w.as_ptr()), (len - 5, p), "the least that fits");
        pool.give(w);
        let z = pool.zeros(len);
        assert_eq!((z.len(), z.as_ptr()), (len, p));
        assert!(z.iter().all(|&x| x.to_bits() == 0));
        pool.give(z);
        let src: Vec<f32> = (0..len + 9).map(|i| i as f32).collect();
        let c = pool.copy_of(&src);
        assert_eq!(c, src);
        assert_eq!(pool.take(3).len(), 3);
        pool.give(vec![0.0; 3]);
        assert_eq!(
            pool.kept.lock().unwrap().0.len(),
            1,
            "the short one dropped"
        );
    }
}
