//! `ports::fuzzing::vxlan` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/ports` runs
//! the same function on every file of `fuzz/corpus/vxlan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ports::fuzzing::vxlan(data);
});
