//! Prefix list files, and where `scripts/fetch-prefixes` caches the real ones.
//!
//! Format: one route per line, `prefix/len next-hop-id`, e.g. `1.0.0.0/24 2` or
//! `2001:db8::/32 17`. Fields are separated by blanks; `#` starts a comment (whole line or
//! trailing); blank lines are ignored; IPv4 and IPv6 may be mixed. A prefix must not have
//! host bits set (`10.1.0.0/8` is an error that suggests `10.0.0.0/8`: a typo in a route
//! file should not silently become a different route), and may appear only once.
//!
//! Errors name the source, line, field and value:
//! `ipv4.txt:17: prefix "1.2.3.4/33": invalid prefix length`.

use std::collections::hash_map::Entry;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::{Ipv4Net, Ipv6Net};
use rustc_hash::FxHashMap;

/// An address family, and the cached file that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`ipv4.txt`).
    Ipv4,
    /// IPv6 (`ipv6.txt`).
    Ipv6,
}

impl Family {
    /// The cache file's name.
    pub fn file_name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4.txt",
            Family::Ipv6 => "ipv6.txt",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        })
    }
}

/// A name that is no address family.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown address family {0:?} (expected ipv4 or ipv6)")]
pub struct UnknownFamily(pub String);

impl std::str::FromStr for Family {
    type Err = UnknownFamily;

    fn from_str(s: &str) -> Result<Self, UnknownFamily> {
        match s.to_ascii_lowercase().as_str() {
            "ipv4" | "v4" | "4" => Ok(Family::Ipv4),
            "ipv6" | "v6" | "6" => Ok(Family::Ipv6),
            _ => Err(UnknownFamily(s.to_string())),
        }
    }
}

/// Where `scripts/fetch-prefixes` writes: `$ROUTEPLEX_CACHE/prefixes`, else
/// `$XDG_CACHE_HOME/routeplex/prefixes`, else `$HOME/.cache/routeplex/prefixes` (the script's
/// rule; empty variables count as unset). Without any of them, a directory under the system
/// temp dir, which will simply be empty.
pub fn cache_dir() -> PathBuf {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = var("ROUTEPLEX_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|x| x.join("routeplex")))
        .or_else(|| var("HOME").map(|h| h.join(".cache").join("routeplex")))
        .unwrap_or_else(|| std::env::temp_dir().join("routeplex"));
    base.join("prefixes")
}

/// The cached prefix file of `family`, if `scripts/fetch-prefixes` has written it (the script
/// writes each file atomically, so present means complete).
pub fn cached(family: Family) -> Option<PathBuf> {
    let p = cache_dir().join(family.file_name());
    p.is_file().then_some(p)
}

/// The routes of a prefix file, in file order. Next-hop ids are as written (`u32`); fitting
/// them into a FIB's 16-bit [`NextHop`](crate::NextHop) is the caller's policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixList {
    /// IPv4 routes.
    pub v4: Vec<(Ipv4Net, u32)>,
    /// IPv6 routes.
    pub v6: Vec<(Ipv6Net, u32)>,
}

