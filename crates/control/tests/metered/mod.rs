//! A node run in the test's own thread with a metrics server on a free port: frames into its
//! VRs through the outside ends of `mem` ports, its egress drained, and a sample taken whenever
//! a request waits for one (the daemon's control loop, as the metrics and page tests need it).
#![allow(dead_code)]

use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use control::metrics::MetricsServer;
use control::runtime::Options;
use control::{Node, Topology};
use ports::mem::MemPort;
use ports::{Batch, Port};

use crate::common::frame;

pub struct Metered {
    pub node: Node,
    pub metrics: MetricsServer,
    /// Per VR: the outside end its frames go in by, and the VR's MAC.
    pub inputs: Vec<(MemPort, [u8; 6])>,
    /// Outside ends drained every turn.
    pub outputs: Vec<MemPort>,
    /// Frames each input's ring took.
    pub sent: Vec<u64>,
}

impl Metered {
    /// Starts `text` (named `file`) on one worker; `inputs` are (port, VR MAC), `outputs`
    /// the ports whose outsides are drained.
    pub fn start(text: &str, file: &str, inputs: &[(&str, [u8; 6])], outputs: &[&str]) -> Metered {
        let topo = Topology::parse(text, file, Path::new(".")).unwrap();
        let mut node = Node::start(topo, Options::new(1), 64).unwrap();
        let mut take = |n: &str| node.take_outside(n).unwrap();
        let inputs: Vec<(MemPort, [u8; 6])> = inputs.iter().map(|&(p, m)| (take(p), m)).collect();
        let outputs = outputs.iter().map(|p| take(p)).collect();
        // A topology's metrics address is for the daemon; the test takes any free port.
        let metrics = MetricsServer::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let sent = vec![0; inputs.len()];
        Metered { node, metrics, inputs, outputs, sent }
    }

    /// One turn of the control loop: `frames` into each VR, the outsides drained, and a
    /// sample when a request waits for one.
    pub fn turn(&mut self, frames: u64) {
        let mut out = Batch::new(64);
        let mut inb = Batch::new(256);
        for ((tx, mac), sent) in self.inputs.iter_mut().zip(&mut self.sent) {
            if frames > 0 {
                out.clear();
                for s in 0..frames {
                    out.push_copy(&frame(*mac, *sent + s));
                }
                let sel: Vec<u16> = (0..frames as u16).collect();
                *sent += tx.tx_burst(&mut out, &sel) as u64;
            }
        }
        for rx in &mut self.outputs {
            inb.clear();
            rx.rx_burst(&mut inb);
        }
        self.metrics.refresh(&self.node);
        thread::sleep(Duration::from_millis(2));
    }

    /// Turns the loop until `job` (on another thread) finishes; returns what it returned.
    pub fn while_running<T: Send + 'static>(
        &mut self,
        frames: u64,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || tx.send(job()).unwrap());
        loop {
            self.turn(frames);
            match rx.try_recv() {
                Ok(v) => return v,
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => panic!("the job's thread panicked"),
            }
        }
    }
}
