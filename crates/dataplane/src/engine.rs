//! The batch engine: one worker's loop over its ports.
//!
//! Per port and burst: `rx_burst` → classify every frame (demux) → run each VR touched over its
//! packets, all of them at once → group by egress port → one `tx_burst` per port. One thread,
//! one pass, no queue between stages. VRs' extra packets (probes, flushed queues, fragments)
//! leave right after the burst that made them. What a port refuses is counted as `tx_full`
//! on the VR that sent it; a VR's `forwarded` counts only what a port accepted.

use ports::{Batch, Port, PortStats, MAX_BURST};

use crate::config::VrConfig;
use crate::counters::{PortCounters, TxTally};
use crate::demux::{Conflict, Demux, Target, NO_KEY};
use crate::switch::Switch;
use crate::vr::{BuildError, Fate, Meta, OutQueue, Vr};

const NONE: u16 = u16::MAX;
/// How often VR timers run, in nanoseconds.
const HOUSEKEEPING_NS: u64 = 1_000_000;
/// How often switches age their MAC tables.
const AGING_NS: u64 = 1_000_000_000;

/// What to count once a port has taken, or refused, a packet.
#[derive(Clone, Copy, Default)]
struct TxInfo {
    vr: u16,
    len: u16,
    transit: bool,
}

/// Per-port transmit lists.
struct Egress {
    sel: Vec<Vec<u16>>,
    touched: Vec<u16>,
}

impl Egress {
    fn new(ports: usize) -> Egress {
        Egress {
            sel: (0..ports).map(|_| Vec::with_capacity(MAX_BURST)).collect(),
            touched: Vec::with_capacity(ports),
        }
    }

    #[inline]
    fn add(&mut self, port: u16, i: u16) {
        let sel = &mut self.sel[port as usize];
        if sel.is_empty() {
            self.touched.push(port);
        }
        sel.push(i);
    }

    /// Sends each port's list with one `tx_burst` and reports every packet's outcome.
    fn flush(
        &mut self,
        ports: &mut [Box<dyn Port>],
        pcs: &mut [PortCounters],
        batch: &mut Batch,
        info: &[TxInfo],
        mut outcome: impl FnMut(&TxInfo, bool),
    ) {
        for &p in &self.touched {
            let sel = &mut self.sel[p as usize];
            let k = ports[p as usize].tx_burst(batch, sel);
            pcs[p as usize].tx_packets += k as u64;
            for (j, &i) in sel.iter().enumerate() {
                outcome(&info[i as usize], j < k);
            }
            sel.clear();
        }
        self.touched.clear();
    }
}

/// Transmits what VRs made (`out`) and empties it, tallying outcomes per VR.
fn transmit_out(
    ports: &mut [Box<dyn Port>],
    pcs: &mut [PortCounters],
    egress: &mut Egress,
    info: &mut [TxInfo],
    tallies: &mut [TxTally],
    out: &mut OutQueue,
) {
    if out.batch.is_empty() {
        return;
    }
    for (k, &(port, transit, vr)) in out.dest.iter().enumerate() {
        info[k] = TxInfo { vr, len: out.batch.get(k).len() as u16, transit };
        egress.add(port, k as u16);
    }
    egress.flush(ports, pcs, &mut out.batch, info, |t, sent| {
        tallies[t.vr as usize].count(t.transit, t.len, sent)
    });
    out.clear();
}

/// One worker: its ports, the VRs on them, and the scratch for one burst.
pub struct Engine {
    ports: Vec<Box<dyn Port>>,
    pcs: Vec<PortCounters>,
    vrs: Vec<Vr>,
    switches: Vec<Switch>,
    /// Per port: the switch and member it belongs to, or `None` for VR demux.
    member_of: Vec<Option<(u16, u16)>>,
    next_aging: u64,
    demux: Demux,
    batch: Batch,
    /// What VRs make beyond the packets they received; shared, as one VR runs at a time.
    out: OutQueue,
    /// Per VR: transmit outcomes not yet added to its counters.
    tallies: Vec<TxTally>,
    meta: Box<[Meta; MAX_BURST]>,
    info: Box<[TxInfo; MAX_BURST]>,
    egress: Egress,
    // Grouping by VR, as VALE chains packets per destination: head/tail per VR, next per packet.
    vr_head: Vec<u16>,
    vr_tail: Vec<u16>,
    next: Box<[u16; MAX_BURST]>,
    touched: Vec<u16>,
    sel: Box<[u16; MAX_BURST]>,
    next_housekeeping: u64,
}

impl Engine {
    /// A worker over `ports` running `vrs`; every VR interface must name a port in `ports`, and
    /// no two interfaces may share (port, VLAN, MAC).
    pub fn new(ports: Vec<Box<dyn Port>>, vrs: Vec<Vr>) -> Result<Engine, BuildError> {
        Self::with_burst(ports, vrs, MAX_BURST)
    }

    /// As [`Engine::new`], receiving at most `burst` (1..=256) frames per port and poll.
    pub fn with_burst(
        ports: Vec<Box<dyn Port>>,
        vrs: Vec<Vr>,
        burst: usize,
    ) -> Result<Engine, BuildError> {
        Self::build(ports, vrs, Vec::new(), burst)
    }

