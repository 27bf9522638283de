//! The control API: one typed command set for the CLI, the control socket and any other client.
//!
//! Wire format: one JSON object per line each way over the unix control socket.
//! A request is `{"v":1,"id":N,"cmd":"NAME","args":{...}}` (`args` may be left out when a
//! command takes none); its reply is `{"v":1,"id":N,"ok":{...}}` or
//! `{"v":1,"id":N,"err":{"code":"CODE","msg":"..."}}`. Unknown commands and unknown argument
//! fields are refused (`bad_request`), so a typo fails loudly. Replies only ever gain fields.
//! The version `v` is [`API_VERSION`]; a request with another major version is refused.
//! Each command's reply is a struct ([`reply`], re-exported here) that the daemon serialises
//! and clients read back ([`Answer::read`]). `docs/api.md` documents every command with an
//! example reply; a test keeps it in step with [`Command::NAMES`] and the structs.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub mod reply;
pub use reply::*;

/// The protocol version this build speaks.
pub const API_VERSION: u32 = 1;

/// Longest request line from a client allowed to change state (a batch of ~100k routes); the
/// migration protocol frames its lines with the same bound.
pub const MAX_LINE: usize = 32 << 20;

/// One request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Protocol version ([`API_VERSION`]).
    pub v: u32,
    /// Echoed in the reply.
    #[serde(default)]
    pub id: u64,
    #[serde(flatten)]
    pub cmd: Command,
}

/// Addresses one `route_lookup` may ask about.
pub const MAX_LOOKUPS: usize = 4096;

/// Every operation the control socket serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", content = "args", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// The protocol version and the commands this daemon knows.
    Hello,
    /// Workers, VRs (counters, routes by source, neighbors, interfaces, reservation), ports and
    /// memory.
    Status,
    /// Adds routes (API source); refused whole if one exists already.
    RouteAdd { vr: String, routes: Vec<Route> },
    /// Adds or replaces routes (API source).
    RouteReplace { vr: String, routes: Vec<Route> },
    /// Deletes routes (API source); refused whole if one is missing.
    RouteDelete { vr: String, prefixes: Vec<IpNet> },
    /// Lists routes: all sources, or one (`local`, `connected`, `static`, `api`, `table`).
    RouteList {
        vr: String,
        #[serde(default)]
        source: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
    },
    /// What the VR's FIB does now with packets to each address (at most
    /// [`MAX_LOOKUPS`]): `ip route get`, read from the table the VR forwards with.
    RouteLookup { vr: String, addresses: Vec<IpAddr> },
    /// The VR's neighbor (ARP/NDP) table.
    NeighborList { vr: String },
    /// Forgets learned neighbors, of one interface or all.
    NeighborFlush {
        vr: String,
        #[serde(default)]
        interface: Option<String>,
    },
    /// Sets an interface's MTU, takes it up or down, and/or replaces its addresses (the VR is
    /// rebuilt in place, as `apply` does).
    InterfaceSet {
        vr: String,
        interface: String,
        #[serde(default)]
        mtu: Option<u16>,
        #[serde(default)]
        up: Option<bool>,
        #[serde(default)]
        addresses: Option<Vec<IpNet>>,
    },
    /// Adds a VR, with any new ports it needs, to the running topology: as `apply` of the
    /// running file with these added (a new cell on new ports, or joining the cell of a port
    /// it shares).
    VrAdd {
        vr: Box<crate::model::VrDoc>,
        #[serde(default)]
        ports: Vec<crate::model::PortDoc>,
    },
    /// Removes a VR (its cell keeps running; a cell left without VRs stops and closes its
    /// ports).
    VrRemove { vr: String },
    /// Sets a VR's reservation: words as `routeplex reserve` takes them (`packets=N`,
    /// `time_us=N`, `period_us=N`, `weight=N`, or `none`).
    Reserve { vr: String, spec: Vec<String> },
    /// Moves a VR (with its cell) to another worker.
    Move { vr: String, worker: usize },
    /// Applies a topology (the whole file's text): computes the plan against the running host
    /// and, unless `dry_run`, carries it out. `file` names it in errors and sets the directory
    /// relative table paths are read from.
    Apply {
        topology: String,
        file: String,
        #[serde(default)]
        dry_run: bool,
    },
    /// Starts copying the frames seen at `point` (a port's name, or `VR:INTERFACE` for the
    /// port an interface is on): received, sent, and with `drops` those received there and
    /// dropped, with the reason. At most `count` frames (0: until stopped) go through a ring of
    /// `ring` copies (default 1024); a full ring loses copies, never packets. One capture per
    /// cell at a time. Returns the capture's `id` for `capture_read` and `capture_stop`.
    CaptureStart {
        point: String,
        #[serde(default)]
        count: u64,
        #[serde(default)]
        drops: bool,
        #[serde(default)]
        ring: Option<usize>,
    },
    /// Takes up to `max` (default 256, at most 4096) captured frames.
    CaptureRead {
        id: u64,
        #[serde(default)]
        max: Option<usize>,
    },
    /// Stops a capture.
    CaptureStop { id: u64 },
    /// Traces the next `count` (1..=10000) packets of a VR: each stage's decision.
    TraceStart { vr: String, count: u32 },
    /// Takes the trace's records so far; the trace ends once it has all its packets.
    TraceRead { vr: String },
    /// Writes VR `vr`'s snapshot (configuration, routes with sources, learned neighbors,
    /// counters) to the file `out` (a path on the daemon's host).
    Snapshot { vr: String, out: String },
    /// Adds the VR of the snapshot file `snapshot` to the running host, as `name` (default:
    /// its own name).
    Restore {
        snapshot: String,
        #[serde(default)]
        name: Option<String>,
        /// The VR's interfaces start down (a migration brings them up at its commit).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        down: bool,
    },
    /// Moves VR `vr` live to the routeplex host whose migration listener is at `to`.
    Migrate { vr: String, to: String },
    /// The last step of an incoming migration (the destination's listener sends it): the
    /// VR's learned neighbors and counters, then its interfaces up and an announcement.
    MigrateCommit {
        vr: String,
        #[serde(default)]
        neighbors: Vec<crate::snapshot::SnapNeighbor>,
        #[serde(default)]
        counters: Vec<(String, u64)>,
        /// Refused once the host's monotonic clock (`sys::monotonic_ns`) is past this: the
        /// source has abandoned the stop by then.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_after_ns: Option<u64>,
    },
    /// One round of gratuitous ARP and unsolicited neighbor advertisements for the VR's
    /// addresses, out of each of its interfaces.
    Announce { vr: String },
    /// Sets (or with `impair` left out, ends) the impairment of what leaves by port `port`:
    /// as `apply` of the running topology with that port's `impair:` changed.
    Impair {
        port: String,
        #[serde(default)]
        impair: Option<Box<crate::model::ImpairDoc>>,
    },
    /// Stops the data plane.
    Stop,
}

