//! Crash recovery: the live route changes a data plane was given, kept in an append-only
//! journal in its run directory, so that a data plane started again after a crash (SIGKILL,
//! a panic) comes back with the routes it had, not only the file's.
//!
//! What is journaled, once it succeeded:
//! - every route change made through the API (`route_add`, `route_replace`, `route_delete`),
//!   as the command itself;
//! - every live change of the topology's text (`apply`, `vr_add`, `vr_remove`, `impair`), as the whole
//!   text that runs after it, with a fingerprint of the text the data plane started from;
//! - every `interface_set`, `reserve` and `move`, as the command itself;
//! - every `restore`, as a snapshot of the VR it made, taken right after it (the snapshot
//!   file it came from may be gone by the time the journal is replayed).
//!
//! A restart starts from the topology file, then replays the journal: a topology record is
//! applied (as `apply` would) when the file is still the one the journaled data plane started
//! from, and skipped with a warning when the file was edited since (the edited file wins: it
//! is what the operator gave `up`). A journaled change that no longer fits (its VR is gone,
//! its gateway no longer connected, its worker gone) is skipped and logged, never fatal. A
//! restore record replaces a VR of its name if there is one (it is what that VR had become).
//! `migrate_commit` is journaled as the command (its VR arrived through `restore`, journaled
//! whole; the commit adds the neighbors and counters it puts in and takes the interfaces up).
//! Not journaled: `migrate` (the VR leaves the host), captures and traces.
//!
//! File `journal` (0600): a header (magic `RPLXJRNL`, version u32), then records, each
//! `length u32 | CRC-32 u32 of kind and body | kind u8 | body`:
//! - kind 1: a command, as the API's JSON;
//! - kind 2: a base: a VR's journaled routes as they were at compaction, as a snapshot
//!   ([`crate::snapshot`]) holding only those routes; replaying it sets them;
//! - kind 3: a topology: JSON [`TopologyRecord`]. Compaction writes one when the running
//!   text is not the one the data plane started from, so the bases after it find their VRs;
//! - kind 4: a restored VR: its name's length (u16), its name, whether its interfaces start
//!   down (u8), then a snapshot of it.
//!
//! Compaction writes, in this order: a restore record per VR restored since the start (a
//! fresh snapshot of it), the topology, the `interface_set` commands still in force (merged
//! per interface), the bases, the last `reserve` and `move` of each VR. Those still in force
//! are those since the last change of the running text: the text holds what ran before it
//! (an `apply` set it, `vr_add` and `vr_remove` write the live state into it), so replaying
//! the compacted journal comes back to exactly the acknowledged state.
//!
//! A record is written whole with one `write` and the file is not synced per record: what a
//! crashed process wrote is in the page cache and survives it; a power cut may lose the last
//! records (compaction syncs). The daemon replies to a journaled command only after its
//! record is written ([`Journal::record`] returned): an append that fails is cut off and the
//! whole state written afresh; if that fails too the client is told `not_durable`, never `ok`. The journal is read one record at a time ([`Reader`]: at most
//! [`MAX_RECORD`] in memory, a file of at most [`MAX_FILE`], a regular file only). A torn tail
//! (the file ends inside its last record, its length in bounds, or only zeros follow the last
//! good one: what an interrupted append or a power cut leaves; not when the bytes after its
//! head are a whole record after all, with only its length damaged) ends the replay there, is logged, and is cut off
//! (the file is truncated to the last good record and synced). Anything else wrong (no header,
//! another version, a record length out of bounds, a checksum that fails with the record
//! whole) is damage: the data plane does not start, and the error names the file, the offset,
//! how many records (bytes) before it are good, and how to keep only those or start without
//! the journal; the operator decides, nothing is cut silently. The journal is bounded: once it passes [`COMPACT_AT`] bytes it is rewritten as one
//! base record per VR (written beside it, synced, renamed into place), when it is replayed at
//! that size, and when a replay skipped records. A replay otherwise leaves the file as it is
//! and appends to it: rewriting a full table's routes there would delay the `up` that waits
//! for the replay by the rewrite and its sync.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use dataplane::{RouteOp, RouteSource};
use tracing::{info, warn};

use crate::api::Command;
use crate::snapshot::{self, SnapshotError};
use crate::{ControlError, Node};

/// The journal's file name in the run directory.
pub const FILE: &str = "journal";
/// The file's first bytes.
pub const MAGIC: [u8; 8] = *b"RPLXJRNL";
/// The record format this build writes.
pub const VERSION: u32 = 1;
/// Size past which the journal is compacted.
pub const COMPACT_AT: u64 = 16 << 20;
/// The largest record (a route batch as large as the control socket takes, with room).
pub const MAX_RECORD: usize = 64 << 20;
/// The most of a journal file a replay reads.
pub const MAX_FILE: u64 = 1 << 30;

pub(crate) const KIND_COMMAND: u8 = 1;
pub(crate) const KIND_BASE: u8 = 2;
pub(crate) const KIND_TOPOLOGY: u8 = 3;
pub(crate) const KIND_RESTORE: u8 = 4;
const HEADER: usize = 12;

/// The sources whose routes the journal keeps (the file's static and table routes come from
/// the file).
pub const JOURNALED: &[RouteSource] = &[RouteSource::Api];

/// Whether a command changes what the journal keeps.
pub fn journaled(cmd: &Command) -> bool {
    is_route_change(cmd)
        || changes_text(cmd)
        || is_live_state(cmd)
        || is_restore(cmd)
        || is_commit(cmd)
}

