//! No allocation on the memif data path (ARCHITECTURE decision 8): with a counting global
//! allocator, 200k frames each way through a connected server/client pair, in polling and in
//! interrupt mode, with chained buffers, allocate nothing in `rx_burst`, `tx_burst`, or an idle
//! `service()`.
//!
//! Only the test thread's allocations inside a measured window count (thread-local flag), so
//! the harness and other tests running in parallel do not disturb the result.

mod memif_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use memif_common::*;
use ports::memif::{MemifPort, RxMode};
use ports::{Batch, Port};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

#[inline]
fn note() {
    // `try_with`: the allocator may run while the thread's locals are being torn down.
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the arguments it was given, so `System`'s
// guarantees are ours; the counting touches only an atomic and a const-initialised thread-local
// `Cell`, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Counts this thread's allocations while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.load(Ordering::Relaxed) - before
}

fn blast(tx: &mut MemifPort, rx: &mut MemifPort, frames: &[Vec<u8>], total: usize) -> usize {
    let mut b = Batch::new(64);
    let mut r = Batch::new(256);
    let sel: Vec<u16> = (0..64).collect();
    let mut received = 0;
    let mut next = 0;
    let n = allocations(|| {
        while received < total {
            b.clear();
            for _ in 0..64 {
                b.push_copy(&frames[next % frames.len()]);
                next += 1;
            }
            let sent = tx.tx_burst(&mut b, &sel);
            next -= 64 - sent;
            r.clear();
            received += rx.rx_burst(&mut r);
            for p in r.packets() {
                assert!(!p.is_empty());
            }
            tx.service();
            rx.service();
        }
    });
    assert_eq!(n, 0, "{n} allocations while moving {total} frames");
    received
}

#[test]
fn data_path_and_idle_service_do_not_allocate() {
    let frames: Vec<Vec<u8>> = (0..64).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    for (mode, bsize) in
        [(RxMode::Polling, 2048), (RxMode::Interrupt, 2048), (RxMode::Polling, 512)]
    {
        let sock = unique_socket(true);
        let (mut s, mut c) = pair(&sock, |o| {
            o.rx_mode = mode;
            o.buffer_size = bsize;
            o.queues = 2;
        });
        assert!(blast(&mut c, &mut s, &frames, 200_000) >= 200_000);
        assert!(blast(&mut s, &mut c, &frames, 200_000) >= 200_000);
        let st = s.stats();
        assert_eq!((st.rx_dropped, st.tx_errors), (0, 0));
    }
}
