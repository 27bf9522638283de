//! IPv4: validation, forwarding, local delivery and ICMP.

use std::net::Ipv4Addr;

use fib::NextHop;
use ports::PktBuf;
use wire::{checksum, icmpv4, ip_proto, ipv4};

use super::{ip4opt, reasm, Adj, Burst, Fate, Icmp, Ingress, Meta, NKey, Vr};
use crate::counters::VrDrop;
use crate::l2;

/// RFC 1812 §4.3.2.3: an ICMP error quotes as much of the offending packet as fits in 576 bytes.
const ICMP_ERROR_MAX: usize = 576;

/// 169.254/16 (RFC 3927), as the top 16 bits of an address.
const LINK_LOCAL: u32 = 0xa9fe;

/// What an address's first octet may make it, so that one table look-up per address clears
/// almost every packet of all the checks in [`Vr::martian4`].
const FIRST_OCTET_OK: u8 = 0;
/// This network (0/8), loopback (127/8), class E including limited broadcast (240/4).
const FIRST_OCTET_MARTIAN: u8 = 1;
/// 224/4.
const FIRST_OCTET_MULTICAST: u8 = 2;
/// 169/8, which holds link-local 169.254/16.
const FIRST_OCTET_169: u8 = 3;
static FIRST_OCTET: [u8; 256] = {
    let mut t = [FIRST_OCTET_OK; 256];
    t[0] = FIRST_OCTET_MARTIAN;
    t[127] = FIRST_OCTET_MARTIAN;
    t[169] = FIRST_OCTET_169;
    let mut i = 224;
    while i < 256 {
        t[i] = if i < 240 { FIRST_OCTET_MULTICAST } else { FIRST_OCTET_MARTIAN };
        i += 1;
    }
    t
};

