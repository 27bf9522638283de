//! The `vxlan` backend: one VXLAN segment (RFC 7348, one VNI) carried between hosts over their
//! underlay addresses, encapsulated and decapsulated here rather than by a kernel `vxlan` device.
//!
//! Mechanism, and why: a UDP socket bound to `local:dstport` (4789 by default), read with
//! `recvmmsg` and written with `sendmmsg`, one syscall per burst each way. The kernel builds and
//! checks the outer IPv4/IPv6 and UDP headers, routes, resolves the next hop's MAC, fragments
//! if it must and never answers our port with ICMP port-unreachable, so this port only adds and
//! removes the 8-byte VXLAN header: sending pushes the header into the frame's headroom (no
//! copy); received datagrams are copied from a staging area into batch buffers 8 bytes before
//! [`HEADROOM`], so the inner frame ends up exactly where every other backend puts a frame.
//! AF_PACKET/AF_XDP with routeplex building the outer headers would allow a per-flow UDP source
//! port, but would need its own neighbour resolution, routing and ICMP suppression; that is
//! later work. The price
//! of the socket: every datagram leaves from source port `dstport` (RFC 7348 §5 asks for a
//! per-flow source port so ECMP can spread flows; it is a SHOULD, and receivers, the Linux
//! kernel included, accept any source port).
//!
//! Segmentation offload (UDP GSO): consecutive datagrams of a burst to one remote with the
//! same length (the last of a run may be shorter) leave as one `sendmmsg` message with a
//! `UDP_SEGMENT` control message, one iovec per datagram (still no copy). The kernel routes
//! and walks its stack once for the run and cuts it into ordinary datagrams as late as it can
//! (in the device driver, or in the NIC with USO; a veth carries the run whole to the other
//! namespace, where the receiving socket cuts it). What arrives on the wire is exactly what
//! one send per datagram makes, so any VXLAN receiver takes it. A run the kernel refuses
//! (`EINVAL`: a datagram longer than the path allows unfragmented; `EIO`: the underlay
//! device has no checksum offload) is sent again one datagram per message; after `EIO` the
//! port stops asking for segmentation. On receipt the socket asks for UDP GRO: the kernel
//! joins a run of datagrams from one sender into one message of up to 64 KiB (whether it was
//! sent as a run or met the receiving device's GRO), which is why datagrams land in a staging
//! area of 64 KiB slots and are copied out one by one rather than read into packet buffers.
//!
//! Contract and checks:
//! - Several VNIs may share one underlay address and port: the ports of one namespace, address
//!   and UDP port share one socket (an *endpoint*). Whichever of them reads the socket keeps its
//!   own VNI's frames and hands the others' buffers (swapped, not copied) to the owning port's
//!   bounded inbox, which that port drains at its next `rx_burst`. A VNI no port has is dropped
//!   and counted (`unknown_vni`).
//! - Every received datagram (each segment of a joined message alone) is checked before a
//!   byte of it is used: longer than a jumbo frame and the header (`too_long`), shorter than the VXLAN header and an Ethernet
//!   header (`short`), the I flag clear (`bad_flags`; the reserved bits are ignored as §5
//!   says), a source address that is not one of the port's remotes (`unknown_remote`), a full
//!   inbox of a sibling VNI (`inbox_full`).
//! - Forwarding per remote: the inner source MAC of each accepted frame is learned against the
//!   remote it came from (a fixed table of [`FDB_SLOTS`] entries, aging out after
//!   [`AGING_S`] s; replaced when full). A unicast frame to a learned MAC goes to that remote
//!   only; unknown unicast, broadcast and multicast go to every remote (head-end replication:
//!   one datagram per remote, all from the same buffer).
//! - The remotes are configuration now and a fleet agent's later: [`VxlanHandle::set_remotes`]
//!   changes them while the port runs. The port notices at its next burst (one atomic load),
//!   copies the new set into storage it reserved at open, and forgets what it learned.
//! - Counters by reason live in the port and are published to the handle after each burst
//!   that changed them ([`VxlanHandle::counters`]), for `status`; the totals also show in
//!   [`PortStats`] (`rx_dropped`, `tx_errors`, `tx_full`). `tx_packets` counts frames;
//!   `tx_datagrams` counts what replication made of them.
//! - Nothing allocates per packet: message headers, addresses, the staging area (32 slots of
//!   64 KiB, in memory only once datagrams touch it) and the learning table are made at open.
//!
//! MTU: an inner frame of an IP MTU of M is M + 14 bytes; the datagram is M + 50 bytes on an
//! IPv4 underlay ([`OVERHEAD_V4`]) and M + 70 on IPv6 ([`OVERHEAD_V6`]), so an interface on a
//! vxlan port has an MTU of at most the underlay's MTU minus that overhead (the topology checks
//! this). Longer frames are still sent (the kernel fragments the outer IPv4 datagram), but a
//! peer need not reassemble them.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use crate::sys::{self, NetNs};
use crate::{Batch, PktBuf, Port, PortStats, HEADROOM, MAX_BURST, MAX_FRAME};

