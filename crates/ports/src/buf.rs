//! Packet buffers and batches.

/// Bytes of storage behind every packet buffer: [`HEADROOM`], then a jumbo frame of
/// [`MAX_FRAME`] bytes. A frame is never split over buffers, so this is what makes MTU 9216
/// possible on every port kind; buffers are allocated zeroed (untouched pages stay unbacked),
/// so a pool of small frames costs about what it did with 2 KiB buffers.
pub const BUF_SIZE: usize = HEADROOM + MAX_FRAME;
/// Where a received frame starts inside its buffer: room to push a VLAN tag or to build an
/// ICMP error around a quoted packet without moving the whole frame.
pub const HEADROOM: usize = 64;
/// The longest frame a buffer holds: an IP MTU of 9216 plus an Ethernet header and one VLAN tag.
pub const MAX_FRAME: usize = 9216 + 18;
/// The largest burst a port or a worker handles at once.
pub const MAX_BURST: usize = 256;

/// One packet buffer: fixed storage and the window `[off, off + len)` that holds the frame.
pub struct PktBuf {
    data: Box<[u8; BUF_SIZE]>,
    off: u16,
    len: u16,
}

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

impl PktBuf {
    /// An empty buffer. This allocates; call it only when building pools.
    pub fn new() -> Self {
        // Through a zeroed Vec, not `Box::new([0; N])`: calloc leaves fresh pages untouched,
        // and debug builds do not build the array on the stack first.
        let data = vec![0u8; BUF_SIZE].into_boxed_slice().try_into().expect("BUF_SIZE bytes");
        PktBuf { data, off: HEADROOM as u16, len: 0 }
    }

    /// The frame.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.data[self.off as usize..(self.off + self.len) as usize]
    }

    /// The frame, writable.
    #[inline]
    pub fn frame_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.off as usize..(self.off + self.len) as usize]
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
        (&mut self.data, self.off as usize)
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
        self.data[HEADROOM..HEADROOM + frame.len()].copy_from_slice(frame);
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
