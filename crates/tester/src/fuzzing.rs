//! A scenario file's text, on arbitrary bytes: the entry point of the `scenario` cargo-fuzz
//! target in the workspace's `fuzz/` directory, which routeplex's `tests/it/fuzz_corpus.rs` also runs on every
//! committed corpus file. Not part of the API: hidden from the docs, free to change.

use crate::scenario::Scenario;

/// The targets, by the names of their directories under `fuzz/corpus`.
pub const TARGETS: &[&str] = &["scenario"];

/// Runs target `name` on `data`; false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "scenario" => scenario(data),
        _ => return false,
    }
    true
}

/// A scenario file: parsed and checked, then expanded into the points it runs, quick and full.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = Scenario::parse(text, "fuzz.yaml") {
        std::hint::black_box((s.points(true), s.points(false)));
    }
}

/// Valid inputs of target `name`: its seed corpus.
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "scenario" => [
            include_str!("../../../examples/scenarios/seed000-fig7-flows.yaml"),
            include_str!("../../../examples/scenarios/seed002-cases.yaml"),
            include_str!("../../../examples/scenarios/seed003-migration.yaml"),
            include_str!("../../../examples/scenarios/isolation.yaml"),
        ]
        .map(|t| t.as_bytes().to_vec())
        .to_vec(),
        _ => Vec::new(),
    }
}
