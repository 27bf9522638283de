//! The decoders of what reaches control from outside, on arbitrary bytes: one entry point per
//! cargo-fuzz target in the workspace's `fuzz/` directory, which routeplex's `tests/it/fuzz_corpus.rs` also
//! runs on every committed corpus file, so the fuzz target and the regression test are the same
//! code. Not part of the API: hidden from the docs and free to change.
//!
//! Each entry decodes the bytes as the daemon would and asserts what must hold for any input:
//! nothing panics, and where an encoder exists what decoded encodes to bytes that decode to the
//! same value. Inputs guarded by a checksum are also decoded behind a header made valid for
//! them, so that the fuzzer reaches the payload's decoder rather than only the checksum test.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;

use dataplane::config::VrConfig;
use dataplane::{Feed, Redirect};

use crate::api::{parse_request, Command};
use crate::checkpoint;
use crate::journal::{self, TopologyRecord};
use crate::migrate::{self, tunnel, FinalState};
use crate::snapshot::{self, Snapshot};
use crate::Topology;

/// The targets, by the names of their directories under `fuzz/corpus`.
pub const TARGETS: &[&str] = &[
    "api_request",
    "topology",
    "snapshot",
    "checkpoint",
    "journal",
    "migrate_frames",
    "tunnel",
    "netlink",
];

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "api_request" => api_request(data),
        "topology" => topology(data),
        "snapshot" => snapshot(data),
        "checkpoint" => checkpoint(data),
        "journal" => journal(data),
        "migrate_frames" => migrate_frames(data),
        "tunnel" => tunnel(data),
        "netlink" => netlink(data),
        _ => return false,
    }
    true
}

/// One control-socket line, trimmed as the daemon trims it; a request that parses prints to
/// a line that parses back to itself.
pub fn api_request(data: &[u8]) {
    let Ok(r) = parse_request(data.trim_ascii()) else { return };
    let line = serde_json::to_vec(&r).expect("requests serialise");
    assert_eq!(parse_request(&line).expect("a printed request parses"), r, "{line:?}");
}

/// A topology file's text (`routeplex up FILE`, `apply`); relative table paths resolve in a
/// directory that does not exist, so no input names a file that is there.
pub fn topology(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Topology::parse(text, "fuzz.yaml", Path::new("/nonexistent/routeplex-fuzz")) {
        std::hint::black_box(t.summary());
    }
}

/// A snapshot file, as read and behind a header made valid for it (`restore`, the migration's
/// BEGIN frame, the journal's base and restore records).
pub fn snapshot(data: &[u8]) {
    snapshot_file(data);
    snapshot_file(&snapshot::framed(data));
}

fn snapshot_file(bytes: &[u8]) {
    let Ok(Snapshot::V1(s)) = snapshot::decode("fuzz.snap", bytes) else { return };
    let again = snapshot::decode("fuzz.snap", &s.encode()).expect("an encoded snapshot decodes");
    assert_eq!(again.into_current(), s);
    let _ = s.route_ops();
    std::hint::black_box(s.counters());
}

/// A VR configuration for checkpointed tables: one interface with both families.
fn checkpoint_vr() -> VrConfig {
    VrConfig {
        name: "r".into(),
        interfaces: vec![dataplane::config::IfaceConfig {
            name: "a".into(),
            port: 0,
            vlan: None,
            mac: wire::MacAddr([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            ipv4: vec!["10.0.0.1/24".parse().expect("prefix")],
            ipv6: vec!["2001:db8::1/64".parse().expect("prefix")],
        }],
        routes: vec![],
        neighbors: vec![],
        limits: Default::default(),
    }
}

/// A checkpoint file, as read and behind a header made valid for it, and each table in it
/// given to the VR it names; `data` is also taken as one table's bytes.
pub fn checkpoint(data: &[u8]) {
    let cfg = checkpoint_vr();
    for bytes in [data, &checkpoint::framed(data)] {
        let Ok(entries) = checkpoint::parse(bytes) else { continue };
        let again = checkpoint::encode(
            entries.iter().map(|(n, e)| (n.as_str(), e.fingerprint, e.table.as_slice())),
        );
        assert_eq!(checkpoint::parse(&again).expect("an encoded checkpoint parses"), entries);
        for e in entries.values() {
            checkpoint_table(&cfg, &e.table);
        }
    }
    checkpoint_table(&cfg, data);
}

fn checkpoint_table(cfg: &VrConfig, bytes: &[u8]) {
    if let Ok(t) = dataplane::routes::RouteTable::from_checkpoint(cfg, bytes) {
        let again = t.checkpoint();
        let t2 = dataplane::routes::RouteTable::from_checkpoint(cfg, &again)
            .expect("a table's checkpoint is taken back");
        assert_eq!(t2.checkpoint(), again, "a checkpoint taken back checkpoints the same");
    }
}

/// Where a journal input is written to be read: one file per process.
fn journal_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("routeplex-fuzz-journal-{}", std::process::id()))
}

