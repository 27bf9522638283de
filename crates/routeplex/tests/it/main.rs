//! The integration tests of `routeplex`: one module a file, one binary, so the test build compiles
//! and links them once rather than once a file. `scripts/run-tests` runs each module in a
//! process of its own (named `routeplex/MODULE`, as when each file was a binary); by hand:
//! `cargo test -p routeplex --test it MODULE::`.
//!
//! Binaries of their own (tests/*.rs), because they:
//! - runs a copy of its own binary: control_surface.

#[path = "../../../fleet/tests/etcd/mod.rs"]
mod etcd;

mod bench_idle;
mod bench_pvr;
mod bench_router;
mod bench_routes;
mod bench_single;
mod bench_switch;
mod crash;
mod demo;
mod fleet;
mod fleet_drain;
mod fleet_hosts;
mod fuzz_corpus;
mod hosts;
mod impairments;
mod layers;
mod migration;
mod peers;
mod recovery;
mod scenario;
mod soak;
mod timeline;
mod workers_cli;
