//! The `afxdp` backend: a port on the receive queues of a kernel interface (by default all of
//! them), an AF_XDP socket per queue.
//!
//! Job: take every frame arriving on its queues away from the kernel stack and hand it to
//! `rx_burst`; send what `tx_burst` is given out of the interface. Pure Rust over `libc`: no
//! libxdp, libbpf or clang.
//!
//! Several queues ([`Queues`], see `queues.rs`): a socket per queue, each as below with its own
//! UMEM; one program and one map for the interface, shared by the sockets and by the ports of
//! [`AfXdpPort::open_spread`] (a replicated VR's); rx serves the sockets in turn, tx uses the
//! first. Each socket, at open (nothing is allocated or mapped after that, on the packet path):
//! - one anonymous mapping is the UMEM, cut into frames (4096 × 2048 bytes by default): the
//!   first half only ever circulates through the fill and rx rings, the second half only through
//!   tx and completion, so a frame's address says which side owns it;
//! - the socket is bound with `XDP_USE_NEED_WAKEUP` and, by default, `XDP_USE_SG` (multi-buffer,
//!   Linux 6.6+; dropped where the kernel refuses it, and [`AfXdpPort::multi_buffer`] says so),
//!   in the mode [`BindMode`] asks: by default the kernel picks zero-copy where the driver has
//!   it and copy mode otherwise (veth: always copy); [`AfXdpPort::zero_copy`] says which. The
//!   port copies frames into batch buffers either way; zero-copy saves the kernel's copy;
//! - an `XSKMAP` holds each socket at its queue's index, and a five-instruction XDP program
//!   (`bpf_redirect_map(xsks, rx_queue_index, XDP_PASS)`) attached through a **BPF link**
//!   redirects the queue's frames into it; with multi-buffer it is loaded frags-aware
//!   (`BPF_F_XDP_HAS_FRAGS`), without which veth refuses driver mode once its peer's MTU passes
//!   about 3.5 KB. Driver mode is tried first, SKB (generic) mode only
//!   if driver mode is refused; [`AfXdpPort::mode`] says which is active. The link dies with its
//!   last descriptor: dropping the port, exiting and being SIGKILLed all detach the program.
//!   One XDP program per interface: if another is attached, open fails and says so.
//! - The kernel frees a closed socket's hold on its queue from a workqueue, so `open` retries a
//!   busy queue for up to a second (a port re-opened right after another closed, or after its
//!   process was killed); re-opens from `service()` never wait.
//! - While open, the port's sockets keep its network namespace alive, as any socket does.
//! - With [`AfXdpOptions::threaded_napi`] (off by default), driver mode also turns on the
//!   interface's threaded NAPI and pins its kernel thread to the CPUs of the thread that calls
//!   [`Port::service`] (the port's worker), see `napi.rs`.
//!
//! Contract and checks:
//! - rx: a frame longer than a UMEM frame arrives as several descriptors, all but the last
//!   with `XDP_PKT_CONTD`; the port joins them into one packet buffer (the kernel publishes a
//!   frame's descriptors together; a chain that fills the whole ring unfinished is dropped). Each
//!   descriptor's address must lie in the rx frames and its length inside its frame; a frame
//!   with a bad descriptor, or longer than a packet buffer ([`crate::MAX_FRAME`]), is dropped
//!   whole, never split, and counted in `rx_dropped` and by reason in [`AfXdpPort::rx_drops`]
//!   (its frames, when ours, go back to the fill ring). Frames are copied to the batch at
//!   [`crate::HEADROOM`] and their UMEM frames refilled in the same pass; the kernel's own drop
//!   counters (`XDP_STATISTICS`: ring full, no fill frame, invalid descriptors) are added to
//!   `rx_dropped`.
//! - tx: a frame longer than a UMEM frame goes out as several descriptors chained the same way
//!   (with multi-buffer; without it such a frame is a `tx_errors`).
//!   Completions must name one of our tx frames that is in flight, else they are ignored and
//!   counted ([`AfXdpPort::kernel_anomalies`]). Frames shorter than an Ethernet header or longer
//!   than the MTU allows (or than a UMEM frame) are taken and counted in `tx_errors`, because
//!   veth would drop them silently. In copy mode the kernel transmits only inside `sendto`, at
//!   most a budget of descriptors per call; the port raises the budget to the ring size where the
//!   kernel allows (`XDP_MAX_TX_SKB_BUDGET`, 6.17+) and otherwise kicks until the ring drains.
//! - an interface that disappears (deleted, moved to another namespace, replaced) is noticed by
//!   [`Port::service`] (or at once by a tx error): the port releases everything, reports
//!   `Down("interface X disappeared")`, and re-opens itself, in the namespace it was opened in,
//!   once an interface of that name exists again.
//!
//! Known limit: frames the local stack sent with checksum offload (CHECKSUM_PARTIAL) arrive with
//! unfinished L4 checksums, as with any copy-mode XDP on veth; turn tx checksumming off on the
//! peer (`ethtool -K peer tx off`) where kernel-originated traffic feeds an AF_XDP port.

