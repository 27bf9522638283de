//! The topology file's view of [`yamlpath`]: values that know their field path
//! (`vrs[0].interfaces[1].mac`) and position, failing with a [`TopologyError`].

use std::fmt::Display;

use super::error::{ErrorKind, TopologyError};

pub(super) use yamlpath::Node;

pub(super) type Result<T> = std::result::Result<T, TopologyError>;

/// A value in the topology document.
pub(super) type Value<'a> = yamlpath::Value<'a, TopologyError>;

/// A mapping in the topology document.
pub(super) type Map<'a> = yamlpath::Map<'a, TopologyError>;

impl From<yamlpath::Located> for TopologyError {
    fn from(e: yamlpath::Located) -> TopologyError {
        TopologyError::at(ErrorKind::Invalid, e.pos, &e.path, e.value.as_deref(), e.message)
    }
}

/// Parses a document whose top level is a mapping. Anchors, tags and repeated keys are syntax
/// errors: the first two hide where a value came from, the third is always a typo.
pub(super) fn parse_document(text: &str) -> Result<Node> {
    yamlpath::parse_document(text, "hosts:, ports:, switches:, vrs:").map_err(|e| {
        TopologyError::at(ErrorKind::Syntax, e.pos, &e.path, e.value.as_deref(), e.message)
    })
}

/// Errors of a kind other than [`ErrorKind::Invalid`].
pub(super) trait BadKind {
    /// Like [`Value::bad`], for an error of another kind.
    fn bad_kind(&self, kind: ErrorKind, value: &str, message: impl Display) -> TopologyError;
}

impl BadKind for Value<'_> {
    fn bad_kind(&self, kind: ErrorKind, value: &str, message: impl Display) -> TopologyError {
        TopologyError::at(kind, self.pos(), self.path(), Some(value), message.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse_document(text).unwrap()
    }

    #[test]
    fn errors_name_line_column_field_and_value() {
        let doc = root("a:\n  - x: 1\n    y: [2, three]\n");
        let a = Value::root(&doc).map(&["a"]).unwrap().req("a").unwrap();
        let item = &a.list().unwrap()[0];
        let m = item.map(&["x", "y"]).unwrap();
        let y = m.req("y").unwrap().list().unwrap();
        let e = y[1].int::<u8>("count", 0, 9).unwrap_err();
        assert_eq!(
            (e.kind(), e.line(), e.column(), e.field(), e.value()),
            (ErrorKind::Invalid, 3, 12, "a[0].y[1]", Some("three"))
        );
        let e = m.req("z").unwrap_err();
        assert_eq!((e.line(), e.column(), e.field()), (2, 5, "a[0].z"));
        let e = y[1].bad_kind(ErrorKind::Unavailable, "three", "not built in");
        assert_eq!(
            (e.kind(), e.field(), e.message()),
            (ErrorKind::Unavailable, "a[0].y[1]", "not built in")
        );
    }

    #[test]
    fn unknown_keys_list_the_allowed_ones() {
        let doc = root("name: a\nadresses: []\n");
        let e = Value::root(&doc).map(&["name", "addresses"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            ":2:1: adresses: unknown key \"adresses\" (allowed: name, addresses)"
        );
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = parse_document("a: [1, 2\nb: 3\n").unwrap_err();
        assert_eq!((e.kind(), e.line()), (ErrorKind::Syntax, 2));
        let e = parse_document("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!((e.line(), e.column()), (3, 1));
        assert_eq!(e.message(), "key \"a\" appears twice in one mapping (first at line 1)");
        let e = parse_document("- a\n").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Syntax);
        assert_eq!(
            e.message(),
            "the top level must be a mapping (hosts:, ports:, switches:, vrs:)"
        );
    }
}
