//! ICMP echo probes from inside a network namespace, every probe's send and answer time kept.
//!
//! `ping` prints what it saw but not which probe went when, and a SIGINT cuts off the answers in
//! flight; the fleet benchmark needs both (the first answer after a host was killed; every
//! probe lost during a drain, none counted lost that was merely late). One thread, moved into
//! the namespace, holds a raw ICMP socket and sends one echo request to every target each
//! interval; answers are matched by source address, identifier and sequence number.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Context, Result};

/// Probes per target at most (sequence numbers are 16 bits; a longer run stops sending).
pub const MAX_PROBES: usize = 65_535;
/// Targets at most.
pub const MAX_TARGETS: usize = 4096;

const SENDING: u8 = 0;
const LISTENING: u8 = 1;
const QUIT: u8 = 2;

/// What one target was sent and answered.
#[derive(Clone, Debug)]
pub struct TargetLog {
    pub addr: Ipv4Addr,
    /// When probe `i` (sequence number `i`) was sent.
    pub sent: Vec<Instant>,
    /// When probe `i` was first answered.
    pub answered: Vec<Option<Instant>>,
    /// Answers beyond the first to one probe.
    pub duplicates: u64,
}

impl TargetLog {
    /// Probes never answered.
    pub fn lost(&self) -> u64 {
        self.answered.iter().filter(|a| a.is_none()).count() as u64
    }

    /// The first answer to a probe sent at or after `t`.
    pub fn first_answer_sent_after(&self, t: Instant) -> Option<Instant> {
        self.sent.iter().zip(&self.answered).filter(|(s, _)| **s >= t).find_map(|(_, a)| *a)
    }

    /// The first answer received after `t`, to any probe.
    pub fn first_answer_after(&self, t: Instant) -> Option<Instant> {
        self.answered.iter().flatten().filter(|a| **a > t).min().copied()
    }
}

/// A running prober; [`Pinger::stop`] ends it.
pub struct Pinger {
    logs: Arc<Mutex<Vec<TargetLog>>>,
    state: Arc<AtomicU8>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Pinger {
    /// Starts probing `targets` every `interval` from namespace `netns` (`/run/netns/NAME`).
    pub fn start(netns: &str, targets: &[Ipv4Addr], interval: Duration) -> Result<Pinger> {
        crate::ensure!(
            (1..=MAX_TARGETS).contains(&targets.len()),
            "{} probe targets: 1..={MAX_TARGETS}",
            targets.len()
        );
        let ns = File::open(format!("/run/netns/{netns}"))
            .with_context(|| format!("opening namespace {netns}"))?;
        let logs: Vec<TargetLog> = targets
            .iter()
            .map(|&addr| TargetLog { addr, sent: Vec::new(), answered: Vec::new(), duplicates: 0 })
            .collect();
        let logs = Arc::new(Mutex::new(logs));
        let state = Arc::new(AtomicU8::new(SENDING));
        let (l, s) = (logs.clone(), state.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new().name("rpx-pinger".into()).spawn(move || {
            let sock = crate::sys::setns_net(ns.as_raw_fd())
                .context("entering the probe namespace")
                .and_then(|()| icmp_socket());
            let sock = match sock {
                Ok(s) => {
                    let _ = ready_tx.send(None);
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Some(e.to_string()));
                    return Err(e);
                }
            };
            run(&sock, &l, &s, interval)
        })?;
        if let Ok(Some(e)) = ready_rx.recv() {
            let _ = thread.join();
            crate::bail!("the prober could not start: {e}");
        }
        Ok(Pinger { logs, state, thread: Some(thread) })
    }

    /// What was seen so far.
    pub fn snapshot(&self) -> Vec<TargetLog> {
        self.logs.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Waits until `done` holds for what was seen, or `limit` passes; whether it held.
    pub fn wait_for(&self, limit: Duration, mut done: impl FnMut(&[TargetLog]) -> bool) -> bool {
        let t0 = Instant::now();
        loop {
            if done(&self.snapshot()) {
                return true;
            }
            if t0.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops sending, waits `grace` for late answers, and returns every target's log.
    pub fn stop(mut self, grace: Duration) -> Result<Vec<TargetLog>> {
        self.state.store(LISTENING, Ordering::Relaxed);
        std::thread::sleep(grace);
        self.finish()
    }

    fn finish(&mut self) -> Result<Vec<TargetLog>> {
        self.state.store(QUIT, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| crate::format_err!("the prober thread panicked"))??;
        }
        Ok(self.snapshot())
    }
}

impl Drop for Pinger {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A raw ICMP socket, non-blocking.
fn icmp_socket() -> Result<OwnedFd> {
    // SAFETY: socket takes plain integers and returns a new descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("a raw ICMP socket (needs root)");
    }
    // SAFETY: `fd` was just returned by socket and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The prober's loop: it sends while `state` is [`SENDING`], only listens while it is
/// [`LISTENING`] (the caller's grace for late answers), and returns at [`QUIT`].
fn run(
    sock: &OwnedFd,
    logs: &Mutex<Vec<TargetLog>>,
    state: &AtomicU8,
    interval: Duration,
) -> Result<()> {
    let id = (std::process::id() & 0xffff) as u16;
    let addrs: Vec<Ipv4Addr> = logs.lock().map(|l| l.iter().map(|t| t.addr).collect()).unwrap();
    let mut next = Instant::now();
    let mut buf = [0u8; 2048];
    loop {
        let now = Instant::now();
        let s = state.load(Ordering::Relaxed);
        if s == QUIT {
            return Ok(());
        }
        if s == SENDING && now >= next {
            next = now + interval;
            let mut l = logs.lock().unwrap();
            for (i, addr) in addrs.iter().enumerate() {
                let seq = l[i].sent.len();
                if seq >= MAX_PROBES {
                    continue;
                }
                send_echo(sock, *addr, id, seq as u16);
                l[i].sent.push(Instant::now());
                l[i].answered.push(None);
            }
        }
        wait_readable(sock, 1);
        while let Some(n) = recv(sock, &mut buf) {
            if let Some((src, seq)) = parse_reply(&buf[..n], id) {
                let at = Instant::now();
                let mut l = logs.lock().unwrap();
                if let Some(t) = l.iter_mut().find(|t| t.addr == src) {
                    match t.answered.get_mut(seq as usize) {
                        Some(slot @ None) => *slot = Some(at),
                        Some(Some(_)) => t.duplicates += 1,
                        None => {}
                    }
                }
            }
        }
    }
}

fn send_echo(sock: &OwnedFd, to: Ipv4Addr, id: u16, seq: u16) {
    let mut m = [0u8; 16];
    m[0] = 8; // echo request
    m[4..6].copy_from_slice(&id.to_be_bytes());
    m[6..8].copy_from_slice(&seq.to_be_bytes());
    m[8..16].copy_from_slice(b"rpxbench");
    let c = checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(to.octets()) },
        sin_zero: [0; 8],
    };
    // SAFETY: `m` and `sa` live across the call and their lengths are passed with them; a
    // failed send (no route, a full buffer) is a lost probe, which the log shows.
    unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            m.as_ptr().cast(),
            m.len(),
            0,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
    }
}

fn recv(sock: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: `buf` is writable for its length; a non-blocking socket returns -1 when empty.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).ok()
}