mod bpf;
mod napi;
mod queues;
mod ring;

pub use queues::{rx_queue_count, rx_queue_count_in, QueueInfo, Queues};

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::sys::{self, at, Mmap, Pod, Seen, Watch};
use crate::{Batch, Port, PortStats, PortStatus, HEADROOM, MAX_FRAME};

use queues::Live;
use ring::{RingOffsets, RxDesc, UmemLayout, XdpDesc, XskRing};

const BACKEND: &str = "afxdp";

const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_OPTIONS: i32 = 8;
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;

const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_USE_SG: u16 = 1 << 4;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;
/// In a descriptor's `options`: the frame goes on in the next descriptor.
const XDP_PKT_CONTD: u32 = 1;

const XDP_PGOFF_RX_RING: u64 = 0;
const XDP_PGOFF_TX_RING: u64 = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: u64 = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: u64 = 0x1_8000_0000;

/// How long `open` retries a queue that is still busy from a socket closed a moment ago.
const OPEN_BIND_WAIT: Duration = Duration::from_secs(1);

/// Descriptors copy mode sends per `sendto` unless the budget is raised.
const KERNEL_TX_BATCH: u32 = 32;

/// Which XDP attach mode to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Driver (native) mode, falling back to SKB mode if the driver refuses. Only a request:
    /// [`AfXdpPort::mode`] never reports `Auto`.
    #[default]
    Auto,
    /// Driver (native) mode only (`XDP_FLAGS_DRV_MODE`).
    Driver,
    /// Generic mode only (`XDP_FLAGS_SKB_MODE`): works on any interface, slower.
    Skb,
}

/// How the socket shares frames with the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BindMode {
    /// Zero-copy where the driver supports it (and multi-buffer in zero-copy, when that is
    /// asked for), copy mode otherwise: the kernel decides at bind time. Only a request:
    /// [`AfXdpPort::zero_copy`] says what the port got.
    #[default]
    Auto,
    /// Copy mode only (`XDP_COPY`).
    Copy,
    /// Zero-copy only (`XDP_ZEROCOPY`): open fails where the driver cannot (veth never can).
    ZeroCopy,
}

/// How to open an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpOptions {
    /// UMEM frames, half for receiving and half for sending; a power of two, 16 to 65536.
    pub frames: u32,
    /// Bytes per UMEM frame: 2048 or 4096. Received frames get this minus 256 (the kernel's
    /// XDP headroom); sent frames, all of it (and never more than a packet buffer holds).
    pub frame_size: u32,
    /// The interface's receive queues to bind, a socket each (see [`Queues`]). Frames arriving
    /// on other queues go to the kernel stack.
    pub queues: Queues,
    /// XDP attach mode.
    pub mode: XdpMode,
    /// Copy or zero-copy.
    pub bind: BindMode,
    /// In driver mode, turn on threaded NAPI for the interface and pin its kernel thread to the
    /// CPUs of the worker that drives the port (see `napi.rs`: on veth this moves the XDP
    /// redirect and the copy into the UMEM off the sender's CPU onto the router's). Only where
    /// the interface is visible in this process's sysfs; the old setting comes back on close.
    /// Off by default: veth hands frames to its NAPI through a 256-frame ring, and a sender's
    /// burst that outruns the NAPI thread overflows it (veth counts those drops, the port
    /// cannot see them), where softirq NAPI on the sender's CPU would have kept up.
    pub threaded_napi: bool,
    /// Take frames longer than one UMEM frame as several descriptors (`XDP_USE_SG`, Linux
    /// 6.6+) and join them; needed for jumbo frames. Where the kernel refuses the flag, the
    /// port opens without it and says so in [`AfXdpPort::multi_buffer`].
    pub multi_buffer: bool,
    /// Open the port in this network namespace (`/run/netns/NAME`) instead of the caller's.
    pub netns: Option<PathBuf>,
}

