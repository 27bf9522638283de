//! Ports of different backends talking across one veth pair (root only; skipped with a
//! printed reason otherwise): AF_XDP on one end, AF_PACKET on the other, both ways, once in one
//! namespace and once with the AF_PACKET end inside another namespace; and each port's
//! descriptor waking a sleeper when a frame arrives.

use crate::common_kernel;

use common_kernel::*;
use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::afxdp::{AfXdpOptions, AfXdpPort};

#[test]
fn afxdp_and_afpacket_talk() {
    if !root_or_skip("afxdp_and_afpacket_talk") {
        return;
    }
    let v = Veth::new();
    let mut x = AfXdpPort::open(&v.a, &AfXdpOptions::default()).unwrap();
    let mut p = AfPacketPort::open(&v.b, &AfPacketOptions::default()).unwrap();
    workout(&mut x, &mut p);
}

#[test]
fn afxdp_and_afpacket_talk_across_namespaces() {
    if !root_or_skip("afxdp_and_afpacket_talk_across_namespaces") {
        return;
    }
    let ns = Netns::new();
    let v = Veth::new_in(&ns);
    let mut p =
        AfPacketPort::open(&v.b, &AfPacketOptions { netns: Some(ns.path()), ..Default::default() })
            .unwrap();
    let mut x = AfXdpPort::open(&v.a, &AfXdpOptions::default()).unwrap();
    workout(&mut p, &mut x);
}

/// A worker sleeps in poll(2) on a kernel port's descriptor: it becomes readable when a frame
/// arrives, and `rx_burst` then has the frame. AF_XDP and AF_PACKET, each as the receiver.
#[test]
fn a_kernel_port_wakes_a_sleeper_when_a_frame_arrives() {
    if !root_or_skip("a_kernel_port_wakes_a_sleeper_when_a_frame_arrives") {
        return;
    }
    let v = Veth::new();
    let mut x = AfXdpPort::open(&v.a, &AfXdpOptions::default()).unwrap();
    let mut p = AfPacketPort::open(&v.b, &AfPacketOptions::default()).unwrap();
    wakes(&mut p, &mut x);
    wakes(&mut x, &mut p);
}

/// Sends one frame from `tx` and sleeps on `rx`'s descriptors until it is there (a deadline,
/// not a timing: it only keeps a bug from hanging the test).
fn wakes(tx: &mut dyn ports::Port, rx: &mut dyn ports::Port) {
    use ports::wait::Poller;
    use std::time::{Duration, Instant};
    let mut fds = Vec::new();
    assert!(rx.wakeup_fds(&mut fds), "{}: a kernel port can be slept on", rx.name());
    assert_eq!(fds.len(), 1, "{}: {fds:?}", rx.name());
    assert!(!rx.arm_wakeup(), "sockets need no arming");
    let run = run_id();
    let mut b = ports::Batch::new(1);
    b.push_copy(&frame(run, 1, 60, None));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    let mut poller = Poller::new();
    let mut r = ports::Batch::new(64);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}: never woke for the frame", rx.name());
        tx.service();
        if poller.wait(&fds, Duration::from_secs(1)).unwrap() == 0 {
            continue;
        }
        r.clear();
        rx.rx_burst(&mut r);
        if r.packets().iter().any(|f| parse(f.frame()) == Some((run, 1))) {
            break;
        }
    }
    rx.disarm_wakeup();
}
