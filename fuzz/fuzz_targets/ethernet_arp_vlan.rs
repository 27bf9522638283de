//! Ethernet frames walked through VLAN tags, IP and the upper layers; VLAN tags and ARP at offset 0.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::ethernet_arp_vlan(data);
});