    /// A worker over `ports` running `vrs` and `switches`. A port is either a switch member
    /// (of one switch) or carries VR interfaces, never both.
    pub fn build(
        ports: Vec<Box<dyn Port>>,
        vrs: Vec<Vr>,
        switches: Vec<Switch>,
        burst: usize,
    ) -> Result<Engine, BuildError> {
        if !(1..=MAX_BURST).contains(&burst) {
            return Err(BuildError(format!("burst {burst} is outside 1..={MAX_BURST}")));
        }
        if vrs.len() >= NONE as usize || ports.len() >= NONE as usize {
            return Err(BuildError(format!(
                "{} VRs and {} ports: at most 65534 each",
                vrs.len(),
                ports.len()
            )));
        }
        let mut demux = Demux::new(ports.len());
        for (v, vr) in vrs.iter().enumerate() {
            for (i, f) in vr.ifaces().iter().enumerate() {
                if f.port as usize >= ports.len() {
                    return Err(BuildError(format!(
                        "vr {} interface {} is on port {}, but there are {} ports",
                        vr.name(),
                        f.name,
                        f.port,
                        ports.len()
                    )));
                }
                let v4: Vec<_> = f.v4.iter().map(|n| n.addr()).collect();
                let v6: Vec<_> = f.v6.iter().map(|n| n.addr()).chain([f.ll]).collect();
                let t = Target { vr: v as u16, iface: i as u16 };
                if let Err(c) = demux.add(f.port as usize, f.vlan.unwrap_or(0), f.mac, &v4, &v6, t)
                {
                    let (old, what) = match c {
                        Conflict::Mac(old) => (old, format!("MAC {}", f.mac)),
                        Conflict::Address(old, a) => (old, format!("address {a}")),
                    };
                    let o = &vrs[old.vr as usize];
                    return Err(BuildError(format!(
                        "vr {} interface {} and vr {} interface {} share port {}, vlan {:?} and {what}",
                        vr.name(),
                        f.name,
                        o.name(),
                        o.ifaces()[old.iface as usize].name,
                        f.port,
                        f.vlan,
                    )));
                }
            }
        }
        let mut member_of = vec![None; ports.len()];
        for (s, sw) in switches.iter().enumerate() {
            for (m, p) in sw.member_ports().enumerate() {
                let taken = if demux.has_port(p as usize) {
                    Some("carries VR interfaces".to_string())
                } else {
                    match member_of.get(p as usize) {
                        None => Some(format!("does not exist ({} ports)", ports.len())),
                        Some(Some((o, _))) => Some(format!(
                            "is already a member of switch {}",
                            switches[*o as usize].name()
                        )),
                        Some(None) => None,
                    }
                };
                if let Some(why) = taken {
                    return Err(BuildError(format!("switch {}: port {p} {why}", sw.name())));
                }
                member_of[p as usize] = Some((s as u16, m as u16));
            }
        }
        let n = ports.len();
        let tallies = vec![TxTally::default(); vrs.len()];
        Ok(Engine {
            tallies,
            switches,
            member_of,
            next_aging: 0,
            pcs: vec![PortCounters::default(); n],
            egress: Egress::new(n),
            ports,
            vr_head: vec![NONE; vrs.len()],
            vr_tail: vec![NONE; vrs.len()],
            touched: Vec::with_capacity(vrs.len().min(MAX_BURST)),
            vrs,
            demux,
            batch: Batch::new(burst),
            out: OutQueue::new(MAX_BURST),
            meta: Box::new([Meta::default(); MAX_BURST]),
            info: Box::new([TxInfo::default(); MAX_BURST]),
            next: Box::new([NONE; MAX_BURST]),
            sel: Box::new([0; MAX_BURST]),
            next_housekeeping: 0,
        })
    }

    /// Builds every VR from its config, then the engine.
    pub fn from_configs(ports: Vec<Box<dyn Port>>, vrs: &[VrConfig]) -> Result<Engine, BuildError> {
        let vrs = vrs.iter().map(Vr::new).collect::<Result<Vec<_>, _>>()?;
        Engine::new(ports, vrs)
    }

    /// One pass over every port: receive a burst from each and forward it. `now` is a
    /// monotonic time in nanoseconds; it drives neighbor timers and ICMP rate limits. Returns
    /// the number of frames received.
    pub fn poll(&mut self, now: u64) -> usize {
        let mut total = 0;
        for p in 0..self.ports.len() {
            self.batch.clear();
            let n = self.ports[p].rx_burst(&mut self.batch);
            if n == 0 {
                continue;
            }
            total += n;
            self.pcs[p].rx_packets += n as u64;
            if let Some((s, m)) = self.member_of[p] {
                self.switches[s as usize].forward(
                    m,
                    &mut self.batch,
                    n,
                    &mut self.ports,
                    &mut self.pcs,
                    now,
                );
                continue;
            }
            self.classify(p, n);
            self.run_vrs(now);
            self.egress(n);
            self.settle();
        }
        if now >= self.next_housekeeping {
            self.next_housekeeping = now + HOUSEKEEPING_NS;
            self.housekeeping(now);
        }
        if now >= self.next_aging {
            self.next_aging = now + AGING_NS;
            for s in &mut self.switches {
                s.age(now);
            }
        }
        total
    }

