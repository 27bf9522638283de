//! `control::fuzzing::checkpoint` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/control` runs
//! the same function on every file of `fuzz/corpus/checkpoint`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    control::fuzzing::checkpoint(data);
});
