//! AF_XDP on every queue of a multi-queue veth (root only; skipped with a printed reason
//! otherwise).
//!
//! The veth pair has 4 queues each way; a sender in one namespace sends many UDP flows (a socket
//! each) to the other end, in another namespace. veth puts a frame on the receiver's rx queue
//! of the index of the sender's tx queue, which the kernel picks per socket by flow hash, so
//! the flows land on every queue. Covers: without a port the kernel stack receives them (so
//! the check below can fail); a port with `Queues::All` has 4 sockets, receives every frame and
//! each queue some, and the receiving namespace's IP stack sees none; the same with the queues
//! spread over two ports (queues 0, 2 and 1, 3) sharing one XDP program; a queue count beyond
//! the interface's and more replicas than queues fail with errors naming the interface and its
//! count; copy mode reported for each queue; a port on all queues re-opened on as many queues
//! as the interface has when it comes back.

mod common_kernel;

use std::process::Command;
use std::time::Instant;

use common_kernel::*;
use ports::afxdp::{AfXdpOptions, AfXdpPort, Queues, XdpMode};
use ports::{Batch, Port, PortStatus, MAX_BURST};

const QUEUES: u32 = 4;
const FLOWS: usize = 64;
const ROUNDS: usize = 10;
const SENDER_ENV: &str = "RPX_AFXDP_QUEUES_SEND_TO";
const DPORT: u16 = 9;

/// Two namespaces joined by a 4-queue veth: `a` (10.99.0.1) in `tx`, `b` (10.99.0.2) in `rx`.
/// The namespaces' drop deletes the pair.
struct MultiQueueVeth {
    a: String,
    b: String,
    tx: Netns,
    rx: Netns,
}

impl MultiQueueVeth {
    fn new() -> MultiQueueVeth {
        let (tx, rx) = (Netns::new(), Netns::new());
        let v = MultiQueueVeth { a: unique("a"), b: unique("b"), tx, rx };
        v.make(QUEUES);
        v
    }

    /// Makes the pair, with `queues` queues each way.
    fn make(&self, queues: u32) {
        let (v, q) = (self, queues.to_string());
        #[rustfmt::skip]
        ip(&["link", "add", "name", &v.a, "numtxqueues", &q, "numrxqueues", &q,
            "netns", &v.tx.name, "type", "veth", "peer", "name", &v.b, "numtxqueues", &q,
            "numrxqueues", &q, "netns", &v.rx.name]);
        quiet(&v.a, Some(&v.tx.name));
        quiet(&v.b, Some(&v.rx.name));
        ip(&["-n", &v.tx.name, "addr", "add", "10.99.0.1/24", "dev", &v.a]);
        ip(&["-n", &v.rx.name, "addr", "add", "10.99.0.2/24", "dev", &v.b]);
        up(&v.a, Some(&v.tx.name));
        up(&v.b, Some(&v.rx.name));
        // A static neighbor: the sender needs no ARP answer (the port would take it).
        let mac = ip(&["-n", &v.rx.name, "-o", "link", "show", "dev", &v.b])
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .expect("b's MAC")
            .to_string();
        #[rustfmt::skip]
        ip(&["-n", &v.tx.name, "neigh", "replace", "10.99.0.2", "lladdr", &mac, "nud",
            "permanent", "dev", &v.a]);
    }

    fn opts(&self) -> AfXdpOptions {
        AfXdpOptions { netns: Some(self.rx.path()), frames: 1024, ..Default::default() }
    }

    /// IPv4 packets the receiving namespace's stack has taken in (`Ip: InReceives`).
    fn stack_received(&self) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.rx.name, "cat", "/proc/net/snmp"])
            .output()
            .expect("run ip netns exec");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (head, vals) = (ip.next().expect("Ip header"), ip.next().expect("Ip values"));
        let col = head.split_whitespace().position(|k| k == "InReceives").expect("InReceives");
        vals.split_whitespace().nth(col).and_then(|v| v.parse().ok()).expect("a count")
    }

    /// Sends `ROUNDS` datagrams on each of `FLOWS` sockets from the sender namespace (a child
    /// process, `ip netns exec`); returns how many were sent.
    fn send(&self) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.tx.name])
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "afxdp_queues_sender_child", "--ignored", "--nocapture"])
            .args(["--test-threads=1"])
            .env(SENDER_ENV, "10.99.0.2")
            .output()
            .expect("run the sender");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "sender: {text} {}", String::from_utf8_lossy(&out.stderr));
        // libtest prints "test afxdp_queues_sender_child ... " before the child's own output.
        text.lines()
            .find_map(|l| l.split_once("SENT "))
            .and_then(|(_, n)| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("sender said no SENT line: {text}"))
    }
}