impl Command {
    /// Every command's name, as on the wire.
    pub const NAMES: &'static [&'static str] = &[
        "hello",
        "status",
        "route_add",
        "route_replace",
        "route_delete",
        "route_list",
        "route_lookup",
        "neighbor_list",
        "neighbor_flush",
        "interface_set",
        "vr_add",
        "vr_remove",
        "reserve",
        "move",
        "apply",
        "capture_start",
        "capture_read",
        "capture_stop",
        "trace_start",
        "trace_read",
        "snapshot",
        "restore",
        "migrate",
        "migrate_commit",
        "announce",
        "impair",
        "stop",
    ];

    /// The command's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Hello => "hello",
            Command::Status => "status",
            Command::RouteAdd { .. } => "route_add",
            Command::RouteReplace { .. } => "route_replace",
            Command::RouteDelete { .. } => "route_delete",
            Command::RouteList { .. } => "route_list",
            Command::RouteLookup { .. } => "route_lookup",
            Command::NeighborList { .. } => "neighbor_list",
            Command::NeighborFlush { .. } => "neighbor_flush",
            Command::InterfaceSet { .. } => "interface_set",
            Command::VrAdd { .. } => "vr_add",
            Command::VrRemove { .. } => "vr_remove",
            Command::Reserve { .. } => "reserve",
            Command::Move { .. } => "move",
            Command::Apply { .. } => "apply",
            Command::CaptureStart { .. } => "capture_start",
            Command::CaptureRead { .. } => "capture_read",
            Command::CaptureStop { .. } => "capture_stop",
            Command::TraceStart { .. } => "trace_start",
            Command::TraceRead { .. } => "trace_read",
            Command::Snapshot { .. } => "snapshot",
            Command::Restore { .. } => "restore",
            Command::Migrate { .. } => "migrate",
            Command::MigrateCommit { .. } => "migrate_commit",
            Command::Announce { .. } => "announce",
            Command::Impair { .. } => "impair",
            Command::Stop => "stop",
        }
    }

    /// Whether the command only reads (allowed to the status group).
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Command::Hello
                | Command::Status
                | Command::RouteList { .. }
                | Command::RouteLookup { .. }
                | Command::NeighborList { .. }
                | Command::Apply { dry_run: true, .. }
        )
    }
}

/// A route as the API takes it: `via` (with an optional `interface`), `interface` alone, or
/// `blackhole`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub prefix: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blackhole: bool,
}

/// A reply line: the daemon sends `Reply<Answer>`; a client reads `Reply<T>` with `T` the
/// struct of the command it sent ([`Answer::read`] picks it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply<T = Answer> {
    pub v: u32,
    pub id: u64,
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub ok: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<ErrorBody>,
}

/// What went wrong, for a client: a stable code and a message for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub msg: String,
}

