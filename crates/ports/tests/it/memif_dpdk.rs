//! routeplex ↔ a real DPDK 22.11 `net_memif` peer (tests/dpdk/memif_peer.c), in both roles and
//! both directions, with byte-exact contents checked on both sides, and a peer killed with
//! SIGKILL mid-traffic.
//!
//! The C peer is built here with `cc` and `pkg-config --cflags --libs libdpdk` into the test's
//! temp dir, cached by a hash of its source and flags. Without libdpdk-dev (scripts/setup
//! installs it) the tests print why and pass, unless `ROUTEPLEX_REQUIRE_DPDK=1` says they must
//! run. They run one at a time (a lock): each DPDK process busy-polls, and the machine has two
//! cores.

use crate::memif_common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memif_common::*;
use ports::memif::{MemifOptions, MemifPort, RxMode};
use ports::{Batch, Port, PortStatus};

const N: u32 = 2000;
const DONE_SEQ: u32 = u32::MAX;

/// A running DPDK peer; killed (SIGKILL) and reaped on drop, its EAL runtime dir removed.
struct Peer {
    child: Child,
    out: Arc<Mutex<String>>,
    prefix: String,
    /// A DPDK server's socket file, which it leaves behind when killed or when it exits.
    socket_file: Option<String>,
}

fn allowed_cpus() -> String {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this thread.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, with the correct size.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    let cpus: Vec<String> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its size.
        .filter(|&c| ok && unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c.to_string())
        .collect();
    if cpus.is_empty() {
        "0".into()
    } else {
        cpus.join(",")
    }
}

