//! Checkpoints of the compiled route tables: what lets `up` after a crash forward at once
//! with a full table, instead of after the route maps, the RIB and the compile are made again.
//!
//! File `checkpoint` (0600) in the run directory, written by the data plane a moment after
//! its routes last changed (and once after it started): magic `RPLXCKPT`, version u32, body
//! length u64, CRC-32 u32 of the body, then the body: the VR count u32, and per VR its name
//! (u16 length, bytes), the fingerprint of what its table was built from, and the table's
//! checkpoint (u32 length, [`RouteTable::checkpoint`]). The fingerprint is the CRC-32 of the
//! VR's configuration (interfaces, neighbors, limits, every route of the file but its tables',
//! which count by the sum of their files: [`config_crc`]) and the length and CRC-32 of the
//! journal as it was then: routes changed through the API are in the journal, so a table
//! checkpointed after them is only used with that same journal.
//!
//! At start, a VR whose fingerprint matches is built as a stand-in from its checkpoint (its
//! compiled tables published to the VR as they were), and its real table is built from the
//! routes in the background (its tables' routes read there too, when the data plane deferred
//! them: [`crate::daemon::load`]); the journal is replayed into that one, which then takes the
//! stand-in's readers over (see [`crate::Node::settle`]). A file that is damaged, of another
//! version or too large is refused whole, and a VR whose fingerprint differs is built from
//! its routes as without a checkpoint; both are logged, naming the file and what was wrong.
//! One that passes all that is still checked against the routes it claims: when the table
//! built from them takes over, the two must forward alike at every boundary of its RIB
//! ([`dataplane::routes::RouteTable::disagreement`]); one that does not is discarded (logged
//! naming the file, removed, and written again from the routes). Files are read only when
//! regular and within [`MAX_FILE`]; the journal's CRC is taken in blocks, never whole.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use dataplane::config::{RouteTarget, VrConfig};
use dataplane::routes::RouteTable;
use ipnet::IpNet;
use tracing::{info, warn};

use crate::ControlError;

/// The file's name in the run directory.
pub const FILE: &str = "checkpoint";
/// The file's first bytes.
pub const MAGIC: [u8; 8] = *b"RPLXCKPT";
/// The format this build writes and reads.
pub const VERSION: u32 = 2;
/// The largest checkpoint read (a full IPv4 and IPv6 table compile to a few MiB per VR).
pub const MAX_FILE: u64 = 1 << 30;
const HEADER: usize = 8 + 4 + 8 + 4;

/// What a VR's table was built from: its configuration's CRC-32, and the journal's length
/// and CRC-32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub config: u32,
    pub journal_len: u64,
    pub journal_crc: u32,
}

/// The CRC-32 of a VR's configuration: everything its table is built from. Its tables'
/// routes count by `table_sum` (the sum of the files they were read from, see
/// [`crate::Topology::table_sums`]), not one by one, so a data plane started again tells
/// whether its checkpoint fits without parsing the files ([`crate::Topology::load_deferring_tables`]).
pub fn config_crc(cfg: &VrConfig, table_sum: Option<u32>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(format!("{:?}{:?}{:?}", cfg.interfaces, cfg.neighbors, cfg.limits).as_bytes());
    h.update(&table_sum.map_or([0; 5], |s| {
        let b = s.to_le_bytes();
        [1, b[0], b[1], b[2], b[3]]
    }));
    // By hand rather than by Debug: a full table is half a million routes.
    let mut buf = Vec::with_capacity(64 << 10);
    for r in cfg.routes.iter().filter(|r| r.source != dataplane::RouteSource::Table) {
        match r.prefix {
            IpNet::V4(p) => buf.extend_from_slice(&p.addr().octets()),
            IpNet::V6(p) => buf.extend_from_slice(&p.addr().octets()),
        }
        buf.extend_from_slice(&[r.prefix.prefix_len(), r.source as u8]);
        match r.target {
            RouteTarget::Via { gateway, iface } => {
                match gateway {
                    std::net::IpAddr::V4(g) => buf.extend_from_slice(&g.octets()),
                    std::net::IpAddr::V6(g) => buf.extend_from_slice(&g.octets()),
                }
                buf.extend_from_slice(&iface.map_or(u32::MAX, u32::from).to_le_bytes());
            }
            RouteTarget::Iface(i) => buf.extend_from_slice(&[0xfe, i as u8, (i >> 8) as u8]),
            RouteTarget::Blackhole => buf.push(0xff),
        }
        if buf.len() > 60 << 10 {
            h.update(&buf);
            buf.clear();
        }
    }
    h.update(&buf);
    h.finalize()
}

