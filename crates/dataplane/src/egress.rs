//! Chain and flush, shared by the VRs' egress and the switches: as a burst's frames are given
//! their way out they are staged on their egress port's list, and at the end of the burst each
//! port's list leaves in one `tx_burst` (VALE's per-destination lists, VPP's interface-output
//! frames). What a port refuses is accounted by whoever staged the frames ([`TxOutcome`]): on
//! the VRs that made them (`tx_full`, `generated_dropped`) or on the switch member that was to
//! send them (`tx_full`).
//!
//! A port with an impairment ([`Impair`], `impair.rs`) is sent to through it: its frames are
//! all taken (the impairment drops, holds or passes each and counts what it drops), and what
//! is due leaves at once; what waits leaves on a later poll ([`Egress::release`]). A port
//! without one costs a check per burst. A capture of an impaired port's drops gets a copy of
//! each frame its impairment drops; the frames' owner is told the impairment took them all
//! before it is offered them, so the capture's staged transmit copies are published first.

use ports::{Batch, Port, MAX_BURST};

use crate::counters::PortCounters;
use crate::impair::{Impair, Watch};
use crate::observe::Tap;

/// Per-port transmit lists (512 bytes a port), for the cell's ports.
pub(crate) struct Egress {
    sel: Vec<Vec<u16>>,
    /// Ports with a list, in order of their first frame.
    touched: Vec<u16>,
    /// Per port: its impairment, if it has one (or had one with frames still waiting).
    imp: Vec<Option<Box<Impair>>>,
    /// Whether any port has an impairment: the one check per poll for releases.
    impaired: bool,
    /// The poll's time, for impairments.
    pub now: u64,
}

/// What a flush asks of the frames' owner around each port's `tx_burst`.
pub(crate) trait TxOutcome {
    /// Before port `p` is offered `sel` of `batch`: a last touch of the frames (a switch's
    /// 802.1Q tag) or a look at them (a capture).
    fn before(&mut self, _p: u16, _batch: &mut Batch, _sel: &[u16]) {}
    /// Port `p` took the first `taken` frames of `sel`, and refused the rest.
    fn after(&mut self, p: u16, sel: &[u16], taken: usize);
    /// What is to see the drops of impaired port `p`: by default `tap`, the cell's capture of
    /// that port's drops, if there is one.
    fn watch<'s>(&'s mut self, _p: u16, tap: Option<&'s mut Tap>) -> Option<&'s mut dyn Watch> {
        tap.map(|t| t as &mut dyn Watch)
    }
}

impl Egress {
    pub fn new(ports: usize) -> Egress {
        let mut e = Egress {
            sel: Vec::new(),
            touched: Vec::with_capacity(ports),
            imp: Vec::new(),
            impaired: false,
            now: 0,
        };
        e.add_ports(ports);
        e
    }

    /// Room for `n` more ports.
    pub fn add_ports(&mut self, n: usize) {
        self.sel.extend((0..n).map(|_| Vec::with_capacity(MAX_BURST)));
        self.imp.extend((0..n).map(|_| None));
        self.touched.reserve(n);
    }

    /// Port `p`'s impairment.
    pub fn impair(&self, p: usize) -> Option<&Impair> {
        self.imp.get(p).and_then(|i| i.as_deref())
    }

    /// Port `p`'s impairment, to change it.
    pub fn impair_mut(&mut self, p: usize) -> &mut Option<Box<Impair>> {
        &mut self.imp[p]
    }

    /// After a change of impairments: whether any is left, dropping those that impair nothing
    /// and hold nothing.
    pub fn tidy_impairs(&mut self) {
        for i in &mut self.imp {
            if i.as_ref().is_some_and(|x| x.config().is_none() && x.held() == 0) {
                *i = None;
            }
        }
        self.impaired = self.imp.iter().any(Option::is_some);
    }

