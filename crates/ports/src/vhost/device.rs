//! The vhost-user device state a frontend (QEMU, DPDK `virtio_user`) sets up over the socket:
//! features, the memory table (mapped from the fds it sends) and one `Vring` per virtqueue.
//!
//! `vhost`'s `BackendReqHandler` parses each message and calls `Device` through
//! `VhostUserBackendReqHandlerMut`; everything the frontend supplies is checked here before it
//! is stored: ring indexes and sizes, ring addresses (translated from the frontend's virtual
//! addresses to guest-physical ones and checked against the mapped regions), region bounds
//! against the size of the file behind them. The data path (`queue`) checks descriptors.
//! Messages for features we do not offer are refused with an error, which the port treats as a
//! protocol violation.

use std::fs::File;
use std::os::fd::AsRawFd;

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserConfigFlags, VhostUserInflight,
    VhostUserLog, VhostUserMemoryRegion, VhostUserShMemConfig, VhostUserSharedMsg,
    VhostUserSingleMemoryRegion, VhostUserVringAddrFlags, VhostUserVringState,
};
use vhost::vhost_user::{
    Error as VuError, GpuBackend, Result as VuResult, VhostUserBackendReqHandlerMut,
    VhostUserProtocolFeatures,
};
use vhost::VhostUserMemoryRegionBase;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{VIRTIO_NET_F_CTRL_VQ, VIRTIO_NET_F_MQ, VIRTIO_NET_F_MRG_RXBUF};
use virtio_queue::{Queue, QueueT};
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryMmap, GuestRegionMmap};

/// The most entries a virtqueue may have (virtio 1.x split ring limit).
pub const MAX_QUEUE_SIZE: u16 = 32768;
/// The most memory regions a frontend may send in SET_MEM_TABLE.
pub const MAX_REGIONS: usize = 8;
/// The largest region we map (address space only: the mapping is shared and not reserved).
pub const MAX_REGION_BYTES: u64 = 1 << 40;

const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;

/// One virtqueue and what the frontend told us about it.
pub(super) struct Vring {
    pub q: Queue,
    pub kick: Option<File>,
    pub call: Option<File>,
    /// SET_VRING_ENABLE (rings start disabled once PROTOCOL_FEATURES is acked).
    pub enabled: bool,
    /// A kick fd (or its "no fd" flag) arrived after the ring was set up, and no
    /// GET_VRING_BASE stopped it since.
    pub started: bool,
    /// The data path found the ring itself unusable (avail index out of range, ring outside
    /// memory); it stays unused until the frontend sets it up again.
    pub broken: bool,
}

impl Vring {
    pub(super) fn new() -> Vring {
        Vring {
            q: Queue::new(MAX_QUEUE_SIZE).expect("MAX_QUEUE_SIZE is a valid virtio queue size"),
            kick: None,
            call: None,
            enabled: false,
            started: false,
            broken: false,
        }
    }
}

/// A region of the frontend's memory as it described it.
#[derive(Clone, Copy, Debug)]
struct RegionInfo {
    gpa: u64,
    size: u64,
    uva: u64,
}

/// Counters of what the frontend did on the control path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Memory regions mapped whose fd was not sealed against shrinking (see the module docs
    /// of [`super`]).
    pub unsealed_regions: u64,
    /// Rings that failed validation when started (addresses outside the memory table).
    pub bad_rings: u64,
}

pub(super) struct Device {
    /// Queue pairs we serve.
    pub pairs: u16,
    pub offered: u64,
    pub acked: u64,
    pub acked_protocol: u64,
    regions: Vec<RegionInfo>,
    pub mem: Option<GuestMemoryMmap>,
    /// 2 per pair (RX = even, TX = odd, as the guest names them) plus the control queue slot,
    /// which frontends serve themselves: it is accepted and never used.
    pub vrings: Vec<Vring>,
    pub counters: DeviceCounters,
    /// Bumped on every change the data path must notice (rings started or stopped).
    pub generation: u64,
}

fn invalid(why: &'static str) -> VuError {
    VuError::InvalidOperation(why)
}

