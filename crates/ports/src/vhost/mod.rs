//! The `vhost-user` backend: a virtio-net device that QEMU guests and DPDK's `virtio_user` attach
//! to over a unix socket, in either socket role.
//!
//! The protocol is spoken by rust-vmm's `vhost` crate (its `BackendReqHandler` parses messages
//! and passes fds); the rings are `virtio-queue` split queues over `vm-memory` mappings of the
//! fds the frontend sends. What is routeplex's own here (see [`device`] and the `queue` module)
//! is the device state, every check of what the frontend supplies, and the data path, which is
//! polled by routeplex's worker in `rx_burst`/`tx_burst` and never by the crates' own threads
//! (`vhost-user-backend`'s daemon is not used).
//!
//! Contract:
//! - **Control path in [`Port::service`]**, on the worker's thread: accepting (server mode) or
//!   connecting and re-connecting every [`VhostUserOptions::reconnect_interval`] (client mode),
//!   then handling the messages waiting on the socket, at most 64 per call. Because messages
//!   and bursts run on one thread, GET_VRING_BASE always finds every chain taken from a ring
//!   already returned on its used ring, and no lock is contended (the device sits behind an
//!   uncontended mutex, taken once per burst, because the crate's handler wants one). A
//!   message that stalls half-way is given up after 200 ms, which closes the connection.
//! - **A frontend that goes away** (EOF, error, a message we refuse) is forgotten entirely:
//!   its memory unmapped, its rings and eventfds closed, and the port is
//!   [`PortStatus::Down`] with the reason until the next frontend (server) or the next
//!   successful connect (client) sets the rings up again. The fds it sends and we keep (memory
//!   regions, kick and call eventfds) are made close-on-exec as they arrive, so no program
//!   routeplex starts later (a routing daemon, tcpdump) holds a guest's memory.
//! - **Features offered**: VERSION_1, MRG_RXBUF, PROTOCOL_FEATURES (MQ and REPLY_ACK), and MQ
//!   with CTRL_VQ when `queues > 1` (the frontend serves the control queue itself). No
//!   checksum or segmentation offloads: every frame is complete. No EVENT_IDX, no packed rings,
//!   no IN_ORDER.
//! - **Queues**: `queues` pairs. `rx_burst` drains the guest's transmit rings round-robin,
//!   starting one further each call; `tx_burst` puts a call's frames on one of the guest's
//!   receive rings, the next one on the next call, spilling to the others when it is full.
//!   Rings the frontend has not enabled are skipped.
//! - **Notifications**: the guest is asked not to kick (we poll); between
//!   [`Port::arm_wakeup`] and [`Port::disarm_wakeup`] it is asked to, and the kick eventfds
//!   are among [`Port::wakeup_fds`]. We signal the call eventfd after a burst that used a ring,
//!   unless the driver set NO_INTERRUPT (DPDK does; a Linux guest does not).
//! - **Untrusted frontend**: see the `queue` module for descriptors and [`device`] for
//!   messages. One residual risk is named here: a region whose fd is not sealed against
//!   shrinking (DPDK's `--no-huge` memory is not; QEMU's memfd backend is) could be truncated
//!   by its owner after we mapped it, and touching it would then fault. Such regions are
//!   counted in [`VhostStats::unsealed_regions`]. The socket file is created mode 0600, so
//!   only its owner (and root) can be that frontend.

pub mod device;
mod queue;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use vhost::vhost_user::{BackendReqHandler, Error as VuError};
use virtio_queue::QueueT;

use crate::{Batch, Port, PortStats, PortStatus};
use device::Device;

/// The most queue pairs a port serves.
pub const MAX_QUEUE_PAIRS: u16 = 16;

/// Which end of the socket routeplex is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// routeplex listens; the frontend (QEMU's default `-chardev socket`) connects.
    Server,
    /// routeplex connects to a frontend that listens (QEMU `server=on`, DPDK `server=1`).
    Client,
}

