//! DPDK 22.11's own applications as anchors in routeplex's harness: `dpdk-testpmd` (Debian's
//! `dpdk-dev`) forwarding between two memif ports, and the `l3fwd` example (the source in
//! Debian's `dpdk-doc`, built here at run time with the two changes memif and a full table
//! need). Each runs as a child with two `net_memif` *servers*, as routeplex's own ports are, so
//! the generator and the sink in this process drive either the same way: memif client →
//! application → memif client. The forwarding lcore is pinned to the CPU routeplex's worker
//! gets.
//!
//! Elsewhere than Debian's packages: `ROUTEPLEX_L3FWD` names an l3fwd already built (with the
//! same edits), and `ROUTEPLEX_DPDK_EAL` adds EAL options to both: where the drivers are not in
//! DPDK's default plugin directory, `-d FILE` for each of the vdev bus, the ring mempool and
//! memif drivers (a `-d DIR` loads only files named `*.so`).

use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{bail, Context, Result};
use ports::memif::MemifPort;

/// Where Debian's `dpdk-doc` puts DPDK's examples.
const EXAMPLES: &str = "/usr/share/dpdk/examples";

/// What `scripts/setup --bench` installs, said when a tool is missing.
const INSTALL: &str = "scripts/setup --bench installs it (Debian packages dpdk-dev, dpdk-doc)";

/// `dpdk-testpmd`'s path.
pub fn testpmd() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("dpdk-testpmd"))
        .find(|p| p.is_file())
        .with_context(|| format!("dpdk-testpmd is not installed: {INSTALL}"))
}

/// Edits to l3fwd's source: each `from` must occur exactly once, so a DPDK whose example
/// changed fails here, saying which edit, instead of building something else.
const L3FWD_EDITS: [(&str, &str, &str); 7] = [
    // memif offers no Rx offloads; asking for checksum offload fails the port's configure.
    ("main.c", ".offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,", ".offloads = 0,"),
    // The full table: 509k IPv4 prefixes (1,024 rules and 256 tbl8 groups as shipped).
    (
        "l3fwd_lpm.c",
        "#define IPV4_L3FWD_LPM_MAX_RULES         1024",
        "#define IPV4_L3FWD_LPM_MAX_RULES (1 << 20)",
    ),
    (
        "l3fwd_lpm.c",
        "#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 8)",
        "#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 16)",
    ),
    (
        "l3fwd_lpm.c",
        "#define IPV6_L3FWD_LPM_MAX_RULES         1024",
        "#define IPV6_L3FWD_LPM_MAX_RULES (1 << 18)",
    ),
    ("l3fwd_fib.c", "config_ipv4.max_routes = (1 << 16);", "config_ipv4.max_routes = (1 << 20);"),
    ("l3fwd_fib.c", "config.max_routes = (1 << 16) - 1;", "config.max_routes = (1 << 18);"),
    // The IPv6 trie ran out of tbl8 groups at entry 17,415 of the 135k real prefixes.
    ("l3fwd_fib.c", "config.trie.num_tbl8 = (1 << 15);", "config.trie.num_tbl8 = (1 << 18);"),
];

/// The l3fwd example built from `dpdk-doc`'s source with [`L3FWD_EDITS`], cached under
/// `~/.cache/routeplex/dpdk` by a hash of the edits and of DPDK's build flags.
pub fn l3fwd() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ROUTEPLEX_L3FWD") {
        let p = PathBuf::from(p);
        crate::ensure!(p.is_file(), "ROUTEPLEX_L3FWD={}: no such file", p.display());
        return Ok(p);
    }
    let src = Path::new(EXAMPLES);
    if !src.join("l3fwd/main.c").is_file() {
        bail!("DPDK's l3fwd source is not in {EXAMPLES}/l3fwd: {INSTALL}");
    }
    let pc = Command::new("pkg-config")
        .args(["--modversion", "--cflags", "--libs", "libdpdk"])
        .output()
        .context("pkg-config")?;
    if !pc.status.success() {
        bail!("libdpdk-dev is not installed (scripts/setup installs it)");
    }
    let mut h = std::hash::DefaultHasher::new();
    (format!("{L3FWD_EDITS:?}"), &pc.stdout).hash(&mut h);
    let dir = crate::bench_vhost::dpdk_cache_dir()?;
    let bin = dir.join(format!("l3fwd-{:016x}", h.finish()));
    if bin.is_file() {
        return Ok(bin);
    }
    let work = dir.join(format!("l3fwd-build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let built = build_l3fwd(src, &work);
    let result = built.and_then(|b| std::fs::rename(&b, &bin).context("keeping the build"));
    let _ = std::fs::remove_dir_all(&work);
    result.map(|()| bin)
}

fn build_l3fwd(src: &Path, work: &Path) -> Result<PathBuf> {
    for d in ["l3fwd", "common"] {
        copy_dir(&src.join(d), &work.join(d))?;
    }
    let app = work.join("l3fwd");
    for (file, from, to) in L3FWD_EDITS {
        let path = app.join(file);
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let n = text.matches(from).count();
        crate::ensure!(
            n == 1,
            "{EXAMPLES}/l3fwd/{file}: `{from}` occurs {n} times, not once (another DPDK version?): the edit for memif and the full table cannot be made"
        );
        std::fs::write(&path, text.replacen(from, to, 1))?;
    }
    let out = Command::new("make")
        .arg("-s")
        .current_dir(&app)
        .output()
        .context("make (building DPDK's l3fwd)")?;
    if !out.status.success() {
        bail!("building DPDK's l3fwd failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    // build/l3fwd is a link to the build it chose (shared or static).
    std::fs::canonicalize(app.join("build/l3fwd")).context("build/l3fwd")
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| from.display().to_string())? {
        let e = e?;
        let t = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &t)?;
        } else {
            std::fs::copy(e.path(), &t).with_context(|| e.path().display().to_string())?;
        }
    }
    Ok(())
}

