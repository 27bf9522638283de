//! Several queues of one interface: a socket per queue, one XDP program and one XSKMAP per
//! interface.
//!
//! Why one program: an interface takes one XDP program, and ours already redirects by
//! `ctx->rx_queue_index`, so a map holding a socket at each bound queue's index serves every
//! queue. Each socket has its own UMEM (no `XDP_SHARED_UMEM`): sockets driven by different
//! workers then share no ring, and a socket's frames never wait on another's.
//!
//! The ports of one [`AfXdpPort::open_spread`] (a replicated VR's, each on its own worker) share
//! the program through a [`Group`]: the first port to open attaches it, the others add their
//! sockets to its map, and it is detached when the last port holding it closes. A socket that
//! closes leaves the map by itself (the kernel removes it), so its queue goes back to the kernel
//! stack until the port re-opens.

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{bpf, napi, AfXdpOptions, AfXdpPort, KernelCounts, RxDrops, Sock, XdpMode, BACKEND};
use crate::sys::{self, at, Watch};
use crate::{Batch, PortStats};

/// Which receive queues of the interface a port binds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Queues {
    /// Every receive queue the interface has when the port opens (or re-opens).
    #[default]
    All,
    /// Queues `0..n`.
    First(u32),
    /// These queues (distinct).
    List(Vec<u32>),
}

impl Queues {
    /// The queue indices on an interface with `count` receive queues, each checked against it.
    fn resolve(&self, name: &str, count: u32) -> io::Result<Vec<u32>> {
        let list: Vec<u32> = match self {
            Queues::All => (0..count).collect(),
            Queues::First(n) => (0..*n).collect(),
            Queues::List(l) => l.clone(),
        };
        if list.is_empty() {
            return Err(invalid(format!("{BACKEND} {name}: no queue to bind")));
        }
        if let Some(&q) = list.iter().find(|&&q| q >= count) {
            let what = match self {
                Queues::First(n) => format!("{n} queues asked for"),
                _ => format!("queue {q}"),
            };
            return Err(invalid(format!(
                "{BACKEND} {name}: {what}, but the interface has {count} receive queue{}",
                if count == 1 { "" } else { "s" }
            )));
        }
        let mut seen = list.clone();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid(format!("{BACKEND} {name}: queue listed twice in {list:?}")));
        }
        Ok(list)
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// One bound queue of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueInfo {
    /// The interface's queue index.
    pub queue: u32,
    /// Bound zero-copy (else copy mode).
    pub zero_copy: bool,
    /// Frames received on it since the port (re-)opened.
    pub rx_packets: u64,
}

/// The interface's program, its map and the link that keeps it attached. Fields drop in
/// order: the link first, so the program stops redirecting before the map goes.
pub(super) struct Xdp {
    _link: OwnedFd,
    _prog: OwnedFd,
    map: OwnedFd,
    ifindex: u32,
    entries: u32,
    pub(super) mode: XdpMode,
    pub(super) prog_id: u32,
}

/// Where the ports of one interface find its [`Xdp`]: held weakly, so that the last port to
/// close detaches the program.
#[derive(Clone, Default)]
pub(super) struct Group(Arc<Mutex<Weak<Xdp>>>);

impl Group {
    /// The interface's program, attached now unless a port of the group already attached it
    /// to this very interface with room for `entries` queues.
    fn attach(
        &self,
        name: &str,
        ifindex: u32,
        entries: u32,
        frags: bool,
        mode: XdpMode,
    ) -> io::Result<Arc<Xdp>> {
        // Only the control path takes the lock (open, re-open): never a burst.
        let mut cur = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(x) = cur.upgrade().filter(|x| x.ifindex == ifindex && x.entries >= entries) {
            return Ok(x);
        }
        let map = bpf::create_xskmap(entries).map_err(at(
            BACKEND,
            name,
            "bpf(BPF_MAP_CREATE, XSKMAP)",
        ))?;
        let prog =
            bpf::load_program(&map, frags).map_err(at(BACKEND, name, "bpf(BPF_PROG_LOAD)"))?;
        let (link, mode) =
            bpf::attach(&prog, ifindex, mode).map_err(at(BACKEND, name, "bpf(BPF_LINK_CREATE)"))?;
        let prog_id = bpf::prog_id(&prog).unwrap_or(0);
        let x = Arc::new(Xdp { _link: link, _prog: prog, map, ifindex, entries, mode, prog_id });
        *cur = Arc::downgrade(&x);
        Ok(x)
    }
}

