//! Packet buffers and batches.
//!
//! Buffers are carved from slabs: anonymous mappings of [`SLAB_BUFS`] buffers each. The kernel
//! backs a page of a mapping only once it is written, so a buffer costs the pages its frames
//! touched (one for a small frame) and an idle ring of spares costs nearly nothing; a heap
//! allocation cost all of its 9 KiB, because `calloc` clears reused memory. Each buffer owns
//! whole pages (its stride is a page multiple), so a dropped buffer hands its pages back at
//! once (`MADV_DONTNEED`) while the rest of its slab lives on, and the slab is unmapped with
//! its last buffer. Buffers start at staggered cache lines within their pages, so the headers
//! of a batch do not all fall into the same L1 sets.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Bytes of storage behind every packet buffer: [`HEADROOM`], then a jumbo frame of
/// [`MAX_FRAME`] bytes. A frame is never split over buffers, so this is what makes MTU 9216
/// possible on every port kind; see the module's documentation for what a buffer costs.
pub const BUF_SIZE: usize = HEADROOM + MAX_FRAME;
/// Where a received frame starts inside its buffer: room to push a VLAN tag or to build an
/// ICMP error around a quoted packet without moving the whole frame.
pub const HEADROOM: usize = 64;
/// The longest frame a buffer holds: an IP MTU of 9216 plus an Ethernet header and one VLAN tag.
pub const MAX_FRAME: usize = 9216 + 18;
/// The largest burst a port or a worker handles at once.
pub const MAX_BURST: usize = 256;
/// Buffers carved from one mapping: few mappings for the process (the kernel limits them),
/// and each a few MiB of address space, not of memory.
pub const SLAB_BUFS: usize = 256;
const LINE: usize = 64;

/// Where buffer `i` of a slab starts, from the slab's base: a whole number of pages per
/// buffer, and within them a cache-line offset that cycles over the room left.
struct Geometry {
    stride: usize,
    colors: usize,
}

fn geometry() -> &'static Geometry {
    static G: OnceLock<Geometry> = OnceLock::new();
    G.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).ok().filter(|p| p.is_power_of_two()).unwrap_or(4096);
        let stride = BUF_SIZE.next_multiple_of(page);
        Geometry { stride, colors: (stride - BUF_SIZE) / LINE + 1 }
    })
}

/// One anonymous private mapping that buffers are carved from; unmapped when its last
/// buffer (each holds an `Arc`) is dropped.
struct Slab {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by the slab; which bytes a thread touches is
// decided by the `PktBuf`s, each of which owns its own stride exclusively.
unsafe impl Send for Slab {}
// SAFETY: as above; the slab itself is never written through a shared reference.
unsafe impl Sync for Slab {}

impl Slab {
    fn map() -> Arc<Slab> {
        let len = geometry().stride * SLAB_BUFS;
        // SAFETY: a new anonymous mapping at an address the kernel picks: no existing memory
        // is affected. Failure is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        match NonNull::new(p.cast::<u8>()) {
            Some(base) if p != libc::MAP_FAILED => Arc::new(Slab { base, len }),
            // As a failed heap allocation does: no memory for buffers is not recoverable.
            _ => std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(len, LINE).expect("slab layout"),
            ),
        }
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: the mapping is this slab's, and no buffer points into it any more: each
        // holds an `Arc` to the slab, and this is the last one going.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

thread_local! {
    /// The slab this thread carves new buffers from, and how many it has handed out.
    static CARVING: RefCell<Option<(Arc<Slab>, usize)>> = const { RefCell::new(None) };
}

/// The next buffer index of this thread's slab (a new slab when it is used up).
fn carve() -> (Arc<Slab>, usize) {
    let next = |c: &mut Option<(Arc<Slab>, usize)>| {
        let (slab, used) = match c {
            Some(s) if s.1 < SLAB_BUFS => s,
            _ => c.insert((Slab::map(), 0)),
        };
        *used += 1;
        (slab.clone(), *used - 1)
    };
    // A thread being torn down has no slab of its own any more: a fresh one serves it.
    CARVING.try_with(|c| next(&mut c.borrow_mut())).unwrap_or_else(|_| next(&mut None))
}

/// One packet buffer: fixed storage and the window `[off, off + len)` that holds the frame.
pub struct PktBuf {
    /// `BUF_SIZE` bytes inside `slab`, owned by this buffer alone.
    data: NonNull<[u8; BUF_SIZE]>,
    slab: Arc<Slab>,
    off: u16,
    len: u16,
}

// SAFETY: a buffer owns its bytes exclusively (no other `PktBuf` points into its stride), as a
// `Box<[u8; BUF_SIZE]>` would; the shared slab is only kept alive through the `Arc`.
unsafe impl Send for PktBuf {}
// SAFETY: `&PktBuf` only reads its own bytes; writes need `&mut PktBuf`.
unsafe impl Sync for PktBuf {}

impl Default for PktBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PktBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PktBuf {{ off: {}, len: {} }}", self.off, self.len)
    }
}

