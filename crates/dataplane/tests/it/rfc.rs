//! RFC behaviours a router owes beyond plain forwarding, each with byte-exact frames and every
//! counter asserted: IPv4 options (RFC 791, RFC 1812 §5.2.5, §5.3.13), IPv6 routing headers
//! (RFC 5095, RFC 8200 §4.4), host unreachable when resolution fails (RFC 1812 §4.3.3.1),
//! sources beyond their scope (RFC 4443, RFC 3927 §7) and reassembly of datagrams addressed to
//! the VR (RFC 1812 §4.2.2.8, RFC 8200 §4.5, RFC 5722).

use crate::common;

use common::*;
use dataplane::VrDrop;
use etherparse::{icmpv4, icmpv6, Icmpv4Type, Icmpv6Type};

const RINGS: [usize; 3] = [1024, 1024, 1024];

fn lab() -> Lab {
    Lab::new(&[base_vr()], &RINGS)
}

/// What the VR writes as a timestamp at `now` (RFC 791's non-standard time: the high-order
/// bit set, milliseconds of a day).
fn ts_at(now: u64) -> [u8; 4] {
    (((now / MS) % 86_400_000) as u32 | 0x8000_0000).to_be_bytes()
}

fn param_problem4(ptr: u8) -> Icmpv4Type {
    Icmpv4Type::ParameterProblem(icmpv4::ParameterProblemHeader::PointerIndicatesError(ptr))
}

// ---------------------------------------------------------------------------------------------
// IPv4 options

/// A packet with Record Route, Timestamp (address and timestamp) and a Router Alert forwarded
/// from lan to the gateway on wan: the router writes wan's address and its time into the next
/// free slots, advances the pointers and fixes the checksum; the Router Alert is untouched. A
/// packet without options between them still takes the fast path unchanged. Bursts of 1, 2
/// and 257.
#[test]
fn record_route_and_timestamp_filled_in_when_forwarded() {
    let mut lab = lab();
    lab.now = 1234 * MS;
    let ts = ts_at(lab.now);
    let wan = a4("10.0.1.1");
    // RR: 3 slots, one filled by an earlier hop. TS flag 1 (address + time): 2 entries.
    // Router Alert (148, 4 bytes). NOP pad to a multiple of 4.
    let mut opts = vec![7, 15, 8, 192, 0, 2, 99, 0, 0, 0, 0, 0, 0, 0, 0];
    opts.extend_from_slice(&[68, 20, 5, 0x01]);
    opts.extend_from_slice(&[0; 16]);
    opts.extend_from_slice(&[148, 4, 0, 0, 1]);
    assert_eq!(opts.len(), 40);
    let mut want_opts = opts.clone();
    want_opts[2] = 12;
    want_opts[7..11].copy_from_slice(&wan);
    want_opts[17] = 13;
    want_opts[19..23].copy_from_slice(&wan);
    want_opts[23..27].copy_from_slice(&ts);
    for n in [1usize, 2, 257] {
        let mut frames = Vec::new();
        let mut want = Vec::new();
        for k in 0..n {
            let mut p = udp4_pkt("10.0.0.10", "8.8.8.8", 64, &[k as u8; 20]);
            p.id = k as u16;
            if k % 3 == 1 {
                // No options: the fast path, unchanged.
                frames.push(to_vr(M0, H0, None, &p));
                want.push(eth(GW, M1, None, ET_IP4, &p.hop().bytes()));
                continue;
            }
            p.options = opts.clone();
            frames.push(to_vr(M0, H0, None, &p));
            let out = Ip4 { options: want_opts.clone(), ..p.hop() };
            want.push(eth(GW, M1, None, ET_IP4, &out.bytes()));
        }
        lab.send(0, &frames);
        lab.run();
        lab.expect(1, &want);
        lab.expect_silence();
        for (f, o) in frames.iter().zip(&want) {
            lab.rx(0, f);
            lab.fwd(0, o);
        }
        lab.check(&format!("burst of {n}"));
    }
}

