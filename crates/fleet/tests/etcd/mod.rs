//! A real 3-member etcd cluster for tests: members on free ports of one address (loopback,
//! or an underlay bridge's address that hosts in network namespaces reach), a temporary data
//! directory, every process killed and the directory removed on drop, even when the test
//! fails. Shared by fleet's etcd tests (through `common`) and routeplex's `fleet_hosts` test (included
//! there by path).
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ETCD: &str = "/usr/bin/etcd";

pub struct Cluster {
    pub dir: PathBuf,
    args: Vec<Vec<String>>,
    members: Vec<Option<Child>>,
    /// Each member's client URL, `http://ADDR:PORT`.
    pub clients: Vec<String>,
    client_addrs: Vec<SocketAddr>,
}

fn free_port(addr: IpAddr) -> u16 {
    TcpListener::bind((addr, 0)).unwrap().local_addr().unwrap().port()
}

impl Cluster {
    /// Three members on `addr`, data under a directory named after `tag` and this process,
    /// each listening once this returns. A free port can be taken (by any process's outgoing
    /// connection) between picking it and etcd binding it, and a member then exits: CI saw a
    /// cluster of two serve, then lose quorum when the test killed one member. Such a cluster
    /// is started again on other ports.
    pub fn start(addr: IpAddr, tag: &str) -> Cluster {
        for attempt in 1..=3 {
            let mut c = Cluster::spawn(addr, tag);
            match c.listening() {
                Ok(()) => return c,
                Err(why) => eprintln!("etcd cluster, try {attempt} of 3: {why}"),
            }
        }
        panic!("no etcd cluster of three members listening after 3 tries (see above)");
    }

    fn spawn(addr: IpAddr, tag: &str) -> Cluster {
        let pid = std::process::id();
        // In memory where there is a tmpfs: etcd syncs its log on every write, and on a disk
        // that builds share a sync was seen to stall renewals past a 3 s lease's fence point.
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let dir = base.join(format!("rpx-{tag}-etcd-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(addr), free_port(addr))).collect();
        let initial: Vec<String> =
            (0..3).map(|i| format!("m{i}=http://{addr}:{}", ports[i].1)).collect();
        let mut c = Cluster {
            dir: dir.clone(),
            args: Vec::new(),
            members: Vec::new(),
            clients: Vec::new(),
            client_addrs: Vec::new(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let cu = format!("http://{addr}:{client}");
            let pu = format!("http://{addr}:{peer}");
            let args = vec![
                format!("--name=m{i}"),
                format!("--data-dir={}", dir.join(format!("m{i}")).display()),
                format!("--listen-client-urls={cu}"),
                format!("--advertise-client-urls={cu}"),
                format!("--listen-peer-urls={pu}"),
                format!("--initial-advertise-peer-urls={pu}"),
                format!("--initial-cluster={}", initial.join(",")),
                "--initial-cluster-state=new".into(),
                format!("--initial-cluster-token=rpx-{tag}-{pid}"),
            ];
            c.args.push(args);
            c.clients.push(cu);
            c.client_addrs.push(SocketAddr::new(addr, *client));
            c.members.push(None);
        }
        for i in 0..3 {
            c.run(i);
        }
        c
    }

    /// Waits until every member accepts connections on its client port (see
    /// [`wait_listening`]).
    fn listening(&mut self) -> Result<(), String> {
        let Cluster { dir, members, client_addrs, .. } = self;
        let mut each: Vec<_> = (members.iter_mut().zip(client_addrs.iter()).enumerate())
            .map(|(i, (c, a))| {
                let c = c.as_mut().expect("started");
                (format!("member m{i}"), c, dir.join(format!("m{i}.log")), *a)
            })
            .collect();
        wait_listening(&mut each)
    }

    /// Starts member `i` (again: its data directory makes it rejoin).
    pub fn run(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.join(format!("m{i}.log"))).unwrap();
        let child = Command::new(ETCD)
            .args(&self.args[i])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.members[i] = Some(child);
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until each of `members` (its name, process, log file and client address) accepts
/// connections on its client port (etcd binds its peer port first), or says which one exited
/// and the last line of its log.
pub fn wait_listening(
    members: &mut [(String, &mut Child, PathBuf, SocketAddr)],
) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        for (name, child, log, _) in members.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
                return Err(format!("{name} exited ({status}): {last}"));
            }
        }
        let timeout = Duration::from_millis(200);
        if members.iter().all(|(.., a)| TcpStream::connect_timeout(a, timeout).is_ok()) {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err("not every member listens after 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            for i in 0..3 {
                let log = std::fs::read_to_string(self.dir.join(format!("m{i}.log")));
                let log = log.unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                eprintln!("etcd m{i} log tail: {tail:?}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
