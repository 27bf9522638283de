//! What stands in a running cell where a port was closed: the cell numbers its ports, so a
//! port taken out while the cell runs leaves this in its place, and the real port (its socket,
//! its mapping, its interface) goes at once.

use std::os::fd::RawFd;

use crate::{Batch, Port, PortStats, PortStatus};

/// A port that was closed: it receives nothing and takes nothing.
pub struct Closed {
    name: String,
}

/// The name of the closed port standing in for port `was`: `was (closed)`, which no
/// topology's port can have (names have no spaces).
pub fn closed_name(was: &str) -> String {
    format!("{was} (closed)")
}

impl Closed {
    /// Stands in for the port named `was`, named [`closed_name`]`(was)`.
    pub fn new(was: &str) -> Closed {
        Closed { name: closed_name(was) }
    }
}

impl Port for Closed {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_burst(&mut self, _batch: &mut Batch) -> usize {
        0
    }

    fn tx_burst(&mut self, _batch: &mut Batch, _sel: &[u16]) -> usize {
        0
    }

    fn stats(&self) -> PortStats {
        PortStats::default()
    }

    fn status(&self) -> PortStatus {
        PortStatus::Down("closed: no longer in the topology".into())
    }

    /// Nothing ever arrives: no descriptor, and no reason to keep a sleeping worker's naps
    /// short.
    fn wakeup_fds(&self, _out: &mut Vec<RawFd>) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_moves_nothing_and_says_why() {
        let mut p = Closed::new("pa");
        assert_eq!(p.name(), "pa (closed)");
        let mut b = Batch::new(2);
        assert_eq!(p.rx_burst(&mut b), 0);
        assert!(b.push_copy(&[1; 60]));
        assert_eq!(p.tx_burst(&mut b, &[0]), 0);
        assert_eq!(b.get(0).frame(), &[1; 60], "the caller keeps what was not taken");
        assert!(matches!(p.status(), PortStatus::Down(_)));
        let mut fds = Vec::new();
        assert!(p.wakeup_fds(&mut fds) && fds.is_empty());
    }
}
