//! Parallel virtual routers (PVR): one logical VR run as N replicas, one per worker.
//!
//! Contract:
//! - **Spreading is the port's, not a thread's.** Each replica runs in its own cell on its own
//!   worker and owns one queue of each of the VR's ports, filled by what the backend offers:
//!   for `mem`, the peer ([`RssPort`]) puts each frame on the queue its [`flow_hash`] picks;
//!   for AF_PACKET, the kernel's fanout group hands each frame to one replica's socket by its
//!   symmetric flow hash; for memif, the peer chooses the ring (queue `r` is ring `r`). No
//!   dispatcher thread and no hand-off ring sits between receiving and forwarding, and a flow
//!   always reaches the same replica, so no flow is reordered.
//! - **One RIB.** Control keeps one [`crate::RouteTable`] per logical VR; every replica is built
//!   with a clone of its [`RouteView`] and so reads the same published FIBs. New adjacencies
//!   are installed on every replica before the FIB that uses them is published (control's
//!   job: `install` returns only once all have them).
//! - **Neighbors kept consistent**: each replica has its own table; what one learns from the
//!   wire is relayed to the others (see [`NeighborShare`]).
//! - **Names.** Replica `r` of VR `a` is a VR named `a#r` ([`replica_name`]): counters and
//!   status list each replica, and the logical VR is their sum.
//! - Per-replica state that is not shared: ICMP error rate limits (so the logical VR may send
//!   up to N times the configured rate), reservations and batch limits (each replica gets the
//!   VR's).

use ports::{Batch, Port, PortStats, PortStatus};

use crate::config::VrConfig;
use crate::flowhash::{flow_hash, pick};
use crate::routes::RouteView;
use crate::types::BuildError;
use crate::vr::{NeighborShare, Vr};

/// The most replicas a VR may have.
pub const MAX_REPLICAS: usize = 64;

/// The name of replica `r` of VR `vr`.
pub fn replica_name(vr: &str, r: usize) -> String {
    format!("{vr}#{r}")
}

/// The logical VR a replica's name belongs to, and its index (`None` for a plain VR).
pub fn replica_of(name: &str) -> Option<(&str, usize)> {
    let (vr, r) = name.rsplit_once('#')?;
    Some((vr, r.parse().ok()?))
}

/// Builds `n` replicas of `cfg` (1..=[`MAX_REPLICAS`]), each forwarding with `view`'s FIBs and
/// adjacencies, named by [`replica_name`], their neighbor tables joined.
pub fn replicas(cfg: &VrConfig, view: &RouteView, n: usize) -> Result<Vec<Vr>, BuildError> {
    if !(1..=MAX_REPLICAS).contains(&n) {
        return Err(BuildError(format!(
            "vr {}: {n} replicas, allowed 1..={MAX_REPLICAS}",
            cfg.name
        )));
    }
    let shares = NeighborShare::group(n);
    let mut out = Vec::with_capacity(n);
    for (r, share) in shares.into_iter().enumerate() {
        let mut c = cfg.clone();
        c.name = replica_name(&cfg.name, r);
        let mut vr = Vr::with_routes(&c, view.clone())?;
        vr.join_replicas(share);
        out.push(vr);
    }
    Ok(out)
}

/// The peer's side of a multi-queue port: what a NIC's RSS does, for in-process peers (the
/// generator, tests). It sends each frame on the queue its flow hash picks and receives from
/// every queue in turn.
///
/// `tx_burst` keeps the port contract (what it takes is a prefix of `sel`): it sends runs of
/// consecutive frames bound for one queue and stops at the first run a queue does not take
/// whole. That costs a ring push per run (short with many flows), which is why generators
/// pre-fill rings before a timed phase rather than send through this on the clock.
pub struct RssPort {
    name: String,
    queues: Vec<Box<dyn Port>>,
    next_rx: usize,
}

