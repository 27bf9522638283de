//! Test traffic: flows over a DUT's targets, grouped by the port they enter on, and shared
//! among classes as a [`Mix`] says.

use std::collections::HashMap;

use serde::Serialize;

use crate::dut::Target;
use crate::frames::{self, FrameSize, UdpFlow, IMIX_CYCLE, STAMP_LEN};
use crate::gen::GenFrame;
use crate::Error;

/// The most flows a trial can tell apart (the stamp's flow id has 20 bits).
pub const MAX_FLOWS: usize = frames::MAX_FLOW_ID as usize + 1;
/// The most bytes of prepared frames a rotation may take.
pub const MAX_ROTATION_BYTES: usize = 256 << 20;

/// What traffic to make.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TrafficSpec {
    /// Distinct flows (source/destination address and UDP port tuples), 1..=1048576.
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

/// How the offered load is shared among classes (say, VRs): relative weights. A class's share
/// of the total rate is its weight over the sum of all weights; a class of weight 0 sends
/// nothing (and gets no flows).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mix {
    /// Weights of named classes.
    pub weights: Vec<(String, f64)>,
    /// The weight of every class not named: 1 (the default) shares the load equally, 0 leaves
    /// the unnamed classes idle.
    pub others: f64,
    /// Only the first N classes (in the order of the DUT's targets) send; `None`: all.
    pub first: Option<usize>,
}

impl Default for Mix {
    /// Equal shares.
    fn default() -> Self {
        Mix { weights: Vec::new(), others: 1.0, first: None }
    }
}

impl Mix {
    /// Only `classes` send, in equal shares.
    pub fn only<S: Into<String>>(classes: impl IntoIterator<Item = S>) -> Mix {
        Mix {
            weights: classes.into_iter().map(|c| (c.into(), 1.0)).collect(),
            others: 0.0,
            first: None,
        }
    }

    /// Only the first `n` classes send, in equal shares.
    pub fn first(n: usize) -> Mix {
        Mix { first: Some(n), ..Mix::default() }
    }

    /// The weight of `class`.
    pub fn weight(&self, class: &str) -> f64 {
        self.weights.iter().find(|(c, _)| c == class).map_or(self.others, |w| w.1)
    }
}

/// The frames that enter the DUT on one port, and how they take turns.
pub struct Stream {
    /// The port (an index into the DUT's [`crate::dut::PortSet`]) they are sent on.
    pub port: usize,
    /// This stream's share of the total offered rate; the streams' shares sum to 1.
    pub share: f64,
    /// One lane per class entering on this port: its frames, sent in turn.
    pub lanes: Vec<Vec<GenFrame>>,
    /// The rotation: which lane sends next, each lane as often as its share of the stream.
    pub slots: Vec<u32>,
}

/// Test traffic ready for generators and an analyzer.
pub struct Traffic {
    /// The frames, by ingress port.
    pub streams: Vec<Stream>,
    /// Class names, by class id.
    pub classes: Vec<String>,
    /// Each class's share of the total offered rate, by class id.
    pub class_share: Vec<f64>,
    /// The class of each flow, by flow id.
    pub class_of_flow: Vec<u16>,
    /// Mean frame length in the rotation, bytes on the wire (FCS included).
    pub mean_wire_bytes: f64,
    /// The smallest frame, bytes on the wire: more than asked when headers and the stamp do
    /// not fit (IPv6 or a VLAN tag at 64 bytes).
    pub min_wire_bytes: usize,
}

impl Traffic {
    /// Every frame of every stream, in stream and lane order.
    pub fn frames(&self) -> impl Iterator<Item = &GenFrame> {
        self.streams.iter().flat_map(|s| s.lanes.iter().flatten())
    }
}

/// Equal shares, every target on port 0: see [`build_mixed`].
pub fn build(spec: &TrafficSpec, targets: &[Target]) -> Result<Traffic, Error> {
    build_mixed(spec, targets, &[], &Mix::default())
}

