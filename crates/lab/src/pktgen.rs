//! `routeplex pktgen`: netmap's pkt-gen for memif. A process of its own that attaches to memif
//! sockets as a client: transmit, receive (counting and checking sequence numbers), both in one
//! thread (so a generator and a sink share one core), or ping-pong round trips. Prints rates and
//! the average batch once a second; `--json` prints a summary at the end, with what limited
//! the run ([`limited_by`]) and how busy the generator was.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use crate::{bail, Context, Result};
use ports::memif::{MemifOptions, MemifPort};
use ports::{Batch, Port, PortStatus};
use serde_json::json;
use tester::frames::{self, udp_frame, UdpFlow};
use tester::Generator;
use wire::MacAddr;

/// Options of `routeplex pktgen`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Transmit on this memif socket (a path, or @name for an abstract socket).
    #[arg(long)]
    pub tx: Option<String>,
    /// Receive on this memif socket; repeat for several sinks in the same thread.
    #[arg(long)]
    pub rx: Vec<String>,
    /// Ping: send one frame at a time here and time its echo...
    #[arg(long, conflicts_with_all = ["tx", "rx"], requires = "pong")]
    pub ping: Option<String>,
    /// ...which this socket's end echoes back (MACs swapped).
    #[arg(long, requires = "ping")]
    pub pong: Option<String>,
    /// memif interface id on every socket.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// Packets per second to offer, or "max".
    #[arg(long, default_value = "max")]
    pub rate: String,
    /// Frame size without FCS (60 is a 64-byte frame on the wire), 60..=1514.
    #[arg(long, default_value_t = 60)]
    pub size: usize,
    /// Flows (distinct source addresses and ports).
    #[arg(long, default_value_t = 1)]
    pub flows: usize,
    /// Destination MAC (default broadcast: a switch floods it).
    #[arg(long, default_value = "ff:ff:ff:ff:ff:ff")]
    pub dst_mac: MacAddr,
    /// Source MAC of the first flow; flows count up from it.
    #[arg(long, default_value = "02:00:00:00:00:01")]
    pub src_mac: MacAddr,
    /// Frames per burst, 1..=256.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Print one JSON summary instead of the per-second lines.
    #[arg(long)]
    pub json: bool,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seconds: f64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_bursts: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_bursts: u64,
    pub lost: u64,
    pub reordered: u64,
    pub rtt_ns: Vec<u64>,
    /// Frames per second asked for (`None`: as many as the ports take).
    pub requested_pps: Option<f64>,
    /// Time of the loop in rounds where the port refused frames (its ring was full),
    /// nanoseconds.
    pub ring_full_ns: u64,
    /// Time of the loop in rounds where the pacer held the generator back, nanoseconds.
    pub paced_ns: u64,
    /// Time of the whole loop, nanoseconds.
    pub loop_ns: u64,
}

/// What limited a generator → device under test → sink run, from what the generator saw:
/// - `ring`: more than 1 % of the offered frames never reached a sink: a ring between the
///   DUT and the sinks overflowed (the sinks did not drain it in time), whatever the DUT did;
/// - `none`: the generator offered at least 99 % of a requested rate and it arrived;
/// - `generator`: the ring into the DUT had room in at least 90 % of the generator's time
///   (busy fraction >= 0.9): the DUT waited for frames, so its own limit was not reached;
/// - `dut`: otherwise: the DUT's input ring was full for a tenth of the time or more, it could
///   not take frames as fast as the generator made them.
pub fn limited_by(
    requested_pps: Option<f64>,
    offered_pps: f64,
    offered: u64,
    lost: u64,
    generator_busy: f64,
) -> &'static str {
    if offered > 0 && lost as f64 > 0.01 * offered as f64 {
        "ring"
    } else if requested_pps.is_some_and(|r| offered_pps >= 0.99 * r) {
        "none"
    } else if generator_busy >= 0.9 {
        "generator"
    } else {
        "dut"
    }
}

impl Report {
    /// Share of the loop's time the generator spent making and handing over frames (not
    /// waiting for a full ring, not held back by the pacer).
    pub fn generator_busy(&self) -> f64 {
        if self.loop_ns == 0 {
            return 0.0;
        }
        1.0 - (self.ring_full_ns + self.paced_ns) as f64 / self.loop_ns as f64
    }

