//! Live migration of a VR between two routeplex hosts over TCP.
//!
//! The source (`migrate`, run on its control thread while its workers keep forwarding):
//! 1. connects to the destination's `migration.listen` address; both prove they know the
//!    topology's `migration.secret` (below) before any state moves;
//! 2. pre-copy: sends the VR's snapshot meta (configuration, route sources and next hops),
//!    then its routes in chunks of [`CHUNK`] packed records, while it forwards; the
//!    destination builds the VR with its interfaces down (it neither answers nor sends on the
//!    shared segment) and says when it is ready;
//! 3. changes made meanwhile: route changes come through the control thread, which is busy
//!    with the migration, so they wait behind it and none can happen between the pre-copy and
//!    the stop (the table's generations are checked to prove it, and a change aborts);
//! 4. stop-and-copy: takes its VR's interfaces down, sends the learned neighbors and counters;
//!    the destination puts them in, takes its interfaces up and announces the VR's MACs
//!    (gratuitous ARP per IPv4 address, unsolicited NA with O=1 per IPv6 address, the
//!    link-local one too, per interface) and answers; then sends [`ANNOUNCE_ROUNDS`] - 1 more
//!    rounds at QEMU's announce intervals, so switches and caches that missed one learn;
//! 5. handoff: from its stop the source sends every frame that reaches its VR on to the
//!    destination through the handoff tunnel on the migration link (see [`tunnel`]), and the
//!    destination receives them into the VR from its commit on, ahead of what reaches it
//!    directly; the source keeps doing so until the switches have learned the move (no frame
//!    for [`DRAIN_QUIET`], and at least [`DRAIN_MIN`] after the commit, the first three
//!    announcement rounds; at most [`DRAIN_MAX`]), then removes its VR and ends the tunnel.
//!
//! A VR with a `control_plane` takes its mirror along: the snapshot carries the control plane,
//! with `netns` and `migrate_netns` swapped when the latter is set (two hosts on one machine
//! cannot both have the first name); the destination's restore makes the namespace and taps
//! and starts route sync with the VR's `kernel` routes held stale until its restarted routing
//! daemons re-learn them (`cpsync`), and the source's mirror taps and sync go with its VR
//! after the drain. The daemons are the operator's to stop here and start there, with BGP
//! graceful restart (`docs/control-plane.md`, "Across a migration").
//!
//! Any failure before the destination's answer to the stop (refused, timed out, cut) leaves
//! the VR running at the source: its interfaces come back up if they went down, and the
//! destination removes what it built when the connection ends before the commit.
//!
//! So no packet is lost at the handoff: those that reach the source between its stop and the
//! commit wait in the destination's tunnel socket (sized for it) and go first; those that
//! reach it after, until the switches learn, cross the tunnel. Order: the destination holds
//! the ports of the VR's interfaces (what reaches them directly waits in their rings) until
//! its own announcements come back through the tunnel. A switch floods an announcement to the
//! source's port behind every frame it sent there before it learned from it, and the source
//! sends on in arrival order, so everything the source got before the switch learned has come
//! by then. The hold lasts at most `tunnel::HOLD_MAX` (a source that never sends the
//! announcements back, or several segments learning at different times): past it, a frame the
//! source sends on late can arrive after a newer one that came directly, reordered but not
//! lost. A destination that does not offer a tunnel (an older one) gets none, and the source
//! drops what reaches it meanwhile (`interface_down`). The stop-and-copy round trip is
//! reported as `stop_ms`, frames sent on as `forwarded`.
//!
//! Channel: frames `type u8 | length u32 | body | tag (32 bytes)`. The handshake: the
//! destination sends a random 32-byte challenge; the source answers with its own and
//! HMAC-SHA256(secret, "routeplex-migrate-1 source" | theirs | its own); the destination checks
//! it (constant time) and answers with HMAC-SHA256(secret, "... destination" | source's |
//! its own), which the source checks. Every later frame carries HMAC-SHA256(session key,
//! sequence | type | length | body), the session key being HMAC-SHA256(secret, "... session"
//! | both challenges), so nothing can be injected, replayed or reordered after the handshake.
//! Bodies are bounded ([`MAX_FRAME`]). The destination refuses peers not in
//! `migration.peers` (when given) before the handshake, and state from a peer that fails it.
//! `PREPARED` carries the destination's tunnel port (u16 LE; empty: no tunnel), and a source
//! that takes it answers `FORWARD` with its own before `STATE`; the tunnel's key is derived
//! from the session key.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::Sha256;
use tracing::{info, warn};

