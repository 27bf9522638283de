//! DUTs whose behaviour is known exactly, to check the tester itself (and to calibrate it).
//!
//! Each forwards on its own thread between two `mem` pairs, except [`Behaviour::Loopback`],
//! which joins the generator's port straight to the sink's with no thread at all (the tester
//! measuring itself).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ports::mem::{self, MemPort};
use ports::{Batch, PktBuf, Port, MAX_BURST};
use serde_json::json;
use wire::MacAddr;

use crate::clock::Clock;
use crate::dut::{Dut, DutCounters, DutPorts, DutReport, Refusal, Target};
use crate::{frames, Error};

/// What a fake DUT does to each frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Behaviour {
    /// No DUT: the generator's port is joined to the sink's.
    Loopback,
    /// Forwards everything (one thread hop).
    Wire,
    /// Forwards everything but the k-th, 2k-th, 3k-th... frame it receives.
    DropEvery(u64),
    /// Holds every frame for this long after it took it from its ring, then forwards it.
    Delay(Duration),
    /// Forwards at most `pps` frames per second and drops the rest: a token bucket of `depth`
    /// worth of frames, refilled on the frames' own TX stamps (so the DUT thread being
    /// descheduled does not change its decisions; the generator's timing does).
    Capacity { pps: f64, depth: Duration },
}

impl Behaviour {
    /// Parses `loopback`, `wire`, `drop-every:K`, `delay:MICROSECONDS`, `capacity:PPS`.
    pub fn parse(s: &str) -> Result<Behaviour, crate::Error> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let num = |what: &str| -> Result<f64, crate::Error> {
            crate::parse_rate(arg)
                .map_err(|_| crate::Error::new(format!("{kind}: {what} {arg:?} is not a number")))
        };
        match kind {
            "loopback" if arg.is_empty() => Ok(Behaviour::Loopback),
            "wire" if arg.is_empty() => Ok(Behaviour::Wire),
            "drop-every" => match arg.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(Behaviour::DropEvery(k)),
                _ => Err(format!("drop-every:{arg}: K must be a whole number >= 1").into()),
            },
            "delay" => {
                let us = num("microseconds")?;
                if !(0.0..=10e6).contains(&us) {
                    return Err(format!("delay:{arg}: 0..=10000000 microseconds").into());
                }
                Ok(Behaviour::Delay(Duration::from_nanos((us * 1e3) as u64)))
            }
            "capacity" => {
                let pps = num("rate")?;
                if pps < 1.0 {
                    return Err(format!("capacity:{arg}: the rate must be at least 1 pps").into());
                }
                Ok(Behaviour::Capacity { pps, depth: Duration::from_millis(10) })
            }
            _ => Err(format!(
                "unknown fake DUT {s:?}: loopback, wire, drop-every:K, delay:US or capacity:PPS"
            )
            .into()),
        }
    }
}

impl std::fmt::Display for Behaviour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Behaviour::Loopback => write!(f, "loopback (no DUT)"),
            Behaviour::Wire => write!(f, "wire (forwards everything)"),
            Behaviour::DropEvery(k) => write!(f, "drops every {k}th frame"),
            Behaviour::Delay(d) => write!(f, "holds every frame {} µs", d.as_secs_f64() * 1e6),
            Behaviour::Capacity { pps, depth } => write!(
                f,
                "forwards at most {pps:.0} pps (token bucket {} ms deep)",
                depth.as_secs_f64() * 1e3
            ),
        }
    }
}

#[derive(Default)]
struct Counters {
    received: AtomicU64,
    forwarded: AtomicU64,
    /// Dropped by the behaviour (every k-th, over capacity).
    rule: AtomicU64,
    /// Refused by the sink's ring.
    tx_full: AtomicU64,
    /// Dropped because the hold queue of a delaying DUT was full.
    hold_full: AtomicU64,
}

