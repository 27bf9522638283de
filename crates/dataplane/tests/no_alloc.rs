//! Zero allocations on the forwarding path (ARCHITECTURE decision 8), measured with a counting
//! global allocator: a VR with ~100k IPv4 routes (and 10k IPv6) forwards a million packets
//! without one allocation, and a mix of slow paths (ICMP errors, echo replies, ARP resolution
//! answered by the test, stale probes, failures) stays allocation-free too.
//!
//! Only the test thread's allocations inside a measured window count (thread-local flag), so
//! the harness and other tests running in parallel do not disturb the result.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use dataplane::config::{RouteConfig, RouteSource, RouteTarget, VrConfig, VrLimits};
use dataplane::{Engine, VrCounters};
use ports::mem::{self, MemPort};
use ports::{Batch, Port};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

#[inline]
fn note(size: usize) {
    // `try_with`: the allocator may run while the thread's locals are being torn down.
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the arguments it was given, so `System`'s
// guarantees are ours; the counting touches only atomics and a const-initialised thread-local
// `Cell`, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` was allocated by this allocator (that is, by `System`) with `layout`, as
        // the caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` counting this thread's allocations; returns its result, the allocations and bytes.
fn counted<R>(f: impl FnOnce() -> R) -> (R, u64, u64) {
    let (a0, b0) = (ALLOCS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed));
    COUNTING.with(|c| c.set(true));
    let r = f();
    COUNTING.with(|c| c.set(false));
    (r, ALLOCS.load(Ordering::Relaxed) - a0, BYTES.load(Ordering::Relaxed) - b0)
}

const GATEWAYS: u8 = 8;

/// One VR: lan (port 0), wan (port 1) with 8 static gateways; ~100k synthetic IPv4 routes and
/// 10k IPv6 routes spread over them, plus an IPv4 default route.
fn big_vr(limits: VrLimits) -> (VrConfig, Vec<ipnet::Ipv4Net>, Vec<ipnet::Ipv6Net>) {
    let mut routes = Vec::new();
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (net, nh) in fib::synthetic::ipv4(100_000, 256, 0x5eed) {
        // Keep clear of the lab's own 10/8.
        if net.network().octets()[0] == 10 {
            continue;
        }
        let gw = format!("10.0.1.{}", 2 + nh as u8 % GATEWAYS);
        routes.push(RouteConfig {
            prefix: net.into(),
            target: RouteTarget::Via { gateway: ip(&gw), iface: None },
            source: RouteSource::Static,
        });
        v4.push(net);
    }
    for (net, nh) in fib::synthetic::ipv6(10_000, 256, 0x5eed) {
        if net.network().octets()[..4] == [0x20, 0x01, 0x0d, 0xb8] {
            continue;
        }
        let gw = format!("2001:db8:1::{:x}", 2 + nh as u8 % GATEWAYS);
        routes.push(RouteConfig {
            prefix: net.into(),
            target: RouteTarget::Via { gateway: ip(&gw), iface: None },
            source: RouteSource::Static,
        });
        v6.push(net);
    }
    routes.push(via("0.0.0.0/0", "10.0.1.2"));
    let mut neighbors = Vec::new();
    for k in 0..GATEWAYS {
        let m = [0x02, 0, 0, 0, 0x0b, k];
        neighbors.push(neigh(1, &format!("10.0.1.{}", 2 + k), m));
        neighbors.push(neigh(1, &format!("2001:db8:1::{:x}", 2 + k), m));
    }
    neighbors.push(neigh(0, "10.0.0.10", H0));
    neighbors.push(neigh(0, "2001:db8::10", H0));
    let c = VrConfig {
        name: "big".into(),
        interfaces: vec![
            iface("lan", 0, None, M0, 1500, &["10.0.0.1/24"], &["2001:db8::1/64"]),
            iface("wan", 1, None, M1, 1500, &["10.0.1.1/24"], &["2001:db8:1::1/64"]),
        ],
        routes,
        neighbors,
        limits,
    };
    (c, v4, v6)
}

