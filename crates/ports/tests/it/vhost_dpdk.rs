//! routeplex's vhost-user port ↔ a real DPDK 22.11 `virtio_user` frontend (the PMD-agnostic
//! peer tests/dpdk/memif_peer.c, run with `--vdev net_virtio_user0,...`): both socket modes,
//! both directions, byte-exact contents checked on both sides, and a frontend killed with
//! SIGKILL mid-traffic followed by a new one on the same port, and none of the fds the frontend
//! sent inherited by a program started while it is connected.
//!
//! The peer is built with `cc` and `pkg-config --cflags --libs libdpdk` into the test's temp
//! dir, cached by a hash of source and flags. Without libdpdk-dev the tests print why and pass,
//! unless `ROUTEPLEX_REQUIRE_DPDK=1` says they must run. They run one at a time (a lock): DPDK
//! busy-polls and the machine has two cores.

use crate::memif_common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memif_common::{check_frame, frame, frame_len, peer_binary, serial, MAGIC_DPDK, MAGIC_RPX};
use ports::vhost::{Mode, VhostUserOptions, VhostUserPort};
use ports::{Batch, Port, PortStatus};

const N: u32 = 2000;
const DONE_SEQ: u32 = u32::MAX;

fn unique_socket() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("rvh-dpdk-{}-{n}.sock", std::process::id()))
}

/// A running DPDK `virtio_user` frontend; killed (SIGKILL) and reaped on drop, its EAL runtime
/// dir and (server) socket file removed.
struct Peer {
    child: Child,
    out: Arc<Mutex<String>>,
    prefix: String,
    socket_file: Option<PathBuf>,
}

impl Peer {
    /// `server`: DPDK listens (`server=1`) and routeplex connects.
    fn spawn(bin: &PathBuf, socket: &std::path::Path, server: bool, mode: &str) -> Peer {
        Peer::spawn_q(bin, socket, server, mode, 1)
    }

