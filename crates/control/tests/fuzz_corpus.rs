//! Every committed corpus file of control's fuzz targets (`fuzz/corpus/TARGET/`, seeds and any
//! input that once failed), run through the target's own code (`control::fuzzing`) on stable
//! Rust, so each `cargo test` replays them. `cargo test -p control --test fuzz_corpus --
//! --ignored write_seed_corpus` rewrites the seed files (`seed-N`) from `fuzzing::seeds`.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

#[test]
fn every_corpus_file_decodes_as_the_fuzz_target_does() {
    for &t in control::fuzzing::TARGETS {
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
            assert!(control::fuzzing::run(t, &data), "unknown target {t}");
        }
    }
}

#[test]
fn every_seed_is_accepted_where_it_should_be() {
    // Seeds are valid inputs: the decoders must take them, or the corpus tests little.
    let snap = &control::fuzzing::seeds("snapshot")[0];
    assert!(control::snapshot::decode("seed", snap).is_ok());
    for line in control::fuzzing::seeds("api_request") {
        control::api::parse_request(&line).expect("seed request parses");
    }
    for t in control::fuzzing::seeds("topology") {
        let text = std::str::from_utf8(&t).unwrap();
        control::Topology::parse(text, "seed.yaml", Path::new("/nonexistent"))
            .expect("seed parses");
    }
}

#[test]
#[ignore = "writes fuzz/corpus/*/seed-N; run by hand after changing fuzzing::seeds"]
fn write_seed_corpus() {
    for &t in control::fuzzing::TARGETS {
        let dir = corpus(t);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in control::fuzzing::seeds(t).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
        }
    }
}
