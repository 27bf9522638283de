//! routeplex ↔ routeplex over memif, in one process: a server port and a client port.
//!
//! Proves the handshake, both directions byte-exact in bursts of 1, 2 and 257, the counters,
//! several queues, chained buffers, interrupt mode (the eventfd becomes readable), file and
//! abstract sockets, the refusal reasons a client sees, and recovery when either side goes away
//! mid-traffic.

use crate::memif_common;

use std::time::Duration;

use memif_common::*;
use ports::memif::{MemifOptions, MemifPort, RxMode};
use ports::{Batch, Port, PortStats, PortStatus};

fn frames(magic: u32, n: u32) -> Vec<Vec<u8>> {
    (0..n).map(|s| frame(magic, s, frame_len(s))).collect()
}

fn bytes(f: &[Vec<u8>]) -> u64 {
    f.iter().map(|f| f.len() as u64).sum()
}

#[test]
fn handshake_both_directions_bursts_and_counters_on_a_file_socket() {
    let sock = unique_socket(false);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let waiting = down_reason(&s);
    assert!(waiting.contains(&format!("waiting for a client on {sock}")), "{waiting}");
    assert!(std::path::Path::new(&sock).exists());
    let mut c = MemifPort::client(opts(&sock, "cli")).unwrap();
    connect(&mut s, &mut c);
    assert_eq!((s.queues(), c.queues()), ((1, 1), (1, 1)));
    assert_eq!((s.peer_name(), c.peer_name()), ("cli", "routeplex"));

    let mut total = [0u64; 4]; // c->s packets, bytes, s->c packets, bytes
    let mut seq = 0;
    for burst in [1usize, 2, 257] {
        let up = (seq..seq + burst as u32)
            .map(|q| frame(MAGIC_RPX, q, frame_len(q)))
            .collect::<Vec<_>>();
        let down = (seq..seq + burst as u32)
            .map(|q| frame(MAGIC_DPDK, q, frame_len(q + 1)))
            .collect::<Vec<_>>();
        seq += burst as u32;
        assert_eq!(transfer(&mut c, &mut s, &up, burst), up, "client to server, burst {burst}");
        assert_eq!(transfer(&mut s, &mut c, &down, burst), down, "server to client, burst {burst}");
        total[0] += up.len() as u64;
        total[1] += bytes(&up);
        total[2] += down.len() as u64;
        total[3] += bytes(&down);
    }
    let cs = PortStats {
        tx_packets: total[0],
        tx_bytes: total[1],
        rx_packets: total[2],
        rx_bytes: total[3],
        ..Default::default()
    };
    let ss = PortStats {
        rx_packets: total[0],
        rx_bytes: total[1],
        tx_packets: total[2],
        tx_bytes: total[3],
        ..Default::default()
    };
    assert_eq!(c.stats(), cs);
    assert_eq!(s.stats(), ss);
    let m = s.memif_stats();
    assert_eq!((m.connects, m.disconnects, m.bad_desc, m.protocol_errors), (1, 0, 0, 0));

    // Frames that do not fit stay with the caller: the ring holds 1024 slots.
    let mut b = Batch::new(256);
    let mut sent = 0;
    for _ in 0..5 {
        b.clear();
        for _ in 0..256 {
            b.push_copy(&frame(MAGIC_RPX, 0, 64));
        }
        let sel: Vec<u16> = (0..256).collect();
        sent += c.tx_burst(&mut b, &sel);
    }
    assert_eq!(sent, 1024);
    assert_eq!(c.stats().tx_full, 256);
    drop(c);
    drop(s);
    assert!(!std::path::Path::new(&sock).exists(), "server removes its socket file");
}

#[test]
fn abstract_socket_with_several_queues() {
    let sock = unique_socket(true);
    let (mut s, mut c) = pair(&sock, |o| o.queues = 4);
    assert_eq!((s.queues(), c.queues()), ((4, 4), (4, 4)));
    let up = frames(MAGIC_RPX, 3000);
    let down = frames(MAGIC_DPDK, 3000);
    // Calls rotate over the rings and the receiver drains them round-robin: every frame
    // arrives exactly once, byte-exact, though not necessarily in global order.
    let mut got = transfer(&mut c, &mut s, &up, 64);
    got.sort_by_key(|f| check_frame(f, MAGIC_RPX).unwrap());
    assert_eq!(got, up);
    let mut got = transfer(&mut s, &mut c, &down, 64);
    got.sort_by_key(|f| check_frame(f, MAGIC_DPDK).unwrap());
    assert_eq!(got, down);
    assert_eq!(s.stats().rx_dropped + c.stats().rx_dropped, 0);
}

