//! `fleet::fuzzing::fleet_record` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/fleet` runs
//! the same function on every file of `fuzz/corpus/fleet_record`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fleet::fuzzing::fleet_record(data);
});
