//! Generator and sink.

use ports::{Batch, Port};
use wire::udp;

use crate::clock::Clock;
use crate::frames::{self, FLOW_OFFSET, SEQ_BITS, STAMP_LEN, TS_OFFSET};

/// One prepared frame of a generator's rotation.
#[derive(Clone, Debug)]
pub struct GenFrame {
    /// The frame, as built by [`frames::udp_frame`] (stamp fields zero).
    pub frame: Vec<u8>,
    /// Its flow: frames of one flow share a sequence-number space.
    pub flow: u16,
    /// Its class (for example the VR it is addressed to), for per-class counts.
    pub class: u16,
}

/// How much of the stamp a frame has room for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Room {
    None,
    Seq,
    Full,
}

/// Where a frame's stamp goes.
#[derive(Clone, Copy)]
struct Place {
    /// Offset of the UDP header.
    l4: u32,
    room: Room,
    /// Whether the frame has a UDP checksum to keep right.
    fix_ck: bool,
}

/// Offers prepared frames to a port, round robin, stamping each with its flow's sequence
/// number and, when sent with [`Generator::send_timed`], a TX timestamp.
///
/// Counts are of what a port accepted: a refused frame gives its sequence number back, so the
/// sequence numbers a sink sees are exactly `0..sent` per flow when nothing is lost. Sending
/// neither allocates nor formats.
pub struct Generator {
    frames: Vec<Vec<u8>>,
    class: Vec<u16>,
    flow: Vec<u16>,
    place: Vec<Place>,
    next: usize,
    /// Per flow id: the next sequence number, which is also how many frames were accepted.
    seq: Vec<u64>,
    /// The trial tag, already shifted into the top bits of the sequence word.
    tag: u64,
    total: u64,
    offered: Vec<u64>,
    sel: Vec<u16>,
}

impl Generator {
    /// A generator over `(frame, class)` pairs that stamps them; each pair is its own flow
    /// (flow id = index, modulo 65536).
    pub fn new(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(Self::indexed(frames), true)
    }

    /// A generator that sends the frames as they are, without stamps: less work per frame,
    /// for runs that only count.
    pub fn unstamped(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(Self::indexed(frames), false)
    }

    /// A stamping generator over frames with explicit flows and classes.
    pub fn with_flows(frames: Vec<GenFrame>) -> Generator {
        Self::build(frames, true)
    }

    fn indexed(frames: Vec<(Vec<u8>, u16)>) -> Vec<GenFrame> {
        frames
            .into_iter()
            .enumerate()
            .map(|(i, (frame, class))| GenFrame { frame, flow: i as u16, class })
            .collect()
    }

    fn build(frames: Vec<GenFrame>, stamped: bool) -> Generator {
        assert!(!frames.is_empty(), "a generator needs at least one frame");
        let classes = frames.iter().map(|f| f.class as usize + 1).max().unwrap_or(1);
        let flows = frames.iter().map(|f| f.flow as usize + 1).max().unwrap_or(1);
        let mut out = Generator {
            frames: Vec::with_capacity(frames.len()),
            class: Vec::with_capacity(frames.len()),
            flow: Vec::with_capacity(frames.len()),
            place: Vec::with_capacity(frames.len()),
            next: 0,
            seq: vec![0; flows],
            tag: 0,
            total: 0,
            offered: vec![0; classes],
            sel: (0..ports::MAX_BURST as u16).collect(),
        };
        for GenFrame { mut frame, flow, class } in frames {
            let place = if stamped { prepare(&mut frame, flow) } else { None };
            out.place.push(place.unwrap_or(Place { l4: 0, room: Room::None, fix_ck: false }));
            out.frames.push(frame);
            out.class.push(class);
            out.flow.push(flow);
        }
        out
    }

    /// Sets the trial tag stamped into the top bits of every sequence word from now on.
    pub fn set_tag(&mut self, tag: u8) {
        self.tag = (tag as u64) << SEQ_BITS;
    }

    /// Starts counting afresh: sequence numbers restart at 0 and counts at zero; the rotation
    /// goes on where it was.
    pub fn reset_counts(&mut self) {
        self.seq.fill(0);
        self.offered.fill(0);
        self.total = 0;
    }

    /// Copies up to `n` frames into `batch`'s spare slots and stamps their sequence numbers
    /// (and `tx_ns`, if given), without sending them or consuming sequence numbers. Returns how
    /// many it copied.
    pub fn fill(&mut self, batch: &mut Batch, n: usize, tx_ns: Option<u64>) -> usize {
        let start = batch.len();
        let k = self.fill_tentative(batch, n);
        match tx_ns {
            Some(ts) => self.stamp_time(batch, start, ts),
            None => self.fix_checksums(batch, start),
        }
        self.give_back(0, k);
        k
    }

