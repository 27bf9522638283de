//! Stock Linux guests under QEMU, for tests and `routeplex test peers`: a Debian cloud kernel
//! and a busybox initramfs built at run time into a cache outside the repository, and QEMU
//! processes whose virtio-net NICs attach to vhost-user sockets.
//!
//! Contract:
//! - [`GuestImage::ensure`] builds the image once per content (kernel package, `/init`, the
//!   helper program) under [`cache_dir`] and reuses it after: the kernel `.deb` is only
//!   downloaded (`apt-get download`) and unpacked, never installed; the helper is compiled
//!   static with `cc`; the archive is made with busybox's `cpio`. Nothing is written into the
//!   repository. The cache directory is made mode 0700.
//! - What the guest does is set on its kernel command line (`rvh.*`, see `init.sh`): `ping`
//!   (configure eth0, ping the gateway, UDP request/response through it with `rvhx`, power
//!   off) or `forward` (two NICs, Linux IP forwarding, static neighbours and routes, run until
//!   killed). Lines meant for the host start with `RVH `.
//! - [`Qemu`] is one guest process; it is killed and reaped when dropped. It uses KVM only
//!   where `/dev/kvm` exists and the CPU advertises VMX or SVM (a `/dev/kvm` without them, as
//!   on a PVM host, boots nothing), and TCG otherwise: [`Accel`] says which. QEMU 7.2 under
//!   TCG crashes on vhost-user with MSI-X, so there every NIC is `vectors=0` (INTx).

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Error;

const INIT: &str = include_str!("init.sh");
const RVHX: &str = include_str!("rvhx.c");
/// The virtio modules the cloud kernel builds as modules, in load order.
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
];
const QEMU: &str = "qemu-system-x86_64";

/// Where guest images are cached: `$ROUTEPLEX_GUEST_CACHE`, else `~/.cache/routeplex/guest`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ROUTEPLEX_GUEST_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/routeplex/guest")
}

/// Why QEMU cannot run here, if it cannot: the one reason a guest test may skip.
pub fn qemu_unavailable() -> Option<String> {
    match Command::new(QEMU).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("{QEMU} --version failed: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => {
            Some(format!("{QEMU} not runnable ({e}); scripts/setup installs qemu-system-x86"))
        }
    }
}

/// How QEMU runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's translator: every guest instruction is emulated, one host CPU per vCPU, tens of
    /// times slower than KVM. Figures measured under TCG are the guest's CPU emulation's, not
    /// its network stack's.
    Tcg,
}

