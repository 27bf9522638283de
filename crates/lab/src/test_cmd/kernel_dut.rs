//! DUTs made of Linux interfaces, for side-by-side runs: Linux IP forwarding in a namespace,
//! a macvlan-based VR (seed 002's baseline), a bridge + veth VR (seed 003's), Open vSwitch's
//! userspace datapath, and `routeplex run` over AF_XDP or AF_PACKET.
//!
//! Every DUT is built from scratch in namespaces of its own (see [`kernel_net`]) and has the
//! same shape towards the tester: a tester namespace holds `tg` (the generator's end) and `ts`
//! (the sink's end) of two veth pairs; the tester opens them with `ports::afxdp` (or
//! `ports::afpacket`) and a refusal is back-pressure ([`Refusal::Retry`]). Test frames go
//! from 198.18.0.2 (tg) to the DUT's ingress MAC and to addresses in 198.19.128.0/17, which
//! the DUT routes, in `--routes` equal prefixes, via 198.19.0.2 (ts). Next hops are static
//! neighbor entries (or OpenFlow actions), so no ARP happens in a measured window. All
//! addresses are in 198.18.0.0/15, the range RFC 2544 sets aside for benchmarks, and live only
//! in these namespaces.
//!
//! Placement (`Options::dut_cpu`): the DUT's work goes to that CPU: RPS on the DUT's ingress
//! link for the kernel's own forwarding, `taskset` for OVS, routeplex's own worker pinning.
//! What could not be steered is said in [`Dut::describe`] under `placement`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::model::{
    IfaceDoc, KernelDoc, NeighborDoc, PortDoc, PortKindDoc, RouteDoc, TopologyDoc, VrDoc,
    WorkersDoc,
};
use ipnet::Ipv4Net;
use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::afxdp::{AfXdpOptions, AfXdpPort};
use ports::Port;
use serde_json::{json, Value};
use tester::dut::DutSnapshot;
use tester::{Dut, DutCounters, DutPorts, DutReport, Refusal, Target};
use wire::MacAddr;

use super::kernel_net::{
    self as net, add_namespace, exec, ipn, lock, sysctl, veth, write_sys, Shared, Stop,
};

/// The DUT names, in the order `routeplex test peers` measures them.
pub const NAMES: &[&str] = &[
    "linux",
    "linux-samecpu",
    "macvlan",
    "bridge",
    "ovs",
    "routeplex-afxdp",
    "routeplex-afpacket",
    "vm-linux",
];

/// Which DUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Linux IP forwarding in one namespace, its work steered to the DUT's CPU by RPS.
    Linux,
    /// The same, with no RPS: the forwarding runs in the generator's softirq.
    LinuxSameCpu,
    /// A VR namespace on macvlan devices over the "physical" links (seed 002).
    Macvlan,
    /// A VR namespace joined to Linux bridges by veth pairs (seed 003).
    Bridge,
    /// Open vSwitch, userspace (`netdev`) datapath, OpenFlow rules that route.
    Ovs,
    /// `routeplex run` with AF_XDP ports.
    RouteplexAfXdp,
    /// `routeplex run` with AF_PACKET ports.
    RouteplexAfPacket,
    /// A QEMU guest (stock Debian kernel) forwarding with Linux between two vhost-user ports
    /// of a `routeplex run` switch (seed 000's monolithic VSR, seed 003's VR in a VM).
    VmLinux,
}

impl Kind {
    /// The DUT called `name`, if there is one.
    pub fn parse(name: &str) -> Option<Kind> {
        Some(match name {
            "linux" => Kind::Linux,
            "linux-samecpu" => Kind::LinuxSameCpu,
            "macvlan" => Kind::Macvlan,
            "bridge" => Kind::Bridge,
            "ovs" => Kind::Ovs,
            "routeplex-afxdp" => Kind::RouteplexAfXdp,
            "routeplex-afpacket" => Kind::RouteplexAfPacket,
            "vm-linux" => Kind::VmLinux,
            _ => return None,
        })
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Linux => "linux",
            Kind::LinuxSameCpu => "linux-samecpu",
            Kind::Macvlan => "macvlan",
            Kind::Bridge => "bridge",
            Kind::Ovs => "ovs",
            Kind::RouteplexAfXdp => "routeplex-afxdp",
            Kind::RouteplexAfPacket => "routeplex-afpacket",
            Kind::VmLinux => "vm-linux",
        }
    }

    /// What it is, in words.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Linux => "Linux IP forwarding in a namespace (RPS to the DUT's CPU)",
            Kind::LinuxSameCpu => {
                "Linux IP forwarding in a namespace, no RPS (forwarding in the generator's softirq)"
            }
            Kind::Macvlan => "macvlan-based VR in a namespace (seed 002's baseline)",
            Kind::Bridge => "bridge + veth VR in a namespace (seed 003's baseline)",
            Kind::Ovs => "Open vSwitch, userspace datapath (netdev), OpenFlow routing rules",
            Kind::RouteplexAfXdp => "routeplex run, one VR, AF_XDP ports",
            Kind::RouteplexAfPacket => "routeplex run, one VR, AF_PACKET ports",
            Kind::VmLinux => {
                "Linux IP forwarding in a QEMU guest on two vhost-user ports of a routeplex switch"
            }
        }
    }

    fn is_routeplex(self) -> bool {
        matches!(self, Kind::RouteplexAfXdp | Kind::RouteplexAfPacket)
    }
}

/// Which backend the tester uses on its veth ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TesterPort {
    /// AF_XDP, falling back to AF_PACKET if AF_XDP cannot open.
    Auto,
    Afxdp,
    Afpacket,
}

/// How to build a kernel DUT.
#[derive(Clone, Debug)]
pub struct Options {
    /// Prefixes the DUT routes (equal parts of 198.19.128.0/17), 1..=8192.
    pub routes: usize,
    /// The CPU the DUT's work is steered to; `None`: no steering.
    pub dut_cpu: Option<usize>,
    pub tester_port: TesterPort,
}

impl Default for Options {
    /// 256 routes, no steering, the tester on AF_XDP (else AF_PACKET).
    fn default() -> Options {
        Options { routes: 256, dut_cpu: None, tester_port: TesterPort::Auto }
    }
}

/// The most VRs [`macvlan_vrs`] builds.
pub const MAX_VRS: usize = 16;
/// Class (and namespace role) names of the VRs of [`macvlan_vrs`].
const VR_NAMES: [&str; MAX_VRS] = [
    "vr1", "vr2", "vr3", "vr4", "vr5", "vr6", "vr7", "vr8", "vr9", "vr10", "vr11", "vr12", "vr13",
    "vr14", "vr15", "vr16",
];

/// A DUT of `vrs` macvlan VRs (seed 002's baseline, several VRs on one port) that share one
/// ingress link, demultiplexed by destination MAC: the tester's `tg` ⇄ `p0` in a host
/// namespace, and VR *i* (namespace role and class `vr<i>`) owns macvlan `m0` on `p0` and `m1`
/// on `p1`, each with a MAC of its own, and routes the same prefixes to the sink. Its
/// [`Dut::targets`] are one per VR, in order, classes `vr1`, `vr2`...; its
/// [`Dut::snapshot`] has per-VR counters under those names (received: rx_packets of its
/// `m0`; forwarded: tx_packets of its `m1`; dropped: its interfaces' and its namespace's IP
/// drop counters). Needs root; nothing is made until `start`, and everything is removed when
/// the DUT is dropped (or on SIGINT/SIGTERM). `vrs` is 1..=[`MAX_VRS`].
pub fn macvlan_vrs(vrs: usize, opts: Options) -> Result<KernelDut> {
    if !(1..=MAX_VRS).contains(&vrs) {
        bail!("macvlan VRs: {vrs} VRs is outside 1..={MAX_VRS}");
    }
    let mut d = KernelDut::new(Kind::Macvlan, opts)?;
    d.vrs = vrs;
    Ok(d)
}

