//! `vxlan_mpps`: host to host through routeplex's vxlan port beside the kernel's VXLAN, between
//! the same two host namespaces (h1, h2) of the fleet's bed, over the same underlay.
//!
//! A generator namespace hangs off h1 (veth `gx`) and a sink namespace off h2 (veth `sx`); this
//! process's main thread drives an AF_PACKET port in each (60-byte UDP frames to the sink's
//! MAC). routeplex trial: `routeplex run` in h1 and in h2, each a switch of an afpacket port on
//! its veth and a vxlan port (VNI 4242) to the other's underlay address. Kernel trial: in the
//! same namespaces a bridge holding the veth and a `vxlan` device (VNI 4243, port 4790) to the
//! other. Only one path is live at a time: the routeplex processes stop after their trial,
//! and the veths leave the bridges after the kernel's.

use std::process::Child;
use std::time::{Duration, Instant};

use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::Batch;
use serde_json::{json, Value};
use tester::{Generator, Sink};
use wire::MacAddr;

use super::fleet_lab::{sh, FleetLab};
use super::VxlanOut;
use crate::sys::threads::{Placement, Sampler, Watch};
use crate::{Context, Result};

const SINK_MAC: MacAddr = MacAddr([2, 0, 0x65, 0, 0, 2]);
const BURST: usize = 32;

/// One trial.
#[derive(Clone, Debug)]
pub struct Trial {
    pub path: &'static str,
    pub seconds: f64,
    pub offered: u64,
    pub received: u64,
    pub mpps: f64,
    /// `path` when more than 1 % of what the generator's port took never reached the sink (the
    /// path's own limit), else `generator` (everything offered arrived).
    pub limited_by: &'static str,
    pub placement: Placement,
}

impl Trial {
    pub fn to_json(&self) -> Value {
        json!({
            "path": self.path, "seconds": self.seconds, "offered": self.offered,
            "received": self.received, "mpps": self.mpps, "limited_by": self.limited_by,
            "placement": self.placement.to_json(),
        })
    }
}

/// The generator and sink ports and the names the trials need.
struct Bed {
    tx: AfPacketPort,
    rx: AfPacketPort,
    gen: Generator,
    h1: String,
    h2: String,
    u1: String,
    u2: String,
}

fn ns_sh(ns: &str, args: &[&str]) -> Result<String> {
    let mut a = vec!["netns", "exec", ns];
    a.extend(args);
    sh("ip", &a)
}

/// A veth `dev` in host namespace `h` to `eth0` in a new namespace `end`, offloads and IPv6
/// off on both ends (the counts are frames the generator made, nothing else).
fn end_link(lab: &mut FleetLab, h: &str, dev: &str, end: &str, mac: Option<MacAddr>) -> Result<()> {
    lab.add_ns(end)?;
    sh("ip", &["-n", h, "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", end])?;
    if let Some(m) = mac {
        sh("ip", &["-n", end, "link", "set", "eth0", "address", &m.to_string()])?;
    }
    let off = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"];
    for (n, d) in [(h, dev), (end, "eth0")] {
        ns_sh(n, &["sysctl", "-qw", &format!("net.ipv6.conf.{d}.disable_ipv6=1")])?;
        let mut a = vec!["ethtool", "-K", d];
        a.extend(off);
        ns_sh(n, &a)?;
        sh("ip", &["-n", n, "link", "set", d, "up"])?;
    }
    Ok(())
}

