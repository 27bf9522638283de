//! VRs through the API: add and remove (edits of the running text), an interface's MTU,
//! up/down and addresses, a VR's reservation and worker.

use std::path::Path;

use dataplane::config::VrConfig;
use dataplane::VrChange;
use ipnet::IpNet;
use serde_json::Value;
use tracing::info;

use crate::api::{self, Moved, Reserved, VrAdded, VrRemoved};
use crate::model::plain;
use crate::model::{PortDoc, VrDoc};
use crate::runtime::reservation_row;
use crate::topology::reservation_from_words;
use crate::{ControlError, Node, Plan, Topology};

impl Node {
    /// `vr_add`: VR `vr` and ports `ports` join the running text.
    pub(super) fn vr_add(
        &mut self,
        vr: VrDoc,
        ports: Vec<PortDoc>,
    ) -> Result<VrAdded, ControlError> {
        let name = vr.name.clone();
        let vr = serde_json::to_value(&vr).expect("documents serialize");
        let ports: Vec<Value> =
            ports.iter().map(|p| serde_json::to_value(p).expect("documents serialize")).collect();
        let plan = self.add_vr_values(vr, ports)?;
        Ok(VrAdded { vr: name, plan: plan.steps })
    }

    /// `vr_remove`: VR `vr` goes, with the ports nothing else uses (its cell closes them).
    pub(super) fn vr_remove(&mut self, vr: String) -> Result<VrRemoved, ControlError> {
        self.vr_config(&vr)?;
        let plan = if self.source.is_some() {
            self.edit_source(|doc| {
                list(doc, "vrs").retain(|v| v["name"] != vr.as_str());
                let mut used: Vec<Value> = Vec::new();
                for v in list(doc, "vrs").iter() {
                    for i in v["interfaces"].as_array().into_iter().flatten() {
                        used.push(i["port"].clone());
                    }
                }
                for s in list(doc, "switches").iter() {
                    for m in s["members"].as_array().into_iter().flatten() {
                        used.push(m["port"].clone());
                    }
                }
                list(doc, "ports").retain(|p| used.contains(&p["name"]));
            })?
        } else {
            let mut next = self.topo.clone();
            let i = next.vr_index(&vr).expect("checked");
            next.vrs.remove(i);
            next.schedule.remove(i);
            self.apply(next, false)?
        };
        Ok(VrRemoved { plan: plan.steps })
    }

    /// Adds a VR and ports, given as topology documents (JSON), as `vr_add` does.
    pub(crate) fn add_vr_values(
        &mut self,
        vr: Value,
        ports: Vec<Value>,
    ) -> Result<Plan, ControlError> {
        self.edit_source(|doc| {
            list(doc, "ports").extend(ports);
            list(doc, "vrs").push(vr);
        })
    }

    /// `interface_set`: addresses (a rebuild of the VR, as `apply` makes it), then MTU, then
    /// up/down, each where given.
    pub(super) fn interface_set(
        &mut self,
        vr: String,
        interface: String,
        mtu: Option<u16>,
        up: Option<bool>,
        addresses: Option<Vec<IpNet>>,
    ) -> Result<api::InterfaceSet, ControlError> {
        let i = iface_index(self.vr_config(&vr)?, &interface)?;
        if let Some(list) = addresses {
            self.set_addresses(&vr, i, &list)?;
        }
        if let Some(m) = mtu {
            self.set_mtu(&vr, i, &interface, m)?;
        }
        if let Some(u) = up {
            self.set_iface_up(&vr, i, &interface, u)?;
        }
        let f = &self.vr_config(&vr)?.interfaces[usize::from(i)];
        let v4 = f.ipv4.iter().map(|n| n.to_string());
        let addresses: Vec<String> = v4.chain(f.ipv6.iter().map(|n| n.to_string())).collect();
        Ok(api::InterfaceSet { vr, interface, mtu, up, addresses })
    }

