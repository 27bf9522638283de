//! IPv4 packets at offset 0 and what they carry (ICMP with quoted headers, UDP, TCP).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::ipv4(data);
});
