//! The `memif` backend: shared-memory packet interfaces compatible with VPP and DPDK's
//! `net_memif`, in either role.
//!
//! A [`MemifPort`] is one memif interface. As a **server** it listens on a control socket and
//! maps the memory a client offers; as a **client** it connects, creates the memory (one memfd:
//! rings, then buffers) and the interrupt eventfds, and offers them. The wire format and the
//! ring protocol are those of interfaces.md §1 (see [`proto`] and the `queue` module).
//!
//! Contract:
//! - **Control path in [`Port::service`]**, never blocking: accepting or connecting, the lock-step
//!   handshake (each message answered by exactly one), noticing the peer's DISCONNECT, EOF or
//!   error, tearing down (unmap, close) and then listening again (server) or retrying the
//!   connection every [`MemifOptions::reconnect_interval`] (client). Until connected the port is
//!   [`PortStatus::Down`] with the reason, `rx_burst` returns 0 and `tx_burst` takes nothing.
//! - **Data path in `rx_burst`/`tx_burst`**: only ring and buffer accesses; copy mode only
//!   (zero-copy, where a client exposes its own packet memory as extra regions, is out of scope:
//!   frames are always copied between the memif buffers and the batch, once).
//! - **Queues**: `queues` rings per direction (the client settles the number, at most what each
//!   side allows). `rx_burst` drains the rings round-robin, starting one further each call;
//!   `tx_burst` puts each call's frames on one ring, the next ring on the next call, spilling to
//!   the others when that ring is full. Frames of one call keep their order; frames of different
//!   calls may take different rings, as on a multi-queue NIC.
//! - **Interrupt mode** ([`RxMode::Interrupt`]): our receive rings keep `MASK_INT` clear, so the
//!   peer signals each ring's eventfd after publishing; [`MemifPort::rx_fds`] returns those fds
//!   for a worker to `poll()`, and `rx_burst` consumes the signal when it finds a ring empty.
//!   In polling mode `MASK_INT` is set and nothing is signalled, except while a worker sleeps:
//!   [`Port::arm_wakeup`] clears it before the worker sleeps on [`Port::wakeup_fds`] and
//!   [`Port::disarm_wakeup`] sets it again (a full fence on each side, ours and our `kick`,
//!   keeps a frame published just then from going unsignalled; a peer without that fence may
//!   rarely leave one waiting for the sleeper's timeout). Either way we signal the peer's
//!   receive rings unless it set `MASK_INT` (DPDK always does).
//! - **Untrusted peer**: every field of every message and every counter and descriptor in shared
//!   memory is validated before use (`proto`, `queue`, the handshake below). A bad descriptor
//!   drops one frame (`rx_dropped`, or `tx_errors` for a bad posted buffer) and is counted in
//!   [`MemifStats`] by reason; a protocol violation (malformed message, counters out of range,
//!   bad cookie...) sends DISCONNECT with the reason, and the port goes Down and is ready for the
//!   next peer.
//!   Regions must be sealed against shrinking (see [`shm`]), so the peer cannot make our accesses
//!   fault.
//! - **Who may connect**: a socket file is guarded by its mode. An abstract name (`@name`) has
//!   none, so a server closes, unanswered, a client whose uid (`SO_PEERCRED`) is neither 0 nor
//!   its own effective uid, counts it in [`MemifStats::refused_peers`] and names it in the Down
//!   reason.
//! - One socket serves one interface here: the server answers only INITs for its own `id`.
//! - Interop notes: DPDK 22.11 connects only in `rte_eth_dev_start` (start a routeplex server
//!   first; a routeplex client simply retries until a DPDK server is started). A DPDK server
//!   advertises 255 rings in HELLO but refuses ring indices at or above its configured queue
//!   count, so give a routeplex client no more `queues` than the DPDK port has. DPDK resets the
//!   ring counters when it handles CONNECT, which is why a client posts its receive buffers only
//!   after CONNECTED.

pub mod ctl;
pub mod proto;
mod queue;
pub mod shm;
mod split;

use std::collections::VecDeque;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::{Batch, Port, PortStats, PortStatus};
use ctl::{Conn, Listener, Recv, SocketAddr};
use proto::{AddRing, Hello, Init, Msg, ADD_RING_FLAG_C2S, COOKIE, VERSION};
use queue::{Mem, Ring, RxQueue, Side, TxQueue};
use shm::{EventFd, Region};
pub use split::MemifQueue;

/// The regions of one connection, shared by the queues of a split port
/// ([`MemifPort::split`]); unmapped when the last holder drops them.
pub(crate) struct SharedRegions(Vec<Region>);

// SAFETY: a `Region` is memory another process writes while we read and write it: every
// access goes through raw pointers (volatile loads and stores, atomics, byte copies into and
// out of private memory), never a Rust reference into the mapping, and nothing read is trusted
// before it is checked. Sharing the regions between the queues of a split port adds our other
// threads as writers of the same kind: each queue writes only its own rings' counters and
// descriptors and the buffers they point at. A peer that points two rings' descriptors at one
// buffer makes two of our queues copy into it at once, which is no worse than the peer
// writing it meanwhile: the frame is garbage for the peer, and we keep only private copies.
unsafe impl Sync for SharedRegions {}

impl std::ops::Deref for SharedRegions {
    type Target = [Region];
    fn deref(&self) -> &[Region] {
        &self.0
    }
}

/// The most regions a server accepts from a client (index 0..=63).
pub const MAX_REGIONS: u16 = 64;
/// The most rings per direction.
pub const MAX_QUEUES: u16 = 256;

/// Which end of the control socket we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Listens; maps the client's memory (VPP "master").
    Server,
    /// Connects; creates the memory (VPP "slave").
    Client,
}

