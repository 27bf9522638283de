//! A hostile vhost-user frontend against routeplex's vhost-user port: descriptor indexes out of
//! range, addresses outside the mapped memory, lengths that overflow, chains that loop, run
//! past the queue size or point the wrong way, a bad avail index, broken protocol messages.
//! Each is refused and counted by reason; nothing panics, nothing outside the shared memory is
//! touched (the test process would fault), and good frames around the bad ones still pass.
//! The frontend is rust-vmm's `vhost` crate in this process ([`vhost_common`]).

use crate::vhost_common;

use std::time::Duration;

use ports::vhost::VhostStats;
use ports::{Batch, Port, PortStatus};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vhost_common::*;

fn eth(seq: u8, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seq)).collect();
    f[12] = 0x88;
    f[13] = 0xb5;
    f
}

fn rx_all(port: &mut ports::vhost::VhostUserPort) -> Vec<Vec<u8>> {
    let mut b = Batch::new(256);
    port.rx_burst(&mut b);
    b.packets().iter().map(|p| p.frame().to_vec()).collect()
}

#[test]
fn good_frames_both_ways_with_mergeable_buffers_and_two_queue_pairs() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 2);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(2));
    assert_eq!(port.active_queue_pairs(), 2);

    // Guest → routeplex on both transmit rings (1 and 3); the header split from the frame
    // across two descriptors on ring 3.
    g.tx_one(1, 0, BUFS, &eth(1, 60));
    let f2 = eth(2, 1514);
    g.write(BUFS + 0x1000, &[0u8; 12]);
    g.write(BUFS + 0x2000, &f2);
    g.desc(3, 5, BUFS + 0x1000, 12, F_NEXT, 6);
    g.desc(3, 6, BUFS + 0x2000, f2.len() as u32, 0, 0);
    g.post(3, 5);
    let mut got = rx_all(&mut port);
    got.extend(rx_all(&mut port));
    got.sort_by_key(|f| f.len());
    assert_eq!(got, vec![eth(1, 60), f2]);
    assert_eq!(g.take_used(1), vec![(0, 0)]);
    assert_eq!(g.take_used(3), vec![(5, 0)]);

    // routeplex → guest: 1514-byte frame into 512-byte buffers on receive ring 0 (mergeable:
    // three chains, num_buffers = 3), then a 60-byte frame on the next call's ring (2).
    for i in 0..8u16 {
        g.desc(0, i, BUFS + 0x10000 + 512 * i as u64, 512, F_WRITE, 0);
        g.post(0, i);
        g.desc(2, i, BUFS + 0x20000 + 512 * i as u64, 512, F_WRITE, 0);
        g.post(2, i);
    }
    let big = eth(9, 1514);
    let mut b = Batch::new(4);
    b.push_copy(&big);
    assert_eq!(port.tx_burst(&mut b, &[0]), 1);
    let used = g.take_used(0);
    assert_eq!(used.iter().map(|u| u.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(used.iter().map(|u| u.1).sum::<u32>(), 12 + 1514);
    let hdr = g.read(BUFS + 0x10000, 12);
    assert_eq!(u16::from_le_bytes([hdr[10], hdr[11]]), 3, "num_buffers");
    let mut back = g.read(BUFS + 0x10000 + 12, 500);
    back.extend(g.read(BUFS + 0x10000 + 512, 512));
    back.extend(g.read(BUFS + 0x10000 + 1024, 1514 - 1012));
    assert_eq!(back, big);
    b.clear();
    b.push_copy(&eth(3, 60));
    assert_eq!(port.tx_burst(&mut b, &[0]), 1);
    assert_eq!(g.take_used(2), vec![(0, 72)]);
    assert_eq!(g.read(BUFS + 0x20000 + 12, 60), eth(3, 60));
    // The driver did not set NO_INTERRUPT: the call eventfds were signalled.
    assert!(g.calls[0].read().is_ok() && g.calls[2].read().is_ok());

    let s = port.stats();
    assert_eq!((s.rx_packets, s.tx_packets, s.rx_dropped, s.tx_errors), (2, 2, 0, 0));
    assert_eq!(port.vhost_stats().connects, 1);
}

#[test]
fn hostile_transmit_descriptors_are_refused_and_counted() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    let t = 1; // the guest's transmit ring
    let mut want = VhostStats { connects: 1, ..Default::default() };

    // Head index out of range.
    g.post(t, Q + 7);
    want.bad_index += 1;
    // Address outside the mapped memory.
    g.desc(t, 1, 0x10_0000_0000, 100, 0, 0);
    g.post(t, 1);
    want.bad_addr += 1;
    // Inside at the start, past the end of the region.
    g.desc(t, 2, MEM as u64 - 50, 100, 0, 0);
    g.post(t, 2);
    want.bad_addr += 1;
    // addr + len overflows.
    g.desc(t, 3, u64::MAX - 10, 100, 0, 0);
    g.post(t, 3);
    want.bad_len += 1;
    // A length of 4 GiB - 1 from a good address.
    g.desc(t, 4, BUFS, u32::MAX, 0, 0);
    g.post(t, 4);
    want.bad_addr += 1;
    // A loop: 5 -> 6 -> 5.
    g.desc(t, 5, BUFS, 12, F_NEXT, 6);
    g.desc(t, 6, BUFS + 12, 10, F_NEXT, 5);
    g.post(t, 5);
    want.bad_chain += 1;
    // `next` out of range.
    g.desc(t, 7, BUFS, 12, F_NEXT, 999);
    g.post(t, 7);
    want.bad_chain += 1;
    // A chain longer than the queue: every descriptor points to the next, the last to 8.
    for i in 8..Q {
        g.desc(t, i, BUFS, 1, F_NEXT, if i + 1 < Q { i + 1 } else { 8 });
    }
    g.post(t, 8);
    want.bad_chain += 1;
    // A write-only descriptor in a transmit chain.
    g.desc(t, 9, BUFS, 100, F_WRITE, 0);
    g.post(t, 9);
    want.bad_chain += 1;
    // Shorter than the virtio-net header.
    g.desc(t, 10, BUFS, 5, 0, 0);
    g.post(t, 10);
    want.bad_len += 1;
    // An indirect table outside memory.
    g.desc(t, 11, 0x7777_0000_0000, 64, F_INDIRECT, 0);
    g.post(t, 11);
    want.bad_chain += 1;
    // Longer than a packet buffer.
    g.write(BUFS, &[0u8; 12]);
    g.desc(t, 12, BUFS, 12 + ports::MAX_FRAME as u32 + 1, 0, 0);
    g.post(t, 12);
    want.too_long += 1;
    // And a good one after all that.
    g.tx_one(t, 13, BUFS + 0x8000, &eth(5, 100));

    let got = rx_all(&mut port);
    assert_eq!(got, vec![eth(5, 100)], "only the good frame comes through");
    let v = port.vhost_stats();
    assert_eq!(v, VhostStats { unsealed_regions: 0, ..want }, "{v:?}");
    let dropped = want.bad_index + want.bad_addr + want.bad_len + want.bad_chain + want.too_long;
    assert_eq!(port.stats().rx_dropped, dropped);
    assert_eq!(port.stats().rx_packets, 1);
    // Every chain with a valid head went back to the driver; the bad head could not.
    let ids: Vec<u32> = g.take_used(t).iter().map(|u| u.0).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13]);
    assert_eq!(port.status(), PortStatus::Up);
}

