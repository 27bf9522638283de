//! The XDP half of an AF_XDP port: an `XSKMAP`, a hand-assembled five-instruction program that
//! redirects every frame of the bound queue into it, and a BPF link that attaches the program.
//!
//! Why a link and not netlink (`IFLA_XDP`): a link is a file descriptor; the kernel detaches the
//! program when the last descriptor of the link closes, so a port that is dropped, a process
//! that exits and a process that is SIGKILLed all leave the interface clean. It also refuses to
//! replace a program someone else attached, instead of silently stealing the interface.
//!
//! No libbpf, no clang: the program is six `bpf_insn`s built below.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::{self, Pod};

use super::XdpMode;

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_PROG_LOAD: u32 = 5;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_LINK_CREATE: u32 = 28;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `BPF_F_XDP_HAS_FRAGS`: the program copes with frames in several buffers. Without it, veth
/// refuses driver mode once its peer's MTU passes about 3.5 KB, and multi-buffer frames never
/// reach the socket.
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

pub(super) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub(super) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The name the program shows under in `ip link` and `bpftool`.
pub(super) const PROG_NAME: &[u8] = b"rpx_xsk";

/// `struct bpf_insn`: opcode, dst (low nibble) and src (high nibble) registers, offset, imm.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}
// SAFETY: repr(C), 1 + 1 + 2 + 4 bytes, no padding, integers only.
unsafe impl Pod for Insn {}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);` — frames of a queue with
/// no socket in the map go on to the kernel stack.
fn program(map_fd: i32) -> [Insn; 6] {
    [
        // r2 = *(u32 *)(r1 + offsetof(struct xdp_md, rx_queue_index))
        insn(0x61, 2, 1, 16, 0),
        // r1 = &xsks (ld_imm64, two slots; the loader turns the fd into the map pointer)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0x00, 0, 0, 0, 0),
        // r3 = XDP_PASS: the action when the map has no socket at that index
        insn(0xb7, 3, 0, 0, XDP_PASS),
        // r0 = bpf_redirect_map(r1, r2, r3)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // return r0
        insn(0x95, 0, 0, 0, 0),
    ]
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}
// SAFETY: repr(C), u32s then a byte array: 44 bytes, no padding.
unsafe impl Pod for MapCreateAttr {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}
// SAFETY: repr(C), explicit padding field, 32 bytes.
unsafe impl Pod for MapUpdateAttr {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}
// SAFETY: repr(C), fields laid out at their natural offsets (0..72), no padding.
unsafe impl Pod for ProgLoadAttr {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}
// SAFETY: repr(C), four u32s.
unsafe impl Pod for LinkCreateAttr {}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}
// SAFETY: repr(C), 16 bytes, no padding.
unsafe impl Pod for InfoAttr {}

fn name16(s: &[u8]) -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..s.len().min(15)].copy_from_slice(&s[..s.len().min(15)]);
    n
}

/// Creates the XSKMAP: keys are queue indices, values socket fds.
pub(super) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: name16(b"rpx_xsks"),
        ..Default::default()
    };
    // SAFETY: the attribute holds no pointers; MAP_CREATE returns a map fd.
    unsafe { sys::bpf_fd(BPF_MAP_CREATE, &mut attr) }
}

/// `xsks[queue] = xsk`.
pub(super) fn map_set(map: &OwnedFd, queue: u32, xsk: &OwnedFd) -> io::Result<()> {
    let key = queue;
    let value = xsk.as_raw_fd() as u32;
    let mut attr = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        ..Default::default()
    };
    // SAFETY: key and value point at live u32s on this stack frame for the call.
    unsafe { sys::bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map(drop)
}

/// Loads the redirect program bound to `map`, marked frags-aware when `frags` (the socket was
/// bound with `XDP_USE_SG`). On failure, loads again with the verifier log on and puts its tail
/// in the error, because "Permission denied" alone explains nothing.
pub(super) fn load_program(map: &OwnedFd, frags: bool) -> io::Result<OwnedFd> {
    let insns = program(map.as_raw_fd());
    let license = b"GPL\0";
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name16(PROG_NAME),
        prog_flags: if frags { BPF_F_XDP_HAS_FRAGS } else { 0 },
        expected_attach_type: BPF_XDP,
        ..Default::default()
    };
    // SAFETY: `insns` and `license` live on this stack frame for the call; no log buffer yet.
    // PROG_LOAD returns a program fd.
    match unsafe { sys::bpf_fd(BPF_PROG_LOAD, &mut attr) } {
        Ok(fd) => Ok(fd),
        Err(first) => {
            let mut log = vec![0u8; 64 * 1024];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            // SAFETY: as above, and `log` is a writable buffer of `log_size` bytes.
            let _ = unsafe { sys::bpf_fd(BPF_PROG_LOAD, &mut attr) };
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(4).collect();
            if tail.is_empty() {
                Err(first)
            } else {
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Err(io::Error::new(
                    first.kind(),
                    format!("{first}; verifier: {}", tail.join(" / ")),
                ))
            }
        }
    }
}

/// Attaches `prog` to `ifindex` through a BPF link in the given mode flags.
fn link_create(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    // SAFETY: the attribute holds no pointers; LINK_CREATE returns a link fd.
    unsafe { sys::bpf_fd(BPF_LINK_CREATE, &mut attr) }
}

/// Attaches in the requested mode; `Auto` tries driver mode and falls back to SKB (generic) mode
/// only when driver mode is refused. Returns the link and the mode that is active. The error of
/// a failed `Auto` names both attempts.
pub(super) fn attach(
    prog: &OwnedFd,
    ifindex: u32,
    mode: XdpMode,
) -> io::Result<(OwnedFd, XdpMode)> {
    match mode {
        XdpMode::Driver => link_create(prog, ifindex, XDP_FLAGS_DRV_MODE)
            .map(|l| (l, XdpMode::Driver))
            .map_err(|e| io::Error::new(e.kind(), format!("driver mode: {e}"))),
        XdpMode::Skb => link_create(prog, ifindex, XDP_FLAGS_SKB_MODE)
            .map(|l| (l, XdpMode::Skb))
            .map_err(|e| io::Error::new(e.kind(), format!("skb mode: {e}"))),
        XdpMode::Auto => match link_create(prog, ifindex, XDP_FLAGS_DRV_MODE) {
            Ok(l) => Ok((l, XdpMode::Driver)),
            // Another program holds the interface: SKB mode would only fail with a less clear
            // error ("native and generic XDP can't coexist").
            Err(e) if sys::errno(&e) == libc::EBUSY || sys::errno(&e) == libc::EEXIST => {
                Err(io::Error::new(
                    e.kind(),
                    format!("driver mode: {e} (another XDP program is attached?)"),
                ))
            }
            Err(drv) => link_create(prog, ifindex, XDP_FLAGS_SKB_MODE)
                .map(|l| (l, XdpMode::Skb))
                .map_err(|skb| {
                    io::Error::new(skb.kind(), format!("driver mode: {drv}; skb mode: {skb}"))
                }),
        },
    }
}

/// The kernel's id of a program (what `ip link` prints as `prog/xdp id N`).
pub(super) fn prog_id(prog: &OwnedFd) -> io::Result<u32> {
    // The first two fields of `struct bpf_prog_info` are `type` and `id`.
    let mut info = [0u32; 2];
    let mut attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: `info` is a writable 8-byte buffer on this frame; the kernel writes at most
    // `info_len` bytes.
    unsafe { sys::bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encodes_as_the_kernel_expects() {
        let p = program(7);
        // ldxw r2, [r1 + 16]
        assert_eq!(p[0], Insn { code: 0x61, regs: 0x12, off: 16, imm: 0 });
        // lddw r1, map_fd 7 (src = BPF_PSEUDO_MAP_FD)
        assert_eq!(p[1], Insn { code: 0x18, regs: 0x11, off: 0, imm: 7 });
        assert_eq!(p[2], Insn { code: 0, regs: 0, off: 0, imm: 0 });
        assert_eq!(p[3], Insn { code: 0xb7, regs: 0x03, off: 0, imm: 2 });
        assert_eq!(p[4], Insn { code: 0x85, regs: 0, off: 0, imm: 51 });
        assert_eq!(p[5].code, 0x95);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<MapCreateAttr>(), 44);
    }
}
