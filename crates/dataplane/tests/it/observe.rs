//! Capture and trace: copies of the frames seen at a port (received, sent, dropped with the
//! reason), a full capture ring losing copies (counted) but never packets, and the stages a
//! traced packet went through.

use crate::common;

use common::*;
use dataplane::impair::{Chance, ImpairConfig, ImpairDrop, Loss};
use dataplane::{Adj, CaptureRing, Dir, PortDrop, Reason, Tap, VrDrop};

const RINGS: [usize; 3] = [64, 64, 64];

fn fwd_frame() -> Vec<u8> {
    to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "8.8.8.8", 64, b"forward me"))
}

fn blackholed() -> Vec<u8> {
    to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "192.0.2.1", 64, b"drop me"))
}

#[test]
fn capture_rx_tx_and_drops_with_reasons() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let rx_ring = CaptureRing::new(16);
    let tx_ring = CaptureRing::new(16);
    lab.e.cell_mut().set_capture(Some(Tap::new(0, true, 0, rx_ring.clone())));
    let runt = vec![0u8; 10];
    lab.send(0, &[fwd_frame(), blackholed(), runt.clone()]);
    lab.run();
    let mut got = Vec::new();
    rx_ring.drain(&mut got, 100);
    let seen: Vec<_> = got.iter().map(|c| (c.dir, c.reason)).collect();
    assert_eq!(
        seen,
        [
            (Dir::Rx, None),
            (Dir::Rx, None),
            (Dir::Rx, None),
            (Dir::Drop, Some(Reason::Port(PortDrop::Runt))),
            (Dir::Drop, Some(Reason::Vr(VrDrop::Blackhole))),
        ]
    );
    assert_eq!(got[0].data, fwd_frame());
    assert_eq!(got[3].data, runt);
    assert_eq!(got[4].data, blackholed());
    assert_eq!(rx_ring.lost(), 0);
    let out = lab.recv(1);
    assert_eq!(out.len(), 1, "{}", lab.e.dump());
    let st = lab.e.cell().stages();
    assert_eq!((st.rx_bursts, st.rx_packets), (1, 3));
    assert_eq!((st.vr_bursts, st.vr_packets), (1, 2), "the runt never reached the VR");
    assert_eq!((st.tx_bursts, st.tx_packets), (1, 1));

    // The egress side: what port 1 sent, byte for byte.
    lab.e.cell_mut().set_capture(Some(Tap::new(1, false, 0, tx_ring.clone())));
    lab.send(0, &[fwd_frame(), blackholed()]);
    lab.run();
    let sent = lab.recv(1);
    let mut got = Vec::new();
    tx_ring.drain(&mut got, 100);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].dir, Dir::Tx);
    assert_eq!(got[0].data, sent[0]);
    assert!(lab.e.cell_mut().set_capture(None).is_some());
}

/// A link that loses every frame: a capture of its port's drops gets each one with the
/// impairment's reason (after the frame's transmit copy: the impairment took it), in bursts of
/// 1, 2 and 257 frames, and every counter says the same.
#[test]
fn an_impairments_drops_are_captured_with_their_reason() {
    assert_eq!(Reason::Impair(ImpairDrop::Loss).name(), "impair_loss");
    for n in [1usize, 2, 257] {
        let mut lab = Lab::new(&[base_vr()], &[512, 512, 512]);
        let lossy =
            ImpairConfig { loss: Loss::Random(Chance::ALWAYS), seed: 1, ..ImpairConfig::default() };
        lab.e.cell_mut().set_impair(1, Some(lossy)).unwrap();
        let ring = CaptureRing::new(4 * n);
        lab.e.cell_mut().set_capture(Some(Tap::new(1, true, 0, ring.clone())));
        lab.send(0, &vec![fwd_frame(); n]);
        lab.run();
        assert!(lab.recv(1).is_empty(), "n={n}: every frame is lost");
        let mut got = Vec::new();
        ring.drain(&mut got, 10 * n);
        let (tx, drops): (Vec<_>, Vec<_>) = got.iter().partition(|c| c.dir == Dir::Tx);
        assert_eq!((tx.len(), drops.len()), (n, n), "n={n}");
        for (t, d) in tx.iter().zip(&drops) {
            assert_eq!(
                (d.dir, d.reason, d.port),
                (Dir::Drop, Some(Reason::Impair(ImpairDrop::Loss)), 1)
            );
            assert_eq!(d.data, t.data, "n={n}: the frame as it was sent to the link");
        }
        // Within a burst, its transmit copies come before its drops.
        assert_eq!(got[0].dir, Dir::Tx);
        assert_eq!(got.last().unwrap().dir, Dir::Drop);
        assert_eq!((ring.taken(), ring.lost()), (2 * n as u64, 0), "n={n}");
        let imp = *lab.e.cell().port_impair(1).unwrap().counters();
        assert_eq!((imp.offered, imp.sent), (n as u64, 0), "n={n}");
        assert_eq!(imp.dropped(ImpairDrop::Loss), n as u64, "n={n}");
        for r in [ImpairDrop::Limit, ImpairDrop::Rate, ImpairDrop::TxFull] {
            assert_eq!(imp.dropped(r), 0, "n={n} {r:?}");
        }
        assert_eq!(lab.e.port_counters(1).tx_packets, 0, "n={n}");
        assert_eq!(lab.e.cell().stages().tx_packets, n as u64, "n={n}: the link took them");
    }
}

