//! `control::daemon` in process, no root needed: service names, the state file (missing,
//! corrupt, untrusted, a reused pid), and the socket server's limits (line length at the
//! boundary, per-line deadline for silent and trickling clients, the client limit, several
//! requests on one connection, clients that never read big replies, idle clients filling
//! every slot). `routeplex`'s `control_surface` test drives the same through
//! the real binary as root (umask, peer credentials, `up` and `down`).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use control::api::{self, Command};
use control::daemon::{self, Access, Paths, State, MAX_CLIENTS, MAX_LINE, REPLY_STALL};
use control::ControlError;
use serde_json::Value;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("rpx-daemon-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn service_names_are_plain_names() {
    for ok in ["a.yaml", "two-hosts_1.yaml", "x+y.yml", "a.b.yaml", "dir/.hidden/z.yaml"] {
        let p = Paths::for_file(Path::new(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        assert_eq!(p.dir.file_name(), Some(p.name.as_ref()), "{ok}");
        assert!(!p.name.starts_with('.') && !p.name.contains('/'), "{ok}: {}", p.name);
    }
    let long = format!("{}.yaml", "a".repeat(65));
    for bad in
        ["..yaml", ".yaml", "...yaml", "..", ".", "", "a b.yaml", "é.yaml", "x/..yaml", &long]
    {
        match Paths::for_file(Path::new(bad)) {
            Err(ControlError::Invalid(m)) => {
                assert!(m.contains("is not a usable name") && m.contains("rename"), "{bad}: {m}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

fn paths(d: &TempDir) -> Paths {
    let dir = d.0.join("svc");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    Paths::in_dir(&dir, "svc")
}

/// This process's start time, as `control::sys::start_time` reads it.
fn my_start() -> u64 {
    control::sys::start_time(std::process::id()).expect("our own start time")
}

#[test]
fn state_file_round_trips_and_names_its_process_for_good() {
    let d = TempDir::new();
    let p = paths(&d);
    assert!(daemon::read_state(&p).unwrap().is_none(), "no file: not up");
    let me = State {
        topology: "/x.yaml".into(),
        pid: std::process::id(),
        started: my_start(),
        made: Default::default(),
    };
    assert!(me.running(), "our own pid with its start time");
    daemon::write_state(&p, &me).unwrap();
    let mode = std::fs::metadata(&p.state).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let back = daemon::read_state(&p).unwrap().unwrap();
    assert_eq!((back.pid, back.started), (me.pid, me.started));
    assert!(!p.state.with_extension("tmp").exists());

    // The same pid with another start time is another process: a reused pid.
    let reused = State { started: me.started + 1, ..me.clone() };
    assert!(!reused.running());
    assert!(!State { pid: 0, started: 0, ..me.clone() }.running());
    // A pid that names nothing.
    assert!(!State { pid: u32::MAX - 1, ..me }.running());
}

#[test]
fn a_state_file_that_cannot_be_trusted_says_how_to_recover() {
    let d = TempDir::new();
    let p = paths(&d);
    std::fs::write(&p.state, "{\"pid\": 12, garbage").unwrap();
    std::fs::set_permissions(&p.state, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = daemon::read_state(&p).unwrap_err().to_string();
    assert!(e.contains("corrupt") && e.contains("remove"), "{e}");
    assert!(e.contains(&p.dir.display().to_string()), "names the directory: {e}");

    std::fs::write(&p.state, "{}").unwrap();
    let e = daemon::read_state(&p).unwrap_err().to_string();
    assert!(e.contains("corrupt"), "a file missing fields: {e}");

    std::fs::set_permissions(&p.state, std::fs::Permissions::from_mode(0o622)).unwrap();
    let e = daemon::read_state(&p).unwrap_err().to_string();
    assert!(e.contains("not trusted") && e.contains("remove"), "writable by others: {e}");

    // A huge file is read only so far, and refused.
    std::fs::set_permissions(&p.state, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&p.state, vec![b' '; 4 << 20]).unwrap();
    let e = daemon::read_state(&p).unwrap_err().to_string();
    assert!(e.contains("corrupt"), "{e}");
}

/// A server on a socket in a temporary directory, answering each command with its name,
/// until `stop` or drop.
struct Server {
    _dir: TempDir,
    sock: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), ControlError>>>,
    /// `route_list` requests answered so far.
    lists: Arc<AtomicU32>,
}

impl Server {
    fn start() -> Server {
        Server::start_with(None)
    }

    /// A server whose `route_list` answers `routes` (the others answer their name).
    fn start_with(routes: Option<api::RouteList>) -> Server {
        let dir = TempDir::new();
        let sock = dir.0.join("control.sock");
        let access = Access { owner: control::sys::euid(), status_gid: None };
        let listener = daemon::bind(&sock, &access).unwrap();
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the socket");
        let stop = Arc::new(AtomicBool::new(false));
        let lists = Arc::new(AtomicU32::new(0));
        let thread = {
            let (stop, lists) = (stop.clone(), lists.clone());
            std::thread::spawn(move || {
                daemon::serve(listener, access, &stop, |cmd| {
                    let last = cmd == Command::Stop;
                    if let (Command::RouteList { .. }, Some(r)) = (&cmd, &routes) {
                        lists.fetch_add(1, Ordering::Relaxed);
                        return (Ok(r.clone().into()), false);
                    }
                    // Each answer names its command, where a stop's state would be.
                    (Ok(api::Stopping { state: cmd.name().into() }.into()), last)
                })
            })
        };
        Server { _dir: dir, sock, stop, thread: Some(thread), lists }
    }

    fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.sock).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One reply line within `timeout`, or what happened instead. Reads a byte at a time, so a
/// second reply already sent (to pipelined requests) stays in the socket for the next call.
fn read_line(s: &UnixStream, timeout: Duration) -> Result<Value, String> {
    let t0 = Instant::now();
    let mut line = Vec::new();
    let mut buf = [0u8; 1];
    loop {
        // `timeout` bounds the wait for a reply to begin; once it has, the rest of its line is
        // read too (the server writes whole lines). Given up halfway, the line's head would be
        // lost and the next call would parse its tail: CI once saw a trickling client's
        // 100 ms reads split the server's reply that way.
        let left = match timeout.checked_sub(t0.elapsed()) {
            Some(left) => left,
            None if line.is_empty() => return Err("timed out".into()),
            None => (timeout + Duration::from_secs(5))
                .checked_sub(t0.elapsed())
                .ok_or_else(|| format!("timed out within a line: {line:?}"))?,
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
        match (&mut &*s).read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&line))),
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(i) = line.iter().position(|&b| b == b'\n') {
                    return serde_json::from_slice(&line[..i]).map_err(|e| e.to_string());
                }
            }
            Err(e) => return Err(format!("after {:?}: {e}", t0.elapsed())),
        }
    }
}

fn err_code(v: &Value) -> &str {
    v["err"]["code"].as_str().unwrap_or("ok")
}

fn err_msg(v: &Value) -> &str {
    v["err"]["msg"].as_str().unwrap_or("")
}

#[test]
fn requests_on_one_connection_and_lines_at_the_limit() {
    let srv = Server::start();
    let mut c = srv.connect();
    c.write_all(b"{\"v\":1,\"id\":3,\"cmd\":\"hello\"}\n{\"v\":1,\"id\":4,\"cmd\":\"status\"}\n")
        .unwrap();
    let a = read_line(&c, Duration::from_secs(10)).unwrap();
    assert_eq!((&a["id"], &a["ok"]["state"]), (&3.into(), &"hello".into()), "{a}");
    let b = read_line(&c, Duration::from_secs(10)).unwrap();
    assert_eq!((&b["id"], &b["ok"]["state"]), (&4.into(), &"status".into()), "{b}");
    c.write_all(b"{\"v\":1,\"id\":5,\"cmd\":\"shutdown\"}\n").unwrap();
    let r = read_line(&c, Duration::from_secs(10)).unwrap();
    assert_eq!(err_code(&r), "bad_request", "an unknown command: {r}");
    c.write_all(b"{\"v\":2,\"id\":6,\"cmd\":\"hello\"}\n").unwrap();
    let r = read_line(&c, Duration::from_secs(10)).unwrap();
    assert_eq!(err_code(&r), "bad_request", "another version: {r}");
    // The connection is still good after refusals.
    c.write_all(b"{\"v\":1,\"id\":7,\"cmd\":\"hello\"}\n").unwrap();
    assert_eq!(read_line(&c, Duration::from_secs(10)).unwrap()["id"], 7);

    // A line of exactly MAX_LINE bytes (and its newline) is served; one byte more is not.
    let line = |len: usize| {
        let mut l = b"{\"v\":1,\"id\":8,\"cmd\":\"hello\"}".to_vec();
        l.resize(len, b' ');
        l.push(b'\n');
        l
    };
    for (len, served) in [(MAX_LINE, true), (MAX_LINE + 1, false)] {
        let c = srv.connect();
        let mut w = c.try_clone().unwrap();
        let text = line(len);
        let writer = std::thread::spawn(move || w.write_all(&text).is_ok());
        let r = read_line(&c, Duration::from_secs(60)).unwrap();
        let wrote = writer.join().unwrap();
        if served {
            assert!(wrote, "all of it was read");
            assert_eq!(r["ok"]["state"], "hello", "{len} bytes: {r}");
        } else {
            assert_eq!(err_code(&r), "bad_request", "{len} bytes: {r}");
            assert!(err_msg(&r).contains(&format!("longer than {MAX_LINE} bytes")), "{r}");
        }
    }
}

#[test]
fn a_line_must_come_whole_within_its_deadline_however_it_trickles() {
    let srv = Server::start();
    let silent = srv.connect();
    (&silent).write_all(b"{\"v\":1,\"id\":1,").unwrap();
    let t0 = Instant::now();
    let sock = srv.sock.clone();
    let trickle = std::thread::spawn(move || {
        let mut c = UnixStream::connect(sock).unwrap();
        c.write_all(b"{\"v\":1,\"id\":2,\"cmd\":\"hello\"").unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(25) {
            if c.write_all(b" ").is_err() {
                break;
            }
            if let Ok(r) = read_line(&c, Duration::from_millis(100)) {
                return (r, t0.elapsed());
            }
        }
        let _ = c.write_all(b"}\n");
        (read_line(&c, Duration::from_secs(10)).unwrap_or_else(Value::from), t0.elapsed())
    });
    // Idle connections wait between requests for as long as they like.
    let idle = srv.connect();
    let mut fresh = srv.connect();
    fresh.write_all(b"{\"v\":1,\"id\":3,\"cmd\":\"hello\"}\n").unwrap();
    let r = read_line(&fresh, Duration::from_secs(5)).unwrap();
    assert_eq!(r["id"], 3, "served beside a slow and a trickling client: {r}");

    let r = read_line(&silent, Duration::from_secs(20)).unwrap();
    assert_eq!(err_code(&r), "bad_request", "{r}");
    assert!(err_msg(&r).contains("took longer than 10 s"), "{r}");
    assert!(t0.elapsed() >= Duration::from_secs(9), "cut off after only {:?}", t0.elapsed());
    let (r, after) = trickle.join().unwrap();
    assert_eq!(err_code(&r), "bad_request", "a trickling line is cut off ({after:?}): {r}");
    assert!(err_msg(&r).contains("took longer than 10 s"), "{r}");

    // The idle one was not cut off.
    (&idle).write_all(b"{\"v\":1,\"id\":4,\"cmd\":\"hello\"}\n").unwrap();
    assert_eq!(read_line(&idle, Duration::from_secs(5)).unwrap()["id"], 4);
}

#[test]
fn the_client_limit_refuses_the_next_one_and_stop_ends_the_server() {
    let mut srv = Server::start();
    // Each in the middle of a request: none is idle, so none makes room.
    let mut many: Vec<UnixStream> = (0..MAX_CLIENTS).map(|_| srv.connect()).collect();
    for c in &many {
        (&*c).write_all(b"{\"v\":1,").unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let c = srv.connect();
    let _ = (&c).write_all(b"{\"v\":1,\"id\":1,\"cmd\":\"hello\"}\n");
    let r = read_line(&c, Duration::from_secs(10)).unwrap();
    assert_eq!(err_code(&r), "busy", "client {}: {r}", MAX_CLIENTS + 1);
    many.truncate(MAX_CLIENTS / 2);
    let t0 = Instant::now();
    let r = loop {
        let c = srv.connect();
        let _ = (&c).write_all(b"{\"v\":1,\"id\":2,\"cmd\":\"hello\"}\n");
        let r = read_line(&c, Duration::from_secs(10)).unwrap();
        if err_code(&r) != "busy" || t0.elapsed() > Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(r["ok"]["state"], "hello", "room again once clients leave: {r}");

    let c = srv.connect();
    (&c).write_all(b"{\"v\":1,\"id\":9,\"cmd\":\"stop\"}\n").unwrap();
    assert_eq!(read_line(&c, Duration::from_secs(10)).unwrap()["ok"]["state"], "stop");
    let served = srv.thread.take().unwrap().join().unwrap();
    assert!(served.is_ok(), "{served:?}");
}

/// This process's resident memory in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One big test at a time: the memory test measures the whole process.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Clients that ask for a big route list and never read it: what the server holds for them
/// stays bounded (it held every reply's tree and text, ~120 MB each here, for as long as the
/// client stayed), each is disconnected within the reply deadline, and a new client's
/// `status` is served meanwhile.
#[test]
fn unread_big_replies_are_bounded_and_their_clients_dropped() {
    let _one = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let routes = (0..150_000u32)
        .map(|i| api::RouteRow {
            prefix: ipnet::Ipv4Net::new(std::net::Ipv4Addr::from(0x0a00_0000 + i), 32)
                .unwrap()
                .into(),
            source: "api".into(),
            best: true,
            via: Some("10.255.0.1".parse().unwrap()),
            interface: Some("eth0".into()),
            blackhole: false,
            local: false,
        })
        .collect();
    let srv = Server::start_with(Some(api::RouteList { vr: "r".into(), routes }));
    let base = rss_kib();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(base));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let greedy: Vec<UnixStream> = (0..12)
        .map(|i| {
            let c = srv.connect();
            let req = format!(
                "{{\"v\":1,\"id\":{i},\"cmd\":\"route_list\",\"args\":{{\"vr\":\"r\"}}}}\n"
            );
            (&c).write_all(req.as_bytes()).unwrap();
            c
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let c = srv.connect();
    (&c).write_all(b"{\"v\":1,\"id\":99,\"cmd\":\"status\"}\n").unwrap();
    let r = read_line(&c, Duration::from_secs(60)).unwrap();
    assert_eq!(r["ok"]["state"], "status", "served beside 12 clients not reading: {r}");
    // Once no reply has been made for longer than the stall limit, each greedy client was
    // either told busy (its reply never made) or cut off in the middle of it.
    loop {
        let made = srv.lists.load(Ordering::Relaxed);
        std::thread::sleep(REPLY_STALL + Duration::from_secs(2));
        if srv.lists.load(Ordering::Relaxed) == made {
            break;
        }
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let grew = peak.load(Ordering::Relaxed).saturating_sub(base) >> 10;
    eprintln!("memory grew by {grew} MiB at most");
    assert!(grew < 640, "memory grew by {grew} MiB for replies nobody read");
    let (mut busy, mut cut) = (0, 0);
    for (i, g) in greedy.iter().enumerate() {
        g.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        let eof = loop {
            match (&*g).read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break false,
            }
        };
        let line: Option<Value> = got
            .iter()
            .position(|&b| b == b'\n')
            .and_then(|n| serde_json::from_slice(&got[..n]).ok());
        match line {
            Some(r) if err_code(&r) == "busy" => busy += 1,
            Some(r) => {
                panic!(
                    "client {i} got a whole reply it never read: {}",
                    &r.to_string()[..r.to_string().len().min(300)]
                )
            }
            None => {
                assert!(eof, "client {i}: {} bytes of its reply and still connected", got.len());
                cut += 1;
            }
        }
    }
    assert!(cut >= 1, "{cut} cut off, {busy} told busy");
}

/// With every slot taken by idle clients, a new client is served: the one idle longest is
/// closed (told why) to make room.
#[test]
fn idle_clients_filling_every_slot_make_room_for_a_new_one() {
    let _one = HEAVY.lock().unwrap_or_else(|e| e.into_inner());
    let srv = Server::start();
    let idle: Vec<UnixStream> = (0..MAX_CLIENTS).map(|_| srv.connect()).collect();
    std::thread::sleep(Duration::from_millis(1500));
    for round in 0..3 {
        let c = srv.connect();
        (&c).write_all(b"{\"v\":1,\"id\":7,\"cmd\":\"status\"}\n").unwrap();
        let r = read_line(&c, Duration::from_secs(10)).unwrap();
        assert_eq!(r["ok"]["state"], "status", "round {round}: {r}");
        drop(c);
    }
    let closed: Vec<Value> =
        idle.iter().filter_map(|c| read_line(c, Duration::from_millis(50)).ok()).collect();
    assert!(!closed.is_empty() && closed.len() <= 3, "{closed:?}");
    for r in &closed {
        assert_eq!(err_code(r), "busy", "{r}");
        assert!(err_msg(r).contains("idle longest"), "{r}");
    }
}

/// A data plane run by `daemon::run` on state directory `state` (memif ports: no root), until
/// dropped.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), ControlError>>>,
    sock: PathBuf,
}

impl Running {
    fn start(file: &Path, state: &Path, on_restart: daemon::OnRestart) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s, flag) = (file.to_path_buf(), state.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let topo = control::Topology::load(&f)?;
            let opts = control::runtime::Options::for_topology(&topo);
            daemon::run(&f, topo, Some(&s), 32, opts, on_restart, &flag)
        });
        let r = Running { stop, thread: Some(thread), sock: state.join("control.sock") };
        let t0 = Instant::now();
        while daemon::ask(&r.sock, Command::Hello, Duration::from_secs(1)).is_err() {
            let done = r.thread.as_ref().is_some_and(|t| t.is_finished());
            assert!(
                !done && t0.elapsed() < Duration::from_secs(30),
                "the data plane did not answer"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        r
    }

    fn ask(&self, cmd: Command) -> api::Answer {
        daemon::ask(&self.sock, cmd, Duration::from_secs(10)).expect("answered")
    }

    /// Each VR's interfaces as (VR, interface, up, held), sorted.
    fn interfaces(&self) -> Vec<(String, String, bool, bool)> {
        let s = api::Status::try_from(self.ask(Command::Status)).unwrap();
        let mut out: Vec<_> = (s.vrs.iter())
            .flat_map(|v| {
                v.interfaces.iter().map(|i| (v.name.clone(), i.name.clone(), i.up, i.held))
            })
            .collect();
        out.sort();
        out
    }

    fn set_up(&self, vr: &str, interface: &str, up: bool) {
        let cmd = Command::InterfaceSet {
            vr: vr.into(),
            interface: interface.into(),
            mtu: None,
            up: Some(up),
            addresses: None,
        };
        self.ask(cmd);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if !std::thread::panicking() {
                r.expect("no panic").expect("stopped cleanly");
            }
        }
    }
}

fn rows(list: &[(&str, &str, bool, bool)]) -> Vec<(String, String, bool, bool)> {
    list.iter().map(|(v, i, u, h)| (v.to_string(), i.to_string(), *u, *h)).collect()
}

/// Issue 23: a fenced fleet host started again on its state directory (`OnRestart::Hold`)
/// holds every VR interface that would be up down, and says so in `status`, before anything
/// else: the file's VRs and the one the journal's replay adds, a replayed `up` included; an
/// interface set `up: false` is down, not held. `interface_set up: true` takes one up and
/// clears it. A first start holds nothing, nor does a restart without the option.
#[test]
fn a_restart_that_holds_starts_every_interface_that_would_be_up_down_until_taken_up() {
    let d = TempDir::new();
    let tag = format!("rpx-held-{}", std::process::id());
    let file = d.0.join("held.yaml");
    let text = format!(
        "workers: 1\nports:\n  - {{ name: m0, kind: memif, socket: \"@{tag}-0\" }}\n  - {{ name: m1, kind: memif, socket: \"@{tag}-1\" }}\n  - {{ name: m2, kind: memif, socket: \"@{tag}-2\" }}\nvrs:\n  - name: r\n    interfaces:\n      - {{ name: a, port: m0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }}\n      - {{ name: b, port: m1, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24], up: false }}\n"
    );
    std::fs::write(&file, &text).unwrap();
    let state = d.0.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let hold = daemon::OnRestart::Hold;

    // A first start (nothing left in the directory) holds nothing, whatever the option.
    assert!(!daemon::restarted(&state));
    let r = Running::start(&file, &state, hold);
    assert_eq!(r.interfaces(), rows(&[("r", "a", true, false), ("r", "b", false, false)]));
    // A VR added live: journaled, so the restart's replay adds it.
    let more = "  - name: s\n    interfaces:\n      - { name: x, port: m2, mac: 02:00:00:00:02:00, addresses: [10.1.0.1/24] }\n";
    let cmd = Command::Apply {
        topology: format!("{text}{more}"),
        file: file.display().to_string(),
        dry_run: false,
    };
    r.ask(cmd);
    assert_eq!(r.interfaces()[2], ("s".into(), "x".into(), true, false));
    drop(r);
    assert!(daemon::restarted(&state), "the journal is left for the next start");

    // Started again with the option: down and held from the first status on.
    let r = Running::start(&file, &state, hold);
    let held = [("r", "a", false, true), ("r", "b", false, false), ("s", "x", false, true)];
    assert_eq!(r.interfaces(), rows(&held));
    r.set_up("r", "a", true);
    assert_eq!(
        r.interfaces(),
        rows(&[("r", "a", true, false), ("r", "b", false, false), ("s", "x", false, true)])
    );
    // Set down, it is down and not held; up again, up.
    r.set_up("s", "x", false);
    assert_eq!(r.interfaces()[2], ("s".into(), "x".into(), false, false));
    r.set_up("s", "x", true);
    assert_eq!(r.interfaces()[2], ("s".into(), "x".into(), true, false));
    drop(r);

    // Without the option a restart holds nothing.
    let r = Running::start(&file, &state, daemon::OnRestart::Forward);
    let up = [("r", "a", true, false), ("r", "b", false, false), ("s", "x", true, false)];
    assert_eq!(r.interfaces(), rows(&up));
    drop(r);

    // With it again: the `up`s the journal replays (r.a, s.x were set up) stay held.
    let r = Running::start(&file, &state, hold);
    assert_eq!(r.interfaces(), rows(&held));
}