/// Builds the traffic: targets of one class name form one class; a class's weight (from
/// `mix`) is split evenly among its targets; `ingress[t]` is the port target `t` enters on
/// (empty: all on port 0). Flow `f` goes to the `f mod n`-th of the `n` targets that send;
/// within a target, flows walk its destinations and sources and vary both UDP ports. Every
/// frame has room for the full stamp.
pub fn build_mixed(
    spec: &TrafficSpec,
    targets: &[Target],
    ingress: &[usize],
    mix: &Mix,
) -> Result<Traffic, Error> {
    if targets.is_empty() {
        return Err(Error::new("the DUT gave no targets to send to"));
    }
    if !(1..=MAX_FLOWS).contains(&spec.flows) {
        return Err(Error::new(format!("--flows {} is outside 1..={MAX_FLOWS}", spec.flows)));
    }
    if !ingress.is_empty() && ingress.len() != targets.len() {
        return Err(Error::new(format!(
            "the DUT named ingress ports for {} of its {} targets",
            ingress.len(),
            targets.len()
        )));
    }
    for t in targets {
        if t.src.is_empty() || t.dst.is_empty() {
            return Err(Error::new(format!("target {}: no source or destination", t.class)));
        }
        if t.src.iter().chain(&t.dst).any(|a| a.is_ipv4() != t.dst[0].is_ipv4()) {
            return Err(Error::new(format!("target {}: mixes IPv4 and IPv6", t.class)));
        }
    }
    // Classes by name, in order of first appearance.
    let mut classes: Vec<String> = Vec::new();
    let mut class_id: HashMap<&str, u16> = HashMap::new();
    let mut class_of_target = Vec::with_capacity(targets.len());
    for t in targets {
        let next = classes.len();
        let c = *class_id.entry(t.class.as_str()).or_insert_with(|| {
            classes.push(t.class.clone());
            next as u16
        });
        if classes.len() > u16::MAX as usize {
            return Err(Error::new(format!("more than {} classes", u16::MAX)));
        }
        class_of_target.push(c);
    }
    for (name, w) in &mix.weights {
        if !w.is_finite() || *w < 0.0 {
            return Err(Error::new(format!("class {name}: weight {w} is not a finite share >= 0")));
        }
        if !class_id.contains_key(name.as_str()) {
            return Err(Error::new(format!(
                "class {name:?} has a share but the DUT has no such class (it has {})",
                preview(&classes)
            )));
        }
    }
    if !mix.others.is_finite() || mix.others < 0.0 {
        return Err(Error::new(format!("weight {} of the other classes is not >= 0", mix.others)));
    }
    let limit = mix.first.unwrap_or(usize::MAX);
    let class_weight: Vec<f64> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| if i < limit { mix.weight(c) } else { 0.0 })
        .collect();
    let total: f64 = class_weight.iter().sum();
    if total <= 0.0 {
        return Err(Error::new("no class has a share of the load"));
    }
    let mut targets_of_class = vec![0usize; classes.len()];
    for &c in &class_of_target {
        targets_of_class[c as usize] += 1;
    }
    let active: Vec<usize> =
        (0..targets.len()).filter(|&t| class_weight[class_of_target[t] as usize] > 0.0).collect();
    if spec.flows < active.len() {
        return Err(Error::new(format!(
            "{} flows for {} targets that send: every target needs a flow (use at least {} flows)",
            spec.flows,
            active.len(),
            active.len()
        )));
    }
    let port_of = |t: usize| ingress.get(t).copied().unwrap_or(0);
    let na = active.len();
    let flows: Vec<(usize, UdpFlow)> = (0..spec.flows)
        .map(|f| {
            let ti = active[f % na];
            let t = &targets[ti];
            let j = f / na;
            let fl = UdpFlow {
                src_mac: t.src_mac,
                dst_mac: t.dst_mac,
                vlan: t.vlan,
                src: t.src[(j + j / t.dst.len()) % t.src.len()],
                dst: t.dst[j % t.dst.len()],
                src_port: 1024 + (f % 60_000) as u16,
                dst_port: 5001 + (j % 1000) as u16,
                ttl: spec.ttl,
                size: 0,
            };
            (ti, fl)
        })
        .collect();
    let sizes: &[u16] = match spec.size {
        FrameSize::Fixed(n) => &[n],
        FrameSize::Imix => &IMIX_CYCLE,
    };
    // Streams by port, in order of first appearance; lanes by class within a stream.
    let mut streams: Vec<Stream> = Vec::new();
    let mut lane_weight: Vec<Vec<f64>> = Vec::new();
    let mut lane_of: HashMap<(usize, u16), (usize, usize)> = HashMap::new();
    for &ti in &active {
        let (p, c) = (port_of(ti), class_of_target[ti]);
        let s = match streams.iter().position(|s| s.port == p) {
            Some(s) => s,
            None => {
                streams.push(Stream { port: p, share: 0.0, lanes: Vec::new(), slots: Vec::new() });
                lane_weight.push(Vec::new());
                streams.len() - 1
            }
        };
        let (_, l) = *lane_of.entry((p, c)).or_insert_with(|| {
            streams[s].lanes.push(Vec::new());
            lane_weight[s].push(0.0);
            (s, streams[s].lanes.len() - 1)
        });
        lane_weight[s][l] += class_weight[c as usize] / targets_of_class[c as usize] as f64;
    }
    let (mut bytes, mut wire_sum, mut min_wire, mut count) = (0usize, 0usize, usize::MAX, 0usize);
    for &wire in sizes {
        for (f, (ti, fl)) in flows.iter().enumerate() {
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
            count += 1;
            let frame = frames::udp_frame(&UdpFlow { size: len, ..*fl });
            let c = class_of_target[*ti];
            let (s, l) = lane_of[&(port_of(*ti), c)];
            streams[s].lanes[l].push(GenFrame { frame, flow: f as u32, class: c });
        }
    }
    let mut class_share = vec![0.0; classes.len()];
    for (c, w) in class_weight.iter().enumerate() {
        class_share[c] = w / total;
    }
    for (s, w) in streams.iter_mut().zip(&lane_weight) {
        s.share = w.iter().sum::<f64>() / total;
        s.slots = rotation(w);
    }
    Ok(Traffic {
        mean_wire_bytes: wire_sum as f64 / count as f64,
        min_wire_bytes: min_wire,
        streams,
        class_share,
        class_of_flow: flows.iter().map(|(ti, _)| class_of_target[*ti]).collect(),
        classes,
    })
}

