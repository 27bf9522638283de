//! Admission of TCP connections whose peer has proved nothing yet (the migration listener's
//! handshakes, the metrics endpoint's request heads), so that slow or silent clients cannot
//! keep real ones out.
//!
//! Each such connection is served by its own thread under a total deadline (not one per
//! read: a byte every few seconds must not keep it alive) and holds a [`Slot`] in a bounded
//! [`Pending`] set until it has proved itself. When the set is full, a new connection takes
//! the slot of the oldest one, which is cut (shut down both ways, so its blocked read returns
//! at once): a real client finishes in a round trip, so the oldest pending connection is the
//! one least likely to be real, and a real client is never turned away because slow ones came
//! first. What each bound and cut costs is counted by the caller and logged.

use std::collections::VecDeque;
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Connections that have not proved themselves yet, oldest first.
#[derive(Debug)]
pub struct Pending {
    max: usize,
    next: AtomicU64,
    open: Mutex<VecDeque<(u64, TcpStream)>>,
}

/// A pending connection's place in its [`Pending`] set, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    set: Arc<Pending>,
    id: u64,
}

impl Pending {
    /// A set of at most `max` (at least 1) connections.
    pub fn new(max: usize) -> Arc<Pending> {
        Arc::new(Pending { max: max.max(1), next: AtomicU64::new(0), open: Mutex::default() })
    }

    /// Takes `s` in; when the set is full, the oldest connection is cut to make room and its
    /// peer's address returned (to count and log). `Err` when `s` cannot be cloned (out of
    /// descriptors).
    pub fn admit(self: &Arc<Self>, s: &TcpStream) -> std::io::Result<(Slot, Option<String>)> {
        let handle = s.try_clone()?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let cut = if open.len() >= self.max {
            open.pop_front().map(|(_, old)| {
                let _ = old.shutdown(Shutdown::Both);
                old.peer_addr().map_or_else(|_| "an unknown peer".into(), |a| a.to_string())
            })
        } else {
            None
        };
        open.push_back((id, handle));
        Ok((Slot { set: self.clone(), id }, cut))
    }

    /// Connections pending now.
    pub fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cuts every pending connection (the listener is stopping).
    pub fn cut_all(&self) {
        for (_, s) in self.open.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.set.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = open.iter().position(|(id, _)| *id == self.id) {
            open.remove(i);
        }
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`, however the peer spreads them out.
pub fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(std::io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::time::Duration;

    fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn a_full_set_cuts_its_oldest_and_slots_come_back() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let set = Pending::new(2);
        let (c1, s1) = pair(&l);
        let (_c2, s2) = pair(&l);
        let (_c3, s3) = pair(&l);
        let (a, cut) = set.admit(&s1).unwrap();
        assert!(cut.is_none());
        let (b, cut) = set.admit(&s2).unwrap();
        assert!(cut.is_none());
        assert_eq!(set.len(), 2);
        let (c, cut) = set.admit(&s3).unwrap();
        assert_eq!(cut, Some(c1.local_addr().unwrap().to_string()), "the oldest goes");
        assert_eq!(set.len(), 2);
        // The cut one's reader sees the end at once.
        let mut s1 = s1;
        let e = read_exact_by(&mut s1, &mut [0u8; 1], Instant::now() + Duration::from_secs(5));
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        drop(a); // already cut: nothing changes
        assert_eq!(set.len(), 2);
        drop(b);
        drop(c);
        assert!(set.is_empty());
    }

    #[test]
    fn the_deadline_is_for_the_whole_read() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut c, mut s) = pair(&l);
        let t = std::thread::spawn(move || {
            // A byte every 50 ms: each read would be in time, the whole is not.
            for _ in 0..20 {
                if std::io::Write::write_all(&mut c, &[1]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut buf = [0u8; 20];
        let e = read_exact_by(&mut s, &mut buf, Instant::now() + Duration::from_millis(200));
        assert_eq!(e.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        t.join().unwrap();
        let (mut c, mut s) = pair(&l);
        std::io::Write::write_all(&mut c, b"abc").unwrap();
        let mut buf = [0u8; 3];
        read_exact_by(&mut s, &mut buf, Instant::now() + Duration::from_secs(5)).unwrap();
        assert_eq!(&buf, b"abc");
    }
}
