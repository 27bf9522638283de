//! memif throughput: a memif server and a memif client blasting 64-byte and 1514-byte frames,
//! one direction at a time, in two setups:
//! - `two_processes`: sender and receiver in two processes (this program re-executes itself
//!   for the sender), each spinning on its own core: the real cross-core rate, measured by the
//!   receiver. Needs two idle cores to mean anything.
//! - `one_thread`: both ends in one thread, a burst sent then received: what one core pays per
//!   frame for both the copy in and the copy out; steadier on a busy machine.
//!
//! A benchmark, not a test: on a shared, noisy machine the numbers are indicative only.
//!
//! Usage: `cargo run --release -p ports --example memif_pps [-- --secs 2 --log2 10 --burst 256]`
//!
//! Prints one JSON object per line: setup, direction, frame size, Mpps and Gbit/s (frame bytes,
//! without Ethernet preamble and gap).

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};

struct Args {
    secs: f64,
    log2: u8,
    burst: usize,
}

fn parse() -> (Args, Option<Vec<String>>) {
    let mut a = Args { secs: 2.0, log2: 10, burst: 256 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--peer") {
        return (a, Some(argv[1..].to_vec()));
    }
    let mut it = argv.iter();
    while let Some(k) = it.next() {
        let v = it.next().map(String::as_str).unwrap_or("");
        match k.as_str() {
            "--secs" => a.secs = v.parse().expect("--secs"),
            "--log2" => a.log2 = v.parse().expect("--log2"),
            "--burst" => a.burst = v.parse().expect("--burst"),
            _ => panic!("unknown argument {k}"),
        }
    }
    (a, None)
}

fn options(socket: &str, log2: u8, name: &str) -> MemifOptions {
    let mut o = MemifOptions::new(socket);
    o.log2_ring_size = log2;
    o.name = name.into();
    o.reconnect_interval = Duration::from_millis(2);
    o
}

fn open(role: &str, o: MemifOptions) -> MemifPort {
    match role {
        "server" => MemifPort::server(o),
        _ => MemifPort::client(o),
    }
    .unwrap_or_else(|e| panic!("{e}"))
}

