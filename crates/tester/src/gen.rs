//! Generator and sink.

use ports::{Batch, Port};
use wire::udp;

use crate::clock::Clock;
use crate::frames::{self, FLOW_OFFSET, STAMP_LEN, TS_OFFSET};

/// One prepared frame of a generator's rotation.
#[derive(Clone, Debug)]
pub struct GenFrame {
    /// The frame, as built by [`frames::udp_frame`] (stamp fields zero).
    pub frame: Vec<u8>,
    /// Its flow (20 bits, see [`frames::MAX_FLOW_ID`]): frames of one flow share a
    /// sequence-number space.
    pub flow: u32,
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

/// A lane: frames `first..first + count` of the generator, sent in turn whenever a slot of
/// the rotation names the lane.
#[derive(Clone, Copy, Debug)]
struct Lane {
    first: u32,
    count: u32,
    cursor: u32,
}

/// Offers prepared frames to a port, stamping each with its flow's sequence number and, when
/// sent with [`Generator::send_timed`], a TX timestamp.
///
/// The frames are grouped in *lanes* (say, one per class), and a rotation of *slots* says
/// which lane sends next: a lane named in 3 slots of 4 gets three quarters of the frames, and
/// within a lane the frames take turns. The plain constructors make one lane of all frames,
/// sent round robin in the order given.
///
/// Counts are of what a port accepted: a refused frame gives its sequence number and its turn
/// back, so the sequence numbers a sink sees are exactly `0..sent` per flow when nothing is
/// lost. [`Generator::send`] does not even give them back: the frames a full ring refused stay
/// built at the front of the caller's batch and go first on the next call (a generator facing
/// a full ring would otherwise rebuild a whole burst per call to send a few frames). Sending neither allocates nor formats. Frames live back to back in one buffer, so a
/// million flows cost their bytes and a few words each, not a million allocations.
pub struct Generator {
    data: Vec<u8>,
    off: Vec<u32>,
    len: Vec<u16>,
    place: Vec<Place>,
    class: Vec<u16>,
    /// Per frame: its flow's index in `seq` (this generator's own numbering of its flows).
    local: Vec<u32>,
    /// Per frame: the flow id's high bits, in place in the sequence word.
    hi: Vec<u64>,
    lanes: Vec<Lane>,
    /// Per slot: the lane that sends.
    slots: Vec<u32>,
    /// The next slot.
    next: usize,
    /// Per local flow: the next sequence number (frames accepted plus those held).
    seq: Vec<u64>,
    /// Per local flow: stamped frames the port accepted.
    sent: Vec<u64>,
    /// Per local flow: its flow id.
    flow_ids: Vec<u32>,
    /// The trial tag, already shifted into the top bits of the sequence word.
    tag: u64,
    total: u64,
    offered: Vec<u64>,
    sel: Vec<u16>,
    /// Per position of the burst being built: the frame sent there.
    burst: Vec<u32>,
    /// Frames [`Generator::send`] built that the port refused: kept, stamped, in slots
    /// `0..held` of the caller's batch (their sequence numbers and turns still taken).
    held: usize,
    /// Frames copied into batches so far (what refused frames cost when they are rebuilt).
    built: u64,
    /// Address of the first held frame's buffer: tells whether the batch handed in next is
    /// still the one holding them.
    held_at: usize,
}

impl Generator {
    /// A generator over `(frame, class)` pairs that stamps them; each pair is its own flow
    /// (flow id = index, modulo 2^20).
    pub fn new(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(vec![Self::indexed(frames)], vec![0], true)
    }

    /// A generator that sends the frames as they are, without stamps: less work per frame,
    /// for runs that only count.
    pub fn unstamped(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(vec![Self::indexed(frames)], vec![0], false)
    }

    /// A stamping generator over frames with explicit flows and classes, sent round robin.
    pub fn with_flows(frames: Vec<GenFrame>) -> Generator {
        Self::build(vec![frames], vec![0], true)
    }

