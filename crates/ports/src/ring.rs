//! A single-producer single-consumer ring of packet buffers, for ports inside one process.
//!
//! Ownership follows netmap: with free-running indices `head` (consumer) and `tail` (producer),
//! the consumer owns slots `[head, tail)` and the producer owns `[tail, head + size)`. Moving a
//! packet is a buffer exchange: the producer swaps its packet into a slot and takes the slot's
//! spare buffer; the consumer swaps a spare in and takes the packet. Nothing is copied and the
//! number of buffers never changes. `head` and `tail` sit on separate cache lines, and each side
//! keeps a private copy of the other's index so it touches the shared line only when the ring
//! looks full (producer) or empty (consumer).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Batch, PktBuf};

#[repr(align(128))]
struct Padded(AtomicUsize);

struct Ring {
    slots: Box<[UnsafeCell<PktBuf>]>,
    mask: usize,
    head: Padded,
    tail: Padded,
}

// SAFETY: a slot is only touched by the side that owns it under the head/tail protocol above;
// ownership passes with a Release store of the index and the other side's Acquire load, so no slot
// is accessed from two threads at once.
unsafe impl Sync for Ring {}

/// The sending end of a ring.
pub(crate) struct Producer {
    ring: Arc<Ring>,
    tail: usize,
    cached_head: usize,
}

/// The receiving end of a ring.
pub(crate) struct Consumer {
    ring: Arc<Ring>,
    head: usize,
    cached_tail: usize,
}

/// Makes a ring of `size` slots (a power of two), each holding a spare buffer.
pub(crate) fn ring(size: usize) -> (Producer, Consumer) {
    assert!(size.is_power_of_two(), "ring size {size} is not a power of two");
    let ring = Arc::new(Ring {
        slots: (0..size).map(|_| UnsafeCell::new(PktBuf::new())).collect(),
        mask: size - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (
        Producer { ring: ring.clone(), tail: 0, cached_head: 0 },
        Consumer { ring, head: 0, cached_tail: 0 },
    )
}

impl Producer {
    /// Moves `batch[sel[..]]` into the ring, in order, as far as there is room; returns how many.
    pub(crate) fn push(&mut self, batch: &mut Batch, sel: &[u16]) -> (usize, u64) {
        let size = self.ring.mask + 1;
        if size - (self.tail - self.cached_head) < sel.len() {
            self.cached_head = self.ring.head.0.load(Ordering::Acquire);
        }
        let n = sel.len().min(size - (self.tail - self.cached_head));
        let pkts = batch.packets_mut();
        let mut bytes = 0;
        for (k, &i) in sel[..n].iter().enumerate() {
            let slot = &self.ring.slots[(self.tail + k) & self.ring.mask];
            bytes += pkts[i as usize].len() as u64;
            // SAFETY: slot `tail + k` lies in `[tail, cached_head + size)`, which the producer owns;
            // the consumer does not touch it until the Release store of `tail` below.
            unsafe { std::ptr::swap(&mut pkts[i as usize], slot.get()) };
        }
        self.tail += n;
        self.ring.tail.0.store(self.tail, Ordering::Release);
        (n, bytes)
    }
}

impl Consumer {
    /// Appends packets from the ring to `batch` as far as it has room; returns how many.
    pub(crate) fn pop(&mut self, batch: &mut Batch) -> (usize, u64) {
        if self.cached_tail - self.head < batch.room() {
            self.cached_tail = self.ring.tail.0.load(Ordering::Acquire);
        }
        let n = batch.room().min(self.cached_tail - self.head);
        let start = batch.len();
        let slots = batch.slots_mut();
        let mut bytes = 0;
        for k in 0..n {
            let slot = &self.ring.slots[(self.head + k) & self.ring.mask];
            // SAFETY: slot `head + k` lies in `[head, cached_tail)`, which the consumer owns; the
            // producer does not reuse it until the Release store of `head` below.
            unsafe { std::ptr::swap(&mut slots[start + k], slot.get()) };
            bytes += slots[start + k].len() as u64;
        }
        batch.set_len(start + n);
        self.head += n;
        self.ring.head.0.store(self.head, Ordering::Release);
        (n, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_keeps_order_and_stops_when_full() {
        let (mut p, mut c) = ring(4);
        let mut src = Batch::new(8);
        for i in 0..6u8 {
            assert!(src.push_copy(&[i; 3]));
        }
        let (n, bytes) = p.push(&mut src, &[0, 1, 2, 3, 4, 5]);
        assert_eq!((n, bytes), (4, 12));
        let mut dst = Batch::new(3);
        assert_eq!(c.pop(&mut dst).0, 3);
        let got: Vec<u8> = dst.packets().iter().map(|b| b.frame()[0]).collect();
        assert_eq!(got, [0, 1, 2]);
        dst.clear();
        assert_eq!(p.push(&mut src, &[4, 5]).0, 2);
        assert_eq!(c.pop(&mut dst).0, 3);
        let got: Vec<u8> = dst.packets().iter().map(|b| b.frame()[0]).collect();
        assert_eq!(got, [3, 4, 5]);
        assert_eq!(c.pop(&mut Batch::new(4)).0, 0);
    }

    #[test]
    fn threads_see_every_packet_once_in_order() {
        let (mut p, mut c) = ring(64);
        const N: u32 = 200_000;
        let t = std::thread::spawn(move || {
            let mut b = Batch::new(32);
            let mut next = 0u32;
            while next < N {
                b.clear();
                while b.room() > 0 && next + (b.len() as u32) < N {
                    let v = next + b.len() as u32;
                    b.push_copy(&v.to_le_bytes());
                }
                let sel: Vec<u16> = (0..b.len() as u16).collect();
                let (n, _) = p.push(&mut b, &sel);
                next += n as u32;
            }
        });
        let mut b = Batch::new(48);
        let mut expect = 0u32;
        while expect < N {
            b.clear();
            c.pop(&mut b);
            for pkt in b.packets() {
                assert_eq!(u32::from_le_bytes(pkt.frame().try_into().unwrap()), expect);
                expect += 1;
            }
        }
        t.join().unwrap();
    }
}