    /// Sends what impairments hold that is due by `now`, counting it on the ports (and what a
    /// port refuses in `tap`, if it captures that port's drops).
    #[inline]
    pub fn release(
        &mut self,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
        now: u64,
        tap: Option<&mut Tap>,
    ) {
        self.now = now;
        if self.impaired {
            self.release_all(ports, pcs, now, tap);
        }
    }

    #[cold]
    fn release_all(
        &mut self,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
        now: u64,
        mut tap: Option<&mut Tap>,
    ) {
        let mut drained = false;
        for (p, i) in self.imp.iter_mut().enumerate() {
            if let Some(i) = i {
                let w = Tap::drops_at(tap.as_deref_mut(), p).map(|t| t as &mut dyn Watch);
                pcs[p].tx_packets += i.release_watched(now, &mut *ports[p], w) as u64;
                drained |= i.config().is_none() && i.held() == 0;
            }
        }
        if drained {
            // An impairment removed while frames waited: gone once the last has left.
            self.tidy_impairs();
        }
    }

    /// Whether any port has an impairment.
    #[inline]
    pub fn is_impaired(&self) -> bool {
        self.impaired
    }

    /// The earliest time a frame held by an impairment is due, if one is held.
    pub fn next_due(&self) -> Option<u64> {
        if !self.impaired {
            return None;
        }
        self.imp.iter().flatten().filter_map(|i| i.next_due()).min()
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
        mut tap: Option<&mut Tap>,
    ) {
        for &p in &self.touched {
            let sel = &mut self.sel[p as usize];
            acct.before(p, batch, sel);
            let (port, pc) = (&mut *ports[p as usize], &mut pcs[p as usize]);
            match self.imp[p as usize].as_deref_mut() {
                None => {
                    let k = port.tx_burst(batch, sel);
                    pc.tx_packets += k as u64;
                    acct.after(p, sel, k);
                }
                Some(imp) => {
                    // Every frame is taken: the owner accounts them before the impairment
                    // copies its drops into a capture, which comes after its transmit copies.
                    acct.after(p, sel, sel.len());
                    let watch = acct.watch(p, Tap::drops_at(tap.as_deref_mut(), p as usize));
                    impaired(port, pc, imp, self.now, batch, sel, watch);
                }
            }
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
    /// The cell's capture, for impaired ports' drops, when the frames' owner holds none.
    pub tap: Option<&'a mut Tap>,
}

impl Links<'_> {
    /// Sends what was staged from `batch`, accounted by `acct`.
    #[inline]
    pub fn flush(&mut self, batch: &mut Batch, acct: &mut impl TxOutcome) {
        self.egress.flush(self.ports, self.pcs, batch, acct, self.tap.as_deref_mut());
    }

    /// Offers `sel` of `batch` to port `p` at once (frames not staged: a switch's copies).
    #[inline]
    pub fn send(&mut self, p: usize, batch: &mut Batch, sel: &[u16]) -> usize {
        let imp = self.egress.imp[p].as_deref_mut();
        let (port, pc, now) = (&mut *self.ports[p], &mut self.pcs[p], self.egress.now);
        if let Some(i) = imp {
            let watch = Tap::drops_at(self.tap.as_deref_mut(), p).map(|t| t as &mut dyn Watch);
            return impaired(port, pc, i, now, batch, sel, watch);
        }
        let k = port.tx_burst(batch, sel);
        pc.tx_packets += k as u64;
        k
    }
}

/// Offers `sel` of `batch` to an impaired port: every frame is taken, what becomes of each is
/// the impairment's to count (and to show `watch`: a capture of the port's drops, a trace).
#[cold]
#[inline(never)]
fn impaired(
    port: &mut dyn Port,
    pc: &mut PortCounters,
    imp: &mut Impair,
    now: u64,
    batch: &mut Batch,
    sel: &[u16],
    mut watch: Option<&mut (dyn Watch + '_)>,
) -> usize {
    imp.offer_watched(batch, sel, now, watch.as_deref_mut());
    pc.tx_packets += imp.release_watched(now, port, watch) as u64;
    sel.len()
}
