//! IPv6 packets at offset 0: the extension-header walk and what it finds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::ipv6_ext(data);
});