const BACKEND: &str = "vxlan";
/// The IANA port for VXLAN.
pub const DEFAULT_DSTPORT: u16 = 4789;
/// Bytes of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// Bytes a frame's IP MTU loses to VXLAN on an IPv4 underlay: inner Ethernet 14, VXLAN 8,
/// UDP 8, IPv4 20.
pub const OVERHEAD_V4: usize = 50;
/// The same on an IPv6 underlay (IPv6 header 40).
pub const OVERHEAD_V6: usize = 70;
/// The largest VNI (24 bits). VNI 0 is refused: Linux reserves it for metadata mode.
pub const VNI_MAX: u32 = (1 << 24) - 1;
/// Remotes one port replicates to, at most.
pub const MAX_REMOTES: usize = 256;
/// Slots in the learning table (a power of two).
pub const FDB_SLOTS: usize = 4096;
/// Seconds a learned MAC stays without being seen again.
pub const AGING_S: u32 = 300;
/// Frames a port's inbox holds for it when a sibling VNI's port read them.
const INBOX: usize = 256;
/// Datagrams one `sendmmsg` carries at most.
const TX_MSGS: usize = 1024;
/// Datagrams one `UDP_SEGMENT` message carries at most (the kernel's `UDP_MAX_SEGMENTS` is 64
/// on older kernels, 128 on newer ones).
const GSO_SEGS: usize = 64;
/// UDP payload bytes one `UDP_SEGMENT` message carries at most (an IPv4 datagram's limit less
/// its headers, with room to spare).
const GSO_BYTES: usize = 65_000;
/// `SOL_UDP` options from `linux/udp.h` (not in libc for glibc targets).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Messages one `recvmmsg` reads at most.
const RX_MSGS: usize = 32;
/// Bytes of one receive slot: the longest UDP payload, which GRO may make of a run.
const RX_SLOT: usize = 1 << 16;
/// Probes per learning-table lookup.
const PROBES: usize = 4;
const ETH_HLEN: usize = 14;
const FLAG_I: u8 = 0x08;

/// Why a frame was dropped or a datagram lost, as counted per port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Reason {
    /// Received: shorter than the VXLAN header and an Ethernet header.
    Short,
    /// Received: the I flag (a valid VNI) is clear.
    BadFlags,
    /// Received: a VNI no port on this underlay address has.
    UnknownVni,
    /// Received: from an address that is not one of the port's remotes.
    UnknownRemote,
    /// Received: longer than a packet buffer (a jumbo frame and the header).
    TooLong,
    /// Received for a sibling VNI whose inbox was full.
    InboxFull,
    /// Received: `recvmmsg` failed with something other than "nothing to read".
    RecvError,
    /// To send, but the port has no remotes.
    NoRemote,
    /// To send: shorter than an Ethernet header or longer than a jumbo frame.
    BadLength,
    /// To send, but the frame had no headroom for the VXLAN header.
    NoHeadroom,
    /// A datagram the socket's send buffer had no room for.
    SendFull,
    /// A datagram `sendmmsg` refused for another reason.
    SendError,
}

impl Reason {
    /// Every reason, in counter order.
    pub const ALL: [Reason; 12] = [
        Reason::Short,
        Reason::BadFlags,
        Reason::UnknownVni,
        Reason::UnknownRemote,
        Reason::TooLong,
        Reason::InboxFull,
        Reason::RecvError,
        Reason::NoRemote,
        Reason::BadLength,
        Reason::NoHeadroom,
        Reason::SendFull,
        Reason::SendError,
    ];

    /// The name `status` and metrics show.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Short => "short",
            Reason::BadFlags => "bad_flags",
            Reason::UnknownVni => "unknown_vni",
            Reason::UnknownRemote => "unknown_remote",
            Reason::TooLong => "too_long",
            Reason::InboxFull => "inbox_full",
            Reason::RecvError => "recv_error",
            Reason::NoRemote => "no_remote",
            Reason::BadLength => "bad_length",
            Reason::NoHeadroom => "no_headroom",
            Reason::SendFull => "send_full",
            Reason::SendError => "send_error",
        }
    }

    fn is_rx(self) -> bool {
        (self as usize) <= Reason::RecvError as usize
    }
}

const NREASONS: usize = Reason::ALL.len();
/// Counter slots: the reasons, then datagrams sent, frames flooded, segmented sends, joined
/// receives.
const C_DATAGRAMS: usize = NREASONS;
const C_FLOODED: usize = NREASONS + 1;
const C_GSO: usize = NREASONS + 2;
const C_GRO: usize = NREASONS + 3;
const NCOUNTERS: usize = NREASONS + 4;

/// A port's VXLAN counters, as published after its last burst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VxlanCounters {
    /// Drops by [`Reason`], indexed by `reason as usize`.
    pub drops: [u64; NREASONS],
    /// Datagrams sent (a flooded frame is one per remote).
    pub tx_datagrams: u64,
    /// Frames sent to every remote because their destination was not learned.
    pub tx_flooded: u64,
    /// `sendmmsg` messages that carried two or more datagrams (UDP GSO).
    pub tx_gso_sends: u64,
    /// Received messages that carried two or more datagrams (UDP GRO).
    pub rx_gro_reads: u64,
}

impl VxlanCounters {
    /// Drops for `r`.
    pub fn drop(&self, r: Reason) -> u64 {
        self.drops[r as usize]
    }

    /// `(name, count)` of every reason with a non-zero count.
    pub fn nonzero_drops(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Reason::ALL.iter().map(|&r| (r.name(), self.drop(r))).filter(|&(_, n)| n > 0)
    }
}

