//! Quick end-to-end checks over one VR; the exhaustive behaviour tests live beside this file.

use dataplane::config::*;
use dataplane::Engine;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket};
use ports::{mem, Batch, Port};
use wire::MacAddr;

const VR0: MacAddr = MacAddr([2, 0, 0, 0, 1, 0]);
const VR1: MacAddr = MacAddr([2, 0, 0, 0, 1, 1]);
const H0: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const GW: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

fn vr() -> VrConfig {
    VrConfig {
        name: "vr1".into(),
        interfaces: vec![
            IfaceConfig {
                name: "eth0".into(),
                port: 0,
                vlan: None,
                mac: VR0,
                mtu: 1500,
                ipv4: vec!["10.0.0.1/24".parse().unwrap()],
                ipv6: vec!["2001:db8::1/64".parse().unwrap()],
            },
            IfaceConfig {
                name: "eth1".into(),
                port: 1,
                vlan: None,
                mac: VR1,
                mtu: 1500,
                ipv4: vec!["10.0.1.1/24".parse().unwrap()],
                ipv6: vec!["2001:db8:1::1/64".parse().unwrap()],
            },
        ],
        routes: vec![
            RouteConfig {
                prefix: "0.0.0.0/0".parse().unwrap(),
                target: RouteTarget::Via { gateway: "10.0.1.2".parse().unwrap(), iface: None },
                source: RouteSource::Static,
            },
            RouteConfig {
                prefix: "::/0".parse().unwrap(),
                target: RouteTarget::Via { gateway: "2001:db8:1::2".parse().unwrap(), iface: None },
                source: RouteSource::Static,
            },
        ],
        neighbors: vec![
            NeighborConfig { iface: 1, ip: "10.0.1.2".parse().unwrap(), mac: MacAddr(GW) },
            NeighborConfig { iface: 1, ip: "2001:db8:1::2".parse().unwrap(), mac: MacAddr(GW) },
            NeighborConfig { iface: 0, ip: "10.0.0.10".parse().unwrap(), mac: MacAddr(H0) },
        ],
        limits: VrLimits::default(),
    }
}

fn lab() -> (Engine, mem::MemPort, mem::MemPort) {
    let (a, pa) = mem::pair("p0", "h0", 64);
    let (b, pb) = mem::pair("p1", "h1", 64);
    let e = Engine::from_configs(vec![Box::new(a), Box::new(b)], &[vr()]).unwrap();
    (e, pa, pb)
}

fn send(p: &mut mem::MemPort, frames: &[Vec<u8>]) {
    let mut b = Batch::new(frames.len());
    for f in frames {
        assert!(b.push_copy(f));
    }
    let sel: Vec<u16> = (0..frames.len() as u16).collect();
    assert_eq!(p.tx_burst(&mut b, &sel), frames.len());
}

fn recv(p: &mut mem::MemPort) -> Vec<Vec<u8>> {
    let mut b = Batch::new(256);
    p.rx_burst(&mut b);
    b.packets().iter().map(|x| x.frame().to_vec()).collect()
}

#[test]
fn forwards_v4_and_v6_answers_arp_and_ping() {
    let (mut e, mut h0, mut h1) = lab();
    let mut f4 = Vec::new();
    PacketBuilder::ethernet2(H0, VR0.0)
        .ipv4([10, 0, 0, 10], [8, 8, 8, 8], 64)
        .udp(1, 2)
        .write(&mut f4, &[0; 18])
        .unwrap();
    let mut f6 = Vec::new();
    PacketBuilder::ethernet2(H0, VR0.0)
        .ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10],
            [0x20, 1, 0x48, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x88],
            64,
        )
        .udp(1, 2)
        .write(&mut f6, &[0; 8])
        .unwrap();
    let mut ping = Vec::new();
    PacketBuilder::ethernet2(H0, VR0.0)
        .ipv4([10, 0, 0, 10], [10, 0, 1, 1], 64)
        .icmpv4_echo_request(7, 1)
        .write(&mut ping, &[1, 2, 3])
        .unwrap();
    let mut arp = vec![0xff; 6];
    arp.extend(H0);
    arp.extend([0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend(H0);
    arp.extend([10, 0, 0, 10, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1]);
    send(&mut h0, &[f4, f6, ping, arp]);
    e.poll(1);
    let out = recv(&mut h1);
    assert_eq!(out.len(), 2, "{}", e.dump());
    for f in &out {
        assert_eq!(&f[..6], &GW);
        assert_eq!(&f[6..12], &VR1.0);
        let p = SlicedPacket::from_ethernet(f).unwrap();
        match p.net.unwrap() {
            NetSlice::Ipv4(ip) => {
                assert_eq!(ip.header().ttl(), 63);
                assert_eq!(
                    ip.header().to_header().calc_header_checksum(),
                    ip.header().header_checksum()
                );
            }
            NetSlice::Ipv6(ip) => assert_eq!(ip.header().hop_limit(), 63),
            _ => panic!(),
        }
    }
    let back = recv(&mut h0);
    assert_eq!(back.len(), 2, "{}", e.dump());
    let c = e.vrs()[0].counters();
    assert_eq!((c.forwarded, c.echo_replies, c.neighbor_replies), (2, 1, 1), "{}", e.dump());
}