/// How the port learns that frames arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxMode {
    /// The worker polls; the peer is told (`MASK_INT`) not to signal.
    #[default]
    Polling,
    /// The peer signals each receive ring's eventfd ([`MemifPort::rx_fds`]).
    Interrupt,
}

/// The memif interface mode. Only ethernet frames are carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InterfaceMode {
    /// Ethernet frames (mode 0).
    #[default]
    Ethernet,
}

/// How to open a memif port.
#[derive(Clone, Debug)]
pub struct MemifOptions {
    /// Control socket: a file path, or `@name` / `abstract:name` for an abstract socket.
    pub socket: String,
    /// Interface id; client and server must agree.
    pub id: u32,
    /// Shared secret (at most 24 bytes); the server refuses clients that do not present it.
    pub secret: Option<String>,
    /// Interface mode.
    pub mode: InterfaceMode,
    /// Rings per direction, 1..=256 (the number actually used is settled at connect).
    pub queues: u16,
    /// log2 of the slots per ring, 1..=14 (default 10: 1024 slots).
    pub log2_ring_size: u8,
    /// Bytes per shared buffer (client role), 64..=65535 (default 2048). Longer frames are
    /// chained over several buffers.
    pub buffer_size: u32,
    /// Polling or interrupt.
    pub rx_mode: RxMode,
    /// Port name for logs, also sent to the peer.
    pub name: String,
    /// Client: pause between connection attempts.
    pub reconnect_interval: Duration,
    /// Either role: a handshake not finished within this long is abandoned.
    pub handshake_timeout: Duration,
}

impl MemifOptions {
    /// Defaults around `socket`: id 0, no secret, one queue pair, 1024 slots of 2048 bytes,
    /// polling, reconnect every 500 ms, handshake timeout 5 s.
    pub fn new(socket: impl Into<String>) -> MemifOptions {
        MemifOptions {
            socket: socket.into(),
            id: 0,
            secret: None,
            mode: InterfaceMode::Ethernet,
            queues: 1,
            log2_ring_size: 10,
            buffer_size: 2048,
            rx_mode: RxMode::Polling,
            name: String::from("memif"),
            reconnect_interval: Duration::from_millis(500),
            handshake_timeout: Duration::from_secs(5),
        }
    }

    fn check(&self) -> io::Result<()> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if !(1..=MAX_QUEUES).contains(&self.queues) {
            return Err(invalid(format!("queues {} not in 1..={MAX_QUEUES}", self.queues)));
        }
        if !(1..=proto::MAX_LOG2_RING_SIZE).contains(&self.log2_ring_size) {
            return Err(invalid(format!("log2_ring_size {} not in 1..=14", self.log2_ring_size)));
        }
        if !(64..=65535).contains(&self.buffer_size) {
            return Err(invalid(format!("buffer_size {} not in 64..=65535", self.buffer_size)));
        }
        if self.secret.as_ref().is_some_and(|s| s.len() > proto::SECRET_SIZE) {
            return Err(invalid("secret longer than 24 bytes".to_string()));
        }
        // Buffer offsets are u32 in descriptors: the client's region must stay below 4 GiB.
        let size = region_size(
            self.queues as usize,
            self.queues as usize,
            self.log2_ring_size,
            self.buffer_size,
        );
        if size > u32::MAX as usize {
            return Err(invalid(format!(
                "queues x ring size x buffer size needs {size} bytes, over 4 GiB"
            )));
        }
        Ok(())
    }
}

/// Size of the client's region 0: all rings, then all buffers (interfaces.md §1.5).
fn region_size(c2s: usize, s2c: usize, log2: u8, bsize: u32) -> usize {
    let rings = c2s + s2c;
    rings * proto::ring_bytes(log2) + rings * (1usize << log2) * bsize as usize
}

/// memif-specific counters, beside [`PortStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemifStats {
    /// Handshakes completed.
    pub connects: u64,
    /// Connections (complete or not) that ended, for any reason.
    pub disconnects: u64,
    /// Peers we disconnected for breaking the protocol (a subset of `disconnects`).
    pub protocol_errors: u64,
    /// Received frames dropped for a bad descriptor: region index, bounds, length, or empty.
    pub bad_desc: u64,
    /// Received frames longer than a batch buffer takes.
    pub too_long: u64,
    /// Received chains cut short by the end of what the peer published.
    /// (`bad_desc + too_long + bad_chain` is the port's `rx_dropped`.)
    pub bad_chain: u64,
    /// Server role: buffers the client posted that lie outside its regions or hold nothing;
    /// each costs the frame that met it (counted in `tx_errors`).
    pub bad_posted: u64,
    /// Server role on an abstract socket: clients closed at once because they run as neither
    /// root nor this process's user (`SO_PEERCRED`). An abstract name has no file mode to keep
    /// other users out, as a socket file's has.
    pub refused_peers: u64,
}

/// The mapped memory and rings of one connection.
struct Data {
    regions: std::sync::Arc<SharedRegions>,
    sizes: Vec<usize>,
    rx: Vec<RxQueue>,
    tx: Vec<TxQueue>,
    bsize: u32,
}

/// A ring the client announced, not yet mapped.
struct PendingRing {
    region: u16,
    offset: u32,
    log2: u8,
    event: EventFd,
}

/// Server side of a handshake in progress.
#[derive(Default)]
struct ServerSetup {
    init: bool,
    regions: Vec<Region>,
    c2s: Vec<PendingRing>,
    s2c: Vec<PendingRing>,
}

/// What fd goes with a queued client message.
#[derive(Clone, Copy)]
enum FdRef {
    None,
    Region,
    Tx(usize),
    Rx(usize),
}

