//! The fuzz targets of control, ports, tester and fleet, run in the workspace's own build (no
//! second compile): every committed corpus file (`fuzz/corpus/TARGET/`: seeds and any input that
//! once failed) through the target's own code (each crate's hidden `fuzzing` module), then a
//! bounded run of seeded mutations of that corpus. The mutation run is blind (no coverage
//! guidance, no sanitizer): it is the short run CI makes of every target, and the
//! coverage-guided libFuzzer build (`scripts/fuzz`) is where fuzz hours go.
//! `cargo test -p routeplex --test it fuzz_corpus::write_seed_corpus -- --ignored` rewrites
//! the seed files (`seed-N`) from each crate's `fuzzing::seeds`. (wire's targets are replayed
//! and mutated by `wire/tests/no_panic.rs`.)

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wire::fuzzing::Rng;

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

/// A target's committed corpus, by file, sorted by name.
fn corpus_files(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no corpus files", dir.display());
    files
        .into_iter()
        .map(|f| {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            (f, data)
        })
        .collect()
}

#[test]
fn every_corpus_file_decodes_as_the_fuzz_target_does() {
    for (krate, (targets, run, _)) in CRATES {
        for &t in targets {
            for (f, data) in corpus_files(t) {
                eprintln!("{krate} {t}: {}", f.display());
                assert!(run(t, &data), "{krate}: unknown target {t}");
            }
        }
    }
}

/// CI runs the targets through this file, not through `fuzz/` (which it does not build), so
/// this checks that the libFuzzer build still runs the same functions: each target here has
/// its `fuzz/fuzz_targets/TARGET.rs` calling `CRATE::fuzzing::TARGET` and a `[[bin]]` in
/// `fuzz/Cargo.toml`, and every file there is a target here or one of wire's.
#[test]
fn the_libfuzzer_targets_call_the_functions_run_here() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    let mut here = vec!["all", "ethernet_arp_vlan", "ipv4", "ipv6_ext", "icmp_ndp", "udp_tcp"];
    for (krate, (targets, _, _)) in CRATES {
        for &t in targets {
            let file = fuzz.join("fuzz_targets").join(format!("{t}.rs"));
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{krate} target {t}: {}: {e}", file.display()));
            let call = format!("{krate}::fuzzing::{t}(data)");
            assert!(text.contains(&call), "{}: does not call {call}", file.display());
            let bin = format!("name = \"{t}\"\npath = \"fuzz_targets/{t}.rs\"");
            assert!(manifest.contains(&bin), "fuzz/Cargo.toml: no [[bin]] for {t}");
            here.push(t);
        }
    }
    for e in std::fs::read_dir(fuzz.join("fuzz_targets")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let t = name.strip_suffix(".rs").unwrap_or(&name).to_string();
        assert!(here.contains(&t.as_str()), "fuzz/fuzz_targets/{name}: not run by CI's build");
    }
}