#[test]
fn hostile_receive_descriptors_are_refused_and_counted() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    let r = 0; // the guest's receive ring
    g.desc(r, 0, BUFS, 2048, 0, 0); // readable: wrong direction
    g.post(r, 0);
    g.desc(r, 1, 0x10_0000_0000, 2048, F_WRITE, 0); // outside memory
    g.post(r, 1);
    g.desc(r, 2, u64::MAX - 100, 2048, F_WRITE, 0); // overflows
    g.post(r, 2);
    g.post(r, Q); // head out of range
    g.desc(r, 3, BUFS, 16, F_WRITE | F_NEXT, 3); // loops on itself
    g.post(r, 3);
    g.desc(r, 4, BUFS + 0x4000, 2048, F_WRITE, 0); // good
    g.post(r, 4);
    let mut b = Batch::new(8);
    for i in 0..6 {
        b.push_copy(&eth(i, 200));
    }
    let sel: Vec<u16> = (0..6).collect();
    // Five frames are refused (one per bad chain), the sixth lands in the good buffer.
    assert_eq!(port.tx_burst(&mut b, &sel), 6);
    assert_eq!(g.read(BUFS + 0x4000 + 12, 200), eth(5, 200));
    let v = port.vhost_stats();
    assert_eq!((v.bad_chain, v.bad_addr, v.bad_len, v.bad_index), (2, 1, 1, 1), "{v:?}");
    let s = port.stats();
    assert_eq!((s.tx_packets, s.tx_errors, s.tx_full), (1, 5, 0), "{s:?}");
    let used = g.take_used(r);
    assert_eq!(used, vec![(0, 0), (1, 0), (2, 0), (3, 0), (4, 212)]);
    // The ring is empty now: a frame waits (tx_full), it is not dropped.
    b.clear();
    b.push_copy(&eth(6, 60));
    assert_eq!(port.tx_burst(&mut b, &[0]), 0);
    assert_eq!(port.stats().tx_full, 1);
}

