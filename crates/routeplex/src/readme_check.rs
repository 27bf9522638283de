//! Every command in the README's `sh` blocks runs as written: the files it names exist, and a
//! `routeplex` command line (synopses expanded: each `[optional]` part left out and put in,
//! each `a|b` alternative, placeholders such as FILE or N given a value) parses with the CLI's
//! own parser, required arguments and value types included. Markdown links to files resolve.

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::Cli;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A README word naming a file of the repository (checked to exist).
fn names_repo_file(w: &str) -> bool {
    let w = w.trim_matches(|c| c == '`' || c == ',');
    ["examples/", "scripts/", "crates/", "docs/", ".ci/"].iter().any(|p| w.starts_with(p))
}

/// A synopsis placeholder's stand-in: a value every argument of that name accepts.
fn placeholder(w: &str) -> String {
    let stand_in = |p: &str| -> Option<&str> {
        Some(match p {
            "FILE" => "examples/two-vrs.yaml",
            "N" => "1",
            "WORKER" => "0",
            "IP:PORT" => "127.0.0.1:9000",
            "VR:IFACE" => "r1:e0",
            "D" => "routeplex",
            "VR" | "PORT" | "SNAP" | "NAME" | "SOCKET" | "DIR" | "PREFIX" => "x",
            _ => return None,
        })
    };
    if let Some(s) = stand_in(w) {
        return s.to_string();
    }
    // key=N
    match w.split_once('=') {
        Some((k, v)) => stand_in(v).map_or_else(|| w.to_string(), |s| format!("{k}={s}")),
        None => w.to_string(),
    }
}

/// The concrete argument lists a synopsis stands for: optional groups out and in, and each
/// alternative of an `a|b` word.
fn expand(words: &[&str]) -> Vec<Vec<String>> {
    // (word, in an optional group)
    let mut tagged = Vec::new();
    let mut depth = 0usize;
    for w in words {
        let opens = w.starts_with('[');
        depth += usize::from(opens);
        let inner = w.trim_start_matches('[').trim_end_matches(']');
        tagged.push((inner.to_string(), depth > 0));
        depth -= usize::from(w.ends_with(']') && depth > 0);
    }
    let mut out = Vec::new();
    for with_optional in [false, true] {
        let mut variants: Vec<Vec<String>> = vec![Vec::new()];
        for (w, optional) in &tagged {
            if *optional && !with_optional {
                continue;
            }
            let alts: Vec<&str> = w.split('|').collect();
            variants = variants
                .into_iter()
                .flat_map(|v| {
                    alts.iter().map(move |a| {
                        let mut v = v.clone();
                        v.push(placeholder(a));
                        v
                    })
                })
                .collect();
        }
        out.extend(variants);
    }
    out
}

/// Programs a README line may pipe a command into.
const PIPE_TARGETS: [&str; 3] = ["tcpdump", "man", "less"];

/// The routeplex argument lists of one README line (empty when it runs something else).
fn routeplex_args(line: &str) -> Vec<Vec<String>> {
    let mut parts = line.split(" | ");
    let first = parts.next().unwrap_or_default();
    let words: Vec<&str> = first.split_whitespace().collect();
    let args: &[&str] = match words.as_slice() {
        ["routeplex", rest @ ..] => rest,
        ["cargo", "run", rest @ ..] => match rest.iter().position(|w| *w == "--") {
            Some(i) => &rest[i + 1..],
            None => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let mut lists = expand(args);
    // `A | B` where B is not a program is an alternative for the words from the first
    // alternative or optional part on (`reserve FILE VR packets=N|... | none`).
    for alt in parts {
        let alt: Vec<&str> = alt.split_whitespace().collect();
        if alt.first().is_some_and(|p| PIPE_TARGETS.contains(p)) {
            continue;
        }
        let keep = args.iter().position(|w| w.contains('|') || w.starts_with('[')).unwrap_or(0);
        let mut v: Vec<&str> = args[..keep].to_vec();
        v.extend(alt);
        lists.extend(expand(&v));
    }
    lists
}

/// The README's shell lines, each with its line number, comments removed.
fn sh_lines(readme: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for (i, l) in readme.lines().enumerate() {
        if l.starts_with("```") {
            in_sh = !in_sh && l.trim() == "```sh";
            continue;
        }
        if in_sh {
            let cmd = l.split(" #").next().unwrap_or_default().trim();
            if !cmd.is_empty() {
                out.push((i + 1, cmd.to_string()));
            }
        }
    }
    out
}

#[test]
fn readme_commands_name_existing_files_and_parse() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = sh_lines(&readme);
    let mut problems = Vec::new();
    let mut parsed = 0;
    for (n, line) in &lines {
        for w in line.split_whitespace().filter(|w| names_repo_file(w)) {
            let w = w.trim_matches(|c| c == '`' || c == ',');
            if !root().join(w).exists() {
                problems.push(format!("README.md:{n}: {w} does not exist: {line}"));
            }
        }
        for args in routeplex_args(line) {
            parsed += 1;
            let argv = std::iter::once("routeplex".to_string()).chain(args.iter().cloned());
            if let Err(e) = Cli::try_parse_from(argv) {
                let e = e.to_string();
                let why = e.lines().next().unwrap_or_default();
                problems.push(format!("README.md:{n}: `routeplex {}`: {why}", args.join(" ")));
            }
        }
    }
    // Markdown links to the repository's files.
    for (n, l) in readme.lines().enumerate() {
        for target in l.split("](").skip(1).filter_map(|s| s.split(')').next()) {
            if !target.contains("://") && !target.starts_with('#') && !root().join(target).exists()
            {
                problems
                    .push(format!("README.md:{}: link to {target}, which does not exist", n + 1));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "README commands that do not run as written:\n{}",
        problems.join("\n")
    );
    // The README has ~40 routeplex lines; far fewer parsed means the extraction broke.
    assert!(parsed >= 40, "only {parsed} routeplex command lines found in README.md's sh blocks");
}

#[test]
fn synopses_expand_to_every_form() {
    let forms = routeplex_args("routeplex demo [--seconds 3] [--json]");
    assert_eq!(forms, vec![vec!["demo"], vec!["demo", "--seconds", "3", "--json"]]);
    let forms = routeplex_args("routeplex reserve FILE VR packets=N|time_us=N | none");
    assert!(forms.contains(&vec![
        "reserve".to_string(),
        "examples/two-vrs.yaml".into(),
        "x".into(),
        "time_us=1".into()
    ]));
    assert!(forms.iter().any(|f| f.last().is_some_and(|w| w == "none")), "{forms:?}");
    let forms = routeplex_args("routeplex capture FILE VR:IFACE -w - | tcpdump -nn -r -");
    assert_eq!(forms.len(), 2, "the pipe is not an alternative: {forms:?}");
    assert_eq!(routeplex_args("cargo run --release -- demo"), vec![vec!["demo"]; 2]);
    assert!(routeplex_args("ip netns exec a ping -c 3 10.2.0.2").is_empty());
}

#[test]
fn a_bad_command_is_reported() {
    let forms = routeplex_args("routeplex test scenario --no-such-flag");
    assert!(forms.iter().all(|a| Cli::try_parse_from(
        std::iter::once("routeplex".to_string()).chain(a.iter().cloned())
    )
    .is_err()));
    assert!(!names_repo_file("FILE") && names_repo_file("examples/scenarios/F.yaml"));
    assert!(!names_repo_file("10.9.0.0/16") && !names_repo_file("/run/bird-r1.ctl"));
}
