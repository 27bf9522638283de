//! The fleet's desired state (`routeplex fleet apply FLEET.yaml`): the topology language for
//! the whole fleet, plus placement hints per VR, and how it is cut into one topology per host.
//!
//! ```yaml
//! ports:    [...]      # as in a topology; a port goes where the VRs using it go
//! hosts:    [...]      # namespaces, with the port that attaches them
//! switches: [...]      # stretched over VXLAN when its members land on several hosts;
//!                      # `vteps: [ADDR, ...]`: VTEPs that are no routeplex host (a kernel
//!                      # or hardware VXLAN device) on the segment, sent to as hosts are;
//!                      # `vni: N` (1..=16777215, each once): the segment's VNI, where such
//!                      # a VTEP was configured with one (else the controller allocates)
//! vrs:
//!   - name: r1
//!     host: h1             # optional: pinned to this host
//!     anti_affinity: edge  # optional: no two VRs of group `edge` on one host
//!     cpu_share: 0.25      # optional: CPU it needs, in workers; default its reservation's
//!                          # time_us / period_us, else 0
//!     memory_mib: 64       # optional: memory it needs, default 0
//!     interfaces:
//!       - { name: e0, link: r1r2, mac: ..., addresses: [...] }  # a point-to-point link:
//!                          # exactly two interfaces name it; a generated 2-member switch
//! ```
//!
//! VRs that share a port are one placement unit (a port lives on one host). A switch's own
//! member ports go to its anchor: the host of the first VR (file order) on it that is placed.
//! Each VR's part is checked by control's topology parser (the whole document as one host);
//! errors name the fleet file's line and column.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::Path;

use yamlpath::{Located, Value};

use crate::placement::{Segment, Unit, VNI_MAX};
use crate::tree::{Kind, Y};
use crate::FleetError;

const TOP_KEYS: &[&str] = &["hosts", "ports", "switches", "vrs"];
/// Placement hints: the fleet reads them, control never sees them.
const HINT_KEYS: &[&str] = &["host", "anti_affinity", "cpu_share", "memory_mib"];
/// The largest fleet document.
pub const MAX_DOC_BYTES: u64 = 1 << 20;
/// At most this many VRs in a fleet.
pub const MAX_VRS: usize = 10_000;
/// The most CPU a VR may ask for, in workers.
const MAX_CPU: f64 = 1024.0;
/// At most this many `vteps` on a switch.
const MAX_VTEPS: usize = 64;

/// One VR of the fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct VrDoc {
    pub name: String,
    /// Its topology entry, hints removed (links still written `link:`).
    pub body: Y,
    pub pin: Option<String>,
    pub anti_affinity: Option<String>,
    pub cpu: f64,
    pub memory_mib: u64,
    /// Ports its interfaces sit on.
    pub ports: Vec<String>,
    /// Switches and links its interfaces join.
    pub segments: Vec<String>,
}

/// A validated fleet document.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetDoc {
    pub source: String,
    pub hosts: Vec<Y>,
    pub ports: Vec<Y>,
    /// Their topology entries, `vteps` removed.
    pub switches: Vec<Y>,
    /// Point-to-point links named by interfaces, in file order.
    pub links: Vec<String>,
    pub vrs: Vec<VrDoc>,
    /// The VTEPs of each switch that are no routeplex host (`vteps:`), by switch name.
    pub vteps: BTreeMap<String, Vec<IpAddr>>,
    /// The VNIs the document gives its switches (`vni:`), by switch name.
    pub vnis: BTreeMap<String, u32>,
}

/// A host as the cut needs it: where its VXLAN ports bind.
#[derive(Clone, Debug, PartialEq)]
pub struct Underlay {
    pub addr: IpAddr,
    pub dev: Option<String>,
    pub netns: Option<String>,
    pub mtu: Option<u16>,
}

fn wrap(file: &str) -> impl Fn(Located) -> FleetError + '_ {
    move |at| FleetError::Config { file: file.to_string(), at }
}

impl FleetDoc {
    /// Reads a fleet file (at most [`MAX_DOC_BYTES`]).
    pub fn load(path: &Path) -> Result<(FleetDoc, String), FleetError> {
        let file = path.display().to_string();
        let text = yamlpath::read_file(path, MAX_DOC_BYTES)
            .map_err(|e| FleetError::Io { path: file.clone(), source: e })?;
        let doc = FleetDoc::parse(&text, &file)?;
        Ok((doc, text))
    }

