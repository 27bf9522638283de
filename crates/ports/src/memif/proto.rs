//! The memif wire format: control messages, shared-memory layout, and the pure checks applied to
//! everything a peer writes.
//!
//! Contract:
//! - Byte-exact with VPP `memif.h` and DPDK 22.11 `drivers/net/memif/memif.h` on x86_64 (64-byte
//!   cache lines): every control message is 128 bytes, a packed `u16` type at offset 0 and the
//!   body at offset 2; a ring is a 128-byte header (`cookie@0 flags@4 head@6 | tail@64`) followed
//!   by 16-byte descriptors (`flags@0 region@2 length@4 offset@8 metadata@12`). All integers are
//!   little-endian (both implementations write native x86 order).
//! - Nothing here touches memory or sockets. [`Msg::decode`] accepts any 128 bytes and either
//!   returns a message whose fields are exactly the bytes, or an error; it never panics. The range
//!   checks that depend on the connection (indices in order, ring inside its region...) are in
//!   [`Desc::check`], [`pending`] and the port's handshake, so that each can be unit-tested.

use std::fmt;

/// Every ring header starts with this value; a server refuses rings that do not.
pub const COOKIE: u32 = 0x03E3_1F20;
/// Protocol version 2.0, the only one VPP and DPDK speak.
pub const VERSION: u16 = 0x0200;
/// Size of every control message.
pub const MSG_SIZE: usize = 128;
/// Bytes of the shared secret field (NUL-padded).
pub const SECRET_SIZE: usize = 24;
/// Bytes of the name fields (NUL-padded).
pub const NAME_SIZE: usize = 32;
/// Bytes of the DISCONNECT reason (NUL-padded).
pub const REASON_SIZE: usize = 96;
/// The largest ring either implementation accepts: 16384 slots.
pub const MAX_LOG2_RING_SIZE: u8 = 14;

/// Size of the ring header, before the descriptors.
pub const RING_HEADER_SIZE: usize = 128;
/// Size of one descriptor.
pub const DESC_SIZE: usize = 16;
/// Byte offsets inside a ring header.
pub mod ring_off {
    /// `u32 cookie`.
    pub const COOKIE: usize = 0;
    /// `u16 flags` ([`super::RING_FLAG_MASK_INT`]), written by the ring's receiver.
    pub const FLAGS: usize = 4;
    /// `u16 head`, written only by the client.
    pub const HEAD: usize = 6;
    /// `u16 tail`, written only by the server (its own cache line).
    pub const TAIL: usize = 64;
}
/// Byte offsets inside a descriptor.
pub mod desc_off {
    /// `u16 flags` ([`super::DESC_FLAG_NEXT`]).
    pub const FLAGS: usize = 0;
    /// `u16 region`.
    pub const REGION: usize = 2;
    /// `u32 length`.
    pub const LENGTH: usize = 4;
    /// `u32 offset` into the region.
    pub const OFFSET: usize = 8;
    /// `u32 metadata`, unused in ethernet mode.
    pub const METADATA: usize = 12;
}
/// Ring flag: the receiver polls; the transmitter need not signal the eventfd.
pub const RING_FLAG_MASK_INT: u16 = 1;
/// Descriptor flag: the packet continues in the next slot.
pub const DESC_FLAG_NEXT: u16 = 1;
/// ADD_RING flag: the ring carries client-to-server traffic (VPP's S2M, DPDK's C2S).
pub const ADD_RING_FLAG_C2S: u16 = 1;

/// Message type numbers.
pub mod msg_type {
    /// Reserved, never valid.
    pub const NONE: u16 = 0;
    /// Acknowledges INIT, ADD_REGION, ADD_RING.
    pub const ACK: u16 = 1;
    /// Server's greeting and limits.
    pub const HELLO: u16 = 2;
    /// Client's identification.
    pub const INIT: u16 = 3;
    /// A shared-memory region (with its fd).
    pub const ADD_REGION: u16 = 4;
    /// A ring (with its eventfd).
    pub const ADD_RING: u16 = 5;
    /// Client is done describing.
    pub const CONNECT: u16 = 6;
    /// Server mapped everything.
    pub const CONNECTED: u16 = 7;
    /// Either side gives up, with a reason.
    pub const DISCONNECT: u16 = 8;
}

/// Size in bytes of one ring of `1 << log2` slots, header included.
pub const fn ring_bytes(log2: u8) -> usize {
    RING_HEADER_SIZE + (DESC_SIZE << log2)
}