/// A fake DUT. See [`Behaviour`].
pub struct FakeDut {
    behaviour: Behaviour,
    ring: usize,
    on_thread: Option<Box<dyn FnOnce() + Send>>,
    idle_sleep: Option<Duration>,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

impl FakeDut {
    /// A fake DUT whose rings hold `ring` frames (a power of two).
    pub fn new(behaviour: Behaviour, ring: usize) -> FakeDut {
        FakeDut {
            behaviour,
            ring,
            on_thread: None,
            idle_sleep: None,
            stop: Arc::new(AtomicBool::new(false)),
            counters: Arc::new(Counters::default()),
            thread: None,
        }
    }

    /// Runs `f` first thing on the forwarding thread (to pin it, say).
    pub fn on_thread(mut self, f: impl FnOnce() + Send + 'static) -> FakeDut {
        self.on_thread = Some(Box::new(f));
        self
    }

    /// Sleeps this long when a round found nothing to do, instead of spinning: for machines
    /// where the DUT shares CPUs with other work (its latency grows by about the sleep plus
    /// the OS timer slack).
    pub fn idle_sleep(mut self, d: Duration) -> FakeDut {
        self.idle_sleep = Some(d);
        self
    }

    fn read_counters(&self) -> DutCounters {
        let c = &self.counters;
        let mut dropped = std::collections::BTreeMap::new();
        let rule = match self.behaviour {
            Behaviour::DropEvery(_) => "every_kth",
            _ => "over_capacity",
        };
        for (name, v) in [(rule, &c.rule), ("tx_full", &c.tx_full), ("hold_full", &c.hold_full)] {
            let v = v.load(Ordering::Relaxed);
            if v > 0 {
                dropped.insert(name.to_string(), v);
            }
        }
        DutCounters {
            received: c.received.load(Ordering::Relaxed),
            forwarded: c.forwarded.load(Ordering::Relaxed),
            dropped,
        }
    }
}

impl Dut for FakeDut {
    fn name(&self) -> String {
        format!("fake DUT: {}", self.behaviour)
    }

    fn describe(&self) -> serde_json::Value {
        let b = match self.behaviour {
            Behaviour::Loopback => json!({"kind": "loopback"}),
            Behaviour::Wire => json!({"kind": "wire"}),
            Behaviour::DropEvery(k) => json!({"kind": "drop-every", "k": k}),
            Behaviour::Delay(d) => json!({"kind": "delay", "delay_us": d.as_secs_f64() * 1e6}),
            Behaviour::Capacity { pps, depth } => json!({
                "kind": "capacity", "pps": pps, "bucket_ms": depth.as_secs_f64() * 1e3,
            }),
        };
        json!({"name": self.name(), "fake": b, "ring": self.ring, "ports": "mem"})
    }

    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, Error> {
        let base = u32::from(Ipv4Addr::new(198, 19, 0, 1));
        let n = flows.clamp(1, 65_534) as u32;
        Ok(vec![Target {
            class: "fake".into(),
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0xfe, 0]),
            vlan: None,
            src: (2..=9).map(|h| IpAddr::V4(Ipv4Addr::new(198, 18, 0, h))).collect(),
            dst: (0..n).map(|i| IpAddr::V4(Ipv4Addr::from(base + i))).collect(),
        }])
    }

    fn start(&mut self) -> Result<DutPorts, Error> {
        if self.thread.is_some() {
            return Err(Error::new("the fake DUT is already running"));
        }
        if !self.ring.is_power_of_two() || self.ring < 2 {
            return Err(Error::new(format!("ring {} is not a power of two >= 2", self.ring)));
        }
        if self.behaviour == Behaviour::Loopback {
            let (a, b) = mem::pair("tester-tx", "tester-rx", self.ring);
            return Ok(DutPorts { tx: Box::new(a), rx: Box::new(b), refusal: Refusal::Loss });
        }
        let (tx, inp) = mem::pair("tester-tx", "dut-in", self.ring);
        let (out, rx) = mem::pair("dut-out", "tester-rx", self.ring);
        let (b, stop, c) = (self.behaviour, self.stop.clone(), self.counters.clone());
        let hook = self.on_thread.take();
        let hold = (self.ring * 4).max(MAX_BURST);
        let idle = self.idle_sleep;
        let t = std::thread::Builder::new()
            .name("fake-dut".into())
            .spawn(move || {
                if let Some(h) = hook {
                    h();
                }
                forward(inp, out, b, hold, idle, &stop, &c)
            })
            .map_err(|e| Error::new(format!("cannot start the fake DUT's thread: {e}")))?;
        self.thread = Some(t);
        Ok(DutPorts { tx: Box::new(tx), rx: Box::new(rx), refusal: Refusal::Loss })
    }

    fn counters(&mut self) -> Option<DutCounters> {
        (self.behaviour != Behaviour::Loopback).then(|| self.read_counters())
    }

    fn stop(&mut self) -> Result<DutReport, Error> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| Error::new("the fake DUT's thread panicked"))?;
        }
        Ok(DutReport { counters: self.counters(), details: self.describe() })
    }
}

