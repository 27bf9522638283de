//! `control::fuzzing::migrate_frames` (see its documentation); `tests/it/fuzz_corpus.rs` in `crates/control` runs
//! the same function on every file of `fuzz/corpus/migrate_frames`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    control::fuzzing::migrate_frames(data);
});