/// Timestamp with prespecified addresses (flag 3) registers only where the next address is
/// the router's own; timestamps-only (flag 0) always does; a full option counts the hop in its
/// overflow field; a full Record Route is left alone.
#[test]
fn timestamp_flags_full_options_and_overflow() {
    let mut lab = lab();
    lab.now = 86_400_000 * MS + 77 * MS; // a day and 77 ms: the day wraps
    let ts = ts_at(lab.now);
    assert_eq!(ts, (0x8000_0000u32 | 77).to_be_bytes());
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = {
        let mut v = Vec::new();
        // Flag 3, next address is wan's (10.0.1.1): time goes in after it.
        let o = vec![68, 12, 5, 0x03, 10, 0, 1, 1, 0, 0, 0, 0];
        let mut w = o.clone();
        w[2] = 13;
        w[8..12].copy_from_slice(&ts);
        v.push(("prespecified, ours", o, w));
        // Flag 3, lan's address is ours too (any of the router's addresses).
        let o = vec![68, 12, 5, 0x03, 10, 0, 0, 1, 0, 0, 0, 0];
        let mut w = o.clone();
        w[2] = 13;
        w[8..12].copy_from_slice(&ts);
        v.push(("prespecified, another of ours", o, w));
        // Flag 3, someone else's address: untouched.
        let o = vec![68, 12, 5, 0x03, 192, 0, 2, 1, 0, 0, 0, 0];
        v.push(("prespecified, not ours", o.clone(), o));
        // Flag 0: time only.
        let o = vec![68, 8, 5, 0x00, 0, 0, 0, 0];
        let mut w = o.clone();
        w[2] = 9;
        w[4..8].copy_from_slice(&ts);
        v.push(("timestamps only", o, w));
        // Full timestamp (pointer past the length), overflow 2 -> 3.
        let o = vec![68, 8, 9, 0x21, 1, 2, 3, 4];
        let mut w = o.clone();
        w[3] = 0x31;
        v.push(("full timestamp", o, w));
        // Full record route: unchanged.
        let o = vec![7, 7, 8, 1, 2, 3, 4, 1];
        v.push(("full record route", o.clone(), o));
        v
    };
    for (what, o, w) in cases {
        let p = Ip4 { options: o, ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"opts") };
        let f = to_vr(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        let out = eth(GW, M1, None, ET_IP4, &Ip4 { options: w, ..p.hop() }.bytes());
        lab.expect(1, &[&out]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.fwd(0, &out);
        lab.check(what);
    }
}

/// Malformed options are answered with Parameter Problem pointing at the octet in error, and
/// the packet is dropped (`ip4_bad_option`) — whether it was to be forwarded or delivered.
/// The first case is the one that used to be forwarded: an option whose length is 0xff.
#[test]
fn ip4_bad_option() {
    let mut lab = lab();
    let h0 = a4("10.0.0.10");
    let cases: Vec<(&str, &str, Vec<u8>, u8)> = vec![
        ("length 0xff runs past the header", "8.8.8.8", vec![0x94, 0xff, 0, 0], 21),
        ("length 1", "8.8.8.8", vec![1, 0x94, 1, 0], 22),
        ("length 0", "8.8.8.8", vec![0x83, 0, 0, 0], 21),
        ("no room for the length octet", "8.8.8.8", vec![1, 1, 1, 0x83], 23),
        ("record route pointer 3", "8.8.8.8", vec![7, 7, 3, 0, 0, 0, 0, 0], 22),
        ("record route slot cut short", "8.8.8.8", vec![7, 8, 6, 0, 0, 0, 0, 0], 22),
        ("timestamp pointer 4", "8.8.8.8", vec![68, 8, 4, 0, 0, 0, 0, 0], 22),
        ("timestamp flag 2", "8.8.8.8", vec![68, 8, 5, 2, 0, 0, 0, 0], 23),
        ("timestamp overflow wraps", "8.8.8.8", vec![68, 8, 9, 0xf0, 0, 0, 0, 0], 23),
        ("to the VR itself", "10.0.0.1", vec![0x94, 0xff, 0, 0], 21),
    ];
    for (id, (what, dst, o, ptr)) in cases.into_iter().enumerate() {
        let p = Ip4 { options: o, ..udp4_pkt("10.0.0.10", dst, 64, b"bad") };
        let f = to_vr(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        let err = icmp4_error("10.0.0.1", h0, id as u16 + 1, param_problem4(ptr), &p.bytes());
        lab.expect(0, &[eth(H0, M0, None, ET_IP4, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::Ip4BadOption);
        lab.c(0).icmp_errors += 1;
        lab.check(what);
    }
    // An ICMP error about an ICMP error is never sent (RFC 1812 §4.3.2.7): dropped silently.
    let inner = icmp4_error("10.0.0.10", a4("10.0.0.1"), 1, port_unreach4(), &[0x45; 28]);
    let p = Ip4 {
        options: vec![0x94, 0xff, 0, 0],
        ..Ip4::new("10.0.0.10", "8.8.8.8", 64, 1, inner[20..].to_vec())
    };
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::Ip4BadOption);
    lab.c(0).icmp_errors_suppressed += 1;
    lab.check("about an error");
}

/// Each packet of a burst of 1, 2 and 257 with a malformed option is answered, within the
/// ICMP error rate limit; the rest are counted as suppressed.
#[test]
fn bad_options_in_bursts_are_rate_limited() {
    let mut lab = lab();
    let h0 = a4("10.0.0.10");
    let burst = dataplane::config::VrLimits::default().icmp_errors_burst as usize;
    let mut ident = 0u16;
    for n in [1usize, 2, 257] {
        lab.now += 3_600_000 * MS; // the bucket refills
        let pkts: Vec<Ip4> = (0..n)
            .map(|k| Ip4 {
                id: k as u16,
                options: vec![0x94, 0xff, 0, 0],
                ..udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"bad")
            })
            .collect();
        let frames: Vec<Vec<u8>> = pkts.iter().map(|p| to_vr(M0, H0, None, p)).collect();
        lab.send(0, &frames);
        lab.run();
        let answered = n.min(burst);
        let want: Vec<Vec<u8>> = pkts[..answered]
            .iter()
            .map(|p| {
                ident += 1;
                eth(
                    H0,
                    M0,
                    None,
                    ET_IP4,
                    &icmp4_error("10.0.0.1", h0, ident, param_problem4(21), &p.bytes()),
                )
            })
            .collect();
        lab.expect(0, &want);
        lab.expect_silence();
        for f in &frames {
            lab.rx(0, f);
            lab.drop(0, VrDrop::Ip4BadOption);
        }
        lab.c(0).icmp_errors += answered as u64;
        lab.c(0).icmp_errors_suppressed += (n - answered) as u64;
        lab.check(&format!("burst of {n}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Sources beyond their scope

/// RFC 3927 §7: a router must not forward a packet with an IPv4 link-local (169.254/16) source
/// or destination, whatever its routes say; one addressed to the router's own link-local
/// address is delivered.
#[test]
fn ipv4_link_local_is_never_forwarded() {
    let mut c = base_vr();
    c.interfaces[0].ipv4.push("169.254.7.1/16".parse().unwrap());
    c.routes.push(via("0.0.0.0/0", "10.0.1.2"));
    c.neighbors.push(neigh(0, "169.254.7.7", H0));
    let mut lab = Lab::new(&[c], &RINGS);
    let cases = [
        ("link-local source", "169.254.7.7", "8.8.8.8", VrDrop::MartianSource),
        (
            "link-local source, connected destination",
            "169.254.7.7",
            "10.0.2.2",
            VrDrop::MartianSource,
        ),
        ("link-local destination", "10.0.0.10", "169.254.9.9", VrDrop::MartianDestination),
        (
            "our own link-local address as source",
            "169.254.7.1",
            "169.254.7.1",
            VrDrop::MartianSource,
        ),
    ];
    for (what, src, dst, reason) in cases {
        let f = to_vr(M0, H0, None, &udp4_pkt(src, dst, 64, b"ll"));
        lab.send(0, &[&f]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, reason);
        lab.check(what);
    }
    // To the VR's own link-local address: delivered (an echo is answered).
    let req = Ip4::new("169.254.7.7", "169.254.7.1", 64, 1, echo4_req(5, 1, b"hi"));
    let f = to_vr(M0, H0, None, &req);
    lab.send(0, &[&f]);
    lab.run();
    let rep =
        Ip4 { id: 1, ..Ip4::new("169.254.7.1", "169.254.7.7", 64, 1, echo4_rep(5, 1, b"hi")) };
    lab.expect(0, &[eth(H0, M0, None, ET_IP4, &rep.bytes())]);
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("echo to our link-local address");
    // To another of its addresses: delivered too (only forwarding is forbidden).
    let req = Ip4::new("169.254.7.7", "10.0.0.1", 64, 1, echo4_req(5, 2, b"hi"));
    let f = to_vr(M0, H0, None, &req);
    lab.send(0, &[&f]);
    lab.run();
    let rep = Ip4 { id: 2, ..Ip4::new("10.0.0.1", "169.254.7.7", 64, 1, echo4_rep(5, 2, b"hi")) };
    lab.expect(0, &[eth(H0, M0, None, ET_IP4, &rep.bytes())]);
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("from a link-local source to another of our addresses");
}

fn beyond_scope6() -> Icmpv6Type {
    Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::BeyondScope)
}

/// A packet from a link-local source that a route would send out of another interface (or
/// that no route covers) is answered with Destination Unreachable, beyond scope of source
/// address (RFC 4443 §3.1 code 2), back on its own link, and dropped (`source_beyond_scope`).
/// One for the VR's own address is delivered. Bursts of 1, 2 and 257, within the ICMP rate
/// limit.
#[test]
fn source_beyond_scope() {
    let mut c = base_vr();
    c.neighbors.push(neigh(0, "fe80::5", H0));
    let mut lab = Lab::new(&[c], &RINGS);
    let ll = a6("fe80::5");
    for (what, dst) in [("routed via wan", "2001:4860::1"), ("no route", "2a00::1")] {
        let p = udp6_pkt("fe80::5", dst, 64, b"scope");
        let f = to_vr6(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        let err = icmp6_error("2001:db8::1", ll, beyond_scope6(), &p.bytes());
        lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::SourceBeyondScope);
        lab.c(0).icmp_errors += 1;
        lab.check(what);
    }
    // To the VR itself: answered, on the link.
    let r = a6("2001:db8::1");
    let req = Ip6::new(ll, r, 64, 58, echo6_req(ll, r, 9, 1, b"in scope"));
    let f = to_vr6(M0, H0, None, &req);
    lab.send(0, &[&f]);
    lab.run();
    let rep = Ip6::new(r, ll, 64, 58, echo6_rep(r, ll, 9, 1, b"in scope"));
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &rep.bytes())]);
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("to the VR itself");
    let burst = dataplane::config::VrLimits::default().icmp_errors_burst as usize;
    for n in [1usize, 2, 257] {
        lab.now += 3_600_000 * MS;
        let pkts: Vec<Ip6> =
            (0..n).map(|k| udp6_pkt("fe80::5", "2001:4860::1", 64, &[k as u8; 3])).collect();
        let frames: Vec<Vec<u8>> = pkts.iter().map(|p| to_vr6(M0, H0, None, p)).collect();
        lab.send(0, &frames);
        lab.run();
        let answered = n.min(burst);
        let want: Vec<Vec<u8>> = pkts[..answered]
            .iter()
            .map(|p| {
                eth(
                    H0,
                    M0,
                    None,
                    ET_IP6,
                    &icmp6_error("2001:db8::1", ll, beyond_scope6(), &p.bytes()),
                )
            })
            .collect();
        lab.expect(0, &want);
        lab.expect_silence();
        for f in &frames {
            lab.rx(0, f);
            lab.drop(0, VrDrop::SourceBeyondScope);
        }
        lab.c(0).icmp_errors += answered as u64;
        lab.c(0).icmp_errors_suppressed += (n - answered) as u64;
        lab.check(&format!("burst of {n}"));
    }
}

// ---------------------------------------------------------------------------------------------
// IPv6 routing headers

/// A Routing header: `rtype`, `left` segments left, `addrs` addresses (type 0's layout; the
/// VR reads only the first four octets).
fn routing_header(next: u8, rtype: u8, left: u8, addrs: &[[u8; 16]]) -> Vec<u8> {
    let mut v = vec![next, (2 * addrs.len()) as u8, rtype, left, 0, 0, 0, 0];
    for a in addrs {
        v.extend_from_slice(a);
    }
    v
}

fn param_problem6(pointer: u32) -> Icmpv6Type {
    Icmpv6Type::ParameterProblem(icmpv6::ParameterProblemHeader {
        code: icmpv6::ParameterProblemCode::ErroneousHeaderField,
        pointer,
    })
}

/// RFC 5095: a packet addressed to the VR with a type 0 Routing header that still has
/// segments left is answered with Parameter Problem (code 0) pointing at the routing type, and
/// dropped (`ip6_routing_header`); so is any other routing type with segments left (RFC 8200
/// §4.4: the VR processes none). With no segments left the header is ignored and the packet
/// handled as usual. A transit packet's routing header is not the VR's to read.
#[test]
fn ip6_routing_header() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let far = a6("2001:db8:ffff::1");
    let udp = udp6(h, r, 4000, 5000, b"rh");
    let cases: Vec<(&str, Vec<u8>, u8, u32)> = vec![
        ("type 0, one segment left", routing_header(17, 0, 1, &[far]), 43, 42),
        ("type 0, two segments left", routing_header(17, 0, 2, &[far, far]), 43, 42),
        ("type 4 (SRH), one left", routing_header(17, 4, 1, &[far]), 43, 42),
        (
            "type 0 after hop-by-hop options",
            {
                let mut v = ext_header(43, 1);
                v.extend(routing_header(17, 0, 1, &[far]));
                v
            },
            0,
            50,
        ),
    ];
    for (what, mut payload, next, pointer) in cases {
        payload.extend_from_slice(&udp);
        let p = Ip6::new(h, r, 64, next, payload);
        let f = to_vr6(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        let err = icmp6_error("2001:db8::1", h, param_problem6(pointer), &p.bytes());
        lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::Ip6RoutingHeader);
        lab.c(0).icmp_errors += 1;
        lab.check(what);
    }
    // No segments left: ignored; the echo inside is answered.
    let mut payload = routing_header(58, 0, 0, &[far]);
    payload.extend(echo6_req(h, r, 3, 4, b"rh0 done"));
    let req = Ip6::new(h, r, 64, 43, payload);
    let f = to_vr6(M0, H0, None, &req);
    lab.send(0, &[&f]);
    lab.run();
    let rep = Ip6::new(r, h, 64, 58, echo6_rep(r, h, 3, 4, b"rh0 done"));
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &rep.bytes())]);
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("type 0, no segments left");
    // In transit: forwarded as it is.
    let dst = a6("2001:4860::1");
    let mut payload = routing_header(17, 0, 1, &[far]);
    payload.extend(udp6(h, dst, 4000, 5000, b"transit"));
    let p = Ip6::new(h, dst, 64, 43, payload);
    let f = to_vr6(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    let out = eth(GW, M1, None, ET_IP6, &p.hop().bytes());
    lab.expect(1, &[&out]);
    lab.rx(0, &f);
    lab.fwd(0, &out);
    lab.check("transit");
}