enum Phase {
    /// No control connection: the server listens, the client waits to retry.
    Idle,
    /// Server: HELLO sent, receiving the client's description.
    Server(Box<ServerSetup>),
    /// Client: waiting for HELLO (`outbox` empty and no data yet), then sending one queued
    /// message per ACK.
    Client { outbox: VecDeque<(Msg, FdRef)> },
    /// Handshake done: the rings are live.
    Connected,
}

/// Why a connection ends, as decided while handling a message.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The peer said DISCONNECT, with this reason.
    Peer(String),
    /// The peer broke the protocol: we send DISCONNECT with this reason.
    Reject(String),
}

impl From<String> for Stop {
    fn from(s: String) -> Stop {
        Stop::Reject(s)
    }
}
impl From<&str> for Stop {
    fn from(s: &str) -> Stop {
        Stop::Reject(s.to_string())
    }
}

/// One memif interface, in either role. See the module documentation.
pub struct MemifPort {
    name: String,
    role: Role,
    opts: MemifOptions,
    addr: SocketAddr,
    listener: Option<Listener>,
    ctl: Option<Conn>,
    phase: Phase,
    data: Option<Data>,
    /// Set by the data path when the peer broke the ring protocol; acted on in `service`.
    fault: Option<&'static str>,
    deadline: Instant,
    retry_at: Instant,
    connect_error: Option<String>,
    last_reason: Option<String>,
    status: PortStatus,
    peer_name: String,
    stats: PortStats,
    mstats: MemifStats,
    rx_next: usize,
    tx_next: usize,
}

impl MemifPort {
    /// Opens a server: binds and listens on the socket now (an error names the socket and the
    /// step), then accepts a client in [`Port::service`].
    pub fn server(opts: MemifOptions) -> io::Result<MemifPort> {
        let mut port = Self::new(Role::Server, opts)?;
        let listener = Listener::bind(&port.addr).map_err(|e| port.open_error(e))?;
        port.listener = Some(listener);
        port.refresh_status();
        Ok(port)
    }

    /// Opens a client: validates the options and tries to connect at once. A server that is not
    /// there yet is not an error: the port stays Down and retries from [`Port::service`].
    pub fn client(opts: MemifOptions) -> io::Result<MemifPort> {
        let mut port = Self::new(Role::Client, opts)?;
        port.try_connect(Instant::now());
        Ok(port)
    }