/// UMEM frames of a port by default: 4,096 for each direction, so rings of 4,096 entries. A
/// worker the OS descheduled for a few milliseconds comes back to a full receive ring at a
/// flood's pace: with two nice-19 busy loops beside a 10 s flood through a VR on veth (2 CPUs),
/// 2,048-entry rings lost 0.6-3.9 % of the flood and some pings, 4,096 at most 0.07 % and no
/// ping (control's `tests/neighbor_flood_hosts.rs`). The UMEM, 8,192 frames of 2 KiB, is
/// 16 MiB a socket.
pub const DEFAULT_FRAMES: u32 = 8192;

impl Default for AfXdpOptions {
    fn default() -> Self {
        AfXdpOptions {
            frames: DEFAULT_FRAMES,
            frame_size: 2048,
            queues: Queues::All,
            mode: XdpMode::Auto,
            bind: BindMode::Auto,
            threaded_napi: false,
            multi_buffer: true,
            netns: None,
        }
    }
}

/// `struct xdp_umem_reg` up to `headroom` (the kernel accepts this first version's size).
#[repr(C)]
#[derive(Clone, Copy)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
}
// SAFETY: repr(C), 24 bytes, no padding.
unsafe impl Pod for UmemReg {}

/// `struct sockaddr_xdp`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}
// SAFETY: repr(C), 16 bytes, no padding.
unsafe impl Pod for SockaddrXdp {}

/// What the kernel counted, from `XDP_STATISTICS`.
#[derive(Clone, Copy, Debug, Default)]
struct KernelCounts {
    rx_dropped: u64,
    tx_invalid: u64,
}

/// Frames the port itself dropped on the way in, by reason (all are in `rx_dropped` too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxDrops {
    /// Frames longer than a packet buffer ([`crate::MAX_FRAME`]): dropped whole, never split.
    pub too_long: u64,
    /// Descriptors with an address outside the rx frames or a length outside their frame.
    pub bad_desc: u64,
    /// Multi-buffer chains that could never end (the ring full of one unfinished frame).
    pub bad_chain: u64,
}

/// Why a received frame was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lost {
    TooLong,
    BadDesc,
    BadChain,
}

/// An AF_XDP port. See the module documentation.
pub struct AfXdpPort {
    watch: Watch,
    opts: AfXdpOptions,
    /// The interface's XDP program and XSKMAP, shared with the other ports of one
    /// [`AfXdpPort::open_spread`].
    group: queues::Group,
    live: Option<Live>,
    stats: PortStats,
    drops: RxDrops,
    /// Kernel counts of sockets already closed (before a re-open).
    kernel_base: KernelCounts,
    anomalies: u64,
}

/// One queue's AF_XDP socket, its rings and its own UMEM.
struct Sock {
    queue: u32,
    /// Frames received on this queue (the port's `rx_packets` is the sum).
    rx_packets: u64,
    xsk: OwnedFd,
    rx: XskRing,
    tx: XskRing,
    fill: XskRing,
    comp: XskRing,
    umem: Mmap,
    layout: UmemLayout,
    /// Tx frames not in flight (indices), and which ones are in flight.
    tx_free: Vec<u32>,
    tx_busy: Vec<bool>,
    zero_copy: bool,
    /// Bound with `XDP_USE_SG`: frames may span descriptors.
    sg: bool,
    max_tx_len: usize,
    /// `sendto` calls one kick may make before giving up until the next burst.
    max_kicks: u32,
}

impl AfXdpPort {
    /// Opens an AF_XDP port on `ifname` (which must exist): UMEM, socket, rings, XSKMAP, program
    /// and link, in that order. Errors name the interface and the failing step.
    pub fn open(ifname: &str, opts: &AfXdpOptions) -> io::Result<AfXdpPort> {
        Self::open_in(ifname, opts, queues::Group::default())
    }

    fn open_in(ifname: &str, opts: &AfXdpOptions, group: queues::Group) -> io::Result<AfXdpPort> {
        let mut watch = Watch::new(BACKEND, ifname, opts.netns.as_deref())?;
        let g = &group;
        let live = watch.open_live(|name, ifindex, mtu| {
            Live::open(name, ifindex, opts, mtu, OPEN_BIND_WAIT, g)
        })?;
        Ok(AfXdpPort {
            watch,
            opts: opts.clone(),
            group,
            live: Some(live),
            stats: PortStats::default(),
            drops: RxDrops::default(),
            kernel_base: KernelCounts::default(),
            anomalies: 0,
        })
    }

