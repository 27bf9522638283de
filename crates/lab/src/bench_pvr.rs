//! `routeplex bench pipeline --workers N --replicas N`: one VR as N replicas (parallel virtual
//! routers), each on its own worker thread with its own queue of each port, against the same
//! VR as one replica in the same run.
//!
//! Method, per configuration (1 replica, then N):
//! 1. The generator (the main thread) fills each replica's receive queue with up to a ring of
//!    frames, spread as the peer's RSS spreads them (`dataplane::replica::RssPort`'s rule:
//!    the flow hash picks the queue), every frame carrying its flow's next sequence number.
//!    The workers wait at a barrier meanwhile, so the generator never competes with them.
//! 2. The barrier opens; each worker polls its cell until its queue is empty and notes when
//!    its last frame arrived. The round's time is the slowest worker's.
//! 3. The workers wait again while the sink (the main thread) drains every transmit queue,
//!    checking per-flow sequence numbers (`reordered` counts frames whose number is not the
//!    one after the flow's last).
//!
//! Rounds repeat until `--packets` frames were forwarded. `mpps` is frames forwarded over the
//! summed round times; `scaling` is that over the one-replica figure of the same run. Where
//! each thread ran is read back from /proc while the run goes on (`sys::threads`), never
//! assumed from what was asked.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use crate::{bail, ensure, Context, Result};
use dataplane::flowhash::{flow_hash, pick};
use dataplane::{Cell, Worker};
use ports::mem::MemPort;
use ports::{Batch, Port};
use serde_json::{json, Value};

use crate::lab::{self, Rng, Table};
use crate::sys::threads::{Sampler, Watch};

/// Slots of each queue's ring: a round pre-fills at most this many frames per replica.
const RING: usize = 16384;
/// Where the payload (flow id, sequence number) sits in a generated frame.
const PAYLOAD: usize = 14 + 20 + 8;

/// What the command line asked for.
pub struct Opts {
    pub workers: usize,
    pub replicas: usize,
    pub packets: u64,
    pub batch: usize,
    pub flows: usize,
    pub prefixes: Option<PathBuf>,
    pub json: bool,
    /// Interleaved pairs (N replicas, 1 replica, …) when N > 1.
    pub pairs: usize,
}

/// One configuration's outcome.
struct Outcome {
    replicas: usize,
    forwarded: u64,
    timed_ns: u64,
    reordered: u64,
    lost: u64,
    /// Per worker: frames it forwarded and the time it was busy (first poll to last frame).
    per_worker: Vec<(u64, u64)>,
    /// The replicas' `forwarded` counters (they must add up to what the sink saw).
    counted: Vec<u64>,
}

impl Outcome {
    fn mpps(&self) -> f64 {
        self.forwarded as f64 / self.timed_ns.max(1) as f64 * 1e3
    }

    /// Each worker's own rate (its frames over its own busy time): min, mean and max in Mpps.
    fn worker_rates(&self) -> Rates {
        let r: Vec<f64> =
            self.per_worker.iter().map(|&(n, ns)| n as f64 / ns.max(1) as f64 * 1e3).collect();
        let min = r.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.iter().copied().fold(0.0, f64::max);
        Rates { min, mean: r.iter().sum::<f64>() / r.len().max(1) as f64, max }
    }
}

/// Workers' own rates, Mpps.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rates {
    min: f64,
    mean: f64,
    max: f64,
}

/// Where N replicas lose against N times one: each worker slower than one replica alone
/// (`alone` = mean own rate over the one replica's rate), or rounds waiting for the slowest
/// worker (`slowest` = its rate over the mean). Either below 0.9 is named.
fn scaling_losses(w: Rates, one_replica_mpps: f64) -> (f64, f64, Option<String>) {
    let alone = w.mean / one_replica_mpps.max(f64::MIN_POSITIVE);
    let slowest = w.min / w.mean.max(f64::MIN_POSITIVE);
    let mut why = Vec::new();
    if alone < 0.9 {
        why.push(format!("each worker alone forwards {:.0} % of one replica's rate (the workers slow each other: shared caches, memory or the host)", alone * 100.0));
    }
    if slowest < 0.9 {
        why.push(format!(
            "each round waits for the slowest worker ({:.0} % of the mean rate)",
            slowest * 100.0
        ));
    }
    (alone, slowest, (!why.is_empty()).then(|| why.join("; ")))
}

