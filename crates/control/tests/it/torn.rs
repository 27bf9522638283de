//! Torn writes (issue 27, item 2): a real journal, written by a node as the daemon writes it
//! through a seeded mix of changes (route batches of 1, 2, 257 and random sizes, adds,
//! replaces, deletes, `interface_set`, `reserve`, `apply` of edited texts, `vr_add`,
//! `vr_remove`), is cut at every record boundary and at seeded random offsets, and has
//! random bytes flipped; then a node starts from it as `up` does. A cut must come back as
//! exactly the acknowledged state the records before the cut made (the torn tail reported
//! and cut off), with forwarding equal to a fresh build of that state; a flipped byte must
//! be refused with an error naming the file and what was kept, never a start with fewer
//! records, never a panic. The checkpoint file is cut and flipped the same way: refused
//! whole, naming the file, and the node comes back from the routes as it would without it;
//! one forged with its checksum made again is found out or replaced by the routes' table.
//!
//! Seeded: the seed is printed; `RPX_TORN_SEED=N` replays one. No root: mem ports only.

use crate::reply_json;
use reply_json::Json;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use control::api::Command;
use control::checkpoint;
use control::journal::{self, Journal, Replayed};
use control::runtime::Options;
use control::{ControlError, Node, Topology};
use fib::synthetic::Rng;
use serde_json::{json, Value};

const FILE: &str = "torn.yaml";

const TEXT: &str = "\
workers: 1
ports:
  - { name: p0, kind: mem }
  - { name: p1, kind: mem }
  - { name: q0, kind: mem }
