//! The library crates' modules form layers: no import circle between them.
//!
//! Read from the source, as a newcomer would: every `use` line and every `crate::`/`super::`
//! path outside `#[cfg(test)]` modules names the module it reaches. A module is a crate's
//! top-level `mod` (a file, or a directory with its children: a module's own files may refer
//! to each other, as Rust's parent and child modules do). The modules of each crate must form
//! a graph without a cycle; a failure names the circle and who uses whom in it, and the order
//! found is printed for the rest.
//!
//! Errors are typed at every boundary: no library crate's code (tests aside) has a
//! `Result<_, String>`.
//!
//! The command line stays a command line: `crates/routeplex/src` (argument parsing and
//! printing; the labs and benchmarks are the `lab` crate) is under 2,000 lines, and no function
//! in it is over 80 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The crates whose layers are checked (every library crate of the workspace).
const CRATES: &[&str] =
    &["wire", "fib", "ports", "dataplane", "yamlpath", "control", "fleet", "tester", "lab"];

/// The most lines the binary's sources may have, and the most one function of them may have.
const BINARY_LINES: usize = 2_000;
const FUNCTION_LINES: usize = 80;

#[test]
fn no_import_circle_between_the_modules_of_a_library_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut failures = Vec::new();
    for name in CRATES {
        let src = root.join(name).join("src");
        let graph = graph_of(&src);
        match order(&graph) {
            Ok(layers) => println!("{name}: {}", layers.join(" → ")),
            Err(circle) => {
                let mut s = format!("{name}: import circle between {}:", circle.join(", "));
                for m in &circle {
                    let used: Vec<&str> = graph[m]
                        .iter()
                        .filter(|u| circle.contains(u))
                        .map(String::as_str)
                        .collect();
                    s += &format!("\n  {m} uses {}", used.join(", "));
                }
                failures.push(s);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_reader_finds_uses_groups_and_paths_and_skips_tests() {
    let text = "use crate::a::{b::C, d};\nuse super::{e, f::{G, H}};\nfn x() { crate::i::j(); }\n\
                // crate::k::l in a comment\n#[cfg(test)]\nmod tests {\n    use crate::m::N;\n}\n";
    let paths = paths_in(text);
    let firsts: BTreeSet<String> = paths.iter().map(|p| p.join("::")).collect();
    for want in ["crate::a::b::C", "crate::a::d", "super::e", "super::f::G", "crate::i::j"] {
        assert!(firsts.contains(want), "{want} not found in {firsts:?}");
    }
    assert!(!firsts.iter().any(|p| p.contains("k::l") || p.contains("m::N")), "{firsts:?}");

    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::new());
    assert_eq!(order(&g).unwrap(), ["a", "b", "c"]);
    g.get_mut("c").unwrap().insert("a".to_string());
    assert_eq!(order(&g).unwrap_err(), ["a", "b", "c"]);
}

#[test]
fn no_result_with_a_string_error_in_a_library_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for name in CRATES {
        for f in &library_files(&root.join(name).join("src")) {
            let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            for line in without_test_modules(&text).lines().filter(|l| string_error(l)) {
                found.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "Result<_, String> in library code:\n{}", found.join("\n"));
}

#[test]
fn the_string_error_reader_finds_the_last_argument() {
    assert!(string_error("fn f() -> Result<(), String> {"));
    assert!(string_error("    .collect::<std::result::Result<Vec<(u8, u16)>, String>>()?"));
    assert!(!string_error("fn f() -> Result<String, Error> {"));
    assert!(!string_error("fn f() -> io::Result<Vec<String>> {"));
    assert!(!string_error("fn f() -> Result<Option<String>, Located> {"));
}

/// Whether a line names a `Result` whose error (its last type argument) is `String`.
fn string_error(line: &str) -> bool {
    let mut rest = line;
    while let Some(i) = rest.find("Result<") {
        let args = &rest[i + "Result<".len()..];
        let (mut depth, mut last, mut end) = (0i32, 0usize, None);
        for (j, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' if depth > 0 => depth -= 1,
                '>' => {
                    end = Some(j);
                    break;
                }
                ',' if depth == 0 => last = j + 1,
                _ => {}
            }
        }
        if let Some(end) = end {
            if last > 0 && args[last..end].trim() == "String" {
                return true;
            }
        }
        rest = args;
    }
    false
}

#[test]
fn the_binary_is_argument_parsing_and_printing() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut total = 0;
    let mut long = Vec::new();
    for f in rust_files(&src) {
        let text = fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        total += text.lines().count();
        for (name, line, n) in functions(&text) {
            if n > FUNCTION_LINES {
                long.push(format!("{}:{line}: fn {name} has {n} lines", f.display()));
            }
        }
    }
    println!("crates/routeplex/src: {total} lines");
    assert!(
        total < BINARY_LINES,
        "crates/routeplex/src has {total} lines (at most {BINARY_LINES}): move labs and \
         benchmarks to crates/lab"
    );
    assert!(long.is_empty(), "functions over {FUNCTION_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn the_function_reader_measures_bodies_and_skips_declarations() {
    let text =
        "fn a() {}\npub fn b(\n    x: u8,\n) -> u8 {\n    x\n}\ntrait T {\n    fn c(&self);\n    \
                fn d(&self) {\n        let _ = \"}\";\n    }\n}\n";
    assert_eq!(
        functions(text),
        [("b".to_string(), 2, 5), ("d".to_string(), 9, 3)],
        "one-line bodies and declarations are not measured"
    );
}

/// Each function of a rustfmt-formatted file with a body over one line: its name, first line
/// (1-based) and length in lines, from `fn` to the closing brace at the `fn` line's indent.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some(at) = t.find("fn ") else { continue };
        let head = &t[..at];
        let is_fn = head.split_whitespace().all(|w| {
            w.starts_with("pub") || ["const", "async", "unsafe", "extern", "\"C\""].contains(&w)
        });
        if !is_fn {
            continue;
        }
        let name: String =
            t[at + 3..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let indent = &l[..l.len() - t.len()];
        // The signature ends at the first line ending in `{` (a body) or `;` / `}` (none, or
        // a one-line body).
        let Some(open) = (i..lines.len()).find(|&j| {
            let e = lines[j].trim_end();
            e.ends_with('{') || e.ends_with(';') || e.ends_with('}')
        }) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j].trim_end() == close) {
            out.push((name, i + 1, end - i + 1));
        }
    }
    out
}

