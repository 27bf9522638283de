//! Per-VR ingress queues on shared ports: isolation at ingress, as SR-IOV does it (issue 25
//! item 3; seed 004: the NIC steers each frame by destination MAC to its VF's queue before any
//! CPU works on it).
//!
//! **Why.** Without them a port that feeds several VRs runs to completion: a burst is
//! classified and every VR it touched runs at once. A flooded VR with a reservation then holds
//! the worker for as long as its budget lasts each period; the shared receive ring fills
//! meanwhile, and the neighbour's frames are lost at the ring, where no reservation can protect
//! them (issue 25: 60-78 % kept).
//!
//! **How.** Receiving and serving are split. A burst from a shared port is only classified: each
//! frame is swapped (its buffer exchanged, not copied) into its VR's [`Queue`], a ring of
//! buffers made when the queues are set up; a frame beyond its queue's length is dropped there
//! and counted on its VR as `ingress_queue_full`. Then every pass serves the queues round-robin
//! ([`Ingress::schedule`]): each VR with frames gets a turn of up to `quantum` frames, all of
//! them together at most `per_pass`, and each turn is first admitted by the VR's reservation.
//! A VR out of budget keeps its frames queued for its next period, so what overflows is its own
//! queue. The shared ring is thus drained every pass at the cost of classification alone,
//! however long a VR's budget lasts, and a VR's overload ends in its own queue.
//!
//! **Cost.** A port that feeds one VR never comes here: the cell checks one flag per burst.
//! Receiving and classifying a queued burst is the port's work (what the NIC's steering is in
//! SR-IOV): it is counted as necessary work of the worker and charged to no VR.

use ports::{Batch, PktBuf};

use crate::config::BuildError;
use crate::types::Meta;

/// Longest per-VR ingress queue.
pub const MAX_INGRESS_QUEUE: u16 = 4096;

/// How a cell's per-VR ingress queues are sized and served (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngressQueues {
    /// Frames each VR's queue holds, 1..=[`MAX_INGRESS_QUEUE`].
    pub limit: u16,
    /// Frames one VR may be served in one turn, 1..=256.
    pub quantum: u16,
    /// Frames served per pass over the cell, all VRs together, 1..=256 (one worker batch).
    /// Small enough that a pass's service is short next to the time the shared ring takes to
    /// fill: that is what keeps the ring drained.
    pub per_pass: u16,
}

impl Default for IngressQueues {
    fn default() -> Self {
        IngressQueues { limit: 256, quantum: 32, per_pass: 64 }
    }
}

impl IngressQueues {
    /// Refuses a value out of its range, naming the field.
    pub fn check(&self) -> Result<(), BuildError> {
        let max = ports::MAX_BURST as u16;
        for (field, v, hi) in [
            ("limit", self.limit, MAX_INGRESS_QUEUE),
            ("quantum", self.quantum, max),
            ("per_pass", self.per_pass, max),
        ] {
            if !(1..=hi).contains(&v) {
                return Err(BuildError(format!("ingress queues: {field} {v} is not in 1..={hi}")));
            }
        }
        Ok(())
    }
}

/// One VR's queue: a ring of buffers, each with the frame's classification and port.
pub(crate) struct Queue {
    bufs: Box<[PktBuf]>,
    meta: Box<[Meta]>,
    port: Box<[u16]>,
    head: usize,
    len: usize,
    /// Frames planned for this pass's service (see [`Ingress::schedule`]).
    share: usize,
}

