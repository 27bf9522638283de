//! Ethernet and 802.1Q framing shared by classification and egress.

use ports::PktBuf;
use wire::{ethernet, ethertype, vlan, MacAddr};

/// Length of an untagged Ethernet header.
pub(crate) const ETH_LEN: usize = ethernet::HEADER_LEN;
/// Length of an 802.1Q-tagged Ethernet header.
pub(crate) const ETH_VLAN_LEN: usize = ETH_LEN + vlan::HEADER_LEN;

/// The parts of an L2 header classification needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct L2 {
    pub dst: MacAddr,
    /// VLAN id, 0 for untagged and priority-tagged frames.
    pub vlan: u16,
    pub ethertype: u16,
    /// Offset of the L3 header in the frame.
    pub l3: usize,
}

/// Parses the Ethernet header and at most one 802.1Q tag; `None` for a runt.
#[inline]
pub(crate) fn parse(f: &[u8]) -> Option<L2> {
    // Raw bytes after the length checks: every frame passes here, and through the views
    // (`ethernet::Frame`, `vlan::Tag`) it measured one more instruction a frame.
    if f.len() < ETH_LEN {
        return None;
    }
    let dst = MacAddr::from_bytes(f);
    let et = u16::from_be_bytes([f[12], f[13]]);
    if et != ethertype::VLAN {
        return Some(L2 { dst, vlan: 0, ethertype: et, l3: ETH_LEN });
    }
    if f.len() < ETH_VLAN_LEN {
        return None;
    }
    let vlan = u16::from_be_bytes([f[14], f[15]]) & 0x0fff;
    Some(L2 { dst, vlan, ethertype: u16::from_be_bytes([f[16], f[17]]), l3: ETH_VLAN_LEN })
}

/// Rewrites the L2 header in front of the L3 packet at `l3` for egress: `dst`, `src`, the
/// egress VLAN tag (if any) and `ethertype`. Grows or shrinks the header as the tag requires and
/// returns the new L3 offset.
#[inline]
pub(crate) fn write(
    buf: &mut PktBuf,
    l3: usize,
    vlan: Option<u16>,
    dst: MacAddr,
    src: MacAddr,
    et: u16,
) -> usize {
    let l2 = if vlan.is_some() { ETH_VLAN_LEN } else { ETH_LEN };
    if l2 > l3 && !buf.push_front(l2 - l3) {
        make_headroom(buf, l2 - l3);
    } else if l2 < l3 {
        buf.pull_front(l3 - l2);
    }
    let mut eth = ethernet::Frame::new_unchecked(buf.frame_mut());
    eth.set_dst_addr(dst);
    eth.set_src_addr(src);
    match vlan {
        Some(vid) => {
            eth.set_ethertype(ethertype::VLAN);
            let mut tag = vlan::Tag::new_unchecked(eth.payload_mut());
            tag.set_tci(vid & 0x0fff);
            tag.set_inner_ethertype(et);
        }
        None => eth.set_ethertype(et),
    }
    l2
}

/// Puts a prepared L2 header in front of the L3 packet at `l3`, growing or shrinking the
/// frame's front as needed.
#[inline]
pub(crate) fn put(buf: &mut PktBuf, l3: usize, hdr: &[u8]) {
    let l2 = hdr.len();
    if l2 > l3 && !buf.push_front(l2 - l3) {
        make_headroom(buf, l2 - l3);
    } else if l2 < l3 {
        buf.pull_front(l3 - l2);
    }
    buf.frame_mut()[..l2].copy_from_slice(hdr);
}

/// Sets the destination MAC of a frame whose L2 header was written with a placeholder.
#[inline]
pub(crate) fn set_dst(buf: &mut PktBuf, dst: MacAddr) {
    buf.frame_mut()[0..6].copy_from_slice(dst.as_bytes());
}

/// Slow path for buffers a backend filled at offset 0: move the frame back to the headroom.
#[cold]
fn make_headroom(buf: &mut PktBuf, n: usize) {
    let (len, off) = (buf.len(), buf.offset());
    let (storage, _) = buf.storage_mut();
    let to = ports::HEADROOM.max(n);
    storage.copy_within(off..off + len, to);
    buf.set_window(to - n, len + n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tagged: bool) -> Vec<u8> {
        let mut f = vec![0xaa; 6];
        f.extend([0xbb; 6]);
        if tagged {
            f.extend([0x81, 0x00, 0x20, 0x0a]);
        }
        f.extend([0x08, 0x00, 0x45, 0x00]);
        f
    }

    #[test]
    fn parse_plain_tagged_and_runts() {
        let l2 = parse(&frame(false)).unwrap();
        assert_eq!((l2.vlan, l2.ethertype, l2.l3), (0, 0x0800, 14));
        let l2 = parse(&frame(true)).unwrap();
        assert_eq!((l2.vlan, l2.ethertype, l2.l3), (10, 0x0800, 18));
        assert_eq!(l2.dst, MacAddr([0xaa; 6]));
        assert!(parse(&frame(false)[..13]).is_none());
        assert!(parse(&frame(true)[..17]).is_none());
    }

    #[test]
    fn write_pushes_pops_and_rewrites_tags() {
        let (d, s) = (MacAddr([1; 6]), MacAddr([2; 6]));
        for (tagged_in, vlan_out) in
            [(false, None), (false, Some(7)), (true, None), (true, Some(9))]
        {
            let mut b = PktBuf::new();
            b.fill(&frame(tagged_in));
            let l3_in = if tagged_in { 18 } else { 14 };
            let l3 = write(&mut b, l3_in, vlan_out, d, s, 0x0800);
            let f = b.frame();
            assert_eq!(&f[l3..], &[0x45, 0x00]);
            let l2 = parse(f).unwrap();
            assert_eq!(l2.vlan, vlan_out.unwrap_or(0));
            assert_eq!((l2.l3, l2.ethertype, l2.dst), (l3, 0x0800, d));
            assert_eq!(&f[6..12], &[2; 6]);
        }
        let mut b = PktBuf::new();
        b.set_window(0, 0);
        let (st, _) = b.storage_mut();
        st[..16].copy_from_slice(&frame(false));
        b.set_window(0, 16);
        let l3 = write(&mut b, 14, Some(5), d, s, 0x86dd);
        assert_eq!(&b.frame()[l3..], &[0x45, 0x00]);
    }
}