    /// Copies frames and stamps sequence numbers, consuming them; [`Self::give_back`] returns
    /// those of frames the port refuses.
    fn fill_tentative(&mut self, batch: &mut Batch, n: usize) -> usize {
        let start = batch.len();
        let len = self.frames.len();
        // The spare buffers came back from the DUT's CPU: ask for them, for writing, before
        // copying into the first.
        let end = (start + n).min(batch.capacity());
        for b in &mut batch.slots_mut()[start..end] {
            let (data, _) = b.storage_mut();
            let p = data.as_ptr().wrapping_add(ports::HEADROOM);
            crate::prefetch(p, true);
            crate::prefetch(p.wrapping_add(63), true);
        }
        let mut k = 0;
        let mut i = self.next;
        while k < n {
            let Some(buf) = batch.spare_mut() else { break };
            buf.fill(&self.frames[i]);
            let p = self.place[i];
            if p.room != Room::None {
                let f = self.flow[i] as usize;
                let word = self.tag | self.seq[f];
                self.seq[f] += 1;
                stamp_seq(buf.frame_mut(), p, word);
            }
            batch.commit();
            k += 1;
            i += 1;
            if i == len {
                i = 0;
            }
        }
        debug_assert_eq!(batch.len(), start + k);
        k
    }

    /// Rotation position `next + j`.
    #[inline]
    fn pos(&self, j: usize) -> usize {
        let i = self.next + j;
        if i >= self.frames.len() {
            i % self.frames.len()
        } else {
            i
        }
    }

    /// Gives back the sequence numbers of rotation positions `next + from .. next + to`.
    fn give_back(&mut self, from: usize, to: usize) {
        let len = self.frames.len();
        let mut i = self.pos(from);
        for _ in from..to {
            if self.place[i].room != Room::None {
                self.seq[self.flow[i] as usize] -= 1;
            }
            i += 1;
            if i == len {
                i = 0;
            }
        }
    }

    /// Writes the TX timestamp into every packet of `batch` that has room for it and brings the
    /// UDP checksum up to date for the sequence word and the timestamp together.
    fn stamp_time(&mut self, batch: &mut Batch, start: usize, ts: u64) {
        let len = self.frames.len();
        let mut i = self.next;
        for pkt in batch.packets_mut()[start..].iter_mut() {
            let p = self.place[i];
            if p.room == Room::Full {
                stamp_ts(pkt.frame_mut(), p, ts);
            } else if p.room == Room::Seq {
                fix_seq_checksum(pkt.frame_mut(), p);
            }
            i += 1;
            if i == len {
                i = 0;
            }
        }
    }

    fn fix_checksums(&mut self, batch: &mut Batch, start: usize) {
        let len = self.frames.len();
        let mut i = self.next;
        for pkt in batch.packets_mut()[start..].iter_mut() {
            let p = self.place[i];
            if p.room != Room::None {
                fix_seq_checksum(pkt.frame_mut(), p);
            }
            i += 1;
            if i == len {
                i = 0;
            }
        }
    }

    /// Fills `batch` (cleared first) with up to `burst` stamped frames (TX timestamp 0) and
    /// transmits them; returns how many the port accepted. Frames it refused are offered again
    /// next time, with the same sequence numbers.
    pub fn send(&mut self, port: &mut dyn Port, batch: &mut Batch, burst: usize) -> usize {
        batch.clear();
        let n = self.fill_tentative(batch, burst.min(self.sel.len()));
        self.fix_checksums(batch, 0);
        self.transmit(port, batch, n)
    }

    /// As [`Generator::send`], stamping every frame with the time read from `clock` once the
    /// burst is built, just before it is handed to the port.
    pub fn send_timed(
        &mut self,
        port: &mut dyn Port,
        batch: &mut Batch,
        burst: usize,
        clock: &Clock,
    ) -> usize {
        batch.clear();
        let n = self.fill_tentative(batch, burst.min(self.sel.len()));
        self.stamp_time(batch, 0, clock.now_ns());
        self.transmit(port, batch, n)
    }

    fn transmit(&mut self, port: &mut dyn Port, batch: &mut Batch, n: usize) -> usize {
        let k = port.tx_burst(batch, &self.sel[..n]);
        self.give_back(k, n);
        let len = self.frames.len();
        let mut i = self.next;
        for _ in 0..k {
            self.offered[self.class[i] as usize] += 1;
            i += 1;
            if i == len {
                i = 0;
            }
        }
        self.next = i;
        self.total += k as u64;
        k
    }

    /// Frames accepted since the last [`Generator::reset_counts`], per class.
    pub fn offered(&self) -> &[u64] {
        &self.offered
    }

