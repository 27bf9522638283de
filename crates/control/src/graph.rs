//! The topology as a picture: `routeplex graph FILE --out topo.svg`, and the drawing of the
//! metrics server's live page (`GET /`, see [`crate::metrics`]).
//!
//! [`Graph::of`] turns a validated [`Topology`] into typed nodes (hosts, ports, switches, VRs)
//! and edges: a VR interface to the port it sits on, or to its switch (the internal link pair
//! made for it is not drawn); a switch to each member port; a kernel port to the host whose
//! namespace holds its other end. An edge that leaves routeplex by an impaired port carries
//! that impairment's label (`delay 20ms ±5ms, loss 1%`), and names the port whose counters
//! the live page shows beside it.
//!
//! [`Graph::svg`] lays the nodes out in up to four columns (hosts, ports, switches, VRs; an
//! empty one is left out), each in file order, so one topology always gives the same drawing;
//! no graph layout engine is involved. Every name is XML-escaped: topology names are free text up to the parser's
//! limits. Elements carry `data-port` / `data-vr` attributes for the page's script.

use std::fmt::Write;

use dataplane::impair::{ImpairConfig, Loss};

use crate::topology::{Attach, PortKind, Topology};

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A Linux host (network namespace) `routeplex up` makes.
    Host,
    /// A port the topology file declares.
    Port,
    /// A learning switch.
    Switch,
    /// A virtual router.
    Vr,
}

impl NodeKind {
    /// Its column in the drawing, left to right.
    fn column(self) -> usize {
        match self {
            NodeKind::Host => 0,
            NodeKind::Port => 1,
            NodeKind::Switch => 2,
            NodeKind::Vr => 3,
        }
    }

    /// The word used in the SVG's classes and the page's JSON.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Host => "host",
            NodeKind::Port => "port",
            NodeKind::Switch => "switch",
            NodeKind::Vr => "vr",
        }
    }
}

/// One box of the drawing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: NodeKind,
    pub name: String,
    /// A second line: a port's kind (`mem`, `afxdp on veth3`...), a VR's interface count.
    pub detail: String,
}

/// One line of the drawing, between [`Graph::nodes`] `a` and `b`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub a: usize,
    pub b: usize,
    /// What the link is: the VR interface (`vr1.in`, with its VLAN), the switch member's VLAN.
    pub label: String,
    /// The port frames cross on this link, whose counters the live page shows (`None`: a
    /// VR interface on a switch, whose internal link has no counters of its own in `status`).
    pub port: Option<String>,
    /// What frames leaving routeplex by that port suffer, in words.
    pub impair: Option<String>,
}

/// A topology as nodes and edges, in a fixed order (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// An impairment in a link label's words: `delay 20ms ±5ms, loss 1%`.
pub fn impair_label(c: &ImpairConfig) -> String {
    let ms = |ns: u64| format!("{}ms", ns as f64 / 1e6);
    let mut w = Vec::new();
    if c.delay_ns > 0 || c.jitter_ns > 0 {
        let mut d = format!("delay {}", ms(c.delay_ns));
        if c.jitter_ns > 0 {
            let _ = write!(d, " ±{} {}", ms(c.jitter_ns), c.distribution.name());
        }
        w.push(d);
    }
    match c.loss {
        Loss::None => {}
        Loss::Random(p) => w.push(format!("loss {}%", pct(p.percent()))),
        Loss::Gilbert { p, r, .. } => {
            w.push(format!("loss gemodel p {}% r {}%", pct(p.percent()), pct(r.percent())))
        }
    }
    for (n, x) in [("duplicate", c.duplicate), ("reorder", c.reorder), ("corrupt", c.corrupt)] {
        if x.0 > 0 {
            w.push(format!("{n} {}%", pct(x.percent())));
        }
    }
    if c.rate_bps > 0 {
        w.push(format!("rate {}", rate(c.rate_bps)));
    }
    if w.is_empty() {
        // An `impair:` that only sets limit or seed still puts the port on the impaired path.
        w.push(format!("limit {}", c.limit));
    }
    w.join(", ")
}

