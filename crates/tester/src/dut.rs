//! The device under test, as the tester sees it.
//!
//! A DUT is anything that takes frames on one port and forwards them out of another: a
//! routeplex VR in this process, a Linux namespace behind veth or macvlan, a bridge, OVS, an
//! AF_XDP program. The tester needs four things from it, and [`Dut`] asks for exactly those:
//!
//! 1. where to address test frames so that it forwards them ([`Dut::targets`]: one
//!    [`Target`] per class, e.g. per VR);
//! 2. the two tester-side ports, once it runs ([`Dut::start`] → [`DutPorts`]): the generator
//!    writes to `tx`, the sink reads `rx`, and what a refusal on `tx` means ([`Refusal`]);
//! 3. optionally its own counters while it runs ([`Dut::counters`]), so a trial can say where
//!    frames were lost;
//! 4. a final report when it stops ([`Dut::stop`]).
//!
//! A DUT over kernel interfaces would return ports bound to the tester's ends of veth pairs
//! (AF_PACKET or AF_XDP) in `start`, with [`Refusal::Retry`], since a full local TX ring is
//! the tester's own back-pressure there, not a drop by the DUT.
//!
//! A DUT with more than two tester-side ports (several ingress ports, one port per VR, ports
//! that carry traffic both ways) says so with three optional methods: [`Dut::start_ports`]
//! hands over all of them as a [`PortSet`], [`Dut::ingress`] names the port each target's
//! frames enter on, and [`Dut::snapshot`] adds per-class counters (per VR, say) to its own.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ports::Port;
use serde::Serialize;
use wire::MacAddr;

use crate::Error;

/// Where to send one class of test traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    /// The class's name in reports (for example the VR's name).
    pub class: String,
    /// Source MAC of the frames (the tester's).
    #[serde(serialize_with = "mac")]
    pub src_mac: MacAddr,
    /// Destination MAC: the DUT's ingress interface.
    #[serde(serialize_with = "mac")]
    pub dst_mac: MacAddr,
    /// 802.1Q tag of the ingress interface, if any.
    pub vlan: Option<u16>,
    /// Source addresses to use, of one family with `dst`.
    pub src: Vec<IpAddr>,
    /// Destinations the DUT forwards from `tx` to `rx`.
    pub dst: Vec<IpAddr>,
}

fn mac<S: serde::Serializer>(m: &MacAddr, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&m.to_string())
}

/// What a port refusing a frame on the generator's side means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// The frame is lost: the ring the generator writes is the DUT's receive queue (a `mem`
    /// port), so a full ring is the DUT dropping at ingress. Paced loads count it as loss.
    Loss,
    /// Back-pressure from the tester's own side (a full local TX ring): the generator offers
    /// the frame again, and it is not loss.
    Retry,
}

/// The tester's ends of a running DUT.
pub struct DutPorts {
    /// Where the generator sends.
    pub tx: Box<dyn Port>,
    /// Where the sink receives.
    pub rx: Box<dyn Port>,
    /// What a refusal on `tx` means.
    pub refusal: Refusal,
}

/// Every tester-side port of a running DUT: the general form of [`DutPorts`].
pub struct PortSet {
    /// The ports; [`Dut::ingress`] and `sinks` index them.
    pub ports: Vec<Box<dyn Port>>,
    /// The ports forwarded frames come back on: the sink reads these. A port may be both an
    /// ingress and a sink (traffic in both directions); frames arriving on a port that is not
    /// a sink are counted as `returned` and dropped.
    pub sinks: Vec<usize>,
    /// What a refusal on any of them means.
    pub refusal: Refusal,
}

impl From<DutPorts> for PortSet {
    /// `tx` is port 0, `rx` port 1 and the only sink.
    fn from(p: DutPorts) -> PortSet {
        PortSet { ports: vec![p.tx, p.rx], sinks: vec![1], refusal: p.refusal }
    }
}

/// The DUT's own counters, whole and per class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DutSnapshot {
    pub total: DutCounters,
    /// Per class name (say, per VR): what it received, forwarded and dropped. Empty when the
    /// DUT does not count per class.
    pub classes: BTreeMap<String, DutCounters>,
}

impl DutSnapshot {
    /// `self − earlier`, counter by counter.
    pub fn since(&self, earlier: &DutSnapshot) -> DutSnapshot {
        let zero = DutCounters::default();
        DutSnapshot {
            total: self.total.since(&earlier.total),
            classes: self
                .classes
                .iter()
                .map(|(k, v)| (k.clone(), v.since(earlier.classes.get(k).unwrap_or(&zero))))
                .collect(),
        }
    }
}

/// The DUT's own counters: frames in, frames forwarded, frames dropped by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DutCounters {
    pub received: u64,
    pub forwarded: u64,
    /// Non-zero drop counts by reason.
    pub dropped: BTreeMap<String, u64>,
}

impl DutCounters {
    /// `self − earlier`, counter by counter (reasons that did not grow are left out).
    pub fn since(&self, earlier: &DutCounters) -> DutCounters {
        let mut dropped = BTreeMap::new();
        for (k, &v) in &self.dropped {
            let d = v.saturating_sub(earlier.dropped.get(k).copied().unwrap_or(0));
            if d > 0 {
                dropped.insert(k.clone(), d);
            }
        }
        DutCounters {
            received: self.received.saturating_sub(earlier.received),
            forwarded: self.forwarded.saturating_sub(earlier.forwarded),
            dropped,
        }
    }
}

/// What a DUT says when it stops.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DutReport {
    /// Counters over its whole run, if it keeps any.
    pub counters: Option<DutCounters>,
    /// Anything else worth keeping (per-VR counters, per-port counters...).
    pub details: serde_json::Value,
}

/// A device under test. See the module documentation.
pub trait Dut: Send {
    /// One line naming the DUT, for tables.
    fn name(&self) -> String;

    /// Its configuration for the JSON report (kind, table size, where its threads run...).
    fn describe(&self) -> serde_json::Value;

    /// Where to address test frames, one [`Target`] per class (or several with the same class
    /// name: a class entering on several ports); `flows` is how many distinct flows the
    /// tester will make, so a DUT can return that many destinations. May be called again
    /// while the DUT runs, when the tester changes its traffic.
    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, Error>;

    /// Starts forwarding and hands over the tester's ends. Called once.
    fn start(&mut self) -> Result<DutPorts, Error>;

    /// Counters since `start`, if the DUT can tell while it runs.
    fn counters(&mut self) -> Option<DutCounters> {
        None
    }

    /// Per target (in the order [`Dut::targets`] gave them), the index in
    /// [`PortSet::ports`] of the port its frames enter on. Empty (the default): all on port 0.
    /// May be called again after `targets`, and after `start`.
    fn ingress(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Starts forwarding and hands over every tester-side port. Called once, instead of
    /// [`Dut::start`]; the default calls `start` and makes its `tx` port 0 and its `rx` port 1.
    fn start_ports(&mut self) -> Result<PortSet, Error> {
        self.start().map(PortSet::from)
    }

    /// Counters since `start`, whole and per class, taken at one instant. The default wraps
    /// [`Dut::counters`] with no per-class counters.
    fn snapshot(&mut self) -> Option<DutSnapshot> {
        self.counters().map(|total| DutSnapshot { total, classes: BTreeMap::new() })
    }

    /// Stops forwarding. Called once, after `start`.
    fn stop(&mut self) -> Result<DutReport, Error>;
}
