//! The integration tests of `fleet`: one module a file, one binary, so the test build compiles
//! and links them once rather than once a file. `scripts/run-tests` runs each module in a
//! process of its own (named `fleet/MODULE`, as when each file was a binary); by hand:
//! `cargo test -p fleet --test it MODULE::`.

#[path = "../common/mod.rs"]
mod common;

mod controller_etcd;
mod drain_etcd;
mod etcd_cluster;
