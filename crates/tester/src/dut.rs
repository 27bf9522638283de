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

    /// Where to address test frames, one [`Target`] per class; `flows` is how many distinct
    /// flows the tester will make, so a DUT can return that many destinations.
    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, Error>;

    /// Starts forwarding and hands over the tester's ends. Called once.
    fn start(&mut self) -> Result<DutPorts, Error>;

    /// Counters since `start`, if the DUT can tell while it runs.
    fn counters(&mut self) -> Option<DutCounters> {
        None
    }

    /// Stops forwarding. Called once, after `start`.
    fn stop(&mut self) -> Result<DutReport, Error>;
}
