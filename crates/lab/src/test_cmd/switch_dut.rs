//! routeplex's learning switch alone as the DUT (`path: switch` in a scenario): generator →
//! switch → sink over `mem` or `memif` ports, the engine (no VRs) polled on its own thread as
//! the VR DUT's is. VALE's round-trip figure measures this path; the sink's MAC is a static
//! station on the sink's port, so every frame is known unicast.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::{bail, Result};
use control::Topology;
use dataplane::{Engine, PortDrop, SwitchDrop};
use serde_json::{json, Value};
use tester::{Dut, DutCounters, DutPorts, DutReport, DutSnapshot, PortSet, Refusal, Target};
use wire::MacAddr;

use super::dut::{ask_snapshot, mem_ends, memif_ends, placement_sampler, spawn_worker, Shared};
use crate::lab;
use crate::sys::threads::Sampler;

/// The sink's MAC: a static station on the switch's sink port.
pub const SINK_MAC: &str = "02:00:00:00:00:fe";
/// The generator's MAC, learned by the switch on the generator's port.
const GEN_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
/// The one class of traffic, in reports.
const CLASS: &str = "switch";

/// The topology's one switch between two ports, as the DUT.
pub struct SwitchDut {
    topo: Topology,
    /// The generator's port, then the sink's, by name.
    names: [String; 2],
    /// Their topology indices.
    index: [usize; 2],
    pin: Option<usize>,
    shared: Arc<Shared>,
    lab: Option<lab::Lab>,
    worker: Option<JoinHandle<Engine>>,
    sampler: Option<Sampler>,
    report: Option<Value>,
}

impl SwitchDut {
    /// The switch of `topo` (which has exactly one, and no VRs) between `ingress` and
    /// `egress`; the worker pinned to `pin`.
    pub fn new(topo: Topology, pin: Option<usize>, ingress: &str, egress: &str) -> Result<Self> {
        if topo.switches.len() != 1 || !topo.vrs.is_empty() {
            bail!("{}: the switch DUT needs one switch and no VRs", topo.source);
        }
        let idx = |p: &str| topo.port_index(p).ok_or_else(|| crate::format_err!("no port {p}"));
        let index = [idx(ingress)?, idx(egress)?];
        let lab = lab::build(&topo, &[])?;
        Ok(SwitchDut {
            names: [ingress.to_string(), egress.to_string()],
            index,
            topo,
            pin,
            shared: Arc::new(Shared::default()),
            lab: Some(lab),
            worker: None,
            sampler: None,
            report: None,
        })
    }
}

/// The switch's counters as the DUT's: what it received, forwarded as known unicast and
/// dropped by reason, with the ports' classification drops.
fn snapshot(e: &Engine, index: [usize; 2]) -> DutSnapshot {
    let mut dropped = BTreeMap::new();
    let (mut received, mut forwarded) = (0, 0);
    for sw in e.switches() {
        let c = sw.counters();
        received += c.rx;
        forwarded += c.forwarded;
        for &r in SwitchDrop::ALL {
            let n = c.dropped(r);
            if n > 0 {
                *dropped.entry(format!("switch_{}", r.name())).or_insert(0) += n;
            }
        }
    }
    for p in index {
        for &r in PortDrop::ALL {
            let n = e.port_counters(p).dropped(r);
            if n > 0 {
                *dropped.entry(format!("port_{}", r.name())).or_insert(0) += n;
            }
        }
    }
    let total = DutCounters { received, forwarded, dropped };
    DutSnapshot { total: total.clone(), classes: BTreeMap::from([(CLASS.to_string(), total)]) }
}

impl Dut for SwitchDut {
    fn name(&self) -> String {
        format!("routeplex switch, {}", self.topo.source)
    }

    fn describe(&self) -> Value {
        let memif = matches!(self.topo.ports[self.index[0]].kind, control::PortKind::Memif(_));
        json!({
            "name": self.name(),
            "dut": "routeplex",
            "kind": "routeplex learning switch, in process, no VR",
            "topology": self.topo.source,
            "path": "generator → switch → sink",
            "ports": {"generator": self.names[0], "sink": self.names[1],
                      "backend": if memif { "memif (the DUT the server, the tester an in-process client)" } else { "mem" }},
            "sink_mac": SINK_MAC,
            "worker": match self.pin {
                Some(c) => format!("one thread pinned to CPU {c}"),
                None => "one thread, not pinned".into(),
            },
        })
    }

    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, tester::Error> {
        let sink: MacAddr = SINK_MAC.parse().map_err(|_| tester::Error::new("sink MAC"))?;
        // The switch reads no IP header: any addresses make the flows (198.18.0.0/15).
        let n = flows.clamp(1, 65_536) as u32;
        let dst = (0..n).map(|i| IpAddr::V4(Ipv4Addr::from(0xc613_0000 + i))).collect();
        let src = (1..=16).map(|i| IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i))).collect();
        Ok(vec![Target {
            class: CLASS.into(),
            src_mac: GEN_MAC,
            dst_mac: sink,
            vlan: None,
            src,
            dst,
        }])
    }

    fn start(&mut self) -> Result<DutPorts, tester::Error> {
        Err(tester::Error::new("the switch DUT hands over its ports with start_ports"))
    }

    fn start_ports(&mut self) -> Result<PortSet, tester::Error> {
        let mut lab =
            self.lab.take().ok_or_else(|| tester::Error::new("the switch DUT already ran"))?;
        let ends = mem_ends(&mut lab, &self.topo, &self.names)?;
        let index = self.index;
        let w = spawn_worker(lab.engine, self.shared.clone(), self.pin, move |e: &Engine| {
            snapshot(e, index)
        })?;
        self.worker = Some(w);
        self.sampler = Some(placement_sampler());
        let ports = memif_ends(&self.topo, &self.names, ends)?;
        Ok(PortSet { ports, sinks: vec![1], refusal: Refusal::Loss })
    }

    fn snapshot(&mut self) -> Option<DutSnapshot> {
        self.worker.as_ref()?;
        ask_snapshot(&self.shared)
    }

    fn counters(&mut self) -> Option<DutCounters> {
        self.snapshot().map(|s| s.total)
    }

    fn stop(&mut self) -> Result<DutReport, tester::Error> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let Some(t) = self.worker.take() else {
            return Ok(DutReport {
                counters: None,
                details: self.report.clone().unwrap_or(Value::Null),
            });
        };
        let e = t.join().map_err(|_| tester::Error::new("the DUT's worker thread panicked"))?;
        let s = snapshot(&e, self.index);
        let c = e.switches().first().map(|sw| *sw.counters());
        let mut details = json!({
            "switch": c.map(|c| json!({"rx": c.rx, "forwarded": c.forwarded, "flooded": c.flooded})),
            "ports": self.index.iter().map(|&p| {
                let st = e.port_stats(p);
                json!({"name": e.port_name(p), "rx_packets": st.rx_packets, "tx_packets": st.tx_packets, "tx_full": st.tx_full})
            }).collect::<Vec<_>>(),
        });
        if let Some(sm) = self.sampler.take() {
            details["placement"] = sm.finish().to_json();
        }
        self.report = Some(details.clone());
        Ok(DutReport { counters: Some(s.total), details })
    }
}

impl Drop for SwitchDut {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.worker.take() {
            let _ = t.join();
        }
    }
}