pub fn run(o: Opts) -> Result<()> {
    ensure!(
        (1..=dataplane::replica::MAX_REPLICAS).contains(&o.replicas),
        "--replicas {} is outside 1..={}",
        o.replicas,
        dataplane::replica::MAX_REPLICAS
    );
    ensure!(
        o.workers == o.replicas,
        "--workers {} --replicas {}: each replica runs on its own worker, so give both the same",
        o.workers,
        o.replicas
    );
    ensure!((1..=ports::MAX_BURST).contains(&o.batch), "--batch {} is outside 1..=256", o.batch);
    ensure!(o.packets > 0 && o.flows > 0, "--packets and --flows must be positive");
    let online = crate::sys::online_cpus();
    let table = match &o.prefixes {
        Some(p) => Table::from_file(p)?,
        None => Table::real_or_generated(500_000, 0, 1)?,
    };
    ensure!(!table.v4.is_empty(), "{}: no IPv4 prefixes", table.label);
    let mut rng = Rng::new(0x5eed);
    let dsts = table.destinations_v4(o.flows, &mut rng)?;

    let sampler = Sampler::start(
        vec![Watch {
            pid: std::process::id(),
            process: "bench".into(),
            roles: (0..o.replicas)
                .map(|r| (worker_name(r), format!("worker {r}")))
                .chain([("main".to_string(), "generator and sink".to_string())])
                .collect(),
        }],
        Duration::from_millis(10),
    );
    ensure!((1..=100).contains(&o.pairs), "--pairs {} is outside 1..=100", o.pairs);
    // N replicas and one alternate, so both see the same machine; the scaling is the median
    // of the pairs' ratios.
    let (base, many, pairs, mut reordered, mut lost) = if o.replicas > 1 {
        let runs = tester::pairs::run(
            o.pairs,
            |_| measure(&o, &table, &dsts, o.replicas, online),
            |_| measure(&o, &table, &dsts, 1, online),
        )?;
        let s = tester::pairs::Summary::from_measured(
            &format!("{} replicas", o.replicas),
            "1 replica",
            "Mpps",
            &runs,
            Outcome::mpps,
            Outcome::mpps,
        );
        let sum = |f: &dyn Fn(&Outcome) -> u64| -> u64 {
            runs.iter().map(|(m, b)| f(&m.value) + f(&b.value)).sum()
        };
        let (r, l) = (sum(&|x| x.reordered), sum(&|x| x.lost));
        let (m, b) = runs.into_iter().last().context("no pairs")?;
        (b.value, Some(m.value), Some(s), r, l)
    } else {
        let b = measure(&o, &table, &dsts, 1, online)?;
        (b, None, None, 0, 0)
    };
    let placement = sampler.finish();
    let top = many.as_ref().unwrap_or(&base);
    if many.is_none() {
        (reordered, lost) = (base.reordered, base.lost);
    }
    let scaling = pairs.as_ref().map_or(1.0, |p| p.ratio.median);
    let top_mpps = pairs.as_ref().map_or(base.mpps(), |p| p.a.median);
    let base_mpps = pairs.as_ref().map_or(base.mpps(), |p| p.b.median);
    // The last pair's N replicas against its one replica (the pair ran back to back).
    let losses = many.as_ref().map(|m| {
        let w = m.worker_rates();
        (w, scaling_losses(w, base.mpps()))
    });
    let mut limited_by = if online < o.replicas + 1 {
        format!("{online} online CPU(s) for {} workers and the generator: workers share CPUs with each other or with the generator's waits, so scaling is bounded by the CPUs, not the design", o.replicas)
    } else {
        "the workers, each on its own CPU while timed (the generator waits at the barrier)".into()
    };
    if let Some((_, (_, _, Some(why)))) = &losses {
        limited_by = format!("{limited_by}; {why}");
    }
    let out = json!({
        "mpps": top_mpps,
        "mpps_per_worker": top_mpps / o.workers as f64,
        "one_replica_mpps": base_mpps,
        "scaling": scaling,
        "pairs": pairs,
        "reordered": reordered,
        "lost": lost,
        "workers": o.workers,
        "replicas": o.replicas,
        "packets": top.forwarded,
        "batch": o.batch,
        "flows": o.flows,
        "routes": table.v4.len(),
        "table": table.label,
        "frame_bytes": 60,
        "one_replica": outcome_json(&base),
        "replicated": many.as_ref().map(outcome_json),
        "worker_mpps": losses.as_ref().map(|(w, (alone, slowest, _))| json!({
            "min": w.min, "mean": w.mean, "max": w.max,
            "mean_over_one_replica": alone, "min_over_mean": slowest,
        })),
        "placement": placement.to_json(),
        "online_cpus": online,
        "limited_by": limited_by,
        "method": "rings pre-filled by the generator while the workers wait at a barrier; timed: barrier release to each worker's last frame, slowest worker per round; reordered from per-flow sequence numbers at the sink; one replica and N replicas measured in the same run, interleaved in pairs (N, 1, N, 1, ...; --pairs) with a fixed memory probe (dependent random reads over 8 MiB) and compute probe timed before each; mpps and one_replica_mpps are the medians, scaling the median of the per-pair ratios (pairs.ratio has min and max), a pair flagged when its two trials' probes differ by more than 10 %; one_replica and replicated are the last pair's; worker_mpps: each worker's frames over its own busy time in that pair's N-replica run, mean_over_one_replica against its one replica, min_over_mean the slowest against the mean",
    });
    if o.json {
        println!("{out}");
    } else {
        println!(
            "one VR, {} IPv4 routes ({}), 60-byte frames, {} flows: 1 replica {:.2} Mpps; {} replicas on {} workers {:.2} Mpps ({:.2} per worker): scaling {:.2}x; {} reordered, {} lost",
            table.v4.len(), table.label, o.flows, base_mpps, o.replicas, o.workers, top_mpps,
            top_mpps / o.workers as f64, scaling, reordered, lost
        );
        if let Some((w, (alone, slowest, _))) = &losses {
            println!(
                "each worker alone (last pair): {:.2}-{:.2} Mpps, mean {:.2} ({:.2}x one replica); slowest {:.2}x the mean",
                w.min, w.max, w.mean, alone, slowest
            );
        }
        if let Some(p) = &pairs {
            for l in p.lines() {
                println!("{l}");
            }
        }
        println!("{}", placement.summary());
        println!("limited by: {limited_by}");
    }
    if reordered > 0 {
        bail!("{reordered} frames were reordered");
    }
    Ok(())
}

