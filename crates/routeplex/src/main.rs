//! `routeplex`: run virtual routers, look at them, and measure them.

mod logs;
#[cfg(test)]
mod readme_check;
mod service;
mod status_table;

use lab::{
    bench, bench_cp, bench_fleet, bench_idle, bench_router, bench_routes, bench_switch,
    bench_vhost, demo, pktgen, test_cmd,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use control::api::{Command, Route};

/// What `routeplex --help` says first.
const LONG_ABOUT: &str = "\
routeplex runs many isolated virtual routers (VRs) on one server: IPv4/IPv6 forwarding, each VR
with its own routing table, ARP/NDP neighbors and counters, joined by a batched software data
plane and a learning switch to each other, to local processes (memif) and to the kernel
(AF_XDP, AF_PACKET, tap, network namespaces). A topology file (YAML, docs/topology.md) says
what to build.

Start with `routeplex demo` (four VRs in memory, no root); `routeplex show FILE` checks a
topology; `routeplex up FILE` builds it (root) and `routeplex status FILE` shows it running.";

#[global_allocator]
static ALLOC: lab::alloc_count::Counting = lab::alloc_count::Counting;

/// Many isolated virtual routers on one host, joined by a fast software Ethernet.
#[derive(Parser)]
#[command(name = "routeplex", version, long_about = LONG_ABOUT)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// How logs (stderr; the service log under `up`) are written: `text`, timestamped lines
    /// for people, or `json`, one object a line. Default: $ROUTEPLEX_LOG_FORMAT, else text.
    /// RUST_LOG filters them (default: info for `run`, warn for the other commands).
    #[arg(long, global = true, value_enum)]
    log_format: Option<logs::Format>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run several VRs in memory and offer them 64-byte traffic for a few seconds (no root).
    Demo(demo::Args),
    /// Validate a topology file and print what it describes.
    Show {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Draw a topology (hosts, ports, switches, VRs, links with their impairments) as SVG,
    /// offline. A running host's metrics endpoint serves the same drawing, live, at `/`.
    Graph {
        /// The topology file (YAML).
        file: PathBuf,
        /// Where to write the SVG (`-`: standard output).
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Make a topology's hosts (namespaces, veths) and run its data plane in the background
    /// (root). Returns once forwarding runs; harmless if it is up already.
    Up {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Stop a topology's data plane and remove exactly what `up` made (root).
    Down {
        /// The topology file (YAML).
        file: PathBuf,
    },
    /// Change a running host to match its edited topology file, live: prints the plan, then
    /// carries it out. Changes that cannot be made live are refused whole, saying what to do.
    Apply {
        /// The topology file (YAML) it runs, as edited.
        file: PathBuf,
        /// Print the plan only.
        #[arg(long)]
        dry_run: bool,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Routes of a running VR, through the control API (source `api`).
    Route {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        #[command(subcommand)]
        op: RouteCmd,
        /// Print the control API's answer as one JSON line (for machines) instead of a table.
        #[arg(long, global = true)]
        json: bool,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Copy the frames seen at a port (or a VR's interface) of a running data plane as pcapng:
    /// received, sent, and with --drops those dropped there (the reason as a comment).
    /// `-w - | tcpdump -r -` reads them as they come; Ctrl-C stops.
    Capture {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// A port's name, or VR:INTERFACE.
        point: String,
        /// Stop after N frames (0: at Ctrl-C).
        #[arg(short = 'c', long, default_value_t = 0)]
        count: u64,
        /// Where to write the pcapng (`-` for standard output).
        #[arg(short = 'w', long, default_value = "-")]
        write: PathBuf,
        /// Also copy the frames dropped there, with the drop reason.
        #[arg(long)]
        drops: bool,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Trace the next N packets of a running VR: each stage's decision (demux, validate,
    /// lookup and next hop, rewrite, egress port, or the drop reason).
    Trace {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        /// Packets to trace (1..=10000).
        #[arg(short = 'c', long, default_value_t = 10)]
        count: u32,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Run a topology's data plane in the foreground until Ctrl-C (its interfaces must exist).
    Run {
        /// The topology file (YAML).
        file: PathBuf,
        /// Serve the control socket in this directory (set by `up`).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Frames received per port and poll, 1..=256 (the worker's batch).
        #[arg(long, default_value_t = 256)]
        burst: usize,
    },
    /// A running data plane's workers, VRs (worker, counters, routes, neighbors) and ports, as
    /// tables; with --json the control API's whole answer (reservations, every counter, FIB).
    Status {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// Print the answer as one JSON line, for machines.
        #[arg(long)]
        json: bool,
        /// Its control socket's directory, for a data plane started with `run --state-dir`
        /// rather than `up`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Move a running VR (with every VR sharing its ports, switches or links) to another
    /// worker, while traffic flows.
    Move {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        /// The worker (0-based) to run it on. Taken as text so the data plane names a bad
        /// value in its own error.
        #[arg(allow_hyphen_values = true)]
        worker: String,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Set a running VR's reservation, from its next period: `packets=N` or `time_us=N`, with
    /// optional `period_us=N` (default 1000) and `weight=N`; or `none` to remove it.
    Reserve {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        /// packets=N | time_us=N [period_us=N] [weight=N] | none
        #[arg(required = true, num_args = 1..)]
        spec: Vec<String>,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Write a running VR's snapshot (configuration, routes with their sources, learned
    /// neighbors, counters) to a file: a versioned, checksummed format (docs/api.md, snapshot).
    Snapshot {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        /// Where to write the snapshot (written whole or not at all, 0600).
        #[arg(long)]
        out: PathBuf,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Add the VR of a snapshot file to a running host, under its own name or another.
    Restore {
        /// The topology file (YAML) the host runs.
        file: PathBuf,
        /// The snapshot file.
        snapshot: PathBuf,
        /// The name to give the restored VR (default: the one it had).
        #[arg(long = "as")]
        as_name: Option<String>,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Move a running VR live to another routeplex host (its topology's `migration: listen`
    /// address; both topologies share `migration: secret`). A failure leaves it running here.
    Migrate {
        /// The topology file (YAML) it runs.
        file: PathBuf,
        /// The VR's name.
        vr: String,
        /// The destination's migration listener, IP:PORT.
        #[arg(long)]
        to: String,
        /// As for `status`.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// The fleet of routeplex hosts whose state is in etcd (docs/fleet.md).
    #[command(subcommand)]
    Fleet(FleetCmd),
    /// A packet generator and sink on memif sockets, as a separate process (netmap's pkt-gen).
    Pktgen(pktgen::Args),
    /// Benchmarks (JSON with --json).
    #[command(subcommand)]
    Bench(BenchCmd),
    /// The router tester: sweep, rfc2544, ndr-pdr against a DUT (default: a routeplex VR on
    /// in-memory ports; no root).
    #[command(subcommand)]
    Test(test_cmd::TestCmd),
    /// Print a shell completion script: `routeplex completions bash > /etc/bash_completion.d/routeplex`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `routeplex man | man -l -`.
    Man,
}

#[derive(Subcommand)]
enum RouteCmd {
    /// Add (or with --replace, add or replace) a route: PREFIX via GATEWAY [dev IFACE] |
    /// PREFIX dev IFACE | PREFIX blackhole.
    Add {
        #[arg(value_parser = prefix)]
        prefix: ipnet::IpNet,
        #[arg(num_args = 1..)]
        words: Vec<String>,
        #[arg(long)]
        replace: bool,
    },
    /// Delete routes added through the API.
    Del {
        #[arg(required = true, value_parser = prefix)]
        prefixes: Vec<ipnet::IpNet>,
    },
    /// List routes (all sources, or one: local, connected, static, api, table).
    List {
        #[arg(long)]
        source: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
    },
}

#[derive(Subcommand)]
enum FleetCmd {
    /// Hosts (lease age, capacity offered and used, applied revision, fenced) and their VRs,
    /// read from etcd, as tables; with --json, for machines.
    Status {
        /// etcd client URLs, comma-separated: http://HOST:PORT[,http://HOST:PORT...]
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Store the fleet's desired state (the topology language plus placement hints per VR:
    /// host, anti_affinity, cpu_share, memory_mib) at /routeplex/fleet/desired; the leading
    /// controller places it. --dry-run prints which VR lands where and why, writing nothing.
    Apply {
        file: PathBuf,
        /// etcd client URLs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: the placement as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a fleet controller (one leads at a time, elected through etcd) until stopped.
    Controller {
        /// etcd client URLs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        /// Its name, unique among the controllers (default: host name and process id).
        #[arg(long)]
        name: Option<String>,
        /// Its lease's TTL, seconds: a dead leader is replaced this long after it stops.
        #[arg(long, default_value_t = 3)]
        ttl_s: u64,
    },
    /// Mark a host unschedulable: the leader places its VRs elsewhere (moved live where both
    /// hosts have a `migration:` section, else restarted there) and places nothing new on it.
    Drain {
        host: String,
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
    },
    /// Make a drained host schedulable again (nothing moves back by itself).
    Uncordon {
        host: String,
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
    },
    /// Even the CPU load over the schedulable hosts: move VRs from the most to the least
    /// loaded while that lowers the spread (pins, capacity, anti-affinity kept), live like a
    /// drain. --dry-run prints the moves, writing nothing.
    Rebalance {
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Longest-prefix-match lookups per second on a prefix table.
    Fib(bench::FibArgs),
    /// One VR forwarding 64-byte UDP between two in-memory ports on one worker.
    Pipeline(bench::PipelineArgs),
    /// Route updates applied through control while a VR with a full table forwards.
    Routes(bench_routes::Args),
    /// A full BGP table into a VR through BIRD in its Linux control plane, while it forwards,
    /// against the same table into a plain Linux namespace (root).
    #[command(name = "control-plane")]
    ControlPlane(bench_cp::Args),
    /// The learning switch through memif, a separate process (VALE's Figs 6, 8, 9, 10).
    Switch(bench_switch::Args),
    /// One VR with the full IPv4 table between two memif ports, against DPDK's l3fwd with the
    /// same table in the same harness (--compare l3fwd).
    Router(bench_router::Args),
    /// The learning switch between vhost-user ports driven by DPDK virtio_user, beside the
    /// same switch between memif ports driven by DPDK net_memif (64 B and 1518 B).
    Vhost(bench_vhost::Args),
    /// An idle host: its worker's CPU without traffic, and first-packet latency after silence,
    /// per idle mode (one VR on memif ports, no root).
    Idle(bench_idle::Args),
    /// A fleet of hosts in namespaces with etcd: placement, failover, drain, VXLAN against the
    /// kernel's (root; docs/fleet.md).
    Fleet(bench_fleet::Args),
}

/// A command-line prefix, saying what is wrong with a bad one (`/33`: the length's range).
fn prefix(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse().map_err(|_| {
        control::topology::bad_prefix_length(s).unwrap_or_else(|| {
            format!("{s:?} is not a prefix: expected ADDRESS/LENGTH, like 10.9.0.0/16")
        })
    })
}

/// `route add|del|list` as an API command.
fn route_cmd(vr: String, op: RouteCmd) -> anyhow::Result<Command> {
    Ok(match op {
        RouteCmd::Add { prefix, words, replace } => {
            let w: Vec<&str> = words.iter().map(String::as_str).collect();
            let mut r = Route { prefix, via: None, interface: None, blackhole: false };
            match w.as_slice() {
                ["via", gw] => r.via = Some(gw.parse()?),
                ["via", gw, "dev", i] => {
                    r.via = Some(gw.parse()?);
                    r.interface = Some(i.to_string());
                }
                ["dev", i] => r.interface = Some(i.to_string()),
                ["blackhole"] => r.blackhole = true,
                _ => anyhow::bail!(
                    "route {prefix}: expected `via GATEWAY [dev IFACE]`, `dev IFACE` or `blackhole`, not {w:?}"
                ),
            }
            if replace {
                Command::RouteReplace { vr, routes: vec![r] }
            } else {
                Command::RouteAdd { vr, routes: vec![r] }
            }
        }
        RouteCmd::Del { prefixes } => Command::RouteDelete { vr, prefixes },
        RouteCmd::List { source, limit } => Command::RouteList { vr, source, limit },
    })
}

/// A path as the data plane must get it: it runs elsewhere (its own working directory).
fn absolute(p: &std::path::Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    std::env::current_dir().map_or_else(|_| p.to_path_buf(), |d| d.join(p))
}

/// `routeplex graph`: the drawing to a file or standard output.
fn graph(file: &Path, out: &Path) -> anyhow::Result<()> {
    let t = control::Topology::load(file)?;
    let svg = control::graph::Graph::of(&t).svg();
    if out == Path::new("-") {
        print!("{svg}");
        return Ok(());
    }
    std::fs::write(out, svg).map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logs::init(cli.log_format, matches!(cli.cmd, Cmd::Run { .. }));
    match dispatch(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("routeplex: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// Runs a command: the labs and benchmarks (crate `lab`), the fleet, or a host's service.
fn dispatch(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Demo(a) => Ok(demo::run(a)?),
        Cmd::Show { file } => control::Topology::load(&file)
            .map(|t| println!("{}", t.summary().trim_end()))
            .map_err(anyhow::Error::from),
        Cmd::Graph { file, out } => graph(&file, &out),
        Cmd::Pktgen(a) => Ok(pktgen::run(a)?),
        Cmd::Fleet(f) => fleet_cmd(f),
        Cmd::Bench(b) => Ok(bench_cmd(b)?),
        Cmd::Test(t) => Ok(test_cmd::run(t)?),
        Cmd::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "routeplex",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Cmd::Man => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(anyhow::Error::from),
        Cmd::Up { file } => service::up(&file),
        Cmd::Down { file } => service::down(&file),
        Cmd::Run { file, state_dir, burst } => service::run(&file, state_dir.as_deref(), burst),
        Cmd::Apply { file, dry_run, state_dir } => {
            service::apply(&file, state_dir.as_deref(), dry_run)
        }
        Cmd::Route { file, vr, op, json, state_dir } => {
            route_cmd(vr, op).and_then(|c| service::route(&file, state_dir.as_deref(), c, json))
        }
        Cmd::Capture { file, point, count, write, drops, state_dir } => {
            service::capture(&file, state_dir.as_deref(), &point, count, &write, drops)
        }
        Cmd::Trace { file, vr, count, state_dir } => {
            service::trace(&file, state_dir.as_deref(), &vr, count)
        }
        Cmd::Status { file, state_dir, json } => service::status(&file, state_dir.as_deref(), json),
        Cmd::Move { file, vr, worker, state_dir } => match worker.parse::<usize>() {
            Ok(worker) => {
                service::control(&file, state_dir.as_deref(), Command::Move { vr, worker })
            }
            Err(_) => Err(anyhow::anyhow!("worker must be a number, not {worker:?}")),
        },
        Cmd::Reserve { file, vr, spec, state_dir } => {
            service::control(&file, state_dir.as_deref(), Command::Reserve { vr, spec })
        }
        Cmd::Snapshot { file, vr, out, state_dir } => {
            let out = absolute(&out).display().to_string();
            service::control(&file, state_dir.as_deref(), Command::Snapshot { vr, out })
        }
        Cmd::Restore { file, snapshot, as_name, state_dir } => {
            let snapshot = absolute(&snapshot).display().to_string();
            service::control(
                &file,
                state_dir.as_deref(),
                Command::Restore { snapshot, name: as_name, down: false },
            )
        }
        Cmd::Migrate { file, vr, to, state_dir } => {
            service::control(&file, state_dir.as_deref(), Command::Migrate { vr, to })
        }
    }
}

fn fleet_cmd(cmd: FleetCmd) -> anyhow::Result<()> {
    match cmd {
        FleetCmd::Status { etcd, json } => service::fleet_status(&etcd, json),
        FleetCmd::Apply { file, etcd, dry_run, json } => {
            service::fleet_apply(&file, &etcd, dry_run, json)
        }
        FleetCmd::Controller { etcd, name, ttl_s } => service::fleet_controller(etcd, name, ttl_s),
        FleetCmd::Drain { host, etcd } => service::fleet_cordon(&host, &etcd, true),
        FleetCmd::Uncordon { host, etcd } => service::fleet_cordon(&host, &etcd, false),
        FleetCmd::Rebalance { etcd, dry_run } => service::fleet_rebalance(&etcd, dry_run),
    }
}

fn bench_cmd(cmd: BenchCmd) -> lab::Result<()> {
    match cmd {
        BenchCmd::Fib(a) => bench::fib(a),
        BenchCmd::Pipeline(a) => bench::pipeline(a),
        BenchCmd::Routes(a) => bench_routes::run(a),
        BenchCmd::ControlPlane(a) => bench_cp::run(a),
        BenchCmd::Switch(a) => bench_switch::run(a),
        BenchCmd::Router(a) => bench_router::run(a),
        BenchCmd::Vhost(a) => bench_vhost::run(a),
        BenchCmd::Idle(a) => bench_idle::run(a),
        BenchCmd::Fleet(a) => bench_fleet::run(a),
    }
}

/// An error and its causes on one line, each cause once: control's errors print their source
/// in their own text (`{context}: {source}`), so a cause already said is not said again.
fn report(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if !s.contains(&cause) {
            if !s.is_empty() {
                s += ": ";
            }
            s += &cause;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_length_out_of_range_is_named() {
        let e = Cli::try_parse_from([
            "routeplex",
            "route",
            "f.yaml",
            "r",
            "add",
            "10.0.0.0/33",
            "blackhole",
        ])
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("prefix length 33 is out of range for IPv4 (0 to 32)"), "{e}");
        let e = prefix("2001:db8::/129").unwrap_err();
        assert!(e.contains("out of range for IPv6 (0 to 128)"), "{e}");
        assert!(prefix("10.0.0.0/x").unwrap_err().contains("\"x\" is not a number"));
        assert!(prefix("10.0.0/8").unwrap_err().contains("is not a prefix"));
        assert_eq!(prefix("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
    }

    #[test]
    fn an_error_says_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = control::ControlError::Io { context: "x.sock".into(), source: io };
        let once = e.to_string();
        assert_eq!(report(&anyhow::Error::from(e)), once);
        // `up` with a bad file: the topology error is the control error's text and source.
        let bad = control::Topology::parse("vrs: 7\n", "lab.yaml", std::path::Path::new("."));
        let e = anyhow::Error::from(control::ControlError::from(bad.unwrap_err()));
        let said = report(&e);
        assert_eq!(said.matches("lab.yaml:1").count(), 1, "{said}");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(report(&e), "outer: inner");
    }
}
