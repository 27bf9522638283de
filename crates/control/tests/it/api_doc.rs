//! docs/api.md documents every command of `control::api::Command`, and nothing else; each
//! command's example reply is exactly what its reply struct reads and writes.

use control::api::{Answer, Command};

const DOC: &str = include_str!("../../../../docs/api.md");

#[test]
fn every_command_is_documented_and_nothing_else() {
    let headings: Vec<&str> = DOC.lines().filter_map(|l| l.strip_prefix("### ")).collect();
    for name in Command::NAMES {
        assert!(headings.contains(name), "docs/api.md has no section for command {name}");
    }
    for h in &headings {
        assert!(Command::NAMES.contains(h), "docs/api.md documents {h}, which is no command");
    }
    assert_eq!(headings.len(), Command::NAMES.len(), "a command documented twice");
}

/// Each command's section and the text of its example replies (```json reply blocks).
fn examples() -> Vec<(&'static str, Vec<String>)> {
    let mut out: Vec<(&str, Vec<String>)> = Vec::new();
    let mut block: Option<String> = None;
    for l in DOC.lines() {
        if let Some(h) = l.strip_prefix("### ") {
            out.push((h, Vec::new()));
        } else if l.starts_with("## ") {
            out.push(("", Vec::new()));
        } else if l == "```json reply" {
            block = Some(String::new());
        } else if l == "```" && block.is_some() {
            let b = block.take().unwrap();
            out.last_mut().expect("a reply example outside any section").1.push(b);
        } else if let Some(b) = &mut block {
            b.push_str(l);
            b.push('\n');
        }
    }
    out.retain(|(h, _)| !h.is_empty());
    out
}

#[test]
fn every_documented_reply_reads_into_its_struct_and_back() {
    let all = examples();
    assert_eq!(all.len(), Command::NAMES.len());
    for (name, blocks) in all {
        assert!(!blocks.is_empty(), "docs/api.md: {name} has no example reply (```json reply)");
        for b in blocks {
            let doc: serde_json::Value = serde_json::from_str(&b)
                .unwrap_or_else(|e| panic!("docs/api.md: {name}: the example is not JSON: {e}"));
            let line = format!(r#"{{"v":1,"id":1,"ok":{doc}}}"#);
            let a = Answer::read(name, line.as_bytes())
                .unwrap_or_else(|e| panic!("docs/api.md: {name}: the example does not read: {e}"));
            let back = serde_json::to_value(&a).unwrap();
            assert_eq!(
                back,
                doc,
                "docs/api.md: {name}: the example and its struct ({}) differ: a field documented \
                 that the struct lacks, or one it has that the example leaves out",
                a.kind()
            );
        }
    }
}

#[test]
fn a_reply_of_the_wrong_shape_is_refused_naming_the_field() {
    let e = Answer::read("move", br#"{"v":1,"id":1,"ok":{"moved":["a"],"from":0}}"#).unwrap_err();
    assert!(e.to_string().contains("missing field `to`"), "{e}");
    let e = Answer::read(
        "move",
        br#"{"v":1,"id":1,"err":{"code":"no_such_vr","msg":"no VR named \"a\""}}"#,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), r#"no VR named "a" (no_such_vr)"#);
    let e = Answer::read("dance", br#"{"v":1,"id":1,"ok":{}}"#).unwrap_err();
    assert!(e.to_string().contains("dance"), "{e}");
    let e = Answer::read("stop", br#"{"v":1,"id":1}"#).unwrap_err();
    assert!(e.to_string().contains("neither ok nor err"), "{e}");
}