struct Rig {
    e: Engine,
    lan: MemPort,
    wan: MemPort,
    tx: Batch,
    rx: Batch,
    sel: Vec<u16>,
    now: u64,
}

impl Rig {
    fn new(c: &VrConfig) -> Rig {
        let (a, lan) = mem::pair("lan", "h-lan", 1024);
        let (b, wan) = mem::pair("wan", "h-wan", 1024);
        let e =
            Engine::from_configs(vec![Box::new(a), Box::new(b)], std::slice::from_ref(c)).unwrap();
        Rig {
            e,
            lan,
            wan,
            tx: Batch::new(256),
            rx: Batch::new(256),
            sel: (0..256).collect(),
            now: 1_000 * MS,
        }
    }

    /// Sends `n` frames from `frames` starting at `*at` (cycling) into lan, polls once, and
    /// drains wan. Returns frames received back on lan (left in `self.rx`).
    #[inline]
    fn round(&mut self, frames: &[Vec<u8>], at: &mut usize, n: usize) {
        self.tx.clear();
        for _ in 0..n {
            self.tx.push_copy(&frames[*at % frames.len()]);
            *at += 1;
        }
        let sent = self.lan.tx_burst(&mut self.tx, &self.sel[..n]);
        assert_eq!(sent, n);
        self.now += 20_000;
        self.e.poll(self.now);
        self.rx.clear();
        while self.wan.rx_burst(&mut self.rx) > 0 {
            self.rx.clear();
        }
    }

    fn counters(&self) -> VrCounters {
        *self.e.vrs()[0].counters()
    }
}

/// Destinations inside the routes (and some outside, for the default route).
fn forwarding_frames(v4: &[ipnet::Ipv4Net], v6: &[ipnet::Ipv6Net], n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let h6 = a6("2001:db8::10");
    (0..n)
        .map(|i| {
            let r = rng.next();
            if i % 8 == 7 {
                let net = v6[(r as usize) % v6.len()];
                let host = (u128::from(rng.next()) << 64 | u128::from(rng.next()))
                    & u128::from(net.hostmask());
                let dst = (u128::from(net.network()) | host).to_be_bytes();
                let p = Ip6::new(h6, dst, 64, 17, udp6(h6, dst, 1, 2, &[i as u8; 18]));
                to_vr6(M0, H0, None, &p)
            } else {
                let dst = if i % 5 == 0 {
                    // default route
                    let mut d = (rng.next() as u32).to_be_bytes();
                    d[0] = 1 + (d[0] % 200);
                    if d[0] == 10 || d[0] == 127 {
                        d[0] = 11;
                    }
                    std::net::Ipv4Addr::from(d)
                } else {
                    let net = v4[(r as usize) % v4.len()];
                    let host = rng.next() as u32 & u32::from(net.hostmask());
                    std::net::Ipv4Addr::from(u32::from(net.network()) | host)
                };
                let p = udp4_pkt("10.0.0.10", &dst.to_string(), 64, &[i as u8; 18]);
                to_vr(M0, H0, None, &p)
            }
        })
        .collect()
}

/// The counter itself works: an allocation inside a window is seen, one outside is not.
#[test]
fn counting_allocator_sees_allocations() {
    let (v, allocs, bytes) = counted(|| Vec::<u64>::with_capacity(100));
    assert_eq!((allocs, bytes), (1, 800));
    drop(v);
    let outside = Vec::<u8>::with_capacity(10);
    let ((), allocs, _) = counted(|| ());
    assert_eq!(allocs, 0);
    drop(outside);
}

#[test]
fn forwarding_a_million_packets_allocates_nothing() {
    forward_a_million(false);
}

/// The same with a capture (received, sent and dropped frames at the ingress port, drained
/// by another thread meanwhile) and a trace running: copies go to preallocated rings.
#[test]
fn forwarding_a_million_packets_captured_allocates_nothing() {
    forward_a_million(true);
}

