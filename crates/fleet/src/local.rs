//! The local host as the agent sees it: the control API's commands it needs.
//!
//! [`Socket`] is the real one (the host's control socket, as the CLI uses it); a test may give
//! the agent another implementation.

use std::path::PathBuf;
use std::time::Duration;

use control::api::Command;

use crate::record::LocalStatus;
use crate::FleetError;

/// What the agent asks of its host. Calls block (the agent runs them off its event loop).
pub trait Local: Send + Sync + 'static {
    /// The host's status.
    fn status(&self) -> Result<LocalStatus, FleetError>;
    /// Converges the host to `topology` (the whole file's text); `source` names it in errors.
    fn apply(&self, topology: &str, source: &str) -> Result<(), FleetError>;
    /// Takes an interface of a VR up or down.
    fn set_up(&self, vr: &str, interface: &str, up: bool) -> Result<(), FleetError>;
    /// Moves VR `vr` live to the host whose migration listener is at `to` (control's
    /// `migrate`). A host that cannot (this default) makes the agent fall back to the
    /// restart path, as any failed migration does.
    fn migrate(&self, vr: &str, to: std::net::SocketAddr) -> Result<(), FleetError> {
        Err(FleetError::Record {
            what: format!("migrate {vr} to {to}"),
            msg: "this host's API does not migrate".into(),
        })
    }
}

/// The host's control socket.
pub struct Socket {
    pub path: PathBuf,
    /// How long one command may take (an `apply` rebuilds VRs).
    pub timeout: Duration,
}

impl Socket {
    pub fn new(path: PathBuf) -> Socket {
        Socket { path, timeout: control::daemon::ASK_TIMEOUT }
    }

    fn ask(&self, cmd: Command) -> Result<serde_json::Value, FleetError> {
        Ok(control::daemon::ask_as(&self.path, cmd, self.timeout)?)
    }
}

impl Local for Socket {
    fn status(&self) -> Result<LocalStatus, FleetError> {
        LocalStatus::from_json(self.ask(Command::Status)?)
    }

    fn apply(&self, topology: &str, source: &str) -> Result<(), FleetError> {
        let cmd =
            Command::Apply { topology: topology.to_string(), file: source.into(), dry_run: false };
        self.ask(cmd).map(drop)
    }

    fn set_up(&self, vr: &str, interface: &str, up: bool) -> Result<(), FleetError> {
        self.ask(Command::InterfaceSet {
            vr: vr.into(),
            interface: interface.into(),
            mtu: None,
            up: Some(up),
            addresses: None,
        })
        .map(drop)
    }

    fn migrate(&self, vr: &str, to: std::net::SocketAddr) -> Result<(), FleetError> {
        self.ask(Command::Migrate { vr: vr.into(), to: to.to_string() }).map(drop)
    }
}