// ---------------------------------------------------------------------------------------------
// Host unreachable when resolution fails

fn host_unreach4() -> Icmpv4Type {
    Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Host)
}

fn addr_unreach6() -> Icmpv6Type {
    Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Address)
}

/// Queues long enough for a burst of 257 on one next hop; 10 ms retransmits, 3 probes.
fn resolving_vr() -> dataplane::config::VrConfig {
    let mut c = base_vr();
    c.limits.queue_per_neighbor = 300;
    c.limits.queue_total = 300;
    c.limits.neighbor_retrans_ms = 10;
    c.limits.neighbor_probes = 3;
    c.limits.neighbor_failed_hold_ms = 30;
    c
}

fn ns_out(target: [u8; 16]) -> Vec<u8> {
    let src = eui64_ll(M0);
    let g = solicited_node(target);
    let ip = Ip6::new(src, g, 255, 58, ns_msg(src, g, target, &lla_opt(1, M0)));
    eth(mcast_mac(g), M0, None, ET_IP6, &ip.bytes())
}

/// RFC 1812 §4.3.3.1: transit packets queued on a next hop that never answers ARP (neighbor
/// solicitation) are answered, when the entry gives up, with host unreachable (ICMPv6 address
/// unreachable), from the address of the interface the error leaves by, quoting each packet as
/// it arrived; as many as the ICMP error rate limit allows, the rest counted as suppressed.
/// Packets that arrive while the entry is held failed are answered the same way. Bursts of 1,
/// 2 and 257, IPv4 and IPv6.
#[test]
fn host_unreachable_when_resolution_fails() {
    let mut lab = Lab::new(&[resolving_vr()], &RINGS);
    let burst = dataplane::config::VrLimits::default().icmp_errors_burst as usize;
    let mut ident = 0u16;
    for (round, n) in [1usize, 2, 257].into_iter().enumerate() {
        for v6 in [false, true] {
            lab.now += 3_600_000 * MS; // the ICMP bucket refills
            let t0 = lab.now;
            let host = format!("10.0.0.{}", 20 + round);
            let host6 = format!("2001:db8::{}", 20 + round);
            let (frames, quotes): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (0..n)
                .map(|k| {
                    if v6 {
                        let p = udp6_pkt("2001:4860::1", &host6, 64, &[k as u8; 9]);
                        (to_vr6(M1, GW, None, &p), p.bytes())
                    } else {
                        let p =
                            Ip4 { id: k as u16, ..udp4_pkt("8.8.8.8", &host, 64, &[k as u8; 9]) };
                        (to_vr(M1, GW, None, &p), p.bytes())
                    }
                })
                .unzip();
            let probe = if v6 {
                ns_out(a6(&host6))
            } else {
                eth(BROADCAST, M0, None, ET_ARP, &arp(1, M0, "10.0.0.1", ZERO_MAC, &host))
            };
            lab.send(1, &frames);
            lab.run();
            lab.expect(0, &[&probe]);
            lab.expect_silence();
            for f in &frames {
                lab.rx(0, f);
            }
            lab.c(0).queued += n as u64;
            lab.c(0).neighbor_requests += 1;
            lab.transit_queued[0] = n as u64;
            lab.queued[0] = n;
            let what = format!("{} burst of {n}", if v6 { "IPv6" } else { "IPv4" });
            lab.check(&format!("{what}: queued"));
            for k in 1..=2 {
                lab.run_at(t0 + k * 10 * MS);
                lab.expect(0, &[&probe]);
                lab.expect_silence();
                lab.c(0).neighbor_requests += 1;
            }
            lab.run_at(t0 + 30 * MS);
            let answered = n.min(burst);
            let want: Vec<Vec<u8>> = quotes[..answered]
                .iter()
                .map(|q| {
                    if v6 {
                        let err =
                            icmp6_error("2001:db8:1::1", a6("2001:4860::1"), addr_unreach6(), q);
                        eth(GW, M1, None, ET_IP6, &err)
                    } else {
                        ident += 1;
                        let err = icmp4_error("10.0.1.1", a4("8.8.8.8"), ident, host_unreach4(), q);
                        eth(GW, M1, None, ET_IP4, &err)
                    }
                })
                .collect();
            lab.expect(1, &want);
            lab.expect_silence();
            for _ in 0..n {
                lab.drop(0, VrDrop::NoNeighbor);
            }
            lab.c(0).icmp_errors += answered as u64;
            lab.c(0).icmp_errors_suppressed += (n - answered) as u64;
            lab.transit_queued[0] = 0;
            lab.queued[0] = 0;
            lab.check(&format!("{what}: gave up"));

            // Held failed: the next packet is answered at once.
            let (f, q) = if v6 {
                let p = udp6_pkt("2001:4860::1", &host6, 64, b"held");
                (to_vr6(M1, GW, None, &p), p.bytes())
            } else {
                let p = udp4_pkt("8.8.8.8", &host, 64, b"held");
                (to_vr(M1, GW, None, &p), p.bytes())
            };
            lab.send(1, &[&f]);
            lab.run();
            lab.rx(0, &f);
            lab.drop(0, VrDrop::NoNeighbor);
            if answered < burst {
                let err = if v6 {
                    let e = icmp6_error("2001:db8:1::1", a6("2001:4860::1"), addr_unreach6(), &q);
                    eth(GW, M1, None, ET_IP6, &e)
                } else {
                    ident += 1;
                    let e = icmp4_error("10.0.1.1", a4("8.8.8.8"), ident, host_unreach4(), &q);
                    eth(GW, M1, None, ET_IP4, &e)
                };
                lab.expect(1, &[&err]);
                lab.c(0).icmp_errors += 1;
            } else {
                // The bucket is empty until time passes.
                lab.c(0).icmp_errors_suppressed += 1;
            }
            lab.expect_silence();
            lab.check(&format!("{what}: held"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reassembly of datagrams addressed to the VR

/// `p` cut into fragments of `size` bytes of data (a multiple of 8), as its sender would.
fn frags4(p: &Ip4, size: usize) -> Vec<Ip4> {
    p.payload
        .chunks(size)
        .enumerate()
        .map(|(k, c)| Ip4 {
            payload: c.to_vec(),
            frag: (k * size / 8) as u16,
            mf: (k + 1) * size < p.payload.len(),
            ..p.clone()
        })
        .collect()
}

/// An IPv6 fragment of `whole` (the part after the fixed header, its first next header
/// `next`): bytes `off..off + len` behind a Fragment header with `ident`.
fn frag6(
    h: [u8; 16],
    r: [u8; 16],
    next: u8,
    whole: &[u8],
    off: usize,
    len: usize,
    ident: u32,
) -> Ip6 {
    let end = (off + len).min(whole.len());
    let more = end < whole.len();
    let mut v = vec![next, 0];
    v.extend_from_slice(&((off as u16) | more as u16).to_be_bytes());
    v.extend_from_slice(&ident.to_be_bytes());
    v.extend_from_slice(&whole[off..end]);
    Ip6::new(h, r, 64, 44, v)
}

/// A fragmented echo request to the VR is reassembled and answered, its fragments in order or
/// not, and whatever else arrives meanwhile; bursts of 1, 2 and 257 fragments (datagrams of
/// two fragments each, one left over to finish in the next burst).
#[test]
fn fragmented_echo_v4_is_reassembled_and_answered() {
    let mut lab = lab();
    let mut ident = 0u16;
    let data = |k: usize| -> Vec<u8> { (0..1000).map(|i| (i * 7 + k) as u8).collect() };
    let req = |k: usize| Ip4 {
        id: 0x4000 + k as u16,
        tos: 0x10,
        ..Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(7, k as u16, &data(k)))
    };
    let reply = |k: usize, id: u16| {
        let rep = Ip4 {
            id,
            tos: 0x10,
            ..Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(7, k as u16, &data(k)))
        };
        eth(H0, M0, None, ET_IP4, &rep.bytes())
    };
    let mut k = 0usize;
    let mut left: Option<Vec<u8>> = None; // the second fragment of a datagram held over
    for n in [1usize, 2, 257] {
        let mut frames = Vec::new();
        let mut want = Vec::new();
        if let Some(f) = left.take() {
            frames.push(f);
            ident += 1;
            want.push(reply(k - 1, ident));
        }
        while frames.len() < n {
            let fr = frags4(&req(k), 512);
            assert_eq!(fr.len(), 2);
            // Odd datagrams arrive last fragment first.
            let (a, b) = if k % 2 == 1 { (&fr[1], &fr[0]) } else { (&fr[0], &fr[1]) };
            frames.push(to_vr(M0, H0, None, a));
            k += 1;
            if frames.len() == n {
                left = Some(to_vr(M0, H0, None, b));
            } else {
                frames.push(to_vr(M0, H0, None, b));
                ident += 1;
                want.push(reply(k - 1, ident));
            }
        }
        lab.send(0, &frames);
        lab.run();
        lab.expect(0, &want);
        lab.expect_silence();
        for f in &frames {
            lab.rx(0, f);
        }
        // Each reply: two fragments delivered (the one merged, the datagram answered).
        lab.c(0).local_in += 2 * want.len() as u64;
        lab.c(0).echo_replies += want.len() as u64;
        lab.held[0] = left.is_some() as usize;
        lab.check(&format!("burst of {n}"));
    }
    // The bursts of 1 and 2 each left a fragment over for the next; 257 ended even.
    assert!(left.is_none());
    assert_eq!(k, 130, "one datagram begun in each small burst, 128 in the big one");
}

/// IPv6: an echo request in three fragments, behind a hop-by-hop header (unfragmentable part),
/// middle one first; a UDP datagram in two fragments gets port unreachable quoting the whole
/// reassembled datagram; an atomic fragment (offset 0, M clear) is answered at once.
#[test]
fn fragmented_echo_v6_is_reassembled_and_answered() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let data: Vec<u8> = (0..700u32).map(|i| (i * 13) as u8).collect();
    let icmp = echo6_req(h, r, 0x11, 0x22, &data);
    // Hop-by-hop first (8 bytes, next: Fragment), then fragments of the ICMPv6 message.
    let with_hbh = |p: Ip6| {
        let mut v = ext_header(44, 1);
        v.extend_from_slice(&p.payload);
        Ip6::new(h, r, 64, 0, v)
    };
    let parts = [(256, 256), (0, 256), (512, 256)];
    let frames: Vec<Vec<u8>> = parts
        .iter()
        .map(|&(off, len)| {
            to_vr6(M0, H0, None, &with_hbh(frag6(h, r, 58, &icmp, off, len, 0xabcd)))
        })
        .collect();
    for (i, f) in frames.iter().enumerate() {
        lab.send(0, &[f]);
        lab.run();
        lab.rx(0, f);
        if i < 2 {
            lab.expect_silence();
            lab.held[0] = i + 1;
            lab.check(&format!("fragment {i} held"));
        }
    }
    let rep = Ip6::new(r, h, 64, 58, echo6_rep(r, h, 0x11, 0x22, &data));
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &rep.bytes())]);
    lab.expect_silence();
    lab.held[0] = 0;
    lab.c(0).local_in += 3;
    lab.c(0).echo_replies += 1;
    lab.check("reassembled");

    // UDP to the VR in two fragments: port unreachable quotes the reassembled datagram.
    let udp = udp6(h, r, 4000, 5000, &[5; 300]);
    let whole = Ip6::new(h, r, 64, 17, udp.clone());
    let f1 = to_vr6(M0, H0, None, &frag6(h, r, 17, &udp, 0, 200, 7));
    let f2 = to_vr6(M0, H0, None, &frag6(h, r, 17, &udp, 200, 200, 7));
    lab.send(0, &[&f1, &f2]);
    lab.run();
    let err = icmp6_error("2001:db8::1", h, port_unreach6(), &whole.bytes());
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
    lab.rx(0, &f1);
    lab.rx(0, &f2);
    lab.c(0).local_in += 1;
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::LocalPortUnreachable);
    lab.check("UDP reassembled, port unreachable");

    // Atomic fragment (RFC 6946): answered at once.
    let small = echo6_req(h, r, 1, 2, b"atomic");
    let f = to_vr6(M0, H0, None, &frag6(h, r, 58, &small, 0, small.len(), 9));
    lab.send(0, &[&f]);
    lab.run();
    let rep = Ip6::new(r, h, 64, 58, echo6_rep(r, h, 1, 2, b"atomic"));
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &rep.bytes())]);
    lab.rx(0, &f);
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("atomic fragment");
}

