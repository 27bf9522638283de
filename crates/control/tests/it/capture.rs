//! Capture and trace through the control API: frames captured at a port (received, sent,
//! dropped with the reason) written as pcapng that `tcpdump -r` reads, file or pipe; a trace
//! naming each stage of a forwarded packet and of a dropped one.

use crate::reply_json;
use reply_json::Json;

use std::io::Write;
use std::path::Path;
use std::process::{Command as Proc, Stdio};
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use crate::common;

use common::frame_to;
use control::capture;
use control::runtime::Options;
use control::{Node, Topology};
use ports::mem::MemPort;
use ports::{Batch, Port};

const TOPO: &str = "\
workers: 1
ports:
  - { name: in, kind: mem }
  - { name: out, kind: mem }
vrs:
  - name: r
    interfaces:
      - { name: a, port: in, mac: 02:00:00:00:01:00, addresses: [10.0.0.1/24] }
      - { name: b, port: out, mac: 02:00:00:00:01:01, addresses: [10.0.1.1/24] }
    routes:
      - { prefix: 198.51.100.0/24, via: 10.0.1.2 }
      - { prefix: 192.0.2.0/24, blackhole: true }
    neighbors: [{ address: 10.0.1.2, mac: 02:00:00:00:0b:01, interface: b }]
";

const VR_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0];

fn node() -> Node {
    let topo = Topology::parse(TOPO, "capture.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    Node::start(topo, o, 256).unwrap()
}

/// Three frames to forward, two to a blackhole, one for another MAC; sent after a moment,
/// so that the capture or trace asked for meanwhile sees them.
fn send_later(mut port: MemPort) -> thread::JoinHandle<MemPort> {
    thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let mut frames: Vec<Vec<u8>> =
            (0..3).map(|s| frame_to(VR_MAC, [198, 51, 100, 1], s)).collect();
        frames.push(frame_to(VR_MAC, [192, 0, 2, 1], 3));
        frames.push(frame_to(VR_MAC, [192, 0, 2, 1], 4));
        frames.push(frame_to([2, 0, 0, 0, 9, 9], [198, 51, 100, 1], 5));
        let mut b = Batch::new(16);
        for f in &frames {
            assert!(b.push_copy(f));
        }
        let sel: Vec<u16> = (0..frames.len() as u16).collect();
        assert_eq!(port.tx_burst(&mut b, &sel), frames.len());
        port
    })
}

