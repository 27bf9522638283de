//! The routeplex data plane: classification, virtual routers, reservations and the batch
//! engine.
//!
//! Shape: a [`Cell`] is ports, the demux over them, and the VRs and switches they feed: the
//! unit a worker runs and the unit that moves between workers. A [`Worker`] is one thread's
//! scratch (the burst's buffers, shared by all its cells), its [`Clock`] and its spare-capacity
//! account; [`Worker::poll`] runs its cells. [`Engine`] is one worker with one cell. Threads,
//! pinning and moving cells between them belong to the caller (`control::runtime`).
//!
//! Contract:
//! - Sans-IO: the data plane touches ports only through [`ports::Port`], never makes a system
//!   call and never starts a thread. Time comes in as an argument (`now`, for timers and
//!   reservation periods), and the time charged to VRs with time budgets comes from a [`Clock`]
//!   the caller injects, so every behaviour is reproducible in tests with a fake clock. The one
//!   exception: the process's secret key ([`seed`]), drawn once when the first VR is built.
//! - Reservations: a VR over its budget (packets or clock time per period) loses its packets
//!   right after demux, before any VR work, counted as [`VrDrop::OverBudget`] (see `budget.rs`).
//!   With [`IngressQueues`] on, a port shared by several VRs is classified into per-VR queues
//!   first, and a VR over its budget keeps its frames queued; what overflows its queue is
//!   [`VrDrop::IngressQueueFull`], so one VR's flood cannot fill the shared ring (`ingress.rs`).
//! - Batches: a burst is classified, routed (one batched lookup per family), rewritten and
//!   grouped by egress port in one pass, with no queue between stages (but the ingress queues
//!   of shared ports, when on, between receive and the VRs).
//! - Verdicts, not errors: a bad or unroutable packet is dropped and counted by reason at the
//!   stage that decided it ([`PortDrop`] before demux, [`VrDrop`] in a VR); nothing panics on
//!   packet contents.
//! - No allocation per packet: every buffer, queue and table is sized when the engine is built.
//!   `tests/no_alloc.rs` holds this to zero allocations over a million forwarded packets.

mod budget;
mod cell;
pub mod config;
pub mod counters;
mod demux;
mod egress;
mod engine;
pub mod flowhash;
pub mod impair;
mod ingress;
mod l2;
pub mod msr;
pub mod observe;
pub mod replica;
pub mod routes;
pub mod seed;
pub mod switch;
mod types;
mod vr;
mod worker;

pub use budget::SPARE_WINDOW_NS;
pub use cell::{Cell, Feed, Redirect};
pub use config::BuildError;
pub use config::{Budget, Reservation};
pub use counters::{PortCounters, PortDrop, StageCounters, VrCounters, VrDrop};
pub use engine::Engine;
pub use ingress::{IngressQueues, MAX_INGRESS_QUEUE};
pub use observe::{CaptureRing, Captured, Dir, Reason, Tap, TraceRecord};
pub use routes::Adj;
pub use routes::{
    CheckpointError, Forward, InstallError, RouteError, RouteOp, RouteSource, RouteTable,
    TargetError,
};
pub use switch::{
    GroupRow, MemberConfig, MemberMode, StaticMac, Switch, SwitchConfig, SwitchCounters,
    SwitchDrop, DEFAULT_GROUPS, DEFAULT_GROUP_TIMEOUT_MS,
};
pub use vr::NeighborShare;
pub use vr::{
    interface_link_local, restorable, solicitation_lane, NeighborRow, NeighborState,
    RestoredNeighbor, RestoredState, Sent, Vr, VrAnswer, VrChange, DEFAULT_PUNT_BURST,
    DEFAULT_PUNT_PER_SEC,
};
pub use worker::{Clock, Worker, AWAY_NS};