impl Accel {
    /// KVM when `/dev/kvm` opens and the CPU has VMX or SVM; TCG otherwise.
    pub fn detect() -> Accel {
        let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let hw = flags
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
        if hw && dev {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }

    /// The name QEMU uses.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// A bootable guest: kernel and initramfs.
#[derive(Clone, Debug)]
pub struct GuestImage {
    /// The kernel (`vmlinuz`).
    pub kernel: PathBuf,
    /// The initramfs (`initrd.gz`).
    pub initrd: PathBuf,
    /// The kernel package it came from.
    pub kernel_package: String,
}

fn run(cmd: &mut Command, what: &str) -> Result<String, Error> {
    let o = cmd.output().map_err(|e| Error::new(format!("{what}: {e}")))?;
    if !o.status.success() {
        return Err(Error::new(format!(
            "{what} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl GuestImage {
    /// The cached image, built first if its content changed or it is not there.
    pub fn ensure() -> Result<GuestImage, Error> {
        let dir = cache_dir();
        mkdir_private(&dir)?;
        let out = run(
            Command::new("apt-cache").args(["depends", "linux-image-cloud-amd64"]),
            "apt-cache depends linux-image-cloud-amd64",
        )?;
        let kpkg = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("Depends: linux-image-"))
            .map(|v| format!("linux-image-{v}"))
            .ok_or_else(|| Error::new("apt-cache names no kernel for linux-image-cloud-amd64"))?;
        let mut h = std::hash::DefaultHasher::new();
        (INIT, RVHX, &kpkg, MODULES).hash(&mut h);
        let img = dir.join(format!("img-{:016x}", h.finish()));
        let image = GuestImage {
            kernel: img.join("vmlinuz"),
            initrd: img.join("initrd.gz"),
            kernel_package: kpkg.clone(),
        };
        if image.kernel.exists() && image.initrd.exists() {
            return Ok(image);
        }
        let work = dir.join(format!("build-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let r = build(&dir, &work, &kpkg, &img);
        let _ = std::fs::remove_dir_all(&work);
        if r.is_ok() {
            // Images of older contents are not used again: keep the cache to one.
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let n = e.file_name();
                let n = n.to_string_lossy();
                if n.starts_with("img-") && e.path() != img {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        r.map(|()| image)
    }
}

fn mkdir_private(d: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(d)
        .map_err(|e| Error::new(format!("creating {}: {e}", d.display())))?;
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::new(format!("chmod {}: {e}", d.display())))
}

fn build(cache: &Path, work: &Path, kpkg: &str, img: &Path) -> Result<(), Error> {
    let debs = cache.join("debs");
    mkdir_private(&debs)?;
    let find_deb = || -> Option<PathBuf> {
        std::fs::read_dir(&debs).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{kpkg}_")) && n.ends_with(".deb"))
        })
    };
    let deb = match find_deb() {
        Some(d) => d,
        None => {
            run(
                Command::new("apt-get").arg("download").arg(kpkg).current_dir(&debs),
                &format!("apt-get download {kpkg}"),
            )?;
            find_deb().ok_or_else(|| Error::new(format!("apt-get download {kpkg}: no .deb")))?
        }
    };
    let kx = work.join("kx");
    mkdir_private(&kx)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&kx), "dpkg-deb -x")?;
    let kver = kpkg.trim_start_matches("linux-image-");
    let root = work.join("root");
    for d in ["bin", "sbin", "proc", "sys", "dev", "tmp", "lib/modules"] {
        mkdir_private(&root.join(d))?;
    }
    let mdir = kx.join(format!("lib/modules/{kver}/kernel"));
    for m in MODULES {
        let base = Path::new(m).file_name().and_then(|n| n.to_str()).unwrap_or(m);
        let src = mdir.join(format!("{m}.ko"));
        std::fs::copy(&src, root.join(format!("lib/modules/{base}.ko"))).map_err(|e| {
            Error::new(format!(
                "{}: {e} (the guest needs it as an uncompressed module)",
                src.display()
            ))
        })?;
    }
    let bb = root.join("bin/busybox");
    std::fs::copy("/bin/busybox", &bb)
        .map_err(|e| Error::new(format!("/bin/busybox: {e} (apt-get install busybox-static)")))?;
    let list = run(Command::new(&bb).arg("--list"), "busybox --list")?;
    for a in list.lines().map(str::trim).filter(|a| !a.is_empty() && *a != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(a));
    }
    let src = work.join("rvhx.c");
    std::fs::write(&src, RVHX).map_err(|e| Error::new(format!("writing rvhx.c: {e}")))?;
    run(
        Command::new("cc").args(["-O2", "-static", "-o"]).arg(root.join("bin/rvhx")).arg(&src),
        "cc -static rvhx.c (needs libc6-dev)",
    )?;
    let init = root.join("init");
    std::fs::write(&init, INIT).map_err(|e| Error::new(format!("writing init: {e}")))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::new(format!("chmod init: {e}")))?;
    let staged = work.join("out");
    mkdir_private(&staged)?;
    run(
        Command::new("sh")
            .arg("-c")
            .arg("find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null | gzip -6 > \"$1\"")
            .arg("sh")
            .arg(staged.join("initrd.gz"))
            .current_dir(&root),
        "cpio | gzip",
    )?;
    std::fs::copy(kx.join(format!("boot/vmlinuz-{kver}")), staged.join("vmlinuz"))
        .map_err(|e| Error::new(format!("vmlinuz-{kver}: {e}")))?;
    // Another process may have finished the same image meanwhile: either copy is good.
    if std::fs::rename(&staged, img).is_err() && !img.join("initrd.gz").exists() {
        return Err(Error::new(format!("could not move the image to {}", img.display())));
    }
    Ok(())
}

/// One virtio-net NIC on a vhost-user socket.
#[derive(Clone, Debug)]
pub struct Nic {
    /// The socket.
    pub socket: PathBuf,
    /// The guest's MAC address.
    pub mac: [u8; 6],
    /// QEMU listens (`server=on`; routeplex connects) rather than connecting.
    pub qemu_listens: bool,
    /// Queue pairs.
    pub queues: u16,
}

/// QEMU's arguments (after the program name) for `image` with `nics`, the guest command line
/// `append` (after the console settings) and `mem_mb` of memory shared through a memfd
/// (vhost-user needs it shared), run by `accel`: for callers that start QEMU themselves.
pub fn qemu_args(
    image: &GuestImage,
    nics: &[Nic],
    append: &str,
    mem_mb: u32,
    accel: Accel,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "-machine",
        &format!("q35,accel={}", accel.name()),
        "-cpu",
        if accel == Accel::Kvm { "host" } else { "max" },
        "-smp",
        "1",
        "-m",
        &format!("{mem_mb}M"),
        "-object",
        &format!("memory-backend-memfd,id=mem,size={mem_mb}M,share=on"),
        "-numa",
        "node,memdev=mem",
        "-kernel",
        &image.kernel.to_string_lossy(),
        "-initrd",
        &image.initrd.to_string_lossy(),
        "-append",
        &format!("console=ttyS0 quiet panic=-1 ipv6.disable=1 {append}"),
        "-nographic",
        "-no-reboot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (i, n) in nics.iter().enumerate() {
        let mode = if n.qemu_listens { ",server=on,wait=off" } else { ",reconnect=1" };
        let m = n.mac;
        a.push("-chardev".into());
        a.push(format!("socket,id=c{i},path={}{mode}", n.socket.display()));
        a.push("-netdev".into());
        a.push(format!("vhost-user,id=n{i},chardev=c{i},queues={}", n.queues));
        a.push("-device".into());
        a.push(format!(
            "virtio-net-pci,netdev=n{i},mac={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x},romfile={}{}",
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            if n.queues > 1 { ",mq=on" } else { "" },
            // QEMU 7.2 segfaults on vhost-user with MSI-X under TCG: INTx there.
            if accel == Accel::Tcg { ",vectors=0" } else { "" }
        ));
    }
    a
}

/// A running guest; killed when dropped.
pub struct Qemu {
    child: Child,
    log: ConsoleLog,
    started: Instant,
    /// How it runs.
    pub accel: Accel,
}

impl Qemu {
    /// Starts `image` with `nics` and the guest command line `append` (added to the console
    /// settings), `mem_mb` of memory shared through a memfd (vhost-user needs it shared).
    pub fn spawn(
        image: &GuestImage,
        nics: &[Nic],
        append: &str,
        mem_mb: u32,
    ) -> Result<Qemu, Error> {
        let accel = Accel::detect();
        let mut cmd = Command::new(QEMU);
        cmd.args(qemu_args(image, nics, append, mem_mb, accel));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::new(format!("starting {QEMU}: {e}")))?;
        let log = ConsoleLog::capture(&mut child);
        Ok(Qemu { child, log, started: Instant::now(), accel })
    }