/// How to open a vhost-user port.
#[derive(Clone, Debug)]
pub struct VhostUserOptions {
    /// The socket file.
    pub socket: PathBuf,
    /// Listen or connect.
    pub mode: Mode,
    /// Queue pairs offered, 1..=[`MAX_QUEUE_PAIRS`].
    pub queues: u16,
    /// Port name for logs.
    pub name: String,
    /// Client mode: pause between connection attempts.
    pub reconnect_interval: Duration,
}

impl VhostUserOptions {
    /// Defaults around `socket`: one queue pair, reconnect every 500 ms.
    pub fn new(socket: impl Into<PathBuf>, mode: Mode) -> VhostUserOptions {
        VhostUserOptions {
            socket: socket.into(),
            mode,
            queues: 1,
            name: String::from("vhost-user"),
            reconnect_interval: Duration::from_millis(500),
        }
    }
}

/// vhost-user counters, beside [`PortStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VhostStats {
    /// Frontend connections made (accepted or connected).
    pub connects: u64,
    /// Connections that ended, for any reason.
    pub disconnects: u64,
    /// Connections we closed because the frontend broke the protocol (a subset of
    /// `disconnects`): a malformed message, a feature we did not offer, a bad ring address...
    pub protocol_errors: u64,
    /// Requests dropped because they need a feature the frontend has not negotiated (the
    /// connection stays; see `handle_messages`).
    pub refused_messages: u64,
    /// Chains whose head index is not below the queue size (the entry cannot be returned).
    pub bad_index: u64,
    /// Descriptors that reach outside the memory the frontend mapped.
    pub bad_addr: u64,
    /// Descriptors whose `addr + len` overflows, and transmit chains no longer than the
    /// virtio-net header.
    pub bad_len: u64,
    /// Chains that loop, run past the queue size, point `next` out of range, or hold a
    /// descriptor of the wrong direction.
    pub bad_chain: u64,
    /// Times a ring's avail index ran more than a queue ahead; the ring is stopped.
    pub bad_avail_idx: u64,
    /// Rings stopped because their memory could not be used (set up outside the memory table,
    /// used ring unwritable).
    pub bad_rings: u64,
    /// Frames the guest sent that are longer than a packet buffer takes.
    pub too_long: u64,
    /// Frames for the guest that did not fit its receive buffers (without mergeable buffers,
    /// or over 64 of them).
    pub small_rx_buffers: u64,
    /// Memory regions mapped whose fd was not sealed against shrinking.
    pub unsealed_regions: u64,
}

/// One vhost-user port.
pub struct VhostUserPort {
    name: String,
    opts: VhostUserOptions,
    dev: Arc<Mutex<Device>>,
    listener: Option<UnixListener>,
    conn: Option<BackendReqHandler<Mutex<Device>>>,
    conn_fd: RawFd,
    retry_at: Instant,
    connect_error: Option<String>,
    last_reason: Option<String>,
    status: PortStatus,
    stats: PortStats,
    vstats: VhostStats,
    rx_next: usize,
    tx_next: usize,
}

/// How long a message may take to arrive once its first bytes did.
const MSG_TIMEOUT: Duration = Duration::from_millis(200);