impl Queue {
    /// A queue of `limit` buffers (0: a VR on no shared port, which holds nothing). Allocates.
    pub fn new(limit: usize) -> Queue {
        Queue {
            bufs: (0..limit).map(|_| PktBuf::new()).collect(),
            meta: vec![Meta::default(); limit].into_boxed_slice(),
            port: vec![0; limit].into_boxed_slice(),
            head: 0,
            len: 0,
            share: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Takes packet `i` of `batch` (its slot gets a spare buffer in exchange), or refuses it
    /// if the queue is full.
    #[inline]
    pub fn push(&mut self, batch: &mut Batch, i: usize, m: Meta, port: u16) -> bool {
        let cap = self.bufs.len();
        if self.len == cap {
            return false;
        }
        let t = (self.head + self.len) % cap;
        batch.swap_buf(i, &mut self.bufs[t]);
        self.meta[t] = m;
        self.port[t] = port;
        self.len += 1;
        true
    }

    /// Moves the oldest frame into slot `i` of `batch` (a slot below its length), returning
    /// its classification and port.
    #[inline]
    pub fn pop_into(&mut self, batch: &mut Batch, i: usize) -> Option<(Meta, u16)> {
        if self.len == 0 {
            return None;
        }
        let h = self.head;
        batch.swap_buf(i, &mut self.bufs[h]);
        self.head = (h + 1) % self.bufs.len();
        self.len -= 1;
        Some((self.meta[h], self.port[h]))
    }

    /// Forgets every frame, returning the port and length of each (for counting).
    pub fn drain(&mut self) -> impl Iterator<Item = (u16, u64)> + '_ {
        let (h, n, cap) = (self.head, self.len, self.bufs.len().max(1));
        self.head = 0;
        self.len = 0;
        (0..n).map(move |k| {
            let s = (h + k) % cap;
            (self.port[s], self.bufs[s].len() as u64)
        })
    }
}

/// The queues of a cell's VRs and the round-robin over them.
pub(crate) struct Ingress {
    pub cfg: IngressQueues,
    pub queues: Vec<Queue>,
    /// The VR whose turn comes first in the next pass.
    cursor: usize,
    /// Frames in all queues.
    pub backlog: usize,
    /// This pass's turns: (VR, frames), in service order.
    pub plan: Vec<(u16, u16)>,
}

impl Ingress {
    /// Queues for VRs `0..vrs`: `limit` frames for those `on_shared` says sit on a shared port,
    /// none for the others. Allocates.
    pub fn new(cfg: IngressQueues, vrs: usize, on_shared: impl Fn(usize) -> bool) -> Ingress {
        let size = |v| if on_shared(v) { cfg.limit as usize } else { 0 };
        Ingress {
            cfg,
            queues: (0..vrs).map(|v| Queue::new(size(v))).collect(),
            cursor: 0,
            backlog: 0,
            plan: Vec::with_capacity(cfg.per_pass as usize),
        }
    }

    /// Queues `batch`'s packet `i`, classified `m`, for VR `m.vr`; false if its queue is full.
    #[inline]
    pub fn push(&mut self, batch: &mut Batch, i: usize, m: Meta, port: u16) -> bool {
        let ok = self.queues[m.vr as usize].push(batch, i, m, port);
        self.backlog += ok as usize;
        ok
    }

    /// Plans this pass's service into `plan`. Shares first: from the cursor on, every VR with
    /// frames gets a turn of up to `quantum` (within its `limits` entry, its batch limit),
    /// then, while `per_pass` has room, more turns go round to those with frames left, so a VR
    /// alone is not held to its quantum. Then each VR's share is admitted once, in turn order:
    /// `admit(v, n)` says how many of `n` frames VR `v`'s reservation lets it have now (it may
    /// spend budget for them: they are served). A VR cut short by `per_pass` in the first
    /// round goes first next pass, else the next VR does; unused shares are not saved up.
    /// Returns the frames planned.
    pub fn schedule(
        &mut self,
        limits: &[u16],
        mut admit: impl FnMut(usize, usize) -> usize,
    ) -> usize {
        self.plan.clear();
        let n = self.queues.len();
        if n == 0 {
            return 0;
        }
        let quantum = self.cfg.quantum as usize;
        let mut left = self.cfg.per_pass as usize;
        let mut next = (self.cursor + 1) % n;
        let mut first = true;
        while left > 0 {
            let mut given = 0;
            for step in 0..n {
                let v = (self.cursor + step) % n;
                let q = &mut self.queues[v];
                let room = q.len().min(limits[v] as usize).saturating_sub(q.share);
                let want = room.min(quantum).min(left);
                if first && want < room.min(quantum) {
                    next = v; // cut short by `per_pass`: first again next pass
                }
                q.share += want;
                left -= want;
                given += want;
                if left == 0 {
                    break;
                }
            }
            first = false;
            if given == 0 {
                break;
            }
        }
        let mut planned = 0;
        for step in 0..n {
            let v = (self.cursor + step) % n;
            let share = std::mem::take(&mut self.queues[v].share);
            if share == 0 {
                continue;
            }
            let k = admit(v, share).min(share);
            if k > 0 {
                self.plan.push((v as u16, k as u16));
                planned += k;
            }
        }
        self.cursor = next;
        planned
    }

