//! AF_PACKET (TPACKET_V3) ports on veth pairs (root only; skipped with a printed reason
//! otherwise).
//!
//! Covers: every byte and counter in bursts of 1, 2 and 257 (60..1514 bytes; VLAN-tagged frames
//! come out with their tag, which the kernel had moved to metadata) both ways; the sender never
//! reads its own frames; promiscuous mode on while open and off after, even while a forked
//! child shares the socket; a tx ring much smaller than a burst (wrap-around, full ring,
//! retries); errors for a missing interface and bad options; the interface disappearing under
//! an open port and coming back; jumbo frames (MTU 9000, up to 9018 bytes tagged) both ways.

use crate::common_kernel;

use common_kernel::*;
use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::{Batch, Port, PortStatus};
use std::time::{Duration, Instant};

fn open(dev: &str) -> AfPacketPort {
    AfPacketPort::open(dev, &AfPacketOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn afpacket_pair_moves_every_byte() {
    if !root_or_skip("afpacket_pair_moves_every_byte") {
        return;
    }
    let v = Veth::new();
    assert_eq!(promiscuity(&v.a, None), 0);
    let mut a = open(&v.a);
    let mut b = open(&v.b);
    assert_eq!(promiscuity(&v.a, None), 1);
    workout(&mut a, &mut b);
    assert_eq!((a.status(), b.status()), (PortStatus::Up, PortStatus::Up));
    drop(a);
    assert_eq!(promiscuity(&v.a, None), 0);
}

/// A child forked by any thread of the process shares the socket until it execs or exits; the
/// kernel would end the membership only then (a CI run read promiscuity 1 after the drop).
#[test]
fn afpacket_promiscuity_ends_with_the_port_while_a_forked_child_shares_its_socket() {
    if !root_or_skip(
        "afpacket_promiscuity_ends_with_the_port_while_a_forked_child_shares_its_socket",
    ) {
        return;
    }
    let v = Veth::new();
    let a = open(&v.a);
    assert_eq!(promiscuity(&v.a, None), 1);
    // SAFETY: the child calls only nanosleep and _exit, both async-signal-safe.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        let two_s = libc::timespec { tv_sec: 2, tv_nsec: 0 };
        // SAFETY: the child only sleeps and leaves, holding the parent's descriptors meanwhile.
        unsafe {
            libc::nanosleep(&two_s, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
    drop(a);
    let now = promiscuity(&v.a, None);
    let mut status = 0;
    // SAFETY: `child` is our child; `status` outlives the call.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(now, 0, "the membership outlived the port while a child held its socket");
    assert_eq!(promiscuity(&v.a, None), 0);
}

#[test]
fn afpacket_small_tx_ring_wraps_and_retries() {
    if !root_or_skip("afpacket_small_tx_ring_wraps_and_retries") {
        return;
    }
    let v = Veth::new();
    let small =
        AfPacketOptions { tx_frames: 8, block_size: 1 << 16, blocks: 8, ..Default::default() };
    let mut a = AfPacketPort::open(&v.a, &small).unwrap();
    let mut b = AfPacketPort::open(&v.b, &small).unwrap();
    workout(&mut a, &mut b);
}

#[test]
fn afpacket_open_errors_are_clear() {
    if !root_or_skip("afpacket_open_errors_are_clear") {
        return;
    }
    let e = AfPacketPort::open("rpx-nosuchif", &AfPacketOptions::default()).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(e.to_string(), "afpacket rpx-nosuchif: no such interface");
    let e = AfPacketPort::open("much-too-long-name", &AfPacketOptions::default()).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let v = Veth::new();
    let bad = AfPacketOptions { block_size: 1000, ..Default::default() };
    let e = AfPacketPort::open(&v.a, &bad).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().starts_with(&format!("afpacket {}: ", v.a)), "{e}");
}

#[test]
fn afpacket_interface_removed_and_back() {
    if !root_or_skip("afpacket_interface_removed_and_back") {
        return;
    }
    let v = Veth::new();
    let (mut a, mut b) = (open(&v.a), open(&v.b));
    removed_and_back(&v, &mut a, &mut b, AfPacketPort::ifindex, |a| {
        assert_eq!(a.qdisc_bypass(), None);
    });
}

#[test]
fn afpacket_jumbo_frames_both_ways() {
    if !root_or_skip("afpacket_jumbo_frames_both_ways") {
        return;
    }
    let v = Veth::new();
    set_mtu(&v.a, None, 9000);
    set_mtu(&v.b, None, 9000);
    let mut a = open(&v.a);
    let mut b = open(&v.b);
    jumbo_workout(&mut a, &mut b);
    assert_eq!(a.stats().rx_dropped + b.stats().rx_dropped, 0);
}

/// A reader off its CPU while frames trickle in. The kernel retires a block that holds a frame
/// at each timeout (1 ms), so a trickle takes a block per frame: a ring of 32 large blocks was
/// full after 32 ms and dropped every frame after (a soak on a loaded CI host lost 8 frames of
/// each flow behind one descheduled worker). 192 frames, each after a pause longer than the
/// timeout, must all wait in the default ring until the reader comes back.
#[test]
fn afpacket_ring_holds_a_trickle_while_the_reader_sleeps() {
    if !root_or_skip("afpacket_ring_holds_a_trickle_while_the_reader_sleeps") {
        return;
    }
    let v = Veth::new();
    let (mut a, mut b) = (open(&v.a), open(&v.b));
    let (run, n) = (run_id(), 192);
    let want = frames(run, n, &[60], 0);
    let b0 = b.stats();
    let mut out = Batch::new(1);
    for f in &want {
        out.clear();
        assert!(out.push_copy(f));
        let t = Instant::now();
        while a.tx_burst(&mut out, &[0]) == 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "{}: tx stuck", a.name());
            a.service();
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_micros(1500));
    }
    let mut inb = Batch::new(256);
    let (mut got, t) = (0, Instant::now());
    while got < n && t.elapsed() < Duration::from_secs(5) {
        inb.clear();
        b.rx_burst(&mut inb);
        got += inb
            .packets()
            .iter()
            .filter(|p| parse(p.frame()).is_some_and(|(r, _)| r == run))
            .count();
        b.service();
        std::thread::sleep(Duration::from_millis(2));
    }
    let dropped = b.stats().rx_dropped - b0.rx_dropped;
    assert_eq!((got, dropped), (n, 0), "frames read and dropped by {}: {:?}", b.name(), b.stats());
}
