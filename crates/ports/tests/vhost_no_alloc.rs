//! No allocation on the vhost-user data path: with a counting global allocator, 100k frames
//! each way between an in-process frontend (the test plays the guest driver) and the port, with
//! mergeable receive buffers, allocate nothing in `rx_burst`, `tx_burst`, or an idle
//! `service()`. Only the test thread's allocations inside the measured window count.

mod alloc_count;
mod vhost_common;

use alloc_count::allocations;
use ports::{Batch, Port, PortStatus};
use vhost_common::*;

#[test]
fn the_vhost_user_data_path_allocates_nothing() {
    let sock = unique_socket();
    let mut port = server_port(&sock, 1);
    let (_fe, mut g) = connect(&mut port, sock.clone(), Guest::new(1));
    const BURST: u16 = 32;
    // Every transmit descriptor holds a header and a 60-byte frame; every receive descriptor
    // a 2 KiB buffer. The guest only re-posts them.
    let mut frame = vec![0u8; 12 + 60];
    frame[12..18].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[24] = 0x88;
    for i in 0..Q {
        g.write(BUFS + 128 * i as u64, &frame);
        g.desc(1, i, BUFS + 128 * i as u64, frame.len() as u32, 0, 0);
        g.desc(0, i, BUFS + 0x10000 + 2048 * i as u64, 2048, F_WRITE, 0);
    }
    let mut b = Batch::new(256);
    let sel: Vec<u16> = (0..BURST).collect();
    let (mut got, mut sent) = (0usize, 0usize);
    let total = 100_000;
    let n = allocations(|| {
        let mut k = 0u16;
        while got < total {
            for j in 0..BURST {
                g.post(1, (k + j) % Q);
                g.post(0, (k + j) % Q);
            }
            k = k.wrapping_add(BURST);
            b.clear();
            let r = port.rx_burst(&mut b);
            got += r;
            sent += port.tx_burst(&mut b, &sel[..r]);
            if got % 4096 == 0 {
                port.service();
            }
        }
    });
    assert_eq!(n, 0, "allocations on the data path");
    assert_eq!((got, sent), (total, total));
    assert_eq!(port.status(), PortStatus::Up);
    let s = port.stats();
    assert_eq!(
        (s.rx_packets, s.tx_packets, s.rx_dropped, s.tx_errors),
        (total as u64, total as u64, 0, 0)
    );
}
