//! The plumbing of the kernel DUTs: commands with errors that name them, network namespaces,
//! links and child processes recorded the moment they exist and removed by a guard (on drop,
//! on error, and on SIGINT/SIGTERM), and the kernel's counters (interfaces, `nstat`,
//! `softnet_stat`) read between trials.
//!
//! Nothing here touches an object it did not make: namespaces are named
//! `rpx-peers-<pid>-<n>-<role>`, links live only inside them, and teardown removes exactly the
//! recorded namespaces, processes and directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use serde::Serialize;

/// Runs `prog args` with `env`; the error names the command line, its status and stderr.
pub fn run_env(prog: &str, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    let mut c = Command::new(prog);
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().with_context(|| {
        format!(
            "cannot run `{prog} {}` (is {prog} installed? scripts/setup installs it)",
            args.join(" ")
        )
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        bail!(
            "`{prog} {}` failed ({}){}{}",
            args.join(" "),
            out.status,
            if err.is_empty() { "" } else { ": " },
            err.lines().take(4).collect::<Vec<_>>().join(" | ")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `prog args`.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    run_env(prog, args, &[])
}

/// `ip -n NS ARGS`.
pub fn ipn(ns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// `ip netns exec NS PROG ARGS`.
pub fn exec(ns: &str, prog: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["netns", "exec", ns, prog];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// `sysctl -qw K=V ...` in namespace `ns`.
pub fn sysctl(ns: &str, kv: &[(&str, &str)]) -> Result<()> {
    let set: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["-qw"];
    args.extend(set.iter().map(String::as_str));
    exec(ns, "sysctl", &args).map(drop)
}

/// Writes `value` to `path` under /sys as namespace `ns` sees it (`ip netns exec` mounts the
/// namespace's own sysfs).
pub fn write_sys(ns: &str, path: &str, value: &str) -> Result<()> {
    exec(ns, "sh", &["-c", &format!("echo {value} > {path}")]).map(drop)
}

/// How a recorded process is asked to stop.
pub enum Stop {
    /// SIGTERM.
    Term,
    /// `stop` on a routeplex control socket, then SIGTERM if it is still there.
    Control(PathBuf),
}

/// A child process the guard stops.
pub struct Proc {
    pub what: String,
    pub child: Child,
    pub stop: Stop,
}

/// What one DUT made, removed in reverse on teardown.
#[derive(Default)]
pub struct Made {
    pub namespaces: Vec<String>,
    pub procs: Vec<Proc>,
    pub dirs: Vec<PathBuf>,
    /// Processes stopped so far, for the report.
    pub stopped: Vec<String>,
}

/// What teardown found and did, for the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Teardown {
    pub namespaces_removed: Vec<String>,
    pub processes_stopped: Vec<String>,
    /// Interfaces that still had an XDP program when checked after the ports closed (should
    /// be none: programs hang on BPF links that die with their sockets).
    pub xdp_left: Vec<String>,
    pub errors: Vec<String>,
}

impl Made {
    /// Stops every recorded process, newest first: the polite way, then SIGKILL.
    pub fn stop_procs(&mut self, out: &mut Teardown) {
        while let Some(mut p) = self.procs.pop() {
            let pid = p.child.id();
            if let Ok(None) = p.child.try_wait() {
                if let Stop::Control(sock) = &p.stop {
                    let _ = ask(sock, control::api::Command::Stop);
                    wait_child(&mut p.child, Duration::from_secs(5));
                }
                if let Ok(None) = p.child.try_wait() {
                    crate::sys::kill(pid, libc::SIGTERM);
                    if !wait_child(&mut p.child, Duration::from_secs(5)) {
                        out.errors.push(format!("{} (pid {pid}) ignored SIGTERM: killed", p.what));
                        let _ = p.child.kill();
                        wait_child(&mut p.child, Duration::from_secs(5));
                    }
                }
            }
            let _ = p.child.try_wait();
            let line = match p.child.try_wait() {
                Ok(Some(st)) => format!("{} (pid {pid}): {st}", p.what),
                _ => format!("{} (pid {pid}): still running", p.what),
            };
            out.processes_stopped.push(line.clone());
            self.stopped.push(line);
        }
    }

    /// Stops the processes, removes the namespaces (their links go with them) and directories.
    pub fn teardown(&mut self, out: &mut Teardown) {
        self.stop_procs(out);
        while let Some(ns) = self.namespaces.pop() {
            if Path::new("/run/netns").join(&ns).exists() {
                match run("ip", &["netns", "del", &ns]) {
                    Ok(_) => out.namespaces_removed.push(ns),
                    Err(e) => out.errors.push(format!("{e:#}")),
                }
            }
        }
        while let Some(d) = self.dirs.pop() {
            if d.exists() {
                if let Err(e) = std::fs::remove_dir_all(&d) {
                    out.errors.push(format!("{}: {e}", d.display()));
                }
            }
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let mut t = Teardown::default();
        self.teardown(&mut t);
        for e in t.errors {
            eprintln!("routeplex test: cleanup: {e}");
        }
    }
}

/// A DUT's record, shared by the DUT and whoever wants to check the teardown after the tester's
/// ports have closed; the last one to let go removes everything.
pub type Shared = Arc<Mutex<Made>>;

static LIVE: Mutex<Vec<Weak<Mutex<Made>>>> = Mutex::new(Vec::new());
static SIGNALS: Once = Once::new();

/// A new, empty record that SIGINT/SIGTERM also tear down.
pub fn record() -> Shared {
    SIGNALS.call_once(cleanup_on_signals);
    let m: Shared = Arc::new(Mutex::new(Made::default()));
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(&m));
    m
}

/// Locks a record even if a panicking thread held it.
pub fn lock(m: &Shared) -> std::sync::MutexGuard<'_, Made> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts later) and waits for
/// them on a thread of their own, which tears down every live record and exits. Children
/// inherit the mask: [`spawn`] clears it for the long-lived ones.
fn cleanup_on_signals() {
    // SAFETY: `set` is a local sigset_t initialised by sigemptyset before use; the calls only
    // read or write it and the calling thread's signal mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        set
    };
    let spawned = std::thread::Builder::new().name("cleanup-on-signal".into()).spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is a valid, initialised signal set owned by this closure and `sig` a
        // local int that sigwait writes.
        let rc = unsafe { libc::sigwait(&set, &mut sig) };
        if rc != 0 {
            return;
        }
        eprintln!("\nrouteplex test: signal {sig}: removing the namespaces and processes it made");
        let live: Vec<Shared> = LIVE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for m in live {
            let mut t = Teardown::default();
            lock(&m).teardown(&mut t);
            for e in t.errors {
                eprintln!("routeplex test: cleanup: {e}");
            }
        }
        std::process::exit(128 + sig);
    });
    if spawned.is_err() {
        // No thread to wait on them: let the signals act as before.
        // SAFETY: as above; unblocking the same set in the calling thread.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }
}

fn wait_child(c: &mut Child, limit: Duration) -> bool {
    let t0 = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if t0.elapsed() >= limit => return false,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Sends one API command to a routeplex control socket and returns its answer.
pub fn ask(sock: &Path, cmd: control::api::Command) -> Result<serde_json::Value> {
    Ok(control::daemon::ask_as(sock, cmd, Duration::from_secs(3))?)
}

/// A unique namespace name for role `role` of DUT number `n` of this process.
pub fn ns_name(n: u32, role: &str) -> String {
    format!("rpx-peers-{}-{n}-{role}", std::process::id())
}

/// The next DUT number of this process.
pub fn next_id() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Makes namespace `name` (recorded at once), with IPv6 off for every interface that will be
/// made or moved there, so the kernel sends nothing of its own (router solicitations, MLD).
pub fn add_namespace(made: &Shared, name: &str) -> Result<()> {
    if Path::new("/run/netns").join(name).exists() {
        bail!("namespace {name} exists and this run did not make it: remove it first");
    }
    run("ip", &["netns", "add", name])?;
    lock(made).namespaces.push(name.to_string());
    sysctl(
        name,
        &[("net.ipv6.conf.all.disable_ipv6", "1"), ("net.ipv6.conf.default.disable_ipv6", "1")],
    )?;
    ipn(name, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// A veth pair: `a` (MAC `mac_a`) in namespace `ns_a`, `b` (MAC `mac_b`) in `ns_b`, both up.
pub fn veth(ns_a: &str, a: &str, mac_a: &str, ns_b: &str, b: &str, mac_b: &str) -> Result<()> {
    ipn(
        ns_a,
        &[
            "link", "add", a, "address", mac_a, "type", "veth", "peer", "name", b, "address",
            mac_b, "netns", ns_b,
        ],
    )?;
    ipn(ns_a, &["link", "set", a, "up"])?;
    ipn(ns_b, &["link", "set", b, "up"])?;
    Ok(())
}

/// Interface counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub rx_errors: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
    pub tx_errors: u64,
}

/// Every interface's counters in namespace `ns` (`ip -s -j link show`).
pub fn link_stats(ns: &str) -> Result<BTreeMap<String, LinkStats>> {
    let out = ipn(ns, &["-s", "-j", "link", "show"])?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .with_context(|| format!("ip -n {ns} -s -j link show: not JSON"))?;
    let mut m = BTreeMap::new();
    for l in v.as_array().into_iter().flatten() {
        let Some(name) = l["ifname"].as_str() else { continue };
        let s = &l["stats64"];
        let g = |dir: &str, k: &str| s[dir][k].as_u64().unwrap_or(0);
        m.insert(
            name.to_string(),
            LinkStats {
                rx_packets: g("rx", "packets"),
                rx_dropped: g("rx", "dropped"),
                rx_errors: g("rx", "errors"),
                tx_packets: g("tx", "packets"),
                tx_dropped: g("tx", "dropped"),
                tx_errors: g("tx", "errors"),
            },
        );
    }
    Ok(m)
}

/// Interfaces in namespace `ns` with an XDP program attached.
pub fn xdp_attached(ns: &str) -> Result<Vec<String>> {
    let out = ipn(ns, &["-d", "-j", "link", "show"])?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .with_context(|| format!("ip -n {ns} -d -j link show: not JSON"))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter(|l| l.get("xdp").is_some())
        .filter_map(|l| l["ifname"].as_str().map(|n| format!("{n} in {ns}")))
        .collect())
}

/// The IP-layer counters of namespace `ns` that say a packet was dropped (`nstat`).
pub fn ip_drops(ns: &str) -> Result<BTreeMap<String, u64>> {
    let out = exec(ns, "nstat", &["-asz", "--json"])?;
    let v: serde_json::Value =
        serde_json::from_str(&out).with_context(|| format!("nstat in {ns}: not JSON"))?;
    let k = &v["kernel"];
    const KEYS: &[&str] = &[
        "IpInHdrErrors",
        "IpInAddrErrors",
        "IpInDiscards",
        "IpOutDiscards",
        "IpOutNoRoutes",
        "IpExtInNoRoutes",
        "IpExtInTruncatedPkts",
        "IpExtInCsumErrors",
    ];
    Ok(KEYS.iter().map(|&n| (n.to_string(), k[n].as_u64().unwrap_or(0))).collect())
}

/// Per interface in namespace `ns`: frames its packet sockets dropped because their receive
/// buffer was full (`ss -0 -m`, `skmem` d), summed over the sockets bound to it.
pub fn packet_socket_drops(ns: &str) -> Result<BTreeMap<String, u64>> {
    let out = exec(ns, "ss", &["-0", "-a", "-m", "-n", "-H"])?;
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let mut f = l.split_whitespace();
        let Some(local) = f.nth(4) else { continue };
        let ifname = local.rsplit(':').next().unwrap_or(local);
        let Some(sk) = l.split("skmem:(").nth(1) else { continue };
        let d = sk
            .trim_end_matches([')', ' '])
            .split(',')
            .find_map(|x| x.strip_prefix('d').and_then(|n| n.parse::<u64>().ok()))
            .unwrap_or(0);
        *m.entry(ifname.to_string()).or_insert(0) += d;
    }
    Ok(m)
}

/// Per CPU: frames the backlog queues dropped (`/proc/net/softnet_stat`, second column). Host
/// wide: not per namespace.
pub fn backlog_drops() -> Vec<u64> {
    let Ok(s) = std::fs::read_to_string("/proc/net/softnet_stat") else { return Vec::new() };
    s.lines()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|h| u64::from_str_radix(h, 16).ok()))
        .collect()
}

