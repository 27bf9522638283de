//! ICMP and ICMPv6: every error and reply byte for byte (RFC 792, RFC 1812 §4.3, RFC 4443),
//! the rules about when not to send one, and the rate limit.

use crate::common;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::VrDrop;
use etherparse::{icmpv4, Icmpv4Type, Icmpv6Type};

const RINGS: [usize; 3] = [512, 512, 512];

fn lab() -> Lab {
    Lab::new(&[base_vr()], &RINGS)
}

/// Sends one frame on `port`, expects exactly `out` on `out_port` and nothing elsewhere.
#[track_caller]
fn one(lab: &mut Lab, port: usize, f: &[u8], out_port: usize, out: &[u8]) {
    lab.send(port, &[f.to_vec()]);
    lab.run();
    lab.expect(out_port, &[out.to_vec()]);
    lab.expect_silence();
    lab.rx(0, f);
}

#[test]
fn time_exceeded_v4() {
    let mut lab = lab();
    for (id, ttl) in [(1u16, 1u8), (2, 0)] {
        let p = udp4_pkt("10.0.0.10", "8.8.8.8", ttl, b"expiring");
        let f = to_vr(M0, H0, None, &p);
        let want = eth(
            H0,
            M0,
            None,
            ET_IP4,
            &icmp4_error("10.0.0.1", a4("10.0.0.10"), id, ttl_exceeded4(), &p.bytes()),
        );
        one(&mut lab, 0, &f, 0, &want);
        lab.drop(0, VrDrop::TtlExpired);
        lab.c(0).icmp_errors += 1;
        lab.check(&format!("ttl {ttl}"));
    }
}

#[test]
fn time_exceeded_quotes_548_bytes_with_options_as_received() {
    let mut lab = lab();
    let mut p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, &[0x5a; 1000]);
    p.options = vec![1, 1, 1, 0];
    p.tos = 0x10;
    let mut f = to_vr(M0, H0, None, &p);
    f.extend_from_slice(&[0xee; 4]); // trailing junk beyond the IP total length is not quoted
    let orig = p.bytes();
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, ttl_exceeded4(), &orig),
    );
    assert_eq!(want.len(), 14 + 20 + 8 + 548);
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("quote");
}

#[test]
fn net_unreachable_v4_leaves_by_another_interface() {
    let mut lab = lab();
    // Arrives on wan, from a source behind lan: the error is routed back out of lan, with the
    // receiving interface's address as its source.
    let p = udp4_pkt("10.0.0.10", "9.9.9.9", 64, b"nowhere");
    let f = to_vr(M1, GW, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.1.1", a4("10.0.0.10"), 1, net_unreach4(), &p.bytes()),
    );
    one(&mut lab, 1, &f, 0, &want);
    lab.drop(0, VrDrop::NoRoute);
    lab.c(0).icmp_errors += 1;
    lab.check("net unreachable");
}

#[test]
fn frag_needed_v4_carries_next_hop_mtu() {
    let mut lab = lab();
    let mut p = udp4_pkt("10.0.0.10", "198.51.100.7", 64, &[1; 1472]);
    p.df = true;
    assert_eq!(p.bytes().len(), 1500);
    let f = to_vr(M0, H0, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, frag_needed4(1400), &p.bytes()),
    );
    // bytes 6-7 of the ICMP header hold the MTU
    assert_eq!(&want[14 + 20 + 4..14 + 20 + 8], &[0, 0, 0x05, 0x78]);
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::MtuExceeded);
    lab.c(0).icmp_errors += 1;
    lab.check("frag needed");
}

#[test]
fn port_unreachable_v4_from_receiving_interface_address() {
    let mut lab = lab();
    // UDP to the wan address, received on lan (weak host): the error's source is lan's address.
    let p = udp4_pkt("10.0.0.10", "10.0.1.1", 64, b"dns?");
    let f = to_vr(M0, H0, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, port_unreach4(), &p.bytes()),
    );
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::LocalPortUnreachable);
    lab.c(0).icmp_errors += 1;
    lab.check("port unreachable");
}