impl VhostUserPort {
    /// Opens a port. Server mode binds and listens now (a stale socket file left by a dead
    /// process is replaced; a live listener or a non-socket is an error); client mode tries
    /// to connect at once and otherwise keeps trying from [`Port::service`].
    pub fn new(opts: VhostUserOptions) -> io::Result<VhostUserPort> {
        let who = |e: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("vhost-user port {:?} on {}: {e}", opts.name, opts.socket.display()),
            )
        };
        if !(1..=MAX_QUEUE_PAIRS).contains(&opts.queues) {
            return Err(who(format!("queues {} not in 1..={MAX_QUEUE_PAIRS}", opts.queues)));
        }
        let now = Instant::now();
        let mut port = VhostUserPort {
            name: opts.name.clone(),
            dev: Arc::new(Mutex::new(Device::new(opts.queues))),
            opts,
            listener: None,
            conn: None,
            conn_fd: -1,
            retry_at: now,
            connect_error: None,
            last_reason: None,
            status: PortStatus::Down(String::new()),
            stats: PortStats::default(),
            vstats: VhostStats::default(),
            rx_next: 0,
            tx_next: 0,
        };
        if port.opts.mode == Mode::Server {
            let l = bind(&port.opts.socket).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("vhost-user server on {}: {e}", port.opts.socket.display()),
                )
            })?;
            port.listener = Some(l);
        } else {
            port.try_connect(now);
        }
        port.refresh_status();
        Ok(port)
    }

    /// vhost-user counters.
    pub fn vhost_stats(&self) -> VhostStats {
        let mut v = self.vstats;
        let d = self.lock();
        v.unsealed_regions = d.counters.unsealed_regions;
        v.bad_rings += d.counters.bad_rings;
        v
    }

    /// Queue pairs the frontend has running now (both rings started and enabled).
    pub fn active_queue_pairs(&self) -> usize {
        let d = self.lock();
        (0..d.pairs as usize).filter(|&p| d.usable(2 * p) && d.usable(2 * p + 1)).count()
    }

    /// The features the frontend acknowledged (0 while none is connected).
    pub fn acked_features(&self) -> u64 {
        self.lock().acked
    }

    /// One line per ring for diagnostics: whether it runs, where we are in its avail and used
    /// rings, and the indexes the frontend's memory holds now.
    pub fn rings_state(&self) -> String {
        let d = self.lock();
        let mut out = String::new();
        for (i, v) in d.vrings.iter().enumerate().take(2 * d.pairs as usize) {
            let (avail, used) = match &d.mem {
                Some(m) if v.q.ready() => (
                    v.q.avail_idx(m, Ordering::Acquire).map(|w| w.0).ok(),
                    v.q.used_idx(m, Ordering::Acquire).map(|w| w.0).ok(),
                ),
                _ => (None, None),
            };
            out.push_str(&format!(
                "ring {i}: started={} enabled={} broken={} ready={} next_avail={} next_used={} \
                 avail_idx={avail:?} used_idx={used:?}\n",
                v.started,
                v.enabled,
                v.broken,
                v.q.ready(),
                v.q.next_avail(),
                v.q.next_used(),
            ));
        }
        out
    }

    /// The socket file.
    pub fn socket(&self) -> &std::path::Path {
        &self.opts.socket
    }

    fn lock(&self) -> MutexGuard<'_, Device> {
        // Only this port's thread takes the lock; a panic while holding it is already fatal.
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_connect(&mut self, now: Instant) {
        match UnixStream::connect(&self.opts.socket) {
            Ok(s) => {
                self.connect_error = None;
                self.attach(s);
            }
            Err(e) => {
                self.connect_error = Some(e.to_string());
                self.retry_at = now + self.opts.reconnect_interval;
            }
        }
    }

    fn attach(&mut self, s: UnixStream) {
        if s.set_nonblocking(false).and_then(|_| s.set_read_timeout(Some(MSG_TIMEOUT))).is_err() {
            return;
        }
        self.conn_fd = s.as_raw_fd();
        self.lock().reset();
        self.conn = Some(BackendReqHandler::from_stream(s, self.dev.clone()));
        self.vstats.connects += 1;
        self.last_reason = None;
    }

    fn teardown(&mut self, reason: String) {
        self.conn = None;
        self.conn_fd = -1;
        self.lock().reset();
        self.vstats.disconnects += 1;
        self.last_reason = Some(reason);
        self.retry_at = Instant::now() + self.opts.reconnect_interval;
    }

    fn refresh_status(&mut self) {
        if self.conn.is_some() {
            self.status = if self.active_queue_pairs() > 0 {
                PortStatus::Up
            } else {
                PortStatus::Down(format!(
                    "frontend connected on {}, rings not started yet",
                    self.opts.socket.display()
                ))
            };
            return;
        }
        let next = match self.opts.mode {
            Mode::Server => format!("waiting for a frontend on {}", self.opts.socket.display()),
            Mode::Client => {
                let every = self.opts.reconnect_interval.as_millis();
                match &self.connect_error {
                    Some(e) => format!(
                        "connecting to {}: {e} (retrying every {every} ms)",
                        self.opts.socket.display()
                    ),
                    None => format!("reconnecting to {} in {every} ms", self.opts.socket.display()),
                }
            }
        };
        self.status = PortStatus::Down(match &self.last_reason {
            Some(r) => format!("{r}; {next}"),
            None => next,
        });
    }

    fn handle_messages(&mut self) {
        for _ in 0..64 {
            if !readable(self.conn_fd) {
                return;
            }
            let early = self.early_vring_enable();
            let Some(c) = &mut self.conn else { return };
            match c.handle_request() {
                Ok(()) => {}
                // A request that needs a feature not (yet) negotiated: dropped, counted, and
                // the connection kept (the frontend may be waiting for nothing: its problem).
                Err(VuError::InactiveFeature(_) | VuError::InactiveOperation(_)) if early => {}
                Err(VuError::InactiveFeature(_) | VuError::InactiveOperation(_)) => {
                    self.vstats.refused_messages += 1;
                }
                Err(
                    VuError::Disconnected
                    | VuError::PartialMessage
                    | VuError::SocketBroken(_)
                    | VuError::SocketError(_),
                ) => {
                    self.teardown("frontend disconnected".into());
                    return;
                }
                Err(e) => {
                    self.vstats.protocol_errors += 1;
                    self.teardown(format!("frontend broke the protocol ({e}), connection closed"));
                    return;
                }
            }
        }
    }
}