    /// A stamping generator over lanes of frames and a rotation of slots naming the lane that
    /// sends next (each slot `< lanes.len()`; every lane non-empty). Panics otherwise.
    pub fn with_lanes(lanes: Vec<Vec<GenFrame>>, slots: Vec<u32>) -> Generator {
        Self::build(lanes, slots, true)
    }

    fn indexed(frames: Vec<(Vec<u8>, u16)>) -> Vec<GenFrame> {
        frames
            .into_iter()
            .enumerate()
            .map(|(i, (frame, class))| GenFrame {
                frame,
                flow: i as u32 & frames::MAX_FLOW_ID,
                class,
            })
            .collect()
    }

    fn build(lanes: Vec<Vec<GenFrame>>, slots: Vec<u32>, stamped: bool) -> Generator {
        let n: usize = lanes.iter().map(Vec::len).sum();
        assert!(n > 0, "a generator needs at least one frame");
        assert!(!slots.is_empty(), "a generator needs at least one slot");
        assert!(
            lanes.iter().all(|l| !l.is_empty())
                && slots.iter().all(|&s| (s as usize) < lanes.len()),
            "every lane needs a frame and every slot a lane"
        );
        let bytes: usize = lanes.iter().flatten().map(|f| f.frame.len()).sum();
        assert!(bytes <= u32::MAX as usize, "at most 4 GiB of frames");
        let classes = lanes.iter().flatten().map(|f| f.class as usize + 1).max().unwrap_or(1);
        let mut out = Generator {
            data: Vec::with_capacity(bytes),
            off: Vec::with_capacity(n),
            len: Vec::with_capacity(n),
            place: Vec::with_capacity(n),
            class: Vec::with_capacity(n),
            local: Vec::with_capacity(n),
            hi: Vec::with_capacity(n),
            lanes: Vec::with_capacity(lanes.len()),
            slots,
            next: 0,
            seq: Vec::new(),
            sent: Vec::new(),
            flow_ids: Vec::new(),
            tag: 0,
            total: 0,
            offered: vec![0; classes],
            sel: (0..ports::MAX_BURST as u16).collect(),
            burst: vec![0; ports::MAX_BURST],
            held: 0,
            built: 0,
            held_at: 0,
        };
        let mut local_of: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for lane in lanes {
            let first = out.off.len() as u32;
            out.lanes.push(Lane { first, count: lane.len() as u32, cursor: 0 });
            for GenFrame { mut frame, flow, class } in lane {
                let flow = flow & frames::MAX_FLOW_ID;
                let place = if stamped { prepare(&mut frame, flow) } else { None };
                out.place.push(place.unwrap_or(Place { l4: 0, room: Room::None, fix_ck: false }));
                out.off.push(out.data.len() as u32);
                out.len.push(frame.len() as u16);
                out.data.extend_from_slice(&frame);
                out.class.push(class);
                out.hi.push(frames::flow_hi_bits(flow));
                let next_local = local_of.len() as u32;
                let l = *local_of.entry(flow).or_insert(next_local);
                if l == next_local {
                    out.flow_ids.push(flow);
                }
                out.local.push(l);
            }
        }
        out.seq = vec![0; out.flow_ids.len()];
        out.sent = vec![0; out.flow_ids.len()];
        out
    }

    /// Sets the trial tag stamped into the top bits of every sequence word from now on.
    pub fn set_tag(&mut self, tag: u8) {
        self.tag = (tag as u64) << frames::TAG_SHIFT;
    }

    /// Starts counting afresh: sequence numbers restart at 0 and counts at zero; the rotation
    /// goes on where it was.
    pub fn reset_counts(&mut self) {
        self.release_held();
        self.seq.fill(0);
        self.sent.fill(0);
        self.offered.fill(0);
        self.total = 0;
    }

    /// Copies up to `n` frames into `batch`'s spare slots and stamps their sequence numbers
    /// (and `tx_ns`, if given), without sending them or consuming sequence numbers. Returns how
    /// many it copied.
    pub fn fill(&mut self, batch: &mut Batch, n: usize, tx_ns: Option<u64>) -> usize {
        self.release_held();
        let start = batch.len();
        let k = self.fill_tentative(batch, n.min(self.burst.len()), 0);
        match tx_ns {
            Some(ts) => self.stamp_time(batch, start, 0, ts),
            None => self.fix_checksums(batch, start, 0),
        }
        self.give_back(0, k);
        k
    }

