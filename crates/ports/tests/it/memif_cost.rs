//! What one memif hop costs the CPU, per frame: a measurement, not a test (ignored; run with
//! `cargo test --release -p ports --test it memif_cost:: -- --ignored --nocapture`). One thread
//! drives two connected pairs the way a switch between two memif ports is driven: client A
//! sends a burst, server A receives it, server B sends the same frames on, client B receives
//! them. The figure is this thread's CPU time (not wall time, so other load on the host
//! matters less) per frame for the two server-side calls, the switch's share, and for the
//! whole loop. One thread means no cross-core cache traffic: it shows the instructions and
//! per-burst overheads the ports add, not what the memory system adds between two cores.

use crate::memif_common;

use memif_common::{pair, unique_socket};
use ports::{Batch, Port};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec owned by this frame.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
#[ignore = "a measurement: prints CPU ns per frame, asserts no timing"]
fn cpu_time_per_frame_through_two_memif_ports() {
    let sizes: Vec<usize> = std::env::var("MEMIF_COST_SIZES")
        .map_or(vec![60, 1514], |s| s.split(',').filter_map(|v| v.parse().ok()).collect());
    for size in sizes {
        for burst in [32usize, 256] {
            let tweak = |o: &mut ports::memif::MemifOptions| o.log2_ring_size = 10;
            let (mut sa, mut ca) = pair(&unique_socket(true), tweak);
            let (mut sb, mut cb) = pair(&unique_socket(true), tweak);
            let frame = vec![0x5au8; size];
            let mut tx = Batch::new(burst);
            let mut mid = Batch::new(burst);
            let mut out = Batch::new(256);
            let sel: Vec<u16> = (0..burst as u16).collect();
            let (mut frames, mut server_ns, iters) = (0u64, 0u64, 20_000usize);
            let t0 = thread_cpu_ns();
            for _ in 0..iters {
                tx.clear();
                for _ in 0..burst {
                    tx.push_copy(&frame);
                }
                ca.tx_burst(&mut tx, &sel);
                let s0 = thread_cpu_ns();
                mid.clear();
                let n = sa.rx_burst(&mut mid);
                sb.tx_burst(&mut mid, &sel[..n]);
                server_ns += thread_cpu_ns() - s0;
                out.clear();
                frames += cb.rx_burst(&mut out) as u64;
            }
            let all = thread_cpu_ns() - t0;
            assert!(frames > 0, "nothing came through");
            println!(
                "{size} B, burst {burst}: {frames} frames; server side (rx + tx, the switch's ports) {:.1} ns/frame; whole loop {:.1} ns/frame",
                server_ns as f64 / frames as f64,
                all as f64 / frames as f64
            );
        }
    }
}
