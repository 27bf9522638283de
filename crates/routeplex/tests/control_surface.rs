//! The control daemon's hardening, through the real binary: `routeplex up` / `down` and raw
//! clients on the control socket. File modes whatever the umask, peer credentials (a client
//! running as uid 65534), idle, slow, trickling and oversized clients, the client limit, a
//! recorded pid that another process now has, service names that could escape their
//! directory, a corrupt state file, and `down` of a topology that is not up.
//!
//! Needs root (CI is root); each test says so and passes otherwise. Each test uses names of its
//! own (namespace, veth, topology file and `ROUTEPLEX_RUN_DIR`, all with this process's id) and
//! cleans up in a drop guard, even when it fails. The tests run one at a time: each data plane
//! polls a CPU, and this machine may have two.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The unprivileged user (and group) raw clients run as.
const NOBODY: u32 = 65534;
/// Set in the environment of [`nobody_client`], re-executed as [`NOBODY`]: the socket.
const CLIENT_SOCK: &str = "RPX_CS_CLIENT_SOCK";
/// The request line it sends (without the newline).
const CLIENT_LINE: &str = "RPX_CS_CLIENT_LINE";
/// Or, instead of a request, a line of this many bytes.
const CLIENT_PAD: &str = "RPX_CS_CLIENT_PAD";

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> bool {
    let ok = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !ok {
        eprintln!("skipped: needs root (routeplex up/down, namespaces, a client as uid {NOBODY}); CI runs as root");
    }
    ok
}

fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o777
}

fn chmod(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// A process's start time (field 22 of /proc/PID/stat), `None` when it is gone or a zombie.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    if rest.next()? == "Z" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

fn kill9(pid: u32, started: u64) {
    if start_time(pid) == Some(started) {
        let _ = sh("kill", &["-9", &pid.to_string()]);
    }
}

/// Waits (5 s at most) until `pid` no longer names the process that started at `started`.
fn wait_gone(pid: u32, started: u64) -> bool {
    let t0 = Instant::now();
    while start_time(pid) == Some(started) {
        if t0.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A /proc/PID/status field in kB.
fn proc_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field}: {s}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One reply line from `s`, within `timeout`: `Ok(line)`, or `Err` saying what happened
/// instead (closed without a reply, timed out, an error).
fn read_line(s: &UnixStream, timeout: Duration) -> Result<String, String> {
    let t0 = Instant::now();
    let mut line = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = timeout.checked_sub(t0.elapsed()).ok_or("timed out")?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
        match (&mut &*s).read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&line))),
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(i) = line.iter().position(|&b| b == b'\n') {
                    return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("timed out after {:?}", t0.elapsed()))
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

fn json(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line}"))
}

/// A reply's error code, or "ok".
fn code(reply: &Value) -> String {
    if reply.get("ok").is_some() {
        "ok".into()
    } else {
        reply["err"]["code"].as_str().unwrap_or("?").into()
    }
}

/// The topology: one VR on one afpacket port, on a host `up` makes (`host`), or on a memif
/// server port, which makes nothing in the kernel. One worker.
fn topology(t: &str, host: bool, dir: &Path) -> String {
    let port = if host {
        format!(
            "hosts:\n  - {{ name: h{t}, addresses: [10.77.0.2/24] }}\nports:\n  - {{ name: p{t}, kind: afpacket, host: h{t} }}\n"
        )
    } else {
        format!(
            "ports:\n  - {{ name: p{t}, kind: memif, role: server, socket: {}/m.sock }}\n",
            dir.display()
        )
    };
    format!(
        "workers: 1\n{port}vrs:\n  - name: r\n    interfaces:\n      - {{ name: e0, port: p{t}, mac: \"02:00:00:00:77:01\", addresses: [10.77.0.1/24] }}\n"
    )
}

/// A topology file in a temporary directory of its own, its service (`ROUTEPLEX_RUN_DIR` is
/// `DIR/run`), and its cleanup.
struct Service {
    dir: PathBuf,
    file: PathBuf,
    tag: String,
    /// Data planes seen (pid, start time): killed on drop if still running.
    seen: RefCell<Vec<(u32, u64)>>,
}