/// Commands journaled as themselves that change the host but not its text's routes.
fn is_live_state(cmd: &Command) -> bool {
    matches!(cmd, Command::InterfaceSet { .. } | Command::Reserve { .. } | Command::Move { .. })
}

/// A restore: journaled as the VR it made (routes and all).
fn is_restore(cmd: &Command) -> bool {
    matches!(cmd, Command::Restore { .. })
}

/// The commit of a migration, whose VR came in through a restore with its interfaces down
/// (journaled then, routes and all): journaled as itself, the neighbors and counters it puts
/// in and the interfaces it takes up, without the source's deadline (a monotonic time that
/// means nothing to a replay). The source waits for the commit's answer with the VR down at
/// both ends; writing the whole VR again there took 60-420 ms with the full table.
fn is_commit(cmd: &Command) -> bool {
    matches!(cmd, Command::MigrateCommit { .. })
}

fn is_route_change(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::RouteAdd { .. } | Command::RouteReplace { .. } | Command::RouteDelete { .. }
    )
}

/// Commands that change the running topology's text ([`crate::Node::source_text`]).
fn changes_text(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::Apply { dry_run: false, .. }
            | Command::VrAdd { .. }
            | Command::VrRemove { .. }
            | Command::Impair { .. }
    )
}

/// A live topology change as journaled: the text that ran after it, and which text the data
/// plane had started from (its CRC-32 and length), so a replay can tell whether the file given
/// to `up` is still that one.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopologyRecord {
    pub from_crc: u32,
    pub from_len: u64,
    pub file: String,
    pub text: String,
}

/// The fingerprint of a topology text: CRC-32 and length.
fn fingerprint(text: &str) -> (u32, u64) {
    (crc32fast::hash(text.as_bytes()), text.len() as u64)
}

/// An open journal, appending (the file is made by the first record).
pub struct Journal {
    dir: PathBuf,
    path: PathBuf,
    file: Option<std::fs::File>,
    len: u64,
    /// The fingerprint of the text this data plane started from (`None`: started without it).
    origin: Option<(u32, u64)>,
    /// What compaction must write again besides the routes and text (see [`Live`]).
    live: Live,
    /// The journal lacks a change the host made (an append failed, and so did the rewrite
    /// that followed it): the next record is the whole state, written afresh.
    behind: bool,
}

/// The journaled changes that are neither routes nor text, as compaction writes them again:
/// VRs restored (by name, with whether they started down), `interface_set` merged per
/// interface, and the last `reserve` and `move` per VR.
#[derive(Clone, Debug, Default)]
struct Live {
    restored: Vec<(String, bool)>,
    interfaces: Vec<Command>,
    reserve: Vec<Command>,
    moves: Vec<Command>,
}

impl Live {
    /// Notes a journaled command that succeeded.
    fn note(&mut self, cmd: &Command, restored: Option<(String, bool)>) {
        match cmd {
            Command::InterfaceSet { vr, interface, mtu, up, addresses } => {
                let same = |c: &Command| matches!(c, Command::InterfaceSet { vr: v, interface: i, .. } if v == vr && i == interface);
                match self.interfaces.iter_mut().find(|c| same(c)) {
                    Some(Command::InterfaceSet { mtu: m, up: u, addresses: a, .. }) => {
                        *m = mtu.or(*m);
                        *u = up.or(*u);
                        if addresses.is_some() {
                            a.clone_from(addresses);
                        }
                    }
                    _ => self.interfaces.push(cmd.clone()),
                }
            }
            Command::Reserve { vr, .. } => {
                self.reserve.retain(|c| !matches!(c, Command::Reserve { vr: v, .. } if v == vr));
                self.reserve.push(cmd.clone());
            }
            Command::Move { vr, .. } => {
                self.moves.retain(|c| !matches!(c, Command::Move { vr: v, .. } if v == vr));
                self.moves.push(cmd.clone());
            }
            // Compaction writes the VR as it runs then: up.
            Command::MigrateCommit { vr, .. } => {
                if let Some(r) = self.restored.iter_mut().find(|(n, _)| n == vr) {
                    r.1 = false;
                }
            }
            _ => {}
        }
        if let Some((name, down)) = restored {
            self.restored.retain(|(n, _)| *n != name);
            self.restored.push((name, down));
        }
    }

    /// After a change of the running text (`apply`, `vr_add`, `vr_remove`): the text now says
    /// every VR's interfaces and reservation as they run (an `apply` set them to its text, an
    /// edit wrote what ran into it), so the commands that changed them before are spent.
    fn text_changed(&mut self) {
        self.interfaces.clear();
        self.reserve.clear();
    }

    /// Forgets what concerns VRs `node` no longer has.
    fn prune(&mut self, node: &Node) {
        let has = |vr: &str| node.table(vr).is_some();
        self.restored.retain(|(n, _)| has(n));
        for list in [&mut self.interfaces, &mut self.reserve, &mut self.moves] {
            list.retain(|c| match c {
                Command::InterfaceSet { vr, .. }
                | Command::Reserve { vr, .. }
                | Command::Move { vr, .. } => has(vr),
                _ => false,
            });
        }
    }
}

fn command(cmd: &Command) -> Vec<u8> {
    record(KIND_COMMAND, &serde_json::to_vec(cmd).expect("commands serialise"))
}

