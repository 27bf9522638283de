//! The control crate's error at its boundary.

use crate::build::BuildError;
use crate::runtime::RuntimeError;
use crate::topology::TopologyError;

/// Why a control operation was refused or failed. Each variant has a stable [`code`] for API
/// clients.
///
/// [`code`]: ControlError::code
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("no VR named {0:?}")]
    NoSuchVr(String),
    #[error("vr {vr}: no interface named {iface:?}")]
    NoSuchInterface { vr: String, iface: String },
    #[error("vr {vr}: {source}")]
    Route { vr: String, source: dataplane::RouteError },
    #[error("{0}")]
    Topology(#[from] TopologyError),
    #[error("{0}")]
    Build(#[from] BuildError),
    #[error("{0}")]
    Runtime(#[from] RuntimeError),
    #[error("{0}")]
    Invalid(String),
    /// A plan with changes that cannot be applied to a running host; nothing was applied.
    #[error("{0}")]
    NotLive(String),
    #[error("permission denied: {0}")]
    Permission(String),
    #[error("{0}")]
    Busy(String),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error("{0}")]
    State(String),
    #[error("{0}")]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// A change that was made and runs, but could not be journaled: a restart would lose it.
    #[error("{0}")]
    NotDurable(String),
}

impl ControlError {
    /// The error's stable name in API replies.
    pub fn code(&self) -> &'static str {
        match self {
            ControlError::BadRequest(_) => "bad_request",
            ControlError::NoSuchVr(_) => "no_such_vr",
            ControlError::NoSuchInterface { .. } => "no_such_interface",
            ControlError::Route { .. } => "route",
            ControlError::Topology(_) => "topology",
            ControlError::Build(_) => "build",
            ControlError::Runtime(_) => "runtime",
            ControlError::Invalid(_) => "invalid",
            ControlError::NotLive(_) => "not_live",
            ControlError::Permission(_) => "permission",
            ControlError::Busy(_) => "busy",
            ControlError::Io { .. } => "io",
            ControlError::State(_) => "state",
            ControlError::Snapshot(_) => "snapshot",
            ControlError::NotDurable(_) => "not_durable",
        }
    }

    pub(crate) fn io(context: impl std::fmt::Display, source: std::io::Error) -> ControlError {
        ControlError::Io { context: context.to_string(), source }
    }
}
