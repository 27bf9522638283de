//! Live-migration handoff: the two hooks a move between hosts needs in a cell, kept apart from
//! the fast path (one `Option` test per burst while no move runs).
//!
//! - A **redirect** on a VR (the source, from its stop until it removes the VR): every frame
//!   demux gives the VR is handed, as received and with the VR interface it arrived for, to a
//!   [`Redirect`] (control's tunnel to the destination) instead of running through the VR.
//! - A **feed** into a VR (the destination, from its commit): frames a [`Feed`] yields, each
//!   for one of the VR's interfaces, are received as if they had arrived at that interface's
//!   port, before the ports are polled, so what the source sent on goes ahead of what reaches
//!   the destination directly afterwards. While the feed says it is `holding`, the ports of
//!   the VR's interfaces are not polled at all: what reaches them directly waits in their
//!   rings until the frames the source received before the switches learned have come.

use ports::PktBuf;

use super::{Cell, Target, NONE, NO_KEY};
use crate::types::BuildError;
use crate::worker::Worker;

/// Where a redirected VR's frames go.
pub trait Redirect: Send {
    /// Takes `frame`, which arrived for the VR's interface `iface`. False if it could not
    /// (the implementation counts it).
    fn send(&mut self, iface: u16, frame: &[u8]) -> bool;
}

/// Frames for a VR from elsewhere.
pub trait Feed: Send {
    /// Puts the next frame waiting into `buf` and returns the VR interface it is for; `None`
    /// when none waits. Must not block.
    fn recv(&mut self, buf: &mut PktBuf) -> Option<u16>;
    /// Descriptors that become readable when a frame waits (for a worker about to sleep).
    fn wakeup_fds(&self, out: &mut Vec<std::os::fd::RawFd>);
    /// Counts a frame the cell refused (an interface the VR lacks, or another VR's frame).
    fn refused(&mut self);
    /// Whether it is over: the cell then drops it (its VR goes on without).
    fn ended(&self) -> bool;
    /// Whether the ports of the VR's interfaces must wait (frames stay in their rings): the
    /// feed may still yield frames that reached the source before the switches learned the
    /// move, which must go first. It must say false after a bounded time.
    fn holding(&self) -> bool;
}

/// The handoffs running in a cell, by VR index.
#[derive(Default)]
pub(super) struct Handoff {
    redirects: Vec<(u16, Box<dyn Redirect>)>,
    feeds: Vec<(u16, Box<dyn Feed>)>,
}

impl Handoff {
    fn is_empty(&self) -> bool {
        self.redirects.is_empty() && self.feeds.is_empty()
    }

    /// VR `v` left the cell: its hooks go, later VRs move down one.
    pub(super) fn vr_removed(&mut self, v: usize) {
        self.redirects.retain(|(r, _)| *r as usize != v);
        self.feeds.retain(|(r, _)| *r as usize != v);
        for (r, _) in self.redirects.iter_mut() {
            *r -= u16::from(*r as usize > v);
        }
        for (r, _) in self.feeds.iter_mut() {
            *r -= u16::from(*r as usize > v);
        }
    }

    /// Whether port `p` waits for a feed (see [`Feed::holding`]).
    pub(super) fn holds(&self, p: usize, vrs: &[crate::vr::Vr]) -> bool {
        self.feeds.iter().any(|(v, f)| {
            f.holding() && vrs[*v as usize].ifaces.iter().any(|i| i.port as usize == p)
        })
    }

    pub(super) fn wakeup_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        self.feeds.iter().for_each(|(_, f)| f.wakeup_fds(out));
    }
}

fn swap<T>(list: &mut Vec<(u16, T)>, v: usize, new: Option<T>) -> Option<T> {
    let old = list.iter().position(|(r, _)| *r as usize == v).map(|k| list.remove(k).1);
    if let Some(n) = new {
        list.push((v as u16, n));
    }
    old
}

