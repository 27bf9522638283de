//! The four AF_XDP rings (rx, tx, fill, completion) as mapped from the socket, and the checks
//! every value the kernel writes into them goes through before use.
//!
//! Each ring is a power-of-two array with free-running u32 `producer` and `consumer` indices
//! shared with the kernel. We are the producer of fill and tx and the consumer of rx and
//! completion. Our own index lives in `local`; the shared copy is published with a Release
//! store after the entries are written, and the other side's index is read with Acquire before
//! its entries are read — the pairing the kernel's `smp_load_acquire`/`smp_store_release`
//! expect. Entries are addressed through the mask, so no index can reach outside the ring; a
//! producer index that claims more entries than the ring holds is clamped.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, Ordering};

use crate::sys::{Mmap, Pod};
use crate::MAX_FRAME;

pub(super) const XDP_RING_NEED_WAKEUP: u32 = 1;

/// `struct xdp_desc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct XdpDesc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}
// SAFETY: repr(C), u64 + u32 + u32, 16 bytes, no padding.
unsafe impl Pod for XdpDesc {}

/// `struct xdp_ring_offset`, as `XDP_MMAP_OFFSETS` reports it for one ring.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RingOffsets {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// Checks one ring's offsets (kernel-supplied) and returns the length to map: the descriptor
/// array must start 8-aligned and the three u32 words must be aligned and lie before it.
pub(super) fn ring_map_len(off: &RingOffsets, size: u32, entry: usize) -> io::Result<usize> {
    let bad =
        |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("bad ring offsets: {m}"));
    if off.desc & 7 != 0 {
        return Err(bad(format!("descriptor offset {} not 8-aligned", off.desc)));
    }
    for (what, o) in [("producer", off.producer), ("consumer", off.consumer), ("flags", off.flags)]
    {
        if o & 3 != 0 || o.checked_add(4).is_none_or(|end| end > off.desc) {
            return Err(bad(format!(
                "{what} offset {o} outside the ring header (desc at {})",
                off.desc
            )));
        }
    }
    (size as u64)
        .checked_mul(entry as u64)
        .and_then(|n| n.checked_add(off.desc))
        .filter(|&n| n <= 1 << 32)
        .map(|n| n as usize)
        .ok_or_else(|| bad(format!("ring of {size} entries at {} overflows", off.desc)))
}

/// One mapped ring.
pub(super) struct XskRing {
    map: Mmap,
    producer: usize,
    consumer: usize,
    flags: usize,
    desc: usize,
    entry: usize,
    size: u32,
    mask: u32,
    /// Our index: the producer for fill/tx, the consumer for rx/completion.
    local: u32,
}

impl XskRing {
    /// Maps a ring of `size` entries of `entry` bytes at `pgoff` of the socket.
    pub(super) fn map(
        fd: &OwnedFd,
        pgoff: u64,
        off: &RingOffsets,
        size: u32,
        entry: usize,
    ) -> io::Result<XskRing> {
        let len = ring_map_len(off, size, entry)?;
        let map = Mmap::shared(fd, len, pgoff)?;
        Ok(XskRing {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            entry,
            size,
            mask: size - 1,
            local: 0,
        })
    }

    #[inline]
    fn slot(&self, i: u32) -> usize {
        self.desc + (self.local.wrapping_add(i) & self.mask) as usize * self.entry
    }

    // --- consumer side (rx, completion)

    /// Entries the kernel produced that we have not consumed, at most the ring size.
    #[inline]
    pub(super) fn available(&self) -> u32 {
        let prod = self.map.atomic_u32(self.producer).load(Ordering::Acquire);
        prod.wrapping_sub(self.local).min(self.size)
    }

