//! `routeplex bench vhost`: routeplex's learning switch between two vhost-user ports, driven by
//! a DPDK 22.11 `virtio_user` frontend, and in the same run the same switch between two memif
//! ports driven by the same DPDK program over `net_memif`, so the two port kinds are compared
//! with one generator, one switch and one machine state. 64 B and 1518 B frames (FCS included;
//! Gbit/s counts frame and FCS bytes).
//!
//! The switch is a `routeplex run` child process whose one worker is pinned to the last CPU;
//! the DPDK program (generator on its port 0, sink on its port 1) runs on CPU 0. It is built at
//! run time with `cc` and `pkg-config libdpdk` into `~/.cache/routeplex/dpdk` (libdpdk-dev).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::model::{
    MemberDoc, MemifDoc, PortDoc, PortKindDoc, SwitchDoc, TopologyDoc, VhostUserDoc, WorkersDoc,
};
use serde_json::json;

use crate::sys;

const PEER_SRC: &str = include_str!("bench_vhost_peer.c");

/// Options of `routeplex bench vhost`.
#[derive(clap::Args)]
pub struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Interleaved pairs per size (vhost-user, memif, vhost-user, …), 1..=100.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Vhost,
    Memif,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Vhost => "vhost-user",
            Kind::Memif => "memif",
        }
    }
}

/// The DPDK program, built once per source and flags.
fn peer_binary() -> Result<PathBuf> {
    dpdk_binary("bench_vhost_peer", PEER_SRC)
}