/// RFC 5722: a fragment overlapping another discards the whole datagram, the fragments held
/// and any that come after it (they start a datagram that never completes); IPv4 likewise.
#[test]
fn reassembly_overlap() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let icmp = echo6_req(h, r, 1, 1, &[3; 100]);
    let a = to_vr6(M0, H0, None, &frag6(h, r, 58, &icmp, 0, 64, 1));
    let b = to_vr6(M0, H0, None, &frag6(h, r, 58, &icmp, 56, 56, 1)); // 56..112 overlaps 0..64
    lab.send(0, &[&a, &b]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &a);
    lab.rx(0, &b);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.check("IPv6 overlap");
    // A duplicate is an overlap too.
    let p = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, &[4; 100]));
    let fr = frags4(&p, 64);
    let f0 = to_vr(M0, H0, None, &fr[0]);
    lab.send(0, &[&f0, &f0]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f0);
    lab.rx(0, &f0);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.check("IPv4 duplicate");
    // A second last fragment with another end: inconsistent.
    let f1 = to_vr(M0, H0, None, &fr[1]);
    let short = to_vr(M0, H0, None, &Ip4 { payload: fr[1].payload[..8].to_vec(), ..fr[1].clone() });
    lab.send(0, &[&f1, &short]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f1);
    lab.rx(0, &short);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.drop(0, VrDrop::ReassemblyOverlap);
    lab.check("IPv4 two ends");
}

