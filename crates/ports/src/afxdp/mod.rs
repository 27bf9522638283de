//! The `afxdp` backend: a port on one queue of a kernel interface through an AF_XDP socket.
//!
//! Job: take every frame arriving on the queue away from the kernel stack and hand it to
//! `rx_burst`; send what `tx_burst` is given out of the interface. Pure Rust over `libc`: no
//! libxdp, libbpf or clang.
//!
//! How it is built, at open (nothing is allocated or mapped after that, on the packet path):
//! - one anonymous mapping is the UMEM, cut into frames (4096 × 2048 bytes by default): the
//!   first half only ever circulates through the fill and rx rings, the second half only through
//!   tx and completion, so a frame's address says which side owns it;
//! - the socket is bound in copy mode (`XDP_COPY`, with `XDP_USE_NEED_WAKEUP`): veth has no
//!   zero-copy, and the port copies frames into batch buffers anyway;
//! - an `XSKMAP` holds the socket at the queue's index, and a five-instruction XDP program
//!   (`bpf_redirect_map(xsks, rx_queue_index, XDP_PASS)`) attached through a **BPF link**
//!   redirects the queue's frames into it. Driver mode is tried first, SKB (generic) mode only
//!   if driver mode is refused; [`AfXdpPort::mode`] says which is active. The link dies with its
//!   last descriptor: dropping the port, exiting and being SIGKILLed all detach the program.
//!   One XDP program per interface: if another is attached, open fails and says so.
//! - The kernel frees a closed socket's hold on its queue from a workqueue, so `open` retries a
//!   busy queue for up to a second (a port re-opened right after another closed, or after its
//!   process was killed); re-opens from `service()` never wait.
//! - While open, the port's sockets keep its network namespace alive, as any socket does.
//!
//! Contract and checks:
//! - rx: each descriptor's address must lie in the rx frames and its length inside its frame and
//!   a packet buffer; a bad one is dropped and counted in `rx_dropped` (its frame, when it is one
//!   of ours, goes back to the fill ring). Frames are copied to the batch at [`crate::HEADROOM`]
//!   and their UMEM frames refilled in the same pass; the kernel's own drop counters
//!   (`XDP_STATISTICS`: ring full, no fill frame, invalid descriptors) are added to `rx_dropped`.
//! - tx: completions must name one of our tx frames that is in flight, else they are ignored and
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
mod ring;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::sys::{self, at, Mmap, Pod, Seen, Watch};
use crate::{Batch, Port, PortStats, PortStatus, BUF_SIZE, HEADROOM};

use ring::{RingOffsets, RxDesc, UmemLayout, XdpDesc, XskRing};

const BACKEND: &str = "afxdp";

const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_STATISTICS: i32 = 7;
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;

const XDP_COPY: u16 = 1 << 1;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

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

