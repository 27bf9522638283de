//! The routing daemons of a failure timeline (`routeplex test timeline`): BIRD 2, or FRR's
//! zebra and bgpd, started in a VR's control-plane namespace with every file they write
//! (logs, control sockets, pid files) in the run's directory; killed (SIGKILL) and started
//! again by the timeline's events; all killed when dropped, pass or fail.
//!
//! For FRR the routing daemon is bgpd: a kill takes bgpd only, so zebra, which installed its
//! routes, removes them as it would when bgpd dies on a real router; a restart starts bgpd
//! again against the same zebra.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use control::Topology;
use tester::scenario::timeline::{Daemon, DaemonKind};

/// How long bgpd waits for zebra's socket to appear.
const ZEBRA_WAIT: Duration = Duration::from_secs(10);

/// One process: which VR's, which program, where it logs.
struct Running {
    vr: String,
    program: &'static str,
    child: Child,
    log: PathBuf,
}

/// The daemons of a run.
pub struct Daemons {
    dir: PathBuf,
    specs: Vec<Daemon>,
    running: Vec<Running>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for r in &mut self.running {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

impl Daemons {
    /// Daemons as `specs` name them, writing under `dir` (which must exist).
    pub fn new(dir: &Path, specs: &[Daemon]) -> Daemons {
        Daemons { dir: dir.to_path_buf(), specs: specs.to_vec(), running: Vec::new() }
    }

    /// Starts every daemon the file names.
    pub fn start_all(&mut self, topo: &Topology) -> Result<()> {
        for d in self.specs.clone() {
            match d.kind {
                DaemonKind::Bird => self.bird(topo, &d)?,
                DaemonKind::Frr => self.frr(topo, &d, true)?,
            };
        }
        Ok(())
    }

    /// SIGKILL to VR `vr`'s routing daemon (BIRD, or FRR's bgpd); returns its pid.
    pub fn kill(&mut self, vr: &str) -> Result<u32> {
        let Some(r) =
            self.running.iter_mut().find(|r| r.vr == vr && matches!(r.program, "bird" | "bgpd"))
        else {
            bail!("VR {vr:?} runs no routing daemon now");
        };
        let pid = r.child.id();
        r.child.kill()?;
        r.child.wait()?;
        let program = r.program;
        self.running.retain(|r| !(r.vr == vr && r.program == program));
        Ok(pid)
    }

    /// Starts VR `vr`'s routing daemon again (after [`Daemons::kill`]); returns its pid.
    pub fn restart(&mut self, topo: &Topology, vr: &str) -> Result<u32> {
        let Some(d) = self.specs.iter().find(|d| d.vr == vr).cloned() else {
            bail!("VR {vr:?} runs no daemon (daemons:)");
        };
        match d.kind {
            DaemonKind::Bird => self.bird(topo, &d),
            DaemonKind::Frr => self.frr(topo, &d, false),
        }
    }

    /// The last lines of every daemon's log, newest first, for an error.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for r in &self.running {
            let l = std::fs::read_to_string(&r.log).unwrap_or_default();
            let tail: Vec<&str> = l.lines().rev().take(8).collect();
            s += &format!("--- {}'s {} log, newest first\n{}\n", r.vr, r.program, tail.join("\n"));
        }
        s
    }

    fn netns(topo: &Topology, vr: &str) -> Result<String> {
        let v = topo.vr_index(vr).context("checked: the VR exists")?;
        Ok(topo.control_plane(v).context("checked: it has a control plane")?.netns.clone())
    }

    /// Starts `program` with `args` in namespace `ns`.
    fn spawn(&mut self, vr: &str, ns: &str, program: &'static str, args: &[&str]) -> Result<u32> {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("ip netns exec {ns} {program}"))?;
        let pid = child.id();
        let log = match program {
            "bird" => self.dir.join(format!("{vr}.log")),
            _ => self.dir.join(format!("frr-{vr}/{program}.log")),
        };
        self.running.push(Running { vr: vr.to_string(), program, child, log });
        Ok(pid)
    }

