//! The memif data path: one receive or transmit ring, in either role, copying between the shared
//! buffers and a [`Batch`].
//!
//! Contract (interfaces.md §1.6):
//! - On every ring the client writes only `head` and the server only `tail`; both are free-running
//!   `u16` counters, slot = counter & mask. The peer's counter is loaded with Acquire before the
//!   descriptors it covers are read; ours is stored with Release after the descriptors and data
//!   it publishes are written.
//! - Client to server: the client fills descriptors from `head` and advances it; the server
//!   consumes `[last_head, head)` and advances `tail`.
//! - Server to client: the client posts empty buffers (length = buffer size) by advancing `head`;
//!   the server fills `[tail, head)`, treating each posted length as capacity, and advances
//!   `tail`; the client consumes `[last_tail, tail)` and posts the slots again.
//! - Everything the peer wrote is untrusted. A counter that moved backwards or further than the
//!   ring allows is a protocol fault: the call returns `Err` and the port disconnects the peer.
//!   A bad descriptor (region, bounds, length, a chain cut short or longer than a buffer) costs one
//!   frame, counted, and the ring goes on. Descriptors are read once into private copies.
//! - No allocation: frames are copied into the batch's spare buffers, and a transmitted frame's
//!   slot is reset to an empty buffer.

use std::sync::atomic::Ordering;

use super::proto::{self, desc_off, ring_off, Desc, DESC_FLAG_NEXT, RING_FLAG_MASK_INT};
use super::shm::{EventFd, Region};
use super::MemifStats;
use crate::{Batch, PortStats, HEADROOM};

/// Which side of the ring we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Client,
    Server,
}

/// The most segments one transmitted frame may use on a server-to-client ring, where the client
/// chose the buffer sizes: bounds the private plan of validated buffers kept on the stack.
const MAX_TX_SEGS: usize = 32;

/// A ring in a mapped region: where it is, its size, and its eventfd. Built only after checking
/// that the header and all descriptors lie inside the region.
pub(super) struct Ring {
    pub region: usize,
    pub off: usize,
    pub size: u16,
    pub event: EventFd,
}

impl Ring {
    fn mask(&self) -> u16 {
        self.size - 1
    }

    fn desc_at(&self, slot: u16) -> usize {
        self.off + proto::RING_HEADER_SIZE + proto::DESC_SIZE * (slot & self.mask()) as usize
    }

    /// Reads descriptor `slot` once, as one 16-byte copy into private memory.
    fn read_desc(&self, r: &Region, slot: u16) -> Option<Desc> {
        let mut b = [0u8; proto::DESC_SIZE];
        r.read_bytes(self.desc_at(slot), &mut b).then(|| Desc::from_bytes(&b))
    }

    /// Writes a whole descriptor (metadata 0) with one copy.
    fn write_desc(&self, r: &Region, slot: u16, d: Desc) -> bool {
        r.write_bytes(self.desc_at(slot), &d.to_bytes())
    }

    /// Writes only length and flags, leaving the buffer the client posted in place.
    fn write_len_flags(&self, r: &Region, slot: u16, length: u32, flags: u16) -> bool {
        let at = self.desc_at(slot);
        r.write_u32(at + desc_off::LENGTH, length) & r.write_u16(at + desc_off::FLAGS, flags)
    }

    fn load(&self, r: &Region, field: usize) -> Option<u16> {
        Some(r.atomic_u16(self.off + field)?.load(Ordering::Acquire))
    }

    fn store(&self, r: &Region, field: usize, v: u16) -> bool {
        r.atomic_u16(self.off + field).map(|a| a.store(v, Ordering::Release)).is_some()
    }

    /// Sets or clears MASK_INT: set while we poll this ring, clear when we want its eventfd.
    pub fn set_mask_int(&self, r: &Region, polling: bool) {
        if let Some(f) = r.atomic_u16(self.off + ring_off::FLAGS) {
            let v = f.load(Ordering::Relaxed);
            let v = if polling { v | RING_FLAG_MASK_INT } else { v & !RING_FLAG_MASK_INT };
            f.store(v, Ordering::Release);
        }
    }

    /// Signals the receiver after publishing, unless it said it polls. The fence pairs with
    /// the one in [`RxQueue::arm`]: either the receiver sees what we published before it
    /// sleeps, or we see its flag cleared and signal.
    fn kick(&self, r: &Region) {
        std::sync::atomic::fence(Ordering::SeqCst);
        let masked = r
            .atomic_u16(self.off + ring_off::FLAGS)
            .is_none_or(|f| f.load(Ordering::Relaxed) & RING_FLAG_MASK_INT != 0);
        if !masked {
            self.event.notify();
        }
    }
}

