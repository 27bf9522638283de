//! Helpers for the kernel port tests (`kernel_*.rs`): a root check that skips with a reason,
//! unique interface and namespace names, veth pairs and namespaces that remove themselves in
//! `VrDrop` (so a failing test cleans up too), recognisable test frames, and a transfer loop that
//! checks every byte and every counter.
//!
//! Traffic only ever goes to interfaces these helpers created. IPv6 is disabled on them before
//! they come up, so the kernel sends nothing of its own; frames that are not ours are still
//! recognised and set aside rather than trusted to be absent.

#![allow(dead_code)] // each test file uses a different subset

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ports::{Batch, Port, PortStats, PortStatus, MAX_BURST};

/// How long a test waits for frames before it fails: a hang guard, not a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// True if the tests can create interfaces; prints why not otherwise.
pub fn root_or_skip(test: &str) -> bool {
    let euid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .and_then(|u| u.parse::<u32>().ok());
    if euid != Some(0) {
        eprintln!(
            "skipping {test}: needs root (CAP_NET_ADMIN) to create veth pairs and namespaces"
        );
        return false;
    }
    assert!(
        Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success()),
        "{test}: running as root but `ip` is missing: install iproute2 (scripts/setup)"
    );
    true
}

/// A name unique to this process and call, at most 15 bytes: `rpx<pid%1000><tag><n>`.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = format!("rpx{}{tag}{n}", std::process::id() % 1000);
    assert!(name.len() <= 15, "name {name} too long");
    name
}

/// Runs `ip ARGS`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ip ARGS`; true on success. For cleanup, where failure is fine.
pub fn ip_quiet(args: &[&str]) -> bool {
    Command::new("ip").args(args).output().is_ok_and(|o| o.status.success())
}

/// `ip` arguments prefixed with `-n NS` when `ns` is given.
fn in_ns<'a>(ns: Option<&'a str>, args: &[&'a str]) -> Vec<&'a str> {
    let mut v = Vec::new();
    if let Some(ns) = ns {
        v.extend(["-n", ns]);
    }
    v.extend_from_slice(args);
    v
}

/// Disables IPv6 on `dev` (in `ns`) so the kernel sends no router solicitations or MLD reports
/// on it once it is up.
pub fn quiet(dev: &str, ns: Option<&str>) {
    let path = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
    match ns {
        None => {
            let _ = std::fs::write(&path, "1");
        }
        Some(ns) => {
            let _ = Command::new("ip")
                .args(["netns", "exec", ns, "sh", "-c", &format!("echo 1 > {path}")])
                .output();
        }
    }
}

/// Brings `dev` (in `ns`) up.
pub fn up(dev: &str, ns: Option<&str>) {
    ip(&in_ns(ns, &["link", "set", "dev", dev, "up"]));
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        let name = unique("n");
        ip(&["netns", "add", &name]);
        Netns { name }
    }

    /// The path a port option takes.
    pub fn path(&self) -> std::path::PathBuf {
        format!("/run/netns/{}", self.name).into()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        ip_quiet(&["netns", "del", &self.name]);
    }
}

/// A veth pair `a` (in this namespace) / `b` (here or in `ns_b`), both up and quiet, deleted on
/// drop.
pub struct Veth {
    pub a: String,
    pub b: String,
    pub ns_b: Option<String>,
}

impl Veth {
    pub fn new() -> Veth {
        Self::make(None)
    }

    /// A pair whose `b` end lives in `ns`.
    pub fn new_in(ns: &Netns) -> Veth {
        Self::make(Some(ns.name.clone()))
    }

    fn make(ns_b: Option<String>) -> Veth {
        let a = unique("a");
        let b = unique("b");
        let v = Veth { a: a.clone(), b: b.clone(), ns_b: ns_b.clone() };
        match &ns_b {
            None => ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]),
            Some(ns) => ip(&["link", "add", &a, "type", "veth", "peer", "name", &b, "netns", ns]),
        };
        quiet(&a, None);
        quiet(&b, ns_b.as_deref());
        up(&a, None);
        up(&b, ns_b.as_deref());
        v
    }

    /// Deletes the pair now (both ends go).
    pub fn delete(&self) {
        ip(&["link", "del", &self.a]);
    }

    /// Re-creates a deleted pair with the same names.
    pub fn recreate(&self) {
        let v = Self::make_named(&self.a, &self.b, self.ns_b.as_deref());
        std::mem::forget(v);
    }

    fn make_named(a: &str, b: &str, ns_b: Option<&str>) -> Veth {
        match ns_b {
            None => ip(&["link", "add", a, "type", "veth", "peer", "name", b]),
            Some(ns) => ip(&["link", "add", a, "type", "veth", "peer", "name", b, "netns", ns]),
        };
        quiet(a, None);
        quiet(b, ns_b);
        up(a, None);
        up(b, ns_b);
        Veth { a: a.into(), b: b.into(), ns_b: ns_b.map(str::to_string) }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        if !ip_quiet(&["link", "del", &self.a]) {
            ip_quiet(&in_ns(self.ns_b.as_deref(), &["link", "del", &self.b]));
        }
    }
}