/// The kernel's path in host namespace `h`: bridge `kb` with a vxlan device `vk` to `remote`.
fn kernel_path(h: &str, local: &str, remote: &str) -> Result<()> {
    ns_sh(h, &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"])?;
    let vk = ["ip", "link", "add", "vk", "type", "vxlan", "id", "4243", "local", local];
    let mut a = vk.to_vec();
    a.extend(["remote", remote, "dstport", "4790", "dev", "ul"]);
    ns_sh(h, &a)?;
    ns_sh(h, &["ip", "link", "add", "kb", "type", "bridge"])?;
    ns_sh(h, &["ip", "link", "set", "vk", "master", "kb"])?;
    ns_sh(h, &["ip", "link", "set", "vk", "up"])?;
    ns_sh(h, &["ip", "link", "set", "kb", "up"])?;
    Ok(())
}

fn open(ns: &str) -> Result<AfPacketPort> {
    let o =
        AfPacketOptions { netns: Some(format!("/run/netns/{ns}").into()), ..Default::default() };
    AfPacketPort::open("eth0", &o).with_context(|| format!("an AF_PACKET port on eth0 in {ns}"))
}

impl Bed {
    fn new(lab: &mut FleetLab) -> Result<Bed> {
        let (h1, h2) = (lab.host_ns(1), lab.host_ns(2));
        let pid = std::process::id();
        let (g, s) = (format!("rbfg_{pid}"), format!("rbfs_{pid}"));
        end_link(lab, &h1, "gx", &g, None)?;
        end_link(lab, &h2, "sx", &s, Some(SINK_MAC))?;
        let (u1, u2) = (lab.underlay(1), lab.underlay(2));
        kernel_path(&h1, &u1, &u2)?;
        kernel_path(&h2, &u2, &u1)?;
        let frames = crate::lab::udp_frames(vec![std::net::Ipv4Addr::new(198, 19, 0, 2)], SINK_MAC);
        Ok(Bed { tx: open(&g)?, rx: open(&s)?, gen: Generator::unstamped(frames), h1, h2, u1, u2 })
    }

    /// Sends until the sink sees frames (the path is up), then for `seconds`; what arrived
    /// within 200 ms of the end counts.
    fn measure(&mut self, path: &'static str, seconds: f64, watch: Vec<Watch>) -> Result<Trial> {
        let (mut tb, mut rb, mut sink) =
            (Batch::new(BURST), Batch::new(ports::MAX_BURST), Sink::default());
        let t0 = Instant::now();
        while sink.packets() == 0 {
            crate::ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "{path}: nothing reached the sink within 30 s"
            );
            self.gen.send(&mut self.tx, &mut tb, BURST);
            std::thread::sleep(Duration::from_millis(1));
            sink.recv(&mut self.rx, &mut rb);
        }
        self.drain(&mut sink, &mut rb, Duration::from_millis(200));
        let sampler = Sampler::start(watch, Duration::from_millis(10));
        let (offered0, received0) = (self.gen.total(), sink.packets());
        let t = Instant::now();
        let limit = Duration::from_secs_f64(seconds);
        while t.elapsed() < limit {
            self.gen.send(&mut self.tx, &mut tb, BURST);
            sink.recv(&mut self.rx, &mut rb);
        }
        let s = t.elapsed().as_secs_f64();
        self.drain(&mut sink, &mut rb, Duration::from_millis(200));
        let placement = sampler.finish();
        let offered = self.gen.total() - offered0;
        let received = sink.packets() - received0;
        let lost = offered.saturating_sub(received);
        Ok(Trial {
            path,
            seconds: s,
            offered,
            received,
            mpps: received as f64 / s / 1e6,
            limited_by: if lost * 100 > offered { "path" } else { "generator" },
            placement,
        })
    }

    fn drain(&mut self, sink: &mut Sink, rb: &mut Batch, d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            if sink.recv(&mut self.rx, rb) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    fn bench_watch() -> Watch {
        Watch::this_process("bench", &[("main", "generator and sink")])
    }

    fn routeplex(&mut self, lab: &FleetLab, seconds: f64) -> Result<Trial> {
        let mut kids = Kids(Vec::new());
        for (i, h, local, remote, dev) in
            [(1, &self.h1, &self.u1, &self.u2, "gx"), (2, &self.h2, &self.u2, &self.u1, "sx")]
        {
            let topo = format!(
                "workers: 1\nports:\n  - {{ name: e, kind: afpacket, interface: {dev} }}\n  - {{ name: vx, kind: vxlan, vni: 4242, local: {local}, remotes: [{remote}] }}\nswitches:\n  - name: sw\n    members: [{{ port: e }}, {{ port: vx }}]\n"
            );
            let file = lab.dir.join(format!("vx-h{i}.yaml"));
            std::fs::write(&file, topo)?;
            let state = lab.dir.join(format!("vx-h{i}"));
            std::fs::create_dir_all(&state)?;
            let log = std::fs::File::create(lab.dir.join(format!("vx-h{i}.log")))?;
            let c = lab
                .run_in(h, &file, &state, log)
                .context("starting routeplex for the VXLAN trial")?;
            kids.0.push(c);
        }
        let mut w = vec![Self::bench_watch()];
        for (i, c) in kids.0.iter().enumerate() {
            w.push(Watch::new(c.id(), &format!("h{}", i + 1), &[("worker0", "data plane worker")]));
        }
        self.measure("routeplex", seconds, w)
    }

    fn kernel(&mut self, seconds: f64) -> Result<Trial> {
        ns_sh(&self.h1, &["ip", "link", "set", "gx", "master", "kb"])?;
        ns_sh(&self.h2, &["ip", "link", "set", "sx", "master", "kb"])?;
        let r = self.measure("kernel", seconds, vec![Self::bench_watch()]);
        let _ = ns_sh(&self.h1, &["ip", "link", "set", "gx", "nomaster"]);
        let _ = ns_sh(&self.h2, &["ip", "link", "set", "sx", "nomaster"]);
        r
    }
}

/// Child processes SIGTERMed (then killed) on drop.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &self.0 {
            crate::sys::kill(c.id(), libc::SIGTERM);
        }
        let t0 = Instant::now();
        for c in &mut self.0 {
            while t0.elapsed() < Duration::from_secs(5) && !matches!(c.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Interleaved pairs (routeplex, kernel, …) of `seconds` each.
pub fn compare(lab: &mut FleetLab, pairs: usize, seconds: f64) -> Result<VxlanOut> {
    let mut bed = Bed::new(lab)?;
    let bed = std::cell::RefCell::new(&mut bed);
    let runs = tester::pairs::run(
        pairs,
        |_| bed.borrow_mut().routeplex(lab, seconds),
        |_| bed.borrow_mut().kernel(seconds),
    )?;
    let summary = tester::pairs::Summary::from_measured(
        "routeplex vxlan",
        "kernel vxlan",
        "Mpps",
        &runs,
        |r: &Trial| r.mpps,
        |k: &Trial| k.mpps,
    );
    let trials = runs.into_iter().map(|(a, b)| (a.value, b.value)).collect();
    Ok(VxlanOut { summary, trials })
}