impl Device {
    pub fn new(pairs: u16) -> Device {
        let mut offered = (1u64 << VIRTIO_F_VERSION_1)
            | (1u64 << VIRTIO_NET_F_MRG_RXBUF)
            | VHOST_USER_F_PROTOCOL_FEATURES;
        if pairs > 1 {
            // MQ needs CTRL_VQ (virtio 1.2 §5.1.3.1); the frontend serves the control queue.
            offered |= (1u64 << VIRTIO_NET_F_MQ) | (1u64 << VIRTIO_NET_F_CTRL_VQ);
        }
        Device {
            pairs,
            offered,
            acked: 0,
            acked_protocol: 0,
            regions: Vec::new(),
            mem: None,
            vrings: (0..2 * pairs as usize + 1).map(|_| Vring::new()).collect(),
            counters: DeviceCounters::default(),
            generation: 0,
        }
    }

    /// Forgets the frontend: memory unmapped, rings and features reset. Counters stay.
    pub fn reset(&mut self) {
        self.acked = 0;
        self.acked_protocol = 0;
        self.regions.clear();
        self.mem = None;
        for v in &mut self.vrings {
            *v = Vring::new();
        }
        self.generation += 1;
    }

    /// Bytes of virtio-net header in front of every frame, as negotiated.
    pub fn hdr_len(&self) -> usize {
        if self.acked & ((1 << VIRTIO_F_VERSION_1) | (1 << VIRTIO_NET_F_MRG_RXBUF)) != 0 {
            12
        } else {
            10
        }
    }

    pub fn mergeable(&self) -> bool {
        self.acked & (1 << VIRTIO_NET_F_MRG_RXBUF) != 0
    }

    /// Whether ring `i` may carry packets now.
    pub fn usable(&self, i: usize) -> bool {
        let v = &self.vrings[i];
        let enabled = v.enabled || self.acked & VHOST_USER_F_PROTOCOL_FEATURES == 0;
        v.started && enabled && !v.broken && self.mem.is_some()
    }

    fn vring(&mut self, index: u32) -> VuResult<&mut Vring> {
        self.vrings.get_mut(index as usize).ok_or(VuError::InvalidParam)
    }

    /// Frontend virtual address to guest-physical, if a region holds all `len` bytes.
    fn uva_to_gpa(&self, uva: u64, len: u64) -> Option<u64> {
        self.regions.iter().find_map(|r| {
            let off = uva.checked_sub(r.uva)?;
            (off.checked_add(len)? <= r.size).then(|| r.gpa + off)
        })
    }

    /// Checks a ring against the memory and marks it started; a ring that fails is counted
    /// and left stopped (the frontend sees no packets move on it).
    fn start(&mut self, index: usize) {
        let Some(mem) = &self.mem else { return };
        let v = &mut self.vrings[index];
        v.q.set_ready(true);
        if v.q.is_valid(mem) {
            v.started = true;
            v.broken = false;
            // We poll: ask the driver not to kick (a worker about to sleep re-enables them).
            let _ = v.q.disable_notification(mem);
        } else {
            v.q.set_ready(false);
            v.started = false;
            self.counters.bad_rings += 1;
        }
        self.generation += 1;
    }
}

impl VhostUserBackendReqHandlerMut for Device {
    fn set_owner(&mut self) -> VuResult<()> {
        Ok(())
    }

    fn reset_owner(&mut self) -> VuResult<()> {
        self.reset();
        Ok(())
    }

    fn reset_device(&mut self) -> VuResult<()> {
        self.reset();
        Ok(())
    }

    fn get_features(&mut self) -> VuResult<u64> {
        Ok(self.offered)
    }

    fn set_features(&mut self, features: u64) -> VuResult<()> {
        if features & !self.offered != 0 {
            return Err(invalid("features not offered"));
        }
        self.acked = features;
        Ok(())
    }

