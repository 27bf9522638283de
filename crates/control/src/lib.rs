//! routeplex control: everything that may allocate, block or fail loudly.
//!
//! The data plane is pure logic over batches and trusts its configuration; this crate is where
//! that configuration comes from and where it is checked. For now that is the topology model —
//! a YAML file of ports, switches and virtual routers, validated into [`dataplane::config`]
//! types, with every rejection naming the file, line, column, field and offending value — and
//! building an engine from it ([`build`]), or cells for several workers, and running those
//! workers as threads that can move VRs between them and change their reservations while
//! traffic flows ([`runtime`]). Later: applying topology diffs, the API server, metrics and
//! Linux control-plane sync.
#![deny(unsafe_code)]

pub mod api;
pub mod build;
pub mod capture;
pub mod checkpoint;
pub mod cpsync;
pub mod daemon;
mod error;
pub mod impair;
pub mod journal;
pub mod metrics;
pub mod migrate;
pub mod model;
pub mod msr;
pub mod netns;
pub mod node;
pub mod pcapng;
pub mod replicas;
pub mod rtsync;
pub mod runtime;
pub mod snapshot;
pub mod sys;
pub mod topology;

pub use error::ControlError;
pub use node::{Node, Plan};

pub use topology::{
    Attach, ErrorKind, HostSpec, MemifSpec, MigrationConfig, PortKind, PortSpec, Topology,
    TopologyError, VhostUserSpec, VrSchedule, Workers,
};
