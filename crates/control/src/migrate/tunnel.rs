//! The handoff tunnel: frames that reach the source between its stop and the switches
//! learning the move, sent on to the destination over the migration link in UDP datagrams.
//!
//! Datagram: `iface u16 | seq u64 | frame | tag (16 bytes)`, the tag HMAC-SHA256 under a key
//! derived from the channel's session key, truncated. The destination takes a datagram only
//! with a good tag and a sequence number above the last one taken, so nothing can be injected
//! or replayed, and whatever the network reorders is dropped rather than delivered out of
//! order (counted `stale`); gaps are counted `lost`. The destination's socket is connected to
//! the source's, so the kernel drops other senders' datagrams before the tag is checked.
//!
//! The source's end is a [`dataplane::Redirect`] its worker calls per frame; the destination's
//! a [`dataplane::Feed`] its worker polls. Neither allocates per frame.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

const HEAD: usize = 10;
const TAG: usize = 16;
const MAX_DATAGRAM: usize = HEAD + ports::BUF_SIZE + TAG;
/// Receive buffer of the destination's socket: what waits between the stop and the commit
/// (the stop-and-copy round trip) at line rate of a 10 Gb/s link for a few milliseconds.
const RCVBUF: usize = 8 << 20;

type HmacSha256 = Hmac<Sha256>;

/// What a tunnel end counted, shared with the control thread that reports it.
#[derive(Debug, Default)]
pub struct TunnelCounts {
    /// Frames sent (source) or taken (destination).
    pub frames: AtomicU64,
    /// Source: frames the socket refused. Destination: datagrams with a bad length, tag or
    /// interface.
    pub failed: AtomicU64,
    /// Destination: datagrams at or below the last sequence number taken.
    pub stale: AtomicU64,
    /// Destination: sequence numbers skipped (datagrams lost on the way).
    pub lost: AtomicU64,
    /// Destination: microseconds from its first poll until its announcements had all come
    /// back (the ports' hold); 0 while they have not.
    pub caught_up_us: AtomicU64,
}

impl TunnelCounts {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The source's end.
pub struct TunnelTx {
    sock: UdpSocket,
    mac: HmacSha256,
    seq: u64,
    buf: Box<[u8; MAX_DATAGRAM]>,
    pub counts: Arc<TunnelCounts>,
}

/// A UDP socket on `local`'s address (the migration link), any port.
pub fn bind(local: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(local.ip(), 0))?;
    s.set_nonblocking(true)?;
    Ok(s)
}

impl TunnelTx {
    /// Sends on `sock` (bound) to `to`, tagging with `key`.
    pub fn new(sock: UdpSocket, to: SocketAddr, key: &[u8; 32]) -> std::io::Result<TunnelTx> {
        sock.connect(to)?;
        Ok(TunnelTx {
            sock,
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            seq: 0,
            buf: Box::new([0; MAX_DATAGRAM]),
            counts: Arc::default(),
        })
    }
}

impl dataplane::Redirect for TunnelTx {
    fn send(&mut self, iface: u16, frame: &[u8]) -> bool {
        let n = HEAD + frame.len();
        if n + TAG > MAX_DATAGRAM {
            bump(&self.counts.failed, 1);
            return false;
        }
        self.seq += 1;
        self.buf[..2].copy_from_slice(&iface.to_le_bytes());
        self.buf[2..HEAD].copy_from_slice(&self.seq.to_le_bytes());
        self.buf[HEAD..n].copy_from_slice(frame);
        let mut m = self.mac.clone();
        m.update(&self.buf[..n]);
        let tag = m.finalize().into_bytes();
        self.buf[n..n + TAG].copy_from_slice(&tag[..TAG]);
        match self.sock.send(&self.buf[..n + TAG]) {
            Ok(_) => {
                bump(&self.counts.frames, 1);
                true
            }
            Err(_) => {
                bump(&self.counts.failed, 1);
                false
            }
        }
    }
}

/// The interface number of the datagram that ends a tunnel (sequence number [`u64::MAX`]).
const END: u16 = u16::MAX;
/// How long a destination's tunnel lasts after its first poll if no end comes (the source
/// died): the source's longest drain, and then some.
const LIFETIME: Duration = Duration::from_secs(5);
/// How long a destination's tunnel holds the VR's ports at most (see [`TunnelRx::hold_for`]).
pub const HOLD_MAX: Duration = Duration::from_millis(100);

