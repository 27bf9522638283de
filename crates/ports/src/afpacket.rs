//! The `afpacket` backend: a port on a kernel interface through an AF_PACKET socket with
//! TPACKET_V3 rings.
//!
//! Job: give `rx_burst` every frame arriving on the interface and send what `tx_burst` is given,
//! with one syscall per transmitted burst and none per received one. It works on any interface,
//! needs no XDP, and leaves the kernel stack seeing the same frames (it is a tap, not a steal):
//! use it on interfaces the kernel has no addresses on.
//!
//! How it is built, at open:
//! - `socket(AF_PACKET, SOCK_RAW, 0)` — protocol 0 so nothing arrives before setup is done —
//!   then `PACKET_VERSION = TPACKET_V3`, `PACKET_IGNORE_OUTGOING` (the port never reads its own
//!   or the host's transmissions), `PACKET_LOSS` (a frame the kernel refuses is skipped instead
//!   of jamming the tx ring), `PACKET_QDISC_BYPASS` where allowed, an rx ring of blocks
//!   (`tpacket_req3`, retire timeout 1 ms by default) and a tx ring of fixed
//!   10 KiB slots (a jumbo frame each),
//!   both in one mapping; `bind` to the ifindex with `ETH_P_ALL`; promiscuous mode through
//!   `PACKET_ADD_MEMBERSHIP` (VR interfaces have their own MACs), dropped by the port when it
//!   closes (`PACKET_DROP_MEMBERSHIP`): the kernel would drop it only at the socket's last
//!   reference, and a child process forked by any thread holds one until it execs.
//!
//! Contract and checks:
//! - rx walks the blocks the kernel retired (`TP_STATUS_USER`): every block header field
//!   (`num_pkts`, `offset_to_first_pkt`, `blk_len`, `offset_to_priv`) and every frame header
//!   (`tp_next_offset`, `tp_mac`, `tp_snaplen`) is checked against the block before a byte is
//!   read. A bad frame header loses the rest of its block; a truncated frame or one too long for
//!   a packet buffer is dropped alone; both count in `rx_dropped`, as do the kernel's drops
//!   (`PACKET_STATISTICS`, ring full). A block goes back to the kernel (`TP_STATUS_KERNEL`) once
//!   all its frames are consumed, so a burst may stop in the middle of one.
//! - The kernel strips 802.1Q tags into metadata before packet sockets see a frame; rx puts the
//!   tag back so the caller sees the frame as it was on the wire.
//! - tx writes frames into `TP_STATUS_AVAILABLE` slots, marks them `TP_STATUS_SEND_REQUEST` and
//!   kicks once with a non-blocking `send`. A slot still being sent is a full ring (`tx_full`).
//!   Frames shorter than an Ethernet header or longer than MTU + 18 are taken and counted in
//!   `tx_errors` (the kernel would drop them without saying).
//! - An interface that disappears is noticed by [`Port::service`] or at once by a tx error: the
//!   port closes, reports `Down("interface X disappeared")`, and re-opens in its namespace once
//!   an interface of that name exists again.
//!
//! Fanout (one interface received by several workers, [`AfPacketPort::open_fanout`]): each
//! member is a socket of its own with its own rings, all joined in one `PACKET_FANOUT` group of
//! type `PACKET_FANOUT_HASH` with `PACKET_FANOUT_FLAG_DEFRAG`. The kernel then hands each frame
//! to one member only, chosen by `fanout_demux_hash()` in net/packet/af_packet.c:
//! `reciprocal_scale(__skb_get_hash_symmetric(skb), num)`, the flow dissector's *symmetric*
//! hash (addresses sorted, then protocol and ports), so both directions of a flow reach the
//! same member and a flow never changes member while the group's size is fixed. DEFRAG makes
//! the kernel reassemble IPv4 fragments (`ip_check_defrag`) before hashing, so a datagram's
//! fragments hash as the whole datagram, on its ports, and meet its flow's other frames; the
//! member receives the reassembled datagram (refragmented on the way out where the egress MTU
//! needs it, or dropped as too long past a packet buffer). IPv6 fragments are hashed on
//! addresses only. The group id comes from the kernel (`PACKET_FANOUT_FLAG_UNIQUEID`, Linux
//! 4.2) at the first open, so no other group in the namespace, ours or another process's, is
//! joined by mistake; every member, and every member's re-open after the interface comes
//! back, joins that id. A member re-opened while a stale member of the old interface is still
//! open fails (the kernel's group is bound to the old device) and retries from `service`.
//! Each member transmits on its own socket.
//!
//! Known limit: frames the local stack sent with checksum offload arrive with unfinished L4
//! checksums (the kernel says so with `TP_STATUS_CSUMNOTREADY`, which this port does not act
//! on); turn tx checksumming off on the peer where that matters.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use crate::sys::{self, at, Mmap, Pod, Seen, Watch};
use crate::{Batch, Port, PortStats, PortStatus, BUF_SIZE, HEADROOM};

