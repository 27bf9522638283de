//! The lab's one error type: what failed, said as the command line prints it.
//!
//! Labs and benchmarks drive many systems (kernels, daemons, child processes, the tester), and
//! most of their failures are a step that could not be done, said in words with what it was
//! doing (`.context(...)`). Errors of the workspace's crates and of the OS keep their type
//! (`Io`, `Control`, `Tester`, ...). Like control's errors, a context prints its cause in its own
//! text (`{context}: {source}`), and `source()` still names the cause for those who walk it.

use std::fmt::Display;

/// The lab's result; `Result<T, E>` for another error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a lab, a benchmark or one of their steps failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A refused argument or input, or a step that failed; the text names which and why.
    #[error("{0}")]
    Failed(String),
    /// What the lab was doing when `source` failed.
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Control(#[from] control::ControlError),
    #[error(transparent)]
    Topology(#[from] control::TopologyError),
    #[error(transparent)]
    Build(#[from] control::build::BuildError),
    #[error(transparent)]
    Runtime(#[from] control::runtime::RuntimeError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Mac(#[from] wire::MacParseError),
    #[error(transparent)]
    PrefixLen(#[from] ipnet::PrefixLenError),
    /// A field read from a peer's datagram was shorter than its type.
    #[error(transparent)]
    Slice(#[from] std::array::TryFromSliceError),
}

impl Error {
    /// A failure said in words.
    pub fn msg(m: impl Display) -> Error {
        Error::Failed(m.to_string())
    }
}

/// Says what was being done when a step failed (or found nothing).
pub trait Context<T> {
    /// Wraps the failure with `c`.
    fn context<C: Display>(self, c: C) -> Result<T>;
    /// Wraps the failure with what `f` says, computed only on failure.
    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context<C: Display>(self, c: C) -> Result<T> {
        self.map_err(|e| Error::Context { context: c.to_string(), source: Box::new(e) })
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.map_err(|e| Error::Context { context: f().to_string(), source: Box::new(e) })
    }
}

impl<T> Context<T> for Option<T> {
    fn context<C: Display>(self, c: C) -> Result<T> {
        self.ok_or_else(|| Error::msg(c))
    }

    fn with_context<C: Display, F: FnOnce() -> C>(self, f: F) -> Result<T> {
        self.ok_or_else(|| Error::msg(f()))
    }
}

/// An [`Error::Failed`] from a format string (or from any displayable value).
#[macro_export]
macro_rules! format_err {
    ($msg:literal $(,)?) => { $crate::Error::Failed(format!($msg)) };
    ($fmt:literal, $($arg:tt)*) => { $crate::Error::Failed(format!($fmt, $($arg)*)) };
    ($e:expr $(,)?) => { $crate::Error::msg($e) };
}

/// Returns an [`Error::Failed`] from the enclosing function.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => { return Err($crate::format_err!($($t)*)) };
}

/// Returns an [`Error::Failed`] unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr $(,)?) => {{
        let holds: bool = $cond;
        if !holds {
            $crate::bail!(concat!("condition failed: `", stringify!($cond), "`"));
        }
    }};
    ($cond:expr, $($t:tt)+) => {{
        let holds: bool = $cond;
        if !holds {
            $crate::bail!($($t)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn a_context_says_its_cause_once_and_keeps_it_as_source() {
        let e = Err::<(), _>(io()).context("reading x.yaml").unwrap_err();
        assert_eq!(e.to_string(), format!("reading x.yaml: {}", io()));
        let src = std::error::Error::source(&e).expect("a source");
        assert_eq!(src.to_string(), io().to_string());
        let outer = Err::<(), _>(e).with_context(|| "building the lab").unwrap_err();
        assert_eq!(outer.to_string(), format!("building the lab: reading x.yaml: {}", io()));
    }

    #[test]
    fn macros_and_options_say_what_they_were_given() {
        fn check(n: u32) -> Result<u32> {
            ensure!(n > 1, "--pairs {n} is outside 2..");
            ensure!(n < 100);
            if n == 50 {
                bail!("fifty");
            }
            Ok(n)
        }
        assert_eq!(check(1).unwrap_err().to_string(), "--pairs 1 is outside 2..");
        assert_eq!(check(100).unwrap_err().to_string(), "condition failed: `n < 100`");
        assert_eq!(check(50).unwrap_err().to_string(), "fifty");
        assert_eq!(check(7).unwrap(), 7);
        let e = None::<u8>.context("no VR \"a\"").unwrap_err();
        assert!(matches!(&e, Error::Failed(m) if m == "no VR \"a\""), "{e:?}");
        let s = String::from("as text");
        assert_eq!(format_err!(s).to_string(), "as text");
        let e: Error = io().into();
        assert!(matches!(e, Error::Io(_)));
    }
}