impl Drop for PktBuf {
    fn drop(&mut self) {
        // The slab lives on for other buffers: give this one's pages back now. (A racing last
        // drop elsewhere at worst advises pages about to be unmapped: our `Arc` keeps them.)
        if Arc::strong_count(&self.slab) > 1 {
            let g = geometry();
            let start = self.data.as_ptr() as usize;
            let page_start = start - (start - self.slab.base.as_ptr() as usize) % g.stride;
            // SAFETY: `[page_start, page_start + stride)` is this buffer's stride, whole
            // pages inside the slab's mapping that no other buffer uses, and nothing reads
            // them after this drop; `MADV_DONTNEED` only drops their contents.
            unsafe {
                libc::madvise(page_start as *mut libc::c_void, g.stride, libc::MADV_DONTNEED)
            };
        }
    }
}

impl PktBuf {
    /// An empty buffer. This maps memory now and then; call it only when building pools.
    pub fn new() -> Self {
        let (slab, i) = carve();
        let g = geometry();
        let at = i * g.stride + (i % g.colors) * LINE;
        debug_assert!(i < SLAB_BUFS && at + BUF_SIZE <= (i + 1) * g.stride);
        // SAFETY: `i < SLAB_BUFS` and the color leaves `BUF_SIZE` bytes inside stride `i`, so
        // `[at, at + BUF_SIZE)` lies in the slab's mapping; `carve` hands out each index once.
        let data = unsafe { NonNull::new_unchecked(slab.base.as_ptr().add(at)) }.cast();
        PktBuf { data, slab, off: HEADROOM as u16, len: 0 }
    }

    #[inline]
    fn bytes(&self) -> &[u8; BUF_SIZE] {
        // SAFETY: `data` points at `BUF_SIZE` mapped bytes that only this buffer uses, alive
        // while `slab` is; the shared borrow of `self` excludes writes through it.
        unsafe { self.data.as_ref() }
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8; BUF_SIZE] {
        // SAFETY: as in `bytes`; the unique borrow of `self` makes this the only access.
        unsafe { self.data.as_mut() }
    }

