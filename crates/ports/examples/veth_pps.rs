//! Packets per second between two kernel-backed ports: a benchmark, not a test.
//!
//! For each backend it makes a veth pair (or, for tap, a tap interface with an AF_PACKET port
//! on its kernel side), opens a sender port and a receiver port, and lets a sender thread push
//! fixed frames in bursts for a few seconds while the receiver counts. One JSON line per
//! backend:
//!
//! ```text
//! {"backend":"afxdp","mode":"driver","frame_len":60,"burst":64,"seconds":3.00,"tx_pps":...,"rx_pps":...,...}
//! ```
//!
//! Needs root. Figures from a shared 2-core VM are noisy: compare backends within one run.
//!
//! ```sh
//! cargo run --release -p ports --example veth_pps -- [--backend all|afxdp|afxdp-skb|afpacket|tap]
//!     [--seconds 3] [--len 60] [--burst 64]
//! ```

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::afxdp::{AfXdpOptions, AfXdpPort, XdpMode};
use ports::tap::TapPort;
use ports::{Batch, Port, MAX_BURST};

struct Args {
    backend: String,
    seconds: f64,
    len: usize,
    burst: usize,
}

fn args() -> Args {
    let mut a = Args { backend: "all".into(), seconds: 3.0, len: 60, burst: 64 };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--backend" => a.backend = v,
            "--seconds" => a.seconds = v.parse().expect("--seconds"),
            "--len" => a.len = v.parse().expect("--len"),
            "--burst" => a.burst = v.parse().expect("--burst"),
            _ => panic!("unknown argument {k}"),
        }
    }
    assert!((60..=1514).contains(&a.len), "--len must be 60..=1514");
    assert!((1..=MAX_BURST).contains(&a.burst), "--burst must be 1..={MAX_BURST}");
    a
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Interfaces this benchmark made, deleted on drop.
struct Links(Vec<String>);
impl Drop for Links {
    fn drop(&mut self) {
        for l in &self.0 {
            let _ = Command::new("ip").args(["link", "del", l]).output();
        }
    }
}

fn quiet_up(dev: &str) {
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6"), "1");
    ip(&["link", "set", "dev", dev, "up"]);
}

fn veth(tag: &str) -> (String, String, Links) {
    let a = format!("rpxpps{}{tag}a", std::process::id() % 1000);
    let b = format!("rpxpps{}{tag}b", std::process::id() % 1000);
    ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
    let links = Links(vec![a.clone()]);
    quiet_up(&a);
    quiet_up(&b);
    (a, b, links)
}

fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0x52, 0x50, 0x58, 0, 1]);
    f[6..12].copy_from_slice(&[0x02, 0x52, 0x50, 0x58, 0, 2]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f
}

/// Runs one sender thread against `rx` on this thread and prints the JSON line.
fn measure(name: &str, mode: &str, mut tx: Box<dyn Port>, mut rx: Box<dyn Port>, a: &Args) {
    let stop = Arc::new(AtomicBool::new(false));
    let (len, burst) = (a.len, a.burst);
    let stop2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let mut batch = Batch::new(burst);
        for _ in 0..burst {
            batch.push_copy(&frame(len));
        }
        let sel: Vec<u16> = (0..burst as u16).collect();
        let start = Instant::now();
        let mut bursts = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            // These backends copy out of the batch and leave its buffers alone, so the same
            // frames can be offered again without refilling.
            tx.tx_burst(&mut batch, &sel);
            bursts += 1;
            if bursts & 63 == 0 {
                tx.service();
            }
        }
        (tx.stats(), start.elapsed())
    });
    let mut batch = Batch::new(MAX_BURST);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.seconds);
    let mut rx_packets = 0u64;
    let mut polls = 0u64;
    while Instant::now() < end {
        batch.clear();
        rx_packets += rx.rx_burst(&mut batch) as u64;
        polls += 1;
        if polls & 63 == 0 {
            rx.service();
        }
    }
    let rx_time = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (ts, tx_time) = sender.join().expect("sender thread");
    let rs = rx.stats();
    let tx_pps = ts.tx_packets as f64 / tx_time.as_secs_f64();
    let rx_pps = rx_packets as f64 / rx_time.as_secs_f64();
    println!(
        "{{\"backend\":\"{name}\",\"mode\":\"{mode}\",\"frame_len\":{},\"burst\":{},\"seconds\":{:.2},\
         \"tx_pps\":{:.0},\"rx_pps\":{:.0},\"tx_packets\":{},\"rx_packets\":{},\"tx_full\":{},\
         \"tx_errors\":{},\"rx_dropped\":{}}}",
        a.len,
        a.burst,
        rx_time.as_secs_f64(),
        tx_pps,
        rx_pps,
        ts.tx_packets,
        rx_packets,
        ts.tx_full,
        ts.tx_errors,
        rs.rx_dropped,
    );
}

fn main() -> std::io::Result<()> {
    let a = args();
    let want = |b: &str| a.backend == "all" || a.backend == b;
    if want("afxdp") {
        let (x, y, _links) = veth("x");
        let tx = AfXdpPort::open(&x, &AfXdpOptions::default())?;
        let rx = AfXdpPort::open(&y, &AfXdpOptions::default())?;
        let mode = format!("{:?}", rx.mode().unwrap_or(XdpMode::Auto)).to_lowercase();
        measure("afxdp", &mode, Box::new(tx), Box::new(rx), &a);
    }
    if want("afxdp-skb") {
        let (x, y, _links) = veth("s");
        let o = AfXdpOptions { mode: XdpMode::Skb, ..Default::default() };
        let tx = AfXdpPort::open(&x, &o)?;
        let rx = AfXdpPort::open(&y, &o)?;
        measure("afxdp", "skb", Box::new(tx), Box::new(rx), &a);
    }
    if want("afpacket") {
        let (x, y, _links) = veth("p");
        let tx = AfPacketPort::open(&x, &AfPacketOptions::default())?;
        let rx = AfPacketPort::open(&y, &AfPacketOptions::default())?;
        measure("afpacket", "tpacket_v3", Box::new(tx), Box::new(rx), &a);
    }
    if want("tap") {
        for (i, dir) in ["tap->afpacket", "afpacket->tap"].into_iter().enumerate() {
            let t = format!("rpxpps{}t{i}", std::process::id() % 1000);
            let _links = Links(vec![t.clone()]);
            let tap = TapPort::create(&t)?;
            quiet_up(&t);
            let pk = AfPacketPort::open(&t, &AfPacketOptions::default())?;
            if i == 0 {
                measure("tap", dir, Box::new(tap), Box::new(pk), &a);
            } else {
                measure("tap", dir, Box::new(pk), Box::new(tap), &a);
            }
        }
    }
    Ok(())
}
