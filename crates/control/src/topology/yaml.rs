//! A thin reader over `marked_yaml` nodes that knows where it is.
//!
//! Every value carries its field path (`vrs[0].interfaces[1].mac`) and position, so each check
//! can fail with an error naming both. We walk nodes by hand rather than derive serde: serde's
//! errors lose the field path, cannot list the allowed keys, and the cross-field checks need
//! the position of every value anyway.

use std::fmt::Display;
use std::str::FromStr;

use marked_yaml::types::MarkedMappingNode;
use marked_yaml::{LoadError, LoaderOptions, Node, Span};

use super::error::{ErrorKind, TopologyError};

pub(super) type Result<T> = std::result::Result<T, TopologyError>;

/// Parses a document whose top level is a mapping. Anchors, tags and repeated keys are syntax
/// errors: the first two hide where a value came from, the third is always a typo.
pub(super) fn parse_document(text: &str) -> Result<Node> {
    let options = LoaderOptions::default().error_on_duplicate_keys(true);
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        let (pos, message) = match &e {
            LoadError::TopLevelMustBeMapping(m) => (
                pos_of(Some(m)),
                "the top level must be a mapping (hosts:, ports:, switches:, vrs:)".to_string(),
            ),
            LoadError::TopLevelMustBeSequence(m) => (pos_of(Some(m)), e.to_string()),
            LoadError::UnexpectedAnchor(m) => {
                (pos_of(Some(m)), "anchors and aliases are not supported".to_string())
            }
            LoadError::MappingKeyMustBeScalar(m) => {
                (pos_of(Some(m)), "mapping keys must be plain names".to_string())
            }
            LoadError::UnexpectedTag(m) => (pos_of(Some(m)), "YAML tags are not supported".into()),
            LoadError::ScanError(m, scan) => (pos_of(Some(m)), scan.info().to_string()),
            LoadError::DuplicateKey(d) => (
                pos_of(d.key.span().start()),
                format!(
                    "key {:?} appears twice in one mapping (first at line {})",
                    d.key.as_str(),
                    pos_of(d.prev_key.span().start()).0
                ),
            ),
        };
        TopologyError::at(ErrorKind::Syntax, pos, "", None, message)
    })
}

fn pos_of(m: Option<&marked_yaml::Marker>) -> (usize, usize) {
    m.map_or((0, 0), |m| (m.line(), m.column()))
}

/// A value in the document, with its field path and position.
#[derive(Clone, Debug)]
pub(super) struct Value<'a> {
    node: &'a Node,
    path: String,
    pos: (usize, usize),
}

impl<'a> Value<'a> {
    /// The document's root.
    pub(super) fn root(node: &'a Node) -> Value<'a> {
        Value { node, path: String::new(), pos: node_pos(node) }
    }

    /// 1-based line.
    pub(super) fn line(&self) -> usize {
        self.pos.0
    }

    /// An error about this value that quotes no value (wrong shape, missing, conflicting).
    pub(super) fn error(&self, message: impl Display) -> TopologyError {
        TopologyError::at(ErrorKind::Invalid, self.pos, &self.path, None, message.to_string())
    }

    /// An error about this value, naming the offending text.
    pub(super) fn bad(&self, value: &str, message: impl Display) -> TopologyError {
        self.bad_kind(ErrorKind::Invalid, value, message)
    }

    /// Like [`Value::bad`], for an error of another kind.
    pub(super) fn bad_kind(
        &self,
        kind: ErrorKind,
        value: &str,
        message: impl Display,
    ) -> TopologyError {
        TopologyError::at(kind, self.pos, &self.path, Some(value), message.to_string())
    }

    /// True for an empty value, `~` or `null`: the same as leaving the key out.
    pub(super) fn is_null(&self) -> bool {
        matches!(self.node, Node::Scalar(s) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// True for a list.
    pub(super) fn is_list(&self) -> bool {
        matches!(self.node, Node::Sequence(_))
    }

    /// True for a mapping (key: value).
    pub(super) fn is_mapping(&self) -> bool {
        matches!(self.node, Node::Mapping(_))
    }

    fn shape(&self) -> &'static str {
        match self.node {
            Node::Scalar(_) => "a single value",
            Node::Mapping(_) => "a mapping (key: value)",
            Node::Sequence(_) => "a list",
        }
    }

    /// The text of a single value.
    pub(super) fn text(&self) -> Result<&'a str> {
        match self.node {
            Node::Scalar(_) if self.is_null() => Err(self.error("a value is required")),
            Node::Scalar(s) => Ok(s.as_str()),
            _ => Err(self.error(format_args!("expected a single value, found {}", self.shape()))),
        }
    }

    /// Parses the value with `FromStr`; `what` names the expected thing in the error.
    pub(super) fn parse<T: FromStr>(&self, what: &str) -> Result<T> {
        let s = self.text()?;
        s.parse().map_err(|_| self.bad(s, format_args!("invalid {what} {s:?}")))
    }

    /// A decimal integer in `lo..=hi`.
    pub(super) fn int<T: TryFrom<u64>>(&self, what: &str, lo: u64, hi: u64) -> Result<T> {
        let s = self.text()?;
        let n: u64 = match s.parse() {
            Ok(n) if s.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                return Err(self
                    .bad(s, format_args!("{what} must be an integer in {lo}..={hi}, not {s:?}")))
            }
        };
        if n < lo || n > hi {
            return Err(self.bad(s, format_args!("{what} {n} is out of range {lo}..={hi}")));
        }
        T::try_from(n).map_err(|_| self.bad(s, format_args!("{what} {n} does not fit")))
    }

