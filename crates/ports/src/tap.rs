//! The `tap` backend: a port that is a tap interface's user-space end (`/dev/net/tun`,
//! `IFF_TAP | IFF_NO_PI`, non-blocking).
//!
//! Job: frames the kernel sends out of the tap interface come out of `rx_burst`; frames given
//! to `tx_burst` enter the kernel as if received on it. This is how a VR's Linux "shadow"
//! (routing daemons, ARP, ICMP to the router) is joined to the data plane.
//!
//! Two ways to open, chosen by [`TapMode`]:
//! - [`TapPort::create`]: makes a new tap interface (failing if the name is taken) that lives
//!   exactly as long as the port: closing the port deletes it. It starts down; whoever owns the
//!   configuration brings it up and addresses it.
//! - [`TapPort::attach`]: attaches to an existing persistent tap (`ip tuntap add dev X mode
//!   tap`), which stays when the port closes. It fails if no such interface exists or if it is
//!   not a tap.
//!
//! Data path: rx reads until `EAGAIN` or the batch is full, tx writes frame by frame: one
//! syscall per packet is what the tun driver offers (no batching short of vhost). A read lands
//! at [`crate::HEADROOM`] of the next spare buffer, with a scratch buffer behind it (sized at
//! open) so a frame too long for a packet buffer is recognised, dropped and counted in
//! `rx_dropped` instead of being silently cut. Frames shorter than an Ethernet header, and
//! writes the kernel refuses, are taken and counted in `tx_errors`.
//!
//! When the interface disappears (deleted, moved to another namespace), reads and writes fail
//! with `EBADFD`: the port reports `Down("interface X disappeared")` at once (or at the next
//! [`Port::service`]), and stops. An attached port re-attaches when a tap of that name exists
//! again; a created one does not re-create it (whoever deleted it meant it).
//!
//! Not counted: frames the kernel drops because the port did not read fast enough (they show
//! in the interface's own `tx_dropped`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use crate::sys::{self, at, IfReq, Seen, Watch};
use crate::{Batch, Port, PortStats, PortStatus, BUF_SIZE, HEADROOM};

const BACKEND: &str = "tap";

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: u16 = 0x0002;
const IFF_MULTI_QUEUE: u16 = 0x0100;
const IFF_NO_PI: u16 = 0x1000;
const IFF_TUN_EXCL: u16 = 0x8000;

/// Largest frame a tap read can return (64 KiB and a VLAN tag).
const SCRATCH: usize = 65536 + 4;

/// Whether the port makes its interface or attaches to an existing one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TapMode {
    /// Create a new tap interface, deleted when the port closes.
    #[default]
    Create,
    /// Attach to an existing persistent tap interface.
    Attach,
}

/// How to open a tap port.
#[derive(Clone, Debug, Default)]
pub struct TapOptions {
    pub mode: TapMode,
    /// Open (or create) the interface in this network namespace (`/run/netns/NAME`) instead of
    /// the caller's.
    pub netns: Option<PathBuf>,
}

/// A tap port. See the module documentation.
pub struct TapPort {
    watch: Watch,
    opts: TapOptions,
    fd: Option<OwnedFd>,
    scratch: Box<[u8]>,
    stats: PortStats,
}

impl TapPort {
    /// Creates tap interface `name` (down, no addresses) and returns its port.
    pub fn create(name: &str) -> io::Result<TapPort> {
        Self::open(name, &TapOptions { mode: TapMode::Create, netns: None })
    }

    /// Attaches to the existing persistent tap interface `name`.
    pub fn attach(name: &str) -> io::Result<TapPort> {
        Self::open(name, &TapOptions { mode: TapMode::Attach, netns: None })
    }

    /// Creates or attaches, as `opts` says.
    pub fn open(name: &str, opts: &TapOptions) -> io::Result<TapPort> {
        let mut watch = Watch::new(BACKEND, name, opts.netns.as_deref())?;
        if opts.mode == TapMode::Attach {
            watch.require()?;
        }
        let cname = watch.cname();
        let (mode, n) = (opts.mode, name.to_string());
        let fd = watch.netns().run_in(move || open_tun(&n, cname, mode))?;
        let ifindex = watch.require()?;
        watch.set_up(ifindex);
        Ok(TapPort {
            watch,
            opts: opts.clone(),
            fd: Some(fd),
            scratch: vec![0u8; SCRATCH].into_boxed_slice(),
            stats: PortStats::default(),
        })
    }

    /// The ifindex the port is open on, 0 while down.
    pub fn ifindex(&self) -> u32 {
        self.watch.ifindex()
    }