    /// Everything the guest and QEMU printed so far.
    pub fn log(&self) -> String {
        self.log.text()
    }

    /// The guest's `RVH ` lines so far.
    pub fn rvh_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|l| l.find("RVH ").map(|i| l[i + 4..].trim().to_string()))
            .collect()
    }

    /// The exit status, if QEMU has exited; then its whole output is in [`log`](Self::log).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        let st = self.child.try_wait().ok().flatten()?;
        self.log.settle();
        Some(st)
    }

    /// Time since start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Kills and reaps QEMU.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// QEMU's stdout and stderr, read by a thread each into one bounded text. When QEMU has exited
/// the readers may still hold its last lines (seen: a guest's final `RVH` lines missing from a
/// log read right after the exit), so [`settle`](Self::settle) waits for them to reach the end
/// of their pipes.
struct ConsoleLog {
    text: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl ConsoleLog {
    fn capture(child: &mut Child) -> ConsoleLog {
        let text = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        let pipes = [
            child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
            child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        for mut s in pipes.into_iter().flatten() {
            let text = text.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut l = text.lock().unwrap_or_else(|e| e.into_inner());
                    // Bounded: a guest that floods its console keeps only the last 1 MiB.
                    if l.len() > 1 << 20 {
                        let cut = l.len() - (1 << 19);
                        let cut = (cut..l.len()).find(|&i| l.is_char_boundary(i)).unwrap_or(0);
                        l.drain(..cut);
                    }
                    l.push_str(&String::from_utf8_lossy(&buf[..n]).replace('\r', ""));
                }
            }));
        }
        ConsoleLog { text, readers }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Once the process has exited: waits (2 s at most, in case something else holds a pipe
    /// open) until both readers have reached the end of their pipes.
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.readers.retain(|r| !r.is_finished());
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_log_has_every_line_once_its_process_has_exited() {
        // Fewer bytes than a pipe holds: the program can exit before a reader has read any.
        let mut child = Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 3000 ]; do echo \"RVH line $i\"; i=$((i+1)); done; echo err >&2"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut log = ConsoleLog::capture(&mut child);
        while child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_micros(100));
        }
        log.settle();
        let text = log.text();
        assert_eq!(text.lines().filter(|l| l.starts_with("RVH line ")).count(), 3000);
        assert!(
            text.contains("RVH line 2999\n") && text.contains("err\n"),
            "{}",
            &text[text.len().saturating_sub(200)..]
        );
        assert!(log.readers.is_empty(), "readers still running after the end of their pipes");
    }
}