    fn new(role: Role, opts: MemifOptions) -> io::Result<MemifPort> {
        let who = match role {
            Role::Server => "server",
            Role::Client => "client",
        };
        let addr = SocketAddr::parse(&opts.socket).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("memif {who} on {:?}: socket address: {e}", opts.socket),
            )
        })?;
        opts.check().map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memif {who} on {addr}: options: {e}"),
            )
        })?;
        let now = Instant::now();
        Ok(MemifPort {
            name: opts.name.clone(),
            role,
            opts,
            addr,
            listener: None,
            ctl: None,
            phase: Phase::Idle,
            data: None,
            fault: None,
            deadline: now,
            retry_at: now,
            connect_error: None,
            last_reason: None,
            status: PortStatus::Down(String::new()),
            peer_name: String::new(),
            stats: PortStats::default(),
            mstats: MemifStats::default(),
            rx_next: 0,
            tx_next: 0,
        })
    }

    fn open_error(&self, e: io::Error) -> io::Error {
        io::Error::new(e.kind(), format!("memif server on {}: {e}", self.addr))
    }

    /// The role this port plays.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The control socket address.
    pub fn socket(&self) -> &SocketAddr {
        &self.addr
    }

    /// memif-specific counters.
    pub fn memif_stats(&self) -> MemifStats {
        self.mstats
    }

    /// The name the peer gave in INIT (server) or HELLO (client), sanitised; empty when none.
    pub fn peer_name(&self) -> &str {
        &self.peer_name
    }

    /// Rings in use per direction, `(rx, tx)`; `(0, 0)` while not connected.
    pub fn queues(&self) -> (usize, usize) {
        match (&self.phase, &self.data) {
            (Phase::Connected, Some(d)) => (d.rx.len(), d.tx.len()),
            _ => (0, 0),
        }
    }

    /// The eventfds of the receive rings, for a worker to `poll()` in interrupt mode (they are
    /// signalled only in that mode). They change on every reconnect and are empty while down:
    /// ask again after the status changes.
    pub fn rx_fds(&self) -> Vec<RawFd> {
        match (&self.phase, &self.data) {
            (Phase::Connected, Some(d)) => d.rx.iter().map(|q| q.ring.event.as_raw_fd()).collect(),
            _ => Vec::new(),
        }
    }

    /// The control socket fds (listener and connection), for a worker that wants to sleep in
    /// `poll()` until [`Port::service`] has work.
    pub fn ctl_fds(&self) -> Vec<RawFd> {
        let l = self.listener.as_ref().map(|l| l.as_raw_fd());
        let c = self.ctl.as_ref().map(|c| c.as_raw_fd());
        l.into_iter().chain(c).collect()
    }

    /// The listener's and the connection's fds, -1 for none.
    fn ctl_fds_pair(&self) -> [RawFd; 2] {
        let l = self.listener.as_ref().map_or(-1, |l| l.as_raw_fd());
        let c = self.ctl.as_ref().map_or(-1, |c| c.as_raw_fd());
        [l, c]
    }

    fn refresh_status(&mut self) {
        let what = match (&self.phase, self.role) {
            (Phase::Connected, _) => {
                self.status = PortStatus::Up;
                return;
            }
            (Phase::Idle, Role::Server) => format!("waiting for a client on {}", self.addr),
            (Phase::Idle, Role::Client) => {
                let every = self.opts.reconnect_interval.as_millis();
                match &self.connect_error {
                    Some(e) => {
                        format!("connecting to {}: {e} (retrying every {every} ms)", self.addr)
                    }
                    None => format!("reconnecting to {} in {every} ms", self.addr),
                }
            }
            (_, Role::Server) => format!("handshake with a client on {} in progress", self.addr),
            (_, Role::Client) => format!("handshake with the server on {} in progress", self.addr),
        };
        self.status = PortStatus::Down(match &self.last_reason {
            Some(r) => format!("{r}; {what}"),
            None => what,
        });
    }

    // ---- connection life cycle ----

    fn try_connect(&mut self, now: Instant) {
        match Conn::connect(&self.addr) {
            Ok(c) => {
                self.ctl = Some(c);
                self.phase = Phase::Client { outbox: VecDeque::new() };
                self.deadline = now + self.opts.handshake_timeout;
            }
            Err(e) => {
                self.connect_error = Some(e.to_string());
                self.retry_at = now + self.opts.reconnect_interval;
            }
        }
        self.refresh_status();
    }

    fn accept(&mut self, now: Instant) {
        let Some(l) = &self.listener else { return };
        let mut changed = false;
        for _ in 0..8 {
            let c = match l.accept() {
                Ok(Some(c)) => c,
                _ => break,
            };
            if let Err(why) = self.admit(&c) {
                // Closed without a word: the refused client learns nothing.
                drop(c);
                self.mstats.refused_peers += 1;
                self.last_reason = Some(why.to_string());
                changed = true;
                continue;
            }
            if self.ctl.is_some() {
                // One peer per interface: tell the newcomer instead of leaving it hanging.
                let _ = c.send(&Msg::disconnect("Already connected").encode(), None);
                continue;
            }
            let hello = Msg::Hello(Hello {
                name: proto::fixed(b"routeplex"),
                min_version: VERSION,
                max_version: VERSION,
                max_region: MAX_REGIONS - 1,
                max_s2c_ring: self.opts.queues - 1,
                max_c2s_ring: self.opts.queues - 1,
                max_log2_ring_size: self.opts.log2_ring_size,
            });
            if c.send(&hello.encode(), None).is_err() {
                continue;
            }
            self.ctl = Some(c);
            self.phase = Phase::Server(Box::default());
            self.deadline = now + self.opts.handshake_timeout;
            changed = true;
        }
        if changed {
            self.refresh_status();
        }
    }

    /// Whether a client that connected may talk to us. A socket file is guarded by its mode;
    /// an abstract name by nothing, so there the client must run as root or as our own
    /// effective user, by the credentials the kernel recorded at connect(2).
    fn admit(&self, c: &Conn) -> io::Result<()> {
        if !matches!(self.addr, SocketAddr::Abstract(_)) {
            return Ok(());
        }
        let ours = crate::sys::euid();
        match c.peer_uid() {
            Ok(uid) if uid == 0 || uid == ours => Ok(()),
            Ok(uid) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refused a client with uid {uid} on {} (an abstract socket admits only uid 0 and {ours})",
                    self.addr
                ),
            )),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("refused a client on {}: SO_PEERCRED: {e}", self.addr),
            )),
        }
    }

    /// Ends the connection: unmaps, closes, and gets ready for the next peer.
    fn teardown(&mut self, reason: String) {
        if self.ctl.is_some() {
            self.mstats.disconnects += 1;
        }
        self.ctl = None;
        self.data = None;
        self.fault = None;
        self.phase = Phase::Idle;
        self.last_reason = Some(reason);
        self.retry_at = Instant::now() + self.opts.reconnect_interval;
        self.connect_error = None;
        self.refresh_status();
    }

    /// The peer broke the protocol: tell it why, then tear down.
    fn reject(&mut self, reason: &str) {
        if let Some(c) = &self.ctl {
            let _ = c.send(&Msg::disconnect(reason).encode(), None);
        }
        self.mstats.protocol_errors += 1;
        self.teardown(format!("disconnected the peer: {reason}"));
    }

    fn send(&mut self, msg: &Msg, fd: Option<BorrowedFd<'_>>) -> Result<(), Stop> {
        let c = self.ctl.as_ref().ok_or("no connection")?;
        c.send(&msg.encode(), fd).map_err(|e| Stop::Reject(format!("control socket send: {e}")))
    }

    // ---- messages ----

    /// Handles one received datagram of `len` bytes.
    fn on_message(
        &mut self,
        buf: &[u8],
        len: usize,
        fd: Option<OwnedFd>,
        extra_fds: bool,
    ) -> Result<(), Stop> {
        if len != proto::MSG_SIZE {
            return Err(proto::ProtoError::Size(len).to_string().into());
        }
        let msg = Msg::decode(buf).map_err(|e| e.to_string())?;
        if extra_fds {
            return Err("more than one fd in a message".into());
        }
        if let Msg::Disconnect { reason, .. } = &msg {
            return Err(Stop::Peer(proto::text(reason)));
        }
        match self.role {
            Role::Server => self.on_server_message(msg, fd),
            Role::Client => self.on_client_message(msg),
        }
    }

    fn on_server_message(&mut self, msg: Msg, fd: Option<OwnedFd>) -> Result<(), Stop> {
        let Phase::Server(setup) = &mut self.phase else {
            return Err(format!("unexpected message type {} after connect", msg.type_id()).into());
        };
        match msg {
            Msg::Init(i) if !setup.init => {
                check_init(&i, &self.opts)?;
                setup.init = true;
                self.peer_name = proto::text(&i.name);
                Ok(self.send(&Msg::Ack, None)?)
            }
            Msg::AddRegion { index, size } if setup.init => {
                let fd = fd.ok_or("missing region fd")?;
                if index as usize != setup.regions.len() || index >= MAX_REGIONS {
                    return Err("invalid region index".into());
                }
                let r = Region::map_peer(fd, size)?;
                setup.regions.push(r);
                Ok(self.send(&Msg::Ack, None)?)
            }
            Msg::AddRing(a) if setup.init => {
                let fd = fd.ok_or("missing interrupt fd")?;
                let sizes: Vec<usize> = setup.regions.iter().map(Region::len).collect();
                let list =
                    if a.flags & ADD_RING_FLAG_C2S != 0 { &mut setup.c2s } else { &mut setup.s2c };
                check_add_ring(&a, list.len(), self.opts.queues, &sizes)?;
                let event = EventFd::from_peer(fd)?;
                list.push(PendingRing {
                    region: a.region,
                    offset: a.offset,
                    log2: a.log2_ring_size,
                    event,
                });
                Ok(self.send(&Msg::Ack, None)?)
            }
            Msg::Connect { .. } if setup.init => {
                let setup = std::mem::take(setup);
                let data = self.server_data(*setup)?;
                self.data = Some(data);
                let name = proto::fixed(self.name.as_bytes());
                self.send(&Msg::Connected { if_name: name }, None)?;
                self.connected();
                Ok(())
            }
            m => Err(format!("unexpected message type {} during handshake", m.type_id()).into()),
        }
    }

    /// CONNECT: every ring announced is checked (cookie) and becomes a queue.
    fn server_data(&self, setup: ServerSetup) -> Result<Data, Stop> {
        if setup.regions.is_empty() || setup.c2s.is_empty() || setup.s2c.is_empty() {
            return Err("connect before a region and a ring in each direction".into());
        }
        let sizes: Vec<usize> = setup.regions.iter().map(Region::len).collect();
        let polling = self.opts.rx_mode == RxMode::Polling;
        let ring = |p: PendingRing| -> Result<Ring, Stop> {
            let r = &setup.regions[p.region as usize];
            let off = p.offset as usize;
            if r.read_u32(off + proto::ring_off::COOKIE) != Some(COOKIE) {
                return Err("wrong ring cookie".into());
            }
            Ok(Ring { region: p.region as usize, off, size: 1 << p.log2, event: p.event })
        };
        let mut rx = Vec::with_capacity(setup.c2s.len());
        for p in setup.c2s {
            let ring = ring(p)?;
            let r = &setup.regions[ring.region];
            ring.set_mask_int(r, polling);
            // We own tail; start it where we start reading (the client zeroed both).
            r.atomic_u16(ring.off + proto::ring_off::TAIL)
                .ok_or("ring outside its region")?
                .store(0, std::sync::atomic::Ordering::Release);
            rx.push(RxQueue {
                ring,
                side: Side::Server,
                last: 0,
                head: 0,
                buf_base: 0,
                interrupt: !polling,
            });
        }
        let mut tx = Vec::with_capacity(setup.s2c.len());
        for p in setup.s2c {
            let ring = ring(p)?;
            let r = &setup.regions[ring.region];
            r.atomic_u16(ring.off + proto::ring_off::TAIL)
                .ok_or("ring outside its region")?
                .store(0, std::sync::atomic::Ordering::Release);
            tx.push(TxQueue { ring, side: Side::Server, pos: 0, buf_base: 0 });
        }
        let regions = std::sync::Arc::new(SharedRegions(setup.regions));
        Ok(Data { regions, sizes, rx, tx, bsize: self.opts.buffer_size })
    }

    fn on_client_message(&mut self, msg: Msg) -> Result<(), Stop> {
        let pending = match &self.phase {
            Phase::Client { outbox } => outbox.len(),
            _ => {
                return Err(
                    format!("unexpected message type {} after connect", msg.type_id()).into()
                )
            }
        };
        let greeted = self.data.is_some();
        match msg {
            Msg::Hello(h) if !greeted => {
                if h.min_version > VERSION || h.max_version < VERSION {
                    return Err("incompatible memif version".into());
                }
                self.peer_name = proto::text(&h.name);
                let (data, queued) = self.client_data(&h)?;
                self.data = Some(data);
                self.phase = Phase::Client { outbox: queued };
                Ok(self.send_next()?)
            }
            Msg::Ack if greeted && pending > 0 => Ok(self.send_next()?),
            Msg::Connected { .. } if greeted && pending == 0 => {
                let d = self.data.as_mut().expect("greeted");
                let mem = Mem { regions: &d.regions, sizes: &d.sizes, bsize: d.bsize };
                for q in &mut d.rx {
                    // The server may have zeroed the counters at CONNECT (DPDK does), so the
                    // buffers are posted only now.
                    q.last = 0;
                    q.head = 0;
                    q.ring.set_mask_int(&mem.regions[0], !q.interrupt);
                    q.refill(&mem)?;
                }
                for q in &mut d.tx {
                    q.pos = 0;
                }
                self.connected();
                Ok(())
            }
            m => Err(format!("unexpected message type {} during handshake", m.type_id()).into()),
        }
    }

    /// Sends the next queued handshake message (lock-step: one per message received).
    fn send_next(&mut self) -> Result<(), Stop> {
        let Phase::Client { outbox } = &mut self.phase else { return Ok(()) };
        let Some((msg, fdref)) = outbox.pop_front() else { return Ok(()) };
        let d = self.data.as_ref().expect("client data exists while sending");
        let fd = match fdref {
            FdRef::None => None,
            FdRef::Region => Some(d.regions[0].fd()),
            FdRef::Tx(i) => Some(d.tx[i].ring.event.fd()),
            FdRef::Rx(i) => Some(d.rx[i].ring.event.fd()),
        };
        let c = self.ctl.as_ref().ok_or("no connection")?;
        c.send(&msg.encode(), fd).map_err(|e| Stop::Reject(format!("control socket send: {e}")))
    }

    /// HELLO: settle sizes, create region 0 and the rings, queue INIT..CONNECT.
    fn client_data(&self, h: &Hello) -> Result<(Data, VecDeque<(Msg, FdRef)>), Stop> {
        let q = self.opts.queues as u32;
        let n_c2s = (h.max_c2s_ring as u32 + 1).min(q) as usize;
        let n_s2c = (h.max_s2c_ring as u32 + 1).min(q) as usize;
        let log2 = h.max_log2_ring_size.min(self.opts.log2_ring_size);
        let bsize = self.opts.buffer_size;
        let size = region_size(n_c2s, n_s2c, log2, bsize);
        let region = Region::create("memif_region_0", size)
            .map_err(|e| Stop::Reject(format!("region: {e}")))?;
        let region_len = region.len();
        let ring_sz = proto::ring_bytes(log2);
        let buf0 = (n_c2s + n_s2c) * ring_sz;
        let slots = 1usize << log2;
        let polling = self.opts.rx_mode == RxMode::Polling;
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        let mut out = VecDeque::new();
        let secret = self.opts.secret.as_deref().unwrap_or("").as_bytes();
        out.push_back((
            Msg::Init(Init {
                version: VERSION,
                id: self.opts.id,
                mode: 0,
                secret: proto::fixed_exact(secret),
                name: proto::fixed(self.name.as_bytes()),
            }),
            FdRef::None,
        ));
        out.push_back((Msg::AddRegion { index: 0, size: size as u64 }, FdRef::Region));
        for g in 0..n_c2s + n_s2c {
            let c2s = g < n_c2s;
            let off = g * ring_sz;
            let buf_base = buf0 + g * slots * bsize as usize;
            // A fresh memfd is zero: write cookie and, for every slot, a descriptor pointing at
            // its own buffer.
            region.write_u32(off + proto::ring_off::COOKIE, COOKIE);
            for j in 0..slots {
                let at = off + proto::RING_HEADER_SIZE + j * proto::DESC_SIZE;
                region.write_u32(at + proto::desc_off::LENGTH, bsize);
                region.write_u32(
                    at + proto::desc_off::OFFSET,
                    (buf_base + j * bsize as usize) as u32,
                );
            }
            let ring = Ring {
                region: 0,
                off,
                size: slots as u16,
                event: EventFd::new().map_err(|e| Stop::Reject(e.to_string()))?,
            };
            if c2s {
                out.push_back((
                    Msg::AddRing(add_ring(ADD_RING_FLAG_C2S, tx.len(), off, log2)),
                    FdRef::Tx(tx.len()),
                ));
                tx.push(TxQueue { ring, side: Side::Client, pos: 0, buf_base });
            } else {
                ring.set_mask_int(&region, polling);
                out.push_back((
                    Msg::AddRing(add_ring(0, rx.len(), off, log2)),
                    FdRef::Rx(rx.len()),
                ));
                rx.push(RxQueue {
                    ring,
                    side: Side::Client,
                    last: 0,
                    head: 0,
                    buf_base,
                    interrupt: !polling,
                });
            }
        }
        out.push_back((Msg::Connect { if_name: proto::fixed(self.name.as_bytes()) }, FdRef::None));
        let regions = std::sync::Arc::new(SharedRegions(vec![region]));
        let data = Data { sizes: vec![region_len], regions, rx, tx, bsize };
        Ok((data, out))
    }

    fn connected(&mut self) {
        self.phase = Phase::Connected;
        self.mstats.connects += 1;
        self.last_reason = None;
        self.rx_next = 0;
        self.tx_next = 0;
        self.refresh_status();
    }
}

