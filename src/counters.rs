//! The per-process case counters every case kind prints (`STATS` in each
//! module): one increment and one percentage, shared.

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds one to `c`; returns the new value.
pub fn count(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

/// `part` as `"P (x.y%)"` of `n` cases.
pub fn pct(part: &AtomicU64, n: u64) -> String {
    let p = part.load(Ordering::Relaxed);
    format!("{p} ({:.1}%)", 100.0 * p as f64 / n.max(1) as f64)
}