    /// Share of the loop's time the port into the DUT refused frames.
    pub fn ring_full_share(&self) -> f64 {
        self.ring_full_ns as f64 / self.loop_ns.max(1) as f64
    }

    /// [`limited_by`] for this run.
    pub fn limited_by(&self) -> &'static str {
        limited_by(
            self.requested_pps,
            self.tx_packets as f64 / self.seconds.max(1e-9),
            self.tx_packets,
            self.lost,
            self.generator_busy(),
        )
    }
}

impl Report {
    pub fn to_json(&self, a: &Args) -> serde_json::Value {
        let s = self.seconds.max(1e-9);
        let mut rtt = self.rtt_ns.clone();
        rtt.sort_unstable();
        let pct = |p: f64| {
            rtt.get(((rtt.len() as f64 * p) as usize).min(rtt.len().saturating_sub(1)))
                .map(|&n| n as f64 / 1e3)
        };
        json!({
            "seconds": self.seconds, "frame_bytes": a.size, "batch": a.batch, "rate": a.rate,
            "tx_packets": self.tx_packets, "tx_mpps": self.tx_packets as f64 / s / 1e6,
            "tx_gbps": self.tx_bytes as f64 * 8.0 / s / 1e9,
            "tx_avg_batch": self.tx_packets as f64 / self.tx_bursts.max(1) as f64,
            "rx_packets": self.rx_packets, "rx_mpps": self.rx_packets as f64 / s / 1e6,
            "rx_gbps": self.rx_bytes as f64 * 8.0 / s / 1e9,
            "rx_avg_batch": self.rx_packets as f64 / self.rx_bursts.max(1) as f64,
            "lost": self.lost, "reordered": self.reordered,
            "rtt_samples": rtt.len(), "rtt_p50_us": pct(0.5), "rtt_p99_us": pct(0.99),
            "rtt_avg_us": (!rtt.is_empty()).then(|| rtt.iter().sum::<u64>() as f64 / rtt.len() as f64 / 1e3),
            "requested_pps": self.requested_pps, "generator_busy": self.generator_busy(),
            "ring_full_share": self.ring_full_share(),
            "limited_by": if self.tx_packets > 0 { Some(self.limited_by()) } else { None },
        })
    }
}

pub fn run(a: Args) -> Result<()> {
    let sampler = crate::sys::threads::Sampler::start(
        vec![crate::sys::threads::Watch::this_process(
            "pktgen",
            &[("main", "generator and sinks")],
        )],
        Duration::from_millis(20),
    );
    let r = if let (Some(p), Some(q)) = (&a.ping, &a.pong) {
        let mut ping = connect(p, a.id, "pktgen-ping")?;
        let mut pong = connect(q, a.id, "pktgen-pong")?;
        ping_pong(&a, &mut ping, &mut pong)?
    } else {
        let mut tx = a.tx.as_deref().map(|s| connect(s, a.id, "pktgen-tx")).transpose()?;
        let mut rx: Vec<MemifPort> =
            a.rx.iter()
                .enumerate()
                .map(|(i, s)| connect(s, a.id, &format!("pktgen-rx{i}")))
                .collect::<Result<_>>()?;
        measure(&a, tx.as_mut(), &mut rx)?
    };
    let placement = sampler.finish();
    if a.json {
        let mut j = r.to_json(&a);
        j["placement"] = placement.to_json();
        println!("{j}");
    } else {
        println!("{}", placement.summary());
    }
    Ok(())
}

/// Options for a run at full rate, one flow of `size`-byte frames to `dst`, JSON output.
pub fn max_rate(size: usize, batch: usize, seconds: f64, dst: MacAddr) -> Args {
    Args {
        tx: None,
        rx: Vec::new(),
        ping: None,
        pong: None,
        id: 0,
        rate: "max".into(),
        size,
        flows: 1,
        dst_mac: dst,
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        batch,
        seconds,
        json: true,
    }
}