#[test]
fn queue_count_is_the_smaller_offer() {
    let sock = unique_socket(true);
    let mut s = MemifPort::server({
        let mut o = opts(&sock, "srv");
        o.queues = 2;
        o.log2_ring_size = 8;
        o
    })
    .unwrap();
    let mut c = MemifPort::client({
        let mut o = opts(&sock, "cli");
        o.queues = 5;
        o
    })
    .unwrap();
    connect(&mut s, &mut c);
    assert_eq!((s.queues(), c.queues()), ((2, 2), (2, 2)));
    let f = frames(MAGIC_RPX, 600);
    let mut got = transfer(&mut c, &mut s, &f, 100);
    got.sort_by_key(|f| check_frame(f, MAGIC_RPX).unwrap());
    assert_eq!(got, f);
}

#[test]
fn small_buffers_chain_in_both_directions() {
    // The client carves 256-byte buffers; frames up to 1514 bytes take up to 6 chained slots
    // each way (the server fills the client's posted 256-byte buffers the same way).
    let sock = unique_socket(false);
    let (mut s, mut c) = pair(&sock, |o| o.buffer_size = 256);
    let up = frames(MAGIC_RPX, 700);
    assert_eq!(transfer(&mut c, &mut s, &up, 32), up);
    let down = frames(MAGIC_DPDK, 700);
    assert_eq!(transfer(&mut s, &mut c, &down, 32), down);
    assert_eq!(s.memif_stats().bad_chain + c.memif_stats().bad_chain, 0);
}

fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn interrupt_mode_signals_the_eventfd() {
    let sock = unique_socket(true);
    let mut so = opts(&sock, "srv");
    so.rx_mode = RxMode::Interrupt;
    so.queues = 2;
    let mut co = opts(&sock, "cli");
    co.rx_mode = RxMode::Interrupt;
    co.queues = 2;
    let mut s = MemifPort::server(so).unwrap();
    let mut c = MemifPort::client(co).unwrap();
    assert!(s.rx_fds().is_empty(), "no fds while down");
    connect(&mut s, &mut c);
    signalled(&mut c, &mut s, MAGIC_RPX);
    signalled(&mut s, &mut c, MAGIC_DPDK);
}

fn signalled(tx: &mut MemifPort, rx: &mut MemifPort, magic: u32) {
    let fds = rx.rx_fds();
    assert_eq!(fds.len(), 2);
    assert!(fds.iter().all(|&fd| !readable(fd)), "quiet before traffic");
    let mut b = Batch::new(4);
    b.push_copy(&frame(magic, 7, 100));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    assert!(fds.iter().any(|&fd| readable(fd)), "a ring's eventfd signals the frame");
    let mut r = Batch::new(4);
    assert_eq!(rx.rx_burst(&mut r), 1);
    assert_eq!(check_frame(r.get(0).frame(), magic), Ok(7));
    // A second look finds the rings empty and consumes the signal.
    r.clear();
    assert_eq!(rx.rx_burst(&mut r), 0);
    assert_eq!(rx.rx_burst(&mut r), 0);
    assert!(fds.iter().all(|&fd| !readable(fd)), "signal consumed");
}

/// A polling port asked to signal before a worker sleeps: its wakeup descriptors are the
/// control socket and the ring eventfds; once armed, a frame from the peer makes one readable
/// (and a frame already waiting makes `arm_wakeup` say so); disarmed, nothing is signalled.
#[test]
fn armed_polling_receiver_is_signalled_until_disarmed() {
    let sock = unique_socket(true);
    let (mut s, mut c) = pair(&sock, |o| o.queues = 2);
    armed_signals(&mut c, &mut s, MAGIC_RPX);
    armed_signals(&mut s, &mut c, MAGIC_DPDK);
    // A port that is down offers only its control socket, and still counts as waitable.
    drop(c);
    pump_until(&mut [&mut s], "server down", |p| p[0].status() != PortStatus::Up);
    let mut fds = Vec::new();
    assert!(s.wakeup_fds(&mut fds));
    assert_eq!(fds, s.ctl_fds());
    assert!(!s.arm_wakeup());
}