const BACKEND: &str = "afpacket";

const SOL_PACKET: i32 = 263;
const PACKET_ADD_MEMBERSHIP: i32 = 1;
const PACKET_DROP_MEMBERSHIP: i32 = 2;
const PACKET_RX_RING: i32 = 5;
const PACKET_STATISTICS: i32 = 6;
const PACKET_VERSION: i32 = 10;
const PACKET_TX_RING: i32 = 13;
const PACKET_LOSS: i32 = 14;
const PACKET_QDISC_BYPASS: i32 = 20;
const PACKET_IGNORE_OUTGOING: i32 = 23;
const PACKET_FANOUT: i32 = 18;
const PACKET_FANOUT_HASH: u32 = 0;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const PACKET_FANOUT_FLAG_DEFRAG: u32 = 0x8000;
/// The most members [`AfPacketPort::open_fanout`] makes (the kernel allows far more; one per
/// worker is all a replicated VR needs).
pub const MAX_FANOUT: usize = 64;
const TPACKET_V3: i32 = 2;
const PACKET_MR_PROMISC: u16 = 1;
const ETH_P_ALL: u16 = 0x0003;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1 << 0;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1 << 0;
const TP_STATUS_WRONG_FORMAT: u32 = 1 << 2;

/// `sizeof(struct tpacket_block_desc)`.
const BLOCK_HDR: usize = 48;
/// `sizeof(struct tpacket3_hdr)`; also where tx data starts in a tx frame
/// (`TPACKET3_HDRLEN - sizeof(struct sockaddr_ll)`).
const FRAME_HDR: usize = 48;
/// Offset of `block_status` in `tpacket_block_desc`, of `tp_status` in `tpacket3_hdr`.
const BLOCK_STATUS: usize = 8;
const FRAME_STATUS: usize = 20;

/// A tx slot: its header and a jumbo frame (the largest a packet buffer holds), rounded to 2 KiB.
const TX_FRAME: usize = (FRAME_HDR + crate::MAX_FRAME).next_multiple_of(2048);
/// The frame size the rx ring is declared with. TPACKET_V3 packs frames of any length into
/// its blocks, so this only sets `frame_nr`; it limits nothing.
const RX_REQ_FRAME: usize = 2048;
const TX_FRAMES_PER_BLOCK: u32 = 8;

/// How to open an AF_PACKET port.
#[derive(Clone, Debug)]
pub struct AfPacketOptions {
    /// Bytes per rx block: a multiple of the page size. Default 16 KiB (a jumbo frame fits).
    pub block_size: u32,
    /// Rx blocks. Default 256 (4 MiB of ring). The kernel retires a block that holds a frame
    /// at each `block_timeout_ms`, so a trickle of traffic takes a block per timeout however
    /// small its frames: the ring holds `blocks` timeouts of a reader that is off its CPU
    /// (256 ms by default), and more frames than that when they come faster. 32 blocks of
    /// 128 KiB held the same frames at speed but only 32 ms of a trickle, and a worker
    /// descheduled for longer on a loaded host lost every frame after that.
    pub blocks: u32,
    /// Milliseconds after which the kernel hands over a block that is not full. Default 1.
    pub block_timeout_ms: u32,
    /// Tx ring slots of 10 KiB (a jumbo frame each), rounded up to a multiple of 8. Default 512.
    pub tx_frames: u32,
    /// Put the interface in promiscuous mode while the port is open. Default true.
    pub promisc: bool,
    /// Send without the qdisc (`PACKET_QDISC_BYPASS`), where the kernel allows. Default true.
    pub qdisc_bypass: bool,
    /// Open the port in this network namespace (`/run/netns/NAME`) instead of the caller's.
    pub netns: Option<PathBuf>,
    /// Join the hash fanout group with this id (see the module documentation). Normally set
    /// by [`AfPacketPort::open_fanout`], which has the kernel choose a free id. Default none.
    pub fanout: Option<u16>,
}

