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
//! 4. stop-and-copy: reads its VR's learned neighbors, then takes its interfaces down (which
//!    flushes them), both in one job on its worker, and sends the neighbors and counters;
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
//!    At the stop it also hands the VR's stations off in the switches it sits on
//!    (`dataplane::Switch::hand_off`): the destination's announcements come back by the
//!    switch's VXLAN member and move the stations there, and a third host's frames that
//!    still arrive by that member (sent before that host learned) go to the VR's member and
//!    through the tunnel instead of being dropped as `same_port`.
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
//! the VR running at the source: its interfaces come back up if they went down, with the
//! neighbors it had (put back) and an announcement, and the destination removes what it built
//! when the connection ends before the commit. The stop is bounded by the topology's
//! `migration: stop_timeout_ms`: past it the source abandons the move and says so (an `ERROR`
//! frame). So that the VR does not come up at both ends, the destination commits only while
//! half that bound (`STATE`'s `commit_within_ms`) has not passed since the state arrived (the
//! control thread checks it when it runs the commit: it may be busy) and only if the source
//! has sent nothing since `STATE` (it sends nothing there unless it gave up). A destination
//! that commits inside its half but whose answer takes the other half to arrive still ends with
//! the VR at both ends; the bound should be well above the link's round trip.
//!
//! The listener serves each connection on a thread of its own: a peer has
//! [`HANDSHAKE_DEADLINE`] in all to prove itself (not per read), at most [`MAX_HANDSHAKES`]
//! connections are in the handshake at once (one more cuts the oldest, see [`crate::admit`]),
//! and at most [`MAX_INCOMING`] migrations are received at once (more are refused, `busy`), so
//! connections that never finish cannot keep a real source out.
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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tracing::{info, warn};

use crate::admit::{self, Pending, Slot};
use crate::api::{Answer, Command, Committed, Migrated};
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
/// How long either end waits for the other once both have proved themselves.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a peer has for its whole part of the handshake (one short frame each way),
/// however it spreads its bytes out.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// Connections in the handshake at once; one more cuts the oldest (see [`crate::admit`]).
pub const MAX_HANDSHAKES: usize = 16;
/// Migrations received at once (after the handshake); more are refused at once (`busy`).
pub const MAX_INCOMING: usize = 4;
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

/// Reads all of `buf`: by `deadline` when given, else with the socket's timeout per read.
fn read_all(s: &mut TcpStream, buf: &mut [u8], deadline: Option<Instant>) -> std::io::Result<()> {
    match deadline {
        Some(d) => admit::read_exact_by(s, buf, d),
        None => s.read_exact(buf),
    }
}