use crate::api::Command;
use crate::snapshot::{self, MetaV1, SnapNeighbor, SnapRoute, SnapshotV1};
use crate::{ControlError, MigrationConfig, Node};

pub mod tunnel;

/// Routes per pre-copy chunk.
pub const CHUNK: usize = 65_536;
/// The largest frame body.
pub const MAX_FRAME: usize = 32 << 20;
/// Announcement rounds after a move, and when each goes (ms after the commit; QEMU's
/// `announce_self` schedule).
pub const ANNOUNCE_ROUNDS: [u64; 5] = [0, 50, 200, 450, 800];
/// How long either end waits for the other.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// The source sends on what reaches it for at least this long after the commit...
pub const DRAIN_MIN: Duration = Duration::from_millis(250);
/// ...and until none came for this long...
pub const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// ...but no longer than this (after the last announcement round).
pub const DRAIN_MAX: Duration = Duration::from_millis(1000);

/// Frame types.
pub const HELLO: u8 = 1;
pub const AUTH: u8 = 2;
pub const AUTH_OK: u8 = 3;
pub const BEGIN: u8 = 10;
pub const ROUTES: u8 = 11;
pub const END_ROUTES: u8 = 12;
pub const PREPARED: u8 = 13;
pub const STATE: u8 = 14;
pub const COMMITTED: u8 = 15;
/// The source's handoff tunnel port (u16 LE), after `PREPARED` offered the destination's.
pub const FORWARD: u8 = 16;
pub const ERROR: u8 = 99;
const LABEL: &[u8] = b"routeplex-migrate-1";

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn hmac_ok(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.verify_slice(tag).is_ok()
}

fn nonce() -> std::io::Result<[u8; 32]> {
    let mut n = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut n)?;
    Ok(n)
}

fn fail(m: impl std::fmt::Display) -> ControlError {
    ControlError::State(format!("migration: {m}"))
}

/// One end of an authenticated channel.
pub struct Channel {
    s: TcpStream,
    key: [u8; 32],
    sent: u64,
    got: u64,
    /// Bytes sent and received, frames included.
    pub bytes: u64,
}

