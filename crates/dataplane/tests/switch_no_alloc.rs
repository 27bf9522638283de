//! Zero allocations in the switch's forwarding path with snooping on, measured with a counting
//! global allocator (as `no_alloc.rs` does for VRs): joins and leaves of every IGMP and MLD
//! version, queries, group data, unregistered and link-local multicast, broadcasts, known and
//! unknown unicast, a group table that fills, and memberships that time out — after one
//! warm-up pass, the same traffic again allocates nothing.

mod snoop_frames;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use dataplane::{Engine, MemberConfig, MemberMode, Switch, SwitchConfig};
use ports::mem::{self, MemPort};
use ports::{Batch, Port};
use snoop_frames::*;
use wire::igmp;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the arguments it was given; the counting
// touches only an atomic and a const-initialised thread-local `Cell`, which do not allocate.
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
        // SAFETY: `ptr` came from `System` with `layout`, as the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn note() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MS: u64 = 1_000_000;
const N: usize = 8;

/// The traffic mix: (host, frame).
fn mix() -> Vec<(usize, Vec<u8>)> {
    let mut v = Vec::new();
    let all = v4("224.0.0.1");
    let v3 = v4("224.0.0.22");
    for k in 0..6u8 {
        let g = v4(&format!("239.1.0.{k}"));
        let g6 = v6(&format!("ff0e::{k}"));
        let h = 1 + k as usize % (N - 1);
        v.push((0, igmp_frame(0, all, &igmp_msg(igmp::MEMBERSHIP_QUERY, v4("0.0.0.0")))));
        v.push((h, igmp_frame(h, g, &igmp_msg(igmp::V2_REPORT, g))));
        v.push((
            h % 3 + 1,
            igmp_frame(h % 3 + 1, v3, &igmp_v3(&[(igmp::record::MODE_IS_EXCLUDE, g)])),
        ));
        v.push((
            h,
            ip6_frame(
                h,
                v6("ff02::16"),
                58,
                true,
                &mld_v2(&[(igmp::record::CHANGE_TO_EXCLUDE, g6)]),
            ),
        ));
        v.push((2, ip6_frame(2, g6, 58, true, &mld_v1(131, g6))));
        for t in 0..4 {
            v.push((0, data4(0, g, t)));
            v.push((0, ip6_frame(0, g6, 17, false, &[t; 16])));
        }
        v.push((3, data4(3, v4("224.0.0.251"), 1)));
        v.push((3, data4(3, v4("239.200.0.1"), 1)));
        v.push((h, igmp_frame(h, v4("224.0.0.2"), &igmp_msg(igmp::LEAVE_GROUP, g))));
        v.push((2, ip6_frame(2, v6("ff02::2"), 58, true, &mld_v1(132, g6))));
        let mut u = vec![0xff; 6];
        u.extend(host(k as usize % N));
        u.extend([0x88, 0xb5]);
        u.extend([k; 46]);
        v.push((k as usize % N, u.clone()));
        u[..6].copy_from_slice(&host((k as usize + 1) % N));
        v.push((k as usize % N, u.clone()));
        u[..6].copy_from_slice(&[2, 0, 0, 0, 0x55, k]);
        v.push((k as usize % N, u));
    }
    v
}

#[test]
fn snooping_switch_allocates_nothing() {
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    let mut hosts: Vec<MemPort> = Vec::new();
    for i in 0..N {
        let (a, b) = mem::pair(&format!("m{i}"), &format!("h{i}"), 256);
        ports.push(Box::new(a));
        hosts.push(b);
    }
    let cfg = SwitchConfig {
        name: "sw".into(),
        members: (0..N as u16)
            .map(|port| MemberConfig { port, mode: MemberMode::Access { vlan: 1 } })
            .collect(),
        statics: Vec::new(),
        mac_limit: 64,
        aging_ms: 5_000,
        snooping: true,
        // Fewer than the mix's groups: the table fills, and frees as memberships end.
        groups: 8,
        group_timeout_ms: 3_000,
    };
    let mut e = Engine::build(ports, Vec::new(), vec![Switch::new(&cfg).unwrap()], 256).unwrap();
    let frames = mix();
    let (mut tx, mut rx) = (Batch::new(1), Batch::new(256));
    let mut now = 1_000 * MS;
    let mut pass = |e: &mut Engine, hosts: &mut [MemPort], now: &mut u64| {
        for (h, f) in &frames {
            tx.clear();
            tx.push_copy(f);
            assert_eq!(hosts[*h].tx_burst(&mut tx, &[0]), 1);
            *now += 10 * MS;
            e.poll(*now);
            for h in hosts.iter_mut() {
                rx.clear();
                h.rx_burst(&mut rx);
            }
        }
        // Long enough for every membership, router port and station to time out.
        *now += 10_000 * MS;
        e.poll(*now);
    };
    pass(&mut e, &mut hosts, &mut now);
    let before = *e.switches()[0].counters();
    COUNTING.with(|c| c.set(true));
    let a0 = ALLOCS.load(Ordering::Relaxed);
    // The allocator does count: this one is seen (and taken off again).
    std::hint::black_box(vec![0u8; 64]);
    assert_eq!(ALLOCS.load(Ordering::Relaxed), a0 + 1, "the counting allocator counts");
    let a0 = a0 + 1;
    for _ in 0..50 {
        pass(&mut e, &mut hosts, &mut now);
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - a0;
    COUNTING.with(|c| c.set(false));
    let c = *e.switches()[0].counters();
    // The mix did what it is there for, in every pass.
    for (what, b, a) in [
        ("joins", before.joins, c.joins),
        ("leaves", before.leaves, c.leaves),
        ("expired", before.expired, c.expired),
        ("queries", before.queries, c.queries),
        ("snooped", before.snooped, c.snooped),
        ("groups_full", before.groups_full, c.groups_full),
        ("flooded", before.flooded, c.flooded),
        ("forwarded", before.forwarded, c.forwarded),
        ("aged", before.aged, c.aged),
    ] {
        assert!(a >= b + 50 && b > 0, "{what}: {b} after the warm-up, {a} after 50 passes");
    }
    assert_eq!(allocs, 0, "allocations in 50 passes of {} frames", frames.len());
}
