//! Closed-loop traffic with sequence numbers, shared by the runtime tests: a generator that
//! never runs more than `WINDOW` frames ahead of its sink and loses nothing itself, and a sink
//! that checks every sequence number arrives once, in order.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use ports::mem::MemPort;
use ports::{Batch, Port};

/// Frames in flight at most: fewer than the egress ring holds, so a sink that is descheduled
/// for a while cannot make the VR drop (`tx_full`).
pub const WINDOW: u64 = 2048;
pub const MOVES: usize = 200;
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A UDP frame to `dst_mac` whose payload's first 8 bytes carry `seq`; UDP checksum 0 (none),
/// so the sequence can be rewritten in place.
pub fn frame(dst_mac: [u8; 6], seq: u64) -> Vec<u8> {
    frame_to(dst_mac, [198, 51, 100, 1], seq)
}

/// As [`frame`], to IPv4 destination `dst`.
pub fn frame_to(dst_mac: [u8; 6], dst: [u8; 4], seq: u64) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 0x10], dst_mac)
        .ipv4([10, 0, 0, 10], dst, 64)
        .udp(1000, 2000);
    let payload = seq.to_le_bytes();
    let mut f = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut f, &payload).unwrap();
    f[40..42].copy_from_slice(&[0, 0]);
    f
}

pub const SEQ_AT: usize = 14 + 20 + 8;

pub fn seq_of(f: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(f.get(SEQ_AT..SEQ_AT + 8)?.try_into().ok()?))
}

/// Sends `template` with sequence numbers 0, 1, 2... until `stop`, never more than `WINDOW`
/// ahead of `received`, retrying what the ring refuses (so the generator itself loses
/// nothing). Returns how many it sent.
pub fn generate(
    mut port: MemPort,
    template: Vec<u8>,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
) -> u64 {
    let mut batch = Batch::new(64);
    let sel: Vec<u16> = (0..64).collect();
    let mut next = 0u64;
    let mut pending = 0usize; // frames in `batch[..pending]` not yet taken, in order
    while !stop.load(Ordering::Relaxed) || pending > 0 {
        if pending == 0 {
            let room = WINDOW.saturating_sub(next - received.load(Ordering::Acquire)).min(64);
            if room == 0 || stop.load(Ordering::Relaxed) {
                thread::yield_now();
                continue;
            }
            batch.clear();
            for _ in 0..room {
                let mut f = template.clone();
                f[SEQ_AT..SEQ_AT + 8].copy_from_slice(&next.to_le_bytes());
                batch.push_copy(&f);
                next += 1;
            }
            pending = room as usize;
        }
        let (start, end) = (batch.len() - pending, batch.len());
        let k = port.tx_burst(&mut batch, &sel[start..end]);
        pending -= k;
        if k == 0 {
            thread::yield_now();
        }
    }
    next
}

/// Receives until `expect` (once known) frames have arrived or the deadline passes; checks
/// every sequence number arrives exactly once, in order. Returns (received, first error).
pub fn sink(
    mut port: MemPort,
    expect: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
) -> (u64, Option<String>) {
    let mut batch = Batch::new(256);
    let mut next = 0u64;
    let mut error = None;
    let t0 = Instant::now();
    while t0.elapsed() < DEADLINE {
        let want = expect.load(Ordering::Acquire);
        if want != u64::MAX && next >= want {
            break;
        }
        batch.clear();
        if port.rx_burst(&mut batch) == 0 {
            thread::yield_now();
            continue;
        }
        for p in batch.packets() {
            match seq_of(p.frame()) {
                Some(s) if s == next => next += 1,
                other => {
                    error.get_or_insert(format!("expected sequence {next}, got {other:?}"));
                    next += 1;
                }
            }
        }
        received.store(next, Ordering::Release);
    }
    (next, error)
}