/// Receive queues of interface `ifname` (`ifindex`), in the calling thread's namespace:
/// `ETHTOOL_GCHANNELS` (rx-only plus combined channels); where the driver does not answer it,
/// the `queues/rx-*` entries of the interface in sysfs (if sysfs shows this interface); else 1.
pub fn rx_queue_count(ifname: &str, ifindex: u32) -> io::Result<u32> {
    let name = sys::check_ifname(BACKEND, ifname)?;
    let ctl = sys::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0).map_err(at(
        BACKEND,
        ifname,
        "socket(AF_UNIX) for ethtool",
    ))?;
    if let Ok(ch) = sys::ethtool_channels(&ctl, name) {
        let n = ch.rx_count.saturating_add(ch.combined_count);
        if n > 0 {
            return Ok(n);
        }
    }
    let dir = format!("/sys/class/net/{ifname}");
    let same = std::fs::read_to_string(format!("{dir}/ifindex"))
        .is_ok_and(|i| i.trim() == ifindex.to_string());
    let in_sysfs = same
        .then(|| std::fs::read_dir(format!("{dir}/queues")).ok())
        .flatten()
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0);
    Ok((in_sysfs as u32).max(1))
}

/// [`rx_queue_count`] of interface `ifname` in namespace `netns` (`/run/netns/NAME`; `None`:
/// the caller's). Errors name the interface.
pub fn rx_queue_count_in(ifname: &str, netns: Option<&Path>) -> io::Result<u32> {
    let watch = Watch::new(BACKEND, ifname, netns)?;
    let ifindex = watch.require()?;
    watch.netns().run_in(|| rx_queue_count(ifname, ifindex))
}

/// Everything that exists while the port is open on a live interface: the sockets first, so
/// that a port closing takes its queues out of the map before (if it is the last) the program
/// goes.
pub(super) struct Live {
    /// First, so the old `threaded` setting is back while the interface still has its NAPI.
    pub(super) napi: Option<napi::ThreadedNapi>,
    pub(super) socks: Vec<Sock>,
    pub(super) xdp: Arc<Xdp>,
    /// The socket whose rx is served first in the next burst.
    next_rx: usize,
}

impl Live {
    /// A socket on each of `o.queues`, then the program (or the group's) with them in its map.
    pub(super) fn open(
        name: &str,
        ifindex: u32,
        o: &AfXdpOptions,
        mtu: Option<usize>,
        bind_wait: Duration,
        group: &Group,
    ) -> io::Result<Live> {
        let count = rx_queue_count(name, ifindex)?;
        let list = o.queues.resolve(name, count)?;
        let socks = list
            .iter()
            .map(|&q| Sock::open(name, ifindex, q, o, mtu, bind_wait))
            .collect::<io::Result<Vec<_>>>()?;
        let frags = socks.iter().any(|s| s.sg);
        let xdp = group.attach(name, ifindex, count, frags, o.mode)?;
        for s in &socks {
            bpf::map_set(&xdp.map, s.queue, &s.xsk).map_err(at(
                BACKEND,
                name,
                "bpf(BPF_MAP_UPDATE_ELEM)",
            ))?;
        }
        // The same interface in sysfs: same name and ifindex (sysfs shows the namespace it was
        // mounted for, which need not be the port's). Threaded NAPI pins every NAPI thread of
        // the interface to one worker, so only a port that holds all the queues turns it on.
        let in_sysfs = o.netns.is_none()
            && std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
                .is_ok_and(|i| i.trim() == ifindex.to_string());
        let napi = (o.threaded_napi
            && xdp.mode == XdpMode::Driver
            && in_sysfs
            && socks.len() as u32 == count)
            .then(|| napi::ThreadedNapi::enable(name))
            .flatten();
        Ok(Live { napi, socks, xdp, next_rx: 0 })
    }

    pub(super) fn queue_info(&self) -> Vec<QueueInfo> {
        let info = |s: &Sock| QueueInfo {
            queue: s.queue,
            zero_copy: s.zero_copy,
            rx_packets: s.rx_packets,
        };
        self.socks.iter().map(info).collect()
    }

    /// Receives from every socket, starting one later on each call, so that no queue is
    /// always served last when the batch fills.
    pub(super) fn rx(
        &mut self,
        batch: &mut Batch,
        stats: &mut PortStats,
        drops: &mut RxDrops,
    ) -> usize {
        let n = self.socks.len();
        let mut got = 0;
        for k in 0..n {
            if batch.room() == 0 {
                break;
            }
            got += self.socks[(self.next_rx + k) % n].rx(batch, stats, drops);
        }
        self.next_rx = (self.next_rx + 1) % n;
        got
    }

