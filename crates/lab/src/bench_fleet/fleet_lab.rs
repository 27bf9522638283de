//! The fleet benchmark's test bed (root): an underlay bridge in the root namespace with a
//! 3-member etcd cluster on its address, four host namespaces on it each running `routeplex
//! run` with a `fleet:` section, a `routeplex fleet controller` in the root namespace, and a
//! probe namespace behind host h0.
//!
//! h0 is the probe's host, not one of the measured three: it offers 1 MiB of memory, which the
//! pinned `anchor` VR takes, so the controller places nothing else there. The fleet document's
//! switch `seg` has the probe's afpacket port as its own member, so it sits on the anchor's
//! host, h0, and `seg` is stretched over VXLAN to every host that runs a VR on it: a probe from
//! the probe namespace to a VR's address crosses the underlay, h0's and the VR host's vxlan
//! ports and the VR's host data plane.
//!
//! Everything made is removed on drop, on failure too: processes killed, namespaces, veths
//! and the bridge deleted, etcd's data directory and the files removed.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{Context, Result};

pub const ETCD: &str = "/usr/bin/etcd";
pub const ETCDCTL: &str = "/usr/bin/etcdctl";
/// The hosts VRs are placed on (h0 is the probe's).
pub const HOSTS: usize = 3;
/// VRs a fleet document may hold here (a desired state stays under etcd's value limit).
pub const MAX_VRS: usize = 4000;
/// Where every host takes VRs live (each host has its own namespace and underlay address).
const MIGRATION_PORT: u16 = 9470;
/// The hosts' shared migration secret (at least 16 bytes: control's rule); a bench's, not a
/// user's.
const MIGRATION_SECRET: &str = "bench-fleet-migration-0123";

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs a command, failing with its output when it fails.
pub fn sh(cmd: &str, args: &[&str]) -> Result<String> {
    let o = Command::new(cmd).args(args).output().with_context(|| format!("running {cmd}"))?;
    crate::ensure!(o.status.success(), "{cmd} {}: {}", args.join(" "), text(&o).trim());
    Ok(text(&o))
}

/// VR `k`'s address on `seg` (10.64.0.0/16: k / 250 and k % 250 + 1).
pub fn vr_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 64, (k / 250) as u8, (k % 250 + 1) as u8)
}

/// The anchor VR's address and the probe's.
pub const ANCHOR_ADDR: Ipv4Addr = Ipv4Addr::new(10, 64, 254, 1);
pub const PROBE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 64, 255, 254);

/// A fleet document: the probe port on switch `seg`, the anchor pinned to h0, and one VR per
/// name, each with one interface on `seg` at [`vr_addr`] of its index in `names`' numbering
/// (`first` onwards), needing 1 MiB (so none fits on h0).
pub fn fleet_doc(prefix: &str, first: usize, count: usize) -> String {
    let mut d = String::from(
        "ports:\n  - { name: probe, kind: afpacket, interface: pp }\nswitches:\n  - name: seg\n    members: [{ port: probe }]\nvrs:\n  - name: anchor\n    host: h0\n    memory_mib: 1\n    interfaces:\n      - { name: e0, switch: seg, mac: \"02:00:64:ff:00:01\", addresses: [10.64.254.1/16] }\n",
    );
    for k in first..first + count {
        let id = k + 1;
        d += &format!(
            "  - name: {prefix}{k}\n    memory_mib: 1\n    interfaces:\n      - {{ name: e0, switch: seg, mac: \"02:00:64:00:{:02x}:{:02x}\", addresses: [{}/16] }}\n",
            id >> 8,
            id & 0xff,
            vr_addr(k)
        );
    }
    d
}

/// etcd's three members on one address, data in `dir`.
struct Etcd {
    members: Vec<Child>,
    clients: Vec<String>,
}

fn free_port(addr: IpAddr) -> Result<u16> {
    Ok(TcpListener::bind((addr, 0))?.local_addr()?.port())
}