    /// The `i`-th unconsumed entry; `i < available()`.
    #[inline]
    pub(super) fn read<T: Pod>(&self, i: u32) -> T {
        debug_assert_eq!(std::mem::size_of::<T>(), self.entry);
        // SAFETY: entries in [local, producer) belong to the consumer until `release` publishes
        // the new consumer index; the Acquire load in `available` ordered the kernel's writes
        // before this read. `slot` stays inside the descriptor array (masked index).
        unsafe { self.map.read::<T>(self.slot(i)) }
    }

    /// Gives `n` consumed entries back to the kernel.
    #[inline]
    pub(super) fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.map.atomic_u32(self.consumer).store(self.local, Ordering::Release);
    }

    // --- producer side (fill, tx)

    /// Entries we may write before the ring is full. A consumer index that claims the kernel
    /// consumed more than we produced reads as a full ring.
    #[inline]
    pub(super) fn free(&self) -> u32 {
        let cons = self.map.atomic_u32(self.consumer).load(Ordering::Acquire);
        let used = self.local.wrapping_sub(cons);
        self.size.saturating_sub(used)
    }

    /// Produced entries the kernel has not consumed yet.
    #[inline]
    pub(super) fn outstanding(&self) -> u32 {
        let cons = self.map.atomic_u32(self.consumer).load(Ordering::Acquire);
        self.local.wrapping_sub(cons).min(self.size)
    }

    /// Writes the `i`-th free entry; `i < free()`.
    #[inline]
    pub(super) fn write<T: Pod>(&self, i: u32, val: T) {
        debug_assert_eq!(std::mem::size_of::<T>(), self.entry);
        // SAFETY: entries in [producer, consumer + size) belong to the producer until `submit`
        // publishes them; the kernel reads them only after that Release store.
        unsafe { self.map.write::<T>(self.slot(i), val) }
    }

    /// Publishes `n` written entries to the kernel.
    #[inline]
    pub(super) fn submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        self.map.atomic_u32(self.producer).store(self.local, Ordering::Release);
    }

    /// Entries the ring holds.
    #[inline]
    pub(super) fn size(&self) -> u32 {
        self.size
    }

    /// True if the kernel asks for a syscall to look at this ring.
    #[inline]
    pub(super) fn needs_wakeup(&self) -> bool {
        // Orders our producer store before the flag load, pairing with the kernel's barrier
        // between setting the flag and re-checking the ring: without it a wakeup can be missed.
        fence(Ordering::SeqCst);
        self.map.atomic_u32(self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// How the UMEM is cut: `rx_frames` frames for the fill ring first, then `tx_frames` for
/// transmit, each `frame_size` bytes (a power of two: aligned chunk mode).
#[derive(Clone, Copy, Debug)]
pub(super) struct UmemLayout {
    pub frame_size: u64,
    pub rx_frames: u32,
    pub tx_frames: u32,
}

/// What an rx descriptor turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum RxDesc {
    /// A good frame: its UMEM frame (to refill), and the bytes `[off, off + len)`.
    Frame { frame: u64, off: usize, len: usize },
    /// A frame of ours with a bad length: drop it, but the frame can go back to the fill ring.
    BadLen { frame: u64 },
    /// An address outside our rx frames: drop it, and the frame is not ours to reuse.
    BadAddr,
}

impl UmemLayout {
    pub(super) fn len(&self) -> u64 {
        self.frame_size * (self.rx_frames as u64 + self.tx_frames as u64)
    }

    /// Address of rx frame `i` (what goes on the fill ring).
    pub(super) fn rx_frame(&self, i: u32) -> u64 {
        i as u64 * self.frame_size
    }

    /// Address of tx frame `i`.
    pub(super) fn tx_frame(&self, i: u32) -> u64 {
        (self.rx_frames as u64 + i as u64) * self.frame_size
    }

    /// Validates an rx descriptor: the address must lie in the rx part of the UMEM, and the
    /// frame must be non-empty and not run past its UMEM frame.
    pub(super) fn check_rx(&self, addr: u64, len: u32) -> RxDesc {
        if addr >= self.rx_frames as u64 * self.frame_size {
            return RxDesc::BadAddr;
        }
        let frame = addr & !(self.frame_size - 1);
        let in_frame = addr - frame;
        if len == 0 || len as usize > MAX_FRAME || in_frame + len as u64 > self.frame_size {
            return RxDesc::BadLen { frame };
        }
        RxDesc::Frame { frame, off: addr as usize, len: len as usize }
    }

    /// Validates a completion: it must be the start of one of our tx frames. Returns the tx
    /// frame index.
    pub(super) fn check_completion(&self, addr: u64) -> Option<u32> {
        let base = self.rx_frames as u64 * self.frame_size;
        if addr < base || addr >= self.len() || addr & (self.frame_size - 1) != 0 {
            return None;
        }
        Some(((addr - base) / self.frame_size) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: UmemLayout = UmemLayout { frame_size: 2048, rx_frames: 4, tx_frames: 4 };

    #[test]
    fn rx_descriptors_outside_the_rx_frames_are_refused() {
        assert_eq!(L.check_rx(256, 60), RxDesc::Frame { frame: 0, off: 256, len: 60 });
        assert_eq!(
            L.check_rx(3 * 2048 + 256, 1514),
            RxDesc::Frame { frame: 3 * 2048, off: 3 * 2048 + 256, len: 1514 }
        );
        // the tx frames, the end of the UMEM, far away
        assert_eq!(L.check_rx(4 * 2048 + 256, 60), RxDesc::BadAddr);
        assert_eq!(L.check_rx(8 * 2048, 60), RxDesc::BadAddr);
        assert_eq!(L.check_rx(u64::MAX, 60), RxDesc::BadAddr);
        assert_eq!(L.check_rx(u64::MAX - 10, u32::MAX), RxDesc::BadAddr);
    }

    #[test]
    fn rx_descriptor_lengths_are_checked() {
        assert_eq!(L.check_rx(256, 0), RxDesc::BadLen { frame: 0 });
        assert_eq!(L.check_rx(2048 + 256, u32::MAX), RxDesc::BadLen { frame: 2048 });
        // runs past its frame into the next one
        assert_eq!(L.check_rx(256, 2048 - 255), RxDesc::BadLen { frame: 0 });
        assert_eq!(L.check_rx(256, 2048 - 256), RxDesc::Frame { frame: 0, off: 256, len: 1792 });
        // runs past a 4096-byte frame
        let big = UmemLayout { frame_size: 4096, rx_frames: 1, tx_frames: 1 };
        assert_eq!(big.check_rx(0, 4097), RxDesc::BadLen { frame: 0 });
    }

    #[test]
    fn completions_must_be_our_tx_frames() {
        assert_eq!(L.check_completion(4 * 2048), Some(0));
        assert_eq!(L.check_completion(7 * 2048), Some(3));
        assert_eq!(L.check_completion(8 * 2048), None);
        assert_eq!(L.check_completion(0), None);
        assert_eq!(L.check_completion(4 * 2048 + 1), None);
        assert_eq!(L.check_completion(u64::MAX), None);
    }

    #[test]
    fn ring_offsets_are_checked() {
        let good = RingOffsets { producer: 0, consumer: 64, flags: 128, desc: 192 };
        assert_eq!(ring_map_len(&good, 2048, 16).unwrap(), 192 + 2048 * 16);
        let bad = [
            RingOffsets { desc: 190, ..good },
            RingOffsets { producer: 190, ..good },
            RingOffsets { consumer: 2, ..good },
            RingOffsets { flags: 4096, ..good },
            RingOffsets { flags: u64::MAX - 1, ..good },
            RingOffsets { desc: u64::MAX - 7, ..good },
        ];
        for b in bad {
            assert!(ring_map_len(&b, 2048, 16).is_err(), "{b:?}");
        }
        assert!(ring_map_len(&good, u32::MAX, 16).is_err());
    }
}
