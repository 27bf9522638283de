//! docs/topology.md lists, for every section of a topology file, exactly the keys the parser
//! accepts there (read from the parser's "unknown key (allowed: ...)" error), so the reference
//! cannot fall behind the parser: a new key fails this test until it is documented.

use std::collections::BTreeSet;
use std::path::Path;

use control::Topology;

const DOC: &str = include_str!("../../../../docs/topology.md");
/// A replicated VR, for probes of `msrs[]` sections that read it first.
const MSR_BASE: &str = "workers: 2\nports: [{ name: p, kind: mem }]\nvrs:\n  - { name: r, replicas: 2, interfaces: [{ name: a, port: p, mac: 02:00:00:00:01:00 }] }\n";

/// Each of the doc's headings that has a key table, with its sections' probes: files with an
/// unknown key `zz` in that section.
fn sections() -> Vec<(&'static str, Vec<String>)> {
    let vr = |inner: &str| format!("vrs:\n  - {{ name: v, {inner} }}\n");
    let sw = |inner: &str| format!("switches:\n  - {{ name: s, {inner} }}\n");
    let port = |kind: &str| format!("ports:\n  - {{ name: p, kind: {kind}, zz: 1 }}\n");
    vec![
        ("Top level", vec!["zz: 1\n".into()]),
        ("`metrics`", vec!["metrics: { zz: 1 }\n".into()]),
        ("`migration`", vec!["migration: { zz: 1 }\n".into()]),
        ("`hosts[]`", vec!["hosts:\n  - { zz: 1 }\n".into()]),
        ("`kind: mem` (in-process pair: tests, benchmarks, the demo)", vec![port("mem")]),
        (
            "`kind: memif` (shared memory with another process; interoperates with DPDK)",
            vec![port("memif")],
        ),
        ("`kind: afxdp` and `kind: afpacket` (a Linux interface)", vec![port("afpacket")]),
        ("`kind: afxdp` (its own keys, and those above)", vec![port("afxdp")]),
        ("`kind: tap` (a tap interface routeplex creates)", vec![port("tap")]),
        (
            "`kind: vhost-user` (a virtio-net device for a QEMU guest or a DPDK `virtio_user` app)",
            vec![port("vhost-user")],
        ),
        ("`kind: vxlan` (a segment to other hosts over VXLAN)", vec![port("vxlan")]),
        (
            "`ports[].impair` (link impairments: what frames leaving by the port suffer)",
            vec![
                "ports:\n  - { name: p, kind: mem, impair: { zz: 1 } }\n".into(),
                "ports:\n  - { name: p, kind: afpacket, interface: v, impair: { zz: 1 } }\n".into(),
            ],
        ),
        (
            "`ports[].impair.loss` (Gilbert-Elliott, mapping form)",
            vec!["ports:\n  - { name: p, kind: mem, impair: { loss: { zz: 1 } } }\n".into()],
        ),
        ("`switches[]`", vec!["switches:\n  - { zz: 1 }\n".into()]),
        ("`switches[].members[]`", vec![sw("members: [{ zz: 1 }]")]),
        ("`switches[].static_macs[]`", vec![sw("static_macs: [{ zz: 1 }]")]),
        ("`vrs[]`", vec!["vrs:\n  - { zz: 1 }\n".into()]),
        ("`vrs[].interfaces[]`", vec![vr("interfaces: [{ zz: 1 }]")]),
        ("`vrs[].routes[]`", vec![vr("routes: [{ zz: 1 }]")]),
        ("`vrs[].neighbors[]`", vec![vr("neighbors: [{ zz: 1 }]")]),
        ("`vrs[].tables[]`", vec![vr("tables: [{ zz: 1 }]")]),
        (
            "`vrs[].tables[].next_hops[]` (mapping form)",
            vec![vr("tables: [{ file: f, next_hops: [{ zz: 1 }] }]")],
        ),
        ("`vrs[].limits`", vec![vr("limits: { zz: 1 }")]),
        ("`vrs[].reservation`", vec![vr("reservation: { zz: 1 }")]),
        ("`vrs[].control_plane`", vec![vr("control_plane: { kind: linux, zz: 1 }")]),
        ("`msrs[]` (multistage software routers)", vec!["msrs:\n  - { zz: 1 }\n".into()]),
        (
            "`msrs[].policy`",
            vec![format!("{MSR_BASE}msrs:\n  - {{ vr: r, policy: {{ zz: 1 }} }}\n")],
        ),
    ]
}

/// The doc's headings with the keys (first column, in backticks) of the table under each.
fn doc_tables() -> Vec<(String, BTreeSet<String>)> {
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in DOC.lines() {
        if let Some(h) = line.strip_prefix("### ").or_else(|| line.strip_prefix("## ")) {
            out.push((h.trim().to_string(), BTreeSet::new()));
        } else if let Some(row) = line.strip_prefix("| `") {
            let key = row.split('`').next().unwrap_or_default();
            let (h, keys) = out.last_mut().expect("a table under a heading");
            assert!(keys.insert(key.to_string()), "{h}: key {key} listed twice");
        }
    }
    out.retain(|(_, keys)| !keys.is_empty());
    out
}

/// The keys the parser allows in one section, read from its error for the unknown key `zz`.
fn parser_keys(probe: &str) -> BTreeSet<String> {
    let e = Topology::parse(probe, "probe.yaml", Path::new(".")).unwrap_err();
    let keys =
        e.allowed_keys().unwrap_or_else(|| panic!("{probe:?}: not an unknown-key error: {e}"));
    keys.into_iter().map(String::from).collect()
}

#[test]
fn the_topology_reference_lists_exactly_the_parsers_keys() {
    let doc = doc_tables();
    let sections = sections();
    for (heading, keys) in &doc {
        let Some((_, probes)) = sections.iter().find(|(h, _)| h == heading) else {
            panic!("docs/topology.md: section {heading:?} has a key table this test does not check; add it to sections()")
        };
        for probe in probes {
            assert_eq!(
                keys,
                &parser_keys(probe),
                "docs/topology.md section {heading:?} (left) vs the parser's keys (right)"
            );
        }
    }
    for (heading, _) in &sections {
        assert!(
            doc.iter().any(|(h, _)| h == heading),
            "docs/topology.md has no key table under {heading:?}"
        );
    }
}