fn wait_up(p: &mut MemifPort) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.status() != PortStatus::Up {
        p.service();
        assert!(Instant::now() < deadline, "no peer: {:?}", p.status());
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// The peer process: transmits `size`-byte frames as fast as the ring takes them until the
/// receiver goes away.
fn sender(args: &[String]) {
    let (role, socket, size, log2, burst) = (
        args[0].as_str(),
        args[1].as_str(),
        args[2].parse::<usize>().unwrap(),
        args[3].parse::<u8>().unwrap(),
        args[4].parse::<usize>().unwrap(),
    );
    let mut p = open(role, options(socket, log2, "sender"));
    wait_up(&mut p);
    let mut frame = vec![0u8; size];
    frame[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    let mut b = Batch::new(burst);
    for _ in 0..burst {
        b.push_copy(&frame);
    }
    let sel: Vec<u16> = (0..burst as u16).collect();
    let mut start = 0;
    let mut iter = 0u32;
    loop {
        // Taken slots hold empty buffers: refill them (a real sender writes frames anyway).
        let n = p.tx_burst(&mut b, &sel[start..]);
        for &i in &sel[start..start + n] {
            b.get_mut(i as usize).fill(&frame);
        }
        start = (start + n) % burst;
        iter = iter.wrapping_add(1);
        if iter & 1023 == 0 || n == 0 {
            p.service();
            if p.status() != PortStatus::Up {
                return;
            }
        }
    }
}

/// This process: receives and counts for `secs`, after a short warm-up.
fn receiver(p: &mut MemifPort, secs: f64) -> (u64, u64, f64) {
    let mut b = Batch::new(256);
    let warm = Instant::now() + Duration::from_millis(200);
    let mut iter = 0u32;
    let (mut pkts, mut bytes) = (0u64, 0u64);
    let mut t0 = None;
    loop {
        b.clear();
        let n = p.rx_burst(&mut b);
        iter = iter.wrapping_add(1);
        if iter & 1023 == 0 {
            p.service();
        }
        let now = Instant::now();
        match t0 {
            None if now >= warm => t0 = Some(now),
            None => continue,
            Some(t) => {
                pkts += n as u64;
                bytes += b.packets().iter().map(|f| f.len() as u64).sum::<u64>();
                let el = now.duration_since(t).as_secs_f64();
                if el >= secs {
                    return (pkts, bytes, el);
                }
            }
        }
    }
}

fn main() {
    let (args, peer) = parse();
    if let Some(a) = peer {
        sender(&a);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    for size in [64usize, 1514] {
        for (dir, me, other) in
            [("client_to_server", "server", "client"), ("server_to_client", "client", "server")]
        {
            let socket = format!("@routeplex-memif-pps-{}-{size}-{dir}", std::process::id());
            let spawn = || {
                Command::new(&exe)
                    .args(["--peer", other, &socket, &size.to_string(), &args.log2.to_string()])
                    .arg(args.burst.to_string())
                    .spawn()
                    .expect("spawn peer")
            };
            // Either order works (a client retries), but a server first saves a retry.
            let (mut port, mut child): (MemifPort, Child) = if me == "server" {
                let port = open(me, options(&socket, args.log2, "receiver"));
                (port, spawn())
            } else {
                let child = spawn();
                (open(me, options(&socket, args.log2, "receiver")), child)
            };
            wait_up(&mut port);
            let (pkts, bytes, secs) = receiver(&mut port, args.secs);
            drop(port); // the sender sees the port go down and exits
            let _ = child.wait();
            report(&args, "two_processes", dir, size, pkts, bytes, secs);
        }
    }
    for size in [64usize, 1514] {
        one_thread(&args, size);
    }
}

fn report(a: &Args, setup: &str, dir: &str, size: usize, pkts: u64, bytes: u64, secs: f64) {
    println!(
        concat!(
            "{{\"bench\":\"memif_pps\",\"setup\":\"{}\",\"direction\":\"{}\",",
            "\"frame_bytes\":{},\"log2_ring\":{},\"burst\":{},\"seconds\":{:.3},",
            "\"packets\":{},\"mpps\":{:.3},\"gbps\":{:.3}}}"
        ),
        setup,
        dir,
        size,
        a.log2,
        a.burst,
        secs,
        pkts,
        pkts as f64 / secs / 1e6,
        bytes as f64 * 8.0 / secs / 1e9
    );
}

/// Both ends in this thread: send a burst, receive it, repeat, for each direction.
fn one_thread(a: &Args, size: usize) {
    let socket = format!("@routeplex-memif-pps-{}-{size}-local", std::process::id());
    let mut s = open("server", options(&socket, a.log2, "server"));
    let mut c = open("client", options(&socket, a.log2, "client"));
    while s.status() != PortStatus::Up || c.status() != PortStatus::Up {
        s.service();
        c.service();
    }
    let frame = vec![0x5au8; size];
    let burst = a.burst.min(1 << a.log2);
    let mut b = Batch::new(burst);
    let mut r = Batch::new(burst);
    let sel: Vec<u16> = (0..burst as u16).collect();
    for dir in ["client_to_server", "server_to_client"] {
        let (tx, rx) = if dir == "client_to_server" { (&mut c, &mut s) } else { (&mut s, &mut c) };
        let t0 = Instant::now();
        let (mut pkts, mut bytes) = (0u64, 0u64);
        let mut rounds = 0u32;
        loop {
            b.clear();
            for _ in 0..burst {
                b.push_copy(&frame);
            }
            tx.tx_burst(&mut b, &sel);
            r.clear();
            pkts += rx.rx_burst(&mut r) as u64;
            bytes += r.packets().iter().map(|p| p.len() as u64).sum::<u64>();
            rounds = rounds.wrapping_add(1);
            if rounds & 255 == 0 && t0.elapsed().as_secs_f64() >= a.secs {
                break;
            }
        }
        report(a, "one_thread", dir, size, pkts, bytes, t0.elapsed().as_secs_f64());
    }
}