impl Vr {
    /// Pass 1 for IPv4: RFC 1812 §5.2.2 header checks, then martians.
    #[inline]
    pub(super) fn ingress4(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Ingress {
        let l3 = m.l3 as usize;
        let f = buf.frame();
        let Some(&b0) = f.get(l3) else { return Ingress::Done(self.drop(VrDrop::Ip4BadLength)) };
        if b0 >> 4 != 4 {
            return Ingress::Done(self.drop(VrDrop::Ip4BadVersion));
        }
        let Ok(ip) = ipv4::Packet::new_checked(&f[l3..]) else {
            return Ingress::Done(self.drop(VrDrop::Ip4BadLength));
        };
        if !ip.verify_checksum() {
            return Ingress::Done(self.drop(VrDrop::Ip4BadChecksum));
        }
        let (total, src, dst) =
            (ip.total_len() as usize, u32::from(ip.src_addr()), u32::from(ip.dst_addr()));
        // RFC 791: a fragment may not reach past the largest datagram; one that does would
        // wrap the offset when refragmented.
        if ip.frag_offset() as usize + total - ip.header_len() > u16::MAX as usize {
            return Ingress::Done(self.drop(VrDrop::Ip4BadLength));
        }
        let flagged = FIRST_OCTET[(src >> 24) as usize] | FIRST_OCTET[(dst >> 24) as usize];
        if flagged != FIRST_OCTET_OK || self.own.contains(NKey::v4(0, src).ip) {
            if let Some(r) = self.martian4(src, dst) {
                // Link-local multicast (224.0.0.0/24: OSPF, VRRP, RIP...) is control traffic.
                if r == VrDrop::IpMulticast && dst >> 8 == 0xe0_00_00 {
                    buf.set_len(l3 + total);
                    let m = Meta { l3: l3 as u16, ethertype: wire::ethertype::IPV4, ..*m };
                    if let Some(f) = self.punt(buf, &m, now) {
                        return Ingress::Done(f);
                    }
                }
                return Ingress::Done(self.drop(r));
            }
        }
        if b0 != 0x45 {
            if let Err(at) = ip4opt::check(ip.header()) {
                return Ingress::Done(self.bad_option4(buf, m, at, now));
            }
        }
        // The IP length is authoritative: Ethernet may have padded the frame.
        buf.set_len(l3 + total);
        Ingress::Lookup4(dst)
    }

    /// Addresses that must never be forwarded (RFC 1812 §5.3.7, §4.2.3.1): sources from this
    /// network, loopback, multicast, class E or the VR itself; destinations in this network,
    /// loopback or class E, and multicast (`ip_multicast`: not routed here). RFC 3927 §7: a
    /// link-local (169.254/16) source or destination is never forwarded, but a packet for the
    /// VR's own address is delivered.
    #[cold]
    #[inline(never)]
    fn martian4(&self, src: u32, dst: u32) -> Option<VrDrop> {
        let ours = |a: u32| self.own.contains(NKey::v4(0, a).ip);
        let link_local = |a: u32| a >> 16 == LINK_LOCAL;
        let s = FIRST_OCTET[(src >> 24) as usize];
        if s == FIRST_OCTET_MARTIAN || s == FIRST_OCTET_MULTICAST || ours(src) {
            return Some(VrDrop::MartianSource);
        }
        if link_local(src) && !ours(dst) {
            return Some(VrDrop::MartianSource);
        }
        match FIRST_OCTET[(dst >> 24) as usize] {
            FIRST_OCTET_MARTIAN => Some(VrDrop::MartianDestination),
            FIRST_OCTET_MULTICAST => Some(VrDrop::IpMulticast),
            _ if link_local(dst) && !ours(dst) => Some(VrDrop::MartianDestination),
            _ => None,
        }
    }

    /// Pass 3 for IPv4: act on the route. The common case — a resolved gateway, TTL to spare,
    /// within the MTU — is a TTL decrement and a header copy; everything else takes the slow
    /// path.
    #[inline(always)]
    pub(super) fn forward4(
        &mut self,
        cx: &mut Burst,
        buf: &mut PktBuf,
        m: &Meta,
        nh: NextHop,
    ) -> Fate {
        let l3 = m.l3 as usize;
        let rw = &self.rewrite[nh as usize];
        if rw.epoch == self.neigh.epoch() && cx.now < rw.until {
            // Raw bytes (version/IHL, TTL): through `ipv4::Packet` this check measured 7 more
            // instructions a packet (cachegrind, `routeplex bench pipeline`).
            let ip = &buf.frame()[l3..];
            if ip[0] == 0x45 && ip[8] > 1 && ip.len() <= rw.mtu as usize {
                ipv4::Packet::new_unchecked(&mut buf.frame_mut()[l3..]).decrement_ttl();
                rw.apply(buf, l3);
                return Fate::Tx { port: rw.port, transit: true };
            }
        }
        self.forward4_slow(cx, buf, m, nh)
    }

    #[inline(never)]
    fn forward4_slow(&mut self, cx: &mut Burst, buf: &mut PktBuf, m: &Meta, nh: NextHop) -> Fate {
        let (l3, now) = (m.l3 as usize, cx.now);
        let (iface, key) = match self.adj[nh as usize] {
            Adj::Glean(i) => (i, NKey::v4(i, self.dst4(buf, l3))),
            Adj::Via { iface, gw } => (iface, NKey { ip: gw, iface }),
            Adj::Local => return self.local4(buf, m, now),
            Adj::None => {
                let e = Icmp(icmpv4::DEST_UNREACHABLE, icmpv4::NET_UNREACHABLE, 0);
                return self.icmp4_error(buf, m, e, VrDrop::NoRoute, now);
            }
            Adj::Blackhole => return self.drop(VrDrop::Blackhole),
            Adj::Broadcast => return self.drop(VrDrop::DirectedBroadcast),
            Adj::Multi(p) => {
                let nh = p.pick(crate::flowhash::hash4(buf.frame(), l3));
                return self.forward4(cx, buf, m, nh);
            }
            Adj::Unreachable | Adj::Prohibit => return self.reject4(buf, m, nh, now),
        };
        let f = &buf.frame()[l3..];
        let ip = ipv4::Packet::new_unchecked(f);
        if ip.ttl() <= 1 {
            let (t, c) = (icmpv4::TIME_EXCEEDED, icmpv4::TTL_EXCEEDED_IN_TRANSIT);
            return self.icmp4_error(buf, m, Icmp(t, c, 0), VrDrop::TtlExpired, now);
        }
        let mtu = self.ifaces[iface as usize].mtu;
        let too_big = f.len() > mtu as usize;
        let df = ip.dont_frag();
        if too_big && df {
            let (t, c) = (icmpv4::DEST_UNREACHABLE, icmpv4::FRAG_NEEDED);
            return self.icmp4_error(buf, m, Icmp(t, c, mtu as u32), VrDrop::MtuExceeded, now);
        }
        ipv4::Packet::new_unchecked(&mut buf.frame_mut()[l3..]).decrement_ttl();
        if !ipv4::Packet::new_unchecked(&buf.frame()[l3..]).is_basic() {
            self.stamp_options4(buf, l3, iface, now);
        }
        if too_big {
            return self.fragment4(cx, buf, l3, nh, key, mtu as usize);
        }
        self.output(buf, l3, nh, key, true, now)
    }

    /// A reject route: destination unreachable, net unreachable or administratively
    /// prohibited (RFC 1812 §5.2.7.1), rate-limited as every ICMP error.
    #[cold]
    #[inline(never)]
    fn reject4(&mut self, buf: &mut PktBuf, m: &Meta, nh: NextHop, now: u64) -> Fate {
        let (c, why) = match self.adj[nh as usize] {
            Adj::Prohibit => (icmpv4::ADMIN_PROHIBITED, VrDrop::Prohibited),
            _ => (icmpv4::NET_UNREACHABLE, VrDrop::NoRoute),
        };
        self.icmp4_error(buf, m, Icmp(icmpv4::DEST_UNREACHABLE, c, 0), why, now)
    }

    /// A header option failed [`ip4opt::check`]: Parameter Problem pointing at octet `at`
    /// (RFC 1812 §5.2.5, §4.3.2.7), and the packet is dropped.
    #[cold]
    #[inline(never)]
    fn bad_option4(&mut self, buf: &mut PktBuf, m: &Meta, at: u8, now: u64) -> Fate {
        let (t, rest) = (icmpv4::PARAM_PROBLEM, (at as u32) << 24);
        self.icmp4_error(buf, m, Icmp(t, 0, rest), VrDrop::Ip4BadOption, now)
    }

    /// Record Route and Timestamp of a packet being forwarded out of `iface` (RFC 1812
    /// §5.3.13): the interface's address and the time go in, the header checksum is redone.
    #[cold]
    #[inline(never)]
    fn stamp_options4(&mut self, buf: &mut PktBuf, l3: usize, iface: u16, now: u64) {
        let addr = self.icmp4_source(iface).map_or([0; 4], |a| a.octets());
        let own = &self.own;
        let f = &mut buf.frame_mut()[l3..];
        let ihl = (f[0] & 0x0f) as usize * 4;
        if ip4opt::stamp(&mut f[..ihl], addr, ip4opt::timestamp(now), |a| {
            own.contains(NKey::v4(0, a).ip)
        }) {
            ipv4::Packet::new_unchecked(f).fill_checksum();
        }
    }

    fn dst4(&self, buf: &PktBuf, l3: usize) -> u32 {
        let f = buf.frame();
        u32::from_be_bytes([f[l3 + 16], f[l3 + 17], f[l3 + 18], f[l3 + 19]])
    }

    /// A packet for one of the VR's addresses.
    fn local4(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Fate {
        let l3 = m.l3 as usize;
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[l3..]);
        if ip.more_frags() || ip.frag_offset() != 0 {
            return self.reassemble4(buf, m, now);
        }
        let proto = ip.protocol();
        if proto != ip_proto::ICMP {
            if let Some(f) = self.punt(buf, m, now) {
                return f;
            }
        }
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[l3..]);
        match proto {
            ip_proto::ICMP => {
                let icmp = ip.payload();
                if icmp.len() < icmpv4::HEADER_LEN || checksum::data(icmp) != 0xffff {
                    return self.drop(VrDrop::IcmpMalformed);
                }
                if icmp[0] == icmpv4::ECHO_REQUEST && icmp[1] == 0 {
                    return self.echo4(buf, l3, now);
                }
                self.punt(buf, m, now).unwrap_or_else(|| self.drop(VrDrop::IcmpNotHandled))
            }
            ip_proto::UDP => {
                let (t, c) = (icmpv4::DEST_UNREACHABLE, icmpv4::PORT_UNREACHABLE);
                self.icmp4_error(buf, m, Icmp(t, c, 0), VrDrop::LocalPortUnreachable, now)
            }
            _ => self.drop(VrDrop::LocalUnsupported),
        }
    }

