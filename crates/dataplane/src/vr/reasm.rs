//! Reassembly of IPv4 and IPv6 datagrams addressed to the VR itself (RFC 1812 §4.2.2.8 by way
//! of RFC 1122 §3.3.2, RFC 8200 §4.5).
//!
//! Contract: a VR holds [`CONTEXTS`] reassembly contexts, each with a buffer made when the VR is
//! built, so reassembly never allocates. A datagram is keyed by (source, destination,
//! identification, protocol) for IPv4 and (source, destination, identification) for IPv6. Its
//! fragmentable part may be at most [`MAX_PAYLOAD`] bytes: the whole datagram must fit one
//! packet buffer, since it goes on to the same local handler as any datagram. That bounds the
//! bytes held to `CONTEXTS × MAX_PAYLOAD` per VR, far below the 65535 the protocols allow;
//! bigger datagrams are refused (`reassembly_too_big`). Overlapping fragments (duplicates
//! included) discard the whole datagram, as RFC 5722 requires for IPv6 and as hardened IPv4
//! stacks do. A datagram not complete [`TIMEOUT_V4`] / [`TIMEOUT_V6`] after its first fragment
//! is discarded, and if its first fragment came, that fragment is handed back for a Time
//! Exceeded (fragment reassembly time exceeded) to its source. When every context is busy, a fragment of a new datagram is refused
//! (`reassembly_no_context`).
//!
//! Accounting: a fragment held is not yet counted anywhere ([`Reassembler::held`] says how
//! many there are). When a datagram completes, the fragments merged into it count as
//! `local_in` and the last one's buffer carries the datagram on, to be counted by what handles
//! it; when it fails, all its fragments count as drops of the failure's reason.

use ports::{PktBuf, BUF_SIZE, HEADROOM};

use crate::counters::VrDrop;
use crate::l2::ETH_VLAN_LEN;

/// Reassembly contexts per VR.
pub(crate) const CONTEXTS: usize = 4;
/// The largest fragmentable part: what one buffer holds behind the largest L2 and IPv4
/// headers, in 8-byte fragment blocks.
pub(crate) const MAX_PAYLOAD: usize = (BUF_SIZE - HEADROOM - ETH_VLAN_LEN - 60) & !7;
/// The largest unfragmentable part kept (an IPv4 header with options is at most 60 bytes;
/// IPv6 extension headers before the Fragment header beyond this are refused as too big).
const MAX_UNFRAG: usize = 128;
const WORDS: usize = MAX_PAYLOAD.div_ceil(8).div_ceil(64);
/// RFC 8200 §4.5: 60 seconds. IPv4 has no fixed figure (RFC 791 suggests 15 s to start);
/// 30 s, as Linux.
pub(crate) const TIMEOUT_V6: u64 = 60_000_000_000;
pub(crate) const TIMEOUT_V4: u64 = 30_000_000_000;

/// What identifies a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Key {
    pub src: u128,
    pub dst: u128,
    pub ident: u32,
    /// IPv4: the protocol; IPv6: 0 (not part of the key).
    pub proto: u8,
    pub v6: bool,
}

/// One fragment, as its packet says.
pub(crate) struct Frag<'a> {
    pub key: Key,
    /// Offset of `data` in the fragmentable part, in bytes.
    pub off: usize,
    pub more: bool,
    pub data: &'a [u8],
    /// The unfragmentable part (IPv4: the header; IPv6: the headers before the Fragment
    /// header): kept from the fragment at offset 0.
    pub unfrag: &'a [u8],
    /// IPv6: where in `unfrag` the Next Header octet naming the Fragment header is, and the
    /// Fragment header's own Next Header (the first fragment's are kept).
    pub next_at: usize,
    pub next: u8,
}

