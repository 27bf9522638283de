//! The heap one empty VR holds (issue 17, item 3): a VR with one interface, an IPv4 and an
//! IPv6 address and default limits, measured with a global allocator that tracks live bytes.
//! Its neighbor table and hold queues start empty and grow on demand (they held ~480 KiB when
//! they were made whole at start), and so do its packet buffers for fragmentation and
//! reassembly (nine jumbo buffers, 9.1 KiB each, made the first time the VR needs them).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use common::*;
use dataplane::Vr;

struct Live;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every method forwards to `System` with the arguments it was given; the only addition
// is an atomic add, which does not allocate.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

#[test]
fn an_empty_vr_holds_at_most_64_kib() {
    let mut cfg = base_vr();
    cfg.interfaces.truncate(1);
    cfg.routes.clear();
    cfg.neighbors.clear();
    // Made before measuring: the configuration is the caller's, not the VR's.
    let cfg = std::hint::black_box(cfg);
    // One test in this binary, so no other thread allocates meanwhile.
    let before = LIVE.load(Ordering::Relaxed);
    let vr = Vr::new(&cfg).unwrap();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    println!("{{\"empty_vr_heap_bytes\": {bytes}}}");
    drop(vr);
    let bound = 64 * 1024;
    assert!(bytes <= bound, "an empty VR holds {bytes} bytes of heap (bound {bound})");
}
