//! The `mem` backend: two ports joined back to back inside one process, like a veth pair.
//!
//! What one end transmits the other receives. Each direction is a ring with its own buffers;
//! packets move by buffer exchange, so the pair neither copies nor allocates after it is made.
//! The two ends may live on different threads. Tests, benchmarks, the demo and the tester's
//! in-process generator use it.

use crate::ring::{ring, Consumer, Producer};
use crate::{Batch, Port, PortStats};

/// One end of an in-memory port pair.
pub struct MemPort {
    name: String,
    tx: Producer,
    rx: Consumer,
    stats: PortStats,
}

/// Makes a connected pair of ports named `a` and `b`, each direction a ring of `slots` buffers
/// (a power of two).
pub fn pair(a: &str, b: &str, slots: usize) -> (MemPort, MemPort) {
    let (a_tx, b_rx) = ring(slots);
    let (b_tx, a_rx) = ring(slots);
    let port = |name: &str, tx, rx| MemPort {
        name: name.to_string(),
        tx,
        rx,
        stats: PortStats::default(),
    };
    (port(a, a_tx, a_rx), port(b, b_tx, b_rx))
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, batch: &mut Batch) -> usize {
        let (n, bytes) = self.rx.pop(batch);
        self.stats.rx_packets += n as u64;
        self.stats.rx_bytes += bytes;
        n
    }

    fn tx_burst(&mut self, batch: &mut Batch, sel: &[u16]) -> usize {
        let (n, bytes) = self.tx.push(batch, sel);
        self.stats.tx_packets += n as u64;
        self.stats.tx_bytes += bytes;
        self.stats.tx_full += (sel.len() - n) as u64;
        n
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_is_crossed_and_counts() {
        let (mut a, mut b) = pair("a", "b", 2);
        let mut batch = Batch::new(4);
        for i in 0..3u8 {
            batch.push_copy(&[i; 60]);
        }
        assert_eq!(a.tx_burst(&mut batch, &[2, 0, 1]), 2);
        let mut got = Batch::new(4);
        assert_eq!(b.rx_burst(&mut got), 2);
        assert_eq!(got.get(0).frame(), &[2; 60]);
        assert_eq!(got.get(1).frame(), &[0; 60]);
        assert_eq!(a.rx_burst(&mut got), 0);
        assert_eq!(
            a.stats(),
            PortStats { tx_packets: 2, tx_bytes: 120, tx_full: 1, ..Default::default() }
        );
        assert_eq!(b.stats(), PortStats { rx_packets: 2, rx_bytes: 120, ..Default::default() });
    }
}