/// Shared-memory context of one connection.
pub(super) struct Mem<'a> {
    pub regions: &'a [Region],
    pub sizes: &'a [usize],
    /// Our buffer size (client role: the buffers we carve and post).
    pub bsize: u32,
}

/// A ring we receive on.
pub(super) struct RxQueue {
    pub ring: Ring,
    pub side: Side,
    /// Server: the client's `head` we consumed up to.
    /// Client: the server's `tail` we consumed up to.
    pub last: u16,
    /// Client only: our `head`, up to which buffers are posted.
    pub head: u16,
    /// Client only: offset in region 0 of this ring's first buffer.
    pub buf_base: usize,
    /// Leave MASK_INT clear and use the eventfd.
    pub interrupt: bool,
}

/// A ring we transmit on.
pub(super) struct TxQueue {
    pub ring: Ring,
    pub side: Side,
    /// Client: our `head`. Server: our `tail`.
    pub pos: u16,
    /// Client only: offset in region 0 of this ring's first buffer.
    pub buf_base: usize,
}

/// What one transmit burst sent, added to the port's counters once per burst.
#[derive(Default)]
pub(super) struct Sent {
    packets: u64,
    bytes: u64,
    errors: u64,
}

/// Why a received frame was dropped.
#[derive(Clone, Copy)]
enum Lost {
    BadDesc,
    TooLong,
    BadChain,
}

/// A peer broke the ring protocol; the connection must go.
pub(super) type Fault = &'static str;

impl RxQueue {
    /// Client only: posts every slot between our `head` and `last + size` as an empty buffer of
    /// `bsize` bytes, rewriting the whole descriptor so that whatever the server wrote into it
    /// is forgotten.
    pub fn refill(&mut self, mem: &Mem<'_>) -> Result<(), Fault> {
        let r = &mem.regions[self.ring.region];
        let start = self.head;
        while self.head.wrapping_sub(self.last) < self.ring.size {
            let slot = self.head & self.ring.mask();
            let d = Desc {
                flags: 0,
                region: 0,
                length: mem.bsize,
                offset: (self.buf_base + slot as usize * mem.bsize as usize) as u32,
            };
            if !self.ring.write_desc(r, slot, d) {
                return Err("ring outside its region");
            }
            self.head = self.head.wrapping_add(1);
        }
        if self.head != start && !self.ring.store(r, ring_off::HEAD, self.head) {
            return Err("ring outside its region");
        }
        Ok(())
    }

    /// Before the worker sleeps: asks the peer to signal this ring's eventfd (clears MASK_INT,
    /// unless the port is in interrupt mode, where it stays clear), consumes stale signals, and
    /// returns true if frames (or a broken counter, for `rx` to report) are waiting already.
    pub fn arm(&mut self, mem: &Mem<'_>) -> bool {
        let r = &mem.regions[self.ring.region];
        if !self.interrupt {
            self.ring.set_mask_int(r, false);
        }
        // Pairs with the fence in `Ring::kick` (a store of the flag, then a load of the peer's
        // counter, against the peer's store of its counter, then a load of the flag).
        std::sync::atomic::fence(Ordering::SeqCst);
        self.ring.event.drain();
        self.published(r).map_or(true, |n| n > 0)
    }

    /// After the sleep: the worker polls again, so the peer may stop signalling.
    pub fn disarm(&mut self, mem: &Mem<'_>) {
        if !self.interrupt {
            self.ring.set_mask_int(&mem.regions[self.ring.region], true);
        }
    }

    /// How many slots the peer published, validated.
    fn published(&self, r: &Region) -> Result<u16, Fault> {
        match self.side {
            Side::Server => {
                let head = self.ring.load(r, ring_off::HEAD).ok_or("ring outside its region")?;
                proto::pending(head, self.last, self.ring.size)
                    .ok_or("client moved head backwards or past the ring size")
            }
            Side::Client => {
                let tail = self.ring.load(r, ring_off::TAIL).ok_or("ring outside its region")?;
                let posted = self.head.wrapping_sub(self.last);
                proto::pending(tail, self.last, posted)
                    .ok_or("server moved tail backwards or past the posted buffers")
            }
        }
    }