/// A DPDK program built from `src` with `cc` and `pkg-config libdpdk` into
/// `~/.cache/routeplex/dpdk`, once per source and flags; `name` names the binary.
pub(crate) fn dpdk_binary(name: &str, src_text: &str) -> Result<PathBuf> {
    let pc = Command::new("pkg-config")
        .args(["--cflags", "--libs", "libdpdk"])
        .output()
        .context("pkg-config")?;
    if !pc.status.success() {
        bail!("libdpdk-dev is not installed (scripts/setup installs it)");
    }
    let flags = String::from_utf8_lossy(&pc.stdout).trim().to_string();
    let mut h = std::hash::DefaultHasher::new();
    (src_text, &flags).hash(&mut h);
    let dir = dpdk_cache_dir()?;
    let bin = dir.join(format!("{name}-{:016x}", h.finish()));
    if bin.exists() {
        return Ok(bin);
    }
    let src = dir.join(format!("{name}-{}.c", std::process::id()));
    std::fs::write(&src, src_text)?;
    let tmp = dir.join(format!("{name}.tmp{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(flags.split_whitespace())
        .output()
        .context("cc")?;
    let _ = std::fs::remove_file(&src);
    if !out.status.success() {
        bail!("building the DPDK program {name} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::rename(&tmp, &bin)?;
    Ok(bin)
}

/// `~/.cache/routeplex/dpdk`, private to its owner: where the DPDK programs the benchmarks
/// build are kept.
pub(crate) fn dpdk_cache_dir() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    let dir = Path::new(&home).join(".cache/routeplex/dpdk");
    private_dir(&dir)?;
    Ok(dir)
}

/// Makes `d` (and its parents) with mode 0700.
fn private_dir(d: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(d)?;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

/// The switch in a `routeplex run` child with two ports of `kind`; killed on drop.
struct Switch {
    child: Child,
    dir: PathBuf,
    sockets: Vec<String>,
}

impl Switch {
    fn start(kind: Kind) -> Result<Switch> {
        let tag = format!("rpx-bvh-{}-{}", std::process::id(), kind.name());
        let dir = std::env::temp_dir().join(&tag);
        private_dir(&dir)?;
        let sockets: Vec<String> = (0..2)
            .map(|i| match kind {
                Kind::Vhost => dir.join(format!("v{i}.sock")).display().to_string(),
                Kind::Memif => format!("@{tag}-{i}"),
            })
            .collect();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let doc = TopologyDoc {
            workers: Some(WorkersDoc::Cpus(vec![cpus - 1])),
            ports: sockets
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let k = match kind {
                        Kind::Vhost => PortKindDoc::VhostUser(VhostUserDoc {
                            socket: s.clone(),
                            ..Default::default()
                        }),
                        Kind::Memif => {
                            PortKindDoc::Memif(MemifDoc { socket: s.clone(), ..Default::default() })
                        }
                    };
                    PortDoc::new(format!("p{i}"), k)
                })
                .collect(),
            switches: vec![SwitchDoc {
                name: "sw".into(),
                members: (0..2)
                    .map(|i| MemberDoc { port: format!("p{i}"), ..Default::default() })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let file = dir.join("switch.yaml");
        std::fs::write(&file, doc.to_yaml())?;
        let log = std::fs::File::create(dir.join("switch.log"))?;
        let pinned = sys::unpin();
        let child = Command::new(std::env::current_exe()?)
            .arg("run")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the switch process")?;
        if pinned {
            sys::pin(0);
        }
        let sw = Switch { child, dir, sockets };
        if kind == Kind::Vhost {
            // virtio_user in client mode needs the sockets to exist when it starts.
            let t0 = Instant::now();
            while !sw.sockets.iter().all(|s| Path::new(s).exists()) {
                if t0.elapsed() > Duration::from_secs(10) {
                    bail!("the switch made no vhost-user sockets in 10 s: {}", sw.log());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ok(sw)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("switch.log")).unwrap_or_default()
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        sys::kill(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One measurement: `size` bytes on the wire (FCS included).
fn point(bin: &Path, kind: Kind, size: usize, seconds: f64) -> Result<serde_json::Value> {
    let sw = Switch::start(kind)?;
    let prefix = format!("rpx-bvh-{}-{}-{size}", std::process::id(), kind.name());
    let vdevs: Vec<String> = sw
        .sockets
        .iter()
        .enumerate()
        .map(|(i, s)| match kind {
            Kind::Vhost => format!(
                "--vdev=net_virtio_user{i},path={s},queues=1,queue_size=1024,mrg_rxbuf=1,\
                 in_order=0,packed_vq=0"
            ),
            Kind::Memif => format!(
                "--vdev=net_memif{i},role=client,id=0,socket={},socket-abstract=yes",
                s.trim_start_matches('@')
            ),
        })
        .collect();
    let out = Command::new(bin)
        .args(["--no-huge", "-m", "512", "--no-pci", "--no-telemetry", "--no-shconf"])
        .arg(format!("--file-prefix={prefix}"))
        .arg("--lcores=0@(0)")
        .args(&vdevs)
        .args(["--", &(size - 4).to_string(), "0.5", &seconds.to_string()])
        .stdin(Stdio::null())
        .output()
        .context("running the DPDK peer")?;
    for base in ["/var/run/dpdk", "/run/dpdk", "/tmp/dpdk"] {
        let _ = std::fs::remove_dir_all(format!("{base}/{prefix}"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find(|l| l.starts_with("RESULT ")) else {
        bail!(
            "the DPDK peer ({}) printed no result ({}):\n{text}\n{}\nswitch log:\n{}",
            kind.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            sw.log()
        );
    };
    let field = |k: &str| -> f64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let (tx, refused, rx, secs) =
        (field("tx"), field("tx_refused"), field("rx"), field("seconds").max(1e-9));
    let mpps = rx / secs / 1e6;
    Ok(json!({
        "port_kind": kind.name(), "size": size, "seconds": secs,
        "offered_mpps": tx / secs / 1e6, "mpps": mpps,
        "gbps": mpps * 1e6 * size as f64 * 8.0 / 1e9,
        "sent": tx as u64, "received": rx as u64, "refused_by_port": refused as u64,
        "lost_in_switch": (tx - rx).max(0.0) as u64,
    }))
}

/// What limited a point: the generator (the switch kept up) or the switch (it lost frames, or
/// its ports refused them).
fn limited_by(p: &serde_json::Value) -> &'static str {
    let sent = p["sent"].as_f64().unwrap_or(0.0);
    let lost = p["lost_in_switch"].as_f64().unwrap_or(0.0);
    let refused = p["refused_by_port"].as_f64().unwrap_or(0.0);
    if sent > 0.0 && (lost / sent > 0.001 || refused > sent) {
        "the switch: its worker could not keep up (frames lost in it, or its ports' rings full \
         and refusing the generator)"
    } else {
        "the DPDK generator: the switch forwarded all it was offered; one DPDK core both \
         generates and sinks"
    }
}

pub fn run(a: Args) -> Result<()> {
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    let bin = peer_binary()?;
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    crate::ensure!((1..=100).contains(&a.pairs), "--pairs {} is outside 1..=100", a.pairs);
    let mut points = Vec::new();
    let mut sizes = Vec::new();
    for size in [64usize, 1518] {
        let trial = |kind: Kind| {
            point(&bin, kind, size, a.seconds).map(|mut p| {
                p["limited_by"] = json!(limited_by(&p));
                p
            })
        };
        let runs = tester::pairs::run(a.pairs, |_| trial(Kind::Vhost), |_| trial(Kind::Memif))?;
        let mpps = |p: &serde_json::Value| p["mpps"].as_f64().unwrap_or(f64::NAN);
        let summary =
            tester::pairs::Summary::from_measured("vhost-user", "memif", "Mpps", &runs, mpps, mpps);
        let trials =
            runs.into_iter().flat_map(|(v, m)| [(Kind::Vhost, v.value), (Kind::Memif, m.value)]);
        for (kind, p) in trials {
            if !a.json {
                println!(
                    "{:>10} {:>5} B: {:.3} Mpps, {:.2} Gbit/s (offered {:.3} Mpps, {} lost); limited by {}",
                    kind.name(),
                    size,
                    p["mpps"].as_f64().unwrap_or(0.0),
                    p["gbps"].as_f64().unwrap_or(0.0),
                    p["offered_mpps"].as_f64().unwrap_or(0.0),
                    p["lost_in_switch"],
                    p["limited_by"].as_str().unwrap_or("")
                );
            }
            points.push(p);
        }
        if !a.json {
            println!("{size} B, vhost-user against memif in {} interleaved pairs:", a.pairs);
            for l in summary.lines() {
                println!("{l}");
            }
        }
        sizes.push(
            json!({ "size": size, "pairs": summary, "ratio_vhost_to_memif": summary.ratio.median }),
        );
    }
    let j = json!({
        "method": "one DPDK 22.11 process (virtio_user or net_memif, --no-huge) sends unicast \
                   frames on its port 0 through routeplex's learning switch (a `routeplex run` \
                   child) to its port 1, which counts them; vhost-user and memif interleaved in pairs \
                   (--pairs) in one invocation, a fixed memory probe (dependent random reads over \
                   8 MiB) and compute probe timed before each trial; a pair is flagged when its \
                   two trials' probes differ by more than 10 %",
        "placement": format!("{cpus} CPU(s): DPDK on CPU 0, the switch's worker on CPU {}", cpus - 1),
        "copies": "routeplex copies every frame twice on either port kind (peer buffer -> batch \
                   -> peer buffer); vhost-user also writes a 12-byte virtio-net header per frame \
                   and walks descriptor chains through vm-memory's checked accessors",
        "load_average_before": load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        "load_average_after": std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
            .split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        "note": "compare vhost-user with memif within one run only: both share the machine's \
                 state, which the load averages describe (a load above the CPU count means other \
                 work took CPU time from the switch or the generator)",
        "points": points,
        "sizes": sizes,
    });
    if a.json {
        println!("{j}");
    }
    Ok(())
}