    /// Called with an errno from a read or write: if it says the interface went, check and
    /// close. Returns true if the port is now down.
    fn link_error(&mut self, e: &io::Error) -> bool {
        if sys::is_link_error(e) && self.watch.check_gone_now() {
            self.fd = None;
            return true;
        }
        false
    }

    fn reattach(&mut self) {
        let cname = self.watch.cname();
        let n = self.watch.name().to_string();
        let res = self
            .watch
            .netns()
            .run_in(move || open_tun(&n, cname, TapMode::Attach))
            .and_then(|fd| Ok((fd, self.watch.require()?)));
        match res {
            Ok((fd, ifindex)) => {
                self.fd = Some(fd);
                self.watch.set_up(ifindex);
            }
            Err(e) => self.watch.reopen_failed(&e),
        }
    }
}

/// Opens `/dev/net/tun` and binds it to tap `name`.
fn open_tun(name: &str, cname: [u8; 16], mode: TapMode) -> io::Result<OwnedFd> {
    let fd = sys::open_dev(c"/dev/net/tun", libc::O_RDWR | libc::O_NONBLOCK).map_err(at(
        BACKEND,
        name,
        "open /dev/net/tun",
    ))?;
    let mut flags = IFF_TAP | IFF_NO_PI;
    if mode == TapMode::Create {
        flags |= IFF_TUN_EXCL;
    }
    let mut ifr = IfReq::new(cname);
    ifr.set_short(flags);
    match sys::ioctl_ifreq(&fd, TUNSETIFF, &mut ifr) {
        Ok(()) => Ok(fd),
        // A multi-queue tap accepts only multi-queue attachments.
        Err(e) if mode == TapMode::Attach && sys::errno(&e) == libc::EINVAL => {
            let mut ifr = IfReq::new(cname);
            ifr.set_short(flags | IFF_MULTI_QUEUE);
            sys::ioctl_ifreq(&fd, TUNSETIFF, &mut ifr).map(|()| fd).map_err(|_| {
                sys::step_err(
                    BACKEND,
                    name,
                    "ioctl(TUNSETIFF)",
                    io::Error::new(e.kind(), format!("{e} (not a tap interface?)")),
                )
            })
        }
        Err(e) if mode == TapMode::Create && sys::errno(&e) == libc::EBUSY => Err(sys::step_err(
            BACKEND,
            name,
            "ioctl(TUNSETIFF)",
            io::Error::new(
                e.kind(),
                format!("{e} (an interface with this name exists; attach to it instead?)"),
            ),
        )),
        Err(e) => Err(sys::step_err(BACKEND, name, "ioctl(TUNSETIFF)", e)),
    }
}

impl Port for TapPort {
    fn name(&self) -> &str {
        self.watch.name()
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        let mut got = 0;
        while let (Some(fd), Some(buf)) = (self.fd.as_ref(), batch.spare_mut()) {
            let (store, _) = buf.storage_mut();
            match sys::readv2(fd, &mut store[HEADROOM..], &mut self.scratch) {
                Ok(0) => break,
                Ok(n) if n > BUF_SIZE - HEADROOM => self.stats.rx_dropped += 1,
                Ok(n) => {
                    buf.set_window(HEADROOM, n);
                    batch.commit();
                    got += 1;
                    self.stats.rx_bytes += n as u64;
                }
                Err(e) => {
                    self.link_error(&e);
                    break;
                }
            }
        }
        self.stats.rx_packets += got as u64;
        got
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        let mut taken = 0;
        for &i in sel {
            let Some(fd) = self.fd.as_ref() else { break };
            let frame = batch.packets()[i as usize].frame();
            if frame.len() < 14 {
                self.stats.tx_errors += 1;
                taken += 1;
                continue;
            }
            match sys::write(fd, frame) {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                }
                Err(e) if sys::errno(&e) == libc::EAGAIN => break,
                Err(e) => {
                    if self.link_error(&e) {
                        break;
                    }
                    self.stats.tx_errors += 1;
                }
            }
            taken += 1;
        }
        if self.fd.is_some() {
            self.stats.tx_full += (sel.len() - taken) as u64;
        } else {
            self.stats.tx_errors += (sel.len() - taken) as u64;
        }
        taken
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn status(&self) -> PortStatus {
        self.watch.status().clone()
    }

    /// The tun file: readable while a frame is queued.
    fn wakeup_fds(&self, out: &mut Vec<RawFd>) -> bool {
        out.extend(self.fd.as_ref().map(|f| f.as_raw_fd()));
        true
    }

    fn service(&mut self) {
        match self.watch.poll() {
            Seen::Gone => self.fd = None,
            Seen::Back if self.opts.mode == TapMode::Attach => self.reattach(),
            _ => {}
        }
    }
}
