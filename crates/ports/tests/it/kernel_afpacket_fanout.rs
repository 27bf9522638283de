//! AF_PACKET fanout (`AfPacketPort::open_fanout`) on a veth pair (root only; skipped with a
//! printed reason otherwise): every frame reaches exactly one member, a flow always the same
//! one and in order, both members get flows; after the interface is deleted and made again,
//! the members re-join their group (each frame still reaches one member, not both).

use crate::common_kernel;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common_kernel::*;
use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::{Batch, Port, PortStatus};

/// An IPv4/UDP frame of flow `f` (its source port), carrying `seq`. Only what the kernel's
/// flow dissector reads is filled in.
fn udp(f: u16, seq: u32) -> Vec<u8> {
    let mut v = vec![0u8; 14 + 20 + 8 + 6];
    v[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    v[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    v[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut v[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&40u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 9, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 9, 1, 1]);
    v[34..36].copy_from_slice(&(20000 + f).to_be_bytes());
    v[36..38].copy_from_slice(&53u16.to_be_bytes());
    v[38..40].copy_from_slice(&14u16.to_be_bytes());
    v[42..44].copy_from_slice(&f.to_be_bytes());
    v[44..48].copy_from_slice(&seq.to_be_bytes());
    v
}

/// Sends `flows` × `per_flow` frames from `tx`; checks each reaches one member, each flow one
/// member in order; returns the frames each member got.
fn spread(
    tx: &mut AfPacketPort,
    members: &mut [AfPacketPort],
    flows: u16,
    per_flow: u32,
) -> Vec<u64> {
    let mut b = Batch::new(64);
    for seq in 0..per_flow {
        for f in 0..flows {
            if b.room() == 0 {
                let sel: Vec<u16> = (0..b.len() as u16).collect();
                assert_eq!(tx.tx_burst(&mut b, &sel), sel.len());
                b.clear();
            }
            b.push_copy(&udp(f, seq));
        }
    }
    let sel: Vec<u16> = (0..b.len() as u16).collect();
    assert_eq!(tx.tx_burst(&mut b, &sel), sel.len());
    let total = u64::from(flows) * u64::from(per_flow);
    let mut got = vec![0u64; members.len()];
    let mut owner: HashMap<u16, (usize, u32)> = HashMap::new();
    let mut rx = Batch::new(256);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Past `total`, a little longer: a second copy of any frame would show.
    let mut settle = None;
    loop {
        for (m, p) in members.iter_mut().enumerate() {
            rx.clear();
            p.rx_burst(&mut rx);
            for pk in rx.packets() {
                let fr = pk.frame();
                if fr.len() < 48 || fr[12..14] != [0x08, 0x00] || fr[36..38] != 53u16.to_be_bytes()
                {
                    continue; // not ours (the kernel's own traffic on the veth)
                }
                let f = u16::from_be_bytes([fr[42], fr[43]]);
                let seq = u32::from_be_bytes([fr[44], fr[45], fr[46], fr[47]]);
                let next = owner.entry(f).or_insert((m, 0));
                assert_eq!(next.0, m, "flow {f} reached members {} and {m}", next.0);
                assert_eq!(seq, next.1, "flow {f} out of order or duplicated on member {m}");
                next.1 += 1;
                got[m] += 1;
            }
        }
        let n: u64 = got.iter().sum();
        assert!(n <= total, "{n} frames received for {total} sent: a frame reached two members");
        if n == total && settle.is_none() {
            settle = Some(Instant::now() + Duration::from_millis(100));
        }
        if settle.is_some_and(|t| Instant::now() > t) {
            return got;
        }
        assert!(Instant::now() < deadline, "received {n} of {total}: {got:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn afpacket_fanout_gives_each_frame_to_one_member_by_flow_and_regroups_after_a_return() {
    if !root_or_skip(
        "afpacket_fanout_gives_each_frame_to_one_member_by_flow_and_regroups_after_a_return",
    ) {
        return;
    }
    let v = Veth::new();
    let mut members = AfPacketPort::open_fanout(&v.a, &AfPacketOptions::default(), 2)
        .unwrap_or_else(|e| panic!("{e}"));
    let id = members[0].fanout_id().unwrap();
    assert_eq!(members[1].fanout_id(), Some(id));
    assert_eq!(
        (members[0].name(), members[1].name()),
        (format!("{}#0", v.a).as_str(), format!("{}#1", v.a).as_str())
    );
    let mut tx = AfPacketPort::open(&v.b, &AfPacketOptions::default()).unwrap();
    let got = spread(&mut tx, &mut members, 48, 20);
    assert!(got.iter().all(|&n| n > 0), "both members got flows: {got:?}");

    v.delete();
    for m in members.iter_mut() {
        service_until(m, "down", |p| p.status() != PortStatus::Up);
    }
    service_until(&mut tx, "down", |p| p.status() != PortStatus::Up);
    v.recreate();
    // A member may find the old group still held by the other's old socket and retry.
    let deadline = Instant::now() + PATIENCE;
    while members.iter().any(|m| m.status() != PortStatus::Up) {
        assert!(
            Instant::now() < deadline,
            "members not back: {:?}",
            members.iter().map(|m| m.status()).collect::<Vec<_>>()
        );
        members.iter_mut().for_each(|m| m.service());
        std::thread::sleep(Duration::from_millis(2));
    }
    service_until(&mut tx, "up again", |p| p.status() == PortStatus::Up);
    let got = spread(&mut tx, &mut members, 48, 20);
    assert!(got.iter().all(|&n| n > 0), "both members got flows after the return: {got:?}");
}