struct Ctx {
    key: Key,
    live: bool,
    deadline: u64,
    /// Fragments held.
    frags: u32,
    /// End of the fragmentable part, once the last fragment came.
    end: Option<usize>,
    /// Length of `unfrag` (0 until the fragment at offset 0 came).
    unfrag_len: usize,
    unfrag: [u8; MAX_UNFRAG],
    next_at: usize,
    next: u8,
    /// Data bytes of the fragment at offset 0.
    first_len: usize,
    /// Timed out with its first fragment received: owed a Time Exceeded (see
    /// [`Reassembler::pop_report`]) until the context is reused.
    report: bool,
    /// 8-byte blocks received.
    have: [u64; WORDS],
    /// The datagram's data: empty until the context first holds one, then `MAX_PAYLOAD`
    /// bytes for good, so a VR that never reassembles holds no buffer for it.
    data: Vec<u8>,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            key: Key::default(),
            live: false,
            deadline: 0,
            frags: 0,
            end: None,
            unfrag_len: 0,
            unfrag: [0; MAX_UNFRAG],
            next_at: 0,
            next: 0,
            first_len: 0,
            report: false,
            have: [0; WORDS],
            data: Vec::new(),
        }
    }

    fn any(&self, from: usize, to: usize) -> bool {
        (from..to).any(|b| self.have[b / 64] & 1 << (b % 64) != 0)
    }

    fn mark(&mut self, from: usize, to: usize) {
        for b in from..to {
            self.have[b / 64] |= 1 << (b % 64);
        }
    }

    /// Forgets the datagram; returns how many fragments it held.
    fn kill(&mut self) -> u32 {
        self.live = false;
        std::mem::take(&mut self.frags)
    }
}

/// A failed datagram: the reason, and how many fragments held before this one go with it.
pub(crate) type Failed = (VrDrop, u32);

pub(crate) struct Reassembler {
    ctx: Box<[Ctx]>,
    /// Live contexts, so the timer check is free when there are none.
    live: usize,
}

impl Reassembler {
    pub fn new() -> Reassembler {
        Reassembler { ctx: (0..CONTEXTS).map(|_| Ctx::new()).collect(), live: 0 }
    }

    /// Fragments held in unfinished datagrams.
    pub fn held(&self) -> usize {
        self.ctx.iter().filter(|c| c.live).map(|c| c.frags as usize).sum()
    }

    /// Discards datagrams whose time is up; returns how many fragments they held.
    pub fn expire(&mut self, now: u64) -> u64 {
        if self.live == 0 {
            return 0;
        }
        let mut n = 0;
        for c in self.ctx.iter_mut().filter(|c| c.live && now >= c.deadline) {
            n += c.kill() as u64;
            c.report = c.unfrag_len > 0;
            self.live -= 1;
        }
        n
    }

    /// Writes, at `l3` in `buf`, the first fragment of a datagram that timed out (as it
    /// arrived, for the Time Exceeded that RFC 1122 §3.3.2 and RFC 8200 §4.5 ask for); `None`
    /// when no timed-out datagram is owed one. Returns whether it is IPv6.
    pub fn pop_report(&mut self, buf: &mut PktBuf, l3: usize) -> Option<bool> {
        let c = self.ctx.iter_mut().find(|c| c.report)?;
        c.report = false;
        let (h, n) = (c.unfrag_len, c.first_len);
        let fh = if c.key.v6 { 8 } else { 0 };
        buf.reset();
        if !buf.set_len(l3 + h + fh + n) {
            return None;
        }
        let p = &mut buf.frame_mut()[l3..];
        p[..h].copy_from_slice(&c.unfrag[..h]);
        if c.key.v6 {
            // The Fragment header as it was: offset 0, more fragments.
            p[h..h + 4].copy_from_slice(&[c.next, 0, 0, 1]);
            p[h + 4..h + 8].copy_from_slice(&c.key.ident.to_be_bytes());
        }
        p[h + fh..].copy_from_slice(&c.data[..n]);
        Some(c.key.v6)
    }

    /// Forgets the Time Exceeded reports [`Reassembler::pop_report`] did not take.
    pub fn clear_reports(&mut self) {
        self.ctx.iter_mut().for_each(|c| c.report = false);
    }

