//! `routeplex demo`, the README's first command: what it runs is said before it runs, and
//! every VR forwards what it was offered except the frames broken on purpose, each dropped
//! under its own reason. A second of traffic each: a run in which the OS kept the worker off
//! its CPU for a quarter second (seen in CI beside other tests) still forwards.

use std::process::Command;

/// The reasons of the frames the demo breaks on purpose (TTL 1, a bad IPv4 checksum, a
/// loopback source, a class E destination), a quarter of the 4 % each.
const INJECTED: [&str; 4] =
    ["ttl_expired", "ip4_bad_checksum", "martian_source", "martian_destination"];

fn demo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_routeplex"))
        .arg("demo")
        .args(args)
        .output()
        .expect("run routeplex demo")
}

/// Checks one VR's figures: something forwarded, nothing lost unaccounted, each injected
/// reason about 1 % of what it was offered, and no other drop but a full ring's.
fn check_vr(name: &str, offered: u64, forwarded: u64, drops: &[(String, u64)], all: &str) {
    let dropped: u64 = drops.iter().map(|(_, n)| n).sum();
    assert!(forwarded > 0, "{name} forwarded nothing:\n{all}");
    assert!(
        forwarded + dropped <= offered,
        "{name} forwarded and dropped more than offered:\n{all}"
    );
    for reason in INJECTED {
        let n = drops.iter().find(|(r, _)| r == reason).map_or(0, |(_, n)| *n);
        let share = n as f64 / offered as f64;
        assert!(
            (0.005..0.015).contains(&share),
            "{name}: {reason} {n} of {offered} offered:\n{all}"
        );
    }
    for (r, _) in drops {
        assert!(INJECTED.contains(&r.as_str()) || r == "tx_full", "{name} dropped for {r}:\n{all}");
    }
}

#[test]
fn the_demo_says_what_it_runs_first_then_what_each_vr_did() {
    let o = demo(&["--seconds", "1"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}{out}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("routeplex demo: 4 VRs on 2 in-memory ports, 1 s"), "{out}");
    assert!(lines[1].starts_with("routes: "), "{out}");
    assert!(lines[2].starts_with("placement: "), "{out}");
    let rows: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("vr-")).collect();
    assert_eq!(rows.len(), 4, "{out}");
    for row in rows {
        // VR, IPv4 routes, IPv6 routes, offered, forwarded, dropped, in flight, Mpps, then
        // the reasons as `name count, name count`.
        let cols: Vec<&str> = row.split_whitespace().collect();
        let num = |i: usize| cols[i].replace(',', "").parse::<u64>().unwrap();
        let drops: Vec<(String, u64)> = cols[8..]
            .join(" ")
            .split(", ")
            .filter_map(|r| {
                let (name, n) = r.rsplit_once(' ')?;
                Some((name.to_string(), n.replace(',', "").parse().ok()?))
            })
            .collect();
        assert!(num(1) > 0 && num(2) > 0, "{row}: no routes\n{out}");
        assert_eq!(drops.iter().map(|(_, n)| n).sum::<u64>(), num(5), "{row}\n{out}");
        check_vr(cols[0], num(3), num(4), &drops, &out);
    }
}

#[test]
fn the_demo_in_json_gives_the_same_figures() {
    let o = demo(&["--seconds", "1", "--json"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}{out}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let vrs = j["vrs"].as_array().expect("vrs");
    assert_eq!(vrs.len(), 4, "{j}");
    for v in vrs {
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k}: {j}"));
        let drops: Vec<(String, u64)> = v["dropped"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(r, n)| (r.clone(), n.as_u64().unwrap()))
            .collect();
        assert!(n("routes_v4") > 0 && n("routes_v6") > 0, "{j}");
        check_vr(v["name"].as_str().unwrap(), n("offered"), n("forwarded"), &drops, &out);
    }
    assert!(j["total_mpps"].as_f64().is_some_and(|m| m > 0.0), "{j}");
}

#[test]
fn a_bad_duration_is_named() {
    for s in ["0", "-1", "3601"] {
        let o = demo(&[&format!("--seconds={s}")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--seconds {s} was accepted");
        assert!(err.contains("--seconds"), "--seconds {s}: {err}");
    }
}