/// A datagram not complete 30 s (IPv4) / 60 s (IPv6) after its first fragment is discarded
/// with every fragment it held; if its fragment at offset 0 came, its source gets Time
/// Exceeded (code 1) quoting that fragment.
#[test]
fn reassembly_timeout() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let p = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, &[4; 100]));
    let fr = frags4(&p, 32);
    assert_eq!(fr.len(), 4);
    let f4: Vec<Vec<u8>> = fr[..2].iter().map(|f| to_vr(M0, H0, None, f)).collect();
    let icmp = echo6_req(h, r, 1, 1, &[3; 100]);
    let f6 = to_vr6(M0, H0, None, &frag6(h, r, 58, &icmp, 0, 64, 1));
    lab.now = 1_000 * MS;
    lab.send(0, &f4);
    lab.send(0, &[&f6]);
    lab.run();
    lab.expect_silence();
    for f in f4.iter().chain([&f6]) {
        lab.rx(0, f);
    }
    lab.held[0] = 3;
    lab.check("held");
    // (VR timers run every millisecond.)
    lab.run_at(1_000 * MS + 30_000 * MS - MS);
    lab.check("IPv4 just before its time");
    lab.run_at(1_000 * MS + 30_000 * MS);
    // Its first fragment came: Time Exceeded, fragment reassembly time exceeded, quoting it
    // (RFC 1122 §3.3.2).
    let t = Icmpv4Type::TimeExceeded(icmpv4::TimeExceededCode::FragmentReassemblyTimeExceeded);
    let err = icmp4_error("10.0.0.1", p.src, 1, t, &fr[0].bytes());
    lab.expect(0, &[eth(H0, M0, None, ET_IP4, &err)]);
    lab.expect_silence();
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::ReassemblyTimeout);
    lab.drop(0, VrDrop::ReassemblyTimeout);
    lab.held[0] = 1;
    lab.check("IPv4 timed out");
    // The rest of the IPv4 datagram now starts a new one, which also times out.
    let late = to_vr(M0, H0, None, &fr[3]);
    lab.send(0, &[&late]);
    lab.run();
    lab.rx(0, &late);
    lab.held[0] = 2;
    lab.check("a late fragment is held anew");
    lab.run_at(1_000 * MS + 60_000 * MS);
    // IPv6's first fragment came (RFC 8200 §4.5); the late IPv4 datagram's did not.
    let t = Icmpv6Type::TimeExceeded(icmpv6::TimeExceededCode::FragmentReassemblyTimeExceeded);
    let err = icmp6_error("2001:db8::1", h, t, &f6[14..]);
    lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
    lab.expect_silence();
    lab.c(0).icmp_errors += 1;
    lab.drop(0, VrDrop::ReassemblyTimeout);
    lab.drop(0, VrDrop::ReassemblyTimeout);
    lab.held[0] = 0;
    lab.check("both timed out");
}