/// A restore record: VR `name` as it runs now.
fn restore_record(node: &Node, name: &str, down: bool) -> Result<Vec<u8>, ControlError> {
    let snap = crate::vr_state::take(node, name)?.encode();
    Ok(record(KIND_RESTORE, &restore_body(name, down, &snap)))
}

/// A restore record's body: `name_len u16 | name | down u8 | snapshot file bytes`.
pub(crate) fn restore_body(name: &str, down: bool, snap: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(3 + name.len() + snap.len());
    body.extend_from_slice(&(name.len() as u16).to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    body.push(u8::from(down));
    body.extend_from_slice(snap);
    body
}

/// The VR name, the down flag and the snapshot of a restore record's body.
pub(crate) fn decode_restore(
    file: &str,
    body: &[u8],
) -> Result<(String, bool, snapshot::SnapshotV1), SnapshotError> {
    let bad = |what: &'static str| SnapshotError::Payload {
        file: file.into(),
        what: snapshot::PayloadError::RestoreRecord(what),
    };
    let n = usize::from(u16::from_le_bytes(
        body.get(..2).ok_or_else(|| bad("short"))?.try_into().expect("2"),
    ));
    let name = body
        .get(2..2 + n)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(|| bad("bad VR name"))?
        .to_string();
    let down = *body.get(2 + n).ok_or_else(|| bad("short"))? != 0;
    let s = snapshot::decode(file, &body[3 + n..])?.into_current();
    Ok((name, down, s))
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Records read and applied, and those skipped (they no longer fit).
    pub applied: u64,
    pub skipped: u64,
    /// Routes set by base records.
    pub routes: u64,
    /// Bytes of a damaged or torn tail that were cut off.
    pub cut: u64,
    pub ms: u64,
}

fn err(path: &Path, e: std::io::Error) -> ControlError {
    ControlError::io(path.display(), e)
}

fn open_private(path: &Path, create_new: bool) -> Result<std::fs::File, ControlError> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW);
    if create_new {
        o.create_new(true);
    }
    o.open(path).map_err(|e| err(path, e))
}

pub(crate) fn record(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut h = crc32fast::Hasher::new();
    h.update(&[kind]);
    h.update(body);
    let mut r = Vec::with_capacity(9 + body.len());
    r.extend_from_slice(&((body.len() + 1) as u32).to_le_bytes());
    r.extend_from_slice(&h.finalize().to_le_bytes());
    r.push(kind);
    r.extend_from_slice(body);
    r
}

pub(crate) fn header() -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&VERSION.to_le_bytes());
    h
}

/// A VR's journaled routes as a base record, or `None` when it has none.
fn base(node: &Node, vr: &str) -> Result<Option<Vec<u8>>, ControlError> {
    let mut s = crate::vr_state::take(node, vr)?;
    let keep: Vec<u8> = s
        .meta
        .sources
        .iter()
        .enumerate()
        .filter(|(_, n)| JOURNALED.iter().any(|j| j.name() == n.as_str()))
        .map(|(i, _)| i as u8)
        .collect();
    s.routes.retain(|r| keep.contains(&r.source));
    if s.routes.is_empty() {
        return Ok(None);
    }
    // Only the routes matter here; counters and neighbors are the live VR's business.
    s.meta.neighbors.clear();
    s.meta.counters.clear();
    Ok(Some(record(KIND_BASE, &s.encode())))
}

/// The running text as a topology record relative to `origin` (`None` without either).
fn topology(node: &Node, origin: Option<(u32, u64)>) -> Option<Vec<u8>> {
    let (from_crc, from_len) = origin?;
    let (text, file) = node.source()?;
    let t = TopologyRecord { from_crc, from_len, file: file.into(), text: text.into() };
    Some(record(KIND_TOPOLOGY, &serde_json::to_vec(&t).expect("records serialise")))
}

impl Journal {
    /// Writes a fresh journal in `dir` holding the running topology's text (when it changed
    /// since the start, `origin`) and the journaled routes of every VR of `node` as base
    /// records (atomically: beside it, synced, renamed), and opens it for appending.
    pub fn compact(
        dir: &Path,
        node: &Node,
        origin: Option<(u32, u64)>,
    ) -> Result<Journal, ControlError> {
        Journal::compact_with(dir, node, origin, Live::default())
    }