#[test]
fn a_bad_avail_index_stops_the_ring_until_the_frontend_sets_it_up_again() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    g.tx_one(1, 0, BUFS, &eth(1, 60));
    // Publish an index a queue and more ahead of what was made available.
    g.set_avail_idx(1, g.avail[1].wrapping_add(Q + 1));
    assert!(rx_all(&mut port).is_empty());
    assert!(rx_all(&mut port).is_empty());
    assert_eq!(port.vhost_stats().bad_avail_idx, 1, "counted once, the ring is stopped");
    assert_eq!(port.stats().rx_packets, 0);
    // The frontend resets the ring (as a guest driver reset would), and it works again.
    let (fe, mut g) = with_port(&mut port, move || {
        let base = fe.get_vring_base(1).unwrap();
        assert_eq!(base, 0, "nothing was taken from the broken ring");
        g.avail[1] = 0;
        g.used_seen[1] = 0;
        g.set_avail_idx(1, 0);
        g.write(Guest::used_addr(1), &[0; 4]);
        fe.set_vring_base(1, 0).unwrap();
        fe.set_vring_kick(1, &g.kicks[1]).unwrap();
        (fe, g)
    });
    g.tx_one(1, 0, BUFS, &eth(2, 60));
    assert_eq!(rx_all(&mut port), vec![eth(2, 60)]);
    drop(fe);
}

/// One broken message (or sequence) a frontend sends after connecting.
type Case = Box<dyn FnOnce(&mut vhost::vhost_user::Frontend, &Guest) + Send>;

#[test]
fn broken_protocol_messages_close_the_connection_and_the_next_frontend_works() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let cases: Vec<(&str, Case)> = vec![
        (
            "region past the end of its file",
            Box::new(|fe, g| {
                let mut r = g.region();
                r.memory_size = 2 * MEM as u64;
                let _ = fe.set_mem_table(&[r]);
            }),
        ),
        (
            "ring outside the memory table",
            Box::new(|fe, g| {
                fe.set_mem_table(&[g.region()]).unwrap();
                fe.set_vring_num(0, Q).unwrap();
                let mut c = g.ring_config(0);
                c.desc_table_addr = 0x1234_0000_0000;
                let _ = fe.set_vring_addr(0, &c);
            }),
        ),
        (
            "queue size not a power of two",
            Box::new(|fe, _| {
                let _ = fe.set_vring_num(0, 100);
            }),
        ),
        (
            "ring index out of range",
            Box::new(|fe, _| {
                let _ = fe.set_vring_num(7, Q);
            }),
        ),
        (
            "features not offered",
            Box::new(|fe, _| {
                let _ = fe.set_features(1 << 0); // CSUM
            }),
        ),
        (
            "overlapping regions",
            Box::new(|fe, g| {
                let a = g.region();
                let b = VhostUserMemoryRegionInfo { guest_phys_addr: 0x1000, ..g.region() };
                let _ = fe.set_mem_table(&[a, b]);
            }),
        ),
    ];
    let n = cases.len() as u64;
    for (what, case) in cases {
        let s2 = sock.clone();
        with_port(&mut port, move || {
            let g = Guest::new(1);
            let mut fe = vhost::vhost_user::Frontend::connect(&s2, 16).unwrap();
            fe.set_owner().unwrap();
            fe.get_features().unwrap();
            fe.set_features(VERSION_1 | MRG_RXBUF | PROTOCOL_FEATURES).unwrap();
            case(&mut fe, &g);
            // Give the port time to read the message before the connection closes.
            std::thread::sleep(Duration::from_millis(20));
        });
        let why = match port.status() {
            PortStatus::Down(r) => r,
            PortStatus::Up => panic!("{what}: port up"),
        };
        assert!(why.contains("broke the protocol"), "{what}: {why}");
    }
    let v = port.vhost_stats();
    assert_eq!((v.connects, v.protocol_errors, v.disconnects), (n, n, n), "{v:?}");
    // A well-behaved frontend after all that.
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    g.tx_one(1, 0, BUFS, &eth(1, 64));
    assert_eq!(rx_all(&mut port), vec![eth(1, 64)]);
}