fn forward_a_million(observe: bool) {
    let (c, v4, v6) = big_vr(VrLimits::default());
    assert!(v4.len() > 90_000, "{} IPv4 routes", v4.len());
    let mut rig = Rig::new(&c);
    let ring = dataplane::CaptureRing::new(1024);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drainer = observe.then(|| {
        let (ring, stop) = (ring.clone(), stop.clone());
        rig.e.cell_mut().set_capture(Some(dataplane::Tap::new(0, true, 0, ring.clone())));
        rig.e.cell_mut().set_trace(0, 10_000).unwrap();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += ring.drain(&mut got, 4096);
                got.clear();
                std::thread::yield_now();
            }
            n
        })
    });
    let frames = forwarding_frames(&v4, &v6, 4096);
    let mut at = 0;
    for _ in 0..64 {
        rig.round(&frames, &mut at, 256); // warm-up
    }
    let before = rig.counters();
    const N: usize = 1_000_000;
    let (allocs, bytes) = forward_counted(&mut rig, &frames, &mut at, N);
    let after = rig.counters();
    assert_eq!(
        after.forwarded - before.forwarded,
        N as u64,
        "every packet forwarded\n{}",
        rig.e.dump()
    );
    assert_eq!(after.dropped_total(), before.dropped_total(), "{}", rig.e.dump());
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) while forwarding {N} packets");
    if let Some(d) = drainer {
        stop.store(true, Ordering::Relaxed);
        let drained = d.join().unwrap();
        // Every frame received was copied or, the ring full, lost (counted).
        assert!(ring.taken() + ring.lost() >= N as u64, "{} + {}", ring.taken(), ring.lost());
        assert!(drained > 0);
        assert_eq!(rig.e.cell_mut().take_trace().0.len(), 10_000);
    }
}

/// Forwards `n` frames of `frames` (from `at` on) through `rig` in bursts of 256, counting
/// the allocations and bytes allocated meanwhile.
fn forward_counted(rig: &mut Rig, frames: &[Vec<u8>], at: &mut usize, n: usize) -> (u64, u64) {
    let ((), allocs, bytes) = counted(|| {
        let mut left = n;
        while left > 0 {
            let k = left.min(256);
            rig.round(frames, at, k);
            left -= k;
        }
    });
    (allocs, bytes)
}

/// Through an impaired egress (delay with normal jitter, loss, duplicates, reordering,
/// corruption, a rate): frames wait in the impairment's pool and leave on later polls, and
/// none of it allocates.
#[test]
fn forwarding_a_million_packets_impaired_allocates_nothing() {
    use dataplane::impair::{Chance, Distribution, ImpairConfig, ImpairDrop, Loss};
    let (c, v4, v6) = big_vr(VrLimits::default());
    let mut rig = Rig::new(&c);
    let pct = |x| Chance::from_percent(x).unwrap();
    let cfg = ImpairConfig {
        delay_ns: 100_000,
        jitter_ns: 20_000,
        distribution: Distribution::Normal,
        loss: Loss::Random(pct(1.0)),
        duplicate: pct(1.0),
        reorder: pct(5.0),
        corrupt: pct(1.0),
        rate_bps: 400_000_000_000,
        limit: 4096,
        seed: 3,
    };
    rig.e.cell_mut().set_impair(1, Some(cfg)).unwrap();
    let frames = forwarding_frames(&v4, &v6, 4096);
    let mut at = 0;
    for _ in 0..64 {
        rig.round(&frames, &mut at, 256); // warm-up
    }
    let before = rig.counters();
    let imp0 = *rig.e.cell().port_impair(1).unwrap().counters();
    const N: usize = 1_000_000;
    let (allocs, bytes) = forward_counted(&mut rig, &frames, &mut at, N);
    let after = rig.counters();
    let imp = rig.e.cell().port_impair(1).unwrap();
    let c = *imp.counters();
    assert_eq!(after.forwarded - before.forwarded, N as u64, "{}", rig.e.dump());
    assert_eq!(c.offered - imp0.offered, N as u64);
    assert!(c.sent > imp0.sent + (N as u64) * 9 / 10, "{c:?}");
    assert!(c.dropped(ImpairDrop::Loss) > 0 && c.duplicated > 0 && c.reordered > 0);
    assert!(c.corrupted > 0);
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) while forwarding {N} packets");
}

