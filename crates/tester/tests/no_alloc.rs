//! The generator, pacer and sink loop allocates nothing: counted with a global allocator.
//! (Alone in its binary, so no other test allocates meanwhile.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tester::fake::{Behaviour, FakeDut};
use tester::traffic::TrafficSpec;
use tester::{Load, Rate, Runner, RunnerOptions, Until};

static ALLOCS: AtomicU64 = AtomicU64::new(0);

struct Counting;

// SAFETY: forwards every call to `System` unchanged, adding a relaxed counter increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded unchanged; the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn offering_a_load_allocates_nothing() {
    let spec = TrafficSpec { flows: 4096, ..TrafficSpec::default() };
    let mut r = Runner::new(
        Box::new(FakeDut::new(Behaviour::Loopback, 1024)),
        &spec,
        RunnerOptions::default(),
    )
    .unwrap();
    let paced = Load::paced(200_000.0, Duration::from_millis(100), Duration::from_millis(10));
    let unpaced = Load {
        rate: Rate::Max,
        until: Until::Frames(200_000),
        warmup: Duration::ZERO,
        burst: None,
        retry_refused: true,
    };
    r.offer(&paced);
    let before = ALLOCS.load(Ordering::Relaxed);
    let a = r.offer(&paced);
    let b = r.offer(&unpaced);
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!((a.accepted, b.accepted), (20_000, 200_000));
    assert_eq!(allocs, 0, "allocations while offering {} frames", a.accepted + b.accepted);
}