    fn compact_with(
        dir: &Path,
        node: &Node,
        origin: Option<(u32, u64)>,
        mut live: Live,
    ) -> Result<Journal, ControlError> {
        live.prune(node);
        let path = dir.join(FILE);
        let tmp = dir.join(format!(".{FILE}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut f = open_private(&tmp, true)?;
        let mut bytes = header();
        for (name, down) in &live.restored {
            bytes.extend(restore_record(node, name, *down)?);
        }
        // Only when it differs: a journal of routes alone stays valid for an edited file.
        if node.source().map(|(t, _)| fingerprint(t)) != origin {
            bytes.extend(topology(node, origin).unwrap_or_default());
        }
        // Before the bases: an address set live may be what connects a route's gateway.
        live.interfaces.iter().for_each(|c| bytes.extend(command(c)));
        for v in &node.topology().vrs {
            if let Some(r) = base(node, &v.name)? {
                bytes.extend_from_slice(&r);
            }
        }
        live.reserve.iter().chain(&live.moves).for_each(|c| bytes.extend(command(c)));
        let done = f
            .write_all(&bytes)
            .and_then(|_| f.sync_all())
            .and_then(|_| std::fs::rename(&tmp, &path))
            .and_then(|_| std::fs::File::open(dir)?.sync_all());
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(err(&path, e));
        }
        drop(f);
        let mut j = Journal::append_to(dir, len_of(&path)?, origin)?;
        j.live = live;
        Ok(j)
    }

    /// Opens the journal file of `dir`, `len` bytes of good records, for appending.
    fn append_to(
        dir: &Path,
        len: u64,
        origin: Option<(u32, u64)>,
    ) -> Result<Journal, ControlError> {
        let path = dir.join(FILE);
        let mut file = open_private(&path, false)?;
        file.seek_end().map_err(|e| err(&path, e))?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            path,
            file: Some(file),
            len,
            origin,
            live: Live::default(),
            behind: false,
        })
    }

    /// The journal of `dir`, not made yet.
    fn unopened(dir: &Path, origin: Option<(u32, u64)>) -> Journal {
        Journal {
            dir: dir.to_path_buf(),
            path: dir.join(FILE),
            file: None,
            len: 0,
            origin,
            live: Live::default(),
            behind: false,
        }
    }

    /// Appends a command that succeeded (a route change and the other live changes as
    /// themselves, a topology change as the text that runs now, a restore as the VR it made,
    /// named in its `reply`); compacts when the journal has grown past [`COMPACT_AT`].
    ///
    /// The caller answers the client only after this returned: `Ok` means the change is in the
    /// file (written whole; see the module's notes on syncing). When the append fails (a full
    /// disk, a file size limit) what it may have left is cut off and the whole state, this
    /// change included, is written afresh as a compaction would; only when that fails too is
    /// the error returned ([`ControlError::NotDurable`]: the change runs but a restart would
    /// not bring it back), and the next record tries the rewrite first.
    pub fn record(
        &mut self,
        cmd: &Command,
        reply: &crate::api::Answer,
        node: &Node,
    ) -> Result<(), ControlError> {
        let r = match self.make_record(cmd, reply, node) {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(e) => return self.fall_back(cmd, node, e),
        };
        if self.behind {
            return self.rewrite(node).map_err(|e| self.not_durable(cmd, None, &e));
        }
        if let Err(e) = self.append(&r) {
            return self.fall_back(cmd, node, e);
        }
        if self.len > COMPACT_AT {
            let t0 = Instant::now();
            let before = self.len;
            self.rewrite(node)?;
            info!(
                before,
                after = self.len,
                ms = t0.elapsed().as_millis() as u64,
                "journal compacted"
            );
        }
        Ok(())
    }

    /// The record of `cmd` (`None`: nothing to record), noting what compaction must keep.
    fn make_record(
        &mut self,
        cmd: &Command,
        reply: &crate::api::Answer,
        node: &Node,
    ) -> Result<Option<Vec<u8>>, ControlError> {
        Ok(Some(if changes_text(cmd) {
            // Started without its text (tests): there is no file to replay it against.
            let Some(r) = topology(node, self.origin) else { return Ok(None) };
            self.live.text_changed();
            r
        } else if is_restore(cmd) {
            let (name, down) = match cmd {
                Command::Restore { down, .. } => match reply {
                    crate::api::Answer::Restored(r) => (Some(r.vr.as_str()), *down),
                    _ => (None, *down),
                },
                _ => (None, false),
            };
            let Some(name) = name else {
                return Err(ControlError::State(format!("{}: no VR named", cmd.name())));
            };
            self.live.note(cmd, Some((name.to_string(), down)));
            restore_record(node, name, down)?
        } else if is_commit(cmd) {
            self.live.note(cmd, None);
            let mut c = cmd.clone();
            if let Command::MigrateCommit { not_after_ns, .. } = &mut c {
                *not_after_ns = None;
            }
            command(&c)
        } else {
            self.live.note(cmd, None);
            command(cmd)
        }))
    }

    /// `cmd`'s record could not be made or appended (`e`): the whole state, `cmd`'s change
    /// included, is written afresh instead; `not_durable` when that fails too.
    #[cold]
    fn fall_back(
        &mut self,
        cmd: &Command,
        node: &Node,
        e: ControlError,
    ) -> Result<(), ControlError> {
        warn!(file = %self.path.display(), error = %e, "journal: a change could not be appended; writing the whole state afresh");
        self.rewrite(node).map_err(|e2| {
            self.behind = true;
            self.not_durable(cmd, Some(&e), &e2)
        })
    }

    /// Writes record `r` at the end of the file (made with its header when there is none);
    /// on failure, cuts the file back to its good records.
    fn append(&mut self, r: &[u8]) -> Result<(), ControlError> {
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let _ = std::fs::remove_file(&self.path);
                let mut f = open_private(&self.path, true)?;
                f.write_all(&header()).map_err(|e| err(&self.path, e))?;
                self.len = HEADER as u64;
                self.file.insert(f)
            }
        };
        if let Err(e) = file.write_all(r) {
            // A partial write would otherwise sit before the next records, and a replay
            // would take it for damage.
            let _ = file.set_len(self.len);
            let _ = file.seek_end();
            return Err(err(&self.path, e));
        }
        self.len += r.len() as u64;
        Ok(())
    }

    /// Replaces the journal with the whole state of `node` (what compaction writes). On
    /// failure the journal is left as it was.
    fn rewrite(&mut self, node: &Node) -> Result<(), ControlError> {
        let dir = self.dir.clone();
        *self = Journal::compact_with(&dir, node, self.origin, self.live.clone())?;
        Ok(())
    }

    /// The error for `cmd`, made but not journaled: its append failed with `append` (`None`:
    /// the journal was already behind) and the rewrite with `rewrite`.
    fn not_durable(
        &self,
        cmd: &Command,
        append: Option<&ControlError>,
        rewrite: &ControlError,
    ) -> ControlError {
        let append = append.map(|e| format!("{e}; ")).unwrap_or_default();
        ControlError::NotDurable(format!(
            "{} was made and runs, but the journal {} could not record it ({append}writing it afresh: {rewrite}): a restart would come back without it; the next change tries again",
            cmd.name(),
            self.path.display()
        ))
    }

    /// Bytes in the journal.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds nothing but its header.
    pub fn is_empty(&self) -> bool {
        self.len <= HEADER as u64
    }
}

