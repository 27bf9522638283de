//! No allocation on the memif data path (ARCHITECTURE decision 8): with a counting global
//! allocator, 200k frames each way through a connected server/client pair, in polling and in
//! interrupt mode, with chained buffers, allocate nothing in `rx_burst`, `tx_burst`, or an idle
//! `service()`.
//!
//! Only the test thread's allocations inside a measured window count (thread-local flag), so
//! the harness and other tests running in parallel do not disturb the result.

mod alloc_count;
mod memif_common;

use alloc_count::allocations;
use memif_common::*;
use ports::memif::{MemifPort, RxMode};
use ports::{Batch, Port};

fn blast(tx: &mut MemifPort, rx: &mut MemifPort, frames: &[Vec<u8>], total: usize) -> usize {
    let mut b = Batch::new(64);
    let mut r = Batch::new(256);
    let sel: Vec<u16> = (0..64).collect();
    let mut received = 0;
    let mut next = 0;
    let n = allocations(|| {
        while received < total {
            b.clear();
            for _ in 0..64 {
                b.push_copy(&frames[next % frames.len()]);
                next += 1;
            }
            let sent = tx.tx_burst(&mut b, &sel);
            next -= 64 - sent;
            r.clear();
            received += rx.rx_burst(&mut r);
            for p in r.packets() {
                assert!(!p.is_empty());
            }
            tx.service();
            rx.service();
        }
    });
    assert_eq!(n, 0, "{n} allocations while moving {total} frames");
    received
}

#[test]
fn data_path_and_idle_service_do_not_allocate() {
    let frames: Vec<Vec<u8>> = (0..64).map(|q| frame(MAGIC_RPX, q, frame_len(q))).collect();
    for (mode, bsize) in
        [(RxMode::Polling, 2048), (RxMode::Interrupt, 2048), (RxMode::Polling, 512)]
    {
        let sock = unique_socket(true);
        let (mut s, mut c) = pair(&sock, |o| {
            o.rx_mode = mode;
            o.buffer_size = bsize;
            o.queues = 2;
        });
        assert!(blast(&mut c, &mut s, &frames, 200_000) >= 200_000);
        assert!(blast(&mut s, &mut c, &frames, 200_000) >= 200_000);
        let st = s.stats();
        assert_eq!((st.rx_dropped, st.tx_errors), (0, 0));
    }
}
