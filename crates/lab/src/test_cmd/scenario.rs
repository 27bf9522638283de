//! `routeplex test scenario FILE`: one experiment from a file (see `tester::scenario` for the
//! format), run against DUTs built from each point's parameters: routeplex VRs (a topology
//! generated from the numbers, run by [`RouteplexDut`]), Linux VRs on macvlan devices (root),
//! or the tester's fake DUTs. Prints the table (or the JSON) and writes JSON, CSV, PNG plots
//! and the generated topologies to the output folder.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{Context, Result};
use clap::Args;
use control::model::{
    IfaceDoc, MemberDoc, MemifDoc, MsrDoc, NeighborDoc, PortDoc, PortKindDoc, ReservationDoc,
    StaticMacDoc, SwitchDoc, TopologyDoc, VrDoc, WorkersDoc,
};
use control::Topology;
use serde_json::json;
use tester::scenario::{
    self, Backend, BuildError, BuiltDut, DutBuilder, DutParams, DutPath, FakeBuilder, Layout,
    ReservationSpec, Routes, RunOptions, Scenario,
};
use tester::RunnerOptions;

use super::dut::RouteplexDut;
use super::kernel_dut;
use super::switch_dut::SwitchDut;
use crate::lab::Table;
use crate::{sys, Family};

/// `routeplex test scenario`.
#[derive(Args, Debug)]
pub struct ScenarioArgs {
    /// The scenario file (YAML; examples/scenarios/ has the seed experiments).
    pub file: PathBuf,
    /// Short trials, one repetition, the axis's quick values (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Where to write the JSON, CSV, plots and generated topologies (default:
    /// $XDG_CACHE_HOME/routeplex/scenario-results/NAME, or ~/.cache/..., or the temp dir's).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not pin the tester to CPU 0 and the DUT to CPU 1.
    #[arg(long)]
    pub no_pin: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Sleep this long (µs) when the tester or a fake DUT has nothing to do, instead of
    /// spinning (for machines with fewer cores than threads).
    #[arg(long)]
    pub idle_sleep_us: Option<f64>,
}

/// Builds the DUT of each point.
pub struct Builder {
    /// The CPU the DUT's thread is pinned to.
    pub dut_cpu: Option<usize>,
    pub fake: FakeBuilder,
    /// Tables already made, by (routes, family).
    tables: BTreeMap<(String, bool), Table>,
    /// Heap of the first routeplex DUT built per parameters other than the VR count.
    heaps: BTreeMap<String, (usize, f64)>,
    /// Whether this process may build namespaces.
    pub root: bool,
}

impl Builder {
    pub fn new(dut_cpu: Option<usize>, idle_sleep: Option<Duration>) -> Builder {
        Builder {
            dut_cpu,
            fake: FakeBuilder { idle_sleep },
            tables: BTreeMap::new(),
            heaps: BTreeMap::new(),
            root: sys::euid() == 0,
        }
    }

    fn table(&mut self, p: &DutParams) -> Result<Table, BuildError> {
        let v6 = p.family == "ipv6";
        let key = (format!("{:?}", p.routes), v6);
        if !self.tables.contains_key(&key) {
            let t = match p.routes {
                Routes::Count(1) => Table {
                    label: "one default route".into(),
                    v4: vec![("0.0.0.0/0".parse().expect("a prefix"), 0)],
                    v6: vec![("::/0".parse().expect("a prefix"), 0)],
                },
                Routes::Count(n) => {
                    let mut t = Table::generated(if v6 { 1 } else { n }, if v6 { n } else { 1 }, 1);
                    t.label = format!("{n} generated prefixes with a real table's shape");
                    t
                }
                Routes::Real => {
                    use fib::prefix_file::{cached, Family as F};
                    if cached(F::Ipv4).is_none() || cached(F::Ipv6).is_none() {
                        return Err(BuildError::Skip(
                            "the real Internet table is not cached (run scripts/fetch-prefixes)"
                                .into(),
                        ));
                    }
                    Table::real_or_generated(1, 1, 1)
                        .map_err(|e| BuildError::Fail(e.to_string()))?
                }
            };
            self.tables.insert(key.clone(), t);
        }
        let t = &self.tables[&key];
        Ok(Table { label: t.label.clone(), v4: t.v4.clone(), v6: t.v6.clone() })
    }