#[test]
fn a_frontend_that_leaves_is_forgotten_and_the_next_one_starts_clean() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (fe, g) = connect(&mut port, sock.clone(), Guest::new(1));
    drop(fe);
    drop(g);
    for _ in 0..100 {
        port.service();
        if port.status() != PortStatus::Up {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let why = match port.status() {
        PortStatus::Down(r) => r,
        PortStatus::Up => panic!("still up"),
    };
    assert!(why.contains("frontend disconnected") && why.contains("waiting"), "{why}");
    assert_eq!(port.active_queue_pairs(), 0);
    let mut b = Batch::new(1);
    b.push_copy(&eth(0, 60));
    assert_eq!(port.tx_burst(&mut b, &[0]), 0);
    assert_eq!(port.rx_burst(&mut b), 0);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    g.tx_one(1, 0, BUFS, &eth(4, 80));
    assert_eq!(rx_all(&mut port), vec![eth(4, 80)]);
    assert_eq!(port.vhost_stats().connects, 2);
    assert_eq!(port.vhost_stats().disconnects, 1);
}

/// QEMU 7.2 sends SET_VRING_ENABLE before SET_FEATURES and never again after the device
/// starts; the port must remember those early requests (the `vhost` crate refuses them).
#[test]
fn a_vring_enable_before_set_features_is_honoured_as_qemu_sends_it() {
    use std::io::Write;
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let s2 = sock.clone();
    let (fe, mut g) = with_port(&mut port, move || {
        let g = Guest::new(1);
        let s = std::os::unix::net::UnixStream::connect(&s2).unwrap();
        let mut raw = s.try_clone().unwrap();
        let fe = vhost::vhost_user::Frontend::from_stream(s, 3);
        fe.set_owner().unwrap();
        fe.get_features().unwrap();
        // SET_VRING_ENABLE (18), version 1, 8 bytes: ring r, enabled, before SET_FEATURES.
        for r in 0u32..2 {
            let mut m = Vec::new();
            for w in [18u32, 1, 8, r, 1] {
                m.extend(w.to_le_bytes());
            }
            raw.write_all(&m).unwrap();
        }
        fe.set_features(VERSION_1 | MRG_RXBUF | PROTOCOL_FEATURES).unwrap();
        fe.set_mem_table(&[g.region()]).unwrap();
        for r in 0..2 {
            fe.set_vring_num(r, Q).unwrap();
            fe.set_vring_addr(r, &g.ring_config(r)).unwrap();
            fe.set_vring_base(r, 0).unwrap();
            fe.set_vring_call(r, &g.calls[r]).unwrap();
            fe.set_vring_kick(r, &g.kicks[r]).unwrap();
        }
        (fe, g)
    });
    assert_eq!(port.status(), PortStatus::Up, "rings enabled by the early requests");
    assert_eq!(port.vhost_stats().refused_messages, 0);
    g.tx_one(1, 0, BUFS, &eth(1, 64));
    assert_eq!(rx_all(&mut port), vec![eth(1, 64)]);
    drop(fe);
}