    /// Gives back the sequence numbers and turns of the frames [`Generator::send`] holds for
    /// its next call, and forgets them (the batch that holds them is the caller's to clear).
    pub fn release_held(&mut self) {
        if self.held > 0 {
            self.give_back(0, self.held);
            self.held = 0;
        }
    }

    /// Frames copied into batches since the generator was made.
    pub fn frames_built(&self) -> u64 {
        self.built
    }

    /// Frames built and stamped that the port refused last time, waiting in the batch.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether `batch` is the one holding this generator's held frames, unchanged.
    fn holds(&self, batch: &Batch) -> bool {
        self.held > 0
            && batch.len() == self.held
            && batch.get(0).frame().as_ptr() as usize == self.held_at
    }

    /// Copies frames and stamps sequence numbers, consuming them and their turns;
    /// [`Self::give_back`] returns those of frames the port refuses. `n <= MAX_BURST`; the
    /// frames are recorded from burst position `at` on (`at + n <= MAX_BURST`).
    fn fill_tentative(&mut self, batch: &mut Batch, n: usize, at: usize) -> usize {
        let start = batch.len();
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
        let mut s = self.next;
        let slots = self.slots.len();
        while k < n {
            let Some(buf) = batch.spare_mut() else { break };
            let lane = &mut self.lanes[self.slots[s] as usize];
            let i = (lane.first + lane.cursor) as usize;
            lane.cursor += 1;
            if lane.cursor == lane.count {
                lane.cursor = 0;
            }
            let off = self.off[i] as usize;
            buf.fill(&self.data[off..off + self.len[i] as usize]);
            let p = self.place[i];
            if p.room != Room::None {
                let f = self.local[i] as usize;
                let word = self.tag | self.hi[i] | self.seq[f];
                self.seq[f] += 1;
                stamp_seq(buf.frame_mut(), p, word);
            }
            batch.commit();
            self.burst[at + k] = i as u32;
            k += 1;
            s += 1;
            if s == slots {
                s = 0;
            }
        }
        self.next = s;
        self.built += k as u64;
        debug_assert_eq!(batch.len(), start + k);
        k
    }

    /// Gives back the sequence numbers and turns of burst positions `from..to`, the last ones
    /// the burst took (so `to` is the burst's length).
    fn give_back(&mut self, from: usize, to: usize) {
        let slots = self.slots.len();
        for j in (from..to).rev() {
            self.next = if self.next == 0 { slots - 1 } else { self.next - 1 };
            let lane = &mut self.lanes[self.slots[self.next] as usize];
            lane.cursor = if lane.cursor == 0 { lane.count - 1 } else { lane.cursor - 1 };
            let i = self.burst[j] as usize;
            debug_assert_eq!(i, (lane.first + lane.cursor) as usize);
            if self.place[i].room != Room::None {
                self.seq[self.local[i] as usize] -= 1;
            }
        }
    }

    /// Writes the TX timestamp into every packet of `batch` from `start` (burst position
    /// `at`) that has room for it and brings the UDP checksum up to date for the sequence word
    /// and the timestamp together.
    fn stamp_time(&mut self, batch: &mut Batch, start: usize, at: usize, ts: u64) {
        for (j, pkt) in batch.packets_mut()[start..].iter_mut().enumerate() {
            let p = self.place[self.burst[at + j] as usize];
            if p.room == Room::Full {
                stamp_ts(pkt.frame_mut(), p, ts);
            } else if p.room == Room::Seq {
                fix_seq_checksum(pkt.frame_mut(), p);
            }
        }
    }

    fn fix_checksums(&mut self, batch: &mut Batch, start: usize, at: usize) {
        for (j, pkt) in batch.packets_mut()[start..].iter_mut().enumerate() {
            let p = self.place[self.burst[at + j] as usize];
            if p.room != Room::None {
                fix_seq_checksum(pkt.frame_mut(), p);
            }
        }
    }

