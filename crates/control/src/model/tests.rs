use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::*;
use crate::topology::ErrorKind;

fn s(x: &str) -> String {
    x.to_string()
}

fn strings(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|x| s(x)).collect()
}

/// A directory with one table file, `t4.txt`.
fn table_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rpx-model-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t4.txt"), "10.5.0.0/16 0\n10.6.0.0/16 1\n").unwrap();
    dir
}

const REPRESENTATIVE: &str = r#"
workers: 2
ingress_queues: { limit: 128 }
metrics: { listen: "127.0.0.1:9469" }
hosts:
  - name: ha
    addresses: [10.9.0.2/24]
    gateways: [10.9.0.1]
    mtu: 1400
ports:
  - { name: p0, kind: mem, ring: 512, burst: 32 }
  - { name: p1, kind: mem }
  - { name: h1, kind: mem }
  - { name: h2, kind: mem }
  - { name: t0, kind: mem }
  - name: m0
    kind: memif
    role: client
    socket: "@rpx-model"
    id: 3
    secret: s3cret
    queues: 2
    ring: 256
    buffer: 4096
    rx_mode: interrupt
  - { name: pa, kind: afpacket, host: ha }
  - { name: pk, kind: afxdp, interface: veth9 }
  - { name: pt, kind: tap, interface: tap9 }
switches:
  - name: lan
    members:
      - { port: h1 }
      - { port: h2, vlan: 10 }
      - { port: t0, trunk: [10, 20], native: 1 }
    static_macs:
      - { mac: "02:00:00:00:0a:02", port: h2 }
      - { mac: "02:00:00:00:0a:03", port: t0, vlan: 20 }
    mac_limit: 1000
    aging_s: 60
    snooping: true
    groups: 64
    group_timeout_s: 30
vrs:
  - name: vr1
    interfaces:
      - { name: eth0, port: p0, vlan: 10, mac: "02:00:00:00:01:00", mtu: 1400, addresses: [10.0.0.1/24, "2001:db8:0:1::1/64"] }
      - { name: eth1, port: p1, mac: "02:00:00:00:01:01", addresses: [10.0.1.1/24] }
      - { name: lan10, switch: lan, vlan: 10, mac: "02:00:00:00:01:02", addresses: [10.0.10.1/24] }
    routes:
      - { prefix: 0.0.0.0/0, via: 10.0.1.2 }
      - { prefix: 192.168.0.0/16, via: 10.0.1.3, interface: eth1 }
      - { prefix: 172.16.0.0/12, interface: eth1 }
      - { prefix: 198.51.100.0/24, blackhole: true }
      - { prefix: "2001:db8:a::/48", via: "fe80::1", interface: eth0 }
    neighbors:
      - { address: 10.0.1.2, mac: "02:00:00:00:02:01", interface: eth1 }
    tables:
      - file: t4.txt
        next_hops: [10.0.1.2, { via: 10.0.1.3, interface: eth1 }]
    limits: { neighbors: 1024, queue_total: 128, icmp_errors_per_sec: 1000 }
    worker: 1
    batch: 64
    reservation: { time_us: 300, period_us: 1000, weight: 5 }
  - name: vr2
    interfaces:
      - { name: e0, port: m0, mac: "02:00:00:00:03:00", addresses: [10.3.0.1/24] }
      - { name: e1, port: pa, mac: "02:00:00:00:03:01", addresses: [10.9.0.1/24] }
    reservation: { packets: 5000 }
"#;

