//! A topology's data plane as a background service: its run directory, state file, log and
//! control socket, `up`, `down` and the foreground `run` that serves the API.
//!
//! Files: `$ROUTEPLEX_RUN_DIR` (default `/run/routeplex`) / the topology file's stem /
//! `state.json`, `log`, `control.sock`. The directory is 0700 (0710 in the status group, when
//! there is one) and the files 0600 (the socket 0660 in the status group) whatever the
//! caller's umask; the socket checks each client's credentials (SO_PEERCRED): root and the
//! owning uid may do anything, members of the group `ROUTEPLEX_STATUS_GID` (a number) may only
//! read (`hello`, `status`, `route_list`, `neighbor_list`, `apply` with `dry_run`); anyone
//! else is refused.
//!
//! The state file records the data plane's pid with its start time, so a pid reused by another
//! process after a crash is never taken for routeplex (`up` starts afresh, `down` signals
//! nothing). The socket serves at most [`MAX_CLIENTS`] clients at once, each on its own thread,
//! with a per-line deadline and a maximum line length, so idle, slow or hostile clients cannot
//! hold up the others; when all are taken, the one idle longest makes room for a new one. A
//! reply is made into its line at once by the serving loop; its client must read it within
//! [`REPLY_DEADLINE`] (never stalling [`REPLY_STALL`]) or is dropped, and read-only requests
//! wait (`busy`) while unread lines hold [`MAX_UNREAD_REPLIES`]: clients that do not read
//! cannot make the data plane's memory grow without bound.
//!
//! `up` after a crash waits (bounded) for the dead process's last threads and taps to go
//! before it starts a new one, which needs their names.
//!
//! Every change of state is one `tracing` event with fields (target `control::daemon` and
//! `control::node`): the data plane starting and stopping, ports going up or down (memif
//! ports: their peer connecting or leaving), clients refused, and what `up` and `down` do.
//! The caller installs the subscriber (`routeplex` writes to stderr, which `up` points at
//! the service log).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::api::{parse_request, Answer, Command, Reply, Request, API_VERSION};
use crate::netns::Made;
use crate::sys;
use crate::ControlError;

/// Clients served at once; more are told so and closed.
pub const MAX_CLIENTS: usize = 64;
pub use crate::api::MAX_LINE;
/// Longest request line from a read-only client.
pub const MAX_READ_ONLY_LINE: usize = 64 << 10;
/// How long a client may take to send one line.
pub const LINE_DEADLINE: Duration = Duration::from_secs(10);
/// Bytes of replies made but not yet read by their clients past which a read-only request
/// (other than `hello` and `status`) is told `busy`: what clients that do not read can make
/// the daemon hold is this and one reply. A change is always answered.
pub const MAX_UNREAD_REPLIES: usize = 128 << 20;
/// How long a client has to read one whole reply; one that has not is disconnected (and its
/// reply freed).
pub const REPLY_DEADLINE: Duration = Duration::from_secs(30);
/// How long a client may go without its reply moving (reading none of it) before it is
/// disconnected.
pub const REPLY_STALL: Duration = Duration::from_secs(5);
/// How long a client may stay connected without sending a request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a client must have been idle to be closed to make room for a new one when
/// [`MAX_CLIENTS`] are connected.
pub const EVICT_IDLE: Duration = Duration::from_secs(1);

/// Where one topology's service keeps its files.
#[derive(Clone, Debug)]
pub struct Paths {
    pub name: String,
    pub dir: PathBuf,
    pub state: PathBuf,
    pub sock: PathBuf,
    pub log: PathBuf,
}

impl Paths {
    /// The service of topology file `file`: named after its stem, which must be a plain name
    /// (not empty, not `.` or `..`, no leading dot) so it can only ever name its own directory.
    pub fn for_file(file: &Path) -> Result<Paths, ControlError> {
        let base = std::env::var_os("ROUTEPLEX_RUN_DIR")
            .map_or_else(|| PathBuf::from("/run/routeplex"), PathBuf::from);
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let ok = !stem.is_empty()
            && !stem.starts_with('.')
            && stem.len() <= 64
            && stem.chars().all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c));
        if !ok {
            return Err(ControlError::Invalid(format!(
                "{}: a service is named after its file's stem, and {} is not a usable name \
                 (letters, digits, - _ . +, not starting with a dot, 64 at most): rename the file",
                file.display(),
                yamlpath::quote(stem)
            )));
        }
        Ok(Paths::in_dir(&base.join(stem), stem))
    }

    /// The files of a service kept in `dir`.
    pub fn in_dir(dir: &Path, name: &str) -> Paths {
        Paths {
            name: name.to_string(),
            state: dir.join("state.json"),
            sock: dir.join("control.sock"),
            log: dir.join("log"),
            dir: dir.to_path_buf(),
        }
    }

    /// Makes the run directory, private to its owner whatever the umask (0700; 0710 in the
    /// status group of `access`, whose members must reach the socket); refuses one that exists
    /// but is a symlink or belongs to someone else. Directories made above it are 0755 at most.
    pub fn make_dir(&self, access: &Access) -> Result<(), ControlError> {
        if let Some(base) = self.dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(base)
                .map_err(|e| ControlError::io(base.display(), e))?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ControlError::io(self.dir.display(), e)),
        }
        let md = std::fs::symlink_metadata(&self.dir)
            .map_err(|e| ControlError::io(self.dir.display(), e))?;
        if !md.is_dir() || md.uid() != sys::euid() {
            return Err(ControlError::Permission(format!(
                "{} is not a directory owned by uid {}: remove it and try again",
                self.dir.display(),
                sys::euid()
            )));
        }
        let mode = match access.status_gid {
            Some(g) => {
                std::os::unix::fs::chown(&self.dir, None, Some(g))
                    .map_err(|e| ControlError::io(self.dir.display(), e))?;
                0o710
            }
            None => 0o700,
        };
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| ControlError::io(self.dir.display(), e))
    }

    /// Opens (appending) the log, 0600.
    pub fn open_log(&self) -> Result<std::fs::File, ControlError> {
        private_file(&self.log, true)
    }
}

/// Creates or opens `path` for writing with mode 0600 whatever the umask.
fn private_file(path: &Path, append: bool) -> Result<std::fs::File, ControlError> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| ControlError::io(path.display(), e))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| ControlError::io(path.display(), e))?;
    Ok(f)
}

/// What `up` recorded about a running service.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub topology: PathBuf,
    pub pid: u32,
    /// The data plane's start time (see [`sys::start_time`]): with `pid`, names it for good.
    #[serde(default)]
    pub started: u64,
    pub made: Made,
}

impl State {
    /// Whether the recorded data plane is still running: the pid exists and started when
    /// recorded (a reused pid has another start time).
    pub fn running(&self) -> bool {
        self.pid != 0 && sys::start_time(self.pid).is_some_and(|t| t == self.started)
    }
}