fn none<T>() -> Option<T> {
    None
}

impl ErrorBody {
    /// The daemon's refusal, as a client reports it.
    pub fn into_error(self) -> crate::ControlError {
        crate::ControlError::Invalid(format!("{} ({})", self.msg, self.code))
    }
}

impl<T> Reply<T> {
    pub fn ok(id: u64, v: T) -> Reply<T> {
        Reply { v: API_VERSION, id, ok: Some(v), err: None }
    }

    pub fn err(id: u64, e: &crate::ControlError) -> Reply<T> {
        Reply {
            v: API_VERSION,
            id,
            ok: None,
            err: Some(ErrorBody { code: e.code().into(), msg: e.to_string() }),
        }
    }

    /// The reply as a result (a reply with neither is refused: every command answers
    /// something).
    pub fn into_result(self) -> Result<T, ErrorBody> {
        match (self.ok, self.err) {
            (_, Some(e)) => Err(e),
            (Some(v), None) => Ok(v),
            (None, None) => Err(ErrorBody {
                code: "bad_reply".into(),
                msg: "a reply with neither ok nor err".into(),
            }),
        }
    }
}

/// Parses one request line; the error names what was wrong.
pub fn parse_request(line: &[u8]) -> Result<Request, crate::ControlError> {
    let r: Request = serde_json::from_slice(line)
        .map_err(|e| crate::ControlError::BadRequest(format!("{e}")))?;
    if r.v != API_VERSION {
        return Err(crate::ControlError::BadRequest(format!(
            "protocol version {} is not spoken here (this daemon speaks {API_VERSION})",
            r.v
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_typos_fail() {
        let r = Request {
            v: 1,
            id: 7,
            cmd: Command::RouteAdd {
                vr: "a".into(),
                routes: vec![Route {
                    prefix: "10.9.0.0/16".parse().unwrap(),
                    via: Some("10.0.1.2".parse().unwrap()),
                    interface: None,
                    blackhole: false,
                }],
            },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line,
            r#"{"v":1,"id":7,"cmd":"route_add","args":{"vr":"a","routes":[{"prefix":"10.9.0.0/16","via":"10.0.1.2"}]}}"#
        );
        assert_eq!(parse_request(line.as_bytes()).unwrap(), r);
        assert_eq!(parse_request(br#"{"v":1,"cmd":"status"}"#).unwrap().cmd, Command::Status);
        let e = parse_request(br#"{"v":1,"cmd":"route_add","args":{"vr":"a","rutes":[]}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rutes"), "{e}");
        let e = parse_request(br#"{"v":1,"cmd":"dance"}"#).unwrap_err().to_string();
        assert!(e.contains("dance"), "{e}");
        let e = parse_request(br#"{"v":2,"cmd":"status"}"#).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
    }

    #[test]
    fn names_match_the_enum() {
        let all = [
            Command::Hello,
            Command::Status,
            Command::RouteAdd { vr: String::new(), routes: vec![] },
            Command::RouteReplace { vr: String::new(), routes: vec![] },
            Command::RouteDelete { vr: String::new(), prefixes: vec![] },
            Command::RouteList { vr: String::new(), source: None, limit: None },
            Command::RouteLookup { vr: String::new(), addresses: vec![] },
            Command::NeighborList { vr: String::new() },
            Command::NeighborFlush { vr: String::new(), interface: None },
            Command::InterfaceSet {
                vr: String::new(),
                interface: String::new(),
                mtu: None,
                up: None,
                addresses: None,
            },
            Command::VrAdd { vr: Box::new(crate::model::VrDoc::new("x")), ports: vec![] },
            Command::VrRemove { vr: String::new() },
            Command::Reserve { vr: String::new(), spec: vec![] },
            Command::Move { vr: String::new(), worker: 0 },
            Command::Apply { topology: String::new(), file: String::new(), dry_run: false },
            Command::CaptureStart { point: String::new(), count: 0, drops: false, ring: None },
            Command::CaptureRead { id: 0, max: None },
            Command::CaptureStop { id: 0 },
            Command::TraceStart { vr: String::new(), count: 1 },
            Command::TraceRead { vr: String::new() },
            Command::Snapshot { vr: String::new(), out: String::new() },
            Command::Restore { snapshot: String::new(), name: None, down: false },
            Command::Migrate { vr: String::new(), to: String::new() },
            Command::MigrateCommit {
                vr: String::new(),
                neighbors: vec![],
                counters: vec![],
                not_after_ns: None,
            },
            Command::Announce { vr: String::new() },
            Command::Impair { port: String::new(), impair: None },
            Command::Stop,
        ];
        let names: Vec<&str> = all.iter().map(Command::name).collect();
        assert_eq!(names, Command::NAMES);
        for c in &all {
            let j = serde_json::to_value(c).unwrap();
            assert_eq!(j["cmd"], c.name());
        }
    }
}
