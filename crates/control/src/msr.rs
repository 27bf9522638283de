//! Multistage software routers (`msrs:`) as control runs them: the load balancers on the
//! outside ends of the back-ends' queues, and the control processor's load policy.
//!
//! The back-ends are the replicas of the MSR's VR (control starts them as for any replicated
//! VR) and forward by its one route table, which control owns and publishes to every replica:
//! that is the control processor's RIB and FIB push (static routes, the API's route
//! operations, and a `control_plane: linux` daemon's routes through `cpsync`). What this
//! module adds is the front end: [`Msr::take`] takes the outside ends of the VR's ports from
//! the node and makes one [`LbPort`] on each, all sharing one [`MsrShared`] with the policy.
//! Whoever holds the outside ends (for `mem` ports, the process that sends the traffic)
//! calls [`Msr::tick`] between bursts.

use std::sync::Arc;

use dataplane::msr::{Change, LbPort, MsrControl, MsrShared};
use ports::Port;

use crate::error::ControlError;
pub use crate::msr_state::{status_rows, MsrState};
use crate::node::Node;

/// One MSR's front end: a balancer per port of its VR and its control processor's policy.
pub struct Msr {
    /// The logical router (its VR's name).
    pub name: String,
    /// One balancer per port of the VR, in the VR's interface order, named after the port.
    pub balancers: Vec<LbPort>,
    /// The control processor's policy.
    pub control: MsrControl,
    /// The state the balancers and the policy share (states, pinned flows, losses).
    pub shared: Arc<MsrShared>,
}

impl Msr {
    /// Takes the outside ends of MSR `vr`'s ports from `node` (each once) and puts a
    /// balancer on each.
    pub fn take(node: &mut Node, vr: &str) -> Result<Msr, ControlError> {
        let topo = node.topology().clone();
        let v = topo.vr_index(vr).ok_or_else(|| ControlError::NoSuchVr(vr.to_string()))?;
        let spec = topo
            .msrs
            .iter()
            .find(|m| m.vr == v)
            .ok_or_else(|| ControlError::Invalid(format!("vr {vr} is not an MSR (msrs:)")))?;
        let state = node.msr_state(vr).ok_or_else(|| {
            ControlError::State(format!("msr {vr}: no state (the node was started without it)"))
        })?;
        if state.taken {
            return Err(ControlError::State(format!("msr {vr}: its front end was taken already")));
        }
        let shared = state.shared.clone();
        let mut balancers = Vec::new();
        let mut seen = Vec::new();
        for f in &topo.vrs[v].interfaces {
            let port = &topo.ports[usize::from(f.port)].name;
            if seen.contains(port) {
                continue;
            }
            seen.push(port.clone());
            let queues = node.take_outside_queues(port).ok_or_else(|| {
                ControlError::State(format!("msr {vr}: the queues of port {port} were taken"))
            })?;
            let queues: Vec<Box<dyn Port>> =
                queues.into_iter().map(|q| Box::new(q) as Box<dyn Port>).collect();
            balancers.push(LbPort::new(port, spec.lb, shared.clone(), queues));
        }
        if let Some(state) = node.msr_state(vr) {
            state.taken = true;
        }
        let control = MsrControl::new(shared.clone(), spec.policy, spec.lb.idle_ns);
        Ok(Msr { name: vr.to_string(), balancers, control, shared })
    }

    /// The balancer on port `name`.
    pub fn balancer(&mut self, name: &str) -> Option<&mut LbPort> {
        self.balancers.iter_mut().find(|b| b.name() == name)
    }

    /// Advances every balancer and the policy to `now` (ns, any fixed origin); appends what
    /// the policy changed to `out`.
    pub fn tick(&mut self, now: u64, out: &mut Vec<Change>) {
        self.balancers.iter_mut().for_each(|b| b.tick(now));
        self.control.tick(now, out);
    }
}
