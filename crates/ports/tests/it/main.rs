//! The integration tests of `ports`: one module a file, one binary, so the test build compiles
//! and links them once rather than once a file. `scripts/run-tests` runs each module in a
//! process of its own (named `ports/MODULE`, as when each file was a binary); by hand:
//! `cargo test -p ports --test it MODULE::`.
//!
//! Binaries of their own (tests/*.rs), because they:
//! - count allocations with a global allocator of their own: memif_no_alloc, vhost_no_alloc.
//! - run their own binary again as a child process: kernel_afxdp, kernel_afxdp_queues, memif_hostile.

#[path = "../common_kernel/mod.rs"]
mod common_kernel;
#[path = "../memif_common/mod.rs"]
mod memif_common;
#[path = "../vhost_common/mod.rs"]
mod vhost_common;

mod kernel_afpacket;
mod kernel_afpacket_fanout;
mod kernel_cross;
mod kernel_tap;
mod kernel_vxlan;
mod memif_cost;
mod memif_dpdk;
mod memif_loop;
mod memif_split;
mod vhost_dpdk;
mod vhost_hostile;
