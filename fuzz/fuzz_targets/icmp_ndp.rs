//! ICMPv4, ICMPv6, Neighbor Solicitation/Advertisement and NDP options at offset 0.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::icmp_ndp(data);
});
