//! IPv6: validation, forwarding, local delivery, ICMPv6 and neighbor discovery.

use std::net::Ipv6Addr;

use fib::NextHop;
use ports::PktBuf;
use wire::{icmpv6, ip_proto, ipv6, ndp, MacAddr};

use super::neighbor::Learn;
use super::{reasm, Adj, Burst, Fate, Icmp, Ingress, Meta, NKey, Vr};
use crate::config::{IfaceId, IPV6_MIN_MTU};
use crate::counters::VrDrop;
use crate::l2;

/// RFC 4443 §2.4(c): an ICMPv6 error quotes as much as fits in the minimum MTU.
const ICMP6_ERROR_MAX: usize = 1280;
/// Destination unreachable code 2: beyond scope of source address (RFC 4443 §3.1).
const BEYOND_SCOPE: u8 = 2;
const IP6_ETH: u16 = wire::ethertype::IPV6;
/// The Fragment header's length (RFC 8200 §4.5).
const FRAG_HDR: usize = 8;
const ALL_NODES: u128 = 0xff02_0000_0000_0000_0000_0000_0000_0001;
/// ff02::1:ff00:0/104, the solicited-node groups.
const SOLICITED_NODES: u128 = 0xff02_0000_0000_0000_0000_0001_ff00_0000;

#[inline]
fn is_multicast(a: u128) -> bool {
    a >> 120 == 0xff
}

#[inline]
fn is_link_local(a: u128) -> bool {
    a >> 118 == 0xfe80 >> 6
}

/// Unspecified, loopback and IPv4-mapped addresses never appear on the wire as a routable
/// source or destination (RFC 4291 §2.5.2, §2.5.3, §2.5.5.2).
#[inline]
fn never_routed(a: u128) -> bool {
    a <= 1 || a >> 32 == 0xffff
}

/// ff02::1 or a solicited-node group (ff02::1:ffXX:XXXX): the multicast groups a VR interface
/// joins; classification already checked the solicited-node target is ours.
#[inline]
fn our_group(a: u128) -> bool {
    a == ALL_NODES || a >> 24 == SOLICITED_NODES >> 24
}

