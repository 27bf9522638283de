//! The pipeline's shared words: what a packet's metadata says, where it goes, the scratch a
//! worker lends to the VR it runs, and why a VR cannot be built.
//!
//! A leaf: it imports nothing else from the crate but `config`, so every stage (worker, cell,
//! VR, routes, switch, observation) can use it and the modules above it read in one direction:
//! worker → cell → vr → routes → these types.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use fib::NextHop;
use ports::{Batch, PktBuf, MAX_BURST};
use wire::MacAddr;

pub(crate) use crate::config::BuildError;
use crate::config::{IfaceId, PortId};

/// A per-packet index that means "none" (no next packet, no VR).
pub(crate) const NONE: u16 = u16::MAX;

/// Where a packet goes when the VR is done with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Nothing to send: dropped, consumed or queued (and counted).
    Done,
    /// Send out of `port`. `transit` marks forwarded traffic, as opposed to packets the VR made.
    Tx { port: PortId, transit: bool },
}

/// Per-packet state from classification to egress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub vr: u16,
    pub iface: IfaceId,
    pub l3: u16,
    pub ethertype: u16,
    pub fate: Fate,
}

impl Default for Meta {
    fn default() -> Self {
        Meta { vr: 0, iface: 0, l3: 0, ethertype: 0, fate: Fate::Done }
    }
}

/// Packets VRs make beyond those they received, with their egress: one per worker, lent to
/// each VR while it runs, and emptied by the engine after it.
pub(crate) struct OutQueue {
    pub batch: Batch,
    /// Per packet: egress port, transit or made by the VR, and which VR.
    pub dest: Vec<(PortId, bool, u16)>,
    /// The VR now running (set by the engine).
    pub vr: u16,
}

impl OutQueue {
    pub fn new(cap: usize) -> OutQueue {
        OutQueue { batch: Batch::new(cap), dest: Vec::with_capacity(cap), vr: 0 }
    }

    /// Builds a packet in the next spare slot with `f`; keeps it if `f` says to send it.
    /// False if there is no spare slot or `f` decided not to send.
    pub(crate) fn emit(&mut self, f: impl FnOnce(&mut PktBuf) -> Fate) -> bool {
        let Some(buf) = self.batch.spare_mut() else { return false };
        match f(buf) {
            Fate::Tx { port, transit } => {
                self.batch.commit();
                self.dest.push((port, transit, self.vr));
                true
            }
            Fate::Done => false,
        }
    }

    pub fn clear(&mut self) {
        self.batch.clear();
        self.dest.clear();
    }
}

/// Lookup scratch for one batch: one per worker, lent to each VR while it runs (1024 VRs
/// would otherwise carry 7 KiB each).
pub(crate) struct Lookup {
    pub(crate) keys4: [u32; MAX_BURST],
    pub(crate) keys6: [u128; MAX_BURST],
    pub(crate) nh4: [NextHop; MAX_BURST],
    pub(crate) nh6: [NextHop; MAX_BURST],
    pub(crate) at4: [u16; MAX_BURST],
    pub(crate) at6: [u16; MAX_BURST],
}

impl Lookup {
    pub fn new() -> Box<Lookup> {
        Box::new(Lookup {
            keys4: [0; MAX_BURST],
            keys6: [0; MAX_BURST],
            nh4: [0; MAX_BURST],
            nh6: [0; MAX_BURST],
            at4: [0; MAX_BURST],
            at6: [0; MAX_BURST],
        })
    }

    /// Before a one-packet run: marks the first next-hop slots as unused.
    pub(crate) fn mark(&mut self) {
        self.nh4[0] = NextHop::MAX;
        self.nh6[0] = NextHop::MAX;
    }

    /// After a one-packet run: the destination it looked up and the next hop found, if any.
    pub(crate) fn single(&self) -> Option<(IpAddr, NextHop)> {
        if self.nh4[0] != NextHop::MAX {
            Some((IpAddr::V4(Ipv4Addr::from(self.keys4[0])), self.nh4[0]))
        } else if self.nh6[0] != NextHop::MAX {
            Some((IpAddr::V6(Ipv6Addr::from(self.keys6[0])), self.nh6[0]))
        } else {
            None
        }
    }
}

/// Sends a VR's output queue before its burst ends (the cell's transmit side implements it).
pub(crate) trait Transmit {
    /// Transmits what `out` holds and empties it.
    fn transmit(&mut self, out: &mut OutQueue);
}

/// What one burst's VR runs share: its time, the lookup scratch, the queue of packets the VRs
/// make, and the cell's transmit side, so a VR can have that queue sent before the burst ends.
pub(crate) struct Burst<'a> {
    pub now: u64,
    pub lookup: &'a mut Lookup,
    pub out: &'a mut OutQueue,
    pub tx: &'a mut dyn Transmit,
}

impl Burst<'_> {
    /// Sends `out` now, counting outcomes on the VRs concerned: fragmentation can make more
    /// packets than `out` holds (rare: a call through the cell's transmit side, not per packet).
    pub fn flush_out(&mut self) {
        self.tx.transmit(self.out);
    }
}

/// An address as adjacencies and the neighbor table key it: IPv4-mapped for IPv4.
pub(crate) fn nkey_ip(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => 0xffff_0000_0000 | u128::from(u32::from(a)),
        IpAddr::V6(a) => a.into(),
    }
}

/// The EUI-64 link-local address of a MAC (RFC 4291 appendix A).
pub(crate) fn link_local(mac: MacAddr) -> Ipv6Addr {
    let m = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}
