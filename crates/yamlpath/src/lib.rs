//! Read a YAML document into values that know their path and position, so every rejection
//! names file, line, column, field and value.
//!
//! A thin reader over `marked_yaml` nodes: every [`Value`] carries its field path
//! (`vrs[0].interfaces[1].mac`) and its 1-based (line, column), and every check fails with a
//! [`Located`] error naming both and, where there is one, the offending text. The caller adds
//! the file name. We walk nodes by hand rather than derive serde: serde's errors lose the field
//! path, cannot list the allowed keys, and cross-field checks need the position of every value.
//!
//! [`Value`] and [`Map`] are generic over the caller's error type `E: From<Located>`, so a
//! crate can alias `Value<'a, MyError>` and use `?` with its own `Result` unchanged.

use std::fmt::{self, Display};
use std::marker::PhantomData;
use std::str::FromStr;

use marked_yaml::types::MarkedMappingNode;
use marked_yaml::{LoadError, LoaderOptions, Span};

pub use marked_yaml::Node;

/// A rejection at a place in the document: position, field path, offending text and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// 1-based (line, column); (0, 0) when there is no position.
    pub pos: (usize, usize),
    /// The field's dotted path, e.g. `vrs[0].interfaces[1].mac`; empty for the whole document.
    pub path: String,
    /// The offending text, when there is one.
    pub value: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl Located {
    fn new(pos: (usize, usize), path: &str, value: Option<&str>, message: String) -> Located {
        Located { pos, path: path.to_string(), value: value.map(str::to_string), message }
    }
}

impl Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ":{}:{}", self.pos.0, self.pos.1)?;
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Located {}

/// Parses a document whose top level is a mapping. Anchors, tags and repeated keys are syntax
/// errors: the first two hide where a value came from, the third is always a typo.
///
/// `top_keys` names the expected top-level keys in the error for a document that is not a
/// mapping, e.g. `"hosts:, ports:"`.
pub fn parse_document(text: &str, top_keys: &str) -> Result<Node, Located> {
    let options = LoaderOptions::default().error_on_duplicate_keys(true);
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        let (pos, message) = match &e {
            LoadError::TopLevelMustBeMapping(m) => {
                (pos_of(Some(m)), format!("the top level must be a mapping ({top_keys})"))
            }
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
        Located::new(pos, "", None, message)
    })
}

fn pos_of(m: Option<&marked_yaml::Marker>) -> (usize, usize) {
    m.map_or((0, 0), |m| (m.line(), m.column()))
}

/// A value in the document, with its field path and position; its checks fail with `E`.
pub struct Value<'a, E = Located> {
    node: &'a Node,
    path: String,
    pos: (usize, usize),
    error: PhantomData<fn() -> E>,
}

impl<E> Clone for Value<'_, E> {
    fn clone(&self) -> Self {
        Value { node: self.node, path: self.path.clone(), pos: self.pos, error: PhantomData }
    }
}

impl<E> fmt::Debug for Value<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Value")
            .field("node", self.node)
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish()
    }
}

