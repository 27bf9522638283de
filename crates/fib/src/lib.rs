//! Per-VR longest-prefix match for IPv4 and IPv6: the routing table of one virtual router.
//!
//! Contract:
//! - The [`Rib`] (prefix → [`NextHop`]) is the source of truth. Everything else is derived
//!   from it and can be rebuilt from it at any time.
//! - A [`Poptrie`] is the compiled forwarding structure: a Poptrie-class compressed trie
//!   (direct pointing on the top bits, then 64-way nodes indexed by popcount), a few MiB for a
//!   full Internet table and about 1 KiB empty. It is immutable once built.
//! - A [`Fib`] owns the RIB and publishes compiled versions by atomic pointer swap
//!   (`arc-swap`): each update builds a new version off to the side (patching only the part
//!   of the structure the change touches, see [`poptrie`]'s cost model) and swaps it in.
//! - Readers ([`FibReader`], one per data-plane worker) load a version once per batch and
//!   never block, not even while a version is being published; a loaded version never changes
//!   under them.
//!
//! Lookups answer [`NO_ROUTE`] (0) when nothing matches; 0 is therefore never a next hop in
//! the RIB. Keys are host-byte-order integers: `u32` for IPv4, `u128` for IPv6 ([`Key`]).
//!
//! ```
//! use fib::{Change, Fib4, NO_ROUTE};
//!
//! let mut fib = Fib4::new(); // control plane: owns the RIB, publishes versions
//! fib.insert(u32::from_be_bytes([10, 0, 0, 0]), 8, 1);
//! fib.apply([Change::Insert(0, 0, 2), Change::Insert(0x0A01_0000, 16, 3)]); // one publish
//!
//! let reader = fib.reader(); // one per data-plane worker
//! let table = reader.load(); // once per batch
//! let mut out = [NO_ROUTE; 3];
//! table.lookup_batch(&[0x0A01_0203, 0x0A02_0000, 0x0B00_0000], &mut out);
//! assert_eq!(out, [3, 1, 2]);
//! ```
//!
//! Beside the structure: [`naive`] (the obviously-correct oracle), [`prefix_file`] (route
//! files and the cache `scripts/fetch-prefixes` fills with the real Internet prefix set),
//! [`synthetic`] (seeded realistic tables) and [`bench`](mod@bench) (the lookup benchmark of
//! `routeplex bench fib`).

mod fib;
mod key;
pub mod poptrie;
mod rib;
mod sorted;

pub mod bench;
pub mod checkpoint;
pub mod naive;
pub mod prefix_file;
pub mod synthetic;

#[cfg(test)]
mod oracle;
#[cfg(test)]
mod testutil;

pub use crate::fib::{Change, Fib, FibReader, FibSnapshot, UpdateStats};
pub use crate::key::Key;
pub use crate::poptrie::{Poptrie, PoptrieStats};
pub use crate::rib::Rib;

/// Index into the VR's next-hop (adjacency) table.
pub type NextHop = u16;

/// The lookup result when no prefix matches. Never stored in a [`Rib`].
pub const NO_ROUTE: NextHop = 0;

/// The IPv4 FIB.
pub type Fib4 = Fib<u32>;
/// The IPv6 FIB.
pub type Fib6 = Fib<u128>;

/// An IPv4 network as a ([`Key`], length) pair.
pub fn key4(net: ipnet::Ipv4Net) -> (u32, u8) {
    (u32::from(net.addr()), net.prefix_len())
}

/// An IPv6 network as a ([`Key`], length) pair.
pub fn key6(net: ipnet::Ipv6Net) -> (u128, u8) {
    (u128::from(net.addr()), net.prefix_len())
}