/// A mix of slow paths: TTL expiry (ICMP errors), no route (ICMPv6 errors), pings (replies),
/// bad checksums, packets to lan hosts that must be resolved (ARP requests, answered by the
/// test from prebuilt frames, or never for some hosts: retransmits, failure, hold), pings from
/// unresolved hosts (replies queued), and stale entries re-probed by unicast.
#[test]
fn slow_paths_allocate_nothing() {
    let limits = VrLimits {
        neighbor_reachable_ms: 3,
        neighbor_retrans_ms: 1,
        neighbor_failed_hold_ms: 2,
        solicitations_per_sec: 10_000_000,
        solicitations_burst: 1_000_000,
        icmp_errors_per_sec: 10_000_000,
        icmp_errors_burst: 1_000_000,
        ..VrLimits::default()
    };
    let (c, v4, _) = big_vr(limits);
    let mut rig = Rig::new(&c);
    let mut rng = Rng(7);
    // Hosts 10.0.0.20..=219 answer ARP; 220..=239 never do.
    let arp_replies: Vec<Vec<u8>> = (0..=255u8)
        .map(|k| {
            let m = [0x02, 0x44, 0, 0, 0, k];
            pad60(eth(M0, m, None, ET_ARP, &arp(2, m, &format!("10.0.0.{k}"), M0, "10.0.0.1")))
        })
        .collect();
    let r6 = a6("2001:db8::1");
    let nd_replies: Vec<Vec<u8>> = (0..=255u8)
        .map(|k| {
            let m = [0x02, 0x66, 0, 0, 0, k];
            let t = a6(&format!("2001:db8::{k:x}"));
            to_vr6(
                M0,
                m,
                None,
                &Ip6::new(t, r6, 255, 58, na_msg(t, r6, t, (false, true, true), &lla_opt(2, m))),
            )
        })
        .collect();
    let mut frames = Vec::new();
    for i in 0..4096usize {
        let r = rng.next();
        let f = match i % 8 {
            0 => {
                let net = v4[(r as usize) % v4.len()];
                to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", &net.network().to_string(), 1, &[1; 30]))
            }
            1 => to_vr6(M0, H0, None, &udp6_pkt("2001:db8::10", "3ffe::1", 64, &[2; 30])),
            2 => to_vr(
                M0,
                H0,
                None,
                &Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, i as u16, &[3; 56])),
            ),
            3 => {
                let host = 20 + (r % 220) as u8;
                to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", &format!("10.0.0.{host}"), 64, &[4; 30]))
            }
            4 => {
                let host = 20 + (r % 200) as u8;
                let m = [0x02, 0x44, 0, 0, 0, host];
                to_vr(
                    M0,
                    m,
                    None,
                    &Ip4::new(
                        &format!("10.0.0.{host}"),
                        "10.0.0.1",
                        64,
                        1,
                        echo4_req(2, i as u16, &[5; 8]),
                    ),
                )
            }
            5 => {
                let mut b = udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[6; 30]).bytes();
                b[10] ^= 0x55;
                eth(M0, H0, None, ET_IP4, &b)
            }
            6 => to_vr6(
                M0,
                H0,
                None,
                &Ip6::new(
                    a6("2001:db8::10"),
                    a6("2001:db8::1"),
                    64,
                    58,
                    echo6_req(a6("2001:db8::10"), a6("2001:db8::1"), 1, 1, b"v6"),
                ),
            ),
            _ if i % 16 == 7 => {
                to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "9.9.9.9", 64, &[7; 30]))
            }
            _ => {
                let host = 20 + (r % 40) as u8; // 2001:db8::20..=3b answer NS up to ::37
                to_vr6(
                    M0,
                    H0,
                    None,
                    &udp6_pkt("2001:db8::10", &format!("2001:db8::{host:x}"), 64, &[8; 30]),
                )
            }
        };
        frames.push(f);
        // The RFC paths: options filled in or refused, a routing header and a link-local
        // source answered, a fragmented echo to the VR reassembled and answered.
        let (h6, r6) = (a6("2001:db8::10"), a6("2001:db8::1"));
        match i % 64 {
            15 => frames.push(to_vr(
                M0,
                H0,
                None,
                &Ip4 {
                    options: vec![7, 7, 4, 0, 0, 0, 0, 1],
                    ..udp4_pkt("10.0.0.10", "9.9.9.9", 64, &[9; 30])
                },
            )),
            31 => frames.push(to_vr(
                M0,
                H0,
                None,
                &Ip4 {
                    options: vec![0x94, 0xff, 0, 0],
                    ..udp4_pkt("10.0.0.10", "9.9.9.9", 64, &[9; 30])
                },
            )),
            47 => {
                let req = Ip4 {
                    id: i as u16,
                    ..Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(3, i as u16, &[10; 40]))
                };
                for (k, part) in req.payload.chunks(24).enumerate() {
                    let f = Ip4 {
                        payload: part.to_vec(),
                        frag: 3 * k as u16,
                        mf: k == 0,
                        ..req.clone()
                    };
                    frames.push(to_vr(M0, H0, None, &f));
                }
            }
            55 => {
                let mut rh = vec![17, 2, 0, 1, 0, 0, 0, 0];
                rh.extend_from_slice(&a6("2001:db8:ffff::1"));
                rh.extend(udp6(h6, r6, 1, 2, b"rh0"));
                frames.push(to_vr6(M0, H0, None, &Ip6::new(h6, r6, 64, 43, rh)));
            }
            63 => {
                frames.push(to_vr6(M0, H0, None, &udp6_pkt("fe80::5", "2001:db8::20", 64, b"ll")))
            }
            _ => {}
        }
    }
    let mut replies = Batch::new(512);
    let sel: Vec<u16> = (0..512).collect();
    let mut lan_rx = Batch::new(256);
    let mut at = 0;
    // One round: traffic in; lan's output read; ARP requests answered next round.
    let mut round = |rig: &mut Rig, replies: &mut Batch, lan_rx: &mut Batch| {
        let n = replies.len();
        if n > 0 {
            assert_eq!(rig.lan.tx_burst(replies, &sel[..n]), n);
        }
        replies.clear();
        rig.round(&frames, &mut at, 128);
        loop {
            lan_rx.clear();
            if rig.lan.rx_burst(lan_rx) == 0 {
                break;
            }
            for p in lan_rx.packets() {
                let f = p.frame();
                // An ARP request (broadcast or unicast probe) for 10.0.0.20..=219: answer it.
                if f.len() >= 42
                    && f[12..14] == [0x08, 0x06]
                    && f[21] == 1
                    && f[38..41] == [10, 0, 0]
                {
                    let k = f[41];
                    if (20..220).contains(&k) && replies.room() > 0 {
                        replies.push_copy(&arp_replies[k as usize]);
                    }
                }
                // A neighbor solicitation for 2001:db8::20..=37: answer it.
                if f.len() >= 78
                    && f[12..14] == [0x86, 0xdd]
                    && f[20] == 58
                    && f[54] == 135
                    && f[62..77] == r6[..15]
                {
                    let k = f[77];
                    if (0x20..0x38).contains(&k) && replies.room() > 0 {
                        replies.push_copy(&nd_replies[k as usize]);
                    }
                }
            }
        }
    };
    for _ in 0..200 {
        round(&mut rig, &mut replies, &mut lan_rx); // warm-up: tables fill, entries cycle
    }
    let before = rig.counters();
    let ((), allocs, bytes) = counted(|| {
        for _ in 0..2_000 {
            round(&mut rig, &mut replies, &mut lan_rx);
        }
    });
    let after = rig.counters();
    let d = |f: fn(&VrCounters) -> u64| f(&after) - f(&before);
    let dump = rig.e.dump();
    assert!(d(|c| c.icmp_errors) > 10_000, "ICMP errors made\n{dump}");
    assert!(d(|c| c.echo_replies) > 10_000, "echo replies made\n{dump}");
    assert!(d(|c| c.neighbor_requests) > 1_000, "ARP requests sent\n{dump}");
    assert!(d(|c| c.neighbors_learned) > 1_000, "ARP replies learned\n{dump}");
    assert!(d(|c| c.queued) > 500, "packets queued while resolving\n{dump}");
    assert!(d(|c| c.forwarded) > 10_000, "forwarded\n{dump}");
    assert!(
        d(|c| c.drops[dataplane::VrDrop::NoNeighbor as usize]) > 0,
        "some hosts never answer\n{dump}"
    );
    for r in [
        dataplane::VrDrop::Ip4BadOption,
        dataplane::VrDrop::Ip6RoutingHeader,
        dataplane::VrDrop::SourceBeyondScope,
    ] {
        assert!(after.dropped(r) > before.dropped(r), "{r} hit\n{dump}");
    }
    let vr = &rig.e.vrs()[0];
    invariant_bounds(&after, vr.queued() + vr.reassembling()).unwrap();
    eprintln!(
        "slow paths, measured window: {:?}",
        after
            .named()
            .iter()
            .zip(before.named())
            .map(|((k, a), (_, b))| (*k, a - b))
            .filter(|x| x.1 > 0)
            .collect::<Vec<_>>()
    );
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) on the slow paths\n{dump}");
}

