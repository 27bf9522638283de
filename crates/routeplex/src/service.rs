//! `routeplex up`, `down`, `run`, `apply`, `status`, `move` and `reserve`: argument glue over
//! `control::daemon` (the service's files, lifecycle and control socket) and the typed API
//! (`control::api`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use control::api::Command;
use control::daemon::{self, Paths, ASK_TIMEOUT};
use control::runtime::Options;
use control::Topology;

use lab::sys;

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
    let topo = daemon::load(file, state_dir)?;
    // A `fleet:` section: the agent runs beside the data plane, a client of its control
    // socket, and leaves the fleet (revokes its lease) when the data plane stops.
    let agent = fleet_agent(file, state_dir)?;
    // A fenced fleet host started again may find its VRs placed elsewhere meanwhile: they
    // stay down until its agent knows (control::hold).
    let on_restart = match &agent {
        Some((_, fleet::Policy::Fence)) => daemon::OnRestart::Hold,
        _ => daemon::OnRestart::Forward,
    };
    sys::stop_on_signals(&STOP);
    let mut opts = Options::for_topology(&topo);
    opts.pin = Some(sys::pin);
    opts.clock = sys::tsc_clock;
    // opts.idle is the topology's `idle:` (default adaptive: spin while there is traffic,
    // sleep on the ports' descriptors once there is none).
    // What it does is logged (stderr, the service log under `up`): see `crate::logs` and `control::daemon`.
    Ok(daemon::run(file, topo, state_dir, burst, opts, on_restart, &STOP)?)
}