    /// `true` or `false`.
    pub(super) fn bool(&self) -> Result<bool> {
        match self.text()? {
            "true" | "True" | "TRUE" => Ok(true),
            "false" | "False" | "FALSE" => Ok(false),
            s => Err(self.bad(s, format_args!("expected true or false, not {s:?}"))),
        }
    }

    /// The items of a list; an empty value is an empty list.
    pub(super) fn list(&self) -> Result<Vec<Value<'a>>> {
        match self.node {
            Node::Sequence(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, node)| Value {
                    node,
                    path: format!("{}[{i}]", self.path),
                    pos: node_pos(node),
                })
                .collect()),
            _ if self.is_null() => Ok(Vec::new()),
            _ => Err(self.error(format_args!("expected a list, found {}", self.shape()))),
        }
    }

    /// A mapping whose keys must all be in `allowed`.
    pub(super) fn map(&self, allowed: &[&str]) -> Result<Map<'a>> {
        let map = self.mapping()?;
        map.only(allowed)?;
        Ok(map)
    }

    /// A mapping with any keys; call [`Map::only`] once the allowed keys are known.
    pub(super) fn mapping(&self) -> Result<Map<'a>> {
        match self.node {
            Node::Mapping(m) => Ok(Map { node: m, path: self.path.clone(), pos: self.pos }),
            _ if self.is_null() => Err(self.error("a mapping (key: value) is required")),
            _ => {
                Err(self
                    .error(format_args!("expected a mapping (key: value), found {}", self.shape())))
            }
        }
    }
}

/// A mapping in the document.
#[derive(Clone, Debug)]
pub(super) struct Map<'a> {
    node: &'a MarkedMappingNode,
    path: String,
    pos: (usize, usize),
}

impl<'a> Map<'a> {
    fn child_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Rejects keys outside `allowed`, listing the allowed ones: catches typos like `adresses`.
    pub(super) fn only(&self, allowed: &[&str]) -> Result<()> {
        match self.node.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(TopologyError::at(
                ErrorKind::Invalid,
                pos_of(k.span().start()),
                &self.child_path(k.as_str()),
                Some(k.as_str()),
                format!("unknown key {:?} (allowed: {})", k.as_str(), allowed.join(", ")),
            )),
        }
    }

    /// The value under `key`, or `None` when it is absent or empty.
    pub(super) fn get(&self, key: &str) -> Option<Value<'a>> {
        let (k, node) = self.node.get_key_value(key)?;
        let value = Value { node, path: self.child_path(key), pos: value_pos(k.span(), node) };
        (!value.is_null()).then_some(value)
    }

    /// The items of the list under `key`; an absent key is an empty list.
    pub(super) fn list(&self, key: &str) -> Result<Vec<Value<'a>>> {
        self.get(key).map_or(Ok(Vec::new()), |v| v.list())
    }

    /// The value under `key`, which must be present and not empty.
    pub(super) fn req(&self, key: &str) -> Result<Value<'a>> {
        self.get(key).ok_or_else(|| {
            let pos = match self.node.get_key_value(key) {
                Some((k, _)) => pos_of(k.span().start()),
                None => self.pos,
            };
            TopologyError::at(
                ErrorKind::Invalid,
                pos,
                &self.child_path(key),
                None,
                format!("required field {key:?} is missing"),
            )
        })
    }
}