trait SeekEnd {
    fn seek_end(&mut self) -> std::io::Result<u64>;
}

impl SeekEnd for std::fs::File {
    fn seek_end(&mut self) -> std::io::Result<u64> {
        std::io::Seek::seek(self, std::io::SeekFrom::End(0))
    }
}

fn len_of(path: &Path) -> Result<u64, ControlError> {
    std::fs::metadata(path).map(|m| m.len()).map_err(|e| err(path, e))
}

/// Opens `path` for reading if it exists: `Ok(None)` when it does not; an error naming it when
/// it is not a regular file (a FIFO would block the reader, a device never end) or is larger
/// than `max` bytes. Opened without following a symlink and without blocking, then checked.
pub(crate) fn open_regular(
    path: &Path,
    what: &str,
    max: u64,
) -> Result<Option<(std::fs::File, u64)>, ControlError> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(path, e)),
    };
    let md = f.metadata().map_err(|e| err(path, e))?;
    if !md.is_file() {
        return Err(ControlError::State(format!(
            "{what} {}: not a regular file ({:?}); routeplex only ever writes a regular file \
            there: move it away and start again",
            path.display(),
            md.file_type()
        )));
    }
    if md.len() > max {
        return Err(ControlError::State(format!(
            "{what} {}: {} bytes, more than the {max} one may hold; routeplex never writes one \
            that large: move it away and start again",
            path.display(),
            md.len()
        )));
    }
    Ok(Some((f, md.len())))
}

/// Reads a journal file one record at a time (never more than [`MAX_RECORD`] of it in
/// memory): checks the header, each record's length and checksum, and tells a torn tail (the
/// file ends inside the last record, or only zeros follow: what an interrupted append leaves)
/// from damage (anything else), which is an error naming the file, the offset and what was
/// good before it.
pub struct Reader {
    path: PathBuf,
    r: std::io::BufReader<std::fs::File>,
    size: u64,
    /// Where the next record starts: everything before is good.
    at: u64,
    /// Good records read.
    pub records: u64,
    /// Bytes of a torn tail, once found (the reader stops there).
    pub torn: u64,
    body: Vec<u8>,
}

