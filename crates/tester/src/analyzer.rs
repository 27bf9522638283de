//! The sink side of a trial: per-flow and per-class accounting of stamped frames.

use hdrhistogram::Histogram;
use ports::{Batch, Port};

use crate::clock::Clock;
use crate::frames::{self, FLOW_OFFSET, SEQ_MASK, TAG_SHIFT, TS_OFFSET};

/// Sequence numbers remembered behind the highest one seen, per flow, to tell a late frame
/// from a duplicate.
pub const REORDER_WINDOW: u64 = 64;
/// The largest latency a histogram holds, in nanoseconds (larger ones are recorded as this).
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Classes up to this many get a latency histogram each (one takes about 200 KiB); with more,
/// only the trial's overall latency is kept.
pub const MAX_CLASS_HISTOGRAMS: usize = 64;

/// What one flow's frames did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Distinct frames received.
    pub received: u64,
    /// Frames received again (same sequence number, within the reorder window).
    pub duplicates: u64,
    /// Frames that arrived after a frame with a higher sequence number.
    pub reordered: u64,
    /// Late frames too far behind to tell whether they were duplicates (counted as received).
    pub beyond_window: u64,
    /// One past the highest sequence number seen.
    pub next: u64,
    /// Bit `j`: sequence number `next - 1 - j` was seen.
    window: u64,
    /// Latency sum, minimum and maximum, nanoseconds.
    pub latency_sum_ns: u64,
    pub latency_min_ns: u64,
    pub latency_max_ns: u64,
}

impl FlowStats {
    /// Frames missing below the highest sequence number seen (the loss a sink can see by
    /// itself; frames lost after the last one received show only against the sent count).
    pub fn gaps(&self) -> u64 {
        self.next.saturating_sub(self.received)
    }

    /// Accounts sequence number `s`; false if it is a duplicate.
    #[inline]
    fn see(&mut self, s: u64) -> bool {
        if s >= self.next {
            let shift = s - self.next + 1;
            self.window = if shift >= 64 { 0 } else { self.window << shift } | 1;
            self.next = s + 1;
        } else {
            let d = self.next - 1 - s;
            if d >= REORDER_WINDOW {
                self.beyond_window += 1;
                self.reordered += 1;
            } else if self.window >> d & 1 == 1 {
                self.duplicates += 1;
                return false;
            } else {
                self.window |= 1 << d;
                self.reordered += 1;
            }
        }
        self.received += 1;
        true
    }
}

/// What one class's frames did.
#[derive(Clone, Debug)]
pub struct ClassStats {
    /// Distinct frames received.
    pub received: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Their latencies, nanoseconds (`None` with more than [`MAX_CLASS_HISTOGRAMS`] classes).
    pub latency: Option<Histogram<u64>>,
}

/// Counts the stamped frames of one trial as they arrive.
///
/// A frame counts if it carries a full stamp with the current tag and a known flow id;
/// frames of another tag (warm-up, an earlier trial) count as `stale`, anything else as
/// `foreign`. Latency is the receive time (read once per burst, right after `rx_burst`) minus
/// the TX stamp. Nothing here allocates once it is built.
pub struct Analyzer {
    tag: u8,
    flows: Vec<FlowStats>,
    class_of: Vec<u16>,
    classes: Vec<ClassStats>,
    latency: Histogram<u64>,
    received: u64,
    bytes: u64,
    stale: u64,
    foreign: u64,
}

/// An empty latency histogram as the analyzer keeps them: 1 ns to 60 s, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

impl Analyzer {
    /// An analyzer for flows `0..class_of.len()`, flow `f` belonging to class `class_of[f]`.
    pub fn new(class_of: Vec<u16>) -> Analyzer {
        let classes = class_of.iter().map(|&c| c as usize + 1).max().unwrap_or(1);
        Analyzer::with_classes(class_of, classes)
    }

