//! Byte fixtures (one captured from a Linux kernel `vxlan` device) and round trips between
//! ports on loopback addresses: each test owns its own 127.0.N.0/24 and a kernel-chosen UDP
//! port, so tests run in parallel without meeting.

use super::*;
use std::time::Duration;

/// The UDP payload of a datagram a Linux 6.x `vxlan` device (id 42, dstport 4789) sent,
/// captured with tcpdump on the underlay veth: the VXLAN header, then the inner frame (an
/// IPv6 neighbour solicitation from 02:00:00:00:00:02).
const KERNEL_DATAGRAM: [u8; 94] = [
    0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x02, 0x00,
    0x00, 0x00, 0x00, 0x02, 0x86, 0xdd, 0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x02,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x02, 0x87, 0x00,
    0x33, 0x77, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0xff, 0xfe, 0x00, 0x00, 0x02, 0x0e, 0x01, 0x32, 0x13, 0x82, 0x21, 0x87, 0x6e,
];

fn lo(net: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, net, host))
}

fn open(net: u8, host: u8, port: u16, vni: u32, remotes: &[u8]) -> VxlanPort {
    let remotes: Vec<IpAddr> = remotes.iter().map(|&h| lo(net, h)).collect();
    let mut o = VxlanOptions::new(vni, lo(net, host), &remotes);
    o.dstport = port;
    VxlanPort::open(&format!("vx{net}.{host}.{vni}"), &o).expect("open on loopback")
}

