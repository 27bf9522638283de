//! Route sync: follows one network namespace's kernel routing tables over netlink.
//!
//! Contract: [`RouteSync::open`] makes its sockets inside the namespace (on a short-lived thread,
//! so the caller never changes namespace), subscribes to link, IPv4-address, IPv4/IPv6 route
//! and nexthop-object notifications, and only then dumps links and routes, so no change falls between the dump and
//! the stream. [`RouteSync::poll`] never blocks on the event socket: the first call returns
//! [`SyncEvent::Replace`] with the dumped table, later calls the changes as [`SyncEvent::Add`]
//! (set the route for a prefix and table) and [`SyncEvent::Del`]. The published state is, per
//! (prefix, table), the kernel's preferred route: the lowest metric; for IPv6, routes of equal
//! metric are merged into one next-hop set, which is how the kernel spreads over siblings.
//!
//! What the kernel changes without a notification is replayed from the link and address
//! messages, at their place in the stream: IPv4 flushes the routes of a link that goes down or
//! away, multipath hops on a down link turn dead and come back on up, and routes preferring a
//! removed IPv4 source address go. (A fresh dump on such a message would race the kernel: it
//! sends the link message before it flushes.) A nexthop object that routes use changing or
//! going also changes routes silently, but its message comes after the change, so there the
//! table is dumped again and the difference published. When the event socket overruns (ENOBUFS: the kernel
//! dropped notifications), the queue is discarded, everything is dumped again, and the whole
//! table is returned as one `Replace`: reconcile rather than trust a stream with holes.
//! NETLINK_NO_ENOBUFS is never set, because it would hide exactly that loss.
//!
//! Routes of other kinds (local, broadcast, multicast, anycast, throw, nat), IPv4 routes with a
//! TOS, IPv6 source-specific routes, cached clones and routes that name a nexthop object
//! without the kernel's compat expansion of its hops (on by default) are not published (a VR's FIB has nothing that matches
//! them). Every length a netlink message carries is checked before use; a malformed message is
//! an error naming what was wrong, and the next poll re-dumps so nothing stays lost.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, RawFd};

use ipnet::IpNet;
use netlink_packet_core::{NlaBuffer, NlasIterator, Parseable};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteMessage, RouteNextHopFlags, RouteType, RouteVia,
};
use netlink_packet_route::AddressFamily;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};

const NLMSG_HDRLEN: usize = 16;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_DELADDR: u16 = 21;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_APPEND: u16 = 0x800;
const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV4_ROUTE: u32 = 7;
const RTNLGRP_IPV6_ROUTE: u32 = 11;
const RTNLGRP_NEXTHOP: u32 = 32;
const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const NHMSG_LEN: usize = 8;
const NHA_ID: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFF_UP: u32 = 0x1;
const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
const IFA_LOCAL: u16 = 2;
const RTMSG_LEN: usize = 12;

/// Largest datagram the kernel sends on a route socket (dumps fill up to 32 KiB).
const RECV_BUF: usize = 64 * 1024;
/// Datagrams read per `poll`, so one call stays bounded while a daemon installs a full table.
const DATAGRAMS_PER_POLL: usize = 4096;
/// A dump interrupted this many times in a row (NLM_F_DUMP_INTR) is an error, not a loop.
const DUMP_TRIES: usize = 16;
/// Blocking reads on the dump socket give up after this long (the kernel never stalls a dump;
/// this only turns a wedged kernel into an error instead of a hang).
const DUMP_TIMEOUT_S: libc::time_t = 30;