fn preview(names: &[String]) -> String {
    let mut s = names.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > 8 {
        s += &format!(", ... ({} in all)", names.len());
    }
    s
}

/// A rotation over lanes of weights `w` (all > 0): each lane named in proportion to its
/// weight (to 1 part in 10,000 or better), interleaved evenly (smooth weighted round robin).
pub fn rotation(w: &[f64]) -> Vec<u32> {
    let total: f64 = w.iter().sum();
    let resolution = (w.len() * 100).max(10_000) as f64;
    let mut q: Vec<u64> =
        w.iter().map(|&x| ((x / total * resolution).round() as u64).max(1)).collect();
    let g = q.iter().copied().fold(0, gcd);
    for x in &mut q {
        *x /= g;
    }
    let len: u64 = q.iter().sum();
    let mut current = vec![0i64; q.len()];
    let mut out = Vec::with_capacity(len as usize);
    for _ in 0..len {
        let mut best = 0;
        for (i, c) in current.iter_mut().enumerate() {
            *c += q[i] as i64;
        }
        for i in 1..current.len() {
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= len as i64;
        out.push(best as u32);
    }
    out
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
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
        let frames: Vec<&GenFrame> = t.frames().collect();
        assert_eq!(frames.len(), 72);
        assert_eq!(t.class_of_flow, [0, 1, 0, 1, 0, 1]);
        assert_eq!(t.streams.len(), 1);
        assert_eq!(t.streams[0].slots, [0, 1], "equal shares: the lanes alternate");
        assert_eq!(t.class_share, [0.5, 0.5]);
        let mut count = std::collections::BTreeMap::new();
        for f in &frames {
            *count.entry(f.frame.len() + 4).or_insert(0) += 1;
            assert!(frames::read_stamp(&f.frame).is_some(), "room for the stamp");
            assert_eq!(f.class as u32, f.flow % 2);
        }
        // IPv6 64-byte frames grow to hold headers and the stamp: 14 + 40 + 8 + 18 + 4 = 84.
        assert_eq!(count[&64], 7 * 3);
        assert_eq!(count[&84], 7 * 3);
        assert_eq!(count[&570], 4 * 6);
        assert_eq!(count[&1518], 6);
        assert_eq!(t.min_wire_bytes, 64);
        // Destinations alternate within target a (its lane: flows 0, 2, 4 at each size).
        let dst =
            |i: usize| match etherparse::SlicedPacket::from_ethernet(&frames[i].frame).unwrap().net
            {
                Some(etherparse::NetSlice::Ipv4(ip)) => IpAddr::V4(ip.header().destination_addr()),
                _ => unreachable!(),
            };
        assert_eq!((frames[0].flow, frames[1].flow), (0, 2));
        assert_ne!(dst(0), dst(1));
        assert!(build(&TrafficSpec { flows: 0, ..spec }, &ts).is_err());
        assert!(build(&TrafficSpec { flows: MAX_FLOWS + 1, ..spec }, &ts).is_err());
    }

    #[test]
    fn a_mix_shares_the_load_across_ports_and_classes() {
        // Class a enters on ports 0 and 1 (two targets), b on port 1, c nowhere (weight 0).
        let ts = [
            target("a", &["198.19.0.1"]),
            target("a", &["198.19.0.2"]),
            target("b", &["198.19.0.3"]),
            target("c", &["198.19.0.4"]),
        ];
        let mix =
            Mix { weights: vec![("a".into(), 3.0), ("b".into(), 1.0)], others: 0.0, first: None };
        let spec = TrafficSpec { flows: 6, ..TrafficSpec::default() };
        let t = build_mixed(&spec, &ts, &[0, 1, 1, 0], &mix).unwrap();
        assert_eq!(t.classes, ["a", "b", "c"]);
        assert_eq!(t.class_share, [0.75, 0.25, 0.0]);
        // Port 0 carries half of a (3/8 of the load), port 1 the other half and b (5/8).
        let (p0, p1) = (&t.streams[0], &t.streams[1]);
        assert_eq!((p0.port, p1.port), (0, 1));
        assert_eq!((p0.share, p1.share), (0.375, 0.625));
        assert_eq!(p0.slots, [0]);
        // On port 1: a's half (1.5) against b (1): 3 turns in 5 for a.
        assert_eq!(p1.slots.len(), 5);
        assert_eq!(p1.slots.iter().filter(|&&l| l == 0).count(), 3);
        assert_ne!(p1.slots[..2], [0, 0], "interleaved, not in runs");
        // Three targets send: flows 0, 3 to the first, 1, 4 to the second, 2, 5 to b.
        assert_eq!(t.class_of_flow, [0, 0, 1, 0, 0, 1]);
        assert_eq!(p0.lanes[0].iter().map(|f| f.flow).collect::<Vec<_>>(), [0, 3]);
        let e = |m: &Mix, flows: usize| {
            let spec = TrafficSpec { flows, ..TrafficSpec::default() };
            build_mixed(&spec, &ts, &[0, 1, 1, 0], m).err().map(|e| e.to_string())
        };
        assert!(e(&mix, 2).unwrap().contains("every target needs a flow"));
        assert!(e(&Mix::only(["x"]), 8).unwrap().contains("no such class"));
        assert!(e(&Mix::only(Vec::<String>::new()), 8).unwrap().contains("no class has a share"));
        // Only the first class: both of a's targets, nothing else.
        let t = build_mixed(&spec, &ts, &[0, 1, 1, 0], &Mix::first(1)).unwrap();
        assert_eq!(t.class_share, [1.0, 0.0, 0.0]);
        assert_eq!(t.class_of_flow, [0; 6]);
    }

    #[test]
    fn rotations_keep_their_proportions() {
        for w in [vec![1.0; 7], vec![143.0, 43.0], vec![0.3, 3.0, 1.0], vec![1.0; 1024]] {
            let r = rotation(&w);
            let total: f64 = w.iter().sum();
            for (i, x) in w.iter().enumerate() {
                let got = r.iter().filter(|&&l| l as usize == i).count() as f64 / r.len() as f64;
                assert!((got - x / total).abs() < 1e-4, "{w:?}: lane {i} has {got}");
            }
        }
        assert_eq!(rotation(&[1.0; 1024]).len(), 1024);
    }

    #[test]
    fn a_million_flows_fit_with_distinct_ids() {
        let ts = [target("a", &["198.19.0.1", "198.19.0.2"])];
        let spec = TrafficSpec { flows: MAX_FLOWS, ..TrafficSpec::default() };
        let t = build(&spec, &ts).unwrap();
        let frames: Vec<&GenFrame> = t.frames().collect();
        assert_eq!(frames.len(), MAX_FLOWS);
        let last = frames[MAX_FLOWS - 1];
        assert_eq!(last.flow, frames::MAX_FLOW_ID);
    }
}
