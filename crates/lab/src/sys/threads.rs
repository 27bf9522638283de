//! Where a benchmark's threads actually ran, read back from the OS while it runs.
//!
//! Contract: [`Sampler::start`] watches a set of processes (this one, a child) and, every few
//! milliseconds until [`Sampler::finish`], reads each of their threads'
//! `/proc/PID/task/TID/stat` field 39 (the CPU it last ran on) and, at the first and last
//! sight of a thread, its affinity (`Cpus_allowed_list` in `status`), its CPU time
//! (`schedstat`, else `stat`'s utime + stime), its time waiting for a CPU while runnable
//! (`schedstat`'s second field), its state at every sample (`stat` field 3) and its context
//! switches; and each CPU's time (`/proc/stat`: busy, idle, stolen by the hypervisor) at the
//! first and the last sample. Nothing here is assumed from what the benchmark asked for: a
//! thread pinned by request shows the CPU the kernel put it on. The sampler is itself a
//! thread of this process and is reported as one (role `sampler`); it sleeps between samples.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The sampler thread's name (`comm`), so it can tell itself apart.
const SAMPLER_NAME: &str = "rpx-sampler";
/// At most this many threads per watched process are tracked (a runaway process cannot make
/// the sampler grow without bound).
const MAX_THREADS: usize = 256;

/// A process to watch and what to call it and its threads in the report.
#[derive(Clone, Debug)]
pub struct Watch {
    pub pid: u32,
    /// What the process is, e.g. `bench` or `switch`.
    pub process: String,
    /// `(thread name, role)`: a thread whose `comm` is the name gets the role. The main
    /// thread (tid == pid) is matched by the name `main`.
    pub roles: Vec<(String, String)>,
}

impl Watch {
    /// Process `pid`, called `process`, its threads named in `roles` as `(thread name, role)`.
    pub fn new(pid: u32, process: &str, roles: &[(&str, &str)]) -> Watch {
        Watch {
            pid,
            process: process.into(),
            roles: roles.iter().map(|&(n, r)| (n.to_string(), r.to_string())).collect(),
        }
    }

    /// This process, as [`Watch::new`] names it.
    pub fn this_process(process: &str, roles: &[(&str, &str)]) -> Watch {
        Watch::new(std::process::id(), process, roles)
    }
}

/// What was seen of one thread.
#[derive(Clone, Debug, Default)]
pub struct ThreadSeen {
    pub process: String,
    pub pid: u32,
    pub tid: u32,
    pub name: String,
    pub role: String,
    /// `Cpus_allowed_list` when last read.
    pub allowed: String,
    /// CPU (field 39) → samples that showed it.
    pub cpus: BTreeMap<usize, u64>,
    pub samples: u64,
    /// State (`stat` field 3: R running or runnable, S asleep, D uninterruptible, ...) →
    /// samples that showed it.
    pub states: BTreeMap<char, u64>,
    /// CPU time between the first and the last sample, nanoseconds.
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU between the first and the last sample,
    /// nanoseconds (0 where the kernel keeps no schedstat).
    pub wait_ns: u64,
    /// Wall time between the first and the last sample, nanoseconds.
    pub wall_ns: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    first: Option<Reading>,
}

impl ThreadSeen {
    /// The CPU most samples showed.
    pub fn main_cpu(&self) -> Option<usize> {
        self.cpus.iter().max_by_key(|(_, n)| **n).map(|(c, _)| *c)
    }

    /// Share of its samples the thread spent on its main CPU.
    pub fn main_share(&self) -> f64 {
        let top = self.cpus.values().max().copied().unwrap_or(0);
        top as f64 / self.samples.max(1) as f64
    }

    /// CPU time over wall time while sampled (1.0: it ran the whole time).
    pub fn busy(&self) -> f64 {
        if self.wall_ns == 0 {
            return 0.0;
        }
        self.cpu_ns as f64 / self.wall_ns as f64
    }

    /// Time runnable but waiting for a CPU over wall time while sampled. The kernel adds a
    /// wait to the count when it ends, so one that began before the first sample counts in
    /// full: the share is capped at the time the thread did not run.
    pub fn waited(&self) -> f64 {
        if self.wall_ns == 0 {
            return 0.0;
        }
        self.wait_ns.min(self.wall_ns.saturating_sub(self.cpu_ns)) as f64 / self.wall_ns as f64
    }

