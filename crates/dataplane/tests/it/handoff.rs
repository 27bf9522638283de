//! The live-migration hooks of a cell: a redirect takes a VR's frames instead of the VR (with
//! the interface each came for), and a feed's frames go through the VR ahead of its ports,
//! which wait while the feed holds them; a frame for an interface the VR lacks is refused; the
//! VR says when it first and last sent a frame (a handoff gap's two ends).

use crate::common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use dataplane::{Feed, Redirect};

/// Frames, each with the VR interface it is for.
type Tagged = Vec<(u16, Vec<u8>)>;
type Frames = Arc<Mutex<Tagged>>;

struct Recorder(Frames);

impl Redirect for Recorder {
    fn send(&mut self, iface: u16, frame: &[u8]) -> bool {
        self.0.lock().unwrap().push((iface, frame.to_vec()));
        true
    }
}

type Queue = VecDeque<(u16, Vec<u8>)>;

#[derive(Clone, Default)]
struct Shared {
    queue: Arc<Mutex<Queue>>,
    hold: Arc<AtomicBool>,
    end: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    dropped: Arc<AtomicBool>,
}

struct Source(Shared);

impl Feed for Source {
    fn recv(&mut self, buf: &mut ports::PktBuf) -> Option<u16> {
        let (i, f) = self.0.queue.lock().unwrap().pop_front()?;
        assert!(buf.fill(&f));
        Some(i)
    }
    fn wakeup_fds(&self, _: &mut Vec<std::os::fd::RawFd>) {}
    fn refused(&mut self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }
    fn ended(&self) -> bool {
        self.0.end.load(Ordering::Relaxed)
    }
    fn holding(&self) -> bool {
        self.0.hold.load(Ordering::Relaxed)
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::Relaxed);
    }
}

fn to_8888(data: &[u8]) -> Vec<u8> {
    to_vr(M0, H0, None, &udp4_pkt("10.0.0.10", "8.8.8.8", 64, data))
}

fn carries(f: &[u8], data: &[u8]) -> bool {
    f.ends_with(data)
}

#[test]
fn a_redirect_takes_the_vrs_frames_with_their_interface() {
    let mut lab = Lab::new(&[base_vr()], &[64, 64, 64]);
    let got = Frames::default();
    let old = lab.e.cell_mut().set_redirect(0, Some(Box::new(Recorder(got.clone()))));
    assert!(old.unwrap().is_none());
    let (a, b) =
        (to_8888(b"one"), to_vr(M1, GW, None, &udp4_pkt("8.8.8.8", "10.0.0.10", 64, b"two")));
    lab.send(0, &[&a]);
    lab.send(1, &[&b]);
    lab.run();
    assert!(lab.recv(0).is_empty() && lab.recv(1).is_empty(), "the VR forwarded nothing");
    assert_eq!(*got.lock().unwrap(), vec![(0, a.clone()), (1, b)]);
    assert_eq!(lab.e.vrs()[0].counters().rx_packets, 0, "the VR never saw them");
    // Ended: the VR forwards again.
    assert!(lab.e.cell_mut().set_redirect(0, None).unwrap().is_some());
    lab.send(0, &[&a]);
    lab.run();
    assert_eq!(lab.recv(1).len(), 1);
    assert!(lab.e.cell_mut().set_redirect(5, None).is_err());
}

#[test]
fn a_feed_goes_first_holds_the_ports_and_ends() {
    let mut lab = Lab::new(&[base_vr()], &[64, 64, 64]);
    let s = Shared::default();
    s.hold.store(true, Ordering::Relaxed);
    lab.e.cell_mut().set_feed(0, Some(Box::new(Source(s.clone())))).unwrap();
    // A direct frame waits while the feed holds; the feed's frames go through the VR.
    lab.send(0, &[to_8888(b"direct")]);
    s.queue.lock().unwrap().push_back((0, to_8888(b"fed-1")));
    s.queue.lock().unwrap().push_back((7, to_8888(b"no such interface")));
    lab.poll();
    lab.poll();
    let out = lab.recv(1);
    assert_eq!(out.len(), 1, "only the fed frame");
    assert!(carries(&out[0], b"fed-1"));
    assert_eq!(s.refused.load(Ordering::Relaxed), 1);
    // Released: a fed frame waiting still goes ahead of the direct one.
    s.queue.lock().unwrap().push_back((0, to_8888(b"fed-2")));
    s.hold.store(false, Ordering::Relaxed);
    lab.poll();
    let out = lab.recv(1);
    assert_eq!(out.len(), 2);
    assert!(carries(&out[0], b"fed-2") && carries(&out[1], b"direct"), "in order");
    // Ended: the cell lets it go.
    s.end.store(true, Ordering::Relaxed);
    lab.poll();
    assert!(s.dropped.load(Ordering::Relaxed));
}

#[test]
fn removing_the_vr_ends_its_hooks() {
    let mut lab = Lab::new(&[base_vr()], &[64, 64, 64]);
    let s = Shared::default();
    lab.e.cell_mut().set_feed(0, Some(Box::new(Source(s.clone())))).unwrap();
    lab.e.cell_mut().set_redirect(0, Some(Box::new(Recorder(Frames::default())))).unwrap();
    lab.e.cell_mut().remove_vr(0).unwrap();
    assert!(s.dropped.load(Ordering::Relaxed));
}

/// A migration's handoff gap is the source VR's last transit frame to the destination's
/// first, each the poll that sent it: neither moves for a frame the VR did not send (a
/// redirect took it), and a fed frame counts as the VR's own.
#[test]
fn the_vr_says_when_it_first_and_last_sent() {
    let mut lab = Lab::new(&[base_vr()], &[64, 64, 64]);
    let sent = |lab: &Lab| (lab.e.vrs()[0].sent().first(), lab.e.vrs()[0].sent().last());
    assert_eq!(sent(&lab), (None, None));
    lab.send(0, &[to_8888(b"one")]);
    lab.run_at(1_000);
    assert_eq!(lab.recv(1).len(), 1);
    assert_eq!(sent(&lab), (Some(1_000), Some(1_000)));
    // Taken by a redirect: the VR sent nothing.
    lab.e.cell_mut().set_redirect(0, Some(Box::new(Recorder(Frames::default())))).unwrap();
    lab.send(0, &[to_8888(b"two")]);
    lab.run_at(5_000);
    assert!(lab.recv(1).is_empty());
    assert_eq!(sent(&lab), (Some(1_000), Some(1_000)));
    lab.e.cell_mut().set_redirect(0, None).unwrap();
    lab.send(0, &[to_8888(b"three"), to_8888(b"four")]);
    lab.run_at(9_000);
    assert_eq!(lab.recv(1).len(), 2);
    assert_eq!(sent(&lab), (Some(1_000), Some(9_000)));
    // A fed frame goes through the VR: sent by it.
    let s = Shared::default();
    lab.e.cell_mut().set_feed(0, Some(Box::new(Source(s.clone())))).unwrap();
    s.queue.lock().unwrap().push_back((0, to_8888(b"fed")));
    lab.run_at(12_000);
    assert_eq!(lab.recv(1).len(), 1);
    assert_eq!(sent(&lab), (Some(1_000), Some(12_000)));
}
