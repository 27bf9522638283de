//! A thin reader over `marked_yaml` nodes that knows where it is: every value carries its
//! field path (`axis.values[2]`) and position, so each check can fail with an error naming
//! the file, line, column, field and offending value.

use std::fmt::{self, Display};

use marked_yaml::types::MarkedMappingNode;
use marked_yaml::{LoadError, LoaderOptions, Node, Span};

/// Why a scenario file was rejected. Displays as one line: `FILE:LINE:COL: FIELD: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// 1-based; 0 when there is no position (the file could not be read).
    pub line: usize,
    pub column: usize,
    /// The field's path, e.g. `axis.values[2]`; empty for the whole file.
    pub field: String,
    /// The offending text, when there is one.
    pub value: Option<String>,
    pub message: String,
}

impl ScenarioError {
    pub(crate) fn at(
        (line, column): (usize, usize),
        field: &str,
        value: Option<&str>,
        message: String,
    ) -> ScenarioError {
        ScenarioError {
            file: String::new(),
            line,
            column,
            field: field.to_string(),
            value: value.map(str::to_string),
            message,
        }
    }

    /// Names the file.
    pub fn in_file(mut self, file: &str) -> ScenarioError {
        if self.file.is_empty() {
            self.file = file.to_string();
        }
        self
    }
}

impl Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

pub(crate) type Result<T> = std::result::Result<T, ScenarioError>;

/// Parses a document whose top level is a mapping; anchors, tags and repeated keys are
/// errors.
pub(crate) fn parse_document(text: &str) -> Result<Node> {
    let options = LoaderOptions::default().error_on_duplicate_keys(true);
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        let (pos, message) = match &e {
            LoadError::TopLevelMustBeMapping(m) => (
                pos_of(Some(m)),
                "the top level must be a mapping (name:, dut:, axis:, ...)".into(),
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
        ScenarioError::at(pos, "", None, message)
    })
}

fn pos_of(m: Option<&marked_yaml::Marker>) -> (usize, usize) {
    m.map_or((0, 0), |m| (m.line(), m.column()))
}

/// A value in the document, with its field path and position.
#[derive(Clone, Debug)]
pub(crate) struct Value<'a> {
    node: &'a Node,
    pub(crate) path: String,
    pub(crate) pos: (usize, usize),
}

impl<'a> Value<'a> {
    pub(crate) fn root(node: &'a Node) -> Value<'a> {
        Value { node, path: String::new(), pos: node_pos(node) }
    }

    /// An error about this value that quotes no value.
    pub(crate) fn error(&self, message: impl Display) -> ScenarioError {
        ScenarioError::at(self.pos, &self.path, None, message.to_string())
    }

    /// An error about this value, naming the offending text.
    pub(crate) fn bad(&self, value: &str, message: impl Display) -> ScenarioError {
        ScenarioError::at(self.pos, &self.path, Some(value), message.to_string())
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self.node, Node::Scalar(s) if matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    fn shape(&self) -> &'static str {
        match self.node {
            Node::Scalar(_) => "a single value",
            Node::Mapping(_) => "a mapping (key: value)",
            Node::Sequence(_) => "a list",
        }
    }

    /// The text of a single value.
    pub(crate) fn text(&self) -> Result<&'a str> {
        match self.node {
            Node::Scalar(_) if self.is_null() => Err(self.error("a value is required")),
            Node::Scalar(s) => Ok(s.as_str()),
            _ => Err(self.error(format_args!("expected a single value, found {}", self.shape()))),
        }
    }

    /// A decimal integer in `lo..=hi` (k, M suffixes allowed: 16k = 16000).
    pub(crate) fn int(&self, what: &str, lo: u64, hi: u64) -> Result<u64> {
        let s = self.text()?;
        let n = parse_count(s).ok_or_else(|| {
            self.bad(s, format_args!("{what} must be a whole number in {lo}..={hi}, not {s:?}"))
        })?;
        if n < lo || n > hi {
            return Err(self.bad(s, format_args!("{what} {n} is out of range {lo}..={hi}")));
        }
        Ok(n)
    }

