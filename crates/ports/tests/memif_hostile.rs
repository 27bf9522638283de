//! A hostile memif peer against routeplex, in both roles: raw control messages and raw writes into
//! the shared memory (the memory it created as a client, or mapped as a server).
//!
//! What must hold: routeplex never panics and never touches memory outside the regions (running
//! to the end without a segfault under the test harness is the floor); bad descriptors cost the
//! frames they describe and are counted exactly; counters out of range, bad cookies and malformed
//! messages get a DISCONNECT with the reason, the port goes Down, and the next peer connects.
//! Everything is in one thread and deterministic (a fixed-seed generator for the garbage).

mod memif_common;

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use memif_common::*;
use ports::memif::ctl::{Conn, Listener, Recv, SocketAddr};
use ports::memif::proto::{
    self, desc_off, ring_off, AddRing, Hello, Init, Msg, ADD_RING_FLAG_C2S, COOKIE, DESC_FLAG_NEXT,
};
use ports::memif::shm::{EventFd, Region};
use ports::memif::{MemifPort, MemifStats};
use ports::{Batch, Port, PortStats, PortStatus};

const LOG2: u8 = 4;
const SLOTS: u16 = 1 << LOG2;
const BSIZE: u32 = 2048;

/// Waits for one message on `conn`, servicing `port` meanwhile.
fn next_msg(conn: &Conn, port: &mut MemifPort) -> (Msg, Option<OwnedFd>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        port.service();
        match conn.recv().expect("recv") {
            Recv::Msg { buf, len, fd, .. } => {
                assert_eq!(len, proto::MSG_SIZE, "routeplex sends 128-byte messages");
                return (Msg::decode(&buf).expect("routeplex sends valid messages"), fd);
            }
            Recv::Eof => panic!("routeplex closed without DISCONNECT"),
            Recv::WouldBlock => {}
        }
        assert!(Instant::now() < deadline, "no message; port {:?}", port.status());
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn expect_disconnect(conn: &Conn, port: &mut MemifPort, reason: &str) {
    match next_msg(conn, port).0 {
        Msg::Disconnect { reason: r, .. } => {
            let r = proto::text(&r);
            assert!(r.contains(reason), "DISCONNECT {r:?}, expected {reason:?}");
        }
        m => panic!("expected DISCONNECT {reason:?}, got {m:?}"),
    }
    let why = down_reason(port);
    assert!(why.contains(&format!("disconnected the peer: {reason}")), "{why}");
}

// ---------------------------------------------------------------------------------------------
// routeplex as server, hostile client

/// A hand-made client: one ring each way, 16 slots, 2048-byte buffers, all in region 0.
struct RawClient {
    conn: Conn,
    region: Region,
    _ev: [EventFd; 2],
}

const RING_BYTES: usize = proto::ring_bytes(LOG2);
const C2S: usize = 0;
const S2C: usize = RING_BYTES;
const BUF0: usize = 2 * RING_BYTES;
const REGION_SIZE: usize = BUF0 + 2 * SLOTS as usize * BSIZE as usize;

impl RawClient {
    fn region(cookie: u32) -> Region {
        let r = Region::create("hostile", REGION_SIZE).unwrap();
        for (g, off) in [C2S, S2C].into_iter().enumerate() {
            r.write_u32(off + ring_off::COOKIE, cookie);
            for j in 0..SLOTS as usize {
                let d = off + proto::RING_HEADER_SIZE + j * proto::DESC_SIZE;
                r.write_u32(d + desc_off::LENGTH, BSIZE);
                r.write_u32(
                    d + desc_off::OFFSET,
                    (BUF0 + (g * SLOTS as usize + j) * BSIZE as usize) as u32,
                );
            }
        }
        r
    }

    fn connect(sock: &str, server: &mut MemifPort) -> Conn {
        let conn = Conn::connect(&SocketAddr::parse(sock).unwrap()).unwrap();
        match next_msg(&conn, server).0 {
            Msg::Hello(h) => {
                assert_eq!((h.min_version, h.max_version), (proto::VERSION, proto::VERSION))
            }
            m => panic!("expected HELLO, got {m:?}"),
        }
        conn
    }

    /// A complete, correct handshake; then the hostile part is up to the test.
    fn new(sock: &str, server: &mut MemifPort) -> RawClient {
        let conn = Self::connect(sock, server);
        let region = Self::region(COOKIE);
        let ev = [EventFd::new().unwrap(), EventFd::new().unwrap()];
        let steps: [(Msg, Option<std::os::fd::BorrowedFd>); 4] = [
            (init(proto::VERSION), None),
            (Msg::AddRegion { index: 0, size: REGION_SIZE as u64 }, Some(region.fd())),
            (Msg::AddRing(ring(ADD_RING_FLAG_C2S, 0, C2S)), Some(ev[0].fd())),
            (Msg::AddRing(ring(0, 0, S2C)), Some(ev[1].fd())),
        ];
        for (m, fd) in steps {
            conn.send(&m.encode(), fd).unwrap();
            assert_eq!(next_msg(&conn, server).0, Msg::Ack);
        }
        conn.send(&Msg::Connect { if_name: proto::fixed(b"hostile") }.encode(), None).unwrap();
        assert!(matches!(next_msg(&conn, server).0, Msg::Connected { .. }));
        assert_eq!(server.status(), PortStatus::Up);
        RawClient { conn, region, _ev: ev }
    }

    fn desc(&self, ring: usize, slot: u16, flags: u16, region: u16, length: u32, offset: u32) {
        let d = ring + proto::RING_HEADER_SIZE + (slot % SLOTS) as usize * proto::DESC_SIZE;
        self.region.write_u16(d + desc_off::FLAGS, flags);
        self.region.write_u16(d + desc_off::REGION, region);
        self.region.write_u32(d + desc_off::LENGTH, length);
        self.region.write_u32(d + desc_off::OFFSET, offset);
    }

    /// A good frame in C2S slot `slot`: our own buffer for that slot.
    fn good(&self, slot: u16, seq: u32) -> Vec<u8> {
        let f = frame(MAGIC_RPX, seq, frame_len(seq));
        let off = BUF0 + (slot % SLOTS) as usize * BSIZE as usize;
        self.region.write_bytes(off, &f);
        self.desc(C2S, slot, 0, 0, f.len() as u32, off as u32);
        f
    }

    fn head(&self, ring: usize, v: u16) {
        self.region.write_u16(ring + ring_off::HEAD, v);
    }

    fn tail(&self, ring: usize) -> u16 {
        self.region.read_u16(ring + ring_off::TAIL).unwrap()
    }
}

fn init(version: u16) -> Msg {
    Msg::Init(Init {
        version,
        id: 0,
        mode: 0,
        secret: [0; proto::SECRET_SIZE],
        name: proto::fixed(b"hostile"),
    })
}

fn ring(flags: u16, index: u16, offset: usize) -> AddRing {
    AddRing {
        flags,
        index,
        region: 0,
        offset: offset as u32,
        log2_ring_size: LOG2,
        private_hdr_size: 0,
    }
}

fn rx_all(port: &mut MemifPort) -> Vec<Vec<u8>> {
    let mut b = Batch::new(256);
    port.rx_burst(&mut b);
    b.packets().iter().map(|p| p.frame().to_vec()).collect()
}

/// A legit routeplex client gets in after the hostile one was thrown out.
fn recovers(sock: &str, server: &mut MemifPort) {
    let mut c = MemifPort::client(opts(sock, "legit")).unwrap();
    connect(server, &mut c);
    let f: Vec<_> = (0..100).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    assert_eq!(transfer(&mut c, server, &f, 10), f);
}

#[test]
fn bad_descriptors_from_a_client_are_dropped_and_counted() {
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let raw = RawClient::new(&sock, &mut s);
    let end = REGION_SIZE as u32;
    // Slot by slot: each bad descriptor costs exactly one frame.
    let first = raw.good(0, 1);
    raw.desc(C2S, 1, 0, 7, 64, BUF0 as u32); // region 7
    raw.desc(C2S, 2, 0, 0, 64, end); // offset at the end of the region
    raw.desc(C2S, 3, 0, 0, 64, u32::MAX - 10); // offset + length wraps u32
    raw.desc(C2S, 4, 0, 0, 0, BUF0 as u32); // length 0
    raw.desc(C2S, 5, 0, 0, 65535, BUF0 as u32); // 65535: longer than a batch buffer
    raw.desc(C2S, 6, 0, 0, 65536, BUF0 as u32); // over any memif buffer size
    raw.desc(C2S, 7, 0, 0, end, 0); // the whole region as one frame
    let last = raw.good(8, 2);
    raw.head(C2S, 9);
    let got = rx_all(&mut s);
    assert_eq!(got, vec![first, last], "the good frames around the bad ones arrive intact");
    assert_eq!(raw.tail(C2S), 9, "every slot consumed, tail published");
    let st = s.stats();
    assert_eq!((st.rx_packets, st.rx_dropped), (2, 7));
    let m = s.memif_stats();
    assert_eq!((m.bad_desc, m.too_long, m.bad_chain, m.protocol_errors), (6, 1, 0, 0), "{m:?}");
    assert_eq!(s.status(), PortStatus::Up, "bad descriptors alone do not disconnect");

    // A chain that never ends: every published slot says NEXT. Bounded by what is published.
    for k in 9..9 + SLOTS {
        raw.desc(C2S, k, DESC_FLAG_NEXT, 0, 100, BUF0 as u32);
    }
    raw.head(C2S, 9 + SLOTS);
    assert!(rx_all(&mut s).is_empty());
    assert_eq!(raw.tail(C2S), 9 + SLOTS);
    assert_eq!(s.memif_stats().bad_chain, 1);
    assert_eq!(s.stats().rx_dropped, 8);
    // A chain longer than a batch buffer (n x 1000 bytes, over ports::MAX_FRAME), then a bad
    // region inside a chain.
    let h = 9 + SLOTS;
    let n = (ports::MAX_FRAME / 1000 + 1) as u16;
    for k in 0..n {
        raw.desc(C2S, h + k, if k + 1 < n { DESC_FLAG_NEXT } else { 0 }, 0, 1000, BUF0 as u32);
    }
    raw.desc(C2S, h + n, DESC_FLAG_NEXT, 0, 10, BUF0 as u32);
    raw.desc(C2S, h + n + 1, 0, 9, 10, BUF0 as u32);
    let good = raw.good(h + n + 2, 3);
    raw.head(C2S, h + n + 3);
    assert_eq!(rx_all(&mut s), vec![good]);
    let m = s.memif_stats();
    assert_eq!((m.too_long, m.bad_desc), (2, 7));
    assert_eq!(s.stats().rx_dropped, 10);
    assert_eq!(s.status(), PortStatus::Up);
    drop(raw);
    pump_until(&mut [&mut s], "down", |p| p[0].status() != PortStatus::Up);
    recovers(&sock, &mut s);
}

#[test]
fn client_counters_out_of_range_get_a_disconnect() {
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    type Hostile = fn(&RawClient);
    let cases: [(&str, Hostile); 4] = [
        ("head far ahead", |r| r.head(C2S, 1000)),
        ("head one past the ring", |r| r.head(C2S, SLOTS + 1)),
        ("head backwards", |r| r.head(C2S, u16::MAX)),
        ("posted head past the ring", |r| r.head(S2C, SLOTS + 1)),
    ];
    for (i, (what, hostile)) in cases.into_iter().enumerate() {
        let raw = RawClient::new(&sock, &mut s);
        hostile(&raw);
        let mut b = Batch::new(4);
        b.push_copy(&frame(MAGIC_DPDK, 0, 60));
        // Whichever burst meets the bad counter takes nothing and flags the peer.
        assert_eq!(s.rx_burst(&mut Batch::new(256)), 0, "{what}");
        s.tx_burst(&mut b, &[0]);
        assert_eq!(s.rx_burst(&mut Batch::new(256)), 0, "{what}: nothing more once faulted");
        expect_disconnect(&raw.conn, &mut s, "client moved head backwards or past the ring size");
        assert_eq!(s.memif_stats().protocol_errors, i as u64 + 1, "{what}");
        assert_eq!(s.tx_burst(&mut b, &[0]), 0, "down: takes nothing");
    }
    // Wraparound itself is fine: 4100 full rings carry the counters across 65535 -> 0.
    let raw = RawClient::new(&sock, &mut s);
    let mut tail = 0u16;
    let mut b = Batch::new(256);
    for round in 0..(65536 / SLOTS as u32 + 4) {
        let mut want = Vec::new();
        for k in 0..SLOTS {
            want.push(raw.good(tail.wrapping_add(k), round));
        }
        tail = tail.wrapping_add(SLOTS);
        raw.head(C2S, tail);
        b.clear();
        assert_eq!(s.rx_burst(&mut b), SLOTS as usize, "round {round}");
        let got: Vec<_> = b.packets().iter().map(|p| p.frame().to_vec()).collect();
        assert_eq!(got, want, "round {round}");
    }
    assert!(raw.tail(C2S) == tail && s.status() == PortStatus::Up);
    drop(raw);
    pump_until(&mut [&mut s], "down", |p| p[0].status() != PortStatus::Up);
    recovers(&sock, &mut s);
}

#[test]
fn bad_posted_buffers_cost_the_frame_not_the_connection() {
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let raw = RawClient::new(&sock, &mut s);
    let s2c_buf = BUF0 + SLOTS as usize * BSIZE as usize;
    // Post 6 buffers: good, region 7, past the end, capacity 0, good, good.
    raw.desc(S2C, 0, 0, 0, BSIZE, s2c_buf as u32);
    raw.desc(S2C, 1, 0, 7, BSIZE, s2c_buf as u32);
    raw.desc(S2C, 2, 0, 0, BSIZE, REGION_SIZE as u32 - 100);
    raw.desc(S2C, 3, 0, 0, 0, s2c_buf as u32);
    raw.desc(S2C, 4, 0, 0, BSIZE, (s2c_buf + BSIZE as usize) as u32);
    raw.desc(S2C, 5, 0, 0, BSIZE, (s2c_buf + 2 * BSIZE as usize) as u32);
    raw.head(S2C, 6);
    let mut b = Batch::new(8);
    let frames: Vec<_> = (0..6).map(|q| frame(MAGIC_DPDK, q, 1000)).collect();
    for f in &frames {
        b.push_copy(f);
    }
    let sel: Vec<u16> = (0..6).collect();
    // Frame 0 -> slot 0; frames 1, 2, 3 meet bad slots and are dropped; 4, 5 -> slots 4, 5.
    assert_eq!(s.tx_burst(&mut b, &sel), 6);
    assert_eq!(raw.tail(S2C), 6);
    let st = s.stats();
    assert_eq!((st.tx_packets, st.tx_errors), (3, 3), "{st:?}");
    assert_eq!(s.memif_stats().bad_posted, 3);
    let read = |slot: u16| {
        let d = S2C + proto::RING_HEADER_SIZE + slot as usize * proto::DESC_SIZE;
        let len = raw.region.read_u32(d + desc_off::LENGTH).unwrap() as usize;
        let off = raw.region.read_u32(d + desc_off::OFFSET).unwrap() as usize;
        let mut v = vec![0u8; len];
        if len > 0 {
            raw.region.read_bytes(off, &mut v);
        }
        v
    };
    assert_eq!(read(0), frames[0]);
    assert!(
        read(1).is_empty() && read(2).is_empty() && read(3).is_empty(),
        "burnt slots are empty"
    );
    assert_eq!(read(4), frames[4]);
    assert_eq!(read(5), frames[5]);
    // The region and offsets the client posted were left as they were.
    let d1 = S2C + proto::RING_HEADER_SIZE + proto::DESC_SIZE;
    assert_eq!(raw.region.read_u16(d1 + desc_off::REGION), Some(7));
    // Tiny posted buffers: a 1000-byte frame over 100-byte buffers would need 10 slots; the
    // ring has 16 but only 4 are posted: the frame waits.
    for k in 6..10u16 {
        raw.desc(S2C, k, 0, 0, 100, s2c_buf as u32);
    }
    raw.head(S2C, 10);
    b.clear();
    b.push_copy(&frames[0]);
    assert_eq!(s.tx_burst(&mut b, &[0]), 0);
    assert_eq!(s.stats().tx_full, 1);
    assert_eq!(s.status(), PortStatus::Up);
}

#[test]
fn bad_cookie_is_refused_at_connect() {
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let conn = RawClient::connect(&sock, &mut s);
    let region = RawClient::region(0xdead_beef);
    let ev = [EventFd::new().unwrap(), EventFd::new().unwrap()];
    conn.send(&init(proto::VERSION).encode(), None).unwrap();
    assert_eq!(next_msg(&conn, &mut s).0, Msg::Ack);
    conn.send(&Msg::AddRegion { index: 0, size: REGION_SIZE as u64 }.encode(), Some(region.fd()))
        .unwrap();
    assert_eq!(next_msg(&conn, &mut s).0, Msg::Ack);
    conn.send(&Msg::AddRing(ring(ADD_RING_FLAG_C2S, 0, C2S)).encode(), Some(ev[0].fd())).unwrap();
    assert_eq!(next_msg(&conn, &mut s).0, Msg::Ack);
    conn.send(&Msg::AddRing(ring(0, 0, S2C)).encode(), Some(ev[1].fd())).unwrap();
    assert_eq!(next_msg(&conn, &mut s).0, Msg::Ack);
    conn.send(&Msg::Connect { if_name: [0; 32] }.encode(), None).unwrap();
    expect_disconnect(&conn, &mut s, "wrong ring cookie");
    recovers(&sock, &mut s);
}

/// One malformed handshake: `steps` are sent in order, each but the last answered by ACK; the
/// last must draw DISCONNECT with `reason`.
struct Case {
    reason: &'static str,
    steps: Vec<Step>,
}

enum Step {
    Msg(Msg, Fd),
    Raw(Vec<u8>),
}

#[derive(Clone, Copy)]
enum Fd {
    None,
    Region,
    Unsealed,
    Ev,
    NotEv,
    Two,
}

fn good_init() -> Step {
    Step::Msg(init(proto::VERSION), Fd::None)
}
fn good_region() -> Step {
    Step::Msg(Msg::AddRegion { index: 0, size: REGION_SIZE as u64 }, Fd::Region)
}
fn add_ring(r: AddRing) -> Step {
    Step::Msg(Msg::AddRing(r), Fd::Ev)
}

#[test]
fn malformed_control_messages_get_a_disconnect_and_the_port_recovers() {
    let connect = Step::Msg(Msg::Connect { if_name: [0; 32] }, Fd::None);
    let c2s = ring(ADD_RING_FLAG_C2S, 0, C2S);
    let mut typed = [0u8; 128];
    typed[0] = 99;
    let cases = vec![
        Case { reason: "invalid message size 100", steps: vec![Step::Raw(vec![3; 100])] },
        Case {
            reason: "invalid message size 200",
            steps: vec![good_init(), Step::Raw(vec![0; 200])],
        },
        Case { reason: "unknown message type 99", steps: vec![Step::Raw(typed.to_vec())] },
        Case { reason: "unknown message type 0", steps: vec![Step::Raw(vec![0; 128])] },
        Case {
            reason: "incompatible memif version",
            steps: vec![Step::Msg(init(0x0100), Fd::None)],
        },
        Case {
            reason: "only ethernet mode supported",
            steps: vec![Step::Msg(
                Msg::Init(Init {
                    mode: 1,
                    ..match init(proto::VERSION) {
                        Msg::Init(i) => i,
                        _ => unreachable!(),
                    }
                }),
                Fd::None,
            )],
        },
        Case { reason: "unexpected message type 5", steps: vec![add_ring(c2s)] },
        Case { reason: "unexpected message type 3", steps: vec![good_init(), good_init()] },
        Case {
            reason: "unexpected message type 2",
            steps: vec![good_init(), Step::Msg(Msg::Hello(hello()), Fd::None)],
        },
        Case {
            reason: "unexpected message type 1",
            steps: vec![good_init(), Step::Msg(Msg::Ack, Fd::None)],
        },
        Case {
            reason: "invalid region index",
            steps: vec![
                good_init(),
                Step::Msg(Msg::AddRegion { index: 1, size: REGION_SIZE as u64 }, Fd::Region),
            ],
        },
        Case {
            reason: "missing region fd",
            steps: vec![
                good_init(),
                Step::Msg(Msg::AddRegion { index: 0, size: REGION_SIZE as u64 }, Fd::None),
            ],
        },
        Case {
            reason: "region file is shorter than announced",
            steps: vec![
                good_init(),
                Step::Msg(Msg::AddRegion { index: 0, size: REGION_SIZE as u64 + 1 }, Fd::Region),
            ],
        },
        Case {
            reason: "region size out of range",
            steps: vec![
                good_init(),
                Step::Msg(Msg::AddRegion { index: 0, size: u64::MAX }, Fd::Region),
            ],
        },
        Case {
            reason: "region fd is not sealed against shrinking",
            steps: vec![
                good_init(),
                Step::Msg(Msg::AddRegion { index: 0, size: 4096 }, Fd::Unsealed),
            ],
        },
        Case {
            reason: "region fd is not a memory file",
            steps: vec![good_init(), Step::Msg(Msg::AddRegion { index: 0, size: 4096 }, Fd::Ev)],
        },
        Case {
            reason: "more than one fd in a message",
            steps: vec![good_init(), Step::Msg(Msg::AddRegion { index: 0, size: 4096 }, Fd::Two)],
        },
        Case {
            reason: "invalid ring index",
            steps: vec![good_init(), good_region(), add_ring(ring(1, 1, C2S))],
        },
        Case {
            reason: "invalid ring index",
            steps: vec![good_init(), good_region(), add_ring(c2s), add_ring(c2s)],
        },
        Case {
            reason: "invalid ring region",
            steps: vec![good_init(), good_region(), add_ring(AddRing { region: 1, ..c2s })],
        },
        Case {
            reason: "ring size too large",
            steps: vec![
                good_init(),
                good_region(),
                add_ring(AddRing { log2_ring_size: 15, ..c2s }),
            ],
        },
        Case {
            reason: "ring outside its region",
            steps: vec![
                good_init(),
                good_region(),
                add_ring(AddRing { offset: REGION_SIZE as u32 - 64, ..c2s }),
            ],
        },
        Case {
            reason: "ring outside its region",
            steps: vec![
                good_init(),
                good_region(),
                add_ring(AddRing { offset: u32::MAX - 3, ..c2s }),
            ],
        },
        Case {
            reason: "misaligned ring",
            steps: vec![good_init(), good_region(), add_ring(AddRing { offset: 2, ..c2s })],
        },
        Case {
            reason: "private header not supported",
            steps: vec![
                good_init(),
                good_region(),
                add_ring(AddRing { private_hdr_size: 8, ..c2s }),
            ],
        },
        Case {
            reason: "missing interrupt fd",
            steps: vec![good_init(), good_region(), Step::Msg(Msg::AddRing(c2s), Fd::None)],
        },
        Case {
            reason: "interrupt fd is not an eventfd",
            steps: vec![good_init(), good_region(), Step::Msg(Msg::AddRing(c2s), Fd::NotEv)],
        },
        Case {
            reason: "connect before a region and a ring in each direction",
            steps: vec![good_init(), good_region(), add_ring(c2s), connect],
        },
    ];
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let region = RawClient::region(COOKIE);
    let loose = Region::create_unsealed("loose", 4096).unwrap();
    let ev = EventFd::new().unwrap();
    let n = cases.len() as u64;
    for case in cases {
        let conn = RawClient::connect(&sock, &mut s);
        let last = case.steps.len() - 1;
        for (i, step) in case.steps.into_iter().enumerate() {
            match step {
                Step::Raw(bytes) => conn.send_raw(&bytes, None).unwrap(),
                Step::Msg(m, fd) => {
                    let b = m.encode();
                    match fd {
                        Fd::None => conn.send(&b, None),
                        Fd::Region => conn.send(&b, Some(region.fd())),
                        Fd::Unsealed => conn.send(&b, Some(loose.fd())),
                        Fd::Ev => conn.send(&b, Some(ev.fd())),
                        Fd::NotEv => conn.send(&b, Some(region.fd())),
                        Fd::Two => send_two_fds(&conn, &b, &region, &ev),
                    }
                    .unwrap()
                }
            }
            if i < last {
                assert_eq!(next_msg(&conn, &mut s).0, Msg::Ack, "{}: step {i}", case.reason);
            }
        }
        expect_disconnect(&conn, &mut s, case.reason);
    }
    let m = s.memif_stats();
    assert_eq!((m.protocol_errors, m.connects), (n, 0));
    recovers(&sock, &mut s);
}

/// One datagram carrying two fds, which the memif protocol never does.
fn send_two_fds(conn: &Conn, msg: &[u8; 128], a: &Region, b: &EventFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fds = [a.fd().as_raw_fd(), b.as_raw_fd()];
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    let mut ctl = Cmsg([0; 64]);
    let mut iov = libc::iovec { iov_base: msg.as_ptr() as *mut _, iov_len: msg.len() };
    // SAFETY: plain data; filled below.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    mh.msg_controllen = unsafe { libc::CMSG_SPACE(8) } as usize;
    // SAFETY: the control buffer is 8-aligned and large enough for one header with two ints.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(8) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<i32>(), 2);
    }
    // SAFETY: `mh` points at live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(conn.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn hello() -> Hello {
    Hello {
        name: proto::fixed(b"hostile"),
        min_version: proto::VERSION,
        max_version: proto::VERSION,
        max_region: 0,
        max_s2c_ring: 0,
        max_c2s_ring: 0,
        max_log2_ring_size: LOG2,
    }
}