impl Service {
    fn new(host: bool) -> Service {
        let tag =
            format!("{:x}{}", std::process::id() % 0xfff, NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("rpx-cs-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        chmod(&dir, 0o755);
        let file = dir.join(format!("cs{tag}.yaml"));
        std::fs::write(&file, topology(&tag, host, &dir)).unwrap();
        Service { dir, file, tag, seen: RefCell::default() }
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The service's own directory.
    fn sdir(&self) -> PathBuf {
        self.run_dir().join(format!("cs{}", self.tag))
    }

    fn sock(&self) -> PathBuf {
        self.sdir().join("control.sock")
    }

    fn state_path(&self) -> PathBuf {
        self.sdir().join("state.json")
    }

    fn ns(&self) -> String {
        format!("h{}", self.tag)
    }

    fn link(&self) -> String {
        format!("rpx-p{}", self.tag)
    }

    fn command(&self, verb: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_routeplex"));
        c.arg(verb).arg(&self.file).env("ROUTEPLEX_RUN_DIR", self.run_dir());
        c
    }

    fn routeplex(&self, verb: &str) -> Output {
        self.command(verb).output().unwrap()
    }

    fn note_running(&self) {
        if let Ok(st) = std::fs::read_to_string(self.state_path()) {
            if let Ok(v) = serde_json::from_str::<Value>(&st) {
                let (pid, started) = (v["pid"].as_u64(), v["started"].as_u64());
                if let (Some(pid), Some(started)) = (pid, started) {
                    self.seen.borrow_mut().push((pid as u32, started));
                }
            }
        }
    }

    fn up_with(&self, mut c: Command) -> String {
        let o = c.output().unwrap();
        self.note_running();
        assert!(o.status.success(), "routeplex up failed: {}", text(&o));
        text(&o)
    }

    fn up(&self) -> String {
        self.up_with(self.command("up"))
    }

    fn state(&self) -> Value {
        json(&std::fs::read_to_string(self.state_path()).unwrap())
    }

    /// The data plane's pid and start time, from the state file.
    fn pid(&self) -> (u32, u64) {
        let st = self.state();
        (st["pid"].as_u64().unwrap() as u32, st["started"].as_u64().unwrap())
    }

    fn connect(&self) -> UnixStream {
        UnixStream::connect(self.sock())
            .unwrap_or_else(|e| panic!("{}: {e}", self.sock().display()))
    }

    /// Sends one request line on a new connection and returns the reply (10 s at most).
    fn ask(&self, line: &str) -> Value {
        let mut c = self.connect();
        // A client the daemon refuses (busy) may be closed before it writes: the reply counts.
        let _ = c.write_all(format!("{line}\n").as_bytes());
        json(&read_line(&c, Duration::from_secs(10)).unwrap_or_else(|e| panic!("{line}: {e}")))
    }

    fn status(&self) -> Value {
        let r = self.ask(r#"{"v":1,"id":1,"cmd":"status"}"#);
        assert_eq!(code(&r), "ok", "status: {r}");
        r
    }

    /// Runs [`nobody_client`] as uid and gid [`NOBODY`]: it connects to the socket, sends
    /// `line` (or `pad` bytes and a newline) and returns what it reports: `REPLY <line>`,
    /// `CLOSED ...` or `CONNECT <error>`.
    fn as_nobody(&self, line: &str, pad: Option<usize>) -> String {
        // A copy of this test binary where uid 65534 can surely run it.
        let exe = self.dir.join("client");
        if !exe.exists() {
            std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
            chmod(&exe, 0o755);
        }
        let mut c = Command::new(&exe);
        c.args(["--exact", "nobody_client", "--nocapture", "--test-threads=1"])
            .env(CLIENT_SOCK, self.sock())
            .env(CLIENT_LINE, line)
            .uid(NOBODY)
            .gid(NOBODY);
        if let Some(n) = pad {
            c.env(CLIENT_PAD, n.to_string());
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        // libtest prints "test nobody_client ... " before it, on the same line.
        let said = ["REPLY ", "CLOSED ", "CONNECT "].iter().find_map(|m| out.find(m));
        let said =
            said.unwrap_or_else(|| panic!("the client as uid {NOBODY} said nothing: {}", text(&o)));
        out[said..].lines().next().unwrap().to_string()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // The test may have changed modes or the state; put back what `down` needs.
        if self.sdir().is_dir() {
            chmod(&self.sdir(), 0o700);
        }
        let _ = self.routeplex("down");
        for &(pid, started) in self.seen.borrow().iter() {
            kill9(pid, started);
        }
        let _ = sh("ip", &["link", "del", &self.link()]);
        let _ = sh("ip", &["netns", "del", &self.ns()]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process of our own, unrelated to routeplex, killed on drop.
struct Sleeper(Child);

impl Sleeper {
    /// Started 50 ms before anything the test starts next: a process's start time counts in
    /// clock ticks (10 ms), and a data plane started in the sleeper's tick would pass for the
    /// sleeper, which is what the pid-reuse check compares (CI once saw `up` say "already up"
    /// with the sleeper's pid in the state file).
    fn new() -> Sleeper {
        let s = Sleeper(Command::new("sleep").arg("120").spawn().unwrap());
        std::thread::sleep(Duration::from_millis(50));
        s
    }

    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Not a test of its own: the client side of the peer credential tests, run by re-executing
/// this test binary as uid 65534 with [`CLIENT_SOCK`] set. Prints one line saying what
/// happened (see [`Service::as_nobody`]).
#[test]
fn nobody_client() {
    let Ok(sock) = std::env::var(CLIENT_SOCK) else { return };
    let mut c = match UnixStream::connect(&sock) {
        Ok(c) => c,
        Err(e) => {
            println!("CONNECT {e}");
            return;
        }
    };
    let line = match std::env::var(CLIENT_PAD) {
        Ok(n) => vec![b' '; n.parse().unwrap()],
        Err(_) => std::env::var(CLIENT_LINE).unwrap().into_bytes(),
    };
    // The server may refuse before reading: a failed write is not the answer, the reply is.
    let _ = c.write_all(&line).and_then(|()| c.write_all(b"\n"));
    match read_line(&c, Duration::from_secs(20)) {
        Ok(r) => println!("REPLY {r}"),
        Err(e) => println!("CLOSED {e}"),
    }
}

/// `up` under umask 000: the run directory is 0700 and the state, log and socket 0600; the
/// directory above, which `up` makes too, is not writable by others; an existing service
/// directory with loose modes is tightened, and one that is a symlink refused.
#[test]
fn files_are_private_whatever_the_umask() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    let mut up = Command::new("sh");
    up.args(["-c", "umask 000; exec \"$0\" up \"$1\""])
        .arg(env!("CARGO_BIN_EXE_routeplex"))
        .arg(&s.file)
        .env("ROUTEPLEX_RUN_DIR", s.run_dir());
    s.up_with(up);
    assert_eq!(mode(&s.sdir()), 0o700, "service directory");
    for f in ["state.json", "log", "control.sock"] {
        assert_eq!(mode(&s.sdir().join(f)), 0o600, "{f}");
    }
    assert!(!s.sdir().join("state.tmp").exists(), "no temporary state left");
    assert_eq!(mode(&s.run_dir()) & 0o022, 0, "{} is writable by others", s.run_dir().display());
    s.status();
    let o = s.routeplex("down");
    assert!(o.status.success(), "{}", text(&o));
    assert!(!s.sdir().exists(), "down removes the service directory");

    // A service directory left with loose modes (by hand, an older version) is tightened.
    std::fs::create_dir(s.sdir()).unwrap();
    chmod(&s.sdir(), 0o777);
    s.up();
    assert_eq!(mode(&s.sdir()), 0o700, "an existing service directory is tightened");
    assert!(s.routeplex("down").status.success());

    // A symlink in its place is refused, and what it points to is left alone.
    let elsewhere = s.dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    chmod(&elsewhere, 0o755);
    std::os::unix::fs::symlink(&elsewhere, s.sdir()).unwrap();
    let o = s.routeplex("up");
    assert!(!o.status.success(), "up through a symlink: {}", text(&o));
    assert!(text(&o).contains("is not a directory owned by uid 0"), "{}", text(&o));
    assert_eq!(mode(&elsewhere), 0o755);
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through it");
    std::fs::remove_file(s.sdir()).unwrap();
}

/// A client running as uid 65534 cannot even reach the socket (the directory is 0700); with
/// the modes opened up by hand, the daemon itself refuses it (SO_PEERCRED): it cannot stop
/// the data plane or read its status, and root still can.
#[test]
fn other_users_are_refused_by_the_daemon() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    s.up();
    let (pid, started) = s.pid();
    let stop = r#"{"v":1,"id":5,"cmd":"stop"}"#;
    let said = s.as_nobody(stop, None);
    assert!(said.starts_with("CONNECT ") && said.contains("ermission denied"), "{said}");

    chmod(&s.sdir(), 0o711);
    chmod(&s.sock(), 0o666);
    for line in [stop, r#"{"v":1,"id":6,"cmd":"status"}"#] {
        let said = s.as_nobody(line, None);
        let reply = json(said.strip_prefix("REPLY ").unwrap_or_else(|| panic!("{said}")));
        assert_eq!(code(&reply), "permission", "{line}: {reply}");
        assert!(reply.get("ok").is_none(), "{reply}");
    }
    chmod(&s.sdir(), 0o700);
    chmod(&s.sock(), 0o600);
    assert_eq!(start_time(pid), Some(started), "the data plane still runs");
    assert_eq!(s.status()["ok"]["state"], "running");
    assert!(s.routeplex("down").status.success());
}

/// With `ROUTEPLEX_STATUS_GID`, members of that group reach the socket (the directory is 0710
/// and the socket 0660, both in that group) and may read, but not stop the data plane, and
/// their lines are held to the read-only limit.
#[test]
fn the_status_group_reads_only() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    let mut up = s.command("up");
    up.env("ROUTEPLEX_STATUS_GID", NOBODY.to_string());
    s.up_with(up);
    let (dir, sock) = (std::fs::metadata(s.sdir()).unwrap(), std::fs::metadata(s.sock()).unwrap());
    assert_eq!((dir.mode() & 0o777, dir.gid()), (0o710, NOBODY), "service directory");
    assert_eq!((sock.mode() & 0o777, sock.gid()), (0o660, NOBODY), "socket");
    assert_eq!(mode(&s.state_path()), 0o600);

    let said = s.as_nobody(r#"{"v":1,"id":6,"cmd":"status"}"#, None);
    let reply = json(said.strip_prefix("REPLY ").unwrap_or_else(|| panic!("{said}")));
    assert_eq!(code(&reply), "ok", "the status group reads status: {reply}");
    let said = s.as_nobody(r#"{"v":1,"id":5,"cmd":"stop"}"#, None);
    let reply = json(said.strip_prefix("REPLY ").unwrap_or_else(|| panic!("{said}")));
    assert_eq!(code(&reply), "permission", "{reply}");
    assert!(reply["err"]["msg"].as_str().unwrap().contains("stop needs root"), "{reply}");
    let said = s.as_nobody("", Some(100 << 10));
    let reply = json(said.strip_prefix("REPLY ").unwrap_or_else(|| panic!("{said}")));
    assert_eq!(code(&reply), "bad_request", "{reply}");
    assert!(reply["err"]["msg"].as_str().unwrap().contains("longer than 65536"), "{reply}");
    assert_eq!(s.status()["ok"]["state"], "running");
    assert!(s.routeplex("down").status.success());
}

/// Idle, half-sent, trickling and oversized clients hold up nobody: `status` answers at once
/// beside them, and each is cut off (a line must come whole within 10 s of its first byte,
/// and be at most 32 MiB) without the daemon's memory growing past the limit. The 65th client
/// at once is told the daemon is busy.
#[test]
fn idle_slow_and_huge_clients_hold_up_nobody() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    s.up();
    let (pid, _) = s.pid();
    let fast = Duration::from_secs(5);

    let idle: Vec<UnixStream> = (0..5).map(|_| s.connect()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.status();
    assert!(t0.elapsed() < fast, "status beside 5 idle clients took {:?}", t0.elapsed());

    // Half a line, then nothing.
    let mut slow = s.connect();
    slow.write_all(br#"{"v":1,"id":9,"cmd":"#).unwrap();
    let slow_t0 = Instant::now();
    // One byte every 100 ms: never silent for long, but never done either.
    let sock = s.sock();
    let trickle = std::thread::spawn(move || {
        let mut c = UnixStream::connect(sock).unwrap();
        c.write_all(br#"{"v":1,"id":10,"cmd":"status""#).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if c.write_all(b" ").is_err() {
                break;
            }
            if let Ok(r) = read_line(&c, Duration::from_millis(100)) {
                return (r, t0.elapsed());
            }
        }
        // Not cut off: finish the line, whose answer the test then refuses.
        let _ = c.write_all(b"}\n");
        (read_line(&c, Duration::from_secs(10)).unwrap_or_else(|e| e), t0.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.status();
    assert!(t0.elapsed() < fast, "status beside a slow writer took {:?}", t0.elapsed());

    // 40 MiB without a newline: refused once past 32 MiB, and the connection closed.
    let mut huge = s.connect();
    let writer = {
        let mut w = huge.try_clone().unwrap();
        std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 16];
            let mut sent = 0usize;
            while sent < 40 << 20 {
                match w.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
            sent
        })
    };
    let t0 = Instant::now();
    s.status();
    assert!(t0.elapsed() < fast, "status beside a huge writer took {:?}", t0.elapsed());
    let reply = json(&read_line(&huge, Duration::from_secs(60)).expect("the huge line's reply"));
    assert_eq!(code(&reply), "bad_request", "{reply}");
    assert!(reply["err"]["msg"].as_str().unwrap().contains("longer than"), "{reply}");
    let sent = writer.join().unwrap();
    assert!(sent < 40 << 20, "the daemon read all {sent} bytes instead of closing");
    // Closed after the refusal: end of stream, or a reset (it left bytes unread).
    let mut rest = Vec::new();
    huge.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let end = huge.read_to_end(&mut rest);
    assert!(
        matches!(&end, Ok(0))
            || end.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "not closed after the refusal: {end:?}, {} more bytes",
        rest.len()
    );
    let (hwm, rss) = (proc_kb(pid, "VmHWM:"), proc_kb(pid, "VmRSS:"));
    eprintln!("daemon memory after the huge line: VmHWM {hwm} kB, VmRSS {rss} kB");
    assert!(hwm < 200 << 10, "the daemon's memory peaked at {hwm} kB");

    // The half line is cut off 10 s after its first byte; so is the trickle.
    let reply = json(&read_line(&slow, Duration::from_secs(20)).expect("the slow line's reply"));
    let waited = slow_t0.elapsed();
    assert_eq!(code(&reply), "bad_request", "{reply}");
    assert!(reply["err"]["msg"].as_str().unwrap().contains("took longer than 10 s"), "{reply}");
    assert!(waited >= Duration::from_secs(9), "cut off after only {waited:?}");
    let (r, after) = trickle.join().unwrap();
    let reply = json(&r);
    assert_eq!(code(&reply), "bad_request", "a trickle is cut off too ({after:?}): {reply}");
    assert!(reply["err"]["msg"].as_str().unwrap().contains("took longer than 10 s"), "{reply}");
    assert!(after < Duration::from_secs(20), "cut off only after {after:?}");
    drop(idle);
    drop(slow);
    drop(huge);

    // The client limit: with 64 connected, the 65th is told so; once one leaves, all is well.
    let t0 = Instant::now();
    let mut many: Vec<UnixStream> = (0..64).map(|_| s.connect()).collect();
    let reply = s.ask(r#"{"v":1,"id":12,"cmd":"status"}"#);
    assert_eq!(code(&reply), "busy", "the 65th client: {reply}");
    many.truncate(10);
    let reply = loop {
        let r = s.ask(r#"{"v":1,"id":13,"cmd":"status"}"#);
        if code(&r) != "busy" || t0.elapsed() > Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code(&reply), "ok", "{reply}");
    drop(many);
    assert!(s.routeplex("down").status.success());
}

/// The data plane dies (SIGKILL) and its pid goes to an unrelated process: the state file
/// still names the pid, with the dead one's start time. `up` does not take it for the data
/// plane (no "already up"; a new one starts), and `down` signals nothing and removes the
/// service, its namespace and its link.
#[test]
fn a_reused_pid_is_never_taken_for_the_data_plane() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(true);
    let mut sleeper = Sleeper::new();
    let other = sleeper.0.id();
    let reuse = |s: &Service| {
        let (pid, started) = s.pid();
        kill9(pid, started);
        assert!(wait_gone(pid, started), "pid {pid} survived SIGKILL");
        let mut st = s.state();
        st["pid"] = other.into();
        std::fs::write(s.state_path(), st.to_string()).unwrap();
        assert_eq!(mode(&s.state_path()), 0o600);
    };
    s.up();
    reuse(&s);
    let out = s.up();
    assert!(!out.contains("already up"), "{out}");
    assert!(out.contains("starting a new one"), "{out}");
    let (pid, _) = s.pid();
    assert_ne!(pid, other, "a new data plane");
    assert_eq!(s.status()["ok"]["state"], "running");
    assert!(sleeper.alive(), "up left the unrelated process alone");

    reuse(&s);
    let o = s.routeplex("down");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("is another process now"), "{}", text(&o));
    std::thread::sleep(Duration::from_millis(200));
    assert!(sleeper.alive(), "down killed an unrelated process");
    assert!(!s.sdir().exists(), "down removes the state");
    assert!(!Path::new("/sys/class/net").join(s.link()).exists(), "link left");
    assert!(!Path::new("/run/netns").join(s.ns()).exists(), "namespace left");
}

/// A topology file named `..yaml`, `.yaml` or `...yaml` names no service: `up` and `down`
/// refuse it by name and touch nothing under `ROUTEPLEX_RUN_DIR` or above it.
#[test]
fn dot_names_cannot_reach_outside_their_directory() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    let run = s.run_dir();
    std::fs::create_dir(&run).unwrap();
    chmod(&run, 0o755);
    for f in ["sentinel", "state.json", "log"] {
        std::fs::write(run.join(f), "keep\n").unwrap();
        std::fs::write(s.dir.join(f), "keep\n").unwrap();
    }
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let (before_run, before_dir) = (listing(&run), listing(&s.dir));
    let topo = std::fs::read_to_string(&s.file).unwrap();
    for name in ["..yaml", ".yaml", "...yaml"] {
        let file = s.dir.join(name);
        std::fs::write(&file, &topo).unwrap();
        for verb in ["up", "down"] {
            let o = Command::new(env!("CARGO_BIN_EXE_routeplex"))
                .arg(verb)
                .arg(&file)
                .env("ROUTEPLEX_RUN_DIR", &run)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(1), "{verb} {name}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("is not a usable name") && err.contains("rename"), "{err}");
        }
        std::fs::remove_file(&file).unwrap();
    }
    assert_eq!(listing(&run), before_run, "{}", run.display());
    assert_eq!(listing(&s.dir), before_dir, "{}", s.dir.display());
    assert_eq!(mode(&run), 0o755, "{} kept its mode", run.display());
    for f in ["sentinel", "state.json", "log"] {
        assert_eq!(std::fs::read_to_string(run.join(f)).unwrap(), "keep\n", "{f}");
    }
}

/// A state file that cannot be trusted (writable by others) or read (garbage): `down` and
/// `up` refuse, say how to recover, and leave the data plane running; the recovery they
/// describe (stop it, remove what it made, remove the directory) works.
#[test]
fn a_corrupt_state_says_how_to_recover() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(true);
    s.up();
    let (pid, started) = s.pid();
    let original = s.state();

    chmod(&s.state_path(), 0o666);
    let o = s.routeplex("down");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not trusted"), "{}", text(&o));
    chmod(&s.state_path(), 0o600);

    std::fs::write(s.state_path(), "{\"pid\": 1, garbage").unwrap();
    for verb in ["down", "up"] {
        let o = s.routeplex(verb);
        assert_eq!(o.status.code(), Some(1), "{verb}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("corrupt") && err.contains("remove"), "{verb}: {err}");
        assert!(err.contains(&s.sdir().display().to_string()), "{verb} names the directory: {err}");
    }
    assert_eq!(start_time(pid), Some(started), "the data plane was left running");
    assert!(s.state_path().exists());

    // The recovery, by hand: stop the data plane, remove what it made, then the directory.
    kill9(pid, started);
    assert!(wait_gone(pid, started));
    for l in original["made"]["links"].as_array().unwrap() {
        assert!(sh("ip", &["link", "del", l.as_str().unwrap()]).status.success());
    }
    for n in original["made"]["namespaces"].as_array().unwrap() {
        assert!(sh("ip", &["netns", "del", n.as_str().unwrap()]).status.success());
    }
    std::fs::remove_dir_all(s.sdir()).unwrap();
    s.up();
    assert_eq!(s.status()["ok"]["state"], "running");
    assert!(s.routeplex("down").status.success());
}

/// `down` (and `status`) of a topology that was never up fail, saying so.
#[test]
fn down_of_a_topology_never_up_fails() {
    let _serial = serial();
    if !root() {
        return;
    }
    let s = Service::new(false);
    let o = s.routeplex("down");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not up"), "{}", text(&o));
    let o = s.routeplex("status");
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no data plane answers for"), "{}", text(&o));
    assert!(err.contains("`routeplex up FILE` starts one"), "{}", text(&o));
    assert!(!s.sdir().exists(), "nothing made");
}