/// The datagram that ends the tunnel keyed `key`, sent by the source once its VR is gone.
pub fn end_marker(key: &[u8; 32]) -> Vec<u8> {
    let mut d = END.to_le_bytes().to_vec();
    d.extend_from_slice(&u64::MAX.to_le_bytes());
    d.extend_from_slice(&[0; 14]);
    signed(key, &d)
}

/// `body` (interface, sequence number, frame) with its tag.
pub(crate) fn signed(key: &[u8; 32], body: &[u8]) -> Vec<u8> {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    m.update(body);
    let mut d = body.to_vec();
    d.extend_from_slice(&m.finalize().into_bytes()[..TAG]);
    d
}

/// The destination's end.
pub struct TunnelRx {
    sock: UdpSocket,
    mac: HmacSha256,
    last: u64,
    /// Set at the first poll; the feed ends at the end marker or at this.
    until: Option<Instant>,
    ended: bool,
    /// The VR's MACs, and those whose announcement has not come back through the tunnel yet.
    own: Vec<[u8; 6]>,
    pending: Vec<[u8; 6]>,
    /// Set at the first poll: the VR's ports wait until the announcements came back, or this.
    hold_until: Option<Instant>,
    buf: Box<[u8; MAX_DATAGRAM]>,
    pub counts: Arc<TunnelCounts>,
}

impl TunnelRx {
    /// Takes datagrams on `sock` (bound) tagged with `key`, from `from` only once
    /// [`TunnelRx::connect`] says who that is.
    pub fn new(sock: UdpSocket, key: &[u8; 32]) -> TunnelRx {
        // Default size only makes a long stop lossier.
        let _ = crate::sys::set_rcvbuf(&sock, RCVBUF);
        TunnelRx {
            sock,
            mac: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
            last: 0,
            until: None,
            ended: false,
            own: Vec::new(),
            pending: Vec::new(),
            hold_until: None,
            buf: Box::new([0; MAX_DATAGRAM]),
            counts: Arc::default(),
        }
    }

    /// The VR's interface MACs: until the destination's announcement from each has come back
    /// through the tunnel, the source may still send on frames that reached it before the
    /// switches learned, so the VR's ports wait ([`dataplane::Feed::holding`]). The switch
    /// floods an announcement to the source's port behind whatever it sent there before it
    /// learned from it; the source sends it on in that order.
    pub fn hold_for(&mut self, macs: Vec<[u8; 6]>) {
        self.own = macs;
        self.own.sort_unstable();
        self.own.dedup();
        self.pending = self.own.clone();
    }

    /// Takes datagrams from `from` only.
    pub fn connect(&self, from: SocketAddr) -> std::io::Result<()> {
        self.sock.connect(from)
    }

    fn check(&mut self, n: usize) -> Option<(u16, u64)> {
        // At least an Ethernet header; a longer datagram was cut to the buffer (bad tag).
        if !(HEAD + 14 + TAG..=MAX_DATAGRAM).contains(&n) {
            return None;
        }
        let body = n - TAG;
        let mut m = self.mac.clone();
        m.update(&self.buf[..body]);
        m.verify_truncated_left(&self.buf[body..n]).ok()?;
        let iface = u16::from_le_bytes([self.buf[0], self.buf[1]]);
        let seq = u64::from_le_bytes(self.buf[2..HEAD].try_into().expect("8 bytes"));
        Some((iface, seq))
    }
}

impl dataplane::Feed for TunnelRx {
    fn recv(&mut self, out: &mut ports::PktBuf) -> Option<u16> {
        self.until.get_or_insert_with(|| Instant::now() + LIFETIME);
        self.hold_until.get_or_insert_with(|| Instant::now() + HOLD_MAX);
        while !self.ended {
            let n = self.sock.recv(&mut self.buf[..]).ok()?;
            let Some((iface, seq)) = self.check(n) else {
                bump(&self.counts.failed, 1);
                continue;
            };
            if seq <= self.last {
                bump(&self.counts.stale, 1);
                continue;
            }
            if (iface, seq) == (END, u64::MAX) {
                self.ended = true;
                break;
            }
            let src = &self.buf[HEAD + 6..HEAD + 12];
            if self.own.iter().any(|m| m == src) {
                // Our own announcement, back: not for the VR.
                let was = self.pending.len();
                self.pending.retain(|m| m != src);
                if was > 0 && self.pending.is_empty() {
                    let held = self.hold_until.map_or(0, |t| {
                        (HOLD_MAX.saturating_sub(t.saturating_duration_since(Instant::now())))
                            .as_micros() as u64
                    });
                    self.counts.caught_up_us.store(held.max(1), Ordering::Relaxed);
                }
                self.last = seq;
                continue;
            }
            if !out.fill(&self.buf[HEAD..n - TAG]) {
                bump(&self.counts.failed, 1);
                continue;
            }
            bump(&self.counts.lost, seq - self.last - 1);
            self.last = seq;
            bump(&self.counts.frames, 1);
            return Some(iface);
        }
        None
    }

