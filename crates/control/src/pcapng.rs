//! pcapng, written by hand (<https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html>):
//! a section header, one Ethernet interface description per capture point (nanosecond
//! timestamps), and an enhanced packet block per frame, with its direction in `epb_flags` and
//! a drop reason as an `opt_comment`. `tcpdump -r` and Wireshark read it.

use std::io::{self, Write};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const EPB: u32 = 6;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const LINKTYPE_ETHERNET: u16 = 1;
const OPT_END: u16 = 0;
const OPT_COMMENT: u16 = 1;
const IF_NAME: u16 = 2;
const IF_TSRESOL: u16 = 9;
const EPB_FLAGS: u16 = 2;

/// Which way a frame went, for `epb_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Inbound,
    Outbound,
    Unknown,
}

/// A pcapng stream being written.
pub struct Writer<W: Write> {
    out: W,
    interfaces: u32,
}

fn option(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&(value.len() as u16).to_le_bytes());
    buf.extend_from_slice(value);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

impl<W: Write> Writer<W> {
    /// Starts a section (writes the section header block).
    pub fn new(mut out: W) -> io::Result<Writer<W>> {
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes());
        block(&mut out, SHB, &body)?;
        Ok(Writer { out, interfaces: 0 })
    }

    /// Describes an Ethernet interface called `name`; returns its id for [`Writer::packet`].
    pub fn interface(&mut self, name: &str, snaplen: u32) -> io::Result<u32> {
        let mut body = Vec::new();
        body.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&snaplen.to_le_bytes());
        option(&mut body, IF_NAME, name.as_bytes());
        option(&mut body, IF_TSRESOL, &[9]);
        option(&mut body, OPT_END, &[]);
        block(&mut self.out, IDB, &body)?;
        self.interfaces += 1;
        Ok(self.interfaces - 1)
    }

    /// One frame: `data` (captured bytes) of a frame `len` long on the wire, at `ts_ns`
    /// nanoseconds since the Unix epoch.
    pub fn packet(
        &mut self,
        iface: u32,
        ts_ns: u64,
        len: u32,
        data: &[u8],
        dir: Direction,
        comment: Option<&str>,
    ) -> io::Result<()> {
        let mut body = Vec::with_capacity(data.len() + 64);
        body.extend_from_slice(&iface.to_le_bytes());
        body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(data);
        body.resize(body.len().next_multiple_of(4), 0);
        let flags: u32 = match dir {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
            Direction::Unknown => 0,
        };
        option(&mut body, EPB_FLAGS, &flags.to_le_bytes());
        if let Some(c) = comment {
            option(&mut body, OPT_COMMENT, c.as_bytes());
        }
        option(&mut body, OPT_END, &[]);
        block(&mut self.out, EPB, &body)
    }

    /// Flushes what was written.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

fn block(out: &mut impl Write, kind: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    let mut b = Vec::with_capacity(total as usize);
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&total.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&total.to_le_bytes());
    out.write_all(&b)
}

/// Bytes as lowercase hex (frames in the control API's JSON).
pub fn to_hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

/// The bytes of a hex string, or `None` if it is not one.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let b: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&b)), Some(b));
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }

    #[test]
    fn blocks_are_aligned_and_framed() {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.interface("p0", 2048).unwrap();
        w.packet(0, 1, 3, &[1, 2, 3], Direction::Inbound, Some("why")).unwrap();
        let b = w.out;
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < b.len() {
            let kind = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
            let len = u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
            assert_eq!(len % 4, 0);
            assert_eq!(b[at + len - 4..at + len], b[at + 4..at + 8]);
            kinds.push(kind);
            at += len;
        }
        assert_eq!(kinds, [SHB, IDB, EPB]);
    }
}