fn armed_signals(tx: &mut MemifPort, rx: &mut MemifPort, magic: u32) {
    let mut fds = Vec::new();
    assert!(rx.wakeup_fds(&mut fds));
    let rings = rx.rx_fds();
    assert_eq!(rings.len(), 2);
    assert!(rings.iter().all(|fd| fds.contains(fd)), "{fds:?} {rings:?}");
    assert!(rx.ctl_fds().iter().all(|fd| fds.contains(fd)), "{fds:?}");
    let mut b = Batch::new(1);
    let mut r = Batch::new(4);
    // Armed, a frame signals.
    assert!(!rx.arm_wakeup(), "nothing waiting yet");
    b.push_copy(&frame(magic, 1, 60));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    assert!(rings.iter().any(|&fd| readable(fd)), "armed: the frame is signalled");
    rx.disarm_wakeup();
    assert_eq!(rx.rx_burst(&mut r), 1);
    // Disarmed, none does; a frame that arrived meanwhile is reported at arming, which also
    // consumes the old signals.
    b.clear();
    b.push_copy(&frame(magic, 2, 60));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    assert!(rx.arm_wakeup(), "a frame is waiting: do not sleep");
    assert!(rings.iter().all(|&fd| !readable(fd)), "old signals consumed at arming");
    rx.disarm_wakeup();
    r.clear();
    assert_eq!(rx.rx_burst(&mut r), 1);
    b.clear();
    b.push_copy(&frame(magic, 3, 60));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    assert!(rings.iter().all(|&fd| !readable(fd)), "disarmed: polled, not signalled");
    r.clear();
    assert_eq!(rx.rx_burst(&mut r), 1);
}

#[test]
fn polling_receiver_is_not_signalled() {
    let sock = unique_socket(true);
    let (mut s, mut c) = pair(&sock, |_| {});
    let fds = s.rx_fds();
    assert_eq!(fds.len(), 1);
    let mut b = Batch::new(1);
    b.push_copy(&frame(MAGIC_RPX, 1, 60));
    assert_eq!(c.tx_burst(&mut b, &[0]), 1);
    assert!(!readable(fds[0]), "MASK_INT set: no syscall per burst");
    assert_eq!(s.rx_burst(&mut Batch::new(1)), 1);
}

#[test]
fn server_takes_a_new_client_after_the_old_one_is_dropped_mid_traffic() {
    let sock = unique_socket(false);
    let (mut s, c) = pair(&sock, |_| {});
    let mut c = c;
    // Leave frames in flight, then drop the client.
    let mut b = Batch::new(64);
    for q in 0..64 {
        b.push_copy(&frame(MAGIC_RPX, q, frame_len(q)));
    }
    let sel: Vec<u16> = (0..64).collect();
    assert_eq!(c.tx_burst(&mut b, &sel), 64);
    let mut r = Batch::new(10);
    assert_eq!(s.rx_burst(&mut r), 10);
    drop(c);
    pump_until(&mut [&mut s], "server down", |p| p[0].status() != PortStatus::Up);
    let why = down_reason(&s);
    assert!(why.contains("peer disconnected: interface closed"), "{why}");
    assert!(why.contains("waiting for a client"), "{why}");
    assert_eq!(s.rx_burst(&mut Batch::new(64)), 0);
    assert_eq!(s.tx_burst(&mut b, &[0]), 0, "down: takes nothing");

    let mut c2 = MemifPort::client(opts(&sock, "cli2")).unwrap();
    connect(&mut s, &mut c2);
    assert_eq!(s.peer_name(), "cli2");
    let f = frames(MAGIC_RPX, 500);
    assert_eq!(transfer(&mut c2, &mut s, &f, 50), f, "fresh rings: nothing of the old session");
    let f = frames(MAGIC_DPDK, 500);
    assert_eq!(transfer(&mut s, &mut c2, &f, 50), f);
    let m = s.memif_stats();
    assert_eq!((m.connects, m.disconnects), (2, 1));
}

#[test]
fn server_notices_a_client_that_vanishes_without_disconnect() {
    // Closing the socket without DISCONNECT is what a killed process does.
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let addr = ports::memif::ctl::SocketAddr::parse(&sock).unwrap();
    let raw = ports::memif::ctl::Conn::connect(&addr).unwrap();
    pump_until(&mut [&mut s], "handshake starts", |p| down_reason(&*p[0]).contains("handshake"));
    drop(raw);
    pump_until(&mut [&mut s], "server waits again", |p| {
        down_reason(&*p[0]).contains("connection closed without DISCONNECT")
    });
}