impl Reader {
    /// The journal at `path` (`Ok(None)`: there is none, or it is empty), header checked.
    pub fn open(path: &Path) -> Result<Option<Reader>, ControlError> {
        let Some((f, size)) = open_regular(path, "journal", MAX_FILE)? else { return Ok(None) };
        if size == 0 {
            return Ok(None);
        }
        let mut r = Reader {
            path: path.to_path_buf(),
            r: std::io::BufReader::with_capacity(1 << 20, f),
            size,
            at: 0,
            records: 0,
            torn: 0,
            body: Vec::new(),
        };
        let mut h = [0u8; HEADER];
        let n = r.fill(&mut h)?;
        if n < HEADER && h[..n] == header()[..n] {
            // Made, and the process died before its header was whole.
            r.torn = size;
            return Ok(Some(r));
        }
        if n < HEADER || h[..8] != MAGIC {
            return Err(r.damage("no journal header"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(r.damage(&format!("version {version}; this build reads {VERSION}")));
        }
        r.at = HEADER as u64;
        Ok(Some(r))
    }

    /// Bytes of good records (with the header) read so far.
    pub fn good(&self) -> u64 {
        self.at
    }

    /// The next record (kind, body), `None` at the end or at a torn tail ([`Reader::torn`]).
    pub fn next_record(&mut self) -> Result<Option<(u8, &[u8])>, ControlError> {
        let left = self.size - self.at;
        if left == 0 || self.torn > 0 {
            return Ok(None);
        }
        let mut head = [0u8; 8];
        let n = self.fill(&mut head)?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4"));
        if n >= 4 && len as usize > MAX_RECORD {
            // No append ever wrote such a length, cut short or not.
            return Err(self.damage(&format!("a record length of {len} (1 to {MAX_RECORD} bytes)")));
        }
        if n < 8 || u64::from(len) + 8 > left {
            // The file ends inside this record: an append cut short, unless what follows is
            // a whole record after all (its length damaged), which a torn append never leaves.
            let crc = u32::from_le_bytes(head[4..].try_into().expect("4"));
            if n == 8 && self.whole_after_all(crc, left - 8)? {
                return Err(self.damage(&format!(
                    "a record length of {len} past the end of the file, while the bytes after it \
                     are a whole record (its checksum matches) with more after it: the length \
                     is damaged, not an append cut short"
                )));
            }
            self.torn = left;
            return Ok(None);
        }
        if len == 0 && head == [0; 8] && self.zeros(left - 8)? {
            self.torn = left;
            return Ok(None);
        }
        if len == 0 {
            return Err(self.damage(&format!("a record length of 0 (1 to {MAX_RECORD} bytes)")));
        }
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4"));
        self.body.resize(len as usize, 0);
        let mut body = std::mem::take(&mut self.body);
        let got = self.fill(&mut body);
        self.body = body;
        if got? < len as usize {
            return Err(self.damage("the file shrank while it was read"));
        }
        if crc32fast::hash(&self.body) != crc {
            return Err(self.damage(&format!("the checksum of a {len}-byte record")));
        }
        self.at += 8 + u64::from(len);
        self.records += 1;
        Ok(Some((self.body[0], &self.body[1..])))
    }

    /// Reads into `buf` until it is full or the file ends; how much was read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, ControlError> {
        let mut n = 0;
        while n < buf.len() {
            match self.r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(&self.path, e)),
            }
        }
        Ok(n)
    }

    /// Whether the `rest` bytes after a record head whose length runs past the end of the
    /// file (`rest` < that length <= [`MAX_RECORD`], so bounded) hold a whole record after
    /// all: a body (kind and bytes) of checksum `crc` that ends at the end of the file or
    /// where the head of another record of a known kind and a length in bounds starts. An
    /// interrupted append leaves a part of its record and nothing after it, so this tells a
    /// damaged length (one flipped bit) from a torn tail: without it, every record after
    /// the damaged one would be dropped as torn. A torn body matches only by chance (one in
    /// 2^32 per place a record head could start).
    fn whole_after_all(&mut self, crc: u32, rest: u64) -> Result<bool, ControlError> {
        let mut body = std::mem::take(&mut self.body);
        body.resize(rest as usize, 0);
        let got = self.fill(&mut body);
        let whole = got.map(|k| {
            let b = &body[..k];
            let head_at = |p: usize| {
                let len = b.get(p..p + 4).map(|l| u32::from_le_bytes(l.try_into().expect("4")));
                let kind = b.get(p + 8).copied();
                matches!(len, Some(l) if (1..=MAX_RECORD as u32).contains(&l))
                    && matches!(kind, Some(KIND_COMMAND..=KIND_RESTORE))
            };
            let mut h = crc32fast::Hasher::new();
            let mut done = 0;
            (1..=k).any(|p| {
                if p < k && !head_at(p) {
                    return false;
                }
                h.update(&b[done..p]);
                done = p;
                h.clone().finalize() == crc
            })
        });
        self.body = body;
        whole
    }

    /// Whether the next `n` bytes are all zero (reading them).
    fn zeros(&mut self, mut n: u64) -> Result<bool, ControlError> {
        let mut buf = [0u8; 4096];
        while n > 0 {
            let k = self.fill(&mut buf[..n.min(4096) as usize])?;
            if k == 0 || buf[..k].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            n -= k as u64;
        }
        Ok(true)
    }

    fn damage(&self, what: &str) -> ControlError {
        let path = self.path.display();
        ControlError::State(format!(
            "journal {path}: damaged at offset {at}: {what}. The {records} record(s) before it \
             ({at} bytes) are good; the {rest} byte(s) from there were not read, and the data \
             plane does not start with a journal it cannot read whole. To keep the good \
             records only: truncate -s {keep} {path}; to start without the journal's changes: \
             move it away",
            at = self.at,
            records = self.records,
            rest = self.size - self.at,
            keep = self.at.max(HEADER as u64),
        ))
    }
}

/// Reads the whole journal in `dir` without applying it: an error naming the file, the
/// offset and what was good when it is damaged (see [`Reader`]), so that a data plane
/// refuses to start before it serves anything. A torn tail is not an error.
pub fn check(dir: &Path) -> Result<(), ControlError> {
    let Some(mut r) = Reader::open(&dir.join(FILE))? else { return Ok(()) };
    while r.next_record()?.is_some() {}
    Ok(())
}

/// Replays the journal in `dir` (if there is one) into `node`: a data plane starting where
/// one crashed comes back with the routes and topology changes it had. A torn tail is cut
/// off; damage is an error (see [`Reader`]); the journal is compacted when it is large or a
/// record was skipped (see the module doc). Returns the journal, to append to, and what the
/// replay did.
pub fn recover(dir: &Path, node: &mut Node) -> Result<(Journal, Replayed), ControlError> {
    let t0 = Instant::now();
    let path = dir.join(FILE);
    let origin = node.source().map(|(t, _)| fingerprint(t));
    let mut rep = Replayed::default();
    let mut live = Live::default();
    let mut j = match Reader::open(&path)? {
        Some(mut r) => {
            let good = replay(&mut r, node, origin, &mut rep, &mut live)?;
            // The file now holds the text this start came from: later records and
            // compactions are relative to it.
            let changed = origin != node.source().map(|(t, _)| fingerprint(t));
            if good < HEADER as u64 || rep.skipped > 0 || changed || good > COMPACT_AT {
                Journal::compact_with(dir, node, origin, std::mem::take(&mut live))?
            } else {
                if rep.cut > 0 {
                    let f = open_private(&path, false)?;
                    f.set_len(good).and_then(|_| f.sync_all()).map_err(|e| err(&path, e))?;
                }
                Journal::append_to(dir, good, origin)?
            }
        }
        None => Journal::unopened(dir, origin),
    };
    if !live.restored.is_empty()
        || !live.interfaces.is_empty()
        || !live.moves.is_empty()
        || !live.reserve.is_empty()
    {
        j.live = live;
    }
    rep.ms = t0.elapsed().as_millis() as u64;
    if rep != Replayed::default() {
        info!(
            applied = rep.applied,
            skipped = rep.skipped,
            routes = rep.routes,
            cut = rep.cut,
            ms = rep.ms,
            "journal replayed"
        );
    }
    Ok((j, rep))
}

