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
//!
//! Input is untrusted, so every step is bounded: [`read_file`] reads only regular files and at
//! most a given size, [`parse_document`] refuses nesting deeper than [`MAX_DEPTH`] before the
//! (recursive) tree builder sees it, and an error quotes at most [`QUOTE_MAX`] bytes of a value
//! ([`quote`], [`bound`]).

use std::fmt::{self, Display};
use std::io::{self, Read};
use std::marker::PhantomData;
use std::path::Path;
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
    /// A rejection; a long `value` is cut, in the message too (see [`bound`]), and so is a long
    /// path (a key in the document may be long).
    fn new(pos: (usize, usize), path: &str, value: Option<&str>, message: String) -> Located {
        let (value, message) = bound(value, message);
        Located { pos, path: clip(path).into_owned(), value, message }
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
///
/// A document nested deeper than [`MAX_DEPTH`] is refused before it is built: the tree builder
/// recurses once per level, so 40,000 nested lists would overflow the stack.
pub fn parse_document(text: &str, top_keys: &str) -> Result<Node, Located> {
    check_depth(text)?;
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
                    "key {} appears twice in one mapping (first at line {})",
                    quote(d.key.as_str()),
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

/// Lists and mappings may nest this deep (the top-level mapping is level 1); a topology or
/// scenario needs fewer than 10.
pub const MAX_DEPTH: usize = 64;

/// Refuses a document that nests lists and mappings deeper than [`MAX_DEPTH`], by walking the
/// parser's events: the event parser keeps its state in a vector, so this pass does not recurse
/// however deep the text goes. Syntax errors are left to the real parse, which stops at the same
/// place.
fn check_depth(text: &str) -> Result<(), Located> {
    use yaml_rust2::parser::{Event, Parser};
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    loop {
        let (event, mark) = match parser.next_token() {
            Ok(next) => next,
            // The scanner reads ahead (up to 1024 characters, for a possible key) and has a
            // flow-nesting limit of its own, 255, which it may reach before we see level 65.
            Err(e) if e.info() == "recursion limit exceeded" => {
                return Err(too_deep((e.marker().line(), e.marker().col() + 1)))
            }
            Err(_) => return Ok(()),
        };
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    // marked-yaml's columns are the parser's plus one; keep to them.
                    return Err(too_deep((mark.line(), mark.col() + 1)));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            // Only the first document is read.
            Event::DocumentEnd | Event::StreamEnd => return Ok(()),
            _ => {}
        }
    }
}

fn too_deep(pos: (usize, usize)) -> Located {
    let message =
        format!("nesting is too deep: more than {MAX_DEPTH} levels of lists and mappings");
    Located::new(pos, "", None, message)
}

/// An error quotes at most this many bytes of an offending value.
pub const QUOTE_MAX: usize = 80;

/// `s` quoted as `{s:?}` does, unless that takes more than [`QUOTE_MAX`] bytes: then as much as
/// fits, an ellipsis, and the value's length, e.g. `"aaaa…" (1048576 bytes)`.
pub fn quote(s: &str) -> String {
    quote_max(s, QUOTE_MAX)
}

/// Like [`quote`], with at most `max` bytes of `s` (as escaped) between the quotes.
pub fn quote_max(s: &str, max: usize) -> String {
    if s.len() <= max {
        let whole = format!("{s:?}");
        if whole.len() <= max + 2 {
            return whole;
        }
    }
    let mut out = String::from('"');
    for c in s.chars() {
        let esc = c.escape_debug();
        if out.len() - 1 + esc.len() > max {
            break;
        }
        out.extend(esc);
    }
    out.push_str(&format!("…\" ({} bytes)", s.len()));
    out
}

/// `s` cut on a char boundary so that, with an ellipsis, it takes at most [`QUOTE_MAX`] bytes;
/// `s` itself when it fits.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    if s.len() <= QUOTE_MAX {
        return s.into();
    }
    format!("{}…", prefix(s, QUOTE_MAX - '…'.len_utf8())).into()
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A value quoted again in one message is cut shorter still.
const REQUOTE_MAX: usize = 16;

/// `text` with every `pat` replaced: the first by `first`, the others by `rest`.
fn replace_twice(text: &str, pat: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    for (i, piece) in text.split(pat).enumerate() {
        match i {
            0 => {}
            1 => out.push_str(first),
            _ => out.push_str(rest),
        }
        out.push_str(piece);
    }
    out
}

/// The longest message an error keeps; past it, the message is cut. A safety net: values are
/// cut to [`QUOTE_MAX`] bytes first, so only a message that quotes something it was not given
/// as its value gets here.
pub const MESSAGE_MAX: usize = 1024;

