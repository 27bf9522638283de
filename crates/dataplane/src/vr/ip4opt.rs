//! IPv4 header options on the slow path: validation of every option a packet carries (RFC 791,
//! RFC 1812 §5.2.5), and what a router writes into Record Route and Timestamp when it forwards
//! (RFC 1812 §5.3.13.1, §5.3.13.3).
//!
//! Contract: [`check`] runs on every packet whose IHL is above 5 before it is forwarded or
//! delivered; a packet it rejects is answered with Parameter Problem pointing at the octet it
//! names. [`stamp`] runs only on a header [`check`] accepted, so it indexes without checks of
//! its own beyond those `check` guarantees. Options other than Record Route and Timestamp pass
//! unchanged (their length is still checked).

/// Option types.
const EOL: u8 = 0;
const NOP: u8 = 1;
const RECORD_ROUTE: u8 = 7;
const TIMESTAMP: u8 = 68;
const LOOSE_ROUTE: u8 = 131;
const STRICT_ROUTE: u8 = 137;

/// Timestamp flags (RFC 791): timestamps only, address and timestamp, prespecified addresses.
const TS_ONLY: u8 = 0;
const TS_ADDR: u8 = 1;
const TS_PRESPEC: u8 = 3;

/// Checks the options of header `h` (IHL > 5). On failure, the offset from the start of the
/// header of the octet in error, for the Parameter Problem pointer.
pub(super) fn check(h: &[u8]) -> Result<(), u8> {
    let mut i = wire::ipv4::HEADER_LEN;
    while i < h.len() {
        let kind = h[i];
        match kind {
            EOL => break,
            NOP => {
                i += 1;
                continue;
            }
            _ => {}
        }
        // Every other option has a length octet, counting the type and itself.
        let Some(&len) = h.get(i + 1) else { return Err(i as u8) };
        let len = len as usize;
        if len < 2 || i + len > h.len() {
            return Err((i + 1) as u8);
        }
        let ptr = h.get(i + 2).map(|&p| p as usize);
        match kind {
            RECORD_ROUTE | LOOSE_ROUTE | STRICT_ROUTE => {
                // Type, length, pointer, then 4-octet slots; the pointer counts from the
                // option's first octet and starts at 4. A pointer past the length means full;
                // one inside that leaves no room for a whole address is an error.
                let Some(p) = ptr.filter(|_| len >= 3) else { return Err((i + 1) as u8) };
                if p < 4 || (p <= len && p + 3 > len) {
                    return Err((i + 2) as u8);
                }
            }
            TIMESTAMP => {
                let Some(p) = ptr.filter(|_| len >= 4) else { return Err((i + 1) as u8) };
                if p < 5 {
                    return Err((i + 2) as u8);
                }
                let flags = h[i + 3];
                let entry = match flags & 0x0f {
                    TS_ONLY => 4,
                    TS_ADDR | TS_PRESPEC => 8,
                    _ => return Err((i + 3) as u8),
                };
                if p <= len && p + entry - 1 > len {
                    return Err((i + 2) as u8);
                }
                // RFC 791: when the overflow count itself would overflow, the datagram is in
                // error.
                if p > len && flags >> 4 == 15 {
                    return Err((i + 3) as u8);
                }
            }
            _ => {}
        }
        i += len;
    }
    Ok(())
}

/// Fills in Record Route and Timestamp options of header `h` (accepted by [`check`]) as the
/// router forwarding it: `addr` is the outgoing interface's address, `ts` the timestamp,
/// `own` says whether a prespecified address is one of the router's. A full option is left
/// alone but for the Timestamp overflow count. Returns whether anything changed (the caller
/// then recomputes the header checksum).
pub(super) fn stamp(h: &mut [u8], addr: [u8; 4], ts: u32, own: impl Fn(u32) -> bool) -> bool {
    let mut changed = false;
    let mut i = wire::ipv4::HEADER_LEN;
    while i < h.len() {
        let kind = h[i];
        if kind == EOL {
            break;
        }
        if kind == NOP {
            i += 1;
            continue;
        }
        let len = h[i + 1] as usize;
        match kind {
            RECORD_ROUTE => {
                let p = h[i + 2] as usize;
                if p + 3 <= len {
                    h[i + p - 1..i + p + 3].copy_from_slice(&addr);
                    h[i + 2] += 4;
                    changed = true;
                }
            }
            TIMESTAMP => {
                let (p, flags) = (h[i + 2] as usize, h[i + 3]);
                let at = i + p - 1;
                let ts = ts.to_be_bytes();
                match flags & 0x0f {
                    _ if p > len => {
                        // Full: count the hop that could not register (check() refused an
                        // overflow count that would wrap).
                        h[i + 3] = flags + 0x10;
                        changed = true;
                    }
                    TS_ONLY => {
                        h[at..at + 4].copy_from_slice(&ts);
                        h[i + 2] += 4;
                        changed = true;
                    }
                    TS_ADDR => {
                        h[at..at + 4].copy_from_slice(&addr);
                        h[at + 4..at + 8].copy_from_slice(&ts);
                        h[i + 2] += 8;
                        changed = true;
                    }
                    _ => {
                        let next = u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
                        if own(next) {
                            h[at + 4..at + 8].copy_from_slice(&ts);
                            h[i + 2] += 8;
                            changed = true;
                        }
                    }
                }
            }
            _ => {}
        }
        i += len;
    }
    changed
}

