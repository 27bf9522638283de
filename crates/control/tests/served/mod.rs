//! A migration's destination host in a test: its node served on a control socket from a
//! thread, and its migration listener; stopped (the node too) when dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use control::migrate::Listener;
use control::Node;

pub struct Served {
    stop: Arc<AtomicBool>,
    serve: Option<JoinHandle<Node>>,
    listener: Option<Listener>,
}

impl Served {
    /// `serve` runs the node until `stop` is set, then returns it.
    pub fn new(stop: Arc<AtomicBool>, serve: JoinHandle<Node>, listener: Listener) -> Served {
        Served { stop, serve: Some(serve), listener: Some(listener) }
    }

    /// Where the migration listener listens.
    pub fn addr(&self) -> SocketAddr {
        self.listener.as_ref().expect("listening until finished").local_addr()
    }

    /// Its migration listener (what it counted).
    pub fn listener(&self) -> &Listener {
        self.listener.as_ref().expect("listening until finished")
    }

    /// Stops serving; the node, to look at.
    pub fn finish(mut self) -> Node {
        drop(self.listener.take());
        self.stop.store(true, Ordering::Relaxed);
        self.serve.take().expect("served until finished").join().unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        drop(self.listener.take());
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.serve.take() {
            if let Ok(n) = t.join() {
                let _ = n.stop();
            }
        }
    }
}