/// Reads and drops what `ports` receive for 100 ms: what an earlier run left in flight must
/// not count against the next one's sequence numbers.
pub fn drain(ports: &mut [MemifPort]) {
    let mut b = Batch::new(ports::MAX_BURST);
    for _ in 0..50 {
        for p in ports.iter_mut() {
            b.clear();
            p.rx_burst(&mut b);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Opens a memif client and waits (serving its socket) until the server accepts it.
pub fn connect(socket: &str, id: u32, name: &str) -> Result<MemifPort> {
    connect_within(socket, id, name, Duration::from_secs(10))
}

/// [`connect`], waiting up to `within` (a DPDK server brings its link up only once its
/// application has started its ports: l3fwd loads its whole table first).
pub fn connect_within(socket: &str, id: u32, name: &str, within: Duration) -> Result<MemifPort> {
    let mut o = MemifOptions::new(socket.to_string());
    o.id = id;
    o.name = name.to_string();
    let mut p = MemifPort::client(o).with_context(|| format!("memif client of {socket}"))?;
    let t0 = Instant::now();
    while p.status() != PortStatus::Up {
        if t0.elapsed() > within {
            bail!("{socket}: no memif server answered in {within:?} ({:?})", p.status());
        }
        p.service();
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(p)
}

fn frames_for(a: &Args) -> Result<Vec<(Vec<u8>, u16)>> {
    crate::ensure!((60..=1514).contains(&a.size), "--size {} is outside 60..=1514", a.size);
    crate::ensure!((1..=65536).contains(&a.flows), "--flows {} is outside 1..=65536", a.flows);
    Ok((0..a.flows)
        .map(|f| {
            let mut src_mac = a.src_mac;
            src_mac.0[5] = src_mac.0[5].wrapping_add(f as u8);
            let flow = UdpFlow {
                src_mac,
                dst_mac: a.dst_mac,
                vlan: None,
                src: IpAddr::V4(Ipv4Addr::from(0x0a00_0001 + f as u32)),
                dst: IpAddr::V4(Ipv4Addr::new(10, 255, 0, 1)),
                src_port: 1024 + (f % 60000) as u16,
                dst_port: 9,
                ttl: 64,
                size: a.size,
            };
            (udp_frame(&flow), 0)
        })
        .collect())
}

/// Runs the generator on `tx` and the sinks on `rx` for `a.seconds`; prints a line a second
/// unless `a.json`.
pub fn measure(a: &Args, tx: Option<&mut MemifPort>, rx: &mut [MemifPort]) -> Result<Report> {
    measure_with(a, Generator::new(frames_for(a)?), tx, rx)
}

/// [`measure`] with the caller's generator (its frames, `a.size` aside, are the caller's);
/// the sinks count sequence numbers of one flow per port, so give its frames one flow.
pub fn measure_with(
    a: &Args,
    mut gen: Generator,
    mut tx: Option<&mut MemifPort>,
    rx: &mut [MemifPort],
) -> Result<Report> {
    crate::ensure!(
        (1..=ports::MAX_BURST).contains(&a.batch),
        "--batch {} is outside 1..={}",
        a.batch,
        ports::MAX_BURST
    );
    crate::ensure!(a.seconds > 0.0, "--seconds must be positive");
    let rate: Option<f64> = match a.rate.as_str() {
        "max" => None,
        r => Some(
            r.parse::<f64>()
                .ok()
                .filter(|r| *r > 0.0)
                .with_context(|| format!("--rate {r}: a positive number or max"))?,
        ),
    };
    crate::ensure!(tx.is_some() || !rx.is_empty(), "give --tx, --rx or --ping/--pong");
    let mut r = Report { requested_pps: rate, ..Default::default() };
    // One clock read a round (the TSC where it measures time): the round just ended is
    // charged to waiting (ring full, pacer) or to work.
    let mut clock = crate::sys::tsc_clock();
    let mut prev = clock();
    let loop_start = prev;
    let mut expect = vec![0u64; rx.len()];
    let (mut txb, mut rxb) = (Batch::new(a.batch), Batch::new(ports::MAX_BURST));
    let t0 = Instant::now();
    let mut last = (t0, Report::default());
    let end = Duration::from_secs_f64(a.seconds);
    while t0.elapsed() < end {
        // What this round waited on: 1 the ring, 2 the pacer, 0 nothing.
        let mut waited = 0u8;
        if let Some(t) = tx.as_deref_mut() {
            let allowed = match rate {
                None => a.batch,
                Some(pps) => ((t0.elapsed().as_secs_f64() * pps) as u64)
                    .saturating_sub(r.tx_packets)
                    .min(a.batch as u64) as usize,
            };
            if allowed > 0 {
                let k = gen.send(t, &mut txb, allowed);
                if k < allowed {
                    waited = 1;
                }
                if k > 0 {
                    r.tx_bursts += 1;
                    r.tx_packets += k as u64;
                    r.tx_bytes += k as u64 * a.size as u64;
                }
            } else {
                waited = 2;
            }
        }
        for (i, p) in rx.iter_mut().enumerate() {
            rxb.clear();
            let n = p.rx_burst(&mut rxb);
            if n == 0 {
                continue;
            }
            r.rx_bursts += 1;
            r.rx_packets += n as u64;
            for f in rxb.packets() {
                r.rx_bytes += f.len() as u64;
                if let Some(s) = frames::seq(f.frame()) {
                    if s >= expect[i] {
                        r.lost += s - expect[i];
                        expect[i] = s + 1;
                    } else {
                        r.reordered += 1;
                    }
                }
            }
        }
        let now = clock();
        match waited {
            1 => r.ring_full_ns += now - prev,
            2 => r.paced_ns += now - prev,
            _ => {}
        }
        prev = now;
        if !a.json && last.0.elapsed() >= Duration::from_secs(1) {
            print_second(&last, &r);
            last = (Instant::now(), r.clone());
        }
    }
    r.seconds = t0.elapsed().as_secs_f64();
    r.loop_ns = prev - loop_start;
    Ok(r)
}

fn print_second(last: &(Instant, Report), r: &Report) {
    let dt = last.0.elapsed().as_secs_f64();
    let (tp, tb, tn) = (
        r.tx_packets - last.1.tx_packets,
        r.tx_bytes - last.1.tx_bytes,
        r.tx_bursts - last.1.tx_bursts,
    );
    let (rp, rb, rn) = (
        r.rx_packets - last.1.rx_packets,
        r.rx_bytes - last.1.rx_bytes,
        r.rx_bursts - last.1.rx_bursts,
    );
    println!(
        "tx {:>8.3} Mpps {:>7.3} Gbit/s batch {:>6.1} | rx {:>8.3} Mpps {:>7.3} Gbit/s batch {:>6.1} | lost {}",
        tp as f64 / dt / 1e6,
        tb as f64 * 8.0 / dt / 1e9,
        tp as f64 / tn.max(1) as f64,
        rp as f64 / dt / 1e6,
        rb as f64 * 8.0 / dt / 1e9,
        rp as f64 / rn.max(1) as f64,
        r.lost
    );
}

/// One frame at a time from `ping`, echoed by `pong` with its MACs swapped; the round trip is
/// measured from the send on `ping` to the echo's arrival there.
pub fn ping_pong(a: &Args, ping: &mut MemifPort, pong: &mut MemifPort) -> Result<Report> {
    let frames = frames_for(a)?;
    let frame = &frames[0].0;
    let (mut b, mut rb) = (Batch::new(1), Batch::new(ports::MAX_BURST));
    let all: [u16; ports::MAX_BURST] = core::array::from_fn(|i| i as u16);
    let mut r = Report::default();
    let t0 = Instant::now();
    let end = Duration::from_secs_f64(a.seconds);
    while t0.elapsed() < end {
        b.clear();
        b.push_copy(frame);
        let sent = Instant::now();
        if ping.tx_burst(&mut b, &[0]) == 0 {
            continue;
        }
        r.tx_packets += 1;
        let mut back = false;
        while sent.elapsed() < Duration::from_secs(1) && !back {
            rb.clear();
            if pong.rx_burst(&mut rb) > 0 {
                let n = rb.len();
                for i in 0..n {
                    let f = rb.get_mut(i).frame_mut();
                    let (d, s) = (MacAddr::from_bytes(&f[0..6]), MacAddr::from_bytes(&f[6..12]));
                    f[0..6].copy_from_slice(s.as_bytes());
                    f[6..12].copy_from_slice(d.as_bytes());
                }
                pong.tx_burst(&mut rb, &all[..n]);
            }
            rb.clear();
            if ping.rx_burst(&mut rb) > 0 {
                r.rtt_ns.push(sent.elapsed().as_nanos() as u64);
                r.rx_packets += rb.len() as u64;
                back = true;
            }
        }
    }
    r.seconds = t0.elapsed().as_secs_f64();
    if !a.json {
        let mut v = r.rtt_ns.clone();
        v.sort_unstable();
        if let Some(&med) = v.get(v.len() / 2) {
            println!("{} round trips, median {:.2} us", v.len(), med as f64 / 1e3);
        }
    }
    Ok(r)
}
