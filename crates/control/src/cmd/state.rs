//! A VR's state as a whole: snapshot, restore, and migration to another host (the
//! destination's commit, and the announcement after it).

use std::path::Path;

use crate::api::{Announced, Committed, Migrated, Restored, SnapshotWritten};
use crate::snapshot::SnapNeighbor;
use crate::{ControlError, Node};

impl Node {
    pub(super) fn snapshot(&self, vr: &str, out: &str) -> Result<SnapshotWritten, ControlError> {
        crate::vr_state::snapshot_to_file(self, vr, Path::new(out))
    }

    pub(super) fn restore(
        &mut self,
        snapshot: &str,
        name: Option<String>,
        down: bool,
    ) -> Result<Restored, ControlError> {
        let s = crate::snapshot::read(Path::new(snapshot))?;
        crate::vr_state::restore(self, s.into_current(), name, down)
    }

    /// Moves VR `vr` to the host listening at `to` (IP:PORT).
    pub(super) fn migrate(&mut self, vr: &str, to: &str) -> Result<Migrated, ControlError> {
        let to = to
            .parse()
            .map_err(|_| ControlError::BadRequest(format!("migrate to {to:?}: give IP:PORT")))?;
        crate::migrate::migrate(self, vr, to)
    }

    pub(super) fn migrate_commit(
        &mut self,
        vr: String,
        neighbors: Vec<SnapNeighbor>,
        counters: Vec<(String, u64)>,
        not_after_ns: Option<u64>,
    ) -> Result<Committed, ControlError> {
        let st = crate::migrate::FinalState {
            vr,
            neighbors,
            counters,
            commit_within_ms: None,
            not_after_ns,
        };
        crate::migrate::commit(self, st)
    }

    pub(super) fn announce(&self, vr: String) -> Result<Announced, ControlError> {
        let frames = crate::migrate::announce(self, &vr)?;
        Ok(Announced { vr, frames })
    }
}