/// Starts the fleet agent when the topology has a `fleet:` section; with the section's policy.
fn fleet_agent(
    file: &Path,
    state_dir: Option<&Path>,
) -> Result<Option<(fleet::Handle, fleet::Policy)>> {
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
    let policy = cfg.policy;
    Ok(Some((fleet::Agent::spawn(cfg, local, Some(dir.join(FLEET_FILE)))?, policy)))
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

/// How long one etcd call of the fleet commands may take.
const FLEET_CALL: std::time::Duration = std::time::Duration::from_secs(2);

/// `routeplex fleet apply FILE --etcd URLS [--dry-run [--json]]`.
pub fn fleet_apply(file: &Path, etcd: &[String], dry_run: bool, json: bool) -> Result<()> {
    let (_, text) = fleet::fleetdoc::FleetDoc::load(file)?;
    if dry_run {
        let p = fleet::controller::dry_run(etcd, &text, FLEET_CALL)?;
        if json {
            println!("{}", serde_json::to_string(&p)?);
        } else {
            print!("{}", fleet::controller::render(&p));
        }
        return Ok(());
    }
    let rev = fleet::controller::store(etcd, &text, FLEET_CALL)?;
    println!(
        "{}: stored at {} (fleet revision {rev}); the leading controller places it (routeplex fleet status)",
        file.display(),
        fleet::keys::FLEET_DESIRED
    );
    Ok(())
}

/// `routeplex fleet controller --etcd URLS`: runs until SIGTERM or SIGINT.
pub fn fleet_controller(etcd: Vec<String>, name: Option<String>, ttl_s: u64) -> Result<()> {
    anyhow::ensure!((1..=60).contains(&ttl_s), "--ttl-s {ttl_s} is out of range 1..=60");
    let name = name.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    fleet::keys::check_name(&name).map_err(|e| anyhow::anyhow!("--name {name:?}: {e}"))?;
    sys::stop_on_signals(&STOP);
    let ttl = std::time::Duration::from_secs(ttl_s);
    let h = fleet::controller::spawn(fleet::controller::ControllerConfig { etcd, name, ttl })?;
    while !STOP.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    h.stop();
    Ok(())
}

/// `routeplex fleet drain|uncordon HOST --etcd URLS`.
pub fn fleet_cordon(host: &str, etcd: &[String], on: bool) -> Result<()> {
    fleet::controller::cordon(etcd, host, on, FLEET_CALL)?;
    match on {
        true => println!("{host}: cordoned; the leading controller places its VRs elsewhere (moved live where both hosts have a migration: section; routeplex fleet status shows them)"),
        false => println!("{host}: schedulable again"),
    }
    Ok(())
}

/// `routeplex fleet rebalance --etcd URLS [--dry-run]`.
pub fn fleet_rebalance(etcd: &[String], dry_run: bool) -> Result<()> {
    let moves = fleet::controller::rebalance(etcd, dry_run, FLEET_CALL)?;
    if moves.is_empty() {
        println!("balanced: no move lowers the spread of the CPU load");
        return Ok(());
    }
    for m in &moves {
        println!("{}: {} -> {}", m.vrs.join(", "), m.from, m.to);
    }
    match dry_run {
        true => println!("dry run: nothing written"),
        false => println!("{} move(s) stored in the placement; the leading controller carries them out (routeplex fleet status)", moves.len()),
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

/// The file's port names, by the names the data plane reports for them where those differ: a
/// kernel port reports its interface (`rpx-pa` for port `pa` on a host's veth, the tap's name).
/// Empty when the file does not load (the data plane's names are shown then).
fn port_aliases(file: &Path) -> Vec<(String, String)> {
    use control::topology::PortKind;
    let Ok(t) = Topology::load(file) else { return Vec::new() };
    t.ports
        .iter()
        .filter_map(|p| {
            let runtime = match &p.kind {
                PortKind::AfXdp(a, _) | PortKind::AfPacket(a) => a.ifname(),
                PortKind::Tap { ifname } => ifname,
                _ => return None,
            };
            (runtime != p.name).then(|| (runtime.to_string(), p.name.clone()))
        })
        .collect()
}

/// `line` with each word that is a data-plane port name replaced by the file's name.
fn with_file_names(line: &str, aliases: &[(String, String)]) -> String {
    line.split(' ')
        .map(|w| aliases.iter().find(|(rt, _)| rt == w).map_or(w, |(_, f)| f.as_str()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends one command to the data plane running `file`; when none answers on its socket, says
/// which hosts do run and how to reach one.
fn ask(file: &Path, state_dir: Option<&Path>, cmd: Command) -> Result<control::api::Answer> {
    let sock = socket(file, state_dir)?;
    daemon::ask(&sock, cmd, ASK_TIMEOUT).map_err(|e| match e {
        control::ControlError::Io { ref source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            anyhow::anyhow!("{}", not_running(file, &sock, &daemon::running_services()))
        }
        e => e.into(),
    })
}

/// Why nothing answers for `file`, and the hosts that do run (name, file, directory, pid).
fn not_running(file: &Path, sock: &Path, running: &[(String, PathBuf, PathBuf, u32)]) -> String {
    let mut s = format!(
        "no data plane answers for {} at {} (a host is found by its file's stem)",
        file.display(),
        sock.display()
    );
    if running.is_empty() {
        s += "; no host is running: `routeplex up FILE` starts one";
    }
    for (name, topo, dir, pid) in running {
        s += &format!(
            "; {name} runs {} (pid {pid}): reach it with that file, or add `--state-dir {}`",
            topo.display(),
            dir.display()
        );
    }
    s
}

/// Sends one command to a running data plane and prints its answer as one JSON line.
pub fn control(file: &Path, state_dir: Option<&Path>, cmd: Command) -> Result<()> {
    let v = ask(file, state_dir, cmd)?;
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}

/// `routeplex route FILE VR add|del|list [--json]`: a table (a line for a change), or the
/// API's answer as one JSON line.
pub fn route(file: &Path, state_dir: Option<&Path>, cmd: Command, json: bool) -> Result<()> {
    use control::api::Answer;
    let v = ask(file, state_dir, cmd)?;
    match v {
        _ if json => println!("{}", serde_json::to_string(&v)?),
        Answer::RouteList(l) => print!("{}", crate::status_table::render_routes(&l)),
        Answer::Routes(a) => print!("{}", crate::status_table::render_applied(&a)),
        other => println!("{}", serde_json::to_string(&other)?),
    }
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
    // Says which host runs when this file's does not.
    ask(file, state_dir, Command::Hello)?;
    // A port is named as in the file (`pa`), though the data plane knows it by its interface.
    let aliases = port_aliases(file);
    let point = aliases.iter().find(|(_, f)| f == point).map_or(point, |(rt, _)| rt.as_str());
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
    // Says which host runs when this file's does not.
    ask(file, state_dir, Command::Hello)?;
    sys::stop_on_signals(&STOP);
    let mut ask = |c| daemon::ask(&sock, c, ASK_TIMEOUT);
    let aliases = port_aliases(file);
    control::capture::trace(&mut ask, vr, count, &STOP, &mut |l| {
        println!("{}", with_file_names(&l, &aliases))
    })?;
    Ok(())
}

/// `routeplex status FILE [--json]`: tables for people, or the API's answer as one JSON line.
pub fn status(file: &Path, state_dir: Option<&Path>, json: bool) -> Result<()> {
    /// The API's answer with what the host's fleet agent wrote beside it.
    #[derive(serde::Serialize)]
    struct WithFleet<'a> {
        #[serde(flatten)]
        status: &'a control::api::Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        fleet: Option<&'a fleet::record::FleetStatus>,
    }
    let mut v = control::api::Status::try_from(ask(file, state_dir, Command::Status)?)?;
    let fleet = fleet_file(file, state_dir);
    if json {
        println!("{}", serde_json::to_string(&WithFleet { status: &v, fleet: fleet.as_ref() })?);
    } else {
        // The tables name ports as the file does; --json keeps the API's answer as it is.
        let aliases = port_aliases(file);
        let rename = |n: &mut String| {
            if let Some((_, f)) = aliases.iter().find(|(rt, _)| rt == n) {
                *n = f.clone();
            }
        };
        v.ports.iter_mut().for_each(|p| rename(&mut p.name));
        v.switches.iter_mut().flat_map(|sw| &mut sw.members).for_each(|m| rename(&mut m.port));
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
    let v = control::api::Applied::try_from(ask(file, state_dir, cmd)?)?;
    print!("{}", v.text);
    if !dry_run {
        println!("routeplex apply: applied");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_named_as_in_the_file() {
        let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/two-hosts-one-vr.yaml");
        let a = port_aliases(&f);
        assert_eq!(a, [("rpx-pa".to_string(), "pa".to_string()), ("rpx-pb".into(), "pb".into())]);
        assert_eq!(
            with_file_names(
                "#1 rx rpx-pa 98 B -> demux: interface ea -> rewrite -> egress rpx-pb",
                &a
            ),
            "#1 rx pa 98 B -> demux: interface ea -> rewrite -> egress pb"
        );
        assert!(port_aliases(Path::new("/nonexistent.yaml")).is_empty());
    }

    #[test]
    fn a_file_with_no_host_names_the_hosts_that_run() {
        let m =
            not_running(Path::new("lab2.yaml"), Path::new("/run/routeplex/lab2/control.sock"), &[]);
        assert!(m.contains("lab2.yaml") && m.contains("no host is running"), "{m}");
        let running = [(
            "lab".to_string(),
            PathBuf::from("/srv/lab.yaml"),
            PathBuf::from("/run/routeplex/lab"),
            42,
        )];
        let m = not_running(
            Path::new("lab2.yaml"),
            Path::new("/run/routeplex/lab2/control.sock"),
            &running,
        );
        assert!(
            m.contains("lab runs /srv/lab.yaml (pid 42)")
                && m.contains("--state-dir /run/routeplex/lab"),
            "{m}"
        );
    }
}