/// The 8-byte VXLAN header for `vni`: flags with only I set, reserved bits zero.
pub fn header(vni: u32) -> [u8; HEADER_LEN] {
    let v = vni.to_be_bytes();
    [FLAG_I, 0, 0, 0, v[1], v[2], v[3], 0]
}

/// The VNI of a received datagram (VXLAN header and inner frame), or why it is unusable.
pub fn parse(datagram: &[u8]) -> Result<u32, Reason> {
    if datagram.len() < HEADER_LEN + ETH_HLEN {
        return Err(Reason::Short);
    }
    if datagram[0] & FLAG_I == 0 {
        return Err(Reason::BadFlags);
    }
    Ok(u32::from_be_bytes([0, datagram[4], datagram[5], datagram[6]]))
}

/// How to open a [`VxlanPort`].
#[derive(Clone, Debug)]
pub struct VxlanOptions {
    /// The segment's VNI, 1..=[`VNI_MAX`].
    pub vni: u32,
    /// This host's underlay address (the socket binds to it).
    pub local: IpAddr,
    /// The UDP port, both ours and the remotes'.
    pub dstport: u16,
    /// The other hosts' underlay addresses, of `local`'s family.
    pub remotes: Vec<IpAddr>,
    /// Bind the socket to this underlay interface (`SO_BINDTODEVICE`).
    pub dev: Option<String>,
    /// Open the socket in this network namespace (`/run/netns/NAME`) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl VxlanOptions {
    /// Options for `vni` between `local` and `remotes` on port 4789.
    pub fn new(vni: u32, local: IpAddr, remotes: &[IpAddr]) -> Self {
        VxlanOptions {
            vni,
            local,
            dstport: DEFAULT_DSTPORT,
            remotes: remotes.to_vec(),
            dev: None,
            netns: None,
        }
    }
}

/// Checks a remote set against the local address: same family, unicast, not local itself,
/// no more than [`MAX_REMOTES`]; duplicates are removed.
fn checked_remotes(local: IpAddr, remotes: &[IpAddr]) -> io::Result<Vec<IpAddr>> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if remotes.len() > MAX_REMOTES {
        return Err(bad(format!("{} remotes, at most {MAX_REMOTES}", remotes.len())));
    }
    let mut out: Vec<IpAddr> = Vec::with_capacity(remotes.len());
    for &r in remotes {
        if r.is_ipv4() != local.is_ipv4() {
            return Err(bad(format!("remote {r} is not of the local address {local}'s family")));
        }
        if r.is_unspecified() || r.is_multicast() || r == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return Err(bad(format!("remote {r} is not a unicast address")));
        }
        if r == local {
            return Err(bad(format!("remote {r} is the local address")));
        }
        if !out.contains(&r) {
            out.push(r);
        }
    }
    Ok(out)
}

/// What the port and the control path share: the remote set and the published counters.
struct Shared {
    vni: u32,
    local: IpAddr,
    remotes: Mutex<Vec<IpAddr>>,
    /// Bumped on every `set_remotes`; the port compares it with the one it copied.
    generation: AtomicU64,
    counters: [AtomicU64; NCOUNTERS],
}

/// A handle on a running [`VxlanPort`] for the control path: change its remotes, read its
/// counters. Cheap to clone; valid after the port is gone (it then changes nothing).
#[derive(Clone)]
pub struct VxlanHandle(Arc<Shared>);

impl VxlanHandle {
    /// The port's VNI.
    pub fn vni(&self) -> u32 {
        self.0.vni
    }

