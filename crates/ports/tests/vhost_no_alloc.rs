//! No allocation on the vhost-user data path: with a counting global allocator, 100k frames
//! each way between an in-process frontend (the test plays the guest driver) and the port, with
//! mergeable receive buffers, allocate nothing in `rx_burst`, `tx_burst`, or an idle
//! `service()`. Only the test thread's allocations inside the measured window count.

mod vhost_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use ports::{Batch, Port, PortStatus};
use vhost_common::*;

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

#[test]
fn the_vhost_user_data_path_allocates_nothing() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    const BURST: u16 = 32;
    // Every transmit descriptor holds a header and a 60-byte frame; every receive descriptor
    // a 2 KiB buffer. The guest only re-posts them.
    let mut frame = vec![0u8; 12 + 60];
    frame[12..18].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[24] = 0x88;
    for i in 0..Q {
        g.write(BUFS + 128 * i as u64, &frame);
        g.desc(1, i, BUFS + 128 * i as u64, frame.len() as u32, 0, 0);
        g.desc(0, i, BUFS + 0x10000 + 2048 * i as u64, 2048, F_WRITE, 0);
    }
    let mut b = Batch::new(256);
    let sel: Vec<u16> = (0..BURST).collect();
    let (mut got, mut sent) = (0usize, 0usize);
    let total = 100_000;
    let n = allocations(|| {
        let mut k = 0u16;
        while got < total {
            for j in 0..BURST {
                g.post(1, (k + j) % Q);
                g.post(0, (k + j) % Q);
            }
            k = k.wrapping_add(BURST);
            b.clear();
            let r = port.rx_burst(&mut b);
            got += r;
            sent += port.tx_burst(&mut b, &sel[..r]);
            if got % 4096 == 0 {
                port.service();
            }
        }
    });
    assert_eq!(n, 0, "allocations on the data path");
    assert_eq!((got, sent), (total, total));
    assert_eq!(port.status(), PortStatus::Up);
    let s = port.stats();
    assert_eq!(
        (s.rx_packets, s.tx_packets, s.rx_dropped, s.tx_errors),
        (total as u64, total as u64, 0, 0)
    );
}