/// Why route sync failed.
#[derive(Debug, thiserror::Error)]
pub enum RtSyncError {
    #[error("route sync: bad namespace name {0:?} (want a name under /run/netns)")]
    BadNamespace(String),
    #[error("route sync in namespace {netns}: {context}: {source}")]
    Io { netns: String, context: String, source: io::Error },
    #[error("route sync in namespace {netns}: malformed netlink message (type {msg_type}, offset {offset}): {what}")]
    Malformed { netns: String, msg_type: u16, offset: usize, what: BadMessage },
    #[error("route sync in namespace {netns}: {what} dump kept being interrupted (NLM_F_DUMP_INTR {tries} times)")]
    DumpInterrupted { netns: String, what: &'static str, tries: usize },
}

/// What is wrong with a netlink datagram or one of its messages (the message's type and
/// offset are in [`RtSyncError::Malformed`]).
#[derive(Debug, thiserror::Error)]
pub enum BadMessage {
    #[error("datagram of {len} bytes exceeds the {buf} byte buffer")]
    Datagram { len: usize, buf: usize },
    #[error("{what} dump datagram of {len} bytes exceeds {buf}")]
    DumpDatagram { what: &'static str, len: usize, buf: usize },
    #[error("{len} trailing bytes, shorter than a header")]
    Trailing { len: usize },
    #[error("nlmsg_len {len} (type {msg_type}) outside {NLMSG_HDRLEN}..={left} bytes left")]
    Length { len: usize, msg_type: u16, left: usize },
    #[error("{what} message of {len} bytes, header needs {need}")]
    Short { what: &'static str, len: usize, need: usize },
    #[error("{what} attribute: {detail}")]
    Attribute { what: &'static str, detail: String },
    #[error("{attr} of {len} bytes, want 4")]
    AttrLength { attr: &'static str, len: usize },
    #[error("nexthop message without NHA_ID")]
    NoNexthopId,
    #[error("link {index}: attribute: {detail}")]
    LinkAttribute { index: u32, detail: String },
    #[error("link {index}: IFLA_IFNAME is not UTF-8: {bytes:?}")]
    NameNotUtf8 { index: u32, bytes: Vec<u8> },
    #[error("link {index}: IFLA_IFNAME {name:?} is not 1..=15 bytes")]
    NameLength { index: u32, name: String },
    #[error("link {index}: no IFLA_IFNAME")]
    NoName { index: u32 },
    #[error("{attr} is not an IP address: {found}")]
    NotIp { attr: &'static str, found: String },
    #[error("route message: {0}")]
    Route(String),
    #[error("prefix length {len} > {max}")]
    PrefixLength { len: u8, max: u8 },
    #[error("RTA_DST {0} in a route of the other family")]
    OtherFamily(IpAddr),
    #[error("prefix {addr}/{len}: {detail}")]
    Prefix { addr: IpAddr, len: u8, detail: String },
}

/// One route as the VR should hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    pub prefix: IpNet,
    pub table: u32,
    pub kind: KernelRouteKind,
    /// The kernel's `rtm_protocol` (2 kernel, 3 boot, 4 static, 11 zebra, 12 bird, 186 bgp, ...).
    pub protocol: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelRouteKind {
    /// Forward through these next hops (one, or several for ECMP), sorted.
    Unicast(Vec<KernelNextHop>),
    Blackhole,
    Unreachable,
    Prohibit,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelNextHop {
    /// None for a connected (on-link) route.
    pub gateway: Option<IpAddr>,
    /// The interface's name inside the namespace.
    pub ifname: String,
    /// ECMP weight, 1..=255 (the kernel's rtnh_hops + 1; its largest weight, 256, reads 255).
    pub weight: u8,
}

/// A change to apply, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncEvent {
    /// Set the route for (prefix, table), replacing what was there.
    Add(KernelRoute),
    /// Remove the route for (prefix, table).
    Del(IpNet, u32),
    /// Forget everything from this source and hold exactly these routes.
    Replace(Vec<KernelRoute>),
}

/// A next hop as the kernel names it: by ifindex, resolved to a name when published.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Hop {
    gateway: Option<IpAddr>,
    ifindex: u32,
    weight: u8,
    /// Kept but unused by the kernel (its link is down): not published, revived on link up.
    dead: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Unicast(Vec<Hop>),
    Blackhole,
    Unreachable,
    Prohibit,
}

/// One kernel route at one metric.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Variant {
    metric: u32,
    protocol: u8,
    kind: Kind,
    /// RTA_PREFSRC: IPv4 flushes the route when this address goes.
    prefsrc: Option<IpAddr>,
}

type Key = (u32, IpNet);
/// Every route the namespace holds, per (table, prefix), variants sorted by metric.
type Table = BTreeMap<Key, Vec<Variant>>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    name: String,
    up: bool,
}

/// A route message reduced to what sync needs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parsed {
    key: Key,
    variant: Variant,
    v6: bool,
    /// RTA_NH_ID: the route uses a nexthop object (its hops come expanded beside it).
    nhid: Option<u32>,
}

/// What one kernel message asks of the model.
#[derive(Debug)]
enum Msg {
    NewRoute(Parsed),
    DelRoute(Parsed),
    NewLink(u32, Link),
    DelLink(u32),
    /// A nexthop object changed or went (RTM_NEWNEXTHOP / RTM_DELNEXTHOP).
    Nexthop(u32),
    /// An IPv4 address went: the kernel flushes routes preferring it as source (Linux 6.18
    /// also sends RTM_DELROUTE for them; replaying the flush is harmless either way).
    DelAddr4(IpAddr),
    Skip,
}

/// Follows one namespace's routes. See the module documentation.
pub struct RouteSync {
    netns: String,
    events: Socket,
    dumper: Socket,
    seq: u32,
    links: HashMap<u32, Link>,
    table: Table,
    /// The first poll (and the one after an overrun) publishes the whole table.
    replace_pending: bool,
    /// An overrun or a malformed message: the next poll re-dumps before anything else.
    redump_pending: bool,
    overruns: u64,
    /// Nexthop object ids routes have named: a change to one re-reads the table.
    nh_refs: HashSet<u32>,
    /// A nexthop object that routes use changed: the kernel changed those routes without a
    /// route message, and its nexthop message comes after, so a fresh dump is exact.
    resync_wanted: bool,
    buf: Vec<u8>,
}

impl std::fmt::Debug for RouteSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteSync")
            .field("netns", &self.netns)
            .field("routes", &self.table.len())
            .field("links", &self.links.len())
            .field("overruns", &self.overruns)
            .finish()
    }
}

impl RouteSync {
    /// A model of namespace `netns` over its two sockets, empty until the first dump.
    fn with_sockets(netns: &str, events: Socket, dumper: Socket, buf: Vec<u8>) -> RouteSync {
        RouteSync {
            netns: netns.to_string(),
            events,
            dumper,
            seq: 0,
            links: HashMap::new(),
            table: Table::new(),
            replace_pending: true,
            redump_pending: false,
            overruns: 0,
            nh_refs: HashSet::new(),
            resync_wanted: false,
            buf,
        }
    }

    /// Enters namespace `netns` on a short-lived thread to make the sockets there, subscribes
    /// to IPv4+IPv6 route (and link, IPv4 address) groups with a receive buffer of
    /// `rcvbuf_bytes` (forced past rmem_max: needs CAP_NET_ADMIN), then dumps links and routes.
    pub fn open(netns: &str, rcvbuf_bytes: usize) -> Result<RouteSync, RtSyncError> {
        if netns.is_empty()
            || netns.len() > 255
            || netns == "."
            || netns == ".."
            || netns.contains('/')
            || netns.contains('\0')
        {
            return Err(RtSyncError::BadNamespace(netns.to_string()));
        }
        let name = netns.to_string();
        let (events, dumper) = std::thread::spawn(move || make_sockets(&name, rcvbuf_bytes))
            .join()
            .map_err(|_| RtSyncError::Io {
                netns: netns.to_string(),
                context: "socket thread".into(),
                source: io::Error::other("panicked"),
            })?
            .map_err(|(context, source)| RtSyncError::Io {
                netns: netns.to_string(),
                context,
                source,
            })?;
        let mut rs = RouteSync::with_sockets(netns, events, dumper, vec![0; RECV_BUF]);
        let (links, table) = rs.dump_all()?;
        rs.links = links;
        rs.table = table;
        Ok(rs)
    }