/// A tap interface made with `ip tuntap` (persistent until deleted), deleted on drop.
pub struct PersistentTap {
    pub name: String,
}

impl PersistentTap {
    pub fn new() -> PersistentTap {
        let name = unique("t");
        ip(&["tuntap", "add", "dev", &name, "mode", "tap"]);
        quiet(&name, None);
        PersistentTap { name }
    }
}

impl Drop for PersistentTap {
    fn drop(&mut self) {
        ip_quiet(&["link", "del", &self.name]);
    }
}

/// The `ip -d link show` line that names an attached XDP program, if any.
pub fn xdp_prog_line(dev: &str, ns: Option<&str>) -> Option<String> {
    let out = ip(&in_ns(ns, &["-d", "link", "show", "dev", dev]));
    out.lines().find(|l| l.contains("prog/xdp")).map(|l| l.trim().to_string())
}

/// The interface's promiscuity count (`ip -d link`): packet-socket memberships raise it
/// without setting the PROMISC flag.
pub fn promiscuity(dev: &str, ns: Option<&str>) -> u32 {
    let out = ip(&in_ns(ns, &["-d", "link", "show", "dev", dev]));
    let mut words = out.split_whitespace();
    words
        .find(|w| *w == "promiscuity")
        .and_then(|_| words.next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The first line of `ip link show`, which carries `xdp` (driver mode) or `xdpgeneric`.
pub fn link_line(dev: &str, ns: Option<&str>) -> String {
    ip(&in_ns(ns, &["link", "show", "dev", dev])).lines().next().unwrap_or("").to_string()
}

// ---------------------------------------------------------------------------------------------
// Test frames

/// A local experimental EtherType (IEEE 802 "local experimental 1").
pub const ETHERTYPE: u16 = 0x88b5;
const MAGIC: &[u8; 4] = b"RPXT";
/// Destination MAC: locally administered, nobody's address, so only a promiscuous port sees it.
pub const DST: [u8; 6] = [0x02, 0x52, 0x50, 0x58, 0x00, 0x01];
pub const SRC: [u8; 6] = [0x02, 0x52, 0x50, 0x58, 0x00, 0x02];

/// A test frame of exactly `len` bytes (at least 32): MACs, an optional 802.1Q tag, our
/// EtherType, magic, run id, sequence number, and a payload pattern derived from both.
pub fn frame(run: u32, seq: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    assert!(len >= 32);
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&DST);
    f.extend_from_slice(&SRC);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&run.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = run.wrapping_mul(2_654_435_761) ^ seq.wrapping_mul(40_503);
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f
}

/// `(run, seq)` of a test frame, or `None` for anything else.
pub fn parse(f: &[u8]) -> Option<(u32, u32)> {
    let mut p = 12;
    if f.len() >= 16 && f[12..14] == 0x8100u16.to_be_bytes() {
        p += 4;
    }
    let body = f.get(p..p + 14)?;
    if body[..2] != ETHERTYPE.to_be_bytes() || &body[2..6] != MAGIC {
        return None;
    }
    let run = u32::from_be_bytes(body[6..10].try_into().unwrap());
    let seq = u32::from_be_bytes(body[10..14].try_into().unwrap());
    Some((run, seq))
}

/// A fresh run id, so frames of one transfer are never mistaken for another's.
pub fn run_id() -> u32 {
    static N: AtomicU32 = AtomicU32::new(1);
    (std::process::id() << 12) ^ N.fetch_add(1, Ordering::Relaxed)
}

/// The frames of one run: sizes cycle through `sizes`, every `vlan_every`-th frame is tagged.
pub fn frames(run: u32, count: usize, sizes: &[usize], vlan_every: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| {
            let vlan =
                (vlan_every > 0 && i % vlan_every == vlan_every - 1).then_some(100 + i as u16 % 7);
            frame(run, i as u32, sizes[i % sizes.len()], vlan)
        })
        .collect()
}

