//! The io layer of routeplex: packet buffers, batches, and the one port trait every backend
//! implements.
//!
//! Contract:
//! - A [`Port`] moves packets in bursts. [`Port::rx_burst`] appends received frames to a
//!   [`Batch`]; [`Port::tx_burst`] sends a chosen subset of a batch, in order, and reports how many
//!   it took. What it did not take is the caller's to count as dropped.
//! - Buffers are allocated once, when a batch or a port is made. Sending and receiving exchange
//!   buffers or copy bytes; neither allocates. Every batch slot always holds a buffer of
//!   [`BUF_SIZE`] bytes, so a slot whose packet was sent holds an empty buffer afterwards.
//!   Buffers are carved from anonymous mappings: memory is spent on the pages frames touched,
//!   not on a ring's idle spares.
//! - A port owns its buffer memory. Peers (other processes, the kernel) never see a batch; a
//!   backend that shares memory with a peer copies between that memory and the batch, after
//!   checking every index and length the peer supplied.
//! - Nothing here parses packets: the port layer knows frames only as bytes.
//! - A port may say how a worker can sleep until it has frames ([`Port::wakeup_fds`],
//!   [`Port::arm_wakeup`], [`Port::disarm_wakeup`]); [`wait`] holds the sleeping itself.

pub mod afpacket;
pub mod afxdp;
mod buf;
pub mod closed;
#[doc(hidden)]
pub mod fuzzing;
pub mod mem;
pub mod memif;
mod ring;
mod sys;
pub mod tap;
pub mod vhost;
pub mod vxlan;
pub mod wait;

pub use buf::{Batch, PktBuf, BUF_SIZE, HEADROOM, MAX_BURST, MAX_FRAME};

use std::os::fd::RawFd;

/// Per-port counters, as the port itself sees them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames handed to the caller by `rx_burst`.
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames accepted by `tx_burst`.
    pub tx_packets: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames `tx_burst` refused because the ring towards the peer was full.
    pub tx_full: u64,
    /// Frames lost on the way in, as the backend or kernel reports them (a full receive ring,
    /// a frame too long for a buffer, a descriptor a peer got wrong...).
    pub rx_dropped: u64,
    /// Frames refused on the way out for another reason than a full ring (link down, frame
    /// too long for the peer's buffers...).
    pub tx_errors: u64,
}

impl std::ops::AddAssign for PortStats {
    /// Adds `o`'s counters to these: a port made of several queues reports their sum.
    fn add_assign(&mut self, o: PortStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.tx_full += o.tx_full;
        self.rx_dropped += o.rx_dropped;
        self.tx_errors += o.tx_errors;
    }
}

/// Whether a port can move packets now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PortStatus {
    /// Moving packets.
    #[default]
    Up,
    /// Not moving packets, and why: no peer connected yet, the peer went away, the kernel
    /// interface disappeared... `rx_burst` returns 0 and `tx_burst` takes nothing meanwhile;
    /// the host keeps running.
    Down(String),
}

/// A batch-oriented packet port.
///
/// One worker thread drives a port; `Send` lets the port move to that thread.
pub trait Port: Send {
    /// A short name for logs and tables.
    fn name(&self) -> &str;

    /// Appends up to `batch.room()` received frames to `batch` and returns how many.
    fn rx_burst(&mut self, batch: &mut Batch) -> usize;

    /// Sends `batch[sel[0]], batch[sel[1]], ...` in that order and returns how many were taken:
    /// always a prefix of `sel`. The slots of taken packets hold empty buffers afterwards.
    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize;

    /// Counters since the port was made.
    fn stats(&self) -> PortStats;

    /// Whether the port moves packets now. Ports that are always up need not say.
    fn status(&self) -> PortStatus {
        PortStatus::Up
    }

    /// How the port runs where the kernel or a peer chose at open (AF_XDP: attach mode, copy or
    /// zero-copy, multi-buffer), for `status`. Ports with nothing to say need not say.
    fn mode_name(&self) -> Option<&'static str> {
        None
    }

    /// Counters the backend keeps by its own names, for `status`: appends `(name, count)` for
    /// each, zero or not (`vxlan`: its drops by reason, such as `short` or `unknown_vni`, which
    /// are also in `rx_dropped`/`tx_errors`/`tx_full`, and the datagrams replication made).
    /// Ports with nothing to say need not say.
    fn backend_counters(&self, _out: &mut Vec<(&'static str, u64)>) {}

    /// Control-path work that must not sit in the burst loop: accepting a peer, a handshake,
    /// noticing that an interface went away. The worker calls it about once a millisecond; it
    /// must not block. Ports without such work need not say.
    fn service(&mut self) {}

    /// For a worker about to sleep in poll(2): appends the descriptors that become readable
    /// when frames may have arrived (a socket, an eventfd the peer signals) or when
    /// [`Port::service`] has work (a control socket). Returns false if frames can arrive
    /// without any descriptor saying so (in-process rings): the worker must then keep naps
    /// short. A port with nothing to receive right now (down, waiting for a peer) appends what
    /// it has, maybe nothing, and returns true: its `service` runs on the sleeper's timeout.
    /// The set may change whenever the status does; ask before every sleep. Default: none.
    fn wakeup_fds(&self, _out: &mut Vec<RawFd>) -> bool {
        false
    }

    /// Called before sleeping on [`Port::wakeup_fds`]: asks the peer to signal them from now on
    /// where it must be asked (memif clears `MASK_INT`), consumes stale signals, and returns
    /// true if frames are waiting already, so the worker polls instead of sleeping. Ports
    /// whose descriptors are level-triggered sockets need do nothing.
    fn arm_wakeup(&mut self) -> bool {
        false
    }

    /// Called after the sleep: the worker polls again, so the peer may stop signalling.
    fn disarm_wakeup(&mut self) {}
}

impl<P: Port + ?Sized> Port for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        (**self).rx_burst(batch)
    }
    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        (**self).tx_burst(batch, sel)
    }
    fn stats(&self) -> PortStats {
        (**self).stats()
    }
    fn status(&self) -> PortStatus {
        (**self).status()
    }
    fn mode_name(&self) -> Option<&'static str> {
        (**self).mode_name()
    }
    fn backend_counters(&self, out: &mut Vec<(&'static str, u64)>) {
        (**self).backend_counters(out)
    }
    fn service(&mut self) {
        (**self).service()
    }
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        (**self).wakeup_fds(out)
    }
    fn arm_wakeup(&mut self) -> bool {
        (**self).arm_wakeup()
    }
    fn disarm_wakeup(&mut self) {
        (**self).disarm_wakeup()
    }
}