impl Default for AfPacketOptions {
    fn default() -> Self {
        AfPacketOptions {
            block_size: 1 << 14,
            blocks: 256,
            block_timeout_ms: 1,
            tx_frames: 512,
            promisc: true,
            qdisc_bypass: true,
            netns: None,
            fanout: None,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct TpacketReq3 {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
    retire_blk_tov: u32,
    sizeof_priv: u32,
    feature_req_word: u32,
}
// SAFETY: repr(C), seven u32s.
unsafe impl Pod for TpacketReq3 {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockaddrLl {
    family: u16,
    protocol: u16,
    ifindex: i32,
    hatype: u16,
    pkttype: u8,
    halen: u8,
    addr: [u8; 8],
}
// SAFETY: repr(C), fields at offsets 0, 2, 4, 8, 10, 11, 12; 20 bytes, no padding.
unsafe impl Pod for SockaddrLl {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PacketMreq {
    ifindex: i32,
    kind: u16,
    alen: u16,
    address: [u8; 8],
}
// SAFETY: repr(C), 16 bytes, no padding.
unsafe impl Pod for PacketMreq {}

/// An AF_PACKET port. See the module documentation.
pub struct AfPacketPort {
    /// The interface's name, or `IFNAME#r` for fanout member `r`.
    name: String,
    watch: Watch,
    opts: AfPacketOptions,
    live: Option<Live>,
    stats: PortStats,
    /// Kernel drops of sockets already closed.
    kernel_drops_base: u64,
}

struct Live {
    fd: OwnedFd,
    ring: Mmap,
    rx: RxRing,
    tx: TxRing,
    max_tx_len: usize,
    /// A kick failed transiently: frames wait on the ring for the next one.
    kick_pending: bool,
    qdisc_bypass: bool,
    /// `PACKET_STATISTICS` resets on read; this accumulates it.
    kernel_drops: Cell<u64>,
    /// The promiscuous membership this socket added, dropped in `Drop`.
    promisc: Option<PacketMreq>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mreq) = &self.promisc {
            // An error means the interface is gone, and its promiscuity with it.
            let _ = sys::setsockopt(&self.fd, SOL_PACKET, PACKET_DROP_MEMBERSHIP, mreq);
        }
    }
}

struct RxRing {
    block_size: usize,
    blocks: u32,
    /// The block the next frame comes from.
    cur: u32,
    /// Where we are inside `cur`, once it is ours.
    cursor: Option<BlockCursor>,
}

struct TxRing {
    /// Offset of the tx ring in the mapping (after the rx ring).
    base: usize,
    block_size: usize,
    frames: u32,
    /// The next slot to fill.
    head: u32,
}

impl TxRing {
    fn slot(&self, i: u32) -> usize {
        self.base
            + (i / TX_FRAMES_PER_BLOCK) as usize * self.block_size
            + (i % TX_FRAMES_PER_BLOCK) as usize * TX_FRAME
    }
}

impl AfPacketPort {
    /// Opens an AF_PACKET port on `ifname` (which must exist). Errors name the interface and the
    /// failing step.
    pub fn open(ifname: &str, opts: &AfPacketOptions) -> io::Result<AfPacketPort> {
        let mut watch = Watch::new(BACKEND, ifname, opts.netns.as_deref())?;
        let live = watch.open_live(|name, ifindex, mtu| Live::open(name, ifindex, opts, mtu))?;
        Ok(AfPacketPort {
            name: ifname.to_string(),
            watch,
            opts: opts.clone(),
            live: Some(live),
            stats: PortStats::default(),
            kernel_drops_base: 0,
        })
    }

    /// Opens `n` (1..=[`MAX_FANOUT`]) ports on `ifname`, one socket each, joined in one new
    /// hash fanout group: the kernel gives each frame to one of them by its symmetric flow hash
    /// (see the module documentation). `opts.fanout` must be unset: the kernel picks the id.
    /// Member `r` is named `IFNAME#r`.
    pub fn open_fanout(
        ifname: &str,
        opts: &AfPacketOptions,
        n: usize,
    ) -> io::Result<Vec<AfPacketPort>> {
        if !(1..=MAX_FANOUT).contains(&n) {
            return Err(invalid(
                ifname,
                format!("fanout of {n} sockets, allowed 1..={MAX_FANOUT}"),
            ));
        }
        if let Some(id) = opts.fanout {
            return Err(invalid(
                ifname,
                format!("fanout id {id} given to open_fanout, which has the kernel choose one"),
            ));
        }
        let mut watch = Watch::new(BACKEND, ifname, opts.netns.as_deref())?;
        let live = watch.open_live(|name, ifindex, mtu| {
            let live = Live::open(name, ifindex, opts, mtu)?;
            join_fanout(&live.fd, name, Join::New).map(|id| (live, id))
        })?;
        let (live, id) = live;
        let opts = AfPacketOptions { fanout: Some(id), ..opts.clone() };
        let first = AfPacketPort {
            name: format!("{ifname}#0"),
            watch,
            opts: opts.clone(),
            live: Some(live),
            stats: PortStats::default(),
            kernel_drops_base: 0,
        };
        let mut out = vec![first];
        for r in 1..n {
            let mut p = AfPacketPort::open(ifname, &opts)?;
            p.name = format!("{ifname}#{r}");
            out.push(p);
        }
        Ok(out)
    }

    /// The fanout group the port is a member of, if any.
    pub fn fanout_id(&self) -> Option<u16> {
        self.opts.fanout
    }

    /// The ifindex the port is open on, 0 while down.
    pub fn ifindex(&self) -> u32 {
        self.watch.ifindex()
    }

    /// Whether the kernel accepted `PACKET_QDISC_BYPASS` (`None` while down).
    pub fn qdisc_bypass(&self) -> Option<bool> {
        self.live.as_ref().map(|l| l.qdisc_bypass)
    }

    fn close_live(&mut self) {
        if let Some(live) = self.live.take() {
            self.kernel_drops_base += live.kernel_drops();
        }
    }

    fn reopen(&mut self) {
        let o = &self.opts;
        if let Some(live) =
            self.watch.reopen_live(|name, ifindex, mtu| Live::open(name, ifindex, o, mtu))
        {
            self.live = Some(live);
        }
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        match self.live.as_mut() {
            Some(live) => live.rx(batch, &mut self.stats),
            None => 0,
        }
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        let Some(live) = self.live.as_mut() else {
            self.stats.tx_errors += sel.len() as u64;
            return 0;
        };
        let (n, err) = live.tx(batch, sel, &mut self.stats);
        if err.is_some_and(|e| sys::is_link_error(&e)) && self.watch.check_gone_now() {
            self.close_live();
        }
        n
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        s.rx_dropped += self.kernel_drops_base + self.live.as_ref().map_or(0, |l| l.kernel_drops());
        s
    }

    fn status(&self) -> PortStatus {
        self.watch.status().clone()
    }

    /// The socket: readable once the kernel retired a block (full, or after the block
    /// timeout), which is also when `rx_burst` can see its frames.
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.live.as_ref().map(|l| l.fd.as_raw_fd()));
        true
    }

    fn service(&mut self) {
        match self.watch.poll() {
            Seen::Gone => self.close_live(),
            Seen::Back => self.reopen(),
            Seen::Still => {
                let mtu = self.watch.mtu();
                if let (Some(live), Some(mtu)) = (self.live.as_mut(), mtu) {
                    live.max_tx_len = max_tx_len(Some(mtu));
                }
            }
            Seen::Nothing => {}
        }
        if let Some(live) = self.live.as_mut() {
            if live.kick_pending
                && live.kick().is_err_and(|e| sys::is_link_error(&e))
                && self.watch.check_gone_now()
            {
                self.close_live();
            }
        }
    }
}

/// Which fanout group a socket joins.
#[derive(Clone, Copy)]
enum Join {
    /// A new group, its id chosen by the kernel.
    New,
    /// The group with this id.
    Id(u16),
}

/// Joins a bound socket to a hash fanout group (the kernel wants it bound first); returns the
/// group's id.
fn join_fanout(fd: &OwnedFd, name: &str, join: Join) -> io::Result<u16> {
    let mode = PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_DEFRAG;
    let (arg, step) = match join {
        Join::New => (
            (mode | PACKET_FANOUT_FLAG_UNIQUEID) << 16,
            "setsockopt(PACKET_FANOUT, HASH|DEFRAG|UNIQUEID)".to_string(),
        ),
        Join::Id(id) => {
            (mode << 16 | u32::from(id), format!("setsockopt(PACKET_FANOUT, HASH|DEFRAG, id {id})"))
        }
    };
    sys::setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &arg).map_err(at(BACKEND, name, &step))?;
    match join {
        Join::Id(id) => Ok(id),
        Join::New => {
            let (v, _) = sys::getsockopt::<u32>(fd, SOL_PACKET, PACKET_FANOUT).map_err(at(
                BACKEND,
                name,
                "getsockopt(PACKET_FANOUT)",
            ))?;
            Ok(v as u16)
        }
    }
}

