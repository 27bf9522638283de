//! routeplex fleet: a host joins a fleet whose state lives in etcd.
//!
//! Job: the [`agent`] runs beside one host's data plane, on its own thread with a
//! current-thread tokio runtime (control and the data plane never link an async runtime). It
//! is a client of two things: the host's control socket (the typed API the CLI uses:
//! `status`, `apply`, `interface_set`) and etcd. It holds a lease it keeps alive, registers
//! [`keys::host`] on that lease with the host's offer and live state, converges the host to
//! [`keys::desired`] with `apply`, and fences (takes the VRs' interfaces down) when it cannot
//! renew its lease in time, if the fleet's policy says so.
//!
//! The [`controller`] (one leads, elected through etcd) reads the fleet's desired state
//! ([`fleetdoc`]: the topology language plus placement hints), places its VRs on the live
//! hosts ([`placement`]: pure, capacity, pins, anti-affinity, stable), cuts it into one
//! topology per host, stretching switches and links that span hosts over VXLAN, and writes
//! each host's [`keys::desired`] when it changes; a host gone or cordoned loses its VRs to
//! the others.
//!
//! Contract: the fleet's configuration is the `fleet:` section of the host's topology file
//! ([`config`]), validated with file:line:col errors. Everything the agent publishes is a typed,
//! versioned JSON record ([`record`]); what the host knows of the fleet is written to
//! `fleet.json` in the service's state directory ([`record::FleetStatus`]). [`view`] reads the
//! whole fleet back for `routeplex fleet status`. Every value read from etcd is bounded
//! ([`record::MAX_VALUE`]) and checked before use; a bad one is reported, never trusted.
#![deny(unsafe_code)]

#[cfg(feature = "etcd")]
pub mod agent;
#[cfg(feature = "etcd")]
pub mod call;
pub mod config;
#[cfg(feature = "etcd")]
pub mod controller;
mod error;
pub mod fleetdoc;
#[doc(hidden)]
pub mod fuzzing;
pub mod keys;
pub mod local;
pub mod migration;
pub mod placement;
pub mod record;
pub mod tree;
#[cfg(feature = "etcd")]
pub mod view;

#[cfg(feature = "etcd")]
pub use agent::{Agent, Handle};
pub use config::{FleetConfig, Offer, Policy};
pub use error::FleetError;
