//! Counters shared by the case kinds' `check` functions: each kind keeps a
//! static of `AtomicU64`s and prints them every N cases, so that time spent
//! on refused or degenerate cases shows.

use std::sync::atomic::{AtomicU64, Ordering};

/// Adds one to `c`; returns the new count.
pub fn count(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

/// `part` and its share of `n` cases, as `"12 (3.4%)"`.
pub fn pct(part: &AtomicU64, n: u64) -> String {
    let p = part.load(Ordering::Relaxed);
    format!("{p} ({:.1}%)", 100.0 * p as f64 / n.max(1) as f64)
}