    /// Takes fragment `f` in. `Ok(None)`: held; `Ok(Some(i))`: context `i` is complete, for
    /// [`Reassembler::finish`]; `Err`: `f` and the held fragments named are dropped.
    pub fn add(&mut self, f: &Frag, now: u64) -> Result<Option<usize>, Failed> {
        let end = f.off + f.data.len();
        // RFC 8200 §4.5, RFC 791: every fragment but the last carries a multiple of 8 bytes.
        if f.more && (f.data.is_empty() || !f.data.len().is_multiple_of(8)) {
            return Err((VrDrop::LocalFragment, 0));
        }
        let i = match self.ctx.iter().position(|c| c.live && c.key == f.key) {
            Some(i) => i,
            None => {
                if end > MAX_PAYLOAD {
                    return Err((VrDrop::ReassemblyTooBig, 0));
                }
                let Some(i) = self.ctx.iter().position(|c| !c.live) else {
                    return Err((VrDrop::ReassemblyNoContext, 0));
                };
                let c = &mut self.ctx[i];
                c.key = f.key;
                c.live = true;
                c.deadline = now + if f.key.v6 { TIMEOUT_V6 } else { TIMEOUT_V4 };
                c.frags = 0;
                c.report = false;
                c.end = None;
                c.unfrag_len = 0;
                c.have = [0; WORDS];
                if c.data.is_empty() {
                    c.data.resize(MAX_PAYLOAD, 0);
                }
                self.live += 1;
                i
            }
        };
        let c = &mut self.ctx[i];
        let fail = |c: &mut Ctx, live: &mut usize, r: VrDrop| {
            *live -= 1;
            Err((r, c.kill()))
        };
        if end > MAX_PAYLOAD || (f.off == 0 && f.unfrag.len() > MAX_UNFRAG) {
            return fail(c, &mut self.live, VrDrop::ReassemblyTooBig);
        }
        let (first, last) = (f.off / 8, end.div_ceil(8));
        let inconsistent = match c.end {
            Some(e) => end > e || (!f.more && end != e),
            // A last fragment with data already received beyond its end.
            None => !f.more && c.any(last, MAX_PAYLOAD.div_ceil(8)),
        };
        if inconsistent || c.any(first, last) {
            return fail(c, &mut self.live, VrDrop::ReassemblyOverlap);
        }
        c.mark(first, last);
        c.data[f.off..end].copy_from_slice(f.data);
        c.frags += 1;
        if !f.more {
            c.end = Some(end);
        }
        if f.off == 0 {
            c.unfrag[..f.unfrag.len()].copy_from_slice(f.unfrag);
            c.unfrag_len = f.unfrag.len();
            c.next_at = f.next_at;
            c.next = f.next;
            c.first_len = f.data.len();
        }
        let done = match c.end {
            Some(e) => {
                c.unfrag_len > 0 && (0..e.div_ceil(8)).all(|b| c.have[b / 64] & 1 << (b % 64) != 0)
            }
            None => false,
        };
        Ok(done.then_some(i))
    }