/// The server's HELLO: what it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Free-form name (DPDK sends its version string).
    pub name: [u8; NAME_SIZE],
    /// Lowest protocol version spoken.
    pub min_version: u16,
    /// Highest protocol version spoken.
    pub max_version: u16,
    /// Highest region index accepted.
    pub max_region: u16,
    /// Highest server-to-client ring index accepted (VPP `max_m2s_ring`).
    pub max_s2c_ring: u16,
    /// Highest client-to-server ring index accepted (VPP `max_s2m_ring`).
    pub max_c2s_ring: u16,
    /// Largest ring, as log2 of the slot count.
    pub max_log2_ring_size: u8,
}

/// The client's INIT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Init {
    /// Protocol version the client speaks.
    pub version: u16,
    /// Interface id the client wants on this socket.
    pub id: u32,
    /// 0 ethernet, 1 ip, 2 punt/inject.
    pub mode: u8,
    /// Shared secret, NUL-padded.
    pub secret: [u8; SECRET_SIZE],
    /// Client's name.
    pub name: [u8; NAME_SIZE],
}

/// ADD_RING: one ring, in a region the client already announced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddRing {
    /// [`ADD_RING_FLAG_C2S`] or 0.
    pub flags: u16,
    /// Index among the rings of the same direction.
    pub index: u16,
    /// Region that holds the ring.
    pub region: u16,
    /// Offset of the ring header in that region.
    pub offset: u32,
    /// log2 of the slot count.
    pub log2_ring_size: u8,
    /// Bytes of private header before the ring (VPP requires 0; so do we).
    pub private_hdr_size: u16,
}

/// One control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// ACK.
    Ack,
    /// HELLO.
    Hello(Hello),
    /// INIT.
    Init(Init),
    /// ADD_REGION (the memfd travels as SCM_RIGHTS).
    AddRegion {
        /// Region index: 0, 1, ... in order.
        index: u16,
        /// Region size in bytes.
        size: u64,
    },
    /// ADD_RING (the eventfd travels as SCM_RIGHTS).
    AddRing(AddRing),
    /// CONNECT.
    Connect {
        /// Client interface name.
        if_name: [u8; NAME_SIZE],
    },
    /// CONNECTED.
    Connected {
        /// Server interface name.
        if_name: [u8; NAME_SIZE],
    },
    /// DISCONNECT.
    Disconnect {
        /// Error code (informational).
        code: u32,
        /// Reason, NUL-padded.
        reason: [u8; REASON_SIZE],
    },
}

/// A control message that could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// The datagram was not 128 bytes long.
    Size(usize),
    /// An unknown (or NONE) message type.
    Type(u16),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Size(n) => write!(f, "invalid message size {n} (expected {MSG_SIZE})"),
            ProtoError::Type(t) => write!(f, "unknown message type {t}"),
        }
    }
}

/// Copies `s` into a NUL-padded fixed field, truncated so that at least one NUL remains (as
/// `strlcpy` does on both C sides).
pub fn fixed<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s[..n]);
    out
}

/// Copies `s` into a fixed field, NUL-padded but without a forced NUL: a secret may fill all
/// 24 bytes.
pub fn fixed_exact<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s[..n]);
    out
}

/// The text of a NUL-padded field, up to the first NUL, with invalid UTF-8 and control
/// characters replaced: peer-supplied, so fit for logs and status lines only.
pub fn text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn get<const N: usize>(b: &[u8; MSG_SIZE], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("field inside the message")
}
fn u16_at(b: &[u8; MSG_SIZE], at: usize) -> u16 {
    u16::from_le_bytes(get(b, at))
}
fn u32_at(b: &[u8; MSG_SIZE], at: usize) -> u32 {
    u32::from_le_bytes(get(b, at))
}

impl Msg {
    /// The type number.
    pub fn type_id(&self) -> u16 {
        match self {
            Msg::Ack => msg_type::ACK,
            Msg::Hello(_) => msg_type::HELLO,
            Msg::Init(_) => msg_type::INIT,
            Msg::AddRegion { .. } => msg_type::ADD_REGION,
            Msg::AddRing(_) => msg_type::ADD_RING,
            Msg::Connect { .. } => msg_type::CONNECT,
            Msg::Connected { .. } => msg_type::CONNECTED,
            Msg::Disconnect { .. } => msg_type::DISCONNECT,
        }
    }

    /// A DISCONNECT carrying `reason` (truncated to 95 bytes).
    pub fn disconnect(reason: &str) -> Msg {
        Msg::Disconnect { code: 0, reason: fixed(reason.as_bytes()) }
    }