    /// A fragment for the VR: held until its datagram is whole (see [`reasm`]).
    #[cold]
    #[inline(never)]
    fn reassemble4(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Fate {
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[m.l3 as usize..]);
        let key = reasm::Key {
            src: u32::from(ip.src_addr()).into(),
            dst: u32::from(ip.dst_addr()).into(),
            ident: ip.ident().into(),
            proto: ip.protocol(),
            v6: false,
        };
        let f = reasm::Frag {
            key,
            off: ip.frag_offset() as usize,
            more: ip.more_frags(),
            data: ip.payload(),
            unfrag: ip.header(),
            next_at: 0,
            next: 0,
        };
        let r = self.reasm.add(&f, now);
        match self.reassembled(r, buf, m.l3 as usize) {
            Some(fate) => fate,
            None => self.local4(buf, m, now),
        }
    }

    /// Turns an echo request into its reply in place (options are not echoed).
    fn echo4(&mut self, buf: &mut PktBuf, l3: usize, now: u64) -> Fate {
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[l3..]);
        let (src, dst, tos, ihl, total) =
            (ip.src_addr(), ip.dst_addr(), ip.tos(), ip.header_len(), ip.total_len() as usize);
        let icmp_len = total - ihl;
        let f = buf.frame_mut();
        f.copy_within(l3 + ihl..l3 + total, l3 + ipv4::HEADER_LEN);
        let len = ipv4::HEADER_LEN + icmp_len;
        let ident = self.next_ident();
        write_ip4_header(&mut f[l3..], dst, src, tos, ident, len, ip_proto::ICMP);
        let icmp = &mut f[l3 + ipv4::HEADER_LEN..];
        let old = u16::from_be_bytes([icmp[0], icmp[1]]);
        icmp[0] = icmpv4::ECHO_REPLY;
        let ck = checksum::update(
            u16::from_be_bytes([icmp[2], icmp[3]]),
            old,
            (icmpv4::ECHO_REPLY as u16) << 8,
        );
        icmp[2..4].copy_from_slice(&ck.to_be_bytes());
        buf.set_len(l3 + len);
        self.counters.local_in += 1;
        self.counters.echo_replies += 1;
        self.send_local4(buf, l3, src.into(), now)
    }

    /// Drops the packet for `reason` and, where RFC 1812 §4.3.2.7 and the rate limit allow,
    /// turns its buffer into an ICMP error back to its source.
    fn icmp4_error(
        &mut self,
        buf: &mut PktBuf,
        m: &Meta,
        e: Icmp,
        reason: VrDrop,
        now: u64,
    ) -> Fate {
        self.counters.drops[reason as usize] += 1;
        self.icmp4_reply(buf, m, e.0, e.1, e.2, now)
    }

    /// The answer half of [`Vr::icmp4_error`], for a packet whose drop is already counted.
    pub(super) fn icmp4_reply(
        &mut self,
        buf: &mut PktBuf,
        m: &Meta,
        kind: u8,
        code: u8,
        rest: u32,
        now: u64,
    ) -> Fate {
        let l3 = m.l3 as usize;
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[l3..]);
        let about_error = ip.protocol() == ip_proto::ICMP
            && ip.payload().first().is_some_and(|&t| icmpv4::is_error(t));
        if about_error || ip.frag_offset() != 0 {
            self.counters.icmp_errors_suppressed += 1;
            return Fate::Done;
        }
        let orig_src = ip.src_addr();
        let total = ip.total_len() as usize;
        let Some(src) = self.icmp4_source(m.iface) else {
            self.counters.icmp_errors_suppressed += 1;
            return Fate::Done;
        };
        if !self.icmp_allowed(now) {
            return Fate::Done;
        }
        let quote = total.min(ICMP_ERROR_MAX - ipv4::HEADER_LEN - icmpv4::HEADER_LEN);
        let hdr = ipv4::HEADER_LEN + icmpv4::HEADER_LEN;
        let (storage, off) = buf.storage_mut();
        let at = off + l3;
        storage.copy_within(at..at + quote, at + hdr);
        let ident = self.next_ident();
        let pkt = &mut storage[at..at + hdr + quote];
        write_ip4_header(pkt, src, orig_src, 0xc0, ident, hdr + quote, ip_proto::ICMP);
        let icmp = &mut pkt[ipv4::HEADER_LEN..];
        icmp[0] = kind;
        icmp[1] = code;
        icmp[2..4].fill(0);
        icmp[4..8].copy_from_slice(&rest.to_be_bytes());
        let ck = !checksum::data(icmp);
        icmp[2..4].copy_from_slice(&ck.to_be_bytes());
        buf.set_window(off, l3 + hdr + quote);
        self.counters.icmp_errors += 1;
        self.send_local4(buf, l3, orig_src.into(), now)
    }

    /// Source of the VR's ICMP errors: the receiving interface's first address, else any.
    fn icmp4_source(&self, iface: u16) -> Option<Ipv4Addr> {
        let first = |i: &super::Iface| i.v4.first().map(|n| n.addr());
        first(&self.ifaces[iface as usize]).or_else(|| self.ifaces.iter().find_map(first))
    }

    /// Routes a packet the VR made itself (reply or error) towards `dst`.
    fn send_local4(&mut self, buf: &mut PktBuf, l3: usize, dst: u32, now: u64) -> Fate {
        let mut nh = self.r4.load().lookup(dst);
        if let Adj::Multi(p) = self.adj[nh as usize] {
            nh = p.pick(crate::flowhash::hash4(buf.frame(), l3));
        }
        let (iface, key) = match self.adj[nh as usize] {
            Adj::Glean(i) => (i, NKey::v4(i, dst)),
            Adj::Via { iface, gw } => (iface, NKey { ip: gw, iface }),
            _ => return self.drop_out(VrDrop::NoRoute, false),
        };
        let mtu = self.ifaces[iface as usize].mtu as usize;
        if buf.len() - l3 > mtu {
            return self.fragment_local4(buf, l3, nh, key, mtu, now);
        }
        self.output(buf, l3, nh, key, false, now)
    }

    /// A packet the VR made that exceeds the egress MTU (an echo reply to a reassembled
    /// request): sent in fragments (RFC 791), the first from `buf`, the rest from the VR's
    /// spill buffers at the next drain. Dropped if it needs more fragments than those hold.
    #[cold]
    #[inline(never)]
    fn fragment_local4(
        &mut self,
        buf: &mut PktBuf,
        l3: usize,
        nh: NextHop,
        key: NKey,
        mtu: usize,
        now: u64,
    ) -> Fate {
        let ip = ipv4::Packet::new_unchecked(&buf.frame()[l3..]);
        let (ihl, payload) = (ip.header_len(), ip.payload().len());
        let step = (mtu - ihl) & !7;
        let rest = (payload - step).div_ceil(step);
        if ip.dont_frag() || rest > super::SPILL - self.spill_n {
            return self.drop_out(VrDrop::MtuExceeded, false);
        }
        let whole = l3 + ihl + payload;
        if self.frag_copy.is_empty() {
            self.fragment_buffers();
        }
        self.frag_copy[..whole].copy_from_slice(&buf.frame()[..whole]);
        set_fragment(&mut buf.frame_mut()[l3..], ihl + step, 0, true);
        buf.set_len(l3 + ihl + step);
        self.counters.fragments_sent += 1;
        let fate = self.output(buf, l3, nh, key, false, now);
        self.spill_fragments((step, payload, ihl), nh, key, now, |whole, at, n, p| {
            p[..ihl].copy_from_slice(&whole[l3..l3 + ihl]);
            let from = l3 + ihl + at;
            p[ihl..].copy_from_slice(&whole[from..from + n]);
            set_fragment(p, ihl + n, at, at + n < payload);
        });
        fate
    }

    /// Splits a packet without DF into fragments that fit `mtu` (RFC 791): the first stays in
    /// `buf`, the rest go to `out`. Options without the copy flag travel in the first only.
    fn fragment4(
        &mut self,
        cx: &mut Burst,
        buf: &mut PktBuf,
        l3: usize,
        nh: NextHop,
        key: NKey,
        mtu: usize,
    ) -> Fate {
        let now = cx.now;
        let f = buf.frame();
        let ip = ipv4::Packet::new_unchecked(&f[l3..]);
        let ihl = ip.header_len();
        let mut rest_hdr = [0u8; 60];
        let rest_ihl = copied_header(ip.header(), &mut rest_hdr);
        let (base, last_mf) = (ip.frag_offset() as usize, ip.more_frags());
        let payload = ip.payload().len();
        let first = (mtu - ihl) & !7;
        let step = (mtu - rest_ihl) & !7;
        let rest = (payload - first).div_ceil(step);
        if cx.out.batch.room() < rest {
            cx.flush_out();
        }
        if cx.out.batch.room() < rest {
            // Only a frame longer than a buffer could need more fragments than `out` holds.
            return self.drop(VrDrop::MtuExceeded);
        }
        // The first fragment (the transit packet) goes first, so it is the first to queue if
        // the next hop is unresolved; the rest are cut from a copy of the original.
        let whole = l3 + ihl + payload;
        if self.frag_copy.is_empty() {
            self.fragment_buffers();
        }
        self.frag_copy[..whole].copy_from_slice(&buf.frame()[..whole]);
        set_fragment(&mut buf.frame_mut()[l3..], ihl + first, base, true);
        buf.set_len(l3 + ihl + first);
        self.counters.fragments_sent += 1;
        let fate = self.output(buf, l3, nh, key, true, now);
        let mut at = first;
        while at < payload {
            let n = step.min(payload - at);
            let mf = at + n < payload || last_mf;
            let from = l3 + ihl + at;
            cx.out.emit(|o| {
                let hdr = l2::ETH_LEN;
                o.set_len(hdr + rest_ihl + n);
                let p = o.frame_mut();
                p[hdr..hdr + rest_ihl].copy_from_slice(&rest_hdr[..rest_ihl]);
                p[hdr + rest_ihl..].copy_from_slice(&self.frag_copy[from..from + n]);
                set_fragment(&mut p[hdr..], rest_ihl + n, base + at, mf);
                self.counters.fragments_sent += 1;
                self.output(o, hdr, nh, key, false, now)
            });
            at += n;
        }
        fate
    }
}