    pub fn to_json(&self) -> Value {
        let cpus: serde_json::Map<String, Value> =
            self.cpus.iter().map(|(c, n)| (c.to_string(), json!(n))).collect();
        let states: serde_json::Map<String, Value> =
            self.states.iter().map(|(s, n)| (s.to_string(), json!(n))).collect();
        json!({
            "process": self.process, "pid": self.pid, "tid": self.tid, "name": self.name,
            "role": self.role, "allowed_cpus": self.allowed, "cpu": self.main_cpu(),
            "cpu_share": round3(self.main_share()), "cpus_seen": cpus, "samples": self.samples,
            "states_seen": states,
            "busy": round3(self.busy()), "waited": round3(self.waited()),
            "cpu_seconds": round3(self.cpu_ns as f64 / 1e9),
            "context_switches": { "voluntary": self.voluntary_switches, "involuntary": self.involuntary_switches },
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Counters read at one sample.
#[derive(Clone, Copy, Debug)]
struct Reading {
    at: Instant,
    cpu_ns: u64,
    wait_ns: u64,
    voluntary: u64,
    involuntary: u64,
}

/// Every thread seen, in order of first sight, and what each CPU did meanwhile.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    pub online_cpus: usize,
    pub threads: Vec<ThreadSeen>,
    pub interval_ms: f64,
    /// CPU → its time between the first and the last sample.
    pub cpu_time: BTreeMap<usize, CpuTime>,
}

/// One CPU's time in `/proc/stat`'s units (clock ticks), or a difference of two readings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// user, nice, system, irq and softirq: running something.
    pub busy: u64,
    /// idle and iowait.
    pub idle: u64,
    /// Time the hypervisor ran something else while this virtual CPU wanted to run.
    pub steal: u64,
}

impl CpuTime {
    fn total(&self) -> u64 {
        self.busy + self.idle + self.steal
    }

    fn share(&self, part: u64) -> f64 {
        part as f64 / self.total().max(1) as f64
    }

    fn since(&self, first: &CpuTime) -> CpuTime {
        CpuTime {
            busy: self.busy.saturating_sub(first.busy),
            idle: self.idle.saturating_sub(first.idle),
            steal: self.steal.saturating_sub(first.steal),
        }
    }
}

/// Each CPU's line of `/proc/stat`.
fn cpu_times(stat: &str) -> BTreeMap<usize, CpuTime> {
    stat.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0);
            let t = CpuTime {
                busy: at(0) + at(1) + at(2) + at(5) + at(6),
                idle: at(3) + at(4),
                steal: at(7),
            };
            Some((cpu, t))
        })
        .collect()
}

impl Placement {
    /// The thread of `process` with `role`.
    pub fn role(&self, process: &str, role: &str) -> Option<&ThreadSeen> {
        self.threads.iter().find(|t| t.process == process && t.role == role)
    }

    /// Why `t`, a thread that should have run all the time, did not, from what was read
    /// back: the share it ran, the share it waited for a CPU that other threads had, and for
    /// the rest whether it was asleep or runnable; then what its CPU did meanwhile. (The
    /// kernel counts a wait when it ends: a thread queued for the whole run shows no wait,
    /// only state R and a CPU busy with other work.)
    pub fn why_not_running(&self, t: &ThreadSeen) -> String {
        let asleep: u64 = t.states.iter().filter(|(s, _)| **s != 'R').map(|(_, n)| n).sum();
        let rest = (1.0 - t.busy() - t.waited()).max(0.0);
        let mut why =
            format!("ran {:.0} %, waited for a CPU {:.0} %", t.busy() * 100.0, t.waited() * 100.0);
        if rest >= 0.05 {
            let how = if asleep * 2 > t.samples { "asleep or blocked" } else { "runnable" };
            why += &format!(", the other {:.0} % {how}", rest * 100.0);
        }
        let states: Vec<String> = t.states.iter().map(|(s, n)| format!("{s}:{n}")).collect();
        why += &format!(" (states seen {})", states.join(" "));
        if let Some((cpu, c)) = t.main_cpu().and_then(|cpu| Some((cpu, self.cpu_time.get(&cpu)?))) {
            why += &format!(
                "; its CPU {cpu} meanwhile: busy {:.0} %, idle {:.0} %, stolen by the hypervisor {:.0} %",
                c.share(c.busy) * 100.0,
                c.share(c.idle) * 100.0,
                c.share(c.steal) * 100.0
            );
        }
        why
    }