    /// Offers up to `burst` stamped frames (TX timestamp 0) to `port`; returns how many it
    /// accepted. The frames it refused stay built in `batch` and go first next time, with the
    /// same sequence numbers, when the same batch comes back untouched; any other batch is
    /// cleared first (and the held frames' numbers and turns given back), so a caller that
    /// uses its batch for something else in between loses nothing but the copies.
    pub fn send(&mut self, port: &mut dyn Port, batch: &mut Batch, burst: usize) -> usize {
        if !self.holds(batch) {
            self.release_held();
            batch.clear();
        }
        let burst = burst.min(self.sel.len()).min(batch.capacity());
        let held = batch.len();
        if held < burst {
            let k = self.fill_tentative(batch, burst - held, held);
            self.fix_checksums(batch, held, held);
            debug_assert_eq!(batch.len(), held + k);
        }
        let n = batch.len().min(burst);
        let k = port.tx_burst(batch, &self.sel[..n]);
        self.count(k);
        let left = batch.len() - k;
        if k > 0 && left > 0 {
            // The refused frames move to the front (the taken slots' empty buffers behind
            // them), in order: one rotation of buffer handles, no frame bytes copied.
            let len = batch.len();
            batch.slots_mut()[..len].rotate_left(k);
            self.burst.copy_within(k..len, 0);
        }
        batch.set_len(left);
        self.held = left;
        self.held_at = if left > 0 { batch.get(0).frame().as_ptr() as usize } else { 0 };
        k
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
        self.release_held();
        batch.clear();
        let n = self.fill_tentative(batch, burst.min(self.sel.len()), 0);
        self.stamp_time(batch, 0, 0, clock.now_ns());
        let k = port.tx_burst(batch, &self.sel[..n]);
        self.give_back(k, n);
        self.count(k);
        k
    }

    /// Counts burst positions `0..k` as accepted.
    fn count(&mut self, k: usize) {
        for &i in &self.burst[..k] {
            let i = i as usize;
            self.offered[self.class[i] as usize] += 1;
            if self.place[i].room != Room::None {
                self.sent[self.local[i] as usize] += 1;
            }
        }
        self.total += k as u64;
    }

    /// Frames accepted since the last [`Generator::reset_counts`], per class.
    pub fn offered(&self) -> &[u64] {
        &self.offered
    }

    /// Frames accepted since the last [`Generator::reset_counts`].
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Stamped frames accepted since the last [`Generator::reset_counts`], per flow this
    /// generator sends, in the order of [`Generator::flow_ids`].
    pub fn flow_sent(&self) -> &[u64] {
        &self.sent
    }

    /// The flow ids this generator sends, in the order of [`Generator::flow_sent`] (the order
    /// in which they first appear in the lanes).
    pub fn flow_ids(&self) -> &[u32] {
        &self.flow_ids
    }

    /// Frames the generator holds.
    pub fn rotation_len(&self) -> usize {
        self.off.len()
    }