/// The last `n` lines of file `p`, joined with " | ".
pub fn tail(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().rev().take(n).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Starts `prog args` as a child in its own process group (a Ctrl-C at the terminal reaches
/// this process, which stops it in order), restricted to `cpus` (`taskset -c`), with its
/// output going to `log`, and records it.
pub fn spawn(
    made: &Shared,
    what: &str,
    cpus: &str,
    argv: &[&str],
    env: &[(&str, &Path)],
    log: &Path,
    stop: Stop,
) -> Result<u32> {
    use std::os::unix::process::CommandExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("{}", log.display()))?;
    let mut c = Command::new("taskset");
    c.arg("-c").arg(cpus).args(argv).stdin(Stdio::null()).stdout(f.try_clone()?).stderr(f);
    for (k, v) in env {
        c.env(k, v);
    }
    c.process_group(0);
    // This process blocks SIGINT and SIGTERM in its threads (see `cleanup_on_signals`), and a
    // child inherits the mask: unblock them, or the daemons would ignore the SIGTERM that
    // stops them.
    // SAFETY: the closure runs in the child between fork and exec and only calls sigemptyset
    // and pthread_sigmask, which are async-signal-safe, on a local signal set.
    unsafe {
        c.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            if libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = c
        .spawn()
        .with_context(|| format!("cannot start {what}: taskset -c {cpus} {}", argv.join(" ")))?;
    let pid = child.id();
    lock(made).procs.push(Proc { what: what.to_string(), child, stop });
    Ok(pid)
}

/// Whether recorded process `what` has exited; with its status if so.
pub fn exited(made: &Shared, what: &str) -> Option<String> {
    let mut m = lock(made);
    let p = m.procs.iter_mut().find(|p| p.what == what)?;
    match p.child.try_wait() {
        Ok(Some(st)) => Some(st.to_string()),
        Ok(None) => None,
        Err(e) => Some(e.to_string()),
    }
}