fn outcome_json(x: &Outcome) -> Value {
    json!({
        "replicas": x.replicas,
        "mpps": x.mpps(),
        "forwarded": x.forwarded,
        "timed_s": x.timed_ns as f64 / 1e9,
        "reordered": x.reordered,
        "lost": x.lost,
        "per_worker": x.per_worker.iter().enumerate().map(|(w, &(n, ns))| json!({
            "worker": w, "forwarded": n, "busy_s": ns as f64 / 1e9,
            "mpps": n as f64 / ns.max(1) as f64 * 1e3,
        })).collect::<Vec<_>>(),
        "replica_counters_forwarded": x.counted,
    })
}

/// The worker threads' names (what /proc shows as `comm`, at most 15 bytes).
fn worker_name(r: usize) -> String {
    format!("pvr-worker{r}")
}

/// The bench topology with `n` replicas on `n` workers and rings of [`RING`] slots.
fn topology(n: usize) -> Result<control::Topology> {
    let text = include_str!("bench.yaml").replace("ring: 1024", &format!("ring: {RING}"));
    let text = format!("workers: {n}\n{text}");
    let text = if n > 1 {
        text.replace("  - name: dut\n", &format!("  - name: dut\n    replicas: {n}\n"))
    } else {
        text
    };
    lab::topology(&text, "bench.yaml")
}