vrs:
  - name: r
    interfaces:
      - { name: a, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24, \"2001:db8::1/64\"] }
      - { name: b, port: p1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
  - name: s
    interfaces:
      - { name: a, port: q0, mac: 02:00:00:00:02:00, addresses: [10.1.0.1/24] }
";

/// The edited texts `apply` is given: a static route on s; a VR x.
fn edited(k: u64) -> String {
    match k % 2 {
        0 => TEXT.to_string() + "    routes: [{ prefix: 198.51.100.0/24, via: 10.1.0.2 }]\n",
        _ => TEXT.replace("vrs:\n", "  - { name: x0, kind: mem }\nvrs:\n") + X_TEXT,
    }
}

const X_TEXT: &str = "  - name: x
    interfaces:
      - { name: a, port: x0, mac: 02:00:00:00:09:00, addresses: [10.9.0.1/24] }
";

fn seed() -> u64 {
    let s = std::env::var("RPX_TORN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
    });
    eprintln!("torn: seed {s} (RPX_TORN_SEED={s} replays it)");
    s
}

/// A directory of its own, removed on drop (also when the test fails).
struct RunDir(PathBuf);

impl RunDir {
    fn new(tag: &str) -> RunDir {
        let d = std::env::temp_dir().join(format!("rpx-torn-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        RunDir(d)
    }

    /// Only `journal` (and `checkpoint`, when given) in it, as given.
    fn with(&self, journal_bytes: &[u8], ckpt: Option<&[u8]>) -> &Path {
        let _ = std::fs::remove_dir_all(&self.0);
        std::fs::create_dir_all(&self.0).unwrap();
        if !journal_bytes.is_empty() {
            std::fs::write(self.0.join(journal::FILE), journal_bytes).unwrap();
        }
        if let Some(c) = ckpt {
            std::fs::write(self.0.join(checkpoint::FILE), c).unwrap();
        }
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file_topology() -> Topology {
    Topology::parse(TEXT, FILE, Path::new(".")).unwrap()
}

/// What the daemon does at start with run directory `dir`: the journal checked whole, the
/// usable checkpoints, a node from the file, its journal replayed, the tables taking over.
/// The checkpoint's VRs that forwarded otherwise than their routes come back with it.
#[allow(clippy::type_complexity)]
fn start(
    dir: &Path,
) -> Result<(Node, Journal, Replayed, Vec<(String, std::net::IpAddr)>), ControlError> {
    journal::check(dir)?;
    let topo = file_topology();
    let ckpt = checkpoint::usable(dir, &topo.vrs, &topo.table_sums);
    let o = Options::new(1);
    let mut n = Node::start_from(topo, o, 256, &ckpt)?;
    n.set_source(TEXT.into(), FILE.into());
    n.settle()?;
    let (j, rep) = match journal::recover(dir, &mut n) {
        Ok(x) => x,
        Err(e) => {
            n.stop()?;
            return Err(e);
        }
    };
    let wrong = n.take_over()?;
    Ok((n, j, rep, wrong))
}

fn command(v: Value) -> Command {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// Everything the journal promises to bring back, as text: the running topology's text, and
/// per VR its API routes, interfaces (MTU, up) and reservation.
fn state(n: &Node) -> String {
    let st = n.status().unwrap();
    let mut out = format!("text {:?}\n", n.source_text());
    let st_j = st.json();
    let mut vrs: Vec<&Value> = st_j["vrs"].as_array().unwrap().iter().collect();
    vrs.sort_by_key(|v| v["name"].as_str().unwrap().to_string());
    for v in vrs {
        let name = v["name"].as_str().unwrap();
        let ifs: Vec<String> = v["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| format!("{} {} {}", i["name"], i["mtu"], i["up"]))
            .collect();
        out += &format!(
            "vr {name}: {ifs:?} reservation {} {}\n",
            v["reservation"], v["pending_reservation"]
        );
        let t = n.table(name).unwrap();
        for r in t.routes(Some(dataplane::RouteSource::Api), usize::MAX) {
            out += &format!("  {} {:?} {}\n", r.prefix, r.target, r.best);
        }
    }
    out
}

/// Forwarding of every VR of `n` equals that of a node built fresh from its running text and
/// its API routes, looked up at every boundary of both tables.
fn fib_is_a_fresh_builds(n: &Node) {
    let text = n.source_text().unwrap().to_string();
    let o = Options::new(1);
    let mut f = Node::start(Topology::parse(&text, FILE, Path::new(".")).unwrap(), o, 256).unwrap();
    for v in &n.topology().vrs {
        let t = n.table(&v.name).unwrap();
        let routes: Vec<Value> = t
            .routes(Some(dataplane::RouteSource::Api), usize::MAX)
            .iter()
            .map(|r| match r.target {
                dataplane::config::RouteTarget::Via { gateway, .. } => {
                    json!({ "prefix": r.prefix, "via": gateway })
                }
                dataplane::config::RouteTarget::Blackhole => {
                    json!({ "prefix": r.prefix, "blackhole": true })
                }
                dataplane::config::RouteTarget::Iface(i) => {
                    json!({ "prefix": r.prefix, "interface": v.interfaces[usize::from(i)].name })
                }
            })
            .collect();
        if !routes.is_empty() {
            f.execute(command(
                json!({ "cmd": "route_add", "args": { "vr": v.name, "routes": routes } }),
            ))
            .unwrap();
        }
        let fresh = f.table(&v.name).unwrap();
        assert_eq!(t.disagreement(fresh), None, "vr {}: recovered vs fresh", v.name);
        assert_eq!(fresh.disagreement(t), None, "vr {}: fresh vs recovered", v.name);
        assert_eq!(t.fib_prefixes(), fresh.fib_prefixes(), "vr {}", v.name);
    }
    f.stop().unwrap();
}

/// The API routes of `vr` in the history's own model.
type Model = HashMap<String, Vec<String>>;

fn gateway(vr: &str, rng: &mut Rng) -> &'static str {
    match (vr, rng.below(2)) {
        ("r", 0) => "10.0.0.2",
        ("r", _) => "10.0.1.2",
        ("s", _) => "10.1.0.2",
        _ => "10.9.0.2",
    }
}

/// One random change, fitting what runs (`has_x`, the routes of `m`).
fn change(rng: &mut Rng, m: &Model, has_x: bool, serial: &mut u32) -> Command {
    let vrs: Vec<&str> = if has_x { vec!["r", "s", "x"] } else { vec!["r", "s"] };
    let vr = vrs[rng.below(vrs.len() as u64) as usize];
    let have = m.get(vr).cloned().unwrap_or_default();
    match rng.below(12) {
        0..=4 => {
            let n = [1, 2, 257, 1 + rng.below(40)][rng.below(4) as usize];
            let routes: Vec<Value> = (0..n)
                .map(|_| {
                    *serial += 1;
                    let k = *serial;
                    if vr == "r" && k.is_multiple_of(5) {
                        json!({ "prefix": format!("2001:db8:{:x}::/48", 0x100 + k), "via": "2001:db8::2" })
                    } else if k.is_multiple_of(7) {
                        json!({ "prefix": format!("172.{}.{}.{}/32", 16 + (k >> 16) % 16, (k >> 8) & 255, k & 255), "blackhole": true })
                    } else {
                        json!({ "prefix": format!("172.{}.{}.0/24", 16 + (k >> 16) % 16, (k >> 8) & 255), "via": gateway(vr, rng) })
                    }
                })
                .collect();
            command(json!({ "cmd": "route_add", "args": { "vr": vr, "routes": routes } }))
        }
        5 | 6 if !have.is_empty() => {
            let n = 1 + rng.below(have.len() as u64) as usize;
            let start = rng.below((have.len() - n + 1) as u64) as usize;
            let prefixes = &have[start..start + n];
            if rng.below(2) == 0 {
                command(
                    json!({ "cmd": "route_delete", "args": { "vr": vr, "prefixes": prefixes } }),
                )
            } else {
                let routes: Vec<Value> = prefixes
                    .iter()
                    .filter(|p| !p.contains(':'))
                    .map(|p| json!({ "prefix": p, "via": gateway(vr, rng) }))
                    .collect();
                command(json!({ "cmd": "route_replace", "args": { "vr": vr, "routes": routes } }))
            }
        }
        7 => command(json!({ "cmd": "interface_set", "args": {
            "vr": "r", "interface": "b", "mtu": 1280 + rng.below(7000), "up": rng.below(4) != 0 } })),
        8 => {
            let spec = if rng.below(3) == 0 {
                vec!["none".to_string()]
            } else {
                vec![format!("packets={}", 100 + rng.below(5000))]
            };
            command(json!({ "cmd": "reserve", "args": { "vr": "r", "spec": spec } }))
        }
        9 if has_x => command(json!({ "cmd": "vr_remove", "args": { "vr": "x" } })),
        9 => command(json!({ "cmd": "vr_add", "args": {
            "vr": { "name": "x", "interfaces": [{ "name": "a", "port": "x0", "mac": "02:00:00:00:09:00", "addresses": ["10.9.0.1/24"] }] },
            "ports": [{ "name": "x0", "kind": "mem" }] } })),
        _ => command(json!({ "cmd": "apply", "args": {
            "topology": edited(rng.next_u64()), "file": FILE, "dry_run": false } })),
    }
}

/// The model's routes after `cmd` succeeded on `n`.
fn note(m: &mut Model, n: &Node) {
    m.clear();
    for v in &n.topology().vrs {
        let t = n.table(&v.name).unwrap();
        let p = t.routes(Some(dataplane::RouteSource::Api), usize::MAX);
        m.insert(v.name.clone(), p.iter().map(|r| r.prefix.to_string()).collect());
    }
}

/// A history: the journal's bytes, where each acknowledged change's record ends (the first
/// entry: the header alone, no change yet) and the state after it.
struct History {
    bytes: Vec<u8>,
    ends: Vec<u64>,
    states: Vec<String>,
    /// The checkpoint the daemon would write at the end.
    checkpoint: Vec<u8>,
}

fn history(rng: &mut Rng, changes: usize, dir: &RunDir) -> History {
    let d = dir.with(b"", None).to_path_buf();
    let (mut n, mut j, _, _) = start(&d).unwrap();
    let mut ends = vec![12];
    let mut states = vec![state(&n)];
    let mut m = Model::new();
    let mut serial = 0;
    let mut done = 0;
    while done < changes {
        let has_x = n.table("x").is_some();
        let cmd = change(rng, &m, has_x, &mut serial);
        let Ok(reply) = n.execute(cmd.clone()) else { continue };
        assert!(journal::journaled(&cmd), "{}", cmd.name());
        j.record(&cmd, &reply, &n).unwrap();
        note(&mut m, &n);
        ends.push(j.len());
        states.push(state(&n));
        done += 1;
    }
    let bytes = std::fs::read(d.join(journal::FILE)).unwrap();
    assert_eq!(bytes.len() as u64, *ends.last().unwrap());
    // The checkpoint as the daemon writes it: of the tables running now, fingerprinted with
    // their configuration and the journal.
    let (jl, jc) = checkpoint::journal_state(&d).unwrap();
    let topo = n.topology();
    let list: Vec<_> = (topo.vrs.iter().enumerate())
        .map(|(i, v)| {
            let fp = checkpoint::Fingerprint {
                config: checkpoint::config_crc(v, topo.table_sum(i)),
                journal_len: jl,
                journal_crc: jc,
            };
            (v.name.as_str(), n.table(&v.name).unwrap(), fp)
        })
        .collect();
    checkpoint::write(&d, &list).unwrap();
    let checkpoint = std::fs::read(d.join(checkpoint::FILE)).unwrap();
    drop(j);
    n.stop().unwrap();
    History { bytes, ends, states, checkpoint }
}

/// Starts from `journal_bytes` (and `ckpt`): the state it comes back with, what the replay
/// reported, and whether the run directory then reads whole.
fn recovered(
    dir: &RunDir,
    journal_bytes: &[u8],
    ckpt: Option<&[u8]>,
    fib: bool,
) -> (String, Replayed) {
    let d = dir.with(journal_bytes, ckpt).to_path_buf();
    let (n, j, rep, _) = start(&d).unwrap_or_else(|e| panic!("start refused: {e}"));
    let s = state(&n);
    if fib {
        fib_is_a_fresh_builds(&n);
    }
    drop(j);
    n.stop().unwrap();
    // What the replay left (cut, or compacted) reads whole.
    journal::check(&d).unwrap();
    (s, rep)
}

#[test]
fn a_journal_cut_anywhere_comes_back_as_the_acknowledged_prefix_and_a_flipped_byte_is_refused() {
    let mut rng = Rng::new(seed());
    let dir = RunDir::new("journal");
    let h = history(&mut rng, 24, &dir);
    let last = h.states.len() - 1;
    assert_eq!(recovered(&dir, &h.bytes, None, true).0, h.states[last], "the whole journal");

    // At every record boundary: exactly the changes before it, nothing torn, forwarding as a
    // fresh build's.
    for (i, &end) in h.ends.iter().enumerate() {
        let (s, rep) = recovered(&dir, &h.bytes[..end as usize], None, true);
        assert_eq!(s, h.states[i], "cut at the end of record {i} (byte {end})");
        assert_eq!(rep.cut, 0, "cut at byte {end}: {rep:?}");
    }
    // Inside a record (or the header): the records before it; the rest reported as cut.
    let cuts: Vec<u64> = (0..40)
        .map(|_| 1 + rng.below(*h.ends.last().unwrap() - 1))
        .chain(1..12)
        .filter(|c| !h.ends.contains(c))
        .collect();
    for cut in cuts {
        let i = h.ends.iter().rposition(|&e| e < cut).unwrap_or(0);
        let (s, rep) = recovered(&dir, &h.bytes[..cut as usize], None, false);
        let kept = if cut < 12 { 0 } else { h.ends[i] };
        assert_eq!(s, h.states[i], "cut at byte {cut}, inside record {}", i + 1);
        assert_eq!(rep.cut, cut - kept, "cut at byte {cut}: {rep:?}");
    }

    // A flipped byte anywhere (header, a record's length, checksum, kind or body, the last
    // record included): refused, naming the file and a good prefix to keep, never started
    // without the records after it.
    let path = dir.0.join(journal::FILE);
    // Every byte of every record's head (length, checksum, kind), then random ones.
    let heads = h.ends[..last].iter().flat_map(|&e| e as usize..e as usize + 9);
    let random: Vec<usize> = (0..60).map(|_| rng.below(h.bytes.len() as u64) as usize).collect();
    for at in heads.chain(random) {
        let mut b = h.bytes.clone();
        b[at] ^= 1 << rng.below(8);
        let d = dir.with(&b, None);
        let e = match start(d) {
            Ok((n, _, rep, _)) => {
                let s = state(&n);
                n.stop().unwrap();
                panic!(
                    "byte {at} flipped: started, {} of {} changes kept ({rep:?})",
                    h.states.iter().position(|x| *x == s).map_or("none".into(), |i| i.to_string()),
                    last
                );
            }
            Err(e) => e.to_string(),
        };
        let want = format!("journal {}: damaged at offset ", path.display());
        assert!(e.starts_with(&want), "byte {at} flipped: {e}");
        let offset: u64 = e[want.len()..].split(':').next().unwrap().parse().unwrap();
        assert!(offset <= at as u64, "byte {at} flipped, damage said at {offset}: {e}");
        assert!(offset == 0 || h.ends.contains(&offset), "{offset} is not a boundary: {e}");
        assert!(e.contains(&format!("truncate -s {}", offset.max(12))), "{e}");
    }
}

#[test]
fn a_checkpoint_cut_or_flipped_is_refused_and_the_routes_come_back_as_acknowledged() {
    let mut rng = Rng::new(seed());
    let dir = RunDir::new("ckpt");
    let h = history(&mut rng, 16, &dir);
    let want = h.states.last().unwrap();
    let c = &h.checkpoint;
    // Whole: used for the VRs whose configuration is the file's, and the same state.
    {
        let d = dir.with(&h.bytes, Some(c));
        assert!(checkpoint::read(d).unwrap().is_some());
        let (n, j, _, wrong) = start(d).unwrap();
        assert!(wrong.is_empty(), "{wrong:?}");
        assert_eq!(state(&n), *want);
        fib_is_a_fresh_builds(&n);
        drop(j);
        n.stop().unwrap();
    }
    let path = dir.0.join(checkpoint::FILE);
    let mut damaged: Vec<(String, Vec<u8>)> = Vec::new();
    // Cut at every offset of the header and the entries' fixed fields, and at random ones.
    for cut in (0..64.min(c.len())).chain((0..30).map(|_| rng.below(c.len() as u64) as usize)) {
        damaged.push((format!("cut at byte {cut}"), c[..cut].to_vec()));
    }
    for _ in 0..40 {
        let at = rng.below(c.len() as u64) as usize;
        let mut b = c.clone();
        b[at] ^= 1 << rng.below(8);
        damaged.push((format!("byte {at} flipped"), b));
    }
    for (i, (what, b)) in damaged.iter().enumerate() {
        let d = dir.with(&h.bytes, Some(b));
        let e = checkpoint::read(d).expect_err(what).to_string();
        assert!(e.starts_with(&format!("checkpoint {}: ", path.display())), "{what}: {e}");
        assert!(
            checkpoint::usable(d, &file_topology().vrs, &file_topology().table_sums).is_empty(),
            "{what}"
        );
        // Every fifth: a whole start, from the routes.
        if i.is_multiple_of(5) {
            assert_eq!(recovered(&dir, &h.bytes, Some(b), false).0, *want, "{what}");
        }
    }
    // Forged: a byte of a table changed and the checksum made again. Whatever it passes, the
    // table built from the routes takes over: the state and forwarding are the routes'.
    for _ in 0..10 {
        let mut b = c.clone();
        let at = 24 + rng.below((c.len() - 24) as u64) as usize;
        b[at] ^= 1 << rng.below(8);
        let crc = crc32fast::hash(&b[24..]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        let d = dir.with(&h.bytes, Some(&b));
        match start(d) {
            Ok((n, j, _, _)) => {
                assert_eq!(state(&n), *want, "forged at byte {at}");
                fib_is_a_fresh_builds(&n);
                drop(j);
                n.stop().unwrap();
            }
            Err(e) => panic!("forged at byte {at}: a checkpoint never stops a start: {e}"),
        }
    }
}
