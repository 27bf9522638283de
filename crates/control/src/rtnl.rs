//! A synchronous rtnetlink client for what [`crate::netns`] makes: links (veth pairs, up/down,
//! MTU, MAC, namespace, delete), addresses and routes, one request at a time.
//!
//! Contract: each request carries NLM_F_ACK and is answered before the next is sent; a
//! refusal becomes [`NetError::Os`] naming the object, the operation and the kernel's errno
//! (with its extended-ack message when it gives one). A socket acts in the namespace it was
//! opened in ([`Rtnl::open_in`] opens it there from a short-lived thread, so no other thread
//! changes namespace). Replies are read with their lengths checked; nothing here blocks past
//! [`REPLY_TIMEOUT`].

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use ipnet::IpNet;
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK,
    NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket};

/// Why making, changing or removing a namespace or interface failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The kernel refused an operation, or it could not be asked: "veth rpx-pa/eth0@pa:
    /// create: File exists (os error 17)".
    #[error("{object}: {op}: {source}")]
    Os { object: String, op: &'static str, source: io::Error },
    /// The kernel's answer broke the netlink format.
    #[error("{object}: {op}: malformed netlink answer: {what}")]
    Reply { object: String, op: &'static str, what: String },
    /// An object routeplex would make exists already, and is not routeplex's.
    #[error("{what} exists and routeplex did not make it: {remedy}")]
    InTheWay { what: String, remedy: String },
}

/// How long a request waits for its answer. rtnetlink answers within the send (the kernel
/// handles the request in the sender's context), so this only bounds a lost answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Receive buffer: an answer to a request here is one link message (a few KiB with its
/// statistics) or an acknowledgement; a larger one is an error, not cut silently.
const REPLY_BYTES: usize = 64 * 1024;

const NLMSG_HDRLEN: usize = 16;
const RTM_NEWLINK: u16 = 16;
/// nlmsgerr's extended-ack attribute holding the kernel's message.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// In an acknowledgement's flags: extended-ack attributes follow.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// In an acknowledgement's flags: the request is echoed as its header alone.
const NLM_F_CAPPED: u16 = 0x100;

/// An rtnetlink socket in one network namespace.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
    /// The namespace, for error messages; `None` for the caller's own.
    ns: Option<String>,
}

impl Rtnl {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> Result<Rtnl, NetError> {
        Rtnl::new(None)
    }

    /// A socket in namespace `ns` (`/run/netns/NS`), opened from a thread that enters it and
    /// ends: the socket stays in `ns`, the caller's thread never moves.
    pub fn open_in(ns: &str) -> Result<Rtnl, NetError> {
        in_netns(ns, || Rtnl::new(Some(ns)))
    }

    fn new(ns: Option<&str>) -> Result<Rtnl, NetError> {
        let object = match ns {
            Some(ns) => format!("netlink socket in namespace {ns}"),
            None => "netlink socket".to_string(),
        };
        let err = |op| {
            let object = object.clone();
            move |source| NetError::Os { object, op, source }
        };
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(err("open"))?;
        sock.bind_auto().map_err(err("bind"))?;
        // The kernel's reason in words ("MTU greater than device maximum"), and acks without
        // a copy of the request. Both are conveniences: older kernels refuse them harmlessly.
        let _ = sock.set_ext_ack(true);
        let _ = sock.set_cap_ack(true);
        crate::sys::set_rcvtimeo(&sock, REPLY_TIMEOUT).map_err(err("SO_RCVTIMEO"))?;
        Ok(Rtnl { sock, seq: 0, buf: vec![0; REPLY_BYTES], ns: ns.map(str::to_string) })
    }

    /// " in namespace NS", or nothing for the caller's own.
    fn at(&self) -> String {
        self.ns.as_ref().map(|n| format!(" in namespace {n}")).unwrap_or_default()
    }