    /// BIRD in the VR's namespace with its config (checked first with `bird -p`). BIRD 2
    /// removes a killed daemon's stale control socket itself, so a restart reuses the paths.
    fn bird(&mut self, topo: &Topology, d: &Daemon) -> Result<u32> {
        let (vr, config) = (&d.vr, &d.config);
        let ns = Self::netns(topo, vr)?;
        let conf = std::fs::canonicalize(config).with_context(|| config.display().to_string())?;
        let wrapper = self.dir.join(format!("{vr}.conf"));
        let log = self.dir.join(format!("{vr}.log"));
        let mut w = std::fs::File::create(&wrapper)?;
        writeln!(w, "log \"{}\" all;\ninclude \"{}\";", log.display(), conf.display())?;
        let parse = Command::new("bird").arg("-p").arg("-c").arg(&wrapper).output();
        let parse = parse.context("cannot run bird (scripts/setup installs bird2)")?;
        if !parse.status.success() {
            bail!("{}: {}", config.display(), String::from_utf8_lossy(&parse.stderr).trim());
        }
        let p = |f: String| self.dir.join(f).display().to_string();
        let (wrapper, ctl, pid) =
            (wrapper.display().to_string(), p(format!("{vr}.ctl")), p(format!("{vr}.pid")));
        self.spawn(vr, &ns, "bird", &["bird", "-f", "-c", &wrapper, "-s", &ctl, "-P", &pid])
    }

    /// FRR in the VR's namespace: zebra (when `zebra`) and bgpd with the file's config, in
    /// the run's `frr-VR` directory. FRR drops to its own user, so that directory is its own
    /// and the run's directory lets it through.
    fn frr(&mut self, topo: &Topology, d: &Daemon, zebra: bool) -> Result<u32> {
        use std::os::unix::fs::PermissionsExt;
        let vr = &d.vr;
        let ns = Self::netns(topo, vr)?;
        let dir = self.dir.join(format!("frr-{vr}"));
        if zebra {
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711))?;
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("zebra.conf"), format!("hostname {vr}\n"))?;
            std::fs::copy(&d.config, dir.join("bgpd.conf"))
                .with_context(|| d.config.display().to_string())?;
            let o = Command::new("chown").args(["-R", "frr:frr"]).arg(&dir).output();
            let o = o.context("chown (FRR's user frr: scripts/setup installs frr)")?;
            if !o.status.success() {
                bail!("chown frr:frr {}: {}", dir.display(), String::from_utf8_lossy(&o.stderr));
            }
        }
        let f = |name: &str| dir.join(name).display().to_string();
        let (vty, zsock) = (f(""), f("zserv.api"));
        let mut pid = 0;
        let daemons: &[&'static str] = if zebra { &["zebra", "bgpd"] } else { &["bgpd"] };
        for &program in daemons {
            let bin = format!("/usr/lib/frr/{program}");
            let (conf, pidf) = (f(&format!("{program}.conf")), f(&format!("{program}.pid")));
            let log = format!("file:{}", f(&format!("{program}.log")));
            let mut args = vec![
                bin.as_str(),
                "-f",
                &conf,
                "-i",
                &pidf,
                "-z",
                &zsock,
                "--vty_socket",
                &vty,
                "-u",
                "frr",
                "-g",
                "frr",
                "-P",
                "0",
                "--log",
                &log,
            ];
            if program == "bgpd" {
                args.extend(["-p", "179"]);
            }
            pid = self.spawn(vr, &ns, program, &args)?;
            if program == "zebra" {
                // bgpd connects to zebra's socket: let it appear first.
                let end = Instant::now() + ZEBRA_WAIT;
                while !dir.join("zserv.api").exists() {
                    if Instant::now() > end {
                        bail!("{vr}'s zebra made no socket in {ZEBRA_WAIT:?}\n{}", self.logs());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        Ok(pid)
    }
}
