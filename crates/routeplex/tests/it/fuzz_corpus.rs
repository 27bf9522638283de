//! Every committed corpus file of the fuzz targets of control, ports, tester and fleet
//! (`fuzz/corpus/TARGET/`: seeds and any input that once failed), run through the target's own
//! code (each crate's hidden `fuzzing` module) on stable Rust, so each `cargo test` replays
//! them. `cargo test -p routeplex --test it fuzz_corpus::write_seed_corpus -- --ignored` rewrites
//! the seed files (`seed-N`) from each crate's `fuzzing::seeds`. (wire's targets are replayed
//! by `wire/tests/no_panic.rs`.)

use std::path::{Path, PathBuf};

/// Per crate: its targets, the function a target runs, and its seeds.
type Fuzzing = (&'static [&'static str], fn(&str, &[u8]) -> bool, fn(&str) -> Vec<Vec<u8>>);

const CRATES: [(&str, Fuzzing); 4] = [
    ("control", (control::fuzzing::TARGETS, control::fuzzing::run, control::fuzzing::seeds)),
    ("ports", (ports::fuzzing::TARGETS, ports::fuzzing::run, ports::fuzzing::seeds)),
    ("tester", (tester::fuzzing::TARGETS, tester::fuzzing::run, tester::fuzzing::seeds)),
    ("fleet", (fleet::fuzzing::TARGETS, fleet::fuzzing::run, fleet::fuzzing::seeds)),
];

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
}

#[test]
fn every_corpus_file_decodes_as_the_fuzz_target_does() {
    for (krate, (targets, run, _)) in CRATES {
        for &t in targets {
            let dir = corpus(t);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .map(|e| e.expect("directory entry").path())
                .collect();
            files.sort();
            assert!(!files.is_empty(), "{}: no corpus files", dir.display());
            for f in files {
                let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                eprintln!("{krate} {t}: {}", f.display());
                assert!(run(t, &data), "{krate}: unknown target {t}");
            }
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
#[ignore = "writes fuzz/corpus/*/seed-N; run by hand after changing a crate's fuzzing::seeds"]
fn write_seed_corpus() {
    for (_, (targets, _, seeds)) in CRATES {
        for &t in targets {
            let dir = corpus(t);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in seeds(t).iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
            }
        }
    }
}