impl Cell {
    /// Sends every frame for VR `v` through `to` instead of the VR (`None` ends it); returns
    /// the redirect replaced. Removing the VR ends it too.
    pub fn set_redirect(
        &mut self,
        v: usize,
        to: Option<Box<dyn Redirect>>,
    ) -> Result<Option<Box<dyn Redirect>>, BuildError> {
        self.check_vr(v)?;
        let h = self.handoff.get_or_insert_with(Default::default);
        let old = swap(&mut h.redirects, v, to);
        self.tidy_handoff();
        Ok(old)
    }

    /// Receives what `from` yields into VR `v` (`None` ends it); returns the feed replaced.
    pub fn set_feed(
        &mut self,
        v: usize,
        from: Option<Box<dyn Feed>>,
    ) -> Result<Option<Box<dyn Feed>>, BuildError> {
        self.check_vr(v)?;
        let h = self.handoff.get_or_insert_with(Default::default);
        let old = swap(&mut h.feeds, v, from);
        self.tidy_handoff();
        Ok(old)
    }

    fn check_vr(&self, v: usize) -> Result<(), BuildError> {
        match v < self.vrs.len() {
            true => Ok(()),
            false => Err(BuildError(format!("no VR {v} (there are {})", self.vrs.len()))),
        }
    }

    pub(super) fn tidy_handoff(&mut self) {
        if self.handoff.as_ref().is_some_and(|h| h.is_empty()) {
            self.handoff = None;
        }
    }

    /// After classification: hands the chains of redirected VRs to their redirects, so the
    /// VR pipeline never sees them.
    #[cold]
    pub(super) fn redirect(&mut self, w: &mut Worker) {
        let Some(h) = self.handoff.as_deref_mut() else { return };
        for (v, to) in &mut h.redirects {
            let v = *v as usize;
            let mut i = self.vr_head[v];
            if i == NONE {
                continue;
            }
            while i != NONE {
                to.send(w.meta[i as usize].iface, w.batch.get(i as usize).frame());
                i = w.next[i as usize];
            }
            self.vr_head[v] = NONE;
            w.touched.retain(|&t| t as usize != v);
        }
    }

    /// Before the ports: each feed's waiting frames, as if received at their interfaces'
    /// ports. Returns the frames taken.
    #[cold]
    pub(super) fn poll_feeds(&mut self, w: &mut Worker, now: u64, timed: bool) -> usize {
        let feeds = self.handoff.as_ref().map_or(0, |h| h.feeds.len());
        let mut total = 0;
        for k in 0..feeds {
            let t0 = w.read_clock();
            w.batch.clear();
            let mut n = 0;
            while let Some(buf) = w.batch.spare_mut() {
                let Some(h) = self.handoff.as_deref_mut() else { break };
                let (v, feed) = &mut h.feeds[k];
                let Some(iface) = feed.recv(buf) else { break };
                // The peer names the interface: it must be this VR's, and demux must agree.
                let port = self.vrs[*v as usize].ifaces.get(iface as usize).map(|f| f.port);
                let mut last = (NO_KEY, Target { vr: 0, iface: 0 });
                let ours = port.is_some_and(|p| {
                    self.demux
                        .classify(p as usize, buf.frame(), &mut last)
                        .is_ok_and(|c| c.target.vr == *v && c.target.iface == iface)
                });
                let Some(p) = port.filter(|_| ours) else {
                    feed.refused();
                    continue;
                };
                w.batch.commit();
                self.classify(w, p as usize, n, 1);
                n += 1;
            }
            if n == 0 {
                continue;
            }
            total += n;
            let (first, last) = self.run_vrs(w, now, timed, None, false);
            self.egress(w, 0, n);
            self.settle(w, n, now, t0, first, last);
        }
        if let Some(h) = self.handoff.as_deref_mut() {
            h.feeds.retain(|(_, f)| !f.ended());
        }
        self.tidy_handoff();
        total
    }
}