/// Frames a delayed link holds, refused by a full port when their time comes (a later poll's
/// release): each copied with `impair_tx_full`.
#[test]
fn frames_refused_at_their_release_are_captured_as_impair_tx_full() {
    const MS: u64 = 1_000_000;
    let mut lab = Lab::new(&[base_vr()], &[64, 4, 64]);
    let delayed = ImpairConfig { delay_ns: MS, ..ImpairConfig::default() };
    lab.e.cell_mut().set_impair(1, Some(delayed)).unwrap();
    let ring = CaptureRing::new(64);
    lab.e.cell_mut().set_capture(Some(Tap::new(1, true, 0, ring.clone())));
    lab.send(0, &vec![fwd_frame(); 8]);
    lab.run();
    assert_eq!(lab.e.cell().port_impair(1).unwrap().held(), 8);
    lab.run_at(2 * MS);
    assert_eq!(lab.recv(1).len(), 4, "the port's ring holds 4");
    let mut got = Vec::new();
    ring.drain(&mut got, 100);
    let seen: Vec<_> = got.iter().map(|c| (c.dir, c.reason)).collect();
    let tx_full = (Dir::Drop, Some(Reason::Impair(ImpairDrop::TxFull)));
    assert_eq!(seen, [[(Dir::Tx, None); 8].as_slice(), &[tx_full; 4]].concat());
    let imp = *lab.e.cell().port_impair(1).unwrap().counters();
    assert_eq!((imp.offered, imp.sent, imp.dropped(ImpairDrop::TxFull)), (8, 4, 4));
    assert_eq!(lab.e.port_counters(1).tx_packets, 4);
}

/// No capture of drops, or one of another port: the impairment drops and counts, nothing is
/// copied.
#[test]
fn an_impairments_drops_go_only_to_a_capture_of_its_ports_drops() {
    for (port, drops) in [(1, false), (0, true)] {
        let mut lab = Lab::new(&[base_vr()], &RINGS);
        let lossy = ImpairConfig { loss: Loss::Random(Chance::ALWAYS), ..ImpairConfig::default() };
        lab.e.cell_mut().set_impair(1, Some(lossy)).unwrap();
        let ring = CaptureRing::new(8);
        let tap = Tap::new(port, drops, 0, ring.clone());
        lab.e.cell_mut().set_capture(Some(tap));
        lab.send(0, &[fwd_frame(), fwd_frame()]);
        lab.run();
        let mut got = Vec::new();
        ring.drain(&mut got, 100);
        assert!(got.iter().all(|c| c.dir != Dir::Drop), "{got:?}");
        let imp = *lab.e.cell().port_impair(1).unwrap().counters();
        assert_eq!(imp.dropped(ImpairDrop::Loss), 2);
    }
}

#[test]
fn full_ring_loses_copies_not_packets() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let ring = CaptureRing::new(4);
    lab.e.cell_mut().set_capture(Some(Tap::new(0, false, 0, ring.clone())));
    lab.send(0, &vec![fwd_frame(); 10]);
    lab.run();
    assert_eq!(lab.recv(1).len(), 10, "forwarding goes on");
    assert_eq!((ring.taken(), ring.lost()), (4, 6));
    let mut got = Vec::new();
    assert_eq!(ring.drain(&mut got, 100), 4);
    // Room again.
    lab.send(0, &vec![fwd_frame(); 2]);
    lab.run();
    assert_eq!(ring.drain(&mut got, 100), 2);
}

