//! examples/switched.yaml end to end: hosts on a learning switch reach their gateway VR, and
//! the VR routes between the switch's VLANs, resolving neighbors through the switch.

use std::path::Path;

use control::build::{self, Built};
use control::Topology;
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use ports::mem::MemPort;
use ports::{Batch, Port};

const H1: [u8; 6] = [2, 0, 0, 0, 0x0a, 1];
const H3: [u8; 6] = [2, 0, 0, 0, 0x14, 3];
const GW10: [u8; 6] = [2, 0, 0, 0, 1, 0x0a];
const GW20: [u8; 6] = [2, 0, 0, 0, 1, 0x14];
const MS: u64 = 1_000_000;

fn arp(op: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4], dst: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend(sha);
    f.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4]);
    f.extend(op.to_be_bytes());
    f.extend(sha);
    f.extend(spa);
    f.extend(tha);
    f.extend(tpa);
    f
}

struct Lab {
    b: Built,
    h1: MemPort,
    h2: MemPort,
    h3: MemPort,
    trunk: MemPort,
    now: u64,
}

impl Lab {
    fn new() -> Lab {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/switched.yaml");
        let topo = Topology::load(&path).unwrap();
        let mut b = build::engine(&topo, None).unwrap();
        let mut take = |n| b.take_outside(&topo, n).unwrap();
        let (h1, h2, h3, trunk) = (take("h1"), take("h2"), take("h3"), take("trunk"));
        Lab { b, h1, h2, h3, trunk, now: MS }
    }

    fn send(&mut self, which: usize, f: &[u8]) {
        let mut batch = Batch::new(1);
        batch.push_copy(f);
        let p = match which {
            0 => &mut self.h1,
            1 => &mut self.h2,
            _ => &mut self.h3,
        };
        assert_eq!(p.tx_burst(&mut batch, &[0]), 1);
        self.run();
    }

    /// Polls until the host is quiet (the VR and the switch are joined by links, so a frame
    /// may need a few passes), advancing time past housekeeping.
    fn run(&mut self) {
        for _ in 0..8 {
            self.now += 2 * MS;
            self.b.engine.poll(self.now);
        }
    }

    fn recv(p: &mut MemPort) -> Vec<Vec<u8>> {
        let mut b = Batch::new(64);
        p.rx_burst(&mut b);
        b.packets().iter().map(|x| x.frame().to_vec()).collect()
    }
}

#[test]
fn hosts_reach_their_gateway_and_the_vr_routes_between_vlans() {
    let mut l = Lab::new();
    let dump = |l: &Lab| {
        format!(
            "{}\n{:?}\n{:?}",
            l.b.engine.dump(),
            l.b.engine.switches()[0].counters(),
            l.b.engine.switches()[0].table()
        )
    };

    // h1 asks for its gateway: the broadcast floods VLAN 10 (h2, the trunk tagged, the VR's
    // vlan10 link); only the VR answers, and the switch, having learned h1, delivers the
    // reply to h1 alone.
    l.send(0, &arp(1, H1, [10, 0, 10, 11], [0; 6], [10, 0, 10, 1], [0xff; 6]));
    let r1 = Lab::recv(&mut l.h1);
    assert_eq!(r1, vec![arp(2, GW10, [10, 0, 10, 1], H1, [10, 0, 10, 11], H1)], "{}", dump(&l));
    assert_eq!(Lab::recv(&mut l.h2).len(), 1, "the broadcast reached h2");
    let t = Lab::recv(&mut l.trunk);
    assert_eq!(
        (t.len(), &t[0][12..16]),
        (1, &[0x81, 0x00, 0x00, 10][..]),
        "tagged 10 on the trunk"
    );
    assert!(Lab::recv(&mut l.h3).is_empty(), "VLAN 20 saw nothing");

    // h1 pings 10.0.20.33 (h3, in VLAN 20, not yet resolved): the VR routes it, asks for h3
    // in VLAN 20 (h3 and the trunk see the request, h1 and h2 do not)...
    let mut ping = Vec::new();
    PacketBuilder::ethernet2(H1, GW10)
        .ipv4([10, 0, 10, 11], [10, 0, 20, 33], 64)
        .icmpv4_echo_request(7, 1)
        .write(&mut ping, b"inter-vlan")
        .unwrap();
    l.send(0, &ping);
    let req = Lab::recv(&mut l.h3);
    assert_eq!(
        req,
        vec![arp(1, GW20, [10, 0, 20, 1], [0; 6], [10, 0, 20, 33], [0xff; 6])],
        "{}",
        dump(&l)
    );
    assert_eq!(Lab::recv(&mut l.trunk).len(), 1);
    assert!(Lab::recv(&mut l.h1).is_empty() && Lab::recv(&mut l.h2).is_empty());

    // ...h3 answers, and the queued ping reaches h3 from the VR's VLAN 20 MAC, TTL 63.
    l.send(2, &arp(2, H3, [10, 0, 20, 33], GW20, [10, 0, 20, 1], GW20));
    let got = Lab::recv(&mut l.h3);
    assert_eq!(got.len(), 1, "{}", dump(&l));
    assert_eq!((&got[0][0..6], &got[0][6..12]), (&H3[..], &GW20[..]));
    let p = SlicedPacket::from_ethernet(&got[0]).unwrap();
    let Some(NetSlice::Ipv4(ip)) = p.net else { panic!("not IPv4") };
    assert_eq!((ip.header().ttl(), ip.header().destination()), (63, [10, 0, 20, 33]));
    let Some(TransportSlice::Icmpv4(icmp)) = p.transport else { panic!("not ICMP") };
    assert_eq!(icmp.payload(), b"inter-vlan");
    assert!(Lab::recv(&mut l.trunk).is_empty(), "known unicast: h3 only");

    let vr = l.b.engine.vr("gw").unwrap().counters();
    assert_eq!(
        (vr.forwarded, vr.queued, vr.neighbor_requests, vr.neighbor_replies),
        (1, 1, 1, 1),
        "{}",
        dump(&l)
    );
    let sw = l.b.engine.switches()[0].counters();
    // Learned: h1, the VR's vlan10 MAC, the VR's vlan20 MAC, h3 (h2 is static).
    assert_eq!(sw.learned, 4, "{}", dump(&l));
}
