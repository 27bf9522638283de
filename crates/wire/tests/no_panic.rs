//! No parser panics, whatever the bytes.
//!
//! A seeded generator feeds at least 100,000 frames to `wire::fuzz_all`, which runs every
//! view's `new_checked` and, where that succeeds, every getter, setter, checksum check,
//! `Repr::parse`/`emit` round trip, the IPv6 extension-header walk and NDP option iteration,
//! both at offset 0 and down an Ethernet frame's layers. The frames are:
//! * random bytes of random length (0..=1600, and often short);
//! * every valid seed frame (`wire::fuzzing::seeds`) truncated at every length;
//! * seed frames mutated: bit flips, byte overwrites, and length, offset and type fields set to
//!   edge values (0, 1, 0xffff, IHL and data offset 0..=15, extension lengths 255, ...);
//! * seed frames whose tail after a valid prefix is random.
//!
//! The same generator and seed always give the same frames, so a failure reproduces; the
//! frame that failed is printed in hex.

use std::panic::{catch_unwind, AssertUnwindSafe};

use wire::fuzzing::{seeds, Field, Rng, Seed};
use wire::{arp, ethernet, ethertype, icmpv4, icmpv6, ip_proto, ipv4, ipv6, ndp, tcp, udp, vlan};

/// How many frames got through each layer's checks, to show the feed is not vacuous: a
/// generator whose frames all fail the Ethernet or IP checks would test nothing below them.
#[derive(Debug, Default)]
struct Reached {
    vlan: usize,
    arp: usize,
    ipv4_valid: usize,
    ipv4_options: usize,
    ipv6: usize,
    ipv6_ext: usize,
    udp: usize,
    tcp: usize,
    icmpv4: usize,
    icmpv6: usize,
    ndp: usize,
}

impl Reached {
    fn note(&mut self, frame: &[u8]) {
        let Ok(f) = ethernet::Frame::new_checked(frame) else { return };
        let (mut et, mut rest) = (f.ethertype(), f.payload());
        while et == ethertype::VLAN || et == ethertype::QINQ {
            let Ok(t) = vlan::Tag::new_checked(rest) else { return };
            self.vlan += 1;
            et = t.inner_ethertype();
            rest = &rest[vlan::HEADER_LEN..];
        }
        let (protocol, l4) = match et {
            ethertype::ARP => {
                self.arp +=
                    wire::ArpRepr::parse(&arp::Packet::new_unchecked(rest)).is_ok() as usize;
                return;
            }
            ethertype::IPV4 => {
                let Ok(p) = ipv4::Packet::new_checked(rest) else { return };
                if !p.verify_checksum() {
                    return;
                }
                self.ipv4_valid += 1;
                self.ipv4_options += !p.options().is_empty() as usize;
                (p.protocol(), &rest[p.header_len()..p.total_len() as usize])
            }
            ethertype::IPV6 => {
                let Ok(p) = ipv6::Packet::new_checked(rest) else { return };
                self.ipv6 += 1;
                let Ok(ul) = p.upper_layer() else { return };
                self.ipv6_ext += (ul.offset > ipv6::HEADER_LEN) as usize;
                (ul.protocol, &rest[ul.offset..ipv6::HEADER_LEN + p.payload_len() as usize])
            }
            _ => return,
        };
        match protocol {
            ip_proto::UDP => self.udp += udp::Packet::new_checked(l4).is_ok() as usize,
            ip_proto::TCP => self.tcp += tcp::Packet::new_checked(l4).is_ok() as usize,
            ip_proto::ICMP => self.icmpv4 += icmpv4::Packet::new_checked(l4).is_ok() as usize,
            ip_proto::ICMPV6 => {
                self.icmpv6 += icmpv6::Packet::new_checked(l4).is_ok() as usize;
                self.ndp += (ndp::NeighborSolicit::new_checked(l4).is_ok()
                    || ndp::NeighborAdvert::new_checked(l4).is_ok())
                    as usize;
            }
            _ => {}
        }
    }
}

/// Feeds frames to `fuzz_all`, counting them and naming the one that panics.
#[derive(Default)]
struct Feeder {
    count: usize,
    reached: Reached,
}

impl Feeder {
    fn feed(&mut self, what: &str, frame: &[u8]) {
        self.count += 1;
        if catch_unwind(AssertUnwindSafe(|| wire::fuzz_all(frame))).is_err() {
            let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
            panic!("frame #{} ({what}, {} bytes) panicked: {hex}", self.count, frame.len());
        }
        self.reached.note(frame);
    }
}

const U16_EDGES: [u16; 12] = [0, 1, 2, 7, 8, 19, 20, 39, 40, 0x7fff, 0x8000, 0xffff];