#[test]
fn icmp_error_on_vlan_interface() {
    let mut lab = lab();
    let p = udp4_pkt("10.0.2.2", "8.8.8.8", 1, b"from the vlan");
    let f = to_vr(M2, H2, Some(VLAN), &p);
    let want = eth(
        H2,
        M2,
        Some(VLAN),
        ET_IP4,
        &icmp4_error("10.0.2.1", a4("10.0.2.2"), 1, ttl_exceeded4(), &p.bytes()),
    );
    one(&mut lab, 2, &f, 2, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("vlan ttl");

    let q = udp6_pkt("2001:db8:2::2", "2001:4860::1", 1, b"six");
    let g = to_vr6(M2, H2, Some(VLAN), &q);
    let want = eth(
        H2,
        M2,
        Some(VLAN),
        ET_IP6,
        &icmp6_error("2001:db8:2::1", q.src, hop_exceeded6(), &q.bytes()),
    );
    one(&mut lab, 2, &g, 2, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("vlan hop limit");
}

#[test]
fn icmp_error_source_when_receiving_interface_has_no_ipv4() {
    let mut c = base_vr();
    c.interfaces.push(iface("bare", 3, None, H4, 1500, &[], &[]));
    let mut lab = Lab::new(&[c], &[64, 64, 64, 64]);
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, b"x");
    let f = to_vr(H4, H3, None, &p);
    // The first address of any interface: lan's.
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, ttl_exceeded4(), &p.bytes()),
    );
    one(&mut lab, 3, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("bare interface");
}

#[test]
fn ip_identification_counts_every_originated_ipv4_packet() {
    let mut lab = lab();
    let ping = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, b"a"));
    let dying = udp4_pkt("10.0.0.10", "8.8.8.8", 1, b"b");
    let ping2 = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 2, b"c"));
    let frames =
        vec![to_vr(M0, H0, None, &ping), to_vr(M0, H0, None, &dying), to_vr(M0, H0, None, &ping2)];
    lab.send(0, &frames);
    lab.run();
    let rep = |id, seq, d: &[u8]| {
        Ip4 { id, ..Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(1, seq, d)) }.bytes()
    };
    lab.expect(
        0,
        &[
            eth(H0, M0, None, ET_IP4, &rep(1, 1, b"a")),
            eth(
                H0,
                M0,
                None,
                ET_IP4,
                &icmp4_error("10.0.0.1", a4("10.0.0.10"), 2, ttl_exceeded4(), &dying.bytes()),
            ),
            eth(H0, M0, None, ET_IP4, &rep(3, 2, b"c")),
        ],
    );
    lab.expect_silence();
    for f in &frames {
        lab.rx(0, f);
    }
    lab.drop(0, VrDrop::TtlExpired);
    let c = lab.c(0);
    c.icmp_errors += 1;
    c.local_in += 2;
    c.echo_replies += 2;
    lab.check("identification");
}