    /// As [`Analyzer::new`], with `classes` classes (some may have no flows).
    pub fn with_classes(class_of: Vec<u16>, classes: usize) -> Analyzer {
        let classes = classes.max(class_of.iter().map(|&c| c as usize + 1).max().unwrap_or(1));
        Analyzer {
            tag: 0,
            flows: vec![FlowStats::default(); class_of.len()],
            class_of,
            classes: (0..classes)
                .map(|_| ClassStats {
                    received: 0,
                    bytes: 0,
                    latency: (classes <= MAX_CLASS_HISTOGRAMS).then(latency_histogram),
                })
                .collect(),
            latency: latency_histogram(),
            received: 0,
            bytes: 0,
            stale: 0,
            foreign: 0,
        }
    }

    /// Forgets everything counted and accepts frames tagged `tag` from now on.
    pub fn reset(&mut self, tag: u8) {
        self.tag = tag;
        self.flows.fill(FlowStats::default());
        for c in &mut self.classes {
            c.received = 0;
            c.bytes = 0;
            if let Some(h) = &mut c.latency {
                h.reset();
            }
        }
        self.latency.reset();
        self.received = 0;
        self.bytes = 0;
        self.stale = 0;
        self.foreign = 0;
    }

    /// Receives one burst from `port` into `batch` (cleared first) and accounts it; returns
    /// the number of frames received, counted or not.
    #[inline]
    pub fn recv(&mut self, port: &mut dyn Port, batch: &mut Batch, clock: &Clock) -> usize {
        batch.clear();
        let n = port.rx_burst(batch);
        if n > 0 {
            let now = clock.now_ns();
            let pkts = batch.packets();
            // Each frame was last written on another CPU: ask for the next frames' headers
            // (and stamps, up to 64 bytes further) while accounting this one.
            const AHEAD: usize = 4;
            for p in pkts.iter().take(AHEAD) {
                let f = p.frame().as_ptr();
                crate::prefetch(f, false);
                crate::prefetch(f.wrapping_add(63), false);
            }
            for (i, p) in pkts.iter().enumerate() {
                if let Some(q) = pkts.get(i + AHEAD) {
                    let f = q.frame().as_ptr();
                    crate::prefetch(f, false);
                    crate::prefetch(f.wrapping_add(63), false);
                }
                self.account(p.frame(), now);
            }
        }
        n
    }

    /// Accounts one frame received at `now`.
    #[inline]
    pub fn account(&mut self, f: &[u8], now: u64) {
        let Some((_, at)) = frames::udp_payload_offset(f) else {
            self.foreign += 1;
            return;
        };
        let Some(s) = f.get(at..at + frames::STAMP_LEN) else {
            self.foreign += 1;
            return;
        };
        let word = u64::from_be_bytes(s[0..8].try_into().expect("8 bytes"));
        let lo = u16::from_be_bytes([s[FLOW_OFFSET], s[FLOW_OFFSET + 1]]);
        let flow = frames::flow_of(word, lo) as usize;
        if flow >= self.flows.len() {
            self.foreign += 1;
            return;
        }
        if (word >> TAG_SHIFT) as u8 != self.tag {
            self.stale += 1;
            return;
        }
        let st = &mut self.flows[flow];
        if !st.see(word & SEQ_MASK) {
            return;
        }
        let c = &mut self.classes[self.class_of[flow] as usize];
        c.received += 1;
        c.bytes += f.len() as u64;
        self.received += 1;
        self.bytes += f.len() as u64;
        let tx = u64::from_be_bytes(s[TS_OFFSET..TS_OFFSET + 8].try_into().expect("8 bytes"));
        if tx == 0 {
            // Sent without a time (replay): counted, no latency.
            return;
        }
        let lat = now.saturating_sub(tx);
        st.latency_sum_ns += lat;
        st.latency_max_ns = st.latency_max_ns.max(lat);
        st.latency_min_ns = if st.received == 1 { lat } else { st.latency_min_ns.min(lat) };
        let v = lat.max(1);
        // One record a frame: the overall histogram is the classes' merged when asked for
        // (two records were a fifth of the generator-and-sink thread's time at 64 B).
        match &mut self.classes[self.class_of[flow] as usize].latency {
            Some(h) => h.saturating_record(v),
            None => self.latency.saturating_record(v),
        }
    }