/// Reservations cost no allocation either: a clock read around every VR run, admission, the
/// charge, spare windows closing and excess borrowed, periods rolling, packets refused.
#[test]
fn forwarding_under_reservations_allocates_nothing() {
    use dataplane::{Budget, Reservation};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let (c, v4, v6) = big_vr(VrLimits::default());
    let mut rig = Rig::new(&c);
    let t = Arc::new(AtomicU64::new(0));
    let clock = t.clone();
    // A burst is charged ~60 µs while the rig's time moves 20 µs a round: an overloaded
    // worker, so budget, excess and refusals all happen in every period.
    rig.e.set_clock(Box::new(move || clock.fetch_add(20_000, Ordering::Relaxed)));
    rig.e.worker_mut().set_spare_window(1_000_000);
    let r = Reservation { budget: Budget::Time(200_000), period_ns: 1_000_000, weight: 2 };
    rig.e.set_reservation(0, Some(r)).unwrap();
    let frames = forwarding_frames(&v4, &v6, 4096);
    let mut at = 0;
    for _ in 0..64 {
        rig.round(&frames, &mut at, 256);
    }
    let before = rig.counters();
    let ((), allocs, bytes) = counted(|| {
        for _ in 0..2_000 {
            rig.round(&frames, &mut at, 256);
        }
    });
    let after = rig.counters();
    let d = |f: fn(&VrCounters) -> u64| f(&after) - f(&before);
    let dump = rig.e.dump();
    assert!(d(|c| c.forwarded) > 0, "some forwarded\n{dump}");
    assert!(d(|c| c.drops[dataplane::VrDrop::OverBudget as usize]) > 0, "some refused\n{dump}");
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) under reservations\n{dump}");
}