/// Writes a 20-byte IPv4 header (TTL 64, no fragmentation flags) with its checksum.
fn write_ip4_header(
    p: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    tos: u8,
    ident: u16,
    total: usize,
    proto: u8,
) {
    let mut ip = ipv4::Packet::new_unchecked(&mut p[..ipv4::HEADER_LEN]);
    ip.set_version(4);
    ip.set_header_len(ipv4::HEADER_LEN);
    ip.set_tos(tos);
    ip.set_total_len(total as u16);
    ip.set_ident(ident);
    ip.set_dont_frag(false);
    ip.set_more_frags(false);
    ip.set_frag_offset(0);
    ip.set_ttl(64);
    ip.set_protocol(proto);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
    ip.fill_checksum();
}

/// Sets length, offset and MF of a fragment header and recomputes its checksum.
fn set_fragment(p: &mut [u8], total: usize, offset: usize, mf: bool) {
    let mut ip = ipv4::Packet::new_unchecked(p);
    ip.set_total_len(total as u16);
    ip.set_frag_offset(offset as u16);
    ip.set_more_frags(mf);
    ip.fill_checksum();
}

/// The header for fragments after the first: options whose copy flag is set, padded to a
/// multiple of 4. Returns its length.
fn copied_header(h: &[u8], out: &mut [u8; 60]) -> usize {
    out[..ipv4::HEADER_LEN].copy_from_slice(&h[..ipv4::HEADER_LEN]);
    let mut n = ipv4::HEADER_LEN;
    let mut i = ipv4::HEADER_LEN;
    while i < h.len() {
        let kind = h[i];
        let len = match kind {
            0 => break,
            1 => 1,
            _ => match h.get(i + 1) {
                Some(&l) if l >= 2 && i + l as usize <= h.len() => l as usize,
                _ => break,
            },
        };
        if kind & 0x80 != 0 {
            out[n..n + len].copy_from_slice(&h[i..i + len]);
            n += len;
        }
        i += len;
    }
    let padded = n.next_multiple_of(4);
    out[n..padded].fill(0);
    out[0] = 0x40 | (padded / 4) as u8;
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_octet_table_matches_the_address_classes() {
        for o in 0..=255u32 {
            let want = match o {
                0 | 127 | 240..=255 => FIRST_OCTET_MARTIAN,
                224..=239 => FIRST_OCTET_MULTICAST,
                169 => FIRST_OCTET_169,
                _ => FIRST_OCTET_OK,
            };
            assert_eq!(FIRST_OCTET[o as usize], want, "{o}");
        }
    }

    #[test]
    fn copied_options_only() {
        let mut h = [0u8; 32];
        h[0] = 0x48;
        // NOP, record route (7, not copied, len 7), loose source route (131, copied, len 7), EOL
        h[20] = 1;
        h[21..28].copy_from_slice(&[7, 7, 4, 1, 2, 3, 4]);
        h[28] = 131;
        h[29] = 3;
        h[30] = 4;
        h[31] = 0;
        let mut out = [0u8; 60];
        let n = copied_header(&h, &mut out);
        assert_eq!(n, 24);
        assert_eq!(&out[20..24], &[131, 3, 4, 0]);
        assert_eq!(out[0], 0x46);
    }
}