fn raw_send(s: &mut TcpStream, kind: u8, body: &[u8]) -> std::io::Result<()> {
    let mut h = [0u8; 5];
    h[0] = kind;
    h[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    s.write_all(&h)?;
    s.write_all(body)
}

fn raw_recv(s: &mut TcpStream, max: usize) -> Result<(u8, Vec<u8>), ControlError> {
    let mut h = [0u8; 5];
    s.read_exact(&mut h).map_err(|e| fail(format_args!("the peer went away ({e})")))?;
    let len = u32::from_le_bytes(h[1..].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(fail(format_args!("a frame of {len} bytes (at most {max})")));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(|e| fail(format_args!("the peer went away ({e})")))?;
    Ok((h[0], body))
}

impl Channel {
    fn configure(s: TcpStream) -> Result<TcpStream, ControlError> {
        s.set_nodelay(true).map_err(|e| ControlError::io("migration socket", e))?;
        s.set_read_timeout(Some(PEER_TIMEOUT)).map_err(|e| ControlError::io("migration", e))?;
        s.set_write_timeout(Some(PEER_TIMEOUT)).map_err(|e| ControlError::io("migration", e))?;
        Ok(s)
    }

    /// The source's end: answers the destination's challenge and checks its answer.
    pub fn connect(to: SocketAddr, secret: &[u8]) -> Result<Channel, ControlError> {
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .map_err(|e| ControlError::io(format!("migration: connecting to {to}"), e))?;
        let mut s = Channel::configure(s)?;
        let (k, theirs) = raw_recv(&mut s, 64)?;
        if k == ERROR {
            return Err(fail(format_args!("{to} refused: {}", String::from_utf8_lossy(&theirs))));
        }
        if k != HELLO || theirs.len() != 32 {
            return Err(fail(format_args!("{to} does not speak the migration protocol")));
        }
        let mine = nonce().map_err(|e| ControlError::io("/dev/urandom", e))?;
        let proof = hmac(secret, &[LABEL, b" source", &theirs, &mine]);
        raw_send(&mut s, AUTH, &[&mine[..], &proof[..]].concat())
            .map_err(|e| ControlError::io(format!("migration: {to}"), e))?;
        let (k, body) = raw_recv(&mut s, 4096)?;
        if k == ERROR {
            return Err(fail(format_args!("{to} refused: {}", String::from_utf8_lossy(&body))));
        }
        if k != AUTH_OK || !hmac_ok(secret, &[LABEL, b" destination", &mine, &theirs], &body) {
            return Err(fail(format_args!(
                "{to} could not prove it knows the migration secret: not trusted"
            )));
        }
        let key = hmac(secret, &[LABEL, b" session", &theirs, &mine]);
        Ok(Channel { s, key, sent: 0, got: 0, bytes: 0 })
    }

    /// The destination's end: challenges the source.
    pub fn accept(s: TcpStream, secret: &[u8]) -> Result<Channel, ControlError> {
        let mut s = Channel::configure(s)?;
        let mine = nonce().map_err(|e| ControlError::io("/dev/urandom", e))?;
        raw_send(&mut s, HELLO, &mine).map_err(|e| ControlError::io("migration", e))?;
        let (k, body) = raw_recv(&mut s, 64)?;
        let ok = k == AUTH
            && body.len() == 64
            && hmac_ok(secret, &[LABEL, b" source", &mine, &body[..32]], &body[32..]);
        if !ok {
            let _ =
                raw_send(&mut s, ERROR, b"the peer could not prove it knows the migration secret");
            return Err(fail("a peer could not prove it knows the migration secret: refused"));
        }
        let theirs = &body[..32];
        let proof = hmac(secret, &[LABEL, b" destination", theirs, &mine]);
        raw_send(&mut s, AUTH_OK, &proof).map_err(|e| ControlError::io("migration", e))?;
        let key = hmac(secret, &[LABEL, b" session", &mine, theirs]);
        Ok(Channel { s, key, sent: 0, got: 0, bytes: 0 })
    }

    /// Sends one frame, tagged.
    pub fn send(&mut self, kind: u8, body: &[u8]) -> Result<(), ControlError> {
        let len = (body.len() as u32).to_le_bytes();
        let tag = hmac(&self.key, &[&self.sent.to_le_bytes(), &[kind], &len, body]);
        self.sent += 1;
        let w = raw_send(&mut self.s, kind, body).and_then(|_| self.s.write_all(&tag));
        w.map_err(|e| fail(format_args!("the peer went away ({e})")))?;
        self.bytes += (body.len() + 37) as u64;
        Ok(())
    }

    /// Receives one frame and checks its tag; an `ERROR` frame becomes the error.
    pub fn recv(&mut self) -> Result<(u8, Vec<u8>), ControlError> {
        let (kind, body) = raw_recv(&mut self.s, MAX_FRAME)?;
        let mut tag = [0u8; 32];
        self.s.read_exact(&mut tag).map_err(|e| fail(format_args!("the peer went away ({e})")))?;
        let len = (body.len() as u32).to_le_bytes();
        if !hmac_ok(&self.key, &[&self.got.to_le_bytes(), &[kind], &len, &body], &tag) {
            return Err(fail("a frame failed its authentication tag: the channel is not trusted"));
        }
        self.got += 1;
        self.bytes += (body.len() + 37) as u64;
        if kind == ERROR {
            return Err(fail(format_args!("the peer: {}", String::from_utf8_lossy(&body))));
        }
        Ok((kind, body))
    }

    fn expect(&mut self, want: u8) -> Result<Vec<u8>, ControlError> {
        let (k, body) = self.recv()?;
        if k != want {
            return Err(fail(format_args!("frame {k} where {want} was due")));
        }
        Ok(body)
    }

    fn set_timeout(&self, t: Duration) {
        let _ = self.s.set_read_timeout(Some(t));
    }

    /// A key for `purpose`, derived from the session key.
    fn derive(&self, purpose: &[u8]) -> [u8; 32] {
        hmac(&self.key, &[LABEL, purpose])
    }

    fn local_addr(&self) -> Result<SocketAddr, ControlError> {
        self.s.local_addr().map_err(|e| ControlError::io("migration socket", e))
    }

    fn peer_addr(&self) -> Result<SocketAddr, ControlError> {
        self.s.peer_addr().map_err(|e| ControlError::io("migration socket", e))
    }
}

/// A port number in a `PREPARED` or `FORWARD` body; `None` for an empty body.
fn port_of(body: &[u8]) -> Result<Option<u16>, ControlError> {
    match body.len() {
        0 => Ok(None),
        2 => Ok(Some(u16::from_le_bytes([body[0], body[1]]))),
        n => Err(fail(format_args!("a {n}-byte tunnel port (2 bytes)"))),
    }
}

/// The learned neighbors and counters sent at the stop.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalState {
    pub vr: String,
    #[serde(default)]
    pub neighbors: Vec<SnapNeighbor>,
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
}

fn set_up(node: &Node, vr: &str, up: bool) -> Result<(), ControlError> {
    let n = node.table(vr).map_or(0, |_| {
        node.topology().vrs.iter().find(|v| v.name == vr).map_or(0, |v| v.interfaces.len())
    });
    node.runtime().on_vr(vr, move |c, v| {
        for i in 0..n {
            let _ = c.change_vr(v, dataplane::VrChange::Up(i as u16, up));
        }
    })?;
    Ok(())
}

/// `migrate`: moves VR `vr` of `node` to the host listening on `to` (see the module doc).
pub fn migrate(node: &mut Node, vr: &str, to: SocketAddr) -> Result<Value, ControlError> {
    let t0 = Instant::now();
    let cfg = node.topology().migration.clone().ok_or_else(|| {
        ControlError::Invalid(
            "this host's topology has no migration: section (its secret): it cannot send VRs"
                .into(),
        )
    })?;
    if node.table(vr).is_none() {
        return Err(ControlError::NoSuchVr(vr.into()));
    }
    let mut ch = Channel::connect(to, &cfg.secret)?;
    // Pre-copy, while the VR forwards.
    let snap = snapshot::take(node, vr)?;
    let gens = node.table(vr).map(|t| t.generations());
    let mut meta = snap.meta.clone();
    if let Some(cp) = meta.vr.control_plane.as_mut().filter(|c| c.migrate_netns.is_some()) {
        // The destination makes the mirror under the other name (this host still has this
        // one until the handoff), and a migration back uses this one again.
        std::mem::swap(&mut cp.netns, &mut cp.migrate_netns);
    }
    let head = SnapshotV1 { meta, routes: Vec::new() };
    ch.send(BEGIN, &head.encode())?;
    let mut chunks = 0;
    for c in snap.routes.chunks(CHUNK) {
        let mut b = Vec::with_capacity(c.len() * 10);
        snapshot::encode_routes(c, &mut b);
        ch.send(ROUTES, &b)?;
        chunks += 1;
    }
    ch.send(END_ROUTES, &[])?;
    ch.set_timeout(Duration::from_secs(120));
    let offered = port_of(&ch.expect(PREPARED)?)?;
    ch.set_timeout(PEER_TIMEOUT);
    let key = ch.derive(b" forward");
    let tx = match offered {
        Some(port) => {
            let sock = tunnel::bind(ch.local_addr()?)
                .map_err(|e| ControlError::io("migration: the handoff tunnel", e))?;
            let end = sock.try_clone().map_err(|e| ControlError::io("migration tunnel", e))?;
            let mine = sock.local_addr().map_err(|e| ControlError::io("migration tunnel", e))?;
            let to = SocketAddr::new(ch.peer_addr()?.ip(), port);
            let tx = tunnel::TunnelTx::new(sock, to, &key)
                .map_err(|e| ControlError::io(format!("migration: the tunnel to {to}"), e))?;
            ch.send(FORWARD, &mine.port().to_le_bytes())?;
            Some((tx, end))
        }
        None => None,
    };
    let precopy_ms = t0.elapsed().as_secs_f64() * 1e3;
    if node.table(vr).map(|t| t.generations()) != gens {
        return Err(fail(format_args!("vr {vr}'s routes changed during the pre-copy; try again")));
    }
    // Stop and copy: from here on the VR is down at the source until the destination commits.
    let stop = Instant::now();
    // One job on the worker: interfaces down, then what they learned and counted.
    let n = node.topology().vrs.iter().find(|v| v.name == vr).map_or(0, |v| v.interfaces.len());
    let (redirect, end) = match tx {
        Some((tx, end)) => (Some(tx), Some(end)),
        None => (None, None),
    };
    let counts = redirect.as_ref().map(|t| t.counts.clone());
    let (rows, counters) = node.runtime().on_vr(vr, move |c, v| {
        if let Some(t) = redirect {
            let _ = c.set_redirect(v, Some(Box::new(t)));
        }
        for i in 0..n {
            let _ = c.change_vr(v, dataplane::VrChange::Up(i as u16, false));
        }
        let rows = match c.change_vr(v, dataplane::VrChange::Neighbors) {
            Ok(dataplane::VrAnswer::Neighbors(r)) => r,
            _ => Vec::new(),
        };
        (rows, *c.vrs()[v].counters())
    })?;
    let done = (|| {
        let st = FinalState {
            vr: vr.to_string(),
            neighbors: snapshot::learned(rows),
            counters: counters.named().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        };
        ch.send(STATE, &serde_json::to_vec(&st).expect("state serialises"))?;
        ch.expect(COMMITTED)
    })();
    if let Err(e) = done {
        node.runtime().on_vr(vr, |c, v| {
            let _ = c.set_redirect(v, None);
        })?;
        set_up(node, vr, true)?;
        warn!(vr, to = %to, error = %e, "migration failed at the stop; the VR runs here again");
        return Err(e);
    }
    let stop_ms = stop.elapsed().as_secs_f64() * 1e3;
    let total_ms = t0.elapsed().as_secs_f64() * 1e3;
    let drain = Instant::now();
    if let Some(c) = &counts {
        wait_quiet(c);
    }
    node.execute(Command::VrRemove { vr: vr.to_string() })?;
    if let Some(s) = end {
        // Lost, the destination's tunnel ends at its own deadline instead.
        let _ = s.send(&tunnel::end_marker(&key));
    }
    let drain_ms = drain.elapsed().as_secs_f64() * 1e3;
    let get = |f: fn(&tunnel::TunnelCounts) -> &std::sync::atomic::AtomicU64| {
        counts.as_ref().map(|c| tunnel::TunnelCounts::get(f(c)))
    };
    let (forwarded, forward_failed) = (get(|c| &c.frames), get(|c| &c.failed));
    info!(vr, to = %to, routes = snap.routes.len(), bytes = ch.bytes, total_ms, stop_ms, forwarded, "vr migrated");
    Ok(json!({
        "vr": vr,
        "to": to.to_string(),
        "routes": snap.routes.len(),
        "chunks": chunks,
        "bytes_moved": ch.bytes,
        "precopy_ms": precopy_ms,
        "stop_ms": stop_ms,
        "total_ms": total_ms,
        "drain_ms": drain_ms,
        "forwarded": forwarded,
        "forward_failed": forward_failed,
    }))
}

/// The source's drain (see the module doc): returns once the switches have stopped sending
/// it the VR's frames, or at [`DRAIN_MAX`].
fn wait_quiet(c: &tunnel::TunnelCounts) {
    let t0 = Instant::now();
    let (mut seen, mut since) = (tunnel::TunnelCounts::get(&c.frames), Instant::now());
    while t0.elapsed() < DRAIN_MAX {
        std::thread::sleep(Duration::from_millis(10));
        let now = tunnel::TunnelCounts::get(&c.frames);
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if t0.elapsed() >= DRAIN_MIN && since.elapsed() >= DRAIN_QUIET {
            return;
        }
    }
}

/// The destination's listener: a thread serving one migration at a time, applying what it
/// receives through the data plane's own control socket `sock` (so it goes through the same
/// single control thread as every other change).
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
}

