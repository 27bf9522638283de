//! The integration tests of `control`: one module a file, one binary, so the test build compiles
//! and links them once rather than once a file. `scripts/run-tests` runs each module in a
//! process of its own (named `control/MODULE`, as when each file was a binary); by hand:
//! `cargo test -p control --test it MODULE::`.
//!
//! Binaries of their own (tests/*.rs), because they:
//! - run their own binary again as a child process: afxdp_queues, neighbor_flood_hosts.
//! - lowers the process's file size limit: journal_full.

#[path = "../common/mod.rs"]
mod common;
#[path = "../hosts/mod.rs"]
mod hosts;
#[path = "../metered/mod.rs"]
mod metered;
#[path = "../reply_json/mod.rs"]
mod reply_json;
#[path = "../served/mod.rs"]
mod served;

mod acknowledged;
mod api_doc;
mod apply;
mod capture;
mod control_plane;
mod daemon;
mod graph_page;
mod idle;
mod impair;
mod impair_hosts;
mod jumbo;
mod local_fragments6;
mod memif_switch;
mod metrics;
mod migrate;
mod migrate_bgp;
mod msr;
mod neighbor_recreate;
mod netns_port;
mod no_value_replies;
mod replicas;
mod replicas_ports;
mod routing_daemons;
mod rtsync;
mod snapshot;
mod snooping_hosts;
mod switched;
mod topology_doc;
mod torn;
mod vhost_qemu;
mod vxlan;
mod workers;
