//! Looking at packets while they are forwarded: capture (copies of the frames seen at one port)
//! and trace (each stage's decision for the next packets of one VR).
//!
//! Off costs one predictable branch per burst: a cell's `obs` is `None`, and only a burst that
//! finds it `Some` takes the observed path (see `cell.rs`). On, the cost is bounded: a captured
//! frame is copied into a [`CaptureRing`], a single-producer single-consumer ring preallocated
//! when the capture starts; a full ring loses the copy (counted, [`CaptureRing::lost`]), never
//! the packet, and the worker never waits. A thread on the control side drains the ring. A
//! trace writes fixed-size [`TraceRecord`]s into a buffer sized when the trace starts, which
//! the control side reads between two polls. Neither allocates per packet.

use std::cell::UnsafeCell;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ports::PktBuf;

use crate::counters::{PortDrop, VrDrop};
use crate::impair::ImpairDrop;
use crate::routes::Adj;

/// Bytes of a frame a capture keeps (a frame buffer's size: whole frames).
pub const SNAP_LEN: usize = ports::BUF_SIZE;

/// Where a captured frame was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Received on the port.
    Rx,
    /// Handed to the port for transmission, and taken by it.
    Tx,
    /// Dropped, for the reason recorded: received on the port and dropped there or in a VR,
    /// or sent to the port and dropped by its impairment ([`Reason::Impair`]).
    Drop,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Rx => "rx",
            Dir::Tx => "tx",
            Dir::Drop => "drop",
        }
    }
}

/// Why a captured or traced packet was dropped: at classification, in a VR, or by the
/// impairment of the port it was sent to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Port(PortDrop),
    Vr(VrDrop),
    Impair(ImpairDrop),
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Port(r) => r.name(),
            Reason::Vr(r) => r.name(),
            Reason::Impair(r) => r.name(),
        }
    }
}

/// One frame's copy in the ring.
struct Slot {
    ts: u64,
    port: u16,
    dir: Dir,
    reason: Option<Reason>,
    len: u32,
    caplen: u16,
    data: [u8; SNAP_LEN],
}

/// A captured frame as the consumer gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// The worker's `now` (monotonic nanoseconds) when it saw the frame.
    pub ts: u64,
    /// The cell's port index.
    pub port: u16,
    pub dir: Dir,
    pub reason: Option<Reason>,
    /// The frame's length on the wire.
    pub len: u32,
    /// The bytes kept (at most [`SNAP_LEN`]).
    pub data: Vec<u8>,
}

/// A bounded single-producer (the worker) single-consumer (the control side) ring of frame
/// copies, allocated whole when made.
pub struct CaptureRing {
    slots: Box<[UnsafeCell<Slot>]>,
    /// Next slot the producer publishes (only the producer writes it).
    head: AtomicUsize,
    /// Next slot the consumer reads (only the consumer writes it).
    tail: AtomicUsize,
    lost: AtomicU64,
    taken: AtomicU64,
}

// SAFETY: a slot is written only by the producer while it lies in `[head, tail + cap)` (not yet
// published, so the consumer does not read it) and read only by the consumer while it lies in
// `[tail, head)` (published, so the producer does not write it); `head` is published with
// Release after the write and read with Acquire before the read, and `tail` likewise the other
// way, so no slot is ever accessed from both sides at once.
unsafe impl Sync for CaptureRing {}
// SAFETY: the slots are plain data.
unsafe impl Send for CaptureRing {}

impl CaptureRing {
    /// A ring of `cap` (at least 1) frame copies, about 2 KiB each.
    pub fn new(cap: usize) -> Arc<CaptureRing> {
        let slots = (0..cap.max(1))
            .map(|_| {
                UnsafeCell::new(Slot {
                    ts: 0,
                    port: 0,
                    dir: Dir::Rx,
                    reason: None,
                    len: 0,
                    caplen: 0,
                    data: [0; SNAP_LEN],
                })
            })
            .collect();
        Arc::new(CaptureRing {
            slots,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        })
    }