/// Fragments of datagrams bigger than a buffer holds are refused (`reassembly_too_big`), with
/// what their datagram held; a fragment of a fifth datagram while four are in progress finds
/// no context (`reassembly_no_context`).
#[test]
fn reassembly_too_big_and_no_context() {
    let mut lab = lab();
    // Offset 9600: beyond what one (jumbo) buffer holds.
    let mut far = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, vec![0; 64]);
    far.frag = 1200;
    far.mf = true;
    let f = to_vr(M0, H0, None, &far);
    let first = to_vr(M0, H0, None, &Ip4 { frag: 0, ..far.clone() });
    lab.send(0, &[&first, &f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &first);
    lab.rx(0, &f);
    lab.drop(0, VrDrop::ReassemblyTooBig);
    lab.drop(0, VrDrop::ReassemblyTooBig);
    lab.check(&format!("{}", VrDrop::ReassemblyTooBig));
    // Four datagrams in progress, a fifth refused.
    let frames: Vec<Vec<u8>> =
        (0..5u16).map(|k| to_vr(M0, H0, None, &Ip4 { id: k, frag: 0, ..far.clone() })).collect();
    lab.send(0, &frames);
    lab.run();
    lab.expect_silence();
    for f in &frames {
        lab.rx(0, f);
    }
    lab.drop(0, VrDrop::ReassemblyNoContext);
    lab.held[0] = 4;
    lab.check(&format!("{}", VrDrop::ReassemblyNoContext));
}

