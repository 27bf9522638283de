//! `routeplex status` and `routeplex route` as tables for people: workers, VRs and ports;
//! routes (`--json` prints the API's answer as it is, for machines).

use std::fmt::Write;

use control::api;

pub use lab::demo::group as thousands;

/// Bytes in binary units with one decimal: 2968371 → "2.8 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Rows as columns padded to their widest cell (the first column left-aligned, the rest right).
fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let w: Vec<usize> = (0..cols)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<width$}", width = w[c]);
            } else if c + 1 == r.len() && cell.starts_with(char::is_alphabetic) {
                let _ = write!(line, "  {cell}");
            } else {
                let _ = write!(line, "  {cell:>width$}", width = w[c]);
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The status answer as text: a line for the host, then workers, VRs and ports.
pub fn render(s: &api::Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "state {}, up {:.1} s, memory {}",
        s.state,
        s.uptime_s,
        bytes(s.memory.rss_bytes)
    );
    let mut rows =
        vec![["worker", "cpu", "idle", "rounds", "sleeps", "vrs"].map(String::from).to_vec()];
    for w in &s.workers {
        rows.push(vec![
            w.index.to_string(),
            w.cpu.map_or_else(|| "-".into(), |c| c.to_string()),
            w.idle.clone(),
            thousands(w.rounds),
            thousands(w.sleeps),
            w.vrs.join(" "),
        ]);
    }
    out.push('\n');
    table(&mut out, &rows);
    vrs(&mut out, s);
    replicated(&mut out, s);
    msrs(&mut out, s);
    ports(&mut out, s);
    switches(&mut out, s);
    out
}

