//! AF_XDP ports on veth pairs (root only; skipped with a printed reason otherwise).
//!
//! Covers: every byte and counter in bursts of 1, 2 and 257 (60..1514 bytes, VLAN-tagged or
//! not) both ways; driver mode on veth, shown by `ip link` as `xdp`; forced SKB mode shown as
//! `xdpgeneric`; no XDP program left after drop, after SIGKILL of the owning process, and a new
//! port on the same interface working afterwards; a second port on a busy interface failing
//! with a clear error; the interface disappearing under an open port and coming back; a port
//! opened inside another network namespace; jumbo frames (MTU 9000) over several descriptors
//! both ways in driver and SKB mode, and a frame longer than a packet buffer dropped whole and
//! counted; copy mode reported on veth, and zero-copy refused there with a clear error.

mod common_kernel;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common_kernel::*;
use ports::afxdp::{AfXdpOptions, AfXdpPort, BindMode, RxDrops, XdpMode};
use ports::{Batch, Port, PortStatus, MAX_BURST, MAX_FRAME};

fn open(dev: &str) -> AfXdpPort {
    AfXdpPort::open(dev, &AfXdpOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until no XDP program is attached to `dev` (the kernel detaches when the link's last
/// descriptor closes; this only guards against a slow teardown, it asserts no timing).
fn assert_detached(dev: &str, ns: Option<&str>) {
    let deadline = Instant::now() + PATIENCE;
    while let Some(line) = xdp_prog_line(dev, ns) {
        assert!(Instant::now() < deadline, "{dev}: XDP program still attached: {line}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!link_line(dev, ns).contains(" xdp"), "{}", link_line(dev, ns));
}

#[test]
fn afxdp_pair_moves_every_byte_in_driver_mode() {
    if !root_or_skip("afxdp_pair_moves_every_byte_in_driver_mode") {
        return;
    }
    let v = Veth::new();
    let mut a = open(&v.a);
    let mut b = open(&v.b);
    // veth implements XDP natively: Auto must pick driver mode, and the kernel must agree.
    assert_eq!((a.mode(), b.mode()), (Some(XdpMode::Driver), Some(XdpMode::Driver)));
    assert!(link_line(&v.a, None).contains(" xdp "), "{}", link_line(&v.a, None));
    let line = xdp_prog_line(&v.a, None).expect("program attached");
    assert!(line.contains(&format!("id {} ", a.prog_id().unwrap())), "{line}");
    assert!(line.contains("rpx_xsk"), "{line}");
    workout(&mut a, &mut b);
    assert_eq!(a.kernel_anomalies() + b.kernel_anomalies(), 0);
    assert_eq!((a.status(), b.status()), (PortStatus::Up, PortStatus::Up));
    drop(a);
    drop(b);
    assert_detached(&v.a, None);
    assert_detached(&v.b, None);
}

#[test]
fn afxdp_skb_mode_works_and_detaches() {
    if !root_or_skip("afxdp_skb_mode_works_and_detaches") {
        return;
    }
    let v = Veth::new();
    let skb = AfXdpOptions { mode: XdpMode::Skb, frames: 1024, ..Default::default() };
    let mut a = AfXdpPort::open(&v.a, &skb).unwrap();
    let mut b = AfXdpPort::open(&v.b, &AfXdpOptions { frame_size: 4096, ..skb.clone() }).unwrap();
    assert_eq!(a.mode(), Some(XdpMode::Skb));
    assert!(link_line(&v.a, None).contains("xdpgeneric"), "{}", link_line(&v.a, None));
    workout(&mut a, &mut b);
    drop(a);
    assert_detached(&v.a, None);
}

#[test]
fn afxdp_second_port_on_a_busy_interface_fails_clearly() {
    if !root_or_skip("afxdp_second_port_on_a_busy_interface_fails_clearly") {
        return;
    }
    let v = Veth::new();
    let mut a = open(&v.a);
    let mut b = open(&v.b);
    let e = AfXdpPort::open(&v.a, &AfXdpOptions::default()).err().expect("second open must fail");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("afxdp {}: ", v.a)), "{msg}");
    assert!(msg.contains("busy"), "{msg}");
    // The failed open left the first port alone.
    workout(&mut a, &mut b);
    let e = AfXdpPort::open("rpx-nosuchif", &AfXdpOptions::default()).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(e.to_string(), "afxdp rpx-nosuchif: no such interface");
    let e =
        AfXdpPort::open(&v.a, &AfXdpOptions { frames: 1000, ..Default::default() }).err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
}

const MEMLOCK_ENV: &str = "RPX_AFXDP_MEMLOCK_IF";

/// The child half of the memlock test, run without `CAP_IPC_LOCK` under an 8 MiB limit: the
/// default port's 16 MiB UMEM must be refused naming the limit, a 2 MiB one must open. Run by
/// hand (without the variable) it does nothing.
#[test]
#[ignore = "helper process for afxdp_umem_over_the_memlock_limit_is_named"]
fn afxdp_memlock_child() {
    let Ok(dev) = std::env::var(MEMLOCK_ENV) else { return };
    match AfXdpPort::open(&dev, &AfXdpOptions::default()) {
        Ok(_) => println!("OPENED default"),
        Err(e) => println!("REFUSED default: {e}"),
    }
    match AfXdpPort::open(&dev, &AfXdpOptions { frames: 1024, ..Default::default() }) {
        Ok(_) => println!("OPENED small"),
        Err(e) => println!("REFUSED small: {e}"),
    }
}

/// Without root's `CAP_IPC_LOCK` a UMEM counts against `RLIMIT_MEMLOCK` (8 MiB is systemd's
/// default): the kernel's bare `ENOBUFS` becomes an error that names the limit and the ways
/// out.
#[test]
fn afxdp_umem_over_the_memlock_limit_is_named() {
    if !root_or_skip("afxdp_umem_over_the_memlock_limit_is_named") {
        return;
    }
    let v = Veth::new();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--"])
        .args(["prlimit", "--memlock=8388608:8388608", "--"])
        .arg(exe)
        .args(["--exact", "afxdp_memlock_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(MEMLOCK_ENV, &v.a)
        .output();
    let Ok(out) = out else {
        println!("skipped: setpriv (util-linux) is not installed to drop CAP_IPC_LOCK");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && (err.starts_with("setpriv:") || err.starts_with("prlimit:")) {
        println!("skipped: could not drop CAP_IPC_LOCK or set the limit here: {err}");
        return;
    }
    let all = format!("{text}{err}");
    assert!(out.status.success(), "{all}");
    let refused = text.lines().find_map(|l| l.split_once("REFUSED default: ")).map(|(_, e)| e);
    let e = refused.unwrap_or_else(|| panic!("the 16 MiB UMEM was not refused: {all}"));
    for part in [&v.a, "16384 KiB UMEM", "8192 KiB", "RLIMIT_MEMLOCK", "CAP_IPC_LOCK", "`ring`"] {
        assert!(e.contains(part), "the error does not name {part:?}: {e}");
    }
    assert!(text.contains("OPENED small"), "a 2 MiB UMEM under the limit did not open: {all}");
}

const CHILD_ENV: &str = "RPX_AFXDP_CHILD_IF";

/// The child half of the SIGKILL test: opens a port on the interface named in the environment,
/// says so, and waits to be killed. Run by hand (without the variable) it does nothing.
#[test]
#[ignore = "helper process for afxdp_sigkill_leaves_no_program"]
fn afxdp_sigkill_child() {
    let Ok(dev) = std::env::var(CHILD_ENV) else { return };
    let port = open(&dev);
    println!("READY {}", port.prog_id().unwrap_or(0));
    std::io::stdout().flush().unwrap();
    std::thread::sleep(PATIENCE * 4);
}

struct KillOnDrop(Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn afxdp_sigkill_leaves_no_program() {
    if !root_or_skip("afxdp_sigkill_leaves_no_program") {
        return;
    }
    let v = Veth::new();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "afxdp_sigkill_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &v.a)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints "test afxdp_sigkill_child ... " before the child's own output.
            if let Some(at) = line.find("READY ") {
                if tx.send(line[at..].to_string()).is_err() {
                    return;
                }
            }
        }
    });
    let ready = rx.recv_timeout(PATIENCE).expect("child never opened its port");
    let id: u32 = ready.trim_start_matches("READY ").parse().unwrap();
    let line = xdp_prog_line(&v.a, None).expect("child's program attached");
    assert!(line.contains(&format!("id {id} ")), "{line}");

    child.0.kill().unwrap(); // SIGKILL: no destructor runs in the child
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_detached(&v.a, None);

    // The interface is usable again: a new port opens and moves packets.
    let mut a = open(&v.a);
    let mut b = open(&v.b);
    workout(&mut a, &mut b);
}

#[test]
fn afxdp_interface_removed_and_back() {
    if !root_or_skip("afxdp_interface_removed_and_back") {
        return;
    }
    let v = Veth::new();
    let (mut a, mut b) = (open(&v.a), open(&v.b));
    removed_and_back(&v, &mut a, &mut b, AfXdpPort::ifindex, |a| assert_eq!(a.mode(), None));
    assert!(xdp_prog_line(&v.a, None).is_some());
    drop(a);
    drop(b);
    assert_detached(&v.a, None);
}

#[test]
fn afxdp_port_inside_a_namespace() {
    if !root_or_skip("afxdp_port_inside_a_namespace") {
        return;
    }
    let ns = Netns::new();
    let v = Veth::new_in(&ns);
    let opts = AfXdpOptions { netns: Some(ns.path()), ..Default::default() };
    let mut b = AfXdpPort::open(&v.b, &opts).unwrap();
    // Not visible from here: the interface lives in the namespace only.
    assert!(AfXdpPort::open(&v.b, &AfXdpOptions::default()).is_err());
    assert!(xdp_prog_line(&v.b, Some(&ns.name)).is_some());
    let mut a = open(&v.a);
    workout(&mut a, &mut b);
    // Removed from inside the namespace, back again: the port re-opens in its namespace, not
    // in the caller's.
    ip(&["-n", &ns.name, "link", "del", &v.b]);
    service_until(&mut b, "down", |p| p.status() != PortStatus::Up);
    service_until(&mut a, "down", |p| p.status() != PortStatus::Up);
    v.recreate();
    service_until(&mut b, "up again", |p| p.status() == PortStatus::Up);
    service_until(&mut a, "up again", |p| p.status() == PortStatus::Up);
    workout(&mut a, &mut b);
    drop(b);
    assert_detached(&v.b, Some(&ns.name));
}

/// Jumbo frames need multi-buffer AF_XDP (`XDP_USE_SG`, Linux 6.6+): prints why and returns
/// false where the kernel refused it.
fn multi_buffer_or_skip(test: &str, p: &AfXdpPort) -> bool {
    if p.multi_buffer() == Some(true) {
        return true;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    eprintln!(
        "skipping {test}: kernel {} refused XDP_USE_SG (multi-buffer AF_XDP needs Linux 6.6+), \
         so AF_XDP ports carry frames of one UMEM frame at most",
        release.trim()
    );
    false
}

#[test]
fn afxdp_jumbo_frames_span_descriptors_both_ways() {
    let test = "afxdp_jumbo_frames_span_descriptors_both_ways";
    if !root_or_skip(test) {
        return;
    }
    for (mode, frame_size) in [(XdpMode::Driver, 2048), (XdpMode::Skb, 4096)] {
        let v = Veth::new();
        set_mtu(&v.a, None, 9000);
        set_mtu(&v.b, None, 9000);
        let o = AfXdpOptions { mode, frame_size, ..Default::default() };
        // Driver mode on veth refuses a peer MTU over ~3.5 KB unless the program is frags-aware.
        let mut a = AfXdpPort::open(&v.a, &o).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let mut b = AfXdpPort::open(&v.b, &o).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        if !multi_buffer_or_skip(test, &a) {
            return;
        }
        assert_eq!((a.mode(), b.mode()), (Some(mode), Some(mode)));
        // veth has no zero-copy: Auto binds in copy mode and says so.
        assert_eq!((a.zero_copy(), b.zero_copy()), (Some(false), Some(false)));
        jumbo_workout(&mut a, &mut b);
        assert_eq!((a.rx_drops(), b.rx_drops()), (RxDrops::default(), RxDrops::default()));
        assert_eq!(a.kernel_anomalies() + b.kernel_anomalies(), 0);
    }
}

#[test]
fn afxdp_frame_longer_than_a_buffer_is_dropped_whole_and_counted() {
    let test = "afxdp_frame_longer_than_a_buffer_is_dropped_whole_and_counted";
    if !root_or_skip(test) {
        return;
    }
    let ns = Netns::new();
    let v = Veth::new_in(&ns);
    set_mtu(&v.a, None, 9600);
    set_mtu(&v.b, Some(&ns.name), 9600);
    let mut a = open(&v.a);
    if !multi_buffer_or_skip(test, &a) {
        return;
    }
    // The peer's stack sends ICMP echoes to a neighbour that is only a static entry.
    ip(&["-n", &ns.name, "addr", "add", "10.254.0.1/24", "dev", &v.b]);
    ip(&["-n", &ns.name, "neigh", "add", "10.254.0.2", "lladdr", "02:52:50:58:00:09", "dev", &v.b]);
    let ping = |payload: usize| {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "ping", "-c", "1", "-W", "0.1", "-M", "do", "-s"])
            .args([payload.to_string(), "10.254.0.2".into()])
            .output()
            .expect("run ping");
        // No answer comes (nobody is there); the kernel must still have sent the request.
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("1 packets transmitted"), "ping -s {payload}: {text}");
    };
    let mut batch = Batch::new(MAX_BURST);
    // Ethernet 14 + IPv4 20 + ICMP 8: one byte over a packet buffer, then exactly one.
    ping(MAX_FRAME - 42 + 1);
    let deadline = Instant::now() + PATIENCE;
    while a.rx_drops().too_long == 0 {
        assert!(Instant::now() < deadline, "no too_long drop: {:?} {:?}", a.rx_drops(), a.stats());
        batch.clear();
        a.rx_burst(&mut batch);
        assert!(batch.packets().iter().all(|p| p.len() <= MAX_FRAME));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(a.rx_drops(), RxDrops { too_long: 1, ..Default::default() });
    ping(MAX_FRAME - 42);
    let got = loop {
        assert!(
            Instant::now() < deadline,
            "the {MAX_FRAME}-byte frame never came: {:?}",
            a.stats()
        );
        batch.clear();
        a.rx_burst(&mut batch);
        if let Some(p) = batch.packets().iter().find(|p| p.frame().get(12..14) == Some(&[8, 0])) {
            break p.frame().to_vec();
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(got.len(), MAX_FRAME);
    assert_eq!(
        u16::from_be_bytes([got[16], got[17]]) as usize,
        MAX_FRAME - 14,
        "IPv4 total length"
    );
    assert_eq!(a.rx_drops().too_long, 1);
    assert_eq!(a.stats().rx_dropped, 1);
}

#[test]
fn afxdp_zero_copy_on_veth_fails_clearly_and_copy_mode_is_reported() {
    if !root_or_skip("afxdp_zero_copy_on_veth_fails_clearly_and_copy_mode_is_reported") {
        return;
    }
    let v = Veth::new();
    let zc = AfXdpOptions { bind: BindMode::ZeroCopy, ..Default::default() };
    let e = AfXdpPort::open(&v.a, &zc).err().expect("veth has no zero-copy AF_XDP");
    assert!(e.to_string().contains("bind(queue 0, ZeroCopy)"), "{e}");
    assert!(e.to_string().contains("no zero-copy"), "{e}");
    assert_detached(&v.a, None);
    let copy = AfXdpOptions { bind: BindMode::Copy, ..Default::default() };
    let a = AfXdpPort::open(&v.a, &copy).unwrap();
    assert_eq!(a.zero_copy(), Some(false));
}

/// Restricts the calling thread to `cpu` (through taskset: tests keep `unsafe` out).
fn pin_this_thread(cpu: usize) {
    let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let tid = me.file_name().unwrap().to_str().unwrap().to_string();
    let out = Command::new("taskset").args(["-p", "-c", &cpu.to_string(), &tid]).output();
    assert!(out.as_ref().is_ok_and(|o| o.status.success()), "taskset: {out:?}");
}

fn cpus_allowed(tid: i32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn afxdp_threaded_napi_is_pinned_to_the_worker_cpu() {
    if !root_or_skip("afxdp_threaded_napi_is_pinned_to_the_worker_cpu") {
        return;
    }
    let v = Veth::new();
    let threaded = |dev: &str| {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/threaded"))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(threaded(&v.a), "0");
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dev = v.a.clone();
    // A thread of its own, as a worker: its affinity changes and must not leak into others.
    std::thread::spawn(move || {
        let last = ncpu - 1;
        pin_this_thread(last);
        let o = AfXdpOptions { threaded_napi: true, ..Default::default() };
        let mut a = AfXdpPort::open(&dev, &o).unwrap();
        assert_eq!(a.mode(), Some(XdpMode::Driver));
        assert_eq!(threaded(&dev), "1", "threaded NAPI on while the port is open");
        a.service();
        let tids = a.napi_threads().to_vec();
        assert!(!tids.is_empty(), "no napi/{dev}-* kernel thread found and pinned");
        for &t in &tids {
            let comm = std::fs::read_to_string(format!("/proc/{t}/comm")).unwrap();
            assert!(comm.starts_with(&format!("napi/{dev}-")), "{comm}");
            assert_eq!(cpus_allowed(t), last.to_string(), "napi thread {t} on the worker's CPU");
        }
        if ncpu > 1 {
            // The worker moves (a VR moved to another worker): the NAPI thread follows.
            pin_this_thread(0);
            a.service();
            for &t in a.napi_threads() {
                assert_eq!(cpus_allowed(t), "0", "napi thread {t} followed the worker");
            }
        }
        drop(a);
        assert_eq!(threaded(&dev), "0", "the old setting is back after close");
    })
    .join()
    .unwrap();
}