#[test]
fn a_silent_client_times_out() {
    let sock = unique_socket(true);
    let mut o = opts(&sock, "srv");
    o.handshake_timeout = Duration::from_millis(50);
    let mut s = MemifPort::server(o).unwrap();
    let conn = RawClient::connect(&sock, &mut s);
    expect_disconnect(&conn, &mut s, "handshake timed out");
    recovers(&sock, &mut s);
}

// ---------------------------------------------------------------------------------------------
// routeplex as client, hostile server

/// A hand-made server: answers the client's handshake, then has the client's region mapped.
struct RawServer {
    _listener: Listener,
    conn: Conn,
    region: Region,
    /// Ring offsets (C2S, S2C) and log2 the client announced.
    c2s: usize,
    s2c: usize,
    log2: u8,
}

impl RawServer {
    fn accept(l: &Listener, client: &mut MemifPort) -> Conn {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            client.service();
            if let Some(c) = l.accept().unwrap() {
                return c;
            }
            assert!(Instant::now() < deadline, "client never connected: {:?}", client.status());
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Runs the server side of a correct handshake with `hello`.
    fn new(sock: &str, client: &mut MemifPort, hello: Hello) -> RawServer {
        let l = Listener::bind(&SocketAddr::parse(sock).unwrap()).unwrap();
        let conn = Self::accept(&l, client);
        conn.send(&Msg::Hello(hello).encode(), None).unwrap();
        assert!(matches!(next_msg(&conn, client).0, Msg::Init(_)));
        conn.send(&Msg::Ack.encode(), None).unwrap();
        let (m, fd) = next_msg(&conn, client);
        let Msg::AddRegion { index: 0, size } = m else { panic!("{m:?}") };
        let region = Region::map_peer(fd.unwrap(), size).unwrap();
        conn.send(&Msg::Ack.encode(), None).unwrap();
        let (mut c2s, mut s2c, mut log2) = (0, 0, 0);
        for _ in 0..2 {
            let (m, fd) = next_msg(&conn, client);
            let Msg::AddRing(r) = m else { panic!("{m:?}") };
            assert!(fd.is_some());
            log2 = r.log2_ring_size;
            if r.flags & ADD_RING_FLAG_C2S != 0 {
                c2s = r.offset as usize;
            } else {
                s2c = r.offset as usize;
            }
            conn.send(&Msg::Ack.encode(), None).unwrap();
        }
        assert!(matches!(next_msg(&conn, client).0, Msg::Connect { .. }));
        conn.send(&Msg::Connected { if_name: proto::fixed(b"hostile") }.encode(), None).unwrap();
        pump_until(&mut [client], "client up", |p| p[0].status() == PortStatus::Up);
        RawServer { _listener: l, conn, region, c2s, s2c, log2 }
    }

    fn slots(&self) -> u16 {
        1 << self.log2
    }

    fn desc_at(&self, ring: usize, slot: u16) -> usize {
        ring + proto::RING_HEADER_SIZE + (slot & (self.slots() - 1)) as usize * proto::DESC_SIZE
    }

    fn read_desc(&self, ring: usize, slot: u16) -> (u16, u16, u32, u32) {
        let d = self.desc_at(ring, slot);
        let r = &self.region;
        (
            r.read_u16(d + desc_off::FLAGS).unwrap(),
            r.read_u16(d + desc_off::REGION).unwrap(),
            r.read_u32(d + desc_off::LENGTH).unwrap(),
            r.read_u32(d + desc_off::OFFSET).unwrap(),
        )
    }

    fn write_desc(
        &self,
        ring: usize,
        slot: u16,
        flags: u16,
        region: u16,
        length: u32,
        offset: u32,
    ) {
        let d = self.desc_at(ring, slot);
        self.region.write_u16(d + desc_off::FLAGS, flags);
        self.region.write_u16(d + desc_off::REGION, region);
        self.region.write_u32(d + desc_off::LENGTH, length);
        self.region.write_u32(d + desc_off::OFFSET, offset);
    }

    /// Fills posted S2C slot `slot` with a good frame, in the buffer the client posted.
    fn good(&self, slot: u16, seq: u32) -> Vec<u8> {
        let f = frame(MAGIC_DPDK, seq, frame_len(seq));
        let (_, _, cap, off) = self.read_desc(self.s2c, slot);
        assert!(cap as usize >= f.len());
        self.region.write_bytes(off as usize, &f);
        self.write_desc(self.s2c, slot, 0, 0, f.len() as u32, off);
        f
    }

    fn tail(&self, ring: usize, v: u16) {
        self.region.write_u16(ring + ring_off::TAIL, v);
    }

    fn head(&self, ring: usize) -> u16 {
        self.region.read_u16(ring + ring_off::HEAD).unwrap()
    }
}

fn client_opts(sock: &str) -> ports::memif::MemifOptions {
    let mut o = opts(sock, "cli");
    o.log2_ring_size = LOG2;
    o
}

#[test]
fn bad_descriptors_from_a_server_are_dropped_and_counted() {
    let sock = unique_socket(true);
    let mut c = MemifPort::client(client_opts(&sock)).unwrap();
    // The server offers a huge ring size: the client keeps its own.
    let raw = RawServer::new(&sock, &mut c, Hello { max_log2_ring_size: 200, ..hello() });
    assert_eq!(raw.log2, LOG2);
    assert_eq!(raw.head(raw.s2c), SLOTS, "the client posted every S2C slot after CONNECTED");
    let (_, _, cap, off0) = raw.read_desc(raw.s2c, 0);
    assert_eq!(cap, BSIZE);
    let first = raw.good(0, 1);
    raw.write_desc(raw.s2c, 1, 0, 7, 64, off0); // region 7
    raw.write_desc(raw.s2c, 2, 0, 0, 64, raw.region.len() as u32); // past the end
    raw.write_desc(raw.s2c, 3, 0, 0, BSIZE + 1, off0); // longer than the posted buffer
    raw.write_desc(raw.s2c, 4, 0, 0, 0, off0); // empty
    raw.write_desc(raw.s2c, 5, DESC_FLAG_NEXT, 0, 10, off0); // chain...
    raw.write_desc(raw.s2c, 6, 0, 3, 10, off0); // ...ending in a bad region
    let last = raw.good(7, 2);
    raw.tail(raw.s2c, 8);
    assert_eq!(rx_all(&mut c), vec![first, last]);
    let st = c.stats();
    assert_eq!((st.rx_packets, st.rx_dropped), (2, 5));
    let m = c.memif_stats();
    assert_eq!((m.bad_desc, m.bad_chain), (5, 0), "{m:?}");
    // The client consumed and re-posted all 8 slots, rewriting the descriptors it posts.
    assert_eq!(raw.head(raw.s2c), 8 + SLOTS);
    assert_eq!(raw.read_desc(raw.s2c, 1), (0, 0, BSIZE, off0 + BSIZE));
    // A chain over every published slot.
    for k in 8..8 + SLOTS {
        raw.write_desc(raw.s2c, k, DESC_FLAG_NEXT, 0, 10, off0);
    }
    raw.tail(raw.s2c, 8 + SLOTS);
    assert!(rx_all(&mut c).is_empty());
    assert_eq!(c.memif_stats().bad_chain, 1);
    assert_eq!(c.status(), PortStatus::Up);
}

#[test]
fn server_scribbling_on_the_clients_tx_ring_changes_nothing_it_trusts() {
    let sock = unique_socket(true);
    let mut c = MemifPort::client(client_opts(&sock)).unwrap();
    let raw = RawServer::new(&sock, &mut c, hello());
    // Garbage in every C2S descriptor: the client rewrites each one it uses, from its own
    // layout, and never reads them back.
    for k in 0..SLOTS {
        raw.write_desc(raw.c2s, k, 0xffff, 0xffff, u32::MAX, u32::MAX);
    }
    let mut b = Batch::new(8);
    let frames: Vec<_> = (0..8).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    for f in &frames {
        b.push_copy(f);
    }
    let sel: Vec<u16> = (0..8).collect();
    assert_eq!(c.tx_burst(&mut b, &sel), 8);
    assert_eq!(raw.head(raw.c2s), 8);
    for (k, f) in frames.iter().enumerate() {
        let (flags, region, len, off) = raw.read_desc(raw.c2s, k as u16);
        assert_eq!((flags, region, len as usize), (0, 0, f.len()));
        let mut got = vec![0u8; f.len()];
        raw.region.read_bytes(off as usize, &mut got);
        assert_eq!(&got, f);
    }
    // Server tail behind head is fine; tail past head is not.
    raw.tail(raw.c2s, 8);
    b.clear();
    b.push_copy(&frames[0]);
    assert_eq!(c.tx_burst(&mut b, &[0]), 1);
    raw.tail(raw.c2s, 100);
    b.clear();
    b.push_copy(&frames[0]);
    assert_eq!(c.tx_burst(&mut b, &[0]), 0);
    expect_disconnect(&raw.conn, &mut c, "server moved tail backwards or past head");
    drop(raw);
    pump_until(&mut [&mut c], "retrying", |p| down_reason(&*p[0]).contains("connecting to"));
}

#[test]
fn server_tail_past_the_posted_buffers_gets_a_disconnect() {
    let sock = unique_socket(true);
    let mut c = MemifPort::client(client_opts(&sock)).unwrap();
    let raw = RawServer::new(&sock, &mut c, hello());
    raw.tail(raw.s2c, SLOTS + 1);
    assert_eq!(c.rx_burst(&mut Batch::new(256)), 0);
    expect_disconnect(&raw.conn, &mut c, "server moved tail backwards or past the posted buffers");
    drop(raw);
    // And it comes back to a server that behaves.
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    connect(&mut s, &mut c);
    let f: Vec<_> = (0..50).map(|q| frame(MAGIC_DPDK, q, frame_len(q))).collect();
    assert_eq!(transfer(&mut s, &mut c, &f, 10), f);
}

#[test]
fn hostile_hellos_and_replies_are_refused() {
    type Reply = fn(&Conn);
    let cases: [(&str, Hello, Option<Reply>); 4] = [
        (
            "incompatible memif version",
            Hello { min_version: 0x0300, max_version: 0x0300, ..hello() },
            None,
        ),
        (
            "incompatible memif version",
            Hello { min_version: 0, max_version: 0x0100, ..hello() },
            None,
        ),
        // After HELLO the client expects ACK to INIT; anything else is refused.
        (
            "unexpected message type 7",
            hello(),
            Some(|c| c.send(&Msg::Connected { if_name: [0; 32] }.encode(), None).unwrap()),
        ),
        ("invalid message size 64", hello(), Some(|c| c.send_raw(&[1; 64], None).unwrap())),
    ];
    for (reason, h, reply) in cases {
        let sock = unique_socket(true);
        let l = Listener::bind(&SocketAddr::parse(&sock).unwrap()).unwrap();
        let mut o = client_opts(&sock);
        o.reconnect_interval = Duration::from_secs(60);
        let mut c = MemifPort::client(o).unwrap();
        let conn = RawServer::accept(&l, &mut c);
        conn.send(&Msg::Hello(h).encode(), None).unwrap();
        if let Some(reply) = reply {
            assert!(matches!(next_msg(&conn, &mut c).0, Msg::Init(_)));
            reply(&conn);
        }
        expect_disconnect(&conn, &mut c, reason);
        assert_eq!(c.memif_stats().protocol_errors, 1);
    }
    // A server that says DISCONNECT instead of HELLO is reported with its reason.
    let sock = unique_socket(true);
    let mut c = MemifPort::client(client_opts(&sock)).unwrap();
    let l = Listener::bind(&SocketAddr::parse(&sock).unwrap()).unwrap();
    let conn = RawServer::accept(&l, &mut c);
    conn.send(&Msg::disconnect("go away\u{7}").encode(), None).unwrap();
    pump_until(&mut [&mut c], "peer reason", |p| {
        down_reason(&*p[0]).contains("peer disconnected: go away?")
    });
}

// ---------------------------------------------------------------------------------------------
// Garbage everywhere

/// xorshift64*: deterministic garbage.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// How a hostile peer moves its own counters: plausibly (so that the port reads the garbage
/// descriptors it published) or, now and then, anywhere.
type Advance = fn(&Region, &mut Rng, [usize; 2]);

/// Client's counters: C2S head up to a full ring past the server's tail; S2C fully posted.
fn client_advance(r: &Region, rng: &mut Rng, [c2s, s2c]: [usize; 2]) {
    let t = r.read_u16(c2s + ring_off::TAIL).unwrap();
    r.write_u16(c2s + ring_off::HEAD, t.wrapping_add((rng.next() % (SLOTS as u64 + 1)) as u16));
    let t = r.read_u16(s2c + ring_off::TAIL).unwrap();
    r.write_u16(s2c + ring_off::HEAD, t.wrapping_add(SLOTS));
}

/// Server's counters: C2S consumed up to head; S2C published up to what is posted.
fn server_advance(r: &Region, rng: &mut Rng, [c2s, s2c]: [usize; 2]) {
    let h = r.read_u16(c2s + ring_off::HEAD).unwrap();
    r.write_u16(c2s + ring_off::TAIL, h);
    let h = r.read_u16(s2c + ring_off::HEAD).unwrap();
    let back = (rng.next() % (SLOTS as u64 + 1)) as u16;
    r.write_u16(s2c + ring_off::TAIL, h.wrapping_sub(back));
}

/// Each round: random words over descriptors (any field, small or wild values), rarely over a
/// counter or anywhere in the region; the peer's counters advanced by `advance`; a burst each
/// way. Whatever happens, the port must not crash, every drop must have one counted reason,
/// and the port ends up either up or down with a reason. Returns the rounds run.
fn scribble(
    region: &Region,
    rings: [usize; 2],
    advance: Advance,
    port: &mut MemifPort,
    rng: &mut Rng,
) -> usize {
    let mut tx = Batch::new(32);
    let mut rx = Batch::new(256);
    let mut rounds = 0;
    while rounds < 300 && port.status() == PortStatus::Up {
        rounds += 1;
        for _ in 0..6 {
            let ring = rings[rng.next() as usize % 2];
            let slot = rng.next() as usize % SLOTS as usize;
            let d = ring + proto::RING_HEADER_SIZE + slot * proto::DESC_SIZE;
            let v = rng.next();
            // Half the values are plausible (small), half wild.
            let w = (v >> 16) as u32;
            let small = v & 1 == 0;
            let pick = |plausible: u32| if small { plausible } else { w };
            match (v >> 8) % 100 {
                0..=29 => _ = region.write_u16(d + desc_off::FLAGS, pick(w & 1) as u16),
                30..=49 => _ = region.write_u16(d + desc_off::REGION, pick(w % 3) as u16),
                50..=74 => _ = region.write_u32(d + desc_off::LENGTH, pick(w % 4096)),
                75..=98 => {
                    _ = region.write_u32(d + desc_off::OFFSET, pick(w % region.len() as u32))
                }
                _ => _ = region.write_u32((w as usize % region.len()) & !3, w),
            }
        }
        advance(region, rng, rings);
        // Now and then a wild counter, which must cost the peer its connection.
        let v = rng.next();
        if v & 63 == 0 {
            let ring = rings[(v >> 8) as usize % 2];
            let field = if v & (1 << 20) != 0 { ring_off::HEAD } else { ring_off::TAIL };
            region.write_u16(ring + field, (v >> 32) as u16);
        }
        tx.clear();
        for q in 0..8 {
            tx.push_copy(&frame(MAGIC_RPX, q, 60 + (rng.next() % 1400) as usize));
        }
        port.tx_burst(&mut tx, &[0, 1, 2, 3, 4, 5, 6, 7]);
        rx.clear();
        port.rx_burst(&mut rx);
        for p in rx.packets() {
            assert!(p.len() <= ports::BUF_SIZE - ports::HEADROOM);
        }
        port.service();
    }
    let st: PortStats = port.stats();
    assert!(st.tx_packets + st.tx_errors <= rounds as u64 * 8);
    let m: MemifStats = port.memif_stats();
    assert_eq!(st.rx_dropped, m.bad_desc + m.too_long + m.bad_chain, "every drop has one reason");
    if port.status() != PortStatus::Up {
        assert!(down_reason(port).contains("disconnected the peer"), "{:?}", port.status());
    }
    rounds
}

#[test]
fn random_garbage_in_shared_memory_never_crashes_either_role() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let (mut rounds, mut disconnected, mut received, mut dropped) = (0, 0, 0, 0);
    for _ in 0..10 {
        // routeplex server, garbage from the client's side.
        let sock = unique_socket(true);
        let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
        let raw = RawClient::new(&sock, &mut s);
        rounds += scribble(&raw.region, [C2S, S2C], client_advance, &mut s, &mut rng);
        disconnected += (s.status() != PortStatus::Up) as u32;
        let (st, m) = (s.stats(), s.memif_stats());
        received += st.rx_packets;
        dropped += st.rx_dropped + m.bad_posted;
        drop(raw);
        pump_until(&mut [&mut s], "down", |p| p[0].status() != PortStatus::Up);
        recovers(&sock, &mut s);

        // routeplex client, garbage from the server's side.
        let sock = unique_socket(true);
        let mut c = MemifPort::client(client_opts(&sock)).unwrap();
        let raw = RawServer::new(&sock, &mut c, hello());
        rounds += scribble(&raw.region, [raw.c2s, raw.s2c], server_advance, &mut c, &mut rng);
        disconnected += (c.status() != PortStatus::Up) as u32;
        received += c.stats().rx_packets;
        dropped += c.stats().rx_dropped;
    }
    eprintln!(
        "garbage: {rounds} rounds, {disconnected}/20 peers disconnected, \
         {received} frames received, {dropped} dropped"
    );
    // The garbage really reached the descriptor checks, not only the counter checks.
    assert!(dropped > 100 && rounds > 1000, "{rounds} rounds, {dropped} dropped");
}