fn max_tx_len(mtu: Option<usize>) -> usize {
    let by_mtu = mtu.map_or(usize::MAX, |m| m + 14 + 4);
    (TX_FRAME - FRAME_HDR).min(BUF_SIZE - HEADROOM).min(by_mtu)
}

fn invalid(name: &str, msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{BACKEND} {name}: {msg}"))
}

impl Live {
    fn open(name: &str, ifindex: u32, o: &AfPacketOptions, mtu: Option<usize>) -> io::Result<Live> {
        if o.block_size < 4096 || o.block_size & 4095 != 0 || o.blocks == 0 {
            return Err(invalid(
                name,
                format!("block_size {} must be a multiple of 4096 and blocks > 0", o.block_size),
            ));
        }
        let tx_frames = o.tx_frames.max(1).div_ceil(TX_FRAMES_PER_BLOCK) * TX_FRAMES_PER_BLOCK;
        let rx_len = o.block_size as usize * o.blocks as usize;
        let tx_block = TX_FRAME * TX_FRAMES_PER_BLOCK as usize;
        let tx_len = tx_block * (tx_frames / TX_FRAMES_PER_BLOCK) as usize;

        let fd = sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0).map_err(at(
            BACKEND,
            name,
            "socket(AF_PACKET)",
        ))?;
        let one = 1i32;
        sys::setsockopt(&fd, SOL_PACKET, PACKET_VERSION, &TPACKET_V3).map_err(at(
            BACKEND,
            name,
            "setsockopt(PACKET_VERSION, TPACKET_V3)",
        ))?;
        sys::setsockopt(&fd, SOL_PACKET, PACKET_LOSS, &one).map_err(at(
            BACKEND,
            name,
            "setsockopt(PACKET_LOSS)",
        ))?;
        sys::setsockopt(&fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one).map_err(at(
            BACKEND,
            name,
            "setsockopt(PACKET_IGNORE_OUTGOING)",
        ))?;
        let qdisc_bypass =
            o.qdisc_bypass && sys::setsockopt(&fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one).is_ok();
        let rx_req = TpacketReq3 {
            block_size: o.block_size,
            block_nr: o.blocks,
            frame_size: RX_REQ_FRAME as u32,
            frame_nr: o.block_size / RX_REQ_FRAME as u32 * o.blocks,
            retire_blk_tov: o.block_timeout_ms,
            sizeof_priv: 0,
            feature_req_word: 0,
        };
        sys::setsockopt(&fd, SOL_PACKET, PACKET_RX_RING, &rx_req).map_err(at(
            BACKEND,
            name,
            "setsockopt(PACKET_RX_RING)",
        ))?;
        let tx_req = TpacketReq3 {
            block_size: tx_block as u32,
            block_nr: tx_frames / TX_FRAMES_PER_BLOCK,
            frame_size: TX_FRAME as u32,
            frame_nr: tx_frames,
            ..Default::default()
        };
        sys::setsockopt(&fd, SOL_PACKET, PACKET_TX_RING, &tx_req).map_err(at(
            BACKEND,
            name,
            "setsockopt(PACKET_TX_RING)",
        ))?;
        let ring =
            Mmap::shared(&fd, rx_len + tx_len, 0).map_err(at(BACKEND, name, "mmap(rx+tx ring)"))?;
        let addr = SockaddrLl {
            family: libc::AF_PACKET as u16,
            protocol: ETH_P_ALL.to_be(),
            ifindex: ifindex as i32,
            ..Default::default()
        };
        sys::bind(&fd, &addr).map_err(at(BACKEND, name, "bind"))?;
        let promisc = if o.promisc {
            let mreq = PacketMreq {
                ifindex: ifindex as i32,
                kind: PACKET_MR_PROMISC,
                ..Default::default()
            };
            sys::setsockopt(&fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq).map_err(at(
                BACKEND,
                name,
                "setsockopt(PACKET_ADD_MEMBERSHIP, PROMISC)",
            ))?;
            Some(mreq)
        } else {
            None
        };
        if let Some(id) = o.fanout {
            join_fanout(&fd, name, Join::Id(id))?;
        }
        Ok(Live {
            fd,
            ring,
            rx: RxRing {
                block_size: o.block_size as usize,
                blocks: o.blocks,
                cur: 0,
                cursor: None,
            },
            tx: TxRing { base: rx_len, block_size: tx_block, frames: tx_frames, head: 0 },
            max_tx_len: max_tx_len(mtu),
            kick_pending: false,
            qdisc_bypass,
            kernel_drops: Cell::new(0),
            promisc,
        })
    }

    fn kernel_drops(&self) -> u64 {
        if let Ok(([_packets, drops, _freeze], _)) =
            sys::getsockopt::<[u32; 3]>(&self.fd, SOL_PACKET, PACKET_STATISTICS)
        {
            self.kernel_drops.set(self.kernel_drops.get() + drops as u64);
        }
        self.kernel_drops.get()
    }

    fn rx(&mut self, batch: &mut Batch, stats: &mut PortStats) -> usize {
        let mut got = 0;
        let bs = self.rx.block_size;
        while batch.room() > 0 {
            let boff = self.rx.cur as usize * bs;
            if self.rx.cursor.is_none() {
                if self.ring.atomic_u32(boff + BLOCK_STATUS).load(Ordering::Acquire)
                    & TP_STATUS_USER
                    == 0
                {
                    break;
                }
                // SAFETY: the Acquire load saw TP_STATUS_USER: the kernel retired this block and
                // does not write it until we store TP_STATUS_KERNEL.
                let block = unsafe { self.ring.slice(boff, bs) };
                match open_block(block) {
                    Ok(c) => self.rx.cursor = Some(c),
                    Err(lost) => {
                        stats.rx_dropped += lost;
                        self.release_block();
                        continue;
                    }
                }
            }
            let Some(cursor) = self.rx.cursor.as_mut() else { break };
            // SAFETY: as above: the block is ours until `release_block`, and this slice does not
            // outlive the loop iteration.
            let block = unsafe { self.ring.slice(boff, bs) };
            while batch.room() > 0 && cursor.remaining > 0 {
                let Ok(f) = next_frame(block, cursor) else {
                    stats.rx_dropped += cursor.remaining as u64 + 1;
                    cursor.remaining = 0;
                    break;
                };
                match copy_frame(block, &f, batch) {
                    Some(len) => {
                        got += 1;
                        stats.rx_bytes += len as u64;
                    }
                    None => stats.rx_dropped += 1,
                }
            }
            if cursor.remaining == 0 {
                self.release_block();
            }
        }
        stats.rx_packets += got as u64;
        got
    }

    fn release_block(&mut self) {
        let boff = self.rx.cur as usize * self.rx.block_size;
        self.ring.atomic_u32(boff + BLOCK_STATUS).store(TP_STATUS_KERNEL, Ordering::Release);
        self.rx.cursor = None;
        self.rx.cur = (self.rx.cur + 1) % self.rx.blocks;
    }

    fn tx(
        &mut self,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut PortStats,
    ) -> (usize, Option<io::Error>) {
        let pkts = batch.packets();
        let mut taken = 0;
        let mut queued = 0;
        for &i in sel {
            let frame = pkts[i as usize].frame();
            if frame.len() < 14 || frame.len() > self.max_tx_len {
                stats.tx_errors += 1;
                taken += 1;
                continue;
            }
            let slot = self.tx.slot(self.tx.head);
            let status = self.ring.atomic_u32(slot + FRAME_STATUS);
            match status.load(Ordering::Acquire) {
                TP_STATUS_AVAILABLE => {}
                // Only without PACKET_LOSS; the kernel refused an earlier frame here.
                TP_STATUS_WRONG_FORMAT => stats.tx_errors += 1,
                _ => break,
            }
            // SAFETY: the slot is AVAILABLE (or refused): the kernel does not read it until the
            // Release store of SEND_REQUEST below.
            unsafe {
                self.ring.write::<u32>(slot, 0); // tp_next_offset: fixed-size slots
                self.ring.write::<u32>(slot + 12, frame.len() as u32); // tp_snaplen
                self.ring.write::<u32>(slot + 16, frame.len() as u32); // tp_len
                self.ring.copy_in(slot + FRAME_HDR, frame);
            }
            status.store(TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx.head = (self.tx.head + 1) % self.tx.frames;
            taken += 1;
            queued += 1;
            stats.tx_packets += 1;
            stats.tx_bytes += frame.len() as u64;
        }
        stats.tx_full += (sel.len() - taken) as u64;
        if queued > 0 || self.kick_pending {
            return (taken, self.kick().err());
        }
        (taken, None)
    }

    /// One non-blocking `send` makes the kernel walk the tx ring and send every SEND_REQUEST slot.
    fn kick(&mut self) -> io::Result<()> {
        match sys::kick_tx(&self.fd) {
            Ok(()) => {
                self.kick_pending = false;
                Ok(())
            }
            Err(e) => {
                self.kick_pending = true;
                match sys::errno(&e) {
                    libc::EAGAIN | libc::ENOBUFS | libc::EINTR => Ok(()),
                    _ => Err(e),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Block parsing: pure functions over a block's bytes, so they can be tested with made-up blocks.

/// Where we are inside a retired block.
#[derive(Debug, PartialEq, Eq)]
struct BlockCursor {
    /// Frames left to read.
    remaining: u32,
    /// Offset of the next frame header.
    next: usize,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    u16::from_ne_bytes(b[off..off + 2].try_into().expect("2 bytes"))
}

/// Checks a block header. Err carries how many frames are lost with the block (at least 1, at
/// most what could fit, so a garbage count cannot blow up the counters).
fn open_block(b: &[u8]) -> Result<BlockCursor, u64> {
    if b.len() < BLOCK_HDR {
        return Err(1);
    }
    let priv_off = u32_at(b, 4) as usize;
    let num = u32_at(b, 12);
    let first = u32_at(b, 16) as usize;
    let blk_len = u32_at(b, 20) as usize;
    let fit = (b.len() - BLOCK_HDR) / FRAME_HDR;
    let lost = (num as u64).clamp(1, fit.max(1) as u64);
    if num as usize > fit || priv_off > b.len() || blk_len > b.len() || blk_len < BLOCK_HDR {
        return Err(lost);
    }
    if num == 0 {
        return Ok(BlockCursor { remaining: 0, next: 0 });
    }
    if first < BLOCK_HDR || first.checked_add(FRAME_HDR).is_none_or(|end| end > blk_len) {
        return Err(lost);
    }
    Ok(BlockCursor { remaining: num, next: first })
}

/// One frame's header, checked.
#[derive(Debug, PartialEq, Eq)]
struct RxFrame {
    /// Offset of the frame's first byte in the block, and bytes captured.
    mac: usize,
    snaplen: usize,
    /// Length on the wire (less the stripped VLAN tag); more than `snaplen` means truncated.
    len: usize,
    status: u32,
    tci: u16,
    tpid: u16,
}

/// Reads the frame at the cursor and advances it. Err if the header or the frame's bytes do not
/// lie inside the block; the rest of the block is then unusable.
fn next_frame(b: &[u8], c: &mut BlockCursor) -> Result<RxFrame, ()> {
    let off = c.next;
    if off.checked_add(FRAME_HDR).is_none_or(|end| end > b.len()) {
        return Err(());
    }
    let next = u32_at(b, off) as usize;
    let snaplen = u32_at(b, off + 12) as usize;
    let len = u32_at(b, off + 16) as usize;
    let status = u32_at(b, off + FRAME_STATUS);
    let mac = u16_at(b, off + 24) as usize;
    let tci = u16_at(b, off + 32);
    let tpid = u16_at(b, off + 36);
    if mac < FRAME_HDR || off + mac + snaplen > b.len() {
        return Err(());
    }
    c.remaining -= 1;
    // A next offset that would not move past this header cannot be right; poison the cursor so
    // the next call fails instead of looping or re-reading.
    c.next = if next >= FRAME_HDR { off + next } else { usize::MAX };
    Ok(RxFrame { mac: off + mac, snaplen, len, status, tci, tpid })
}

/// Copies a frame into the batch's next spare slot, re-inserting a VLAN tag the kernel moved to
/// metadata. Returns the frame's length, or `None` if it must be dropped (truncated, empty, too
/// long for a packet buffer).
fn copy_frame(block: &[u8], f: &RxFrame, batch: &mut Batch) -> Option<usize> {
    if f.snaplen == 0 || f.snaplen < f.len {
        return None;
    }
    let data = &block[f.mac..f.mac + f.snaplen];
    let tagged = f.status & TP_STATUS_VLAN_VALID != 0;
    let total = f.snaplen + if tagged { 4 } else { 0 };
    if total > BUF_SIZE - HEADROOM || (tagged && f.snaplen < 12) {
        return None;
    }
    let buf = batch.spare_mut()?;
    let (store, _) = buf.storage_mut();
    let out = &mut store[HEADROOM..HEADROOM + total];
    if tagged {
        let tpid = if f.status & TP_STATUS_VLAN_TPID_VALID != 0 { f.tpid } else { 0x8100 };
        out[..12].copy_from_slice(&data[..12]);
        out[12..14].copy_from_slice(&tpid.to_be_bytes());
        out[14..16].copy_from_slice(&f.tci.to_be_bytes());
        out[16..].copy_from_slice(&data[12..]);
    } else {
        out.copy_from_slice(data);
    }
    buf.set_window(HEADROOM, total);
    batch.commit();
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block as the kernel lays it out: header, then frames each `FRAME_HDR + pad` apart.
    fn block(frames: &[&[u8]], size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let put =
            |b: &mut Vec<u8>, off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        put(&mut b, 4, BLOCK_HDR as u32); // offset_to_priv
        put(&mut b, 12, frames.len() as u32);
        put(&mut b, 16, BLOCK_HDR as u32);
        let mut off = BLOCK_HDR;
        for (i, f) in frames.iter().enumerate() {
            let mac = 64usize; // header + padding, as the kernel aligns it
            let step = (mac + f.len()).div_ceil(16) * 16;
            put(&mut b, off, if i + 1 < frames.len() { step as u32 } else { 0 });
            put(&mut b, off + 12, f.len() as u32);
            put(&mut b, off + 16, f.len() as u32);
            b[off + 24..off + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
            b[off + mac..off + mac + f.len()].copy_from_slice(f);
            off += step;
        }
        put(&mut b, 20, off as u32); // blk_len
        b
    }

    fn walk(b: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut c = open_block(b).map_err(|n| format!("block lost {n}"))?;
        let mut out = Vec::new();
        let mut batch = Batch::new(16);
        while c.remaining > 0 {
            let f = next_frame(b, &mut c).map_err(|()| format!("frame {} bad", out.len()))?;
            batch.clear();
            copy_frame(b, &f, &mut batch).ok_or("dropped")?;
            out.push(batch.get(0).frame().to_vec());
        }
        Ok(out)
    }

    #[test]
    fn a_good_block_yields_its_frames() {
        let f1 = [1u8; 60];
        let f2 = [2u8; 1514];
        let b = block(&[&f1, &f2], 4096);
        assert_eq!(walk(&b).unwrap(), vec![f1.to_vec(), f2.to_vec()]);
        assert_eq!(open_block(&block(&[], 4096)), Ok(BlockCursor { remaining: 0, next: 0 }));
    }

    #[test]
    fn bad_block_headers_lose_the_block() {
        let good = block(&[&[1u8; 60]], 4096);
        let set = |off: usize, v: u32| {
            let mut b = good.clone();
            b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
            b
        };
        // num_pkts that cannot fit, first packet past the block or inside its header,
        // blk_len past the block, offset_to_priv past the block
        for (b, lost) in [
            (set(12, u32::MAX), (4096 - 48) / 48),
            (set(12, 1000), (4096 - 48) / 48),
            (set(16, 4096), 1),
            (set(16, 4096 - 47), 1),
            (set(16, 0), 1),
            (set(16, u32::MAX), 1),
            (set(20, 4097), 1),
            (set(20, 0), 1),
            (set(4, 5000), 1),
        ] {
            assert_eq!(open_block(&b), Err(lost as u64));
        }
        assert_eq!(open_block(&good[..40]), Err(1));
    }

    #[test]
    fn bad_frame_headers_are_refused() {
        let good = block(&[&[1u8; 60], &[2u8; 100]], 4096);
        let set = |off: usize, v: u32| {
            let mut b = good.clone();
            b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
            b
        };
        let f0 = BLOCK_HDR;
        // snaplen past the block
        assert!(walk(&set(f0 + 12, 5000)).unwrap_err().contains("frame 0"));
        assert!(walk(&set(f0 + 12, u32::MAX)).unwrap_err().contains("frame 0"));
        // tp_mac inside the header, or past the block
        let mut b = good.clone();
        b[f0 + 24..f0 + 26].copy_from_slice(&8u16.to_ne_bytes());
        assert!(walk(&b).unwrap_err().contains("frame 0"));
        b[f0 + 24..f0 + 26].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert!(walk(&b).unwrap_err().contains("frame 0"));
        // next offset 0 (would re-read frame 0 forever), past the block, huge
        for next in [0, 5, 4096, u32::MAX] {
            assert!(walk(&set(f0, next)).unwrap_err().contains("frame 1"), "{next}");
        }
        // truncated (snaplen < len) and empty frames are dropped, not block errors
        let mut c = open_block(&good).unwrap();
        let t = set(f0 + 16, 61);
        let f = next_frame(&t, &mut c).unwrap();
        assert_eq!(copy_frame(&t, &f, &mut Batch::new(1)), None);
    }

    #[test]
    fn vlan_tags_the_kernel_stripped_are_put_back() {
        let mut inner = vec![0xaa; 12];
        inner.extend_from_slice(&[0x88, 0xb5, 1, 2, 3, 4]);
        let mut b = block(&[&inner], 4096);
        let f0 = BLOCK_HDR;
        b[f0 + 20..f0 + 24].copy_from_slice(&(TP_STATUS_VLAN_VALID | TP_STATUS_USER).to_ne_bytes());
        b[f0 + 32..f0 + 34].copy_from_slice(&0x0064u16.to_ne_bytes());
        let got = walk(&b).unwrap();
        let mut want = vec![0xaa; 12];
        want.extend_from_slice(&[0x81, 0x00, 0x00, 0x64, 0x88, 0xb5, 1, 2, 3, 4]);
        assert_eq!(got, vec![want]);
        // too short to hold MAC addresses: dropped
        let mut c = open_block(&b).unwrap();
        let mut f = next_frame(&b, &mut c).unwrap();
        f.snaplen = 6;
        f.len = 6;
        assert_eq!(copy_frame(&b, &f, &mut Batch::new(1)), None);
    }

    #[test]
    fn a_fanout_is_checked_before_anything_opens() {
        let e = AfPacketPort::open_fanout("veth9", &AfPacketOptions::default(), 0).err().unwrap();
        assert!(
            e.to_string().contains("afpacket veth9: fanout of 0 sockets, allowed 1..=64"),
            "{e}"
        );
        let e = AfPacketPort::open_fanout("veth9", &AfPacketOptions::default(), MAX_FANOUT + 1)
            .err()
            .unwrap();
        assert!(e.to_string().contains("fanout of 65 sockets"), "{e}");
        let o = AfPacketOptions { fanout: Some(7), ..Default::default() };
        let e = AfPacketPort::open_fanout("veth9", &o, 2).err().unwrap();
        assert!(e.to_string().contains("fanout id 7 given to open_fanout"), "{e}");
    }
}
