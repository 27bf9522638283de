//! `routeplex up`, `down` and `run`: a topology's hosts and its data plane as a background
//! service, with a log, a state file and a control socket at known paths; `status`, `move` and
//! `reserve` talk to that socket (workers and their VRs, moving a VR between workers, changing
//! its reservation).
//!
//! `up` makes the hosts (namespaces, veth pairs) recording each as it goes, starts `run` in
//! the background and returns once the data plane answers on its control socket. `down` stops
//! it and removes exactly what the state file records. A run that died (crash, SIGKILL) leaves
//! its state behind; the next `up` removes what it made and starts afresh, and since the XDP
//! programs hang on links that die with the process, nothing stale is left in the way.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use control::netns::{self, Made};
use control::runtime::{reservation_json, Idle, Options, Runtime};
use control::topology::reservation_from_words;
use control::{PortKind, Topology};
use serde_json::json;

use crate::sys;

/// Set by SIGTERM / SIGINT, or by a `stop` on the control socket.
static STOP: AtomicBool = AtomicBool::new(false);
/// How long `up` waits for the data plane to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Where one topology's service keeps its files.
struct Paths {
    name: String,
    dir: PathBuf,
    state: PathBuf,
    sock: PathBuf,
    log: PathBuf,
}

/// `$ROUTEPLEX_RUN_DIR` (default /run/routeplex) / the topology file's stem.
fn paths(file: &Path) -> Result<Paths> {
    let base = std::env::var_os("ROUTEPLEX_RUN_DIR")
        .map_or_else(|| PathBuf::from("/run/routeplex"), PathBuf::from);
    let name = file
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{}: cannot name a service after this file", file.display()))?
        .to_string();
    let dir = base.join(&name);
    Ok(Paths {
        state: dir.join("state.json"),
        sock: dir.join("control.sock"),
        log: dir.join("log"),
        dir,
        name,
    })
}

#[derive(serde::Serialize, serde::Deserialize)]
struct State {
    topology: PathBuf,
    pid: u32,
    made: Made,
}

