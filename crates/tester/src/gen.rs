//! Generator and sink.

use ports::{Batch, Port};
use wire::{ip_proto, udp};

use crate::frames;

/// Offers prepared frames to a port, round robin, stamping each with a sequence number.
///
/// Each frame belongs to a class (for example the VR it is addressed to); the generator counts
/// what a port accepted per class.
pub struct Generator {
    frames: Vec<Vec<u8>>,
    class: Vec<u16>,
    /// Where each frame's sequence number goes, or `None` when it cannot be stamped (frames not
    /// made by [`frames::udp_frame`]).
    seq_at: Vec<Option<(usize, bool)>>,
    next: usize,
    seq: u64,
    offered: Vec<u64>,
    sel: Vec<u16>,
}

impl Generator {
    /// A generator over `(frame, class)` pairs that stamps sequence numbers.
    pub fn new(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(frames, true)
    }

    /// A generator that sends the frames as they are, without sequence numbers: less work per
    /// frame, for runs that only count.
    pub fn unstamped(frames: Vec<(Vec<u8>, u16)>) -> Generator {
        Self::build(frames, false)
    }

    fn build(frames: Vec<(Vec<u8>, u16)>, stamped: bool) -> Generator {
        assert!(!frames.is_empty(), "a generator needs at least one frame");
        let classes = frames.iter().map(|f| f.1 as usize + 1).max().unwrap_or(1);
        let seq_at = frames.iter().map(|(f, _)| stamp_place(f).filter(|_| stamped)).collect();
        let (frames, class) = frames.into_iter().unzip();
        Generator {
            frames,
            class,
            seq_at,
            next: 0,
            seq: 0,
            offered: vec![0; classes],
            sel: (0..ports::MAX_BURST as u16).collect(),
        }
    }

    /// Copies up to `n` frames into `batch`'s spare slots (no sending).
    pub fn fill(&mut self, batch: &mut Batch, n: usize) -> usize {
        let mut k = 0;
        while k < n {
            let i = (self.next + k) % self.frames.len();
            let Some(buf) = batch.spare_mut() else { break };
            buf.fill(&self.frames[i]);
            if let Some((at, fix_ck)) = self.seq_at[i] {
                stamp(buf.frame_mut(), at, fix_ck, self.seq + k as u64);
            }
            batch.commit();
            k += 1;
        }
        k
    }

    /// Fills `batch` (cleared first) with up to `burst` frames and transmits them; returns how
    /// many the port accepted. Frames it refused are offered again next time.
    pub fn send(&mut self, port: &mut dyn Port, batch: &mut Batch, burst: usize) -> usize {
        batch.clear();
        let n = self.fill(batch, burst.min(self.sel.len()));
        let k = port.tx_burst(batch, &self.sel[..n]);
        for j in 0..k {
            let i = (self.next + j) % self.frames.len();
            self.offered[self.class[i] as usize] += 1;
        }
        self.next = (self.next + k) % self.frames.len();
        self.seq += k as u64;
        k
    }

    /// Frames accepted so far, per class.
    pub fn offered(&self) -> &[u64] {
        &self.offered
    }

    /// Frames accepted so far.
    pub fn total(&self) -> u64 {
        self.seq
    }
}

/// Where to stamp a sequence number in `f`, and whether a UDP checksum must follow it.
fn stamp_place(f: &[u8]) -> Option<(usize, bool)> {
    if f.len() < 14 + 20 {
        return None;
    }
    let l4 = frames::udp_offset(f);
    let proto_at = if l4 - 20 >= 14 && f[l4 - 20] >> 4 == 4 { l4 - 20 + 9 } else { l4 - 40 + 6 };
    if f.get(proto_at) != Some(&ip_proto::UDP) || f.len() < l4 + udp::HEADER_LEN + 8 {
        return None;
    }
    let has_ck = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]) != 0;
    Some((l4, has_ck))
}

/// Writes `seq` into the payload, keeping the UDP checksum right (RFC 1624 update over the
/// four 16-bit words that change; the prepared frame carries sequence number 0).
#[inline]
fn stamp(f: &mut [u8], l4: usize, fix_ck: bool, seq: u64) {
    let at = l4 + udp::HEADER_LEN + frames::SEQ_OFFSET;
    f[at..at + 8].copy_from_slice(&seq.to_be_bytes());
    if fix_ck {
        // The prepared frame's checksum covers sequence number 0, so the new one only adds the
        // four 16-bit words of `seq` (RFC 1624: HC' = ~(~HC + m'), m = 0).
        let ck = u16::from_be_bytes([f[l4 + 6], f[l4 + 7]]);
        let words = (seq >> 48) + (seq >> 32 & 0xffff) + (seq >> 16 & 0xffff) + (seq & 0xffff);
        let ck = !wire::checksum::combine(&[!ck, (words >> 16) as u16, words as u16]);
        // A zero checksum means "none" in UDP over IPv4 and is invalid over IPv6.
        f[l4 + 6..l4 + 8].copy_from_slice(&if ck == 0 { 0xffff } else { ck }.to_be_bytes());
    }
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
    use crate::frames::{seq, udp_frame, UdpFlow};
    use wire::MacAddr;

    fn flow(dst: &str) -> Vec<u8> {
        let v6 = dst.contains(':');
        udp_frame(&UdpFlow {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: None,
            src: if v6 { "2001:db8::1".parse().unwrap() } else { "10.0.0.1".parse().unwrap() },
            dst: dst.parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            ttl: 64,
            size: 60,
        })
    }

    #[test]
    fn sends_round_robin_stamps_and_counts_accepted_only() {
        let (mut a, mut b) = ports::mem::pair("gen", "dut", 4);
        let mut g = Generator::new(vec![
            (flow("10.0.0.2"), 0),
            (flow("2001:db8::2"), 1),
            (flow("10.0.0.3"), 1),
        ]);
        let mut batch = Batch::new(8);
        assert_eq!(g.send(&mut a, &mut batch, 8), 4, "ring of 4");
        assert_eq!(g.offered(), &[2, 2]);
        let mut rx = Batch::new(8);
        let mut sink = Sink::default();
        assert_eq!(sink.recv(&mut b, &mut rx), 4);
        let seqs: Vec<u64> = rx.packets().iter().map(|p| seq(p.frame()).unwrap()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        // Stamped checksums stay valid for an independent parser.
        for p in rx.packets() {
            let s = etherparse::SlicedPacket::from_ethernet(p.frame()).unwrap();
            let Some(etherparse::TransportSlice::Udp(u)) = s.transport else { panic!() };
            let ck = match s.net {
                Some(etherparse::NetSlice::Ipv4(ip)) => {
                    u.to_header().calc_checksum_ipv4(&ip.header().to_header(), u.payload()).unwrap()
                }
                Some(etherparse::NetSlice::Ipv6(ip)) => {
                    u.to_header().calc_checksum_ipv6(&ip.header().to_header(), u.payload()).unwrap()
                }
                _ => unreachable!(),
            };
            assert_eq!(ck, u.checksum());
        }
        assert_eq!(g.send(&mut a, &mut batch, 8), 4);
        assert_eq!(g.total(), 8);
        assert_eq!(sink.packets(), 4);
    }
}