#[test]
fn client_reconnects_when_the_server_comes_back() {
    let sock = unique_socket(false);
    let mut c = MemifPort::client(opts(&sock, "cli")).unwrap();
    let why = down_reason(&c);
    assert!(why.contains(&format!("connecting to {sock}")), "{why}");
    assert!(why.contains("retrying every 5 ms"), "{why}");
    for round in 0..3 {
        let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
        connect(&mut s, &mut c);
        let f = frames(MAGIC_RPX, 300);
        assert_eq!(transfer(&mut c, &mut s, &f, 30), f, "round {round}");
        let f = frames(MAGIC_DPDK, 300);
        assert_eq!(transfer(&mut s, &mut c, &f, 30), f, "round {round}");
        drop(s);
        pump_until(&mut [&mut c], "client down", |p| p[0].status() != PortStatus::Up);
        let why = down_reason(&c);
        assert!(why.contains("peer disconnected: interface closed"), "{why}");
    }
    assert_eq!(c.memif_stats().connects, 3);
}

#[test]
fn a_second_client_is_told_the_interface_is_taken() {
    let sock = unique_socket(true);
    let (mut s, mut c) = pair(&sock, |_| {});
    let mut o = opts(&sock, "intruder");
    o.reconnect_interval = Duration::from_secs(60);
    let mut c2 = MemifPort::client(o).unwrap();
    pump_until(&mut [&mut s, &mut c, &mut c2], "intruder refused", |p| {
        down_reason(&*p[2]).contains("Already connected")
    });
    assert_eq!(s.status(), PortStatus::Up);
    assert_eq!(c.status(), PortStatus::Up);
}

#[test]
fn refusals_carry_the_servers_reason() {
    type Tweak = fn(&mut MemifOptions);
    let cases: [(&str, Tweak); 3] = [
        ("ID not found", |o| o.id = 9),
        ("incorrect secret", |o| o.secret = Some("wrong".into())),
        ("secret required", |o| o.secret = None),
    ];
    for (want, tweak) in cases {
        let sock = unique_socket(true);
        let mut so = opts(&sock, "srv");
        so.secret = Some("right".into());
        let mut s = MemifPort::server(so).unwrap();
        let mut co = opts(&sock, "cli");
        co.secret = Some("right".into());
        co.reconnect_interval = Duration::from_secs(60);
        tweak(&mut co);
        let mut c = MemifPort::client(co).unwrap();
        pump_until(&mut [&mut s, &mut c], want, |p| down_reason(&*p[1]).contains(want));
        assert!(down_reason(&s).contains(&format!("disconnected the peer: {want}")));
        assert_eq!(s.memif_stats().protocol_errors, 1);
    }
    // The right secret gets in.
    let sock = unique_socket(true);
    let (s, c) = pair(&sock, |o| o.secret = Some("right".into()));
    assert_eq!((s.status(), c.status()), (PortStatus::Up, PortStatus::Up));
}

#[test]
fn open_errors_name_the_socket_and_the_step() {
    let sock = unique_socket(false);
    let _s = MemifPort::server(opts(&sock, "a")).unwrap();
    let e = MemifPort::server(opts(&sock, "b")).unwrap_err().to_string();
    assert!(e.contains(&sock) && e.contains("bind"), "{e}");
    let e = MemifPort::server(opts("/nonexistent-dir/x.sock", "c")).unwrap_err().to_string();
    assert!(e.contains("/nonexistent-dir/x.sock") && e.contains("bind"), "{e}");
    let mut o = opts(&sock, "d");
    o.log2_ring_size = 15;
    let e = MemifPort::client(o).unwrap_err().to_string();
    assert!(e.contains(&sock) && e.contains("log2_ring_size"), "{e}");
    let e = MemifPort::client(opts(&"x".repeat(200), "e")).unwrap_err().to_string();
    assert!(e.contains("socket address"), "{e}");
    // A socket file left by a dead server is replaced.
    let stale = unique_socket(false);
    let l = std::os::unix::net::UnixListener::bind(&stale).unwrap();
    drop(l); // the file stays, nobody listens
    assert!(std::path::Path::new(&stale).exists());
    MemifPort::server(opts(&stale, "f")).expect("stale socket file replaced");
    // A file that is not a socket is never removed.
    let plain = std::env::temp_dir().join(format!("rpx-memif-plain-{}", std::process::id()));
    std::fs::write(&plain, b"keep me").unwrap();
    let e = MemifPort::server(opts(plain.to_str().unwrap(), "g")).unwrap_err().to_string();
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read(&plain).unwrap(), b"keep me");
    std::fs::remove_file(&plain).unwrap();
}