    /// Validates a fleet document; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<FleetDoc, FleetError> {
        let doc = yamlpath::parse_document(text, "vrs:, switches:, ports:, hosts:")
            .map_err(wrap(source))?;
        let root = Value::<Located>::root(&doc);
        let fd = read(&root, source).map_err(wrap(source))?;
        fd.check(&Y::from_value(&root).map_err(wrap(source))?)?;
        Ok(fd)
    }

    /// Control's parser over the whole document as one host: every name, reference and value
    /// checked as a topology would be; an error is led back to the fleet file's position.
    fn check(&self, tree: &Y) -> Result<(), FleetError> {
        let all: Vec<&VrDoc> = self.vrs.iter().collect();
        let one = self.topology(&all, &self.switches, &self.links, &|_| None);
        let text = one.emit();
        control::topology::Topology::parse(&text, &self.source, Path::new(".")).map(drop).map_err(
            |e| {
                let at = tree.at_path(e.field());
                FleetError::Config {
                    file: self.source.clone(),
                    at: Located {
                        pos: at.pos,
                        path: e.field().to_string(),
                        value: e.value().map(str::to_string),
                        message: e.message().to_string(),
                    },
                }
            },
        )
    }

    /// The placement units: VRs sharing a port go together.
    pub fn units(&self) -> Vec<Unit> {
        let n = self.vrs.len();
        let mut root: Vec<usize> = (0..n).collect();
        fn find(r: &mut [usize], mut i: usize) -> usize {
            while r[i] != i {
                r[i] = r[r[i]];
                i = r[i];
            }
            i
        }
        let mut by_port: HashMap<&str, usize> = HashMap::new();
        for (i, v) in self.vrs.iter().enumerate() {
            for p in &v.ports {
                if let Some(&j) = by_port.get(p.as_str()) {
                    let (a, b) = (find(&mut root, i), find(&mut root, j));
                    root[a.max(b)] = a.min(b);
                } else {
                    by_port.insert(p, i);
                }
            }
        }
        let mut units: BTreeMap<usize, Unit> = BTreeMap::new();
        for (i, v) in self.vrs.iter().enumerate() {
            let r = find(&mut root, i);
            let u = units.entry(r).or_insert_with(|| Unit {
                vrs: Vec::new(),
                cpu: 0.0,
                memory_mib: 0,
                pin: None,
                groups: Vec::new(),
            });
            u.vrs.push(v.name.clone());
            u.cpu += v.cpu;
            u.memory_mib += v.memory_mib;
            u.pin = u.pin.take().or(v.pin.clone());
            if let Some(g) = &v.anti_affinity {
                if !u.groups.contains(g) {
                    u.groups.push(g.clone());
                }
            }
        }
        units.into_values().collect()
    }

    /// Every switch and link, by name, in file order.
    pub fn segment_names(&self) -> Vec<String> {
        let mut s: Vec<String> =
            self.switches.iter().filter_map(|y| y.text("name").map(str::to_string)).collect();
        s.extend(self.links.iter().cloned());
        s
    }

    /// Hosts holding each segment given where the VRs are (`at`: VR -> host), with the VNIs
    /// from `vnis`. A switch's anchor (the first placed VR on it) holds its member ports.
    pub fn segments(
        &self,
        at: &HashMap<String, String>,
        vnis: &BTreeMap<String, u32>,
    ) -> Vec<Segment> {
        let mut out = Vec::new();
        for name in self.segment_names() {
            let hosts: BTreeSet<String> = (self.vrs.iter())
                .filter(|v| v.segments.contains(&name))
                .filter_map(|v| at.get(&v.name).cloned())
                .collect();
            let vni = vnis.get(&name).copied().unwrap_or(0);
            let vteps = self.vteps.get(&name).cloned().unwrap_or_default();
            out.push(Segment { name, vni, hosts: hosts.into_iter().collect(), vteps });
        }
        out
    }

    /// Whether VR `vr` has an interface on segment `seg`.
    pub fn vr_on(&self, vr: &str, seg: &str) -> bool {
        self.vrs.iter().any(|v| v.name == vr && v.segments.iter().any(|s| s == seg))
    }

    fn anchor<'a>(&self, seg: &str, at: &'a HashMap<String, String>) -> Option<&'a String> {
        self.vrs
            .iter()
            .filter(|v| v.segments.iter().any(|s| s == seg))
            .find_map(|v| at.get(&v.name))
    }

    /// Host `host`'s topology: its VRs, the ports and namespaces they use, its switches and
    /// links, each segment with a `vxlan` port to the other hosts holding it. A segment on this
    /// host alone has one too, with no remotes: when another host joins it or the last one
    /// leaves, only the port's remotes change, in place (no port opened or closed, no member
    /// joining or leaving the switch), and its interfaces' MTUs stay where they are.
    /// `at` places VRs; `under` gives each host's underlay. VRs in `withheld` are left out
    /// (in flight to this host: the migration brings them), their segments kept.
    pub fn host_topology(
        &self,
        host: &str,
        at: &HashMap<String, String>,
        segments: &[Segment],
        under: &HashMap<String, Underlay>,
        withheld: &BTreeSet<String>,
    ) -> Y {
        let here: Vec<&VrDoc> = (self.vrs.iter())
            .filter(|v| at.get(&v.name).is_some_and(|h| h == host) && !withheld.contains(&v.name))
            .collect();
        let holds = |name: &str| {
            segments.iter().any(|s| s.name == name && s.hosts.iter().any(|h| h == host))
        };
        let switches: Vec<Y> = (self.switches.iter())
            .filter(|s| s.text("name").is_some_and(holds))
            .map(|s| {
                let anchored =
                    s.text("name").and_then(|n| self.anchor(n, at)).is_some_and(|h| h == host);
                let mut s = s.clone();
                if !anchored {
                    // Its own ports live on the anchor host.
                    s.remove("members");
                    s.remove("static_macs");
                }
                s
            })
            .collect();
        let links: Vec<String> = self.links.iter().filter(|l| holds(l)).cloned().collect();
        let vxlan = |seg: &str| -> Option<Y> {
            let s = segments.iter().find(|s| s.name == seg)?;
            let me = under.get(host)?;
            let mut remotes: Vec<IpAddr> = (s.hosts.iter())
                .filter(|h| *h != host)
                .filter_map(|h| under.get(h))
                .map(|u| u.addr)
                .collect();
            for v in &s.vteps {
                if *v != me.addr && !remotes.contains(v) {
                    remotes.push(*v);
                }
            }
            let remotes: Vec<Y> = remotes.iter().map(|a| Y::s(a.to_string())).collect();
            let mut p = Y::m(vec![
                ("name", Y::s(format!("vxlan-{}", s.vni))),
                ("kind", Y::s("vxlan")),
                ("vni", Y::s(s.vni.to_string())),
                ("local", Y::s(me.addr.to_string())),
                ("remotes", Y::l(remotes)),
            ]);
            if let Some(d) = &me.dev {
                p.set("dev", Y::s(d.clone()));
            }
            if let Some(n) = &me.netns {
                p.set("netns", Y::s(n.clone()));
            }
            if let Some(m) = me.mtu {
                p.set("mtu", Y::s(m.to_string()));
            }
            Some(p)
        };
        self.topology(&here, &switches, &links, &vxlan)
    }

    /// The ports named, in file order, and the namespaces they attach.
    fn ports_for(&self, used: &BTreeSet<String>) -> (Vec<Y>, Vec<Y>) {
        let ports: Vec<Y> = (self.ports.iter())
            .filter(|p| p.text("name").is_some_and(|n| used.contains(n)))
            .cloned()
            .collect();
        let attached: BTreeSet<&str> = ports.iter().filter_map(|p| p.text("host")).collect();
        let hosts = (self.hosts.iter())
            .filter(|h| h.text("name").is_some_and(|n| attached.contains(n)))
            .cloned()
            .collect();
        (ports, hosts)
    }

    /// A topology of `vrs` with `switches` and `links` (as switches); `vxlan(segment)` gives
    /// the VXLAN port that stretches a segment, if it is stretched.
    fn topology(
        &self,
        vrs: &[&VrDoc],
        switches: &[Y],
        links: &[String],
        vxlan: &dyn Fn(&str) -> Option<Y>,
    ) -> Y {
        let mut used: BTreeSet<String> = vrs.iter().flat_map(|v| v.ports.iter().cloned()).collect();
        // A switch's own member ports (only the anchor's copy of a switch keeps them).
        for s in switches {
            used.extend(
                s.items("members").iter().filter_map(|m| m.text("port").map(str::to_string)),
            );
        }
        let (mut ports, hosts) = self.ports_for(&used);
        let mut sw = Vec::new();
        let link_switches = links.iter().map(|l| Y::m(vec![("name", Y::s(l.clone()))]));
        for mut s in switches.iter().cloned().chain(link_switches) {
            let name = s.text("name").unwrap_or_default().to_string();
            if let Some(p) = vxlan(&name) {
                let pname = p.text("name").unwrap_or_default().to_string();
                ports.push(p);
                s.push("members", Y::m(vec![("port", Y::s(pname))]));
            }
            sw.push(s);
        }
        let vr_list: Vec<Y> = vrs
            .iter()
            .map(|v| {
                let mut b = v.body.clone();
                if let Some(Y { kind: Kind::L(ifs), .. }) = b.get_mut("interfaces") {
                    for i in ifs {
                        i.rename("link", "switch");
                    }
                }
                b
            })
            .collect();
        let mut t = Y::m(vec![]);
        if !hosts.is_empty() {
            t.set("hosts", Y::l(hosts));
        }
        t.set("ports", Y::l(ports));
        if !sw.is_empty() {
            t.set("switches", Y::l(sw));
        }
        t.set("vrs", Y::l(vr_list));
        t
    }
}