/// Runs one configuration: `n` replicas, each a cell on its own thread.
fn measure(o: &Opts, table: &Table, dsts: &[Ipv4Addr], n: usize, online: usize) -> Result<Outcome> {
    let topo = topology(n)?;
    let mut vrs = topo.vrs.clone();
    let gws: Vec<Ipv4Addr> = (2..=9).map(|h| Ipv4Addr::new(198, 19, 0, h)).collect();
    let v4_only = Table { label: String::new(), v4: table.v4.clone(), v6: Vec::new() };
    v4_only.add_routes(&mut vrs[0], &gws, &[]);
    let eth0 = vrs[0].interfaces[0].mac;
    let mut host = control::build::host(&topo, Some(&vrs), o.batch)?;
    let (mut rx_q, mut tx_q): (Vec<MemPort>, Vec<MemPort>) = if n > 1 {
        let mut q = |p: usize| host.queues[p].take().context("replicated port without queues");
        (q(0)?, q(1)?)
    } else {
        (vec![host.take_outside(&topo, "p0")?], vec![host.take_outside(&topo, "p1")?])
    };
    ensure!(host.cells.len() == n, "{} cells for {n} replicas", host.cells.len());

    // Flow f: destination dsts[f], source port from f; its queue by the flow hash.
    let frames: Vec<Vec<u8>> = lab::udp_frames(dsts.to_vec(), eth0)
        .into_iter()
        .enumerate()
        .map(|(f, (mut fr, _))| {
            fr[34..36].copy_from_slice(&(1024 + (f % 60_000) as u16).to_be_bytes());
            fr[PAYLOAD..PAYLOAD + 4].copy_from_slice(&(f as u32).to_be_bytes());
            fr
        })
        .collect();
    let mut by_queue: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (f, fr) in frames.iter().enumerate() {
        by_queue[pick(flow_hash(fr), n)].push(f);
    }
    for (q, fl) in by_queue.iter().enumerate() {
        ensure!(!fl.is_empty(), "no flow hashes to queue {q} of {n}: give more --flows");
    }

    // Workers: wait, drain, report; until the channel closes.
    let start = Arc::new(Barrier::new(n + 1));
    let (done_tx, done_rx) = mpsc::channel::<(usize, u64, u64)>();
    let (mut go_txs, mut threads) = (Vec::new(), Vec::new());
    for (r, placed) in host.cells.into_iter().enumerate() {
        let (start, done) = (start.clone(), done_tx.clone());
        let (go_tx, go_rx) = mpsc::channel::<bool>();
        go_txs.push(go_tx);
        // Worker r asks for CPU r; where it ran is read back, not assumed.
        let cpu = (r < online).then_some(r);
        let t = std::thread::Builder::new()
            .name(worker_name(r))
            .spawn(move || worker(r, placed.cell, cpu, start, go_rx, done))
            .context("worker thread")?;
        threads.push(t);
    }
    drop(done_tx);

    let mut next_seq = vec![0u32; frames.len()];
    let mut sent_seq = vec![0u32; frames.len()];
    let (mut forwarded, mut timed_ns, mut reordered, mut lost) = (0u64, 0u64, 0u64, 0u64);
    let mut per_worker = vec![(0u64, 0u64); n];
    let mut batch = Batch::new(o.batch);
    let mut rx = Batch::new(ports::MAX_BURST);
    let mut sel: Vec<u16> = Vec::with_capacity(o.batch);
    let per_round = (o.packets / n as u64).clamp(1, RING as u64) as usize;
    while forwarded < o.packets {
        // 1. Pre-fill every queue (the workers wait at the barrier).
        let mut filled = 0u64;
        for (q, port) in rx_q.iter_mut().enumerate() {
            let fl = &by_queue[q];
            let mut k = 0usize;
            let mut left = per_round;
            while left > 0 {
                batch.clear();
                while batch.len() < o.batch.min(left) {
                    let f = fl[k % fl.len()];
                    k += 1;
                    let mut fr = frames[f].clone();
                    fr[PAYLOAD + 4..PAYLOAD + 8].copy_from_slice(&sent_seq[f].to_be_bytes());
                    sent_seq[f] += 1;
                    batch.push_copy(&fr);
                }
                sel.clear();
                sel.extend(0..batch.len() as u16);
                let took = port.tx_burst(&mut batch, &sel);
                ensure!(
                    took == batch.len(),
                    "queue {q} refused frames while pre-filling: the ring is smaller than a round"
                );
                left -= took;
                filled += took as u64;
            }
        }
        // 2. Timed: the workers drain their queues.
        start.wait();
        let mut round_ns = 0u64;
        for _ in 0..n {
            let (r, pkts, ns) = done_rx.recv().context("a worker stopped")?;
            per_worker[r].0 += pkts;
            per_worker[r].1 += ns;
            round_ns = round_ns.max(ns);
        }
        timed_ns += round_ns;
        // 3. The sink drains every transmit queue, checking sequence numbers.
        let mut got = 0u64;
        for port in tx_q.iter_mut() {
            loop {
                rx.clear();
                let k = port.rx_burst(&mut rx);
                if k == 0 {
                    break;
                }
                for i in 0..k {
                    let fr = rx.get(i).frame();
                    let Some(p) = fr.get(PAYLOAD..PAYLOAD + 8) else { continue };
                    let f = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize;
                    let s = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
                    // Frames of a flow are sent in order: one older than the flow's last
                    // arrived after a younger one.
                    if f < next_seq.len() {
                        reordered += u64::from(s < next_seq[f]);
                        next_seq[f] = next_seq[f].max(s + 1);
                    }
                }
                got += k as u64;
            }
        }
        if got == 0 {
            bail!("nothing was forwarded in a round of {filled} frames");
        }
        lost += filled.saturating_sub(got);
        forwarded += got;
        // Another round, or (the senders dropped below) the workers stop.
        if forwarded < o.packets {
            for g in &go_txs {
                let _ = g.send(true);
            }
        }
    }
    drop(go_txs);
    let mut counted = Vec::new();
    for t in threads {
        let cell = t.join().map_err(|_| crate::format_err!("a worker panicked"))?;
        counted.push(cell.vrs()[0].counters().forwarded);
    }
    ensure!(
        counted.iter().sum::<u64>() == forwarded,
        "the replicas counted {} forwarded, the sink saw {forwarded}",
        counted.iter().sum::<u64>()
    );
    Ok(Outcome { replicas: n, forwarded, timed_ns, reordered, lost, per_worker, counted })
}