    /// One line: each thread with a role, and the CPU it ran on.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for t in &self.threads {
            let Some(cpu) = t.main_cpu() else { continue };
            if t.role == "sampler" || t.role.is_empty() {
                continue;
            }
            parts.push(format!(
                "{} ({} {}) on CPU {cpu} ({:.0} % of samples, allowed {}, busy {:.0} %, {:.2} s CPU)",
                t.role,
                t.process,
                t.name,
                t.main_share() * 100.0,
                t.allowed,
                t.busy() * 100.0,
                t.cpu_ns as f64 / 1e9
            ));
        }
        format!("{} online CPU(s); read back from /proc: {}", self.online_cpus, parts.join("; "))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "online_cpus": self.online_cpus,
            "read_back": format!("/proc/PID/task/TID/stat field 39 sampled every {} ms while the run went on; affinity from status Cpus_allowed_list; busy = CPU time / wall time, waited = time runnable but queued for a CPU / wall time (schedstat), states_seen = stat field 3 per sample; cpu_time = each CPU's shares of /proc/stat's ticks between the first and the last sample", self.interval_ms),
            "summary": self.summary(),
            "threads": self.threads.iter().map(ThreadSeen::to_json).collect::<Vec<_>>(),
            "cpu_time": self.cpu_time.iter().map(|(cpu, c)| (cpu.to_string(), json!({
                "busy": round3(c.share(c.busy)), "idle": round3(c.share(c.idle)),
                "stolen": round3(c.share(c.steal)), "ticks": c.total(),
            }))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// A thread that samples until [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Placement>>,
}

impl Sampler {
    /// Starts sampling the threads of `watch` every `every`. The sampler may run on any
    /// online CPU (not on the caller's alone, if it is pinned): it sleeps between samples.
    pub fn start(watch: Vec<Watch>, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name(SAMPLER_NAME.into())
            .spawn(move || {
                // It reads /proc into fresh strings: not the benchmark's allocations.
                crate::alloc_count::uncount_this_thread();
                super::unpin();
                sample_until(&watch, every, &flag)
            })
            .ok();
        Sampler { stop, handle }
    }

    /// Stops sampling (one last sample first) and returns what it saw.
    pub fn finish(mut self) -> Placement {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn sample_until(watch: &[Watch], every: Duration, stop: &AtomicBool) -> Placement {
    let mut seen: Vec<ThreadSeen> = Vec::new();
    let mut index: BTreeMap<u32, usize> = BTreeMap::new();
    let stat = || cpu_times(&read_small(std::path::Path::new("/proc/stat")).unwrap_or_default());
    let first = stat();
    loop {
        let last = stop.load(Ordering::Relaxed);
        for w in watch {
            sample_process(w, &mut seen, &mut index);
        }
        if last {
            break;
        }
        std::thread::sleep(every);
    }
    let cpu_time =
        stat().into_iter().filter_map(|(cpu, t)| Some((cpu, t.since(first.get(&cpu)?)))).collect();
    Placement {
        online_cpus: super::online_cpus(),
        threads: seen,
        interval_ms: every.as_secs_f64() * 1e3,
        cpu_time,
    }
}

fn sample_process(w: &Watch, seen: &mut Vec<ThreadSeen>, index: &mut BTreeMap<u32, usize>) {
    let dir = PathBuf::from(format!("/proc/{}/task", w.pid));
    let Ok(tasks) = std::fs::read_dir(&dir) else { return };
    let mut tids: Vec<u32> =
        tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    tids.sort_unstable();
    tids.truncate(MAX_THREADS);
    for tid in tids {
        let base = dir.join(tid.to_string());
        let Some(stat) = read_small(&base.join("stat")) else { continue };
        let Some((name, fields)) = split_stat(&stat) else { continue };
        // Field 39 "processor" is the 37th after the `(comm)`; field 3 "state" is the first.
        let Some(cpu) = fields.get(36).and_then(|f| f.parse::<usize>().ok()) else { continue };
        let now = Instant::now();
        let status = read_small(&base.join("status")).unwrap_or_default();
        let field = |key: &str| {
            status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string())
        };
        let state = fields.first().and_then(|f| f.chars().next()).unwrap_or('?');
        let schedstat = read_small(&base.join("schedstat")).unwrap_or_default();
        let mut sched = schedstat.split_whitespace().map(|f| f.parse::<u64>().ok());
        let (exec, wait) = (sched.next().flatten(), sched.next().flatten());
        let cpu_ns = exec
            .or_else(|| {
                let ticks: u64 =
                    fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
                Some(ticks * 1_000_000_000 / super::clock_ticks())
            })
            .unwrap_or(0);
        let reading = Reading {
            at: now,
            cpu_ns,
            wait_ns: wait.unwrap_or(0),
            voluntary: field("voluntary_ctxt_switches:").and_then(|v| v.parse().ok()).unwrap_or(0),
            involuntary: field("nonvoluntary_ctxt_switches:")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        };
        // A new thread names itself after it starts: the name, and so the role, is taken
        // again at every sample.
        let role = if name == SAMPLER_NAME {
            "sampler".to_string()
        } else {
            w.roles
                .iter()
                .find(|(n, _)| (n == "main" && tid == w.pid) || (n != "main" && *n == name))
                .map(|(_, r)| r.clone())
                .unwrap_or_default()
        };
        let i = *index.entry(tid).or_insert_with(|| {
            seen.push(ThreadSeen {
                process: w.process.clone(),
                pid: w.pid,
                tid,
                ..Default::default()
            });
            seen.len() - 1
        });
        let t = &mut seen[i];
        t.name = name;
        t.role = role;
        *t.cpus.entry(cpu).or_insert(0) += 1;
        *t.states.entry(state).or_insert(0) += 1;
        t.samples += 1;
        if let Some(a) = field("Cpus_allowed_list:") {
            t.allowed = a;
        }
        let first = *t.first.get_or_insert(reading);
        t.cpu_ns = reading.cpu_ns.saturating_sub(first.cpu_ns);
        t.wait_ns = reading.wait_ns.saturating_sub(first.wait_ns);
        t.wall_ns = reading.at.duration_since(first.at).as_nanos() as u64;
        t.voluntary_switches = reading.voluntary.saturating_sub(first.voluntary);
        t.involuntary_switches = reading.involuntary.saturating_sub(first.involuntary);
    }
}

/// Reads a /proc file of a few KiB at most.
fn read_small(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path).ok()?.take(16 << 10).read_to_string(&mut s).ok()?;
    Some(s)
}