impl VhostUserPort {
    /// QEMU 7.2 sends SET_VRING_ENABLE as soon as the guest driver picks its queue pairs,
    /// before SET_FEATURES, and not again after the device starts; the `vhost` crate refuses
    /// it there (PROTOCOL_FEATURES is not acked yet) without telling us what it said. So the
    /// next message is peeked first: if it is such an early SET_VRING_ENABLE, the device takes
    /// it here (index and value checked as the crate would), and the crate's refusal that
    /// follows is expected. Returns whether it was one.
    fn early_vring_enable(&mut self) -> bool {
        const SET_VRING_ENABLE: u32 = 18;
        let mut m = [0u8; 20];
        // SAFETY: peeks at most 20 bytes into our buffer; the fd is the connection's.
        let n = unsafe {
            libc::recv(
                self.conn_fd,
                m.as_mut_ptr().cast(),
                m.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let word = |i: usize| u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
        if n != 20 || word(0) != SET_VRING_ENABLE || word(8) != 8 {
            return false;
        }
        let mut d = self.lock();
        if d.acked & (1 << 30) != 0 {
            return false;
        }
        let (index, num) = (word(12), word(16));
        if (index as usize) < d.vrings.len() && num <= 1 {
            vhost::vhost_user::VhostUserBackendReqHandlerMut::set_vring_enable(
                &mut *d,
                index,
                num == 1,
            )
            .is_ok()
        } else {
            false
        }
    }
}

/// Binds a listening socket at `path`, mode 0600, replacing a stale socket file.
fn bind(path: &std::path::Path) -> io::Result<UnixListener> {
    let l = match UnixListener::bind(path) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            use std::os::unix::fs::FileTypeExt;
            let is_socket =
                std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
            let dead = is_socket
                && UnixStream::connect(path)
                    .err()
                    .is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused);
            if !dead {
                let why = if is_socket { "a live server listens there" } else { "not a socket" };
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("bind: address in use ({why})"),
                ));
            }
            std::fs::remove_file(path)?;
            UnixListener::bind(path)?
        }
        Err(e) => return Err(e),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Whether `fd` has data (or EOF, or an error) to read, without waiting.
