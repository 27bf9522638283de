//! The one error a topology file can produce, located to the character.

use std::fmt;

/// What kind of problem a [`TopologyError`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The topology file or a table file could not be read.
    Io,
    /// Not YAML the model accepts: malformed, or using anchors, tags or a key twice.
    Syntax,
    /// Well-formed YAML but not a valid topology: a wrong type, a missing or unknown key, a bad
    /// value, a broken rule.
    Invalid,
    /// Valid, but asks for something this build cannot provide (a port kind not built in).
    Unavailable,
}

/// Why a topology file was rejected, naming the file, line, column, field and offending value.
///
/// Displays as one line, `FILE:LINE:COL: FIELD: MESSAGE`, so editors and terminals can jump to
/// it; the parts without a position (a file that cannot be read) are left out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TopologyError(Box<Detail>);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Detail {
    kind: ErrorKind,
    file: String,
    line: usize,
    column: usize,
    field: String,
    value: Option<String>,
    message: String,
}

impl TopologyError {
    /// An error at `line:column` (1-based; 0 when there is no position) of the file that is
    /// being read; the file name is filled in by [`TopologyError::in_file`] on the way out.
    ///
    /// The value, the field and every copy of the value in the message are cut to
    /// [`yamlpath::QUOTE_MAX`] bytes (see [`yamlpath::bound`]): a document may hold a value of
    /// megabytes, and an error is one line on a terminal or in a log.
    pub(crate) fn at(
        kind: ErrorKind,
        (line, column): (usize, usize),
        field: &str,
        value: Option<&str>,
        message: String,
    ) -> TopologyError {
        let (value, message) = yamlpath::bound(value, message);
        TopologyError(Box::new(Detail {
            kind,
            file: String::new(),
            line,
            column,
            field: yamlpath::clip(field).into_owned(),
            value,
            message,
        }))
    }

    /// Names the file, unless a more specific one is already named.
    pub(crate) fn in_file(mut self, file: &str) -> TopologyError {
        if self.0.file.is_empty() {
            self.0.file = file.to_string();
        }
        self
    }

    /// What kind of problem this is.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The file, as its name was given.
    pub fn file(&self) -> &str {
        &self.0.file
    }

    /// 1-based line, or 0 when the error has no position.
    pub fn line(&self) -> usize {
        self.0.line
    }

    /// 1-based column, or 0 when the error has no position.
    pub fn column(&self) -> usize {
        self.0.column
    }

    /// Path of the offending field, like `vrs[0].interfaces[1].mac`; empty for syntax errors.
    pub fn field(&self) -> &str {
        &self.0.field
    }

    /// The offending value as written, when there is one; cut to [`yamlpath::QUOTE_MAX`] bytes
    /// (ending in `…`) when longer.
    pub fn value(&self) -> Option<&str> {
        self.0.value.as_deref()
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// For an unknown key, the keys its section allows (tools and tests that keep other
    /// descriptions of the format, like the typed model and docs/topology.md, in step).
    pub fn allowed_keys(&self) -> Option<Vec<&str>> {
        let m = self.message();
        let rest = &m[m.find("(allowed: ")? + "(allowed: ".len()..];
        Some(rest.strip_suffix(')')?.split(", ").collect())
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.file)?;
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if !self.field.is_empty() {
            write!(f, " {}:", self.field)?;
        }
        write!(f, " {}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_one_line_with_every_part_present() {
        let e = TopologyError::at(
            ErrorKind::Invalid,
            (14, 14),
            "vrs[0].interfaces[1].mac",
            Some("02:00:00:zz:00:01"),
            "invalid MAC address \"02:00:00:zz:00:01\"".into(),
        )
        .in_file("lab.yaml")
        .in_file("other.yaml");
        assert_eq!(
            e.to_string(),
            "lab.yaml:14:14: vrs[0].interfaces[1].mac: invalid MAC address \"02:00:00:zz:00:01\""
        );
        assert_eq!((e.file(), e.line(), e.column()), ("lab.yaml", 14, 14));
        assert_eq!(e.value(), Some("02:00:00:zz:00:01"));

        let io = TopologyError::at(ErrorKind::Io, (0, 0), "", None, "cannot read: gone".into());
        assert_eq!(io.in_file("lab.yaml").to_string(), "lab.yaml: cannot read: gone");
    }
}
