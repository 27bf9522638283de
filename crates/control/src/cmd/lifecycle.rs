//! The host's life: `hello`, `status`, `apply` of a whole text, `stop`.

use std::path::Path;

use tracing::info;

use crate::api::{self, Command, API_VERSION};
use crate::node::rss_bytes;
use crate::{ControlError, Node, Topology};

/// The API version, its commands and this process.
pub(super) fn hello() -> api::Hello {
    api::Hello {
        v: API_VERSION,
        commands: Command::NAMES.iter().map(|n| n.to_string()).collect(),
        pid: std::process::id(),
    }
}

impl Node {
    /// Workers, VRs (with routes by source, FIB size, neighbors, interfaces), ports, memory.
    pub fn status(&self) -> Result<api::Status, ControlError> {
        let snap = self.rt.snapshot()?;
        let mut s = snap.to_status();
        for v in &mut s.vrs {
            for i in &mut v.interfaces {
                i.held = self.held.is_held(&v.name, &i.name);
            }
            if let Some(t) = self.tables.get(&v.name) {
                let routes =
                    t.counts().iter().map(|(s, n)| (s.name().to_string(), *n as u64)).collect();
                let (ipv4, ipv6) = t.fib_prefixes();
                v.routes = Some(routes);
                v.fib = Some(api::FibRow {
                    ipv4,
                    ipv6,
                    bytes: t.fib_bytes(),
                    next_hops: t.next_hops(),
                });
            }
            if let (Some([route_ops, skipped, overruns, refused, stale, stale_expired]), Some(i)) =
                (self.sync_stats(&v.name), self.topo.vr_index(&v.name))
            {
                v.control_plane = Some(api::ControlPlaneRow {
                    netns: self.topo.control_plane(i).map(|c| c.netns.clone()),
                    route_ops,
                    skipped,
                    overruns,
                    refused,
                    stale,
                    stale_expired,
                });
            }
        }
        s.replicated = crate::replicas::status_rows(&self.topo, &snap, &self.tables);
        s.msrs = crate::msr_state::status_rows(&self.topo, &snap, &self.msrs);
        s.memory = api::Memory { rss_bytes: rss_bytes() };
        Ok(s)
    }

    /// `apply`: the whole text `topology` (read as file `file`) becomes the running one.
    pub(super) fn apply_text(
        &mut self,
        topology: String,
        file: String,
        dry_run: bool,
    ) -> Result<api::Applied, ControlError> {
        let base = Path::new(&file).parent().unwrap_or(Path::new("."));
        let next = Topology::parse(&topology, &file, base)?;
        let plan = self.apply(next, dry_run)?;
        if !dry_run {
            // What runs now is this text: vr_add and vr_remove edit it from here on.
            self.source = Some((topology, file));
        }
        Ok(api::Applied {
            dry_run,
            text: plan.to_string(),
            plan: plan.steps,
            unchanged: plan.unchanged,
        })
    }

    /// `stop`: the daemon stops once this reply is sent.
    pub(super) fn request_stop(&mut self) -> api::Stopping {
        info!("stop requested through the control socket");
        self.stop_requested = true;
        api::Stopping { state: "stopping".into() }
    }
}