    fn set_mem_table(
        &mut self,
        ctx: &[VhostUserMemoryRegion],
        files: Vec<File>,
        _postcopy_listening: Option<bool>,
    ) -> VuResult<Option<Vec<VhostUserMemoryRegionBase>>> {
        if ctx.is_empty() || ctx.len() > MAX_REGIONS || ctx.len() != files.len() {
            return Err(invalid("memory table: region count"));
        }
        let mut infos = Vec::with_capacity(ctx.len());
        let mut regions = Vec::with_capacity(ctx.len());
        let mut unsealed = 0;
        for (r, file) in ctx.iter().zip(files) {
            let size = r.memory_size;
            if size == 0
                || size > MAX_REGION_BYTES
                || r.guest_phys_addr.checked_add(size).is_none()
                || r.user_addr.checked_add(size).is_none()
            {
                return Err(invalid("memory table: region bounds"));
            }
            let end = r.mmap_offset.checked_add(size).ok_or(invalid("memory table: offset"))?;
            let meta = file.metadata().map_err(|_| invalid("memory table: fstat"))?;
            if meta.len() < end {
                // Touching pages past the end of the file would fault (SIGBUS).
                return Err(invalid("memory table: region beyond the end of its file"));
            }
            keep(&file)?;
            if !sealed_against_shrinking(&file) {
                unsealed += 1;
            }
            let mmap = MmapRegion::from_file(FileOffset::new(file, r.mmap_offset), size as usize)
                .map_err(|_| invalid("memory table: mmap failed"))?;
            let region = GuestRegionMmap::new(mmap, GuestAddress(r.guest_phys_addr))
                .ok_or(invalid("memory table: region wraps"))?;
            regions.push(region);
            infos.push(RegionInfo { gpa: r.guest_phys_addr, size, uva: r.user_addr });
        }
        regions.sort_by_key(vm_memory::GuestMemoryRegion::start_addr);
        let mem = GuestMemoryMmap::from_regions(regions)
            .map_err(|_| invalid("memory table: regions overlap"))?;
        self.counters.unsealed_regions += unsealed;
        self.regions = infos;
        self.mem = Some(mem);
        // Started rings must fit the new memory too.
        for i in 0..self.vrings.len() {
            if self.vrings[i].started {
                self.start(i);
            }
        }
        self.generation += 1;
        Ok(None)
    }

    fn set_vring_num(&mut self, index: u32, num: u32) -> VuResult<()> {
        let v = self.vring(index)?;
        let num = u16::try_from(num).map_err(|_| VuError::InvalidParam)?;
        v.q.try_set_size(num).map_err(|_| VuError::InvalidParam)
    }

    fn set_vring_addr(
        &mut self,
        index: u32,
        _flags: VhostUserVringAddrFlags,
        descriptor: u64,
        used: u64,
        available: u64,
        _log: u64,
    ) -> VuResult<()> {
        self.vring(index)?;
        let size = self.vrings[index as usize].q.size() as u64;
        let desc = self.uva_to_gpa(descriptor, 16 * size).ok_or(VuError::InvalidParam)?;
        let avail = self.uva_to_gpa(available, 6 + 2 * size).ok_or(VuError::InvalidParam)?;
        let used = self.uva_to_gpa(used, 6 + 8 * size).ok_or(VuError::InvalidParam)?;
        let v = &mut self.vrings[index as usize];
        v.q.try_set_desc_table_address(GuestAddress(desc)).map_err(|_| VuError::InvalidParam)?;
        v.q.try_set_avail_ring_address(GuestAddress(avail)).map_err(|_| VuError::InvalidParam)?;
        v.q.try_set_used_ring_address(GuestAddress(used)).map_err(|_| VuError::InvalidParam)?;
        Ok(())
    }

    fn set_vring_base(&mut self, index: u32, base: u32) -> VuResult<()> {
        let v = self.vring(index)?;
        let base = u16::try_from(base).map_err(|_| VuError::InvalidParam)?;
        v.q.set_next_avail(base);
        v.q.set_next_used(base);
        Ok(())
    }

    fn get_vring_base(&mut self, index: u32) -> VuResult<VhostUserVringState> {
        let v = self.vring(index)?;
        // The ring stops here. Bursts run on the same thread as this handler, so none is half
        // done: every chain taken from the avail ring is already on the used ring.
        v.started = false;
        v.kick = None;
        v.q.set_ready(false);
        let next = v.q.next_avail();
        self.generation += 1;
        Ok(VhostUserVringState::new(index, next as u32))
    }

    fn set_vring_kick(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        self.vring(index as u32)?;
        fd.as_ref().map(keep).transpose()?;
        self.vrings[index as usize].kick = fd;
        self.start(index as usize);
        Ok(())
    }

