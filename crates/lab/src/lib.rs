//! routeplex's labs and benchmark harnesses: everything `routeplex test`, `bench`, `demo` and
//! `pktgen` run, as a library the command line calls.
//!
//! - Labs: the DUT drivers ([`test_cmd`]: a routeplex VR in memory or on memif, Linux
//!   namespaces, macvlan, bridge, OVS, a VM), the peers lab (iperf3 and ping through a DUT), the
//!   migration, timeline, scenario and soak labs.
//! - Benchmarks ([`bench`](mod@bench) and the `bench_*` modules), the packet generator ([`pktgen`]), the
//!   in-memory demo ([`demo`]) and the in-memory host they share ([`lab`]).
//! - What they ask of the OS ([`sys`]: pinning, signals, the TSC clock, per-thread CPU) and the
//!   allocation counter the benchmarks report from ([`alloc_count`]; the binary installs it as
//!   its global allocator).
//!
//! Contract: each entry point takes its parsed arguments (clap `Args` structs the binary embeds
//! in its command line), does what it says, prints its report (a table, or JSON with `--json`)
//! and returns `Ok(())`, or an [`Error`] that says what failed and what it was doing; a bad
//! argument is refused before anything is made. Whatever a lab makes (namespaces, veths,
//! bridges, daemons, child processes) is removed when it ends, on failure too. Labs that need
//! root or a tool (ovs-vsctl, qemu, iperf3) say so and why instead of half-running.

pub mod alloc_count;
pub mod bench;
pub mod bench_cp;
pub mod bench_fleet;
pub mod bench_idle;
pub mod bench_pairs;
pub mod bench_pvr;
pub mod bench_router;
pub mod bench_routes;
pub mod bench_switch;
pub mod bench_vhost;
pub mod demo;
pub mod dpdk_apps;
mod error;
pub mod lab;
pub mod pktgen;
pub mod sys;
pub mod test_cmd;

pub use error::{Context, Error, Result};

/// Address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    Ipv4,
    Ipv6,
}
