//! A VR's neighbors through the API: list, flush.

use dataplane::{VrAnswer, VrChange};
use tracing::info;

use super::vrs::iface_index;
use crate::api::{NeighborFlushed, NeighborList, NeighborRow};
use crate::{ControlError, Node};

impl Node {
    /// VR `vr`'s neighbor table (a replicated VR's replicas keep one between them: replica
    /// 0's).
    pub(super) fn neighbor_list(&self, vr: String) -> Result<NeighborList, ControlError> {
        let cfg = self.vr_config(&vr)?.clone();
        let first = self.rt.instances(&vr).into_iter().next().unwrap_or_else(|| vr.clone());
        let rows = match self.rt.on_vr(&first, |c, v| c.change_vr(v, VrChange::Neighbors))? {
            Ok(VrAnswer::Neighbors(rows)) => rows,
            Ok(_) => Vec::new(),
            Err(e) => return Err(ControlError::Invalid(e.0)),
        };
        let neighbors = rows
            .into_iter()
            .map(|r| NeighborRow {
                interface: cfg.interfaces.get(r.iface as usize).map(|i| i.name.clone()),
                address: r.ip,
                mac: r.mac.map(|m| m.to_string()),
                state: format!("{:?}", r.state).to_lowercase(),
                queued: r.queued,
            })
            .collect();
        Ok(NeighborList { vr, neighbors })
    }

    /// Forgets VR `vr`'s learned neighbors (on `interface`, or all), in every replica.
    pub(super) fn neighbor_flush(
        &mut self,
        vr: String,
        interface: Option<String>,
    ) -> Result<NeighborFlushed, ControlError> {
        let i = interface.as_deref().map(|n| iface_index(self.vr_config(&vr)?, n)).transpose()?;
        let all =
            self.rt.on_vr_each(&vr, move |c, v| c.change_vr(v, VrChange::FlushNeighbors(i)))?;
        let flushed = all.into_iter().try_fold(VrAnswer::Flushed(0), |acc, a| match (acc, a) {
            (VrAnswer::Flushed(s), Ok(VrAnswer::Flushed(n))) => Ok(VrAnswer::Flushed(s + n)),
            (_, Ok(a)) => Ok(a),
            (_, Err(e)) => Err(e),
        });
        match flushed {
            Ok(VrAnswer::Flushed(n)) => {
                info!(vr, interface, dropped_queued = n, "neighbors flushed");
                Ok(NeighborFlushed { vr, dropped_queued: Some(n) })
            }
            Ok(_) => Ok(NeighborFlushed { vr, dropped_queued: None }),
            Err(e) => Err(ControlError::Invalid(e.0)),
        }
    }
}
