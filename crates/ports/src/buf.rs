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
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock};

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

/// The live slabs, by base address: their length, how many buffers of each are alive, and
/// whether a thread still carves from it. Taken only when a buffer is made or dropped (pools
/// at start, teardown), never per packet; a buffer finds its slab by its address, so it
/// carries no pointer to it and stays 16 bytes, as the heap box it replaced.
struct SlabState {
    len: usize,
    live: usize,
    carving: bool,
    /// Which mapping this is: the kernel may hand a new slab the address of one just unmapped
    /// (another test thread's), so tests tell slabs apart by this, not by base.
    #[cfg(test)]
    serial: u64,
}

#[cfg(test)]
static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

static SLABS: Mutex<BTreeMap<usize, SlabState>> = Mutex::new(BTreeMap::new());

fn slabs() -> std::sync::MutexGuard<'static, BTreeMap<usize, SlabState>> {
    // A panic while holding the lock leaves the map consistent (every change is one step).
    SLABS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Maps a new slab (an anonymous private mapping), registered as being carved.
fn map_slab() -> usize {
    let len = geometry().stride * SLAB_BUFS;
    // SAFETY: a new anonymous mapping at an address the kernel picks: no existing memory is
    // affected. Failure is checked below.
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
    if p == libc::MAP_FAILED || p.is_null() {
        // As a failed heap allocation does: no memory for buffers is not recoverable.
        std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(len, LINE).expect("slab layout"),
        );
    }
    let base = p as usize;
    slabs().insert(
        base,
        SlabState {
            len,
            live: 0,
            carving: true,
            #[cfg(test)]
            serial: SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        },
    );
    base
}

/// Unmaps the slab at `base` if nothing uses it any more (no live buffer, no carver).
fn unmap_if_unused(map: &mut BTreeMap<usize, SlabState>, base: usize) {
    if map.get(&base).is_some_and(|s| s.live == 0 && !s.carving) {
        let len = map.remove(&base).expect("present").len;
        // SAFETY: the mapping was made by `map_slab` with this base and length, and nothing
        // points into it any more: no buffer of it is alive and no thread carves from it.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}

/// A thread's slab being carved: its base and how many buffers it has handed out. Dropped
/// with the thread, it lets the slab go once its buffers have.
struct Carver(Option<(usize, usize)>);

impl Drop for Carver {
    fn drop(&mut self) {
        if let Some((base, _)) = self.0.take() {
            let mut map = slabs();
            if let Some(s) = map.get_mut(&base) {
                s.carving = false;
            }
            unmap_if_unused(&mut map, base);
        }
    }
}

thread_local! {
    static CARVING: RefCell<Carver> = const { RefCell::new(Carver(None)) };
}

/// The address of a new buffer's stride: the next one of this thread's slab (a new slab when
/// it is used up), counted live.
fn carve() -> usize {
    let next = |c: &mut Carver| {
        let (base, used) = match &mut c.0 {
            Some(cur) if cur.1 < SLAB_BUFS => cur,
            _ => {
                drop(c.0.take().map(|cur| Carver(Some(cur))));
                c.0.insert((map_slab(), 0))
            }
        };
        *used += 1;
        let at = *base + (*used - 1) * geometry().stride;
        slabs().get_mut(base).expect("a carved slab is registered").live += 1;
        at
    };
    // A thread being torn down has no slab of its own any more: a fresh one serves it, let
    // go at once so that it is unmapped with this buffer.
    CARVING.try_with(|c| next(&mut c.borrow_mut())).unwrap_or_else(|_| next(&mut Carver(None)))
}

/// One packet buffer: fixed storage and the window `[off, off + len)` that holds the frame.
pub struct PktBuf {
    /// `BUF_SIZE` bytes inside one stride of a slab, owned by this buffer alone.
    data: NonNull<[u8; BUF_SIZE]>,
    off: u16,
    len: u16,
}

// SAFETY: a buffer owns its bytes exclusively (no other `PktBuf` points into its stride), as a
// `Box<[u8; BUF_SIZE]>` would; its slab stays mapped while it lives (counted in `SLABS`).
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
        let g = geometry();
        let addr = self.data.as_ptr() as usize;
        let mut map = slabs();
        let Some((&base, s)) = map.range_mut(..=addr).next_back() else { return };
        debug_assert!(addr < base + s.len, "a buffer outside every slab");
        s.live -= 1;
        if s.live > 0 || s.carving {
            // The slab lives on for other buffers: give this one's pages back now.
            let stride = base + (addr - base) / g.stride * g.stride;
            // SAFETY: `[stride, stride + g.stride)` is this buffer's stride, whole pages
            // inside the slab's mapping that no other buffer uses, and nothing reads them
            // after this drop; `MADV_DONTNEED` only drops their contents.
            unsafe { libc::madvise(stride as *mut libc::c_void, g.stride, libc::MADV_DONTNEED) };
        } else {
            unmap_if_unused(&mut map, base);
        }
    }
}

