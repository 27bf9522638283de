//! docs/api.md documents every command of `control::api::Command`, and nothing else.

use control::api::Command;

#[test]
fn every_command_is_documented_and_nothing_else() {
    let doc = include_str!("../../../docs/api.md");
    let headings: Vec<&str> = doc.lines().filter_map(|l| l.strip_prefix("### ")).collect();
    for name in Command::NAMES {
        assert!(headings.contains(name), "docs/api.md has no section for command {name}");
    }
    for h in &headings {
        assert!(Command::NAMES.contains(h), "docs/api.md documents {h}, which is no command");
    }
    assert_eq!(headings.len(), Command::NAMES.len(), "a command documented twice");
}