fn add_ring(flags: u16, index: usize, off: usize, log2: u8) -> AddRing {
    AddRing {
        flags,
        index: index as u16,
        region: 0,
        offset: off as u32,
        log2_ring_size: log2,
        private_hdr_size: 0,
    }
}

/// INIT from a client: version, id, mode and secret, with DPDK's reasons.
fn check_init(i: &Init, opts: &MemifOptions) -> Result<(), Stop> {
    if i.version != VERSION {
        return Err("incompatible memif version".into());
    }
    if i.id != opts.id {
        return Err("ID not found".into());
    }
    if i.mode != 0 {
        return Err("only ethernet mode supported".into());
    }
    if let Some(s) = &opts.secret {
        if !s.is_empty() {
            if i.secret[0] == 0 {
                return Err("secret required".into());
            }
            // Compared up to the first NUL, as DPDK's strncmp does.
            let theirs = i.secret.split(|&b| b == 0).next().unwrap_or(&[]);
            if theirs != s.as_bytes() {
                return Err("incorrect secret".into());
            }
        }
    }
    Ok(())
}

/// ADD_RING from a client: index in order and within our limit, region known, ring inside it,
/// aligned for its counters, size within limits, no private header.
fn check_add_ring(
    a: &AddRing,
    seen: usize,
    queues: u16,
    region_sizes: &[usize],
) -> Result<(), Stop> {
    if a.index as usize != seen || a.index >= queues {
        return Err("invalid ring index".into());
    }
    let size = *region_sizes.get(a.region as usize).ok_or("invalid ring region")?;
    if a.log2_ring_size > proto::MAX_LOG2_RING_SIZE {
        return Err("ring size too large".into());
    }
    if a.private_hdr_size != 0 {
        return Err("private header not supported".into());
    }
    if a.offset & 3 != 0 {
        return Err("misaligned ring".into());
    }
    if a.offset as usize + proto::ring_bytes(a.log2_ring_size) > size {
        return Err("ring outside its region".into());
    }
    Ok(())
}

