//! What a peer hands a port, on arbitrary bytes: one entry point per cargo-fuzz target in the
//! workspace's `fuzz/` directory, which routeplex's `tests/it/fuzz_corpus.rs` also runs on every committed
//! corpus file. Not part of the API: hidden from the docs, free to change, and allowed to
//! allocate and open sockets (it is never on a port's path).

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

use crate::memif::proto::{self, Desc, Msg};
use crate::vxlan::{self, VxlanOptions, VxlanPort};
use crate::{Batch, Port};

/// The targets, by the names of their directories under `fuzz/corpus`.
pub const TARGETS: &[&str] = &["vxlan", "memif", "vhost"];

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "vxlan" => vxlan(data),
        "memif" => memif(data),
        "vhost" => vhost(data),
        _ => return false,
    }
    true
}

/// The VXLAN port's decapsulation on loopback (its own 127.0.231.0/24 and a kernel-chosen UDP
/// port): the bytes are datagrams (`len u16 LE | bytes` each), sent from the port's remote, or
/// from an address that is not one when the length's top bit is set. Every datagram is then
/// either a received frame, exactly its bytes after the 8-byte header, or one drop counted by
/// reason.
pub fn vxlan(data: &[u8]) {
    const VNI: u32 = 42;
    thread_local! {
        static PEERS: RefCell<Option<(VxlanPort, UdpSocket, UdpSocket)>> = const { RefCell::new(None) };
    }
    let lo = |h| IpAddr::V4(Ipv4Addr::new(127, 0, 231, h));
    PEERS.with(|p| {
        let mut p = p.borrow_mut();
        let (port, remote, stranger) = p.get_or_insert_with(|| {
            let mut o = VxlanOptions::new(VNI, lo(1), &[lo(2)]);
            o.dstport = 0;
            let port = VxlanPort::open("fuzz-vx", &o).expect("VXLAN port on loopback");
            let to = port.local_addr().expect("port address");
            let sock = |h| {
                let s = UdpSocket::bind(SocketAddr::new(lo(h), 0)).expect("loopback socket");
                s.connect(to).expect("connect");
                s
            };
            (port, sock(2), sock(3))
        });
        let mut batch = Batch::new(crate::MAX_BURST);
        let mut rest = data;
        while let Some(h) = rest.get(..2) {
            let h = u16::from_le_bytes([h[0], h[1]]);
            let n = usize::from(h & 0x7fff).min(rest.len() - 2);
            let d = &rest[2..2 + n];
            rest = &rest[2 + n..];
            let from_remote = h & 0x8000 == 0;
            let sock = if from_remote { &*remote } else { &*stranger };
            let drops = |p: &VxlanPort| p.handle().counters().drops.iter().sum::<u64>();
            let before = drops(port);
            if sock.send(d).is_err() {
                continue;
            }
            // Loopback delivers before `send` returns; one datagram at a time, so that none is
            // lost to a full receive buffer.
            batch.clear();
            port.rx_burst(&mut batch);
            let want = from_remote && vxlan::parse(d) == Ok(VNI) && d.len() - 8 <= crate::MAX_FRAME;
            if want {
                assert_eq!(batch.len(), 1, "a datagram from the remote with the port's VNI");
                assert_eq!(batch.get(0).frame(), &d[8..], "the frame after the header");
            } else {
                assert_eq!(batch.len(), 0, "a datagram that is no frame of the port's");
            }
            assert_eq!(drops(port) - before, u64::from(!want), "one drop per unusable datagram");
        }
    });
    // The header alone: what `header` writes, `parse` reads.
    if let Some(b) = data.get(..3) {
        let vni = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        let mut d = vxlan::header(vni).to_vec();
        d.extend_from_slice(&[0; 14]);
        assert_eq!(vxlan::parse(&d), Ok(vni));
    }
}