/// Module → the other modules of the crate it uses.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crate's source files but those of `#[cfg(test)] mod NAME;` (tests, like inline test
/// modules).
fn library_files(src: &Path) -> Vec<PathBuf> {
    let all = rust_files(src);
    let tests: BTreeSet<Vec<String>> = all
        .iter()
        .flat_map(|f| {
            let here = module_path(src, f);
            let text = fs::read_to_string(f).unwrap_or_default();
            test_module_files(&text).into_iter().map(move |m| {
                let mut p = here.clone();
                p.push(m);
                p
            })
        })
        .collect();
    all.into_iter().filter(|f| !tests.contains(&module_path(src, f))).collect()
}

fn graph_of(src: &Path) -> Graph {
    let files = library_files(src);
    let mods: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    let mut g: Graph =
        mods.iter().filter_map(|m| m.first().cloned()).map(|m| (m, BTreeSet::new())).collect();
    for f in &files {
        let here = module_path(src, f);
        let Some(top) = here.first().cloned() else { continue }; // lib.rs: the facade
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for p in paths_in(&text) {
            let Some(to) = target(&here, &p, &mods) else { continue };
            if to != top {
                g.get_mut(&top).unwrap().insert(to);
            }
        }
    }
    g
}

/// The modules a file declares as `#[cfg(test)] mod NAME;` (in files of their own).
fn test_module_files(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        rest = &rest[i + "#[cfg(test)]".len()..];
        let head = rest.trim_start();
        let head = head.strip_prefix("pub(crate) ").or(head.strip_prefix("pub ")).unwrap_or(head);
        if let Some(decl) = head.strip_prefix("mod ") {
            let name: String =
                decl.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if decl[name.len()..].trim_start().starts_with(';') {
                out.push(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// `a/b.rs` and `a/b/mod.rs` are module `a::b`; `lib.rs` (and `main.rs`) the root.
fn module_path(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut segs: Vec<String> =
        rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if segs.last().is_some_and(|s| s == "mod") || segs == ["lib"] || segs == ["main"] {
        segs.pop();
    }
    segs
}

/// The top-level module a path from module `here` reaches, if it is one of the crate's.
fn target(here: &[String], p: &[String], mods: &BTreeSet<Vec<String>>) -> Option<String> {
    let mut base = here.to_vec();
    let mut rest = p;
    match p.first()?.as_str() {
        "crate" => {
            base.clear();
            rest = &p[1..];
        }
        "super" | "self" => {
            while let Some(s) = rest.first().filter(|s| *s == "super" || *s == "self") {
                if s == "super" {
                    base.pop();
                }
                rest = &rest[1..];
            }
        }
        first => {
            // A child module named without `self::`; anything else is another crate.
            let mut child = base.clone();
            child.push(first.to_string());
            if !mods.contains(&child) {
                return None;
            }
        }
    }
    let full: Vec<String> = base.into_iter().chain(rest.iter().cloned()).collect();
    let top = full.first()?;
    mods.contains(&vec![top.clone()]).then(|| top.clone())
}

/// Every path a file names in `use` items and as `crate::`/`super::` paths in code, outside
/// comments and `#[cfg(test)] mod` blocks.
fn paths_in(text: &str) -> Vec<Vec<String>> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let code = without_test_modules(&code);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(i) = find_word(rest, "use") {
        let after = &rest[i + 3..];
        let Some(end) = after.find(';') else { break };
        expand(&[], after[..end].trim(), &mut out);
        rest = &after[end..];
    }
    for word in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(i) = code[at..].find(word) {
            let start = at + i;
            at = start + word.len();
            if code[..start].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(segments(&path));
        }
    }
    out
}

fn find_word(s: &str, w: &str) -> Option<usize> {
    let mut at = 0;
    while let Some(i) = s[at..].find(w) {
        let i = at + i;
        let before = s[..i].chars().next_back();
        let after = s[i + w.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if boundary(before) && after.is_some_and(char::is_whitespace) {
            return Some(i);
        }
        at = i + w.len();
    }
    None
}

fn segments(p: &str) -> Vec<String> {
    p.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e` (an alias `as x` is dropped).
fn expand(prefix: &[String], item: &str, out: &mut Vec<Vec<String>>) {
    let item = item.split(" as ").next().unwrap_or("").trim();
    match item.find('{') {
        None => {
            let mut p = prefix.to_vec();
            p.extend(segments(item));
            if !p.is_empty() {
                out.push(p);
            }
        }
        Some(open) => {
            let mut p = prefix.to_vec();
            p.extend(segments(item[..open].trim_end_matches(':')));
            let inner = &item[open + 1..item.rfind('}').unwrap_or(item.len())];
            let (mut depth, mut from) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&p, &inner[from..i], out);
                        from = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&p, &inner[from..], out);
        }
    }
}

/// The text without `#[cfg(test)] mod NAME { ... }` blocks.
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "#[cfg(test)]".len()..];
        let head = after.trim_start();
        let head = head.strip_prefix("pub(crate) ").or(head.strip_prefix("pub ")).unwrap_or(head);
        let is_mod_block = head.starts_with("mod ")
            && head.find('{').is_some_and(|b| head.find(';').is_none_or(|s| b < s));
        if !is_mod_block {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0;
        let mut end = after.len();
        for (j, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The modules from those that use most to those used, or the first circle found (sorted).
fn order(g: &Graph) -> Result<Vec<String>, Vec<String>> {
    // Tarjan's strongly connected components come out callees first.
    struct T<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        comps: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        for w in t.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            t.comps.push(comp);
        }
    }
    let mut t = T { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], comps: vec![] };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    if let Some(c) = t.comps.iter().find(|c| c.len() > 1) {
        return Err(c.clone());
    }
    Ok(t.comps.into_iter().rev().flatten().collect())
}