fn read_state(p: &Paths) -> Result<Option<State>> {
    match std::fs::read_to_string(&p.state) {
        Ok(s) => Ok(Some(
            serde_json::from_str(&s)
                .with_context(|| format!("{}: unreadable state", p.state.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("{}", p.state.display())),
    }
}

fn write_state(p: &Paths, s: &State) -> Result<()> {
    let tmp = p.state.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(s)?)?;
    std::fs::rename(&tmp, &p.state).with_context(|| format!("{}", p.state.display()))
}

fn require_root(verb: &str) -> Result<()> {
    if sys::euid() != 0 {
        bail!(
            "routeplex {verb} needs root: it creates network namespaces and attaches to interfaces"
        );
    }
    Ok(())
}

/// Sends one command line to a service and returns its one-line answer.
fn ask(sock: &Path, cmd: &str) -> Result<String> {
    let mut s = UnixStream::connect(sock)?;
    // Longer than the runtime waits for a worker (10 s), so its own error comes through.
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    writeln!(s, "{cmd}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    Ok(line.trim_end().to_string())
}

pub fn up(file: &Path) -> Result<()> {
    require_root("up")?;
    let topo = Topology::load(file)?;
    let canonical = file.canonicalize()?;
    let p = paths(file)?;
    if let Some(st) = read_state(&p)? {
        if st.topology != canonical {
            bail!(
                "a service named {} is up from {}; take it down first",
                p.name,
                st.topology.display()
            );
        }
        if sys::alive(st.pid) {
            println!(
                "routeplex up: {} is already up (pid {}); `routeplex down {}` stops it",
                p.name,
                st.pid,
                file.display()
            );
            return Ok(());
        }
        // The previous data plane died (crash, SIGKILL). If what it made is intact, start a
        // new one on the same interfaces (programs in the namespaces keep running);
        // otherwise remove the remains and make everything again.
        let intact = st.made.namespaces.iter().all(|n| netns::namespace_exists(n))
            && st.made.links.iter().all(|l| netns::link_exists(l));
        if intact {
            eprintln!(
                "routeplex up: the data plane of {} (pid {}) is gone; starting a new one",
                p.name, st.pid
            );
            return start(file, &topo, &p, st);
        }
        eprintln!(
            "routeplex up: {} (pid {}) is gone and what it made is damaged; making it again",
            p.name, st.pid
        );
        report_leftovers(netns::remove(&st.made))?;
        std::fs::remove_file(&p.state)?;
    }
    std::fs::create_dir_all(&p.dir).with_context(|| format!("{}", p.dir.display()))?;
    let mut st = State { topology: canonical, pid: 0, made: Made::default() };
    let made = netns::make(&topo, &mut st.made);
    write_state(&p, &st)?;
    if let Err(e) = made {
        report_leftovers(netns::remove(&st.made))?;
        std::fs::remove_dir_all(&p.dir)?;
        bail!("{e}");
    }
    start(file, &topo, &p, st)
}

/// Starts the data plane in the background and waits until it answers; on failure, removes
/// what `st` records.
fn start(file: &Path, topo: &Topology, p: &Paths, mut st: State) -> Result<()> {
    let _ = std::fs::remove_file(&p.sock);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&p.log)?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("run")
        .arg(file)
        .arg("--state-dir")
        .arg(&p.dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the data plane")?;
    st.pid = child.id();
    write_state(p, &st)?;
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            let tail = std::fs::read_to_string(&p.log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            report_leftovers(netns::remove(&st.made))?;
            std::fs::remove_file(&p.state)?;
            bail!(
                "the data plane exited ({status}): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        if ask(&p.sock, "status").is_ok() {
            break;
        }
        if t0.elapsed() > READY_TIMEOUT {
            sys::kill(st.pid, libc::SIGKILL);
            report_leftovers(netns::remove(&st.made))?;
            std::fs::remove_file(&p.state)?;
            bail!(
                "the data plane did not answer within {} s; see {}",
                READY_TIMEOUT.as_secs(),
                p.log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let hosts: Vec<&str> = topo.hosts.iter().map(|h| h.name.as_str()).collect();
    println!(
        "routeplex up: {} forwarding (pid {}): {} VR(s), {} port(s), hosts {}; log {}, control {}",
        p.name,
        st.pid,
        topo.vrs.len(),
        topo.ports.len(),
        if hosts.is_empty() { "none".to_string() } else { hosts.join(", ") },
        p.log.display(),
        p.sock.display()
    );
    Ok(())
}

pub fn down(file: &Path) -> Result<()> {
    require_root("down")?;
    let p = paths(file)?;
    let Some(st) = read_state(&p)? else {
        println!("routeplex down: {} is not up", p.name);
        return Ok(());
    };
    if sys::alive(st.pid) {
        let asked = ask(&p.sock, "stop").is_ok();
        if !wait_gone(st.pid, if asked { 10_000 } else { 0 }) {
            sys::kill(st.pid, libc::SIGTERM);
            if !wait_gone(st.pid, 3_000) {
                sys::kill(st.pid, libc::SIGKILL);
                wait_gone(st.pid, 3_000);
            }
        }
    }
    report_leftovers(netns::remove(&st.made))?;
    std::fs::remove_dir_all(&p.dir).with_context(|| format!("{}", p.dir.display()))?;
    println!(
        "routeplex down: {} stopped; removed {} namespace(s) and {} link(s)",
        p.name,
        st.made.namespaces.len(),
        st.made.links.len()
    );
    Ok(())
}

fn wait_gone(pid: u32, ms: u64) -> bool {
    let t0 = Instant::now();
    while sys::alive(pid) {
        if t0.elapsed() >= Duration::from_millis(ms) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn report_leftovers(errors: Vec<netns::NetError>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
    bail!("could not remove everything: {}", msgs.join("; "))
}

/// The data plane in the foreground: the topology's workers (by default one per online CPU,
/// each pinned to its CPU) running its cells, and the control socket (when `state_dir` is
/// given), until SIGTERM/SIGINT or `stop`.
pub fn run(file: &Path, state_dir: Option<&Path>, burst: usize) -> Result<()> {
    let topo = Topology::load(file)?;
    if let Some(p) = topo.ports.iter().find(|p| matches!(p.kind, PortKind::Mem { .. })) {
        bail!(
            "port {} is kind mem, an in-process pair for tests and benchmarks: routeplex run serves ports with a peer outside (afxdp, afpacket, tap)",
            p.name
        );
    }
    let host = control::build::host(&topo, None, burst)?;
    sys::stop_on_signals(&STOP);
    let mut opts = Options::for_topology(&topo);
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    // Spin while there is traffic, yield the CPU between empty polls: the CPUs may be shared
    // with the hosts' own work.
    opts.idle = Idle::Yield;
    let workers = opts.cpus.len();
    let mut rt = Runtime::start(host.cells, opts)?;
    eprintln!(
        "routeplex run: {} forwarding on {} port(s) with {workers} worker(s) (pid {}): {}",
        file.display(),
        topo.ports.len(),
        std::process::id(),
        rt.placement().iter().map(|(v, w)| format!("{v} on {w}")).collect::<Vec<_>>().join(", ")
    );
    let served = match state_dir {
        Some(dir) => serve(&dir.join("control.sock"), &mut rt),
        None => {
            while !STOP.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        }
    };
    STOP.store(true, Ordering::Relaxed);
    let last = status(&rt);
    rt.stop()?;
    eprintln!("routeplex run: stopped: {last}");
    served
}

/// Answers commands on the control socket until stopped: one line in, one JSON line out.
fn serve(sock: &Path, rt: &mut Runtime) -> Result<()> {
    let _ = std::fs::remove_file(sock);
    let listener = UnixListener::bind(sock).with_context(|| format!("{}", sock.display()))?;
    listener.set_nonblocking(true)?;
    while !STOP.load(Ordering::Relaxed) {
        let (mut s, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut line = String::new();
        let _ = BufReader::new(&s).read_line(&mut line);
        let answer = command(rt, line.trim());
        let _ = writeln!(s, "{answer}");
    }
    let _ = std::fs::remove_file(sock);
    Ok(())
}

/// One control command and its JSON answer:
/// - `status`: workers and their VRs, every VR's counters (`over_budget` always), worker and
///   reservation, every port's counters;
/// - `stop`;
/// - `move VR WORKER`: moves VR, with whatever shares its ports, to WORKER;
/// - `reserve VR packets=N|time_us=N [period_us=N] [weight=N]` or `reserve VR none`: sets its
///   reservation (from its next period if one is running).
fn command(rt: &mut Runtime, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let error = |e: String| json!({ "error": e }).to_string();
    match words.as_slice() {
        ["status"] => status(rt),
        ["stop"] => {
            STOP.store(true, Ordering::Relaxed);
            "{\"state\":\"stopping\"}".into()
        }
        ["move", vr, worker] => {
            let Ok(w) = worker.parse::<usize>() else {
                return error(format!("worker must be a number, not {worker:?}"));
            };
            match rt.move_vr(vr, w) {
                Ok(m) => json!({ "moved": m.vrs, "from": m.from, "to": m.to }).to_string(),
                Err(e) => error(e.0),
            }
        }
        ["reserve", vr, spec @ ..] => {
            let r = match reservation_from_words(spec) {
                Ok(r) => r,
                Err(e) => return error(e),
            };
            if let Err(e) = rt.set_reservation(vr, r) {
                return error(e.0);
            }
            match rt.snapshot() {
                Ok(s) => {
                    let v = s.vr(vr).map(|(_, v)| v);
                    json!({
                        "vr": vr,
                        "reservation": v.and_then(|v| v.reservation).map(reservation_json),
                        "pending_reservation": v.and_then(|v| v.pending).map(|p| p.map(reservation_json)),
                    })
                    .to_string()
                }
                Err(e) => error(e.0),
            }
        }
        _ => error(format!(
            "unknown command {line:?}: status, stop, move VR WORKER, reserve VR (packets=N|time_us=N) [period_us=N] [weight=N], reserve VR none"
        )),
    }
}

/// The runtime's status as one JSON line.
fn status(rt: &Runtime) -> String {
    match rt.snapshot() {
        Ok(s) => {
            let mut j = s.to_json();
            j["state"] = json!("running");
            j.to_string()
        }
        Err(e) => json!({ "error": e.0 }).to_string(),
    }
}

/// `routeplex status|move|reserve`: sends one command to a running data plane (found by its
/// topology file, or `state_dir`) and prints the answer; fails if the answer is an error.
pub fn control(file: &Path, state_dir: Option<&Path>, cmd: &str) -> Result<()> {
    // The protocol is one line of words: a line break would smuggle in a second command.
    if cmd.contains(['\n', '\r']) {
        bail!("{cmd:?}: arguments cannot contain line breaks");
    }
    let sock = match state_dir {
        Some(d) => d.join("control.sock"),
        None => paths(file)?.sock,
    };
    let reply =
        ask(&sock, cmd).with_context(|| format!("{}: is the data plane up?", sock.display()))?;
    println!("{reply}");
    if let Some(e) = serde_json::from_str::<serde_json::Value>(&reply)
        .ok()
        .and_then(|v| v.get("error").map(|e| e.as_str().unwrap_or_default().to_string()))
    {
        bail!("{e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The control commands against a runtime on mem ports (no socket, no root).
    #[test]
    fn control_commands_move_reserve_and_report() {
        let text = "\
workers: 2
ports:
  - { name: p0, kind: mem }
  - { name: p1, kind: mem }
vrs:
  - name: a
    interfaces: [{ name: e0, port: p0, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }]
  - name: b
    reservation: { packets: 100 }
    interfaces: [{ name: e0, port: p1, mac: 02:00:00:00:02:00, addresses: [10.0.1.1/24] }]
";
        let topo = Topology::parse(text, "t.yaml", Path::new(".")).unwrap();
        let host = control::build::host(&topo, None, 256).unwrap();
        let mut rt = Runtime::start(host.cells, Options::new(2)).unwrap();
        let j = |s: String| serde_json::from_str::<serde_json::Value>(&s).unwrap();
        let st = j(command(&mut rt, "status"));
        assert_eq!(st["state"], "running");
        assert_eq!(st["workers"].as_array().unwrap().len(), 2);
        let b = st["vrs"].as_array().unwrap().iter().find(|v| v["name"] == "b").unwrap().clone();
        assert_eq!((&b["over_budget"], &b["reservation"]["packets"]), (&0.into(), &100.into()));

        let to = 1 - rt.worker_of("a").unwrap();
        let m = j(command(&mut rt, &format!("move a {to}")));
        assert_eq!((&m["moved"], &m["to"]), (&json!(["a"]), &json!(to)));
        assert_eq!(rt.worker_of("a"), Some(to));
        assert!(j(command(&mut rt, "move a 9"))["error"].as_str().unwrap().contains("no worker 9"));
        assert!(j(command(&mut rt, "move a x"))["error"].is_string());

        let r = j(command(&mut rt, "reserve a time_us=300 period_us=1000 weight=2"));
        assert_eq!(r["reservation"]["time_ns"], 300_000, "{r}");
        assert_eq!(r["reservation"]["weight"], 2);
        let r = j(command(&mut rt, "reserve a none"));
        assert_eq!(r["reservation"], json!(null), "no period had started: at once");
        let e = j(command(&mut rt, "reserve a packets=0"));
        assert_eq!(e["error"], "packets 0 is out of range 1..=1000000000");
        assert!(j(command(&mut rt, "reserve nobody none"))["error"].is_string());
        assert!(j(command(&mut rt, "dance"))["error"]
            .as_str()
            .unwrap()
            .contains("unknown command"));
        rt.stop().unwrap();
    }
}
