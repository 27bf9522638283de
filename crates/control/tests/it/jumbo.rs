//! Jumbo frames (MTU 9000) through a VR, on every port kind that carries them:
//! - shared memory, no root needed: 9000-byte IPv4 packets enter on a `mem` port and leave on a
//!   `memif` port (whose 2048-byte buffers chain five per frame) and the other way, every byte
//!   checked, TTL and checksum as forwarding leaves them; a 9001-byte packet with DF set is
//!   refused with ICMP "fragmentation needed" naming MTU 9000; a 9000-byte packet without DF
//!   leaves a 1500-byte link as seven fragments that put back together are the packet;
//! - kernel ports (root; skipped with the reason otherwise): a host behind an AF_XDP port pings
//!   a host behind an AF_PACKET port through the VR with 9000-byte packets and DF set, and a host
//!   whose own MTU is larger learns MTU 9000 from the VR.

use crate::reply_json;
use reply_json::Json;

use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use control::runtime::Options;
use control::{Node, Topology};
use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};

use crate::hosts;
use hosts::{ip, Namespaces};

const DEADLINE: Duration = Duration::from_secs(30);
const VR_A: [u8; 6] = [2, 0, 0, 0, 1, 0];
const VR_B: [u8; 6] = [2, 0, 0, 0, 1, 1];
const HOST_A: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const HOST_B: [u8; 6] = [2, 0, 0, 0, 0x0b, 1];

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 =
        b.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An Ethernet + IPv4 (`ip_len` bytes, DF as asked) + UDP frame; the payload is a pattern of
/// `seq`, so every byte can be checked on arrival. UDP checksum 0 (none).
fn udp(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ip_len: usize,
    df: bool,
    seq: u32,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let flags = if df { 0x40 } else { 0 };
    f.extend_from_slice(&[
        0x45,
        0,
        (ip_len >> 8) as u8,
        ip_len as u8,
        0,
        1,
        flags,
        0,
        64,
        17,
        0,
        0,
    ]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    let c = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let udp_len = ip_len - 20;
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x89, (udp_len >> 8) as u8, udp_len as u8, 0, 0]);
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761);
    while f.len() < 14 + ip_len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f
}

