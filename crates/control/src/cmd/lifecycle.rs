//! The host's life: `hello`, `status`, `apply` of a whole text, `stop`.

use std::path::Path;

use serde_json::{json, Value};
use tracing::info;

use crate::api::{Command, API_VERSION};
use crate::node::rss_bytes;
use crate::{ControlError, Node, Topology};

/// The API version, its commands and this process.
pub(super) fn hello() -> Value {
    json!({
        "v": API_VERSION,
        "commands": Command::NAMES,
        "pid": std::process::id(),
    })
}

impl Node {
    /// Workers, VRs (with routes by source, FIB size, neighbors, interfaces), ports, memory.
    pub fn status(&self) -> Result<Value, ControlError> {
        let snap = self.rt.snapshot()?;
        let mut j = snap.to_json();
        for v in j["vrs"].as_array_mut().into_iter().flatten() {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            if let Some(t) = self.tables.get(&name) {
                let routes: serde_json::Map<_, _> =
                    t.counts().iter().map(|(s, n)| (s.name().to_string(), json!(n))).collect();
                let (p4, p6) = t.fib_prefixes();
                v["routes"] = Value::Object(routes);
                v["fib"] = json!({ "ipv4": p4, "ipv6": p6, "bytes": t.fib_bytes(), "next_hops": t.next_hops() });
            }
            if let (Some([ops, skipped, overruns, refused, stale, stale_expired]), Some(i)) =
                (self.sync_stats(&name), self.topo.vr_index(&name))
            {
                let netns = self.topo.control_plane(i).map(|c| c.netns.clone());
                v["control_plane"] = json!({
                    "netns": netns,
                    "route_ops": ops,
                    "skipped": skipped,
                    "overruns": overruns,
                    "refused": refused,
                    "stale": stale,
                    "stale_expired": stale_expired,
                });
            }
        }
        j["replicated"] = crate::replicas::status_json(&self.topo, &snap, &self.tables);
        j["msrs"] = crate::msr_state::status_json(&self.topo, &snap, &self.msrs);
        j["state"] = json!("running");
        j["memory"] = json!({ "rss_bytes": rss_bytes() });
        Ok(j)
    }

    /// `apply`: the whole text `topology` (read as file `file`) becomes the running one.
    pub(super) fn apply_text(
        &mut self,
        topology: String,
        file: String,
        dry_run: bool,
    ) -> Result<Value, ControlError> {
        let base = Path::new(&file).parent().unwrap_or(Path::new("."));
        let next = Topology::parse(&topology, &file, base)?;
        let plan = self.apply(next, dry_run)?;
        if !dry_run {
            // What runs now is this text: vr_add and vr_remove edit it from here on.
            self.source = Some((topology, file));
        }
        Ok(json!({
            "dry_run": dry_run, "plan": plan.steps, "unchanged": plan.unchanged,
            "text": plan.to_string(),
        }))
    }

    /// `stop`: the daemon stops once this reply is sent.
    pub(super) fn request_stop(&mut self) -> Value {
        info!("stop requested through the control socket");
        self.stop_requested = true;
        json!({ "state": "stopping" })
    }
}
