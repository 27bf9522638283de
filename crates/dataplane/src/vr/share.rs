//! How the replicas of one VR keep their neighbor tables consistent.
//!
//! Each replica has its own neighbor table (the fast path reads it without a lock), but what
//! a replica learns from the wire (an ARP packet, a neighbor solicitation or advertisement) is
//! relayed to every sibling, which applies the same [`Learn`] to its own table: so a neighbor
//! is resolved once, by whichever replica the peer's answer reached, and used by all. This
//! matters because the answer to one replica's probe may reach another: a NIC (or the `mem`
//! peer's RSS) sends what it cannot hash, ARP among it, to queue 0.
//!
//! Contract:
//! - Relayed notes are applied at the sibling's next housekeeping (every millisecond), before
//!   its timers run; a relayed note is never relayed again, so notes do not loop.
//! - Each mailbox is bounded ([`MAILBOX`] notes, allocated when the group is made); a note
//!   that finds it full is dropped and counted in [`NeighborShare::lost`]. The sibling then
//!   resolves on its own: its own probes and timers still run, so a loss delays, never
//!   breaks, resolution.
//! - Only the control path touches a mailbox's lock: learning happens on ARP and ND packets,
//!   not on forwarded ones.
//! - Learned notes do not count as `neighbors_learned` on the sibling, so the replicas'
//!   counters add up to what the logical VR learned from the wire.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wire::MacAddr;

use super::neighbor::{Learn, NKey};

/// Notes a replica's mailbox holds before further ones are dropped.
pub const MAILBOX: usize = 1024;

#[derive(Clone, Copy)]
pub(crate) struct Note {
    pub key: NKey,
    pub mac: MacAddr,
    pub how: Learn,
}

struct Mailbox {
    q: Mutex<VecDeque<Note>>,
    pending: AtomicBool,
}

/// The mailboxes of one group of replicas.
pub(crate) struct Group {
    boxes: Vec<Mailbox>,
    lost: AtomicU64,
}

/// One replica's end: its index in the group and the group's mailboxes.
pub struct NeighborShare {
    me: usize,
    group: Arc<Group>,
    /// Scratch the mailbox is drained into, so the lock is not held while learning.
    drained: Vec<Note>,
}

impl NeighborShare {
    /// One share per replica of a group of `n`.
    pub fn group(n: usize) -> Vec<NeighborShare> {
        let group = Arc::new(Group {
            boxes: (0..n)
                .map(|_| Mailbox {
                    q: Mutex::new(VecDeque::with_capacity(MAILBOX)),
                    pending: AtomicBool::new(false),
                })
                .collect(),
            lost: AtomicU64::new(0),
        });
        (0..n)
            .map(|me| NeighborShare {
                me,
                group: group.clone(),
                drained: Vec::with_capacity(MAILBOX),
            })
            .collect()
    }

    /// Notes relayed by the whole group that found a mailbox full.
    pub fn lost(&self) -> u64 {
        self.group.lost.load(Ordering::Relaxed)
    }

    /// Relays what this replica learned from the wire to every sibling.
    pub(crate) fn publish(&self, note: Note) {
        for (i, b) in self.group.boxes.iter().enumerate() {
            if i == self.me {
                continue;
            }
            // A poisoned lock means a sibling panicked; the note is then only lost.
            let Ok(mut q) = b.q.lock() else { continue };
            if q.len() < MAILBOX {
                q.push_back(note);
                drop(q);
                b.pending.store(true, Ordering::Release);
            } else {
                self.group.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// What siblings relayed since the last call, oldest first.
    pub(crate) fn take(&mut self) -> &[Note] {
        self.drained.clear();
        let b = &self.group.boxes[self.me];
        if b.pending.swap(false, Ordering::Acquire) {
            if let Ok(mut q) = b.q.lock() {
                self.drained.extend(q.drain(..));
            }
        }
        &self.drained
    }
}

impl super::Vr {
    /// Makes this VR one replica of a group (see the module doc): what it learns from the
    /// wire is relayed to its siblings, and what they learn is applied here.
    pub fn join_replicas(&mut self, share: NeighborShare) {
        self.share = Some(Box::new(share));
    }

    /// Its index among its replicas, if it is one.
    pub fn replica_index(&self) -> Option<usize> {
        self.share.as_ref().map(|s| s.me)
    }

    /// Relayed notes its group dropped because a mailbox was full (0 if not a replica).
    pub fn replica_notes_lost(&self) -> u64 {
        self.share.as_ref().map_or(0, |s| s.lost())
    }

    /// Applies what siblings learned (housekeeping, before the neighbor timers run).
    pub(crate) fn learn_shared(&mut self, now: u64) {
        let c = &mut *self;
        let Some(s) = c.share.as_deref_mut() else { return };
        let notes = s.take();
        if notes.is_empty() {
            return;
        }
        for n in notes {
            c.neigh.learn(n.key, n.mac, n.how, now);
        }
        c.count_evicted();
    }
}
