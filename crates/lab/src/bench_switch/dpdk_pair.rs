//! `bench switch --compare dpdk`: DPDK 22.11's own memif client→server pair, no switch, on
//! the CPUs the switch run uses (the client, which sends, where routeplex's generator runs;
//! the server, which receives, where the switch's worker runs). Two processes of one program
//! (`bench_switch_pair.c`), built at run time like `bench vhost`'s peer. Where their threads
//! ran is read back from /proc while the server counts.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use serde_json::json;

use crate::pktgen;
use crate::sys;
use crate::sys::threads::{Placement, Sampler, Watch};

const PAIR_SRC: &str = include_str!("../bench_switch_pair.c");

/// The roles of the two DPDK lcores in the placement.
const SERVER: &str = "dpdk server (receives)";
const CLIENT: &str = "dpdk client (sends)";

/// The pair's program, built once per source and DPDK flags.
pub fn binary() -> Result<std::path::PathBuf> {
    crate::bench_vhost::dpdk_binary("bench_switch_pair", PAIR_SRC)
}

/// One measured size of the pair.
pub struct PairPoint {
    pub size: usize,
    pub seconds: f64,
    /// What the server received per second while it counted.
    pub mpps: f64,
    /// What the client's ring took per second over the client's whole run.
    pub offered_mpps: f64,
    /// Share of the client's bursts its ring took whole.
    pub generator_busy: f64,
    /// Share of the server's polls that found nothing.
    pub server_idle: f64,
    pub limited_by: &'static str,
    pub placement: Placement,
    pub tx_cpu: usize,
    pub rx_cpu: usize,
}

impl PairPoint {
    pub fn gbps(&self) -> f64 {
        self.mpps * 1e6 * self.size as f64 * 8.0 / 1e9
    }

    /// Says so when either DPDK lcore did not have its CPU to itself (other load on the host).
    fn note(&self) -> Option<String> {
        let busy =
            |role: &str| self.placement.threads.iter().find(|t| t.role == role).map(|t| t.busy());
        let low: Vec<String> = [CLIENT, SERVER]
            .into_iter()
            .filter_map(|r| busy(r).filter(|b| *b < 0.9).map(|b| format!("{r} {:.0} %", b * 100.0)))
            .collect();
        (!low.is_empty()).then(|| format!("the DPDK lcores ran only part of the time ({}; the OS gave their CPUs to other work): figures are lower than this host can do", low.join(", ")))
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "note": self.note(),
            "size": self.size, "seconds": self.seconds, "mpps": self.mpps, "gbps": self.gbps(),
            "offered_mpps": self.offered_mpps, "generator_busy": self.generator_busy,
            "server_idle_polls": self.server_idle, "limited_by": self.limited_by,
            "asked_for": format!("client (sends) on CPU {}, server (receives) on CPU {}", self.tx_cpu, self.rx_cpu),
            "placement": self.placement.to_json(),
        })
    }
}

/// The two DPDK processes; killed and their runtime directories removed on drop.
struct Pair {
    children: Vec<Child>,
    prefixes: Vec<String>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in &mut self.children {
            sys::kill(c.id(), libc::SIGKILL);
            let _ = c.wait();
        }
        for p in &self.prefixes {
            for base in ["/var/run/dpdk", "/run/dpdk", "/tmp/dpdk"] {
                let _ = std::fs::remove_dir_all(format!("{base}/{p}"));
            }
        }
    }
}