/// `stat`'s `comm` (between the first `(` and the last `)`: a name may hold either) and the
/// fields after it.
fn split_stat(stat: &str) -> Option<(String, Vec<&str>)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    Some((name, stat.get(close + 1..)?.split_whitespace().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_names_parses() {
        let (name, f) =
            split_stat("42 (a) b (c)) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 3 37").unwrap();
        assert_eq!(name, "a) b (c)");
        assert_eq!(f[0], "R");
        assert_eq!(f[36], "3");
    }

    /// A thread pinned to a CPU is seen there, and the sampler finds this process's threads
    /// by role.
    #[test]
    fn reads_back_a_pinned_spinning_thread() {
        let pid = std::process::id();
        let s = Sampler::start(
            vec![Watch {
                pid,
                process: "test".into(),
                roles: vec![("rpx-spin".into(), "spinner".into())],
            }],
            Duration::from_millis(2),
        );
        let cpus = super::super::online_cpus();
        let want = cpus - 1;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let h = std::thread::Builder::new()
            .name("rpx-spin".into())
            .spawn(move || {
                let pinned = super::super::pin(want);
                while !flag.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                pinned
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let pinned = h.join().unwrap();
        let p = s.finish();
        let t = p.role("test", "spinner").expect("the spinning thread was seen");
        assert!(t.samples > 0, "{p:?}");
        if pinned {
            // Samples taken before the thread pinned itself may show another CPU; the last
            // ones cannot, and the affinity is the one CPU.
            assert_eq!(t.allowed, want.to_string(), "{p:?}");
            assert!(t.cpus.contains_key(&want), "{p:?}");
            assert!(p.cpu_time.get(&want).is_some_and(|c| c.busy > 0), "its CPU was busy: {p:?}");
        } else {
            eprintln!("could not pin to CPU {want}: only checked that the thread was seen");
        }
        assert!(t.states.contains_key(&'R'), "a spinning thread is seen runnable: {p:?}");
        assert!(p.role("test", "sampler").is_some(), "the sampler reports itself: {p:?}");
    }

    #[test]
    fn a_thread_that_did_not_run_is_told_asleep_from_runnable_with_its_cpu() {
        let mut t = ThreadSeen {
            samples: 20,
            wall_ns: 200_000_000,
            cpu_ns: 2_000_000,
            wait_ns: 8_000_000,
            ..Default::default()
        };
        t.cpus.insert(1, 20);
        t.states.insert('R', 19);
        t.states.insert('S', 1);
        let stat =
            "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 1 0 1 7 0 0 0 0 0 0\ncpu1 10 2 3 4 1 0 0 80 0 0\n";
        let p = Placement { cpu_time: cpu_times(stat), ..Default::default() };
        assert_eq!(p.cpu_time.len(), 2, "{p:?}");
        assert_eq!(p.cpu_time[&1], CpuTime { busy: 15, idle: 5, steal: 80 });
        let why = p.why_not_running(&t);
        assert_eq!(why, "ran 1 %, waited for a CPU 4 %, the other 95 % runnable (states seen R:19 S:1); its CPU 1 meanwhile: busy 15 %, idle 5 %, stolen by the hypervisor 80 %");
        t.states.insert('S', 15);
        assert!(p.why_not_running(&t).contains("the other 95 % asleep or blocked"), "{why}");
        // A wait the kernel counted in full though it began before the first sample.
        t.wait_ns = 900_000_000;
        assert!(p.why_not_running(&t).starts_with("ran 1 %, waited for a CPU 99 % (states"));
    }
}