    /// Writes complete datagram `i` into `buf` at `l3` (the L2 header before it is kept) and
    /// frees its context. Returns how many fragments were merged besides the one whose buffer
    /// it is; `Err` if it does not fit the buffer.
    pub fn finish(&mut self, i: usize, buf: &mut PktBuf, l3: usize) -> Result<u32, Failed> {
        let c = &mut self.ctx[i];
        self.live -= 1;
        let merged = c.kill() - 1;
        let (h, end) = (c.unfrag_len, c.end.unwrap_or(0));
        let total = h + end;
        if !buf.set_len(l3 + total) {
            return Err((VrDrop::ReassemblyTooBig, merged));
        }
        let p = &mut buf.frame_mut()[l3..];
        p[..h].copy_from_slice(&c.unfrag[..h]);
        p[h..total].copy_from_slice(&c.data[..end]);
        if c.key.v6 {
            p[c.next_at] = c.next;
            p[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
        } else {
            let mut ip = wire::ipv4::Packet::new_unchecked(&mut p[..total]);
            ip.set_total_len(total as u16);
            ip.set_more_frags(false);
            ip.set_frag_offset(0);
            ip.fill_checksum();
        }
        Ok(merged)
    }
}

/// Where an IPv6 packet's Fragment header is: its offset, and the offset of the Next Header
/// octet that names it. `None` if there is none before the upper layer.
pub(crate) fn find_fragment6(ip: &[u8]) -> Option<(usize, usize)> {
    use wire::ip_proto;
    let (mut next_at, mut at) = (6, wire::ipv6::HEADER_LEN);
    loop {
        let len = match *ip.get(next_at)? {
            ip_proto::FRAGMENT => return (at + 8 <= ip.len()).then_some((at, next_at)),
            ip_proto::HOPOPTS | ip_proto::DSTOPTS | ip_proto::ROUTING => {
                (*ip.get(at + 1)? as usize + 1) * 8
            }
            ip_proto::AH => (*ip.get(at + 1)? as usize + 2) * 4,
            _ => return None,
        };
        next_at = at;
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag<'a>(off: usize, more: bool, data: &'a [u8], unfrag: &'a [u8]) -> Frag<'a> {
        let key = Key { src: 1, dst: 2, ident: 3, proto: 17, v6: false };
        Frag { key, off, more, data, unfrag, next_at: 0, next: 0 }
    }

    #[test]
    fn in_any_order_then_overlap_and_limits() {
        let mut hdr = [0u8; 20];
        hdr[0] = 0x45;
        let mut r = Reassembler::new();
        let a = [1u8; 16];
        let b = [2u8; 5];
        assert_eq!(r.add(&frag(16, false, &b, &[]), 0), Ok(None));
        assert_eq!(r.held(), 1);
        assert_eq!(r.add(&frag(0, true, &a, &hdr), 0), Ok(Some(0)));
        let mut buf = PktBuf::new();
        assert_eq!(r.finish(0, &mut buf, 14), Ok(1));
        let f = buf.frame();
        assert_eq!(f.len(), 14 + 20 + 21);
        assert_eq!(&f[34..50], &a);
        assert_eq!(&f[50..], &b);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 41);
        assert_eq!(r.held(), 0);
        // Overlap: the datagram goes, with what it held.
        assert_eq!(r.add(&frag(0, true, &a, &hdr), 0), Ok(None));
        assert_eq!(r.add(&frag(8, true, &[0; 8], &[]), 0), Err((VrDrop::ReassemblyOverlap, 1)));
        assert_eq!(r.held(), 0);
        // Data beyond the end a last fragment set.
        assert_eq!(r.add(&frag(0, false, &a, &hdr), 0), Ok(Some(0)));
        r.finish(0, &mut buf, 14).unwrap();
        assert_eq!(r.add(&frag(32, true, &a, &[]), 0), Ok(None));
        assert_eq!(r.add(&frag(8, false, &[0; 8], &[]), 0), Err((VrDrop::ReassemblyOverlap, 1)));
        // Malformed, too big, no context, timeout.
        assert_eq!(r.add(&frag(0, true, &[0; 7], &hdr), 0), Err((VrDrop::LocalFragment, 0)));
        assert_eq!(r.add(&frag(MAX_PAYLOAD, true, &a, &[]), 0), Err((VrDrop::ReassemblyTooBig, 0)));
        for k in 0..CONTEXTS as u32 {
            let f = Frag {
                key: Key { ident: 10 + k, ..frag(0, true, &a, &hdr).key },
                ..frag(8, true, &a, &[])
            };
            assert_eq!(r.add(&f, 5), Ok(None));
        }
        assert_eq!(r.add(&frag(8, true, &a, &[]), 5), Err((VrDrop::ReassemblyNoContext, 0)));
        assert_eq!(r.expire(5 + TIMEOUT_V4 - 1), 0);
        assert_eq!(r.expire(5 + TIMEOUT_V4), CONTEXTS as u64);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn largest_datagram_fits_a_buffer() {
        // counters.rs and docs/dataplane.md give this figure.
        assert_eq!(MAX_PAYLOAD, 9152);
        const { assert!(ETH_VLAN_LEN + 60 + MAX_PAYLOAD <= BUF_SIZE - HEADROOM) };
    }

    #[test]
    fn fragment_header_is_found_behind_extension_headers() {
        let mut p = vec![0u8; 40];
        p[6] = 44;
        p.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 9]);
        assert_eq!(find_fragment6(&p), Some((40, 6)));
        p[6] = 0; // hop-by-hop first, 8 bytes, then the fragment header
        let mut q = p[..40].to_vec();
        q.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
        q.extend_from_slice(&p[40..]);
        assert_eq!(find_fragment6(&q), Some((48, 40)));
        q[40] = 17;
        assert_eq!(find_fragment6(&q), None);
    }
}