/// The timestamp a router writes: RFC 791 asks for milliseconds since midnight UT; the data
/// plane's clock is monotonic, not UT, so (as RFC 791 allows) the value is its milliseconds
/// modulo a day with the high-order bit set, marking a non-standard time.
pub(super) fn timestamp(now_ns: u64) -> u32 {
    ((now_ns / 1_000_000) % 86_400_000) as u32 | 0x8000_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(opts: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h.extend_from_slice(opts);
        h
    }

    #[test]
    fn check_finds_the_octet_in_error() {
        assert_eq!(check(&hdr(&[1, 1, 1, 0])), Ok(()));
        assert_eq!(check(&hdr(&[0, 0xff, 0xff, 0xff])), Ok(()), "nothing after EOL is read");
        // Length 0xff runs past the header: pointer at the length octet.
        assert_eq!(check(&hdr(&[0x94, 0xff, 0, 0])), Err(21));
        assert_eq!(check(&hdr(&[1, 0x94, 1, 0])), Err(22), "length below 2");
        assert_eq!(check(&hdr(&[1, 1, 1, 0x94])), Err(23), "no length octet");
        assert_eq!(check(&hdr(&[0x94, 4, 0, 0])), Ok(()), "router alert");
        // Record route: pointer below 4, or inside without room for an address.
        assert_eq!(check(&hdr(&[7, 7, 4, 0, 0, 0, 0, 0])), Ok(()));
        assert_eq!(check(&hdr(&[7, 7, 8, 0, 0, 0, 0, 0])), Ok(()), "full");
        assert_eq!(check(&hdr(&[7, 7, 3, 0, 0, 0, 0, 0])), Err(22));
        assert_eq!(check(&hdr(&[7, 8, 6, 0, 0, 0, 0, 0])), Err(22));
        assert_eq!(check(&hdr(&[7, 2, 1, 0])), Err(21), "too short for its pointer");
        // Timestamp: pointer below 5, unknown flag, partial slot, overflow wrapping.
        assert_eq!(check(&hdr(&[68, 8, 5, 0, 0, 0, 0, 0])), Ok(()));
        assert_eq!(check(&hdr(&[68, 8, 4, 0, 0, 0, 0, 0])), Err(22));
        assert_eq!(check(&hdr(&[68, 8, 5, 2, 0, 0, 0, 0])), Err(23));
        assert_eq!(check(&hdr(&[68, 8, 5, 1, 0, 0, 0, 0])), Err(22), "no room for 8 octets");
        assert_eq!(check(&hdr(&[68, 8, 9, 0xe1, 0, 0, 0, 0])), Ok(()), "full, overflow 14");
        assert_eq!(check(&hdr(&[68, 8, 9, 0xf1, 0, 0, 0, 0])), Err(23), "overflow would wrap");
    }

    #[test]
    fn stamp_fills_and_advances() {
        let a = [10, 0, 1, 1];
        let mut h = hdr(&[7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert!(stamp(&mut h, a, 7, |_| false));
        assert_eq!(&h[20..], &[7, 11, 8, 10, 0, 1, 1, 0, 0, 0, 0, 1]);
        assert!(stamp(&mut h, a, 7, |_| false));
        assert_eq!(&h[20..], &[7, 11, 12, 10, 0, 1, 1, 10, 0, 1, 1, 1]);
        assert!(!stamp(&mut h, a, 7, |_| false), "full: unchanged");
        let mut h = hdr(&[68, 12, 5, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(stamp(&mut h, a, 0x8000_0102, |_| false));
        assert_eq!(&h[20..], &[68, 12, 13, 0x01, 10, 0, 1, 1, 0x80, 0, 1, 2]);
        assert!(stamp(&mut h, a, 9, |_| false));
        assert_eq!(h[23], 0x11, "overflow counted");
        let mut h = hdr(&[68, 12, 5, 0x03, 10, 0, 1, 1, 0, 0, 0, 0]);
        assert!(!stamp(&mut h.clone(), a, 9, |_| false), "not our address: unchanged");
        assert!(stamp(&mut h, a, 9, |x| x == 0x0a00_0101));
        assert_eq!(&h[20..], &[68, 12, 13, 0x03, 10, 0, 1, 1, 0, 0, 0, 9]);
    }
}