    /// The 128 bytes on the wire.
    pub fn encode(&self) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        b[0..2].copy_from_slice(&self.type_id().to_le_bytes());
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        match self {
            Msg::Ack => {}
            Msg::Hello(h) => {
                put(2, &h.name);
                put(34, &h.min_version.to_le_bytes());
                put(36, &h.max_version.to_le_bytes());
                put(38, &h.max_region.to_le_bytes());
                put(40, &h.max_s2c_ring.to_le_bytes());
                put(42, &h.max_c2s_ring.to_le_bytes());
                put(44, &[h.max_log2_ring_size]);
            }
            Msg::Init(i) => {
                put(2, &i.version.to_le_bytes());
                put(4, &i.id.to_le_bytes());
                put(8, &[i.mode]);
                put(9, &i.secret);
                put(33, &i.name);
            }
            Msg::AddRegion { index, size } => {
                put(2, &index.to_le_bytes());
                put(4, &size.to_le_bytes());
            }
            Msg::AddRing(r) => {
                put(2, &r.flags.to_le_bytes());
                put(4, &r.index.to_le_bytes());
                put(6, &r.region.to_le_bytes());
                put(8, &r.offset.to_le_bytes());
                put(12, &[r.log2_ring_size]);
                put(13, &r.private_hdr_size.to_le_bytes());
            }
            Msg::Connect { if_name } | Msg::Connected { if_name } => put(2, if_name),
            Msg::Disconnect { code, reason } => {
                put(2, &code.to_le_bytes());
                put(6, reason);
            }
        }
        b
    }

    /// Decodes one received datagram. Any content is accepted field by field; only the size and
    /// the type can make it fail.
    pub fn decode(bytes: &[u8]) -> Result<Msg, ProtoError> {
        let b: &[u8; MSG_SIZE] = bytes.try_into().map_err(|_| ProtoError::Size(bytes.len()))?;
        Ok(match u16_at(b, 0) {
            msg_type::ACK => Msg::Ack,
            msg_type::HELLO => Msg::Hello(Hello {
                name: get(b, 2),
                min_version: u16_at(b, 34),
                max_version: u16_at(b, 36),
                max_region: u16_at(b, 38),
                max_s2c_ring: u16_at(b, 40),
                max_c2s_ring: u16_at(b, 42),
                max_log2_ring_size: b[44],
            }),
            msg_type::INIT => Msg::Init(Init {
                version: u16_at(b, 2),
                id: u32_at(b, 4),
                mode: b[8],
                secret: get(b, 9),
                name: get(b, 33),
            }),
            msg_type::ADD_REGION => {
                Msg::AddRegion { index: u16_at(b, 2), size: u64::from_le_bytes(get(b, 4)) }
            }
            msg_type::ADD_RING => Msg::AddRing(AddRing {
                flags: u16_at(b, 2),
                index: u16_at(b, 4),
                region: u16_at(b, 6),
                offset: u32_at(b, 8),
                log2_ring_size: b[12],
                private_hdr_size: u16_at(b, 13),
            }),
            msg_type::CONNECT => Msg::Connect { if_name: get(b, 2) },
            msg_type::CONNECTED => Msg::Connected { if_name: get(b, 2) },
            msg_type::DISCONNECT => Msg::Disconnect { code: u32_at(b, 2), reason: get(b, 6) },
            t => return Err(ProtoError::Type(t)),
        })
    }
}

/// One descriptor, as read (once) from shared memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// [`DESC_FLAG_NEXT`] or 0.
    pub flags: u16,
    /// Region index.
    pub region: u16,
    /// Bytes of data (or, on a posted server-to-client slot, the buffer's capacity).
    pub length: u32,
    /// Offset of the buffer in the region.
    pub offset: u32,
}

/// Why a descriptor was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescError {
    /// Region index not below the number of regions received.
    Region,
    /// `offset + length` past the end of the region.
    Bounds,
    /// Length above the largest segment accepted.
    Length,
}

impl Desc {
    /// Decodes the 16 descriptor bytes (metadata ignored).
    pub fn from_bytes(b: &[u8; DESC_SIZE]) -> Desc {
        let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        Desc {
            flags: u16_at(desc_off::FLAGS),
            region: u16_at(desc_off::REGION),
            length: u32_at(desc_off::LENGTH),
            offset: u32_at(desc_off::OFFSET),
        }
    }