    /// The namespace followed.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// The event socket: readable when notifications wait.
    pub fn fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }

    /// How many times the kernel dropped notifications (ENOBUFS) and the table was re-read.
    pub fn overruns(&self) -> u64 {
        self.overruns
    }

    /// How many routes (per table and prefix) are held now.
    pub fn route_count(&self) -> usize {
        self.table.len()
    }

    /// Drains what is waiting without blocking and appends the changes to `out`. After an
    /// overrun the table is dumped again and published as one `Replace`. Reads at most a
    /// bounded number of datagrams per call: if the fd is still readable, call again.
    pub fn poll(&mut self, out: &mut Vec<SyncEvent>) -> Result<(), RtSyncError> {
        if self.redump_pending && !self.redump()? {
            return Ok(()); // still discarding a flood; the fd stays readable
        }
        if self.replace_pending {
            out.push(SyncEvent::Replace(self.snapshot()));
            self.replace_pending = false;
        }
        let mut datagrams = 0;
        while datagrams < DATAGRAMS_PER_POLL {
            let n = match recv(&self.events, &mut self.buf, libc::MSG_DONTWAIT) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.overruns += 1;
                    tracing::warn!(netns = %self.netns, overruns = self.overruns,
                        "route notifications overran the receive buffer; re-reading the table");
                    self.redump_pending = true;
                    if !self.redump()? {
                        return Ok(());
                    }
                    out.push(SyncEvent::Replace(self.snapshot()));
                    self.replace_pending = false;
                    datagrams += 1;
                    continue;
                }
                Err(e) => return Err(self.io("reading notifications", e)),
            };
            datagrams += 1;
            if n > self.buf.len() {
                // The kernel never sends more than RECV_BUF, but a cut datagram would lose
                // changes: treat it as loss.
                self.redump_pending = true;
                return Err(RtSyncError::Malformed {
                    netns: self.netns.clone(),
                    msg_type: 0,
                    offset: 0,
                    what: BadMessage::Datagram { len: n, buf: RECV_BUF },
                });
            }
            let data = std::mem::take(&mut self.buf);
            let r = self.handle_datagram(&data[..n], out);
            self.buf = data;
            if let Err(e) = r {
                self.redump_pending = true;
                return Err(e);
            }
        }
        if self.resync_wanted {
            self.resync(out)?;
        }
        Ok(())
    }

    /// Re-reads links and routes and publishes the difference from what was published.
    /// Notifications still queued are older or newer than the dump; either way applying them
    /// after it ends in the kernel's state, since each sets what it names.
    fn resync(&mut self, out: &mut Vec<SyncEvent>) -> Result<(), RtSyncError> {
        let (links, table) = self.dump_all()?;
        let old_links = std::mem::replace(&mut self.links, links);
        let old_table = std::mem::replace(&mut self.table, table);
        self.resync_wanted = false;
        let name_old = |i: u32| old_links.get(&i).map(|l| l.name.as_str());
        let name_new = |i: u32| self.links.get(&i).map(|l| l.name.as_str());
        let keys: std::collections::BTreeSet<&Key> =
            old_table.keys().chain(self.table.keys()).collect();
        for key in keys {
            let before = old_table.get(key).and_then(|v| publish(key, v, &name_old));
            let after = self.table.get(key).and_then(|v| publish(key, v, &name_new));
            push_change(out, key, before, after);
        }
        Ok(())
    }

    fn io(&self, context: &str, source: io::Error) -> RtSyncError {
        RtSyncError::Io { netns: self.netns.clone(), context: context.to_string(), source }
    }

    /// After loss: discard what is queued (the dump covers it; replaying it after the dump
    /// could undo newer state), then dump everything. `Ok(false)`: notifications kept coming
    /// for a whole bounded round of discarding, so the dump waits for a later poll (the fd
    /// stays readable). Keeps `redump_pending` set until the dump succeeds.
    fn redump(&mut self) -> Result<bool, RtSyncError> {
        for _ in 0..DATAGRAMS_PER_POLL {
            match recv(&self.events, &mut self.buf, libc::MSG_DONTWAIT) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let (links, table) = self.dump_all()?;
                    self.links = links;
                    self.table = table;
                    self.redump_pending = false;
                    self.resync_wanted = false;
                    self.replace_pending = true;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.overruns += 1,
                Err(e) => return Err(self.io("discarding notifications after an overrun", e)),
            }
        }
        Ok(false)
    }

    fn name(&self, ifindex: u32) -> Option<&str> {
        self.links.get(&ifindex).map(|l| l.name.as_str())
    }

    fn snapshot(&self) -> Vec<KernelRoute> {
        self.table.iter().filter_map(|(k, v)| publish(k, v, &|i| self.name(i))).collect()
    }

    fn handle_datagram(
        &mut self,
        data: &[u8],
        out: &mut Vec<SyncEvent>,
    ) -> Result<(), RtSyncError> {
        for m in messages(data) {
            let (offset, hdr, payload) =
                m.map_err(|(offset, what)| self.malformed(0, offset, what))?;
            if hdr.msg_type == NLMSG_OVERRUN {
                // Never sent on rtnetlink today; if it ever is, it means what ENOBUFS means.
                self.overruns += 1;
                self.redump_pending = true;
                continue;
            }
            let msg = parse_event(hdr.msg_type, payload)
                .map_err(|what| self.malformed(hdr.msg_type, offset, what))?;
            self.apply(msg, hdr.flags, out);
        }
        Ok(())
    }

    fn malformed(&self, msg_type: u16, offset: usize, what: BadMessage) -> RtSyncError {
        RtSyncError::Malformed { netns: self.netns.clone(), msg_type, offset, what }
    }

    fn apply(&mut self, msg: Msg, flags: u16, out: &mut Vec<SyncEvent>) {
        match msg {
            Msg::Skip => {}
            Msg::Nexthop(id) => {
                if self.nh_refs.contains(&id) {
                    self.resync_wanted = true;
                }
            }
            Msg::DelAddr4(addr) => {
                let keys: Vec<Key> = self
                    .table
                    .iter()
                    .filter(|(k, vs)| {
                        !k.1.addr().is_ipv6() && vs.iter().any(|v| v.prefsrc == Some(addr))
                    })
                    .map(|(k, _)| *k)
                    .collect();
                for key in keys {
                    let before = self.published(&key);
                    if let Some(vs) = self.table.get_mut(&key) {
                        vs.retain(|v| v.prefsrc != Some(addr));
                        if vs.is_empty() {
                            self.table.remove(&key);
                        }
                    }
                    let after = self.published(&key);
                    push_change(out, &key, before, after);
                }
            }
            Msg::DelLink(index) => {
                let old = self.links.get(&index).cloned();
                self.link_change(index, old, None, out);
            }
            Msg::NewLink(index, link) => {
                let old = self.links.get(&index).cloned();
                if old.as_ref() != Some(&link) {
                    self.link_change(index, old, Some(link), out);
                }
            }
            // One search of the table per message, and the state before published only when
            // there was one: a full table's load is half a million new prefixes.
            Msg::NewRoute(p) => {
                if let Some(id) = p.nhid {
                    self.nh_refs.insert(id);
                }
                let links = &self.links;
                let name = |i: u32| links.get(&i).map(|l| l.name.as_str());
                let variants = self.table.entry(p.key).or_default();
                let before = publish(&p.key, variants, &name);
                match variants.iter_mut().find(|v| v.metric == p.variant.metric) {
                    Some(v) if p.v6 && flags & NLM_F_APPEND != 0 && flags & NLM_F_REPLACE == 0 => {
                        merge(v, p.variant)
                    }
                    // IPv4 append adds a second alias that the kernel uses only once the first
                    // is gone: the first stays.
                    Some(_) if !p.v6 && flags & NLM_F_APPEND != 0 => {}
                    // IPv6 routes of one metric that differ in next hop coexist (the kernel
                    // spreads over them): merge, unless the message replaces.
                    Some(v) if p.v6 && flags & NLM_F_REPLACE == 0 => merge(v, p.variant),
                    Some(v) => *v = p.variant,
                    None => {
                        variants.push(p.variant);
                        variants.sort_by_key(|v| v.metric);
                    }
                }
                let after = publish(&p.key, variants, &name);
                push_change(out, &p.key, before, after);
            }
            Msg::DelRoute(p) => {
                let links = &self.links;
                let name = |i: u32| links.get(&i).map(|l| l.name.as_str());
                if let Some(variants) = self.table.get_mut(&p.key) {
                    let before = publish(&p.key, variants, &name);
                    if let Some(i) = variants.iter().position(|v| v.metric == p.variant.metric) {
                        let gone = match (&mut variants[i].kind, &p.variant.kind) {
                            // IPv6 deletes single siblings: drop only the hops named.
                            (Kind::Unicast(have), Kind::Unicast(del)) if p.v6 => {
                                have.retain(|h| {
                                    !del.iter()
                                        .any(|d| d.gateway == h.gateway && d.ifindex == h.ifindex)
                                });
                                have.is_empty()
                            }
                            _ => true,
                        };
                        if gone {
                            variants.remove(i);
                        }
                    }
                    let after = publish(&p.key, variants, &name);
                    if variants.is_empty() {
                        self.table.remove(&p.key);
                    }
                    push_change(out, &p.key, before, after);
                }
            }
        }
    }

    fn published(&self, key: &Key) -> Option<KernelRoute> {
        self.table.get(key).and_then(|v| publish(key, v, &|i| self.name(i)))
    }

    /// A link appeared, was renamed, went down or up, or went away. The kernel changes routes
    /// through it without telling: IPv4 flushes routes whose every hop is on a link that goes
    /// down, and every route with a hop on a link that goes away; both keep the other hops of
    /// a multipath route as dead and revive them when the link comes up. That is replayed
    /// here, at the message's place in the stream, and what changes is republished (under the
    /// new name, for a rename).
    fn link_change(
        &mut self,
        index: u32,
        old: Option<Link>,
        new: Option<Link>,
        out: &mut Vec<SyncEvent>,
    ) {
        let uses = |vs: &Vec<Variant>| {
            vs.iter().any(|v| match &v.kind {
                Kind::Unicast(hops) => hops.iter().any(|h| h.ifindex == index),
                _ => false,
            })
        };
        let keys: Vec<Key> =
            self.table.iter().filter(|(_, vs)| uses(vs)).map(|(k, _)| *k).collect();
        let old_name = old.as_ref().map(|l| l.name.clone());
        let before: Vec<Option<KernelRoute>> = keys
            .iter()
            .map(|k| {
                let name = |i: u32| {
                    if i == index {
                        old_name.as_deref()
                    } else {
                        self.name(i)
                    }
                };
                self.table.get(k).and_then(|vs| publish(k, vs, &name))
            })
            .collect();
        let was_up = old.as_ref().is_some_and(|l| l.up);
        let is_up = new.as_ref().is_some_and(|l| l.up);
        let gone = new.is_none();
        match new {
            Some(l) => self.links.insert(index, l),
            None => self.links.remove(&index),
        };
        for key in &keys {
            let Some(vs) = self.table.get_mut(key) else { continue };
            let v6 = key.1.addr().is_ipv6();
            for v in vs.iter_mut() {
                let Kind::Unicast(hops) = &mut v.kind else { continue };
                let on = |h: &Hop| h.ifindex == index;
                if gone && !v6 && hops.iter().any(on) {
                    hops.clear();
                } else if gone {
                    hops.retain(|h| !on(h));
                } else if was_up && !is_up {
                    hops.iter_mut().filter(|h| on(h)).for_each(|h| h.dead = true);
                } else if !was_up && is_up && old.is_some() {
                    hops.iter_mut().filter(|h| on(h)).for_each(|h| h.dead = false);
                }
            }
            vs.retain(|v| match &v.kind {
                Kind::Unicast(hops) => hops.iter().any(|h| !h.dead),
                _ => true,
            });
            if vs.is_empty() {
                self.table.remove(key);
            }
        }
        for (key, before) in keys.iter().zip(before) {
            let after = self.published(key);
            push_change(out, key, before, after);
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    /// Dumps links, then IPv4 and IPv6 routes, each again while the kernel marks it
    /// interrupted.
    fn dump_all(&mut self) -> Result<(HashMap<u32, Link>, Table), RtSyncError> {
        let mut links = HashMap::new();
        self.dump(RTM_GETLINK, libc::AF_UNSPEC as u8, "link", |msg| {
            if let Msg::NewLink(i, l) = msg {
                links.insert(i, l);
            }
        })?;
        let mut table = Table::new();
        let mut nh_refs = HashSet::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            self.dump(RTM_GETROUTE, family, "route", |msg| {
                if let Msg::NewRoute(p) = msg {
                    if let Some(id) = p.nhid {
                        nh_refs.insert(id);
                    }
                    let variants = table.entry(p.key).or_default();
                    match variants.iter_mut().find(|v| v.metric == p.variant.metric) {
                        Some(v) if p.v6 => merge(v, p.variant),
                        Some(_) => {}
                        None => {
                            variants.push(p.variant);
                            variants.sort_by_key(|v| v.metric);
                        }
                    }
                }
            })?;
        }
        self.nh_refs.extend(nh_refs);
        Ok((links, table))
    }

    fn dump(
        &mut self,
        request: u16,
        family: u8,
        what: &'static str,
        mut take: impl FnMut(Msg),
    ) -> Result<(), RtSyncError> {
        'again: for _ in 0..DUMP_TRIES {
            let mut collected = Vec::new();
            let seq = self.next_seq();
            let body_len = if request == RTM_GETLINK { IFINFOMSG_LEN } else { RTMSG_LEN };
            let mut req = vec![0u8; NLMSG_HDRLEN + body_len];
            let len = req.len() as u32;
            req[0..4].copy_from_slice(&len.to_ne_bytes());
            req[4..6].copy_from_slice(&request.to_ne_bytes());
            req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
            req[8..12].copy_from_slice(&seq.to_ne_bytes());
            req[NLMSG_HDRLEN] = family;
            let sent =
                self.dumper.send(&req, 0).map_err(|e| self.io("sending a dump request", e))?;
            if sent != req.len() {
                return Err(self.io("sending a dump request", io::Error::other("short send")));
            }
            let mut interrupted = false;
            let mut buf = vec![0u8; RECV_BUF];
            loop {
                let n = match recv(&self.dumper, &mut buf, 0) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(self.io(&format!("reading the {what} dump"), e)),
                };
                if n > buf.len() {
                    return Err(self.malformed(
                        0,
                        0,
                        BadMessage::DumpDatagram { what, len: n, buf: RECV_BUF },
                    ));
                }
                for m in messages(&buf[..n]) {
                    let (offset, hdr, payload) =
                        m.map_err(|(offset, w)| self.malformed(0, offset, w))?;
                    if hdr.seq != seq {
                        continue; // a reply to an earlier, abandoned dump
                    }
                    if hdr.flags & NLM_F_DUMP_INTR != 0 {
                        interrupted = true;
                    }
                    match hdr.msg_type {
                        NLMSG_DONE => {
                            // DONE carries the dump's status; a negative one is an error.
                            let status = payload
                                .get(0..4)
                                .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                            if status < 0 {
                                return Err(self.io(
                                    &format!("{what} dump"),
                                    io::Error::from_raw_os_error(status.saturating_neg()),
                                ));
                            }
                            if interrupted {
                                tracing::debug!(netns = %self.netns, what, "dump interrupted; again");
                                // Read nothing more of this dump: it is finished.
                                continue 'again;
                            }
                            for msg in collected {
                                take(msg);
                            }
                            return Ok(());
                        }
                        NLMSG_ERROR => {
                            let errno = payload
                                .get(0..4)
                                .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                                .ok_or_else(|| {
                                    self.malformed(
                                        NLMSG_ERROR,
                                        offset,
                                        BadMessage::Short {
                                            what: "error",
                                            len: payload.len(),
                                            need: 4,
                                        },
                                    )
                                })?;
                            if errno == 0 {
                                continue; // an acknowledgement, not an error
                            }
                            return Err(self.io(
                                &format!("{what} dump"),
                                io::Error::from_raw_os_error(errno.saturating_neg()),
                            ));
                        }
                        NLMSG_NOOP => {}
                        t => {
                            let msg = parse_event(t, payload)
                                .map_err(|w| self.malformed(t, offset, w))?;
                            collected.push(msg);
                        }
                    }
                }
            }
        }
        Err(RtSyncError::DumpInterrupted { netns: self.netns.clone(), what, tries: DUMP_TRIES })
    }
}