/// The journal's length and CRC-32 (0, 0 when there is none), read in blocks: a journal is
/// never held whole (it may be as large as [`crate::journal::MAX_FILE`]).
pub fn journal_state(dir: &Path) -> Result<(u64, u32), ControlError> {
    let path = dir.join(crate::journal::FILE);
    let Some((mut f, _)) =
        crate::journal::open_regular(&path, "journal", crate::journal::MAX_FILE)?
    else {
        return Ok((0, 0));
    };
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ControlError::io(path.display(), e)),
        }
    }
    Ok((len, h.finalize()))
}

/// Writes the checkpoint of `tables` (VR name, its table, the fingerprint of what it was
/// built from) to `dir` atomically (beside it, then renamed). Not synced: it only saves time,
/// and one damaged by a power cut is refused by its checksum.
pub fn write(dir: &Path, tables: &[(&str, &RouteTable, Fingerprint)]) -> Result<u64, ControlError> {
    let tables: Vec<_> = tables.iter().map(|(name, t, fp)| (*name, *fp, t.checkpoint())).collect();
    let bytes = encode(tables.iter().map(|(name, fp, c)| (*name, *fp, c.as_slice())));
    let path = dir.join(FILE);
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let done = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        return Err(ControlError::io(path.display(), e));
    }
    Ok(bytes.len() as u64)
}

/// The file's bytes for entries (VR name, fingerprint, the table's checkpoint bytes).
pub(crate) fn encode<'a>(
    entries: impl ExactSizeIterator<Item = (&'a str, Fingerprint, &'a [u8])>,
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (name, fp, table) in entries {
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&fp.config.to_le_bytes());
        body.extend_from_slice(&fp.journal_len.to_le_bytes());
        body.extend_from_slice(&fp.journal_crc.to_le_bytes());
        body.extend_from_slice(&(table.len() as u32).to_le_bytes());
        body.extend_from_slice(table);
    }
    framed(&body)
}

/// `body` behind the header: magic, version, its length and CRC-32.
pub(crate) fn framed(body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// One VR's entry of a checkpoint file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub fingerprint: Fingerprint,
    pub table: Vec<u8>,
}

/// The entries of the checkpoint in `dir`: `Ok(None)` when there is none, an error naming the
/// file and what was wrong when it cannot be used at all.
pub fn read(dir: &Path) -> Result<Option<HashMap<String, Entry>>, ControlError> {
    let path = dir.join(FILE);
    let Some((f, _)) = crate::journal::open_regular(&path, "checkpoint", MAX_FILE)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ControlError::io(path.display(), e))?;
    parse(&bytes)
        .map(Some)
        .map_err(|what| ControlError::State(format!("checkpoint {}: {what}", path.display())))
}

/// Why a checkpoint file was refused (the file is then not used at all).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointFault {
    #[error("larger than {MAX_FILE} bytes")]
    TooLarge,
    #[error("not a routeplex checkpoint (no header)")]
    NoHeader,
    #[error("version {0}, this build reads {VERSION}")]
    Version(u32),
    #[error("{body} bytes of body where the header says {header} (cut short?)")]
    Length { body: usize, header: u64 },
    #[error("checksum mismatch (damaged)")]
    Checksum,
    #[error("an entry ends early")]
    EntryEndsEarly,
    #[error("a VR name is not UTF-8")]
    NameNotUtf8,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<HashMap<String, Entry>, CheckpointFault> {
    if bytes.len() as u64 > MAX_FILE {
        return Err(CheckpointFault::TooLarge);
    }
    if bytes.len() < HEADER || bytes[..8] != MAGIC {
        return Err(CheckpointFault::NoHeader);
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4"));
    if version != VERSION {
        return Err(CheckpointFault::Version(version));
    }
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8"));
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4"));
    let body = &bytes[HEADER..];
    if body.len() as u64 != len {
        return Err(CheckpointFault::Length { body: body.len(), header: len });
    }
    if crc32fast::hash(body) != crc {
        return Err(CheckpointFault::Checksum);
    }
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], CheckpointFault> {
        let s = body.get(at..at + n).ok_or(CheckpointFault::EntryEndsEarly)?;
        at += n;
        Ok(s)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().expect("4"));
    let mut out = HashMap::new();
    for _ in 0..count {
        let n = u16::from_le_bytes(take(2)?.try_into().expect("2")) as usize;
        let name =
            String::from_utf8(take(n)?.to_vec()).map_err(|_| CheckpointFault::NameNotUtf8)?;
        let config = u32::from_le_bytes(take(4)?.try_into().expect("4"));
        let journal_len = u64::from_le_bytes(take(8)?.try_into().expect("8"));
        let journal_crc = u32::from_le_bytes(take(4)?.try_into().expect("4"));
        let n = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        let table = take(n)?.to_vec();
        let fingerprint = Fingerprint { config, journal_len, journal_crc };
        out.insert(name, Entry { fingerprint, table });
    }
    Ok(out)
}