/// What one transfer saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub received: usize,
    pub strays: usize,
    pub stray_bytes: u64,
}

fn delta(after: PortStats, before: PortStats) -> PortStats {
    PortStats {
        rx_packets: after.rx_packets - before.rx_packets,
        rx_bytes: after.rx_bytes - before.rx_bytes,
        tx_packets: after.tx_packets - before.tx_packets,
        tx_bytes: after.tx_bytes - before.tx_bytes,
        tx_full: after.tx_full - before.tx_full,
        rx_dropped: after.rx_dropped - before.rx_dropped,
        tx_errors: after.tx_errors - before.tx_errors,
    }
}

/// Receives from `rx` into `batch`, checking each test frame of `run` against `want` in order.
fn drain(
    rx: &mut dyn Port,
    batch: &mut Batch,
    run: u32,
    want: &[Vec<u8>],
    seen: &mut Seen,
) -> usize {
    batch.clear();
    let n = rx.rx_burst(batch);
    for p in batch.packets() {
        let f = p.frame();
        match parse(f) {
            Some((r, seq)) if r == run => {
                let i = seen.received;
                assert!(
                    i < want.len(),
                    "{}: extra frame seq {seq} after all {} arrived",
                    rx.name(),
                    want.len()
                );
                assert_eq!(seq as usize, i, "{}: frame out of order", rx.name());
                assert_eq!(f.len(), want[i].len(), "{}: frame {i} length", rx.name());
                assert!(f == want[i].as_slice(), "{}: frame {i} content differs", rx.name());
                seen.received += 1;
            }
            _ => {
                seen.strays += 1;
                seen.stray_bytes += f.len() as u64;
            }
        }
    }
    n
}

