//! Helpers shared by the memif integration tests: unique socket names, the frame pattern both
//! routeplex and the DPDK peer (tests/dpdk/memif_peer.c) write and check, and a pump that drives
//! ports' `service()` until a condition holds; the DPDK peer program, built once and shared by
//! the memif and vhost-user interop tests.
#![allow(dead_code)]

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};

/// Frames routeplex sends carry this magic; the DPDK peer's carry [`MAGIC_DPDK`].
pub const MAGIC_RPX: u32 = 0x5250_4c58; // "RPLX"
/// Magic of frames the DPDK peer sends.
pub const MAGIC_DPDK: u32 = 0x4450_4b31; // "DPK1"
/// Ethertype of test frames (IEEE local experimental).
pub const ETHERTYPE: u16 = 0x88b5;
/// Header bytes before the pattern: MACs, ethertype, magic, seq, length.
pub const HDR: usize = 24;

/// A socket path or abstract name unique to this process and call.
pub fn unique_socket(abstract_ns: bool) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = format!("rpx-memif-{}-{n}", std::process::id());
    if abstract_ns {
        format!("@{name}")
    } else {
        std::env::temp_dir().join(format!("{name}.sock")).to_string_lossy().into_owned()
    }
}

/// Options for tests: short reconnect and handshake timeouts, a small ring.
pub fn opts(socket: &str, name: &str) -> MemifOptions {
    let mut o = MemifOptions::new(socket);
    o.name = name.to_string();
    o.reconnect_interval = Duration::from_millis(5);
    o.log2_ring_size = 10;
    o
}

/// The length of test frame `seq`: 60..=1514, spread so that consecutive frames differ.
pub fn frame_len(seq: u32) -> usize {
    60 + (seq as usize * 7919) % (1514 - 60 + 1)
}

/// Writes test frame `seq` of `len` bytes (>= HDR) into `out`. Same layout as memif_peer.c.
pub fn write_frame(out: &mut [u8], magic: u32, seq: u32) {
    let len = out.len();
    out[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    out[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    out[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    out[14..18].copy_from_slice(&magic.to_be_bytes());
    out[18..22].copy_from_slice(&seq.to_be_bytes());
    out[22..24].copy_from_slice(&(len as u16).to_be_bytes());
    for (i, b) in out[HDR..].iter_mut().enumerate() {
        *b = (seq.wrapping_mul(31).wrapping_add(i as u32)) as u8;
    }
}

/// A test frame as a vector.
pub fn frame(magic: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    write_frame(&mut v, magic, seq);
    v
}

/// Checks a received test frame; returns its seq, or why it is wrong.
pub fn check_frame(f: &[u8], magic: u32) -> Result<u32, String> {
    if f.len() < HDR {
        return Err(format!("frame of {} bytes", f.len()));
    }
    let m = u32::from_be_bytes(f[14..18].try_into().unwrap());
    let seq = u32::from_be_bytes(f[18..22].try_into().unwrap());
    let len = u16::from_be_bytes(f[22..24].try_into().unwrap()) as usize;
    if m != magic {
        return Err(format!("magic {m:#x}, expected {magic:#x}"));
    }
    if len != f.len() {
        return Err(format!("seq {seq}: length field {len}, frame {}", f.len()));
    }
    let mut want = vec![0u8; len];
    write_frame(&mut want, magic, seq);
    if want != f {
        let at = want.iter().zip(f).position(|(a, b)| a != b).unwrap();
        return Err(format!("seq {seq}: byte {at} differs"));
    }
    Ok(seq)
}

/// Calls `service()` on every port until `cond` holds; panics with `what` after 10 s.
pub fn pump_until(
    ports: &mut [&mut MemifPort],
    what: &str,
    mut cond: impl FnMut(&mut [&mut MemifPort]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for p in ports.iter_mut() {
            p.service();
        }
        if cond(ports) {
            return;
        }
        let states: Vec<_> = ports.iter().map(|p| p.status()).collect();
        assert!(Instant::now() < deadline, "timed out waiting for {what}; status: {states:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Services both ports until both are up.
pub fn connect(a: &mut MemifPort, b: &mut MemifPort) {
    pump_until(&mut [a, b], "both ports up", |p| p.iter().all(|p| p.status() == PortStatus::Up));
}

/// The Down reason, or "" when up.
pub fn down_reason(p: &dyn Port) -> String {
    match p.status() {
        PortStatus::Up => String::new(),
        PortStatus::Down(r) => r,
    }
}

/// Sends `frames` from `tx` to `rx` in bursts of `burst`, servicing both, and returns what `rx`
/// received, in order.
pub fn transfer(
    tx: &mut MemifPort,
    rx: &mut MemifPort,
    frames: &[Vec<u8>],
    burst: usize,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut sent = 0;
    let mut b = Batch::new(burst.max(1));
    let mut r = Batch::new(256);
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < frames.len() {
        assert!(Instant::now() < deadline, "transfer stalled: sent {sent}, received {}", out.len());
        if sent < frames.len() {
            b.clear();
            for f in &frames[sent..(sent + burst).min(frames.len())] {
                assert!(b.push_copy(f));
            }
            let sel: Vec<u16> = (0..b.len() as u16).collect();
            let n = tx.tx_burst(&mut b, &sel);
            for i in 0..n {
                assert!(b.get(i).is_empty(), "a taken slot must hold an empty buffer");
            }
            sent += n;
        }
        r.clear();
        rx.rx_burst(&mut r);
        out.extend(r.packets().iter().map(|p| p.frame().to_vec()));
        tx.service();
        rx.service();
    }
    out
}

/// A connected server/client pair on `socket`.
pub fn pair(socket: &str, tweak: impl Fn(&mut MemifOptions)) -> (MemifPort, MemifPort) {
    let mut so = opts(socket, "srv");
    tweak(&mut so);
    let mut co = opts(socket, "cli");
    tweak(&mut co);
    let mut s = MemifPort::server(so).expect("server opens");
    let mut c = MemifPort::client(co).expect("client opens");
    connect(&mut s, &mut c);
    (s, c)
}

/// The DPDK peer's source; both the memif and the vhost-user (virtio_user) tests run it.
pub const SOURCE: &[u8] = include_bytes!("../dpdk/memif_peer.c");

/// One DPDK peer at a time: each busy-polls, and the machine may have two cores.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The built peer, or `None` (with the reason printed) when libdpdk-dev is missing.
pub fn peer_binary() -> Option<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = BIN.get_or_init(|| {
        let pc = Command::new("pkg-config").args(["--cflags", "--libs", "libdpdk"]).output();
        let flags = match pc {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            _ => return Err("libdpdk-dev not installed (scripts/setup installs it)".into()),
        };
        let mut h = std::hash::DefaultHasher::new();
        (SOURCE, &flags).hash(&mut h);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let bin = dir.join(format!("memif_peer-{:016x}", h.finish()));
        if bin.exists() {
            return Ok(bin);
        }
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dpdk/memif_peer.c");
        let tmp = dir.join(format!("memif_peer.tmp{}", std::process::id()));
        let out = Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&tmp)
            .arg(src)
            .args(flags.split_whitespace())
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !out.status.success() {
            panic!("building memif_peer.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        std::fs::rename(&tmp, &bin).map_err(|e| format!("rename: {e}"))?;
        Ok(bin)
    });
    match r {
        Ok(b) => Some(b.clone()),
        Err(why) => {
            if std::env::var_os("ROUTEPLEX_REQUIRE_DPDK").is_some_and(|v| v == "1") {
                panic!("ROUTEPLEX_REQUIRE_DPDK=1 but {why}");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}