    /// A number of seconds in `lo..=hi`.
    pub(crate) fn secs(&self, what: &str, lo: f64, hi: f64) -> Result<f64> {
        let s = self.text()?;
        match s.trim_end_matches('s').parse::<f64>() {
            Ok(v) if v.is_finite() && (lo..=hi).contains(&v) => Ok(v),
            _ => Err(self.bad(s, format_args!("{what} must be seconds in {lo}..={hi}, not {s:?}"))),
        }
    }

    /// `true` or `false`.
    pub(crate) fn bool(&self) -> Result<bool> {
        match self.text()? {
            "true" | "True" | "TRUE" => Ok(true),
            "false" | "False" | "FALSE" => Ok(false),
            s => Err(self.bad(s, format_args!("expected true or false, not {s:?}"))),
        }
    }

    /// The items of a list; a single value is a list of one.
    pub(crate) fn list(&self) -> Result<Vec<Value<'a>>> {
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
            Node::Scalar(_) if !self.is_null() => Ok(vec![self.clone()]),
            _ if self.is_null() => Ok(Vec::new()),
            _ => Err(self.error(format_args!("expected a list, found {}", self.shape()))),
        }
    }

    /// A mapping whose keys must all be in `allowed`.
    pub(crate) fn map(&self, allowed: &[&str]) -> Result<Map<'a>> {
        let map = self.mapping()?;
        map.only(allowed)?;
        Ok(map)
    }

    /// A mapping with any keys.
    pub(crate) fn mapping(&self) -> Result<Map<'a>> {
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
pub(crate) struct Map<'a> {
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

    /// Rejects keys outside `allowed`, listing the allowed ones.
    pub(crate) fn only(&self, allowed: &[&str]) -> Result<()> {
        match self.node.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(ScenarioError::at(
                pos_of(k.span().start()),
                &self.child_path(k.as_str()),
                Some(k.as_str()),
                format!("unknown key {:?} (allowed: {})", k.as_str(), allowed.join(", ")),
            )),
        }
    }

    /// The entries in file order.
    pub(crate) fn entries(&self) -> Vec<(String, Value<'a>)> {
        self.node
            .iter()
            .map(|(k, node)| {
                let v = Value {
                    node,
                    path: self.child_path(k.as_str()),
                    pos: value_pos(k.span(), node),
                };
                (k.as_str().to_string(), v)
            })
            .collect()
    }

    /// The value under `key`, or `None` when it is absent or empty.
    pub(crate) fn get(&self, key: &str) -> Option<Value<'a>> {
        let (k, node) = self.node.get_key_value(key)?;
        let value = Value { node, path: self.child_path(key), pos: value_pos(k.span(), node) };
        (!value.is_null()).then_some(value)
    }

    /// The value under `key`, which must be present and not empty.
    pub(crate) fn req(&self, key: &str) -> Result<Value<'a>> {
        self.get(key).ok_or_else(|| {
            let pos = match self.node.get_key_value(key) {
                Some((k, _)) => pos_of(k.span().start()),
                None => self.pos,
            };
            ScenarioError::at(
                pos,
                &self.child_path(key),
                None,
                format!("required field {key:?} is missing"),
            )
        })
    }
}

fn value_pos(key: &Span, node: &Node) -> (usize, usize) {
    match node {
        Node::Scalar(s) if s.is_empty() => pos_of(key.start()),
        _ => node_pos(node),
    }
}

fn node_pos(node: &Node) -> (usize, usize) {
    match node {
        Node::Mapping(m) if !m.is_empty() => pos_of(m.keys().next().and_then(|k| k.span().start())),
        _ => pos_of(node.span().start()),
    }
}

/// A whole count: `512`, `16k`, `1M` (k, M, G: powers of 1000); `None` if not one.
pub fn parse_count(s: &str) -> Option<u64> {
    let v = crate::parse_rate(s).ok()?;
    (v.fract() == 0.0 && v <= u64::MAX as f64 && !s.contains('-')).then_some(v as u64)
}
