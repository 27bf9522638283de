//! The vhost-user data path: frames out of the guest's transmit rings into a batch, and frames
//! from a batch into the guest's receive rings (mergeable buffers when negotiated).
//!
//! Contract: every descriptor the frontend supplies is checked before its memory is touched:
//! the head index against the queue size, the direction (read-only for transmit, write-only
//! for receive), `addr + len` for overflow and against the mapped regions, the chain for loops,
//! for running past the queue size and for a `next` out of range (the chain walk of
//! `virtio-queue` stops there; a chain that stops while its last descriptor still says NEXT is
//! refused), and the avail index for running more than a queue ahead. A bad chain costs the one
//! frame, is returned to the guest on the used ring where its head allows, and is counted by
//! reason in [`VhostStats`]; a bad avail index or an unwritable used ring stops the ring until
//! the frontend sets it up again.

use std::io::Write;
use std::num::Wrapping;
use std::sync::atomic::Ordering;

use virtio_queue::{DescriptorChain, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use super::device::Vring;
use super::VhostStats;
use crate::{Batch, PktBuf, PortStats, HEADROOM};

/// The most receive chains one frame may span (mergeable buffers).
const MAX_CHAINS: usize = 64;

/// Why a chain was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    Index,
    Addr,
    Len,
    Chain,
    TooLong,
    Small,
}

impl Bad {
    fn count(self, vs: &mut VhostStats) {
        match self {
            Bad::Index => vs.bad_index += 1,
            Bad::Addr => vs.bad_addr += 1,
            Bad::Len => vs.bad_len += 1,
            Bad::Chain => vs.bad_chain += 1,
            Bad::TooLong => vs.too_long += 1,
            Bad::Small => vs.small_rx_buffers += 1,
        }
    }
}

/// Chains the driver made available and we have not taken, or `None` (counted, ring stopped)
/// when the avail index is more than a queue ahead or unreadable.
fn pending(v: &mut Vring, mem: &GuestMemoryMmap, vs: &mut VhostStats) -> Option<u16> {
    let Ok(avail) = v.q.avail_idx(mem, Ordering::Acquire) else {
        v.broken = true;
        vs.bad_rings += 1;
        return None;
    };
    let n = (avail - Wrapping(v.q.next_avail())).0;
    if n > v.q.size() {
        v.broken = true;
        vs.bad_avail_idx += 1;
        return None;
    }
    Some(n)
}

/// Checks one descriptor's range: no overflow, inside the mapped memory.
fn check_desc(mem: &GuestMemoryMmap, addr: GuestAddress, len: u32) -> Result<(), Bad> {
    if addr.0.checked_add(len as u64).is_none() {
        return Err(Bad::Len);
    }
    if len > 0 && !GuestMemoryBackend::check_range(mem, addr, len as usize) {
        return Err(Bad::Addr);
    }
    Ok(())
}

/// Signals the driver that used entries were added, unless it asked not to be.
fn notify(v: &mut Vring, mem: &GuestMemoryMmap) {
    if v.q.needs_notification(mem).unwrap_or(true) {
        if let Some(call) = &v.call {
            // A full eventfd counter (2^64 - 2 signals unread) only loses this wake-up.
            let _ = (&*call).write(&1u64.to_ne_bytes());
        }
    }
}

/// Takes up to `batch.room()` frames the guest transmitted on `v`.
pub(super) fn pull(
    v: &mut Vring,
    mem: &GuestMemoryMmap,
    hdr_len: usize,
    batch: &mut Batch,
    st: &mut PortStats,
    vs: &mut VhostStats,
) -> usize {
    let Some(n) = pending(v, mem, vs) else { return 0 };
    let size = v.q.size();
    let (mut got, mut used) = (0, false);
    for _ in 0..n {
        if batch.room() == 0 {
            break;
        }
        let Some(chain) = v.q.pop_descriptor_chain(mem) else { break };
        let head = chain.head_index();
        if head >= size {
            // Cannot be returned: the entry is lost to the driver that wrote it.
            Bad::Index.count(vs);
            st.rx_dropped += 1;
            continue;
        }
        let buf = batch.spare_mut().expect("room checked above");
        match read_chain(chain, mem, hdr_len, buf) {
            Ok(len) => {
                batch.commit();
                got += 1;
                st.rx_packets += 1;
                st.rx_bytes += len as u64;
            }
            Err(b) => {
                b.count(vs);
                st.rx_dropped += 1;
            }
        }
        if v.q.add_used(mem, head, 0).is_err() {
            v.broken = true;
            vs.bad_rings += 1;
            break;
        }
        used = true;
    }
    if used {
        notify(v, mem);
    }
    got
}

/// Copies one transmit chain (virtio-net header, then the frame) into `buf`.
fn read_chain(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
    hdr_len: usize,
    buf: &mut PktBuf,
) -> Result<usize, Bad> {
    let (storage, _) = buf.storage_mut();
    let room = &mut storage[HEADROOM..];
    let (mut pos, mut descs, mut last_next) = (0usize, 0usize, false);
    for d in chain {
        descs += 1;
        last_next = d.has_next();
        if d.is_write_only() {
            return Err(Bad::Chain);
        }
        check_desc(mem, d.addr(), d.len())?;
        let len = d.len() as usize;
        let skip = hdr_len.saturating_sub(pos).min(len);
        let data = len - skip;
        let at = (pos + skip).saturating_sub(hdr_len);
        if data > 0 {
            if at + data > room.len() {
                return Err(Bad::TooLong);
            }
            let src = GuestAddress(d.addr().0 + skip as u64);
            mem.read_slice(&mut room[at..at + data], src).map_err(|_| Bad::Addr)?;
        }
        pos += len;
    }
    if descs == 0 || last_next {
        return Err(Bad::Chain);
    }
    if pos <= hdr_len {
        return Err(Bad::Len);
    }
    let len = pos - hdr_len;
    buf.set_window(HEADROOM, len);
    Ok(len)
}