/// The most of an application's output kept for error messages.
const LOG_BYTES: usize = 64 << 10;

/// A DPDK application with two memif server ports on abstract sockets `@TAG-0` and `@TAG-1`;
/// killed, and its runtime directory removed, on drop.
pub struct App {
    child: Child,
    /// Held open: testpmd without `-i` exits when its stdin ends.
    _stdin: Option<ChildStdin>,
    prefix: String,
    /// The sockets, as [`crate::pktgen::connect`] takes them.
    pub sockets: [String; 2],
    lines: mpsc::Receiver<String>,
    /// Its file name, for messages.
    pub name: String,
    /// What it printed so far (the route lines l3fwd prints while loading left out).
    pub log: String,
}

impl App {
    /// Starts `bin` with EAL options (`lcores`, EAL's `--lcores` map) and two memif servers,
    /// then `app_args`.
    pub fn start(bin: &Path, tag: &str, lcores: &str, app_args: &[String]) -> Result<App> {
        let prefix = tag.to_string();
        let sockets = [format!("@{tag}-0"), format!("@{tag}-1")];
        let mut cmd = Command::new(bin);
        cmd.args(["--no-huge", "-m", "1024", "--no-pci", "--no-telemetry", "--no-shconf"])
            .arg(format!("--file-prefix={prefix}"))
            .arg(format!("--lcores={lcores}"));
        for i in 0..2 {
            cmd.arg(format!(
                "--vdev=net_memif{i},role=server,id=0,socket={tag}-{i},socket-abstract=yes"
            ));
        }
        if let Some(extra) = std::env::var_os("ROUTEPLEX_DPDK_EAL") {
            cmd.args(extra.to_string_lossy().split_whitespace());
        }
        // Our own affinity (pinned to the generator's CPU) must not narrow the child's.
        let pinned = crate::sys::unpin();
        let child = cmd
            .arg("--")
            .args(app_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()));
        if pinned {
            crate::sys::pin(0);
        }
        let mut child = child?;
        let (send, lines) = mpsc::channel();
        for out in [
            child.stdout.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let send = send.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    // l3fwd prints a line per route it loads (LPM or FIB): not worth keeping.
                    if !l.contains(": Adding route") && send.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let name = bin.file_name().map_or("?".into(), |n| n.to_string_lossy().into_owned());
        Ok(App { child, _stdin: stdin, prefix, sockets, lines, name, log: String::new() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error showing what it printed if it has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            // Its output threads end with it; give them a moment to hand over the last lines.
            std::thread::sleep(Duration::from_millis(100));
            self.take_lines();
            bail!("the DPDK application {} exited ({status}):\n{}", self.name, self.log);
        }
        self.take_lines();
        Ok(())
    }

    /// Appends what it printed to `log`, keeping the last [`LOG_BYTES`].
    fn take_lines(&mut self) {
        for l in self.lines.try_iter() {
            self.log.push_str(&l);
            self.log.push('\n');
        }
        if self.log.len() > LOG_BYTES {
            let mut cut = self.log.len() - LOG_BYTES;
            while !self.log.is_char_boundary(cut) {
                cut += 1;
            }
            self.log.drain(..cut);
        }
    }

    /// A memif client of its port `i`, once its link is up (within `within`); its exit while
    /// waiting is an error that shows what it printed.
    pub fn connect(&mut self, i: usize, name: &str, within: Duration) -> Result<MemifPort> {
        let t0 = std::time::Instant::now();
        loop {
            let step = Duration::from_secs(2).min(within.saturating_sub(t0.elapsed()));
            match crate::pktgen::connect_within(&self.sockets[i], 0, name, step) {
                Ok(p) => return Ok(p),
                Err(e) => {
                    self.check_running()?;
                    if t0.elapsed() >= within {
                        bail!(
                            "{}'s memif port {i} did not come up within {within:?} (the last try: {e}); it printed:\n{}",
                            self.name,
                            self.log
                        );
                    }
                }
            }
        }
    }

    /// Stops (SIGSTOP) or continues (SIGCONT) it, so that it leaves its CPU to the other side
    /// of a comparison without losing its loaded table or its memif connections.
    pub fn pause(&self, stopped: bool) {
        crate::sys::kill(self.child.id(), if stopped { libc::SIGSTOP } else { libc::SIGCONT });
    }
}

impl Drop for App {
    fn drop(&mut self) {
        crate::sys::kill(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
        for base in ["/var/run/dpdk", "/run/dpdk", "/tmp/dpdk"] {
            let _ = std::fs::remove_dir_all(format!("{base}/{}", self.prefix));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_l3fwd_edits_name_distinct_lines() {
        for (i, (f, from, to)) in L3FWD_EDITS.iter().enumerate() {
            assert_ne!(from, to, "edit {i} of {f} changes nothing");
            assert!(
                L3FWD_EDITS.iter().filter(|(g, x, _)| g == f && x == from).count() == 1,
                "edit {i} of {f} is listed twice"
            );
        }
    }

    /// Where `dpdk-doc` is installed, every edit finds its line: a DPDK update that moved one
    /// fails here rather than at benchmark time.
    #[test]
    fn the_l3fwd_edits_apply_to_the_installed_source() {
        let dir = Path::new(EXAMPLES).join("l3fwd");
        if !dir.is_dir() {
            eprintln!("skipped: {} absent (dpdk-doc not installed; {INSTALL})", dir.display());
            return;
        }
        for (f, from, _) in L3FWD_EDITS {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            assert_eq!(text.matches(from).count(), 1, "{f}: `{from}`");
        }
    }
}
