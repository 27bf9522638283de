//! Crash recovery and snapshots on a real host: `routeplex up` makes two namespaces joined by
//! a VR; routes are added and deleted through the API; the data plane is killed with SIGKILL
//! and `routeplex up` again brings it back with those routes (from its journal), forwarding
//! pings to them. A torn journal tail (what a crash in the middle of a write leaves) is cut
//! off without losing what came before. Live topology changes (`apply`, `vr_remove`) come back
//! the same way, unless the topology file was edited since. `routeplex snapshot` and
//! `routeplex restore` work through the running data plane.
//!
//! Needs root (CI is root); skipped with a message otherwise. Names start with `rsn`. A
//! second VR shares the ports, so removing the first leaves them (and the hosts) in place.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn root() -> bool {
    let ok = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !ok {
        eprintln!("skipped: needs root (network namespaces, veth); CI runs as root");
    }
    ok
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

struct Service {
    dir: PathBuf,
    file: PathBuf,
    tag: String,
}

/// One data plane at a time: each busy-polls a CPU.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Service {
    fn new(n: u32) -> Service {
        let tag = format!("{:x}{n}", std::process::id() % 0xffff);
        let dir = std::env::temp_dir().join(format!("rsn-rec-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("rsn{tag}.yaml"));
        let t = &tag;
        std::fs::write(
            &file,
            format!(
                r#"hosts:
  - {{ name: rsna{t}, addresses: [10.61.0.2/24, "2001:db8:61::2/64"], gateways: [10.61.0.1, "2001:db8:61::1"] }}
  - {{ name: rsnb{t}, addresses: [10.62.0.2/24, "2001:db8:62::2/64"], gateways: [10.62.0.1, "2001:db8:62::1"] }}
ports:
  - {{ name: pa, kind: afpacket, host: rsna{t} }}
  - {{ name: pb, kind: afpacket, host: rsnb{t} }}
vrs:
  - name: r
    interfaces:
      - {{ name: ea, port: pa, mac: "02:00:00:00:61:01", addresses: [10.61.0.1/24, "2001:db8:61::1/64"] }}
      - {{ name: eb, port: pb, mac: "02:00:00:00:62:01", addresses: [10.62.0.1/24, "2001:db8:62::1/64"] }}
  - name: s
    interfaces:
      - {{ name: ea, port: pa, mac: "02:00:00:00:61:09", addresses: [10.61.9.1/24] }}
      - {{ name: eb, port: pb, mac: "02:00:00:00:62:09", addresses: [10.62.9.1/24] }}
"#
            ),
        )
        .unwrap();
        Service { dir, file, tag }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join("run").join(format!("rsn{}", self.tag))
    }

    /// `routeplex VERB FILE REST...`
    fn routeplex(&self, verb: &str, rest: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_routeplex"))
            .arg(verb)
            .arg(&self.file)
            .args(rest)
            .env("ROUTEPLEX_RUN_DIR", self.dir.join("run"))
            .output()
            .unwrap()
    }

    fn ok(&self, verb: &str, rest: &[&str]) -> String {
        let o = self.routeplex(verb, rest);
        assert!(o.status.success(), "routeplex {verb} {rest:?} failed: {}", text(&o));
        text(&o)
    }

    fn a(&self) -> String {
        format!("rsna{}", self.tag)
    }

    fn b(&self) -> String {
        format!("rsnb{}", self.tag)
    }

    fn pid(&self) -> i32 {
        let st: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(self.run_dir().join("state.json")).unwrap(),
        )
        .unwrap();
        st["pid"].as_i64().unwrap() as i32
    }

    /// One API request on the control socket; its reply.
    fn api(&self, req: &str) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let sock = self.run_dir().join("control.sock");
        let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut reply = String::new();
        std::io::BufReader::new(c).read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    }

    fn ping(&self, to: &str) -> bool {
        let v6 = to.contains(':');
        let a = self.a();
        let mut args = vec!["netns", "exec", a.as_str(), "ping"];
        if v6 {
            args.push("-6");
        }
        args.extend(["-c", "1", "-W", "1", to]);
        sh("ip", &args).status.success()
    }

    /// Pings until one is answered (neighbors resolve, the host's routes settle) or 10 s pass.
    fn reaches(&self, to: &str) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if self.ping(to) {
                return true;
            }
        }
        false
    }

    fn api_routes(&self) -> Vec<String> {
        let out = self.ok("route", &["r", "list", "--source", "api", "--json"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["routes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["prefix"].as_str().unwrap().to_string())
            .collect()
    }

    fn kill(&self) {
        let pid = self.pid();
        assert_eq!(sh("kill", &["-KILL", &pid.to_string()]).status.code(), Some(0));
        let t0 = Instant::now();
        while std::path::Path::new(&format!("/proc/{pid}")).exists()
            && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!std::path::Path::new(&format!("/proc/{pid}/status")).exists(), "pid {pid} lives");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.routeplex("down", &[]);
        for n in [self.a(), self.b()] {
            let _ = sh("ip", &["netns", "del", &n]);
            let _ = sh("ip", &["link", "del", &format!("rpx-{n}")]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn up_after_sigkill_comes_back_with_the_routes_added_through_the_api() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(0);
    s.ok("up", &[]);
    let b = s.b();
    for (fam, addr) in [("-4", "10.99.0.1/32"), ("-6", "2001:db8:99::1/128")] {
        let o = sh("ip", &["netns", "exec", &b, "ip", fam, "addr", "add", addr, "dev", "lo"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    assert!(s.reaches("10.62.0.2"), "the VR does not forward to b at all");
    assert!(!s.ping("10.99.0.1"), "10.99.0.1 answered before it had a route");

    s.ok("route", &["r", "add", "10.99.0.0/24", "via", "10.62.0.2"]);
    s.ok("route", &["r", "add", "2001:db8:99::/64", "via", "2001:db8:62::2"]);
    s.ok("route", &["r", "add", "10.98.0.0/24", "blackhole"]);
    s.ok("route", &["r", "add", "--replace", "10.98.0.0/24", "via", "10.62.0.2"]);
    s.ok("route", &["r", "del", "10.98.0.0/24"]);
    assert!(s.reaches("10.99.0.1"));
    let want = vec!["10.99.0.0/24".to_string(), "2001:db8:99::/64".to_string()];
    assert_eq!(s.api_routes(), want);
    let journal = s.run_dir().join("journal");
    let md = std::fs::metadata(&journal).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777, 0o600);

    // SIGKILL: nothing is flushed or saved on the way out.
    s.kill();
    assert!(!s.ping("10.62.0.2"), "forwarding went on without a data plane");
    let out = s.ok("up", &[]);
    assert!(out.contains("is gone; starting a new one"), "{out}");
    assert_eq!(s.api_routes(), want, "the API routes after the restart");
    assert!(s.reaches("10.99.0.1"));
    assert!(s.reaches("2001:db8:99::1"));
    let log = std::fs::read_to_string(s.run_dir().join("log")).unwrap();
    assert!(log.contains("journal replayed"), "{log}");

    // A crash mid-write leaves a torn record: it is cut off, what came before stays.
    s.ok("route", &["r", "add", "10.97.0.0/24", "via", "10.62.0.2"]);
    s.kill();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
    }
    s.ok("up", &[]);
    let mut want = want;
    want.insert(0, "10.97.0.0/24".to_string());
    assert_eq!(s.api_routes(), want);
    let log = std::fs::read_to_string(s.run_dir().join("log")).unwrap();
    assert!(log.contains("journal: torn tail cut off"), "{log}");
    assert!(s.reaches("10.99.0.1"));

    // A clean `down` removes the journal with the rest: the next `up` is the file's.
    s.ok("down", &[]);
    assert!(!s.run_dir().exists());
    s.ok("up", &[]);
    assert!(s.api_routes().is_empty());
}

/// The log's text from where `from` bytes of it ended.
fn log_since(s: &Service, from: usize) -> String {
    let log = std::fs::read_to_string(s.run_dir().join("log")).unwrap();
    log.get(from..).unwrap_or_default().to_string()
}

#[test]
fn up_after_sigkill_comes_back_with_live_topology_changes_unless_the_file_was_edited() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(2);
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.96.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(s.reaches("10.62.0.2"), "the VR does not forward to b at all");
    assert!(!s.ping("10.96.0.1"), "10.96.0.1 answered before it had a route");

    // Live, the file untouched: `apply` of a text giving r a static route, then `vr_remove`.
    let file_text = std::fs::read_to_string(&s.file).unwrap();
    let applied = file_text.replacen(
        "  - name: s\n",
        "    routes: [{ prefix: 10.96.0.0/24, via: 10.62.0.2 }]\n  - name: s\n",
        1,
    );
    assert_ne!(applied, file_text);
    let req = serde_json::json!({"v": 1, "id": 1, "cmd": "apply", "args": {
        "topology": applied, "file": s.file.canonicalize().unwrap().display().to_string()}});
    let r = s.api(&req.to_string());
    assert!(r["ok"].is_object(), "{r}");
    let r = s.api(r#"{"v":1,"id":2,"cmd":"vr_remove","args":{"vr":"s"}}"#);
    assert!(r["ok"].is_object(), "{r}");
    assert!(s.reaches("10.96.0.1"));
    assert!(!s.routeplex("route", &["s", "list"]).status.success(), "vr s is still there");

    // SIGKILL, `up` with the same file: the live changes are back.
    s.kill();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert!(s.reaches("10.96.0.1"), "the applied static route is gone: {}", log_since(&s, mark));
    assert!(!s.routeplex("route", &["s", "list"]).status.success(), "vr s came back");
    let statics = s.ok("route", &["r", "list", "--source", "static"]);
    assert!(statics.contains("10.96.0.0/24"), "{statics}");

    // Once more: the replayed topology is journaled again (its compaction), so a second crash
    // keeps it too.
    s.kill();
    s.ok("up", &[]);
    assert!(s.reaches("10.96.0.1"), "lost after a second crash");

    // The file edited since: it wins, and the log says the journaled topology was left out.
    s.kill();
    std::fs::write(&s.file, format!("{file_text}# edited\n")).unwrap();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    let log = log_since(&s, mark);
    assert!(log.contains("changed since the journaled data plane started"), "{log}");
    assert!(s.routeplex("route", &["s", "list"]).status.success(), "vr s of the file is missing");
    assert!(!s.ping("10.96.0.1"), "the journaled static route outlived the edited file");
}

#[test]
fn snapshot_and_restore_through_the_cli() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(1);
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.99.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    s.ok("route", &["r", "add", "10.99.0.0/24", "via", "10.62.0.2"]);
    assert!(s.reaches("10.99.0.1"));
    let snap = s.dir.join("r.snap");
    let out = s.ok("snapshot", &["r", "--out", snap.to_str().unwrap()]);
    assert!(out.contains("\"format\":1"), "{out}");
    // The name is taken: refused, saying so; a file that is no snapshot: refused, saying so.
    let o = s.routeplex("restore", &[snap.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("exists already"), "{}", text(&o));
    let o = s.routeplex("restore", &[s.file.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("not a routeplex snapshot"), "{}", text(&o));
    // Gone (no forwarding), then back from the snapshot, with its API route.
    let r = s.api(r#"{"v":1,"id":1,"cmd":"vr_remove","args":{"vr":"r"}}"#);
    assert!(r["ok"].is_object(), "{r}");
    assert!(!s.ping("10.99.0.1"));
    let out = s.ok("restore", &[snap.to_str().unwrap()]);
    assert!(out.contains("\"routes\":1"), "{out}");
    assert_eq!(s.api_routes(), vec!["10.99.0.0/24".to_string()]);
    assert!(s.reaches("10.99.0.1"));
}

impl Service {
    /// The status of VR `vr`.
    fn vr_status(&self, vr: &str) -> serde_json::Value {
        let st = self.api(r#"{"v":1,"id":9,"cmd":"status"}"#);
        let vrs = st["ok"]["vrs"].as_array().unwrap_or_else(|| panic!("{st}")).clone();
        vrs.into_iter().find(|v| v["name"] == vr).unwrap_or_else(|| panic!("no vr {vr}: {st}"))
    }
}

/// `interface_set`, `reserve`, `move` and `restore` change the host without changing the
/// topology's text: they are journaled too, and come back after SIGKILL (twice: the second
/// start replays what the first one compacted).
#[test]
fn up_after_sigkill_comes_back_with_interface_reserve_move_and_restore_changes() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(3);
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.95.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(s.reaches("10.62.0.2"), "the VR does not forward to b at all");

    // s: an API route, a snapshot of it, removed, restored from the snapshot (then the file
    // is gone: the journal must not need it).
    let r = s.api(r#"{"v":1,"id":1,"cmd":"route_add","args":{"vr":"s","routes":[{"prefix":"10.95.0.0/24","via":"10.62.9.2"}]}}"#);
    assert!(r["ok"].is_object(), "{r}");
    let snap = s.dir.join("s.snap");
    s.ok("snapshot", &["s", "--out", snap.to_str().unwrap()]);
    let r = s.api(r#"{"v":1,"id":2,"cmd":"vr_remove","args":{"vr":"s"}}"#);
    assert!(r["ok"].is_object(), "{r}");
    s.ok("restore", &[snap.to_str().unwrap()]);
    std::fs::remove_file(&snap).unwrap();
    // r: interface eb's MTU and a reservation; both VRs (one cell) to the last worker.
    let r = s.api(
        r#"{"v":1,"id":3,"cmd":"interface_set","args":{"vr":"r","interface":"eb","mtu":1400}}"#,
    );
    assert!(r["ok"].is_object(), "{r}");
    let r = s.api(
        r#"{"v":1,"id":4,"cmd":"interface_set","args":{"vr":"r","interface":"ea","up":false}}"#,
    );
    assert!(r["ok"].is_object(), "{r}");
    let r = s.api(r#"{"v":1,"id":5,"cmd":"reserve","args":{"vr":"r","spec":["time_us=300","period_us=1000"]}}"#);
    assert!(r["ok"].is_object(), "{r}");
    let workers =
        s.api(r#"{"v":1,"id":6,"cmd":"status"}"#)["ok"]["workers"].as_array().unwrap().len();
    let to = workers - 1;
    let moved = workers > 1 && s.vr_status("r")["worker"] != to;
    if moved {
        let r =
            s.api(&format!(r#"{{"v":1,"id":7,"cmd":"move","args":{{"vr":"r","worker":{to}}}}}"#));
        assert!(r["ok"].is_object(), "{r}");
    } else {
        eprintln!("move not checked: {workers} worker(s), r already on the last");
    }
    let check = |when: &str| {
        let r = s.vr_status("r");
        let ifs = r["interfaces"].as_array().unwrap();
        let eb = ifs.iter().find(|i| i["name"] == "eb").unwrap();
        let ea = ifs.iter().find(|i| i["name"] == "ea").unwrap();
        assert_eq!(eb["mtu"], 1400, "{when}: {r}");
        assert_eq!(ea["up"], false, "{when}: {r}");
        let res = format!("{}{}", r["reservation"], r["pending_reservation"]);
        assert!(res.contains("300000") && res.contains("1000000"), "{when}: {r}");
        if moved {
            assert_eq!(r["worker"], to, "{when}: {r}");
        }
        let routes = s.ok("route", &["s", "list", "--source", "api"]);
        assert!(routes.contains("10.95.0.0/24"), "{when}: restored vr s: {routes}");
    };
    check("before the kill");

    s.kill();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    s.vr_status("r");
    check(&format!("after SIGKILL: {}", log_since(&s, mark)));
    s.kill();
    s.ok("up", &[]);
    check("after a second SIGKILL");
}

/// After SIGKILL the VR starts from the checkpoint of its compiled tables (the log says the
/// table built from the routes took over from it) with its API routes; a damaged checkpoint
/// is refused, saying so and naming the file, and the tables are built from the routes.
#[test]
fn up_after_sigkill_starts_from_the_checkpoint_and_refuses_a_damaged_one() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(4);
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.94.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    s.ok("route", &["r", "add", "10.94.0.0/24", "via", "10.62.0.2"]);
    assert!(s.reaches("10.94.0.1"));
    let ckpt = s.run_dir().join("checkpoint");
    let journal = s.run_dir().join("journal");
    // Written 300 ms after the last change, fingerprinted with the journal as it is then.
    let t0 = Instant::now();
    let written = || {
        let (c, j) = (std::fs::metadata(&ckpt), std::fs::metadata(&journal));
        matches!((c, j), (Ok(c), Ok(j)) if c.modified().unwrap() >= j.modified().unwrap())
    };
    while !written() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(written(), "no checkpoint after the route change");
    let md = std::fs::metadata(&ckpt).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777, 0o600);

    s.kill();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert!(s.reaches("10.94.0.1"));
    // Any command waits for the table built from the routes and the journal's replay.
    assert_eq!(s.api_routes(), vec!["10.94.0.0/24".to_string()]);
    let log = log_since(&s, mark);
    assert!(log.contains("took over from the checkpoint"), "{log}");

    // Damaged: refused whole, the VR built from its routes, the journal's route still there.
    std::thread::sleep(Duration::from_millis(600));
    s.kill();
    let mut bytes = std::fs::read(&ckpt).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&ckpt, &bytes).unwrap();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert!(s.reaches("10.94.0.1"));
    assert_eq!(s.api_routes(), vec!["10.94.0.0/24".to_string()]);
    let log = log_since(&s, mark);
    assert!(log.contains("checkpoint refused") && log.contains("checksum mismatch"), "{log}");
    assert!(log.contains(&ckpt.display().to_string()), "the message names the file: {log}");
    assert!(!log.contains("took over from the checkpoint"), "{log}");
}

/// What the state of `vr`'s interface `iface` and reservation is, as `status` reports it:
/// (MTU, reservation and pending reservation as text).
fn mtu_and_reservation(s: &Service, vr: &str, iface: &str) -> (u64, String) {
    let v = s.vr_status(vr);
    let f = v["interfaces"].as_array().unwrap().iter().find(|f| f["name"] == iface).cloned();
    let mtu = f.unwrap_or_else(|| panic!("no interface {iface}: {v}"))["mtu"].as_u64().unwrap();
    (mtu, format!("{} {}", v["reservation"], v["pending_reservation"]))
}

/// Issue 27, finding 3: after SIGKILL + `up` (twice: the second start replays what the first
/// compacted) the host is as it was acknowledged. An MTU and a reservation set live and then
/// reverted by `apply` stay reverted; `vr_add` of another VR leaves r's live MTU and
/// reservation alone (its plan has its own step only), and they come back after a crash.
#[test]
fn up_after_sigkill_comes_back_as_acknowledged_after_apply_and_vr_add() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(4);
    s.ok("up", &[]);
    assert!(s.reaches("10.62.0.2"), "the VR does not forward to b at all");
    let api_ok = |req: &str| {
        let r = s.api(req);
        assert!(r["ok"].is_object(), "{req}: {r}");
        r["ok"].clone()
    };
    let set_live = |mtu: u16| {
        api_ok(&format!(
            r#"{{"v":1,"id":1,"cmd":"interface_set","args":{{"vr":"r","interface":"eb","mtu":{mtu}}}}}"#
        ));
        api_ok(r#"{"v":1,"id":2,"cmd":"reserve","args":{"vr":"r","spec":["packets=1234"]}}"#);
    };
    let restart_twice = |want: &(u64, String)| {
        for n in ["first", "second"] {
            s.kill();
            let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
            s.ok("up", &[]);
            let got = mtu_and_reservation(&s, "r", "eb");
            assert_eq!(&got, want, "after the {n} SIGKILL: {}", log_since(&s, mark));
            assert!(s.reaches("10.62.0.2"), "after the {n} SIGKILL");
        }
    };

    // Live changes, then `apply` of the file with a static route: they go back to the file's.
    set_live(1400);
    let file_text = std::fs::read_to_string(&s.file).unwrap();
    let applied = file_text.replacen(
        "  - name: s\n",
        "    routes: [{ prefix: 10.96.0.0/24, via: 10.62.0.2 }]\n  - name: s\n",
        1,
    );
    let req = serde_json::json!({"v": 1, "id": 3, "cmd": "apply", "args": {
        "topology": applied, "file": s.file.canonicalize().unwrap().display().to_string()}});
    let plan = api_ok(&req.to_string())["plan"].to_string();
    assert!(plan.contains("mtu 1400 -> 1500") && plan.contains("-> none"), "{plan}");
    let reverted = mtu_and_reservation(&s, "r", "eb");
    assert_eq!(reverted.0, 1500);
    assert!(!reverted.1.contains("1234"), "{reverted:?}");
    restart_twice(&reverted);

    // Live changes again, then a VR added beside r: r keeps them, through crashes too.
    set_live(1300);
    let live = mtu_and_reservation(&s, "r", "eb");
    assert!(live.0 == 1300 && live.1.contains("1234"), "{live:?}");
    let add = r#"{"v":1,"id":4,"cmd":"vr_add","args":{"vr":{"name":"x","interfaces":[{"name":"a","port":"xm","mac":"02:00:00:00:63:01","addresses":["10.63.0.1/24"]}]},"ports":[{"name":"xm","kind":"mem"}]}}"#;
    let plan = api_ok(add)["plan"].clone();
    assert_eq!(plan, serde_json::json!(["+ vr x (new cell; opens xm)"]));
    assert_eq!(mtu_and_reservation(&s, "r", "eb"), live);
    restart_twice(&live);
    assert!(s.routeplex("route", &["x", "list"]).status.success(), "vr x is gone");
}

/// The byte ranges of the journal's records (after its 12-byte header).
fn journal_records(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut at = 12;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        out.push(at..at + 8 + len);
        at += 8 + len;
    }
    out
}

/// A damaged journal stops `up` with an error naming the file, the offset and what was good
/// (it used to come up without every API route after the damage, exit 0, with only a WARN);
/// a FIFO in its place is refused at once (it hung `up`); cutting the journal where the
/// error says brings the good records back.
#[test]
fn a_damaged_journal_or_a_fifo_in_its_place_stops_up_saying_where_and_how_to_recover() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(5);
    s.ok("up", &[]);
    for p in ["10.91.0.0/24", "10.91.1.0/24", "10.91.2.0/24"] {
        s.ok("route", &["r", "add", p, "blackhole"]);
    }
    s.kill();
    let journal = s.run_dir().join("journal");
    let good = std::fs::read(&journal).unwrap();
    let recs = journal_records(&good);
    assert_eq!(recs.len(), 3, "one record per route change");
    let mut bad = good.clone();
    bad[recs[1].start + 12] ^= 0x04;
    std::fs::write(&journal, &bad).unwrap();

    let o = s.routeplex("up", &[]);
    let out = text(&o);
    assert!(!o.status.success(), "up came up with a damaged journal: {out}");
    let at = recs[1].start;
    let want = format!("journal {}: damaged at offset {at}", journal.display());
    assert!(out.contains(&want), "{out}");
    assert!(out.contains(&format!("The 1 record(s) before it ({at} bytes) are good")), "{out}");
    assert!(out.contains(&format!("truncate -s {at} {}", journal.display())), "{out}");
    assert_eq!(std::fs::read(&journal).unwrap(), bad, "the journal is left as it was");

    // A FIFO in its place: refused naming it, not waited on.
    std::fs::rename(&journal, s.dir.join("journal.damaged")).unwrap();
    assert!(sh("mkfifo", &[&journal.display().to_string()]).status.success());
    let o = s.routeplex("up", &[]);
    let out = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains(&format!("journal {}: not a regular file", journal.display())), "{out}");
    std::fs::remove_file(&journal).unwrap();

    // What the error says to do keeps the good record.
    std::fs::rename(s.dir.join("journal.damaged"), &journal).unwrap();
    let o = sh("truncate", &["-s", &at.to_string(), &journal.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    s.ok("up", &[]);
    assert_eq!(s.api_routes(), vec!["10.91.0.0/24".to_string()]);
}

/// A checkpoint whose bytes were changed and its checksum made again is accepted as a file,
/// but checked against the routes it claims once the table is built from them: it is
/// discarded, saying so and naming the file, and written again from the routes.
#[test]
fn a_forged_checkpoint_with_a_good_checksum_is_found_out_and_discarded() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(6);
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.93.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    s.ok("route", &["r", "add", "10.93.0.0/24", "via", "10.62.0.2"]);
    let ckpt = s.run_dir().join("checkpoint");
    let journal = s.run_dir().join("journal");
    let written = || {
        let (c, j) = (std::fs::metadata(&ckpt), std::fs::metadata(&journal));
        matches!((c, j), (Ok(c), Ok(j)) if c.modified().unwrap() >= j.modified().unwrap())
    };
    let t0 = Instant::now();
    while !written() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(written(), "no checkpoint after the route change");
    std::thread::sleep(Duration::from_millis(600));
    s.kill();

    // VR r's entry: flip its gateway adjacencies' address bytes, then fix the checksum.
    let mut bytes = std::fs::read(&ckpt).unwrap();
    let body = 24;
    let mut at = body + 4;
    let mut flipped = 0;
    while at < bytes.len() {
        let n = u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as usize;
        let name = String::from_utf8(bytes[at + 2..at + 2 + n].to_vec()).unwrap();
        at += 2 + n + 4 + 8 + 4;
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let table = at + 4;
        if name == "r" {
            let slots = u32::from_le_bytes(bytes[table..table + 4].try_into().unwrap()) as usize;
            for i in 0..slots {
                let slot = table + 4 + 33 * i;
                if bytes[slot] == 7 {
                    bytes[slot + 3] ^= 0x01;
                    flipped += 1;
                }
            }
        }
        at = table + len;
    }
    assert!(flipped > 0, "VR r's checkpoint has a gateway adjacency");
    let crc = crc32fast::hash(&bytes[body..]);
    bytes[20..24].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&ckpt, &bytes).unwrap();

    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert_eq!(s.api_routes(), vec!["10.93.0.0/24".to_string()]);
    assert!(s.reaches("10.93.0.1"), "forwarding with the table built from the routes");
    let log = log_since(&s, mark);
    assert!(log.contains("checkpoint discarded"), "{log}");
    assert!(log.contains(&ckpt.display().to_string()), "the message names the file: {log}");
    // Written again from the routes.
    let t0 = Instant::now();
    let again = || std::fs::read(&ckpt).is_ok_and(|b| b != bytes);
    while !again() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(again(), "the checkpoint was not written again");
}

/// `up` right after SIGKILL, while the killed process's last threads may still hold its tap,
/// waits for them (it failed 7 times in 30 with TUNSETIFF: Device or resource busy). Ten
/// rounds of SIGKILL and at once `up` (again while it still finds the old one running).
#[test]
fn up_right_after_sigkill_waits_for_the_old_process_to_let_go_of_its_tap() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(7);
    let tap = format!("rsnt{}", s.tag);
    std::fs::write(
        &s.file,
        format!(
            r#"ports:
  - {{ name: t, kind: tap, interface: {tap} }}
vrs:
  - name: r
    interfaces:
      - {{ name: e, port: t, mac: "02:00:00:00:63:01", addresses: [10.63.0.1/24] }}
"#
        ),
    )
    .unwrap();
    s.ok("up", &[]);
    for round in 0..10 {
        let pid = s.pid();
        assert_eq!(sh("kill", &["-KILL", &pid.to_string()]).status.code(), Some(0));
        let t0 = Instant::now();
        loop {
            let out = s.ok("up", &[]);
            if !out.contains("is already up") {
                assert!(out.contains("is gone; starting a new one"), "round {round}: {out}");
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "pid {pid} lives: {out}");
        }
        assert_ne!(s.pid(), pid);
        assert!(std::path::Path::new("/sys/class/net").join(&tap).exists(), "round {round}");
        let st = s.api("{\"v\":1,\"id\":1,\"cmd\":\"status\"}");
        assert!(st.get("ok").is_some(), "round {round}: {st}");
    }
}

/// After SIGKILL `up` reads the topology without its table files (the data plane it starts
/// reads them: after forwarding from its checkpoint when their sums still fit it, before when
/// a table was edited): the VR comes back with the table's routes, and a table file broken
/// meanwhile fails the data plane's start, which `up` reports, naming the file and its line.
#[test]
fn up_after_sigkill_leaves_the_table_files_to_the_data_plane() {
    if !root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Service::new(8);
    let table = s.dir.join("t.txt");
    std::fs::write(&table, "10.95.0.0/24 0\n").unwrap();
    let topo = std::fs::read_to_string(&s.file).unwrap();
    let eb = "addresses: [10.62.0.1/24, \"2001:db8:62::1/64\"] }\n";
    assert!(topo.contains(eb));
    let with = topo.replacen(
        eb,
        &format!("{eb}    tables: [{{ file: t.txt, next_hops: [10.62.0.2] }}]\n"),
        1,
    );
    std::fs::write(&s.file, with).unwrap();
    s.ok("up", &[]);
    let b = s.b();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.95.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(s.reaches("10.95.0.1"), "the table's route before the kill");

    // The checkpoint is written a moment after the start (300 ms after the last change).
    let ckpt = s.run_dir().join("checkpoint");
    let t0 = Instant::now();
    while !ckpt.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ckpt.exists(), "no checkpoint");
    s.kill();
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert!(s.reaches("10.95.0.1"), "the table's route after the restart");
    // Forwarding from the checkpoint while the table file was read: the data plane took it
    // over with the table's routes, and it runs the file's configuration (apply finds
    // nothing to change, as it would if the VR had lost the table's routes).
    let dry = s.ok("apply", &["--dry-run"]);
    let log = log_since(&s, mark);
    assert!(log.contains("tables deferred"), "{log}");
    assert!(log.contains("took over from the checkpoint"), "{log}");
    assert!(!log.contains("reading the tables now"), "{log}");
    assert!(dry.contains("nothing to change"), "{dry}");

    // A table edited while it was down: its sum no longer fits the checkpoint, so the data
    // plane reads the file before forwarding, and forwards with the new route.
    std::thread::sleep(Duration::from_millis(600));
    s.kill();
    std::fs::write(&table, "10.95.0.0/24 0\n10.96.0.0/24 0\n").unwrap();
    let o = sh("ip", &["netns", "exec", &b, "ip", "addr", "add", "10.96.0.1/32", "dev", "lo"]);
    assert!(o.status.success(), "{}", text(&o));
    let mark = std::fs::read_to_string(s.run_dir().join("log")).unwrap().len();
    s.ok("up", &[]);
    assert!(s.reaches("10.96.0.1"), "the edited table's new route after the restart");
    let log = log_since(&s, mark);
    assert!(log.contains("reading the tables now"), "{log}");
    assert!(!log.contains("tables deferred"), "{log}");

    s.kill();
    std::fs::write(&table, "10.95.0.0/24 0\nnot a prefix\n").unwrap();
    let o = s.routeplex("up", &[]);
    let said = text(&o);
    assert!(!o.status.success(), "up with a broken table file: {said}");
    assert!(said.contains("t.txt:2"), "the error names the file and line: {said}");
    // Found by the data plane, not by `up` (which reads no table file on a restart).
    assert!(said.contains("the data plane exited"), "{said}");
}