/// A reassembled echo request larger than the MTU (`ping -s 1600` over a 1500-byte link):
/// the reply leaves in fragments, IPv4's as RFC 791 says, IPv6's as RFC 8200 §4.5 says of a
/// source (each fragment at most the link's MTU, the data of all but the last a multiple of 8,
/// the VR's own Identification).
#[test]
fn echo_reply_over_the_mtu() {
    let mut lab = lab();
    let data: Vec<u8> = (0..1600u32).map(|i| (i * 3) as u8).collect();
    let req = Ip4 { id: 0x99, ..Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 2, &data)) };
    let frames: Vec<Vec<u8>> = frags4(&req, 1480).iter().map(|f| to_vr(M0, H0, None, f)).collect();
    assert_eq!(frames.len(), 2);
    lab.send(0, &frames);
    lab.run();
    let rep = Ip4 { id: 1, ..Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(1, 2, &data)) };
    let want: Vec<Vec<u8>> =
        frags4(&rep, 1480).iter().map(|f| eth(H0, M0, None, ET_IP4, &f.bytes())).collect();
    assert_eq!(want.len(), 2);
    assert!(want.iter().all(|f| f.len() - 14 <= 1500));
    lab.expect(0, &want);
    lab.expect_silence();
    for f in &frames {
        lab.rx(0, f);
    }
    lab.c(0).local_in += 2;
    lab.c(0).echo_replies += 1;
    lab.c(0).fragments_sent += 2;
    lab.check("IPv4 reply in two fragments");

    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let icmp = echo6_req(h, r, 1, 2, &data);
    let frames: Vec<Vec<u8>> = [(0, 1400), (1400, 1400)]
        .iter()
        .map(|&(off, len)| to_vr6(M0, H0, None, &frag6(h, r, 58, &icmp, off, len, 5)))
        .collect();
    lab.send(0, &frames);
    lab.run();
    // The Identification is the VR's own, unpredictable (RFC 7739): read from the first
    // fragment, the same in both, and different in the next reply's.
    let ident = |f: &[u8]| u32::from_be_bytes(f[14 + 44..14 + 48].try_into().unwrap());
    let mut idents = Vec::new();
    let mut frames = frames;
    for seq in [2, 3] {
        if seq == 3 {
            let icmp = echo6_req(h, r, 1, seq, &data);
            frames = [(0, 1400), (1400, 1400)]
                .iter()
                .map(|&(off, len)| to_vr6(M0, H0, None, &frag6(h, r, 58, &icmp, off, len, 6)))
                .collect();
            lab.send(0, &frames);
            lab.run();
        }
        let got = lab.recv(0);
        assert_eq!(got.len(), 2, "reply {seq}: two fragments");
        let id = ident(&got[0]);
        let rep = echo6_rep(r, h, 1, seq, &data);
        // 1500 - 40 - 8 = 1452, rounded down to 8s: 1448 bytes, then the other 160.
        let want: Vec<Vec<u8>> = [(0, 1448), (1448, 1448)]
            .iter()
            .map(|&(off, len)| {
                eth(H0, M0, None, ET_IP6, &frag6(r, h, 58, &rep, off, len, id).bytes())
            })
            .collect();
        assert_eq!(want.iter().map(|f| f.len() - 14).collect::<Vec<_>>(), [1496, 40 + 8 + 160]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_frame(g, w, &format!("reply {seq} fragment {i}"));
        }
        lab.port[0].tx_packets += 2;
        lab.expect_silence();
        for f in &frames {
            lab.rx(0, f);
        }
        lab.c(0).local_in += 2;
        lab.c(0).echo_replies += 1;
        lab.c(0).fragments_sent += 2;
        lab.check(&format!("IPv6 reply {seq} in two fragments"));
        idents.push(id);
    }
    let (a, b) = (idents[0], idents[1]);
    assert!(a != b && b != a.wrapping_add(1), "identifications {a:#x} then {b:#x}");
}