/// Where to point for a value under a key: an empty value has no text of its own (the parser
/// places it on the next line), so point at its key.
fn value_pos(key: &Span, node: &Node) -> (usize, usize) {
    match node {
        Node::Scalar(s) if s.is_empty() => pos_of(key.start()),
        _ => node_pos(node),
    }
}

/// Where a node starts for a reader: a block mapping's own span starts at its first colon, so
/// point at its first key instead.
fn node_pos(node: &Node) -> (usize, usize) {
    match node {
        Node::Mapping(m) if !m.is_empty() => pos_of(m.keys().next().and_then(|k| k.span().start())),
        _ => pos_of(node.span().start()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse_document(text).unwrap()
    }

    #[test]
    fn paths_and_positions_follow_the_document() {
        let doc = root("a:\n  - x: 1\n    y: [2, three]\n");
        let a = Value::root(&doc).map(&["a"]).unwrap().req("a").unwrap();
        let item = &a.list().unwrap()[0];
        let m = item.map(&["x", "y"]).unwrap();
        let y = m.req("y").unwrap().list().unwrap();
        assert_eq!((y[1].path.as_str(), y[1].pos), ("a[0].y[1]", (3, 12)));
        let e = y[1].int::<u8>("count", 0, 9).unwrap_err();
        assert_eq!(
            (e.line(), e.column(), e.field(), e.value()),
            (3, 12, "a[0].y[1]", Some("three"))
        );
        assert_eq!(m.req("x").unwrap().int::<u8>("count", 0, 9).unwrap(), 1);
        let e = m.req("z").unwrap_err();
        assert_eq!((e.line(), e.column(), e.field()), (2, 5, "a[0].z"));
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
    fn empty_values_count_as_absent_and_point_at_their_key() {
        let doc = root("a:\nb: ~\nc: 3\n");
        let m = Value::root(&doc).mapping().unwrap();
        assert!(m.get("a").is_none() && m.get("b").is_none());
        assert_eq!(m.req("a").unwrap_err().line(), 1);
        assert_eq!(m.req("b").unwrap_err().line(), 2);
        let e = m.req("c").unwrap().list().unwrap_err();
        assert_eq!(e.message(), "expected a list, found a single value");
    }

    #[test]
    fn integers_are_plain_decimal_and_range_checked() {
        let doc = root("a: 0x10\nb: -1\nc: 70000\n");
        let m = Value::root(&doc).mapping().unwrap();
        let a = m.req("a").unwrap().int::<u16>("MTU", 68, 9000).unwrap_err();
        assert_eq!(a.message(), "MTU must be an integer in 68..=9000, not \"0x10\"");
        assert!(m.req("b").unwrap().int::<u16>("MTU", 68, 9000).is_err());
        let c = m.req("c").unwrap().int::<u16>("MTU", 68, 9000).unwrap_err();
        assert_eq!(c.message(), "MTU 70000 is out of range 68..=9000");
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = parse_document("a: [1, 2\nb: 3\n").unwrap_err();
        assert_eq!((e.kind(), e.line()), (ErrorKind::Syntax, 2));
        let e = parse_document("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!((e.line(), e.column()), (3, 1));
        assert_eq!(e.message(), "key \"a\" appears twice in one mapping (first at line 1)");
        assert_eq!(parse_document("- a\n").unwrap_err().kind(), ErrorKind::Syntax);
    }
}
