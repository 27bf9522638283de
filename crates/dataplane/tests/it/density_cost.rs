//! Issue 17: what one burst costs with its packets spread over 1 or 16 VRs on one worker.
//! A measurement, not a check (ignored): run it under an instruction counter twice, with two
//! packet counts, and difference, so that setup cancels out:
//!
//! ```text
//! cargo test -p dataplane --release --test it --no-run   # prints the binary
//! for v in 1 16; do for p in 200000 400000; do
//!   DENSITY_VRS=$v DENSITY_PACKETS=$p valgrind --tool=cachegrind --cache-sim=no \
//!     --cachegrind-out-file=/dev/null BINARY --ignored --exact density_cost::one_worker_bursts 2>&1 |
//!     grep 'I *refs'
//! done; done
//! ```
//!
//! Instructions per packet for `v` VRs = (refs at 400000 − refs at 200000) / 200000. Each
//! poll receives a full burst (`DENSITY_BURST`, 256 unless set) whose packets go to the VRs
//! in turn, as the density and 16-VR scenarios' flows do; the harness's own send and drain
//! are the same for every VR count. Without an instruction counter it prints the wall time a
//! packet: the DUT's cost with no tester thread beside it (`DENSITY_FLOWS` sets the flows).

use crate::common;

use common::*;
use dataplane::config::{VrConfig, VrLimits};
use dataplane::{Engine, Vr};
use ports::mem;
use ports::{Batch, Port};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn vr(i: usize) -> VrConfig {
    let (hi, lo) = ((i >> 8) as u8, i as u8);
    VrConfig {
        name: format!("vr{i}"),
        interfaces: vec![
            iface(
                "in",
                0,
                None,
                [2, 0xaa, 0, 0, hi, lo],
                1500,
                &[&format!("10.{hi}.{lo}.1/24")],
                &[],
            ),
            iface(
                "out",
                1,
                None,
                [2, 0xbb, 0, 0, hi, lo],
                1500,
                &[&format!("10.{}.{lo}.1/24", 128 + hi)],
                &[],
            ),
        ],
        routes: vec![via("0.0.0.0/0", &format!("10.{}.{lo}.2", 128 + hi))],
        neighbors: vec![neigh(1, &format!("10.{}.{lo}.2", 128 + hi), [2, 0x20, 0, 0, hi, lo])],
        limits: VrLimits::default(),
    }
}

#[test]
#[ignore = "a measurement: run under an instruction counter (see the file's docs)"]
fn one_worker_bursts() {
    let (vrs, packets, burst) =
        (env("DENSITY_VRS", 1), env("DENSITY_PACKETS", 100_000), env("DENSITY_BURST", 256));
    let (p0, mut h0) = mem::pair("p0", "h0", 4096);
    let (p1, mut h1) = mem::pair("p1", "h1", 4096);
    let ports: Vec<Box<dyn Port>> = vec![Box::new(p0), Box::new(p1)];
    let cfg: Vec<Vr> = (0..vrs).map(|i| Vr::new(&vr(i)).unwrap()).collect();
    let mut e = Engine::with_burst(ports, cfg, burst).unwrap();
    // 100 flows unless DENSITY_FLOWS says (the 16-VR scenario's; density.yaml has 16,384),
    // each to the VR `flow % vrs`.
    let frames: Vec<Vec<u8>> = (0..env("DENSITY_FLOWS", 100))
        .map(|f| {
            let (hi, lo) = (((f % vrs) >> 8) as u8, (f % vrs) as u8);
            let src = format!("10.{hi}.{lo}.10");
            let p = udp4_pkt(&src, &format!("198.18.{}.{}", f / 250, f % 250 + 1), 64, &[]);
            to_vr([2, 0xaa, 0, 0, hi, lo], [2, 0x10, 0, 0, 0, 1], None, &p)
        })
        .collect();
    let (mut tx, mut rx) = (Batch::new(burst), Batch::new(256));
    let sel: Vec<u16> = (0..burst as u16).collect();
    let (mut sent, mut got, mut next) = (0, 0, 0);
    let t0 = std::time::Instant::now();
    while sent < packets {
        tx.clear();
        for _ in 0..burst {
            tx.push_copy(&frames[next]);
            next = (next + 1) % frames.len();
        }
        sent += h0.tx_burst(&mut tx, &sel);
        e.poll(0);
        loop {
            rx.clear();
            let n = h1.rx_burst(&mut rx);
            if n == 0 {
                break;
            }
            got += n;
        }
    }
    assert_eq!(got, sent, "every packet forwarded");
    let fwd: u64 = e.vrs().iter().map(|v| v.counters().forwarded).sum();
    assert_eq!(fwd, sent as u64);
    // Wall time too, for runs outside an instruction counter: the harness's own send and
    // drain included, the same for every VR count.
    let ns = t0.elapsed().as_nanos() as f64 / sent as f64;
    eprintln!("{vrs} VRs: {sent} packets in bursts of {burst}, {ns:.2} ns a packet");
}