/// How to open an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpOptions {
    /// UMEM frames, half for receiving and half for sending; a power of two, 16 to 65536.
    pub frames: u32,
    /// Bytes per UMEM frame: 2048 or 4096. Received frames get this minus 256 (the kernel's
    /// XDP headroom); sent frames, all of it (and never more than a packet buffer holds).
    pub frame_size: u32,
    /// The interface queue to bind. Frames arriving on other queues go to the kernel stack.
    pub queue: u32,
    /// XDP attach mode.
    pub mode: XdpMode,
    /// Open the port in this network namespace (`/run/netns/NAME`) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl Default for AfXdpOptions {
    fn default() -> Self {
        AfXdpOptions { frames: 4096, frame_size: 2048, queue: 0, mode: XdpMode::Auto, netns: None }
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

/// An AF_XDP port. See the module documentation.
pub struct AfXdpPort {
    watch: Watch,
    opts: AfXdpOptions,
    live: Option<Live>,
    stats: PortStats,
    /// Kernel counts of sockets already closed (before a re-open).
    kernel_base: KernelCounts,
    anomalies: u64,
}

/// Everything that exists while the port is open on a live interface. Fields drop in order:
/// the link first, so the program stops redirecting before the socket goes.
struct Live {
    /// Held only to keep the program attached: closing it detaches.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
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
    mode: XdpMode,
    prog_id: u32,
    max_tx_len: usize,
    /// `sendto` calls one kick may make before giving up until the next burst.
    max_kicks: u32,
}

impl AfXdpPort {
    /// Opens an AF_XDP port on `ifname` (which must exist): UMEM, socket, rings, XSKMAP, program
    /// and link, in that order. Errors name the interface and the failing step.
    pub fn open(ifname: &str, opts: &AfXdpOptions) -> io::Result<AfXdpPort> {
        let mut watch = Watch::new(BACKEND, ifname, opts.netns.as_deref())?;
        let live = watch
            .open_live(|name, ifindex, mtu| Live::open(name, ifindex, opts, mtu, OPEN_BIND_WAIT))?;
        Ok(AfXdpPort {
            watch,
            opts: opts.clone(),
            live: Some(live),
            stats: PortStats::default(),
            kernel_base: KernelCounts::default(),
            anomalies: 0,
        })
    }

    /// The XDP mode in use (`Driver` or `Skb`), `None` while the port is down.
    pub fn mode(&self) -> Option<XdpMode> {
        self.live.as_ref().map(|l| l.mode)
    }

    /// The kernel id of the attached XDP program (as `ip link` shows it), `None` while down.
    pub fn prog_id(&self) -> Option<u32> {
        self.live.as_ref().map(|l| l.prog_id)
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
        let o = &self.opts;
        if let Some(live) = self
            .watch
            .reopen_live(|name, ifindex, mtu| Live::open(name, ifindex, o, mtu, Duration::ZERO))
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
            Some(live) => live.rx(batch, &mut self.stats),
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

    /// The socket: readable while the rx ring holds frames (poll(2) also wakes the driver
    /// where the fill ring asked for it).
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.live.as_ref().map(|l| l.xsk.as_raw_fd()));
        true
    }

    fn service(&mut self) {
        match self.watch.poll() {
            Seen::Gone => self.close_live(),
            Seen::Back => self.reopen(),
            Seen::Still => {
                let mtu = self.watch.mtu();
                if let Some(live) = self.live.as_mut() {
                    live.set_mtu(mtu);
                }
            }
            Seen::Nothing => {}
        }
        if let Some(live) = self.live.as_mut() {
            // Descriptors a previous kick left behind (budget or EAGAIN) go out now.
            if live.kick().is_err_and(|e| sys::is_link_error(&e)) && self.watch.check_gone_now() {
                self.close_live();
            }
        }
    }
}

fn max_tx_len(frame_size: usize, mtu: Option<usize>) -> usize {
    // MTU + Ethernet header + one VLAN tag: what veth (and most drivers) forward.
    let by_mtu = mtu.map_or(usize::MAX, |m| m + 14 + 4);
    frame_size.min(BUF_SIZE - HEADROOM).min(by_mtu)
}

impl Live {
    /// Builds everything. `bind_wait` is how long to retry a busy queue (see below): some time at
    /// open, none from `service()`, which must not block and retries later anyway.
    fn open(
        name: &str,
        ifindex: u32,
        o: &AfXdpOptions,
        mtu: Option<usize>,
        bind_wait: Duration,
    ) -> io::Result<Live> {
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
        sys::setsockopt(&xsk, libc::SOL_XDP, XDP_UMEM_REG, &reg).map_err(at(
            BACKEND,
            name,
            "setsockopt(XDP_UMEM_REG)",
        ))?;
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

        let addr = SockaddrXdp {
            family: libc::AF_XDP as u16,
            flags: XDP_COPY | XDP_USE_NEED_WAKEUP,
            ifindex,
            queue_id: o.queue,
            shared_umem_fd: 0,
        };
        // The kernel releases a closed socket's hold on the queue from a workqueue, so a port
        // re-opened right after another closed (or was killed) can briefly see EBUSY.
        let deadline = Instant::now() + bind_wait;
        loop {
            match sys::bind(&xsk, &addr) {
                Ok(()) => break,
                Err(e) if sys::errno(&e) == libc::EBUSY && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    let e = if sys::errno(&e) == libc::EBUSY {
                        io::Error::new(
                            e.kind(),
                            format!("{e} (another AF_XDP socket on this queue?)"),
                        )
                    } else {
                        e
                    };
                    let step = format!("bind(queue {}, XDP_COPY)", o.queue);
                    return Err(sys::step_err(BACKEND, name, &step, e));
                }
            }
        }
        // Let one sendto move the whole ring (6.17+); older kernels stop at 32 per call.
        let budget_raised = ring_size >= KERNEL_TX_BATCH
            && sys::setsockopt(&xsk, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &ring_size).is_ok();
        let per_kick = if budget_raised { ring_size } else { KERNEL_TX_BATCH };

        for i in 0..layout.rx_frames {
            fill.write::<u64>(i, layout.rx_frame(i));
        }
        fill.submit(layout.rx_frames);

