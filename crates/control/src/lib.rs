//! routeplex control: everything that may allocate, block or fail loudly.
//!
//! The data plane is pure logic over batches and trusts its configuration; this crate is where
//! that configuration comes from and where it is checked, and where a running host is owned:
//! - the topology model ([`topology`], typed documents in [`model`]): a YAML file of workers,
//!   hosts, ports, switches and virtual routers, validated into [`dataplane::config`] types,
//!   with every rejection naming the file, line, column, field and offending value;
//! - building engines and cells from it ([`build`]) and running them as worker threads that
//!   move VRs and change reservations while traffic flows ([`runtime`]);
//! - the running host ([`node`]): every VR's routes by source and its FIB writers, `apply`'s
//!   plans (`plan.rs`: a diff of the running topology against an edited file as typed steps,
//!   the plan's text their `Display`, refused whole when it cannot be made live), the API's
//!   handlers (one file per object in `cmd/`), snapshots, checkpoints and the route journal,
//!   and the interfaces a restart holds down ([`hold`]);
//! - the service around it ([`daemon`]): run directory, `up`/`down`, and the control socket
//!   serving the versioned JSON API ([`api`]); capture and trace ([`capture`]); the hosts'
//!   namespaces, veths, addresses and routes it makes over rtnetlink and the ethtool ioctl,
//!   with no `ip` or `ethtool` binary ([`netns`], [`rtnl`], [`ethtool`]);
//! - the Prometheus endpoint and the live topology page ([`metrics`], drawn by [`graph`]),
//!   Linux control-plane sync ([`rtsync`], [`cpsync`]),
//!   live migration between hosts ([`migrate`]) and multistage routers ([`msr`]).
#![deny(unsafe_code)]

pub mod admit;
pub mod api;
pub mod build;
pub mod capture;
pub mod checkpoint;
pub mod cpsync;
pub mod daemon;
mod error;
pub mod ethtool;
#[doc(hidden)]
pub mod fuzzing;
pub mod graph;
pub mod hold;
pub mod impair;
pub mod journal;
pub mod metrics;
pub mod migrate;
pub mod model;
pub mod msr;
mod msr_state;
pub mod netns;
pub mod node;
pub mod pcapng;
mod plan;
pub mod replicas;
pub mod rtnl;
pub mod rtsync;
pub mod runtime;
pub mod snapshot;
pub mod sys;
pub mod topology;
pub mod vr_state;

pub use error::ControlError;
pub use node::Node;
pub use plan::Plan;

pub use topology::{
    Attach, ErrorKind, HostSpec, MemifSpec, MigrationConfig, PortKind, PortSpec, Topology,
    TopologyError, VhostUserSpec, VrSchedule, Workers,
};