/// The most a state file may hold.
const MAX_STATE: u64 = 1 << 20;

/// Services found running under the run directory (`$ROUTEPLEX_RUN_DIR`, default
/// `/run/routeplex`): name, the topology file it runs, its directory and pid. For saying
/// which host runs when a file's own service is not up; at most 256 are looked at.
pub fn running_services() -> Vec<(String, PathBuf, PathBuf, u32)> {
    let base = std::env::var_os("ROUTEPLEX_RUN_DIR")
        .map_or_else(|| PathBuf::from("/run/routeplex"), PathBuf::from);
    let Ok(dir) = std::fs::read_dir(&base) else { return Vec::new() };
    let mut out: Vec<_> = dir
        .take(256)
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_str()?.to_string();
            let st = read_state(&Paths::in_dir(&e.path(), &name)).ok()??;
            st.running().then(|| (name, st.topology, e.path(), st.pid))
        })
        .collect();
    out.sort();
    out
}

/// Reads the state file: `None` when there is none; a clear error, saying how to recover,
/// when it cannot be trusted.
pub fn read_state(p: &Paths) -> Result<Option<State>, ControlError> {
    let f = match std::fs::File::open(&p.state) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ControlError::io(p.state.display(), e)),
    };
    let md = f.metadata().map_err(|e| ControlError::io(p.state.display(), e))?;
    let recover = format!(
        "check that no `routeplex run` serves {} (ps -ef | grep 'routeplex run'), remove the \
         namespaces and links it made if any are left (ip netns list; ip link), then remove {} \
         and run `routeplex up` again",
        p.name,
        p.dir.display()
    );
    if md.uid() != sys::euid() || md.mode() & 0o022 != 0 {
        return Err(ControlError::State(format!(
            "{}: not owned by uid {} or writable by others, so not trusted: {recover}",
            p.state.display(),
            sys::euid()
        )));
    }
    let mut text = String::new();
    f.take(MAX_STATE)
        .read_to_string(&mut text)
        .map_err(|e| ControlError::io(p.state.display(), e))?;
    serde_json::from_str(&text).map(Some).map_err(|e| {
        ControlError::State(format!("{}: corrupt state ({e}): {recover}", p.state.display()))
    })
}

/// Writes the state file atomically, 0600.
pub fn write_state(p: &Paths, s: &State) -> Result<(), ControlError> {
    let tmp = p.state.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = private_file(&tmp, false)?;
    let text = serde_json::to_string_pretty(s).expect("state serialises");
    f.write_all(text.as_bytes()).map_err(|e| ControlError::io(tmp.display(), e))?;
    std::fs::rename(&tmp, &p.state).map_err(|e| ControlError::io(p.state.display(), e))
}

/// Who may use the socket.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// The owning uid (besides root).
    pub owner: u32,
    /// A group whose members may read status only.
    pub status_gid: Option<u32>,
}

impl Access {
    /// The caller's euid; the status group from `ROUTEPLEX_STATUS_GID`.
    pub fn from_env() -> Access {
        let status_gid =
            std::env::var("ROUTEPLEX_STATUS_GID").ok().and_then(|g| g.trim().parse().ok());
        Access { owner: sys::euid(), status_gid }
    }

    /// Whether a client with these credentials may do anything (`Some(true)`), only read
    /// (`Some(false)`), or nothing.
    fn grant(&self, c: sys::PeerCred) -> Option<bool> {
        if c.uid == 0 || c.uid == self.owner {
            Some(true)
        } else if self.status_gid.is_some_and(|g| g == c.gid) {
            Some(false)
        } else {
            None
        }
    }
}

/// A request and where its reply goes, made into its line by the serving loop.
type Job = (Request, Sender<Pending>);

/// A reply's line (with its newline) on its way to a client, counted in the bytes of replies
/// not yet read until it is dropped (sent, or its client gone).
struct Pending {
    line: Vec<u8>,
    total: Arc<AtomicUsize>,
}

impl Pending {
    fn new(r: &Reply, total: &Arc<AtomicUsize>) -> Pending {
        let mut line = serde_json::to_vec(r).expect("replies serialise");
        line.push(b'\n');
        total.fetch_add(line.len(), Ordering::AcqRel);
        Pending { line, total: total.clone() }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.total.fetch_sub(self.line.len(), Ordering::AcqRel);
    }
}

/// A connected client as the acceptor sees it: since when it has been idle (between
/// requests; `None` while it sends one or waits for or reads its reply), and whether it was
/// asked to leave to make room.
#[derive(Default)]
struct Slot {
    idle: std::sync::Mutex<Option<Instant>>,
    evict: AtomicBool,
}

impl Slot {
    fn set_idle(&self, idle: bool) {
        *self.idle.lock().unwrap_or_else(|e| e.into_inner()) = idle.then(Instant::now);
    }

    fn idle_for(&self) -> Option<Duration> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).map(|t| t.elapsed())
    }
}

type Slots = Arc<std::sync::Mutex<Vec<Arc<Slot>>>>;

/// Binds the control socket (0600, or 0660 in the status group) in a private directory.
pub fn bind(sock: &Path, access: &Access) -> Result<UnixListener, ControlError> {
    let _ = std::fs::remove_file(sock);
    let l = UnixListener::bind(sock).map_err(|e| ControlError::io(sock.display(), e))?;
    if let Some(g) = access.status_gid {
        std::os::unix::fs::chown(sock, None, Some(g))
            .map_err(|e| ControlError::io(sock.display(), e))?;
    }
    let mode = if access.status_gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(mode))
        .map_err(|e| ControlError::io(sock.display(), e))?;
    Ok(l)
}

/// Serves the API on `listener` with `handle` (run on this thread, one request at a time)
/// until `stop` is set or `handle` asks to stop (returns true after its reply).
pub fn serve(
    listener: UnixListener,
    access: Access,
    stop: &AtomicBool,
    handle: impl FnMut(Command) -> (Result<Answer, ControlError>, bool),
) -> Result<(), ControlError> {
    serve_ticking(listener, access, stop, handle, || {})
}

