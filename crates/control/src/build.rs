//! Building a host from a topology: its ports, VRs and switches, as one engine.

use std::fmt;

use dataplane::config::VrConfig;
use dataplane::{Engine, Switch, Vr};
use ports::mem::{self, MemPort};
use ports::Port;

use crate::{PortKind, Topology};

/// Slots per direction of an internal link.
const LINK_RING: usize = 1024;

/// An engine built from a topology, and the outside end of each `mem` port (`None` where
/// the port's other end is inside the host: links).
pub struct Built {
    pub engine: Engine,
    pub outside: Vec<Option<MemPort>>,
}

impl Built {
    /// Takes the outside end of `mem` port `name`.
    pub fn take_outside(&mut self, topo: &Topology, name: &str) -> Result<MemPort, BuildError> {
        let i =
            topo.port_index(name).ok_or_else(|| BuildError(format!("no port named {name:?}")))?;
        self.outside[i].take().ok_or_else(|| {
            BuildError(format!("port {name:?} has no outside end (or it was taken)"))
        })
    }
}

/// Why a host could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError(pub String);

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

/// Builds the engine of `topo`, with `vrs` in place of the topology's VRs when given (callers
/// that add routes, like the demo). Kernel ports (AF_XDP, AF_PACKET, tap) are opened on their
/// interfaces, which must exist (`routeplex up` makes those of hosts).
pub fn engine(topo: &Topology, vrs: Option<&[VrConfig]>) -> Result<Built, BuildError> {
    engine_with_burst(topo, vrs, ports::MAX_BURST)
}

/// As [`engine`], receiving at most `burst` (1..=256) frames per port and poll.
pub fn engine_with_burst(
    topo: &Topology,
    vrs: Option<&[VrConfig]>,
    burst: usize,
) -> Result<Built, BuildError> {
    let n = topo.ports.len();
    let mut ours: Vec<Option<Box<dyn Port>>> = (0..n).map(|_| None).collect();
    let mut outside: Vec<Option<MemPort>> = (0..n).map(|_| None).collect();
    for (i, p) in topo.ports.iter().enumerate() {
        match &p.kind {
            &PortKind::Mem { ring } => {
                let (a, b) = mem::pair(&p.name, &format!("{}-outside", p.name), ring);
                ours[i] = Some(Box::new(a));
                outside[i] = Some(b);
            }
            // Both ends of a link are the engine's: made once, from the lower end.
            &PortKind::Link { peer } if i < usize::from(peer) => {
                let (a, b) = mem::pair(&p.name, &topo.ports[usize::from(peer)].name, LINK_RING);
                ours[i] = Some(Box::new(a));
                ours[usize::from(peer)] = Some(Box::new(b));
            }
            PortKind::Link { .. } => {}
            PortKind::AfXdp(a) => {
                let opts = ports::afxdp::AfXdpOptions::default();
                let p = ports::afxdp::AfXdpPort::open(a.ifname(), &opts)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
            PortKind::AfPacket(a) => {
                let opts = ports::afpacket::AfPacketOptions::default();
                let p = ports::afpacket::AfPacketPort::open(a.ifname(), &opts)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
            PortKind::Memif(m) => {
                let mut o = ports::memif::MemifOptions::new(m.socket.clone());
                o.id = m.id;
                o.secret = m.secret.clone();
                o.queues = m.queues;
                o.log2_ring_size = m.log2_ring;
                o.buffer_size = m.buffer;
                o.name = p.name.clone();
                if m.interrupt {
                    o.rx_mode = ports::memif::RxMode::Interrupt;
                }
                let port = if m.server {
                    ports::memif::MemifPort::server(o)
                } else {
                    ports::memif::MemifPort::client(o)
                };
                ours[i] =
                    Some(Box::new(port.map_err(|e| BuildError(format!("port {}: {e}", p.name)))?));
            }
            PortKind::Tap { ifname } => {
                let p = ports::tap::TapPort::create(ifname)
                    .map_err(|e| BuildError(format!("port {}: {e}", p.name)))?;
                ours[i] = Some(Box::new(p));
            }
        }
    }
    let ours = ours
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            p.ok_or_else(|| {
                BuildError(format!("port {} is a link without its other end", topo.ports[i].name))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vrs = vrs
        .unwrap_or(&topo.vrs)
        .iter()
        .map(Vr::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BuildError(e.0))?;
    let switches = topo
        .switches
        .iter()
        .map(Switch::new)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| BuildError(e.0))?;
    let engine = Engine::build(ours, vrs, switches, burst).map_err(|e| BuildError(e.0))?;
    Ok(Built { engine, outside })
}
