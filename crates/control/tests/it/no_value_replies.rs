//! No untyped JSON in control's public surface: every reply is a struct of `control::api`
//! (docs/api.md), so a client reads fields by name the compiler checks, never `reply["vrs"]`.
//!
//! Reads control's sources: each fully public item (`pub fn` signatures, `pub` fields, types
//! and consts) must not name `serde_json::Value` (or `Value` imported from serde_json), and the
//! API's handlers (`cmd/`, `api`) must not build replies with `json!`. Internal uses stay
//! allowed (the running text's edits in `cmd/vrs.rs` work on a plain YAML tree). The few
//! public items that hand out a tree on purpose are listed below, each with why.

use std::path::{Path, PathBuf};

/// (file, the item's name, why it may return or hold a JSON tree).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "runtime.rs",
        "to_json",
        "Snapshot::to_json is to_status() as a tree for the labs' reports and tests that read it by key; no command returns it",
    ),
    (
        "snapshot.rs",
        "ports",
        "a snapshot file keeps its VR's ports as the topology file wrote them (plain documents), not a reply",
    ),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The public items of `text` with their first line's number: a `pub` line (not
/// `pub(crate)`/`pub(super)`) up to its `{`, `;` or `,` at the end of a line.
fn public_items(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t.starts_with("pub ") && !t.starts_with("pub mod ") && !t.starts_with("pub use ") {
            let mut item = String::new();
            let start = i;
            loop {
                let l = lines[i].trim();
                item.push_str(l);
                item.push(' ');
                if l.ends_with('{') || l.ends_with(';') || l.ends_with(',') || i + 1 == lines.len()
                {
                    break;
                }
                i += 1;
            }
            out.push((start + 1, item));
        }
        i += 1;
    }
    out
}

/// The name an item declares: after `fn`, `struct`, `enum`, `type`, `const`, or a field's.
fn name_of(item: &str) -> String {
    let words: Vec<&str> = item.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
    let words: Vec<&str> = words.into_iter().filter(|w| !w.is_empty()).collect();
    for (k, w) in words.iter().enumerate() {
        if ["fn", "struct", "enum", "type", "const", "static"].contains(w) {
            return words.get(k + 1).unwrap_or(&"").to_string();
        }
    }
    words.get(1).unwrap_or(&"").to_string()
}

fn names_value(item: &str, imports_value: bool) -> bool {
    let bare = item
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .any(|w| w == "Value" || w == "serde_json::Value");
    item.contains("serde_json::Value") || (imports_value && bare)
}

#[test]
fn control_hands_out_no_json_trees() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    assert!(files.len() > 30, "control's sources not found under {}", root.display());
    let mut found = Vec::new();
    let mut allowed_seen = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        let imports_value = text.lines().any(|l| {
            let l = l.trim();
            l.starts_with("use serde_json::") && l.contains("Value")
        });
        for (line, item) in public_items(&text) {
            if !names_value(&item, imports_value) {
                continue;
            }
            let name = name_of(&item);
            if ALLOWED.iter().any(|(file, n, _)| *file == rel && *n == name) {
                allowed_seen.push((rel.clone(), name));
                continue;
            }
            found.push(format!("{rel}:{line}: {}", item.trim()));
        }
        let handler = rel.starts_with("cmd/") || rel.starts_with("api");
        for (k, l) in text.lines().enumerate() {
            if handler && l.contains("json!(") {
                found.push(format!("{rel}:{}: a reply built with json!: {}", k + 1, l.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "untyped JSON in control's public surface (give it a struct in control::api, or if \
         it is no reply, add it to ALLOWED with why):\n{}",
        found.join("\n")
    );
    for (file, name, _) in ALLOWED {
        assert!(
            allowed_seen.iter().any(|(f, n)| f == file && n == name),
            "ALLOWED lists {file} {name}, which no longer hands out a tree: take it off"
        );
    }
}

#[test]
fn the_scan_finds_what_it_looks_for() {
    let text = "use serde_json::{json, Value};\n\
                pub fn status(&self)\n    -> Result<Value, E> {\n}\n\
                pub(crate) fn inner() -> Value {}\n\
                pub struct R {\n    pub ok: Option<serde_json::Value>,\n    pub n: u64,\n}\n";
    let items = public_items(text);
    let hits: Vec<(usize, String)> =
        items.iter().filter(|(_, i)| names_value(i, true)).map(|(l, i)| (*l, name_of(i))).collect();
    assert_eq!(hits, [(2, "status".to_string()), (7, "ok".to_string())]);
    assert!(!names_value("pub fn values(&self) -> ValueKind {", true));
    assert!(!names_value("pub fn f(v: &yaml::Value) {", false));
}