    /// The remotes the port replicates to now.
    pub fn remotes(&self) -> Vec<IpAddr> {
        self.0.remotes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Replaces the remote set (checked as at open). The port takes it at its next burst and
    /// forgets the MACs it learned.
    pub fn set_remotes(&self, remotes: &[IpAddr]) -> io::Result<()> {
        let r = checked_remotes(self.0.local, remotes)?;
        *self.0.remotes.lock().unwrap_or_else(PoisonError::into_inner) = r;
        self.0.generation.fetch_add(1, Relaxed);
        Ok(())
    }

    /// The counters as of the port's last burst.
    pub fn counters(&self) -> VxlanCounters {
        let c = |i: usize| self.0.counters[i].load(Relaxed);
        let mut out = VxlanCounters {
            tx_datagrams: c(C_DATAGRAMS),
            tx_flooded: c(C_FLOODED),
            tx_gso_sends: c(C_GSO),
            rx_gro_reads: c(C_GRO),
            ..Default::default()
        };
        for (i, d) in out.drops.iter_mut().enumerate() {
            *d = c(i);
        }
        out
    }
}

/// Frames a sibling port read for this one, with the address each came from.
struct Inbox {
    bufs: Vec<PktBuf>,
    from: Vec<IpAddr>,
    /// The owner's remotes (a copy it refreshes): a sibling queues only what they sent, so a
    /// spoofed flood for this VNI cannot fill the inbox ahead of the owner's own check.
    remotes: Vec<IpAddr>,
    head: usize,
    len: usize,
}

/// One socket shared by the ports of one namespace, address and UDP port.
struct Endpoint {
    sock: UdpSocket,
    key: ((u64, u64), SocketAddr),
    dev: Option<String>,
    members: Mutex<Vec<(u32, Arc<Mutex<Inbox>>)>>,
    count: AtomicUsize,
}

impl Endpoint {
    /// Hands `buf` (a datagram for `vni`, from `from`) to that VNI's port; gives an empty
    /// buffer back in its place. The error says why it stayed.
    fn hand_over(&self, vni: u32, buf: &mut PktBuf, from: IpAddr) -> Result<(), Reason> {
        let members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((_, inbox)) = members.iter().find(|(v, _)| *v == vni) else {
            return Err(Reason::UnknownVni);
        };
        let mut q = inbox.lock().unwrap_or_else(PoisonError::into_inner);
        if !q.remotes.contains(&from) {
            return Err(Reason::UnknownRemote);
        }
        if q.len == q.bufs.len() {
            return Err(Reason::InboxFull);
        }
        let slot = (q.head + q.len) % q.bufs.len();
        std::mem::swap(&mut q.bufs[slot], buf);
        q.from[slot] = from;
        q.len += 1;
        Ok(())
    }
}

/// Every open endpoint, so a second VNI on the same address joins the first's socket.
static ENDPOINTS: Mutex<Vec<Weak<Endpoint>>> = Mutex::new(Vec::new());

/// The endpoint for `o` in `ns`, made if none is open, with `vni` registered on it.
fn join_endpoint(
    ns: &NetNs,
    o: &VxlanOptions,
    name: &str,
) -> io::Result<(Arc<Endpoint>, Arc<Mutex<Inbox>>)> {
    let addr = SocketAddr::new(o.local, o.dstport);
    let mut all = ENDPOINTS.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|w| w.strong_count() > 0);
    // Port 0 (tests) asks the kernel for a fresh port: never someone else's socket.
    let found =
        all.iter().filter_map(Weak::upgrade).find(|e| o.dstport != 0 && e.key == (ns.id(), addr));
    let ep = match found {
        Some(e) => {
            if e.dev != o.dev {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{BACKEND} {name}: {addr} is already open with dev {:?}", e.dev),
                ));
            }
            e
        }
        None => {
            let sock = ns.run_in(|| open_socket(addr, o.dev.as_deref()))?;
            let key = (ns.id(), sock.local_addr()?);
            let e = Arc::new(Endpoint {
                sock,
                key,
                dev: o.dev.clone(),
                members: Mutex::new(Vec::new()),
                count: AtomicUsize::new(0),
            });
            all.push(Arc::downgrade(&e));
            e
        }
    };
    let mut members = ep.members.lock().unwrap_or_else(PoisonError::into_inner);
    if members.iter().any(|(v, _)| *v == o.vni) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{BACKEND} {name}: VNI {} is already open on {addr}", o.vni),
        ));
    }
    let inbox = Arc::new(Mutex::new(Inbox {
        bufs: (0..INBOX).map(|_| PktBuf::new()).collect(),
        from: vec![o.local; INBOX],
        remotes: Vec::with_capacity(MAX_REMOTES),
        head: 0,
        len: 0,
    }));
    members.push((o.vni, inbox.clone()));
    ep.count.store(members.len(), Relaxed);
    drop(members);
    Ok((ep, inbox))
}

fn open_socket(addr: SocketAddr, dev: Option<&str>) -> io::Result<UdpSocket> {
    let err = |step: &str| {
        let step = format!("{step} {addr}");
        move |e| sys::step_err(BACKEND, dev.unwrap_or("-"), &step, e)
    };
    let sock = UdpSocket::bind(addr).map_err(err("bind"))?;
    sock.set_nonblocking(true).map_err(err("set non-blocking"))?;
    let fd = sock.as_fd().try_clone_to_owned()?;
    if let Some(d) = dev {
        let name = sys::check_ifname(BACKEND, d)?;
        sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_BINDTODEVICE, &name)
            .map_err(err("SO_BINDTODEVICE"))?;
    }
    // Runs of datagrams from one sender arrive as one message (see `Staging`); a kernel
    // without UDP GRO hands them over one by one, which is not an error either.
    let _ = sys::setsockopt(&fd, libc::SOL_UDP, UDP_GRO, &1i32);
    // A larger receive buffer rides out a worker's pause; refused sizes are not an error.
    let _ = sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &(4i32 << 20));
    let _ = sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &(4i32 << 20));
    Ok(sock)
}

/// The learning table: inner MAC to remote index, open addressing, [`PROBES`] slots per MAC.
struct Fdb {
    /// `mac | 1 << 48` (0: empty), remote index, second last seen.
    slots: Box<[(u64, u16, u32)]>,
}

impl Fdb {
    fn new() -> Self {
        Fdb { slots: vec![(0, 0, 0); FDB_SLOTS].into_boxed_slice() }
    }

    fn key(mac: &[u8]) -> u64 {
        let mut k = [0u8; 8];
        k[2..].copy_from_slice(&mac[..6]);
        u64::from_be_bytes(k) | 1 << 48
    }

    fn home(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize & (FDB_SLOTS - 1)
    }

    fn lookup(&self, mac: &[u8], now: u32) -> Option<u16> {
        let key = Self::key(mac);
        let h = Self::home(key);
        (0..PROBES)
            .map(|p| self.slots[(h + p) & (FDB_SLOTS - 1)])
            .find_map(|(k, r, seen)| (k == key && now.wrapping_sub(seen) <= AGING_S).then_some(r))
    }