/// Merges `new` into `v` (IPv6 routes of one metric): unicast hops are united, anything else
/// replaces.
fn merge(v: &mut Variant, new: Variant) {
    match (&mut v.kind, new.kind) {
        (Kind::Unicast(have), Kind::Unicast(add)) => {
            for h in add {
                if let Some(x) =
                    have.iter_mut().find(|x| x.gateway == h.gateway && x.ifindex == h.ifindex)
                {
                    x.weight = h.weight;
                } else {
                    have.push(h);
                }
            }
            have.sort();
            v.protocol = new.protocol;
        }
        (_, kind) => {
            v.kind = kind;
            v.protocol = new.protocol;
        }
    }
}

/// The route published for `key`: its lowest-metric variant, with names for ifindexes. A hop
/// through an interface that is not known (it went away; its DELLINK follows) is left out, and a
/// unicast route with no hop left is not published.
fn publish<'a>(
    key: &Key,
    variants: &[Variant],
    name: &dyn Fn(u32) -> Option<&'a str>,
) -> Option<KernelRoute> {
    let best = variants.first()?;
    let kind = match &best.kind {
        Kind::Blackhole => KernelRouteKind::Blackhole,
        Kind::Unreachable => KernelRouteKind::Unreachable,
        Kind::Prohibit => KernelRouteKind::Prohibit,
        Kind::Unicast(hops) => {
            let mut out: Vec<KernelNextHop> = hops
                .iter()
                .filter(|h| !h.dead)
                .filter_map(|h| {
                    Some(KernelNextHop {
                        gateway: h.gateway,
                        ifname: name(h.ifindex)?.to_string(),
                        weight: h.weight,
                    })
                })
                .collect();
            if out.is_empty() {
                return None;
            }
            out.sort();
            KernelRouteKind::Unicast(out)
        }
    };
    Some(KernelRoute { prefix: key.1, table: key.0, kind, protocol: best.protocol })
}