/// A neighbor flood costs no allocation either: random destinations of connected subnets (new
/// next hops: the solicitation budget spent, incomplete entries evicted past their cap, their
/// queues dropped, retransmissions, failures), while a real host's entry goes stale and is
/// re-probed, and answers.
#[test]
fn neighbor_flood_allocates_nothing() {
    let mut c = base_vr();
    c.interfaces[0].ipv4.push("172.16.0.1/16".parse().unwrap());
    c.limits = VrLimits { neighbor_reachable_ms: 100, ..VrLimits::default() };
    let (a, mut lan) = mem::pair("lan", "h-lan", 4096);
    let (b, mut wan) = mem::pair("wan", "h-wan", 4096);
    let (v, _) = mem::pair("v100", "h-v100", 64);
    let mut e = Engine::from_configs(vec![Box::new(a), Box::new(b), Box::new(v)], &[c]).unwrap();
    let mut rng = Rng(0xf100d);
    let frames: Vec<Vec<u8>> = (0..8192u32)
        .map(|i| {
            let r = rng.next();
            match (i % 50, i % 2) {
                (0, _) => to_vr(M1, GW, None, &udp4_pkt("8.8.8.8", "172.16.0.33", 64, &[1; 18])),
                (25, _) => {
                    to_vr6(M1, GW, None, &udp6_pkt("2001:4860::1", "2001:db8::33", 64, &[2; 18]))
                }
                (_, 0) => {
                    let d = format!("172.16.{}.{}", 1 + r as u8 % 250, (r >> 8) as u8);
                    to_vr(M1, GW, None, &udp4_pkt("8.8.8.8", &d, 64, &[3; 18]))
                }
                _ => {
                    let d =
                        std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(r | 1 << 40));
                    to_vr6(M1, GW, None, &udp6_pkt("2001:4860::1", &d.to_string(), 64, &[4; 18]))
                }
            }
        })
        .collect();
    let (t, r6) = (a6("2001:db8::33"), a6("2001:db8::1"));
    let answers = [
        pad60(eth(M0, H3, None, ET_ARP, &arp(2, H3, "172.16.0.33", M0, "172.16.0.1"))),
        to_vr6(
            M0,
            H3,
            None,
            &Ip6::new(t, r6, 255, 58, na_msg(t, r6, t, (false, true, true), &lla_opt(2, H3))),
        ),
    ];
    let (mut tx, mut rx, mut replies) = (Batch::new(256), Batch::new(256), Batch::new(64));
    let sel: Vec<u16> = (0..256).collect();
    let (mut at, mut now) = (0, 1_000 * MS);
    let real = [frames[0].clone(), frames[25].clone()];
    let mut round = |e: &mut Engine,
                     frames: &[Vec<u8>],
                     tx: &mut Batch,
                     rx: &mut Batch,
                     replies: &mut Batch| {
        let n = replies.len();
        if n > 0 {
            assert_eq!(lan.tx_burst(replies, &sel[..n]), n);
        }
        replies.clear();
        tx.clear();
        for _ in 0..256 {
            tx.push_copy(&frames[at % frames.len()]);
            at += 1;
        }
        assert_eq!(wan.tx_burst(tx, &sel), 256);
        now += 1_280_000;
        while e.poll(now) > 0 {}
        loop {
            rx.clear();
            if lan.rx_burst(rx) == 0 {
                break;
            }
            for p in rx.packets() {
                let f = p.frame();
                // A probe for the real host (a broadcast or unicast ARP request, a multicast
                // or unicast NS): answer it next round.
                let arp =
                    f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[38..42] == [172, 16, 0, 33];
                let ns =
                    f.len() >= 78 && f[12..14] == [0x86, 0xdd] && f[54] == 135 && f[62..78] == t;
                if (arp || ns) && replies.room() > 0 {
                    replies.push_copy(&answers[usize::from(ns)]);
                }
            }
        }
        while wan.rx_burst(rx) > 0 {
            rx.clear();
        }
    };
    // The real host is resolved before the flood (a new neighbor competes with the flood for
    // the solicitation budget), then the flood warms up.
    for _ in 0..2 {
        round(&mut e, &real, &mut tx, &mut rx, &mut replies);
    }
    for _ in 0..400 {
        round(&mut e, &frames, &mut tx, &mut rx, &mut replies);
    }
    let before = *e.vrs()[0].counters();
    let ((), allocs, bytes) = counted(|| {
        for _ in 0..2_000 {
            round(&mut e, &frames, &mut tx, &mut rx, &mut replies);
        }
    });
    let after = *e.vrs()[0].counters();
    let d = |f: fn(&VrCounters) -> u64| f(&after) - f(&before);
    let dump = e.dump();
    let drop = |r: dataplane::VrDrop| after.dropped(r) - before.dropped(r);
    assert!(drop(dataplane::VrDrop::NeighborRateLimited) > 100_000, "rate limited\n{dump}");
    assert!(drop(dataplane::VrDrop::NoNeighbor) > 1_000, "evicted or failed\n{dump}");
    assert!(d(|c| c.forwarded) >= 2 * 2_000 * 256 / 50 - 10, "the real host's traffic\n{dump}");
    assert!(d(|c| c.neighbors_learned) > 20, "the real host re-confirmed\n{dump}");
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) under a neighbor flood\n{dump}");
}