/// What forwarding makes of `sent`: new MACs, TTL one less, header checksum redone.
fn forwarded(sent: &[u8], dst_mac: [u8; 6], src_mac: [u8; 6]) -> Vec<u8> {
    let mut f = sent.to_vec();
    f[..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[22] -= 1;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

/// Sends each frame into `tx` and waits for the next one `rx` receives, which must equal
/// `want(frame)`. One at a time, so no ring is ever full.
fn through(
    tx: &mut dyn Port,
    rx: &mut dyn Port,
    frames: &[Vec<u8>],
    want: impl Fn(&[u8]) -> Vec<u8>,
) {
    let (mut out, mut inb) = (Batch::new(1), Batch::new(256));
    for (i, f) in frames.iter().enumerate() {
        out.clear();
        assert!(out.push_copy(f), "frame {i} ({} bytes) fits a packet buffer", f.len());
        let t0 = Instant::now();
        while tx.tx_burst(&mut out, &[0]) == 0 {
            assert!(t0.elapsed() < DEADLINE, "{}: frame {i} never taken", tx.name());
            tx.service();
            thread::sleep(Duration::from_micros(200));
        }
        let got = loop {
            assert!(
                t0.elapsed() < DEADLINE,
                "frame {i} ({} bytes) never came out of {}: {:?} {:?}",
                f.len(),
                rx.name(),
                tx.stats(),
                rx.stats()
            );
            tx.service();
            rx.service();
            inb.clear();
            if rx.rx_burst(&mut inb) > 0 {
                assert_eq!(inb.len(), 1, "one frame out per frame in");
                break inb.get(0).frame().to_vec();
            }
            thread::sleep(Duration::from_micros(200));
        };
        let w = want(f);
        assert_eq!(got.len(), w.len(), "frame {i}: length");
        assert!(got == w, "frame {i} ({} bytes): content differs", w.len());
    }
}

#[test]
fn jumbo_frames_cross_a_vr_between_mem_and_memif() {
    let tag = format!("rpx-jumbo-{}", std::process::id());
    let text = format!(
        "\
workers: 1
idle: poll
ports:
  - {{ name: p0, kind: mem }}
  - {{ name: m1, kind: memif, socket: \"@{tag}\" }}
vrs:
  - name: vr
    interfaces:
      - {{ name: a, port: p0, mac: 02:00:00:00:01:00, mtu: 9000, addresses: [10.0.0.1/24] }}
      - {{ name: b, port: m1, mac: 02:00:00:00:01:01, mtu: 9000, addresses: [10.0.1.1/24] }}
    routes: [{{ prefix: 0.0.0.0/0, via: 10.0.1.2 }}]
    neighbors:
      - {{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }}
      - {{ address: 10.0.0.10, mac: 02:00:00:00:00:10, interface: a }}
"
    );
    let topo = Topology::parse(&text, "jumbo.yaml", Path::new(".")).unwrap();
    let mut node = Node::start(topo.clone(), Options::for_topology(&topo), 256).unwrap();
    let mut p0 = node.take_outside("p0").unwrap();
    let mut o = MemifOptions::new(format!("@{tag}"));
    o.name = "c1".into();
    let mut m1 = MemifPort::client(o).unwrap();
    let t0 = Instant::now();
    while m1.status() != PortStatus::Up {
        assert!(t0.elapsed() < DEADLINE, "memif handshake: {:?}", m1.status());
        m1.service();
        thread::sleep(Duration::from_millis(1));
    }

    let (ha, hb) = ([10, 0, 0, 10], [198, 51, 100, 7]);
    // mem -> memif: the largest packet the MTU allows, and sizes around buffer boundaries.
    let sizes = [9000, 1500, 2035, 4096, 8999, 9000];
    let a_to_b: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| udp(VR_A, HOST_A, ha, hb, n, true, i as u32))
        .collect();
    through(&mut p0, &mut m1, &a_to_b, |f| forwarded(f, HOST_B, VR_B));
    // memif -> mem: frames the client chains over its 2048-byte buffers.
    let b_to_a: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| udp(VR_B, HOST_B, hb, ha, n, true, 100 + i as u32))
        .collect();
    through(&mut m1, &mut p0, &b_to_a, |f| forwarded(f, HOST_A, VR_A));

    // One byte over the MTU with DF: refused, and the sender is told the MTU is 9000.
    let mut out = Batch::new(1);
    assert!(out.push_copy(&udp(VR_A, HOST_A, ha, hb, 9001, true, 7)));
    assert_eq!(p0.tx_burst(&mut out, &[0]), 1);
    let icmp = answer(&mut p0);
    assert_eq!(&icmp[..6], &HOST_A, "back to the sender");
    assert_eq!(icmp[23], 1, "ICMP");
    let l4 = 14 + usize::from(icmp[14] & 0xf) * 4;
    assert_eq!((icmp[l4], icmp[l4 + 1]), (3, 4), "destination unreachable, fragmentation needed");
    assert_eq!(u16::from_be_bytes([icmp[l4 + 6], icmp[l4 + 7]]), 9000, "next-hop MTU");
    let status = node.status().unwrap();
    node.stop().unwrap();
    let vr = &status.json()["vrs"][0];
    assert_eq!(vr["counters"]["mtu_exceeded"].as_u64(), Some(1), "{vr:#}");
}

/// The next frame `p` receives.
fn answer(p: &mut dyn Port) -> Vec<u8> {
    let mut inb = Batch::new(256);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < DEADLINE, "no answer on {}", p.name());
        inb.clear();
        if p.rx_burst(&mut inb) > 0 {
            return inb.get(0).frame().to_vec();
        }
        thread::sleep(Duration::from_micros(200));
    }
}