    /// Sends `msg` with `flags` and NLM_F_ACK, and reads until its acknowledgement. Returns
    /// the interface index of an RTM_NEWLINK answer among the replies (RTM_GETLINK's), if any.
    fn ask(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        object: &str,
        op: &'static str,
    ) -> Result<Option<u32>, NetError> {
        let object = format!("{object}{}", self.at());
        let os = |source| NetError::Os { object: object.clone(), op, source };
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        header.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        m.finalize();
        let mut out = vec![0; m.buffer_len()];
        m.serialize(&mut out);
        self.sock.send(&out, 0).map_err(os)?;
        let mut index = None;
        loop {
            let n = recv(&self.sock, &mut self.buf).map_err(os)?;
            if n > self.buf.len() {
                return Err(reply_err(&object, op, format!("a {n}-byte answer")));
            }
            match read_answer(&self.buf[..n], self.seq, &mut index) {
                Ok(Some(Answer::Ack)) => return Ok(index),
                Ok(Some(Answer::Refused(source))) => return Err(os(source)),
                Ok(None) => {}
                Err(Garbled(what)) => return Err(reply_err(&object, op, what)),
            }
        }
    }

    /// Makes veth pair `name` (here) / `peer` (in the namespace `peer_ns` is open on), both
    /// with MTU `mtu`, as `ip link add NAME mtu M type veth peer name PEER mtu M netns NS` does.
    pub fn add_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_ns: (&str, &File),
        mtu: u16,
    ) -> Result<(), NetError> {
        let mut p = LinkMessage::default();
        p.attributes = vec![
            LinkAttribute::IfName(peer.to_string()),
            LinkAttribute::Mtu(mtu.into()),
            LinkAttribute::NetNsFd(peer_ns.1.as_raw_fd()),
        ];
        let mut m = named(name);
        m.attributes.push(LinkAttribute::Mtu(mtu.into()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(p))),
        ]));
        let object = format!("veth {name}/{peer}@{}", peer_ns.0);
        let msg = RouteNetlinkMessage::NewLink(m);
        self.ask(msg, NLM_F_CREATE | NLM_F_EXCL, &object, "create").map(drop)
    }

    /// Takes link `name` up or down.
    pub fn set_up(&mut self, name: &str, up: bool) -> Result<(), NetError> {
        let mut m = named(name);
        m.header.change_mask = LinkFlags::Up;
        if up {
            m.header.flags = LinkFlags::Up;
        }
        let op = if up { "set up" } else { "set down" };
        self.ask(RouteNetlinkMessage::NewLink(m), 0, &format!("link {name}"), op).map(drop)
    }

    /// Sets link `name`'s MTU.
    pub fn set_mtu(&mut self, name: &str, mtu: u16) -> Result<(), NetError> {
        let mut m = named(name);
        m.attributes.push(LinkAttribute::Mtu(mtu.into()));
        let op = "set mtu";
        self.ask(RouteNetlinkMessage::NewLink(m), 0, &format!("link {name}"), op).map(drop)
    }

    /// Sets link `name`'s MAC address.
    pub fn set_mac(&mut self, name: &str, mac: wire::MacAddr) -> Result<(), NetError> {
        let mut m = named(name);
        m.attributes.push(LinkAttribute::Address(mac.0.to_vec()));
        let op = "set address";
        self.ask(RouteNetlinkMessage::NewLink(m), 0, &format!("link {name}"), op).map(drop)
    }

    /// Moves link `name` into the namespace `ns` is open on.
    pub fn set_netns(&mut self, name: &str, ns: (&str, &File)) -> Result<(), NetError> {
        let mut m = named(name);
        m.attributes.push(LinkAttribute::NetNsFd(ns.1.as_raw_fd()));
        let op = "move to namespace";
        let object = format!("link {name} (to {})", ns.0);
        self.ask(RouteNetlinkMessage::NewLink(m), 0, &object, op).map(drop)
    }

    /// Deletes link `name` (for a veth, both ends).
    pub fn del_link(&mut self, name: &str) -> Result<(), NetError> {
        let m = RouteNetlinkMessage::DelLink(named(name));
        self.ask(m, 0, &format!("link {name}"), "delete").map(drop)
    }

    /// Link `name`'s interface index.
    pub fn index(&mut self, name: &str) -> Result<u32, NetError> {
        let object = format!("link {name}");
        let m = RouteNetlinkMessage::GetLink(named(name));
        match self.ask(m, 0, &object, "look up")? {
            Some(i) => Ok(i),
            None => Err(reply_err(&object, "look up", "no link in the answer".into())),
        }
    }

    /// Adds `addr` to link `dev`; `nodad` skips IPv6 duplicate address detection, so the
    /// address is usable at once (`ip address add ADDR dev DEV [nodad]`).
    pub fn add_address(&mut self, dev: &str, addr: IpNet, nodad: bool) -> Result<(), NetError> {
        let mut m = self.address(dev, addr)?;
        if nodad {
            m.header.flags = AddressHeaderFlags::Nodad;
        }
        let object = format!("address {addr} on {dev}");
        let flags = NLM_F_CREATE | NLM_F_EXCL;
        self.ask(RouteNetlinkMessage::NewAddress(m), flags, &object, "add").map(drop)
    }

    /// Removes `addr` from link `dev`.
    pub fn del_address(&mut self, dev: &str, addr: IpNet) -> Result<(), NetError> {
        let m = self.address(dev, addr)?;
        let object = format!("address {addr} on {dev}");
        self.ask(RouteNetlinkMessage::DelAddress(m), 0, &object, "delete").map(drop)
    }

    fn address(&mut self, dev: &str, addr: IpNet) -> Result<AddressMessage, NetError> {
        let mut m = AddressMessage::default();
        m.header.family = family(addr.addr());
        m.header.prefix_len = addr.prefix_len();
        m.header.scope = AddressScope::Universe;
        m.header.index = self.index(dev)?;
        m.attributes =
            vec![AddressAttribute::Local(addr.addr()), AddressAttribute::Address(addr.addr())];
        Ok(m)
    }

    /// Adds a route to `dst` (the default route when its length is 0) via gateway `via` on
    /// link `dev`, in the main table, as `ip route add DST via VIA dev DEV` does.
    pub fn add_route(&mut self, dst: IpNet, via: IpAddr, dev: &str) -> Result<(), NetError> {
        let object = if dst.prefix_len() == 0 {
            format!("route default via {via} dev {dev}")
        } else {
            format!("route {dst} via {via} dev {dev}")
        };
        if dst.addr().is_ipv4() != via.is_ipv4() {
            return Err(reply_err(&object, "add", "gateway and prefix differ in family".into()));
        }
        let mut m = RouteMessage::default();
        m.header = RouteHeader {
            address_family: family(via),
            destination_prefix_length: dst.prefix_len(),
            source_prefix_length: 0,
            tos: 0,
            table: RouteHeader::RT_TABLE_MAIN,
            protocol: RouteProtocol::Boot,
            scope: RouteScope::Universe,
            kind: RouteType::Unicast,
            flags: Default::default(),
        };
        if dst.prefix_len() > 0 {
            m.attributes.push(RouteAttribute::Destination(RouteAddress::from(dst.network())));
        }
        m.attributes.push(RouteAttribute::Gateway(RouteAddress::from(via)));
        m.attributes.push(RouteAttribute::Oif(self.index(dev)?));
        let flags = NLM_F_CREATE | NLM_F_EXCL;
        self.ask(RouteNetlinkMessage::NewRoute(m), flags, &object, "add").map(drop)
    }
}