impl Vr {
    /// Pass 1 for IPv6.
    #[inline]
    pub(super) fn ingress6(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Ingress {
        let l3 = m.l3 as usize;
        let f = buf.frame();
        let Some(&b0) = f.get(l3) else { return Ingress::Done(self.drop(VrDrop::Ip6BadLength)) };
        if b0 >> 4 != 6 {
            return Ingress::Done(self.drop(VrDrop::Ip6BadVersion));
        }
        let Ok(ip) = ipv6::Packet::new_checked(&f[l3..]) else {
            return Ingress::Done(self.drop(VrDrop::Ip6BadLength));
        };
        let len = ipv6::HEADER_LEN + ip.payload_len() as usize;
        let (src, dst, nh) =
            (u128::from(ip.src_addr()), u128::from(ip.dst_addr()), ip.next_header());
        buf.set_len(l3 + len);
        if is_multicast(dst) {
            if our_group(dst) && nh == ip_proto::ICMPV6 {
                return Ingress::Done(self.local6(buf, m, now));
            }
            // Link-local multicast (ff02::/16: OSPFv3, MLD, router discovery...) is control
            // traffic.
            if dst >> 112 == 0xff02 {
                if let Some(f) = self.punt(buf, m, now) {
                    return Ingress::Done(f);
                }
            }
            return Ingress::Done(self.drop(VrDrop::IpMulticast));
        }
        if is_multicast(src) || never_routed(src) || self.own.contains(src) {
            return Ingress::Done(self.drop(VrDrop::MartianSource));
        }
        if never_routed(dst) {
            return Ingress::Done(self.drop(VrDrop::MartianDestination));
        }
        Ingress::Lookup6(dst)
    }

    /// Pass 3 for IPv6; the fast path as for IPv4. Link-local addresses are never forwarded,
    /// so they take the slow path, where they are dropped.
    #[inline(always)]
    pub(super) fn forward6(
        &mut self,
        cx: &mut Burst,
        buf: &mut PktBuf,
        m: &Meta,
        nh: NextHop,
    ) -> Fate {
        let l3 = m.l3 as usize;
        let rw = &self.rewrite[nh as usize];
        if rw.epoch == self.neigh.epoch() && cx.now < rw.until {
            // Raw bytes, as IPv4's fast path (see `forward4`).
            let ip = &buf.frame()[l3..];
            let link_local = (ip[8] == 0xfe && ip[9] & 0xc0 == 0x80)
                || (ip[24] == 0xfe && ip[25] & 0xc0 == 0x80);
            if ip[7] > 1 && ip.len() <= rw.mtu as usize && !link_local {
                buf.frame_mut()[l3 + 7] -= 1;
                rw.apply(buf, l3);
                return Fate::Tx { port: rw.port, transit: true };
            }
        }
        self.forward6_slow(cx, buf, m, nh)
    }

    #[inline(never)]
    fn forward6_slow(&mut self, cx: &mut Burst, buf: &mut PktBuf, m: &Meta, nh: NextHop) -> Fate {
        let (l3, now) = (m.l3 as usize, cx.now);
        let adj = self.adj[nh as usize];
        if adj == Adj::Local {
            return self.local6(buf, m, now);
        }
        let ip = ipv6::Packet::new_unchecked(&buf.frame()[l3..]);
        let (src, dst, hl) = (u128::from(ip.src_addr()), u128::from(ip.dst_addr()), ip.hop_limit());
        // Link-local addresses are confined to their link (RFC 4291 §2.5.6): only ours are
        // delivered, none is forwarded, whatever a route says.
        if is_link_local(dst) {
            return self.drop(VrDrop::MartianDestination);
        }
        // RFC 4443 §3.1: a link-local source cannot be answered beyond its link, so the
        // packet cannot leave it: "beyond scope of source address".
        if is_link_local(src) {
            let (t, c) = (icmpv6::DEST_UNREACHABLE, BEYOND_SCOPE);
            return self.icmp6_error(buf, m, Icmp(t, c, 0), VrDrop::SourceBeyondScope, now);
        }
        let (iface, gw) = match adj {
            Adj::Glean(i) => (i, None),
            Adj::Via { iface, gw } => (iface, Some(gw)),
            Adj::Blackhole => return self.drop(VrDrop::Blackhole),
            Adj::Multi(p) => {
                let nh = p.pick(crate::flowhash::hash6(buf.frame(), l3));
                return self.forward6(cx, buf, m, nh);
            }
            Adj::Prohibit => {
                let (t, c) = (icmpv6::DEST_UNREACHABLE, icmpv6::ADMIN_PROHIBITED);
                return self.icmp6_error(buf, m, Icmp(t, c, 0), VrDrop::Prohibited, now);
            }
            Adj::None | Adj::Broadcast | Adj::Local | Adj::Unreachable => {
                let (t, c) = (icmpv6::DEST_UNREACHABLE, icmpv6::NO_ROUTE);
                return self.icmp6_error(buf, m, Icmp(t, c, 0), VrDrop::NoRoute, now);
            }
        };
        if hl <= 1 {
            let (t, c) = (icmpv6::TIME_EXCEEDED, icmpv6::HOP_LIMIT_EXCEEDED);
            return self.icmp6_error(buf, m, Icmp(t, c, 0), VrDrop::TtlExpired, now);
        }
        let mtu = self.ifaces[iface as usize].mtu;
        if buf.len() - l3 > mtu as usize {
            let t = icmpv6::PACKET_TOO_BIG;
            return self.icmp6_error(buf, m, Icmp(t, 0, mtu as u32), VrDrop::MtuExceeded, now);
        }
        ipv6::Packet::new_unchecked(&mut buf.frame_mut()[l3..]).set_hop_limit(hl - 1);
        let key = NKey::v6(iface, gw.unwrap_or(dst));
        self.output(buf, l3, nh, key, true, now)
    }

    /// A packet for one of the VR's addresses or groups.
    fn local6(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Fate {
        let l3 = m.l3 as usize;
        let ip = ipv6::Packet::new_unchecked(&buf.frame()[l3..]);
        let Ok(ul) = ip.upper_layer() else { return self.drop(VrDrop::Ip6BadExtHeader) };
        if ul.offset > ipv6::HEADER_LEN {
            if let Some(at) = routing_to_process(&buf.frame()[l3..]) {
                let (t, rest) = (icmpv6::PARAM_PROBLEM, at as u32);
                return self.icmp6_error(buf, m, Icmp(t, 0, rest), VrDrop::Ip6RoutingHeader, now);
            }
        }
        if ul.fragment.is_some() {
            return self.reassemble6(buf, m, now);
        }
        let (src, dst, hl) = (ip.src_addr(), ip.dst_addr(), ip.hop_limit());
        let multicast = is_multicast(dst.into());
        if ul.protocol != ip_proto::ICMPV6 {
            if let Some(f) = self.punt(buf, m, now) {
                return f;
            }
        }
        match ul.protocol {
            ip_proto::ICMPV6 => {
                let body = &buf.frame()[l3 + ul.offset..];
                let icmp = icmpv6::Packet::new_unchecked(body);
                if body.len() < icmpv6::HEADER_LEN || !icmp.verify_checksum(&src, &dst) {
                    return self.drop(VrDrop::IcmpMalformed);
                }
                match (icmp.msg_type(), icmp.code()) {
                    (icmpv6::ECHO_REQUEST, 0) if !multicast => {
                        self.echo6(buf, l3, ul.offset, m.iface, now)
                    }
                    (icmpv6::NEIGHBOR_SOLICIT, _) => self.solicit(buf, m, ul.offset, hl, now),
                    (icmpv6::NEIGHBOR_ADVERT, _) => self.advert(buf, m, ul.offset, hl, now),
                    _ => {
                        self.punt(buf, m, now).unwrap_or_else(|| self.drop(VrDrop::IcmpNotHandled))
                    }
                }
            }
            ip_proto::UDP if !multicast => {
                let (t, c) = (icmpv6::DEST_UNREACHABLE, icmpv6::PORT_UNREACHABLE);
                self.icmp6_error(buf, m, Icmp(t, c, 0), VrDrop::LocalPortUnreachable, now)
            }
            _ => self.drop(VrDrop::LocalUnsupported),
        }
    }

    /// A fragment for the VR: held until its datagram is whole (see [`reasm`]).
    #[cold]
    #[inline(never)]
    fn reassemble6(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Fate {
        let ip = &buf.frame()[m.l3 as usize..];
        let Some((fh, next_at)) = reasm::find_fragment6(ip) else {
            return self.drop(VrDrop::Ip6BadExtHeader);
        };
        let off_flags = u16::from_be_bytes([ip[fh + 2], ip[fh + 3]]);
        // RFC 8200 §4.5: a fragment with more to come must carry a multiple of 8 bytes, and no
        // fragment may reach past 65535 bytes of payload; the source hears which field is
        // wrong (Payload Length, Fragment Offset).
        let data = ip.len() - fh - 8;
        let more = off_flags & 1 != 0;
        let pointer = if more && !data.is_multiple_of(8) {
            Some(4)
        } else if fh - ipv6::HEADER_LEN + (off_flags & 0xfff8) as usize + data > u16::MAX as usize {
            Some(fh as u32 + 2)
        } else {
            None
        };
        if let Some(at) = pointer {
            let (t, r) = (icmpv6::PARAM_PROBLEM, VrDrop::LocalFragment);
            return self.icmp6_error(buf, m, Icmp(t, 0, at), r, now);
        }
        let p = ipv6::Packet::new_unchecked(ip);
        let key = reasm::Key {
            src: p.src_addr().into(),
            dst: p.dst_addr().into(),
            ident: u32::from_be_bytes([ip[fh + 4], ip[fh + 5], ip[fh + 6], ip[fh + 7]]),
            proto: 0,
            v6: true,
        };
        let f = reasm::Frag {
            key,
            off: (off_flags & 0xfff8) as usize,
            more,
            data: &ip[fh + 8..],
            unfrag: &ip[..fh],
            next_at,
            next: ip[fh],
        };
        let r = self.reasm.add(&f, now);
        match self.reassembled(r, buf, m.l3 as usize) {
            Some(fate) => fate,
            None => self.local6(buf, m, now),
        }
    }

    /// Echo reply in place; extension headers of the request are not echoed.
    fn echo6(&mut self, buf: &mut PktBuf, l3: usize, ul: usize, in_if: IfaceId, now: u64) -> Fate {
        let ip = ipv6::Packet::new_unchecked(&buf.frame()[l3..]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let icmp_len = buf.len() - l3 - ul;
        let f = buf.frame_mut();
        f.copy_within(l3 + ul.., l3 + ipv6::HEADER_LEN);
        write_ip6_header(&mut f[l3..], dst, src, icmp_len, 64);
        let mut icmp = icmpv6::Packet::new_unchecked(
            &mut f[l3 + ipv6::HEADER_LEN..l3 + ipv6::HEADER_LEN + icmp_len],
        );
        icmp.set_msg_type(icmpv6::ECHO_REPLY);
        icmp.fill_checksum(&dst, &src);
        buf.set_len(l3 + ipv6::HEADER_LEN + icmp_len);
        self.counters.local_in += 1;
        self.counters.echo_replies += 1;
        self.send_local6(buf, l3, src.into(), in_if, now)
    }

    /// Drops the packet for `reason` and, where RFC 4443 §2.4 and the rate limit allow, turns
    /// its buffer into an ICMPv6 error back to its source.
    fn icmp6_error(
        &mut self,
        buf: &mut PktBuf,
        m: &Meta,
        e: Icmp,
        reason: VrDrop,
        now: u64,
    ) -> Fate {
        self.counters.drops[reason as usize] += 1;
        self.icmp6_reply(buf, m, e.0, e.1, e.2, now)
    }

    /// The answer half of [`Vr::icmp6_error`], for a packet whose drop is already counted.
    pub(super) fn icmp6_reply(
        &mut self,
        buf: &mut PktBuf,
        m: &Meta,
        kind: u8,
        code: u8,
        rest: u32,
        now: u64,
    ) -> Fate {
        let l3 = m.l3 as usize;
        let ip = ipv6::Packet::new_unchecked(&buf.frame()[l3..]);
        // What follows a non-first fragment is the middle of a message, not its type: as
        // Linux, such a fragment is not taken for an error.
        let about_error = match ip.upper_layer() {
            Ok(ul)
                if ul.protocol == ip_proto::ICMPV6 && ul.fragment.is_none_or(|f| f.offset == 0) =>
            {
                buf.frame().get(l3 + ul.offset).is_none_or(|&t| icmpv6::is_error(t))
            }
            Ok(_) => false,
            Err(_) => true,
        };
        let orig_src = ip.src_addr();
        let Some(src) = self.icmp6_source(m.iface) else {
            self.counters.icmp_errors_suppressed += 1;
            return Fate::Done;
        };
        if about_error {
            self.counters.icmp_errors_suppressed += 1;
            return Fate::Done;
        }
        if !self.icmp_allowed(now) {
            return Fate::Done;
        }
        let hdr = ipv6::HEADER_LEN + icmpv6::HEADER_LEN;
        let quote = (buf.len() - l3).min(ICMP6_ERROR_MAX - hdr);
        let (storage, off) = buf.storage_mut();
        let at = off + l3;
        storage.copy_within(at..at + quote, at + hdr);
        let pkt = &mut storage[at..at + hdr + quote];
        write_ip6_header(pkt, src, orig_src, icmpv6::HEADER_LEN + quote, 64);
        let mut icmp = icmpv6::Packet::new_unchecked(&mut pkt[ipv6::HEADER_LEN..]);
        icmp.set_msg_type(kind);
        icmp.set_code(code);
        icmp.set_rest_of_header(rest);
        icmp.fill_checksum(&src, &orig_src);
        buf.set_window(off, l3 + hdr + quote);
        self.counters.icmp_errors += 1;
        self.send_local6(buf, l3, orig_src.into(), m.iface, now)
    }

    /// Source of the VR's ICMPv6 errors: a global address of the receiving interface, else of
    /// any interface, else the receiving interface's link-local address.
    fn icmp6_source(&self, iface: u16) -> Option<Ipv6Addr> {
        let global =
            |i: &super::Iface| i.v6.iter().map(|n| n.addr()).find(|a| !is_link_local((*a).into()));
        let f = self.ifaces.get(iface as usize)?;
        global(f).or_else(|| self.ifaces.iter().find_map(global)).or(Some(f.ll))
    }

    /// Routes a packet the VR made itself towards `dst`. A link-local destination is on the
    /// link the packet that caused this one came in on (RFC 4291 §2.5.6); no route covers it.
    fn send_local6(
        &mut self,
        buf: &mut PktBuf,
        l3: usize,
        dst: u128,
        in_if: IfaceId,
        now: u64,
    ) -> Fate {
        let nh = if is_link_local(dst) {
            self.glean[in_if as usize]
        } else {
            self.r6.load().lookup(dst)
        };
        let nh = match self.adj[nh as usize] {
            Adj::Multi(p) => p.pick(crate::flowhash::hash6(buf.frame(), l3)),
            _ => nh,
        };
        let (iface, key) = match self.adj[nh as usize] {
            Adj::Glean(i) => (i, NKey::v6(i, dst)),
            Adj::Via { iface, gw } => (iface, NKey::v6(iface, gw)),
            _ => return self.drop_out(VrDrop::NoRoute, false),
        };
        let mtu = self.ifaces[iface as usize].mtu as usize;
        if buf.len() - l3 > mtu {
            return self.fragment_local6(buf, l3, nh, key, mtu, now);
        }
        self.output(buf, l3, nh, key, false, now)
    }

    /// A packet the VR made that exceeds the egress MTU (an echo reply to a reassembled
    /// request): a source fragments what it originates (RFC 8200 §4.5), so it leaves in
    /// fragments, the first from `buf`, the rest from the VR's spill buffers at the next drain
    /// (the buffers IPv4's local fragmentation uses). Dropped if it needs more fragments than
    /// those hold, or the link's MTU is below IPv6's minimum.
    #[cold]
    #[inline(never)]
    fn fragment_local6(
        &mut self,
        buf: &mut PktBuf,
        l3: usize,
        nh: NextHop,
        key: NKey,
        mtu: usize,
        now: u64,
    ) -> Fate {
        let whole = buf.len() - l3;
        let payload = whole - ipv6::HEADER_LEN;
        let step = fragment_step6(mtu);
        if mtu < IPV6_MIN_MTU as usize
            || (payload - step).div_ceil(step) > super::SPILL - self.spill_n
        {
            return self.drop_out(VrDrop::MtuExceeded, false);
        }
        if self.frag_copy.is_empty() {
            self.fragment_buffers();
        }
        self.frag_copy[..whole].copy_from_slice(&buf.frame()[l3..]);
        let ident = self.next_ident6();
        let n =
            write_fragment6(&self.frag_copy[..whole], 0, step, ident, &mut buf.frame_mut()[l3..]);
        buf.set_len(l3 + n);
        self.counters.fragments_sent += 1;
        let fate = self.output(buf, l3, nh, key, false, now);
        let hlen = ipv6::HEADER_LEN + FRAG_HDR;
        self.spill_fragments((step, payload, hlen), nh, key, now, |copy, at, n, p| {
            write_fragment6(&copy[..whole], at, n, ident, p);
        });
        fate
    }

    /// A neighbor solicitation (RFC 4861 §7.1.1 validation, §7.2.4 answer): learn the sender,
    /// answer for our own target with an advertisement built in place.
    fn solicit(&mut self, buf: &mut PktBuf, m: &Meta, ul: usize, hl: u8, now: u64) -> Fate {
        let l3 = m.l3 as usize;
        let f = buf.frame();
        let ip = ipv6::Packet::new_unchecked(&f[l3..]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let Ok(ns) = ndp::NeighborSolicit::new_checked(&f[l3 + ul..]) else {
            return self.drop(VrDrop::NdpInvalid);
        };
        let target = ns.target_addr();
        let sll = ndp::source_link_addr(ns.options());
        let unspecified = src.is_unspecified();
        let ifc = &self.ifaces[m.iface as usize];
        if hl != 255
            || f[l3 + ul + 1] != 0
            || is_multicast(target.into())
            || ns.options().any(|o| o.is_err())
            || (unspecified && (sll.is_some() || dst != ndp::solicited_node(&target)))
            || !ifc.has_v6(target)
        {
            return self.drop(VrDrop::NdpInvalid);
        }
        let (port, vlan, mac) = (ifc.port, ifc.vlan, ifc.mac);
        let eth_src = MacAddr::from_bytes(&f[6..12]);
        if let (false, Some(ll)) = (unspecified, sll) {
            let how = Learn { create: true, replace: true, confirmed: false };
            self.learn(NKey::v6(m.iface, src.into()), ll, how, now);
        }
        // A duplicate-address probe (unspecified source) is answered to all nodes.
        let (to, to_mac) = if unspecified {
            (Ipv6Addr::from(ALL_NODES), ndp::multicast_mac(&Ipv6Addr::from(ALL_NODES)))
        } else {
            (src, sll.unwrap_or(eth_src))
        };
        let l3 = l2::write(buf, l3, vlan, to_mac, mac, IP6_ETH);
        let (storage, off) = buf.storage_mut();
        let at = off + l3;
        let body = &mut storage[at + ipv6::HEADER_LEN..];
        let n = ndp::emit_neighbor_advert(body, target, (true, !unspecified, true), Some(mac));
        icmpv6::Packet::new_unchecked(&mut body[..n]).fill_checksum(&target, &to);
        write_ip6_header(&mut storage[at..], target, to, n, 255);
        buf.set_window(off, l3 + ipv6::HEADER_LEN + n);
        self.counters.local_in += 1;
        self.counters.neighbor_replies += 1;
        Fate::Tx { port, transit: false }
    }

    /// A neighbor advertisement (RFC 4861 §7.1.2): updates an existing entry (§7.2.5), or makes
    /// one if it answers a solicitation the table sent lately whose incomplete entry was evicted
    /// meanwhile (a flood may churn through the incomplete entries faster than real neighbors
    /// answer). That keeps §7.2.5's intent: it answers our question.
    fn advert(&mut self, buf: &mut PktBuf, m: &Meta, ul: usize, hl: u8, now: u64) -> Fate {
        let l3 = m.l3 as usize;
        let f = buf.frame();
        let dst = ipv6::Packet::new_unchecked(&f[l3..]).dst_addr();
        let Ok(na) = ndp::NeighborAdvert::new_checked(&f[l3 + ul..]) else {
            return self.drop(VrDrop::NdpInvalid);
        };
        let target = na.target_addr();
        if hl != 255
            || f[l3 + ul + 1] != 0
            || is_multicast(target.into())
            || (is_multicast(dst.into()) && na.solicited_flag())
            || na.options().any(|o| o.is_err())
        {
            return self.drop(VrDrop::NdpInvalid);
        }
        let key = NKey::v6(m.iface, target.into());
        let solicited = na.solicited_flag();
        if let Some(ll) = ndp::target_link_addr(na.options()) {
            let create = solicited && self.neigh.probed_recently(key, now);
            let how = Learn { create, replace: na.override_flag(), confirmed: solicited };
            self.learn(key, ll, how, now);
        } else if let Some(ll) = self.neigh.known_mac(key).filter(|_| solicited) {
            // The answer to a unicast probe may leave the option out (RFC 4861 §7.2.4; Linux
            // does): the address is the one known, and a solicited answer confirms it
            // (§7.2.5). Without this a stale neighbor that answers every probe would fail.
            let how = Learn { create: false, replace: false, confirmed: true };
            self.learn(key, ll, how, now);
        }
        // The mirror's kernel learns its neighbors from the advertisements its own
        // solicitations drew.
        if let Some(f) = self.punt(buf, m, now) {
            return f;
        }
        self.counters.local_in += 1;
        Fate::Done
    }

    /// Writes a neighbor solicitation for `key` into `buf`: multicast to the solicited-node
    /// group, or unicast to a MAC already known when re-checking a stale entry.
    pub(super) fn solicit_for(
        &mut self,
        buf: &mut PktBuf,
        key: NKey,
        unicast: Option<MacAddr>,
    ) -> Fate {
        let f = &self.ifaces[key.iface as usize];
        let (port, vlan, mac, src) = (f.port, f.vlan, f.mac, f.ll);
        let target = Ipv6Addr::from(key.ip);
        let (dst, dst_mac) = match unicast {
            Some(m) => (target, m),
            None => {
                let g = ndp::solicited_node(&target);
                (g, ndp::multicast_mac(&g))
            }
        };
        buf.reset();
        buf.set_len(l2::ETH_LEN);
        let l3 = l2::write(buf, l2::ETH_LEN, vlan, dst_mac, mac, IP6_ETH);
        let (storage, off) = buf.storage_mut();
        let at = off + l3;
        let body = &mut storage[at + ipv6::HEADER_LEN..];
        let n = ndp::emit_neighbor_solicit(body, target, Some(mac));
        icmpv6::Packet::new_unchecked(&mut body[..n]).fill_checksum(&src, &dst);
        write_ip6_header(&mut storage[at..], src, dst, n, 255);
        buf.set_window(off, l3 + ipv6::HEADER_LEN + n);
        self.counters.neighbor_requests += 1;
        Fate::Tx { port, transit: false }
    }
}

/// RFC 5095 §3, RFC 8200 §4.4: the VR processes no Routing Header type (type 0 is deprecated
/// for its amplification attacks, and it implements no other), so one that still has segments
/// left in a packet addressed to it is an error. Returns the offset of its Routing Type octet
/// (for Parameter Problem's pointer); `None` if there is no such header (one with no segments
/// left is ignored). `ip` is a packet [`ipv6::Packet::upper_layer`] accepted: every header
/// before the upper layer lies within it.
fn routing_to_process(ip: &[u8]) -> Option<usize> {
    let mut next = ip[6];
    let mut at = ipv6::HEADER_LEN;
    loop {
        let len = match next {
            ip_proto::HOPOPTS | ip_proto::DSTOPTS => (*ip.get(at + 1)? as usize + 1) * 8,
            ip_proto::ROUTING => {
                let h = ip.get(at..at + 4)?;
                if h[3] > 0 {
                    return Some(at + 2);
                }
                (h[1] as usize + 1) * 8
            }
            ip_proto::AH => (*ip.get(at + 1)? as usize + 2) * 4,
            // A Routing header comes before any Fragment header (RFC 8200 §4.1); what follows
            // a fragment may not be a header at all.
            _ => return None,
        };
        next = *ip.get(at)?;
        at += len;
    }
}

/// The fragment data each of a packet's fragments carries on a link of `mtu` bytes (all but
/// the last): as much as fits after the IPv6 and Fragment headers, in whole 8-byte units.
fn fragment_step6(mtu: usize) -> usize {
    (mtu - ipv6::HEADER_LEN - FRAG_HDR) & !7
}

/// Writes into `out` the fragment of `whole` (an IPv6 packet the VR made: no extension
/// headers, so its unfragmentable part is the fixed header) that carries payload bytes
/// `at..at + n` (`at` a multiple of 8): the header with Next Header Fragment and this
/// fragment's Payload Length, a Fragment header (RFC 8200 §4.5: the original Next Header, the
/// offset in 8-byte units, M unless this is the last, `ident`), then the bytes. Returns the
/// fragment's length.
fn write_fragment6(whole: &[u8], at: usize, n: usize, ident: u32, out: &mut [u8]) -> usize {
    let h = ipv6::HEADER_LEN;
    let more = at + n < whole.len() - h;
    out[..h].copy_from_slice(&whole[..h]);
    out[4..6].copy_from_slice(&((FRAG_HDR + n) as u16).to_be_bytes());
    out[6] = ip_proto::FRAGMENT;
    let f = &mut out[h..h + FRAG_HDR];
    f[0] = whole[6];
    f[1] = 0;
    f[2..4].copy_from_slice(&(at as u16 | u16::from(more)).to_be_bytes());
    f[4..8].copy_from_slice(&ident.to_be_bytes());
    out[h + FRAG_HDR..h + FRAG_HDR + n].copy_from_slice(&whole[h + at..h + at + n]);
    h + FRAG_HDR + n
}

/// Writes an IPv6 header carrying an ICMPv6 payload of `payload_len` bytes.
fn write_ip6_header(p: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, payload_len: usize, hop_limit: u8) {
    let repr = ipv6::Ipv6Repr {
        src,
        dst,
        next_header: ip_proto::ICMPV6,
        payload_len: payload_len as u16,
        hop_limit,
    };
    repr.emit(&mut ipv6::Packet::new_unchecked(&mut p[..ipv6::HEADER_LEN]));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> u128 {
        s.parse::<Ipv6Addr>().unwrap().into()
    }

    /// A 2,048-byte echo reply (2001:db8::1 to 2001:db8::10) over a 1500-byte link: two
    /// fragments, byte for byte, that put back together are the reply.
    #[test]
    fn fragments_of_a_reply_over_the_mtu() {
        let mut whole = vec![0x60, 0, 0, 0, 0x08, 0x08, 58, 64];
        whole.extend_from_slice(&Ipv6Addr::from(a("2001:db8::1")).octets());
        whole.extend_from_slice(&Ipv6Addr::from(a("2001:db8::10")).octets());
        whole.extend((0..2056u32).map(|i| (i * 7) as u8));
        assert_eq!(whole.len(), 40 + 2056);
        let step = fragment_step6(1500);
        assert_eq!(step, 1448, "1500 - 40 - 8 = 1452, down to a multiple of 8");
        let mut got = Vec::new();
        let mut at = 0;
        while at < 2056 {
            let n = step.min(2056 - at);
            let mut out = [0xaau8; 1600];
            let len = write_fragment6(&whole, at, n, 0x0102_0304, &mut out);
            assert_eq!(len, 48 + n);
            got.push(out[..len].to_vec());
            at += n;
        }
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|f| f.len() <= 1500));
        // Fixed header: Payload Length 8 + data, Next Header 44, the rest as the reply's.
        assert_eq!(got[0][..8], [0x60, 0, 0, 0, 0x05, 0xb0, 44, 64]);
        assert_eq!(got[1][..8], [0x60, 0, 0, 0, 0x02, 0x68, 44, 64]);
        assert!(got.iter().all(|f| f[8..40] == whole[8..40]));
        // Fragment header: Next Header 58, offset 0 with M, then 1448 (181 units) without.
        assert_eq!(got[0][40..48], [58, 0, 0x00, 0x01, 1, 2, 3, 4]);
        assert_eq!(got[1][40..48], [58, 0, 0x05, 0xa8, 1, 2, 3, 4]);
        assert_eq!(((got[1][42] as usize) << 8 | got[1][43] as usize) >> 3, 181);
        // Reassembled (RFC 8200 §4.5): the fixed header with the original Next Header and
        // Payload Length, then the fragments' data in order.
        let mut back = got[0][..40].to_vec();
        back[4..6].copy_from_slice(&2056u16.to_be_bytes());
        back[6] = got[0][40];
        for f in &got {
            back.extend_from_slice(&f[48..]);
        }
        assert_eq!(back, whole);
        // A link of IPv6's minimum MTU: 1232 bytes a fragment.
        assert_eq!(fragment_step6(1280), 1232);
        assert_eq!(fragment_step6(1283), 1232);
    }

    #[test]
    fn address_classes() {
        assert!(is_multicast(a("ff02::1")) && !is_multicast(a("fe80::1")));
        assert!(
            is_link_local(a("fe80::1"))
                && is_link_local(a("febf::1"))
                && !is_link_local(a("fec0::1"))
        );
        assert!(
            never_routed(a("::")) && never_routed(a("::1")) && never_routed(a("::ffff:1.2.3.4"))
        );
        assert!(!never_routed(a("2001:db8::1")) && !never_routed(a("::2")));
        assert!(our_group(a("ff02::1")) && our_group(a("ff02::1:ff00:1")));
        assert!(!our_group(a("ff02::2")) && !our_group(a("ff05::1:ff00:1")));
    }
}