    fn set_addresses(&mut self, vr: &str, i: u16, list: &[IpNet]) -> Result<(), ControlError> {
        let mut next = self.topo.clone();
        let f = &mut next.vrs.iter_mut().find(|v| v.name == vr).expect("checked").interfaces
            [usize::from(i)];
        f.ipv4 = list
            .iter()
            .filter_map(|n| match n {
                IpNet::V4(n) => Some(*n),
                IpNet::V6(_) => None,
            })
            .collect();
        f.ipv6 = list
            .iter()
            .filter_map(|n| match n {
                IpNet::V6(n) => Some(*n),
                IpNet::V4(_) => None,
            })
            .collect();
        self.apply(next, false)?;
        Ok(())
    }

    fn set_mtu(&mut self, vr: &str, i: u16, interface: &str, m: u16) -> Result<(), ControlError> {
        self.vr_change(vr, VrChange::Mtu(i, m))?;
        self.topo_vr_mut(vr).interfaces[usize::from(i)].mtu = m;
        info!(vr, interface, mtu = m, "interface mtu set");
        let cp = self.topo.vr_index(vr).and_then(|v| self.topo.control_plane(v));
        if let Some(cp) = cp {
            crate::netns::set_mirror_mtu(&cp.netns, interface, m)
                .map_err(|e| ControlError::State(format!("vr {vr}: mirror of {interface}: {e}")))?;
        }
        Ok(())
    }

    fn set_iface_up(
        &mut self,
        vr: &str,
        i: u16,
        interface: &str,
        u: bool,
    ) -> Result<(), ControlError> {
        let v = self.topo.vr_index(vr).expect("checked");
        if !self.held.release(vr, interface, u) {
            // An `up` the journal's replay brings, on a restart that holds: it would be up,
            // and stays down until taken up once the replay is over.
            self.topo.set_iface_down(v, i, false);
            info!(vr, interface, "interface held down");
            return Ok(());
        }
        self.vr_change(vr, VrChange::Up(i, u))?;
        self.topo.set_iface_down(v, i, !u);
        info!(vr, interface, up = u, "interface set up/down");
        // Its mirror follows, so the control plane's daemons see the link change.
        if let Some(cp) = self.topo.control_plane(v) {
            crate::netns::set_mirror_up(&cp.netns, interface, u)
                .map_err(|e| ControlError::State(format!("vr {vr}: mirror of {interface}: {e}")))?;
        }
        Ok(())
    }

    /// `reserve`: VR `vr`'s reservation, given as words (`packets=N`, ...; none: unlimited).
    pub(super) fn reserve(
        &mut self,
        vr: String,
        spec: Vec<String>,
    ) -> Result<Reserved, ControlError> {
        let words: Vec<&str> = spec.iter().map(String::as_str).collect();
        let r =
            reservation_from_words(&words).map_err(|e| ControlError::BadRequest(e.to_string()))?;
        self.rt.set_reservation(&vr, r)?;
        if let Some(i) = self.topo.vr_index(&vr) {
            self.topo.schedule[i].reservation = r;
        }
        info!(vr, reservation = %spec.join(" "), "reservation set");
        let s = self.rt.snapshot()?;
        let v = s.vr(&vr).map(|(_, v)| v);
        Ok(Reserved {
            reservation: v.and_then(|v| v.reservation).map(reservation_row),
            pending_reservation: v.and_then(|v| v.pending).map(|p| p.map(reservation_row)),
            vr,
        })
    }

    /// `move`: VR `vr` (with its cell) to worker `worker`.
    pub(super) fn move_vr(&mut self, vr: &str, worker: usize) -> Result<Moved, ControlError> {
        let m = self.rt.move_vr(vr, worker)?;
        info!(vr, moved = ?m.vrs, from = m.from, to = m.to, "vr moved");
        Ok(Moved { moved: m.vrs, from: m.from, to: m.to })
    }

