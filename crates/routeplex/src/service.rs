//! `routeplex up`, `down` and `run`: a topology's hosts and its data plane as a background
//! service, with a log, a state file and a control socket at known paths.
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
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use control::netns::{self, Made};
use control::{PortKind, Topology};
use dataplane::Engine;
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
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
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

/// The data plane in the foreground: one worker polling every port, the control socket (when
/// `state_dir` is given) or a status line each second, until SIGTERM/SIGINT or `stop`.
pub fn run(file: &Path, state_dir: Option<&Path>, burst: usize) -> Result<()> {
    let topo = Topology::load(file)?;
    if let Some(p) = topo.ports.iter().find(|p| matches!(p.kind, PortKind::Mem { .. })) {
        bail!(
            "port {} is kind mem, an in-process pair for tests and benchmarks: routeplex run serves ports with a peer outside (afxdp, afpacket, tap)",
            p.name
        );
    }
    let built = control::build::engine_with_burst(&topo, None, burst)?;
    sys::stop_on_signals(&STOP);
    let (req_tx, req_rx) = mpsc::channel::<mpsc::Sender<String>>();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let worker = std::thread::Builder::new().name("worker".into()).spawn(move || {
        let mut engine = built.engine;
        if cpus > 1 {
            sys::pin(cpus - 1);
        }
        let t0 = Instant::now();
        let mut polls = 0u32;
        while !STOP.load(Ordering::Relaxed) {
            if engine.poll(t0.elapsed().as_nanos() as u64) == 0 {
                std::hint::spin_loop();
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(1024) {
                while let Ok(reply) = req_rx.try_recv() {
                    let _ = reply.send(snapshot(&engine, t0.elapsed()));
                }
            }
        }
        engine
    })?;
    eprintln!(
        "routeplex run: {} forwarding on {} port(s) (pid {})",
        file.display(),
        topo.ports.len(),
        std::process::id()
    );
    match state_dir {
        Some(dir) => serve(&dir.join("control.sock"), &req_tx)?,
        None => {
            while !STOP.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    STOP.store(true, Ordering::Relaxed);
    let engine = worker.join().map_err(|_| anyhow::anyhow!("the worker thread panicked"))?;
    eprintln!("routeplex run: stopped: {}", snapshot(&engine, Duration::ZERO));
    Ok(())
}

/// Answers `status` and `stop` on the control socket until stopped.
fn serve(sock: &Path, req_tx: &mpsc::Sender<mpsc::Sender<String>>) -> Result<()> {
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
        let answer = match line.trim() {
            "status" => {
                let (tx, rx) = mpsc::channel();
                req_tx.send(tx)?;
                rx.recv_timeout(Duration::from_secs(2))
                    .unwrap_or_else(|_| "{\"error\":\"worker busy\"}".into())
            }
            "stop" => {
                STOP.store(true, Ordering::Relaxed);
                "{\"state\":\"stopping\"}".into()
            }
            other => {
                json!({ "error": format!("unknown command {other:?}: status or stop") }).to_string()
            }
        };
        let _ = writeln!(s, "{answer}");
    }
    let _ = std::fs::remove_file(sock);
    Ok(())
}

/// The engine's counters as one JSON line.
fn snapshot(e: &Engine, up: Duration) -> String {
    let vrs: Vec<_> = e
        .vrs()
        .iter()
        .map(|v| {
            let c: serde_json::Map<_, _> = v
                .counters()
                .named()
                .into_iter()
                .filter(|(_, n)| *n != 0)
                .map(|(k, n)| (k.to_string(), json!(n)))
                .collect();
            json!({ "name": v.name(), "counters": c })
        })
        .collect();
    let ports: Vec<_> = (0..e.port_count())
        .map(|p| {
            let s = e.port_stats(p);
            let status = match e.port_status(p) {
                ports::PortStatus::Up => "up".to_string(),
                ports::PortStatus::Down(why) => format!("down: {why}"),
            };
            let pc = e.port_counters(p);
            let drops: serde_json::Map<_, _> = dataplane::PortDrop::ALL
                .iter()
                .map(|&r| (r.name().to_string(), json!(pc.dropped(r))))
                .collect();
            json!({ "name": e.port_name(p), "rx": s.rx_packets, "tx": s.tx_packets, "rx_dropped": s.rx_dropped, "tx_full": s.tx_full, "drops": drops, "status": status })
        })
        .collect();
    json!({ "state": "running", "uptime_s": up.as_secs_f64(), "vrs": vrs, "ports": ports })
        .to_string()
}