    /// The XDP mode in use (`Driver` or `Skb`), `None` while the port is down.
    pub fn mode(&self) -> Option<XdpMode> {
        self.live.as_ref().map(|l| l.xdp.mode)
    }

    /// True if every queue's socket is bound zero-copy, false if any is in copy mode (see
    /// [`AfXdpPort::queues`] for each), `None` while down.
    pub fn zero_copy(&self) -> Option<bool> {
        self.live.as_ref().map(|l| l.socks.iter().all(|s| s.zero_copy))
    }

    /// True if the sockets take frames over several descriptors (`XDP_USE_SG`), so frames up
    /// to [`crate::MAX_FRAME`] pass; `None` while down.
    pub fn multi_buffer(&self) -> Option<bool> {
        self.live.as_ref().map(|l| l.socks.iter().all(|s| s.sg))
    }

    /// Each bound queue: its index, copy or zero-copy, and frames received on it; empty while
    /// down.
    pub fn queues(&self) -> Vec<QueueInfo> {
        self.live.as_ref().map_or_else(Vec::new, Live::queue_info)
    }

    /// The threaded-NAPI kernel threads of the interface, once pinned to the CPUs of the thread
    /// that calls [`Port::service`]; empty where threaded NAPI is off (see
    /// [`AfXdpOptions::threaded_napi`]).
    pub fn napi_threads(&self) -> &[i32] {
        self.live.as_ref().and_then(|l| l.napi.as_ref()).map_or(&[], |n| n.pinned_threads())
    }

    /// What the port dropped on the way in, by reason.
    pub fn rx_drops(&self) -> RxDrops {
        self.drops
    }

    /// The kernel id of the attached XDP program (as `ip link` shows it), `None` while down.
    pub fn prog_id(&self) -> Option<u32> {
        self.live.as_ref().map(|l| l.xdp.prog_id)
    }

    /// The ifindex the port is open on, 0 while down.
    pub fn ifindex(&self) -> u32 {
        self.watch.ifindex()
    }

    /// Values the kernel wrote into the rings that failed a check and were ignored (a
    /// completion for a frame not in flight...). Always 0 unless the kernel misbehaves.
    pub fn kernel_anomalies(&self) -> u64 {
        self.anomalies
    }

    fn kernel_counts(&self) -> KernelCounts {
        let mut k = self.kernel_base;
        if let Some(now) = self.live.as_ref().and_then(|l| l.kernel_counts()) {
            k.rx_dropped += now.rx_dropped;
            k.tx_invalid += now.tx_invalid;
        }
        k
    }

    fn close_live(&mut self) {
        if let Some(live) = self.live.take() {
            if let Some(k) = live.kernel_counts() {
                self.kernel_base.rx_dropped += k.rx_dropped;
                self.kernel_base.tx_invalid += k.tx_invalid;
            }
        }
    }

    fn reopen(&mut self) {
        let (o, g) = (&self.opts, &self.group);
        if let Some(live) = self
            .watch
            .reopen_live(|name, ifindex, mtu| Live::open(name, ifindex, o, mtu, Duration::ZERO, g))
        {
            self.live = Some(live);
        }
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        self.watch.name()
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        match self.live.as_mut() {
            Some(live) => live.rx(batch, &mut self.stats, &mut self.drops),
            None => 0,
        }
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        let Some(live) = self.live.as_mut() else {
            self.stats.tx_errors += sel.len() as u64;
            return 0;
        };
        let (n, err) = live.tx(batch, sel, &mut self.stats, &mut self.anomalies);
        if err.is_some_and(|e| sys::is_link_error(&e)) && self.watch.check_gone_now() {
            self.close_live();
        }
        n
    }

    fn stats(&self) -> PortStats {
        let k = self.kernel_counts();
        let mut s = self.stats;
        s.rx_dropped += k.rx_dropped;
        s.tx_errors += k.tx_invalid;
        s
    }

    fn status(&self) -> PortStatus {
        self.watch.status().clone()
    }

