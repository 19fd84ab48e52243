//! The CUDA Gated DeltaNet kernels (or the candidate named by
//! KERNEL_ORACLE_GDN_CU): the fused step against chained per-row launches
//! (and, one case in four, the packed twins and a graph replay on rebound
//! buffers), every kernel against the core oracle, and one case in four a
//! batch of 2 or 3 sequences against each one's oracle. A divergence
//! panics with a reproduction; see `kernel_oracle::gdn::check`.
//!
//! `scripts/gpu-bundle` builds it with `--no-trace-compares` (ASan and edge
//! coverage kept): the input is 5 selector bytes and a data seed, so no
//! comparison needs solving, and the comparison hooks in the oracle's loops
//! took 40-55% of a case's host time.
#![no_main]
use kernel_oracle::gdn::{check_with_artifact, CaseSpec};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

kernel_oracle_fuzz::asan_options!();

/// Keeps freed blocks of 256 KiB or more for reuse by an allocation of the
/// same size and alignment. A case allocates tens of MiB of states and
/// snapshots; ASan serves each such block from fresh pages (its large
/// allocations are mapped and unmapped one by one) and every page then
/// faults in, which on the H200 host cost most of a case's time. The
/// harness keeps its own f32 buffers from case to case
/// (`kernel_oracle::gdn::pool`, any length up to a vector's capacity);
/// this catches the other large blocks. Reusing a block of the same layout
/// keeps ASan's redzones around it; only a use-after-free of a reused
/// large block goes unseen.
struct ReuseLarge;

/// The smallest block kept (bytes).
const LARGE: usize = 256 << 10;
/// The most bytes kept at once. With the harness's pool (up to 256 MiB)
/// beside it, the process stays well under libFuzzer's 2 GiB resident
/// limit (the pool with 1 GiB here peaked at 2045 MB on the H200).
const KEPT_MAX: usize = 256 << 20;

/// One kept block: (address, size, alignment).
type Block = (usize, usize, usize);

/// Kept blocks, and their total size.
static KEPT: Mutex<(Vec<Block>, usize)> = Mutex::new((Vec::new(), 0));

// SAFETY: every block handed out was allocated by `System` with the same
// layout, and is handed out to one owner at a time (taken from the list
// under the lock).
unsafe impl GlobalAlloc for ReuseLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= LARGE {
            if let Ok(mut k) = KEPT.lock() {
                let (size, align) = (layout.size(), layout.align());
                if let Some(i) = k.0.iter().position(|&(_, s, a)| s == size && a == align) {
                    let (p, s, _) = k.0.swap_remove(i);
                    k.1 -= s;
                    return p as *mut u8;
                }
            }
        }
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract; a reused block is zeroed here.
        unsafe {
            let p = self.alloc(layout);
            if !p.is_null() {
                std::ptr::write_bytes(p, 0, layout.size());
            }
            p
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= LARGE {
            if let Ok(mut k) = KEPT.lock() {
                if k.1 + layout.size() <= KEPT_MAX && k.0.len() < k.0.capacity() {
                    k.0.push((ptr as usize, layout.size(), layout.align()));
                    k.1 += layout.size();
                    return;
                }
            }
        }
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: ReuseLarge = ReuseLarge;

kernel_oracle_fuzz::typed_fuzz_target!(|spec: &CaseSpec, artifact: &str| {
    // Room for the kept list, reserved once outside the allocator's lock
    // (the list itself must not grow while the lock is held).
    {
        let mut k = KEPT.lock().unwrap();
        if k.0.capacity() == 0 {
            k.0.reserve_exact(256);
        }
    }
    check_with_artifact(spec, Some(artifact))
});
