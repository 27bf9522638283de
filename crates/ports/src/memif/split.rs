//! One memif interface received by several workers: [`MemifPort::split`] turns a port of `n`
//! queues into `n` ports ([`MemifQueue`]), the `r`-th of which moves frames on receive ring `r`
//! and transmit ring `r` only. The peer chooses the ring each frame goes in (DPDK's memif by the
//! lcore that sends, VPP by its own hash), as a NIC's RSS chooses a queue: there is no
//! dispatcher thread between the rings and the workers.
//!
//! The control channel (socket, handshake, regions, disconnects) stays one [`MemifPort`], held
//! by the queues together behind a mutex that their workers only `try_lock` (a worker never
//! waits for another's housekeeping). Whichever queue's [`Port::service`] gets the lock runs the control path and,
//! once connected, hands each ring pair out to its queue. Every connection and every teardown
//! bumps an epoch (an atomic); the data path compares it once per burst, and on a change drops
//! rings of an ended connection at once (so no queue touches a ring after its connection ends)
//! and takes the new one's rings (the lock's only use in `rx_burst` and `tx_burst`, once per
//! connection). The mapped regions are reference-counted:
//! they stay mapped until the last queue holding a ring of theirs lets it go.
//!
//! A peer that settles on fewer rings than there are queues leaves the extra queues Down, with
//! the reason. A ring fault one queue finds (a peer breaking the ring protocol) is acted on by
//! that queue's next `service`: the connection is rejected for every queue, as for one port.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use super::queue::{Fault, Mem, RxQueue, TxQueue};
use super::{MemifPort, MemifStats, Phase, SharedRegions};
use crate::{Batch, Port, PortStats, PortStatus};

/// What the queues of a split port share.
struct Shared {
    ctl: Mutex<Control>,
    /// Changes on every connect and every teardown (`connects + disconnects`): a queue holding
    /// rings of another epoch must drop them.
    epoch: AtomicU64,
    /// The control socket's fds (listener, connection; -1 for none), for `wakeup_fds`, which
    /// must not lock. Read stale, an fd only wakes a sleeper for nothing.
    ctl_fds: [AtomicI32; 2],
}

impl Shared {
    /// The control side, unless another queue's worker holds it (never waits). A queue's
    /// worker that panicked in the control path left the port's state whole (each step leaves
    /// it consistent), so a poisoned lock is taken as it is.
    fn control(&self) -> Option<std::sync::MutexGuard<'_, Control>> {
        match self.ctl.try_lock() {
            Ok(c) => Some(c),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        }
    }
}

/// The control side: the port (whose own burst functions are never called once split) and the
/// ring pairs of the current connection not yet taken by their queue.
struct Control {
    port: MemifPort,
    /// The epoch whose rings `handed` holds.
    epoch: u64,
    handed: Vec<Option<(RxQueue, TxQueue)>>,
    /// Rings the peer settled on, per direction, in `epoch` (0 while not connected).
    rings: (usize, usize),
}

/// The rings of one queue, for one connection.
struct Live {
    regions: Arc<SharedRegions>,
    sizes: Vec<usize>,
    bsize: u32,
    rx: RxQueue,
    tx: TxQueue,
}

/// Queue `r` of a split memif port. See the module documentation.
pub struct MemifQueue {
    name: String,
    q: usize,
    shared: Arc<Shared>,
    /// The epoch of `live`'s rings.
    seen: u64,
    live: Option<Live>,
    /// A fault the data path found, with the epoch it was found in.
    fault: Option<(u64, Fault)>,
    status: PortStatus,
    stats: PortStats,
    mstats: MemifStats,
}

fn epoch_of(p: &MemifPort) -> u64 {
    p.mstats.connects + p.mstats.disconnects
}

impl MemifPort {
    /// Splits the port into `n` queues, queue `r` moving frames on ring `r` of each direction;
    /// `n` must be the port's `queues` (the most rings it settles on). Queue `r` is named
    /// `NAME#r`.
    pub fn split(self, n: usize) -> std::io::Result<Vec<MemifQueue>> {
        if n == 0 || n != usize::from(self.opts.queues) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "memif {}: split into {n} queues, but the port has queues: {}",
                    self.name, self.opts.queues
                ),
            ));
        }
        let name = self.name.clone();
        let status = self.status.clone();
        let control = Control {
            port: self,
            epoch: u64::MAX,
            handed: (0..n).map(|_| None).collect(),
            rings: (0, 0),
        };
        let shared = Arc::new(Shared {
            ctl: Mutex::new(control),
            epoch: AtomicU64::new(u64::MAX),
            ctl_fds: [AtomicI32::new(-1), AtomicI32::new(-1)],
        });
        {
            let mut c = shared.ctl.lock().unwrap_or_else(|e| e.into_inner());
            c.settle(&shared);
        }
        Ok((0..n)
            .map(|q| MemifQueue {
                name: format!("{name}#{q}"),
                q,
                shared: shared.clone(),
                seen: u64::MAX,
                live: None,
                fault: None,
                status: status.clone(),
                stats: PortStats::default(),
                mstats: MemifStats::default(),
            })
            .collect())
    }
}

impl Control {
    /// After the port's control path ran: publishes the epoch and the control fds, and takes
    /// the rings of a new connection out of the port for their queues.
    fn settle(&mut self, shared: &Shared) {
        let epoch = epoch_of(&self.port);
        if epoch != self.epoch {
            self.epoch = epoch;
            self.handed.iter_mut().for_each(|h| *h = None);
            self.rings = (0, 0);
            if let (Phase::Connected, Some(d)) = (&self.port.phase, &mut self.port.data) {
                self.rings = (d.rx.len(), d.tx.len());
                let pairs = d.rx.drain(..).zip(d.tx.drain(..));
                for (slot, pair) in self.handed.iter_mut().zip(pairs) {
                    *slot = Some(pair);
                }
            }
            shared.epoch.store(epoch, Ordering::Release);
        }
        let fds = self.port.ctl_fds_pair();
        for (a, fd) in shared.ctl_fds.iter().zip(fds) {
            a.store(fd, Ordering::Relaxed);
        }
    }
}