/// Bounds an error's value and message: a value longer than [`QUOTE_MAX`] bytes is cut (see
/// [`clip`]), and so is every copy of it in the message, quoted (`{v:?}`, see [`quote`]) or
/// bare, the first to [`QUOTE_MAX`] bytes and any other to 16; then a message still longer than
/// [`MESSAGE_MAX`] is cut. Errors built by this crate are bounded already; callers with error
/// types of their own apply it too. Bounding twice changes nothing.
pub fn bound(value: Option<&str>, mut message: String) -> (Option<String>, String) {
    if let Some(v) = value.filter(|v| v.len() > QUOTE_MAX) {
        let debug = format!("{v:?}");
        let quoted = message.contains(&debug);
        if quoted {
            message = replace_twice(&message, &debug, &quote(v), &quote_max(v, REQUOTE_MAX));
        }
        if message.contains(v) {
            let again = format!("{}…", prefix(v, REQUOTE_MAX));
            let first =
                if quoted { again.clone() } else { format!("{} ({} bytes)", clip(v), v.len()) };
            message = replace_twice(&message, v, &first, &again);
        }
    }
    if message.len() > MESSAGE_MAX {
        message = format!("{}… ({} bytes)", prefix(&message, MESSAGE_MAX), message.len());
    }
    (value.map(|v| clip(v).into_owned()), message)
}

/// Reads a whole text file of at most `cap` bytes, refusing anything but a regular file.
///
/// A device (`/dev/zero`), a FIFO, a socket or a directory is refused before any byte is read:
/// by its metadata before it is opened, and again by the opened file's own metadata (opening is
/// non-blocking, so a FIFO put in its place meanwhile does not wait for a writer). At most
/// `cap + 1` bytes are read, so a file that grows after its size was checked is still refused
/// without reading on. The errors name what is wrong but not the file: callers add it.
pub fn read_file(path: &Path, cap: u64) -> io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    regular(&std::fs::metadata(path)?, cap)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    regular(&meta, cap)?;
    let mut bytes = Vec::with_capacity(meta.len().min(cap) as usize + 1);
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(None, cap));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text (byte {at})"))
    })
}

fn regular(meta: &std::fs::Metadata, cap: u64) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_file() {
        return if meta.len() > cap { Err(too_large(Some(meta.len()), cap)) } else { Ok(()) };
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "of an unknown kind"
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file ({what})")))
}