/// Applies the records `r` reads; returns how many bytes of the file are good records (0
/// when even its header was torn).
fn replay(
    r: &mut Reader,
    node: &mut Node,
    origin: Option<(u32, u64)>,
    rep: &mut Replayed,
    live: &mut Live,
) -> Result<u64, ControlError> {
    let name = r.path.display().to_string();
    loop {
        let at = r.good();
        let Some((kind, body)) = r.next_record()? else { break };
        match apply(kind, body, node, origin, &name, live) {
            Ok(routes) => {
                rep.applied += 1;
                rep.routes += routes;
            }
            Err(e) => {
                warn!(file = %name, offset = at, error = %e, "journal: record skipped");
                rep.skipped += 1;
            }
        }
    }
    if r.torn > 0 {
        warn!(file = %name, offset = r.good(), cut = r.torn, kept = r.records, "journal: torn tail cut off");
        rep.cut = r.torn;
    }
    Ok(r.good())
}

fn apply(
    kind: u8,
    body: &[u8],
    node: &mut Node,
    origin: Option<(u32, u64)>,
    file: &str,
    live: &mut Live,
) -> Result<u64, ControlError> {
    match kind {
        KIND_COMMAND => {
            let cmd: Command = serde_json::from_slice(body)
                .map_err(|e| ControlError::BadRequest(format!("command: {e}")))?;
            if !is_route_change(&cmd) && !is_live_state(&cmd) && !is_commit(&cmd) {
                return Err(ControlError::BadRequest(format!("{} is not journaled", cmd.name())));
            }
            live.note(&cmd, None);
            node.execute(cmd)?;
            Ok(0)
        }
        KIND_RESTORE => {
            let (name, down, s) = decode_restore(file, body)?;
            let routes = s.routes.len() as u64;
            // What that VR had become replaces whatever carries its name now.
            if node.table(&name).is_some() {
                node.execute(Command::VrRemove { vr: name.clone() })?;
            }
            crate::vr_state::restore(node, s, Some(name.clone()), down)?;
            live.note(&Command::Stop, Some((name, down)));
            Ok(routes)
        }
        KIND_TOPOLOGY => {
            let t: TopologyRecord = serde_json::from_slice(body)
                .map_err(|e| ControlError::BadRequest(format!("topology: {e}")))?;
            // `origin`: the file's text this start came from, before any record was applied.
            if origin != Some((t.from_crc, t.from_len)) {
                return Err(ControlError::State(format!(
                    "{} changed since the journaled data plane started from it: the file's topology is kept, not the live change made then",
                    t.file
                )));
            }
            // Applied even when it is the running text: it reverts the live changes before it.
            node.execute(Command::Apply { topology: t.text, file: t.file, dry_run: false })?;
            live.text_changed();
            Ok(0)
        }
        KIND_BASE => {
            let s = snapshot::decode(file, body)?.into_current();
            let vr = s.meta.vr.name.clone();
            if node.table(&vr).is_none() {
                return Err(ControlError::NoSuchVr(vr));
            }
            let ops: Vec<RouteOp> = s
                .route_ops()
                .map_err(|what| SnapshotError::Payload { file: file.into(), what })?
                .into_iter()
                .filter_map(|op| match op {
                    RouteOp::Add(r) if JOURNALED.contains(&r.source) => Some(RouteOp::Replace(r)),
                    _ => None,
                })
                .collect();
            match node.route_ops(&vr, &ops) {
                Ok(_) => Ok(ops.len() as u64),
                // Some no longer fit (the file changed): keep those that do, one by one.
                Err(e) => {
                    let ok = ops
                        .iter()
                        .filter(|op| node.route_ops(&vr, std::slice::from_ref(*op)).is_ok())
                        .count();
                    warn!(vr, kept = ok, dropped = ops.len() - ok, error = %e, "journal: some routes no longer fit");
                    Ok(ok as u64)
                }
            }
        }
        k => Err(ControlError::BadRequest(format!("record kind {k} is unknown"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("rpx-jrnl-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        fn journal(&self, bytes: &[u8]) -> PathBuf {
            let p = self.0.join(FILE);
            std::fs::write(&p, bytes).unwrap();
            p
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn route(n: u8) -> Vec<u8> {
        command(&Command::RouteDelete {
            vr: format!("r{n}"),
            prefixes: vec!["10.0.0.0/8".parse().unwrap()],
        })
    }

    /// Three records, and where each ends.
    fn three() -> (Vec<u8>, [usize; 3]) {
        let mut b = header();
        let mut ends = [0; 3];
        for (i, e) in ends.iter_mut().enumerate() {
            b.extend(route(i as u8));
            *e = b.len();
        }
        (b, ends)
    }

    fn read_all(path: &Path) -> Result<(Vec<u8>, u64, u64), ControlError> {
        let mut r = Reader::open(path)?.expect("a journal");
        let mut kinds = Vec::new();
        while let Some((k, _)) = r.next_record()? {
            kinds.push(k);
        }
        Ok((kinds, r.good(), r.torn))
    }

    #[test]
    fn a_torn_tail_is_cut_where_the_last_good_record_ends() {
        let d = Dir::new("torn");
        let (b, ends) = three();
        // Cut inside the last record, at every byte of it.
        for cut in ends[1] + 1..ends[2] {
            let (kinds, good, torn) = read_all(&d.journal(&b[..cut])).unwrap();
            assert_eq!((kinds.len(), good, torn), (2, ends[1] as u64, (cut - ends[1]) as u64));
        }
        // Zeros after the last good record (a power cut after the size grew).
        let mut z = b.clone();
        z.extend([0u8; 300]);
        let (kinds, good, torn) = read_all(&d.journal(&z)).unwrap();
        assert_eq!((kinds, good, torn), (vec![KIND_COMMAND; 3], ends[2] as u64, 300));
        // A header cut short: nothing to read, all of it torn.
        let (kinds, good, torn) = read_all(&d.journal(&b[..5])).unwrap();
        assert_eq!((kinds.len(), good, torn), (0, 0, 5));
        // Whole: nothing torn.
        assert_eq!(read_all(&d.journal(&b)).unwrap(), (vec![1; 3], ends[2] as u64, 0));
        assert!(Reader::open(&d.journal(b"")).unwrap().is_none(), "an empty file");
        check(&d.0).unwrap();
    }

    #[test]
    fn damage_is_an_error_naming_the_file_the_offset_and_what_was_good() {
        let d = Dir::new("damage");
        let (b, ends) = three();
        // One bad byte in the body of the second record, and in the last (whole) record:
        // neither is taken for a torn tail.
        for (at, good, records) in [(ends[0] + 10, ends[0], 1), (ends[2] - 1, ends[1], 2)] {
            let mut x = b.clone();
            x[at] ^= 0x20;
            let p = d.journal(&x);
            let e = read_all(&p).unwrap_err().to_string();
            let want = format!("journal {}: damaged at offset {good}: the checksum", p.display());
            assert!(e.starts_with(&want), "{e}");
            assert!(
                e.contains(&format!("The {records} record(s) before it ({good} bytes)")),
                "{e}"
            );
            assert!(e.contains(&format!("truncate -s {good} {}", p.display())), "{e}");
            assert!(check(&d.0).unwrap_err().to_string().starts_with(&want));
        }
        // A record length out of bounds in the middle.
        let mut x = b.clone();
        x[ends[0]..ends[0] + 4].copy_from_slice(&(MAX_RECORD as u32 + 1).to_le_bytes());
        x.extend(vec![7u8; 100]);
        let e = read_all(&d.journal(&x)).unwrap_err().to_string();
        assert!(e.contains(&format!("offset {}: a record length of", ends[0])), "{e}");
        // A length damaged to run past the end of the file, in the first record and in the
        // last: the bytes after it are whole records (or one), not a torn append.
        for (at, good) in [(HEADER + 2, HEADER), (ends[1] + 2, ends[1])] {
            let mut x = b.clone();
            x[at] ^= 0x04;
            let e = read_all(&d.journal(&x)).unwrap_err().to_string();
            assert!(e.contains(&format!("offset {good}: a record length of")), "{e}");
            assert!(e.contains("the length is damaged"), "{e}");
        }
        // A zero length followed by something other than zeros.
        let mut x = b[..ends[1]].to_vec();
        x.extend([0u8; 8]);
        x.extend(route(9));
        let e = read_all(&d.journal(&x)).unwrap_err().to_string();
        assert!(e.contains(&format!("offset {}: a record length of 0", ends[1])), "{e}");
        // No header, another version.
        let e = read_all(&d.journal(b"RPLXJRNX\x01\0\0\0")).unwrap_err().to_string();
        assert!(e.contains("offset 0: no journal header"), "{e}");
        let mut x = b.clone();
        x[8] = 9;
        let e = read_all(&d.journal(&x)).unwrap_err().to_string();
        assert!(e.contains("offset 0: version 9; this build reads 1"), "{e}");
    }

    #[test]
    fn a_fifo_or_an_oversized_file_is_refused_at_once_naming_it() {
        let d = Dir::new("kinds");
        let p = d.0.join(FILE);
        let made = std::process::Command::new("mkfifo").arg(&p).status().unwrap();
        assert!(made.success());
        // With no writer, opening it to read would block for ever: refused, not opened.
        let e = check(&d.0).unwrap_err().to_string();
        assert!(e.contains(&format!("journal {}: not a regular file", p.display())), "{e}");
        let e = crate::checkpoint::journal_state(&d.0).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(&p).unwrap();
        // Larger than any journal routeplex writes (sparse: no disk or memory used).
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(MAX_FILE + 1).unwrap();
        let e = check(&d.0).unwrap_err().to_string();
        assert!(e.contains(&format!("{} bytes, more than the {MAX_FILE}", MAX_FILE + 1)), "{e}");
        let e = crate::checkpoint::journal_state(&d.0).unwrap_err().to_string();
        assert!(e.contains("more than the"), "{e}");
    }

    #[test]
    fn journal_state_reads_in_blocks_what_a_whole_read_would_give() {
        let d = Dir::new("state");
        let mut b = header();
        while b.len() < 3 << 20 {
            b.extend(route(b.len() as u8));
        }
        d.journal(&b);
        let got = crate::checkpoint::journal_state(&d.0).unwrap();
        assert_eq!(got, (b.len() as u64, crc32fast::hash(&b)));
        std::fs::remove_file(d.0.join(FILE)).unwrap();
        assert_eq!(crate::checkpoint::journal_state(&d.0).unwrap(), (0, 0));
    }
}