fn readable(fd: RawFd) -> bool {
    if fd < 0 {
        return false;
    }
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

impl Drop for VhostUserPort {
    fn drop(&mut self) {
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(&self.opts.socket);
        }
    }
}

impl Port for VhostUserPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        if self.conn.is_none() {
            return 0;
        }
        let mut d = self.dev.lock().unwrap_or_else(|e| e.into_inner());
        let d = &mut *d;
        let Some(mem) = &d.mem else { return 0 };
        let (hdr_len, pairs) = (d.hdr_len(), d.pairs as usize);
        let start = self.rx_next % pairs;
        self.rx_next = start + 1;
        let mut got = 0;
        for k in 0..pairs {
            if batch.room() == 0 {
                break;
            }
            // The guest's transmit ring of pair p is vring 2p + 1.
            let i = 2 * ((start + k) % pairs) + 1;
            if !usable(&d.vrings, i, d.acked) {
                continue;
            }
            got += queue::pull(
                &mut d.vrings[i],
                mem,
                hdr_len,
                batch,
                &mut self.stats,
                &mut self.vstats,
            );
        }
        got
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        if self.conn.is_none() {
            return 0;
        }
        let mut taken = 0;
        {
            let mut d = self.dev.lock().unwrap_or_else(|e| e.into_inner());
            let d = &mut *d;
            if let Some(mem) = &d.mem {
                let (hdr_len, mrg, pairs) = (d.hdr_len(), d.mergeable(), d.pairs as usize);
                let start = self.tx_next % pairs;
                self.tx_next = start + 1;
                for k in 0..pairs {
                    if taken == sel.len() {
                        break;
                    }
                    let i = 2 * ((start + k) % pairs);
                    if !usable(&d.vrings, i, d.acked) {
                        continue;
                    }
                    taken += queue::push(
                        &mut d.vrings[i],
                        mem,
                        hdr_len,
                        mrg,
                        batch,
                        &sel[taken..],
                        &mut self.stats,
                        &mut self.vstats,
                    );
                }
            }
        }
        for &i in &sel[..taken] {
            batch.get_mut(i as usize).reset();
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

    fn service(&mut self) {
        let now = Instant::now();
        self.handle_messages();
        if self.conn.is_none() {
            match self.opts.mode {
                Mode::Server => {
                    if let Some(Ok((s, _))) = self.listener.as_ref().map(|l| l.accept()) {
                        self.attach(s);
                        self.handle_messages();
                    }
                }
                Mode::Client => {
                    if now >= self.retry_at {
                        self.try_connect(now);
                        self.handle_messages();
                    }
                }
            }
        }
        self.refresh_status();
    }

    /// The listening or connected socket (`service` has work when it is readable) and the
    /// kick eventfds of the guest's transmit rings, which the guest signals between
    /// [`Port::arm_wakeup`] and [`Port::disarm_wakeup`].
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.listener.as_ref().map(|l| l.as_raw_fd()));
        if self.conn.is_some() {
            out.push(self.conn_fd);
            let d = self.lock();
            for i in (1..2 * d.pairs as usize).step_by(2) {
                if let (true, Some(k)) = (d.usable(i), &d.vrings[i].kick) {
                    out.push(k.as_raw_fd());
                }
            }
        }
        true
    }

    fn arm_wakeup(&mut self) -> bool {
        if self.conn.is_none() {
            return false;
        }
        let mut d = self.dev.lock().unwrap_or_else(|e| e.into_inner());
        let d = &mut *d;
        let Some(mem) = &d.mem else { return false };
        let mut waiting = false;
        for i in (1..2 * d.pairs as usize).step_by(2) {
            if !usable(&d.vrings, i, d.acked) {
                continue;
            }
            let v = &mut d.vrings[i];
            if let Some(k) = &v.kick {
                drain_eventfd(k.as_raw_fd());
            }
            // True when the avail ring moved past what we took: poll instead of sleeping.
            waiting |= v.q.enable_notification(mem).unwrap_or(true);
        }
        waiting
    }

    fn disarm_wakeup(&mut self) {
        if self.conn.is_none() {
            return;
        }
        let mut d = self.dev.lock().unwrap_or_else(|e| e.into_inner());
        let d = &mut *d;
        let Some(mem) = &d.mem else { return };
        for i in (1..2 * d.pairs as usize).step_by(2) {
            if usable(&d.vrings, i, d.acked) {
                let _ = d.vrings[i].q.disable_notification(mem);
            }
        }
    }
}

