//! `routeplex status` as tables for people: workers, VRs and ports (`--json` prints the API's
//! answer as it is, for machines).

use std::fmt::Write;

use serde_json::Value;

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

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
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
pub fn render(s: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "state {}, up {:.1} s, memory {}",
        s["state"].as_str().unwrap_or("?"),
        s["uptime_s"].as_f64().unwrap_or(0.0),
        bytes(num(&s["memory"]["rss_bytes"]))
    );
    workers(&mut out, s);
    vrs(&mut out, s);
    replicated(&mut out, s);
    msrs(&mut out, s);
    ports(&mut out, s);
    switches(&mut out, s);
    out
}

/// The workers: each one's CPU, idle mode, rounds, sleeps and VRs.
fn workers(out: &mut String, s: &Value) {
    let mut rows =
        vec![["worker", "cpu", "idle", "rounds", "sleeps", "vrs"].map(String::from).to_vec()];
    for w in s["workers"].as_array().into_iter().flatten() {
        let vrs: Vec<&str> =
            w["vrs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        rows.push(vec![
            w["index"].to_string(),
            w["cpu"].to_string(),
            w["idle"].as_str().unwrap_or("").to_string(),
            thousands(num(&w["rounds"])),
            thousands(num(&w["sleeps"])),
            vrs.join(" "),
        ]);
    }
    out.push('\n');
    table(out, &rows);
}

/// The VRs: traffic, drops (the top reason), routes, FIB memory and neighbors.
fn vrs(out: &mut String, s: &Value) {
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
    for v in s["vrs"].as_array().into_iter().flatten() {
        let c = &v["counters"];
        let mut dropped = 0;
        let mut top: Option<(&str, u64)> = None;
        for (k, n) in c.as_object().into_iter().flatten() {
            if drop_names.contains(&k.as_str()) {
                let n = num(n);
                dropped += n;
                if n > 0 && top.is_none_or(|(_, m)| n > m) {
                    top = Some((k, n));
                }
            }
        }
        let routes: u64 = v["routes"].as_object().into_iter().flatten().map(|(_, n)| num(n)).sum();
        let fib = &v["fib"];
        let n = &v["neighbors"];
        rows.push(vec![
            v["name"].as_str().unwrap_or("?").to_string(),
            v["worker"].to_string(),
            thousands(num(&c["rx_packets"])),
            thousands(num(&c["forwarded"])),
            thousands(dropped),
            // Routes a control plane's daemons made, apart: the rest follow the topology.
            match num(&v["routes"]["kernel"]) {
                0 => thousands(routes),
                k => format!("{} (kernel {})", thousands(routes), thousands(k)),
            },
            if fib.is_null() { "-".into() } else { bytes(num(&fib["bytes"])) },
            format!("{}/{}", num(&n["used"]), num(&n["size"])),
            top.map(|(k, n)| format!("{k} {}", thousands(n))).unwrap_or_else(|| "-".into()),
        ]);
    }
    out.push('\n');
    table(out, &rows);
}