    fn learn(&mut self, mac: &[u8], remote: u16, now: u32) {
        let key = Self::key(mac);
        let h = Self::home(key);
        let mut victim = h;
        for p in 0..PROBES {
            let i = (h + p) & (FDB_SLOTS - 1);
            let (k, _, seen) = self.slots[i];
            if k == key || k == 0 {
                victim = i;
                break;
            }
            if now.wrapping_sub(seen) > now.wrapping_sub(self.slots[victim].2) {
                victim = i;
            }
        }
        self.slots[victim] = (key, remote, now);
    }

    fn clear(&mut self) {
        self.slots.fill((0, 0, 0));
    }
}

/// What one `recvmmsg` message brought: its length, its segment length (the datagrams GRO
/// joined are that long, the last maybe shorter; the whole length if it joined none), the
/// sender, and whether the kernel cut it short.
#[derive(Clone, Copy)]
struct Got {
    len: usize,
    seg: usize,
    from: Option<IpAddr>,
    truncated: bool,
}

/// Received datagrams waiting to be taken apart. With UDP GRO on, the kernel hands a run of
/// datagrams from one sender over as one message of up to 64 KiB (the segment length in a
/// control message), too long for a packet buffer: messages land in slots of [`RX_SLOT`]
/// bytes here, and each datagram is copied into the batch (one short copy from a cache-hot
/// area, where GRO saves a trip through the stack per datagram).
struct Staging {
    area: sys::Mmap,
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; 4]>,
    got: Vec<Got>,
    /// The next datagram to take: message `next`, `off` bytes in.
    next: usize,
    off: usize,
}

// SAFETY: the raw pointers in `hdrs` and `iovs` point into this struct's own buffers; they are
// rewritten before every syscall and only read by the syscall they were written for, so moving
// the struct to another thread cannot make a use dangle or race.
unsafe impl Send for Staging {}

impl Staging {
    fn new() -> io::Result<Self> {
        // SAFETY: plain C structs for which all-zero bytes are a valid value.
        let (h, i, n) = unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
        Ok(Staging {
            area: sys::Mmap::lazy(RX_MSGS * RX_SLOT)?,
            hdrs: vec![h; RX_MSGS],
            iovs: vec![i; RX_MSGS],
            names: vec![n; RX_MSGS],
            cmsgs: vec![[0; 4]; RX_MSGS],
            got: Vec::with_capacity(RX_MSGS),
            next: 0,
            off: 0,
        })
    }

    /// Reads what the socket has into the area, forgetting what was there (call it once the
    /// area is empty). Returns how many messages GRO joined, or `None` if `recvmmsg` failed
    /// with something other than "nothing to read".
    fn fill(&mut self, fd: RawFd) -> Option<u64> {
        for i in 0..RX_MSGS {
            let base = (self.area.addr() as usize + i * RX_SLOT) as *mut libc::c_void;
            self.iovs[i] = libc::iovec { iov_base: base, iov_len: RX_SLOT };
            let h = &mut self.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
            h.msg_hdr.msg_controllen = size_of::<[u64; 4]>();
            h.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every message was set just above, to slots, addresses and control buffers of
        // this struct that stay alive and unaliased for the duration of the call.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                RX_MSGS as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        (self.next, self.off) = (0, 0);
        self.got.clear();
        if r < 0 {
            return (sys::errno(&io::Error::last_os_error()) == libc::EAGAIN).then_some(0);
        }
        for i in 0..r as usize {
            let h = &self.hdrs[i];
            let len = h.msg_len as usize;
            let seg = gro_segment(&h.msg_hdr).filter(|&g| (1..len).contains(&g)).unwrap_or(len);
            let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.got.push(Got { len, seg, from: ip_of(&self.names[i]), truncated });
        }
        Some(self.got.iter().filter(|g| g.seg < g.len).count() as u64)
    }

    /// The next datagram: where it starts in the area, its length, its sender, and whether it
    /// was cut short (then the rest of its message is skipped).
    fn take(&mut self) -> Option<(usize, usize, Got)> {
        while let Some(&g) = self.got.get(self.next) {
            // An empty datagram is one too (too short, and counted so).
            if self.off < g.len.max(1) {
                let n = if g.truncated { g.len } else { g.seg.min(g.len - self.off) };
                let at = self.next * RX_SLOT + self.off;
                self.off += n.max(1);
                return Some((at, n, g));
            }
            (self.next, self.off) = (self.next + 1, 0);
        }
        None
    }

    fn is_empty(&self) -> bool {
        self.next >= self.got.len()
    }
}

/// The segment length of a message GRO joined, from its `UDP_GRO` control message.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel wrote msg_control(len) for this message; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay inside it, and CMSG_DATA of a SOL_UDP/UDP_GRO header holds an int.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let g = libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned();
                return usize::try_from(g).ok();
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Scratch for `sendmmsg`: an iovec and a remote per queued datagram, and per message its
/// header and room for one `UDP_SEGMENT` control message.
struct TxMsgs {
    iovs: Vec<libc::iovec>,
    to: Vec<u16>,
    hdrs: Vec<libc::mmsghdr>,
    /// `first[k]`: the first datagram of message `k`; one more entry ends the last message.
    first: Vec<usize>,
    cmsgs: Vec<[u64; 4]>,
}

// SAFETY: as for `Staging`: the pointers are rewritten before every `sendmmsg` and only read by
// it.
unsafe impl Send for TxMsgs {}

impl TxMsgs {
    fn new(n: usize) -> Self {
        // SAFETY: plain C structs for which all-zero bytes are a valid value.
        let (i, h) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        TxMsgs {
            iovs: vec![i; n],
            to: vec![0; n],
            hdrs: vec![h; n],
            first: vec![0; n + 1],
            cmsgs: vec![[0; 4]; n],
        }
    }