    /// Copies the ring holds.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Copies lost because the ring was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Copies the producer published.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Consumer: moves up to `max` frames into `out`; returns how many.
    pub fn drain(&self, out: &mut Vec<Captured>, max: usize) -> usize {
        let head = self.head.load(Ordering::Acquire);
        let mut tail = self.tail.load(Ordering::Relaxed);
        let mut k = 0;
        while tail != head && k < max {
            // SAFETY: `tail < head`: published and not yet released to the producer (see the
            // `Sync` impl).
            let s = unsafe { &*self.slots[tail % self.slots.len()].get() };
            out.push(Captured {
                ts: s.ts,
                port: s.port,
                dir: s.dir,
                reason: s.reason,
                len: s.len,
                data: s.data[..s.caplen as usize].to_vec(),
            });
            tail = tail.wrapping_add(1);
            k += 1;
        }
        self.tail.store(tail, Ordering::Release);
        k
    }

    /// Producer: writes a copy into the `ahead`-th unpublished slot; false (and counted as
    /// lost) if the ring has no room for it.
    fn stage(&self, ahead: usize, s: (u64, u16, Dir, Option<Reason>), f: &[u8]) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if head.wrapping_sub(tail) + ahead >= self.slots.len() {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let i = head.wrapping_add(ahead) % self.slots.len();
        // SAFETY: `head + ahead < tail + cap`: unpublished, so the consumer does not read it
        // (see the `Sync` impl), and only this producer writes.
        let slot = unsafe { &mut *self.slots[i].get() };
        let caplen = f.len().min(SNAP_LEN);
        slot.ts = s.0;
        slot.port = s.1;
        slot.dir = s.2;
        slot.reason = s.3;
        slot.len = f.len() as u32;
        slot.caplen = caplen as u16;
        slot.data[..caplen].copy_from_slice(&f[..caplen]);
        true
    }

    /// Producer: publishes the first `k` staged copies.
    fn publish(&self, k: usize) {
        if k > 0 {
            let head = self.head.load(Ordering::Relaxed);
            self.head.store(head.wrapping_add(k), Ordering::Release);
            self.taken.fetch_add(k as u64, Ordering::Relaxed);
        }
    }
}

/// A capture installed on a cell: which port, what to copy, where to.
pub struct Tap {
    pub(crate) port: u16,
    drops: bool,
    /// Frames still to copy; the tap goes quiet at 0.
    left: u64,
    ring: Arc<CaptureRing>,
    /// The burst's `now`.
    pub(crate) now: u64,
}

impl Tap {
    /// Copies frames received on and sent by the cell's port `port` (and with `drops`, those
    /// received there and dropped) into `ring`, at most `count` of them (0: no limit).
    pub fn new(port: usize, drops: bool, count: u64, ring: Arc<CaptureRing>) -> Tap {
        let left = if count == 0 { u64::MAX } else { count };
        Tap { port: port as u16, drops, left, ring, now: 0 }
    }

    /// Whether drops at port `p` are wanted.
    #[inline]
    pub(crate) fn wants_drops(&self, p: usize) -> bool {
        self.drops && self.port as usize == p && self.left > 0
    }

    /// Copies one frame now.
    pub(crate) fn record(&mut self, dir: Dir, reason: Option<Reason>, f: &[u8]) {
        if self.left == 0 {
            return;
        }
        if self.ring.stage(0, (self.now, self.port, dir, reason), f) {
            self.ring.publish(1);
            self.left -= 1;
        }
    }

    /// The tap, if it copies what is dropped at port `p` (an impairment's drops there).
    #[inline]
    pub(crate) fn drops_at(tap: Option<&mut Tap>, p: usize) -> Option<&mut Tap> {
        tap.filter(|t| t.wants_drops(p))
    }

    /// Copies received frames.
    pub(crate) fn rx(&mut self, p: usize, pkts: &[PktBuf]) {
        if self.port as usize == p {
            for b in pkts {
                self.record(Dir::Rx, None, b.frame());
            }
        }
    }