/// memif as its peer drives it: the bytes as a control message (decoded; what decodes encodes
/// to bytes that decode to it), as descriptors checked against regions whose sizes they also
/// give, and as the shared memory of a receive and a transmit ring.
pub fn memif(data: &[u8]) {
    if let Ok(m) = Msg::decode(data) {
        assert_eq!(Msg::decode(&m.encode()).as_ref(), Ok(&m), "a message encodes to itself");
    }
    let sizes: Vec<usize> = data
        .chunks_exact(4)
        .take(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize)
        .collect();
    for c in data.chunks_exact(proto::DESC_SIZE) {
        let d = Desc::from_bytes(c.try_into().expect("a descriptor's bytes"));
        assert_eq!(Desc::from_bytes(&d.to_bytes()), d);
        if let Ok((off, len)) = d.check(&sizes, 10240) {
            assert!(off + len <= sizes[usize::from(d.region)] && len <= 10240);
        }
    }
    for c in data.chunks_exact(4) {
        let (ahead, behind) = (u16::from_le_bytes([c[0], c[1]]), u16::from_le_bytes([c[2], c[3]]));
        if let Some(n) = proto::pending(ahead, behind, 1024) {
            assert!(n <= 1024 && behind.wrapping_add(n) == ahead);
        }
    }
    crate::memif::fuzz_rings(data);
}

/// vhost-user rings as a guest fills them: see `crate::vhost::fuzz_rings`.
pub fn vhost(data: &[u8]) {
    crate::vhost::fuzz_rings(data);
}

/// Valid inputs of target `name`: its seed corpus.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let put = |m: &mut Vec<u8>, at: usize, b: &[u8]| {
        if m.len() < at + b.len() {
            m.resize(at + b.len(), 0);
        }
        m[at..at + b.len()].copy_from_slice(b);
    };
    let mut eth = vec![0u8; 60];
    eth[..14].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
    match name {
        "vxlan" => {
            let dgram = |vni: u32| [&vxlan::header(vni)[..], &eth].concat();
            let mut d = Vec::new();
            for (flags, g) in
                [(0u16, dgram(42)), (0, dgram(7)), (0x8000, dgram(42)), (0, eth[..9].to_vec())]
            {
                d.extend_from_slice(&(g.len() as u16 | flags).to_le_bytes());
                d.extend_from_slice(&g);
            }
            vec![d]
        }
        "memif" => {
            use proto::{desc_off, ring_off, RING_HEADER_SIZE};
            let desc = |m: &mut Vec<u8>, ring: usize, slot: usize, len: u32, off: u32| {
                let at = 2 + ring + RING_HEADER_SIZE + proto::DESC_SIZE * slot;
                put(m, at + desc_off::LENGTH, &len.to_le_bytes());
                put(m, at + desc_off::OFFSET, &off.to_le_bytes());
            };
            // Server: the client published two frames to receive and posted two buffers.
            let mut server = vec![2, 0];
            put(&mut server, 2 + ring_off::HEAD, &2u16.to_le_bytes());
            desc(&mut server, 0, 0, 60, 0xc00);
            desc(&mut server, 0, 1, 60, 0xc40);
            put(&mut server, 2 + 0x1000 + ring_off::HEAD, &2u16.to_le_bytes());
            desc(&mut server, 0x1000, 0, 2048, 0x2000);
            desc(&mut server, 0x1000, 1, 2048, 0x2800);
            // Client: the server filled one of the buffers it posted.
            let mut client = vec![2, 1];
            put(&mut client, 2 + ring_off::TAIL, &1u16.to_le_bytes());
            desc(&mut client, 0, 0, 60, 0xc00);
            vec![Msg::disconnect("fuzz seed").encode().to_vec(), server, client]
        }
        "vhost" => {
            // Rings of 4: one 72-byte chain (header and frame) to transmit, two receive buffers.
            let rx = crate::vhost::FUZZ_RX as usize;
            let mut m = vec![2, 0];
            let desc = |m: &mut Vec<u8>, at: usize, addr: u64, len: u32, flags: u16| {
                put(m, 2 + at, &addr.to_le_bytes());
                put(m, 2 + at + 8, &len.to_le_bytes());
                put(m, 2 + at + 12, &flags.to_le_bytes());
            };
            desc(&mut m, 0, 0xc00, 72, 0);
            put(&mut m, 2 + 0x400 + 2, &1u16.to_le_bytes());
            desc(&mut m, rx, 0x2000, 0x4000, 2);
            desc(&mut m, rx + 16, 0x6000, 0x4000, 2);
            put(&mut m, 2 + rx + 0x400 + 2, &2u16.to_le_bytes());
            put(&mut m, 2 + rx + 0x400 + 6, &1u16.to_le_bytes());
            let mut mergeable = m.clone();
            mergeable[1] = 2;
            vec![m, mergeable]
        }
        _ => Vec::new(),
    }
}