fn push_change(
    out: &mut Vec<SyncEvent>,
    key: &Key,
    before: Option<KernelRoute>,
    after: Option<KernelRoute>,
) {
    match (before, after) {
        (b, Some(a)) if b.as_ref() != Some(&a) => out.push(SyncEvent::Add(a)),
        (Some(_), None) => out.push(SyncEvent::Del(key.1, key.0)),
        _ => {}
    }
}

/// A netlink message header, checked.
#[derive(Debug, Clone, Copy)]
struct Header {
    msg_type: u16,
    flags: u16,
    seq: u32,
}

/// For [`crate::fuzzing::netlink`]: datagrams (`len u16 LE | bytes` each) applied in order to
/// a model with no namespace behind it (its sockets are never read), as `poll` applies what it
/// reads; then the model publishes its table.
pub(crate) fn fuzz_datagrams(data: &[u8]) {
    let socket = || Socket::new(NETLINK_ROUTE).expect("netlink socket");
    let mut rs = RouteSync::with_sockets("fuzz", socket(), socket(), Vec::new());
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(len) = rest.get(..2) {
        let n = usize::from(u16::from_le_bytes([len[0], len[1]])).min(rest.len() - 2);
        let _ = rs.handle_datagram(&rest[2..2 + n], &mut out);
        rest = &rest[2 + n..];
    }
    std::hint::black_box(rs.snapshot());
}

/// Splits a datagram into (offset, header, payload), checking every length.
fn messages(
    data: &[u8],
) -> impl Iterator<Item = Result<(usize, Header, &[u8]), (usize, BadMessage)>> + '_ {
    let mut off = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || off >= data.len() {
            return None;
        }
        let rest = &data[off..];
        let at = off;
        let Some(h) = rest.get(..NLMSG_HDRLEN) else {
            failed = true;
            return Some(Err((at, BadMessage::Trailing { len: rest.len() })));
        };
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let hdr = Header {
            msg_type: u16::from_ne_bytes([h[4], h[5]]),
            flags: u16::from_ne_bytes([h[6], h[7]]),
            seq: u32::from_ne_bytes([h[8], h[9], h[10], h[11]]),
        };
        if len < NLMSG_HDRLEN || len > rest.len() {
            failed = true;
            return Some(Err((
                at,
                BadMessage::Length { len, msg_type: hdr.msg_type, left: rest.len() },
            )));
        }
        let payload = &rest[NLMSG_HDRLEN..len];
        // Messages are 4-byte aligned; the last one may end without padding.
        off += len.next_multiple_of(4).min(rest.len());
        Some(Ok((at, hdr, payload)))
    })
}