    /// The frame.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.bytes()[self.off as usize..(self.off + self.len) as usize]
    }

    /// The frame, writable.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        let w = self.off as usize..(self.off + self.len) as usize;
        &mut self.bytes_mut()[w]
    }

    /// Length of the frame in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True if the buffer holds no frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the frame inside the storage.
    #[inline]
    pub fn offset(&self) -> usize {
        self.off as usize
    }

    /// The whole storage and the frame's offset in it, for code that builds a new frame around
    /// part of the old one (ICMP errors) and then calls [`PktBuf::set_window`].
    #[inline]
    pub fn storage_mut(&mut self) -> (&mut [u8; BUF_SIZE], usize) {
        let off = self.off as usize;
        (self.bytes_mut(), off)
    }

    /// Sets the frame window. Returns false, changing nothing, if it does not fit the storage.
    #[inline]
    pub fn set_window(&mut self, off: usize, len: usize) -> bool {
        if off.checked_add(len).is_some_and(|end| end <= BUF_SIZE) {
            self.off = off as u16;
            self.len = len as u16;
            true
        } else {
            false
        }
    }

    /// Sets the frame length, keeping the offset. Returns false if it does not fit.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        self.set_window(self.off as usize, len)
    }

    /// Resets the buffer to an empty frame at [`HEADROOM`], for writing a new frame.
    #[inline]
    pub fn reset(&mut self) {
        self.off = HEADROOM as u16;
        self.len = 0;
    }

    /// Copies `frame` into the buffer at [`HEADROOM`]. Returns false, leaving the buffer
    /// unchanged, if the frame is longer than the room after the headroom.
    #[inline]
    pub fn fill(&mut self, frame: &[u8]) -> bool {
        if frame.len() > BUF_SIZE - HEADROOM {
            return false;
        }
        self.bytes_mut()[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
        self.off = HEADROOM as u16;
        self.len = frame.len() as u16;
        true
    }

    /// Grows the frame by `n` bytes at the front (into the headroom). The new bytes hold
    /// whatever the storage held. Returns false if there is not enough headroom.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> bool {
        if n > self.off as usize {
            return false;
        }
        self.off -= n as u16;
        self.len += n as u16;
        true
    }

    /// Removes `n` bytes from the front of the frame. Returns false if the frame is shorter.
    #[inline]
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len as usize {
            return false;
        }
        self.off += n as u16;
        self.len -= n as u16;
        true
    }
}

/// A batch of packet buffers: slots `[0, len)` hold packets, the rest hold spare buffers.
///
/// Every slot always owns a buffer, so ports can exchange buffers with a batch instead of
/// allocating or copying.
pub struct Batch {
    bufs: Box<[PktBuf]>,
    len: usize,
}