    /// Slots of the rotation (how many turns before the lanes' shares repeat).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }
}

/// Where `f`'s stamp goes; zeroes the stamp fields, writes the flow id, and brings the UDP
/// checksum up to date, so that stamping later only adds words.
fn prepare(f: &mut [u8], flow: u32) -> Option<Place> {
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
        let new = if room == Room::Full && w == at + FLOW_OFFSET { flow as u16 } else { 0 };
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

    /// A full ring does not make the generator rebuild: what it refused stays built in the
    /// batch and goes first next time, numbered as before; a different batch gets fresh frames
    /// and the held ones' numbers back.
    #[test]
    fn refused_frames_wait_in_the_batch_for_the_next_call() {
        let (mut a, mut b) = ports::mem::pair("gen", "dut", 4);
        let mut g = Generator::new(vec![(flow("10.0.0.2", 60, None), 0)]);
        let mut batch = Batch::new(8);
        assert_eq!(g.send(&mut a, &mut batch, 8), 4);
        assert_eq!((g.held(), batch.len()), (4, 4));
        assert_eq!(g.flow_sent(), &[4], "held frames are not counted as sent");
        assert_eq!(g.frames_built(), 8);
        // The ring is still full: the burst is topped up once, then nothing more is built.
        assert_eq!(g.send(&mut a, &mut batch, 8), 0);
        assert_eq!((g.held(), g.frames_built()), (8, 12));
        for _ in 0..3 {
            assert_eq!(g.send(&mut a, &mut batch, 8), 0);
        }
        assert_eq!((g.held(), g.frames_built()), (8, 12));
        let mut rx = Batch::new(8);
        let mut sink = Sink::default();
        assert_eq!(sink.recv(&mut b, &mut rx), 4);
        // Room for 4: the oldest held ones go, numbered 4..8; 8..12 wait; nothing rebuilt.
        assert_eq!(g.send(&mut a, &mut batch, 8), 4);
        assert_eq!((g.held(), g.frames_built()), (4, 12));
        rx.clear();
        sink.recv(&mut b, &mut rx);
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [4, 5, 6, 7]);
        for p in rx.packets() {
            let (want, got) = checksums(p.frame());
            assert_eq!(want, got);
        }
        // Another batch: the 4 held numbers come back and are sent from it.
        let mut other = Batch::new(8);
        assert_eq!(g.send(&mut a, &mut other, 2), 2);
        rx.clear();
        sink.recv(&mut b, &mut rx);
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [8, 9]);
        assert_eq!((g.total(), g.flow_sent()[0]), (10, 10));
        // A smaller burst than what is held sends only the burst's worth.
        assert_eq!(g.held(), 0);
        rx.clear();
        sink.recv(&mut b, &mut rx);
        assert_eq!(g.send(&mut a, &mut other, 1), 1);
        g.release_held();
        assert_eq!(g.send(&mut a, &mut batch, 3), 3);
        rx.clear();
        sink.recv(&mut b, &mut rx);
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [10, 11, 12, 13]);
    }

    /// Replay (what the runner's `replay` option drives): at every burst size, including one
    /// past the largest burst, against a ring that refuses most of what is offered, each frame
    /// is built once however often it is refused, the sink sees every flow's numbers exactly
    /// in order, and the checksums stay right.
    #[test]
    fn replay_builds_each_frame_once_at_every_burst_size() {
        for burst in [1usize, 2, 257] {
            let (mut a, mut b) = ports::mem::pair("gen", "dut", 64);
            let mut g = Generator::with_flows(vec![
                GenFrame { frame: flow("10.0.0.2", 60, None), flow: 0, class: 0 },
                GenFrame { frame: flow("10.0.0.3", 60, None), flow: 1, class: 1 },
                GenFrame { frame: flow("2001:db8::2", 80, None), flow: 2, class: 1 },
            ]);
            let mut batch = Batch::new(burst);
            let mut next = [0u64; 3];
            let mut received = 0u64;
            // The DUT takes a burst's worth every fourth offer: most offers are refused.
            let mut take = |b: &mut ports::mem::MemPort, room: usize| {
                let mut rx = Batch::new(room);
                let n = b.rx_burst(&mut rx);
                for p in rx.packets() {
                    let st = read_stamp(p.frame()).expect("a full stamp");
                    assert_eq!(st.seq, next[st.flow as usize], "burst {burst}: in order");
                    next[st.flow as usize] += 1;
                    let (want, got) = checksums(p.frame());
                    assert_eq!(want, got, "burst {burst}");
                }
                received += n as u64;
                n
            };
            let offer = burst.min(ports::MAX_BURST) as u64;
            for round in 0..400 {
                g.send(&mut a, &mut batch, burst);
                if round % 4 == 3 {
                    take(&mut b, offer as usize);
                }
            }
            while take(&mut b, ports::MAX_BURST) > 0 {}
            assert!(400 * offer > 2 * g.total(), "burst {burst}: the ring refused most offers");
            assert_eq!(g.frames_built(), g.total() + g.held() as u64, "burst {burst}: no rebuild");
            assert!(g.held() <= offer as usize);
            drop(take);
            assert_eq!(g.flow_sent(), &next[..], "burst {burst}");
            assert_eq!(received, g.total(), "burst {burst}");
        }
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