/// One replica's thread: per round, waits at the barrier, polls until its queue is empty
/// (several empty polls in a row), reports frames and busy time, then waits to go on.
fn worker(
    r: usize,
    mut cell: Cell,
    cpu: Option<usize>,
    start: Arc<Barrier>,
    go: mpsc::Receiver<bool>,
    done: mpsc::Sender<(usize, u64, u64)>,
) -> Cell {
    if let Some(c) = cpu {
        crate::sys::pin(c);
    }
    let mut w = Worker::new();
    let t0 = Instant::now();
    loop {
        start.wait();
        let began = Instant::now();
        let (mut pkts, mut last, mut empty) = (0u64, began, 0);
        while empty < 64 {
            let k = w.poll(std::slice::from_mut(&mut cell), t0.elapsed().as_nanos() as u64);
            if k == 0 {
                empty += 1;
            } else {
                empty = 0;
                pkts += k as u64;
                last = Instant::now();
            }
        }
        let ns = last.duration_since(began).as_nanos() as u64;
        if done.send((r, pkts, ns)).is_err() || go.recv().is_err() {
            return cell;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(per_worker: Vec<(u64, u64)>) -> Outcome {
        Outcome {
            replicas: per_worker.len(),
            forwarded: per_worker.iter().map(|w| w.0).sum(),
            timed_ns: per_worker.iter().map(|w| w.1).max().unwrap_or(0),
            reordered: 0,
            lost: 0,
            counted: per_worker.iter().map(|w| w.0).collect(),
            per_worker,
        }
    }

    #[test]
    fn worker_rates_are_each_workers_frames_over_its_own_busy_time() {
        // 1,000 frames in 100 us = 10 Mpps; 1,000 in 125 us = 8 Mpps.
        let w = outcome(vec![(1_000, 100_000), (1_000, 125_000)]).worker_rates();
        assert!((w.max - 10.0).abs() < 1e-9 && (w.min - 8.0).abs() < 1e-9, "{w:?}");
        assert!((w.mean - 9.0).abs() < 1e-9, "{w:?}");
        // The round lasted as long as the slowest: 2,000 frames in 125 us.
        assert!((outcome(vec![(1_000, 100_000), (1_000, 125_000)]).mpps() - 16.0).abs() < 1e-9);
    }

    #[test]
    fn scaling_losses_name_slow_workers_and_stragglers_only_past_ten_per_cent() {
        let even = Rates { min: 11.0, mean: 11.5, max: 12.0 };
        assert_eq!(scaling_losses(even, 12.0).2, None);
        let (alone, slowest, why) = scaling_losses(Rates { min: 7.8, mean: 8.5, max: 9.0 }, 12.0);
        assert!((alone - 8.5 / 12.0).abs() < 1e-9 && slowest > 0.9);
        assert!(why.unwrap().starts_with("each worker alone forwards 71 %"));
        let (_, slowest, why) = scaling_losses(Rates { min: 6.0, mean: 10.0, max: 12.0 }, 10.5);
        assert!((slowest - 0.6).abs() < 1e-9);
        assert_eq!(why.unwrap(), "each round waits for the slowest worker (60 % of the mean rate)");
    }
}