/// `ping -M do -s PAYLOAD` from namespace `ns`: its output, and whether every echo came back.
fn ping(ns: &str, payload: usize, to: &str) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-M", "do", "-s"])
        .args([&payload.to_string(), to])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn jumbo_pings_cross_a_vr_between_afxdp_and_afpacket() {
    if control::sys::euid() != 0 {
        eprintln!("skipped: needs root (network namespaces, veth, AF_XDP)");
        return;
    }
    let pid = std::process::id();
    let (pns, h1, h2) = (format!("rpxjp{pid}"), format!("rpxj1{pid}"), format!("rpxj2{pid}"));
    let _guard = Namespaces(vec![pns.clone(), h1.clone(), h2.clone()]);
    for n in [&pns, &h1, &h2] {
        ip(&["netns", "add", n]);
    }
    for (va, host, addr, gw) in
        [("va", &h1, "10.81.1.2/24", "10.81.1.1"), ("vb", &h2, "10.81.2.2/24", "10.81.2.1")]
    {
        ip(&[
            "-n", &pns, "link", "add", va, "mtu", "9000", "type", "veth", "peer", "name", "eth0",
            "mtu", "9000", "netns", host,
        ]);
        ip(&["-n", &pns, "link", "set", va, "up"]);
        ip(&["-n", host, "addr", "add", addr, "dev", "eth0"]);
        ip(&["-n", host, "link", "set", "eth0", "up"]);
        ip(&["-n", host, "route", "add", "default", "via", gw]);
    }
    let text = format!(
        "\
workers: 1
ports:
  - {{ name: px, kind: afxdp, interface: va, netns: {pns} }}
  - {{ name: pk, kind: afpacket, interface: vb, netns: {pns} }}
vrs:
  - name: r
    interfaces:
      - {{ name: e1, port: px, mac: 02:00:00:00:81:01, mtu: 9000, addresses: [10.81.1.1/24] }}
      - {{ name: e2, port: pk, mac: 02:00:00:00:81:02, mtu: 9000, addresses: [10.81.2.1/24] }}
"
    );
    let topo = Topology::parse(&text, "jumbo-kernel.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let node = Node::start(topo, o, 64).unwrap();
    // 8972 bytes of ICMP payload: 9000-byte IP packets, DF set, both ways through the VR.
    let (ok, out) = ping(&h1, 8972, "10.81.2.2");
    // A host whose MTU is larger sends 9100 bytes: the VR answers "fragmentation needed,
    // MTU 9000" from its AF_XDP side, and the host's ping reports it.
    ip(&["-n", &h1, "link", "set", "eth0", "mtu", "9200"]);
    ip(&["-n", &pns, "link", "set", "va", "mtu", "9200"]);
    let (big_ok, big) = ping(&h1, 9100 - 28, "10.81.2.2");
    let status = node.status().unwrap();
    node.stop().unwrap();
    assert!(ok, "9000-byte pings through the VR failed: {out}\n{status:#}");
    assert!(out.contains("3 received"), "{out}");
    assert!(!big_ok, "{big}");
    // "Frag needed and DF set (mtu = 9000)", then "local error: message too long, mtu=9000".
    assert!(
        big.replace(' ', "").contains("mtu=9000"),
        "the VR reports MTU 9000: {big}\n{status:#}"
    );
    let status_j = status.json();
    let modes: Vec<_> = status_j["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap_or("?"), p["mode"].as_str()))
        .collect();
    // veth: driver mode, copy only (no zero-copy), frames over several descriptors.
    assert!(modes.contains(&("va", Some("xdp driver, copy, multi-buffer"))), "{modes:?}");
    assert!(modes.contains(&("vb", None)), "{modes:?}");
    let vr = &status.json()["vrs"][0];
    assert!(vr["counters"]["mtu_exceeded"].as_u64().unwrap_or(0) >= 1, "{vr:#}");
    for p in status.json()["ports"].as_array().unwrap() {
        assert_eq!(p["rx_dropped"].as_u64(), Some(0), "{p:#}");
    }
}

#[test]
fn a_jumbo_packet_is_fragmented_for_a_1500_byte_link() {
    let text = "\
workers: 1
idle: poll
ports:
  - { name: p0, kind: mem }
  - { name: p1, kind: mem }
vrs:
  - name: vr
    interfaces:
      - { name: a, port: p0, mac: 02:00:00:00:01:00, mtu: 9000, addresses: [10.0.0.1/24] }
      - { name: b, port: p1, mac: 02:00:00:00:01:01, mtu: 1500, addresses: [10.0.1.1/24] }
    routes: [{ prefix: 0.0.0.0/0, via: 10.0.1.2 }]
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
";
    let topo = Topology::parse(text, "jumbo-frag.yaml", Path::new(".")).unwrap();
    let mut node = Node::start(topo.clone(), Options::for_topology(&topo), 256).unwrap();
    let (mut p0, mut p1) = (node.take_outside("p0").unwrap(), node.take_outside("p1").unwrap());
    let sent = udp(VR_A, HOST_A, [10, 0, 0, 10], [198, 51, 100, 7], 9000, false, 42);
    let mut out = Batch::new(1);
    assert!(out.push_copy(&sent));
    assert_eq!(p0.tx_burst(&mut out, &[0]), 1);
    // 8980 bytes of IP payload in 1480-byte pieces: seven fragments.
    let (mut pieces, mut inb) = (Vec::new(), Batch::new(256));
    let t0 = Instant::now();
    while pieces.len() < 7 {
        assert!(t0.elapsed() < DEADLINE, "{} of 7 fragments came: {:?}", pieces.len(), p1.stats());
        inb.clear();
        p1.rx_burst(&mut inb);
        pieces.extend(inb.packets().iter().map(|p| p.frame().to_vec()));
        thread::sleep(Duration::from_micros(200));
    }
    let status = node.status().unwrap();
    node.stop().unwrap();
    assert_eq!(pieces.len(), 7, "{status:#}");
    let mut payload = vec![0u8; 8980];
    let mut covered = 0;
    for f in &pieces {
        assert!(f.len() <= 1514, "a fragment of {} bytes", f.len());
        assert_eq!(&f[..6], &HOST_B);
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let flags_off = u16::from_be_bytes([f[20], f[21]]);
        let off = usize::from(flags_off & 0x1fff) * 8;
        let data = &f[34..14 + total];
        assert_eq!(flags_off & 0x2000 != 0, off + data.len() < 8980, "MF set on all but the last");
        payload[off..off + data.len()].copy_from_slice(data);
        covered += data.len();
    }
    assert_eq!(covered, 8980);
    assert!(payload == sent[34..], "the fragments put back together are the packet sent");
}
