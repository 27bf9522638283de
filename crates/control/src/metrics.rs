//! Prometheus / OpenMetrics metrics: `GET /metrics` on the topology's `metrics: { listen }`.
//!
//! **Where the numbers come from.** Workers are never called from the HTTP side. A scrape
//! asks for a fresh [`Sample`] and waits (at most [`FRESH_WAIT`]) while the thread that owns
//! the [`Node`] (the control loop of `daemon::run`) notices the request on its next turn
//! ([`MetricsServer::refresh`], every ~50 ms), takes a sample (a [`crate::runtime::Runtime::snapshot`], read
//! between the workers' polls as `status` is, plus the route tables' counts) and publishes it.
//! A scrape that finds a sample younger than [`REUSE`] takes it as it is; one whose wait runs
//! out (the control loop is busy with a long `apply`) gets the last sample, whose age
//! `routeplex_sample_age_seconds` tells. A host with no scraper takes no samples.
//!
//! **The exposition** is OpenMetrics text, encoded by the `prometheus-client` crate from the
//! sample on the HTTP thread. Every name starts `routeplex_`; counters end `_total`. Labels:
//! `vr`, `port`, `worker` (its index), `reason` (a drop reason, as in `status`), `source` (a
//! route source), `family` (`ipv4`, `ipv6`), `interface`. A VR's counters carry no `worker`
//! label, so moving it keeps its series; `routeplex_vr_worker` says where it runs. See
//! [`METRICS`] for every family.
//!
//! **The live page.** `GET /` is an HTML page with the topology's drawing ([`crate::graph`],
//! from the sample's topology) whose script fetches `GET /api/graph` every second: JSON with
//! the sample's port, VR and switch counters, impairment labels and the drawing's nodes and
//! edges ([`Sample::graph_page`]); the script turns two samples into rates and writes them
//! beside the links and in tables. The page's HTML, CSS and script are compiled in
//! (`metrics_page.html`), fetch nothing from elsewhere, and write topology names only as text
//! (`textContent`), never as markup.
//!
//! **The HTTP side** is `hyper`'s HTTP/1 server (`http.rs`), without an async runtime: one
//! thread accepting, one short-lived thread per connection driving hyper over the blocking
//! socket. One request per connection, its head at most [`MAX_REQUEST`] bytes, whole within
//! [`READ_DEADLINE`] however the client spreads it out (else `431`, `408`); `GET` (or `HEAD`)
//! `/metrics`, `/` and `/api/graph` only (else `404`, `405`). The response speaks the
//! request's HTTP version (1.0 to a 1.0 client) and closes the connection. At most
//! [`MAX_PENDING`] connections may be sending their head at once, and one more cuts the oldest
//! of them ([`crate::admit`]), so slow or silent clients cannot keep a scraper out (a real one
//! sends its head at once); at most [`MAX_CONNECTIONS`] requests are answered at once, more get
//! 503 at once. There is no authentication: listen on loopback or a management address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dataplane::{Budget, PortDrop, VrDrop};
use ports::PortStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::admit::Pending;
use crate::graph::Graph;
use crate::runtime::Snapshot;
use crate::{ControlError, Node};

mod http;

/// Requests answered at once (their head read); more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 8;
/// Connections sending their request head at once; one more cuts the oldest of them.
pub const MAX_PENDING: usize = 16;
/// The longest request head (request line and headers) read.
pub const MAX_REQUEST: usize = 8 << 10;
/// How long a client may take to send its request head.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// How long a scrape waits for the control loop to take a fresh sample (below Prometheus's
/// shortest usual scrape timeout, 1 s).
pub const FRESH_WAIT: Duration = Duration::from_millis(500);
/// A sample younger than this is served without asking for another.
pub const REUSE: Duration = Duration::from_millis(200);
/// The live page; its drawing goes where `<!--SVG-->` is.
const PAGE: &str = include_str!("metrics_page.html");

