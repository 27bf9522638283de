//! Test traffic: flows over a DUT's targets, and the generator rotation that carries them.

use serde::Serialize;

use crate::dut::Target;
use crate::frames::{self, FrameSize, UdpFlow, IMIX_CYCLE, STAMP_LEN};
use crate::gen::GenFrame;
use crate::Error;

/// The most flows a trial can tell apart (the stamp's flow id is 16 bits).
pub const MAX_FLOWS: usize = 65_536;
/// The most bytes of prepared frames a rotation may take.
pub const MAX_ROTATION_BYTES: usize = 256 << 20;

/// What traffic to make.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TrafficSpec {
    /// Distinct flows (source/destination address and UDP port tuples), 1..=65536.
    pub flows: usize,
    /// Frame size on the wire, FCS included.
    pub size: FrameSize,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
}

impl Default for TrafficSpec {
    fn default() -> Self {
        TrafficSpec { flows: 1024, size: FrameSize::Fixed(64), ttl: 64 }
    }
}

/// Test traffic ready for a generator and an analyzer.
pub struct Traffic {
    /// The generator's rotation.
    pub frames: Vec<GenFrame>,
    /// Class names, by class id.
    pub classes: Vec<String>,
    /// The class of each flow, by flow id.
    pub class_of_flow: Vec<u16>,
    /// Mean frame length in the rotation, bytes on the wire (FCS included).
    pub mean_wire_bytes: f64,
    /// The smallest frame, bytes on the wire: more than asked when headers and the stamp do
    /// not fit (IPv6 or a VLAN tag at 64 bytes).
    pub min_wire_bytes: usize,
}

/// Flow `f` goes to target `f % targets`; within a target, flows walk its destinations and
/// sources and vary both UDP ports. Every frame has room for the full stamp.
pub fn build(spec: &TrafficSpec, targets: &[Target]) -> Result<Traffic, Error> {
    if targets.is_empty() {
        return Err(Error::new("the DUT gave no targets to send to"));
    }
    if !(1..=MAX_FLOWS).contains(&spec.flows) {
        return Err(Error::new(format!("--flows {} is outside 1..={MAX_FLOWS}", spec.flows)));
    }
    if targets.len() > u16::MAX as usize {
        return Err(Error::new(format!("{} classes: at most 65535", targets.len())));
    }
    for t in targets {
        if t.src.is_empty() || t.dst.is_empty() {
            return Err(Error::new(format!("target {}: no source or destination", t.class)));
        }
        if t.src.iter().chain(&t.dst).any(|a| a.is_ipv4() != t.dst[0].is_ipv4()) {
            return Err(Error::new(format!("target {}: mixes IPv4 and IPv6", t.class)));
        }
    }
    let nt = targets.len();
    let flows: Vec<UdpFlow> = (0..spec.flows)
        .map(|f| {
            let t = &targets[f % nt];
            let j = f / nt;
            UdpFlow {
                src_mac: t.src_mac,
                dst_mac: t.dst_mac,
                vlan: t.vlan,
                src: t.src[(j + j / t.dst.len()) % t.src.len()],
                dst: t.dst[j % t.dst.len()],
                src_port: 1024 + (f % 60_000) as u16,
                dst_port: 5001 + (j % 1000) as u16,
                ttl: spec.ttl,
                size: 0,
            }
        })
        .collect();
    let sizes: &[u16] = match spec.size {
        FrameSize::Fixed(n) => &[n],
        FrameSize::Imix => &IMIX_CYCLE,
    };
    let mut frames = Vec::with_capacity(flows.len() * sizes.len());
    let (mut bytes, mut wire_sum, mut min_wire) = (0usize, 0usize, usize::MAX);
    for &wire in sizes {
        for (f, fl) in flows.iter().enumerate() {
            let len = (wire as usize - 4).max(frames::header_len(fl) + STAMP_LEN);
            bytes += len;
            if bytes > MAX_ROTATION_BYTES {
                return Err(Error::new(format!(
                    "{} flows of {} frames need more than {} MiB of prepared frames: use fewer --flows",
                    spec.flows,
                    spec.size,
                    MAX_ROTATION_BYTES >> 20
                )));
            }
            wire_sum += len + 4;
            min_wire = min_wire.min(len + 4);
            let frame = frames::udp_frame(&UdpFlow { size: len, ..*fl });
            frames.push(GenFrame { frame, flow: f as u16, class: (f % nt) as u16 });
        }
    }
    Ok(Traffic {
        mean_wire_bytes: wire_sum as f64 / frames.len() as f64,
        min_wire_bytes: min_wire,
        frames,
        classes: targets.iter().map(|t| t.class.clone()).collect(),
        class_of_flow: (0..spec.flows).map(|f| (f % nt) as u16).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use wire::MacAddr;

    fn target(class: &str, dst: &[&str]) -> Target {
        let v6 = dst[0].contains(':');
        Target {
            class: class.into(),
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: None,
            src: vec![(if v6 { "2001:2::2" } else { "198.18.0.2" }).parse().unwrap()],
            dst: dst.iter().map(|d| d.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn flows_spread_over_targets_and_imix_keeps_its_mix() {
        let ts = [target("a", &["198.19.0.1", "198.19.0.2"]), target("b", &["2001:2:1::1"])];
        let spec = TrafficSpec { flows: 6, size: FrameSize::Imix, ttl: 64 };
        let t = build(&spec, &ts).unwrap();
        assert_eq!(t.frames.len(), 72);
        assert_eq!(t.class_of_flow, [0, 1, 0, 1, 0, 1]);
        let mut count = std::collections::BTreeMap::new();
        for f in &t.frames {
            *count.entry(f.frame.len() + 4).or_insert(0) += 1;
            assert!(frames::read_stamp(&f.frame).is_some(), "room for the stamp");
            assert_eq!(f.class, f.flow % 2);
        }
        // IPv6 64-byte frames grow to hold headers and the stamp: 14 + 40 + 8 + 18 + 4 = 84.
        assert_eq!(count[&64], 7 * 3);
        assert_eq!(count[&84], 7 * 3);
        assert_eq!(count[&570], 4 * 6);
        assert_eq!(count[&1518], 6);
        assert_eq!(t.min_wire_bytes, 64);
        // Destinations alternate within target a.
        let dst = |i: usize| match etherparse::SlicedPacket::from_ethernet(&t.frames[i].frame)
            .unwrap()
            .net
        {
            Some(etherparse::NetSlice::Ipv4(ip)) => IpAddr::V4(ip.header().destination_addr()),
            _ => unreachable!(),
        };
        assert_ne!(dst(0), dst(2));
        assert!(build(&TrafficSpec { flows: 0, ..spec }, &ts).is_err());
        assert!(build(&TrafficSpec { flows: 65_537, ..spec }, &ts).is_err());
    }
}