    /// Applies the running topology's text as `edit` changes it, and keeps the result as the
    /// new text. The text is read as plain data (scalars stay text, keys and order as
    /// written), so whatever the file holds survives the edit, comments aside.
    pub(crate) fn edit_source(
        &mut self,
        edit: impl FnOnce(&mut Value),
    ) -> Result<Plan, ControlError> {
        let Some((text, file)) = self.source.clone() else {
            return Err(ControlError::Invalid(
                "this host was started without its topology's text: use apply with the whole file"
                    .into(),
            ));
        };
        let node = yamlpath::parse_document(&text, "hosts:, ports:, switches:, vrs:")
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        let base = Path::new(&file).parent().unwrap_or(Path::new(".")).to_path_buf();
        let said = Topology::parse(&text, &file, &base)?;
        let mut doc = plain(&node);
        // The edit adds or removes VRs: those it keeps stay as they run, even where
        // `interface_set` or `reserve` changed them after the text was given. The text says
        // so too, so that a journal replaying it comes back to what was acknowledged.
        live_into_doc(&mut doc, &said, &self.topo);
        edit(&mut doc);
        let text = crate::model::to_yaml(&doc);
        let next = Topology::parse(&text, &file, &base)?;
        let plan = self.apply(next, false)?;
        self.source = Some((text, file));
        Ok(plan)
    }

    fn topo_vr_mut(&mut self, vr: &str) -> &mut VrConfig {
        self.topo.vrs.iter_mut().find(|v| v.name == vr).expect("checked by the caller")
    }
}

/// Writes into `doc` (the text `said` was read from) what runs of its VRs in `live` where
/// that differs from the text: each interface's MTU, addresses and up/down, and the VR's
/// reservation.
fn live_into_doc(doc: &mut Value, said: &Topology, live: &Topology) {
    for v in list(doc, "vrs").iter_mut() {
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let (Some(i), Some(j)) = (said.vr_index(&name), live.vr_index(&name)) else { continue };
        let (was, is) = (&said.vrs[i], &live.vrs[j]);
        for f in v["interfaces"].as_array_mut().into_iter().flatten() {
            let at = |c: &VrConfig| c.interfaces.iter().position(|x| f["name"] == x.name.as_str());
            let (Some(k), Some(l)) = (at(was), at(is)) else { continue };
            let (a, b) = (&was.interfaces[k], &is.interfaces[l]);
            if a.mtu != b.mtu {
                f["mtu"] = Value::String(b.mtu.to_string());
            }
            if (&a.ipv4, &a.ipv6) != (&b.ipv4, &b.ipv6) {
                let v4 = b.ipv4.iter().map(|n| Value::String(n.to_string()));
                let v6 = b.ipv6.iter().map(|n| Value::String(n.to_string()));
                f["addresses"] = Value::Array(v4.chain(v6).collect());
            }
            let down = live.iface_down(j, l as u16);
            if said.iface_down(i, k as u16) != down {
                f["up"] = Value::String((!down).to_string());
            }
        }
        let r = live.schedule[j].reservation;
        if said.schedule[i].reservation != r {
            match (r.map(reservation_doc), v.as_object_mut()) {
                (Some(doc), _) => v["reservation"] = doc,
                (None, Some(m)) => drop(m.remove("reservation")),
                (None, None) => {}
            }
        }
    }
}

/// A reservation as the topology file writes it.
fn reservation_doc(r: dataplane::config::Reservation) -> Value {
    let mut m = serde_json::Map::new();
    let (key, q) = match r.budget {
        dataplane::config::Budget::Packets(n) => ("packets", n),
        dataplane::config::Budget::Time(ns) => ("time_us", ns / 1_000),
    };
    m.insert(key.into(), Value::String(q.to_string()));
    m.insert("period_us".into(), Value::String((r.period_ns / 1_000).to_string()));
    m.insert("weight".into(), Value::String(r.weight.to_string()));
    Value::Object(m)
}

/// The list under `key` of a document, made empty if absent (or not a list).
fn list<'a>(doc: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !doc[key].is_array() {
        doc[key] = Value::Array(Vec::new());
    }
    doc[key].as_array_mut().expect("made a list above")
}

/// The index of VR `cfg`'s interface `name`.
pub(super) fn iface_index(cfg: &VrConfig, name: &str) -> Result<u16, ControlError> {
    cfg.interfaces
        .iter()
        .position(|i| i.name == name)
        .map(|i| i as u16)
        .ok_or_else(|| ControlError::NoSuchInterface { vr: cfg.name.clone(), iface: name.into() })
}