// ---------------------------------------------------------------------------------------------
// Who may connect to an abstract socket

/// Set in the environment of the child that [`abstract_socket_refuses_other_users`] runs as an
/// unprivileged user: the abstract socket to connect to.
const UNPRIV_ENV: &str = "RPX_MEMIF_UNPRIVILEGED_CONNECT";
/// The uid (and gid) the child runs as: `nobody`.
const NOBODY: u32 = 65534;

/// This process's effective uid, from /proc (no unsafe needed).
fn euid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Not a test of its own: the child's side of [`abstract_socket_refuses_other_users`], run by
/// re-executing this test binary as uid 65534 with [`UNPRIV_ENV`] set. It connects, then
/// exits 0 when the server closes the connection without sending anything, 3 when it receives
/// a message (HELLO: it was let in), 4 when nothing happens for 5 s, 5 when it cannot connect.
#[test]
fn abstract_socket_unprivileged_peer() {
    let Ok(sock) = std::env::var(UNPRIV_ENV) else { return };
    let conn = match Conn::connect(&SocketAddr::parse(&sock).unwrap()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("child: connect {sock}: {e}");
            std::process::exit(5)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match conn.recv() {
            Ok(Recv::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            Ok(Recv::Msg { buf, len, .. }) => {
                eprintln!("child: received {len} bytes: {:?}", Msg::decode(&buf));
                std::process::exit(3)
            }
            Ok(Recv::Eof) => std::process::exit(0),
            Err(e) => {
                // A reset is a close too.
                eprintln!("child: recv: {e}");
                std::process::exit(0)
            }
        }
    }
    std::process::exit(4)
}

/// An abstract socket has no file mode, so anyone in the network namespace could connect and
/// hand us memory. The server admits only root and its own user (`SO_PEERCRED`): a client
/// running as `nobody` is closed without a HELLO, counted and named in the Down reason, and a
/// root client still gets in afterwards.
#[test]
fn abstract_socket_refuses_other_users() {
    use std::os::unix::process::CommandExt;
    if euid() != Some(0) {
        eprintln!(
            "skipping abstract_socket_refuses_other_users: needs root to run a client as uid \
             {NOBODY} (and as another user the server's own uid would be admitted)"
        );
        return;
    }
    let sock = unique_socket(true);
    let mut s = MemifPort::server(opts(&sock, "srv")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spawned = std::process::Command::new(&exe)
        .args(["--exact", "abstract_socket_unprivileged_peer", "--nocapture", "--test-threads=1"])
        .env(UNPRIV_ENV, &sock)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!(
                "skipping abstract_socket_refuses_other_users: uid {NOBODY} cannot run {}: {e}",
                exe.display()
            );
            return;
        }
        Err(e) => panic!("spawning the unprivileged client: {e}"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        s.service();
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the unprivileged client did not finish; server {:?}", s.status());
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_eq!(status.code(), Some(0), "the client as uid {NOBODY} was not closed unanswered");
    let m = s.memif_stats();
    assert_eq!((m.refused_peers, m.connects, m.disconnects), (1, 0, 0));
    let why = down_reason(&s);
    assert!(
        why.starts_with(&format!(
            "refused a client with uid {NOBODY} on {sock} (an abstract socket admits only uid 0 and 0)"
        )),
        "{why}"
    );
    assert_eq!(s.stats().rx_packets, 0);
    // Root still gets in, and traffic flows.
    recovers(&sock, &mut s);
    assert_eq!(s.memif_stats().refused_peers, 1);
}