impl PrefixList {
    /// Routes of both families.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// True when there are no routes.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// A prefix file that could not be read or parsed.
#[derive(Debug)]
pub struct PrefixFileError {
    /// The file (or other source) name given to [`parse`] / [`load`].
    pub source: String,
    /// 1-based line number; 0 for I/O errors.
    pub line: usize,
    /// What went wrong.
    pub kind: PrefixFileErrorKind,
}

/// What was wrong with a line (or the file).
#[derive(Debug)]
#[non_exhaustive]
pub enum PrefixFileErrorKind {
    /// The file could not be read.
    Io(std::io::Error),
    /// The part before `/` is not an IPv4 or IPv6 address.
    InvalidAddress {
        /// The prefix field as written.
        prefix: String,
    },
    /// No `/len`.
    MissingLength {
        /// The prefix field as written.
        prefix: String,
    },
    /// The length is not a number in `0..=32` (IPv4) or `0..=128` (IPv6).
    InvalidLength {
        /// The prefix field as written.
        prefix: String,
    },
    /// Bits set after the prefix length.
    HostBitsSet {
        /// The prefix field as written.
        prefix: String,
        /// The prefix with host bits cleared.
        masked: String,
    },
    /// A prefix with no next-hop field.
    MissingNextHop {
        /// The prefix field as written.
        prefix: String,
    },
    /// The next-hop field is not a decimal number.
    InvalidNextHop {
        /// The next-hop field as written.
        value: String,
    },
    /// The next-hop field is larger than `u32::MAX`.
    NextHopOutOfRange {
        /// The next-hop field as written.
        value: String,
    },
    /// Something after the next-hop field.
    ExtraField {
        /// The first extra field.
        value: String,
    },
    /// The prefix was already listed.
    Duplicate {
        /// The prefix field as written.
        prefix: String,
        /// Where it was first listed.
        first_line: usize,
    },
}

impl fmt::Display for PrefixFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PrefixFileErrorKind as E;
        if let E::Io(e) = &self.kind {
            return write!(f, "{}: {e}", self.source);
        }
        write!(f, "{}:{}: ", self.source, self.line)?;
        match &self.kind {
            E::Io(_) => unreachable!(),
            E::InvalidAddress { prefix } => write!(f, "prefix {prefix:?}: invalid address"),
            E::MissingLength { prefix } => write!(f, "prefix {prefix:?}: missing \"/length\""),
            E::InvalidLength { prefix } => write!(f, "prefix {prefix:?}: invalid prefix length"),
            E::HostBitsSet { prefix, masked } => {
                write!(f, "prefix {prefix:?}: host bits set (did you mean {masked}?)")
            }
            E::MissingNextHop { prefix } => write!(f, "prefix {prefix:?}: missing next-hop"),
            E::InvalidNextHop { value } => write!(f, "next-hop {value:?}: not a number"),
            E::NextHopOutOfRange { value } => {
                write!(f, "next-hop {value:?}: out of range (at most {})", u32::MAX)
            }
            E::ExtraField { value } => write!(f, "unexpected field {value:?} after the next-hop"),
            E::Duplicate { prefix, first_line } => {
                write!(f, "prefix {prefix:?}: listed twice (first on line {first_line})")
            }
        }
    }
}

impl std::error::Error for PrefixFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            PrefixFileErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads and parses a prefix file; errors are named after `path` as given.
pub fn load(path: &Path) -> Result<PrefixList, PrefixFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| PrefixFileError {
        source: name.clone(),
        line: 0,
        kind: PrefixFileErrorKind::Io(e),
    })?;
    parse(&text, &name)
}

/// Parses prefix-file text; `source` names it in errors.
///
/// Duplicates are found without a hash set while the prefixes come in strictly increasing
/// order (family, address, length), as `scripts/fetch-prefixes` writes them: then a repeat
/// can only be the line before. The first line out of order sends the whole text to the
/// general parser, which keeps a set; both report the same first error.
pub fn parse(text: &str, source: &str) -> Result<PrefixList, PrefixFileError> {
    let mut list = PrefixList::default();
    let mut last: Option<(bool, u128, u8)> = None;
    for (i, raw) in text.lines().enumerate() {
        let (net, nh) = match fast_line(raw.as_bytes()) {
            Some((n, nh)) => (Net::V4(n), nh),
            None => match general_line(raw, source, i + 1)? {
                Some((net, nh, _)) => (net, nh),
                None => continue,
            },
        };
        let key = net.key();
        if last.is_some_and(|l| l >= key) {
            return parse_unordered(text, source);
        }
        last = Some(key);
        match net {
            Net::V4(n) => list.v4.push((n, nh)),
            Net::V6(n) => list.v6.push((n, nh)),
        }
    }
    Ok(list)
}

/// One line, any form: its route and its prefix as written, `None` for a blank or comment
/// line, or its error.
fn general_line<'a>(
    raw: &'a str,
    source: &str,
    line: usize,
) -> Result<Option<(Net, u32, &'a str)>, PrefixFileError> {
    let err = |kind| PrefixFileError { source: source.to_string(), line, kind };
    let content = raw.split_once('#').map_or(raw, |(c, _)| c);
    let mut fields = content.split_ascii_whitespace();
    let Some(prefix) = fields.next() else { return Ok(None) };
    let net = parse_prefix(prefix).map_err(err)?;
    let value = fields
        .next()
        .ok_or_else(|| err(PrefixFileErrorKind::MissingNextHop { prefix: prefix.into() }))?;
    let nh = parse_next_hop(value).map_err(err)?;
    if let Some(extra) = fields.next() {
        return Err(err(PrefixFileErrorKind::ExtraField { value: extra.into() }));
    }
    Ok(Some((net, nh, prefix)))
}

