//! ARP (RFC 826) and the probe dispatcher shared with neighbor discovery.

use std::net::Ipv4Addr;

use ports::PktBuf;
use wire::{arp, MacAddr};

use super::neighbor::Learn;
use super::{Fate, Meta, NKey, Vr};
use crate::counters::VrDrop;
use crate::l2;

const ARP_ETH: u16 = wire::ethertype::ARP;

impl Vr {
    /// An ARP packet for one of our interfaces: learn the sender, answer requests for the
    /// interface's own addresses in place.
    pub(super) fn arp_in(&mut self, buf: &mut PktBuf, m: &Meta, now: u64) -> Fate {
        let l3 = m.l3 as usize;
        let Ok(a) = arp::Packet::new_checked(&buf.frame()[l3..]) else {
            return self.drop(VrDrop::ArpMalformed);
        };
        if !a.is_ethernet_ipv4() {
            return self.drop(VrDrop::ArpMalformed);
        }
        let (op, sha, spa, tpa) =
            (a.operation(), a.sender_hw_addr(), a.sender_proto_addr(), a.target_proto_addr());
        if op != arp::OP_REQUEST && op != arp::OP_REPLY {
            return self.drop(VrDrop::ArpMalformed);
        }
        let ifc = &self.ifaces[m.iface as usize];
        let ours = ifc.has_v4(tpa);
        let on_link = ifc.v4.iter().any(|n| n.contains(&spa));
        let (port, vlan, mac) = (ifc.port, ifc.vlan, ifc.mac);
        // RFC 826 merge: refresh an entry we already have; create one only when the packet is
        // addressed to us (a reply too, whether or not its incomplete entry is still there:
        // the table may have evicted it under a flood). Only a reply to us confirms
        // reachability. Senders off our subnets are not learned.
        let how = Learn { create: ours, replace: true, confirmed: ours && op == arp::OP_REPLY };
        if on_link && sha.is_unicast() && !spa.is_unspecified() {
            self.learn(NKey::v4(m.iface, spa.into()), sha, how, now);
        }
        if !ours {
            // A gratuitous ARP (RFC 5227 §3 announcement) is for everyone on the link.
            if spa == tpa && on_link {
                self.counters.local_in += 1;
                return Fate::Done;
            }
            return self.drop(VrDrop::ArpNotForUs);
        }
        if op == arp::OP_REPLY {
            // The mirror's kernel learns its neighbors from the replies its own requests drew.
            if let Some(f) = self.punt(buf, m, now) {
                return f;
            }
            self.counters.local_in += 1;
            return Fate::Done;
        }
        self.counters.local_in += 1;
        let l3 = l2::write(buf, l3, vlan, sha, mac, ARP_ETH);
        let mut r = arp::Packet::new_unchecked(&mut buf.frame_mut()[l3..l3 + arp::LEN]);
        r.set_operation(arp::OP_REPLY);
        r.set_target_hw_addr(sha);
        r.set_target_proto_addr(spa);
        r.set_sender_hw_addr(mac);
        r.set_sender_proto_addr(tpa);
        buf.set_len(l3 + arp::LEN);
        self.counters.neighbor_replies += 1;
        Fate::Tx { port, transit: false }
    }

    /// Writes a probe for `key` into `buf`: ARP request or neighbor solicitation.
    pub(super) fn probe(&mut self, buf: &mut PktBuf, key: NKey, unicast: Option<MacAddr>) -> Fate {
        if key.is_v4() {
            self.arp_request(buf, key, unicast)
        } else {
            self.solicit_for(buf, key, unicast)
        }
    }

    fn arp_request(&mut self, buf: &mut PktBuf, key: NKey, unicast: Option<MacAddr>) -> Fate {
        let f = &self.ifaces[key.iface as usize];
        let target = key.v4_addr();
        // The sender address is the interface's address on the target's subnet, so the
        // neighbor can answer (and learn us) without a route.
        let spa =
            f.v4.iter()
                .find(|n| n.contains(&target))
                .or(f.v4.first())
                .map_or(Ipv4Addr::UNSPECIFIED, |n| n.addr());
        let (port, vlan, mac) = (f.port, f.vlan, f.mac);
        buf.reset();
        buf.set_len(l2::ETH_LEN + arp::LEN);
        let l3 =
            l2::write(buf, l2::ETH_LEN, vlan, unicast.unwrap_or(MacAddr::BROADCAST), mac, ARP_ETH);
        let repr = arp::ArpRepr {
            operation: arp::OP_REQUEST,
            sender_hw: mac,
            sender_ip: spa,
            target_hw: MacAddr::default(),
            target_ip: target,
        };
        repr.emit(&mut arp::Packet::new_unchecked(&mut buf.frame_mut()[l3..l3 + arp::LEN]));
        self.counters.neighbor_requests += 1;
        Fate::Tx { port, transit: false }
    }
}