impl Drop for FakeDut {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The forwarding thread.
fn forward(
    mut inp: MemPort,
    mut out: MemPort,
    b: Behaviour,
    hold: usize,
    idle: Option<Duration>,
    stop: &AtomicBool,
    c: &Counters,
) {
    let mut batch = Batch::new(MAX_BURST);
    let sel: Vec<u16> = (0..MAX_BURST as u16).collect();
    let mut keep = vec![0u16; MAX_BURST];
    let mut seen = 0u64;
    // Capacity: tokens (frames, starting full), and the TX time they were last topped up at.
    let (rate, depth) = match b {
        Behaviour::Capacity { pps, depth } => (pps, (pps * depth.as_secs_f64()).max(1.0)),
        _ => (0.0, 0.0),
    };
    let (mut tokens, mut last_ts) = (depth, 0u64);
    // Delay: a FIFO of held buffers with the time each frame was taken.
    let clock = Clock::new();
    let delay_ns = match b {
        Behaviour::Delay(d) => d.as_nanos() as u64,
        _ => 0,
    };
    let (mut held, mut held_at): (Vec<PktBuf>, Vec<u64>) = match b {
        Behaviour::Delay(_) => ((0..hold).map(|_| PktBuf::new()).collect(), vec![0; hold]),
        _ => (Vec::new(), Vec::new()),
    };
    let (mut head, mut tail) = (0usize, 0usize);
    let mut out_batch = Batch::new(MAX_BURST);
    let (mut received, mut forwarded, mut rule, mut tx_full, mut hold_full) = (0, 0, 0, 0, 0);
    while !stop.load(Ordering::Relaxed) {
        batch.clear();
        let n = inp.rx_burst(&mut batch);
        received += n as u64;
        if let Behaviour::Delay(_) = b {
            let now = clock.now_ns();
            for i in 0..n {
                if tail - head == hold {
                    hold_full += 1;
                    continue;
                }
                batch.swap_buf(i, &mut held[tail % hold]);
                held_at[tail % hold] = now;
                tail += 1;
            }
            let now = clock.now_ns();
            out_batch.clear();
            while head < tail
                && out_batch.len() < MAX_BURST
                && now >= held_at[head % hold] + delay_ns
            {
                let l = out_batch.len();
                out_batch.swap_buf(l, &mut held[head % hold]);
                out_batch.commit();
                head += 1;
            }
            let m = out_batch.len();
            if m > 0 {
                let k = out.tx_burst(&mut out_batch, &sel[..m]);
                forwarded += k as u64;
                tx_full += (m - k) as u64;
            }
        } else if n > 0 {
            let mut m = 0;
            for i in 0..n {
                let pass = match b {
                    Behaviour::DropEvery(k) => {
                        seen += 1;
                        !seen.is_multiple_of(k)
                    }
                    Behaviour::Capacity { .. } => {
                        let ts = frames::read_stamp(batch.get(i).frame()).map_or(0, |s| s.tx_ns);
                        if ts > last_ts {
                            tokens = (tokens + (ts - last_ts) as f64 * rate * 1e-9).min(depth);
                            last_ts = ts;
                        }
                        if tokens >= 1.0 {
                            tokens -= 1.0;
                            true
                        } else {
                            false
                        }
                    }
                    _ => true,
                };
                if pass {
                    keep[m] = i as u16;
                    m += 1;
                } else {
                    rule += 1;
                }
            }
            let k = out.tx_burst(&mut batch, &keep[..m]);
            forwarded += k as u64;
            tx_full += (m - k) as u64;
        }
        // Published every round (relaxed stores to lines only this thread writes), so
        // counters read between trials are exact.
        c.received.store(received, Ordering::Relaxed);
        c.forwarded.store(forwarded, Ordering::Relaxed);
        c.rule.store(rule, Ordering::Relaxed);
        c.tx_full.store(tx_full, Ordering::Relaxed);
        c.hold_full.store(hold_full, Ordering::Relaxed);
        if n == 0 && out_batch.is_empty() {
            match idle {
                Some(d) => std::thread::sleep(d),
                None => std::hint::spin_loop(),
            }
        }
    }
}

/// A fake DUT with several classes and ingress ports, to check the tester's multi-port and
/// per-class paths: class `c` (named `c0`, `c1`, ...) is addressed to MAC `02:00:00:00:fe:c`
/// and enters on ingress port `c mod ingress`; everything leaves through one egress port,
/// which is port `ingress` of the set. It forwards every frame (like [`Behaviour::Wire`]) and
/// counts what it received and forwarded per class, by destination MAC.
pub struct MultiWire {
    ingress: usize,
    classes: usize,
    ring: usize,
    idle_sleep: Option<Duration>,
    stop: Arc<AtomicBool>,
    /// Per class: received, forwarded.
    counts: Arc<Vec<[AtomicU64; 2]>>,
    thread: Option<JoinHandle<()>>,
}

impl MultiWire {
    /// `classes` classes (1..=255) over `ingress` ingress ports (1..=classes), rings of `ring`.
    pub fn new(classes: usize, ingress: usize, ring: usize) -> MultiWire {
        assert!((1..=255).contains(&classes) && (1..=classes).contains(&ingress));
        MultiWire {
            ingress,
            classes,
            ring,
            idle_sleep: None,
            stop: Arc::new(AtomicBool::new(false)),
            counts: Arc::new((0..classes).map(|_| Default::default()).collect()),
            thread: None,
        }
    }

