use std::path::Path;

use super::*;

/// Two VRs, a switch with an impaired member, a host on an afpacket port, and names with
/// every XML special character.
const TOPO: &str = r#"
hosts:
  - { name: ha, addresses: [10.9.0.2/24], gateways: [10.9.0.1] }
ports:
  - { name: pa, kind: afpacket, host: ha }
  - name: "p<&>'\"q"
    kind: mem
    impair: { delay: 20ms, jitter: 5ms, loss: 1% }
  - { name: s0, kind: mem, impair: { rate: 10mbit } }
  - { name: s1, kind: mem }
switches:
  - name: lan
    members:
      - { port: s0 }
      - { port: s1, vlan: 10 }
vrs:
  - name: vr1
    interfaces:
      - { name: h, port: pa, mac: 02:00:00:00:01:00, addresses: [10.9.0.1/24] }
      - { name: x, port: "p<&>'\"q", mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
  - name: vr2
    interfaces:
      - { name: l, switch: lan, mac: 02:00:00:00:02:00, addresses: [10.0.2.1/24] }
"#;

fn graph() -> Graph {
    let t = Topology::parse(TOPO, "g.yaml", Path::new(".")).unwrap();
    Graph::of(&t)
}

/// An edge as the test writes it: its ends' names, label, port, impairment.
type EdgeRow<'a> = ((String, String), &'a str, Option<&'a str>, Option<&'a str>);

fn names(g: &Graph, e: &Edge) -> (String, String) {
    (g.nodes[e.a].name.clone(), g.nodes[e.b].name.clone())
}

#[test]
fn nodes_and_edges_of_a_topology() {
    let g = graph();
    let nodes: Vec<(NodeKind, &str)> = g.nodes.iter().map(|n| (n.kind, n.name.as_str())).collect();
    // Internal link ports (vr2.l's pair) are not drawn.
    assert_eq!(
        nodes,
        [
            (NodeKind::Host, "ha"),
            (NodeKind::Port, "pa"),
            (NodeKind::Port, "p<&>'\"q"),
            (NodeKind::Port, "s0"),
            (NodeKind::Port, "s1"),
            (NodeKind::Switch, "lan"),
            (NodeKind::Vr, "vr1"),
            (NodeKind::Vr, "vr2"),
        ]
    );
    let edges: Vec<EdgeRow> = g
        .edges
        .iter()
        .map(|e| (names(&g, e), e.label.as_str(), e.port.as_deref(), e.impair.as_deref()))
        .collect();
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        edges,
        [
            (s("pa", "ha"), "eth0", Some("pa"), None),
            (s("lan", "s0"), "vlan 1", Some("s0"), Some("rate 10mbit")),
            (s("lan", "s1"), "vlan 10", Some("s1"), None),
            (s("vr1", "pa"), "vr1.h", Some("pa"), None),
            (
                s("vr1", "p<&>'\"q"),
                "vr1.x",
                Some("p<&>'\"q"),
                Some("delay 20ms ±5ms uniform, loss 1%")
            ),
            (s("vr2", "lan"), "vr2.l", None, None),
        ]
    );
}

#[test]
fn impairment_labels() {
    let mut c = ImpairConfig { delay_ns: 1_500_000, ..ImpairConfig::default() };
    assert_eq!(impair_label(&c), "delay 1.5ms");
    c.rate_bps = 2_500_000;
    assert_eq!(impair_label(&c), "delay 1.5ms, rate 2500kbit");
    assert_eq!(impair_label(&ImpairConfig::default()), "limit 1000");
}

/// Checks `s` is well-formed XML as far as this writer can go wrong: every tag closed in
/// order, attributes quoted, no raw `<` or `&` in text; returns the element names in order.
fn elements(s: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find(['<', '&']) {
        let text = &rest[..i];
        assert!(!text.contains('>'), "raw > in text {text:?}");
        rest = &rest[i..];
        if rest.starts_with('&') {
            let end = rest.find(';').expect("an entity ends with ;");
            let ent = &rest[1..end];
            assert!(["amp", "lt", "gt", "quot", "#39"].contains(&ent), "unknown entity &{ent};");
            rest = &rest[end + 1..];
            continue;
        }
        let end = rest.find('>').expect("a tag ends");
        let tag = &rest[1..end];
        assert!(!tag.contains('<'), "< inside tag {tag:?}");
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "closing tag out of order");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let name = tag.split_whitespace().next().expect("a tag has a name").to_string();
        // Attributes: name="value" pairs, the value without a raw quote.
        let mut attrs = tag[name.len()..].trim();
        while !attrs.is_empty() {
            let eq = attrs.find("=\"").unwrap_or_else(|| panic!("unquoted attribute in {tag:?}"));
            let close = attrs[eq + 2..].find('"').expect("attribute value ends") + eq + 2;
            assert!(!attrs[eq + 2..close].contains(['<', '>']), "raw < or > in {tag:?}");
            attrs = attrs[close + 1..].trim_start();
        }
        out.push(name.clone());
        if !self_closing {
            stack.push(name);
        }
    }
    assert!(rest.trim().is_empty(), "text after the root: {rest:?}");
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    out
}

#[test]
fn svg_is_well_formed_and_names_everything() {
    let g = graph();
    let svg = g.svg();
    let el = elements(&svg);
    assert_eq!(el.first().map(String::as_str), Some("svg"));
    let count = |n: &str| el.iter().filter(|e| *e == n).count();
    assert_eq!(count("rect"), g.nodes.len());
    assert_eq!(count("path"), g.edges.len());
    assert_eq!(count("style"), 1);
    for n in &g.nodes {
        assert!(svg.contains(&format!(">{}</text>", esc(&n.name))), "{} not drawn", n.name);
    }
    assert!(svg.contains("p&lt;&amp;&gt;&#39;&quot;q"));
    assert!(!svg.contains("p<&"), "a name went out unescaped");
    assert!(svg.contains(">delay 20ms ±5ms uniform, loss 1%</text>"));
    assert!(svg.contains(r#"data-vr="vr2""#));
    // The same topology, the same picture.
    assert_eq!(svg, graph().svg());
}

#[test]
fn empty_topology_draws_an_empty_svg() {
    let g = Graph::of(&Topology::default());
    let el = elements(&g.svg());
    assert_eq!(el, ["svg", "style"]);
}
