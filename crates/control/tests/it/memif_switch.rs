//! Everything attaches to a switch: two memif ports (peers are memif clients, as another
//! process would be), a mem port and a VR interface, all members of one learning switch.

use std::time::{Duration, Instant};

use control::build;
use control::Topology;
use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};

const C0: [u8; 6] = [2, 0, 0, 0, 0xc0, 0];
const C1: [u8; 6] = [2, 0, 0, 0, 0xc1, 0];
const GW: [u8; 6] = [2, 0, 0, 0, 1, 1];

fn arp_request(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend(sha);
    f.extend([0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend(sha);
    f.extend(spa);
    f.extend([0; 6]);
    f.extend(tpa);
    f
}

#[test]
fn memif_mem_and_vr_interfaces_share_a_switch() {
    let tag = format!("rpx-sw-{}", std::process::id());
    let yaml = format!(
        r#"ports:
  - {{ name: m0, kind: memif, socket: "@{tag}-0" }}
  - {{ name: m1, kind: memif, socket: "@{tag}-1" }}
  - {{ name: p2, kind: mem }}
switches:
  - name: lan
    members: [{{ port: m0 }}, {{ port: m1 }}, {{ port: p2 }}]
vrs:
  - name: gw
    interfaces:
      - {{ name: lan, switch: lan, mac: "02:00:00:00:01:01", addresses: [10.7.0.1/24] }}
"#
    );
    let topo = Topology::parse(&yaml, "memif.yaml", std::path::Path::new(".")).unwrap();
    let mut built = build::engine(&topo, None).unwrap();
    let mut p2 = built.take_outside(&topo, "p2").unwrap();
    let client = |i: usize| MemifPort::client(MemifOptions::new(format!("@{tag}-{i}"))).unwrap();
    let (mut c0, mut c1) = (client(0), client(1));

    // Drive the handshakes: the engine's housekeeping serves the sockets, the clients theirs.
    let t0 = Instant::now();
    let mut now = 0u64;
    let mut poll = |b: &mut build::Built, c0: &mut MemifPort, c1: &mut MemifPort| {
        now += 2_000_000;
        b.engine.poll(now);
        c0.service();
        c1.service();
    };
    while !(c0.status() == PortStatus::Up && c1.status() == PortStatus::Up) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "handshake: {:?} {:?}",
            c0.status(),
            c1.status()
        );
        poll(&mut built, &mut c0, &mut c1);
    }

    // c0 asks for the gateway: the broadcast floods to m1 (c1), p2 and the VR; the VR's
    // reply comes back to c0 alone (the switch learned c0 on m0).
    let mut tx = Batch::new(1);
    tx.push_copy(&arp_request(C0, [10, 7, 0, 10], [10, 7, 0, 1]));
    assert_eq!(c0.tx_burst(&mut tx, &[0]), 1);
    let mut got = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..50 {
        poll(&mut built, &mut c0, &mut c1);
        for (k, p) in [&mut c0 as &mut dyn Port, &mut c1, &mut p2].into_iter().enumerate() {
            let mut rx = Batch::new(16);
            p.rx_burst(&mut rx);
            got[k].extend(rx.packets().iter().map(|b| b.frame().to_vec()));
        }
    }
    let dump = format!("{}\n{:?}", built.engine.dump(), built.engine.switches()[0].counters());
    assert_eq!(got[1].len(), 1, "c1 saw the broadcast\n{dump}");
    assert_eq!(got[2].len(), 1, "p2 saw the broadcast\n{dump}");
    assert_eq!(got[0].len(), 1, "c0 got one reply\n{dump}");
    let reply = &got[0][0];
    assert_eq!(
        (&reply[0..6], &reply[6..12], &reply[12..14]),
        (&C0[..], &GW[..], &[0x08, 0x06][..])
    );
    assert_eq!(&reply[20..22], &[0, 2], "an ARP reply");

    // c1 sends to c0: known unicast, memif to memif, nobody else sees it.
    let mut f = C0.to_vec();
    f.extend(C1);
    f.extend([0x88, 0xb5]);
    f.extend([0x5a; 46]);
    tx.clear();
    tx.push_copy(&f);
    assert_eq!(c1.tx_burst(&mut tx, &[0]), 1);
    let mut to_c0 = Vec::new();
    for _ in 0..20 {
        poll(&mut built, &mut c0, &mut c1);
        let mut rx = Batch::new(16);
        c0.rx_burst(&mut rx);
        to_c0.extend(rx.packets().iter().map(|b| b.frame().to_vec()));
        let mut rx = Batch::new(16);
        p2.rx_burst(&mut rx);
        assert!(rx.is_empty(), "p2 must not see known unicast");
    }
    assert_eq!(to_c0, vec![f]);
    let c = built.engine.switches()[0].counters();
    assert_eq!((c.flooded, c.forwarded, c.learned), (1, 2, 3), "{:?}", c);
}