fn tcpdump(args: &[&str], stdin: Option<&[u8]>) -> Vec<String> {
    let mut child = Proc::new("tcpdump")
        .args(["-nn", "-e"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (Debian package tcpdump) runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(b) = stdin {
        input.write_all(b).unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "tcpdump: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

#[test]
fn capture_is_read_back_by_tcpdump() {
    let mut node = node();
    let tx = node.take_outside("in").unwrap();
    let mut rx = node.take_outside("out").unwrap();
    let stop = AtomicBool::new(false);
    let dir = std::env::temp_dir().join(format!("rpx-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("in.pcapng");

    // At port `in`, with drops: 6 received, 2 blackholed and 1 not for us dropped.
    let sender = send_later(tx);
    let mut ask = |c| node.execute(c);
    let out = std::fs::File::create(&file).unwrap();
    let s = capture::capture(&mut ask, "in", 9, true, out, &stop).unwrap();
    let tx = sender.join().unwrap();
    assert_eq!(s, capture::Summary { frames: 9, lost: 0 });
    let lines = tcpdump(&["-r", file.to_str().unwrap()], None);
    assert_eq!(lines.len(), 9, "{lines:#?}");
    let count = |what: &str| lines.iter().filter(|l| l.contains(what)).count();
    assert_eq!(count("10.0.0.10.1000 > 198.51.100.1.2000: UDP, length 8"), 5, "{lines:#?}");
    assert_eq!(count("10.0.0.10.1000 > 192.0.2.1.2000: UDP, length 8"), 4, "{lines:#?}");
    assert_eq!(count("02:00:00:00:00:10 > 02:00:00:00:01:00"), 7, "{lines:#?}");
    assert_eq!(count("> 02:00:00:00:09:09"), 2, "{lines:#?}");
    let bytes = std::fs::read(&file).unwrap();
    let has = |s: &str| bytes.windows(s.len()).filter(|w| *w == s.as_bytes()).count();
    assert_eq!((has("dropped: blackhole"), has("dropped: not_for_us")), (2, 1));
    let mut b = Batch::new(16);
    assert_eq!(rx.rx_burst(&mut b), 3);
    let st = ask(control::api::Command::Status).unwrap();
    let stages = &st.json()["workers"][0]["stages"];
    assert_eq!(stages["rx"]["packets"], 6, "{stages}");
    assert_eq!(
        (stages["vr"]["packets"].as_u64(), stages["tx"]["packets"].as_u64()),
        (Some(5), Some(3))
    );
    assert!(stages["rx"]["avg_burst"].as_f64().unwrap() >= 1.0, "{stages}");

    // At VR r's interface b (port `out`): what it sent, streamed into `tcpdump -r -`.
    let sender = send_later(tx);
    let mut pcap = Vec::new();
    let s = capture::capture(&mut ask, "r:b", 3, false, &mut pcap, &stop).unwrap();
    sender.join().unwrap();
    assert_eq!(s.frames, 3);
    let lines = tcpdump(&["-r", "-"], Some(&pcap));
    assert_eq!(lines.len(), 3, "{lines:#?}");
    for l in &lines {
        // Rewritten: the VR's MAC on b to the next hop's.
        assert!(l.contains("02:00:00:00:01:01 > 02:00:00:00:0b:01"), "{l}");
        assert!(l.contains("10.0.0.10.1000 > 198.51.100.1.2000: UDP, length 8"), "{l}");
        assert!(l.contains("ttl 63") || !l.contains("ttl"), "{l}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    node.stop().unwrap();
}

#[test]
fn trace_names_the_stages_of_forwarded_and_dropped_packets() {
    let mut node = node();
    let tx = node.take_outside("in").unwrap();
    let _rx = node.take_outside("out").unwrap();
    let stop = AtomicBool::new(false);
    let sender = send_later(tx);
    let mut lines = Vec::new();
    let mut ask = |c| node.execute(c);
    let n = capture::trace(&mut ask, "r", 4, &stop, &mut |l| lines.push(l)).unwrap();
    sender.join().unwrap();
    assert_eq!(n, 4, "{lines:#?}");
    let fwd = "rx in 50 B -> demux: interface a, ethertype 0x0800 -> validate: ok -> lookup \
               198.51.100.1: next hop";
    assert!(lines[0].starts_with(&format!("#1 {fwd}")), "{lines:#?}");
    assert!(lines[0].ends_with("(via 10.0.1.2 on b) -> rewrite -> egress out"), "{lines:#?}");
    assert!(lines[3].contains("lookup 192.0.2.1: next hop"), "{lines:#?}");
    assert!(lines[3].ends_with("(blackhole) -> drop: blackhole"), "{lines:#?}");
    node.stop().unwrap();
}

/// `out` loses every frame it is sent: a capture of its drops has each forwarded frame twice,
/// as sent (taken by the link) and as dropped with `impair_loss`, which `tcpdump` reads; a trace
/// shows the packet's egress and then the link's drop; `status` counts them on the link.
#[test]
fn an_impaired_links_drops_are_captured_and_traced() {
    let topo = TOPO.replace(
        "{ name: out, kind: mem }",
        "{ name: out, kind: mem, impair: { loss: 100%, seed: 1 } }",
    );
    let topo = Topology::parse(&topo, "capture.yaml", Path::new(".")).unwrap();
    let o = Options::new(1);
    let mut node = Node::start(topo, o, 256).unwrap();
    let tx = node.take_outside("in").unwrap();
    let mut rx = node.take_outside("out").unwrap();
    let stop = AtomicBool::new(false);

    let sender = send_later(tx);
    let mut pcap = Vec::new();
    let mut ask = |c| node.execute(c);
    let s = capture::capture(&mut ask, "out", 6, true, &mut pcap, &stop).unwrap();
    let tx = sender.join().unwrap();
    assert_eq!(s, capture::Summary { frames: 6, lost: 0 });
    let lines = tcpdump(&["-r", "-"], Some(&pcap));
    assert_eq!(lines.len(), 6, "{lines:#?}");
    for l in &lines {
        assert!(l.contains("02:00:00:00:01:01 > 02:00:00:00:0b:01"), "{l}");
        assert!(l.contains("10.0.0.10.1000 > 198.51.100.1.2000: UDP, length 8"), "{l}");
    }
    let has = |s: &str| pcap.windows(s.len()).filter(|w| *w == s.as_bytes()).count();
    assert_eq!(has("dropped: impair_loss"), 3);
    assert_eq!(rx.rx_burst(&mut Batch::new(16)), 0, "the link lost them all");

    let sender = send_later(tx);
    let mut lines = Vec::new();
    let n = capture::trace(&mut ask, "r", 4, &stop, &mut |l| lines.push(l)).unwrap();
    sender.join().unwrap();
    assert_eq!(n, 4, "{lines:#?}");
    for l in &lines[..3] {
        assert!(l.ends_with("-> rewrite -> egress out -> drop: impair_loss"), "{lines:#?}");
    }
    assert!(lines[3].ends_with("(blackhole) -> drop: blackhole"), "{lines:#?}");

    let st = ask(control::api::Command::Status).unwrap();
    let out = st.json()["ports"].as_array().unwrap().iter().find(|p| p["name"] == "out").cloned();
    let out = out.expect("port out in status");
    assert_eq!(out["impair"]["offered"], 6, "{out:#}");
    assert_eq!(out["impair"]["sent"], 0, "{out:#}");
    assert_eq!(out["impair"]["drops"]["impair_loss"], 6, "{out:#}");
    node.stop().unwrap();
}