/// Per-VR ingress queues on a shared port cost no allocation either: two VRs on port 0, one
/// flooded past its reservation and its queue (its excess dropped as `ingress_queue_full`),
/// the other served every pass.
#[test]
fn ingress_queues_allocate_nothing() {
    use dataplane::{Budget, IngressQueues, Reservation, VrDrop};
    let vr = |name: &str, k: u8, up: u16, gw: &str, subnet: &str, uplink: &str| VrConfig {
        name: name.into(),
        interfaces: vec![
            iface("in", 0, None, [2, k, 0, 0, 0, 1], 1500, &[subnet], &[]),
            iface("up", up, None, [2, k, 0, 0, 0, 2], 1500, &[uplink], &[]),
        ],
        routes: vec![via("0.0.0.0/0", gw)],
        neighbors: vec![neigh(1, gw, [2, 0x20, 0, 0, 0, k])],
        limits: VrLimits::default(),
    };
    let vrs = [
        vr("a", 0xaa, 1, "10.9.0.2", "10.1.0.1/24", "10.9.0.1/24"),
        vr("b", 0xbb, 2, "172.16.0.2", "10.2.0.1/24", "172.16.0.1/24"),
    ];
    let mut lab = Lab::new(&vrs, &[1024, 1024, 1024]);
    let q = IngressQueues { limit: 64, quantum: 16, per_pass: 32 };
    lab.e.set_ingress_queues(Some(q)).unwrap();
    let r = Reservation { budget: Budget::Packets(2_000), period_ns: 1_000_000, weight: 0 };
    lab.e.set_reservation(0, Some(r)).unwrap();
    let frame = |k: u8, src: &str| {
        let p = udp4_pkt(src, "198.18.0.1", 64, &[1, 2, 3]);
        to_vr([2, k, 0, 0, 0, 1], [2, 0x10, 0, 0, 0, k], None, &p)
    };
    let (fa, fb) = (frame(0xaa, "10.1.0.10"), frame(0xbb, "10.2.0.10"));
    let mut tx = Batch::new(256);
    let mut rx = Batch::new(256);
    let sel: Vec<u16> = (0..256).collect();
    let mut now = 0u64;
    let mut round = |lab: &mut Lab, n: usize| {
        tx.clear();
        for i in 0..n {
            tx.push_copy(if i % 10 == 0 { &fb } else { &fa });
        }
        lab.hosts[0].tx_burst(&mut tx, &sel[..n]);
        for _ in 0..4 {
            lab.e.poll(now);
            now += 10_000;
        }
        for p in [1, 2] {
            rx.clear();
            while lab.hosts[p].rx_burst(&mut rx) > 0 {
                rx.clear();
            }
        }
    };
    for n in [1, 2, 256] {
        round(&mut lab, n);
    }
    let before: Vec<VrCounters> = lab.e.vrs().iter().map(|v| *v.counters()).collect();
    let ((), allocs, bytes) = counted(|| {
        for k in 0..2_000 {
            round(&mut lab, [1, 2, 256][k % 3]);
        }
    });
    let after: Vec<VrCounters> = lab.e.vrs().iter().map(|v| *v.counters()).collect();
    let dump = lab.e.dump();
    let full = |c: &VrCounters| c.dropped(VrDrop::IngressQueueFull);
    assert!(full(&after[0]) > full(&before[0]), "a's queue overflowed\n{dump}");
    assert!(after[0].forwarded > before[0].forwarded, "a forwarded\n{dump}");
    assert!(after[1].forwarded > before[1].forwarded, "b forwarded\n{dump}");
    assert_eq!(after[1].dropped_total(), 0, "b lost nothing\n{dump}");
    assert_eq!(allocs, 0, "{allocs} allocations ({bytes} bytes) with ingress queues\n{dump}");
}