    fn set_vring_call(&mut self, index: u8, fd: Option<File>) -> VuResult<()> {
        fd.as_ref().map(keep).transpose()?;
        self.vring(index as u32)?.call = fd;
        Ok(())
    }

    fn set_vring_err(&mut self, index: u8, _fd: Option<File>) -> VuResult<()> {
        self.vring(index as u32)?;
        Ok(())
    }

    fn get_protocol_features(&mut self) -> VuResult<VhostUserProtocolFeatures> {
        Ok(VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK)
    }

    fn set_protocol_features(&mut self, features: u64) -> VuResult<()> {
        let offered = (VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::REPLY_ACK).bits();
        if features & !offered != 0 {
            return Err(invalid("protocol features not offered"));
        }
        self.acked_protocol = features;
        Ok(())
    }

    fn get_queue_num(&mut self) -> VuResult<u64> {
        Ok(self.pairs as u64)
    }

    fn set_vring_enable(&mut self, index: u32, enable: bool) -> VuResult<()> {
        self.vring(index)?.enabled = enable;
        self.generation += 1;
        Ok(())
    }

    fn get_config(&mut self, _: u32, _: u32, _: VhostUserConfigFlags) -> VuResult<Vec<u8>> {
        Err(invalid("GET_CONFIG not offered"))
    }

    fn set_config(&mut self, _: u32, _: &[u8], _: VhostUserConfigFlags) -> VuResult<()> {
        Err(invalid("SET_CONFIG not offered"))
    }

    fn set_gpu_socket(&mut self, _: GpuBackend) -> VuResult<()> {
        Err(invalid("not a GPU"))
    }

    fn get_shared_object(&mut self, _: VhostUserSharedMsg) -> VuResult<File> {
        Err(invalid("shared objects not offered"))
    }

    fn get_inflight_fd(&mut self, _: &VhostUserInflight) -> VuResult<(VhostUserInflight, File)> {
        Err(invalid("inflight tracking not offered"))
    }

    fn set_inflight_fd(&mut self, _: &VhostUserInflight, _: File) -> VuResult<()> {
        Err(invalid("inflight tracking not offered"))
    }

    fn get_max_mem_slots(&mut self) -> VuResult<u64> {
        Err(invalid("memory slots not offered"))
    }

    fn add_mem_region(
        &mut self,
        _: &VhostUserSingleMemoryRegion,
        _: File,
        _: Option<bool>,
    ) -> VuResult<Option<VhostUserMemoryRegionBase>> {
        Err(invalid("memory slots not offered"))
    }

    fn remove_mem_region(&mut self, _: &VhostUserSingleMemoryRegion) -> VuResult<()> {
        Err(invalid("memory slots not offered"))
    }

    fn set_device_state_fd(
        &mut self,
        _: VhostTransferStateDirection,
        _: VhostTransferStatePhase,
        _: File,
    ) -> VuResult<Option<File>> {
        Err(invalid("device state transfer not offered"))
    }

    fn check_device_state(&mut self) -> VuResult<()> {
        Err(invalid("device state transfer not offered"))
    }

    fn get_shmem_config(&mut self) -> VuResult<VhostUserShMemConfig> {
        Err(invalid("shared memory not offered"))
    }

    fn set_log_base(&mut self, _: &VhostUserLog, _: File) -> VuResult<()> {
        Err(invalid("dirty logging not offered"))
    }
}

/// Readies an fd the frontend sent for keeping: the crate receives fds without
/// `MSG_CMSG_CLOEXEC`, and a control-plane daemon or tool routeplex starts later would otherwise
/// hold the guest's memory and eventfds for its whole life. (A program started between the
/// receive and this call can still inherit one; the crate's receive would have to change.)
fn keep(file: &File) -> VuResult<()> {
    crate::sys::close_on_exec(file).map_err(|_| invalid("fcntl(FD_CLOEXEC) on a received fd"))
}

/// Whether the file behind a region cannot shrink under us (memfd seals).
fn sealed_against_shrinking(file: &File) -> bool {
    // SAFETY: F_GET_SEALS only reads the seals of the fd we own; it fails on non-memfd files.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}