    /// Appends received frames to `batch`; returns how many.
    pub fn rx(
        &mut self,
        mem: &Mem<'_>,
        batch: &mut Batch,
        stats: &mut PortStats,
        extra: &mut MemifStats,
    ) -> Result<usize, Fault> {
        let r = &mem.regions[self.ring.region];
        let mut n = self.published(r)?;
        if n == 0 && self.interrupt {
            // Consume the wakeup, then look again: a frame published between our first look
            // and the drain would otherwise wait for the next signal.
            if self.ring.event.drain() {
                n = self.published(r)?;
            }
        }
        // The longest segment we accept: the buffers we posted (client), or the largest DPDK
        // buffer size (server: the client chose its buffers).
        let max_seg = match self.side {
            Side::Client => mem.bsize,
            Side::Server => u16::MAX as u32,
        };
        let end = self.last.wrapping_add(n);
        let mut cur = self.last;
        // Counted once per burst, as `tx` does.
        let (mut got, mut bytes) = (0, 0u64);
        while cur != end && batch.room() > 0 {
            let spare = batch.spare_mut().expect("room checked");
            let (storage, _) = spare.storage_mut();
            let room = &mut storage[HEADROOM..];
            let mut total = 0usize;
            // The first reason this frame is lost, if any; one frame counts once.
            let mut lost: Option<Lost> = None;
            loop {
                let d = self.ring.read_desc(r, cur).ok_or("ring outside its region")?;
                cur = cur.wrapping_add(1);
                match d.check(mem.sizes, max_seg) {
                    Ok((off, len)) if lost.is_none() => {
                        match room.get_mut(total..total + len) {
                            // In bounds by `check`, so the copy happens; were it refused, the
                            // frame would only hold stale private bytes.
                            Some(dst) => _ = mem.regions[d.region as usize].read_bytes(off, dst),
                            None => lost = Some(Lost::TooLong),
                        }
                        total += len;
                    }
                    Ok(_) => {}
                    Err(_) => lost = lost.or(Some(Lost::BadDesc)),
                }
                if !d.has_next() {
                    break;
                }
                if cur == end {
                    // The chain runs past what the peer published: a transmitter publishes
                    // whole packets, so this one is broken. VrDrop what we have.
                    lost = lost.or(Some(Lost::BadChain));
                    break;
                }
            }
            if lost.is_none() && total == 0 {
                lost = Some(Lost::BadDesc); // a frame of zero bytes
            }
            match lost {
                None => {
                    spare.set_len(total);
                    batch.commit();
                    got += 1;
                    bytes += total as u64;
                }
                Some(why) => {
                    stats.rx_dropped += 1;
                    match why {
                        Lost::BadDesc => extra.bad_desc += 1,
                        Lost::TooLong => extra.too_long += 1,
                        Lost::BadChain => extra.bad_chain += 1,
                    }
                }
            }
        }
        stats.rx_packets += got as u64;
        stats.rx_bytes += bytes;
        self.last = cur;
        match self.side {
            Side::Server => {
                if n > 0 && !self.ring.store(r, ring_off::TAIL, cur) {
                    return Err("ring outside its region");
                }
            }
            Side::Client => self.refill(mem)?,
        }
        Ok(got)
    }
}

impl TxQueue {
    /// Sends `batch[sel[..]]` in order as far as the ring has room; returns how many frames were
    /// taken (sent, or dropped as `tx_errors`).
    pub fn tx(
        &mut self,
        mem: &Mem<'_>,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut PortStats,
        extra: &mut MemifStats,
    ) -> Result<usize, Fault> {
        let r = &mem.regions[self.ring.region];
        let start = self.pos;
        // Counted here, once per burst: stores to the port's counters per frame were a sixth
        // of a 60-byte frame's CPU time through the switch's two ports (tests/it/memif_cost.rs).
        let mut sent = Sent::default();
        let taken = match self.side {
            Side::Client => self.tx_client(mem, r, batch, sel, &mut sent)?,
            Side::Server => self.tx_server(mem, r, batch, sel, &mut sent, extra)?,
        };
        stats.tx_packets += sent.packets;
        stats.tx_bytes += sent.bytes;
        stats.tx_errors += sent.errors;
        if self.pos != start {
            let field = match self.side {
                Side::Client => ring_off::HEAD,
                Side::Server => ring_off::TAIL,
            };
            if !self.ring.store(r, field, self.pos) {
                return Err("ring outside its region");
            }
            self.ring.kick(r);
        }
        Ok(taken)
    }