fn raw_recv(
    s: &mut TcpStream,
    max: usize,
    deadline: Option<Instant>,
) -> Result<(u8, Vec<u8>), ControlError> {
    let gone = |e: std::io::Error| fail(format_args!("the peer went away ({e})"));
    let mut h = [0u8; 5];
    read_all(s, &mut h, deadline).map_err(gone)?;
    let len = u32::from_le_bytes(h[1..].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(fail(format_args!("a frame of {len} bytes (at most {max})")));
    }
    let mut body = vec![0u8; len];
    read_all(s, &mut body, deadline).map_err(gone)?;
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
        let by = Some(Instant::now() + HANDSHAKE_DEADLINE);
        let (k, theirs) = raw_recv(&mut s, 64, by)?;
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
        let (k, body) = raw_recv(&mut s, 4096, by)?;
        if k == ERROR {
            return Err(fail(format_args!("{to} refused: {}", String::from_utf8_lossy(&body))));
        }
        if k != AUTH_OK || !hmac_ok(secret, &[LABEL, b" destination", &mine, &theirs], &body) {
            return Err(fail(format_args!(
                "{to} could not prove it knows the migration secret: not trusted"
            )));
        }
        let key = hmac(secret, &[LABEL, b" session", &theirs, &mine]);
        let ch = Channel { s, key, sent: 0, got: 0, bytes: 0 };
        ch.set_timeout(PEER_TIMEOUT);
        Ok(ch)
    }

    /// The destination's end: challenges the source, which has [`HANDSHAKE_DEADLINE`] in all
    /// to answer.
    pub fn accept(s: TcpStream, secret: &[u8]) -> Result<Channel, ControlError> {
        let mut s = Channel::configure(s)?;
        let by = Some(Instant::now() + HANDSHAKE_DEADLINE);
        let mine = nonce().map_err(|e| ControlError::io("/dev/urandom", e))?;
        raw_send(&mut s, HELLO, &mine).map_err(|e| ControlError::io("migration", e))?;
        let (k, body) = raw_recv(&mut s, 64, by)?;
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
        let ch = Channel { s, key, sent: 0, got: 0, bytes: 0 };
        ch.set_timeout(PEER_TIMEOUT);
        Ok(ch)
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
        self.recv_by(None)
    }

    /// As [`Channel::recv`], the whole frame by `deadline` when given.
    fn recv_by(&mut self, deadline: Option<Instant>) -> Result<(u8, Vec<u8>), ControlError> {
        let (kind, body) = raw_recv(&mut self.s, MAX_FRAME, deadline)?;
        let mut tag = [0u8; 32];
        read_all(&mut self.s, &mut tag, deadline)
            .map_err(|e| fail(format_args!("the peer went away ({e})")))?;
        if deadline.is_some() {
            self.set_timeout(PEER_TIMEOUT);
        }
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

    /// Whether the peer has sent anything or closed: between `STATE` and `COMMITTED` the
    /// source sends nothing unless it gave up (an `ERROR` frame, then the end).
    fn peer_spoke(&self) -> bool {
        if self.s.set_nonblocking(true).is_err() {
            return false;
        }
        let r = self.s.peek(&mut [0u8; 1]);
        let _ = self.s.set_nonblocking(false);
        r.is_ok()
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
pub(crate) fn port_of(body: &[u8]) -> Result<Option<u16>, ControlError> {
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
    /// How long after this state arrives the destination may still commit (half the source's
    /// stop bound, leaving it the rest for the answer); `None` from an older source: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_within_ms: Option<u64>,
    /// For the destination's own `migrate_commit`: the monotonic clock (`sys::monotonic_ns`)
    /// after which it refuses to commit. Not sent.
    #[serde(skip)]
    pub not_after_ns: Option<u64>,
}

/// The switch ends of VR `vr`'s internal links, as (port in the VR's cell, the interface's
/// MAC): where the source hands its stations off from its stop (`dataplane::Switch::hand_off`;
/// a VR and the switches it sits on share a cell).
fn switch_ends(node: &Node, vr: &str) -> Vec<(u16, wire::MacAddr)> {
    let t = node.topology();
    let Some(v) = t.vrs.iter().find(|v| v.name == vr) else { return Vec::new() };
    let rt = node.runtime();
    let end = |i: &dataplane::config::IfaceConfig| {
        let crate::topology::PortKind::Link { peer } = t.ports.get(usize::from(i.port))?.kind
        else {
            return None;
        };
        let name = &t.ports.get(usize::from(peer))?.name;
        let p = rt.cell_ports(rt.cell_of_port(name)?).iter().rposition(|n| n == name)?;
        Some((u16::try_from(p).ok()?, i.mac))
    };
    v.interfaces.iter().filter_map(end).collect()
}

/// The source's VR back as it was after a failed stop: no redirect, its stations no longer
/// handed off, the neighbors it had, interfaces up; then announced, in case the destination's
/// announcements moved the switches before it gave up.
fn resume(node: &Node, vr: &str, learned: &[SnapNeighbor]) -> Result<(), ControlError> {
    let n = node.topology().vrs.iter().find(|v| v.name == vr).map_or(0, |v| v.interfaces.len());
    let ends = switch_ends(node, vr);
    // Its own table's rows: they parse and are individual addresses (it learned them).
    let neighbors = snapshot::restored_neighbors(learned).unwrap_or_default();
    let st = dataplane::RestoredState {
        counters: None,
        neighbors,
        now: node.runtime().epoch().elapsed().as_nanos() as u64,
    };
    node.runtime().on_vr(vr, move |c, v| {
        let _ = c.set_redirect(v, None);
        for &(p, _) in &ends {
            let _ = c.end_hand_off(p);
        }
        let _ = c.change_vr(v, dataplane::VrChange::Restore(Box::new(st)));
        for i in 0..n {
            let _ = c.change_vr(v, dataplane::VrChange::Up(i as u16, true));
        }
    })?;
    if let Err(e) = announce(node, vr) {
        warn!(vr, error = %e, "migration: announcing the VR here again failed");
    }
    Ok(())
}

/// `migrate`: moves VR `vr` of `node` to the host listening on `to` (see the module doc).
pub fn migrate(node: &mut Node, vr: &str, to: SocketAddr) -> Result<Migrated, ControlError> {
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
    let snap = crate::vr_state::take(node, vr)?;
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
    // Only with a tunnel: without one, what reaches the source is dropped anyway.
    let ends = if redirect.is_some() { switch_ends(node, vr) } else { Vec::new() };
    let (rows, counters, refused, sent) = node.runtime().on_vr(vr, move |c, v| {
        // The neighbors first: taking an interface down flushes its own.
        let rows = match c.change_vr(v, dataplane::VrChange::Neighbors) {
            Ok(dataplane::VrAnswer::Neighbors(r)) => r,
            _ => Vec::new(),
        };
        if let Some(t) = redirect {
            let _ = c.set_redirect(v, Some(Box::new(t)));
        }
        let refused: Vec<String> = ends
            .iter()
            .filter_map(|&(p, mac)| c.hand_off_station(p, mac).err())
            .map(|e| e.0)
            .collect();
        for i in 0..n {
            let _ = c.change_vr(v, dataplane::VrChange::Up(i as u16, false));
        }
        (rows, *c.vrs()[v].counters(), refused, c.vrs()[v].sent())
    })?;
    // Its last transit frame: after this job it sends none (its interfaces are down).
    let last_sent_ns = sent.last().map(|t| node.runtime().epoch_ns() + t);
    for e in refused {
        // Not fatal: frames a third host sends during the switches' learning may be lost.
        warn!(vr, error = %e, "migration: a station could not be handed off");
    }
    let learned = snapshot::learned(rows);
    let bound = cfg.stop_timeout;
    let done = (|| {
        let st = FinalState {
            vr: vr.to_string(),
            neighbors: learned.clone(),
            counters: counters.named().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            commit_within_ms: Some((bound.as_millis() as u64 / 2).max(1)),
            not_after_ns: None,
        };
        ch.send(STATE, &serde_json::to_vec(&st).expect("state serialises"))?;
        let (k, _) = ch.recv_by(Some(stop + bound))?;
        if k != COMMITTED {
            return Err(fail(format_args!("frame {k} where {COMMITTED} was due")));
        }
        Ok(())
    })();
    if let Err(e) = done {
        let e = if stop.elapsed() >= bound {
            // Told, a destination that is only slow does not commit after all.
            let _ = ch.send(ERROR, b"the source abandoned the stop: no commit in time");
            fail(format_args!(
                "{to} did not commit within {} ms of the stop (migration: stop_timeout_ms); abandoned, the VR runs here again ({e})",
                bound.as_millis()
            ))
        } else {
            e
        };
        resume(node, vr, &learned)?;
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
    Ok(Migrated {
        vr: vr.to_string(),
        to: to.to_string(),
        routes: snap.routes.len(),
        chunks,
        bytes_moved: ch.bytes,
        precopy_ms,
        stop_ms,
        total_ms,
        drain_ms,
        forwarded,
        forward_failed,
        last_sent_ns,
    })
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

/// What a destination's listener counted (also logged, each as it happens).
#[derive(Debug, Default)]
pub struct ListenerCounts {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Refused before the handshake: not a listed peer.
    pub not_a_peer: AtomicU64,
    /// Cut in the handshake to make room for a newer connection ([`MAX_HANDSHAKES`]).
    pub cut: AtomicU64,
    /// Failed the handshake: wrong secret, garbage, or not done within [`HANDSHAKE_DEADLINE`].
    pub unproven: AtomicU64,
    /// Refused after the handshake: [`MAX_INCOMING`] migrations were under way.
    pub busy: AtomicU64,
}

impl ListenerCounts {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// What every connection's thread shares.
struct Shared {
    cfg: MigrationConfig,
    sock: PathBuf,
    dir: PathBuf,
    counts: ListenerCounts,
    /// Migrations being received (after their handshake).
    receiving: AtomicUsize,
}

/// The destination's listener: a thread accepting connections, each served by a thread of its
/// own (a handshake under a total deadline, at most [`MAX_HANDSHAKES`] at once, then at most
/// [`MAX_INCOMING`] migrations at once), applying what it receives through the data plane's
/// own control socket `sock` (so it goes through the same single control thread as every
/// other change).
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: SocketAddr,
    pending: Arc<Pending>,
    shared: Arc<Shared>,
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
        let pending = Pending::new(MAX_HANDSHAKES);
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            sock,
            dir,
            counts: ListenerCounts::default(),
            receiving: AtomicUsize::new(0),
        });
        let (st, pend, sh) = (stop.clone(), pending.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("migrate-listen".into())
            .spawn(move || accept_loop(&l, &st, &pend, &sh))
            .map_err(|e| ControlError::io("migration thread", e))?;
        info!(address = %addr, "migration listening");
        Ok(Listener { stop, thread: Some(thread), addr, pending, shared })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it counted so far.
    pub fn counts(&self) -> &ListenerCounts {
        &self.shared.counts
    }

    /// Connections in their handshake now.
    pub fn handshaking(&self) -> usize {
        self.pending.len()
    }

    /// Migrations being received now.
    pub fn receiving(&self) -> usize {
        self.shared.receiving.load(Ordering::Acquire)
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

/// Accepts until `stop`, a thread per connection; then cuts the handshakes and waits for the
/// migrations under way.
fn accept_loop(l: &TcpListener, stop: &AtomicBool, pending: &Arc<Pending>, sh: &Arc<Shared>) {
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let (mut s, peer) = match l.accept() {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        threads.retain(|t| !t.is_finished());
        sh.counts.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_nonblocking(false);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        if !sh.cfg.peers.is_empty() && !sh.cfg.peers.contains(&peer.ip()) {
            sh.counts.not_a_peer.fetch_add(1, Ordering::Relaxed);
            warn!(peer = %peer, reason = "not a listed peer", "migration refused");
            let _ = raw_send(&mut s, ERROR, b"this host does not take VRs from your address");
            continue;
        }
        if sh.receiving.load(Ordering::Acquire) >= MAX_INCOMING {
            // Said before the handshake, so the source reads it as the answer to its
            // connection; one that gets in meanwhile is refused after it (`incoming`).
            refuse_busy(&sh.counts, peer, |why| raw_send(&mut s, ERROR, why.as_bytes()).is_ok());
            continue;
        }
        let slot = match pending.admit(&s) {
            Ok((slot, cut)) => {
                if let Some(old) = cut {
                    sh.counts.cut.fetch_add(1, Ordering::Relaxed);
                    warn!(peer = %old, reason = "the oldest of too many handshakes", "migration connection cut");
                }
                slot
            }
            Err(e) => {
                warn!(peer = %peer, error = %e, "migration refused: no descriptor to spare");
                continue;
            }
        };
        let sh = sh.clone();
        let t = std::thread::Builder::new()
            .name("migrate-in".into())
            .spawn(move || incoming(s, peer, slot, &sh));
        match t {
            Ok(t) => threads.push(t),
            Err(e) => warn!(peer = %peer, error = %e, "migration refused: no thread to serve it"),
        }
    }
    pending.cut_all();
    for t in threads {
        let _ = t.join();
    }
}

fn refuse_busy(counts: &ListenerCounts, peer: SocketAddr, say: impl FnOnce(&str) -> bool) {
    counts.busy.fetch_add(1, Ordering::Relaxed);
    warn!(peer = %peer, reason = "busy", limit = MAX_INCOMING, "migration refused");
    say(&format!("busy: {MAX_INCOMING} migrations are under way here; try again later"));
}

/// Gives a migration's place back when it ends, however it ends.
struct Receiving<'a>(&'a AtomicUsize);

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

    fn ask(&mut self, cmd: Command) -> Result<Answer, ControlError> {
        use std::io::BufRead;
        self.id += 1;
        let name = cmd.name();
        let req = crate::api::Request { v: crate::api::API_VERSION, id: self.id, cmd };
        let mut line = serde_json::to_vec(&req).expect("requests serialise");
        line.push(b'\n');
        self.w.write_all(&line).map_err(|e| ControlError::io("control socket", e))?;
        let mut reply = Vec::new();
        (&mut self.r)
            .take(crate::api::MAX_LINE as u64)
            .read_until(b'\n', &mut reply)
            .map_err(|e| ControlError::io("control socket", e))?;
        Answer::read(name, &reply).map_err(|e| match e {
            ControlError::State(m) => fail(format_args!("control socket: {m}")),
            e => e,
        })
    }
}

/// One incoming connection, on its own thread; whatever happens, the connection ends with it.
fn incoming(s: TcpStream, peer: SocketAddr, slot: Slot, sh: &Shared) {
    let mut ch = match Channel::accept(s, &sh.cfg.secret) {
        Ok(c) => c,
        Err(e) => {
            sh.counts.unproven.fetch_add(1, Ordering::Relaxed);
            warn!(peer = %peer, reason = "authentication", error = %e, "migration refused");
            return;
        }
    };
    drop(slot);
    if sh.receiving.fetch_add(1, Ordering::AcqRel) >= MAX_INCOMING {
        sh.receiving.fetch_sub(1, Ordering::AcqRel);
        refuse_busy(&sh.counts, peer, |why| ch.send(ERROR, why.as_bytes()).is_ok());
        return;
    }
    let _receiving = Receiving(&sh.receiving);
    let (sock, dir) = (&sh.sock, &sh.dir);
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
    // Migrations are received side by side: each its own file.
    static FILES: AtomicU64 = AtomicU64::new(0);
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let file = dir.join(format!(".migrate-{}-{n}.snap", std::process::id()));
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
    let arrived = crate::sys::monotonic_ns();
    let st: FinalState =
        serde_json::from_slice(&body).map_err(|e| fail(format_args!("state: {e}")))?;
    if st.vr != vr {
        return Err(fail(format_args!("state for vr {} while moving {vr}", st.vr)));
    }
    if ch.peer_spoke() {
        return Err(fail("the source gave up at the stop before this host could commit"));
    }
    let not_after_ns = st.commit_within_ms.map(|ms| arrived.saturating_add(ms * 1_000_000));
    local.ask(Command::MigrateCommit {
        vr: vr.clone(),
        neighbors: st.neighbors,
        counters: st.counters,
        not_after_ns,
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
pub fn commit(node: &mut Node, st: FinalState) -> Result<Committed, ControlError> {
    if let Some(late) = st.not_after_ns.and_then(|t| crate::sys::monotonic_ns().checked_sub(t)) {
        return Err(ControlError::State(format!(
            "migrate_commit of vr {}: {} ms past the source's bound for it (it has taken the VR back); refused",
            st.vr,
            late / 1_000_000
        )));
    }
    let (counters, _) =
        dataplane::VrCounters::from_named(st.counters.iter().map(|(k, v)| (k.as_str(), *v)));
    let neighbors = snapshot::restored_neighbors(&st.neighbors)
        .map_err(|e| ControlError::BadRequest(format!("migrate_commit of vr {}: {e}", st.vr)))?;
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
    Ok(Committed { vr: st.vr, neighbors: took, announced: sent, tunnel })
}

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
