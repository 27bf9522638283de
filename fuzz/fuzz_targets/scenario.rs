//! `tester::fuzzing::scenario` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/tester` runs
//! the same function on every file of `fuzz/corpus/scenario`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tester::fuzzing::scenario(data);
});