/// Waits (at most 30 s) until the server listens on the abstract socket `@tag`.
fn listening(tag: &str, server: &mut Child) -> Result<()> {
    let name = format!("@{tag}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let unix = std::fs::read_to_string("/proc/net/unix").context("/proc/net/unix")?;
        if unix.lines().any(|l| l.split_whitespace().last() == Some(name.as_str())) {
            return Ok(());
        }
        if let Ok(Some(status)) = server.try_wait() {
            bail!("the DPDK memif server exited before listening on {name}: {status}");
        }
        if Instant::now() > deadline {
            bail!("the DPDK memif server did not listen on {name} within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `key=value` from a RESULT line.
fn field(line: &str, k: &str) -> f64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Measures the pair at `size` bytes (without FCS): the server counts for `seconds` after a
/// `warm`-second warm-up.
pub fn measure(
    bin: &Path,
    size: usize,
    warm: f64,
    seconds: f64,
    tx_cpu: usize,
    rx_cpu: usize,
) -> Result<PairPoint> {
    let tag = format!("rpx-bsw-pair-{}-{size}", std::process::id());
    let (send, recv) = mpsc::channel::<(usize, String)>();
    let mut pair = Pair { children: Vec::new(), prefixes: Vec::new() };
    // The server first: it listens on the socket the client connects to. Our affinity (CPU
    // 0) must not narrow theirs: each pins its own lcore.
    let pinned = sys::unpin();
    for (i, (role, cpu)) in [("rx", rx_cpu), ("tx", tx_cpu)].into_iter().enumerate() {
        let prefix = format!("{tag}-{role}");
        let memif_role = if role == "rx" { "server" } else { "client" };
        let mut child = Command::new(bin)
            .args(["--no-huge", "-m", "512", "--no-pci", "--no-telemetry", "--no-shconf"])
            .arg(format!("--file-prefix={prefix}"))
            .arg(format!("--lcores=0@({cpu})"))
            .arg(format!(
                "--vdev=net_memif0,role={memif_role},id=0,socket={tag},socket-abstract=yes"
            ))
            .args(["--", role, &size.to_string(), &warm.to_string(), &seconds.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the DPDK memif pair")?;
        pair.prefixes.push(prefix);
        let out = child.stdout.take().context("the pair's stdout")?;
        let s = send.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if s.send((i, line)).is_err() {
                    break;
                }
            }
        });
        pair.children.push(child);
        if i == 0 {
            // The client must find the server listening: a client that connects too early
            // retries slowly or not at all (on a loaded CI machine, an EAL start took longer
            // than the fixed 300 ms this once waited, and the link never came up).
            listening(&tag, &mut pair.children[0])?;
        }
    }
    if pinned {
        sys::pin(0);
    }
    drop(send);
    let watch = |i: usize, process: &str, role: &str| {
        Watch::new(
            pair.children[i].id(),
            process,
            &[("main", role), ("eal-intr-thread", "dpdk interrupt thread (memif control)")],
        )
    };
    let deadline = Instant::now() + Duration::from_secs_f64(warm + seconds + 40.0);
    let mut up = [false; 2];
    let mut result: [Option<String>; 2] = [None, None];
    let mut sampler = None;
    let mut placement = None;
    let mut log = String::new();
    while result.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = match recv.recv_timeout(left) {
            Ok(m) => m,
            Err(_) => bail!("the DPDK memif pair did not finish in time:\n{log}"),
        };
        log.push_str(&format!("[{}] {line}\n", ["server", "client"][i]));
        if line == "PAIR link up" {
            up[i] = true;
            if up.iter().all(|u| *u) {
                sampler = Some(Sampler::start(
                    vec![watch(0, "dpdk server", SERVER), watch(1, "dpdk client", CLIENT)],
                    Duration::from_millis(10),
                ));
            }
        } else if line.starts_with("RESULT ") {
            if i == 0 {
                placement = sampler.take().map(Sampler::finish);
            }
            result[i] = Some(line);
        }
    }
    let (rx, tx) = (result[0].take().unwrap_or_default(), result[1].take().unwrap_or_default());
    crate::ensure!(field(&rx, "rx") > 0.0, "the DPDK server received nothing:\n{log}");
    let secs = field(&rx, "seconds").max(1e-9);
    let mpps = field(&rx, "rx") / secs / 1e6;
    let tx_secs = field(&tx, "seconds").max(1e-9);
    let tx_n = field(&tx, "tx");
    let bursts = field(&tx, "bursts").max(1.0);
    let generator_busy = 1.0 - field(&tx, "full_bursts") / bursts;
    let server_idle = field(&rx, "empty_polls") / field(&rx, "polls").max(1.0);
    // memif loses nothing: a full ring refuses the client's frames, so no "ring" verdict.
    let limited_by = pktgen::limited_by(None, tx_n / tx_secs, tx_n as u64, 0, generator_busy);
    Ok(PairPoint {
        size,
        seconds: secs,
        mpps,
        offered_mpps: tx_n / tx_secs / 1e6,
        generator_busy,
        server_idle,
        limited_by,
        placement: placement.unwrap_or_default(),
        tx_cpu,
        rx_cpu,
    })
}