/// The response's media type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every metric family: name as exposed (counters with `_total`), type, labels. The
/// exposition has exactly these; a test holds the two to each other.
pub const METRICS: &[(&str, &str, &str)] = &[
    ("routeplex_uptime_seconds", "gauge", ""),
    ("routeplex_memory_rss_bytes", "gauge", ""),
    ("routeplex_sample_age_seconds", "gauge", ""),
    ("routeplex_worker_rounds_total", "counter", "worker"),
    ("routeplex_worker_busy_rounds_total", "counter", "worker"),
    ("routeplex_worker_idle_rounds_total", "counter", "worker"),
    ("routeplex_worker_sleeps_total", "counter", "worker"),
    ("routeplex_worker_naps_total", "counter", "worker"),
    ("routeplex_worker_sleep_seconds_total", "counter", "worker"),
    ("routeplex_worker_spare_seconds", "gauge", "worker"),
    ("routeplex_worker_vrs", "gauge", "worker"),
    ("routeplex_vr_received_total", "counter", "vr"),
    ("routeplex_vr_received_bytes_total", "counter", "vr"),
    ("routeplex_vr_forwarded_total", "counter", "vr"),
    ("routeplex_vr_forwarded_bytes_total", "counter", "vr"),
    ("routeplex_vr_dropped_total", "counter", "vr,reason"),
    ("routeplex_vr_over_budget_total", "counter", "vr"),
    ("routeplex_vr_local_in_total", "counter", "vr"),
    ("routeplex_vr_echo_replies_total", "counter", "vr"),
    ("routeplex_vr_icmp_errors_total", "counter", "vr"),
    ("routeplex_vr_icmp_errors_suppressed_total", "counter", "vr"),
    ("routeplex_vr_neighbor_requests_total", "counter", "vr"),
    ("routeplex_vr_neighbor_replies_total", "counter", "vr"),
    ("routeplex_vr_neighbors_learned_total", "counter", "vr"),
    ("routeplex_vr_queued_total", "counter", "vr"),
    ("routeplex_vr_fragments_sent_total", "counter", "vr"),
    ("routeplex_vr_generated_dropped_total", "counter", "vr"),
    ("routeplex_vr_punted_total", "counter", "vr"),
    ("routeplex_vr_injected_total", "counter", "vr"),
    ("routeplex_vr_worker", "gauge", "vr"),
    ("routeplex_vr_batch", "gauge", "vr"),
    ("routeplex_vr_reservation_packets", "gauge", "vr"),
    ("routeplex_vr_reservation_seconds", "gauge", "vr"),
    ("routeplex_vr_reservation_period_seconds", "gauge", "vr"),
    ("routeplex_vr_reservation_weight", "gauge", "vr"),
    ("routeplex_vr_neighbors", "gauge", "vr"),
    ("routeplex_vr_neighbor_table_size", "gauge", "vr"),
    ("routeplex_vr_neighbor_queue", "gauge", "vr"),
    ("routeplex_vr_routes", "gauge", "vr,source"),
    ("routeplex_vr_fib_prefixes", "gauge", "vr,family"),
    ("routeplex_vr_fib_bytes", "gauge", "vr"),
    ("routeplex_vr_next_hops", "gauge", "vr"),
    ("routeplex_vr_interface_up", "gauge", "vr,interface"),
    ("routeplex_port_received_total", "counter", "port"),
    ("routeplex_port_received_bytes_total", "counter", "port"),
    ("routeplex_port_transmitted_total", "counter", "port"),
    ("routeplex_port_transmitted_bytes_total", "counter", "port"),
    ("routeplex_port_dropped_total", "counter", "port,reason"),
    ("routeplex_port_up", "gauge", "port"),
    ("routeplex_switch_received_total", "counter", "switch"),
    ("routeplex_switch_dropped_total", "counter", "switch,port,reason"),
    ("routeplex_switch_groups", "gauge", "switch"),
];

/// Port drop reasons besides classification ([`PortDrop`]): what the backend reports.
const PORT_BACKEND_DROPS: [&str; 3] = ["rx_dropped", "tx_full", "tx_errors"];