/// The sender half: `FLOWS` UDP sockets, each its own flow (source port), `ROUNDS` datagrams
/// each. Run by hand (without the variable) it does nothing.
#[test]
#[ignore = "helper process for the multi-queue tests"]
fn afxdp_queues_sender_child() {
    let Ok(to) = std::env::var(SENDER_ENV) else { return };
    let socks: Vec<std::net::UdpSocket> =
        (0..FLOWS).map(|_| std::net::UdpSocket::bind("10.99.0.1:0").unwrap()).collect();
    let mut sent = 0u64;
    for _ in 0..ROUNDS {
        for s in &socks {
            sent += u64::from(s.send_to(&[0u8; 32], (to.as_str(), DPORT)).is_ok());
        }
        // veth hands frames to the receiver's NAPI through a 256-frame ring per queue.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    println!("SENT {sent}");
}

/// Is `f` one of the sender's datagrams (UDP/IPv4 to 10.99.0.2, port `DPORT`)?
fn ours(f: &[u8]) -> bool {
    f.len() >= 42
        && f[12..14] == [0x08, 0x00]
        && f[23] == 17
        && f[30..34] == [10, 99, 0, 2]
        && f[36..38] == DPORT.to_be_bytes()
}

/// Receives from `ports` until `want` of the sender's datagrams came (or [`PATIENCE`] passed);
/// returns how many came per port.
fn receive(ports: &mut [&mut AfXdpPort], want: u64) -> Vec<u64> {
    let mut got = vec![0u64; ports.len()];
    let mut batch = Batch::new(MAX_BURST);
    let deadline = Instant::now() + PATIENCE;
    while got.iter().sum::<u64>() < want && Instant::now() < deadline {
        for (i, p) in ports.iter_mut().enumerate() {
            p.service();
            batch.clear();
            p.rx_burst(&mut batch);
            got[i] += batch.packets().iter().filter(|b| ours(b.frame())).count() as u64;
        }
    }
    got
}

#[test]
fn afxdp_all_queues_receive_every_flow_and_the_stack_none() {
    if !root_or_skip("afxdp_all_queues_receive_every_flow_and_the_stack_none") {
        return;
    }
    let v = MultiQueueVeth::new();
    assert_eq!(ports::afxdp::rx_queue_count_in(&v.b, Some(&v.rx.path())).unwrap(), QUEUES);

    // No port: the flows reach the stack (else the "none" below would prove nothing).
    let before = v.stack_received();
    let sent = v.send();
    let deadline = Instant::now() + PATIENCE;
    while v.stack_received() < before + sent && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(v.stack_received() >= before + sent, "the stack did not see the flows");

    let mut p = AfXdpPort::open(&v.b, &v.opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.status(), PortStatus::Up);
    assert_eq!(p.mode(), Some(XdpMode::Driver));
    assert_eq!(p.mode_name(), Some("xdp driver, copy, multi-buffer"));
    let q: Vec<u32> = p.queues().iter().map(|q| q.queue).collect();
    assert_eq!(q, (0..QUEUES).collect::<Vec<_>>());
    assert!(p.queues().iter().all(|q| !q.zero_copy));

    let before = v.stack_received();
    let sent = v.send();
    assert_eq!(sent, (FLOWS * ROUNDS) as u64);
    let got = receive(&mut [&mut p], sent);
    assert_eq!(got, vec![sent], "queues: {:?}, stats: {:?}", p.queues(), p.stats());
    let per_queue: Vec<u64> = p.queues().iter().map(|q| q.rx_packets).collect();
    assert!(per_queue.iter().all(|&n| n > 0), "a queue got nothing: {per_queue:?}");
    assert_eq!(v.stack_received(), before, "frames reached the kernel stack");
    assert_eq!(p.stats().rx_dropped, 0);
    drop(p);
    assert!(xdp_prog_line(&v.b, Some(&v.rx.name)).is_none());
}

#[test]
fn afxdp_queues_spread_over_ports_share_one_program() {
    if !root_or_skip("afxdp_queues_spread_over_ports_share_one_program") {
        return;
    }
    let v = MultiQueueVeth::new();
    let mut ps = AfXdpPort::open_spread(&v.b, &v.opts(), 2).unwrap_or_else(|e| panic!("{e}"));
    let queues = |p: &AfXdpPort| p.queues().iter().map(|q| q.queue).collect::<Vec<_>>();
    assert_eq!((queues(&ps[0]), queues(&ps[1])), (vec![0, 2], vec![1, 3]));
    assert_eq!(ps[0].prog_id(), ps[1].prog_id(), "one program for the interface");

    let before = v.stack_received();
    let sent = v.send();
    let (p0, p1) = ps.split_at_mut(1);
    let got = receive(&mut [&mut p0[0], &mut p1[0]], sent);
    assert_eq!(got.iter().sum::<u64>(), sent, "per port {got:?}");
    for p in &ps {
        assert!(p.queues().iter().all(|q| q.rx_packets > 0), "{:?}", p.queues());
    }
    assert_eq!(v.stack_received(), before, "frames reached the kernel stack");

    // The program stays while a port of the group holds it, and goes with the last one.
    let id = ps[0].prog_id().unwrap();
    drop(ps.remove(0));
    let line = xdp_prog_line(&v.b, Some(&v.rx.name)).expect("still attached for port 1");
    assert!(line.contains(&format!("id {id} ")), "{line}");
    drop(ps);
    assert!(xdp_prog_line(&v.b, Some(&v.rx.name)).is_none());
}

#[test]
fn afxdp_queue_counts_beyond_the_interface_fail_clearly() {
    if !root_or_skip("afxdp_queue_counts_beyond_the_interface_fail_clearly") {
        return;
    }
    let v = MultiQueueVeth::new();
    let o = AfXdpOptions { queues: Queues::First(8), ..v.opts() };
    let e = AfXdpPort::open(&v.b, &o).err().expect("8 queues of 4");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let want = format!("afxdp {}: 8 queues asked for, but the interface has 4 receive queues", v.b);
    assert_eq!(e.to_string(), want);
    let o = AfXdpOptions { queues: Queues::List(vec![1, 4]), ..v.opts() };
    let e = AfXdpPort::open(&v.b, &o).err().expect("queue 4 of 4");
    assert!(e.to_string().contains("queue 4, but the interface has 4 receive queues"), "{e}");
    let e = AfXdpPort::open_spread(&v.b, &v.opts(), 5).err().expect("5 replicas, 4 queues");
    assert_eq!(
        e.to_string(),
        format!(
            "afxdp {}: 5 replicas need a queue each, but the port has 4 of the interface's 4 \
             receive queues",
            v.b
        )
    );
    // Nothing was left attached by the failures, and a good open works.
    assert!(xdp_prog_line(&v.b, Some(&v.rx.name)).is_none());
    let p = AfXdpPort::open(&v.b, &AfXdpOptions { queues: Queues::First(2), ..v.opts() });
    assert_eq!(p.unwrap().queues().len(), 2);
}

#[test]
fn afxdp_all_queues_follow_the_interface_when_it_comes_back() {
    if !root_or_skip("afxdp_all_queues_follow_the_interface_when_it_comes_back") {
        return;
    }
    let v = MultiQueueVeth::new();
    let mut p = AfXdpPort::open(&v.b, &v.opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.queues().len(), QUEUES as usize);
    ip(&["-n", &v.tx.name, "link", "del", &v.a]);
    service_until(&mut p, "down", |p| p.status() != PortStatus::Up);
    assert!(p.queues().is_empty());
    // Back with 2 queues: `all` is read again at the re-open.
    v.make(2);
    service_until(&mut p, "up again", |p| p.status() == PortStatus::Up);
    let q: Vec<u32> = p.queues().iter().map(|q| q.queue).collect();
    assert_eq!(q, vec![0, 1]);
    let before = v.stack_received();
    let sent = v.send();
    let got = receive(&mut [&mut p], sent);
    assert_eq!(got, vec![sent], "{:?}", p.queues());
    assert!(p.queues().iter().all(|q| q.rx_packets > 0), "{:?}", p.queues());
    assert_eq!(v.stack_received(), before, "frames reached the kernel stack");
}