/// One row per VR: traffic, drops (the largest reason named), routes, FIB, neighbors.
fn vrs(out: &mut String, s: &api::Status) {
    let drop_names: Vec<&str> = dataplane::VrDrop::ALL.iter().map(|d| d.name()).collect();
    let mut rows = vec![[
        "vr",
        "worker",
        "received",
        "forwarded",
        "dropped",
        "routes",
        "fib",
        "neighbors",
        "top drop",
    ]
    .map(String::from)
    .to_vec()];
    for v in &s.vrs {
        let c = &v.counters;
        let get = |k: &str| c.get(k).copied().unwrap_or(0);
        let mut dropped = 0;
        let mut top: Option<(&str, u64)> = None;
        for (k, &n) in c.iter().filter(|(k, _)| drop_names.contains(&k.as_str())) {
            dropped += n;
            if n > 0 && top.is_none_or(|(_, m)| n > m) {
                top = Some((k, n));
            }
        }
        let routes: u64 = v.routes.iter().flat_map(|r| r.values()).sum();
        let kernel = v.routes.as_ref().and_then(|r| r.get("kernel")).copied().unwrap_or(0);
        rows.push(vec![
            v.name.clone(),
            v.worker.to_string(),
            thousands(get("rx_packets")),
            thousands(get("forwarded")),
            thousands(dropped),
            // Routes a control plane's daemons made, apart: the rest follow the topology.
            match kernel {
                0 => thousands(routes),
                k => format!("{} (kernel {})", thousands(routes), thousands(k)),
            },
            v.fib.as_ref().map_or_else(|| "-".into(), |f| bytes(f.bytes as u64)),
            format!("{}/{}", v.neighbors.used, v.neighbors.size),
            top.map(|(k, n)| format!("{k} {}", thousands(n))).unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push('\n');
    table(out, &rows);
    let held: Vec<String> = (s.vrs.iter())
        .flat_map(|v| {
            v.interfaces.iter().filter(|i| i.held).map(|i| format!("{}:{}", v.name, i.name))
        })
        .collect();
    if !held.is_empty() {
        // A restarted fenced fleet host's (control::hold): until `interface_set up`.
        let _ = writeln!(out, "held down since the restart: {}", held.join(" "));
    }
}

/// Replicated VRs: the logical VR, its counters the sum of its replicas' (listed above).
fn replicated(out: &mut String, s: &api::Status) {
    let mut rows = vec![["replicated vr", "replicas", "workers", "rx", "forwarded", "per replica"]
        .map(String::from)
        .to_vec()];
    for v in &s.replicated {
        let (workers, per): (Vec<String>, Vec<String>) =
            v.instances.iter().map(|i| (i.worker.to_string(), thousands(i.forwarded))).unzip();
        let get = |k: &str| v.counters.get(k).copied().unwrap_or(0);
        rows.push(vec![
            v.name.clone(),
            v.replicas.to_string(),
            workers.join(","),
            thousands(get("rx_packets")),
            thousands(get("forwarded")),
            per.join(" + "),
        ]);
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

/// MSRs: one row per back-end, its state and what it carried.
fn msrs(out: &mut String, s: &api::Status) {
    let mut rows =
        vec![["msr", "back-end", "state", "pinned", "refused", "forwarded", "front end"]
            .map(String::from)
            .to_vec()];
    for m in &s.msrs {
        let front = match m.front_end {
            true => format!("offered {}", thousands(m.offered)),
            false => "not taken".to_string(),
        };
        for b in &m.backends {
            rows.push(vec![
                m.name.clone(),
                b.replica.clone(),
                b.state.clone(),
                thousands(u64::from(b.pinned)),
                thousands(b.refused),
                thousands(b.forwarded),
                front.clone(),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

/// Ports, then each port's backend counters where any is not zero (vxlan: drops by reason,
/// datagrams).
fn ports(out: &mut String, s: &api::Status) {
    let mut rows =
        vec![["port", "rx", "tx", "rx_dropped", "tx_full", "status"].map(String::from).to_vec()];
    for p in &s.ports {
        rows.push(vec![
            p.name.clone(),
            thousands(p.rx),
            thousands(p.tx),
            thousands(p.rx_dropped),
            thousands(p.tx_full),
            match &p.mode {
                Some(mode) => format!("{} ({mode})", p.status),
                None => p.status.clone(),
            },
        ]);
    }
    out.push('\n');
    table(out, &rows);
    for p in &s.ports {
        let nonzero: Vec<String> = p
            .backend
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, &n)| format!("{k} {}", thousands(n)))
            .collect();
        if !nonzero.is_empty() {
            let _ = writeln!(out, "  {}: {}", p.name, nonzero.join(", "));
        }
    }
}

/// Switches: one row per member, with the drops counted against it.
fn switches(out: &mut String, s: &api::Status) {
    let mut rows = vec![["switch", "member", "dropped", "top drop"].map(String::from).to_vec()];
    for sw in &s.switches {
        for m in &sw.members {
            let total: u64 = m.drops.values().sum();
            let top = m.drops.iter().max_by_key(|(_, &n)| n);
            rows.push(vec![
                sw.name.clone(),
                m.port.clone(),
                thousands(total),
                top.map(|(k, &n)| format!("{k} {}", thousands(n))).unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

/// `route list` as a table: one row per route, best first per prefix (`*` marks the one the
/// FIB uses), where it goes in the words `route add` takes.
pub fn render_routes(l: &api::RouteList) -> String {
    let mut rows = vec![["prefix", "source", "best", "target"].map(String::from).to_vec()];
    for r in &l.routes {
        let target = match (&r.via, &r.interface, r.blackhole, r.local) {
            (Some(gw), Some(i), ..) => format!("via {gw} dev {i}"),
            (Some(gw), None, ..) => format!("via {gw}"),
            (None, Some(i), ..) => format!("dev {i}"),
            (None, None, true, _) => "blackhole".into(),
            (None, None, false, true) => "local".into(),
            (None, None, false, false) => "-".into(),
        };
        let best = if r.best { "*" } else { "" };
        rows.push(vec![r.prefix.to_string(), r.source.clone(), best.into(), target]);
    }
    let mut out = format!("vr {}: {} route(s)\n", l.vr, l.routes.len());
    table(&mut out, &rows);
    out
}

/// What a `route add`/`replace`/`del` batch did, as one line.
pub fn render_applied(a: &api::RoutesApplied) -> String {
    format!(
        "added {}, replaced {}, deleted {}; FIB changes {}, new next hops {}, generation {}/{} (IPv4/IPv6)\n",
        a.added,
        a.replaced,
        a.deleted,
        a.fib_changes,
        a.new_next_hops,
        a.generation[0],
        a.generation[1]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(kv: &[(&str, u64)]) -> api::Counts {
        kv.iter().map(|(k, n)| (k.to_string(), *n)).collect()
    }

    fn status() -> api::Status {
        api::Status {
            uptime_s: 3.5,
            workers: Vec::new(),
            vrs: Vec::new(),
            ports: Vec::new(),
            switches: Vec::new(),
            replicated: Vec::new(),
            msrs: Vec::new(),
            state: "running".into(),
            memory: api::Memory { rss_bytes: 10485760 },
        }
    }

    fn vr(name: &str, worker: usize, c: &[(&str, u64)]) -> api::VrRow {
        api::VrRow {
            name: name.into(),
            worker,
            counters: counts(c),
            over_budget: 0,
            reservation: None,
            pending_reservation: None,
            batch: 32,
            neighbors: api::NeighborUse { used: 1, size: 1024, queued: 0 },
            interfaces: Vec::new(),
            first_sent_ns: None,
            last_sent_ns: None,
            routes: None,
            fib: None,
            control_plane: None,
        }
    }

    fn port(name: &str, rx: u64, tx: u64, mode: Option<&str>, b: &[(&str, u64)]) -> api::PortRow {
        api::PortRow {
            name: name.into(),
            rx,
            tx,
            rx_dropped: 0,
            tx_full: 0,
            drops: counts(&[]),
            status: "up".into(),
            burst: 32,
            mode: mode.map(String::from),
            backend: counts(b),
            impair: None,
        }
    }

    #[test]
    fn numbers_read_easily() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(18524113), "18,524,113");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2968371), "2.8 MiB");
    }

    #[test]
    fn a_status_answer_renders_as_tables() {
        let mut s = status();
        s.workers.push(api::WorkerRow {
            index: 0,
            cpu: Some(1),
            pinned: true,
            rounds: 1234567,
            idle_rounds: 0,
            spare_ns: 0,
            idle: "adaptive".into(),
            sleeps: 3,
            naps: 0,
            slept_s: 0.0,
            vrs: vec!["a".into()],
            stages: api::Stages {
                rx: api::Stage { packets: 0, bursts: 0, avg_burst: 0.0 },
                vr: api::Stage { packets: 0, bursts: 0, avg_burst: 0.0 },
                tx: api::Stage { packets: 0, bursts: 0, avg_burst: 0.0 },
            },
        });
        let mut a = vr(
            "a",
            0,
            &[("rx_packets", 2000), ("forwarded", 1500), ("no_route", 400), ("ttl_expired", 100)],
        );
        a.routes = Some(counts(&[("connected", 2), ("static", 1)]));
        a.fib = Some(api::FibRow { ipv4: 3, ipv6: 0, bytes: 4096, next_hops: 1 });
        s.vrs.push(a);
        s.ports.push(port("p0", 2000, 1500, None, &[]));
        let mut vx = port(
            "vx",
            9,
            5,
            Some("udp socket"),
            &[("short", 2), ("bad_flags", 0), ("tx_datagrams", 1500)],
        );
        vx.rx_dropped = 2;
        s.ports.push(vx);
        s.switches.push(api::SwitchRow {
            name: "sw".into(),
            counters: serde_json::from_str(
                r#"{"rx":0,"forwarded":0,"flooded":0,"flood_copies":0,"miss":0,"learned":0,
                "moved":0,"move_refused":0,"handed_back":0,"learn_limited":0,"aged":0,"snooped":0,
                "snooped_copies":0,"joins":0,"leaves":0,"expired":0,"queries":0,"groups_full":0}"#,
            )
            .unwrap(),
            drops: counts(&[]),
            members: vec![
                api::MemberRow { port: "h1".into(), drops: counts(&[]) },
                api::MemberRow { port: "h2".into(), drops: counts(&[("tx_full", 7), ("runt", 2)]) },
            ],
            groups: 0,
        });
        let t = render(&s);
        assert!(t.contains("1,234,567"), "{t}");
        assert!(t.contains("no_route 400"), "{t}");
        let a = t.lines().find(|l| l.starts_with("a ")).unwrap();
        assert!(
            a.contains("2,000") && a.contains("1,500") && a.contains("500") && a.contains("1/1024"),
            "{t}"
        );
        assert!(t.contains("4.0 KiB"), "{t}");
        assert!(t.contains("  vx: short 2, tx_datagrams 1,500\n"), "{t}");
        assert!(t.contains("up (udp socket)"), "{t}");
        let h2 = t.lines().find(|l| l.starts_with("sw ") && l.contains("h2")).unwrap();
        assert!(h2.contains(" 9 ") && h2.contains("tx_full 7"), "{t}");
        assert!(!t.contains("replicated vr"), "no replicated VR, no table: {t}");
        assert!(a.contains(" 3 "), "{t}");
        s.vrs[0].routes.as_mut().unwrap().insert("kernel".into(), 1200);
        let t = render(&s);
        assert!(t.contains("1,203 (kernel 1,200)"), "{t}");
    }

    #[test]
    fn held_interfaces_are_listed_under_the_vrs() {
        let mut s = status();
        let mut r = vr("r", 0, &[]);
        let row = |name: &str, up: bool, held: bool| api::InterfaceRow {
            name: name.into(),
            mtu: 1500,
            up,
            held,
        };
        r.interfaces = vec![row("a", false, true), row("b", false, false), row("c", true, false)];
        s.vrs.push(r);
        let t = render(&s);
        assert!(t.contains("\nheld down since the restart: r:a\n"), "{t}");
        s.vrs[0].interfaces[0].held = false;
        assert!(!render(&s).contains("held"), "{}", render(&s));
    }

    #[test]
    fn a_replicated_vr_shows_as_its_replicas_and_their_sum() {
        let mut s = status();
        s.vrs.push(vr("p#0", 0, &[("rx_packets", 30), ("forwarded", 30)]));
        s.vrs.push(vr("p#1", 1, &[("rx_packets", 12), ("forwarded", 12)]));
        let inst = |r: usize, n: u64| api::ReplicaRow {
            name: format!("p#{r}"),
            replica: r,
            worker: r,
            rx_packets: n,
            forwarded: n,
        };
        s.replicated.push(api::ReplicatedRow {
            name: "p".into(),
            replicas: 2,
            running: 2,
            instances: vec![inst(0, 30), inst(1, 12)],
            counters: counts(&[("rx_packets", 42), ("forwarded", 42)]),
            fib: None,
        });
        let t = render(&s);
        let p = t.lines().find(|l| l.starts_with("p ")).unwrap_or_else(|| panic!("{t}"));
        assert!(p.contains("0,1") && p.contains("42") && p.contains("30 + 12"), "{t}");
        assert!(
            t.lines().any(|l| l.starts_with("p#0 ")) && t.lines().any(|l| l.starts_with("p#1 ")),
            "{t}"
        );
    }

    #[test]
    fn an_msr_shows_each_back_end_state() {
        let mut s = status();
        let b = |backend: usize, state: &str, pinned: u32, refused: u64, forwarded: u64| {
            api::BackendRow {
                backend,
                replica: format!("m#{backend}"),
                worker: Some(backend),
                state: state.into(),
                pinned,
                refused,
                detect_ns: 0,
                rx_packets: forwarded,
                forwarded,
            }
        };
        s.msrs.push(api::MsrRow {
            name: "m".into(),
            front_end: true,
            states: counts(&[("active", 1), ("draining", 0), ("off", 0), ("failed", 1)]),
            offered: 5000,
            failures: 1,
            backends: vec![b(0, "active", 12, 0, 4000), b(1, "failed", 0, 37, 963)],
        });
        let t = render(&s);
        let b1 = t.lines().find(|l| l.contains("m#1")).unwrap_or_else(|| panic!("{t}"));
        assert!(
            b1.contains("failed") && b1.contains(" 37 ") && b1.contains("offered 5,000"),
            "{t}"
        );
        let b0 = t.lines().find(|l| l.contains("m#0")).unwrap();
        assert!(b0.contains("active") && b0.contains("4,000"), "{t}");
    }

    #[test]
    fn routes_list_as_a_table_with_local_addresses_named_so() {
        let row = |prefix: &str, source: &str, best: bool| api::RouteRow {
            prefix: prefix.parse().unwrap(),
            source: source.into(),
            best,
            via: None,
            interface: None,
            blackhole: false,
            local: false,
        };
        let mut local = row("10.0.1.1/32", "local", true);
        local.local = true;
        let mut conn = row("10.0.1.0/24", "connected", true);
        conn.interface = Some("e0".into());
        let mut api_r = row("10.9.0.0/16", "api", true);
        api_r.via = Some("10.0.1.2".parse().unwrap());
        let mut stat = row("10.9.0.0/16", "static", false);
        stat.blackhole = true;
        let l = api::RouteList { vr: "a".into(), routes: vec![local, conn, api_r, stat] };
        let t = render_routes(&l);
        let line = |p: &str, src: &str| {
            t.lines()
                .find(|l| l.starts_with(p) && l.contains(src))
                .unwrap_or_else(|| panic!("no {p} {src}: {t}"))
                .to_string()
        };
        assert!(t.starts_with("vr a: 4 route(s)\n"), "{t}");
        assert!(line("10.0.1.1/32", "local").ends_with("*  local"), "{t}");
        assert!(line("10.0.1.0/24", "connected").ends_with("dev e0"), "{t}");
        assert!(line("10.9.0.0/16", "api").ends_with("*  via 10.0.1.2"), "{t}");
        let s = line("10.9.0.0/16", "static");
        assert!(s.ends_with("blackhole") && !s.contains('*'), "{t}");
        let a = render_applied(&api::RoutesApplied {
            added: 1,
            replaced: 0,
            deleted: 0,
            fib_changes: 1,
            new_next_hops: 1,
            generation: [3, 0],
        });
        assert_eq!(
            a,
            "added 1, replaced 0, deleted 0; FIB changes 1, new next hops 1, generation 3/0 (IPv4/IPv6)\n"
        );
    }
}
