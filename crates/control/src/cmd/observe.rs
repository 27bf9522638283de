//! What is observed of the data path through the API: captures (a port's or a VR
//! interface's frames, with drops) and traces (a VR's next packets, how each was looked up
//! and where it went).

use crate::api::{
    CaptureRead, CaptureStarted, CaptureStopped, FrameRow, TraceLookup, TraceRead, TraceRow,
    TraceStarted,
};
use crate::{ControlError, Node};

/// A capture's consumer side.
pub(crate) struct Capture {
    cell: usize,
    point: String,
    count: u64,
    read: u64,
    ring: std::sync::Arc<dataplane::CaptureRing>,
}

impl Node {
    pub(super) fn capture_start(
        &mut self,
        point: String,
        count: u64,
        drops: bool,
        ring: Option<usize>,
    ) -> Result<CaptureStarted, ControlError> {
        let cap = ring.unwrap_or(1024);
        if !(1..=65_536).contains(&cap) {
            return Err(ControlError::BadRequest(format!("capture ring {cap}: 1..=65536")));
        }
        let ring = dataplane::CaptureRing::new(cap);
        let (cell, port) = match point.split_once(':') {
            Some((vr, iface)) if self.topo.vr_index(vr).is_some() => {
                let (vr, iface) = (vr.to_string(), iface.to_string());
                let (c, _) = self.rt.locate(&vr)?;
                let r = ring.clone();
                let port = self.rt.on_vr(&vr, move |cell, v| {
                    let p = cell.iface_port(v, &iface)?;
                    cell.set_capture(Some(dataplane::Tap::new(p, drops, count, r)));
                    Some(cell.port_name(p).to_string())
                })?;
                (
                    c,
                    port.ok_or_else(|| {
                        ControlError::Invalid(format!("{point}: no such interface"))
                    })?,
                )
            }
            _ => {
                let c = self.rt.cell_of_port(&point).ok_or_else(|| {
                    ControlError::Invalid(format!(
                        "{point}: no port (or VR:INTERFACE) of that name"
                    ))
                })?;
                let (name, r) = (point.clone(), ring.clone());
                let found = self.rt.on_cell(c, move |cell| {
                    let p = (0..cell.port_count()).find(|&p| cell.port_name(p) == name)?;
                    cell.set_capture(Some(dataplane::Tap::new(p, drops, count, r)));
                    Some(())
                })?;
                found.ok_or_else(|| ControlError::Invalid(format!("{point}: no such port")))?;
                (c, point.clone())
            }
        };
        // One capture per cell: the tap just installed replaced any other's.
        self.captures.retain(|_, c| c.cell != cell);
        let id = self.next_capture;
        self.next_capture += 1;
        self.captures.insert(id, Capture { cell, point: port.clone(), count, read: 0, ring });
        Ok(CaptureStarted { id, point, port, ring: cap })
    }

    pub(super) fn capture_read(
        &mut self,
        id: u64,
        max: Option<usize>,
    ) -> Result<CaptureRead, ControlError> {
        let max = max.unwrap_or(256).clamp(1, 4096);
        let epoch = self.rt.epoch();
        let Some(c) = self.captures.get_mut(&id) else {
            return Err(ControlError::Invalid(format!("no capture {id}")));
        };
        let mut got = Vec::new();
        c.ring.drain(&mut got, max);
        c.read += got.len() as u64;
        // Worker time (since the runtime's epoch) to Unix time.
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let since_epoch = epoch.elapsed().as_nanos() as u64;
        let frames = got
            .iter()
            .map(|f| FrameRow {
                ts_ns: now_unix.saturating_sub(since_epoch.saturating_sub(f.ts)),
                dir: f.dir.name().into(),
                reason: f.reason.map(|r| r.name().into()),
                len: f.len,
                hex: crate::pcapng::to_hex(&f.data),
            })
            .collect();
        Ok(CaptureRead {
            id,
            port: c.point.clone(),
            frames,
            taken: c.ring.taken(),
            lost: c.ring.lost(),
            done: c.count > 0 && c.read >= c.count,
        })
    }

    pub(super) fn trace_read(&mut self, vr: String) -> Result<TraceRead, ControlError> {
        let cfg = self.vr_config(&vr)?.clone();
        let (recs, left, ports) = self.rt.on_vr(&vr, |cell, v| {
            let (recs, left) = cell.take_trace();
            if left == 0 {
                let _ = cell.set_trace(v, 0);
            }
            let ports: Vec<String> =
                (0..cell.port_count()).map(|p| cell.port_name(p).to_string()).collect();
            (recs, left, ports)
        })?;
        let port = |p: u16| ports.get(p as usize).cloned().unwrap_or_else(|| p.to_string());
        let ifname = |i: u16| {
            cfg.interfaces.get(i as usize).map(|f| f.name.clone()).unwrap_or_else(|| i.to_string())
        };
        let packets = recs
            .iter()
            .map(|r| TraceRow {
                ts_ns: r.ts,
                port: port(r.port),
                len: r.len,
                interface: ifname(r.iface),
                ethertype: format!("0x{:04x}", r.ethertype),
                lookup: r.lookup.map(|(destination, next_hop, adj)| TraceLookup {
                    destination,
                    next_hop,
                    adjacency: adj_text(adj, &ifname),
                }),
                egress: r.egress.map(port),
                // The VR's drop, or the egress link's impairment's (the packet was sent).
                drop: r.drop.map(|d| d.name().into()).or_else(|| r.impair.map(|d| d.name().into())),
            })
            .collect();
        Ok(TraceRead { vr, packets, left })
    }

    /// Stops capture `id`: its tap goes (with its cell, if that went first).
    pub(super) fn capture_stop(&mut self, id: u64) -> Result<CaptureStopped, ControlError> {
        let Some(c) = self.captures.remove(&id) else {
            return Err(ControlError::Invalid(format!("no capture {id}")));
        };
        // The cell may be gone (its VRs removed): then so is the tap.
        let _ = self.rt.on_cell(c.cell, |cell| drop(cell.set_capture(None)));
        Ok(CaptureStopped { id, taken: c.ring.taken(), lost: c.ring.lost() })
    }

    /// Traces VR `vr`'s next `count` packets.
    pub(super) fn trace_start(
        &mut self,
        vr: String,
        count: u32,
    ) -> Result<TraceStarted, ControlError> {
        if !(1..=10_000).contains(&count) {
            return Err(ControlError::BadRequest(format!("trace count {count}: 1..=10000")));
        }
        self.rt
            .on_vr(&vr, move |c, v| c.set_trace(v, count))?
            .map_err(|e| ControlError::Invalid(e.0))?;
        Ok(TraceStarted { vr, count })
    }
}

/// What a next hop means, for people.
fn adj_text(adj: dataplane::Adj, ifname: &dyn Fn(u16) -> String) -> String {
    use dataplane::Adj;
    match adj {
        Adj::None => "no route".into(),
        Adj::Local => "local".into(),
        Adj::Blackhole => "blackhole".into(),
        Adj::Broadcast => "broadcast".into(),
        Adj::Glean(i) => format!("connected on {}", ifname(i)),
        Adj::Unreachable => "unreachable".into(),
        Adj::Prohibit => "prohibit".into(),
        Adj::Multi(p) => format!("multipath over {} buckets", p.buckets().len()),
        Adj::Via { iface, gw } => {
            let a = std::net::Ipv6Addr::from(gw);
            match a.to_ipv4_mapped() {
                Some(v4) => format!("via {v4} on {}", ifname(iface)),
                None => format!("via {a} on {}", ifname(iface)),
            }
        }
    }
}
