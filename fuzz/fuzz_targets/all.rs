//! Every parser family on the same bytes (what `tests/no_panic.rs` runs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzz_all(data);
});