/// The descriptor, for ioctls that act in this socket's namespace ([`crate::ethtool`]).
impl AsRawFd for Rtnl {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Runs `f` on a thread of its own inside namespace `ns` (setns(2) moves only the calling
/// thread, and that thread ends with `f`).
pub fn in_netns<T: Send>(
    ns: &str,
    f: impl FnOnce() -> Result<T, NetError> + Send,
) -> Result<T, NetError> {
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            crate::sys::enter_netns(ns).map_err(|source| NetError::Os {
                object: format!("namespace {ns}"),
                op: "enter",
                source,
            })?;
            f()
        });
        t.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A link message that names its link by IFLA_IFNAME (index 0): the kernel looks it up.
fn named(name: &str) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes.push(LinkAttribute::IfName(name.to_string()));
    m
}

fn family(a: IpAddr) -> AddressFamily {
    if a.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

fn reply_err(object: &str, op: &'static str, what: String) -> NetError {
    NetError::Reply { object: object.to_string(), op, what }
}

fn recv(sock: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    let mut slice: &mut [u8] = buf;
    // MSG_TRUNC makes the kernel report a datagram's real length, so a cut one is seen.
    sock.recv(&mut slice, libc::MSG_TRUNC)
}

/// How a request ended.
#[derive(Debug)]
enum Answer {
    Ack,
    Refused(io::Error),
}

/// An answer from the kernel that does not parse (a length past the datagram, a short
/// message): what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Garbled(String);

/// Reads one datagram of answers to request `seq`: `Some` once it holds the request's
/// acknowledgement or error, `None` if more is to come. Sets `index` from an RTM_NEWLINK
/// answer. Every length is checked against the datagram; messages for other sequence numbers
/// (a late answer to an earlier request) are skipped.
fn read_answer(
    mut data: &[u8],
    seq: u32,
    index: &mut Option<u32>,
) -> Result<Option<Answer>, Garbled> {
    while !data.is_empty() {
        if data.len() < NLMSG_HDRLEN {
            return Err(Garbled(format!("{} bytes left, less than a header", data.len())));
        }
        let len = u32_at(data, 0) as usize;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(Garbled(format!("message length {len} with {} bytes left", data.len())));
        }
        let (kind, flags, mseq) = (u16_at(data, 4), u16_at(data, 6), u32_at(data, 8));
        let payload = &data[NLMSG_HDRLEN..len];
        data = &data[len.next_multiple_of(4).min(data.len())..];
        if mseq != seq {
            continue;
        }
        match kind {
            NLMSG_ERROR => return error_answer(payload, flags).map(Some),
            NLMSG_DONE => {}
            RTM_NEWLINK => {
                // struct ifinfomsg: family u8, pad u8, type u16, index i32, ...
                if payload.len() < 8 {
                    return Err(Garbled(format!("link message of {} bytes", payload.len())));
                }
                *index = Some(u32_at(payload, 4));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// An NLMSG_ERROR payload: errno 0 is the acknowledgement; otherwise the error, with the
/// kernel's extended-ack message when it sent one.
fn error_answer(payload: &[u8], flags: u16) -> Result<Answer, Garbled> {
    if payload.len() < 4 {
        return Err(Garbled(format!("error message of {} bytes", payload.len())));
    }
    let code = i32::from_ne_bytes(payload[..4].try_into().expect("4 bytes"));
    if code == 0 {
        return Ok(Answer::Ack);
    }
    let errno = code
        .checked_neg()
        .filter(|e| *e > 0)
        .ok_or_else(|| Garbled(format!("error code {code}")))?;
    let source = io::Error::from_raw_os_error(errno);
    let msg = (flags & NLM_F_ACK_TLVS != 0).then(|| ext_ack_msg(payload, flags)).flatten();
    Ok(Answer::Refused(match msg {
        Some(m) => io::Error::new(source.kind(), format!("{source}: {m}")),
        None => source,
    }))
}

/// NLMSGERR_ATTR_MSG from the attributes after the echoed request (its header alone when the
/// acknowledgement is capped, NETLINK_CAP_ACK); `None` when absent or malformed.
fn ext_ack_msg(payload: &[u8], flags: u16) -> Option<String> {
    let echoed = u32_at(payload.get(4..4 + NLMSG_HDRLEN)?, 0) as usize;
    let echo = if flags & NLM_F_CAPPED != 0 { NLMSG_HDRLEN } else { echoed.next_multiple_of(4) };
    let mut attrs = payload.get(4 + echo.max(NLMSG_HDRLEN)..)?;
    while attrs.len() >= 4 {
        let (alen, kind) = (usize::from(u16_at(attrs, 0)), u16_at(attrs, 2));
        if alen < 4 || alen > attrs.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let s = &attrs[4..alen];
            let s = s.split(|&b| b == 0).next().unwrap_or(s);
            return Some(String::from_utf8_lossy(s).into_owned());
        }
        attrs = &attrs[alen.next_multiple_of(4).min(attrs.len())..];
    }
    None
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn err_payload(code: i32, ext: Option<&str>) -> Vec<u8> {
        let mut p = code.to_ne_bytes().to_vec();
        p.extend_from_slice(&msg(RTM_NEWLINK, 0, 7, &[])); // the echoed header
        if let Some(s) = ext {
            let mut v = s.as_bytes().to_vec();
            v.push(0);
            p.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            p.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
            p.extend_from_slice(&v);
        }
        p
    }

    #[test]
    fn an_ack_ends_the_request_and_a_link_answer_gives_its_index() {
        let mut ifi = vec![0u8; 16];
        ifi[4..8].copy_from_slice(&42u32.to_ne_bytes());
        let mut d = msg(RTM_NEWLINK, 0, 7, &ifi);
        d.extend(msg(NLMSG_ERROR, 0, 7, &err_payload(0, None)));
        let mut index = None;
        assert!(matches!(read_answer(&d, 7, &mut index), Ok(Some(Answer::Ack))));
        assert_eq!(index, Some(42));
    }

    #[test]
    fn an_error_carries_errno_and_the_kernels_words() {
        let flags = NLM_F_ACK_TLVS | NLM_F_CAPPED;
        let d = msg(NLMSG_ERROR, flags, 7, &err_payload(-libc::EEXIST, Some("in use")));
        let Ok(Some(Answer::Refused(e))) = read_answer(&d, 7, &mut None) else { panic!() };
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().ends_with(": in use"), "{e}");
        let d = msg(NLMSG_ERROR, 0, 7, &err_payload(-libc::ENODEV, None));
        let Ok(Some(Answer::Refused(e))) = read_answer(&d, 7, &mut None) else { panic!() };
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }

    #[test]
    fn answers_to_other_requests_are_skipped() {
        let d = msg(NLMSG_ERROR, 0, 6, &err_payload(-libc::EPERM, None));
        assert!(matches!(read_answer(&d, 7, &mut None), Ok(None)));
    }

    #[test]
    fn lengths_past_the_datagram_are_errors_not_panics() {
        let good = msg(NLMSG_ERROR, NLM_F_ACK_TLVS | NLM_F_CAPPED, 7, &err_payload(-1, Some("x")));
        for cut in 0..good.len() {
            let _ = read_answer(&good[..cut], 7, &mut None);
        }
        let mut long = good.clone();
        long[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(read_answer(&long, 7, &mut None).is_err());
        let mut short = good.clone();
        short[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(read_answer(&short, 7, &mut None).is_err());
        // An attribute claiming more than is there: the errno stands, without words.
        let mut bad_attr = good;
        let at = NLMSG_HDRLEN + 4 + NLMSG_HDRLEN;
        bad_attr[at..at + 2].copy_from_slice(&200u16.to_ne_bytes());
        let Ok(Some(Answer::Refused(e))) = read_answer(&bad_attr, 7, &mut None) else { panic!() };
        assert_eq!(e.raw_os_error(), Some(1));
    }
}