/// [`Device::usable`] with the device split-borrowed.
fn usable(vrings: &[device::Vring], i: usize, acked: u64) -> bool {
    let v = &vrings[i];
    let enabled = v.enabled || acked & (1 << 30) == 0;
    v.started && enabled && !v.broken
}

/// Consumes an eventfd's pending signals without blocking (kick fds may be blocking).
fn drain_eventfd(fd: RawFd) {
    if readable(fd) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a u64 we own; the fd was just reported readable.
        unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    }
}
/// Where [`fuzz_rings`] puts the receive ring.
pub(crate) const FUZZ_RX: u64 = 0x1000;

/// For [`crate::fuzzing::vhost`]: a transmit ring and a receive ring of `1 << (data[0] % 7)`
/// entries in 64 KiB of guest memory whose every byte came from the guest (`data[2..]` from
/// address 0: descriptor tables at 0 and [`FUZZ_RX`], each ring's avail ring 0x400 after its
/// table and used ring 0x600 after it, buffers anywhere); frames are pulled from the transmit
/// ring, then three frames pushed to the receive ring, with the header length and mergeable
/// buffers `data[1]` picks.
pub(crate) fn fuzz_rings(data: &[u8]) {
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
    const LEN: usize = 64 << 10;
    let (Some(&d0), Some(&d1)) = (data.first(), data.get(1)) else { return };
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), LEN)]).expect("guest memory");
    mem.write_slice(&data[2..][..(data.len() - 2).min(LEN)], GuestAddress(0)).expect("fits");
    let ring = |base: u64| {
        let mut v = device::Vring::new();
        v.q.try_set_size(1 << (d0 % 7)).expect("a power of two");
        v.q.try_set_desc_table_address(GuestAddress(base)).expect("aligned");
        v.q.try_set_avail_ring_address(GuestAddress(base + 0x400)).expect("aligned");
        v.q.try_set_used_ring_address(GuestAddress(base + 0x600)).expect("aligned");
        v.q.set_ready(true);
        assert!(v.q.is_valid(&mem), "rings inside the memory");
        v
    };
    let (mut tx, mut rx) = (ring(0), ring(FUZZ_RX));
    let hdr_len = if d1 & 1 == 0 { 12 } else { 10 };
    let (mut st, mut vs) = (PortStats::default(), VhostStats::default());
    let mut batch = Batch::new(64);
    let n = queue::pull(&mut tx, &mem, hdr_len, &mut batch, &mut st, &mut vs);
    assert!(n <= 64 && batch.len() == n, "{n} frames in a batch of 64");
    assert!(batch.packets().iter().all(|b| b.len() <= crate::MAX_FRAME));
    let mut out = Batch::new(3);
    for len in [60, 1514, crate::MAX_FRAME] {
        assert!(out.push_copy(&vec![0x5a; len]));
    }
    let mergeable = d1 & 2 != 0;
    let n = queue::push(&mut rx, &mem, hdr_len, mergeable, &mut out, &[0, 1, 2], &mut st, &mut vs);
    assert!(n <= 3);
}
