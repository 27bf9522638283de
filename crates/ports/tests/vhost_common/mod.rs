//! An in-process vhost-user frontend for tests: rust-vmm's `vhost` `Frontend` speaks the
//! protocol to a routeplex [`VhostUserPort`], and [`Guest`] plays the virtio driver over a
//! memfd it shares, writing descriptors and avail entries by hand, good or hostile.
#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ports::vhost::{Mode, VhostUserOptions, VhostUserPort};
use ports::{Port, PortStatus};
use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// Entries per ring.
pub const Q: u16 = 64;
/// Bytes of shared memory.
pub const MEM: usize = 1 << 20;
/// Where buffers start in guest-physical space (rings sit below).
pub const BUFS: u64 = 0x10000;
pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;
pub const F_INDIRECT: u16 = 4;
pub const VERSION_1: u64 = 1 << 32;
pub const MRG_RXBUF: u64 = 1 << 15;
pub const MQ: u64 = 1 << 22;
pub const CTRL_VQ: u64 = 1 << 17;
pub const PROTOCOL_FEATURES: u64 = 1 << 30;

pub fn unique_socket() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("rvh-fe-{}-{n}.sock", std::process::id()))
}

pub fn server_port(sock: &std::path::Path, pairs: u16) -> VhostUserPort {
    let mut o = VhostUserOptions::new(sock, Mode::Server);
    o.queues = pairs;
    o.name = "rvh".into();
    VhostUserPort::new(o).expect("port opens")
}

/// Runs `f` (frontend calls, which wait for replies) on another thread while this one services
/// the port, as routeplex's worker would.
pub fn with_port<T: Send + 'static>(
    port: &mut VhostUserPort,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let h = std::thread::spawn(f);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !h.is_finished() {
        port.service();
        assert!(Instant::now() < deadline, "frontend thread stuck; {:?}", port.status());
        std::thread::sleep(Duration::from_micros(100));
    }
    for _ in 0..20 {
        port.service();
    }
    h.join().expect("frontend thread")
}

/// The driver side: shared memory, ring bookkeeping, eventfds.
pub struct Guest {
    pub memfd: OwnedFd,
    pub base: *mut u8,
    pub pairs: u16,
    pub avail: Vec<u16>,
    pub used_seen: Vec<u16>,
    pub kicks: Vec<EventFd>,
    pub calls: Vec<EventFd>,
}

// SAFETY: the mapping is owned by Guest and only touched through it.
unsafe impl Send for Guest {}