impl Batch {
    /// A batch of `capacity` slots, each with its own buffer. This allocates.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity <= u16::MAX as usize, "batch capacity {capacity} exceeds 65535");
        Batch { bufs: (0..capacity).map(|_| PktBuf::new()).collect(), len: 0 }
    }

    /// Number of packets in the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the batch holds no packets.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.bufs.len()
    }

    /// Free slots after the last packet.
    #[inline]
    pub fn room(&self) -> usize {
        self.bufs.len() - self.len
    }

    /// Forgets all packets; their buffers become spares.
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Sets the number of packets, for backends that filled spare slots through
    /// [`Batch::spare_mut`]. Panics if `len` exceeds the capacity: that is a backend bug.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.bufs.len());
        self.len = len;
    }

    /// Packet `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &PktBuf {
        &self.bufs[..self.len][i]
    }

    /// Packet `i`, writable.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut PktBuf {
        &mut self.bufs[..self.len][i]
    }

    /// The packets.
    #[inline]
    pub fn packets(&self) -> &[PktBuf] {
        &self.bufs[..self.len]
    }

    /// The packets, writable.
    #[inline]
    pub fn packets_mut(&mut self) -> &mut [PktBuf] {
        &mut self.bufs[..self.len]
    }

    /// Every slot, packets and spares alike: backends exchange buffers through this.
    #[inline]
    pub fn slots_mut(&mut self) -> &mut [PktBuf] {
        &mut self.bufs
    }

    /// The next spare slot, reset to an empty frame, or `None` if the batch is full. Call
    /// [`Batch::commit`] once the frame is written.
    #[inline]
    pub fn spare_mut(&mut self) -> Option<&mut PktBuf> {
        let b = self.bufs.get_mut(self.len)?;
        b.reset();
        Some(b)
    }

    /// Makes the spare slot written through [`Batch::spare_mut`] a packet.
    #[inline]
    pub fn commit(&mut self) {
        assert!(self.len < self.bufs.len());
        self.len += 1;
    }

    /// Copies `frame` into the next spare slot. Returns false if the batch is full or the frame
    /// does not fit a buffer.
    #[inline]
    pub fn push_copy(&mut self, frame: &[u8]) -> bool {
        let ok = self.bufs.get_mut(self.len).is_some_and(|b| b.fill(frame));
        self.len += ok as usize;
        ok
    }

    /// Swaps the buffer in slot `i` (packet or spare) with `buf`.
    #[inline]
    pub fn swap_buf(&mut self, i: usize, buf: &mut PktBuf) {
        std::mem::swap(&mut self.bufs[i], buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_edits_stay_inside_storage() {
        let mut b = PktBuf::new();
        assert!(b.fill(&[1, 2, 3, 4]));
        assert_eq!(b.frame(), &[1, 2, 3, 4]);
        assert!(b.push_front(4));
        assert_eq!(b.len(), 8);
        assert!(b.pull_front(6));
        assert_eq!(b.frame(), &[3, 4]);
        assert!(!b.pull_front(3));
        assert!(!b.push_front(BUF_SIZE));
        assert!(!b.set_window(BUF_SIZE - 1, 2));
        assert!(b.set_window(BUF_SIZE - 2, 2));
        assert!(!b.fill(&[0; BUF_SIZE]));
    }

    /// Resident bytes of this process (`VmRSS`).
    fn rss() -> usize {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 1024
    }

    #[test]
    fn buffers_cost_the_pages_their_frames_touched() {
        const N: usize = 8192; // 73 MiB of storage
        const MIB: usize = 1 << 20;
        let before = rss();
        let mut bufs: Vec<PktBuf> = (0..N).map(|_| PktBuf::new()).collect();
        let made = rss();
        assert!(made < before + 8 * MIB, "spares are backed: {before} -> {made} bytes");
        // A 60-byte frame touches one page of each buffer.
        for b in &mut bufs {
            assert!(b.fill(&[0x5a; 60]));
        }
        let filled = rss();
        assert!(filled >= made + N * 4096 * 3 / 4, "{made} -> {filled} bytes for {N} frames");
        // Every other buffer dropped: their slabs live on, their pages go back at once.
        let kept: Vec<PktBuf> = bufs.into_iter().step_by(2).collect();
        let halved = rss();
        assert!(halved + N / 2 * 4096 * 3 / 4 <= filled, "{filled} -> {halved} bytes");
        assert!(kept.iter().all(|b| b.frame() == [0x5a; 60]), "a kept buffer lost its frame");
    }

    #[test]
    fn buffers_own_disjoint_storage_at_staggered_lines() {
        let mut bufs: Vec<PktBuf> = (0..SLAB_BUFS + 3).map(|_| PktBuf::new()).collect();
        let mut at: Vec<usize> =
            bufs.iter_mut().map(|b| b.storage_mut().0.as_ptr() as usize).collect();
        let lines: std::collections::BTreeSet<usize> = at.iter().map(|a| a % 4096).collect();
        assert!(lines.len() > 8, "buffers start at {} distinct offsets in a page", lines.len());
        at.sort_unstable();
        assert!(at.windows(2).all(|w| w[1] - w[0] >= BUF_SIZE), "buffers overlap");
        // Written to the last byte, each keeps what it was given; dropped on another thread.
        for (i, b) in bufs.iter_mut().enumerate() {
            b.storage_mut().0.fill(i as u8);
        }
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.storage_mut().0.iter().all(|&x| x == i as u8), "buffer {i} was overwritten");
        }
        std::thread::spawn(move || drop(bufs)).join().unwrap();
    }

    #[test]
    fn batch_push_and_spares() {
        let mut batch = Batch::new(2);
        assert!(batch.push_copy(&[9; 60]));
        let s = batch.spare_mut().unwrap();
        assert!(s.fill(&[7; 10]));
        batch.commit();
        assert!(batch.spare_mut().is_none());
        assert!(!batch.push_copy(&[1]));
        assert_eq!(batch.len(), 2);
        assert_eq!(batch.get(1).frame(), &[7; 10]);
        batch.clear();
        assert_eq!(batch.room(), 2);
    }
}