    /// With `queues` queue pairs offered by virtio_user (more than one needs its control
    /// queue, `cq=1`); the peer program itself uses pair 0.
    fn spawn_q(
        bin: &PathBuf,
        socket: &std::path::Path,
        server: bool,
        mode: &str,
        queues: u16,
    ) -> Peer {
        static N: AtomicU32 = AtomicU32::new(0);
        let prefix = format!("rvh-vu-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let vdev = format!(
            "--vdev=net_virtio_user0,path={},queues={queues},cq={},queue_size=256,server={},\
             mrg_rxbuf=1,in_order=0,packed_vq=0",
            socket.display(),
            (queues > 1) as u8,
            server as u8
        );
        let mut child = Command::new(bin)
            .args(["--no-huge", "-m", "256", "--no-pci", "--no-telemetry", "--no-shconf"])
            .arg(format!("--file-prefix={prefix}"))
            .arg("--lcores=0@(0,1)")
            .arg(vdev)
            .args(["--", "--mode", mode, "--count", &N_STR, "--timeout", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the DPDK peer");
        let out = Arc::new(Mutex::new(String::new()));
        for mut stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = out.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        Peer { child, out, prefix, socket_file: server.then(|| socket.to_path_buf()) }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn wait(&mut self, port: &mut VhostUserPort) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            port.service();
            if let Some(st) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(50));
                return st.code().unwrap_or(-1);
            }
            if Instant::now() >= deadline {
                // Ask the peer where it stands (it prints a state line on SIGUSR1).
                // SAFETY: kill(2) on our own child's pid, which we have not reaped.
                unsafe { libc::kill(self.child.id() as i32, libc::SIGUSR1) };
                std::thread::sleep(Duration::from_millis(300));
            }
            assert!(
                Instant::now() < deadline,
                "the DPDK peer never exited; port {:?} {:?}\n{}peer threads:\n{}\npeer output:\n{}",
                port.status(),
                port.vhost_stats(),
                port.rings_state(),
                self.threads(),
                self.output()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Where each of the peer's threads is blocked (name, wait channel, system call, kernel
    /// stack): a peer that never exits says which call it is stuck in.
    fn threads(&self) -> String {
        let dir = format!("/proc/{}/task", self.child.id());
        let Ok(tasks) = std::fs::read_dir(&dir) else { return format!("{dir} unreadable") };
        let mut out = String::new();
        for t in tasks.flatten() {
            let p = t.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
            out.push_str(&format!(
                "{} {} wchan={} syscall={}\n{}",
                t.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan").trim(),
                read("syscall").trim(),
                read("stack")
            ));
        }
        out
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for base in ["/var/run/dpdk", "/run/dpdk", "/tmp/dpdk"] {
            let _ = std::fs::remove_dir_all(format!("{base}/{}", self.prefix));
        }
        if let Some(f) = &self.socket_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

static N_STR: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| N.to_string());

fn port(socket: &std::path::Path, mode: Mode) -> VhostUserPort {
    let mut o = VhostUserOptions::new(socket, mode);
    o.name = "rvh-test".into();
    o.reconnect_interval = Duration::from_millis(5);
    VhostUserPort::new(o).expect("port opens")
}

/// Waits until the port is up and the peer says its link is: DPDK's `virtio_dev_start`
/// flushes its receive ring after the rings are set up, so frames sent between the port coming
/// up and the peer's start returning are discarded by the driver (seen: exactly the first 256,
/// one ring, lost under load).
fn wait_up(port: &mut VhostUserPort, peer: &Peer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while port.status() != PortStatus::Up || !peer.output().contains("memif_peer: link up") {
        port.service();
        assert!(
            Instant::now() < deadline,
            "no connection: {:?}\npeer:\n{}",
            port.status(),
            peer.output()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn pump_down(port: &mut VhostUserPort) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while port.status() == PortStatus::Up {
        port.service();
        assert!(Instant::now() < deadline, "port never noticed the frontend leave");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// We send frames 0..N-1 and check that the peer's frames 0..N-1 arrive in order and
/// byte-exact, then send DONE and wait for the peer's verdict. Counters checked as deltas.
fn exchange(port: &mut VhostUserPort, peer: &mut Peer) {
    let before = port.stats();
    let vbefore = port.vhost_stats();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sent, mut received) = (0u32, 0u32);
    let mut done_sent = false;
    let mut tx = Batch::new(32);
    let mut rx = Batch::new(256);
    while !done_sent {
        assert!(
            Instant::now() < deadline,
            "exchange stalled: sent {sent} received {received}, {:?} {:?}\npeer:\n{}",
            port.status(),
            port.vhost_stats(),
            peer.output()
        );
        if let Some(st) = peer.child.try_wait().unwrap() {
            std::thread::sleep(Duration::from_millis(50));
            panic!("peer exited early ({st}), sent {sent} received {received}:\n{}", peer.output());
        }
        port.service();
        tx.clear();
        if sent < N {
            for q in sent..(sent + 32).min(N) {
                assert!(tx.push_copy(&frame(MAGIC_RPX, q, frame_len(q))));
            }
        } else if received == N {
            tx.push_copy(&frame(MAGIC_RPX, DONE_SEQ, 60));
        }
        let sel: Vec<u16> = (0..tx.len() as u16).collect();
        let n = port.tx_burst(&mut tx, &sel) as u32;
        for i in 0..n as usize {
            assert!(tx.get(i).is_empty(), "a taken slot holds an empty buffer");
        }
        if sent == N && received == N && n == 1 {
            done_sent = true;
        } else {
            sent += n;
        }
        rx.clear();
        port.rx_burst(&mut rx);
        for p in rx.packets() {
            let seq = check_frame(p.frame(), MAGIC_DPDK)
                .unwrap_or_else(|e| panic!("bad frame from DPDK: {e}"));
            assert_eq!(seq, received, "DPDK frames arrive in order");
            received += 1;
        }
        if n == 0 && rx.is_empty() {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let code = peer.wait(port);
    let out = peer.output();
    let want = format!("memif_peer: sent={N} received={N} bad=0 out_of_order=0 done=1");
    assert!(code == 0 && out.contains(&want), "peer exit {code}, output:\n{out}");
    let s = port.stats();
    assert_eq!(s.rx_packets - before.rx_packets, N as u64, "{s:?}");
    assert_eq!(s.tx_packets - before.tx_packets, N as u64 + 1, "{s:?}");
    assert_eq!((s.rx_dropped, s.tx_errors), (before.rx_dropped, before.tx_errors), "{s:?}");
    let expect_bytes: u64 = (0..N).map(|q| frame_len(q) as u64).sum();
    assert_eq!(s.rx_bytes - before.rx_bytes, expect_bytes);
    assert_eq!(s.tx_bytes - before.tx_bytes, expect_bytes + 60);
    let v = port.vhost_stats();
    let bad = |v: &ports::vhost::VhostStats| {
        v.bad_index + v.bad_addr + v.bad_len + v.bad_chain + v.bad_avail_idx + v.too_long
    };
    assert_eq!(bad(&v), bad(&vbefore), "{v:?}");
    assert_eq!(v.protocol_errors, vbefore.protocol_errors, "{v:?}");
    // DPDK negotiated version 1 and mergeable buffers.
    pump_down(port);
}

/// Floods until traffic flows both ways, then SIGKILLs the peer.
fn flood_then_kill(port: &mut VhostUserPort, peer: &mut Peer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tx = Batch::new(32);
    let mut rx = Batch::new(256);
    let (mut sent, mut received) = (0u32, 0u32);
    while sent < 3000 || received < 3000 {
        assert!(
            Instant::now() < deadline,
            "flood stalled: sent {sent} received {received}\n{}",
            peer.output()
        );
        port.service();
        tx.clear();
        for q in sent..sent + 32 {
            tx.push_copy(&frame(MAGIC_RPX, q, frame_len(q)));
        }
        let sel: Vec<u16> = (0..32).collect();
        sent += port.tx_burst(&mut tx, &sel) as u32;
        rx.clear();
        port.rx_burst(&mut rx);
        for p in rx.packets() {
            assert_eq!(check_frame(p.frame(), MAGIC_DPDK), Ok(received));
            received += 1;
        }
    }
    peer.kill();
    pump_down(port);
    assert_eq!(port.rx_burst(&mut rx), 0);
    let mut b = Batch::new(1);
    b.push_copy(&frame(MAGIC_RPX, 0, 60));
    assert_eq!(port.tx_burst(&mut b, &[0]), 0, "a port without a frontend takes nothing");
}

/// The fds a program started now would inherit, besides stdin, stdout and stderr. The child
/// lists its own: read from outside, `/proc/PID/fd` can still show the fds exec is closing.
/// Tests that may run beside this one in the process open theirs close-on-exec (vhost_common's
/// guest does), or `cargo test` of the whole binary would see them here.
fn fds_a_started_program_inherits() -> Vec<String> {
    let out = Command::new("sh")
        .args([
            "-c",
            r#"cd /proc/$$/fd && for f in *; do printf '%s -> ' "$f"; readlink "$f" || echo gone; done"#,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run sh");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fds: Vec<String> = text
        .lines()
        .filter(|l| l.split(' ').next().and_then(|n| n.parse::<u32>().ok()).is_some_and(|n| n > 2))
        .map(String::from)
        .collect();
    fds.sort();
    fds
}

fn down_reason(p: &VhostUserPort) -> String {
    match p.status() {
        PortStatus::Down(r) => r,
        PortStatus::Up => String::new(),
    }
}

#[test]
fn dpdk_virtio_user_client_with_routeplex_server_both_directions() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    let sock = unique_socket();
    // What the test process lets children inherit anyway (a test runner's jobserver pipe).
    let inherited = fds_a_started_program_inherits();
    let mut p = port(&sock, Mode::Server);
    let mode = std::fs::metadata(&sock).unwrap().permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
    assert!(down_reason(&p).contains("waiting for a frontend"), "{:?}", p.status());
    let mut peer = Peer::spawn(&bin, &sock, false, "exchange");
    wait_up(&mut p, &peer);
    assert_eq!(p.active_queue_pairs(), 1);
    let acked = p.acked_features();
    assert!(acked & (1 << 32) != 0 && acked & (1 << 15) != 0, "VERSION_1 + MRG_RXBUF: {acked:#x}");
    // The guest's memory and eventfds stay ours: a daemon started now does not hold them.
    assert_eq!(fds_a_started_program_inherits(), inherited);
    exchange(&mut p, &mut peer);
    assert!(down_reason(&p).contains("waiting for a frontend"), "{:?}", p.status());
    assert_eq!(p.vhost_stats().connects, 1);
    drop(p);
    assert!(!sock.exists(), "the port removes its socket file");
}

#[test]
fn dpdk_virtio_user_server_with_routeplex_client_both_directions() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    let sock = unique_socket();
    // The client retries until DPDK listens.
    let mut p = port(&sock, Mode::Client);
    assert!(down_reason(&p).contains("connecting to"), "{:?}", p.status());
    let mut peer = Peer::spawn(&bin, &sock, true, "exchange");
    wait_up(&mut p, &peer);
    exchange(&mut p, &mut peer);
}

#[test]
fn dpdk_frontend_killed_mid_traffic_then_a_new_one_connects() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    // routeplex server, DPDK client killed; a fresh DPDK client on the same port.
    let sock = unique_socket();
    let mut p = port(&sock, Mode::Server);
    let mut peer = Peer::spawn(&bin, &sock, false, "flood");
    wait_up(&mut p, &peer);
    flood_then_kill(&mut p, &mut peer);
    let why = down_reason(&p);
    assert!(
        why.contains("frontend disconnected") && why.contains("waiting for a frontend"),
        "{why}"
    );
    drop(peer);
    let mut peer = Peer::spawn(&bin, &sock, false, "exchange");
    wait_up(&mut p, &peer);
    exchange(&mut p, &mut peer);
    assert_eq!(p.vhost_stats().connects, 2);
    assert_eq!(p.vhost_stats().protocol_errors, 0);

    // routeplex client, DPDK server killed: the client goes down and reconnects to the next.
    let sock = unique_socket();
    let mut peer = Peer::spawn(&bin, &sock, true, "flood");
    let mut c = port(&sock, Mode::Client);
    wait_up(&mut c, &peer);
    flood_then_kill(&mut c, &mut peer);
    drop(peer);
    let mut peer = Peer::spawn(&bin, &sock, true, "exchange");
    wait_up(&mut c, &peer);
    exchange(&mut c, &mut peer);
    assert_eq!(c.vhost_stats().connects, 2);
}

#[test]
fn dpdk_virtio_user_with_two_queue_pairs_negotiates_mq() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    let sock = unique_socket();
    let mut o = VhostUserOptions::new(&sock, Mode::Server);
    o.queues = 2;
    o.reconnect_interval = Duration::from_millis(5);
    let mut p = VhostUserPort::new(o).unwrap();
    let mut peer = Peer::spawn_q(&bin, &sock, false, "exchange", 2);
    wait_up(&mut p, &peer);
    let acked = p.acked_features();
    assert!(acked & (1 << 22) != 0, "MQ negotiated: {acked:#x}");
    exchange(&mut p, &mut peer);
    assert_eq!(p.vhost_stats().protocol_errors, 0);
}