impl Port for MemifPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        if !matches!(self.phase, Phase::Connected) || self.fault.is_some() {
            return 0;
        }
        let Some(d) = &mut self.data else { return 0 };
        let mem = Mem { regions: &d.regions, sizes: &d.sizes, bsize: d.bsize };
        let nq = d.rx.len();
        let start = self.rx_next % nq;
        self.rx_next = start + 1;
        let mut got = 0;
        for k in 0..nq {
            if batch.room() == 0 {
                break;
            }
            let q = &mut d.rx[(start + k) % nq];
            match q.rx(&mem, batch, &mut self.stats, &mut self.mstats) {
                Ok(n) => got += n,
                Err(f) => {
                    self.fault = Some(f);
                    break;
                }
            }
        }
        got
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        if !matches!(self.phase, Phase::Connected) || self.fault.is_some() {
            return 0;
        }
        let Some(d) = &mut self.data else { return 0 };
        let mem = Mem { regions: &d.regions, sizes: &d.sizes, bsize: d.bsize };
        let nq = d.tx.len();
        let start = self.tx_next % nq;
        self.tx_next = start + 1;
        let mut taken = 0;
        for k in 0..nq {
            if taken == sel.len() {
                break;
            }
            let q = &mut d.tx[(start + k) % nq];
            match q.tx(&mem, batch, &sel[taken..], &mut self.stats, &mut self.mstats) {
                Ok(n) => taken += n,
                Err(f) => {
                    self.fault = Some(f);
                    break;
                }
            }
        }
        self.stats.tx_full += (sel.len() - taken) as u64;
        taken
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn status(&self) -> PortStatus {
        self.status.clone()
    }

    /// The control socket (listener and connection: `service` has work when they are
    /// readable) and, while connected, each receive ring's eventfd, which the peer signals
    /// between [`Port::arm_wakeup`] and [`Port::disarm_wakeup`] (always, in interrupt mode).
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.listener.as_ref().map(|l| l.as_raw_fd()));
        out.extend(self.ctl.as_ref().map(|c| c.as_raw_fd()));
        if let (Phase::Connected, Some(d)) = (&self.phase, &self.data) {
            out.extend(d.rx.iter().map(|q| q.ring.event.as_raw_fd()));
        }
        true
    }

    fn arm_wakeup(&mut self) -> bool {
        if !matches!(self.phase, Phase::Connected) {
            return false;
        }
        if self.fault.is_some() {
            // `service` must act on it: no sleeping until it has.
            return true;
        }
        let Some(d) = &mut self.data else { return false };
        let mem = Mem { regions: &d.regions, sizes: &d.sizes, bsize: d.bsize };
        let mut waiting = false;
        for q in &mut d.rx {
            waiting |= q.arm(&mem);
        }
        waiting
    }

    fn disarm_wakeup(&mut self) {
        if !matches!(self.phase, Phase::Connected) {
            return;
        }
        let Some(d) = &mut self.data else { return };
        let mem = Mem { regions: &d.regions, sizes: &d.sizes, bsize: d.bsize };
        for q in &mut d.rx {
            q.disarm(&mem);
        }
    }

    fn service(&mut self) {
        let now = Instant::now();
        if let Some(f) = self.fault.take() {
            self.reject(f);
        }
        // Read before accepting, so that a peer that just left is noticed before its successor.
        for _ in 0..64 {
            let Some(c) = &self.ctl else { break };
            match c.recv() {
                Ok(Recv::WouldBlock) => break,
                Ok(Recv::Eof) => {
                    self.teardown("peer disconnected: connection closed without DISCONNECT".into());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    // What a peer that closes with our messages unread leaves behind.
                    self.teardown(
                        "peer disconnected: connection closed without DISCONNECT (reset)".into(),
                    );
                    break;
                }
                Err(e) => {
                    self.teardown(format!("peer disconnected: control socket error: {e}"));
                    break;
                }
                Ok(Recv::Msg { buf, len, fd, extra_fds }) => {
                    match self.on_message(&buf, len, fd, extra_fds) {
                        Ok(()) => {}
                        Err(Stop::Peer(r)) => {
                            self.teardown(format!("peer disconnected: {r}"));
                            break;
                        }
                        Err(Stop::Reject(r)) => {
                            self.reject(&r);
                            break;
                        }
                    }
                }
            }
        }
        let handshaking = matches!(self.phase, Phase::Server(_) | Phase::Client { .. });
        if handshaking && now > self.deadline {
            self.reject("handshake timed out");
        }
        match self.role {
            Role::Server => self.accept(now),
            Role::Client => {
                if self.ctl.is_none() && now >= self.retry_at {
                    self.try_connect(now);
                }
            }
        }
    }
}