    /// Moves VR `v`'s `k` oldest frames into `batch` slots `at..at + k`, with their
    /// classification into `meta` (its `vr` set to `v`: VRs may have been renumbered since).
    #[inline]
    pub fn take(&mut self, v: usize, k: usize, batch: &mut Batch, meta: &mut [Meta], at: usize) {
        for (i, slot) in meta.iter_mut().enumerate().skip(at).take(k) {
            let Some((mut m, _)) = self.queues[v].pop_into(batch, i) else { break };
            m.vr = v as u16;
            *slot = m;
        }
        self.backlog -= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(vr: u16, tag: u16) -> Meta {
        Meta { vr, iface: tag, ..Meta::default() }
    }

    /// A batch of `n` frames, frame `i` holding the byte `i` (mod 256).
    fn frames(n: usize) -> Batch {
        let mut b = Batch::new(n.max(1));
        for i in 0..n {
            assert!(b.push_copy(&[i as u8; 60]));
        }
        b
    }

    #[test]
    fn config_ranges_are_checked_by_field() {
        assert!(IngressQueues::default().check().is_ok());
        let e = IngressQueues { limit: 0, ..Default::default() }.check().unwrap_err();
        assert!(e.0.contains("limit 0"), "{e}");
        let e = IngressQueues { quantum: 257, ..Default::default() }.check().unwrap_err();
        assert!(e.0.contains("quantum 257"), "{e}");
        let e = IngressQueues { per_pass: 0, ..Default::default() }.check().unwrap_err();
        assert!(e.0.contains("per_pass 0"), "{e}");
        let e = IngressQueues { limit: 4097, ..Default::default() }.check().unwrap_err();
        assert!(e.0.contains("limit 4097"), "{e}");
    }

    /// Batches of 1, 2 and 257 frames into a queue of 256: every frame up to the limit is
    /// kept in order, the rest refused, and each comes back with its classification.
    #[test]
    fn a_queue_keeps_order_and_refuses_beyond_its_limit() {
        for n in [1, 2, 257] {
            let mut q = Queue::new(256);
            let mut b = frames(n);
            let kept = (0..n).filter(|&i| q.push(&mut b, i, meta(0, i as u16), 3)).count();
            assert_eq!(kept, n.min(256), "batch of {n}");
            assert_eq!(q.len(), kept);
            let mut out = Batch::new(256);
            out.set_len(kept);
            for i in 0..kept {
                let (m, port) = q.pop_into(&mut out, i).unwrap();
                assert_eq!((m.iface, port), (i as u16, 3));
                assert_eq!(out.get(i).frame(), &[i as u8; 60][..], "frame {i} of {n}");
            }
            assert!(q.pop_into(&mut out, 0).is_none());
            assert_eq!(q.len(), 0);
        }
    }

    #[test]
    fn a_queue_wraps_around_its_ring() {
        let mut q = Queue::new(3);
        let mut out = Batch::new(4);
        out.set_len(4);
        for round in 0..5u16 {
            let mut b = frames(2);
            assert!(q.push(&mut b, 0, meta(0, round * 2), 0));
            assert!(q.push(&mut b, 1, meta(0, round * 2 + 1), 0));
            assert_eq!(q.pop_into(&mut out, 0).unwrap().0.iface, round * 2);
            assert_eq!(q.pop_into(&mut out, 1).unwrap().0.iface, round * 2 + 1);
        }
        let mut b = frames(4);
        assert_eq!((0..4).filter(|&i| q.push(&mut b, i, meta(0, 0), 7)).count(), 3);
        assert_eq!(q.drain().collect::<Vec<_>>(), vec![(7, 60); 3]);
        assert_eq!(q.len(), 0);
        assert_eq!(Queue::new(0).capacity(), 0);
        let mut b = frames(1);
        assert!(!Queue::new(0).push(&mut b, 0, meta(0, 0), 0), "no queue: refused");
    }

    fn ingress(per_pass: u16, quantum: u16, lens: &[usize]) -> Ingress {
        let cfg = IngressQueues { limit: 512, quantum, per_pass };
        let mut ing = Ingress::new(cfg, lens.len(), |_| true);
        for (v, &n) in lens.iter().enumerate() {
            let mut b = frames(n);
            for i in 0..n {
                assert!(ing.push(&mut b, i, meta(v as u16, 0), 0));
            }
        }
        ing
    }

    /// Drains the plan's frames as the cell does; returns the turns.
    fn serve(
        ing: &mut Ingress,
        limits: &[u16],
        admit: impl FnMut(usize, usize) -> usize,
    ) -> Vec<(u16, u16)> {
        ing.schedule(limits, admit);
        let plan = ing.plan.clone();
        let mut b = Batch::new(256);
        let mut meta = vec![Meta::default(); 256];
        let mut at = 0;
        b.set_len(plan.iter().map(|p| p.1 as usize).sum());
        for &(v, k) in &plan {
            ing.take(v as usize, k as usize, &mut b, &mut meta, at);
            at += k as usize;
        }
        plan
    }

    #[test]
    fn a_flooded_vr_gets_its_quantum_first_and_what_is_left_after() {
        // VR 0 has 257 frames, VR 1 has 1, 2 and 257: VR 1 is served its whole turn in the
        // first pass whatever VR 0 holds, and VR 0 takes the rest of the pass.
        for n1 in [1usize, 2, 257] {
            let mut ing = ingress(64, 32, &[257, n1]);
            let all = [256u16; 2];
            let plan = serve(&mut ing, &all, |_, n| n);
            let b = n1.min(32);
            assert_eq!(plan, vec![(0, (64 - b) as u16), (1, b as u16)], "VR 1 with {n1}");
            assert_eq!(ing.backlog, 257 - (64 - b) + n1 - b);
            assert_eq!(ing.queues[0].len(), 257 - (64 - b));
        }
    }

    #[test]
    fn a_vr_alone_is_served_the_whole_pass_in_one_turn_per_vr() {
        for n in [1usize, 2, 257] {
            let mut ing = ingress(256, 1, &[0, n, 0]);
            let plan = serve(&mut ing, &[256, 256, 256], |_, k| k);
            assert_eq!(plan, vec![(1, n.min(256) as u16)], "{n} frames, turns of 1");
            assert_eq!(ing.backlog, n - n.min(256));
        }
        // Its batch limit bounds it.
        let mut ing = ingress(256, 1, &[300]);
        assert_eq!(serve(&mut ing, &[7], |_, k| k), vec![(0, 7)]);
    }

    #[test]
    fn per_pass_cuts_a_turn_and_that_vr_goes_first_next_pass() {
        let mut ing = ingress(40, 32, &[100, 100, 100]);
        let all = [256u16; 3];
        assert_eq!(serve(&mut ing, &all, |_, n| n), vec![(0, 32), (1, 8)]);
        assert_eq!(serve(&mut ing, &all, |_, n| n), vec![(1, 32), (2, 8)]);
        assert_eq!(serve(&mut ing, &all, |_, n| n), vec![(2, 32), (0, 8)]);
        // Over many passes each VR is served the same.
        for _ in 0..3 {
            serve(&mut ing, &all, |_, n| n);
        }
        let lens: Vec<usize> = ing.queues.iter().map(|q| q.len()).collect();
        assert_eq!(lens, vec![20, 20, 20], "240 of 300 served, 80 each");
        assert_eq!(ing.backlog, 60);
    }

    #[test]
    fn admission_and_batch_limits_bound_a_turn_and_held_frames_stay() {
        let mut ing = ingress(256, 64, &[10, 10, 10]);
        // VR 0 out of budget, VR 1 allowed 3, VR 2's batch limit is 2.
        let limits = [256u16, 256, 2];
        let mut asked = Vec::new();
        let plan = serve(&mut ing, &limits, |v, n| {
            asked.push((v, n));
            [0, 3, n][v]
        });
        assert_eq!(asked, vec![(0, 10), (1, 10), (2, 2)]);
        assert_eq!(plan, vec![(1, 3), (2, 2)]);
        assert_eq!(ing.queues[0].len(), 10, "held for its next period, not dropped");
        assert_eq!(ing.backlog, 10 + 7 + 8);
        // An admission that claims more than asked is held to what was asked. The pass after
        // a whole first round starts at the next VR.
        let plan = serve(&mut ing, &limits, |_, n| n + 5);
        assert_eq!(plan, vec![(1, 7), (2, 2), (0, 10)]);
    }

    #[test]
    fn nothing_queued_plans_nothing() {
        let mut ing = ingress(64, 32, &[0, 0]);
        assert_eq!(ing.schedule(&[256, 256], |_, _| panic!("no VR has frames")), 0);
        assert!(ing.plan.is_empty());
        let mut none = Ingress::new(IngressQueues::default(), 0, |_| true);
        assert_eq!(none.schedule(&[], |_, n| n), 0);
    }
}