/// One VR's route table as a sample saw it.
#[derive(Clone, Debug)]
pub struct TableRow {
    pub vr: String,
    /// Routes by source name (`local`, `connected`, `static`, `api`, `table`).
    pub routes: Vec<(&'static str, usize)>,
    /// Prefixes in the IPv4 and IPv6 FIBs.
    pub fib_prefixes: (usize, usize),
    pub fib_bytes: usize,
    pub next_hops: usize,
}

/// What one scrape exposes: the data of `status`, typed.
#[derive(Clone, Debug)]
pub struct Sample {
    pub taken: Instant,
    pub snapshot: Snapshot,
    pub tables: Vec<TableRow>,
    pub rss_bytes: u64,
    /// The running topology as drawn on the live page.
    pub graph: Graph,
}

impl Sample {
    /// Takes one from a running node (asks every worker, between two of its polls).
    pub fn of(node: &Node) -> Result<Sample, ControlError> {
        let snapshot = node.runtime().snapshot()?;
        let tables = snapshot
            .vrs()
            .filter_map(|(_, v)| {
                let t = node.table(&v.name)?;
                Some(TableRow {
                    vr: v.name.clone(),
                    routes: t.counts().iter().map(|(s, n)| (s.name(), *n)).collect(),
                    fib_prefixes: t.fib_prefixes(),
                    fib_bytes: t.fib_bytes(),
                    next_hops: t.next_hops(),
                })
            })
            .collect();
        let graph = Graph::of(node.topology());
        let rss_bytes = crate::node::rss_bytes();
        Ok(Sample { taken: Instant::now(), snapshot, tables, rss_bytes, graph })
    }

    /// The live page's numbers (`GET /api/graph`): `uptime_s` (the data plane's clock when
    /// sampled, for rates), `graph` ([`Graph::to_rows`]), and per port (`rx`, `tx`, `rx_bytes`,
    /// `tx_bytes`, `dropped`: every reason, the impairment's included, `impair`: its label,
    /// `held`: frames waiting on the link), per VR (`received`, `forwarded`, `dropped`,
    /// `local_in`, `echo_replies`) and per switch (`received`, `dropped`) counters.
    pub fn graph_page(&self) -> crate::api::GraphPage {
        use crate::api::{PagePort, PageSwitch, PageVr};
        let snap = &self.snapshot;
        let ports = snap
            .ports()
            .map(|p| {
                let classified: u64 = PortDrop::ALL.iter().map(|&r| p.counters.dropped(r)).sum();
                let backend = p.stats.rx_dropped + p.stats.tx_full + p.stats.tx_errors;
                let impaired: u64 = p.impair.iter().flat_map(|i| i.counters.drops).sum();
                PagePort {
                    name: p.name.clone(),
                    up: p.status == PortStatus::Up,
                    rx: p.stats.rx_packets,
                    tx: p.stats.tx_packets,
                    rx_bytes: p.stats.rx_bytes,
                    tx_bytes: p.stats.tx_bytes,
                    dropped: classified + backend + impaired,
                    impair: p.impair.as_ref().map(|i| crate::graph::impair_label(&i.config)),
                    held: p.impair.as_ref().map(|i| i.held),
                }
            })
            .collect();
        let vrs = snap
            .vrs()
            .map(|(worker, v)| {
                let c = &v.counters;
                PageVr {
                    name: v.name.clone(),
                    worker,
                    received: c.rx_packets,
                    forwarded: c.forwarded,
                    dropped: c.dropped_total(),
                    local_in: c.local_in,
                    echo_replies: c.echo_replies,
                }
            })
            .collect();
        let switches = snap
            .switches()
            .map(|s| {
                let dropped: u64 = s.members.iter().flat_map(|(_, d)| d.iter()).sum();
                PageSwitch { name: s.name.clone(), received: s.counters.rx, dropped }
            })
            .collect();
        crate::api::GraphPage {
            uptime_s: snap.uptime.as_secs_f64(),
            graph: self.graph.to_rows(),
            ports,
            vrs,
            switches,
        }
    }

    /// The live page (`GET /`): the drawing in the compiled-in HTML.
    pub fn page(&self) -> String {
        PAGE.replacen("<!--SVG-->", &self.graph.svg(), 1)
    }

    /// The OpenMetrics text of this sample (ending `# EOF`).
    pub fn render(self: &Arc<Self>) -> String {
        let mut reg = Registry::default();
        reg.register_collector(Box::new(Collect(self.clone())));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg)
            .expect("writing to a String cannot fail");
        out
    }
}

type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
struct Collect(Arc<Sample>);

/// One family: its name without `_total` (the encoder adds it to counters), from [`METRICS`].
fn family<'a, V>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
    counter: bool,
) -> Result<(), std::fmt::Error>
where
    V: EncodeCounterValue + EncodeGaugeValue + 'a,
{
    let base = name.strip_suffix("_total").unwrap_or(name);
    let kind = if counter { MetricType::Counter } else { MetricType::Gauge };
    let mut m = enc.encode_descriptor(base, help, None, kind)?;
    for (labels, v) in rows {
        let fam = m.encode_family(&labels)?;
        if counter {
            ConstCounter::new(v).encode(fam)?;
        } else {
            ConstGauge::new(v).encode(fam)?;
        }
    }
    Ok(())
}

