//! A memif port split into one port per queue (`MemifPort::split`), in one process: a split
//! server and a split client connect through the queues' `service()`, each queue moves frames
//! on its own ring only and in order, a peer that settles on fewer rings leaves the extra
//! queue Down with the reason, and a split with the wrong number of queues is refused.

use crate::memif_common;

use std::time::{Duration, Instant};

use memif_common::*;
use ports::memif::{MemifPort, MemifQueue};
use ports::{Batch, Port, PortStatus};

fn service_until(
    ports: &mut [&mut MemifQueue],
    what: &str,
    cond: impl Fn(&[&mut MemifQueue]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        ports.iter_mut().for_each(|p| p.service());
        if cond(ports) {
            return;
        }
        let st: Vec<_> = ports.iter().map(|p| p.status()).collect();
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {st:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Sends `frames` on `tx` and returns what each of `rxs` received, in order.
fn send(tx: &mut MemifQueue, rxs: &mut [&mut MemifQueue], frames: &[Vec<u8>]) -> Vec<Vec<Vec<u8>>> {
    let mut got: Vec<Vec<Vec<u8>>> = rxs.iter().map(|_| Vec::new()).collect();
    let mut sent = 0;
    let mut b = Batch::new(32);
    let mut r = Batch::new(256);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if sent < frames.len() {
            b.clear();
            frames[sent..(sent + 32).min(frames.len())]
                .iter()
                .for_each(|f| assert!(b.push_copy(f)));
            let sel: Vec<u16> = (0..b.len() as u16).collect();
            sent += tx.tx_burst(&mut b, &sel);
        }
        for (q, rx) in rxs.iter_mut().enumerate() {
            r.clear();
            rx.rx_burst(&mut r);
            got[q].extend(r.packets().iter().map(|p| p.frame().to_vec()));
        }
        let total: usize = got.iter().map(Vec::len).sum();
        if sent == frames.len() && total == frames.len() {
            return got;
        }
        assert!(Instant::now() < deadline, "stalled: sent {sent}, received {total}");
    }
}

/// A two-queue server ("srv") and client ("cli") on one socket, each split into its queues,
/// not yet connected; and the socket's path.
fn split_pair() -> (Vec<MemifQueue>, Vec<MemifQueue>, String) {
    let sock = unique_socket(false);
    let mut so = opts(&sock, "srv");
    so.queues = 2;
    let mut co = opts(&sock, "cli");
    co.queues = 2;
    let s = MemifPort::server(so).unwrap().split(2).unwrap();
    let c = MemifPort::client(co).unwrap().split(2).unwrap();
    (s, c, sock)
}

#[test]
fn each_queue_moves_frames_on_its_own_ring_in_order() {
    let (mut s, mut c, sock) = split_pair();
    assert_eq!(s[1].name(), "srv#1");
    {
        let (s0, s1) = s.split_at_mut(1);
        let (c0, c1) = c.split_at_mut(1);
        service_until(
            &mut [&mut s0[0], &mut s1[0], &mut c0[0], &mut c1[0]],
            "all queues up",
            |p| p.iter().all(|q| q.status() == PortStatus::Up),
        );
    }
    let a: Vec<Vec<u8>> = (0..300).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    let b: Vec<Vec<u8>> = (1000..1300).map(|q| frame(MAGIC_DPDK, q, frame_len(q))).collect();
    // Client queue 0 to the server: only server queue 0 sees it, in order; and so on.
    let (s0, s1) = s.split_at_mut(1);
    let (c0, c1) = c.split_at_mut(1);
    assert_eq!(send(&mut c0[0], &mut [&mut s0[0], &mut s1[0]], &a), vec![a.clone(), vec![]]);
    assert_eq!(send(&mut c1[0], &mut [&mut s0[0], &mut s1[0]], &b), vec![vec![], b.clone()]);
    assert_eq!(send(&mut s1[0], &mut [&mut c0[0], &mut c1[0]], &a), vec![vec![], a.clone()]);
    assert_eq!(s0[0].stats().rx_packets, 300);
    assert_eq!(s1[0].stats().rx_packets, 300);
    assert_eq!(s1[0].stats().tx_packets, 300);
    assert_eq!(s0[0].port_stats().connects, 1);

    // The client leaves: both server queues go down; a one-ring client brings queue 0 back
    // and leaves queue 1 down, saying why.
    drop(c);
    let (s0, s1) = s.split_at_mut(1);
    service_until(&mut [&mut s0[0], &mut s1[0]], "server queues down", |p| {
        p.iter().all(|q| q.status() != PortStatus::Up)
    });
    let mut one = MemifPort::client(opts(&sock, "one")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s0[0].status() != PortStatus::Up || one.status() != PortStatus::Up {
        one.service();
        s0[0].service();
        s1[0].service();
        assert!(Instant::now() < deadline, "one-ring client: {:?}", s0[0].status());
        std::thread::sleep(Duration::from_micros(200));
    }
    s1[0].service();
    let why = down_reason(&s1[0]);
    assert!(why.contains("none for queue 1"), "{why}");
    assert_eq!(one.queues(), (1, 1));
}

/// A queue whose `service` never ran since the peer connected (its worker asleep until
/// frames came) takes its rings at its first burst: nothing forwarded to it is refused.
#[test]
fn a_queue_takes_a_new_connections_rings_at_its_first_burst() {
    let (mut s, mut c, _sock) = split_pair();
    let (s0, s1) = s.split_at_mut(1);
    let (c0, c1) = c.split_at_mut(1);
    service_until(&mut [&mut s0[0], &mut c0[0], &mut c1[0]], "queue 0 and the client up", |p| {
        p.iter().all(|q| q.status() == PortStatus::Up)
    });
    assert_ne!(s1[0].status(), PortStatus::Up, "not serviced: it has not looked yet");
    let a: Vec<Vec<u8>> = (0..100).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    let mut b = Batch::new(32);
    a[..32].iter().for_each(|f| assert!(b.push_copy(f)));
    let sel: Vec<u16> = (0..32).collect();
    assert_eq!(s1[0].tx_burst(&mut b, &sel), 32, "the first burst, before any service");
    assert_eq!(s1[0].stats().tx_full, 0);
    assert_eq!(s1[0].status(), PortStatus::Up);
    let mut r = Batch::new(256);
    assert_eq!(c1[0].rx_burst(&mut r), 32, "on the client's ring 1");
    let first: Vec<Vec<u8>> = r.packets().iter().map(|p| p.frame().to_vec()).collect();
    assert_eq!(first, a[..32]);
    let got = send(&mut s1[0], &mut [&mut c0[0], &mut c1[0]], &a[32..]);
    assert_eq!(got, vec![vec![], a[32..].to_vec()]);
    assert_eq!(s1[0].stats().tx_packets, 100);
    assert_eq!(c1[0].stats().rx_packets, 100);
}

#[test]
fn a_split_must_match_the_queues() {
    let mut o = opts(&unique_socket(true), "srv");
    o.queues = 2;
    let e = MemifPort::server(o).unwrap().split(3).unwrap_err();
    assert!(e.to_string().contains("split into 3 queues, but the port has queues: 2"), "{e}");
}