/// A journal file as `up` reads it (records, checksums, torn tails), each record's body
/// decoded as a replay decodes it; then `data[0]` and the rest as one record written as the
/// daemon writes it, which must read back as itself.
pub fn journal(data: &[u8]) {
    let path = journal_path();
    let _ = std::fs::remove_file(&path);
    read_journal(&path, data);
    if let Some((&kind, body)) = data.split_first() {
        let mut file = journal::header();
        file.extend_from_slice(&journal::record(kind, body));
        let records = read_journal(&path, &file);
        assert_eq!(records, vec![(kind, body.to_vec())], "a written record reads back");
    }
    let _ = std::fs::remove_file(&path);
}

/// The records of `bytes` read as a journal file (the good ones, in order).
fn read_journal(path: &Path, bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut f = std::fs::File::create(path).expect("journal scratch file");
    f.write_all(bytes).expect("journal scratch file written");
    drop(f);
    let mut out = Vec::new();
    let Ok(Some(mut r)) = journal::Reader::open(path) else { return out };
    while let Ok(Some((kind, body))) = r.next_record() {
        journal_body(kind, body);
        out.push((kind, body.to_vec()));
    }
    out
}

/// One record's body, decoded as [`journal::recover`] decodes it before applying it.
fn journal_body(kind: u8, body: &[u8]) {
    match kind {
        journal::KIND_COMMAND => {
            if let Ok(cmd) = serde_json::from_slice::<Command>(body) {
                let again = serde_json::to_vec(&cmd).expect("commands serialise");
                assert_eq!(serde_json::from_slice::<Command>(&again).expect("reparses"), cmd);
            }
        }
        journal::KIND_RESTORE => {
            if let Ok((name, down, s)) = journal::decode_restore("journal", body) {
                let again = journal::restore_body(&name, down, &s.encode());
                let (n2, d2, s2) = journal::decode_restore("journal", &again).expect("decodes");
                assert_eq!((n2, d2, s2), (name, down, s));
            }
        }
        journal::KIND_TOPOLOGY => {
            if let Ok(t) = serde_json::from_slice::<TopologyRecord>(body) {
                let again = serde_json::to_vec(&t).expect("records serialise");
                assert_eq!(serde_json::from_slice::<TopologyRecord>(&again).expect("reparses"), t);
                topology(t.text.as_bytes());
            }
        }
        journal::KIND_BASE => snapshot_file(body),
        _ => {}
    }
}

/// The migration protocol as a destination meets it. First, the bytes as what an
/// unauthenticated peer sends to the listener: the real handshake over loopback TCP, which
/// must refuse it (the peer cannot know the secret). Then the bytes as the frames after the
/// handshake (`kind u8 | len u32 | body`, tags left out: they are checked before any body is
/// decoded), each body decoded as the destination decodes it, in the protocol's order: the
/// BEGIN snapshot, ROUTES against its meta, the tunnel port of FORWARD, the STATE.
pub fn migrate_frames(data: &[u8]) {
    handshake(data);
    let mut meta = None;
    let mut routes = Vec::new();
    for (kind, body) in frames(data) {
        match (kind, &meta) {
            (_, None) => {
                if let Ok(s) = snapshot::decode("migration", body) {
                    meta = Some(s.into_current().meta);
                }
            }
            (migrate::ROUTES, Some(m)) => {
                let _ = snapshot::decode_routes(body, 0, m, &mut routes);
            }
            (migrate::FORWARD | migrate::PREPARED, _) => {
                if let Ok(Some(port)) = migrate::port_of(body) {
                    assert_eq!(migrate::port_of(&port.to_le_bytes()).ok(), Some(Some(port)));
                }
            }
            (migrate::STATE, _) => {
                if let Ok(st) = serde_json::from_slice::<FinalState>(body) {
                    let again = serde_json::to_vec(&st).expect("states serialise");
                    assert_eq!(serde_json::from_slice::<FinalState>(&again).expect("reparses"), st);
                }
            }
            _ => {}
        }
    }
}

/// Splits `data` into frames as the wire carries them; a length past the end ends it.
fn frames(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&kind, rest) = data.split_first()?;
        let len = u32::from_le_bytes(rest.get(..4)?.try_into().expect("4 bytes")) as usize;
        let body = rest.get(4..4 + len.min(migrate::MAX_FRAME))?;
        data = &rest[4 + body.len()..];
        Some((kind, body))
    })
}

thread_local! {
    static LISTENER: TcpListener = TcpListener::bind("127.0.0.1:0").expect("loopback listener");
}

/// At most this much of an input goes to the listener (what loopback buffers without a reader).
const HANDSHAKE_BYTES: usize = 64 << 10;