fn counter<V: EncodeCounterValue + EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), std::fmt::Error> {
    family(enc, name, help, rows, true)
}

fn gauge<V: EncodeCounterValue + EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, V)>,
) -> Result<(), std::fmt::Error> {
    family(enc, name, help, rows, false)
}

fn l1(k: &'static str, v: impl ToString) -> Labels {
    vec![(k, v.to_string())]
}

impl Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &*self.0;
        let snap = &s.snapshot;
        let e = &mut enc;
        let none = Labels::new;
        gauge(
            e,
            "routeplex_uptime_seconds",
            "Time the data plane has run",
            [(none(), snap.uptime.as_secs_f64())],
        )?;
        gauge(
            e,
            "routeplex_memory_rss_bytes",
            "Resident memory of the process",
            [(none(), s.rss_bytes)],
        )?;
        gauge(
            e,
            "routeplex_sample_age_seconds",
            "Age of the sample these numbers come from (grows while the control loop is busy)",
            [(none(), s.taken.elapsed().as_secs_f64())],
        )?;

        // Workers.
        let w = || snap.workers.iter();
        let wl = |i: usize| l1("worker", i);
        counter(
            e,
            "routeplex_worker_rounds_total",
            "Polls of all its cells",
            w().map(|x| (wl(x.index), x.rounds)),
        )?;
        counter(
            e,
            "routeplex_worker_busy_rounds_total",
            "Polls that received frames",
            w().map(|x| (wl(x.index), x.rounds.saturating_sub(x.idle_rounds))),
        )?;
        counter(
            e,
            "routeplex_worker_idle_rounds_total",
            "Polls that received nothing",
            w().map(|x| (wl(x.index), x.idle_rounds)),
        )?;
        counter(
            e,
            "routeplex_worker_sleeps_total",
            "Sleeps on its ports' descriptors",
            w().map(|x| (wl(x.index), x.sleeps)),
        )?;
        counter(
            e,
            "routeplex_worker_naps_total",
            "Naps (a port without a descriptor)",
            w().map(|x| (wl(x.index), x.naps)),
        )?;
        counter(
            e,
            "routeplex_worker_sleep_seconds_total",
            "Time spent sleeping and napping",
            w().map(|x| (wl(x.index), x.slept_ns as f64 / 1e9)),
        )?;
        gauge(
            e,
            "routeplex_worker_spare_seconds",
            "Spare capacity in its last spare-capacity window",
            w().map(|x| (wl(x.index), x.spare_ns as f64 / 1e9)),
        )?;
        gauge(
            e,
            "routeplex_worker_vrs",
            "VRs it runs",
            w().map(|x| (wl(x.index), x.cells.iter().map(|c| c.vrs.len()).sum::<usize>() as u64)),
        )?;

        // VRs: counters.
        let vrs = || snap.vrs();
        let vl = |v: &crate::runtime::VrStatus| l1("vr", &v.name);
        type Pick = fn(&dataplane::VrCounters) -> u64;
        let vr_counters: [(&str, &str, Pick); 17] = [
            ("routeplex_vr_received_total", "Packets demuxed to the VR", |c| c.rx_packets),
            ("routeplex_vr_received_bytes_total", "Bytes of those packets", |c| c.rx_bytes),
            ("routeplex_vr_forwarded_total", "Transit packets sent out of an egress port", |c| c.forwarded),
            ("routeplex_vr_forwarded_bytes_total", "Bytes of those packets", |c| c.forwarded_bytes),
            ("routeplex_vr_over_budget_total", "Packets dropped because its reservation was spent (also dropped{reason=\"over_budget\"})", |c| c.dropped(VrDrop::OverBudget)),
            ("routeplex_vr_local_in_total", "Packets addressed to the VR itself", |c| c.local_in),
            ("routeplex_vr_echo_replies_total", "Echo replies made", |c| c.echo_replies),
            ("routeplex_vr_icmp_errors_total", "ICMP errors made", |c| c.icmp_errors),
            ("routeplex_vr_icmp_errors_suppressed_total", "ICMP errors not sent (rate limit, RFC rules)", |c| c.icmp_errors_suppressed),
            ("routeplex_vr_neighbor_requests_total", "ARP requests and neighbor solicitations sent", |c| c.neighbor_requests),
            ("routeplex_vr_neighbor_replies_total", "ARP replies and neighbor advertisements sent", |c| c.neighbor_replies),
            ("routeplex_vr_neighbors_learned_total", "Neighbor entries created or updated", |c| c.neighbors_learned),
            ("routeplex_vr_queued_total", "Packets held while their next hop was resolved", |c| c.queued),
            ("routeplex_vr_fragments_sent_total", "IPv4 fragments made", |c| c.fragments_sent),
            ("routeplex_vr_generated_dropped_total", "Packets the VR made that could not be sent", |c| c.generated_dropped),
            ("routeplex_vr_punted_total", "Packets for the VR handed to its Linux control plane", |c| c.punted),
            ("routeplex_vr_injected_total", "Frames its Linux control plane sent out of its ports", |c| c.injected),
        ];
        for (name, help, pick) in vr_counters {
            counter(e, name, help, vrs().map(|(_, v)| (vl(v), pick(&v.counters))))?;
        }
        counter(
            e,
            "routeplex_vr_dropped_total",
            "Received packets dropped, by reason",
            vrs().flat_map(|(_, v)| {
                VrDrop::ALL.iter().map(move |&r| {
                    (
                        vec![("vr", v.name.clone()), ("reason", r.name().to_string())],
                        v.counters.dropped(r),
                    )
                })
            }),
        )?;

        // VRs: gauges.
        gauge(
            e,
            "routeplex_vr_worker",
            "The worker the VR runs on",
            vrs().map(|(w, v)| (vl(v), w as u64)),
        )?;
        gauge(
            e,
            "routeplex_vr_batch",
            "Packets it may process per burst",
            vrs().map(|(_, v)| (vl(v), v.batch as u64)),
        )?;
        let res = || vrs().filter_map(|(_, v)| v.reservation.map(|r| (v, r)));
        gauge(
            e,
            "routeplex_vr_reservation_packets",
            "Reservation: packets per period (VRs with a packet budget)",
            res().filter_map(|(v, r)| match r.budget {
                Budget::Packets(n) => Some((vl(v), n as f64)),
                Budget::Time(_) => None,
            }),
        )?;
        gauge(
            e,
            "routeplex_vr_reservation_seconds",
            "Reservation: worker time per period (VRs with a time budget)",
            res().filter_map(|(v, r)| match r.budget {
                Budget::Time(ns) => Some((vl(v), ns as f64 / 1e9)),
                Budget::Packets(_) => None,
            }),
        )?;
        gauge(
            e,
            "routeplex_vr_reservation_period_seconds",
            "Reservation: its period",
            res().map(|(v, r)| (vl(v), r.period_ns as f64 / 1e9)),
        )?;
        gauge(
            e,
            "routeplex_vr_reservation_weight",
            "Reservation: its share of spare capacity once the budget is spent",
            res().map(|(v, r)| (vl(v), f64::from(r.weight))),
        )?;
        gauge(
            e,
            "routeplex_vr_neighbors",
            "Neighbor table entries in use",
            vrs().map(|(_, v)| (vl(v), v.neighbors.0 as u64)),
        )?;
        gauge(
            e,
            "routeplex_vr_neighbor_table_size",
            "Neighbor table size",
            vrs().map(|(_, v)| (vl(v), v.neighbors.1 as u64)),
        )?;
        gauge(
            e,
            "routeplex_vr_neighbor_queue",
            "Packets waiting for neighbor resolution now",
            vrs().map(|(_, v)| (vl(v), v.queued as u64)),
        )?;
        let t = || s.tables.iter();
        let tl = |t: &TableRow| l1("vr", &t.vr);
        gauge(
            e,
            "routeplex_vr_routes",
            "Routes by source",
            t().flat_map(|t| {
                t.routes.iter().map(|(src, n)| {
                    (vec![("vr", t.vr.clone()), ("source", src.to_string())], *n as u64)
                })
            }),
        )?;
        gauge(
            e,
            "routeplex_vr_fib_prefixes",
            "Prefixes in the FIB, by family",
            t().flat_map(|t| {
                [("ipv4", t.fib_prefixes.0), ("ipv6", t.fib_prefixes.1)]
                    .map(|(f, n)| (vec![("vr", t.vr.clone()), ("family", f.to_string())], n as u64))
            }),
        )?;
        gauge(
            e,
            "routeplex_vr_fib_bytes",
            "Bytes of the published FIBs",
            t().map(|t| (tl(t), t.fib_bytes as u64)),
        )?;
        gauge(
            e,
            "routeplex_vr_next_hops",
            "Adjacencies in use",
            t().map(|t| (tl(t), t.next_hops as u64)),
        )?;
        gauge(
            e,
            "routeplex_vr_interface_up",
            "1 while the interface is up",
            vrs().flat_map(|(_, v)| {
                v.interfaces.iter().map(|(i, _, up)| {
                    (vec![("vr", v.name.clone()), ("interface", i.clone())], u64::from(*up))
                })
            }),
        )?;

        // Ports.
        let p = || snap.ports();
        let pl = |p: &crate::runtime::PortRow| l1("port", &p.name);
        counter(
            e,
            "routeplex_port_received_total",
            "Frames received",
            p().map(|p| (pl(p), p.stats.rx_packets)),
        )?;
        counter(
            e,
            "routeplex_port_received_bytes_total",
            "Bytes received",
            p().map(|p| (pl(p), p.stats.rx_bytes)),
        )?;
        counter(
            e,
            "routeplex_port_transmitted_total",
            "Frames transmitted",
            p().map(|p| (pl(p), p.stats.tx_packets)),
        )?;
        counter(
            e,
            "routeplex_port_transmitted_bytes_total",
            "Bytes transmitted",
            p().map(|p| (pl(p), p.stats.tx_bytes)),
        )?;
        counter(
            e,
            "routeplex_port_dropped_total",
            "Frames dropped at the port, by reason (classification, the backend's rx_dropped, tx_full, tx_errors, and on an impaired port its impairment's impair_loss, impair_limit, impair_rate, impair_tx_full)",
            p().flat_map(|p| {
                let backend = [p.stats.rx_dropped, p.stats.tx_full, p.stats.tx_errors];
                let impair = p.impair.iter().flat_map(|i| {
                    dataplane::impair::ImpairDrop::ALL
                        .iter()
                        .map(|&r| (r.name(), i.counters.dropped(r)))
                });
                PortDrop::ALL
                    .iter()
                    .map(|&r| (r.name(), p.counters.dropped(r)))
                    .chain(PORT_BACKEND_DROPS.into_iter().zip(backend))
                    .chain(impair)
                    .map(|(r, n)| (vec![("port", p.name.clone()), ("reason", r.to_string())], n))
                    .collect::<Vec<_>>()
            }),
        )?;
        gauge(
            e,
            "routeplex_port_up",
            "1 while the port moves packets (a memif peer is connected, the interface is there)",
            p().map(|p| (pl(p), u64::from(p.status == PortStatus::Up))),
        )?;

        // Switches.
        let s = || snap.switches();
        counter(
            e,
            "routeplex_switch_received_total",
            "Frames switches received from their members",
            s().map(|s| (l1("switch", &s.name), s.counters.rx)),
        )?;
        counter(
            e,
            "routeplex_switch_dropped_total",
            "Frames a switch dropped, by member port (the one a frame came from, or for tx_full the one it was to leave by) and reason",
            s().flat_map(|s| {
                s.members
                    .iter()
                    .flat_map(|(port, d)| {
                        dataplane::SwitchDrop::ALL.iter().map(move |&r| {
                            let l = vec![
                                ("switch", s.name.clone()),
                                ("port", port.clone()),
                                ("reason", r.name().to_string()),
                            ];
                            (l, d[r as usize])
                        })
                    })
                    .collect::<Vec<_>>()
            }),
        )?;
        gauge(
            e,
            "routeplex_switch_groups",
            "Multicast groups the switch's IGMP/MLD snooping has registered",
            s().map(|s| (l1("switch", &s.name), s.groups as u64)),
        )?;
        Ok(())
    }
}