    fn classify(&mut self, p: usize, n: usize) {
        let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
        for i in 0..n {
            let m = &mut self.meta[i];
            m.fate = Fate::Done;
            match self.demux.classify(p, self.batch.get(i).frame(), &mut last) {
                Ok(c) => {
                    *m = Meta {
                        vr: c.target.vr,
                        iface: c.target.iface,
                        l3: c.l3,
                        ethertype: c.ethertype,
                        fate: Fate::Done,
                    };
                    let v = c.target.vr as usize;
                    if self.vr_head[v] == NONE {
                        self.vr_head[v] = i as u16;
                        self.touched.push(v as u16);
                    } else {
                        self.next[self.vr_tail[v] as usize] = i as u16;
                    }
                    self.vr_tail[v] = i as u16;
                    self.next[i] = NONE;
                }
                Err(r) => self.pcs[p].drops[r as usize] += 1,
            }
        }
    }

    /// Runs every VR the burst touched over its packets.
    fn run_vrs(&mut self, now: u64) {
        let Engine {
            ports,
            pcs,
            vrs,
            batch,
            out,
            tallies,
            meta,
            info,
            egress,
            vr_head,
            next,
            touched,
            sel,
            ..
        } = self;
        for &v in touched.iter() {
            let mut n = 0;
            let mut i = vr_head[v as usize];
            while i != NONE {
                sel[n] = i;
                n += 1;
                i = next[i as usize];
            }
            vr_head[v as usize] = NONE;
            out.vr = v;
            let mut flush =
                |o: &mut OutQueue| transmit_out(ports, pcs, egress, &mut info[..], tallies, o);
            vrs[v as usize].process(
                batch.packets_mut(),
                &sel[..n],
                &mut meta[..],
                now,
                out,
                &mut flush,
            );
        }
    }

    /// After the burst itself, what the VRs made (probes, flushed queues, fragments), then the
    /// counts on the VRs the burst touched.
    fn settle(&mut self) {
        let Engine { ports, pcs, vrs, out, tallies, info, egress, touched, .. } = self;
        transmit_out(ports, pcs, egress, &mut info[..], tallies, out);
        for &v in touched.iter() {
            vrs[v as usize].core.counters.add(&std::mem::take(&mut tallies[v as usize]));
        }
        touched.clear();
    }

    fn egress(&mut self, n: usize) {
        for i in 0..n {
            if let Fate::Tx { port, transit } = self.meta[i].fate {
                self.info[i] =
                    TxInfo { vr: self.meta[i].vr, len: self.batch.get(i).len() as u16, transit };
                self.egress.add(port, i as u16);
            }
        }
        let tallies = &mut self.tallies;
        self.egress.flush(
            &mut self.ports,
            &mut self.pcs,
            &mut self.batch,
            &self.info[..],
            |t, sent| tallies[t.vr as usize].count(t.transit, t.len, sent),
        );
    }

    /// Ports' control-path work, neighbor timers of every VR, and whatever they or earlier
    /// resolutions left to send.
    fn housekeeping(&mut self, now: u64) {
        for p in self.ports.iter_mut() {
            p.service();
        }
        let Engine { ports, pcs, vrs, out, tallies, info, egress, .. } = self;
        for (v, vr) in vrs.iter_mut().enumerate() {
            out.vr = v as u16;
            vr.tick(now, out);
            transmit_out(ports, pcs, egress, &mut info[..], tallies, out);
            vr.core.counters.add(&std::mem::take(&mut tallies[v]));
        }
    }

    /// The VRs, in configuration order.
    pub fn vrs(&self) -> &[Vr] {
        &self.vrs
    }

    /// The switches, in configuration order.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }

    /// A VR by name.
    pub fn vr(&self, name: &str) -> Option<&Vr> {
        self.vrs.iter().find(|v| v.name() == name)
    }

    /// Classification counters of port `p`.
    pub fn port_counters(&self, p: usize) -> &PortCounters {
        &self.pcs[p]
    }

    /// Port `p`'s own counters.
    pub fn port_stats(&self, p: usize) -> PortStats {
        self.ports[p].stats()
    }

    /// Whether port `p` moves packets now.
    pub fn port_status(&self, p: usize) -> ports::PortStatus {
        self.ports[p].status()
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Name of port `p`.
    pub fn port_name(&self, p: usize) -> &str {
        self.ports[p].name()
    }

    /// Every table and counter, for test failures and `show`.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        for (p, c) in self.pcs.iter().enumerate() {
            s += &format!("port {} {:?} {:?}\n", self.ports[p].name(), c, self.ports[p].stats());
        }
        for v in &self.vrs {
            s += &v.dump();
        }
        s
    }
}