impl Etcd {
    fn start(addr: IpAddr, dir: &Path, tag: &str) -> Result<Etcd> {
        let ports: Vec<(u16, u16)> =
            (0..3).map(|_| Ok((free_port(addr)?, free_port(addr)?))).collect::<Result<_>>()?;
        let initial: Vec<String> =
            ports.iter().enumerate().map(|(i, p)| format!("m{i}=http://{addr}:{}", p.1)).collect();
        let mut e = Etcd { members: Vec::new(), clients: Vec::new() };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let cu = format!("http://{addr}:{client}");
            let pu = format!("http://{addr}:{peer}");
            let log = std::fs::File::create(dir.join(format!("etcd-m{i}.log")))?;
            let child = Command::new(ETCD)
                .arg(format!("--name=m{i}"))
                .arg(format!("--data-dir={}", dir.join(format!("etcd-m{i}")).display()))
                .arg(format!("--listen-client-urls={cu}"))
                .arg(format!("--advertise-client-urls={cu}"))
                .arg(format!("--listen-peer-urls={pu}"))
                .arg(format!("--initial-advertise-peer-urls={pu}"))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .arg("--initial-cluster-state=new")
                // etcd's shortest lease is 1.5 x its election timeout: with its defaults (100 ms
                // heartbeats, 1 s election timeout) a 1 s TTL is granted as 2 s. These let the
                // benchmark's 1 s TTL be what etcd keeps.
                .arg("--heartbeat-interval=50")
                .arg("--election-timeout=500")
                .arg(format!("--initial-cluster-token={tag}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("starting etcd")?;
            e.members.push(child);
            e.clients.push(cu);
        }
        Ok(e)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for c in &mut self.members {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The bed; see the module documentation.
pub struct FleetLab {
    pid: u32,
    pub dir: PathBuf,
    net: u8,
    bridge: String,
    namespaces: Vec<String>,
    /// `routeplex run` of h0..h3 (index = host number).
    hosts: Vec<Option<Child>>,
    controller: Option<Child>,
    etcd: Option<Etcd>,
    /// The TTL the running hosts and controller were started with.
    pub ttl_s: u64,
    /// The TTL etcd granted h1's lease, as etcd reports it (it may raise a short one).
    pub granted_ttl_s: Option<u64>,
    pub(crate) exe: PathBuf,
    /// Where the threads of the fleet started last run, sampled from its start.
    pub sampler: Option<crate::sys::threads::Sampler>,
}

impl FleetLab {
    pub fn host_ns(&self, i: usize) -> String {
        format!("rbfh{i}_{}", self.pid)
    }

    pub fn probe_ns(&self) -> String {
        format!("rbfp_{}", self.pid)
    }

    fn uplink(&self, i: usize) -> String {
        format!("rbfu{i}_{}", self.pid)
    }

    pub(crate) fn underlay(&self, i: usize) -> String {
        format!("10.252.{}.{}", self.net, 10 + i)
    }

    pub fn etcd_urls(&self) -> String {
        self.etcd.as_ref().map_or_else(String::new, |e| e.clients.join(","))
    }

    /// Makes the bridge, the namespaces and their links and starts etcd on the bridge.
    pub fn new() -> Result<FleetLab> {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("rpx-bench-fleet-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let mut lab = FleetLab {
            pid,
            dir,
            net: (pid % 250) as u8,
            bridge: format!("rbf{pid}"),
            namespaces: Vec::new(),
            hosts: (0..=HOSTS).map(|_| None).collect(),
            controller: None,
            etcd: None,
            ttl_s: 0,
            granted_ttl_s: None,
            exe: std::env::current_exe()?,
            sampler: None,
        };
        let b = lab.bridge.clone();
        sh("ip", &["link", "add", &b, "type", "bridge"])?;
        sh("ip", &["addr", "add", &format!("10.252.{}.1/24", lab.net), "dev", &b])?;
        sh("ip", &["link", "set", &b, "up"])?;
        for i in 0..=HOSTS {
            let h = lab.host_ns(i);
            lab.add_ns(&h)?;
            let (up, addr) = (lab.uplink(i), lab.underlay(i));
            sh("ip", &["link", "add", &up, "type", "veth", "peer", "name", "ul", "netns", &h])?;
            sh("ip", &["link", "set", &up, "master", &b, "up"])?;
            sh("ip", &["-n", &h, "addr", "add", &format!("{addr}/24"), "dev", "ul", "nodad"])?;
            sh("ip", &["-n", &h, "link", "set", "ul", "up"])?;
        }
        lab.probe_host()?;
        let addr: IpAddr = format!("10.252.{}.1", lab.net).parse().expect("an address");
        lab.etcd = Some(Etcd::start(addr, &lab.dir, &format!("rpx-bench-fleet-{pid}"))?);
        Ok(lab)
    }

    pub(crate) fn add_ns(&mut self, n: &str) -> Result<()> {
        sh("ip", &["netns", "add", n])?;
        self.namespaces.push(n.to_string());
        sh("ip", &["-n", n, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The probe namespace: `eth0` (10.64.255.254/16) to `pp` in h0's namespace, offloads
    /// off (routeplex sees real frames).
    fn probe_host(&mut self) -> Result<()> {
        let (h, p) = (self.host_ns(0), self.probe_ns());
        self.add_ns(&p)?;
        sh(
            "ip",
            &["-n", &h, "link", "add", "pp", "type", "veth", "peer", "name", "eth0", "netns", &p],
        )?;
        sh("ip", &["-n", &p, "addr", "add", &format!("{PROBE_ADDR}/16"), "dev", "eth0", "nodad"])?;
        let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
        for (n, dev) in [(&h, "pp"), (&p, "eth0")] {
            let mut a = vec!["netns", "exec", n, "ethtool", "-K", dev];
            a.extend(off);
            sh("ip", &a)?;
            sh("ip", &["-n", n, "link", "set", dev, "up"])?;
        }
        sh("ip", &["netns", "exec", &h, "sysctl", "-qw", "net.ipv6.conf.pp.disable_ipv6=1"])?;
        Ok(())
    }

    fn host_file(&self, i: usize, ttl_s: u64) -> String {
        // h0 offers 1 MiB: the anchor's. The measured hosts offer room for every VR. Every
        // host takes VRs live, so a drain moves them with live migration.
        let mem = if i == 0 { 1 } else { 1 << 20 };
        format!(
            "workers: 1\nmigration: {{ listen: 0.0.0.0:{MIGRATION_PORT}, secret: {MIGRATION_SECRET} }}\nfleet:\n  etcd: [{}]\n  host: h{i}\n  underlay: {}\n  offer: {{ workers: 1, cpu_share: 1.0, memory_mib: {mem} }}\n  lease_ttl_s: {ttl_s}\n",
            self.etcd_urls().replace(',', ", "),
            self.underlay(i)
        )
    }

    /// What host `i`'s agent last wrote of the fleet (`fleet.json` in its state directory).
    pub fn fleet_status(&self, i: usize) -> Result<Value> {
        let f = self.dir.join(format!("h{i}")).join("fleet.json");
        let b = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
        serde_json::from_slice(&b).with_context(|| format!("parsing {}", f.display()))
    }

    /// Starts (again) `routeplex run` in host `i`'s namespace.
    pub fn start_host(&mut self, i: usize) -> Result<()> {
        let file = self.dir.join(format!("h{i}.yaml"));
        std::fs::write(&file, self.host_file(i, self.ttl_s))?;
        let state = self.dir.join(format!("h{i}"));
        std::fs::create_dir_all(&state)?;
        // A host started again keeps its state directory (as a restarted host does); a new
        // phase starts from an empty one: [`FleetLab::start_fleet`].
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("h{i}.log")))?;
        let child = self
            .run_in(&self.host_ns(i), &file, &state, log)
            .with_context(|| format!("starting host h{i}"))?;
        self.hosts[i] = Some(child);
        Ok(())
    }

    /// `routeplex run FILE --state-dir STATE` in namespace `ns`, its log to `log`.
    pub fn run_in(
        &self,
        ns: &str,
        file: &Path,
        state: &Path,
        log: std::fs::File,
    ) -> std::io::Result<Child> {
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(&self.exe)
            .arg("run")
            .arg(file)
            .arg("--state-dir")
            .arg(state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
    }

    /// The pid of host `i`'s data plane (`ip netns exec` execs it).
    pub fn host_pid(&self, i: usize) -> Option<u32> {
        self.hosts[i].as_ref().map(Child::id)
    }

    pub fn controller_pid(&self) -> Option<u32> {
        self.controller.as_ref().map(Child::id)
    }

    /// SIGKILLs host `i`'s data plane (and its agent with it).
    pub fn kill_host(&mut self, i: usize) {
        if let Some(mut c) = self.hosts[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the four hosts and a controller with lease TTL `ttl_s`, on an empty fleet (what
    /// an earlier phase left in etcd is deleted first), and waits for the hosts to register.
    pub fn start_fleet(&mut self, ttl_s: u64) -> Result<()> {
        self.stop_fleet();
        self.etcdctl(&["del", "--prefix", "/routeplex/"])?;
        self.ttl_s = ttl_s;
        for i in 0..=HOSTS {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("h{i}")));
            self.start_host(i)?;
        }
        let log = std::fs::File::create(self.dir.join("controller.log"))?;
        let c = Command::new(&self.exe)
            .args(["fleet", "controller", "--etcd", &self.etcd_urls(), "--name", "bench"])
            .args(["--ttl-s", &ttl_s.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting the fleet controller")?;
        self.controller = Some(c);
        let every = Duration::from_millis(20);
        self.sampler = Some(crate::sys::threads::Sampler::start(self.watches(), every));
        self.wait("h0..h3 registered", Duration::from_secs(60), || {
            (self.registered().ok()?.len() == HOSTS + 1).then_some(())
        })?;
        self.granted_ttl_s = self.granted_ttl(1).ok();
        Ok(())
    }

    /// The TTL etcd granted host `i`'s lease (`etcdctl lease timetolive`: "... granted with
    /// TTL(2s), remaining(1s)").
    fn granted_ttl(&self, i: usize) -> Result<u64> {
        let f = self.fleet()?;
        let hosts = f["hosts"].as_array().context("fleet status: no hosts")?;
        let name = format!("h{i}");
        let rec = hosts.iter().map(|h| &h["record"]).find(|r| r["name"] == name.as_str());
        let lease = rec.and_then(|r| r["lease"].as_i64()).context("no lease in h1's record")?;
        let out = self.etcdctl(&["lease", "timetolive", &format!("{lease:x}")])?;
        let ttl = out.split("TTL(").nth(1).and_then(|t| t.split("s)").next());
        ttl.and_then(|t| t.parse().ok()).with_context(|| format!("etcdctl: {}", out.trim()))
    }

    /// Stops the hosts and the controller (SIGTERM: they leave the fleet at once).
    pub fn stop_fleet(&mut self) {
        drop(self.sampler.take());
        let mut all: Vec<Child> = self.hosts.iter_mut().filter_map(Option::take).collect();
        all.extend(self.controller.take());
        for c in &all {
            crate::sys::kill(c.id(), libc::SIGTERM);
        }
        let t0 = Instant::now();
        for mut c in all {
            while t0.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn etcdctl(&self, args: &[&str]) -> Result<String> {
        let o = Command::new(ETCDCTL)
            .args(["--endpoints", &self.etcd_urls()])
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .context("running etcdctl")?;
        crate::ensure!(o.status.success(), "etcdctl {}: {}", args.join(" "), text(&o).trim());
        Ok(text(&o))
    }

    /// Whether the bed's directory (logs, state, files) stays after the run
    /// (`RPX_BENCH_KEEP=1`).
    pub fn keeps_logs(&self) -> bool {
        std::env::var_os("RPX_BENCH_KEEP").is_some()
    }

    /// `routeplex ARGS`, failing with its output.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        let o = Command::new(&self.exe).args(args).output().context("running routeplex")?;
        crate::ensure!(o.status.success(), "routeplex {}: {}", args.join(" "), text(&o).trim());
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `routeplex fleet apply` of `doc`.
    pub fn apply(&self, doc: &str, name: &str) -> Result<()> {
        let f = self.dir.join(name);
        std::fs::write(&f, doc)?;
        let f = f.display().to_string();
        self.cli(&["fleet", "apply", &f, "--etcd", &self.etcd_urls()]).map(drop)
    }

    /// `routeplex fleet drain HOST` (`cordon`) or `uncordon`.
    pub fn cordon(&self, host: &str, cordon: bool) -> Result<()> {
        let verb = if cordon { "drain" } else { "uncordon" };
        self.cli(&["fleet", verb, host, "--etcd", &self.etcd_urls()]).map(drop)
    }

    /// `routeplex fleet status --json`.
    pub fn fleet(&self) -> Result<Value> {
        let out = self.cli(&["fleet", "status", "--etcd", &self.etcd_urls(), "--json"])?;
        Ok(serde_json::from_str(&out)?)
    }

    /// The registered hosts' names.
    pub fn registered(&self) -> Result<Vec<String>> {
        let f = self.fleet()?;
        let hosts = f["hosts"].as_array().context("fleet status: no hosts")?;
        Ok(hosts.iter().filter_map(|h| h["record"]["name"].as_str().map(String::from)).collect())
    }

    /// Per registered host, its VRs whose every interface is up (names).
    pub fn running(&self) -> Result<Vec<(String, Vec<String>)>> {
        let f = self.fleet()?;
        let hosts = f["hosts"].as_array().context("fleet status: no hosts")?;
        Ok(hosts
            .iter()
            .filter_map(|h| {
                let r = &h["record"];
                let vrs = r["vrs"].as_array()?;
                let up = vrs
                    .iter()
                    .filter(|v| {
                        v["interfaces"].as_u64() > Some(0) && v["interfaces"] == v["interfaces_up"]
                    })
                    .filter_map(|v| v["name"].as_str().map(String::from))
                    .collect();
                Some((r["name"].as_str()?.to_string(), up))
            })
            .collect())
    }

    /// The hosts running `vr` with every interface up, by number.
    pub fn hosts_of(&self, vr: &str) -> Result<Vec<usize>> {
        let r = self.running()?;
        let on = r.iter().filter(|(_, vrs)| vrs.iter().any(|v| v == vr));
        Ok(on.filter_map(|(h, _)| h.strip_prefix('h')?.parse().ok()).collect())
    }

    /// Polls `f` every 100 ms until it gives a value, failing after `limit`.
    pub fn wait<T>(
        &self,
        what: &str,
        limit: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let t0 = Instant::now();
        loop {
            if let Some(v) = f() {
                return Ok(v);
            }
            if t0.elapsed() > limit {
                crate::bail!("{what}: not within {limit:?} (logs in {})", self.dir.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The processes to watch for where threads ran.
    pub fn watches(&self) -> Vec<crate::sys::threads::Watch> {
        use crate::sys::threads::Watch;
        let mut w = vec![Watch::this_process(
            "bench",
            &[("main", "bench driver"), ("rpx-pinger", "prober")],
        )];
        for i in 0..=HOSTS {
            if let Some(pid) = self.host_pid(i) {
                w.push(Watch::new(
                    pid,
                    &format!("h{i}"),
                    &[("worker0", "data plane worker"), ("main", "control")],
                ));
            }
        }
        if let Some(pid) = self.controller_pid() {
            w.push(Watch::new(pid, "controller", &[("main", "controller")]));
        }
        w
    }

    /// The last lines of every host's and the controller's log, for an error.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["h0.log", "h1.log", "h2.log", "h3.log", "controller.log"] {
            let t = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            s += &format!("--- {f}:\n{}\n", lines[lines.len().saturating_sub(8)..].join("\n"));
        }
        s
    }
}

impl Drop for FleetLab {
    fn drop(&mut self) {
        self.stop_fleet();
        self.etcd.take();
        for n in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
        // The root ends of the underlay veths too: a namespace can outlive `ip netns del`.
        for i in 0..=HOSTS {
            let _ = Command::new("ip")
                .args(["link", "del", &self.uplink(i)])
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).status();
        if !self.keeps_logs() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_document_numbers_vrs_with_distinct_addresses_and_macs() {
        let d = fleet_doc("v", 0, 600);
        let t = control::Topology::parse(
            &d.replace("    host: h0\n", "").replace("    memory_mib: 1\n", ""),
            "doc.yaml",
            Path::new("/"),
        );
        let t = t.unwrap_or_else(|e| panic!("{e}"));
        assert!(t.summary().contains("601 VRs"), "{}", t.summary());
        assert_eq!(vr_addr(0), Ipv4Addr::new(10, 64, 0, 1));
        assert_eq!(vr_addr(249), Ipv4Addr::new(10, 64, 0, 250));
        assert_eq!(vr_addr(250), Ipv4Addr::new(10, 64, 1, 1));
        assert_eq!(vr_addr(MAX_VRS - 1), Ipv4Addr::new(10, 64, 15, 250));
        let d = fleet_doc("dr", 5, 2);
        assert!(d.contains("name: dr5") && d.contains("name: dr6") && !d.contains("dr7"));
        assert!(d.contains("02:00:64:00:00:06") && d.contains("10.64.0.6/16"));
    }
}