#[test]
fn echo_reply_v4() {
    let mut lab = lab();
    // TOS is copied, options are not echoed, TTL 1 is fine for the VR itself, data (odd length)
    // unchanged.
    let mut req = Ip4::new("10.0.0.10", "10.0.0.1", 1, 1, echo4_req(0x4242, 7, b"hello, router"));
    req.tos = 0x28;
    req.options = vec![1, 1, 1, 0];
    req.df = true;
    let f = to_vr(M0, H0, None, &req);
    let mut rep = Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(0x4242, 7, b"hello, router"));
    rep.tos = 0x28;
    rep.id = 1;
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP4, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo");

    // Any of the VR's addresses answers on any interface (weak host); the reply's source is the
    // address that was pinged and it is routed back.
    let req = Ip4::new("10.0.0.10", "10.0.2.1", 64, 1, echo4_req(1, 1, &[]));
    let f = to_vr(M0, H0, None, &req);
    let rep = Ip4 { id: 2, ..Ip4::new("10.0.2.1", "10.0.0.10", 64, 1, echo4_rep(1, 1, &[])) };
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP4, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo to another interface's address");

    // A ping from beyond the gateway is answered through the gateway.
    let req = Ip4::new("8.8.8.8", "10.0.0.1", 60, 1, echo4_req(5, 5, &[9; 100]));
    let f = to_vr(M1, GW, None, &req);
    let rep = Ip4 { id: 3, ..Ip4::new("10.0.0.1", "8.8.8.8", 64, 1, echo4_rep(5, 5, &[9; 100])) };
    one(&mut lab, 1, &f, 1, &eth(GW, M1, None, ET_IP4, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo from afar");
}

#[test]
fn echo_reply_v6_drops_extension_headers() {
    let mut lab = lab();
    let (h, r) = (a6("2001:db8::10"), a6("2001:db8::1"));
    let mut payload = ext_header(58, 2); // destination options, 16 bytes, then ICMPv6
    payload.extend(echo6_req(h, r, 0x77, 0x88, b"ping through options"));
    let mut req = Ip6::new(h, r, 1, 60, payload);
    req.tc = 0xb8;
    req.flow = 0x12345;
    let f = to_vr6(M0, H0, None, &req);
    let rep = Ip6::new(r, h, 64, 58, echo6_rep(r, h, 0x77, 0x88, b"ping through options"));
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP6, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo6");

    // Weak host: the VLAN interface's address, pinged from lan.
    let r2 = a6("2001:db8:2::1");
    let req = Ip6::new(h, r2, 64, 58, echo6_req(h, r2, 1, 2, b""));
    let f = to_vr6(M0, H0, None, &req);
    let rep = Ip6::new(r2, h, 64, 58, echo6_rep(r2, h, 1, 2, b""));
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP6, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo6 weak host");
}

#[test]
fn link_local_address_is_eui64_and_answers_ping() {
    let mut lab = lab();
    // M2 = 52:54:00:12:34:56 -> fe80::5054:ff:fe12:3456 (U/L bit flipped on).
    let ll2 = a6("fe80::5054:ff:fe12:3456");
    assert_eq!(eui64_ll(M2), ll2);
    let ll0 = a6("fe80::ff:fe00:100"); // 02:00:00:00:01:00 -> U/L flipped off
    assert_eq!(eui64_ll(M0), ll0);

    // From a global source: routed back.
    let h = a6("2001:db8:2::2");
    let req = Ip6::new(h, ll2, 64, 58, echo6_req(h, ll2, 1, 1, b"ll"));
    let f = to_vr6(M2, H2, Some(VLAN), &req);
    let rep = Ip6::new(ll2, h, 64, 58, echo6_rep(ll2, h, 1, 1, b"ll"));
    one(&mut lab, 2, &f, 2, &eth(H2, M2, Some(VLAN), ET_IP6, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("ping link-local from global");
}

#[test]
fn link_local_to_link_local_answers_leave_by_the_receiving_interface() {
    // `ping fe80::...%eth0`: the requester uses its own link-local address. The answer must go
    // back out of the interface the request came in on (RFC 4291 §2.5.6: link-local addresses
    // are only meaningful on their link, and no route covers fe80::/10).
    let ll0 = eui64_ll(M0);
    let hl = eui64_ll(H0);
    let mut c = base_vr();
    c.neighbors.push(neigh(0, &std::net::Ipv6Addr::from(hl).to_string(), H0));
    let mut lab = Lab::new(&[c], &RINGS);
    let req = Ip6::new(hl, ll0, 64, 58, echo6_req(hl, ll0, 2, 2, b"ll2ll"));
    let f = to_vr6(M0, H0, None, &req);
    let rep = Ip6::new(ll0, hl, 64, 58, echo6_rep(ll0, hl, 2, 2, b"ll2ll"));
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP6, &rep.bytes()));
    let c = lab.c(0);
    c.local_in += 1;
    c.echo_replies += 1;
    lab.check("echo link-local to link-local");

    // The same for an error about a packet from a link-local source.
    let p = Ip6::new(hl, ll0, 64, 17, udp6(hl, ll0, 1, 2, b"udp"));
    let f = to_vr6(M0, H0, None, &p);
    let want =
        eth(H0, M0, None, ET_IP6, &icmp6_error("2001:db8::1", hl, port_unreach6(), &p.bytes()));
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::LocalPortUnreachable);
    lab.c(0).icmp_errors += 1;
    lab.check("port unreachable to a link-local source");
}

#[test]
fn time_exceeded_no_route_and_port_unreachable_v6() {
    let mut lab = lab();
    let h = a6("2001:db8::10");
    let cases: Vec<(Ip6, Icmpv6Type, VrDrop)> = vec![
        (udp6_pkt("2001:db8::10", "2001:4860::1", 1, b"hop"), hop_exceeded6(), VrDrop::TtlExpired),
        (udp6_pkt("2001:db8::10", "2001:4860::2", 0, b"hop0"), hop_exceeded6(), VrDrop::TtlExpired),
        (udp6_pkt("2001:db8::10", "2a00::1", 64, b"nowhere"), no_route6(), VrDrop::NoRoute),
        (
            udp6_pkt("2001:db8::10", "2001:db8:1::1", 64, b"closed"),
            port_unreach6(),
            VrDrop::LocalPortUnreachable,
        ),
    ];
    for (p, t, d) in cases {
        let f = to_vr6(M0, H0, None, &p);
        let want = eth(H0, M0, None, ET_IP6, &icmp6_error("2001:db8::1", h, t, &p.bytes()));
        one(&mut lab, 0, &f, 0, &want);
        lab.drop(0, d);
        lab.c(0).icmp_errors += 1;
        lab.check(d.name());
    }
}