fn wait_readable(sock: &OwnedFd, ms: i32) {
    let mut p = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd owned by this frame, its count passed with it.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

/// The Internet checksum (RFC 1071).
fn checksum(b: &[u8]) -> u16 {
    let mut sum: u32 =
        b.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An echo reply to identifier `id` in an IPv4 datagram (a raw socket gets the IP header):
/// its source and sequence number. Anything else, or anything cut short, is `None`.
pub(crate) fn parse_reply(d: &[u8], id: u16) -> Option<(Ipv4Addr, u16)> {
    let ihl = usize::from(*d.first()? & 0x0f) * 4;
    if d.len() < ihl + 8 || ihl < 20 || d[0] >> 4 != 4 {
        return None;
    }
    let src = Ipv4Addr::new(d[12], d[13], d[14], d[15]);
    let icmp = &d[ihl..];
    let (ty, code) = (icmp[0], icmp[1]);
    let got_id = u16::from_be_bytes([icmp[4], icmp[5]]);
    (ty == 0 && code == 0 && got_id == id).then(|| (src, u16::from_be_bytes([icmp[6], icmp[7]])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(src: [u8; 4], ty: u8, id: u16, seq: u16) -> Vec<u8> {
        let mut d = vec![0x45, 0, 0, 36, 0, 0, 0, 0, 64, 1, 0, 0];
        d.extend(src);
        d.extend([10, 64, 255, 254]);
        d.extend([ty, 0, 0, 0]);
        d.extend(id.to_be_bytes());
        d.extend(seq.to_be_bytes());
        d.extend(b"rpxbench");
        d
    }

    #[test]
    fn replies_are_matched_by_type_and_identifier_and_short_ones_refused() {
        let d = reply([10, 64, 0, 1], 0, 7, 300);
        assert_eq!(parse_reply(&d, 7), Some((Ipv4Addr::new(10, 64, 0, 1), 300)));
        assert_eq!(parse_reply(&d, 8), None, "another prober's identifier");
        assert_eq!(parse_reply(&reply([10, 64, 0, 1], 8, 7, 1), 7), None, "a request");
        for n in 0..27 {
            assert_eq!(parse_reply(&d[..n], 7), None, "cut at {n}");
        }
        let mut bad_ihl = d.clone();
        bad_ihl[0] = 0x44;
        assert_eq!(parse_reply(&bad_ihl, 7), None);
    }

    #[test]
    fn the_checksum_of_a_message_with_its_checksum_is_zero() {
        let mut m =
            [8u8, 0, 0, 0, 0x12, 0x34, 0, 5, b'r', b'p', b'x', b'b', b'e', b'n', b'c', b'h'];
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(checksum(&m), 0);
    }

    #[test]
    fn logs_count_lost_probes_and_find_the_first_answer_after_a_moment() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let log = TargetLog {
            addr: Ipv4Addr::new(10, 64, 0, 1),
            sent: vec![at(0), at(10), at(20), at(30)],
            answered: vec![Some(at(1)), None, None, Some(at(35))],
            duplicates: 0,
        };
        assert_eq!(log.lost(), 2);
        assert_eq!(log.first_answer_sent_after(at(5)), Some(at(35)));
        assert_eq!(log.first_answer_after(at(1)), Some(at(35)));
        assert_eq!(log.first_answer_sent_after(at(31)), None);
    }
}