/// Puts `batch[sel[..]]` on the guest's receive ring `v`, in order, until it runs out of
/// buffers; returns how many frames it took (sent, or refused for a bad or too small chain and
/// counted in `tx_errors`).
#[allow(clippy::too_many_arguments)]
pub(super) fn push(
    v: &mut Vring,
    mem: &GuestMemoryMmap,
    hdr_len: usize,
    mergeable: bool,
    batch: &mut Batch,
    sel: &[u16],
    st: &mut PortStats,
    vs: &mut VhostStats,
) -> usize {
    let Some(mut avail) = pending(v, mem, vs) else { return 0 };
    let size = v.q.size();
    let mut hdr = [0u8; 12];
    hdr[10] = 1; // num_buffers, patched when a frame spans several chains
    let mut chains = [(0u16, 0u32); MAX_CHAINS];
    let (mut taken, mut used) = (0, false);
    'frames: for &i in sel {
        let frame = batch.get(i as usize).frame();
        let total = hdr_len + frame.len();
        let (start, avail_at_start) = (v.q.next_avail(), avail);
        let (mut pos, mut nc) = (0usize, 0usize);
        let mut nb_addr: [Option<GuestAddress>; 2] = [None; 2];
        let mut fail = None;
        while pos < total {
            if nc == MAX_CHAINS || (!mergeable && nc == 1) {
                fail = Some(Bad::Small);
                break;
            }
            if avail == 0 {
                // Out of receive buffers: this frame waits for the next burst.
                v.q.set_next_avail(start);
                avail = avail_at_start;
                break 'frames;
            }
            let Some(chain) = v.q.pop_descriptor_chain(mem) else {
                v.q.set_next_avail(start);
                break 'frames;
            };
            avail -= 1;
            let head = chain.head_index();
            if head >= size {
                // Cannot be returned: the entry is lost to the driver that wrote it.
                fail = Some(Bad::Index);
                break;
            }
            match write_chain(chain, mem, &hdr[..hdr_len], frame, &mut pos, &mut nb_addr) {
                Ok(w) => chains[nc] = (head, w),
                Err(b) => {
                    chains[nc] = (head, 0);
                    nc += 1;
                    fail = Some(b);
                    break;
                }
            }
            nc += 1;
        }
        match fail {
            None => {
                if nc > 1 {
                    let nb = (nc as u16).to_le_bytes();
                    for (a, b) in nb_addr.iter().zip(nb) {
                        if let Some(a) = a {
                            // Checked in write_chain when the header byte went there.
                            let _ = mem.write_slice(&[b], *a);
                        }
                    }
                }
                st.tx_packets += 1;
                st.tx_bytes += frame.len() as u64;
            }
            Some(b) => {
                b.count(vs);
                st.tx_errors += 1;
                for c in &mut chains[..nc] {
                    c.1 = 0;
                }
            }
        }
        for &(head, len) in &chains[..nc] {
            if v.q.add_used(mem, head, len).is_err() {
                v.broken = true;
                vs.bad_rings += 1;
                taken += 1;
                break 'frames;
            }
            used = true;
        }
        taken += 1;
    }
    let _ = avail;
    if used {
        notify(v, mem);
    }
    taken
}

/// Writes the stream `hdr ++ frame` from `*pos` into one receive chain; returns the bytes it
/// wrote there. Records where header bytes 10 and 11 (`num_buffers`) landed.
fn write_chain(
    chain: DescriptorChain<&GuestMemoryMmap>,
    mem: &GuestMemoryMmap,
    hdr: &[u8],
    frame: &[u8],
    pos: &mut usize,
    nb_addr: &mut [Option<GuestAddress>; 2],
) -> Result<u32, Bad> {
    let total = hdr.len() + frame.len();
    let (mut written, mut descs, mut last_next) = (0usize, 0usize, false);
    for d in chain {
        descs += 1;
        last_next = d.has_next();
        if *pos == total {
            // The frame is in; the rest of the chain is only walked to see that it ends
            // (a loop runs into the walk's limit and still says NEXT).
            continue;
        }
        if !d.is_write_only() {
            return Err(Bad::Chain);
        }
        check_desc(mem, d.addr(), d.len())?;
        let len = d.len() as usize;
        let mut off = 0;
        while off < len && *pos < total {
            let at = GuestAddress(d.addr().0 + off as u64);
            let k = if *pos < hdr.len() {
                let k = (hdr.len() - *pos).min(len - off);
                for b in 10..12 {
                    if (*pos..*pos + k).contains(&b) {
                        nb_addr[b - 10] = Some(GuestAddress(at.0 + (b - *pos) as u64));
                    }
                }
                mem.write_slice(&hdr[*pos..*pos + k], at).map_err(|_| Bad::Addr)?;
                k
            } else {
                let f = *pos - hdr.len();
                let k = (frame.len() - f).min(len - off);
                mem.write_slice(&frame[f..f + k], at).map_err(|_| Bad::Addr)?;
                k
            };
            off += k;
            *pos += k;
            written += k;
        }
    }
    if descs == 0 || last_next {
        return Err(Bad::Chain);
    }
    Ok(written as u32)
}