/// [`serve`], calling `tick` on this thread between requests and at least every 50 ms (the
/// metrics endpoint's samples are taken there).
pub fn serve_ticking(
    listener: UnixListener,
    access: Access,
    stop: &AtomicBool,
    mut handle: impl FnMut(Command) -> (Result<Answer, ControlError>, bool),
    mut tick: impl FnMut(),
) -> Result<(), ControlError> {
    listener.set_nonblocking(true).map_err(|e| ControlError::io("control socket", e))?;
    let (tx, rx) = mpsc::channel::<Job>();
    let clients = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let (clients, done) = (clients.clone(), done.clone());
        std::thread::Builder::new()
            .name("control-accept".into())
            .spawn(move || accept_loop(listener, access, tx, clients, done))
            .map_err(|e| ControlError::io("control socket thread", e))?
    };
    let unread = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        tick();
        let (req, reply) = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let held = unread.load(Ordering::Acquire);
        let small = matches!(req.cmd, Command::Hello | Command::Status);
        if held >= MAX_UNREAD_REPLIES && req.cmd.is_read_only() && !small {
            // Made, this reply would join those its clients have not read: it waits for them.
            let e = ControlError::Busy(format!(
                "replies not yet read by their clients hold {} MiB (at most {} MiB): try again",
                held >> 20,
                MAX_UNREAD_REPLIES >> 20
            ));
            warn!(
                command = req.cmd.name(),
                held,
                reason = "unread replies",
                "control request refused"
            );
            let _ = reply.send(Pending::new(&Reply::err(req.id, &e), &unread));
            continue;
        }
        let (r, stop_now) = handle(req.cmd);
        // Made into its line here, so the reply's tree is freed at once on this thread and
        // only the line (counted in `unread`) waits for its client.
        let line = Pending::new(
            &match r {
                Ok(v) => Reply::ok(req.id, v),
                Err(e) => Reply::err(req.id, &e),
            },
            &unread,
        );
        let _ = reply.send(line);
        if stop_now {
            break;
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = acceptor.join();
    Ok(())
}