fn handshake(data: &[u8]) {
    LISTENER.with(|l| {
        let to = l.local_addr().expect("listener address");
        let mut peer = TcpStream::connect(to).expect("loopback connect");
        let (s, _) = l.accept().expect("loopback accept");
        let _ = peer.write_all(&data[..data.len().min(HANDSHAKE_BYTES)]);
        let _ = peer.shutdown(std::net::Shutdown::Write);
        let r = migrate::Channel::accept(s, b"routeplex fuzz secret");
        assert!(r.is_err(), "a peer without the secret was accepted");
    });
}

/// The handoff tunnel's receiving end on loopback, fed datagrams from its one source: ops of
/// `op u8 | len u16 LE | bytes`; op 0 sends the bytes as a frame through the real sending end
/// (the first two bytes name the interface), op 1 sends them as a datagram as they are, op 2
/// as a datagram with a valid tag (a peer that holds the key but sends anything). What comes
/// out when only the sending end sent is exactly what it sent, in order.
pub fn tunnel(data: &[u8]) {
    const KEY: [u8; 32] = [7; 32];
    let lo: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let rx_sock = tunnel::bind(lo).expect("tunnel socket");
    let src = UdpSocket::bind(lo).expect("source socket");
    let to = rx_sock.local_addr().expect("tunnel address");
    let mut rx = tunnel::TunnelRx::new(rx_sock, &KEY);
    rx.connect(src.local_addr().expect("source address")).expect("connect");
    let mut tx = tunnel::TunnelTx::new(src.try_clone().expect("clone"), to, &KEY).expect("tx");
    let (mut sent, mut only_tx) = (Vec::new(), true);
    let mut rest = data;
    while let Some((&op, r)) = rest.split_first() {
        let Some(len) = r.get(..2).map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))) else {
            break;
        };
        let bytes = &r[2..][..len.min(r.len() - 2)];
        rest = &r[2 + bytes.len()..];
        match op % 3 {
            0 => {
                let iface = bytes.get(..2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                let frame = bytes.get(2..).unwrap_or_default();
                if tx.send(iface, frame) && (14..=ports::MAX_FRAME).contains(&frame.len()) {
                    sent.push((iface, frame.to_vec()));
                } else {
                    only_tx = false;
                }
            }
            1 => {
                only_tx = false;
                let _ = src.send(bytes);
            }
            _ => {
                only_tx = false;
                let _ = src.send(&tunnel::signed(&KEY, bytes));
            }
        }
    }
    let mut buf = ports::PktBuf::new();
    let mut got = Vec::new();
    while let Some(iface) = rx.recv(&mut buf) {
        got.push((iface, buf.frame().to_vec()));
    }
    if only_tx {
        assert_eq!(got, sent, "the tunnel delivers what its sending end sent");
    }
}

/// Netlink datagrams from a mirror namespace (`len u16 LE | datagram` each), applied in order
/// to one route sync's model as its poll applies them; the model then publishes its table.
pub fn netlink(data: &[u8]) {
    crate::rtsync::fuzz_datagrams(data);
}

/// A small snapshot: one interface, two route sources, a route of each family.
pub fn sample_snapshot() -> snapshot::SnapshotV1 {
    use snapshot::{MetaV1, SnapRoute, SnapTarget};
    let mut vr = crate::model::VrDoc::new("a");
    vr.interfaces.push(crate::model::IfaceDoc::on_port(
        "e0",
        "p0",
        "02:00:00:00:00:01",
        ["10.0.0.1/24"],
    ));
    snapshot::SnapshotV1 {
        meta: MetaV1 {
            vr,
            sources: vec!["static".into(), "api".into()],
            next_hops: vec![
                SnapTarget {
                    via: Some("10.0.0.2".parse().expect("address")),
                    ..Default::default()
                },
                SnapTarget { blackhole: true, ..Default::default() },
            ],
            ..MetaV1::default()
        },
        routes: vec![
            SnapRoute { prefix: "10.9.0.0/16".parse().expect("prefix"), source: 1, next_hop: 0 },
            SnapRoute { prefix: "2001:db8::/32".parse().expect("prefix"), source: 0, next_hop: 1 },
        ],
    }
}