/// Replicated VRs: the logical VR, its counters the sum of its replicas' (listed above).
fn replicated(out: &mut String, s: &Value) {
    let logical = s["replicated"].as_array().into_iter().flatten();
    let mut rows = vec![["replicated vr", "replicas", "workers", "rx", "forwarded", "per replica"]
        .map(String::from)
        .to_vec()];
    for v in logical {
        let inst = v["instances"].as_array().into_iter().flatten();
        let (workers, per): (Vec<String>, Vec<String>) =
            inst.map(|i| (i["worker"].to_string(), thousands(num(&i["forwarded"])))).unzip();
        rows.push(vec![
            v["name"].as_str().unwrap_or("?").to_string(),
            num(&v["replicas"]).to_string(),
            workers.join(","),
            thousands(num(&v["counters"]["rx_packets"])),
            thousands(num(&v["counters"]["forwarded"])),
            per.join(" + "),
        ]);
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

/// MSRs: one row per back-end, its state and what it carried.
fn msrs(out: &mut String, s: &Value) {
    let mut rows =
        vec![["msr", "back-end", "state", "pinned", "refused", "forwarded", "front end"]
            .map(String::from)
            .to_vec()];
    for m in s["msrs"].as_array().into_iter().flatten() {
        let front = match m["front_end"].as_bool() {
            Some(true) => format!("offered {}", thousands(num(&m["offered"]))),
            _ => "not taken".to_string(),
        };
        for b in m["backends"].as_array().into_iter().flatten() {
            rows.push(vec![
                m["name"].as_str().unwrap_or("?").to_string(),
                b["replica"].as_str().unwrap_or("?").to_string(),
                b["state"].as_str().unwrap_or("?").to_string(),
                thousands(num(&b["pinned"])),
                thousands(num(&b["refused"])),
                thousands(num(&b["forwarded"])),
                front.clone(),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

/// The ports, then the backends' own non-zero counters.
fn ports(out: &mut String, s: &Value) {
    let mut rows =
        vec![["port", "rx", "tx", "rx_dropped", "tx_full", "status"].map(String::from).to_vec()];
    for p in s["ports"].as_array().into_iter().flatten() {
        rows.push(vec![
            p["name"].as_str().unwrap_or("?").to_string(),
            thousands(num(&p["rx"])),
            thousands(num(&p["tx"])),
            thousands(num(&p["rx_dropped"])),
            thousands(num(&p["tx_full"])),
            match p["mode"].as_str() {
                Some(mode) => format!("{} ({mode})", p["status"].as_str().unwrap_or("?")),
                None => p["status"].as_str().unwrap_or("?").to_string(),
            },
        ]);
    }
    out.push('\n');
    table(out, &rows);
    // The backend's own counters (vxlan: drops by reason, datagrams), where any is non-zero.
    for p in s["ports"].as_array().into_iter().flatten() {
        let Some(b) = p["backend"].as_object() else { continue };
        let nonzero: Vec<String> = b
            .iter()
            .filter(|(_, n)| num(n) > 0)
            .map(|(k, n)| format!("{k} {}", thousands(num(n))))
            .collect();
        if !nonzero.is_empty() {
            out.push_str(&format!(
                "  {}: {}\n",
                p["name"].as_str().unwrap_or("?"),
                nonzero.join(", ")
            ));
        }
    }
}

/// Switches: one row per member, with the drops counted against it.
fn switches(out: &mut String, s: &Value) {
    let mut rows = vec![["switch", "member", "dropped", "top drop"].map(String::from).to_vec()];
    for sw in s["switches"].as_array().into_iter().flatten() {
        let name = sw["name"].as_str().unwrap_or("?");
        for m in sw["members"].as_array().into_iter().flatten() {
            let d = m["drops"].as_object();
            let total: u64 = d.into_iter().flatten().map(|(_, n)| num(n)).sum();
            let top = d.into_iter().flatten().max_by_key(|(_, n)| num(n));
            rows.push(vec![
                name.to_string(),
                m["port"].as_str().unwrap_or("?").to_string(),
                thousands(total),
                top.map(|(k, n)| format!("{k} {}", thousands(num(n))))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
    }
    if rows.len() > 1 {
        out.push('\n');
        table(out, &rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = serde_json::json!({
            "state": "running", "uptime_s": 3.5, "memory": { "rss_bytes": 10485760 },
            "workers": [{ "index": 0, "cpu": 1, "idle": "adaptive", "rounds": 1234567, "sleeps": 3, "vrs": ["a"] }],
            "vrs": [{ "name": "a", "worker": 0,
                      "counters": { "rx_packets": 2000, "forwarded": 1500, "no_route": 400, "ttl_expired": 100 },
                      "routes": { "connected": 2, "static": 1 }, "fib": { "bytes": 4096 },
                      "neighbors": { "used": 1, "size": 1024 } }],
            "ports": [{ "name": "p0", "rx": 2000, "tx": 1500, "rx_dropped": 0, "tx_full": 0, "status": "up" },
                      { "name": "vx", "rx": 9, "tx": 5, "rx_dropped": 2, "tx_full": 0, "status": "up", "mode": "udp socket",
                        "backend": { "short": 2, "bad_flags": 0, "tx_datagrams": 1500 } }],
            "switches": [{ "name": "sw", "members": [
                { "port": "h1", "drops": {} },
                { "port": "h2", "drops": { "tx_full": 7, "runt": 2 } }] }],
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
        let mut s = s;
        s["vrs"][0]["routes"]["kernel"] = serde_json::json!(1200);
        let t = render(&s);
        assert!(t.contains("1,203 (kernel 1,200)"), "{t}");
    }

    #[test]
    fn a_replicated_vr_shows_as_its_replicas_and_their_sum() {
        let s = serde_json::json!({
            "workers": [], "ports": [],
            "vrs": [{ "name": "p#0", "worker": 0, "counters": { "rx_packets": 30, "forwarded": 30 } },
                    { "name": "p#1", "worker": 1, "counters": { "rx_packets": 12, "forwarded": 12 } }],
            "replicated": [{ "name": "p", "replicas": 2,
                             "instances": [{ "name": "p#0", "worker": 0, "forwarded": 30 },
                                           { "name": "p#1", "worker": 1, "forwarded": 12 }],
                             "counters": { "rx_packets": 42, "forwarded": 42 } }],
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
        let s = serde_json::json!({
            "workers": [], "ports": [], "vrs": [],
            "msrs": [{ "name": "m", "front_end": true, "offered": 5000, "failures": 1,
                       "states": { "active": 1, "draining": 0, "off": 0, "failed": 1 },
                       "backends": [
                           { "backend": 0, "replica": "m#0", "state": "active", "pinned": 12, "refused": 0, "forwarded": 4000 },
                           { "backend": 1, "replica": "m#1", "state": "failed", "pinned": 0, "refused": 37, "forwarded": 963 }] }],
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
}