#[test]
fn packet_too_big_v6_quotes_1232_bytes() {
    let mut lab = lab();
    let p = udp6_pkt("2001:db8::10", "2001:db8:100::7", 64, &[3; 1452]);
    assert_eq!(p.bytes().len(), 1500);
    let f = to_vr6(M0, H0, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP6,
        &icmp6_error("2001:db8::1", p.src, Icmpv6Type::PacketTooBig { mtu: 1400 }, &p.bytes()),
    );
    assert_eq!(want.len(), 14 + 1280);
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::MtuExceeded);
    lab.c(0).icmp_errors += 1;
    lab.check("packet too big");
}

#[test]
fn icmpv6_error_leaves_by_another_interface() {
    let mut lab = lab();
    let p = udp6_pkt("2001:db8::10", "2a00::1", 64, b"asymmetric");
    let f = to_vr6(M1, GW, None, &p);
    let want =
        eth(H0, M0, None, ET_IP6, &icmp6_error("2001:db8:1::1", p.src, no_route6(), &p.bytes()));
    one(&mut lab, 1, &f, 0, &want);
    lab.drop(0, VrDrop::NoRoute);
    lab.c(0).icmp_errors += 1;
    lab.check("v6 asymmetric");
}

#[test]
fn icmpv6_error_source_selection() {
    // Receiving interface with only its link-local address: the first global address of any
    // interface.
    let mut c = base_vr();
    c.interfaces.push(iface("llonly", 3, None, H4, 1500, &[], &["fe80::4:4/64"]));
    let mut lab = Lab::new(&[c], &[64, 64, 64, 64]);
    let p = udp6_pkt("2001:db8::10", "2001:4860::1", 1, b"x");
    let f = to_vr6(H4, H3, None, &p);
    let want =
        eth(H0, M0, None, ET_IP6, &icmp6_error("2001:db8::1", p.src, hop_exceeded6(), &p.bytes()));
    one(&mut lab, 3, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("first global address of any interface");

    // No global address anywhere: the receiving interface's (EUI-64) link-local address.
    let c = VrConfig {
        name: "ll".into(),
        interfaces: vec![
            iface("a", 0, None, M0, 1500, &[], &[]),
            iface("b", 1, None, M1, 1500, &[], &[]),
        ],
        routes: vec![via_if("::/0", "fe80::1", 0)],
        neighbors: vec![neigh(0, "fe80::1", GW)],
        limits: VrLimits::default(),
    };
    let mut lab = Lab::new(&[c], &[64, 64]);
    let p = udp6_pkt("2001:db8:99::1", "2001:4860::1", 1, b"y");
    let f = to_vr6(M1, H3, None, &p);
    let src = std::net::Ipv6Addr::from(eui64_ll(M1)).to_string();
    let want = eth(GW, M0, None, ET_IP6, &icmp6_error(&src, p.src, hop_exceeded6(), &p.bytes()));
    one(&mut lab, 1, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("link-local source");
}

#[test]
fn no_icmp_error_about_icmp_errors_v4() {
    let mut lab = lab();
    let inner = udp4_pkt("8.8.8.8", "10.0.0.10", 5, b"inner").bytes();
    let errors = [
        Icmpv4Type::DestinationUnreachable(icmpv4::DestUnreachableHeader::Host),
        Icmpv4Type::Unknown { type_u8: 4, code_u8: 0, bytes5to8: [0; 4] },
        Icmpv4Type::Redirect(icmpv4::RedirectHeader {
            code: icmpv4::RedirectCode::RedirectForNetwork,
            gateway_internet_address: [1, 2, 3, 4],
        }),
        ttl_exceeded4(),
        Icmpv4Type::ParameterProblem(icmpv4::ParameterProblemHeader::PointerIndicatesError(3)),
    ];
    for t in errors {
        let p = Ip4::new("10.0.0.10", "8.8.8.8", 1, 1, icmp4(t.clone(), &inner));
        let f = to_vr(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::TtlExpired);
        lab.c(0).icmp_errors_suppressed += 1;
        lab.check(&format!("about {t:?}"));
    }
    // An echo request is not an error: it gets one.
    let p = Ip4::new("10.0.0.10", "8.8.8.8", 1, 1, echo4_req(1, 1, b"traceroute"));
    let f = to_vr(M0, H0, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, ttl_exceeded4(), &p.bytes()),
    );
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("about an echo request");
}

#[test]
fn no_icmp_error_about_non_first_fragment() {
    let mut lab = lab();
    let mut p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, &[1; 40]);
    p.frag = 10;
    let f = to_vr(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors_suppressed += 1;
    lab.check("non-first fragment");

    // The first fragment (offset 0, MF) does get one.
    let mut p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, &[1; 40]);
    p.mf = true;
    let f = to_vr(M0, H0, None, &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.0.10"), 1, ttl_exceeded4(), &p.bytes()),
    );
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("first fragment");
}