#[test]
fn capture_stops_at_its_count() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    let ring = CaptureRing::new(64);
    lab.e.cell_mut().set_capture(Some(Tap::new(0, true, 3, ring.clone())));
    lab.send(0, &vec![fwd_frame(); 5]);
    lab.run();
    assert_eq!((ring.taken(), ring.lost()), (3, 0));
}

#[test]
fn trace_names_each_stage() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    lab.e.cell_mut().set_trace(0, 2).unwrap();
    lab.send(0, &[fwd_frame(), blackholed(), fwd_frame()]);
    lab.run();
    assert_eq!(lab.recv(1).len(), 2);
    let (recs, left) = lab.e.cell_mut().take_trace();
    assert_eq!((recs.len(), left), (2, 0));
    let f = &recs[0];
    assert_eq!((f.port, f.iface, f.ethertype), (0, 0, 0x0800));
    let (dst, _, adj) = f.lookup.expect("looked up");
    assert_eq!(dst, ip("8.8.8.8"));
    assert!(matches!(adj, Adj::Via { iface: 1, .. }), "{adj:?}");
    assert_eq!((f.egress, f.drop, f.impair), (Some(1), None, None));
    let d = &recs[1];
    assert_eq!(d.lookup.map(|l| (l.0, l.2)), Some((ip("192.0.2.1"), Adj::Blackhole)));
    assert_eq!((d.egress, d.drop), (None, Some(VrDrop::Blackhole)));
    lab.e.cell_mut().set_trace(0, 0).unwrap();
}

/// A packet the VR answers with an ICMP error (TTL 1) is traced with the length it arrived
/// with, not the error's, though the error is written over it in place.
/// Traced packets a lossy link drops as they are sent: each record has its egress and the
/// impairment's reason (a packet the VR dropped keeps the VR's), in bursts of 1, 2 and 257.
#[test]
fn a_trace_shows_what_the_egress_links_impairment_dropped() {
    for n in [1usize, 2, 257] {
        let mut lab = Lab::new(&[base_vr()], &[512, 512, 512]);
        let lossy = ImpairConfig { loss: Loss::Random(Chance::ALWAYS), ..ImpairConfig::default() };
        lab.e.cell_mut().set_impair(1, Some(lossy)).unwrap();
        lab.e.cell_mut().set_trace(0, n as u32 + 1).unwrap();
        let mut frames = vec![fwd_frame(); n];
        frames.insert(n / 2, blackholed());
        lab.send(0, &frames);
        lab.run();
        assert!(lab.recv(1).is_empty());
        let (recs, left) = lab.e.cell_mut().take_trace();
        assert_eq!((recs.len(), left), (n + 1, 0), "n={n}");
        for (k, r) in recs.iter().enumerate() {
            if k == n / 2 {
                assert_eq!((r.egress, r.drop, r.impair), (None, Some(VrDrop::Blackhole), None));
            } else {
                let want = (Some(1), None, Some(ImpairDrop::Loss));
                assert_eq!((r.egress, r.drop, r.impair), want, "n={n} record {k}");
            }
        }
        let imp = *lab.e.cell().port_impair(1).unwrap().counters();
        assert_eq!((imp.offered, imp.dropped(ImpairDrop::Loss)), (n as u64, n as u64), "n={n}");
        assert_eq!(lab.e.cell().stages().tx_packets, n as u64, "n={n}");
    }
}

#[test]
fn a_traced_drop_keeps_its_received_length() {
    let mut lab = Lab::new(&[base_vr()], &RINGS);
    lab.e.cell_mut().set_trace(0, 1).unwrap();
    let expiring = to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "8.8.8.8", 1, b"ttl one"));
    lab.send(0, std::slice::from_ref(&expiring));
    lab.run();
    let answered = lab.recv(0);
    assert_eq!(answered.len(), 1, "the time-exceeded error goes back: {}", lab.e.dump());
    assert_ne!(answered[0].len(), expiring.len(), "the error's length differs from the packet's");
    let (recs, _) = lab.e.cell_mut().take_trace();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].len as usize, expiring.len());
    assert_eq!(recs[0].drop, Some(VrDrop::TtlExpired));
}
