//! `control::fuzzing::journal` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/control` runs
//! the same function on every file of `fuzz/corpus/journal`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    control::fuzzing::journal(data);
});
