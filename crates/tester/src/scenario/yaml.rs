//! The scenario file's view of [`yamlpath`]: values that know their field path
//! (`axis.values[2]`) and position, failing with a [`ScenarioError`] that names the file,
//! line, column, field and offending value.

use std::fmt::{self, Display};

/// Why a scenario file was rejected. Displays as one line: `FILE:LINE:COL: FIELD: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// 1-based; 0 when there is no position (the file could not be read).
    pub line: usize,
    pub column: usize,
    /// The field's path, e.g. `axis.values[2]`; empty for the whole file.
    pub field: String,
    /// The offending text, when there is one; cut to [`yamlpath::QUOTE_MAX`] bytes (ending in
    /// `…`) when longer.
    pub value: Option<String>,
    pub message: String,
}

impl ScenarioError {
    /// An error at `line:column`; the value, the field and every copy of the value in the
    /// message are cut to [`yamlpath::QUOTE_MAX`] bytes (see [`yamlpath::bound`]).
    pub(crate) fn at(
        (line, column): (usize, usize),
        field: &str,
        value: Option<&str>,
        message: String,
    ) -> ScenarioError {
        let (value, message) = yamlpath::bound(value, message);
        ScenarioError {
            file: String::new(),
            line,
            column,
            field: yamlpath::clip(field).into_owned(),
            value,
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

impl From<yamlpath::Located> for ScenarioError {
    fn from(e: yamlpath::Located) -> ScenarioError {
        ScenarioError::at(e.pos, &e.path, e.value.as_deref(), e.message)
    }
}

/// A value in the scenario document.
pub(crate) type Value<'a> = yamlpath::Value<'a, ScenarioError>;

/// Parses a document whose top level is a mapping; anchors, tags and repeated keys are
/// errors.
pub(crate) fn parse_document(text: &str) -> Result<yamlpath::Node> {
    Ok(yamlpath::parse_document(text, "name:, dut:, axis:, ...")?)
}

/// The scenario file's own readings of a value.
pub(crate) trait ScenarioValue {
    /// A whole count in `lo..=hi` (k, M suffixes allowed: 16k = 16000).
    fn count(&self, what: &str, lo: u64, hi: u64) -> Result<u64>;

    /// A number of seconds in `lo..=hi`.
    fn secs(&self, what: &str, lo: f64, hi: f64) -> Result<f64>;
}

impl ScenarioValue for Value<'_> {
    fn count(&self, what: &str, lo: u64, hi: u64) -> Result<u64> {
        let s = self.text()?;
        let n = parse_count(s).ok_or_else(|| {
            self.bad(s, format_args!("{what} must be a whole number in {lo}..={hi}, not {s:?}"))
        })?;
        if n < lo || n > hi {
            return Err(self.bad(s, format_args!("{what} {n} is out of range {lo}..={hi}")));
        }
        Ok(n)
    }

    fn secs(&self, what: &str, lo: f64, hi: f64) -> Result<f64> {
        let s = self.text()?;
        match s.trim_end_matches('s').parse::<f64>() {
            Ok(v) if v.is_finite() && (lo..=hi).contains(&v) => Ok(v),
            _ => Err(self.bad(s, format_args!("{what} must be seconds in {lo}..={hi}, not {s:?}"))),
        }
    }
}

/// A whole count: `512`, `16k`, `1M` (k, M, G: powers of 1000); `None` if not one.
pub fn parse_count(s: &str) -> Option<u64> {
    let v = crate::parse_rate(s).ok()?;
    (v.fract() == 0.0 && v <= u64::MAX as f64 && !s.contains('-')).then_some(v as u64)
}