/// A percentage as a person writes it: the chances are stored as fractions of 2^32, so 1%
/// reads back as 1.0000000009; four decimals are more than a label needs.
fn pct(p: f64) -> String {
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn rate(bps: u64) -> String {
    for (unit, n) in [("gbit", 1_000_000_000), ("mbit", 1_000_000), ("kbit", 1_000)] {
        if bps >= n && bps.is_multiple_of(n) {
            return format!("{}{unit}", bps / n);
        }
    }
    format!("{bps}bit")
}

impl Graph {
    /// The nodes and edges of `t` (see the module doc for what is drawn).
    pub fn of(t: &Topology) -> Graph {
        let mut g = Graph::default();
        let hosts: Vec<usize> =
            t.hosts.iter().map(|h| g.node(NodeKind::Host, &h.name, "host")).collect();
        // Node of each topology port, if it is drawn (internal links and mirrors are not).
        let mut port_node = vec![None; t.ports.len()];
        for (i, p) in t.ports.iter().enumerate() {
            let detail = match &p.kind {
                PortKind::Link { .. } | PortKind::Mirror { .. } => continue,
                PortKind::Mem { .. } => "mem".to_string(),
                PortKind::AfXdp(a, _) => format!("afxdp {}", attach(a)),
                PortKind::AfPacket(a) => format!("afpacket {}", attach(a)),
                PortKind::Memif(m) => {
                    format!("memif {}", if m.server { "server" } else { "client" })
                }
                PortKind::VhostUser(_) => "vhost-user".to_string(),
                PortKind::Vxlan(_) => "vxlan".to_string(),
                PortKind::Tap { ifname } => format!("tap {ifname}"),
            };
            let n = g.node(NodeKind::Port, &p.name, &detail);
            port_node[i] = Some(n);
            if let PortKind::AfXdp(Attach::Host { host, .. }, _)
            | PortKind::AfPacket(Attach::Host { host, .. }) = &p.kind
            {
                if let Some(&h) = hosts.get(*host) {
                    g.edge(n, h, "eth0".into(), Some(p));
                }
            }
        }
        let switch_node: Vec<usize> = t
            .switches
            .iter()
            .map(|s| g.node(NodeKind::Switch, &s.name, &format!("{} members", s.members.len())))
            .collect();
        // The switch whose member a port is (internal link ends included).
        let mut member_of = vec![None; t.ports.len()];
        for (si, s) in t.switches.iter().enumerate() {
            for m in &s.members {
                let pi = usize::from(m.port);
                if let Some(slot) = member_of.get_mut(pi) {
                    *slot = Some(si);
                }
                if let Some(Some(pn)) = port_node.get(pi) {
                    let vlan = match m.mode {
                        dataplane::MemberMode::Access { vlan } => format!("vlan {vlan}"),
                        dataplane::MemberMode::Trunk { .. } => "trunk".to_string(),
                    };
                    g.edge(switch_node[si], *pn, vlan, t.ports.get(pi));
                }
            }
        }
        for vr in &t.vrs {
            let detail = format!("{} interfaces", vr.interfaces.len());
            let v = g.node(NodeKind::Vr, &vr.name, &detail);
            for f in &vr.interfaces {
                let pi = usize::from(f.port);
                let mut label = format!("{}.{}", vr.name, f.name);
                if let Some(vlan) = f.vlan {
                    let _ = write!(label, " vlan {vlan}");
                }
                match (t.ports.get(pi).map(|p| &p.kind), port_node.get(pi)) {
                    (_, Some(Some(pn))) => g.edge(v, *pn, label, t.ports.get(pi)),
                    (Some(PortKind::Link { peer }), _) => {
                        let sw = member_of.get(usize::from(*peer)).copied().flatten();
                        if let Some(si) = sw {
                            g.edge(v, switch_node[si], label, None);
                        }
                    }
                    _ => {}
                }
            }
        }
        g
    }

    fn node(&mut self, kind: NodeKind, name: &str, detail: &str) -> usize {
        self.nodes.push(Node { kind, name: name.to_string(), detail: detail.to_string() });
        self.nodes.len() - 1
    }

    fn edge(
        &mut self,
        a: usize,
        b: usize,
        label: String,
        port: Option<&crate::topology::PortSpec>,
    ) {
        self.edges.push(Edge {
            a,
            b,
            label,
            port: port.map(|p| p.name.clone()),
            impair: port.and_then(|p| p.impair.as_ref()).map(impair_label),
        });
    }

    /// Where each node's box is: `(x, y)` of its top left corner.
    fn layout(&self) -> (Vec<(u32, u32)>, u32, u32) {
        let mut rows = [0u32; 4];
        for n in &self.nodes {
            rows[n.kind.column()] += 1;
        }
        // Columns with nodes, left to right (a topology without hosts starts with its ports).
        let mut x = [0u32; 4];
        let mut used = 0;
        for (c, &r) in rows.iter().enumerate() {
            x[c] = MARGIN + used * COLUMN;
            used += u32::from(r > 0);
        }
        let tallest = rows.iter().copied().max().unwrap_or(0).max(1);
        let mut next = [0u32; 4];
        let pos = self
            .nodes
            .iter()
            .map(|n| {
                let c = n.kind.column();
                next[c] += 1;
                (x[c], MARGIN + (next[c] - 1) * ROW)
            })
            .collect();
        let width = MARGIN * 2 + used.max(1).saturating_sub(1) * COLUMN + BOX_W;
        (pos, width, MARGIN * 2 + (tallest - 1) * ROW + BOX_H)
    }

    /// The drawing as a standalone SVG document (no external references).
    pub fn svg(&self) -> String {
        let (pos, width, height) = self.layout();
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        s.push_str(STYLE);
        for e in &self.edges {
            let ((ax, ay), (bx, by)) = (pos[e.a], pos[e.b]);
            // From the right side of the left box to the left side of the right one.
            let ((x1, y1), (x2, y2)) = if ax <= bx {
                ((ax + BOX_W, ay + BOX_H / 2), (bx, by + BOX_H / 2))
            } else {
                ((bx + BOX_W, by + BOX_H / 2), (ax, ay + BOX_H / 2))
            };
            let mx = (x1 + x2) / 2;
            let my = (y1 + y2) / 2;
            let port = e.port.as_deref().map(|p| format!(r#" data-port="{}""#, esc(p)));
            let port = port.unwrap_or_default();
            let class = if e.impair.is_some() { "link impaired" } else { "link" };
            let _ = writeln!(s, r#"<g class="{class}"{port}>"#);
            let _ = writeln!(s, r#"<path d="M{x1},{y1} C{mx},{y1} {mx},{y2} {x2},{y2}"/>"#);
            let _ = writeln!(
                s,
                r#"<text class="label" x="{mx}" y="{}">{}</text>"#,
                my - 4,
                esc(&e.label)
            );
            if let Some(i) = &e.impair {
                let _ = writeln!(
                    s,
                    r#"<text class="impair" x="{mx}" y="{}">{}</text>"#,
                    my + 10,
                    esc(i)
                );
            }
            if !port.is_empty() {
                let _ = writeln!(s, r#"<text class="live" x="{mx}" y="{}"></text>"#, my + 24);
            }
            s.push_str("</g>\n");
        }
        for (n, &(x, y)) in self.nodes.iter().zip(&pos) {
            let kind = n.kind.name();
            let _ = writeln!(s, r#"<g class="node {kind}" data-{kind}="{}">"#, esc(&n.name));
            let _ =
                writeln!(s, r#"<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/>"#);
            let cx = x + BOX_W / 2;
            let _ = writeln!(
                s,
                r#"<text class="name" x="{cx}" y="{}">{}</text>"#,
                y + 17,
                esc(&n.name)
            );
            let _ = writeln!(
                s,
                r#"<text class="detail" x="{cx}" y="{}">{}</text>"#,
                y + 32,
                esc(&n.detail)
            );
            s.push_str("</g>\n");
        }
        s.push_str("</svg>\n");
        s
    }

    /// As the live page reads it: nodes (`kind`, `name`) and edges (`a`, `b` by name,
    /// `label`, `port`, `impair`).
    pub fn to_rows(&self) -> crate::api::GraphRows {
        use crate::api::{GraphEdge, GraphNode};
        let nodes = self
            .nodes
            .iter()
            .map(|n| GraphNode { kind: n.kind.name().into(), name: n.name.clone() })
            .collect();
        let edges = self
            .edges
            .iter()
            .map(|e| GraphEdge {
                a: self.nodes[e.a].name.clone(),
                b: self.nodes[e.b].name.clone(),
                label: e.label.clone(),
                port: e.port.clone(),
                impair: e.impair.clone(),
            })
            .collect();
        crate::api::GraphRows { nodes, edges }
    }
}

fn attach(a: &Attach) -> String {
    match a {
        Attach::Interface(i) => format!("on {i}"),
        Attach::Host { host: _, ifname } => format!("on {ifname}"),
        Attach::Netns { netns, ifname } => format!("on {ifname} in {netns}"),
    }
}

const MARGIN: u32 = 20;
const COLUMN: u32 = 260;
const ROW: u32 = 80;
const BOX_W: u32 = 150;
const BOX_H: u32 = 42;

const STYLE: &str = "<style>\
.node rect{fill:#f4f6fa;stroke:#445;stroke-width:1.2}\
.vr rect{fill:#e3efff}.switch rect{fill:#eaf7e6}.host rect{fill:#fff5e0}\
text{text-anchor:middle}.name{font-weight:bold}.detail{fill:#555;font-size:10px}\
.link path{fill:none;stroke:#778;stroke-width:1.5}.impaired path{stroke:#c33;stroke-dasharray:6 3}\
.label{font-size:10px;fill:#333}.impair{font-size:10px;fill:#c33}.live{font-size:10px;fill:#16a}\
</style>\n";

/// `s` with the five XML special characters escaped (text and quoted attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests;