impl<'a, E: From<Located>> Value<'a, E> {
    fn new(node: &'a Node, path: String, pos: (usize, usize)) -> Value<'a, E> {
        Value { node, path, pos, error: PhantomData }
    }

    /// The document's root.
    pub fn root(node: &'a Node) -> Value<'a, E> {
        Value::new(node, String::new(), node_pos(node))
    }

    /// 1-based (line, column).
    pub fn pos(&self) -> (usize, usize) {
        self.pos
    }

    /// The field's dotted path; empty for the root.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// 1-based line.
    pub fn line(&self) -> usize {
        self.pos.0
    }

    /// A [`Located`] about this value, naming `value` when given.
    pub fn locate(&self, value: Option<&str>, message: impl Display) -> Located {
        Located::new(self.pos, &self.path, value, message.to_string())
    }

    /// An error about this value that quotes no value (wrong shape, missing, conflicting).
    pub fn error(&self, message: impl Display) -> E {
        self.locate(None, message).into()
    }

    /// An error about this value, naming the offending text.
    pub fn bad(&self, value: &str, message: impl Display) -> E {
        self.locate(Some(value), message).into()
    }

    /// True for an empty value, `~` or `null`: the same as leaving the key out.
    pub fn is_null(&self) -> bool {
        matches!(self.node, Node::Scalar(s) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// True for a list.
    pub fn is_list(&self) -> bool {
        matches!(self.node, Node::Sequence(_))
    }

    /// True for a mapping (key: value).
    pub fn is_mapping(&self) -> bool {
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
    pub fn text(&self) -> Result<&'a str, E> {
        match self.node {
            Node::Scalar(_) if self.is_null() => Err(self.error("a value is required")),
            Node::Scalar(s) => Ok(s.as_str()),
            _ => Err(self.error(format_args!("expected a single value, found {}", self.shape()))),
        }
    }

    /// Parses the value with `FromStr`; `what` names the expected thing in the error.
    pub fn parse<T: FromStr>(&self, what: &str) -> Result<T, E> {
        let s = self.text()?;
        s.parse().map_err(|_| self.bad(s, format_args!("invalid {what} {s:?}")))
    }

    /// A plain decimal integer in `lo..=hi`.
    pub fn int<T: TryFrom<u64>>(&self, what: &str, lo: u64, hi: u64) -> Result<T, E> {
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
    pub fn bool(&self) -> Result<bool, E> {
        match self.text()? {
            "true" | "True" | "TRUE" => Ok(true),
            "false" | "False" | "FALSE" => Ok(false),
            s => Err(self.bad(s, format_args!("expected true or false, not {s:?}"))),
        }
    }

    /// The items of a list; an empty value is an empty list.
    pub fn list(&self) -> Result<Vec<Value<'a, E>>, E> {
        match self.node {
            Node::Sequence(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, node)| Value::new(node, format!("{}[{i}]", self.path), node_pos(node)))
                .collect()),
            _ if self.is_null() => Ok(Vec::new()),
            _ => Err(self.error(format_args!("expected a list, found {}", self.shape()))),
        }
    }

    /// Like [`Value::list`], but a single value is a list of one.
    pub fn list_or_one(&self) -> Result<Vec<Value<'a, E>>, E> {
        match self.node {
            Node::Scalar(_) if !self.is_null() => Ok(vec![self.clone()]),
            _ => self.list(),
        }
    }

    /// A mapping whose keys must all be in `allowed`.
    pub fn map(&self, allowed: &[&str]) -> Result<Map<'a, E>, E> {
        let map = self.mapping()?;
        map.only(allowed)?;
        Ok(map)
    }

    /// A mapping with any keys; call [`Map::only`] once the allowed keys are known.
    pub fn mapping(&self) -> Result<Map<'a, E>, E> {
        match self.node {
            Node::Mapping(m) => {
                Ok(Map { node: m, path: self.path.clone(), pos: self.pos, error: PhantomData })
            }
            _ if self.is_null() => Err(self.error("a mapping (key: value) is required")),
            _ => {
                Err(self
                    .error(format_args!("expected a mapping (key: value), found {}", self.shape())))
            }
        }
    }
}

/// A mapping in the document; its checks fail with `E`.
pub struct Map<'a, E = Located> {
    node: &'a MarkedMappingNode,
    path: String,
    pos: (usize, usize),
    error: PhantomData<fn() -> E>,
}

impl<E> Clone for Map<'_, E> {
    fn clone(&self) -> Self {
        Map { node: self.node, path: self.path.clone(), pos: self.pos, error: PhantomData }
    }
}

impl<E> fmt::Debug for Map<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Map")
            .field("node", self.node)
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish()
    }
}

impl<'a, E: From<Located>> Map<'a, E> {
    /// The path of the value under `key`.
    pub fn child_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// 1-based (line, column) of the mapping.
    pub fn pos(&self) -> (usize, usize) {
        self.pos
    }