    /// Frames accepted since the last [`Generator::reset_counts`].
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Stamped frames accepted since the last [`Generator::reset_counts`], per flow id.
    pub fn flow_sent(&self) -> &[u64] {
        &self.seq
    }

    /// Frames in the rotation.
    pub fn rotation_len(&self) -> usize {
        self.frames.len()
    }
}

/// Where `f`'s stamp goes; zeroes the stamp fields, writes the flow id, and brings the UDP
/// checksum up to date, so that stamping later only adds words.
fn prepare(f: &mut [u8], flow: u16) -> Option<Place> {
    let (l4, at) = frames::udp_payload_offset(f)?;
    let room = match f.len() - at {
        n if n >= STAMP_LEN => Room::Full,
        n if n >= 8 => Room::Seq,
        _ => return None,
    };
    let fix_ck = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]) != 0;
    let end = at + if room == Room::Full { STAMP_LEN } else { 8 };
    let mut ck = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
    for w in (at..end).step_by(2) {
        let old = u16::from_be_bytes([f[w], f[w + 1]]);
        let new = if room == Room::Full && w == at + FLOW_OFFSET { flow } else { 0 };
        f[w..w + 2].copy_from_slice(&new.to_be_bytes());
        // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m').
        ck = !wire::checksum::combine(&[!ck, !old, new]);
    }
    if fix_ck {
        f[l4 + 6..l4 + 8].copy_from_slice(&nonzero(ck).to_be_bytes());
    }
    Some(Place { l4: l4 as u32, room, fix_ck })
}

/// A zero UDP checksum means "none" over IPv4 and is invalid over IPv6; 0xffff is the same
/// value in ones' complement.
#[inline]
fn nonzero(ck: u16) -> u16 {
    if ck == 0 {
        0xffff
    } else {
        ck
    }
}

/// Sum of the four 16-bit words of `v`, unfolded.
#[inline]
fn words(v: u64) -> u64 {
    (v >> 48) + (v >> 32 & 0xffff) + (v >> 16 & 0xffff) + (v & 0xffff)
}

#[inline]
fn payload_at(p: Place) -> usize {
    p.l4 as usize + udp::HEADER_LEN
}

/// Writes the sequence word; the checksum is fixed afterwards.
#[inline]
fn stamp_seq(f: &mut [u8], p: Place, word: u64) {
    let at = payload_at(p) + frames::SEQ_OFFSET;
    f[at..at + 8].copy_from_slice(&word.to_be_bytes());
}

/// Adds `sum` (of words that replaced zeros) to the UDP checksum: RFC 1624 with m = 0,
/// HC' = ~(~HC + m'), one fold.
#[inline]
fn add_to_checksum(f: &mut [u8], p: Place, sum: u64) {
    if p.fix_ck {
        let l4 = p.l4 as usize;
        let ck = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
        let ck = !wire::checksum::combine(&[!ck, (sum >> 16) as u16, sum as u16]);
        f[l4 + 6..l4 + 8].copy_from_slice(&nonzero(ck).to_be_bytes());
    }
}

#[inline]
fn fix_seq_checksum(f: &mut [u8], p: Place) {
    let at = payload_at(p) + frames::SEQ_OFFSET;
    let word = u64::from_be_bytes(f[at..at + 8].try_into().expect("8 bytes"));
    add_to_checksum(f, p, words(word));
}

/// Writes the timestamp and fixes the checksum for it and the sequence word in one fold.
#[inline]
fn stamp_ts(f: &mut [u8], p: Place, ts: u64) {
    let at = payload_at(p);
    f[at + TS_OFFSET..at + TS_OFFSET + 8].copy_from_slice(&ts.to_be_bytes());
    let word = u64::from_be_bytes(f[at..at + 8].try_into().expect("8 bytes"));
    add_to_checksum(f, p, words(word) + words(ts));
}

/// Counts what a port delivers.
#[derive(Default)]
pub struct Sink {
    packets: u64,
    bytes: u64,
}

impl Sink {
    /// Receives one burst into `batch` (cleared first) and counts it.
    pub fn recv(&mut self, port: &mut dyn Port, batch: &mut Batch) -> usize {
        batch.clear();
        let n = port.rx_burst(batch);
        self.packets += n as u64;
        self.bytes += batch.packets().iter().map(|b| b.len() as u64).sum::<u64>();
        n
    }

    /// Frames received.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{read_stamp, seq, udp_frame, UdpFlow, SEQ_MASK};
    use wire::MacAddr;

    fn flow(dst: &str, size: usize, vlan: Option<u16>) -> Vec<u8> {
        let v6 = dst.contains(':');
        udp_frame(&UdpFlow {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan,
            src: if v6 { "2001:db8::1".parse().unwrap() } else { "10.0.0.1".parse().unwrap() },
            dst: dst.parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            ttl: 64,
            size,
        })
    }