    fn mode_name(&self) -> Option<&'static str> {
        self.live.as_ref().map(Live::mode_name)
    }

    /// The sockets: each readable while its rx ring holds frames (poll(2) also wakes the
    /// driver where a fill ring asked for it).
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.live.iter().flat_map(|l| l.socks.iter().map(|s| s.xsk.as_raw_fd())));
        true
    }

    fn service(&mut self) {
        match self.watch.poll() {
            Seen::Gone => self.close_live(),
            Seen::Back => self.reopen(),
            Seen::Still => {
                let mtu = self.watch.mtu();
                if let Some(live) = self.live.as_mut() {
                    live.socks.iter_mut().for_each(|s| s.set_mtu(mtu));
                }
            }
            Seen::Nothing => {}
        }
        if let Some(napi) = self.live.as_mut().and_then(|l| l.napi.as_mut()) {
            napi.follow();
        }
        if let Some(live) = self.live.as_mut() {
            // Descriptors a previous kick left behind (budget or EAGAIN) go out now.
            if live.kick().is_err_and(|e| sys::is_link_error(&e)) && self.watch.check_gone_now() {
                self.close_live();
            }
        }
    }
}

/// The longest frame the port sends: MTU + Ethernet header + one VLAN tag (what veth and most
/// drivers forward), and one UMEM frame unless frames may span several.
fn max_tx_len(frame_size: usize, sg: bool, mtu: Option<usize>) -> usize {
    let by_mtu = mtu.map_or(usize::MAX, |m| m + 14 + 4);
    let by_umem = if sg { MAX_FRAME } else { frame_size };
    by_umem.min(MAX_FRAME).min(by_mtu)
}

/// Binds `xsk` to its queue: with `XDP_USE_SG` when asked, dropping it where the kernel does not
/// know it (before 6.6: EINVAL), and in the mode asked for. Returns (multi-buffer, zero-copy).
fn bind_queue(
    xsk: &OwnedFd,
    name: &str,
    ifindex: u32,
    queue: u32,
    o: &AfXdpOptions,
    bind_wait: Duration,
) -> io::Result<(bool, bool)> {
    let mode = match o.bind {
        BindMode::Auto => 0,
        BindMode::Copy => XDP_COPY,
        BindMode::ZeroCopy => XDP_ZEROCOPY,
    };
    let mut sg = o.multi_buffer;
    // The kernel releases a closed socket's hold on the queue from a workqueue, so a port
    // re-opened right after another closed (or was killed) can briefly see EBUSY.
    let deadline = Instant::now() + bind_wait;
    loop {
        let flags = mode | XDP_USE_NEED_WAKEUP | if sg { XDP_USE_SG } else { 0 };
        let addr = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        match sys::bind(xsk, &addr) {
            Ok(()) => break,
            Err(e) if sys::errno(&e) == libc::EBUSY && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if sys::errno(&e) == libc::EINVAL && sg => sg = false,
            Err(e) => {
                let e = match sys::errno(&e) {
                    libc::EBUSY => io::Error::new(
                        e.kind(),
                        format!("{e} (another AF_XDP socket on this queue?)"),
                    ),
                    libc::EOPNOTSUPP if o.bind == BindMode::ZeroCopy => io::Error::new(
                        e.kind(),
                        format!(
                            "{e} (the driver has no zero-copy AF_XDP{})",
                            if sg { " with multi-buffer" } else { "" }
                        ),
                    ),
                    _ => e,
                };
                let step = format!("bind(queue {queue}, {:?})", o.bind);
                return Err(sys::step_err(BACKEND, name, &step, e));
            }
        }
    }
    let (opts, _) = sys::getsockopt::<u32>(xsk, libc::SOL_XDP, XDP_OPTIONS).map_err(at(
        BACKEND,
        name,
        "getsockopt(XDP_OPTIONS)",
    ))?;
    Ok((sg, opts & XDP_OPTIONS_ZEROCOPY != 0))
}