impl Listener {
    /// Listens on `cfg.listen`; `dir` holds the temporary snapshot of an incoming VR.
    pub fn start(
        cfg: &MigrationConfig,
        sock: PathBuf,
        dir: PathBuf,
    ) -> Result<Listener, ControlError> {
        let want = cfg
            .listen
            .ok_or_else(|| ControlError::Invalid("migration: no listen address".into()))?;
        let l = TcpListener::bind(want)
            .map_err(|e| ControlError::io(format!("migration: listening on {want}"), e))?;
        let addr = l.local_addr().map_err(|e| ControlError::io("migration", e))?;
        l.set_nonblocking(true).map_err(|e| ControlError::io("migration", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (cfg, st) = (cfg.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("migrate-listen".into())
            .spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((s, peer)) => {
                            let _ = s.set_nonblocking(false);
                            incoming(s, peer, &cfg, &sock, &dir);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
            .map_err(|e| ControlError::io("migration thread", e))?;
        info!(address = %addr, "migration listening");
        Ok(Listener { stop, thread: Some(thread), addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection to this host's control socket, kept for a whole migration (a connection
/// per request would wait on the socket's accept loop each time, at the stop too).
struct Local {
    w: std::os::unix::net::UnixStream,
    r: std::io::BufReader<std::os::unix::net::UnixStream>,
    id: u64,
}

impl Local {
    fn connect(sock: &Path) -> Result<Local, ControlError> {
        let w = std::os::unix::net::UnixStream::connect(sock)
            .map_err(|e| ControlError::io(sock.display(), e))?;
        w.set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| ControlError::io(sock.display(), e))?;
        let r = std::io::BufReader::new(w.try_clone().map_err(|e| ControlError::io("socket", e))?);
        Ok(Local { w, r, id: 0 })
    }

    fn ask(&mut self, cmd: Command) -> Result<Value, ControlError> {
        use std::io::BufRead;
        self.id += 1;
        let req = crate::api::Request { v: crate::api::API_VERSION, id: self.id, cmd };
        let mut line = serde_json::to_vec(&req).expect("requests serialise");
        line.push(b'\n');
        self.w.write_all(&line).map_err(|e| ControlError::io("control socket", e))?;
        let mut reply = Vec::new();
        (&mut self.r)
            .take(crate::daemon::MAX_LINE as u64)
            .read_until(b'\n', &mut reply)
            .map_err(|e| ControlError::io("control socket", e))?;
        let reply: crate::api::Reply = serde_json::from_slice(&reply)
            .map_err(|e| fail(format_args!("unreadable reply from the control socket ({e})")))?;
        reply.into_result().map_err(|e| ControlError::Invalid(format!("{} ({})", e.msg, e.code)))
    }
}

/// One incoming migration; whatever happens, the connection ends with it.
fn incoming(mut s: TcpStream, peer: SocketAddr, cfg: &MigrationConfig, sock: &Path, dir: &Path) {
    if !cfg.peers.is_empty() && !cfg.peers.contains(&peer.ip()) {
        warn!(peer = %peer, reason = "not a listed peer", "migration refused");
        let _ = raw_send(&mut s, ERROR, b"this host does not take VRs from your address");
        return;
    }
    let mut ch = match Channel::accept(s, &cfg.secret) {
        Ok(c) => c,
        Err(e) => {
            warn!(peer = %peer, reason = "authentication", error = %e, "migration refused");
            return;
        }
    };
    let mut local = match Local::connect(sock) {
        Ok(l) => l,
        Err(e) => {
            warn!(peer = %peer, error = %e, "migration: the control socket does not answer");
            let _ = ch.send(ERROR, b"the destination's control socket does not answer");
            return;
        }
    };
    let (mut built, mut counts) = (None, None);
    match receive(&mut ch, &mut local, dir, &mut built, &mut counts) {
        Ok(vr) => {
            info!(peer = %peer, vr, bytes = ch.bytes, "vr migrated here");
            announce_rounds(&mut local, &vr);
            if let Some(c) = counts {
                let g = |a: &std::sync::atomic::AtomicU64| tunnel::TunnelCounts::get(a);
                info!(
                    vr,
                    frames = g(&c.frames),
                    refused = g(&c.failed),
                    stale = g(&c.stale),
                    lost = g(&c.lost),
                    caught_up_us = g(&c.caught_up_us),
                    "migration: handoff tunnel (so far)"
                );
            }
        }
        Err(e) => {
            warn!(peer = %peer, error = %e, "migration failed; nothing kept");
            if let Some(vr) = &built {
                drop(tunnel::take(vr));
            }
            let _ = ch.send(ERROR, e.to_string().as_bytes());
            if let Some(vr) = built {
                if let Err(e) = local.ask(Command::VrRemove { vr: vr.clone() }) {
                    warn!(vr, error = %e, "migration: removing the half-built VR failed");
                }
            }
        }
    }
}

fn receive(
    ch: &mut Channel,
    local: &mut Local,
    dir: &Path,
    built: &mut Option<String>,
    counts: &mut Option<Arc<tunnel::TunnelCounts>>,
) -> Result<String, ControlError> {
    let head = ch.expect(BEGIN)?;
    let meta: MetaV1 = snapshot::decode("migration", &head)?.into_current().meta;
    let mut routes: Vec<SnapRoute> = Vec::new();
    loop {
        let (k, body) = ch.recv()?;
        match k {
            ROUTES => snapshot::decode_routes(&body, 0, &meta, &mut routes).map_err(fail)?,
            END_ROUTES => break,
            k => return Err(fail(format_args!("frame {k} during the routes"))),
        }
    }
    let vr = meta.vr.name.clone();
    let file = dir.join(format!(".migrate-{}.snap", std::process::id()));
    snapshot::write_atomic(&file, &SnapshotV1 { meta, routes }.encode())?;
    let r = local.ask(Command::Restore {
        snapshot: file.display().to_string(),
        name: None,
        down: true,
    });
    let _ = std::fs::remove_file(&file);
    r?;
    *built = Some(vr.clone());
    // The handoff tunnel: offered with PREPARED, taken by a source that answers FORWARD.
    let sock = tunnel::bind(ch.local_addr()?)
        .map_err(|e| ControlError::io("migration: the handoff tunnel", e))?;
    let port = sock.local_addr().map_err(|e| ControlError::io("migration tunnel", e))?.port();
    let rx = tunnel::TunnelRx::new(sock, &ch.derive(b" forward"));
    ch.send(PREPARED, &port.to_le_bytes())?;
    let (mut k, mut body) = ch.recv()?;
    if k == FORWARD {
        let from = port_of(&body)?.ok_or_else(|| fail("an empty tunnel port"))?;
        rx.connect(SocketAddr::new(ch.peer_addr()?.ip(), from))
            .map_err(|e| ControlError::io("migration: the handoff tunnel", e))?;
        *counts = Some(rx.counts.clone());
        tunnel::park(&vr, rx);
        (k, body) = ch.recv()?;
    }
    if k != STATE {
        return Err(fail(format_args!("frame {k} where {STATE} was due")));
    }
    let st: FinalState =
        serde_json::from_slice(&body).map_err(|e| fail(format_args!("state: {e}")))?;
    if st.vr != vr {
        return Err(fail(format_args!("state for vr {} while moving {vr}", st.vr)));
    }
    local.ask(Command::MigrateCommit {
        vr: vr.clone(),
        neighbors: st.neighbors,
        counters: st.counters,
    })?;
    ch.send(COMMITTED, &[])?;
    Ok(vr)
}

/// The announcement rounds after the first (sent with the commit).
fn announce_rounds(local: &mut Local, vr: &str) {
    let t0 = Instant::now();
    for &at in &ANNOUNCE_ROUNDS[1..] {
        let wait = Duration::from_millis(at).saturating_sub(t0.elapsed());
        std::thread::sleep(wait);
        if let Err(e) = local.ask(Command::Announce { vr: vr.to_string() }) {
            warn!(vr, error = %e, "migration: an announcement round failed");
            return;
        }
    }
}

/// `migrate_commit`: puts the final state into a VR built down by a migration, takes its
/// interfaces up and sends the first announcement round, all in one job on its worker (the
/// VR is down at both ends until this runs).
pub fn commit(node: &mut Node, st: FinalState) -> Result<Value, ControlError> {
    let (counters, _) =
        dataplane::VrCounters::from_named(st.counters.iter().map(|(k, v)| (k.as_str(), *v)));
    let mut neighbors = Vec::new();
    for n in &st.neighbors {
        let mac = n.mac.parse().map_err(|_| {
            ControlError::BadRequest(format!("neighbor {}: mac {:?}", n.address, n.mac))
        })?;
        neighbors.push(dataplane::RestoredNeighbor {
            iface: n.interface,
            ip: n.address,
            mac,
            reachable: n.reachable,
        });
    }
    let state = dataplane::RestoredState {
        counters: Some(counters),
        neighbors,
        now: node.runtime().epoch().elapsed().as_nanos() as u64,
    };
    let frames = announcements(node, &st.vr)?;
    let mut feed = tunnel::take(&st.vr);
    if let Some(f) = &mut feed {
        let cfg = node.topology().vrs.iter().find(|v| v.name == st.vr);
        f.hold_for(cfg.map(|v| v.interfaces.iter().map(|i| i.mac.0).collect()).unwrap_or_default());
    }
    let tunnel = feed.is_some();
    let (took, sent) = node.runtime().on_vr(&st.vr, move |c, v| {
        let took = match c.change_vr(v, dataplane::VrChange::Restore(Box::new(state))) {
            Ok(dataplane::VrAnswer::Restored(n)) => n,
            _ => 0,
        };
        for i in 0..frames.len() {
            let _ = c.change_vr(v, dataplane::VrChange::Up(i as u16, true));
        }
        // Up first: what the source sent on since its stop goes through the VR at the next
        // poll, ahead of the ports.
        if let Some(f) = feed {
            let _ = c.set_feed(v, Some(Box::new(f)));
        }
        (took, send_announcements(c, v, &frames))
    })?;
    Ok(json!({ "vr": st.vr, "neighbors": took, "announced": sent, "tunnel": tunnel }))
}

/// Each interface's name and announcement frames.
/// Each interface's name and the frames that announce it.
type Frames = Vec<(String, Vec<Vec<u8>>)>;

fn announcements(node: &Node, vr: &str) -> Result<Frames, ControlError> {
    let cfg = node
        .topology()
        .vrs
        .iter()
        .find(|v| v.name == vr)
        .ok_or_else(|| ControlError::NoSuchVr(vr.into()))?;
    Ok(cfg
        .interfaces
        .iter()
        .map(|f| {
            let mut frames: Vec<Vec<u8>> =
                f.ipv4.iter().map(|n| garp(f.mac, f.vlan, n.addr())).collect();
            let ll = dataplane::interface_link_local(f.mac);
            frames.extend(
                f.ipv6
                    .iter()
                    .map(|n| n.addr())
                    .chain([ll])
                    .map(|a| unsolicited_na(f.mac, f.vlan, a)),
            );
            (f.name.clone(), frames)
        })
        .collect())
}

fn send_announcements(c: &mut dataplane::Cell, v: usize, frames: &Frames) -> usize {
    let mut n = 0;
    for (name, f) in frames {
        if let Some(p) = c.iface_port(v, name) {
            n += c.send_frames(p, f);
        }
    }
    n
}

/// `announce`: one round of gratuitous ARP (per IPv4 address) and unsolicited neighbor
/// advertisements (per IPv6 address, link-local included; router, override) out of each of
/// the VR's interfaces. Returns the frames sent.
pub fn announce(node: &Node, vr: &str) -> Result<usize, ControlError> {
    let frames = announcements(node, vr)?;
    Ok(node.runtime().on_vr(vr, move |c, v| send_announcements(c, v, &frames))?)
}

fn ether(dst: [u8; 6], src: wire::MacAddr, vlan: Option<u16>, ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(90);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src.0);
    if let Some(v) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A gratuitous ARP request (RFC 5227 announcement: sender and target are the address).
pub fn garp(mac: wire::MacAddr, vlan: Option<u16>, ip: std::net::Ipv4Addr) -> Vec<u8> {
    let mut f = ether([0xff; 6], mac, vlan, 0x0806);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac.0);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f
}

/// An unsolicited neighbor advertisement to all nodes (RFC 4861 §7.2.6): router, override,
/// not solicited, with the target link-layer address.
pub fn unsolicited_na(mac: wire::MacAddr, vlan: Option<u16>, ip: std::net::Ipv6Addr) -> Vec<u8> {
    let dst_ip = std::net::Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut icmp = vec![136, 0, 0, 0, 0b1010_0000, 0, 0, 0];
    icmp.extend_from_slice(&ip.octets());
    icmp.extend_from_slice(&[2, 1]);
    icmp.extend_from_slice(&mac.0);
    let mut sum: u32 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&ip.octets());
    add(&dst_ip.octets());
    add(&(icmp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(&icmp);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    icmp[2..4].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = ether([0x33, 0x33, 0, 0, 0, 1], mac, vlan, 0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(icmp.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&dst_ip.octets());
    f.extend_from_slice(&icmp);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_well_formed() {
        let mac: wire::MacAddr = "02:00:00:00:0a:01".parse().unwrap();
        let g = garp(mac, None, "10.0.0.1".parse().unwrap());
        let e = etherparse::SlicedPacket::from_ethernet(&g).unwrap();
        assert!(matches!(e.net, Some(etherparse::NetSlice::Arp(_))));
        let na = unsolicited_na(mac, Some(7), "2001:db8::1".parse().unwrap());
        let p = etherparse::SlicedPacket::from_ethernet(&na).unwrap();
        let Some(etherparse::TransportSlice::Icmpv6(i)) = p.transport else { panic!("{p:?}") };
        let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else { panic!() };
        let h = ip.header();
        assert_eq!(
            i.header().icmp_type.calc_checksum(h.source(), h.destination(), i.payload()).unwrap(),
            i.header().checksum
        );
        assert_eq!(i.type_u8(), 136);
        assert_eq!(h.hop_limit(), 255);
    }

    #[test]
    fn the_handshake_needs_the_same_secret_both_ways() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Channel::accept(s, b"0123456789abcdef-good").map(|mut c| c.recv())
        });
        let mut c = Channel::connect(at, b"0123456789abcdef-good").unwrap();
        c.send(BEGIN, b"hello").unwrap();
        let got = t.join().unwrap().unwrap().unwrap();
        assert_eq!(got, (BEGIN, b"hello".to_vec()));

        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Channel::accept(s, b"0123456789abcdef-good").err().map(|e| e.to_string())
        });
        let e = Channel::connect(at, b"0123456789abcdef-BAD!").err().unwrap().to_string();
        assert!(e.contains("refused"), "{e}");
        assert!(t.join().unwrap().unwrap().contains("could not prove"));
    }
}
