//! The integration tests of `dataplane`: one module a file, one binary, so the test build compiles
//! and links them once rather than once a file. `scripts/run-tests` runs each module in a
//! process of its own (named `dataplane/MODULE`, as when each file was a binary); by hand:
//! `cargo test -p dataplane --test it MODULE::`.
//!
//! Binaries of their own (tests/*.rs), because they:
//! - count allocations with a global allocator of their own: no_alloc, switch_no_alloc, vr_heap, multipath.

#[path = "../common/mod.rs"]
mod common;
#[path = "../snoop_frames/mod.rs"]
mod snoop_frames;

mod build;
mod coverage;
mod density_cost;
mod drop_doc;
mod drops;
mod forwarding;
mod garbage;
mod handoff;
mod icmp;
mod impair;
mod ingress;
mod msr;
mod multi_vr;
mod neighbor_flood;
mod neighbors;
mod observe;
mod punt;
mod replicas;
mod reservation;
mod rfc;
mod smoke;
mod snooping;
mod switch;
mod switch_1024;
