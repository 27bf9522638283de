//! Logs: `tracing` events, written to stderr by `tracing-subscriber`, as timestamped,
//! levelled lines for people (`text`, the default) or one JSON object a line (`json`:
//! `{"timestamp", "level", "fields": {"message", ...}, "target"}`).
//!
//! `RUST_LOG` filters them (`EnvFilter` syntax); without it `routeplex run`, the service whose
//! stderr is the service log, shows `info` and up, and the other commands only `warn` and up,
//! so their output to people stays as it was.
//!
//! The format chosen is exported as `ROUTEPLEX_LOG_FORMAT`, so the data plane that `up`
//! starts writes its log the same way.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// The environment variable that carries the format to child processes.
pub const FORMAT_VAR: &str = "ROUTEPLEX_LOG_FORMAT";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Timestamped, levelled lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// Installs the global subscriber: `format`, else `$ROUTEPLEX_LOG_FORMAT`, else text; `service`
/// chooses the default level (info rather than warn).
pub fn init(format: Option<Format>, service: bool) {
    let format = match format {
        Some(f) => {
            // Before any thread starts: the child `up` starts inherits it.
            std::env::set_var(FORMAT_VAR, if f == Format::Json { "json" } else { "text" });
            f
        }
        None => match std::env::var(FORMAT_VAR).as_deref() {
            Ok("json") => Format::Json,
            _ => Format::Text,
        },
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(if service { "info" } else { "warn" }));
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        Format::Text => b.with_ansi(std::io::stderr().is_terminal()).try_init(),
        Format::Json => b.json().try_init(),
    };
}