/// Valid inputs of target `name`: its seed corpus (routeplex's `tests/it/fuzz_corpus.rs` writes them to
/// `fuzz/corpus/NAME/` when asked; the files are committed).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let route_add = Command::RouteAdd {
        vr: "a".into(),
        routes: vec![crate::api::Route {
            prefix: "10.9.0.0/16".parse().expect("prefix"),
            via: Some("10.0.1.2".parse().expect("address")),
            interface: None,
            blackhole: false,
        }],
    };
    let snap = sample_snapshot().encode();
    let state = FinalState {
        vr: "a".into(),
        neighbors: vec![snapshot::SnapNeighbor {
            interface: 0,
            address: "10.0.0.2".parse().expect("address"),
            mac: "02:00:00:00:00:02".into(),
            reachable: true,
        }],
        counters: vec![("rx_packets".into(), 7)],
        commit_within_ms: Some(500),
        not_after_ns: None,
    };
    let frame = |kind: u8, body: &[u8]| {
        let mut f = vec![kind];
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend_from_slice(body);
        f
    };
    let ops = |ops: &[(u8, &[u8])]| {
        let mut d = Vec::new();
        for (op, b) in ops {
            d.push(*op);
            d.extend_from_slice(&(b.len() as u16).to_le_bytes());
            d.extend_from_slice(b);
        }
        d
    };
    match name {
        "api_request" => [
            r#"{"v":1,"id":1,"cmd":"status"}"#.as_bytes().to_vec(),
            r#"{"v":1,"cmd":"hello"}"#.as_bytes().to_vec(),
            serde_json::to_vec(&crate::api::Request { v: 1, id: 2, cmd: route_add.clone() })
                .expect("serialises"),
            br#"{"v":1,"id":3,"cmd":"route_delete","args":{"vr":"a","prefixes":["10.9.0.0/16"]}}"#
                .to_vec(),
        ]
        .to_vec(),
        "topology" => [
            include_str!("../../../examples/one-vr.yaml"),
            include_str!("../../../examples/two-vrs.yaml"),
            include_str!("../../../examples/switched.yaml"),
            include_str!("../../../examples/vxlan-two-hosts.yaml"),
        ]
        .map(|t| t.as_bytes().to_vec())
        .to_vec(),
        "snapshot" => vec![snap.clone(), snap[snapshot::HEADER_LEN..].to_vec()],
        "checkpoint" => {
            let mut cfg = checkpoint_vr();
            cfg.routes.push(dataplane::routes::route(
                "10.9.0.0/16".parse().expect("prefix"),
                dataplane::config::RouteTarget::Via {
                    gateway: "10.0.0.2".parse().expect("address"),
                    iface: None,
                },
                dataplane::RouteSource::Static,
            ));
            let table = dataplane::routes::RouteTable::new(&cfg).expect("table").checkpoint();
            let fp = checkpoint::Fingerprint { config: 1, journal_len: 12, journal_crc: 2 };
            vec![checkpoint::encode([("r", fp, table.as_slice())].into_iter()), table]
        }
        "journal" => {
            let cmd = serde_json::to_vec(&route_add).expect("serialises");
            let topo = TopologyRecord {
                from_crc: 1,
                from_len: 2,
                file: "t.yaml".into(),
                text: include_str!("../../../examples/one-vr.yaml").into(),
            };
            let topo = serde_json::to_vec(&topo).expect("serialises");
            let restore = journal::restore_body("a", true, &snap);
            let mut file = journal::header();
            for (kind, body) in [
                (journal::KIND_BASE, &snap),
                (journal::KIND_COMMAND, &cmd),
                (journal::KIND_TOPOLOGY, &topo),
                (journal::KIND_RESTORE, &restore),
            ] {
                file.extend_from_slice(&journal::record(kind, body));
            }
            let torn = file[..file.len() - 5].to_vec();
            vec![file, torn, [&[journal::KIND_COMMAND][..], &cmd].concat()]
        }
        "migrate_frames" => {
            let s = sample_snapshot();
            let mut routes = Vec::new();
            snapshot::encode_routes(&s.routes, &mut routes);
            let head = snapshot::SnapshotV1 { meta: s.meta, routes: vec![] }.encode();
            vec![[
                frame(migrate::BEGIN, &head),
                frame(migrate::ROUTES, &routes),
                frame(migrate::END_ROUTES, &[]),
                frame(migrate::FORWARD, &4242u16.to_le_bytes()),
                frame(migrate::STATE, &serde_json::to_vec(&state).expect("serialises")),
            ]
            .concat()]
        }
        "tunnel" => {
            let mut eth = vec![0u8; 62];
            eth[..14].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
            let f1 = [&1u16.to_le_bytes()[..], &eth].concat();
            let f2 = [&2u16.to_le_bytes()[..], &eth].concat();
            let mut forged = 1u16.to_le_bytes().to_vec();
            forged.extend_from_slice(&9u64.to_le_bytes());
            forged.extend_from_slice(&eth);
            vec![ops(&[(0, &f1), (0, &f2)]), ops(&[(0, &f1), (1, &forged), (2, &forged)])]
        }
        "netlink" => {
            let mut d = Vec::new();
            for m in crate::rtsync::fuzz_seeds() {
                d.extend_from_slice(&(m.len() as u16).to_le_bytes());
                d.extend_from_slice(&m);
            }
            vec![d]
        }
        _ => Vec::new(),
    }
}