/// Sends `want` from `tx` to `rx` in bursts of `burst`, then checks that every frame arrived
/// once, in order, byte for byte, and that both ports' counters moved by exactly that.
pub fn transfer(
    tx: &mut dyn Port,
    rx: &mut dyn Port,
    run: u32,
    want: &[Vec<u8>],
    burst: usize,
) -> Seen {
    let tx0 = tx.stats();
    let rx0 = rx.stats();
    let mut out = Batch::new(burst);
    let mut inb = Batch::new(MAX_BURST);
    let mut seen = Seen::default();
    let deadline = Instant::now() + PATIENCE;
    for chunk in want.chunks(burst) {
        out.clear();
        for f in chunk {
            assert!(out.push_copy(f));
        }
        let sel: Vec<u16> = (0..chunk.len() as u16).collect();
        let mut done = 0;
        while done < sel.len() {
            let n = tx.tx_burst(&mut out, &sel[done..]);
            done += n;
            drain(rx, &mut inb, run, want, &mut seen);
            if n == 0 {
                tx.service();
                rx.service();
                assert!(
                    Instant::now() < deadline,
                    "{}: tx stuck after {done} of a burst",
                    tx.name()
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        drain(rx, &mut inb, run, want, &mut seen);
    }
    while seen.received < want.len() {
        tx.service();
        rx.service();
        if drain(rx, &mut inb, run, want, &mut seen) == 0 {
            assert!(
                Instant::now() < deadline,
                "{} -> {}: only {} of {} frames arrived; tx {:?} rx {:?}",
                tx.name(),
                rx.name(),
                seen.received,
                want.len(),
                delta(tx.stats(), tx0),
                delta(rx.stats(), rx0)
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let bytes: u64 = want.iter().map(|f| f.len() as u64).sum();
    let (dt, dr) = (delta(tx.stats(), tx0), delta(rx.stats(), rx0));
    assert_eq!(
        (dt.tx_packets, dt.tx_bytes),
        (want.len() as u64, bytes),
        "{} tx counters {dt:?}",
        tx.name()
    );
    // tx_full may count retries of a momentarily full ring; nothing may be refused outright.
    assert_eq!(dt.tx_errors, 0, "{} tx counters {dt:?}", tx.name());
    assert_eq!(
        (dr.rx_packets, dr.rx_bytes),
        (want.len() as u64 + seen.strays as u64, bytes + seen.stray_bytes),
        "{} rx counters {dr:?}",
        rx.name()
    );
    assert_eq!(dr.rx_dropped, 0, "{} rx counters {dr:?}", rx.name());
    // The sender must not read back what it sent.
    let mut own = Seen::default();
    drain(tx, &mut inb, run, &[], &mut own);
    seen
}

/// The standard workout: frames of 60 and 1514 bytes and sizes in between, some VLAN-tagged,
/// in bursts of 1, 2 and 257, from `a` to `b` and back.
pub fn workout(a: &mut dyn Port, b: &mut dyn Port) {
    for (burst, count) in [(1, 20), (2, 40), (257, 257 * 3 + 5)] {
        let sizes = [60, 1514, 61, 128, 1000, 1513, 64];
        let run = run_id();
        transfer(a, b, run, &frames(run, count, &sizes, 5), burst);
        let run = run_id();
        transfer(b, a, run, &frames(run, count, &sizes, 3), burst);
    }
}

/// Calls `service()` until `cond` holds (or fails after [`PATIENCE`]).
pub fn service_until(port: &mut dyn Port, what: &str, cond: impl Fn(&dyn Port) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond(port) {
        assert!(
            Instant::now() < deadline,
            "{}: gave up waiting for {what}: {:?}",
            port.name(),
            port.status()
        );
        port.service();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Deletes the veth under ports `a` and `b` and makes it again. While it is gone, bursts keep
/// working and return nothing (`a`'s refused frames count as tx errors), `a` says why it is
/// down and has no ifindex, and `while_down` checks what else the backend shows; once back,
/// both re-open on the new interface and pass the workout.
pub fn removed_and_back<P: Port>(
    v: &Veth,
    a: &mut P,
    b: &mut P,
    ifindex: impl Fn(&P) -> u32,
    while_down: impl Fn(&P),
) {
    let old = ifindex(a);
    v.delete();
    let mut batch = Batch::new(8);
    for i in 0..8 {
        batch.push_copy(&frame(1, i, 60, None));
    }
    let mut inb = Batch::new(64);
    for _ in 0..3 {
        let _ = a.tx_burst(&mut batch, &[0, 1, 2]);
        let _ = a.rx_burst(&mut inb);
        a.service();
    }
    service_until(a, "down", |p| p.status() != PortStatus::Up);
    assert_eq!(a.status(), PortStatus::Down(format!("interface {} disappeared", v.a)));
    assert_eq!(ifindex(a), 0);
    while_down(a);
    let errors = a.stats().tx_errors;
    assert_eq!(a.tx_burst(&mut batch, &[0, 1]), 0);
    assert_eq!(a.stats().tx_errors, errors + 2);
    assert_eq!(a.rx_burst(&mut inb), 0);
    service_until(b, "down", |p| p.status() != PortStatus::Up);

    v.recreate();
    service_until(a, "up again", |p| p.status() == PortStatus::Up);
    service_until(b, "up again", |p| p.status() == PortStatus::Up);
    assert_ne!(ifindex(a), old);
    workout(a, b);
}

/// Sets `dev`'s MTU (in `ns`).
pub fn set_mtu(dev: &str, ns: Option<&str>, mtu: u32) {
    ip(&in_ns(ns, &["link", "set", "dev", dev, "mtu", &mtu.to_string()]));
}

/// Frames for a link of MTU 9000: up to 9014 bytes untagged and 9018 tagged (the most a
/// kernel sends or takes at that MTU), between sizes that end just past a 2048- or 4096-byte
/// buffer and small ones.
pub fn jumbo_frames(run: u32, count: usize) -> Vec<Vec<u8>> {
    let sizes = [9014, 60, 2049, 9018, 4097, 1514, 6000, 9018, 8999];
    (0..count)
        .map(|i| {
            let len = sizes[i % sizes.len()];
            frame(run, i as u32, len, (len == 9018).then_some(7))
        })
        .collect()
}

/// [`transfer`] of jumbo frames both ways, in bursts of 1 and 64, over a link of MTU 9000.
pub fn jumbo_workout(a: &mut dyn Port, b: &mut dyn Port) {
    for (burst, count) in [(1, 12), (64, 64 * 3 + 7)] {
        let run = run_id();
        transfer(a, b, run, &jumbo_frames(run, count), burst);
        let run = run_id();
        transfer(b, a, run, &jumbo_frames(run, count), burst);
    }
}