        let map = bpf::create_xskmap(o.queue + 1).map_err(at(
            BACKEND,
            name,
            "bpf(BPF_MAP_CREATE, XSKMAP)",
        ))?;
        bpf::map_set(&map, o.queue, &xsk).map_err(at(BACKEND, name, "bpf(BPF_MAP_UPDATE_ELEM)"))?;
        let prog = bpf::load_program(&map).map_err(at(BACKEND, name, "bpf(BPF_PROG_LOAD)"))?;
        let (link, mode) = bpf::attach(&prog, ifindex, o.mode).map_err(at(
            BACKEND,
            name,
            "bpf(BPF_LINK_CREATE)",
        ))?;
        let prog_id = bpf::prog_id(&prog).unwrap_or(0);

        Ok(Live {
            _link: link,
            _prog: prog,
            _map: map,
            xsk,
            rx,
            tx,
            fill,
            comp,
            umem,
            layout,
            tx_free: (0..layout.tx_frames).rev().collect(),
            tx_busy: vec![false; layout.tx_frames as usize],
            mode,
            prog_id,
            max_tx_len: max_tx_len(o.frame_size as usize, mtu),
            max_kicks: ring_size / per_kick + 2,
        })
    }

    fn set_mtu(&mut self, mtu: Option<usize>) {
        if mtu.is_some() {
            self.max_tx_len = max_tx_len(self.layout.frame_size as usize, mtu);
        }
    }

    fn kernel_counts(&self) -> Option<KernelCounts> {
        let (s, _) = sys::getsockopt::<[u64; 6]>(&self.xsk, libc::SOL_XDP, XDP_STATISTICS).ok()?;
        // rx_dropped, rx_invalid_descs, tx_invalid_descs, rx_ring_full, (fill ring empty and tx
        // ring empty are events, not losses: a fill-less frame is also in rx_dropped)
        Some(KernelCounts { rx_dropped: s[0] + s[1] + s[3], tx_invalid: s[2] })
    }

    fn rx(&mut self, batch: &mut Batch, stats: &mut PortStats) -> usize {
        let n = self.rx.available().min(batch.room() as u32);
        if n == 0 {
            if self.fill.needs_wakeup() {
                let _ = sys::kick_rx(&self.xsk);
            }
            return 0;
        }
        let fill_room = self.fill.free();
        let mut refill = 0u32;
        let mut got = 0usize;
        for k in 0..n {
            let d: XdpDesc = self.rx.read(k);
            let frame = match self.layout.check_rx(d.addr, d.len) {
                RxDesc::Frame { frame, off, len } => {
                    if let Some(buf) = batch.spare_mut() {
                        // SAFETY: the descriptor is in [consumer, producer) of the rx ring, so
                        // the kernel is done with this frame; it gets it back only through the
                        // fill ring, below, after the copy.
                        let data = unsafe { self.umem.slice(off, len) };
                        if buf.fill(data) {
                            batch.commit();
                            got += 1;
                            stats.rx_bytes += len as u64;
                        } else {
                            stats.rx_dropped += 1;
                        }
                    }
                    Some(frame)
                }
                RxDesc::BadLen { frame } => {
                    stats.rx_dropped += 1;
                    Some(frame)
                }
                RxDesc::BadAddr => {
                    stats.rx_dropped += 1;
                    None
                }
            };
            // The fill ring holds every rx frame, so it has room unless the kernel handed us a
            // frame twice; then the duplicate is simply not returned.
            if let Some(f) = frame {
                if refill < fill_room {
                    self.fill.write::<u64>(refill, f);
                    refill += 1;
                }
            }
        }
        self.rx.release(n);
        self.fill.submit(refill);
        if self.fill.needs_wakeup() {
            let _ = sys::kick_rx(&self.xsk);
        }
        stats.rx_packets += got as u64;
        got
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
        for &i in sel {
            let frame = pkts[i as usize].frame();
            if frame.len() < 14 || frame.len() > self.max_tx_len {
                stats.tx_errors += 1;
                taken += 1;
                continue;
            }
            if queued == room {
                break;
            }
            let Some(slot) = self.tx_free.pop() else { break };
            self.tx_busy[slot as usize] = true;
            let addr = self.layout.tx_frame(slot);
            // SAFETY: tx frame `slot` was free (not on the tx ring nor awaiting completion), so
            // the kernel does not read it until the descriptor below is submitted.
            unsafe { self.umem.copy_in(addr as usize, frame) };
            self.tx.write(queued, XdpDesc { addr, len: frame.len() as u32, options: 0 });
            queued += 1;
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
