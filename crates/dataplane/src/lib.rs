//! The routeplex data plane: classification, virtual routers and the batch engine.
//!
//! Contract:
//! - Sans-IO: the data plane touches ports only through [`ports::Port`] and never makes a
//!   system call itself. Time comes in as an argument, so every behaviour (neighbor timers,
//!   ICMP rate limits) is reproducible in tests.
//! - Batches: a burst is classified, routed (one batched lookup per family), rewritten and
//!   grouped by egress port in one pass, with no queue between stages.
//! - Verdicts, not errors: a bad or unroutable packet is dropped and counted by reason at the
//!   stage that decided it ([`PortDrop`] before demux, [`Drop`] in a VR); nothing panics on
//!   packet contents.
//! - No allocation per packet: every buffer, queue and table is sized when the engine is built.
//!   `tests/no_alloc.rs` holds this to zero allocations over a million forwarded packets.

pub mod config;
pub mod counters;
mod demux;
mod engine;
mod l2;
pub mod switch;
mod vr;

pub use counters::{Drop, PortCounters, PortDrop, VrCounters};
pub use engine::Engine;
pub use switch::{
    MemberConfig, MemberMode, StaticMac, Switch, SwitchConfig, SwitchCounters, SwitchDrop,
};
pub use vr::{BuildError, NeighborRow, NeighborState, Vr};