    /// Distinct frames of the current tag received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Their bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Frames of another tag (warm-up traffic, an earlier trial's stragglers).
    pub fn stale(&self) -> u64 {
        self.stale
    }

    /// Frames that were not test frames (not UDP, no full stamp, unknown flow).
    pub fn foreign(&self) -> u64 {
        self.foreign
    }

    /// Per-flow counts, by flow id.
    pub fn flows(&self) -> &[FlowStats] {
        &self.flows
    }

    /// Per-class counts.
    pub fn classes(&self) -> &[ClassStats] {
        &self.classes
    }

    /// The class of each flow.
    pub fn class_of(&self) -> &[u16] {
        &self.class_of
    }

    /// Latency of every counted frame, nanoseconds: the classes' histograms merged (with
    /// more than [`MAX_CLASS_HISTOGRAMS`] classes, the one the frames were recorded in).
    pub fn latency(&self) -> Histogram<u64> {
        let mut all = self.latency.clone();
        for h in self.classes.iter().filter_map(|c| c.latency.as_ref()) {
            all.add(h).expect("histograms of the same bounds add");
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One small UDP frame; the generator stamps flow, class and tag into copies of it, so
    /// the tests that send through an analyzer all start from this one.
    fn test_frame() -> Vec<u8> {
        use crate::frames::{udp_frame, UdpFlow};
        udp_frame(&UdpFlow {
            src_mac: wire::MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: wire::MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: None,
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            ttl: 64,
            size: 60,
        })
    }

    #[test]
    fn sequence_accounting_tells_gaps_reorders_and_duplicates() {
        let mut f = FlowStats::default();
        for s in [0, 1, 2, 5, 4, 4, 6, 3, 200, 100, 7] {
            f.see(s);
        }
        // Distinct: 0..=7, 100, 200 = 10; 4 twice; 4 and 3 arrived after 5, 100 after 200 (too
        // far back to tell), 7 after 200.
        assert_eq!(f.received, 10);
        assert_eq!(f.duplicates, 1);
        assert_eq!(f.reordered, 4);
        assert_eq!(f.beyond_window, 2);
        assert_eq!(f.next, 201);
        assert_eq!(f.gaps(), 191);
    }

    #[test]
    fn flow_ids_beyond_16_bits_round_trip() {
        use crate::frames::{read_stamp, MAX_FLOW_ID};
        use crate::gen::{GenFrame, Generator};
        let frame = test_frame();
        // Flows 65,536 and the largest id share their low 16 bits with flows 0 and 65,535.
        let ids = [0u32, 65_535, 65_536, MAX_FLOW_ID];
        let frames =
            ids.iter().map(|&flow| GenFrame { frame: frame.clone(), flow, class: 0 }).collect();
        let (mut a, mut b) = ports::mem::pair("a", "b", 64);
        let mut g = Generator::with_flows(frames);
        let clock = Clock::new();
        let mut class_of = vec![0u16; MAX_FLOW_ID as usize + 1];
        class_of[65_536] = 1;
        let mut an = Analyzer::new(class_of);
        let (mut tx, mut rx) = (Batch::new(64), Batch::new(64));
        an.reset(3);
        g.set_tag(3);
        g.send_timed(&mut a, &mut tx, 8, &clock);
        assert_eq!(an.recv(&mut b, &mut rx, &clock), 8);
        let seen: Vec<u32> =
            rx.packets().iter().map(|p| read_stamp(p.frame()).unwrap().flow).collect();
        assert_eq!(seen, [0, 65_535, 65_536, MAX_FLOW_ID, 0, 65_535, 65_536, MAX_FLOW_ID]);
        for &f in &ids {
            assert_eq!(an.flows()[f as usize].received, 2, "flow {f}");
        }
        assert_eq!(an.classes()[1].received, 2);
        assert_eq!((an.received(), an.foreign(), an.stale()), (8, 0, 0));
    }

    #[test]
    fn counts_only_the_current_tag_and_known_flows() {
        use crate::gen::{GenFrame, Generator};
        let frame = test_frame();
        let frames = vec![
            GenFrame { frame: frame.clone(), flow: 0, class: 0 },
            GenFrame { frame: frame.clone(), flow: 1, class: 1 },
            GenFrame { frame, flow: 5, class: 1 },
        ];
        let (mut a, mut b) = ports::mem::pair("a", "b", 64);
        let mut g = Generator::with_flows(frames);
        let clock = Clock::new();
        let mut an = Analyzer::new(vec![0, 1]);
        let (mut tx, mut rx) = (Batch::new(64), Batch::new(64));
        g.set_tag(1);
        g.send_timed(&mut a, &mut tx, 3, &clock);
        an.reset(2);
        g.set_tag(2);
        g.reset_counts();
        g.send_timed(&mut a, &mut tx, 6, &clock);
        assert_eq!(an.recv(&mut b, &mut rx, &clock), 9);
        assert_eq!(an.stale(), 2, "tag 1, flows 0 and 1");
        assert_eq!(an.foreign(), 3, "flow 5 is not known");
        assert_eq!(an.received(), 4);
        assert_eq!(an.classes()[0].received, 2);
        assert_eq!(an.classes()[1].received, 2);
        assert_eq!(an.flows()[0].next, 2);
        assert_eq!(an.latency().len(), 4);
    }

    /// Frames of `classes` classes (one flow each), with latencies 1..=n µs, accounted at
    /// once: the overall histogram has them all, whether the classes keep histograms or not.
    fn overall_after(classes: usize, n: u64) -> (Analyzer, Histogram<u64>) {
        let frame = test_frame();
        let (_, at) = frames::udp_payload_offset(&frame).unwrap();
        let mut an = Analyzer::new((0..classes as u16).collect());
        an.reset(3);
        let mut want = latency_histogram();
        for i in 0..n {
            let mut f = frame.clone();
            let flow = i % classes as u64;
            let word = (3u64 << TAG_SHIFT) | (i / classes as u64);
            f[at..at + 8].copy_from_slice(&word.to_be_bytes());
            f[at + FLOW_OFFSET..at + FLOW_OFFSET + 2].copy_from_slice(&(flow as u16).to_be_bytes());
            f[at + TS_OFFSET..at + TS_OFFSET + 8].copy_from_slice(&1_000_000u64.to_be_bytes());
            an.account(&f, 1_000_000 + (i + 1) * 1000);
            want.record((i + 1) * 1000).unwrap();
        }
        (an, want)
    }

    #[test]
    fn the_overall_latency_is_every_frames_once_with_or_without_class_histograms() {
        for classes in [1, 2, 16, MAX_CLASS_HISTOGRAMS + 1] {
            let (an, want) = overall_after(classes, 300);
            assert_eq!(an.received(), 300, "{classes} classes");
            let all = an.latency();
            assert_eq!(all.len(), 300, "{classes} classes");
            for q in [0.0, 0.5, 0.99, 1.0] {
                assert_eq!(all.value_at_quantile(q), want.value_at_quantile(q), "{classes}: {q}");
            }
            let per_class: u64 =
                an.classes().iter().filter_map(|c| c.latency.as_ref()).map(|h| h.len()).sum();
            let kept = classes <= MAX_CLASS_HISTOGRAMS;
            assert_eq!(per_class, if kept { 300 } else { 0 }, "{classes} classes");
        }
    }
}