impl PktBuf {
    /// An empty buffer. This maps memory now and then; call it only when building pools.
    pub fn new() -> Self {
        let g = geometry();
        let stride = carve();
        // Consecutive strides start at consecutive colors.
        let at = stride + (stride / g.stride % g.colors) * LINE;
        // SAFETY: `carve` returned the start of a stride of a mapped slab (never null) that no
        // other buffer was given; the color leaves `BUF_SIZE` bytes inside it (`colors` was
        // sized so).
        let data = unsafe { NonNull::new_unchecked(at as *mut [u8; BUF_SIZE]) };
        PktBuf { data, off: HEADROOM as u16, len: 0 }
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

    /// Whether the page holding `addr` is in memory (`mincore`): a property of these pages
    /// alone, which other test threads mapping memory at the same time cannot move (the whole
    /// process's RSS can).
    fn resident(addr: usize) -> bool {
        let page = addr & !4095;
        let mut v = 0u8;
        // SAFETY: mincore only reads the page tables for one page of a mapping this process
        // holds (a live slab) and writes one byte into `v`.
        let r = unsafe { libc::mincore(page as *mut libc::c_void, 1, &mut v) };
        assert_eq!(r, 0, "mincore {page:#x}: {}", std::io::Error::last_os_error());
        v & 1 == 1
    }

    #[test]
    fn buffers_cost_the_pages_their_frames_touched() {
        const N: usize = 8192; // 73 MiB of storage
        let mut bufs: Vec<PktBuf> = (0..N).map(|_| PktBuf::new()).collect();
        // Where each buffer's frame will start.
        let at: Vec<usize> =
            bufs.iter_mut().map(|b| b.storage_mut().0.as_ptr() as usize + HEADROOM).collect();
        let count =
            |addrs: &mut dyn Iterator<Item = &usize>| addrs.filter(|&&a| resident(a)).count();
        let made = count(&mut at.iter());
        assert!(made <= N / 8, "spares are backed: {made} of {N} frame pages in memory");
        // A 60-byte frame touches one page of each buffer.
        for b in &mut bufs {
            assert!(b.fill(&[0x5a; 60]));
        }
        let filled = count(&mut at.iter());
        assert!(filled >= N * 3 / 4, "{filled} of {N} frame pages in memory once filled");
        // Every other buffer dropped: their slabs live on, their pages go back at once.
        let kept: Vec<PktBuf> = bufs.into_iter().step_by(2).collect();
        let dropped = count(&mut at.iter().skip(1).step_by(2));
        assert!(dropped <= N / 2 / 8, "{dropped} of {} dropped frame pages still in memory", N / 2);
        assert!(count(&mut at.iter().step_by(2)) >= N / 2 * 3 / 4, "kept pages stay in memory");
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
    fn a_slab_is_unmapped_with_its_last_buffer_once_its_thread_is_gone() {
        let bufs = std::thread::spawn(|| (0..SLAB_BUFS + 5).map(|_| PktBuf::new()).collect())
            .join()
            .unwrap();
        let bufs: Vec<PktBuf> = bufs;
        // Other tests map and unmap slabs meanwhile, maybe at an address one of these had.
        let slab_of = |b: &PktBuf| {
            let a = b.data.as_ptr() as usize;
            let map = slabs();
            let (base, s) = map.range(..=a).next_back().expect("its slab is mapped");
            (*base, s.serial)
        };
        let mapped =
            |(base, serial): (usize, u64)| slabs().get(&base).is_some_and(|s| s.serial == serial);
        let mut ours: Vec<(usize, u64)> = bufs.iter().map(slab_of).collect();
        ours.dedup();
        assert_eq!(ours.len(), 2, "{} buffers from one thread in two slabs", bufs.len());
        assert!(ours.iter().all(|(b, _)| !slabs()[b].carving), "the thread is gone");
        let mut first = bufs;
        let rest = first.split_off(SLAB_BUFS);
        drop(first);
        assert!(!mapped(ours[0]), "a slab outlived its buffers");
        assert_eq!(slabs()[&ours[1].0].live, 5);
        drop(rest);
        assert!(!mapped(ours[1]), "a slab outlived its buffers");
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