/// Parses one notification or dump message.
fn parse_event(msg_type: u16, payload: &[u8]) -> Result<Msg, BadMessage> {
    match msg_type {
        RTM_NEWROUTE | RTM_DELROUTE => {
            let Some(p) = parse_route(payload)? else { return Ok(Msg::Skip) };
            Ok(if msg_type == RTM_NEWROUTE { Msg::NewRoute(p) } else { Msg::DelRoute(p) })
        }
        RTM_NEWLINK | RTM_DELLINK => {
            let (index, link) = parse_link(payload)?;
            Ok(if msg_type == RTM_NEWLINK {
                Msg::NewLink(index, link)
            } else {
                Msg::DelLink(index)
            })
        }
        RTM_DELADDR => parse_deladdr(payload),
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => parse_nexthop(payload),
        _ => Ok(Msg::Skip),
    }
}

/// nhmsg: family u8, scope u8, protocol u8, pad u8, flags u32; then NHA_ID (1).
fn parse_nexthop(payload: &[u8]) -> Result<Msg, BadMessage> {
    if payload.len() < NHMSG_LEN {
        return Err(BadMessage::Short { what: "nexthop", len: payload.len(), need: NHMSG_LEN });
    }
    for nla in NlasIterator::new(&payload[NHMSG_LEN..]) {
        let nla: NlaBuffer<&[u8]> =
            nla.map_err(|e| BadMessage::Attribute { what: "nexthop", detail: e.to_string() })?;
        if nla.kind() == NHA_ID {
            let v: [u8; 4] = nla
                .value()
                .try_into()
                .map_err(|_| BadMessage::AttrLength { attr: "NHA_ID", len: nla.value().len() })?;
            return Ok(Msg::Nexthop(u32::from_ne_bytes(v)));
        }
    }
    Err(BadMessage::NoNexthopId)
}

/// ifaddrmsg: family u8, prefixlen u8, flags u8, scope u8, index u32; then IFA_LOCAL (2).
fn parse_deladdr(payload: &[u8]) -> Result<Msg, BadMessage> {
    let Some(h) = payload.get(..IFADDRMSG_LEN) else {
        return Err(BadMessage::Short { what: "address", len: payload.len(), need: IFADDRMSG_LEN });
    };
    if h[0] != libc::AF_INET as u8 {
        return Ok(Msg::Skip);
    }
    for nla in NlasIterator::new(&payload[IFADDRMSG_LEN..]) {
        let nla: NlaBuffer<&[u8]> =
            nla.map_err(|e| BadMessage::Attribute { what: "address", detail: e.to_string() })?;
        if nla.kind() == IFA_LOCAL {
            let v: [u8; 4] = nla.value().try_into().map_err(|_| BadMessage::AttrLength {
                attr: "IFA_LOCAL",
                len: nla.value().len(),
            })?;
            return Ok(Msg::DelAddr4(IpAddr::V4(Ipv4Addr::from(v))));
        }
    }
    Ok(Msg::Skip)
}

/// ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32; then attributes.
fn parse_link(payload: &[u8]) -> Result<(u32, Link), BadMessage> {
    let Some(h) = payload.get(..IFINFOMSG_LEN) else {
        return Err(BadMessage::Short { what: "link", len: payload.len(), need: IFINFOMSG_LEN });
    };
    let index = u32::from_ne_bytes([h[4], h[5], h[6], h[7]]);
    let flags = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
    let mut name = None;
    for nla in NlasIterator::new(&payload[IFINFOMSG_LEN..]) {
        let nla: NlaBuffer<&[u8]> =
            nla.map_err(|e| BadMessage::LinkAttribute { index, detail: e.to_string() })?;
        if nla.kind() == IFLA_IFNAME {
            let v = nla.value();
            let v = v.split(|&b| b == 0).next().unwrap_or(&[]);
            let s = std::str::from_utf8(v)
                .map_err(|_| BadMessage::NameNotUtf8 { index, bytes: v.to_vec() })?;
            if s.is_empty() || s.len() > 15 {
                return Err(BadMessage::NameLength { index, name: s.into() });
            }
            name = Some(s.to_string());
        }
    }
    let name = name.ok_or(BadMessage::NoName { index })?;
    Ok((index, Link { name, up: flags & IFF_UP != 0 }))
}

