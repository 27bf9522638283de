//! vxlan ports in two network namespaces joined by a veth (the underlay), root only (skipped
//! with a printed reason otherwise).
//!
//! Covers what loopback cannot: runs of equal frames leave as UDP GSO sends through a real
//! device and arrive in order (read as UDP GRO messages and taken apart), byte for byte, both
//! ways, in bursts of 1, 2 and 257; runs the
//! kernel refuses (datagrams longer than the underlay's MTU) go one by one and arrive
//! fragmented and whole; an underlay device without checksum offload still carries every
//! frame (the kernel either segments in software or refuses with `EIO`, and then the port
//! stops asking).

use std::net::IpAddr;

use crate::common_kernel;

use common_kernel::*;
use ports::vxlan::{VxlanOptions, VxlanPort};
use ports::Port;

/// Namespaces `a` and `b` with veth `ua`/`ub` between them: 10.77.0.1/24 and .2/24.
struct Underlay {
    a: Netns,
    b: Netns,
}

const ADDR_A: &str = "10.77.0.1";
const ADDR_B: &str = "10.77.0.2";

impl Underlay {
    fn new() -> Underlay {
        let (a, b) = (Netns::new(), Netns::new());
        ip(&[
            "link", "add", "ua", "netns", &a.name, "type", "veth", "peer", "ub", "netns", &b.name,
        ]);
        for (ns, dev, addr) in [(&a, "ua", ADDR_A), (&b, "ub", ADDR_B)] {
            quiet(dev, Some(&ns.name));
            ip(&["-n", &ns.name, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            up(dev, Some(&ns.name));
            up("lo", Some(&ns.name));
        }
        Underlay { a, b }
    }

    fn port(&self, ns: &Netns, local: &str, remote: &str) -> VxlanPort {
        let (local, remote): (IpAddr, IpAddr) = (local.parse().unwrap(), remote.parse().unwrap());
        let mut o = VxlanOptions::new(77, local, &[remote]);
        o.netns = Some(ns.path());
        VxlanPort::open(&format!("vx-{}", ns.name), &o).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ports(&self) -> (VxlanPort, VxlanPort) {
        (self.port(&self.a, ADDR_A, ADDR_B), self.port(&self.b, ADDR_B, ADDR_A))
    }
}

fn gso_sends(p: &VxlanPort) -> u64 {
    p.handle().counters().tx_gso_sends
}

/// `count` frames of `len` bytes from `a` to `b` in bursts of `burst`, then back.
fn both_ways(a: &mut VxlanPort, b: &mut VxlanPort, count: usize, len: usize, burst: usize) {
    let run = run_id();
    transfer(a, b, run, &frames(run, count, &[len], 0), burst);
    let run = run_id();
    transfer(b, a, run, &frames(run, count, &[len], 0), burst);
}

/// 60-byte frames both ways in bursts of 1, 2 and 257 (20, 40 and 776 frames); returns how
/// many went each way.
fn short_frames_in_every_burst_size(a: &mut VxlanPort, b: &mut VxlanPort) -> u64 {
    let sizes = [(1, 20), (2, 40), (257, 257 * 3 + 5)];
    for (burst, count) in sizes {
        both_ways(a, b, count, 60, burst);
    }
    sizes.iter().map(|&(_, count)| count as u64).sum()
}

#[test]
fn vxlan_runs_cross_a_real_underlay_as_gso_sends_and_arrive_in_order() {
    if !root_or_skip("vxlan_runs_cross_a_real_underlay_as_gso_sends_and_arrive_in_order") {
        return;
    }
    let u = Underlay::new();
    let (mut a, mut b) = u.ports();
    // The veth carries runs whole; the receiving socket (UDP GRO) hands them over as one, and
    // a port that only receives publishes that too.
    let gro = |p: &VxlanPort| p.handle().counters().rx_gro_reads;
    let run = run_id();
    transfer(&mut a, &mut b, run, &frames(run, 257, &[60], 0), 257);
    assert!(gro(&b) > 0, "b read no run whole: {:?}", b.handle().counters());
    assert_eq!(gso_sends(&a), 4);
    short_frames_in_every_burst_size(&mut a, &mut b);
    // Each 257-burst makes runs of 64: 4 full runs and one single datagram, three bursts and
    // a burst of 5 (one run): 13 runs; the 2-bursts are runs of two: 20 more.
    assert_eq!((gso_sends(&a), gso_sends(&b)), (4 + 33, 33));
    assert_eq!(a.mode_name(), Some("udp socket, gso"));
    assert!(gro(&a) > 0, "a read no run whole");
    // Mixed lengths (runs only where lengths repeat) still arrive in order.
    workout(&mut a, &mut b);
    for p in [&a, &b] {
        assert_eq!(p.handle().counters().drops, [0; ports::vxlan::Reason::ALL.len()]);
    }
}

#[test]
fn vxlan_runs_the_kernel_refuses_go_one_by_one() {
    if !root_or_skip("vxlan_runs_the_kernel_refuses_go_one_by_one") {
        return;
    }
    let u = Underlay::new();
    let (mut a, mut b) = u.ports();
    // 1,514-byte frames make 1,550-byte datagrams on a 1,500-byte underlay: too long to
    // segment, so each goes alone and the kernel fragments it.
    both_ways(&mut a, &mut b, 257 * 2, 1514, 257);
    assert_eq!((gso_sends(&a), gso_sends(&b)), (0, 0));
    assert_eq!(a.mode_name(), Some("udp socket, gso"), "EINVAL turns nothing off");
    let c = a.handle().counters();
    assert_eq!(c.tx_datagrams, 257 * 2);
    // Short frames in the same bursts still run.
    both_ways(&mut a, &mut b, 257, 60, 257);
    assert_eq!((gso_sends(&a), gso_sends(&b)), (4, 4));
}

#[test]
fn vxlan_over_an_underlay_without_checksum_offload_loses_nothing() {
    if !root_or_skip("vxlan_over_an_underlay_without_checksum_offload_loses_nothing") {
        return;
    }
    let u = Underlay::new();
    for (ns, dev) in [(&u.a, "ua"), (&u.b, "ub")] {
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.name, "ethtool", "-K", dev, "tx", "off"])
            .output()
            .expect("run ethtool (scripts/setup installs it)");
        assert!(o.status.success(), "ethtool -K {dev} tx off: {o:?}");
    }
    let (mut a, mut b) = u.ports();
    let sent = short_frames_in_every_burst_size(&mut a, &mut b);
    // Whichever the kernel did (software checksums, or EIO and one datagram per message),
    // every datagram went, and the port says which.
    let c = a.handle().counters();
    assert_eq!(c.tx_datagrams, sent);
    println!("without checksum offload: mode {:?}, {} gso sends", a.mode_name(), c.tx_gso_sends);
    if a.mode_name() == Some("udp socket") {
        assert_eq!(c.tx_gso_sends, 0);
    }
}