    /// Sends on the first queue's socket: the queue a frame leaves on does not matter to the
    /// peer, and one socket keeps the port's frames in order.
    pub(super) fn tx(
        &mut self,
        batch: &mut Batch,
        sel: &[u16],
        stats: &mut PortStats,
        anomalies: &mut u64,
    ) -> (usize, Option<io::Error>) {
        self.socks[0].tx(batch, sel, stats, anomalies)
    }

    pub(super) fn kick(&mut self) -> io::Result<()> {
        self.socks.iter_mut().try_for_each(Sock::kick)
    }

    pub(super) fn kernel_counts(&self) -> Option<KernelCounts> {
        let mut k = KernelCounts::default();
        for s in &self.socks {
            let c = s.kernel_counts()?;
            k.rx_dropped += c.rx_dropped;
            k.tx_invalid += c.tx_invalid;
        }
        Some(k)
    }

    /// `status`'s mode: attach mode, copy or zero-copy (`copy/zero-copy` where the queues
    /// differ), multi-buffer.
    pub(super) fn mode_name(&self) -> &'static str {
        let zc = self.socks.iter().filter(|s| s.zero_copy).count();
        let zc = if zc == 0 {
            0
        } else if zc == self.socks.len() {
            1
        } else {
            2
        };
        let sg = self.socks.iter().all(|s| s.sg);
        const NAMES: [[&str; 2]; 6] = [
            ["xdp driver, copy", "xdp driver, copy, multi-buffer"],
            ["xdp driver, zero-copy", "xdp driver, zero-copy, multi-buffer"],
            ["xdp driver, copy/zero-copy", "xdp driver, copy/zero-copy, multi-buffer"],
            ["xdp skb, copy", "xdp skb, copy, multi-buffer"],
            ["xdp skb, zero-copy", "xdp skb, zero-copy, multi-buffer"],
            ["xdp skb, copy/zero-copy", "xdp skb, copy/zero-copy, multi-buffer"],
        ];
        let row = if self.xdp.mode == XdpMode::Driver { 0 } else { 3 } + zc;
        NAMES[row][usize::from(sg)]
    }
}

impl AfXdpPort {
    /// Opens `n` ports on `ifname` that share its receive queues (`opts.queues`, by default
    /// all): queue number `i` of the list goes to port `i mod n`, so with all queues port `r`
    /// gets queues `r, r + n, ...`. For a VR replicated on `n` workers, each driving one port.
    /// The ports share one XDP program and map (detached when the last port closes). Fails,
    /// naming the interface and its queue count, where it has fewer queues than `n`.
    pub fn open_spread(ifname: &str, opts: &AfXdpOptions, n: usize) -> io::Result<Vec<AfXdpPort>> {
        let count = rx_queue_count_in(ifname, opts.netns.as_deref())?;
        let list = opts.queues.resolve(ifname, count)?;
        if n == 0 || list.len() < n {
            return Err(invalid(format!(
                "{BACKEND} {ifname}: {n} replicas need a queue each, but the port has {} of the \
                 interface's {count} receive queues",
                list.len()
            )));
        }
        let group = Group::default();
        (0..n)
            .map(|r| {
                let mine = list.iter().skip(r).step_by(n).copied().collect();
                let o = AfXdpOptions { queues: Queues::List(mine), ..opts.clone() };
                AfXdpPort::open_in(ifname, &o, group.clone())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_resolve_against_the_interface_count() {
        assert_eq!(Queues::All.resolve("v", 4).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(Queues::First(2).resolve("v", 4).unwrap(), vec![0, 1]);
        assert_eq!(Queues::List(vec![3, 1]).resolve("v", 4).unwrap(), vec![3, 1]);
        let e = Queues::First(8).resolve("v", 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "afxdp v: 8 queues asked for, but the interface has 4 receive queues"
        );
        let e = Queues::List(vec![0, 1]).resolve("v", 1).unwrap_err();
        assert_eq!(e.to_string(), "afxdp v: queue 1, but the interface has 1 receive queue");
        assert!(Queues::List(vec![1, 1]).resolve("v", 4).is_err());
        assert!(Queues::First(0).resolve("v", 4).is_err());
    }
}