    fn holding(&self) -> bool {
        !self.pending.is_empty() && self.hold_until.is_some_and(|t| Instant::now() < t)
    }

    fn ended(&self) -> bool {
        self.ended || self.until.is_some_and(|t| Instant::now() > t)
    }

    fn wakeup_fds(&self, out: &mut Vec<std::os::fd::RawFd>) {
        out.push(self.sock.as_raw_fd());
    }

    fn refused(&mut self) {
        bump(&self.counts.failed, 1);
    }
}

/// Tunnels made by a migration that is coming in, waiting for its commit to put them into
/// the VR (the listener thread makes them; the control thread commits): by VR name.
static INBOUND: Mutex<Vec<(String, TunnelRx)>> = Mutex::new(Vec::new());

/// Keeps `rx` for VR `vr`'s commit, replacing any left over.
pub fn park(vr: &str, rx: TunnelRx) {
    let mut l = INBOUND.lock().unwrap_or_else(|e| e.into_inner());
    l.retain(|(v, _)| v != vr);
    l.push((vr.to_string(), rx));
}

/// Takes VR `vr`'s parked tunnel, if any.
pub fn take(vr: &str) -> Option<TunnelRx> {
    let mut l = INBOUND.lock().unwrap_or_else(|e| e.into_inner());
    let k = l.iter().position(|(v, _)| v == vr)?;
    Some(l.remove(k).1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{Feed, Redirect};

    fn pair(key: &[u8; 32]) -> (TunnelTx, TunnelRx) {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (a, b) = (bind(lo).unwrap(), bind(lo).unwrap());
        let rx = TunnelRx::new(b, &[7; 32]);
        rx.connect(a.local_addr().unwrap()).unwrap();
        let to = rx.sock.local_addr().unwrap();
        let _ = key;
        (TunnelTx::new(a, to, key).unwrap(), rx)
    }

    fn drain(rx: &mut TunnelRx) -> Vec<(u16, Vec<u8>)> {
        let mut got = Vec::new();
        let mut b = ports::PktBuf::new();
        for _ in 0..100 {
            while let Some(i) = rx.recv(&mut b) {
                got.push((i, b.frame().to_vec()));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        got
    }

    #[test]
    fn frames_cross_in_order_with_their_interface() {
        let (mut tx, mut rx) = pair(&[7; 32]);
        for k in 0..50u8 {
            assert!(tx.send(u16::from(k % 2), &[k; 60]));
        }
        let got = drain(&mut rx);
        assert_eq!(got.len(), 50);
        for (k, (i, f)) in got.iter().enumerate() {
            assert_eq!((*i, f.as_slice()), ((k % 2) as u16, &[k as u8; 60][..]));
        }
        assert_eq!(TunnelCounts::get(&rx.counts.lost), 0);
    }

    #[test]
    fn a_wrong_key_a_replay_and_garbage_are_refused() {
        let (mut tx, mut rx) = pair(&[8; 32]);
        assert!(tx.send(0, &[1; 60]));
        assert!(drain(&mut rx).is_empty());
        assert_eq!(TunnelCounts::get(&rx.counts.failed), 1);

        let (mut tx, mut rx) = pair(&[7; 32]);
        assert!(tx.send(0, &[1; 60]));
        let d = tx.buf[..HEAD + 60 + TAG].to_vec();
        tx.sock.send(&d).unwrap();
        tx.sock.send(&[0u8; 5]).unwrap();
        tx.sock.send(&d[..d.len() - 1]).unwrap();
        assert_eq!(drain(&mut rx).len(), 1);
        assert_eq!(TunnelCounts::get(&rx.counts.stale), 1);
        assert_eq!(TunnelCounts::get(&rx.counts.failed), 2);
    }
}