impl Sock {
    /// The socket of `queue`, bound, its fill ring full. `bind_wait` is how long to retry a
    /// busy queue (see below): some time at open, none from `service()`, which must not block
    /// and retries later anyway.
    fn open(
        name: &str,
        ifindex: u32,
        queue: u32,
        o: &AfXdpOptions,
        mtu: Option<usize>,
        bind_wait: Duration,
    ) -> io::Result<Sock> {
        if !o.frames.is_power_of_two() || !(16..=65536).contains(&o.frames) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{BACKEND} {name}: frames must be a power of two from 16 to 65536, not {}",
                    o.frames
                ),
            ));
        }
        if o.frame_size != 2048 && o.frame_size != 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{BACKEND} {name}: frame_size must be 2048 or 4096, not {}", o.frame_size),
            ));
        }
        let half = o.frames / 2;
        let layout =
            UmemLayout { frame_size: o.frame_size as u64, rx_frames: half, tx_frames: half };
        // Rings as large as the frames behind them: the fill ring can take every rx frame back
        // and the completion ring every tx frame, so neither can overflow.
        let ring_size = half;

        let umem =
            Mmap::anonymous(layout.len() as usize).map_err(at(BACKEND, name, "mmap(UMEM)"))?;
        let xsk = sys::socket(libc::AF_XDP, libc::SOCK_RAW, 0).map_err(at(
            BACKEND,
            name,
            "socket(AF_XDP)",
        ))?;
        let reg =
            UmemReg { addr: umem.addr(), len: layout.len(), chunk_size: o.frame_size, headroom: 0 };
        sys::setsockopt(&xsk, libc::SOL_XDP, XDP_UMEM_REG, &reg)
            .map_err(|e| umem_err(name, layout.len(), e))?;
        for (opt, what) in [
            (XDP_UMEM_FILL_RING, "setsockopt(XDP_UMEM_FILL_RING)"),
            (XDP_UMEM_COMPLETION_RING, "setsockopt(XDP_UMEM_COMPLETION_RING)"),
            (XDP_RX_RING, "setsockopt(XDP_RX_RING)"),
            (XDP_TX_RING, "setsockopt(XDP_TX_RING)"),
        ] {
            sys::setsockopt(&xsk, libc::SOL_XDP, opt, &ring_size)
                .map_err(at(BACKEND, name, what))?;
        }
        let (raw, got) = sys::getsockopt::<[u64; 16]>(&xsk, libc::SOL_XDP, XDP_MMAP_OFFSETS)
            .map_err(at(BACKEND, name, "getsockopt(XDP_MMAP_OFFSETS)"))?;
        if got != std::mem::size_of::<[u64; 16]>() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{BACKEND} {name}: getsockopt(XDP_MMAP_OFFSETS): {got} bytes, kernel too old (need 5.4+)"),
            ));
        }
        let offs = |i: usize| RingOffsets {
            producer: raw[i * 4],
            consumer: raw[i * 4 + 1],
            desc: raw[i * 4 + 2],
            flags: raw[i * 4 + 3],
        };
        let desc = std::mem::size_of::<XdpDesc>();
        let rx = XskRing::map(&xsk, XDP_PGOFF_RX_RING, &offs(0), ring_size, desc).map_err(at(
            BACKEND,
            name,
            "mmap(rx ring)",
        ))?;
        let tx = XskRing::map(&xsk, XDP_PGOFF_TX_RING, &offs(1), ring_size, desc).map_err(at(
            BACKEND,
            name,
            "mmap(tx ring)",
        ))?;
        let mut fill = XskRing::map(&xsk, XDP_UMEM_PGOFF_FILL_RING, &offs(2), ring_size, 8)
            .map_err(at(BACKEND, name, "mmap(fill ring)"))?;
        let comp = XskRing::map(&xsk, XDP_UMEM_PGOFF_COMPLETION_RING, &offs(3), ring_size, 8)
            .map_err(at(BACKEND, name, "mmap(completion ring)"))?;

        let (sg, zero_copy) = bind_queue(&xsk, name, ifindex, queue, o, bind_wait)?;
        // Let one sendto move the whole ring (6.17+); older kernels stop at 32 per call.
        let budget_raised = ring_size >= KERNEL_TX_BATCH
            && sys::setsockopt(&xsk, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &ring_size).is_ok();
        let per_kick = if budget_raised { ring_size } else { KERNEL_TX_BATCH };

        for i in 0..layout.rx_frames {
            fill.write::<u64>(i, layout.rx_frame(i));
        }
        fill.submit(layout.rx_frames);

        Ok(Sock {
            queue,
            rx_packets: 0,
            xsk,
            rx,
            tx,
            fill,
            comp,
            umem,
            layout,
            tx_free: (0..layout.tx_frames).rev().collect(),
            tx_busy: vec![false; layout.tx_frames as usize],
            zero_copy,
            sg,
            max_tx_len: max_tx_len(o.frame_size as usize, sg, mtu),
            max_kicks: ring_size / per_kick + 2,
        })
    }

    fn set_mtu(&mut self, mtu: Option<usize>) {
        if mtu.is_some() {
            self.max_tx_len = max_tx_len(self.layout.frame_size as usize, self.sg, mtu);
        }
    }

    fn kernel_counts(&self) -> Option<KernelCounts> {
        let (s, _) = sys::getsockopt::<[u64; 6]>(&self.xsk, libc::SOL_XDP, XDP_STATISTICS).ok()?;
        // rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full, (fill ring empty and tx
        // ring empty are events, not losses: a fill-less frame is also in rx_dropped)
        Some(KernelCounts { rx_dropped: s[0] + s[1] + s[3], tx_invalid: s[2] })
    }

    fn rx(&mut self, batch: &mut Batch, stats: &mut PortStats, drops: &mut RxDrops) -> usize {
        let avail = self.rx.available();
        let fill_room = self.fill.free();
        let (mut done, mut refill, mut got) = (0u32, 0u32, 0usize);
        while done < avail && batch.room() > 0 {
            let (n, cut) = match self.chain_len(done, avail) {
                Some(n) => (n, false),
                // The kernel publishes a frame's descriptors together, so the rest of this one
                // comes with a later update, unless the ring is already full of it.
                None if avail < self.rx.size() => break,
                None => (avail - done, true),
            };
            let res = self.join(done, n, batch, &mut refill, fill_room);
            match if cut { Err(Lost::BadChain) } else { res } {
                Ok(len) => {
                    batch.commit();
                    got += 1;
                    stats.rx_bytes += len as u64;
                }
                Err(why) => {
                    stats.rx_dropped += 1;
                    match why {
                        Lost::TooLong => drops.too_long += 1,
                        Lost::BadDesc => drops.bad_desc += 1,
                        Lost::BadChain => drops.bad_chain += 1,
                    }
                }
            }
            done += n;
        }
        if done > 0 {
            self.rx.release(done);
            self.fill.submit(refill);
        }
        if self.fill.needs_wakeup() {
            let _ = sys::kick_rx(&self.xsk);
        }
        stats.rx_packets += got as u64;
        self.rx_packets += got as u64;
        got
    }

    /// Descriptors in the frame that starts at unconsumed rx entry `first` (all but its last
    /// carry `XDP_PKT_CONTD`), or `None` if it goes on past entry `avail`.
    #[inline]
    fn chain_len(&self, first: u32, avail: u32) -> Option<u32> {
        (first..avail)
            .position(|j| self.rx.read::<XdpDesc>(j).options & XDP_PKT_CONTD == 0)
            .map(|p| p as u32 + 1)
    }

    /// Copies the frame in rx entries `[first, first + n)` into `batch`'s next spare buffer
    /// (the caller checked there is one) and puts their UMEM frames on the fill ring. Returns
    /// the frame's length, or why it was dropped; a dropped frame leaves the buffer spare.
    fn join(
        &mut self,
        first: u32,
        n: u32,
        batch: &mut Batch,
        refill: &mut u32,
        fill_room: u32,
    ) -> Result<usize, Lost> {
        let Some(buf) = batch.spare_mut() else { return Err(Lost::BadChain) };
        let (store, _) = buf.storage_mut();
        let room = &mut store[HEADROOM..];
        let (mut len, mut lost) = (0usize, None);
        for j in first..first + n {
            let d: XdpDesc = self.rx.read(j);
            let frame = match self.layout.check_rx(d.addr, d.len) {
                RxDesc::Frame { frame, off, len: l } => {
                    match room.get_mut(len..len + l) {
                        Some(dst) if lost.is_none() => {
                            // SAFETY: the descriptor is in [consumer, producer) of the rx ring,
                            // so the kernel is done with this frame; it gets it back only
                            // through the fill ring, below, after the copy.
                            dst.copy_from_slice(unsafe { self.umem.slice(off, l) });
                            len += l;
                        }
                        _ => _ = lost.get_or_insert(Lost::TooLong),
                    }
                    Some(frame)
                }
                RxDesc::BadLen { frame } => {
                    lost.get_or_insert(Lost::BadDesc);
                    Some(frame)
                }
                RxDesc::BadAddr => {
                    lost.get_or_insert(Lost::BadDesc);
                    None
                }
            };
            // The fill ring holds every rx frame, so it has room unless the kernel handed us a
            // frame twice; then the duplicate is simply not returned.
            if let Some(f) = frame.filter(|_| *refill < fill_room) {
                self.fill.write::<u64>(*refill, f);
                *refill += 1;
            }
        }
        match lost {
            None => {
                buf.set_window(HEADROOM, len);
                Ok(len)
            }
            Some(why) => Err(why),
        }
    }

    /// Takes completed tx frames back.
    fn reclaim(&mut self, anomalies: &mut u64) {
        let n = self.comp.available();
        for k in 0..n {
            let addr: u64 = self.comp.read(k);
            match self.layout.check_completion(addr) {
                Some(i) if self.tx_busy[i as usize] => {
                    self.tx_busy[i as usize] = false;
                    self.tx_free.push(i);
                }
                _ => *anomalies += 1,
            }
        }
        self.comp.release(n);
    }

    /// Returns how many of `sel` were taken, and the error of the kick, if any.
    fn tx(
        &mut self,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut PortStats,
        anomalies: &mut u64,
    ) -> (usize, Option<io::Error>) {
        self.reclaim(anomalies);
        let room = self.tx.free().min(self.tx_free.len() as u32);
        let mut queued = 0u32;
        let mut taken = 0usize;
        let pkts = batch.packets();
        let fs = self.layout.frame_size as usize;
        for &i in sel {
            let frame = pkts[i as usize].frame();
            if frame.len() < 14 || frame.len() > self.max_tx_len {
                stats.tx_errors += 1;
                taken += 1;
                continue;
            }
            // A frame longer than a UMEM frame (only with XDP_USE_SG, see max_tx_len) goes out
            // as several descriptors, all but the last marked XDP_PKT_CONTD.
            let nd = frame.len().div_ceil(fs) as u32;
            if queued + nd > room {
                break;
            }
            for (c, chunk) in frame.chunks(fs).enumerate() {
                // `room` counted free tx frames, so one is there.
                let Some(slot) = self.tx_free.pop() else { break };
                self.tx_busy[slot as usize] = true;
                let addr = self.layout.tx_frame(slot);
                // SAFETY: tx frame `slot` was free (not on the tx ring nor awaiting completion),
                // so the kernel does not read it until the descriptor below is submitted.
                unsafe { self.umem.copy_in(addr as usize, chunk) };
                let options = if c as u32 + 1 < nd { XDP_PKT_CONTD } else { 0 };
                self.tx.write(queued, XdpDesc { addr, len: chunk.len() as u32, options });
                queued += 1;
            }
            taken += 1;
            stats.tx_packets += 1;
            stats.tx_bytes += frame.len() as u64;
        }
        if queued > 0 {
            self.tx.submit(queued);
        }
        stats.tx_full += (sel.len() - taken) as u64;
        (taken, self.kick().err())
    }

    /// Asks the kernel to transmit what is on the tx ring. In copy mode it sends only inside
    /// this call, at most its budget per call, answering EAGAIN when it stopped early.
    fn kick(&mut self) -> io::Result<()> {
        for _ in 0..self.max_kicks {
            if self.tx.outstanding() == 0 || !self.tx.needs_wakeup() {
                return Ok(());
            }
            match sys::kick_tx(&self.xsk) {
                Ok(()) => {}
                Err(e) if sys::errno(&e) == libc::EAGAIN => {}
                // EBUSY/ENOBUFS: the device is busy; the next burst or service() tries again.
                Err(e) if matches!(sys::errno(&e), libc::EBUSY | libc::ENOBUFS) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A failed UMEM registration, with the cause the kernel's `ENOBUFS` means there: without
/// `CAP_IPC_LOCK` (root has it) the UMEM counts against `RLIMIT_MEMLOCK`.
fn umem_err(name: &str, len: u64, e: io::Error) -> io::Error {
    let step = match (sys::errno(&e), sys::memlock_limit()) {
        (libc::ENOBUFS, Some(limit)) => format!(
            "setsockopt(XDP_UMEM_REG) of a {} KiB UMEM over the locked-memory limit of {} KiB \
             (RLIMIT_MEMLOCK; run as root or with CAP_IPC_LOCK, raise it with `ulimit -l`, or \
             give the port a smaller `ring`)",
            len >> 10,
            limit >> 10
        ),
        _ => "setsockopt(XDP_UMEM_REG)".to_string(),
    };
    sys::step_err(BACKEND, name, &step, e)
}