/// The checkpointed tables of `vrs` that fit: those whose fingerprint matches what they are
/// built from now (their configuration, the journal in `dir`). What does not fit, and a file
/// that cannot be used, is logged; those VRs are built from their routes.
pub fn usable(
    dir: &Path,
    vrs: &[VrConfig],
    table_sums: &[Option<u32>],
) -> HashMap<String, Vec<u8>> {
    let t0 = std::time::Instant::now();
    let mut entries = match read(dir) {
        Ok(Some(e)) => e,
        Ok(None) => return HashMap::new(),
        Err(e) => {
            warn!(error = %e, "checkpoint refused; building the route tables from the routes");
            return HashMap::new();
        }
    };
    let journal = match journal_state(dir) {
        Ok(j) => j,
        Err(e) => {
            warn!(error = %e, "checkpoint: the journal cannot be read; not used");
            return HashMap::new();
        }
    };
    let mut out = HashMap::new();
    for (v, cfg) in vrs.iter().enumerate() {
        let Some(e) = entries.remove(&cfg.name) else { continue };
        let sum = table_sums.get(v).copied().flatten();
        let config = config_crc(cfg, sum);
        let now = Fingerprint { config, journal_len: journal.0, journal_crc: journal.1 };
        if now == e.fingerprint {
            out.insert(cfg.name.clone(), e.table);
        } else {
            let what = if now.config != e.fingerprint.config { "configuration" } else { "journal" };
            warn!(
                file = %dir.join(FILE).display(),
                vr = %cfg.name,
                "checkpoint: stale (its {what} changed since); building the VR's table from its routes"
            );
        }
    }
    info!(vrs = out.len(), ms = t0.elapsed().as_millis() as u64, "checkpoint read");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tables: &[(&str, &[u8], u32)]) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!("rpx-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The body as write lays it out, with given table bytes.
        let mut body = Vec::new();
        body.extend_from_slice(&(tables.len() as u32).to_le_bytes());
        for (name, t, c) in tables {
            body.extend_from_slice(&(name.len() as u16).to_le_bytes());
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(&c.to_le_bytes());
            body.extend_from_slice(&7u64.to_le_bytes());
            body.extend_from_slice(&9u32.to_le_bytes());
            body.extend_from_slice(&(t.len() as u32).to_le_bytes());
            body.extend_from_slice(t);
        }
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(body.len() as u64).to_le_bytes());
        b.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        b.extend_from_slice(&body);
        let _ = std::fs::remove_dir_all(&dir);
        b
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused_saying_what() {
        let b = file(&[("r", b"abc", 5), ("s", b"", 6)]);
        let e = parse(&b).unwrap();
        assert_eq!(e["r"].table, b"abc");
        assert_eq!(e["r"].fingerprint, Fingerprint { config: 5, journal_len: 7, journal_crc: 9 });
        assert_eq!(e["s"].table, b"");
        let mut d = b.clone();
        *d.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&d).unwrap_err(), CheckpointFault::Checksum);
        assert!(parse(&b[..b.len() - 1]).unwrap_err().to_string().contains("cut short"));
        assert!(parse(b"RPLXJRNL\x01\0\0\0")
            .unwrap_err()
            .to_string()
            .contains("not a routeplex checkpoint"));
        let mut d = b.clone();
        // Version 1 summed every route of a VR's tables one by one, not their files.
        d[8] = 1;
        assert!(parse(&d).unwrap_err().to_string().contains("version 1, this build reads 2"));
    }

    #[test]
    fn a_file_in_a_run_directory_is_private_and_read_back() {
        let dir = std::env::temp_dir().join(format!("rpx-ckpt-rw-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = VrConfig {
            name: "r".into(),
            interfaces: vec![],
            routes: vec![],
            neighbors: vec![],
            limits: Default::default(),
        };
        let t = RouteTable::new(&cfg).unwrap();
        let fp = Fingerprint { config: config_crc(&cfg, None), journal_len: 0, journal_crc: 0 };
        write(&dir, &[("r", &t, fp)]).unwrap();
        let md = std::fs::metadata(dir.join(FILE)).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777, 0o600);
        assert_eq!(usable(&dir, std::slice::from_ref(&cfg), &[])["r"], t.checkpoint());
        // Another configuration: stale, not used.
        let mut other = cfg.clone();
        other.routes.push(dataplane::routes::route(
            "10.0.0.0/8".parse().unwrap(),
            RouteTarget::Blackhole,
            dataplane::RouteSource::Static,
        ));
        assert!(usable(&dir, &[other], &[]).is_empty());
        // The journal changed since: stale too.
        std::fs::write(dir.join(crate::journal::FILE), b"x").unwrap();
        assert!(usable(&dir, &[cfg], &[]).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