/// The common line, `a.b.c.d/len next-hop` with nothing after it but blanks or a comment,
/// read byte by byte (a full table is half a million of them); `None` for anything else,
/// which [`general_line`] then reads, errors and all.
fn fast_line(b: &[u8]) -> Option<(Ipv4Net, u32)> {
    let mut at = 0;
    let mut octets = [0u8; 4];
    for (k, o) in octets.iter_mut().enumerate() {
        let (v, next) = digits(b, at, 3)?;
        *o = u8::try_from(v).ok()?;
        at = next;
        let sep = if k == 3 { b'/' } else { b'.' };
        (b.get(at) == Some(&sep)).then_some(())?;
        at += 1;
    }
    let (len, next) = digits(b, at, 2)?;
    at = next;
    let n = Ipv4Net::new(octets.into(), u8::try_from(len).ok()?).ok()?;
    (n.trunc() == n).then_some(())?;
    let blanks = b[at..].iter().take_while(|c| matches!(c, b' ' | b'\t')).count();
    (blanks > 0).then_some(())?;
    at += blanks;
    let end = at + b[at..].iter().take_while(|c| c.is_ascii_digit()).count();
    if end == at || end - at > 10 {
        return None;
    }
    let nh =
        u32::try_from(b[at..end].iter().fold(0u64, |n, &c| n * 10 + u64::from(c - b'0'))).ok()?;
    let rest = b[end..].iter().position(|c| !c.is_ascii_whitespace()).map(|p| b[end + p]);
    matches!(rest, None | Some(b'#')).then_some((n, nh))
}

/// A decimal of 1..=`max` digits at `b[at..]` without a leading zero (as `Ipv4Addr`'s parser
/// wants), and where it ends.
fn digits(b: &[u8], at: usize, max: usize) -> Option<(u32, usize)> {
    let n = b.get(at..)?.iter().take(max + 1).take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > max || (n > 1 && b[at] == b'0') {
        return None;
    }
    Some((b[at..at + n].iter().fold(0, |v, &c| v * 10 + u32::from(c - b'0')), at + n))
}

/// [`parse`] for text in any order: duplicates are found with a set.
fn parse_unordered(text: &str, source: &str) -> Result<PrefixList, PrefixFileError> {
    let mut list = PrefixList::default();
    // Net::key → line, to report duplicates.
    let mut seen: FxHashMap<(bool, u128, u8), usize> = FxHashMap::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some((net, nh, prefix)) = general_line(raw, source, line)? else { continue };
        match seen.entry(net.key()) {
            Entry::Occupied(first) => {
                return Err(PrefixFileError {
                    source: source.to_string(),
                    line,
                    kind: PrefixFileErrorKind::Duplicate {
                        prefix: prefix.into(),
                        first_line: *first.get(),
                    },
                })
            }
            Entry::Vacant(v) => {
                v.insert(line);
            }
        }
        match net {
            Net::V4(n) => list.v4.push((n, nh)),
            Net::V6(n) => list.v6.push((n, nh)),
        }
    }
    Ok(list)
}

enum Net {
    V4(Ipv4Net),
    V6(Ipv6Net),
}

impl Net {
    /// (is IPv6, address, length): equal for the same prefix, and ordered as a sorted file is.
    fn key(&self) -> (bool, u128, u8) {
        match self {
            Net::V4(n) => (false, u128::from(u32::from(n.addr())), n.prefix_len()),
            Net::V6(n) => (true, u128::from(n.addr()), n.prefix_len()),
        }
    }
}