fn route_ip(a: &RouteAddress, what: &'static str) -> Result<IpAddr, BadMessage> {
    match a {
        RouteAddress::Inet(a) => Ok(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Ok(IpAddr::V6(*a)),
        other => Err(BadMessage::NotIp { attr: what, found: format!("{other:?}") }),
    }
}

fn via_ip(v: &RouteVia) -> Result<IpAddr, BadMessage> {
    match v {
        RouteVia::Inet(a) => Ok(IpAddr::V4(*a)),
        RouteVia::Inet6(a) => Ok(IpAddr::V6(*a)),
        other => Err(BadMessage::NotIp { attr: "RTA_VIA", found: format!("{other:?}") }),
    }
}

/// Parses a route message; `None` for routes sync does not publish (see the module doc).
fn parse_route(payload: &[u8]) -> Result<Option<Parsed>, BadMessage> {
    if payload.len() < RTMSG_LEN {
        return Err(BadMessage::Short { what: "route", len: payload.len(), need: RTMSG_LEN });
    }
    let m = RouteMessage::parse(payload).map_err(|e| BadMessage::Route(e.to_string()))?;
    let h = &m.header;
    let v6 = match h.address_family {
        AddressFamily::Inet => false,
        AddressFamily::Inet6 => true,
        _ => return Ok(None),
    };
    if h.flags.contains(RouteFlags::Cloned) || h.tos != 0 || h.source_prefix_length != 0 {
        return Ok(None);
    }
    let kind = match h.kind {
        RouteType::Unicast => None,
        RouteType::BlackHole => Some(Kind::Blackhole),
        RouteType::Unreachable => Some(Kind::Unreachable),
        RouteType::Prohibit => Some(Kind::Prohibit),
        _ => return Ok(None),
    };
    let mut table = u32::from(h.table);
    let mut dst: Option<IpAddr> = None;
    let mut gateway: Option<IpAddr> = None;
    let mut oif: Option<u32> = None;
    let mut metric = 0u32;
    let mut prefsrc = None;
    let mut nhid = None;
    let mut multipath = None;
    for a in &m.attributes {
        match a {
            RouteAttribute::Destination(d) => dst = Some(route_ip(d, "RTA_DST")?),
            RouteAttribute::Gateway(g) => gateway = Some(route_ip(g, "RTA_GATEWAY")?),
            RouteAttribute::Via(v) => gateway = Some(via_ip(v)?),
            RouteAttribute::Oif(i) => oif = Some(*i),
            RouteAttribute::PrefSource(a) => prefsrc = Some(route_ip(a, "RTA_PREFSRC")?),
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::NhId(id) => nhid = Some(*id),
            RouteAttribute::MultiPath(hops) => multipath = Some(hops),
            _ => {}
        }
    }
    let (max, unspec) = if v6 {
        (128, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    } else {
        (32, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    };
    let len = h.destination_prefix_length;
    if len > max {
        return Err(BadMessage::PrefixLength { len, max });
    }
    let addr = dst.unwrap_or(unspec);
    if addr.is_ipv6() != v6 {
        return Err(BadMessage::OtherFamily(addr));
    }
    let prefix = IpNet::new(addr, len)
        .map_err(|e| BadMessage::Prefix { addr, len, detail: e.to_string() })?
        .trunc();
    let kind = match kind {
        Some(k) => k,
        None => {
            let mut hops = Vec::new();
            if let Some(mp) = multipath {
                for nh in mp {
                    let mut gw = None;
                    for a in &nh.attributes {
                        match a {
                            RouteAttribute::Gateway(g) => gw = Some(route_ip(g, "RTA_GATEWAY")?),
                            RouteAttribute::Via(v) => gw = Some(via_ip(v)?),
                            _ => {}
                        }
                    }
                    hops.push(Hop {
                        gateway: gw,
                        ifindex: nh.interface_index,
                        weight: nh.hops.saturating_add(1),
                        dead: nh.flags.contains(RouteNextHopFlags::Dead),
                    });
                }
            } else if let Some(ifindex) = oif {
                let dead = h.flags.contains(RouteFlags::Dead);
                hops.push(Hop { gateway, ifindex, weight: 1, dead });
            }
            if hops.is_empty() {
                // A nexthop object without compat expansion.
                return Ok(None);
            }
            hops.sort();
            Kind::Unicast(hops)
        }
    };
    Ok(Some(Parsed {
        key: (table, prefix),
        variant: Variant { metric, protocol: u8::from(h.protocol), kind, prefsrc },
        v6,
        nhid,
    }))
}

fn recv(sock: &Socket, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    let mut slice: &mut [u8] = buf;
    // MSG_TRUNC makes the kernel report a datagram's real length, so a cut one is seen.
    sock.recv(&mut slice, flags | libc::MSG_TRUNC)
}

type SockErr = (String, io::Error);

fn ctx(what: &'static str) -> impl Fn(io::Error) -> SockErr {
    move |e| (what.to_string(), e)
}

/// Runs on its own thread: enters the namespace (this thread only) and makes both sockets.
fn make_sockets(netns: &str, rcvbuf: usize) -> Result<(Socket, Socket), SockErr> {
    // This short-lived thread only: the caller's thread never changes namespace.
    crate::sys::enter_netns(netns).map_err(|e| (format!("entering /run/netns/{netns}"), e))?;
    let mut events = Socket::new(NETLINK_ROUTE).map_err(ctx("netlink socket"))?;
    let size = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt on a valid socket with a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            events.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err((format!("SO_RCVBUFFORCE {rcvbuf}"), io::Error::last_os_error()));
    }
    events.bind_auto().map_err(ctx("binding the event socket"))?;
    for g in
        [RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, RTNLGRP_NEXTHOP]
    {
        events.add_membership(g).map_err(ctx("joining a route group"))?;
    }
    events.set_non_blocking(true).map_err(ctx("non-blocking event socket"))?;
    let mut dumper = Socket::new(NETLINK_ROUTE).map_err(ctx("netlink dump socket"))?;
    dumper.bind_auto().map_err(ctx("binding the dump socket"))?;
    let tv = libc::timeval { tv_sec: DUMP_TIMEOUT_S, tv_usec: 0 };
    // SAFETY: setsockopt on a valid socket with a pointer to a live timeval and its size.
    let r = unsafe {
        libc::setsockopt(
            dumper.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(("SO_RCVTIMEO on the dump socket".into(), io::Error::last_os_error()));
    }
    Ok((events, dumper))
}

/// nlmsghdr + rtmsg + attributes, as the kernel lays them out.
pub(crate) fn route_msg(
    msg_type: u16,
    family: u8,
    dst_len: u8,
    rtype: u8,
    attrs: &[(u16, &[u8])],
) -> Vec<u8> {
    let mut body = vec![family, dst_len, 0, 0, 254, 4, 0, rtype, 0, 0, 0, 0];
    for (kind, val) in attrs {
        let l = (4 + val.len()) as u16;
        body.extend_from_slice(&l.to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(val);
        while body.len() % 4 != 0 {
            body.push(0);
        }
    }
    let mut m = Vec::new();
    m.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&msg_type.to_ne_bytes());
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&body);
    m
}

/// Seed datagrams for [`crate::fuzzing::netlink`]: a route learned, a second hop, a link, the
/// route withdrawn.
pub(crate) fn fuzz_seeds() -> Vec<Vec<u8>> {
    let v4 = libc::AF_INET as u8;
    let add = route_msg(
        RTM_NEWROUTE,
        v4,
        16,
        1,
        &[
            (1, &[10, 1, 0, 0]),
            (5, &[10, 0, 0, 2]),
            (4, &3u32.to_ne_bytes()),
            (6, &20u32.to_ne_bytes()),
        ],
    );
    let v6 = route_msg(
        RTM_NEWROUTE,
        libc::AF_INET6 as u8,
        32,
        1,
        &[(1, &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), (4, &3u32.to_ne_bytes())],
    );
    let del = route_msg(RTM_DELROUTE, v4, 16, 1, &[(1, &[10, 1, 0, 0]), (4, &3u32.to_ne_bytes())]);
    let hole = route_msg(RTM_NEWROUTE, v4, 8, 6, &[(1, &[10, 0, 0, 0])]);
    vec![add.clone(), [add, v6, hole].concat(), del]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Vec<u8> {
        // 10.1.0.0/16 via 10.0.0.2 dev 3, metric 20.
        route_msg(
            RTM_NEWROUTE,
            libc::AF_INET as u8,
            16,
            1,
            &[
                (1, &[10, 1, 0, 0]),
                (5, &[10, 0, 0, 2]),
                (4, &3u32.to_ne_bytes()),
                (6, &20u32.to_ne_bytes()),
            ],
        )
    }

    /// Every message of `data`, or the first fault.
    fn parse_all(data: &[u8]) -> Result<Vec<Msg>, BadMessage> {
        let mut v = Vec::new();
        for m in messages(data) {
            let (_, h, p) = m.map_err(|(_, w)| w)?;
            v.push(parse_event(h.msg_type, p)?);
        }
        Ok(v)
    }

    #[test]
    fn route_sync_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<RouteSync>();
    }

    #[test]
    fn bad_namespace_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", "x\0y"] {
            let e = RouteSync::open(bad, 1 << 20).unwrap_err();
            assert!(matches!(e, RtSyncError::BadNamespace(_)), "{bad:?}: {e}");
        }
        let e = RouteSync::open("rnl-no-such-namespace", 1 << 20).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("/run/netns/rnl-no-such-namespace"), "{text}");
    }

    #[test]
    fn parses_a_route_fixture() {
        let msgs = parse_all(&good()).unwrap();
        let [Msg::NewRoute(p)] = &msgs[..] else { panic!("{msgs:?}") };
        assert_eq!(p.key, (254, "10.1.0.0/16".parse().unwrap()));
        assert_eq!(p.variant.metric, 20);
        assert_eq!(p.variant.protocol, 4);
        assert_eq!(
            p.variant.kind,
            Kind::Unicast(vec![Hop {
                gateway: Some("10.0.0.2".parse().unwrap()),
                ifindex: 3,
                weight: 1,
                dead: false
            }])
        );
    }

    /// rtnexthop: len u16, flags u8, hops u8, ifindex u32; then RTA_GATEWAY.
    fn rtnh(hops: u8, ifindex: u32, gw: [u8; 4]) -> Vec<u8> {
        let mut v = 16u16.to_ne_bytes().to_vec();
        v.extend_from_slice(&[0, hops]);
        v.extend_from_slice(&ifindex.to_ne_bytes());
        v.extend_from_slice(&8u16.to_ne_bytes());
        v.extend_from_slice(&5u16.to_ne_bytes());
        v.extend_from_slice(&gw);
        v
    }

    #[test]
    fn parses_weighted_multipath_and_refuses_a_hop_past_its_attribute() {
        let mut mp = rtnh(1, 3, [10, 0, 0, 2]);
        mp.extend(rtnh(0, 4, [10, 0, 0, 3]));
        let m =
            route_msg(RTM_NEWROUTE, libc::AF_INET as u8, 8, 1, &[(1, &[10, 0, 0, 0]), (9, &mp)]);
        let msgs = parse_all(&m).unwrap();
        let [Msg::NewRoute(p)] = &msgs[..] else { panic!("{msgs:?}") };
        let Kind::Unicast(hops) = &p.variant.kind else { panic!("{p:?}") };
        let got: Vec<(u32, u8)> = hops.iter().map(|h| (h.ifindex, h.weight)).collect();
        assert_eq!(got, [(3, 2), (4, 1)]);
        // The second hop claims 40 bytes inside a 32-byte RTA_MULTIPATH.
        let mut bad = mp.clone();
        bad[16..18].copy_from_slice(&40u16.to_ne_bytes());
        let m =
            route_msg(RTM_NEWROUTE, libc::AF_INET as u8, 8, 1, &[(1, &[10, 0, 0, 0]), (9, &bad)]);
        let err = parse_all(&m).unwrap_err().to_string();
        assert!(err.contains("route message"), "{err}");
    }

    #[test]
    fn truncated_attribute_is_an_error() {
        let mut m = good();
        // The RTA_GATEWAY attribute (second, at 16+12+8) claims 40 bytes.
        let at = NLMSG_HDRLEN + RTMSG_LEN + 8;
        m[at..at + 2].copy_from_slice(&40u16.to_ne_bytes());
        let err = parse_all(&m).unwrap_err().to_string();
        assert!(err.contains("route message"), "{err}");
        // An attribute with a 3-byte IPv4 address.
        let m = route_msg(RTM_NEWROUTE, libc::AF_INET as u8, 16, 1, &[(1, &[10, 1, 0])]);
        assert!(parse_all(&m).is_err());
        // A message longer than its datagram.
        let mut m = good();
        m.truncate(m.len() - 4);
        let err = parse_all(&m).unwrap_err().to_string();
        assert!(err.contains("nlmsg_len"), "{err}");
        // A header cut short.
        let m = &good()[..10];
        assert!(parse_all(m).unwrap_err().to_string().contains("shorter than a header"));
        // A prefix length past the family's.
        let m = route_msg(RTM_NEWROUTE, libc::AF_INET as u8, 33, 1, &[(1, &[10, 1, 0, 0])]);
        assert!(parse_all(&m).unwrap_err().to_string().contains("prefix length 33"));
        // A link message without a name, and one too short for its header.
        let mut l = vec![0u8; NLMSG_HDRLEN + 8];
        l[0..4].copy_from_slice(&((NLMSG_HDRLEN + 8) as u32).to_ne_bytes());
        l[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
        assert!(parse_all(&l).unwrap_err().to_string().contains("header needs"));
    }

    /// Every cut and every single-byte corruption of a valid datagram parses or fails, never
    /// panics.
    #[test]
    fn damaged_fixtures_never_panic() {
        let mut two = good();
        two.extend(route_msg(
            RTM_DELROUTE,
            libc::AF_INET6 as u8,
            48,
            1,
            &[
                (1, &[0x20, 1, 0xd, 0xb8, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                (4, &2u32.to_ne_bytes()),
            ],
        ));
        let mut mp = rtnh(1, 3, [10, 0, 0, 2]);
        mp.extend(rtnh(0, 4, [10, 0, 0, 3]));
        two.extend(route_msg(
            RTM_NEWROUTE,
            libc::AF_INET as u8,
            8,
            1,
            &[(1, &[10, 0, 0, 0]), (9, &mp)],
        ));
        for cut in 0..two.len() {
            let _ = parse_all(&two[..cut]);
        }
        for i in 0..two.len() {
            for v in [0u8, 1, 3, 0x7f, 0xff] {
                let mut m = two.clone();
                m[i] = v;
                let _ = parse_all(&m);
            }
        }
    }
}
