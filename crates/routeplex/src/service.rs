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
    sys::stop_on_signals(&STOP);
    let mut opts = Options::for_topology(&topo);
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    // opts.idle is the topology's `idle:` (default adaptive: spin while there is traffic,
    // sleep on the ports' descriptors once there is none).
    // What it does is logged (stderr, the service log under `up`): see `crate::logs` and `control::daemon`.
    Ok(daemon::run(file, topo, state_dir, burst, opts, &STOP)?)
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
    let v = daemon::ask(&socket(file, state_dir)?, Command::Status, ASK_TIMEOUT)?;
    if json {
        println!("{v}");
    } else {
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