    /// Queues datagram `i`: `len` bytes at `buf`, to remote `r`.
    fn set(&mut self, i: usize, buf: *mut u8, len: usize, r: usize) {
        self.iovs[i] = libc::iovec { iov_base: buf.cast(), iov_len: len };
        self.to[i] = r as u16;
    }

    /// Where the run of datagrams starting at `i` (before `m`) ends: the same remote, the
    /// same length, a last one that may be shorter, within the kernel's limits.
    fn run_end(&self, i: usize, m: usize) -> usize {
        let seg = self.iovs[i].iov_len;
        let (mut j, mut bytes) = (i + 1, seg);
        while j < m && j - i < GSO_SEGS && self.to[j] == self.to[i] {
            let len = self.iovs[j].iov_len;
            if len > seg || bytes + len > GSO_BYTES {
                break;
            }
            bytes += len;
            j += 1;
            if len < seg {
                break;
            }
        }
        j
    }

    /// Fills messages for datagrams `off..m`, a run per message from `gso_from` on and one
    /// datagram per message before it; returns how many messages.
    fn build(&mut self, off: usize, m: usize, gso_from: usize, names: &mut [Name]) -> usize {
        let (mut k, mut i) = (0, off);
        while i < m {
            let j = if i >= gso_from { self.run_end(i, m) } else { i + 1 };
            let (seg, name) = (self.iovs[i].iov_len, &mut names[usize::from(self.to[i])]);
            let h = &mut self.hdrs[k].msg_hdr;
            h.msg_name = (&mut name.0 as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = name.1;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = j - i;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            if j - i > 1 {
                let buf = &mut self.cmsgs[k];
                h.msg_control = buf.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE and CMSG_LEN are pure computations; the buffer is 32
                // bytes, 8-aligned, room for a cmsghdr and the u16 CMSG_DATA points after it
                // (CMSG_SPACE(2) is 24); CMSG_FIRSTHDR reads only msg_control(len), set here.
                unsafe {
                    h.msg_controllen = libc::CMSG_SPACE(2) as usize;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    libc::CMSG_DATA(c).cast::<u16>().write_unaligned(seg as u16);
                }
            }
            self.hdrs[k].msg_len = 0;
            self.first[k] = i;
            k += 1;
            i = j;
        }
        self.first[k] = i;
        k
    }

    fn send(&mut self, fd: RawFd, n: usize) -> io::Result<usize> {
        // SAFETY: messages 0..n were filled by `build` in this burst, pointing at frames,
        // iovecs, addresses and control buffers that are not touched until the call returns.
        let r = unsafe { libc::sendmmsg(fd, self.hdrs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

/// A remote's socket address and its length.
type Name = (libc::sockaddr_storage, libc::socklen_t);

/// The address in `s`, if it holds an IPv4 or IPv6 one.
fn ip_of(s: &libc::sockaddr_storage) -> Option<IpAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which is smaller.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// `a` as a socket address for `sendmmsg`.
fn storage_of(a: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let p = (&mut s as *mut libc::sockaddr_storage).cast::<u8>();
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage, which is suitably aligned.
            unsafe { p.cast::<libc::sockaddr_in>().write(sin) };
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: v.ip().octets() },
                sin6_scope_id: 0,
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { p.cast::<libc::sockaddr_in6>().write(sin6) };
        }
    }
    s
}

/// A VXLAN segment over a UDP socket (see the module doc).
pub struct VxlanPort {
    name: String,
    vni: u32,
    ep: Arc<Endpoint>,
    inbox: Arc<Mutex<Inbox>>,
    shared: Arc<Shared>,
    /// The remote set as of `generation`, and its socket addresses; capacity reserved at open.
    remotes: Vec<IpAddr>,
    remote_addrs: Vec<Name>,
    generation: u64,
    fdb: Fdb,
    rx: Staging,
    tx: TxMsgs,
    /// Whether runs to one remote go as one `UDP_SEGMENT` send (off after the kernel said
    /// `EIO`: the underlay device cannot checksum them).
    gso: bool,
    stats: PortStats,
    counters: [u64; NCOUNTERS],
    dirty: bool,
    started: Instant,
    now: u32,
}

impl VxlanPort {
    /// Opens the port: joins (or makes) the socket for `o.local:o.dstport` in `o.netns` and
    /// registers `o.vni` on it. Errors name the port, the address and the failing step.
    pub fn open(name: &str, o: &VxlanOptions) -> io::Result<VxlanPort> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if o.vni == 0 || o.vni > VNI_MAX {
            return Err(bad(format!("{BACKEND} {name}: VNI {} is not in 1..={VNI_MAX}", o.vni)));
        }
        if o.local.is_unspecified() || o.local.is_multicast() {
            return Err(bad(format!(
                "{BACKEND} {name}: local {} is not a unicast address",
                o.local
            )));
        }
        let remotes = checked_remotes(o.local, &o.remotes)
            .map_err(|e| bad(format!("{BACKEND} {name}: {e}")))?;
        let ns = NetNs::open_or_current(BACKEND, name, o.netns.as_deref())?;
        let (ep, inbox) = join_endpoint(&ns, o, name)?;
        let shared = Arc::new(Shared {
            vni: o.vni,
            local: o.local,
            remotes: Mutex::new(remotes),
            generation: AtomicU64::new(1),
            counters: Default::default(),
        });
        let mut p = VxlanPort {
            name: name.to_string(),
            vni: o.vni,
            ep,
            inbox,
            shared,
            remotes: Vec::with_capacity(MAX_REMOTES),
            remote_addrs: Vec::with_capacity(MAX_REMOTES),
            generation: 0,
            fdb: Fdb::new(),
            rx: Staging::new()
                .map_err(|e| sys::step_err(BACKEND, name, "mapping its staging area", e))?,
            tx: TxMsgs::new(TX_MSGS),
            gso: true,
            stats: PortStats::default(),
            counters: [0; NCOUNTERS],
            dirty: false,
            started: Instant::now(),
            now: 0,
        };
        p.refresh();
        Ok(p)
    }

    /// The handle the control path keeps (remotes, counters).
    pub fn handle(&self) -> VxlanHandle {
        VxlanHandle(self.shared.clone())
    }

    /// The socket's local address (the port it really bound when `dstport` was 0, in tests).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.ep.sock.local_addr()
    }