fn set_field(rng: &mut Rng, frame: &mut [u8], field: Field) {
    match field {
        Field::U16(at) if at + 2 <= frame.len() => {
            let v = match rng.below(4) {
                0 => rng.next_u64() as u16,
                // Lengths near the real one are where off-by-ones live.
                1 => (frame.len() as u16).wrapping_add(rng.below(9) as u16).wrapping_sub(4),
                _ => U16_EDGES[rng.below(U16_EDGES.len())],
            };
            frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
        Field::U8(at) if at < frame.len() => {
            frame[at] = match rng.below(3) {
                0 => rng.next_u64() as u8,
                _ => [0, 1, 2, 0x7f, 0x80, 0xfe, 0xff][rng.below(7)],
            };
        }
        Field::LowNibble(at) if at < frame.len() => {
            frame[at] = (frame[at] & 0xf0) | rng.below(16) as u8;
        }
        Field::HighNibble(at) if at < frame.len() => {
            frame[at] = (frame[at] & 0x0f) | ((rng.below(16) as u8) << 4);
        }
        _ => {}
    }
}

fn mutate(rng: &mut Rng, seed: &Seed) -> Vec<u8> {
    let mut frame = seed.bytes.clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(8) {
            0 if !frame.is_empty() => {
                let bit = rng.below(frame.len() * 8);
                frame[bit / 8] ^= 1 << (bit % 8);
            }
            1 if !frame.is_empty() => {
                let at = rng.below(frame.len());
                frame[at] = rng.next_u64() as u8;
            }
            2 => {
                let len = rng.below(frame.len() + 1);
                frame.truncate(len);
            }
            3 => {
                let extra = rng.below(64);
                let start = frame.len();
                frame.resize(start + extra, 0);
                rng.fill(&mut frame[start..]);
            }
            _ if !seed.fields.is_empty() => {
                let f = seed.fields[rng.below(seed.fields.len())];
                set_field(rng, &mut frame, f);
            }
            _ => {}
        }
    }
    frame
}

#[test]
fn no_parser_panics() {
    let mut rng = Rng(0x5eed_f00d);
    let mut feeder = Feeder::default();
    let seeds = seeds();
    assert!(seeds.len() >= 15, "{} seeds", seeds.len());

    // Random bytes: half of any length up to a jumbo-less MTU, half short, where the header
    // checks sit.
    let mut buf = vec![0u8; 1601];
    for i in 0..40_000 {
        let len = if i % 2 == 0 { rng.below(1601) } else { rng.below(129) };
        rng.fill(&mut buf[..len]);
        feeder.feed("random", &buf[..len]);
    }

    // Every seed, whole and cut at every length.
    for s in &seeds {
        for len in 0..=s.bytes.len() {
            feeder.feed(s.name, &s.bytes[..len]);
        }
    }

    // Every aimed field of every seed at every edge value, one at a time.
    for s in &seeds {
        for &f in &s.fields {
            for _ in 0..40 {
                let mut frame = s.bytes.clone();
                set_field(&mut rng, &mut frame, f);
                feeder.feed(s.name, &frame);
            }
        }
    }

    // A valid prefix and a random tail.
    for _ in 0..10_000 {
        let s = &seeds[rng.below(seeds.len())];
        let mut frame = s.bytes.clone();
        let keep = rng.below(frame.len() + 1);
        rng.fill(&mut frame[keep..]);
        feeder.feed(s.name, &frame);
    }

    // Mutations, until well past the required count.
    while feeder.count < 250_000 {
        let s = &seeds[rng.below(seeds.len())];
        let frame = mutate(&mut rng, s);
        feeder.feed(s.name, &frame);
    }

    assert!(feeder.count >= 100_000, "fed only {} frames", feeder.count);
    let r = &feeder.reached;
    println!("fed {} frames; got through: {r:?}", feeder.count);
    for (layer, n) in [
        ("vlan", r.vlan),
        ("arp", r.arp),
        ("ipv4 with a valid checksum", r.ipv4_valid),
        ("ipv4 with options", r.ipv4_options),
        ("ipv6", r.ipv6),
        ("ipv6 extension headers", r.ipv6_ext),
        ("udp", r.udp),
        ("tcp", r.tcp),
        ("icmpv4", r.icmpv4),
        ("icmpv6", r.icmpv6),
        ("ndp", r.ndp),
    ] {
        assert!(n >= 1_000, "only {n} frames got through to {layer}");
    }
}

/// Inputs that once crashed a fuzz target, replayed forever (see fuzz/README.md).
#[test]
fn fuzz_regressions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let Ok(entries) = std::fs::read_dir(&dir) else { return };
    let mut feeder = Feeder::default();
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "bin") {
            let bytes = std::fs::read(&path).unwrap();
            feeder.feed(&path.display().to_string(), &bytes);
        }
    }
}

/// Writes the seed frames as a starting corpus for each cargo-fuzz target:
/// `cargo test -p wire --test no_panic -- --ignored write_seed_corpus`.
#[test]
#[ignore = "a tool, not a test: writes the fuzz seed corpus"]
fn write_seed_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let e = wire::ethernet::HEADER_LEN;
    for s in seeds() {
        // The frame walk sees whole frames; the per-family targets see their layer at offset 0.
        let l3 = &s.bytes[e..];
        for (target, bytes) in [
            ("ethernet_arp_vlan", &s.bytes[..]),
            ("ipv4", l3),
            ("ipv6_ext", l3),
            ("icmp_ndp", s.bytes.get(e + 40..).unwrap_or(&[])),
            ("icmp_ndp", s.bytes.get(e + 20..).unwrap_or(&[])),
            ("udp_tcp", s.bytes.get(e + 40..).unwrap_or(&[])),
            ("udp_tcp", s.bytes.get(e + 20..).unwrap_or(&[])),
        ] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            let name = format!("{}-{}.bin", s.name, bytes.len());
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