    /// Sleeps this long when a round found nothing to do.
    pub fn idle_sleep(mut self, d: Duration) -> MultiWire {
        self.idle_sleep = Some(d);
        self
    }

    fn read(&self) -> crate::dut::DutSnapshot {
        let mut s = crate::dut::DutSnapshot::default();
        for (c, n) in self.counts.iter().enumerate() {
            let (rx, fwd) = (n[0].load(Ordering::Relaxed), n[1].load(Ordering::Relaxed));
            s.total.received += rx;
            s.total.forwarded += fwd;
            let cc = DutCounters { received: rx, forwarded: fwd, ..DutCounters::default() };
            s.classes.insert(format!("c{c}"), cc);
        }
        s
    }
}

impl Dut for MultiWire {
    fn name(&self) -> String {
        format!("fake DUT: {} classes on {} ingress ports, one egress", self.classes, self.ingress)
    }

    fn describe(&self) -> serde_json::Value {
        json!({"name": self.name(), "fake": {"kind": "multi-wire", "classes": self.classes,
            "ingress_ports": self.ingress}, "ring": self.ring, "ports": "mem"})
    }

    fn targets(&mut self, flows: usize) -> Result<Vec<Target>, Error> {
        let per = flows.div_ceil(self.classes).clamp(1, 65_534) as u32;
        Ok((0..self.classes)
            .map(|c| {
                let base = u32::from(Ipv4Addr::new(198, 19, c as u8, 0));
                Target {
                    class: format!("c{c}"),
                    src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                    dst_mac: MacAddr([2, 0, 0, 0, 0xfe, c as u8]),
                    vlan: None,
                    src: vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2))],
                    dst: (0..per).map(|i| IpAddr::V4(Ipv4Addr::from(base + i))).collect(),
                }
            })
            .collect())
    }

    fn ingress(&self) -> Vec<usize> {
        (0..self.classes).map(|c| c % self.ingress).collect()
    }

    fn start(&mut self) -> Result<DutPorts, Error> {
        Err(Error::new("a multi-port fake DUT starts with start_ports"))
    }

    fn start_ports(&mut self) -> Result<crate::dut::PortSet, Error> {
        if self.thread.is_some() {
            return Err(Error::new("the fake DUT is already running"));
        }
        let mut ports: Vec<Box<dyn Port>> = Vec::new();
        let mut inside = Vec::new();
        for i in 0..self.ingress {
            let (t, d) = mem::pair(&format!("tester-in{i}"), &format!("dut-in{i}"), self.ring);
            ports.push(Box::new(t));
            inside.push(d);
        }
        let (mut out, rx) = mem::pair("dut-out", "tester-rx", self.ring);
        ports.push(Box::new(rx));
        let (stop, counts, idle) = (self.stop.clone(), self.counts.clone(), self.idle_sleep);
        let t = std::thread::Builder::new()
            .name("fake-dut".into())
            .spawn(move || {
                let mut batch = Batch::new(MAX_BURST);
                let mut sel = vec![0u16; MAX_BURST];
                let mut class = vec![usize::MAX; MAX_BURST];
                let mut local = vec![[0u64; 2]; counts.len()];
                while !stop.load(Ordering::Relaxed) {
                    let mut busy = false;
                    for inp in &mut inside {
                        batch.clear();
                        let n = inp.rx_burst(&mut batch);
                        busy |= n > 0;
                        for i in 0..n {
                            sel[i] = i as u16;
                            // Read before sending: the ring takes the buffers.
                            class[i] =
                                batch.get(i).frame().get(5).map_or(usize::MAX, |&b| b as usize);
                        }
                        // A mem port takes the first `k` it is offered.
                        let k = out.tx_burst(&mut batch, &sel[..n]);
                        for (i, &c) in class.iter().enumerate().take(n) {
                            if let Some(l) = local.get_mut(c) {
                                l[0] += 1;
                                l[1] += (i < k) as u64;
                            }
                        }
                    }
                    for (l, c) in local.iter().zip(counts.iter()) {
                        c[0].store(l[0], Ordering::Relaxed);
                        c[1].store(l[1], Ordering::Relaxed);
                    }
                    if !busy {
                        match idle {
                            Some(d) => std::thread::sleep(d),
                            None => std::hint::spin_loop(),
                        }
                    }
                }
            })
            .map_err(|e| Error::new(format!("cannot start the fake DUT's thread: {e}")))?;
        self.thread = Some(t);
        Ok(crate::dut::PortSet { ports, sinks: vec![self.ingress], refusal: Refusal::Loss })
    }

    fn counters(&mut self) -> Option<DutCounters> {
        Some(self.read().total)
    }

    fn snapshot(&mut self) -> Option<crate::dut::DutSnapshot> {
        Some(self.read())
    }

    fn stop(&mut self) -> Result<DutReport, Error> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().map_err(|_| Error::new("the fake DUT's thread panicked"))?;
        }
        Ok(DutReport { counters: Some(self.read().total), details: self.describe() })
    }
}

impl Drop for MultiWire {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
