//! Every committed corpus file of tester's fuzz targets (`fuzz/corpus/TARGET/`, seeds and any
//! input that once failed), run through the target's own code (`tester::fuzzing`) on stable
//! Rust, so each `cargo test` replays them. `cargo test -p tester --test fuzz_corpus --
//! --ignored write_seed_corpus` rewrites the seed files (`seed-N`) from `fuzzing::seeds`.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

#[test]
fn every_corpus_file_decodes_as_the_fuzz_target_does() {
    for &t in tester::fuzzing::TARGETS {
        let dir = corpus(t);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no corpus files", dir.display());
        for f in files {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            eprintln!("{t}: {}", f.display());
            assert!(tester::fuzzing::run(t, &data), "unknown target {t}");
        }
    }
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-N; run by hand after changing fuzzing::seeds"]
fn write_seed_corpus() {
    for &t in tester::fuzzing::TARGETS {
        let dir = corpus(t);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in tester::fuzzing::seeds(t).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
        }
    }
}