/// Asks the client idle longest (at least [`EVICT_IDLE`]) to leave; whether one was asked.
fn evict_one(slots: &Slots) -> bool {
    let slots = slots.lock().unwrap_or_else(|e| e.into_inner());
    let victim = (slots.iter())
        .filter(|s| !s.evict.load(Ordering::Relaxed))
        .filter_map(|s| Some((s.idle_for()?, s)))
        .filter(|(d, _)| *d >= EVICT_IDLE)
        .max_by_key(|(d, _)| *d);
    match victim {
        Some((_, s)) => {
            s.evict.store(true, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

fn accept_loop(
    listener: UnixListener,
    access: Access,
    tx: Sender<Job>,
    clients: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
) {
    let slots = Slots::default();
    while !done.load(Ordering::Relaxed) {
        let s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let refuse = |mut s: UnixStream, e: ControlError| {
            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = writeln!(
                s,
                "{}",
                serde_json::to_string(&Reply::<Answer>::err(0, &e)).unwrap_or_default()
            );
        };
        let cred = sys::peer_cred(&s).ok();
        let (uid, pid) = cred.map_or((None, None), |c| (Some(c.uid), Some(c.pid)));
        let Some(full) = cred.and_then(|c| access.grant(c)) else {
            warn!(uid, pid, reason = "permission", "control client refused");
            refuse(s, ControlError::Permission("this socket serves root and its owner".into()));
            continue;
        };
        if clients.load(Ordering::Acquire) >= MAX_CLIENTS && evict_one(&slots) {
            // An idle client leaves within a read timeout; a new one is served in its place.
            let t0 = Instant::now();
            while clients.load(Ordering::Acquire) >= MAX_CLIENTS
                && t0.elapsed() < Duration::from_secs(1)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::AcqRel);
            warn!(uid, pid, reason = "busy", clients = MAX_CLIENTS, "control client refused");
            refuse(
                s,
                ControlError::Busy(format!("{MAX_CLIENTS} clients are connected; try again")),
            );
            continue;
        }
        let slot = Arc::new(Slot::default());
        slot.set_idle(true);
        slots.lock().unwrap_or_else(|e| e.into_inner()).push(slot.clone());
        let (tx, count, done, list) = (tx.clone(), clients.clone(), done.clone(), slots.clone());
        let spawned = std::thread::Builder::new().name("control-client".into()).spawn(move || {
            client(s, full, uid, &tx, &done, &slot);
            list.lock().unwrap_or_else(|e| e.into_inner()).retain(|x| !Arc::ptr_eq(x, &slot));
            count.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            // The thread was not made: its count and slot go with it (the closure, holding
            // the slot's other reference, was dropped).
            clients.fetch_sub(1, Ordering::AcqRel);
            slots.lock().unwrap_or_else(|e| e.into_inner()).retain(|x| Arc::strong_count(x) > 1);
            continue;
        }
    }
}

/// One client: lines in, replies out, until it hangs up, breaks a limit or the server stops.
fn client(
    s: UnixStream,
    full: bool,
    uid: Option<u32>,
    tx: &Sender<Job>,
    done: &AtomicBool,
    slot: &Slot,
) {
    let max = if full { MAX_LINE } else { MAX_READ_ONLY_LINE };
    let Ok(mut out) = s.try_clone() else { return };
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = out.set_write_timeout(Some(Duration::from_secs(5)));
    let mut r = BufReader::new(s);
    let mut line = Vec::new();
    // When the line being read began: it must be whole within LINE_DEADLINE, whether the
    // client falls silent or trickles a byte at a time (so bytes are taken as they come).
    let mut started: Option<Instant> = None;
    loop {
        if done.load(Ordering::Relaxed) {
            return;
        }
        if line.is_empty() {
            let idle = slot.idle_for().unwrap_or_default();
            let evicted = slot.evict.load(Ordering::Relaxed);
            if evicted || idle > IDLE_TIMEOUT {
                let why = if evicted {
                    format!("{MAX_CLIENTS} clients are connected and this one was idle longest")
                } else {
                    format!("idle for more than {} s", IDLE_TIMEOUT.as_secs())
                };
                info!(uid, idle_s = idle.as_secs(), reason = %why, "control client closed");
                let e = ControlError::Busy(format!("closed: {why}; connect again"));
                let _ = send(&mut out, &Reply::err(0, &e));
                return;
            }
        }
        let (complete, eof) = match r.fill_buf() {
            Ok([]) => (false, true),
            Ok(buf) => {
                let room = (max + 1).saturating_sub(line.len());
                let chunk = &buf[..buf.len().min(room)];
                let (n, complete) = match chunk.iter().position(|&b| b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                line.extend_from_slice(&chunk[..n]);
                r.consume(n);
                slot.set_idle(false);
                (complete, false)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                (false, false)
            }
            Err(_) => return,
        };
        if line.len() - usize::from(complete) > max {
            let e = ControlError::BadRequest(format!("request line longer than {max} bytes"));
            warn!(uid, reason = "bad line", error = %e, "control client refused");
            let _ = send(&mut out, &Reply::err(0, &e));
            return;
        }
        if eof && line.is_empty() {
            return;
        }
        if !complete && !eof {
            // Waiting between requests is free; taking too long over one line is not.
            if !line.is_empty()
                && started.get_or_insert_with(Instant::now).elapsed() > LINE_DEADLINE
            {
                let e = ControlError::BadRequest(format!(
                    "a request line took longer than {} s",
                    LINE_DEADLINE.as_secs()
                ));
                warn!(uid, reason = "bad line", error = %e, "control client refused");
                let _ = send(&mut out, &Reply::err(0, &e));
                return;
            }
            continue;
        }
        // A whole line, or at the end of the stream what came without a newline (the last).
        started = None;
        let reply = match parse_request(line.trim_ascii()) {
            Err(e) => {
                warn!(uid, reason = "bad line", error = %e, "control request refused");
                Reply::err(0, &e)
            }
            Ok(req) if !full && !req.cmd.is_read_only() => {
                warn!(
                    uid,
                    reason = "permission",
                    command = req.cmd.name(),
                    "control request refused"
                );
                Reply::err(
                    req.id,
                    &ControlError::Permission(format!(
                        "{} needs root or the owner",
                        req.cmd.name()
                    )),
                )
            }
            Ok(req) => {
                let (rtx, rrx) = mpsc::channel();
                if tx.send((req, rtx)).is_err() {
                    return;
                }
                let Ok(p) = rrx.recv() else { return };
                let last = !complete;
                line.clear();
                if let Err(e) = send_within(&mut out, &p.line) {
                    warn!(uid, bytes = p.line.len(), error = %e, reason = "reply not read", "control client dropped");
                    return;
                }
                drop(p);
                slot.set_idle(true);
                if last {
                    return;
                }
                continue;
            }
        };
        let last = !complete;
        line.clear();
        if send(&mut out, &reply).is_err() || last {
            return;
        }
        slot.set_idle(true);
    }
}

/// Writes a reply's `line` as the client reads it: it must take all of it within
/// [`REPLY_DEADLINE`], never going [`REPLY_STALL`] without reading some.
fn send_within(out: &mut UnixStream, line: &[u8]) -> std::io::Result<()> {
    let t0 = Instant::now();
    let mut at = 0;
    while at < line.len() {
        let left = REPLY_DEADLINE.checked_sub(t0.elapsed()).filter(|d| !d.is_zero());
        let Some(left) = left else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("{at} of {} bytes read in {} s", line.len(), REPLY_DEADLINE.as_secs()),
            ));
        };
        // A write that moved some bytes returns them only when its timeout ends, and the
        // next may wait as long again: half the stall limit each keeps the two within it.
        out.set_write_timeout(Some(left.min(REPLY_STALL / 2)))?;
        match out.write(&line[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn send(out: &mut UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(r).expect("replies serialise");
    text.push(b'\n');
    out.write_all(&text)
}

/// Sends one command to the service on `sock` and returns its reply, read as the struct of
/// that command ([`Answer::read`]), or its error.
pub fn ask(sock: &Path, cmd: Command, timeout: Duration) -> Result<Answer, ControlError> {
    let name = cmd.name();
    let line = exchange(sock, cmd, timeout)?;
    Answer::read(name, &line).map_err(|e| match e {
        ControlError::State(m) => ControlError::State(format!("{}: {m}", sock.display())),
        e => e,
    })
}

/// [`ask`], its reply read as `T`: one reply struct, or for a client that walks the tree
/// itself (the labs' reports), `serde_json::Value`.
pub fn ask_as<T: serde::de::DeserializeOwned>(
    sock: &Path,
    cmd: Command,
    timeout: Duration,
) -> Result<T, ControlError> {
    let line = exchange(sock, cmd, timeout)?;
    let reply: Reply<T> = serde_json::from_slice(&line)
        .map_err(|e| ControlError::State(format!("{}: unreadable reply ({e})", sock.display())))?;
    reply.into_result().map_err(crate::api::ErrorBody::into_error)
}

/// Sends one request line to `sock` and returns the reply line.
fn exchange(sock: &Path, cmd: Command, timeout: Duration) -> Result<Vec<u8>, ControlError> {
    let mut s = UnixStream::connect(sock)
        .map_err(|e| ControlError::io(format!("{}: is the data plane up?", sock.display()), e))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| ControlError::io(sock.display(), e))?;
    let req = Request { v: API_VERSION, id: 1, cmd };
    let mut text = serde_json::to_vec(&req).expect("requests serialise");
    text.push(b'\n');
    s.write_all(&text).map_err(|e| ControlError::io(sock.display(), e))?;
    let mut line = Vec::new();
    BufReader::new(s)
        .take(MAX_LINE as u64 * 4)
        .read_until(b'\n', &mut line)
        .map_err(|e| ControlError::io(sock.display(), e))?;
    Ok(line)
}

/// How long `up` waits for the data plane to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a client waits for an answer (longer than the runtime waits for a worker).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs as root or fails saying why.
pub fn require_root(verb: &str) -> Result<(), ControlError> {
    if sys::euid() != 0 {
        return Err(ControlError::Permission(format!(
            "routeplex {verb} needs root: it creates network namespaces and attaches to interfaces"
        )));
    }
    Ok(())
}

/// Whether `up` starts a data plane again on `file`, which one ran from before and is gone.
/// Any doubt (no state, a state `up` refuses, a running one) answers no: `up` then reads the
/// whole file, as a first start does, and reports what it finds in the order it always has.
fn restarting(file: &Path) -> bool {
    let (Ok(canonical), Ok(p)) = (file.canonicalize(), Paths::for_file(file)) else {
        return false;
    };
    matches!(read_state(&p), Ok(Some(st)) if st.topology == canonical && !st.running())
}

/// `routeplex up`: makes the topology's hosts and starts `exe run FILE --state-dir DIR` in
/// the background, returning once it answers. Prints what it did through `say`.
pub fn up(file: &Path, exe: &Path, say: &mut dyn FnMut(String)) -> Result<(), ControlError> {
    require_root("up")?;
    // A data plane that died, started again on its file: it reads the file's route tables
    // itself, and `up` needs only the hosts and ports, so a restart does not wait for a full
    // table to be parsed twice. A broken table file then fails the data plane's start, and
    // `up` reports that (with the end of its log).
    let topo = match restarting(file) {
        true => crate::Topology::load_without_tables(file)?,
        false => crate::Topology::load(file)?,
    };
    let canonical = file.canonicalize().map_err(|e| ControlError::io(file.display(), e))?;
    let p = Paths::for_file(file)?;
    p.make_dir(&Access::from_env())?;
    if let Some(st) = read_state(&p)? {
        if st.topology != canonical {
            return Err(ControlError::State(format!(
                "a service named {} is up from {}; take it down first",
                p.name,
                st.topology.display()
            )));
        }
        if st.running() {
            let text = yamlpath::read_file(file, 16 << 20)
                .map_err(|e| ControlError::io(file.display(), e))?;
            let cmd = Command::Apply {
                topology: text,
                file: canonical.display().to_string(),
                dry_run: true,
            };
            let diff = match ask(&p.sock, cmd, ASK_TIMEOUT).and_then(crate::api::Applied::try_from)
            {
                Ok(v) if !v.plan.is_empty() => format!(
                    "; the file differs from what runs:\n{}`routeplex apply {}` applies it",
                    v.text,
                    file.display()
                ),
                Ok(_) => String::new(),
                Err(e) => format!("; the file differs from what runs in a way apply refuses: {e}"),
            };
            info!(service = %p.name, pid = st.pid, "up: already up");
            say(format!(
                "routeplex up: {} is already up (pid {}); `routeplex down {}` stops it{diff}",
                p.name,
                st.pid,
                file.display()
            ));
            return Ok(());
        }
        // The previous data plane died (crash, SIGKILL), or its pid now names another
        // process. Reuse what it made if intact, else remove the remains and start afresh;
        // either way once it has let go of its taps.
        wait_released(&p, &st, &topo)?;
        let intact = st.made.namespaces.iter().all(|n| crate::netns::namespace_exists(n))
            && st.made.links.iter().all(|l| crate::netns::link_exists(l));
        if intact {
            warn!(service = %p.name, pid = st.pid, "up: the data plane is gone; starting a new one");
            say(format!(
                "routeplex up: the data plane of {} (pid {}) is gone; starting a new one",
                p.name, st.pid
            ));
            return start(file, exe, &topo, &p, st, say);
        }
        warn!(
            service = %p.name,
            pid = st.pid,
            "up: the data plane is gone and what it made is damaged; making it again"
        );
        say(format!(
            "routeplex up: {} (pid {}) is gone and what it made is damaged; making it again",
            p.name, st.pid
        ));
        leftovers(crate::netns::remove(&st.made))?;
        std::fs::remove_file(&p.state).map_err(|e| ControlError::io(p.state.display(), e))?;
    }
    let mut st = State { topology: canonical, pid: 0, started: 0, made: Made::default() };
    let made = crate::netns::make(&topo, &mut st.made);
    write_state(&p, &st)?;
    info!(
        service = %p.name,
        namespaces = st.made.namespaces.len(),
        links = st.made.links.len(),
        ok = made.is_ok(),
        "up: hosts made"
    );
    if let Err(e) = made {
        leftovers(crate::netns::remove(&st.made))?;
        remove_dir(&p)?;
        return Err(ControlError::State(e.to_string()));
    }
    start(file, exe, &topo, &p, st, say)
}

/// How long `up` waits for a dead data plane to let go of what it held.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Waits until the dead data plane of `st` has let go of what it held: every thread of it
/// gone (after SIGKILL its first thread is a zombie, so not running, while the others may
/// still be closing its descriptors, taps among them, whose names a new data plane needs),
/// and the taps `topo` makes in this namespace gone with them. Bounded by [`RELEASE_WAIT`],
/// then an error naming what is still there.
fn wait_released(p: &Paths, st: &State, topo: &crate::Topology) -> Result<(), ControlError> {
    let taps: Vec<&str> = (topo.ports.iter())
        .filter_map(|p| match &p.kind {
            crate::PortKind::Tap { ifname } => Some(ifname.as_str()),
            _ => None,
        })
        .collect();
    let t0 = Instant::now();
    loop {
        let threads = threads_left(st.pid, st.started);
        let held: Vec<&str> =
            taps.iter().copied().filter(|t| crate::netns::link_exists(t)).collect();
        if threads == 0 && held.is_empty() {
            let waited_ms = t0.elapsed().as_millis() as u64;
            if waited_ms > 0 {
                info!(service = %p.name, pid = st.pid, waited_ms, "up: the old data plane let go of its interfaces");
            }
            return Ok(());
        }
        if t0.elapsed() > RELEASE_WAIT {
            return Err(ControlError::State(format!(
                "{}: {} s after its data plane (pid {}) died, {} thread(s) of it still run and \
                these taps still exist: {}; if another process holds them, stop it or remove \
                them (ip link del NAME), then run `routeplex up` again",
                p.name,
                RELEASE_WAIT.as_secs(),
                st.pid,
                threads,
                if held.is_empty() { "none".to_string() } else { held.join(", ") }
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Threads of process `pid` (started at `started`, see [`sys::start_time`]) not yet exited:
/// 0 when it is gone, reaped or not, or the pid names another process now.
fn threads_left(pid: u32, started: u64) -> usize {
    let state_and_start = |stat: &str| -> Option<(String, u64)> {
        let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
        let state = rest.next()?.to_string();
        Some((state, rest.nth(18)?.parse().ok()?))
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    if pid == 0 || state_and_start(&stat).is_none_or(|(_, t)| t != started) {
        return 0;
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
        .filter(|s| state_and_start(s).is_some_and(|(st, _)| st != "Z" && st != "X"))
        .count()
}

fn start(
    file: &Path,
    exe: &Path,
    topo: &crate::Topology,
    p: &Paths,
    mut st: State,
    say: &mut dyn FnMut(String),
) -> Result<(), ControlError> {
    use std::os::unix::process::CommandExt;
    let _ = std::fs::remove_file(&p.sock);
    let log = p.open_log()?;
    let err_log = log.try_clone().map_err(|e| ControlError::io(p.log.display(), e))?;
    let mut child = std::process::Command::new(exe)
        .arg("run")
        .arg(file)
        .arg("--state-dir")
        .arg(&p.dir)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err_log)
        .process_group(0)
        .spawn()
        .map_err(|e| ControlError::io("starting the data plane", e))?;
    st.pid = child.id();
    st.started = sys::start_time(st.pid).unwrap_or(0);
    write_state(p, &st)?;
    info!(service = %p.name, pid = st.pid, log = %p.log.display(), "up: data plane started");
    let t0 = Instant::now();
    let fail = |st: &State, why: String| -> Result<(), ControlError> {
        warn!(service = %p.name, pid = st.pid, why = %why, "up: failed; removing what it made");
        leftovers(crate::netns::remove(&st.made))?;
        let _ = std::fs::remove_file(&p.state);
        Err(ControlError::State(why))
    };
    loop {
        if let Some(status) = child.try_wait().map_err(|e| ControlError::io("data plane", e))? {
            let tail = std::fs::read_to_string(&p.log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return fail(&st, format!("the data plane exited ({status}): {}", tail.join(" | ")));
        }
        if ask(&p.sock, Command::Hello, Duration::from_secs(2)).is_ok() {
            break;
        }
        if t0.elapsed() > READY_TIMEOUT {
            sys::kill(st.pid, libc::SIGKILL);
            let _ = child.wait();
            return fail(
                &st,
                format!(
                    "the data plane did not answer within {} s; see {}",
                    READY_TIMEOUT.as_secs(),
                    p.log.display()
                ),
            );
        }
        // Short: started from a checkpoint, the data plane answers within milliseconds, and
        // `up` returning is what a script waits for before it sends traffic.
        std::thread::sleep(Duration::from_millis(5));
    }
    let hosts: Vec<&str> = topo.hosts.iter().map(|h| h.name.as_str()).collect();
    info!(
        service = %p.name,
        pid = st.pid,
        vrs = topo.vrs.len(),
        ports = topo.ports.len(),
        "up: data plane answering"
    );
    say(format!(
        "routeplex up: {} forwarding (pid {}): {} VR(s), {} port(s), hosts {}; log {}, control {}{}",
        p.name,
        st.pid,
        topo.vrs.len(),
        declared_ports(topo),
        if hosts.is_empty() { "none".to_string() } else { hosts.join(", ") },
        p.log.display(),
        p.sock.display(),
        topo.metrics.as_ref().map_or(String::new(), |m| format!(", metrics http://{}/metrics", m.listen))
    ));
    Ok(())
}

/// The ports the file declares: not the internal links made for switch members nor the
/// control-plane mirrors (a user counts what they wrote).
fn declared_ports(topo: &crate::Topology) -> usize {
    use crate::topology::PortKind;
    topo.ports
        .iter()
        .filter(|p| !matches!(p.kind, PortKind::Link { .. } | PortKind::Mirror { .. }))
        .count()
}

/// `routeplex down`: stops the data plane (only if the recorded pid is still routeplex's) and
/// removes exactly what `up` recorded. Fails for a topology that is not up.
pub fn down(file: &Path, say: &mut dyn FnMut(String)) -> Result<(), ControlError> {
    require_root("down")?;
    let p = Paths::for_file(file)?;
    let Some(st) = read_state(&p)? else {
        return Err(ControlError::State(format!(
            "{} is not up (no state in {})",
            p.name,
            p.dir.display()
        )));
    };
    if st.running() {
        let asked = ask(&p.sock, Command::Stop, Duration::from_secs(5)).is_ok();
        info!(service = %p.name, pid = st.pid, asked, "down: stop asked");
        if !wait_gone(&st, if asked { 10_000 } else { 0 }) {
            warn!(service = %p.name, pid = st.pid, "down: sending SIGTERM");
            sys::kill(st.pid, libc::SIGTERM);
            if !wait_gone(&st, 3_000) {
                warn!(service = %p.name, pid = st.pid, "down: sending SIGKILL");
                sys::kill(st.pid, libc::SIGKILL);
                wait_gone(&st, 3_000);
            }
        }
        info!(service = %p.name, pid = st.pid, "down: data plane stopped");
    } else if st.pid != 0 && sys::start_time(st.pid).is_some() {
        warn!(service = %p.name, pid = st.pid, "down: the pid is another process now; not signalling it");
        say(format!(
            "routeplex down: pid {} is another process now (the data plane died earlier); not signalling it",
            st.pid
        ));
    }
    leftovers(crate::netns::remove(&st.made))?;
    remove_dir(&p)?;
    info!(
        service = %p.name,
        namespaces = st.made.namespaces.len(),
        links = st.made.links.len(),
        "down: hosts removed"
    );
    say(format!(
        "routeplex down: {} stopped; removed {} namespace(s) and {} link(s)",
        p.name,
        st.made.namespaces.len(),
        st.made.links.len()
    ));
    Ok(())
}

/// Removes the service's files and then its directory: exactly what it made, nothing else.
fn remove_dir(p: &Paths) -> Result<(), ControlError> {
    let journal = [
        // What the fleet agent (crates/fleet) last knew of the fleet, beside the data plane.
        p.dir.join("fleet.json"),
        p.dir.join("fleet.json.tmp"),
        p.dir.join(crate::journal::FILE),
        p.dir.join(format!(".{}.tmp", crate::journal::FILE)),
        p.dir.join(crate::checkpoint::FILE),
        p.dir.join(format!(".{}.tmp", crate::checkpoint::FILE)),
    ];
    for f in [&p.state, &p.sock, &p.log, &p.state.with_extension("tmp")].into_iter().chain(&journal)
    {
        match std::fs::remove_file(f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ControlError::io(f.display(), e)),
        }
    }
    std::fs::remove_dir(&p.dir).map_err(|e| ControlError::io(p.dir.display(), e))
}

fn wait_gone(st: &State, ms: u64) -> bool {
    let t0 = Instant::now();
    while st.running() {
        if t0.elapsed() >= Duration::from_millis(ms) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn leftovers(errors: Vec<crate::netns::NetError>) -> Result<(), ControlError> {
    if errors.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Err(ControlError::State(format!("could not remove everything: {}", msgs.join("; "))))
}

/// What a data plane started again on a state directory that an earlier run left (its
/// journal or checkpoint is there) does with its VRs' interfaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnRestart {
    /// Forward at once, as the host file and the journal say.
    #[default]
    Forward,
    /// Hold every interface that would be up down, from before it forwards, until
    /// `interface_set up: true` (see [`crate::hold`]): a host of a fleet with `policy: fence`,
    /// whose VRs may run elsewhere by now (its agent brings back those still placed here).
    Hold,
}

/// Whether `dir` holds what an earlier run of a data plane left: its journal or checkpoint.
pub fn restarted(dir: &Path) -> bool {
    [crate::journal::FILE, crate::checkpoint::FILE].iter().any(|f| dir.join(f).exists())
}

/// The topology [`run`] serves from `file`: when `state_dir` holds a checkpoint, with its
/// tables read for their sums only ([`crate::Topology::load_deferring_tables`]), so a data
/// plane started again forwards from its checkpoint without first parsing a full table;
/// `run` reads them at once after all when the checkpoint does not fit them.
pub fn load(file: &Path, state_dir: Option<&Path>) -> Result<crate::Topology, ControlError> {
    let checkpointed = state_dir.is_some_and(|d| d.join(crate::checkpoint::FILE).exists());
    Ok(match checkpointed {
        true => crate::Topology::load_deferring_tables(file)?,
        false => crate::Topology::load(file)?,
    })
}

/// Whether `topo`'s deferred tables (if any) can wait: every VR with tables forwards from a
/// checkpoint in `checkpoints` meanwhile (a replicated VR never does, see
/// [`crate::build::host_from`]).
fn tables_wait(
    topo: &crate::Topology,
    checkpoints: &std::collections::HashMap<String, Vec<u8>>,
) -> bool {
    topo.tables_deferred.is_none()
        || (0..topo.vrs.len()).filter(|&v| topo.table_sum(v).is_some()).all(|v| {
            checkpoints.contains_key(&topo.vrs[v].name)
                && topo.schedule.get(v).is_none_or(|s| s.copies() == 1)
        })
}

/// The data plane in the foreground: builds the host of `topo` (loaded from `file` by the
/// caller with [`load`], which needed it for `opts`: a full table's file is not read twice),
/// starts its workers and serves the control socket in `state_dir` (when given) until `stop`
/// is set or a `stop` command comes. What happens is logged as events (see the module's documentation).
/// Started again on a `state_dir` an earlier run left, it holds its VRs' interfaces down when
/// `on_restart` says so.
pub fn run(
    file: &Path,
    topo: crate::Topology,
    state_dir: Option<&Path>,
    burst: usize,
    opts: crate::runtime::Options,
    on_restart: OnRestart,
    stop: &AtomicBool,
) -> Result<(), ControlError> {
    if let Some(p) = topo.ports.iter().find(|p| matches!(p.kind, crate::PortKind::Mem { .. })) {
        return Err(ControlError::Invalid(format!(
            "port {} is kind mem, an in-process pair for tests and benchmarks: routeplex run serves ports with a peer outside (afxdp, afpacket, tap, memif, vhost-user)",
            p.name
        )));
    }
    let workers = opts.cpus.len();
    let text =
        yamlpath::read_file(file, 16 << 20).map_err(|e| ControlError::io(file.display(), e))?;
    // A damaged journal stops the start here, before anything forwards or answers, so `up`
    // fails with its error (naming the file, the offset and what was good) rather than
    // coming up without the changes after the damage.
    if let Some(d) = state_dir {
        crate::journal::check(d)?;
    }
    // VRs whose checkpoint fits forward with it at once; their tables are built meanwhile.
    let usable = |t: &crate::Topology| {
        state_dir.map(|d| crate::checkpoint::usable(d, &t.vrs, &t.table_sums)).unwrap_or_default()
    };
    let mut checkpoints = usable(&topo);
    let mut topo = topo;
    if !tables_wait(&topo, &checkpoints) {
        info!(file = %file.display(), "checkpoint: not every VR with tables can forward from it; reading the tables now");
        topo = crate::Topology::load(file)?;
        checkpoints = usable(&topo);
    }
    if topo.tables_deferred.is_some() {
        info!(file = %file.display(), "tables deferred: their VRs forward from the checkpoint while the table files are read");
    }
    let hold = on_restart == OnRestart::Hold && state_dir.is_some_and(restarted);
    let mut node = match hold {
        true => crate::Node::start_holding(topo, opts, burst, &checkpoints)?,
        false => crate::Node::start_from(topo, opts, burst, &checkpoints)?,
    };
    let canonical = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    node.set_source(text, canonical.display().to_string());
    let ports = node.topology().ports.len();
    let placement = node
        .runtime()
        .placement()
        .iter()
        .map(|(v, w)| format!("{v} on {w}"))
        .collect::<Vec<_>>()
        .join(", ");
    info!(
        file = %file.display(),
        pid = std::process::id(),
        workers,
        vrs = node.topology().vrs.len(),
        ports,
        placement = %placement,
        held = hold,
        "data plane started: forwarding on {ports} port(s) with {workers} worker(s)"
    );
    if hold {
        warn!("restarted on a state directory an earlier run left: every VR interface is held down until taken up (interface_set; a fleet agent does for the VRs still placed here)");
    }
    // The metrics endpoint's thread never calls the workers: this loop samples for it.
    let metrics = match &node.topology().metrics {
        Some(m) => {
            let server = crate::metrics::MetricsServer::start(m.listen)?;
            info!(address = %server.local_addr(), "metrics endpoint listening");
            Some(server)
        }
        None => None,
    };
    let node = std::cell::RefCell::new(node);
    let rec = std::cell::RefCell::new(state_dir.map(Recovery::new));
    let mut watch = PortWatch::default();
    let tick = || {
        if let Some(r) = rec.borrow_mut().as_mut() {
            r.tick(&mut node.borrow_mut());
        }
        if node.borrow().unsettled() {
            // Route changes wait for the tables built from the routes.
            return;
        }
        // Routes the VRs' control planes put in their kernels since the last tick.
        node.borrow_mut().sync_control_planes();
        let node = node.borrow();
        if let Some(m) = &metrics {
            m.refresh(&node);
        }
        watch.tick(&node);
    };
    let served = match state_dir {
        Some(dir) => {
            let access = Access::from_env();
            let listener = bind(&dir.join("control.sock"), &access)?;
            info!(socket = %dir.join("control.sock").display(), "control socket listening");
            // VRs migrated here arrive through this socket, as its other clients' changes do.
            let topo = node.borrow().topology().clone();
            let _migration = match topo.migration.as_ref().filter(|m| m.listen.is_some()) {
                Some(m) => Some(crate::migrate::Listener::start(
                    m,
                    dir.join("control.sock"),
                    dir.to_path_buf(),
                )?),
                None => None,
            };
            // Route changes are journaled so a data plane started after a crash has them. Its
            // replay waits for the tables of VRs started from a checkpoint (they forward
            // meanwhile): `up` returns as soon as the socket answers.
            if !node.borrow().unsettled() {
                if let Some(r) = rec.borrow_mut().as_mut() {
                    r.ready(&mut node.borrow_mut())?;
                }
            }
            let handle = |cmd: Command| {
                let mut node = node.borrow_mut();
                let mut rec = rec.borrow_mut();
                let rec = rec.as_mut().expect("a state directory");
                if !matches!(cmd, Command::Hello) {
                    if let Err(e) = rec.ready(&mut node) {
                        return (Err(e), node.stop_requested());
                    }
                }
                let keep = crate::journal::journaled(&cmd).then(|| cmd.clone());
                let mut r = node.execute(cmd);
                // The reply goes out after the change is in the journal: a client told `ok`
                // finds its change after a crash. One that could not be recorded is answered
                // with the error (the change runs, but would not survive a restart).
                if let (Ok(reply), Some(c)) = (&r, keep) {
                    if let Err(e) = rec.record(&c, reply, &node) {
                        r = Err(e);
                    }
                }
                (r, node.stop_requested())
            };
            let served = serve_ticking(listener, access, stop, handle, tick);
            match rec.borrow_mut().as_mut().and_then(|r| r.failed.take()) {
                Some(e) => Err(e),
                None => served,
            }
        }
        None => {
            let mut tick = tick;
            while !stop.load(Ordering::Relaxed) {
                tick();
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        }
    };
    drop(metrics);
    let node = node.into_inner();
    // The last status, whole, for whoever asks for debug; the stop event stays one short line.
    let last = node.status();
    let uptime_s = last.as_ref().ok().map(|v| v.uptime_s);
    match &last {
        Ok(v) => debug!(status = %serde_json::to_string(v).unwrap_or_default(), "last status"),
        Err(e) => debug!(error = %e, "no last status"),
    }
    let stopped = node.stop();
    if let Some(dir) = state_dir {
        let _ = std::fs::remove_file(dir.join("control.sock"));
    }
    match &stopped {
        Ok(()) => info!(pid = std::process::id(), uptime_s, "data plane stopped"),
        Err(e) => warn!(pid = std::process::id(), error = %e, "data plane stopped with an error"),
    }
    stopped?;
    served
}

/// How long after the last route change the checkpoint is written.
const CHECKPOINT_AFTER: Duration = Duration::from_millis(300);

/// The journal and checkpoint of a data plane with a run directory: the journal is replayed
/// once the tables are ready (at once, or once those of VRs started from a checkpoint are
/// built), and the checkpoint written [`CHECKPOINT_AFTER`] the last change.
struct Recovery {
    dir: PathBuf,
    journal: Option<crate::journal::Journal>,
    /// Since when the checkpoint is behind.
    dirty: Option<Instant>,
    /// Why the journal could not be replayed (the data plane stops).
    failed: Option<ControlError>,
}

impl Recovery {
    fn new(dir: &Path) -> Recovery {
        Recovery { dir: dir.to_path_buf(), journal: None, dirty: None, failed: None }
    }

    /// Settles the tables and replays the journal, once; then the settled tables take their
    /// VRs' readers over, so they forward with the journal's routes without a gap.
    fn ready(&mut self, node: &mut crate::Node) -> Result<(), ControlError> {
        if self.journal.is_some() {
            return Ok(());
        }
        if let Some(e) = &self.failed {
            return Err(ControlError::State(e.to_string()));
        }
        let done = (|| {
            node.settle()?;
            let (j, _) = crate::journal::recover(&self.dir, node)?;
            node.end_hold();
            let wrong = node.take_over()?;
            if !wrong.is_empty() {
                // Checked against the routes it claims: the checkpoint is wrong, whatever its
                // checksum says. The tables built from the routes forward from here on; the
                // file goes, and the next one is written from them.
                let file = self.dir.join(crate::checkpoint::FILE);
                for (vr, at) in &wrong {
                    warn!(file = %file.display(), vr = %vr, address = %at, "checkpoint discarded: it forwards otherwise than the routes it was built from");
                }
                if let Err(e) = std::fs::remove_file(&file) {
                    warn!(file = %file.display(), error = %e, "checkpoint: could not remove");
                }
            }
            Ok(j)
        })();
        match done {
            Ok(j) => {
                self.journal = Some(j);
                self.dirty = Some(Instant::now() - CHECKPOINT_AFTER);
                Ok(())
            }
            Err(e) => {
                self.failed = Some(ControlError::State(format!("recovery failed: {e}")));
                Err(e)
            }
        }
    }

    /// Journals `cmd`, which succeeded with `reply`; the error when it could not be.
    fn record(
        &mut self,
        cmd: &Command,
        reply: &Answer,
        node: &crate::Node,
    ) -> Result<(), ControlError> {
        let Some(j) = self.journal.as_mut() else { return Ok(()) };
        self.dirty = Some(Instant::now());
        j.record(cmd, reply, node).inspect_err(|e| {
            warn!(error = %e, "journal: a change could not be recorded");
        })
    }

    fn tick(&mut self, node: &mut crate::Node) {
        if self.journal.is_none() {
            if self.failed.is_none() && node.built() {
                if let Err(e) = self.ready(node) {
                    warn!(error = %e, "journal: replay failed");
                }
            }
            return;
        }
        if self.dirty.is_some_and(|t| t.elapsed() >= CHECKPOINT_AFTER) {
            self.dirty = None;
            let t0 = Instant::now();
            match write_checkpoint(&self.dir, node) {
                Ok(bytes) => {
                    debug!(bytes, ms = t0.elapsed().as_millis() as u64, "checkpoint written")
                }
                Err(e) => warn!(error = %e, "checkpoint: not written"),
            }
        }
    }
}

/// Writes the checkpoint of every VR's table, fingerprinted with its running configuration
/// and the journal as it is now.
fn write_checkpoint(dir: &Path, node: &crate::Node) -> Result<u64, ControlError> {
    use crate::checkpoint::{config_crc, journal_state, Fingerprint};
    let (journal_len, journal_crc) = journal_state(dir)?;
    let topo = node.topology();
    let list: Vec<_> = (topo.vrs.iter().enumerate())
        .filter_map(|(i, v)| {
            let config = config_crc(v, topo.table_sum(i));
            let fp = Fingerprint { config, journal_len, journal_crc };
            Some((v.name.as_str(), node.table(&v.name)?, fp))
        })
        .collect();
    crate::checkpoint::write(dir, &list)
}

/// How often the control loop looks at the ports' status.
const PORT_WATCH_EVERY: Duration = Duration::from_millis(250);

/// Notices ports going up or down between successive snapshots (the ports report their
/// status; nothing in the data plane logs), and logs each change as one event: `peer
/// connected` / `peer disconnected` for memif ports, `port up` / `port down` for the others.
#[derive(Default)]
struct PortWatch {
    last: std::collections::HashMap<String, ports::PortStatus>,
    next: Option<Instant>,
}

impl PortWatch {
    fn tick(&mut self, node: &crate::Node) {
        let now = Instant::now();
        if self.next.is_some_and(|t| now < t) {
            return;
        }
        self.next = Some(now + PORT_WATCH_EVERY);
        let Ok(snap) = node.runtime().snapshot() else { return };
        let mut seen = std::collections::HashMap::new();
        for row in snap.ports() {
            let was = self.last.remove(&row.name);
            if was.as_ref() != Some(&row.status) {
                let memif = node
                    .topology()
                    .ports
                    .iter()
                    .any(|p| p.name == row.name && matches!(p.kind, crate::PortKind::Memif(_)));
                log_port(&row.name, memif, was.is_none(), &row.status);
            }
            seen.insert(row.name.clone(), row.status.clone());
        }
        // Ports no longer there went with their VR (logged when it was removed).
        self.last = seen;
    }
}

fn log_port(name: &str, memif: bool, first: bool, status: &ports::PortStatus) {
    match (status, memif) {
        (ports::PortStatus::Up, false) => info!(port = name, first, "port up"),
        (ports::PortStatus::Up, true) => info!(port = name, first, "peer connected"),
        (ports::PortStatus::Down(why), false) => warn!(port = name, first, why = %why, "port down"),
        (ports::PortStatus::Down(why), true) if first => {
            info!(port = name, first, why = %why, "port down: waiting for a peer")
        }
        (ports::PortStatus::Down(why), true) => {
            warn!(port = name, first, why = %why, "peer disconnected")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_counts_the_ports_the_file_declares() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        // 5 declared ports; the switch's two VR interfaces add two internal link pairs.
        let t = crate::Topology::load(&root.join("switched.yaml")).unwrap();
        assert!(t.ports.len() > 5, "the example no longer makes internal links: {}", t.ports.len());
        assert_eq!(declared_ports(&t), 5);
        let t = crate::Topology::load(&root.join("two-hosts-one-vr.yaml")).unwrap();
        assert_eq!(declared_ports(&t), 2);
    }
}
