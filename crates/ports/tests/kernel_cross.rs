//! Ports of different backends talking across one veth pair (root only; skipped with a
//! printed reason otherwise): AF_XDP on one end, AF_PACKET on the other, both ways, once in one
//! namespace and once with the AF_PACKET end inside another namespace.

mod common_kernel;

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