/// [`REPRESENTATIVE`], built in code.
fn representative() -> TopologyDoc {
    let mem = |name: &str, ring: Option<u64>, burst: Option<u64>| PortDoc {
        burst,
        ..PortDoc::new(name, PortKindDoc::Mem { ring })
    };
    let member = |port: &str| MemberDoc { port: s(port), ..MemberDoc::default() };
    let mut vr1 = VrDoc::new("vr1");
    vr1.interfaces = vec![
        IfaceDoc {
            vlan: Some(10),
            mtu: Some(1400),
            ..IfaceDoc::on_port(
                "eth0",
                "p0",
                "02:00:00:00:01:00",
                ["10.0.0.1/24", "2001:db8:0:1::1/64"],
            )
        },
        IfaceDoc::on_port("eth1", "p1", "02:00:00:00:01:01", ["10.0.1.1/24"]),
        IfaceDoc {
            name: s("lan10"),
            switch: Some(s("lan")),
            vlan: Some(10),
            mac: s("02:00:00:00:01:02"),
            addresses: strings(&["10.0.10.1/24"]),
            ..IfaceDoc::default()
        },
    ];
    vr1.routes = vec![
        RouteDoc::via("0.0.0.0/0", "10.0.1.2"),
        RouteDoc { interface: Some(s("eth1")), ..RouteDoc::via("192.168.0.0/16", "10.0.1.3") },
        RouteDoc { prefix: s("172.16.0.0/12"), interface: Some(s("eth1")), ..RouteDoc::default() },
        RouteDoc { prefix: s("198.51.100.0/24"), blackhole: Some(true), ..RouteDoc::default() },
        RouteDoc { interface: Some(s("eth0")), ..RouteDoc::via("2001:db8:a::/48", "fe80::1") },
    ];
    vr1.neighbors = vec![NeighborDoc::new("10.0.1.2", "02:00:00:00:02:01", "eth1")];
    vr1.tables = vec![TableDoc {
        file: s("t4.txt"),
        next_hops: vec![
            NextHopDoc::Address(s("10.0.1.2")),
            NextHopDoc::Via { via: s("10.0.1.3"), interface: Some(s("eth1")) },
        ],
    }];
    vr1.limits = Some(LimitsDoc {
        neighbors: Some(1024),
        queue_total: Some(128),
        icmp_errors_per_sec: Some(1000),
        ..LimitsDoc::default()
    });
    vr1.worker = Some(1);
    vr1.batch = Some(64);
    vr1.reservation = Some(ReservationDoc {
        time_us: Some(300),
        period_us: Some(1000),
        weight: Some(5),
        ..ReservationDoc::default()
    });
    let mut vr2 = VrDoc::new("vr2");
    vr2.interfaces = vec![
        IfaceDoc::on_port("e0", "m0", "02:00:00:00:03:00", ["10.3.0.1/24"]),
        IfaceDoc::on_port("e1", "pa", "02:00:00:00:03:01", ["10.9.0.1/24"]),
    ];
    vr2.reservation = Some(ReservationDoc { packets: Some(5000), ..ReservationDoc::default() });
    TopologyDoc {
        workers: Some(WorkersDoc::Count(2)),
        idle: None,
        ingress_queues: Some(IngressQueuesDoc { limit: Some(128), ..Default::default() }),
        metrics: Some(MetricsDoc { listen: Some(s("127.0.0.1:9469")) }),
        migration: None,
        hosts: vec![HostDoc {
            name: s("ha"),
            addresses: strings(&["10.9.0.2/24"]),
            gateways: strings(&["10.9.0.1"]),
            mtu: Some(1400),
        }],
        ports: vec![
            mem("p0", Some(512), Some(32)),
            mem("p1", None, None),
            mem("h1", None, None),
            mem("h2", None, None),
            mem("t0", None, None),
            PortDoc::new(
                "m0",
                PortKindDoc::Memif(MemifDoc {
                    role: Some(s("client")),
                    socket: s("@rpx-model"),
                    id: Some(3),
                    secret: Some(s("s3cret")),
                    queues: Some(2),
                    ring: Some(256),
                    buffer: Some(4096),
                    rx_mode: Some(s("interrupt")),
                }),
            ),
            PortDoc::new(
                "pa",
                PortKindDoc::Afpacket(KernelDoc { host: Some(s("ha")), ..KernelDoc::default() }),
            ),
            PortDoc::new("pk", PortKindDoc::Afxdp(KernelDoc::interface("veth9"))),
            PortDoc::new("pt", PortKindDoc::Tap { interface: s("tap9") }),
        ],
        switches: vec![SwitchDoc {
            name: s("lan"),
            members: vec![
                member("h1"),
                MemberDoc { vlan: Some(10), ..member("h2") },
                MemberDoc { trunk: Some(vec![10, 20]), native: Some(1), ..member("t0") },
            ],
            static_macs: vec![
                StaticMacDoc { mac: s("02:00:00:00:0a:02"), port: s("h2"), vlan: None },
                StaticMacDoc { mac: s("02:00:00:00:0a:03"), port: s("t0"), vlan: Some(20) },
            ],
            mac_limit: Some(1000),
            aging_s: Some(60),
            snooping: Some(true),
            groups: Some(64),
            group_timeout_s: Some(30),
        }],
        vrs: vec![vr1, vr2],
        msrs: vec![],
        fleet: None,
    }
}