impl RssPort {
    /// A port over `queues` (at least one), called `name`.
    pub fn new(name: &str, queues: Vec<Box<dyn Port>>) -> RssPort {
        assert!(!queues.is_empty(), "an RSS port needs a queue");
        RssPort { name: name.to_string(), queues, next_rx: 0 }
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The queue `frame` goes to.
    pub fn queue_of(&self, frame: &[u8]) -> usize {
        pick(flow_hash(frame), self.queues.len())
    }

    /// Queue `q` itself (to fill it directly).
    pub fn queue_mut(&mut self, q: usize) -> &mut dyn Port {
        &mut *self.queues[q]
    }

    /// Each queue's own counters.
    pub fn queue_stats(&self) -> Vec<PortStats> {
        self.queues.iter().map(|q| q.stats()).collect()
    }
}

/// Receives from every queue into `batch`, starting one queue later on each call so that no
/// queue is always served last when the batch fills (RssPort's and the MSR balancer's receive).
pub(crate) fn rx_rotating(
    queues: &mut [Box<dyn Port>],
    next: &mut usize,
    batch: &mut Batch,
) -> usize {
    let n = queues.len();
    let mut got = 0;
    for k in 0..n {
        if batch.room() == 0 {
            break;
        }
        got += queues[(*next + k) % n].rx_burst(batch);
    }
    *next = (*next + 1) % n;
    got
}

impl Port for RssPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        rx_rotating(&mut self.queues, &mut self.next_rx, batch)
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        let n = self.queues.len();
        let mut sent = 0;
        while sent < sel.len() {
            let q = pick(flow_hash(batch.get(sel[sent] as usize).frame()), n);
            let mut end = sent + 1;
            while end < sel.len() && pick(flow_hash(batch.get(sel[end] as usize).frame()), n) == q {
                end += 1;
            }
            let k = self.queues[q].tx_burst(batch, &sel[sent..end]);
            sent += k;
            if sent < end {
                break;
            }
        }
        sent
    }

    fn stats(&self) -> PortStats {
        let mut s = PortStats::default();
        for q in &self.queues {
            s += q.stats();
        }
        s
    }

    fn status(&self) -> PortStatus {
        self.queues.iter().map(|q| q.status()).find(|s| *s != PortStatus::Up).unwrap_or_default()
    }

    fn service(&mut self) {
        self.queues.iter_mut().for_each(|q| q.service());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ports::mem;

    #[test]
    fn rss_sends_by_flow_and_takes_only_a_prefix_when_a_queue_is_full() {
        let (a0, mut b0) = mem::pair("q0", "peer0", 2);
        let (a1, mut b1) = mem::pair("q1", "peer1", 64);
        let mut rss = RssPort::new("p", vec![Box::new(a0), Box::new(a1)]);
        let frames: Vec<Vec<u8>> = (0..40).map(crate::flowhash::udp4_from_port).collect();
        let q: Vec<usize> = frames.iter().map(|f| rss.queue_of(f)).collect();
        assert!(q.contains(&0) && q.contains(&1));
        let mut b = Batch::new(40);
        frames.iter().for_each(|f| assert!(b.push_copy(f)));
        let sel: Vec<u16> = (0..40).collect();
        let took = rss.tx_burst(&mut b, &sel);
        // Queue 0 holds 2: the third frame for it, and everything after, is refused.
        let third = q.iter().enumerate().filter(|(_, &x)| x == 0).nth(2).map(|(i, _)| i).unwrap();
        assert_eq!(took, third);
        let mut got = Batch::new(64);
        assert_eq!(b0.rx_burst(&mut got), 2);
        got.clear();
        assert_eq!(b1.rx_burst(&mut got), third - 2);
        // What each queue got is its flows' frames, in order.
        let sent1: Vec<&Vec<u8>> =
            frames[..third].iter().zip(&q).filter(|(_, &x)| x == 1).map(|(f, _)| f).collect();
        for (i, f) in sent1.iter().enumerate() {
            assert_eq!(got.get(i).frame(), &f[..]);
        }
        assert_eq!(rss.stats().tx_packets, third as u64);
    }

    #[test]
    fn replica_names_round_trip() {
        assert_eq!(replica_of(&replica_name("vr1", 3)), Some(("vr1", 3)));
        assert_eq!(replica_of("vr1"), None);
        assert_eq!(replica_of("a#b"), None);
    }
}