    /// The 16 descriptor bytes, metadata 0.
    pub fn to_bytes(&self) -> [u8; DESC_SIZE] {
        let mut b = [0u8; DESC_SIZE];
        b[desc_off::FLAGS..][..2].copy_from_slice(&self.flags.to_le_bytes());
        b[desc_off::REGION..][..2].copy_from_slice(&self.region.to_le_bytes());
        b[desc_off::LENGTH..][..4].copy_from_slice(&self.length.to_le_bytes());
        b[desc_off::OFFSET..][..4].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// True if the packet continues in the next slot.
    pub fn has_next(&self) -> bool {
        self.flags & DESC_FLAG_NEXT != 0
    }

    /// Checks that the buffer `[offset, offset + length)` lies inside region `region`, given the
    /// sizes of the regions received, and that `length <= max_len`. Returns the byte range to
    /// access. Arithmetic is done in `u64`, so no combination of fields can wrap.
    pub fn check(&self, region_sizes: &[usize], max_len: u32) -> Result<(usize, usize), DescError> {
        let size = *region_sizes.get(self.region as usize).ok_or(DescError::Region)?;
        if self.length > max_len {
            return Err(DescError::Length);
        }
        let end = self.offset as u64 + self.length as u64;
        if end > size as u64 {
            return Err(DescError::Bounds);
        }
        Ok((self.offset as usize, self.length as usize))
    }
}

/// How many slots lie between two free-running `u16` ring counters, `behind` (the reader's
/// position) and `ahead` (the writer's), or `None` if that is more than `limit`: a peer moved its
/// counter backwards or further than the ring allows. The subtraction wraps at 2^16, as the
/// counters do; since rings hold at most 2^14 slots, a jump backwards shows up as a huge count.
pub fn pending(ahead: u16, behind: u16, limit: u16) -> Option<u16> {
    let n = ahead.wrapping_sub(behind);
    (n <= limit).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte fixtures laid out by hand from interfaces.md §1.3 (offsets measured with gcc on
    /// vpp memif.h): type at 0, union at 2.
    fn fixture(ty: u16, body: &[(usize, &[u8])]) -> [u8; MSG_SIZE] {
        let mut b = [0u8; MSG_SIZE];
        b[0..2].copy_from_slice(&ty.to_le_bytes());
        for (at, bytes) in body {
            b[2 + at..2 + at + bytes.len()].copy_from_slice(bytes);
        }
        b
    }

    fn roundtrip(m: Msg, wire: [u8; MSG_SIZE]) {
        assert_eq!(m.encode(), wire, "encode {m:?}");
        assert_eq!(Msg::decode(&wire).unwrap(), m, "decode");
    }

    #[test]
    fn hello_layout() {
        let name = fixed(b"DPDK 22.11.11");
        let wire = fixture(
            2,
            &[
                (0, &name),
                (32, &[0x00, 0x02]),
                (34, &[0x00, 0x02]),
                (36, &[0xff, 0x00]),
                (38, &[0x07, 0x00]),
                (40, &[0x03, 0x00]),
                (42, &[14]),
            ],
        );
        roundtrip(
            Msg::Hello(Hello {
                name,
                min_version: 0x200,
                max_version: 0x200,
                max_region: 255,
                max_s2c_ring: 7,
                max_c2s_ring: 3,
                max_log2_ring_size: 14,
            }),
            wire,
        );
    }

    #[test]
    fn init_layout() {
        let secret = fixed(b"s3cret");
        let name = fixed(b"client");
        let wire = fixture(
            3,
            &[
                (0, &[0x00, 0x02]),
                (2, &[0x78, 0x56, 0x34, 0x12]),
                (6, &[0]),
                (7, &secret),
                (31, &name),
            ],
        );
        roundtrip(Msg::Init(Init { version: 0x200, id: 0x1234_5678, mode: 0, secret, name }), wire);
    }

    #[test]
    fn region_ring_connect_disconnect_layouts() {
        roundtrip(
            Msg::AddRegion { index: 1, size: 0x0102_0304_0506_0708 },
            fixture(4, &[(0, &[1, 0]), (2, &[8, 7, 6, 5, 4, 3, 2, 1])]),
        );
        roundtrip(
            Msg::AddRing(AddRing {
                flags: ADD_RING_FLAG_C2S,
                index: 2,
                region: 0,
                offset: 0x0001_0000,
                log2_ring_size: 10,
                private_hdr_size: 0,
            }),
            fixture(
                5,
                &[
                    (0, &[1, 0]),
                    (2, &[2, 0]),
                    (4, &[0, 0]),
                    (6, &[0, 0, 1, 0]),
                    (10, &[10]),
                    (11, &[0, 0]),
                ],
            ),
        );
        let n = fixed(b"net_memif0");
        roundtrip(Msg::Connect { if_name: n }, fixture(6, &[(0, &n)]));
        roundtrip(Msg::Connected { if_name: n }, fixture(7, &[(0, &n)]));
        roundtrip(Msg::Ack, fixture(1, &[]));
        let d = Msg::disconnect("Incorrect secret");
        roundtrip(d, fixture(8, &[(0, &[0, 0, 0, 0]), (4, b"Incorrect secret")]));
    }

    #[test]
    fn decode_rejects_sizes_and_types() {
        assert_eq!(Msg::decode(&[0u8; 127]), Err(ProtoError::Size(127)));
        assert_eq!(Msg::decode(&[0u8; 129]), Err(ProtoError::Size(129)));
        assert_eq!(Msg::decode(&[0u8; 128]), Err(ProtoError::Type(0)));
        assert_eq!(Msg::decode(&fixture(9, &[])), Err(ProtoError::Type(9)));
        assert_eq!(Msg::decode(&fixture(0xffff, &[])), Err(ProtoError::Type(0xffff)));
    }

    #[test]
    fn fixed_fields_truncate_and_text_sanitises() {
        let f: [u8; 4] = fixed(b"abcdef");
        assert_eq!(&f, b"abc\0");
        assert_eq!(text(b"ab\x07c\0zz"), "ab?c");
        assert_eq!(text(&[0xff, b'a']), "\u{fffd}a");
        assert_eq!(text(b"full"), "full");
    }

    #[test]
    fn ring_size_matches_dpdk() {
        // DPDK: sizeof(memif_ring_t) + sizeof(memif_desc_t) * (1 << log2), with a 128-byte header.
        assert_eq!(ring_bytes(0), 144);
        assert_eq!(ring_bytes(10), 128 + 16 * 1024);
        assert_eq!(ring_bytes(14), 128 + 16 * 16384);
    }

    #[test]
    fn descriptor_layout() {
        let d = Desc { flags: DESC_FLAG_NEXT, region: 2, length: 0x0102_0304, offset: 0x0a0b_0c0d };
        let wire = [1, 0, 2, 0, 4, 3, 2, 1, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0];
        assert_eq!(d.to_bytes(), wire);
        let mut with_meta = wire;
        with_meta[12..].copy_from_slice(&[9, 9, 9, 9]);
        assert_eq!(Desc::from_bytes(&with_meta), d);
        assert!(d.has_next());
    }

    #[test]
    fn descriptor_checks() {
        let sizes = [4096usize, 100];
        let d = |region, offset, length| Desc { flags: 0, region, length, offset };
        assert_eq!(d(0, 2048, 2048).check(&sizes, 2048), Ok((2048, 2048)));
        assert_eq!(d(0, 0, 0).check(&sizes, 2048), Ok((0, 0)));
        assert_eq!(d(1, 99, 1).check(&sizes, 2048), Ok((99, 1)));
        assert_eq!(d(0, 2049, 2048).check(&sizes, 2048), Err(DescError::Bounds));
        assert_eq!(d(1, 100, 1).check(&sizes, 2048), Err(DescError::Bounds));
        assert_eq!(d(2, 0, 1).check(&sizes, 2048), Err(DescError::Region));
        assert_eq!(d(7, 0, 1).check(&sizes, 2048), Err(DescError::Region));
        assert_eq!(d(0, 0, 2049).check(&sizes, 2048), Err(DescError::Length));
        assert_eq!(d(0, 0, 65535).check(&sizes, 2048), Err(DescError::Length));
        // offset + length would wrap a u32: still refused.
        assert_eq!(d(0, u32::MAX, 2).check(&sizes, u32::MAX), Err(DescError::Bounds));
        assert_eq!(d(0, 1, u32::MAX).check(&sizes, u32::MAX), Err(DescError::Bounds));
        assert!(d(0, 0, 0).check(&[], 2048).is_err());
    }

    #[test]
    fn counters_wrap_at_u16() {
        assert_eq!(pending(5, 0, 1024), Some(5));
        assert_eq!(pending(3, 65533, 1024), Some(6));
        assert_eq!(pending(0, 65535, 1), Some(1));
        assert_eq!(pending(1024, 0, 1024), Some(1024));
        assert_eq!(pending(1025, 0, 1024), None);
        // Backwards by one is 65535 ahead: refused.
        assert_eq!(pending(9, 10, 1024), None);
        assert_eq!(pending(65535, 0, 16384), None);
        assert_eq!(pending(7, 7, 0), Some(0));
        assert_eq!(pending(8, 7, 0), None);
    }
}