/// RFC 8200 §4.5: an IPv6 fragment with more to come whose data is not a multiple of 8 bytes
/// is answered with Parameter Problem at the Payload Length field; one that would reach past
/// 65535 bytes, at its Fragment Offset field. Both dropped (`local_fragment`).
#[test]
fn malformed_fragments_v6() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let icmp = echo6_req(h, r, 1, 1, &[0; 4]); // 12 bytes
    let odd = frag6(h, r, 58, &[icmp.clone(), vec![0; 12]].concat(), 0, 12, 42);
    let mut far = frag6(h, r, 58, &[0; 64], 0, 16, 43);
    far.payload[2..4].copy_from_slice(&(0xfff8u16 | 1).to_be_bytes()); // offset 65528, M=1
    let hbh_far = Ip6::new(h, r, 64, 0, [ext_header(44, 1), far.payload.clone()].concat());
    for (what, p, pointer) in [
        ("12 bytes, more to come", odd, 4),
        ("past 65535", far, 42),
        ("past 65535, behind hop-by-hop", hbh_far, 50),
    ] {
        let f = to_vr6(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        let err = icmp6_error("2001:db8::1", h, param_problem6(pointer), &p.bytes());
        lab.expect(0, &[eth(H0, M0, None, ET_IP6, &err)]);
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::LocalFragment);
        lab.c(0).icmp_errors += 1;
        lab.check(what);
    }
}

/// The largest reply the VR fragments: a reassembled echo of 1800 bytes over a 576-byte link
/// (RFC 791's minimum) leaves in four fragments.
#[test]
fn echo_reply_fragments_down_to_576() {
    let mut c = base_vr();
    c.interfaces[1].mtu = 576;
    c.interfaces[1].ipv6.clear();
    c.routes.retain(|r| r.prefix.addr().is_ipv4());
    c.neighbors.retain(|n| n.ip.is_ipv4() || n.iface != 1);
    let mut lab = Lab::new(&[c], &RINGS);
    let data: Vec<u8> = (0..1800u32).map(|i| (i * 11) as u8).collect();
    let req = Ip4 { id: 5, ..Ip4::new("8.8.8.8", "10.0.1.1", 60, 1, echo4_req(4, 4, &data)) };
    let frames: Vec<Vec<u8>> = frags4(&req, 552).iter().map(|f| to_vr(M1, GW, None, f)).collect();
    assert_eq!(frames.len(), 4);
    lab.send(1, &frames);
    lab.run();
    let rep = Ip4 { id: 1, ..Ip4::new("10.0.1.1", "8.8.8.8", 64, 1, echo4_rep(4, 4, &data)) };
    let want: Vec<Vec<u8>> =
        frags4(&rep, 552).iter().map(|f| eth(GW, M1, None, ET_IP4, &f.bytes())).collect();
    assert_eq!(want.len(), 4);
    lab.expect(1, &want);
    lab.expect_silence();
    for f in &frames {
        lab.rx(0, f);
    }
    lab.c(0).local_in += 4;
    lab.c(0).echo_replies += 1;
    lab.c(0).fragments_sent += 4;
    lab.check("four fragments");
}