    /// The mapping's dotted path; empty for the root.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Rejects keys outside `allowed`, listing the allowed ones: catches typos like `adresses`.
    pub fn only(&self, allowed: &[&str]) -> Result<(), E> {
        match self.node.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(Located::new(
                pos_of(k.span().start()),
                &self.child_path(k.as_str()),
                Some(k.as_str()),
                format!("unknown key {:?} (allowed: {})", k.as_str(), allowed.join(", ")),
            )
            .into()),
        }
    }

    /// The entries in file order, empty values included.
    pub fn entries(&self) -> Vec<(String, Value<'a, E>)> {
        self.node
            .iter()
            .map(|(k, node)| {
                let v = Value::new(node, self.child_path(k.as_str()), value_pos(k.span(), node));
                (k.as_str().to_string(), v)
            })
            .collect()
    }

    /// The value under `key`, or `None` when it is absent or empty.
    pub fn get(&self, key: &str) -> Option<Value<'a, E>> {
        let (k, node) = self.node.get_key_value(key)?;
        let value = Value::new(node, self.child_path(key), value_pos(k.span(), node));
        (!value.is_null()).then_some(value)
    }

    /// The items of the list under `key`; an absent key is an empty list.
    pub fn list(&self, key: &str) -> Result<Vec<Value<'a, E>>, E> {
        self.get(key).map_or(Ok(Vec::new()), |v| v.list())
    }

    /// The value under `key`, which must be present and not empty.
    pub fn req(&self, key: &str) -> Result<Value<'a, E>, E> {
        self.get(key).ok_or_else(|| {
            let pos = match self.node.get_key_value(key) {
                Some((k, _)) => pos_of(k.span().start()),
                None => self.pos,
            };
            Located::new(
                pos,
                &self.child_path(key),
                None,
                format!("required field {key:?} is missing"),
            )
            .into()
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

    type V<'a> = Value<'a>;

    fn root(text: &str) -> Node {
        parse_document(text, "a:").unwrap()
    }

    #[test]
    fn paths_and_positions_follow_the_document() {
        let doc = root("a:\n  - x: 1\n    y: [2, three]\n");
        let a = V::root(&doc).map(&["a"]).unwrap().req("a").unwrap();
        let item = &a.list().unwrap()[0];
        let m = item.map(&["x", "y"]).unwrap();
        let y = m.req("y").unwrap().list().unwrap();
        assert_eq!((y[1].path(), y[1].pos()), ("a[0].y[1]", (3, 12)));
        let e = y[1].int::<u8>("count", 0, 9).unwrap_err();
        assert_eq!(
            (e.pos, e.path.as_str(), e.value.as_deref()),
            ((3, 12), "a[0].y[1]", Some("three"))
        );
        assert_eq!(m.req("x").unwrap().int::<u8>("count", 0, 9).unwrap(), 1);
        let e = m.req("z").unwrap_err();
        assert_eq!((e.pos, e.path.as_str()), ((2, 5), "a[0].z"));
    }

    #[test]
    fn unknown_keys_list_the_allowed_ones() {
        let doc = root("name: a\nadresses: []\n");
        let e = V::root(&doc).map(&["name", "addresses"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            ":2:1: adresses: unknown key \"adresses\" (allowed: name, addresses)"
        );
    }

    #[test]
    fn empty_values_count_as_absent_and_point_at_their_key() {
        let doc = root("a:\nb: ~\nc: 3\nd: [4]\n");
        let m = V::root(&doc).mapping().unwrap();
        assert!(m.get("a").is_none() && m.get("b").is_none());
        assert_eq!(m.req("a").unwrap_err().pos.0, 1);
        assert_eq!(m.req("b").unwrap_err().pos.0, 2);
        let c = m.req("c").unwrap();
        assert_eq!(c.list().unwrap_err().message, "expected a list, found a single value");
        assert_eq!(c.list_or_one().unwrap()[0].path(), "c");
        assert_eq!(m.req("d").unwrap().list_or_one().unwrap()[0].path(), "d[0]");
        let keys: Vec<String> = m.entries().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "c", "d"]);
    }

    #[test]
    fn integers_are_plain_decimal_and_range_checked() {
        let doc = root("a: 0x10\nb: -1\nc: 70000\n");
        let m = V::root(&doc).mapping().unwrap();
        let a = m.req("a").unwrap().int::<u16>("MTU", 68, 9000).unwrap_err();
        assert_eq!(a.message, "MTU must be an integer in 68..=9000, not \"0x10\"");
        assert!(m.req("b").unwrap().int::<u16>("MTU", 68, 9000).is_err());
        let c = m.req("c").unwrap().int::<u16>("MTU", 68, 9000).unwrap_err();
        assert_eq!(c.message, "MTU 70000 is out of range 68..=9000");
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let e = parse_document("a: [1, 2\nb: 3\n", "a:").unwrap_err();
        assert_eq!(e.pos.0, 2);
        let e = parse_document("a: 1\nb: 2\na: 3\n", "a:").unwrap_err();
        assert_eq!(e.pos, (3, 1));
        assert_eq!(e.message, "key \"a\" appears twice in one mapping (first at line 1)");
        let e = parse_document("- a\n", "name:, dut:").unwrap_err();
        assert_eq!(e.message, "the top level must be a mapping (name:, dut:)");
    }
}