    fn routeplex(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError> {
        // Several workers run on control's multi-worker runtime, each wanting a CPU of its
        // own, and the generator and sink one more: without them the point would measure
        // the sharing, so it is skipped, saying so.
        let online = sys::online_cpus();
        if p.workers > 1 && online < p.workers + 1 {
            return Err(BuildError::Skip(format!(
                "workers: {}: needs {} CPUs (one per worker, one for the generator and sink); this machine has {online}",
                p.workers,
                p.workers + 1
            )));
        }
        let vifs = if p.vifs == 0 { p.ingress_ports + p.egress_ports } else { p.vifs };
        if p.vrs * vifs > MAX_IFACES {
            return Err(BuildError::Fail(format!(
                "{} VRs × {vifs} interfaces: the generated topology addresses at most {MAX_IFACES} \
                 interfaces (a /30 each in 198.18.0.0/15)",
                p.vrs
            )));
        }
        let g = topology(p);
        let fail = |e: crate::Error| BuildError::Fail(format!("{e:#}"));
        let topo = g.build().map_err(fail)?;
        let table = self.table(p)?;
        let family = if p.family == "ipv6" { Family::Ipv6 } else { Family::Ipv4 };
        let heap0 = crate::sys::heap_in_use();
        let t0 = Instant::now();
        let pin = if p.pin { self.dut_cpu } else { None };
        let mut d = match p.path {
            DutPath::SwitchVr => RouteplexDut::behind_switch(
                "routeplex",
                topo,
                table,
                family,
                pin,
                g.ingress,
                g.egress,
            ),
            _ => {
                RouteplexDut::with_roles("routeplex", topo, table, family, pin, g.ingress, g.egress)
            }
        }
        .map_err(fail)?;
        d.set_pin_workers(p.pin);
        d.build_now().map_err(fail)?;
        let build_s = t0.elapsed().as_secs_f64();
        let mut facts = vec![
            ("build_s".to_string(), build_s),
            ("routes_per_vr".to_string(), d.vrs()[0].routes.len() as f64),
        ];
        if let (Some(a), Some(b)) = (heap0, crate::sys::heap_in_use()) {
            let bytes = b.saturating_sub(a) as f64;
            facts.push(("heap_bytes".into(), bytes));
            facts.push(("bytes_per_vr".into(), bytes / p.vrs as f64));
            // Against the first DUT built with the same parameters but another VR count: what
            // one more VR costs, without the ports' rings.
            let key = format!("{:?}", DutParams { vrs: 0, reserved_vrs: None, ..p.clone() });
            match self.heaps.get(&key) {
                Some(&(n, h)) if n != p.vrs => {
                    let extra = (bytes - h) / (p.vrs as f64 - n as f64);
                    facts.push(("marginal_bytes_per_vr".into(), extra));
                }
                Some(_) => {}
                None => {
                    self.heaps.insert(key, (p.vrs, bytes));
                }
            }
        }
        Ok(BuiltDut { dut: Box::new(d), facts, topology: Some((g.file, g.yaml)) })
    }

    /// `path: switch`: routeplex's learning switch alone between the generator and the sink.
    fn switch(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError> {
        let g = topology(p);
        let fail = |e: crate::Error| BuildError::Fail(format!("{e:#}"));
        let topo = g.build().map_err(fail)?;
        let pin = if p.pin { self.dut_cpu } else { None };
        let d = SwitchDut::new(topo, pin, &g.ingress[0], &g.egress[0]).map_err(fail)?;
        Ok(BuiltDut { dut: Box::new(d), facts: Vec::new(), topology: Some((g.file, g.yaml)) })
    }

    fn macvlan(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError> {
        if p.reservation != ReservationSpec::None {
            return Err(BuildError::Skip(
                "Linux macvlan VRs have no per-VR reservation (the point is routeplex's)".into(),
            ));
        }
        if !self.root {
            return Err(BuildError::Skip(
                "Linux macvlan VRs need root (namespaces, macvlan devices); run as root to compare"
                    .into(),
            ));
        }
        if p.ports != Layout::Shared || p.ingress_ports != 1 || p.egress_ports != 1 {
            return Err(BuildError::Skip(
                "the macvlan DUT has one shared ingress and one egress link (ports: shared, 1 and 1)"
                    .into(),
            ));
        }
        let routes = match p.routes {
            Routes::Count(n) if n <= 8192 => n,
            _ => {
                return Err(BuildError::Skip("the macvlan DUT routes at most 8192 prefixes".into()))
            }
        };
        let opts =
            kernel_dut::Options { routes, dut_cpu: self.dut_cpu, ..kernel_dut::Options::default() };
        let d = kernel_dut::macvlan_vrs(p.vrs, opts)
            .map_err(|e| BuildError::Fail(format!("macvlan VRs: {e:#}")))?;
        Ok(BuiltDut { dut: Box::new(d), facts: Vec::new(), topology: None })
    }
}

impl DutBuilder for Builder {
    fn build(&mut self, p: &DutParams) -> Result<BuiltDut, BuildError> {
        match p.kind.as_str() {
            "routeplex" if p.path == DutPath::Switch => self.switch(p),
            "routeplex" => self.routeplex(p),
            "macvlan" => self.macvlan(p),
            _ => self.fake.build(p),
        }
    }
}

/// Interfaces the generated topologies can address.
const MAX_IFACES: usize = 32_768;

/// A topology generated from a point's DUT parameters.
pub struct Generated {
    pub file: String,
    /// The topology's text ([`TopologyDoc::to_yaml`] and a comment saying what it is): what is
    /// written to the output folder.
    pub yaml: String,
    pub ingress: Vec<String>,
    pub egress: Vec<String>,
}

impl Generated {
    /// The validated topology: what [`TopologyDoc::build`] checks, read from the text that is
    /// written out, so an error's line is the written file's.
    pub fn build(&self) -> Result<Topology> {
        Topology::parse(&self.yaml, &self.file, Path::new(".")).map_err(crate::Error::from)
    }
}

/// The topology of `p`: `mem` ports (shared by every VR, or each VR's own), VRs named `vr1`,
/// `vr2`, ... with `vifs` interfaces spread over their ports (ingress ports first), each
/// interface in its own /30 of 198.18.0.0/15 and /64 of 2001:db8::/32; a static neighbor
/// (the sink) on every egress interface; the reservation and batch limit.
pub fn topology(p: &DutParams) -> Generated {
    let (ni, ne) = (p.ingress_ports, p.egress_ports);
    let mut doc = TopologyDoc {
        workers: Some(WorkersDoc::Count(p.workers as u64)),
        ingress_queues: p.ingress_queues.then(Default::default),
        ..Default::default()
    };
    let names = |k: Option<usize>| -> (Vec<String>, Vec<String>) {
        let pre = k.map_or(String::new(), |k| format!("vr{k}-"));
        (
            (0..ni).map(|i| format!("{pre}in{i}")).collect(),
            (0..ne).map(|i| format!("{pre}out{i}")).collect(),
        )
    };
    let mut ingress = Vec::new();
    let mut egress = Vec::new();
    let per_vr = p.ports == Layout::PerVr;
    for k in if per_vr { (1..=p.vrs).map(Some).collect() } else { vec![None] } {
        let (i, e) = names(k);
        ingress.extend(i);
        egress.extend(e);
    }
    let sockets = memif_sockets();
    for n in ingress.iter().chain(&egress) {
        let kind = match p.backend {
            Backend::Mem => PortKindDoc::Mem { ring: Some(p.ring as u64) },
            Backend::Memif => PortKindDoc::Memif(MemifDoc {
                socket: format!("{sockets}-{n}"),
                ring: Some(p.ring as u64),
                ..Default::default()
            }),
        };
        doc.ports.push(PortDoc { burst: Some(p.burst as u64), ..PortDoc::new(n, kind) });
    }
    if p.path != DutPath::Vr {
        doc.switches.push(switch_doc(p, &ingress[0], &egress[0]));
    }
    let nports = ni + ne;
    let vifs = if p.vifs == 0 { nports } else { p.vifs };
    let vrs = if p.path == DutPath::Switch { 0 } else { p.vrs };
    for k in 1..=vrs {
        let (ins, outs) = names(per_vr.then_some(k));
        let ports: Vec<&String> = ins.iter().chain(&outs).collect();
        let mut vr = VrDoc::new(format!("vr{k}"));
        for j in 0..vifs {
            let port = j % nports;
            // Unique on every port: VRs sharing a port each have their own addresses.
            let base = (198u32 << 24 | 18 << 16) + 4 * ((k - 1) * vifs + j) as u32;
            let a = |h: u32| Ipv4Addr::from(base + h).to_string();
            let mac = |side: u8| {
                format!(
                    "02:{side:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                    k >> 8,
                    k & 255,
                    j >> 8,
                    j & 255
                )
            };
            let e = format!("e{j}");
            let v6 = |h: u8| format!("2001:db8:{k:x}:{j:x}::{h}");
            let addrs = [format!("{}/30", a(1)), format!("{}/64", v6(1))];
            let mut iface = IfaceDoc::on_port(&e, ports[port], mac(1), addrs);
            if p.path == DutPath::SwitchVr {
                // Both interfaces on the switch: the frames cross it on the way in and out.
                (iface.port, iface.switch) = (None, Some(SWITCH.to_string()));
            }
            vr.interfaces.push(iface);
            if port >= ni {
                vr.neighbors.push(NeighborDoc::new(a(2), mac(2), &e));
                vr.neighbors.push(NeighborDoc::new(v6(2), mac(2), &e));
            }
        }
        let reserved = p.reserved_vrs.is_none_or(|n| k <= n);
        let budget = match p.reservation {
            ReservationSpec::None => None,
            ReservationSpec::TimePercent(pc) => Some(ReservationDoc {
                time_us: Some(((pc / 100.0 * p.period_us as f64).round() as u64).max(1)),
                ..Default::default()
            }),
            ReservationSpec::Packets(n) => {
                Some(ReservationDoc { packets: Some(n), ..Default::default() })
            }
        };
        if let (true, Some(b)) = (reserved, budget) {
            vr.reservation =
                Some(ReservationDoc { period_us: Some(p.period_us), weight: Some(p.weight), ..b });
        }
        vr.batch = (p.batch > 0).then_some(p.batch as u64);
        vr.replicas = (p.replicas > 1).then_some(p.replicas as u64);
        doc.vrs.push(vr);
    }
    let mut file = format!(
        "topology-{}vr-{}-{ni}x{ne}-vifs{vifs}-ring{}-burst{}",
        vrs,
        if per_vr { "pervr" } else { "shared" },
        p.ring,
        p.burst
    );
    match p.reservation {
        ReservationSpec::None => {}
        ReservationSpec::TimePercent(pc) => file += &format!("-res{pc}pct-per{}", p.period_us),
        ReservationSpec::Packets(n) => file += &format!("-res{n}pkt-per{}", p.period_us),
    }
    if p.reservation != ReservationSpec::None {
        file += &format!("-w{}", p.weight);
        if let Some(n) = p.reserved_vrs {
            file += &format!("-first{n}");
        }
    }
    if p.batch > 0 {
        file += &format!("-batch{}", p.batch);
    }
    if p.ingress_queues {
        file += "-iq";
    }
    if p.replicas > 1 {
        file += &format!("-replicas{}", p.replicas);
    }
    if p.msr {
        file += "-msr";
    }
    if p.backend == Backend::Memif {
        file += "-memif";
    }
    if p.path != DutPath::Vr {
        file += &format!("-{}", p.path.text());
    }
    file += ".yaml";
    // The MSR over the one replicated VR, with the topology's defaults (one back-end active
    // at start, the load policy's thresholds): the scenario varies the load, not the policy.
    if p.msr {
        doc.msrs.push(MsrDoc { vr: "vr1".into(), ..Default::default() });
    }
    let yaml = format!(
        "# Generated by routeplex test scenario: {} VR(s), ports {}, {ni} ingress and {ne} egress, \
         vifs {}, ring {}, burst {}, backend {:?}, path {}\n{}",
        vrs,
        if p.ports == Layout::Shared { "shared" } else { "per-vr" },
        p.vifs,
        p.ring,
        p.burst,
        p.backend,
        p.path.text(),
        doc.to_yaml()
    );
    Generated { file, yaml, ingress, egress }
}

/// The switch of `path: switch` and `path: switch-vr`.
pub const SWITCH: &str = "sw";

/// The switch between the generator's port and the sink's: the sink never sends, so its MAC
/// (the VR's neighbor, or [`super::switch_dut::SINK_MAC`]) is a static station on the sink's
/// port, and frames to it are known unicast from the first one.
fn switch_doc(p: &DutParams, ingress: &str, egress: &str) -> SwitchDoc {
    let sink = match p.path {
        // The generated VR's neighbor on its interface e1 (VR 1, interface 1): `mac(2)`.
        DutPath::SwitchVr => "02:02:00:01:00:01".to_string(),
        _ => super::switch_dut::SINK_MAC.to_string(),
    };
    SwitchDoc {
        name: SWITCH.into(),
        members: [ingress, egress]
            .iter()
            .map(|n| MemberDoc { port: n.to_string(), ..Default::default() })
            .collect(),
        static_macs: vec![StaticMacDoc { mac: sink, port: egress.to_string(), vlan: None }],
        ..Default::default()
    }
}

/// A prefix for the memif sockets of one generated topology: abstract names, unique per
/// process and build, so concurrent runs and successive points never share a socket.
fn memif_sockets() -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("@rpx-scn-{}-{n}", std::process::id())
}

/// Runs the scenario of `a`.
pub fn run(a: ScenarioArgs) -> Result<()> {
    if super::timeline::is_timeline_file(&a.file) {
        return super::timeline::run_file(&a.file, a.json);
    }
    if let Some(m) = super::migration::scenario_file(&a.file)? {
        let out = a.out.clone().unwrap_or_else(|| default_results_dir().join(&m.about.name));
        return super::migration::run_scenario(m, a.quick, a.json, &out, a.quiet);
    }
    let sc = Scenario::load(&a.file).map_err(|e| crate::format_err!("{e}"))?;
    let idle = a.idle_sleep_us.map(|us| Duration::from_secs_f64(us.clamp(0.0, 1e5) / 1e6));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = !a.no_pin && cpus >= 2 && sys::pin(0);
    let dut_cpu = pin.then_some(1);
    let placement = if pin {
        json!({"cpus": cpus, "tester": "CPU 0 (pinned): generator and sink on one thread",
               "dut": "CPU 1 (pinned): the DUT's worker thread (routeplex engine, fake DUT) or the kernel's work for its interfaces (macvlan)"})
    } else {
        json!({"cpus": cpus, "tester": "not pinned: generator and sink on one thread",
               "dut": "not pinned"})
    };
    let o = RunOptions {
        quick: a.quick,
        runner: RunnerOptions { idle_sleep: idle, ..RunnerOptions::default() },
        progress: !a.quiet,
        placement,
        tool: format!("routeplex {} test scenario", env!("CARGO_PKG_VERSION")),
        probes: !a.quick,
    };
    let mut b = Builder::new(dut_cpu, idle);
    let r = scenario::run(&sc, &o, &mut b).map_err(|e| crate::format_err!("{e}"))?;
    let out = a.out.clone().unwrap_or_else(|| default_results_dir().join(&sc.name));
    std::fs::create_dir_all(&out).with_context(|| format!("--out {}", out.display()))?;
    let name = &sc.name;
    let mut files = Vec::new();
    let mut write = |f: String, text: &str| -> Result<()> {
        let p = out.join(&f);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
        files.push(p.display().to_string());
        Ok(())
    };
    let table = scenario::table(&r);
    write(format!("{name}.txt"), &table)?;
    write(format!("{name}.csv"), &scenario::points_csv(&r))?;
    write(format!("{name}-trials.csv"), &scenario::trials_csv(&r))?;
    for (f, y) in &r.topologies {
        write(format!("{name}-{f}"), y)?;
    }
    let png = out.join(format!("{name}.png"));
    scenario::metric_plot(&r, &png).map_err(|e| crate::format_err!("{e}"))?;
    files.push(png.display().to_string());
    let curves = out.join(format!("{name}-curves.png"));
    if scenario::curves_plot(&r, &curves).map_err(|e| crate::format_err!("{e}"))? {
        files.push(curves.display().to_string());
    }
    let json_path = out.join(format!("{name}.json"));
    files.push(json_path.display().to_string());
    let mut v = serde_json::to_value(&r)?;
    v["files"] = json!(files);
    let text = serde_json::to_string_pretty(&v)?;
    std::fs::write(&json_path, &text)
        .with_context(|| format!("writing {}", json_path.display()))?;
    if a.json {
        println!("{text}");
    } else {
        print!("{table}");
        println!("files: {}", files.join(", "));
    }
    eprintln!("routeplex test scenario: wrote {} files to {}", files.len(), out.display());
    Ok(())
}

/// Where results go without `--out`: the user's cache (`$XDG_CACHE_HOME`, else `~/.cache`),
/// else the temp dir; never the current directory, which is often a checkout.
pub(super) fn default_results_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    cache.join("routeplex").join("scenario-results")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{Budget, Reservation};
    use tester::Dut;

    #[test]
    fn switch_topologies_put_the_vr_behind_the_switch_and_the_sink_mac_static() {
        let p =
            DutParams { path: DutPath::SwitchVr, backend: Backend::Memif, ..DutParams::default() };
        let g = topology(&p);
        let t = g.build().unwrap();
        assert_eq!(t.switches.len(), 1);
        assert!(t.ports.iter().any(|q| matches!(q.kind, control::PortKind::Memif(_))));
        // The switch's static station is the VR's neighbor: the sink.
        let neighbor = t.vrs[0].neighbors[0].mac;
        let sw = &t.switches[0];
        assert!(sw.statics.iter().any(|m| m.mac == neighbor), "{:?}", sw.statics);
        assert_eq!(
            (g.ingress.as_slice(), g.egress.as_slice()),
            (&["in0".to_string()][..], &["out0".to_string()][..])
        );
        let alone = topology(&DutParams { path: DutPath::Switch, ..DutParams::default() });
        let t = alone.build().unwrap();
        assert!(t.vrs.is_empty() && t.switches.len() == 1, "{}", alone.yaml);
        assert!(alone.file.contains("0vr") && alone.file.contains("-switch"), "{}", alone.file);
        // Two topologies never share a memif socket.
        let sockets = |g: &Generated| {
            g.yaml
                .lines()
                .filter(|l| l.contains("@rpx-scn-"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let (a, b) = (topology(&p), topology(&p));
        assert!(!sockets(&a).is_empty() && sockets(&a) != sockets(&b));
    }

    #[test]
    fn generated_topologies_carry_layout_interfaces_and_reservations() {
        let p = DutParams {
            vrs: 3,
            ports: Layout::PerVr,
            ingress_ports: 2,
            egress_ports: 1,
            vifs: 5,
            reservation: ReservationSpec::TimePercent(25.0),
            period_us: 2000,
            weight: 7,
            reserved_vrs: Some(2),
            batch: 32,
            ..DutParams::default()
        };
        let g = topology(&p);
        let topo = g.build().unwrap();
        assert_eq!((g.ingress.len(), g.egress.len()), (6, 3), "per VR: 2 ingress, 1 egress");
        assert_eq!(topo.ports.len(), 9);
        assert_eq!(topo.vrs.len(), 3);
        for (k, vr) in topo.vrs.iter().enumerate() {
            assert_eq!(vr.interfaces.len(), 5);
            let s = &topo.schedule[k];
            assert_eq!(s.batch, Some(32));
            let want = (k < 2).then_some(Reservation {
                budget: Budget::Time(500_000),
                period_ns: 2_000_000,
                weight: 7,
            });
            assert_eq!(s.reservation, want, "vr{}", k + 1);
        }
        // Interfaces 0, 1, 3 and 4 are on ingress ports: four targets per VR, each on its port.
        let table = Table::generated(100, 10, 1);
        let mut d = RouteplexDut::with_roles(
            "t",
            topo,
            table,
            Family::Ipv4,
            None,
            g.ingress.clone(),
            g.egress.clone(),
        )
        .unwrap();
        let t = d.targets(90).unwrap();
        assert_eq!(t.len(), 12);
        assert_eq!(d.ingress(), [0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5]);
        assert!(t.iter().all(|t| t.dst.len() == 8), "90 flows over 12 targets");
        let macs: std::collections::BTreeSet<_> = t.iter().map(|t| t.dst_mac).collect();
        assert_eq!(macs.len(), 12, "every interface has its own MAC");
    }

    #[test]
    fn shared_ports_get_distinct_addresses_and_a_packet_budget() {
        let p = DutParams {
            vrs: 64,
            reservation: ReservationSpec::Packets(100),
            ..DutParams::default()
        };
        let g = topology(&p);
        let topo = g.build().unwrap();
        assert_eq!(topo.ports.len(), 2, "every VR on the same two ports");
        assert!(topo
            .schedule
            .iter()
            .all(|s| s.reservation.map(|r| r.budget) == Some(Budget::Packets(100))));
        assert!(g.file.contains("res100pkt"), "{}", g.file);
    }

    /// A replicated VR and an MSR over it: the generated topology validates, the ports get a
    /// queue per replica, and the DUT hands the generator a port over those queues that
    /// carries frames through both back-ends to the sink.
    #[test]
    fn replicas_and_an_msr_make_a_valid_topology_that_forwards() {
        let p =
            DutParams { replicas: 2, workers: 2, msr: true, pin: false, ..DutParams::default() };
        let g = topology(&p);
        assert!(g.file.ends_with("-replicas2-msr.yaml"), "{}", g.file);
        let topo = g.build().unwrap();
        assert_eq!(topo.schedule[0].copies(), 2);
        assert_eq!((topo.msrs.len(), topo.msrs[0].backends, topo.msrs[0].active), (1, 2, 1));
        let table = Table::generated(100, 10, 1);
        let mut d = RouteplexDut::with_roles(
            "t",
            topo,
            table,
            Family::Ipv4,
            None,
            g.ingress.clone(),
            g.egress.clone(),
        )
        .unwrap();
        d.set_pin_workers(false);
        let targets = d.targets(64).unwrap();
        let mut ps = d.start_ports().unwrap();
        let frames: Vec<Vec<u8>> = (0..64)
            .map(|f| {
                let t = &targets[0];
                let dst = t.dst[f % t.dst.len()];
                let std::net::IpAddr::V4(dst) = dst else { panic!("IPv4 targets") };
                let mut fr = crate::lab::udp_frames(vec![dst], t.dst_mac).remove(0).0;
                fr[34..36].copy_from_slice(&(1000 + f as u16).to_be_bytes());
                fr
            })
            .collect();
        let mut b = ports::Batch::new(64);
        for fr in &frames {
            b.push_copy(fr);
        }
        let sel: Vec<u16> = (0..64).collect();
        let mut sent = 0;
        let until = Instant::now() + Duration::from_secs(10);
        while sent < 64 && Instant::now() < until {
            sent += ps.ports[0].tx_burst(&mut b, &sel[sent..]);
        }
        assert_eq!(sent, 64, "the balancer took every frame");
        let mut got = 0;
        let mut rx = ports::Batch::new(256);
        while got < 64 && Instant::now() < until {
            rx.clear();
            got += ps.ports[1].rx_burst(&mut rx);
        }
        assert_eq!(got, 64, "every frame reached the sink through the back-ends");
        d.stop().unwrap();
    }
}
