//! UDP and TCP at offset 0, with IPv4, IPv6 and mismatched address pairs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::udp_tcp(data);
});