fn parse_prefix(prefix: &str) -> Result<Net, PrefixFileErrorKind> {
    let p = || prefix.to_string();
    let Some((addr, len)) = prefix.split_once('/') else {
        return Err(PrefixFileErrorKind::MissingLength { prefix: p() });
    };
    let len: Option<u8> =
        if !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit()) && len.len() <= 3 {
            len.parse().ok()
        } else {
            None
        };
    if addr.contains(':') {
        let a: Ipv6Addr =
            addr.parse().map_err(|_| PrefixFileErrorKind::InvalidAddress { prefix: p() })?;
        let len = len.filter(|&l| l <= 128);
        let n = len
            .and_then(|l| Ipv6Net::new(a, l).ok())
            .ok_or_else(|| PrefixFileErrorKind::InvalidLength { prefix: p() })?;
        if n.trunc() != n {
            return Err(PrefixFileErrorKind::HostBitsSet {
                prefix: p(),
                masked: n.trunc().to_string(),
            });
        }
        Ok(Net::V6(n))
    } else {
        let a: Ipv4Addr =
            addr.parse().map_err(|_| PrefixFileErrorKind::InvalidAddress { prefix: p() })?;
        let n = len
            .filter(|&l| l <= 32)
            .and_then(|l| Ipv4Net::new(a, l).ok())
            .ok_or_else(|| PrefixFileErrorKind::InvalidLength { prefix: p() })?;
        if n.trunc() != n {
            return Err(PrefixFileErrorKind::HostBitsSet {
                prefix: p(),
                masked: n.trunc().to_string(),
            });
        }
        Ok(Net::V4(n))
    }
}