    /// Takes a new remote set if the handle changed it.
    fn refresh(&mut self) {
        let g = self.shared.generation.load(Relaxed);
        if g == self.generation {
            return;
        }
        self.generation = g;
        let port = self.ep.key.1.port();
        let r = self.shared.remotes.lock().unwrap_or_else(PoisonError::into_inner);
        self.remotes.clear();
        self.remotes.extend_from_slice(&r[..r.len().min(MAX_REMOTES)]);
        self.remote_addrs.clear();
        self.remote_addrs.extend(self.remotes.iter().map(|&ip| {
            let len = match ip {
                IpAddr::V4(_) => size_of::<libc::sockaddr_in>(),
                IpAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
            };
            (storage_of(SocketAddr::new(ip, port)), len as libc::socklen_t)
        }));
        self.fdb.clear();
        let mut q = self.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        q.remotes.clear();
        q.remotes.extend_from_slice(&self.remotes);
    }

    fn count(&mut self, r: Reason, n: u64) {
        self.counters[r as usize] += n;
        if r.is_rx() {
            self.stats.rx_dropped += n;
        } else if r == Reason::SendFull {
            self.stats.tx_full += n;
        } else {
            self.stats.tx_errors += n;
        }
        self.dirty = true;
    }

    fn publish(&mut self) {
        if std::mem::take(&mut self.dirty) {
            for (a, &v) in self.shared.counters.iter().zip(&self.counters) {
                a.store(v, Relaxed);
            }
        }
    }