/// Ports 127.0.net.1 and .2, each the other's remote, on a kernel-chosen UDP port.
fn pair(net: u8, vni: u32) -> (VxlanPort, VxlanPort, u16) {
    let a = open(net, 1, 0, vni, &[2]);
    let port = a.local_addr().unwrap().port();
    let b = open(net, 2, port, vni, &[1]);
    // a's remote must use the port b bound: both ends share one dstport.
    a.handle().set_remotes(&[lo(net, 2)]).unwrap();
    (a, b, port)
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const BCAST: [u8; 6] = [0xff; 6];

fn send(p: &mut VxlanPort, frames: &[Vec<u8>]) {
    let mut batch = Batch::new(frames.len());
    for f in frames {
        assert!(batch.push_copy(f));
    }
    let sel: Vec<u16> = (0..frames.len() as u16).collect();
    assert_eq!(p.tx_burst(&mut batch, &sel), frames.len());
}

/// Polls `p` until `n` frames arrived (or 5 s passed, then fails).
fn recv(p: &mut VxlanPort, n: usize, cap: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut batch = Batch::new(cap);
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < n {
        assert!(Instant::now() < deadline, "got {} of {n} frames", out.len());
        batch.clear();
        if p.rx_burst(&mut batch) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(batch.len() <= MAX_BURST);
        out.extend(batch.packets().iter().map(|b| b.frame().to_vec()));
    }
    out
}

/// Polls `p` until its counters satisfy `f` (or 5 s passed, then fails).
fn until(p: &mut VxlanPort, what: &str, f: impl Fn(&VxlanCounters) -> bool) {
    let h = p.handle();
    let mut batch = Batch::new(8);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f(&h.counters()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", h.counters());
        batch.clear();
        assert_eq!(p.rx_burst(&mut batch), 0, "{what}: no frame should be delivered");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn header_fixture_and_parse_errors() {
    assert_eq!(header(42), [0x08, 0, 0, 0, 0, 0, 0x2a, 0]);
    assert_eq!(header(VNI_MAX), [0x08, 0, 0, 0, 0xff, 0xff, 0xff, 0]);
    let mut d = [0u8; HEADER_LEN + ETH_HLEN];
    d[..8].copy_from_slice(&header(0x123456));
    assert_eq!(parse(&d), Ok(0x123456));
    // Reserved bits are ignored on receipt (RFC 7348 §5).
    d[0] = 0xff;
    d[7] = 0xff;
    assert_eq!(parse(&d), Ok(0x123456));
    d[0] = 0xf7;
    assert_eq!(parse(&d), Err(Reason::BadFlags));
    assert_eq!(parse(&d[..HEADER_LEN + ETH_HLEN - 1]), Err(Reason::Short));
    assert_eq!(parse(&[]), Err(Reason::Short));
}

#[test]
fn kernel_captured_datagram_decodes_and_our_header_matches_it() {
    assert_eq!(parse(&KERNEL_DATAGRAM), Ok(42));
    assert_eq!(KERNEL_DATAGRAM[..HEADER_LEN], header(42));
    let inner = &KERNEL_DATAGRAM[HEADER_LEN..];
    assert_eq!(inner[..6], [0x33, 0x33, 0xff, 0, 0, 2]);
    assert_eq!(inner[6..12], [2, 0, 0, 0, 0, 2]);
    assert_eq!(inner[12..14], [0x86, 0xdd]);
}

#[test]
fn kernel_captured_datagram_is_received_and_its_mac_learned() {
    let (mut a, mut b, _) = pair(10, 42);
    let raw = UdpSocket::bind((Ipv4Addr::new(127, 0, 10, 1), 0)).unwrap();
    raw.send_to(&KERNEL_DATAGRAM, b.local_addr().unwrap()).unwrap();
    let got = recv(&mut b, 1, 4);
    assert_eq!(got, [KERNEL_DATAGRAM[HEADER_LEN..].to_vec()]);
    // b learned 02:00:00:00:00:02 behind a: unicast to it is not flooded.
    send(&mut b, &[frame([2, 0, 0, 0, 0, 2], MAC_B, 7, 60)]);
    let c = b.handle().counters();
    assert_eq!((c.tx_datagrams, c.tx_flooded), (1, 0));
    let got = recv(&mut a, 1, 4);
    assert_eq!(got[0][14..18], 7u32.to_be_bytes());
    assert_eq!(b.stats().rx_packets, 1);
    assert_eq!(b.stats().rx_bytes, (KERNEL_DATAGRAM.len() - HEADER_LEN) as u64);
}

#[test]
fn round_trips_in_batches_of_1_2_and_257() {
    let (mut a, mut b, _) = pair(11, 4242);
    let mut sent = 0u64;
    for n in [1usize, 2, 257] {
        let frames: Vec<Vec<u8>> = (0..n).map(|i| frame(BCAST, MAC_A, i as u32, 60 + i)).collect();
        send(&mut a, &frames);
        let got = recv(&mut b, n, n);
        assert_eq!(got, frames, "batch of {n}");
        sent += n as u64;
    }
    let s = a.stats();
    assert_eq!((s.tx_packets, s.tx_errors, s.tx_full), (sent, 0, 0));
    let c = a.handle().counters();
    assert_eq!((c.tx_datagrams, c.tx_flooded), (sent, sent));
    assert_eq!(c.tx_gso_sends, 0, "every frame a length of its own: no runs");
    assert_eq!(b.stats().rx_packets, sent);
    assert_eq!(b.stats().rx_dropped, 0);
    assert_eq!(b.handle().counters(), VxlanCounters::default());
    // A jumbo frame fits a buffer after the header.
    let jumbo = frame(BCAST, MAC_A, 9, MAX_FRAME);
    send(&mut a, std::slice::from_ref(&jumbo));
    assert_eq!(recv(&mut b, 1, 1), [jumbo]);
}

#[test]
fn runs_of_one_length_leave_as_segmented_sends_and_arrive_in_order() {
    let (mut a, mut b, _) = pair(16, 4243);
    assert_eq!(a.mode_name(), Some("udp socket, gso"));
    let (mut sent, mut runs) = (0u64, 0u64);
    // Runs of 64 (the cap) and what is left: 1 -> none, 2 -> one, 257 -> four and a single.
    for (n, want_runs) in [(1usize, 0u64), (2, 1), (257, 4)] {
        let frames: Vec<Vec<u8>> = (0..n).map(|i| frame(BCAST, MAC_A, i as u32, 60)).collect();
        send(&mut a, &frames);
        assert_eq!(recv(&mut b, n, 512), frames, "batch of {n}");
        sent += n as u64;
        runs += want_runs;
        let c = a.handle().counters();
        assert_eq!((c.tx_datagrams, c.tx_gso_sends), (sent, runs), "batch of {n}");
    }
    // A shorter frame ends a run, a longer one starts the next; jumbo frames run too.
    let lens = [60, 60, 60, 50, 60, 70, 70, MAX_FRAME, MAX_FRAME];
    let frames: Vec<Vec<u8>> =
        lens.iter().enumerate().map(|(i, &l)| frame(BCAST, MAC_A, i as u32, l)).collect();
    send(&mut a, &frames);
    assert_eq!(recv(&mut b, frames.len(), 16), frames);
    let c = a.handle().counters();
    assert_eq!(c.tx_datagrams, sent + lens.len() as u64);
    assert_eq!(c.tx_gso_sends, runs + 3, "[60 60 60 50] [60] [70 70] [jumbo jumbo]");
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.tx_errors, sa.tx_full, sb.rx_dropped), (0, 0, 0));
    // This kernel's loopback may cut runs before the socket (a veth hands them over whole:
    // tests/it/kernel_vxlan.rs); a receiver never reads more joined messages than were sent.
    let cb = b.handle().counters();
    assert!(cb.rx_gro_reads <= c.tx_gso_sends, "{cb:?}");
    assert_eq!(cb.drops, [0; NREASONS]);
}

#[test]
fn joined_messages_are_taken_apart_at_their_segment_length() {
    let mut st = Staging::new().unwrap();
    let got = |len, seg, truncated| Got { len, seg, from: Some(lo(17, 1)), truncated };
    st.got.extend([
        got(3 * 68 + 50, 68, false),
        got(0, 0, false),
        got(100, 100, true),
        got(68, 68, false),
    ]);
    let mut out = Vec::new();
    while let Some((at, n, g)) = st.take() {
        out.push((at, n, g.truncated));
    }
    let s = RX_SLOT;
    assert_eq!(
        out,
        [
            (0, 68, false),
            (68, 68, false),
            (136, 68, false),
            (204, 50, false),
            (s, 0, false),
            (2 * s, 100, true),
            (3 * s, 68, false)
        ]
    );
    assert!(st.is_empty());
}

#[test]
fn a_run_ends_at_another_remote_a_longer_frame_or_the_kernels_limits() {
    let mut t = TxMsgs::new(300);
    let mut q = |lens: &[(usize, usize)]| {
        for (i, &(len, r)) in lens.iter().enumerate() {
            t.set(i, std::ptr::null_mut(), len, r);
        }
        let (mut out, mut i) = (Vec::new(), 0);
        while i < lens.len() {
            let j = t.run_end(i, lens.len());
            out.push(j - i);
            i = j;
        }
        out
    };
    assert_eq!(q(&[(68, 0)]), [1]);
    assert_eq!(q(&[(68, 0), (68, 0), (68, 1), (68, 1), (68, 0)]), [2, 2, 1]);
    assert_eq!(q(&[(68, 0), (69, 0), (67, 0), (67, 0)]), [1, 2, 1]);
    assert_eq!(q(&[(68, 0); 200]), [64, 64, 64, 8]);
    // 9,242-byte datagrams: seven fit in GSO_BYTES, the eighth would not.
    assert_eq!(q(&[(9242, 0); 9]), [7, 2]);
}

#[test]
fn learned_macs_go_to_one_remote_and_the_rest_is_replicated() {
    let net = 12;
    let mut b = open(net, 2, 0, 7, &[1, 3]);
    let port = b.local_addr().unwrap().port();
    let mut a = open(net, 1, port, 7, &[2]);
    let mut c = open(net, 3, port, 7, &[2]);
    // b's remotes were made with port 0's peers unknown: same port now.
    b.handle().set_remotes(&[lo(net, 1), lo(net, 3)]).unwrap();
    // Unknown unicast from b reaches both.
    send(&mut b, &[frame(MAC_A, MAC_B, 1, 60)]);
    assert_eq!(recv(&mut a, 1, 4)[0][14..18], 1u32.to_be_bytes());
    assert_eq!(recv(&mut c, 1, 4)[0][14..18], 1u32.to_be_bytes());
    let cb = b.handle().counters();
    assert_eq!((cb.tx_datagrams, cb.tx_flooded), (2, 1));
    // a speaks; b learns MAC_A behind a, then unicasts to a alone.
    send(&mut a, &[frame(MAC_B, MAC_A, 2, 60)]);
    recv(&mut b, 1, 4);
    send(&mut b, &[frame(MAC_A, MAC_B, 3, 60), frame(BCAST, MAC_B, 4, 60)]);
    let cb = b.handle().counters();
    assert_eq!((cb.tx_datagrams, cb.tx_flooded), (2 + 1 + 2, 2));
    let got: Vec<_> = recv(&mut a, 2, 4).iter().map(|f| f[17]).collect();
    assert_eq!(got, [3, 4]);
    assert_eq!(recv(&mut c, 1, 4)[0][17], 4, "c sees only the broadcast");
    // New remotes: what was learned is forgotten, so MAC_A floods again, to c alone.
    b.handle().set_remotes(&[lo(net, 3)]).unwrap();
    send(&mut b, &[frame(MAC_A, MAC_B, 5, 60)]);
    assert_eq!(recv(&mut c, 1, 4)[0][17], 5);
    assert_eq!(b.handle().counters().tx_flooded, 3);
    // No remotes: dropped and counted.
    b.handle().set_remotes(&[]).unwrap();
    send(&mut b, &[frame(MAC_A, MAC_B, 6, 60)]);
    assert_eq!(b.handle().counters().drop(Reason::NoRemote), 1);
    assert_eq!(b.stats().tx_errors, 1);
}

#[test]
fn vnis_sharing_an_address_are_demultiplexed_and_unknown_vnis_counted() {
    let net = 13;
    let mut b10 = open(net, 2, 0, 10, &[1]);
    let port = b10.local_addr().unwrap().port();
    let mut b20 = open(net, 2, port, 20, &[1]);
    assert_eq!(b20.local_addr().unwrap(), b10.local_addr().unwrap(), "one shared socket");
    let mut a20 = open(net, 1, port, 20, &[2]);
    let mut a10 = open(net, 1, port, 10, &[2]);
    for n in [1usize, 2, 257] {
        let f20: Vec<Vec<u8>> = (0..n).map(|i| frame(BCAST, MAC_A, i as u32, 64)).collect();
        send(&mut a20, &f20);
        // b10 reads first: it hands every VNI-20 frame it reads to b20's inbox.
        let mut got = Vec::new();
        let mut batch = Batch::new(n);
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < n {
            assert!(
                Instant::now() < deadline,
                "b20 got {} of {n}: b10 {:?} b20 {:?}",
                got.len(),
                b10.handle().counters(),
                b20.handle().counters()
            );
            batch.clear();
            b10.rx_burst(&mut batch);
            assert!(batch.is_empty(), "b10 must not deliver VNI 20 frames");
            b20.rx_burst(&mut batch);
            got.extend(batch.packets().iter().map(|b| b.frame().to_vec()));
        }
        assert_eq!(got, f20);
    }
    send(&mut a10, &[frame(BCAST, MAC_A, 99, 64)]);
    assert_eq!(recv(&mut b10, 1, 4)[0][17], 99);
    // VNI 30 has no port on b's address.
    let raw = UdpSocket::bind((Ipv4Addr::new(127, 0, net, 1), 0)).unwrap();
    let mut d = header(30).to_vec();
    d.extend(frame(BCAST, MAC_A, 0, 60));
    raw.send_to(&d, b10.local_addr().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut batch = Batch::new(4);
    loop {
        let n = b10.handle().counters().drop(Reason::UnknownVni)
            + b20.handle().counters().drop(Reason::UnknownVni);
        if n == 1 {
            break;
        }
        assert!(Instant::now() < deadline);
        batch.clear();
        b10.rx_burst(&mut batch);
        b20.rx_burst(&mut batch);
        assert!(batch.is_empty());
    }
    // A VNI opened twice on one address is refused.
    let mut o = VxlanOptions::new(10, lo(net, 2), &[lo(net, 1)]);
    o.dstport = port;
    let e = VxlanPort::open("dup", &o).err().expect("duplicate VNI");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    assert!(e.to_string().contains("VNI 10 is already open"), "{e}");
    // Closing b20 frees VNI 20; its frames are then unknown.
    drop(b20);
    raw.send_to(
        &{
            let mut d = header(20).to_vec();
            d.extend(frame(BCAST, MAC_A, 0, 60));
            d
        },
        b10.local_addr().unwrap(),
    )
    .unwrap();
    until(&mut b10, "VNI 20 unknown after close", |c| c.drop(Reason::UnknownVni) >= 1);
    let _ = &mut a10;
}

#[test]
fn a_spoofed_flood_for_a_sibling_vni_never_fills_its_inbox() {
    let net = 16;
    let mut b10 = open(net, 2, 0, 10, &[1]);
    let port = b10.local_addr().unwrap().port();
    let mut b20 = open(net, 2, port, 20, &[1]);
    let mut a20 = open(net, 1, port, 20, &[2]);
    // More than an inbox holds, for VNI 20, from an address that is none of b20's remotes,
    // all read by b10.
    let stranger = UdpSocket::bind((Ipv4Addr::new(127, 0, net, 9), 0)).unwrap();
    let mut d = header(20).to_vec();
    d.extend(frame(BCAST, MAC_A, 0, 60));
    // In rounds, so the socket's receive buffer never overflows and each datagram is read.
    for round in 1..=6u64 {
        for _ in 0..50 {
            stranger.send_to(&d, b10.local_addr().unwrap()).unwrap();
        }
        until(&mut b10, "the flood read and refused", |c| {
            c.drop(Reason::UnknownRemote) == 50 * round
        });
    }
    assert_eq!(b10.handle().counters().drop(Reason::InboxFull), 0);
    // b20's real remote still gets through: nothing of the flood waits in its inbox.
    send(&mut a20, &[frame(BCAST, MAC_A, 7, 64)]);
    let mut got = Vec::new();
    let mut batch = Batch::new(4);
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() {
        assert!(Instant::now() < deadline, "b20 got nothing");
        batch.clear();
        b10.rx_burst(&mut batch);
        assert!(batch.is_empty(), "b10 must not deliver VNI 20 frames");
        b20.rx_burst(&mut batch);
        got.extend(batch.packets().iter().map(|b| b.frame().to_vec()));
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0][17], 7);
    assert_eq!(b20.handle().counters().drop(Reason::UnknownRemote), 0);
}

#[test]
fn bad_datagrams_are_dropped_by_reason() {
    let (_a, mut b, _) = pair(14, 5);
    let to = b.local_addr().unwrap();
    let from_a = UdpSocket::bind((Ipv4Addr::new(127, 0, 14, 1), 0)).unwrap();
    let stranger = UdpSocket::bind((Ipv4Addr::new(127, 0, 14, 9), 0)).unwrap();
    let good = {
        let mut d = header(5).to_vec();
        d.extend(frame(BCAST, MAC_A, 0, 60));
        d
    };
    from_a.send_to(&good[..HEADER_LEN + ETH_HLEN - 1], to).unwrap();
    let mut flagless = good.clone();
    flagless[0] = 0;
    from_a.send_to(&flagless, to).unwrap();
    stranger.send_to(&good, to).unwrap();
    from_a.send_to(&vec![0x08; HEADER_LEN + MAX_FRAME + 1], to).unwrap();
    until(&mut b, "four drops", |c| c.drops.iter().sum::<u64>() == 4);
    let c = b.handle().counters();
    assert_eq!(c.drop(Reason::Short), 1);
    assert_eq!(c.drop(Reason::BadFlags), 1);
    assert_eq!(c.drop(Reason::UnknownRemote), 1);
    assert_eq!(c.drop(Reason::TooLong), 1);
    assert_eq!((b.stats().rx_dropped, b.stats().rx_packets), (4, 0));
    let names: Vec<_> = c.nonzero_drops().map(|(n, _)| n).collect();
    assert_eq!(names, ["short", "bad_flags", "unknown_remote", "too_long"]);
}

#[test]
fn bad_options_and_remotes_are_refused_with_the_value() {
    let local = lo(15, 1);
    let bad = |vni: u32, remotes: &[IpAddr]| {
        VxlanPort::open("bad", &VxlanOptions::new(vni, local, remotes)).err().unwrap().to_string()
    };
    assert!(bad(0, &[]).contains("VNI 0 is not in 1..=16777215"));
    assert!(bad(1 << 24, &[]).contains("VNI 16777216"));
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert!(bad(1, &[v6]).contains("remote 2001:db8::1 is not of the local address"));
    assert!(bad(1, &[local]).contains("is the local address"));
    let mut o = VxlanOptions::new(1, local, &[]);
    o.dstport = 0;
    let p = VxlanPort::open("ok", &o).unwrap();
    let h = p.handle();
    assert!(h.set_remotes(&["224.0.0.1".parse().unwrap()]).is_err());
    let many: Vec<IpAddr> =
        (0..=MAX_REMOTES as u32).map(|i| IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + i))).collect();
    assert!(h.set_remotes(&many).unwrap_err().to_string().contains("at most 256"));
    h.set_remotes(&[lo(15, 2), lo(15, 2)]).unwrap();
    assert_eq!(h.remotes(), [lo(15, 2)], "duplicates removed");
    assert_eq!(h.vni(), 1);
}

#[test]
fn learning_table_ages_and_replaces() {
    let mut f = Fdb::new();
    f.learn(&MAC_A, 3, 10);
    assert_eq!(f.lookup(&MAC_A, 10 + AGING_S), Some(3));
    assert_eq!(f.lookup(&MAC_A, 11 + AGING_S), None);
    f.learn(&MAC_A, 4, 20);
    assert_eq!(f.lookup(&MAC_A, 20), Some(4));
    assert_eq!(f.lookup(&MAC_B, 20), None);
    // Far more MACs than slots: the table stays bounded and the newest are found.
    for i in 0..(FDB_SLOTS * 4) as u32 {
        let b = i.to_be_bytes();
        f.learn(&[2, 1, b[0], b[1], b[2], b[3]], 1, 30);
    }
    let last = ((FDB_SLOTS * 4) as u32 - 1).to_be_bytes();
    assert_eq!(f.lookup(&[2, 1, last[0], last[1], last[2], last[3]], 30), Some(1));
    f.clear();
    assert_eq!(f.lookup(&[2, 1, last[0], last[1], last[2], last[3]], 30), None);
}