/// Parses `macvlan-vrs:N` (the CLI name of [`macvlan_vrs`]); `None` if `name` is not of that
/// form, an error if N is not a VR count.
pub fn parse_macvlan_vrs(name: &str) -> Option<Result<usize>> {
    let n = name.strip_prefix("macvlan-vrs:")?;
    Some(match n.parse::<usize>() {
        Ok(v) if (1..=MAX_VRS).contains(&v) => Ok(v),
        _ => Err(crate::format_err!(
            "--dut {name}: the VR count {n:?} is not a number in 1..={MAX_VRS}"
        )),
    })
}

/// VR `i` (0-based) of a multi-VR DUT: its ingress and egress MACs and addresses.
fn vr_macs(i: usize) -> (String, String) {
    (format!("02:52:50:01:{:02x}:00", i + 1), format!("02:52:50:01:{:02x}:01", i + 1))
}

fn vr_addrs(i: usize) -> (String, String) {
    (format!("198.18.0.{}", 101 + i), format!("198.19.0.{}", 101 + i))
}

/// A link's drop and error counters by name: the per-VR and the per-link reports list the
/// same four.
fn drop_counters(s: &net::LinkStats) -> [(&'static str, u64); 4] {
    [
        ("rx_dropped", s.rx_dropped),
        ("rx_errors", s.rx_errors),
        ("tx_dropped", s.tx_dropped),
        ("tx_errors", s.tx_errors),
    ]
}

/// One VR of a multi-VR DUT, for per-class counters.
struct VrClass {
    class: &'static str,
    ns: String,
}

const TG_MAC: &str = "02:52:50:00:00:01";
const TS_MAC: &str = "02:52:50:00:00:02";
/// The router's MACs: its ingress (where test frames are addressed) and egress interfaces.
const R0_MAC: &str = "02:52:50:00:01:00";
const R1_MAC: &str = "02:52:50:00:01:01";
/// The DUT host's "physical" links, when the router's interfaces are not the links.
const L0_MAC: &str = "02:52:50:00:02:00";
const L1_MAC: &str = "02:52:50:00:02:01";
/// The bridge side of the bridge + veth VR's veth pairs.
const B0_MAC: &str = "02:52:50:00:03:00";
const B1_MAC: &str = "02:52:50:00:03:01";
const DUT_IN: &str = "198.18.0.1";
const GEN_IP: &str = "198.18.0.2";
const DUT_OUT: &str = "198.19.0.1";
const SINK_IP: &str = "198.19.0.2";

/// `n` equal prefixes of 198.19.128.0/17.
pub fn prefixes(n: usize) -> Result<Vec<Ipv4Net>> {
    if !(1..=8192).contains(&n) {
        bail!("--routes {n} is outside 1..=8192");
    }
    let bits = (n as u32).next_power_of_two().trailing_zeros();
    let len = 17 + bits as u8;
    let base = u32::from(Ipv4Addr::new(198, 19, 128, 0));
    let size = 1u32 << (32 - len);
    (0..n as u32)
        .map(|i| Ipv4Net::new(Ipv4Addr::from(base + i * size), len).map_err(crate::Error::from))
        .collect()
}

/// Where a DUT's pieces are.
#[derive(Default)]
struct Layout {
    /// (role, namespace), in the order made.
    namespaces: Vec<(&'static str, String)>,
    /// The DUT's ingress link (the generator's veth peer) and egress link (the sink's).
    ingress: (String, String),
    egress: (String, String),
    /// The namespace doing IP forwarding, for `nstat`.
    ip_ns: Option<String>,
    /// Interfaces whose drop counters are read, by namespace.
    watch: Vec<(String, Vec<String>)>,
    /// A multi-VR DUT's VRs (each: `m0` in, `m1` out, in its own namespace).
    vrs: Vec<VrClass>,
}

/// A kernel DUT. See the module documentation.
pub struct KernelDut {
    kind: Kind,
    opts: Options,
    id: u32,
    made: Shared,
    dir: PathBuf,
    prefixes: Vec<Ipv4Net>,
    layout: Layout,
    /// Steering that was done, and what could not be steered.
    done: Vec<String>,
    not_controlled: Vec<String>,
    tester_backend: Option<String>,
    notes: Vec<String>,
    versions: BTreeMap<&'static str, String>,
    control: Option<PathBuf>,
    ovs_db: Option<String>,
    started: bool,
    stopped: Option<DutReport>,
    /// VRs (more than 1: [`macvlan_vrs`]).
    vrs: usize,
}

impl KernelDut {
    /// A DUT of `kind`; nothing is made until `start`. Needs root.
    pub fn new(kind: Kind, opts: Options) -> Result<KernelDut> {
        if crate::sys::euid() != 0 {
            bail!(
                "the {} DUT needs root: it creates network namespaces, veth pairs and attaches XDP programs (run as root)",
                kind.name()
            );
        }
        let prefixes = prefixes(opts.routes)?;
        let id = net::next_id();
        let dir = std::env::temp_dir().join(format!("rpx-peers-{}-{id}", std::process::id()));
        Ok(KernelDut {
            kind,
            opts,
            id,
            made: net::record(),
            dir,
            prefixes,
            layout: Layout::default(),
            done: Vec::new(),
            not_controlled: Vec::new(),
            tester_backend: None,
            notes: Vec::new(),
            versions: BTreeMap::new(),
            control: None,
            ovs_db: None,
            started: false,
            stopped: None,
            vrs: 1,
        })
    }

    /// The record of what it made: whoever holds a clone can check and finish the teardown
    /// once the tester's ports have closed (the last holder removes everything anyway).
    pub fn record(&self) -> Shared {
        self.made.clone()
    }

    fn ns(&mut self, role: &'static str) -> Result<String> {
        let name = net::ns_name(self.id, role);
        add_namespace(&self.made, &name)?;
        self.layout.namespaces.push((role, name.clone()));
        Ok(name)
    }

    /// RPS on `ifname`'s receive queue in `ns` to the DUT's CPU.
    fn rps(&mut self, ns: &str, ifname: &str) -> Result<()> {
        let Some(cpu) = self.opts.dut_cpu else {
            self.done.push("no steering (--no-pin): the kernel runs the DUT's softirq work on whichever CPU raised it".into());
            return Ok(());
        };
        let mask = format!("{:x}", 1u64 << cpu);
        write_sys(ns, &format!("/sys/class/net/{ifname}/queues/rx-0/rps_cpus"), &mask)?;
        self.done.push(format!(
            "RPS: rx-0 of {ifname} (the DUT's ingress link) has rps_cpus={mask}, so the kernel's receive and forwarding work for every test frame runs in softirq on CPU {cpu}; the generator's CPU only transmits into the veth and queues the frame to CPU {cpu}'s backlog (an IPI)"
        ));
        Ok(())
    }

    /// Records why the kernel's receive on `ifname` stays on the sending CPU for a DUT that
    /// works in userspace.
    fn not_steered(&mut self, ifname: &str, into: &str) {
        self.not_controlled.push(format!(
            "no RPS on {ifname}: the kernel's receive on {ifname} (delivery into {into}, one copy) runs in softirq on the CPU that transmitted into it, the generator's; steering it to the DUT's CPU would let that softirq preempt the DUT's busy userspace thread there (receive livelock: measured on this machine, AF_PACKET routeplex fell to about a tenth and Open vSwitch to a few percent); as with AF_XDP, the DUT's own CPU does the DUT's work"
        ));
    }

    /// The rest of a VR DUT whose router is namespace `v` (interfaces `vr_ifs`: in, out),
    /// reached through the host namespace `h`'s links p0 and p1: routing in `v`, RPS on p0,
    /// and which links to watch (`host_ifs` in `h`). The macvlan and the bridge + veth VRs
    /// differ only in how `v` is joined to the links; this keeps their layouts the same.
    fn vr_behind_host(
        &mut self,
        h: String,
        v: String,
        vr_ifs: [&str; 2],
        host_ifs: &[&str],
        tester_watch: (String, Vec<String>),
    ) -> Result<()> {
        self.ip_router(&v, vr_ifs[0], vr_ifs[1])?;
        self.rps(&h, "p0")?;
        self.layout.ingress = (h.clone(), "p0".into());
        self.layout.egress = (h.clone(), "p1".into());
        self.layout.ip_ns = Some(v.clone());
        self.layout.watch = vec![
            tester_watch,
            (h, host_ifs.iter().map(|i| i.to_string()).collect()),
            (v, vr_ifs.map(String::from).to_vec()),
        ];
        Ok(())
    }

    /// IPv4 forwarding in `ns` between `i` (generator side) and `o` (sink side).
    fn ip_router(&mut self, ns: &str, i: &str, o: &str) -> Result<()> {
        self.ip_router_at(ns, i, o, DUT_IN, DUT_OUT)
    }

    /// The same, with the router's own addresses `a_in` and `a_out` (in the /24s of the
    /// generator and the sink).
    fn ip_router_at(&mut self, ns: &str, i: &str, o: &str, a_in: &str, a_out: &str) -> Result<()> {
        sysctl(
            ns,
            &[
                ("net.ipv4.ip_forward", "1"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
                (&format!("net.ipv4.conf.{i}.rp_filter"), "0"),
                ("net.ipv4.conf.all.send_redirects", "0"),
                (&format!("net.ipv4.conf.{i}.send_redirects"), "0"),
            ],
        )?;
        ipn(ns, &["addr", "add", &format!("{a_in}/24"), "dev", i])?;
        ipn(ns, &["addr", "add", &format!("{a_out}/24"), "dev", o])?;
        ipn(ns, &["neigh", "replace", GEN_IP, "lladdr", TG_MAC, "dev", i, "nud", "permanent"])?;
        ipn(ns, &["neigh", "replace", SINK_IP, "lladdr", TS_MAC, "dev", o, "nud", "permanent"])?;
        let batch: String = self
            .prefixes
            .iter()
            .map(|p| format!("route add {p} via {SINK_IP} dev {o}\n"))
            .collect();
        let f = self.dir.join(format!("routes-{ns}"));
        std::fs::write(&f, batch).with_context(|| format!("{}", f.display()))?;
        ipn(ns, &["-batch", &f.to_string_lossy()])?;
        Ok(())
    }

    fn build(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("{}", self.dir.display()))?;
        lock(&self.made).dirs.push(self.dir.clone());
        let t = self.ns("tester")?;
        let tester_watch = (t.clone(), vec!["tg".to_string(), "ts".to_string()]);
        match self.kind {
            Kind::Linux | Kind::LinuxSameCpu => {
                let d = self.ns("dut")?;
                veth(&t, "tg", TG_MAC, &d, "d0", R0_MAC)?;
                veth(&t, "ts", TS_MAC, &d, "d1", R1_MAC)?;
                self.ip_router(&d, "d0", "d1")?;
                if self.kind == Kind::Linux {
                    self.rps(&d, "d0")?;
                } else {
                    self.done.push("no RPS: the forwarding runs in softirq on the CPU that transmits into d0, the generator's, inside its sendto (generator and DUT share one CPU)".into());
                }
                self.layout.ingress = (d.clone(), "d0".into());
                self.layout.egress = (d.clone(), "d1".into());
                self.layout.ip_ns = Some(d.clone());
                self.layout.watch = vec![tester_watch, (d, vec!["d0".into(), "d1".into()])];
            }
            Kind::Macvlan if self.vrs > 1 => {
                let h = self.ns("host")?;
                veth(&t, "tg", TG_MAC, &h, "p0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &h, "p1", L1_MAC)?;
                let mut watch = vec![tester_watch, (h.clone(), vec!["p0".into(), "p1".into()])];
                for (i, class) in VR_NAMES.iter().copied().enumerate().take(self.vrs) {
                    let v = self.ns(class)?;
                    let (mac_in, mac_out) = vr_macs(i);
                    for (m, p, mac) in [("m0", "p0", &mac_in), ("m1", "p1", &mac_out)] {
                        // A temporary name in the host namespace: the VRs' m0s are all made
                        // there before moving to their own namespaces.
                        let tmp = format!("{m}v{}", i + 1);
                        ipn(
                            &h,
                            &[
                                "link", "add", "link", p, "name", &tmp, "address", mac, "type",
                                "macvlan", "mode", "bridge",
                            ],
                        )?;
                        ipn(&h, &["link", "set", &tmp, "netns", &v, "name", m])?;
                        ipn(&v, &["link", "set", m, "up"])?;
                    }
                    let (a_in, a_out) = vr_addrs(i);
                    self.ip_router_at(&v, "m0", "m1", &a_in, &a_out)?;
                    watch.push((v.clone(), vec!["m0".into(), "m1".into()]));
                    self.layout.vrs.push(VrClass { class, ns: v });
                }
                self.rps(&h, "p0")?;
                self.notes.push(format!(
                    "{} VRs share p0: each owns a macvlan (bridge mode) on p0 with its own MAC, so the kernel demultiplexes the tester's frames to a VR by destination MAC (frames for no VR's MAC stay on p0, which has no address, and die there); the VRs' egress macvlans share p1",
                    self.vrs
                ));
                self.layout.ingress = (h.clone(), "p0".into());
                self.layout.egress = (h, "p1".into());
                self.layout.watch = watch;
            }
            Kind::Macvlan => {
                let h = self.ns("host")?;
                let v = self.ns("vr")?;
                veth(&t, "tg", TG_MAC, &h, "p0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &h, "p1", L1_MAC)?;
                for (m, p, mac) in [("m0", "p0", R0_MAC), ("m1", "p1", R1_MAC)] {
                    ipn(
                        &h,
                        &[
                            "link", "add", "link", p, "name", m, "address", mac, "type", "macvlan",
                            "mode", "bridge",
                        ],
                    )?;
                    ipn(&h, &["link", "set", m, "netns", &v])?;
                    ipn(&v, &["link", "set", m, "up"])?;
                }
                self.vr_behind_host(h, v, ["m0", "m1"], &["p0", "p1"], tester_watch)?;
            }
            Kind::Bridge => {
                let h = self.ns("host")?;
                let v = self.ns("vr")?;
                veth(&t, "tg", TG_MAC, &h, "p0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &h, "p1", L1_MAC)?;
                for br in ["br0", "br1"] {
                    ipn(
                        &h,
                        &[
                            "link",
                            "add",
                            br,
                            "type",
                            "bridge",
                            "stp_state",
                            "0",
                            "forward_delay",
                            "0",
                        ],
                    )?;
                    ipn(&h, &["link", "set", br, "up"])?;
                }
                veth(&v, "v0", R0_MAC, &h, "v0h", B0_MAC)?;
                veth(&v, "v1", R1_MAC, &h, "v1h", B1_MAC)?;
                for (port, br) in [("p0", "br0"), ("v0h", "br0"), ("p1", "br1"), ("v1h", "br1")] {
                    ipn(&h, &["link", "set", port, "master", br])?;
                }
                // Where each MAC is, as the bridges would learn it: no flooding.
                for (mac, port) in
                    [(R0_MAC, "v0h"), (TG_MAC, "p0"), (R1_MAC, "v1h"), (TS_MAC, "p1")]
                {
                    exec(&h, "bridge", &["fdb", "replace", mac, "dev", port, "master", "static"])?;
                }
                let host_ifs = ["p0", "v0h", "br0", "p1", "v1h", "br1"];
                self.vr_behind_host(h, v, ["v0", "v1"], &host_ifs, tester_watch)?;
            }
            Kind::Ovs => {
                let h = self.ns("host")?;
                veth(&t, "tg", TG_MAC, &h, "p0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &h, "p1", L1_MAC)?;
                self.not_steered("p0", "Open vSwitch's AF_PACKET socket");
                self.ovs(&h)?;
                self.layout.ingress = (h.clone(), "p0".into());
                self.layout.egress = (h.clone(), "p1".into());
                self.layout.watch = vec![tester_watch, (h, vec!["p0".into(), "p1".into()])];
            }
            Kind::RouteplexAfXdp | Kind::RouteplexAfPacket => {
                let d = self.ns("dut")?;
                veth(&t, "tg", TG_MAC, &d, "d0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &d, "d1", L1_MAC)?;
                if self.kind == Kind::RouteplexAfPacket {
                    self.not_steered("d0", "routeplex's AF_PACKET (TPACKET_V3) ring");
                } else {
                    self.not_controlled.push("the XDP program on d0 (redirect into routeplex's AF_XDP socket, copy mode: one copy into its UMEM) runs in veth's NAPI on the CPU that transmitted into d0, the generator's; RPS does not apply to XDP, and veth has no IRQ to steer".into());
                }
                self.routeplex(&d)?;
                self.layout.ingress = (d.clone(), "d0".into());
                self.layout.egress = (d.clone(), "d1".into());
                self.layout.watch = vec![tester_watch, (d, vec!["d0".into(), "d1".into()])];
            }
            Kind::VmLinux => {
                let d = self.ns("dut")?;
                veth(&t, "tg", TG_MAC, &d, "d0", L0_MAC)?;
                veth(&t, "ts", TS_MAC, &d, "d1", L1_MAC)?;
                self.not_steered("d0", "routeplex's AF_PACKET (TPACKET_V3) ring");
                self.vm_router(&d)?;
                self.layout.ingress = (d.clone(), "d0".into());
                self.layout.egress = (d.clone(), "d1".into());
                self.layout.watch = vec![tester_watch, (d, vec!["d0".into(), "d1".into()])];
            }
        }
        if !self.kind.is_routeplex() || self.kind == Kind::RouteplexAfPacket {
            self.not_controlled.push(
                "the sink's XDP program on ts (tester side) runs in veth's NAPI on the CPU that transmitted into it, the DUT's".into(),
            );
        } else {
            self.not_controlled.push(
                "the sink's XDP program on ts (tester side) runs in veth's NAPI on the CPU that transmitted into it: routeplex's worker's".into(),
            );
        }
        Ok(())
    }

    /// One worker on the DUT's CPU (the last one unless told): left to its default, `run`
    /// makes a worker per CPU and the VR's cell lands on worker 0, on the generator's CPU.
    fn one_worker(&self) -> WorkersDoc {
        let last = crate::sys::online_cpus().saturating_sub(1);
        WorkersDoc::Cpus(vec![self.opts.dut_cpu.unwrap_or(last) as u64])
    }

    /// Topology file, `routeplex run` in namespace `d`, and a wait until it answers with both
    /// ports up.
    fn routeplex(&mut self, d: &str) -> Result<()> {
        let kernel = |ifname: &str| {
            let attach = KernelDoc::interface(ifname);
            if self.kind == Kind::RouteplexAfXdp {
                PortKindDoc::Afxdp(attach)
            } else {
                PortKindDoc::Afpacket(attach)
            }
        };
        let mut vr = VrDoc::new("vr");
        vr.interfaces = vec![
            IfaceDoc::on_port("e0", "p0", R0_MAC, [format!("{DUT_IN}/24")]),
            IfaceDoc::on_port("e1", "p1", R1_MAC, [format!("{DUT_OUT}/24")]),
        ];
        vr.neighbors =
            vec![NeighborDoc::new(GEN_IP, TG_MAC, "e0"), NeighborDoc::new(SINK_IP, TS_MAC, "e1")];
        vr.routes = self.prefixes.iter().map(|p| RouteDoc::via(p.to_string(), SINK_IP)).collect();
        let doc = TopologyDoc {
            workers: Some(self.one_worker()),
            ports: vec![PortDoc::new("p0", kernel("d0")), PortDoc::new("p1", kernel("d1"))],
            vrs: vec![vr],
            ..TopologyDoc::default()
        };
        let (sock, log, cpus) = self.spawn_routeplex(
            d,
            "peers-vr.yaml",
            "# routeplex test peers: one VR between d0 (generator side) and d1 (sink side).",
            &doc,
        )?;
        let ncpu = crate::sys::online_cpus();
        match self.opts.dut_cpu {
            Some(c) if c + 1 == ncpu => self.done.push(format!(
                "routeplex run (CPUs {cpus} allowed) pins its one worker to the last CPU, {c}, where it busy-polls both ports; its control thread is not pinned and mostly sleeps"
            )),
            _ => self.done.push(format!(
                "routeplex run pins its worker to the last CPU ({}) itself; its control thread is not pinned",
                ncpu.saturating_sub(1)
            )),
        }
        let t0 = Instant::now();
        loop {
            if let Some(st) = net::exited(&self.made, "routeplex run") {
                bail!("routeplex run in namespace {d} exited ({st}): {}", net::tail(&log, 5));
            }
            if let Ok(v) = net::ask(&sock, control::api::Command::Status) {
                let ports = v["ports"].as_array().cloned().unwrap_or_default();
                if ports.len() == 2 && ports.iter().all(|p| p["status"] == "up") {
                    break;
                }
            }
            if t0.elapsed() > Duration::from_secs(20) {
                bail!(
                    "routeplex run in namespace {d} did not come up with both ports within 20 s: {}",
                    net::tail(&log, 5)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.control = Some(sock);
        Ok(())
    }

    /// Writes `doc` (with a `# header` line) to `file` in the run directory, checks it with the
    /// topology parser and starts `routeplex run` on it in namespace `d`, stopped through its
    /// control socket. Returns the socket, the log and the CPUs it may use.
    fn spawn_routeplex(
        &mut self,
        d: &str,
        file: &str,
        header: &str,
        doc: &TopologyDoc,
    ) -> Result<(PathBuf, PathBuf, String)> {
        let y = format!("{header}\n{}", doc.to_yaml());
        let file = self.dir.join(file);
        std::fs::write(&file, y).with_context(|| format!("{}", file.display()))?;
        control::Topology::load(&file).map_err(crate::Error::from)?;
        let exe = std::env::current_exe().context("the routeplex binary")?;
        let (exe, file_s, dir_s) = (
            exe.to_string_lossy().to_string(),
            file.to_string_lossy().to_string(),
            self.dir.to_string_lossy().to_string(),
        );
        let sock = self.dir.join("control.sock");
        let log = self.dir.join("routeplex.log");
        let cpus = all_cpus();
        net::spawn(
            &self.made,
            "routeplex run",
            &cpus,
            &["ip", "netns", "exec", d, &exe, "run", &file_s, "--state-dir", &dir_s],
            &[],
            &log,
            Stop::Control(sock.clone()),
        )?;
        Ok((sock, log, cpus))
    }

    /// A `routeplex run` switch in namespace `d` (s0: d0 and vhost-user v0; s1: d1 and v1)
    /// and a QEMU guest whose eth0/eth1 are v0/v1 and which forwards between them with Linux;
    /// waits until the guest says it forwards and all four ports are up.
    fn vm_router(&mut self, d: &str) -> Result<()> {
        use control::model::{MemberDoc, SwitchDoc, VhostUserDoc};
        use tester::vm::{qemu_args, Accel, GuestImage, Nic};
        let image = GuestImage::ensure().map_err(|e| crate::format_err!("the guest image: {e}"))?;
        let socks = [self.dir.join("v0.sock"), self.dir.join("v1.sock")];
        let vhost = |s: &Path| {
            PortKindDoc::VhostUser(VhostUserDoc {
                socket: s.to_string_lossy().to_string(),
                ..Default::default()
            })
        };
        let member = |p: &str| MemberDoc { port: p.into(), ..Default::default() };
        let doc = TopologyDoc {
            workers: Some(self.one_worker()),
            ports: vec![
                PortDoc::new("p0", PortKindDoc::Afpacket(KernelDoc::interface("d0"))),
                PortDoc::new("p1", PortKindDoc::Afpacket(KernelDoc::interface("d1"))),
                PortDoc::new("v0", vhost(&socks[0])),
                PortDoc::new("v1", vhost(&socks[1])),
            ],
            switches: vec![
                SwitchDoc {
                    name: "s0".into(),
                    members: vec![member("p0"), member("v0")],
                    ..Default::default()
                },
                SwitchDoc {
                    name: "s1".into(),
                    members: vec![member("p1"), member("v1")],
                    ..Default::default()
                },
            ],
            ..TopologyDoc::default()
        };
        let (sock, log, cpus) = self.spawn_routeplex(d, "peers-vm.yaml", "# routeplex test peers --dut vm-linux: d0 and the guest's eth0 on s0, d1 and its eth1 on s1.", &doc)?;
        let t0 = Instant::now();
        while !socks.iter().all(|s| s.exists()) {
            if let Some(st) = net::exited(&self.made, "routeplex run") {
                bail!("routeplex run in namespace {d} exited ({st}): {}", net::tail(&log, 5));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                bail!("routeplex run made no vhost-user sockets in 20 s: {}", net::tail(&log, 5));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.control = Some(sock.clone());
        let mac = |m: &str| -> Result<[u8; 6]> {
            Ok(m.parse::<MacAddr>().map_err(|e| crate::format_err!("{m}: {e:?}"))?.0)
        };
        let nics = [
            Nic { socket: socks[0].clone(), mac: mac(R0_MAC)?, qemu_listens: false, queues: 1 },
            Nic { socket: socks[1].clone(), mac: mac(R1_MAC)?, qemu_listens: false, queues: 1 },
        ];
        // One covering route: the kernel command line is too short for thousands, and every
        // test prefix lies in 198.19.128.0/17.
        let append = format!(
            "rvh.role=forward rvh.ip0={DUT_IN}/24 rvh.ip1={DUT_OUT}/24 \
             rvh.neigh={GEN_IP},{TG_MAC},eth0 rvh.neigh={SINK_IP},{TS_MAC},eth1 \
             rvh.route=198.19.128.0/17,{SINK_IP}"
        );
        let accel = Accel::detect();
        let args = qemu_args(&image, &nics, &append, 256, accel);
        let mut argv = vec!["qemu-system-x86_64"];
        argv.extend(args.iter().map(String::as_str));
        let qlog = self.dir.join("qemu.log");
        net::spawn(&self.made, "qemu", &cpus, &argv, &[], &qlog, Stop::Term)?;
        self.versions.insert(
            "qemu",
            net::run("qemu-system-x86_64", &["--version"])
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        );
        self.versions.insert("guest kernel", image.kernel_package.clone());
        let t0 = Instant::now();
        loop {
            if let Some(st) = net::exited(&self.made, "qemu") {
                bail!("QEMU exited ({st}): {}", net::tail(&qlog, 8));
            }
            let booted = std::fs::read_to_string(&qlog).is_ok_and(|l| l.contains("RVH forwarding"));
            let up = net::ask(&sock, control::api::Command::Status).is_ok_and(|v| {
                let ports = v["ports"].as_array().cloned().unwrap_or_default();
                ports.len() == 4 && ports.iter().all(|p| p["status"] == "up")
            });
            if booted && up {
                break;
            }
            if t0.elapsed() > Duration::from_secs(240) {
                bail!(
                    "the guest did not come up forwarding within 240 s (booted: {booted}, ports up: {up}): {}",
                    net::tail(&qlog, 8)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let boot = t0.elapsed().as_secs_f64();
        self.done.push(format!(
            "routeplex run (CPUs {cpus} allowed) pins its one worker to the last CPU, where it busy-polls d0, d1 and both vhost-user ports; QEMU runs on CPUs {cpus}, not pinned"
        ));
        self.not_controlled.push("the guest's vCPU: one QEMU thread, scheduled by Linux on any CPU, sharing it with the generator or with routeplex's worker on a small machine".into());
        match accel {
            Accel::Tcg => self.notes.push(format!(
                "QEMU runs the guest under TCG (no usable KVM here: /dev/kvm missing or the CPU lacks VMX/SVM), so every guest instruction is translated and emulated: the guest's forwarding is tens of times slower than under KVM, and these figures measure QEMU's CPU emulation more than Linux's network stack; booted and forwarding {boot:.1} s after QEMU started"
            )),
            Accel::Kvm => self.notes.push(format!(
                "QEMU runs the guest under KVM; booted and forwarding {boot:.1} s after QEMU started"
            )),
        }
        self.notes.push("the guest routes every test prefix with one covering route (198.19.128.0/17 via 198.19.0.2): its route table does not grow with --routes; neighbors are static in the guest, as in the other DUTs".into());
        Ok(())
    }

    /// ovsdb-server and ovs-vswitchd with their own directory in namespace `h`, a netdev
    /// bridge on p0 and p1, and one OpenFlow rule per routed prefix.
    /// Any failure to bring Open vSwitch up is a skip (with the reason), never a number.
    fn ovs(&mut self, h: &str) -> Result<()> {
        self.ovs_up(h).map_err(|e| {
            let msg = format!("{e:#}");
            if msg.starts_with("skipped: ") {
                e
            } else {
                crate::format_err!("skipped: Open vSwitch failed to start: {msg}")
            }
        })
    }

    fn ovs_up(&mut self, h: &str) -> Result<()> {
        let schema = Path::new("/usr/share/openvswitch/vswitch.ovsschema");
        for b in ["ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovsdb-tool"] {
            if net::run("sh", &["-c", &format!("command -v {b}")]).is_err() {
                bail!("skipped: {b} is not installed (scripts/setup installs openvswitch-switch)");
            }
        }
        if !schema.exists() {
            bail!("skipped: {} is missing (openvswitch-common)", schema.display());
        }
        let v = net::run("ovs-vswitchd", &["--version"]).unwrap_or_default();
        self.versions.insert("ovs-vswitchd", v.lines().next().unwrap_or("").to_string());
        let d = self.dir.join("ovs");
        std::fs::create_dir_all(&d).with_context(|| format!("{}", d.display()))?;
        let p = |f: &str| d.join(f).to_string_lossy().to_string();
        let env: [(&str, &Path); 4] =
            [("OVS_RUNDIR", &d), ("OVS_DBDIR", &d), ("OVS_LOGDIR", &d), ("OVS_SYSCONFDIR", &d)];
        net::run("ovsdb-tool", &["create", &p("conf.db"), &schema.to_string_lossy()])?;
        let cpus = match self.opts.dut_cpu {
            Some(c) => c.to_string(),
            None => all_cpus(),
        };
        let log = self.dir.join("ovs.log");
        let db = format!("unix:{}", p("db.sock"));
        // Both daemons run in `h` on `cpus`, under `env`, keep their pid file, control socket
        // and log in `d` and share one output log: only their leading arguments differ.
        let spawn_daemon = |name: &str, args: &[&str]| -> Result<u32> {
            let files = [
                format!("--pidfile={}", p(&format!("{name}.pid"))),
                format!("--unixctl={}", p(&format!("{name}.ctl"))),
                format!("--log-file={}", p(&format!("{name}.log"))),
            ];
            let mut argv = vec!["ip", "netns", "exec", h, name];
            argv.extend_from_slice(args);
            argv.extend(files.iter().map(String::as_str));
            argv.push("--no-chdir");
            net::spawn(&self.made, name, &cpus, &argv, &env, &log, Stop::Term)
        };
        spawn_daemon(
            "ovsdb-server",
            &[&p("conf.db"), &format!("--remote=punix:{}", p("db.sock"))],
        )?;
        let t0 = Instant::now();
        while !d.join("db.sock").exists() {
            if let Some(st) = net::exited(&self.made, "ovsdb-server") {
                bail!("skipped: ovsdb-server exited ({st}): {}", net::tail(&log, 4));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                bail!("skipped: ovsdb-server did not open {} within 10 s", p("db.sock"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let dbarg = format!("--db={db}");
        let vsctl = |args: &[&str]| -> Result<String> {
            let mut all = vec![dbarg.as_str(), "--timeout=20"];
            all.extend_from_slice(args);
            net::run_env("ovs-vsctl", &all, &env)
        };
        vsctl(&["--no-wait", "init"])?;
        vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            "other_config:n-handler-threads=1",
            "other_config:n-revalidator-threads=1",
        ])?;
        spawn_daemon("ovs-vswitchd", &[&db])?;
        let added = vsctl(&[
            "add-br",
            "br0",
            "--",
            "set",
            "bridge",
            "br0",
            "datapath_type=netdev",
            "fail-mode=secure",
            "--",
            "add-port",
            "br0",
            "p0",
            "--",
            "set",
            "interface",
            "p0",
            "ofport_request=1",
            "--",
            "add-port",
            "br0",
            "p1",
            "--",
            "set",
            "interface",
            "p1",
            "ofport_request=2",
        ]);
        if let Err(e) = added {
            let why = match net::exited(&self.made, "ovs-vswitchd") {
                Some(st) => format!(
                    "ovs-vswitchd exited ({st}): {}",
                    net::tail(&d.join("ovs-vswitchd.log"), 4)
                ),
                None => format!("{e:#}"),
            };
            bail!("skipped: Open vSwitch could not make a netdev bridge: {why}");
        }
        for port in ["p0", "p1"] {
            let ofport = vsctl(&["get", "interface", port, "ofport"])?;
            if ofport.trim() == "-1" || ofport.trim() == "[]" {
                let err = vsctl(&["get", "interface", port, "error"]).unwrap_or_default();
                bail!(
                    "skipped: Open vSwitch could not open {port} in its netdev datapath: {}",
                    err.trim()
                );
            }
        }
        let mut flows = String::from("priority=0,actions=drop\n");
        for pf in &self.prefixes {
            flows += &format!(
                "priority=10,in_port=1,dl_dst={R0_MAC},ip,nw_dst={pf},actions=mod_dl_src:{R1_MAC},mod_dl_dst:{TS_MAC},dec_ttl,output:2\n"
            );
        }
        let ff = self.dir.join("flows.txt");
        std::fs::write(&ff, flows).with_context(|| format!("{}", ff.display()))?;
        let mgmt = format!("unix:{}", p("br0.mgmt"));
        net::run_env("ovs-ofctl", &["del-flows", &mgmt], &env)?;
        net::run_env("ovs-ofctl", &["add-flows", &mgmt, &ff.to_string_lossy()], &env)?;
        match self.opts.dut_cpu {
            Some(c) => self.done.push(format!(
                "ovsdb-server and ovs-vswitchd (every thread: main, handler, revalidator...) run under taskset -c {c}; with only AF_PACKET (system) ports the netdev datapath polls them from the main thread, not a PMD thread"
            )),
            None => self.done.push("Open vSwitch daemons not pinned (--no-pin)".into()),
        }
        self.notes.push(format!(
            "Open vSwitch: bridge br0 datapath_type=netdev fail-mode=secure, ports p0 (ofport 1) and p1 (ofport 2) opened by the userspace datapath as AF_PACKET (system) netdevs; {} OpenFlow rules in_port=1,dl_dst={R0_MAC},ip,nw_dst=PREFIX → mod_dl_src:{R1_MAC},mod_dl_dst:{TS_MAC},dec_ttl,output:2, else drop; n-handler-threads=1, n-revalidator-threads=1; run directory {}",
            self.prefixes.len(),
            d.display()
        ));
        self.ovs_db = Some(db);
        Ok(())
    }

    /// Open vSwitch's own interface counters (`ovs-vsctl list interface`).
    fn ovs_drops(&self, out: &mut BTreeMap<String, u64>) {
        let Some(db) = &self.ovs_db else { return };
        let d = self.dir.join("ovs");
        let env: [(&str, &Path); 1] = [("OVS_RUNDIR", &d)];
        let Ok(s) = net::run_env(
            "ovs-vsctl",
            &[
                &format!("--db={db}"),
                "--timeout=5",
                "--format=json",
                "--columns=name,statistics",
                "list",
                "interface",
            ],
            &env,
        ) else {
            return;
        };
        let v: Value = serde_json::from_str(&s).unwrap_or(Value::Null);
        for row in v["data"].as_array().into_iter().flatten() {
            let Some(name) = row[0].as_str() else { continue };
            // ["map", [["rx_dropped", 0], ...]]
            for kv in row[1][1].as_array().into_iter().flatten() {
                let (Some(k), Some(n)) = (kv[0].as_str(), kv[1].as_u64()) else { continue };
                if (k.contains("drop") || k.contains("error")) && n > 0 {
                    out.insert(format!("ovs/{name}.{k}"), n);
                }
            }
        }
    }

    /// The DUT's counters now: received on its ingress link, sent on its egress link, and
    /// every drop counter on the way that is not zero.
    fn read_counters(&self) -> Result<(DutSnapshot, Value)> {
        let mut dropped = BTreeMap::new();
        let mut received = 0;
        let mut forwarded = 0;
        let mut links = serde_json::Map::new();
        let mut classes: BTreeMap<String, DutCounters> = BTreeMap::new();
        for (ns, ifs) in &self.layout.watch {
            let role = self.role(ns);
            let all = net::link_stats(ns)?;
            let vr = self.layout.vrs.iter().find(|v| &v.ns == ns);
            for i in ifs {
                let Some(s) = all.get(i) else { continue };
                if let Some(vr) = vr {
                    let c = classes.entry(vr.class.to_string()).or_default();
                    match i.as_str() {
                        "m0" => c.received = s.rx_packets,
                        "m1" => c.forwarded = s.tx_packets,
                        _ => {}
                    }
                    for (k, n) in drop_counters(s) {
                        if n > 0 {
                            c.dropped.insert(format!("{i}.{k}"), n);
                        }
                    }
                }
                links.insert(format!("{role}/{i}"), json!(s));
                for (k, n) in drop_counters(s) {
                    if n > 0 {
                        dropped.insert(format!("{role}/{i}.{k}"), n);
                    }
                }
                if (ns, i) == (&self.layout.ingress.0, &self.layout.ingress.1) {
                    received = s.rx_packets;
                }
                if (ns, i) == (&self.layout.egress.0, &self.layout.egress.1) {
                    forwarded = s.tx_packets;
                }
            }
        }
        if let Some(ns) = &self.layout.ip_ns {
            for (k, n) in net::ip_drops(ns)? {
                if n > 0 {
                    dropped.insert(format!("ip/{k}"), n);
                }
            }
        }
        for vr in &self.layout.vrs {
            let c = classes.entry(vr.class.to_string()).or_default();
            for (k, n) in net::ip_drops(&vr.ns)? {
                if n > 0 {
                    dropped.insert(format!("{}/ip/{k}", vr.class), n);
                    c.dropped.insert(format!("ip/{k}"), n);
                }
            }
        }
        let backlog: u64 = net::backlog_drops().iter().sum();
        if backlog > 0 {
            dropped.insert("host/softnet_backlog_dropped".into(), backlog);
        }
        let mut engine = Value::Null;
        if let Some(sock) = &self.control {
            if let Ok(v) = net::ask(sock, control::api::Command::Status) {
                engine = v;
                for p in engine["ports"].as_array().into_iter().flatten() {
                    let name = p["name"].as_str().unwrap_or("?");
                    for k in ["rx_dropped", "tx_full"] {
                        let n = p[k].as_u64().unwrap_or(0);
                        if n > 0 {
                            dropped.insert(format!("routeplex/{name}.{k}"), n);
                        }
                    }
                }
                for vr in engine["vrs"].as_array().into_iter().flatten() {
                    for &r in dataplane::VrDrop::ALL {
                        let n = vr["counters"][r.name()].as_u64().unwrap_or(0);
                        if n > 0 {
                            dropped.insert(format!("routeplex/vr.{}", r.name()), n);
                        }
                    }
                }
            }
        }
        if self.ovs_db.is_some() {
            let (ns, _) = &self.layout.ingress;
            for (i, n) in net::packet_socket_drops(ns)? {
                if n > 0 {
                    dropped.insert(format!("{}/{i}.packet_socket_dropped", self.role(ns)), n);
                }
            }
        }
        self.ovs_drops(&mut dropped);
        Ok((
            DutSnapshot { total: DutCounters { received, forwarded, dropped }, classes },
            json!({"links": links, "routeplex": engine}),
        ))
    }

    fn role(&self, ns: &str) -> &'static str {
        self.layout.namespaces.iter().find(|(_, n)| n == ns).map_or("?", |(r, _)| r)
    }

    fn open_tester(&mut self) -> Result<(Box<dyn Port>, Box<dyn Port>)> {
        let t = self.layout.namespaces[0].1.clone();
        let netns = Some(PathBuf::from("/run/netns").join(&t));
        let xdp = |ifname: &str| -> Result<Box<dyn Port>> {
            let o = AfXdpOptions { netns: netns.clone(), ..AfXdpOptions::default() };
            let p = AfXdpPort::open(ifname, &o)
                .with_context(|| format!("AF_XDP on {ifname} in namespace {t}"))?;
            Ok(Box::new(p))
        };
        let pkt = |ifname: &str| -> Result<Box<dyn Port>> {
            let o = AfPacketOptions { netns: netns.clone(), ..AfPacketOptions::default() };
            let p = AfPacketPort::open(ifname, &o)
                .with_context(|| format!("AF_PACKET on {ifname} in namespace {t}"))?;
            Ok(Box::new(p))
        };
        let afxdp = || -> Result<(Box<dyn Port>, Box<dyn Port>)> { Ok((xdp("tg")?, xdp("ts")?)) };
        let afpacket =
            || -> Result<(Box<dyn Port>, Box<dyn Port>)> { Ok((pkt("tg")?, pkt("ts")?)) };
        let (ports, backend) = match self.opts.tester_port {
            TesterPort::Afxdp => (afxdp()?, "afxdp".to_string()),
            TesterPort::Afpacket => (afpacket()?, "afpacket".to_string()),
            TesterPort::Auto => match afxdp() {
                Ok(p) => (p, "afxdp".to_string()),
                Err(e) => (afpacket()?, format!("afpacket (AF_XDP failed: {e:#})")),
            },
        };
        self.tester_backend = Some(backend);
        Ok(ports)
    }
}

/// `0-N` for every online CPU.
fn all_cpus() -> String {
    format!("0-{}", crate::sys::online_cpus() - 1)
}

impl Dut for KernelDut {
    fn name(&self) -> String {
        if self.vrs > 1 {
            return format!(
                "{}: {} macvlan VRs in namespaces sharing one ingress link, demultiplexed by MAC",
                self.dut_name(),
                self.vrs
            );
        }
        format!("{}: {}", self.kind.name(), self.kind.label())
    }

    fn describe(&self) -> Value {
        let ns: serde_json::Map<String, Value> =
            self.layout.namespaces.iter().map(|(r, n)| (r.to_string(), json!(n))).collect();
        let reference = match self.kind {
            Kind::Linux | Kind::LinuxSameCpu => "the IP Forwarder of seed 002 (Linux forwarding, no virtualisation)",
            Kind::Macvlan => "seed 002 (Rathore et al.), Fig. 2: VR namespace on macvlan devices over the physical interfaces",
            Kind::Bridge => "seed 003 (Bozakov) / seed 002 [9]: physical interfaces on Linux bridges, the VR joined by veth pairs",
            Kind::Ovs => "Open vSwitch userspace datapath (anchors §6)",
            Kind::RouteplexAfXdp | Kind::RouteplexAfPacket => "routeplex itself, as `routeplex run` over kernel interfaces",
            Kind::VmLinux => "seed 000 (a monolithic VSR in a KVM guest) and seed 003 (VRs in VMs): Linux forwarding inside a virtual machine whose NICs are virtio-net over vhost-user",
        };
        json!({
            "name": self.name(),
            "dut": self.dut_name(),
            "kind": self.kind.label(),
            "reference": reference,
            "namespaces": ns,
            "path": self.path_text(),
            "addresses": {
                "generator": format!("{GEN_IP} ({TG_MAC}, tg)"),
                "dut_ingress": if self.vrs > 1 { "per VR: see vrs".to_string() } else { format!("{DUT_IN}/24 ({R0_MAC})") },
                "dut_egress": if self.vrs > 1 { "per VR: see vrs".to_string() } else { format!("{DUT_OUT}/24 ({R1_MAC})") },
                "next_hop": format!("{SINK_IP} ({TS_MAC}, ts), a static neighbor"),
            },
            "vrs": (self.vrs > 1).then(|| {
                (0..self.vrs)
                    .map(|i| {
                        let ((mi, mo), (ai, ao)) = (vr_macs(i), vr_addrs(i));
                        json!({
                            "class": VR_NAMES[i],
                            "namespace": net::ns_name(self.id, VR_NAMES[i]),
                            "ingress": format!("m0 {ai}/24 ({mi}), macvlan on host:p0"),
                            "egress": format!("m1 {ao}/24 ({mo}), macvlan on host:p1"),
                        })
                    })
                    .collect::<Vec<_>>()
            }),
            "routes": self.prefixes.len(),
            "route_prefix_len": self.prefixes.first().map(|p| p.prefix_len()),
            "tester_ports": self.tester_backend,
            "placement": {"done": self.done, "not_controlled": self.not_controlled},
            "notes": self.notes,
            "versions": self.versions,
            "counters": "received: rx_packets of the DUT's ingress link (the generator's veth peer); forwarded: tx_packets of its egress link (the sink's veth peer); dropped: every non-zero drop/error counter on the path: ROLE/IF.rx_dropped etc. from the interfaces (tester/tg.tx_dropped: veth could not queue the frame at the DUT's ingress; tester/ts.rx_dropped: the sink's own AF_XDP ring was full, a loss of the tester, not of the DUT), ip/* from nstat in the forwarding namespace, host/softnet_backlog_dropped (backlog queues, host wide), routeplex/* from its control socket (p0.rx_dropped: AF_XDP/AF_PACKET ring full at ingress), ovs/* from Open vSwitch's interface table, host/p0.packet_socket_dropped: Open vSwitch's AF_PACKET socket on p0 had a full receive buffer (ss -0 -m, skmem d)",
        })
    }

    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, tester::Error> {
        let n = self.prefixes.len();
        let hosts =
            (1u32 << (32 - self.prefixes[0].prefix_len())).saturating_sub(2).max(1) as usize;
        let count = flows.clamp(1, n * hosts);
        let dst: Vec<IpAddr> = (0..count)
            .map(|k| {
                let p = self.prefixes[k % n];
                IpAddr::V4(Ipv4Addr::from(u32::from(p.network()) + 1 + ((k / n) % hosts) as u32))
            })
            .collect();
        let src: Vec<IpAddr> =
            (2..18u8).map(|h| IpAddr::V4(Ipv4Addr::new(198, 18, 0, h))).collect();
        let mac =
            |s: &str| s.parse::<MacAddr>().map_err(|e| tester::Error::new(format!("{s}: {e:?}")));
        if self.vrs > 1 {
            // One class per VR, each addressed to its own ingress MAC on the shared link.
            return (0..self.vrs)
                .map(|i| {
                    Ok(Target {
                        class: VR_NAMES[i].to_string(),
                        src_mac: mac(TG_MAC)?,
                        dst_mac: mac(&vr_macs(i).0)?,
                        vlan: None,
                        src: src.clone(),
                        dst: dst.clone(),
                    })
                })
                .collect();
        }
        Ok(vec![Target {
            class: self.kind.name().to_string(),
            src_mac: mac(TG_MAC)?,
            dst_mac: mac(R0_MAC)?,
            vlan: None,
            src,
            dst,
        }])
    }

    fn start(&mut self) -> Result<DutPorts, tester::Error> {
        if self.started {
            return Err(tester::Error::new(format!(
                "the {} DUT is already running",
                self.dut_name()
            )));
        }
        self.started = true;
        let r = self.build().and_then(|()| self.open_tester());
        match r {
            Ok((tx, rx)) => Ok(DutPorts { tx: Box::new(Kicked(tx)), rx, refusal: Refusal::Retry }),
            Err(e) => {
                let mut t = net::Teardown::default();
                lock(&self.made).teardown(&mut t);
                Err(tester::Error::new(format!("{}: {e:#}", self.dut_name())))
            }
        }
    }

    fn counters(&mut self) -> Option<DutCounters> {
        if !self.started || self.stopped.is_some() {
            return None;
        }
        self.read_counters().ok().map(|(c, _)| c.total)
    }

    fn snapshot(&mut self) -> Option<DutSnapshot> {
        if !self.started || self.stopped.is_some() {
            return None;
        }
        self.read_counters().ok().map(|(c, _)| c)
    }

    fn stop(&mut self) -> Result<DutReport, tester::Error> {
        if let Some(r) = &self.stopped {
            return Ok(r.clone());
        }
        let (counters, mut details) = match self.read_counters() {
            Ok((c, mut d)) => {
                if !c.classes.is_empty() {
                    d["classes"] = json!(c.classes);
                }
                (Some(c.total), d)
            }
            Err(e) => (None, json!({"error": format!("{e:#}")})),
        };
        let mut t = net::Teardown::default();
        lock(&self.made).stop_procs(&mut t);
        details["stopped"] = json!(t);
        let r = DutReport { counters, details };
        self.stopped = Some(r.clone());
        Ok(r)
    }
}

/// The generator's port, kicked whenever the runner polls it for returned frames (which it
/// does during the drain, and every 64 rounds while sending). `ports::afxdp` in copy mode
/// transmits only inside a kick, and a kick that met a full completion ring or a busy device
/// leaves descriptors on the ring for the next burst; without this, up to a ring's worth of
/// accepted frames would wait for the next trial and count as lost in this one. An empty
/// `tx_burst` reclaims completions and kicks (AF_PACKET: sends what is pending).
struct Kicked(Box<dyn Port>);

impl Port for Kicked {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn rx_burst(&mut self, batch: &mut ports::Batch) -> usize {
        self.0.tx_burst(batch, &[]);
        self.0.rx_burst(batch)
    }
    fn tx_burst(&mut self, batch: &mut ports::Batch, sel: &[u16]) -> usize {
        self.0.tx_burst(batch, sel)
    }
    fn stats(&self) -> ports::PortStats {
        self.0.stats()
    }
    fn status(&self) -> ports::PortStatus {
        self.0.status()
    }
    fn service(&mut self) {
        self.0.service()
    }
}

impl KernelDut {
    /// Its name on the command line: the kind's, or `macvlan-vrs:N`.
    pub fn dut_name(&self) -> String {
        if self.vrs > 1 {
            format!("macvlan-vrs:{}", self.vrs)
        } else {
            self.kind.name().to_string()
        }
    }

    fn path_text(&self) -> &'static str {
        match self.kind {
            Kind::Macvlan if self.vrs > 1 => "tester:tg ⇄ host:p0 → by destination MAC: macvlan vrN:m0 → IPv4 forwarding in vrN → vrN:m1 (macvlan on host:p1) → host:p1 ⇄ tester:ts",
            Kind::Linux | Kind::LinuxSameCpu => "tester:tg ⇄ dut:d0 → IPv4 forwarding → dut:d1 ⇄ tester:ts",
            Kind::Macvlan => "tester:tg ⇄ host:p0 → macvlan vr:m0 → IPv4 forwarding → vr:m1 (macvlan on host:p1) → host:p1 ⇄ tester:ts",
            Kind::Bridge => "tester:tg ⇄ host:p0 → bridge br0 → host:v0h ⇄ vr:v0 → IPv4 forwarding → vr:v1 ⇄ host:v1h → bridge br1 → host:p1 ⇄ tester:ts",
            Kind::Ovs => "tester:tg ⇄ host:p0 → ovs-vswitchd (netdev datapath, AF_PACKET) → host:p1 ⇄ tester:ts",
            Kind::RouteplexAfXdp => "tester:tg ⇄ dut:d0 → XDP redirect → AF_XDP → routeplex VR → AF_XDP tx → dut:d1 ⇄ tester:ts",
            Kind::RouteplexAfPacket => "tester:tg ⇄ dut:d0 → AF_PACKET (TPACKET_V3) → routeplex VR → AF_PACKET tx → dut:d1 ⇄ tester:ts",
            Kind::VmLinux => "tester:tg ⇄ dut:d0 → AF_PACKET → routeplex switch s0 → vhost-user v0 → guest eth0 (virtio-net) → IPv4 forwarding in the guest → guest eth1 → vhost-user v1 → routeplex switch s1 → AF_PACKET tx → dut:d1 ⇄ tester:ts",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macvlan_vrs_names_parse() {
        assert_eq!(parse_macvlan_vrs("macvlan-vrs:2").unwrap().unwrap(), 2);
        assert_eq!(parse_macvlan_vrs("macvlan-vrs:16").unwrap().unwrap(), 16);
        assert!(parse_macvlan_vrs("macvlan").is_none());
        for bad in ["macvlan-vrs:0", "macvlan-vrs:17", "macvlan-vrs:x", "macvlan-vrs:"] {
            let e = parse_macvlan_vrs(bad).unwrap().unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn every_vr_has_its_own_macs_and_addresses() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..MAX_VRS {
            let ((a, b), (c, d)) = (vr_macs(i), vr_addrs(i));
            for m in [&a, &b] {
                assert!(m.parse::<MacAddr>().is_ok(), "{m}");
            }
            for x in [a, b, c, d] {
                assert!(seen.insert(x.clone()), "{x} twice");
            }
        }
        for m in [TG_MAC, TS_MAC, R0_MAC, R1_MAC, L0_MAC, L1_MAC, B0_MAC, B1_MAC] {
            assert!(!seen.contains(m), "{m} is also a VR's");
        }
        assert_eq!(VR_NAMES[1], "vr2");
    }

    #[test]
    fn prefixes_split_the_range() {
        let p = prefixes(16).unwrap();
        assert_eq!(p.len(), 16);
        assert_eq!(p[0].to_string(), "198.19.128.0/21");
        assert_eq!(p[15].to_string(), "198.19.248.0/21");
        assert!(prefixes(0).unwrap_err().to_string().contains("--routes 0"));
        assert!(prefixes(8193).is_err());
    }
}