impl Peer {
    /// `role`: the DPDK side's role. `socket` is ours (`@name` for abstract).
    fn spawn(bin: &PathBuf, role: &str, socket: &str, mode: &str, count: u32) -> Peer {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let prefix = format!(
            "rpx-memif-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (path, abs) = match socket.strip_prefix('@') {
            Some(name) => (name, "yes"),
            None => (socket, "no"),
        };
        let vdev =
            format!("--vdev=net_memif0,role={role},id=0,socket={path},socket-abstract={abs}");
        let mut child = Command::new(bin)
            .args(["--no-huge", "-m", "256", "--no-pci", "--no-telemetry"])
            .arg(format!("--file-prefix={prefix}"))
            .arg(format!("--lcores=0@({})", allowed_cpus()))
            .arg(vdev)
            .args(["--", "--mode", mode, "--count", &count.to_string(), "--timeout", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn memif_peer");
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
        let socket_file = (role == "server" && abs == "no").then(|| socket.to_string());
        Peer { child, out, prefix, socket_file }
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Waits for exit while servicing `port`; returns the exit code.
    fn wait(&mut self, port: &mut MemifPort) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            port.service();
            if let Some(st) = self.child.try_wait().unwrap() {
                // Let the reader threads drain the pipes.
                std::thread::sleep(Duration::from_millis(50));
                return st.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "memif_peer never exited:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGKILL, reap, and remove what a killed DPDK leaves behind: its EAL runtime dir and, for
    /// a server, its socket file (DPDK refuses to bind over a stale one).
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

/// Runs the exchange against a peer in `exchange` mode: we send frames 0..N-1 and check that
/// frames 0..N-1 arrive in order and byte-exact, then send DONE and wait for the peer's verdict.
/// Counters are checked as deltas, so a port that served an earlier peer can run it again.
fn exchange(port: &mut MemifPort, peer: &mut Peer) {
    let before = port.stats();
    let bad_before = port.memif_stats().bad_desc;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sent, mut received) = (0u32, 0u32);
    let mut done_sent = false;
    let mut tx = Batch::new(32);
    let mut rx = Batch::new(256);
    while !done_sent {
        assert!(
            Instant::now() < deadline,
            "exchange stalled: sent {sent} received {received}, {:?}\npeer:\n{}",
            port.status(),
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
    let d = |a: u64, b: u64| a - b;
    assert_eq!(d(s.rx_packets, before.rx_packets), N as u64, "{s:?}");
    assert_eq!(d(s.tx_packets, before.tx_packets), N as u64 + 1, "{s:?}");
    assert_eq!((s.rx_dropped, s.tx_errors), (before.rx_dropped, before.tx_errors), "{s:?}");
    let expect_bytes: u64 = (0..N).map(|q| frame_len(q) as u64).sum();
    assert_eq!(d(s.rx_bytes, before.rx_bytes), expect_bytes);
    assert_eq!(d(s.tx_bytes, before.tx_bytes), expect_bytes + 60);
    assert_eq!(port.memif_stats().bad_desc, bad_before);
    // The peer closed its device on exit: we notice.
    pump_until(&mut [port], "down after the peer exits", |p| p[0].status() != PortStatus::Up);
}

fn server(socket: &str, tweak: impl Fn(&mut MemifOptions)) -> MemifPort {
    let mut o = opts(socket, "rpx-server");
    tweak(&mut o);
    MemifPort::server(o).unwrap()
}

fn client(socket: &str, tweak: impl Fn(&mut MemifOptions)) -> MemifPort {
    let mut o = opts(socket, "rpx-client");
    tweak(&mut o);
    MemifPort::client(o).unwrap()
}

fn wait_up(port: &mut MemifPort, peer: &Peer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while port.status() != PortStatus::Up {
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

#[test]
fn dpdk_client_with_routeplex_server_both_directions() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    let sock = unique_socket(false);
    let mut s = server(&sock, |_| {});
    let mut peer = Peer::spawn(&bin, "client", &sock, "exchange", N);
    wait_up(&mut s, &peer);
    assert!(s.peer_name().starts_with("DPDK"), "DPDK names itself: {:?}", s.peer_name());
    exchange(&mut s, &mut peer);
    let why = match s.status() {
        PortStatus::Down(r) => r,
        PortStatus::Up => unreachable!(),
    };
    assert!(why.contains("peer disconnected") && why.contains("waiting for a client"), "{why}");
}

#[test]
fn dpdk_server_with_routeplex_client_both_directions() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    let sock = unique_socket(false);
    // DPDK's server listens from rte_eal_init; our client retries until it is started.
    let mut peer = Peer::spawn(&bin, "server", &sock, "exchange", N);
    let mut c = client(&sock, |_| {});
    wait_up(&mut c, &peer);
    assert!(c.peer_name().starts_with("DPDK"), "{:?}", c.peer_name());
    exchange(&mut c, &mut peer);
}

#[test]
fn dpdk_abstract_sockets_both_roles_with_routeplex_in_interrupt_mode() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    // DPDK polls and sets MASK_INT on its rings; we leave ours clear, so DPDK signals our
    // eventfds after every burst, and we consume them.
    let interrupt = |o: &mut MemifOptions| o.rx_mode = RxMode::Interrupt;
    let sock = unique_socket(true);
    let mut s = server(&sock, interrupt);
    let mut peer = Peer::spawn(&bin, "client", &sock, "exchange", N);
    wait_up(&mut s, &peer);
    exchange(&mut s, &mut peer);

    let sock = unique_socket(true);
    let mut peer = Peer::spawn(&bin, "server", &sock, "exchange", N);
    let mut c = client(&sock, interrupt);
    wait_up(&mut c, &peer);
    exchange(&mut c, &mut peer);
}

/// Floods with a DPDK peer until traffic flows both ways, then SIGKILLs it.
fn flood_then_kill(port: &mut MemifPort, peer: &mut Peer) {
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
    // Frames may still sit in the rings; what matters is that the port notices and recovers.
    pump_until(&mut [port], "down after SIGKILL", |p| p[0].status() != PortStatus::Up);
    assert_eq!(port.rx_burst(&mut rx), 0);
    assert_eq!(port.memif_stats().bad_desc, 0);
}

#[test]
fn dpdk_peer_killed_mid_traffic_then_a_new_one_connects() {
    let Some(bin) = peer_binary() else { return };
    let _g = serial();
    // routeplex server, DPDK client killed.
    let sock = unique_socket(false);
    let mut s = server(&sock, |_| {});
    let mut peer = Peer::spawn(&bin, "client", &sock, "flood", 0);
    wait_up(&mut s, &peer);
    flood_then_kill(&mut s, &mut peer);
    let why = match s.status() {
        PortStatus::Down(r) => r,
        PortStatus::Up => unreachable!(),
    };
    assert!(why.contains("connection closed without DISCONNECT"), "{why}");
    assert!(why.contains("waiting for a client"), "{why}");
    drop(peer);
    // The same port takes a fresh DPDK client, with a fresh handshake and fresh rings.
    let mut peer = Peer::spawn(&bin, "client", &sock, "exchange", N);
    wait_up(&mut s, &peer);
    exchange(&mut s, &mut peer);
    assert_eq!(s.memif_stats().connects, 2);

    // routeplex client, DPDK server killed: the client goes down and reconnects to the next.
    let sock = unique_socket(false);
    let mut peer = Peer::spawn(&bin, "server", &sock, "flood", 0);
    let mut c = client(&sock, |_| {});
    wait_up(&mut c, &peer);
    flood_then_kill(&mut c, &mut peer);
    drop(peer);
    let mut peer = Peer::spawn(&bin, "server", &sock, "exchange", N);
    wait_up(&mut c, &peer);
    exchange(&mut c, &mut peer);
    assert_eq!(c.memif_stats().connects, 2);
}