fn parse_next_hop(value: &str) -> Result<u32, PrefixFileErrorKind> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PrefixFileErrorKind::InvalidNextHop { value: value.into() });
    }
    value.parse().map_err(|_| PrefixFileErrorKind::NextHopOutOfRange { value: value.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, "ipv4.txt").expect_err("should fail").to_string()
    }

    #[test]
    fn parses_mixed_families_comments_and_blank_lines() {
        let text = "# header\n\n1.0.0.0/24 2\n  2001:db8::/32\t17  # trailing comment\n0.0.0.0/0 1\n::/0 3\n255.255.255.255/32 4294967295\n";
        let l = parse(text, "mixed").unwrap();
        assert_eq!(
            l.v4,
            vec![
                ("1.0.0.0/24".parse().unwrap(), 2),
                ("0.0.0.0/0".parse().unwrap(), 1),
                ("255.255.255.255/32".parse().unwrap(), u32::MAX),
            ]
        );
        assert_eq!(
            l.v6,
            vec![("2001:db8::/32".parse().unwrap(), 17), ("::/0".parse().unwrap(), 3)]
        );
        assert_eq!(l.len(), 5);
        assert!(parse("", "x").unwrap().is_empty());
    }

    const CASES: &[(&str, &str)] = &[
        (
            "1.2.3.0/24 1\n1.2.3.4/33 1\n",
            "ipv4.txt:2: prefix \"1.2.3.4/33\": invalid prefix length",
        ),
        ("1.2.3.0/x 1", "ipv4.txt:1: prefix \"1.2.3.0/x\": invalid prefix length"),
        ("1.2.3.0/ 1", "ipv4.txt:1: prefix \"1.2.3.0/\": invalid prefix length"),
        ("::/129 1", "ipv4.txt:1: prefix \"::/129\": invalid prefix length"),
        ("1.2.3.0/+8 1", "ipv4.txt:1: prefix \"1.2.3.0/+8\": invalid prefix length"),
        ("1.2.3/24 1", "ipv4.txt:1: prefix \"1.2.3/24\": invalid address"),
        ("2001:db8::g/32 1", "ipv4.txt:1: prefix \"2001:db8::g/32\": invalid address"),
        ("1.2.3.0 1", "ipv4.txt:1: prefix \"1.2.3.0\": missing \"/length\""),
        (
            "1.2.3.4/24 1",
            "ipv4.txt:1: prefix \"1.2.3.4/24\": host bits set (did you mean 1.2.3.0/24?)",
        ),
        (
            "2001:db8::1/32 1",
            "ipv4.txt:1: prefix \"2001:db8::1/32\": host bits set (did you mean 2001:db8::/32?)",
        ),
        ("\n\n1.2.3.0/24", "ipv4.txt:3: prefix \"1.2.3.0/24\": missing next-hop"),
        ("1.2.3.0/24 x", "ipv4.txt:1: next-hop \"x\": not a number"),
        ("1.2.3.0/24 -1", "ipv4.txt:1: next-hop \"-1\": not a number"),
        (
            "1.2.3.0/24 4294967296",
            "ipv4.txt:1: next-hop \"4294967296\": out of range (at most 4294967295)",
        ),
        ("1.2.3.0/24 1 2", "ipv4.txt:1: unexpected field \"2\" after the next-hop"),
        (
            "1.2.3.0/24 1\n# c\n1.2.3.0/24 2",
            "ipv4.txt:3: prefix \"1.2.3.0/24\": listed twice (first on line 1)",
        ),
    ];

    #[test]
    fn every_error_names_file_line_field_and_value() {
        for &(text, want) in CASES {
            assert_eq!(err(text), want, "input {text:?}");
        }
        // The same address in the two families is not a duplicate.
        assert!(parse("0.0.0.0/0 1\n::/0 1\n", "x").is_ok());
    }

    #[test]
    fn the_ordered_fast_path_agrees_with_the_general_parser() {
        // Sorted input (the fast path's case), unsorted input and every error case: the same
        // list or the same first error.
        let mut sorted = String::from("# header\n");
        for i in 0..2000u32 {
            sorted.push_str(&format!("{}/24 {}\n", std::net::Ipv4Addr::from(i << 8), i % 7));
        }
        sorted.push_str("2001:db8::/32 1\n2001:db8::/48 2\n");
        let mut texts = vec![
            sorted.clone(),
            format!("{sorted}1.0.0.0/8 1\n"),
            format!("{sorted}0.0.7.0/24 1\n"),
            "10.0.0.0/8 1\n9.0.0.0/8 1\n10.0.0.0/8 2\n".into(),
            "1.2.3.0/24 1\n1.2.3.0/24 1\n".into(),
            "1.2.3.0/08 1\n1.2.3.0/8 1\n".into(),
            "001.2.3.0/24 1\n".into(),
            "1.2.3.256/32 1\n".into(),
            "1.2.3.0/24 1 # c\n1.2.4.0/24\t2\r\n".into(),
            "1.2.3.0/24 1#c\n".into(),
            "1.2.3.0/24#c 1\n".into(),
            " 1.2.3.0/24 1\n".into(),
            "1.2.3.0/24 007\n1.2.4.0/24 00000000001\n".into(),
            "1.2.3.0/24 4294967295\n1.2.4.0/24 4294967296\n".into(),
            "1.2.3.0/24\x0c1\n".into(),
            "1.2.3.0/24 1 2\n".into(),
            "1.2.3.0/24 1\t\n1.2.3.0/24. 1\n".into(),
            "1.2.3.0./24 1\n".into(),
            "1.2.3.0/33 1\n".into(),
        ];
        texts.extend(CASES.iter().map(|(t, _)| t.to_string()));
        for t in &texts {
            let fast = parse(t, "f").map_err(|e| e.to_string());
            let general = parse_unordered(t, "f").map_err(|e| e.to_string());
            assert_eq!(fast, general, "input {t:?}");
        }
        assert_eq!(parse(&sorted, "f").unwrap().len(), 2002);
    }

    #[test]
    fn load_reports_io_errors_with_the_path() {
        let e = load(Path::new("/nonexistent/ipv4.txt")).unwrap_err();
        assert!(matches!(e.kind, PrefixFileErrorKind::Io(_)));
        assert!(e.to_string().starts_with("/nonexistent/ipv4.txt: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let dir = std::env::temp_dir().join(format!("fib-prefix-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.txt");
        std::fs::write(&p, "10.0.0.0/8 5\n").unwrap();
        assert_eq!(load(&p).unwrap().v4, vec![("10.0.0.0/8".parse().unwrap(), 5)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn family_names() {
        assert_eq!("IPv6".parse::<Family>(), Ok(Family::Ipv6));
        assert_eq!("4".parse::<Family>(), Ok(Family::Ipv4));
        assert!("ipx".parse::<Family>().is_err());
        assert_eq!(Family::Ipv4.file_name(), "ipv4.txt");
        assert_eq!(Family::Ipv6.to_string(), "ipv6");
        assert!(cache_dir().ends_with("prefixes"));
    }
}