    #[cold]
    #[inline(never)]
    /// Stages copies of the frames about to be sent out of port `p`; publish the ones the port
    /// took with [`Tap::sent`].
    pub(crate) fn stage_tx(&mut self, p: usize, pkts: &[PktBuf], sel: &[u16]) -> usize {
        if self.port as usize != p || self.left == 0 {
            return 0;
        }
        let mut k = 0;
        for &i in sel {
            if k as u64 >= self.left
                || !self.ring.stage(
                    k,
                    (self.now, self.port, Dir::Tx, None),
                    pkts[i as usize].frame(),
                )
            {
                break;
            }
            k += 1;
        }
        k
    }

    #[cold]
    #[inline(never)]
    /// Publishes the first `k` staged transmit copies.
    pub(crate) fn sent(&mut self, k: usize) {
        self.ring.publish(k);
        self.left -= k as u64;
    }
}

/// A capture of an impaired port's drops (see [`Tap::drops_at`]) copies each frame dropped.
impl crate::impair::Watch for Tap {
    #[cold]
    fn dropped(&mut self, _slot: Option<u16>, r: ImpairDrop, f: &[u8]) {
        self.record(Dir::Drop, Some(Reason::Impair(r)), f);
    }
}

/// What one traced packet met at each stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// The worker's `now` for its burst.
    pub ts: u64,
    /// Receiving port (the cell's index) and the frame's length.
    pub port: u16,
    pub len: u16,
    /// Demux: the VR's interface that claimed it, and the ethertype.
    pub iface: u16,
    pub ethertype: u16,
    /// Lookup: the destination looked up and the next hop (FIB leaf) it gave, with what that
    /// next hop means; `None` if the packet was settled before the lookup.
    pub lookup: Option<(IpAddr, u16, Adj)>,
    /// Egress: the port it was sent out of.
    pub egress: Option<u16>,
    /// The drop reason, if it was dropped.
    pub drop: Option<VrDrop>,
    /// Why the impairment of the port it was sent out of dropped it, if it did so as it was
    /// sent (a frame it held and dropped later, `impair_tx_full`, is no longer traced).
    pub impair: Option<ImpairDrop>,
    /// The packet's slot in its burst, to find its record when its egress is flushed.
    pub(crate) slot: u16,
}

/// A per-VR trace budget and its records.
pub(crate) struct Trace {
    pub vr: u16,
    pub left: u32,
    pub records: Vec<TraceRecord>,
    /// Records from here on are of packets whose burst is not sent yet.
    pub unsent: usize,
}

impl Trace {
    /// The packet in slot `slot` of the burst being sent, if it is VR `vr`'s and traced, was
    /// dropped by the impairment of its egress port, for `r`.
    pub(crate) fn impair_dropped(&mut self, vr: u16, slot: u16, r: ImpairDrop) {
        if vr != self.vr {
            return;
        }
        let unsent = self.unsent.min(self.records.len());
        if let Some(rec) = self.records[unsent..].iter_mut().find(|t| t.slot == slot) {
            rec.impair = Some(r);
        }
    }

    /// The burst being sent is sent.
    pub(crate) fn sent(&mut self) {
        self.unsent = self.records.len();
    }
}

/// Everything observed on a cell: at most one capture and one trace.
pub(crate) struct Observe {
    pub tap: Option<Tap>,
    pub trace: Option<Trace>,
    /// A VR's drop counters before one packet's run.
    pub before: [u64; VrDrop::COUNT],
    /// That packet's length as received: the VR may rewrite it in place (into an ICMP error).
    pub rx_len: u16,
}

impl Default for Observe {
    fn default() -> Self {
        Observe { tap: None, trace: None, before: [0; VrDrop::COUNT], rx_len: 0 }
    }
}

impl Observe {
    /// Whether VR `v`'s packets from port `p` go one by one (to learn each one's fate).
    #[inline]
    pub fn wants(&self, v: usize, p: usize) -> bool {
        self.tap.as_ref().is_some_and(|t| t.wants_drops(p))
            || self.trace.as_ref().is_some_and(|t| t.vr as usize == v && t.left > 0)
    }
}