impl MemifQueue {
    /// The queue's index (the ring it moves frames on).
    pub fn queue(&self) -> usize {
        self.q
    }

    /// This queue's data-path counters (bad descriptors and the like); the connection's
    /// counters (connects, protocol errors) are the port's, in [`MemifQueue::port_stats`].
    pub fn memif_stats(&self) -> MemifStats {
        self.mstats
    }

    /// The shared port's memif counters (takes the control lock: not for the data path).
    pub fn port_stats(&self) -> MemifStats {
        self.shared.ctl.lock().unwrap_or_else(|e| e.into_inner()).port.mstats
    }

    /// Whether this queue may use its rings: it holds some, of the current connection (rings
    /// of an ended one are dropped here, a new one's taken), and found no fault in them.
    #[inline]
    fn ready(&mut self) -> bool {
        if self.shared.epoch.load(Ordering::Acquire) != self.seen {
            self.catch_up();
        }
        self.live.is_some() && self.fault.is_none()
    }

    /// A connection ended or began since this queue last looked: drops the ended one's rings
    /// and, when the control path is free (`try_lock`: never waits), takes the new one's now
    /// rather than at this queue's next `service`. A worker asleep until frames came is woken
    /// by them, not by the connect: it found this queue Down and dropped the first burst
    /// forwarded to it (tx_full) however long ago the peer had connected.
    #[cold]
    fn catch_up(&mut self) {
        let shared = self.shared.clone();
        match shared.control() {
            Some(mut c) => self.sync(&mut c),
            None => {
                if self.live.take().is_some() {
                    self.status = PortStatus::Down("memif connection ended".into());
                }
            }
        };
    }

    /// Under the control lock: reports a fault, takes this queue's rings of a new connection,
    /// and refreshes the status.
    fn sync(&mut self, c: &mut Control) {
        if let Some((epoch, f)) = self.fault.take() {
            if epoch == c.epoch && matches!(c.port.phase, Phase::Connected) {
                c.port.reject(f);
                c.settle(&self.shared);
            }
        }
        if self.seen != c.epoch {
            self.live = None;
            self.seen = c.epoch;
            if let (Some((rx, tx)), Some(d)) = (c.handed[self.q].take(), &c.port.data) {
                self.live = Some(Live {
                    regions: d.regions.clone(),
                    sizes: d.sizes.clone(),
                    bsize: d.bsize,
                    rx,
                    tx,
                });
            }
        }
        self.status = match (&self.live, c.port.status.clone()) {
            (Some(_), _) => PortStatus::Up,
            (None, PortStatus::Up) => PortStatus::Down(format!(
                "memif {}: the peer settled on {} receive and {} transmit rings, none for queue {}",
                c.port.name, c.rings.0, c.rings.1, self.q
            )),
            (None, down) => down,
        };
    }
}

impl Port for MemifQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        if !self.ready() {
            return 0;
        }
        let Some(l) = self.live.as_mut() else { return 0 };
        let mem = Mem { regions: &l.regions, sizes: &l.sizes, bsize: l.bsize };
        match l.rx.rx(&mem, batch, &mut self.stats, &mut self.mstats) {
            Ok(n) => n,
            Err(f) => {
                self.fault = Some((self.seen, f));
                0
            }
        }
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        if !self.ready() {
            return 0;
        }
        let Some(l) = self.live.as_mut() else { return 0 };
        let mem = Mem { regions: &l.regions, sizes: &l.sizes, bsize: l.bsize };
        match l.tx.tx(&mem, batch, sel, &mut self.stats, &mut self.mstats) {
            Ok(n) => {
                self.stats.tx_full += (sel.len() - n) as u64;
                n
            }
            Err(f) => {
                self.fault = Some((self.seen, f));
                0
            }
        }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn status(&self) -> PortStatus {
        self.status.clone()
    }

    /// The control socket (any queue's `service` may run the control path) and this queue's
    /// receive ring's eventfd.
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        for a in &self.shared.ctl_fds {
            let fd = a.load(Ordering::Relaxed);
            if fd >= 0 {
                out.push(fd);
            }
        }
        if let Some(l) = &self.live {
            out.push(l.rx.ring.event.as_raw_fd());
        }
        true
    }

    fn arm_wakeup(&mut self) -> bool {
        if self.fault.is_some() {
            return true;
        }
        if !self.ready() {
            return false;
        }
        let Some(l) = self.live.as_mut() else { return false };
        let mem = Mem { regions: &l.regions, sizes: &l.sizes, bsize: l.bsize };
        l.rx.arm(&mem)
    }

    fn disarm_wakeup(&mut self) {
        if !self.ready() {
            return;
        }
        let Some(l) = self.live.as_mut() else { return };
        let mem = Mem { regions: &l.regions, sizes: &l.sizes, bsize: l.bsize };
        l.rx.disarm(&mem);
    }

    fn service(&mut self) {
        let shared = self.shared.clone();
        // Another queue's worker is running the control path: this one's turn comes at its
        // next service.
        let Some(mut c) = shared.control() else { return };
        c.port.service();
        c.settle(&shared);
        self.sync(&mut c);
    }
}

impl std::fmt::Debug for MemifQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemifQueue")
            .field("name", &self.name)
            .field("queue", &self.q)
            .field("status", &self.status)
            .finish()
    }
}