impl Guest {
    pub fn new(pairs: u16) -> Guest {
        // SAFETY: memfd_create with a valid C string; the result is checked.
        let fd = unsafe {
            libc::memfd_create(c"rvh-guest".as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC)
        };
        assert!(fd >= 0);
        // SAFETY: fd is ours.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain syscalls on our fd.
        unsafe {
            assert_eq!(libc::ftruncate(fd, MEM as i64), 0);
            libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW);
        }
        // SAFETY: maps the whole memfd shared; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MEM,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let n = 2 * pairs as usize;
        Guest {
            memfd,
            base: base.cast(),
            pairs,
            avail: vec![0; n],
            used_seen: vec![0; n],
            kicks: (0..n)
                .map(|_| EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).unwrap())
                .collect(),
            calls: (0..n)
                .map(|_| EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC).unwrap())
                .collect(),
        }
    }

    pub fn uva(&self) -> u64 {
        self.base as u64
    }

    pub fn desc_addr(ring: usize) -> u64 {
        ring as u64 * 0x1000
    }
    pub fn avail_addr(ring: usize) -> u64 {
        Self::desc_addr(ring) + 16 * Q as u64
    }
    pub fn used_addr(ring: usize) -> u64 {
        Self::desc_addr(ring) + 0x800
    }

    pub fn write(&self, gpa: u64, bytes: &[u8]) {
        assert!(gpa as usize + bytes.len() <= MEM);
        // SAFETY: inside our mapping (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(gpa as usize), bytes.len())
        };
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        assert!(gpa as usize + len <= MEM);
        let mut v = vec![0u8; len];
        // SAFETY: inside our mapping (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(gpa as usize), v.as_mut_ptr(), len) };
        v
    }

    fn u16_at(&self, gpa: u64) -> u16 {
        u16::from_le_bytes(self.read(gpa, 2).try_into().unwrap())
    }

    pub fn desc(&self, ring: usize, idx: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..12].copy_from_slice(&len.to_le_bytes());
        d[12..14].copy_from_slice(&flags.to_le_bytes());
        d[14..16].copy_from_slice(&next.to_le_bytes());
        self.write(Self::desc_addr(ring) + 16 * idx as u64, &d);
    }

    /// Makes `head` available on `ring` and publishes the new index.
    pub fn post(&mut self, ring: usize, head: u16) {
        let slot = (self.avail[ring] % Q) as u64;
        self.write(Self::avail_addr(ring) + 4 + 2 * slot, &head.to_le_bytes());
        self.avail[ring] = self.avail[ring].wrapping_add(1);
        self.set_avail_idx(ring, self.avail[ring]);
    }

    pub fn set_avail_idx(&self, ring: usize, idx: u16) {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.write(Self::avail_addr(ring) + 2, &idx.to_le_bytes());
    }

    pub fn used_idx(&self, ring: usize) -> u16 {
        self.u16_at(Self::used_addr(ring) + 2)
    }

    /// Used entries published since the last call: `(id, len)`.
    pub fn take_used(&mut self, ring: usize) -> Vec<(u32, u32)> {
        let idx = self.used_idx(ring);
        let mut out = Vec::new();
        while self.used_seen[ring] != idx {
            let slot = (self.used_seen[ring] % Q) as u64;
            let e = self.read(Self::used_addr(ring) + 4 + 8 * slot, 8);
            out.push((
                u32::from_le_bytes(e[0..4].try_into().unwrap()),
                u32::from_le_bytes(e[4..8].try_into().unwrap()),
            ));
            self.used_seen[ring] = self.used_seen[ring].wrapping_add(1);
        }
        out
    }

    /// A transmit frame (header of zeros, then `frame`) in one descriptor at `gpa`.
    pub fn tx_one(&mut self, ring: usize, idx: u16, gpa: u64, frame: &[u8]) {
        let mut b = vec![0u8; 12];
        b.extend_from_slice(frame);
        self.write(gpa, &b);
        self.desc(ring, idx, gpa, b.len() as u32, 0, 0);
        self.post(ring, idx);
    }

    pub fn region(&self) -> VhostUserMemoryRegionInfo {
        VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: MEM as u64,
            userspace_addr: self.uva(),
            mmap_offset: 0,
            mmap_handle: self.memfd.as_raw_fd(),
        }
    }

    pub fn ring_config(&self, ring: usize) -> VringConfigData {
        VringConfigData {
            queue_max_size: Q,
            queue_size: Q,
            flags: 0,
            desc_table_addr: self.uva() + Self::desc_addr(ring),
            used_ring_addr: self.uva() + Self::used_addr(ring),
            avail_ring_addr: self.uva() + Self::avail_addr(ring),
            log_addr: None,
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.base.cast(), MEM) };
    }
}

/// Connects a frontend and sets every ring up the way QEMU does. Returns the frontend (keep
/// it: dropping it closes the connection) and the guest.
pub fn connect(port: &mut VhostUserPort, sock: PathBuf, guest: Guest) -> (Frontend, Guest) {
    let (fe, guest) = with_port(port, move || {
        let pairs = guest.pairs;
        let mut fe = Frontend::connect(&sock, 2 * pairs as u64 + 1).expect("connect");
        fe.set_owner().unwrap();
        let offered = fe.get_features().unwrap();
        let mut want = VERSION_1 | MRG_RXBUF | PROTOCOL_FEATURES;
        if pairs > 1 {
            want |= MQ | CTRL_VQ;
        }
        assert_eq!(offered & want, want, "offered {offered:#x}");
        fe.set_features(want).unwrap();
        let pf = fe.get_protocol_features().unwrap();
        assert!(pf.contains(VhostUserProtocolFeatures::MQ));
        fe.set_protocol_features(VhostUserProtocolFeatures::MQ).unwrap();
        // GET_QUEUE_NUM is not asked: the port answers in queue pairs, as QEMU and DPDK read
        // it, while this crate's frontend would take the answer as a ring count.
        fe.set_mem_table(&[guest.region()]).unwrap();
        for r in 0..2 * pairs as usize {
            fe.set_vring_num(r, Q).unwrap();
            fe.set_vring_addr(r, &guest.ring_config(r)).unwrap();
            fe.set_vring_base(r, 0).unwrap();
            fe.set_vring_call(r, &guest.calls[r]).unwrap();
            fe.set_vring_kick(r, &guest.kicks[r]).unwrap();
            fe.set_vring_enable(r, true).unwrap();
        }
        (fe, guest)
    });
    assert_eq!(port.status(), PortStatus::Up, "{:?}", port.stats());
    (fe, guest)
}