#[test]
fn no_icmpv6_error_about_icmpv6_errors_or_unwalkable_headers() {
    let mut lab = lab();
    let (h, d) = (a6("2001:db8::10"), a6("2001:4860::1"));
    for t in [1u8, 2, 3, 4, 100, 127] {
        let msg = icmp6(
            Icmpv6Type::Unknown { type_u8: t, code_u8: 0, bytes5to8: [0; 4] },
            h,
            d,
            &[0; 48],
        );
        let p = Ip6::new(h, d, 1, 58, msg);
        let f = to_vr6(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.run();
        lab.expect_silence();
        lab.rx(0, &f);
        lab.drop(0, VrDrop::TtlExpired);
        lab.c(0).icmp_errors_suppressed += 1;
        lab.check(&format!("about icmpv6 type {t}"));
    }
    // A hop-by-hop header whose length runs past the packet.
    let mut payload = ext_header(17, 1);
    payload[1] = 20;
    let p = Ip6::new(h, d, 1, 0, payload);
    let f = to_vr6(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.expect_silence();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors_suppressed += 1;
    lab.check("unwalkable");

    // An echo request (128) with extension headers is not an error: it gets one.
    let mut payload = ext_header(58, 1);
    payload.extend(echo6_req(h, d, 1, 1, b"trace6"));
    let p = Ip6::new(h, d, 1, 60, payload);
    let f = to_vr6(M0, H0, None, &p);
    let want =
        eth(H0, M0, None, ET_IP6, &icmp6_error("2001:db8::1", h, hop_exceeded6(), &p.bytes()));
    one(&mut lab, 0, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("about an echo request");
}

fn limited(per_sec: u32, burst: u32) -> VrConfig {
    let mut c = base_vr();
    c.limits.icmp_errors_per_sec = per_sec;
    c.limits.icmp_errors_burst = burst;
    c
}

/// Sends `n` TTL-expiring packets; returns the expected errors (ids from `first_id`) for the
/// first `sent` of them.
fn expiring(lab: &mut Lab, n: usize, sent: usize, first_id: u16, tag: u8) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut want = Vec::new();
    for i in 0..n {
        let p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, &[tag, i as u8]);
        let f = to_vr(M0, H0, None, &p);
        lab.rx(0, &f);
        lab.drop(0, VrDrop::TtlExpired);
        if i < sent {
            let e = icmp4_error(
                "10.0.0.1",
                a4("10.0.0.10"),
                first_id + i as u16,
                ttl_exceeded4(),
                &p.bytes(),
            );
            want.push(eth(H0, M0, None, ET_IP4, &e));
            lab.c(0).icmp_errors += 1;
        } else {
            lab.c(0).icmp_errors_suppressed += 1;
        }
        frames.push(f);
    }
    lab.send(0, &frames);
    lab.run();
    want
}

#[test]
fn icmp_errors_are_rate_limited() {
    let mut lab = Lab::new(&[limited(1000, 3)], &RINGS);
    lab.now = 5_000 * MS;
    let w = expiring(&mut lab, 5, 3, 1, 1);
    lab.expect(0, &w);
    lab.check("burst of 3 out of 5");

    lab.now += MS; // one token
    let w = expiring(&mut lab, 2, 1, 4, 2);
    lab.expect(0, &w);
    lab.check("1 ms later: one more");

    lab.now += MS / 2; // half a token
    let w = expiring(&mut lab, 1, 0, 5, 3);
    lab.expect(0, &w);
    lab.check("half a token");

    lab.now += MS / 2;
    let w = expiring(&mut lab, 1, 1, 5, 4);
    lab.expect(0, &w);
    lab.check("whole token");

    lab.now += 10_000 * MS; // refills to the burst, not beyond
    let w = expiring(&mut lab, 4, 3, 6, 5);
    lab.expect(0, &w);
    lab.check("capped at the burst");

    // The bucket is shared with ICMPv6 errors (both are the VR's ICMP errors).
    lab.now += 10_000 * MS;
    let mut want = Vec::new();
    for i in 0..4u8 {
        let p = udp6_pkt("2001:db8::10", "2001:4860::1", 1, &[i]);
        let f = to_vr6(M0, H0, None, &p);
        lab.send(0, &[&f]);
        lab.rx(0, &f);
        lab.drop(0, VrDrop::TtlExpired);
        if i < 3 {
            want.push(eth(
                H0,
                M0,
                None,
                ET_IP6,
                &icmp6_error("2001:db8::1", p.src, hop_exceeded6(), &p.bytes()),
            ));
            lab.c(0).icmp_errors += 1;
        } else {
            lab.c(0).icmp_errors_suppressed += 1;
        }
    }
    lab.run();
    lab.expect(0, &want);
    lab.check("v6 burst");
}

#[test]
fn icmp_errors_disabled_with_rate_zero() {
    let mut lab = Lab::new(&[limited(0, 50)], &RINGS);
    lab.now = 1_000 * MS;
    let w = expiring(&mut lab, 3, 0, 1, 0);
    assert!(w.is_empty());
    let p = udp6_pkt("2001:db8::10", "2a00::1", 64, b"no route");
    let f = to_vr6(M0, H0, None, &p);
    lab.send(0, &[&f]);
    lab.run();
    lab.rx(0, &f);
    lab.drop(0, VrDrop::NoRoute);
    lab.c(0).icmp_errors_suppressed += 1;
    lab.expect_silence();
    lab.check("disabled");
    // Echo replies are not errors: still answered.
    let req = Ip4::new("10.0.0.10", "10.0.0.1", 64, 1, echo4_req(1, 1, b""));
    let f = to_vr(M0, H0, None, &req);
    let rep = Ip4 { id: 1, ..Ip4::new("10.0.0.1", "10.0.0.10", 64, 1, echo4_rep(1, 1, b"")) };
    one(&mut lab, 0, &f, 0, &eth(H0, M0, None, ET_IP4, &rep.bytes()));
    lab.c(0).local_in += 1;
    lab.c(0).echo_replies += 1;
    lab.check("echo still answered");
}

/// Errors whose way back pushes or pops an 802.1Q tag: in tagged, out untagged and back.
#[test]
fn icmp_error_crossing_vlan_boundaries() {
    let mut lab = lab();
    // In on the VLAN from a lan source: the error leaves lan untagged, sourced from v100's address.
    let p = udp4_pkt("10.0.0.10", "8.8.8.8", 1, b"tagged in");
    let f = to_vr(M2, H2, Some(VLAN), &p);
    let want = eth(
        H0,
        M0,
        None,
        ET_IP4,
        &icmp4_error("10.0.2.1", a4("10.0.0.10"), 1, ttl_exceeded4(), &p.bytes()),
    );
    one(&mut lab, 2, &f, 0, &want);
    lab.drop(0, VrDrop::TtlExpired);
    lab.c(0).icmp_errors += 1;
    lab.check("tagged in, untagged out");

    // In on lan from a VLAN source: the error leaves tagged.
    let p = udp4_pkt("10.0.2.2", "9.9.9.9", 64, b"untagged in");
    let f = to_vr(M0, H0, None, &p);
    let want = eth(
        H2,
        M2,
        Some(VLAN),
        ET_IP4,
        &icmp4_error("10.0.0.1", a4("10.0.2.2"), 2, net_unreach4(), &p.bytes()),
    );
    one(&mut lab, 0, &f, 2, &want);
    lab.drop(0, VrDrop::NoRoute);
    lab.c(0).icmp_errors += 1;
    lab.check("untagged in, tagged out");

    let q = udp6_pkt("2001:db8:2::2", "2a00::1", 64, b"v6 untagged in");
    let g = to_vr6(M0, H0, None, &q);
    let want = eth(
        H2,
        M2,
        Some(VLAN),
        ET_IP6,
        &icmp6_error("2001:db8::1", q.src, no_route6(), &q.bytes()),
    );
    one(&mut lab, 0, &g, 2, &want);
    lab.drop(0, VrDrop::NoRoute);
    lab.c(0).icmp_errors += 1;
    lab.check("v6 untagged in, tagged out");
}
