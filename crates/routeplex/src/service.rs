//! `routeplex up`, `down`, `run`, `apply`, `status`, `move` and `reserve`: argument glue over
//! `control::daemon` (the service's files, lifecycle and control socket) and the typed API
//! (`control::api`).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use control::api::Command;
use control::daemon::{self, Paths, ASK_TIMEOUT};
use control::runtime::Options;
use control::Topology;

use crate::sys;

/// Set by SIGTERM / SIGINT.
static STOP: AtomicBool = AtomicBool::new(false);

fn say(s: String) {
    println!("{s}");
}

pub fn up(file: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    Ok(daemon::up(file, &exe, &mut say)?)
}

pub fn down(file: &Path) -> Result<()> {
    Ok(daemon::down(file, &mut say)?)
}

/// The data plane in the foreground: the topology's workers (by default one per online CPU,
/// each pinned to its CPU, idling as its `idle:` says) and the control socket (when
/// `state_dir` is given), until SIGTERM/SIGINT or `stop`.
pub fn run(file: &Path, state_dir: Option<&Path>, burst: usize) -> Result<()> {
    let topo = Topology::load(file)?;
    // A `fleet:` section: the agent runs beside the data plane, a client of its control
    // socket, and leaves the fleet (revokes its lease) when the data plane stops.
    let _agent = fleet_agent(file, state_dir)?;
    sys::stop_on_signals(&STOP);
    let mut opts = Options::for_topology(&topo);
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    // opts.idle is the topology's `idle:` (default adaptive: spin while there is traffic,
    // sleep on the ports' descriptors once there is none).
    // What it does is logged (stderr, the service log under `up`): see `crate::logs` and `control::daemon`.
    Ok(daemon::run(file, topo, state_dir, burst, opts, &STOP)?)
}

/// Starts the fleet agent when the topology has a `fleet:` section.
fn fleet_agent(file: &Path, state_dir: Option<&Path>) -> Result<Option<fleet::Handle>> {
    let text =
        yamlpath::read_file(file, 16 << 20).with_context(|| format!("{}", file.display()))?;
    let Some(cfg) = fleet::FleetConfig::from_topology(&text, &file.display().to_string())? else {
        return Ok(None);
    };
    let Some(dir) = state_dir else {
        anyhow::bail!(
            "{}: the fleet agent talks to the data plane through its control socket: run with --state-dir (as `routeplex up` does)",
            file.display()
        );
    };
    let local = std::sync::Arc::new(fleet::local::Socket::new(dir.join("control.sock")));
    Ok(Some(fleet::Agent::spawn(cfg, local, Some(dir.join(FLEET_FILE)))?))
}

/// What the fleet agent last knew of the fleet, in the service's directory.
const FLEET_FILE: &str = "fleet.json";

/// `routeplex fleet status --etcd URL[,URL] [--json]`.
pub fn fleet_status(etcd: &[String], json: bool) -> Result<()> {
    let v = fleet::view::read(etcd, std::time::Duration::from_secs(2))?;
    if json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print!("{}", fleet::view::render(&v, fleet::record::now_ms()));
    }
    Ok(())
}

/// The host's `fleet.json`, if its agent wrote one.
fn fleet_file(file: &Path, state_dir: Option<&Path>) -> Option<fleet::record::FleetStatus> {
    let dir = match state_dir {
        Some(d) => d.to_path_buf(),
        None => Paths::for_file(file).ok()?.dir,
    };
    let text = yamlpath::read_file(&dir.join(FLEET_FILE), 1 << 20).ok()?;
    serde_json::from_str(&text).ok()
}

/// The control socket of the service running `file` (or kept in `state_dir`).
fn socket(file: &Path, state_dir: Option<&Path>) -> Result<PathBuf> {
    Ok(match state_dir {
        Some(d) => d.join("control.sock"),
        None => Paths::for_file(file)?.sock,
    })
}

/// Sends one command to a running data plane and prints its answer as one JSON line.
pub fn control(file: &Path, state_dir: Option<&Path>, cmd: Command) -> Result<()> {
    let v = daemon::ask(&socket(file, state_dir)?, cmd, ASK_TIMEOUT)?;
    println!("{v}");
    Ok(())
}

/// `routeplex capture FILE POINT [-c N] [-w out.pcapng] [--drops]`: pcapng to a file or
/// standard output, until N frames or Ctrl-C.
pub fn capture(
    file: &Path,
    state_dir: Option<&Path>,
    point: &str,
    count: u64,
    write: &Path,
    drops: bool,
) -> Result<()> {
    let sock = socket(file, state_dir)?;
    sys::stop_on_signals(&STOP);
    let mut ask = |c| daemon::ask(&sock, c, ASK_TIMEOUT);
    let s = if write == Path::new("-") {
        control::capture::capture(&mut ask, point, count, drops, std::io::stdout().lock(), &STOP)?
    } else {
        let out = std::io::BufWriter::new(
            std::fs::File::create(write).with_context(|| format!("{}", write.display()))?,
        );
        control::capture::capture(&mut ask, point, count, drops, out, &STOP)?
    };
    eprintln!("routeplex capture: {} frames, {} copies lost (ring full)", s.frames, s.lost);
    Ok(())
}

/// `routeplex trace FILE VR -c N`: one line a packet, as they come, until N or Ctrl-C.
pub fn trace(file: &Path, state_dir: Option<&Path>, vr: &str, count: u32) -> Result<()> {
    let sock = socket(file, state_dir)?;
    sys::stop_on_signals(&STOP);
    let mut ask = |c| daemon::ask(&sock, c, ASK_TIMEOUT);
    control::capture::trace(&mut ask, vr, count, &STOP, &mut |l| println!("{l}"))?;
    Ok(())
}

/// `routeplex status FILE [--json]`: tables for people, or the API's answer as one JSON line.
pub fn status(file: &Path, state_dir: Option<&Path>, json: bool) -> Result<()> {
    let mut v = daemon::ask(&socket(file, state_dir)?, Command::Status, ASK_TIMEOUT)?;
    let fleet = fleet_file(file, state_dir);
    if json {
        if let (Some(f), Some(o)) = (&fleet, v.as_object_mut()) {
            o.insert("fleet".into(), serde_json::to_value(f)?);
        }
        println!("{v}");
    } else {
        if let Some(f) = &fleet {
            print!("{}", f.render(fleet::record::now_ms()));
        }
        print!("{}", crate::status_table::render(&v));
    }
    Ok(())
}

/// `routeplex apply FILE [--dry-run]`: prints the plan, then (unless a dry run) applies it.
pub fn apply(file: &Path, state_dir: Option<&Path>, dry_run: bool) -> Result<()> {
    let text =
        yamlpath::read_file(file, 16 << 20).with_context(|| format!("{}", file.display()))?;
    // Checked here first, so a bad file is reported with its own path.
    Topology::parse(&text, &file.display().to_string(), file.parent().unwrap_or(Path::new(".")))?;
    let canonical = file.canonicalize()?;
    let cmd = Command::Apply { topology: text, file: canonical.display().to_string(), dry_run };
    let v = daemon::ask(&socket(file, state_dir)?, cmd, ASK_TIMEOUT)?;
    print!("{}", v["text"].as_str().unwrap_or_default());
    if !dry_run {
        println!("routeplex apply: applied");
    }
    Ok(())
}
