//! Chain and flush, shared by the VRs' egress and the switches: as a burst's frames are given
//! their way out they are staged on their egress port's list, and at the end of the burst each
//! port's list leaves in one `tx_burst` (VALE's per-destination lists, VPP's interface-output
//! frames). What a port refuses is accounted by whoever staged the frames ([`TxOutcome`]): on
//! the VRs that made them (`tx_full`, `generated_dropped`) or on the switch member that was to
//! send them (`tx_full`).

use ports::{Batch, Port, MAX_BURST};

use crate::counters::PortCounters;

/// Per-port transmit lists (512 bytes a port), for the cell's ports.
pub(crate) struct Egress {
    sel: Vec<Vec<u16>>,
    /// Ports with a list, in order of their first frame.
    touched: Vec<u16>,
}

/// What a flush asks of the frames' owner around each port's `tx_burst`.
pub(crate) trait TxOutcome {
    /// Before port `p` is offered `sel` of `batch`: a last touch of the frames (a switch's
    /// 802.1Q tag) or a look at them (a capture).
    fn before(&mut self, _p: u16, _batch: &mut Batch, _sel: &[u16]) {}
    /// Port `p` took the first `taken` frames of `sel`, and refused the rest.
    fn after(&mut self, p: u16, sel: &[u16], taken: usize);
}

impl Egress {
    pub fn new(ports: usize) -> Egress {
        let mut e = Egress { sel: Vec::new(), touched: Vec::with_capacity(ports) };
        e.add_ports(ports);
        e
    }

    /// Room for `n` more ports.
    pub fn add_ports(&mut self, n: usize) {
        self.sel.extend((0..n).map(|_| Vec::with_capacity(MAX_BURST)));
        self.touched.reserve(n);
    }

    /// Stages slot `i` of the burst's batch on port `port`.
    #[inline]
    pub fn add(&mut self, port: u16, i: u16) {
        let sel = &mut self.sel[port as usize];
        if sel.is_empty() {
            self.touched.push(port);
        }
        sel.push(i);
    }

    /// Sends each port's list from `batch` with one `tx_burst`, ports in order of their first
    /// frame, and empties the lists.
    pub fn flush(
        &mut self,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
        batch: &mut Batch,
        acct: &mut impl TxOutcome,
    ) {
        for &p in &self.touched {
            let sel = &mut self.sel[p as usize];
            acct.before(p, batch, sel);
            let k = send(&mut *ports[p as usize], &mut pcs[p as usize], batch, sel);
            acct.after(p, sel, k);
            sel.clear();
        }
        self.touched.clear();
    }
}

/// A cell's ports, their counters and transmit lists: what a burst sends through.
pub(crate) struct Links<'a> {
    pub ports: &'a mut [Box<dyn Port>],
    pub pcs: &'a mut [PortCounters],
    pub egress: &'a mut Egress,
}

impl Links<'_> {
    /// Sends what was staged from `batch`, accounted by `acct`.
    #[inline]
    pub fn flush(&mut self, batch: &mut Batch, acct: &mut impl TxOutcome) {
        self.egress.flush(self.ports, self.pcs, batch, acct);
    }

    /// Offers `sel` of `batch` to port `p` at once (frames not staged: a switch's copies).
    #[inline]
    pub fn send(&mut self, p: usize, batch: &mut Batch, sel: &[u16]) -> usize {
        send(&mut *self.ports[p], &mut self.pcs[p], batch, sel)
    }
}

/// Offers `sel` of `batch` to `port` in one `tx_burst`, counting what it took on the port;
/// returns that count (the frames it took are the first ones of `sel`).
#[inline]
pub(crate) fn send(
    port: &mut dyn Port,
    pc: &mut PortCounters,
    batch: &mut Batch,
    sel: &[u16],
) -> usize {
    let k = port.tx_burst(batch, sel);
    pc.tx_packets += k as u64;
    k
}