    /// The UDP checksum of `frame` as an independent parser computes it, and the one it carries.
    fn checksums(frame: &[u8]) -> (u16, u16) {
        let s = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = s.transport else { panic!("not udp") };
        let ck = match s.net {
            Some(etherparse::NetSlice::Ipv4(ip)) => {
                u.to_header().calc_checksum_ipv4(&ip.header().to_header(), u.payload()).unwrap()
            }
            Some(etherparse::NetSlice::Ipv6(ip)) => {
                u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap()
            }
            _ => unreachable!(),
        };
        (ck, u.checksum())
    }

    #[test]
    fn sends_round_robin_stamps_per_flow_and_counts_accepted_only() {
        let (mut a, mut b) = ports::mem::pair("gen", "dut", 4);
        let mut g = Generator::new(vec![
            (flow("10.0.0.2", 60, None), 0),
            (flow("2001:db8::2", 60, None), 1),
            (flow("10.0.0.3", 60, None), 1),
        ]);
        let mut batch = Batch::new(8);
        assert_eq!(g.send(&mut a, &mut batch, 8), 4, "ring of 4");
        assert_eq!(g.offered(), &[2, 2]);
        assert_eq!(g.flow_sent(), &[2, 1, 1]);
        let mut rx = Batch::new(8);
        let mut sink = Sink::default();
        assert_eq!(sink.recv(&mut b, &mut rx), 4);
        // Flows 0, 1, 2, 0: each flow counts on its own.
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [0, 0, 0, 1]);
        for p in rx.packets() {
            let (want, got) = checksums(p.frame());
            assert_eq!(want, got);
        }
        // The 4 frames refused last time go first now, with the sequence numbers they had.
        assert_eq!(g.send(&mut a, &mut batch, 8), 4);
        assert_eq!(g.total(), 8);
        assert_eq!(sink.packets(), 4);
        rx.clear();
        sink.recv(&mut b, &mut rx);
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [1, 1, 2, 2]);
    }

    #[test]
    fn timed_stamps_keep_udp_checksums_valid() {
        // IPv4 and IPv6, tagged and untagged, 64 bytes (full stamp over untagged IPv4, sequence
        // only where the headers leave less than 18 bytes) up to 1518.
        let frames = vec![
            GenFrame { frame: flow("10.0.0.2", 60, None), flow: 7, class: 0 },
            GenFrame { frame: flow("10.0.0.2", 60, Some(5)), flow: 8, class: 0 },
            GenFrame { frame: flow("2001:db8::2", 60, None), flow: 9, class: 1 },
            GenFrame { frame: flow("2001:db8::2", 84, Some(3)), flow: 10, class: 1 },
            GenFrame { frame: flow("10.0.0.9", 1514, None), flow: 65535, class: 2 },
        ];
        let (mut a, mut b) = ports::mem::pair("gen", "dut", 1024);
        let mut g = Generator::with_flows(frames);
        g.set_tag(0xa5);
        let clock = Clock::new();
        let mut batch = Batch::new(256);
        let mut rx = Batch::new(256);
        let mut seen = 0;
        // Sequence numbers and timestamps with every bit pattern in the low words.
        for round in 0..200u64 {
            let t_before = clock.now_ns();
            let n = g.send_timed(&mut a, &mut batch, 1 + (round % 7) as usize, &clock);
            rx.clear();
            assert_eq!(b.rx_burst(&mut rx), n);
            for p in rx.packets() {
                let (want, got) = checksums(p.frame());
                assert_eq!(want, got, "checksum after stamping");
                if let Some(s) = read_stamp(p.frame()) {
                    assert_eq!(s.tag, 0xa5);
                    assert!(s.tx_ns >= t_before && s.tx_ns <= clock.now_ns());
                    assert!([7, 8, 10, 65535].contains(&s.flow), "flow {}", s.flow);
                    seen += 1;
                } else {
                    // The 70-byte IPv6 frame and the 60-byte tagged IPv4 one have room for the
                    // sequence word only (8 and 14 payload bytes).
                    assert!([60, 70].contains(&p.len()), "{}", p.len());
                    assert_eq!(seq(p.frame()).unwrap() >> 56, 0xa5);
                }
            }
        }
        assert!(seen > 0);
        assert_eq!(g.flow_sent().iter().sum::<u64>(), g.total());
        // Large sequence numbers too: all 56 bits.
        g.seq.fill(SEQ_MASK - 3);
        for _ in 0..4 {
            let n = g.send_timed(&mut a, &mut batch, 5, &clock);
            rx.clear();
            assert_eq!(b.rx_burst(&mut rx), n);
            for p in rx.packets() {
                let (want, got) = checksums(p.frame());
                assert_eq!(want, got);
            }
        }
    }
}