/// A switch's `vteps:`: unicast addresses, each once, at most [`MAX_VTEPS`].
fn read_vteps(list: &Value<'_>) -> Result<Vec<IpAddr>, Located> {
    let items = list.list()?;
    if items.len() > MAX_VTEPS {
        return Err(
            list.error(format_args!("vteps: at most {MAX_VTEPS} addresses, found {}", items.len()))
        );
    }
    let mut out: Vec<IpAddr> = Vec::new();
    for i in &items {
        let t = i.text()?;
        let a: IpAddr =
            t.parse().map_err(|_| i.bad(t, format_args!("vteps: {t:?} is not an IP address")))?;
        if a.is_unspecified() || a.is_multicast() {
            return Err(i.bad(t, format_args!("vteps: {a} is not a unicast address")));
        }
        if out.contains(&a) {
            return Err(i.bad(t, format_args!("vteps: {a} is named twice")));
        }
        out.push(a);
    }
    Ok(out)
}

fn read(root: &Value<'_>, source: &str) -> Result<FleetDoc, Located> {
    let top = root.map(TOP_KEYS)?;
    let copy =
        |k: &str| -> Result<Vec<Y>, Located> { top.list(k)?.iter().map(Y::from_value).collect() };
    let (hosts, ports, mut switches) = (copy("hosts")?, copy("ports")?, copy("switches")?);
    let mut switch_names: HashMap<String, usize> = HashMap::new();
    // A switch's `vteps` and `vni` are the fleet's: control's parser never sees them.
    let (mut vteps, mut vnis) = (BTreeMap::new(), BTreeMap::new());
    // Which switch (and its line) gave each VNI.
    let mut vni_of: HashMap<u32, (String, usize)> = HashMap::new();
    for (v, y) in top.list("switches")?.iter().zip(switches.iter_mut()) {
        let Ok(m) = v.mapping() else { continue };
        if let Some(n) = m.get("name").and_then(|n| n.text().ok()) {
            switch_names.insert(n.to_string(), v.line());
        }
        // Required only where a fleet key needs it; control's parser checks it everywhere.
        let name = || -> Result<String, Located> { Ok(m.req("name")?.text()?.to_string()) };
        if let Some(list) = m.get("vteps") {
            vteps.insert(name()?, read_vteps(&list)?);
            y.remove("vteps");
        }
        if let Some(x) = m.get("vni") {
            let name = name()?;
            let vni: u32 = x.int("VNI", 1, VNI_MAX.into())?;
            if let Some((other, line)) = vni_of.get(&vni) {
                let (t, why) = (x.text()?, "each segment needs a VNI of its own");
                return Err(x.bad(
                    t,
                    format_args!("VNI {vni} is switch {other:?}'s already (line {line}): {why}"),
                ));
            }
            vni_of.insert(vni, (name.clone(), x.line()));
            vnis.insert(name, vni);
            y.remove("vni");
        }
    }
    let vr_vals = top.list("vrs")?;
    if vr_vals.len() > MAX_VRS {
        return Err(top
            .req("vrs")?
            .error(format_args!("a fleet has at most {MAX_VRS} VRs, found {}", vr_vals.len())));
    }
    let mut vrs = Vec::new();
    // Each link's ends: (VR, interface, position) .
    let mut link_ends: BTreeMap<String, Vec<(String, Value<'_>)>> = BTreeMap::new();
    let mut links = Vec::new();
    for v in &vr_vals {
        let m = v.mapping()?;
        let name = m.req("name")?.text()?.to_string();
        let pin = match m.get("host") {
            Some(h) => {
                let s = h.text()?;
                crate::keys::check_name(s)
                    .map_err(|why| h.bad(s, format_args!("host {s:?}: {why}")))?;
                Some(s.to_string())
            }
            None => None,
        };
        let anti_affinity = match m.get("anti_affinity") {
            Some(g) => {
                let s = g.text()?;
                crate::keys::check_name(s)
                    .map_err(|why| g.bad(s, format_args!("group {s:?}: {why}")))?;
                Some(s.to_string())
            }
            None => None,
        };
        let cpu = match m.get("cpu_share") {
            Some(c) => {
                let x: f64 = c.parse("CPU share")?;
                if !(0.0..=MAX_CPU).contains(&x) {
                    let t = c.text()?;
                    return Err(
                        c.bad(t, format_args!("cpu_share {t} is CPU in workers: 0..={MAX_CPU}"))
                    );
                }
                x
            }
            None => reservation_share(&m),
        };
        let memory_mib = match m.get("memory_mib") {
            Some(x) => x.int("memory_mib", 0, 1 << 30)?,
            None => 0,
        };
        let (mut ports, mut segments) = (Vec::new(), Vec::new());
        for i in m.list("interfaces")? {
            let im = i.mapping()?;
            if let Some(p) = im.get("port") {
                ports.push(p.text()?.to_string());
            }
            if let Some(s) = im.get("switch") {
                segments.push(s.text()?.to_string());
            }
            if let Some(l) = im.get("link") {
                let ln = l.text()?.to_string();
                if im.get("switch").is_some() || im.get("port").is_some() {
                    return Err(
                        l.bad(&ln, "an interface is on a port, a switch or a link: one of them")
                    );
                }
                if let Some(line) = switch_names.get(&ln) {
                    return Err(l.bad(
                        &ln,
                        format_args!("link {ln:?} has the name of a switch (line {line})"),
                    ));
                }
                let iface = im.get("name").and_then(|n| n.text().ok()).unwrap_or_default();
                if !link_ends.contains_key(&ln) {
                    links.push(ln.clone());
                }
                link_ends
                    .entry(ln.clone())
                    .or_default()
                    .push((format!("{name}.{iface}"), l.clone()));
                segments.push(ln);
            }
        }
        let mut body = Y::from_value(v)?;
        for k in HINT_KEYS {
            body.remove(k);
        }
        vrs.push(VrDoc { name, body, pin, anti_affinity, cpu, memory_mib, ports, segments });
    }
    for (ln, ends) in &link_ends {
        if ends.len() != 2 {
            let (_, at) = ends.last().expect("a link has an end");
            let names: Vec<&str> = ends.iter().map(|(n, _)| n.as_str()).collect();
            return Err(at.bad(
                ln,
                format_args!(
                    "link {ln:?} joins exactly two interfaces, not {} ({})",
                    ends.len(),
                    names.join(", ")
                ),
            ));
        }
    }
    let fd =
        FleetDoc { source: source.to_string(), hosts, ports, switches, links, vrs, vteps, vnis };
    // VRs sharing a port are placed together: their pins must agree.
    for u in fd.units() {
        let pins: BTreeSet<&String> = fd
            .vrs
            .iter()
            .filter(|v| u.vrs.contains(&v.name))
            .filter_map(|v| v.pin.as_ref())
            .collect();
        if pins.len() > 1 {
            let i = fd
                .vrs
                .iter()
                .rposition(|v| u.vrs.contains(&v.name) && v.pin.is_some())
                .unwrap_or(0);
            let hv = vr_vals[i].mapping()?.req("host")?;
            let list: Vec<&str> = pins.iter().map(|s| s.as_str()).collect();
            return Err(hv.bad(
                hv.text()?,
                format_args!(
                    "VRs {} share a port, so they run on one host, but are pinned to {}",
                    u.vrs.join(", "),
                    list.join(" and ")
                ),
            ));
        }
    }
    Ok(fd)
}

/// A VR's CPU from its time reservation: time_us / period_us (default period 1000 us);
/// control checks the values themselves.
fn reservation_share(m: &yamlpath::Map<'_>) -> f64 {
    let Some(r) = m.get("reservation").and_then(|r| r.mapping().ok()) else { return 0.0 };
    let num = |k: &str| r.get(k).and_then(|v| v.text().ok()).and_then(|t| t.parse::<f64>().ok());
    let period = num("period_us").unwrap_or(control::topology::DEFAULT_PERIOD_US as f64);
    match num("time_us") {
        Some(t) if period > 0.0 => t / period,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests;