/// The corpus's words (runs of letters, digits and `_`) and punctuation: most targets read
/// text (JSON lines, YAML), and a mutation that inserts `"mtu"` or `{` reaches further into a
/// decoder than a flipped bit does.
fn tokens(corpus: &[(PathBuf, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (_, data) in corpus {
        let mut word = Vec::new();
        for &b in data.iter().chain(b" ") {
            if b.is_ascii_alphanumeric() || b == b'_' {
                word.push(b);
                continue;
            }
            if (2..=32).contains(&word.len()) {
                out.push(std::mem::take(&mut word));
            }
            word.clear();
            if b.is_ascii_punctuation() {
                out.push(vec![b]);
            }
        }
    }
    out.extend(
        [&b"-1"[..], b"0", b"4294967296", b"18446744073709551616", b"1e308", b"\\u0000"]
            .map(<[u8]>::to_vec),
    );
    out.sort();
    out.dedup();
    out
}

/// One input: a corpus file changed one to eight times (bit flips, byte and edge values, cuts,
/// duplicated and deleted runs, inserted tokens, a splice with another file).
fn mutate(rng: &mut Rng, corpus: &[(PathBuf, Vec<u8>)], words: &[Vec<u8>]) -> Vec<u8> {
    let mut d = corpus[rng.below(corpus.len())].1.clone();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(d.len() + 1);
        match rng.below(8) {
            0 if !d.is_empty() => {
                let bit = rng.below(d.len() * 8);
                d[bit / 8] ^= 1 << (bit % 8);
            }
            1 if at < d.len() => d[at] = [0, 0xff, 0x7f, 0x80, b'\n', b'"'][rng.below(6)],
            2 if at < d.len() => d[at] = rng.next_u64() as u8,
            3 => d.truncate(at),
            4 if at < d.len() => {
                let n = 1 + rng.below((d.len() - at).min(64));
                let run = d[at..at + n].to_vec();
                d.splice(at..at, run);
            }
            5 if at < d.len() => {
                let n = 1 + rng.below((d.len() - at).min(64));
                d.drain(at..at + n);
            }
            6 => {
                let w = &words[rng.below(words.len())];
                d.splice(at..at, w.iter().copied());
            }
            _ => {
                let other = &corpus[rng.below(corpus.len())].1;
                let from = rng.below(other.len() + 1);
                d.truncate(at);
                d.extend_from_slice(&other[from..]);
            }
        }
    }
    d
}

/// What the watchdog needs to name an input that hangs or grows memory without bound.
struct Current {
    target: Mutex<(String, Vec<u8>)>,
    done: AtomicU64,
    stop: AtomicBool,
}

/// libFuzzer's limits: an input that runs 10 s or takes the process past 2 GiB is a bug. The
/// watchdog writes it to `fuzz/artifacts/TARGET/` and ends the process (a panic on another
/// thread could not stop the stuck one).
fn watchdog(cur: Arc<Current>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (mut last, mut since) = (u64::MAX, Instant::now());
        while !cur.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let done = cur.done.load(Ordering::Relaxed);
            if done != last {
                (last, since) = (done, Instant::now());
            }
            let rss = std::fs::read_to_string("/proc/self/statm")
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
                .map_or(0, |pages| pages * 4096);
            let why = if since.elapsed() > Duration::from_secs(10) {
                "ran over 10 s"
            } else if rss > 2 << 30 {
                "took the process past 2 GiB"
            } else {
                continue;
            };
            let (target, input) = cur.target.lock().unwrap().clone();
            let file = save_artifact(&target, &input);
            eprintln!("fuzz_corpus: a {target} input {why}; it is in {}", file.display());
            std::process::abort();
        }
    })
}

fn save_artifact(target: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/artifacts").join(target);
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join(format!("mutated-{:08x}-{}", crc32fast::hash(input), input.len()));
    let _ = std::fs::write(&file, input);
    file
}

/// Seeded mutations of every target's corpus for `ROUTEPLEX_FUZZ_MS` (default 1,500 ms) a
/// target; `ROUTEPLEX_FUZZ_SEED` picks other inputs (the default gives the same ones each run).
/// A panic, a hang or runaway memory names the target and leaves the input in
/// `fuzz/artifacts/TARGET/`: replay it with the libFuzzer build, fix it with a test, and add
/// it to `fuzz/corpus/TARGET/`.
#[test]
fn mutated_corpus_inputs_neither_panic_nor_hang() {
    let env_u64 = |name: &str, default: u64| {
        std::env::var(name).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| panic!("{name}={v:?}: not a whole number"))
        })
    };
    let budget = Duration::from_millis(env_u64("ROUTEPLEX_FUZZ_MS", 1_500));
    let seed = env_u64("ROUTEPLEX_FUZZ_SEED", 0x5eed_c0de);
    let cur = Arc::new(Current {
        target: Mutex::new((String::new(), Vec::new())),
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let dog = watchdog(cur.clone());
    let mut failed = Vec::new();
    for (_, (targets, run, _)) in CRATES {
        for &t in targets {
            let files = corpus_files(t);
            let words = tokens(&files);
            let mut rng = Rng(seed ^ crc32fast::hash(t.as_bytes()) as u64);
            let (start, mut n) = (Instant::now(), 0u64);
            while start.elapsed() < budget {
                let input = mutate(&mut rng, &files, &words);
                *cur.target.lock().unwrap() = (t.to_string(), input.clone());
                if catch_unwind(AssertUnwindSafe(|| run(t, &input))).is_err() {
                    let file = save_artifact(t, &input);
                    failed.push(format!("{t} (input {n}: {})", file.display()));
                    break;
                }
                n += 1;
                cur.done.fetch_add(1, Ordering::Relaxed);
            }
            println!(
                "fuzz_corpus: {t}: {n} mutated inputs in {:.1} s (seed {seed:#x})",
                start.elapsed().as_secs_f64()
            );
        }
    }
    cur.stop.store(true, Ordering::Relaxed);
    dog.join().unwrap();
    assert!(failed.is_empty(), "panicked on a mutated input: {}", failed.join("; "));
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