fn too_large(len: Option<u64>, cap: u64) -> io::Error {
    const MIB: u64 = 1 << 20;
    let limit =
        if cap.is_multiple_of(MIB) { format!("{} MiB", cap / MIB) } else { format!("{cap} bytes") };
    let size = len.map_or(String::new(), |n| format!(" ({n} bytes)"));
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("file too large{size}: the limit is {limit}"),
    )
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
        s.parse().map_err(|_| self.bad(s, format_args!("invalid {what} {}", quote(s))))
    }

    /// A plain decimal integer in `lo..=hi`.
    pub fn int<T: TryFrom<u64>>(&self, what: &str, lo: u64, hi: u64) -> Result<T, E> {
        let s = self.text()?;
        let n: u64 = match s.parse() {
            Ok(n) if s.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                let q = quote(s);
                return Err(
                    self.bad(s, format_args!("{what} must be an integer in {lo}..={hi}, not {q}"))
                );
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
            s => Err(self.bad(s, format_args!("expected true or false, not {}", quote(s)))),
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
                format!("unknown key {} (allowed: {})", quote(k.as_str()), allowed.join(", ")),
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

    /// Runs `f` on a thread with a 256 KiB stack: a parser that recursed once per level would
    /// overflow it (and abort the process) long before 40,000 levels.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new().stack_size(256 << 10).spawn(f).unwrap().join().unwrap()
    }

    #[test]
    fn deep_nesting_is_refused_before_the_parser_recurses() {
        const N: usize = 40_000;
        let flow = format!("a: {}{}\n", "[".repeat(N), "]".repeat(N));
        let block = format!("a:\n  {}x\n", "- ".repeat(N));
        let unclosed = format!("a: {}\n", "[{b: ".repeat(N));
        let lines = format!("a: {}\n", "[\n ".repeat(N));
        let mixed = format!("a:\n  {}{}{}\n", "- ".repeat(60), "[".repeat(9), "]".repeat(9));
        for (what, text, pos) in [
            ("block", block, (2, 1 + 2 * MAX_DEPTH)),
            // The scanner stops at its own limit, level 256, before level 65 is parsed.
            ("flow", flow, (1, 4 + 255)),
            ("unclosed", unclosed, (1, 4 + 5 * 127 + 1)),
            ("lines", lines, (256, 2)),
            // 60 block levels under the top-level mapping, then flow: level 65 is the 4th '['.
            ("mixed", mixed, (2, 3 + 2 * 60 + 3)),
        ] {
            let e = on_small_stack(move || parse_document(&text, "a:")).unwrap_err();
            assert_eq!(
                e.message,
                format!("nesting is too deep: more than {MAX_DEPTH} levels of lists and mappings"),
                "{what}"
            );
            assert_eq!(e.pos, pos, "{what}");
        }
        // 64 levels are fine (the top-level mapping is one), 65 are not.
        let nest = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert!(parse_document(&nest(MAX_DEPTH - 1), "a:").is_ok());
        assert!(parse_document(&nest(MAX_DEPTH), "a:").is_err());
        // A syntax error is still the parser's to report.
        assert!(parse_document("a: [1\n", "a:").unwrap_err().message.contains("flow sequence"));
    }

    #[test]
    fn errors_quote_at_most_a_bounded_part_of_a_value() {
        // Long enough that quoting it whole would be absurd (the 40 MiB line once seen in an
        // error is the same case, 40 times slower to parse in a test build).
        let long = "x".repeat(1 << 20);
        let doc = root(&format!("n: {long}\nb: {long}\n? {long}\n: 1\n"));
        let m = V::root(&doc).mapping().unwrap();
        let errors = [
            m.req("n").unwrap().int::<u8>("count", 0, 9).unwrap_err(),
            m.req("n").unwrap().parse::<std::net::IpAddr>("address").unwrap_err(),
            m.req("b").unwrap().bool().unwrap_err(),
            m.only(&["n", "b"]).unwrap_err(),
            m.req("n").unwrap().bad(&long, format_args!("no port named {long} ({long:?})")),
            m.req("n").unwrap().bad(&long, format_args!("{long:?}: unknown ({long:?}, {long})")),
        ];
        for e in errors {
            let shown = e.to_string();
            assert!(shown.len() < 300, "{} bytes: {}", shown.len(), &shown[..300]);
            assert!(shown.contains("…") && shown.contains("(1048576 bytes)"), "{shown}");
            let value = e.value.unwrap();
            assert!(value.len() <= QUOTE_MAX && value.ends_with('…'), "{value}");
        }
        // A second copy in one message is cut shorter.
        let e = m.req("n").unwrap().bad(&long, format_args!("{long:?} is not ({long:?}, {long})"));
        let x80 = "x".repeat(80);
        let x16 = "x".repeat(16);
        assert_eq!(
            e.message,
            format!("\"{x80}…\" (1048576 bytes) is not (\"{x16}…\" (1048576 bytes), {x16}…)")
        );
        // A short value is quoted whole; a long one is cut on a char boundary.
        assert_eq!(quote("ab\"c"), r#""ab\"c""#);
        let wide = "é".repeat(100);
        let q = quote(&wide);
        assert!(q.starts_with("\"éé") && q.ends_with("…\" (200 bytes)") && q.len() < 100, "{q}");
        assert_eq!(clip(&wide).len(), 79);
        assert_eq!(quote_max("root:$6$salt$hash", 8), r#""root:$6$…" (17 bytes)"#);
        assert_eq!(quote_max("a\tb", 4), r#""a\tb""#);
        assert_eq!(quote_max("a\tb", 3), r#""a\t…" (3 bytes)"#);
        // Bounding twice changes nothing.
        let once = bound(Some(&wide), format!("bad {wide:?} here"));
        assert_eq!(bound(once.0.as_deref(), once.1.clone()), once);
        // A message that quotes something it was not given is cut as a last resort.
        let (_, m) = bound(None, long.clone());
        assert!(m.len() < MESSAGE_MAX + 40 && m.ends_with("… (1048576 bytes)"));
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("yamlpath-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn read_file_takes_regular_files_up_to_a_size() {
        let dir = scratch("read");
        let f = dir.join("t.yaml");
        std::fs::write(&f, "a: 1\n").unwrap();
        assert_eq!(read_file(&f, 5).unwrap(), "a: 1\n");
        let e = read_file(&f, 4).unwrap_err();
        assert_eq!(e.to_string(), "file too large (5 bytes): the limit is 4 bytes");
        std::fs::write(&f, vec![b'a'; 3 << 20]).unwrap();
        let e = read_file(&f, 2 << 20).unwrap_err();
        assert_eq!(e.to_string(), "file too large (3145728 bytes): the limit is 2 MiB");
        std::fs::write(&f, b"a: \xff\n").unwrap();
        assert_eq!(read_file(&f, 100).unwrap_err().to_string(), "not UTF-8 text (byte 3)");

        // /dev/zero is endless: refused at once, with nothing read.
        let e = read_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a character device)");
        let e = read_file(&dir, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file (a directory)");
        // A FIFO with no writer: refused, not waited on.
        let fifo = dir.join("fifo");
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            let e = read_file(&fifo, 1 << 20).unwrap_err();
            assert_eq!(e.to_string(), "not a regular file (a FIFO)");
        } else {
            eprintln!("skipping the FIFO case: mkfifo failed");
        }
        assert_eq!(read_file(&dir.join("none"), 1).unwrap_err().kind(), io::ErrorKind::NotFound);
        let _ = std::fs::remove_dir_all(&dir);
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
