//! The generator, pacer and sink loop allocates nothing: counted with a global allocator.
//! (Alone in its binary, and the tests take turns, so no other test allocates meanwhile.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tester::fake::{Behaviour, FakeDut, MultiWire};
use tester::traffic::{Mix, TrafficSpec};
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

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn offering_a_load_allocates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn offering_a_load_on_several_ports_with_shares_allocates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = TrafficSpec { flows: 4096, ..TrafficSpec::default() };
    let mix = Mix { weights: vec![("c0".into(), 5.0)], others: 1.0, first: None };
    let dut = MultiWire::new(4, 2, 1024);
    let mut r = Runner::with_mix(Box::new(dut), &spec, &mix, RunnerOptions::default()).unwrap();
    let paced = Load::paced(200_000.0, Duration::from_millis(100), Duration::from_millis(10));
    r.offer(&paced);
    let before = ALLOCS.load(Ordering::Relaxed);
    let a = r.offer(&paced);
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(a.accepted + a.refused, 20_000);
    assert_eq!(allocs, 0, "allocations while offering {} frames on two ports", a.accepted);
    r.finish().unwrap();
}

#[test]
fn replaying_a_load_on_several_ports_allocates_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let spec = TrafficSpec { flows: 64, ..TrafficSpec::default() };
    let mix = Mix { weights: vec![("c0".into(), 3.0)], others: 1.0, first: None };
    let opts = RunnerOptions { replay: true, ..RunnerOptions::default() };
    let mut r = Runner::with_mix(Box::new(MultiWire::new(4, 2, 1024)), &spec, &mix, opts).unwrap();
    let paced = Load::paced(200_000.0, Duration::from_millis(100), Duration::from_millis(10));
    r.offer(&paced);
    let before = ALLOCS.load(Ordering::Relaxed);
    let a = r.offer(&paced);
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(a.accepted + a.refused, 20_000);
    assert_eq!(allocs, 0, "allocations while replaying {} frames on two ports", a.accepted);
    r.finish().unwrap();
}