#[test]
fn a_doc_built_in_code_is_the_same_topology_as_its_yaml() {
    let dir = table_dir("same");
    let want = Topology::parse(REPRESENTATIVE, "t.yaml", &dir).unwrap();
    let doc = representative();
    let got = doc.build("t.yaml", &dir).unwrap_or_else(|e| panic!("{e}\n{}", doc.to_yaml()));
    assert_eq!(got, want);
    // The parts the comparison would pass vacuously if both were empty.
    assert_eq!(
        (got.ports.len(), got.switches.len(), got.vrs.len(), got.hosts.len()),
        (11, 1, 2, 1),
        "nine ports and the link pair of lan10"
    );
    assert_eq!(got.vrs[0].routes.len(), 7, "five static routes and two table entries");
    // The model reads back from its JSON (serde both ways).
    let back: TopologyDoc = serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
    assert_eq!(back, doc);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_yaml_is_what_a_person_would_write() {
    let mut vr = VrDoc::new("vr1");
    vr.interfaces.push(IfaceDoc::on_port(
        "e0",
        "p0",
        "02:00:00:00:00:01",
        ["10.0.0.1/24", "2001:db8::1/64"],
    ));
    vr.tables.push(TableDoc {
        file: s("tables/v4.txt"),
        next_hops: vec![
            NextHopDoc::Address(s("10.0.0.2")),
            NextHopDoc::Via { via: s("fe80::2"), interface: Some(s("e0")) },
        ],
    });
    vr.limits = Some(LimitsDoc { neighbors: Some(16), ..LimitsDoc::default() });
    vr.reservation = Some(ReservationDoc { packets: Some(100), ..ReservationDoc::default() });
    let doc = TopologyDoc {
        workers: Some(WorkersDoc::Cpus(vec![0, 2])),
        ports: vec![
            PortDoc { burst: Some(32), ..PortDoc::new("p0", PortKindDoc::Mem { ring: Some(512) }) },
            PortDoc::new(
                "m0",
                PortKindDoc::Memif(MemifDoc { socket: s("@sock"), ..MemifDoc::default() }),
            ),
        ],
        vrs: vec![vr, VrDoc::new("vr2")],
        ..TopologyDoc::default()
    };
    assert_eq!(
        doc.to_yaml(),
        r#"workers: [0, 2]
ports:
  - { name: p0, kind: mem, ring: 512, burst: 32 }
  - { name: m0, kind: memif, socket: "@sock" }
vrs:
  - name: vr1
    interfaces:
      - { name: e0, port: p0, mac: "02:00:00:00:00:01", addresses: [10.0.0.1/24, "2001:db8::1/64"] }
    tables:
      - file: tables/v4.txt
        next_hops:
          - 10.0.0.2
          - { via: "fe80::2", interface: e0 }
    limits: { neighbors: 16 }
    reservation: { packets: 100 }
  - { name: vr2 }
"#
    );
    assert_eq!(TopologyDoc::default().to_yaml(), "");
    assert!(TopologyDoc::default().build("empty.yaml", Path::new(".")).is_ok());
}

#[test]
fn strings_yaml_would_misread_are_quoted() {
    let awkward = [
        "@abstract",
        "a: b",
        "x, y",
        "[list]",
        "{map}",
        "# not a comment",
        "quote \" and \\ backslash",
        "-dash",
        "tab\there",
        "ünï",
        "*alias",
        "&anchor",
        "!tag",
        "%percent",
        "'single'",
        "|",
        ">",
        "?",
        "yes",
        "0x10",
    ];
    // (`~`, `null` and the empty string, quoted or not, are the parser's "no value".)
    for (i, secret) in awkward.iter().enumerate() {
        let doc = TopologyDoc {
            ports: vec![PortDoc::new(
                "m0",
                PortKindDoc::Memif(MemifDoc {
                    socket: format!("/tmp/{secret}"),
                    secret: Some(s(secret)),
                    ..MemifDoc::default()
                }),
            )],
            ..TopologyDoc::default()
        };
        let t = doc.build("q.yaml", Path::new(".")).unwrap_or_else(|e| {
            panic!("{i}: {secret:?}: {e}\n{}", doc.to_yaml());
        });
        let crate::PortKind::Memif(m) = &t.ports[0].kind else { panic!("not memif") };
        assert_eq!(m.secret.as_deref(), Some(*secret), "{}", doc.to_yaml());
        assert_eq!(m.socket, format!("/tmp/{secret}"));
    }
}

/// The keys the parser allows in one section, read from its error for an unknown key.
fn parser_keys(probe: &str) -> BTreeSet<String> {
    let e = Topology::parse(probe, "probe.yaml", Path::new(".")).unwrap_err();
    let keys =
        e.allowed_keys().unwrap_or_else(|| panic!("{probe:?}: not an unknown-key error: {e}"));
    keys.into_iter().map(String::from).collect()
}

fn keys(v: &Json) -> BTreeSet<String> {
    v.as_object().unwrap_or_else(|| panic!("not a mapping: {v}")).keys().cloned().collect()
}

/// A doc with every field of the model set (not a valid topology: it only has to serialize).
/// Struct literals without `..`, so a new field must be given a value here.
fn impair() -> ImpairDoc {
    ImpairDoc {
        delay: Some(s("d")),
        jitter: Some(s("j")),
        distribution: Some(s("x")),
        loss: Some(LossDoc::Gilbert(GilbertDoc {
            p: s("p"),
            r: Some(s("r")),
            h: Some(s("h")),
            k: Some(s("k")),
        })),
        duplicate: Some(s("d")),
        reorder: Some(s("r")),
        corrupt: Some(s("c")),
        rate: Some(s("r")),
        limit: Some(1),
        seed: Some(1),
    }
}

fn every_field() -> TopologyDoc {
    let kernel = KernelDoc {
        interface: Some(s("i")),
        host: Some(s("h")),
        netns: Some(s("n")),
        xdp: XdpDoc::default(),
    };
    let xdp = XdpDoc {
        ring: Some(1),
        frame_size: Some(1),
        xdp_mode: Some(s("m")),
        zero_copy: Some(s("z")),
        threaded_napi: Some(true),
        queues: Some(QueuesDoc::Word(s("all"))),
    };
    TopologyDoc {
        workers: Some(WorkersDoc::Count(1)),
        idle: Some(s("poll")),
        ingress_queues: Some(IngressQueuesDoc {
            limit: Some(1),
            quantum: Some(1),
            per_pass: Some(1),
        }),
        metrics: Some(MetricsDoc { listen: Some(s("l")) }),
        fleet: Some(FleetDoc {
            etcd: EndpointsDoc::Many(strings(&["e"])),
            host: s("h"),
            underlay: s("u"),
            offer: FleetOfferDoc { workers: 1, cpu_share: s("c"), memory_mib: 1 },
            lease_ttl_s: Some(1),
            policy: Some(s("p")),
        }),
        migration: Some(MigrationDoc {
            listen: Some(s("l")),
            secret: s("s"),
            peers: strings(&["p"]),
            stop_timeout_ms: Some(1),
        }),
        hosts: vec![HostDoc {
            name: s("h"),
            addresses: strings(&["a"]),
            gateways: strings(&["g"]),
            mtu: Some(1),
        }],
        ports: vec![
            PortDoc {
                name: s("mem"),
                kind: PortKindDoc::Mem { ring: Some(1) },
                burst: Some(1),
                impair: Some(impair()),
            },
            PortDoc {
                name: s("memif"),
                kind: PortKindDoc::Memif(MemifDoc {
                    role: Some(s("r")),
                    socket: s("s"),
                    id: Some(1),
                    secret: Some(s("x")),
                    queues: Some(1),
                    ring: Some(1),
                    buffer: Some(1),
                    rx_mode: Some(s("m")),
                }),
                burst: Some(1),
                impair: Some(impair()),
            },
            PortDoc {
                name: s("afxdp"),
                kind: PortKindDoc::Afxdp(KernelDoc { xdp, ..kernel.clone() }),
                burst: Some(1),
                impair: Some(impair()),
            },
            PortDoc {
                name: s("afpacket"),
                kind: PortKindDoc::Afpacket(kernel),
                burst: Some(1),
                impair: Some(impair()),
            },
            PortDoc {
                name: s("tap"),
                kind: PortKindDoc::Tap { interface: s("t") },
                burst: Some(1),
                impair: Some(impair()),
            },
            PortDoc {
                name: s("vhost-user"),
                kind: PortKindDoc::VhostUser(VhostUserDoc {
                    socket: s("s"),
                    mode: Some(s("m")),
                    queues: Some(1),
                }),
                burst: Some(1),
                impair: Some(impair()),
            },
        ],
        switches: vec![SwitchDoc {
            name: s("sw"),
            members: vec![MemberDoc {
                port: s("p"),
                vlan: Some(1),
                trunk: Some(vec![1]),
                native: Some(1),
            }],
            static_macs: vec![StaticMacDoc { mac: s("m"), port: s("p"), vlan: Some(1) }],
            mac_limit: Some(1),
            aging_s: Some(1),
            snooping: Some(true),
            groups: Some(1),
            group_timeout_s: Some(1),
        }],
        vrs: vec![VrDoc {
            name: s("vr"),
            interfaces: vec![IfaceDoc {
                name: s("i"),
                port: Some(s("p")),
                switch: Some(s("sw")),
                vlan: Some(1),
                mac: s("m"),
                mtu: Some(1),
                addresses: strings(&["a"]),
                up: Some(true),
            }],
            routes: vec![RouteDoc {
                prefix: s("p"),
                via: Some(s("v")),
                interface: Some(s("i")),
                blackhole: Some(true),
            }],
            neighbors: vec![NeighborDoc { address: s("a"), mac: s("m"), interface: s("i") }],
            tables: vec![TableDoc {
                file: s("f"),
                next_hops: vec![NextHopDoc::Via { via: s("v"), interface: Some(s("i")) }],
            }],
            limits: Some(LimitsDoc {
                neighbors: Some(1),
                queue_per_neighbor: Some(1),
                queue_total: Some(1),
                neighbor_reachable_ms: Some(1),
                neighbor_retrans_ms: Some(1),
                neighbor_probes: Some(1),
                neighbor_failed_hold_ms: Some(1),
                incomplete_per_interface: Some(1),
                solicitations_per_sec: Some(1),
                solicitations_burst: Some(1),
                icmp_errors_per_sec: Some(1),
                icmp_errors_burst: Some(1),
            }),
            worker: Some(1),
            batch: Some(1),
            reservation: Some(ReservationDoc {
                packets: Some(1),
                time_us: Some(1),
                period_us: Some(1),
                weight: Some(1),
            }),
            replicas: Some(1),
            control_plane: Some(ControlPlaneDoc {
                kind: s("linux"),
                netns: Some(s("n")),
                punt_per_sec: Some(1),
                punt_burst: Some(1),
                stale_secs: Some(1),
                migrate_netns: Some(s("m")),
            }),
        }],
        msrs: vec![MsrDoc {
            vr: s("v"),
            active: Some(1),
            flows: Some(1),
            idle_ms: Some(1),
            fail_ms: Some(1),
            policy: Some(MsrPolicyDoc {
                on_above_pps: Some(1),
                off_below_pps: Some(1),
                hold_ms: Some(1),
                min_active: Some(1),
            }),
        }],
    }
}

#[test]
fn the_model_has_exactly_the_keys_the_parser_accepts() {
    let doc = serde_json::to_value(every_field()).unwrap();
    let vr = &doc["vrs"][0];
    let sw = &doc["switches"][0];
    let port = |kind: &str| {
        doc["ports"].as_array().unwrap().iter().find(|p| p["kind"] == kind).unwrap().clone()
    };
    let vr_probe = |inner: &str| format!("vrs:\n  - {{ name: v, {inner} }}\n");
    let sw_probe = |inner: &str| format!("switches:\n  - {{ name: s, {inner} }}\n");
    let port_probe = |kind: &str| format!("ports:\n  - {{ name: p, kind: {kind}, zz: 1 }}\n");
    let sections: Vec<(&str, Json, String)> = vec![
        ("top", doc.clone(), s("zz: 1\n")),
        ("metrics", doc["metrics"].clone(), s("metrics: { zz: 1 }\n")),
        ("ingress_queues", doc["ingress_queues"].clone(), s("ingress_queues: { zz: 1 }\n")),
        ("migration", doc["migration"].clone(), s("migration: { zz: 1 }\n")),
        ("hosts[]", doc["hosts"][0].clone(), s("hosts:\n  - { zz: 1 }\n")),
        ("ports[] mem", port("mem"), port_probe("mem")),
        ("ports[] memif", port("memif"), port_probe("memif")),
        ("ports[] afxdp", port("afxdp"), port_probe("afxdp")),
        ("ports[] afpacket", port("afpacket"), port_probe("afpacket")),
        ("ports[] tap", port("tap"), port_probe("tap")),
        ("ports[] vhost-user", port("vhost-user"), port_probe("vhost-user")),
        (
            "ports[].impair",
            port("mem")["impair"].clone(),
            s("ports:\n  - { name: p, kind: mem, impair: { zz: 1 } }\n"),
        ),
        (
            "ports[].impair.loss",
            port("mem")["impair"]["loss"].clone(),
            s("ports:\n  - { name: p, kind: mem, impair: { loss: { zz: 1 } } }\n"),
        ),
        ("switches[]", sw.clone(), s("switches:\n  - { zz: 1 }\n")),
        ("members[]", sw["members"][0].clone(), sw_probe("members: [{ zz: 1 }]")),
        ("static_macs[]", sw["static_macs"][0].clone(), sw_probe("static_macs: [{ zz: 1 }]")),
        ("vrs[]", vr.clone(), s("vrs:\n  - { zz: 1 }\n")),
        ("interfaces[]", vr["interfaces"][0].clone(), vr_probe("interfaces: [{ zz: 1 }]")),
        ("routes[]", vr["routes"][0].clone(), vr_probe("routes: [{ zz: 1 }]")),
        ("neighbors[]", vr["neighbors"][0].clone(), vr_probe("neighbors: [{ zz: 1 }]")),
        ("tables[]", vr["tables"][0].clone(), vr_probe("tables: [{ zz: 1 }]")),
        (
            "next_hops[]",
            vr["tables"][0]["next_hops"][0].clone(),
            vr_probe("tables: [{ file: f, next_hops: [{ zz: 1 }] }]"),
        ),
        ("limits", vr["limits"].clone(), vr_probe("limits: { zz: 1 }")),
        ("reservation", vr["reservation"].clone(), vr_probe("reservation: { zz: 1 }")),
        (
            "control_plane",
            vr["control_plane"].clone(),
            vr_probe("control_plane: { kind: linux, zz: 1 }"),
        ),
        ("msrs[]", doc["msrs"][0].clone(), s("msrs:\n  - { zz: 1 }\n")),
        (
            "msrs[].policy",
            doc["msrs"][0]["policy"].clone(),
            s("vrs:\n  - { name: v, replicas: 2 }\nmsrs:\n  - { vr: v, policy: { zz: 1 } }\n"),
        ),
    ];
    for (section, model, probe) in sections {
        assert_eq!(
            keys(&model),
            parser_keys(&probe),
            "{section}: the model's keys vs the parser's"
        );
    }
}

#[test]
fn a_bad_value_gets_the_parsers_error_at_its_field() {
    let dir = table_dir("bad");
    let mut doc = representative();
    doc.vrs[1].interfaces[0].mac = s("02:00:00:00:03:zz");
    let e = doc.build("gen.yaml", &dir).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert_eq!((e.file(), e.field()), ("gen.yaml", "vrs[1].interfaces[0].mac"));
    assert_eq!(e.value(), Some("02:00:00:00:03:zz"));
    // The position is the value's in the generated text.
    let text = doc.to_yaml();
    let line = text.lines().nth(e.line() - 1).unwrap();
    assert_eq!(&line[e.column() - 1..][..19], "\"02:00:00:00:03:zz\"", "{e}\n{text}");
    assert!(e.to_string().starts_with(&format!("gen.yaml:{}:", e.line())), "{e}");

    let mut doc = representative();
    doc.ports[0].kind = PortKindDoc::Mem { ring: Some(1000) };
    let e = doc.build("gen.yaml", &dir).unwrap_err();
    assert_eq!((e.field(), e.message()), ("ports[0].ring", "ring size 1000 is not a power of two"));

    let mut doc = representative();
    doc.vrs[0].reservation.as_mut().unwrap().packets = Some(10);
    let e = doc.build("gen.yaml", &dir).unwrap_err();
    assert_eq!(e.field(), "vrs[0].reservation.time_us");
    assert_eq!(e.message(), "a reservation is packets or time_us per period, not both");

    let mut doc = representative();
    doc.vrs[1].name = s("vr1");
    let e = doc.build("gen.yaml", &dir).unwrap_err();
    assert_eq!(e.field(), "vrs[1].name");
    assert!(e.message().starts_with("duplicate VR name \"vr1\""), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}