    /// Client to server: our own buffers, carved at connect; frames longer than a buffer are
    /// chained.
    fn tx_client(
        &mut self,
        mem: &Mem<'_>,
        r: &Region,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut Sent,
    ) -> Result<usize, Fault> {
        let tail = self.ring.load(r, ring_off::TAIL).ok_or("ring outside its region")?;
        let used = proto::pending(self.pos, tail, self.ring.size)
            .ok_or("server moved tail backwards or past head")?;
        let mut free = (self.ring.size - used) as usize;
        let bsize = mem.bsize as usize;
        let region0 = &mem.regions[0];
        let mut taken = 0;
        for &i in sel {
            let pkt = batch.get_mut(i as usize);
            let frame = pkt.frame();
            if frame.is_empty() {
                stats.errors += 1;
            } else {
                let segs = frame.len().div_ceil(bsize);
                if segs > self.ring.size as usize {
                    // Could never fit, however empty the ring: refuse it rather than wedge.
                    stats.errors += 1;
                    pkt.reset();
                    taken += 1;
                    continue;
                }
                if segs > free {
                    break;
                }
                let mut chunks = frame.chunks(bsize).peekable();
                while let Some(chunk) = chunks.next() {
                    let slot = self.pos & self.ring.mask();
                    let off = self.buf_base + slot as usize * bsize;
                    let flags = if chunks.peek().is_some() { DESC_FLAG_NEXT } else { 0 };
                    let d =
                        Desc { flags, region: 0, length: chunk.len() as u32, offset: off as u32 };
                    if !(region0.write_bytes(off, chunk) && self.ring.write_desc(r, slot, d)) {
                        return Err("ring or buffer outside its region");
                    }
                    self.pos = self.pos.wrapping_add(1);
                }
                free -= segs;
                stats.packets += 1;
                stats.bytes += frame.len() as u64;
            }
            pkt.reset();
            taken += 1;
        }
        Ok(taken)
    }

    /// Server to client: into the buffers the client posted, each checked against the regions
    /// before anything is written, then filled from the private copy of that check.
    fn tx_server(
        &mut self,
        mem: &Mem<'_>,
        r: &Region,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut Sent,
        extra: &mut MemifStats,
    ) -> Result<usize, Fault> {
        let head = self.ring.load(r, ring_off::HEAD).ok_or("ring outside its region")?;
        let mut left = proto::pending(head, self.pos, self.ring.size)
            .ok_or("client moved head backwards or past the ring size")?;
        let mut plan = [(0u16, 0usize, 0usize); MAX_TX_SEGS];
        let mut taken = 0;
        for &i in sel {
            let pkt = batch.get_mut(i as usize);
            let frame = pkt.frame();
            if frame.is_empty() {
                stats.errors += 1;
                pkt.reset();
                taken += 1;
                continue;
            }
            // Plan: walk posted buffers until their capacity covers the frame.
            let mut need = frame.len();
            let mut k = 0u16;
            let mut bad = false;
            while need > 0 && k < left {
                let d = self
                    .ring
                    .read_desc(r, self.pos.wrapping_add(k))
                    .ok_or("ring outside region")?;
                k += 1;
                match d.check(mem.sizes, u32::MAX) {
                    Ok((off, cap)) if cap > 0 && (k as usize) <= MAX_TX_SEGS => {
                        plan[k as usize - 1] = (d.region, off, cap);
                        need -= need.min(cap);
                    }
                    _ => {
                        bad = true;
                        break;
                    }
                }
            }
            if bad {
                // The client posted a buffer outside its regions (or absurdly small ones): burn
                // those slots as empty, drop the frame, and go on.
                for j in 0..k {
                    self.ring.write_len_flags(r, self.pos.wrapping_add(j), 0, 0);
                }
                self.pos = self.pos.wrapping_add(k);
                left -= k;
                extra.bad_posted += 1;
                stats.errors += 1;
                pkt.reset();
                taken += 1;
                continue;
            }
            if need > 0 {
                if left < self.ring.size {
                    break; // ring full for now
                }
                // Every slot is posted and the frame still does not fit: it never will.
                stats.errors += 1;
                pkt.reset();
                taken += 1;
                continue;
            }
            let mut done = 0;
            for (j, &(region, off, cap)) in plan[..k as usize].iter().enumerate() {
                let n = cap.min(frame.len() - done);
                let last = j + 1 == k as usize;
                let flags = if last { 0 } else { DESC_FLAG_NEXT };
                let slot = self.pos.wrapping_add(j as u16);
                if !(mem.regions[region as usize].write_bytes(off, &frame[done..done + n])
                    && self.ring.write_len_flags(r, slot, n as u32, flags))
                {
                    return Err("ring or buffer outside its region");
                }
                done += n;
            }
            self.pos = self.pos.wrapping_add(k);
            left -= k;
            stats.packets += 1;
            stats.bytes += frame.len() as u64;
            pkt.reset();
            taken += 1;
        }
        Ok(taken)
    }
}