impl Drop for MemifPort {
    fn drop(&mut self) {
        if let Some(c) = &self.ctl {
            let _ = c.send(&Msg::disconnect("interface closed").encode(), None);
        }
    }
}

impl std::fmt::Debug for MemifPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemifPort")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("socket", &self.addr)
            .field("status", &self.status)
            .finish()
    }
}

/// For [`crate::fuzzing::memif`]: one receive ring and one transmit ring in a region whose every
/// byte came from the peer (`data[2..]` from offset 0: ring headers, descriptors, buffers), on
/// the side `data[1]` picks, each ring of `1 << (data[0] % 8)` slots; the receive ring is read
/// into a batch, then three frames are sent on the transmit ring.
pub(crate) fn fuzz_rings(data: &[u8]) {
    const LEN: usize = 64 << 10;
    const TX_RING: usize = 0x1000;
    const BUFS: usize = 0x2000;
    let (Some(&d0), Some(&d1)) = (data.first(), data.get(1)) else { return };
    let size = 1u16 << (d0 % 8);
    let side = if d1 & 1 == 0 { Side::Server } else { Side::Client };
    let region = shm::Region::create("routeplex-fuzz", LEN).expect("memfd region");
    region.write_bytes(0, &data[2..][..(data.len() - 2).min(LEN)]);
    let regions = [region];
    let mem = Mem { regions: &regions, sizes: &[LEN], bsize: 2048 };
    let ring = |off| Ring { region: 0, off, size, event: shm::EventFd::new().expect("eventfd") };
    let mut rx =
        RxQueue { ring: ring(0), side, last: 0, head: size, buf_base: BUFS, interrupt: false };
    let (mut stats, mut extra) = (PortStats::default(), MemifStats::default());
    let mut batch = Batch::new(64);
    if let Ok(n) = rx.rx(&mem, &mut batch, &mut stats, &mut extra) {
        assert!(n <= 64 && batch.len() == n, "{n} frames in a batch of 64");
        assert!(batch.packets().iter().all(|b| b.len() <= crate::MAX_FRAME));
    }
    let mut tx = TxQueue { ring: ring(TX_RING), side, pos: 0, buf_base: BUFS };
    let mut out = Batch::new(3);
    for len in [60, 1514, crate::MAX_FRAME] {
        assert!(out.push_copy(&vec![0x5a; len]));
    }
    if let Ok(n) = tx.tx(&mem, &mut out, &[0, 1, 2], &mut stats, &mut extra) {
        assert!(n <= 3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_layout_matches_dpdk() {
        // DPDK copy mode, 1 ring each way, rsize 10, bsize 2048.
        assert_eq!(region_size(1, 1, 10, 2048), 2 * (128 + 16 * 1024) + 2 * 1024 * 2048);
    }

    #[test]
    fn options_are_checked() {
        let ok = MemifOptions::new("/tmp/x.sock");
        assert!(ok.check().is_ok());
        let bad = |f: fn(&mut MemifOptions)| {
            let mut o = ok.clone();
            f(&mut o);
            o.check().unwrap_err().to_string()
        };
        assert!(bad(|o| o.queues = 0).contains("queues"));
        assert!(bad(|o| o.log2_ring_size = 15).contains("log2_ring_size"));
        assert!(bad(|o| o.buffer_size = 63).contains("buffer_size"));
        assert!(bad(|o| o.secret = Some("x".repeat(25))).contains("secret"));
        assert!(bad(|o| {
            o.queues = 256;
            o.log2_ring_size = 14;
        })
        .contains("4 GiB"));
    }

    #[test]
    fn init_checks() {
        let mut o = MemifOptions::new("@x");
        o.id = 3;
        let good = Init {
            version: VERSION,
            id: 3,
            mode: 0,
            secret: [0; proto::SECRET_SIZE],
            name: [0; proto::NAME_SIZE],
        };
        assert_eq!(check_init(&good, &o), Ok(()));
        let v = Init { version: 0x0201, ..good.clone() };
        assert_eq!(check_init(&v, &o).unwrap_err(), Stop::from("incompatible memif version"));
        let i = Init { id: 4, ..good.clone() };
        assert_eq!(check_init(&i, &o).unwrap_err(), Stop::from("ID not found"));
        let m = Init { mode: 2, ..good.clone() };
        assert_eq!(check_init(&m, &o).unwrap_err(), Stop::from("only ethernet mode supported"));
        o.secret = Some("s".repeat(24));
        assert_eq!(check_init(&good, &o).unwrap_err(), Stop::from("secret required"));
        let s = Init { secret: proto::fixed_exact(&[b's'; 24]), ..good.clone() };
        assert_eq!(check_init(&s, &o), Ok(()));
        let s = Init { secret: proto::fixed_exact(&[b's'; 23]), ..good };
        assert_eq!(check_init(&s, &o).unwrap_err(), Stop::from("incorrect secret"));
    }

    #[test]
    fn add_ring_checks() {
        let sizes = [4096usize];
        let r = AddRing {
            flags: ADD_RING_FLAG_C2S,
            index: 0,
            region: 0,
            offset: 0,
            log2_ring_size: 4,
            private_hdr_size: 0,
        };
        assert_eq!(check_add_ring(&r, 0, 1, &sizes), Ok(()));
        let err = |a: AddRing, seen: usize| check_add_ring(&a, seen, 2, &sizes).unwrap_err();
        assert_eq!(err(r, 1), Stop::from("invalid ring index"));
        assert_eq!(err(AddRing { index: 2, ..r }, 2), Stop::from("invalid ring index"));
        assert_eq!(err(AddRing { region: 1, ..r }, 0), Stop::from("invalid ring region"));
        assert_eq!(err(AddRing { log2_ring_size: 15, ..r }, 0), Stop::from("ring size too large"));
        assert_eq!(
            err(AddRing { private_hdr_size: 1, ..r }, 0),
            Stop::from("private header not supported")
        );
        assert_eq!(err(AddRing { offset: 6, ..r }, 0), Stop::from("misaligned ring"));
        // 128 + 16 * 16 = 384 bytes of ring: the last one that fits starts at 3712.
        assert_eq!(check_add_ring(&AddRing { offset: 3712, ..r }, 0, 1, &sizes), Ok(()));
        assert_eq!(err(AddRing { offset: 3716, ..r }, 0), Stop::from("ring outside its region"));
        assert_eq!(
            err(AddRing { offset: u32::MAX - 3, ..r }, 0),
            Stop::from("ring outside its region")
        );
        assert_eq!(
            err(AddRing { log2_ring_size: 14, ..r }, 0),
            Stop::from("ring outside its region")
        );
    }
}