/// What the HTTP side counted (the connections it turned away are logged too).
#[derive(Debug, Default)]
pub struct HttpCounts {
    /// Connections cut while sending their head, to make room ([`MAX_PENDING`]).
    pub cut: AtomicU64,
    /// Requests answered 503 because [`MAX_CONNECTIONS`] were being answered.
    pub busy: AtomicU64,
    /// Heads not complete within [`READ_DEADLINE`] (answered 408).
    pub timed_out: AtomicU64,
}

impl HttpCounts {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// What the HTTP side and the control loop share.
#[derive(Default)]
struct Shared {
    slot: Mutex<Slot>,
    fresh: Condvar,
    /// A scrape waits for a sample (checked without the lock by the control loop).
    wanted: AtomicBool,
    counts: HttpCounts,
    /// Requests being answered.
    answering: AtomicUsize,
}

#[derive(Default)]
struct Slot {
    sample: Option<Arc<Sample>>,
    /// Bumped by each publish, sample or error.
    generation: u64,
    /// Why the last sample could not be taken.
    error: Option<String>,
}

/// Why the endpoint has no numbers to serve (503).
#[derive(Debug, thiserror::Error)]
enum NoSample {
    /// The last sample could not be taken: why.
    #[error("{0}")]
    Failed(String),
    #[error("no sample yet: the control loop has not answered")]
    NotYet,
}

impl Shared {
    /// The sample for one request: a fresh one if the control loop gives one in time, else the
    /// last one; `Err` when there is none.
    fn sample(&self) -> Result<Arc<Sample>, NoSample> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let young = slot.sample.as_ref().is_some_and(|s| s.taken.elapsed() < REUSE);
        if !young {
            let generation = slot.generation;
            self.wanted.store(true, Ordering::Release);
            let deadline = Instant::now() + FRESH_WAIT;
            while slot.generation == generation {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                slot = self.fresh.wait_timeout(slot, left).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        match (&slot.sample, &slot.error) {
            (Some(s), _) => Ok(s.clone()),
            (None, Some(e)) => Err(NoSample::Failed(e.clone())),
            (None, None) => Err(NoSample::NotYet),
        }
    }
}

/// The metrics endpoint: an accepting thread and its connections. Dropping it stops them.
pub struct MetricsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    pending: Arc<Pending>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0: any free port, see [`MetricsServer::local_addr`]) and serves
    /// scrapes from a thread of its own.
    pub fn start(addr: SocketAddr) -> Result<MetricsServer, ControlError> {
        let what = format!("metrics listen {addr}");
        let l = TcpListener::bind(addr).map_err(|e| ControlError::io(&what, e))?;
        let addr = l.local_addr().map_err(|e| ControlError::io(&what, e))?;
        let shared = Arc::new(Shared::default());
        let stop = Arc::new(AtomicBool::new(false));
        let pending = Pending::new(MAX_PENDING);
        let thread = {
            let (shared, stop, pending) = (shared.clone(), stop.clone(), pending.clone());
            std::thread::Builder::new()
                .name("metrics-accept".into())
                .spawn(move || http::accept_loop(l, &shared, &pending, &stop))
                .map_err(|e| ControlError::io("metrics thread", e))?
        };
        Ok(MetricsServer { addr, shared, pending, stop, thread: Some(thread) })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the HTTP side counted so far.
    pub fn counts(&self) -> &HttpCounts {
        &self.shared.counts
    }

    /// Connections sending their request head now.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether a scrape waits for a sample.
    pub fn wanted(&self) -> bool {
        self.shared.wanted.load(Ordering::Acquire)
    }

    /// For the thread that owns `node`, on each turn of its loop: takes and publishes a
    /// sample when a scrape waits for one; otherwise does nothing.
    pub fn refresh(&self, node: &Node) {
        if self.wanted() {
            self.publish(Sample::of(node));
        }
    }

    /// Publishes a sample (or why none could be taken) to waiting and later scrapes.
    pub fn publish(&self, s: Result<Sample, ControlError>) {
        self.shared.wanted.store(false, Ordering::Release);
        let mut slot = self.shared.slot.lock().unwrap_or_else(|e| e.into_inner());
        match s {
            Ok(s) => {
                slot.sample = Some(Arc::new(s));
                slot.error = None;
            }
            Err(e) => slot.error = Some(e.to_string()),
        }
        slot.generation += 1;
        drop(slot);
        self.shared.fresh.notify_all();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the blocking accept with a connection of our own; join only if that worked.
        let ip = match self.addr.ip() {
            IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let woke = TcpStream::connect_timeout(
            &SocketAddr::new(ip, self.addr.port()),
            Duration::from_secs(1),
        );
        if let (Ok(_), Some(t)) = (woke, self.thread.take()) {
            let _ = t.join();
        }
    }
}