    /// Accepts a datagram of this port's VNI from `from`: checks the remote, learns the inner
    /// source MAC, strips the header. False if it was dropped (and counted).
    fn accept(&mut self, buf: &mut PktBuf, from: IpAddr) -> bool {
        let Some(ri) = self.remotes.iter().position(|&r| r == from) else {
            self.count(Reason::UnknownRemote, 1);
            return false;
        };
        let ok = buf.pull_front(HEADER_LEN);
        debug_assert!(ok, "parse checked the length");
        let src = &buf.frame()[6..12];
        if src[0] & 1 == 0 {
            self.fdb.learn(src, ri as u16, self.now);
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += buf.len() as u64;
        true
    }

    /// Moves frames sibling ports read for this one into `batch`.
    fn drain_inbox(&mut self, batch: &mut Batch) {
        let inbox = self.inbox.clone();
        let mut q = inbox.lock().unwrap_or_else(PoisonError::into_inner);
        while q.len > 0 && batch.room() > 0 {
            let (h, from) = (q.head, q.from[q.head]);
            q.head = (h + 1) % q.bufs.len();
            q.len -= 1;
            let i = batch.len();
            batch.swap_buf(i, &mut q.bufs[h]);
            batch.set_len(i + 1);
            if !self.accept(batch.get_mut(i), from) {
                batch.set_len(i);
            }
        }
    }

    /// Takes up to `room` datagrams from the staging area (reading the socket first if it is
    /// empty) into `batch`'s spare slots: keeps this VNI's frames, hands the others'.
    fn recv(&mut self, batch: &mut Batch, room: usize) {
        if self.rx.is_empty() {
            match self.rx.fill(self.ep.sock.as_raw_fd()) {
                Some(0) => {}
                Some(joined) => {
                    self.counters[C_GRO] += joined;
                    self.dirty = true;
                }
                None => self.count(Reason::RecvError, 1),
            }
        }
        let start = HEADROOM - HEADER_LEN;
        let mut kept = batch.len();
        // At most `room` datagrams, kept or not: a sibling's inbox takes no more per burst
        // than the socket gave it before.
        for _ in 0..room {
            let Some((at, n, g)) = self.rx.take() else { break };
            let slot = &mut batch.slots_mut()[kept];
            let verdict = match (g.truncated || n > HEADER_LEN + MAX_FRAME, g.from) {
                (true, _) | (_, None) => Err(Reason::TooLong),
                (false, Some(from)) => {
                    let (st, _) = slot.storage_mut();
                    // SAFETY: the kernel writes the area only inside `recvmmsg`, which needs
                    // `&mut self.rx`, so not while this slice lives.
                    st[start..start + n].copy_from_slice(unsafe { self.rx.area.slice(at, n) });
                    slot.set_window(start, n);
                    parse(slot.frame()).map(|vni| (vni, from))
                }
            };
            let keep = match verdict {
                Ok((vni, from)) if vni == self.vni => self.accept(slot, from),
                Ok((vni, from)) => {
                    if let Err(r) = self.ep.hand_over(vni, slot, from) {
                        self.count(r, 1);
                    }
                    false
                }
                Err(r) => {
                    self.count(r, 1);
                    false
                }
            };
            kept += usize::from(keep);
        }
        batch.set_len(kept);
    }

    /// Adds the header to `b` and queues its datagrams after the `m` queued (sending those
    /// first if there is no room); returns how many are queued now.
    fn encap(&mut self, b: &mut PktBuf, mut m: usize) -> usize {
        let len = b.len();
        if !(ETH_HLEN..=MAX_FRAME).contains(&len) {
            self.count(Reason::BadLength, 1);
            return m;
        }
        let dst = &b.frame()[..6];
        let to = if dst[0] & 1 == 0 { self.fdb.lookup(dst, self.now) } else { None };
        if !b.push_front(HEADER_LEN) {
            self.count(Reason::NoHeadroom, 1);
            return m;
        }
        b.frame_mut()[..HEADER_LEN].copy_from_slice(&header(self.vni));
        let (ptr, dlen) = (b.frame_mut().as_mut_ptr(), b.len());
        let targets = match to {
            Some(r) => usize::from(r)..usize::from(r) + 1,
            None => {
                self.counters[C_FLOODED] += 1;
                0..self.remotes.len()
            }
        };
        if m + targets.len() > TX_MSGS {
            self.flush(m);
            m = 0;
        }
        for r in targets {
            self.tx.set(m, ptr, dlen, r);
            m += 1;
        }
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += len as u64;
        self.dirty = true;
        m
    }

    /// Sends datagrams `0..m`, runs as one message while `gso` holds; counts what the socket
    /// refused.
    fn flush(&mut self, m: usize) {
        let fd = self.ep.sock.as_raw_fd();
        let (mut off, mut gso_from) = (0, if self.gso { 0 } else { m });
        while off < m {
            let n = self.tx.build(off, m, gso_from, &mut self.remote_addrs);
            match self.tx.send(fd, n) {
                Ok(0) => break,
                Ok(k) => {
                    let runs = (0..k).filter(|&i| self.tx.first[i + 1] - self.tx.first[i] > 1);
                    self.counters[C_GSO] += runs.count() as u64;
                    self.counters[C_DATAGRAMS] += (self.tx.first[k] - off) as u64;
                    off = self.tx.first[k];
                    self.dirty = true;
                }
                Err(e) if matches!(sys::errno(&e), libc::EAGAIN | libc::ENOBUFS) => break,
                Err(e) if self.tx.first[1] - off > 1 => {
                    // The kernel refused the run as a whole: its datagrams go one by one.
                    gso_from = self.tx.first[1];
                    if sys::errno(&e) == libc::EIO {
                        self.gso = false;
                        gso_from = m;
                    }
                }
                Err(_) => {
                    self.count(Reason::SendError, 1);
                    off += 1;
                }
            }
        }
        if off < m {
            self.count(Reason::SendFull, (m - off) as u64);
        }
    }
}

impl Drop for VxlanPort {
    fn drop(&mut self) {
        let mut members = self.ep.members.lock().unwrap_or_else(PoisonError::into_inner);
        members.retain(|(v, _)| *v != self.vni);
        self.ep.count.store(members.len(), Relaxed);
    }
}

impl Port for VxlanPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        self.refresh();
        self.now = self.started.elapsed().as_secs() as u32;
        let start = batch.len();
        if self.ep.count.load(Relaxed) > 1 {
            self.drain_inbox(batch);
        }
        let room = batch.room().min(MAX_BURST);
        if room > 0 {
            self.recv(batch, room);
        }
        self.publish();
        batch.len() - start
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        self.refresh();
        if self.remotes.is_empty() {
            self.count(Reason::NoRemote, sel.len() as u64);
            self.publish();
            return sel.len();
        }
        let mut m = 0;
        for &s in sel {
            m = self.encap(batch.get_mut(usize::from(s)), m);
        }
        self.flush(m);
        self.publish();
        sel.len()
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn mode_name(&self) -> Option<&'static str> {
        Some(if self.gso { "udp socket, gso" } else { "udp socket" })
    }

    fn backend_counters(&self, out: &mut Vec<(&'static str, u64)>) {
        out.extend(Reason::ALL.iter().map(|&r| (r.name(), self.counters[r as usize])));
        out.push(("tx_datagrams", self.counters[C_DATAGRAMS]));
        out.push(("tx_flooded", self.counters[C_FLOODED]));
        out.push(("tx_gso_sends", self.counters[C_GSO]));
        out.push(("rx_gro_reads", self.counters[C_GRO]));
    }

    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.push(self.ep.sock.as_raw_fd());
        // A sibling VNI's port may read our frames off the socket into our inbox, and frames
        // may wait in the staging area, neither of which a descriptor signals: then the
        // worker must keep its naps short.
        self.ep.count.load(Relaxed) == 1 && self.rx.is_empty()
    }
}

#[cfg(test)]
#[path = "vxlan_tests.rs"]
mod tests;
